//! `tenge-trace record -o FILE [filters] [--duration S | -- CMD ARGS...]`

use super::session;
use crate::cli::RecordArgs;
use std::process::ExitCode;
use std::time::Instant;
use tenge_trace::collector::{CollectStats, Collector, Recording, Sink};
use tenge_trace::probe::{CpuProfile, HookHits};
use tenge_trace::trace_file::{KernelPointers, TraceMeta, TraceSummary, TraceWriter};

pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    let flags = session::StopFlags::install()?;
    let stop = &flags.stop;
    let cpu_profile = args.cpu_profile.then_some(CpuProfile {
        hz: args.cpu_hz,
        stacks: args.stack_storage,
    });
    let (mut tracer, filters) = session::start(&args.filters, cpu_profile, args.count_hits)?;
    let mut meta = TraceMeta::of_session(
        tracer.plan(),
        &filters,
        filters.sample_every,
        filters.sample_slice_ns,
    )?;
    meta.command = args.command.clone();
    if args.keep_kernel_pointers {
        meta.kernel_pointers = KernelPointers::Kept;
    }
    let mut recording = Recording::new(TraceWriter::create(&args.output, &meta)?);
    let partial = recording.partial().map(|p| p.to_path_buf());
    let child = match session::spawn_command(&args.command, stop, false) {
        Ok(child) => child,
        Err(err) => {
            // A command that cannot start leaves no file behind.
            drop(recording);
            if let Some(partial) = &partial {
                let _ = std::fs::remove_file(partial);
            }
            return Err(err);
        }
    };
    let deadline = args.duration.map(|d| Instant::now() + d);

    let mut sink = RecordSink {
        recording: &mut recording,
        progress: session::Progress::new(args.quiet),
    };
    let stats = Collector::new()
        .run(&mut tracer, stop, deadline, &mut sink)
        .map_err(|err| match &partial {
            Some(partial) => err.context(format!("what was recorded is in {}", partial.display())),
            None => err,
        })?;
    sink.progress.done();

    let child_status = child.map(|child| child.finish(&flags));
    let end_reason = session::end_reason(&flags, child_status.is_some(), deadline.is_some());
    let hook_hits = tracer.hook_hits().map(<[HookHits]>::to_vec);
    let summary = TraceSummary {
        stacks: tracer
            .resolve_stacks(&recording.stack_ids())
            .into_iter()
            .collect(),
        user_stacks: {
            let (stacks, maps) = recording.user_stacks();
            tracer.resolve_user_stacks(stacks, maps)
        },
        process_names: recording.take_process_names(),
        cgroups: recording.cgroup_paths(),
        hook_hits,
        ..stats.trace_summary(end_reason)
    };
    drop(tracer);
    let flows = recording.sockets();
    let lost_stacks = recording.lost_stacks();
    recording.finish(&summary)?;

    eprintln!(
        "tenge-trace: {} events from {} flows in {:.1} s ({}) written to {}",
        stats.events,
        flows,
        stats.elapsed.as_secs_f64(),
        end_reason,
        args.output.display()
    );
    session::report_lost(&stats);
    if let Some(warning) = lost_stacks.warning() {
        eprintln!("tenge-trace: {warning}");
    }
    if let Some(hits) = &summary.hook_hits {
        session::report_hits(hits);
    }
    session::exit_code(&flags, child_status)
}

/// The recording, with progress shown every tick.
struct RecordSink<'a> {
    recording: &'a mut Recording,
    progress: session::Progress,
}

impl Sink for RecordSink<'_> {
    fn in_time_order(&self) -> bool {
        self.recording.in_time_order()
    }

    #[inline]
    fn record(&mut self, record: &[u8]) -> anyhow::Result<()> {
        Sink::record(self.recording, record)
    }

    fn tick(&mut self, stats: &CollectStats) -> anyhow::Result<()> {
        self.progress.tick(stats, self.recording.sockets());
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        Sink::flush(self.recording)
    }

    fn caught_up(&mut self, until_ns: u64) -> anyhow::Result<()> {
        self.recording.caught_up(until_ns)
    }
}
