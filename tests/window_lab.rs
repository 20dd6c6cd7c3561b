//! The window analyses on real lab transfers, against the wire (tcpdump on the
//! receiver's veth) and the kernel's own accounting (`ss -ti`). Needs root.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tenge_trace::analysis::window::kernel::Rule;
use tenge_trace::analysis::window::{
    Advice, Alert, AlertKind, FlowWindowReport, WindowClass, WindowClassifier,
};
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance, Report};
use tenge_trace::collector::{Callbacks, CollectStats, Collector};
use tenge_trace::event::{tt_window_adv, Body, Event};
use tenge_trace::lab::capture::{self, WireSegment};
use tenge_trace::lab::traced::run_traced;
use tenge_trace::lab::{ss, Lab, LabConfig, Scenario, TransferReport};
use tenge_trace::probe::{Filters, Tracer, TracerOptions};
use tenge_trace::trace_file::TraceMeta;

/// One traced lab transfer at a time: the scenarios' timings should not
/// fight over two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A traced transfer and its ground truth.
struct Run {
    transfer: TransferReport,
    report: Report,
    alerts: Vec<Alert>,
    /// The receiving socket's `window_adv` events, in order.
    receiver_windows: Vec<tt_window_adv>,
    wire: Vec<WireSegment>,
    /// `ss -ti` of each end while both sockets were open.
    sender_ss: ss::SsSocket,
    receiver_ss: ss::SsSocket,
}

impl Run {
    fn receiver(&self) -> &FlowWindowReport {
        self.flow(self.transfer.receiver_addr)
    }

    fn sender(&self) -> &FlowWindowReport {
        self.flow(self.transfer.sender_addr)
    }

    fn flow(&self, local: SocketAddr) -> &FlowWindowReport {
        let local = local.to_string();
        self.report
            .flows
            .iter()
            .find(|f| f.src == local)
            .unwrap_or_else(|| panic!("no flow for {local}"))
    }

    /// The alerts of `kind` that fired (not the ends of their episodes).
    fn alerts_of(&self, kind: AlertKind) -> Vec<&Alert> {
        self.alerts
            .iter()
            .filter(|a| a.kind == kind && !a.cleared)
            .collect()
    }
}

fn pcap_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tt-window-{}-{tag}.pcap", std::process::id()))
}

/// Runs `cfg` traced, with tcpdump on the receiver's veth from before the
/// first SYN, and `ss -ti` of the sender before the sockets close.
fn traced_run(cfg: &LabConfig, tag: &str) -> Run {
    let lab = Lab::new(cfg).unwrap();
    let path = pcap_path(tag);
    // Declared after the lab: dropped (tcpdump stopped) before the namespaces go.
    let capture = lab.capture_receiver(&path).unwrap();
    let mut analysis = Analysis::new(AnalysisConfig::default());
    let mut alerts = Vec::new();
    let mut windows: Vec<(SocketAddr, tt_window_adv)> = Vec::new();
    let ends_ss = Mutex::new(None);
    let run = run_traced(
        &lab,
        cfg,
        TracerOptions::default(),
        &AtomicBool::new(false),
        |record| {
            let ev = Event::decode(record).expect("records decode");
            alerts.extend(analysis.push(&ev));
            if let (Body::WindowAdv(w), Some(src)) = (&ev.body, ev.src()) {
                windows.push((src, *w));
            }
        },
        |_| {},
        |ends| {
            let first = |netns| ss::query(netns, ends.port()).unwrap().into_iter().next();
            *ends_ss.lock().unwrap() = first(&ends.sender_netns).zip(first(&ends.receiver_netns));
        },
    )
    .unwrap();
    let stats = capture.stop().unwrap();
    assert_eq!(stats.dropped_by_kernel, 0, "tcpdump dropped packets");
    let wire = capture::read_segments(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let lost: u64 = run.stats.lost.iter().sum();
    assert_eq!(lost, 0, "events lost");
    let receiver = run.transfer.receiver_addr;
    let (sender_ss, receiver_ss) = ends_ss
        .into_inner()
        .unwrap()
        .expect("ss found both sockets");
    Run {
        report: analysis.finish(Provenance {
            kernel_release: String::new(),
            sample_every: 1,
            ..Provenance::default()
        }),
        alerts,
        receiver_windows: windows
            .into_iter()
            .filter(|(src, _)| *src == receiver)
            .map(|(_, w)| w)
            .collect(),
        wire,
        sender_ss,
        receiver_ss,
        transfer: run.transfer,
    }
}

/// The five limit shares of every socket that was busy sending data sum to
/// 1, whichever source each came from (one that sent only its ACKs and FIN
/// has none), and alerts fired and cleared in pairs at most.
fn assert_shares_partition_busy_time(run: &Run) {
    for f in &run.report.flows {
        let l = &f.limits;
        let sum = l.rwnd + l.cwnd + l.sndbuf + l.app + l.unlimited;
        let sent = run
            .report
            .sockets
            .iter()
            .find(|s| s.sock_cookie == f.sock_cookie)
            .map_or(0, |s| s.bytes_sent);
        if l.busy_ns > 0 && sent > 0 {
            assert!(
                (sum - 1.0).abs() < 1e-9,
                "{}: shares sum to {sum}: {l:?}",
                f.src
            );
        } else {
            assert_eq!(sum, 0.0, "{}: no data sent, shares {l:?}", f.src);
        }
    }
    for kind in [
        AlertKind::RwndLimited,
        AlertKind::CwndLimited,
        AlertKind::SndbufLimited,
    ] {
        let of = |cleared: bool| {
            run.alerts
                .iter()
                .filter(|a| a.kind == kind && a.cleared == cleared)
                .count()
        };
        assert!(of(true) <= of(false), "{kind:?}: more cleared than fired");
    }
}

/// Every lab flow is explained by the kernel's formulas. One window may go
/// unverified: a passive end's SYN-ACK is sent by its request socket, which
/// the probes skip, and the first ACK after it may keep that unseen offer.
fn assert_model_holds(run: &Run) {
    assert_shares_partition_busy_time(run);
    assert_eq!(run.report.model_mismatches, 0);
    for f in &run.report.flows {
        let r = &f.window.receive;
        assert!(
            r.model_mismatches == 0 && r.model_unverified <= 1,
            "{}: {} mismatches, {} unverified",
            f.src,
            r.model_mismatches,
            r.model_unverified
        );
    }
}

/// (a) The paper's case: each recorded receiver window is the one on the
/// wire, and its class agrees with what the wire shows.
#[test]
fn mss_clamp_windows_match_the_wire() {
    if !common::require_root("mss_clamp_windows_match_the_wire") {
        return;
    }
    let _serial = serial();
    // Over veth, or over two NICs in the matrix's two-NIC guest.
    let cfg = LabConfig {
        link: common::lab_link(),
        bytes: 16 << 20,
        ..Scenario::MssClamp.config()
    };
    let run = traced_run(&cfg, "mss-clamp");
    assert!(run.transfer.completed);
    assert_model_holds(&run);
    // Where the rounding took enough for an MTU to be advised (the windows
    // a run settles at vary), it counts the timestamps the segments carried.
    mtu_advice_fitting_the_link(&run);
    let receiver = run.transfer.receiver_addr;

    // The wire's windows of the receiver by (seq, ack); window updates repeat a pair.
    let mut wire: HashMap<(u32, u32), Vec<&WireSegment>> = HashMap::new();
    for s in run.wire.iter().filter(|s| s.src == receiver) {
        wire.entry((s.seq, s.ack)).or_default().push(s);
    }
    let mut classifier = WindowClassifier::default();
    let mut counts: HashMap<WindowClass, u64> = HashMap::new();
    let mut right_edge = None;
    let mut previous_rcv_wnd = None;
    for w in &run.receiver_windows {
        let twins = wire.get(&(w.seq, w.ack)).map_or(&[][..], Vec::as_slice);
        assert!(
            twins
                .iter()
                .any(|s| s.win_raw == w.win_raw && s.window() == w.window),
            "window {} at seq {} ack {} not on the wire: {:?}",
            w.window,
            w.seq,
            w.ack,
            twins.iter().map(|s| s.window()).collect::<Vec<_>>()
        );
        let edge = w.ack.wrapping_add(w.window);
        let Some(c) = classifier.classify(w) else {
            continue;
        };
        *counts.entry(c.class).or_default() += 1;
        assert_eq!(w.rcv_wscale, 0);
        match c.class {
            WindowClass::MssRounded => {
                // A multiple of rcv_mss, or the hysteresis of the rounding
                // (__tcp_select_window() keeps a previous rcv_wnd within one
                // MSS below the offerable space), which may be a residual
                // and no multiple (CI saw 23944, what was left of a 26844
                // offer after 2900 bytes, kept at a new edge).
                if c.selection.rule == Rule::KeptPrevious {
                    assert_eq!(Some(w.window), previous_rcv_wnd, "{c:?}");
                } else {
                    assert_eq!(w.window % w.rcv_mss, 0, "{c:?}");
                }
                assert_eq!(c.lost, c.free - u64::from(w.window), "{c:?}");
                // Whatever the soft cap held back, the rounding itself loses under one MSS.
                assert!(c.lost - c.above_ssthresh < u64::from(w.rcv_mss), "{c:?}");
            }
            WindowClass::SwsZero => assert_eq!(w.window, 0),
            WindowClass::Clamped65535 => assert_eq!(w.win_raw, 65535),
            WindowClass::NeverShrinkResidual => {
                assert_eq!(Some(edge), right_edge, "a residual keeps the right edge")
            }
            _ => {}
        }
        right_edge = Some(edge);
        previous_rcv_wnd = Some(w.rcv_wnd);
    }
    eprintln!("classes {counts:?}");
    let r = &run.receiver().window.receive;
    eprintln!(
        "receiver: {} windows, {} MSS-rounded, {} B lost ({} above rcv_ssthresh), mean free {:.0}, mean window {:.0}",
        r.advertised_count,
        r.mss_rounded_count,
        r.mss_rounding_bytes_lost,
        r.mss_rounding_bytes_above_ssthresh,
        r.mean_free_space,
        r.mean_advertised
    );
    assert_eq!(
        counts.get(&WindowClass::MssRounded).copied().unwrap_or(0),
        r.mss_rounded_count
    );
    assert!(
        r.mss_rounded_count * 2 > r.advertised_count,
        "most windows are MSS-rounded"
    );
    assert!(r.mss_rounding_bytes_lost > 0);
    assert!(r.rounding_loss_fraction > 0.0);
}

/// The MTU advice of both ends, each option its MSS and what the link's
/// MTU (`ss`'s pmtu) leaves beside the sender's MSS (`ss`'s mss): how many.
fn mtu_advice_fitting_the_link(run: &Run) -> usize {
    let headers = run.sender_ss.pmtu.expect("ss pmtu") - run.sender_ss.mss.expect("ss mss");
    let mut advised = 0;
    for flow in [run.sender(), run.receiver()] {
        for a in &flow.advice {
            if let Advice::Mtu { options, .. } = a {
                assert!(options.iter().all(|o| o.mtu - o.mss == headers), "{a:?}");
                advised += 1;
            }
        }
    }
    advised
}

/// (a') An MSS mismatch: the sender's MSS is 8960 (no timestamps), but
/// MSG_EOR keeps every segment to one 8948-byte write, so the receiver's
/// estimate is 8948 and its windows are rounded to 8948 multiples. SC'03's
/// compounding (26844 → 17920) needs segments of the sender's MSS, which
/// would raise the estimate to 8960: these segments fill the windows whole,
/// two of them in 17896 B, where whole segments of the MSS would say one.
/// (Which windows a run shows depends on rcv_ssthresh, as in mss-clamp;
/// every one is checked against the kernel's formulas.)
#[test]
fn mss_mismatch_windows_hold_the_segments_sent() {
    if !common::require_root("mss_mismatch_windows_hold_the_segments_sent") {
        return;
    }
    let _serial = serial();
    let run = traced_run(&Scenario::MssMismatch.config(), "mss-mismatch");
    assert!(run.transfer.completed);
    assert_model_holds(&run);
    // The kernel's own MSS values.
    assert_eq!(run.sender_ss.mss, Some(8960), "9000 - 20 - 20");
    assert_eq!(
        run.receiver_ss.rcvmss,
        Some(8948),
        "the largest segment seen"
    );
    // The wire: no segment carries more than one write.
    let sent = |s: &&WireSegment| s.src == run.transfer.sender_addr && s.len > 0;
    let largest = run.wire.iter().filter(sent).map(|s| s.len).max();
    assert_eq!(largest, Some(8948));
    let flow = run.sender();
    assert_eq!(
        (
            flow.mss.sender,
            flow.mss.receiver_estimate,
            flow.mss.mismatch_bytes
        ),
        (Some(8960), Some(8948), Some(12))
    );
    let chain = flow.window.chain.as_ref().expect("a window chain");
    eprintln!("{chain:?}");
    // The receiver's window held longest, as the wire carried it: whole
    // segments of its estimate then (8948, or 8960 before the estimate
    // settled), at most the free space (less where the soft cap
    // rcv_ssthresh cut it first), and whole segments as the wire's came.
    assert!(run
        .receiver_windows
        .iter()
        .any(|w| u64::from(w.window) == chain.advertised));
    assert_eq!(chain.shaped_by, Some(WindowClass::MssRounded));
    assert!(chain.advertised.is_multiple_of(8948) || chain.advertised.is_multiple_of(8960));
    assert!(chain.advertised <= chain.free_space, "{chain:?}");
    assert_eq!(chain.usable, chain.advertised / 8948 * 8948);
    assert_eq!(chain.compounded_loss_bytes, chain.free_space - chain.usable);
    // The wire had two writes in flight at once (data past the receiver's
    // latest ACK), more than one segment of the MSS: no window of the run
    // held fewer than two of them.
    let mut acked = None;
    let mut most_in_flight = 0;
    for s in &run.wire {
        if s.src == run.transfer.receiver_addr {
            acked = Some(s.ack);
        } else if let (Some(ack), true) = (acked, s.len > 0) {
            let ahead = s.seq.wrapping_add(s.len).wrapping_sub(ack);
            if ahead < 1 << 31 {
                most_in_flight = most_in_flight.max(ahead);
            }
        }
    }
    assert!(most_in_flight >= 2 * 8948, "{most_in_flight}");
    // Over the transfer the sender's rounding never gives back what the
    // receiver's took, but for never-shrink residuals (an earlier offer
    // kept above the free space: no loss counted, usable past it; the
    // means' free less lost 17875 B beside 17886 usable): 0.11 points in
    // one CI run.
    let r = &run.receiver().window.receive;
    assert!(
        r.compounded_loss_fraction >= r.rounding_loss_fraction - 5e-3,
        "{} vs {}",
        r.compounded_loss_fraction,
        r.rounding_loss_fraction
    );
    // No MTU: a larger MSS would not make the writes' segments larger.
    assert_eq!(mtu_advice_fitting_the_link(&run), 0);
    // TCP_NODELAY: whatever held a segment, it was not Nagle's algorithm
    // (8948 B segments under the MSS of 8960, behind others, were).
    let nagle = run
        .report
        .path_costs
        .combined
        .iter()
        .find(|p| p.path == "held_nagle");
    assert!(nagle.is_none_or(|p| p.packets == 0), "{nagle:?}");
}

/// CLOCK_MONOTONIC ns (the events' clock) of a capture timestamp (Unix seconds).
fn monotonic_ns(unix_s: f64) -> i64 {
    (unix_s * 1e9) as i64 - TraceMeta::for_this_host().boot_offset_ns
}

/// (b) A slow reader: every period in which the wire shows the receiver's
/// window at zero or below one MSS is one SWS stall, with the same start and
/// length (the definition: a stall starts when the window falls below
/// one receiver MSS, or to zero, and ends when a full MSS opens again).
#[test]
fn sws_stalls_match_zero_window_periods() {
    if !common::require_root("sws_stalls_match_zero_window_periods") {
        return;
    }
    let _serial = serial();
    let run = traced_run(&Scenario::SwsStall.config(), "sws-stall");
    assert!(run.transfer.completed);
    assert_model_holds(&run);
    let mss = run.receiver_windows.last().map_or(8948, |w| w.rcv_mss);
    let periods = capture::window_below_periods(&run.wire, run.transfer.receiver_addr, mss);
    assert!(
        !capture::zero_window_periods(&run.wire, run.transfer.receiver_addr).is_empty(),
        "the slow reader closes the window to zero"
    );
    let stalls = &run.sender().window.sws_stalls;
    for (start, end) in &periods {
        eprintln!(
            "wire zero window {:.1} ms at {}",
            (end - start) * 1e3,
            monotonic_ns(*start)
        );
    }
    for s in stalls {
        eprintln!(
            "stall {:.1} ms at {} ({:?}), {} probes, {} sub-MSS, {} B",
            s.duration_ns as f64 / 1e6,
            s.start_ns,
            s.observed_at,
            s.zero_window_probes,
            s.sub_mss_segments,
            s.bytes_delivered
        );
    }
    assert!(!periods.is_empty(), "the slow reader closes the window");
    assert_eq!(stalls.len(), periods.len());
    // Under emulation (the kernel matrix's TCG guests, TT_VM set) one vCPU
    // waits for the other's time slice between the wire and the sender.
    let tolerance_ns: i64 = if std::env::var_os("TT_VM").is_some() {
        25_000_000
    } else {
        5_000_000
    };
    for (s, (start, end)) in stalls.iter().zip(&periods) {
        let wire_start = monotonic_ns(*start);
        let wire_ns = ((end - start) * 1e9) as i64;
        assert!(
            (s.start_ns as i64 - wire_start).abs() < tolerance_ns,
            "{s:?} vs {start}"
        );
        assert!(
            (s.duration_ns as i64 - wire_ns).abs() < tolerance_ns,
            "{s:?} vs {wire_ns} ns"
        );
        assert!(s.ended);
    }
    // One alert per stall that lasted the alerts' minimum (100 ms): a slow
    // guest's reader also makes shorter ones, which are reported, not alerted.
    let min_ns = AnalysisConfig::default().window.min_duration_ns;
    let long = stalls.iter().filter(|s| s.duration_ns >= min_ns).count();
    assert_eq!(run.alerts_of(AlertKind::SwsStall).len(), long);
}

/// (c) The control: scaling, autotuning, a fast reader, pacing.
#[test]
fn healthy_flow_raises_no_window_alert() {
    if !common::require_root("healthy_flow_raises_no_window_alert") {
        return;
    }
    let _serial = serial();
    let cfg = LabConfig {
        bytes: 64 << 20,
        ..Scenario::Healthy.config()
    };
    let run = traced_run(&cfg, "healthy");
    assert!(run.transfer.completed);
    assert_model_holds(&run);
    for f in &run.report.flows {
        eprintln!(
            "{} classes {:?} alerts {:?}",
            f.src, f.window.receive.classes, f.alerts
        );
        assert!(
            f.window.sws_stalls.is_empty(),
            "{}: {:?}",
            f.src,
            f.window.sws_stalls
        );
    }
    assert!(
        run.alerts_of(AlertKind::MssClamp).is_empty(),
        "{:?}",
        run.alerts
    );
    assert!(
        run.alerts_of(AlertKind::SwsStall).is_empty(),
        "{:?}",
        run.alerts
    );
    let r = &run.receiver().window.receive;
    assert_eq!((r.mss_rounded_count, r.classes.clamped_65535), (0, 0));
}

/// (d) The receive-window-limited share of busy time is the kernel's own
/// (`tcpi_rwnd_limited / tcpi_busy_time`, as `ss -ti` prints it).
#[test]
fn rwnd_limited_fraction_matches_ss() {
    if !common::require_root("rwnd_limited_fraction_matches_ss") {
        return;
    }
    let _serial = serial();
    let cfg = LabConfig {
        bytes: 256 << 20,
        ..Scenario::RwndLimited.config()
    };
    let run = traced_run(&cfg, "rwnd-limited");
    assert!(run.transfer.completed);
    assert_model_holds(&run);
    let ss = &run.sender_ss;
    let (busy, rwnd) = (ss.busy_ms.unwrap(), ss.rwnd_limited_ms.unwrap());
    let kernel = rwnd as f64 / busy as f64;
    let limits = &run.sender().limits;
    eprintln!(
        "ss: busy {busy} ms, rwnd_limited {rwnd} ms = {kernel:.3}; traced: rwnd {:.3} ({}), kernel {:?}, per-event {:?}",
        limits.rwnd, limits.source, limits.kernel, limits.per_event
    );
    assert!(
        busy >= 200,
        "long enough for jiffies not to matter: {busy} ms"
    );
    assert!(kernel > 0.2, "the scenario is rwnd-limited: {kernel}");
    assert!(
        (limits.rwnd - kernel).abs() < 0.05,
        "{} vs {kernel}",
        limits.rwnd
    );
    assert!(!run.alerts_of(AlertKind::RwndLimited).is_empty());
}

/// Of the wire's odd windows (not a whole number of `segment`s, past the
/// handshake) the sender was held at, those it filled to the edge, and all
/// of them. Held: before the ACK that moved the edge on, its data reached
/// within a segment of the edge (`ack + window`); filled: to the edge. Data
/// captured up to `HELD_SLACK_NS` after that ACK counts (the capture is the
/// receiver's: the ACK still had to reach the sender), data beyond the edge
/// does not (sent once it had). Windows the sender was not held at (TSQ,
/// a write not yet made) are not the analysis' to count: in one run in
/// about ten they were a thousand.
fn wire_windows_filled(run: &Run, segment: u32) -> (usize, usize) {
    const HELD_SLACK_NS: u64 = 100_000;
    let (sender, receiver) = (run.transfer.sender_addr, run.transfer.receiver_addr);
    let ns = |s: &WireSegment| (s.ts * 1e9) as u64;
    let Some(isn) = run.wire.iter().find(|s| s.src == sender).map(|s| s.seq) else {
        return (0, 0);
    };
    // Sequence numbers from the sender's ISN, unwrapped (the transfer is under 4 GiB).
    let at = |seq: u32| u64::from(seq.wrapping_sub(isn));
    let data: Vec<(u64, u64)> = run
        .wire
        .iter()
        .filter(|s| s.src == sender && s.len > 0)
        .map(|s| (ns(s), at(s.seq.wrapping_add(s.len))))
        .collect();
    // Each new edge, when its ACK was captured, and whether it is odd.
    let mut edges: Vec<(u64, u64, bool)> = Vec::new();
    for s in run
        .wire
        .iter()
        .filter(|s| s.src == receiver && s.has(WireSegment::ACK) && !s.has(WireSegment::SYN))
    {
        let edge = at(s.ack.wrapping_add(s.window()));
        if edges.last().is_none_or(|&(_, last, _)| edge != last) {
            let odd = s.window() > segment && !s.window().is_multiple_of(segment);
            edges.push((ns(s), edge, odd));
        }
    }
    let (mut filled, mut held) = (0, 0);
    let mut ends = BTreeSet::new();
    let mut next_data = data.iter().peekable();
    for (i, &(_, edge, odd)) in edges.iter().enumerate() {
        let moved_on = edges
            .get(i + 1)
            .map_or(u64::MAX, |e| e.0.saturating_add(HELD_SLACK_NS));
        while let Some(&(_, end)) = next_data.next_if(|d| d.0 < moved_on) {
            ends.insert(end);
        }
        let reached = ends.range(..=edge).next_back().copied().unwrap_or(0);
        if odd && edge - reached < u64::from(segment) {
            held += 1;
            filled += usize::from(reached == edge);
        }
    }
    (filled, held)
}

/// (c') Windows that are not a whole number of the sender's segments. At
/// MTU 9000 without scaling the receiver's MSS estimate falls to 4474 (two
/// segments of that size in a row: the rests the sender sent) and its
/// windows are 22370 B; the sender sends most of them whole, 8948 + 8948 +
/// 4474, where the paper's sender would stop at 17896 (whole segments).
/// The windows the report counts filled to the edge are the wire's, its
/// share of them at least the wire's, and the usable window of its chain
/// counts the rest in that share.
#[test]
fn windows_are_filled_as_far_as_the_wire_shows() {
    if !common::require_root("windows_are_filled_as_far_as_the_wire_shows") {
        return;
    }
    let _serial = serial();
    let cfg = LabConfig {
        bytes: 128 << 20,
        mtu: 9000,
        window_scaling: false,
        ..Scenario::RwndLimited.config()
    };
    // Each run its own share (0.59 to 1.00 in 9 runs). The windows filled
    // are the wire's to 2 in 9 runs.
    let run = traced_run(&cfg, "odd-windows");
    assert!(run.transfer.completed);
    let send = run.sender().window.send.expect("the sender's windows");
    let tails = send.window_tails;
    let (filled, odd) = wire_windows_filled(&run, 8948);
    let wire_share = filled as f64 / odd as f64;
    eprintln!(
        "{tails:?} ({:.3}); the wire: {filled} of {odd} odd windows held filled ({wire_share:.3})",
        tails.sent_share()
    );
    let (counted, odd) = (tails.sent + tails.held, odd as u64);
    assert!(odd >= 100 && counted >= 100, "{odd} {tails:?}");
    assert!(tails.sent.abs_diff(filled as u64) <= 2 + odd / 100);
    // The wire cannot tell a window that held the sender from one it stopped
    // within a segment of for another reason, so its held windows are at
    // least the report's, and its share filled at most (one run in eight
    // under `make test`: 6630 held on the wire, 5576 in the report, 5207
    // and 5206 of them filled; the other runs within 0.005 of each other).
    assert!(counted <= odd + odd / 100);
    assert!(tails.sent_share() > wire_share - 0.02);
    let chain = run.sender().window.chain.expect("a window chain");
    assert_eq!(
        chain.usable,
        tails.usable(chain.advertised, 8948),
        "{chain:?}"
    );
    assert!(send.mean_usable_as_sent > send.mean_usable_whole_segments);
}

/// A handshake held back is no send limit. The listener's accept queue (a
/// backlog of 0) is full with a first connection, so the kernel drops the
/// second one's SYN and its client sends it again a second later: the
/// client waits over a second with a SYN out and no window from the peer,
/// then sends 256 KiB, too little for a limit to last an alert's 100 ms
/// (8 MiB were, under emulation in the kernel matrix). That wait read as
/// rwnd-limited (a SYN's sequence number unsent, window 0) and then
/// cwnd-limited (the SYN again, cwnd 1), with an alert; the kernel's chrono
/// counts none of it busy.
#[test]
fn a_handshake_held_back_is_no_send_limit() {
    if !common::require_root("a_handshake_held_back_is_no_send_limit") {
        return;
    }
    let _serial = serial();
    let cfg = LabConfig::default();
    let lab = Lab::new(&cfg).unwrap();
    let listen = SocketAddr::from((lab.receiver_ip(), 5201));
    let mut tracer = Tracer::start(&TracerOptions {
        filters: Filters {
            addr: Some(lab.receiver_ip().into()),
            ..Filters::default()
        },
        ..TracerOptions::default()
    })
    .unwrap();
    let mut analysis = Analysis::new(AnalysisConfig::default());
    let mut alerts = Vec::new();
    let stop = AtomicBool::new(false);
    let (handshake, stats) = std::thread::scope(|s| {
        let listener = lab
            .receiver_netns()
            .run(|| {
                let l = TcpListener::bind(listen)?;
                // SAFETY: listen(2) on a socket this owns; it resets the backlog.
                assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
                Ok(l)
            })
            .unwrap();
        let server = s.spawn(move || {
            std::thread::sleep(Duration::from_millis(800));
            for _ in 0..2 {
                let (mut c, _) = listener.accept().unwrap();
                std::thread::spawn(move || std::io::copy(&mut c, &mut std::io::sink()));
            }
        });
        let client = lab.sender_netns().spawn_scoped(s, || {
            let _stop = common::SetOnDrop(&stop);
            let _filler = TcpStream::connect(listen)?;
            std::thread::sleep(Duration::from_millis(100));
            let start = Instant::now();
            let mut c = TcpStream::connect(listen)?;
            let handshake = start.elapsed();
            c.write_all(&vec![7u8; 256 << 10])?;
            drop(c);
            std::thread::sleep(Duration::from_millis(200));
            Ok(handshake)
        });
        let mut sink = Callbacks(
            |record: &[u8]| alerts.extend(analysis.push(&Event::decode(record).unwrap())),
            |_: &CollectStats| {},
        );
        let stats = Collector::new().run(&mut tracer, &stop, None, &mut sink);
        server.join().unwrap();
        (client.join().unwrap().unwrap(), stats.unwrap())
    });
    assert_eq!(stats.lost_total(), 0);
    assert!(handshake >= Duration::from_millis(900), "{handshake:?}");
    let report = analysis.finish(Provenance::default());
    let clients: Vec<_> = report
        .flows
        .iter()
        .filter(|f| f.dst == listen.to_string())
        .collect();
    assert_eq!(clients.len(), 2, "{:?}", report.flows);
    for f in clients {
        let l = &f.limits;
        eprintln!("{}: busy {} ns, {l:?}", f.src, l.busy_ns);
        assert!(
            l.busy_ns < handshake.as_nanos() as u64 / 2,
            "{}: busy {} ns beside a handshake of {handshake:?}",
            f.src,
            l.busy_ns
        );
        assert!(f.alerts.is_empty(), "{}: {:?}", f.src, f.alerts);
    }
    assert!(alerts.iter().all(|a| a.cleared), "{alerts:?}");
}
