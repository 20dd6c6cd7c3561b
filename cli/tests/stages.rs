//! `stages`: in-kernel aggregation from the command line.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;
use tenge_trace::lab::iperf::Iperf3Server;
use tenge_trace::lab::{Lab, LabConfig};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
}

#[test]
fn stages_json_on_stdout_of_a_short_transfer() {
    if !common::require_root("stages_json_on_stdout_of_a_short_transfer") {
        return;
    }
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let server = Iperf3Server::start(lab.receiver_netns().name(), 5201).unwrap();
    let receiver = lab.receiver_ip().to_string();
    let out = bin()
        .args(["stages", "--addr", &receiver, "--json", "-", "--"])
        .args(["ip", "netns", "exec", lab.sender_netns().name()])
        .args(["iperf3", "-c", &receiver, "-p", "5201", "-t", "1"])
        .output()
        .unwrap();
    drop(server);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The table went to stderr, the JSON alone to stdout.
    assert!(stderr.contains("unmatched"), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    common::assert_matches_schema("stages.schema.json", &json);
    assert_eq!(json["end_reason"], "command exited");
    assert_eq!(json["filters"]["addr"], receiver.as_str());
    assert_eq!(json["intervals"], serde_json::json!([]));
    let stages = json["totals"]["stages"].as_array().unwrap();
    let names: Vec<&str> = stages
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["qdisc", "driver", "napi", "ip_tcp"]);
    for s in stages {
        for field in [
            "samples",
            "unmatched",
            "p50_ns",
            "p90_ns",
            "p99_ns",
            "max_ns",
            "min_bucket_ns",
        ] {
            assert!(s[field].is_u64(), "{field} in {s}");
        }
        assert!(s["mean_ns"].is_f64(), "{s}");
        // A second of iperf3 is thousands of packets through every stage.
        assert!(s["samples"].as_u64().unwrap() > 100, "{s}");
    }
    let hooks = json["totals"]["hooks"].as_array().unwrap();
    assert_eq!(hooks.len(), 6);
    for h in hooks {
        assert!(h["packets"].as_u64().unwrap() > 100, "{h}");
        assert!(
            h["bytes"].as_u64().unwrap() > h["packets"].as_u64().unwrap(),
            "{h}"
        );
    }
}

/// `--comm` in the kernel, on every kernel of the matrix (the sendmsg mark
/// is tp_btf on 6.18, fentry or kprobe before the tracepoint): iperf3's
/// flows are counted under `--comm iperf3`, nothing under a name no task has.
#[test]
fn stages_with_comm_counts_only_that_commands_flows() {
    if !common::require_root("stages_with_comm_counts_only_that_commands_flows") {
        return;
    }
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let receiver = lab.receiver_ip().to_string();
    let tx_packets = |comm: &str| {
        let server = Iperf3Server::start(lab.receiver_netns().name(), 5201).unwrap();
        let out = bin()
            .args(["stages", "--addr", &receiver, "--comm", comm])
            .args(["--json", "-", "--"])
            .args(["ip", "netns", "exec", lab.sender_netns().name()])
            .args(["iperf3", "-c", &receiver, "-p", "5201", "-t", "1"])
            .output()
            .unwrap();
        drop(server);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        common::assert_matches_schema("stages.schema.json", &json);
        assert_eq!(json["filters"]["task"]["comm"], comm);
        let marks: Vec<&serde_json::Value> = json["plan"]["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| ["sendmsg", "copy_datagram"].contains(&p["kind"].as_str().unwrap()))
            .collect();
        assert_eq!(marks.len(), 2, "{marks:?}");
        assert!(marks.iter().all(|p| p["backend"].is_string()), "{marks:?}");
        let hooks = json["totals"]["hooks"].as_array().unwrap();
        let queued = hooks.iter().find(|h| h["hook"] == "net_dev_queue").unwrap();
        queued["packets"].as_u64().unwrap()
    };
    let iperf3 = tx_packets("iperf3");
    assert!(iperf3 > 100, "{iperf3} packets of iperf3 counted");
    assert_eq!(tx_packets("tt-nobody"), 0);
}

#[test]
fn stages_refuses_an_unknown_netns_and_sampling() {
    // Both fail before anything is loaded: no root needed.
    let out = bin()
        .args([
            "stages",
            "--netns",
            "tenge-no-such-netns",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--netns <NAME>")
            && stderr.contains("no network namespace \"tenge-no-such-netns\""),
        "{stderr}"
    );
    // Sampling by bytes does not apply: --sample samples slices of time.
    let out = bin()
        .args(["stages", "--sample", "8", "--duration", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--slice <TIME>"), "{stderr}");
    for bad in [
        ["--sample", "1", "--slice", "20ms"],
        ["--sample", "8", "--slice", "1ms"],
    ] {
        let out = bin().arg("stages").args(bad).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad:?}: {stderr}");
        assert!(
            stderr.contains("--sample") || stderr.contains("--slice"),
            "{stderr}"
        );
    }
}

/// `--sample 4 --slice 50ms` on every kernel of the matrix: the programs
/// come and go (about 15 pauses in 3 s), the counts scaled by each
/// window's slices over the time it counted come near what iperf3 sent at a steady
/// 200 Mbit/s (50 in an emulated guest, which keeps up with it traced or
/// not; the programs count only while all are attached: counting
/// as they came and went one by one gave 1.51 times it in the emulated 6.1
/// guest), and no latency spans a pause (the stamps left before one are
/// not taken after it: every pause is at least a slice long, 50 ms).
#[test]
fn stages_by_time_slices_scales_counts_and_times_no_pause() {
    if !common::require_root("stages_by_time_slices_scales_counts_and_times_no_pause") {
        return;
    }
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let server = Iperf3Server::start(lab.receiver_netns().name(), 5203).unwrap();
    let receiver = lab.receiver_ip().to_string();
    let json_path =
        std::env::temp_dir().join(format!("tt-stages-slices-{}.json", std::process::id()));
    // An emulated guest of the matrix runs 200 Mbit/s with its one vCPU
    // saturated: then its transfer slows while the programs are attached,
    // and coming back takes longer than the lead, so the traced slices carry
    // less than their share (6.1 guest, 7 runs: 0.28 to 1.02 of the bytes,
    // scale 4.35 to 6.10). At 50 Mbit/s it keeps up traced or not (9 runs
    // on 6.1 and 6.12: 0.97 to 1.08 of the bytes, scale 4.00 to 4.15).
    let in_vm = std::env::var_os("TT_VM").is_some();
    let rate = if in_vm { "50M" } else { "200M" };
    let out = bin()
        .args([
            "stages", "--addr", &receiver, "--sample", "4", "--slice", "50ms",
        ])
        .arg("--json")
        .arg(&json_path)
        .args(["--", "ip", "netns", "exec", lab.sender_netns().name()])
        .args([
            "iperf3", "-J", "-c", &receiver, "-p", "5203", "-t", "3", "-b", rate,
        ])
        .output()
        .unwrap();
    drop(server);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json_path).unwrap();
    let _ = std::fs::remove_file(&json_path);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    common::assert_matches_schema("stages.schema.json", &json);
    assert!(
        stdout.contains("sampling 1/4 of the time in slices of 50.0 ms"),
        "{stdout}"
    );
    let iperf_start = stdout.find("{\n").expect("iperf3's JSON after the table");
    let iperf: serde_json::Value =
        serde_json::from_str(stdout[iperf_start..].split("\ntotal,").next().unwrap())
            .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let sent = iperf["end"]["sum_sent"]["bytes"].as_f64().unwrap();
    let sampling = &json["sampling"];
    assert_eq!(sampling["every"], 4);
    assert_eq!(sampling["slice_ns"], 50_000_000);
    let pauses = sampling["pauses"]["count"].as_u64().unwrap();
    let scale = sampling["scale"].as_f64().unwrap();
    eprintln!("{pauses} pauses, scale {scale:.2}, iperf3 sent {sent} B");
    assert!(pauses >= 5, "{sampling}");
    // 1 in 4: the programs come back ahead of each slice and count over
    // it whole, but when coming back took longer than half a slice, from
    // when they were back. In an emulated guest of the matrix that can take
    // most of a slice (CI's 6.1 guest at 200 Mbit/s: 11 pauses covering
    // 3.5 s of the run, scale 24.6): there, what bounds the scale is the
    // bytes check below, which a scale the pauses do not explain fails.
    let most = if in_vm { f64::INFINITY } else { 12.0 };
    assert!(scale >= 3.5 && scale < most, "{sampling}");
    let hooks = json["totals"]["hooks"].as_array().unwrap();
    let queued = hooks.iter().find(|h| h["hook"] == "net_dev_queue").unwrap();
    let bytes = queued["bytes"].as_f64().unwrap();
    eprintln!(
        "net_dev_queue: {bytes} B scaled, {:.3} of what iperf3 sent",
        bytes / sent
    );
    // Data and headers, and the ACKs back: a few % above what was sent
    // (here 0.95 of it, the edge runs' luck). In an emulated guest the
    // slices it traced carried less than their share when each began with
    // the programs attaching (CI's 6.12 guest: scale 5.91 for 4, 0.641 of
    // the bytes); they come back ahead of the slice now, up to half a slice.
    // And more than their share too: the 6.1 guest once scaled 18 slices by
    // 10.13 to 1.408 of the bytes. Both at 200 Mbit/s, the guest saturated.
    let (least_share, most_share) = if in_vm { (0.5, 1.6) } else { (0.8, 1.4) };
    assert!(
        (least_share * sent..most_share * sent).contains(&bytes),
        "net_dev_queue {bytes} B scaled, iperf3 sent {sent} B"
    );
    for s in json["totals"]["stages"].as_array().unwrap() {
        assert!(s["samples"].as_u64().unwrap() > 0, "{s}");
        // The device and NAPI stages take µs (ip_tcp, with the socket's
        // backlog, may take longer in an emulated guest).
        if s["stage"] != "ip_tcp" {
            assert!(
                s["max_ns"].as_u64().unwrap() < 45_000_000,
                "a sample across a pause: {s}"
            );
        }
    }
}

/// `--interval 0.4 --duration 1`: two whole intervals and the one the end
/// cut short; together they cover the run.
#[test]
fn stages_intervals_cover_the_whole_duration() {
    if !common::require_root("stages_intervals_cover_the_whole_duration") {
        return;
    }
    let out = bin()
        .args([
            "stages",
            "--port",
            "1",
            "--interval",
            "0.4",
            "--duration",
            "1",
        ])
        .args(["--json", "-"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let intervals = json["intervals"].as_array().unwrap();
    assert_eq!(intervals.len(), 3, "{intervals:?}");
    for pair in intervals.windows(2) {
        assert_eq!(pair[0]["end_s"], pair[1]["start_s"]);
    }
    let end = intervals.last().unwrap()["end_s"].as_f64().unwrap();
    assert!(
        (end - json["elapsed_s"].as_f64().unwrap()).abs() < 0.1,
        "{json}"
    );
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Many intervals, as a long run has: `stages` keeps none of them (the JSON
/// is written as each closes), so its memory stays flat.
#[test]
fn stages_memory_stays_flat_over_many_intervals() {
    if !common::require_root("stages_memory_stays_flat_over_many_intervals") {
        return;
    }
    let dir = common::TempDir::new("stages-flat");
    let file = dir.join("stages.json");
    let mut child = bin()
        .args([
            "stages",
            "--port",
            "1",
            "--interval",
            "50ms",
            "--duration",
            "10",
        ])
        .arg("--json")
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(3));
    let early = rss_kib(child.id());
    std::thread::sleep(std::time::Duration::from_secs(6));
    let late = rss_kib(child.id());
    assert!(child.wait().unwrap().success());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    common::assert_matches_schema("stages.schema.json", &json);
    let intervals = json["intervals"].as_array().unwrap().len();
    assert!(intervals >= 150, "{intervals} intervals");
    eprintln!("RSS {early} KiB after 3 s, {late} KiB after 9 s, {intervals} intervals");
    // 120 intervals in between: kept, they took about 600 B each.
    assert!(late <= early + 32, "RSS grew from {early} to {late} KiB");
}
