//! The pauses of sampling by time (`pause` records, `struct tt_pause`):
//! between a BEGIN and its END the trace is not whole, and every analysis
//! skips the events in between.

use crate::abi::tt_pause_edge;
use crate::event::{Body, Event};
use serde::Serialize;

/// The pauses so far, and whether one is running.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
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
    #[serde(skip)]
    windows: Windows,
}

/// The traced windows between the pauses, each with the events it held:
/// a window the probes came back to late weighs more than a whole one
/// (see [`Pauses::scale`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Windows {
    /// The slices' length (0: not sampled by time, nothing weighed).
    slice_ns: u64,
    /// Where the window open now began: a pause's END or the recording's
    /// start; None before either.
    from_ns: Option<u64>,
    /// Events traced in the window open now.
    events: u64,
    /// Events traced in the windows closed so far, and the same weighed
    /// by each window's slices over the time it was traced.
    closed: u64,
    weighed: f64,
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
            (_, None) => {
                self.windows.events += 1;
                Turn::Traced
            }
        }
    }

    /// Pauses of slices of `slice_ns`, their windows weighed.
    pub fn sliced(slice_ns: u64) -> Pauses {
        let mut pauses = Pauses::default();
        pauses.windows.slice_ns = slice_ns;
        pauses
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
        if variant == tt_pause_edge::TT_PAUSE_BOUND as u8 {
            self.bound(ts);
        }
        Turn::Skipped
    }

    /// The recording's bound at `ts_ns`: it starts there with a window
    /// open, or ends there in one.
    pub fn bound(&mut self, ts_ns: u64) {
        self.windows.bound(ts_ns);
    }

    /// `n` events counted in the window open now (or opening next), where
    /// counters read at its edges count them instead of the events
    /// themselves passing by (`stages`, which counts in the kernel).
    pub fn counted(&mut self, n: u64) {
        self.windows.events += n;
    }

    /// A pause began at `ts_ns` (a traced slice's end). False if one
    /// was running: an edge out of turn (a damaged recording) changes nothing.
    pub fn begin(&mut self, ts_ns: u64) -> bool {
        let idle = self.since_ns.is_none();
        if idle {
            self.since_ns = Some(ts_ns);
            self.windows.close(ts_ns, true);
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
        self.windows.from_ns = Some(ts_ns);
        true
    }

    /// Sampling by time, 1 slice in `every`: what the counts of the events
    /// traced are multiplied by. Each window's events weigh `every` times
    /// its slices over the time it was traced (the probes came back late
    /// to some), so that a window cut short weighs for its whole slices
    /// whether or not it was busy; where no event was traced, the time
    /// elapsed (`elapsed_ns`) over the time traced. None if nothing was.
    /// (Scaling all by the times alone counted 1-9 % high where the probes
    /// came back late to slices of idle time more than of the transfer's.)
    pub fn scale(&self, every: u32, elapsed_ns: u64) -> Option<f64> {
        let w = &self.windows;
        let events = w.closed + w.events;
        match (events, w.slice_ns) {
            (0, _) | (_, 0) => self.time_scale(elapsed_ns),
            _ => Some(f64::from(every) * (w.weighed + w.events as f64) / events as f64),
        }
    }

    /// What counts made over `elapsed_ns` (the pauses included) are
    /// multiplied by, by the times alone: the time elapsed over the time
    /// traced. None if nothing was traced.
    fn time_scale(&self, elapsed_ns: u64) -> Option<f64> {
        let traced = elapsed_ns.saturating_sub(self.total_ns);
        (traced > 0).then(|| elapsed_ns as f64 / traced as f64)
    }
}

impl Windows {
    /// The window open ends at `ts_ns`: at a pause's BEGIN (`drawn`: the
    /// slices it was drawn for end there) or at the recording's end.
    fn close(&mut self, ts_ns: u64, drawn: bool) {
        let traced = self
            .from_ns
            .take()
            .map_or(0, |from| ts_ns.saturating_sub(from));
        // Windows start and end on the slices' boundaries, but where the
        // probes came back late: those slices' whole time, rounded up.
        let weight = match (drawn, traced, self.slice_ns) {
            (true, 1.., 1..) => {
                traced.div_ceil(self.slice_ns) as f64 * self.slice_ns as f64 / traced as f64
            }
            _ => 1.0,
        };
        self.weighed += self.events as f64 * weight;
        self.closed += std::mem::take(&mut self.events);
    }

    /// A `bound` record at `ts_ns`: the recording starts there with a
    /// window open, or ends there in one.
    fn bound(&mut self, ts_ns: u64) {
        match self.from_ns {
            None => self.from_ns = Some(ts_ns),
            Some(_) => self.close(ts_ns, false),
        }
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
        assert_eq!(pauses.time_scale(400), Some(2.0));
    }

    /// 1 slice of 20 ms in 4, runs of 80 ms: the first run's slice traced
    /// whole and idle, the second's busy (5 events a ms, 400 in the run)
    /// and its probes 5 ms late, the third's whole and idle. The late
    /// window's 75 events weigh for its whole slice: 400 in all, where the
    /// times alone (55 ms traced of 240) make 327.
    #[test]
    fn a_window_the_probes_came_back_late_to_weighs_for_its_whole_slices() {
        use tt_pause_edge::{TT_PAUSE_BEGIN, TT_PAUSE_BOUND, TT_PAUSE_END};
        const MS: u64 = 1_000_000;
        let mut pauses = Pauses::sliced(20 * MS);
        pauses.turn(&edge(0, TT_PAUSE_BOUND));
        pauses.turn(&edge(20 * MS, TT_PAUSE_BEGIN));
        pauses.turn(&edge(145 * MS, TT_PAUSE_END));
        for i in 0..75 {
            let ev = probe_event(145 * MS + i * MS / 5);
            assert_eq!(pauses.turn(&ev), Turn::Traced);
        }
        pauses.turn(&edge(160 * MS, TT_PAUSE_BEGIN));
        pauses.turn(&edge(200 * MS, TT_PAUSE_END));
        pauses.turn(&edge(220 * MS, TT_PAUSE_BEGIN));
        pauses.turn(&edge(240 * MS, TT_PAUSE_END));
        let scale = pauses.scale(4, 240 * MS).unwrap();
        assert!((scale * 75.0 - 400.0).abs() < 1e-9, "{scale}");
        let by_time = pauses.time_scale(240 * MS).unwrap();
        assert!((by_time * 75.0 - 327.3).abs() < 0.1, "{by_time}");
        // The same windows counted by counters read at their edges
        // (`stages`): the same scale.
        let mut counted = Pauses::sliced(20 * MS);
        counted.bound(0);
        counted.begin(20 * MS);
        counted.end(145 * MS);
        counted.counted(75);
        counted.begin(160 * MS);
        for (end, begin) in [(200, 220), (240, 260)] {
            counted.end(end * MS);
            counted.counted(0);
            counted.begin(begin * MS);
        }
        counted.end(280 * MS);
        counted.counted(0);
        counted.bound(290 * MS);
        assert_eq!(counted.scale(4, 290 * MS), Some(scale));
    }
}
