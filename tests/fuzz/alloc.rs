//! The heap each thread holds, and the most it held while one input ran.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, Ordering};

pub struct Counting;

thread_local! {
    static NOW: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    /// Past this, the input is kept and the run aborted: it would take the machine.
    static LIMIT: Cell<isize> = const { Cell::new(isize::MAX) };
    static INPUT: Cell<(*const u8, usize)> = const { Cell::new((std::ptr::null(), 0)) };
    static START: Cell<isize> = const { Cell::new(0) };
}

/// Where an input that went past its limit is kept (a C string).
static KEEP_AT: AtomicPtr<libc::c_char> = AtomicPtr::new(std::ptr::null_mut());

/// The hard limit, as a multiple of the bound an input is held to.
const LIMIT_TIMES_BOUND: usize = 4;

/// Starts measuring this thread's heap for `input`, held to `bound` bytes.
pub fn start(input: &[u8], bound: usize) {
    if KEEP_AT.load(Ordering::Relaxed).is_null() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fuzz/findings");
        let _ = std::fs::create_dir_all(dir);
        let path = std::ffi::CString::new(format!("{dir}/over-limit.tt")).unwrap();
        KEEP_AT.store(path.into_raw(), Ordering::Relaxed);
    }
    INPUT.set((input.as_ptr(), input.len()));
    START.set(NOW.get());
    PEAK.set(NOW.get());
    LIMIT.set(NOW.get() + (bound * LIMIT_TIMES_BOUND) as isize);
}

/// The most heap the input took beyond what the thread held at `start`.
pub fn stop() -> usize {
    LIMIT.set(isize::MAX);
    INPUT.set((std::ptr::null(), 0));
    (PEAK.get() - START.get()).max(0) as usize
}

fn grow(bytes: usize) {
    let _ = NOW.try_with(|now| {
        let n = now.get() + bytes as isize;
        now.set(n);
        if n > PEAK.get() {
            PEAK.set(n);
        }
        if n > LIMIT.get() {
            over_limit();
        }
    });
}

fn shrink(bytes: usize) {
    let _ = NOW.try_with(|now| now.set(now.get() - bytes as isize));
}

/// Keeps the input with no allocation (the allocator is where this runs) and aborts.
#[cold]
fn over_limit() -> ! {
    let (ptr, len) = INPUT.get();
    let path = KEEP_AT.load(Ordering::Relaxed);
    // SAFETY: plain syscalls on a C string and the input the worker holds.
    unsafe {
        let fd = libc::open(path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, 0o644);
        if fd >= 0 && !ptr.is_null() {
            libc::write(fd, ptr.cast(), len);
            libc::close(fd);
        }
        let msg = b"fuzz: an input asked for more heap than 4x its bound; kept as tests/fuzz/findings/over-limit.tt\n";
        libc::write(2, msg.as_ptr().cast(), msg.len());
    }
    std::process::abort();
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            grow(new_size - layout.size());
        } else {
            shrink(layout.size() - new_size);
        }
        System.realloc(ptr, layout, new_size)
    }
}
