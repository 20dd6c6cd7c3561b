//! The receiver's side: every advertised window recomputed with the kernel's
//! formulas, classified by the rule that shaped it, and checked against what
//! the kernel actually stored and sent.

use super::kernel::{
    select_window, select_window_backlog_bounded, PriorOffer, ReceiveState, Rule, Selection,
    SpaceRule, ICSK_ACK_NOMEM,
};
use super::sender::{whole_and_fillable, WindowTails};
use super::TimeWeighted;
use crate::event::{tcp_flags, tt_pkt, tt_window_adv};
use serde::Serialize;

/// Why an advertised window has the value it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowClass {
    /// `rcv_wscale == 0`: a whole number of `rcv_mss` below the free space:
    /// the free space (after the `rcv_ssthresh` cap) rounded down to
    /// `rcv_mss`, or an earlier such window kept while within one MSS of it.
    /// Bytes lost = free space − window. Part of that may be the soft cap
    /// `rcv_ssthresh`, which the kernel seeds from an MSS-rounded `rcv_wnd`
    /// (at the handshake and when `window_clamp` grows) and which a fast
    /// reader's buffer never lets grow again: counted apart as well.
    MssRounded,
    /// `rcv_wscale > 0`: free space aligned to `1 << wscale`.
    WscaleAligned,
    /// Zero by SWS avoidance (free below `rcv_mss` or `allowed/16` under pressure).
    SwsZero,
    /// Zero because the last skb could not be charged (`ICSK_ACK_NOMEM`).
    MemPressureZero,
    /// Never-shrink: what is left of an earlier offer, not a new one.
    NeverShrinkResidual,
    /// The 16-bit header cut the stored window to `65535 << wscale`.
    Clamped65535,
    /// Nothing lost to rounding: the window is all the free space, or a
    /// scaled window was cut to `rcv_ssthresh` (the soft cap, grown by the kernel).
    Unconstrained,
}

impl WindowClass {
    /// What the rule did to the `free` space to make the `window`, for a
    /// person (ALIGN rounds a scaled window up, unless less than half the
    /// buffer was free, where the space is rounded down first; a free space
    /// that is a multiple of the scale stays as it is).
    pub fn describe(self, free: u64, window: u64) -> &'static str {
        match self {
            WindowClass::MssRounded => {
                "the free space (at most rcv_ssthresh) rounded down to the receiver's MSS estimate"
            }
            WindowClass::WscaleAligned if window > free => "aligned up to the window scale",
            WindowClass::WscaleAligned if window == free => {
                "the free space, a multiple of the window scale"
            }
            WindowClass::WscaleAligned => "rounded down to the window scale",
            WindowClass::SwsZero => "zero by silly-window avoidance",
            WindowClass::MemPressureZero => "zero under memory pressure",
            WindowClass::NeverShrinkResidual => "what was left of an earlier offer",
            WindowClass::Clamped65535 => "cut to the header's 65535 << wscale",
            WindowClass::Unconstrained => "the free space, or the rcv_ssthresh cap",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClassCounts {
    pub mss_rounded: u64,
    pub wscale_aligned: u64,
    pub sws_zero: u64,
    pub mem_pressure_zero: u64,
    pub never_shrink_residual: u64,
    pub clamped_65535: u64,
    pub unconstrained: u64,
}

impl ClassCounts {
    fn count(&mut self, class: WindowClass) {
        *match class {
            WindowClass::MssRounded => &mut self.mss_rounded,
            WindowClass::WscaleAligned => &mut self.wscale_aligned,
            WindowClass::SwsZero => &mut self.sws_zero,
            WindowClass::MemPressureZero => &mut self.mem_pressure_zero,
            WindowClass::NeverShrinkResidual => &mut self.never_shrink_residual,
            WindowClass::Clamped65535 => &mut self.clamped_65535,
            WindowClass::Unconstrained => &mut self.unconstrained,
        } += 1;
    }
}

/// The window the receiver held longest without a change: a value the wire
/// carried, with the free space it was chosen from (the first of its run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HeldWindow {
    pub free_space: u64,
    pub advertised: u32,
    pub class: WindowClass,
    pub held_ns: u64,
}

impl HeldWindow {
    fn held_until(mut self, since_ns: u64, ts_ns: u64) -> HeldWindow {
        self.held_ns = ts_ns.saturating_sub(since_ns);
        self
    }
}

fn longer(a: Option<HeldWindow>, b: Option<HeldWindow>) -> Option<HeldWindow> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.held_ns > a.held_ns { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// One advertised window, explained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified {
    pub class: WindowClass,
    /// The recomputation, as the kernel would have done it.
    pub selection: Selection,
    /// What the peer reads (`ev.window`).
    pub header: u32,
    /// `max(free_space, 0)`.
    pub free: u64,
    /// Free space the window did not offer because of rounding or the header
    /// clamp (not SWS zeros or residuals, which are deliberate).
    pub lost: u64,
    /// The part of `lost` above the `rcv_ssthresh` cap (MSS-rounded windows).
    pub above_ssthresh: u64,
}

/// How a recorded window compares with the recomputation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Match,
    /// Zero stored and sent where the model offers a window: only the NOMEM
    /// path does that; its flag is usually cleared by `tcp_event_ack_sent()`
    /// before `net_dev_queue` fires, so it is inferred.
    NomemInferred,
    /// Matches once `sk_backlog.len` is taken as an upper bound (it grew on
    /// another CPU between the selection and `net_dev_queue`).
    BacklogGrew,
    /// The previous offer was not seen (first event of a socket traced mid-connection).
    Unverified,
    Mismatch,
}

fn classify(sel: &Selection) -> (WindowClass, u64) {
    let short_of = |base: i64, window: u32| (base.max(0) as u64).saturating_sub(u64::from(window));
    if sel.nomem {
        (WindowClass::MemPressureZero, 0)
    } else if sel.header < sel.stored {
        (
            WindowClass::Clamped65535,
            short_of(sel.free_space, sel.header),
        )
    } else if sel.never_shrink {
        (WindowClass::NeverShrinkResidual, 0)
    } else if sel.proposed == 0 {
        (WindowClass::SwsZero, 0)
    } else {
        let lost = short_of(sel.free_space, sel.stored);
        match sel.rule {
            // A window kept by the hysteresis is the MSS rounding too: it
            // stays while within one MSS of the space.
            Rule::MssRoundDown | Rule::KeptPrevious if lost > 0 => (WindowClass::MssRounded, lost),
            Rule::WscaleAlign if !sel.capped => (WindowClass::WscaleAligned, lost),
            _ => (WindowClass::Unconstrained, 0),
        }
    }
}

/// The classification the report counts, one window at a time: feed one
/// socket's `window_adv` events in order (to check each against the wire).
#[derive(Debug, Default)]
pub struct WindowClassifier {
    side: ReceiverSide,
}

impl WindowClassifier {
    /// None for SYNs (their window comes from `tcp_select_initial_window()`).
    pub fn classify(&mut self, w: &tt_window_adv) -> Option<Classified> {
        self.side.on_window_adv(0, w, 0)
    }
}

/// Window figures of one receiving socket, for the report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReceiveWindow {
    pub advertised_count: u64,
    pub mss_rounded_count: u64,
    /// Free space minus window, summed over MSS-rounded windows.
    pub mss_rounding_bytes_lost: u64,
    /// Of those, the bytes of free space above `rcv_ssthresh`: the soft cap,
    /// itself an earlier rounded window, kept them from the offer.
    pub mss_rounding_bytes_above_ssthresh: u64,
    pub wscale_rounding_bytes_lost: u64,
    /// Stored minus sent, summed over `clamped_65535` windows.
    pub clamp_bytes_lost: u64,
    pub classes: ClassCounts,
    /// Recorded window ≠ recomputed one; 0 on a healthy trace.
    pub model_mismatches: u64,
    pub model_unverified: u64,
    pub nomem_inferred: u64,
    /// Windows explained only with less backlog than recorded: `sk_backlog.len`
    /// grew on another CPU after the selection (counted apart from mismatches).
    pub backlog_grew: u64,
    /// Time-weighted means: free space, advertised window, what the sender
    /// fills of it (whole segments of its MSS, and the rest of one as far as
    /// it sends that: [`ReceiveWindow::filled_by`]), and the bytes lost to
    /// rounding/clamping.
    pub mean_free_space: f64,
    pub mean_advertised: f64,
    pub mean_sender_usable: f64,
    /// The means of the windows' whole segments and of the windows where
    /// they held one ([`whole_and_fillable`]), for [`ReceiveWindow::filled_by`].
    #[serde(skip)]
    mean_sender_ends: (f64, f64),
    pub mean_bytes_lost: f64,
    /// `tcp_full_space()` − what the window could offer: the data the
    /// reader keeps queued, or the space above the soft cap `rcv_ssthresh`
    /// (which the kernel grows only to the free space while a segment is
    /// queued: a buffer for a window must hold this too).
    pub mean_withheld: f64,
    /// `mean_bytes_lost / mean_free_space`.
    pub rounding_loss_fraction: f64,
    /// `1 − mean_sender_usable / mean_free_space`: receiver and sender rounding together.
    pub compounded_loss_fraction: f64,
    /// The non-zero window held longest (the report's chain starts from it).
    pub longest_held: Option<HeldWindow>,
    /// Time-weighted mean of the bytes received and not yet read by the
    /// application (`rcv_nxt − copied_seq` at each window, each
    /// `sk_data_ready` and each read).
    pub mean_unread: f64,
    /// The share of that time in which they were more than the window
    /// offered: the window waited on the reader, not on the buffer's size.
    pub unread_over_window_fraction: f64,
    /// The largest `sk_rcvbuf` seen: what autotuning (or SO_RCVBUF) gave.
    pub largest_rcvbuf: u32,
    /// What arrived in order (`rcv_nxt` advanced) over the time the means
    /// cover, in bits/s: the rate beside the window's ceiling.
    pub received_bps: f64,
}

/// Per-event loss history for the `mss_clamp` alert: the last `LOSS_EVENTS` windows.
const LOSS_EVENTS: usize = 32;

/// What a window's lost bytes went to, as the `mss_clamp` alert names it:
/// the cause of most of the recent loss, not the latest window's (one
/// window aligned to the scale, losing a byte, named the cause of a loss
/// the header's clamp made).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossCause {
    MssRounding,
    /// MSS rounding with free space above the soft cap `rcv_ssthresh`.
    MssRoundingUnderSsthresh,
    WscaleAlignment,
    HeaderClamp,
}

impl LossCause {
    const ALL: [LossCause; 4] = [
        LossCause::MssRounding,
        LossCause::MssRoundingUnderSsthresh,
        LossCause::WscaleAlignment,
        LossCause::HeaderClamp,
    ];

    fn of(class: WindowClass, above_ssthresh: u64) -> LossCause {
        match class {
            WindowClass::Clamped65535 => LossCause::HeaderClamp,
            WindowClass::WscaleAligned => LossCause::WscaleAlignment,
            _ if above_ssthresh > 0 => LossCause::MssRoundingUnderSsthresh,
            _ => LossCause::MssRounding,
        }
    }
}

/// A ring entry keeps its cause in the top two bits of its lost bytes; no
/// window passes 65535 << 14 < 2^30 B.
const CAUSE_SHIFT: u32 = 30;
const LOST_MASK: u32 = (1 << CAUSE_SHIFT) - 1;

/// In C order: what every window touches first, the ring (one entry a window) last.
#[derive(Debug)]
#[repr(C)]
pub(super) struct ReceiverSide {
    pub rcv_mss: u32,
    pub window_clamp: u32,
    pub rcv_nxt: u32,
    pub advmss: u16,
    pub rcv_wscale: u8,
    /// The scale the peer announced (`snd_wscale` of our `tcp_rcv` events):
    /// above 0, the connection scales its windows.
    pub peer_wscale: u8,
    /// The bytes of IP and TCP headers on the first data segment that
    /// reached this socket (at netif_receive_skb, `skb->len` less the
    /// payload; an ACK can be padded to the Ethernet minimum): what an MTU
    /// carries beside the MSS, timestamps included where the connection
    /// uses them. 0 before it.
    pub header_bytes: u16,
    pub space_rule: SpaceRule,
    prior: Option<PriorOffer>,
    /// The `rcv_wnd` of our SYN, the offer standing at the first ACK.
    syn_offer: Option<u32>,
    loss_next: usize,
    loss_filled: usize,
    loss_sum: u64,
    free_sum: u64,
    /// The newest entry of the ring, and how many in a row were the same
    /// (counted up to `LOSS_EVENTS + 1`): once every slot holds it, a steady
    /// window leaves the ring as it is.
    loss_last: (u32, u32),
    loss_repeats: usize,
    /// free space, advertised, sender-usable (whole segments), lost,
    /// withheld; bytes not yet read, and 1 while they exceed the window
    /// advertised; the window where it holds a segment (else 0).
    means: TimeWeighted<8>,
    /// Bytes `rcv_nxt` advanced by between windows the means hold across.
    bytes_received_held: u64,
    /// The window being held (since when), and the longest one held before it.
    held: Option<(HeldWindow, u64)>,
    longest_held: Option<HeldWindow>,
    report: ReceiveWindow,
    loss_ring: [(u32, u32); LOSS_EVENTS],
}

impl Default for ReceiverSide {
    fn default() -> Self {
        ReceiverSide {
            prior: None,
            syn_offer: None,
            rcv_mss: 0,
            advmss: 0,
            rcv_wscale: 0,
            peer_wscale: 0,
            header_bytes: 0,
            space_rule: SpaceRule::default(),
            window_clamp: 0,
            rcv_nxt: 0,
            report: ReceiveWindow::default(),
            means: TimeWeighted::default(),
            bytes_received_held: 0,
            held: None,
            longest_held: None,
            loss_ring: [(0, 0); LOSS_EVENTS],
            loss_next: 0,
            loss_filled: 0,
            loss_sum: 0,
            free_sum: 0,
            loss_last: (0, 0),
            loss_repeats: 0,
        }
    }
}

impl ReceiverSide {
    /// The first data segment reached this socket at netif_receive_skb.
    pub fn on_data_segment(&mut self, p: &tt_pkt) {
        let header = p.skb_len.saturating_sub(p.len);
        self.header_bytes = header.min(u32::from(u16::MAX)) as u16;
    }

    /// An outgoing segment of this socket. `sender_mss` is the size of the
    /// segments the peer's windows must hold whole, when the peer is traced
    /// (`SenderSide::segment`; else our estimate of its MSS). None for SYNs, whose
    /// window comes from `tcp_select_initial_window()` instead, and resets.
    pub fn on_window_adv(
        &mut self,
        ts_ns: u64,
        w: &tt_window_adv,
        sender_mss: u32,
    ) -> Option<Classified> {
        if w.tcp_flags & tcp_flags::SYN != 0 {
            self.prior = None;
            self.syn_offer = Some(w.rcv_wnd);
            return None;
        }
        // A reset offers nothing: the peer drops the connection. One that
        // answers a segment (`tcp_v4_send_reset()`) carries window 0 without
        // selecting any, which the model took for a mismatch.
        if w.tcp_flags & tcp_flags::RST != 0 {
            return None;
        }
        let state = ReceiveState {
            sk_rcvbuf: w.sk_rcvbuf,
            sk_rmem_alloc: w.sk_rmem_alloc,
            sk_backlog_len: w.sk_backlog_len,
            space_rule: SpaceRule::of(w.scaling_ratio, w.adv_win_scale),
            window_clamp: w.window_clamp,
            rcv_ssthresh: w.rcv_ssthresh,
            rcv_mss: w.rcv_mss,
            rcv_wscale: w.rcv_wscale,
            rcv_nxt: w.rcv_nxt,
            nomem: w.ack_pending & ICSK_ACK_NOMEM != 0,
            shrink_window: w.tcp_shrink_window != 0,
        };
        // After our SYN the socket keeps its initial offer with rcv_wup = rcv_nxt.
        let prior = self.prior.or(self.syn_offer.map(|rcv_wnd| PriorOffer {
            rcv_wnd,
            rcv_wup: w.rcv_nxt,
        }));
        let mut selection = select_window(&state, prior);
        let verdict = if selection.stored == w.rcv_wnd && selection.header == w.window {
            Verdict::Match
        } else if let Some(sel) = select_window_backlog_bounded(&state, prior, w.rcv_wnd)
            .filter(|sel| sel.header == w.window)
        {
            selection = sel;
            Verdict::BacklogGrew
        } else if w.window == 0 && w.rcv_wnd == 0 {
            selection = select_window(
                &ReceiveState {
                    nomem: true,
                    ..state
                },
                prior,
            );
            Verdict::NomemInferred
        } else if prior.is_none() {
            Verdict::Unverified
        } else {
            Verdict::Mismatch
        };
        self.prior = Some(PriorOffer {
            rcv_wnd: w.rcv_wnd,
            rcv_wup: w.rcv_wup,
        });
        self.syn_offer = None;
        self.rcv_mss = w.rcv_mss;
        self.advmss = w.advmss;
        self.rcv_wscale = w.rcv_wscale;
        self.space_rule = state.space_rule;
        self.window_clamp = w.window_clamp;
        // rcv_nxt only moves forward: a record that came late (a TX journey
        // a qdisc held past the collector's reordering) carries an older
        // one, and its step back, wrapped, counted 4 GB received: a
        // sender's report turned to the receive direction (the sweep's
        // rare "chain's 64800 B never advertised").
        let step = w.rcv_nxt.wrapping_sub(self.rcv_nxt);
        if !self.means.holding() {
            self.rcv_nxt = w.rcv_nxt;
        } else if step as i32 > 0 {
            self.bytes_received_held += u64::from(step);
            self.rcv_nxt = w.rcv_nxt;
        }

        let (class, lost) = classify(&selection);
        let free = selection.free_space.max(0) as u64;
        let above_ssthresh = match class {
            WindowClass::MssRounded => free.saturating_sub(selection.offerable.max(0) as u64),
            _ => 0,
        };
        let r = &mut self.report;
        r.advertised_count += 1;
        r.classes.count(class);
        match class {
            WindowClass::MssRounded => {
                r.mss_rounded_count += 1;
                r.mss_rounding_bytes_lost += lost;
                r.mss_rounding_bytes_above_ssthresh += above_ssthresh;
            }
            WindowClass::WscaleAligned => r.wscale_rounding_bytes_lost += lost,
            WindowClass::Clamped65535 => {
                r.clamp_bytes_lost += u64::from(selection.stored - selection.header)
            }
            _ => {}
        }
        match verdict {
            Verdict::Match => {}
            Verdict::NomemInferred => r.nomem_inferred += 1,
            Verdict::BacklogGrew => r.backlog_grew += 1,
            Verdict::Unverified => r.model_unverified += 1,
            Verdict::Mismatch => r.model_mismatches += 1,
        }
        let header = w.window;
        // The buffer's space the window could not offer: what the reader
        // left queued, or what lies above the soft cap rcv_ssthresh.
        let withheld = (selection.allowed_space - selection.offerable).max(0) as u64;
        let segment = if sender_mss > 0 {
            sender_mss
        } else {
            w.rcv_mss
        };
        let (usable, fillable) = whole_and_fillable(u64::from(header), segment);
        let unread = w.rcv_nxt.wrapping_sub(w.copied_seq);
        self.means.set(
            ts_ns,
            [
                free,
                u64::from(header),
                usable,
                lost,
                withheld,
                u64::from(unread),
                u64::from(unread > header),
                fillable,
            ],
        );
        self.report.largest_rcvbuf = self.report.largest_rcvbuf.max(w.sk_rcvbuf);
        self.push_loss(lost, free, LossCause::of(class, above_ssthresh));
        self.hold(ts_ns, header, free, class);
        Some(Classified {
            class,
            selection,
            header,
            free,
            lost,
            above_ssthresh,
        })
    }

    /// Data became readable (`sk_data_ready`) or a read returned
    /// (`sock_recv_length`): what waits unread, against the window
    /// advertised last (the ACK often follows only after the read). While
    /// no window is held (before the first, in a pause), nothing counts.
    pub fn on_queue(&mut self, ts_ns: u64, rcv_nxt: u32, copied_seq: u32, sk_rcvbuf: u32) {
        if self.set_unread(ts_ns, |_| u64::from(rcv_nxt.wrapping_sub(copied_seq))) {
            self.report.largest_rcvbuf = self.report.largest_rcvbuf.max(sk_rcvbuf);
        }
    }

    /// A read copied `len` bytes of one skb to the application: the
    /// kernel's `copied_seq` passes them then (`tcp_recvmsg_locked()`, skb
    /// by skb), not when the read returns, so a long read drains the queue
    /// as it goes.
    pub fn on_copied(&mut self, ts_ns: u64, len: u32) {
        self.set_unread(ts_ns, |unread| unread.saturating_sub(u64::from(len)));
    }

    /// The bytes unread from `ts_ns`, from those before, and whether they
    /// exceed the window advertised last; false (nothing set) while no
    /// window is held.
    fn set_unread(&mut self, ts_ns: u64, unread: impl FnOnce(u64) -> u64) -> bool {
        let Some(mut values) = self.means.current() else {
            return false;
        };
        values[5] = unread(values[5]);
        values[6] = u64::from(values[5] > values[1]);
        self.means.set(ts_ns, values);
        true
    }

    /// A window starts a run unless it is the one held; zero windows end runs.
    fn hold(&mut self, ts_ns: u64, header: u32, free: u64, class: WindowClass) {
        match self.held {
            Some((w, _)) if w.advertised == header => return,
            Some((w, since)) => {
                self.longest_held = longer(self.longest_held, Some(w.held_until(since, ts_ns)))
            }
            None => {}
        }
        self.held = (header > 0).then_some((
            HeldWindow {
                free_space: free,
                advertised: header,
                class,
                held_ns: 0,
            },
            ts_ns,
        ));
    }

    /// Starts loading what a window touches but the loss ring (one line of it).
    #[inline]
    pub fn prefetch(&self) {
        crate::flow::prefetch_span(self, &self.report);
    }

    fn push_loss(&mut self, lost: u64, free: u64, cause: LossCause) {
        let entry = (
            lost.min(u64::from(LOST_MASK)) as u32 | (cause as u32) << CAUSE_SHIFT,
            free.min(u64::from(u32::MAX)) as u32,
        );
        self.loss_repeats = if entry == self.loss_last {
            (self.loss_repeats + 1).min(LOSS_EVENTS + 1)
        } else {
            1
        };
        self.loss_last = entry;
        // Unless the `LOSS_EVENTS` before it, all the ring holds, were this entry.
        if self.loss_repeats <= LOSS_EVENTS {
            let old = std::mem::replace(&mut self.loss_ring[self.loss_next], entry);
            self.loss_sum =
                self.loss_sum + u64::from(entry.0 & LOST_MASK) - u64::from(old.0 & LOST_MASK);
            self.free_sum = self.free_sum + u64::from(entry.1) - u64::from(old.1);
        }
        self.loss_next = (self.loss_next + 1) % LOSS_EVENTS;
        self.loss_filled = (self.loss_filled + 1).min(LOSS_EVENTS);
    }

    /// Lost / free over the last `LOSS_EVENTS` windows, once that many were seen;
    /// and the mean free space and loss behind it.
    pub fn recent_loss(&self) -> Option<(f64, f64, f64)> {
        (self.loss_filled == LOSS_EVENTS && self.free_sum > 0).then(|| {
            let n = LOSS_EVENTS as f64;
            (
                self.loss_sum as f64 / self.free_sum as f64,
                self.free_sum as f64 / n,
                self.loss_sum as f64 / n,
            )
        })
    }

    /// What most of the loss of the last `LOSS_EVENTS` windows went to.
    pub fn recent_cause(&self) -> LossCause {
        let mut lost = [0u64; LossCause::ALL.len()];
        for &(entry, _) in &self.loss_ring {
            lost[(entry >> CAUSE_SHIFT) as usize] += u64::from(entry & LOST_MASK);
        }
        let most = (0..lost.len()).max_by_key(|&i| lost[i]).unwrap_or(0);
        LossCause::ALL[most]
    }

    /// A pause of sampling by time begins at `ts_ns`: the window held ends
    /// there, and the untraced time weighs in no mean.
    pub fn pause(&mut self, ts_ns: u64) {
        self.means.pause(ts_ns);
        if let Some((w, since)) = self.held.take() {
            self.longest_held = longer(self.longest_held, Some(w.held_until(since, ts_ns)));
        }
    }

    /// Bytes received in order while the means held (all of them, bar what
    /// came during pauses of sampling by time).
    pub fn bytes_received(&self) -> u64 {
        self.bytes_received_held
    }

    /// The counts so far (the means are left at 0: they need `report`).
    pub fn counts(&self) -> &ReceiveWindow {
        &self.report
    }

    pub fn report(&mut self, last_ns: u64) -> ReceiveWindow {
        self.means.pause(last_ns);
        let mut r = self.report.clone();
        let current = self.held.map(|(w, since)| w.held_until(since, last_ns));
        r.longest_held = longer(self.longest_held, current);
        if let Some([free, advertised, usable, lost, withheld, unread, over, fillable]) =
            self.means.means()
        {
            r.mean_unread = unread;
            r.unread_over_window_fraction = over;
            r.mean_free_space = free;
            r.mean_advertised = advertised;
            r.mean_sender_ends = (usable, fillable);
            r.mean_bytes_lost = lost;
            r.mean_withheld = withheld;
            r.received_bps = self.bytes_received_held as f64 * 8e9 / self.means.held_ns() as f64;
            if free > 0.0 {
                r.rounding_loss_fraction = lost / free;
            }
            r.filled_by(WindowTails::default());
        }
        r
    }
}

impl ReceiveWindow {
    /// The sender's use of the windows as `tails` says it filled them
    /// (whole segments until the sender is known).
    pub fn filled_by(&mut self, tails: WindowTails) {
        let (whole, fillable) = self.mean_sender_ends;
        self.mean_sender_usable = tails.as_sent(whole, fillable);
        if self.mean_free_space > 0.0 {
            self.compounded_loss_fraction =
                (1.0 - self.mean_sender_usable / self.mean_free_space).max(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The measured receiver (kernel.rs tests): rcvbuf 131072, ratio 234, full 119808.
    pub(crate) fn adv(
        rmem: u32,
        wscale: u8,
        rcv_nxt: u32,
        rcv_wnd: u32,
        window: u32,
    ) -> tt_window_adv {
        tt_window_adv {
            tcp_flags: tcp_flags::ACK,
            sk_rcvbuf: 131072,
            sk_rmem_alloc: rmem,
            scaling_ratio: 234,
            window_clamp: 119808,
            rcv_ssthresh: 119808,
            rcv_mss: 8948,
            rcv_wscale: wscale,
            rcv_nxt,
            rcv_wup: rcv_nxt,
            rcv_wnd,
            window,
            win_raw: (window >> wscale) as u16,
            ..Default::default()
        }
    }

    #[test]
    fn classes_of_the_measured_windows() {
        let mut rx = ReceiverSide::default();
        // First event: prior unknown, free 27001 → 26844 matches without it.
        let c = rx
            .on_window_adv(0, &adv(101532, 0, 1000, 26844, 26844), 8948)
            .unwrap();
        assert_eq!((c.class, c.lost), (WindowClass::MssRounded, 27001 - 26844));
        // Next: rcv_nxt advanced by 26844 (offer used up); free 2464 → SWS zero.
        let c = rx
            .on_window_adv(1, &adv(128376, 0, 27844, 0, 0), 8948)
            .unwrap();
        assert_eq!(c.class, WindowClass::SwsZero);
        // Reads free space: 92989 with ws 0 → rounddown = 10·8948 = 89480.
        let c = rx
            .on_window_adv(2, &adv(29340, 0, 27844, 89480, 65535), 8948)
            .unwrap();
        assert_eq!(c.class, WindowClass::Clamped65535);
        let r = rx.report(3);
        assert_eq!(r.advertised_count, 3);
        assert_eq!((r.mss_rounded_count, r.mss_rounding_bytes_lost), (1, 157));
        assert_eq!(r.clamp_bytes_lost, 89480 - 65535);
        assert_eq!(
            (r.model_mismatches, r.model_unverified, r.nomem_inferred),
            (0, 0, 0)
        );
        assert_eq!((r.classes.sws_zero, r.classes.clamped_65535), (1, 1));
        // A reset answering a late segment: window 0, selected by no rule.
        let rst = tt_window_adv {
            tcp_flags: tcp_flags::RST,
            window: 0,
            win_raw: 0,
            ..adv(29340, 0, 27844, 89480, 65535)
        };
        assert!(rx.on_window_adv(3, &rst, 8948).is_none());
        let r = rx.report(4);
        assert_eq!((r.advertised_count, r.model_mismatches), (3, 0));
    }

    /// Measured (mss-clamp scenario, SO_RCVBUF 33000 → sk_rcvbuf 66000, ratio
    /// 234): full space 66000 · 234 >> 8 = 60328, rcv_ssthresh stuck at 58920.
    fn mss_clamp_adv(rcv_ssthresh: u32, rcv_nxt: u32, rcv_wnd: u32) -> tt_window_adv {
        tt_window_adv {
            sk_rcvbuf: 66000,
            window_clamp: 60328,
            rcv_ssthresh,
            ..adv(0, 0, rcv_nxt, rcv_wnd, rcv_wnd)
        }
    }

    #[test]
    fn mss_rounding_after_the_ssthresh_cap() {
        let mut rx = ReceiverSide::default();
        // Empty queue: free 60328, cut to 58920, rounddown(58920, 8948) = 6 · 8948 = 53688.
        let c = rx
            .on_window_adv(0, &mss_clamp_adv(58920, 1000, 53688), 8948)
            .unwrap();
        assert_eq!(
            (c.class, c.lost, c.above_ssthresh, c.free),
            (WindowClass::MssRounded, 60328 - 53688, 60328 - 58920, 60328)
        );
        assert_eq!(c.selection.rule, Rule::MssRoundDown);
        // The offer used up, same state: 53688 lies in (58920 − 8948, 58920], kept.
        let c = rx
            .on_window_adv(1, &mss_clamp_adv(58920, 1000 + 53688, 53688), 8948)
            .unwrap();
        assert_eq!((c.class, c.lost), (WindowClass::MssRounded, 6640));
        assert_eq!(c.selection.rule, Rule::KeptPrevious);
        // rcv_ssthresh 44740 = 5 · 8948, the rounded window the kernel seeded
        // it from: the cap decides and all 15588 B are above it.
        let c = rx
            .on_window_adv(2, &mss_clamp_adv(44740, 1000 + 2 * 53688, 44740), 8948)
            .unwrap();
        assert_eq!(
            (c.class, c.lost, c.above_ssthresh),
            (WindowClass::MssRounded, 15588, 15588)
        );
        // The cap grown to the free space: the rounding alone, none above the cap.
        let c = rx
            .on_window_adv(
                3,
                &mss_clamp_adv(60328, 1000 + 2 * 53688 + 44740, 53688),
                8948,
            )
            .unwrap();
        assert_eq!((c.lost, c.above_ssthresh), (6640, 0));
        // 7264 B queued: free (66000 − 7264) · 234 >> 8 = 53688 = 6 · 8948, all offered.
        let queued = tt_window_adv {
            sk_rmem_alloc: 7264,
            ..mss_clamp_adv(60328, 1000 + 3 * 53688 + 44740, 53688)
        };
        let c = rx.on_window_adv(4, &queued, 8948).unwrap();
        assert_eq!(
            (c.class, c.lost, c.free),
            (WindowClass::Unconstrained, 0, 53688)
        );
        let r = rx.report(5);
        assert_eq!(
            (r.mss_rounded_count, r.mss_rounding_bytes_lost),
            (4, 2 * 6640 + 15588 + 6640)
        );
        assert_eq!(r.mss_rounding_bytes_above_ssthresh, 2 * 1408 + 15588);
        assert_eq!(r.model_mismatches, 0);
    }

    #[test]
    fn backlog_grown_after_the_selection_is_not_a_mismatch() {
        let mut rx = ReceiverSide::default();
        rx.on_window_adv(0, &mss_clamp_adv(58920, 1000, 53688), 8948);
        // 9780 B of backlog (one skb) read at net_dev_queue: free 51388, which
        // would give 5 · 8948 = 44740; 53688 stored means the backlog came later.
        let mut w = mss_clamp_adv(58920, 1000 + 53688, 53688);
        w.sk_backlog_len = 9780;
        let c = rx.on_window_adv(1, &w, 8948).unwrap();
        assert_eq!(
            (c.class, c.selection.rule),
            (WindowClass::MssRounded, Rule::KeptPrevious)
        );
        // A window no backlog ≤ 9780 explains (7 · 8948 > the 58920 cap) stays a mismatch.
        let mut w = mss_clamp_adv(58920, 1000 + 2 * 53688, 62636);
        w.sk_backlog_len = 9780;
        rx.on_window_adv(2, &w, 8948);
        let r = rx.report(3);
        assert_eq!((r.backlog_grew, r.model_mismatches), (1, 1));
    }

    #[test]
    fn residual_needs_the_previous_event() {
        let mut rx = ReceiverSide::default();
        // ws 1: offer 92990 at rcv_nxt 1000 (right edge 93990).
        let c = rx
            .on_window_adv(0, &adv(29340, 1, 1000, 92990, 92990), 8948)
            .unwrap();
        assert_eq!(c.class, WindowClass::WscaleAligned);
        // ALIGN(92989, 2): one byte above the free space, aligned up.
        assert_eq!((c.free, c.header), (92989, 92990));
        assert_eq!(
            c.class.describe(c.free, u64::from(c.header)),
            "aligned up to the window scale"
        );
        assert_eq!(
            c.class.describe(92990, 92990),
            "the free space, a multiple of the window scale"
        );
        assert_eq!(
            c.class.describe(92991, 92990),
            "rounded down to the window scale"
        );
        // 92159 B arrive unread: rcv_nxt 93159 → cur_win = 93990 − 93159 = 831;
        // free 2464 → proposal 0 → never shrink: ALIGN(831, 2) = 832 stored and sent.
        let c = rx
            .on_window_adv(1, &adv(128376, 1, 93159, 832, 832), 8948)
            .unwrap();
        assert_eq!(
            (c.class, c.selection.cur_win),
            (WindowClass::NeverShrinkResidual, Some(831))
        );
        // A recorder that claims 0 here while rcv_wnd stays 832 is a mismatch.
        let mut rx2 = ReceiverSide::default();
        rx2.on_window_adv(0, &adv(29340, 1, 1000, 92990, 92990), 8948);
        rx2.on_window_adv(1, &adv(128376, 1, 93159, 832, 0), 8948);
        assert_eq!(rx2.report(2).model_mismatches, 1);
    }

    #[test]
    fn nomem_flag_and_inference() {
        let mut rx = ReceiverSide::default();
        rx.on_window_adv(0, &adv(29340, 1, 1000, 92990, 92990), 8948);
        // NOMEM with the flag visible: zero even though 50000 B of offer remain.
        let mut w = adv(29340, 1, 43990, 0, 0);
        w.ack_pending = ICSK_ACK_NOMEM;
        let c = rx.on_window_adv(1, &w, 8948).unwrap();
        assert_eq!(c.class, WindowClass::MemPressureZero);
        // Flag already cleared (the usual case at net_dev_queue): inferred.
        let mut rx = ReceiverSide::default();
        rx.on_window_adv(0, &adv(29340, 1, 1000, 92990, 92990), 8948);
        let c = rx
            .on_window_adv(1, &adv(29340, 1, 43990, 0, 0), 8948)
            .unwrap();
        assert_eq!(c.class, WindowClass::MemPressureZero);
        let r = rx.report(2);
        assert_eq!(
            (
                r.nomem_inferred,
                r.model_mismatches,
                r.classes.mem_pressure_zero
            ),
            (1, 0, 1)
        );
    }

    #[test]
    fn syn_offer_is_the_first_prior() {
        let mut rx = ReceiverSide::default();
        let mut syn = adv(0, 0, 0, 62636, 62636);
        syn.tcp_flags = tcp_flags::SYN;
        assert!(rx.on_window_adv(0, &syn, 8948).is_none());
        // Third ACK: free 27001 proposes 26844 but 62636 stands: never shrink.
        let c = rx
            .on_window_adv(1, &adv(101532, 0, 5000, 62636, 62636), 8948)
            .unwrap();
        assert_eq!(
            (c.class, c.selection.cur_win),
            (WindowClass::NeverShrinkResidual, Some(62636))
        );
        assert_eq!(rx.report(2).model_unverified, 0);
    }

    #[test]
    fn the_loss_is_named_by_what_lost_most_of_it() {
        let mut rx = ReceiverSide::default();
        // The header's clamp cut 31 windows by 33722 B, then a window
        // aligned to the scale lost 1 B: the clamp is the cause.
        for _ in 0..31 {
            rx.push_loss(33722, 164792, LossCause::HeaderClamp);
        }
        rx.push_loss(1, 100001, LossCause::WscaleAlignment);
        assert_eq!(rx.recent_cause(), LossCause::HeaderClamp);
        assert_eq!(rx.loss_sum, 31 * 33722 + 1);
        // The largest loss a ring entry holds, and its cause, intact.
        for _ in 0..LOSS_EVENTS {
            rx.push_loss(
                u64::from(LOST_MASK) + 5,
                u64::MAX,
                LossCause::WscaleAlignment,
            );
        }
        assert_eq!(rx.recent_cause(), LossCause::WscaleAlignment);
        assert_eq!(rx.loss_sum, LOSS_EVENTS as u64 * u64::from(LOST_MASK));
    }

    #[test]
    fn steady_windows_leave_the_ring_as_every_window_would() {
        let mut rx = ReceiverSide::default();
        // Runs shorter and longer than the ring, then a change inside a full steady ring.
        let runs = [
            (5, (1, 10)),
            (40, (2, 20)),
            (31, (3, 30)),
            (70, (2, 20)),
            (1, (0, 0)),
        ];
        let mut pushed = Vec::new();
        for (n, (lost, free)) in runs {
            for _ in 0..n {
                rx.push_loss(lost, free, LossCause::MssRounding);
                pushed.push((lost as u32, free as u32));
                let last: Vec<_> = pushed.iter().rev().take(LOSS_EVENTS).collect();
                let sums = last
                    .iter()
                    .fold((0, 0), |(l, f), e| (l + u64::from(e.0), f + u64::from(e.1)));
                assert_eq!(
                    (rx.loss_sum, rx.free_sum),
                    sums,
                    "after {} windows",
                    pushed.len()
                );
                // The ring holds the last windows, newest just before `loss_next`.
                for (k, e) in last.iter().enumerate() {
                    assert_eq!(
                        rx.loss_ring[(rx.loss_next + LOSS_EVENTS - 1 - k) % LOSS_EVENTS],
                        **e
                    );
                }
            }
        }
    }

    #[test]
    fn loss_ring_and_means() {
        let mut rx = ReceiverSide::default();
        // 32 windows of free 27001 → 26844 (157 lost each), 1 µs apart, each offer
        // used up by the next (cur_win 0); from the second on the kernel keeps
        // 26844 as it lies in (27001 − 8948, 27001]: same window, same loss.
        for i in 0..32u64 {
            let c = rx
                .on_window_adv(
                    i * 1000,
                    &adv(101532, 0, 1000 + 26844 * i as u32, 26844, 26844),
                    8960,
                )
                .unwrap();
            assert_eq!(c.lost, 157);
        }
        let (fraction, free, lost) = rx.recent_loss().unwrap();
        assert_eq!((free, lost), (27001.0, 157.0));
        assert!((fraction - 157.0 / 27001.0).abs() < 1e-12);
        let r = rx.report(32_000);
        // Sender MSS 8960: ⌊26844/8960⌋·8960 = 17920 usable.
        assert_eq!(
            (r.mean_free_space, r.mean_advertised, r.mean_sender_usable),
            (27001.0, 26844.0, 17920.0)
        );
        assert!((r.compounded_loss_fraction - (1.0 - 17920.0 / 27001.0)).abs() < 1e-12);
        // A sender that filled 3 of 4 such windows to the edge (the rest of
        // a segment, 8924 B, included) used 17920 + 0.75 × 8924 of them.
        let mut filled = r.clone();
        filled.filled_by(WindowTails { sent: 3, held: 1 });
        assert_eq!(filled.mean_sender_usable, 17920.0 + 0.75 * 8924.0);
        assert!((filled.compounded_loss_fraction - (1.0 - 24613.0 / 27001.0)).abs() < 1e-12);
        // rcv_nxt advanced 31 × 26844 B between the windows the means hold
        // across (the first only starts them), over their 32 µs.
        assert_eq!(r.received_bps, 31.0 * 26844.0 * 8e9 / 32_000.0);
    }

    #[test]
    fn what_arrives_across_a_pause_is_no_rate() {
        let mut rx = ReceiverSide::default();
        rx.on_window_adv(0, &adv(101532, 0, 1000, 26844, 26844), 8960);
        rx.on_window_adv(1000, &adv(101532, 0, 2000, 26844, 26844), 8960);
        rx.pause(2000);
        // 1 MB arrived while nothing was traced: neither its bytes nor its time count.
        rx.on_window_adv(9000, &adv(101532, 0, 1_002_000, 26844, 26844), 8960);
        rx.on_window_adv(10_000, &adv(101532, 0, 1_003_000, 26844, 26844), 8960);
        let r = rx.report(11_000);
        assert_eq!(r.received_bps, 2000.0 * 8e9 / 4000.0);
    }
}
