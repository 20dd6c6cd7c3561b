//! The collector alone: a synthesized trace of 10k concurrent flows, replayed
//! through decode + flow table + `Analysis` in a child process
//! (`tenge-trace bench --replay-only FILE`): its own peak memory (VmHWM; not
//! wait4's ru_maxrss, which includes the parent's RSS shared until the
//! exec), and events per CPU second of its thread.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance};
use tenge_trace::os::thread_cpu;
use tenge_trace::synth::{Connection, Ending, Socket};
use tenge_trace::trace_file::{TraceMeta, TraceReader, TraceSummary, TraceWriter};

pub const FLOWS: u32 = 10_000;
/// Five, not three: this shared host moves one binary's rate by a third
/// from run to run, and the table shows the runs' range beside the median.
const REPLAYS: usize = 5;

/// What the child measured, printed as JSON on its stdout.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplayRun {
    pub events: u64,
    pub flows: usize,
    pub cpu_s: f64,
    pub wall_s: f64,
    /// events / CPU seconds of the replaying thread.
    pub events_per_s_per_core: f64,
    /// Peak RSS of this process since its exec (VmHWM).
    pub vm_hwm_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Replay {
    pub flows: u32,
    pub segments_per_flow: u32,
    pub file_bytes: u64,
    /// Replays made (each in a fresh child); 1 in results from before it was counted.
    #[serde(default = "one")]
    pub runs: usize,
    /// The run with the median rate.
    pub run: ReplayRun,
    /// Every run's events/s per core, lowest first (empty in older results).
    #[serde(default)]
    pub rates: Vec<f64>,
    /// Median over the runs of the child's own peak RSS (VmHWM).
    pub peak_rss_bytes: u64,
    /// Median over the runs of wait4()'s ru_maxrss: it also counts the
    /// parent's RSS, because the child shares the parent's memory from the
    /// vfork until its exec.
    #[serde(default)]
    pub ru_maxrss_bytes: u64,
}

pub fn run(segments_per_flow: u32, scratch: &Path) -> Result<Replay> {
    let file = scratch.join("replay-10k-flows.ttr");
    eprintln!("bench: replay, synthesizing {FLOWS} flows x {segments_per_flow} segments");
    synthesize(&file, FLOWS, segments_per_flow)?;
    let file_bytes = std::fs::metadata(&file)?.len();
    // The writer bypasses the page cache (O_DIRECT, as `record`'s does): read
    // the file once, untimed, so that every replay reads it from memory. Else
    // the first pays the disk and fresh page-cache pages, and only the first.
    std::io::copy(&mut std::fs::File::open(&file)?, &mut std::io::sink())?;
    eprintln!(
        "bench: replay, {} MB, {REPLAYS} times in a child process",
        file_bytes >> 20
    );
    let runs = (0..REPLAYS)
        .map(|_| replay_child(&file))
        .collect::<Result<Vec<_>>>();
    let _ = std::fs::remove_file(&file);
    let mut runs = runs?;
    // The run with the median rate; memory is the median of all runs.
    let median = |mut values: Vec<u64>| {
        values.sort_unstable();
        values[values.len() / 2]
    };
    let peak_rss_bytes = median(runs.iter().map(|(run, _)| run.vm_hwm_bytes).collect());
    let ru_maxrss_bytes = median(runs.iter().map(|(_, maxrss)| *maxrss).collect());
    runs.sort_by(|a, b| {
        a.0.events_per_s_per_core
            .total_cmp(&b.0.events_per_s_per_core)
    });
    let rates = runs
        .iter()
        .map(|(run, _)| run.events_per_s_per_core)
        .collect();
    Ok(Replay {
        flows: FLOWS,
        segments_per_flow,
        file_bytes,
        runs: runs.len(),
        rates,
        run: runs.swap_remove(runs.len() / 2).0,
        peak_rss_bytes,
        ru_maxrss_bytes,
    })
}

/// One replay in a child process: what it measured, and wait4's ru_maxrss in bytes.
fn replay_child(file: &Path) -> Result<(ReplayRun, u64)> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg("bench")
        .arg("--replay-only")
        .arg(file)
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning the replay child")?;
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut stdout)?;
    let (status, usage) = wait4(child.id() as libc::pid_t)?;
    if !status.success() {
        bail!("replay child failed: {status}");
    }
    let run = serde_json::from_str(&stdout).context("replay child output")?;
    // Linux reports ru_maxrss in KiB.
    Ok((run, usage.ru_maxrss as u64 * 1024))
}

fn one() -> usize {
    1
}

/// The child's side: replay `file`, print a [`ReplayRun`].
pub fn replay_only(file: &Path) -> Result<()> {
    let started = Instant::now();
    let cpu_before = thread_cpu();
    let mut reader = TraceReader::open(file)?;
    let mut analysis = Analysis::new(AnalysisConfig::default());
    let mut events = 0u64;
    reader.for_each_ahead(|ev, ahead| {
        events += 1;
        analysis.prefetch(ahead);
        analysis.push(ev);
    })?;
    let flows = analysis.flows().len();
    let report = analysis.finish(Provenance::default());
    let cpu_s = (thread_cpu() - cpu_before).as_secs_f64();
    let run = ReplayRun {
        events,
        flows,
        cpu_s,
        wall_s: started.elapsed().as_secs_f64(),
        events_per_s_per_core: events as f64 / cpu_s,
        vm_hwm_bytes: vm_hwm_bytes()?,
    };
    drop(report);
    println!("{}", serde_json::to_string(&run)?);
    Ok(())
}

/// VmHWM of /proc/self/status: the peak RSS of this process's own memory.
fn vm_hwm_bytes() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmHWM in /proc/self/status")?;
    Ok(kib * 1024)
}

fn wait4(pid: libc::pid_t) -> Result<(std::process::ExitStatus, libc::rusage)> {
    let mut status = 0;
    // SAFETY: wait4 on our own child, with valid out-pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if rc != pid {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    Ok((std::process::ExitStatus::from_raw(status), usage))
}

/// Writes `flows` connections, each `segments` data segments long, all of
/// them interleaved (every flow lives from the first segment to the last):
/// per segment the events a full trace has (see [`tenge_trace::synth`]),
/// with a sendmsg and an app_read every 4th segment and an ACK every 2nd.
pub fn synthesize(path: &Path, flows: u32, segments: u32) -> Result<()> {
    let mut writer = TraceWriter::create(path, &TraceMeta::for_this_host())?;
    let connections: Vec<Connection> = (0..flows).map(|i| replay_flow(i, segments)).collect();
    for flow in &connections {
        for ev in flow.established() {
            writer.write_event(&ev)?;
        }
    }
    for seg in 0..segments {
        for flow in &connections {
            for ev in flow.segment(seg) {
                writer.write_event(&ev)?;
            }
        }
    }
    writer.finish(&TraceSummary {
        end_reason: "synthesized".into(),
        ..TraceSummary::default()
    })?;
    Ok(())
}

/// Flow `index` of the replay file: ends numbered from 10.1.0.0 and 10.2.0.0,
/// established at 0, one segment a millisecond, flows 50 ns apart.
fn replay_flow(index: u32, segments: u32) -> Connection {
    let [_, _, hi, lo] = index.to_be_bytes();
    Connection {
        index,
        sender: Socket {
            addr: SocketAddrV4::new(
                Ipv4Addr::new(10, 1, hi, lo),
                40_000 + (index % 20_000) as u16,
            ),
            cookie: u64::from(index) * 2 + 1,
        },
        receiver: Socket {
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 2, hi, lo), 5201),
            cookie: u64::from(index) * 2 + 2,
        },
        cpu: index % 2,
        mss: 1448,
        first_seq: 1_000,
        segments,
        established_ns: 0,
        first_segment_ns: u64::from(index) * 50,
        segment_every_ns: 1_000_000,
        send_every: 4,
        read_every: 4,
        ack_every: 2,
        win_raw: 1024,
        unsent_segments: None,
        unread_last: false,
        ending: Ending::Open,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthesized_trace_has_every_flow_and_the_counted_events() {
        let dir = std::env::temp_dir().join(format!("tt-synth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.ttr");
        // 4 segments: sendmsg at 0, app_read at 3, ACKs at 1 and 3:
        // 2 state + 4 × 8 + 1 + 1 + 2 × 6 = 48 events per flow.
        synthesize(&file, 3, 4).unwrap();
        let mut reader = TraceReader::open(&file).unwrap();
        let mut analysis = Analysis::new(AnalysisConfig::default());
        let mut events = 0;
        reader
            .for_each(|ev| {
                events += 1;
                analysis.push(ev);
            })
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(events, 3 * 48);
        // Two sockets per connection; packet events without a cookie map onto them.
        assert_eq!(analysis.flows().len(), 6);
    }

    /// The report of a fixed stream, byte for byte: the replay path is tuned
    /// for speed and must not change what it computes. Caps small enough that
    /// some flows have no breakdown and some are not tracked at all.
    #[test]
    fn report_of_a_fixed_stream_is_unchanged() {
        let dir = std::env::temp_dir().join(format!("tt-golden-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.ttr");
        synthesize(&file, 5, 12).unwrap();
        let mut cfg = AnalysisConfig::default();
        cfg.paths.max_flows = 8;
        cfg.paths.max_flow_breakdown = 3;
        let mut analysis = Analysis::new(cfg);
        let mut reader = TraceReader::open(&file).unwrap();
        reader
            .for_each(|ev| {
                analysis.push(ev);
            })
            .unwrap();
        let mut report = analysis.finish(Provenance::default());
        report.tool_version = "";
        let json = serde_json::to_string_pretty(&report).unwrap() + "\n";
        let actual = dir.join("actual.json");
        std::fs::write(&actual, &json).unwrap();
        assert!(
            json == include_str!("replay_report.golden.json"),
            "the report changed: compare {} with cli/src/cmd/bench/replay_report.golden.json",
            actual.display()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
