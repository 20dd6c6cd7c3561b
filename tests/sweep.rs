//! Ground truth across a sweep of settings the other tests do not use: MTUs,
//! window scaling, receive and send buffers, readers, IPv4 and IPv6, 1, 2
//! and 4 concurrent flows, veth and the receiver's loopback, paths with and
//! without loss (the lab dropping 1 in 100 data segments), with and without
//! a token-bucket bottleneck on the sender's link. Each transfer
//! is traced and analysed live, and what a user reads is checked against the
//! kernel's own counters (each sender's `TCP_INFO`, polled every 2 ms) and
//! the wire:
//! - every limit and `mss_clamp` alert: the kernel's chrono over the alert's
//!   200 ms confirms the limit (no false alerts);
//! - every whole 200 ms in which the kernel shows rwnd or sndbuf limiting
//!   25 % or more of a busy window gets its alert by then (none missed);
//! - every alert that fired is cleared by the time the flow ended;
//! - limit shares sum to 1 and match the kernel's within 0.05, and a
//!   Prometheus scrape once the first closer's FIN is acknowledged shows the
//!   report's shares;
//! - the window chain's advertised value is a window the receiver sent;
//! - the throughput-ceiling advice's rate acknowledged is the kernel's
//!   (bytes acked over its busy time), and its window over its srtt is the
//!   ceiling it quotes;
//! - each end's bytes sent and received are the kernel's;
//! - the reader's queue (its share of time above the window, and where it
//!   falls behind its mean) is the receiver's rx_queue and `tcpi_rcv_wnd`;
//!   the buffer advice never asks for a buffer the receiver had, and names
//!   the reader, not a buffer or an MTU, where unread data held the window.
//!
//! Three more tests: the send buffer the kernel's chrono does not clock,
//! the receive-buffer advice rerun with the advised SO_RCVBUF, and IPv6
//! segments past 64 KiB (BIG TCP's jumbo header) recorded byte for byte.
//!
//! `TT_SWEEP=full` (`make sweep`) runs all 48 scenarios; by default (and in
//! CI) one in four; `TT_SWEEP=other` (`make sweep` too) 24 more, drawn from
//! values none of these use (other MTUs, buffers, write sizes, TCP_NODELAY,
//! reno and bbr, pacing, loss rates, bottlenecks; `TT_SWEEP_SEED=N` draws
//! another 24); `TT_SWEEP_CASE=TEXT` only
//! those whose name holds TEXT.
//! Needs root.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tenge_trace::analysis::paths::FlowPaths;
use tenge_trace::analysis::window::{
    Advice, Alert, AlertKind, FlowWindowReport, LimitFractions, LimitsReport,
};
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance, Report};
use tenge_trace::collector::{Callbacks, CollectStats, Collector};
use tenge_trace::event::{tcp_state, Body, Event};
use tenge_trace::export::prometheus::Snapshot;
use tenge_trace::lab::traced::traffic_filters;
use tenge_trace::lab::{
    Lab, LabConfig, Reader, Scenario, TcpInfoPoll, TcpInfoSnapshot, TransferReport,
};
use tenge_trace::probe::{Filters, ProbePlan, Tracer, TracerOptions};

/// One lab at a time: the checks are about timing, and two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const WINDOW_NS: u64 = 200_000_000;
/// An alert is confirmed when the kernel shows its limit at least this share
/// of the busy time of the alert's window (the threshold is 20 %; the
/// window's ends differ from the alert's by up to one 2 ms poll).
const CONFIRMS: f64 = 0.10;
/// A window the kernel shows limited at least this much must have its alert:
/// the alerts' threshold is 20 % (a full run at 20 % missed none too); the
/// margin is for a window that the kernel's jiffies put a hair above it.
const MUST_ALERT: f64 = 0.25;
/// How much later than the kernel's window an alert may come: limits are
/// checked at ACKs (none arrive while a window is closed), a stall alerts
/// 100 ms after it began, the polls are 2 ms apart and the kernel clocks in
/// jiffies (4 ms at HZ 250). The sweep's latest so far: 107 ms, an
/// sws_stall 100 ms into a window that closed as the kernel crossed 30 %.
const ALERT_SLACK_NS: u64 = 150_000_000;
/// The report's rwnd and sndbuf shares against the kernel's, whole transfer.
const SHARE_TOLERANCE: f64 = 0.05;
/// The sockets' bytes against the kernel's, beside the segments of hits the
/// kernel ran no program for (counted).
const BYTES_TOLERANCE: f64 = 0.005;
/// The ceiling advice's rate acknowledged against the kernel's bytes acked
/// over its busy time. The clocks differ: the kernel's runs from a write
/// that finds the write queue empty, ours from a write or data sent after
/// an ACK that left nothing waiting, both to the ACK that leaves nothing.
/// The full sweep: within 4% but for an app-limited flow over the loopback
/// (32 KiB send buffer), 11% below.
const ACKED_RATE_TOLERANCE: f64 = 0.15;
/// Where the kernel's busy time leaves this share of the transfer idle (an
/// app-limited sender, whose writes come slower than the path takes them)
/// the clocks part at every start, and by more in an unoptimized build
/// (`make test`: 20-23% below in 3 of 7 runs of a veth case with a 32 KiB
/// send buffer, 45% idle): there the rate acknowledged must lie between the
/// transfer's own rate and the kernel's rate over its busy time.
const APP_LIMITED_IDLE: f64 = 0.1;
/// The receiver's mean unread bytes against its rx_queue polled every 2 ms,
/// where the reader falls behind (its queue above the window a tenth of the
/// time or more): this share of the larger, two segments, and two standard
/// errors of the polls as a sample of the time.
const READER_TOLERANCE: f64 = 0.2;
/// The share of time unread data exceeded the window, against the polls'
/// (beside two standard errors of the polls as a sample of the time).
const READER_SHARE_TOLERANCE: f64 = 0.1;
/// Where the polls show unread data above the window this share of the
/// time, no buffer advice; below the other, no reader advice (the
/// threshold, 20 %, between them).
const READER_BOUND: f64 = 0.3;
const READER_BOUND_NOT: f64 = 0.1;
/// Fewer polls of a receiver than this say too little of its queue: a
/// dozen polls in 0.8 s (when each poll walked /proc/net/tcp for 3.4 ms and
/// four flows' pollers starved one another), of a queue above the window
/// for runs of 100 ms and more, showed 1.00 where the events said 0.76.
const MIN_POLLS: usize = 50;

/// The sweep's bottleneck: slower than a veth pair on 2 vCPUs, fast enough
/// that a 256 MiB transfer lasts about a second.
const TBF: &str = "tbf rate 2gbit burst 256kb latency 20ms";

struct Case {
    name: String,
    cfg: LabConfig,
    /// Concurrent transfers of `cfg`.
    flows: usize,
}

/// 4 MTUs × window scaling on/off × 6 receive buffers, the send buffer,
/// reader, address family, loss and bottleneck rotating through their values.
fn cases() -> Vec<Case> {
    let readers = [
        ("fast", Reader::Fast),
        (
            "slow",
            Reader::Slow {
                initial_pause: Duration::from_millis(300),
                read_size: 4000,
                interval: Duration::from_millis(10),
                reads: 30,
            },
        ),
        (
            "pausing",
            Reader::Slow {
                initial_pause: Duration::ZERO,
                read_size: 256 << 10,
                interval: Duration::from_millis(20),
                reads: 25,
            },
        ),
    ];
    let mut cases = Vec::new();
    for mtu in [1500, 4000, 9000, 1280] {
        for window_scaling in [true, false] {
            for rcvbuf in [
                Some(16 << 10),
                Some(64 << 10),
                Some(256 << 10),
                Some(1 << 20),
                Some(4 << 20),
                None,
            ] {
                let i = cases.len();
                let sndbuf = [None, Some(32 << 10)][i % 2];
                let (reader_name, reader) = readers[(i / 2) % 3];
                let ipv6 = (i / 6) % 2 == 1;
                let flows = [1, 2, 1, 4][(i / 3) % 4];
                // One case in eight over the receiver's loopback (MTU 65536).
                let loopback = i % 8 == 5;
                // One in four of the others on a lossy path.
                let drop_every = (i % 4 == 2).then_some(100);
                // One in six of the others through a token bucket on the
                // sender's veth: a link that holds segments in its queue.
                let qdisc = (!loopback && (i + i / 6) % 6 == 3).then(|| TBF.to_string());
                let name = format!(
                    "mtu {mtu} wscale {} rcvbuf {} sndbuf {} {reader_name} {} {flows}x{}{}{}",
                    if window_scaling { "on" } else { "off" },
                    rcvbuf.map_or("auto".into(), |b: u32| format!("{}K", b >> 10)),
                    sndbuf.map_or("auto".into(), |b: u32| format!("{}K", b >> 10)),
                    if ipv6 { "v6" } else { "v4" },
                    if loopback { " lo" } else { "" },
                    drop_every.map_or(String::new(), |n| format!(" loss 1/{n}")),
                    if qdisc.is_some() { " tbf" } else { "" },
                );
                cases.push(Case {
                    name,
                    flows,
                    cfg: LabConfig {
                        loopback,
                        drop_every,
                        mtu,
                        window_scaling,
                        rcvbuf,
                        sndbuf,
                        reader,
                        ipv6,
                        // A fast reader's transfer lasts a few 200 ms windows.
                        bytes: if reader_name == "fast" {
                            256 << 20
                        } else {
                            48 << 20
                        },
                        poll_ends_us: Some(2000),
                        qdisc,
                        ..LabConfig::default()
                    },
                });
            }
        }
    }
    cases
}

/// Settings none of the other cases use, drawn per case from a fixed seed
/// (`TT_SWEEP_SEED=N` draws others):
/// other MTUs and buffers, writes of other sizes (with and without
/// TCP_NODELAY), reno and bbr, other loss rates and bottlenecks, pacing by
/// SO_MAX_PACING_RATE, three flows. The checks are the same; the values
/// are the ones the code was not written against.
fn other_cases() -> Vec<Case> {
    let mut seed = std::env::var("TT_SWEEP_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(0x7465_6e67_6521, |s| s | 1);
    let mut pick = |n: usize| {
        // xorshift64*: reproducible without a dependency.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    };
    let mut cases = Vec::new();
    for i in 0..24 {
        let mtu = [1500, 2000, 3000, 7000, 9000, 16000, 1400][pick(7)];
        let window_scaling = pick(4) != 0;
        let rcvbuf = [
            8 << 10,
            24 << 10,
            48 << 10,
            96 << 10,
            192 << 10,
            768 << 10,
            3 << 20,
            0,
        ][pick(8)];
        let rcvbuf = (rcvbuf > 0).then_some(rcvbuf);
        let sndbuf = [None, None, Some(16 << 10), Some(48 << 10), Some(128 << 10)][pick(5)];
        let write_size = [64 << 10, 1000, 8192, 100_000, 300][pick(5)];
        let nodelay = write_size < 8192 && pick(2) == 0;
        let congestion = [None, None, Some("reno"), Some("bbr")][pick(4)];
        let reader = match pick(4) {
            0 => Reader::Slow {
                initial_pause: Duration::from_millis(150),
                read_size: 16 << 10,
                interval: Duration::from_millis(5),
                reads: 60,
            },
            _ => Reader::Fast,
        };
        let ipv6 = pick(3) == 0;
        let flows = [1, 1, 2, 3][pick(4)];
        let loopback = pick(10) == 0;
        let drop_every = (!loopback)
            .then(|| [None, None, Some(50), Some(300)][pick(4)])
            .flatten();
        let qdisc = (!loopback)
            .then(|| {
                [
                    None,
                    None,
                    Some("tbf rate 600mbit burst 64kb latency 10ms"),
                    Some("tbf rate 4gbit burst 512kb latency 40ms"),
                    Some("pfifo"),
                ][pick(5)]
            })
            .flatten();
        let max_pacing_rate = (pick(8) == 0).then_some(100_000_000);
        // The receiver's window may shrink (net.ipv4.tcp_shrink_window); no
        // timestamps: the sender's RTT from fewer samples.
        let shrink_window = pick(5) == 0;
        let timestamps = pick(5) != 0;
        let slow = matches!(reader, Reader::Slow { .. });
        let name = format!(
            "other {i:02}: mtu {mtu} wscale {} rcvbuf {} sndbuf {} writes {write_size}{} {} {} {flows}x{}{}{}{}{}",
            if window_scaling { "on" } else { "off" },
            rcvbuf.map_or("auto".into(), |b: u32| format!("{}K", b >> 10)),
            sndbuf.map_or("auto".into(), |b: u32| format!("{}K", b >> 10)),
            if nodelay { " nodelay" } else { "" },
            congestion.unwrap_or("cubic"),
            if slow { "slow" } else { "fast" },
            if ipv6 { "v6" } else { "v4" },
            if loopback { " lo" } else { "" },
            drop_every.map_or(String::new(), |n| format!(" loss 1/{n}")),
            qdisc.map_or(String::new(), |q| format!(" {}", q.split(' ').take(3).collect::<Vec<_>>().join(" "))),
            max_pacing_rate.map_or(String::new(), |_| " paced 800mbit".into()),
        ) + if shrink_window { " shrink" } else { "" }
            + if timestamps { "" } else { " no-ts" };
        cases.push(Case {
            name,
            flows,
            cfg: LabConfig {
                loopback,
                drop_every,
                mtu,
                window_scaling,
                rcvbuf,
                sndbuf,
                reader,
                ipv6,
                write_size,
                nodelay,
                congestion: congestion.map(str::to_string),
                max_pacing_rate,
                shrink_window,
                timestamps,
                // Small writes and slow readers move fewer bytes a second.
                bytes: if write_size < 8192 || slow {
                    24 << 20
                } else {
                    192 << 20
                },
                poll_ends_us: Some(2000),
                qdisc: qdisc.map(str::to_string),
                ..LabConfig::default()
            },
        });
    }
    cases
}

/// Traced transfers: what the tool said, and what the kernel and the wire did.
struct Run {
    transfers: Vec<TransferReport>,
    report: Report,
    alerts: Vec<Alert>,
    /// Every window each receiving socket sent.
    windows: HashMap<SocketAddr, HashSet<u32>>,
    /// When each socket's incoming segments (tcp_rcv) came, by cookie.
    segments_in: HashMap<u64, Vec<u64>>,
    /// Each socket's limit shares in a Prometheus scrape when the first end
    /// of its connection to close had its FIN acknowledged, by cookie.
    scraped: HashMap<String, Option<LimitFractions>>,
    /// The largest outgoing segment (window_adv) recorded, TCP payload bytes.
    largest_segment: u32,
    /// The receivers read as fast as they can (`Reader::Fast`).
    fast_reader: bool,
    /// Hits of net_dev_queue and tcp_probe the kernel ran no program for (a
    /// program of this CPU was running): segments the sockets' bytes sent
    /// and received cannot count.
    window_adv_not_run: u64,
    tcp_rcv_not_run: u64,
}

/// `flows` concurrent transfers of `cfg` in one lab, traced together.
fn traced(cfg: &LabConfig, flows: usize) -> Run {
    traced_with(cfg, flows, AnalysisConfig::default())
}

fn traced_with(cfg: &LabConfig, flows: usize, analysis: AnalysisConfig) -> Run {
    let lab = Lab::new(cfg).unwrap();
    // 256 MiB of ring: an unoptimized build (make test) drains a fast
    // transfer's events more slowly than the kernel makes them.
    let options = TracerOptions {
        ring_bytes: 256 << 20,
        filters: traffic_filters(&lab, cfg, Filters::default()).unwrap(),
        count_hits: true,
        ..TracerOptions::default()
    };
    let mut tracer = Tracer::start(&options).unwrap();
    let mut analysis = Analysis::new(analysis);
    let mut alerts = Vec::new();
    let mut windows: HashMap<SocketAddr, HashSet<u32>> = HashMap::new();
    let mut segments_in: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut scraped = HashMap::new();
    let mut largest_segment = 0;
    let on_record = |record: &[u8]| {
        let ev = Event::decode(record).expect("records decode");
        if let (Body::State(st), Some(local)) = (&ev.body, ev.src()) {
            // Not at the close itself: a sender's close leaves up to its
            // buffer unsent (sndbuf 16K behind a 24K window: 24 ms busy after
            // it); once its FIN is acknowledged, every byte it sent is.
            if st.newstate == tcp_state::FIN_WAIT2 {
                scrape(&analysis, &local.to_string(), &mut scraped);
            }
        }
        alerts.extend(analysis.push(&ev));
        if let (Body::WindowAdv(w), Some(src)) = (&ev.body, ev.src()) {
            windows.entry(src).or_default().insert(w.window);
            largest_segment = largest_segment.max(w.len);
        }
        if let Body::TcpRcv(_) = ev.body {
            segments_in
                .entry(ev.hdr.sock_cookie)
                .or_default()
                .push(ev.hdr.ts_ns);
        }
    };
    let stop = AtomicBool::new(false);
    let (transfers, stats) = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let _stop = common::SetOnDrop(&stop);
            let ends: Vec<_> = (0..flows)
                .map(|_| s.spawn(|| lab.run_transfer(cfg, |_| {})))
                .collect();
            let transfers: Vec<TransferReport> = ends
                .into_iter()
                .map(|t| t.join().unwrap().unwrap())
                .collect();
            // The last ACKs and reads are still in the ring.
            std::thread::sleep(Duration::from_millis(100));
            transfers
        });
        let mut sink = Callbacks(on_record, |_: &CollectStats| {});
        let stats = Collector::new().run(&mut tracer, &stop, None, &mut sink);
        (worker.join().unwrap(), stats.unwrap())
    });
    assert!(transfers.iter().all(|t| t.completed));
    assert_eq!(stats.lost_total(), 0, "events lost");
    Run {
        transfers,
        report: analysis.finish(Provenance::default()),
        alerts,
        windows,
        segments_in,
        scraped,
        largest_segment,
        fast_reader: matches!(cfg.reader, Reader::Fast),
        window_adv_not_run: common::hits_not_run_of(&tracer, "window_adv"),
        tcp_rcv_not_run: common::hits_not_run_of(&tracer, "tcp_rcv"),
    }
}

/// What a scrape shows of the connection one of whose ends, `local`, had
/// its FIN acknowledged: both ends' shares, once.
fn scrape(analysis: &Analysis, local: &str, scraped: &mut HashMap<String, Option<LimitFractions>>) {
    let snapshot = Snapshot::of(analysis, 64, 0, BTreeMap::new(), &ProbePlan::default());
    for f in snapshot
        .flows
        .iter()
        .filter(|f| f.src == local || f.dst == local)
    {
        scraped
            .entry(f.cookie.clone())
            .or_insert(f.figures.limit_shares);
    }
}

/// The kernel's chrono between two readings: busy µs, and the rwnd- and
/// sndbuf-limited shares of it.
#[derive(Clone, Copy, Debug)]
struct KernelWindow {
    busy_us: u64,
    rwnd: f64,
    sndbuf: f64,
}

fn chrono_us(p: &TcpInfoPoll) -> [u64; 3] {
    let i = &p.info;
    [i.busy_time_us, i.rwnd_limited_us, i.sndbuf_limited_us]
}

impl KernelWindow {
    /// From `a` to `b`, each busy, rwnd- and sndbuf-limited µs.
    fn of_chrono(a: [u64; 3], b: [u64; 3]) -> KernelWindow {
        let busy_us = b[0].saturating_sub(a[0]);
        let share = |i: usize| {
            if busy_us == 0 {
                0.0
            } else {
                b[i].saturating_sub(a[i]) as f64 / busy_us as f64
            }
        };
        KernelWindow {
            busy_us,
            rwnd: share(1),
            sndbuf: share(2),
        }
    }

    /// From the last poll at or before `from_ns` to the first at or after
    /// `to_ns` (else the last). With no poll that early, from the connect,
    /// where the chrono starts at zero: the polls start once the poller has
    /// the socket, up to tens of ms in on two busy cores (an alert 107 ms
    /// in, on 2 rwnd jiffies the first poll came after).
    fn over(polls: &[TcpInfoPoll], from_ns: u64, to_ns: u64) -> Option<KernelWindow> {
        let a = polls.iter().rev().find(|p| p.mono_ns <= from_ns);
        let b = polls.iter().find(|p| p.mono_ns >= to_ns).or(polls.last())?;
        Some(KernelWindow::of_chrono(
            a.map_or([0; 3], chrono_us),
            chrono_us(b),
        ))
    }

    /// The kernel's figure for a limit alert; None for the kinds it does not clock.
    fn share(&self, kind: AlertKind) -> Option<f64> {
        match kind {
            AlertKind::RwndLimited => Some(self.rwnd),
            AlertKind::SndbufLimited => Some(self.sndbuf),
            // Busy time neither rwnd- nor sndbuf-limited: cwnd-limited within it.
            AlertKind::CwndLimited => Some(1.0 - self.rwnd - self.sndbuf),
            // The window binds: the sender waits on it.
            AlertKind::MssClamp => Some(self.rwnd),
            AlertKind::SwsStall => None,
        }
    }
}

/// The sender's state at each poll in `from_ns..=to_ns`, as the events
/// classify theirs (`SenderState::limit`), from `TCP_INFO` and `SO_MEMINFO`:
/// of the polls busy, the shares cwnd-limited (`unacked + retrans − sacked −
/// lost ≥ cwnd`) and sndbuf-limited (nothing unsent, `sk_wmem_queued ≥
/// sk_sndbuf`, the congestion window open): the polls sample the time.
fn polled_shares(polls: &[TcpInfoPoll], from_ns: u64, to_ns: u64) -> (usize, f64, f64) {
    let (mut busy, mut cwnd, mut sndbuf) = (0usize, 0usize, 0usize);
    for p in polls
        .iter()
        .filter(|p| (from_ns..=to_ns).contains(&p.mono_ns))
    {
        let i = &p.info;
        if i.unacked == 0 && i.notsent_bytes == 0 {
            continue;
        }
        busy += 1;
        let in_flight = (i.unacked + i.retrans).saturating_sub(i.sacked + i.lost);
        if i.snd_cwnd > 0 && in_flight >= i.snd_cwnd {
            cwnd += 1;
        } else if i.notsent_bytes == 0 && p.wmem_queued >= i.sk_sndbuf {
            sndbuf += 1;
        }
    }
    let share = |n: usize| n as f64 / busy.max(1) as f64;
    (busy, share(cwnd), share(sndbuf))
}

/// Busy polls over an alert's 200 ms past which none at cwnd refutes a
/// cwnd_limited alert: at the 20% it fires on, 30 polls all miss it once
/// in a thousand.
const MIN_CWND_POLLS: usize = 30;

/// No false alerts: the kernel confirms each over the alert's 200 ms (and
/// a cwnd_limited one, which its chrono does not clock, its polled state),
/// to within one jiffy (`jiffy_us`): its chrono counts whole jiffies, and
/// the analysis starts an episode on its share less one. (1 rwnd jiffy of
/// 12 busy, "8%", beside the events' 21% of 172 ms, where over the whole
/// transfer the two agreed to 0.01.)
fn false_alerts(
    fired: &[&Alert],
    polls: &[TcpInfoPoll],
    jiffy_us: Option<u64>,
    wrong: &mut Vec<String>,
) {
    for a in fired {
        let from = a.ts_ns.saturating_sub(WINDOW_NS);
        let Some(kernel) = KernelWindow::over(polls, from, a.ts_ns) else {
            continue;
        };
        let polled = polled_shares(polls, from, a.ts_ns);
        // The kernel clocks no cwnd limit; its state, polled, shows one.
        if a.kind == AlertKind::CwndLimited && polled.0 >= MIN_CWND_POLLS && polled.1 == 0.0 {
            wrong.push(format!(
                "false cwnd_limited: none of {} busy polls had the flight at cwnd: {}",
                polled.0, a.message
            ));
        }
        if let Some(share) = kernel.share(a.kind) {
            let jiffy = jiffy_us.unwrap_or(0) as f64 / kernel.busy_us.max(1) as f64;
            if kernel.busy_us > 0 && share + jiffy < CONFIRMS {
                wrong.push(format!(
                    "false {}: kernel {share:.2} of {} µs busy, polls (busy, cwnd, sndbuf) {polled:?}: {}",
                    a.kind.name(),
                    kernel.busy_us,
                    a.message
                ));
            }
        }
    }
}

/// None missed: every whole 200 ms of the connection that the kernel shows
/// limited has its alert by then. A window closed below one MSS is the
/// sws_stall alert's: it fires 100 ms into the stall, while the
/// rwnd_limited check waits for the ACK of the first zero-window probe.
/// Limits are checked at the sender's incoming segments: a window the
/// kernel shows limited is missed when one came in the slack after it and
/// no alert did. None comes while a zero window's probes back off (the
/// RTO doubling from 200 ms): then the alert waits for the next.
fn missed_alerts(
    fired: &[&Alert],
    polls: &[TcpInfoPoll],
    sender: u64,
    segments_in: &[u64],
    wrong: &mut Vec<String>,
) {
    let first = polls.first().map_or(0, |p| p.mono_ns);
    for kind in [AlertKind::RwndLimited, AlertKind::SndbufLimited] {
        let covers = |a: AlertKind| {
            a == kind || (kind == AlertKind::RwndLimited && a == AlertKind::SwsStall)
        };
        let missed = polls
            .iter()
            .filter(|p| p.mono_ns >= first + WINDOW_NS)
            .find_map(|end| {
                let limited = |to: u64| {
                    let k = KernelWindow::over(polls, to - WINDOW_NS, to)?;
                    let share = k.share(kind)?;
                    (k.busy_us >= WINDOW_NS / 2000 && share >= MUST_ALERT).then_some(k)
                };
                let k = limited(end.mono_ns)?;
                // The first incoming segment checks the 200 ms before it,
                // which must still be limited (a sender that got none for
                // 200 ms after its window stalled it, loss and RTO: by then
                // the window had slid past the rwnd-limited part).
                let slack = end.mono_ns..=end.mono_ns + ALERT_SLACK_NS;
                let checked = segments_in
                    .iter()
                    .find(|t| slack.contains(t))
                    .is_some_and(|&t| limited(t).is_some());
                let alerted = fired.iter().any(|a| {
                    covers(a.kind)
                        && a.sock_cookie == sender
                        && a.ts_ns <= end.mono_ns + ALERT_SLACK_NS
                });
                (checked && !alerted).then_some((end.mono_ns, k))
            });
        if let Some((at, k)) = missed {
            let late = fired
                .iter()
                .find(|a| a.kind == kind && a.sock_cookie == sender && a.ts_ns > at)
                .map(|a| (a.ts_ns - at) / 1_000_000);
            wrong.push(format!(
                "missed {}: kernel {k:?} in the 200 ms to {at}; the alert {late:?} ms later",
                kind.name()
            ));
        }
    }
}

/// Shares: a partition of busy time, the kernel's where it measures them
/// (`info`, read after the last byte), and what Prometheus showed (up to the
/// ACK of the first FIN).
fn shares(
    l: &LimitsReport,
    info: &TcpInfoSnapshot,
    scraped: Option<LimitFractions>,
    wrong: &mut Vec<String>,
) {
    let sum = l.rwnd + l.cwnd + l.sndbuf + l.app + l.unlimited;
    if l.busy_ns > 0 && (sum - 1.0).abs() > 1e-9 {
        wrong.push(format!("shares sum to {sum}"));
    }
    let kernel = |x: u64| x as f64 / info.busy_time_us.max(1) as f64;
    let (k_rwnd, k_sndbuf) = (kernel(info.rwnd_limited_us), kernel(info.sndbuf_limited_us));
    // sndbuf from the events where they saw the buffer full longer than the
    // kernel clocks (send_buffer_the_kernel_does_not_clock checks those).
    let sndbuf_apart =
        l.sndbuf_source == "kernel_chrono" && (l.sndbuf - k_sndbuf).abs() > SHARE_TOLERANCE;
    if (l.rwnd - k_rwnd).abs() > SHARE_TOLERANCE || sndbuf_apart {
        wrong.push(format!(
            "shares rwnd {:.3} sndbuf {:.3}, kernel {k_rwnd:.3} {k_sndbuf:.3}",
            l.rwnd, l.sndbuf
        ));
    }
    match scraped {
        Some(p) if l.busy_ns > 0 => {
            let pairs = [
                (p.rwnd, l.rwnd),
                (p.cwnd, l.cwnd),
                (p.sndbuf, l.sndbuf),
                (p.app, l.app),
            ];
            if pairs.iter().any(|(a, b)| (a - b).abs() > 0.02) {
                wrong.push(format!("Prometheus shares {p:?}, report {l:?}"));
            }
        }
        Some(_) => {}
        None => wrong.push("no Prometheus series for the sender".into()),
    }
}

/// How far off the kernel's busy time can be, as a share of it. Its chrono
/// adds whole jiffies at each start and stop (`jiffies − chrono_start`), so
/// it counts the ticks that fall in busy periods: one jiffy off for a
/// transfer busy throughout, but where the sender goes busy and idle many
/// times a jiffy (a 48 KiB send buffer drained between writes) a sample of
/// the transfer's ticks, two standard errors of which (binomial) are 38% of
/// 13 busy jiffies in 25 (the other cases' 22: 18-22% apart).
fn busy_jiffies_error(busy_jiffies: u64, elapsed_jiffies: f64) -> f64 {
    let busy = busy_jiffies.max(1) as f64;
    let p = (busy / elapsed_jiffies.max(busy)).min(1.0);
    (1.0 + 2.0 * (elapsed_jiffies * p * (1.0 - p)).sqrt()) / busy
}

/// The sender's throughput-ceiling advice: the rate it sets beside the
/// ceiling is the kernel's bytes acknowledged over its busy time. Its words
/// for the table.
fn ceiling(sender: &FlowWindowReport, t: &TransferReport, wrong: &mut Vec<String>) -> String {
    let info = &t.sender;
    let Some((ceiling, ours, window, srtt_us)) = sender.advice.iter().find_map(|a| match a {
        Advice::ThroughputCeiling {
            ceiling_bps,
            acked_bps: Some(acked),
            window,
            srtt_us,
            ..
        } => Some((*ceiling_bps, *acked, *window, *srtt_us)),
        _ => None,
    }) else {
        return String::new();
    };
    // The arithmetic a reader can redo: the window over the srtt quoted,
    // to the whole µs it is quoted in (1% at 45 µs).
    let rate_at = |srtt: f64| window as f64 * 8e6 / srtt.max(0.5);
    let srtt = f64::from(srtt_us);
    let quoted = rate_at(srtt);
    if !(rate_at(srtt + 0.5) * 0.999..=rate_at(srtt - 0.5) * 1.001).contains(&ceiling) {
        wrong.push(format!(
            "ceiling advice: {window} B at srtt {srtt_us} µs is {:.3} Gb/s, not the {:.3} quoted",
            quoted / 1e9,
            ceiling / 1e9
        ));
    }
    let kernel = info.bytes_acked as f64 * 8e6 / info.busy_time_us.max(1) as f64;
    let idle = 1.0 - info.busy_time_us as f64 / t.elapsed.as_micros().max(1) as f64;
    let busy_jiffies = sender.limits.kernel.map_or(0, |k| k.busy_jiffies);
    let elapsed_jiffies = busy_jiffies as f64 / (1.0 - idle).max(1e-3);
    let tolerance = ACKED_RATE_TOLERANCE + busy_jiffies_error(busy_jiffies, elapsed_jiffies);
    let agrees = if idle >= APP_LIMITED_IDLE {
        let below = t.throughput_bps * (1.0 - ACKED_RATE_TOLERANCE);
        (below..=kernel * (1.0 + tolerance)).contains(&ours)
    } else {
        (ours / kernel - 1.0).abs() <= tolerance
    };
    if !agrees {
        wrong.push(format!(
            "ceiling advice: {:.3} Gb/s acknowledged, kernel {:.3} Gb/s over {busy_jiffies} jiffies ({:.0}% idle)",
            ours / 1e9,
            kernel / 1e9,
            idle * 100.0
        ));
    }
    format!(
        "  ceiling {:.2} acked {:.2} kernel {:.2} over {busy_jiffies} jiffies",
        ceiling / 1e9,
        ours / 1e9,
        kernel / 1e9
    )
}

/// The receiver's queue as its polls show it: the time-weighted mean of its
/// rx_queue and the share of time it exceeded the window on the wire (each
/// poll holding until the next), each with two standard errors of the
/// polls as a sample of the time (a few dozen where four flows keep both
/// CPUs busy).
struct PolledQueue {
    polls: usize,
    unread: f64,
    unread_error: f64,
    over: f64,
    over_error: f64,
}

impl PolledQueue {
    fn of(polls: &[TcpInfoPoll]) -> Option<PolledQueue> {
        let (mut time, mut unread, mut over) = (0.0, 0.0, 0.0);
        for pair in polls.windows(2) {
            let dt = pair[1].mono_ns.saturating_sub(pair[0].mono_ns) as f64;
            let (queue, info) = (pair[0].rx_queue, &pair[0].info);
            // The stored window past what the scale carries is clamped on
            // the wire (`clamped_65535`).
            let offered = u64::from(info.rcv_wnd).min(65535 << info.rcv_wscale);
            time += dt;
            unread += f64::from(queue) * dt;
            if u64::from(queue) > offered {
                over += dt;
            }
        }
        if time == 0.0 {
            return None;
        }
        let (unread, over) = (unread / time, over / time);
        let n = polls.len() as f64;
        let spread = polls
            .iter()
            .map(|p| (f64::from(p.rx_queue) - unread).powi(2))
            .sum::<f64>()
            / n;
        Some(PolledQueue {
            polls: polls.len(),
            unread,
            unread_error: 2.0 * (spread / n).sqrt(),
            over,
            // Laplace's rule: a share of 0 or 1 in a few polls is no certainty.
            over_error: {
                let p = (over * n + 1.0) / (n + 2.0);
                2.0 * (p * (1.0 - p) / n).sqrt()
            },
        })
    }
}

/// The reader's queue as the receiver's window report has it, against its
/// polls (mean unread, share of time above the window). Advice for a buffer
/// never asks for one the receiver already had, and none is given where
/// unread data held the window. Its words for the table.
fn reader(
    run: &Run,
    t: &TransferReport,
    receiver: &FlowWindowReport,
    wrong: &mut Vec<String>,
) -> String {
    let Some(kernel) = PolledQueue::of(&t.receiver_polls) else {
        wrong.push("no polls of the receiver".into());
        return String::new();
    };
    if kernel.polls < MIN_POLLS {
        return format!("  unread: {} polls", kernel.polls);
    }
    let w = &receiver.window.receive;
    let slack = READER_TOLERANCE * kernel.unread.max(w.mean_unread)
        + 2.0 * f64::from(t.receiver.rcv_mss)
        + kernel.unread_error;
    // A reader that reads as fast as it can competes with the poller for
    // the CPUs: the polls land while it is off its CPU and its queue grows,
    // so they are no sample of the time. Measured (3 flows of 1400-B MTU,
    // 7 Gb/s, fast readers, the queue above the window 0.10-0.13 of the
    // time; an unoptimized build: 21.7 KB polled where the events said
    // 12.7): the events' queue at the polls' own stamps was 2-4 % below the
    // polls, its mean over the time 30-40 % below. Its share above the
    // window, which the advice reads, is held to the polls all the same; a
    // paced reader's mean too, as it is off its CPU by its own choice.
    let behind = kernel.over.max(w.unread_over_window_fraction) >= READER_BOUND_NOT;
    if behind && !run.fast_reader && (w.mean_unread - kernel.unread).abs() > slack {
        wrong.push(format!(
            "mean unread {:.0} B, kernel {:.0} B",
            w.mean_unread, kernel.unread
        ));
    }
    let over = kernel.over;
    if (w.unread_over_window_fraction - over).abs() > READER_SHARE_TOLERANCE + kernel.over_error {
        wrong.push(format!(
            "unread over the window {:.2} of the time, kernel {over:.2}",
            w.unread_over_window_fraction
        ));
    }
    let had = t
        .receiver_polls
        .iter()
        .map(|p| p.info.sk_rcvbuf)
        .chain([t.receiver.sk_rcvbuf])
        .max()
        .unwrap_or(0);
    let sender = run
        .report
        .flows
        .iter()
        .find(|f| f.src == t.sender_addr.to_string());
    let advised: Vec<&Advice> = sender
        .into_iter()
        .chain([receiver])
        .flat_map(|f| &f.advice)
        .collect();
    let (mut reader_advice, mut buffer_advice) = ("", "");
    for advice in &advised {
        match advice {
            Advice::ReceiveBuffer { sk_rcvbuf, .. } if *sk_rcvbuf <= u64::from(had) => wrong.push(
                format!("advice asks for sk_rcvbuf {sk_rcvbuf}, the receiver had {had}"),
            ),
            Advice::ReceiveBuffer { .. } if over >= READER_BOUND => wrong.push(format!(
                "buffer advice where unread data exceeded the window {over:.2} of the time"
            )),
            Advice::Mtu { .. } if over >= READER_BOUND => wrong.push(format!(
                "MTU advice where unread data exceeded the window {over:.2} of the time"
            )),
            Advice::Reader { .. } if over < READER_BOUND_NOT => wrong.push(format!(
                "reader advice where unread data exceeded the window {over:.2} of the time"
            )),
            _ => {}
        }
        match advice {
            Advice::Reader { .. } => reader_advice = " reader",
            Advice::ReceiveBuffer { .. } => buffer_advice = " buffer",
            _ => {}
        }
    }
    format!(
        "  unread {:.0}/{:.0} B over {:.2}/{over:.2} ({} polls){reader_advice}{buffer_advice}",
        w.mean_unread, kernel.unread, w.unread_over_window_fraction, kernel.polls
    )
}

/// Each end's bytes as the table shows them, against the kernel's: the
/// sender's every segment it transmitted, retransmissions too
/// (`tcpi_bytes_sent`), the receiver's each byte once (`tcpi_bytes_received`).
fn bytes(run: &Run, t: &TransferReport, wrong: &mut Vec<String>) {
    let socket = |addr: SocketAddr| {
        let addr = addr.to_string();
        run.report.sockets.iter().find(|s| s.src == addr)
    };
    let ends = [
        (
            "sent",
            socket(t.sender_addr).map(|s| s.bytes_sent),
            t.sender.bytes_sent,
            run.window_adv_not_run,
        ),
        (
            "received",
            socket(t.receiver_addr).map(|s| s.bytes_received),
            t.receiver.bytes_received,
            run.tcp_rcv_not_run,
        ),
    ];
    for (what, ours, kernel, not_run) in ends {
        // A segment whose hook ran no program is at most a 64 KiB skb.
        let short = |b: u64| kernel.saturating_sub(b).saturating_sub(not_run * 65536);
        let apart =
            ours.map(|b| (short(b).max(b.saturating_sub(kernel))) as f64 / kernel.max(1) as f64);
        if apart.is_none_or(|a| a > BYTES_TOLERANCE) {
            wrong.push(format!(
                "{what} {ours:?} B, kernel {kernel} B ({not_run} hits not run)"
            ));
        }
    }
}

/// A flow's TX segments on the hold path `path` (all of them: None).
fn tx_held(flow: &FlowPaths, path: Option<&str>) -> u64 {
    flow.paths
        .iter()
        .filter(|p| p.direction == "tx" && p.dimension == "hold")
        .filter(|p| path.is_none_or(|path| p.path == path))
        .map(|p| p.packets)
        .sum()
}

/// What one transfer of a run found wrong, and its line for the table.
/// The path table blames the receive window for holding segments only
/// where the kernel found the sender rwnd-limited: with no `rwnd_limited`
/// jiffy at all, at most 10 % of the sender's segments are `held_rwnd`
/// (those that waited more for the window than for what sent them: a burst
/// after a short rwnd-limited spell can be more of the segments than of
/// the time). A rule that counted any window short of the writes classed
/// 18.7 % of the healthy lab's paced segments so. And where the kernel
/// found it rwnd-limited nearly all the time, the window held most of the
/// segments that waited. Returns the share of all segments held_rwnd.
fn held_by_rwnd(
    run: &Run,
    cookie: u64,
    t: &TransferReport,
    jiffy_us: Option<u64>,
    wrong: &mut Vec<String>,
) -> f64 {
    let Some(flow) = run
        .report
        .path_costs
        .flows
        .iter()
        .find(|f| f.cookie == cookie)
    else {
        return 0.0;
    };
    let hold = |path| tx_held(flow, path);
    let share = hold(Some("held_rwnd")) as f64 / hold(None).max(1) as f64;
    let info = &t.sender;
    let kernel = info.rwnd_limited_us as f64 / info.busy_time_us.max(1) as f64;
    // A segment is held_rwnd where the window held the sender at least half
    // its wait: next to no window time, next to none; a majority of the
    // segments, only where the window held the sender a fair share of its
    // time (behind a token bucket, TSQ 71 % and the window 29 % once made
    // 87 % of them held_rwnd, the window counted held where an ACK had
    // opened it). Segments weigh that time by how many wait in it, and more
    // wait while the window holds: BBR, 1000 B writes, rcvbuf 96K, loss
    // 1/300 (sweep seed 60), the kernel rwnd-limited 26 % of the time, 67 %
    // of the segments held_rwnd, the segments' waits summed 80 % window
    // (the events' window clock 35 ms beside the kernel's 45 ms).
    // And a spell of a jiffy or two can hold a tenth of them: a pausing
    // reader, rcvbuf 4 MiB, the kernel rwnd-limited 8 of 568 ms, 13 %.
    // The chrono counts the jiffies that tick while it runs: none of n busy
    // ones bounds the window's share of the time by 3 / n (95 %, the rule
    // of three). A short transfer's none says little: seed 93's other 17
    // (BBR, 1000 B writes behind a 48K window, 56-92 ms busy, 14-23 jiffies
    // at HZ 250) had 7-15 % of its segments held_rwnd beside 0 or 1 rwnd
    // jiffy, a share 0 of 14 jiffies allows up to 0.21.
    let none_allows = jiffy_us.map_or(0.0, |jiffy| {
        3.0 / (info.busy_time_us / jiffy.max(1)).max(1) as f64
    });
    if (kernel == 0.0 && share > none_allows.max(0.1)) || (kernel < 0.1 && share > 0.5) {
        wrong.push(format!(
            "{share:.2} of the segments held_rwnd, kernel rwnd_limited {} of {} µs busy",
            info.rwnd_limited_us, info.busy_time_us
        ));
    }
    // The other way: where the kernel clocked the window 90 % or more of
    // 100 ms or more busy, it held at least half of the segments that
    // waited (not at_once, retransmit, write_unseen), by their number or
    // by their waits in TCP summed. Not of all segments: a slow reader's
    // stall holds a few, the fast run after it the rest (rcvbuf 256K, the
    // kernel 89-98 %: 4-47 % of the held segments, 92-96 % of their
    // waits); nor below 90 % (seed 10's other 02, tbf and loss 1/50: the
    // kernel 71-74 %, held_rwnd 30-40 % both ways). The larger of the two
    // was 0.92 or more over 66 such transfers (the 48 cases and the others
    // of 6 seeds); with the window not sampled at writes, 0.29-0.50 (4
    // pausing readers at MTU 4000, seed 10's other 00), and 3 loopback
    // flows behind rcvbuf 48K (seed 63's other 20 before bdcb46d), the
    // kernel 98-100 %, 0.29-0.64 of the held segments and 0.38-0.78 of
    // their waits (a flow under half both ways in 6 runs of 7).
    let wait = |path: Option<&str>| -> u64 {
        flow.paths
            .iter()
            .filter(|p| p.direction == "tx" && p.dimension == "hold")
            .filter(|p| path.is_none_or(|path| p.path == path))
            .flat_map(|p| p.stages.iter().filter(|s| s.stage == "tcp"))
            .map(|s| s.total_ns)
            .sum()
    };
    // Every write is traced, from before the connection: a segment whose
    // write is unseen is one the analysis lost (a full queue of small writes
    // once dropped its oldest, whose bytes leave next: 97 % of iperf3
    // -l 100's segments, 99 % rwnd-limited over loopback).
    let unseen = hold(Some("write_unseen"));
    if unseen * 100 > hold(None) {
        wrong.push(format!("{unseen} of {} segments write_unseen", hold(None)));
    }
    let held = hold(None) - hold(Some("at_once")) - hold(Some("retransmit")) - unseen;
    let of_held = hold(Some("held_rwnd")) as f64 / held.max(1) as f64;
    // at_once segments waited under held_after_ns; the others none in TCP.
    let of_waits = wait(Some("held_rwnd")) as f64
        / wait(None).saturating_sub(wait(Some("at_once"))).max(1) as f64;
    if kernel >= 0.9 && info.busy_time_us >= 100_000 && held > 0 && of_held.max(of_waits) < 0.5 {
        wrong.push(format!(
            "{of_held:.2} of the held segments held_rwnd ({of_waits:.2} of their waits), kernel rwnd_limited {} of {} µs busy",
            info.rwnd_limited_us, info.busy_time_us
        ));
    }
    share
}

fn check(run: &Run, t: &TransferReport) -> (Vec<String>, String) {
    let flow = |local: SocketAddr| -> &FlowWindowReport {
        let local = local.to_string();
        run.report.flows.iter().find(|f| f.src == local).unwrap()
    };
    let (sender, receiver) = (flow(t.sender_addr), flow(t.receiver_addr));
    let ends = [sender.sock_cookie, receiver.sock_cookie];
    let ours: Vec<&Alert> = run
        .alerts
        .iter()
        .filter(|a| ends.contains(&a.sock_cookie))
        .collect();
    let fired: Vec<&Alert> = ours.iter().copied().filter(|a| !a.cleared).collect();
    let mut wrong = Vec::new();
    let jiffy_us = sender
        .limits
        .kernel
        .and_then(|k| k.hz)
        .map(|hz| 1_000_000 / u64::from(hz));
    false_alerts(&fired, &t.sender_polls, jiffy_us, &mut wrong);
    let segments_in = run
        .segments_in
        .get(&sender.sock_cookie)
        .map_or(&[][..], Vec::as_slice);
    missed_alerts(
        &fired,
        &t.sender_polls,
        sender.sock_cookie,
        segments_in,
        &mut wrong,
    );
    // Every episode that fired ended with its flow; a stall alerted only at
    // its end (the alert's time) has ended already.
    let stalls: Vec<_> = [sender, receiver]
        .iter()
        .flat_map(|f| &f.window.sws_stalls)
        .collect();
    let running = |a: &&&Alert| {
        a.kind != AlertKind::SwsStall
            || stalls
                .iter()
                .any(|s| s.start_ns <= a.ts_ns && a.ts_ns < s.end_ns)
    };
    for a in fired.iter().filter(running) {
        let cleared = ours.iter().any(|c| {
            c.cleared && c.kind == a.kind && c.sock_cookie == a.sock_cookie && c.ts_ns >= a.ts_ns
        });
        if !cleared {
            wrong.push(format!("{} never cleared", a.kind.name()));
        }
    }
    let scraped = run.scraped.get(&sender.sock_cookie.to_string()).copied();
    shares(&sender.limits, &t.sender, scraped.flatten(), &mut wrong);
    if scraped.is_none() {
        wrong.push("no scrape at the ACK of the first FIN".into());
    }
    // The chain is made of windows the receiver sent.
    let sent = run.windows.get(&t.receiver_addr);
    for c in [sender, receiver]
        .iter()
        .filter_map(|f| f.window.chain.as_ref())
    {
        if !sent.is_some_and(|w| w.contains(&(c.advertised as u32))) {
            wrong.push(format!("chain's {} B never advertised", c.advertised));
        }
    }
    bytes(run, t, &mut wrong);
    let held_rwnd = held_by_rwnd(run, sender.sock_cookie, t, jiffy_us, &mut wrong);
    let ceiling_words = ceiling(sender, t, &mut wrong);
    let reader_words = reader(run, t, receiver, &mut wrong);
    let mut kinds = String::new();
    for kind in AlertKind::ALL {
        let n = fired.iter().filter(|a| a.kind == kind).count();
        if n > 0 {
            let _ = write!(kinds, " {}×{n}", kind.name());
        }
    }
    let info = &t.sender;
    let kernel = |x: u64| x as f64 / info.busy_time_us.max(1) as f64;
    let polled = polled_shares(&t.sender_polls, 0, u64::MAX);
    let line = format!(
        "{:>6.2} Gb/s  kernel rwnd {:.2} sndbuf {:.2}  ours {:.2} {:.2}  polls (busy, cwnd, sndbuf) {polled:.2?}  held_rwnd {held_rwnd:.2}{ceiling_words}{reader_words}  alerts:{}",
        t.throughput_bps / 1e9,
        kernel(info.rwnd_limited_us),
        kernel(info.sndbuf_limited_us),
        sender.limits.rwnd,
        sender.limits.sndbuf,
        if kinds.is_empty() {
            " none".into()
        } else {
            kinds
        }
    );
    (wrong, line)
}

#[test]
fn findings_agree_with_the_kernel_across_the_sweep() {
    if !common::require_root("findings_agree_with_the_kernel_across_the_sweep") {
        return;
    }
    let _serial = serial();
    let sweep = std::env::var("TT_SWEEP").unwrap_or_default();
    let only = std::env::var("TT_SWEEP_CASE").ok();
    let (all, every) = match sweep.as_str() {
        "full" => (cases(), 1),
        "other" => (other_cases(), 1),
        _ => (cases(), 4),
    };
    let cases: Vec<Case> = all
        .into_iter()
        .enumerate()
        .filter(|(i, _)| every == 1 || i % 4 == (i / 12) % 4)
        .map(|(_, c)| c)
        .filter(|c| only.as_ref().is_none_or(|k| c.name.contains(k.as_str())))
        .collect();
    let mut failures = Vec::new();
    for case in &cases {
        let run = traced(&case.cfg, case.flows);
        for t in &run.transfers {
            let (wrong, line) = check(&run, t);
            eprintln!("{:<56} {line}", case.name);
            for w in &wrong {
                eprintln!("    {w}");
            }
            failures.extend(wrong.into_iter().map(|w| format!("{}: {w}", case.name)));
        }
    }
    eprintln!("{} cases, {} disagreements", cases.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The kernel's blind spot, named on purpose: SO_SNDBUF 32 KiB holds a
/// veth transfer's writer on its buffer while `tcpi_sndbuf_limited` stays
/// near 0. The report's sndbuf share comes from the events there, and says
/// so. (Throughput is no witness that the buffer binds: on one VM the 32 KiB
/// run was a quarter slower than autotuning, on another it ran at twice its
/// rate in 10 pairs of 12, with veth's CPU placement deciding.)
#[test]
fn send_buffer_the_kernel_does_not_clock() {
    if !common::require_root("send_buffer_the_kernel_does_not_clock") {
        return;
    }
    let _serial = serial();
    let run = |sndbuf| {
        // Half a second or more: polls enough to witness it (below).
        let cfg = LabConfig {
            sndbuf,
            bytes: 512 << 20,
            poll_ends_us: Some(200),
            ..LabConfig::default()
        };
        traced(&cfg, 1)
    };
    let rate = |r: &Run| r.transfers[0].throughput_bps;
    let small = run(Some(32 << 10));
    let info = &small.transfers[0].sender;
    let kernel = info.sndbuf_limited_us as f64 / info.busy_time_us.max(1) as f64;
    let sender = small.transfers[0].sender_addr.to_string();
    let l = &small
        .report
        .flows
        .iter()
        .find(|f| f.src == sender)
        .unwrap()
        .limits;
    let polled = polled_shares(&small.transfers[0].sender_polls, 0, u64::MAX);
    eprintln!(
        "{:.2} Gb/s; kernel sndbuf {kernel:.2}, polls (busy, cwnd, sndbuf) {polled:.2?}, report {:.2} ({})",
        rate(&small) / 1e9,
        l.sndbuf,
        l.sndbuf_source,
    );
    assert!(
        kernel < 0.15,
        "the kernel clocked {kernel}: no blind spot to name"
    );
    assert!(l.sndbuf >= 0.15 && l.sndbuf > kernel + 0.1, "{l:?}");
    assert_eq!(l.sndbuf_source, "per_event");
    // A witness nobody here wrote: the kernel's own socket state, polled,
    // shows the buffer full with nothing unsent and the congestion window
    // open where its chrono clocks nothing. Asked for every 200 µs, 16 to 29
    // polls land in the transfer's half second (2 cores, writer, reader and
    // softirq busy), when the cores let the poller run, not at random
    // instants; and a poll sees only the instants the buffer is full (the
    // writer sleeps on until a third of it is free). Of fewer than 20, none
    // found it full in 1 run of 5 (a debug build, 12 polls, the events 37 %).
    let (busy_polls, _, polled_sndbuf) = polled;
    if busy_polls >= 20 {
        assert!(polled_sndbuf > kernel, "polls {polled:?}, kernel {kernel}");
    }
}

/// The largest window the receiver of `run`'s first transfer offered.
fn largest_offer(run: &Run) -> u32 {
    let t = &run.transfers[0];
    run.windows[&t.receiver_addr]
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
}

/// The advice checks out: rerun with the SO_RCVBUF the report advised, the
/// receiver offers (on the wire) the window of whole segments it named.
#[test]
fn advised_receive_buffer_gives_the_window_it_names() {
    if !common::require_root("advised_receive_buffer_gives_the_window_it_names") {
        return;
    }
    let _serial = serial();
    let cfg = Scenario::MssClamp.config();
    let receiver_advice = |run: &Run| {
        let local = run.transfers[0].receiver_addr.to_string();
        let flow = run.report.flows.iter().find(|f| f.src == local).unwrap();
        flow.advice.iter().find_map(|a| match a {
            Advice::ReceiveBuffer {
                window, so_rcvbuf, ..
            } => Some((*window, *so_rcvbuf)),
            _ => None,
        })
    };
    // Flagged from 10 %: the lab's clamp loses 18 to 45 % of the free space
    // run to run, and at the default 20 % some runs give no advice to check.
    let mut flagged_from_10 = AnalysisConfig::default();
    flagged_from_10.window.threshold_pct = 10.0;
    let before = traced_with(&cfg, 1, flagged_from_10.clone());
    let (window, so_rcvbuf) = receiver_advice(&before).expect("buffer advice for the clamp");
    assert!(
        u64::from(largest_offer(&before)) < window,
        "the advice asks for no more"
    );
    let advised = LabConfig {
        rcvbuf: Some(so_rcvbuf as u32),
        ..cfg
    };
    let after = traced_with(&advised, 1, flagged_from_10);
    eprintln!(
        "SO_RCVBUF {so_rcvbuf}: largest window {} -> {} B, {window} B advised",
        largest_offer(&before),
        largest_offer(&after)
    );
    assert!(u64::from(largest_offer(&after)) >= window);
}

/// Where the receive window held the sender back, the buffer advised is
/// sized for the sender's cwnd meanwhile (before, for one segment more than
/// the free space: SO_RCVBUF 18936 where 16384 was set), and for the window
/// scale that window needs (SO_RCVBUF 152962 took scale 2, and windows
/// stopped at 262140 B, short of the 269328 advised): rerun with it, the
/// receiver offers about the window advised.
#[test]
fn advised_receive_buffer_offers_the_senders_cwnd() {
    if !common::require_root("advised_receive_buffer_offers_the_senders_cwnd") {
        return;
    }
    let _serial = serial();
    let cfg = LabConfig {
        bytes: 64 << 20,
        ..Scenario::RwndLimited.config()
    };
    let kernel_rwnd_share = |run: &Run| {
        let info = &run.transfers[0].sender;
        info.rwnd_limited_us as f64 / info.busy_time_us.max(1) as f64
    };
    let before = traced(&cfg, 1);
    let sender = before.transfers[0].sender_addr.to_string();
    let flow = before
        .report
        .flows
        .iter()
        .find(|f| f.src == sender)
        .unwrap();
    let Some(Advice::ReceiveBuffer {
        target,
        sender_cwnd: Some(cwnd),
        window,
        so_rcvbuf,
        message,
        ..
    }) = flow
        .advice
        .iter()
        .find(|a| matches!(a, Advice::ReceiveBuffer { .. }))
    else {
        panic!("no buffer advice sized for the cwnd: {:?}", flow.advice);
    };
    assert_eq!(*target, "sender_cwnd");
    let advised = LabConfig {
        rcvbuf: Some(*so_rcvbuf as u32),
        ..cfg
    };
    let after = traced(&advised, 1);
    let (was, is) = (kernel_rwnd_share(&before), kernel_rwnd_share(&after));
    eprintln!("{message}\nkernel rwnd_limited: {was:.2} of busy time with SO_RCVBUF 16384 (cwnd {cwnd}), {is:.2} with {so_rcvbuf}");
    let (offered, offers) = (largest_offer(&before), largest_offer(&after));
    eprintln!("largest window {offered} -> {offers} B, {window} B advised");
    // The largest window, debug build, 7 runs: 0.88 to 1.76 of the one
    // advised (its soft cap grows with the segments received; 1.76 where
    // the window needed a larger scale, and its buffer took it). The kernel's rwnd_limited share,
    // 0.28 to 0.91 of the busy time before, 0.00 to 0.33 after on an idle
    // host, and up to 0.60 beside a VM on the 2 vCPUs: the reader, beside
    // the analysis, then left data unread and the window waited on it.
    assert!(
        f64::from(offers) >= 0.8 * *window as f64,
        "the window advised was not offered"
    );
}

/// Small writes pile up faster than a slow reader lets them go (iperf3 -N
/// -l 100 over loopback: megabytes of 100-byte writes unsent, more than the
/// analysis keeps per flow, which once dropped the oldest and read 97 % of
/// the segments `write_unseen` beside the kernel's 99 % rwnd-limited). The
/// queue must overflow here, and every check of the sweep hold.
#[test]
fn small_writes_past_the_queue_agree_with_the_kernel() {
    if !common::require_root("small_writes_past_the_queue_agree_with_the_kernel") {
        return;
    }
    let _serial = serial();
    let cfg = LabConfig {
        loopback: true,
        write_size: 100,
        nodelay: true,
        reader: Reader::Slow {
            initial_pause: Duration::from_millis(300),
            read_size: 4000,
            interval: Duration::from_millis(2),
            reads: 200,
        },
        bytes: 8 << 20,
        poll_ends_us: Some(2000),
        ..LabConfig::default()
    };
    let run = traced(&cfg, 1);
    let t = &run.transfers[0];
    let (wrong, summary) = check(&run, t);
    let merged = run.report.path_costs.evictions.writes_merged;
    let flows = &run.report.path_costs.flows;
    let unseen: u64 = flows.iter().map(|f| tx_held(f, Some("write_unseen"))).sum();
    eprintln!("{summary}  writes merged {merged}, write_unseen {unseen}");
    assert!(merged > 0, "the writes never overflowed the queue");
    assert_eq!(unseen, 0, "every write was traced");
    assert!(wrong.is_empty(), "{wrong:?}");
}

/// BIG TCP: over IPv6 on the loopback (whose GSO limit is past 64 KiB)
/// without window scaling, TCP sends skbs of two 32767-byte segments (half
/// the largest window), whose 65534 B of payload and headers pass the 65535
/// an IPv6 header can say: the kernel inserts a hop-by-hop header with a
/// jumbo option. Their window_adv is recorded, and the bytes add up.
#[test]
fn ipv6_jumbo_segments_are_recorded() {
    if !common::require_root("ipv6_jumbo_segments_are_recorded") {
        return;
    }
    let _serial = serial();
    let cfg = LabConfig {
        loopback: true,
        ipv6: true,
        window_scaling: false,
        bytes: 64 << 20,
        ..LabConfig::default()
    };
    let run = traced(&cfg, 1);
    let t = &run.transfers[0];
    eprintln!(
        "largest segment {} B; sent {:?}, kernel {}",
        run.largest_segment,
        run.report
            .sockets
            .iter()
            .find(|s| s.src == t.sender_addr.to_string())
            .map(|s| s.bytes_sent),
        t.sender.bytes_sent
    );
    // The IPv6 payload length: TCP's header, 32 B with timestamps, and data.
    assert!(
        run.largest_segment + 32 > 65535,
        "no jumbo segment recorded"
    );
    let mut wrong = Vec::new();
    bytes(&run, t, &mut wrong);
    assert!(wrong.is_empty(), "{wrong:?}");
}
