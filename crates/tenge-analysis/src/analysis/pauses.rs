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
        let ts = ev.hdr.ts_ns;
        match self.since_ns {
            None if ev.hdr.variant == tt_pause_edge::TT_PAUSE_BEGIN as u8 => {
                self.since_ns = Some(ts);
                Turn::Began
            }
            Some(since) if ev.hdr.variant == tt_pause_edge::TT_PAUSE_END as u8 => {
                self.since_ns = None;
                self.count += 1;
                self.total_ns += ts.saturating_sub(since);
                Turn::Skipped
            }
            // An edge out of turn (a damaged recording): nothing to do.
            _ => Turn::Skipped,
        }
    }
}
