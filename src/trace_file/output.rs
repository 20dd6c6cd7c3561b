//! The file a trace is written to, with the bytes not written yet.
//!
//! A recording writes a few hundred MB/s for as long as it runs. Through the
//! page cache, every MB takes fresh pages, which costs more than the copy
//! into them (on this project's VM, where memory the guest freed goes back
//! to the host, about 3 ns a byte, against 0.1 by direct I/O). So a regular
//! file is written by direct I/O, from one page-aligned buffer that is used
//! again and again, in whole pages; the last partial page goes through the
//! page cache when the file is finished. Where direct I/O is refused (a pipe,
//! tmpfs on older kernels), the same writes go through the page cache.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;

/// Direct I/O moves whole pages between page-aligned memory and the file.
const PAGE: usize = 4096;

#[repr(C, align(4096))]
struct Page([u8; PAGE]);

pub(super) struct Output {
    file: File,
    staged: Box<[Page]>,
    /// Bytes staged, from the start of `staged`.
    len: usize,
    direct: bool,
}

impl Output {
    /// Stages up to `capacity` bytes (rounded up to pages, at least two).
    pub fn new(file: File, capacity: usize) -> Output {
        let pages = capacity.div_ceil(PAGE).max(2);
        let staged = (0..pages).map(|_| Page([0; PAGE])).collect();
        let direct = file.metadata().is_ok_and(|m| m.is_file()) && set_direct(&file, true).is_ok();
        Output {
            file,
            staged,
            len: 0,
            direct,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes that can be staged before [`write_pages`](Self::write_pages).
    pub fn room(&self) -> usize {
        self.staged.len() * PAGE - self.len
    }

    /// The staged bytes, from `start`.
    pub fn staged_mut(&mut self, start: usize) -> &mut [u8] {
        let len = self.len;
        &mut self.bytes_mut()[start..len]
    }

    /// Stages `bytes`, which must fit the room left.
    #[inline]
    pub fn push(&mut self, bytes: &[u8]) {
        let start = self.len;
        self.len += bytes.len();
        let end = self.len;
        self.bytes_mut()[start..end].copy_from_slice(bytes);
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

    /// Writes the staged whole pages; the rest (less than a page) stays staged.
    pub fn write_pages(&mut self) -> io::Result<()> {
        let whole = self.len / PAGE * PAGE;
        self.write_out(0..whole)?;
        let len = self.len;
        self.bytes_mut().copy_within(whole..len, 0);
        self.len -= whole;
        Ok(())
    }

    /// Writes everything staged, and `tail` after it, through the page cache.
    pub fn finish(&mut self, tail: &[u8]) -> io::Result<()> {
        self.write_pages()?;
        if self.direct {
            set_direct(&self.file, false)?;
            self.direct = false;
        }
        self.write_out(0..self.len)?;
        self.len = 0;
        self.file.write_all(tail)
    }

    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn write_out(&mut self, range: std::ops::Range<usize>) -> io::Result<()> {
        let (mut at, end) = (range.start, range.end);
        while at < end {
            // SAFETY: the pages are plain bytes, borrowed only for the call.
            let bytes =
                unsafe { std::slice::from_raw_parts(self.staged.as_ptr().cast::<u8>(), end) };
            match self.file.write(&bytes[at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => at += n,
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

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the pages are plain bytes, contiguous in one allocation.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.staged.as_mut_ptr().cast::<u8>(),
                self.staged.len() * PAGE,
            )
        }
    }
}

fn set_direct(file: &File, on: bool) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on an fd this file owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    let flags = match on {
        true => flags | libc::O_DIRECT,
        false => flags & !libc::O_DIRECT,
    };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
