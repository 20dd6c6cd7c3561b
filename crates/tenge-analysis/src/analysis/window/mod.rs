//! Window analyses (Feng et al. SC'03 §3.5.1, on Linux 6.18): why a flow's
//! window is smaller than its buffer, and what that costs.
//!
//! - [`kernel`]: `__tcp_select_window()` / `tcp_select_window()` re-run on the
//!   state each `window_adv` event recorded.
//! - [`receiver`]: every advertised window classified (MSS rounding, wscale
//!   alignment, SWS zero, NOMEM zero, never-shrink residual, 65535 clamp) and
//!   checked against what the kernel stored.
//! - [`sender`]: the usable window as the sender fills it (whole segments, and
//!   the rest of one as far as it sends that), and the paper's compounded
//!   loss when the receiver's MSS estimate differs.
//! - [`stalls`]: SWS stall episodes with their probes and sub-MSS segments.
//! - [`limits`]: rwnd/cwnd/sndbuf/app-limited time, against the kernel's chrono.
//! - [`advice`]: buffer sizes, throughput ceilings and MTUs, in numbers.
//!
//! [`WindowAnalyzer`] runs all of them incrementally: `push` every event (a
//! recording or a live stream), get alerts as episodes start, `finish` for the
//! report. The per-event path does not allocate or format.

pub mod advice;
pub mod alerts;
pub mod kernel;
pub mod limits;
pub mod receiver;
pub mod sender;
pub mod stalls;

pub use advice::{Advice, MtuOption};
pub use alerts::{ActiveAlerts, Alert, AlertFigures, AlertKind, Alerts};
pub use limits::{KernelChrono, KernelDifference, LimitFractions, LimitTimes, LimitsReport};
pub use receiver::{ClassCounts, Classified, ReceiveWindow, WindowClass, WindowClassifier};
pub use sender::{SendWindow, WindowChain, WindowTails};
pub use stalls::{StallSide, SwsStall};

use super::pauses::{self, Pauses};
use crate::event::{addr_text, Body, Event};
use crate::export::table::duration;
use crate::flow::{place, prefetch_span, FastMap};
use crate::task::{SocketTasks, Task};
use alerts::{achieved_text, bps, rate, slow_window_text, Episode, RateMarks, Turn};
use kernel::{round_down_to, Rule};
use limits::{estimate_hz, ChronoSample, LimitTracker, SenderState};
use receiver::{LossCause, ReceiverSide};
use sender::SenderSide;
use serde::Serialize;
use stalls::{StallDetector, Transition};
use std::net::SocketAddr;

/// The limit alerts, in the order of `limit_episodes` and the recent shares.
const LIMIT_KINDS: [AlertKind; 3] = [
    AlertKind::RwndLimited,
    AlertKind::CwndLimited,
    AlertKind::SndbufLimited,
];

/// A sender's rwnd-limited share of its busy time (the report's) and its
/// largest cwnd meanwhile.
fn rwnd_limited(limits: &LimitTracker, hz: Option<u32>) -> (f64, u32) {
    (limits.report(hz).rwnd, limits.rwnd_limited_cwnd)
}

/// The size in bytes of what a limit alert is about: the peer's window the
/// sender waited on, the congestion window or the send buffer.
/// `rwnd_usable`: the peer's window as the sender fills it ([`WindowTails`]).
fn limited_bytes(kind: AlertKind, s: &SenderState, rwnd_usable: u64) -> u64 {
    match kind {
        AlertKind::RwndLimited => rwnd_usable,
        AlertKind::CwndLimited => u64::from(s.snd_cwnd) * u64::from(s.mss_cache),
        _ => u64::from(s.sk_sndbuf),
    }
}

/// [`limited_bytes`] as an alert names it.
fn limited_text(kind: AlertKind, s: &SenderState, held_wnd: u32, rwnd_usable: u64) -> String {
    match kind {
        // Where the sender leaves a rest of a segment unsent often enough
        // to matter (1%).
        AlertKind::RwndLimited if rwnd_usable * 100 < u64::from(held_wnd) * 99 => {
            format!("peer window {held_wnd} B, {rwnd_usable} B of it as the sender fills windows")
        }
        AlertKind::RwndLimited if held_wnd == 0 => "peer window 0 B, shut (zero window)".into(),
        AlertKind::RwndLimited => format!("peer window {held_wnd} B"),
        AlertKind::CwndLimited => format!("cwnd {} × {} B", s.snd_cwnd, s.mss_cache),
        _ => format!("send buffer sk_sndbuf {} B", s.sk_sndbuf),
    }
}

/// `TCP_CLOSE` in `inet_sock_set_state`'s `newstate`.
const TCP_CLOSE: u8 = 7;

/// `TCPOLEN_TSTAMP_ALIGNED`: what timestamps add to every segment's header.
const TIMESTAMP_OPTION_BYTES: u32 = 12;

/// A limit binds when the rate it allows at the measured RTT is at most this
/// many times the rate acknowledged: a window that allows 500 Gb/s on a
/// 16 Gb/s flow limits nothing.
pub const BIND_MARGIN: f64 = 2.0;

/// Tuning of alerts and of what the report can know only from outside.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowConfig {
    /// Percentage: rounding loss of free space (`mss_clamp`), or share of the
    /// recent window spent limited (`*_limited`), that starts an episode. An
    /// episode ends when the figure stays below half of it `min_duration_ns`.
    pub threshold_pct: f64,
    /// A stall is reported once it lasts this long; limit alerts need this
    /// much history; an episode ends once its figure stayed low this long.
    pub min_duration_ns: u64,
    /// The span of "recent" for limit alerts.
    pub limit_window_ns: u64,
    /// The link rate, for the ideal window (bandwidth × RTT). None: unknown.
    pub link_bps: Option<u64>,
    /// The kernel's `HZ`. None: estimated from the jiffies the trace carries.
    pub jiffies_hz: Option<u32>,
    /// The recording keeps 1 in this many blocks of sequence space (0 and
    /// 1: every packet; set by [`Analysis`](crate::analysis::Analysis) from
    /// its paths' sampling). A window seen then stands until the next kept
    /// one, however long the unseen ones between held: the time-weighted
    /// windows are not what the socket had, and no advice rests on them.
    pub byte_sample_every: u32,
    /// The host's `net.core.rmem_max`, which cuts `SO_RCVBUF`. None: unknown.
    pub rmem_max: Option<u64>,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            threshold_pct: 20.0,
            min_duration_ns: 100_000_000,
            limit_window_ns: 200_000_000,
            link_bps: None,
            jiffies_hz: None,
            byte_sample_every: 1,
            rmem_max: None,
        }
    }
}

/// Time-weighted means of `N` values, each held until the next `set`.
#[derive(Clone, Debug)]
pub(crate) struct TimeWeighted<const N: usize> {
    current: Option<Held<N>>,
    sums: [u128; N],
    total_ns: u64,
}

/// The values set last, and how long they have held so far: a `set` of the
/// same values only adds time here, and the sums (v × t summed, exact in
/// integers whether t comes in one piece or several) take it when they change.
#[derive(Clone, Copy, Debug)]
struct Held<const N: usize> {
    since: u64,
    values: [u64; N],
    held_ns: u64,
}

impl<const N: usize> Default for TimeWeighted<N> {
    fn default() -> Self {
        TimeWeighted {
            current: None,
            sums: [0; N],
            total_ns: 0,
        }
    }
}

impl<const N: usize> TimeWeighted<N> {
    pub fn set(&mut self, ts_ns: u64, values: [u64; N]) {
        if let Some(held) = &mut self.current {
            if held.values == values {
                held.held_ns += ts_ns.saturating_sub(held.since);
                held.since = ts_ns;
                return;
            }
        }
        self.pause(ts_ns);
        self.current = Some(Held {
            since: ts_ns,
            values,
            held_ns: 0,
        });
    }

    /// Closes the current values at `ts_ns`; nothing is held until the next `set`.
    pub fn pause(&mut self, ts_ns: u64) {
        if let Some(held) = self.current.take() {
            let dt = held.held_ns + ts_ns.saturating_sub(held.since);
            for (sum, v) in self.sums.iter_mut().zip(held.values) {
                *sum += u128::from(v) * u128::from(dt);
            }
            self.total_ns += dt;
        }
    }

    pub fn means(&self) -> Option<[f64; N]> {
        (self.total_ns > 0).then(|| self.sums.map(|s| s as f64 / self.total_ns as f64))
    }

    /// The time the means cover, up to the last `pause`.
    pub fn held_ns(&self) -> u64 {
        self.total_ns
    }

    /// Whether values are held now (set, and not paused since).
    pub fn holding(&self) -> bool {
        self.current.is_some()
    }

    /// The values held now, if any.
    pub fn current(&self) -> Option<[u64; N]> {
        self.current.map(|held| held.values)
    }
}

/// What a socket needs to know of its traced peer.
#[derive(Clone, Copy, Debug, Default)]
struct PeerView {
    /// The peer's estimate of our MSS (`rcv_mss`), 0 if unknown.
    rcv_mss: u32,
    /// The peer's send MSS (`mss_cache`), 0 if unknown.
    mss_cache: u32,
    /// The segments the peer's windows must hold whole ([`SenderSide::segment`]):
    /// no segment passes 64 KiB, and 2 bytes keep the view in 32.
    segment: u16,
    srtt_us: u32,
    /// The peer is traced (the default view stands for none).
    traced: bool,
    /// The share of the recent window the peer waited on our window, as its
    /// `rwnd_limited` alert takes it; None until it has that much history.
    rwnd_share: Option<f64>,
}

/// In C order, what every event reads first: replaying 10k sockets round
/// robin, each event's cost is the cache lines of its socket it touches.
#[derive(Debug)]
#[repr(C)]
struct Flow {
    cookie: u64,
    /// Index of the traced socket at the other end in `WindowAnalyzer::flows`.
    peer: Option<usize>,
    first_ns: u64,
    last_ns: u64,
    clamp_episode: Episode,
    limit_episodes: [Episode; 3],
    /// `rcv_nxt` of our windows: the rate this socket receives at.
    received: RateMarks,
    /// The recent rwnd-limited share of the latest limit check.
    rwnd_share: Option<f64>,
    /// Local, remote.
    ends: Option<(SocketAddr, SocketAddr)>,
    /// Stalls seen from our ACKs (we send) and from our offers (untraced sender).
    send_stalls: StallDetector,
    recv_stalls: StallDetector,
    tx: SenderSide,
    rx: ReceiverSide,
    limits: LimitTracker,
    alerts: Vec<Alert>,
    /// The flow table's number of this socket ([`NO_FLOW`] if pushed without one).
    socket: u32,
    /// Who writes and reads it, once a sock_task event said (rarely read: boxed).
    tasks: Option<Box<SocketTasks>>,
    /// In `WindowAnalyzer::stalling`.
    stalling: bool,
    /// Its TCP_CLOSE was seen.
    closed: bool,
}

impl Flow {
    fn new(cookie: u64, ts_ns: u64, limit_window_ns: u64) -> Self {
        Flow {
            cookie,
            ends: None,
            peer: None,
            first_ns: ts_ns,
            last_ns: ts_ns,
            rx: ReceiverSide::default(),
            tx: SenderSide::default(),
            limits: LimitTracker::new(limit_window_ns),
            send_stalls: StallDetector::default(),
            recv_stalls: StallDetector::default(),
            clamp_episode: Episode::default(),
            limit_episodes: [Episode::default(); 3],
            received: RateMarks::default(),
            rwnd_share: None,
            alerts: Vec::new(),
            socket: NO_FLOW,
            tasks: None,
            stalling: false,
            closed: false,
        }
    }

    /// A free slot of `WindowAnalyzer::flows`: cookie 0, which no analysed socket has.
    fn vacant(limit_window_ns: u64) -> Self {
        Flow::new(0, 0, limit_window_ns)
    }

    fn is_vacant(&self) -> bool {
        self.cookie == 0
    }

    /// Nothing is traced from `ts_ns` for a while (a pause of sampling by
    /// time): a stall open ends unseen at the last event, as at the end of a
    /// trace, the windows held end at `ts_ns` (the untraced time weighs in no
    /// mean and makes no window held longer), and the gap is charged to no limit.
    fn pause(&mut self, ts_ns: u64) {
        self.send_stalls.finish(self.last_ns);
        self.recv_stalls.finish(self.last_ns);
        self.rx.pause(ts_ns);
        self.tx.pause(ts_ns);
        self.limits.forget_gap();
    }

    /// Closes the stalls still open and returns the receive side's report.
    fn finish(&mut self) -> ReceiveWindow {
        self.send_stalls.finish(self.last_ns);
        self.recv_stalls.finish(self.last_ns);
        self.rx.report(self.last_ns)
    }

    fn view(&self) -> PeerView {
        PeerView {
            rcv_mss: self.rx.rcv_mss,
            mss_cache: self.tx.mss_cache,
            segment: self.tx.segment().min(u32::from(u16::MAX)) as u16,
            srtt_us: self.tx.srtt_us,
            traced: true,
            rwnd_share: self.rwnd_share,
        }
    }

    fn srtt_us(&self, peer: &PeerView) -> u32 {
        if self.tx.srtt_us > 0 {
            self.tx.srtt_us
        } else {
            peer.srtt_us
        }
    }

    /// The RTT of the data this socket receives: its sender's srtt when the
    /// sender is traced (a receiver's own srtt dates from its handshake).
    fn data_srtt_us(&self, peer: &PeerView) -> u32 {
        if peer.srtt_us > 0 {
            peer.srtt_us
        } else {
            self.tx.srtt_us
        }
    }

    /// The process the socket is named by (see [`SocketTasks::owner`]).
    fn owner(&self) -> Option<Task> {
        self.tasks.as_ref()?.owner().cloned()
    }

    fn name(&self) -> String {
        match self.ends {
            Some((local, remote)) => format!("{local} -> {remote}"),
            None => format!("cookie {}", self.cookie),
        }
    }

    fn alert(
        &mut self,
        out: &mut Vec<Alert>,
        ts_ns: u64,
        kind: AlertKind,
        (message, figures): (String, AlertFigures),
    ) {
        let alert = Alert {
            ts_ns,
            sock_cookie: self.cookie,
            flow: self.name(),
            process: self.owner(),
            kind,
            cleared: false,
            message,
            figures,
        };
        self.alerts.push(alert.clone());
        out.push(alert);
    }

    /// The end of an alert's episode: live only, the report keeps what fired.
    fn clear(&self, out: &mut Vec<Alert>, ts_ns: u64, kind: AlertKind, message: String) {
        out.push(Alert {
            ts_ns,
            sock_cookie: self.cookie,
            flow: self.name(),
            process: self.owner(),
            kind,
            cleared: true,
            message,
            figures: AlertFigures::default(),
        });
    }

    fn alerting(&self) -> ActiveAlerts {
        let mut active = ActiveAlerts::default();
        active.set(AlertKind::MssClamp, self.clamp_episode.is_active());
        let stalled = self.send_stalls.is_alerted() || self.recv_stalls.is_alerted();
        active.set(AlertKind::SwsStall, stalled);
        for (episode, kind) in self.limit_episodes.iter().zip(LIMIT_KINDS) {
            active.set(kind, episode.is_active());
        }
        active
    }

    /// The socket closed: every episode still running ends with it.
    fn close_episodes(&mut self, ts_ns: u64, out: &mut Vec<Alert>) {
        for side in [StallSide::Sender, StallSide::Receiver] {
            let stalls = self.stalls_mut(side);
            if stalls.is_alerted() {
                stalls.finish(ts_ns);
                let message = "sws_stall ended: the socket closed".to_string();
                self.clear(out, ts_ns, AlertKind::SwsStall, message);
            }
        }
        if self.clamp_episode.end() {
            self.clear(
                out,
                ts_ns,
                AlertKind::MssClamp,
                "mss_clamp ended: the socket closed".into(),
            );
        }
        for (i, kind) in LIMIT_KINDS.into_iter().enumerate() {
            if self.limit_episodes[i].end() {
                let message = format!("{} ended: the socket closed", kind.name());
                self.clear(out, ts_ns, kind, message);
            }
        }
    }

    fn on_event(&mut self, ev: &Event, peer: &PeerView, cfg: &WindowConfig, out: &mut Vec<Alert>) {
        let ts = ev.hdr.ts_ns;
        self.last_ns = self.last_ns.max(ts);
        match &ev.body {
            Body::SockTask(t) => self.tasks.get_or_insert_default().note(t),
            Body::WindowAdv(w) => {
                if w.mss_cache > 0 {
                    self.tx.mss_cache = w.mss_cache;
                }
                if w.len > 0 {
                    self.tx.on_data(ts);
                    self.tx.on_segment(w);
                }
                if let Some(c) = self.rx.on_window_adv(ts, w, u32::from(peer.segment)) {
                    if self.peer.is_none() {
                        let t = self.recv_stalls.window(
                            ts,
                            c.header,
                            w.rcv_mss,
                            true,
                            StallSide::Receiver,
                        );
                        self.stall_ended(t, StallSide::Receiver, cfg, peer, out);
                    }
                    self.received.mark(ts, w.rcv_nxt, cfg.limit_window_ns);
                    self.check_clamp(ts, &c, cfg, peer, out);
                }
                self.limits.advance(ts);
                self.limits.state.merge_window_adv(w);
                // Our own segments during a send-side stall: probes and sub-MSS data.
                if self.send_stalls.is_active() {
                    if w.len == 0 && w.seq == w.snd_una.wrapping_sub(1) {
                        self.send_stalls.probe();
                    } else if w.len > 0 && w.len < w.mss_cache && w.gso_segs <= 1 {
                        self.send_stalls.sub_mss_segment();
                    }
                    self.send_stalls.probes_out(w.icsk_probes_out);
                }
            }
            Body::TcpRcv(r) => {
                self.rx.peer_wscale = r.snd_wscale;
                self.limits.state.merge_tcp_rcv(r);
                // The peer's window while the sender waited for this ACK.
                let held_wnd = self.limits.state.snd_wnd;
                self.limits.advance(ts);
                self.limits.on_chrono(ts, ChronoSample::of(r));
                if self.recv_stalls.is_active() {
                    if r.len == 0 && r.seq == r.rcv_nxt.wrapping_sub(1) {
                        self.recv_stalls.probe();
                    } else if r.len > 0 {
                        if r.len < r.rcv_mss {
                            self.recv_stalls.sub_mss_segment();
                        }
                        if r.seq == r.rcv_nxt {
                            self.recv_stalls.delivered(u64::from(r.len));
                        }
                    }
                }
                if let Some(ack) = self.tx.on_tcp_rcv(ts, r) {
                    self.limits.state.apply_ack(r);
                    self.send_stalls.delivered(u64::from(ack.acked));
                    let mss = if peer.rcv_mss > 0 {
                        peer.rcv_mss
                    } else {
                        r.mss_cache
                    };
                    let t = self.send_stalls.window(
                        ts,
                        ack.window,
                        mss,
                        ack.data_waiting,
                        StallSide::Sender,
                    );
                    self.stall_ended(t, StallSide::Sender, cfg, peer, out);
                }
                self.check_limits(ts, held_wnd, cfg, peer, out);
            }
            Body::Sendmsg(s) => {
                self.tx.on_data(ts);
                self.limits.advance(ts);
                self.limits.state.merge_sendmsg(s);
            }
            _ => {}
        }
        self.due_stall_alerts(ts, cfg, peer, out);
    }

    /// The alerts of the stalls that have lasted long enough by `now_ns`.
    fn due_stall_alerts(
        &mut self,
        now_ns: u64,
        cfg: &WindowConfig,
        peer: &PeerView,
        out: &mut Vec<Alert>,
    ) {
        for side in [StallSide::Sender, StallSide::Receiver] {
            if let Some(stall) = self.stalls_mut(side).due_alert(now_ns, cfg.min_duration_ns) {
                self.stall_alert(out, &stall, peer);
            }
        }
    }

    /// When the first alert of a stall running now falls due.
    fn stall_due_ns(&self, min_duration_ns: u64) -> Option<u64> {
        [&self.send_stalls, &self.recv_stalls]
            .iter()
            .filter_map(|s| s.alert_due_ns(min_duration_ns))
            .min()
    }

    /// A stall runs whose alert has not fired yet.
    fn stall_pending(&self) -> bool {
        [&self.send_stalls, &self.recv_stalls]
            .iter()
            .any(|s| s.is_active() && !s.is_alerted())
    }

    fn stalls_mut(&mut self, side: StallSide) -> &mut StallDetector {
        match side {
            StallSide::Sender => &mut self.send_stalls,
            StallSide::Receiver => &mut self.recv_stalls,
        }
    }

    /// A stall that ended before any event found it long enough is reported
    /// at its end; one whose alert fired while it ran is cleared, with what
    /// it cost in all.
    fn stall_ended(
        &mut self,
        t: Transition,
        side: StallSide,
        cfg: &WindowConfig,
        peer: &PeerView,
        out: &mut Vec<Alert>,
    ) {
        let Transition::Ended { alerted } = t else {
            return;
        };
        let Some(stall) = self.stalls_mut(side).done.last().cloned() else {
            return;
        };
        if alerted {
            let message = format!("sws_stall ended: {}", stall_summary(&stall));
            self.clear(out, stall.end_ns, AlertKind::SwsStall, message);
        } else if stall.duration_ns >= cfg.min_duration_ns {
            self.stall_alert(out, &stall, peer);
        }
    }

    fn stall_alert(&mut self, out: &mut Vec<Alert>, s: &SwsStall, peer: &PeerView) {
        let full_rate = bps(f64::from(s.mss), f64::from(self.srtt_us(peer)))
            .map_or(String::new(), |b| {
                format!("; one MSS per RTT alone would give {}", rate(b))
            });
        let message = format!("{}{full_rate}", stall_summary(s));
        let figures = AlertFigures {
            bytes: Some(u64::from(s.mss)),
            srtt_us: Some(self.srtt_us(peer)),
            ceiling_bps: bps(f64::from(s.mss), f64::from(self.srtt_us(peer))),
            achieved_bps: bps(s.bytes_delivered as f64, s.duration_ns as f64 / 1000.0),
            duration_ns: Some(s.duration_ns),
            ..AlertFigures::default()
        };
        self.alert(out, s.end_ns, AlertKind::SwsStall, (message, figures));
    }

    /// `latest`: the window just classified.
    fn check_clamp(
        &mut self,
        ts: u64,
        latest: &Classified,
        cfg: &WindowConfig,
        peer: &PeerView,
        out: &mut Vec<Alert>,
    ) {
        let Some((fraction, free, lost)) = self.rx.recent_loss() else {
            return;
        };
        // The loss counts only while the window binds. With the sender
        // traced: it waited on this window for the threshold share of the
        // recent window, as its rwnd_limited alert counts it. Else: what the
        // window allows at the sender's RTT is within BIND_MARGIN of what
        // arrives, either way (a window that allows 500 Gb/s on a 16 Gb/s
        // flow limits nothing; one that "allows" less than arrives shows an
        // RTT taken across a stall, and proves nothing).
        let srtt = self.data_srtt_us(peer);
        let cap = bps(f64::from(latest.header), f64::from(srtt));
        let received = self.received.bps(ts, self.rx.rcv_nxt);
        let binds = if peer.traced {
            peer.rwnd_share
                .is_some_and(|share| share * 100.0 >= cfg.threshold_pct)
        } else {
            match (cap, received) {
                (Some(cap), Some(received)) => {
                    cap <= received * BIND_MARGIN && cap * BIND_MARGIN >= received
                }
                _ => true,
            }
        };
        let loss_pct = if binds || self.clamp_episode.is_active() {
            fraction * 100.0
        } else {
            0.0
        };
        match self
            .clamp_episode
            .update(ts, loss_pct, cfg.threshold_pct, cfg.min_duration_ns)
        {
            Turn::Started => {}
            Turn::Ended => {
                let message = format!(
                    "mss_clamp ended: the latest windows lose {:.1}% of free space",
                    fraction * 100.0
                );
                self.clear(out, ts, AlertKind::MssClamp, message);
                return;
            }
            Turn::Unchanged => return,
        }
        // What the lost bytes would carry per round trip, where they would at
        // most double the window: past that the congestion window or the
        // link binds first (a 30 MB buffer behind the unscaled 65535 B
        // "cost" 4889 Gb/s at 49 µs).
        let cost = bps(lost, f64::from(srtt))
            .filter(|_| lost <= f64::from(latest.header))
            .map_or(String::new(), |b| {
                format!(", {} at srtt {}", rate(b), duration(u64::from(srtt) * 1000))
            });
        let binding = match (peer.rwnd_share, cap, received) {
            (Some(share), _, _) => format!(
                "; the sender waited on the window {:.0}% of the last {} ms",
                share * 100.0,
                cfg.limit_window_ns / 1_000_000
            ),
            (None, Some(cap), Some(received)) => format!(
                "; the {} B window caps at {}{}",
                latest.header,
                rate(cap),
                achieved_text(Some(cap), received, "arrived")
            ),
            _ => String::new(),
        };
        let recent_cause = self.rx.recent_cause();
        let cause = match recent_cause {
            LossCause::HeaderClamp if self.rx.rcv_wscale == 0 => {
                "the 65535 header clamp (no window scaling)".to_string()
            }
            // The scale was chosen from the buffer at the handshake.
            LossCause::HeaderClamp => format!(
                "the header's ceiling 65535 << {ws} = {} B (window scale {ws}, fixed at the \
                 handshake by the receive buffer then: set SO_RCVBUF before listen/connect, \
                 or leave it to autotuning)",
                65535u64 << self.rx.rcv_wscale,
                ws = self.rx.rcv_wscale
            ),
            LossCause::WscaleAlignment => {
                format!("alignment to 1 << {}", self.rx.rcv_wscale)
            }
            // Most of such a loss can be the cap's, not the rounding's (at
            // rcv_mss 1448: 7221 of 7592 B, where "to rounding" read 26%).
            LossCause::MssRoundingUnderSsthresh => format!(
                "the soft cap rcv_ssthresh{} (it grows toward the free space only as \
                 segments arrive) and rounding down to rcv_mss {}",
                match latest.selection.capped {
                    true => format!(" {}", latest.selection.offerable),
                    false => String::new(),
                },
                self.rx.rcv_mss,
            ),
            LossCause::MssRounding => format!("rounding down to rcv_mss {}", self.rx.rcv_mss),
        };
        let split = match recent_cause {
            LossCause::MssRoundingUnderSsthresh => split_text(latest),
            _ => String::new(),
        };
        let message = format!(
            "advertised window loses {:.1}% of free space to {cause}: {lost:.0} of {free:.0} B per window{cost}{binding}{split}",
            fraction * 100.0
        );
        let figures = AlertFigures {
            share: Some(fraction),
            threshold_pct: Some(cfg.threshold_pct),
            bytes: Some(lost as u64),
            srtt_us: Some(srtt),
            ceiling_bps: cap,
            achieved_bps: received,
            ..AlertFigures::default()
        };
        self.alert(out, ts, AlertKind::MssClamp, (message, figures));
    }

    /// Limit alerts. A limit's share of the recent window is the kernel's
    /// where its chrono measured the window (rwnd, sndbuf), as in the
    /// report, else ours. The kernel's chrono ticks only while the sender is
    /// blocked on that limit, so its share is binding by itself; ours counts
    /// only while the limit binds: the rate the limited quantity allows at
    /// the measured RTT is within [`BIND_MARGIN`] of the rate acknowledged
    /// over the same window, when an episode starts (a smoothed srtt on a
    /// bursty flow can make a binding window look roomy, so this test never
    /// overrides the kernel). An episode ends (and may fire again) when the
    /// share stayed below half the threshold for `min_duration_ns`.
    fn check_limits(
        &mut self,
        ts: u64,
        held_wnd: u32,
        cfg: &WindowConfig,
        peer: &PeerView,
        out: &mut Vec<Alert>,
    ) {
        let Some(ours) = self
            .limits
            .recent(cfg.min_duration_ns.min(cfg.limit_window_ns))
        else {
            return;
        };
        let check = self.limits.recent_check(ts, cfg.limit_window_ns);
        // Where the kernel clocked the window, its figures decide. The
        // report's sndbuf share also takes the events' where they saw more
        // (a writer whose data left before it slept, which the kernel never
        // clocks); an alert does not: a writer held by its buffer while the
        // receiver's slow ACKs set the pace (a slow reader) looks the same,
        // and a larger buffer would not help it. So where the chrono runs
        // but clocked too little busy time to decide, no sndbuf episode
        // starts on the events alone (8 busy jiffies in 200 ms: the events
        // said 23%, the kernel 0). The rwnd test is the kernel's own and
        // stands in for it, but not where the chrono clocked busy jiffies
        // and no rwnd one: then the sender waited under about a jiffy
        // (8 busy jiffies, none rwnd: the events said 21%, and the tcp_info
        // polls saw no wait either).
        let shares = match check.kernel {
            Some([rwnd, sndbuf]) => [rwnd, ours[1], sndbuf],
            None if check.kernel_too_short => {
                let rwnd = if check.kernel_no_rwnd { 0.0 } else { ours[0] };
                [rwnd, ours[1], 0.0]
            }
            None => ours,
        };
        let kernel_clocked = |kind: AlertKind| {
            check.kernel.is_some()
                && matches!(kind, AlertKind::RwndLimited | AlertKind::SndbufLimited)
        };
        self.rwnd_share = Some(shares[0]);
        let srtt = self.srtt_us(peer);
        let rwnd_usable = self.tx.tails.usable(u64::from(held_wnd), self.tx.segment());
        for (i, kind) in LIMIT_KINDS.into_iter().enumerate() {
            let window = limited_bytes(kind, &self.limits.state, rwnd_usable);
            let cap = bps(window as f64, f64::from(srtt));
            let binds = kernel_clocked(kind)
                || match (cap, check.acked_bps) {
                    (Some(cap), Some(acked)) => cap <= acked * BIND_MARGIN,
                    _ => true,
                };
            // Binding decides whether an episode starts; once started, it
            // ends by its share alone (a window that opens for one ACK
            // does not end it), where neither the kernel nor the events see
            // the limit any more: the kernel's sndbuf chrono clocks only
            // part of a blocked writer's time (SO_SNDBUF 16 KiB over the
            // loopback: the events 100%, the kernel 0-30% of each 200 ms),
            // and the episode ended and began again 150 times in 10 s.
            let episode = &mut self.limit_episodes[i];
            let active = episode.is_active();
            let share = match (active, binds) {
                (true, _) => shares[i].max(ours[i]),
                (false, true) => shares[i],
                (false, false) => 0.0,
            };
            // An episode starts on the kernel's share less one jiffy, the
            // most its whole jiffies can overstate it by (2 of 10 jiffies
            // rwnd_limited were "20%" beside a 3.2 MB window on 57 Mb/s;
            // the polls over those 200 ms: 1 of 11).
            let reading = match !active && kernel_clocked(kind) {
                true => share - check.kernel_jiffy,
                false => share,
            };
            let turn = episode.update(ts, reading * 100.0, cfg.threshold_pct, cfg.min_duration_ns);
            if turn == Turn::Unchanged {
                continue;
            }
            let of_window = format!(
                "{} {:.0}% of the last {} ms",
                kind.name(),
                share * 100.0,
                cfg.limit_window_ns / 1_000_000
            );
            if turn == Turn::Ended {
                self.clear(out, ts, kind, format!("ended: {of_window}"));
                continue;
            }
            let what = limited_text(kind, &self.limits.state, held_wnd, rwnd_usable);
            let source = if kernel_clocked(kind) {
                "kernel chrono"
            } else {
                "per event"
            };
            // A shut window caps the rate at nothing a ceiling can say ("caps
            // at 0 b/s, and 170.1 Mb/s was acknowledged" before it shut):
            // the zero-window stalls time it.
            let said_cap = cap.filter(|_| !(kind == AlertKind::RwndLimited && window == 0));
            let ceiling = said_cap.map_or(String::new(), |b| {
                format!(
                    "; at srtt {} that caps at {}",
                    duration(u64::from(srtt) * 1000),
                    rate(b)
                )
            });
            let achieved = check.acked_bps.map_or(String::new(), |b| {
                let slow = match kind {
                    AlertKind::RwndLimited if said_cap.is_some() => {
                        slow_window_text(window, srtt, b, share)
                    }
                    _ => String::new(),
                };
                achieved_text(said_cap, b, "was acknowledged") + &slow
            });
            let message = format!("{of_window} ({source}): {what}{ceiling}{achieved}");
            let figures = AlertFigures {
                share: Some(share),
                threshold_pct: Some(cfg.threshold_pct),
                bytes: Some(window),
                srtt_us: Some(srtt),
                ceiling_bps: cap,
                achieved_bps: check.acked_bps,
                ..AlertFigures::default()
            };
            self.alert(out, ts, kind, (message, figures));
        }
    }
}

/// One socket's figures so far, for live metrics: cumulative counts and
/// times (never decreasing while the socket is tracked) and its current state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LiveWindow {
    pub sock_cookie: u64,
    /// Busy time limited by each cause (rwnd and sndbuf the kernel's where
    /// known, as in [`LimitsReport`]).
    pub limited: LimitTimes,
    /// The shares of busy time, exactly as the report's limits give them;
    /// None for a socket that sent no data.
    pub limit_shares: Option<LimitFractions>,
    pub advertised_count: u64,
    pub mss_rounded_count: u64,
    pub mss_rounding_bytes_lost: u64,
    /// Share of free space the latest windows lost to rounding or clamping
    /// (what the `mss_clamp` alert watches); None until enough windows were seen.
    pub recent_rounding_loss: Option<f64>,
    /// SWS stalls of either side, the one in progress included, and their
    /// time up to the socket's latest event.
    pub sws_stalls: u64,
    pub sws_stall_ns: u64,
    pub stalled: bool,
    /// The alert episodes running now (one socket's: `add` keeps its own).
    pub alerting: ActiveAlerts,
}

impl LiveWindow {
    /// Adds another socket's figures (`recent_rounding_loss` is kept: it is one socket's).
    pub fn add(&mut self, other: &LiveWindow) {
        self.limited.add(&other.limited);
        self.advertised_count += other.advertised_count;
        self.mss_rounded_count += other.mss_rounded_count;
        self.mss_rounding_bytes_lost += other.mss_rounding_bytes_lost;
        self.sws_stalls += other.sws_stalls;
        self.sws_stall_ns += other.sws_stall_ns;
    }
}

impl Flow {
    fn live(&self, hz: Option<u32>) -> LiveWindow {
        let (send_count, send_ns, send_active) = self.send_stalls.so_far(self.last_ns);
        let (recv_count, recv_ns, recv_active) = self.recv_stalls.so_far(self.last_ns);
        let rx = self.rx.counts();
        LiveWindow {
            sock_cookie: self.cookie,
            limited: self.limits.limited(hz),
            limit_shares: self.limits.shares(hz),
            advertised_count: rx.advertised_count,
            mss_rounded_count: rx.mss_rounded_count,
            mss_rounding_bytes_lost: rx.mss_rounding_bytes_lost,
            recent_rounding_loss: self.rx.recent_loss().map(|(fraction, _, _)| fraction),
            sws_stalls: send_count + recv_count,
            sws_stall_ns: send_ns + recv_ns,
            stalled: send_active || recv_active,
            alerting: self.alerting(),
        }
    }
}

/// The window analyses of one socket.
#[derive(Clone, Debug, Serialize)]
pub struct FlowWindowReport {
    pub sock_cookie: u64,
    /// "ip:port", local end first; empty when no event carried addresses.
    pub src: String,
    pub dst: String,
    /// The traced socket at the other end, if any.
    pub peer_cookie: Option<u64>,
    /// First and last event of the socket.
    pub first_ns: u64,
    pub last_ns: u64,
    pub mss: MssReport,
    pub window: WindowReportSection,
    pub limits: LimitsReport,
    pub alerts: Vec<Alert>,
    pub advice: Vec<Advice>,
    /// The processes that last wrote and read the socket (`writer`, `reader`).
    pub tasks: SocketTasks,
}

/// The MSS values of this socket's main direction of data (the one it sends
/// if it sent data, else the one it receives).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MssReport {
    /// "send" or "receive".
    pub direction: &'static str,
    /// The data sender's `mss_cache`.
    pub sender: Option<u32>,
    /// The data receiver's `rcv_mss`, its estimate of `sender`.
    pub receiver_estimate: Option<u32>,
    /// The data receiver's `advmss`, the most `receiver_estimate` can reach.
    pub advertised: Option<u32>,
    /// `sender − receiver_estimate` when both are known.
    pub mismatch_bytes: Option<i64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WindowReportSection {
    /// Receive side (this socket's own offers).
    #[serde(flatten)]
    pub receive: ReceiveWindow,
    /// Send side (the peer's window as this socket's ACKs carried it).
    pub send: Option<SendWindow>,
    pub sws_stalls: Vec<SwsStall>,
    /// Bandwidth × min RTT with a known link rate, else the receiver's mean
    /// free space (the other hard limit a sender cannot exceed).
    pub ideal_window: Option<u64>,
    /// "bandwidth_delay" or "free_space".
    pub ideal_window_source: Option<&'static str>,
    /// `ideal_window` as the sender fills windows (Figure 8's whole segments,
    /// and the rest of one as far as it sends that).
    pub mss_allowed_window: Option<u64>,
    /// The free → advertised → usable chain of the window the receiver held longest.
    pub chain: Option<WindowChain>,
    /// Throughput the rounding/clamp loss costs: mean bytes lost per RTT.
    pub rounding_cost_bps: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WindowReport {
    pub events_lost: u64,
    pub model_mismatches: u64,
    /// `HZ` used for the chrono figures.
    pub jiffies_hz: Option<u32>,
    pub flows: Vec<FlowWindowReport>,
}

/// What a report needs of the socket that receives its data (itself, or
/// its peer for a sender).
#[derive(Clone, Copy, Default)]
struct DataReceiver {
    rcv_mss: u32,
    advmss: u16,
    /// See [`ReceiverSide::header_bytes`].
    header_bytes: u16,
    space_rule: kernel::SpaceRule,
    rcv_wscale: u8,
    /// The connection scales its windows: either end announced a scale.
    window_scaling: bool,
    /// Its windows' mean share of the free space lost to rounding.
    rounding_loss_fraction: f64,
    mean_free_space: f64,
    mean_withheld: f64,
    longest_held: Option<receiver::HeldWindow>,
    /// The reader's queue (see [`ReceiveWindow`]).
    mean_unread: f64,
    unread_over_window_fraction: f64,
    largest_rcvbuf: u32,
}

impl DataReceiver {
    fn of(rx: &ReceiverSide, r: &ReceiveWindow) -> Self {
        DataReceiver {
            rcv_mss: rx.rcv_mss,
            advmss: rx.advmss,
            header_bytes: rx.header_bytes,
            space_rule: rx.space_rule,
            rcv_wscale: rx.rcv_wscale,
            window_scaling: rx.rcv_wscale > 0 || rx.peer_wscale > 0,
            rounding_loss_fraction: r.rounding_loss_fraction,
            mean_free_space: r.mean_free_space,
            mean_withheld: r.mean_withheld,
            longest_held: r.longest_held,
            mean_unread: r.mean_unread,
            unread_over_window_fraction: r.unread_over_window_fraction,
            largest_rcvbuf: r.largest_rcvbuf,
        }
    }
}

/// A RST the socket sent.
fn is_reset(ev: &Event) -> bool {
    matches!(&ev.body, Body::WindowAdv(w) if w.tcp_flags & crate::event::tcp_flags::RST != 0)
}

/// No window analysis for a socket (yet): sockets without window events have none.
const NO_FLOW: u32 = u32::MAX;

/// Set in a `by_socket` entry once a data segment reached the socket and
/// gave its headers: the others leave the socket's state where it is.
const HEADERS_SEEN: u32 = 1 << 31;

/// The incremental analyzer; see the module documentation.
pub struct WindowAnalyzer {
    cfg: WindowConfig,
    /// Sockets in the order first seen: one lookup per event finds a socket
    /// (`index`), its peer is an index away, and the table grows without
    /// moving a rehashed copy of every socket's state.
    flows: Vec<Flow>,
    /// `flows[i].view()` as of its latest event: a socket's event reads its
    /// peer's, which is then one small entry, not two lines of a large `Flow`.
    views: Vec<PeerView>,
    /// Cookie → index in `flows`, for [`push`](Self::push).
    index: FastMap<u64, usize>,
    /// Socket number → index in `flows` ([`NO_FLOW`] if none), for [`push_at`](Self::push_at).
    by_socket: Vec<u32>,
    /// (local, remote) → index in `flows`, to find the other end of a
    /// connection traced in another netns.
    ends: FastMap<(SocketAddr, SocketAddr), usize>,
    alerts: Vec<Alert>,
    /// First and latest (ts, jiffies) seen, for `HZ`.
    jiffies: Option<((u64, u32), (u64, u32))>,
    /// Slots of `flows` freed by [`retire`](Self::retire), for the next new sockets.
    free: Vec<usize>,
    /// `model_mismatches` of the retired sockets' reports.
    retired_mismatches: u64,
    /// The pauses of sampling by time, when pushed alone ([`push`](Self::push)):
    /// events inside them are skipped. [`Analysis`](crate::analysis::Analysis) follows them itself.
    pauses: Pauses,
    /// Sockets with a stall whose alert has not fired, for [`tick`](Self::tick).
    stalling: Vec<usize>,
}

/// A socket's window analysis at its retirement.
#[derive(Clone, Debug)]
pub struct RetiredWindow {
    /// The flow table's number of the socket.
    pub socket: usize,
    pub report: FlowWindowReport,
    /// Its figures as [`WindowAnalyzer::live_flows`] showed them last.
    pub live: LiveWindow,
}

impl WindowAnalyzer {
    /// The share of a flow's time a finding must take to flag it.
    pub fn threshold(&self) -> f64 {
        self.cfg.threshold_pct / 100.0
    }

    pub fn new(cfg: WindowConfig) -> Self {
        WindowAnalyzer {
            cfg,
            flows: Vec::new(),
            views: Vec::new(),
            index: FastMap::default(),
            by_socket: Vec::new(),
            ends: FastMap::default(),
            alerts: Vec::new(),
            jiffies: None,
            free: Vec::new(),
            retired_mismatches: 0,
            pauses: Pauses::default(),
            stalling: Vec::new(),
        }
    }

    /// Feeds one event; returns the alerts it started (usually none).
    pub fn push(&mut self, ev: &Event) -> Alerts<'_> {
        match self.pauses.turn(ev) {
            pauses::Turn::Traced => self.push_at(ev, None),
            pauses::Turn::Began => {
                self.pause(ev.hdr.ts_ns);
                Alerts::none()
            }
            pauses::Turn::Skipped => Alerts::none(),
        }
    }

    /// [`push`](Self::push) with the event's socket found by the caller:
    /// `socket` numbers the sockets densely (the flow table's index), so a
    /// socket's state is two array reads away instead of a hash lookup.
    /// Given for one of a socket's window events, it must be for all of
    /// them (the flow table numbers every event with its own cookie).
    /// Inlined into the caller: most events are of other kinds, and skipping
    /// them then costs two tests, not a call to the analysis.
    #[inline]
    pub(crate) fn push_at(&mut self, ev: &Event, socket: Option<usize>) -> Alerts<'_> {
        if Self::takes(ev) {
            self.analyze(ev, ev.hdr.sock_cookie, socket);
            return Alerts::take(&mut self.alerts);
        }
        // What the headers of data reaching a socket take of its MTU. The
        // flow table's socket, not the cookie: veth keeps the sender's skb->sk.
        if let Body::NetifReceive(p) = &ev.body {
            let entry = socket.and_then(|s| self.by_socket.get_mut(s));
            if let Some(entry) = entry.filter(|e| **e != NO_FLOW && **e & HEADERS_SEEN == 0) {
                if p.len > 0 {
                    *entry |= HEADERS_SEEN;
                    self.flows[*entry as usize & !(HEADERS_SEEN as usize)]
                        .rx
                        .on_data_segment(p);
                }
            }
            return Alerts::none();
        }
        // The reader's queue as data arrives and reads return, for a socket
        // whose windows are traced.
        let queue = match &ev.body {
            Body::DataReady(d) => Some((d.rcv_nxt, d.copied_seq, d.sk_rcvbuf)),
            Body::AppRead(r) => Some((r.rcv_nxt, r.copied_seq, r.sk_rcvbuf)),
            _ => None,
        };
        if let Some((rcv_nxt, copied_seq, sk_rcvbuf)) = queue {
            if let Some(i) = self.find(ev.hdr.sock_cookie, socket) {
                self.flows[i]
                    .rx
                    .on_queue(ev.hdr.ts_ns, rcv_nxt, copied_seq, sk_rcvbuf);
            }
            return Alerts::none();
        }
        if let Body::CopyDatagram(c) = &ev.body {
            if let Some(i) = self.find(ev.hdr.sock_cookie, socket) {
                self.flows[i].rx.on_copied(ev.hdr.ts_ns, c.len);
            }
            return Alerts::none();
        }
        if let Body::State(st) = &ev.body {
            if st.newstate == TCP_CLOSE && ev.hdr.sock_cookie != 0 {
                self.closed(ev, socket);
                return Alerts::take(&mut self.alerts);
            }
        }
        Alerts::none()
    }

    /// Nothing is traced from `ts_ns` for a while: see [`Flow::pause`].
    #[cold]
    pub(crate) fn pause(&mut self, ts_ns: u64) {
        for flow in self.flows.iter_mut().filter(|f| !f.is_vacant()) {
            flow.pause(ts_ns);
        }
    }

    /// A socket closed: its episodes end (cleared alerts); it is not created.
    #[inline(never)]
    fn closed(&mut self, ev: &Event, socket: Option<usize>) {
        self.alerts.clear();
        if let Some(i) = self.find(ev.hdr.sock_cookie, socket) {
            self.flows[i].closed = true;
            self.flows[i].close_episodes(ev.hdr.ts_ns, &mut self.alerts);
        }
    }

    /// The flow of a socket, by the flow table's index or by cookie.
    fn find(&self, cookie: u64, socket: Option<usize>) -> Option<usize> {
        match socket {
            Some(s) => self.flow_at(s),
            None => self.index.get(&cookie).copied(),
        }
    }

    /// Whether `ev` is an event the window analyses take.
    #[inline]
    pub(crate) fn takes(ev: &Event) -> bool {
        ev.hdr.sock_cookie != 0
            && matches!(
                ev.body,
                Body::WindowAdv(_) | Body::TcpRcv(_) | Body::Sendmsg(_) | Body::SockTask(_)
            )
    }

    /// Starts loading the state of socket `socket` if `ev` is one of its window events.
    #[inline]
    pub(crate) fn prefetch(&self, ev: &Event, socket: usize) {
        if Self::takes(ev) {
            if let Some(i) = self.flow_at(socket) {
                let flow = &self.flows[i];
                prefetch_span(&flow.cookie, &flow.tx);
                flow.rx.prefetch();
                flow.limits.prefetch();
            }
        }
    }

    #[inline(never)]
    fn analyze(&mut self, ev: &Event, cookie: u64, socket: Option<usize>) {
        self.alerts.clear();
        if let Body::TcpRcv(r) = &ev.body {
            let sample = (ev.hdr.ts_ns, r.jiffies);
            self.jiffies = Some(
                self.jiffies
                    .map_or((sample, sample), |(first, _)| (first, sample)),
            );
        }
        let i = match self.find(cookie, socket) {
            Some(i) => i,
            // A RST carries the ends of the segment it answers, not the
            // sender's: a listener's, after iperf3 -P's last data socket
            // closed, made a row of its own on that connection's addresses.
            None if is_reset(ev) => return,
            None => {
                let mut flow = Flow::new(cookie, ev.hdr.ts_ns, self.cfg.limit_window_ns);
                flow.socket = socket.map_or(NO_FLOW, |s| s as u32);
                let i = place(&mut self.flows, &mut self.free, flow);
                self.views.resize(self.flows.len(), PeerView::default());
                match socket {
                    Some(s) => {
                        if self.by_socket.len() <= s {
                            self.by_socket.resize(s + 1, NO_FLOW);
                        }
                        self.by_socket[s] = i as u32;
                    }
                    None => {
                        self.index.insert(cookie, i);
                    }
                }
                i
            }
        };
        if self.flows[i].ends.is_none() && !is_reset(ev) {
            if let (Some(local), Some(remote)) = (ev.src(), ev.dst()) {
                self.flows[i].ends = Some((local, remote));
                self.link(i, local, remote);
            }
        }
        let peer = self.flows[i]
            .peer
            .map_or(PeerView::default(), |p| self.views[p]);
        let flow = &mut self.flows[i];
        flow.on_event(ev, &peer, &self.cfg, &mut self.alerts);
        self.views[i] = flow.view();
        if !flow.stalling && flow.stall_pending() {
            flow.stalling = true;
            self.stalling.push(i);
        }
    }

    /// Every event stamped before `now_ns` has been pushed: the stalls that
    /// have lasted long enough by then alert now, not at their socket's next
    /// event (none comes while a zero window's probes back off, from one
    /// RTO doubling to two minutes).
    pub fn tick(&mut self, now_ns: u64) -> Alerts<'_> {
        self.alerts.clear();
        let mut k = 0;
        while k < self.stalling.len() {
            let i = self.stalling[k];
            let peer = self.flows[i]
                .peer
                .map_or(PeerView::default(), |p| self.views[p]);
            let flow = &mut self.flows[i];
            flow.due_stall_alerts(now_ns, &self.cfg, &peer, &mut self.alerts);
            if flow.stall_pending() {
                k += 1;
            } else {
                flow.stalling = false;
                self.stalling.swap_remove(k);
            }
        }
        Alerts::take(&mut self.alerts)
    }

    /// [`tick`](Self::tick) at the time each alert due by `until_ns` fell
    /// due, in order, as a replay knows it: it fires as if the time had
    /// been watched then, not when the recording's next event came. The
    /// alerts go to the report only.
    pub fn tick_each_due(&mut self, until_ns: u64) {
        while let Some(due) = self.next_due_ns().filter(|&d| d <= until_ns) {
            self.tick(due).for_each(drop);
        }
    }

    /// When the next alert due by time falls due.
    fn next_due_ns(&self) -> Option<u64> {
        let min_duration_ns = self.cfg.min_duration_ns;
        self.stalling
            .iter()
            .filter_map(|&i| self.flows[i].stall_due_ns(min_duration_ns))
            .min()
    }

    /// Every socket's figures so far, in no particular order.
    pub fn live_flows(&self) -> impl Iterator<Item = LiveWindow> + '_ {
        let hz = self.hz();
        self.flows
            .iter()
            .filter(|f| !f.is_vacant())
            .map(move |f| f.live(hz))
    }

    /// The process each socket is named by, where the trace named one.
    pub fn owners(&self) -> impl Iterator<Item = (u64, &Task)> + '_ {
        self.flows
            .iter()
            .filter(|f| !f.is_vacant())
            .filter_map(|f| Some((f.cookie, f.tasks.as_ref()?.owner()?)))
    }

    /// Flow slots in use or free: the analyses' memory.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.flows.len()
    }

    /// The index in `flows` of the flow table's socket `socket`, if it has one.
    fn flow_at(&self, socket: usize) -> Option<usize> {
        let i = *self.by_socket.get(socket)?;
        (i != NO_FLOW).then_some((i & !HEADERS_SEEN) as usize)
    }

    /// The flow table's number of the traced socket at the other end of `socket`.
    pub(crate) fn peer_socket(&self, socket: usize) -> Option<usize> {
        let peer = self.flows[self.flow_at(socket)?].peer?;
        let s = self.flows[peer].socket;
        (s != NO_FLOW).then_some(s as usize)
    }

    /// Finishes the flow table's sockets `sockets` into their reports and
    /// frees their state. A socket's report reads its peer's receive side:
    /// retire the two ends of a connection together (the peer of a socket
    /// retired alone is unpaired, and its later windows miss our MSS).
    pub(crate) fn retire(&mut self, sockets: &[usize]) -> Vec<RetiredWindow> {
        let hz = self.hz();
        let found: Vec<(usize, usize)> = sockets
            .iter()
            .filter_map(|&s| Some((s, self.flow_at(s)?)))
            .collect();
        let lives: Vec<LiveWindow> = found.iter().map(|&(_, i)| self.flows[i].live(hz)).collect();
        let receives: Vec<ReceiveWindow> =
            found.iter().map(|&(_, i)| self.flows[i].finish()).collect();
        let mut retired = Vec::with_capacity(found.len());
        for (k, (&(socket, i), live)) in found.iter().zip(lives).enumerate() {
            let peer_receive = self.flows[i]
                .peer
                .and_then(|p| found.iter().position(|&(_, j)| j == p))
                .map(|p| DataReceiver::of(&self.flows[found[p].1].rx, &receives[p]));
            let report = self.flow_report(i, receives[k].clone(), peer_receive, hz);
            self.retired_mismatches += report.window.receive.model_mismatches;
            retired.push(RetiredWindow {
                socket,
                report,
                live,
            });
        }
        for (socket, i) in found {
            self.free_slot(socket, i);
        }
        retired
    }

    /// Forgets flow `i` (socket `socket`): its slot goes to the next new socket.
    fn free_slot(&mut self, socket: usize, i: usize) {
        self.by_socket[socket] = NO_FLOW;
        let flow = std::mem::replace(&mut self.flows[i], Flow::vacant(self.cfg.limit_window_ns));
        self.views[i] = PeerView::default();
        if self.index.get(&flow.cookie) == Some(&i) {
            self.index.remove(&flow.cookie);
        }
        if let Some(ends) = flow.ends {
            if self.ends.get(&ends) == Some(&i) {
                self.ends.remove(&ends);
            }
        }
        if let Some(p) = flow.peer {
            if self.flows[p].peer == Some(i) {
                self.flows[p].peer = None;
            }
        }
        self.free.push(i);
    }

    /// Records a socket's ends and pairs it with the socket at the other end.
    /// A connection keeps its ends until both its sockets closed: a
    /// listener's RST to a late segment (iperf3 -P's server, its data socket
    /// gone) or a TIME_WAIT ACK sent on its addresses is not a new end of it
    /// (the client's report lost its peer's MSS and windows). A closed
    /// socket is no new socket's peer (a port used again pairs anew).
    fn link(&mut self, i: usize, local: SocketAddr, remote: SocketAddr) {
        if let Some(&held) = self.ends.get(&(local, remote)) {
            if held != i && self.connected(held) {
                return;
            }
        }
        self.ends.insert((local, remote), i);
        let Some(&peer) = self.ends.get(&(remote, local)) else {
            return;
        };
        if peer == i || self.flows[peer].closed {
            return;
        }
        self.flows[i].peer = Some(peer);
        self.flows[peer].peer = Some(i);
    }

    /// Flow `i` or the peer paired with it is open.
    fn connected(&self, i: usize) -> bool {
        let flow = &self.flows[i];
        !flow.closed
            || flow
                .peer
                .is_some_and(|p| !self.flows[p].closed && self.flows[p].peer == Some(i))
    }

    fn hz(&self) -> Option<u32> {
        self.cfg.jiffies_hz.or_else(|| {
            self.jiffies
                .and_then(|(first, last)| estimate_hz(first, last))
        })
    }

    /// The report over everything pushed. `events_lost` comes from the collector.
    /// Retired sockets' figures are in `model_mismatches`, not in `flows`.
    pub fn finish(mut self, events_lost: u64) -> WindowReport {
        let hz = self.hz();
        let mut by_cookie: Vec<usize> = (0..self.flows.len())
            .filter(|&i| !self.flows[i].is_vacant())
            .collect();
        by_cookie.sort_unstable_by_key(|&i| self.flows[i].cookie);
        let receives: Vec<ReceiveWindow> = self.flows.iter_mut().map(Flow::finish).collect();
        let flows: Vec<FlowWindowReport> = by_cookie
            .into_iter()
            .map(|i| {
                let peer_receive = self.flows[i]
                    .peer
                    .map(|p| DataReceiver::of(&self.flows[p].rx, &receives[p]));
                self.flow_report(i, receives[i].clone(), peer_receive, hz)
            })
            .collect();
        WindowReport {
            events_lost,
            model_mismatches: self.retired_mismatches
                + flows
                    .iter()
                    .map(|f| f.window.receive.model_mismatches)
                    .sum::<u64>(),
            jiffies_hz: hz,
            flows,
        }
    }

    /// `receive`: the flow's [`Flow::finish`]; `peer_receive`: its peer's
    /// (None: the peer's state is gone, or it has none).
    fn flow_report(
        &mut self,
        i: usize,
        mut receive: ReceiveWindow,
        peer_receive: Option<DataReceiver>,
        hz: Option<u32>,
    ) -> FlowWindowReport {
        let peer_index = self.flows[i].peer;
        let peer_view = peer_index.map(|p| self.flows[p].view());
        let peer_cookie = peer_index.map(|p| self.flows[p].cookie);
        let peer_rwnd_limited = peer_index.map(|p| rwnd_limited(&self.flows[p].limits, hz));
        let peer_tails = peer_index.map_or_else(WindowTails::default, |p| self.flows[p].tx.tails);
        receive.filled_by(peer_tails);
        let cfg = self.cfg.clone();
        let flow = &mut self.flows[i];
        let peer = peer_view.unwrap_or_default();
        let send = flow.tx.report(flow.last_ns);
        let sending = flow.tx.sends_more(flow.rx.bytes_received());
        // How the data's sender filled windows with the rest of a segment.
        let tails = if sending { flow.tx.tails } else { peer_tails };

        // What the data sender's own MTU gives (its advmss), where known.
        let sender_advmss = match sending {
            true => Some(flow.rx.advmss),
            false => peer_receive.map(|p| p.advmss),
        }
        .filter(|&m| m > 0);
        // The data direction this report is about, and the receiver of that data.
        let (direction, sender_mss, data_rx) = if sending {
            let mss = Some(flow.tx.mss_cache).filter(|&m| m > 0);
            ("send", mss, peer_receive.unwrap_or_default())
        } else {
            let mss = Some(peer.mss_cache).filter(|&m| m > 0);
            ("receive", mss, DataReceiver::of(&flow.rx, &receive))
        };
        let DataReceiver {
            rcv_mss,
            advmss,
            header_bytes,
            space_rule: ratio,
            rcv_wscale: wscale,
            window_scaling,
            rounding_loss_fraction,
            mean_free_space: free,
            mean_withheld: withheld,
            longest_held: held,
            mean_unread,
            unread_over_window_fraction,
            largest_rcvbuf,
        } = data_rx;
        let receiver_estimate = Some(rcv_mss).filter(|&m| m > 0);
        let mss = MssReport {
            direction,
            sender: sender_mss,
            receiver_estimate,
            advertised: Some(u32::from(advmss)).filter(|&m| m > 0),
            mismatch_bytes: sender_mss
                .zip(receiver_estimate)
                .map(|(s, r)| i64::from(s) - i64::from(r)),
        };
        let effective_sender_mss = sender_mss.or(receiver_estimate).unwrap_or(0);
        // The segments a window must hold whole: the sender's (see
        // `SenderSide::segment`), else its MSS as the receiver estimates it.
        let sender_segment = match sending {
            true => flow.tx.segment(),
            false => u32::from(peer.segment),
        };
        let segment = Some(sender_segment)
            .filter(|&s| s > 0)
            .or(receiver_estimate)
            .unwrap_or(0);
        let srtt = if flow.tx.min_srtt_us > 0 {
            flow.tx.min_srtt_us
        } else {
            peer.srtt_us
        };
        let bandwidth_delay = cfg
            .link_bps
            .filter(|_| srtt > 0)
            .map(|link| sender::ideal_window(link, srtt));
        let (ideal_window, ideal_window_source) = match bandwidth_delay {
            Some(window) => (Some(window), Some("bandwidth_delay")),
            None if free > 0.0 => (Some(free as u64), Some("free_space")),
            None => (None, None),
        };
        let chain = held.map(|h| WindowChain::held(h, segment, tails));
        // The RTT of the data this report is about, as the alerts take it.
        let srtt_now = if sending {
            flow.srtt_us(&peer)
        } else {
            flow.data_srtt_us(&peer)
        };
        let window = WindowReportSection {
            rounding_cost_bps: bps(receive.mean_bytes_lost, f64::from(srtt_now))
                .filter(|_| receive.advertised_count > 0),
            receive,
            send,
            sws_stalls: flow
                .send_stalls
                .done
                .iter()
                .chain(&flow.recv_stalls.done)
                .cloned()
                .collect(),
            mss_allowed_window: ideal_window
                .filter(|_| segment > 0)
                .map(|w| sender::mss_allowed_window(w, segment, tails)),
            ideal_window,
            ideal_window_source,
            chain,
        };
        let limits = flow.limits.report(hz);

        let threshold = cfg.threshold_pct / 100.0;
        // What a receive buffer or an MTU can mend; cwnd or the send
        // buffer limiting alone are not (its window already holds the data).
        // The data's receiver's: a sender was told no MTU where its peer's
        // windows, 22 % lost, were (mss-clamp, whose held window lost 18 %).
        let rounding_flagged = rounding_loss_fraction >= threshold
            || chain.is_some_and(|c| c.rounding_loss_fraction() >= threshold);
        // Stalls too short to alert flag the flow where together they took
        // the threshold's share of its time: a loopback's 64 KiB MSS made
        // zero windows of 45 µs a few times a second, 0.03 % of a healthy
        // transfer, and its autotuned buffer was told to be fixed at 8 MiB.
        let stalled_ns: u64 = window.sws_stalls.iter().map(|s| s.duration_ns).sum();
        let stalls_flagged =
            stalled_ns as f64 >= threshold * flow.last_ns.saturating_sub(flow.first_ns) as f64;
        let receive_flagged = flow
            .alerts
            .iter()
            .any(|a| !matches!(a.kind, AlertKind::CwndLimited | AlertKind::SndbufLimited))
            || stalls_flagged
            || rounding_flagged
            || limits.rwnd >= threshold;
        let flagged = receive_flagged || !flow.alerts.is_empty();
        let mut advice = Vec::new();
        if flagged && cfg.byte_sample_every <= 1 {
            // Unread data holding the window down is the reader's doing:
            // a larger buffer postpones it, only faster reads mend it; and
            // an MTU fitted to the free space it leaves would lose more
            // whenever less is free.
            let reader_bound = unread_over_window_fraction >= threshold;
            // The header's 65535 << wscale cut the window held longest, and
            // the free space the reader left stayed above it on average:
            // faster reads would not widen it (a loopback without window
            // scaling, 2.6 MB free, was told to read sooner for a 65535 B
            // window); where the reader brought it under (256 KiB read
            // slowly), the reader held it.
            let header_bound = held.is_some_and(|h| h.class == WindowClass::Clamped65535)
                && free >= (advice::UNSCALED_WINDOW_MAX << wscale.min(14)) as f64;
            if let Some(h) = held.filter(|_| header_bound && !window_scaling) {
                advice.push(advice::window_scaling(h.free_space, h.advertised));
            }
            let reads_set_the_rate = receive_flagged && reader_bound && !header_bound;
            if reads_set_the_rate {
                advice.push(advice::reader(
                    mean_unread,
                    unread_over_window_fraction,
                    largest_rcvbuf,
                ));
            } else if receive_flagged && !reader_bound && rcv_mss > 0 {
                // The data's sender, as its limits saw it.
                let (rwnd_share, cwnd) = match sending {
                    true => rwnd_limited(&flow.limits, hz),
                    false => peer_rwnd_limited.unwrap_or_default(),
                };
                let target = advice::WindowTarget::of(
                    bandwidth_delay,
                    free as u64,
                    (rwnd_share >= threshold).then_some(cwnd),
                    segment,
                    window_scaling,
                );
                let wanted = target.window().unwrap_or(free as u64);
                let held = (free as u64 / u64::from(rcv_mss)) as u32;
                // No window without scaling passes 65535 B: where the free
                // space reaches that, no buffer gives more (the mss-clamp
                // lab, rerun with the buffer advised, was told to double it).
                let most = match window_scaling {
                    true => u32::MAX,
                    false => advice::unscaled_segments(rcv_mss),
                };
                let segments = (wanted.div_ceil(u64::from(rcv_mss)) as u32)
                    .max(held + 1)
                    .min(most);
                // What the buffer withheld from windows on average (data
                // queued, space above the soft cap), and at least two
                // segments: the cap grows only to the free space with the
                // segment being received queued, whose truesize (up to
                // about twice its payload) the trace does not carry.
                let withheld = (withheld as u64).max(2 * u64::from(rcv_mss));
                if segments > held {
                    let receiver = advice::ReceiverBuffer {
                        space_rule: ratio,
                        rcv_wscale: wscale,
                        largest_rcvbuf,
                        rmem_max: cfg.rmem_max,
                    };
                    advice.extend(advice::receive_buffer(
                        target, segments, rcv_mss, withheld, receiver,
                    ));
                }
            }
            // Where the reads set the rate, no ceiling of window over srtt:
            // the windows opened at the reader's pace, and srtt, which only
            // acknowledged data updates, did not see the ACKs held meanwhile
            // (sws-stall: "allowed at most 109 Mb/s" at srtt 106 µs beside
            // 2.6 Mb/s and alerts at srtt 10 ms).
            advice.extend(match &window.send {
                _ if reads_set_the_rate => None,
                Some(send) => advice::send_ceiling(send),
                // A traced sender's own, from its ACKs, is the connection's:
                // this one's srtt is the sender's latest (mss-mismatch: 2.02
                // Gb/s at srtt 71 µs here, beside 3.83 at its ACKs' 37 µs).
                None if peer.traced => None,
                None => advice::throughput_ceiling(
                    window.receive.mean_advertised as u64,
                    srtt_now,
                    window.receive.received_bps,
                ),
            });
            // The kernel rounds to the MSS only unscaled windows; a scaled
            // one is aligned to 1 << wscale, which no MTU changes. And only
            // where the rounding lost enough to be flagged: the rwnd-limited
            // lab, 1.2 % lost, was told of an MTU of 1517.
            // An MSS under what both ends' MTUs give was set by something
            // else: the sender's bound to half the largest window it has
            // seen when it synced its MSS (`tcp_bound_to_half_wnd()`: a 4 KiB
            // receive buffer at MTU 9000 gave MSS 2048, and the advice was
            // an MTU of 2961), TCP_MAXSEG, the path's MTU. No MTU mends it.
            // Without the sender's own MSS, the receiver's estimate of it
            // says nothing of this. Nor does an MSS the writes never fill
            // (mss-mismatch's 8948 B writes, MSG_EOR, under an MSS of 8960).
            let mtu_mss = u32::from(advmss.min(sender_advmss.unwrap_or(advmss)));
            let mtu_sets_mss =
                sender_mss.is_none_or(|mss| mss >= mtu_mss) && segment >= effective_sender_mss;
            if rounding_flagged
                && !reader_bound
                && mtu_sets_mss
                && effective_sender_mss > 0
                && wscale == 0
            {
                // Header overhead of the MTU: what the data's own headers
                // took, where its receiver is traced; else IP and TCP
                // headers and the 12 B of timestamps Linux negotiates by
                // default. Neither MSS tells: the kernel takes the
                // timestamps out of advmss and mss_cache alike.
                let headers = match header_bytes {
                    0 => advice::Headers::WithTimestamps(
                        match flow.ends {
                            Some((SocketAddr::V6(_), _)) => 60,
                            _ => 40,
                        } + TIMESTAMP_OPTION_BYTES,
                    ),
                    seen => advice::Headers::Seen(u32::from(seen)),
                };
                // Unscaled: segments fill at most the 65535 B a header carries.
                advice.extend(advice::mtu_choices(
                    free as u64,
                    advice::UNSCALED_WINDOW_MAX,
                    effective_sender_mss,
                    headers,
                    tails,
                ));
            }
        }
        let (src, dst) = flow.ends.map_or((String::new(), String::new()), |(l, r)| {
            (addr_text(&l), addr_text(&r))
        });
        FlowWindowReport {
            sock_cookie: flow.cookie,
            src,
            dst,
            peer_cookie,
            first_ns: flow.first_ns,
            last_ns: flow.last_ns,
            mss,
            window,
            limits,
            alerts: std::mem::take(&mut flow.alerts),
            advice,
            tasks: flow.tasks.take().map_or_else(SocketTasks::default, |t| *t),
        }
    }
}

/// The latest window's loss, the cap's part and the rounding's: "; the
/// latest window: 29312 B free, 7221 B above the cap, 371 B to the rounding".
fn split_text(latest: &Classified) -> String {
    if latest.class != WindowClass::MssRounded || latest.above_ssthresh == 0 {
        return String::new();
    }
    let rounding = latest.lost - latest.above_ssthresh;
    let sel = &latest.selection;
    let rounded = round_down_to(sel.offerable.max(0) as u64, sel.mss.max(0) as u64);
    let how = match sel.rule {
        // An offer made under an earlier cap or rcv_mss: the rounding's
        // arithmetic does not give it, the hysteresis does.
        Rule::KeptPrevious if u64::from(sel.proposed) != rounded => format!(
            "to the rounding's hysteresis (the previous offer, {} B, is kept while within \
             rcv_mss {} below the cap; rounding would offer {rounded} B)",
            sel.proposed, sel.mss
        ),
        _ => "to the rounding".to_string(),
    };
    format!(
        "; the latest window: {} B free, {} B above the cap, {rounding} B {how}",
        latest.free, latest.above_ssthresh,
    )
}

/// A stall in words: how long the window stayed below one MSS, and what
/// went through meanwhile.
fn stall_summary(s: &SwsStall) -> String {
    let delivered_rate = bps(s.bytes_delivered as f64, s.duration_ns as f64 / 1000.0)
        .map_or(String::new(), |b| format!(" ({})", rate(b)));
    format!(
        "window below one MSS ({} B) for {:.1} ms{}: {} zero-window probes, {} sub-MSS segments, {} B delivered{delivered_rate}",
        s.mss,
        s.duration_ns as f64 / 1e6,
        if s.ended { "" } else { " so far" },
        s.zero_window_probes,
        s.sub_mss_segments,
        s.bytes_delivered,
    )
}

#[cfg(test)]
mod tests;
