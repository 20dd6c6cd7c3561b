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
use crate::event::sampled_byte;
use crate::event::{tt_pkt, tt_sendmsg, tt_tcp_rcv, tt_window_adv};
use std::collections::VecDeque;

/// What limits sending, as last seen on the socket.
#[derive(Clone, Copy, Debug, Default)]
struct SendLimits {
    snd_cwnd: u32,
    snd_wnd: u32,
    mss_cache: u32,
}

/// One `tcp_sendmsg_locked` iteration.
#[derive(Clone, Copy, Debug)]
struct Write {
    write_seq: u32,
    ts_ns: u64,
    snd_una: u32,
    limits: Option<SendLimits>,
}

const HOLDS: usize = 6;

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

#[derive(Default)]
pub struct TxFlow {
    writes: VecDeque<Write>,
    limits: Option<SendLimits>,
    /// End of the newest data handed to the device layer.
    sent_upto: Option<u32>,
    queued: VecDeque<QueuedSkb>,
}

impl TxFlow {
    pub fn on_sendmsg(&mut self, ts_ns: u64, body: &tt_sendmsg, ctx: &mut Ctx) {
        // The write's own reading of the socket, where the probe has one:
        // exact, and the same whichever ACKs sampling kept.
        if body.snd_cwnd > 0 {
            self.limits = Some(SendLimits {
                snd_cwnd: body.snd_cwnd,
                snd_wnd: body.snd_wnd,
                mss_cache: body.mss_cache,
            });
        }
        let write = Write {
            write_seq: body.write_seq,
            ts_ns,
            snd_una: body.snd_una,
            limits: self.limits,
        };
        // An iteration that waited for memory fires again with the same
        // write_seq; the copy follows the later one.
        match self.writes.back_mut() {
            Some(last) if last.write_seq == write.write_seq => *last = write,
            _ => {
                if self.writes.len() >= ctx.cfg.max_pending_per_flow {
                    self.writes.pop_front();
                    ctx.counters.evictions.writes_dropped += 1;
                }
                self.writes.push_back(write);
            }
        }
    }

    /// An ACK reached the sender: `tcp_probe` shows the state before it is
    /// processed, so take the window the ACK carries.
    pub fn on_ack(&mut self, body: &tt_tcp_rcv) {
        self.limits = Some(SendLimits {
            snd_cwnd: body.snd_cwnd,
            snd_wnd: (body.win_raw as u32) << body.snd_wscale,
            mss_cache: body.mss_cache,
        });
    }

    pub fn on_queue(
        &mut self,
        ts_ns: u64,
        skb: u64,
        cpu: u32,
        body: &tt_window_adv,
        ctx: &mut Ctx,
    ) {
        self.limits = Some(SendLimits {
            snd_cwnd: body.snd_cwnd,
            snd_wnd: body.snd_wnd,
            mss_cache: body.mss_cache,
        });
        if body.len == 0 {
            return;
        }
        // tcp_transmit_skb() runs before snd_nxt advances past new data.
        let retransmit = seq_before(body.seq, body.snd_nxt);
        let segs = (body.gso_segs as u32).max(1);
        let seg_len = match (segs, body.gso_size) {
            (1, _) => body.len,
            (_, 0) => body.len.div_ceil(segs),
            (_, size) => size as u32,
        };
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
        let mut offset = 0;
        while offset < body.len {
            let seq = body.seq.wrapping_add(offset);
            let len = seg_len.min(body.len - offset);
            offset += len;
            if !sampled_byte(seq, ctx.cfg.sample_every) {
                continue;
            }
            // Followed to the driver by a kept byte: the GSO piece holding it is kept.
            if queued.segments.iter().all(|&n| n == 0) {
                queued.seq = seq;
            }
            let (class, waited) = self.classify(seq, len, ts_ns, retransmit, ctx.cfg.held_after_ns);
            ctx.rec.path(PathId::tx(class), |acc| {
                acc.packets += 1;
                if let Some(ns) = waited {
                    acc.stages[TX_STAGE_TCP].record(ns, 1);
                }
            });
            ctx.counters.tx_packets += 1;
            queued.segments[class as usize] += 1;
            if waited.is_some() {
                queued.tcp_measured += 1;
            }
        }
        if !retransmit {
            let end = body.seq.wrapping_add(body.len);
            if self.sent_upto.is_none_or(|upto| seq_after(end, upto)) {
                self.sent_upto = Some(end);
            }
            self.forget_sent_writes();
        }
        if queued.segments.iter().any(|&n| n > 0) {
            if self.queued.len() >= ctx.cfg.max_pending_per_flow {
                self.queued.pop_front();
                ctx.counters.evictions.capacity += 1;
            }
            self.queued.push_back(queued);
        }
    }

    /// The hold class of the segment `[seq, seq + len)` queued at `ts_ns`,
    /// and how long it waited in TCP since its first byte was written.
    fn classify(
        &self,
        seq: u32,
        len: u32,
        ts_ns: u64,
        retransmit: bool,
        held_after_ns: u64,
    ) -> (u8, Option<u64>) {
        if retransmit {
            return (hold::RETRANSMIT, None);
        }
        let Some(write) = self.write_of(seq) else {
            return (hold::WRITE_UNSEEN, None);
        };
        let waited = ts_ns.saturating_sub(write.ts_ns);
        let class = match write.limits {
            _ if waited <= held_after_ns => hold::AT_ONCE,
            // Everything from snd_una up to this segment must be in flight before it.
            Some(l)
                if l.mss_cache > 0 && l.snd_cwnd > 0 && {
                    let ahead = if seq_before(seq, write.snd_una) {
                        0
                    } else {
                        seq.wrapping_sub(write.snd_una)
                    };
                    ahead.div_ceil(l.mss_cache) >= l.snd_cwnd
                } =>
            {
                hold::CWND
            }
            Some(l) if seq_after(seq.wrapping_add(len), write.snd_una.wrapping_add(l.snd_wnd)) => {
                hold::RWND
            }
            _ => hold::PACING_TSQ,
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

    /// Drops writes all of whose bytes have left TCP (kept: the last one,
    /// whose bytes may continue).
    fn forget_sent_writes(&mut self) {
        let Some(upto) = self.sent_upto else { return };
        while self.writes.len() >= 2 && !seq_after(self.writes[1].write_seq, upto) {
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
            ctx.rec.path(PathId::tx(class as u8), |acc| {
                let n = u64::from(n);
                acc.stages[TX_STAGE_QDISC].record(q.start_ns.saturating_sub(q.queued_ns), n);
                acc.stages[TX_STAGE_DRIVER].record(ts_ns.saturating_sub(q.start_ns), n);
            });
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
        // The newest write stays: its bytes may still be unsent.
        while self.writes.len() >= 2 && stale(self.writes[0].ts_ns, ctx.cfg.app_wait_ns) {
            self.writes.pop_front();
            ctx.counters.evictions.writes_dropped += 1;
        }
    }

    /// Skbs still queued when the trace ends.
    pub fn in_flight(&self) -> u64 {
        self.queued.len() as u64
    }

    /// Nothing left that a sweep or the end of the trace would count: no
    /// skb queued, no write that could go stale (the newest one never does).
    pub fn is_settled(&self) -> bool {
        self.queued.is_empty() && self.writes.len() <= 1
    }
}

/// `seq` lies in `[start, start + len)`.
fn seq_within(seq: u32, start: u32, len: u32) -> bool {
    !seq_before(seq, start) && seq_before(seq, start.wrapping_add(len))
}
