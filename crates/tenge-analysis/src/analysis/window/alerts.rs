//! Live alerts and their hysteresis: one alert per episode.

use crate::task::Task;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// The advertised window loses more than the threshold of free space to rounding or clamping.
    MssClamp,
    /// The window stayed below one MSS with data waiting, for at least `min_duration_ns`.
    SwsStall,
    RwndLimited,
    CwndLimited,
    SndbufLimited,
}

impl AlertKind {
    pub const ALL: [AlertKind; 5] = [
        AlertKind::MssClamp,
        AlertKind::SwsStall,
        AlertKind::RwndLimited,
        AlertKind::CwndLimited,
        AlertKind::SndbufLimited,
    ];

    /// The kind's bit in [`ActiveAlerts`].
    fn bit(self) -> u8 {
        1 << self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            AlertKind::MssClamp => "mss_clamp",
            AlertKind::SwsStall => "sws_stall",
            AlertKind::RwndLimited => "rwnd_limited",
            AlertKind::CwndLimited => "cwnd_limited",
            AlertKind::SndbufLimited => "sndbuf_limited",
        }
    }
}

/// The alert kinds whose episode is running on a socket (for `sws_stall`: a
/// stall in progress): what `watch` printed an ALERT for and no CLEARED yet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActiveAlerts(u8);

impl ActiveAlerts {
    pub fn set(&mut self, kind: AlertKind, active: bool) {
        if active {
            self.0 |= kind.bit();
        } else {
            self.0 &= !kind.bit();
        }
    }

    pub fn contains(self, kind: AlertKind) -> bool {
        self.0 & kind.bit() != 0
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Alert {
    pub ts_ns: u64,
    pub sock_cookie: u64,
    /// "src -> dst" (local end first).
    pub flow: String,
    /// The process the socket belongs to (its writer, else its reader),
    /// once the trace has named it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<Task>,
    pub kind: AlertKind,
    /// The episode of an earlier alert of this kind and socket ended: the
    /// figure stayed below half the threshold for the minimum duration, or
    /// the socket closed.
    pub cleared: bool,
    /// What happened, with the bytes and the throughput it costs.
    pub message: String,
    /// The message's numbers, for programs (Alertmanager, scripts).
    pub figures: AlertFigures,
}

/// An alert's numbers: what its message says in words. Each is there when
/// the alert's kind has it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct AlertFigures {
    /// The figure held against the threshold, 0 to 1: the share of the
    /// recent busy time the limit held (limit kinds), or of the free space
    /// the latest windows lost (mss_clamp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// The threshold it crossed, in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold_pct: Option<f64>,
    /// The limiting window in bytes (limit kinds; rwnd_limited: the peer's
    /// window as the sender fills it; sws_stall: the MSS it stays below), or
    /// the bytes lost per window (mss_clamp).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub srtt_us: Option<u32>,
    /// What the limiting window allows per RTT (sws_stall: one MSS per RTT).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling_bps: Option<f64>,
    /// What was acknowledged (limit kinds), arrived (mss_clamp) or
    /// delivered (sws_stall) meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub achieved_bps: Option<f64>,
    /// How long the stall has lasted (sws_stall).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ns: Option<u64>,
}

/// The alerts one event raised: usually none, and then dropping them costs
/// one test (an empty `Drain` made every event pay for its drop).
pub struct Alerts<'a>(Option<std::vec::Drain<'a, Alert>>);

impl<'a> Alerts<'a> {
    /// Takes what `raised` holds.
    pub(super) fn take(raised: &'a mut Vec<Alert>) -> Alerts<'a> {
        Alerts((!raised.is_empty()).then(|| raised.drain(..)))
    }

    /// No alerts: for events no analysis looked at.
    pub(crate) fn none() -> Alerts<'a> {
        Alerts(None)
    }
}

impl Iterator for Alerts<'_> {
    type Item = Alert;

    fn next(&mut self) -> Option<Alert> {
        self.0.as_mut()?.next()
    }
}

/// An episode switch with hysteresis: it fires when the metric reaches the
/// threshold and ends only after the metric stayed below half of it for a
/// hold time, so a metric hovering around the threshold gives one alert,
/// not one per event, and a bursty one not one per burst (300 B writes
/// behind a receive window: rwnd_limited began and ended 7 times in 0.9 s).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Episode {
    active: bool,
    /// The metric is below half the threshold, since `quiet_since_ms`.
    quiet: bool,
    /// Milliseconds of the trace's clock, wrapping (4 bytes, not 8: one per
    /// alert kind in each socket's state).
    quiet_since_ms: u32,
}

/// What one reading of the metric did to an [`Episode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Turn {
    Started,
    Ended,
    Unchanged,
}

impl Episode {
    /// The reading at `ts_ns`; an episode ends at the first reading
    /// `hold_ns` or more after the metric fell below half the threshold
    /// and stayed there.
    pub fn update(&mut self, ts_ns: u64, metric: f64, threshold: f64, hold_ns: u64) -> Turn {
        let now_ms = (ts_ns / 1_000_000) as u32;
        match (self.active, metric >= threshold, metric >= threshold / 2.0) {
            (false, true, _) => {
                *self = Episode {
                    active: true,
                    ..Episode::default()
                };
                Turn::Started
            }
            (true, _, true) => {
                self.quiet = false;
                Turn::Unchanged
            }
            (true, _, false) => {
                if !self.quiet {
                    (self.quiet, self.quiet_since_ms) = (true, now_ms);
                }
                if u64::from(now_ms.wrapping_sub(self.quiet_since_ms)) * 1_000_000 >= hold_ns {
                    *self = Episode::default();
                    Turn::Ended
                } else {
                    Turn::Unchanged
                }
            }
            _ => Turn::Unchanged,
        }
    }

    pub fn is_active(&self) -> bool {
        self.active
    }

    /// Ends the episode (the socket closed); true if one was active.
    pub fn end(&mut self) -> bool {
        std::mem::take(self).active
    }
}

/// A rate from two marks of a sequence number at least `span_ns` apart: the
/// rate from the older one to now covers between one and two spans, and
/// marking costs a comparison per event.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RateMarks {
    older: Option<(u64, u32)>,
    newer: Option<(u64, u32)>,
}

impl RateMarks {
    pub fn mark(&mut self, ts_ns: u64, seq: u32, span_ns: u64) {
        match self.newer {
            Some((t, _)) if ts_ns < t.saturating_add(span_ns) => {}
            _ => {
                self.older = self.newer;
                self.newer = Some((ts_ns, seq));
            }
        }
    }

    /// Bits per second from the older mark (the first, before there are
    /// two: a flow ramping up is then slower than later, never faster) to
    /// (`ts_ns`, `seq`); None before any mark.
    pub fn bps(&self, ts_ns: u64, seq: u32) -> Option<f64> {
        let (t0, s0) = self.older.or(self.newer)?;
        let gap = seq.wrapping_sub(s0);
        (ts_ns > t0 && gap < 1 << 31).then(|| f64::from(gap) * 8e9 / (ts_ns - t0) as f64)
    }
}

/// Bits per second for `bytes` per `us` microseconds; None without a time.
pub(super) fn bps(bytes: f64, us: f64) -> Option<f64> {
    (us > 0.0).then(|| bytes * 8.0 * 1e6 / us)
}

/// A rate for a message: "1.23 Gb/s", "456.7 Mb/s", "89.0 kb/s" (the report's units).
pub(super) use crate::export::table::bps as rate;

/// How far a rate measured may exceed a window's ceiling before the words
/// say why (srtt is smoothed; the window and the rate cover different times).
pub(super) const BEYOND_CEILING: f64 = 1.05;

/// ", and ACHIEVED was VERB" after a window's ceiling (its latest value per
/// srtt), saying why when the time before did better than the ceiling now.
pub(super) fn achieved_text(ceiling: Option<f64>, achieved: f64, verb: &str) -> String {
    let why = ceiling.map_or("", |c| {
        beside_ceiling(
            achieved,
            c,
            " (more than the window allows now: it was larger, or the round trips shorter, \
             earlier in that time)",
        )
    });
    format!(", and {} {verb}{why}", rate(achieved))
}

/// What follows a rate measured beside a window's `ceiling`: nothing below
/// it; `beyond` past [`BEYOND_CEILING`] of it; and between, that the two
/// agree ("allowed at most 23.13 Gb/s, and 23.32 Gb/s was acknowledged"
/// read as a contradiction, where srtt, smoothed, is off by that much).
pub(super) fn beside_ceiling(achieved: f64, ceiling: f64, beyond: &'static str) -> &'static str {
    if achieved > ceiling * BEYOND_CEILING {
        beyond
    } else if achieved > ceiling {
        " (the window's ceiling, to within the error of a smoothed srtt)"
    } else {
        ""
    }
}

/// The share of the recent busy time a limit must hold for the rate to be
/// its window's alone: then window / rate is how long the window took to
/// come round.
const HELD_THROUGHOUT: f64 = 0.9;

/// After a receive window's ceiling, where the window held the sender
/// throughout and less than half the ceiling was acknowledged: how long the
/// window took to come round (window / rate) beside srtt. The ceiling
/// assumes the window reopens with each ACK, one srtt after its data left;
/// a receiver that reopens it as its reader frees space, or once a loss's
/// hole is filled, is slower ("rwnd_limited 96%: 26844 B at srtt 53 µs
/// caps at 4.05 Gb/s, and 983.5 Mb/s was acknowledged", 1 data skb in 40
/// dropped, read as a contradiction).
pub(super) fn slow_window_text(window: u64, srtt_us: u32, achieved_bps: f64, share: f64) -> String {
    let Some(ceiling) = bps(window as f64, f64::from(srtt_us)) else {
        return String::new();
    };
    if share < HELD_THROUGHOUT || achieved_bps <= 0.0 || ceiling < 2.0 * achieved_bps {
        return String::new();
    }
    let round_ns = window as f64 * 8.0 / achieved_bps * 1e9;
    format!(
        "; the window came round every {} ({:.1} × srtt): the peer reopened it more slowly \
         than its ACKs came back",
        crate::export::table::duration(round_ns as u64),
        round_ns / (f64::from(srtt_us) * 1e3)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_held_throughout_at_a_quarter_of_its_ceiling_says_how_slowly_it_came_round() {
        // 26844 B at srtt 53 µs: 4.05 Gb/s; 983.5 Mb/s acknowledged is
        // 26844 B every 218.4 µs, 4.1 srtts.
        let text = slow_window_text(26844, 53, 983.5e6, 0.96);
        assert_eq!(
            text,
            "; the window came round every 218.4 µs (4.1 × srtt): the peer reopened it more \
             slowly than its ACKs came back"
        );
        // Held only part of the time, or at more than half the ceiling: nothing.
        assert_eq!(slow_window_text(26844, 53, 983.5e6, 0.5), "");
        assert_eq!(slow_window_text(26844, 53, 2.1e9, 0.96), "");
        assert_eq!(slow_window_text(26844, 0, 983.5e6, 0.96), "");
        assert_eq!(slow_window_text(26844, 53, 0.0, 0.96), "");
    }

    #[test]
    fn episode_hysteresis() {
        let mut e = Episode::default();
        // 20 % threshold, a reading every 40 ms, a hold of 100 ms: 19 no,
        // 21 fires, 15 and 25 stay in the episode (≥ 10); 9 at 160 ms, 12 at
        // 200 (back above half: the hold starts again), 9 from 240 to 360
        // ends it there, 120 ms on; 30 starts a second one.
        let readings = [19.0, 21.0, 15.0, 25.0, 9.0, 12.0, 9.0, 9.0, 9.0, 9.0, 30.0];
        let turns: Vec<Turn> = readings
            .iter()
            .enumerate()
            .map(|(i, &m)| e.update(i as u64 * 40_000_000, m, 20.0, 100_000_000))
            .collect();
        use Turn::*;
        let mut expected = [Unchanged; 11];
        (expected[1], expected[9], expected[10]) = (Started, Ended, Started);
        assert_eq!(turns, expected);
        // No hold: the first reading below half ends it.
        let mut e = Episode::default();
        assert_eq!(e.update(0, 21.0, 20.0, 0), Started);
        assert_eq!(e.update(1, 9.0, 20.0, 0), Ended);
        assert_eq!(e.update(2, 30.0, 20.0, 0), Started);
        // A closed socket ends the running episode once.
        assert!(e.end() && !e.end());
    }

    #[test]
    fn rate_marks_span_one_to_two_windows() {
        let mut m = RateMarks::default();
        assert_eq!(m.bps(0, 1000), None);
        m.mark(0, 1000, 100);
        assert_eq!(m.bps(50, 2000), Some(1000.0 * 8e9 / 50.0));
        m.mark(50, 2000, 100);
        m.mark(100, 3000, 100);
        // From the mark at 0 (seq 1000): 3000 B in 150 ns.
        assert_eq!(m.bps(150, 4000), Some(3000.0 * 8e9 / 150.0));
        // Sequence wrap: 16 bytes across 2^32.
        let mut w = RateMarks::default();
        w.mark(0, u32::MAX - 7, 1);
        w.mark(1, 0, 1);
        assert_eq!(w.bps(2, 8), Some(16.0 * 8e9 / 2.0));
    }

    #[test]
    fn rates() {
        // 26844 B per 100 µs = 26844·8·10^4 = 2.147 Gb/s.
        assert_eq!(rate(bps(26844.0, 100.0).unwrap()), "2.15 Gb/s");
        assert_eq!(rate(8948.0 * 8.0 / 0.45), "159.1 kb/s");
        assert_eq!(
            achieved_text(Some(1e9), 0.98e9, "was acknowledged"),
            ", and 980.0 Mb/s was acknowledged"
        );
        assert_eq!(
            achieved_text(Some(1e9), 1.04e9, "was acknowledged"),
            ", and 1.04 Gb/s was acknowledged (the window's ceiling, to within the error of a \
             smoothed srtt)"
        );
        assert!(achieved_text(Some(1e9), 1.2e9, "arrived").contains("larger, or the round trips"));
        assert_eq!(bps(1.0, 0.0), None);
    }
}
