//! `record` and `check` on the real kernel (root).

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};
use tenge_trace::event::Body;
use tenge_trace::flow::FlowTable;
use tenge_trace::lab::iperf::Iperf3Server;
use tenge_trace::lab::{Lab, LabConfig};
use tenge_trace::trace_file::{KernelPointers, TraceReader};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
}

/// `record ARGS -o FILE --addr RECEIVER --` iperf3 from the lab's sender to
/// a server on its receiver, with `iperf3_args`.
fn record_iperf3(lab: &Lab, file: &Path, args: &[&str], iperf3_args: &[&str]) -> Output {
    let server = Iperf3Server::start(lab.receiver_netns().name(), 5201).unwrap();
    let receiver = lab.receiver_ip().to_string();
    let out = bin()
        .arg("record")
        .args(args)
        .arg("-o")
        .arg(file)
        .args(["--addr", &receiver, "--"])
        .args(["ip", "netns", "exec", lab.sender_netns().name()])
        .args(["iperf3", "-c", &receiver, "-p", "5201"])
        .args(iperf3_args)
        .output()
        .unwrap();
    drop(server);
    out
}

#[derive(Default, Debug)]
struct Seen {
    tx: HashMap<&'static str, u64>,
    rx: HashMap<&'static str, u64>,
}

#[test]
fn record_iperf3_tells_data_from_control_by_cookie() {
    if !common::require_root("record_iperf3_tells_data_from_control_by_cookie") {
        return;
    }
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let dir = common::TempDir::new("record-iperf3");
    let file = dir.join("iperf3.ttr");
    let out = record_iperf3(&lab, &file, &["-q", "--count-hits"], &["-t", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("(command exited)"), "{stderr}");
    assert!(stderr.contains("hook hits"), "{stderr}");

    let mut reader = TraceReader::open(&file).unwrap();
    assert_eq!(reader.meta().command[0], "ip");
    let mut flows = FlowTable::new();
    let mut seen: HashMap<u64, Seen> = HashMap::new();
    let mut start_xmits = 0;
    // By default no kernel address is stored: identifiers stand for them.
    assert_eq!(reader.meta().kernel_pointers, KernelPointers::Hashed);
    let mut addresses = 0;
    let (mut newest, mut backwards) = (0, 0);
    let summary = reader
        .for_each(|ev| {
            backwards += u64::from(ev.hdr.ts_ns < newest);
            newest = newest.max(ev.hdr.ts_ns);
            start_xmits += u64::from(matches!(ev.body, Body::DevStartXmit(_)));
            addresses += u64::from(ev.hdr.skb >= 1 << 48);
            let Some(cookie) = flows.observe(ev) else {
                return;
            };
            let entry = seen.entry(cookie).or_default();
            let kind = ev.kind_name();
            match ev.body {
                Body::Sendmsg(_) | Body::DevStartXmit(_) | Body::DevXmit(_) => {
                    *entry.tx.entry(kind).or_default() += 1
                }
                Body::WindowAdv(w) if w.len > 0 => *entry.tx.entry(kind).or_default() += 1,
                Body::RxEntry(_)
                | Body::NetifReceive(_)
                | Body::DataReady(_)
                | Body::CopyDatagram(_)
                | Body::AppRead(_) => *entry.rx.entry(kind).or_default() += 1,
                Body::TcpRcv(r) if r.len > 0 => *entry.rx.entry(kind).or_default() += 1,
                _ => {}
            }
        })
        .unwrap()
        .clone();
    // Written as the ring gave them, read in time order: none written
    // after a block had called its time complete.
    assert_eq!(backwards, reader.late());
    common::assert_few_late(reader.late(), summary.events, "events out of time order");
    // The report says what the hit counters found (0 on most runs).
    let report = bin()
        .args(["report", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(summary.lost_total(), 0);
    assert_eq!(addresses, 0, "kernel addresses in a default recording");
    // Every packet the file has passed the driver hook, which perf counted
    // (with the other traffic of the machine, which the filter drops).
    let hits = summary.hook_hits.as_ref().expect("hits were counted");
    let start_xmit = hits
        .iter()
        .find(|h| h.hook == "net:net_dev_start_xmit")
        .expect("the driver hook was counted");
    assert!(
        start_xmit.hits >= start_xmits && start_xmits > 1000,
        "{start_xmit:?}: {start_xmits}"
    );
    let not_run = summary.hits_not_run().unwrap();
    assert_eq!(report["hits_not_run"], not_run);
    assert!(
        not_run * 20 <= hits.iter().map(|h| h.hits).sum::<u64>(),
        "{hits:?}"
    );

    // iperf3's client opens a control connection and a data connection to :5201.
    let clients: Vec<_> = flows
        .flows()
        .into_iter()
        .filter(|f| f.key.remote.port() == 5201)
        .collect();
    assert!(
        clients.len() >= 2,
        "expected control + data connections, got {clients:?}"
    );
    let (data, control) = (clients[0], clients.last().unwrap());
    assert_ne!(data.sock_cookie, control.sock_cookie);
    assert!(
        data.bytes_sent > 1_000_000,
        "data connection sent {} bytes",
        data.bytes_sent
    );
    assert!(
        data.bytes_sent > 100 * control.bytes_sent.max(1),
        "{data:?} vs {control:?}"
    );

    // TX stages on the client's data socket, RX stages on the server's end of it.
    let tx = &seen[&data.sock_cookie].tx;
    for kind in ["sendmsg", "window_adv", "dev_start_xmit", "dev_xmit"] {
        assert!(
            tx.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} on the data connection: {tx:?}"
        );
    }
    let server_end = flows
        .peer_of(data.sock_cookie)
        .expect("the server's socket of the data connection");
    let rx = &seen[&server_end].rx;
    for kind in [
        "rx_entry",
        "netif_receive",
        "tcp_rcv",
        "data_ready",
        "copy_datagram",
        "app_read",
    ] {
        assert!(
            rx.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} on the data connection's receiver: {rx:?}, {:?} (peer of {data:?})",
            flows.get(server_end)
        );
    }
    // The control connection carries next to none of it.
    let control_tx = seen
        .get(&control.sock_cookie)
        .map_or(0, |s| s.tx.get("dev_start_xmit").copied().unwrap_or(0));
    assert!(
        control_tx * 100 < tx["dev_start_xmit"],
        "control {control_tx} vs data {}",
        tx["dev_start_xmit"]
    );
}

#[test]
fn check_json_reports_this_kernel() {
    if !common::require_root("check_json_reports_this_kernel") {
        return;
    }
    let out = bin().args(["check", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let works = |family: &str| {
        report["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["family"] == family)
            .unwrap()["works"]
            .as_bool()
            .unwrap()
    };
    for family in ["tp_btf", "raw_tp", "tracepoint"] {
        assert!(works(family), "{family}");
    }
    // Truth from the kernel itself: kprobes exist when their PMU is registered.
    let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe/type").exists();
    assert_eq!(works("kprobe"), kprobes);
    if !works("fentry") {
        let fentry = report["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["family"] == "fentry")
            .unwrap();
        assert!(fentry["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    let plan = report["plan"]["probes"].as_array().unwrap();
    assert!(plan
        .iter()
        .any(|p| p["kind"] == "window_adv" && !p["backend"].is_null()));
    assert_eq!(
        report["kernel"].as_str().unwrap(),
        tenge_trace::os::kernel_release()
    );
}

#[test]
fn unprivileged_runs_fail_clearly() {
    if !common::require_root("unprivileged_runs_fail_clearly") {
        return;
    }
    use std::os::unix::process::CommandExt;
    let out = bin()
        .args(["check"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not usable"));
    let file = std::env::temp_dir().join("tt-never-written.ttr");
    let out = bin()
        .args(["record", "--duration", "1", "-o"])
        .arg(&file)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("root") || err.contains("CAP_BPF"), "{err}");
    assert!(
        !file.exists(),
        "nothing is written when tracing cannot start"
    );
}

#[test]
fn bad_input_is_refused() {
    let out = bin()
        .args([
            "record",
            "-o",
            "/tmp/tt-x.ttr",
            "--netns",
            "no-such-namespace-here",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // Unprivileged, the privilege check comes first; as root, the namespace is named.
    assert!(
        err.contains("no-such-namespace-here") || err.contains("root"),
        "{err}"
    );
    let out = bin()
        .args(["lab", "--scenario", "no-such-scenario"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-scenario"));
    // Time slices need a rate, and room to attach the probes in; hits are
    // not counted against programs that come and go.
    let record = ["record", "-o", "/tmp/tt-x.ttr"];
    for (args, says) in [
        (&[&record[..], &["--slice", "20ms"]].concat(), "--sample N"),
        (
            &[&record[..], &["--sample", "4", "--slice", "1ms"]].concat(),
            "at least 5ms",
        ),
        (
            &[
                &record[..],
                &["--sample", "4", "--slice", "20ms", "--count-hits"],
            ]
            .concat(),
            "cannot be used with",
        ),
        (&vec!["watch", "--slice", "20ms"], "--sample N"),
    ] {
        let out = bin().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `record --sample 4 --slice 50ms` of an iperf3 transfer: the recording
/// has its pauses, begin and end in turn, as `dump --json` describes them,
/// and the report says how it was sampled and what it scaled by.
#[test]
fn record_by_time_slices_writes_its_pauses() {
    if !common::require_root("record_by_time_slices_writes_its_pauses") {
        return;
    }
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let dir = common::TempDir::new("record-slices");
    let file = dir.join("sliced.ttr");
    let args = ["-q", "--sample", "4", "--slice", "50ms"];
    let out = record_iperf3(&lab, &file, &args, &["-t", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump = bin()
        .args(["dump", "--json", "--kind", "pause"])
        .arg(&file)
        .output()
        .unwrap();
    let edges: Vec<serde_json::Value> = String::from_utf8_lossy(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for edge in &edges {
        common::assert_matches_schema("dump-event.schema.json", edge);
    }
    // The recording starts and ends traced (a bound) or in a pause (its
    // begin, its end); between, each pause a begin and an end.
    let bound = |i: usize| edges.get(i).is_some_and(|e| e["edge"] == "bound");
    let (first, last) = (
        usize::from(bound(0)),
        edges.len() - usize::from(bound(edges.len() - 1)),
    );
    let pause_edges = &edges[first..last];
    // 2 s in runs of 200 ms: about ten pauses.
    assert!(
        pause_edges.len() >= 12 && pause_edges.len().is_multiple_of(2),
        "{} edges",
        pause_edges.len()
    );
    for (i, edge) in pause_edges.iter().enumerate() {
        assert_eq!(edge["edge"], ["begin", "end"][i % 2], "{edge}");
    }
    let report = bin()
        .args(["report", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    common::assert_matches_schema("report.schema.json", &report);
    assert_eq!(report["pauses"]["count"], pause_edges.len() / 2);
    assert_eq!(report["sample_every"], 4);
    assert_eq!(report["sample_slice_ns"], 50_000_000);
    // Each window's events stand for 4 times its slices: 4 where they were
    // traced whole (the probes come back ahead of them), more where coming
    // back took longer than half a slice; never less.
    let scale = report["scale"].as_f64().unwrap();
    assert!((3.999..5.0).contains(&scale), "scale {scale}");
    let text = bin().arg("report").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("sampling 1/4 of the time in slices of 50.0 ms"),
        "{text}"
    );
}

#[test]
fn lab_json_is_alert_lines_then_one_summary() {
    if !common::require_root("lab_json_is_alert_lines_then_one_summary") {
        return;
    }
    let (alerts, summary, stderr) = lab_json(&["--scenario", "rwnd-limited"]);
    assert!(alerts
        .iter()
        .all(|a| a["type"] == "alert" || a["type"] == "cleared"));
    assert_eq!(summary["type"], "summary");
    assert_eq!(summary["scenario"], "rwnd-limited");
    // The kernel's view of both sockets, read while they were open.
    assert_eq!(
        summary["ss"].as_array().unwrap().len(),
        2,
        "{}\n{stderr}",
        summary["ss"],
    );
    let report = &summary["report"];
    assert!(report["events"].as_u64().unwrap() > 0);
    assert_eq!(report["events_lost"], 0);
    // The lab counts the hits the kernel ran no program for: each end's
    // bytes are its tcp_info's at the end but for at most a 64 KiB skb per
    // such hit.
    let not_run = report["hits_not_run"].as_u64().expect("hits counted");
    let transfer = &summary["transfer"];
    for (end, field) in [("sender", "bytes_sent"), ("receiver", "bytes_received")] {
        let local = &transfer[format!("{end}_addr")];
        let socket = report["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| &s["src"] == local)
            .unwrap_or_else(|| panic!("no socket {local}"));
        let (ours, kernel) = (socket[field].as_u64(), transfer[end][field].as_u64());
        let (ours, kernel) = (ours.unwrap(), kernel.unwrap());
        assert!(
            ours <= kernel && kernel - ours <= not_run * 65536,
            "{end} {field}: {ours} traced, {kernel} by tcp_info, {not_run} hits not run"
        );
    }
}

/// `lab --sample 8` of a receive-window-limited transfer: each socket's
/// bytes, estimated from the kept blocks, come near what `ss -ti` counted
/// (measured −1.8% to +3.5% over three runs: about 2048 of 16384 blocks
/// kept), where the kept segments' own bytes gave 28%; and no advice rests
/// on the windows of the kept segments, though the flow is limited enough
/// to get some unsampled.
#[test]
fn lab_sampled_by_bytes_estimates_bytes_and_gives_no_advice() {
    if !common::require_root("lab_sampled_by_bytes_estimates_bytes_and_gives_no_advice") {
        return;
    }
    let (_, summary, _) = lab_json(&["--scenario", "rwnd-limited", "--sample", "8"]);
    let report = &summary["report"];
    assert_eq!(report["sample_every"], 8);
    let mut compared = 0;
    for ss in summary["ss"].as_array().unwrap() {
        let socket = report["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["src"] == ss["local"])
            .unwrap_or_else(|| panic!("no socket {}", ss["local"]));
        // ss names only the direction a socket moved bytes in.
        for field in ["bytes_sent", "bytes_received"] {
            let Some(kernel) = ss[field].as_f64().filter(|&b| b > 0.0) else {
                continue;
            };
            let estimate = socket[field].as_f64().unwrap();
            eprintln!("{field}: {estimate} estimated, {kernel} by ss");
            assert!(
                (estimate / kernel - 1.0).abs() < 0.10,
                "{field}: {estimate} vs {kernel}"
            );
            compared += 1;
        }
    }
    assert_eq!(compared, 2, "{}", summary["ss"]);
    let flows = report["flows"].as_array().unwrap();
    let limited = flows.iter().map(|f| f["limits"]["rwnd"].as_f64().unwrap());
    assert!(limited.fold(0.0, f64::max) >= 0.2, "{flows:?}");
    for f in flows {
        assert_eq!(f["advice"], serde_json::json!([]), "{}", f["src"]);
    }
}

/// `lab ARGS --json`, which must succeed: its alert lines, its summary and
/// what it wrote to stderr.
fn lab_json(args: &[&str]) -> (Vec<serde_json::Value>, serde_json::Value, String) {
    let out = bin().arg("lab").args(args).arg("--json").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let mut lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every stdout line is one JSON object"))
        .collect();
    let summary = lines.pop().expect("a summary line");
    (lines, summary, stderr)
}

/// A SIGTERM to the tool alone (a supervisor's `kill PID`, not a terminal's
/// Ctrl-C to the process group) ends `record -- CMD` and the command: the
/// command gets SIGTERM in turn, the recording is finished and readable, the
/// summary printed, and the status is 128 + SIGTERM.
#[test]
fn sigterm_to_the_tool_alone_ends_record_and_its_command() {
    if !common::require_root("sigterm_to_the_tool_alone_ends_record_and_its_command") {
        return;
    }
    let dir = common::TempDir::new("record-sigterm");
    let file = dir.join("t.ttr");
    // A duration no other process on the host sleeps for, to find it after.
    let nap = "61.0417";
    let mut tool = bin()
        .args(["record", "--quiet", "-o"])
        .arg(&file)
        .args(["--", "sleep", nap])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sleeping = || {
        Command::new("pgrep")
            .args(["-f", &format!("^sleep {nap}$")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let started = std::time::Instant::now();
    while !sleeping() {
        assert!(
            started.elapsed().as_secs() < 60,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(tool.id() as libc::pid_t, libc::SIGTERM) };
    let signalled = std::time::Instant::now();
    let status = tool.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut tool.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(
        signalled.elapsed().as_secs() < 10,
        "{:?}",
        signalled.elapsed()
    );
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{stderr}");
    assert!(stderr.contains("(interrupted) written to"), "{stderr}");
    assert!(!sleeping(), "the command outlived the tool");
    let mut reader = TraceReader::open(&file).expect("a finished recording");
    let summary = reader.for_each(|_| {}).expect("readable to its end");
    assert_eq!(summary.end_reason, "interrupted");
}

fn bpf_stats_enabled() -> String {
    std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
        .unwrap()
        .trim()
        .to_string()
}

/// bpf_stats is held on by each session's own descriptor: two overlapping
/// `--count-hits` sessions (and a third killed outright) report no false
/// unrun hits, and leave the host's switch as it was.
#[test]
fn overlapping_hit_counts_leave_the_host_as_it_was() {
    if !common::require_root("overlapping_hit_counts_leave_the_host_as_it_was") {
        return;
    }
    let before = bpf_stats_enabled();
    let dir = common::TempDir::new("record-hits");
    // Loopback traffic the whole time, so the hooks are hit.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sender = std::thread::spawn(move || {
        use std::io::Write;
        let mut out = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        // Past the last session (`kept`) however slowly the tracers attach.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(12);
        while std::time::Instant::now() < end {
            out.write_all(&[1; 4096]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    });
    let (mut receiver, _) = listener.accept().unwrap();
    let drain = std::thread::spawn(move || std::io::copy(&mut receiver, &mut std::io::sink()));
    let record = |name: &str, secs: &str| {
        let mut cmd = bin();
        cmd.args(["record", "-q", "--count-hits", "--duration", secs, "-o"])
            .arg(dir.join(name))
            .stderr(std::process::Stdio::piped());
        cmd.spawn().unwrap()
    };
    let long = record("long.tt", "3.5");
    std::thread::sleep(std::time::Duration::from_millis(800));
    let mut killed = record("killed.tt", "30");
    std::thread::sleep(std::time::Duration::from_millis(800));
    killed.kill().unwrap();
    killed.wait().unwrap();
    let short = record("short.tt", "1").wait_with_output().unwrap();
    let kept = bin()
        .args([
            "record",
            "-q",
            "--keep-kernel-pointers",
            "--duration",
            "0.5",
            "-o",
        ])
        .arg(dir.join("kept.tt"))
        .output()
        .unwrap();
    assert!(kept.status.success());
    let long = long.wait_with_output().unwrap();
    sender.join().unwrap();
    drain.join().unwrap().unwrap();
    let mut reader = TraceReader::open(&dir.join("kept.tt")).unwrap();
    assert_eq!(reader.meta().kernel_pointers, KernelPointers::Kept);
    let mut addresses = 0;
    reader
        .for_each(|ev| addresses += u64::from(ev.hdr.skb >= 0xffff << 48))
        .unwrap();
    assert!(addresses > 0, "--keep-kernel-pointers kept none");
    for (name, out) in [("short.tt", short), ("long.tt", long)] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        let mut reader = TraceReader::open(&dir.join(name)).unwrap();
        let summary = reader.for_each(|_| {}).unwrap();
        let hits: u64 = summary.hook_hits.iter().flatten().map(|h| h.hits).sum();
        assert!(hits > 0, "{name}: no hook was hit");
        // This VM's kernel skips a program now and then (up to 2.8 % of a
        // transfer's hits, README), as one session alone shows; stats
        // switched off under a session would leave a quarter or more of
        // its hits uncounted (79 % in the run).
        let not_run = summary.hits_not_run().unwrap();
        assert!(
            not_run * 20 <= hits,
            "{name}: {not_run} of {hits} hits ran no program: {stderr}"
        );
    }
    assert_eq!(bpf_stats_enabled(), before);
}

/// iperf3 -R: the client's data socket sends a 37 B cookie and receives the
/// transfer. Each socket's report is about the direction that carried more
/// (it was about the cookie's, with the server's estimate of the MSS and
/// advice for the server's buffer), so both ends of the data connection
/// tell of the same windows, and the client's MSS is what `ss -ti` gives it.
#[test]
fn a_reversed_transfer_is_reported_from_the_side_that_received_it() {
    if !common::require_root("a_reversed_transfer_is_reported_from_the_side_that_received_it") {
        return;
    }
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let dir = common::TempDir::new("record-reverse");
    let file = dir.join("reverse.ttr");
    let out = record_iperf3(&lab, &file, &["-q"], &["-t", "1", "-R"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = bin()
        .args(["report", "--json"])
        .arg(&file)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let bytes = |cookie: &serde_json::Value| {
        let s = report["sockets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| &s["sock_cookie"] == cookie)
            .unwrap();
        (
            s["bytes_sent"].as_u64().unwrap(),
            s["bytes_received"].as_u64().unwrap(),
        )
    };
    let flows = report["flows"].as_array().unwrap();
    let client = flows
        .iter()
        .filter(|f| f["dst"].as_str().unwrap().ends_with(":5201"))
        .max_by_key(|f| bytes(&f["sock_cookie"]).1)
        .unwrap();
    let (sent, received) = bytes(&client["sock_cookie"]);
    assert!(sent < 1000 && received > 10_000_000, "{sent} {received}");
    assert_eq!(client["mss"]["direction"], "receive", "{}", client["mss"]);
    let server_end = flows
        .iter()
        .find(|f| f["sock_cookie"] == client["peer_cookie"])
        .unwrap();
    assert_eq!(server_end["mss"]["direction"], "send");
    assert_eq!(client["mss"], {
        let mut m = server_end["mss"].clone();
        m["direction"] = "receive".into();
        m
    });
    assert_eq!(client["window"]["chain"], server_end["window"]["chain"]);
    // The data's receiver estimates the sender's MSS once data came (536
    // is the estimate of a socket that got none).
    assert_eq!(client["mss"]["receiver_estimate"], 1448);
}
