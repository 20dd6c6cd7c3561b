//! Classic tracepoints are attached by their id, which aya reads from tracefs;
//! many systems do not mount it. Mount it for as long as attaching takes, and
//! unmount only what we mounted, so the system is left as it was found. The
//! mount is shared by the process's threads: the last guard unmounts it.

use std::ffi::CString;
use std::path::Path;
use std::sync::Mutex;

const MOUNT_POINT: &str = "/sys/kernel/tracing";

/// Guards alive of the mount this process made (0: it made none).
static HOLDERS: Mutex<usize> = Mutex::new(0);

pub struct TracefsMount {
    mounted: bool,
}

/// Makes tracefs available if it is not (needs CAP_SYS_ADMIN; a failure only
/// means the `tracepoint` backend will not attach).
pub fn ensure() -> TracefsMount {
    let mut holders = HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
    if *holders > 0 {
        *holders += 1;
        return TracefsMount { mounted: true };
    }
    let present = [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    if present {
        return TracefsMount { mounted: false };
    }
    let (source, target, fstype) = (c("nodev"), c(MOUNT_POINT), c("tracefs"));
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        *holders = 1;
    }
    TracefsMount { mounted: rc == 0 }
}

impl Drop for TracefsMount {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        let mut holders = HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
        *holders -= 1;
        if *holders == 0 {
            let target = c(MOUNT_POINT);
            // SAFETY: valid path; a lazy detach cannot fail on a busy mount.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL in constant")
}
