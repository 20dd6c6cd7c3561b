//! The file a trace is written to, with the bytes not written yet.
//!
//! A recording writes a few hundred MB/s for as long as it runs. Through the
//! page cache, every MB takes fresh pages, which costs more than the copy
//! into them (on this project's VM, where memory the guest freed goes back
//! to the host, about 3 ns a byte, against 0.1 by direct I/O). So a regular
//! file is written by direct I/O, in whole pages, from page-aligned buffers
//! used again and again; the last partial page goes through the page cache
//! when the file is finished. Where direct I/O is refused (a pipe, tmpfs on
//! older kernels), the same writes go through the page cache.
//!
//! A direct write returns when the device has the data, which on a busy disk
//! can take a second: a thread of its own writes the buffers, so the reader
//! of the ring never waits for the disk while buffers last.
//!
//! [`flush`](Output::flush) puts everything staged in the file, the partial
//! last page too: written where it belongs through the page cache, without
//! moving the file's position, and written again, whole, by the direct write
//! that later covers its page.

use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// Direct I/O moves whole pages between page-aligned memory and the file.
const PAGE: usize = 4096;
/// Buffers waiting for the disk, at most (about 1.3 GB): beyond this many
/// the reader of the ring waits, and the ring soon overflows. A busy disk
/// stalls direct writes for seconds (with other jobs' disk load, 118 of a
/// first cap of 128, under 2 s of a small-segment recording, were in use at
/// once), where the page cache would have held gigabytes of dirty pages;
/// this holds as much, in memory taken only while the disk is behind.
const MAX_BUFFERS: usize = 1024;
/// Buffers kept once the disk has caught up; the ones a stall added go back.
const STEADY_BUFFERS: usize = 4;

#[repr(C, align(4096))]
struct Page([u8; PAGE]);

struct Buffer {
    pages: Box<[Page]>,
    /// Bytes used, from the start.
    len: usize,
    /// Bytes after `len` to put in the file without advancing its position.
    tail: usize,
}

impl Buffer {
    fn new(pages: usize) -> Buffer {
        // SAFETY: zero bytes are a page of zeros. Zeroed by the allocator:
        // fresh pages from the kernel are not written twice.
        let pages = unsafe { Box::<[Page]>::new_zeroed_slice(pages).assume_init() };
        Buffer {
            pages,
            len: 0,
            tail: 0,
        }
    }

    fn capacity(&self) -> usize {
        self.pages.len() * PAGE
    }

    fn all(&self) -> &[u8] {
        // SAFETY: the pages are plain bytes, contiguous in one allocation.
        unsafe { std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>(), self.capacity()) }
    }

    fn all_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe {
            std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), self.capacity())
        }
    }
}

pub(super) struct Output {
    /// The buffer being filled.
    staged: Buffer,
    pages_per_buffer: usize,
    to_disk: Option<Sender<Buffer>>,
    /// Buffers the disk thread has written, to fill again.
    written: Receiver<Buffer>,
    buffers: usize,
    disk: Option<JoinHandle<io::Result<Disk>>>,
    /// A regular file (one with positions); else a pipe or a device.
    regular: bool,
}

/// The file as the disk thread leaves it.
struct Disk {
    file: File,
    direct: bool,
    /// CPU time the disk thread spent.
    cpu: Duration,
}

impl Output {
    /// Stages up to `capacity` bytes (rounded up to pages, at least two) per write.
    pub fn new(file: File, capacity: usize) -> io::Result<Output> {
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        let direct = regular && set_direct(&file, true).is_ok();
        let (to_disk, buffers) = channel::<Buffer>();
        let (done, written) = channel();
        let mut disk = Disk {
            file,
            direct,
            cpu: Duration::ZERO,
        };
        let thread = std::thread::Builder::new()
            .name("trace-writer".into())
            .spawn(move || {
                for buffer in buffers {
                    disk.write_out(&buffer.all()[..buffer.len])?;
                    disk.write_tail(&buffer.all()[buffer.len..buffer.len + buffer.tail])?;
                    // Gone only when the output is finished.
                    let _ = done.send(buffer);
                }
                disk.cpu = crate::os::thread_cpu();
                Ok(disk)
            })?;
        let pages_per_buffer = capacity.div_ceil(PAGE).max(2);
        Ok(Output {
            staged: Buffer::new(pages_per_buffer),
            pages_per_buffer,
            to_disk: Some(to_disk),
            written,
            buffers: 1,
            disk: Some(thread),
            regular,
        })
    }

    pub fn len(&self) -> usize {
        self.staged.len
    }

    /// Bytes that can be staged before [`write_pages`](Self::write_pages).
    pub fn room(&self) -> usize {
        self.staged.capacity() - self.staged.len
    }

    /// The staged bytes, from `start`.
    pub fn staged_mut(&mut self, start: usize) -> &mut [u8] {
        let len = self.staged.len;
        &mut self.staged.all_mut()[start..len]
    }

    /// Stages `bytes`, which must fit the room left.
    #[inline]
    pub fn push(&mut self, bytes: &[u8]) {
        let start = self.staged.len;
        self.staged.len += bytes.len();
        let end = self.staged.len;
        self.staged.all_mut()[start..end].copy_from_slice(bytes);
    }

    /// Stages `bytes`, writing whole pages out as the buffer fills.
    pub fn push_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        loop {
            let now = bytes.len().min(self.room());
            self.push(&bytes[..now]);
            bytes = &bytes[now..];
            if bytes.is_empty() {
                return Ok(());
            }
            self.write_pages()?;
        }
    }

    /// Hands the staged whole pages to the disk thread; the rest (less than
    /// a page) stays staged.
    pub fn write_pages(&mut self) -> io::Result<()> {
        self.hand_over(false)
    }

    /// Hands everything staged to the disk thread, the partial last page
    /// too (which also stays staged, to be written whole later).
    pub fn flush(&mut self) -> io::Result<()> {
        self.hand_over(true)
    }

    fn hand_over(&mut self, all: bool) -> io::Result<()> {
        let mut next = match self.written.try_recv() {
            Ok(buffer) => {
                // More written ones waiting: the disk caught up with a stall.
                while self.buffers > STEADY_BUFFERS && self.written.try_recv().is_ok() {
                    self.buffers -= 1;
                }
                buffer
            }
            Err(_) if self.buffers < MAX_BUFFERS => {
                self.buffers += 1;
                Buffer::new(self.pages_per_buffer)
            }
            Err(_) => match self.written.recv() {
                Ok(buffer) => buffer,
                Err(_) => return Err(self.disk_error()),
            },
        };
        let whole = match all && !self.regular {
            // Without positions, written once: nothing stays staged.
            true => self.staged.len,
            false => self.staged.len / PAGE * PAGE,
        };
        let rest = self.staged.len - whole;
        next.all_mut()[..rest].copy_from_slice(&self.staged.all()[whole..self.staged.len]);
        next.len = rest;
        let mut full = std::mem::replace(&mut self.staged, next);
        full.len = whole;
        full.tail = if all { rest } else { 0 };
        let to_disk = self.to_disk.as_ref().expect("not finished");
        if to_disk.send(full).is_err() {
            return Err(self.disk_error());
        }
        Ok(())
    }

    /// Writes everything staged, and `tail` after it, through the page cache;
    /// syncs the file when `sync`. Returns the disk thread's CPU time.
    /// Does nothing once finished.
    pub fn finish(&mut self, tail: &[u8], sync: bool) -> io::Result<Duration> {
        if self.to_disk.is_none() {
            return Ok(Duration::ZERO);
        }
        self.write_pages()?;
        let mut disk = self.join()?;
        if disk.direct {
            set_direct(&disk.file, false)?;
            disk.direct = false;
        }
        disk.write_out(&self.staged.all()[..self.staged.len])?;
        self.staged.len = 0;
        disk.file.write_all(tail)?;
        // A pipe or /dev/null has nothing to sync.
        if sync && self.regular {
            disk.file.sync_all()?;
        }
        Ok(disk.cpu)
    }

    /// Waits for the disk thread to write what it was given.
    fn join(&mut self) -> io::Result<Disk> {
        self.to_disk.take();
        let thread = self.disk.take().ok_or(io::ErrorKind::BrokenPipe)?;
        thread.join().expect("the disk thread does not panic")
    }

    /// Why the disk thread stopped.
    #[cold]
    fn disk_error(&mut self) -> io::Error {
        match self.join() {
            Err(err) => err,
            Ok(_) => io::ErrorKind::BrokenPipe.into(),
        }
    }
}

impl Disk {
    /// Puts `tail` in the file where the next write will go, through the
    /// page cache, leaving the position where it is.
    fn write_tail(&mut self, tail: &[u8]) -> io::Result<()> {
        if tail.is_empty() {
            return Ok(());
        }
        let at = self.file.stream_position()?;
        if self.direct {
            set_direct(&self.file, false)?;
        }
        self.file.write_all_at(tail, at)?;
        if self.direct {
            set_direct(&self.file, true)?;
        }
        Ok(())
    }

    fn write_out(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.file.write(bytes) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The file system wants other alignment, or a short write left
                // the rest unaligned: go on through the page cache.
                Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                    set_direct(&self.file, false)?;
                    self.direct = false;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn set_direct(file: &File, on: bool) -> io::Result<()> {
    match on {
        true => crate::os::set_fd_flags(file, libc::O_DIRECT, 0),
        false => crate::os::set_fd_flags(file, 0, libc::O_DIRECT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::Instant;

    /// A disk that stalls (a pipe nobody reads) makes the output take new
    /// buffers; once it caught up, the ones the stall added go back.
    #[test]
    fn buffers_a_stall_added_go_back_once_the_disk_caught_up() {
        let (mut reader, writer) = std::io::pipe().unwrap();
        let file = File::from(std::os::fd::OwnedFd::from(writer));
        let mut out = Output::new(file, PAGE).unwrap();
        let page = [7u8; PAGE];
        let stalled = 40;
        for _ in 0..stalled {
            out.push_all(&page).unwrap();
            out.write_pages().unwrap();
        }
        // The pipe holds 16 pages; the disk thread waits on the 17th.
        assert!(out.buffers > stalled - 20, "{} buffers", out.buffers);
        let drained = std::thread::spawn(move || {
            let mut all = Vec::new();
            reader.read_to_end(&mut all).map(|_| all)
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut written = stalled;
        while out.buffers != STEADY_BUFFERS && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            out.push_all(&page).unwrap();
            out.write_pages().unwrap();
            written += 1;
        }
        assert_eq!(out.buffers, STEADY_BUFFERS);
        out.finish(&[], false).unwrap();
        drop(out);
        let all = drained.join().unwrap().unwrap();
        assert_eq!(all.len(), written * PAGE);
        assert!(all.iter().all(|&b| b == 7));
    }
}
