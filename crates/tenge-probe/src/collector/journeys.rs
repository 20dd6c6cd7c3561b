//! Journeys back into records, in time order.
//!
//! A journey (`struct tt_tx_journey`, `struct tt_rx_journey`) holds the
//! records of one packet's hops, sent when the journey ends: its first hops
//! come after records other CPUs sent meanwhile, and hops the ring saw later
//! may have happened earlier. [`InOrder`] splits journeys into their records
//! and hands every record on in timestamp order, holding each for
//! [`HOLD_NS`] of kernel time: longer than a journey lasts, since the kernel
//! ends every journey at the latest when its CPU's NAPI poll does.

use crate::abi::{
    tt_ev_data_ready, tt_ev_napi_poll, tt_ev_pkt, tt_ev_tcp_rcv, tt_ev_window_adv, tt_hdr,
    tt_journey, tt_kind, tt_rx_journey, tt_tx_journey,
};
use std::mem::{offset_of, size_of};

/// How long a record waits for the records of journeys that began before it.
pub const HOLD_NS: u64 = 4_000_000;

const KIND_AT: usize = offset_of!(tt_hdr, kind);
const VARIANT_AT: usize = offset_of!(tt_hdr, variant);
const TS_AT: usize = offset_of!(tt_hdr, ts_ns);

/// Where each hop's record lies in a journey of each variant.
const TX_HOPS: [(usize, usize); 3] = [
    (
        offset_of!(tt_tx_journey, queue),
        size_of::<tt_ev_window_adv>(),
    ),
    (
        offset_of!(tt_tx_journey, start_xmit),
        size_of::<tt_ev_pkt>(),
    ),
    (offset_of!(tt_tx_journey, xmit), size_of::<tt_ev_pkt>()),
];
const SENT: usize = offset_of!(tt_rx_journey, sent);
const RX_HOPS: [(usize, usize); 8] = [
    (offset_of!(tt_rx_journey, entry), size_of::<tt_ev_pkt>()),
    (offset_of!(tt_rx_journey, netif), size_of::<tt_ev_pkt>()),
    (offset_of!(tt_rx_journey, tcp), size_of::<tt_ev_tcp_rcv>()),
    (
        offset_of!(tt_rx_journey, ready),
        size_of::<tt_ev_data_ready>(),
    ),
    (
        offset_of!(tt_rx_journey, poll),
        size_of::<tt_ev_napi_poll>(),
    ),
    (SENT + TX_HOPS[0].0, TX_HOPS[0].1),
    (SENT + TX_HOPS[1].0, TX_HOPS[1].1),
    (SENT + TX_HOPS[2].0, TX_HOPS[2].1),
];

/// The hops of a journey of `variant`, and its length.
fn layout(variant: u8) -> Option<(&'static [(usize, usize)], usize)> {
    match variant {
        v if v == tt_journey::TT_JOURNEY_TX as u8 => Some((&TX_HOPS, size_of::<tt_tx_journey>())),
        v if v == tt_journey::TT_JOURNEY_RX as u8 => Some((&RX_HOPS, size_of::<tt_rx_journey>())),
        _ => None,
    }
}

/// The records a ring record stands for: itself, or a journey's hops.
pub fn records_of(ring_record: &[u8], mut each: impl FnMut(&[u8])) {
    if ring_record.get(KIND_AT) != Some(&(tt_kind::TT_KIND_JOURNEY as u8)) {
        return each(ring_record);
    }
    match layout(ring_record[VARIANT_AT]) {
        Some((hops, len)) if ring_record.len() >= len => {
            for &(at, len) in hops {
                let record = &ring_record[at..at + len];
                if record[KIND_AT] != 0 {
                    each(record);
                }
            }
        }
        // Not of this build: handed on as it is, for the sink to reject.
        _ => each(ring_record),
    }
}

fn ts_of(record: &[u8]) -> u64 {
    record
        .get(TS_AT..TS_AT + 8)
        .map_or(0, |ts| u64::from_ne_bytes(ts.try_into().expect("8 bytes")))
}

/// Records waiting for their turn: their bytes and, sorted on release,
/// (timestamp, offset, length).
#[derive(Default)]
pub struct InOrder {
    bytes: Vec<u8>,
    waiting: Vec<(u64, u32, u32)>,
    /// The newest timestamp handed on so far.
    released_ns: u64,
    /// The newest timestamp taken so far.
    newest_ns: u64,
    /// Records that came after a later one had been handed on.
    pub late: u64,
}

impl InOrder {
    /// Takes a ring record (a journey is split into its hops).
    pub fn push(&mut self, ring_record: &[u8]) {
        records_of(ring_record, |record| {
            let ts = ts_of(record);
            self.newest_ns = self.newest_ns.max(ts);
            let at = self.bytes.len() as u32;
            self.bytes.extend_from_slice(record);
            self.waiting.push((ts, at, record.len() as u32));
        });
    }

    /// Where records may be handed on up to, after a drain of the ring that
    /// started at `drain_started_ns` and emptied it (`caught_up`): a
    /// journey not yet taken began at most [`HOLD_NS`] before the newest
    /// record taken or, once the ring was emptied, before the drain began.
    /// A collector that lags behind the kernel holds records by the
    /// kernel's clock, not its own.
    pub fn due_before(&self, drain_started_ns: u64, caught_up: bool) -> u64 {
        let seen = if caught_up { drain_started_ns } else { 0 };
        self.newest_ns.max(seen).saturating_sub(HOLD_NS)
    }

    /// Hands `sink` the records stamped before `until_ns` (all with
    /// `u64::MAX`), oldest first; the first error stops it.
    pub fn release(
        &mut self,
        until_ns: u64,
        mut sink: impl FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        // Mostly runs already in order: the stable sort merges them.
        self.waiting.sort_by_key(|&(ts, ..)| ts);
        let due = self.waiting.partition_point(|&(ts, ..)| ts < until_ns);
        let mut result = Ok(());
        for &(ts, at, len) in &self.waiting[..due] {
            if ts < self.released_ns {
                self.late += 1;
            }
            self.released_ns = self.released_ns.max(ts);
            if result.is_ok() {
                result = sink(&self.bytes[at as usize..(at + len) as usize]);
            }
        }
        self.keep_from(due);
        result.map(|()| due as u64)
    }

    /// Drops the released records, moving the rest to the front.
    fn keep_from(&mut self, due: usize) {
        if due == 0 {
            return;
        }
        let mut bytes = Vec::with_capacity(self.bytes.capacity());
        for entry in &mut self.waiting[due..] {
            let (at, len) = (entry.1 as usize, entry.2 as usize);
            entry.1 = bytes.len() as u32;
            bytes.extend_from_slice(&self.bytes[at..at + len]);
        }
        self.bytes = bytes;
        self.waiting.drain(..due);
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{tt_pkt, tt_window_adv};
    use crate::event::{Body, Event};

    fn record(ev: Event) -> Vec<u8> {
        let mut out = Vec::new();
        ev.encode(&mut out);
        out
    }

    fn hdr(kind: tt_kind, ts_ns: u64) -> tt_hdr {
        tt_hdr {
            ts_ns,
            kind: kind as u8,
            skb: 0xffff_8880_0000_1000,
            ..tt_hdr::default()
        }
    }

    /// A TX journey of queue and start_xmit, as the kernel lays it out.
    fn tx_journey(queue_ns: u64, start_ns: u64) -> Vec<u8> {
        let mut journey = tt_tx_journey::default();
        journey.hdr.kind = tt_kind::TT_KIND_JOURNEY as u8;
        journey.hdr.variant = tt_journey::TT_JOURNEY_TX as u8;
        journey.queue = tt_ev_window_adv {
            hdr: hdr(tt_kind::TT_KIND_WINDOW_ADV, queue_ns),
            body: tt_window_adv {
                seq: 1000,
                ..Default::default()
            },
        };
        journey.start_xmit = tt_ev_pkt {
            hdr: hdr(tt_kind::TT_KIND_DEV_START_XMIT, start_ns),
            body: tt_pkt {
                seq: 1000,
                ..Default::default()
            },
        };
        // SAFETY: plain old data, read as its bytes.
        unsafe {
            std::slice::from_raw_parts(
                (&journey as *const tt_tx_journey).cast::<u8>(),
                size_of::<tt_tx_journey>(),
            )
        }
        .to_vec()
    }

    fn kinds_and_times(records: &[Vec<u8>]) -> Vec<(u8, u64)> {
        records.iter().map(|r| (r[KIND_AT], ts_of(r))).collect()
    }

    #[test]
    fn a_journey_is_its_hops_and_every_record_comes_in_time_order() {
        let napi = record(Event::new(
            hdr(tt_kind::TT_KIND_NAPI_POLL, 150),
            Body::NapiPoll(Default::default()),
        ));
        let mut in_order = InOrder::default();
        // The ring: a NAPI poll at 150, then the journey of a packet queued
        // at 100 and handed to the driver at 200.
        in_order.push(&napi);
        in_order.push(&tx_journey(100, 200));
        let mut out = Vec::new();
        let released = in_order
            .release(180, |r| {
                out.push(r.to_vec());
                Ok(())
            })
            .unwrap();
        assert_eq!(released, 2);
        let (queue, poll, start) = (
            tt_kind::TT_KIND_WINDOW_ADV as u8,
            tt_kind::TT_KIND_NAPI_POLL as u8,
            tt_kind::TT_KIND_DEV_START_XMIT as u8,
        );
        assert_eq!(kinds_and_times(&out), [(queue, 100), (poll, 150)]);
        // The hop not reached (xmit) is not a record; the rest is held.
        assert!(!in_order.is_empty());
        in_order
            .release(u64::MAX, |r| {
                out.push(r.to_vec());
                Ok(())
            })
            .unwrap();
        assert_eq!(
            kinds_and_times(&out),
            [(queue, 100), (poll, 150), (start, 200)]
        );
        // Each hop decodes as the record it would have been alone.
        let ev = Event::decode(&out[2]).unwrap();
        assert!(matches!(ev.body, Body::DevStartXmit(p) if p.seq == 1000));
        assert_eq!(in_order.late, 0);
        // Held by the kernel's clock: a lagging collector (its drain began
        // before the newest record) holds what the newest record allows.
        assert_eq!(in_order.due_before(0, true), 200 - HOLD_NS.min(200));
        assert_eq!(
            in_order.due_before(HOLD_NS + 1_000, true),
            HOLD_NS + 1_000 - HOLD_NS
        );
        assert_eq!(in_order.due_before(HOLD_NS + 1_000, false), 0);
        // A record older than one handed on is late, and still handed on.
        in_order.push(&napi);
        in_order.release(u64::MAX, |_| Ok(())).unwrap();
        assert_eq!(in_order.late, 1);
        assert!(in_order.is_empty());
    }
}
