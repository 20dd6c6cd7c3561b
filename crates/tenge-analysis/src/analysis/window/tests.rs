//! The analyzer over hand-built event streams.

use super::*;
use crate::event::{
    abi_addr, tcp_flags, tt_app_read, tt_copy_datagram, tt_hdr, tt_sendmsg, tt_tcp_rcv,
    tt_window_adv,
};

const MS: u64 = 1_000_000;

/// One socket: its cookie, namespace and ends (local first).
#[derive(Clone, Copy)]
struct Sock {
    cookie: u64,
    netns: u32,
    local: &'static str,
    remote: &'static str,
}

const SENDER: Sock = Sock {
    cookie: 1,
    netns: 1,
    local: "10.0.0.1:5000",
    remote: "10.0.0.2:80",
};
const RECEIVER: Sock = Sock {
    cookie: 2,
    netns: 2,
    local: "10.0.0.2:80",
    remote: "10.0.0.1:5000",
};

impl Sock {
    fn hdr(&self, ts_ns: u64) -> tt_hdr {
        let (local, remote): (SocketAddr, SocketAddr) =
            (self.local.parse().unwrap(), self.remote.parse().unwrap());
        let (family, saddr) = abi_addr(local.ip());
        let (_, daddr) = abi_addr(remote.ip());
        tt_hdr {
            ts_ns,
            sock_cookie: self.cookie,
            saddr,
            daddr,
            sport: local.port(),
            dport: remote.port(),
            family,
            netns: self.netns,
            ..Default::default()
        }
    }

    fn adv(&self, ts_ns: u64, w: tt_window_adv) -> Event {
        Event::new(self.hdr(ts_ns), Body::WindowAdv(w))
    }

    fn rcv(&self, ts_ns: u64, r: tt_tcp_rcv) -> Event {
        Event::new(self.hdr(ts_ns), Body::TcpRcv(r))
    }

    fn write(&self, ts_ns: u64, w: tt_sendmsg) -> Event {
        Event::new(self.hdr(ts_ns), Body::Sendmsg(w))
    }
}

/// The paper's receiver: ratio 128, rcvbuf 131072 (allowed = full = 65536),
/// free = (131072 − rmem) / 2, rcv_mss 8948, no window scaling. Each offer is
/// used up before the next (rcv_nxt advances by the previous `rcv_wnd`).
fn paper_adv(rmem: u32, rcv_nxt: u32, rcv_wnd: u32) -> tt_window_adv {
    tt_window_adv {
        tcp_flags: tcp_flags::ACK,
        sk_rcvbuf: 131072,
        sk_rmem_alloc: rmem,
        scaling_ratio: 128,
        window_clamp: 65536,
        rcv_ssthresh: 65536,
        rcv_mss: 8948,
        advmss: 8960,
        rcv_nxt,
        rcv_wup: rcv_nxt,
        rcv_wnd,
        window: rcv_wnd.min(65535),
        win_raw: rcv_wnd.min(65535) as u16,
        ..Default::default()
    }
}

/// An ACK at the sender (MSS 8948, cwnd 100): `snd_una..snd_nxt` in flight,
/// data up to `write_seq` written, the ACK acknowledges up to `ack` and offers `window`.
fn ack(snd_una: u32, ack: u32, snd_nxt: u32, write_seq: u32, window: u16) -> tt_tcp_rcv {
    tt_tcp_rcv {
        tcp_flags: tcp_flags::ACK,
        ack,
        snd_una,
        snd_nxt,
        write_seq,
        win_raw: window,
        snd_wnd: u32::from(window),
        snd_cwnd: 100,
        mss_cache: 8948,
        packets_out: 1,
        srtt_us: 1000,
        sk_sndbuf: 1 << 20,
        ..Default::default()
    }
}

/// A segment leaving the sender.
fn sent(seq: u32, len: u32, snd_una: u32, probes_out: u8) -> tt_window_adv {
    tt_window_adv {
        tcp_flags: tcp_flags::ACK,
        seq,
        len,
        gso_segs: 1,
        snd_una,
        snd_nxt: seq + len,
        mss_cache: 8948,
        write_seq: 100000,
        icsk_probes_out: probes_out,
        ..Default::default()
    }
}

/// The alerts that fired (not the ends of their episodes), by ms and kind.
fn kinds(alerts: &[Alert]) -> Vec<(u64, &'static str)> {
    alerts
        .iter()
        .filter(|a| !a.cleared)
        .map(|a| (a.ts_ns / MS, a.kind.name()))
        .collect()
}

/// The ends of episodes, by ms and kind.
fn cleared(alerts: &[Alert]) -> Vec<(u64, &'static str)> {
    alerts
        .iter()
        .filter(|a| a.cleared)
        .map(|a| (a.ts_ns / MS, a.kind.name()))
        .collect()
}

fn run(cfg: WindowConfig, events: &[Event]) -> (Vec<Alert>, WindowReport) {
    let mut a = WindowAnalyzer::new(cfg);
    let mut alerts = Vec::new();
    for ev in events {
        alerts.extend(a.push(ev));
    }
    (alerts, a.finish(7))
}

#[test]
fn sws_stall_episodes_exact() {
    let s = &SENDER;
    let events = [
        // 9000 B acked, window 8948 = one MSS: no stall.
        s.rcv(0, ack(1000, 10000, 19000, 100000, 8948)),
        // Window 0 with 81000 B unsent: the stall starts at 10 ms.
        s.rcv(10 * MS, ack(10000, 19000, 19000, 100000, 0)),
        // Persist probe: len 0 at snd_una − 1.
        s.adv(230 * MS, sent(18999, 0, 19000, 0)),
        s.rcv(231 * MS, ack(19000, 19000, 19000, 100000, 0)),
        s.adv(670 * MS, sent(18999, 0, 19000, 1)),
        // 832 B window (a never-shrink residual): still below one MSS.
        s.rcv(671 * MS, ack(19000, 19000, 19000, 100000, 832)),
        // tcp_write_wakeup sends an 832-B PSH segment: sub-MSS.
        s.adv(900 * MS, sent(19000, 832, 19000, 2)),
        // Its ACK opens 8948: the stall ends at 901 ms with 832 B delivered.
        s.rcv(901 * MS, ack(19000, 19832, 19832, 100000, 8948)),
        // A second stall from 1000 to 1200 ms, with no event in between.
        s.rcv(1000 * MS, ack(19832, 28780, 28780, 100000, 0)),
        s.rcv(1200 * MS, ack(28780, 28780, 28780, 100000, 17896)),
    ];
    let (alerts, report) = run(WindowConfig::default(), &events);
    // One alert per stall: the first when an event finds it ≥ 100 ms old (230 ms),
    // the second at its end (nothing happened during it). The stalled sender is
    // also rwnd-limited: one alert at the first ACK past 100 ms of history.
    assert_eq!(
        kinds(&alerts),
        [
            (230, "sws_stall"),
            (231, "rwnd_limited"),
            (1200, "sws_stall")
        ]
    );
    // A shut window caps nothing a rate can say: no "caps at 0 b/s".
    let rwnd = alerts
        .iter()
        .find(|a| a.kind.name() == "rwnd_limited")
        .unwrap();
    assert!(
        rwnd.message.contains("peer window 0 B, shut (zero window)")
            && !rwnd.message.contains("caps at"),
        "{}",
        rwnd.message
    );
    // The first stall, alerted while it ran, is cleared at its end with what
    // it cost in all; the second was alerted at its end, so nothing to clear.
    // The rwnd_limited share fell below half its threshold at 1200 ms, the
    // last event: no later one finds it there 100 ms on, and it stays.
    assert_eq!(cleared(&alerts), [(901, "sws_stall")]);
    let end = alerts.iter().find(|a| a.cleared).unwrap();
    assert!(
        end.message.contains(
            "ended: window below one MSS (8948 B) for 891.0 ms: 2 zero-window probes, \
             1 sub-MSS segments, 832 B delivered"
        ),
        "{}",
        end.message
    );
    let stalls = &report.flows[0].window.sws_stalls;
    assert_eq!(stalls.len(), 2);
    let first = &stalls[0];
    assert_eq!(
        (first.start_ns, first.end_ns, first.duration_ns),
        (10 * MS, 901 * MS, 891 * MS)
    );
    // Probes: 2 by sequence number; probes_out went 0 → 1 → 2, also 2.
    assert_eq!(
        (
            first.zero_window_probes,
            first.sub_mss_segments,
            first.bytes_delivered
        ),
        (2, 1, 832)
    );
    assert_eq!(
        (
            first.mss,
            first.window_at_start,
            first.ended,
            first.observed_at
        ),
        (8948, 0, true, StallSide::Sender)
    );
    assert_eq!(
        (
            stalls[1].start_ns,
            stalls[1].end_ns,
            stalls[1].zero_window_probes
        ),
        (1000 * MS, 1200 * MS, 0)
    );
    assert_eq!(report.events_lost, 7);
}

/// The paper's receiver alone, every 100 ms a zero window (its offer used
/// up, too little free) held `stall_us`, then the full 26844 B again.
fn receiver_stalling(stall_us: u64) -> FlowWindowReport {
    let r = &RECEIVER;
    let mut events = Vec::new();
    let mut rcv_nxt = 1000u32;
    for k in 0..10u64 {
        let t = k * 100 * MS;
        events.push(r.adv(t, paper_adv(77384, rcv_nxt, 26844)));
        rcv_nxt += 26844;
        events.push(r.adv(t + 10 * MS, paper_adv(120000, rcv_nxt, 0)));
        events.push(r.adv(
            t + 10 * MS + stall_us * 1000,
            paper_adv(77384, rcv_nxt, 26844),
        ));
    }
    let (_, report) = run(WindowConfig::default(), &events);
    report.flows.into_iter().next().unwrap()
}

#[test]
fn only_stalls_that_cost_time_call_for_a_buffer() {
    // 45 µs in each 100 ms (a loopback's 64 KiB MSS did that): no advice.
    let brief = receiver_stalling(45);
    assert_eq!(brief.window.sws_stalls.len(), 10);
    assert!(brief.advice.is_empty(), "{:?}", brief.advice);
    // 30 ms in each 100 ms, none long enough to alert: a third of the time
    // (the data left unread makes it the reader's advice).
    let costly = receiver_stalling(30_000);
    assert!(costly.alerts.is_empty(), "{:?}", costly.alerts);
    assert_eq!(advice_kinds(&costly), ["reader"]);
}

#[test]
fn stall_open_at_the_end_of_the_trace() {
    let s = &SENDER;
    let events = [
        s.rcv(0, ack(0, 0, 8948, 50000, 0)),
        s.adv(50 * MS, sent(8947, 0, 8948, 0)),
    ];
    let (alerts, report) = run(WindowConfig::default(), &events);
    assert!(alerts.is_empty()); // 50 ms < 100 ms
    let stall = &report.flows[0].window.sws_stalls[0];
    assert_eq!(
        (
            stall.start_ns,
            stall.end_ns,
            stall.ended,
            stall.zero_window_probes
        ),
        (0, 50 * MS, false, 1)
    );
}

/// A zero window whose probes back off sends no event for seconds: the
/// stall alerts when time, told by `tick`, finds it 100 ms old, once.
#[test]
fn a_stall_alerts_when_time_finds_it_old_enough() {
    let s = &SENDER;
    let mut a = WindowAnalyzer::new(WindowConfig::default());
    let mut alerts: Vec<Alert> = a
        .push(&s.rcv(10 * MS, ack(10000, 19000, 19000, 100000, 0)))
        .collect();
    for now in [60, 109, 115, 300] {
        alerts.extend(a.tick(now * MS));
    }
    alerts.extend(a.push(&s.rcv(1200 * MS, ack(19000, 19000, 19000, 100000, 17896))));
    alerts.extend(a.tick(1300 * MS));
    assert_eq!(kinds(&alerts), [(115, "sws_stall")]);
    assert_eq!(cleared(&alerts), [(1200, "sws_stall")]);
    assert!(
        alerts[0].message.contains("for 105.0 ms so far"),
        "{}",
        alerts[0].message
    );
    let stalls = &a.finish(7).flows[0].window.sws_stalls;
    assert_eq!((stalls[0].start_ns, stalls[0].end_ns), (10 * MS, 1200 * MS));
}

/// A replay knows the time only from the recording's events: the stall
/// alerts when it fell due (100 ms in), as a watched run's would, not at
/// the socket's next event (a probe, 300 ms in).
#[test]
fn a_replay_alerts_a_stall_when_it_fell_due() {
    let s = &SENDER;
    let mut a = WindowAnalyzer::new(WindowConfig::default());
    a.push(&s.rcv(10 * MS, ack(10000, 19000, 19000, 100000, 0)))
        .for_each(drop);
    a.tick_each_due(50 * MS);
    a.tick_each_due(250 * MS);
    a.push(&s.adv(300 * MS, sent(18999, 0, 19000, 0)))
        .for_each(drop);
    let report = a.finish(7);
    let alerts = &report.flows[0].alerts;
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(alerts[0].ts_ns, 110 * MS);
    assert!(
        alerts[0]
            .message
            .contains("for 100.0 ms so far: 0 zero-window probes"),
        "{}",
        alerts[0].message
    );
}

/// A pause's edge (`struct tt_pause`) at `ts_ns`.
fn pause_edge(ts_ns: u64, edge: crate::abi::tt_pause_edge) -> Event {
    let hdr = tt_hdr {
        ts_ns,
        variant: edge as u8,
        ..Default::default()
    };
    Event::new(hdr, Body::Pause(crate::abi::tt_pause { edge_ns: ts_ns }))
}

/// Sampled by time: a stall open when a pause begins ends there, unseen
/// (`ended` false, at the socket's last event), and is not stretched over
/// the pause; the events of the pause's edges are skipped; the time of the
/// pause is charged to no limit, and the next stall is a new one.
#[test]
fn a_pause_cuts_a_stall_and_is_charged_to_no_limit() {
    use crate::abi::tt_pause_edge::{TT_PAUSE_BEGIN, TT_PAUSE_END};
    let s = &SENDER;
    let events = [
        s.rcv(0, ack(0, 0, 8948, 50000, 8948)),
        // Window 0 with data waiting: a stall from 10 ms.
        s.rcv(10 * MS, ack(0, 8948, 8948, 50000, 0)),
        s.rcv(40 * MS, ack(8948, 8948, 8948, 50000, 0)),
        pause_edge(50 * MS, TT_PAUSE_BEGIN),
        // Of a probe still there as the others left: skipped.
        s.rcv(51 * MS, ack(8948, 8948, 8948, 50000, 8948)),
        s.rcv(990 * MS, ack(8948, 8948, 8948, 50000, 0)),
        pause_edge(1000 * MS, TT_PAUSE_END),
        // Still closed after the pause: a stall of its own from here.
        s.rcv(1010 * MS, ack(8948, 8948, 8948, 50000, 0)),
        s.rcv(1030 * MS, ack(8948, 17896, 17896, 50000, 8948)),
    ];
    let (_, report) = run(WindowConfig::default(), &events);
    let flow = &report.flows[0];
    let spans: Vec<_> = flow
        .window
        .sws_stalls
        .iter()
        .map(|s| (s.start_ns / MS, s.end_ns / MS, s.ended))
        .collect();
    assert_eq!(spans, [(10, 40, false), (1010, 1030, true)]);
    // Busy: 40 ms before the pause, 20 ms after; the 960 ms between are no one's.
    assert_eq!(flow.limits.busy_ns + flow.limits.idle_ns, 60 * MS);
}

/// Sampled by time: a window is held until the pause, not over it. Held
/// over the 990 ms untraced, 26844 B would be the window held longest and
/// weigh 50 times the next one in the means.
#[test]
fn a_pause_holds_no_window() {
    use crate::abi::tt_pause_edge::{TT_PAUSE_BEGIN, TT_PAUSE_END};
    let r = &RECEIVER;
    let events = [
        r.adv(0, paper_adv(65072, 1000, 26844)),
        pause_edge(10 * MS, TT_PAUSE_BEGIN),
        pause_edge(1000 * MS, TT_PAUSE_END),
        r.adv(1000 * MS, paper_adv(74020, 2000, 17896)),
        r.adv(1020 * MS, paper_adv(74020, 2000, 17896)),
    ];
    let (_, report) = run(WindowConfig::default(), &events);
    let receive = &report.flows[0].window.receive;
    let longest = receive.longest_held.unwrap();
    assert_eq!((longest.advertised, longest.held_ns), (17896, 20 * MS));
    let mean = (26844.0 * 10.0 + 17896.0 * 20.0) / 30.0;
    assert!(
        (receive.mean_advertised - mean).abs() < 1e-6,
        "{}",
        receive.mean_advertised
    );
}

#[test]
fn receiver_only_stall_counts_incoming_probes() {
    let r = &RECEIVER;
    // free 2464 < rcv_mss (measured receiver, see receiver.rs): window 0 at 0 ms.
    let zero = tt_window_adv {
        tcp_flags: tcp_flags::ACK,
        sk_rcvbuf: 131072,
        sk_rmem_alloc: 128376,
        scaling_ratio: 234,
        window_clamp: 119808,
        rcv_ssthresh: 119808,
        rcv_mss: 8948,
        rcv_nxt: 5000,
        rcv_wup: 5000,
        ..Default::default()
    };
    // Reads free 27001 → 26844 at 300 ms.
    let open = tt_window_adv {
        sk_rmem_alloc: 101532,
        rcv_wnd: 26844,
        window: 26844,
        ..zero
    };
    let probe = tt_tcp_rcv {
        tcp_flags: tcp_flags::ACK,
        seq: 4999,
        rcv_nxt: 5000,
        rcv_mss: 8948,
        ..Default::default()
    };
    let events = [
        r.adv(0, zero),
        r.rcv(200 * MS, probe),
        r.adv(300 * MS, open),
    ];
    let (alerts, report) = run(WindowConfig::default(), &events);
    assert_eq!(kinds(&alerts), [(200, "sws_stall")]);
    let flow = &report.flows[0];
    let stall = &flow.window.sws_stalls[0];
    assert_eq!(
        (stall.start_ns, stall.end_ns, stall.zero_window_probes),
        (0, 300 * MS, 1)
    );
    assert_eq!(stall.observed_at, StallSide::Receiver);
    assert_eq!(
        (
            flow.window.receive.classes.sws_zero,
            flow.window.receive.classes.mss_rounded
        ),
        (1, 1)
    );
    assert_eq!(flow.window.receive.model_mismatches, 0);
}

/// A sender ACK whose pre-ACK state is limited by `limit`.
fn limited(limit: &str) -> tt_tcp_rcv {
    let base = tt_tcp_rcv {
        tcp_flags: tcp_flags::ACK,
        snd_una: 0,
        ack: 0,
        snd_nxt: 10000,
        write_seq: 50000,
        snd_wnd: 65535,
        win_raw: 65535,
        snd_cwnd: 10,
        mss_cache: 1000,
        packets_out: 5,
        srtt_us: 100,
        sk_sndbuf: 1 << 20,
        ..Default::default()
    };
    match limit {
        // 0 + 10000 − 10000 = 0 < mss with 40000 B unsent.
        "rwnd" => tt_tcp_rcv {
            snd_wnd: 10000,
            ..base
        },
        "cwnd" => tt_tcp_rcv {
            packets_out: 10,
            ..base
        },
        "app" => tt_tcp_rcv {
            write_seq: 10000,
            ..base
        },
        "idle" => tt_tcp_rcv {
            snd_una: 10000,
            write_seq: 10000,
            ..base
        },
        // All written is sent, and the send buffer is full.
        "sndbuf" => tt_tcp_rcv {
            write_seq: 10000,
            sk_wmem_queued: 1 << 20,
            ..base
        },
        _ => unreachable!(),
    }
}

/// `ev` after `ms` milliseconds of 100 MB/s acknowledged: every sequence
/// number moved on by as much.
fn progressed(ev: tt_tcp_rcv, ms: u32) -> tt_tcp_rcv {
    let by = ms * 100_000;
    tt_tcp_rcv {
        snd_una: ev.snd_una.wrapping_add(by),
        ack: ev.ack.wrapping_add(by),
        snd_nxt: ev.snd_nxt.wrapping_add(by),
        write_seq: ev.write_seq.wrapping_add(by),
        ..ev
    }
}

#[test]
fn limit_fractions_and_hysteresis() {
    let s = &SENDER;
    // Kernel chrono at the last event: busy 290 + rwnd 110 jiffies = 400, rwnd 27.5 %.
    let last = tt_tcp_rcv {
        chrono_stat: [290, 110, 0],
        jiffies: 700,
        ..limited("rwnd")
    };
    // The limits bind: 100 MB acknowledged a second against the 800 Mb/s
    // that 10000 B of window allow at srtt 100 µs.
    let events = [
        s.rcv(0, limited("app")),
        s.rcv(100 * MS, progressed(limited("rwnd"), 100)), // (0, 100]: rwnd
        s.rcv(150 * MS, progressed(limited("cwnd"), 150)), // (100, 150]: cwnd
        s.rcv(400 * MS, progressed(limited("app"), 400)),  // (150, 400]: app
        s.rcv(500 * MS, progressed(limited("idle"), 500)), // (400, 500]: idle
        s.rcv(700 * MS, progressed(last, 700)),            // (500, 700]: rwnd again
    ];
    let (alerts, report) = run(WindowConfig::default(), &events);
    // rwnd 100 % of the first 100 ms; cwnd 50/150 = 33 % ≥ 20 %; by 400 ms the
    // last 200 ms are all app time, both episodes end; at 700 ms rwnd returns.
    assert_eq!(
        kinds(&alerts),
        [
            (100, "rwnd_limited"),
            (150, "cwnd_limited"),
            (700, "rwnd_limited")
        ]
    );
    // Each episode ends once, at the first event 100 ms (min_duration_ns)
    // after its share fell below half the threshold: at 400 ms the last
    // 200 ms were app time, at 500 still none of either.
    assert_eq!(
        cleared(&alerts),
        [(500, "rwnd_limited"), (500, "cwnd_limited")]
    );
    let l = &report.flows[0].limits;
    // Busy 600 ms: rwnd 300, cwnd 50, app 250; idle 100.
    assert_eq!((l.busy_ns, l.idle_ns), (600 * MS, 100 * MS));
    assert_eq!(
        (l.per_event.rwnd, l.per_event.cwnd, l.per_event.app),
        (0.5, 50.0 / 600.0, 250.0 / 600.0)
    );
    // The kernel's figure is the one reported: 110 / 400.
    assert_eq!((l.rwnd, l.source), (110.0 / 400.0, "kernel_chrono"));
    assert_eq!(l.kernel.unwrap().busy_jiffies, 400);
}

/// A writer blocked on its send buffer all along (every ACK finds the
/// buffer full), whose kernel chrono clocks only bursts of it: 64 ms in
/// each 400 (as SO_SNDBUF 16 KiB over the loopback did, the events 100%
/// and the kernel 0-30% of each 200 ms). One episode, not one per burst.
#[test]
fn a_limit_the_events_see_throughout_is_one_episode() {
    let s = &SENDER;
    let (mut busy, mut sndbuf) = (0u32, 0u32);
    let mut events = Vec::new();
    // An ACK every 8 ms (2 jiffies at HZ 250) for 2 s.
    for step in 0..250u32 {
        match step % 50 < 8 {
            true => sndbuf += 2,
            false => busy += 2,
        }
        let ev = tt_tcp_rcv {
            chrono_stat: [busy, 0, sndbuf],
            jiffies: 2 * step,
            ..progressed(limited("sndbuf"), 8 * step)
        };
        events.push(s.rcv(u64::from(8 * step) * MS, ev));
    }
    let (alerts, _) = run(WindowConfig::default(), &events);
    assert_eq!(kinds(&alerts), [(104, "sndbuf_limited")], "{alerts:#?}");
    assert_eq!(cleared(&alerts), []);
}

/// A sender the events see held by nothing but its writes, whose kernel
/// chrono shows 2 jiffies of rwnd_limited in 10 busy over 200 ms: "20%",
/// but whole jiffies may overstate it by one (the sweep's polls over such
/// a window: 1 of 11). No alert.
#[test]
fn a_few_jiffies_make_no_kernel_share() {
    let s = &SENDER;
    let (mut busy, mut rwnd) = (0u32, 0u32);
    let mut events = Vec::new();
    for step in 0..60u32 {
        busy += u32::from(step % 3 == 0);
        rwnd += if step == 40 { 2 } else { 0 };
        let ev = tt_tcp_rcv {
            chrono_stat: [busy, rwnd, 0],
            jiffies: 2 * step,
            ..progressed(limited("app"), 8 * step)
        };
        events.push(s.rcv(u64::from(8 * step) * MS, ev));
    }
    let (alerts, _) = run(WindowConfig::default(), &events);
    assert_eq!(kinds(&alerts), [], "{alerts:#?}");
}

/// An ACK of all 10 segments in flight (cwnd 10 before it), then writes
/// into the open window, whose segments leave 35 ms later, and their ACK
/// 40 ms after that (a sws-stall transfer at MTU 4000, IPv6): the writes
/// find none out of cwnd 20, so the congestion window held nothing back
/// (the ACK's pre-ACK flight read as 35 ms cwnd-limited, and alerted).
#[test]
fn a_write_after_an_ack_brings_its_own_flight() {
    let s = &SENDER;
    let mss = 3928;
    let ack_all = tt_tcp_rcv {
        tcp_flags: tcp_flags::ACK,
        ack: 10 * mss,
        win_raw: 65535,
        snd_nxt: 10 * mss,
        write_seq: 10 * mss,
        snd_wnd: 65535,
        snd_cwnd: 10,
        mss_cache: mss,
        packets_out: 10,
        srtt_us: 100,
        sk_sndbuf: 1 << 20,
        ..Default::default()
    };
    let write = |write_seq| tt_sendmsg {
        write_seq,
        snd_una: 10 * mss,
        snd_nxt: 10 * mss,
        sk_wmem_queued: write_seq - 10 * mss,
        sk_sndbuf: 1 << 20,
        snd_cwnd: 20,
        snd_wnd: 65535,
        mss_cache: mss,
        packets_out: 0,
        ..Default::default()
    };
    let sent = tt_window_adv {
        tcp_flags: tcp_flags::ACK,
        snd_una: 10 * mss,
        snd_nxt: 10 * mss + 65535,
        write_seq: 100 * mss,
        snd_wnd: 65535,
        snd_cwnd: 20,
        mss_cache: mss,
        packets_out: 17,
        ..Default::default()
    };
    let held = tt_tcp_rcv {
        ack: 10 * mss + 65535,
        snd_una: 10 * mss,
        snd_nxt: 10 * mss + 65535,
        write_seq: 100 * mss,
        snd_cwnd: 20,
        packets_out: 17,
        ..ack_all
    };
    let events = [
        s.rcv(0, ack_all),
        s.write(MS / 100, write(50 * mss)),
        s.write(MS / 50, write(100 * mss)),
        s.adv(35 * MS, sent),
        s.rcv(75 * MS, held),
    ];
    let (alerts, report) = run(WindowConfig::default(), &events);
    let l = &report.flows[0].limits.per_event;
    assert!(l.cwnd < 0.01, "{l:?}");
    // The 35 ms: data unsent, both windows open (pacing, TSO deferral).
    assert!((l.unlimited - 35.0 / 75.0).abs() < 0.01, "{l:?}");
    assert_eq!(kinds(&alerts), [], "{alerts:#?}");
}

/// A receiver sends ACKs and, at the close, its FIN, which is all its busy
/// time (the kernel clocks under a millisecond: ss says busy "-"): it has
/// no shares, where it had "other 100%". Its peer, busy with data, has.
#[test]
fn a_socket_that_sent_only_its_fin_has_no_limit_shares() {
    let r = &RECEIVER;
    let fin = tt_window_adv {
        tcp_flags: tcp_flags::ACK | tcp_flags::FIN,
        snd_nxt: 1001,
        write_seq: 1001,
        snd_wnd: 65535,
        snd_cwnd: 10,
        packets_out: 1,
        ..sent(1000, 0, 1000, 0)
    };
    let fin = r.adv(MS, fin);
    let acked = r.rcv(MS + 50_000, ack(1000, 1001, 1001, 1001, 65535));
    let events = [fin, acked];
    let (_, report) = run(WindowConfig::default(), &events);
    let limits = &report.flows[0].limits;
    assert_eq!(limits.busy_ns, 50_000);
    assert!(!limits.has_shares(), "{limits:?}");
    assert_eq!(limits.shares(), LimitFractions::default());
}

/// A writer the events see blocked on a 16 KiB send buffer throughout (at
/// srtt 100 µs it allows 1.3 Gb/s, 800 Mb/s are acknowledged: it binds),
/// an ACK every 8 ms for 1 s, whose kernel chrono clocked 1 busy jiffy in 3
/// ACKs, none sndbuf-limited: 8 in 200 ms, too few to decide (the sweep's
/// other case 09: the events said 23%, the kernel 0). The events' sndbuf is
/// not the kernel's, so they start no episode alone; with the kernel's
/// share clocked, `a_limit_the_events_see_throughout_is_one_episode` fires.
#[test]
fn a_few_busy_jiffies_leave_sndbuf_to_the_kernel() {
    let events: Vec<Event> = (0..125u32)
        .map(|step| {
            let ev = tt_tcp_rcv {
                sk_sndbuf: 16 << 10,
                sk_wmem_queued: 16 << 10,
                chrono_stat: [step / 3, 0, 0],
                jiffies: 2 * step,
                ..progressed(limited("sndbuf"), 8 * step)
            };
            SENDER.rcv(u64::from(8 * step) * MS, ev)
        })
        .collect();
    let (alerts, report) = run(WindowConfig::default(), &events);
    assert_eq!(kinds(&alerts), [], "{alerts:#?}");
    // The report's share still takes the events' (see `sndbuf_share`).
    assert_eq!(report.flows[0].limits.sndbuf, 1.0);
}

/// A sender the events see held by the peer's window throughout (10000 B
/// at srtt 100 µs allow 800 Mb/s, 100 MB/s are acknowledged: it binds), an
/// ACK every 8 ms whose chrono clocks 8 busy jiffies in 200 ms: too few for
/// a kernel share. Where none of them was rwnd_limited the sender waited
/// under about a jiffy, and no episode starts on the events alone (the
/// sweep's other 08 with seed 33: the events said 21%, the kernel and the
/// tcp_info polls no wait); where the chrono counted rwnd jiffies, the
/// events' share stands.
fn rwnd_alerts_with_rwnd_jiffies(rwnd_every: u32) -> Vec<(u64, &'static str)> {
    let events: Vec<Event> = (0..125u32)
        .map(|step| {
            let busy = step / 3;
            let ev = tt_tcp_rcv {
                chrono_stat: [busy, busy / rwnd_every, 0],
                jiffies: 2 * step,
                ..progressed(limited("rwnd"), 8 * step)
            };
            SENDER.rcv(u64::from(8 * step) * MS, ev)
        })
        .collect();
    let (alerts, _) = run(WindowConfig::default(), &events);
    kinds(&alerts)
        .into_iter()
        .filter(|&(_, kind)| kind == "rwnd_limited")
        .collect()
}

#[test]
fn a_few_busy_jiffies_none_rwnd_start_no_rwnd_episode() {
    assert_eq!(rwnd_alerts_with_rwnd_jiffies(u32::MAX), []);
    assert_eq!(rwnd_alerts_with_rwnd_jiffies(2).len(), 1);
}

/// 400 lossy windows (free 33000 → 26844, 18.65 %), one per ms, each
/// taking in 26844 B (215 Mb/s), at a receiver whose own srtt is `srtt_us`.
fn lossy_receiver(srtt_us: u32) -> Vec<Event> {
    let r = &RECEIVER;
    let mut events = vec![r.rcv(
        0,
        tt_tcp_rcv {
            srtt_us,
            ..ack(0, 0, 0, 0, 65535)
        },
    )];
    let mut rcv_nxt = 1000u32;
    for i in 0..400u64 {
        events.push(r.adv(i * MS, paper_adv(65072, rcv_nxt, 26844)));
        rcv_nxt += 26844;
    }
    events
}

/// Its windows lose 18.65 %: flagged at a threshold of 15 %.
fn lossy_cfg() -> WindowConfig {
    WindowConfig {
        threshold_pct: 15.0,
        ..Default::default()
    }
}

fn lossy_receiver_at_srtt(srtt_us: u32) -> Vec<Alert> {
    run(lossy_cfg(), &lossy_receiver(srtt_us)).0
}

/// The connection's throughput ceiling is its traced sender's, from its
/// ACKs: the receiver, whose srtt is the sender's latest, gives none once
/// the sender is traced (mss-mismatch: 2.02 Gb/s at srtt 71 µs beside the
/// sender's 3.83 at its ACKs' 37 µs).
#[test]
fn a_traced_sender_alone_gives_the_ceiling() {
    let ceiling = |events: &[Event]| {
        let (_, report) = run(lossy_cfg(), events);
        let receiver = report
            .flows
            .iter()
            .find(|f| f.sock_cookie == RECEIVER.cookie);
        receiver.is_some_and(|f| {
            f.advice
                .iter()
                .any(|a| matches!(a, Advice::ThroughputCeiling { .. }))
        })
    };
    // A reader that keeps up: the window, not its reads, sets the rate.
    let mut events = lossy_receiver(1000);
    for ev in &mut events {
        if let Body::WindowAdv(w) = &mut ev.body {
            w.copied_seq = w.rcv_nxt;
        }
    }
    assert!(ceiling(&events));
    events.insert(0, SENDER.rcv(0, ack(0, 0, 0, 0, 65535)));
    assert!(!ceiling(&events));
}

#[test]
fn mss_clamp_only_where_the_window_binds() {
    // At 1 ms the 26844 B window allows 215 Mb/s, what arrives: it binds,
    // and the alert fires once the loss ring is full.
    let bound = lossy_receiver_at_srtt(1000);
    assert_eq!(kinds(&bound), [(31, "mss_clamp")]);
    assert!(
        bound[0]
            .message
            .contains("the 26844 B window caps at 214.8 Mb/s, and 214.8 Mb/s arrived"),
        "{}",
        bound[0].message
    );
    // At 10 µs the same window allows 21.5 Gb/s, 100 times what arrives:
    // the reader, not the window, sets the rate, and nothing fires.
    assert_eq!(kinds(&lossy_receiver_at_srtt(10)), []);
    // At 100 ms it would allow 2.1 Mb/s, a hundredth of what arrives: that
    // srtt was taken across a stall, and the window is not shown to bind.
    assert_eq!(kinds(&lossy_receiver_at_srtt(100_000)), []);
}

/// The receiver's own srtt, 1 ms, from an ACK it took in at 0.
fn receiver_srtt_1ms() -> Event {
    RECEIVER.rcv(
        0,
        tt_tcp_rcv {
            srtt_us: 1000,
            ..ack(0, 0, 0, 0, 65535)
        },
    )
}

/// The message of the one `mss_clamp` alert among `alerts`.
fn only_mss_clamp(alerts: &[Alert]) -> &str {
    let fired: Vec<_> = alerts
        .iter()
        .filter(|a| a.kind == AlertKind::MssClamp)
        .collect();
    assert_eq!(fired.len(), 1, "{alerts:?}");
    &fired[0].message
}

/// An autotuned buffer behind an unscaled window (scaling off, loss made
/// the kernel grow it): 2 MiB free, 65535 B offered. The alert tells the
/// loss, not a rate the lost megabytes would carry per round trip.
#[test]
fn a_clamp_far_below_the_free_space_claims_no_rate_for_it() {
    let r = &RECEIVER;
    let mut events = vec![receiver_srtt_1ms()];
    let mut rcv_nxt = 1000u32;
    for i in 0..100u64 {
        let adv = tt_window_adv {
            sk_rcvbuf: 4 << 20,
            sk_rmem_alloc: 0,
            window_clamp: 4 << 20,
            rcv_ssthresh: 1 << 20,
            rcv_mss: 1448,
            advmss: 1448,
            // 1 MB (the soft cap) rounded down to 1448: 724 segments.
            rcv_wnd: 724 * 1448,
            window: 65535,
            win_raw: 65535,
            ..paper_adv(0, rcv_nxt, 0)
        };
        events.push(r.adv(i * MS, adv));
        rcv_nxt += 65535;
    }
    let (alerts, report) = run(WindowConfig::default(), &events);
    assert_eq!(report.flows[0].window.receive.classes.clamped_65535, 100);
    let message = only_mss_clamp(&alerts);
    assert!(
        message.contains(
            "to the 65535 header clamp (no window scaling): 2031617 of 2097152 B per window;"
        ),
        "{message}"
    );
    assert!(!message.contains("at srtt"), "{message}");
}

/// 40 windows of `offer` B from 33000 B free under the soft cap 22091 at
/// rcv_mss 1448, each read at once.
fn under_the_soft_cap(offer: u32) -> (Vec<Alert>, WindowReport) {
    let r = &RECEIVER;
    let mut events = vec![receiver_srtt_1ms()];
    let mut rcv_nxt = 1000u32;
    for i in 0..40u64 {
        let adv = tt_window_adv {
            rcv_ssthresh: 22091,
            rcv_mss: 1448,
            advmss: 1448,
            ..paper_adv(65072, rcv_nxt, offer)
        };
        events.push(r.adv(i * MS, adv));
        rcv_nxt += offer;
    }
    run(WindowConfig::default(), &events)
}

/// The rwnd-limited lab's receiver: the soft cap rcv_ssthresh far below the
/// free space, an MSS of 1448. Rounding 22091 B down to 15 segments loses
/// 371 B; the alert said the 34% lost went "to rounding down to rcv_mss
/// 1448", which can lose no more than 1447 B of a window.
#[test]
fn mss_clamp_under_the_soft_cap_says_what_the_cap_took() {
    // 33000 B free, at most 22091, rounded down to 15 × 1448.
    let (alerts, report) = under_the_soft_cap(21720);
    let w = &report.flows[0].window.receive;
    assert_eq!((w.mss_rounded_count, w.model_mismatches), (40, 0));
    assert_eq!(w.mss_rounding_bytes_above_ssthresh, 40 * 10909);
    let message = only_mss_clamp(&alerts);
    assert!(
        message.contains("34.2% of free space to the soft cap rcv_ssthresh 22091 ("),
        "{message}"
    );
    assert!(
        message.ends_with(
            "; the latest window: 33000 B free, 10909 B above the cap, 371 B to the rounding"
        ),
        "{message}"
    );
}

/// The same receiver where the offer is one made before (under another cap
/// or rcv_mss) and kept, as `__tcp_select_window()` keeps an offer within
/// one MSS below the free space: 21000 B, not the 21720 B rounding gives;
/// the alert's split adds up to the kept offer, and says why.
#[test]
fn mss_clamp_says_when_the_window_is_a_kept_offer() {
    let (alerts, report) = under_the_soft_cap(21000);
    let w = &report.flows[0].window.receive;
    assert_eq!(w.mss_rounded_count + w.model_mismatches, 40);
    assert!(w.model_mismatches <= 1, "{w:?}");
    let message = only_mss_clamp(&alerts);
    assert!(
        message.ends_with(
            "; the latest window: 33000 B free, 10909 B above the cap, 1091 B to the rounding's \
             hysteresis (the previous offer, 21000 B, is kept while within rcv_mss 1448 below \
             the cap; rounding would offer 21720 B)"
        ),
        "{message}"
    );
}

#[test]
fn mss_clamp_alert_once_per_episode() {
    let r = &RECEIVER;
    let mut events = Vec::new();
    let mut rcv_nxt = 1000u32;
    // 32 lossy windows (free 33000 → 26844: 6156 B, 18.65 %), 32 exact ones
    // (free 26844 = 3 × 8948), then lossy ones again.
    for i in 0..100u64 {
        let rmem = if (32..64).contains(&i) { 77384 } else { 65072 };
        events.push(r.adv(i * MS, paper_adv(rmem, rcv_nxt, 26844)));
        rcv_nxt += 26844;
    }
    let cfg = WindowConfig {
        threshold_pct: 15.0,
        min_duration_ns: 10 * MS,
        ..Default::default()
    };
    let (alerts, report) = run(cfg, &events);
    // First alert when the ring of 32 is full (event 31, at 31 ms). The episode
    // ends 10 ms after the loss fell below 7.5 %: with k lossy windows left,
    // 6156k / (33000k + 26844(32 − k)) < 0.075 ⇔ k ≤ 11, i.e. after 21 exact
    // windows (event 52), so at 62. It restarts at ≥ 15 %:
    // 6156k ≥ 0.15 (858008 + 6156k) ⇔ k ≥ 25, i.e. event 64 + 24 = 88.
    assert_eq!(kinds(&alerts), [(31, "mss_clamp"), (88, "mss_clamp")]);
    assert_eq!(cleared(&alerts), [(62, "mss_clamp")]);
    assert!(
        alerts[0]
            .message
            .contains("18.7% of free space to rounding down to rcv_mss 8948"),
        "{}",
        alerts[0].message
    );
    let w = &report.flows[0].window.receive;
    assert_eq!(
        (w.advertised_count, w.mss_rounded_count, w.model_mismatches),
        (100, 68, 0)
    );
    assert_eq!(w.mss_rounding_bytes_lost, 68 * 6156);
}

/// The paper's windows sent to a sender whose MSS is under what both MTUs
/// give (8960): bound to half the window it saw at the handshake, or set by
/// TCP_MAXSEG. The loss stays flagged, but no MTU fits the free space.
#[test]
fn no_mtu_advice_where_the_mtu_does_not_set_the_mss() {
    let (s, r) = (&SENDER, &RECEIVER);
    let sender_ack = |mss_cache| tt_tcp_rcv {
        mss_cache,
        ..ack(0, 8960, 26880, 100000, 26844)
    };
    let events = |mss_cache| {
        [
            s.rcv(0, sender_ack(mss_cache)),
            r.adv(0, paper_adv(65072, 1000, 26844)),
            r.adv(10 * MS, paper_adv(65072, 27844, 26844)),
        ]
    };
    let mtu_advice = |mss_cache| {
        let (_, report) = run(WindowConfig::default(), &events(mss_cache));
        let sender = &report.flows[0];
        assert!(!sender.advice.is_empty(), "{mss_cache}: not flagged");
        sender
            .advice
            .iter()
            .any(|a| matches!(a, Advice::Mtu { .. }))
    };
    assert!(mtu_advice(8960));
    assert!(!mtu_advice(4480));
}

/// A sender's own window that came late (its TX journey held past the
/// collector's reordering), from before the receiver's FIN: its rcv_nxt a
/// byte behind is no step back of 4 GB received, and the sender's report
/// stays about what it sent.
#[test]
fn a_late_window_with_an_older_rcv_nxt_counts_nothing_received() {
    let (s, r) = (&SENDER, &RECEIVER);
    let own = |rcv_nxt| paper_adv(0, rcv_nxt, 26844);
    let events = [
        s.rcv(0, ack(0, 8960, 26880, 100000, 26844)),
        r.adv(0, paper_adv(65072, 1000, 26844)),
        s.adv(MS, own(500)),
        // The receiver's FIN took rcv_nxt one on; the late one comes after.
        s.adv(2 * MS, own(501)),
        s.adv(3 * MS, own(500)),
    ];
    let (_, report) = run(WindowConfig::default(), &events);
    let sender = &report.flows[0];
    assert_eq!(sender.mss.direction, "send");
    assert_eq!(
        sender.window.chain.map(|c| c.advertised),
        Some(26844),
        "the receiver's window, not the sender's own"
    );
}

#[test]
fn paired_ends_give_the_paper_chain() {
    let (s, r) = (&SENDER, &RECEIVER);
    // The sender's MSS is 8960 (no timestamps), the receiver estimates 8948.
    let sender_ack = tt_tcp_rcv {
        mss_cache: 8960,
        ..ack(0, 8960, 26880, 100000, 26844)
    };
    let events = [
        s.rcv(0, sender_ack),
        r.adv(0, paper_adv(65072, 1000, 26844)),
        r.adv(10 * MS, paper_adv(65072, 27844, 26844)),
        s.rcv(
            10 * MS,
            tt_tcp_rcv {
                ack: 17920,
                snd_una: 8960,
                ..sender_ack
            },
        ),
    ];
    let cfg = WindowConfig {
        link_bps: Some(208_000_000_000),
        ..Default::default()
    };
    let (_, report) = run(cfg.clone(), &events);
    let (sf, rf) = (&report.flows[0], &report.flows[1]);
    assert_eq!((sf.peer_cookie, rf.peer_cookie), (Some(2), Some(1)));
    assert_eq!(
        (sf.src.as_str(), sf.dst.as_str()),
        ("10.0.0.1:5000", "10.0.0.2:80")
    );
    for f in [sf, rf] {
        assert_eq!(
            (f.mss.sender, f.mss.receiver_estimate, f.mss.advertised),
            (Some(8960), Some(8948), Some(8960))
        );
        assert_eq!(f.mss.mismatch_bytes, Some(12));
        let chain = f.window.chain.unwrap();
        assert_eq!(
            (chain.free_space, chain.advertised, chain.usable),
            (33000, 26844, 17920)
        );
    }
    assert_eq!((sf.mss.direction, rf.mss.direction), ("send", "receive"));
    // The receiver's own means: free 33000, advertised 26844, sender-usable 17920.
    assert_eq!(rf.window.receive.mean_sender_usable, 17920.0);
    // 208 Gb/s × 1 ms srtt = 26 MB: Figure 8's ratio at a larger scale, whole segments of 8960.
    assert_eq!(sf.window.ideal_window, Some(26_000_000));
    assert_eq!(sf.window.mss_allowed_window, Some(26_000_000 / 8960 * 8960));
    // The receiver has no srtt of its own and uses the sender's.
    assert_eq!(
        (rf.window.ideal_window, rf.window.ideal_window_source),
        (Some(26_000_000), Some("bandwidth_delay"))
    );
    // Flagged (45.7 % compounded loss) → advice with the paper's numbers.
    let mtu = sf.advice.iter().find_map(|a| match a {
        Advice::Mtu {
            free_space,
            current_lost_bytes,
            ..
        } => Some((*free_space, *current_lost_bytes)),
        _ => None,
    });
    assert_eq!(mtu, Some((33000, 33000 % 8960)));
    // Sampled by sequence number, the same windows would stand until the
    // next kept one: the findings stay, the advice is not given.
    let sampled = WindowConfig {
        byte_sample_every: 8,
        ..cfg
    };
    let (_, report) = run(sampled, &events);
    let (sf, rf) = (&report.flows[0], &report.flows[1]);
    assert_eq!(sf.window.chain.unwrap().usable, 17920);
    assert!(
        sf.advice.is_empty() && rf.advice.is_empty(),
        "{:?}",
        sf.advice
    );
}

/// The paper's pair, then the sockets `close` closed.
fn paired_then_closed(close: &[&Sock]) -> Vec<Event> {
    let (s, r) = (&SENDER, &RECEIVER);
    let mut events = vec![
        s.rcv(0, ack(0, 8960, 26880, 100000, 26844)),
        r.adv(0, paper_adv(65072, 1000, 26844)),
    ];
    for (k, sock) in close.iter().enumerate() {
        let state = crate::event::tt_state {
            oldstate: 1,
            newstate: TCP_CLOSE,
            ..Default::default()
        };
        events.push(Event::new(sock.hdr(MS + k as u64), Body::State(state)));
    }
    events
}

#[test]
fn a_connection_keeps_its_ends_until_both_closed() {
    let peers = |events: &[Event]| -> Vec<(u64, Option<u64>)> {
        let report = run(WindowConfig::default(), events).1;
        let mut peers: Vec<_> = report
            .flows
            .iter()
            .map(|f| (f.sock_cookie, f.peer_cookie))
            .collect();
        peers.sort();
        peers
    };
    // The listener's RST to a late segment (the server's socket gone, the
    // client's not) on the server's ends: the client's peer stays the
    // server's socket, and the listener has no row on those ends.
    let listener = Sock {
        cookie: 3,
        ..RECEIVER
    };
    let rst = tt_window_adv {
        tcp_flags: tcp_flags::RST,
        mss_cache: 536,
        ..Default::default()
    };
    let mut events = paired_then_closed(&[&RECEIVER]);
    events.push(listener.adv(10 * MS, rst));
    assert_eq!(peers(&events), [(1, Some(2)), (2, Some(1))]);
    // Both closed: a new connection on the same ends (a port used again)
    // pairs its own sockets.
    let client = Sock {
        cookie: 4,
        ..SENDER
    };
    let mut events = paired_then_closed(&[&RECEIVER, &SENDER]);
    events.push(client.rcv(10 * MS, ack(0, 8960, 26880, 100000, 26844)));
    events.push(listener.adv(10 * MS, paper_adv(65072, 1000, 26844)));
    assert_eq!(
        peers(&events),
        [(1, Some(2)), (2, Some(1)), (3, Some(4)), (4, Some(3))]
    );
}

#[test]
fn report_json_has_the_contract_fields() {
    let s = &SENDER;
    let events = [
        s.rcv(0, ack(1000, 10000, 19000, 100000, 0)),
        s.rcv(200 * MS, ack(10000, 19000, 19000, 100000, 8948)),
    ];
    let (_, report) = run(WindowConfig::default(), &events);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["events_lost"], 7);
    let f = &json["flows"][0];
    for key in [
        "sock_cookie",
        "src",
        "dst",
        "mss",
        "window",
        "limits",
        "alerts",
        "advice",
    ] {
        assert!(f.get(key).is_some(), "missing {key}");
    }
    for key in ["sender", "receiver_estimate", "advertised"] {
        assert!(f["mss"].get(key).is_some(), "missing mss.{key}");
    }
    for key in [
        "advertised_count",
        "mss_rounded_count",
        "mss_rounding_bytes_lost",
        "sws_stalls",
        "ideal_window",
        "mss_allowed_window",
        "model_mismatches",
        "classes",
    ] {
        assert!(f["window"].get(key).is_some(), "missing window.{key}");
    }
    for key in ["rwnd", "cwnd", "sndbuf", "app"] {
        assert!(f["limits"][key].is_number(), "missing limits.{key}");
    }
    assert_eq!(f["window"]["sws_stalls"][0]["start_ns"], 0);
    assert_eq!(f["window"]["sws_stalls"][0]["end_ns"], 200 * MS);
    assert_eq!(f["window"]["sws_stalls"][0]["zero_window_probes"], 0);
    assert_eq!(f["alerts"][0]["kind"], "sws_stall");
    assert!(f["alerts"][0]["message"]
        .as_str()
        .unwrap()
        .contains("200.0 ms"));
    assert_eq!(f["src"], "10.0.0.1:5000");
}

#[test]
fn ignores_events_without_a_socket() {
    let mut a = WindowAnalyzer::new(WindowConfig::default());
    let mut ev = SENDER.rcv(0, ack(0, 0, 0, 0, 0));
    ev.hdr.sock_cookie = 0;
    assert_eq!(a.push(&ev).count(), 0);
    assert!(a.finish(0).flows.is_empty());
}

/// Replay speed: `cargo test --release --lib analysis::window::tests::push_rate -- --ignored --nocapture`.
#[test]
#[ignore]
fn push_rate() {
    let socks: Vec<Sock> = (0..64)
        .map(|i| Sock {
            cookie: 100 + i,
            netns: 1,
            local: "10.0.0.1:5000",
            remote: "10.0.0.2:80",
        })
        .collect();
    let mut events = Vec::new();
    for i in 0..200_000u32 {
        let s = &socks[(i % 64) as usize];
        let ts = u64::from(i) * 1000;
        let seq = i.wrapping_mul(8948);
        events.push(s.adv(ts, paper_adv(65072, seq, 26844)));
        events.push(s.rcv(
            ts + 500,
            ack(
                seq,
                seq.wrapping_add(8948),
                seq.wrapping_add(26844),
                seq.wrapping_add(100000),
                26844,
            ),
        ));
    }
    let mut a = WindowAnalyzer::new(WindowConfig::default());
    let start = std::time::Instant::now();
    let rounds = 25;
    let mut alerts = 0;
    for _ in 0..rounds {
        for ev in &events {
            alerts += a.push(ev).count();
        }
    }
    let n = events.len() * rounds;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{n} events in {secs:.3} s: {:.1} M events/s ({alerts} alerts)",
        n as f64 / secs / 1e6
    );
    assert!(a.finish(0).flows.len() == 64);
}

/// Sets of the same values only add time to the held interval: the sums come
/// out as when every set closed one, out-of-order times included (a set
/// before the previous one closes it at 0 ns and holds from the earlier time).
#[test]
fn time_weighted_sums_repeated_values_as_separate_sets() {
    let sets: [(u64, [u64; 2]); 7] = [
        (100, [7, 1]),
        (150, [7, 1]),
        (140, [7, 1]),
        (400, [7, 1]),
        (500, [3, 2]),
        (450, [3, 2]),
        (900, [3, 2]),
    ];
    let mut tw = TimeWeighted::<2>::default();
    for (ts, values) in sets {
        tw.set(ts, values);
    }
    tw.pause(1000);
    // By hand, each set closing the previous one (saturating at 0):
    // [7,1] over 50 + 0 + 260 + 100 = 410 ns, [3,2] over 0 + 450 + 100 = 550 ns.
    let total = 410.0 + 550.0;
    assert_eq!(
        tw.means(),
        Some([
            (7.0 * 410.0 + 3.0 * 550.0) / total,
            (410.0 + 2.0 * 550.0) / total
        ])
    );
}

/// The free space of [`held_sender`]'s receiver, offered whole.
const HELD_FREE: u32 = 4 * 8948;

/// A sender with `cwnd`, `in_flight` segments of 8948 B in flight and
/// acknowledged every srtt (100 ms), more written, and a receiver offering
/// its free space of 4 segments whole: the alerts and the report.
fn held_sender(cwnd: u32, in_flight: u32) -> (Vec<Alert>, WindowReport) {
    let (s, r) = (&SENDER, &RECEIVER);
    let at = |ms: u32| {
        let una = ms / 100 * in_flight * 8948;
        let flight = una + in_flight * 8948;
        tt_tcp_rcv {
            snd_cwnd: cwnd,
            packets_out: in_flight,
            srtt_us: 100_000,
            ..ack(una, flight, flight, 1_000_000_000, HELD_FREE as u16)
        }
    };
    let receiver = |ms: u32| paper_adv(131072 - 2 * HELD_FREE, 1000 + ms * 1000, HELD_FREE);
    let events = [
        s.rcv(0, at(0)),
        r.adv(0, receiver(0)),
        r.adv(100 * MS, receiver(100)),
        s.rcv(100 * MS, at(100)),
        s.rcv(200 * MS, at(200)),
    ];
    run(WindowConfig::default(), &events)
}

/// Advice for a sender the congestion window limits, whose receiver offers
/// whole segments (free 4 × 8948 B, advertised whole): what its window
/// allowed, and no receive buffer, whose window already held more.
#[test]
fn cwnd_limited_alone_gets_no_receive_buffer_advice() {
    // cwnd 2, both in flight: cwnd holds the data back at the rate it allows.
    let (alerts, report) = held_sender(2, 2);
    assert_eq!(kinds(&alerts), [(100, "cwnd_limited")]);
    let sf = &report.flows[0];
    assert_eq!(sf.window.chain.unwrap().usable, u64::from(HELD_FREE));
    let kinds: Vec<_> = sf
        .advice
        .iter()
        .map(|a| serde_json::to_value(a).unwrap()["kind"].clone())
        .collect();
    assert_eq!(kinds, ["throughput_ceiling"], "{:?}", sf.advice);
    // 2 × 8948 B a round trip of 100 ms, as acknowledged.
    let Advice::ThroughputCeiling {
        ceiling_bps,
        acked_bps,
        ..
    } = sf.advice[0]
    else {
        panic!()
    };
    assert_eq!((ceiling_bps, acked_bps), (1_431_680.0, Some(1_431_680.0)));
}

/// A sender the receive window holds back (4 × 8948 B in flight, all it
/// offers; more written) with a cwnd of 12: the buffer advised is for a
/// window of those 12 segments, not one more than the free space (the
/// rwnd-limited lab's SO_RCVBUF 16384 drew 18936, and the limit stayed), as
/// much of it as a connection without window scaling offers: 7 segments;
/// and no MTU, its windows whole segments.
#[test]
fn rwnd_limited_sender_gets_a_buffer_for_its_cwnd() {
    let (alerts, report) = held_sender(12, 4);
    assert_eq!(kinds(&alerts), [(100, "rwnd_limited")]);
    let Some(Advice::ReceiveBuffer {
        target,
        sender_cwnd,
        segments,
        window,
        window_scale,
        ..
    }) = report.flows[0]
        .advice
        .iter()
        .find(|a| matches!(a, Advice::ReceiveBuffer { .. }))
    else {
        panic!("{:?}", report.flows[0].advice)
    };
    assert_eq!(
        (*target, *sender_cwnd, *segments, *window, *window_scale),
        ("sender_cwnd", Some(12), 7, 7 * 8948, 0)
    );
    // Its windows lose nothing to rounding: no MTU to mend it.
    let advice = &report.flows[0].advice;
    assert!(
        !advice.iter().any(|a| matches!(a, Advice::Mtu { .. })),
        "{advice:?}"
    );
}

/// The paper's receiver (windows of 3 × 8948 B, 18.6 % lost to rounding,
/// flagged at 10 %) with 60000 B received and not yet read at each window;
/// `read_after_ms`: a read 1 ms later takes them all, reporting `sk_rcvbuf`.
fn reader_run(read_after_ms: Option<u64>, sk_rcvbuf: u32) -> FlowWindowReport {
    let r = &RECEIVER;
    let mut events = vec![receiver_srtt_1ms()];
    for ms in [0, 100, 200] {
        let rcv_nxt = 100_000 + ms as u32 * 1000;
        events.push(r.adv(
            ms * MS,
            tt_window_adv {
                copied_seq: rcv_nxt - 60_000,
                ..paper_adv(65072, rcv_nxt, 26844)
            },
        ));
        if let Some(after) = read_after_ms.filter(|_| ms < 200) {
            let read = tt_app_read {
                ret: 60_000,
                copied_seq: rcv_nxt,
                rcv_nxt,
                sk_rcvbuf,
                ..Default::default()
            };
            events.push(Event::new(r.hdr((ms + after) * MS), Body::AppRead(read)));
        }
    }
    let cfg = WindowConfig {
        threshold_pct: 10.0,
        ..Default::default()
    };
    run(cfg, &events).1.flows.remove(0)
}

/// A read drains the queue skb by skb, as the kernel's `copied_seq` moves
/// in `tcp_recvmsg_locked()`: 60000 B unread at each window, copied as three
/// skbs 1 ms apart, the read returning 1 ms after the last.
#[test]
fn a_long_read_drains_the_queue_skb_by_skb() {
    let r = &RECEIVER;
    let mut events = vec![receiver_srtt_1ms()];
    for ms in [0, 100, 200] {
        let rcv_nxt = 100_000 + ms as u32 * 1000;
        let adv = tt_window_adv {
            copied_seq: rcv_nxt - 60_000,
            ..paper_adv(65072, rcv_nxt, 26844)
        };
        events.push(r.adv(ms * MS, adv));
        if ms == 200 {
            break;
        }
        for k in 0..3 {
            let seq = rcv_nxt - 60_000 + k * 20_000;
            let copy = tt_copy_datagram {
                seq,
                end_seq: seq + 20_000,
                len: 20_000,
                ..tt_copy_datagram::default()
            };
            let at = (ms + u64::from(k) + 1) * MS;
            events.push(Event::new(r.hdr(at), Body::CopyDatagram(copy)));
        }
        let read = tt_app_read {
            ret: 60_000,
            copied_seq: rcv_nxt,
            rcv_nxt,
            sk_rcvbuf: 131072,
            ..Default::default()
        };
        events.push(Event::new(r.hdr((ms + 4) * MS), Body::AppRead(read)));
    }
    let flow = run(WindowConfig::default(), &events).1.flows.remove(0);
    let w = &flow.window.receive;
    // The kernel's rx_queue: 60000, 40000 and 20000 B for 1 ms each in each
    // 100, above the 26844-B window for 2 ms (by the read's return: 60000 B
    // for 4 ms, 2400 B on average).
    assert_eq!(
        (w.mean_unread, w.unread_over_window_fraction),
        (1200.0, 0.02)
    );
}

fn advice_kinds(flow: &FlowWindowReport) -> Vec<String> {
    flow.advice
        .iter()
        .map(|a| {
            serde_json::to_value(a).unwrap()["kind"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// Unread data beyond a window the header's 65535 cut (no window scaling,
/// 4 MB free) held nothing back: no reader advice, but window scaling's.
#[test]
fn unread_data_beyond_a_header_clamped_window_is_no_readers_advice() {
    let r = &RECEIVER;
    let events: Vec<Event> = [0, 100, 200]
        .into_iter()
        .map(|ms| {
            let rcv_nxt = 100_000 + ms as u32 * 1000;
            let adv = tt_window_adv {
                sk_rcvbuf: 1 << 23,
                window_clamp: 1 << 22,
                rcv_ssthresh: 1 << 22,
                copied_seq: rcv_nxt - 100_000,
                ..paper_adv(100_000, rcv_nxt, 65535)
            };
            r.adv(ms * MS, adv)
        })
        .collect();
    let (_, report) = run(WindowConfig::default(), &events);
    let flow = &report.flows[0];
    assert_eq!(
        flow.window.chain.and_then(|c| c.shaped_by),
        Some(WindowClass::Clamped65535)
    );
    assert_eq!(flow.window.receive.unread_over_window_fraction, 1.0);
    let kinds = advice_kinds(flow);
    assert!(!kinds.contains(&"reader".into()), "{kinds:?}");
    // No scaling on either end: scaling is what would offer the free space.
    let scaling = flow.advice.iter().find_map(|a| match a {
        Advice::WindowScaling {
            free_space,
            advertised,
            ..
        } => Some((*free_space, *advertised)),
        _ => None,
    });
    assert_eq!(scaling, Some(((1 << 22) - 50_000, 65535)));
}

/// Data left unread beyond the window is the reader's doing: the advice
/// names the reader, not a buffer; read at once, the buffer it needs; a
/// buffer the socket already had is advised not.
#[test]
fn unread_data_beyond_the_window_is_the_readers_advice() {
    let unread = reader_run(None, 0);
    let w = &unread.window.receive;
    assert_eq!(
        (w.mean_unread, w.unread_over_window_fraction),
        (60000.0, 1.0)
    );
    let kinds = advice_kinds(&unread);
    assert!(kinds.contains(&"reader".into()), "{kinds:?}");
    assert!(!kinds.contains(&"receive_buffer".into()), "{kinds:?}");
    // Nor a ceiling of window over srtt: the reads set the rate.
    assert!(!kinds.contains(&"throughput_ceiling".into()), "{kinds:?}");
    // Nor an MTU fitted to free space the reader set.
    assert!(!kinds.contains(&"mtu".into()), "{kinds:?}");

    // 60000 B unread for 1 ms in each 100.
    let read = reader_run(Some(1), 131072);
    let w = &read.window.receive;
    assert_eq!(
        (w.mean_unread, w.unread_over_window_fraction),
        (600.0, 0.01)
    );
    let kinds = advice_kinds(&read);
    assert!(kinds.contains(&"receive_buffer".into()), "{kinds:?}");
    assert!(!kinds.contains(&"reader".into()), "{kinds:?}");
    assert!(kinds.contains(&"mtu".into()), "{kinds:?}");

    // Autotuning had grown the buffer past what the advice would ask.
    let grown = reader_run(Some(1), 1 << 20);
    assert_eq!(grown.window.receive.largest_rcvbuf, 1 << 20);
    let kinds = advice_kinds(&grown);
    assert!(!kinds.contains(&"receive_buffer".into()), "{kinds:?}");
}
