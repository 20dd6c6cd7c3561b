//! Two reports side by side: what changed between a recording before a
//! tuning step and one after it (SC'03's method: stock TCP, then one change
//! at a time, each measured). Totals over all sockets and over each
//! process's (matched by command name), every figure with its ratio; quantiles with the packets they stand on, so a change on a handful
//! of samples reads as what it is.

use super::window::{FlowWindowReport, LimitsReport};
use super::Report;
use serde::Serialize;
use std::collections::BTreeSet;

/// One figure of both recordings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiffRow {
    /// What it is, e.g. `throughput_bps`, `limit_share.rwnd`,
    /// `stage_p50_ns.rx.gro_merged.napi`.
    pub figure: String,
    pub before: f64,
    pub after: f64,
    pub unit: Unit,
    /// `after / before`; none when `before` is 0, or a quantile stands on no
    /// packet on either side.
    pub ratio: Option<f64>,
    /// Packets each side's quantile stands on (quantiles only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<[u64; 2]>,
}

/// What a figure's values count, for a reader to print them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Bytes,
    BitsPerSecond,
    /// A fraction of a whole, 0 to 1.
    Share,
    Nanoseconds,
    Seconds,
    Count,
}

#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub rows: Vec<DiffRow>,
}

/// One recording's value of a figure.
struct Figure {
    name: String,
    value: f64,
    unit: Unit,
    /// Packets a quantile stands on.
    samples: Option<u64>,
}

impl Figure {
    fn new(name: String, value: f64, unit: Unit) -> Figure {
        Figure {
            name,
            value,
            unit,
            samples: None,
        }
    }
}

/// A recording's totals, by figure name, in the order they are shown: over
/// all sockets, then over each process's (`process.COMM.…`), then its paths.
fn figures(report: &Report) -> Vec<Figure> {
    let mut out = socket_figures(report, "", |_| true);
    for comm in processes(report) {
        let prefix = format!("process.{comm}.");
        out.extend(socket_figures(report, &prefix, |f| {
            f.tasks.owner().is_some_and(|t| t.comm == comm)
        }));
    }
    out.extend(path_figures(report));
    out
}

/// The processes that own sockets (by command name: pids differ between
/// the runs a diff compares), in order.
fn processes(report: &Report) -> BTreeSet<&str> {
    report
        .flows
        .iter()
        .filter_map(|f| Some(f.tasks.owner()?.comm.as_str()))
        .collect()
}

/// Figures of the sockets whose window reports `of` keeps, named `prefix` + figure.
fn socket_figures(
    report: &Report,
    prefix: &str,
    of: impl Fn(&FlowWindowReport) -> bool,
) -> Vec<Figure> {
    let mut out: Vec<Figure> = Vec::new();
    let mut put = |name: &str, value: f64, unit: Unit| {
        out.push(Figure::new(format!("{prefix}{name}"), value, unit))
    };
    let flows: Vec<&FlowWindowReport> = report.flows.iter().filter(|f| of(f)).collect();
    let socket = |cookie: u64| report.sockets.iter().find(|s| s.sock_cookie == cookie);
    let sockets: Vec<_> = flows.iter().filter_map(|f| socket(f.sock_cookie)).collect();
    let senders: Vec<_> = sockets.iter().filter(|s| s.bytes_sent > 0).collect();
    let bytes: u64 = senders.iter().map(|s| s.bytes_sent).sum();
    let span_ns = senders.iter().map(|s| s.last_ns).max().unwrap_or(0)
        - senders.iter().map(|s| s.first_ns).min().unwrap_or(0);
    put("bytes_sent", bytes as f64, Unit::Bytes);
    put(
        "throughput_bps",
        if span_ns > 0 {
            bytes as f64 * 8.0 / (span_ns as f64 / 1e9)
        } else {
            0.0
        },
        Unit::BitsPerSecond,
    );
    let busy_ns: u64 = flows.iter().map(|f| f.limits.busy_ns).sum();
    put("busy_s", busy_ns as f64 / 1e9, Unit::Seconds);
    for cause in ["rwnd", "cwnd", "sndbuf", "app", "other"] {
        let weighted: f64 = flows
            .iter()
            .map(|f| share(&f.limits, cause) * f.limits.busy_ns as f64)
            .sum();
        put(
            &format!("limit_share.{cause}"),
            if busy_ns > 0 {
                weighted / busy_ns as f64
            } else {
                0.0
            },
            Unit::Share,
        );
    }
    // The windows the data's receivers offered (a sender's own, on its data
    // segments, would dilute them).
    let receive: Vec<_> = flows
        .iter()
        .filter(|f| socket(f.sock_cookie).is_some_and(|s| s.bytes_received > 0))
        .map(|f| &f.window.receive)
        .collect();
    let windows: u64 = receive.iter().map(|r| r.advertised_count).sum();
    let window_sum: f64 = receive
        .iter()
        .map(|r| r.mean_advertised * r.advertised_count as f64)
        .sum();
    put("advertised_windows", windows as f64, Unit::Count);
    put(
        "mean_advertised_window",
        if windows > 0 {
            window_sum / windows as f64
        } else {
            0.0
        },
        Unit::Bytes,
    );
    put(
        "mss_rounded_windows",
        receive.iter().map(|r| r.mss_rounded_count).sum::<u64>() as f64,
        Unit::Count,
    );
    put(
        "mss_rounding_bytes_lost",
        receive
            .iter()
            .map(|r| r.mss_rounding_bytes_lost)
            .sum::<u64>() as f64,
        Unit::Bytes,
    );
    let stalls = flows.iter().flat_map(|f| &f.window.sws_stalls);
    put("sws_stalls", stalls.clone().count() as f64, Unit::Count);
    put(
        "sws_stall_s",
        stalls.map(|s| s.duration_ns).sum::<u64>() as f64 / 1e9,
        Unit::Seconds,
    );
    out
}

/// Packets and shares per path, and the stage quantiles of the partitions.
fn path_figures(report: &Report) -> Vec<Figure> {
    let mut out = Vec::new();
    for p in report
        .path_costs
        .paths
        .iter()
        .filter(|p| p.dimension != "full")
    {
        let name = format!("{}.{}.{}", p.direction, p.dimension, p.path);
        out.push(Figure::new(
            format!("path_packets.{name}"),
            p.packets as f64,
            Unit::Count,
        ));
        out.push(Figure::new(
            format!("path_share.{name}"),
            p.share,
            Unit::Share,
        ));
        // Stage costs of the partition of all packets (TX by hold, RX by GRO).
        if matches!(p.dimension, "hold" | "gro") {
            for s in &p.stages {
                let stage = format!("{}.{}.{}", p.direction, p.path, s.stage);
                for (q, ns) in [("p50", s.p50_ns), ("p90", s.p90_ns)] {
                    out.push(Figure {
                        samples: Some(s.count),
                        ..Figure::new(
                            format!("stage_{q}_ns.{stage}"),
                            ns as f64,
                            Unit::Nanoseconds,
                        )
                    });
                }
            }
        }
    }
    out
}

/// The report's share of busy time limited by `cause` (`other`: none).
fn share(limits: &LimitsReport, cause: &str) -> f64 {
    match cause {
        "rwnd" => limits.rwnd,
        "cwnd" => limits.cwnd,
        "sndbuf" => limits.sndbuf,
        "app" => limits.app,
        _ => limits.unlimited,
    }
}

impl Diff {
    /// Every figure either report has, before and after (0 where one lacks it).
    pub fn of(before: &Report, after: &Report) -> Diff {
        let (b, a) = (figures(before), figures(after));
        let mut rows: Vec<DiffRow> = Vec::new();
        for (figure, unit) in b.iter().chain(&a).map(|f| (&f.name, f.unit)) {
            if rows.iter().any(|r| &r.figure == figure) {
                continue;
            }
            let find = |side: &[Figure]| {
                side.iter()
                    .find(|f| &f.name == figure)
                    .map_or((0.0, None), |f| (f.value, f.samples))
            };
            let ((before, nb), (after, na)) = (find(&b), find(&a));
            let samples =
                (nb.is_some() || na.is_some()).then(|| [nb.unwrap_or(0), na.unwrap_or(0)]);
            // A quantile of no packet is no figure: no ratio to it or from it.
            let measured = samples.is_none_or(|n| n.iter().all(|&n| n > 0));
            rows.push(DiffRow {
                figure: figure.clone(),
                before,
                after,
                unit,
                ratio: (before != 0.0 && measured).then(|| after / before),
                samples,
            });
        }
        Diff { rows }
    }

    pub fn row(&self, figure: &str) -> Option<&DiffRow> {
        self.rows.iter().find(|r| r.figure == figure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{Analysis, AnalysisConfig, Provenance};
    use crate::event::{tt_hdr, tt_sock_task, tt_task_role, Body, Event};
    use crate::synth::Connection;

    fn provenance() -> Provenance {
        Provenance {
            kernel_release: String::new(),
            sample_every: 1,
            lost: Default::default(),
            hits_not_run: None,
            damage: None,
        }
    }

    /// One connection of 200 segments of 1000 B, one every `every_ns`.
    fn report(every_ns: u64) -> Report {
        let c = Connection {
            segment_every_ns: every_ns,
            ..Connection::default()
        };
        let mut analysis = Analysis::new(AnalysisConfig::default());
        // The sender's socket written by "sender", the receiver's read by "receiver".
        for (socket, comm, role) in [
            (c.sender, "sender", tt_task_role::TT_TASK_WRITER),
            (c.receiver, "receiver", tt_task_role::TT_TASK_READER),
        ] {
            let mut task = tt_sock_task {
                tgid: 100,
                pid: 100,
                role: role as u8,
                ..Default::default()
            };
            for (slot, byte) in task.comm.iter_mut().zip(comm.bytes()) {
                *slot = byte as std::ffi::c_char;
            }
            let hdr = tt_hdr {
                ts_ns: c.established_ns,
                sock_cookie: socket.cookie,
                ..Default::default()
            };
            analysis
                .push(&Event::new(hdr, Body::SockTask(task)))
                .for_each(drop);
        }
        for ev in c.events() {
            analysis.push(&ev).for_each(drop);
        }
        analysis.finish(provenance())
    }

    /// The same bytes twice as fast: throughput doubles, bytes stay, and
    /// the stage quantiles carry their packet counts.
    #[test]
    fn a_faster_run_doubles_the_throughput_and_keeps_the_bytes() {
        let diff = Diff::of(&report(20_000), &report(10_000));
        let bytes = diff.row("bytes_sent").expect("bytes");
        assert_eq!((bytes.before, bytes.ratio), (200_000.0, Some(1.0)));
        let rate = diff.row("throughput_bps").expect("throughput");
        let ratio = rate.ratio.expect("a ratio");
        assert!((ratio - 2.0).abs() < 0.05, "{rate:?}");
        let quantile = diff
            .rows
            .iter()
            .find(|r| r.figure.starts_with("stage_p50_ns.rx."))
            .expect("an RX stage quantile");
        assert!(
            quantile.samples.is_some_and(|[b, a]| b > 0 && a > 0),
            "{quantile:?}"
        );
        // The same for the process that sent, matched by name across the runs.
        let sender = diff
            .row("process.sender.throughput_bps")
            .expect("the sender's");
        assert!(
            (sender.ratio.expect("a ratio") - 2.0).abs() < 0.05,
            "{sender:?}"
        );
        let receiver = diff
            .row("process.receiver.bytes_sent")
            .expect("the receiver's");
        assert_eq!((receiver.before, receiver.after), (0.0, 0.0));
        // Every figure once.
        let mut names: Vec<_> = diff.rows.iter().map(|r| &r.figure).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), diff.rows.len());
    }

    /// A path the other recording has no packet on: its quantiles there are
    /// no figure, and no ratio is made of them.
    #[test]
    fn a_path_on_one_side_has_no_ratio_of_its_costs() {
        let nothing = Analysis::new(AnalysisConfig::default()).finish(provenance());
        let diff = Diff::of(&report(20_000), &nothing);
        let quantile = diff
            .rows
            .iter()
            .find(|r| r.figure.starts_with("stage_p50_ns.rx."))
            .expect("an RX stage quantile");
        assert!(quantile.samples.is_some_and(|[b, a]| b > 0 && a == 0));
        assert_eq!(quantile.ratio, None);
        // A count of it is a figure: it went to 0.
        let packets = diff
            .rows
            .iter()
            .find(|r| r.figure.starts_with("path_packets.rx."))
            .expect("an RX path count");
        assert_eq!(packets.ratio, Some(0.0));
    }
}
