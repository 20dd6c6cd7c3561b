//! The path report: what [`PathAnalyzer::finish`](super::PathAnalyzer::finish) returns.

use super::stats::{DirSpec, NapiAcc, PathAcc, PathTable, StageAcc, DIRECTIONS};
use super::{Counters, PathConfig};
use crate::event::{addr_text, FlowKey};
use crate::export::table::duration;
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Clone, Debug, Serialize)]
pub struct PathReport {
    /// 1-in-N packet sampling.
    pub sample_every: u32,
    /// What `packets` and `total_ns` were multiplied by: `sample_every`, or,
    /// sampled by time, `Pauses::scale`: each traced window's events by
    /// `sample_every` times its slices over the time it was traced.
    pub scale: f64,
    /// Sampled by time, one slice of this many ns in `sample_every` (0: by sequence number).
    #[serde(skip_serializing_if = "is_zero")]
    pub sample_slice_ns: u64,
    /// How to read the counts, in words.
    pub note: String,
    /// Per dimension: every path of a dimension adds up to its direction's packets.
    pub paths: Vec<PathEntry>,
    /// Per full path (one value of every dimension): each packet counted once.
    pub combined: Vec<PathEntry>,
    #[serde(rename = "path_flows")]
    pub flows: Vec<FlowPaths>,
    pub napi: Vec<NapiStats>,
    pub coverage: Coverage,
    pub evictions: Evictions,
}

#[derive(Clone, Debug, Serialize)]
pub struct PathEntry {
    /// "tx" or "rx".
    pub direction: &'static str,
    /// Which choice this path is one outcome of ("hold", "gro", "socket",
    /// "order"), or "full" for a combined path.
    pub dimension: &'static str,
    /// e.g. "backlog", "held_cwnd"; combined paths join their parts with ';'.
    pub path: String,
    /// What sends a packet down this path.
    pub condition: String,
    /// Packets (wire segments), scaled by `sample_every`.
    pub packets: u64,
    /// Packets actually traced.
    pub sampled_packets: u64,
    /// Fraction of the direction's packets.
    pub share: f64,
    pub stages: Vec<StageStats>,
    /// Per packet from the first hop to the last (RX: driver entry → the read
    /// returns), over the packets that saw both; TX has none (count 0).
    pub total: StageStats,
}

#[derive(Clone, Debug, Serialize)]
pub struct StageStats {
    pub stage: &'static str,
    /// Sampled packets with this stage measured.
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub mean_ns: u64,
    /// Time all packets of the path spent here: measured sum × `sample_every`.
    pub total_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FlowPaths {
    /// Socket cookie, 0 when no socket event of the flow was seen.
    pub cookie: u64,
    pub netns: u32,
    pub local: String,
    pub remote: String,
    pub paths: Vec<PathEntry>,
    pub combined: Vec<PathEntry>,
}

/// Packets per NAPI poll on one device (ifindex 0: the per-CPU backlog).
/// Sampling 1 in N keeps every N-th poll of each CPU; `polls`, `packets`,
/// `polls_at_budget` and the histogram's counts are scaled back by N.
#[derive(Clone, Debug, Serialize)]
pub struct NapiStats {
    pub ifindex: u32,
    pub polls: u64,
    pub packets: u64,
    pub budget: i32,
    pub polls_at_budget: u64,
    pub at_budget_share: f64,
    pub work_mean: f64,
    pub work_p50: u64,
    pub work_p90: u64,
    pub work_p99: u64,
    pub work_max: u64,
    /// [work, polls] for every work value seen.
    pub work_histogram: Vec<[u64; 2]>,
}

/// Sampled data packets, and those that got a latency for every stage.
#[derive(Clone, Debug, Serialize)]
pub struct Coverage {
    pub tx_packets: u64,
    pub tx_complete: u64,
    pub tx_fraction: Option<f64>,
    pub rx_packets: u64,
    pub rx_complete: u64,
    pub rx_fraction: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Evictions {
    /// No progress for `stale_ns` (in the stack) or `app_wait_ns` (waiting
    /// for the application or the peer).
    pub stale: u64,
    /// Pushed out of a full per-flow queue.
    pub capacity: u64,
    /// Replaced by a later driver skb carrying the same bytes.
    pub superseded: u64,
    /// Freed by kfree_skb before the next hop.
    pub dropped: u64,
    /// The driver returned an error.
    pub driver_error: u64,
    /// Events of flows beyond `max_flows`.
    pub events_over_flow_cap: u64,
    /// Flows beyond `max_flow_breakdown`: in the totals only.
    pub flows_without_breakdown: u64,
    /// Packets still in flight when the trace ended.
    pub in_flight_at_end: u64,
    /// Packets in flight when a pause of sampling by time began.
    pub cut_by_pause: u64,
    /// Writes forgotten (waiting `app_wait_ns`) before their bytes left TCP:
    /// those bytes show up as `write_unseen`.
    pub writes_dropped: u64,
    /// Writes merged into the one before them when more than
    /// `max_pending_per_flow` were unsent: their bytes count as written
    /// then, moments early.
    pub writes_merged: u64,
}

/// One flow's breakdown, from its own path table.
pub(super) fn flow_paths(scale: Scale, key: &FlowKey, cookie: u64, table: &PathTable) -> FlowPaths {
    let (paths, combined) = entries(table, scale);
    FlowPaths {
        cookie,
        netns: key.netns,
        local: addr_text(&key.local),
        remote: addr_text(&key.remote),
        paths,
        combined,
    }
}

/// `flows`: the per-flow breakdowns ([`flow_paths`]).
pub(super) fn build(
    cfg: &PathConfig,
    scale: Scale,
    overall: &PathTable,
    flows: Vec<FlowPaths>,
    napi: &[NapiAcc],
    counters: &Counters,
) -> PathReport {
    let (paths, combined) = entries(overall, scale);
    let every = cfg.sample_every.max(1);
    let by = match cfg.sample_slice_ns {
        0 => "sequence number".to_string(),
        ns => format!("time (slices of {})", duration(ns)),
    };
    let note = if every > 1 {
        format!(
            "1-in-{every} sampling by {by}: packets and total_ns are scaled by {scale}; \
             stage counts and quantiles are over the sampled packets"
        )
    } else {
        "every packet traced".to_string()
    };
    let fraction = |part: u64, all: u64| (all > 0).then(|| part as f64 / all as f64);
    PathReport {
        sample_every: every,
        scale: scale.0,
        sample_slice_ns: cfg.sample_slice_ns,
        note,
        paths,
        combined,
        flows,
        napi: napi.iter().map(|n| napi_stats(n, scale)).collect(),
        coverage: Coverage {
            tx_packets: counters.tx_packets,
            tx_complete: counters.tx_complete,
            tx_fraction: fraction(counters.tx_complete, counters.tx_packets),
            rx_packets: counters.rx_packets,
            rx_complete: counters.rx_complete,
            rx_fraction: fraction(counters.rx_complete, counters.rx_packets),
        },
        evictions: counters.evictions.clone(),
    }
}

/// Per-dimension entries (merged over the other dimensions) and per full path.
fn entries(table: &PathTable, scale: Scale) -> (Vec<PathEntry>, Vec<PathEntry>) {
    let mut by_dimension = Vec::new();
    let mut combined = Vec::new();
    for (dir_index, spec) in DIRECTIONS.iter().enumerate() {
        let in_dir = || {
            table
                .iter()
                .filter(move |(id, _)| id.dir as usize == dir_index)
        };
        let dir_packets: u64 = in_dir().map(|(_, acc)| acc.packets).sum();
        for (k, dim) in spec.dims.iter().enumerate() {
            for (v, (name, condition)) in dim.values.iter().enumerate() {
                let merged = in_dir().filter(|(id, _)| id.values[k] as usize == v).fold(
                    None,
                    |acc: Option<PathAcc>, (_, p)| {
                        let mut acc = acc.unwrap_or_else(|| PathAcc::new(spec));
                        acc.merge(p);
                        Some(acc)
                    },
                );
                if let Some(acc) = merged {
                    by_dimension.push(entry(
                        spec,
                        dim.name,
                        name.to_string(),
                        condition.to_string(),
                        &acc,
                        dir_packets,
                        scale,
                    ));
                }
            }
        }
        for (id, acc) in in_dir() {
            combined.push(entry(
                spec,
                "full",
                id.frames().join(";"),
                id.conditions().join(" / "),
                acc,
                dir_packets,
                scale,
            ));
        }
    }
    (by_dimension, combined)
}

fn entry(
    spec: &DirSpec,
    dimension: &'static str,
    path: String,
    condition: String,
    acc: &PathAcc,
    dir_packets: u64,
    scale: Scale,
) -> PathEntry {
    let stages = spec
        .stages
        .iter()
        .zip(&acc.stages)
        .map(|(&stage, s)| stage_stats(stage, s, scale))
        .collect();
    PathEntry {
        direction: spec.name,
        dimension,
        path,
        condition,
        packets: scale.of(acc.packets),
        sampled_packets: acc.packets,
        share: if dir_packets > 0 {
            acc.packets as f64 / dir_packets as f64
        } else {
            0.0
        },
        stages,
        total: stage_stats("total", &acc.total, scale),
    }
}

fn stage_stats(stage: &'static str, s: &StageAcc, scale: Scale) -> StageStats {
    let count = s.hist.len();
    StageStats {
        stage,
        count,
        p50_ns: s.quantile(0.5),
        p90_ns: s.quantile(0.9),
        p99_ns: s.quantile(0.99),
        max_ns: s.max_ns,
        mean_ns: s.sum_ns.checked_div(count).unwrap_or(0),
        total_ns: scale.of(s.sum_ns),
    }
}

fn napi_stats(n: &NapiAcc, scale: Scale) -> NapiStats {
    NapiStats {
        ifindex: n.ifindex,
        polls: scale.of(n.polls),
        packets: scale.of(n.packets),
        budget: n.budget,
        polls_at_budget: scale.of(n.polls_at_budget),
        at_budget_share: n.polls_at_budget as f64 / n.polls.max(1) as f64,
        work_mean: n.packets as f64 / n.polls.max(1) as f64,
        work_p50: n.work_quantile(0.5),
        work_p90: n.work_quantile(0.9),
        work_p99: n.work_quantile(0.99),
        work_max: n.polls_by_work.keys().next_back().map_or(0, |&w| w as u64),
        work_histogram: n
            .polls_by_work
            .iter()
            .map(|(&work, &polls)| [work as u64, scale.of(polls)])
            .collect(),
    }
}

impl PathReport {
    /// One table per direction: direction, dimension, path, packets, share,
    /// then p50/p99/max for each stage; then NAPI, coverage, evictions.
    /// Tables wider than `width` columns wrap (see [`aligned`]).
    pub fn render_table(&self, width: Option<usize>) -> String {
        let mut out = String::new();
        for spec in DIRECTIONS {
            let rows: Vec<&PathEntry> = self
                .paths
                .iter()
                .filter(|p| p.direction == spec.name)
                .collect();
            if rows.is_empty() {
                continue;
            }
            // The total column only where totals are measured (RX).
            let with_total = rows.iter().any(|p| p.total.count > 0);
            let mut table = vec![["direction", "dimension", "path", "packets", "share"]
                .iter()
                .map(|s| s.to_string())
                .chain(spec.stages.iter().map(|s| format!("{s} p50/p99/max")))
                .chain(with_total.then(|| "total p50/p99/max".to_string()))
                .collect::<Vec<_>>()];
            for p in rows {
                let mut row = vec![
                    p.direction.to_string(),
                    p.dimension.to_string(),
                    p.path.clone(),
                    p.packets.to_string(),
                    format!("{:.1}%", p.share * 100.0),
                ];
                let cell = |s: &StageStats| match s.count {
                    0 => "-".to_string(),
                    _ => format!(
                        "{}/{}/{}",
                        duration(s.p50_ns),
                        duration(s.p99_ns),
                        duration(s.max_ns)
                    ),
                };
                row.extend(p.stages.iter().map(cell));
                row.extend(with_total.then(|| cell(&p.total)));
                table.push(row);
            }
            out.push_str(&aligned(&table, 3, width));
            out.push('\n');
        }
        for n in &self.napi {
            let _ = writeln!(
                out,
                "napi ifindex {}{}: {} polls took {} skbs, work mean {:.1} p50 {} p99 {} max {} (budget {}), {} polls at budget ({:.1}%)",
                n.ifindex,
                // The backlog polls what veth, loopback and netif_rx queued:
                // no device's NAPI, no GRO. Skbs, not the paths' packets: a
                // TSO skb over veth is one skb of the poll's work and its
                // gso_segs packets in the paths.
                if n.ifindex == 0 { " (the per-CPU backlog, no device)" } else { "" },
                n.polls,
                n.packets,
                n.work_mean,
                n.work_p50,
                n.work_p99,
                n.work_max,
                n.budget,
                n.polls_at_budget,
                n.at_budget_share * 100.0
            );
        }
        let c = &self.coverage;
        let percent = |f: Option<f64>| f.map_or("-".to_string(), |f| format!("{:.1}%", f * 100.0));
        let _ = writeln!(
            out,
            "coverage (sampled packets with every stage measured): tx {} ({}/{}), rx {} ({}/{})",
            percent(c.tx_fraction),
            c.tx_complete,
            c.tx_packets,
            percent(c.rx_fraction),
            c.rx_complete,
            c.rx_packets
        );
        let e = &self.evictions;
        let _ = writeln!(
            out,
            "evictions: stale {}, capacity {}, superseded {}, dropped {}, driver_error {}, events over flow cap {}, \
             in flight at end {}, cut by pauses {}, writes dropped {}, writes merged {}",
            e.stale,
            e.capacity,
            e.superseded,
            e.dropped,
            e.driver_error,
            e.events_over_flow_cap,
            e.in_flight_at_end,
            e.cut_by_pause,
            e.writes_dropped,
            e.writes_merged
        );
        let _ = writeln!(out, "counts: {}", self.note);
        out
    }
}

/// Columns padded to their widest cell; columns from `right_from` on are
/// right-aligned, those before it name the row. A table wider than `width`
/// is wrapped: the columns that do not fit go into further blocks, each
/// with the naming columns again.
pub(crate) fn aligned(rows: &[Vec<String>], right_from: usize, width: Option<usize>) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (block, group) in column_blocks(&widths, right_from, width).iter().enumerate() {
        if block > 0 {
            out.push('\n');
        }
        for row in rows {
            let cells: Vec<String> = group
                .iter()
                .filter_map(|&c| Some((c, row.get(c)?, widths[c])))
                .map(|(c, cell, w)| match c >= right_from {
                    true => format!("{cell:>w$}"),
                    false => format!("{cell:<w$}"),
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
    }
    out
}

/// The columns of each block: the first `keys` in every one, then as many
/// of the rest, in order, as fit in `width` (at least one).
fn column_blocks(widths: &[usize], keys: usize, width: Option<usize>) -> Vec<Vec<usize>> {
    let keys: Vec<usize> = (0..keys.min(widths.len())).collect();
    let line = |columns: &[usize]| columns.iter().map(|&c| widths[c] + 2).sum::<usize>() - 2;
    let mut blocks = Vec::new();
    let mut block = keys.clone();
    for c in keys.len()..widths.len() {
        block.push(c);
        let over = width.is_some_and(|w| line(&block) > w);
        if over && block.len() > keys.len() + 1 {
            block.pop();
            blocks.push(std::mem::replace(&mut block, keys.clone()));
            block.push(c);
        }
    }
    blocks.push(block);
    blocks
}

/// What sampled counts are multiplied by to stand for every packet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Scale(pub f64);

impl std::fmt::Display for Scale {
    /// A whole factor as it is (8), one measured to two places (8.37).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.fract() == 0.0 {
            true => write!(f, "{}", self.0),
            false => write!(f, "{:.2}", self.0),
        }
    }
}

impl Scale {
    /// `n` scaled, to the nearest whole (exact for a whole factor).
    pub fn of(self, n: u64) -> u64 {
        (n as f64 * self.0).round() as u64
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
