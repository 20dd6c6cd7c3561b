//! `perf record` of tracepoints, system-wide, read back with `perf script`:
//! what the kernel's own tracepoints said while it ran, by a tool nobody
//! here wrote (ground truth for the tracer's events and their times).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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
    control: File,
    ack: File,
}

impl Record {
    /// Starts recording `events`; returns once perf has said (on its ack
    /// fifo) that they are enabled, so every hit from then on is perf's.
    pub fn start(dir: &Path, events: &[&str]) -> Record {
        let data = dir.join("tracepoints.perf");
        let control = fifo(&dir.join("perf-control"));
        let ack = fifo(&dir.join("perf-ack"));
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
                // Disabled until told: writing the header and synthesizing
                // the tasks took over a second in an emulated guest, and a
                // poll the tracer saw in that time was not perf's.
                "-D",
                "-1",
                "--control",
            ])
            .arg(format!(
                "fifo:{},{}",
                dir.join("perf-control").display(),
                dir.join("perf-ack").display()
            ))
            .args(["-e", &events.join(",")])
            .arg("-o")
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("perf (scripts/install-deps.sh installs linux-perf)");
        let mut record = Record {
            child: Some(child),
            data,
            control,
            ack,
        };
        record.command("enable");
        record
    }

    /// Sends perf a control command and waits for its ack.
    fn command(&mut self, command: &str) {
        writeln!(self.control, "{command}").expect("perf's control fifo");
        let mut fd = libc::pollfd {
            fd: self.ack.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own, for the duration of the call.
        let ready = unsafe { libc::poll(&mut fd, 1, 60_000) };
        assert_eq!(ready, 1, "perf did not ack {command:?} within 60 s");
        let mut ack = [0u8; 16];
        let n = self.ack.read(&mut ack).expect("perf's ack fifo");
        // perf writes the C string, its NUL included.
        assert!(
            ack[..n].starts_with(b"ack\n"),
            "perf's answer to {command:?}: {:?}",
            String::from_utf8_lossy(&ack[..n])
        );
    }

    /// Stops perf (SIGINT, as Ctrl-C) and reads its samples back, in time order.
    pub fn finish(mut self) -> Vec<Sample> {
        self.command("disable");
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

/// A new fifo at `path`, opened read-write and non-blocking: perf opens its
/// ack end write-only, which fails while the fifo has no reader.
fn fifo(path: &Path) -> File {
    let _ = std::fs::remove_file(path);
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("a path");
    // SAFETY: a NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(name.as_ptr(), 0o600) },
        0,
        "mkfifo {path:?}"
    );
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .expect("the fifo opens")
}
