//! `tenge-trace watch`: trace live, alert as flows become window-limited,
//! clamped or stalled (one alert per episode), and summarize at exit.

use super::alerts::AlertPrinter;
use super::session;
use crate::cli::WatchArgs;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tenge_trace::analysis::{Analysis, Provenance};
use tenge_trace::collector::Collector;
use tenge_trace::event::Event;
use tenge_trace::export::table::render_report;
use tenge_trace::trace_file::kernel_release;

/// Exit status when `--exit-on-alert` fired.
const EXIT_ALERT: u8 = 3;

pub fn run(args: WatchArgs) -> anyhow::Result<ExitCode> {
    let flags = session::StopFlags::install()?;
    let mut tracer = session::start(&args.filters, None)?;
    let mut analysis = Analysis::new(super::report::analysis_config(
        &args.alerts,
        args.filters.sample,
    ));
    let mut printer = AlertPrinter::new(args.json);
    let mut progress = session::Progress::new(args.json);
    let flow_count = std::cell::Cell::new(0);
    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    if !args.json {
        eprintln!("tenge-trace: watching; Ctrl-C for the summary");
    }
    let stats = Collector::new().run(
        &mut tracer,
        &flags.stop,
        deadline,
        |record| {
            let Ok(ev) = Event::decode(record) else {
                return;
            };
            for alert in analysis.push(&ev) {
                printer.print(&alert);
                if args.exit_on_alert {
                    flags.stop.store(true, Ordering::SeqCst);
                }
            }
            flow_count.set(analysis.flows().len());
        },
        |stats| progress.tick(stats, flow_count.get()),
    )?;
    progress.done();
    drop(tracer);
    let lost = session::lost_by_name(&stats.lost);
    let report = analysis.finish(Provenance {
        kernel_release: kernel_release(),
        sample_every: args.filters.sample,
        lost,
    });
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "type": "summary", "report": report })
        );
    } else {
        print!("{}", render_report(&report));
    }
    session::report_lost(&stats);
    Ok(if args.exit_on_alert && printer.count > 0 {
        ExitCode::from(EXIT_ALERT)
    } else {
        ExitCode::SUCCESS
    })
}
