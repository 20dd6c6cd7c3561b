//! Retirement over a stream of many short connections: state stays bounded,
//! and the report is the one of the same stream analysed without it.

use super::*;
use crate::event::{tt_hdr, tt_napi_poll, Body};
use crate::synth::{Connection, Ending, Socket};
use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddrV4};

const MSS: u32 = 1000;
const CONNECTIONS: u32 = 300;
/// A connection starts every 10 ms and lasts at most 0.7 ms.
const START_EVERY_NS: u64 = 10_000_000;
const SEGMENT_EVERY_NS: u64 = 100_000;
const IDLE_NS: u64 = 50_000_000;
const CLOSED_LINGER_NS: u64 = 2_000_000;

/// Connection `index` of the stream: every segment written, read and ACKed
/// on its own.
fn connection(index: u32) -> Connection {
    let start_ns = u64::from(index) * START_EVERY_NS;
    let sender_cookie = 1000 + 2 * u64::from(index);
    Connection {
        index,
        sender: Socket {
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 10_000 + index as u16),
            cookie: sender_cookie,
        },
        receiver: Socket {
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 5201),
            cookie: sender_cookie + 1,
        },
        cpu: 1,
        mss: MSS,
        first_seq: 1,
        // 1 to 7 segments: the connections differ in bytes.
        segments: 1 + index % 7,
        established_ns: start_ns,
        first_segment_ns: start_ns + 1000,
        segment_every_ns: SEGMENT_EVERY_NS,
        send_every: 1,
        read_every: 1,
        ack_every: 1,
        // Every third sender has data waiting and the receiver's 500-byte
        // window (win_raw 500, unscaled at the sender) below its MSS:
        // rwnd-limited, a finding.
        win_raw: 500,
        unsent_segments: index.is_multiple_of(3).then_some(9),
        // Every seventh receiver leaves its last segment unread: it waits in
        // the socket queue past `app_wait_ns` (a stale eviction), after the close.
        unread_last: index % 7 == 6,
        ending: match index % 5 {
            // Both go silent: retired when idle.
            0 => Ending::Open,
            // The receiver goes silent: retired when idle.
            1 => Ending::SenderCloses,
            _ => Ending::BothClose,
        },
    }
}

/// Every connection, then a NAPI poll late enough that the silent ones are
/// past the idle timeout and its next check.
fn stream() -> Vec<Event> {
    let mut evs: Vec<Event> = (0..CONNECTIONS)
        .flat_map(|i| connection(i).events())
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
        .filter(|&i| connection(i).ending != Ending::BothClose)
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
