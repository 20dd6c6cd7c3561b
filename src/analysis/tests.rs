//! Retirement over a stream of many short connections: state stays bounded,
//! and the report is the one of the same stream analysed without it.

use super::*;
use crate::event::{
    abi_addr, tt_app_read, tt_copy_datagram, tt_data_ready, tt_hdr, tt_napi_poll, tt_pkt,
    tt_sendmsg, tt_state, tt_tcp_rcv, tt_window_adv, Body,
};
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddrV4};

const MSS: u32 = 1000;
/// `TCP_CLOSE` of include/net/tcp_states.h.
const TCP_CLOSE: u8 = 7;
const CONNECTIONS: u32 = 300;
/// A connection starts every 10 ms and lasts at most 0.7 ms.
const START_EVERY_NS: u64 = 10_000_000;
const SEGMENT_EVERY_NS: u64 = 100_000;
const IDLE_NS: u64 = 50_000_000;
const CLOSED_LINGER_NS: u64 = 2_000_000;
const TCP_ESTABLISHED: u8 = 1;

/// How a connection ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    BothClose,
    /// The sender closes; the receiver goes silent (retired when idle).
    SenderCloses,
    /// Both go silent.
    Silent,
}

struct Connection {
    index: u32,
    sender: SocketAddrV4,
    receiver: SocketAddrV4,
}

impl Connection {
    fn new(index: u32) -> Connection {
        Connection {
            index,
            sender: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 10_000 + index as u16),
            receiver: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 5201),
        }
    }

    fn sender_cookie(&self) -> u64 {
        1000 + 2 * u64::from(self.index)
    }

    fn receiver_cookie(&self) -> u64 {
        self.sender_cookie() + 1
    }

    fn end(&self) -> End {
        match self.index % 5 {
            0 => End::Silent,
            1 => End::SenderCloses,
            _ => End::BothClose,
        }
    }

    /// Every third sender has data waiting and the receiver's 500-byte
    /// window (win_raw 500, no scaling) below its MSS: rwnd-limited, a finding.
    fn starved(&self) -> bool {
        self.index.is_multiple_of(3)
    }

    /// Every seventh receiver leaves its last segment unread: it waits in the
    /// socket queue past `app_wait_ns` (a stale eviction), after the close.
    fn unread(&self, seg: u32) -> bool {
        self.index % 7 == 6 && seg + 1 == self.segments()
    }

    /// 1 to 7 segments: the connections differ in bytes.
    fn segments(&self) -> u32 {
        1 + self.index % 7
    }

    fn start_ns(&self) -> u64 {
        u64::from(self.index) * START_EVERY_NS
    }

    /// An event from `from` to `to` (socket events: the local end first).
    fn event(&self, from_sender: bool, cookie: u64, ts_ns: u64, body: Body) -> Event {
        let (from, to) = if from_sender {
            (self.sender, self.receiver)
        } else {
            (self.receiver, self.sender)
        };
        let (family, saddr) = abi_addr((*from.ip()).into());
        let (_, daddr) = abi_addr((*to.ip()).into());
        let hdr = tt_hdr {
            ts_ns,
            sock_cookie: cookie,
            skb: 0xffff_8880_0000_0000 | u64::from(self.index) << 12,
            saddr,
            daddr,
            sport: from.port(),
            dport: to.port(),
            family,
            cpu: 1,
            netns: 4026531840,
            ..tt_hdr::default()
        };
        Event::new(hdr, body)
    }

    fn state(&self, from_sender: bool, ts_ns: u64, newstate: u8) -> Event {
        let cookie = if from_sender {
            self.sender_cookie()
        } else {
            self.receiver_cookie()
        };
        let body = Body::State(tt_state {
            newstate,
            advmss: MSS as u16,
            mss_cache: MSS,
            ..tt_state::default()
        });
        self.event(from_sender, cookie, ts_ns, body)
    }

    /// Every event of the connection: the handshake's states, each segment
    /// through every hop on both paths with its ACK back, and the close.
    fn events(&self) -> Vec<Event> {
        let (s, r) = (self.sender_cookie(), self.receiver_cookie());
        let t0 = self.start_ns();
        let mut evs = vec![
            self.state(true, t0, TCP_ESTABLISHED),
            self.state(false, t0, TCP_ESTABLISHED),
        ];
        let window = |seq, ack, len| tt_window_adv {
            seq,
            ack,
            len,
            window: 64_000,
            win_raw: 500,
            rcv_wscale: 7,
            gso_segs: 1,
            gso_size: MSS as u16,
            sk_rcvbuf: 131_072,
            window_clamp: 65_535 << 7,
            rcv_ssthresh: 64_000,
            rcv_mss: MSS,
            rcv_wnd: 64_000,
            advmss: MSS as u16,
            scaling_ratio: 128,
            snd_wnd: 64_000,
            snd_cwnd: 10,
            mss_cache: MSS,
            ..tt_window_adv::default()
        };
        let pkt = |seq, ack, len| tt_pkt {
            seq,
            ack,
            len,
            skb_len: len + 52,
            gso_segs: 1,
            gso_size: MSS as u16,
            win_raw: 500,
            tcp_flags: 0x10,
            ifindex: 2,
            ..tt_pkt::default()
        };
        for seg in 0..self.segments() {
            let t = t0 + 1000 + u64::from(seg) * SEGMENT_EVERY_NS;
            let seq = 1 + seg * MSS;
            let rcv_nxt = seq + MSS;
            let data = pkt(seq, 1, MSS);
            let ack = pkt(1, rcv_nxt, 0);
            let mut at = |from_sender, cookie, dt, body| {
                evs.push(self.event(from_sender, cookie, t + dt, body));
            };
            at(
                true,
                s,
                0,
                Body::Sendmsg(tt_sendmsg {
                    write_seq: seq,
                    msg_left: MSS,
                    size_goal: MSS,
                    snd_una: seq,
                    snd_nxt: seq,
                    sk_sndbuf: 1 << 20,
                    ..tt_sendmsg::default()
                }),
            );
            at(true, s, 1_000, Body::WindowAdv(window(seq, 1, MSS)));
            at(true, s, 2_000, Body::DevStartXmit(data));
            at(true, s, 2_500, Body::DevXmit(data));
            at(true, 0, 10_000, Body::RxEntry(data));
            at(true, 0, 12_000, Body::NetifReceive(data));
            at(
                false,
                r,
                14_000,
                Body::TcpRcv(tt_tcp_rcv {
                    seq,
                    end_seq: rcv_nxt,
                    ack: 1,
                    len: MSS,
                    win_raw: 500,
                    tcp_flags: 0x10,
                    snd_wscale: 7,
                    rcv_nxt: seq,
                    rcv_mss: MSS,
                    mss_cache: MSS,
                    ..tt_tcp_rcv::default()
                }),
            );
            at(
                false,
                r,
                15_000,
                Body::DataReady(tt_data_ready {
                    rcv_nxt,
                    copied_seq: seq,
                    sk_rmem_alloc: MSS,
                    sk_rcvbuf: 131_072,
                }),
            );
            if !self.unread(seg) {
                at(
                    false,
                    r,
                    20_000,
                    Body::CopyDatagram(tt_copy_datagram {
                        seq,
                        end_seq: rcv_nxt,
                        len: MSS,
                        ..tt_copy_datagram::default()
                    }),
                );
                at(
                    false,
                    r,
                    21_000,
                    Body::AppRead(tt_app_read {
                        ret: MSS as i32,
                        copied_seq: rcv_nxt,
                        rcv_nxt,
                        sk_rcvbuf: 131_072,
                        rcv_wnd: 64_000,
                        ..tt_app_read::default()
                    }),
                );
            }
            at(false, r, 22_000, Body::WindowAdv(window(1, rcv_nxt, 0)));
            at(false, r, 23_000, Body::DevStartXmit(ack));
            at(false, r, 23_500, Body::DevXmit(ack));
            at(false, 0, 30_000, Body::RxEntry(ack));
            at(false, 0, 31_000, Body::NetifReceive(ack));
            at(
                true,
                s,
                32_000,
                Body::TcpRcv(tt_tcp_rcv {
                    seq: 1,
                    end_seq: 1,
                    ack: rcv_nxt,
                    win_raw: 500,
                    tcp_flags: 0x10,
                    snd_una: seq,
                    snd_nxt: rcv_nxt,
                    write_seq: if self.starved() { seq + 10 * MSS } else { 0 },
                    snd_wnd: 64_000,
                    snd_cwnd: 10,
                    mss_cache: MSS,
                    ..tt_tcp_rcv::default()
                }),
            );
        }
        let closed = t0 + 1000 + u64::from(self.segments()) * SEGMENT_EVERY_NS;
        if self.end() != End::Silent {
            evs.push(self.state(true, closed, TCP_CLOSE));
        }
        if self.end() == End::BothClose {
            evs.push(self.state(false, closed + 50_000, TCP_CLOSE));
            // The sender's owner reads on to the end after the close, as an active closer does.
            let eof = Body::AppRead(tt_app_read::default());
            evs.push(self.event(true, s, closed + 100_000, eof));
        }
        evs
    }
}

/// Every connection, then a NAPI poll late enough that the silent ones are
/// past the idle timeout and its next check.
fn stream() -> Vec<Event> {
    let mut evs: Vec<Event> = (0..CONNECTIONS)
        .flat_map(|i| Connection::new(i).events())
        .collect();
    let last = evs.iter().map(|e| e.hdr.ts_ns).max().unwrap();
    evs.push(Event::new(
        tt_hdr {
            ts_ns: last + 2 * IDLE_NS,
            ..tt_hdr::default()
        },
        Body::NapiPoll(tt_napi_poll {
            ifindex: 2,
            work: 1,
            budget: 64,
            ..tt_napi_poll::default()
        }),
    ));
    evs.sort_by_key(|e| e.hdr.ts_ns);
    evs
}

/// Unread data is given up on after 200 ms, within the stream.
fn config(retire: Option<RetireConfig>) -> AnalysisConfig {
    let mut cfg = AnalysisConfig {
        retire,
        ..AnalysisConfig::default()
    };
    cfg.paths.app_wait_ns = 200_000_000;
    cfg
}

fn json(report: &Report) -> Value {
    let mut value = serde_json::to_value(report).unwrap();
    value.as_object_mut().unwrap().remove("tool_version");
    value
}

/// The report without its per-socket rows and the retirement counters.
fn aggregates(report: &Report) -> Value {
    let mut value = json(report);
    for rows in ["flows", "sockets", "path_flows", "retirement"] {
        value.as_object_mut().unwrap().remove(rows);
    }
    value
}

fn by_cookie(rows: &Value, cookie: &str) -> Vec<Value> {
    let mut rows = rows.as_array().unwrap().clone();
    rows.sort_by_key(|r| r[cookie].as_u64());
    rows
}

#[test]
fn retirement_keeps_state_bounded_and_the_report_unchanged() {
    let events = stream();
    let mut full = Analysis::new(config(None));
    for ev in &events {
        full.push(ev);
    }
    let full = full.finish(Provenance::default());
    let sockets = 2 * CONNECTIONS as usize;
    assert_eq!(full.sockets.len(), sockets);
    assert_eq!(full.flows.len(), sockets);
    assert!(full.path_costs.coverage.rx_complete > 0);
    // Connections 6, 13, .. 293 leave a segment unread: 42 segments, given
    // up on 200 ms later but for the last one (2.93 s), 100 ms before the end.
    let evictions = &full.path_costs.evictions;
    assert_eq!((evictions.stale, evictions.in_flight_at_end), (41, 1));

    let max_rows = 40;
    let cfg = RetireConfig {
        idle_ns: Some(IDLE_NS),
        closed_linger_ns: CLOSED_LINGER_NS,
        max_rows,
    };
    let mut retiring = Analysis::new(config(Some(cfg.clone())));
    let mut most_live = (0, 0, 0);
    for ev in &events {
        retiring.push(ev);
        let live = (
            retiring.flows.slots(),
            retiring.window.slots(),
            retiring.paths.slots(),
        );
        most_live = (
            most_live.0.max(live.0),
            most_live.1.max(live.1),
            most_live.2.max(live.2),
        );
    }
    // (a) Looks every millisecond: a silent socket goes within 51 ms of the
    // idle timeout, a closed one within 3 ms of its last event: at most 6
    // connections (10 ms apart) live at once, 12 sockets; the paths add one
    // sweep (100 ms): 16 connections.
    assert!(most_live.0 <= 12 && most_live.1 <= 12, "{most_live:?}");
    assert!(most_live.2 <= 32, "{most_live:?}");
    assert_eq!(retiring.flows().len(), 0);
    let report = retiring.finish(Provenance::default());

    // (b) Aggregates as without retirement.
    assert_eq!(aggregates(&report), aggregates(&full));

    // (c) Every socket retired; the rows kept are those with window
    // findings, then the busiest; the others are summed.
    let retirement = report.retirement.clone().unwrap();
    assert_eq!(retirement.flows_retired, sockets as u64);
    assert_eq!(retirement.rows_folded, (sockets - max_rows) as u64);
    assert_eq!(report.sockets.len(), max_rows);
    let findings: std::collections::HashSet<u64> = full
        .flows
        .iter()
        .filter(|f| !f.advice.is_empty())
        .map(|f| f.sock_cookie)
        .collect();
    let mut ranked: Vec<&FlowInfo> = full.sockets.iter().collect();
    ranked.sort_by_key(|f| {
        std::cmp::Reverse((
            findings.contains(&f.sock_cookie),
            f.bytes_sent + f.bytes_received,
            f.sock_cookie,
        ))
    });
    let (kept, folded) = ranked.split_at(max_rows);
    let mut kept_cookies: Vec<u64> = kept.iter().map(|f| f.sock_cookie).collect();
    let mut shown: Vec<u64> = report.sockets.iter().map(|f| f.sock_cookie).collect();
    kept_cookies.sort_unstable();
    shown.sort_unstable();
    assert_eq!(shown, kept_cookies);
    let sum = |f: fn(&FlowInfo) -> u64| folded.iter().map(|s| f(s)).sum::<u64>();
    assert_eq!(retirement.folded.events, sum(|s| s.events));
    assert_eq!(retirement.folded.bytes_sent, sum(|s| s.bytes_sent));
    assert_eq!(retirement.folded.bytes_received, sum(|s| s.bytes_received));
    // The kept rows are the full report's rows.
    let full_json = json(&full);
    let kept_rows = |rows: &Value| -> Vec<Value> {
        by_cookie(rows, "sock_cookie")
            .into_iter()
            .filter(|r| shown.contains(&r["sock_cookie"].as_u64().unwrap()))
            .collect()
    };
    let report_json = json(&report);
    for rows in ["flows", "sockets"] {
        assert_eq!(
            by_cookie(&report_json[rows], "sock_cookie"),
            kept_rows(&full_json[rows]),
            "{rows}"
        );
    }
    assert_eq!(report_json["path_flows"], full_json["path_flows"]);
}

#[test]
fn with_room_for_every_row_the_report_is_the_full_one() {
    let events = stream();
    let run = |retire| {
        let mut analysis = Analysis::new(config(retire));
        for ev in &events {
            analysis.push(ev);
        }
        json(&analysis.finish(Provenance::default()))
    };
    let full = run(None);
    let mut retired = run(Some(RetireConfig {
        idle_ns: Some(IDLE_NS),
        closed_linger_ns: CLOSED_LINGER_NS,
        max_rows: usize::MAX,
    }));
    let retirement = retired
        .as_object_mut()
        .unwrap()
        .remove("retirement")
        .unwrap();
    assert_eq!(retirement["flows_retired"], 2 * CONNECTIONS);
    assert_eq!(retirement["rows_folded"], 0);
    for rows in ["flows", "sockets"] {
        retired[rows] = Value::Array(by_cookie(&retired[rows], "sock_cookie"));
    }
    let mut full = full;
    for rows in ["flows", "sockets"] {
        full[rows] = Value::Array(by_cookie(&full[rows], "sock_cookie"));
    }
    assert_eq!(retired, full);
}

#[test]
fn without_an_idle_timeout_only_closed_connections_go() {
    let mut analysis = Analysis::new(config(Some(RetireConfig {
        idle_ns: None,
        closed_linger_ns: CLOSED_LINGER_NS,
        max_rows: 0,
    })));
    for ev in &stream() {
        analysis.push(ev);
    }
    // Silent connections and half-closed ones (their receiver never closes) stay.
    let staying = (0..CONNECTIONS)
        .filter(|&i| Connection::new(i).end() != End::BothClose)
        .count();
    assert_eq!(analysis.flows().len(), 2 * staying);
    let report = analysis.finish(Provenance::default());
    let retirement = report.retirement.unwrap();
    assert_eq!(
        retirement.flows_retired,
        2 * (u64::from(CONNECTIONS) - staying as u64)
    );
    assert_eq!(retirement.rows_folded, retirement.flows_retired);
    assert_eq!(report.sockets.len(), 2 * staying);
}
