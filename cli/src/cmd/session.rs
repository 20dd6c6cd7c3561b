//! What record, watch and lab share: Ctrl-C handling, filters from the command
//! line, starting the tracer, and the progress line.

use crate::cli::FilterArgs;
use anyhow::Context;
use std::io::IsTerminal;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tenge_trace::collector::CollectStats;
use tenge_trace::probe::{Filters, Tracer, TracerOptions};

/// How a session is told to stop: `stop` by anything (duration, command exit,
/// a signal), `signalled` only by SIGINT/SIGTERM. The first signal stops the
/// session cleanly (a report is printed, the kernel is left clean); a second kills it.
pub struct StopFlags {
    pub stop: Arc<AtomicBool>,
    pub signalled: Arc<AtomicBool>,
}

impl StopFlags {
    pub fn install() -> anyhow::Result<StopFlags> {
        let flags = StopFlags {
            stop: Arc::default(),
            signalled: Arc::default(),
        };
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(
                signal,
                130,
                Arc::clone(&flags.signalled),
            )?;
            signal_hook::flag::register(signal, Arc::clone(&flags.signalled))?;
            signal_hook::flag::register(signal, Arc::clone(&flags.stop))?;
        }
        Ok(flags)
    }

    pub fn interrupted(&self) -> bool {
        self.signalled.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub fn filters(args: &FilterArgs) -> anyhow::Result<Filters> {
    anyhow::ensure!(args.sample >= 1, "--sample must be at least 1");
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
        sample_every: args.sample,
    })
}

pub fn start(args: &FilterArgs, cpu_profile_hz: Option<u64>) -> anyhow::Result<Tracer> {
    anyhow::ensure!(
        args.ring_mib.is_power_of_two(),
        "--ring-mib must be a power of two"
    );
    let options = TracerOptions {
        filters: filters(args)?,
        ring_bytes: args.ring_mib << 20,
        cpu_profile_hz,
        ..Default::default()
    };
    let tracer = Tracer::start(&options)?;
    let attached = tracer.plan().attached().count();
    let missing: Vec<&str> = tracer
        .plan()
        .probes
        .iter()
        .filter(|p| p.backend.is_none())
        .map(|p| p.hook.as_str())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "tenge-trace: {attached} probes attached; not available on this kernel: {}",
            missing.join(", ")
        );
    }
    Ok(tracer)
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
    lost
}

/// Lost counts by kind name, for files and JSON.
pub fn lost_by_name(lost: &[u64]) -> std::collections::BTreeMap<String, u64> {
    lost.iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .filter_map(|(kind, &n)| Some((tenge_trace::event::kind_name(kind as u8)?.to_string(), n)))
        .collect()
}
