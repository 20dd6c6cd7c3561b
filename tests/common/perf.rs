//! `perf record` of tracepoints, system-wide, read back with `perf script`:
//! what the kernel's own tracepoints said while it ran, by a tool nobody
//! here wrote (ground truth for the tracer's events and their times).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One tracepoint hit as perf printed it.
#[derive(Clone, Debug)]
pub struct Sample {
    /// CLOCK_MONOTONIC (`perf record -k CLOCK_MONOTONIC`), as the tracer's.
    pub ts_ns: u64,
    /// e.g. `napi:napi_poll`.
    pub event: String,
    /// The tracepoint's own print format, filled in.
    pub trace: String,
}

impl Sample {
    /// A field printed as `key=value` or as `key value`.
    pub fn field(&self, key: &str) -> Option<&str> {
        let mut words = self.trace.split_whitespace();
        while let Some(word) = words.next() {
            if let Some(value) = word.strip_prefix(key).and_then(|v| v.strip_prefix('=')) {
                return Some(value);
            }
            if word == key {
                return words.next();
            }
        }
        None
    }

    pub fn number(&self, key: &str) -> Option<i64> {
        let value = self.field(key)?;
        match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok().map(|v| v as i64),
            None => value.parse().ok(),
        }
    }
}

pub struct Record {
    child: Option<Child>,
    data: PathBuf,
}

impl Record {
    /// Starts recording `events`; returns once perf is counting.
    pub fn start(dir: &Path, events: &[&str]) -> Record {
        let data = dir.join("tracepoints.perf");
        let child = Command::new("perf")
            .args([
                "record",
                "-q",
                "-a",
                "-k",
                "CLOCK_MONOTONIC",
                // 4 MiB per CPU: a bulk transfer's tracepoints overran the
                // default, and a lost poll is not one the tracer missed.
                "-m",
                "1024",
                "-e",
                &events.join(","),
            ])
            .arg("-o")
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("perf (scripts/install-deps.sh installs linux-perf)");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::fs::metadata(&data).map_or(true, |m| m.len() == 0) {
            assert!(Instant::now() < deadline, "perf record did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        // The header is written before the events are enabled.
        std::thread::sleep(Duration::from_secs(1));
        Record {
            child: Some(child),
            data,
        }
    }

    /// Stops perf (SIGINT, as Ctrl-C) and reads its samples back, in time order.
    pub fn finish(mut self) -> Vec<Sample> {
        self.interrupt();
        let out = Command::new("perf")
            .args(["script", "--ns", "-F", "time,event,trace", "-i"])
            .arg(&self.data)
            .output()
            .expect("perf script");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "perf script: {stderr}");
        // "Processed N events and lost M chunks!": say so beside a mismatch.
        if stderr.contains("lost") {
            eprintln!("perf script: {stderr}");
        }
        let mut samples: Vec<Sample> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(parse)
            .collect();
        samples.sort_by_key(|s| s.ts_ns);
        samples
    }

    fn interrupt(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child by its pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let _ = child.wait();
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        self.interrupt();
    }
}

/// `  1234.567890123: napi:napi_poll: napi poll on napi struct 0x… for device eth1 work 3 budget 64`
fn parse(line: &str) -> Option<Sample> {
    let (time, rest) = line.trim().split_once(": ")?;
    let (event, trace) = rest.split_once(": ")?;
    let (secs, nanos) = time.split_once('.')?;
    Some(Sample {
        ts_ns: secs.parse::<u64>().ok()? * 1_000_000_000 + nanos.parse::<u64>().ok()?,
        event: event.trim().to_string(),
        trace: trace.to_string(),
    })
}
