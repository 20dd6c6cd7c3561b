//! A recording as a pcapng capture that Wireshark and tshark open: one
//! packet per TCP segment the device layer handled, where tcpdump would have
//! seen it (`net_dev_start_xmit` out, `netif_receive_skb` in), on one
//! interface per (network namespace, ifindex). A segment that crosses
//! several traced interfaces (a veth pair, a bridge) is written where it was
//! seen first, unless every sighting is asked for, as `tcpdump -i any`
//! shows them (Wireshark then takes the later ones for retransmissions).
//!
//! Packets are rebuilt from the recorded header fields: IP and TCP headers
//! only (the captured length; the original length counts the payload), no
//! TCP options but the window scale of SYNs, which Wireshark needs to scale
//! windows. The recording has no SYN options, so the scale comes from the
//! sockets: a `window_adv` of an established socket carries its own shift,
//! a `tcp_rcv` its peer's. A connection whose two shifts are not both known
//! gets no handshake packets, so that Wireshark says "unknown" rather than
//! showing unscaled windows as if scaling were off.

use crate::event::{tcp_flags, tt_pkt, Body, Event};
use crate::export::table::duration;
use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};

/// LINKTYPE_RAW: the packet starts with its IPv4 or IPv6 header.
const LINKTYPE_RAW: u16 = 101;
/// The loopback device's ifindex in every namespace: its received packets
/// are the sent ones again, which tcpdump shows once.
const LOOPBACK_IFINDEX: u32 = 1;
/// Queue and entry times waiting for their packet; more means packets that
/// never got there (dropped), and the oldest are forgotten.
const MAX_WAITING: usize = 65536;
/// The same segment on another interface within this long is the same
/// packet seen again; a retransmission leaves by the interface it left by.
const SIGHTING_NS: u64 = 1_000_000_000;

/// The window shift each end of each connection applies, learnt from a
/// first pass over the recording.
#[derive(Default)]
pub struct WindowScales {
    shift: HashMap<SocketAddr, u8>,
}

impl WindowScales {
    pub fn learn(&mut self, ev: &Event) {
        match &ev.body {
            Body::WindowAdv(w) if w.tcp_flags & tcp_flags::SYN == 0 => {
                if let Some(local) = ev.src() {
                    self.shift.insert(local, w.rcv_wscale);
                }
            }
            Body::TcpRcv(r) => {
                if let Some(remote) = ev.dst() {
                    self.shift.insert(remote, r.snd_wscale);
                }
            }
            _ => {}
        }
    }

    /// The window scale option a SYN from `src` to `dst` carried: `Some(None)`
    /// when the connection did not scale, None when that is not known.
    fn syn_option(&self, src: SocketAddr, dst: SocketAddr) -> Option<Option<u8>> {
        let (ours, theirs) = (*self.shift.get(&src)?, *self.shift.get(&dst)?);
        // Unscaled both ways: no option, or shifts of 0; the windows read the same.
        Some((ours > 0 || theirs > 0).then_some(ours))
    }
}

/// The capture's section: where it came from, and what it keeps.
pub struct Section {
    /// Says where the packets came from (shb_comment).
    pub comment: String,
    /// The traced system (shb_os).
    pub os: String,
    /// Turns the recording's monotonic times into Unix time.
    pub boot_offset_ns: i64,
    /// Every sighting of a segment, not only its first.
    pub every_interface: bool,
}

/// What [`PcapngWriter`] wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcapngSummary {
    pub packets: u64,
    pub interfaces: u32,
    /// SYNs left out: their connection's window scales are not known.
    pub handshakes_left_out: u64,
    /// Later sightings of segments on other interfaces, left out.
    pub sightings_left_out: u64,
}

/// A segment's header, as far as the recording has it.
type SegmentKey = (SocketAddr, SocketAddr, u32, u32, u32, u8, u16);

/// Writes the packets of a recording's events, pushed in order, as pcapng.
pub struct PcapngWriter<W: Write> {
    out: W,
    scales: WindowScales,
    boot_offset_ns: i64,
    every_interface: bool,
    interfaces: HashMap<(u32, u32), u32>,
    /// Where and when each segment was last written.
    written: HashMap<SegmentKey, (u32, u64)>,
    /// When each skb, by (CPU, address), was queued (TX) or entered from the driver (RX).
    queued: HashMap<(u32, u64), u64>,
    entered: HashMap<(u32, u64), u64>,
    summary: PcapngSummary,
    block: Vec<u8>,
}

impl<W: Write> PcapngWriter<W> {
    pub fn new(out: W, scales: WindowScales, section: &Section) -> io::Result<Self> {
        let mut writer = PcapngWriter {
            out,
            scales,
            boot_offset_ns: section.boot_offset_ns,
            every_interface: section.every_interface,
            interfaces: HashMap::new(),
            written: HashMap::new(),
            queued: HashMap::new(),
            entered: HashMap::new(),
            summary: PcapngSummary::default(),
            block: Vec::new(),
        };
        let mut body = Vec::new();
        body.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&(-1i64).to_le_bytes()); // section length: not given
        push_option(&mut body, 1, section.comment.as_bytes());
        push_option(&mut body, 3, section.os.as_bytes());
        let app = format!("tenge-trace {}", env!("CARGO_PKG_VERSION"));
        push_option(&mut body, 4, app.as_bytes());
        end_options(&mut body);
        writer.write_block(0x0A0D_0D0A, &body)?;
        Ok(writer)
    }

    pub fn push(&mut self, ev: &Event) -> io::Result<()> {
        let at = (ev.hdr.cpu, ev.hdr.skb);
        match &ev.body {
            Body::WindowAdv(_) => remember(&mut self.queued, at, ev.hdr.ts_ns),
            Body::RxEntry(_) => remember(&mut self.entered, at, ev.hdr.ts_ns),
            Body::DevStartXmit(p) => {
                let waited = self
                    .queued
                    .remove(&at)
                    .map(|t| ev.hdr.ts_ns.saturating_sub(t));
                let note = waited.map(|ns| format!("qdisc {}", duration(ns)));
                self.packet(ev, p, true, note)?;
            }
            Body::NetifReceive(p) if p.ifindex != LOOPBACK_IFINDEX => {
                let waited = self
                    .entered
                    .remove(&at)
                    .map(|t| ev.hdr.ts_ns.saturating_sub(t));
                let note =
                    waited.map(|ns| format!("driver entry to netif_receive_skb {}", duration(ns)));
                self.packet(ev, p, false, note)?;
            }
            _ => {}
        }
        Ok(())
    }

    pub fn finish(mut self) -> io::Result<(W, PcapngSummary)> {
        self.out.flush()?;
        Ok((self.out, self.summary))
    }

    fn packet(
        &mut self,
        ev: &Event,
        p: &tt_pkt,
        outbound: bool,
        note: Option<String>,
    ) -> io::Result<()> {
        let (Some(src), Some(dst)) = (ev.src(), ev.dst()) else {
            return Ok(());
        };
        let mut options = Vec::new();
        if p.tcp_flags & tcp_flags::SYN != 0 {
            match self.scales.syn_option(src, dst) {
                None => {
                    self.summary.handshakes_left_out += 1;
                    return Ok(());
                }
                // NOP, then kind 3 (window scale), length 3.
                Some(Some(shift)) => options.extend_from_slice(&[1, 3, 3, shift]),
                Some(None) => {}
            }
        }
        let interface = self.interface(ev.hdr.netns, p.ifindex)?;
        let key = (src, dst, p.seq, p.ack, p.len, p.tcp_flags, p.win_raw);
        if !self.first_sighting(key, interface, ev.hdr.ts_ns) {
            self.summary.sightings_left_out += 1;
            return Ok(());
        }
        let headers = headers(src, dst, p, &options);
        let original = headers.len() as u64 + u64::from(p.len);
        let unix_ns = (ev.hdr.ts_ns as i64)
            .saturating_add(self.boot_offset_ns)
            .max(0) as u64;

        let mut body = std::mem::take(&mut self.block);
        body.clear();
        body.extend_from_slice(&interface.to_le_bytes());
        body.extend_from_slice(&((unix_ns >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(unix_ns as u32).to_le_bytes());
        body.extend_from_slice(&(headers.len() as u32).to_le_bytes());
        body.extend_from_slice(&(original.min(u32::MAX.into()) as u32).to_le_bytes());
        body.extend_from_slice(&headers);
        pad(&mut body);
        let comment = match note {
            Some(note) => format!("cpu {}, {note}", ev.hdr.cpu),
            None => format!("cpu {}", ev.hdr.cpu),
        };
        push_option(&mut body, 1, comment.as_bytes());
        // epb_flags: direction in bits 0-1 (1 inbound, 2 outbound).
        push_option(
            &mut body,
            2,
            &(if outbound { 2u32 } else { 1 }).to_le_bytes(),
        );
        end_options(&mut body);
        let written = self.write_block(6, &body);
        self.block = body;
        self.summary.packets += 1;
        written
    }

    /// Whether the segment `key` is to be written as seen on `interface` at `ts_ns`.
    fn first_sighting(&mut self, key: SegmentKey, interface: u32, ts_ns: u64) -> bool {
        if self.every_interface {
            return true;
        }
        if let Some(&(seen_on, seen_at)) = self.written.get(&key) {
            if seen_on != interface && ts_ns.saturating_sub(seen_at) < SIGHTING_NS {
                return false;
            }
        }
        if self.written.len() >= MAX_WAITING {
            self.written
                .retain(|_, &mut (_, at)| ts_ns.saturating_sub(at) < SIGHTING_NS);
        }
        self.written.insert(key, (interface, ts_ns));
        true
    }

    /// The interface of `ifindex` in `netns`, described the first time it is seen.
    fn interface(&mut self, netns: u32, ifindex: u32) -> io::Result<u32> {
        if let Some(&id) = self.interfaces.get(&(netns, ifindex)) {
            return Ok(id);
        }
        let id = self.interfaces.len() as u32;
        let mut body = Vec::new();
        body.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes()); // snaplen: none
        push_option(&mut body, 2, interface_name(netns, ifindex).as_bytes());
        push_option(&mut body, 9, &[9]); // if_tsresol: nanoseconds
        end_options(&mut body);
        self.write_block(1, &body)?;
        self.interfaces.insert((netns, ifindex), id);
        self.summary.interfaces += 1;
        Ok(id)
    }

    fn write_block(&mut self, kind: u32, body: &[u8]) -> io::Result<()> {
        let total = (12 + body.len()) as u32;
        self.out.write_all(&kind.to_le_bytes())?;
        self.out.write_all(&total.to_le_bytes())?;
        self.out.write_all(body)?;
        self.out.write_all(&total.to_le_bytes())
    }
}

/// How the packets of `ifindex` in the namespace `netns` (its inode) are
/// named in the capture (`frame.interface_name`).
pub fn interface_name(netns: u32, ifindex: u32) -> String {
    format!("netns {netns} ifindex {ifindex}")
}

fn remember(times: &mut HashMap<(u32, u64), u64>, at: (u32, u64), ts_ns: u64) {
    if times.len() >= MAX_WAITING {
        times.clear();
    }
    times.insert(at, ts_ns);
}

/// The IP and TCP headers of the packet, with the TCP `options` (a multiple of 4 bytes).
fn headers(src: SocketAddr, dst: SocketAddr, p: &tt_pkt, options: &[u8]) -> Vec<u8> {
    let tcp_len = 20 + options.len();
    let mut out = Vec::with_capacity(40 + tcp_len);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = (20 + tcp_len as u64 + u64::from(p.len)).min(0xffff) as u16;
            out.extend_from_slice(&[0x45, 0]);
            out.extend_from_slice(&total.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]); // DF, TTL 64, TCP
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
            let sum = ipv4_checksum(&out);
            out[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        (s, d) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let payload = (tcp_len as u64 + u64::from(p.len)).min(0xffff) as u16;
            out.extend_from_slice(&[0x60, 0, 0, 0]);
            out.extend_from_slice(&payload.to_be_bytes());
            out.extend_from_slice(&[6, 64]);
            out.extend_from_slice(&v6(s).octets());
            out.extend_from_slice(&v6(d).octets());
        }
    }
    out.extend_from_slice(&src.port().to_be_bytes());
    out.extend_from_slice(&dst.port().to_be_bytes());
    out.extend_from_slice(&p.seq.to_be_bytes());
    out.extend_from_slice(&p.ack.to_be_bytes());
    out.extend_from_slice(&[(tcp_len as u8 / 4) << 4, p.tcp_flags]);
    out.extend_from_slice(&p.win_raw.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]); // checksum (no payload to sum), urgent pointer
    out.extend_from_slice(options);
    out
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let sum: u32 = header
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    !((folded & 0xffff) + (folded >> 16)) as u16
}

fn push_option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&(value.len() as u16).to_le_bytes());
    body.extend_from_slice(value);
    pad(body);
}

fn end_options(body: &mut Vec<u8>) {
    body.extend_from_slice(&[0, 0, 0, 0]);
}

fn pad(body: &mut Vec<u8>) {
    body.resize(body.len().next_multiple_of(4), 0);
}
