//! What the recording side asks of the OS: clocks, the kernel's name, a
//! thread's CPU time, file status flags, cgroup paths.

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

/// CLOCK_REALTIME − CLOCK_MONOTONIC in ns: what turns the events' clock
/// into Unix time. Read between two reads of CLOCK_MONOTONIC, the tightest
/// pair of a few tries: two single reads are off by however long the thread
/// waited between them (17.0 ms once, under a CI run's load: every packet of
/// a pcapng export that far from tcpdump's).
pub fn realtime_offset_ns() -> i64 {
    let mut best = (u64::MAX, 0);
    for _ in 0..8 {
        let before = clock_ns(libc::CLOCK_MONOTONIC);
        let real = clock_ns(libc::CLOCK_REALTIME);
        let gap = clock_ns(libc::CLOCK_MONOTONIC).saturating_sub(before);
        if gap < best.0 {
            best = (gap, real as i64 - (before + gap / 2) as i64);
        }
        // Within a few µs: no wait between the reads worth another try.
        if gap < 5_000 {
            break;
        }
    }
    best.1
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> String {
    uname_field(|u| &u.release)
}

/// The host's name (`uname -n`).
/// `net.core.rmem_max`: the most `SO_RCVBUF` sets (before the kernel doubles it).
pub fn rmem_max() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub fn hostname() -> String {
    uname_field(|u| &u.nodename)
}

fn uname_field(pick: impl Fn(&libc::utsname) -> &[libc::c_char; 65]) -> String {
    // SAFETY: utsname is plain old data filled by the kernel.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    c_text(pick(&u))
}

/// A C string of a fixed array (a command name, a uname field): up to the
/// first NUL, or all of it.
pub fn c_text(chars: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = chars
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

/// Where cgroup v2 is mounted: the unified hierarchy, or its hybrid mount.
const CGROUP2_ROOTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// Where the cgroup v2 hierarchy (the one `bpf_get_current_cgroup_id()`
/// names) is mounted, if it is.
pub fn cgroup2_root() -> Option<std::path::PathBuf> {
    CGROUP2_ROOTS
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.join("cgroup.controllers").exists())
}

/// The paths of the cgroups `ids` (cgroup v2 ids: their directories'
/// inode numbers), relative to the cgroup root (`/` is the root itself).
/// Cgroups gone since, or under no cgroup v2 mount, are left out.
pub fn cgroup_paths(
    ids: &std::collections::BTreeSet<u64>,
) -> std::collections::BTreeMap<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let mut found = std::collections::BTreeMap::new();
    let Some(root) = cgroup2_root() else {
        return found;
    };
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        if found.len() == ids.len() {
            break;
        }
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        if ids.contains(&meta.ino()) {
            let path = dir.strip_prefix(&root).unwrap_or(&dir);
            found.insert(meta.ino(), format!("/{}", path.display()));
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        dirs.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    found
}

/// Cgroup paths by id, each looked up once, when first asked for (while
/// the cgroup exists: a container's goes with it).
#[derive(Default)]
pub struct CgroupNames {
    known: std::collections::BTreeMap<u64, Option<String>>,
}

impl CgroupNames {
    pub fn name(&mut self, id: u64) -> Option<&str> {
        self.known
            .entry(id)
            .or_insert_with(|| {
                cgroup_paths(&std::collections::BTreeSet::from([id]))
                    .pop_first()
                    .map(|(_, path)| path)
            })
            .as_deref()
    }

    /// Every path found so far, by id.
    pub fn paths(&self) -> std::collections::BTreeMap<u64, String> {
        self.known
            .iter()
            .filter_map(|(&id, path)| Some((id, path.clone()?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_realtime_offset_lies_within_a_later_bracket_of_reads() {
        let offset = realtime_offset_ns();
        let before = clock_ns(libc::CLOCK_MONOTONIC) as i64;
        let real = clock_ns(libc::CLOCK_REALTIME) as i64;
        let after = clock_ns(libc::CLOCK_MONOTONIC) as i64;
        // Unix time of `real` by the offset falls between the two reads
        // around it, but for the offset's own bracket (a few µs; 1 ms here).
        let unix_before = before + offset;
        let unix_after = after + offset;
        assert!(
            unix_before - 1_000_000 <= real && real <= unix_after + 1_000_000,
            "{unix_before} ≤ {real} ≤ {unix_after}"
        );
    }
}
