//! `tenge-trace watch`: trace live, alert as flows become window-limited,
//! clamped or stalled (one alert per episode), and summarize at exit. With
//! `--prometheus`, the analyses' figures are published once a second for
//! scrapes (see `tenge_trace::export::prometheus`). Closed and idle sockets
//! are retired as the watch goes (`--flow-idle`, `--flow-rows`), so memory
//! stays bounded however long it runs.

use super::alerts::AlertPrinter;
use super::session;
use super::terminal;
use crate::cli::WatchArgs;
use anyhow::Context;
use std::cell::RefCell;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use tenge_trace::analysis::paths::PathConfig;
use tenge_trace::analysis::window::Alerts;
use tenge_trace::analysis::{Analysis, Provenance};
use tenge_trace::collector::{CollectStats, Collector, Sink};
use tenge_trace::event::Event;
use tenge_trace::export::metrics_server::{Access, MetricsServer};
use tenge_trace::export::prometheus::Snapshot;
use tenge_trace::export::table::render_report;
use tenge_trace::export::web_config;
use tenge_trace::os::{self, clock_ns, kernel_release};

/// Exit status when `--exit-on-alert` fired.
const EXIT_ALERT: u8 = 3;

pub fn run(args: WatchArgs) -> anyhow::Result<ExitCode> {
    let flags = session::StopFlags::install()?;
    let (mut tracer, filters) = session::start(&args.filters, None, false)?;
    let paths = PathConfig {
        sample_every: filters.sample_every,
        sample_slice_ns: filters.sample_slice_ns,
        ..PathConfig::default()
    };
    let mut cfg = super::report::analysis_config(&args.alerts, paths, os::rmem_max());
    // Watches run for hours: closed and idle sockets are retired.
    cfg.retire = super::report::retire_config(&args.retire, true)?;
    let analysis = RefCell::new(Analysis::new(cfg));
    let cgroups = RefCell::new(os::CgroupNames::default());
    let metrics = args
        .prometheus
        .map(|addr| {
            let access = match &args.prometheus_web_config {
                Some(path) => web_config::load(path)
                    .map_err(|e| anyhow::anyhow!("--prometheus-web-config {e}"))?,
                None => Access::default(),
            };
            let open = access.users.is_none() && access.tls.is_none();
            let server = MetricsServer::start(addr, access)
                .with_context(|| format!("--prometheus {addr}: cannot listen"))?;
            eprintln!("tenge-trace: Prometheus metrics on {}", server.url());
            if open && !addr.ip().is_loopback() {
                eprintln!(
                    "tenge-trace: warning: /metrics asks no password: anyone who reaches \
                     {addr} sees the flows watched (--prometheus-web-config names who may; \
                     --netns limits what is watched)"
                );
            }
            anyhow::Ok((server, tracer.plan().clone()))
        })
        .transpose()?;
    let mut printer = AlertPrinter::new(args.json);
    let mut progress = session::Progress::new(args.json);
    let deadline = args.duration.map(|d| Instant::now() + d);
    if !args.json {
        eprintln!("tenge-trace: watching; Ctrl-C for the summary");
    }
    let mut sink = Alerting {
        analysis: &analysis,
        printer: &mut printer,
        ev: Event::zeroed(),
        stop_on_alert: args.exit_on_alert.then_some(&flags.stop),
        on_tick: |stats: &CollectStats| {
            // Sockets go while no event comes too (event times are CLOCK_MONOTONIC).
            analysis
                .borrow_mut()
                .retire_due(clock_ns(libc::CLOCK_MONOTONIC));
            let analysis = analysis.borrow();
            progress.tick(stats, analysis.flows().len());
            if let Some((server, plan)) = &metrics {
                let mut snapshot = Snapshot::of(
                    &analysis,
                    args.prometheus_flows,
                    stats.events,
                    stats.lost_by_name(),
                    plan,
                );
                let mut cgroups = cgroups.borrow_mut();
                snapshot.name_cgroups(|id| cgroups.name(id).map(String::from));
                server.publish(snapshot);
            }
        },
    };
    let stats = Collector::new().run(&mut tracer, &flags.stop, deadline, &mut sink)?;
    progress.done();
    drop(tracer);
    drop(metrics);
    let lost = stats.lost_by_name();
    let mut report = analysis.into_inner().finish(Provenance {
        kernel_release: kernel_release(),
        sample_every: args.filters.sample,
        lost,
        hits_not_run: None,
        damage: None,
    });
    report.resolve_cgroups(&os::cgroup_paths(&report.cgroup_ids()));
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "type": "summary", "report": report })
        );
    } else {
        let out = terminal::stdout();
        print!("{}", out.text(&render_report(&report, out.width)));
    }
    session::report_lost(&stats);
    Ok(if args.exit_on_alert && printer.count > 0 {
        ExitCode::from(EXIT_ALERT)
    } else {
        ExitCode::SUCCESS
    })
}

/// Alerts as they come: from each record, and from time passing (a stall
/// no event of its socket brought), printed; `stop_on_alert` set by the
/// first that is not a clearing. `on_tick` every second.
struct Alerting<'a, T> {
    analysis: &'a RefCell<Analysis>,
    printer: &'a mut AlertPrinter,
    /// Every record is decoded into this one event (as replays do).
    ev: Event,
    stop_on_alert: Option<&'a AtomicBool>,
    on_tick: T,
}

impl<T: FnMut(&CollectStats)> Alerting<'_, T> {
    fn print(printer: &mut AlertPrinter, stop_on_alert: Option<&AtomicBool>, alerts: Alerts<'_>) {
        for alert in alerts {
            printer.print(&alert);
            if let (Some(stop), false) = (stop_on_alert, alert.cleared) {
                stop.store(true, Ordering::SeqCst);
            }
        }
    }
}

impl<T: FnMut(&CollectStats)> Sink for Alerting<'_, T> {
    fn record(&mut self, record: &[u8]) -> anyhow::Result<()> {
        if Event::decode_first(record, &mut self.ev).is_some() {
            let mut analysis = self.analysis.borrow_mut();
            Self::print(self.printer, self.stop_on_alert, analysis.push(&self.ev));
        }
        Ok(())
    }

    fn tick(&mut self, stats: &CollectStats) -> anyhow::Result<()> {
        (self.on_tick)(stats);
        Ok(())
    }

    fn caught_up(&mut self, until_ns: u64) -> anyhow::Result<()> {
        let mut analysis = self.analysis.borrow_mut();
        Self::print(self.printer, self.stop_on_alert, analysis.tick(until_ns));
        Ok(())
    }
}
