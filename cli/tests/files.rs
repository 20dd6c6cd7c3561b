//! The CLI on trace files: no BPF, no privileges. Files are built here with the
//! library's writer, so every number below is known.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::TempDir;
use std::path::Path;
use std::process::{Command, Output};
use tenge_trace::trace_file::{TraceMeta, TraceSummary, TraceWriter};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
}

/// A receiver advertising 26844 (= 3 x 8948) from 27001 bytes of free space, 20 times.
fn write_trace(path: &Path, lost: u64) {
    let mut w = TraceWriter::create(path, &TraceMeta::for_this_host()).unwrap();
    for ev in common::clamped_windows() {
        w.write_event(&ev).unwrap();
    }
    let mut summary = TraceSummary {
        events: 20,
        end_reason: "duration".into(),
        ..Default::default()
    };
    summary.lost.insert("window_adv".into(), lost);
    w.finish(&summary).unwrap();
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run tenge-trace")
}

#[test]
fn dump_json_lines_carry_the_contract_fields() {
    let dir = TempDir::new("files-dump");
    let path = dir.join("dump.ttr");
    write_trace(&path, 0);
    let out = run(bin().arg("dump").arg(&path).arg("--json"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 20);
    let first = &lines[0];
    for field in [
        "kind",
        "ts_ns",
        "cpu",
        "sock_cookie",
        "saddr",
        "sport",
        "daddr",
        "dport",
        "seq",
        "ack",
        "window",
    ] {
        assert!(first.get(field).is_some(), "{field} missing in {first}");
    }
    assert_eq!(first["kind"], "window_adv");
    assert_eq!(first["window"], 26844);
    assert_eq!(lines[19]["ack"], 1000 + 19 * 8948);
    assert_eq!(first["saddr"], "198.18.0.2");
}

#[test]
fn dump_filters_by_kind_and_flow_and_warns_about_losses() {
    let dir = TempDir::new("files-filters");
    let path = dir.join("filters.ttr");
    write_trace(&path, 7);
    let out = run(bin().arg("dump").arg(&path).args(["--kind", "tcp_rcv"]));
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("7 events were lost"));
    let out = run(bin().arg("dump").arg(&path).args(["--flow", "4242"]));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 20);
    let out = run(bin()
        .arg("dump")
        .arg(&path)
        .args(["--kind", "no_such_kind"]));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown event kind"));
}

/// A damaged file is read up to its damage with a warning (exit 0), or
/// refused with `--strict` (exit 2); a missing one is an error.
#[test]
fn truncated_corrupt_and_missing_files_are_salvaged_or_refused_clearly() {
    let dir = TempDir::new("files-broken");
    let path = dir.join("whole.ttr");
    write_trace(&path, 0);
    let bytes = std::fs::read(&path).unwrap();

    let cut = dir.join("cut.ttr");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let out = run(bin().arg("dump").arg(&cut));
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is damaged from byte"), "{err}");
    // The trailer is what was cut: every event is there.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 20);
    let out = run(bin().args(["dump", "--strict"]).arg(&cut));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("truncated"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let bad = dir.join("bad.ttr");
    let mut flipped = bytes.clone();
    let at = bytes.len() / 2;
    flipped[at] ^= 0x55;
    std::fs::write(&bad, &flipped).unwrap();
    let out = run(bin().args(["report", "--strict"]).arg(&bad));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt"));
    let out = run(bin().args(["report", "--json"]).arg(&bad));
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["damage"]["what"]
        .as_str()
        .unwrap()
        .contains("checksum"));

    let out = run(bin().arg("dump").arg(dir.join("does-not-exist.ttr")));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));
}

/// Bad numbers, times and names are refused as they are parsed: exit 2, a
/// clear error, and the `-o` file untouched.
#[test]
fn bad_arguments_are_refused_before_anything_is_touched() {
    let dir = TempDir::new("files-args");
    let out_file = dir.join("keep.ttr");
    std::fs::write(&out_file, b"an earlier recording").unwrap();
    let o = out_file.to_str().unwrap();
    let cases: &[&[&str]] = &[
        &["record", "-o", o, "--duration", "nan"],
        &["record", "-o", o, "--duration", "inf"],
        &["record", "-o", o, "--duration", "1e20"],
        &["record", "-o", o, "--duration=-1"],
        &["record", "-o", o, "--ring-mib", "4096"],
        &["record", "-o", o, "--sample", "0"],
        &["record", "-o", o, "--netns", ""],
        &["record", "-o", o, "--netns", "../../etc/passwd"],
        &["record", "-o", o, "--cpu-hz", "0"],
        &["stages", "--interval", "inf"],
        &["watch", "--threshold", "nan"],
        &["report", "--threshold", "200", o],
    ];
    for args in cases {
        let out = run(bin().args(*args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("invalid value"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(
            std::fs::read(&out_file).unwrap(),
            b"an earlier recording",
            "{args:?}"
        );
    }
    assert!(run(bin().args(["record", "--duration", "1s", "--help"]))
        .status
        .success());
}

/// A FIFO nobody writes to reads as empty: refused at once, not waited on.
#[test]
fn a_fifo_without_a_writer_is_refused_at_once() {
    let dir = TempDir::new("files-fifo");
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let started = std::time::Instant::now();
    let out = run(bin().arg("report").arg(&fifo));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a tenge-trace file"));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// `report --json | head -1`: the reader goes away; the program ends quietly.
#[test]
fn a_reader_that_goes_away_ends_the_program_quietly() {
    let dir = TempDir::new("files-pipe");
    let path = dir.join("rec.ttr");
    write_trace(&path, 0);
    for args in [&["report", "--json"][..], &["dump", "--json"], &["report"]] {
        // A pipe whose reader is gone before the program starts: its first
        // write fails.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = bin().args(args).arg(&path).stdout(writer).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(141), "{args:?}: {err}");
    }
}

#[test]
fn an_output_never_overwrites_its_input() {
    let dir = TempDir::new("files-clobber");
    let path = dir.join("rec.ttr");
    write_trace(&path, 0);
    let before = std::fs::read(&path).unwrap();
    let out = run(bin().arg("flamegraph").arg(&path).arg("-o").arg(&path));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("would overwrite"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // Nothing half-written is left beside it either.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn version_names_the_git_revision() {
    let out = run(bin().arg("--version"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("tenge-trace ") && text.contains("(git "),
        "{text}"
    );
}
