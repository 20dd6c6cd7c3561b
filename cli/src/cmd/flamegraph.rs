//! `tenge-trace flamegraph FILE -o out.svg [--folded] [--flow COOKIE] [--cpu]`

use super::output::OutputFile;
use crate::cli::{Direction, FlamegraphArgs};
use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use tenge_trace::analysis::paths::{PathAnalyzer, PathConfig};
use tenge_trace::event::Body;
use tenge_trace::export::flamegraph::{folded_cpu, folded_paths, render_paths_svg, render_svg};
use tenge_trace::trace_file::TraceReader;

pub fn run(args: FlamegraphArgs) -> anyhow::Result<ExitCode> {
    // Before reading anything: refused if it names the input.
    let mut out = OutputFile::create(&args.output, &[&args.file])?;
    let mut reader = TraceReader::open(&args.file)?;
    let (folded, title) = if args.cpu {
        (
            cpu_stacks(&mut reader, args.flow.is_some())?,
            "CPU time during the recording",
        )
    } else {
        let cfg = PathConfig {
            sample_every: reader.meta().sample_every.max(1),
            ..PathConfig::default()
        };
        let mut paths = PathAnalyzer::new(cfg);
        reader.for_each(|ev| paths.push(ev))?;
        let mut folded = folded_paths(&paths.finish(), args.flow);
        if let Some(direction) = args.direction {
            let prefix = if direction == Direction::Tx {
                "tx;"
            } else {
                "rx;"
            };
            folded.retain(|line| line.starts_with(prefix));
        }
        (folded, "Path costs: direction;path;stage, weighted by time")
    };
    anyhow::ensure!(
        !folded.is_empty(),
        "{}: nothing to draw (no {} in this trace)",
        args.file.display(),
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
        render_paths_svg(&folded, title, &mut out)?;
    }
    out.commit()?;
    eprintln!(
        "tenge-trace: {} stacks written to {}",
        folded.len(),
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// CPU samples as stacks, root first: process, user part, kernel frames.
fn cpu_stacks(reader: &mut TraceReader, per_flow: bool) -> anyhow::Result<Vec<String>> {
    anyhow::ensure!(
        !per_flow,
        "--flow does not apply to --cpu: CPU samples belong to CPUs, not flows"
    );
    let mut counts: HashMap<(u32, i32, bool), u64> = HashMap::new();
    let summary = reader
        .for_each(|ev| {
            if let Body::CpuSample(s) = ev.body {
                *counts
                    .entry((s.tgid, s.kstack_id, s.ustack_id >= 0))
                    .or_default() += 1;
            }
        })?
        .clone();
    let samples = counts.into_iter().map(|((tgid, kstack, in_user), count)| {
        let name = summary
            .process_names
            .get(&tgid)
            .cloned()
            .unwrap_or_else(|| format!("pid {tgid}"));
        let mut frames = vec![name];
        if in_user {
            frames.push("[user]".into());
        }
        if let Some(kernel) = summary.stacks.get(&kstack) {
            // Stacks are stored leaf first.
            frames.extend(kernel.iter().rev().cloned());
        }
        (frames, count)
    });
    Ok(folded_cpu(samples))
}
