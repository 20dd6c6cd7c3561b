//! What joins the lab's two namespaces: a veth pair the lab creates, or two
//! NICs of the host joined by a wire (or, in the kernel matrix, two
//! virtio-net NICs joined by QEMU): a real driver with NAPI polls of its
//! own, GRO and TX completions, which veth never exercises.
//!
//! NICs are lent: moved into the namespaces for the lab's life and given
//! back to the tool's own namespace when it ends, with the MTU, GSO limit,
//! GRO setting and link state they had.

use super::netns::run;
use super::Netns;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::process::Command;
use std::str::FromStr;

/// Interface names of the veth pair inside the namespaces (each namespace
/// has its own names, so every lab uses the same two).
pub const SENDER_VETH: &str = "veth-snd";
pub const RECEIVER_VETH: &str = "veth-rcv";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Link {
    /// A veth pair, created with the namespaces and gone with them.
    #[default]
    Veth,
    /// Two NICs of this host, cabled to each other: `sender` and
    /// `receiver` are their names here.
    Nic { sender: String, receiver: String },
}

impl FromStr for Link {
    type Err = String;

    /// `veth` or `nic:SENDER,RECEIVER`.
    fn from_str(s: &str) -> Result<Link, String> {
        if s == "veth" {
            return Ok(Link::Veth);
        }
        let pair = s.strip_prefix("nic:").and_then(|p| p.split_once(','));
        match pair {
            Some((sender, receiver)) if !sender.is_empty() && !receiver.is_empty() => {
                Ok(Link::Nic {
                    sender: sender.to_string(),
                    receiver: receiver.to_string(),
                })
            }
            _ => Err(format!(
                "{s:?}: expected veth or nic:SENDER,RECEIVER (two NICs of this host \
                 joined to each other)"
            )),
        }
    }
}

/// A NIC moved into a lab namespace; given back when dropped.
#[derive(Debug)]
pub(super) struct LentNic {
    netns: String,
    iface: String,
    mtu: u32,
    gso_max_segs: u32,
    gro: bool,
    up: bool,
}

impl LentNic {
    /// Moves `iface` from the tool's namespace into `ns`, noting how to
    /// give it back.
    pub(super) fn lend(iface: &str, ns: &Netns) -> Result<LentNic> {
        let shown = run(Command::new("ip").args(["-d", "-j", "link", "show", "dev", iface]))
            .with_context(|| format!("--link nic: no interface {iface} here"))?;
        let link: serde_json::Value = serde_json::from_slice(&shown.stdout)
            .with_context(|| format!("ip -j link show {iface}"))?;
        let link = &link[0];
        if link["link_type"] != "ether" || link["linkinfo"]["info_kind"].is_string() {
            bail!("--link nic: {iface} is not an Ethernet NIC (a virtual or other link)");
        }
        let number = |key: &str| link[key].as_u64().and_then(|n| u32::try_from(n).ok());
        let (Some(mtu), Some(gso_max_segs)) = (number("mtu"), number("gso_max_segs")) else {
            bail!("ip -j link show {iface}: no mtu or gso_max_segs");
        };
        let up = link["flags"]
            .as_array()
            .is_some_and(|flags| flags.iter().any(|f| f == "UP"));
        let lent = LentNic {
            netns: ns.name().to_string(),
            iface: iface.to_string(),
            mtu,
            gso_max_segs,
            gro: gro(None, iface)?,
            up,
        };
        run(Command::new("ip").args(["link", "set", "dev", iface, "netns", ns.name()]))
            .with_context(|| format!("moving {iface} into {}", ns.name()))?;
        Ok(lent)
    }

    fn give_back(&self) -> Result<()> {
        let home = std::process::id().to_string();
        let iface = self.iface.as_str();
        run(Command::new("ip").args([
            "-n",
            &self.netns,
            "link",
            "set",
            "dev",
            iface,
            "netns",
            &home,
        ]))?;
        let (mtu, segs) = (self.mtu.to_string(), self.gso_max_segs.to_string());
        run(Command::new("ip").args([
            "link",
            "set",
            "dev",
            iface,
            "mtu",
            &mtu,
            "gso_max_segs",
            &segs,
        ]))?;
        set_gro(None, iface, self.gro)?;
        if self.up {
            run(Command::new("ip").args(["link", "set", "dev", iface, "up"]))?;
        }
        Ok(())
    }
}

impl Drop for LentNic {
    fn drop(&mut self) {
        if let Err(e) = self.give_back() {
            eprintln!(
                "tenge-trace: could not give {} back from {}: {e:#} (deleting the namespace \
                 returns it to the first namespace, with the lab's settings)",
                self.iface, self.netns
            );
        }
    }
}

/// `ethtool` on `iface`, inside `netns` if given.
fn ethtool(netns: Option<&str>) -> Command {
    match netns {
        Some(ns) => super::netns::exec_command(ns, "ethtool"),
        None => Command::new("ethtool"),
    }
}

/// Whether generic receive offload is on.
pub(super) fn gro(netns: Option<&str>, iface: &str) -> Result<bool> {
    let out = run(ethtool(netns).args(["-k", iface]))
        .context("ethtool -k (scripts/install-deps.sh installs ethtool)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("generic-receive-offload:"));
    match line.map(str::trim) {
        Some(value) => Ok(value.starts_with("on")),
        None => bail!("ethtool -k {iface}: no generic-receive-offload line"),
    }
}

pub(super) fn set_gro(netns: Option<&str>, iface: &str, on: bool) -> Result<()> {
    let value = if on { "on" } else { "off" };
    run(ethtool(netns).args(["-K", iface, "gro", value]))
        .with_context(|| format!("ethtool -K {iface} gro {value}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_parse_from_their_names() {
        assert_eq!("veth".parse(), Ok(Link::Veth));
        assert_eq!(
            "nic:eth0,eth1".parse(),
            Ok(Link::Nic {
                sender: "eth0".into(),
                receiver: "eth1".into()
            })
        );
        for bad in ["nic", "nic:eth0", "nic:,eth1", "eth0,eth1", ""] {
            assert!(bad.parse::<Link>().is_err(), "{bad}");
        }
    }
}
