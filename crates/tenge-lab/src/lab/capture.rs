//! tcpdump inside a namespace and tshark to read what it wrote: the wire's
//! own record of every segment, windows included.

use super::netns::{exec_command, run};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Enough for Ethernet + IPv6 + a TCP header with options.
const SNAPLEN: &str = "128";
const SETTLE: Duration = Duration::from_millis(50);
/// Kernel ring size: a second of 64 KiB GSO frames at 20 Gbit/s, headers only.
const BUFFER_KIB: &str = "16384";

/// A running `tcpdump -w`. Stop it with [`Capture::stop`]; dropping it stops it too.
#[derive(Debug)]
pub struct Capture {
    child: Child,
    path: PathBuf,
    /// Collects tcpdump's stderr after "listening on" (the summary lines).
    stderr: Option<JoinHandle<Vec<String>>>,
}

/// tcpdump's closing summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureStats {
    pub captured: u64,
    pub dropped_by_kernel: u64,
}

impl Capture {
    /// Starts `tcpdump -i IFACE -w PATH -U --immediate-mode -s 128 FILTER` in `netns` and
    /// returns once it is capturing (it printed "listening on").
    pub fn start(netns: &str, iface: &str, bpf_filter: &str, path: &Path) -> Result<Capture> {
        let mut command = exec_command(netns, "tcpdump");
        command
            .args(["-i", iface, "-n", "-s", SNAPLEN, "-B", BUFFER_KIB])
            // Without immediate mode libpcap hands over packets per filled (or
            // 1 s old) ring block, and SIGINT loses a partly filled block.
            .args(["--immediate-mode", "-U", "-Z", "root", "-w"])
            .arg(path)
            .args(bpf_filter.split_whitespace());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawn {command:?}"))?;
        let stderr = child.stderr.take().expect("piped stderr");
        let (ready_tx, ready_rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut after_ready = Vec::new();
            let mut ready_tx = Some(ready_tx);
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                match &ready_tx {
                    Some(tx) if line.contains("listening on") => {
                        let _ = tx.send(Ok(()));
                        ready_tx = None;
                    }
                    Some(tx) => {
                        let _ = tx.send(Err(line));
                    }
                    None => after_ready.push(line),
                }
            }
            after_ready
        });
        let mut capture = Capture {
            child,
            path: path.to_path_buf(),
            stderr: Some(reader),
        };
        let mut early_lines = Vec::new();
        loop {
            match ready_rx.recv_timeout(READY_TIMEOUT) {
                Ok(Ok(())) => return Ok(capture),
                Ok(Err(line)) => early_lines.push(line),
                Err(e) => {
                    let _ = capture.finish();
                    bail!("tcpdump did not start ({e}): {}", early_lines.join(" / "));
                }
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SIGINT, wait for exit (tcpdump flushes the file), return its counts.
    pub fn stop(mut self) -> Result<CaptureStats> {
        self.finish()
    }

    fn finish(&mut self) -> Result<CaptureStats> {
        let Some(reader) = self.stderr.take() else {
            return Ok(CaptureStats::default());
        };
        // SIGINT makes libpcap drop frames still in the ring; give tcpdump a
        // moment to take the last packets of a transfer that just ended.
        std::thread::sleep(SETTLE);
        // `ip netns exec` execs tcpdump, so the child pid is tcpdump itself.
        // SAFETY: plain kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGINT) };
        let status = self.child.wait()?;
        let lines = reader.join().unwrap_or_default();
        let stats = parse_summary(&lines);
        if !status.success() && stats.is_none() {
            bail!("tcpdump exited with {status}: {}", lines.join(" / "));
        }
        Ok(stats.unwrap_or_default())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// "12 packets captured" / "0 packets dropped by kernel".
fn parse_summary(lines: &[String]) -> Option<CaptureStats> {
    let count = |suffix: &str| {
        lines.iter().find_map(|l| {
            l.strip_suffix(suffix)
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
    };
    Some(CaptureStats {
        captured: count(" packets captured")?,
        dropped_by_kernel: count(" packets dropped by kernel").unwrap_or(0),
    })
}

/// One TCP segment as captured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct WireSegment {
    /// Capture time, seconds since the epoch.
    pub ts: f64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    /// TCP payload bytes (from the IP length, so right even when truncated).
    pub len: u32,
    /// The 16-bit window field as sent.
    pub win_raw: u16,
    /// `win_raw << scale` when tshark knows the scale (it saw the handshake,
    /// or scaling is off); `None` otherwise.
    pub win_scaled: Option<u32>,
    pub flags: u16,
}

impl WireSegment {
    pub const FIN: u16 = 0x01;
    pub const SYN: u16 = 0x02;
    pub const RST: u16 = 0x04;
    pub const PSH: u16 = 0x08;
    pub const ACK: u16 = 0x10;

    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    /// The advertised window in bytes, `win_raw` when the scale is unknown.
    pub fn window(&self) -> u32 {
        self.win_scaled.unwrap_or(self.win_raw.into())
    }
}

const FIELDS: &[&str] = &[
    "frame.time_epoch",
    "ip.src",
    "ipv6.src",
    "tcp.srcport",
    "ip.dst",
    "ipv6.dst",
    "tcp.dstport",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.len",
    "tcp.window_size_value",
    "tcp.window_size",
    "tcp.window_size_scalefactor",
    "tcp.flags",
];

/// Every TCP segment of a pcap file, in capture order, via tshark.
pub fn read_segments(path: &Path) -> Result<Vec<WireSegment>> {
    read_segments_where(path, "tcp")
}

/// The TCP segments tshark's display filter `filter` keeps.
pub fn read_segments_where(path: &Path, filter: &str) -> Result<Vec<WireSegment>> {
    let mut command = Command::new("tshark");
    command.args(["-n", "-r"]).arg(path).args([
        "-Y",
        filter,
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=f",
    ]);
    for field in FIELDS {
        command.args(["-e", field]);
    }
    let output = run(&mut command)?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| parse_fields(l).with_context(|| format!("tshark line {l:?}")))
        .collect()
}

fn parse_fields(line: &str) -> Result<WireSegment> {
    let f: Vec<&str> = line.split('\t').collect();
    let [ts, ip4_src, ip6_src, sport, ip4_dst, ip6_dst, dport, seq, ack, len, win_raw, win, scale, flags] =
        f[..]
    else {
        bail!("{} fields, expected {}", f.len(), FIELDS.len());
    };
    let addr = |ip4: &str, ip6: &str, port: &str| -> Result<SocketAddr> {
        let ip: IpAddr = if ip4.is_empty() { ip6 } else { ip4 }.parse()?;
        Ok(SocketAddr::new(ip, port.parse()?))
    };
    // -1: scale unknown (handshake not captured); -2: no scaling; else the shift.
    let scale_known = scale.parse::<i32>().is_ok_and(|s| s != -1);
    Ok(WireSegment {
        ts: ts.parse()?,
        src: addr(ip4_src, ip6_src, sport)?,
        dst: addr(ip4_dst, ip6_dst, dport)?,
        seq: seq.parse()?,
        ack: ack.parse()?,
        len: len.parse()?,
        win_raw: win_raw.parse()?,
        win_scaled: if scale_known {
            Some(win.parse()?)
        } else {
            None
        },
        flags: u16::from_str_radix(flags.trim_start_matches("0x"), 16)?,
    })
}

/// Times at which `sender` sent a zero-window probe as `tcp_xmit_probe_skb()`
/// makes it: no payload, `seq` one below the last byte its peer acknowledged.
/// (A probe into a window smaller than the next segment is a sub-MSS data
/// segment instead, which this does not count.)
pub fn zero_window_probes(segments: &[WireSegment], sender: SocketAddr) -> Vec<f64> {
    let mut acked = None;
    let mut probes = Vec::new();
    for s in segments {
        if s.dst == sender && s.has(WireSegment::ACK) {
            acked = Some(s.ack);
        } else if s.src == sender && s.len == 0 && Some(s.seq.wrapping_add(1)) == acked {
            probes.push(s.ts);
        }
    }
    probes
}

/// Periods `(start, end)` in which `from` (the receiving end) advertised a
/// zero window: from its first zero-window segment until its next segment with
/// an open window. A period still open at the end of the capture ends at the
/// last captured segment. SYN and RST segments are ignored.
pub fn zero_window_periods(segments: &[WireSegment], from: SocketAddr) -> Vec<(f64, f64)> {
    window_below_periods(segments, from, 1)
}

/// Periods in which `from` advertised a window below `below` bytes (scaled
/// when the scale is known): from the first such segment until the next one
/// offering at least `below`. With `below` = one MSS these are the wire's view
/// of SWS stalls (a window too small for a full segment, or zero).
pub fn window_below_periods(
    segments: &[WireSegment],
    from: SocketAddr,
    below: u32,
) -> Vec<(f64, f64)> {
    let mut periods = Vec::new();
    let mut closed_since = None;
    for s in segments {
        if s.src != from || s.has(WireSegment::SYN) || s.has(WireSegment::RST) {
            continue;
        }
        match (closed_since, s.window() < below) {
            (None, true) => closed_since = Some(s.ts),
            (Some(start), false) => {
                periods.push((start, s.ts));
                closed_since = None;
            }
            _ => {}
        }
    }
    if let (Some(start), Some(last)) = (closed_since, segments.last()) {
        periods.push((start, last.ts));
    }
    periods
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tshark_fields() {
        let s = parse_fields(
            "1700000000.123456789\t198.18.0.2\t\t5201\t198.18.0.1\t\t40000\t100\t200\t0\t26844\t26844\t-2\t0x0010",
        )
        .unwrap();
        assert_eq!(s.src, "198.18.0.2:5201".parse().unwrap());
        assert_eq!(s.dst, "198.18.0.1:40000".parse().unwrap());
        assert_eq!((s.seq, s.ack, s.len), (100, 200, 0));
        assert_eq!((s.win_raw, s.win_scaled), (26844, Some(26844)));
        assert!(s.has(WireSegment::ACK) && !s.has(WireSegment::SYN));
        assert!((s.ts - 1_700_000_000.123_456_7).abs() < 1e-6);

        let unknown_scale =
            parse_fields("1.5\t\tfe80::1\t1\t\tfe80::2\t2\t1\t2\t3\t100\t100\t-1\t0x0018").unwrap();
        assert_eq!(unknown_scale.src, "[fe80::1]:1".parse().unwrap());
        assert_eq!(
            (unknown_scale.win_scaled, unknown_scale.window()),
            (None, 100)
        );
        assert!(parse_fields("1.0\t1.2.3.4").is_err());
    }

    fn seg(ts: f64, src: &str, win_raw: u16, flags: u16) -> WireSegment {
        WireSegment {
            ts,
            src: src.parse().unwrap(),
            dst: "10.0.0.9:9".parse().unwrap(),
            seq: 0,
            ack: 0,
            len: 0,
            win_raw,
            win_scaled: Some(win_raw.into()),
            flags,
        }
    }

    #[test]
    fn zero_window_periods_run_from_first_zero_to_reopening() {
        const R: &str = "10.0.0.2:5201";
        const S: &str = "10.0.0.1:40000";
        let ack = WireSegment::ACK;
        let segments = [
            seg(0.0, R, 0, WireSegment::SYN | ack), // handshake: ignored
            seg(1.0, R, 8948, ack),
            seg(2.0, R, 0, ack),
            seg(2.2, S, 0, ack), // the sender's window: not ours
            seg(2.5, R, 0, ack), // still closed
            seg(3.0, R, 8948, ack),
            seg(4.0, R, 0, ack),
            seg(4.5, R, 0, WireSegment::RST),
            seg(5.0, S, 100, ack),
        ];
        let periods = zero_window_periods(&segments, R.parse().unwrap());
        assert_eq!(periods, vec![(2.0, 3.0), (4.0, 5.0)]);
        assert!(zero_window_periods(&segments, "10.0.0.3:1".parse().unwrap()).is_empty());
    }

    #[test]
    fn probes_are_empty_segments_one_below_the_acked_byte() {
        let (s, r) = ("10.0.0.1:40000", "10.0.0.2:5201");
        let with = |mut w: WireSegment, dst: &str, seq: u32, ack: u32, len: u32| {
            w.dst = dst.parse().unwrap();
            (w.seq, w.ack, w.len) = (seq, ack, len);
            w
        };
        let ack = WireSegment::ACK;
        let segments = [
            with(seg(1.0, r, 0, ack), s, 7, 1001, 0), // window closes at 1001
            with(seg(1.2, s, 0, ack), r, 1000, 7, 0), // probe
            with(seg(1.2, r, 0, ack), s, 7, 1001, 0), // its answer
            with(seg(1.6, s, 0, ack), r, 1000, 7, 0), // probe
            with(seg(1.7, s, 0, ack), r, 1001, 7, 0), // plain ACK, not a probe
            with(seg(1.8, s, 0, ack), r, 1001, 7, 500), // data
        ];
        assert_eq!(
            zero_window_probes(&segments, s.parse().unwrap()),
            vec![1.2, 1.6]
        );
    }

    #[test]
    fn summary_counts() {
        let lines = [
            "12 packets captured",
            "14 packets received by filter",
            "1 packets dropped by kernel",
        ]
        .map(String::from);
        assert_eq!(
            parse_summary(&lines),
            Some(CaptureStats {
                captured: 12,
                dropped_by_kernel: 1
            })
        );
        assert_eq!(parse_summary(&[]), None);
    }
}
