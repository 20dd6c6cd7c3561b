//! Classic tracepoints are attached by their id, which aya (and the hit
//! counter) read from tracefs; many systems do not mount it. Where it is
//! not mounted, what needs it runs on a thread of its own in a mount
//! namespace of its own, with tracefs mounted there: the mount goes with the
//! namespace, so nothing is left mounted on the host whatever ends the
//! process (SIGKILL included), and one process never unmounts what another
//! still reads. A tool we start (bpftrace) mounts it in its own likewise.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

const MOUNT_POINT: &str = "/sys/kernel/tracing";

/// Whether the host has tracefs where aya looks for it.
fn present() -> bool {
    [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .any(|p| Path::new(p).exists())
}

/// Runs `f` where tracefs is mounted (needs CAP_SYS_ADMIN when the host has
/// none; if mounting fails `f` runs all the same, and only the `tracepoint`
/// backend will not attach).
pub fn with<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if present() {
        return f();
    }
    let mount = PrivateMount::new();
    std::thread::scope(|s| {
        let thread = s.spawn(|| {
            let _mounted = mount.make();
            f()
        });
        thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Has the process `command` starts mount tracefs in a mount namespace of
/// its own, if the host has none: the mount goes when the process does.
pub fn for_child(command: &mut Command) {
    if present() {
        return;
    }
    let mount = PrivateMount::new();
    // SAFETY: between fork and exec the closure makes system calls only, on
    // strings made before the fork.
    unsafe {
        command.pre_exec(move || {
            mount.make();
            Ok(())
        });
    }
}

/// The strings mount(2) takes, made ahead: a child between fork and exec
/// must not allocate.
struct PrivateMount {
    root: CString,
    source: CString,
    target: CString,
    fstype: CString,
}

impl PrivateMount {
    fn new() -> PrivateMount {
        PrivateMount {
            root: c("/"),
            source: c("nodev"),
            target: c(MOUNT_POINT),
            fstype: c("tracefs"),
        }
    }

    /// This thread (or process) to a mount namespace of its own, where no
    /// mount may reach the host's (a shared `/` would propagate one), then
    /// tracefs there. False if any step failed (then nothing was mounted).
    fn make(&self) -> bool {
        let none = std::ptr::null();
        // SAFETY: system calls on valid NUL-terminated strings, null where
        // mount(2) allows it; unshare(2) of this thread's namespace only.
        unsafe {
            libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    none,
                    self.root.as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0
                && libc::mount(
                    self.source.as_ptr(),
                    self.target.as_ptr(),
                    self.fstype.as_ptr(),
                    0,
                    std::ptr::null(),
                ) == 0
        }
    }
}

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL in constant")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a host without tracefs (this VM's, CI's): the closure and a child
    /// see it, the host never does, not even for a moment (pid 1's mount
    /// table, read while the closure runs).
    #[test]
    fn tracefs_is_mounted_for_the_closure_and_the_child_alone() {
        // SAFETY: geteuid(2) cannot fail.
        if unsafe { libc::geteuid() } != 0 || present() {
            eprintln!("skipped: needs root on a host without tracefs mounted");
            return;
        }
        let host_has_it = || {
            std::fs::read_to_string("/proc/1/mounts")
                .unwrap()
                .contains(" tracefs ")
        };
        let (inside, host_meanwhile) = with(|| (present(), host_has_it()));
        assert!(inside, "no tracefs for the closure");
        assert!(!host_meanwhile, "the closure's tracefs reached the host");
        let mut child = Command::new("test");
        child.args(["-e", "/sys/kernel/tracing/events"]);
        for_child(&mut child);
        assert!(
            child.status().unwrap().success(),
            "no tracefs for the child"
        );
        assert!(!present() && !host_has_it());
    }
}
