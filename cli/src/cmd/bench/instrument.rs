//! The things a benchmarked transfer runs under: nothing, tenge-trace (full
//! or sampled, or its in-kernel stages), the equivalent bpftrace script, or
//! tcpdump. Each starts
//! before the transfer and is stopped (and cleaned up) after it.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tenge_trace::collector::{CollectStats, Collector, Recording};
use tenge_trace::hooks;
use tenge_trace::os::thread_cpu;
use tenge_trace::probe::{
    Filters, ProgramStats, ReferencePrograms, StageTracer, Tracer, TracerOptions,
};
use tenge_trace::trace_file::{TraceMeta, TraceWriter};

/// How long an external tool may take to attach (bpftrace compiles first).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Untraced,
    /// tenge-trace, every packet (one record per packet journey).
    Full,
    /// tenge-trace, every packet, a record per hook hit (`--per-hook`).
    FullPerHook,
    /// tenge-trace, one packet in 64.
    Sampled64,
    /// tenge-trace, every packet of one time slice in 64, detached between.
    Sliced64,
    /// tenge-trace sampling by time whose slice never comes: loaded, the
    /// collector running, the probes detached throughout. What sampling by
    /// time costs apart from its slices.
    Detached,
    /// An empty program on each of `record`'s hooks, no collector: the
    /// dispatch that any design seeing every packet at these hooks pays,
    /// whatever it records (the floor of the modes that run on every hit).
    EmptyRecordHooks,
    /// The same on the hooks of `stages`.
    EmptyStagesHooks,
    /// `tenge-trace stages`: latencies aggregated in the kernel, nothing per packet sent.
    Stages,
    /// `tenge-trace stages --sample 64 --slice 20ms`: the same in one time
    /// slice in 64, the programs detached between.
    StagesSliced64,
    Bpftrace,
    /// tcpdump -s 128 -w FILE.
    Tcpdump,
}

impl Mode {
    pub const ALL: [Mode; 12] = [
        Mode::Untraced,
        Mode::Full,
        Mode::FullPerHook,
        Mode::Sampled64,
        Mode::Sliced64,
        Mode::Detached,
        Mode::EmptyRecordHooks,
        Mode::EmptyStagesHooks,
        Mode::Stages,
        Mode::StagesSliced64,
        Mode::Bpftrace,
        Mode::Tcpdump,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Mode::Untraced => "untraced",
            Mode::Full => "tenge-trace, every packet",
            Mode::FullPerHook => "tenge-trace, every packet, per hook",
            Mode::Sampled64 => "tenge-trace, 1/64 sampled",
            Mode::Sliced64 => "tenge-trace, 1/64 of the time (20 ms slices)",
            Mode::Detached => "tenge-trace, loaded, probes detached (no slice)",
            Mode::EmptyRecordHooks => "empty programs on record's hooks",
            Mode::EmptyStagesHooks => "empty programs on stages' hooks",
            Mode::Stages => "tenge-trace, in-kernel stages",
            Mode::StagesSliced64 => "tenge-trace, in-kernel stages, 1/64 of the time",
            Mode::Bpftrace => "bpftrace, same hooks",
            Mode::Tcpdump => "tcpdump -s 128 -w",
        }
    }
}

/// Where the traffic is and where tools may write.
pub struct Target<'a> {
    pub sender_netns: &'a str,
    pub sender_iface: &'a str,
    pub port: u16,
    pub scratch: &'a Path,
    pub bpftrace_script: &'a Path,
}

/// What a tool reported once stopped.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ToolCounts {
    pub events: u64,
    /// tenge-trace: the ring records that carried the events (a journey
    /// carries several). Absent in older results.
    #[serde(default)]
    pub ring_records: u64,
    /// tenge-trace: the records its programs wrote (a journey is one), which
    /// batches gather into fewer ring records. Absent in older results.
    #[serde(default)]
    pub written: u64,
    /// Events (or packets) the tool lost: ring full, or dropped by the kernel.
    pub lost: u64,
}

pub enum Instrument {
    None,
    Tenge(TracedSession),
    /// Held for as long as the transfer runs: dropping it detaches them.
    Empty {
        _programs: ReferencePrograms,
    },
    Stages(StageTracer),
    SlicedStages(SlicedStages),
    External {
        mode: Mode,
        child: Child,
        output: PathBuf,
        stderr: JoinHandle<Vec<String>>,
    },
}

impl Instrument {
    pub fn start(mode: Mode, target: &Target) -> Result<Instrument> {
        let output = target.scratch.join(format!("{mode:?}.out").to_lowercase());
        match mode {
            Mode::Untraced => Ok(Instrument::None),
            Mode::Full | Mode::FullPerHook | Mode::Sampled64 | Mode::Sliced64 | Mode::Detached => {
                let options = TracerOptions {
                    filters: Filters {
                        port: Some(target.port),
                        sample_every: match mode {
                            Mode::Sampled64 | Mode::Sliced64 => super::SAMPLED,
                            // One slice in 2^32 of 20 ms: none in years.
                            Mode::Detached => u32::MAX,
                            _ => 1,
                        },
                        sample_slice_ns: match mode {
                            Mode::Sliced64 | Mode::Detached => super::SLICE_NS,
                            _ => 0,
                        },
                        ..Filters::default()
                    },
                    per_hook: mode == Mode::FullPerHook,
                    ..TracerOptions::default()
                };
                Ok(Instrument::Tenge(TracedSession::start(options, output)?))
            }
            Mode::EmptyRecordHooks => empty_programs(hooks::per_packet()),
            Mode::EmptyStagesHooks => empty_programs(hooks::in_stages()),
            Mode::Stages => Ok(Instrument::Stages(StageTracer::start(&Filters {
                port: Some(target.port),
                ..Filters::default()
            })?)),
            Mode::StagesSliced64 => Ok(Instrument::SlicedStages(SlicedStages::start(Filters {
                port: Some(target.port),
                sample_every: super::SAMPLED,
                sample_slice_ns: super::SLICE_NS,
                ..Filters::default()
            })?)),
            Mode::Bpftrace => {
                let mut command = Command::new("bpftrace");
                command
                    .arg("-o")
                    .arg(&output)
                    .arg(target.bpftrace_script)
                    .arg(target.port.to_string());
                // It needs tracefs as long as it runs.
                tenge_trace::probe::tracefs_for_child(&mut command);
                // bpftrace writes "Attaching N probes..." into its output file.
                let (child, stderr) = spawn_ready(command, &output, "Attaching")?;
                Ok(Instrument::External {
                    mode,
                    child,
                    output,
                    stderr,
                })
            }
            Mode::Tcpdump => {
                let mut command = Command::new("ip");
                command
                    .args(["netns", "exec", target.sender_netns, "tcpdump"])
                    .args(["-i", target.sender_iface, "-n", "-s", "128", "-w"])
                    .arg(&output)
                    .args(["tcp", "port", &target.port.to_string()]);
                let (child, stderr) = spawn_ready(command, &output, "")?;
                Ok(Instrument::External {
                    mode,
                    child,
                    output,
                    stderr,
                })
            }
        }
    }

    /// Stops the tool, removes its output, and returns what it counted.
    pub fn stop(self) -> Result<ToolCounts> {
        match self {
            Instrument::None | Instrument::Empty { .. } => Ok(ToolCounts::default()),
            Instrument::Tenge(session) => {
                let end = session.stop()?;
                Ok(ToolCounts {
                    events: end.stats.events,
                    ring_records: end.stats.ring_records,
                    written: end.stats.written,
                    lost: end.stats.lost_total(),
                })
            }
            // Events: the packets the hooks counted; nothing can be lost.
            Instrument::Stages(tracer) => Ok(ToolCounts {
                events: packets_counted(&tracer)?,
                ..ToolCounts::default()
            }),
            Instrument::SlicedStages(session) => Ok(ToolCounts {
                events: session.stop()?,
                ..ToolCounts::default()
            }),
            Instrument::External {
                mode,
                mut child,
                output,
                stderr,
            } => {
                // SAFETY: kill(2) on our own child, not yet reaped. `ip netns
                // exec` execs tcpdump, so the pid is the tool itself.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
                child.wait()?;
                let lines = stderr.join().unwrap_or_default();
                let counts = external_counts(mode, &output, &lines);
                let _ = std::fs::remove_file(&output);
                Ok(counts)
            }
        }
    }
}

/// Spawns a tool and waits until it is attached: `ready` appears in its
/// output file, or (empty `ready`) "listening on" on its stderr (tcpdump).
fn spawn_ready(
    mut command: Command,
    output: &Path,
    ready: &str,
) -> Result<(Child, JoinHandle<Vec<String>>)> {
    let _ = std::fs::remove_file(output);
    // SAFETY: prctl is async-signal-safe. If the benchmark dies the tool
    // dies with it instead of tracing on (the signal follows the spawning
    // thread: tools are started from the main thread).
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        })
    };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn {command:?}"))?;
    let stderr = child.stderr.take().expect("piped stderr");
    let (listening_tx, listening_rx) = mpsc::channel();
    let lines = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if line.contains("listening on") {
                let _ = listening_tx.send(());
            }
            lines.push(line);
        }
        lines
    });
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let is_ready = if ready.is_empty() {
            listening_rx.try_recv().is_ok()
        } else {
            std::fs::read_to_string(output).is_ok_and(|text| text.contains(ready))
        };
        if is_ready {
            return Ok((child, lines));
        }
        if let Some(status) = child.try_wait()? {
            let lines = lines.join().unwrap_or_default();
            bail!("{command:?} exited ({status}): {}", lines.join(" / "));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{command:?} not ready after {READY_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn empty_programs<'a>(on: impl Iterator<Item = &'a hooks::Hook>) -> Result<Instrument> {
    let names: Vec<String> = on.map(|h| h.name()).collect();
    let programs = ReferencePrograms::empty(names.iter().map(String::as_str))?;
    Ok(Instrument::Empty {
        _programs: programs,
    })
}

fn packets_counted(tracer: &StageTracer) -> Result<u64> {
    Ok(tracer.read()?.hooks.iter().map(|h| h.packets).sum())
}

/// In-kernel stages sampled by time: a thread attaches and detaches the
/// programs at the slices' edges, as `stages --slice` does.
pub struct SlicedStages(OnThread<u64>);

impl SlicedStages {
    /// Returns once the programs are loaded (and the first pause begun).
    fn start(filters: Filters) -> Result<SlicedStages> {
        let start = move || StageTracer::start(&filters);
        let (thread, ()) = OnThread::spawn(
            "stages",
            start,
            |_| (),
            |mut tracer, stop| {
                while !stop.load(Ordering::SeqCst) {
                    let now = tenge_trace::os::clock_ns(libc::CLOCK_MONOTONIC);
                    let edge = tracer.next_slice_edge_ns().unwrap_or(u64::MAX);
                    let nap = Duration::from_nanos(edge.saturating_sub(now));
                    std::thread::sleep(nap.min(Duration::from_millis(100)));
                    tracer.follow_slices()?;
                }
                packets_counted(&tracer)
            },
        )?;
        Ok(SlicedStages(thread))
    }

    /// The packets the hooks counted (not scaled).
    fn stop(self) -> Result<u64> {
        self.0.stop()
    }
}

/// Something started and then run on a thread of its own until stopped.
struct OnThread<T> {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<T>>,
}

impl<T: Send + 'static> OnThread<T> {
    /// Runs `start` on a new thread and, once it is done, returns what
    /// `ready` says of what it started (or its error); `run` goes on there
    /// with it until [`stop`](Self::stop).
    fn spawn<S, R: Send + 'static>(
        name: &str,
        start: impl FnOnce() -> Result<S> + Send + 'static,
        ready: impl FnOnce(&S) -> R + Send + 'static,
        run: impl FnOnce(S, &AtomicBool) -> Result<T> + Send + 'static,
    ) -> Result<(OnThread<T>, R)> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_stop = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let started = start();
                let said = started.as_ref().map(ready).map_err(|e| format!("{e:#}"));
                let _ = ready_tx.send(said);
                run(started?, &thread_stop)
            })?;
        match ready_rx.recv() {
            Ok(Ok(said)) => Ok((OnThread { stop, handle }, said)),
            Ok(Err(err)) => bail!("{err}"),
            Err(_) => bail!("the {name} thread died while starting"),
        }
    }

    fn stop(self) -> Result<T> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// tcpdump: "N packets captured", "M packets dropped by kernel" on stderr.
/// bpftrace: one output line per event, and "Lost N events" lines.
fn external_counts(mode: Mode, output: &Path, stderr: &[String]) -> ToolCounts {
    let leading_number = |text: &str| -> u64 {
        let digits = text.trim_start();
        digits
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut counts = ToolCounts::default();
    if mode == Mode::Tcpdump {
        for line in stderr {
            if line.ends_with("packets captured") {
                counts.events = leading_number(line);
            } else if line.ends_with("packets dropped by kernel") {
                counts.lost = leading_number(line);
            }
        }
    } else if let Ok(file) = std::fs::File::open(output) {
        for line in BufReader::new(file).lines().map_while(|l| l.ok()) {
            match line.strip_prefix("Lost ") {
                Some(rest) => counts.lost += leading_number(rest),
                None => counts.events += 1,
            }
        }
    }
    counts
}

/// The collector a user of `record` runs ([`Recording`]: write every record
/// to a trace file, count the sockets), on its own thread.
pub struct TracedSession {
    /// The hooks the probes attached to (`category:name`).
    hooks: Vec<String>,
    thread: OnThread<SessionEnd>,
}

pub struct SessionEnd {
    pub stats: CollectStats,
    /// CPU time (user + system) of the collector thread and of the thread
    /// that wrote its trace file.
    pub cpu: Duration,
    /// Per-program run time and runs, read once the probes detached.
    pub programs: Vec<ProgramStats>,
}

impl TracedSession {
    /// Returns once the probes are attached.
    pub fn start(options: TracerOptions, file: PathBuf) -> Result<TracedSession> {
        let start = move || Tracer::start(&options);
        let hooks = |tracer: &Tracer| tracer.plan().attached().map(|p| p.hook.clone()).collect();
        let run = move |tracer, stop: &AtomicBool| collect(tracer, stop, &file);
        let (thread, hooks) = OnThread::spawn("collector", start, hooks, run)?;
        Ok(TracedSession { hooks, thread })
    }

    pub fn hooks(&self) -> &[String] {
        &self.hooks
    }

    pub fn stop(self) -> Result<SessionEnd> {
        self.thread.stop()
    }
}

fn collect(mut tracer: Tracer, stop: &AtomicBool, file: &Path) -> Result<SessionEnd> {
    let cpu_before = thread_cpu();
    let meta = TraceMeta::of_session(tracer.plan(), &serde_json::Value::Null, 1, 0)?;
    let mut recording = Recording::new(TraceWriter::create(file, &meta)?);
    let stats = Collector::new().run(&mut tracer, stop, None, &mut recording)?;
    let writer_cpu = recording.finish(&stats.trace_summary("benchmark"))?;
    let cpu = thread_cpu() - cpu_before + writer_cpu;
    let programs = tracer.program_stats()?;
    drop(tracer);
    let _ = std::fs::remove_file(file);
    Ok(SessionEnd {
        stats,
        cpu,
        programs,
    })
}
