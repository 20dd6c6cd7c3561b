//! The collector alone: a synthesized trace of 10k concurrent flows, replayed
//! through decode + flow table + `Analysis` in a child process
//! (`tenge-trace bench --replay-only FILE`): its own peak memory (VmHWM; not
//! wait4's ru_maxrss, which includes the parent's RSS shared until the
//! exec), and events per CPU second of its thread.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance};
use tenge_trace::collector::thread_cpu;
use tenge_trace::event::{
    abi_addr, tt_app_read, tt_copy_datagram, tt_data_ready, tt_hdr, tt_pkt, tt_sendmsg, tt_state,
    tt_tcp_rcv, tt_window_adv, Body, Event,
};
use tenge_trace::trace_file::{TraceMeta, TraceReader, TraceSummary, TraceWriter};

pub const FLOWS: u32 = 10_000;
const REPLAYS: usize = 3;
const MSS: u32 = 1448;
const TCP_ESTABLISHED: u8 = 1;
const TCP_SYN_SENT: u8 = 2;

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
    Ok(Replay {
        flows: FLOWS,
        segments_per_flow,
        file_bytes,
        runs: runs.len(),
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
    reader.for_each(|ev| {
        events += 1;
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
/// them interleaved (every flow lives from the first segment to the last).
/// Per segment, the events a full trace has: the sender's sendmsg (every 4th)
/// window_adv, dev_start_xmit, dev_xmit; the receiver's rx_entry,
/// netif_receive, tcp_rcv, data_ready, copy_datagram, app_read (every 4th);
/// and every 2nd segment an ACK with the same path back.
pub fn synthesize(path: &Path, flows: u32, segments: u32) -> Result<()> {
    let mut writer = TraceWriter::create(path, &TraceMeta::for_this_host())?;
    for flow in 0..flows {
        let f = SynthFlow::new(flow);
        writer.write_event(&f.state(&f.sender, 0))?;
        writer.write_event(&f.state(&f.receiver, 0))?;
    }
    for seg in 0..segments {
        for flow in 0..flows {
            for ev in SynthFlow::new(flow).segment(seg) {
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

/// One socket of a synthesized connection.
struct End {
    cookie: u64,
    ip: Ipv4Addr,
    port: u16,
}

struct SynthFlow {
    index: u32,
    sender: End,
    receiver: End,
}

impl SynthFlow {
    fn new(index: u32) -> SynthFlow {
        let [_, _, hi, lo] = index.to_be_bytes();
        SynthFlow {
            index,
            sender: End {
                cookie: u64::from(index) * 2 + 1,
                ip: Ipv4Addr::new(10, 1, hi, lo),
                port: 40_000 + (index % 20_000) as u16,
            },
            receiver: End {
                cookie: u64::from(index) * 2 + 2,
                ip: Ipv4Addr::new(10, 2, hi, lo),
                port: 5201,
            },
        }
    }

    /// A header from `from` to `to`; `cookie` 0 where the kernel has none yet.
    fn hdr(&self, from: &End, to: &End, cookie: u64, ts_ns: u64) -> tt_hdr {
        let (family, saddr) = abi_addr(from.ip.into());
        let (_, daddr) = abi_addr(to.ip.into());
        tt_hdr {
            ts_ns,
            sock_cookie: cookie,
            skb: 0xffff_8880_0000_0000 | u64::from(self.index) << 12,
            saddr,
            daddr,
            sport: from.port,
            dport: to.port,
            family,
            cpu: self.index % 2,
            netns: 4026531840,
            ..tt_hdr::default()
        }
    }

    fn state(&self, end: &End, ts_ns: u64) -> Event {
        let peer = if end.cookie == self.sender.cookie {
            &self.receiver
        } else {
            &self.sender
        };
        Event::new(
            self.hdr(end, peer, end.cookie, ts_ns),
            Body::State(tt_state {
                oldstate: TCP_SYN_SENT,
                newstate: TCP_ESTABLISHED,
                advmss: MSS as u16,
                mss_cache: MSS,
            }),
        )
    }

    fn segment(&self, seg: u32) -> Vec<Event> {
        let (s, r) = (&self.sender, &self.receiver);
        let t0 = u64::from(seg) * 1_000_000 + u64::from(self.index) * 50;
        let seq = 1_000 + seg * MSS;
        let rcv_nxt = seq + MSS;
        let pkt = |seq, ack, len| tt_pkt {
            seq,
            ack,
            len,
            skb_len: len + 52,
            gso_segs: 1,
            gso_size: MSS as u16,
            win_raw: 1024,
            tcp_flags: 0x10,
            ifindex: 2,
            ..tt_pkt::default()
        };
        let window = |seq, ack, len| tt_window_adv {
            seq,
            ack,
            len,
            window: 1024 << 7,
            win_raw: 1024,
            tcp_flags: 0x10,
            rcv_wscale: 7,
            gso_segs: 1,
            gso_size: MSS as u16,
            sk_rcvbuf: 131_072,
            window_clamp: 65_535 << 7,
            rcv_ssthresh: 64_000,
            rcv_mss: MSS,
            rcv_wnd: 131_072,
            advmss: MSS as u16,
            scaling_ratio: 128,
            snd_wnd: 131_072,
            snd_cwnd: 10,
            mss_cache: MSS,
            ..tt_window_adv::default()
        };
        let data = pkt(seq, 1, MSS);
        let mut evs = Vec::with_capacity(16);
        let mut at = |from: &End, to: &End, cookie: u64, dt: u64, body: Body| {
            evs.push(Event::new(self.hdr(from, to, cookie, t0 + dt), body));
        };
        if seg.is_multiple_of(4) {
            at(
                s,
                r,
                s.cookie,
                0,
                Body::Sendmsg(tt_sendmsg {
                    write_seq: seq,
                    msg_left: 4 * MSS,
                    size_goal: MSS,
                    snd_una: seq,
                    snd_nxt: seq,
                    sk_sndbuf: 1 << 20,
                    ..tt_sendmsg::default()
                }),
            );
        }
        at(s, r, s.cookie, 1_000, Body::WindowAdv(window(seq, 1, MSS)));
        at(s, r, s.cookie, 2_000, Body::DevStartXmit(data));
        at(s, r, s.cookie, 2_500, Body::DevXmit(data));
        at(s, r, 0, 10_000, Body::RxEntry(data));
        at(s, r, 0, 12_000, Body::NetifReceive(data));
        at(
            r,
            s,
            r.cookie,
            14_000,
            Body::TcpRcv(tt_tcp_rcv {
                seq,
                end_seq: rcv_nxt,
                ack: 1,
                len: MSS,
                win_raw: 1024,
                tcp_flags: 0x10,
                snd_wscale: 7,
                rcv_nxt: seq,
                rcv_mss: MSS,
                mss_cache: MSS,
                ..tt_tcp_rcv::default()
            }),
        );
        let rcvbuf = 131_072;
        at(
            r,
            s,
            r.cookie,
            15_000,
            Body::DataReady(tt_data_ready {
                rcv_nxt,
                copied_seq: seq,
                sk_rmem_alloc: MSS,
                sk_rcvbuf: rcvbuf,
            }),
        );
        at(
            r,
            s,
            r.cookie,
            20_000,
            Body::CopyDatagram(tt_copy_datagram {
                seq,
                end_seq: rcv_nxt,
                len: MSS,
                ..tt_copy_datagram::default()
            }),
        );
        if seg % 4 == 3 {
            at(
                r,
                s,
                r.cookie,
                21_000,
                Body::AppRead(tt_app_read {
                    ret: (4 * MSS) as i32,
                    copied_seq: rcv_nxt,
                    rcv_nxt,
                    sk_rcvbuf: rcvbuf,
                    rcv_wnd: rcvbuf,
                    ..tt_app_read::default()
                }),
            );
        }
        if seg % 2 == 1 {
            let ack = pkt(1, rcv_nxt, 0);
            at(
                r,
                s,
                r.cookie,
                22_000,
                Body::WindowAdv(window(1, rcv_nxt, 0)),
            );
            at(r, s, r.cookie, 23_000, Body::DevStartXmit(ack));
            at(r, s, r.cookie, 23_500, Body::DevXmit(ack));
            at(r, s, 0, 30_000, Body::RxEntry(ack));
            at(r, s, 0, 31_000, Body::NetifReceive(ack));
            at(
                s,
                r,
                s.cookie,
                32_000,
                Body::TcpRcv(tt_tcp_rcv {
                    seq: 1,
                    end_seq: 1,
                    ack: rcv_nxt,
                    win_raw: 1024,
                    tcp_flags: 0x10,
                    snd_una: seq,
                    snd_nxt: rcv_nxt,
                    snd_wnd: rcvbuf,
                    snd_cwnd: 10,
                    mss_cache: MSS,
                    ..tt_tcp_rcv::default()
                }),
            );
        }
        evs
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
