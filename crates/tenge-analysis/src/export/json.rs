//! Events as JSON objects (for `dump --json`) and as text lines (for people).
//!
//! The header's fields come first under stable names (`kind`, `ts_ns`, `cpu`,
//! `sock_cookie`, `saddr`, `sport`, `daddr`, `dport`, ...), then the body's
//! fields under the kernel's names, exactly as in `bpf/tenge_abi.h`.

use crate::event::{ip_of, tcp_flags_text, tcp_state_name, Body, Event};
use serde_json::{Map, Value};
use std::fmt::Write;

fn body_value(body: &Body) -> Value {
    let value = match body {
        Body::Sendmsg(b) => serde_json::to_value(b),
        Body::WindowAdv(b) => serde_json::to_value(b),
        Body::DevStartXmit(b) | Body::DevXmit(b) | Body::RxEntry(b) | Body::NetifReceive(b) => {
            serde_json::to_value(b)
        }
        Body::NapiPoll(b) => serde_json::to_value(b),
        Body::TcpRcv(b) => serde_json::to_value(b),
        Body::DataReady(b) => serde_json::to_value(b),
        Body::CopyDatagram(b) => serde_json::to_value(b),
        Body::AppRead(b) => serde_json::to_value(b),
        Body::State(b) => serde_json::to_value(b),
        Body::Retransmit(b) => serde_json::to_value(b),
        Body::KfreeSkb(b) => serde_json::to_value(b),
        Body::CpuSample(b) => serde_json::to_value(b),
        Body::Pause(b) => serde_json::to_value(b),
        Body::SockTask(b) => serde_json::to_value(b).map(|mut v| {
            v["comm"] = comm_text(&b.comm).into();
            v
        }),
    };
    value.expect("ABI bodies serialize")
}

/// A task's command name as the kernel keeps it: up to 16 bytes, NUL-ended.
pub fn comm_text(comm: &[std::ffi::c_char; 16]) -> String {
    tenge_events::os::c_text(comm)
}

/// The hook of an event whose kind several hooks emit.
fn variant_name(ev: &Event) -> Option<&'static str> {
    tenge_events::hooks::variant_tracepoint(ev.kind_name(), ev.hdr.variant)
}

/// Which end of a pause a `pause` record is (`enum tt_pause_edge`).
fn pause_edge(ev: &Event) -> Option<&'static str> {
    use crate::abi::tt_pause_edge::{TT_PAUSE_BEGIN, TT_PAUSE_BOUND, TT_PAUSE_END};
    match (&ev.body, ev.hdr.variant) {
        (Body::Pause(_), v) if v == TT_PAUSE_BEGIN as u8 => Some("begin"),
        (Body::Pause(_), v) if v == TT_PAUSE_END as u8 => Some("end"),
        (Body::Pause(_), v) if v == TT_PAUSE_BOUND as u8 => Some("bound"),
        (Body::Pause(_), _) => Some("unknown"),
        _ => None,
    }
}

/// One event as a JSON object.
pub fn event_json(ev: &Event) -> Value {
    let h = &ev.hdr;
    let mut map = Map::new();
    map.insert("kind".into(), ev.kind_name().into());
    map.insert("ts_ns".into(), h.ts_ns.into());
    map.insert("cpu".into(), h.cpu.into());
    map.insert("sock_cookie".into(), h.sock_cookie.into());
    let addr = |a: &[u8; 16]| ip_of(h.family, a).map_or(Value::Null, |ip| ip.to_string().into());
    map.insert("saddr".into(), addr(&h.saddr));
    map.insert("sport".into(), h.sport.into());
    map.insert("daddr".into(), addr(&h.daddr));
    map.insert("dport".into(), h.dport.into());
    map.insert("netns".into(), h.netns.into());
    map.insert("skb".into(), format!("{:#x}", h.skb).into());
    if let Some(variant) = variant_name(ev) {
        map.insert("hook".into(), variant.into());
    }
    if let Some(edge) = pause_edge(ev) {
        map.insert("edge".into(), edge.into());
    }
    map.extend(body_fields(ev));
    Value::Object(map)
}

/// Body fields that are kernel pointers (or their hashed stand-ins): hex
/// strings, as `skb`, since a JSON number above 2^53 loses digits in most
/// readers (jq among them).
const POINTER_FIELDS: [&str; 2] = ["napi", "location"];

/// The body's fields under the kernel's names, padding left out.
fn body_fields(ev: &Event) -> impl Iterator<Item = (String, Value)> {
    let body = match body_value(&ev.body) {
        Value::Object(body) => body,
        _ => Map::new(),
    };
    body.into_iter()
        .filter(|(k, _)| !k.starts_with("_pad"))
        .map(
            |(k, v)| match (POINTER_FIELDS.contains(&k.as_str()), v.as_u64()) {
                (true, Some(n)) => (k, format!("{n:#x}").into()),
                _ => (k, v),
            },
        )
}

/// One event as a line for people: time, CPU, kind, flow, then the body's
/// fields (TCP states and flags by name, pointers in hex).
pub fn event_text(ev: &Event, out: &mut String) {
    let h = &ev.hdr;
    let _ = write!(
        out,
        "{:>10}.{:06} cpu{:<2} {:<14}",
        h.ts_ns / 1_000_000_000,
        h.ts_ns % 1_000_000_000 / 1000,
        h.cpu,
        ev.kind_name()
    );
    event_fields_text(ev, out);
}

/// The event as `perf script` prints one: Unix time (UTC, to the
/// nanosecond), CPU, kind, then the fields as [`event_text`] gives them.
/// `boot_offset_ns` turns the recording's monotonic clock into Unix time.
pub fn event_text_wall(ev: &Event, boot_offset_ns: i64, out: &mut String) {
    let unix_ns = (ev.hdr.ts_ns as i64).saturating_add(boot_offset_ns).max(0) as u64;
    let _ = write!(
        out,
        "{} [{:03}] {}:",
        utc_text(unix_ns),
        ev.hdr.cpu,
        ev.kind_name()
    );
    event_fields_text(ev, out);
}

/// Unix time in nanoseconds as RFC 3339 UTC, e.g. `2026-11-26T13:05:01.123456789Z`.
pub fn utc_text(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, day_secs) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days: proleptic Gregorian from 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60,
        unix_ns % 1_000_000_000
    )
}

/// Everything [`event_text`] prints after the kind: ends, cookie, hook, fields.
fn event_fields_text(ev: &Event, out: &mut String) {
    let h = &ev.hdr;
    match (ev.src(), ev.dst()) {
        (Some(s), Some(d)) => {
            let _ = write!(out, " {s} > {d}");
        }
        _ => out.push_str(" -"),
    }
    if h.sock_cookie != 0 {
        let _ = write!(out, " cookie={}", h.sock_cookie);
    }
    if let Some(variant) = variant_name(ev) {
        let _ = write!(out, " hook={variant}");
    }
    if let Some(edge) = pause_edge(ev) {
        let _ = write!(out, " edge={edge}");
    }
    for (k, v) in body_fields(ev) {
        let number = v.as_u64().and_then(|n| u8::try_from(n).ok());
        let named = match (k.as_str(), number) {
            ("oldstate" | "newstate", Some(state)) => tcp_state_name(state).map(String::from),
            ("tcp_flags", Some(flags)) => Some(tcp_flags_text(flags)),
            _ => None,
        };
        let _ = match (named, v.as_str()) {
            (Some(name), _) => write!(out, " {k}={name}"),
            (None, Some(text)) => write!(out, " {k}={text}"),
            (None, None) => write!(out, " {k}={v}"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_text_is_rfc3339() {
        assert_eq!(utc_text(0), "1970-01-01T00:00:00.000000000Z");
        // `date -u -d @951782400` (a leap day), and `date -u -d @1795525501`.
        assert_eq!(
            utc_text(951_782_400_000_000_001),
            "2000-02-29T00:00:00.000000001Z"
        );
        assert_eq!(
            utc_text(1_795_525_501_123_456_789),
            "2026-11-24T13:05:01.123456789Z"
        );
    }
    use crate::event::{abi_addr, tt_hdr, tt_window_adv};

    #[test]
    fn window_adv_has_the_contract_fields() {
        let (family, saddr) = abi_addr("198.18.0.2".parse().unwrap());
        let (_, daddr) = abi_addr("198.18.0.1".parse().unwrap());
        let hdr = tt_hdr {
            ts_ns: 5,
            cpu: 1,
            sock_cookie: 3,
            family,
            saddr,
            daddr,
            sport: 5001,
            dport: 4000,
            ..Default::default()
        };
        let body = tt_window_adv {
            seq: 10,
            ack: 20,
            window: 26844,
            rcv_mss: 8948,
            sk_rcvbuf: 66000,
            ..Default::default()
        };
        let v = event_json(&Event::new(hdr, Body::WindowAdv(body)));
        assert_eq!(v["kind"], "window_adv");
        assert_eq!(v["saddr"], "198.18.0.2");
        assert_eq!(v["dport"], 4000);
        assert_eq!(
            (v["seq"].as_u64(), v["ack"].as_u64(), v["window"].as_u64()),
            (Some(10), Some(20), Some(26844))
        );
        for field in [
            "sk_rcvbuf",
            "sk_rmem_alloc",
            "sk_backlog_len",
            "scaling_ratio",
            "window_clamp",
            "rcv_ssthresh",
            "rcv_wscale",
            "rcv_mss",
            "rcv_wnd",
            "advmss",
        ] {
            assert!(v.get(field).is_some(), "{field} missing");
        }
        assert!(v
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("_pad")));
        let mut line = String::new();
        event_text(&Event::new(hdr, Body::WindowAdv(body)), &mut line);
        assert!(
            line.contains("198.18.0.2:5001 > 198.18.0.1:4000") && line.contains("window=26844"),
            "{line}"
        );
    }
}
