//! Reading a BPF ring buffer map in batches.
//!
//! The kernel's layout (kernel/bpf/ringbuf.c): a read-write page holding the
//! consumer position, then a read-only page holding the producer position,
//! then the data pages mapped twice in a row, so a record that wraps around
//! the end reads as one slice. Each record is an 8-byte header (length, with
//! a busy and a discard bit) and the record, padded to 8 bytes.
//!
//! aya's `RingBuf` publishes the consumer position after every record; every
//! record a probe then reserves reads a line the reader just wrote, on
//! another CPU. [`Ring::drain`] publishes it once per batch, and hands the
//! batch's records out without a per-record guard.

use anyhow::{bail, Context};
use aya::maps::{Map, MapData};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

const BUSY_BIT: u32 = 1 << 31;
const DISCARD_BIT: u32 = 1 << 30;
const RECORD_HEADER: usize = 8;

/// A ring buffer map, mapped for reading. Only one reader may consume a ring.
pub struct Ring {
    /// The consumer page (read-write).
    consumer: Mapping,
    /// The producer page and the data pages twice (read-only).
    producer: Mapping,
    page: usize,
    mask: usize,
    /// The next record to read; the consumer page holds it once published.
    pos: usize,
    map: MapData,
}

/// One mmap of the map's fd, unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mappings are plain shared memory, owned by the `Ring`.
unsafe impl Send for Ring {}

impl Ring {
    pub fn new(map: Map) -> anyhow::Result<Ring> {
        let Map::RingBuf(map) = map else {
            bail!("not a ring buffer map");
        };
        let size = map.info()?.max_entries() as usize;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        if !size.is_power_of_two() || size < page {
            bail!("ring buffer of {size} bytes is not a power-of-two number of pages");
        }
        let fd = map.fd().as_fd().as_raw_fd();
        let consumer = Mapping::new(fd, page, libc::PROT_READ | libc::PROT_WRITE, 0)
            .context("mapping the ring buffer's consumer page")?;
        let producer = Mapping::new(fd, page + 2 * size, libc::PROT_READ, page)
            .context("mapping the ring buffer's data")?;
        let mut ring = Ring {
            consumer,
            producer,
            page,
            mask: size - 1,
            pos: 0,
            map,
        };
        ring.pos = ring.consumer_pos().load(Ordering::Acquire);
        Ok(ring)
    }

    /// Hands up to `max_records` of the committed records now in the ring to
    /// `on_record` in order, then frees their space; returns (records, bytes).
    /// Stops early at a record still being written.
    pub fn drain(&mut self, max_records: u64, mut on_record: impl FnMut(&[u8])) -> (u64, u64) {
        // Acquire: the records before the producer position are reserved.
        let end = self.producer_pos().load(Ordering::Acquire);
        let data = self.producer.ptr.as_ptr().wrapping_add(self.page);
        let (mut records, mut bytes) = (0, 0);
        let mut pos = self.pos;
        while pos != end && records < max_records {
            let offset = pos & self.mask;
            // SAFETY: offset < size, and the header lies in the first copy of
            // the data pages; a record's bytes follow it, at most `size`
            // long, within the second copy.
            let header = unsafe { &*data.add(offset).cast::<AtomicU32>() };
            // Acquire pairs with the commit's xchg: the record is written.
            let header = header.load(Ordering::Acquire);
            if header & BUSY_BIT != 0 {
                break;
            }
            let len = (header & !(BUSY_BIT | DISCARD_BIT)) as usize;
            if header & DISCARD_BIT == 0 {
                // SAFETY: as above; the record stays put until `pos` is published.
                let record =
                    unsafe { std::slice::from_raw_parts(data.add(offset + RECORD_HEADER), len) };
                on_record(record);
                records += 1;
                bytes += len as u64;
            }
            pos += (RECORD_HEADER + len).next_multiple_of(8);
        }
        if pos != self.pos {
            self.pos = pos;
            // Release: the records are read before the kernel may reuse their space.
            self.consumer_pos().store(pos, Ordering::Release);
        }
        (records, bytes)
    }

    fn consumer_pos(&self) -> &AtomicUsize {
        // SAFETY: the consumer page starts with the kernel's consumer position.
        unsafe { &*self.consumer.ptr.as_ptr().cast::<AtomicUsize>() }
    }

    fn producer_pos(&self) -> &AtomicUsize {
        // SAFETY: the producer page starts with the kernel's producer position.
        unsafe { &*self.producer.ptr.as_ptr().cast::<AtomicUsize>() }
    }
}

impl AsRawFd for Ring {
    /// Readable when the kernel woke the ring.
    fn as_raw_fd(&self) -> RawFd {
        self.map.fd().as_fd().as_raw_fd()
    }
}

impl Mapping {
    fn new(fd: RawFd, len: usize, prot: libc::c_int, offset: usize) -> std::io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of the map's fd; the kernel checks the
        // length and protection against the ring's layout.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd,
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast()).expect("mmap returned MAP_FAILED, not null");
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
