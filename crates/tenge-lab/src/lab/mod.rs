//! The built-in lab: two network namespaces joined by a veth pair (or two
//! NICs of the host: [`Link`]), per-namespace TCP sysctls, an optional qdisc,
//! and real transfers between them.
//!
//! ```no_run
//! use tenge_lab::lab::{Lab, Scenario};
//! let cfg = Scenario::MssClamp.config();
//! let lab = Lab::new(&cfg)?;
//! let report = lab.run_transfer(&cfg, |ends| {
//!     // Both sockets are still open here: run `ss`, stop a capture, ...
//!     let sockets = tenge_lab::lab::ss::query(&ends.receiver_netns, ends.port()).unwrap();
//!     assert_eq!(sockets.len(), 1);
//! })?;
//! println!("{} bytes at {:.0} bit/s", report.bytes, report.throughput_bps);
//! # anyhow::Ok(())
//! ```
//!
//! Everything the lab creates lives inside its two namespaces, so dropping the
//! [`Lab`] (also on unwind, and on an error half-way through [`Lab::new`])
//! removes it all. Namespaces of a process that died without cleaning up
//! (SIGKILL) are removed by the next [`Netns::create`].
//!
//! Ctrl-C: register an `Arc<AtomicBool>` with `signal_hook::flag::register`
//! and pass it to [`Lab::run_transfer_until`]; the transfer ends within ~50 ms
//! (`completed == false`), `hold` still runs, and the `Lab` drops as usual.
//! To leave at once from another thread instead, call
//! [`cleanup_all_created`] before exiting.
//!
//! Ground truth from tools nobody here wrote: [`ss`] (socket state),
//! [`capture`] (tcpdump + tshark), [`iperf`] (iperf3).

pub mod capture;
mod diag;
pub mod iperf;
pub mod link;
pub mod netns;
pub mod pingpong;
pub mod scenario;
pub mod ss;
pub mod traced;
mod transfer;

pub use link::Link;
pub use netns::{cleanup_all_created, Netns};
pub use scenario::Scenario;
pub use transfer::{tcp_info, TcpInfoPoll, TcpInfoSnapshot, TransferEnds, TransferReport};

use crate::probe::{Loss, LossCounts};
use anyhow::{Context, Result};
use netns::run;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// 198.18.0.0/15 (RFC 2544, benchmarking), cut into /30s, one per lab.
const LAB_NET: u32 = u32::from_be_bytes([198, 18, 0, 0]);
const LAB_SLOTS: u32 = (1 << 17) / 4;
const PREFIX_LEN: u8 = 30;
/// fd74:7400::/48, a unique local prefix ("tt"), one /64 per lab slot.
const LAB_NET6: u128 = 0xfd74_7400_0000 << 80;

static NEXT_LAB_ID: AtomicU32 = AtomicU32::new(0);

/// One end of the lab.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Sender,
    Receiver,
}

/// An extra sysctl for one namespace, e.g. `net.ipv4.tcp_sack = 0`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sysctl {
    pub side: Side,
    pub key: String,
    pub value: String,
}

/// How the receiving application reads.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reader {
    /// Reads as fast as it can, 256 KiB per `recv`.
    Fast,
    /// The recipe's slow reader: no reads for `initial_pause` (the receive
    /// buffer fills, the window closes), then `reads` reads of `read_size`
    /// bytes every `interval`, then drains at full speed.
    Slow {
        #[serde(with = "secs_f64")]
        initial_pause: Duration,
        read_size: usize,
        #[serde(with = "secs_f64")]
        interval: Duration,
        reads: u32,
    },
}

impl Reader {
    /// 1 s without reads, then 1000 B every 50 ms for 2 s, then drain: enough
    /// for zero windows, persist probes and MSS-sized reopenings.
    pub fn slow_default() -> Reader {
        Reader::Slow {
            initial_pause: Duration::from_secs(1),
            read_size: 1000,
            interval: Duration::from_millis(50),
            reads: 40,
        }
    }
}

/// Everything one lab run needs. [`Lab::new`] uses the link fields (`mtu`,
/// `gso_max_segs`, `qdisc`); [`Lab::run_transfer`] applies the sysctls and
/// runs the transfer fields, so one lab can serve several configs with the
/// same link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabConfig {
    /// What joins the namespaces: a veth pair, or two NICs of the host.
    #[serde(default)]
    pub link: Link,
    /// MTU on both ends (68..=65535 on veth; what the NIC allows on one).
    pub mtu: u32,
    /// `gso_max_segs` on the sender's interface (1 = one-MSS skbs, like a 2003 NIC).
    pub gso_max_segs: Option<u32>,
    /// Generic receive offload on the receiver's interface (`ethtool -K gro`);
    /// `None` keeps the device's setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gro: Option<bool>,
    /// Every N-th TCP skb carrying data (a segment, or a TSO skb that veth
    /// hands over whole) that reaches the receiver's interface is dropped
    /// there, by a tc program on its ingress: a lossy path (retransmits,
    /// SACK recovery, out-of-order queueing) where the kernel has no netem.
    /// Each CPU drops every N-th of the skbs it receives. Not with
    /// `loopback` (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop_every: Option<u32>,
    /// Root qdisc on the sender's veth as `tc` words: "pfifo" (veth is
    /// noqueue, so otherwise there are no qdisc events) or "tbf rate 1gbit
    /// burst 256kb latency 20ms" (a bottleneck). This kernel has tbf, htb,
    /// pfifo and pfifo_fast; no fq, fq_codel, sfq or netem.
    pub qdisc: Option<String>,
    /// `net.ipv4.tcp_window_scaling` in the receiver's namespace (off there
    /// means off for the connection).
    pub window_scaling: bool,
    /// `net.ipv4.tcp_timestamps` in the receiver's namespace.
    pub timestamps: bool,
    /// `net.ipv4.tcp_moderate_rcvbuf` (receive autotuning) in the receiver's namespace.
    pub moderate_rcvbuf: bool,
    /// `net.ipv4.tcp_shrink_window` in the receiver's namespace.
    pub shrink_window: bool,
    /// Any other sysctls, per side.
    pub sysctls: Vec<Sysctl>,
    /// `TCP_CONGESTION` on the sender socket; `None` keeps the namespace default.
    pub congestion: Option<String>,
    /// `SO_MAX_PACING_RATE` on the sender in bytes per second (TCP paces
    /// itself; no fq needed).
    pub max_pacing_rate: Option<u64>,
    /// `SO_RCVBUF` on the receiver, set before `listen()` (the kernel doubles it).
    pub rcvbuf: Option<u32>,
    /// `SO_SNDBUF` on the sender, set before `connect()`.
    pub sndbuf: Option<u32>,
    pub reader: Reader,
    /// Bytes to send.
    pub bytes: u64,
    /// Bytes per `send()` call.
    pub write_size: usize,
    /// `TCP_NODELAY` on the sender.
    pub nodelay: bool,
    /// Every write sent with `MSG_EOR`: TCP never merges two writes into one
    /// segment, so segments are at most `write_size` bytes.
    #[serde(default)]
    pub eor: bool,
    /// Receiver port; 0 picks a free one.
    pub port: u16,
    /// The transfer over IPv6 (the lab has both families' addresses).
    #[serde(default)]
    pub ipv6: bool,
    /// Both ends in the receiver's namespace, over its loopback (`lo`, MTU
    /// 65536) instead of the veth pair.
    #[serde(default)]
    pub loopback: bool,
    /// Read both ends' `TCP_INFO` this often (µs) while the transfer runs
    /// ([`TransferReport::sender_polls`], [`TransferReport::receiver_polls`]):
    /// the kernel's chrono and the reader's queue over time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_ends_us: Option<u64>,
}

impl Default for LabConfig {
    fn default() -> LabConfig {
        LabConfig {
            link: Link::Veth,
            mtu: 1500,
            gso_max_segs: None,
            gro: None,
            drop_every: None,
            qdisc: None,
            window_scaling: true,
            timestamps: true,
            moderate_rcvbuf: true,
            shrink_window: false,
            sysctls: Vec::new(),
            congestion: None,
            max_pacing_rate: None,
            rcvbuf: None,
            sndbuf: None,
            reader: Reader::Fast,
            bytes: 64 << 20,
            write_size: 64 << 10,
            nodelay: false,
            eor: false,
            port: 0,
            ipv6: false,
            loopback: false,
            poll_ends_us: None,
        }
    }
}

/// Two namespaces joined by a veth pair (or two lent NICs) with addresses,
/// links up, lo up. Dropping it gives lent NICs back, then removes both
/// namespaces and with them everything inside.
#[derive(Debug)]
pub struct Lab {
    /// Before the namespaces: fields drop in order, so the loss program is
    /// detached and a NIC goes back before its namespace goes.
    loss: Option<Loss>,
    lent: Vec<link::LentNic>,
    sender: Netns,
    receiver: Netns,
    sender_ip: Ipv4Addr,
    receiver_ip: Ipv4Addr,
    sender_ip6: Ipv6Addr,
    receiver_ip6: Ipv6Addr,
    sender_iface: String,
    receiver_iface: String,
    mtu: u32,
}

impl Lab {
    pub fn new(cfg: &LabConfig) -> Result<Lab> {
        let id = NEXT_LAB_ID.fetch_add(1, Ordering::Relaxed);
        // Each Netns is removed by its own Drop if a later step fails.
        let sender = Netns::create(&format!("{id}-a"))?;
        let receiver = Netns::create(&format!("{id}-b"))?;
        let slot = lab_slot(std::process::id(), id);
        let (sender_ip, receiver_ip) = lab_addresses(slot);
        let (sender_ip6, receiver_ip6) = lab_addresses6(slot);
        let (lent, sender_iface, receiver_iface) = match &cfg.link {
            Link::Veth => {
                add_veth_pair(&sender, &receiver)?;
                let (snd, rcv) = (link::SENDER_VETH, link::RECEIVER_VETH);
                (Vec::new(), snd.to_string(), rcv.to_string())
            }
            Link::Nic {
                sender: snd,
                receiver: rcv,
            } => {
                let lent = vec![
                    link::LentNic::lend(snd, &sender)?,
                    link::LentNic::lend(rcv, &receiver)?,
                ];
                (lent, snd.clone(), rcv.clone())
            }
        };
        let mtu = cfg.mtu.to_string();
        for (ns, iface, ip, ip6) in [
            (&sender, sender_iface.as_str(), sender_ip, sender_ip6),
            (
                &receiver,
                receiver_iface.as_str(),
                receiver_ip,
                receiver_ip6,
            ),
        ] {
            run(ip_in(ns).args(["link", "set", iface, "mtu", &mtu]))
                .with_context(|| format!("MTU {mtu} on {iface}"))?;
            let cidr = format!("{ip}/{PREFIX_LEN}");
            run(ip_in(ns).args(["addr", "add", &cidr, "dev", iface]))?;
            // nodad: usable at once, not after duplicate address detection.
            let cidr6 = format!("{ip6}/64");
            run(ip_in(ns).args(["-6", "addr", "add", &cidr6, "dev", iface, "nodad"]))?;
            run(ip_in(ns).args(["link", "set", iface, "up"]))?;
            run(ip_in(ns).args(["link", "set", "lo", "up"]))?;
        }
        for (ns, iface, peer, peer_iface, peer_ip6) in [
            (
                &sender,
                &sender_iface,
                &receiver,
                &receiver_iface,
                receiver_ip6,
            ),
            (
                &receiver,
                &receiver_iface,
                &sender,
                &sender_iface,
                sender_ip6,
            ),
        ] {
            // Neighbour discovery on a link just up loses its first
            // solicitations: an IPv6 connect waited 1 s for the second, and
            // every IPv6 transfer began with srtt 1 s. Each end knows the
            // other's address from the start (IPv4's ARP answers at once).
            let mac = link_address(peer, peer_iface)?;
            run(ip_in(ns)
                .args(["-6", "neigh", "replace", &peer_ip6.to_string()])
                .args(["lladdr", &mac, "dev", iface, "nud", "permanent"]))?;
        }
        if let Some(segs) = cfg.gso_max_segs {
            let segs = segs.to_string();
            run(ip_in(&sender).args(["link", "set", &sender_iface, "gso_max_segs", &segs]))?;
        }
        if let Some(on) = cfg.gro {
            link::set_gro(Some(receiver.name()), &receiver_iface, on)?;
        }
        if let Some(qdisc) = &cfg.qdisc {
            run(Command::new("tc")
                .args([
                    "-n",
                    sender.name(),
                    "qdisc",
                    "add",
                    "dev",
                    &sender_iface,
                    "root",
                ])
                .args(qdisc.split_whitespace()))
            .with_context(|| format!("qdisc {qdisc}"))?;
        }
        let loss = match cfg.drop_every {
            Some(every) => {
                let iface = receiver_iface.clone();
                Some(receiver.run(move || Loss::attach(&iface, every))?)
            }
            None => None,
        };
        let lab = Lab {
            loss,
            lent,
            sender,
            receiver,
            sender_ip,
            receiver_ip,
            sender_ip6,
            receiver_ip6,
            sender_iface,
            receiver_iface,
            mtu: cfg.mtu,
        };
        lab.apply_sysctls(cfg)?;
        Ok(lab)
    }

    /// Writes the config's TCP sysctls into the namespaces.
    pub fn apply_sysctls(&self, cfg: &LabConfig) -> Result<()> {
        let flag = |on: bool| if on { "1" } else { "0" };
        let mut receiver = vec![
            ("net.ipv4.tcp_window_scaling", flag(cfg.window_scaling)),
            ("net.ipv4.tcp_timestamps", flag(cfg.timestamps)),
            ("net.ipv4.tcp_moderate_rcvbuf", flag(cfg.moderate_rcvbuf)),
            ("net.ipv4.tcp_shrink_window", flag(cfg.shrink_window)),
        ];
        let mut sender = Vec::new();
        for s in &cfg.sysctls {
            let list = match s.side {
                Side::Sender => &mut sender,
                Side::Receiver => &mut receiver,
            };
            list.push((s.key.as_str(), s.value.as_str()));
        }
        self.receiver.set_sysctls(&receiver)?;
        self.sender.set_sysctls(&sender)
    }

    pub fn netns(&self, side: Side) -> &Netns {
        match side {
            Side::Sender => &self.sender,
            Side::Receiver => &self.receiver,
        }
    }

    pub fn sender_netns(&self) -> &Netns {
        &self.sender
    }

    pub fn receiver_netns(&self) -> &Netns {
        &self.receiver
    }

    pub fn sender_ip(&self) -> Ipv4Addr {
        self.sender_ip
    }

    pub fn receiver_ip(&self) -> Ipv4Addr {
        self.receiver_ip
    }

    /// The sender's address of one family.
    pub fn sender_addr(&self, ipv6: bool) -> IpAddr {
        if ipv6 {
            self.sender_ip6.into()
        } else {
            self.sender_ip.into()
        }
    }

    /// The receiver's address of one family.
    pub fn receiver_addr(&self, ipv6: bool) -> IpAddr {
        if ipv6 {
            self.receiver_ip6.into()
        } else {
            self.receiver_ip.into()
        }
    }

    /// Where `cfg`'s receiver listens: its veth address, or loopback.
    pub fn listen_addr(&self, cfg: &LabConfig) -> IpAddr {
        match (cfg.loopback, cfg.ipv6) {
            (true, false) => Ipv4Addr::LOCALHOST.into(),
            (true, true) => Ipv6Addr::LOCALHOST.into(),
            (false, ipv6) => self.receiver_addr(ipv6),
        }
    }

    /// The namespace and interface `cfg`'s sender sends from.
    pub fn sender_side(&self, cfg: &LabConfig) -> (&Netns, &str) {
        if cfg.loopback {
            (self.receiver_netns(), "lo")
        } else {
            (self.sender_netns(), self.sender_iface())
        }
    }

    pub fn sender_iface(&self) -> &str {
        &self.sender_iface
    }

    pub fn receiver_iface(&self) -> &str {
        &self.receiver_iface
    }

    /// Whether the namespaces are joined by lent NICs (a real driver).
    pub fn on_nics(&self) -> bool {
        !self.lent.is_empty()
    }

    /// tcpdump on the receiver's interface (all TCP), capturing once this returns.
    /// Keep it declared after the `Lab`, so it stops before the namespaces go.
    pub fn capture_receiver(&self, path: &std::path::Path) -> Result<capture::Capture> {
        capture::Capture::start(
            self.receiver_netns().name(),
            self.receiver_iface(),
            "tcp",
            path,
        )
    }

    /// What [`LabConfig::drop_every`]'s program saw and dropped; `None` without it.
    pub fn loss(&self) -> Result<Option<LossCounts>> {
        self.loss.as_ref().map(Loss::counts).transpose()
    }

    pub fn mtu(&self) -> u32 {
        self.mtu
    }
}

/// A veth pair between the namespaces, named [`link::SENDER_VETH`] and
/// [`link::RECEIVER_VETH`].
fn add_veth_pair(sender: &Netns, receiver: &Netns) -> Result<()> {
    run(Command::new("ip").args([
        "link",
        "add",
        link::SENDER_VETH,
        "netns",
        sender.name(),
        "type",
        "veth",
        "peer",
        "name",
        link::RECEIVER_VETH,
        "netns",
        receiver.name(),
    ]))
    .context("creating the veth pair")?;
    Ok(())
}

/// The link-layer address of `iface` in `ns`, as `ip -o link` prints it.
fn link_address(ns: &Netns, iface: &str) -> Result<String> {
    let out = run(ip_in(ns).args(["-o", "link", "show", "dev", iface]))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    words
        .find(|w| w.starts_with("link/"))
        .and_then(|_| words.next())
        .map(str::to_string)
        .with_context(|| format!("no link-layer address for {iface}: {text}"))
}

/// `ip -n NETNS`.
fn ip_in(ns: &Netns) -> Command {
    let mut command = Command::new("ip");
    command.args(["-n", ns.name()]);
    command
}

/// The lab's slot: distinct for every lab of a process, and spread by pid
/// so labs of parallel processes rarely share one (flows seen by a tracer
/// across namespaces then stay apart).
fn lab_slot(pid: u32, id: u32) -> u32 {
    pid.wrapping_mul(64).wrapping_add(id) % LAB_SLOTS
}

/// The slot's /30 inside 198.18.0.0/15: hosts .1 and .2.
fn lab_addresses(slot: u32) -> (Ipv4Addr, Ipv4Addr) {
    let net = LAB_NET + slot * 4;
    (Ipv4Addr::from(net + 1), Ipv4Addr::from(net + 2))
}

/// The slot's /64 inside fd74:7400::/48: hosts ::1 and ::2.
fn lab_addresses6(slot: u32) -> (Ipv6Addr, Ipv6Addr) {
    let net = LAB_NET6 | u128::from(slot) << 64;
    (Ipv6Addr::from(net + 1), Ipv6Addr::from(net + 2))
}

/// `Duration` as seconds in JSON.
pub(crate) mod secs_f64 {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_addresses_stay_in_the_benchmark_range_and_differ_per_lab() {
        let (a, b) = lab_addresses(lab_slot(1234, 0));
        assert!(in_benchmark_range(a) && in_benchmark_range(b));
        assert_eq!(u32::from(b) - u32::from(a), 1);
        // Same /30, host parts .1 and .2.
        assert_eq!(u32::from(a) & 3, 1);
        let mut seen = std::collections::BTreeSet::new();
        for id in 0..LAB_SLOTS {
            assert!(seen.insert(lab_addresses(lab_slot(u32::MAX - 7, id)).0));
        }
        let (last, _) = lab_addresses(lab_slot(u32::MAX, u32::MAX));
        assert!(in_benchmark_range(last));
        // IPv6: the same slot in the fourth group of fd74:7400::/48.
        let (a6, b6) = lab_addresses6(0x1a2b);
        assert_eq!(a6, "fd74:7400:0:1a2b::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(b6, "fd74:7400:0:1a2b::2".parse::<Ipv6Addr>().unwrap());
        let (last6, _) = lab_addresses6(LAB_SLOTS - 1);
        assert_eq!(last6.segments()[..3], [0xfd74, 0x7400, 0]);
    }

    fn in_benchmark_range(ip: Ipv4Addr) -> bool {
        u32::from(ip) >> 17 == LAB_NET >> 17
    }

    #[test]
    fn config_round_trips_through_json() {
        let cfg = LabConfig {
            reader: Reader::slow_default(),
            sysctls: vec![Sysctl {
                side: Side::Sender,
                key: "net.ipv4.tcp_sack".into(),
                value: "0".into(),
            }],
            ..LabConfig::default()
        };
        let json = serde_json::to_string(&cfg).unwrap();
        assert!(json.contains(r#""initial_pause":1.0"#), "{json}");
        assert_eq!(serde_json::from_str::<LabConfig>(&json).unwrap(), cfg);
    }
}
