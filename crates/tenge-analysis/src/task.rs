//! The processes behind the sockets: the task that last wrote each socket
//! and the one that last read it, as the kernel named them (`sock_task`
//! events), and the cgroup (container) each ran in.

use crate::event::{tt_sock_task, tt_task_role};
use crate::export::json::comm_text;
use serde::Serialize;
use std::collections::BTreeMap;

/// A task as the kernel saw it: right in any PID namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Task {
    /// The process (thread group) and the thread.
    pub tgid: u32,
    pub pid: u32,
    pub comm: String,
    /// Its cgroup v2 id, and its path under the cgroup root when known
    /// (the recording's host resolved it).
    pub cgroup_id: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The container id a cgroup path like `.../docker-<id>.scope` or
    /// `.../cri-containerd-<id>.scope` carries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

impl Task {
    fn of(t: &tt_sock_task) -> Task {
        Task {
            tgid: t.tgid,
            pid: t.pid,
            comm: comm_text(&t.comm),
            cgroup_id: t.cgroup_id,
            cgroup: None,
            container_id: None,
        }
    }

    /// `comm[tgid]`, as `ss -p` names a process.
    pub fn label(&self) -> String {
        format!("{}[{}]", self.comm, self.tgid)
    }

    /// Names its cgroup by `paths` (cgroup id → path).
    pub fn resolve(&mut self, paths: &BTreeMap<u64, String>) {
        if let Some(path) = paths.get(&self.cgroup_id) {
            self.name_cgroup(path);
        }
    }

    /// Its cgroup's path, and the container id the path carries.
    pub fn name_cgroup(&mut self, path: &str) {
        self.container_id = container_id(path);
        self.cgroup = Some(path.to_string());
    }
}

/// The tasks that last wrote and read one socket.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SocketTasks {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer: Option<Task>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reader: Option<Task>,
}

impl SocketTasks {
    pub fn note(&mut self, t: &tt_sock_task) {
        let slot = match u32::from(t.role) {
            r if r == tt_task_role::TT_TASK_WRITER as u32 => &mut self.writer,
            r if r == tt_task_role::TT_TASK_READER as u32 => &mut self.reader,
            _ => return,
        };
        *slot = Some(Task::of(t));
    }

    /// The process a person would name the socket by: its writer, else its reader.
    pub fn owner(&self) -> Option<&Task> {
        self.writer.as_ref().or(self.reader.as_ref())
    }

    pub fn resolve(&mut self, paths: &BTreeMap<u64, String>) {
        for task in [&mut self.writer, &mut self.reader].into_iter().flatten() {
            task.resolve(paths);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.writer.is_none() && self.reader.is_none()
    }
}

/// The container id in a cgroup path: the last 64-hex-digit run of its
/// last component that has one (Docker, containerd, CRI-O, Podman, and
/// the Kubernetes pod cgroups under them).
pub fn container_id(path: &str) -> Option<String> {
    path.rsplit('/').find_map(|part| {
        let bytes = part.as_bytes();
        (0..bytes.len().saturating_sub(63))
            .rev()
            .map(|i| &part[i..i + 64])
            .find(|run| {
                run.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            })
            .map(String::from)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_come_from_the_runtimes_cgroup_names() {
        let id = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100";
        for path in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234.slice/cri-containerd-{id}.scope"),
            format!("/kubepods/burstable/pod5678/{id}"),
            format!("/machine.slice/libpod-{id}.scope/container"),
        ] {
            assert_eq!(container_id(&path).as_deref(), Some(id), "{path}");
        }
        assert_eq!(
            container_id("/user.slice/user-0.slice/session-3.scope"),
            None
        );
        assert_eq!(container_id("/"), None);
    }
}
