//! In-kernel cost of the programs, from the kernel's own accounting
//! (run time and run count per program, counted while a `BPF_ENABLE_STATS`
//! descriptor is open).
//! What the benchmark compares them with is in `reference` (feature
//! `bench`).

use super::{ProbePlan, Tracer};
use anyhow::Context;
use aya::sys::{enable_stats, Stats};
use aya::Ebpf;
use serde::Serialize;
use std::os::fd::OwnedFd;

/// Where [`Tracer::program_stats`] puts the flushes the collector asks for:
/// no tracepoint, its runs are `BPF_PROG_TEST_RUN`s.
pub const BATCH_FLUSH_HOOK: &str = "collector:tt_batch_flush";

/// Cumulative run time and runs of one attached program.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgramStats {
    /// The tracepoint, as `category:name`.
    pub hook: String,
    pub program: String,
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

impl ProgramStats {
    pub(super) fn of(
        hook: &str,
        name: &str,
        program: &aya::programs::Program,
    ) -> anyhow::Result<Self> {
        let info = program.info()?;
        Ok(ProgramStats {
            hook: hook.to_string(),
            program: name.to_string(),
            run_time_ns: info.run_time().as_nanos() as u64,
            run_cnt: info.run_count(),
        })
    }

    pub fn ns_per_run(&self) -> Option<f64> {
        (self.run_cnt > 0).then(|| self.run_time_ns as f64 / self.run_cnt as f64)
    }
}

/// Keeps the kernel's BPF run-time statistics on while it lives: the file
/// descriptor of `BPF_ENABLE_STATS` (5.8+), which the kernel reference-counts.
/// Nothing host-wide is written: overlapping sessions keep each other's
/// statistics on, and the last holder's exit (or SIGKILL) turns them off; a
/// `kernel.bpf_stats_enabled` someone else set stays as it was.
pub struct BpfStatsEnabled {
    _fd: OwnedFd,
}

impl BpfStatsEnabled {
    pub fn enable() -> anyhow::Result<BpfStatsEnabled> {
        let fd = enable_stats(Stats::RunTime).context("BPF_ENABLE_STATS (run-time statistics)")?;
        Ok(BpfStatsEnabled { _fd: fd })
    }
}

impl Tracer {
    /// Run time and runs of every attached probe so far (all zero unless
    /// bpf_stats was enabled while they ran).
    /// With journeys, also the batches' flushes the collector asked for
    /// (`tt_batch_flush`, run on each CPU before each drain), as the hook
    /// [`BATCH_FLUSH_HOOK`].
    pub fn program_stats(&self) -> anyhow::Result<Vec<ProgramStats>> {
        let mut stats = attached_program_stats(&self.ebpf, &self.plan)?;
        if self.journeys {
            let program = self
                .ebpf
                .program("tt_batch_flush")
                .context("no tt_batch_flush program")?;
            stats.push(ProgramStats::of(
                BATCH_FLUSH_HOOK,
                "tt_batch_flush",
                program,
            )?);
        }
        Ok(stats)
    }
}

/// Run time and runs of every program of `plan` attached in `ebpf`.
pub(crate) fn attached_program_stats(
    ebpf: &Ebpf,
    plan: &ProbePlan,
) -> anyhow::Result<Vec<ProgramStats>> {
    plan.attached()
        .map(|probe| {
            let program = ebpf
                .program(&probe.program)
                .with_context(|| format!("no program {}", probe.program))?;
            ProgramStats::of(&probe.hook, &probe.program, program)
        })
        .collect()
}
