//! Synthetic event streams for benchmarks and tests: a TCP connection's
//! segments through every hop a full trace records, with the socket state a
//! real kernel would report along the way. Pure code, no I/O.
//!
//! Per data segment: the sender's sendmsg (every `send_every`-th segment),
//! window_adv, dev_start_xmit, dev_xmit; the receiver's rx_entry,
//! netif_receive, tcp_rcv, data_ready, copy_datagram, app_read (every
//! `read_every`-th); and every `ack_every`-th segment an ACK the same path
//! back, ending in the sender's tcp_rcv.

use crate::event::{
    abi_addr, tcp_flags, tcp_state, tt_app_read, tt_copy_datagram, tt_data_ready, tt_hdr, tt_pkt,
    tt_sendmsg, tt_state, tt_tcp_rcv, tt_window_adv, Body, Event,
};
use std::net::SocketAddrV4;

/// The receiver's window scale: its window_adv events scale `win_raw` by it.
const RCV_WSCALE: u8 = 7;
const RCVBUF: u32 = 131_072;
const SNDBUF: u32 = 1 << 20;
const SND_CWND: u32 = 10;
/// The initial network namespace's inode number.
const INIT_NETNS: u32 = 4026531840;

/// One end of a connection.
#[derive(Clone, Copy, Debug)]
pub struct Socket {
    pub addr: SocketAddrV4,
    pub cookie: u64,
}

/// How a connection ends, after its last segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Neither end closes: both go silent, or live past the stream.
    Open,
    /// The sender closes; the receiver goes silent.
    SenderCloses,
    /// The sender closes, the receiver 50 µs later, and the sender's owner
    /// reads the end of the stream 50 µs after that.
    BothClose,
}

/// A connection sending `segments` full segments from `sender` to `receiver`.
#[derive(Clone, Copy, Debug)]
pub struct Connection {
    /// Numbers the connection: its skbs' addresses are made of it.
    pub index: u32,
    pub sender: Socket,
    pub receiver: Socket,
    /// The CPU every event is seen on.
    pub cpu: u32,
    /// Segment size: the payload of each data segment, and the MSS both ends know.
    pub mss: u32,
    /// Sequence number of the first data byte; the receiver's own sequence stays at 1.
    pub first_seq: u32,
    pub segments: u32,
    /// When both ends reach ESTABLISHED.
    pub established_ns: u64,
    /// When the first segment's first event (its sendmsg) happens.
    pub first_segment_ns: u64,
    pub segment_every_ns: u64,
    /// A sendmsg of this many segments starts every this many segments (1:
    /// every segment; the same for the two below). At least 1: like
    /// `slice::chunks(0)`, 0 panics.
    pub send_every: u32,
    /// An app_read of this many segments ends every this many segments.
    pub read_every: u32,
    /// An ACK goes back every this many segments.
    pub ack_every: u32,
    /// The window field the receiver advertises: its window_adv and the
    /// sender's snd_wnd scale it by 2^7, the sender's tcp_rcv does not.
    pub win_raw: u16,
    /// Written but unsent data behind each ACK's snd_nxt, in segments, as
    /// the sender's tcp_rcv reports it (`write_seq`); `None` leaves
    /// `write_seq` 0, which reads as nothing waiting.
    pub unsent_segments: Option<u32>,
    /// The receiver never reads the last segment: no copy_datagram nor
    /// app_read for it, and it stays queued.
    pub unread_last: bool,
    pub ending: Ending,
}

/// 10.0.0.1:40000 (cookie 7) sends 200 segments of 1000 B to 10.0.0.2:5201
/// (cookie 8), one every 10 µs, each written, read and ACKed on its own, on
/// CPU 0; the receiver advertises 500 << 7; both close.
impl Default for Connection {
    fn default() -> Self {
        let socket = |last, port, cookie| Socket {
            addr: SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, last), port),
            cookie,
        };
        Connection {
            index: 0,
            sender: socket(1, 40000, 7),
            receiver: socket(2, 5201, 8),
            cpu: 0,
            mss: 1000,
            first_seq: 1,
            segments: 200,
            established_ns: 1_000,
            first_segment_ns: 2_000,
            segment_every_ns: 10_000,
            send_every: 1,
            read_every: 1,
            ack_every: 1,
            win_raw: 500,
            unsent_segments: None,
            unread_last: false,
            ending: Ending::BothClose,
        }
    }
}

impl Connection {
    /// Every event of the connection in time order: [`Self::established`],
    /// each [`Self::segment`], then [`Self::close`].
    pub fn events(&self) -> Vec<Event> {
        let mut evs = self.established().to_vec();
        for seg in 0..self.segments {
            evs.extend(self.segment(seg));
        }
        evs.extend(self.close());
        evs
    }

    /// Both ends' move to ESTABLISHED, sender first. Both come from SYN_SENT
    /// (a passive opener's is SYN_RECV, but no analysis reads `oldstate`).
    pub fn established(&self) -> [Event; 2] {
        let (s, r) = (&self.sender, &self.receiver);
        let at = self.established_ns;
        [
            self.state(s, r, at, tcp_state::SYN_SENT, tcp_state::ESTABLISHED),
            self.state(r, s, at, tcp_state::SYN_SENT, tcp_state::ESTABLISHED),
        ]
    }

    /// The events of data segment `seg` (from 0) and of the ACK it brings,
    /// in time order.
    pub fn segment(&self, seg: u32) -> Vec<Event> {
        let (s, r) = (&self.sender, &self.receiver);
        let mss = self.mss;
        let t0 = self.first_segment_ns + u64::from(seg) * self.segment_every_ns;
        let seq = self.first_seq + seg * mss;
        let rcv_nxt = seq + mss;
        let window = u32::from(self.win_raw) << RCV_WSCALE;
        let pkt = |seq, ack, len| tt_pkt {
            seq,
            ack,
            len,
            skb_len: len + 52,
            gso_segs: 1,
            gso_size: mss as u16,
            win_raw: self.win_raw,
            tcp_flags: tcp_flags::ACK,
            ifindex: 2,
            ..tt_pkt::default()
        };
        let window_adv = |seq, ack, len| tt_window_adv {
            seq,
            ack,
            len,
            window,
            win_raw: self.win_raw,
            tcp_flags: tcp_flags::ACK,
            rcv_wscale: RCV_WSCALE,
            gso_segs: 1,
            gso_size: mss as u16,
            sk_rcvbuf: RCVBUF,
            window_clamp: 65_535 << RCV_WSCALE,
            rcv_ssthresh: 64_000,
            rcv_mss: mss,
            rcv_wnd: window,
            advmss: mss as u16,
            scaling_ratio: 128,
            snd_wnd: window,
            snd_cwnd: SND_CWND,
            mss_cache: mss,
            ..tt_window_adv::default()
        };
        let tcp_rcv = |seq, end_seq, ack, len| tt_tcp_rcv {
            seq,
            end_seq,
            ack,
            len,
            win_raw: self.win_raw,
            tcp_flags: tcp_flags::ACK,
            mss_cache: mss,
            ..tt_tcp_rcv::default()
        };
        let mut evs = Vec::with_capacity(16);
        let at = |dt: u64| t0 + dt;
        if seg.is_multiple_of(self.send_every) {
            let sendmsg = tt_sendmsg {
                write_seq: seq,
                msg_left: self.send_every * mss,
                size_goal: mss,
                snd_una: seq,
                snd_nxt: seq,
                sk_sndbuf: SNDBUF,
                ..tt_sendmsg::default()
            };
            evs.push(self.event(s, r, s.cookie, at(0), Body::Sendmsg(sendmsg)));
        }
        let data_rcv = tt_tcp_rcv {
            snd_wscale: RCV_WSCALE,
            rcv_nxt: seq,
            rcv_mss: mss,
            ..tcp_rcv(seq, rcv_nxt, 1, mss)
        };
        evs.extend(self.hops(
            s,
            r,
            [1_000, 2_000, 2_500, 10_000, 12_000, 14_000].map(at),
            (window_adv(seq, 1, mss), pkt(seq, 1, mss), data_rcv),
        ));
        let ready = tt_data_ready {
            rcv_nxt,
            copied_seq: seq,
            sk_rmem_alloc: mss,
            sk_rcvbuf: RCVBUF,
        };
        evs.push(self.event(r, s, r.cookie, at(15_000), Body::DataReady(ready)));
        let read = !(self.unread_last && seg + 1 == self.segments);
        if read {
            let copy = tt_copy_datagram {
                seq,
                end_seq: rcv_nxt,
                len: mss,
                ..tt_copy_datagram::default()
            };
            evs.push(self.event(r, s, r.cookie, at(20_000), Body::CopyDatagram(copy)));
        }
        if read && seg % self.read_every == self.read_every - 1 {
            let app_read = tt_app_read {
                ret: (self.read_every * mss) as i32,
                copied_seq: rcv_nxt,
                rcv_nxt,
                sk_rcvbuf: RCVBUF,
                rcv_wnd: window,
                ..tt_app_read::default()
            };
            evs.push(self.event(r, s, r.cookie, at(21_000), Body::AppRead(app_read)));
        }
        if seg % self.ack_every == self.ack_every - 1 {
            let ack_rcv = tt_tcp_rcv {
                snd_una: seq,
                snd_nxt: rcv_nxt,
                write_seq: self.unsent_segments.map_or(0, |n| rcv_nxt + n * mss),
                snd_wnd: window,
                snd_cwnd: SND_CWND,
                ..tcp_rcv(1, 1, rcv_nxt, 0)
            };
            evs.extend(self.hops(
                r,
                s,
                [22_000, 23_000, 23_500, 30_000, 31_000, 32_000].map(at),
                (window_adv(1, rcv_nxt, 0), pkt(1, rcv_nxt, 0), ack_rcv),
            ));
        }
        evs
    }

    /// One TCP segment from `from` to `to` through every hop, at the times
    /// given: window_adv, dev_start_xmit and dev_xmit at `from`; rx_entry,
    /// netif_receive and tcp_rcv at `to`.
    fn hops(
        &self,
        from: &Socket,
        to: &Socket,
        [adv_ns, start_ns, xmit_ns, rx_ns, netif_ns, rcv_ns]: [u64; 6],
        (adv, pkt, rcv): (tt_window_adv, tt_pkt, tt_tcp_rcv),
    ) -> [Event; 6] {
        [
            self.event(from, to, from.cookie, adv_ns, Body::WindowAdv(adv)),
            self.event(from, to, from.cookie, start_ns, Body::DevStartXmit(pkt)),
            self.event(from, to, from.cookie, xmit_ns, Body::DevXmit(pkt)),
            // Cookie 0: the receiving host has not looked the socket up yet.
            self.event(from, to, 0, rx_ns, Body::RxEntry(pkt)),
            self.event(from, to, 0, netif_ns, Body::NetifReceive(pkt)),
            self.event(to, from, to.cookie, rcv_ns, Body::TcpRcv(rcv)),
        ]
    }

    /// The events of the [`Ending`], from when the segment after the last
    /// would have started.
    pub fn close(&self) -> Vec<Event> {
        let (s, r) = (&self.sender, &self.receiver);
        let closed = self.first_segment_ns + u64::from(self.segments) * self.segment_every_ns;
        // The active closer leaves FIN_WAIT2, the passive one LAST_ACK.
        let sender_closes = || self.state(s, r, closed, tcp_state::FIN_WAIT2, tcp_state::CLOSE);
        match self.ending {
            Ending::Open => Vec::new(),
            Ending::SenderCloses => vec![sender_closes()],
            Ending::BothClose => vec![
                sender_closes(),
                self.state(r, s, closed + 50_000, tcp_state::LAST_ACK, tcp_state::CLOSE),
                // The sender's owner reads on to the end after the close, as an
                // active closer does: a read returning 0.
                self.event(
                    s,
                    r,
                    s.cookie,
                    closed + 100_000,
                    Body::AppRead(tt_app_read::default()),
                ),
            ],
        }
    }

    fn state(&self, end: &Socket, peer: &Socket, ts_ns: u64, oldstate: u8, newstate: u8) -> Event {
        let body = Body::State(tt_state {
            oldstate,
            newstate,
            advmss: self.mss as u16,
            mss_cache: self.mss,
        });
        self.event(end, peer, end.cookie, ts_ns, body)
    }

    /// An event from `from` to `to` (socket events: the local end first);
    /// `cookie` 0 where the kernel has none yet.
    fn event(&self, from: &Socket, to: &Socket, cookie: u64, ts_ns: u64, body: Body) -> Event {
        let (family, saddr) = abi_addr((*from.addr.ip()).into());
        let (_, daddr) = abi_addr((*to.addr.ip()).into());
        let hdr = tt_hdr {
            ts_ns,
            sock_cookie: cookie,
            skb: 0xffff_8880_0000_0000 | u64::from(self.index) << 12,
            saddr,
            daddr,
            sport: from.addr.port(),
            dport: to.addr.port(),
            family,
            cpu: self.cpu,
            netns: INIT_NETNS,
            ..tt_hdr::default()
        };
        Event::new(hdr, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_connection_has_the_counted_events_in_time_order() {
        let end = |last, cookie| Socket {
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, last), 5000 + u16::from(last)),
            cookie,
        };
        let mss = 1000;
        let c = Connection {
            index: 3,
            sender: end(1, 11),
            receiver: end(2, 12),
            cpu: 0,
            mss,
            first_seq: 1,
            segments: 5,
            established_ns: 0,
            first_segment_ns: 1_000,
            segment_every_ns: 100_000,
            send_every: 2,
            read_every: 2,
            ack_every: 1,
            win_raw: 500,
            unsent_segments: Some(9),
            unread_last: true,
            ending: Ending::BothClose,
        };
        let evs = c.events();
        assert!(evs.windows(2).all(|w| w[0].hdr.ts_ns <= w[1].hdr.ts_ns));
        let count = |kind| evs.iter().filter(|e| e.kind_name() == kind).count();
        // 5 segments: sendmsg at 0, 2, 4; the last copied not; app_read at
        // 1 and 3 and the end of stream; an ACK per segment; 2 + 2 states.
        assert_eq!(count("sendmsg"), 3);
        assert_eq!(count("copy_datagram"), 4);
        assert_eq!(count("app_read"), 3);
        assert_eq!(count("tcp_rcv"), 2 * 5);
        assert_eq!(count("state"), 4);
        assert_eq!(evs.len(), 3 + 5 * 7 + 4 + 3 + 5 * 6 + 4);
        // The last ACK: data up to 5001 sent, 9 segments more written.
        let Body::TcpRcv(last_ack) = evs
            .iter()
            .rev()
            .find(|e| e.kind_name() == "tcp_rcv")
            .unwrap()
            .body
        else {
            unreachable!()
        };
        assert_eq!((last_ack.snd_nxt, last_ack.write_seq), (5001, 14_001));
        assert_eq!(last_ack.snd_wnd, 64_000);
        assert_eq!(evs.last().unwrap().hdr.ts_ns, 1_000 + 5 * 100_000 + 100_000);
    }
}
