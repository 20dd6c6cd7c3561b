//! Sampling by time slices (`record --slice`): every probe attached for one
//! slice in each run of `every` consecutive slices, at a position drawn at
//! random for each run, and detached in between, when it costs nothing.
//! The probes come back a little ahead of their slice, so that each traced
//! slice is traced whole: from its nominal start to its nominal end, the
//! same length whatever the load (attaching takes longer when the CPUs are
//! busy, and a slice cut by it would weigh too little in the scale). The
//! time between slices is marked in the recording by `pause` records at its
//! two ends, on the slices' boundaries, so that the analyses know nothing
//! was seen then.

use super::plan::Links;
use anyhow::Context;
use aya::Ebpf;
use std::time::Duration;

/// What a tracer's maps are told as its links come and go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Moment {
    /// The links are about to leave.
    Leaving,
    /// The links are about to come back.
    Coming,
    /// The links are all back, for a window traced from `from_ns` (the
    /// slice's start, or now if they came back late) to `until_ns` (its end).
    Back { from_ns: u64, until_ns: u64 },
}

/// What a tracer does to its maps at each [`Moment`].
pub(crate) type AtMoment = fn(&mut Ebpf, Moment) -> anyhow::Result<()>;

/// A tracer's links sampled by time: attached for the traced slices only.
#[derive(Debug)]
pub(crate) struct Sliced {
    slices: Slices,
    /// The edge made at the start (the links come attached), not yet asked for.
    pending: Option<PauseEdge>,
    at_moment: AtMoment,
}

impl Sliced {
    /// Slices of `slice` from `start_ns` on (before `links` began to
    /// attach: what they stamped while the others attached is inside the
    /// first slice, traced or not), 1 in `every`.
    pub fn start(
        every: u32,
        slice: Duration,
        start_ns: u64,
        links: &mut Links,
        ebpf: &mut Ebpf,
        at_moment: AtMoment,
    ) -> anyhow::Result<Sliced> {
        let seed = now_ns() ^ u64::from(std::process::id());
        let mut sliced = Sliced {
            slices: Slices::new(every, slice, start_ns, seed),
            pending: None,
            at_moment,
        };
        // Detached at once, or traced from the start.
        let first = sliced.follow(links, ebpf)?;
        let bound = PauseEdge::Bound { at_ns: start_ns };
        sliced.pending = Some(first.unwrap_or(bound));
        Ok(sliced)
    }

    /// Attaches or detaches `links` as the time of now calls for, telling
    /// the tracer's `at_moment` before they leave, before they come back and
    /// once they are. Returns the edge of the pause it made (its beginning
    /// or its end), if it made one.
    pub fn follow(
        &mut self,
        links: &mut Links,
        ebpf: &mut Ebpf,
    ) -> anyhow::Result<Option<PauseEdge>> {
        let at_moment = self.at_moment;
        if let Some(edge) = self.pending.take() {
            return Ok(Some(edge));
        }
        match self.slices.turn(now_ns()) {
            Turn::Stay => Ok(None),
            Turn::Detach => {
                at_moment(ebpf, Moment::Leaving)?;
                let leaving = now_ns();
                links.detach();
                Ok(Some(self.slices.detached(leaving, now_ns())))
            }
            Turn::Attach { slice } => {
                at_moment(ebpf, Moment::Coming)?;
                let coming = now_ns();
                links
                    .attach(ebpf)
                    .context("attaching the probes for a slice")?;
                let edge = self.slices.attached(slice, coming, now_ns());
                let (from_ns, until_ns) = self.slices.window_ns();
                at_moment(ebpf, Moment::Back { from_ns, until_ns })?;
                Ok(Some(edge))
            }
        }
    }

    /// When the links next attach or detach (CLOCK_MONOTONIC ns).
    pub fn next_edge_ns(&self) -> u64 {
        self.slices.next_edge_ns(now_ns())
    }

    /// Whether the links are detached (between slices).
    pub fn paused(&self) -> bool {
        self.slices.paused()
    }

    /// The recording's last edge: the end of the pause running now, or its
    /// bound if a slice is traced.
    pub fn end(&mut self) -> Option<PauseEdge> {
        self.slices.end(now_ns())
    }
}

fn now_ns() -> u64 {
    crate::os::clock_ns(libc::CLOCK_MONOTONIC)
}

/// The least time the probes come back ahead of their slice: the collector's
/// wait rounds up to the ms, so it may wake up to 1 ms after the time it asked.
const LEAD_MIN_NS: u64 = 1_000_000;

/// What coming back is taken to cost before the first measure: attaching
/// 14 hooks takes 3 ms on an idle 2-vCPU VM, more under load, and a busy
/// collector wakes late.
const COMING_GUESS_NS: u64 = 5_000_000;

/// Which slices are traced, and where the probes stand.
#[derive(Debug)]
pub(crate) struct Slices {
    every: u64,
    slice_ns: u64,
    /// CLOCK_MONOTONIC ns of the first slice's start (the kernel's clock).
    start_ns: u64,
    /// Each run's traced slice is drawn from it and the run's number alone.
    seed: u64,
    /// Attached: the first slice after the window they are attached for.
    /// None: detached.
    attached_until: Option<u64>,
    /// The time the last pause ended.
    resumed_ns: u64,
    /// The longest time lately from when the probes were to begin coming
    /// back to when they all were: the collector's lateness and the attach
    /// (decays by a quarter at each attach).
    coming_ns: u64,
}

/// An end of a pause (CLOCK_MONOTONIC ns; see `struct tt_pause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseEdge {
    /// The trace stops being whole at `at_ns` (a slice's end; the probes
    /// began to leave then or after) and the probes were gone at `detached_ns`.
    Begin { at_ns: u64, detached_ns: u64 },
    /// The probes began to come back at `attaching_ns` and the trace is
    /// whole again from `at_ns` on (a slice's start, or the time they were
    /// all back if that was later).
    End { attaching_ns: u64, at_ns: u64 },
    /// The recording starts or ends at `at_ns` with the probes attached: no
    /// pause begins or ends there, but the time the counts are scaled by
    /// runs from it (the slices were drawn over it, traced or not).
    Bound { at_ns: u64 },
}

impl PauseEdge {
    /// Where the edge stands in the trace.
    pub fn at_ns(&self) -> u64 {
        match *self {
            PauseEdge::Begin { at_ns, .. }
            | PauseEdge::End { at_ns, .. }
            | PauseEdge::Bound { at_ns } => at_ns,
        }
    }
}

/// What the probes should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    Stay,
    Detach,
    /// Come back for the traced slice `slice` (now, or soon).
    Attach {
        slice: u64,
    },
}

impl Slices {
    /// Slices from `start_ns` on, the probes attached then.
    pub fn new(every: u32, slice: Duration, start_ns: u64, seed: u64) -> Slices {
        let mut slices = Slices {
            every: u64::from(every.max(1)),
            slice_ns: (slice.as_nanos() as u64).max(1),
            start_ns,
            seed,
            attached_until: None,
            resumed_ns: start_ns,
            coming_ns: COMING_GUESS_NS,
        };
        // Attached from the start for slice 0 if it is traced, else for none.
        slices.attached_until = Some(match slices.is_traced(0) {
            true => slices.window_end(0),
            false => 0,
        });
        slices
    }

    /// The slice of run `run` that is traced: SplitMix64's output number
    /// `run` from the seed, so any run's is known at once, now or ahead.
    fn traced_of(&self, run: u64) -> u64 {
        let gamma = 0x9E37_79B9_7F4A_7C15u64;
        let x = self
            .seed
            .wrapping_add(run.wrapping_add(1).wrapping_mul(gamma));
        // The modulo's bias is below 2^-50 for any `every` here.
        split_mix(x) % self.every
    }

    /// Whether slice `k` (counted from the start) is traced.
    fn is_traced(&self, k: u64) -> bool {
        k % self.every == self.traced_of(k / self.every)
    }

    /// The first traced slice from `k` on.
    fn next_traced(&self, k: u64) -> u64 {
        let run = k / self.every;
        let here = run * self.every + self.traced_of(run);
        match here >= k {
            true => here,
            false => (run + 1) * self.every + self.traced_of(run + 1),
        }
    }

    /// The first slice after the traced ones that follow each other from
    /// `k` (the last of a run and the first of the next may both be).
    fn window_end(&self, k: u64) -> u64 {
        if self.every == 1 {
            return u64::MAX;
        }
        let mut end = k + 1;
        while self.is_traced(end) {
            end += 1;
        }
        end
    }

    fn slice_at(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.start_ns) / self.slice_ns
    }

    fn slice_start_ns(&self, k: u64) -> u64 {
        k.saturating_mul(self.slice_ns)
            .saturating_add(self.start_ns)
    }

    /// How long before a traced slice the probes begin to come back: twice
    /// the longest coming back lately, at most half a slice.
    fn lead_ns(&self) -> u64 {
        (LEAD_MIN_NS + 2 * self.coming_ns).min(self.slice_ns / 2)
    }

    /// What the probes should do at `now_ns`; the caller then does it.
    pub fn turn(&self, now_ns: u64) -> Turn {
        let k = self.slice_at(now_ns);
        match self.attached_until {
            Some(until) if k < until => Turn::Stay,
            Some(_) => Turn::Detach,
            None => {
                let slice = self.next_traced(k);
                match self.slice_start_ns(slice) <= now_ns + self.lead_ns() {
                    true => Turn::Attach { slice },
                    false => Turn::Stay,
                }
            }
        }
    }

    /// The probes began to leave at `at_ns` and were gone at `gone_ns`: the
    /// pause begins where their window ended (if they came back before).
    pub fn detached(&mut self, at_ns: u64, gone_ns: u64) -> PauseEdge {
        let until = self.attached_until.take().unwrap_or(0);
        PauseEdge::Begin {
            at_ns: at_ns.min(self.window_end_ns(until)),
            detached_ns: gone_ns,
        }
    }

    /// Where the window traced until slice `until` ends: at that slice's
    /// start, or where the last pause ended if the probes came back later.
    fn window_end_ns(&self, until: u64) -> u64 {
        self.slice_start_ns(until).max(self.resumed_ns)
    }

    /// The probes began to come back at `from_ns` for slice `slice` and
    /// were all back at `back_ns`: the pause ends at its start, or then if
    /// they came late.
    pub fn attached(&mut self, slice: u64, from_ns: u64, back_ns: u64) -> PauseEdge {
        let start = self.slice_start_ns(slice);
        let wanted = start.saturating_sub(self.lead_ns()).min(from_ns);
        let took = back_ns.saturating_sub(wanted);
        self.coming_ns = took.max(self.coming_ns - self.coming_ns / 4);
        self.attached_until = Some(self.window_end(slice));
        self.resumed_ns = back_ns.max(start);
        PauseEdge::End {
            attaching_ns: from_ns,
            at_ns: self.resumed_ns,
        }
    }

    /// Attached: the window traced, from the last pause's end to the end of
    /// the slices they are attached for (CLOCK_MONOTONIC ns).
    pub fn window_ns(&self) -> (u64, u64) {
        let until = self.attached_until.unwrap_or(0);
        (self.resumed_ns, self.slice_start_ns(until))
    }

    /// The edge the recording ends with at `now_ns`: the end of the pause
    /// running then, or the recording's bound if a slice is traced (at its
    /// window's end if that came first: the time after it was not drawn).
    /// None once it ended (the probes are then attached for good).
    pub fn end(&mut self, now_ns: u64) -> Option<PauseEdge> {
        let edge = match self.attached_until {
            Some(u64::MAX) => return None,
            Some(until) => PauseEdge::Bound {
                at_ns: now_ns.min(self.window_end_ns(until)),
            },
            None => PauseEdge::End {
                attaching_ns: now_ns,
                at_ns: now_ns,
            },
        };
        self.attached_until = Some(u64::MAX);
        Some(edge)
    }

    /// Whether the probes are detached (between slices).
    pub fn paused(&self) -> bool {
        self.attached_until.is_none()
    }

    /// When [`turn`](Self::turn) may next say something else than `Stay`:
    /// attached, at the end of their window; detached, a lead ahead of the
    /// next traced slice.
    pub fn next_edge_ns(&self, now_ns: u64) -> u64 {
        match self.attached_until {
            Some(until) => self.slice_start_ns(until),
            None => {
                let next = self.next_traced(self.slice_at(now_ns));
                self.slice_start_ns(next).saturating_sub(self.lead_ns())
            }
        }
    }
}

/// SplitMix64's mixing (Steele, Lea and Flood): the slices need positions
/// without pattern, not secrecy.
fn split_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A walk through the schedule as the collector takes it: it wakes at
    /// the next edge or after a tenth of a slice, whichever comes first, does
    /// what the slices say, and attaching takes `attach_ns`.
    struct Walk {
        /// The traced windows (from, to): an END's time to the next BEGIN's.
        windows: Vec<(u64, u64)>,
        /// The pauses (from, to): a BEGIN's time to the next END's.
        pauses: Vec<(u64, u64)>,
        /// Each END's time and the time its probes were all back.
        ends: Vec<(u64, u64)>,
    }

    fn walk(slices: &mut Slices, until_ns: u64, attach_ns: u64) -> Walk {
        let (mut edges, mut ends) = (Vec::new(), Vec::new());
        let mut now = slices.start_ns;
        while now < until_ns {
            match slices.turn(now) {
                Turn::Detach => edges.push(slices.detached(now, now)),
                Turn::Attach { slice } => {
                    let edge = slices.attached(slice, now, now + attach_ns);
                    now += attach_ns;
                    if let PauseEdge::End { at_ns, .. } = edge {
                        ends.push((at_ns, now));
                    }
                    edges.push(edge);
                }
                Turn::Stay => {}
            }
            now = slices
                .next_edge_ns(now)
                .clamp(now + 1, now + slices.slice_ns / 10);
        }
        edges.extend(slices.end(now));
        // Attached from the start: windows and pauses alternate from there.
        let (mut windows, mut pauses) = (Vec::new(), Vec::new());
        let mut since = slices.start_ns;
        for edge in edges {
            match edge {
                PauseEdge::Begin { .. } | PauseEdge::Bound { .. } => {
                    windows.push((since, edge.at_ns()))
                }
                PauseEdge::End { .. } => pauses.push((since, edge.at_ns())),
            }
            since = edge.at_ns();
        }
        Walk {
            windows,
            pauses,
            ends,
        }
    }

    #[test]
    fn one_slice_of_each_run_is_traced_whole_at_a_uniform_position() {
        let (every, slice) = (8, 10 * MS);
        let mut slices = Slices::new(every, Duration::from_millis(10), 1000 * MS, 7);
        let runs = 4000;
        let walk = walk(&mut slices, 1000 * MS + runs * 80 * MS, 0);
        let mut traced = Vec::new();
        for &(from, to) in &walk.windows {
            // Windows fall on the slices' boundaries: whole slices.
            assert_eq!((from - 1000 * MS) % slice, 0, "window {from}..{to}");
            assert_eq!((to - 1000 * MS) % slice, 0, "window {from}..{to}");
            traced.extend((from - 1000 * MS) / slice..(to - 1000 * MS) / slice);
        }
        assert_eq!(traced.len() as u64, runs);
        let mut at = [0u64; 8];
        for (run, k) in traced.iter().enumerate() {
            assert_eq!(k / 8, run as u64, "one traced slice per run");
            at[(k % 8) as usize] += 1;
        }
        // 500 expected per position; chi-square with 7 degrees of freedom
        // stays below 24.3 with probability 0.999.
        let chi2: f64 = at.iter().map(|&n| (n as f64 - 500.0).powi(2) / 500.0).sum();
        assert!(chi2 < 24.3, "positions {at:?}, chi2 {chi2:.1}");
        // Pauses and traced slices tile the time: 1/8 of it traced.
        let paused: u64 = walk.pauses.iter().map(|(from, to)| to - from).sum();
        assert_eq!(runs * 80 * MS - paused, runs * slice);
        assert!(walk.pauses.windows(2).all(|w| w[0].1 < w[1].0));
    }

    /// The probes come back ahead of their slice by twice what coming back
    /// took lately: a slice is traced whole even when it takes 4 ms of a
    /// 20 ms slice; when it takes longer than half a slice, the pause ends
    /// when they are all back.
    #[test]
    fn a_slice_is_traced_whole_however_long_attaching_takes_up_to_its_lead() {
        let (slice, start) = (20 * MS, 3 * MS);
        let cases = [
            (MS / 10, true),
            (4 * MS, true),
            (12 * MS, false),
            (35 * MS, false),
        ];
        for (attach, whole) in cases {
            let mut slices = Slices::new(4, Duration::from_millis(20), start, 5);
            let walk = walk(&mut slices, start + 400 * 80 * MS, attach);
            assert!(walk.ends.len() > 300);
            for &(at, back) in &walk.ends {
                match whole {
                    true => assert_eq!((at - start) % slice, 0, "{at} (attach {attach})"),
                    false => assert_eq!(at, back, "{at}"),
                }
                assert!(at >= back, "traced from {at}, back at {back}");
            }
            // The first window is empty when slice 0 is not traced.
            let short = walk.windows.iter().filter(|(f, t)| f < t && t - f < slice);
            let short = short.count();
            // Edges in time order, even where the slice was over before
            // the probes were back (35 ms).
            let spans = walk.windows.iter().chain(&walk.pauses);
            assert!(spans.into_iter().all(|(from, to)| from <= to));
            assert_eq!(short == 0, whole, "{short} short windows (attach {attach})");
        }
    }

    /// Between edges nothing is to be done: the collector need not wake at
    /// every slice in between.
    #[test]
    fn nothing_changes_before_the_next_edge() {
        let mut slices = Slices::new(16, Duration::from_millis(10), 0, 11);
        let mut now = 0;
        while now < 200 * 160 * MS {
            match slices.turn(now) {
                Turn::Detach => _ = slices.detached(now, now),
                Turn::Attach { slice } => _ = slices.attached(slice, now, now),
                Turn::Stay => {}
            }
            let edge = slices.next_edge_ns(now);
            assert!(edge > now, "{now}");
            for t in [now + 1, (now + edge) / 2, edge - 1] {
                assert_eq!(slices.turn(t), Turn::Stay, "{t} before the edge {edge}");
            }
            assert_ne!(slices.turn(edge), Turn::Stay, "at the edge {edge}");
            now = edge;
        }
    }

    /// A recording that ends with the probes attached ends where its
    /// window does if the collector got there late (a traced slice's bound
    /// put later counted untraced time as traced: the scale came 7.29 for
    /// 1 in 8); inside its window, it ends then.
    #[test]
    fn a_recording_ends_no_later_than_the_window_it_ends_in() {
        let start = 0;
        for late in [false, true] {
            let mut slices = Slices::new(8, Duration::from_millis(20), start, 9);
            let slice = slices.next_traced(8);
            let from = slices.slice_start_ns(slice);
            slices.attached(slice, from - MS, from - MS / 2);
            let (_, until) = slices.window_ns();
            let now = match late {
                true => until + 150 * MS,
                false => from + 5 * MS,
            };
            let end = slices.end(now);
            let at_ns = now.min(until);
            assert_eq!(end, Some(PauseEdge::Bound { at_ns }), "late: {late}");
            assert_eq!(slices.end(now + MS), None);
        }
    }

    #[test]
    fn every_one_traces_everything() {
        let mut slices = Slices::new(1, Duration::from_millis(10), 0, 3);
        let walk = walk(&mut slices, 500 * MS, 0);
        assert!(walk.pauses.is_empty());
        assert!(walk.ends.is_empty());
    }
}
