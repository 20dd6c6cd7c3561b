//! Programs the benchmark measures ours against (feature `bench`: not in
//! the shipped binary).
//!
//! bpf_stats brackets every run with two clock reads, which in a VM cost more
//! than a small program. [`ReferencePrograms::empty`] attaches a program that
//! does nothing on the same hooks: its ns/run is that overhead plus the
//! dispatch, and subtracting it leaves what our programs add.
//! [`ReferencePrograms::floor`] measures what any ring-buffer tracer pays per
//! event here before it reads anything: the clock, and a record emitted.

use super::{kernel_btf, ProgramStats, Ring};
use anyhow::Context;
use aya::maps::PerCpuArray;
use aya::programs::BtfTracePoint;
use aya::{Ebpf, EbpfLoader, VerifierLogLevel};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Programs that measure the cost of tracing rather than the stack, each a
/// tp_btf program loaded for one hook; detached when dropped.
pub struct ReferencePrograms {
    /// One loaded object per hook: a program is loaded for one attach target.
    attached: Vec<(String, &'static [&'static str], Ebpf)>,
    drain: Option<RingDrain>,
}

/// check.bpf.c's tp_btf program returns 0 and reads nothing: it fits any hook.
const EMPTY: &[&str] = &["check_tp_btf"];
/// floor.bpf.c: a clock read; a packet record reserved, stamped and
/// submitted; the same record written to the ring 16 at a time.
const FLOOR: &[&str] = &["floor_clock", "floor_emit", "floor_batched"];

static FLOOR_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/floor.bpf.o"));

impl ReferencePrograms {
    /// The empty program on each `category:name` hook (tp_btf needs only the name).
    pub fn empty<'a>(hooks: impl IntoIterator<Item = &'a str>) -> anyhow::Result<Self> {
        let attached = hooks
            .into_iter()
            .map(|hook| {
                Ok((
                    hook.to_string(),
                    EMPTY,
                    attach(super::check::CHECK_OBJ, hook, EMPTY)?,
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(ReferencePrograms {
            attached,
            drain: None,
        })
    }

    /// The floor programs on one hook, with a thread draining their ring as
    /// the collector drains the probes' (records pile up otherwise, and a
    /// full ring makes reserving cheaper than it is).
    pub fn floor(hook: &str) -> anyhow::Result<Self> {
        let mut ebpf = attach(FLOOR_OBJ, hook, FLOOR)?;
        let ring = Ring::new(ebpf.take_map("floor_events").context("no floor ring")?)?;
        Ok(ReferencePrograms {
            attached: vec![(hook.to_string(), FLOOR, ebpf)],
            drain: Some(RingDrain::start(ring)),
        })
    }

    pub fn stats(&self) -> anyhow::Result<Vec<ProgramStats>> {
        let mut stats = Vec::new();
        for (hook, programs, ebpf) in &self.attached {
            for name in programs.iter() {
                let program = ebpf
                    .program(name)
                    .with_context(|| format!("no program {name}"))?;
                stats.push(ProgramStats::of(hook, name, program)?);
            }
        }
        Ok(stats)
    }

    /// Floor records that found the ring full (0 for the empty programs).
    pub fn lost(&self) -> anyhow::Result<u64> {
        let mut lost = 0;
        for (_, _, ebpf) in &self.attached {
            if let Some(map) = ebpf.map("floor_lost") {
                let counts = PerCpuArray::<_, u64>::try_from(map)?.get(&0, 0)?;
                lost += counts.iter().sum::<u64>();
            }
        }
        Ok(lost)
    }
}

impl Drop for ReferencePrograms {
    fn drop(&mut self) {
        // Detach before the drain stops, so no program writes to an unread ring.
        self.attached.clear();
        self.drain.take();
    }
}

fn attach(object: &[u8], hook: &str, programs: &[&str]) -> anyhow::Result<Ebpf> {
    let btf = kernel_btf()?;
    let tracepoint = hook.rsplit(':').next().unwrap_or(hook);
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .verifier_log_level(VerifierLogLevel::DISABLE)
        .load(object)?;
    for name in programs {
        let program: &mut BtfTracePoint = ebpf
            .program_mut(name)
            .with_context(|| format!("no program {name}"))?
            .try_into()?;
        program.load(tracepoint, &btf)?;
        program
            .attach()
            .with_context(|| format!("{name} on {hook}"))?;
    }
    Ok(ebpf)
}

/// A thread emptying a ring buffer every millisecond until dropped.
struct RingDrain {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RingDrain {
    fn start(mut ring: Ring) -> RingDrain {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                while ring.drain(u64::MAX, |_| {}).0 > 0 {}
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        RingDrain {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for RingDrain {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

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
