//! Advice in numbers: the buffer, the throughput ceiling, the MTU.

use super::alerts::{beside_ceiling, bps, rate};
use super::kernel::SpaceRule;
use super::sender::{SendWindow, WindowTails};
use crate::export::table::duration;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MtuOption {
    pub mtu: u32,
    pub mss: u32,
    /// Whole segments of `mss` in the free space, and the bytes left over.
    pub segments: u32,
    pub lost_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Advice {
    /// The receive buffer whose window holds `segments` whole segments
    /// besides what the kernel keeps back (`withheld`, in window terms: data
    /// the reader kept queued, or space above the soft cap `rcv_ssthresh`,
    /// which the kernel grows only up to the free space with the segment
    /// being received queued, so a buffer sized for an empty window never
    /// offers that window; at least two segments): `sk_rcvbuf` is the inverse of
    /// `tcp_win_from_space()` at the measured `scaling_ratio` (6.7+) or the
    /// netns's `tcp_adv_win_scale` (before: `scaling_ratio` 0) for window +
    /// withheld;
    /// `setsockopt(SO_RCVBUF)` takes half of it (the kernel doubles the
    /// value); `tcp_rmem` takes `sk_rcvbuf` as is.
    ReceiveBuffer {
        /// What the window is sized for: "bandwidth_delay" (the link's
        /// rate × the min RTT), "sender_cwnd" (the sender's largest cwnd,
        /// `sender_cwnd` segments, while the receive window held it back) or
        /// "free_space" (one segment more than the mean free space held).
        target: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        sender_cwnd: Option<u32>,
        segments: u32,
        window: u64,
        withheld: u64,
        scaling_ratio: u8,
        #[serde(skip_serializing_if = "Option::is_none")]
        adv_win_scale: Option<i8>,
        sk_rcvbuf: u64,
        so_rcvbuf: u64,
        tcp_rmem: u64,
        /// The window exceeds 65535 but the connection has no window scaling.
        needs_window_scaling: bool,
        /// The window exceeds `65535 << rcv_wscale`, the ceiling of the scale
        /// chosen at the handshake: this ceiling, which only a buffer set
        /// before listen()/connect() raises.
        #[serde(skip_serializing_if = "Option::is_none")]
        handshake_ceiling: Option<u64>,
        /// The scale the handshake picks from `sk_rcvbuf` set before it:
        /// the least that takes `window` (the buffer is raised to it).
        window_scale: u8,
        /// The recording host's `net.core.rmem_max` where `so_rcvbuf` is
        /// above it: `setsockopt()` cuts SO_RCVBUF to it, so it must be
        /// raised first.
        #[serde(skip_serializing_if = "Option::is_none")]
        rmem_max_cut: Option<u64>,
        message: String,
    },
    /// The application left more unread than the window offered for
    /// `unread_over_window_fraction` of the time (`mean_unread` bytes on
    /// average): the window waited on its reads, and a larger buffer than
    /// `largest_rcvbuf` would postpone the zero windows, not end them.
    Reader {
        mean_unread: u64,
        unread_over_window_fraction: f64,
        largest_rcvbuf: u32,
        message: String,
    },
    /// What the window allows at the measured RTT: at a sender, each ACK's
    /// usable window over its srtt, averaged (`window` is the mean, and
    /// `srtt_us` the ACKs' srtt averaged harmonically by window and time, so
    /// that `window` over `srtt_us` is `ceiling_bps`), beside the rate
    /// acknowledged; at a receiver, its mean advertised window over the
    /// data's srtt, beside the rate that arrived in order.
    ThroughputCeiling {
        window: u64,
        srtt_us: u32,
        ceiling_bps: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        acked_bps: Option<f64>,
        message: String,
    },
    /// Neither end scales its windows and the header's 65535 B cut the
    /// window held longest from `free_space`: what scaling would offer.
    WindowScaling {
        free_space: u64,
        advertised: u32,
        message: String,
    },
    /// Segments under the MSS that Nagle's algorithm held until the ACK of
    /// the small segment before them (the `held_nagle` path): `segments` of
    /// the `sent` segments the writer's socket sent, `held_ns` in all
    /// (`wait_p50_ns` each, the median), over the socket's `duration_ns`.
    Nagle {
        segments: u64,
        sent: u64,
        held_ns: u64,
        wait_p50_ns: u64,
        duration_ns: u64,
        message: String,
    },
    /// MSS values (and the MTU they need) that fill the free space with little left over.
    Mtu {
        free_space: u64,
        current_mss: u32,
        current_lost_bytes: u64,
        options: Vec<MtuOption>,
        message: String,
    },
}

/// What the receive buffer advice sizes the window for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowTarget {
    /// The link's bandwidth × the min RTT.
    BandwidthDelay { window: u64 },
    /// The sender's largest cwnd (of `mss` segments) while the receive
    /// window held it back: a window that large lets the cwnd rule; at most
    /// 65535 B without window scaling (`window`).
    SenderCwnd { cwnd: u32, mss: u32, window: u64 },
    /// One segment more than the mean free space held.
    FreeSpace,
}

/// The largest window a header carries without window scaling.
pub const UNSCALED_WINDOW_MAX: u64 = 65535;

/// The whole segments of `mss` an unscaled window holds at most.
pub fn unscaled_segments(mss: u32) -> u32 {
    (UNSCALED_WINDOW_MAX / u64::from(mss.max(1))) as u32
}

impl WindowTarget {
    /// The `bandwidth_delay` window where the link's rate is known, else
    /// the sender's `cwnd` while the receive window held it back where given
    /// and more than the `free` space, up to 65535 B without
    /// `window_scaling`, else one segment more than the free space.
    pub fn of(
        bandwidth_delay: Option<u64>,
        free: u64,
        cwnd: Option<u32>,
        mss: u32,
        window_scaling: bool,
    ) -> WindowTarget {
        let largest = match window_scaling {
            true => UNSCALED_WINDOW_MAX << 14,
            false => u64::from(unscaled_segments(mss)) * u64::from(mss),
        };
        let cwnd_window = cwnd.map(|c| (c, (u64::from(c) * u64::from(mss)).min(largest)));
        match (bandwidth_delay, cwnd_window) {
            (Some(window), _) => WindowTarget::BandwidthDelay { window },
            (None, Some((cwnd, window))) if window > free => {
                WindowTarget::SenderCwnd { cwnd, mss, window }
            }
            _ => WindowTarget::FreeSpace,
        }
    }

    /// The window wanted, if not the free space's.
    pub fn window(self) -> Option<u64> {
        match self {
            WindowTarget::BandwidthDelay { window } | WindowTarget::SenderCwnd { window, .. } => {
                Some(window)
            }
            WindowTarget::FreeSpace => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            WindowTarget::BandwidthDelay { .. } => "bandwidth_delay",
            WindowTarget::SenderCwnd { .. } => "sender_cwnd",
            WindowTarget::FreeSpace => "free_space",
        }
    }

    fn words(self) -> String {
        match self {
            WindowTarget::BandwidthDelay { window } => {
                format!("for the link's bandwidth × delay ({window} B), ")
            }
            WindowTarget::SenderCwnd { cwnd, mss, window } => format!(
                "for the sender's congestion window while the receive window held it back \
                 ({cwnd} × {mss} B{}), ",
                match window < u64::from(cwnd) * u64::from(mss) {
                    true => ", as much of it as a window without scaling holds",
                    false => "",
                }
            ),
            WindowTarget::FreeSpace => {
                "for one segment more than the mean free space held, ".into()
            }
        }
    }
}

/// The receive buffer as it was, and what bounds the one advised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReceiverBuffer {
    /// How the kernel turns buffer into window.
    pub space_rule: SpaceRule,
    /// The scale the handshake chose.
    pub rcv_wscale: u8,
    /// The largest `sk_rcvbuf` the socket had.
    pub largest_rcvbuf: u32,
    /// The host's `net.core.rmem_max`, which `SO_RCVBUF` is cut to.
    pub rmem_max: Option<u64>,
}

pub fn receive_buffer(
    target: WindowTarget,
    segments: u32,
    mss: u32,
    withheld: u64,
    receiver: ReceiverBuffer,
) -> Option<Advice> {
    let ReceiverBuffer {
        space_rule,
        rcv_wscale,
        largest_rcvbuf,
        rmem_max,
    } = receiver;
    let window = u64::from(segments) * u64::from(mss);
    let wanted = window.saturating_add(withheld);
    let for_window = space_rule.space_for_window(wanted)?;
    let (scale, for_scale) = handshake_scale(window, space_rule)?;
    let sk_rcvbuf = for_window.max(for_scale);
    // Beyond what an i64 of buffer offers (a damaged recording's numbers),
    // or no more than the buffer already had (`largest_rcvbuf`): no advice.
    if (space_rule.win_from_space(sk_rcvbuf as i64) as u64) < wanted
        || sk_rcvbuf <= u64::from(largest_rcvbuf)
    {
        return None;
    }
    let so_rcvbuf = sk_rcvbuf.div_ceil(2);
    let needs_window_scaling = rcv_wscale == 0 && window > 65535;
    let ceiling = 65535u64 << rcv_wscale.min(14);
    let handshake_ceiling = (rcv_wscale > 0 && window > ceiling).then_some(ceiling);
    let scale_note = match (needs_window_scaling || handshake_ceiling.is_some(), scale) {
        (false, _) => String::new(),
        (true, s) => format!(
            "; set before listen()/connect(), window scaling on: the scale the handshake \
             picks from this buffer, {s} (this connection's: {rcv_wscale}), lets windows reach \
             65535 << {s} = {} B{}",
            65535u64 << s,
            match for_scale > for_window {
                true => format!(" (for the window alone, sk_rcvbuf {for_window} B)"),
                false => String::new(),
            }
        ),
    };
    let with_withheld = if withheld > 0 {
        format!(
            " beside the {withheld} B the kernel keeps back (data queued, the segment being \
             received, space above the soft cap rcv_ssthresh)"
        )
    } else {
        String::new()
    };
    // setsockopt() cuts SO_RCVBUF to rmem_max before doubling it: 262144
    // under Debian's default 212992 gives 425984, not 524288.
    let rmem_max_cut = rmem_max.filter(|&max| so_rcvbuf > max);
    let rmem_note = rmem_max_cut.map_or(String::new(), |max| {
        format!(
            "; above net.core.rmem_max, {max} on the recording host, setsockopt() cuts it to \
             that: raise rmem_max to {so_rcvbuf} first"
        )
    });
    let message = format!(
        "{}a window of {segments} × {mss} B = {window} B{with_withheld} needs sk_rcvbuf ≥ {sk_rcvbuf} B at {}: \
         SO_RCVBUF {so_rcvbuf} (doubled by the kernel{rmem_note}) or, for sockets that do not \
         set it, tcp_rmem's default and maximum ≥ {sk_rcvbuf}{scale_note}",
        target.words(),
        space_rule.describe(),
    );
    let (scaling_ratio, adv_win_scale) = match space_rule {
        SpaceRule::Ratio(ratio) => (ratio, None),
        SpaceRule::AdvWinScale(a) => (0, Some(a)),
    };
    Some(Advice::ReceiveBuffer {
        target: target.name(),
        sender_cwnd: match target {
            WindowTarget::SenderCwnd { cwnd, .. } => Some(cwnd),
            _ => None,
        },
        segments,
        window,
        withheld,
        scaling_ratio,
        adv_win_scale,
        sk_rcvbuf,
        so_rcvbuf,
        tcp_rmem: sk_rcvbuf,
        needs_window_scaling,
        handshake_ceiling,
        window_scale: scale,
        rmem_max_cut,
        message,
    })
}

/// The window scale a `window` needs, and the least `sk_rcvbuf` from which
/// the handshake picks it: `tcp_select_initial_window()` takes the ilog2 of
/// the full space (at the ratio of a socket no data has reached), minus 15,
/// where SO_RCVBUF is set; every window is at most `65535 << scale`.
fn handshake_scale(window: u64, space_rule: SpaceRule) -> Option<(u8, u64)> {
    let scale = (0..=14u8).find(|&s| 65535u64 << s >= window).unwrap_or(14);
    match scale {
        0 => Some((0, 0)),
        s => Some((
            s,
            space_rule.at_handshake().space_for_window(1 << (15 + s))?,
        )),
    }
}

/// The reader, not the buffer: see [`Advice::Reader`].
pub fn reader(mean_unread: f64, unread_over_window_fraction: f64, largest_rcvbuf: u32) -> Advice {
    let mean_unread = mean_unread.round() as u64;
    let message = format!(
        "the application left {mean_unread} B unread on average (received, not yet read) and \
         more than the window offered {:.0}% of the time: the window waited on its reads, \
         not on the buffer's size (its largest sk_rcvbuf: {largest_rcvbuf} B); a larger buffer \
         postpones zero windows, reading sooner or in larger reads ends them",
        unread_over_window_fraction * 100.0
    );
    Advice::Reader {
        mean_unread,
        unread_over_window_fraction,
        largest_rcvbuf,
        message,
    }
}

/// No window scaling held the window at the header's 65535 B: see [`Advice::WindowScaling`].
pub fn window_scaling(free_space: u64, advertised: u32) -> Advice {
    let message = format!(
        "no window scaling (both ends' scale 0: net.ipv4.tcp_window_scaling=0 on a host, or \
         receive buffers under 64 KiB set before listen()/connect()): the header's 65535 B cut \
         the window held longest to {advertised} B of {free_space} B free ({:.0}% lost); scaled, \
         the window takes the free space",
        (free_space.saturating_sub(u64::from(advertised))) as f64 * 100.0
            / free_space.max(1) as f64
    );
    Advice::WindowScaling {
        free_space,
        advertised,
        message,
    }
}

/// Nagle's algorithm held small writes: see [`Advice::Nagle`].
pub fn nagle(segments: u64, sent: u64, held_ns: u64, wait_p50_ns: u64, duration_ns: u64) -> Advice {
    let message = format!(
        "{segments} segments under the MSS ({:.0}% of the {sent} sent) waited {} each (p50) \
         for the ACK of the small segment before them, {} of the socket's {}: Nagle's \
         algorithm, against the peer's delayed ACKs; TCP_NODELAY on this socket, or each \
         message in one write (writev, or MSG_MORE on all its parts but the last), sends them \
         at once",
        segments as f64 * 100.0 / sent.max(1) as f64,
        duration(wait_p50_ns),
        duration(held_ns),
        duration(duration_ns)
    );
    Advice::Nagle {
        segments,
        sent,
        held_ns,
        wait_p50_ns,
        duration_ns,
        message,
    }
}

/// A receiver's: its mean advertised `window` over the data's srtt, and
/// what arrived in order meanwhile (`received_bps`, 0 when nothing did).
/// One srtt for the whole time: where the round trips were shorter while
/// the window was open (a stalled flow's ACKs wait on its reader), more
/// arrives than the mean window over it allows, and the message says so.
pub fn throughput_ceiling(window: u64, srtt_us: u32, received_bps: f64) -> Option<Advice> {
    let ceiling_bps = bps(window as f64, f64::from(srtt_us))?;
    let beyond = beside_ceiling(
        received_bps,
        ceiling_bps,
        " (more than that: the round trips were shorter than this srtt, the data's \
         sender's latest, while the window was open)",
    );
    let message = format!(
        "a {window} B window at srtt {} allows at most {}, and {} arrived in order{beyond}",
        duration(u64::from(srtt_us) * 1000),
        rate(ceiling_bps),
        rate(received_bps)
    );
    Some(Advice::ThroughputCeiling {
        window,
        srtt_us,
        ceiling_bps,
        acked_bps: Some(received_bps),
        message,
    })
}

/// A sender's, from its ACKs: what the usable window allowed at each one's
/// srtt, on average, and what was acknowledged in that time. The srtt
/// quoted is the one at which the mean window gives that ceiling: the ACKs'
/// srtt averaged harmonically, weighted by their windows and time (the
/// plain mean may be the kernel's 1 s seed of the first round trips, over
/// hundreds of times the others).
pub fn send_ceiling(send: &SendWindow) -> Option<Advice> {
    let window = send.mean_usable_as_sent.round() as u64;
    let ceiling_bps = send.mean_ceiling_bps.filter(|&c| c > 0.0)?;
    let srtt_us = (window as f64 * 8e6 / ceiling_bps).round() as u32;
    let acked_bps = send.acked_bps;
    let beyond = beside_ceiling(
        acked_bps,
        ceiling_bps,
        " (more than that: srtt, the kernel's smoothed estimate, ran above the round trips)",
    );
    let message = format!(
        "the usable window (the peer's window or cwnd, the smaller, {}) \
         averaged {window} B: at each ACK's srtt it allowed at most {} on average (as at \
         srtt {}, the ACKs' srtt averaged harmonically by window and time), and {} was \
         acknowledged{beyond}",
        send.window_tails.describe(),
        rate(ceiling_bps),
        duration(u64::from(srtt_us) * 1000),
        rate(acked_bps),
    );
    Some(Advice::ThroughputCeiling {
        window,
        srtt_us,
        ceiling_bps,
        acked_bps: Some(acked_bps),
        message,
    })
}

/// The bytes of IP and TCP headers an MTU carries beside the MSS.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Headers {
    /// As the data's segments carried them.
    Seen(u32),
    /// Assumed: IP and TCP headers and timestamps, Linux's default.
    WithTimestamps(u32),
}

impl Headers {
    fn bytes(self) -> u32 {
        match self {
            Headers::Seen(n) | Headers::WithTimestamps(n) => n,
        }
    }
}

/// For the window `free` offers (at most `window_max`, what an unscaled
/// header carries) and the current `mss`: the largest MSS giving k whole
/// segments, for the current k and the next three (`⌊window/k⌋`, leaving
/// `window mod k` < k bytes), as MTUs with `headers`. The receiver rounds
/// the free space down to whole segments; a window the header cut is not
/// rounded, and its rest past the last whole segment is lost only as far as
/// the sender holds it back (`tails`).
pub fn mtu_choices(
    free: u64,
    window_max: u64,
    mss: u32,
    headers: Headers,
    tails: WindowTails,
) -> Option<Advice> {
    let overhead = headers.bytes();
    let free_space = free.min(window_max);
    if mss == 0 || free_space < u64::from(mss) {
        return None;
    }
    let cut = free > window_max;
    // Of k segments of `m` in the window: its rest, or as much of it as
    // the sender left unsent.
    let lost = |m: u64| match cut {
        true => free_space - tails.usable(free_space, m as u32),
        false => free_space % m,
    };
    let current = free_space / u64::from(mss);
    let options: Vec<MtuOption> = (current..current + 4)
        .filter_map(|k| {
            let m = free_space / k;
            let mtu = m + u64::from(overhead);
            (m >= 536 && mtu <= 65535).then(|| MtuOption {
                mtu: mtu as u32,
                mss: m as u32,
                segments: k as u32,
                lost_bytes: lost(m),
            })
        })
        .collect();
    let rest = free_space % u64::from(mss);
    let current_lost_bytes = lost(u64::from(mss));
    let best = options.first()?;
    // More free than a header carries: say so, not that the ceiling was free.
    let held = match cut {
        true => format!("{free} B free, of which an unscaled window carries {free_space} B:"),
        false => format!("{free_space} B free hold"),
    };
    let mtu = match headers {
        Headers::Seen(n) => format!(
            "MTU {} with the {n} B of headers its segments carry",
            best.mtu
        ),
        Headers::WithTimestamps(_) => format!("MTU {} with timestamps", best.mtu),
    };
    let sent = match cut && tails.sent > 0 {
        true => format!(
            " (the sender sent the {rest} B past the last whole segment in {:.0}% of windows)",
            tails.sent_share() * 100.0
        ),
        false => String::new(),
    };
    let message = format!(
        "{held} {current} × {mss} B segments, {current_lost_bytes} B unused{sent}; an MSS of {} ({mtu}) would use all but {} B",
        best.mss, best.lost_bytes
    );
    Some(Advice::Mtu {
        free_space,
        current_mss: mss,
        current_lost_bytes,
        options,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MTU advice for an unscaled window, the sender's rests unseen.
    fn unscaled_mtus(free: u64, mss: u32, headers: Headers) -> Option<Advice> {
        mtu_choices(free, 65535, mss, headers, WindowTails::default())
    }

    /// A receiver of `space_rule` and scale, whose buffer never exceeded
    /// `largest_rcvbuf`, on a host whose rmem_max is not known.
    fn receiver(space_rule: SpaceRule, rcv_wscale: u8, largest_rcvbuf: u32) -> ReceiverBuffer {
        ReceiverBuffer {
            space_rule,
            rcv_wscale,
            largest_rcvbuf,
            rmem_max: None,
        }
    }

    #[test]
    fn buffer_for_whole_segments_before_scaling_ratio() {
        // 6.1, tcp_adv_win_scale 1: window = space - space/2 = ⌈space/2⌉, so
        // 4 × 8948 = 35792 B needs 71583 B (71582 would give 35791).
        let Some(Advice::ReceiveBuffer {
            sk_rcvbuf,
            so_rcvbuf,
            scaling_ratio,
            adv_win_scale,
            message,
            ..
        }) = receive_buffer(
            WindowTarget::FreeSpace,
            4,
            8948,
            0,
            receiver(SpaceRule::AdvWinScale(1), 0, 0),
        )
        else {
            panic!()
        };
        assert_eq!(
            (sk_rcvbuf, so_rcvbuf, scaling_ratio, adv_win_scale),
            (71583, 35792, 0, Some(1))
        );
        assert!(message.contains("at tcp_adv_win_scale 1:"), "{message}");
    }

    #[test]
    fn buffer_for_whole_segments() {
        // 4 × 8948 = 35792 B at ratio 234: ⌈35792·256/234⌉ = ⌈39157.6⌉ = 39158;
        // SpaceRule::Ratio(234).win_from_space(39158) = 9162972 >> 8 = 35792. SO_RCVBUF 19579.
        let Some(Advice::ReceiveBuffer {
            window,
            sk_rcvbuf,
            so_rcvbuf,
            needs_window_scaling,
            ..
        }) = receive_buffer(
            WindowTarget::FreeSpace,
            4,
            8948,
            0,
            receiver(SpaceRule::Ratio(234), 0, 0),
        )
        else {
            panic!()
        };
        assert_eq!(
            (window, sk_rcvbuf, so_rcvbuf, needs_window_scaling),
            (35792, 39158, 19579, false)
        );
        assert_eq!(SpaceRule::Ratio(234).win_from_space(39158), 35792);
        assert_eq!(SpaceRule::Ratio(234).win_from_space(39157), 35791);
        // 8 segments = 71584 > 65535 without a scale.
        let Some(Advice::ReceiveBuffer {
            needs_window_scaling,
            ..
        }) = receive_buffer(
            WindowTarget::FreeSpace,
            8,
            8948,
            0,
            receiver(SpaceRule::Ratio(234), 0, 0),
        )
        else {
            panic!()
        };
        assert!(needs_window_scaling);
        assert!(receive_buffer(
            WindowTarget::FreeSpace,
            4,
            8948,
            0,
            receiver(SpaceRule::Ratio(0), 0, 0),
        )
        .is_none());
    }

    /// The link's bandwidth × delay where known; else the sender's cwnd
    /// while the window held it back, where more than the free space; else
    /// one segment more than the free space.
    #[test]
    fn the_window_sized_for() {
        use WindowTarget::*;
        let of = WindowTarget::of;
        let bdp_window = BandwidthDelay { window: 900_000 };
        assert_eq!(of(Some(900_000), 29303, Some(186), 1448, true), bdp_window);
        let cwnd = of(None, 29303, Some(186), 1448, true);
        assert_eq!(cwnd.window(), Some(269_328));
        assert!(matches!(cwnd, SenderCwnd { cwnd: 186, .. }));
        // Without window scaling, the whole segments of it up to 65535 B.
        let unscaled = of(None, 29303, Some(186), 1448, false);
        assert_eq!(unscaled.window(), Some(45 * 1448));
        assert!(unscaled.words().contains("without scaling"));
        assert_eq!(of(None, 65160, Some(186), 1448, false), FreeSpace);
        assert_eq!(of(None, 300_000, Some(186), 1448, true), FreeSpace);
        assert_eq!(of(None, 29303, None, 1448, true), FreeSpace);
        assert_eq!(FreeSpace.window(), None);
    }

    /// wscale 2: windows stop at 65535 << 2 = 262140 B; 200 × 1448 = 289600 B
    /// is above, and needs scale 3: the handshake picks it from a full space
    /// of 2^18 at the ratio 128 of a socket no data reached, sk_rcvbuf
    /// 524288 (the window alone needs 316828 at the measured 234; the lab's
    /// 305924, SO_RCVBUF 152962, got scale 2 and windows of 262140 B).
    #[test]
    fn buffer_above_the_handshake_scale_names_it() {
        let Some(Advice::ReceiveBuffer {
            handshake_ceiling,
            window_scale,
            sk_rcvbuf,
            message,
            ..
        }) = receive_buffer(
            WindowTarget::FreeSpace,
            200,
            1448,
            0,
            receiver(SpaceRule::Ratio(234), 2, 0),
        )
        else {
            panic!()
        };
        assert_eq!(handshake_ceiling, Some(262140));
        assert_eq!((window_scale, sk_rcvbuf), (3, 524288));
        assert_eq!(SpaceRule::Ratio(128).win_from_space(524288), 1 << 18);
        assert!(message.contains("65535 << 3 = 524280 B"), "{message}");
        assert!(message.contains("this connection's: 2"), "{message}");
        // 100 × 1448 = 144800 B fits under it.
        let Some(Advice::ReceiveBuffer {
            handshake_ceiling, ..
        }) = receive_buffer(
            WindowTarget::FreeSpace,
            100,
            1448,
            0,
            receiver(SpaceRule::Ratio(234), 2, 0),
        )
        else {
            panic!()
        };
        assert_eq!(handshake_ceiling, None);
    }

    /// The rwnd-limited lab's advice, SO_RCVBUF 262144, on a host with
    /// Debian's default rmem_max: setsockopt() would cut it to 212992 (and
    /// the kernel double that to 425984, not 524288), so the advice says
    /// to raise rmem_max; on this VM (4194304) it needs not.
    #[test]
    fn buffer_above_rmem_max_says_to_raise_it() {
        let advise = |rmem_max| {
            let receiver = ReceiverBuffer {
                rmem_max,
                ..receiver(SpaceRule::Ratio(234), 2, 0)
            };
            let Some(Advice::ReceiveBuffer {
                so_rcvbuf,
                rmem_max_cut,
                message,
                ..
            }) = receive_buffer(WindowTarget::FreeSpace, 200, 1448, 0, receiver)
            else {
                panic!()
            };
            (so_rcvbuf, rmem_max_cut, message)
        };
        let (so_rcvbuf, cut, message) = advise(Some(212992));
        assert_eq!((so_rcvbuf, cut), (262144, Some(212992)));
        assert!(
            message.contains(
                "SO_RCVBUF 262144 (doubled by the kernel; above net.core.rmem_max, 212992 on the \
                 recording host, setsockopt() cuts it to that: raise rmem_max to 262144 first) \
                 or, for sockets that do not set it, tcp_rmem's default and maximum ≥ 524288"
            ),
            "{message}"
        );
        let (_, cut, message) = advise(Some(4194304));
        assert_eq!(cut, None);
        assert!(!message.contains("rmem_max"), "{message}");
        assert_eq!(advise(None).1, None);
    }

    #[test]
    fn ceiling() {
        // 26844 B per 100 µs = 2.147 Gb/s.
        let Some(Advice::ThroughputCeiling { ceiling_bps, .. }) =
            throughput_ceiling(26844, 100, 0.0)
        else {
            panic!()
        };
        assert_eq!(ceiling_bps, 26844.0 * 8.0 * 1e4);
        assert!(throughput_ceiling(26844, 0, 0.0).is_none());
        // The sws-stall lab over IPv6 at MTU 9000: 1893 B at the sender's
        // last srtt, 71.8 ms, allow 210.9 kb/s where 2.8 Mb/s arrived.
        let Some(Advice::ThroughputCeiling {
            acked_bps, message, ..
        }) = throughput_ceiling(1893, 71_800, 2.8e6)
        else {
            panic!()
        };
        assert_eq!(acked_bps, Some(2.8e6));
        assert!(
            message.contains("2.8 Mb/s arrived in order (more than that"),
            "{message}"
        );
        let Some(Advice::ThroughputCeiling { message, .. }) = throughput_ceiling(1893, 71_800, 2e5)
        else {
            panic!()
        };
        assert!(!message.contains("more than that"), "{message}");
    }

    #[test]
    fn mtus_for_the_paper_free_space() {
        // 33000 B free, MSS 8948: 3 segments, 6156 B unused. k = 3: ⌊33000/3⌋ = 11000
        // (MTU 11052 with 52 B of headers), 0 left; k = 4: 8250 (MTU 8302), 0 left;
        // k = 5: 6600, 0 left; k = 6: 5500, 0 left.
        let Some(Advice::Mtu {
            current_lost_bytes,
            options,
            ..
        }) = unscaled_mtus(33000, 8948, Headers::WithTimestamps(52))
        else {
            panic!()
        };
        assert_eq!(current_lost_bytes, 6156);
        let got: Vec<(u32, u32, u64)> = options
            .iter()
            .map(|o| (o.mtu, o.mss, o.lost_bytes))
            .collect();
        assert_eq!(
            got,
            [
                (11052, 11000, 0),
                (8302, 8250, 0),
                (6652, 6600, 0),
                (5552, 5500, 0)
            ]
        );
        // 27001 B: k = 4 → 6750, 1 B left (27001 − 27000).
        let Some(Advice::Mtu { options, .. }) =
            unscaled_mtus(27001, 8948, Headers::WithTimestamps(52))
        else {
            panic!()
        };
        assert_eq!((options[1].mss, options[1].lost_bytes), (6750, 1));
        assert!(unscaled_mtus(2464, 8948, Headers::WithTimestamps(52)).is_none());
        // 100164 B free, unscaled: the window holds 65535 B of them, and the
        // message says both (the healthy lab without scaling).
        let Some(Advice::Mtu {
            free_space,
            current_lost_bytes,
            message,
            ..
        }) = unscaled_mtus(100164, 8948, Headers::WithTimestamps(52))
        else {
            panic!()
        };
        assert_eq!((free_space, current_lost_bytes), (65535, 2899));
        assert!(
            message.starts_with("100164 B free, of which an unscaled window carries 65535 B: 7 × 8948 B segments, 2899 B unused"),
            "{message}"
        );
        assert!(message.contains("(MTU 9414 with timestamps)"), "{message}");
        // A sender that sent the 2899 B rest in 3 of 4 windows lost a
        // quarter of it; an MSS of 9362 leaves 1 B (65535 = 7 × 9362 + 1),
        // a quarter of which rounds to none.
        let tails = WindowTails { sent: 3, held: 1 };
        let Some(Advice::Mtu {
            current_lost_bytes,
            options,
            message,
            ..
        }) = mtu_choices(100164, 65535, 8948, Headers::WithTimestamps(52), tails)
        else {
            panic!()
        };
        assert_eq!((current_lost_bytes, options[0].lost_bytes), (725, 0));
        assert!(
            message.contains("725 B unused (the sender sent the 2899 B past the last whole segment in 75% of windows)"),
            "{message}"
        );
        // The receiver's rounding of a window the header did not cut is its own.
        let Some(Advice::Mtu {
            current_lost_bytes, ..
        }) = mtu_choices(33000, 65535, 8948, Headers::WithTimestamps(52), tails)
        else {
            panic!()
        };
        assert_eq!(current_lost_bytes, 6156);
    }

    /// Without timestamps (mss-mismatch: MSS 8960 at MTU 9000), the MTU is
    /// the MSS and the 40 B of headers the segments came with.
    #[test]
    fn mtus_with_the_headers_the_segments_carried() {
        let Some(Advice::Mtu {
            options, message, ..
        }) = unscaled_mtus(32850, 8960, Headers::Seen(40))
        else {
            panic!()
        };
        assert_eq!((options[0].mss, options[0].mtu), (10950, 10990));
        assert!(
            message.ends_with(
                "an MSS of 10950 (MTU 10990 with the 40 B of headers its segments carry) would use all but 0 B"
            ),
            "{message}"
        );
    }
}
