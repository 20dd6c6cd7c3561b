//! RX: driver entry → netif_receive → tcp_rcv → data_ready → copy → read.
//!
//! The unit is a driver skb (one wire segment, or a TSO skb handed over by
//! veth, counted as its `gso_segs` packets). It is followed by its byte range
//! on the flow, never by address: GRO frees merged skbs into the NAPI skb
//! cache, so the next driver skb often has the same address while the merged
//! one still waits for its head to reach `netif_receive_skb`. An event
//! advances the units of the previous hop whose range it covers.
//!
//! Units move through one queue per hop, in arrival order; the last two are
//! kept sorted by sequence, since the application consumes bytes in order.
//!
//! A unit starts at the first hop traced on its flow (the driver, or a later
//! hop when the driver probes see nothing), and only there. With sampling it
//! starts when its last byte is kept ([`sampled_byte`]): every later event
//! that moves it on covers that byte, since the merged skbs it travels in
//! contain it and the readable, copied and read ranges reach it first at
//! the event that finishes it, so the kernel kept that event too. (Its first
//! byte would not do: a read can end inside a unit, and the next one need
//! not touch a kept block.) One byte a unit keeps each with probability 1/N,
//! whatever its size, so counts scale by N; a merged skb kept because some
//! other block in it is chosen starts nothing.

use super::stats::{rx_value, PathId};
use super::{seq_after, seq_before, Ctx};
use crate::event::sampled_byte;
use crate::event::{tt_app_read, tt_copy_datagram, tt_data_ready, tt_pkt, tt_tcp_rcv};
use std::collections::VecDeque;

const ENTRY: usize = 0;
const NETIF: usize = 1;
const TCP: usize = 2;
const READY: usize = 3;
const COPY: usize = 4;
const READ: usize = 5;
const HOPS: usize = 6;

#[derive(Clone, Copy, Debug)]
struct Unit {
    seq: u32,
    end: u32,
    segs: u16,
    gro: u8,
    socket: u8,
    order: u8,
    /// Time of each hop; 0 = not seen (trace timestamps are never 0).
    at: [u64; HOPS],
}

impl Unit {
    fn new(seq: u32, len: u32, segs: u16, hop: usize, ts_ns: u64) -> Unit {
        let mut at = [0; HOPS];
        at[hop] = ts_ns;
        Unit {
            seq,
            end: seq.wrapping_add(len),
            segs: segs.max(1),
            gro: rx_value::GRO_UNSEEN,
            socket: rx_value::SOCKET_UNSEEN,
            order: rx_value::ORDER_UNSEEN,
            at,
        }
    }

    fn within(&self, start: u32, end: u32) -> bool {
        !seq_before(self.seq, start) && !seq_after(self.end, end)
    }

    fn reach_tcp(&mut self, ts_ns: u64, socket: u8, order: u8) {
        self.at[TCP] = ts_ns;
        (self.socket, self.order) = (socket, order);
    }

    fn last_seen(&self) -> u64 {
        self.at.iter().copied().max().unwrap_or(0)
    }

    fn finish(self, ctx: &mut Ctx) {
        let path = PathId::rx(self.gro, self.socket, self.order);
        let n = self.segs as u64;
        ctx.rec.path(path, |acc| {
            acc.packets += n;
            for (stage, hop) in acc.stages.iter_mut().zip(self.at.windows(2)) {
                if hop[0] != 0 && hop[1] != 0 {
                    stage.record(hop[1].saturating_sub(hop[0]), n);
                }
            }
            if self.at[ENTRY] != 0 && self.at[READ] != 0 {
                acc.total
                    .record(self.at[READ].saturating_sub(self.at[ENTRY]), n);
            }
        });
        for (stage, hop) in self.at.windows(2).enumerate() {
            if hop[0] != 0 && hop[1] != 0 {
                ctx.rec
                    .span(path, stage, (hop[0], hop[1].max(hop[0])), n, self.seq);
            }
        }
        ctx.counters.rx_packets += n;
        if self.at.iter().all(|&t| t != 0) {
            ctx.counters.rx_complete += n;
        }
    }
}

#[derive(Default)]
pub struct RxFlow {
    /// Seen by the driver, waiting for netif_receive_skb.
    entered: VecDeque<Unit>,
    /// Past GRO, waiting for tcp_rcv.
    in_stack: VecDeque<Unit>,
    /// In TCP, waiting to become readable (out-of-order units wait here).
    queued: VecDeque<Unit>,
    /// Readable, waiting for the copy; sorted by seq.
    readable: VecDeque<Unit>,
    /// Copied, waiting for the read to return; sorted by seq.
    copied: VecDeque<Unit>,
    /// The next byte the application will copy.
    copy_pos: Option<u32>,
    /// The first hop that traced a data packet of this flow; units start there.
    first_hop: Option<usize>,
}

/// Moves the units of `from` that `hit` accepts (and updates) to `to`, in order.
fn advance(
    from: &mut VecDeque<Unit>,
    mut hit: impl FnMut(&mut Unit) -> bool,
    mut to: impl FnMut(Unit),
) -> bool {
    let mut any = false;
    from.retain_mut(|u| {
        let moved = hit(u);
        if moved {
            to(*u);
            any = true;
        }
        !moved
    });
    any
}

fn push_capped(queue: &mut VecDeque<Unit>, unit: Unit, ctx: &mut Ctx) {
    if queue.len() >= ctx.cfg.max_pending_per_flow {
        if let Some(old) = queue.pop_front() {
            old.finish(ctx);
            ctx.counters.evictions.capacity += 1;
        }
    }
    queue.push_back(unit);
}

/// Whether sampling keeps the unit `[seq, seq + len)` (`len > 0`).
fn last_byte_sampled(seq: u32, len: u32, ctx: &Ctx) -> bool {
    sampled_byte(seq.wrapping_add(len - 1), ctx.cfg.byte_every())
}

/// Inserts by seq, searching from the back where new data lands.
fn insert_sorted(queue: &mut VecDeque<Unit>, unit: Unit) {
    let at = queue
        .iter()
        .rposition(|u| !seq_after(u.seq, unit.seq))
        .map_or(0, |i| i + 1);
    queue.insert(at, unit);
}

/// Whether the ranges `held` together cover all of `[seq, end)`.
fn covers(mut held: Vec<(u32, u32)>, seq: u32, end: u32) -> bool {
    held.sort_unstable_by_key(|&(start, _)| start.wrapping_sub(seq) as i32);
    let mut upto = seq;
    for (start, stop) in held {
        if !seq_after(end, upto) {
            break;
        }
        if seq_after(start, upto) {
            return false;
        }
        if seq_after(stop, upto) {
            upto = stop;
        }
    }
    !seq_after(end, upto)
}

impl RxFlow {
    /// Whether a data packet seen at `hop`, and found in no earlier hop's
    /// queue, starts a unit: only at the flow's first traced hop.
    fn starts_units(&mut self, hop: usize) -> bool {
        let first = self.first_hop.map_or(hop, |first| first.min(hop));
        self.first_hop = Some(first);
        first == hop
    }

    pub fn on_entry(&mut self, ts_ns: u64, pkt: &tt_pkt, ctx: &mut Ctx) {
        if pkt.len == 0 || !self.starts_units(ENTRY) || !last_byte_sampled(pkt.seq, pkt.len, ctx) {
            return;
        }
        // The same bytes again before the first copy got through: the old one is lost.
        if let Some(i) = self.entered.iter().position(|u| u.seq == pkt.seq) {
            let old = self.entered.remove(i).expect("index from position");
            old.finish(ctx);
            ctx.counters.evictions.superseded += 1;
        }
        push_capped(
            &mut self.entered,
            Unit::new(pkt.seq, pkt.len, pkt.gso_segs, ENTRY, ts_ns),
            ctx,
        );
    }

    pub fn on_netif_receive(&mut self, ts_ns: u64, pkt: &tt_pkt, ctx: &mut Ctx) {
        if pkt.len == 0 {
            return;
        }
        let (start, end) = (pkt.seq, pkt.seq.wrapping_add(pkt.len));
        let starts_here = self.starts_units(NETIF);
        let in_stack = &mut self.in_stack;
        let hit = |u: &mut Unit| {
            let hit = u.within(start, end);
            if hit {
                u.at[NETIF] = ts_ns;
                // Sampling-proof: a merged skb is larger than each of its driver skbs.
                u.gro = if u.seq == start && u.end == end {
                    rx_value::SINGLE
                } else {
                    rx_value::GRO_MERGED
                };
            }
            hit
        };
        let found = advance(&mut self.entered, hit, |u| in_stack.push_back(u));
        if !found && starts_here && last_byte_sampled(start, pkt.len, ctx) {
            push_capped(
                &mut self.in_stack,
                Unit::new(start, pkt.len, pkt.gso_segs, NETIF, ts_ns),
                ctx,
            );
        }
    }

    pub fn on_tcp_rcv(&mut self, ts_ns: u64, body: &tt_tcp_rcv, ctx: &mut Ctx) {
        if body.len == 0 {
            return;
        }
        let (start, end) = (body.seq, body.seq.wrapping_add(body.len));
        let order = if start == body.rcv_nxt {
            rx_value::IN_ORDER
        } else if seq_after(start, body.rcv_nxt) {
            rx_value::OUT_OF_ORDER
        } else if !seq_after(end, body.rcv_nxt) {
            rx_value::DUPLICATE
        } else {
            // Overlaps rcv_nxt: its new bytes are in order.
            rx_value::IN_ORDER
        };
        let socket = if body.backlog != 0 {
            rx_value::BACKLOG
        } else {
            rx_value::DIRECT
        };
        let starts_here = self.starts_units(TCP);
        // TCP drops old data, so a duplicate ends at this hop.
        let queued = &mut self.queued;
        let mut take = |u: Unit, ctx: &mut Ctx| {
            if order == rx_value::DUPLICATE {
                u.finish(ctx);
            } else {
                push_capped(queued, u, ctx);
            }
        };
        let found = advance(
            &mut self.in_stack,
            |u| {
                let hit = u.within(start, end);
                if hit {
                    u.reach_tcp(ts_ns, socket, order);
                }
                hit
            },
            |u| take(u, ctx),
        );
        if !found && starts_here && last_byte_sampled(start, body.len, ctx) {
            let segs = body.len.div_ceil(body.rcv_mss.max(1)).min(u16::MAX as u32) as u16;
            let mut unit = Unit::new(start, body.len, segs, TCP, ts_ns);
            unit.reach_tcp(ts_ns, socket, order);
            take(unit, ctx);
        }
    }

    pub fn on_data_ready(&mut self, ts_ns: u64, body: &tt_data_ready) {
        let readable = &mut self.readable;
        advance(
            &mut self.queued,
            |u| {
                let hit = !seq_after(u.end, body.rcv_nxt);
                if hit {
                    u.at[READY] = ts_ns;
                }
                hit
            },
            |u| insert_sorted(readable, u),
        );
        self.copy_pos.get_or_insert(body.copied_seq);
    }

    pub fn on_copy(&mut self, ts_ns: u64, body: &tt_copy_datagram) {
        let start = match self.copy_pos {
            Some(pos) if !seq_before(pos, body.seq) && seq_before(pos, body.end_seq) => pos,
            _ => body.seq,
        };
        let pos = start.wrapping_add(body.len);
        self.copy_pos = Some(pos);
        while let Some(mut u) = self
            .readable
            .front()
            .copied()
            .filter(|u| !seq_after(u.end, pos))
        {
            self.readable.pop_front();
            u.at[COPY] = ts_ns;
            insert_sorted(&mut self.copied, u);
        }
    }

    pub fn on_app_read(&mut self, ts_ns: u64, body: &tt_app_read, ctx: &mut Ctx) {
        if body.ret <= 0 {
            return;
        }
        let read_upto = body.copied_seq;
        self.copy_pos = Some(read_upto);
        // Readable units the read consumed without a copy event (e.g. the
        // copy probe is off) finish without the copy hop.
        for queue in [&mut self.copied, &mut self.readable] {
            while let Some(mut u) = queue
                .front()
                .copied()
                .filter(|u| !seq_after(u.end, read_upto))
            {
                queue.pop_front();
                u.at[READ] = ts_ns;
                u.finish(ctx);
            }
        }
    }

    /// A drop of the skb `[seq, seq + len)`: before TCP took it, or by TCP.
    /// TCP drops a segment it cannot keep (beyond the window, no receive
    /// memory): its units would otherwise wait in `queued` and reach the
    /// reader with the copy sent again, counted twice. One whose bytes
    /// another skb holds (TCP merges them out of order) ends there, still
    /// out of order, as the kernel counts it.
    pub fn on_drop(&mut self, seq: u32, len: u32, ctx: &mut Ctx) -> bool {
        for queue in [&mut self.entered, &mut self.in_stack] {
            if let Some(i) = queue.iter().position(|u| u.seq == seq) {
                queue.remove(i).expect("index from position").finish(ctx);
                ctx.counters.evictions.dropped += 1;
                return true;
            }
        }
        // The skb's units are the last in its range to reach TCP: an older
        // copy of the same bytes may be queued.
        let end = seq.wrapping_add(len);
        let in_range = |u: &Unit| u.at[TCP] != 0 && u.within(seq, end);
        let Some(latest) = self
            .queued
            .iter()
            .filter(|u| in_range(u))
            .map(|u| u.at[TCP])
            .max()
        else {
            return false;
        };
        let dropped = |u: &Unit| in_range(u) && u.at[TCP] == latest;
        let others: Vec<(u32, u32)> = self
            .queued
            .iter()
            .filter(|u| !dropped(u) && u.at[TCP] != 0)
            .map(|u| (u.seq, u.end))
            .collect();
        let held_elsewhere = covers(others, seq, end);
        advance(
            &mut self.queued,
            |u| dropped(u),
            |mut u| {
                if !held_elsewhere {
                    u.order = rx_value::TCP_DROPPED;
                }
                u.finish(ctx);
                ctx.counters.evictions.dropped += 1;
            },
        );
        true
    }

    /// Finishes units that made no progress for too long: `stale_ns` inside
    /// the stack, `app_wait_ns` while waiting for the application.
    pub fn expire(&mut self, now_ns: u64, ctx: &mut Ctx) {
        let (stack, app) = (ctx.cfg.stale_ns, ctx.cfg.app_wait_ns);
        for (queue, limit) in [
            (&mut self.entered, stack),
            (&mut self.in_stack, stack),
            (&mut self.queued, stack),
            (&mut self.readable, app),
            (&mut self.copied, app),
        ] {
            while let Some(u) = queue
                .front()
                .copied()
                .filter(|u| now_ns.saturating_sub(u.last_seen()) > limit)
            {
                queue.pop_front();
                u.finish(ctx);
                ctx.counters.evictions.stale += 1;
            }
        }
    }

    /// No unit in flight.
    pub fn is_settled(&self) -> bool {
        [
            &self.entered,
            &self.in_stack,
            &self.queued,
            &self.readable,
            &self.copied,
        ]
        .iter()
        .all(|q| q.is_empty())
    }

    /// Finishes every unit still in flight; returns how many there were.
    pub fn drain(&mut self, ctx: &mut Ctx) -> u64 {
        let mut n = 0;
        for queue in [
            &mut self.entered,
            &mut self.in_stack,
            &mut self.queued,
            &mut self.readable,
            &mut self.copied,
        ] {
            for u in queue.drain(..) {
                u.finish(ctx);
                n += 1;
            }
        }
        n
    }
}
