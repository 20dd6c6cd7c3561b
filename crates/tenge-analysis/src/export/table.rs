//! The report for people: aligned tables, numbers with units.

use crate::analysis::diff::{Diff, Unit};
use crate::analysis::paths::aligned;
use crate::analysis::window::stalls::SwsStall;
use crate::analysis::window::{Advice, FlowWindowReport, KernelChrono, KernelDifference};
use crate::analysis::{Pauses, Report};
use std::fmt::Write;

/// Bytes with a binary unit.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Bits per second with a decimal unit.
pub fn bps(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.2} Gb/s", n / 1e9),
        n if n >= 1e6 => format!("{:.1} Mb/s", n / 1e6),
        n if n >= 1e3 => format!("{:.1} kb/s", n / 1e3),
        n => format!("{n:.0} b/s"),
    }
}

/// A time with the unit that keeps it short: ns, µs, ms or s.
pub fn duration(ns: u64) -> String {
    match ns {
        0..1_000 => format!("{ns} ns"),
        1_000..999_950 => format!("{:.1} µs", ns as f64 / 1e3),
        999_950..999_950_000 => format!("{:.1} ms", ns as f64 / 1e6),
        _ => format!("{:.2} s", ns as f64 / 1e9),
    }
}

/// The longest stalls a flow lists (JSON has them all).
const STALLS_SHOWN: usize = 5;

fn pct(f: f64) -> String {
    format!("{:.0}%", f * 100.0)
}

/// A diff's after/before: two decimals, or two significant digits under
/// 0.01 (busy 4.352 s → 0.019 s is 0.0044, not 0.00).
fn ratio(x: f64) -> String {
    match x {
        x if x > 0.0 && x < 0.01 => format!("{:.1$}", x, (-x.log10().floor()) as usize + 1),
        x => format!("{x:.2}"),
    }
}

/// A share in a diff, where its ratio is printed beside it: one under 1 %
/// keeps a figure that says what the ratio is of (0.4 % → 0.1 %, not 0 %
/// → 0 % at ratio 0.25).
fn share(f: f64) -> String {
    match f * 100.0 {
        p if p == 0.0 || p >= 1.0 => pct(f),
        p if p >= 0.1 => format!("{p:.1}%"),
        _ => "<0.1%".to_string(),
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The whole report: header, window findings per flow, alerts and advice,
/// path costs. Tables wider than `width` columns wrap.
pub fn render_report(report: &Report, width: Option<usize>) -> String {
    let mut out = String::new();
    render_header(&mut out, report);
    render_windows_and_limits(&mut out, report, width);
    render_findings(&mut out, report);
    let _ = writeln!(out, "\nPATH COSTS");
    out.push_str(&report.path_costs.render_table(width));
    out
}

/// How the events were sampled, in words.
fn sampling(report: &Report) -> String {
    let costs = &report.path_costs;
    let every = costs.sample_every.max(1);
    match report.pauses.filter(|_| costs.sample_slice_ns > 0) {
        Some(pauses) => time_sampling(every, costs.sample_slice_ns, report.duration_ns, &pauses),
        None => format!("sampling 1/{every}"),
    }
}

/// Sampling by time, in words: 1 in `every` slices of `slice_ns`, with
/// `pauses` between them over `elapsed_ns`.
pub fn time_sampling(every: u32, slice_ns: u64, elapsed_ns: u64, pauses: &Pauses) -> String {
    let traced = elapsed_ns.saturating_sub(pauses.total_ns);
    format!(
        "sampling 1/{every} of the time in slices of {} (traced {} in all, {} pauses)",
        duration(slice_ns),
        duration(traced),
        pauses.count
    )
}

/// What was recorded, and what the figures miss.
fn render_header(out: &mut String, report: &Report) {
    let _ = writeln!(
        out,
        "{} events over {:.3} s, kernel {}, {}, {} lost",
        report.events,
        report.duration_ns as f64 / 1e9,
        report.kernel_release,
        sampling(report),
        report.events_lost
    );
    if let Some(not_run) = report.hits_not_run.filter(|&n| n > 0) {
        let _ = writeln!(
            out,
            "WARNING: {not_run} hook hits ran no program (the kernel skipped them): figures below miss them"
        );
    }
    if report.events_lost > 0 {
        let kinds: Vec<String> = report
            .lost_by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "WARNING: {} events were lost ({}): figures below miss them",
            report.events_lost,
            kinds.join(", ")
        );
    }
    if report.model_mismatches > 0 {
        let _ = writeln!(
            out,
            "note: {} advertised windows differ from the kernel's formulas replayed on the recorded state",
            report.model_mismatches
        );
    }
}

/// One row per socket: bytes, MSS, windows, stalls and limit shares.
fn render_windows_and_limits(out: &mut String, report: &Report, width: Option<usize>) {
    let _ = writeln!(
        out,
        "\nWINDOWS AND LIMITS (per socket; limits are shares of busy time sending data, other: none of them)"
    );
    let header = [
        "cookie",
        "local -> remote",
        "process",
        "sent",
        "received",
        "MSS snd/rcv/adv",
        "adv",
        "rounded",
        "lost",
        "stalls",
        "rwnd",
        "cwnd",
        "sndbuf",
        "app",
        "other",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for flow in &report.flows {
        let socket = report
            .sockets
            .iter()
            .find(|s| s.sock_cookie == flow.sock_cookie);
        let (sent, received) = socket.map_or((0, 0), |s| (s.bytes_sent, s.bytes_received));
        let w = &flow.window;
        let mss = format!(
            "{}/{}/{}",
            opt(flow.mss.sender),
            opt(flow.mss.receiver_estimate),
            opt(flow.mss.advertised)
        );
        rows.push(vec![
            flow.sock_cookie.to_string(),
            format!("{} -> {}", flow.src, flow.dst),
            flow.tasks.owner().map_or("-".into(), |t| t.label()),
            bytes(sent),
            bytes(received),
            mss,
            w.receive.advertised_count.to_string(),
            w.receive.mss_rounded_count.to_string(),
            bytes(w.receive.mss_rounding_bytes_lost),
            w.sws_stalls.len().to_string(),
        ]);
        // Without data sent no share (not 0% of everything).
        let s = flow.limits.shares();
        let shares = match flow.limits.has_shares() {
            true => [s.rwnd, s.cwnd, s.sndbuf, s.app, s.unlimited].map(pct),
            false => std::array::from_fn(|_| "-".to_string()),
        };
        rows.last_mut().expect("the row just pushed").extend(shares);
    }
    out.push_str(&aligned(&rows, 3, width));
    if let Some(every) = byte_sampled(report) {
        let _ = writeln!(
            out,
            "note: sampled 1 in {every} by sequence number: sent and received are {every} times the bytes of the kept blocks; adv, rounded, lost and stalls count what the kept segments carried, and a window stands until the next kept one, so windows and stalls between them go unseen (a stall is seen whole or not at all) and no advice is given; rwnd and sndbuf are the kernel's own clocks, cwnd, app and other the kept events'. For every window, trace every packet or sample by time (--slice)"
        );
    }
    if let Some(r) = &report.retirement {
        let idle = r.idle_timeout_ns.map_or(String::new(), |ns| {
            format!(" or silent for {:.0} s", ns as f64 / 1e9)
        });
        let _ = writeln!(
            out,
            "{} sockets retired as they closed{idle}; {} of them not shown (beyond {} rows), summed: {} events, {} sent, {} received, {} alerts, {} SWS stalls",
            r.flows_retired,
            r.rows_folded,
            r.max_rows,
            r.folded.events,
            bytes(r.folded.bytes_sent),
            bytes(r.folded.bytes_received),
            r.folded.alerts,
            r.folded.sws_stalls
        );
    }
}

/// The 1 in N of a recording sampled by sequence number, not by time.
fn byte_sampled(report: &Report) -> Option<u32> {
    let costs = &report.path_costs;
    (costs.sample_every > 1 && costs.sample_slice_ns == 0).then_some(costs.sample_every)
}

/// Per socket with something to say: its window chain, send buffer, ideal
/// window, stalls, alerts and advice.
fn render_findings(out: &mut String, report: &Report) {
    let findings: Vec<_> = report
        .flows
        .iter()
        // A flow the analysis flagged has advice even when no alert fired
        // (a transfer shorter than an alert's window): its findings show.
        .filter(|f| !f.alerts.is_empty() || !f.window.sws_stalls.is_empty() || !f.advice.is_empty())
        .collect();
    if !findings.is_empty() {
        let _ = writeln!(out, "\nFINDINGS");
        if let Some(every) = byte_sampled(report) {
            let _ = writeln!(
                out,
                "(from the windows of 1 in {every} blocks of sequence space: see the note above)"
            );
        }
    }
    for flow in findings {
        render_flow_findings(out, flow);
    }
}

/// How far the kernel's rwnd_limited and the events' may be apart (shares
/// of busy time) before the findings say which table follows which.
const CLOCKS_APART: f64 = 0.2;

/// Where the kernel's rwnd_limited share and the events' (`per_event`) are
/// [`CLOCKS_APART`] or more apart (`apart`, the report's
/// `kernel_minus_per_event`): both, and which table shows which (the limits
/// table the kernel's, PATH COSTS' held_rwnd the events' clock). The
/// kernel's is counted in jiffies: over a short or fast-changing transfer,
/// a few ticks.
fn rwnd_clocks(kernel: &KernelChrono, apart: &KernelDifference, per_event: f64) -> Option<String> {
    (apart.rwnd.abs() >= CLOCKS_APART).then(|| {
        format!(
            "receive window: held the sender {} of busy time by the kernel's rwnd_limited ({} of {} ticks of the jiffy clock, each counted to the state the socket was in when it ticked), {} by the events (used up, under an MSS past what was sent, with more written, at each ACK and send); the limits table shows the kernel's, held_rwnd in PATH COSTS follows the events",
            pct(kernel.rwnd_fraction),
            kernel.rwnd_limited_jiffies,
            kernel.busy_jiffies,
            pct(per_event)
        )
    })
}

fn render_flow_findings(out: &mut String, flow: &FlowWindowReport) {
    let _ = writeln!(
        out,
        "{} -> {} (cookie {})",
        flow.src, flow.dst, flow.sock_cookie
    );
    for (role, task) in [
        ("writer", &flow.tasks.writer),
        ("reader", &flow.tasks.reader),
    ] {
        if let Some(t) = task {
            let _ = writeln!(
                out,
                "  {role}: {} (thread {}), cgroup {}{}",
                t.label(),
                t.pid,
                t.cgroup.as_deref().unwrap_or("?"),
                t.container_id
                    .as_ref()
                    .map_or(String::new(), |id| format!(", container {id:.12}"))
            );
        }
    }
    if let Some(c) = &flow.window.chain {
        let _ = writeln!(
            out,
            "  window chain (the non-zero window held longest): {} B free -> {} B advertised ({}) -> {} B usable ({}): {} lost",
            c.free_space,
            c.advertised,
            c.shaped_by
                .map_or("as the receiver chose it", |class| class
                    .describe(c.free_space, c.advertised)),
            c.usable,
            c.usable_rule(),
            pct(c.compounded_loss_fraction)
        );
    }
    let l = &flow.limits;
    if let (Some(k), "per_event") = (&l.kernel, l.sndbuf_source) {
        if l.sndbuf > k.sndbuf_fraction {
            let _ = writeln!(
                out,
                "  send buffer: full with nothing unsent {} of busy time by the events, {} by the kernel's sndbuf_limited (it does not clock a writer whose data left before it slept)",
                pct(l.sndbuf),
                pct(k.sndbuf_fraction)
            );
        }
    }
    if let (Some(k), Some(apart)) = (&l.kernel, &l.kernel_minus_per_event) {
        if let Some(line) = rwnd_clocks(k, apart, l.per_event.rwnd) {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let (Some(ideal), Some(allowed)) = (flow.window.ideal_window, flow.window.mss_allowed_window)
    {
        let source = match flow.window.ideal_window_source {
            Some("bandwidth_delay") => " (bandwidth × RTT)",
            Some(_) => " (the receiver's mean free space)",
            None => "",
        };
        // Figure 8: what whole segments of the MSS make of it; below one
        // MSS that is none at all, the silly window.
        let allowed_text = match (allowed, flow.mss.sender.or(flow.mss.receiver_estimate)) {
            (0, Some(mss)) => format!("0 B: less than one MSS ({mss} B), no whole segment"),
            _ => format!("{allowed} B"),
        };
        let _ = writeln!(
            out,
            "  ideal window {ideal} B{source}, MSS-allowed {allowed_text} ({} less)",
            pct(1.0 - allowed as f64 / ideal.max(1) as f64)
        );
    }
    render_stalls(out, &flow.window.sws_stalls);
    for alert in &flow.alerts {
        let _ = writeln!(
            out,
            "  ALERT {}: {}",
            serde_json::to_value(alert.kind)
                .ok()
                .as_ref()
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?"),
            alert.message
        );
    }
    for advice in &flow.advice {
        let message = match advice {
            Advice::ReceiveBuffer { message, .. }
            | Advice::Reader { message, .. }
            | Advice::ThroughputCeiling { message, .. }
            | Advice::Mtu { message, .. }
            | Advice::Nagle { message, .. }
            | Advice::WindowScaling { message, .. } => message,
        };
        let _ = writeln!(out, "  advice: {message}");
    }
}

/// The stalls' totals and the longest of them.
fn render_stalls(out: &mut String, stalls: &[SwsStall]) {
    if !stalls.is_empty() {
        let total_ns: u64 = stalls.iter().map(|s| s.duration_ns).sum();
        let probes: u64 = stalls.iter().map(|s| s.zero_window_probes as u64).sum();
        let _ = writeln!(
            out,
            "  {} SWS stalls, {:.1} ms in all, {} zero-window probes; longest:",
            stalls.len(),
            total_ns as f64 / 1e6,
            probes
        );
        let mut longest: Vec<_> = stalls.iter().collect();
        longest.sort_by_key(|s| std::cmp::Reverse(s.duration_ns));
        for stall in longest.into_iter().take(STALLS_SHOWN) {
            let _ = writeln!(
                out,
                "    {:.6}–{:.6} s ({:.3} ms): {} probes, {} sub-MSS segments, {} delivered",
                stall.start_ns as f64 / 1e9,
                stall.end_ns as f64 / 1e9,
                stall.duration_ns as f64 / 1e6,
                stall.zero_window_probes,
                stall.sub_mss_segments,
                bytes(stall.bytes_delivered)
            );
        }
    }
}

/// `diff`'s table: each figure before and after, its ratio, and for a
/// quantile the packets each side's stands on.
pub fn render_diff(diff: &Diff, width: Option<usize>) -> String {
    let mut rows = vec![vec![
        "figure".to_string(),
        "before".into(),
        "after".into(),
        "after/before".into(),
        "packets".into(),
    ]];
    for r in &diff.rows {
        // A quantile of no packet: "-", not 0 ns.
        let value = |v: f64, side: usize| match r.samples {
            Some(n) if n[side] == 0 => "-".to_string(),
            _ => diff_value(r.unit, v),
        };
        rows.push(vec![
            r.figure.clone(),
            value(r.before, 0),
            value(r.after, 1),
            r.ratio.map_or("-".into(), ratio),
            r.samples
                .map_or(String::new(), |[b, a]| format!("{b} / {a}")),
        ]);
    }
    aligned(&rows, 1, width)
}

/// A figure's value in its unit.
fn diff_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::BitsPerSecond => bps(v),
        Unit::Bytes => bytes(v as u64),
        Unit::Share => share(v),
        Unit::Nanoseconds => duration(v.max(0.0) as u64),
        Unit::Seconds => format!("{v:.3} s"),
        Unit::Count => format!("{v:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::diff::DiffRow;

    /// A process's figures in their units, as the totals' are: its name
    /// (`process.COMM.…`, a COMM with dots too) says nothing of the unit.
    #[test]
    fn a_diff_prints_each_figure_in_its_unit() {
        let row = |figure: &str, before: f64, after: f64, unit: Unit| DiffRow {
            figure: figure.into(),
            before,
            after,
            unit,
            ratio: Some(after / before),
            samples: None,
        };
        let diff = Diff {
            rows: vec![
                row("process.iperf3.busy_s", 0.506, 0.211, Unit::Seconds),
                row("busy_s", 4.352, 0.019, Unit::Seconds),
                row("process.py.3.limit_share.rwnd", 0.56, 0.19, Unit::Share),
                row("path_share.tx.held_cwnd", 0.004, 0.0004, Unit::Share),
                row(
                    "process.py.3.throughput_bps",
                    4.13e9,
                    9.79e9,
                    Unit::BitsPerSecond,
                ),
                row(
                    "process.py.3.mean_advertised_window",
                    25879.0,
                    403531.0,
                    Unit::Bytes,
                ),
                DiffRow {
                    samples: Some([719373, 0]),
                    ratio: None,
                    ..row(
                        "stage_p50_ns.tx.held_rwnd.tcp",
                        69100.0,
                        0.0,
                        Unit::Nanoseconds,
                    )
                },
            ],
        };
        let table = render_diff(&diff, None);
        for (figure, values) in [
            ("process.iperf3.busy_s", ["0.506 s", "0.211 s"]),
            ("busy_s", ["4.352 s", "0.019 s"]),
            ("process.py.3.limit_share.rwnd", ["56%", "19%"]),
            ("path_share.tx.held_cwnd", ["0.4%", "<0.1%"]),
            ("process.py.3.throughput_bps", ["4.13 Gb/s", "9.79 Gb/s"]),
            (
                "process.py.3.mean_advertised_window",
                ["25.3 KiB", "394.1 KiB"],
            ),
            // A quantile of no packet is no value, not 0 ns.
            ("stage_p50_ns.tx.held_rwnd.tcp", ["69.1 µs", "-"]),
        ] {
            let line = table.lines().find(|l| l.starts_with(figure)).unwrap();
            let cells: Vec<&str> = line.split("  ").map(str::trim).collect();
            assert!(values.iter().all(|v| cells.contains(v)), "{line}");
            assert!(!cells.contains(&"0 ns"), "{line}");
        }
        // A ratio under 0.01 keeps two significant digits.
        let busy = table.lines().find(|l| l.starts_with("busy_s")).unwrap();
        assert!(busy.contains(" 0.0044"), "{busy}");
    }

    #[test]
    fn kernel_and_event_rwnd_clocks_far_apart_are_both_shown() {
        // A 4 KiB receive buffer at MTU 9000: 70 of 193 jiffies, 85 % by the events.
        let kernel = KernelChrono::from_totals([123, 70, 0], Some(250)).unwrap();
        let apart = |per_event: f64| KernelDifference {
            rwnd: kernel.rwnd_fraction - per_event,
            sndbuf: 0.0,
        };
        let line = rwnd_clocks(&kernel, &apart(0.85), 0.85).unwrap();
        assert!(line.contains("36% of busy time by the kernel's rwnd_limited (70 of 193 ticks"));
        assert!(line.contains("85% by the events"));
        assert_eq!(rwnd_clocks(&kernel, &apart(0.5), 0.5), None);
    }

    #[test]
    fn durations_take_the_unit_that_keeps_them_short() {
        for (ns, text) in [
            (0, "0 ns"),
            (999, "999 ns"),
            (1_000, "1.0 µs"),
            (999_949, "999.9 µs"),
            (999_950, "1.0 ms"),
            (3_033_837_700, "3.03 s"),
        ] {
            assert_eq!(duration(ns), text);
        }
    }
}
