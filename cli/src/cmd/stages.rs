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
use tenge_trace::analysis::Pauses;
use tenge_trace::probe::{Filters, PauseEdge, ProbePlan, StageTracer};

/// How often the loop looks at the stop flag at least: each wakeup takes a
/// CPU from the traffic counted (see the collector's `POLL_TIMEOUT`).
const TICK: Duration = Duration::from_millis(250);
/// The shortest last interval printed (the end may cut one short).
const SLIVER: Duration = Duration::from_millis(50);

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
        sampling: Option<&Sampling>,
        totals: &StagesSummary,
    ) -> anyhow::Result<()> {
        let sampling = match sampling {
            Some(sampling) => format!(",\"sampling\":{}", serde_json::to_string(sampling)?),
            None => String::new(),
        };
        let tail = format!(
            "],\"elapsed_s\":{},\"end_reason\":{}{sampling},\"totals\":{}}}\n",
            serde_json::to_string(&elapsed_s)?,
            serde_json::to_string(end_reason)?,
            serde_json::to_string(totals)?
        );
        self.target.write_all(tail.as_bytes())?;
        self.target.commit()
    }
}

/// Sampling by time (`--sample N --slice TIME`): the pauses between the
/// slices counted, and what the counts were multiplied by.
#[derive(Serialize)]
struct Sampling {
    every: u32,
    slice_ns: u64,
    pauses: Pauses,
    scale: f64,
}

/// The slices of a sampled count as they come and go.
struct Slices {
    every: u32,
    slice_ns: u64,
    /// CLOCK_MONOTONIC ns when counting began: the programs' attaching, or
    /// the first pause's beginning if that came first.
    origin_ns: u64,
    pauses: Pauses,
    /// The hooks' packets counted up to the last edge read.
    counted: u64,
}

impl Slices {
    fn of(filters: &Filters) -> Option<Slices> {
        (filters.sample_slice_ns > 0).then(|| Slices {
            every: filters.sample_every,
            slice_ns: filters.sample_slice_ns,
            origin_ns: now_ns(),
            pauses: Pauses::sliced(filters.sample_slice_ns),
            counted: 0,
        })
    }

    /// Follows an edge of the slices; where a window of them closes (a
    /// pause begins, the count ends in a slice) or opens with the count,
    /// the packets the hooks counted in it, for weighing it (see
    /// `Pauses::scale`: the slices' time alone scaled 1-9 % high where the
    /// programs came back late to slices of idle time more than of traffic).
    fn follow(&mut self, edge: Option<PauseEdge>, tracer: &StageTracer) -> anyhow::Result<()> {
        match edge {
            Some(PauseEdge::Begin { at_ns, .. }) => {
                self.origin_ns = self.origin_ns.min(at_ns);
                self.count(tracer)?;
                self.pauses.begin(at_ns);
            }
            Some(PauseEdge::End { at_ns, .. }) => _ = self.pauses.end(at_ns),
            Some(PauseEdge::Bound { at_ns }) => {
                self.origin_ns = self.origin_ns.min(at_ns);
                self.count(tracer)?;
                self.pauses.bound(at_ns);
            }
            None => {}
        }
        Ok(())
    }

    fn count(&mut self, tracer: &StageTracer) -> anyhow::Result<()> {
        let now: u64 = tracer.read()?.hooks.iter().map(|h| h.packets).sum();
        self.pauses.counted(now.saturating_sub(self.counted));
        self.counted = now;
        Ok(())
    }

    /// The words for the table, and the JSON, of counts that end now.
    fn sampling(&self) -> (String, Sampling) {
        let elapsed = now_ns().saturating_sub(self.origin_ns);
        let scale = self
            .pauses
            .scale(self.every, elapsed)
            .unwrap_or(f64::from(self.every));
        let words = tenge_trace::export::table::time_sampling(
            self.every,
            self.slice_ns,
            elapsed,
            &self.pauses,
        );
        let sampling = Sampling {
            every: self.every,
            slice_ns: self.slice_ns,
            pauses: self.pauses,
            scale,
        };
        (format!("{words}: counts scaled by {scale:.2}\n"), sampling)
    }
}

fn now_ns() -> u64 {
    tenge_trace::os::clock_ns(libc::CLOCK_MONOTONIC)
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
    let sample = args.sample.unwrap_or(1);
    let filters = Filters {
        sample_every: sample,
        sample_slice_ns: session::slice_ns(sample, args.slice)?,
        ..session::flow_filters(&args.filters)?
    };
    let mut tracer = StageTracer::start(&filters)?;
    session::report_missing(tracer.plan());
    let mut slices = Slices::of(&filters);
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
    let close =
        |tracer: &StageTracer, intervals: &mut Intervals, json: &mut Option<StreamedJson>| {
            let (table, interval) = intervals.close(tracer.read()?);
            print(&table);
            json.as_mut()
                .map(|json| json.interval(&interval))
                .transpose()?;
            anyhow::Ok(())
        };
    while !flags.stop.load(Ordering::SeqCst) && deadline.is_none_or(|d| Instant::now() < d) {
        let next_interval = interval.map(|every| intervals.last_at + every);
        std::thread::sleep(nap(&tracer, [deadline, next_interval]));
        if let Some(slices) = &mut slices {
            slices.follow(tracer.follow_slices()?, &tracer)?;
        }
        if interval.is_some_and(|every| intervals.last_at.elapsed() >= every) {
            close(&tracer, &mut intervals, &mut json)?;
        }
    }
    // The interval the end cut short (the duration need not be a multiple).
    if interval.is_some() && intervals.last_at.elapsed() >= SLIVER {
        close(&tracer, &mut intervals, &mut json)?;
    }
    let mut totals = StagesSummary::of(&tracer.read()?);
    let sampling = slices
        .as_mut()
        .map(|slices| {
            let last = tracer.end_slices();
            slices.follow(last, &tracer)?;
            anyhow::Ok(slices.sampling())
        })
        .transpose()?;
    let elapsed_s = started.elapsed().as_secs_f64();
    let child_status = child.map(|child| child.finish(&flags));
    let end_reason = session::end_reason(&flags, child_status.is_some(), deadline.is_some());
    let mut head = format!("total, {elapsed_s:.1} s ({end_reason})\n");
    if let Some((words, sampling)) = &sampling {
        head.push_str(words);
        totals = totals.scaled(sampling.scale);
    }
    print(&format!("{head}{}", totals.render_table(out.width)));
    if let (Some(json), Some(path)) = (json, &args.json) {
        let sampling = sampling.as_ref().map(|(_, sampling)| sampling);
        json.finish(elapsed_s, end_reason, sampling, &totals)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    drop(tracer);
    session::exit_code(&flags, child_status)
}

/// How long to sleep: a [`TICK`], or less up to the next edge of a slice
/// or the first of `until`.
fn nap(tracer: &StageTracer, until: [Option<Instant>; 2]) -> Duration {
    let now = Instant::now();
    let to_edge = tracer
        .next_slice_edge_ns()
        .map(|edge| Duration::from_nanos(edge.saturating_sub(now_ns())));
    until
        .into_iter()
        .flatten()
        .map(|at| at.saturating_duration_since(now))
        .chain(to_edge)
        .fold(TICK, Duration::min)
}
