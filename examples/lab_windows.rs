//! The library API end to end: build a lab, trace a real transfer, feed the
//! events to the analyses as they arrive, print alerts live and a per-socket
//! window summary at the end.
//!
//! ```sh
//! sudo cargo run --example lab_windows -- sws-stall   # or mss-clamp, healthy, ...
//! ```

use std::sync::atomic::AtomicBool;
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance};
use tenge_trace::event::Event;
use tenge_trace::lab::traced::run_traced;
use tenge_trace::lab::{Lab, Scenario};
use tenge_trace::probe::TracerOptions;

fn main() -> anyhow::Result<()> {
    let scenario: Scenario = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("mss-clamp")
        .parse()?;
    let cfg = scenario.config();
    let lab = Lab::new(&cfg)?;
    let mut analysis = Analysis::new(AnalysisConfig::default());
    println!("{}: {}", scenario.name(), scenario.description());

    let run = run_traced(
        &lab,
        &cfg,
        TracerOptions::default(),
        &AtomicBool::new(false),
        |record| {
            let Ok(ev) = Event::decode(record) else {
                return;
            };
            for alert in analysis.push(&ev) {
                println!(
                    "alert {:?} on {}: {}",
                    alert.kind, alert.flow, alert.message
                );
            }
        },
        |_| {},
        |_ends| {},
    )?;
    println!(
        "{} bytes at {:.2} Gb/s; {} events, {} lost",
        run.transfer.bytes,
        run.transfer.throughput_bps / 1e9,
        run.stats.events,
        run.stats.lost_total()
    );

    let report = analysis.finish(Provenance {
        sample_every: 1,
        ..Provenance::default()
    });
    for flow in &report.flows {
        let w = &flow.window;
        println!(
            "{} -> {}: {} windows advertised, {} rounded down to the MSS ({} bytes lost), {} SWS stalls, rwnd-limited {:.0}%",
            flow.src,
            flow.dst,
            w.receive.advertised_count,
            w.receive.mss_rounded_count,
            w.receive.mss_rounding_bytes_lost,
            w.sws_stalls.len(),
            flow.limits.rwnd * 100.0
        );
    }
    Ok(())
}
