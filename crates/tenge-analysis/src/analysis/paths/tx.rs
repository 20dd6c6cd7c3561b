//! TX: app write → TCP → qdisc → driver.
//!
//! Bytes are tied to their write by sequence number: `tcp_sendmsg_locked`
//! gives `write_seq` at the start of each copy iteration, so byte `b` was
//! written by the latest iteration whose `write_seq` is not after `b`. The
//! skb at `net_dev_queue` is TCP's clone, never the skb sendmsg saw, so
//! addresses are useless across that hop; from the queue on, an skb is
//! followed by flow and sequence (the address only breaks ties, as software
//! GSO after the qdisc makes new skbs).
//!
//! A GSO skb of `gso_segs` segments counts as that many packets: each segment
//! has its own write time and hold class; the qdisc and driver stages are the
//! skb's and apply to all of them.
//!
//! With sampling a segment counts when its first byte is kept
//! ([`sampled_byte`]), the byte its write is looked up by: the kernel then
//! kept the copy iteration that wrote it (whose range covers it) and every skb
//! holding it, down to the GSO piece at the driver. Each segment is kept with
//! probability 1/N, so counts scale by N.

use super::stats::{hold, PathId, TX_STAGE_DRIVER, TX_STAGE_QDISC, TX_STAGE_TCP};
use super::{seq_after, seq_before, Ctx};
use crate::event::{after_ack, tcp_flags, tt_pkt, tt_sendmsg, tt_tcp_rcv, tt_window_adv};
use crate::event::{packets_out_after_ack, sampled_byte, segment_size, window_holds};
use std::collections::VecDeque;

/// One `tcp_sendmsg_locked` iteration.
#[derive(Clone, Copy, Debug)]
struct Write {
    write_seq: u32,
    ts_ns: u64,
    /// The flow's [`WindowHeld`] time then.
    window_held_ns: u64,
    /// A segment under the MSS sent earlier was not yet acknowledged then:
    /// Nagle's algorithm holds a small segment behind it.
    behind_small: bool,
}

const HOLDS: usize = 7;

/// How soon after the ACK that acknowledged the small segment before it a
/// segment Nagle held leaves: TCP sends it as it takes in that ACK, a few µs
/// natively; under emulation (the matrix's 6.1 guest) 50 µs did not hold.
/// A pacing timer that fires within it is rare.
const NAGLE_RELEASE_NS: u64 = 1_000_000;

/// An skb between `net_dev_queue` and `net_dev_xmit`.
#[derive(Clone, Copy, Debug)]
struct QueuedSkb {
    /// Its first sampled segment's first byte, which the driver's piece holds.
    seq: u32,
    skb: u64,
    cpu: u32,
    queued_ns: u64,
    /// The piece that reached the driver: its time, address and CPU.
    start_ns: u64,
    start_skb: u64,
    start_cpu: u32,
    /// Sampled segments per hold class.
    segments: [u16; HOLDS],
    /// Sampled segments whose TCP stage was measured.
    tcp_measured: u16,
}

/// What the sender had done when the window was sampled.
#[derive(Clone, Copy)]
struct Sender {
    /// Sent up to here (`snd_nxt`, or the end of the new data being sent).
    sent: u32,
    /// Written up to here (`write_seq`).
    written: u32,
    mss: u32,
    /// `packets_out` reached `snd_cwnd`.
    cwnd_full: bool,
}

impl Sender {
    /// As an ACK found it, before TCP took it in.
    fn at_ack(b: &tt_tcp_rcv) -> Sender {
        Sender {
            sent: b.snd_nxt,
            written: b.write_seq,
            mss: b.mss_cache,
            cwnd_full: b.snd_cwnd > 0 && b.packets_out >= b.snd_cwnd,
        }
    }

    /// As a write finds it: what the write has still to copy (`msg_left`)
    /// counts as written, pushed into the window as the write finds it.
    fn at_write(b: &tt_sendmsg) -> Sender {
        Sender {
            sent: b.snd_nxt,
            written: b.write_seq.wrapping_add(b.msg_left),
            mss: b.mss_cache,
            cwnd_full: b.snd_cwnd > 0 && b.packets_out >= b.snd_cwnd,
        }
    }

    /// As it sends a segment: `snd_nxt` and `packets_out` do not count the
    /// skb yet.
    fn at_send(b: &tt_window_adv) -> Sender {
        let end = b.seq.wrapping_add(b.len);
        let new_data = seq_after(end, b.snd_nxt);
        let segs = match new_data {
            true => u32::from(b.gso_segs).max(1),
            false => 0,
        };
        Sender {
            sent: if new_data { end } else { b.snd_nxt },
            written: b.write_seq,
            mss: b.mss_cache,
            cwnd_full: b.snd_cwnd > 0 && b.packets_out.saturating_add(segs) >= b.snd_cwnd,
        }
    }
}

/// How long the peer's window has held the sender back: the time after
/// each sample of it (an ACK's state before TCP took it in, a send, a
/// write) at which it was used up ([`window_holds`]) and the congestion
/// window open (`tcp_write_xmit()` tests cwnd first: with both used up, cwnd
/// holds). The kernel's rwnd_limited chrono, measured on the events: a
/// segment's share of it between its write and its send is how long the
/// window, not cwnd or pacing, kept it waiting.
#[derive(Clone, Copy, Default)]
struct WindowHeld {
    /// The last sample's time, and whether the window held the sender then.
    since_ns: u64,
    holding: bool,
    /// The time held up to `since_ns`.
    total_ns: u64,
}

impl WindowHeld {
    /// The window ended at `end` at `ts_ns`, as `sender` found it.
    fn saw(&mut self, ts_ns: u64, end: u32, sender: Sender) {
        self.total_ns = self.at(ts_ns);
        self.since_ns = self.since_ns.max(ts_ns);
        self.holding =
            !sender.cwnd_full && window_holds(end, sender.sent, sender.written, sender.mss);
    }

    /// The time held up to `ts_ns`.
    fn at(&self, ts_ns: u64) -> u64 {
        match self.holding {
            true => self
                .total_ns
                .saturating_add(ts_ns.saturating_sub(self.since_ns)),
            false => self.total_ns,
        }
    }

    /// Nothing is traced for a while: no time counts until the next sample.
    fn pause(&mut self) {
        self.holding = false;
    }
}

#[derive(Default)]
pub struct TxFlow {
    writes: VecDeque<Write>,
    /// End of the newest data handed to the device layer, which the qdisc
    /// may still refuse (then TCP queues it again).
    queued_upto: Option<u32>,
    queued: VecDeque<QueuedSkb>,
    window_held: WindowHeld,
    small: SmallSegment,
    /// `tp->nonagle` as the latest ACK found it: 0 where Nagle's algorithm
    /// may hold (and in files from before it was recorded).
    nonagle: u8,
}

/// The newest segment of new data under the MSS sent (the kernel's
/// `snd_sml`, which `tcp_minshall_check()` tests), and the ACK that
/// acknowledged it. Nagle's algorithm (`tcp_nagle_check()`) holds a segment
/// under the MSS while such a segment is unacknowledged, and TCP sends it as
/// it takes in the ACK: against the peer's delayed ACK, 40 ms or more per
/// small write.
#[derive(Clone, Copy, Default)]
struct SmallSegment {
    /// Its end; None before the first.
    end: Option<u32>,
    /// When an ACK first covered it; None while unacknowledged.
    acked_ns: Option<u64>,
}

impl SmallSegment {
    /// Unacknowledged when the peer had acknowledged up to `una`.
    fn unacked(&self, una: u32) -> bool {
        self.end.is_some_and(|end| seq_after(end, una))
    }

    /// An ACK took the peer's acknowledgment to `una` at `ts_ns`.
    fn on_ack(&mut self, ts_ns: u64, una: u32) {
        if self.acked_ns.is_none() && self.end.is_some() && !self.unacked(una) {
            self.acked_ns = Some(ts_ns);
        }
    }

    /// A segment of new data `[seq, seq + len)` in `segs` segments of `mss` was sent.
    fn on_send(&mut self, seq: u32, len: u32, segs: u32, mss: u32) {
        if len < segs.saturating_mul(mss) {
            *self = SmallSegment {
                end: Some(seq.wrapping_add(len)),
                acked_ns: None,
            };
        }
    }

    /// The ACK that acknowledged it came before `write_ns`'s write was
    /// sent at `ts_ns`, within `prompt_ns` of the send: what TCP sends as
    /// it takes in an ACK.
    fn released(&self, write_ns: u64, ts_ns: u64, prompt_ns: u64) -> bool {
        self.acked_ns
            .is_some_and(|acked| write_ns < acked && ts_ns.saturating_sub(acked) <= prompt_ns)
    }
}

/// Makes room in a full queue of writes: every second one of its newer half
/// goes, its bytes then taken for those of the write before it (the same
/// writer's, moments earlier); the older half, whose bytes leave next, keeps
/// every write. Dropping the oldest instead lost exactly those: iperf3 -l 100
/// over loopback, 99 % rwnd-limited with megabytes of 100-byte writes unsent,
/// read 97 % of its segments `write_unseen`. How many went.
fn merge_newer_pairs(writes: &mut VecDeque<Write>) -> u64 {
    let (before, mut i) = (writes.len(), 0);
    writes.retain(|_| {
        i += 1;
        i <= before / 2 || (i - before / 2) % 2 == 1
    });
    (before - writes.len()) as u64
}

impl TxFlow {
    pub fn on_sendmsg(&mut self, ts_ns: u64, body: &tt_sendmsg, ctx: &mut Ctx) {
        let write = Write {
            write_seq: body.write_seq,
            ts_ns,
            window_held_ns: self.window_held.at(ts_ns),
            behind_small: self.small.unacked(body.snd_una),
        };
        // A write samples the window too. Sampled at ACKs and sends alone,
        // a window used up by a send that emptied the queue read as open
        // until the next of them, however long the writes after it waited
        // in it: 3 flows over loopback, rcvbuf 48K, the kernel rwnd-limited
        // 98-100 % of busy time, had 35-69 % of their segments
        // held_pacing_tsq, waits 12-15 % window (97-98 % held_rwnd with the
        // writes sampled). Files from before writes carried cwnd: not sampled.
        if body.snd_cwnd > 0 {
            let end = body.snd_una.wrapping_add(body.snd_wnd);
            self.window_held.saw(ts_ns, end, Sender::at_write(body));
        }
        // An iteration that waited for memory fires again with the same
        // write_seq; the copy follows the later one.
        match self.writes.back_mut() {
            Some(last) if last.write_seq == write.write_seq => *last = write,
            _ => {
                if self.writes.len() >= ctx.cfg.max_pending_per_flow {
                    ctx.counters.evictions.writes_merged += merge_newer_pairs(&mut self.writes);
                }
                self.writes.push_back(write);
            }
        }
    }

    /// A segment (an ACK) reached TCP: `tcp_probe` gives the window as it
    /// was until then, before TCP took the segment in; the ACK's own window
    /// holds from then on. Without it the wait for the next send counted as
    /// held by a window the ACK had opened: behind a token bucket, where TSQ
    /// held the sender then, 87 % of the segments were held_rwnd beside the
    /// kernel's rwnd_limited 29 % of the time.
    pub fn on_ack(&mut self, ts_ns: u64, body: &tt_tcp_rcv) {
        let sender = Sender::at_ack(body);
        let end = body.snd_una.wrapping_add(body.snd_wnd);
        self.window_held.saw(ts_ns, end, sender);
        if body.tcp_flags & tcp_flags::ACK != 0 {
            let (una, window) = after_ack(body);
            let after = Sender {
                cwnd_full: body.snd_cwnd > 0 && packets_out_after_ack(body) >= body.snd_cwnd,
                ..sender
            };
            self.window_held.saw(ts_ns, una.wrapping_add(window), after);
            self.small.on_ack(ts_ns, una);
        }
        self.nonagle = body.nonagle;
    }

    pub fn on_queue(
        &mut self,
        ts_ns: u64,
        skb: u64,
        cpu: u32,
        body: &tt_window_adv,
        ctx: &mut Ctx,
    ) {
        let end = body.snd_una.wrapping_add(body.snd_wnd);
        self.window_held.saw(ts_ns, end, Sender::at_send(body));
        self.forget_sent_writes(body.snd_nxt);
        if body.len == 0 {
            return;
        }
        // tcp_transmit_skb() runs before snd_nxt advances past new data.
        let retransmit = seq_before(body.seq, body.snd_nxt);
        let segs = (body.gso_segs as u32).max(1);
        let seg_len = segment_size(body);
        let mut queued = QueuedSkb {
            seq: body.seq,
            skb,
            cpu,
            queued_ns: ts_ns,
            start_ns: 0,
            start_skb: 0,
            start_cpu: 0,
            segments: [0; HOLDS],
            tcp_measured: 0,
        };
        let binding = binding_limit(body, segs);
        // tcp_nagle_test() holds only single segments under the MSS, never a
        // FIN, and only the write queue's last: tcp_write_xmit() pushes the
        // others (TCP_NAGLE_PUSH); tcp_nagle_check() not with TCP_NODELAY or
        // TCP_CORK (nonagle). mss-mismatch's 8948 B writes under an MSS of
        // 8960, TCP_NODELAY, were "held by Nagle".
        let nagle_may_hold = self.nonagle == 0
            && segs == 1
            && body.len < body.mss_cache
            && body.tcp_flags & tcp_flags::FIN == 0
            && body.seq.wrapping_add(body.len) == body.write_seq;
        let mut offset = 0;
        // The kernel's segment count bounds the pieces (the last takes the
        // rest): a damaged length or size costs no more than it.
        for piece in 1..=segs {
            if offset >= body.len {
                break;
            }
            let seq = body.seq.wrapping_add(offset);
            let len = match piece == segs {
                true => body.len - offset,
                false => seg_len.max(1).min(body.len - offset),
            };
            offset += len;
            if !sampled_byte(seq, ctx.cfg.byte_every()) {
                continue;
            }
            // Followed to the driver by a kept byte: the GSO piece holding it is kept.
            if queued.segments.iter().all(|&n| n == 0) {
                queued.seq = seq;
            }
            let (class, waited) =
                self.classify(seq, ts_ns, retransmit, binding, nagle_may_hold, ctx);
            ctx.rec.path(PathId::tx(class), |acc| {
                acc.packets += 1;
                if let Some(ns) = waited {
                    acc.stages[TX_STAGE_TCP].record(ns, 1);
                }
            });
            if let Some(ns) = waited {
                let span = (ts_ns - ns, ts_ns);
                ctx.rec.span(PathId::tx(class), TX_STAGE_TCP, span, 1, seq);
            }
            ctx.counters.tx_packets += 1;
            let segments = &mut queued.segments[class as usize];
            *segments = segments.saturating_add(1);
            if waited.is_some() {
                queued.tcp_measured += 1;
            }
        }
        if !retransmit {
            self.small.on_send(body.seq, body.len, segs, body.mss_cache);
            let end = body.seq.wrapping_add(body.len);
            if self.queued_upto.is_none_or(|upto| seq_after(end, upto)) {
                self.queued_upto = Some(end);
            }
        }
        if queued.segments.iter().any(|&n| n > 0) {
            if self.queued.len() >= ctx.cfg.max_pending_per_flow {
                self.queued.pop_front();
                ctx.counters.evictions.capacity += 1;
            }
            self.queued.push_back(queued);
        }
    }

    /// The hold class of a segment starting at `seq`, queued at `ts_ns` in
    /// an skb whose `binding` limit is known, and how long it waited in TCP
    /// since its first byte was written. A segment that waited at least as
    /// long while the peer's window held the sender as while anything else
    /// did (a zero window reopened wide by a slow reader's read, then
    /// pacing) was held by the window, whatever sent it at last. One that
    /// `nagle_may_hold`, written while a small segment was unacknowledged
    /// and sent as the ACK of it came in, was held by Nagle's algorithm:
    /// with the pipe drained to that ACK, neither TSQ nor autocork holds.
    fn classify(
        &self,
        seq: u32,
        ts_ns: u64,
        retransmit: bool,
        binding: u8,
        nagle_may_hold: bool,
        ctx: &Ctx,
    ) -> (u8, Option<u64>) {
        if retransmit {
            return (hold::RETRANSMIT, None);
        }
        let Some(write) = self.write_of(seq) else {
            return (hold::WRITE_UNSEEN, None);
        };
        let waited = ts_ns.saturating_sub(write.ts_ns);
        let for_window = self
            .window_held
            .at(ts_ns)
            .saturating_sub(write.window_held_ns);
        let class = if waited <= ctx.cfg.held_after_ns {
            hold::AT_ONCE
        } else if for_window.saturating_mul(2) >= waited {
            hold::RWND
        } else if binding == hold::PACING_TSQ
            && nagle_may_hold
            && write.behind_small
            && self.small.released(write.ts_ns, ts_ns, NAGLE_RELEASE_NS)
        {
            hold::NAGLE
        } else {
            binding
        };
        (class, Some(waited))
    }

    /// The latest write whose `write_seq` is not after `seq`.
    fn write_of(&self, seq: u32) -> Option<&Write> {
        let i = self
            .writes
            .partition_point(|w| !seq_after(w.write_seq, seq));
        i.checked_sub(1).map(|i| &self.writes[i])
    }

    /// Drops writes all of whose bytes TCP has sent, as the kernel counts
    /// them (`snd_nxt`; kept: the last one, whose bytes may continue). Not
    /// by the skbs queued: one the qdisc refuses (a full token bucket) is
    /// queued again, snd_nxt where it was, and its writes forgotten at the
    /// first attempt made it `write_unseen` (1-3 % of a flow's segments).
    fn forget_sent_writes(&mut self, snd_nxt: u32) {
        while self.writes.len() >= 2 && !seq_after(self.writes[1].write_seq, snd_nxt) {
            self.writes.pop_front();
        }
    }

    pub fn on_start_xmit(&mut self, ts_ns: u64, skb: u64, cpu: u32, pkt: &tt_pkt) {
        if pkt.len == 0 {
            return;
        }
        let covers = |q: &QueuedSkb| q.start_ns == 0 && seq_within(q.seq, pkt.seq, pkt.len);
        let same_skb = self
            .queued
            .iter()
            .position(|q| covers(q) && q.skb == skb && q.cpu == cpu);
        if let Some(i) = same_skb.or_else(|| self.queued.iter().position(covers)) {
            let q = &mut self.queued[i];
            (q.start_ns, q.start_skb, q.start_cpu) = (ts_ns, skb, cpu);
        }
    }

    pub fn on_xmit(&mut self, ts_ns: u64, skb: u64, cpu: u32, pkt: &tt_pkt, ctx: &mut Ctx) {
        if pkt.len == 0 {
            return;
        }
        let Some(i) = self.queued.iter().position(|q| {
            q.start_ns != 0
                && q.start_skb == skb
                && q.start_cpu == cpu
                && seq_within(q.seq, pkt.seq, pkt.len)
        }) else {
            return;
        };
        let q = self.queued.remove(i).expect("index from position");
        if pkt.rc != 0 {
            ctx.counters.evictions.driver_error += 1;
            return;
        }
        for (class, &n) in q.segments.iter().enumerate().filter(|(_, &n)| n > 0) {
            let (path, n) = (PathId::tx(class as u8), u64::from(n));
            let qdisc = (q.queued_ns, q.start_ns.max(q.queued_ns));
            let driver = (q.start_ns, ts_ns.max(q.start_ns));
            ctx.rec.path(path, |acc| {
                acc.stages[TX_STAGE_QDISC].record(qdisc.1 - qdisc.0, n);
                acc.stages[TX_STAGE_DRIVER].record(driver.1 - driver.0, n);
            });
            ctx.rec.span(path, TX_STAGE_QDISC, qdisc, n, q.seq);
            ctx.rec.span(path, TX_STAGE_DRIVER, driver, n, q.seq);
        }
        ctx.counters.tx_complete += q.tcp_measured as u64;
    }

    /// A drop of an skb (payload `[seq, seq + len)`) still between queue and driver.
    pub fn on_drop(&mut self, seq: u32, len: u32, ctx: &mut Ctx) -> bool {
        let Some(i) = self
            .queued
            .iter()
            .position(|q| seq_within(q.seq, seq, len.max(1)))
        else {
            return false;
        };
        self.queued.remove(i);
        ctx.counters.evictions.dropped += 1;
        true
    }

    pub fn expire(&mut self, now_ns: u64, ctx: &mut Ctx) {
        let stale = |since: u64, limit: u64| now_ns.saturating_sub(since) > limit;
        while self
            .queued
            .front()
            .is_some_and(|q| stale(q.queued_ns.max(q.start_ns), ctx.cfg.stale_ns))
        {
            self.queued.pop_front();
            ctx.counters.evictions.stale += 1;
        }
        // The newest write stays: its bytes may still be unsent. One whose
        // bytes were all queued is no loss.
        while self.writes.len() >= 2 && stale(self.writes[0].ts_ns, ctx.cfg.app_wait_ns) {
            self.writes.pop_front();
            if !self.all_queued(self.writes[0].write_seq) {
                ctx.counters.evictions.writes_dropped += 1;
            }
        }
    }

    /// Every byte before `seq` was handed to the device layer.
    fn all_queued(&self, seq: u32) -> bool {
        self.queued_upto.is_some_and(|upto| !seq_after(seq, upto))
    }

    /// Skbs still queued when the trace ends.
    pub fn in_flight(&self) -> u64 {
        self.queued.len() as u64
    }

    /// Forgets the skbs queued, which a pause cut off: how many.
    pub fn cut(&mut self) -> u64 {
        let n = self.in_flight();
        self.queued.clear();
        self.window_held.pause();
        n
    }

    /// Nothing left that a sweep or the end of the trace would count: no
    /// skb queued, no write with bytes unqueued that could go stale (the
    /// newest one never does).
    pub fn is_settled(&self) -> bool {
        let newest_alone = match self.writes.len() {
            0 | 1 => true,
            _ => self
                .writes
                .back()
                .is_some_and(|w| self.all_queued(w.write_seq)),
        };
        self.queued.is_empty() && newest_alone
    }
}

/// What held an skb of new data until `tcp_write_xmit()` sent it, besides
/// the peer's window (which its clock, [`WindowHeld`], tells), from the
/// socket as it was when it did (net_dev_queue runs inside
/// `tcp_transmit_skb()`, before `packets_out` counts this skb): it took the
/// last of the congestion window (`tcp_cwnd_test()`: `packets_out + segs >=
/// snd_cwnd`), or else pacing, TSQ, autocork or Nagle held it. A window used
/// up by the skb as it left says nothing of its wait: behind a token bucket
/// every send used up what an ACK had opened, while TSQ held the sender 71 %
/// of the time and the window 29 % (the kernel's chrono), and 87 % of the
/// segments were called held_rwnd.
fn binding_limit(body: &tt_window_adv, segs: u32) -> u8 {
    match body.snd_cwnd > 0 && body.packets_out.saturating_add(segs) >= body.snd_cwnd {
        true => hold::CWND,
        false => hold::PACING_TSQ,
    }
}

/// `seq` lies in `[start, start + len)`.
fn seq_within(seq: u32, start: u32, len: u32) -> bool {
    !seq_before(seq, start) && seq_before(seq, start.wrapping_add(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_holds_while_used_up_with_more_written() {
        let sender = |sent, written| Sender {
            sent,
            written,
            mss: 100,
            cwnd_full: false,
        };
        let mut w = WindowHeld::default();
        // Used up (under an MSS of 100 past what was sent), more written.
        w.saw(10, 1050, sender(1000, 20_000));
        assert_eq!(w.at(25), 15);
        // Ahead of what was sent by more than an MSS: cwnd or pacing hold it.
        w.saw(30, 5000, sender(1000, 20_000));
        assert_eq!(w.at(100), 20);
        // Used up with nothing more written: nothing waits on it.
        w.saw(110, 6000, sender(6000, 6000));
        assert_eq!(w.at(200), 20);
        // Under an MSS of room, but room for the 30 B written: they leave.
        w.saw(200, 6050, sender(6000, 6030));
        assert_eq!(w.at(210), 20);
        // 40 B written past the 50 B of room: the window holds them.
        w.saw(210, 6050, sender(6000, 6090));
        assert_eq!(w.at(220), 30);
        // Used up with cwnd full too: cwnd holds, as the kernel counts it.
        let cwnd_full = Sender {
            cwnd_full: true,
            ..sender(6000, 9000)
        };
        w.saw(220, 6000, cwnd_full);
        assert_eq!(w.at(300), 30);
        w.saw(300, 6000, sender(6000, 9000));
        w.pause();
        assert_eq!(w.at(500), 30);
        // Across the sequence space's wrap.
        let mut w = WindowHeld::default();
        w.saw(10, u32::MAX - 10, sender(u32::MAX - 50, 500));
        assert_eq!(w.at(40), 30);
    }

    #[test]
    fn a_full_queue_merges_pairs_of_its_newer_half() {
        let write = |k: u32| Write {
            write_seq: k * 100,
            ts_ns: u64::from(k),
            window_held_ns: 0,
            behind_small: false,
        };
        let mut writes: VecDeque<Write> = (0..11).map(write).collect();
        assert_eq!(merge_newer_pairs(&mut writes), 3);
        let kept: Vec<u64> = writes.iter().map(|w| w.ts_ns).collect();
        assert_eq!(kept, [0, 1, 2, 3, 4, 5, 7, 9]);
    }
}
