//! Counting the hook hits the kernel ran no program for.
//!
//! On some kernels (this project's 6.18 VM among them) a tracepoint now and
//! then fires without running the BPF program attached to it: perf counts
//! the hit, the program's run count does not move, and nothing inside BPF
//! can see it, so the ring buffer's lost count cannot include it. A
//! [`HitCounter`] counts each hooked tracepoint's hits with perf (counting
//! mode, every CPU) and its program's runs with bpf_stats, and the
//! difference is what the trace misses. Both cost every hit something
//! (perf's tracepoint handler; bpf_stats' two clock reads on every BPF
//! program of the system), so this is an opt-in diagnostic.

use super::{tracefs, Backend, BpfStatsEnabled, Tracer};
use anyhow::Context;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
pub use tenge_events::plan::HookHits;

const PERF_TYPE_TRACEPOINT: u32 = 2;
/// PERF_ATTR_SIZE_VER5: the fields up to `sample_max_stack`.
const PERF_ATTR_SIZE: u32 = 112;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `disabled`, the first bit of the attribute flags.
const ATTR_DISABLED: u64 = 1;

/// `struct perf_event_attr` up to PERF_ATTR_SIZE_VER5; every field this
/// counter does not set is zero (count, in kernel and user, no sampling).
#[repr(C)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    rest: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE as usize);

struct HookCounter {
    hook: String,
    program: String,
    /// One counter per CPU.
    counters: Vec<OwnedFd>,
    runs_before: u64,
}

/// Counts, from [`HitCounter::start`] to [`HitCounter::stop`], the hits of
/// every tracepoint a tracer's programs are attached to and their runs.
pub struct HitCounter {
    hooks: Vec<HookCounter>,
    _stats: BpfStatsEnabled,
}

impl HitCounter {
    /// Starts counting for the probes of `tracer` attached to tracepoints
    /// by BTF or raw (not those on functions, fentry and kprobe, whose hits
    /// perf does not count here; nor classic tracepoints, whose program
    /// returning 0 makes the kernel skip every perf event of the
    /// tracepoint, these counters included: perf_trace_run_bpf_submit).
    pub fn start(tracer: &Tracer) -> anyhow::Result<HitCounter> {
        let stats = BpfStatsEnabled::enable()?;
        let cpus = aya::util::online_cpus()
            .map_err(|(_, err)| err)
            .context("listing the online CPUs")?;
        let probes: Vec<_> = tracer
            .plan()
            .attached()
            .filter(|probe| matches!(probe.backend, Some(Backend::TpBtf | Backend::RawTp)))
            .collect();
        let ids = tracefs::with(|| {
            probes
                .iter()
                .map(|probe| tracepoint_id(&probe.hook))
                .collect::<anyhow::Result<Vec<u64>>>()
        })?;
        let mut hooks = Vec::new();
        for (probe, id) in probes.iter().zip(ids) {
            let counters = cpus
                .iter()
                .map(|&cpu| open_counter(id, cpu))
                .collect::<std::io::Result<Vec<_>>>()
                .with_context(|| format!("perf counter on {}", probe.hook))?;
            hooks.push(HookCounter {
                hook: probe.hook.clone(),
                program: probe.program.clone(),
                counters,
                runs_before: 0,
            });
        }
        let runs = runs_by_program(tracer)?;
        for hook in &mut hooks {
            hook.runs_before = runs(&hook.program);
            for fd in &hook.counters {
                ioctl(fd, PERF_EVENT_IOC_ENABLE)?;
            }
        }
        Ok(HitCounter {
            hooks,
            _stats: stats,
        })
    }

    /// Stops counting (and bpf_stats, if it was off before) and returns
    /// each hook's hits and runs.
    pub fn stop(self, tracer: &Tracer) -> anyhow::Result<Vec<HookHits>> {
        for hook in &self.hooks {
            for fd in &hook.counters {
                ioctl(fd, PERF_EVENT_IOC_DISABLE)?;
            }
        }
        let runs = runs_by_program(tracer)?;
        self.hooks
            .iter()
            .map(|hook| {
                let hits = hook
                    .counters
                    .iter()
                    .map(read_count)
                    .sum::<std::io::Result<u64>>()
                    .with_context(|| format!("reading the perf counters of {}", hook.hook))?;
                Ok(HookHits {
                    hook: hook.hook.clone(),
                    program: hook.program.clone(),
                    hits,
                    runs: runs(&hook.program).saturating_sub(hook.runs_before),
                })
            })
            .collect()
    }
}

/// Run counts of the tracer's programs, by program name.
fn runs_by_program(tracer: &Tracer) -> anyhow::Result<impl Fn(&str) -> u64> {
    let stats = tracer.program_stats()?;
    Ok(move |program: &str| {
        stats
            .iter()
            .find(|s| s.program == program)
            .map_or(0, |s| s.run_cnt)
    })
}

/// The id tracefs gives the tracepoint `category:name`.
fn tracepoint_id(hook: &str) -> anyhow::Result<u64> {
    let (category, name) = hook
        .split_once(':')
        .with_context(|| format!("{hook}: not category:name"))?;
    let path = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(|root| {
            Path::new(root)
                .join("events")
                .join(category)
                .join(name)
                .join("id")
        })
        .find(|p| p.exists())
        .with_context(|| format!("no tracefs id for {hook} (is tracefs mountable?)"))?;
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    text.trim()
        .parse()
        .with_context(|| format!("{}: {text:?}", path.display()))
}

fn open_counter(tracepoint: u64, cpu: u32) -> std::io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        size: PERF_ATTR_SIZE,
        config: tracepoint,
        sample_period: 0,
        sample_type: 0,
        read_format: 0,
        flags: ATTR_DISABLED,
        rest: [0; 8],
    };
    // SAFETY: a valid attr of the size it declares; pid -1 with a CPU counts
    // every task on that CPU.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

fn ioctl(fd: &OwnedFd, request: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: a perf event fd, and a request that takes no argument.
    if unsafe { libc::ioctl(fd.as_raw_fd(), request, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn read_count(fd: &OwnedFd) -> std::io::Result<u64> {
    let mut count = 0u64;
    // SAFETY: reads at most 8 bytes into a u64 (read_format 0: the count).
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut count as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
    match n {
        8 => Ok(count),
        n if n < 0 => Err(std::io::Error::last_os_error()),
        _ => Err(std::io::Error::other("short read of a perf counter")),
    }
}
