//! `tenge-trace diff BEFORE AFTER [--json]`: two recordings, each replayed
//! through the analyses as `report` does, side by side.

use super::terminal;
use crate::cli::{AlertArgs, DiffArgs, TraceInput};
use std::process::ExitCode;
use tenge_trace::analysis::diff::Diff;
use tenge_trace::analysis::paths::PathConfig;
use tenge_trace::analysis::Report;
use tenge_trace::export::table::render_diff;
use tenge_trace::replay;

pub fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let before = report_of(&args.before, args.strict)?;
    let after = report_of(&args.after, args.strict)?;
    let diff = Diff::of(&before, &after);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&diff)?);
    } else {
        println!(
            "before: {}\nafter:  {}\n",
            args.before.display(),
            args.after.display()
        );
        let out = terminal::stdout();
        print!("{}", out.text(&render_diff(&diff, out.width)));
    }
    Ok(ExitCode::SUCCESS)
}

/// A recording's report, at `report`'s defaults.
fn report_of(file: &std::path::Path, strict: bool) -> anyhow::Result<Report> {
    let input = TraceInput {
        file: file.to_path_buf(),
        strict,
    };
    let mut reader = input.open()?;
    let paths = PathConfig::of_recording(reader.meta());
    let rmem_max = reader.meta().rmem_max;
    let cfg = super::report::analysis_config(&AlertArgs::default(), paths, rmem_max);
    let report = replay::report(&mut reader, cfg)?;
    input.warn_after_reading(&reader);
    Ok(report)
}
