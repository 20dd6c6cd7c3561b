//! Loading `bpf/stages.bpf.c` and reading its maps: stage latencies and
//! per-hook counts aggregated in the kernel, nothing per packet sent to user
//! space. What the numbers mean is
//! `tenge_trace::analysis::stages`'s.

use super::plan::{self, Backend};
use super::slices::{Moment, Sliced};
use super::stats::attached_program_stats;
use super::{
    kernel_btf, require_privileges, CommonGlobals, Filters, PauseEdge, ProbePlan, ProgramStats,
};
use crate::abi::{tt_hook_counts, tt_stage_stats};
use anyhow::Context;
use aya::maps::{Array, PerCpuArray};
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
    links: plan::Links,
    slices: Option<Sliced>,
    ebpf: Ebpf,
    plan: ProbePlan,
}

impl StageTracer {
    /// Loads and attaches the programs, filtering as [`Filters`] say. Every
    /// kept packet is counted, or by time slices (`sample_slice_ns`), every
    /// one of the traced slices: sampling by bytes does not apply, as a hit
    /// costs the same whether it counts or not.
    pub fn start(filters: &Filters) -> anyhow::Result<StageTracer> {
        anyhow::ensure!(
            filters.sample_every <= 1 || filters.sample_slice_ns > 0,
            "in-kernel stages sample by time slices only: 1 in {} blocks of bytes does not apply",
            filters.sample_every
        );
        require_privileges()?;
        let btf = kernel_btf()?;
        let globals = CommonGlobals::of(filters)?;
        let mut loader = EbpfLoader::new();
        globals.apply(loader.btf(Some(&btf)));
        let time_sliced = u8::from(super::time_sliced(filters));
        loader.override_global("time_sliced", &time_sliced, true);
        let mut loaded = plan::load_object(&mut loader, STAGES_OBJ)?;
        let attaching_ns = crate::os::clock_ns(libc::CLOCK_MONOTONIC);
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
        let (mut links, mut ebpf) = (loaded.links, loaded.ebpf);
        let slices = super::sliced(filters, attaching_ns, &mut links, &mut ebpf, gate_counting)?;
        Ok(StageTracer {
            links,
            slices,
            ebpf,
            plan,
        })
    }

    /// Sampling by time: attaches or detaches the programs as the slice of
    /// now calls for (see [`Tracer::follow_slices`](super::Tracer::follow_slices)).
    pub fn follow_slices(&mut self) -> anyhow::Result<Option<PauseEdge>> {
        match &mut self.slices {
            Some(slices) => slices.follow(&mut self.links, &mut self.ebpf),
            None => Ok(None),
        }
    }

    /// Sampling by time: when the programs next attach or detach (CLOCK_MONOTONIC ns).
    pub fn next_slice_edge_ns(&self) -> Option<u64> {
        self.slices.as_ref().map(|s| s.next_edge_ns())
    }

    /// Sampling by time: the end of the pause running now, if one is.
    pub fn end_slices(&mut self) -> Option<PauseEdge> {
        self.slices.as_mut()?.end()
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

/// Sampling by time: the programs count only inside the traced window
/// (`counting_window` in bpf/stages.bpf.c), from the slice's start (or
/// from when they were all back, if later) to its end, so that every hook
/// counts over the time the pauses leave, which the counts are scaled by;
/// and take no stamp from before a pause. Leaving, the window is one no
/// time is in, whichever half a program reads while it is written.
fn gate_counting(ebpf: &mut Ebpf, moment: Moment) -> anyhow::Result<()> {
    let window = match moment {
        Moment::Leaving => [u64::MAX, 0],
        Moment::Coming => return Ok(()),
        Moment::Back { from_ns, until_ns } => [from_ns, until_ns],
    };
    let map = ebpf
        .map_mut("counting_window")
        .context("no counting_window map")?;
    Array::<_, [u64; 2]>::try_from(map)?.set(0, window, 0)?;
    Ok(())
}
