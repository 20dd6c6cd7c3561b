//! What holds a sender back, over time: the receive window, the congestion
//! window, the send buffer or the application; from the sender's per-event
//! state, cross-checked with the kernel's own chrono counters.

use crate::event::{after_ack, packets_out_after_ack, tcp_flags, window_holds};
use crate::event::{tt_sendmsg, tt_tcp_rcv, tt_window_adv};
use serde::Serialize;

/// The sender state the limit tests read, merged from every event that carries part of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct SenderState {
    pub snd_una: u32,
    pub snd_nxt: u32,
    pub snd_wnd: u32,
    pub snd_cwnd: u32,
    pub mss_cache: u32,
    pub packets_out: u32,
    pub sacked_out: u32,
    pub lost_out: u32,
    pub retrans_out: u32,
    pub write_seq: u32,
    pub sk_wmem_queued: u32,
    pub sk_sndbuf: u32,
}

/// Bytes between two sequence numbers, 0 when `to` is not after `from`.
pub(super) fn seq_gap(from: u32, to: u32) -> u32 {
    (to.wrapping_sub(from) as i32).max(0) as u32
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Limit {
    /// Nothing queued nor in flight: not part of the busy time.
    Idle,
    Rwnd,
    Cwnd,
    Sndbuf,
    App,
    /// Busy and none of the above: sending as fast as it may (pacing, the network).
    Unlimited,
}

const BUSY_LIMITS: [Limit; 5] = [
    Limit::Rwnd,
    Limit::Cwnd,
    Limit::Sndbuf,
    Limit::App,
    Limit::Unlimited,
];

impl SenderState {
    /// The kernel's tests, in this order: rwnd ([`window_holds`], as
    /// `tcp_snd_wnd_test` fails), cwnd
    /// (`tcp_packets_in_flight ≥ snd_cwnd`), then with nothing unsent sndbuf
    /// (`sk_wmem_queued ≥ sk_sndbuf`: the writer sleeps in
    /// `sk_stream_wait_memory`) while the peer's window would take another
    /// segment (else the window, which the buffer waits on, is the limit),
    /// or the application.
    pub fn limit(&self) -> Limit {
        if self.write_seq == self.snd_una {
            return Limit::Idle;
        }
        let unsent = seq_gap(self.snd_nxt, self.write_seq);
        let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
        let window_left = wnd_end.wrapping_sub(self.snd_nxt) as i32;
        let in_flight = (self.packets_out.saturating_add(self.retrans_out))
            .saturating_sub(self.sacked_out.saturating_add(self.lost_out));
        if window_holds(wnd_end, self.snd_nxt, self.write_seq, self.mss_cache) {
            Limit::Rwnd
        } else if self.snd_cwnd > 0 && in_flight >= self.snd_cwnd {
            Limit::Cwnd
        } else if unsent > 0 {
            Limit::Unlimited
        } else if self.sk_sndbuf > 0 && self.sk_wmem_queued >= self.sk_sndbuf {
            if window_left < self.mss_cache as i32 {
                Limit::Rwnd
            } else {
                Limit::Sndbuf
            }
        } else {
            Limit::App
        }
    }

    pub fn merge_tcp_rcv(&mut self, r: &tt_tcp_rcv) {
        *self = SenderState {
            snd_una: r.snd_una,
            snd_nxt: r.snd_nxt,
            snd_wnd: r.snd_wnd,
            snd_cwnd: r.snd_cwnd,
            mss_cache: r.mss_cache,
            packets_out: r.packets_out,
            sacked_out: r.sacked_out,
            lost_out: r.lost_out,
            retrans_out: r.retrans_out,
            write_seq: r.write_seq,
            sk_wmem_queued: r.sk_wmem_queued,
            sk_sndbuf: r.sk_sndbuf,
        };
    }

    /// What the ACK in `r` (merged) changes once processed: `snd_una`, the
    /// window and the flight.
    pub fn apply_ack(&mut self, r: &tt_tcp_rcv) {
        (self.snd_una, self.snd_wnd) = after_ack(r);
        self.packets_out = packets_out_after_ack(r);
        if self.packets_out == 0 {
            (self.sacked_out, self.lost_out, self.retrans_out) = (0, 0, 0);
        }
    }

    pub fn merge_window_adv(&mut self, w: &tt_window_adv) {
        // A SYN's sequence number counts as unsent while no window is known
        // yet: the handshake is no send limit (the kernel's chrono does not
        // run; a SYN retransmitted for seconds read as rwnd-limited).
        if w.tcp_flags & tcp_flags::SYN != 0 {
            *self = SenderState::default();
            return;
        }
        self.snd_una = w.snd_una;
        self.snd_nxt = w.snd_nxt;
        self.snd_wnd = w.snd_wnd;
        self.snd_cwnd = w.snd_cwnd;
        self.mss_cache = w.mss_cache;
        self.packets_out = w.packets_out;
        self.write_seq = w.write_seq;
    }

    pub fn merge_sendmsg(&mut self, s: &tt_sendmsg) {
        self.snd_una = s.snd_una;
        self.snd_nxt = s.snd_nxt;
        self.write_seq = s.write_seq;
        self.sk_wmem_queued = s.sk_wmem_queued;
        self.sk_sndbuf = s.sk_sndbuf;
        // What may be sent, as the write finds it (a cwnd of 0 reads
        // nothing): else an ACK's pre-ACK flight and cwnd stand until the
        // next segment leaves (35 ms of a write into an open window after
        // an ACK of everything read as cwnd-limited: 10 out of cwnd 10).
        if s.snd_cwnd > 0 {
            self.snd_cwnd = s.snd_cwnd;
            self.snd_wnd = s.snd_wnd;
            self.mss_cache = s.mss_cache;
            self.packets_out = s.packets_out;
        }
    }
}

/// Time per limit over the last `span_ns`, in `BUCKETS` slots aligned to absolute time.
/// In C order: the slots, which an event touches only when the newest one
/// closes, last.
#[derive(Debug)]
#[repr(C)]
struct RecentWindow {
    bucket_ns: u64,
    /// Absolute index (`t / bucket_ns`) of the newest slot.
    head: u64,
    /// The newest slot, kept here until it closes: most events fall in it.
    current: [u64; 4],
    /// The other slots summed, kept as they change: every ACK reads the
    /// fractions, and summing the slots then read four cache lines per socket.
    closed: [u64; 4],
    /// Per slot: ns rwnd, cwnd, sndbuf, and all observed time; the newest
    /// one's (`head`) is in `current` until it closes. 32 bits: a slot holds
    /// at most `bucket_ns` (the times added never overlap), at most
    /// `u32::MAX` (128 bytes less per socket, 2.4 MiB for 20k).
    slots: [[u32; 4]; BUCKETS],
}

const BUCKETS: usize = 8;

impl RecentWindow {
    fn new(span_ns: u64) -> Self {
        RecentWindow {
            bucket_ns: (span_ns / BUCKETS as u64).clamp(1, u64::from(u32::MAX)),
            head: 0,
            current: [0; 4],
            closed: [0; 4],
            slots: [[0; 4]; BUCKETS],
        }
    }

    fn add(&mut self, t0: u64, t1: u64, limit: Limit) {
        let span = self.bucket_ns * BUCKETS as u64;
        let mut t = t0.max(t1.saturating_sub(span));
        let column = match limit {
            Limit::Rwnd => Some(0),
            Limit::Cwnd => Some(1),
            Limit::Sndbuf => Some(2),
            _ => None,
        };
        while t < t1 {
            let index = t / self.bucket_ns;
            if index > self.head {
                self.rotate(index);
            }
            // Saturating: a time near the end of u64 must still move `t` on.
            let end = (index + 1).saturating_mul(self.bucket_ns).min(t1);
            self.current[3] += end - t;
            if let Some(c) = column {
                self.current[c] += end - t;
            }
            t = end;
        }
    }

    /// Closes the newest slot and drops the ones that fall out of the span
    /// when slot `index` becomes the newest.
    #[inline(never)]
    fn rotate(&mut self, index: u64) {
        // At most bucket_ns each: lossless.
        let newest = std::mem::take(&mut self.current).map(|v| v.min(u32::MAX.into()) as u32);
        self.slots[(self.head % BUCKETS as u64) as usize] = newest;
        for (s, v) in self.closed.iter_mut().zip(newest) {
            *s += u64::from(v);
        }
        for skipped in (self.head + 1..=index).take(BUCKETS) {
            let old = std::mem::take(&mut self.slots[(skipped % BUCKETS as u64) as usize]);
            for (s, v) in self.closed.iter_mut().zip(old) {
                *s -= u64::from(v);
            }
        }
        self.head = index;
    }

    /// Fractions of observed time (rwnd, cwnd, sndbuf), once at least
    /// `min_observed_ns` is observed (every ACK asks, and most are turned
    /// away before dividing).
    fn fractions(&self, min_observed_ns: u64) -> Option<[f64; 3]> {
        let sum: [u64; 4] = std::array::from_fn(|c| self.closed[c] + self.current[c]);
        if sum[3] < min_observed_ns {
            return None;
        }
        let total = sum[3].max(1) as f64;
        Some([
            sum[0] as f64 / total,
            sum[1] as f64 / total,
            sum[2] as f64 / total,
        ])
    }
}

/// The kernel's `chrono_*` fields as one `tcp_rcv` event saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ChronoSample {
    pub chrono_type: u8,
    pub chrono_start: u32,
    pub chrono_stat: [u32; 3],
    pub jiffies: u32,
}

impl ChronoSample {
    pub fn of(r: &tt_tcp_rcv) -> Self {
        ChronoSample {
            chrono_type: r.chrono_type,
            chrono_start: r.chrono_start,
            chrono_stat: r.chrono_stat,
            jiffies: r.jiffies,
        }
    }

    /// `tcp_get_info_chrono_stats()`: jiffies in BUSY, RWND_LIMITED and
    /// SNDBUF_LIMITED, the running type closed at `jiffies`.
    pub fn totals(&self) -> [u64; 3] {
        let mut t = self.chrono_stat.map(u64::from);
        if (1..=3).contains(&self.chrono_type) {
            t[usize::from(self.chrono_type) - 1] +=
                u64::from(self.jiffies.wrapping_sub(self.chrono_start));
        }
        t
    }
}

/// Fractions of busy time, per limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LimitFractions {
    pub rwnd: f64,
    pub cwnd: f64,
    pub sndbuf: f64,
    pub app: f64,
    pub unlimited: f64,
}

/// Busy time spent limited by each cause, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitTimes {
    pub rwnd_ns: u64,
    pub cwnd_ns: u64,
    pub sndbuf_ns: u64,
    pub app_ns: u64,
}

impl LimitTimes {
    /// Adds another socket's times.
    pub fn add(&mut self, other: &LimitTimes) {
        self.rwnd_ns += other.rwnd_ns;
        self.cwnd_ns += other.cwnd_ns;
        self.sndbuf_ns += other.sndbuf_ns;
        self.app_ns += other.app_ns;
    }
}

/// The kernel's view (`tcp_info`): `tcpi_busy_time` is the sum of the three chronos.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KernelChrono {
    pub busy_jiffies: u64,
    pub rwnd_limited_jiffies: u64,
    pub sndbuf_limited_jiffies: u64,
    /// `HZ`, from the configuration or estimated from the trace.
    pub hz: Option<u32>,
    pub busy_ms: Option<f64>,
    /// `tcpi_rwnd_limited / tcpi_busy_time`.
    pub rwnd_fraction: f64,
    pub sndbuf_fraction: f64,
}

impl KernelChrono {
    pub fn from_totals(totals: [u64; 3], hz: Option<u32>) -> Option<Self> {
        let busy: u64 = totals.iter().sum();
        (busy > 0).then(|| KernelChrono {
            busy_jiffies: busy,
            rwnd_limited_jiffies: totals[1],
            sndbuf_limited_jiffies: totals[2],
            hz,
            busy_ms: hz.map(|hz| busy as f64 * 1000.0 / f64::from(hz)),
            rwnd_fraction: totals[1] as f64 / busy as f64,
            sndbuf_fraction: totals[2] as f64 / busy as f64,
        })
    }
}

/// Where a sender's busy time went: `rwnd`, `cwnd`, `sndbuf`, `app` and
/// `unlimited` partition it (they sum to 1; all are 0 for a socket we never
/// saw busy), in the report, `watch` and Prometheus alike.
///
/// `rwnd` and `sndbuf` are the kernel's figures (`chrono_stat`, as `tcp_info`
/// reports them) whenever the trace carried them, our own per-event estimate
/// otherwise (`source` says which). The rest of busy time, which the kernel
/// clocks as neither (`busy`: cwnd-, app- or not limited), is split between
/// `cwnd`, `app` and `unlimited` in our per-event proportions (all of it to
/// `unlimited` where we saw none of them); `kernel_minus_per_event` says how
/// far the two sources are apart on what both measure. The kernel's are the better numbers: its
/// chrono switches exactly where `tcp_write_xmit()` finds the window or the
/// buffer short, while our estimate only samples the state at the events we
/// see (an ACK arriving, a segment leaving) and assumes it held in between, so
/// a window that opens and is refilled between two events is missed. Ours is
/// kept in `per_event` because it also covers cwnd- and app-limited time, which
/// the kernel does not clock, and because a large disagreement between the
/// two points at lost events. All fractions are of busy time (data queued or in
/// flight), the kernel's denominator; idle time is reported apart.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LimitsReport {
    pub rwnd: f64,
    pub cwnd: f64,
    pub sndbuf: f64,
    pub app: f64,
    pub unlimited: f64,
    /// "kernel_chrono" or "per_event": where `rwnd` and `sndbuf` come from.
    pub source: &'static str,
    /// Where `sndbuf` comes from: "per_event" also where the kernel's chrono
    /// ran but the events saw the buffer full longer (a writer whose data
    /// left before it slept, which `SNDBUF_LIMITED` never clocks).
    pub sndbuf_source: &'static str,
    /// With the kernel's figures: kernel − per-event, for `rwnd` and `sndbuf`.
    pub kernel_minus_per_event: Option<KernelDifference>,
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub per_event: LimitFractions,
    pub kernel: Option<KernelChrono>,
}

impl LimitsReport {
    /// Whether the socket has shares: it was busy with data (see
    /// [`LimitTracker::report`]); else every share is 0.
    pub fn has_shares(&self) -> bool {
        self.rwnd + self.cwnd + self.sndbuf + self.app + self.unlimited > 0.0
    }

    pub fn shares(&self) -> LimitFractions {
        LimitFractions {
            rwnd: self.rwnd,
            cwnd: self.cwnd,
            sndbuf: self.sndbuf,
            app: self.app,
            unlimited: self.unlimited,
        }
    }
}

/// How far the kernel's chrono and our per-event estimate are apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct KernelDifference {
    pub rwnd: f64,
    pub sndbuf: f64,
}

/// What the kernel's sndbuf chrono cannot see: `SNDBUF_LIMITED` starts only
/// at a transmit that leaves nothing unsent while the writer already waits
/// for space (`tcp_cwnd_validate()`), so a writer whose data all left before
/// it slept is never clocked: SO_SNDBUF 32 KiB halves a veth transfer with
/// `tcpi_sndbuf_limited` at 0. The events see the buffer full with nothing
/// unsent; where they see it longer, theirs is the share.
fn sndbuf_share(per_event: &LimitFractions, k: &KernelChrono) -> f64 {
    k.sndbuf_fraction
        .max(per_event.sndbuf)
        .min(1.0 - k.rwnd_fraction)
}

/// The shares of busy time: the kernel's `rwnd` and `sndbuf` where it
/// measured them (`sndbuf` ours where the events saw more, see
/// [`sndbuf_share`]), the rest of busy time split as `per_event` splits it.
fn reconcile(per_event: LimitFractions, kernel: Option<&KernelChrono>) -> LimitFractions {
    let Some(k) = kernel else {
        return per_event;
    };
    let sndbuf = sndbuf_share(&per_event, k);
    let rest = (1.0 - k.rwnd_fraction - sndbuf).max(0.0);
    let ours = per_event.cwnd + per_event.app + per_event.unlimited;
    let share = |x: f64| if ours > 0.0 { x * rest / ours } else { 0.0 };
    LimitFractions {
        rwnd: k.rwnd_fraction,
        sndbuf,
        cwnd: share(per_event.cwnd),
        app: share(per_event.app),
        unlimited: if ours > 0.0 {
            share(per_event.unlimited)
        } else {
            rest
        },
    }
}

/// The kernel's chrono totals and `snd_una` at one ACK: two of them bound
/// what the kernel clocked and what was delivered in between.
#[derive(Clone, Copy, Debug, Default)]
struct Mark {
    ts_ns: u64,
    /// In 32 bits, as the kernel counts them (`chrono_stat`): 16 bytes less
    /// per mark, 2.9 MB less for 20k sockets.
    chrono: [u32; 3],
    snd_una: u32,
}

/// The least busy time, in jiffies, over which the kernel's chrono decides a
/// recent share (at HZ 250, 40 ms of a 200 ms window: one jiffy is 10 %).
/// (At 20, the events decided more windows, and said a sender limited where
/// the kernel's chrono showed 0.)
const MIN_KERNEL_JIFFIES: u64 = 10;

/// The recent window as the kernel and the wire saw it (see [`LimitTracker::recent_check`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RecentCheck {
    /// The kernel's rwnd- and sndbuf-limited shares of its busy time.
    pub kernel: Option<[f64; 2]>,
    /// The share one jiffy of that busy time makes: the chrono counts whole
    /// jiffies, so a share is known to within it.
    pub kernel_jiffy: f64,
    /// The trace carries the kernel's chrono, but it clocked under
    /// [`MIN_KERNEL_JIFFIES`] busy in the span: `kernel` is None for that.
    pub kernel_too_short: bool,
    /// The kernel's chrono clocked busy jiffies in the span, none of them
    /// rwnd_limited (a chrono that clocked nothing says nothing).
    pub kernel_no_rwnd: bool,
    /// Bytes acknowledged per second.
    pub acked_bps: Option<f64>,
    /// The span those figures cover.
    pub span_ns: u64,
}

/// Accumulates time per limit for one socket; in C order, like `RecentWindow`.
#[derive(Debug)]
#[repr(C)]
pub(super) struct LimitTracker {
    pub state: SenderState,
    last_ns: Option<u64>,
    /// ns per limit, indexed like `Limit as usize`.
    ns: [u64; 6],
    pub chrono: Option<ChronoSample>,
    recent: RecentWindow,
    /// A ring of marks, one per slot of the recent window at most, newest at `mark_next - 1`.
    marks: [Mark; BUCKETS + 1],
    mark_next: usize,
    marks_filled: usize,
    /// The largest `snd_cwnd` while the receive window held the sender back:
    /// the window that would have let the congestion window rule instead.
    pub rwnd_limited_cwnd: u32,
    /// Busy with more than a FIN unacknowledged at some time: a socket that
    /// sent only ACKs and its FIN has no shares (its FIN in flight was all
    /// its busy time: "other 100%" beside ss's busy "-" on every lab's
    /// receiver).
    had_data: bool,
}

impl LimitTracker {
    pub fn new(recent_span_ns: u64) -> Self {
        LimitTracker {
            state: SenderState::default(),
            last_ns: None,
            ns: [0; 6],
            recent: RecentWindow::new(recent_span_ns),
            chrono: None,
            marks: [Mark::default(); BUCKETS + 1],
            mark_next: 0,
            marks_filled: 0,
            rwnd_limited_cwnd: 0,
            had_data: false,
        }
    }

    /// Takes the kernel's chrono of a `tcp_rcv` event, and marks it (with
    /// `snd_una`) once per slot of the recent window.
    pub fn on_chrono(&mut self, ts_ns: u64, sample: ChronoSample) {
        self.chrono = Some(sample);
        let newest = self.marks[(self.mark_next + BUCKETS) % (BUCKETS + 1)];
        if self.marks_filled > 0 && ts_ns < newest.ts_ns + self.recent.bucket_ns {
            return;
        }
        self.marks[self.mark_next] = Mark {
            ts_ns,
            chrono: sample.totals().map(|t| t as u32),
            snd_una: self.state.snd_una,
        };
        self.mark_next = (self.mark_next + 1) % (BUCKETS + 1);
        self.marks_filled = (self.marks_filled + 1).min(BUCKETS + 1);
    }

    /// Over the last `span_ns` before `now`, from the oldest mark within it
    /// to the latest chrono: the kernel's shares and the rate acknowledged.
    /// Within it, so that what an alert says of "the last 200 ms" holds of
    /// them (from the newest mark that old, up to a slot more: 40 ms of
    /// sndbuf_limited in the slot before made 19% of 225 ms, 8% of the last
    /// 200). Only where that leaves under three quarters of the span (ACKs
    /// far apart) from the newest mark before it. At least
    /// [`MIN_KERNEL_JIFFIES`] busy: the chrono counts whole jiffies, and a
    /// few ACKs far apart must not make one jiffy a large share.
    pub fn recent_check(&self, now_ns: u64, span_ns: u64) -> RecentCheck {
        let (mut within, mut before) = (None, None);
        for age in 0..self.marks_filled {
            let mark = self.marks[(self.mark_next + BUCKETS * (age + 1)) % (BUCKETS + 1)];
            if mark.ts_ns + span_ns < now_ns {
                before = Some(mark);
                break;
            }
            within = Some(mark);
        }
        let from = match (within, before) {
            (Some(w), Some(b)) if now_ns.saturating_sub(w.ts_ns) < span_ns / 4 * 3 => Some(b),
            (w, b) => w.or(b),
        };
        let (Some(from), Some(chrono)) = (from, self.chrono) else {
            return RecentCheck::default();
        };
        let span_ns = now_ns.saturating_sub(from.ts_ns);
        let now = chrono.totals();
        let delta: [u64; 3] =
            std::array::from_fn(|i| u64::from((now[i] as u32).saturating_sub(from.chrono[i])));
        let busy: u64 = delta.iter().sum();
        let acked = self.state.snd_una.wrapping_sub(from.snd_una);
        RecentCheck {
            kernel: (busy >= MIN_KERNEL_JIFFIES)
                .then(|| [delta[1] as f64 / busy as f64, delta[2] as f64 / busy as f64]),
            kernel_jiffy: 1.0 / busy.max(1) as f64,
            kernel_too_short: busy < MIN_KERNEL_JIFFIES,
            kernel_no_rwnd: busy > 0 && delta[1] == 0,
            acked_bps: (span_ns > 0 && acked < 1 << 31)
                .then(|| f64::from(acked) * 8e9 / span_ns as f64),
            span_ns,
        }
    }

    /// Charges the time since the previous event to the current state.
    /// For `tcp_rcv` call it after merging the event's pre-ACK state, which is
    /// the state that held while the sender waited for that ACK; for segments
    /// leaving and writes, before merging (their state holds from now on).
    pub fn advance(&mut self, ts_ns: u64) {
        if let Some(last) = self.last_ns {
            if ts_ns > last {
                let limit = self.state.limit();
                let s = &self.state;
                self.had_data |=
                    seq_gap(s.snd_una, s.write_seq).max(seq_gap(s.snd_una, s.snd_nxt)) > 1;
                let ns = &mut self.ns[limit as usize];
                *ns = ns.saturating_add(ts_ns - last);
                if limit == Limit::Rwnd {
                    self.rwnd_limited_cwnd = self.rwnd_limited_cwnd.max(self.state.snd_cwnd);
                }
                self.recent.add(last, ts_ns, limit);
            }
        }
        self.last_ns = Some(self.last_ns.map_or(ts_ns, |l| l.max(ts_ns)));
    }

    /// Nothing was traced for a while: the time until the next event is
    /// charged to no limit (the kernel's chrono still counts it).
    pub fn forget_gap(&mut self) {
        self.last_ns = None;
    }

    pub fn busy_ns(&self) -> u64 {
        BUSY_LIMITS.iter().map(|&l| self.ns[l as usize]).sum()
    }

    /// Starts loading what an event touches but the recent slots.
    #[inline]
    pub fn prefetch(&self) {
        crate::flow::prefetch_span(self, &self.recent.closed);
    }

    /// Busy time charged to each limit so far: rwnd and sndbuf the kernel's
    /// chrono where the trace carries it and `hz` is known (as the report's
    /// shares), the rest our per-event figures. Each never decreases.
    pub fn limited(&self, hz: Option<u32>) -> LimitTimes {
        let kernel = self.chrono.zip(hz).map(|(c, hz)| {
            let totals = c.totals();
            let ns = |jiffies: u64| jiffies * 1_000_000_000 / u64::from(hz.max(1));
            (ns(totals[1]), ns(totals[2]))
        });
        let ours_sndbuf = self.ns[Limit::Sndbuf as usize];
        // The larger sndbuf time, as the shares take it (see `sndbuf_share`).
        let (rwnd_ns, sndbuf_ns) = kernel.map_or(
            (self.ns[Limit::Rwnd as usize], ours_sndbuf),
            |(rwnd, sndbuf)| (rwnd, sndbuf.max(ours_sndbuf)),
        );
        LimitTimes {
            rwnd_ns,
            cwnd_ns: self.ns[Limit::Cwnd as usize],
            sndbuf_ns,
            app_ns: self.ns[Limit::App as usize],
        }
    }

    /// rwnd, cwnd, sndbuf fractions over the recent window, once it covers at least `min_ns`.
    pub fn recent(&self, min_ns: u64) -> Option<[f64; 3]> {
        self.recent.fractions(min_ns)
    }

    /// The shares of busy time the report shows (see [`reconcile`]).
    pub fn shares(&self, hz: Option<u32>) -> Option<LimitFractions> {
        let r = self.report(hz);
        r.has_shares().then(|| r.shares())
    }

    pub fn report(&self, hz: Option<u32>) -> LimitsReport {
        let busy = self.busy_ns();
        let frac = |l: Limit| {
            if busy == 0 {
                0.0
            } else {
                self.ns[l as usize] as f64 / busy as f64
            }
        };
        let per_event = LimitFractions {
            rwnd: frac(Limit::Rwnd),
            cwnd: frac(Limit::Cwnd),
            sndbuf: frac(Limit::Sndbuf),
            app: frac(Limit::App),
            unlimited: frac(Limit::Unlimited),
        };
        let kernel = self
            .chrono
            .and_then(|c| KernelChrono::from_totals(c.totals(), hz));
        // A socket we never saw busy or send data (a receiver's ACKs, its
        // FIN) has no shares.
        let shares = if busy == 0 || !self.had_data {
            LimitFractions::default()
        } else {
            reconcile(per_event, kernel.as_ref())
        };
        LimitsReport {
            rwnd: shares.rwnd,
            cwnd: shares.cwnd,
            sndbuf: shares.sndbuf,
            app: shares.app,
            unlimited: shares.unlimited,
            source: if kernel.is_some() {
                "kernel_chrono"
            } else {
                "per_event"
            },
            sndbuf_source: match &kernel {
                Some(k) if busy > 0 && k.sndbuf_fraction >= per_event.sndbuf => "kernel_chrono",
                _ => "per_event",
            },
            kernel_minus_per_event: kernel.map(|k| KernelDifference {
                rwnd: k.rwnd_fraction - per_event.rwnd,
                sndbuf: k.sndbuf_fraction - per_event.sndbuf,
            }),
            busy_ns: busy,
            idle_ns: self.ns[Limit::Idle as usize],
            per_event,
            kernel,
        }
    }
}

/// `HZ` from two (time, jiffies) samples far enough apart, snapped to a
/// configurable kernel value when within 5 %.
pub(super) fn estimate_hz(first: (u64, u32), last: (u64, u32)) -> Option<u32> {
    let dt = last.0.checked_sub(first.0)?;
    if dt < 100_000_000 {
        return None;
    }
    let hz = f64::from(last.1.wrapping_sub(first.1)) * 1e9 / dt as f64;
    let snapped = [100u32, 250, 300, 1000]
        .into_iter()
        .find(|&k| (hz - f64::from(k)).abs() <= 0.05 * f64::from(k));
    Some(snapped.unwrap_or(hz.round() as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(write_seq: u32) -> SenderState {
        // 1000 B in flight of a 20000 B window, cwnd 10 with 1 packet out.
        SenderState {
            snd_una: 1000,
            snd_nxt: 2000,
            snd_wnd: 20000,
            snd_cwnd: 10,
            mss_cache: 1000,
            packets_out: 1,
            write_seq,
            sk_sndbuf: 100000,
            ..Default::default()
        }
    }

    #[test]
    fn limit_rules() {
        assert_eq!(busy(1000).limit(), Limit::Idle);
        assert_eq!(busy(2000).limit(), Limit::App); // all in flight, cwnd open
        assert_eq!(busy(9000).limit(), Limit::Unlimited); // unsent, window and cwnd open
                                                          // Window edge 1000 + 1500 − 2000 = 500 < mss 1000 with unsent data.
        assert_eq!(
            SenderState {
                snd_wnd: 1500,
                ..busy(9000)
            }
            .limit(),
            Limit::Rwnd
        );
        // ... but not when nothing is unsent.
        assert_eq!(
            SenderState {
                snd_wnd: 1500,
                ..busy(2000)
            }
            .limit(),
            Limit::App
        );
        // ... nor when what is unsent (400 B) fits the 500 B of room.
        assert_eq!(
            SenderState {
                snd_wnd: 1500,
                ..busy(2400)
            }
            .limit(),
            Limit::Unlimited
        );
        // in flight 12 + 1 − 2 − 1 = 10 ≥ cwnd 10.
        let s = SenderState {
            packets_out: 12,
            retrans_out: 1,
            sacked_out: 2,
            lost_out: 1,
            ..busy(9000)
        };
        assert_eq!(s.limit(), Limit::Cwnd);
        assert_eq!(
            SenderState {
                sk_wmem_queued: 100000,
                ..busy(2000)
            }
            .limit(),
            Limit::Sndbuf
        );
    }

    /// The flight an ACK found at cwnd is not cwnd's once the ACK is taken
    /// in: until the next send (TSQ or pacing may hold it) the sender has
    /// room in cwnd.
    #[test]
    fn an_ack_takes_what_it_acknowledges_out_of_the_flight() {
        let full = tt_tcp_rcv {
            snd_una: 1000,
            snd_nxt: 11_000,
            write_seq: 30_000,
            snd_wnd: 100_000,
            snd_cwnd: 10,
            mss_cache: 1000,
            packets_out: 10,
            ack: 5000,
            win_raw: 50_000,
            snd_wscale: 1,
            tcp_flags: tcp_flags::ACK,
            ..Default::default()
        };
        let mut s = SenderState::default();
        s.merge_tcp_rcv(&full);
        assert_eq!(s.limit(), Limit::Cwnd);
        s.apply_ack(&full);
        assert_eq!((s.snd_una, s.snd_wnd, s.packets_out), (5000, 100_000, 6));
        assert_eq!(s.limit(), Limit::Unlimited);
    }

    #[test]
    fn a_handshake_is_no_limit() {
        // The SYN as recorded leaving: its sequence number written, not yet
        // sent, and no window from the peer.
        let syn = tt_window_adv {
            tcp_flags: tcp_flags::SYN,
            snd_una: 1000,
            snd_nxt: 1000,
            write_seq: 1001,
            snd_cwnd: 10,
            mss_cache: 524,
            packets_out: 1,
            ..Default::default()
        };
        let mut s = busy(9000);
        s.merge_window_adv(&syn);
        assert_eq!(s.limit(), Limit::Idle);
        let mut s = SenderState::default();
        s.merge_window_adv(&tt_window_adv {
            tcp_flags: tcp_flags::ACK,
            ..syn
        });
        assert_eq!(s.limit(), Limit::Rwnd);
    }

    #[test]
    fn time_weighting_and_recent_window() {
        let mut t = LimitTracker::new(200_000_000);
        // 0..100 ms rwnd-limited, 100..400 ms app-limited, 400..500 ms idle.
        t.state = SenderState {
            snd_wnd: 1500,
            ..busy(9000)
        };
        t.advance(0);
        t.advance(100_000_000);
        t.state = busy(2000);
        t.advance(400_000_000);
        t.state = busy(1000);
        t.advance(500_000_000);
        let r = t.report(None);
        assert_eq!((r.busy_ns, r.idle_ns), (400_000_000, 100_000_000));
        assert_eq!((r.per_event.rwnd, r.per_event.app), (0.25, 0.75));
        assert_eq!((r.rwnd, r.source), (0.25, "per_event"));
        // The last 200 ms (8 slots of 25 ms: 300..500) hold no rwnd time.
        assert_eq!(t.recent(200_000_000).map(|f| f[0]), Some(0.0));
        assert_eq!(t.recent(200_000_001), None);
    }

    #[test]
    fn recent_window_fraction() {
        let mut w = RecentWindow::new(200);
        w.add(0, 50, Limit::App);
        w.add(50, 200, Limit::Rwnd);
        assert_eq!(w.fractions(200), Some([0.75, 0.0, 0.0]));
        assert_eq!(w.fractions(201), None);
        // 100 more units of cwnd push the first 100 out: 100 rwnd + 100 cwnd.
        w.add(200, 300, Limit::Cwnd);
        assert_eq!(w.fractions(200), Some([0.5, 0.5, 0.0]));
        // A gap longer than the span clears everything before it.
        w.add(300, 1000, Limit::App);
        assert_eq!(w.fractions(200), Some([0.0, 0.0, 0.0]));
        // Partial slots, and the running sums against the slots themselves
        // (the newest one's figures are in `current` until it closes).
        for (t0, t1, limit) in [(1010, 1033, Limit::Sndbuf), (1033, 1190, Limit::Rwnd)] {
            w.add(t0, t1, limit);
            let mut closed = [0u64; 4];
            for (k, slot) in w.slots.iter().enumerate() {
                if k as u64 != w.head % BUCKETS as u64 {
                    for (s, v) in closed.iter_mut().zip(slot) {
                        *s += u64::from(*v);
                    }
                }
            }
            assert_eq!(w.closed, closed);
        }
        // Slots 1000..1200 only: 23 sndbuf, 157 rwnd (1000..1010 was not charged);
        // the newest, 1175..1200, holds 15 of rwnd.
        assert_eq!(w.current, [15, 0, 0, 15]);
        assert_eq!(w.closed, [142, 0, 23, 165]);
        assert_eq!(w.fractions(180), Some([157.0 / 180.0, 0.0, 23.0 / 180.0]));
    }

    /// Marks every 25 ms to 200 ms; the kernel's sndbuf_limited 40 ms (10
    /// jiffies at HZ 250) between the first two, none after; busy all along.
    #[test]
    fn the_kernel_share_covers_the_last_span_only() {
        let mut t = LimitTracker::new(200_000_000);
        let ms = 1_000_000u64;
        let chrono = |busy: u32, sndbuf: u32| ChronoSample {
            chrono_stat: [busy, 0, sndbuf],
            ..ChronoSample::default()
        };
        for slot in 0..=8u32 {
            let (busy, sndbuf) = match slot {
                0 => (0, 0),
                _ => (6 * (slot - 1), 10),
            };
            t.on_chrono(u64::from(slot) * 25 * ms, chrono(busy, sndbuf));
        }
        // At 220 ms the last 200 ms, from the mark at 25, hold no
        // sndbuf-limited time; from the mark at 0 it was 10 of 52 jiffies.
        let check = t.recent_check(220 * ms, 200 * ms);
        assert_eq!(check.span_ns, 195 * ms);
        assert_eq!(check.kernel, Some([0.0, 0.0]));
        // ACKs far apart: marks at 0 and 190 ms. At 250 ms the one at 190
        // covers too little of the span, and the one at 0 gives the window.
        let mut t = LimitTracker::new(200_000_000);
        t.on_chrono(0, chrono(0, 0));
        t.on_chrono(190 * ms, chrono(40, 10));
        assert_eq!(t.recent_check(250 * ms, 200 * ms).span_ns, 250 * ms);
    }

    #[test]
    fn chrono_totals_close_the_running_type() {
        // busy 100, rwnd 40, sndbuf 5 jiffies stored; RWND_LIMITED (2) running
        // since 1000, now 1060 → rwnd 100; busy total 100 + 100 + 5 = 205.
        let c = ChronoSample {
            chrono_type: 2,
            chrono_start: 1000,
            chrono_stat: [100, 40, 5],
            jiffies: 1060,
        };
        assert_eq!(c.totals(), [100, 100, 5]);
        let k = KernelChrono::from_totals(c.totals(), Some(250)).unwrap();
        assert_eq!(k.busy_jiffies, 205);
        assert!((k.rwnd_fraction - 100.0 / 205.0).abs() < 1e-12);
        // 205 jiffies at HZ 250 = 820 ms.
        assert_eq!(k.busy_ms, Some(820.0));
        // jiffies wrap: start 0xffff_fff0, now 0x10 → 32 jiffies of BUSY.
        let c = ChronoSample {
            chrono_type: 1,
            chrono_start: 0xffff_fff0,
            chrono_stat: [0; 3],
            jiffies: 0x10,
        };
        assert_eq!(c.totals(), [32, 0, 0]);
        assert_eq!(KernelChrono::from_totals([0; 3], None), None);
    }

    #[test]
    fn kernel_figure_is_reported_when_present() {
        let mut t = LimitTracker::new(200_000_000);
        t.state = busy(9000);
        t.advance(0);
        t.advance(1_000_000);
        t.chrono = Some(ChronoSample {
            chrono_type: 1,
            chrono_start: 0,
            chrono_stat: [30, 10, 0],
            jiffies: 0,
        });
        let r = t.report(None);
        assert_eq!(
            (r.rwnd, r.per_event.rwnd, r.source),
            (0.25, 0.0, "kernel_chrono")
        );
        assert_eq!(r.per_event.unlimited, 1.0);
        // The kernel's other three quarters go where we saw the time go,
        // unlimited: the shares partition busy time.
        assert_eq!((r.cwnd, r.app, r.unlimited), (0.0, 0.0, 0.75));
        assert_eq!(r.rwnd + r.cwnd + r.sndbuf + r.app + r.unlimited, 1.0);
        let d = r.kernel_minus_per_event.unwrap();
        assert_eq!((d.rwnd, d.sndbuf), (0.25, 0.0));
    }

    /// Kernel rwnd 0.5 and sndbuf 0.1; per-event cwnd 0.2, app 0.2,
    /// unlimited 0.2 (of 0.6 not rwnd/sndbuf): the kernel's remaining 0.4
    /// splits 1:1:1.
    #[test]
    fn shares_partition_busy_time_with_the_kernels_figures() {
        let per_event = LimitFractions {
            rwnd: 0.3,
            cwnd: 0.2,
            sndbuf: 0.1,
            app: 0.2,
            unlimited: 0.2,
        };
        let kernel = KernelChrono::from_totals([40, 50, 10], None).unwrap();
        let r = reconcile(per_event, Some(&kernel));
        assert_eq!((r.rwnd, r.sndbuf), (0.5, 0.1));
        for share in [r.cwnd, r.app, r.unlimited] {
            assert!((share - 0.4 / 3.0).abs() < 1e-12, "{r:?}");
        }
        assert!((r.rwnd + r.cwnd + r.sndbuf + r.app + r.unlimited - 1.0).abs() < 1e-12);
        assert_eq!(reconcile(per_event, None), per_event);
    }

    /// SO_SNDBUF 32 KiB on veth (measured): the kernel clocks no sndbuf time,
    /// the events see the buffer full with nothing unsent 30 % of busy time.
    #[test]
    fn sndbuf_the_kernel_does_not_clock_comes_from_the_events() {
        let per_event = LimitFractions {
            rwnd: 0.0,
            cwnd: 0.0,
            sndbuf: 0.3,
            app: 0.1,
            unlimited: 0.6,
        };
        let kernel = KernelChrono::from_totals([100, 0, 0], None).unwrap();
        let r = reconcile(per_event, Some(&kernel));
        assert_eq!((r.rwnd, r.sndbuf), (0.0, 0.3));
        assert!((r.app - 0.1).abs() < 1e-12 && (r.unlimited - 0.6).abs() < 1e-12);
        // With the kernel's rwnd at 0.8, sndbuf takes no more than the rest.
        let kernel = KernelChrono::from_totals([20, 80, 0], None).unwrap();
        let r = reconcile(per_event, Some(&kernel));
        assert!((r.sndbuf - 0.2).abs() < 1e-12, "{r:?}");
        assert!((r.rwnd + r.cwnd + r.sndbuf + r.app + r.unlimited - 1.0).abs() < 1e-12);
    }

    #[test]
    fn hz_estimate() {
        // 2 s and 2003 jiffies → 1001.5 Hz, within 5 % of 1000.
        assert_eq!(estimate_hz((0, 5), (2_000_000_000, 2008)), Some(1000));
        assert_eq!(estimate_hz((0, 0), (1_000_000_000, 250)), Some(250));
        assert_eq!(estimate_hz((0, 0), (10_000_000, 10)), None);
    }
}
