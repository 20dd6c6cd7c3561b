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

/// A recording of one connection of 4 segments, every hop of each.
fn write_connection(path: &Path) -> Vec<tenge_trace::event::Event> {
    use tenge_trace::synth::Connection;
    let events = Connection {
        cpu: 1,
        mss: 1448,
        segments: 4,
        established_ns: 1_000_000,
        first_segment_ns: 1_001_000,
        segment_every_ns: 100_000,
        ..Connection::default()
    }
    .events();
    let mut w = TraceWriter::create(path, &TraceMeta::for_this_host()).unwrap();
    for ev in &events {
        w.write_event(ev).unwrap();
    }
    w.finish(&TraceSummary::default()).unwrap();
    events
}

#[test]
fn export_writes_what_tshark_perfetto_and_people_read() {
    use tenge_trace::event::Body;
    let dir = TempDir::new("files-export");
    let path = dir.join("rec.ttr");
    let events = write_connection(&path);

    // pcapng: a packet per segment the device layer handled, as tshark decodes it.
    let pcapng = dir.join("out.pcapng");
    let out = run(bin()
        .args(["export", "--format", "pcapng"])
        .arg(&path)
        .arg("-o")
        .arg(&pcapng));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Vec<String> = events
        .iter()
        .filter_map(|ev| match &ev.body {
            Body::DevStartXmit(p) | Body::NetifReceive(p) => Some(format!(
                "{}\t{}\t{}\t{}\t{}",
                ev.src().unwrap().port(),
                p.seq,
                p.len,
                p.win_raw,
                ev.hdr.cpu
            )),
            _ => None,
        })
        .collect();
    let fields = [
        "tcp.srcport",
        "tcp.seq_raw",
        "tcp.len",
        "tcp.window_size_value",
        "frame.comment",
    ];
    let mut tshark = Command::new("tshark");
    tshark.arg("-r").arg(&pcapng).args(["-T", "fields"]);
    for field in fields {
        tshark.args(["-e", field]);
    }
    let decoded = run(&mut tshark);
    assert!(
        decoded.status.success(),
        "{}",
        String::from_utf8_lossy(&decoded.stderr)
    );
    let got: Vec<String> = String::from_utf8(decoded.stdout)
        .unwrap()
        .lines()
        // The comment starts with the CPU: "cpu 1, qdisc 1.000 us".
        .map(|l| {
            l.replacen("cpu ", "", 1)
                .split(',')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(got, want);

    // text: one line per event, Unix time first, as `dump` has them.
    let text = run(bin().args(["export", "--format", "text"]).arg(&path));
    let lines: Vec<String> = String::from_utf8(text.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), events.len());
    let year = |l: &String| l[..4].parse::<u32>().ok();
    assert!(
        lines
            .iter()
            .all(|l| year(l) >= Some(2024) && l.contains("Z [001] ")),
        "{lines:?}"
    );

    // perfetto from standard input: the stages of the 4 segments as spans.
    let out = run(bin()
        .args(["export", "--format", "perfetto", "-"])
        .stdin(std::fs::File::open(&path).unwrap()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let phases = |ph: &str| {
        doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == ph)
            .count()
    };
    assert_eq!(phases("i"), events.len());
    assert!(phases("b") > 0 && phases("b") == phases("e"));
}

#[test]
fn report_text_fits_the_terminal_the_locale_and_the_colour_asked_for() {
    let dir = TempDir::new("files-terminal");
    let path = dir.join("rec.ttr");
    write_connection(&path);
    let report = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = bin();
        cmd.env_remove("COLUMNS")
            .env_remove("LC_ALL")
            .env_remove("LC_CTYPE")
            .env_remove("NO_COLOR");
        cmd.envs(env.iter().copied())
            .arg("report")
            .args(args)
            .arg(&path);
        let out = run(&mut cmd);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let utf8 = report(&[("LANG", "C.UTF-8")], &[]);
    assert!(utf8.contains(" µs"), "{utf8}");
    // The POSIX locale: every character ASCII, the units spelled out.
    let posix = report(&[("LANG", "C.UTF-8"), ("LC_ALL", "C")], &[]);
    assert!(posix.is_ascii() && posix.contains(" us"), "{posix}");
    // Tables wrap to $COLUMNS (findings are prose, and wrap in the
    // terminal); --wide keeps each row on one line.
    let table_lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| {
                ["direction ", "tx ", "rx ", "cookie "]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .map(String::from)
            .collect()
    };
    let narrow = report(&[("LANG", "C.UTF-8"), ("COLUMNS", "80")], &[]);
    let wide = report(&[("LANG", "C.UTF-8"), ("COLUMNS", "80")], &["--wide"]);
    assert!(wide.lines().any(|l| l.chars().count() > 80), "{wide}");
    assert!(
        table_lines(&narrow).iter().all(|l| l.chars().count() <= 80),
        "{narrow}"
    );
    assert!(table_lines(&narrow).len() > table_lines(&wide).len());
    // Colour only when asked for, on a pipe.
    assert!(!utf8.contains('\x1b'));
    let coloured = report(&[("LANG", "C.UTF-8")], &["--color", "always"]);
    assert!(coloured.contains("\x1b[1mPATH COSTS\x1b[0m"), "{coloured}");
}
