//! Network namespaces that remove themselves.
//!
//! A [`Netns`] is created with `ip netns add` and deleted on drop (also on
//! unwind). Every name this process creates sits in a process-wide registry so
//! [`cleanup_all_created`] can remove them from a Ctrl-C path, and namespaces
//! left behind by a process that died (SIGKILL) are removed the next time one
//! is created.

use anyhow::{bail, Context, Result};
use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::thread::{Scope, ScopedJoinHandle};

const NETNS_DIR: &str = "/var/run/netns";
const NAME_PREFIX: &str = "tt-";

/// Names created by this process and not yet deleted.
static CREATED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
/// `ip netns add` races with itself when it first makes `/var/run/netns` a
/// shared mount point, so creations in one process are serialized.
static CREATE_LOCK: Mutex<()> = Mutex::new(());

/// A named network namespace, deleted when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates `tt-<pid>-<tag>`. Callers make `tag` unique within the process.
    /// Stale `tt-<pid>-*` namespaces of dead processes are removed first.
    pub fn create(tag: &str) -> Result<Netns> {
        let name = format!("{NAME_PREFIX}{}-{tag}", std::process::id());
        let _serial = CREATE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        remove_stale();
        run(Command::new("ip").args(["netns", "add", &name]))?;
        CREATED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone());
        Ok(Netns { name })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bind mount that pins the namespace: `/var/run/netns/NAME`.
    pub fn path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }

    /// The namespace's inode number (`/proc/PID/ns/net` -> `net:[INUM]`;
    /// `net->ns.inum` in the kernel).
    pub fn inum(&self) -> Result<u64> {
        use std::os::unix::fs::MetadataExt;
        let path = self.path();
        Ok(std::fs::metadata(&path)
            .with_context(|| format!("stat {}", path.display()))?
            .ino())
    }

    /// `ip netns exec NAME program`: a command that runs inside the namespace.
    pub fn command(&self, program: &str) -> Command {
        exec_command(&self.name, program)
    }

    /// Spawns a scoped thread that first enters this namespace, then runs `f`.
    /// Only that thread changes namespace; it ends with the scope.
    pub fn spawn_scoped<'scope, T, F>(
        &self,
        scope: &'scope Scope<'scope, '_>,
        f: F,
    ) -> ScopedJoinHandle<'scope, Result<T>>
    where
        T: Send + 'scope,
        F: FnOnce() -> Result<T> + Send + 'scope,
    {
        let path = self.path();
        scope.spawn(move || {
            enter(&path)?;
            f()
        })
    }

    /// Runs `f` on a thread inside the namespace and waits for it.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
        std::thread::scope(|s| match self.spawn_scoped(s, f).join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    }

    /// Writes sysctls (`net.ipv4.tcp_window_scaling` style keys) inside the
    /// namespace, through `/proc/sys` on a thread that entered it.
    pub fn set_sysctls(&self, settings: &[(&str, &str)]) -> Result<()> {
        self.run(|| {
            for (key, value) in settings {
                let path = Path::new("/proc/sys").join(key.replace('.', "/"));
                std::fs::write(&path, value)
                    .with_context(|| format!("{}: {key} = {value}", self.name))?;
            }
            Ok(())
        })
    }

    /// Reads one sysctl inside the namespace.
    pub fn sysctl(&self, key: &str) -> Result<String> {
        self.run(|| {
            let path = Path::new("/proc/sys").join(key.replace('.', "/"));
            let value = std::fs::read_to_string(&path).with_context(|| key.to_string())?;
            Ok(value.trim().to_string())
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let registered = CREATED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.name);
        if registered {
            if let Err(e) = delete(&self.name) {
                eprintln!("tenge-trace lab: {e:#}");
            }
        }
    }
}

/// `ip netns exec NETNS program`.
pub fn exec_command(netns: &str, program: &str) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", netns, program]);
    command
}

/// Removes every namespace this process created and has not yet dropped.
/// Meant for a Ctrl-C path (call it from a signal-handling thread such as
/// signal-hook's iterator, not from inside an async signal handler). Threads
/// or processes still inside a namespace keep it alive until they exit; the
/// name is gone at once. Later drops of the [`Netns`] values do nothing.
pub fn cleanup_all_created() {
    // A creation in flight finishes (and registers) before this runs.
    let _serial = CREATE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let names = std::mem::take(&mut *CREATED.lock().unwrap_or_else(|e| e.into_inner()));
    for name in names {
        if let Err(e) = delete(&name) {
            eprintln!("tenge-trace lab: {e:#}");
        }
    }
}

/// Names this process created and still holds.
pub fn created() -> Vec<String> {
    CREATED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect()
}

/// What `ip netns del` does: detach the bind mount, remove the file.
fn delete(name: &str) -> Result<()> {
    let path = Path::new(NETNS_DIR).join(name);
    let c_path = CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: c_path is a valid NUL-terminated string.
    if unsafe { libc::umount2(c_path.as_ptr(), libc::MNT_DETACH) } != 0 {
        let err = std::io::Error::last_os_error();
        // EINVAL: not a mount point (half-made by a killed `ip netns add`).
        if !matches!(err.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) {
            bail!("umount {}: {err}", path.display());
        }
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("remove {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// `tt-<pid>-*` namespaces whose process no longer exists (a lab killed
/// outright left them); the next lab removes them.
pub fn stale_namespaces() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(NETNS_DIR) else {
        return Vec::new();
    };
    let mut stale: Vec<String> = entries
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            owner_pid(name).is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    stale.sort();
    stale
}

fn remove_stale() {
    for name in stale_namespaces() {
        if let Err(e) = delete(&name) {
            eprintln!("tenge-trace lab: stale namespace {name}: {e:#}");
        }
    }
}

/// The pid in a `tt-<pid>-<tag>` name.
fn owner_pid(name: &str) -> Option<u32> {
    let (pid, _tag) = name.strip_prefix(NAME_PREFIX)?.split_once('-')?;
    pid.parse().ok()
}

/// Moves the calling thread into the namespace pinned at `path`.
fn enter(path: &Path) -> Result<()> {
    let file = File::open(path).with_context(|| format!("open {}", path.display()))?;
    // SAFETY: a valid namespace fd; CLONE_NEWNET only affects this thread.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!(
            "setns {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Runs a command to completion; a non-zero exit is an error carrying stderr.
pub fn run(command: &mut Command) -> Result<Output> {
    let output = command
        .output()
        .with_context(|| format!("spawn {command:?}"))?;
    if !output.status.success() {
        bail!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_parses_only_our_names() {
        assert_eq!(owner_pid("tt-1234-0-a"), Some(1234));
        assert_eq!(owner_pid("tt-1234-17-b"), Some(1234));
        assert_eq!(owner_pid("tt-x-0-a"), None);
        assert_eq!(owner_pid("ttx-a"), None);
        assert_eq!(owner_pid("tt-1234"), None);
        assert_eq!(owner_pid("other"), None);
    }
}
