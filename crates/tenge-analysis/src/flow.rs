//! The flow table: which socket each event belongs to.
//!
//! Socket events carry the kernel's socket cookie. Device-layer events often
//! do not (on receive, the skb has no socket until TCP demuxes it), so they are
//! mapped through the connection's addresses, turned around to the receiving
//! socket's point of view, within the event's network namespace.

use crate::event::{
    addr_text, is_incoming_packet, sampled_bytes, seq_after, tcp_flags, v4_word, Body, Event,
    FlowKey,
};
use serde::Serialize;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::SocketAddr;
pub use tenge_events::fast_hash::FastHasher;

mod open_table;
use open_table::OpenTable;

/// A HashMap with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A map by [`FlowKey`] that keeps IPv4 keys in 20 bytes, not 68: with 10k
/// sockets the table then stays in cache, and a lookup compares three words
/// on one cache line.
#[derive(Debug)]
pub struct KeyMap<V> {
    v4: OpenTable<(u32, u64, u64), V>,
    other: FastMap<FlowKey, V>,
}

impl<V: Copy + Default> Default for KeyMap<V> {
    fn default() -> Self {
        KeyMap {
            v4: OpenTable::default(),
            other: FastMap::default(),
        }
    }
}

/// The IPv4 form of a key: namespace, then each end as address << 16 | port.
pub(crate) fn compact_v4(key: &FlowKey) -> Option<(u32, u64, u64)> {
    match (key.local, key.remote) {
        (SocketAddr::V4(l), SocketAddr::V4(r)) => Some((key.netns, v4_word(&l), v4_word(&r))),
        _ => None,
    }
}

impl<V: Copy + Default> KeyMap<V> {
    /// The value under an event's key.
    pub(crate) fn get_event(&self, key: &EventKey) -> Option<V> {
        match key.v4 {
            Some(k) => self.v4.get(&k),
            None => self.other.get(&key.full()?).copied(),
        }
    }

    /// Starts loading where [`get_event`](Self::get_event) will look (IPv4 keys).
    #[inline]
    pub(crate) fn prefetch_event(&self, key: &EventKey) {
        if let Some(k) = key.v4 {
            self.v4.prefetch(&k);
        }
    }

    pub fn get(&self, key: &FlowKey) -> Option<V> {
        match compact_v4(key) {
            Some(k) => self.v4.get(&k),
            None => self.other.get(key).copied(),
        }
    }

    pub fn insert(&mut self, key: FlowKey, value: V) -> Option<V> {
        match compact_v4(&key) {
            Some(k) => self.v4.insert(k, value),
            None => self.other.insert(key, value),
        }
    }

    /// Removes the key if it holds `value` (a later flow may have taken it over).
    pub(crate) fn remove_if(&mut self, key: &FlowKey, value: &V)
    where
        V: PartialEq,
    {
        match compact_v4(key) {
            Some(k) if self.v4.get(&k).as_ref() == Some(value) => {
                self.v4.remove(&k);
            }
            None if self.other.get(key) == Some(value) => {
                self.other.remove(key);
            }
            _ => {}
        }
    }
}

/// Starts loading the cache lines `value` spans: a hint, for state an event
/// a few records on will touch (see [`crate::analysis::Analysis::prefetch`]).
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    prefetch_span(value, value);
}

/// Starts loading the cache lines from `first` to the end of `last` (a field
/// after it in the same struct): the part of a struct an event touches.
///
/// Steps of a line from `first` meet every line up to the span's last byte,
/// which is prefetched too; the span lies in one struct, so its length is a
/// constant and the steps unroll into one instruction a line.
#[inline(always)]
pub(crate) fn prefetch_span<A, B>(first: &A, last: &B) {
    let start = first as *const A as usize;
    let end = last as *const B as usize + std::mem::size_of::<B>();
    for line in 0..(end - start).div_ceil(64) {
        prefetch_line(start + 64 * line);
    }
    prefetch_line(end - 1);
}

#[inline(always)]
fn prefetch_line(at: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it reads nothing and never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch(at as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
}

/// Puts `value` in a slot retirement freed, or at the end; returns its
/// index. The flow table and both analyses keep their per-socket state so.
pub(crate) fn place<T>(slots: &mut Vec<T>, free: &mut Vec<usize>, value: T) -> usize {
    match free.pop() {
        Some(i) => {
            slots[i] = value;
            i
        }
        None => {
            slots.push(value);
            slots.len() - 1
        }
    }
}

/// What the table knows of one socket. In C order, on a line of its own:
/// every event of the socket updates the counts, which then share one line.
#[derive(Clone, Debug, Serialize)]
#[repr(C, align(64))]
pub struct FlowInfo {
    pub sock_cookie: u64,
    pub netns: u32,
    pub src: String,
    pub dst: String,
    #[serde(skip)]
    pub key: FlowKey,
    pub first_ns: u64,
    pub last_ns: u64,
    pub events: u64,
    /// TCP payload bytes this socket sent (outgoing segments at the device
    /// queue). Sampled 1 in N by sequence number: N times those of the kept
    /// blocks (see [`sampled_bytes`]).
    pub bytes_sent: u64,
    /// TCP payload bytes this socket received, each once, as
    /// `tcpi_bytes_received` counts them: by how far its `rcv_nxt` advanced
    /// (up to the end of the payload it was sent, so not the FIN), for a
    /// segment TCP dropped comes again. Sampled, estimated as `bytes_sent`
    /// is, from the kept segments: what one carries below `rcv_nxt` was
    /// received before.
    pub bytes_received: u64,
    /// Last TCP state seen (include/net/tcp_states.h), 0 if none.
    pub state: u8,
    #[serde(skip)]
    received: ReceivedUpTo,
}

/// How far a socket's received bytes are counted: its `rcv_nxt` as last
/// counted, and the end of the payload it was sent (`rcv_nxt` passes it
/// by the FIN).
#[derive(Clone, Copy, Debug, Default)]
struct ReceivedUpTo {
    counted: Option<u32>,
    payload_end: Option<u32>,
}

impl ReceivedUpTo {
    /// The socket's `rcv_nxt` was `rcv_nxt`: the bytes it advanced by since.
    fn advance(&mut self, rcv_nxt: u32) -> u32 {
        let Some(counted) = self.counted else {
            self.counted = Some(rcv_nxt);
            return 0;
        };
        let Some(end) = self.payload_end else {
            return 0;
        };
        let upto = if seq_after(rcv_nxt, end) {
            end
        } else {
            rcv_nxt
        };
        if !seq_after(upto, counted) {
            return 0;
        }
        self.counted = Some(upto);
        upto.wrapping_sub(counted)
    }

    /// A segment with payload up to `end` arrived.
    fn payload(&mut self, end: u32) {
        if self.payload_end.is_none_or(|e| seq_after(end, e)) {
            self.payload_end = Some(end);
        }
    }
}

impl FlowInfo {
    /// Whether the socket's last state seen is `TCP_CLOSE`.
    pub fn is_closed(&self) -> bool {
        self.state == crate::event::tcp_state::CLOSE
    }
}

/// The bytes of a segment at or above `rcv_nxt`: a retransmission of what
/// arrived already adds nothing.
fn new_payload(r: &crate::event::tt_tcp_rcv) -> u32 {
    let below = r.rcv_nxt.wrapping_sub(r.seq);
    if below >= 1 << 31 {
        r.len
    } else {
        r.len.saturating_sub(below)
    }
}

#[derive(Default)]
pub struct FlowTable {
    /// Sockets in the order first seen.
    flows: Vec<FlowInfo>,
    /// Cookie → index in `flows`: 16-byte entries, where the sockets
    /// themselves made the table 6 MB at 10k connections. Listings walk this
    /// map, so ties come out in the map's order, as when it held the sockets.
    by_cookie: FastMap<u64, usize>,
    /// The same, for lookups: a cookie and its index on one cache line.
    cookie_index: OpenTable<u64, usize>,
    /// The latest cookie looked up and its index: a socket's events come in runs.
    last: Option<(u64, usize)>,
    /// Whether `flows[i]` has its addresses: asked at every event with its
    /// own cookie, and kept apart from the cold `FlowInfo::key` it stands for.
    named: Vec<bool>,
    /// Addresses → index in `flows`.
    by_key: KeyMap<usize>,
    /// The latest IPv4 key looked up and its socket: a packet's events come in runs.
    last_key: Option<((u32, u64, u64), usize)>,
    /// Numbers of retired sockets, given to the next new ones.
    free: Vec<usize>,
    /// The recording keeps 1 in this many blocks of sequence space (0 and
    /// 1: every packet): the bytes counted are estimated from them.
    sample_every: u32,
}

impl FlowTable {
    pub fn new() -> FlowTable {
        FlowTable::default()
    }

    /// The flow table of a recording sampled 1 in `every` by sequence number.
    pub fn sampled(every: u32) -> FlowTable {
        FlowTable {
            sample_every: every,
            ..FlowTable::default()
        }
    }

    /// Accounts the event to its socket and returns the socket's cookie, if known.
    pub fn observe(&mut self, ev: &Event) -> Option<u64> {
        let i = self.observe_keyed(ev, &EventKey::of(ev))?;
        Some(self.flows[i].sock_cookie)
    }

    /// [`observe`](Self::observe) with the event's [`socket_key`] computed by
    /// the caller; returns the socket's number: sockets are numbered densely
    /// from 0 in the order first seen, and keep their number. Inlined into
    /// the caller: most events find their socket in a test or two.
    #[inline(always)]
    pub(crate) fn observe_keyed(&mut self, ev: &Event, key: &EventKey) -> Option<usize> {
        let i = match self.own_cookie(ev) {
            Some(cookie) => {
                let i = self.index_of_own(cookie, ev);
                if !self.named[i] {
                    self.name(i, key);
                }
                i
            }
            None => self.index_by_key(ev, key)?,
        };
        let flow = &mut self.flows[i];
        flow.events += 1;
        flow.first_ns = flow.first_ns.min(ev.hdr.ts_ns);
        flow.last_ns = flow.last_ns.max(ev.hdr.ts_ns);
        let every_packet = self.sample_every <= 1;
        match &ev.body {
            Body::WindowAdv(w) => {
                flow.bytes_sent += sampled_bytes(w.seq, w.len, self.sample_every);
                if every_packet && w.tcp_flags & tcp_flags::SYN == 0 {
                    flow.bytes_received += u64::from(flow.received.advance(w.rcv_nxt));
                }
            }
            Body::TcpRcv(r) if every_packet => {
                flow.bytes_received += u64::from(flow.received.advance(r.rcv_nxt));
                if r.len > 0 {
                    flow.received.payload(r.seq.wrapping_add(r.len));
                }
            }
            Body::DataReady(d) if every_packet => {
                flow.bytes_received += u64::from(flow.received.advance(d.rcv_nxt));
            }
            Body::TcpRcv(r) => {
                let new = new_payload(r);
                let from = r.seq.wrapping_add(r.len - new);
                flow.bytes_received += sampled_bytes(from, new, self.sample_every);
            }
            Body::State(s) => flow.state = s.newstate,
            _ => {}
        }
        Some(i)
    }

    /// A socket's addresses come from events that carry its own cookie, and
    /// only once both ports are known: state changes before connect() picks
    /// a port, or after the port went to a time-wait socket, carry port 0.
    /// The key is registered once, when first known (not on every event);
    /// a later socket on the same addresses takes it over.
    #[cold]
    fn name(&mut self, i: usize, key: &EventKey) {
        let Some(key) = key
            .full()
            .filter(|k| k.local.port() != 0 && k.remote.port() != 0)
        else {
            return;
        };
        let flow = &mut self.flows[i];
        self.named[i] = true;
        flow.key = key;
        flow.src = addr_text(&key.local);
        flow.dst = addr_text(&key.remote);
        flow.netns = key.netns;
        self.by_key.insert(key, i);
        // The key may have been another socket's.
        self.last_key = None;
    }

    /// The number of the socket with this cookie, a new one if it is new.
    #[inline]
    fn index_of_own(&mut self, cookie: u64, ev: &Event) -> usize {
        match self.last {
            Some((last, i)) if last == cookie => i,
            _ => self.look_up_own(cookie, ev),
        }
    }

    /// [`index_of_own`](Self::index_of_own) past the latest socket: a hash lookup.
    #[inline(never)]
    fn look_up_own(&mut self, cookie: u64, ev: &Event) -> usize {
        let i = match self.cookie_index.get(&cookie) {
            Some(i) => i,
            None => self.add(cookie, ev),
        };
        self.last = Some((cookie, i));
        i
    }

    /// A socket first seen: its number.
    #[cold]
    fn add(&mut self, cookie: u64, ev: &Event) -> usize {
        let i = place(&mut self.flows, &mut self.free, new_flow(cookie, ev));
        self.named.resize(self.flows.len(), false);
        self.by_cookie.insert(cookie, i);
        self.cookie_index.insert(cookie, i);
        i
    }

    /// The number of the socket an event without its own cookie belongs to, by its addresses.
    #[inline]
    fn index_by_key(&mut self, ev: &Event, key: &EventKey) -> Option<usize> {
        match (self.last_key, key.v4) {
            (Some((last, i)), Some(v4)) if last == v4 => Some(i),
            _ => self.look_up_key(ev, key),
        }
    }

    /// [`index_by_key`](Self::index_by_key) past the latest key: a hash lookup.
    #[inline(never)]
    fn look_up_key(&mut self, ev: &Event, key: &EventKey) -> Option<usize> {
        let found = self.by_key.get_event(key);
        if let (Some(i), Some(v4)) = (found, key.v4) {
            self.last_key = Some((v4, i));
        }
        found.or_else(|| self.drop_on_other_path(ev))
    }

    /// A drop can be on either path: the socket that sent the packet.
    fn drop_on_other_path(&self, ev: &Event) -> Option<usize> {
        matches!(ev.body, Body::KfreeSkb(_))
            .then(|| FlowKey::of(ev, true))
            .flatten()
            .and_then(|k| self.by_key.get(&k))
    }

    /// Starts loading the table slot a lookup for `ev` reads first: the
    /// step before [`prefetch`](Self::prefetch), further ahead.
    #[inline]
    pub(crate) fn prefetch_slot(&self, ev: &Event) {
        match self.own_cookie(ev) {
            Some(cookie) => self.cookie_index.prefetch(&cookie),
            None => self.by_key.prefetch_event(&EventKey::of(ev)),
        }
    }

    /// The number of the socket `ev` belongs to, as far as a lookup without
    /// recording anything finds it, with its counts' cache line on its way
    /// (see [`crate::analysis::Analysis::prefetch`]).
    #[inline]
    pub(crate) fn prefetch(&self, ev: &Event) -> Option<usize> {
        let i = match self.own_cookie(ev) {
            Some(cookie) => match self.last {
                Some((last, i)) if last == cookie => i,
                _ => self.cookie_index.get(&cookie)?,
            },
            None => self.by_key.get_event(&EventKey::of(ev))?,
        };
        prefetch(&self.flows.get(i)?.first_ns);
        Some(i)
    }

    /// The cookie an event carries of its own socket (not an incoming packet's).
    #[inline]
    fn own_cookie(&self, ev: &Event) -> Option<u64> {
        match ev.hdr.sock_cookie {
            0 => None,
            _ if is_incoming_packet(ev.hdr.kind) => None,
            cookie => Some(cookie),
        }
    }

    pub fn get(&self, cookie: u64) -> Option<&FlowInfo> {
        self.cookie_index.get(&cookie).map(|i| &self.flows[i])
    }

    /// Sockets in the map's order.
    fn listed(&self) -> impl Iterator<Item = &FlowInfo> {
        self.by_cookie.values().map(|&i| &self.flows[i])
    }

    /// The socket at the other end, when both ends were traced on this host.
    /// The peer may live in another namespace (lab, containers): the
    /// addresses are matched, not the netns. Of several sockets on those
    /// addresses, the one alive longest while this one was: a socket seen
    /// for a moment on them is not taken for the peer.
    pub fn peer_of(&self, cookie: u64) -> Option<u64> {
        let me = self.get(cookie)?;
        let overlap = |f: &FlowInfo| {
            f.last_ns
                .min(me.last_ns)
                .saturating_sub(f.first_ns.max(me.first_ns))
        };
        self.listed()
            .filter(|f| {
                f.sock_cookie != cookie
                    && f.key.local == me.key.remote
                    && f.key.remote == me.key.local
            })
            .max_by_key(|f| (overlap(f), f.events))
            .map(|f| f.sock_cookie)
    }

    /// Flows, busiest first.
    pub fn flows(&self) -> Vec<&FlowInfo> {
        let mut flows: Vec<&FlowInfo> = self.listed().collect();
        flows.sort_by_key(|f| std::cmp::Reverse(f.bytes_sent + f.bytes_received));
        flows
    }

    /// Sockets tracked now (retired ones not counted).
    pub fn len(&self) -> usize {
        self.by_cookie.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_cookie.is_empty()
    }

    /// Socket numbers in use or free: the table's memory.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.flows.len()
    }

    /// Whether socket number `i` is in use (not retired, or given to a new socket).
    pub(crate) fn is_live(&self, i: usize) -> bool {
        self.flows.get(i).is_some_and(|f| f.sock_cookie != 0)
    }

    /// The socket numbered `i`, which must be live.
    pub(crate) fn socket(&self, i: usize) -> &FlowInfo {
        &self.flows[i]
    }

    /// Numbers of the live sockets `wanted` picks.
    pub(crate) fn numbers_where(&self, wanted: impl Fn(&FlowInfo) -> bool) -> Vec<usize> {
        self.by_cookie
            .values()
            .copied()
            .filter(|&i| wanted(&self.flows[i]))
            .collect()
    }

    /// Forgets socket `i` and returns what the table knew of it; its number
    /// goes to the next new socket. A later event with its cookie starts a new socket.
    pub(crate) fn retire(&mut self, i: usize) -> FlowInfo {
        let cookie = self.flows[i].sock_cookie;
        let info = std::mem::replace(&mut self.flows[i], new_flow(0, &Event::zeroed()));
        self.by_cookie.remove(&cookie);
        self.cookie_index.remove(&cookie);
        if self.named[i] {
            self.by_key.remove_if(&info.key, &i);
            self.named[i] = false;
        }
        if self.last.is_some_and(|(_, last)| last == i) {
            self.last = None;
        }
        if self.last_key.is_some_and(|(_, last)| last == i) {
            self.last_key = None;
        }
        self.free.push(i);
        info
    }
}

/// A socket first seen in `ev`: addresses unknown (port 0) until an event of its own names them.
fn new_flow(cookie: u64, ev: &Event) -> FlowInfo {
    FlowInfo {
        sock_cookie: cookie,
        netns: ev.hdr.netns,
        src: UNSPECIFIED_TEXT.to_string(),
        dst: UNSPECIFIED_TEXT.to_string(),
        key: FlowKey {
            netns: ev.hdr.netns,
            local: UNSPECIFIED,
            remote: UNSPECIFIED,
        },
        first_ns: ev.hdr.ts_ns,
        last_ns: ev.hdr.ts_ns,
        events: 0,
        bytes_sent: 0,
        bytes_received: 0,
        state: 0,
        received: ReceivedUpTo::default(),
    }
}

/// An event's [`socket_key`] as lookups take it: an IPv4 one as three words
/// read from the header, the [`FlowKey`] itself built only when asked for.
#[derive(Clone, Copy)]
pub(crate) struct EventKey<'a> {
    ev: &'a Event,
    /// Set for every key with IPv4 ends.
    pub v4: Option<(u32, u64, u64)>,
}

impl<'a> EventKey<'a> {
    #[inline]
    pub fn of(ev: &'a Event) -> EventKey<'a> {
        let v4 = FlowKey::v4_words(ev, is_outgoing(ev))
            // IPv4-mapped IPv6 ends are IPv4 ends.
            .or_else(|| compact_v4(&socket_key(ev)?));
        EventKey { ev, v4 }
    }

    pub fn full(&self) -> Option<FlowKey> {
        socket_key(self.ev)
    }
}

/// The key of the socket an event is about: the sender's for packets on their
/// way out, the receiver's for the rest, the socket's own for socket events.
pub fn socket_key(ev: &Event) -> Option<FlowKey> {
    FlowKey::of(ev, is_outgoing(ev))
}

fn is_outgoing(ev: &Event) -> bool {
    matches!(
        ev.body,
        Body::DevStartXmit(_) | Body::DevXmit(_) | Body::WindowAdv(_)
    )
}

/// Ends not known yet, and as text (not formatted for every new socket).
const UNSPECIFIED: std::net::SocketAddr = std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));
const UNSPECIFIED_TEXT: &str = "0.0.0.0:0";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{abi_addr, tt_data_ready, tt_hdr, tt_pkt, tt_tcp_rcv, tt_window_adv};

    fn hdr(cookie: u64, netns: u32, src: &str, dst: &str) -> tt_hdr {
        let (s, d): (std::net::SocketAddr, std::net::SocketAddr) =
            (src.parse().unwrap(), dst.parse().unwrap());
        let (family, saddr) = abi_addr(s.ip());
        let (_, daddr) = abi_addr(d.ip());
        tt_hdr {
            sock_cookie: cookie,
            netns,
            family,
            saddr,
            daddr,
            sport: s.port(),
            dport: d.port(),
            ..Default::default()
        }
    }

    #[test]
    fn device_events_map_to_the_receiving_socket() {
        let mut table = FlowTable::new();
        let recv = Event::new(
            hdr(77, 2, "198.18.0.2:5001", "198.18.0.1:40000"),
            Body::TcpRcv(tt_tcp_rcv {
                len: 8948,
                ..Default::default()
            }),
        );
        assert_eq!(table.observe(&recv), Some(77));
        // The packet as it arrives: source is the sender.
        let rx = Event::new(
            hdr(0, 2, "198.18.0.1:40000", "198.18.0.2:5001"),
            Body::RxEntry(tt_pkt::default()),
        );
        assert_eq!(table.observe(&rx), Some(77));
        // Same addresses in another namespace are another flow.
        let other = Event::new(
            hdr(0, 3, "198.18.0.1:40000", "198.18.0.2:5001"),
            Body::RxEntry(tt_pkt::default()),
        );
        assert_eq!(table.observe(&other), None);
        // Received once its rcv_nxt passed it.
        let ready = Event::new(
            hdr(77, 2, "198.18.0.2:5001", "198.18.0.1:40000"),
            Body::DataReady(tt_data_ready {
                rcv_nxt: 8948,
                ..Default::default()
            }),
        );
        table.observe(&ready);
        let f = table.get(77).unwrap();
        assert_eq!((f.events, f.bytes_received), (3, 8948));
        assert_eq!(f.src, "198.18.0.2:5001");
    }

    /// Every packet traced, a socket's received bytes are how far its
    /// rcv_nxt advanced, as `tcpi_bytes_received` counts them: a segment
    /// TCP dropped and the copy sent again count once (they counted twice
    /// by their payload: a shrunk window's drops made 25831576 B of the
    /// kernel's 25165824), a segment past a hole when the hole fills, and
    /// the FIN not at all (the kernel counts its sequence number).
    #[test]
    fn received_bytes_are_rcv_nxt_advancing() {
        let mut table = FlowTable::new();
        let at = |body| Event::new(hdr(9, 2, "198.18.0.2:5001", "198.18.0.1:40000"), body);
        let segment = |seq: u32, len: u32, rcv_nxt: u32, flags: u8| {
            at(Body::TcpRcv(tt_tcp_rcv {
                seq,
                len,
                rcv_nxt,
                tcp_flags: flags,
                ..Default::default()
            }))
        };
        let ready = |rcv_nxt| {
            at(Body::DataReady(tt_data_ready {
                rcv_nxt,
                ..Default::default()
            }))
        };
        let events = [
            segment(1000, 1000, 1000, 0),
            ready(2000),
            // Past the window: TCP drops it, rcv_nxt stays.
            segment(2000, 1000, 2000, 0),
            // Past a hole: queued out of order.
            segment(3000, 1000, 2000, 0),
            // The dropped one again fills the hole: both taken.
            segment(2000, 1000, 2000, 0),
            ready(4000),
            // The FIN: rcv_nxt one past the payload.
            segment(4000, 0, 4000, tcp_flags::FIN),
            ready(4001),
        ];
        let mut counted = Vec::new();
        for ev in &events {
            table.observe(ev);
            counted.push(table.get(9).unwrap().bytes_received);
        }
        assert_eq!(counted, [0, 1000, 1000, 1000, 1000, 3000, 3000, 3000]);
    }

    #[test]
    fn received_bytes_count_each_byte_once() {
        let seg = |seq: u32, rcv_nxt: u32| tt_tcp_rcv {
            seq,
            len: 1000,
            rcv_nxt,
            ..Default::default()
        };
        // In order, a duplicate, a half-new one, one past a hole, across the wrap.
        assert_eq!(new_payload(&seg(5000, 5000)), 1000);
        assert_eq!(new_payload(&seg(4000, 5000)), 0);
        assert_eq!(new_payload(&seg(4500, 5000)), 500);
        assert_eq!(new_payload(&seg(7000, 5000)), 1000);
        assert_eq!(new_payload(&seg(u32::MAX - 499, 500)), 0);
        assert_eq!(new_payload(&seg(u32::MAX - 499, 0)), 500);
    }

    #[test]
    fn port_zero_state_changes_do_not_rename_a_flow() {
        let mut table = FlowTable::new();
        let closing = Event::new(
            hdr(5, 1, "198.18.0.1:0", "198.18.0.2:5201"),
            Body::State(Default::default()),
        );
        table.observe(&closing);
        let unnamed = table.get(5).unwrap();
        assert_eq!(unnamed.key.local.port(), 0);
        assert_eq!(unnamed.src, UNSPECIFIED.to_string());
        let data = Event::new(
            hdr(5, 1, "198.18.0.1:40000", "198.18.0.2:5201"),
            Body::TcpRcv(Default::default()),
        );
        table.observe(&data);
        table.observe(&closing);
        assert_eq!(table.get(5).unwrap().src, "198.18.0.1:40000");
    }

    #[test]
    fn a_received_packet_with_its_senders_cookie_goes_to_the_receiver() {
        let mut table = FlowTable::new();
        let send = Event::new(
            hdr(1, 10, "198.18.0.1:40000", "198.18.0.2:5001"),
            Body::WindowAdv(tt_window_adv::default()),
        );
        let recv = Event::new(
            hdr(2, 20, "198.18.0.2:5001", "198.18.0.1:40000"),
            Body::TcpRcv(Default::default()),
        );
        // Across veth the skb keeps skb->sk: the receive side sees cookie 1.
        let rx = Event::new(
            hdr(1, 20, "198.18.0.1:40000", "198.18.0.2:5001"),
            Body::RxEntry(tt_pkt::default()),
        );
        table.observe(&send);
        assert_eq!(table.observe(&rx), None, "no receiving socket known yet");
        table.observe(&recv);
        assert_eq!(table.observe(&rx), Some(2));
        let f = table.get(1).unwrap();
        assert_eq!(
            (f.src.as_str(), f.dst.as_str(), f.netns, f.events),
            ("198.18.0.1:40000", "198.18.0.2:5001", 10, 1)
        );
    }

    #[test]
    fn key_map_tells_keys_apart_by_every_field() {
        let key = |netns, local: &str, remote: &str| FlowKey {
            netns,
            local: local.parse().unwrap(),
            remote: remote.parse().unwrap(),
        };
        let mut map = KeyMap::default();
        let keys = [
            key(1, "10.0.0.1:5000", "10.0.0.2:80"),
            key(2, "10.0.0.1:5000", "10.0.0.2:80"),
            key(1, "10.0.0.2:80", "10.0.0.1:5000"),
            key(1, "10.0.0.1:5001", "10.0.0.2:80"),
            key(1, "[2001:db8::1]:5000", "[2001:db8::2]:80"),
            key(1, "[::ffff:10.0.0.1]:5000", "10.0.0.2:80"),
        ];
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(map.insert(*k, i), None);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(map.get(k), Some(i));
        }
        assert_eq!(map.insert(keys[4], 9), Some(4));
        assert_eq!(map.get(&key(3, "10.0.0.1:5000", "10.0.0.2:80")), None);
    }

    #[test]
    fn peers_pair_across_namespaces() {
        let mut table = FlowTable::new();
        let send = Event::new(
            hdr(1, 10, "198.18.0.1:40000", "198.18.0.2:5001"),
            Body::WindowAdv(tt_window_adv {
                len: 100,
                ..Default::default()
            }),
        );
        let recv = Event::new(
            hdr(2, 20, "198.18.0.2:5001", "198.18.0.1:40000"),
            Body::TcpRcv(Default::default()),
        );
        table.observe(&send);
        table.observe(&recv);
        assert_eq!(table.peer_of(1), Some(2));
        assert_eq!(table.peer_of(2), Some(1));
        assert_eq!(table.flows()[0].sock_cookie, 1);
    }

    #[test]
    fn the_peer_is_the_socket_alive_beside_this_one() {
        const CLIENT: u64 = 1;
        const PEER: u64 = 2;
        let at = |cookie, ts_ns, src: &str, dst: &str| {
            let mut ev = Event::new(hdr(cookie, 10, src, dst), Body::TcpRcv(Default::default()));
            ev.hdr.ts_ns = ts_ns;
            ev
        };
        let (client, server) = ("198.18.0.1:40000", "198.18.0.2:5001");
        // The client from 100 to 1000, its peer from 150 to 900, and other
        // sockets on the peer's addresses: one for a moment meanwhile (an
        // event of a mini-socket), one after. Their cookies vary, so that
        // the listing puts a stray first in some of the cases.
        for stray in 3..40 {
            let mut table = FlowTable::new();
            for ev in [
                at(stray, 500, server, client),
                at(stray + 100, 5_000, server, client),
                at(stray + 100, 6_000, server, client),
                at(CLIENT, 100, client, server),
                at(PEER, 150, server, client),
                at(PEER, 900, server, client),
                at(CLIENT, 1_000, client, server),
            ] {
                table.observe(&ev);
            }
            assert_eq!(table.peer_of(CLIENT), Some(PEER), "stray {stray}");
            assert_eq!(table.peer_of(PEER), Some(CLIENT), "stray {stray}");
        }
    }
}
