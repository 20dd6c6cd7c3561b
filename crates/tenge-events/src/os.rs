//! What the recording side asks of the OS: clocks, the kernel's name, a
//! thread's CPU time, file status flags.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and out pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> String {
    uname_field(|u| &u.release)
}

/// The host's name (`uname -n`).
pub fn hostname() -> String {
    uname_field(|u| &u.nodename)
}

fn uname_field(pick: impl Fn(&libc::utsname) -> &[libc::c_char; 65]) -> String {
    // SAFETY: utsname is plain old data filled by the kernel.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = pick(&u)
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// CPU time (user + system) of the calling thread.
pub fn thread_cpu() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Sets the `set` and clears the `clear` file status flags (`O_NONBLOCK`,
/// `O_DIRECT`, ...) of an open file.
pub fn set_fd_flags(file: &File, set: libc::c_int, clear: libc::c_int) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on an fd this file owns.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, (flags | set) & !clear) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
