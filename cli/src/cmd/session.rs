//! What record, watch, stages and lab share: Ctrl-C handling, filters from the
//! command line, starting the tracer, the command to run, and the progress line.

use crate::cli::{FilterArgs, FlowFilterArgs};
use anyhow::Context;
use std::io::IsTerminal;
use std::process::{ExitCode, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tenge_trace::collector::CollectStats;
use tenge_trace::probe::{
    CpuProfile, Filters, HookHits, ProbePlan, TaskFilter, Tracer, TracerOptions,
};

/// How a session is told to stop: `stop` by anything (duration, command exit,
/// a signal), `signalled` only by SIGINT/SIGTERM. The first signal stops the
/// session cleanly (a report is printed, the kernel is left clean); a second kills it.
pub struct StopFlags {
    pub stop: Arc<AtomicBool>,
    pub signalled: Arc<AtomicBool>,
    /// The signal that stopped the session (the last one), 0 for none.
    signal: Arc<AtomicUsize>,
}

impl StopFlags {
    pub fn install() -> anyhow::Result<StopFlags> {
        let flags = StopFlags {
            stop: Arc::default(),
            signalled: Arc::default(),
            signal: Arc::default(),
        };
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(
                signal,
                128 + signal,
                Arc::clone(&flags.signalled),
            )?;
            signal_hook::flag::register(signal, Arc::clone(&flags.signalled))?;
            signal_hook::flag::register(signal, Arc::clone(&flags.stop))?;
            signal_hook::flag::register_usize(signal, Arc::clone(&flags.signal), signal as usize)?;
        }
        Ok(flags)
    }

    pub fn interrupted(&self) -> bool {
        self.signalled.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// 128 + the signal that stopped the session, as a shell reports it.
    fn signal_status(&self) -> Option<u8> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(128 + signal as u8),
        }
    }
}

/// How long the command has to exit after the SIGTERM a signalled session
/// forwards to it, before SIGKILL.
const COMMAND_GRACE: Duration = Duration::from_secs(5);

/// The command after `--`, running.
pub struct Child {
    pid: libc::pid_t,
    waiter: JoinHandle<std::io::Result<ExitStatus>>,
}

impl Child {
    /// Its exit status. A signal to the tool alone (a supervisor's `kill`,
    /// systemd's stop) reached us, not it: it gets SIGTERM, then SIGKILL
    /// after [`COMMAND_GRACE`], so the session never waits on it forever.
    pub fn finish(self, flags: &StopFlags) -> std::io::Result<ExitStatus> {
        if flags.interrupted() && !self.waiter.is_finished() {
            // The waiter has not reaped it: the pid is still the command's.
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(self.pid, libc::SIGTERM) };
            let deadline = Instant::now() + COMMAND_GRACE;
            while !self.waiter.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if !self.waiter.is_finished() {
                eprintln!(
                    "tenge-trace: the command ignored SIGTERM for {} s: SIGKILL",
                    COMMAND_GRACE.as_secs()
                );
                // SAFETY: as above.
                unsafe { libc::kill(self.pid, libc::SIGKILL) };
            }
        }
        self.waiter.join().expect("waiter thread")
    }
}

/// The filters and sampling of `args` (by time slices with `--slice`).
fn filters(args: &FilterArgs) -> anyhow::Result<Filters> {
    Ok(Filters {
        sample_every: args.sample,
        sample_slice_ns: slice_ns(args.sample, args.slice)?,
        ..flow_filters(&args.flow)?
    })
}

/// `--slice` in ns (0: none), which samples 1 in `sample` slices.
pub fn slice_ns(sample: u32, slice: Option<Duration>) -> anyhow::Result<u64> {
    anyhow::ensure!(sample >= 1, "--sample must be at least 1");
    match slice {
        None => Ok(0),
        Some(_) if sample == 1 => {
            anyhow::bail!("--slice samples 1 in N slices: give --sample N, N > 1")
        }
        Some(slice) if slice < MIN_SLICE => anyhow::bail!(
            "--slice {slice:?}: at least {MIN_SLICE:?} (attaching the probes takes about a millisecond)"
        ),
        Some(slice) => Ok(slice.as_nanos() as u64),
    }
}

/// The shortest time slice: attaching every probe again takes about 1 ms.
const MIN_SLICE: Duration = Duration::from_millis(5);

/// Port, address, netns and task, every packet kept.
pub fn flow_filters(args: &FlowFilterArgs) -> anyhow::Result<Filters> {
    let netns = match &args.netns {
        None => None,
        Some(name) => {
            Some(tenge_trace::probe::netns_inode(name).with_context(|| format!("--netns {name}"))?)
        }
    };
    Ok(Filters {
        port: args.port,
        addr: args.addr,
        netns,
        sample_every: 1,
        sample_slice_ns: 0,
        task: TaskFilter {
            pid: args.task.pid,
            comm: args.task.comm.clone(),
            cgroup: args.task.cgroup.clone(),
        },
    })
}

/// The tracer `args` ask for (with a CPU profile and the hits counted if
/// asked), and the filters it applies.
pub fn start(
    args: &FilterArgs,
    cpu_profile: Option<CpuProfile>,
    count_hits: bool,
) -> anyhow::Result<(Tracer, Filters)> {
    let options = TracerOptions {
        filters: filters(args)?,
        ring_bytes: args.ring_mib << 20,
        cpu_profile,
        count_hits,
        per_hook: args.journeys.per_hook,
        ..Default::default()
    };
    let tracer = Tracer::start(&options)?;
    report_missing(tracer.plan());
    Ok((tracer, options.filters))
}

/// Names the hooks this kernel attached nothing to.
pub fn report_missing(plan: &ProbePlan) {
    let missing: Vec<String> = plan
        .probes
        .iter()
        .filter(|p| p.backend.is_none())
        .map(|p| format!("{} (without it: no {})", p.hook, p.feeds))
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "tenge-trace: {} probes attached; not available on this kernel (`tenge-trace check` says why): {}",
            plan.attached().count(),
            missing.join("; ")
        );
        // With the verifier's log asked for, the reasons are what was asked.
        if std::env::var_os(tenge_trace::probe::VERIFIER_LOG_VAR).is_some() {
            for probe in plan.probes.iter().filter(|p| p.backend.is_none()) {
                for (backend, why) in &probe.tried {
                    eprintln!("tenge-trace: {} on {backend:?}: {why}", probe.hook);
                }
            }
        }
    }
}

/// The command after `--`, started once the probes are attached (so nothing
/// it does is missed); `stop` is set when it exits. None without a command.
/// `stdout_to_stderr` when our stdout carries output of our own (JSON).
pub fn spawn_command(
    command: &[String],
    stop: &Arc<AtomicBool>,
    stdout_to_stderr: bool,
) -> anyhow::Result<Option<Child>> {
    let Some((program, rest)) = command.split_first() else {
        return Ok(None);
    };
    let mut command = std::process::Command::new(program);
    if stdout_to_stderr {
        command.stdout(std::io::stderr());
    }
    let mut child = command
        .args(rest)
        .spawn()
        .with_context(|| format!("cannot run {program}"))?;
    let pid = child.id() as libc::pid_t;
    let stop = Arc::clone(stop);
    let waiter = std::thread::spawn(move || {
        let status = child.wait();
        stop.store(true, Ordering::SeqCst);
        status
    });
    Ok(Some(Child { pid, waiter }))
}

/// Why a session ended, for its summary line.
pub fn end_reason(flags: &StopFlags, had_command: bool, had_duration: bool) -> &'static str {
    match (flags.interrupted(), had_command, had_duration) {
        (true, _, _) => "interrupted",
        (false, true, _) => "command exited",
        (false, false, true) => "duration",
        _ => "stopped",
    }
}

/// The session's exit code. With a command: 128 + the signal when SIGINT or
/// SIGTERM cut both short (what a shell reports for the command we then
/// stopped), else the command's when it failed. Without one, a signal is how
/// a recording ends: 0, as for tcpdump and perf.
pub fn exit_code(
    flags: &StopFlags,
    child_status: Option<std::io::Result<ExitStatus>>,
) -> anyhow::Result<ExitCode> {
    if let (Some(status), Some(_)) = (flags.signal_status(), &child_status) {
        return Ok(ExitCode::from(status));
    }
    match child_status {
        Some(Ok(status)) if !status.success() => {
            eprintln!("tenge-trace: the command exited with {status}");
            Ok(ExitCode::from(
                status.code().unwrap_or(1).clamp(1, 255) as u8
            ))
        }
        Some(Err(err)) => Err(err).context("waiting for the command"),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// A one-line progress report on stderr, rewritten in place on a terminal.
pub struct Progress {
    enabled: bool,
    last_events: u64,
}

impl Progress {
    pub fn new(quiet: bool) -> Progress {
        Progress {
            enabled: !quiet && std::io::stderr().is_terminal(),
            last_events: 0,
        }
    }

    pub fn tick(&mut self, stats: &CollectStats, flows: usize) {
        if !self.enabled {
            return;
        }
        let rate = stats.events - self.last_events;
        self.last_events = stats.events;
        let lost: u64 = stats.lost.iter().sum();
        eprint!(
            "\r{:>6.1} s  {:>10} events  {:>8} ev/s  {:>4} flows  {:>6} lost ",
            stats.elapsed.as_secs_f64(),
            stats.events,
            rate,
            flows,
            lost
        );
    }

    pub fn done(&self) {
        if self.enabled {
            eprintln!();
        }
    }
}

/// Warns loudly about lost events; returns the total.
pub fn report_lost(stats: &CollectStats) -> u64 {
    let lost: u64 = stats.lost.iter().sum();
    if lost > 0 {
        let by_kind: Vec<String> = stats
            .lost
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(kind, n)| {
                format!(
                    "{} {n}",
                    tenge_trace::event::kind_name(kind as u8).unwrap_or("?")
                )
            })
            .collect();
        eprintln!(
            "tenge-trace: WARNING: {lost} events lost (ring buffer full): {}. Use --sample N, a narrower filter or a larger --ring-mib.",
            by_kind.join(", ")
        );
    }
    if stats.late > 0 {
        eprintln!(
            "tenge-trace: WARNING: {} events came from the kernel after later ones had been \
             handed on (held for time order until every journey begun before had ended, {} ms \
             at most) and are out of time order; --per-hook sends each at once.",
            stats.late,
            tenge_trace::collector::HOLD_NS / 1_000_000
        );
    }
    lost
}

/// What the hit counters say, hooks with hits that ran no program named.
pub fn report_hits(hits: &[HookHits]) {
    let total: u64 = hits.iter().map(|h| h.hits).sum();
    let missed: Vec<String> = hits
        .iter()
        .filter(|h| h.not_run() > 0)
        .map(|h| format!("{} {} of {}", h.hook, h.not_run(), h.hits))
        .collect();
    if missed.is_empty() {
        eprintln!(
            "tenge-trace: every one of the {total} hook hits on {} tracepoints ran its program",
            hits.len()
        );
    } else {
        let not_run = HookHits::total_not_run(hits);
        eprintln!(
            "tenge-trace: WARNING: {not_run} of {total} hook hits ran no program (the kernel \
             skipped them; their events are missing): {}",
            missed.join(", ")
        );
    }
}
