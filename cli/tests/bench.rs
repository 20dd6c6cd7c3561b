//! Smoke tests of `tenge-trace bench`: the replay part (no root needed) and
//! the kernel-cost part run end to end and write valid JSON and Markdown.
//! Rates are not asserted: timing belongs in the benchmark, not in tests.
//! The bench is built with the `bench` feature only (`make test` turns it on).
#![cfg(feature = "bench")]

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::Command;

const BPFTRACE_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/equivalent.bt");

/// Runs `tenge-trace bench --quick --only PART` into a scratch directory:
/// the JSON results and the Markdown.
fn quick_bench(part: &str) -> (serde_json::Value, String) {
    let dir = std::env::temp_dir().join(format!("tt-bench-{part}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, md): (PathBuf, PathBuf) = (dir.join("results.json"), dir.join("BENCHMARKS.md"));
    let status = Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
        .args(["bench", "--quick", "--only", part, "--json"])
        .arg(&json)
        .arg("--markdown")
        .arg(&md)
        .args(["--bpftrace-script", BPFTRACE_SCRIPT])
        .status()
        .unwrap();
    let results = std::fs::read_to_string(&json);
    let markdown = std::fs::read_to_string(&md);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(status.success());
    (
        serde_json::from_str(&results.unwrap()).unwrap(),
        markdown.unwrap(),
    )
}

#[test]
fn quick_replay_writes_json_and_markdown() {
    let (results, markdown) = quick_bench("replay");
    let replay = &results["replay"];
    assert_eq!(replay["flows"], 10_000);
    // 10k flows × 2 segments: 2 state events, then per flow 8 + sendmsg
    // (segment 0) + an ACK path of 6 (segment 1): 2 + 9 + 14 = 25.
    assert_eq!(replay["run"]["events"], 250_000);
    // Two sockets per connection.
    assert_eq!(replay["run"]["flows"], 20_000);
    assert!(replay["peak_rss_bytes"].as_u64().unwrap() > 0);
    assert!(results["throughput"].is_null(), "only replay was asked for");
    assert!(markdown.contains("## Collector alone (replay)"));
    assert!(markdown.contains("| collector memory, 10k flows |"));
}

#[test]
fn quick_kernel_cost_measures_each_probe_and_the_floor() {
    if !common::require_root("quick_kernel_cost_measures_each_probe_and_the_floor") {
        return;
    }
    let (results, markdown) = quick_bench("kernel-cost");
    let cost = &results["kernel_cost"];
    let backends = cost["backends"].as_array().unwrap();
    let names: Vec<(&str, u64, bool)> = backends
        .iter()
        .map(|b| {
            (
                b["backend"].as_str().unwrap(),
                b["sample_every"].as_u64().unwrap(),
                b["per_hook"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("TpBtf", 1, false),
            ("TpBtf", 1, true),
            ("RawTp", 1, false),
            ("TpBtf", 64, false),
            ("Stages", 1, false)
        ]
    );
    // Journeys carry several events a ring record; per hook, one each.
    let count = |b: &serde_json::Value, key: &str| b[key].as_u64().unwrap();
    let (journeys, per_hook) = (&backends[0], &backends[1]);
    assert!(count(journeys, "ring_records") < count(journeys, "events"));
    assert_eq!(count(per_hook, "ring_records"), count(per_hook, "events"));
    assert!(count(journeys, "data_segments") > 0);
    // Sampling 1/64 the same hooks run as often, and emit a few percent as much.
    let events_per_run = |b: &serde_json::Value| {
        b["events"].as_u64().unwrap() as f64 / b["runs"].as_u64().unwrap() as f64
    };
    let (full, sampled) = (events_per_run(&backends[0]), events_per_run(&backends[3]));
    assert!(
        sampled < full / 8.0,
        "events per run: {full} full, {sampled} sampled"
    );
    for backend in backends {
        let programs = backend["programs"].as_array().unwrap();
        // The TX and RX packet probes all ran on the transfer.
        for hook in [
            "net:net_dev_queue",
            "net:net_dev_start_xmit",
            "tcp:tcp_probe",
        ] {
            let runs = programs
                .iter()
                .find(|p| p["hook"] == hook)
                .map_or(0, |p| p["runs"].as_u64().unwrap());
            assert!(runs > 0, "{} {hook}: no runs", backend["backend"]);
        }
        assert!(backend["events"].as_u64().unwrap() > 0);
    }
    // stages sends no record: every packet a run kept is an event (a GSO
    // skb its segments, few of 100-byte writes), and on a transfer of the
    // filtered port nearly every run keeps its one.
    let stages = &backends[4];
    let (events, runs) = (
        stages["events"].as_u64().unwrap(),
        stages["runs"].as_u64().unwrap(),
    );
    assert!(
        events * 10 <= runs * 11 && events * 10 >= runs * 9,
        "{stages}"
    );
    // The emit floor reads the clock too, then reserves and submits a record.
    let floor = &cost["floor"];
    assert!(floor["runs"].as_u64().unwrap() > 0, "{floor}");
    let (clock, emit) = (
        floor["clock_ns"].as_f64().unwrap(),
        floor["emit_ns"].as_f64().unwrap(),
    );
    assert!(clock > 0.0 && emit > clock, "{floor}");
    assert!(markdown.contains("**The floor on this host**"));
    assert!(markdown.contains("| in-kernel ns per 100-byte data segment (tp_btf, all hooks) |"));
}
