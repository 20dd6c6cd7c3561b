//! `perf record -e napi:napi_poll`, system-wide: every NAPI poll the kernel
//! made while it ran, by a tool nobody here wrote (ground truth for the
//! tracer's polls and their work).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One poll as perf saw it.
#[derive(Clone, Debug)]
pub struct Poll {
    /// CLOCK_MONOTONIC (`perf record -k CLOCK_MONOTONIC`), as the tracer's.
    pub ts_ns: u64,
    pub device: String,
    pub work: i64,
    pub budget: i64,
}

pub struct NapiPolls {
    child: Option<Child>,
    data: PathBuf,
}

impl NapiPolls {
    /// Starts recording; returns once perf is counting (it wrote its header).
    pub fn record(dir: &Path) -> NapiPolls {
        let data = dir.join("napi.perf");
        let child = Command::new("perf")
            .args([
                "record",
                "-q",
                "-e",
                "napi:napi_poll",
                "-a",
                "-k",
                "CLOCK_MONOTONIC",
                "-o",
            ])
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
        NapiPolls {
            child: Some(child),
            data,
        }
    }

    /// Stops perf (SIGINT, as Ctrl-C) and reads its polls back.
    pub fn finish(mut self) -> Vec<Poll> {
        self.interrupt();
        let out = Command::new("perf")
            .args(["script", "--ns", "-F", "time,trace", "-i"])
            .arg(&self.data)
            .output()
            .expect("perf script");
        assert!(
            out.status.success(),
            "perf script: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(parse)
            .collect()
    }

    fn interrupt(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: signalling our own child by its pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let _ = child.wait();
        }
    }
}

impl Drop for NapiPolls {
    fn drop(&mut self) {
        self.interrupt();
    }
}

/// `  1234.567890123: napi poll on napi struct 0xffff... for device eth1 work 3 budget 64`
fn parse(line: &str) -> Option<Poll> {
    let (time, trace) = line.trim().split_once(": ")?;
    let (secs, nanos) = time.split_once('.')?;
    let ts_ns = secs.parse::<u64>().ok()? * 1_000_000_000 + nanos.parse::<u64>().ok()?;
    let words: Vec<&str> = trace.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
    };
    Some(Poll {
        ts_ns,
        device: after("device")?.to_string(),
        work: after("work")?.parse().ok()?,
        budget: after("budget")?.parse().ok()?,
    })
}
