//! The maps of `bpf/stages.bpf.c` as the reader sums them over CPUs: stage
//! latency histograms (log-linear buckets, `TT_HIST_SUB_BITS` in
//! `bpf/tenge_abi.h`: 4 per power of two) and per-hook counts. What they
//! say is the analyses' (`tenge_trace::analysis::stages`).

use crate::abi::{
    tt_hook_counts, tt_stage, tt_stage_hook, tt_stage_stats, TT_HIST_BUCKETS, TT_HIST_SUB_BITS,
};

pub const BUCKETS: usize = TT_HIST_BUCKETS as usize;
const SUB: u64 = 1 << TT_HIST_SUB_BITS;

pub const STAGES: usize = tt_stage::TT_STAGE_MAX as usize;
pub const HOOKS: usize = tt_stage_hook::TT_HOOK_MAX as usize;

/// Stage names, by `enum tt_stage`: the path analysis's names.
pub const STAGE_NAMES: [&str; STAGES] = ["qdisc", "driver", "napi", "ip_tcp"];

/// Hook names, by `enum tt_stage_hook`: the tracepoints (rx_entry is any
/// of the three driver entry points).
pub const HOOK_NAMES: [&str; HOOKS] = [
    "net_dev_queue",
    "net_dev_start_xmit",
    "net_dev_xmit",
    "rx_entry",
    "netif_receive_skb",
    "tcp_probe",
];

/// The bucket `ns` falls in, as `hist_bucket` in stages.bpf.c computes it.
pub fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let e = u64::from(ns.ilog2());
    let sub = (ns >> (e - u64::from(TT_HIST_SUB_BITS))) & (SUB - 1);
    let bucket = (e - u64::from(TT_HIST_SUB_BITS) + 1) * SUB + sub;
    (bucket as usize).min(BUCKETS - 1)
}

/// The values bucket `b` holds: `[low, high)` (the last bucket also holds
/// everything above).
pub fn bucket_range(b: usize) -> (u64, u64) {
    let b = b as u64;
    if b < SUB {
        return (b, b + 1);
    }
    let shift = b / SUB - 1;
    let low = (SUB + b % SUB) << shift;
    (low, low + (1 << shift))
}

/// The maps' values summed over CPUs, since the programs were attached.
#[derive(Clone, Debug, Default)]
pub struct StageTotals {
    pub stages: [tt_stage_stats; STAGES],
    pub hooks: [tt_hook_counts; HOOKS],
}

impl StageTotals {
    /// Adds one CPU's value of a stage (the maximum is the CPUs' maximum).
    pub fn add_stage(&mut self, stage: usize, cpu: &tt_stage_stats) {
        let s = &mut self.stages[stage];
        s.count += cpu.count;
        s.sum_ns += cpu.sum_ns;
        s.max_ns = s.max_ns.max(cpu.max_ns);
        s.unmatched += cpu.unmatched;
        for (total, n) in s.buckets.iter_mut().zip(&cpu.buckets) {
            *total += n;
        }
    }

    pub fn add_hook(&mut self, hook: usize, cpu: &tt_hook_counts) {
        self.hooks[hook].packets += cpu.packets;
        self.hooks[hook].bytes += cpu.bytes;
    }

    /// What happened between `earlier` and these totals. The kernel keeps
    /// one maximum since the start, so an interval's is bounded instead: by
    /// the top of its highest bucket, and by the overall maximum.
    pub fn since(&self, earlier: &StageTotals) -> StageTotals {
        let mut delta = self.clone();
        for (s, e) in delta.stages.iter_mut().zip(&earlier.stages) {
            s.count -= e.count;
            s.sum_ns -= e.sum_ns;
            s.unmatched -= e.unmatched;
            for (n, old) in s.buckets.iter_mut().zip(&e.buckets) {
                *n -= old;
            }
            s.max_ns = s
                .buckets
                .iter()
                .rposition(|&n| n > 0)
                .map_or(0, |b| s.max_ns.min(bucket_range(b).1 - 1));
        }
        for (h, e) in delta.hooks.iter_mut().zip(&earlier.hooks) {
            h.packets -= e.packets;
            h.bytes -= e.bytes;
        }
        delta
    }
}
