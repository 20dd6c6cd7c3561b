//! Decoded events: the raw ring-buffer records of `bpf/tenge_abi.h`, typed.
//!
//! A record is exactly what the BPF program wrote: a `tt_hdr` followed by the
//! body of its kind. Decoding copies it into an [`Event`]; encoding writes the
//! same bytes back, so a trace file stores records verbatim.

use crate::abi::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

pub use crate::abi::{
    tt_app_read, tt_copy_datagram, tt_cpu_sample, tt_data_ready, tt_hdr, tt_kfree_skb,
    tt_napi_poll, tt_pause, tt_pkt, tt_retransmit, tt_sendmsg, tt_sock_task, tt_state,
    tt_task_role, tt_tcp_rcv, tt_window_adv,
};

/// The body of an event, by kind. Device-layer kinds share [`tt_pkt`].
#[derive(Clone, Copy, Debug)]
pub enum Body {
    Sendmsg(tt_sendmsg),
    WindowAdv(tt_window_adv),
    DevStartXmit(tt_pkt),
    DevXmit(tt_pkt),
    NapiPoll(tt_napi_poll),
    RxEntry(tt_pkt),
    NetifReceive(tt_pkt),
    TcpRcv(tt_tcp_rcv),
    DataReady(tt_data_ready),
    CopyDatagram(tt_copy_datagram),
    AppRead(tt_app_read),
    State(tt_state),
    Retransmit(tt_retransmit),
    KfreeSkb(tt_kfree_skb),
    CpuSample(tt_cpu_sample),
    SockTask(tt_sock_task),
    Pause(tt_pause),
}

#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub hdr: tt_hdr,
    pub body: Body,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than the event header")]
    Short(usize),
    #[error("unknown event kind {0}")]
    UnknownKind(u8),
    #[error("record of kind {kind} has {got} bytes, expected {want}")]
    Length {
        kind: &'static str,
        got: usize,
        want: usize,
    },
}

/// TCP header flags as they appear in `tcp_flags`.
/// Socket states of include/net/tcp_states.h (`inet_sock_set_state`'s `newstate`).
pub mod tcp_state {
    pub const ESTABLISHED: u8 = 1;
    pub const SYN_SENT: u8 = 2;
    pub const FIN_WAIT2: u8 = 5;
    pub const CLOSE: u8 = 7;
    pub const LAST_ACK: u8 = 9;
}

pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// A TCP state's name (include/net/tcp_states.h), for people.
pub fn tcp_state_name(state: u8) -> Option<&'static str> {
    const NAMES: [&str; 13] = [
        "ESTABLISHED",
        "SYN_SENT",
        "SYN_RECV",
        "FIN_WAIT1",
        "FIN_WAIT2",
        "TIME_WAIT",
        "CLOSE",
        "CLOSE_WAIT",
        "LAST_ACK",
        "LISTEN",
        "CLOSING",
        "NEW_SYN_RECV",
        "BOUND_INACTIVE",
    ];
    NAMES.get(usize::from(state).checked_sub(1)?).copied()
}

/// TCP header flags as tcpdump writes them: `S`, `.` for ACK, `F`, `R`,
/// `P`, `U`, `E`, `W` (`S.` is SYN+ACK); `none` without any.
pub fn tcp_flags_text(flags: u8) -> String {
    let text: String = [
        (0x02, 'S'),
        (0x01, 'F'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'W'),
        (0x10, '.'),
    ]
    .iter()
    .filter(|(bit, _)| flags & bit != 0)
    .map(|(_, c)| *c)
    .collect();
    if text.is_empty() {
        "none".into()
    } else {
        text
    }
}

macro_rules! kinds {
    ($( $kind:ident => $variant:ident($body:ty, $ev:ty), $name:literal; )*) => {
        /// Stable names of the kinds, as used in JSON (`"kind"`).
        pub fn kind_name(kind: u8) -> Option<&'static str> {
            $( if kind == tt_kind::$kind as u8 { return Some($name); } )*
            None
        }

        /// Size in bytes of a record of this kind (header + body).
        pub fn record_len(kind: u8) -> Option<usize> {
            $( if kind == tt_kind::$kind as u8 { return Some(std::mem::size_of::<$ev>()); } )*
            None
        }

        impl Event {
            /// Decodes one record. `bytes` must hold exactly one record.
            pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
                if bytes.len() < std::mem::size_of::<tt_hdr>() {
                    return Err(DecodeError::Short(bytes.len()));
                }
                let kind = bytes[std::mem::offset_of!(tt_hdr, kind)];
                let want = record_len(kind).ok_or(DecodeError::UnknownKind(kind))?;
                if bytes.len() != want {
                    let kind = kind_name(kind).expect("a kind with a length has a name");
                    return Err(DecodeError::Length { kind, got: bytes.len(), want });
                }
                let mut ev = Event::zeroed();
                Event::decode_first(bytes, &mut ev).expect("a whole record of a known kind");
                Ok(ev)
            }

            /// Decodes the record `bytes` starts with into `ev`, and says how
            /// long it is; None (`ev` untouched) when its kind is unknown or it
            /// runs past the end. Replays decode every record of a block with
            /// this: one test of the kind, one copy of the record, into the
            /// same place every time (an `Event` returned by value was copied
            /// once more, by a call to memcpy).
            #[inline]
            pub fn decode_first(bytes: &[u8], ev: &mut Event) -> Option<usize> {
                let kind = *bytes.get(std::mem::offset_of!(tt_hdr, kind))?;
                $(
                    if kind == tt_kind::$kind as u8 {
                        let len = std::mem::size_of::<$ev>();
                        if bytes.len() < len {
                            return None;
                        }
                        // SAFETY: length checked; the record is plain old data. Its
                        // parts are read one by one: each is copied inline, the
                        // whole record by a call to memcpy.
                        let (hdr, body) = unsafe {
                            let record = bytes.as_ptr();
                            (
                                std::ptr::read_unaligned(
                                    record.add(std::mem::offset_of!($ev, hdr)).cast::<tt_hdr>(),
                                ),
                                std::ptr::read_unaligned(
                                    record.add(std::mem::offset_of!($ev, body)).cast::<$body>(),
                                ),
                            )
                        };
                        ev.hdr = hdr;
                        ev.body = Body::$variant(body);
                        return Some(len);
                    }
                )*
                None
            }

            /// Appends the record's bytes in the kernel's layout, tail padding
            /// zeroed (it was whatever the stack held, so encodings of one
            /// event could differ).
            pub fn encode(&self, out: &mut Vec<u8>) {
                let start = out.len();
                match self.body {
                    $( Body::$variant(body) => {
                        out.resize(start + std::mem::size_of::<$ev>(), 0);
                        // SAFETY: `out` holds size_of::<$ev>() bytes from `start`,
                        // and both parts are written inside them at their offsets.
                        unsafe {
                            let record = out.as_mut_ptr().add(start);
                            std::ptr::write_unaligned(
                                record.add(std::mem::offset_of!($ev, hdr)).cast::<tt_hdr>(),
                                self.hdr,
                            );
                            std::ptr::write_unaligned(
                                record.add(std::mem::offset_of!($ev, body)).cast::<$body>(),
                                body,
                            );
                        }
                    } )*
                }
            }
        }
    };
}

kinds! {
    TT_KIND_SENDMSG => Sendmsg(tt_sendmsg, tt_ev_sendmsg), "sendmsg";
    TT_KIND_WINDOW_ADV => WindowAdv(tt_window_adv, tt_ev_window_adv), "window_adv";
    TT_KIND_DEV_START_XMIT => DevStartXmit(tt_pkt, tt_ev_pkt), "dev_start_xmit";
    TT_KIND_DEV_XMIT => DevXmit(tt_pkt, tt_ev_pkt), "dev_xmit";
    TT_KIND_NAPI_POLL => NapiPoll(tt_napi_poll, tt_ev_napi_poll), "napi_poll";
    TT_KIND_RX_ENTRY => RxEntry(tt_pkt, tt_ev_pkt), "rx_entry";
    TT_KIND_NETIF_RECEIVE => NetifReceive(tt_pkt, tt_ev_pkt), "netif_receive";
    TT_KIND_TCP_RCV => TcpRcv(tt_tcp_rcv, tt_ev_tcp_rcv), "tcp_rcv";
    TT_KIND_DATA_READY => DataReady(tt_data_ready, tt_ev_data_ready), "data_ready";
    TT_KIND_COPY_DATAGRAM => CopyDatagram(tt_copy_datagram, tt_ev_copy_datagram), "copy_datagram";
    TT_KIND_APP_READ => AppRead(tt_app_read, tt_ev_app_read), "app_read";
    TT_KIND_STATE => State(tt_state, tt_ev_state), "state";
    TT_KIND_RETRANSMIT => Retransmit(tt_retransmit, tt_ev_retransmit), "retransmit";
    TT_KIND_KFREE_SKB => KfreeSkb(tt_kfree_skb, tt_ev_kfree_skb), "kfree_skb";
    TT_KIND_CPU_SAMPLE => CpuSample(tt_cpu_sample, tt_ev_cpu_sample), "cpu_sample";
    TT_KIND_SOCK_TASK => SockTask(tt_sock_task, tt_ev_sock_task), "sock_task";
    TT_KIND_PAUSE => Pause(tt_pause, tt_ev_pause), "pause";
}

impl Body {
    /// The `tt_kind` number of this body.
    pub fn kind(&self) -> u8 {
        (match self {
            Body::Sendmsg(_) => tt_kind::TT_KIND_SENDMSG,
            Body::WindowAdv(_) => tt_kind::TT_KIND_WINDOW_ADV,
            Body::DevStartXmit(_) => tt_kind::TT_KIND_DEV_START_XMIT,
            Body::DevXmit(_) => tt_kind::TT_KIND_DEV_XMIT,
            Body::NapiPoll(_) => tt_kind::TT_KIND_NAPI_POLL,
            Body::RxEntry(_) => tt_kind::TT_KIND_RX_ENTRY,
            Body::NetifReceive(_) => tt_kind::TT_KIND_NETIF_RECEIVE,
            Body::TcpRcv(_) => tt_kind::TT_KIND_TCP_RCV,
            Body::DataReady(_) => tt_kind::TT_KIND_DATA_READY,
            Body::CopyDatagram(_) => tt_kind::TT_KIND_COPY_DATAGRAM,
            Body::AppRead(_) => tt_kind::TT_KIND_APP_READ,
            Body::State(_) => tt_kind::TT_KIND_STATE,
            Body::Retransmit(_) => tt_kind::TT_KIND_RETRANSMIT,
            Body::KfreeSkb(_) => tt_kind::TT_KIND_KFREE_SKB,
            Body::CpuSample(_) => tt_kind::TT_KIND_CPU_SAMPLE,
            Body::SockTask(_) => tt_kind::TT_KIND_SOCK_TASK,
            Body::Pause(_) => tt_kind::TT_KIND_PAUSE,
        }) as u8
    }
}

impl Event {
    /// A zeroed event, for [`decode_first`](Self::decode_first) to write over.
    pub fn zeroed() -> Event {
        Event::new(tt_hdr::default(), Body::CpuSample(tt_cpu_sample::default()))
    }

    /// Builds an event from a body, with the header's kind set to match.
    /// Used by tests and synthetic streams; the kernel fills headers itself.
    pub fn new(mut hdr: tt_hdr, body: Body) -> Event {
        hdr.kind = body.kind();
        Event { hdr, body }
    }

    /// Whether the fields the kernel bounds are within its bounds: a time
    /// below 2^62 ns (146 years of uptime; sums of a few differences of such
    /// times cannot overflow), window scales of at most 14 (RFC 7323).
    /// A recording's events that are not were damaged.
    pub fn within_kernel_bounds(&self) -> bool {
        const MAX_WSCALE: u8 = 14;
        self.hdr.ts_ns < 1 << 62
            && match &self.body {
                Body::WindowAdv(w) => w.rcv_wscale <= MAX_WSCALE,
                Body::TcpRcv(r) => r.snd_wscale <= MAX_WSCALE,
                _ => true,
            }
    }

    pub fn kind_name(&self) -> &'static str {
        kind_name(self.hdr.kind).expect("decoded events have known kinds")
    }

    pub fn ts_ns(&self) -> u64 {
        self.hdr.ts_ns
    }

    /// Source address and port (the local end for socket events).
    pub fn src(&self) -> Option<SocketAddr> {
        ip_of(self.hdr.family, &self.hdr.saddr).map(|ip| SocketAddr::new(ip, self.hdr.sport))
    }

    /// Destination address and port (the remote end for socket events).
    pub fn dst(&self) -> Option<SocketAddr> {
        ip_of(self.hdr.family, &self.hdr.daddr).map(|ip| SocketAddr::new(ip, self.hdr.dport))
    }

    /// True for kinds whose addresses are the packet's own (source first),
    /// false for socket events (local end first).
    pub fn is_packet_event(&self) -> bool {
        matches!(
            self.body,
            Body::DevStartXmit(_)
                | Body::DevXmit(_)
                | Body::RxEntry(_)
                | Body::NetifReceive(_)
                | Body::KfreeSkb(_)
        )
    }
}

/// Whether records of `kind` are packets on their way in. Their skb can
/// still carry the sending socket (veth keeps skb->sk across namespaces), so
/// their cookie says nothing of the socket that receives them.
#[inline]
pub fn is_incoming_packet(kind: u8) -> bool {
    [
        tt_kind::TT_KIND_RX_ENTRY,
        tt_kind::TT_KIND_NETIF_RECEIVE,
        tt_kind::TT_KIND_KFREE_SKB,
    ]
    .map(|k| k as u8)
    .contains(&kind)
}

/// Bytes per sampling block: 1-in-N sampling keeps or drops whole blocks of
/// a flow's sequence space.
pub const SAMPLE_BLOCK: u32 = 1 << TT_SAMPLE_BLOCK_SHIFT;

/// Whether the block of sequence space numbered `block` is one of the 1 in
/// `every` that sampling keeps (murmur3's 32-bit finalizer, then modulo).
fn block_chosen(block: u32, every: u32) -> bool {
    let mut h = block;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h.is_multiple_of(every)
}

/// What an ACK (`tcp_probe`'s state, before TCP took it in) leaves once
/// taken in: `snd_una`, the later of it and the ACK, and the window the ACK
/// offers, `win_raw << snd_wscale` (the new `snd_wnd`).
pub fn after_ack(r: &tt_tcp_rcv) -> (u32, u32) {
    let una = match r.ack.wrapping_sub(r.snd_una) as i32 > 0 {
        true => r.ack,
        false => r.snd_una,
    };
    (una, u32::from(r.win_raw) << r.snd_wscale)
}

/// The segments still in flight (`packets_out`) once the ACK in `r` is taken
/// in: those it acknowledges whole leave (`tcp_clean_rtx_queue()`), counted
/// as its share of the bytes in flight (exact where the segments are of one
/// size); all of them where it acknowledges everything sent. Kept at the
/// count before the ACK, a flight at cwnd stood until the next send: behind
/// a token bucket, where TSQ held the sender between an ACK and its next
/// send, 11 % of busy time read as cwnd-limited beside 6.5 % of the polls.
pub fn packets_out_after_ack(r: &tt_tcp_rcv) -> u32 {
    let (una, _) = after_ack(r);
    let in_flight = r.snd_nxt.wrapping_sub(r.snd_una);
    let acked = una.wrapping_sub(r.snd_una);
    if acked == 0 || in_flight == 0 {
        return r.packets_out;
    }
    if !seq_before(una, r.snd_nxt) {
        return 0;
    }
    // A segment acknowledged in part stays (its pcount goes with whole ones).
    let left =
        (u64::from(r.packets_out) * u64::from(in_flight - acked)).div_ceil(u64::from(in_flight));
    left as u32
}

/// The size of the segments an outgoing skb (`window_adv`) carries: its
/// length, or a GSO skb's `gso_size` (where unset, its length shared out).
pub fn segment_size(w: &tt_window_adv) -> u32 {
    match (u32::from(w.gso_segs).max(1), w.gso_size) {
        (1, _) => w.len,
        (segs, 0) => w.len.div_ceil(segs),
        (_, size) => u32::from(size),
    }
}

/// Whether the peer's window, ending at `wnd_end`, holds back a sender that
/// has sent up to `sent` and written up to `written` (MSS `mss`):
/// `tcp_snd_wnd_test()` fails for the first unsent skb, whose first
/// `min(len, mss)` bytes must fit. That skb holds at most what is unsent,
/// and small writes coalesce into it: with 1000-byte writes and an MSS of
/// 16 KB, a window with room for a few of them held nothing (the kernel's
/// rwnd_limited 0 where less than an MSS of room read as held: 11-15 % of
/// the segments held_rwnd). Nothing unsent, nothing held.
pub fn window_holds(wnd_end: u32, sent: u32, written: u32, mss: u32) -> bool {
    let unsent = written.wrapping_sub(sent) as i32;
    unsent > 0 && seq_before(wnd_end, sent.wrapping_add((unsent as u32).min(mss.max(1))))
}

/// Whether 1-in-`every` sampling keeps the byte at sequence number `seq`.
pub fn sampled_byte(seq: u32, every: u32) -> bool {
    every <= 1 || block_chosen(seq >> TT_SAMPLE_BLOCK_SHIFT, every)
}

/// Whether 1-in-`every` sampling keeps an event keyed on the bytes
/// `[start, end)` (32-bit sequence space, wrapping): the range touches a
/// chosen block, or spans more than `TT_SAMPLE_MAX_BLOCKS` blocks. An empty
/// range is kept only without sampling. The same function as
/// `sampled_range()` in `bpf/tenge_common.bpf.h`.
pub fn sampled_range(start: u32, end: u32, every: u32) -> bool {
    if every <= 1 {
        return true;
    }
    let len = end.wrapping_sub(start);
    if len == 0 {
        return false;
    }
    if len > TT_SAMPLE_MAX_BLOCKS * SAMPLE_BLOCK {
        return true;
    }
    let base = start & !(SAMPLE_BLOCK - 1);
    // Blocks after the first; at most TT_SAMPLE_MAX_BLOCKS given len.
    let more =
        ((end.wrapping_sub(1) & !(SAMPLE_BLOCK - 1)).wrapping_sub(base)) >> TT_SAMPLE_BLOCK_SHIFT;
    (0..=more).any(|i| {
        block_chosen(
            base.wrapping_add(i * SAMPLE_BLOCK) >> TT_SAMPLE_BLOCK_SHIFT,
            every,
        )
    })
}

/// `a` comes before `b` in 32-bit sequence space (the kernel's `before()`).
pub fn seq_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` comes after `b` in 32-bit sequence space (the kernel's `after()`).
pub fn seq_after(a: u32, b: u32) -> bool {
    seq_before(b, a)
}

/// The bytes `[start, start + len)` stand for in a recording sampled 1 in
/// `every` by sequence number: those in chosen blocks, `every` times each
/// (a block is kept or dropped whole, and a range that touches a chosen one
/// is kept, so the bytes of chosen blocks are a 1-in-`every` sample of the
/// flow's, every one of them seen); all of them where sampling keeps the
/// range whatever it holds (more than `TT_SAMPLE_MAX_BLOCKS` blocks), or
/// without sampling.
pub fn sampled_bytes(start: u32, len: u32, every: u32) -> u64 {
    if every <= 1 || len > TT_SAMPLE_MAX_BLOCKS * SAMPLE_BLOCK {
        return u64::from(len);
    }
    let (mut at, mut left, mut chosen) = (start, len, 0u64);
    while left > 0 {
        let in_block = (SAMPLE_BLOCK - (at & (SAMPLE_BLOCK - 1))).min(left);
        if block_chosen(at >> TT_SAMPLE_BLOCK_SHIFT, every) {
            chosen += u64::from(in_block);
        }
        at = at.wrapping_add(in_block);
        left -= in_block;
    }
    chosen * u64::from(every)
}

/// A segment by its payload; one without payload by the last byte it
/// acknowledges (the ACK of a kept byte is kept), or by its own seq when it
/// acknowledges nothing (a SYN). `sampled_segment()` in the BPF header.
fn sampled_segment(seq: u32, len: u32, ack: u32, flags: u8, every: u32) -> bool {
    match (len, flags & tcp_flags::ACK != 0) {
        (0, true) => sampled_range(ack.wrapping_sub(1), ack, every),
        (0, false) => sampled_range(seq, seq.wrapping_add(1), every),
        _ => sampled_range(seq, seq.wrapping_add(len), every),
    }
}

impl Event {
    /// Whether the kernel, sampling 1 in `every`, keeps this event: by the
    /// bytes each kind is keyed on in `bpf/tenge.bpf.c`. Lifecycle events
    /// (state, retransmit, kfree_skb), socket tasks and CPU samples are never sampled out;
    /// napi_poll, which has no bytes, is kept 1 in `every` by a per-CPU
    /// count no event shows, so this says true for it.
    pub fn sampled(&self, every: u32) -> bool {
        match &self.body {
            Body::WindowAdv(w) => sampled_segment(w.seq, w.len, w.ack, w.tcp_flags, every),
            Body::DevStartXmit(p) | Body::DevXmit(p) | Body::RxEntry(p) | Body::NetifReceive(p) => {
                sampled_segment(p.seq, p.len, p.ack, p.tcp_flags, every)
            }
            Body::TcpRcv(t) => {
                // end_seq counts SYN and FIN; the payload ends before them.
                let flags = (t.tcp_flags & (tcp_flags::SYN | tcp_flags::FIN)).count_ones();
                let len = t.end_seq.wrapping_sub(t.seq).wrapping_sub(flags);
                sampled_segment(t.seq, len, t.ack, t.tcp_flags, every)
            }
            Body::Sendmsg(s) => {
                // One copy iteration writes at most size_goal bytes (0: unknown).
                let most = match s.size_goal {
                    0 => s.msg_left,
                    goal => goal.min(s.msg_left),
                };
                sampled_range(s.write_seq, s.write_seq.wrapping_add(most), every)
            }
            Body::DataReady(d) => sampled_range(d.copied_seq, d.rcv_nxt, every),
            Body::CopyDatagram(c) => sampled_range(c.seq, c.end_seq, every),
            Body::AppRead(r) => {
                let returned = r.ret.max(0) as u32;
                sampled_range(r.copied_seq.wrapping_sub(returned), r.copied_seq, every)
            }
            Body::State(_)
            | Body::Retransmit(_)
            | Body::KfreeSkb(_)
            | Body::NapiPoll(_)
            | Body::CpuSample(_)
            | Body::SockTask(_)
            | Body::Pause(_) => true,
        }
    }
}

/// Turns an ABI address (IPv6, or IPv4-mapped IPv6) into an `IpAddr`.
pub fn ip_of(family: u8, addr: &[u8; 16]) -> Option<IpAddr> {
    match family as i32 {
        libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(
            addr[12], addr[13], addr[14], addr[15],
        ))),
        libc::AF_INET6 => {
            let v6 = Ipv6Addr::from(*addr);
            Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
        }
        _ => None,
    }
}

/// The inverse of [`ip_of`]: ABI family and address bytes.
pub fn abi_addr(ip: IpAddr) -> (u8, [u8; 16]) {
    match ip {
        IpAddr::V4(v4) => (libc::AF_INET as u8, v4.to_ipv6_mapped().octets()),
        IpAddr::V6(v6) => (libc::AF_INET6 as u8, v6.octets()),
    }
}

/// A connection as seen from one socket: its network namespace and both ends,
/// local first. Packet events are turned around to the receiving socket's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FlowKey {
    pub netns: u32,
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

/// Every event looks a key up: one word per IPv4 end instead of the derived
/// hash's length-prefixed octets, discriminants and port, field by field.
impl std::hash::Hash for FlowKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u32(self.netns);
        for end in [self.local, self.remote] {
            match end {
                SocketAddr::V4(a) => {
                    state.write_u64(u64::from(a.ip().to_bits()) << 16 | u64::from(a.port()))
                }
                SocketAddr::V6(a) => {
                    state.write_u128(a.ip().to_bits());
                    state.write_u16(a.port());
                }
            }
        }
    }
}

impl FlowKey {
    /// The key of the socket that sent (`outgoing`) or receives this event's packet,
    /// or of the socket itself for socket events. None when the event has no flow.
    pub fn of(ev: &Event, outgoing: bool) -> Option<FlowKey> {
        if let Some((netns, local, remote)) = FlowKey::v4_words(ev, outgoing) {
            let end = |word: u64| SocketAddr::V4(v4_end(word));
            return Some(FlowKey {
                netns,
                local: end(local),
                remote: end(remote),
            });
        }
        let (src, dst) = (ev.src()?, ev.dst()?);
        let (local, remote) = if ev.turned(outgoing) {
            (dst, src)
        } else {
            (src, dst)
        };
        Some(FlowKey {
            netns: ev.hdr.netns,
            local,
            remote,
        })
    }

    /// [`of`](Self::of) for an `AF_INET` event, as lookups compare it: the
    /// namespace, then each end as address << 16 | port, read straight from
    /// the header (every event of a trace looks its key up).
    pub fn v4_words(ev: &Event, outgoing: bool) -> Option<(u32, u64, u64)> {
        let h = &ev.hdr;
        if h.family as i32 != libc::AF_INET {
            return None;
        }
        let end = |addr: &[u8; 16], port: u16| {
            let [.., a, b, c, d] = *addr;
            v4_word(&SocketAddrV4::new(Ipv4Addr::from([a, b, c, d]), port))
        };
        let (src, dst) = (end(&h.saddr, h.sport), end(&h.daddr, h.dport));
        Some(if ev.turned(outgoing) {
            (h.netns, dst, src)
        } else {
            (h.netns, src, dst)
        })
    }
}

/// An IPv4 end as one word, address << 16 | port: how key lookups compare it.
pub fn v4_word(end: &SocketAddrV4) -> u64 {
    u64::from(end.ip().to_bits()) << 16 | u64::from(end.port())
}

/// The end [`v4_word`] made a word of.
fn v4_end(word: u64) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::from_bits((word >> 16) as u32), word as u16)
}

/// `addr.to_string()`, the same text: reports name every socket by its ends,
/// and std's formatting machinery took some 1800 instructions per IPv4 end.
pub fn addr_text(addr: &SocketAddr) -> String {
    let SocketAddr::V4(v4) = addr else {
        return addr.to_string();
    };
    let [a, b, c, d] = v4.ip().octets();
    let mut text = String::with_capacity(21);
    push_decimal(&mut text, a.into());
    for octet in [b, c, d] {
        text.push('.');
        push_decimal(&mut text, octet.into());
    }
    text.push(':');
    push_decimal(&mut text, v4.port());
    text
}

/// Appends `n` in decimal.
fn push_decimal(text: &mut String, n: u16) {
    if n >= 10 {
        push_decimal(text, n / 10);
    }
    text.push(char::from(b'0' + (n % 10) as u8));
}

impl Event {
    /// Whether the key of the socket this event is for, sending it
    /// (`outgoing`) or not, has the header's ends the other way round.
    fn turned(&self, outgoing: bool) -> bool {
        self.is_packet_event() && !outgoing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_moves_una_forward_only_and_scales_its_window() {
        let ack = |snd_una, ack| tt_tcp_rcv {
            snd_una,
            ack,
            win_raw: 1000,
            snd_wscale: 3,
            ..Default::default()
        };
        assert_eq!(after_ack(&ack(100, 300)), (300, 8000));
        // An old ACK leaves snd_una; across the wrap, a new one moves it.
        assert_eq!(after_ack(&ack(300, 100)), (300, 8000));
        assert_eq!(after_ack(&ack(u32::MAX - 5, 10)), (10, 8000));
    }

    #[test]
    fn the_segments_an_ack_acknowledges_leave_the_flight() {
        // 12 segments of 1000 B in flight from 5000.
        let ack = |ack| tt_tcp_rcv {
            snd_una: 5000,
            snd_nxt: 17_000,
            ack,
            packets_out: 12,
            ..Default::default()
        };
        assert_eq!(packets_out_after_ack(&ack(9000)), 8);
        // Part of a segment: it stays.
        assert_eq!(packets_out_after_ack(&ack(9500)), 8);
        assert_eq!(packets_out_after_ack(&ack(17_000)), 0);
        // A duplicate or old ACK takes nothing out.
        assert_eq!(packets_out_after_ack(&ack(5000)), 12);
        assert_eq!(packets_out_after_ack(&ack(4000)), 12);
        // Across the wrap: 12 of 1000 B from 2^32 − 2000, 3 acknowledged.
        let wrapped = tt_tcp_rcv {
            snd_una: u32::MAX - 1999,
            snd_nxt: 10_000,
            ack: 1000,
            packets_out: 12,
            ..Default::default()
        };
        assert_eq!(packets_out_after_ack(&wrapped), 9);
    }

    /// `tcp_snd_wnd_test()`: the unsent head's first `min(len, mss)` bytes
    /// must fit, and the head holds at most what is unsent.
    #[test]
    fn the_window_holds_what_of_the_unsent_head_does_not_fit() {
        let mss = 16_000;
        // 3000 B of room, 1000 B unsent: it fits, under an MSS of room.
        assert!(!window_holds(13_000, 10_000, 11_000, mss));
        // 1000 B of room, 3000 B unsent: the head's first 3000 B do not.
        assert!(window_holds(11_000, 10_000, 13_000, mss));
        // Exactly the head's room; the MSS bounds what must fit.
        assert!(!window_holds(13_000, 10_000, 13_000, mss));
        assert!(!window_holds(26_000, 10_000, 90_000, mss));
        assert!(window_holds(25_999, 10_000, 90_000, mss));
        // Nothing unsent, a window shut or shrunk behind snd_nxt: nothing held
        // but where data waits.
        assert!(!window_holds(9_000, 10_000, 10_000, mss));
        assert!(window_holds(9_000, 10_000, 10_001, mss));
        // Across the wrap.
        assert!(window_holds(5, u32::MAX - 10, 100, mss));
        assert!(!window_holds(200, u32::MAX - 10, 100, mss));
    }

    #[test]
    fn tcp_states_and_flags_by_name() {
        assert_eq!(tcp_state_name(1), Some("ESTABLISHED"));
        assert_eq!(tcp_state_name(10), Some("LISTEN"));
        assert_eq!(tcp_state_name(0), None);
        assert_eq!(tcp_state_name(200), None);
        assert_eq!(tcp_flags_text(0x12), "S.");
        assert_eq!(tcp_flags_text(0x18), "P.");
        assert_eq!(tcp_flags_text(0x11), "F.");
        assert_eq!(tcp_flags_text(0), "none");
    }

    fn hdr() -> tt_hdr {
        let (family, saddr) = abi_addr("10.0.0.1".parse().unwrap());
        let (_, daddr) = abi_addr("10.0.0.2".parse().unwrap());
        tt_hdr {
            ts_ns: 42,
            sock_cookie: 7,
            family,
            saddr,
            daddr,
            sport: 5000,
            dport: 80,
            cpu: 1,
            ..Default::default()
        }
    }

    #[test]
    fn round_trip_every_kind() {
        let bodies = [
            Body::Sendmsg(tt_sendmsg {
                write_seq: 1,
                msg_left: 100,
                ..Default::default()
            }),
            Body::WindowAdv(tt_window_adv {
                window: 26844,
                rcv_mss: 8948,
                ..Default::default()
            }),
            Body::DevStartXmit(tt_pkt {
                seq: 9,
                ..Default::default()
            }),
            Body::DevXmit(tt_pkt {
                rc: -1,
                ..Default::default()
            }),
            Body::NapiPoll(tt_napi_poll {
                work: 3,
                budget: 64,
                ..Default::default()
            }),
            Body::RxEntry(tt_pkt {
                len: 8948,
                ..Default::default()
            }),
            Body::NetifReceive(tt_pkt {
                gso_segs: 4,
                ..Default::default()
            }),
            Body::TcpRcv(tt_tcp_rcv {
                chrono_stat: [1, 2, 3],
                ..Default::default()
            }),
            Body::DataReady(tt_data_ready {
                rcv_nxt: 5,
                ..Default::default()
            }),
            Body::CopyDatagram(tt_copy_datagram {
                len: 1000,
                ..Default::default()
            }),
            Body::AppRead(tt_app_read {
                ret: -11,
                ..Default::default()
            }),
            Body::State(tt_state {
                newstate: 1,
                ..Default::default()
            }),
            Body::Retransmit(tt_retransmit {
                err: 0,
                ..Default::default()
            }),
            Body::KfreeSkb(tt_kfree_skb {
                reason: 32,
                ..Default::default()
            }),
            Body::CpuSample(tt_cpu_sample {
                kstack_id: -14,
                ..Default::default()
            }),
        ];
        for body in bodies {
            let ev = Event::new(hdr(), body);
            let mut bytes = Vec::new();
            ev.encode(&mut bytes);
            assert_eq!(Some(bytes.len()), record_len(ev.hdr.kind));
            let back = Event::decode(&bytes).unwrap();
            assert_eq!(back.kind_name(), ev.kind_name());
            let mut again = Vec::new();
            back.encode(&mut again);
            assert_eq!(bytes, again);
        }
    }

    #[test]
    fn rejects_bad_records() {
        assert_eq!(
            Event::decode(&[0u8; 10]).unwrap_err(),
            DecodeError::Short(10)
        );
        let mut bytes = Vec::new();
        Event::new(hdr(), Body::DataReady(Default::default())).encode(&mut bytes);
        bytes[std::mem::offset_of!(tt_hdr, kind)] = 200;
        assert_eq!(
            Event::decode(&bytes).unwrap_err(),
            DecodeError::UnknownKind(200)
        );
        bytes[std::mem::offset_of!(tt_hdr, kind)] = tt_kind::TT_KIND_WINDOW_ADV as u8;
        assert!(matches!(
            Event::decode(&bytes).unwrap_err(),
            DecodeError::Length {
                kind: "window_adv",
                ..
            }
        ));
    }

    #[test]
    fn addresses_and_flow_keys() {
        let ev = Event::new(hdr(), Body::RxEntry(Default::default()));
        assert_eq!(ev.src().unwrap().to_string(), "10.0.0.1:5000");
        let key = FlowKey::of(&ev, false).unwrap();
        assert_eq!(key.local.to_string(), "10.0.0.2:80");
        // IPv4 keys take their own path; IPv6 ones the general one.
        let turned = |ev: &Event| FlowKey {
            netns: ev.hdr.netns,
            local: ev.dst().unwrap(),
            remote: ev.src().unwrap(),
        };
        assert_eq!(key, turned(&ev));
        let mut v6 = ev;
        v6.hdr.family = libc::AF_INET6 as u8;
        v6.hdr.saddr = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
        let key6 = FlowKey::of(&v6, false).unwrap();
        assert_eq!(key6, turned(&v6));
        assert_eq!(key6.remote.to_string(), "[2001:db8::1]:5000");
        let sock = Event::new(hdr(), Body::DataReady(Default::default()));
        assert_eq!(
            FlowKey::of(&sock, false).unwrap().local.to_string(),
            "10.0.0.1:5000"
        );
    }

    #[test]
    fn address_text_is_std_s() {
        for text in [
            "0.0.0.0:0",
            "10.1.39.16:40000",
            "255.255.255.255:65535",
            "192.168.100.9:80",
            "[2001:db8::1]:443",
            "[::ffff:10.0.0.1]:5000",
        ] {
            let addr: SocketAddr = text.parse().unwrap();
            assert_eq!(addr_text(&addr), text);
            assert_eq!(addr_text(&addr), addr.to_string());
        }
    }

    /// Block `b` starts at byte `b << 14`.
    fn block(b: u32) -> u32 {
        b << TT_SAMPLE_BLOCK_SHIFT
    }

    #[test]
    fn blocks_chosen_by_hand() {
        // murmur3 fmix32: 1 -> 0x514e28b7 (% 4 = 3), 6 -> 0x5ceb4d08 (% 4 = 0,
        // % 64 = 8), 235 -> 0x8bbbf680 (% 64 = 0), 0x3ffff -> 0x7ff9f223 (% 4 = 3);
        // 0 is its fixed point, chosen at every rate. With every = 4 the
        // chosen blocks below 17 are 0, 6, 7, 10, 11 and 16.
        let chosen: Vec<u32> = (0..17).filter(|&b| sampled_byte(block(b), 4)).collect();
        assert_eq!(chosen, [0, 6, 7, 10, 11, 16]);
        assert!(!sampled_byte(block(6), 64) && sampled_byte(block(235), 64));
        assert!(!sampled_byte(u32::MAX, 4));
        // Every byte of a block goes with it.
        assert!(sampled_byte(block(7) - 1, 4) && !sampled_byte(block(6) - 1, 4));
        // No sampling keeps everything, even ranges with no byte.
        assert!(sampled_byte(block(1), 1) && sampled_range(5, 5, 0));
    }

    /// Chosen blocks below 17 at 1 in 4: 0, 6, 7, 10, 11 and 16.
    #[test]
    fn a_range_stands_for_the_bytes_of_its_chosen_blocks_times_n() {
        let n = |start, len| sampled_bytes(start, len, 4);
        // Not sampled: every byte.
        assert_eq!(sampled_bytes(block(1), 100, 1), 100);
        // Half of block 5 (not chosen), all of 6 and 7 (chosen), 100 bytes of 8.
        let half = SAMPLE_BLOCK / 2;
        let len = half + 2 * SAMPLE_BLOCK + 100;
        assert_eq!(n(block(5) + half, len), 4 * 2 * u64::from(SAMPLE_BLOCK));
        assert_eq!(n(block(7) + half, 10), 40);
        assert_eq!(n(block(8), 10), 0);
        // Across the wrap: block 0x3ffff is not chosen, block 0 is.
        assert_eq!(n(u32::MAX - 9, 20), 40);
        // A range sampling keeps whole stands for itself.
        let huge = (TT_SAMPLE_MAX_BLOCKS + 1) * SAMPLE_BLOCK;
        assert_eq!(n(block(1), huge), u64::from(huge));
    }

    /// A flow's bytes from the kept segments alone: 64 KiB skbs over 256 MiB
    /// of sequence space from an odd start, 1 in 8 (measured: 2.1% over).
    /// The kept skbs' own bytes, times 8, would say 3.9 times as much (an
    /// skb spans 4 or 5 blocks, and is kept if any of them is chosen).
    #[test]
    fn kept_segments_estimate_a_flows_bytes() {
        let (every, skb, total) = (8, 65_160u32, 256u32 << 20);
        let (mut estimate, mut kept_bytes) = (0u64, 0u64);
        let mut seq = 0xfff0_1234u32;
        for _ in 0..total / skb {
            if sampled_range(seq, seq.wrapping_add(skb), every) {
                estimate += sampled_bytes(seq, skb, every);
                kept_bytes += u64::from(skb);
            } else {
                assert_eq!(sampled_bytes(seq, skb, every), 0, "a dropped skb's bytes");
            }
            seq = seq.wrapping_add(skb);
        }
        let sent = f64::from(total / skb * skb);
        let error = estimate as f64 / sent - 1.0;
        assert!(error.abs() < 0.05, "estimate off by {error:+.3}");
        assert!(kept_bytes as f64 * f64::from(every) > 3.5 * sent);
    }

    #[test]
    fn ranges_kept_when_they_touch_a_chosen_block() {
        let r = |start, end| sampled_range(start, end, 4);
        // Blocks 1-5 and 12-15 are not chosen, 6 and 16 are (every = 4).
        assert!(!r(block(1), block(6)));
        assert!(!r(block(6) - 1, block(6)));
        assert!(r(block(5) + 100, block(6) + 1));
        assert!(!r(block(12), block(16)) && r(block(12), block(16) + 1));
        assert!(!r(block(7), block(7)), "an empty range has no byte");
        // Across the wrap of sequence space: 0x3ffff is not chosen, 0 is.
        assert!(!r(block(0x3ffff), 0));
        assert!(r(block(0x3ffff) + 10, 16));
        // 1 in 64: blocks 1 to 234 are all unchosen. 64 of them are tested,
        // a 65th makes the range too long to test, and it is kept.
        assert!(!sampled_range(block(1), block(65), 64));
        assert!(sampled_range(block(1), block(66), 64));
        assert!(!sampled_range(block(1) + 1, block(65) + 1, 64));
    }

    #[test]
    fn events_keyed_on_their_bytes() {
        let ev = |body| Event::new(hdr(), body);
        let every = 4;
        // A data segment by its payload [seq, seq + len); a pure ACK by ack - 1.
        let pkt = |seq, len, ack, tcp_flags| {
            ev(Body::RxEntry(tt_pkt {
                seq,
                len,
                ack,
                tcp_flags,
                ..Default::default()
            }))
        };
        assert!(pkt(block(5) + 1000, 16_000, block(3), tcp_flags::ACK).sampled(every));
        assert!(!pkt(block(5), 1000, block(6), tcp_flags::ACK).sampled(every));
        assert!(pkt(block(1), 0, block(6) + 1, tcp_flags::ACK).sampled(every));
        assert!(!pkt(block(6), 0, block(6), tcp_flags::ACK).sampled(every));
        // A SYN acknowledges nothing: keyed by its own seq.
        assert!(pkt(block(6) + 7, 0, 0, tcp_flags::SYN).sampled(every));
        // tcp_rcv: end_seq counts the FIN, the payload ends at block 6.
        let rcv = ev(Body::TcpRcv(tt_tcp_rcv {
            seq: block(6) - 100,
            end_seq: block(6) + 1,
            tcp_flags: tcp_flags::FIN | tcp_flags::ACK,
            ..Default::default()
        }));
        assert!(!rcv.sampled(every) && rcv.sampled(1));
        // sendmsg: at most size_goal bytes from write_seq (all that is left without a goal).
        let send = |msg_left, size_goal| {
            ev(Body::Sendmsg(tt_sendmsg {
                write_seq: block(6) - 1000,
                msg_left,
                size_goal,
                ..Default::default()
            }))
            .sampled(every)
        };
        assert!(!send(5000, 1000) && send(5000, 1001) && !send(1000, 0) && send(1001, 0));
        // data_ready: the unread bytes [copied_seq, rcv_nxt).
        let ready = |copied_seq, rcv_nxt| {
            ev(Body::DataReady(tt_data_ready {
                copied_seq,
                rcv_nxt,
                ..Default::default()
            }))
            .sampled(every)
        };
        assert!(ready(block(5), block(6) + 1) && !ready(block(1), block(6)));
        // app_read: the bytes returned, ending at copied_seq; none for errors and EOF.
        let read = |ret, copied_seq| {
            ev(Body::AppRead(tt_app_read {
                ret,
                copied_seq,
                ..Default::default()
            }))
            .sampled(every)
        };
        assert!(read(1, block(6) + 1) && !read(1, block(6)) && !read(0, block(6) + 1));
        assert!(!read(-11, block(6) + 1));
        let copy = ev(Body::CopyDatagram(tt_copy_datagram {
            seq: block(2),
            end_seq: block(6) + 1,
            len: 10,
            ..Default::default()
        }));
        assert!(copy.sampled(every));
        // Lifecycle events are never sampled out.
        assert!(ev(Body::State(tt_state::default())).sampled(1 << 30));
    }
}
