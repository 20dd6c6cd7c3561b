//! Path identities and the latency accumulators behind them.
//!
//! A *path* is the route one packet took through the stack: on TX the reason
//! TCP held it (one dimension), on RX three independent choices (GRO merge,
//! direct vs backlog, in order or not). Statistics are kept per full path;
//! the per-dimension views of the report are merged from them at the end, so
//! every packet is recorded once.

use crate::event::FlowKey;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

/// Latencies above this are recorded as this (the exact maximum is kept aside).
const HIST_MAX_NS: u64 = 60_000_000_000;
/// 2 significant figures: 1% precision in ~15 KiB per histogram.
const HIST_SIGFIG: u8 = 2;

/// One choice a packet makes, and the values it can take: (path name, the
/// condition that sends a packet down it).
pub struct Dimension {
    pub name: &'static str,
    pub values: &'static [(&'static str, &'static str)],
}

/// A direction: its stages (hop i → hop i+1) and its dimensions.
pub struct DirSpec {
    pub name: &'static str,
    pub stages: &'static [&'static str],
    pub dims: &'static [Dimension],
}

pub const TX_STAGE_TCP: usize = 0;
pub const TX_STAGE_QDISC: usize = 1;
pub const TX_STAGE_DRIVER: usize = 2;

/// TX hold classes, indices into `TX.dims[0].values`.
pub mod hold {
    pub const AT_ONCE: u8 = 0;
    pub const CWND: u8 = 1;
    pub const RWND: u8 = 2;
    pub const PACING_TSQ: u8 = 3;
    pub const NAGLE: u8 = 4;
    pub const RETRANSMIT: u8 = 5;
    pub const WRITE_UNSEEN: u8 = 6;
}

/// RX values, indices into the `RX.dims` value lists.
pub mod rx_value {
    pub const SINGLE: u8 = 0;
    pub const GRO_MERGED: u8 = 1;
    pub const GRO_UNSEEN: u8 = 2;
    pub const DIRECT: u8 = 0;
    pub const BACKLOG: u8 = 1;
    pub const SOCKET_UNSEEN: u8 = 2;
    pub const IN_ORDER: u8 = 0;
    pub const OUT_OF_ORDER: u8 = 1;
    pub const DUPLICATE: u8 = 2;
    pub const TCP_DROPPED: u8 = 3;
    pub const ORDER_UNSEEN: u8 = 4;
}

/// Shared by the socket and order dimensions, so a flamegraph stack shows it once.
const NOT_IN_TCP: (&str, &str) = (
    "not_in_tcp",
    "never reached tcp_rcv: dropped, expired or in flight at the end",
);

pub const TX: DirSpec = DirSpec {
    name: "tx",
    stages: &["tcp", "qdisc", "driver"],
    dims: &[Dimension {
        name: "hold",
        values: &[
            ("at_once", "left TCP within held_after_ns of its write"),
            (
                "held_cwnd",
                "held until sent by the congestion window: its skb took the last of snd_cwnd",
            ),
            (
                "held_rwnd",
                "held by the receive window: it held the sender for half the segment's wait or more",
            ),
            (
                "held_pacing_tsq",
                "held with cwnd and rwnd open: pacing, TSQ, autocork, cork",
            ),
            (
                "held_nagle",
                "under the MSS, held until the ACK of an earlier small segment, unacked when it was written, let it go: Nagle's algorithm",
            ),
            (
                "retransmit",
                "retransmission: seq before snd_nxt at net_dev_queue",
            ),
            (
                "write_unseen",
                "its sendmsg was not seen (before the trace or evicted)",
            ),
        ],
    }],
};

pub const RX: DirSpec = DirSpec {
    name: "rx",
    stages: &["napi", "ip_tcp", "tcp_queue", "socket_queue", "read"],
    dims: &[
        Dimension {
            name: "gro",
            values: &[
                ("single", "the stack skb is the driver skb"),
                ("gro_merged", "GRO merged several driver skbs into the stack skb"),
                ("gro_unseen", "the driver entry or netif_receive_skb was not seen"),
            ],
        },
        Dimension {
            name: "socket",
            values: &[
                ("direct", "TCP ran in softirq: the socket was not owned by the user"),
                ("backlog", "the socket was owned by the reader: processed from the backlog at release_sock"),
                NOT_IN_TCP,
            ],
        },
        Dimension {
            name: "order",
            values: &[
                ("in_order", "seq == rcv_nxt"),
                ("out_of_order", "seq after rcv_nxt: a hole before it (loss or reordering)"),
                ("duplicate", "all of it before rcv_nxt: data already received"),
                (
                    "tcp_dropped",
                    "reached tcp_rcv, then TCP dropped it: beyond the window, no receive memory, or its bytes already queued",
                ),
                NOT_IN_TCP,
            ],
        },
    ],
};

pub const DIRECTIONS: [&DirSpec; 2] = [&TX, &RX];

fn combos(dir: &DirSpec) -> usize {
    dir.dims.iter().map(|d| d.values.len()).product()
}

/// A full path: direction (0 = tx, 1 = rx) and one value per dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathId {
    pub dir: u8,
    pub values: [u8; 3],
}

impl PathId {
    pub fn tx(hold: u8) -> PathId {
        PathId {
            dir: 0,
            values: [hold, 0, 0],
        }
    }

    pub fn rx(gro: u8, socket: u8, order: u8) -> PathId {
        PathId {
            dir: 1,
            values: [gro, socket, order],
        }
    }

    pub fn spec(self) -> &'static DirSpec {
        DIRECTIONS[self.dir as usize]
    }

    /// Dense index over all paths of both directions (mixed radix).
    fn index(self) -> usize {
        let spec = self.spec();
        let within = spec
            .dims
            .iter()
            .zip(self.values)
            .fold(0, |acc, (d, v)| acc * d.values.len() + v as usize);
        DIRECTIONS[..self.dir as usize]
            .iter()
            .map(|d| combos(d))
            .sum::<usize>()
            + within
    }

    fn from_index(mut index: usize) -> PathId {
        let mut dir = 0;
        while index >= combos(DIRECTIONS[dir]) {
            index -= combos(DIRECTIONS[dir]);
            dir += 1;
        }
        let mut values = [0u8; 3];
        for (i, d) in DIRECTIONS[dir].dims.iter().enumerate().rev() {
            values[i] = (index % d.values.len()) as u8;
            index /= d.values.len();
        }
        PathId {
            dir: dir as u8,
            values,
        }
    }

    /// Path names, one per dimension, without a name repeated from the one before.
    pub fn frames(self) -> Vec<&'static str> {
        let mut frames: Vec<&'static str> = Vec::new();
        for (d, v) in self.spec().dims.iter().zip(self.values) {
            let name = d.values[v as usize].0;
            if frames.last() != Some(&name) {
                frames.push(name);
            }
        }
        frames
    }

    pub fn conditions(self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for (d, v) in self.spec().dims.iter().zip(self.values) {
            let cond = d.values[v as usize].1;
            if out.last() != Some(&cond) {
                out.push(cond);
            }
        }
        out
    }
}

/// One stage's latency distribution, plus the exact sum and maximum.
#[derive(Clone)]
pub struct StageAcc {
    pub hist: Histogram<u32>,
    pub sum_ns: u64,
    pub max_ns: u64,
}

impl StageAcc {
    fn new() -> StageAcc {
        StageAcc {
            hist: Histogram::new_with_bounds(1, HIST_MAX_NS, HIST_SIGFIG)
                .expect("constant bounds are valid"),
            sum_ns: 0,
            max_ns: 0,
        }
    }

    pub fn record(&mut self, ns: u64, n: u64) {
        self.hist
            .saturating_record_n(ns.min(HIST_MAX_NS), n.min(u32::MAX as u64) as u32);
        self.sum_ns = self.sum_ns.saturating_add(ns.saturating_mul(n));
        self.max_ns = self.max_ns.max(ns);
    }

    fn merge(&mut self, other: &StageAcc) {
        self.hist.add(&other.hist).expect("histograms share bounds");
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// A quantile, clamped to the exact maximum (the histogram reports the
    /// top of a bucket).
    pub fn quantile(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q).min(self.max_ns)
    }
}

/// Counts and stage latencies of one path.
#[derive(Clone)]
pub struct PathAcc {
    /// Sampled packets (wire segments) that took the path.
    pub packets: u64,
    pub stages: Vec<StageAcc>,
    /// From the first hop to the last, per packet that saw both (RX only:
    /// TX segments of one skb share its qdisc and driver stages).
    pub total: StageAcc,
}

impl PathAcc {
    pub fn new(spec: &DirSpec) -> PathAcc {
        PathAcc {
            packets: 0,
            stages: spec.stages.iter().map(|_| StageAcc::new()).collect(),
            total: StageAcc::new(),
        }
    }

    pub fn merge(&mut self, other: &PathAcc) {
        self.packets += other.packets;
        for (mine, theirs) in self.stages.iter_mut().zip(&other.stages) {
            mine.merge(theirs);
        }
        self.total.merge(&other.total);
    }
}

/// Statistics per full path; a path's accumulator is allocated on its first packet.
#[derive(Default)]
pub struct PathTable {
    paths: Vec<Option<Box<PathAcc>>>,
}

impl PathTable {
    fn acc(&mut self, path: PathId) -> &mut PathAcc {
        let index = path.index();
        if self.paths.len() <= index {
            self.paths
                .resize_with(DIRECTIONS.iter().map(|d| combos(d)).sum(), || None);
        }
        self.paths[index].get_or_insert_with(|| Box::new(PathAcc::new(path.spec())))
    }

    /// The paths that saw packets or latencies, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (PathId, &PathAcc)> {
        self.paths
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.as_deref().map(|p| (PathId::from_index(i), p)))
    }
}

/// Records into the overall table and, when the flow has one, the flow's.
pub struct Recorder<'a> {
    pub overall: &'a mut PathTable,
    pub flow: Option<&'a mut PathTable>,
    /// Every stage measurement as a span, with the flow's key, when asked
    /// for ([`PathConfig::spans`](super::PathConfig::spans)).
    pub spans: Option<(&'a mut Vec<StageSpan>, &'a FlowKey)>,
}

/// One stage of one packet (or of the `packets` segments of one skb), as the
/// path statistics recorded it: `end_ns - start_ns` is the latency they hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageSpan {
    pub flow: FlowKey,
    pub path: PathId,
    /// Index into the direction's `stages`.
    pub stage: usize,
    pub start_ns: u64,
    pub end_ns: u64,
    pub packets: u64,
    /// First byte of the segment (TX) or unit (RX) measured.
    pub seq: u32,
}

impl StageSpan {
    pub fn direction(&self) -> &'static str {
        self.path.spec().name
    }

    pub fn stage_name(&self) -> &'static str {
        self.path.spec().stages[self.stage]
    }
}

impl Recorder<'_> {
    /// Applies `record` to the path's accumulator in each table: a packet's
    /// figures are recorded with one lookup of its path per table.
    pub fn path(&mut self, path: PathId, mut record: impl FnMut(&mut PathAcc)) {
        record(self.overall.acc(path));
        if let Some(flow) = self.flow.as_deref_mut() {
            record(flow.acc(path));
        }
    }

    /// Keeps the span of a stage measured `[start_ns, end_ns]`, when spans are kept.
    pub fn span(
        &mut self,
        path: PathId,
        stage: usize,
        (start_ns, end_ns): (u64, u64),
        packets: u64,
        seq: u32,
    ) {
        if let Some((spans, flow)) = self.spans.as_mut() {
            spans.push(StageSpan {
                flow: **flow,
                path,
                stage,
                start_ns,
                end_ns,
                packets,
                seq,
            });
        }
    }
}

/// Packets per NAPI poll on one device (ifindex 0: the per-CPU backlog).
#[derive(Default)]
pub struct NapiAcc {
    pub ifindex: u32,
    pub polls: u64,
    pub packets: u64,
    pub budget: i32,
    pub polls_at_budget: u64,
    /// Polls by the packets they processed: kept sparse, as a recording's
    /// work value sizes nothing.
    pub polls_by_work: BTreeMap<u32, u64>,
}

impl NapiAcc {
    pub fn record(&mut self, work: i32, budget: i32) {
        let work = work.max(0);
        self.polls += 1;
        self.packets += work as u64;
        self.budget = self.budget.max(budget);
        if budget > 0 && work >= budget {
            self.polls_at_budget += 1;
        }
        *self.polls_by_work.entry(work as u32).or_default() += 1;
    }

    /// The smallest work w such that at least q of the polls did <= w.
    pub fn work_quantile(&self, q: f64) -> u64 {
        let want = (q * self.polls as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (&work, &polls) in &self.polls_by_work {
            seen += polls;
            if seen >= want {
                return work as u64;
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_index_round_trips() {
        let all: usize = DIRECTIONS.iter().map(|d| combos(d)).sum();
        assert_eq!(all, 7 + 3 * 3 * 5);
        for i in 0..all {
            assert_eq!(PathId::from_index(i).index(), i);
        }
        assert_eq!(
            PathId::rx(1, 1, 0).frames(),
            ["gro_merged", "backlog", "in_order"]
        );
        let unseen = PathId::rx(
            rx_value::SINGLE,
            rx_value::SOCKET_UNSEEN,
            rx_value::ORDER_UNSEEN,
        );
        assert_eq!(unseen.frames(), ["single", "not_in_tcp"]);
    }

    #[test]
    fn napi_work_quantiles() {
        let mut napi = NapiAcc::default();
        for work in [64, 10, 64, 3] {
            napi.record(work, 64);
        }
        assert_eq!(
            (napi.polls, napi.packets, napi.polls_at_budget),
            (4, 141, 2)
        );
        assert_eq!(napi.work_quantile(0.5), 10);
        assert_eq!(napi.work_quantile(0.25), 3);
        assert_eq!(napi.work_quantile(1.0), 64);
    }
}
