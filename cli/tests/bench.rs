//! Smoke test of `tenge-trace bench`: the replay part (no root needed) runs
//! end to end and writes valid JSON and Markdown. Numbers are not asserted:
//! timing belongs in the benchmark, not in tests.

use std::process::Command;

#[test]
fn quick_replay_writes_json_and_markdown() {
    let dir = std::env::temp_dir().join(format!("tt-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, md) = (dir.join("results.json"), dir.join("BENCHMARKS.md"));
    let status = Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
        .args(["bench", "--quick", "--only", "replay", "--json"])
        .arg(&json)
        .arg("--markdown")
        .arg(&md)
        .status()
        .unwrap();
    assert!(status.success());
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let markdown = std::fs::read_to_string(&md).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

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
