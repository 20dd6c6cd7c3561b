//! Sampling by time slices (`record --slice`): every probe attached for one
//! slice in each run of `every` consecutive slices, at a position drawn at
//! random for each run, and detached in between, when it costs nothing.
//! Every event of a traced slice is kept; the time between slices is
//! marked in the recording by `pause` records at its two ends, so that the
//! analyses know nothing was seen then.

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
    /// The links are all back.
    Back,
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
    /// Slices of `slice` from now on, 1 in `every`, over `links` (attached).
    pub fn start(
        every: u32,
        slice: Duration,
        links: &mut Links,
        ebpf: &mut Ebpf,
        at_moment: AtMoment,
    ) -> anyhow::Result<Sliced> {
        let now = now_ns();
        let seed = now ^ u64::from(std::process::id());
        let mut sliced = Sliced {
            slices: Slices::new(every, slice, now, seed),
            pending: None,
            at_moment,
        };
        sliced.pending = sliced.follow(links, ebpf)?;
        Ok(sliced)
    }

    /// Attaches or detaches `links` as the slice of now calls for, telling
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
            Turn::Attach => {
                at_moment(ebpf, Moment::Coming)?;
                let coming = now_ns();
                links
                    .attach(ebpf)
                    .context("attaching the probes for a slice")?;
                at_moment(ebpf, Moment::Back)?;
                Ok(Some(self.slices.attached(coming, now_ns())))
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

    /// The end of the pause running now, if one is (the tracing ends).
    pub fn end(&mut self) -> Option<PauseEdge> {
        self.slices.end(now_ns())
    }
}

fn now_ns() -> u64 {
    crate::os::clock_ns(libc::CLOCK_MONOTONIC)
}

/// Which slices are traced, and when the probes were last detached.
#[derive(Debug)]
pub(crate) struct Slices {
    every: u64,
    slice_ns: u64,
    /// CLOCK_MONOTONIC ns of the first slice's start (the kernel's clock).
    start_ns: u64,
    /// The run of slices `traced` was drawn for, and the one traced in it.
    run: u64,
    traced: u64,
    rng: SplitMix64,
    /// Whether the probes are detached.
    paused: bool,
}

/// An end of a pause (CLOCK_MONOTONIC ns; see `struct tt_pause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseEdge {
    /// The probes began to leave at `at_ns` and were all gone at `detached_ns`.
    Begin { at_ns: u64, detached_ns: u64 },
    /// The probes began to come back at `attaching_ns` and were all back at `at_ns`.
    End { attaching_ns: u64, at_ns: u64 },
}

/// What the probes should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    Stay,
    Detach,
    Attach,
}

impl Slices {
    /// Slices from `start_ns` on, the probes attached then.
    pub fn new(every: u32, slice: Duration, start_ns: u64, seed: u64) -> Slices {
        let mut rng = SplitMix64(seed);
        let every = u64::from(every.max(1));
        Slices {
            every,
            slice_ns: (slice.as_nanos() as u64).max(1),
            start_ns,
            run: 0,
            traced: rng.below(every),
            rng,
            paused: false,
        }
    }

    /// Whether slice `k` (counted from the start) is traced.
    fn is_traced(&mut self, k: u64) -> bool {
        let run = k / self.every;
        if run != self.run {
            self.run = run;
            self.traced = self.rng.below(self.every);
        }
        k % self.every == self.traced
    }

    /// What the probes should do at `now_ns`; the caller then does it.
    pub fn turn(&mut self, now_ns: u64) -> Turn {
        let k = now_ns.saturating_sub(self.start_ns) / self.slice_ns;
        match (self.is_traced(k), self.paused) {
            (true, true) => Turn::Attach,
            (false, false) => Turn::Detach,
            _ => Turn::Stay,
        }
    }

    /// The probes began to leave at `at_ns` and were gone at `gone_ns`.
    pub fn detached(&mut self, at_ns: u64, gone_ns: u64) -> PauseEdge {
        self.paused = true;
        PauseEdge::Begin {
            at_ns,
            detached_ns: gone_ns,
        }
    }

    /// The probes began to come back at `from_ns` and were all back at `back_ns`.
    pub fn attached(&mut self, from_ns: u64, back_ns: u64) -> PauseEdge {
        self.paused = false;
        PauseEdge::End {
            attaching_ns: from_ns,
            at_ns: back_ns,
        }
    }

    /// The end of the pause running as the recording ends at `now_ns`, if one is.
    pub fn end(&mut self, now_ns: u64) -> Option<PauseEdge> {
        self.paused.then(|| self.attached(now_ns, now_ns))
    }

    /// Whether the probes are detached (between slices).
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// When [`turn`](Self::turn) may next say something else than `Stay`:
    /// attached, at the end of the slice of `now_ns`; detached, at the start
    /// of this run's traced slice, or of the next run (its slice is not
    /// drawn yet).
    pub fn next_edge_ns(&self, now_ns: u64) -> u64 {
        let k = now_ns.saturating_sub(self.start_ns) / self.slice_ns;
        let (run, at) = (k / self.every, k % self.every);
        let next = match self.paused && run == self.run {
            false => k + 1,
            true if self.traced >= at => run * self.every + self.traced,
            true => (run + 1) * self.every,
        };
        self.start_ns + next * self.slice_ns
    }
}

/// A small, well-mixed generator (Steele, Lea and Flood's SplitMix64): the
/// slices need positions without pattern, not secrecy.
#[derive(Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (the modulo's bias is below 2^-50 for any n here).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Walks the schedule in steps of a tenth of a slice, doing what it
    /// says: the slices traced, and the pauses (from, to).
    fn walk(slices: &mut Slices, until_ns: u64) -> (Vec<u64>, Vec<(u64, u64)>) {
        let (mut traced, mut edges) = (Vec::new(), Vec::new());
        let mut now = slices.start_ns;
        while now < until_ns {
            match slices.turn(now) {
                Turn::Detach => edges.push(slices.detached(now, now)),
                Turn::Attach => edges.push(slices.attached(now, now)),
                Turn::Stay => {}
            }
            let k = (now - slices.start_ns) / slices.slice_ns;
            if !slices.paused && traced.last() != Some(&k) {
                traced.push(k);
            }
            now += slices.slice_ns / 10;
        }
        edges.extend(slices.end(now));
        let pauses = edges
            .chunks(2)
            .map(|pair| match pair {
                [PauseEdge::Begin { at_ns: from, .. }, PauseEdge::End { at_ns: to, .. }] => {
                    (*from, *to)
                }
                _ => panic!("edges out of turn: {pair:?}"),
            })
            .collect();
        (traced, pauses)
    }

    #[test]
    fn one_slice_of_each_run_is_traced_at_a_uniform_position() {
        let every = 8;
        let mut slices = Slices::new(every, Duration::from_millis(10), 1000 * MS, 7);
        let runs = 4000;
        let (traced, pauses) = walk(&mut slices, 1000 * MS + runs * 80 * MS);
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
        let paused: u64 = pauses.iter().map(|(from, to)| to - from).sum();
        let total = runs * 80 * MS;
        let traced_share = 1.0 - paused as f64 / total as f64;
        assert!((traced_share - 0.125).abs() < 0.002, "{traced_share}");
        assert!(pauses.windows(2).all(|w| w[0].1 < w[1].0));
    }

    #[test]
    fn edges_fall_on_slice_boundaries() {
        let slices = Slices::new(4, Duration::from_millis(20), 5 * MS, 1);
        assert_eq!(slices.next_edge_ns(5 * MS), 25 * MS);
        assert_eq!(slices.next_edge_ns(24 * MS), 25 * MS);
        assert_eq!(slices.next_edge_ns(25 * MS), 45 * MS);
    }

    /// Detached, the next edge is the traced slice's start (or the next
    /// run's): the collector need not wake at every slice in between.
    #[test]
    fn detached_the_next_edge_is_the_next_slice_that_may_be_traced() {
        let every = 16;
        let mut slices = Slices::new(every as u32, Duration::from_millis(10), 0, 11);
        let mut now = 0;
        while now < 200 * 160 * MS {
            match slices.turn(now) {
                Turn::Detach => _ = slices.detached(now, now),
                Turn::Attach => _ = slices.attached(now, now),
                Turn::Stay => {}
            }
            let edge = slices.next_edge_ns(now);
            assert!(edge > now || slices.paused(), "{now}");
            // Nothing changes before the edge: the slices up to it are all
            // traced or all not, as the probes are now.
            let k = now / (10 * MS);
            let last = (edge - 1) / (10 * MS);
            if slices.paused() && edge > now {
                assert!((k..=last).all(|j| j / every != slices.run || j % every != slices.traced));
            }
            assert_eq!(edge % (10 * MS), 0);
            now = edge.max(now + 1);
        }
    }

    #[test]
    fn every_one_traces_everything() {
        let mut slices = Slices::new(1, Duration::from_millis(10), 0, 3);
        let (traced, pauses) = walk(&mut slices, 500 * MS);
        assert_eq!(traced.len(), 50);
        assert!(pauses.is_empty());
    }
}
