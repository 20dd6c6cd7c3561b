//! `tenge-trace report FILE [--json]`

use crate::cli::{AlertArgs, ReportArgs};
use std::process::ExitCode;
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance};
use tenge_trace::export::table::render_report;
use tenge_trace::trace_file::TraceReader;

/// The analyses' settings from the command line and the recording's sampling.
pub fn analysis_config(alerts: &AlertArgs, sample_every: u32) -> AnalysisConfig {
    let mut cfg = AnalysisConfig::default();
    cfg.window.threshold_pct = alerts.threshold;
    cfg.window.min_duration_ns = alerts.min_duration * 1_000_000;
    cfg.paths.sample_every = sample_every.max(1);
    cfg
}

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let mut reader = TraceReader::open(&args.file)?;
    let meta = reader.meta().clone();
    let mut analysis = Analysis::new(analysis_config(&args.alerts, meta.sample_every));
    let summary = reader
        .for_each(|ev| analysis.push(ev).for_each(drop))?
        .clone();
    let report = analysis.finish(Provenance {
        kernel_release: meta.kernel_release,
        sample_every: meta.sample_every,
        hits_not_run: summary.hits_not_run(),
        lost: summary.lost,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_report(&report));
    }
    Ok(ExitCode::SUCCESS)
}
