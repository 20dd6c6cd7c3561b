//! In-kernel cost of the programs, from the kernel's own accounting
//! (`kernel.bpf_stats_enabled`: run time and run count per program).
//!
//! bpf_stats brackets every run with two clock reads, which in a VM cost more
//! than a small program. [`EmptyPrograms`] attaches a program that does
//! nothing on the same hooks: its ns/run is that overhead plus the dispatch,
//! and subtracting it leaves what our programs add.

use super::{kernel_btf, Tracer};
use anyhow::Context;
use aya::programs::BtfTracePoint;
use aya::{Ebpf, EbpfLoader, VerifierLogLevel};
use serde::Serialize;

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

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
    pub fn ns_per_run(&self) -> Option<f64> {
        (self.run_cnt > 0).then(|| self.run_time_ns as f64 / self.run_cnt as f64)
    }
}

/// Turns `kernel.bpf_stats_enabled` on; dropping it restores the old value.
pub struct BpfStatsEnabled {
    old: String,
}

impl BpfStatsEnabled {
    pub fn enable() -> anyhow::Result<BpfStatsEnabled> {
        let old = std::fs::read_to_string(STATS_SYSCTL).context(STATS_SYSCTL)?;
        std::fs::write(STATS_SYSCTL, "1").context("enabling bpf_stats")?;
        Ok(BpfStatsEnabled {
            old: old.trim().to_string(),
        })
    }
}

impl Drop for BpfStatsEnabled {
    fn drop(&mut self) {
        let _ = std::fs::write(STATS_SYSCTL, &self.old);
    }
}

impl Tracer {
    /// Run time and runs of every attached probe so far (all zero unless
    /// bpf_stats was enabled while they ran).
    pub fn program_stats(&self) -> anyhow::Result<Vec<ProgramStats>> {
        self.plan
            .attached()
            .map(|probe| {
                let program = self
                    .ebpf
                    .program(&probe.program)
                    .with_context(|| format!("no program {}", probe.program))?;
                let info = program.info()?;
                Ok(ProgramStats {
                    hook: probe.hook.clone(),
                    program: probe.program.clone(),
                    run_time_ns: info.run_time().as_nanos() as u64,
                    run_cnt: info.run_count(),
                })
            })
            .collect()
    }
}

/// An empty tp_btf program on each of some tracepoints; detached when dropped.
pub struct EmptyPrograms {
    /// One loaded object per hook: a program is loaded for one attach target.
    attached: Vec<(String, Ebpf)>,
}

impl EmptyPrograms {
    /// Attaches to each `category:name` hook (tp_btf needs only the name).
    pub fn attach<'a>(hooks: impl IntoIterator<Item = &'a str>) -> anyhow::Result<EmptyPrograms> {
        let btf = kernel_btf()?;
        let mut attached = Vec::new();
        for hook in hooks {
            let tracepoint = hook.rsplit(':').next().unwrap_or(hook);
            let mut ebpf = EbpfLoader::new()
                .btf(Some(&btf))
                .verifier_log_level(VerifierLogLevel::DISABLE)
                .load(super::check::CHECK_OBJ)?;
            let program: &mut BtfTracePoint = ebpf
                .program_mut(EMPTY_PROGRAM)
                .context("no empty tp_btf program")?
                .try_into()?;
            program.load(tracepoint, &btf)?;
            program
                .attach()
                .with_context(|| format!("empty program on {hook}"))?;
            attached.push((hook.to_string(), ebpf));
        }
        Ok(EmptyPrograms { attached })
    }

    pub fn stats(&self) -> anyhow::Result<Vec<ProgramStats>> {
        self.attached
            .iter()
            .map(|(hook, ebpf)| {
                let info = ebpf
                    .program(EMPTY_PROGRAM)
                    .context("no empty program")?
                    .info()?;
                Ok(ProgramStats {
                    hook: hook.clone(),
                    program: EMPTY_PROGRAM.to_string(),
                    run_time_ns: info.run_time().as_nanos() as u64,
                    run_cnt: info.run_count(),
                })
            })
            .collect()
    }
}

/// check.bpf.c's tp_btf program returns 0 and reads nothing: it fits any hook.
const EMPTY_PROGRAM: &str = "check_tp_btf";

/// Run time and runs of every BPF program loaded on the system, by program
/// id: for programs another tool loaded (bpftrace's). `hook` is empty.
pub fn system_program_stats() -> std::collections::BTreeMap<u32, ProgramStats> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|info| {
            let stats = ProgramStats {
                hook: String::new(),
                program: String::from_utf8_lossy(info.name()).into_owned(),
                run_time_ns: info.run_time().as_nanos() as u64,
                run_cnt: info.run_count(),
            };
            (info.id(), stats)
        })
        .collect()
}
