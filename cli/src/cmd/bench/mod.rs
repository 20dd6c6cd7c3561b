//! `tenge-trace bench`: overhead measured side by side in one run, written to
//! bench/results.json and BENCHMARKS.md (see `make bench`).

mod floor;
mod instrument;
mod kernel_cost;
mod markdown;
mod max_rate;
mod replay;
mod stats;
mod throughput;

pub use instrument::Mode;
pub use throughput::Workload;

use crate::cli::{BenchArgs, BenchPart};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The sampled mode's rate: 1 in this many blocks of sequence space.
const SAMPLED: u32 = 64;
/// The time slice of the mode sampled by time.
const SLICE_NS: u64 = 20_000_000;
/// Interleaved pairs of the in-kernel cost's compared modes (at most
/// `--reps`): 3 medians hold where single runs of the per-hook mode moved 2x.
const KERNEL_COST_PAIRS: u32 = 3;

/// Set by the first SIGINT/SIGTERM: the run stops after the transfer in
/// flight, so every namespace, probe, tool, tracefs mount and the
/// bpf_stats descriptor is cleaned up on the way out. A second signal exits at once.
static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn install_interrupt() -> Result<()> {
    let flag = Arc::clone(INTERRUPTED.get_or_init(Arc::default));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&flag))?;
        signal_hook::flag::register(signal, Arc::clone(&flag))?;
    }
    Ok(())
}

/// Called between runs.
pub fn check_interrupted() -> Result<()> {
    if INTERRUPTED.get().is_some_and(|f| f.load(Ordering::SeqCst)) {
        anyhow::bail!("interrupted");
    }
    Ok(())
}

/// Everything one run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: Machine,
    pub quick: bool,
    pub reps: u32,
    /// Older results also have `aggregation_only` (a sentence: no such mode
    /// then), which is ignored: the in-kernel mode is a throughput mode now.
    pub throughput: Option<Vec<throughput::WorkloadResult>>,
    pub kernel_cost: Option<kernel_cost::KernelCost>,
    pub max_rate: Option<max_rate::MaxRate>,
    pub replay: Option<replay::Replay>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_bytes: u64,
    pub date: String,
    pub git_revision: String,
    pub tool_version: String,
}

/// Run lengths: the default run is the real one; --quick is for development.
struct Lengths {
    throughput_s: u32,
    kernel_cost_s: u32,
    max_rate_s: u32,
    replay_segments: u32,
}

impl Lengths {
    fn new(quick: bool) -> Lengths {
        if quick {
            Lengths {
                throughput_s: 1,
                kernel_cost_s: 2,
                max_rate_s: 3,
                replay_segments: 2,
            }
        } else {
            Lengths {
                throughput_s: 4,
                kernel_cost_s: 8,
                max_rate_s: 30,
                replay_segments: 40,
            }
        }
    }
}

pub fn run(args: BenchArgs) -> Result<ExitCode> {
    if let Some(file) = &args.replay_only {
        replay::replay_only(file)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.render_only {
        let json = std::fs::read_to_string(&args.json)
            .with_context(|| format!("reading {}", args.json.display()))?;
        let results: Results = serde_json::from_str(&json)?;
        write_file(&args.markdown, &markdown::render(&results))?;
        return Ok(ExitCode::SUCCESS);
    }
    install_interrupt()?;
    let wants = |part| args.only.is_empty() || args.only.contains(&part);
    let lengths = Lengths::new(args.quick);
    let reps = args.reps.unwrap_or(if args.quick { 2 } else { 5 });
    // Described before measuring: the revision measured, not the one after.
    let machine = Machine::describe();
    let scratch = Scratch::create()?;
    let needs_root = [
        BenchPart::Throughput,
        BenchPart::KernelCost,
        BenchPart::MaxRate,
    ]
    .into_iter()
    .any(wants);
    // SAFETY: geteuid has no preconditions.
    if needs_root && unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("the benchmark needs root (namespaces, BPF); `--only replay` does not");
    }
    let throughput = wants(BenchPart::Throughput)
        .then(|| {
            let mut settings = throughput::ThroughputSettings {
                reps,
                seconds: lengths.throughput_s,
                scratch: &scratch.0,
                bpftrace_script: &args.bpftrace_script,
                workloads: Vec::new(),
                modes: Vec::new(),
            };
            settings.choose(&args.workload, &args.mode);
            throughput::run(&settings)
        })
        .transpose()?;
    let kernel_cost = wants(BenchPart::KernelCost)
        .then(|| {
            let pairs = reps.min(KERNEL_COST_PAIRS);
            kernel_cost::run(
                lengths.kernel_cost_s,
                pairs,
                &scratch.0,
                &args.bpftrace_script,
            )
        })
        .transpose()?;
    let max_rate = wants(BenchPart::MaxRate)
        .then(|| max_rate::run(lengths.max_rate_s, &scratch.0))
        .transpose()?;
    let replay = wants(BenchPart::Replay)
        .then(|| replay::run(lengths.replay_segments, &scratch.0))
        .transpose()?;
    let results = Results {
        machine,
        quick: args.quick,
        reps,
        throughput,
        kernel_cost,
        max_rate,
        replay,
    };
    write_file(&args.json, &serde_json::to_string_pretty(&results)?)?;
    write_file(&args.markdown, &markdown::render(&results))?;
    eprintln!(
        "bench: wrote {} and {}",
        args.json.display(),
        args.markdown.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A private directory for tool outputs and trace files; removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// A new directory under `$TMPDIR` with a name nobody could guess, mode
    /// 0700, never one that was there before (mkdtemp(3)): nothing a local
    /// user planted in the temporary directory is written through.
    fn create() -> Result<Scratch> {
        use std::os::unix::ffi::OsStringExt;
        let template = std::env::temp_dir().join("tenge-bench-XXXXXX");
        let mut bytes = template.into_os_string().into_vec();
        bytes.push(0);
        // SAFETY: a NUL-terminated template that mkdtemp fills in place.
        let made = unsafe { libc::mkdtemp(bytes.as_mut_ptr().cast()) };
        if made.is_null() {
            return Err(std::io::Error::last_os_error()).context("mkdtemp under $TMPDIR");
        }
        bytes.pop();
        Ok(Scratch(PathBuf::from(std::ffi::OsString::from_vec(bytes))))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Machine {
    fn describe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
        };
        let memory_kib: u64 = field(&meminfo, "MemTotal")
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        Machine {
            kernel: tenge_trace::os::kernel_release(),
            cpu_model: field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            memory_bytes: memory_kib * 1024,
            date: command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            git_revision: command_output("git", &["describe", "--always", "--dirty"]),
            tool_version: super::VERSION.to_string(),
        }
    }
}

fn command_output(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::Scratch;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn scratch_directories_are_new_private_and_unguessable() {
        let (a, b) = (Scratch::create().unwrap(), Scratch::create().unwrap());
        assert_ne!(a.0, b.0);
        let mode = std::fs::metadata(&a.0).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let name = a.0.file_name().unwrap().to_string_lossy().into_owned();
        assert!(!name.contains(&std::process::id().to_string()), "{name}");
        let path = a.0.clone();
        drop(a);
        assert!(!path.exists());
    }
}
