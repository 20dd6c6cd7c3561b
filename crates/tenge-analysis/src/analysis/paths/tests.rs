//! Hand-built event streams with hand-computed latencies (all in ns).

use super::*;
use crate::event::{
    abi_addr, tt_app_read, tt_copy_datagram, tt_data_ready, tt_hdr, tt_kfree_skb, tt_napi_poll,
    tt_pkt, tt_sendmsg, tt_tcp_rcv, tt_window_adv,
};
use crate::export::flamegraph::{folded_cpu, folded_paths, per_direction_shares, render_paths_svg};
use std::net::SocketAddr;

const SENDER: &str = "10.0.0.1:40000";
const RECEIVER: &str = "10.0.0.2:5201";
const NETNS: u32 = 4026531840;
const TX_COOKIE: u64 = 77;
const RX_COOKIE: u64 = 88;
const MSS: u32 = 1000;

fn hdr(ts_ns: u64, src: &str, dst: &str, skb: u64, cookie: u64) -> tt_hdr {
    let (src, dst): (SocketAddr, SocketAddr) = (src.parse().unwrap(), dst.parse().unwrap());
    let (family, saddr) = abi_addr(src.ip());
    let (_, daddr) = abi_addr(dst.ip());
    tt_hdr {
        ts_ns,
        sock_cookie: cookie,
        skb,
        saddr,
        daddr,
        sport: src.port(),
        dport: dst.port(),
        family,
        cpu: 1,
        netns: NETNS,
        ..Default::default()
    }
}

/// Events of the sending socket, and packets it sends (device layer: no cookie).
mod tx {
    use super::*;

    pub fn sendmsg(ts: u64, write_seq: u32, snd_una: u32) -> Event {
        let body = tt_sendmsg {
            write_seq,
            snd_una,
            snd_nxt: snd_una,
            msg_left: 1000,
            ..Default::default()
        };
        Event::new(
            hdr(ts, SENDER, RECEIVER, 0xffff_8880_0000_1000, TX_COOKIE),
            Body::Sendmsg(body),
        )
    }

    /// A write of `msg_left` bytes as it finds the socket (`write_seq`
    /// before it).
    pub fn write(ts: u64, msg_left: u32, s: State) -> Event {
        let body = tt_sendmsg {
            write_seq: s.write_seq,
            msg_left,
            snd_una: s.snd_una,
            snd_nxt: s.snd_nxt,
            snd_cwnd: s.snd_cwnd,
            snd_wnd: s.snd_wnd,
            mss_cache: MSS,
            packets_out: s.packets_out,
            ..Default::default()
        };
        Event::new(
            hdr(ts, SENDER, RECEIVER, 0xffff_8880_0000_1000, TX_COOKIE),
            Body::Sendmsg(body),
        )
    }

    /// Sender state at net_dev_queue: what limits it.
    #[derive(Clone, Copy, Default)]
    pub struct State {
        pub snd_una: u32,
        pub snd_nxt: u32,
        pub snd_cwnd: u32,
        pub snd_wnd: u32,
        /// Before this skb.
        pub packets_out: u32,
        /// What the application had written (0: unknown, nothing waits).
        pub write_seq: u32,
    }

    pub fn queue(ts: u64, skb: u64, seq: u32, len: u32, gso_segs: u16, s: State) -> Event {
        let body = tt_window_adv {
            seq,
            len,
            gso_segs,
            gso_size: if gso_segs > 1 { MSS as u16 } else { 0 },
            snd_una: s.snd_una,
            snd_nxt: s.snd_nxt,
            snd_cwnd: s.snd_cwnd,
            snd_wnd: s.snd_wnd,
            packets_out: s.packets_out,
            write_seq: s.write_seq,
            mss_cache: MSS,
            ..Default::default()
        };
        Event::new(
            hdr(ts, SENDER, RECEIVER, skb, TX_COOKIE),
            Body::WindowAdv(body),
        )
    }

    /// An ACK reaching the sending socket, offering `window`, with the state
    /// TCP had before it.
    pub fn ack(ts: u64, ack: u32, window: u32, s: State) -> Event {
        let snd_wscale = (0..15u8).find(|&ws| window >> ws <= 65535).unwrap();
        assert_eq!(
            window >> snd_wscale << snd_wscale,
            window,
            "a window the scale carries"
        );
        let body = tt_tcp_rcv {
            tcp_flags: crate::event::tcp_flags::ACK,
            ack,
            win_raw: (window >> snd_wscale) as u16,
            snd_wscale,
            snd_una: s.snd_una,
            snd_nxt: s.snd_nxt,
            snd_cwnd: s.snd_cwnd,
            snd_wnd: s.snd_wnd,
            packets_out: s.packets_out,
            write_seq: s.write_seq,
            mss_cache: MSS,
            ..Default::default()
        };
        Event::new(hdr(ts, SENDER, RECEIVER, 0, TX_COOKIE), Body::TcpRcv(body))
    }

    fn pkt(seq: u32, len: u32) -> tt_pkt {
        tt_pkt {
            seq,
            len,
            ..Default::default()
        }
    }

    pub fn start_xmit(ts: u64, skb: u64, seq: u32, len: u32) -> Event {
        Event::new(
            hdr(ts, SENDER, RECEIVER, skb, 0),
            Body::DevStartXmit(pkt(seq, len)),
        )
    }

    pub fn xmit(ts: u64, skb: u64, seq: u32, len: u32) -> Event {
        Event::new(
            hdr(ts, SENDER, RECEIVER, skb, 0),
            Body::DevXmit(pkt(seq, len)),
        )
    }
}

/// Packets arriving at the receiver, and the receiving socket's events.
mod rx {
    use super::*;

    fn wire(ts: u64, skb: u64, body: Body) -> Event {
        Event::new(hdr(ts, SENDER, RECEIVER, skb, 0), body)
    }

    fn sock(ts: u64, skb: u64, body: Body) -> Event {
        Event::new(hdr(ts, RECEIVER, SENDER, skb, RX_COOKIE), body)
    }

    pub fn entry(ts: u64, skb: u64, seq: u32, len: u32) -> Event {
        wire(
            ts,
            skb,
            Body::RxEntry(tt_pkt {
                seq,
                len,
                ..Default::default()
            }),
        )
    }

    pub fn netif(ts: u64, skb: u64, seq: u32, len: u32, gso_segs: u16) -> Event {
        wire(
            ts,
            skb,
            Body::NetifReceive(tt_pkt {
                seq,
                len,
                gso_segs,
                ..Default::default()
            }),
        )
    }

    pub fn tcp(ts: u64, skb: u64, seq: u32, len: u32, rcv_nxt: u32, backlog: u8) -> Event {
        let body = tt_tcp_rcv {
            seq,
            end_seq: seq + len,
            len,
            rcv_nxt,
            backlog,
            rcv_mss: MSS,
            snd_cwnd: 10,
            ..Default::default()
        };
        sock(ts, skb, Body::TcpRcv(body))
    }

    pub fn ready(ts: u64, rcv_nxt: u32, copied_seq: u32) -> Event {
        sock(
            ts,
            0,
            Body::DataReady(tt_data_ready {
                rcv_nxt,
                copied_seq,
                ..Default::default()
            }),
        )
    }

    pub fn copy(ts: u64, skb: u64, seq: u32, end_seq: u32, len: u32) -> Event {
        sock(
            ts,
            skb,
            Body::CopyDatagram(tt_copy_datagram {
                seq,
                end_seq,
                len,
                ..Default::default()
            }),
        )
    }

    pub fn read(ts: u64, ret: i32, copied_seq: u32) -> Event {
        sock(
            ts,
            0,
            Body::AppRead(tt_app_read {
                ret,
                copied_seq,
                ..Default::default()
            }),
        )
    }

    /// `[seq, seq + len)` from the driver to TCP (whose rcv_nxt is `rcv_nxt`),
    /// a microsecond a hop from `t0`.
    pub fn to_tcp(t0: u64, skb: u64, seq: u32, len: u32, rcv_nxt: u32) -> [Event; 3] {
        [
            entry(t0, skb, seq, len),
            netif(t0 + 1_000, skb, seq, len, 1),
            tcp(t0 + 2_000, skb, seq, len, rcv_nxt, 0),
        ]
    }

    /// One segment down the whole path; hop times are `t0 + offsets[i]`.
    pub fn full_path(t0: u64, skb: u64, seq: u32, offsets: [u64; 6], backlog: u8) -> Vec<Event> {
        let end = seq + MSS;
        vec![
            entry(t0 + offsets[0], skb, seq, MSS),
            netif(t0 + offsets[1], skb, seq, MSS, 1),
            tcp(t0 + offsets[2], skb, seq, MSS, seq, backlog),
            ready(t0 + offsets[3], end, seq),
            copy(t0 + offsets[4], skb, seq, end, MSS),
            read(t0 + offsets[5], MSS as i32, end),
        ]
    }
}

fn run(cfg: PathConfig, events: &[Event]) -> PathReport {
    let mut analyzer = PathAnalyzer::new(cfg);
    for ev in events {
        analyzer.push(ev);
    }
    analyzer.finish()
}

fn path<'a>(report: &'a PathReport, direction: &str, name: &str) -> &'a PathEntry {
    report
        .paths
        .iter()
        .find(|p| p.direction == direction && p.path == name)
        .unwrap_or_else(|| panic!("no {direction} path {name}: {:#?}", report.paths))
}

fn stage<'a>(entry: &'a PathEntry, name: &str) -> &'a StageStats {
    entry.stages.iter().find(|s| s.stage == name).unwrap()
}

/// Asserts every quantile and the maximum of a stage whose samples are all `ns`.
fn assert_all(entry: &PathEntry, name: &str, count: u64, ns: u64) {
    let s = stage(entry, name);
    assert_eq!(
        (s.count, s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns, s.total_ns),
        (count, ns, ns, ns, ns, ns * count),
        "{} {name}",
        entry.path
    );
}

/// Within the histogram's 1% precision.
fn assert_near(got: u64, want: u64) {
    assert!(
        got.abs_diff(want) * 100 <= want,
        "{got} is not within 1% of {want}"
    );
}

#[test]
fn seq_comparison_wraps() {
    assert!(seq_before(0xffff_ff00, 0x10));
    assert!(seq_after(0x10, 0xffff_ff00));
    assert!(!seq_before(5, 5) && !seq_after(5, 5));
}

/// Four writes: one sent at once, one held by cwnd, one by rwnd, one by
/// pacing; each held one is classed by the limit its skb used up when sent.
fn tx_hold_events() -> Vec<Event> {
    let state = |snd_una, snd_cwnd, snd_wnd, packets_out| tx::State {
        snd_una,
        snd_nxt: snd_una,
        snd_cwnd,
        snd_wnd,
        packets_out,
        ..Default::default()
    };
    vec![
        // At once: written at 10 µs, queued 5 µs later.
        tx::sendmsg(10_000, 1000, 1000),
        tx::queue(15_000, 0x200, 1000, 1000, 1, state(1000, 10, 65535, 0)),
        tx::start_xmit(16_000, 0x200, 1000, 1000),
        tx::xmit(18_000, 0x200, 1000, 1000),
        // cwnd: sent with 1 packet out and cwnd 2: it took the last of it.
        tx::sendmsg(100_000, 2000, 1000),
        tx::queue(400_000, 0x400, 2000, 1000, 1, state(1000, 2, 65535, 1)),
        tx::start_xmit(401_000, 0x400, 2000, 1000),
        tx::xmit(401_500, 0x400, 2000, 1000),
        // rwnd: written at 510 µs, when an ACK found the window used up at
        // 3000 and left it so; cwnd 10 has room. An ACK unseen opened it to
        // 4000 at 900 µs.
        tx::sendmsg(510_000, 3000, 2000),
        tx::ack(
            520_000,
            2000,
            1000,
            tx::State {
                snd_nxt: 3000,
                write_seq: 4000,
                ..state(2000, 10, 1000, 1)
            },
        ),
        tx::queue(900_000, 0x500, 3000, 1000, 1, state(2000, 10, 2000, 1)),
        tx::start_xmit(900_100, 0x500, 3000, 1000),
        tx::xmit(900_200, 0x500, 3000, 1000),
        // Pacing/TSQ: both windows open, still 200 µs late.
        tx::sendmsg(1_010_000, 4000, 3000),
        tx::queue(1_210_000, 0x600, 4000, 1000, 1, state(4000, 10, 65535, 0)),
        tx::start_xmit(1_210_300, 0x600, 4000, 1000),
        tx::xmit(1_210_400, 0x600, 4000, 1000),
    ]
}

#[test]
fn tx_at_once_and_held_by_cwnd_rwnd_pacing() {
    let report = run(PathConfig::default(), &tx_hold_events());
    let at_once = path(&report, "tx", "at_once");
    assert_eq!((at_once.packets, at_once.dimension), (1, "hold"));
    assert_all(at_once, "tcp", 1, 5_000);
    assert_all(at_once, "qdisc", 1, 1_000);
    assert_all(at_once, "driver", 1, 2_000);
    let cwnd = path(&report, "tx", "held_cwnd");
    assert_all(cwnd, "tcp", 1, 300_000);
    assert_all(cwnd, "driver", 1, 500);
    assert_all(path(&report, "tx", "held_rwnd"), "tcp", 1, 390_000);
    assert_all(path(&report, "tx", "held_pacing_tsq"), "tcp", 1, 200_000);
    assert_eq!(at_once.share, 0.25);
    assert_eq!(
        (report.coverage.tx_packets, report.coverage.tx_complete),
        (4, 4)
    );
    assert_eq!(report.flows.len(), 1);
    assert_eq!(report.flows[0].cookie, TX_COOKIE);
    assert_eq!(report.flows[0].local, SENDER);
}

/// One large write, far past both windows, drained by a receive window
/// smaller than the congestion window (issue 13's `make lab`): every held
/// segment is `held_rwnd`, though it lay past snd_una + cwnd at the write.
#[test]
fn a_large_write_drained_by_rwnd_is_held_by_rwnd() {
    let mut events = vec![tx::sendmsg(0, 1000, 1000)];
    // cwnd 30 segments, window 4 segments: each ACK frees one segment of rwnd.
    for k in 0..40u32 {
        let seq = 1000 + k * MSS;
        let snd_una = (seq + MSS).saturating_sub(4 * MSS).max(1000);
        let state = tx::State {
            snd_una,
            snd_nxt: seq,
            snd_cwnd: 30,
            snd_wnd: 4 * MSS,
            packets_out: (seq - snd_una) / MSS,
            write_seq: 1000 + 40 * MSS,
        };
        // The first window's worth leaves at once.
        let ts = if k < 4 {
            10_000
        } else {
            1_000_000 + u64::from(k) * 100_000
        };
        events.push(tx::queue(ts, 0x1000 + u64::from(k), seq, MSS, 1, state));
    }
    let report = run(PathConfig::default(), &events);
    assert_eq!(path(&report, "tx", "at_once").packets, 4);
    assert_eq!(path(&report, "tx", "held_rwnd").packets, 36);
    assert!(report.paths.iter().all(|p| p.path != "held_cwnd"));
}

/// Behind a token bucket: an ACK opens the window by two segments and TSQ
/// holds them a millisecond, till the qdisc drains; the second of them uses
/// up the window as it leaves. The window held them 90 of 1100 µs: pacing/TSQ
/// did (the ACK's window counted from the ACK, not from the next send).
#[test]
fn segments_tsq_held_past_an_ack_that_opened_the_window() {
    let state = |snd_una, snd_nxt, packets_out| tx::State {
        snd_una,
        snd_nxt,
        snd_cwnd: 30,
        snd_wnd: 4 * MSS,
        packets_out,
        write_seq: 7000,
    };
    // Segment k leaves at `ts`, `packets_out` before it.
    let send = |ts, k: u32, snd_una, packets_out| {
        let seq = 1000 + k * MSS;
        let skb = 0x1000 + u64::from(k);
        tx::queue(ts, skb, seq, MSS, 1, state(snd_una, seq, packets_out))
    };
    let mut events = vec![tx::sendmsg(0, 1000, 1000)];
    events.extend((0..4).map(|k| send(10_000, k, 1000, k)));
    events.push(tx::ack(100_000, 3000, 4 * MSS, state(1000, 5000, 4)));
    events.extend((4..6).map(|k| send(1_100_000, k, 3000, k - 2)));
    let report = run(PathConfig::default(), &events);
    assert_eq!(path(&report, "tx", "at_once").packets, 4);
    assert_eq!(path(&report, "tx", "held_pacing_tsq").packets, 2);
    assert!(report.paths.iter().all(|p| p.path != "held_rwnd"));
}

/// A send empties the queue into the last of the window; the next write
/// waits in the used-up window for a millisecond, till an ACK opens it:
/// held by the window from the write on (sampled at sends and ACKs alone,
/// the window read as open till the ACK, and the segment as held_pacing_tsq).
#[test]
fn a_write_into_a_used_up_window_is_held_by_rwnd() {
    let state = |snd_una, snd_nxt, packets_out, write_seq| tx::State {
        snd_una,
        snd_nxt,
        snd_cwnd: 30,
        snd_wnd: 4 * MSS,
        packets_out,
        write_seq,
    };
    let mut events = vec![tx::write(0, 4 * MSS, state(1000, 1000, 0, 1000))];
    events.extend((0..4).map(|k| {
        let seq = 1000 + k * MSS;
        let s = state(1000, seq, k, 1000 + 4 * MSS);
        tx::queue(10_000, 0x1000 + u64::from(k), seq, MSS, 1, s)
    }));
    events.push(tx::write(100_000, MSS, state(1000, 5000, 4, 5000)));
    let before = state(1000, 5000, 4, 6000);
    events.push(tx::ack(1_100_000, 3000, 4 * MSS, before));
    let after = state(3000, 5000, 2, 6000);
    events.push(tx::queue(1_110_000, 0x2000, 5000, MSS, 1, after));
    let report = run(PathConfig::default(), &events);
    assert_eq!(path(&report, "tx", "at_once").packets, 4);
    assert_all(path(&report, "tx", "held_rwnd"), "tcp", 1, 1_010_000);
    assert!(report.paths.iter().all(|p| p.path != "held_pacing_tsq"));
}

/// A slow reader's zero window, reopened wide by a read (the healthy lab
/// with a slow reader at MTU 9000): what waited behind it leaves with both
/// windows open, yet waited longest for the window to reach past it.
#[test]
fn a_window_reopened_wide_held_what_waited_for_it() {
    let mut events = vec![tx::sendmsg(0, 1000, 1000)];
    let open = |snd_una, snd_nxt, packets_out| tx::State {
        snd_una,
        snd_nxt,
        snd_cwnd: 30,
        snd_wnd: 100 * MSS,
        packets_out,
        write_seq: 11_000,
    };
    // Two segments fill a window of two at once.
    for k in 0..2u32 {
        let mut s = open(1000, 1000 + k * MSS, k);
        s.snd_wnd = 2 * MSS;
        events.push(tx::queue(
            10_000,
            0x1000 + u64::from(k),
            1000 + k * MSS,
            MSS,
            1,
            s,
        ));
    }
    // Their ACK closes it; a second later a read reopens it to 100 segments.
    let mut before = open(1000, 3000, 2);
    before.snd_wnd = 2 * MSS;
    events.push(tx::ack(50_000, 3000, 0, before));
    let mut zero = open(3000, 3000, 0);
    zero.snd_wnd = 0;
    events.push(tx::ack(1_000_000_000, 3000, 100 * MSS, zero));
    for k in 2..10u32 {
        let seq = 1000 + k * MSS;
        let s = open(3000, seq, k - 2);
        events.push(tx::queue(
            1_000_010_000,
            0x1000 + u64::from(k),
            seq,
            MSS,
            1,
            s,
        ));
    }
    // Then a write that goes at once, past an ACK that held nothing back,
    // and one held with both windows open: pacing, TSQ or autocork.
    events.push(tx::sendmsg(1_100_000_000, 11_000, 3000));
    let written = |s| tx::State {
        write_seq: 12_000,
        ..s
    };
    events.push(tx::ack(
        1_100_000_100,
        11_000,
        100 * MSS,
        written(open(3000, 11_000, 8)),
    ));
    let s = written(open(11_000, 11_000, 0));
    events.push(tx::queue(1_300_000_000, 0x2000, 11_000, MSS, 1, s));
    let report = run(PathConfig::default(), &events);
    assert_eq!(path(&report, "tx", "at_once").packets, 2);
    assert_eq!(path(&report, "tx", "held_rwnd").packets, 8);
    assert_eq!(path(&report, "tx", "held_pacing_tsq").packets, 1);
}

/// A request in two writes of 100 B without TCP_NODELAY: the first leaves
/// at once, the second waits for the ACK of the first, which the peer
/// delays 40 ms, and leaves as it comes in (`tcp_nagle_check()`).
fn request_in_two_writes(second_leaves_ns: u64) -> Vec<Event> {
    let state = |snd_una, snd_nxt, packets_out, write_seq| tx::State {
        snd_una,
        snd_nxt,
        snd_cwnd: 10,
        snd_wnd: 64 * MSS,
        packets_out,
        write_seq,
    };
    vec![
        tx::sendmsg(0, 1000, 1000),
        tx::queue(1_000, 0x1000, 1000, 100, 1, state(1000, 1000, 0, 1100)),
        tx::sendmsg(2_000, 1100, 1000),
        tx::ack(40_000_000, 1100, 64 * MSS, state(1000, 1100, 1, 1200)),
        tx::queue(
            second_leaves_ns,
            0x2000,
            1100,
            100,
            1,
            state(1100, 1100, 0, 1200),
        ),
    ]
}

#[test]
fn a_small_write_behind_an_unacked_small_segment_is_held_by_nagle() {
    let report = run(PathConfig::default(), &request_in_two_writes(40_004_000));
    assert_eq!(path(&report, "tx", "at_once").packets, 1);
    let nagle = path(&report, "tx", "held_nagle");
    assert_eq!(nagle.packets, 1);
    // Written at 2 µs, sent at 40.004 ms.
    assert_eq!(nagle.stages[0].stage, "tcp");
    assert_eq!(nagle.stages[0].max_ns, 40_002_000);
}

/// Not Nagle's: a segment that left 5 ms after the ACK it waited for (a
/// timer sent it: pacing), one written after that ACK, a full one, one
/// with more written behind it (not the write queue's last), and one on a
/// socket with TCP_NODELAY.
#[test]
fn nagle_holds_only_small_segments_written_before_the_ack_that_lets_them_go() {
    let late = run(PathConfig::default(), &request_in_two_writes(45_000_000));
    assert_eq!(path(&late, "tx", "held_pacing_tsq").packets, 1);
    let mut after_ack = request_in_two_writes(40_004_000);
    if let Body::Sendmsg(w) = &mut after_ack[2].body {
        w.snd_una = 1100;
    }
    after_ack.swap(2, 3);
    after_ack[2].hdr.ts_ns = 30_000;
    let report = run(PathConfig::default(), &after_ack);
    assert!(report.paths.iter().all(|p| p.path != "held_nagle"));
    let mut full = request_in_two_writes(40_004_000);
    if let Body::WindowAdv(q) = &mut full[4].body {
        q.len = MSS;
    }
    let report = run(PathConfig::default(), &full);
    assert_eq!(path(&report, "tx", "held_pacing_tsq").packets, 1);
    let mut not_last = request_in_two_writes(40_004_000);
    if let Body::WindowAdv(q) = &mut not_last[4].body {
        q.write_seq = 1300;
    }
    let report = run(PathConfig::default(), &not_last);
    assert_eq!(path(&report, "tx", "held_pacing_tsq").packets, 1);
    let mut nodelay = request_in_two_writes(40_004_000);
    if let Body::TcpRcv(ack) = &mut nodelay[3].body {
        ack.nonagle = 1 | 4; // TCP_NAGLE_OFF | TCP_NAGLE_PUSH
    }
    let report = run(PathConfig::default(), &nodelay);
    assert_eq!(path(&report, "tx", "held_pacing_tsq").packets, 1);
}

#[test]
fn tx_fclone_matches_the_write_by_seq() {
    // sendmsg appends to the rtx-queue skb at 0x...1000; net_dev_queue and the
    // driver see its clone, 224 bytes further (sizeof(struct sk_buff)).
    let clone = 0xffff_8880_0000_1000 + 224;
    let s = tx::State {
        snd_una: 1000,
        snd_nxt: 1000,
        snd_cwnd: 10,
        snd_wnd: 65535,
        packets_out: 0,
        ..Default::default()
    };
    let events = [
        tx::sendmsg(1_000, 1000, 1000),
        tx::sendmsg(2_000, 1500, 1000),
        tx::queue(10_000, clone, 1000, 1000, 1, s),
        tx::start_xmit(10_500, clone, 1000, 1000),
        tx::xmit(11_000, clone, 1000, 1000),
    ];
    let report = run(PathConfig::default(), &events);
    let at_once = path(&report, "tx", "at_once");
    // The segment's first byte (1000) was written by the first iteration.
    assert_all(at_once, "tcp", 1, 9_000);
    assert_all(at_once, "qdisc", 1, 500);
    assert_all(at_once, "driver", 1, 500);
}

#[test]
fn tx_gso_counts_each_segment_with_its_own_write() {
    let s = tx::State {
        snd_una: 10_000,
        snd_nxt: 10_000,
        snd_cwnd: 10,
        snd_wnd: 65535,
        packets_out: 0,
        ..Default::default()
    };
    let events = [
        tx::sendmsg(20_000, 10_000, 10_000),
        tx::sendmsg(30_000, 12_000, 10_000),
        // One TSO skb: 4 segments of 1000 bytes.
        tx::queue(50_000, 0x700, 10_000, 4000, 4, s),
        // Software GSO after the qdisc: two new skbs; the first carries the head.
        tx::start_xmit(51_000, 0x801, 10_000, 2000),
        tx::xmit(52_000, 0x801, 10_000, 2000),
        tx::start_xmit(52_500, 0x802, 12_000, 2000),
        tx::xmit(53_000, 0x802, 12_000, 2000),
    ];
    let report = run(PathConfig::default(), &events);
    let at_once = path(&report, "tx", "at_once");
    assert_eq!(at_once.packets, 4);
    // Segments 10000 and 11000 were written at 20 µs, 12000 and 13000 at 30 µs.
    let tcp = stage(at_once, "tcp");
    assert_eq!(
        (tcp.count, tcp.max_ns, tcp.total_ns),
        (4, 30_000, 30_000 + 30_000 + 20_000 + 20_000)
    );
    assert_near(tcp.p50_ns, 20_000);
    assert_all(at_once, "qdisc", 4, 1_000);
    assert_all(at_once, "driver", 4, 1_000);
    assert_eq!(report.coverage.tx_complete, 4);
}

#[test]
fn rx_direct_vs_backlog() {
    let mut events = rx::full_path(
        0,
        0xa00,
        5000,
        [1_000, 3_000, 4_000, 4_500, 20_000, 21_000],
        0,
    );
    // The reader held the socket: TCP ran from release_sock 250 µs later.
    events.extend(rx::full_path(
        1_000_000,
        0xb00,
        6000,
        [1_000, 2_000, 252_000, 252_500, 260_000, 260_100],
        1,
    ));
    let report = run(PathConfig::default(), &events);
    let direct = path(&report, "rx", "direct");
    assert_eq!(
        (direct.packets, direct.share, direct.dimension),
        (1, 0.5, "socket")
    );
    for (name, ns) in [
        ("napi", 2_000),
        ("ip_tcp", 1_000),
        ("tcp_queue", 500),
        ("socket_queue", 15_500),
        ("read", 1_000),
    ] {
        assert_all(direct, name, 1, ns);
    }
    let backlog = path(&report, "rx", "backlog");
    for (name, ns) in [
        ("napi", 1_000),
        ("ip_tcp", 250_000),
        ("tcp_queue", 500),
        ("socket_queue", 7_500),
        ("read", 100),
    ] {
        assert_all(backlog, name, 1, ns);
    }
    assert_eq!(path(&report, "rx", "single").packets, 2);
    assert_eq!(path(&report, "rx", "in_order").packets, 2);
    let combined: Vec<_> = report
        .combined
        .iter()
        .map(|c| (c.path.as_str(), c.packets))
        .collect();
    assert_eq!(
        combined,
        [
            ("single;direct;in_order", 1),
            ("single;backlog;in_order", 1)
        ]
    );
    assert_eq!(
        (report.coverage.rx_packets, report.coverage.rx_complete),
        (2, 2)
    );
    assert_eq!(report.flows[0].local, RECEIVER);
    assert_eq!(report.flows[0].cookie, RX_COOKIE);
}

#[test]
fn rx_gro_merges_three_segments_despite_address_reuse() {
    // GRO frees merged skbs into the NAPI cache: the third driver skb reuses
    // the second's address while the second is still waiting in GRO.
    let events = [
        rx::entry(1_000, 0xa00, 1000, 1000),
        rx::entry(2_000, 0xb00, 2000, 1000),
        rx::entry(3_000, 0xb00, 3000, 1000),
        rx::netif(10_000, 0xa00, 1000, 3000, 3),
        rx::tcp(11_000, 0xa00, 1000, 3000, 1000, 0),
        rx::ready(11_500, 4000, 1000),
        rx::copy(12_000, 0xa00, 1000, 4000, 3000),
        rx::read(13_000, 3000, 4000),
    ];
    let report = run(PathConfig::default(), &events);
    let merged = path(&report, "rx", "gro_merged");
    assert_eq!((merged.packets, merged.share), (3, 1.0));
    let napi = stage(merged, "napi");
    assert_eq!(
        (napi.count, napi.max_ns, napi.total_ns),
        (3, 9_000, 9_000 + 8_000 + 7_000)
    );
    assert_near(napi.p50_ns, 8_000);
    assert_all(merged, "ip_tcp", 3, 1_000);
    assert_all(merged, "read", 3, 1_000);
    assert!(report.paths.iter().all(|p| p.path != "single"));
    assert_eq!(report.coverage.rx_complete, 3);
    assert_eq!(report.evictions.superseded, 0);
}

#[test]
fn rx_out_of_order_waits_in_tcp_and_duplicates_end_there() {
    let events = [
        // [2000, 3000) overtakes [1000, 2000): out of order, not readable yet.
        rx::entry(1_000, 0xa00, 2000, 1000),
        rx::netif(2_000, 0xa00, 2000, 1000, 1),
        rx::tcp(3_000, 0xa00, 2000, 1000, 1000, 0),
        rx::entry(50_000, 0xb00, 1000, 1000),
        rx::netif(51_000, 0xb00, 1000, 1000, 1),
        rx::tcp(52_000, 0xb00, 1000, 1000, 1000, 0),
        // The hole is filled: both readable.
        rx::ready(53_000, 3000, 1000),
        rx::copy(60_000, 0xb00, 1000, 2000, 1000),
        rx::copy(61_000, 0xa00, 2000, 3000, 1000),
        rx::read(62_000, 2000, 3000),
        // A spurious retransmission of [1000, 2000): TCP drops it.
        rx::entry(70_000, 0xc00, 1000, 1000),
        rx::netif(71_000, 0xc00, 1000, 1000, 1),
        rx::tcp(72_000, 0xc00, 1000, 1000, 3000, 0),
    ];
    let report = run(PathConfig::default(), &events);
    let ooo = path(&report, "rx", "out_of_order");
    assert_eq!(ooo.packets, 1);
    assert_all(ooo, "tcp_queue", 1, 50_000);
    assert_all(ooo, "socket_queue", 1, 8_000);
    assert_all(ooo, "read", 1, 1_000);
    let in_order = path(&report, "rx", "in_order");
    assert_all(in_order, "tcp_queue", 1, 1_000);
    assert_all(in_order, "socket_queue", 1, 7_000);
    assert_all(in_order, "read", 1, 2_000);
    let dup = path(&report, "rx", "duplicate");
    assert_all(dup, "ip_tcp", 1, 1_000);
    assert_eq!(stage(dup, "tcp_queue").count, 0);
    assert_eq!(
        (report.coverage.rx_packets, report.coverage.rx_complete),
        (3, 2)
    );
    assert_eq!(report.evictions.in_flight_at_end, 0);
}

/// TCP drops what it cannot keep (the window shrank to nothing, no receive
/// memory): such a segment leaves at the drop on a path of its own, and is
/// not counted again, nor given the wait of the copy sent after it, when
/// that copy is read. A second copy of bytes queued out of order is dropped
/// too (merged): out of order, as the kernel counts it, ending at TCP.
#[test]
fn a_segment_tcp_dropped_ends_there_and_a_second_copy_of_queued_bytes_is_out_of_order() {
    let kfree = |ts: u64, skb: u64, seq: u32, len: u32| {
        let drop = tt_kfree_skb {
            seq,
            len,
            ..Default::default()
        };
        Event::new(hdr(ts, SENDER, RECEIVER, skb, 0), Body::KfreeSkb(drop))
    };
    let mut events = Vec::new();
    // [2000, 3000) past a hole: queued out of order.
    events.extend(rx::to_tcp(1_000, 0xa00, 2000, 1000, 1000));
    // [3000, 4000) reaches TCP, which drops it (beyond the window).
    events.extend(rx::to_tcp(4_000, 0xb00, 3000, 1000, 1000));
    events.push(kfree(6_500, 0xb00, 3000, 1000));
    // A second copy of [2000, 3000): its bytes are queued, TCP drops it.
    events.extend(rx::to_tcp(7_000, 0xc00, 2000, 1000, 1000));
    events.push(kfree(9_500, 0xc00, 2000, 1000));
    // The hole, then [3000, 4000) again: everything readable and read.
    events.extend(rx::to_tcp(20_000, 0xd00, 1000, 1000, 1000));
    events.push(rx::ready(23_000, 3000, 1000));
    events.extend(rx::to_tcp(30_000, 0xe00, 3000, 1000, 3000));
    events.extend([
        rx::ready(33_000, 4000, 1000),
        rx::copy(40_000, 0xd00, 1000, 4000, 3000),
        rx::read(41_000, 3000, 4000),
    ]);
    let report = run(PathConfig::default(), &events);
    let dropped = path(&report, "rx", "tcp_dropped");
    assert_eq!(dropped.packets, 1);
    assert_all(dropped, "ip_tcp", 1, 1_000);
    assert_eq!(stage(dropped, "tcp_queue").count, 0);
    // Both copies of [2000, 3000): the first waited for the hole, the
    // second ended at TCP.
    let ooo = path(&report, "rx", "out_of_order");
    assert_eq!(ooo.packets, 2);
    assert_all(ooo, "ip_tcp", 2, 1_000);
    assert_all(ooo, "tcp_queue", 1, 20_000);
    let in_order = path(&report, "rx", "in_order");
    assert_eq!(in_order.packets, 2);
    assert_eq!(stage(in_order, "tcp_queue").max_ns, 1_000);
    assert_eq!(report.evictions.dropped, 2);
    assert_eq!(
        (report.coverage.rx_packets, report.coverage.rx_complete),
        (5, 3)
    );
}

#[test]
fn reused_address_gives_no_bogus_latency_and_stale_entries_expire() {
    let mut events = vec![
        // Lost after the driver: never reaches netif_receive_skb.
        rx::entry(1_000, 0xa00, 1000, 1000),
    ];
    // 0.5 ms later a different packet in the same skb.
    events.extend(rx::full_path(
        500_000,
        0xa00,
        2000,
        [0, 10_000, 11_000, 12_000, 13_000, 14_000],
        0,
    ));
    // 1.2 s on: the first one is stale (no progress for > 1 s).
    events.push(Event::new(
        hdr(1_200_000_000, SENDER, RECEIVER, 0, 0),
        Body::NapiPoll(tt_napi_poll::default()),
    ));
    let report = run(PathConfig::default(), &events);
    let single = path(&report, "rx", "single");
    assert_all(single, "napi", 1, 10_000);
    assert_eq!(report.evictions.stale, 1);
    // The lost packet still counts, on the path as far as it got.
    let lost = path(&report, "rx", "gro_unseen");
    assert_eq!((lost.packets, stage(lost, "napi").count), (1, 0));
    assert_eq!(
        (report.coverage.rx_packets, report.coverage.rx_complete),
        (2, 1)
    );
}

#[test]
fn drops_and_capacity_are_counted() {
    let cfg = PathConfig {
        max_pending_per_flow: 2,
        ..Default::default()
    };
    let drop = tt_kfree_skb {
        seq: 1000,
        reason: 2,
        ..Default::default()
    };
    let events = [
        rx::entry(1_000, 0xa00, 1000, 1000),
        Event::new(hdr(2_000, SENDER, RECEIVER, 0xa00, 0), Body::KfreeSkb(drop)),
        rx::entry(3_000, 0xb00, 2000, 1000),
        rx::entry(4_000, 0xc00, 3000, 1000),
        rx::entry(5_000, 0xd00, 4000, 1000),
    ];
    let report = run(cfg, &events);
    assert_eq!(
        (
            report.evictions.dropped,
            report.evictions.capacity,
            report.evictions.in_flight_at_end
        ),
        (1, 1, 2)
    );
    assert_eq!(report.coverage.rx_packets, 4);
}

/// Sampled by time: the events between a pause's two edges are skipped, the
/// packet in flight when it began is cut there (as at the end of a trace),
/// and counts are scaled by 1 in N where every window was traced whole,
/// with the recording's bounds or without (a window the probes came back
/// late to weighs more: see the pauses' tests).
#[test]
fn a_pause_skips_its_events_cuts_what_is_in_flight_and_scales_by_its_windows() {
    use crate::abi::tt_pause_edge::{TT_PAUSE_BEGIN, TT_PAUSE_BOUND, TT_PAUSE_END};
    let edge = |ts_ns: u64, edge: crate::abi::tt_pause_edge| {
        let hdr = tt_hdr {
            ts_ns,
            variant: edge as u8,
            ..Default::default()
        };
        Event::new(hdr, Body::Pause(crate::abi::tt_pause { edge_ns: ts_ns }))
    };
    // 40 packets 100 µs apart, 5 µs each from the driver to the read.
    let start = |i: u64| 1_000_000 + i * 100_000;
    let mut events = Vec::new();
    for i in 0..40u64 {
        let offsets = [0, 1_000, 2_000, 3_000, 4_000, 5_000];
        let seq = 1 + i as u32 * MSS;
        events.extend(rx::full_path(start(i), 0xa00 + i, seq, offsets, 0));
        if i == 10 {
            // Between packet 10's TCP hop and its wakeup.
            events.insert(events.len() - 3, edge(start(10) + 2_500, TT_PAUSE_BEGIN));
        }
    }
    // Before packet 30: packets 11 to 29 fall inside the pause.
    let end_at = events
        .iter()
        .position(|e| e.hdr.ts_ns == start(30))
        .unwrap();
    events.insert(end_at, edge(start(30), TT_PAUSE_END));
    let cfg = PathConfig {
        sample_every: 8,
        sample_slice_ns: 1_000_000,
        ..Default::default()
    };
    let report = run(cfg.clone(), &events);
    assert_eq!(report.evictions.cut_by_pause, 1);
    assert_eq!(report.scale, 8.0);
    // Bounds on the slices' boundaries (1 ms): the first window traced
    // 2 ms whole, the last cut by the recording's end.
    let (first, last) = (start(10) + 2_500 - 2_000_000, start(39) + 2_000_000);
    let mut bounded = events.clone();
    bounded.insert(0, edge(first, TT_PAUSE_BOUND));
    bounded.push(edge(last, TT_PAUSE_BOUND));
    assert_eq!(run(cfg, &bounded).scale, 8.0);
    // Packets 0 to 10 (10 cut after TCP) and 30 to 39.
    let direct = path(&report, "rx", "direct");
    assert_eq!(direct.sampled_packets, 21);
    assert_eq!(direct.packets, (21.0 * report.scale).round() as u64);
    assert_eq!(stage(direct, "napi").count, 21);
    assert_eq!(stage(direct, "read").count, 20);
    assert!(report.note.contains("by time"), "{}", report.note);
}

/// Block `b` of sequence space starts here.
fn block(b: u32) -> u32 {
    b * crate::event::SAMPLE_BLOCK
}

/// What the analysis sees of `events` when the kernel samples 1 in `every`.
fn kernel_sampled(events: Vec<Event>, every: u32) -> Vec<Event> {
    events.into_iter().filter(|ev| ev.sampled(every)).collect()
}

#[test]
fn sampling_scales_counts_and_keeps_whole_packets() {
    let every = 4;
    // One packet in each of blocks 1 to 64, so each is kept on its own.
    let seqs: Vec<u32> = (1..=64).map(|b| block(b) + 100).collect();
    let mut events = Vec::new();
    for (i, &seq) in seqs.iter().enumerate() {
        let i = i as u64;
        // napi latency 1000 + i: distinct per packet.
        events.extend(rx::full_path(
            1_000 + i * 100_000,
            0xa00,
            seq,
            [0, 1_000 + i, 2_000, 3_000, 4_000, 5_000],
            0,
        ));
    }
    let report = run(
        PathConfig {
            sample_every: every,
            ..Default::default()
        },
        &kernel_sampled(events, every),
    );
    let sampled: Vec<u64> = (0..64u64)
        .filter(|&i| crate::event::sampled_byte(seqs[i as usize], every))
        .collect();
    assert!(
        (8..=24).contains(&sampled.len()),
        "{} of 64 sampled",
        sampled.len()
    );
    let direct = path(&report, "rx", "direct");
    assert_eq!(report.sample_every, every);
    assert_eq!(
        (direct.sampled_packets, direct.packets),
        (sampled.len() as u64, sampled.len() as u64 * every as u64)
    );
    let napi = stage(direct, "napi");
    assert_eq!(napi.count, sampled.len() as u64);
    assert_eq!(napi.max_ns, 1_000 + sampled.last().unwrap());
    assert_eq!(
        napi.total_ns,
        sampled.iter().map(|i| 1_000 + i).sum::<u64>() * every as u64
    );
    // Every sampled packet went all the way: the kernel kept each of its hops.
    assert_eq!(report.coverage.rx_complete, sampled.len() as u64);
    assert!(report.note.contains("scaled by 4"));
}

#[test]
fn sampling_follows_a_kept_unit_through_merges_and_split_reads() {
    // 1 in 4: block 5 is not chosen, block 6 is. Four packets; only the
    // last ends in block 6, so only it is kept, though it starts in block 5.
    let every = 4;
    let p: Vec<u32> = (0..4).map(|k| block(6) - 3_500 + k * MSS).collect();
    let end = p[3] + MSS;
    let mut events = Vec::new();
    for (k, &seq) in p.iter().enumerate() {
        let t = 1_000 + k as u64 * 1_000;
        events.push(rx::entry(t, 0xa00, seq, MSS));
        events.push(rx::netif(t + 100, 0xa00, seq, MSS, 1));
    }
    // The reader released the socket at 10 µs: backlog coalescing made two
    // skbs of two packets each; the first lies in block 5 and is dropped.
    events.push(rx::tcp(10_000, 0xb00, p[0], 2 * MSS, p[0], 1));
    events.push(rx::tcp(10_500, 0xb01, p[2], 2 * MSS, p[2], 1));
    events.extend([
        rx::ready(11_000, end, p[0]),
        rx::copy(12_000, 0xb00, p[0], p[2], 2 * MSS),
        rx::copy(12_200, 0xb01, p[2], end, 2 * MSS),
        // The first read ends inside the kept packet, in block 5: dropped.
        // The second returns the rest, the kept packet's last byte with it.
        rx::read(13_000, 2_800, p[3] + 200),
        rx::read(14_000, 800, end),
    ]);
    let kept = kernel_sampled(events, every);
    assert_eq!(
        kept.len(),
        6,
        "entry, netif, tcp, ready, copy, read of one packet"
    );
    let report = run(
        PathConfig {
            sample_every: every,
            ..Default::default()
        },
        &kept,
    );
    let backlog = path(&report, "rx", "backlog");
    assert_eq!((backlog.sampled_packets, backlog.packets), (1, 4));
    assert_eq!(report.coverage.rx_complete, 1);
    // The kept packet: driver 4 µs, netif 4.1, tcp 10.5, ready 11, copy 12.2, read 14.
    for (name, ns) in [
        ("napi", 100),
        ("ip_tcp", 6_400),
        ("tcp_queue", 500),
        ("socket_queue", 1_200),
        ("read", 1_800),
    ] {
        let s = stage(backlog, name);
        assert_eq!(
            (s.count, s.p50_ns, s.max_ns, s.total_ns),
            (1, ns, ns, ns * 4),
            "{name}"
        );
    }
    assert_eq!((backlog.total.count, backlog.total.p50_ns), (1, 10_000));
}

#[test]
fn sampling_counts_tx_segments_by_their_first_byte() {
    let s = tx::State {
        snd_una: block(6) - 2_000,
        snd_nxt: block(6) - 2_000,
        snd_cwnd: 10,
        snd_wnd: 65535,
        packets_out: 0,
        ..Default::default()
    };
    let every = 4;
    let events = vec![
        // Writes of 1000 bytes: the first lies in block 5 (not chosen), the second in 6.
        tx::sendmsg(20_000, block(6) - 2_000, s.snd_una),
        tx::sendmsg(30_000, block(6), s.snd_una),
        // One TSO skb of 4 segments; the last two start in block 6.
        tx::queue(50_000, 0x700, block(6) - 2_000, 4 * MSS, 4, s),
        // Software GSO: the head piece lies in block 5, the kept bytes in the second.
        tx::start_xmit(51_000, 0x801, block(6) - 2_000, 2 * MSS),
        tx::xmit(52_000, 0x801, block(6) - 2_000, 2 * MSS),
        tx::start_xmit(52_500, 0x802, block(6), 2 * MSS),
        tx::xmit(53_000, 0x802, block(6), 2 * MSS),
    ];
    let kept = kernel_sampled(events, every);
    assert_eq!(
        kept.len(),
        4,
        "the second write, the skb and its second piece"
    );
    let report = run(
        PathConfig {
            sample_every: every,
            ..Default::default()
        },
        &kept,
    );
    let at_once = path(&report, "tx", "at_once");
    assert_eq!((at_once.sampled_packets, at_once.packets), (2, 8));
    // Both kept segments were written at 30 µs and queued at 50 µs.
    let tcp = stage(at_once, "tcp");
    assert_eq!(
        (tcp.count, tcp.max_ns, tcp.total_ns),
        (2, 20_000, 8 * 20_000)
    );
    let qdisc = stage(at_once, "qdisc");
    assert_eq!(
        (qdisc.count, qdisc.max_ns, qdisc.total_ns),
        (2, 2_500, 8 * 2_500)
    );
    let driver = stage(at_once, "driver");
    assert_eq!(
        (driver.count, driver.max_ns, driver.total_ns),
        (2, 500, 8 * 500)
    );
    assert_eq!(report.coverage.tx_complete, 2);
}

#[test]
fn napi_batching() {
    let poll = |ts, work| {
        let body = tt_napi_poll {
            work,
            budget: 64,
            ifindex: 3,
            napi: 0xffff_8880_1234_0000,
            ..Default::default()
        };
        Event::new(
            tt_hdr {
                ts_ns: ts,
                cpu: 0,
                ..Default::default()
            },
            Body::NapiPoll(body),
        )
    };
    let polls = [
        poll(1_000, 64),
        poll(2_000, 10),
        poll(3_000, 64),
        poll(4_000, 3),
    ];
    let report = run(PathConfig::default(), &polls);
    let napi = &report.napi[0];
    assert_eq!(
        (
            napi.ifindex,
            napi.polls,
            napi.packets,
            napi.polls_at_budget,
            napi.budget
        ),
        (3, 4, 141, 2, 64)
    );
    assert_eq!((napi.work_p50, napi.work_max), (10, 64));
    assert_eq!(napi.work_histogram, [[3, 1], [10, 1], [64, 2]]);
    assert_eq!(napi.at_budget_share, 0.5);

    // Sampling keeps every 8th poll of a CPU: counts scale back, shares and
    // quantiles stay.
    let sampled = PathConfig {
        sample_every: 8,
        ..PathConfig::default()
    };
    let napi = &run(sampled, &polls).napi[0];
    assert_eq!(
        (napi.polls, napi.packets, napi.polls_at_budget),
        (32, 1128, 16)
    );
    assert_eq!(
        (napi.work_p50, napi.work_max, napi.work_mean),
        (10, 64, 35.25)
    );
    assert_eq!(napi.work_histogram, [[3, 8], [10, 8], [64, 16]]);
    assert_eq!(napi.at_budget_share, 0.5);
}

/// One TX flow (at once) and one RX flow (direct), for the exporters.
fn two_flows() -> PathReport {
    let s = tx::State {
        snd_una: 1000,
        snd_nxt: 1000,
        snd_cwnd: 10,
        snd_wnd: 65535,
        packets_out: 0,
        ..Default::default()
    };
    let mut events = vec![
        tx::sendmsg(1_000, 1000, 1000),
        tx::queue(6_000, 0x200, 1000, 1000, 1, s),
        tx::start_xmit(7_000, 0x200, 1000, 1000),
        tx::xmit(9_000, 0x200, 1000, 1000),
    ];
    events.extend(rx::full_path(
        100_000,
        0xa00,
        5000,
        [0, 2_000, 3_000, 3_500, 19_000, 20_000],
        0,
    ));
    run(PathConfig::default(), &events)
}

#[test]
fn folded_paths_per_stage_and_per_flow() {
    let report = two_flows();
    let rx_lines = [
        "rx;single;direct;in_order;ip_tcp 1000",
        "rx;single;direct;in_order;napi 2000",
        "rx;single;direct;in_order;read 1000",
        "rx;single;direct;in_order;socket_queue 15500",
        "rx;single;direct;in_order;tcp_queue 500",
    ];
    let tx_lines = [
        "tx;at_once;driver 2000",
        "tx;at_once;qdisc 1000",
        "tx;at_once;tcp 5000",
    ];
    let mut all: Vec<&str> = rx_lines.into_iter().chain(tx_lines).collect();
    all.sort();
    assert_eq!(folded_paths(&report, None), all);
    assert_eq!(folded_paths(&report, Some(TX_COOKIE)), tx_lines);
    assert_eq!(folded_paths(&report, Some(RX_COOKIE)), rx_lines);
    assert!(folded_paths(&report, Some(12345)).is_empty());
    // Each direction a million: RX's 20000 ns and TX's 8000 ns, in parts.
    let shares = per_direction_shares(&folded_paths(&report, None));
    assert!(shares.contains(&"rx;single;direct;in_order;socket_queue 775000".to_string()));
    assert!(shares.contains(&"tx;at_once;tcp 625000".to_string()));
    for direction in ["rx;", "tx;"] {
        let sum: u64 = shares
            .iter()
            .filter(|l| l.starts_with(direction))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert_eq!(sum, 1_000_000, "{direction} {shares:?}");
    }

    let mut svg = Vec::new();
    render_paths_svg(&folded_paths(&report, None), "stage costs", "ns", &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.starts_with("<?xml"));
    for name in [
        "stage costs",
        "socket_queue",
        "napi",
        "at_once",
        "qdisc",
        "direct",
    ] {
        assert!(svg.contains(name), "svg lacks {name}");
    }
}

#[test]
fn folded_cpu_adds_up_equal_stacks() {
    let stack = |frames: &[&str], n| (frames.iter().map(|f| f.to_string()).collect::<Vec<_>>(), n);
    let samples = vec![
        stack(&["main", "tcp_sendmsg", "copy"], 3),
        stack(&["main", "odd name;x"], 1),
        stack(&["main", "tcp_sendmsg", "copy"], 2),
        stack(&[], 9),
    ];
    assert_eq!(
        folded_cpu(samples.into_iter()),
        ["main;odd_name:x 1", "main;tcp_sendmsg;copy 5"]
    );
}

#[test]
fn table_is_aligned() {
    let table = two_flows().render_table(None);
    let lines: Vec<&str> = table.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("direction") && l.contains("tcp p50/p99/max"))
        .unwrap();
    let row = lines[header + 1];
    assert!(row.starts_with("tx") && row.contains("at_once"), "{table}");
    assert!(
        row.contains("5.0 µs/5.0 µs/5.0 µs") && row.contains("100.0%"),
        "{table}"
    );
    // Right-aligned: the share column ends at the same character in both.
    let end_of = |line: &str, pat: &str| {
        line.char_indices()
            .find(|(i, _)| line[*i..].starts_with(pat))
            .unwrap()
            .0
            + pat.len()
    };
    assert_eq!(end_of(lines[header], "share"), end_of(row, "%"));
    assert!(table.contains("socket_queue p50/p99/max"));
    assert!(table.contains("coverage"));
    assert!(table.contains("counts: every packet traced"));
}

#[test]
fn report_serializes_with_the_agreed_fields() {
    let json = serde_json::to_value(two_flows()).unwrap();
    let entry = &json["paths"][0];
    for field in ["direction", "path", "packets", "stages"] {
        assert!(entry.get(field).is_some(), "{field}");
    }
    for field in ["stage", "p50_ns", "p90_ns", "p99_ns", "max_ns", "count"] {
        assert!(entry["stages"][0].get(field).is_some(), "{field}");
    }
    for field in [
        "path_flows",
        "napi",
        "sample_every",
        "coverage",
        "evictions",
    ] {
        assert!(json.get(field).is_some(), "{field}");
    }
}

/// A full token bucket refuses an skb of new data: TCP keeps it, snd_nxt
/// where it was, and queues it again later. Its write is still the one
/// that wrote it, and it waited in TCP until the attempt that left.
#[test]
fn an_skb_the_qdisc_refused_is_queued_again_with_its_write() {
    let s = tx::State {
        snd_una: 1000,
        snd_nxt: 1000,
        snd_cwnd: 10,
        snd_wnd: 65535,
        write_seq: 3000,
        ..Default::default()
    };
    let refused = tt_kfree_skb {
        seq: 1000,
        len: 2000,
        reason: 2,
        ..Default::default()
    };
    let events = [
        tx::sendmsg(1_000, 1000, 1000),
        tx::sendmsg(2_000, 2000, 1000),
        tx::queue(10_000, 0x200, 1000, 2000, 2, s),
        Event::new(
            hdr(11_000, SENDER, RECEIVER, 0x200, 0),
            Body::KfreeSkb(refused),
        ),
        tx::queue(500_000, 0x300, 1000, 2000, 2, s),
        tx::start_xmit(500_100, 0x300, 1000, 2000),
        tx::xmit(500_300, 0x300, 1000, 2000),
    ];
    let report = run(PathConfig::default(), &events);
    assert!(report.paths.iter().all(|p| p.path != "write_unseen"));
    // Each segment counted at each attempt: at once at the first, held
    // for the whole wait from its write at the second.
    assert_eq!(path(&report, "tx", "at_once").packets, 2);
    let held = path(&report, "tx", "held_pacing_tsq");
    assert_eq!(held.packets, 2);
    assert_eq!(stage(held, "tcp").max_ns, 499_000);
    assert_eq!(report.evictions.dropped, 1);
}

#[test]
fn tx_retransmits_and_unseen_writes() {
    let s = tx::State {
        snd_una: 1000,
        snd_nxt: 3000,
        snd_cwnd: 10,
        snd_wnd: 65535,
        packets_out: 0,
        ..Default::default()
    };
    let events = [
        // No sendmsg before the trace started: [3000, 4000) is new data of an unseen write.
        tx::queue(1_000, 0x200, 3000, 1000, 1, s),
        // [1000, 2000) again, below snd_nxt: a retransmission.
        tx::queue(2_000, 0x300, 1000, 1000, 1, s),
        tx::start_xmit(2_100, 0x300, 1000, 1000),
        tx::xmit(2_300, 0x300, 1000, 1000),
    ];
    let report = run(PathConfig::default(), &events);
    let unseen = path(&report, "tx", "write_unseen");
    assert_eq!((unseen.packets, stage(unseen, "tcp").count), (1, 0));
    let rtx = path(&report, "tx", "retransmit");
    assert_all(rtx, "qdisc", 1, 100);
    assert_all(rtx, "driver", 1, 200);
    // Neither has its TCP stage; the unseen one also never reached the driver.
    assert_eq!(
        (report.coverage.tx_packets, report.coverage.tx_complete),
        (2, 0)
    );
    assert_eq!(report.evictions.in_flight_at_end, 1);
}

/// More small writes wait than a flow keeps (iperf3 -l 100 into a closed
/// window): they are merged in pairs, never the oldest dropped, so every
/// segment finds its own write or one a few µs before it.
#[test]
fn writes_past_the_queue_are_merged_and_every_segment_finds_one() {
    let cfg = PathConfig {
        max_pending_per_flow: 16,
        ..Default::default()
    };
    // 50 writes of 100 B, one per µs, into a window used up at 1000.
    let mut events: Vec<Event> = (0..50u32)
        .map(|k| tx::sendmsg(u64::from(k) * 1_000, 1000 + k * 100, 1000))
        .collect();
    let open = tx::State {
        snd_una: 1000,
        snd_cwnd: 10,
        snd_wnd: 65535,
        write_seq: 6000,
        ..Default::default()
    };
    // The window opens at 5 ms: five segments of 1000 B leave.
    for k in 0..5u32 {
        let (seq, skb) = (1000 + k * MSS, 0x700 + u64::from(k) * 0x100);
        let state = tx::State {
            snd_nxt: seq,
            packets_out: k,
            ..open
        };
        events.push(tx::queue(5_000_000, skb, seq, MSS, 1, state));
    }
    let report = run(cfg, &events);
    assert!(report.paths.iter().all(|p| p.path != "write_unseen"));
    assert_eq!(report.evictions.writes_dropped, 0);
    assert!(report.evictions.writes_merged >= 25);
    // Segment k's first byte was written at 10k µs and left at 5 ms: the
    // write found for it is its own or, merged, one of the few before it.
    let tx: Vec<_> = report
        .paths
        .iter()
        .filter(|p| p.direction == "tx")
        .collect();
    assert_eq!(tx.iter().map(|p| stage(p, "tcp").count).sum::<u64>(), 5);
    for p in tx {
        let tcp = stage(p, "tcp");
        assert!(tcp.max_ns <= 5_000_000, "{}: {tcp:?}", p.path);
        assert!(
            (4_980_000..=4_996_000).contains(&tcp.mean_ns),
            "{}: {tcp:?}",
            p.path
        );
    }
}

#[test]
#[ignore = "timing: cargo test --release --lib paths::tests::throughput -- --ignored --nocapture"]
fn throughput() {
    let n = 200_000u32;
    let mut events = Vec::with_capacity(n as usize * 10);
    for i in 0..n {
        let (t, seq) = (1_000 + i as u64 * 10_000, 1000u32.wrapping_add(i * MSS));
        let s = tx::State {
            snd_una: seq,
            snd_nxt: seq,
            snd_cwnd: 10,
            snd_wnd: 65535,
            packets_out: 0,
            ..Default::default()
        };
        events.push(tx::sendmsg(t, seq, seq));
        events.push(tx::queue(t + 1_000, 0x200, seq, MSS, 1, s));
        events.push(tx::start_xmit(t + 1_100, 0x200, seq, MSS));
        events.push(tx::xmit(t + 1_200, 0x200, seq, MSS));
        events.extend(rx::full_path(
            t,
            0xa00,
            seq,
            [0, 100, 200, 300, 400, 500],
            0,
        ));
    }
    let started = std::time::Instant::now();
    let report = run(PathConfig::default(), &events);
    let elapsed = started.elapsed();
    println!(
        "{} events in {elapsed:?}: {:.0} ns/event",
        events.len(),
        elapsed.as_nanos() as f64 / events.len() as f64
    );
    assert_eq!(
        (report.coverage.tx_complete, report.coverage.rx_complete),
        (n as u64, n as u64)
    );
}

#[test]
fn live_stage_latencies_bucket_every_measured_packet() {
    let mut analyzer = PathAnalyzer::new(PathConfig::default());
    for ev in tx_hold_events() {
        analyzer.push(&ev);
    }
    let bounds = [1_000, 100_000, 1_000_000];
    let live = analyzer.stage_latencies(&bounds);
    let stage = |name: &str| live.iter().find(|s| s.stage == name).unwrap();
    // tcp: 5 µs, then 300, 390 and 200 µs held (see tx_at_once_and_held_by_cwnd_rwnd_pacing).
    let tcp = stage("tcp");
    assert_eq!((tcp.direction, tcp.count, tcp.sum_ns), ("tx", 4, 895_000));
    assert_eq!(tcp.buckets, [0, 1, 3, 0]);
    // qdisc 1000, 1000, 100, 300 ns: all at or below the first bound.
    assert_eq!(
        (stage("qdisc").sum_ns, &stage("qdisc").buckets[..]),
        (2_400, &[4, 0, 0, 0][..])
    );
    // driver 2000, 500, 100, 100 ns.
    assert_eq!(
        (stage("driver").sum_ns, &stage("driver").buckets[..]),
        (2_700, &[3, 1, 0, 0][..])
    );
    // Every RX stage is listed, empty.
    assert_eq!(live.len(), 3 + 5);
    assert!(live
        .iter()
        .filter(|s| s.direction == "rx")
        .all(|s| s.count == 0 && s.buckets == [0; 4]));
}
