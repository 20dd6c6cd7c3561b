//! `tenge-trace watch` on a live lab transfer: how soon the first alert comes
//! and that each stall is reported once; and that sockets are retired as
//! connections close. Needs root (BPF, namespaces).

#[path = "../../tests/common/mod.rs"]
mod common;

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use tenge_trace::lab::capture;
use tenge_trace::lab::iperf::Iperf3Server;
use tenge_trace::lab::{Lab, LabConfig, Scenario};
use tenge_trace::trace_file::TraceMeta;

/// A running `watch`; interrupted (Ctrl-C, so it prints its summary) and
/// reaped when dropped, also on a failed assertion.
struct Watch(Option<Child>);

impl Watch {
    fn spawn(args: &[&str]) -> Watch {
        let child = Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
            .arg("watch")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Watch(Some(child))
    }

    /// BPF links and perf events (classic tracepoints) the process holds.
    fn attachments(&self) -> usize {
        self.fds_to(&["bpf_link", "perf_event"])
    }

    /// The process's descriptors whose target names one of `kinds`.
    fn fds_to(&self, kinds: &[&str]) -> usize {
        let pid = self.0.as_ref().unwrap().id();
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|dir| {
                dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter(|target| {
                        let t = target.to_string_lossy();
                        kinds.iter().any(|kind| t.contains(kind))
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// Returns once the programs are loaded (time slices attach and detach
    /// them from then on: no steady count of links to wait for).
    /// Returns once sampling by time has taken over: the probes attached
    /// (each as soon as it loaded, traced whole until then) and then all
    /// left for the first pause.
    fn wait_slicing(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut attached = false;
        loop {
            assert!(Instant::now() < deadline, "watch did not pause");
            if let Some(status) = self.0.as_mut().unwrap().try_wait().unwrap() {
                panic!("watch exited early: {status}: {:?}", self.finish());
            }
            match self.attachments() {
                0 if attached => return,
                0 => {}
                _ => attached = true,
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Returns once the probes are attached: the count of attachments rose
    /// from zero and then held for a while.
    fn wait_attached(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut last, mut since) = (0, Instant::now());
        while Instant::now() < deadline {
            if let Some(status) = self.0.as_mut().unwrap().try_wait().unwrap() {
                panic!("watch exited early: {status}: {:?}", self.finish());
            }
            let now = self.attachments();
            if now != last {
                (last, since) = (now, Instant::now());
            } else if now > 0 && since.elapsed() > Duration::from_millis(300) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("watch did not attach");
    }

    fn finish(&mut self) -> Output {
        let child = self.0.take().expect("running");
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        child.wait_with_output().unwrap()
    }

    /// Interrupts the watch, checks that it exited well and returns its stdout.
    fn finish_ok(&mut self) -> String {
        let output = self.finish();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

/// The summary line of a `watch --json` output.
fn summary_line(stdout: &str) -> Value {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .find(|v: &Value| v["type"] == "summary")
        .expect("summary line")
}

impl Drop for Watch {
    fn drop(&mut self) {
        if self.0.is_some() {
            self.finish();
        }
    }
}

#[test]
fn watch_alerts_within_a_second_and_once_per_stall() {
    if !common::require_root("watch") {
        return;
    }
    let cfg = Scenario::SwsStall.config();
    let lab = Lab::new(&cfg).unwrap();
    let addr = lab.receiver_ip().to_string();
    let mut watch = Watch::spawn(&["--json", "--addr", &addr, "--duration", "60"]);
    watch.wait_attached();
    let path = std::env::temp_dir().join(format!("tt-watch-{}.pcap", std::process::id()));
    let capture = lab.capture_receiver(&path).unwrap();
    let transfer = lab.run_transfer(&cfg, |_| {}).unwrap();
    assert!(transfer.completed);
    capture.stop().unwrap();
    let wire = capture::read_segments(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    // The last ACKs reach the ring buffer well within this.
    std::thread::sleep(Duration::from_millis(300));
    let stdout = watch.finish_ok();

    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let alerts: Vec<&Value> = lines.iter().filter(|v| v["type"] == "alert").collect();
    let summary = lines
        .iter()
        .find(|v| v["type"] == "summary")
        .expect("summary line");
    let boot_offset_ns = TraceMeta::for_this_host().boot_offset_ns;
    let monotonic_ns = |unix_s: f64| (unix_s * 1e9) as i64 - boot_offset_ns;
    // The pathology as the issue defines a stall: the receiver's window below
    // one MSS (8948 at MTU 9000 with timestamps) or at zero, on the wire.
    assert!(!capture::zero_window_periods(&wire, transfer.receiver_addr).is_empty());
    let periods: Vec<(i64, i64)> =
        capture::window_below_periods(&wire, transfer.receiver_addr, 8948)
            .into_iter()
            .map(|(start, end)| (monotonic_ns(start), monotonic_ns(end)))
            .collect();
    let alert_ts = |a: &Value| a["ts_ns"].as_i64().unwrap();
    for a in &alerts {
        eprintln!("{} {} {}", alert_ts(a), a["kind"], a["message"]);
    }
    eprintln!("zero-window periods on the wire: {periods:?}");
    assert!(!periods.is_empty(), "the slow reader closes the window");

    // The first alert: within a second of the first stall on the wire, and not
    // before it (but for the slack of two clocks: the kernel's monotonic one
    // for events, tcpdump's wall clock turned monotonic).
    const SLACK_NS: i64 = 5_000_000;
    let first = alerts.iter().map(|a| alert_ts(a)).min().expect("an alert");
    let delay = first - periods[0].0;
    eprintln!(
        "first alert {:.1} ms after the window closed",
        delay as f64 / 1e6
    );
    assert!(
        (-SLACK_NS..1_000_000_000).contains(&delay),
        "first alert {delay} ns after the stall began"
    );

    // One sws_stall alert per stall period, raised during it.
    let stall_alerts: Vec<i64> = alerts
        .iter()
        .filter(|a| a["kind"] == "sws_stall")
        .map(|a| alert_ts(a))
        .collect();
    for (start, end) in &periods {
        let within = stall_alerts
            .iter()
            .filter(|&&t| t >= *start && t <= end + SLACK_NS)
            .count();
        assert_eq!(
            within, 1,
            "period {start}..{end}: alerts at {stall_alerts:?}"
        );
    }
    assert_eq!(stall_alerts.len(), periods.len());
    // Each carries its numbers for programs: the MSS the window stays
    // below, and how long the stall had lasted when it was raised.
    for a in alerts.iter().filter(|a| a["kind"] == "sws_stall") {
        let figures = &a["figures"];
        assert_eq!(figures["bytes"], 8948, "{a}");
        assert!(
            figures["duration_ns"].as_u64().is_some_and(|d| d > 0),
            "{a}"
        );
    }
    // A stall still running alerts as time finds it 100 ms old, not at the
    // ACK of the next zero-window probe (an RTO, 200 ms or more, after the
    // window closed; 216 and 220 ms "so far" before time told): the
    // collector says how far its records are after each drain (every 50 ms
    // at most while the ring is quiet, and up to 50 ms behind: HOLD_NS).
    let running: Vec<u64> = alerts
        .iter()
        .filter(|a| a["kind"] == "sws_stall")
        .filter(|a| a["message"].as_str().unwrap().contains("so far"))
        .map(|a| a["figures"]["duration_ns"].as_u64().unwrap())
        .collect();
    assert!(!running.is_empty(), "no stall alerted while it ran");
    assert!(
        running.iter().all(|&d| d < 190_000_000),
        "stalls alerted {running:?} ns in"
    );
    // The summary's episodes are the same ones.
    let episodes: usize = summary["report"]["flows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["window"]["sws_stalls"].as_array().unwrap().len())
        .sum();
    assert_eq!(episodes, periods.len());
}

/// `connections` connections from the sender's namespace to a listener in
/// the receiver's, one after the other: 10 kB each way, then both ends
/// close. Returns once every socket, the listener too, is closed.
fn short_connections(lab: &Lab, connections: usize) {
    let listener = lab
        .receiver_netns()
        .run(|| Ok(TcpListener::bind(SocketAddrV4::new(lab.receiver_ip(), 0))?))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            for _ in 0..connections {
                let (mut stream, _) = listener.accept().unwrap();
                let mut request = Vec::new();
                stream.read_to_end(&mut request).unwrap();
                stream.write_all(&request).unwrap();
            }
        });
        lab.sender_netns()
            .run(|| {
                for _ in 0..connections {
                    let mut stream = TcpStream::connect(addr)?;
                    stream.write_all(&[7; 10_000])?;
                    stream.shutdown(Shutdown::Write)?;
                    let mut reply = Vec::new();
                    stream.read_to_end(&mut reply)?;
                    assert_eq!(reply.len(), 10_000);
                }
                Ok(())
            })
            .unwrap();
        server.join().unwrap();
    });
}

#[test]
fn watch_retires_the_sockets_of_closed_connections() {
    if !common::require_root("watch_retires_the_sockets_of_closed_connections") {
        return;
    }
    const CONNECTIONS: usize = 60;
    const ROWS: usize = 10;
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let addr = lab.receiver_ip().to_string();
    let rows = ROWS.to_string();
    let mut watch = Watch::spawn(&["--json", "--addr", &addr, "--flow-rows", &rows]);
    watch.wait_attached();
    short_connections(&lab, CONNECTIONS);
    // Closed sockets go once silent for a second, at the next look (a tick a second).
    std::thread::sleep(Duration::from_millis(2500));
    let summary = summary_line(&watch.finish_ok());
    let report = &summary["report"];
    let retirement = &report["retirement"];
    let sockets = report["sockets"].as_array().unwrap();
    // Both ends of every connection, and the listener: all closed.
    let retired = retirement["flows_retired"].as_u64().unwrap();
    assert_eq!(retired, 2 * CONNECTIONS as u64 + 1, "{retirement}");
    assert_eq!(
        retirement["rows_folded"].as_u64().unwrap(),
        retired - ROWS as u64
    );
    // Nothing of the connections is left live: the rows shown are the kept ones.
    assert_eq!(sockets.len(), ROWS, "{sockets:#?}");
    // The folded rows' bytes with the shown ones': 10 kB each way per connection.
    let shown: u64 = sockets
        .iter()
        .map(|s| s["bytes_sent"].as_u64().unwrap())
        .sum();
    let folded = retirement["folded"]["bytes_sent"].as_u64().unwrap();
    assert_eq!(shown + folded, 2 * 10_000 * CONNECTIONS as u64);
}

/// `watch --sample 4 --slice 50ms` over an iperf3 transfer: the probes come
/// and go with the slices, and the summary says so as `record`'s report
/// does: its pauses, the sampling and the scale the counts were taken by.
#[test]
fn watch_by_time_slices_reports_its_pauses_and_scale() {
    if !common::require_root("watch_by_time_slices_reports_its_pauses_and_scale") {
        return;
    }
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let server = Iperf3Server::start(lab.receiver_netns().name(), 5201).unwrap();
    let addr = lab.receiver_ip().to_string();
    let mut watch = Watch::spawn(&[
        "--json", "--addr", &addr, "--sample", "4", "--slice", "50ms",
    ]);
    watch.wait_slicing();
    let client = Command::new("ip")
        .args(["netns", "exec", lab.sender_netns().name()])
        .args(["iperf3", "-c", &addr, "-p", "5201", "-t", "3"])
        .output()
        .unwrap();
    assert!(client.status.success(), "{client:?}");
    drop(server);
    let summary = summary_line(&watch.finish_ok());
    let report = &summary["report"];
    common::assert_matches_schema("report.schema.json", report);
    assert_eq!(report["sample_every"], 4);
    assert_eq!(report["sample_slice_ns"], 50_000_000);
    // Runs of 200 ms, a pause in each, over the 3 s of the transfer at
    // least (and the watch's own start, a second or less).
    let pauses = report["pauses"]["count"].as_u64().unwrap();
    let scale = report["scale"].as_f64().unwrap();
    eprintln!("{pauses} pauses, scale {scale:.2}");
    assert!((10..=25).contains(&pauses), "{pauses} pauses");
    assert!((3.0..6.0).contains(&scale), "scale {scale}");
}
