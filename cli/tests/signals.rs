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

/// What an interrupted child left.
struct Interrupted {
    status: std::process::ExitStatus,
    out: String,
    err: String,
    pid: u32,
    /// The BPF links it held when it was signalled.
    links: Vec<u64>,
}

/// Runs `cmd` and sends it SIGINT once `after` has passed and it holds at
/// least `min_links` BPF links, the same for 200 ms (done attaching; it must
/// get there within 20 s).
fn interrupt_after(mut cmd: Command, after: Duration, min_links: usize) -> Interrupted {
    let mut running = Running::spawn(&mut cmd);
    let child = &mut running.0;
    let pid = child.id();
    std::thread::sleep(after);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    let links = loop {
        let links = links_of(pid);
        if links.len() >= min_links && links == seen {
            break links;
        }
        seen = links;
        assert!(
            child.try_wait().unwrap().is_none(),
            "exited holding {} links",
            seen.len()
        );
        assert!(Instant::now() < deadline, "{} links after 20 s", seen.len());
        std::thread::sleep(Duration::from_millis(200));
    };
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
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
    Interrupted {
        status,
        out,
        err,
        pid,
        links,
    }
}

/// The ids of the BPF links process `pid` holds (`link_id:` in its fds'
/// fdinfo): other processes tracing at the same time do not count.
fn links_of(pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    fds.filter_map(|fd| std::fs::read_to_string(fd.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("link_id:"))
                .and_then(|id| id.trim().parse().ok())
        })
        .collect()
}

/// Those of `links` that still exist.
fn still_there(links: &[u64]) -> Vec<u64> {
    let out = Command::new("bpftool")
        .args(["link", "list", "-j"])
        .output()
        .unwrap();
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    all.as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["id"].as_u64())
        .filter(|id| links.contains(id))
        .collect()
}

#[test]
fn lab_interrupted_reports_and_cleans_up() {
    if !common::require_root("lab_interrupted_reports_and_cleans_up") {
        return;
    }
    let mut cmd = bin();
    cmd.args(["lab", "--scenario", "sws-stall"]);
    // The scenario's reader pauses 1 s, then sips for 2 s: interrupt it mid-stall.
    let run = interrupt_after(cmd, Duration::from_millis(2500), 1);
    assert!(run.status.success(), "exit {}: {}", run.status, run.err);
    assert!(run.out.contains("(interrupted)"), "{}", run.out);
    assert!(
        run.out.contains("WINDOWS AND LIMITS"),
        "a report is printed: {}",
        run.out
    );
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout)
            .lines()
            .any(|l| l.starts_with(&format!("tt-{}-", run.pid))),
        "namespaces left behind"
    );
    let left = still_there(&run.links);
    assert!(left.is_empty(), "links left behind: {left:?}");
}

#[test]
fn record_interrupted_writes_a_whole_file() {
    if !common::require_root("record_interrupted_writes_a_whole_file") {
        return;
    }
    let dir = common::TempDir::new("sigint");
    let file = dir.join("interrupted.ttr");
    let mut cmd = bin();
    cmd.args(["record", "-q", "--port", "1", "-o"]).arg(&file);
    // Every probe attached: one link per hook, a dozen or more.
    let run = interrupt_after(cmd, Duration::from_millis(200), 10);
    assert!(run.status.success(), "{}", run.err);
    assert!(run.err.contains("(interrupted)"), "{}", run.err);
    let left = still_there(&run.links);
    assert!(left.is_empty(), "links left behind: {left:?}");
    let mut reader = tenge_trace::trace_file::TraceReader::open(&file).unwrap();
    let summary = reader.for_each(|_| {}).unwrap();
    assert_eq!(summary.end_reason, "interrupted");
}

#[test]
fn stages_interrupted_prints_and_writes_the_totals() {
    if !common::require_root("stages_interrupted_prints_and_writes_the_totals") {
        return;
    }
    let dir = common::TempDir::new("sigint-stages");
    let file = dir.join("stages.json");
    let mut cmd = bin();
    cmd.args(["stages", "--port", "1", "--json"]).arg(&file);
    // Its eight programs attached (three driver entries share one hook).
    let run = interrupt_after(cmd, Duration::from_millis(200), 8);
    assert!(run.status.success(), "{}", run.err);
    assert!(run.out.contains("(interrupted)"), "{}", run.out);
    assert!(
        run.out.contains("unmatched"),
        "the totals table: {}",
        run.out
    );
    let left = still_there(&run.links);
    assert!(left.is_empty(), "links left behind: {left:?}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    common::assert_matches_schema("stages.schema.json", &json);
    assert_eq!(json["end_reason"], "interrupted");
}

/// The namespaces of `tt-<pid>-` that `ip netns list` shows.
fn namespaces_of(pid: u32) -> Vec<String> {
    let listed = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with(&format!("tt-{pid}-")))
        .map(str::to_string)
        .collect()
}

/// Waits (up to 30 s) until `file` holds `bytes` or more.
fn wait_for_bytes(file: &std::path::Path, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(file).map_or(0, |m| m.len()) < bytes {
        assert!(Instant::now() < deadline, "{} stayed short", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run_ok(cmd: &mut Command) -> (String, String) {
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{cmd:?}: {}: {stderr}", out.status);
    (stdout, stderr)
}

/// A `lab -o` killed with SIGKILL cleans nothing up: its recording (still
/// FILE.partial) reads up to its last flush (with a warning; `--strict` refuses it), `check` names
/// the namespaces it left, and the next lab removes them (and the veth pair
/// and addresses inside).
#[test]
fn the_next_lab_removes_what_a_killed_one_left() {
    if !common::require_root("the_next_lab_removes_what_a_killed_one_left") {
        return;
    }
    let dir = common::TempDir::new("killed-lab");
    let file = dir.join("killed.tt");
    let mut killed = Running::spawn(
        bin()
            .args(["lab", "--scenario", "sws-stall", "-o"])
            .arg(&file),
    );
    let pid = killed.0.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while namespaces_of(pid).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the lab never made its namespaces"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Until it is finished, a recording is FILE.partial.
    let partial = tenge_trace::trace_file::partial_path(&file);
    wait_for_bytes(&partial, 16 * 1024);
    // SIGKILL leaves them (any lab starting now, in a test beside this one
    // too, removes them).
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    let left = namespaces_of(pid);
    let (check, _) = run_ok(bin().args(["check", "--json"]));
    let check: serde_json::Value = serde_json::from_str(&check).unwrap();
    for name in &left {
        assert!(
            check["leftovers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l == name.as_str()),
            "check does not name {name}: {}",
            check["leftovers"]
        );
    }
    assert!(!file.exists(), "an unfinished recording replaces nothing");
    let file = partial;
    let (report, warning) = run_ok(bin().arg("report").arg(&file));
    assert!(warning.contains("is damaged from byte"), "{warning}");
    assert!(report.contains("WINDOWS AND LIMITS"), "{report}");
    let (json, _) = run_ok(bin().args(["report", "--json"]).arg(&file));
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    common::assert_matches_schema("report.schema.json", &json);
    assert!(
        json["damage"]["events_read"].as_u64().unwrap() > 0,
        "{}",
        json["damage"]
    );
    let strict = bin()
        .args(["report", "--strict"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(2), "--strict refuses it");

    let next = bin()
        .args(["lab", "--scenario", "mss-clamp"])
        .output()
        .unwrap();
    assert!(
        next.status.success(),
        "{}",
        String::from_utf8_lossy(&next.stderr)
    );
    assert_eq!(namespaces_of(pid), Vec::<String>::new());
}

/// CLOCK_MONOTONIC, the clock of the events' `ts_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock and out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A `record` killed with SIGKILL while traffic flows loses at most the
/// events of its last `FLUSH_EVERY` (100 ms), and some of the ring's: its
/// file reads up to within 250 ms of the kill.
#[test]
fn a_killed_record_loses_at_most_its_last_quarter_second() {
    if !common::require_root("a_killed_record_loses_at_most_its_last_quarter_second") {
        return;
    }
    // A write of 1 KB every millisecond over loopback.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let flowing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sender = {
        let flowing = flowing.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut out = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            while flowing.load(std::sync::atomic::Ordering::SeqCst) {
                out.write_all(&[7; 1024]).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let (mut receiver, _) = listener.accept().unwrap();
    let drain = std::thread::spawn(move || std::io::copy(&mut receiver, &mut std::io::sink()));

    let dir = common::TempDir::new("killed-record");
    let file = dir.join("killed.tt");
    let mut killed = Running::spawn(
        bin()
            .args([
                "record",
                "-q",
                "--port",
                &port.to_string(),
                "--duration",
                "60",
                "-o",
            ])
            .arg(&file),
    );
    let file = tenge_trace::trace_file::partial_path(&file);
    wait_for_bytes(&file, 64 * 1024);
    std::thread::sleep(Duration::from_millis(500));
    let killed_at = monotonic_ns();
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    flowing.store(false, std::sync::atomic::Ordering::SeqCst);
    sender.join().unwrap();
    drain.join().unwrap().unwrap();

    let (dump, warning) = run_ok(bin().args(["dump", "--json"]).arg(&file));
    assert!(warning.contains("is damaged from byte"), "{warning}");
    let last: serde_json::Value = serde_json::from_str(dump.lines().last().unwrap()).unwrap();
    let lost_ms = killed_at.saturating_sub(last["ts_ns"].as_u64().unwrap()) as f64 / 1e6;
    eprintln!(
        "{} events read; the last {lost_ms:.1} ms before the kill lost",
        dump.lines().count()
    );
    assert!(
        lost_ms < 250.0,
        "the last {lost_ms:.1} ms before the kill are lost"
    );
    run_ok(bin().arg("report").arg(&file));
}
