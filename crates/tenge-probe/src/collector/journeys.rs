//! Journeys back into records, in time order.
//!
//! A journey (`struct tt_tx_journey`, `struct tt_rx_journey`) holds the
//! records of one packet's hops, sent when the journey ends: its first hops
//! come after records other CPUs sent meanwhile, and hops the ring saw later
//! may have happened earlier. [`InOrder`] splits journeys into their records
//! and hands every record on in timestamp order, holding each until the
//! flush before a drain (`Tracer::flush_batches`) says that every journey
//! begun before it has ended, at most [`HOLD_NS`] of kernel time: the
//! kernel ends every journey at the latest when its CPU's NAPI poll does,
//! but a qdisc can hold a packet, and a virtual CPU be preempted in the
//! middle of one. (Holding every record 50 ms, megabytes of them, had
//! them leave the caches before they were handed on.)

use crate::abi::{
    tt_ev_data_ready, tt_ev_napi_poll, tt_ev_pkt, tt_ev_tcp_rcv, tt_ev_window_adv, tt_hdr,
    tt_journey, tt_kind, tt_rx_journey, tt_tx_journey,
};
use crate::event::record_len;
use std::collections::VecDeque;
use std::mem::{offset_of, size_of};

pub use crate::trace_file::HOLD_NS;

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
        v if v == tt_journey::TT_JOURNEY_RX_SHORT as u8 => Some((&RX_HOPS[..5], SENT)),
        _ => None,
    }
}

/// The records a ring record stands for: itself, a journey's hops, or
/// those of every record and journey of a batch. Returns how many records
/// the programs wrote into it (a journey is one).
pub fn records_of(ring_record: &[u8], mut each: impl FnMut(&[u8])) -> u64 {
    match ring_record.get(KIND_AT) {
        Some(&kind) if kind == tt_kind::TT_KIND_BATCH as u8 => {
            let mut written = 0;
            for record in batched(ring_record) {
                match record[KIND_AT] == tt_kind::TT_KIND_JOURNEY as u8 {
                    true => hops_of(record, &mut each),
                    false => each(record),
                }
                written += 1;
            }
            written
        }
        Some(&kind) if kind == tt_kind::TT_KIND_JOURNEY as u8 => {
            hops_of(ring_record, each);
            1
        }
        _ => {
            each(ring_record);
            1
        }
    }
}

/// The records and journeys of a batch (`TT_KIND_BATCH`): after its header,
/// back to back, each as long as its kind says, 8-byte aligned. What does
/// not parse is handed on as one record, for the sink to reject.
fn batched(batch: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = batch.get(size_of::<tt_hdr>()..).unwrap_or_default();
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        Some(match stored_len(rest) {
            Some(len) if len <= rest.len() => {
                let record = &rest[..len];
                rest = &rest[len.next_multiple_of(8).min(rest.len())..];
                record
            }
            _ => std::mem::take(&mut rest),
        })
    })
}

/// The length of the record `bytes` starts with, by its kind (a journey's
/// by its variant).
fn stored_len(bytes: &[u8]) -> Option<usize> {
    match *bytes.get(KIND_AT)? {
        kind if kind == tt_kind::TT_KIND_JOURNEY as u8 => {
            layout(*bytes.get(VARIANT_AT)?).map(|(_, len)| len)
        }
        kind => record_len(kind),
    }
}

/// A journey's hops (those it reached).
fn hops_of(ring_record: &[u8], mut each: impl FnMut(&[u8])) {
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

pub fn ts_of(record: &[u8]) -> u64 {
    record
        .get(TS_AT..TS_AT + 8)
        .map_or(0, |ts| u64::from_ne_bytes(ts.try_into().expect("8 bytes")))
}

/// The records of one slice of [`SLICE_NS`] of kernel time: their bytes,
/// where each lies in them, and their order.
#[derive(Default)]
struct Slice {
    /// `ts_ns / SLICE_NS` of its records.
    number: u64,
    bytes: Vec<u8>,
    /// Per record, in the order they came: offset and length in `bytes`.
    spans: Vec<(u32, u32)>,
    /// Per record: its time within the slice (under 2^20 ns) above its
    /// index in `spans`, in the order they came until sorted by time.
    order: Vec<u64>,
}

impl Slice {
    fn push(&mut self, ts_ns: u64, record: &[u8]) {
        let within = ts_ns - self.number * SLICE_NS;
        self.order.push(within << 32 | self.spans.len() as u64);
        self.spans
            .push((self.bytes.len() as u32, record.len() as u32));
        self.bytes.extend_from_slice(record);
    }
}

/// Records handed on ahead of the one whose bytes are asked for in cache:
/// a drain takes megabytes from the ring before any is handed on, and
/// waiting for each record's bytes took a fifth of the collector's time.
const PREFETCH_AHEAD: usize = 8;

#[inline]
fn prefetch(byte: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing, and the address is valid.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((byte as *const u8).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = byte;
}

/// Sorts a slice's `order` by the time within it, records of the same time
/// in the order they came (so the whole key's order): two passes of a
/// radix sort on its 20 bits of time, each stable. Sorting the keys by
/// comparison was an eighth of the collector's time.
fn sort_by_time(order: &mut Vec<u64>, scratch: &mut Vec<u64>) {
    const BITS: u32 = 10;
    const DIGITS: usize = 1 << BITS;
    scratch.clear();
    scratch.resize(order.len(), 0);
    for shift in [32, 32 + BITS] {
        let digit = |key: u64| (key >> shift) as usize % DIGITS;
        let mut starts = [0u32; DIGITS];
        for &key in order.iter() {
            starts[digit(key)] += 1;
        }
        let mut next = 0;
        for start in &mut starts {
            (*start, next) = (next, next + *start);
        }
        for &key in order.iter() {
            let at = &mut starts[digit(key)];
            scratch[*at as usize] = key;
            *at += 1;
        }
        std::mem::swap(order, scratch);
    }
}

/// Records wait in slices of about a millisecond of their timestamps, so
/// that holding them long costs a push and, per slice, one sort.
const SLICE_NS: u64 = 1 << 20;

/// A flush of every CPU's batch before a drain ([`Tracer::flush_batches`]).
///
/// [`Tracer::flush_batches`]: crate::probe::Tracer::flush_batches
#[derive(Clone, Copy, Debug)]
pub struct Flushed {
    /// When it began (CLOCK_MONOTONIC, the records' clock).
    pub at_ns: u64,
    /// The first hop of the oldest journey a CPU then held open (`u64::MAX`:
    /// none); None: not known.
    pub open_since: Option<u64>,
}

/// What a record may still come before the oldest journey open at a flush
/// and the flush itself: a journey the flush's IPI found just ending (its
/// skb cleared, its record not yet in the batch), or just beginning, its
/// stamp read before the flush's. Microseconds; a journey held that long
/// is one a vCPU was taken from.
const OPEN_MARGIN_NS: u64 = 2_000_000;

/// When every record stamped before has been taken from the ring, after a
/// drain whose newest record was stamped `newest_ns`: a journey not yet
/// taken began at most [`HOLD_NS`] before that or, once the drain emptied
/// the ring (`caught_up`), before the drain began; and no earlier than the
/// drain or the oldest journey the flush before it found open, less
/// [`OPEN_MARGIN_NS`], where the flush could say. (A journey left open on
/// a CPU gone idle holds nothing longer than [`HOLD_NS`].) A collector that
/// lags behind the kernel goes by the kernel's clock, not its own.
pub fn settled_before(newest_ns: u64, caught_up: Option<Flushed>) -> u64 {
    let seen = caught_up.map_or(0, |flushed| flushed.at_ns);
    let by_hold = newest_ns.max(seen).saturating_sub(HOLD_NS);
    let by_open = caught_up.map_or(0, |flushed| match flushed.open_since {
        Some(open) => flushed.at_ns.min(open).saturating_sub(OPEN_MARGIN_NS),
        None => 0,
    });
    by_hold.max(by_open)
}

/// Records waiting for their turn, by slice of their timestamps.
#[derive(Default)]
pub struct InOrder {
    /// Oldest first. A record nearly always goes to one of the newest two:
    /// found from the back, not looked up in a map.
    slices: VecDeque<Slice>,
    /// Emptied slices, reused.
    spare: Vec<Slice>,
    /// Room for [`sort_by_time`].
    scratch: Vec<u64>,
    /// The newest timestamp handed on so far.
    released_ns: u64,
    /// The newest timestamp taken so far.
    newest_ns: u64,
    /// Records that came after a later one had been handed on.
    pub late: u64,
    /// Records the programs wrote (see [`records_of`]).
    pub written: u64,
}

impl InOrder {
    /// Takes a ring record (a journey is split into its hops).
    pub fn push(&mut self, ring_record: &[u8]) {
        self.written += records_of(ring_record, |record| {
            let ts = ts_of(record);
            self.newest_ns = self.newest_ns.max(ts);
            self.slice_of(ts / SLICE_NS).push(ts, record);
        });
    }

    /// The slice numbered `number`, added where it belongs if new.
    fn slice_of(&mut self, number: u64) -> &mut Slice {
        let after = self
            .slices
            .iter()
            .rposition(|s| s.number <= number)
            .map_or(0, |at| at + 1);
        if after == 0 || self.slices[after - 1].number != number {
            let mut slice = self.spare.pop().unwrap_or_default();
            slice.number = number;
            self.slices.insert(after, slice);
            return &mut self.slices[after];
        }
        &mut self.slices[after - 1]
    }

    /// Where records may be handed on up to after a drain of the ring
    /// ([`settled_before`]), at the start of a slice: [`InOrder::release`]
    /// up to it hands on every record stamped before it.
    pub fn due_before(&self, caught_up: Option<Flushed>) -> u64 {
        settled_before(self.newest_ns, caught_up) / SLICE_NS * SLICE_NS
    }

    /// Hands `sink` the records of the slices that end by `until_ns` (all
    /// with `u64::MAX`), oldest first; the first error stops it.
    pub fn release(
        &mut self,
        until_ns: u64,
        mut sink: impl FnMut(&[u8]) -> anyhow::Result<()>,
    ) -> anyhow::Result<u64> {
        let mut released = 0;
        while let Some(first) = self.slices.front() {
            if (first.number + 1).saturating_mul(SLICE_NS) > until_ns && until_ns != u64::MAX {
                break;
            }
            let mut slice = self.slices.pop_front().expect("a front slice");
            sort_by_time(&mut slice.order, &mut self.scratch);
            let start_ns = slice.number * SLICE_NS;
            for (i, &key) in slice.order.iter().enumerate() {
                if let Some(&ahead) = slice.order.get(i + PREFETCH_AHEAD) {
                    prefetch(&slice.bytes[slice.spans[ahead as u32 as usize].0 as usize]);
                }
                let ts = start_ns + (key >> 32);
                if ts < self.released_ns {
                    self.late += 1;
                }
                self.released_ns = self.released_ns.max(ts);
                let (at, len) = slice.spans[key as u32 as usize];
                sink(&slice.bytes[at as usize..(at + len) as usize])?;
                released += 1;
            }
            slice.bytes.clear();
            slice.spans.clear();
            slice.order.clear();
            self.spare.push(slice);
        }
        Ok(released)
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.slices.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{tt_napi_poll, tt_pkt, tt_window_adv};
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
        bytes_of(&journey).to_vec()
    }

    /// A record's bytes, as the kernel writes them.
    fn bytes_of<T: Copy>(record: &T) -> &[u8] {
        // SAFETY: the ABI's records are plain old data (repr(C), no pointers).
        unsafe { std::slice::from_raw_parts((record as *const T).cast::<u8>(), size_of::<T>()) }
    }

    fn kinds_and_times(records: &[Vec<u8>]) -> Vec<(u8, u64)> {
        records.iter().map(|r| (r[KIND_AT], ts_of(r))).collect()
    }

    #[test]
    fn a_journey_is_its_hops_and_every_record_comes_in_time_order() {
        let (queue_ns, poll_ns, start_ns) = (SLICE_NS + 5, 2 * SLICE_NS + 1, 3 * SLICE_NS + 1);
        let napi = record(Event::new(
            hdr(tt_kind::TT_KIND_NAPI_POLL, poll_ns),
            Body::NapiPoll(Default::default()),
        ));
        let mut in_order = InOrder::default();
        // The ring: a NAPI poll, then the journey of a packet queued before
        // it and handed to the driver after it.
        in_order.push(&napi);
        in_order.push(&tx_journey(queue_ns, start_ns));
        let mut out = Vec::new();
        let released = in_order
            .release(3 * SLICE_NS, |r| {
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
        assert_eq!(kinds_and_times(&out), [(queue, queue_ns), (poll, poll_ns)]);
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
            [(queue, queue_ns), (poll, poll_ns), (start, start_ns)]
        );
        // Each hop decodes as the record it would have been alone.
        let ev = Event::decode(&out[2]).unwrap();
        assert!(matches!(ev.body, Body::DevStartXmit(p) if p.seq == 1000));
        assert_eq!(in_order.late, 0);
        // Held by the kernel's clock: a lagging collector (its drain began
        // before the newest record) holds what the newest record allows.
        let flushed = |at_ns, open_since| Some(Flushed { at_ns, open_since });
        let slice_start = |ns: u64| ns / SLICE_NS * SLICE_NS;
        assert_eq!(in_order.due_before(flushed(0, None)), 0);
        assert_eq!(
            in_order.due_before(flushed(HOLD_NS + 3 * SLICE_NS + 5, None)),
            3 * SLICE_NS
        );
        assert_eq!(in_order.due_before(None), 0);
        // A flush that says which journeys were open: records older than
        // the oldest of them are all in, up to the margin.
        let at = HOLD_NS + 10 * OPEN_MARGIN_NS;
        assert_eq!(
            in_order.due_before(flushed(at, Some(u64::MAX))),
            slice_start(at - OPEN_MARGIN_NS)
        );
        assert_eq!(
            in_order.due_before(flushed(at, Some(at - 3 * OPEN_MARGIN_NS))),
            slice_start(at - 4 * OPEN_MARGIN_NS)
        );
        // A journey open longer than the hold holds nothing longer.
        assert_eq!(
            in_order.due_before(flushed(at, Some(1))),
            slice_start(at - HOLD_NS)
        );
        // A record older than one handed on is late, and still handed on.
        in_order.push(&napi);
        assert_eq!(in_order.release(u64::MAX, |_| Ok(())).unwrap(), 1);
        assert_eq!(in_order.late, 1);
        assert!(in_order.is_empty());
    }

    #[test]
    fn ties_keep_their_order_and_a_slice_between_others_finds_its_place() {
        let poll = |ts_ns, budget| {
            let napi = tt_ev_napi_poll {
                hdr: hdr(tt_kind::TT_KIND_NAPI_POLL, ts_ns),
                body: tt_napi_poll {
                    budget,
                    ..Default::default()
                },
            };
            bytes_of(&napi).to_vec()
        };
        let mut in_order = InOrder::default();
        // Slices 3 and 1 first, then 2 between them; two records tie at 2.
        for (ts_ns, tag) in [
            (3 * SLICE_NS, 1),
            (SLICE_NS + 9, 2),
            (2 * SLICE_NS + 4, 3),
            (2 * SLICE_NS + 4, 4),
            (SLICE_NS + 8, 5),
        ] {
            in_order.push(&poll(ts_ns, tag));
        }
        let mut tags = Vec::new();
        in_order
            .release(u64::MAX, |r| {
                let ev = Event::decode(r)?;
                let Body::NapiPoll(p) = ev.body else {
                    anyhow::bail!("not a poll")
                };
                tags.push((ev.hdr.ts_ns, p.budget));
                Ok(())
            })
            .unwrap();
        assert_eq!(
            tags,
            [
                (SLICE_NS + 8, 5),
                (SLICE_NS + 9, 2),
                (2 * SLICE_NS + 4, 3),
                (2 * SLICE_NS + 4, 4),
                (3 * SLICE_NS, 1)
            ]
        );
        assert_eq!(in_order.late, 0);
    }

    #[test]
    fn the_radix_sort_orders_as_the_whole_keys_do() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut scratch = Vec::new();
        for len in [0, 1, 7, 1000, 5000] {
            // Times within a slice, many equal; indices in the order they came.
            let mut order: Vec<u64> = (0..len)
                .map(|i| (random() % SLICE_NS / 1000 * 1000) << 32 | i)
                .collect();
            let mut expected = order.clone();
            expected.sort_unstable();
            sort_by_time(&mut order, &mut scratch);
            assert_eq!(order, expected);
        }
    }

    /// A batch as the kernel writes it: its header, then each record padded to 8 bytes.
    fn batch(records: &[Vec<u8>]) -> Vec<u8> {
        let header = hdr(tt_kind::TT_KIND_BATCH, 0);
        let mut out = bytes_of(&header).to_vec();
        for r in records {
            out.extend_from_slice(r);
            out.resize(out.len().next_multiple_of(8), 0);
        }
        out
    }

    #[test]
    fn a_batch_is_its_records_and_the_hops_of_its_journeys() {
        let napi = record(Event::new(
            hdr(tt_kind::TT_KIND_NAPI_POLL, 7),
            Body::NapiPoll(Default::default()),
        ));
        let ring_record = batch(&[napi.clone(), tx_journey(5, 9), napi.clone()]);
        let mut out = Vec::new();
        let written = records_of(&ring_record, |r| out.push(r.to_vec()));
        assert_eq!(written, 3);
        let (queue, poll, start) = (
            tt_kind::TT_KIND_WINDOW_ADV as u8,
            tt_kind::TT_KIND_NAPI_POLL as u8,
            tt_kind::TT_KIND_DEV_START_XMIT as u8,
        );
        assert_eq!(
            kinds_and_times(&out),
            [(poll, 7), (queue, 5), (start, 9), (poll, 7)]
        );
        assert_eq!(out[0], napi);
        // Cut short, the batch hands its whole records on and the rest as
        // one record, which does not decode.
        let cut = &ring_record[..ring_record.len() - 8];
        let mut out = Vec::new();
        assert_eq!(records_of(cut, |r| out.push(r.to_vec())), 3);
        assert_eq!(out.len(), 4);
        assert!(Event::decode(&out[3]).is_err());
    }

    #[test]
    fn a_short_rx_journey_ends_before_sent() {
        let mut journey = tt_rx_journey::default();
        journey.hdr.kind = tt_kind::TT_KIND_JOURNEY as u8;
        journey.hdr.variant = tt_journey::TT_JOURNEY_RX_SHORT as u8;
        journey.netif.hdr = hdr(tt_kind::TT_KIND_NETIF_RECEIVE, 3);
        journey.tcp.hdr = hdr(tt_kind::TT_KIND_TCP_RCV, 4);
        let short = bytes_of(&journey)[..SENT].to_vec();
        let napi = record(Event::new(
            hdr(tt_kind::TT_KIND_NAPI_POLL, 7),
            Body::NapiPoll(Default::default()),
        ));
        let mut out = Vec::new();
        let written = records_of(&batch(&[short, napi.clone()]), |r| out.push(r.to_vec()));
        assert_eq!(written, 2);
        let (netif, tcp, poll) = (
            tt_kind::TT_KIND_NETIF_RECEIVE as u8,
            tt_kind::TT_KIND_TCP_RCV as u8,
            tt_kind::TT_KIND_NAPI_POLL as u8,
        );
        assert_eq!(kinds_and_times(&out), [(netif, 3), (tcp, 4), (poll, 7)]);
        assert_eq!(out[2], napi);
    }
}
