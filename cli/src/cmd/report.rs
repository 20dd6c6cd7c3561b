//! `tenge-trace report FILE [--json]`

use super::terminal;
use crate::cli::{AlertArgs, ReportArgs, RetireArgs};
use std::process::ExitCode;
use tenge_trace::analysis::paths::PathConfig;
use tenge_trace::analysis::{AnalysisConfig, RetireConfig};
use tenge_trace::export::table::render_report;
use tenge_trace::replay;

/// The analyses' settings from the command line, and `paths` (sampled as the events were).
/// `rmem_max`: the recording host's (its `TraceMeta`), or this host's live.
pub fn analysis_config(
    alerts: &AlertArgs,
    paths: PathConfig,
    rmem_max: Option<u64>,
) -> AnalysisConfig {
    let mut cfg = AnalysisConfig::default();
    cfg.window.threshold_pct = alerts.threshold;
    cfg.window.min_duration_ns = alerts.min_duration * 1_000_000;
    cfg.window.rmem_max = rmem_max;
    cfg.paths = paths;
    cfg
}

/// Retirement as asked for; `by_default`: also when no flag asks.
pub fn retire_config(args: &RetireArgs, by_default: bool) -> anyhow::Result<Option<RetireConfig>> {
    if !by_default && args.flow_idle.is_none() && args.flow_rows.is_none() {
        return Ok(None);
    }
    let defaults = RetireConfig::default();
    let idle_ns = match args.flow_idle {
        None => defaults.idle_ns,
        Some(s) if s.is_finite() && s >= 0.0 => Some((s * 1e9) as u64).filter(|&ns| ns > 0),
        Some(s) => anyhow::bail!("--flow-idle {s}: must be a number of seconds, 0 or more"),
    };
    Ok(Some(RetireConfig {
        idle_ns,
        max_rows: args.flow_rows.unwrap_or(defaults.max_rows),
        ..defaults
    }))
}

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let mut reader = args.input.open()?;
    let meta = reader.meta();
    let mut cfg = analysis_config(&args.alerts, PathConfig::of_recording(meta), meta.rmem_max);
    // Off by default: a recording's report shows every socket, as it always did.
    cfg.retire = retire_config(&args.retire, false)?;
    let report = replay::report(&mut reader, cfg)?;
    args.input.warn_after_reading(&reader);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let out = terminal::stdout();
        print!("{}", out.text(&render_report(&report, out.width)));
    }
    Ok(ExitCode::SUCCESS)
}
