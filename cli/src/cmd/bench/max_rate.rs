//! The highest event rate held with zero loss: a paced stream of 100-byte
//! writes (TCP_NODELAY, so about one segment each, and about a dozen events
//! per segment across both ends) at rising rates, each step traced in full by
//! the same collector `record` runs, loss read from the kernel's exact
//! per-CPU counters, and the CPU time of the collector's threads (the one
//! draining the ring and the one writing the file) from getrusage. Each step
//! runs twice, back to back: journeys (`record`'s default) and a record per
//! hook hit (`--per-hook`), so the collector's CPU per event and per ring
//! record of the two designs stand side by side.

use super::instrument::TracedSession;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};
use tenge_trace::lab::{Lab, LabConfig};
use tenge_trace::probe::{Filters, TracerOptions};

const PORT: u16 = 15401;
const WRITE: [u8; 100] = [0x5a; 100];
/// Writes between two looks at the clock.
const MAX_BURST: u64 = 256;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RateStep {
    /// Writes per second asked of the sender; None: as fast as it can.
    pub offered_writes_per_s: Option<u64>,
    /// A record per hook hit (`--per-hook`) instead of per journey. Absent
    /// in older results, which ran journeys only.
    #[serde(default)]
    pub per_hook: bool,
    pub writes_per_s: f64,
    pub events_per_s: f64,
    pub events: u64,
    /// Records the ring carried (batches of journeys, or one per hook hit).
    /// Absent in older results.
    #[serde(default)]
    pub ring_records: u64,
    /// Exact: the kernel counts every record it could not queue.
    pub lost: u64,
    /// Collector CPU (user + system, both threads) / wall time, in % of one core.
    pub collector_cpu_pct: f64,
    /// Collector CPU in ns, both threads. Absent in older results.
    #[serde(default)]
    pub collector_cpu_ns: u64,
}

impl RateStep {
    /// The collector's CPU per million events, in ms (ns per event).
    pub fn cpu_ms_per_m_events(&self) -> Option<f64> {
        (self.events > 0 && self.collector_cpu_ns > 0)
            .then(|| self.collector_cpu_ns as f64 / self.events as f64)
    }

    /// The collector's CPU per million ring records, in ms.
    pub fn cpu_ms_per_m_records(&self) -> Option<f64> {
        (self.ring_records > 0 && self.collector_cpu_ns > 0)
            .then(|| self.collector_cpu_ns as f64 / self.ring_records as f64)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MaxRate {
    pub seconds_per_step: f64,
    pub steps: Vec<RateStep>,
    /// Journeys' (`record`'s default): the step of the most events per
    /// second with no loss.
    pub highest_zero_loss_events_per_s: Option<f64>,
    pub collector_cpu_pct_at_highest: Option<f64>,
}

impl MaxRate {
    /// The step of the most events per second with no loss, per hook or not.
    pub fn highest(&self, per_hook: bool) -> Option<&RateStep> {
        self.steps
            .iter()
            .filter(|s| s.lost == 0 && s.per_hook == per_hook)
            .max_by(|a, b| a.events_per_s.total_cmp(&b.events_per_s))
    }
}

pub fn run(seconds: u32, scratch: &Path) -> Result<MaxRate> {
    let lab = Lab::new(&LabConfig::default())?;
    let mut steps = Vec::new();
    for offered in [
        Some(25_000),
        Some(50_000),
        Some(100_000),
        Some(200_000),
        None,
    ] {
        for per_hook in [false, true] {
            super::check_interrupted()?;
            eprintln!(
                "bench: max rate, {offered:?} writes/s for {seconds} s{}",
                if per_hook { ", per hook" } else { "" }
            );
            steps.push(step(&lab, offered, per_hook, seconds, scratch)?);
        }
    }
    let mut rate = MaxRate {
        seconds_per_step: f64::from(seconds),
        highest_zero_loss_events_per_s: None,
        collector_cpu_pct_at_highest: None,
        steps,
    };
    (
        rate.highest_zero_loss_events_per_s,
        rate.collector_cpu_pct_at_highest,
    ) = rate
        .highest(false)
        .map(|s| (s.events_per_s, s.collector_cpu_pct))
        .unzip();
    Ok(rate)
}

/// One step: `offered` writes/s for `seconds`, traced in full.
fn step(
    lab: &Lab,
    offered: Option<u64>,
    per_hook: bool,
    seconds: u32,
    scratch: &Path,
) -> Result<RateStep> {
    let options = TracerOptions {
        filters: Filters {
            port: Some(PORT),
            ..Filters::default()
        },
        per_hook,
        ..TracerOptions::default()
    };
    let session = TracedSession::start(options, scratch.join("max-rate.ttr"))?;
    let started = Instant::now();
    let writes = paced_transfer(lab, offered, Duration::from_secs(seconds.into()));
    let wall = started.elapsed().as_secs_f64();
    let end = session.stop()?;
    let writes = writes?;
    Ok(RateStep {
        offered_writes_per_s: offered,
        per_hook,
        writes_per_s: writes as f64 / wall,
        events_per_s: end.stats.events as f64 / wall,
        events: end.stats.events,
        ring_records: end.stats.ring_records,
        lost: end.stats.lost_total(),
        collector_cpu_pct: end.cpu.as_secs_f64() / end.stats.elapsed.as_secs_f64() * 100.0,
        collector_cpu_ns: end.cpu.as_nanos() as u64,
    })
}

/// Sends 100-byte writes at `rate` per second (None: flat out) for `length`;
/// returns how many were written.
fn paced_transfer(lab: &Lab, rate: Option<u64>, length: Duration) -> Result<u64> {
    let addr = SocketAddrV4::new(lab.receiver_ip(), PORT);
    let listener = lab
        .receiver_netns()
        .run(|| TcpListener::bind(addr).context("bind"))?;
    std::thread::scope(|scope| {
        let receiver = lab.receiver_netns().spawn_scoped(scope, || {
            let (mut stream, _) = listener.accept()?;
            let mut buf = vec![0u8; 256 << 10];
            while stream.read(&mut buf)? > 0 {}
            Ok(())
        });
        let sent = lab.sender_netns().run(|| {
            let mut stream = TcpStream::connect(addr).context("connect")?;
            stream.set_nodelay(true)?;
            let started = Instant::now();
            let mut written = 0u64;
            loop {
                let elapsed = started.elapsed();
                if elapsed >= length {
                    break;
                }
                let due = rate.map_or(written + MAX_BURST, |r| {
                    (r as u128 * elapsed.as_nanos() / 1_000_000_000) as u64
                });
                if written >= due {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                // A sender that cannot keep up stays behind instead of
                // writing one endless burst past the step's end.
                for _ in 0..(due - written).min(MAX_BURST) {
                    stream.write_all(&WRITE)?;
                    written += 1;
                }
            }
            Ok(written)
        });
        receiver
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        sent
    })
}
