//! The sender's side: the window it may use, in whole segments of its own MSS
//! and the rest of one as far as it sends that, and how the receiver's
//! rounding (with its MSS estimate) compounds with it.

use super::kernel::round_down_to;
use super::limits::seq_gap;
use super::receiver::{HeldWindow, WindowClass};
use super::TimeWeighted;
use crate::event::{after_ack, segment_size, tcp_flags, tt_tcp_rcv, tt_window_adv};
use serde::Serialize;

/// Feng et al. §3.5.1, one step at a time: the receiver rounds its free space
/// down to its estimate of the sender's MSS, the sender rounds that down to
/// its own MSS, as far as it holds back the rest of a segment ([`WindowTails`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WindowChain {
    pub free_space: u64,
    pub advertised: u64,
    /// The rule that shaped `advertised`, when it is a window the receiver
    /// sent (see [`WindowChain::held`]).
    pub shaped_by: Option<WindowClass>,
    pub usable: u64,
    /// The segment `usable` counts in.
    pub sender_mss: u32,
    /// How the sender used windows with the rest of a segment (`usable`
    /// counts the rest in the share of them it sent).
    pub tails: WindowTails,
    /// `free_space − usable`, and as a fraction of the free space.
    pub compounded_loss_bytes: u64,
    pub compounded_loss_fraction: f64,
}

impl WindowChain {
    pub fn new(free_space: u64, receiver_mss: u32, sender_mss: u32) -> Self {
        let advertised = round_down_to(free_space, u64::from(receiver_mss));
        Self::from_advertised(
            free_space,
            advertised,
            None,
            sender_mss,
            WindowTails::default(),
        )
    }

    /// The chain of a window the receiver sent, as the kernel shaped it
    /// (rounded, aligned, capped or clamped): every value is on the wire.
    pub fn held(w: HeldWindow, sender_mss: u32, tails: WindowTails) -> Self {
        let advertised = u64::from(w.advertised);
        Self::from_advertised(w.free_space, advertised, Some(w.class), sender_mss, tails)
    }

    /// The share of the free space rounding and the header's clamp took:
    /// all the chain's loss where one of them shaped the window, but where it
    /// was the free space or the soft cap `rcv_ssthresh` (which grows with
    /// the transfer: a 200 KB connection's window ends far below its
    /// autotuned free space), only the sender's rounding of it.
    pub fn rounding_loss_fraction(&self) -> f64 {
        match self.shaped_by {
            None
            | Some(
                WindowClass::MssRounded | WindowClass::WscaleAligned | WindowClass::Clamped65535,
            ) => self.compounded_loss_fraction,
            Some(_) if self.advertised == 0 => 0.0,
            Some(_) => (self.advertised - self.usable) as f64 / self.advertised as f64,
        }
    }

    /// How `usable` follows from `advertised`, as the report says it: by
    /// the windows with a rest only where this one has one.
    pub fn usable_rule(&self) -> String {
        match whole_and_fillable(self.advertised, self.sender_mss) {
            (0, _) => "less than one of the sender's segments: nothing can be sent".into(),
            (whole, fillable) if whole == fillable => {
                "a whole number of the sender's segments".into()
            }
            _ => self.tails.describe(),
        }
    }

    fn from_advertised(
        free_space: u64,
        advertised: u64,
        shaped_by: Option<WindowClass>,
        sender_mss: u32,
        tails: WindowTails,
    ) -> Self {
        let usable = tails.usable(advertised, sender_mss);
        let lost = free_space.saturating_sub(usable);
        WindowChain {
            free_space,
            advertised,
            shaped_by,
            usable,
            sender_mss,
            tails,
            compounded_loss_bytes: lost,
            compounded_loss_fraction: if free_space == 0 {
                0.0
            } else {
                lost as f64 / free_space as f64
            },
        }
    }
}

/// How a sender used the windows that bound it (not cwnd) while data
/// waited, where they were not a whole number of its segments: counted at
/// the next ACK, by whether it had sent up to the window's edge.
/// `tcp_mss_split_point()` sends the rest of a segment at the edge inside a
/// skb of several segments where Nagle allows (TCP_NODELAY, or no small
/// segment in flight: `tcp_minshall_check()`), and holds it back otherwise;
/// a skb of one segment must fit whole (`tcp_snd_wnd_test()`). A window of
/// 22370 B (rcv_mss 4474) under an MSS of 8948 went out as 8948 + 8948 +
/// 4474 in 8855 of about 12000 data skbs of a 256 MiB transfer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WindowTails {
    /// Windows filled to the edge, the rest of a segment included.
    pub sent: u64,
    /// Windows left short of the edge by less than a segment.
    pub held: u64,
}

impl WindowTails {
    /// The share of such windows whose rest was sent: 0 where none was seen
    /// (whole segments, as Feng et al. have it).
    pub fn sent_share(&self) -> f64 {
        match self.sent + self.held {
            0 => 0.0,
            n => self.sent as f64 / n as f64,
        }
    }

    /// Between `whole` (a window's whole segments, or their mean) and
    /// `window` (the window where it holds a segment, or its mean): what
    /// the sender filled.
    pub fn as_sent(&self, whole: f64, window: f64) -> f64 {
        whole + self.sent_share() * (window - whole)
    }

    /// How the sender filled windows, as the report says it.
    pub fn describe(&self) -> String {
        match self.sent {
            0 => "in whole segments, as the sender sends them".into(),
            _ if self.held == 0 => "as the sender filled it, the rest of a segment included".into(),
            _ => format!(
                "as the sender filled it: whole segments, and the rest of one in {:.0}% of windows",
                self.sent_share() * 100.0
            ),
        }
    }

    /// What the sender filled of a window of `window` bytes, in bytes.
    pub fn usable(&self, window: u64, segment: u32) -> u64 {
        let (whole, fillable) = whole_and_fillable(window, segment);
        self.as_sent(whole as f64, fillable as f64).round() as u64
    }
}

/// The two ends [`WindowTails::as_sent`] spans for a window: its whole
/// segments, and the window itself where it holds one (none of a window
/// smaller than a segment is sent: `tcp_snd_wnd_test()` fits the first).
pub fn whole_and_fillable(window: u64, segment: u32) -> (u64, u64) {
    match round_down_to(window, u64::from(segment)) {
        0 => (0, 0),
        whole => (whole, window),
    }
}

/// What one ACK tells about the sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct AckView {
    /// The window in the ACK's header: `win_raw << snd_wscale`, the new `snd_wnd`.
    pub window: u32,
    /// Where the window ends: `snd_una + snd_wnd` once the ACK is processed.
    pub edge: u32,
    pub acked: u32,
    /// Data still unsent or unacknowledged once this ACK is processed.
    pub data_waiting: bool,
}

impl AckView {
    pub fn of(r: &tt_tcp_rcv) -> Self {
        let (una_after, window) = after_ack(r);
        AckView {
            window,
            edge: una_after.wrapping_add(window),
            acked: una_after.wrapping_sub(r.snd_una),
            data_waiting: seq_gap(r.snd_nxt, r.write_seq) > 0 || seq_gap(una_after, r.snd_nxt) > 0,
        }
    }
}

/// The sender's window over time, per ACK received with data waiting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SendWindow {
    pub acks: u64,
    /// Time-weighted means: the peer's window, `min(window, snd_cwnd ·
    /// segment)`, and that rounded down to whole segments (`SenderSide::segment`).
    pub mean_peer_window: f64,
    pub mean_usable: f64,
    pub mean_usable_whole_segments: f64,
    /// The usable window as the sender filled it: whole segments, and the
    /// rest of one in the share of windows it sent that (`window_tails`).
    pub mean_usable_as_sent: f64,
    pub window_tails: WindowTails,
    /// Over the same time: srtt, and what the usable window as sent allowed
    /// at it (each ACK's window over its srtt, bits/s): a mean of the
    /// ceiling, not the mean window over one srtt, which the rate
    /// acknowledged exceeds when windows and round trips vary together.
    /// None when no ACK came with an RTT known.
    pub mean_srtt_us: Option<f64>,
    pub mean_ceiling_bps: Option<f64>,
    /// The bytes acknowledged over the time the means cover, bits/s.
    pub acked_bps: f64,
    /// Share of the usable window the sender left unused: `1 −
    /// mean_usable_as_sent / mean_usable`.
    pub segment_rounding_loss_fraction: f64,
    pub bytes_acked: u64,
    pub min_srtt_us: u32,
}

/// What an ACK's windows are computed from: kept as these 12 bytes, not
/// as the windows, for an ACK held again later (`SenderSide::resume`).
#[derive(Clone, Copy, Debug)]
struct HeldAck {
    window: u32,
    snd_cwnd: u32,
    /// `SenderSide::segment` at the ACK.
    segment: u32,
}

impl HeldAck {
    /// The peer's window, the usable window (`min(window, snd_cwnd ·
    /// segment)`), its whole segments and what of it can be filled.
    fn values(&self) -> [u64; 4] {
        let window = u64::from(self.window);
        let usable = window.min(u64::from(self.snd_cwnd) * u64::from(self.segment));
        let (whole, fillable) = whole_and_fillable(usable, self.segment);
        [window, usable, whole, fillable]
    }
}

#[derive(Debug, Default)]
pub(super) struct SenderSide {
    pub mss_cache: u32,
    /// The largest segment of data sent (a GSO skb's `gso_size`); 0 before the first.
    largest_segment: u32,
    pub srtt_us: u32,
    pub min_srtt_us: u32,
    /// Seen with data queued or in flight at least once.
    sent_data: bool,
    pub data_waiting: bool,
    acks: u64,
    bytes_acked: u64,
    /// Acknowledged by ACKs that end time the means cover (not the first,
    /// nor one after a pause): the rate set beside their ceiling.
    bytes_acked_held: u64,
    /// peer window, usable, usable in whole segments, and fillable (the
    /// usable window where it holds a segment, else 0: see [`WindowTails::usable`]).
    means: TimeWeighted<4>,
    /// srtt, and the whole segments and the fillable window over it in
    /// bytes/s: while an RTT is known.
    ceiling: TimeWeighted<3>,
    /// An ACK that left nothing waiting: held again from the next write or
    /// data segment (`on_data`).
    resume: Option<HeldAck>,
    /// The edge of the latest ACK's window, where it bound with the rest
    /// of a segment and data waited: for the next ACK to count in `tails`.
    tail_edge: Option<u32>,
    pub tails: WindowTails,
}

impl SenderSide {
    /// An incoming segment at this socket, state before TCP processes it.
    pub fn on_tcp_rcv(&mut self, ts_ns: u64, r: &tt_tcp_rcv) -> Option<AckView> {
        if r.tcp_flags & tcp_flags::ACK == 0 {
            return None;
        }
        let view = AckView::of(r);
        self.count_tail(r);
        self.mss_cache = r.mss_cache;
        if r.srtt_us > 0 {
            self.srtt_us = r.srtt_us;
            self.min_srtt_us = if self.min_srtt_us == 0 {
                r.srtt_us
            } else {
                self.min_srtt_us.min(r.srtt_us)
            };
        }
        self.data_waiting = view.data_waiting;
        self.bytes_acked += u64::from(view.acked);
        if self.means.holding() {
            self.bytes_acked_held += u64::from(view.acked);
        }
        if view.data_waiting || view.acked > 0 {
            self.sent_data = true;
            self.acks += 1;
        }
        let held = HeldAck {
            window: view.window,
            snd_cwnd: r.snd_cwnd,
            segment: self.segment(),
        };
        let values @ [_, usable, whole, _] = held.values();
        let window_binds = usable == u64::from(view.window) && whole < usable;
        self.tail_edge = (view.data_waiting && window_binds).then_some(view.edge);
        if view.data_waiting {
            self.resume = None;
            self.hold(ts_ns, values);
        } else {
            // Nothing waiting: the busy time ends, as the kernel's chrono
            // has it, until data is written or leaves again.
            self.pause(ts_ns);
            self.resume = Some(held);
        }
        Some(view)
    }

    /// Whether the sender, with data unsent at `r`, had filled the previous
    /// ACK's window to its edge (see [`WindowTails`]).
    fn count_tail(&mut self, r: &tt_tcp_rcv) {
        let Some(edge) = self.tail_edge.take() else {
            return;
        };
        if seq_gap(r.snd_nxt, r.write_seq) == 0 {
            return;
        }
        match edge.wrapping_sub(r.snd_nxt) as i32 {
            0 => self.tails.sent += 1,
            short if short > 0 && (short as u32) < self.segment() => self.tails.held += 1,
            _ => {}
        }
    }

    /// Holds an ACK's windows (`HeldAck::values`) from `ts_ns`, and their
    /// ceiling at srtt (which only an ACK changes, so it is the ACK's own).
    fn hold(&mut self, ts_ns: u64, values: [u64; 4]) {
        let [_, _, whole, fillable] = values;
        self.means.set(ts_ns, values);
        match u64::from(self.srtt_us) {
            0 => self.ceiling.pause(ts_ns),
            srtt => self.ceiling.set(
                ts_ns,
                [srtt, whole * 1_000_000 / srtt, fillable * 1_000_000 / srtt],
            ),
        }
    }

    /// Sent more than it received (`received`, of our receiving side): the
    /// direction its report is about. iperf3 -R's data socket sends a 37 B
    /// cookie and receives the transfer: it is the data's receiver.
    pub fn sends_more(&self, received: u64) -> bool {
        self.sent_data && self.bytes_acked >= received
    }

    /// Data is written or leaves (a write, or a segment with data): after
    /// an ACK that had left nothing waiting, busy time begins again, under
    /// that ACK's window (the kernel's chrono starts at the write).
    /// One of our data segments (or GSO skbs) left.
    pub fn on_segment(&mut self, w: &tt_window_adv) {
        self.largest_segment = self.largest_segment.max(segment_size(w));
    }

    /// The segments a window must hold whole: `tcp_snd_wnd_test()` fits
    /// the next skb, up to one MSS. `mss_cache`, or the largest segment
    /// sent where smaller: mss-mismatch's 8948 B writes (MSG_EOR) under an
    /// MSS of 8960 went two to a window of 17896 B, where whole segments of
    /// the MSS said one.
    pub fn segment(&self) -> u32 {
        match (self.largest_segment, self.mss_cache) {
            (0, mss) | (mss, 0) => mss,
            (largest, mss) => largest.min(mss),
        }
    }

    pub fn on_data(&mut self, ts_ns: u64) {
        if let Some(ack) = self.resume.take() {
            self.hold(ts_ns, ack.values());
        }
    }

    /// A pause of sampling by time begins at `ts_ns`: the untraced time
    /// weighs in no mean.
    pub fn pause(&mut self, ts_ns: u64) {
        self.means.pause(ts_ns);
        self.ceiling.pause(ts_ns);
    }

    pub fn report(&mut self, last_ns: u64) -> Option<SendWindow> {
        self.means.pause(last_ns);
        self.ceiling.pause(last_ns);
        let [window, usable, whole, fillable] = self.means.means()?;
        let ceiling = self.ceiling.means();
        let as_sent = self.tails.as_sent(whole, fillable);
        Some(SendWindow {
            acks: self.acks,
            mean_peer_window: window,
            mean_usable: usable,
            mean_usable_whole_segments: whole,
            mean_usable_as_sent: as_sent,
            window_tails: self.tails,
            mean_srtt_us: ceiling.map(|[srtt, ..]| srtt),
            mean_ceiling_bps: ceiling
                .map(|[_, whole, fillable]| self.tails.as_sent(whole, fillable) * 8.0),
            acked_bps: self.bytes_acked_held as f64 * 8e9 / self.means.held_ns() as f64,
            segment_rounding_loss_fraction: if usable > 0.0 {
                1.0 - as_sent / usable
            } else {
                0.0
            },
            bytes_acked: self.bytes_acked,
            min_srtt_us: self.min_srtt_us,
        })
    }
}

/// The window the link could use (bandwidth × RTT) against what whole
/// segments allow (Figure 8), with the rest of one as far as the sender sends it.
pub fn mss_allowed_window(ideal_window: u64, sender_mss: u32, tails: WindowTails) -> u64 {
    tails.usable(ideal_window, sender_mss)
}

/// Bandwidth × RTT in bytes.
pub fn ideal_window(link_bps: u64, rtt_us: u32) -> u64 {
    link_bps * u64::from(rtt_us) / 8_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_soft_cap_is_no_rounding() {
        // A short connection's window: 2892769 B free, the soft cap offered
        // 186368, the sender uses 185344 of it (the many-connections run).
        let held = |class| HeldWindow {
            free_space: 2892769,
            advertised: 186368,
            class,
            held_ns: 1,
        };
        let capped = WindowChain::held(
            held(WindowClass::Unconstrained),
            1448,
            WindowTails::default(),
        );
        assert!(capped.compounded_loss_fraction > 0.9);
        assert_eq!(capped.rounding_loss_fraction(), 1024.0 / 186368.0);
        let clamped = WindowChain::held(
            held(WindowClass::Clamped65535),
            1448,
            WindowTails::default(),
        );
        assert_eq!(
            clamped.rounding_loss_fraction(),
            clamped.compounded_loss_fraction
        );
    }

    #[test]
    fn paper_example_exactly() {
        // 33000 free, receiver MSS 8948 → ⌊33000/8948⌋ = 3 → 26844 advertised;
        // sender MSS 8960 → ⌊26844/8960⌋ = 2 → 17920 usable (the paper's
        // "(int)(26844/8940)·8940" is a typo: 8940 would give 26820).
        let c = WindowChain::new(33000, 8948, 8960);
        assert_eq!((c.advertised, c.usable), (26844, 17920));
        // 33000 − 17920 = 15080 lost, 45.7 % ("nearly 50 %").
        assert_eq!(c.compounded_loss_bytes, 15080);
        assert!((c.compounded_loss_fraction - 15080.0 / 33000.0).abs() < 1e-12);
        // Receiver alone: 19 % less ("19% less than the available 33,000").
        assert_eq!(
            ((33000 - c.advertised) as f64 / 33000.0 * 100.0).round(),
            19.0
        );
        // Sender after receiver: 33 % less than advertised.
        assert_eq!(
            ((c.advertised - c.usable) as f64 / c.advertised as f64 * 100.0).round(),
            33.0
        );
        // Same MSS on both ends loses only the receiver's rounding.
        assert_eq!(WindowChain::new(33000, 8948, 8948).usable, 26844);
    }

    #[test]
    fn figure_8_ideal_vs_allowed() {
        // 8 Gb/s × 26 µs = 26000 B ideal ("26 KB"); ⌊26000/8960⌋·8960 = 17920 ("18 KB"), 31 % less.
        let ideal = ideal_window(8_000_000_000, 26);
        assert_eq!(ideal, 26000);
        let allowed = mss_allowed_window(ideal, 8960, WindowTails::default());
        assert_eq!(allowed, 17920);
        assert_eq!(
            ((ideal - allowed) as f64 / ideal as f64 * 100.0).round(),
            31.0
        );
    }

    #[test]
    fn ack_view_and_usable_window() {
        let r = tt_tcp_rcv {
            tcp_flags: tcp_flags::ACK,
            ack: 11000,
            snd_una: 1000,
            snd_nxt: 20000,
            write_seq: 20000,
            win_raw: 13422,
            snd_wscale: 1,
            snd_cwnd: 10,
            mss_cache: 8960,
            srtt_us: 100,
            ..Default::default()
        };
        // 13422 << 1 = 26844; 10000 B acked; 9000 B still in flight.
        assert_eq!(
            AckView::of(&r),
            AckView {
                window: 26844,
                edge: 11000 + 26844,
                acked: 10000,
                data_waiting: true
            }
        );
        let mut s = SenderSide::default();
        s.on_tcp_rcv(0, &r);
        // usable = min(26844, 10·8960) = 26844 → 2 whole segments = 17920 for 1 ms.
        let rep = s.report(1_000_000).unwrap();
        assert_eq!(
            (rep.mean_usable, rep.mean_usable_whole_segments),
            (26844.0, 17920.0)
        );
        assert!((rep.segment_rounding_loss_fraction - 8924.0 / 26844.0).abs() < 1e-12);
        // Everything acked and nothing unsent: no data waiting.
        let done = tt_tcp_rcv { ack: 20000, ..r };
        assert!(!AckView::of(&done).data_waiting);
        // Writes of 8948 B (MSG_EOR) under that MSS: the window holds three
        // of the segments sent, as tcp_snd_wnd_test() fits each skb.
        let mut s = SenderSide::default();
        s.on_segment(&tt_window_adv {
            len: 8948,
            gso_segs: 1,
            ..Default::default()
        });
        s.on_tcp_rcv(0, &r);
        assert_eq!(s.segment(), 8948);
        let rep = s.report(1_000_000).unwrap();
        assert_eq!(rep.mean_usable_whole_segments, 26844.0);
        // A GSO skb of full segments: the MSS again.
        s.on_segment(&tt_window_adv {
            len: 4 * 8960,
            gso_segs: 4,
            gso_size: 8960,
            ..Default::default()
        });
        assert_eq!(s.segment(), 8960);
    }

    /// rwnd-limited at MTU 9000 without scaling: windows of 22370 B
    /// (5 × rcv_mss 4474) under an MSS of 8948, 17896 B in whole segments.
    fn odd_window(ack: u32, snd_nxt: u32, snd_cwnd: u32) -> tt_tcp_rcv {
        tt_tcp_rcv {
            tcp_flags: tcp_flags::ACK,
            ack,
            snd_una: ack.wrapping_sub(8948),
            snd_nxt,
            write_seq: 1 << 30,
            win_raw: 22370,
            snd_cwnd,
            mss_cache: 8948,
            srtt_us: 40,
            ..Default::default()
        }
    }

    #[test]
    fn the_rest_of_a_segment_counts_as_far_as_the_sender_sends_it() {
        let mut s = SenderSide::default();
        // Filled to the edge (the next ACK finds snd_nxt there), then left
        // short by 4474 B: half the windows with their rest.
        s.on_tcp_rcv(0, &odd_window(100_000, 100_000, 30));
        s.on_tcp_rcv(1_000, &odd_window(110_000, 122_370, 30));
        s.on_tcp_rcv(2_000, &odd_window(120_000, 127_896, 30));
        assert_eq!(s.tails, WindowTails { sent: 1, held: 1 });
        let rep = s.report(3_000).unwrap();
        assert_eq!(rep.mean_usable_whole_segments, 17896.0);
        assert_eq!(rep.mean_usable_as_sent, 17896.0 + 0.5 * 4474.0);
        assert!((rep.segment_rounding_loss_fraction - 2237.0 / 22370.0).abs() < 1e-12);
        // 20133 B per 40 µs.
        assert!((rep.mean_ceiling_bps.unwrap() - 20133.0 * 8e6 / 40.0).abs() < 1.0);
        assert_eq!(s.tails.usable(22370, 8948), 20133);
        // No window holds a segment below one: nothing to fill.
        assert_eq!(s.tails.usable(8000, 8948), 0);
        let held = HeldWindow {
            free_space: 23000,
            advertised: 22370,
            class: WindowClass::MssRounded,
            held_ns: 1,
        };
        let every = WindowTails { sent: 3, held: 0 };
        assert_eq!(WindowChain::held(held, 8948, every).usable, 22370);
        assert_eq!(
            WindowChain::held(held, 8948, WindowTails::default()).usable,
            17896
        );
        // The chain speaks of the rest only where its window has one.
        let half = WindowTails { sent: 1, held: 1 };
        let rule = |advertised, mss| {
            WindowChain::held(HeldWindow { advertised, ..held }, mss, half).usable_rule()
        };
        assert!(rule(22370, 8948).contains("the rest of one in 50% of windows"));
        assert_eq!(rule(17896, 8948), "a whole number of the sender's segments");
        assert!(rule(8000, 8948).starts_with("less than one"));
    }

    #[test]
    fn only_odd_windows_that_bind_count() {
        let mut s = SenderSide::default();
        // cwnd 2 × 8948 below the window: cwnd binds, the window's rest is moot.
        s.on_tcp_rcv(0, &odd_window(100_000, 100_000, 2));
        s.on_tcp_rcv(1_000, &odd_window(110_000, 122_370, 2));
        // A whole number of segments (2 × 8948): nothing to send or hold.
        s.on_tcp_rcv(
            2_000,
            &tt_tcp_rcv {
                win_raw: 17896,
                ..odd_window(120_000, 120_000, 30)
            },
        );
        s.on_tcp_rcv(3_000, &odd_window(130_000, 137_896, 30));
        // Nothing unsent at the next ACK: the sender had nothing to fill with.
        s.on_tcp_rcv(
            4_000,
            &tt_tcp_rcv {
                write_seq: 150_000,
                ..odd_window(140_000, 150_000, 30)
            },
        );
        assert_eq!(s.tails, WindowTails::default());
        let rep = s.report(5_000).unwrap();
        assert_eq!(rep.mean_usable_as_sent, rep.mean_usable_whole_segments);
    }

    #[test]
    fn ceiling_is_each_acks_window_over_its_srtt_averaged() {
        // 1 ms of 10 × 1000 B at srtt 100 µs (800 Mb/s), then 1 ms of
        // 20 × 1000 B at srtt 400 µs (400 Mb/s): 600 Mb/s on average, where
        // the mean window over the mean srtt (15000 B / 250 µs) says 480.
        let ack = |ack: u32, snd_cwnd: u32, srtt_us: u32| tt_tcp_rcv {
            tcp_flags: tcp_flags::ACK,
            ack,
            snd_una: ack.saturating_sub(1000),
            snd_nxt: 100_000,
            write_seq: 100_000,
            win_raw: 65535,
            snd_cwnd,
            mss_cache: 1000,
            srtt_us,
            ..Default::default()
        };
        let mut s = SenderSide::default();
        s.on_tcp_rcv(0, &ack(1000, 10, 100));
        s.on_tcp_rcv(1_000_000, &ack(2000, 20, 400));
        let rep = s.report(2_000_000).unwrap();
        assert_eq!(rep.mean_usable_whole_segments, 15000.0);
        assert_eq!(rep.mean_srtt_us, Some(250.0));
        assert_eq!(rep.mean_ceiling_bps, Some(600e6));
        // 1000 B acknowledged in the 2 ms (the first ACK's were sent before).
        assert_eq!(rep.acked_bps, 4e6);
        let Some(super::super::Advice::ThroughputCeiling { message, .. }) =
            super::super::advice::send_ceiling(&rep)
        else {
            panic!()
        };
        // 15000 B over 200 µs: the srtt quoted gives the ceiling quoted.
        assert!(
            message.contains(
                "averaged 15000 B: at each ACK's srtt it allowed at most 600.0 Mb/s on average \
                 (as at srtt 200.0 µs"
            ),
            "{message}"
        );
        assert!(
            message.contains("and 4.0 Mb/s was acknowledged"),
            "{message}"
        );
    }
}
