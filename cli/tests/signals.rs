//! Ctrl-C leaves a report and a clean kernel (root).

#[path = "../../tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A child that is killed if the test fails before the child exits, so a
/// failed assertion never leaves a tracer attached.
struct Running(std::process::Child);

impl Running {
    fn spawn(cmd: &mut Command) -> Running {
        Running(
            cmd.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
}

/// Runs `cmd`, sends SIGINT after `after`; returns its status, stdout, stderr and pid.
fn interrupt_after(
    mut cmd: Command,
    after: Duration,
) -> (std::process::ExitStatus, String, String, u32) {
    let mut running = Running::spawn(&mut cmd);
    let child = &mut running.0;
    std::thread::sleep(after);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "did not stop after SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, out, err, child.id())
}

/// The tests here watch the kernel's BPF links as a whole: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The ids of the BPF links that exist now.
fn link_ids() -> Vec<u64> {
    let out = Command::new("bpftool")
        .args(["link", "list", "-j"])
        .output()
        .unwrap();
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["id"].as_u64())
        .collect()
}

#[test]
fn lab_interrupted_reports_and_cleans_up() {
    if !common::require_root("lab_interrupted_reports_and_cleans_up") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = link_ids();
    let mut cmd = bin();
    cmd.args(["lab", "--scenario", "sws-stall"]);
    // The scenario's reader pauses 1 s, then sips for 2 s: interrupt it mid-stall.
    let (status, out, err, pid) = interrupt_after(cmd, Duration::from_millis(2500));
    assert!(status.success(), "exit {status}: {err}");
    assert!(out.contains("(interrupted)"), "{out}");
    assert!(
        out.contains("WINDOWS AND LIMITS"),
        "a report is printed: {out}"
    );
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout)
            .lines()
            .any(|l| l.starts_with(&format!("tt-{pid}-"))),
        "namespaces left behind"
    );
    let after = link_ids();
    assert!(
        after.iter().all(|id| before.contains(id)),
        "links left behind: {before:?} -> {after:?}"
    );
}

#[test]
fn record_interrupted_writes_a_whole_file() {
    if !common::require_root("record_interrupted_writes_a_whole_file") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let before = link_ids();
    let file = std::env::temp_dir().join(format!("tt-sigint-{}.ttr", std::process::id()));
    let mut cmd = bin();
    cmd.args(["record", "-q", "--port", "1", "-o"]).arg(&file);
    let mut running = Running::spawn(&mut cmd);
    let child = &mut running.0;
    std::thread::sleep(Duration::from_millis(1500));
    let pid = child.id();
    let ours: Vec<u64> = link_ids()
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert!(
        ours.len() >= 10,
        "the recorder attached {} BPF links",
        ours.len()
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{err}");
    assert!(err.contains("(interrupted)"), "{err}");
    let left: Vec<u64> = link_ids()
        .into_iter()
        .filter(|id| ours.contains(id))
        .collect();
    assert!(left.is_empty(), "links left behind: {left:?}");
    let mut reader = tenge_trace::trace_file::TraceReader::open(&file).unwrap();
    let summary = reader.for_each(|_| {}).unwrap();
    assert_eq!(summary.end_reason, "interrupted");
    let _ = std::fs::remove_file(&file);
}
