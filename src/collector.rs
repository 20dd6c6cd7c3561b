//! Draining the ring buffer.
//!
//! The BPF side submits without waking the reader (a wakeup per event would
//! cost more than the event), and forces a wakeup only when the ring is about
//! a quarter full (each CPU counting its own share). So the [`Collector`]
//! polls the ring fd with a short timeout and then drains everything that is
//! there, handing each record to a callback as a borrowed slice: nothing is
//! allocated per event.

use crate::probe::Tracer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long one poll(2) waits before draining anyway.
const POLL_TIMEOUT: Duration = Duration::from_millis(10);
/// How often `on_tick` is called.
/// Records taken from the ring between looks at the clock and the stop flag.
const BATCH: u64 = 4096;
const TICK: Duration = Duration::from_secs(1);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectStats {
    pub events: u64,
    pub bytes: u64,
    /// Records the kernel dropped because the ring was full, per kind
    /// (index = `tt_kind`). Exact in the final stats; refreshed every tick.
    pub lost: Vec<u64>,
    pub started: Instant,
    pub elapsed: Duration,
}

impl CollectStats {
    pub fn lost_total(&self) -> u64 {
        self.lost.iter().sum()
    }
}

#[derive(Debug, Default)]
pub struct Collector {}

impl Collector {
    pub fn new() -> Collector {
        Collector {}
    }

    /// Drains `tracer` until `stop` is set or `deadline` passes, then once
    /// more, and reads the lost counters last.
    pub fn run(
        &mut self,
        tracer: &mut Tracer,
        stop: &AtomicBool,
        deadline: Option<Instant>,
        mut on_record: impl FnMut(&[u8]),
        mut on_tick: impl FnMut(&CollectStats),
    ) -> anyhow::Result<CollectStats> {
        let started = Instant::now();
        let mut stats = CollectStats {
            events: 0,
            bytes: 0,
            lost: tracer.lost()?,
            started,
            elapsed: Duration::ZERO,
        };
        let mut next_tick = started + TICK;
        // Returns whether the ring may hold more (a full batch was taken).
        let mut drain = |tracer: &mut Tracer, stats: &mut CollectStats| {
            let (events, bytes) = tracer.drain(BATCH, &mut on_record);
            stats.events += events;
            stats.bytes += bytes;
            events == BATCH
        };
        while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
            // Batches keep the stop flag, the deadline and the ticks live when
            // the producers outrun the reader; wait only once the ring is empty.
            if !drain(tracer, &mut stats) {
                wait_readable(tracer.ring_fd(), POLL_TIMEOUT)?;
            }
            let now = Instant::now();
            if now >= next_tick {
                stats.elapsed = now - started;
                stats.lost = tracer.lost()?;
                on_tick(&stats);
                next_tick = now + TICK;
            }
        }
        while drain(tracer, &mut stats) {}
        stats.lost = tracer.lost()?;
        stats.elapsed = started.elapsed();
        Ok(stats)
    }
}

/// poll(2) for readability; a timeout or a signal is not an error.
fn wait_readable(fd: std::os::fd::RawFd, timeout: Duration) -> anyhow::Result<()> {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pollfd, 1, timeout.as_millis() as libc::c_int) };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(anyhow::Error::new(err).context("poll on the ring buffer"));
        }
    }
    Ok(())
}
