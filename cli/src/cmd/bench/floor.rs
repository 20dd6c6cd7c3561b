//! The least that tracing every 100-byte segment can cost with journeys on
//! this host, from one bench run's own figures: a floor measured for the
//! design the programs have, which a goal above it cannot be met by.

use super::instrument::Mode;
use super::kernel_cost::BackendCost;
use super::throughput::{ModeResult, Workload};
use super::Results;

/// Per data segment of the in-tree 100-byte workload, traced every packet.
#[derive(Clone, Debug, PartialEq)]
pub struct SegmentFloor {
    /// Events per data segment, its ACK's included.
    pub events: f64,
    /// Records the programs wrote per data segment (a journey is one).
    pub records: f64,
    /// One record's emit floor above the empty program, its clock read included.
    pub record_ns: f64,
    /// The record was gathered in a batch (else reserved and submitted alone).
    pub batched: bool,
    /// One clock read: every event carries its own time.
    pub clock_ns: f64,
    /// What deciding to drop a segment costs the programs in the kernel (the
    /// sampled programs per segment, less the share they recorded): a traced
    /// segment is decided on too.
    pub deciding_ns: f64,
    /// The collector's CPU per event at the highest rate it held.
    pub collector_ns: f64,
    /// The CPU an untraced segment takes, at most (if it kept every vCPU busy).
    pub cpu_ns: f64,
    /// The transfer's ratio with empty programs on the same hooks.
    pub dispatch_ratio: f64,
}

impl SegmentFloor {
    pub fn from_results(r: &Results) -> Option<SegmentFloor> {
        let w = r
            .throughput
            .as_ref()?
            .iter()
            .find(|w| w.workload == Workload::TransferSmall)?;
        let mode = |mode| w.modes.iter().find(|m: &&ModeResult| m.mode == mode);
        let (untraced, full) = (mode(Mode::Untraced)?, mode(Mode::Full)?);
        let per = full.records_per_segment()?;
        let k = r.kernel_cost.as_ref()?;
        let floor = k.floor.as_ref()?;
        let (record_ns, batched) = floor.record_ns(per.written > per.ring);
        let tp_btf = |every: fn(u32) -> bool| {
            k.backends.iter().find(|b: &&BackendCost| {
                b.backend == "TpBtf" && !b.per_hook && every(b.sample_every)
            })
        };
        let (all, sampled) = (tp_btf(|n| n == 1)?, tp_btf(|n| n > 1)?);
        let deciding_ns = sampled.added_ns_per_segment()?
            - all.added_ns_per_segment()? / f64::from(sampled.sample_every);
        let rate = r.max_rate.as_ref()?;
        Some(SegmentFloor {
            events: per.events,
            records: per.written,
            record_ns,
            batched,
            clock_ns: floor.clock_ns,
            deciding_ns,
            collector_ns: rate.collector_cpu_pct_at_highest?
                / 100.0
                / rate.highest_zero_loss_events_per_s?
                * 1e9,
            cpu_ns: r.machine.cpus as f64 / untraced.value.median * 1e9,
            dispatch_ratio: mode(Mode::EmptyRecordHooks)?.ratio.median,
        })
    }

    /// In the kernel per segment, above the dispatch: the decision, a clock
    /// read per event, and each record's emit beyond its own clock read.
    /// Nothing of the packet or the socket is read into a record yet.
    pub fn kernel_ns(&self) -> f64 {
        least_kernel_ns(
            self.deciding_ns,
            self.events,
            self.records,
            self.clock_ns,
            self.record_ns,
        )
    }

    /// The kernel's and the collector's least per segment.
    pub fn traced_ns(&self) -> f64 {
        self.kernel_ns() + self.events * self.collector_ns
    }

    /// The highest ratio to untraced every-packet tracing can reach: an
    /// untraced segment takes `cpu_ns`, the dispatch brings it to
    /// `cpu_ns / dispatch_ratio`, and the traced work comes on top.
    pub fn ratio(&self) -> f64 {
        self.cpu_ns / (self.cpu_ns / self.dispatch_ratio + self.traced_ns())
    }
}

/// The least the kernel spends per data segment, above the dispatch: the
/// decision, a clock read for each of `events`, and each of `records`'
/// emit beyond its own clock read.
pub fn least_kernel_ns(
    deciding_ns: f64,
    events: f64,
    records: f64,
    clock_ns: f64,
    record_ns: f64,
) -> f64 {
    deciding_ns + events * clock_ns + records * (record_ns - clock_ns)
}

#[cfg(test)]
mod tests {
    use super::SegmentFloor;

    fn floor() -> SegmentFloor {
        SegmentFloor {
            events: 14.0,
            records: 7.0,
            record_ns: 61.0,
            batched: true,
            clock_ns: 35.0,
            deciding_ns: 500.0,
            collector_ns: 40.0,
            cpu_ns: 9400.0,
            dispatch_ratio: 0.94,
        }
    }

    #[test]
    fn the_floor_adds_a_clock_per_event_and_an_emit_per_record() {
        let f = floor();
        // 500 + 14 × 35 + 7 × (61 - 35)
        assert_eq!(f.kernel_ns(), 500.0 + 490.0 + 182.0);
        assert_eq!(f.traced_ns(), 1172.0 + 560.0);
        // 9400 / 0.94 = 10000 ns with the dispatch, 11732 traced.
        assert!((f.ratio() - 9400.0 / 11732.0).abs() < 1e-12);
    }

    #[test]
    fn with_no_traced_work_the_floor_is_the_dispatch() {
        let f = SegmentFloor {
            events: 0.0,
            records: 0.0,
            deciding_ns: 0.0,
            ..floor()
        };
        assert!((f.ratio() - 0.94).abs() < 1e-12);
    }
}
