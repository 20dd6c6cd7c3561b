//! `tenge-trace stages [filters] [--interval S] [--duration S] [--json FILE] [-- CMD ARGS...]`:
//! stage latencies and per-hook counts aggregated in the kernel, read once per
//! interval and at the end.

use super::output::OutputFile;
use super::session;
use crate::cli::StagesArgs;
use anyhow::Context;
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tenge_trace::analysis::stages::{StageTotals, StagesSummary};
use tenge_trace::probe::{Filters, ProbePlan, StageTracer};

/// How often the loop looks at the stop flag and the clock.
const TICK: Duration = Duration::from_millis(50);

/// What `--json` writes: one object, at the end.
#[derive(Serialize)]
struct StagesOutput<'a> {
    filters: &'a Filters,
    plan: &'a ProbePlan,
    elapsed_s: f64,
    end_reason: &'a str,
    /// Everything since the programs were attached.
    totals: StagesSummary,
    /// Each `--interval`, in order (empty without one).
    intervals: Vec<IntervalSummary>,
}

#[derive(Serialize)]
struct IntervalSummary {
    start_s: f64,
    end_s: f64,
    #[serde(flatten)]
    summary: StagesSummary,
}

/// The `--interval` tables so far, and where the next one starts.
struct Intervals {
    started: Instant,
    last: StageTotals,
    last_at: Instant,
    list: Vec<IntervalSummary>,
}

impl Intervals {
    /// Ends the current interval at the maps' totals `now`; its table.
    fn close(&mut self, now: StageTotals) -> String {
        let summary = now.since(&self.last).summary();
        let at = Instant::now();
        let (start_s, end_s) = (
            (self.last_at - self.started).as_secs_f64(),
            (at - self.started).as_secs_f64(),
        );
        let table = format!("{start_s:.1}-{end_s:.1} s\n{}\n", summary.render_table());
        self.list.push(IntervalSummary {
            start_s,
            end_s,
            summary,
        });
        (self.last, self.last_at) = (now, at);
        table
    }
}

pub fn run(args: StagesArgs) -> anyhow::Result<ExitCode> {
    if let Some(secs) = args.interval {
        anyhow::ensure!(secs > 0.0, "--interval must be more than 0 seconds");
    }
    let json_to_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    // Tables go where the JSON does not.
    let print = |text: &str| {
        if json_to_stdout {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
    };
    let flags = session::StopFlags::install()?;
    let filters = session::flow_filters(&args.filters)?;
    let tracer = StageTracer::start(&filters)?;
    session::report_missing(tracer.plan());
    let started = Instant::now();
    let child = session::spawn_command(&args.command, &flags.stop, json_to_stdout)?;
    let deadline = args.duration.map(|s| started + Duration::from_secs_f64(s));
    let interval = args.interval.map(Duration::from_secs_f64);

    let mut intervals = Intervals {
        started,
        last: StageTotals::default(),
        last_at: started,
        list: Vec::new(),
    };
    while !flags.stop.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(TICK);
        if interval.is_some_and(|every| intervals.last_at.elapsed() >= every) {
            print(&intervals.close(tracer.read()?));
        }
    }
    // The interval the end cut short (the duration need not be a multiple).
    if interval.is_some() && intervals.last_at.elapsed() >= TICK {
        print(&intervals.close(tracer.read()?));
    }
    let intervals = intervals.list;
    let totals = tracer.read()?.summary();
    let elapsed_s = started.elapsed().as_secs_f64();
    let child_status = child.map(|child| child.finish(&flags));
    let end_reason = session::end_reason(&flags, child_status.is_some(), deadline.is_some());
    print(&format!(
        "total, {elapsed_s:.1} s ({end_reason})\n{}",
        totals.render_table()
    ));
    if let Some(path) = &args.json {
        let output = StagesOutput {
            filters: &filters,
            plan: tracer.plan(),
            elapsed_s,
            end_reason,
            totals,
            intervals,
        };
        let mut text = serde_json::to_string_pretty(&output)?;
        text.push('\n');
        if json_to_stdout {
            let mut stdout = std::io::stdout().lock();
            super::write_stdout(&mut stdout, text.as_bytes())?;
            super::write_stdout(&mut stdout, &[])?;
        } else {
            let mut out = OutputFile::create(path, &[])?;
            out.write_all(text.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
            out.commit()?;
        }
    }
    drop(tracer);
    session::exit_code(&flags, child_status)
}
