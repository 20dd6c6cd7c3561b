//! Pure analyses over events: no BPF, no I/O. [`Analysis`] runs them all over
//! one stream, live (`watch`, `lab`) or on a recording (`report`).
pub mod diff;
pub mod paths;
mod pauses;
mod retired;
pub mod stages;
#[cfg(test)]
mod tests;
pub mod window;

pub use retired::{FoldedTotals, RetireConfig, RetiredTotals, RetirementReport};

use crate::event::{is_incoming_packet, Event};
use crate::flow::{EventKey, FlowInfo, FlowTable};
use crate::trace_file::{Ahead, Damage};
use paths::{PathAnalyzer, PathConfig, PathReport};
pub use pauses::Pauses;
use retired::Retired;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use window::{Alerts, FlowWindowReport, WindowAnalyzer, WindowConfig};

#[derive(Clone, Debug, Default)]
pub struct AnalysisConfig {
    pub window: WindowConfig,
    pub paths: PathConfig,
    /// Retire closed and idle sockets (see [`RetireConfig`]); None: every
    /// socket is kept to the end, and the report has a row for each.
    pub retire: Option<RetireConfig>,
}

/// The flow table, the window analyses and the path analyses, fed together.
pub struct Analysis {
    flows: FlowTable,
    window: WindowAnalyzer,
    paths: PathAnalyzer,
    retired: Option<Retired>,
    /// Trace time of the next look for sockets to retire; never without retirement.
    next_retire_check_ns: u64,
    events: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    /// The own cookie of the latest event [`prefetch`](Self::prefetch) loaded
    /// a socket's state for (0: none), and whether with its window state.
    ahead_loaded: (u64, bool),
}

/// Where the events came from, for the report's header.
#[derive(Clone, Debug, Default)]
pub struct Provenance {
    pub kernel_release: String,
    pub sample_every: u32,
    /// Events the kernel could not queue, by kind name.
    pub lost: BTreeMap<String, u64>,
    /// Hook hits the kernel ran no program for, when they were counted.
    pub hits_not_run: Option<u64>,
    /// Where a damaged recording stopped being readable.
    pub damage: Option<Damage>,
}

/// Everything `report --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub tool_version: &'static str,
    pub kernel_release: String,
    pub events: u64,
    /// Events lost in the kernel (ring buffer full): the analyses below saw none of them.
    pub events_lost: u64,
    pub lost_by_kind: BTreeMap<String, u64>,
    /// Hook hits the kernel ran no program for (`record --count-hits`, and
    /// `lab` always), whose events are missing too; null when they were not
    /// counted.
    pub hits_not_run: Option<u64>,
    /// Where a damaged recording stopped being readable: the report covers
    /// the events before it. Absent for a whole recording.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<Damage>,
    pub duration_ns: u64,
    /// Sampled by time: the pauses between the traced slices, which
    /// `duration_ns` includes. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pauses: Option<Pauses>,
    /// Advertised windows that the kernel's formulas, replayed on the recorded
    /// state, do not reproduce. 0 on a complete trace.
    pub model_mismatches: u64,
    pub jiffies_hz: Option<u32>,
    /// Window analyses, one per socket.
    pub flows: Vec<FlowWindowReport>,
    /// Traffic per socket, busiest first.
    pub sockets: Vec<FlowInfo>,
    /// Path costs: `sample_every`, `paths`, `combined`, `path_flows`, `napi`, `coverage`, `evictions`.
    #[serde(flatten)]
    pub path_costs: PathReport,
    /// Sockets retired during the trace, and those of their rows that
    /// `flows` and `sockets` do not show; absent when retirement was off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retirement: Option<RetirementReport>,
}

impl Report {
    /// The cgroups of the tasks the report names.
    pub fn cgroup_ids(&self) -> std::collections::BTreeSet<u64> {
        self.tasks().map(|t| t.cgroup_id).collect()
    }

    /// Names the tasks' cgroups by `paths` (id → path), for rows and alerts.
    pub fn resolve_cgroups(&mut self, paths: &BTreeMap<u64, String>) {
        for flow in &mut self.flows {
            flow.tasks.resolve(paths);
            for task in flow.alerts.iter_mut().filter_map(|a| a.process.as_mut()) {
                task.resolve(paths);
            }
        }
    }

    fn tasks(&self) -> impl Iterator<Item = &crate::task::Task> {
        self.flows.iter().flat_map(|f| {
            let alerts = f.alerts.iter().filter_map(|a| a.process.as_ref());
            [&f.tasks.writer, &f.tasks.reader]
                .into_iter()
                .flatten()
                .chain(alerts)
        })
    }
}

impl Analysis {
    pub fn new(cfg: AnalysisConfig) -> Analysis {
        let byte_every = cfg.paths.byte_every();
        let window = WindowConfig {
            byte_sample_every: byte_every,
            ..cfg.window
        };
        Analysis {
            flows: FlowTable::sampled(byte_every),
            window: WindowAnalyzer::new(window),
            paths: PathAnalyzer::new(cfg.paths),
            next_retire_check_ns: if cfg.retire.is_some() { 0 } else { u64::MAX },
            retired: cfg.retire.map(Retired::new),
            events: 0,
            first_ns: None,
            last_ns: 0,
            ahead_loaded: (0, false),
        }
    }

    /// Feeds one event; returns the alerts it raised.
    pub fn push(&mut self, ev: &Event) -> Alerts<'_> {
        self.events += 1;
        self.first_ns.get_or_insert(ev.hdr.ts_ns);
        self.last_ns = self.last_ns.max(ev.hdr.ts_ns);
        match self.paths.follow_pauses(ev) {
            pauses::Turn::Traced => {}
            pauses::Turn::Began => {
                self.paths.pause();
                self.window.pause(ev.hdr.ts_ns);
                return Alerts::none();
            }
            pauses::Turn::Skipped => return Alerts::none(),
        }
        // One key for both: the table's and the paths' views of an event agree.
        let key = EventKey::of(ev);
        // The table finds the socket once; the analyses index their state by its number.
        let socket = self.flows.observe_keyed(ev, &key);
        self.paths.push_keyed(ev, &key, socket);
        // Off the per-event path: a look at the sockets now and then.
        if ev.hdr.ts_ns >= self.next_retire_check_ns {
            self.retire_due(ev.hdr.ts_ns);
        }
        self.window.push_at(ev, socket)
    }

    /// Every event stamped before `now_ns` has been pushed (a live
    /// collector's watermark): the alerts due by then that no event of
    /// their socket has brought (see [`WindowAnalyzer::tick`]).
    pub fn tick(&mut self, now_ns: u64) -> Alerts<'_> {
        self.window.tick(now_ns)
    }

    /// See [`WindowAnalyzer::tick_each_due`].
    pub fn tick_each_due(&mut self, until_ns: u64) {
        self.window.tick_each_due(until_ns)
    }

    /// Starts loading what pushing the events ahead will touch, called
    /// with each event pushed ([`for_each_ahead`](crate::trace_file::TraceReader::for_each_ahead)): for the far
    /// one, the flow table's slot; for the near one, whose slot is there by
    /// now, the flow table's and the analyses' state of its socket. Their
    /// cache misses then overlap with the work in between rather than come
    /// one after the other. A hint: it changes nothing.
    #[inline]
    pub fn prefetch(&mut self, ahead: Ahead<'_>) {
        if let Some(far) = ahead.far {
            self.flows.prefetch_slot(far);
        }
        let Some(near) = ahead.near else {
            return;
        };
        // A run of one socket's own events: loaded for the first of them
        // (window state included once one of them was a window event).
        let cookie = Some(near.hdr.sock_cookie).filter(|_| !is_incoming_packet(near.hdr.kind));
        let window = WindowAnalyzer::takes(near);
        if cookie.is_some_and(|c| c != 0 && self.ahead_loaded == (c, true))
            || cookie.is_some_and(|c| c != 0 && !window && self.ahead_loaded.0 == c)
        {
            return;
        }
        self.ahead_loaded = (cookie.unwrap_or(0), window);
        if let Some(socket) = self.flows.prefetch(near) {
            self.paths.prefetch(socket);
            self.window.prefetch(near, socket);
        }
    }

    /// Retires the sockets done at trace time `now_ns` (see [`RetireConfig`]),
    /// if it is time to look: events do so as they come, and a live source
    /// calls this on its ticks, so that sockets go while no event comes.
    #[cold]
    pub fn retire_due(&mut self, now_ns: u64) {
        let Some(retired) = &mut self.retired else {
            return;
        };
        if now_ns < self.next_retire_check_ns {
            return;
        }
        self.next_retire_check_ns = now_ns.saturating_add(retired.cfg.check_every_ns());
        let done = retired.cfg.done_at(now_ns);
        // Both ends of a connection go together, once both are done, so each
        // end's report reads the other's final state.
        for s in self.flows.numbers_where(&done) {
            // Retired already, as the peer of an earlier one.
            if !self.flows.is_live(s) {
                continue;
            }
            match self.window.peer_socket(s) {
                Some(p) if self.flows.is_live(p) => {
                    if done(self.flows.socket(p)) {
                        self.retire_sockets(&[s, p]);
                    }
                }
                _ => self.retire_sockets(&[s]),
            }
        }
    }

    fn retire_sockets(&mut self, sockets: &[usize]) {
        let mut windows = self.window.retire(sockets);
        let Some(retired) = &mut self.retired else {
            return;
        };
        for &s in sockets {
            let info = self.flows.retire(s);
            self.paths.retire(s, &info.key);
            let window = windows
                .iter()
                .position(|w| w.socket == s)
                .map(|k| windows.swap_remove(k))
                .map(|w| (w.report, w.live));
            retired.add(info, window);
        }
    }

    /// Every retired socket's figures summed, when sockets are retired.
    pub fn retired_totals(&self) -> Option<&RetiredTotals> {
        self.retired.as_ref().map(|r| &r.totals)
    }

    pub fn flows(&self) -> &FlowTable {
        &self.flows
    }

    /// The window analyses so far, for live views ([`WindowAnalyzer::live_flows`]).
    pub fn window(&self) -> &WindowAnalyzer {
        &self.window
    }

    /// The path analyses so far, for live views ([`PathAnalyzer::stage_latencies`]).
    pub fn paths(&self) -> &PathAnalyzer {
        &self.paths
    }

    /// Events pushed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Stage spans recorded since the last call, when `cfg.paths.spans` keeps them.
    pub fn take_spans(&mut self) -> Vec<paths::StageSpan> {
        self.paths.take_spans()
    }

    pub fn finish(self, provenance: Provenance) -> Report {
        self.finish_with_spans(provenance).0
    }

    /// [`finish`](Self::finish), and the stage spans not yet taken.
    pub fn finish_with_spans(self, provenance: Provenance) -> (Report, Vec<paths::StageSpan>) {
        let events_lost = provenance.lost.values().sum();
        let threshold = self.window.threshold();
        let mut window = self.window.finish(events_lost);
        let mut sockets: Vec<FlowInfo> = self.flows.flows().into_iter().cloned().collect();
        let retirement = self.retired.map(|retired| {
            let (retired_sockets, retired_windows, report) = retired.finish();
            sockets.extend(retired_sockets);
            window.flows.extend(retired_windows);
            report
        });
        // Stable sorts: without retired rows, the orders stay as they were.
        sockets.sort_by_key(|f| std::cmp::Reverse(f.bytes_sent + f.bytes_received));
        window.flows.sort_by_key(|f| f.sock_cookie);
        let pauses = Some(self.paths.pauses()).filter(|p| p.count > 0);
        let (path_costs, spans) = self.paths.finish_with_spans();
        advise_nagle(&mut window.flows, &path_costs, threshold);
        let report = Report {
            tool_version: env!("CARGO_PKG_VERSION"),
            kernel_release: provenance.kernel_release,
            events: self.events,
            events_lost,
            lost_by_kind: provenance.lost,
            hits_not_run: provenance.hits_not_run,
            damage: provenance.damage,
            duration_ns: self.first_ns.map_or(0, |first| self.last_ns - first),
            pauses,
            model_mismatches: window.model_mismatches,
            jiffies_hz: window.jiffies_hz,
            flows: window.flows,
            sockets,
            path_costs,
            retirement,
        };
        (report, spans)
    }
}

/// Advice for each socket whose small segments waited on Nagle's algorithm
/// (its `held_nagle` path) for `threshold` of its time or more. Not where
/// sampled: the counts are then estimates, and no advice rests on them.
fn advise_nagle(flows: &mut [FlowWindowReport], paths: &PathReport, threshold: f64) {
    if paths.scale != 1.0 {
        return;
    }
    let by_cookie: HashMap<u64, &paths::FlowPaths> =
        paths.flows.iter().map(|f| (f.cookie, f)).collect();
    for flow in flows {
        let Some(flow_paths) = by_cookie.get(&flow.sock_cookie) else {
            continue;
        };
        let holds = || {
            flow_paths
                .paths
                .iter()
                .filter(|e| e.direction == "tx" && e.dimension == "hold")
        };
        let Some(held) = holds().find(|e| e.path == "held_nagle") else {
            continue;
        };
        let tcp = &held.stages[paths::stats::TX_STAGE_TCP];
        let duration_ns = flow.last_ns.saturating_sub(flow.first_ns);
        if tcp.total_ns > 0 && tcp.total_ns as f64 >= threshold * duration_ns as f64 {
            let sent = holds().map(|e| e.packets).sum();
            flow.advice.push(window::advice::nagle(
                held.packets,
                sent,
                tcp.total_ns,
                tcp.p50_ns,
                duration_ns,
            ));
        }
    }
}
