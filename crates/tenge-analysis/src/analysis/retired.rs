//! Retired sockets: what a long live trace keeps of the sockets it no longer
//! tracks. [`Analysis`](super::Analysis) retires a socket once it closed
//! (and was silent for [`RetireConfig::closed_linger_ns`]), or was silent
//! for [`RetireConfig::idle_ns`], finishing its state in the flow table and
//! both analyses into the rows its report would have had.
//! The report keeps [`RetireConfig::max_rows`] of them, those most worth a
//! look, and folds the others into [`FoldedTotals`]; aggregates (path
//! counts, stage quantiles, model mismatches) count every socket either way.

use super::window::{FlowWindowReport, LiveWindow};
use crate::flow::FlowInfo;
use serde::Serialize;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

#[derive(Clone, Debug, PartialEq)]
pub struct RetireConfig {
    /// A socket with no event for this long is retired; None: only closed sockets are.
    pub idle_ns: Option<u64>,
    /// A closed socket (last state `TCP_CLOSE`) is retired once it had no
    /// event for this long: the application still reads what was queued
    /// before the close, and an active closer's socket is `TCP_CLOSE` (its
    /// time-wait is another socket) while its owner reads the peer's data to
    /// the end. Events of a socket after its retirement start a new one.
    pub closed_linger_ns: u64,
    /// Retired sockets whose rows the report keeps; the rest are folded into totals.
    pub max_rows: usize,
}

impl RetireConfig {
    /// Five minutes: longer than any pause of a bulk transfer or an RPC
    /// connection in use, short enough that a busy server's idle pool goes.
    pub const DEFAULT_IDLE_NS: u64 = 300_000_000_000;
    pub const DEFAULT_MAX_ROWS: usize = 1000;
    pub const DEFAULT_CLOSED_LINGER_NS: u64 = 1_000_000_000;

    /// Whether a socket is done at trace time `now_ns`.
    pub fn done_at(&self, now_ns: u64) -> impl Fn(&FlowInfo) -> bool {
        let closed_cutoff = now_ns.saturating_sub(self.closed_linger_ns);
        let idle_cutoff = self.idle_ns.map(|idle| now_ns.saturating_sub(idle));
        move |s: &FlowInfo| {
            (s.is_closed() && s.last_ns < closed_cutoff)
                || idle_cutoff.is_some_and(|cutoff| s.last_ns < cutoff)
        }
    }

    /// Trace time between looks for done sockets: a tenth of the closed
    /// linger, half the idle timeout, but at most a second and at least a
    /// millisecond. A socket goes within that much of being done.
    pub(crate) fn check_every_ns(&self) -> u64 {
        let idle = self.idle_ns.map_or(u64::MAX, |idle| idle / 2);
        (self.closed_linger_ns / 10)
            .min(idle)
            .clamp(1_000_000, 1_000_000_000)
    }
}

impl Default for RetireConfig {
    fn default() -> Self {
        RetireConfig {
            idle_ns: Some(Self::DEFAULT_IDLE_NS),
            closed_linger_ns: Self::DEFAULT_CLOSED_LINGER_NS,
            max_rows: Self::DEFAULT_MAX_ROWS,
        }
    }
}

/// What the report says of retirement (absent when sockets were not retired).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RetirementReport {
    /// Sockets retired (closed, or idle for `idle_timeout_ns`) before the end.
    pub flows_retired: u64,
    /// Of those, the sockets whose rows were folded into `folded`: the rows
    /// kept are the retired sockets with window findings (alerts, stalls,
    /// losses: those with advice), then the busiest.
    pub rows_folded: u64,
    pub max_rows: usize,
    pub idle_timeout_ns: Option<u64>,
    pub folded: FoldedTotals,
}

/// The folded sockets' rows, summed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FoldedTotals {
    pub events: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub alerts: u64,
    pub sws_stalls: u64,
}

/// Every retired socket's figures as live views showed them last, summed:
/// live totals (Prometheus counters) add these so they never go down.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RetiredTotals {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub window: LiveWindow,
}

/// One retired socket's rows, ranked for keeping.
struct RetiredRow {
    /// Window findings first, then bytes; the cookie breaks ties.
    rank: (bool, u64, u64),
    socket: FlowInfo,
    window: Option<FlowWindowReport>,
}

impl PartialEq for RetiredRow {
    fn eq(&self, other: &Self) -> bool {
        self.rank == other.rank
    }
}

impl Eq for RetiredRow {}

impl PartialOrd for RetiredRow {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RetiredRow {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank.cmp(&other.rank)
    }
}

/// The retired sockets' rows kept so far, and the rest in totals.
pub(crate) struct Retired {
    pub cfg: RetireConfig,
    /// The lowest-ranked kept row on top, to fold when a better one comes.
    kept: BinaryHeap<Reverse<RetiredRow>>,
    report: RetirementReport,
    pub totals: RetiredTotals,
}

impl Retired {
    pub fn new(cfg: RetireConfig) -> Retired {
        Retired {
            report: RetirementReport {
                max_rows: cfg.max_rows,
                idle_timeout_ns: cfg.idle_ns,
                ..RetirementReport::default()
            },
            kept: BinaryHeap::new(),
            totals: RetiredTotals::default(),
            cfg,
        }
    }

    /// A socket retired, with its window analysis if it had one (`live`: its latest live figures).
    pub fn add(&mut self, socket: FlowInfo, window: Option<(FlowWindowReport, LiveWindow)>) {
        self.report.flows_retired += 1;
        self.totals.bytes_sent += socket.bytes_sent;
        self.totals.bytes_received += socket.bytes_received;
        let window = window.map(|(report, live)| {
            self.totals.window.add(&live);
            report
        });
        let findings = window.as_ref().is_some_and(|w| !w.advice.is_empty());
        let rank = (
            findings,
            socket.bytes_sent + socket.bytes_received,
            socket.sock_cookie,
        );
        self.kept.push(Reverse(RetiredRow {
            rank,
            socket,
            window,
        }));
        if self.kept.len() > self.cfg.max_rows {
            let Some(Reverse(row)) = self.kept.pop() else {
                return;
            };
            self.fold(&row);
        }
    }

    fn fold(&mut self, row: &RetiredRow) {
        self.report.rows_folded += 1;
        let folded = &mut self.report.folded;
        folded.events += row.socket.events;
        folded.bytes_sent += row.socket.bytes_sent;
        folded.bytes_received += row.socket.bytes_received;
        if let Some(w) = &row.window {
            folded.alerts += w.alerts.len() as u64;
            folded.sws_stalls += w.window.sws_stalls.len() as u64;
        }
    }

    /// The kept rows (sockets, window analyses) and the report.
    pub fn finish(self) -> (Vec<FlowInfo>, Vec<FlowWindowReport>, RetirementReport) {
        let mut sockets = Vec::with_capacity(self.kept.len());
        let mut windows = Vec::new();
        for Reverse(row) in self.kept {
            sockets.push(row.socket);
            windows.extend(row.window);
        }
        (sockets, windows, self.report)
    }
}
