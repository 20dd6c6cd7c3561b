//! What the in-kernel stage histograms (`bpf/stages.bpf.c`, `tenge-trace
//! stages`) say: samples, mean, quantiles and maximum per stage, packets and
//! bytes per hook. Pure arithmetic over the map values, summed over CPUs by
//! the reader (`tenge_trace::probe::StageTracer`): no BPF here.
//!
//! Buckets are log-linear (`TT_HIST_SUB_BITS` in `bpf/tenge_abi.h`): 4 per
//! power of two, each at most a quarter of its lower end wide. A quantile is
//! the middle of the bucket its rank falls in, so it is within an eighth of
//! that bucket's lower end of the true value (exact below 8 ns).

use super::paths::aligned;
use crate::abi::tt_stage_stats;
use crate::export::table::duration;
use serde::Serialize;
pub use tenge_events::stage_maps::{
    bucket_of, bucket_range, StageTotals, BUCKETS, HOOKS, HOOK_NAMES, STAGES, STAGE_NAMES,
};

/// The middle of a bucket: what a quantile that falls in it reads.
fn bucket_middle(b: usize) -> u64 {
    let (low, high) = bucket_range(b);
    low + (high - low - 1) / 2
}

/// The `q` quantile (0 < q <= 1) of the samples counted in `buckets`: the
/// middle of the bucket holding the sample of rank ceil(q × total). None
/// without samples.
pub fn quantile(buckets: &[u64], q: f64) -> Option<u64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    buckets
        .iter()
        .position(|&n| {
            seen += n;
            seen >= rank
        })
        .map(bucket_middle)
}

/// One stage over some time: what the table and the JSON show.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageSummary {
    pub stage: &'static str,
    /// Skbs seen at both hooks of the stage.
    pub samples: u64,
    /// Skbs kept at the stage's later hook without a stamp from the earlier
    /// one (not kept there, freed and replaced, or a hook hit the kernel
    /// ran no program for).
    pub unmatched: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    /// The longest sample (over an interval: at most the top of its highest bucket).
    pub max_ns: u64,
    /// The lower end of the lowest bucket with a sample.
    pub min_bucket_ns: u64,
}

impl StageSummary {
    pub fn of(stage: &'static str, s: &tt_stage_stats) -> StageSummary {
        // Quantiles never above the maximum: a bucket's middle may be.
        let q = |q| quantile(&s.buckets, q).unwrap_or(0).min(s.max_ns);
        StageSummary {
            stage,
            samples: s.count,
            unmatched: s.unmatched,
            mean_ns: if s.count == 0 {
                0.0
            } else {
                s.sum_ns as f64 / s.count as f64
            },
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            max_ns: s.max_ns,
            min_bucket_ns: s
                .buckets
                .iter()
                .position(|&n| n > 0)
                .map_or(0, |b| bucket_range(b).0),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HookSummary {
    pub hook: &'static str,
    pub packets: u64,
    /// skb->len at the hook, summed.
    pub bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StagesSummary {
    pub stages: Vec<StageSummary>,
    pub hooks: Vec<HookSummary>,
}

impl StagesSummary {
    /// Two aligned tables: the stages, then the hooks.
    pub fn render_table(&self, width: Option<usize>) -> String {
        let header = |cells: &[&str]| cells.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        let mut stages = vec![header(&[
            "stage",
            "samples",
            "unmatched",
            "mean",
            "p50",
            "p90",
            "p99",
            "max",
        ])];
        for s in &self.stages {
            let mut row = vec![
                s.stage.to_string(),
                s.samples.to_string(),
                s.unmatched.to_string(),
            ];
            if s.samples == 0 {
                row.extend(std::iter::repeat_n("-".to_string(), 5));
            } else {
                row.push(duration(s.mean_ns as u64));
                row.extend([s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns].map(duration));
            }
            stages.push(row);
        }
        let mut hooks = vec![header(&["hook", "packets", "bytes"])];
        for h in &self.hooks {
            hooks.push(vec![
                h.hook.to_string(),
                h.packets.to_string(),
                h.bytes.to_string(),
            ]);
        }
        format!(
            "{}\n{}",
            aligned(&stages, 1, width),
            aligned(&hooks, 1, width)
        )
    }
}

/// What the totals say, per stage and per hook.
impl StagesSummary {
    /// Sampled by time: the counts (samples, unmatched, packets, bytes)
    /// multiplied by `scale` (see [`Pauses::scale`](super::Pauses::scale)),
    /// to the nearest whole; the latencies stay those of the packets counted.
    pub fn scaled(mut self, scale: f64) -> StagesSummary {
        let times = |n: &mut u64| *n = (*n as f64 * scale).round() as u64;
        for s in &mut self.stages {
            times(&mut s.samples);
            times(&mut s.unmatched);
        }
        for h in &mut self.hooks {
            times(&mut h.packets);
            times(&mut h.bytes);
        }
        self
    }

    pub fn of(totals: &StageTotals) -> StagesSummary {
        StagesSummary {
            stages: STAGE_NAMES
                .iter()
                .zip(&totals.stages)
                .map(|(&name, s)| StageSummary::of(name, s))
                .collect(),
            hooks: HOOK_NAMES
                .iter()
                .zip(&totals.hooks)
                .map(|(&hook, h)| HookSummary {
                    hook,
                    packets: h.packets,
                    bytes: h.bytes,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{tt_hook_counts, tt_stage, tt_stage_hook};

    #[test]
    fn buckets_by_hand() {
        // Exact below 4 ns; then 4 per power of two: [4,5) .. [7,8), [8,10),
        // [10,12), [12,14), [14,16), [16,20), ...
        let cases = [
            (0, 0, (0, 1)),
            (3, 3, (3, 4)),
            (4, 4, (4, 5)),
            (7, 7, (7, 8)),
            (8, 8, (8, 10)),
            (9, 8, (8, 10)),
            (10, 9, (10, 12)),
            (15, 11, (14, 16)),
            (16, 12, (16, 20)),
            // 1000 = 0b11_1110_1000: e = 9, the two bits below the top are
            // 11: group 8, sub 3, [7 << 7, 8 << 7) = [896, 1024).
            (1000, 35, (896, 1024)),
            (1024, 36, (1024, 1280)),
            // 1 ms = 1_000_000: e = 19 (524288), next bits 11 (>> 17 = 7):
            // bucket 18 * 4 + 3 = 75, [7 << 17, 8 << 17) = [917504, 1048576).
            (1_000_000, 75, (917_504, 1_048_576)),
        ];
        for (ns, bucket, range) in cases {
            assert_eq!(bucket_of(ns), bucket, "{ns} ns");
            assert_eq!(bucket_range(bucket), range, "bucket {bucket}");
        }
        // The last bucket, [7 << 38, 8 << 38), takes everything above.
        assert_eq!(bucket_of((7 << 38) - 1), BUCKETS - 2);
        assert_eq!(bucket_of(7 << 38), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_range(BUCKETS - 1), (7 << 38, 1 << 41));
    }

    #[test]
    fn buckets_tile_the_range_and_stay_within_a_quarter() {
        let mut next = 0;
        for b in 0..BUCKETS {
            let (low, high) = bucket_range(b);
            assert_eq!(
                low,
                next,
                "bucket {b} starts where {} ended",
                b.wrapping_sub(1)
            );
            assert!(4 * (high - low) <= low.max(4), "bucket {b} [{low}, {high})");
            assert_eq!(bucket_of(low), b);
            assert_eq!(bucket_of(high - 1), b);
            next = high;
        }
    }

    #[test]
    fn quantiles_by_rank() {
        // 100 samples: 50 of 5 ns, 40 in [1024, 1280), 10 in [917504, 1048576).
        let mut buckets = [0u64; BUCKETS];
        buckets[5] = 50;
        buckets[36] = 40;
        buckets[75] = 10;
        // rank 50 is the last 5 ns sample; rank 51 the first of bucket 36
        // (middle 1024 + 255 / 2 = 1151); rank 90 its last; rank 99 in bucket 75
        // (middle 917504 + 131071 / 2 = 983039).
        assert_eq!(quantile(&buckets, 0.5), Some(5));
        assert_eq!(quantile(&buckets, 0.51), Some(1151));
        assert_eq!(quantile(&buckets, 0.9), Some(1151));
        assert_eq!(quantile(&buckets, 0.91), Some(983_039));
        assert_eq!(quantile(&buckets, 0.99), Some(983_039));
        assert_eq!(quantile(&[0; BUCKETS], 0.5), None);
    }

    fn stage(samples: &[u64]) -> tt_stage_stats {
        let mut s = tt_stage_stats::default();
        for &ns in samples {
            s.count += 1;
            s.sum_ns += ns;
            s.max_ns = s.max_ns.max(ns);
            s.buckets[bucket_of(ns)] += 1;
        }
        s
    }

    fn hook(packets: u64, bytes: u64) -> tt_hook_counts {
        tt_hook_counts { packets, bytes }
    }

    #[test]
    fn summary_of_a_stage() {
        // 9 samples of 100 ns (bucket [96, 112), middle 103) and one of 1000.
        let mut samples = vec![100; 9];
        samples.push(1000);
        let mut s = stage(&samples);
        s.unmatched = 3;
        let summary = StageSummary::of("napi", &s);
        assert_eq!(
            summary,
            StageSummary {
                stage: "napi",
                samples: 10,
                unmatched: 3,
                mean_ns: 190.0,
                p50_ns: 103,
                p90_ns: 103,
                // rank 10 is the 1000 ns sample: bucket middle 959, under the max
                p99_ns: 959,
                max_ns: 1000,
                min_bucket_ns: 96,
            }
        );
        // A bucket's middle above the maximum reads as the maximum.
        let one = StageSummary::of("qdisc", &stage(&[897]));
        assert_eq!((one.p50_ns, one.p99_ns, one.max_ns), (897, 897, 897));
    }

    #[test]
    fn an_interval_subtracts_and_bounds_its_maximum() {
        let mut before = StageTotals::default();
        before.add_stage(0, &stage(&[5000, 20]));
        before.add_hook(1, &hook(2, 3000));
        let mut now = before.clone();
        // Another CPU: two more samples of 20 and 30 ns, and the packets.
        now.add_stage(0, &stage(&[20, 30]));
        now.add_hook(1, &hook(2, 100));
        assert_eq!(now.stages[0].max_ns, 5000);
        let delta = now.since(&before);
        let s = &delta.stages[0];
        assert_eq!((s.count, s.sum_ns), (2, 50));
        // 30 ns is in [28, 32): the interval's maximum is at most 31.
        assert_eq!(s.max_ns, 31);
        assert_eq!((delta.hooks[1].packets, delta.hooks[1].bytes), (2, 100));
        assert_eq!(now.since(&now).stages[0].max_ns, 0);
    }

    #[test]
    fn table_has_a_row_per_stage_and_hook() {
        let mut totals = StageTotals::default();
        totals.add_stage(2, &stage(&[1500, 2500]));
        totals.add_hook(3, &hook(2, 3000));
        let table = StagesSummary::of(&totals).render_table(None);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 1 + STAGES + 1 + 1 + HOOKS, "{table}");
        // 1500 is in [1280, 1536), 2500 in [2048, 2560): middles 1407 and 2303
        // (p90 and p99: rank 2), under the max of 2500; the mean is 2000.
        let napi: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            napi,
            [
                "napi", "2", "0", "2.0", "µs", "1.4", "µs", "2.3", "µs", "2.3", "µs", "2.5", "µs"
            ],
            "{table}"
        );
        assert!(
            lines[1].starts_with("qdisc") && lines[1].ends_with('-'),
            "{table}"
        );
        // After the stages: a blank line, the hooks' header, then rx_entry is the 4th hook.
        let rx: Vec<&str> = lines[1 + STAGES + 2 + 3].split_whitespace().collect();
        assert_eq!(rx, ["rx_entry", "2", "3000"], "{table}");
    }

    #[test]
    fn names_cover_the_abi() {
        assert_eq!(STAGE_NAMES.len(), tt_stage::TT_STAGE_MAX as usize);
        assert_eq!(HOOK_NAMES.len(), tt_stage_hook::TT_HOOK_MAX as usize);
        assert_eq!(STAGE_NAMES[tt_stage::TT_STAGE_IP_TCP as usize], "ip_tcp");
        assert_eq!(
            HOOK_NAMES[tt_stage_hook::TT_HOOK_TCP_RCV as usize],
            "tcp_probe"
        );
    }
}
