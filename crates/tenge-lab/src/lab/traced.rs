//! A lab transfer traced end to end: the tracer is attached before the first
//! SYN, filtered on the lab's own addresses (unique per lab, so parallel labs
//! and other traffic never mix in), and drained while the transfer runs.

use super::{Lab, LabConfig, TransferEnds, TransferReport};
use crate::collector::{Callbacks, CollectStats, Collector, Sink};
use crate::probe::{Filters, HookHits, ProbePlan, Tracer, TracerOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long the collector keeps draining after the transfer ends, so the
/// last ACKs and reads are in.
const DRAIN_AFTER: Duration = Duration::from_millis(100);

/// `base` kept to `cfg`'s transfer: the receiver's address (unique per lab),
/// and for loopback (127.0.0.1 is everyone's) the receiver's namespace too.
pub fn traffic_filters(lab: &Lab, cfg: &LabConfig, base: Filters) -> anyhow::Result<Filters> {
    let netns = if cfg.loopback {
        Some(lab.receiver_netns().inum()? as u32)
    } else {
        base.netns
    };
    Ok(Filters {
        addr: Some(lab.listen_addr(cfg)),
        netns,
        ..base
    })
}

pub struct TracedRun {
    pub transfer: TransferReport,
    pub stats: CollectStats,
    pub plan: ProbePlan,
    /// With `TracerOptions::count_hits`: each probe's hits and runs.
    pub hook_hits: Option<Vec<HookHits>>,
}

/// Runs `cfg`'s transfer in `lab` with the tracer attached. Each raw record
/// goes to `on_record` as it is drained; `hold` runs while both sockets are
/// open (see [`Lab::run_transfer`]). `stop` (Ctrl-C) ends the transfer early.
pub fn run_traced(
    lab: &Lab,
    cfg: &LabConfig,
    options: TracerOptions,
    stop: &AtomicBool,
    on_record: impl FnMut(&[u8]),
    on_tick: impl FnMut(&CollectStats),
    hold: impl FnOnce(&TransferEnds) + Send,
) -> anyhow::Result<TracedRun> {
    let started = |_: &ProbePlan, _: &Filters| Ok(());
    let mut sink = Callbacks(on_record, on_tick);
    run_traced_with(lab, cfg, options, stop, started, &mut sink, hold)
}

/// [`run_traced`] into a [`Sink`], that first hands the probe plan and the
/// filters in force to `started` (a recording's header), before any record.
pub fn run_traced_with(
    lab: &Lab,
    cfg: &LabConfig,
    mut options: TracerOptions,
    stop: &AtomicBool,
    started: impl FnOnce(&ProbePlan, &Filters) -> anyhow::Result<()>,
    sink: &mut impl Sink,
    hold: impl FnOnce(&TransferEnds) + Send,
) -> anyhow::Result<TracedRun> {
    options.filters = traffic_filters(lab, cfg, options.filters)?;
    let mut tracer = Tracer::start(&options)?;
    let plan = tracer.plan().clone();
    started(&plan, &options.filters)?;
    let collect_stop = AtomicBool::new(false);
    let (transfer, stats) = std::thread::scope(|scope| {
        let transfer = scope.spawn(|| {
            let result = lab.run_transfer_until(cfg, stop, hold);
            std::thread::sleep(DRAIN_AFTER);
            collect_stop.store(true, Ordering::SeqCst);
            result
        });
        let stats = Collector::new().run(&mut tracer, &collect_stop, None, sink);
        if stats.is_err() {
            // Do not let the transfer run on untraced.
            stop.store(true, Ordering::SeqCst);
        }
        (transfer.join().expect("transfer thread"), stats)
    });
    Ok(TracedRun {
        transfer: transfer?,
        stats: stats?,
        plan,
        hook_hits: tracer.hook_hits().map(<[HookHits]>::to_vec),
    })
}
