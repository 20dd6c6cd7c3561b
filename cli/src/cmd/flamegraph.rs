//! `tenge-trace flamegraph FILE -o out.svg [--folded] [--flow COOKIE] [--cpu]`

use super::output::OutputFile;
use crate::cli::{Direction, FlamegraphArgs};
use std::io::Write;
use std::process::ExitCode;
use tenge_trace::export::flamegraph::{per_direction_shares, render_paths_svg, render_svg};
use tenge_trace::replay;

pub fn run(args: FlamegraphArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        !(args.cpu && args.flow.is_some()),
        "--flow does not apply to --cpu: CPU samples belong to CPUs, not flows"
    );
    // Before reading anything: refused if it names the input.
    let mut out = OutputFile::create(&args.output, &[&args.input.file])?;
    let mut reader = args.input.open()?;
    let (folded, title) = if args.cpu {
        let (folded, lost) = replay::cpu_stacks(&mut reader)?;
        if let Some(warning) = lost.warning() {
            eprintln!("tenge-trace: {warning}");
        }
        (folded, "CPU time during the recording")
    } else {
        let mut folded = replay::path_stacks(&mut reader, args.flow)?;
        if let Some(direction) = args.direction {
            let prefix = if direction == Direction::Tx {
                "tx;"
            } else {
                "rx;"
            };
            folded.retain(|line| line.starts_with(prefix));
        }
        match args.absolute {
            true => (
                folded,
                "Path costs: direction;path;stage, weighted by time (ns)",
            ),
            false => (
                per_direction_shares(&folded),
                "Path costs: direction;path;stage, each direction half the width \
                 (parts per million of its time; --absolute: ns)",
            ),
        }
    };
    args.input.warn_after_reading(&reader);
    anyhow::ensure!(
        !folded.is_empty(),
        "{}: nothing to draw (no {} in this trace)",
        args.input.file.display(),
        if args.cpu {
            "cpu_sample events: record with --cpu-profile"
        } else {
            "complete packet paths"
        }
    );
    if args.folded {
        for line in &folded {
            writeln!(out, "{line}")?;
        }
    } else if args.cpu {
        render_svg(&folded, title, &mut out)?;
    } else {
        let unit = if args.absolute { "ns" } else { "ppm" };
        render_paths_svg(&folded, title, unit, &mut out)?;
    }
    out.commit()?;
    eprintln!(
        "tenge-trace: {} stacks written to {}",
        folded.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}
