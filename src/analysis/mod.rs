//! Pure analyses over events: no BPF, no I/O. [`Analysis`] runs them all over
//! one stream, live (`watch`, `lab`) or on a recording (`report`).
pub mod paths;
pub mod window;

use crate::event::Event;
use crate::flow::{EventKey, FlowInfo, FlowTable};
use paths::{PathAnalyzer, PathConfig, PathReport};
use serde::Serialize;
use std::collections::BTreeMap;
use window::{Alerts, FlowWindowReport, WindowAnalyzer, WindowConfig};

#[derive(Clone, Debug, Default)]
pub struct AnalysisConfig {
    pub window: WindowConfig,
    pub paths: PathConfig,
}

/// The flow table, the window analyses and the path analyses, fed together.
pub struct Analysis {
    flows: FlowTable,
    window: WindowAnalyzer,
    paths: PathAnalyzer,
    events: u64,
    first_ns: Option<u64>,
    last_ns: u64,
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
    /// Hook hits the kernel ran no program for (`record --count-hits`), whose
    /// events are missing too; null when they were not counted.
    pub hits_not_run: Option<u64>,
    pub duration_ns: u64,
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
}

impl Analysis {
    pub fn new(cfg: AnalysisConfig) -> Analysis {
        Analysis {
            flows: FlowTable::new(),
            window: WindowAnalyzer::new(cfg.window),
            paths: PathAnalyzer::new(cfg.paths),
            events: 0,
            first_ns: None,
            last_ns: 0,
        }
    }

    /// Feeds one event; returns the alerts it raised.
    pub fn push(&mut self, ev: &Event) -> Alerts<'_> {
        self.events += 1;
        self.first_ns.get_or_insert(ev.hdr.ts_ns);
        self.last_ns = self.last_ns.max(ev.hdr.ts_ns);
        // One key for both: the table's and the paths' views of an event agree.
        let key = EventKey::of(ev);
        // The table finds the socket once; the analyses index their state by its number.
        let socket = self.flows.observe_keyed(ev, &key);
        self.paths.push_keyed(ev, &key, socket);
        self.window.push_at(ev, socket)
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

    pub fn finish(self, provenance: Provenance) -> Report {
        let events_lost = provenance.lost.values().sum();
        let window = self.window.finish(events_lost);
        Report {
            tool_version: env!("CARGO_PKG_VERSION"),
            kernel_release: provenance.kernel_release,
            events: self.events,
            events_lost,
            lost_by_kind: provenance.lost,
            hits_not_run: provenance.hits_not_run,
            duration_ns: self.first_ns.map_or(0, |first| self.last_ns - first),
            model_mismatches: window.model_mismatches,
            jiffies_hz: window.jiffies_hz,
            flows: window.flows,
            sockets: self.flows.flows().into_iter().cloned().collect(),
            path_costs: self.paths.finish(),
        }
    }
}
