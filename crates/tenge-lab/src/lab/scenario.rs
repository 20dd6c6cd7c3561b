//! Named lab setups that reproduce one window behaviour each
//! (`tenge-trace lab --scenario NAME`).

use super::{LabConfig, Reader};
use anyhow::{anyhow, Error};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// Feng et al. 2003, section 3.5.1: MTU 9000 (MSS 8948 with timestamps),
    /// window scaling off, `SO_RCVBUF` 18000 (`sk_rcvbuf` 36000). Once data
    /// has raised `scaling_ratio` to 234 (8948-byte skbs in 9780 bytes of
    /// truesize), the free space of an empty buffer is 36000 · 234 >> 8 =
    /// 32906, the paper's "33000 bytes free", and without a scale
    /// `__tcp_select_window()` rounds it down to 26844 = 3 × 8948, the
    /// paper's advertised window: 18% of the buffer can never be offered.
    /// (The SYN-ACK, at the initial 50% ratio, offers rounddown(18000, 8948)
    /// = 17896.) The soft cap `rcv_ssthresh` starts at that offer and grows
    /// only while a segment arrives to a near-empty buffer, so from run to
    /// run the windows settle at 17896 or 26844 with the same free space:
    /// either way an MSS multiple, the rest of the space lost. Every window
    /// on the wire is an MSS multiple, except never-shrink residuals after
    /// sub-MSS segments (64 KiB writes end in a 2900-byte segment).
    MssClamp,
    /// The paper's MSS mismatch: mss-clamp without timestamps, and 8948-byte
    /// writes with TCP_NODELAY and MSG_EOR. The sender's MSS is 9000 − 40 =
    /// 8960, but no segment carries more than one write, so the receiver's
    /// estimate `rcv_mss` (the largest segment seen) is 8948: windows are
    /// rounded to 8948 multiples. The paper's compounding (26844 → 17920)
    /// needs segments of the sender's MSS, which would raise the estimate to
    /// 8960 (`tcp_measure_rcv_mss()`); these 8948-byte segments fill the
    /// windows whole, and the chain shows that the mismatch costs nothing
    /// beyond the receiver's rounding. While `rcv_ssthresh` stays low the
    /// hysteresis keeps the handshake's offer, rounddown(18000, 8960) = 17920.
    MssMismatch,
    /// Receiver-side silly window syndrome: window scaling off, `SO_RCVBUF`
    /// 65536, a slow reader (1 s without reads, then 1000 B every 50 ms). The
    /// window drops to 0, reopens only by one MSS at a time, and the sender
    /// sends zero-window probes (persist timer, 200 ms backoff).
    SwsStall,
    /// The control: MTU 9000, window scaling on, autotuned buffers, fast
    /// reader, sender paced at 1 Gbit/s (`SO_MAX_PACING_RATE`). No zero
    /// windows, windows not MSS-rounded, no rwnd-limited time. Unpaced, a
    /// sender on veth outruns the reader on a 2-core box and the window does
    /// hit zero now and then.
    Healthy,
    /// Fast link and fast reader but a small locked receive buffer (`SO_RCVBUF`
    /// 16384 at MTU 1500, window scaling on): 3-5 Gbit/s instead of 12, and
    /// 40-60 % of the sender's busy time is rwnd-limited (`tcpi_rwnd_limited`;
    /// the rest is the CPU, veth has no delay).
    RwndLimited,
    /// A `tbf` bottleneck of 200 Mbit/s on the sender's veth, cubic, large
    /// buffers: the network, not the receiver, limits the flow. Goodput is
    /// 200 Mbit/s x 1448 / 1514 (tbf counts Ethernet frames) = 191.3 Mbit/s;
    /// the tbf queue (up to 50 ms) fills, RTT grows to milliseconds, the
    /// sender is cwnd-limited with no rwnd-limited time.
    Bottleneck,
    /// A lossy path: 1 in 100 data skbs dropped at the receiver's interface
    /// (`drop_every`; a TSO skb, which veth hands over whole, is many
    /// segments), cubic, autotuned buffers. SACK recovery retransmits the
    /// holes, the receiver queues what follows them out of order, and the
    /// report's `retransmit` and `out_of_order` paths count what the
    /// kernel's `tcpi_total_retrans` and `tcpi_rcv_ooopack` do.
    Lossy,
}

impl Scenario {
    pub const ALL: [Scenario; 7] = [
        Scenario::MssClamp,
        Scenario::MssMismatch,
        Scenario::SwsStall,
        Scenario::Healthy,
        Scenario::RwndLimited,
        Scenario::Bottleneck,
        Scenario::Lossy,
    ];

    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::MssClamp => "mss-clamp",
            Scenario::MssMismatch => "mss-mismatch",
            Scenario::SwsStall => "sws-stall",
            Scenario::Healthy => "healthy",
            Scenario::RwndLimited => "rwnd-limited",
            Scenario::Bottleneck => "bottleneck",
            Scenario::Lossy => "lossy",
        }
    }

    /// One line for `--help` and reports.
    pub fn description(self) -> &'static str {
        match self {
            Scenario::MssClamp => {
                "MTU 9000, no window scaling, SO_RCVBUF 18000: ~33000 B free advertised as 26844 = 3 x 8948 or 17896 (SC'03 3.5.1)"
            }
            Scenario::MssMismatch => {
                "mss-clamp without timestamps, 8948-byte writes: sender MSS 8960, receiver estimate 8948, windows in 8948 multiples that the writes' segments fill whole"
            }
            Scenario::SwsStall => {
                "no window scaling, SO_RCVBUF 65536, slow reader: zero windows, one-MSS reopenings, zero-window probes"
            }
            Scenario::Healthy => {
                "window scaling, autotuned buffers, fast reader, 1 Gbit/s pacing: no window pathologies"
            }
            Scenario::RwndLimited => {
                "MTU 1500, SO_RCVBUF 16384, fast reader: the sender waits on the receive window"
            }
            Scenario::Bottleneck => {
                "tbf 200 Mbit/s on the sender's veth, cubic: the link limits, not the window"
            }
            Scenario::Lossy => {
                "1 in 100 data skbs dropped at the receiver, cubic: retransmits, SACK recovery, out-of-order queueing"
            }
        }
    }

    /// The lab configuration. Each finishes in a few seconds.
    pub fn config(self) -> LabConfig {
        let base = LabConfig::default();
        match self {
            Scenario::MssClamp => LabConfig {
                mtu: 9000,
                window_scaling: false,
                moderate_rcvbuf: false,
                rcvbuf: Some(18000),
                bytes: 64 << 20,
                ..base
            },
            Scenario::MssMismatch => LabConfig {
                timestamps: false,
                write_size: 8948,
                nodelay: true,
                eor: true,
                bytes: 16 << 20,
                ..Scenario::MssClamp.config()
            },
            Scenario::SwsStall => LabConfig {
                mtu: 9000,
                window_scaling: false,
                moderate_rcvbuf: false,
                rcvbuf: Some(65536),
                reader: Reader::slow_default(),
                bytes: 1 << 20,
                ..base
            },
            Scenario::Healthy => LabConfig {
                mtu: 9000,
                // Paced well under what the reader keeps up with on a loaded
                // 2-core host, so the receive buffer never fills.
                max_pacing_rate: Some(125_000_000),
                bytes: 128 << 20,
                ..base
            },
            Scenario::RwndLimited => LabConfig {
                rcvbuf: Some(16384),
                moderate_rcvbuf: false,
                bytes: 256 << 20,
                ..base
            },
            Scenario::Bottleneck => LabConfig {
                qdisc: Some("tbf rate 200mbit burst 64kb latency 50ms".into()),
                congestion: Some("cubic".into()),
                bytes: 64 << 20,
                ..base
            },
            Scenario::Lossy => LabConfig {
                drop_every: Some(100),
                congestion: Some("cubic".into()),
                // Fast on veth: enough for a few of the alerts' 200 ms windows.
                bytes: 1 << 30,
                ..base
            },
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = Error;

    fn from_str(name: &str) -> Result<Scenario, Error> {
        Scenario::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                let names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
                anyhow!("unknown scenario {name:?}; known: {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>().unwrap(), s);
            assert_eq!(
                serde_json::to_string(&s).unwrap(),
                format!("\"{}\"", s.name())
            );
            assert!(!s.description().is_empty());
        }
        assert!("nope".parse::<Scenario>().is_err());
    }

    /// The paper's arithmetic: ~33000 bytes free, rounded down to 3 segments.
    #[test]
    fn mss_clamp_offers_three_segments() {
        let cfg = Scenario::MssClamp.config();
        let mss = cfg.mtu - 20 - 20 - 12; // IPv4, TCP, timestamps
        assert_eq!(mss, 8948);
        let sk_rcvbuf = 2 * cfg.rcvbuf.unwrap(); // the kernel doubles SO_RCVBUF
        let free = (sk_rcvbuf * 234) >> 8; // tcp_win_from_space at scaling_ratio 234
        assert_eq!(free, 32906);
        assert_eq!(free / mss * mss, 26844);
        // The SYN-ACK, at the initial ratio of 128: rounddown(18000, 8948).
        assert_eq!(((sk_rcvbuf * 128) >> 8) / mss * mss, 17896);
        assert!(!cfg.window_scaling);
    }
}
