//! `tenge-trace lab`: two fresh namespaces, a real transfer, traced, analysed.

use super::alerts::AlertPrinter;
use super::session;
use super::terminal;
use crate::cli::{LabArgs, OnOff, ReaderKind};
use std::cell::RefCell;
use std::process::ExitCode;
use std::sync::Mutex;
use tenge_trace::analysis::paths::PathConfig;
use tenge_trace::analysis::{Analysis, Provenance};
use tenge_trace::collector::Sink;
use tenge_trace::event::Event;
use tenge_trace::export::table::{bps, bytes, render_report};
use tenge_trace::lab::ss::{self, SsSocket};
use tenge_trace::lab::traced::run_traced_with;
use tenge_trace::lab::{Lab, LabConfig, Reader, Scenario, TransferReport};
use tenge_trace::os::{self, kernel_release};
use tenge_trace::probe::{Filters, HookHits, LossCounts, ProbePlan, TracerOptions};
use tenge_trace::trace_file::{TraceMeta, TraceSummary, TraceWriter};

pub fn run(args: LabArgs) -> anyhow::Result<ExitCode> {
    if args.list {
        for scenario in Scenario::ALL {
            println!("{:<14} {}", scenario.name(), scenario.description());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let scenario: Option<Scenario> = args.scenario.as_deref().map(str::parse).transpose()?;
    let cfg = config(scenario, &args);
    anyhow::ensure!(args.sample >= 1, "--sample must be at least 1");
    let flags = session::StopFlags::install()?;

    let lab = Lab::new(&cfg)?;
    if !args.json {
        print_banner(scenario, &cfg, &lab);
    }

    // Created once the tracer started: the header carries its plan and filters.
    let writer = RefCell::new(None);
    let started = |plan: &ProbePlan, filters: &Filters| {
        if let Some(path) = &args.output {
            let meta = TraceMeta::of_session(plan, filters, args.sample, 0)?;
            *writer.borrow_mut() = Some(TraceWriter::create(path, &meta)?);
        }
        Ok(())
    };
    let paths = PathConfig {
        sample_every: args.sample,
        ..PathConfig::default()
    };
    let analysis_config = super::report::analysis_config(&args.alerts, paths, os::rmem_max());
    let mut analysis = Analysis::new(analysis_config);
    let mut sink = LabSink {
        writer: &writer,
        analysis: &mut analysis,
        printer: AlertPrinter::new(args.json),
    };
    let sockets = Mutex::new(Vec::new());
    let options = TracerOptions {
        filters: Filters {
            sample_every: args.sample,
            ..Filters::default()
        },
        per_hook: args.journeys.per_hook,
        // The lab shows the kernel's counters beside what it traced: a hit
        // the kernel ran no program for is named, not left to look like a
        // byte the trace lost.
        count_hits: true,
        ..TracerOptions::default()
    };
    let run = match run_traced_with(
        &lab,
        &cfg,
        options,
        &flags.stop,
        started,
        &mut sink,
        |ends| {
            // The kernel's own counters, read while both sockets are open.
            for netns in [&ends.sender_netns, &ends.receiver_netns] {
                match ss::query(netns, ends.port()) {
                    Ok(found) => sockets
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .extend(found),
                    Err(err) => eprintln!("tenge-trace lab: ss in {netns}: {err:#}"),
                }
            }
        },
    ) {
        Ok(run) => run,
        Err(err) if flags.interrupted() => {
            // Nothing to report yet; the namespaces go with `lab`.
            eprintln!("tenge-trace lab: interrupted before the transfer got going ({err:#})");
            return Ok(ExitCode::from(130));
        }
        Err(err) => return Err(err),
    };
    let mut report = analysis.finish(Provenance {
        kernel_release: kernel_release(),
        sample_every: args.sample,
        lost: run.stats.lost_by_name(),
        hits_not_run: run.hook_hits.as_deref().map(HookHits::total_not_run),
        damage: None,
    });
    // The transfer's cgroups are this process's: still there to be named.
    let cgroups = os::cgroup_paths(&report.cgroup_ids());
    report.resolve_cgroups(&cgroups);
    if let (Some(writer), Some(path)) = (writer.into_inner(), &args.output) {
        let end_reason = match flags.interrupted() {
            true => "interrupted",
            false => "transfer done",
        };
        writer.finish(&TraceSummary {
            cgroups,
            hook_hits: run.hook_hits.clone(),
            ..run.stats.trace_summary(end_reason)
        })?;
        eprintln!("tenge-trace lab: trace written to {}", path.display());
    }
    let sockets = sockets
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let loss = lab.loss()?;
    if args.json {
        // Like watch --json: alert lines, then one summary line.
        let out = serde_json::json!({
            "type": "summary",
            "scenario": scenario.map(|s| s.name()),
            "config": cfg,
            "transfer": run.transfer,
            "ss": sockets,
            "loss": loss,
            "probe_plan": run.plan,
            "report": report,
        });
        println!("{out}");
    } else {
        print_transfer(&run.transfer, &sockets, loss);
        let out = terminal::stdout();
        print!("\n{}", out.text(&render_report(&report, out.width)));
    }
    session::report_lost(&run.stats);
    // Which hooks the report's warning is about.
    if let Some(hits) = run.hook_hits.as_deref() {
        if HookHits::total_not_run(hits) > 0 {
            session::report_hits(hits);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What the lab is about to run, on stderr.
fn print_banner(scenario: Option<Scenario>, cfg: &LabConfig, lab: &Lab) {
    let banner = format!(
        "tenge-trace lab: {} — {} → {} over {}, MTU {}, {} bytes, window scaling {}, rcvbuf {}, {} reader{}",
        scenario.map_or("custom", |s| s.name()),
        lab.sender_addr(cfg.ipv6),
        lab.receiver_addr(cfg.ipv6),
        match lab.on_nics() {
            true => format!("NICs {} → {}", lab.sender_iface(), lab.receiver_iface()),
            false => "veth".to_string(),
        },
        cfg.mtu,
        cfg.bytes,
        if cfg.window_scaling { "on" } else { "off" },
        cfg.rcvbuf.map_or("default".into(), |b| b.to_string()),
        if matches!(cfg.reader, Reader::Fast) { "fast" } else { "slow" },
        cfg.drop_every
            .map_or(String::new(), |n| format!(", 1 in {n} data skbs dropped")),
    );
    eprintln!("{}", terminal::stderr().text(&banner));
}

/// The transfer, what the lab dropped, and the kernel's own view of its sockets (ss -ti).
fn print_transfer(t: &TransferReport, sockets: &[SsSocket], loss: Option<LossCounts>) {
    println!(
        "\nTRANSFER  {} in {:.3} s = {}{}",
        bytes(t.bytes),
        t.elapsed.as_secs_f64(),
        bps(t.throughput_bps),
        if t.completed { "" } else { " (interrupted)" }
    );
    if let Some(loss) = loss {
        println!(
            "LOSS      {} of {} data skbs dropped at the receiver's interface ({} segments)",
            loss.dropped_skbs, loss.data_skbs, loss.dropped_segments
        );
    }
    println!("KERNEL (ss -ti while the sockets were open)");
    let o = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
    for s in sockets {
        println!(
            "  {} -> {}  mss {} rcvmss {} advmss {} cwnd {} snd_wnd {} rcv_wnd {} retrans {} busy {} rwnd_limited {} sndbuf_limited {}",
            s.local.map_or("?".into(), |a| a.to_string()),
            s.peer.map_or("?".into(), |a| a.to_string()),
            o(s.mss),
            o(s.rcvmss),
            o(s.advmss),
            o(s.cwnd),
            o(s.snd_wnd),
            o(s.rcv_wnd),
            o(s.retrans_total),
            ms(s.busy_ms),
            ms(s.rwnd_limited_ms),
            ms(s.sndbuf_limited_ms)
        );
    }
}

/// Each record analysed (its alerts printed, and those time brings) and
/// written to the `-o` file, if any.
struct LabSink<'a> {
    writer: &'a RefCell<Option<TraceWriter>>,
    analysis: &'a mut Analysis,
    printer: AlertPrinter,
}

impl Sink for LabSink<'_> {
    fn record(&mut self, record: &[u8]) -> anyhow::Result<()> {
        if let Ok(ev) = Event::decode(record) {
            for alert in self.analysis.push(&ev) {
                self.printer.print(&alert);
            }
        }
        if let Some(writer) = self.writer.borrow_mut().as_mut() {
            writer.write_record(record)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        if let Some(writer) = self.writer.borrow_mut().as_mut() {
            writer.flush()?;
        }
        Ok(())
    }

    fn caught_up(&mut self, until_ns: u64) -> anyhow::Result<()> {
        for alert in self.analysis.tick(until_ns) {
            self.printer.print(&alert);
        }
        Ok(())
    }
}

/// The scenario's settings (or the defaults), with the flags on top.
fn config(scenario: Option<Scenario>, args: &LabArgs) -> LabConfig {
    let mut cfg = scenario.map_or_else(|| Scenario::MssClamp.config(), |s| s.config());
    cfg.link = args.link.clone();
    if let Some(mtu) = args.mtu {
        cfg.mtu = mtu;
    }
    if let Some(gro) = args.gro {
        cfg.gro = Some(gro == OnOff::On);
    }
    if let Some(rcvbuf) = args.rcvbuf {
        cfg.rcvbuf = Some(rcvbuf);
    }
    if let Some(scaling) = args.window_scaling {
        cfg.window_scaling = scaling == OnOff::On;
    }
    match args.reader {
        Some(ReaderKind::Fast) => cfg.reader = Reader::Fast,
        Some(ReaderKind::Slow) => cfg.reader = Reader::slow_default(),
        None => {}
    }
    if let Some(bytes) = args.bytes {
        cfg.bytes = bytes;
    }
    if let Some(every) = args.drop_every {
        cfg.drop_every = Some(every);
    }
    cfg.ipv6 |= args.ipv6;
    cfg
}
