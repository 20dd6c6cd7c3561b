//! Loading `bpf/stages.bpf.c` and reading its maps: stage latencies and
//! per-hook counts aggregated in the kernel, nothing per packet sent to user
//! space. What the numbers mean is
//! `tenge_trace::analysis::stages`'s.

use super::plan::{self, Backend};
use super::stats::attached_program_stats;
use super::{kernel_btf, require_privileges, CommonGlobals, Filters, ProbePlan, ProgramStats};
use crate::abi::{tt_hook_counts, tt_stage_stats};
use anyhow::Context;
use aya::maps::PerCpuArray;
use aya::{Ebpf, EbpfLoader};
use tenge_events::stage_maps::{StageTotals, HOOKS, STAGES};

pub(super) static STAGES_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stages.bpf.o"));

/// A map value as aya reads it: the ABI struct, which lives in the events
/// crate (no aya there), wrapped.
#[derive(Clone, Copy)]
#[repr(transparent)]
struct MapValue<T>(T);

// SAFETY: plain C structs of integers, no padding (bindgen's layout tests).
unsafe impl aya::Pod for MapValue<tt_stage_stats> {}
// SAFETY: as above.
unsafe impl aya::Pod for MapValue<tt_hook_counts> {}

/// The attached aggregation programs. Dropping it detaches them and frees
/// their maps.
pub struct StageTracer {
    _links: plan::Links,
    ebpf: Ebpf,
    plan: ProbePlan,
}

impl StageTracer {
    /// Loads and attaches the programs, filtering as [`Filters`] say; every
    /// kept packet is counted (sampling does not apply: the cost per hit is
    /// paid either way, and nothing is sent per packet).
    pub fn start(filters: &Filters) -> anyhow::Result<StageTracer> {
        anyhow::ensure!(
            filters.sample_every <= 1,
            "in-kernel stages count every packet: sampling (1 in {}) does not apply",
            filters.sample_every
        );
        require_privileges()?;
        let btf = kernel_btf()?;
        let globals = CommonGlobals::of(filters)?;
        let mut loader = EbpfLoader::new();
        globals.apply(loader.btf(Some(&btf)));
        let mut loaded = plan::load_object(&mut loader, STAGES_OBJ)?;
        // tp_btf only: a hook this kernel refuses is left out (its counters
        // stay 0) and named in the plan.
        let mut plan = plan::attach_hooks(
            &mut loaded,
            &btf,
            tenge_events::hooks::in_stages(),
            &[Backend::TpBtf],
        );
        plan::require_attached(&plan)?;
        if !filters.task.is_off() {
            plan.probes
                .extend(Self::attach_task_marks(&mut loaded, &btf)?.probes);
        }
        Ok(StageTracer {
            _links: loaded.links,
            ebpf: loaded.ebpf,
            plan,
        })
    }

    /// The task filter's marks, where the socket's own task writes and reads
    /// (fentry or kprobe where the kernel has no sendmsg tracepoint): plain
    /// `stages` runs none of them. Without one, no flow would ever be kept.
    fn attach_task_marks(loaded: &mut plan::Loaded, btf: &aya::Btf) -> anyhow::Result<ProbePlan> {
        let ladder = [Backend::TpBtf, Backend::Fentry, Backend::Kprobe];
        let marks = plan::attach_hooks(loaded, btf, tenge_events::hooks::task_marks(), &ladder);
        plan::require_attached(&marks).context(
            "--pid/--comm/--cgroup: no hook where a socket's task writes or reads it could be attached",
        )?;
        Ok(marks)
    }

    pub fn plan(&self) -> &ProbePlan {
        &self.plan
    }

    /// The maps now, summed over CPUs: totals since [`StageTracer::start`].
    pub fn read(&self) -> anyhow::Result<StageTotals> {
        let mut totals = StageTotals::default();
        self.for_each_cpu(
            "tt_stage_stats",
            STAGES,
            |stage, cpu: &MapValue<tt_stage_stats>| totals.add_stage(stage, &cpu.0),
        )?;
        self.for_each_cpu(
            "tt_hook_counts",
            HOOKS,
            |hook, cpu: &MapValue<tt_hook_counts>| totals.add_hook(hook, &cpu.0),
        )?;
        Ok(totals)
    }

    /// Calls `add(index, value)` with each CPU's value of entries
    /// `0..entries` of the per-CPU array `name`.
    fn for_each_cpu<T: aya::Pod>(
        &self,
        name: &str,
        entries: usize,
        mut add: impl FnMut(usize, &T),
    ) -> anyhow::Result<()> {
        let map = PerCpuArray::<_, T>::try_from(
            self.ebpf
                .map(name)
                .with_context(|| format!("no {name} map"))?,
        )?;
        for index in 0..entries {
            for cpu in map.get(&(index as u32), 0)?.iter() {
                add(index, cpu);
            }
        }
        Ok(())
    }

    /// Run time and runs of every attached program (zero unless bpf_stats
    /// was enabled while they ran).
    pub fn program_stats(&self) -> anyhow::Result<Vec<ProgramStats>> {
        attached_program_stats(&self.ebpf, &self.plan)
    }
}
