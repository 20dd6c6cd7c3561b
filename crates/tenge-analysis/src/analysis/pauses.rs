//! The pauses of sampling by time (`pause` records, `struct tt_pause`):
//! between a BEGIN and its END the trace is not whole, and every analysis
//! skips the events in between.

use crate::abi::tt_pause_edge;
use crate::event::{Body, Event};
use serde::Serialize;

/// The pauses so far, and whether one is running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Pauses {
    pub count: u64,
    /// Time from the BEGIN of each to its END.
    pub total_ns: u64,
    #[serde(skip)]
    since_ns: Option<u64>,
}

/// What an event did to the pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// An event to analyse.
    Traced,
    /// A pause began: what is in flight ends here.
    Began,
    /// A pause's record, or an event inside one: skipped.
    Skipped,
}

impl Pauses {
    /// Where `ev` stands. Inlined: for most events, one test.
    #[inline]
    pub(crate) fn turn(&mut self, ev: &Event) -> Turn {
        match (&ev.body, self.since_ns) {
            (Body::Pause(_), _) => self.edge(ev),
            (_, Some(_)) => Turn::Skipped,
            (_, None) => Turn::Traced,
        }
    }

    #[cold]
    fn edge(&mut self, ev: &Event) -> Turn {
        let (ts, variant) = (ev.hdr.ts_ns, ev.hdr.variant);
        if variant == tt_pause_edge::TT_PAUSE_BEGIN as u8 && self.begin(ts) {
            return Turn::Began;
        }
        if variant == tt_pause_edge::TT_PAUSE_END as u8 {
            self.end(ts);
        }
        Turn::Skipped
    }

    /// A pause began at `ts_ns` (its probes began to leave). False if one
    /// was running: an edge out of turn (a damaged recording) changes nothing.
    pub fn begin(&mut self, ts_ns: u64) -> bool {
        let idle = self.since_ns.is_none();
        if idle {
            self.since_ns = Some(ts_ns);
        }
        idle
    }

    /// The running pause ended at `ts_ns` (its probes were all back). False
    /// if none was running.
    pub fn end(&mut self, ts_ns: u64) -> bool {
        let Some(since) = self.since_ns.take() else {
            return false;
        };
        self.count += 1;
        self.total_ns += ts_ns.saturating_sub(since);
        true
    }

    /// Sampling by time: what counts made over `elapsed_ns` (the pauses
    /// included) are multiplied by, the time elapsed over the time traced.
    /// None if nothing was traced.
    pub fn scale(&self, elapsed_ns: u64) -> Option<f64> {
        let traced = elapsed_ns.saturating_sub(self.total_ns);
        (traced > 0).then(|| elapsed_ns as f64 / traced as f64)
    }
}
