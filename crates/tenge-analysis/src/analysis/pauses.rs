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
    /// The last END's time. The probes come back ahead of their slice, and
    /// a reader that does not sort the records by time (per hook) may see
    /// the END before what they stamped ahead of it: skipped all the same.
    #[serde(skip)]
    resumed_ns: u64,
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
    /// Where `ev` stands. Inlined: for most events, two tests.
    #[inline]
    pub(crate) fn turn(&mut self, ev: &Event) -> Turn {
        match (&ev.body, self.since_ns) {
            (Body::Pause(_), _) => self.edge(ev),
            (_, Some(_)) => Turn::Skipped,
            (_, None) if ev.hdr.ts_ns < self.resumed_ns => Turn::Skipped,
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

    /// A pause began at `ts_ns` (a traced slice's end). False if one
    /// was running: an edge out of turn (a damaged recording) changes nothing.
    pub fn begin(&mut self, ts_ns: u64) -> bool {
        let idle = self.since_ns.is_none();
        if idle {
            self.since_ns = Some(ts_ns);
        }
        idle
    }

    /// The running pause ended at `ts_ns` (the next slice's start, the
    /// probes all back). False if none was running.
    pub fn end(&mut self, ts_ns: u64) -> bool {
        let Some(since) = self.since_ns.take() else {
            return false;
        };
        self.count += 1;
        self.total_ns += ts_ns.saturating_sub(since);
        self.resumed_ns = ts_ns;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{tt_hdr, tt_pause};

    fn edge(ts_ns: u64, edge: tt_pause_edge) -> Event {
        let hdr = tt_hdr {
            ts_ns,
            variant: edge as u8,
            ..Default::default()
        };
        Event::new(hdr, Body::Pause(tt_pause { edge_ns: ts_ns }))
    }

    fn probe_event(ts_ns: u64) -> Event {
        let hdr = tt_hdr {
            ts_ns,
            ..Default::default()
        };
        Event::new(hdr, Body::AppRead(Default::default()))
    }

    /// Records as a per-hook recording carries them, not sorted by time: the
    /// END (a slice's start) went out before what the probes stamped in the
    /// lead they came back with, and that is skipped too.
    #[test]
    fn what_was_stamped_before_a_pause_ended_is_skipped_whenever_it_comes() {
        use tt_pause_edge::{TT_PAUSE_BEGIN, TT_PAUSE_END};
        let mut pauses = Pauses::default();
        let turns: Vec<Turn> = [
            probe_event(50),
            edge(100, TT_PAUSE_BEGIN),
            probe_event(150),
            edge(300, TT_PAUSE_END),
            probe_event(250),
            probe_event(300),
        ]
        .iter()
        .map(|ev| pauses.turn(ev))
        .collect();
        use Turn::{Began, Skipped, Traced};
        assert_eq!(turns, [Traced, Began, Skipped, Skipped, Skipped, Traced]);
        assert_eq!((pauses.count, pauses.total_ns), (1, 200));
        assert_eq!(pauses.scale(400), Some(2.0));
    }
}
