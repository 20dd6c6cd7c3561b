//! `tenge-trace stages [filters] [--interval S] [--duration S] [--json FILE] [-- CMD ARGS...]`:
//! stage latencies and per-hook counts aggregated in the kernel, read once per
//! interval and at the end.

use super::output::OutputFile;
use super::session;
use super::terminal;
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

/// `--json`: one object (schema/stages.schema.json) with `filters`, `plan`,
/// `intervals` (each `--interval`, in order, written as it closes: memory
/// stays flat however long `stages` runs), then `elapsed_s`, `end_reason`
/// and `totals` (everything since the programs were attached).
struct StreamedJson {
    target: OutputFile,
    intervals: usize,
}

impl StreamedJson {
    fn start(path: &std::path::Path, filters: &Filters, plan: &ProbePlan) -> anyhow::Result<Self> {
        let mut json = StreamedJson {
            target: OutputFile::create(path, &[])?,
            intervals: 0,
        };
        let head = format!(
            "{{\"filters\":{},\"plan\":{},\"intervals\":[",
            serde_json::to_string(filters)?,
            serde_json::to_string(plan)?
        );
        json.target.write_all(head.as_bytes())?;
        Ok(json)
    }

    fn interval(&mut self, interval: &IntervalSummary) -> anyhow::Result<()> {
        if self.intervals > 0 {
            self.target.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut self.target, interval)?;
        self.intervals += 1;
        Ok(())
    }

    fn finish(
        mut self,
        elapsed_s: f64,
        end_reason: &str,
        totals: &StagesSummary,
    ) -> anyhow::Result<()> {
        let tail = format!(
            "],\"elapsed_s\":{},\"end_reason\":{},\"totals\":{}}}\n",
            serde_json::to_string(&elapsed_s)?,
            serde_json::to_string(end_reason)?,
            serde_json::to_string(totals)?
        );
        self.target.write_all(tail.as_bytes())?;
        self.target.commit()
    }
}

#[derive(Serialize)]
struct IntervalSummary {
    start_s: f64,
    end_s: f64,
    #[serde(flatten)]
    summary: StagesSummary,
}

/// Where the next `--interval` starts.
struct Intervals {
    /// Columns the tables fit in.
    width: Option<usize>,
    started: Instant,
    last: StageTotals,
    last_at: Instant,
}

impl Intervals {
    /// Ends the current interval at the maps' totals `now`: its table and its JSON.
    fn close(&mut self, now: StageTotals) -> (String, IntervalSummary) {
        let summary = StagesSummary::of(&now.since(&self.last));
        let at = Instant::now();
        let (start_s, end_s) = (
            (self.last_at - self.started).as_secs_f64(),
            (at - self.started).as_secs_f64(),
        );
        let table = format!(
            "{start_s:.1}-{end_s:.1} s\n{}\n",
            summary.render_table(self.width)
        );
        (self.last, self.last_at) = (now, at);
        let interval = IntervalSummary {
            start_s,
            end_s,
            summary,
        };
        (table, interval)
    }
}

pub fn run(args: StagesArgs) -> anyhow::Result<ExitCode> {
    let json_to_stdout = args.json.as_deref() == Some(std::path::Path::new("-"));
    // Tables go where the JSON does not.
    let out = match json_to_stdout {
        true => terminal::stderr(),
        false => terminal::stdout(),
    };
    let print = |text: &str| {
        if json_to_stdout {
            eprint!("{}", out.text(text));
        } else {
            print!("{}", out.text(text));
        }
    };
    let flags = session::StopFlags::install()?;
    let filters = session::flow_filters(&args.filters)?;
    let tracer = StageTracer::start(&filters)?;
    session::report_missing(tracer.plan());
    let started = Instant::now();
    let child = session::spawn_command(&args.command, &flags.stop, json_to_stdout)?;
    let deadline = args.duration.map(|d| started + d);
    let interval = args.interval;

    let mut json = args
        .json
        .as_deref()
        .map(|path| StreamedJson::start(path, &filters, tracer.plan()))
        .transpose()?;
    let mut intervals = Intervals {
        width: out.width,
        started,
        last: StageTotals::default(),
        last_at: started,
    };
    let close = |intervals: &mut Intervals, json: &mut Option<StreamedJson>| {
        let (table, interval) = intervals.close(tracer.read()?);
        print(&table);
        json.as_mut()
            .map(|json| json.interval(&interval))
            .transpose()?;
        anyhow::Ok(())
    };
    while !flags.stop.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(TICK);
        if interval.is_some_and(|every| intervals.last_at.elapsed() >= every) {
            close(&mut intervals, &mut json)?;
        }
    }
    // The interval the end cut short (the duration need not be a multiple).
    if interval.is_some() && intervals.last_at.elapsed() >= TICK {
        close(&mut intervals, &mut json)?;
    }
    let totals = StagesSummary::of(&tracer.read()?);
    let elapsed_s = started.elapsed().as_secs_f64();
    let child_status = child.map(|child| child.finish(&flags));
    let end_reason = session::end_reason(&flags, child_status.is_some(), deadline.is_some());
    print(&format!(
        "total, {elapsed_s:.1} s ({end_reason})\n{}",
        totals.render_table(out.width)
    ));
    if let (Some(json), Some(path)) = (json, &args.json) {
        json.finish(elapsed_s, end_reason, &totals)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    drop(tracer);
    session::exit_code(&flags, child_status)
}
