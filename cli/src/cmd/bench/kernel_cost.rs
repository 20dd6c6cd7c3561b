//! In-kernel ns per event of each program: bpf_stats run time per run, minus
//! that of an empty tp_btf program attached to the same hook during the same
//! transfer (bpf_stats' own clock reads and the dispatch cost the same for
//! both). Measured for the tp_btf programs (direct BTF loads) and the raw_tp
//! ones (probe reads), for the tp_btf ones sampling 1/64 (what a hook hit
//! costs when the probe decides to drop it), for `stages`' in-kernel
//! aggregation, and for the bpftrace script as a whole. The tp_btf programs
//! per journey and per hook, compared per data segment, run in interleaved
//! pairs, each reported by its median run. Journeys also on a bulk transfer
//! (64 KiB writes: MSS-sized segments in GSO skbs), every packet and 1/64,
//! for what every-packet tracing of bulk data costs the host's CPUs.

use super::instrument::{Instrument, Mode, Target, TracedSession};
use super::throughput::timed_transfer;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use tenge_trace::lab::{Lab, LabConfig, TransferReport};
use tenge_trace::probe::{
    system_program_stats, Backend, BpfStatsEnabled, Filters, ProgramStats, ReferencePrograms,
    StageTracer, TracerOptions,
};

const PORT: u16 = 15301;
/// Where the floor is measured: one run per packet at the receiver.
const FLOOR_HOOK: &str = "net:netif_receive_skb";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramCost {
    pub hook: String,
    pub program: String,
    pub runs: u64,
    pub ns_per_run: f64,
    /// The empty program on the same hook.
    pub empty_ns_per_run: f64,
    pub added_ns_per_run: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackendCost {
    pub backend: String,
    /// A record per hook hit instead of per packet journey. Absent in older results.
    #[serde(default)]
    pub per_hook: bool,
    /// Records the ring carried (a journey carries several events). Absent in older results.
    #[serde(default)]
    pub ring_records: u64,
    /// Data segments the transfer sent. Absent in older results.
    #[serde(default)]
    pub data_segments: u64,
    /// Every mode compared per data segment runs in interleaved pairs (per
    /// hook, the ring's lock shared by both CPUs, cost 2911 ns in one run
    /// and 6659 in the next): this is the run of the median, these the
    /// figures of all its runs. Empty for the modes run once and in older
    /// results.
    #[serde(default)]
    pub per_segment_runs: Vec<f64>,
    /// 1 in this many blocks kept; 1: every event. Absent in older results.
    #[serde(default = "every_event")]
    pub sample_every: u32,
    pub programs: Vec<ProgramCost>,
    pub events: u64,
    pub runs: u64,
    /// Σ added time / Σ runs.
    pub added_ns_per_run: f64,
    /// Σ added time / events emitted (runs that filter out cost too).
    pub added_ns_per_event: f64,
}

impl BackendCost {
    /// Σ added time / data segments: what tracing a data segment costs in
    /// the kernel, every hook of its journey and its share of the ACKs.
    pub fn added_ns_per_segment(&self) -> Option<f64> {
        (self.data_segments > 0)
            .then(|| self.added_ns_per_run * self.runs as f64 / self.data_segments as f64)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelCost {
    pub workload: String,
    pub seconds: f64,
    pub backends: Vec<BackendCost>,
    /// bpftrace's programs on the same transfer: Σ time / Σ runs, and minus
    /// the mean empty tp_btf program (its classic tracepoints dispatch slower).
    pub bpftrace_ns_per_run: Option<f64>,
    pub bpftrace_added_ns_per_run: Option<f64>,
    pub bpftrace_runs: u64,
    /// Absent in results from before it was measured.
    #[serde(default)]
    pub floor: Option<EmitFloor>,
    /// Absent in results from before it was measured.
    #[serde(default)]
    pub bulk: Option<BulkCost>,
}

/// The tp_btf programs with journeys on a bulk transfer, every packet and
/// 1/64: per MSS-sized data segment, and as a share of the host's CPUs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BulkCost {
    pub workload: String,
    /// The every-packet transfer: its wall time and what it carried.
    pub elapsed_s: f64,
    pub bytes: u64,
    /// Records the every-packet programs wrote (a journey is one).
    pub written: u64,
    pub every: BackendCost,
    pub sampled: BackendCost,
}

impl BulkCost {
    /// The every-packet programs' added time as a share of `cpus` CPUs over
    /// the transfer.
    pub fn cpu_share(&self, cpus: u32) -> Option<f64> {
        let ns = self.every.added_ns_per_segment()? * self.every.data_segments as f64;
        (self.elapsed_s > 0.0 && cpus > 0).then(|| ns / (self.elapsed_s * 1e9 * f64::from(cpus)))
    }
}

/// What one event costs any ring-buffer tracer on this host before it reads
/// anything, measured beside the tp_btf probes during their transfer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EmitFloor {
    pub hook: String,
    pub runs: u64,
    pub empty_ns_per_run: f64,
    /// `bpf_ktime_get_ns()` alone, above the empty program.
    pub clock_ns: f64,
    /// A packet record reserved, stamped (clock, CPU) and submitted, above
    /// the empty program.
    pub emit_ns: f64,
    /// The same record gathered per CPU and written to the ring
    /// `batch_records` at a time, above the empty program. Absent in older
    /// results.
    #[serde(default)]
    pub batched_emit_ns: Option<f64>,
    #[serde(default)]
    pub batch_records: u32,
    pub record_bytes: u64,
    /// Records that found the floor's ring full (then the emit is underestimated).
    pub lost: u64,
}

impl EmitFloor {
    /// One record's emit floor, its clock read included: gathered in a batch
    /// where the records were (`batched`, and the batched emit measured),
    /// else reserved and submitted alone; and whether it was the batched one.
    pub fn record_ns(&self, batched: bool) -> (f64, bool) {
        match self.batched_emit_ns {
            Some(ns) if batched => (ns, true),
            _ => (self.emit_ns, false),
        }
    }
}

fn every_event() -> u32 {
    1
}

/// The tp_btf programs per packet journey and per hook hit, compared per
/// data segment, then the raw_tp ones and sampling 1/64.
const COMPARED: [(Backend, u32, bool); 2] = [(Backend::TpBtf, 1, false), (Backend::TpBtf, 1, true)];

pub fn run(seconds: u32, pairs: u32, scratch: &Path, bpftrace_script: &Path) -> Result<KernelCost> {
    let cfg = LabConfig {
        port: PORT,
        write_size: 100,
        nodelay: true,
        bytes: u64::MAX / 2,
        ..LabConfig::default()
    };
    let lab = Lab::new(&cfg)?;
    let _stats = BpfStatsEnabled::enable()?;
    let mut measured = Measured::default();
    for _ in 0..pairs.max(1) {
        for mode in COMPARED {
            measured.add(&lab, &cfg, seconds, scratch, mode)?;
        }
    }
    for mode in [
        (Backend::RawTp, 1, false),
        (Backend::TpBtf, super::SAMPLED, false),
    ] {
        measured.add(&lab, &cfg, seconds, scratch, mode)?;
    }
    let bulk = bulk_cost(&mut measured, &lab, &cfg, seconds, scratch)?;
    let Measured {
        runs: by_mode,
        empty_mean,
        floor,
    } = measured;
    let mut backends: Vec<BackendCost> = by_mode.into_iter().map(median_run).collect();
    super::check_interrupted()?;
    eprintln!("bench: kernel cost, stages programs");
    backends.push(stages_cost(&lab, &cfg, seconds)?);
    super::check_interrupted()?;
    eprintln!("bench: kernel cost, bpftrace");
    let before: HashSet<u32> = system_program_stats().into_keys().collect();
    let target = Target {
        sender_netns: lab.sender_netns().name(),
        sender_iface: lab.sender_iface(),
        port: PORT,
        scratch,
        bpftrace_script,
    };
    let bpftrace = Instrument::start(Mode::Bpftrace, &target)?;
    timed_transfer(&lab, &cfg, seconds)?;
    let (time, runs) = system_program_stats()
        .into_iter()
        .filter(|(id, _)| !before.contains(id))
        .fold((0, 0), |(t, n), (_, p)| (t + p.run_time_ns, n + p.run_cnt));
    bpftrace.stop()?;
    let bpftrace_ns = (runs > 0).then(|| time as f64 / runs as f64);
    let empty = empty_mean.iter().copied().flatten().next();
    Ok(KernelCost {
        workload: "in-tree 100 B writes + NODELAY".into(),
        seconds: f64::from(seconds),
        backends,
        bpftrace_ns_per_run: bpftrace_ns,
        bpftrace_added_ns_per_run: bpftrace_ns.zip(empty).map(|(b, e)| b - e),
        bpftrace_runs: runs,
        floor,
        bulk: Some(bulk),
    })
}

/// Journeys, every packet and 1/64, on 64 KiB writes (no TCP_NODELAY).
fn bulk_cost(
    measured: &mut Measured,
    lab: &Lab,
    small: &LabConfig,
    seconds: u32,
    scratch: &Path,
) -> Result<BulkCost> {
    let cfg = LabConfig {
        write_size: 64 << 10,
        nodelay: false,
        ..small.clone()
    };
    let every = measured.trace(lab, &cfg, seconds, scratch, (Backend::TpBtf, 1, false))?;
    let sampled = measured.trace(
        lab,
        &cfg,
        seconds,
        scratch,
        (Backend::TpBtf, super::SAMPLED, false),
    )?;
    Ok(BulkCost {
        workload: "in-tree 64 KiB writes".into(),
        elapsed_s: every.transfer.elapsed.as_secs_f64(),
        bytes: every.transfer.bytes,
        written: every.written,
        every: every.cost,
        sampled: sampled.cost,
    })
}

/// The backends measured so far, by mode in the order first run, each run of each.
#[derive(Default)]
struct Measured {
    runs: Vec<Vec<BackendCost>>,
    empty_mean: Vec<Option<f64>>,
    floor: Option<EmitFloor>,
}

/// One traced transfer.
struct Traced {
    cost: BackendCost,
    transfer: TransferReport,
    /// Records the programs wrote.
    written: u64,
}

impl Measured {
    /// Traces one transfer with `mode` and keeps its cost with the mode's others.
    fn add(
        &mut self,
        lab: &Lab,
        cfg: &LabConfig,
        seconds: u32,
        scratch: &Path,
        mode: (Backend, u32, bool),
    ) -> Result<()> {
        let cost = self.trace(lab, cfg, seconds, scratch, mode)?.cost;
        let same = |b: &BackendCost| {
            (b.backend.as_str(), b.sample_every, b.per_hook)
                == (cost.backend.as_str(), cost.sample_every, cost.per_hook)
        };
        match self.runs.iter_mut().find(|r| r.first().is_some_and(same)) {
            Some(runs) => runs.push(cost),
            None => self.runs.push(vec![cost]),
        }
        Ok(())
    }

    /// Traces one transfer with `backend`, 1 in `sample_every`, per hook or not.
    fn trace(
        &mut self,
        lab: &Lab,
        cfg: &LabConfig,
        seconds: u32,
        scratch: &Path,
        (backend, sample_every, per_hook): (Backend, u32, bool),
    ) -> Result<Traced> {
        super::check_interrupted()?;
        eprintln!(
            "bench: kernel cost, {backend:?} programs, 1 in {sample_every}{}",
            if per_hook { ", per hook" } else { "" }
        );
        let options = TracerOptions {
            filters: Filters {
                port: Some(PORT),
                sample_every,
                ..Filters::default()
            },
            backends: vec![backend],
            per_hook,
            ..TracerOptions::default()
        };
        let session = TracedSession::start(options, scratch.join("kernel-cost.ttr"))?;
        let empty = ReferencePrograms::empty(session.hooks().iter().map(String::as_str))?;
        let floor_programs = (backend == Backend::TpBtf && self.floor.is_none())
            .then(|| ReferencePrograms::floor(FLOOR_HOOK))
            .transpose()?;
        let transfer = timed_transfer(lab, cfg, seconds)?;
        let empty_stats = empty.stats()?;
        if let Some(programs) = floor_programs {
            self.floor = emit_floor(&programs, &empty_stats)?;
        }
        let end = session.stop()?;
        let cost = BackendCost {
            per_hook,
            ring_records: end.stats.ring_records,
            data_segments: transfer.sender.data_segs_out.into(),
            ..backend_cost(
                &format!("{backend:?}"),
                sample_every,
                &end.programs,
                &empty_stats,
                end.stats.events,
            )
        };
        self.empty_mean.push(mean_ns(&empty_stats));
        Ok(Traced {
            cost,
            transfer,
            written: end.stats.written,
        })
    }
}

/// The run whose cost per data segment is the median of `runs`, with every
/// run's figure (a mode run once keeps none).
fn median_run(mut runs: Vec<BackendCost>) -> BackendCost {
    let per_segment = |b: &BackendCost| b.added_ns_per_segment().unwrap_or(0.0);
    runs.sort_by(|a, b| per_segment(a).total_cmp(&per_segment(b)));
    let figures: Vec<f64> = runs.iter().map(per_segment).collect();
    let mut median = runs.swap_remove(runs.len() / 2);
    if figures.len() > 1 {
        median.per_segment_runs = figures;
    }
    median
}

/// `tenge-trace stages`' programs; an event is a packet a hook kept (a
/// count and, past the first hook, a stage sample; a GSO skb's segments
/// each), as no record is sent.
fn stages_cost(lab: &Lab, cfg: &LabConfig, seconds: u32) -> Result<BackendCost> {
    let tracer = StageTracer::start(&Filters {
        port: Some(PORT),
        ..Filters::default()
    })?;
    let empty = ReferencePrograms::empty(tracer.plan().attached().map(|p| p.hook.as_str()))?;
    let transfer = timed_transfer(lab, cfg, seconds)?;
    let empty_stats = empty.stats()?;
    let kept = tracer.read()?.hooks.iter().map(|h| h.packets).sum();
    Ok(BackendCost {
        data_segments: transfer.sender.data_segs_out.into(),
        ..backend_cost("Stages", 1, &tracer.program_stats()?, &empty_stats, kept)
    })
}

fn emit_floor(programs: &ReferencePrograms, empty: &[ProgramStats]) -> Result<Option<EmitFloor>> {
    let stats = programs.stats()?;
    let named = |name: &str| stats.iter().find(|s| s.program == name);
    let base = empty.iter().find(|s| s.hook == FLOOR_HOOK);
    let (Some(base), Some(clock), Some(emit), Some(runs)) = (
        base.and_then(ProgramStats::ns_per_run),
        named("floor_clock").and_then(ProgramStats::ns_per_run),
        named("floor_emit").and_then(ProgramStats::ns_per_run),
        named("floor_emit").map(|s| s.run_cnt),
    ) else {
        return Ok(None);
    };
    let batched = named("floor_batched").and_then(ProgramStats::ns_per_run);
    Ok(Some(EmitFloor {
        hook: FLOOR_HOOK.into(),
        runs,
        empty_ns_per_run: base,
        clock_ns: clock - base,
        emit_ns: emit - base,
        batched_emit_ns: batched.map(|ns| ns - base),
        batch_records: 16,
        record_bytes: std::mem::size_of::<tenge_trace::abi::tt_ev_pkt>() as u64,
        lost: programs.lost()?,
    }))
}

fn mean_ns(stats: &[ProgramStats]) -> Option<f64> {
    let (time, runs) = stats
        .iter()
        .fold((0, 0), |(t, n), s| (t + s.run_time_ns, n + s.run_cnt));
    (runs > 0).then(|| time as f64 / runs as f64)
}

fn backend_cost(
    backend: &str,
    sample_every: u32,
    programs: &[ProgramStats],
    empty: &[ProgramStats],
    events: u64,
) -> BackendCost {
    let empty_by_hook: BTreeMap<&str, f64> = empty
        .iter()
        .filter_map(|s| Some((s.hook.as_str(), s.ns_per_run()?)))
        .collect();
    let programs: Vec<ProgramCost> = programs
        .iter()
        .filter(|p| p.run_cnt > 0)
        .map(|p| {
            let ns = p.ns_per_run().unwrap_or(0.0);
            let base = empty_by_hook.get(p.hook.as_str()).copied().unwrap_or(0.0);
            ProgramCost {
                hook: p.hook.clone(),
                program: p.program.clone(),
                runs: p.run_cnt,
                ns_per_run: ns,
                empty_ns_per_run: base,
                added_ns_per_run: ns - base,
            }
        })
        .collect();
    let runs: u64 = programs.iter().map(|p| p.runs).sum();
    let added: f64 = programs
        .iter()
        .map(|p| p.added_ns_per_run * p.runs as f64)
        .sum();
    BackendCost {
        backend: backend.into(),
        per_hook: false,
        ring_records: 0,
        data_segments: 0,
        per_segment_runs: Vec::new(),
        sample_every,
        programs,
        events,
        runs,
        added_ns_per_run: if runs > 0 { added / runs as f64 } else { 0.0 },
        added_ns_per_event: if events > 0 {
            added / events as f64
        } else {
            0.0
        },
    }
}
