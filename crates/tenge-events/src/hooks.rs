//! The hook catalog: every kernel hook a program of `bpf/` runs from, one
//! row each. The loader's probe lists (per-packet and in-kernel stages),
//! the hook names in JSON, what each kind feeds, and the tests that hold
//! the C programs, the JSON schema and the bpftrace twin
//! (`bench/equivalent.bt`) to it are all read from here: a new probe is a
//! row here, its C, and its decoding.

use crate::abi::tt_rx_entry_variant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hook {
    /// The C programs' name prefix (`<program>_<backend>`).
    pub program: &'static str,
    /// The event kind it emits (`event::kind_name`); `dev_queue` is a
    /// stage counter of stages.bpf.c only.
    pub kind: &'static str,
    pub category: &'static str,
    pub tracepoint: &'static str,
    /// The kernel function of its fentry/kprobe flavours, if it has them.
    pub function: Option<&'static str>,
    /// `hdr.variant` of its events, for a kind several hooks emit.
    pub variant: Option<u8>,
    /// Has a program in tenge.bpf.c (per-packet records).
    pub per_packet: bool,
    /// Has a program in stages.bpf.c (in-kernel stage histograms).
    pub in_stages: bool,
    /// Runs in the socket's own task as it writes or reads, so it marks the
    /// flows of the task filter's tasks (`--pid`, `--comm`, `--cgroup`):
    /// stages.bpf.c has a program here that does only that.
    pub marks_task: bool,
}

impl Hook {
    /// `category:tracepoint`, as perf and the probe plan name it.
    pub fn name(&self) -> String {
        format!("{}:{}", self.category, self.tracepoint)
    }
}

const fn hook(
    program: &'static str,
    kind: &'static str,
    (category, tracepoint): (&'static str, &'static str),
    function: Option<&'static str>,
    (per_packet, in_stages): (bool, bool),
) -> Hook {
    Hook {
        program,
        kind,
        category,
        tracepoint,
        function,
        variant: None,
        per_packet,
        in_stages,
        marks_task: false,
    }
}

const fn marking(hook: Hook) -> Hook {
    Hook {
        marks_task: true,
        ..hook
    }
}

const fn rx_entry(
    program: &'static str,
    tracepoint: &'static str,
    variant: tt_rx_entry_variant,
) -> Hook {
    Hook {
        variant: Some(variant as u8),
        ..hook(program, "rx_entry", ("net", tracepoint), None, (true, true))
    }
}

const PACKETS: (bool, bool) = (true, false);
const BOTH: (bool, bool) = (true, true);

/// Every hook, in the order of the packet path: send, device, receive.
pub const HOOKS: &[Hook] = &[
    marking(hook(
        "sendmsg",
        "sendmsg",
        ("tcp", "tcp_sendmsg_locked"),
        Some("tcp_sendmsg_locked"),
        PACKETS,
    )),
    hook(
        "window_adv",
        "window_adv",
        ("net", "net_dev_queue"),
        Some("__dev_queue_xmit"),
        PACKETS,
    ),
    hook(
        "dev_queue",
        "dev_queue",
        ("net", "net_dev_queue"),
        None,
        (false, true),
    ),
    hook(
        "dev_start_xmit",
        "dev_start_xmit",
        ("net", "net_dev_start_xmit"),
        None,
        BOTH,
    ),
    hook("dev_xmit", "dev_xmit", ("net", "net_dev_xmit"), None, BOTH),
    hook(
        "napi_poll",
        "napi_poll",
        ("napi", "napi_poll"),
        None,
        PACKETS,
    ),
    rx_entry(
        "rx_gro",
        "napi_gro_receive_entry",
        tt_rx_entry_variant::TT_RX_GRO,
    ),
    rx_entry(
        "rx_netif_recv",
        "netif_receive_skb_entry",
        tt_rx_entry_variant::TT_RX_NETIF_RECV,
    ),
    rx_entry(
        "rx_netif_rx",
        "netif_rx_entry",
        tt_rx_entry_variant::TT_RX_NETIF_RX,
    ),
    hook(
        "netif_receive",
        "netif_receive",
        ("net", "netif_receive_skb"),
        None,
        BOTH,
    ),
    hook(
        "tcp_rcv",
        "tcp_rcv",
        ("tcp", "tcp_probe"),
        Some("tcp_rcv_established"),
        BOTH,
    ),
    hook(
        "data_ready",
        "data_ready",
        ("sock", "sk_data_ready"),
        Some("sock_def_readable"),
        PACKETS,
    ),
    marking(hook(
        "copy_datagram",
        "copy_datagram",
        ("skb", "skb_copy_datagram_iovec"),
        None,
        PACKETS,
    )),
    hook(
        "app_read",
        "app_read",
        ("sock", "sock_recv_length"),
        Some("tcp_recvmsg"),
        PACKETS,
    ),
    hook(
        "state",
        "state",
        ("sock", "inet_sock_set_state"),
        None,
        PACKETS,
    ),
    hook(
        "retransmit",
        "retransmit",
        ("tcp", "tcp_retransmit_skb"),
        None,
        PACKETS,
    ),
    hook(
        "kfree_skb",
        "kfree_skb",
        ("skb", "kfree_skb"),
        None,
        PACKETS,
    ),
];

/// The hooks of tenge.bpf.c.
pub fn per_packet() -> impl Iterator<Item = &'static Hook> {
    HOOKS.iter().filter(|h| h.per_packet)
}

/// The hooks of stages.bpf.c.
pub fn in_stages() -> impl Iterator<Item = &'static Hook> {
    HOOKS.iter().filter(|h| h.in_stages)
}

/// The hooks where stages.bpf.c marks the task filter's flows.
pub fn task_marks() -> impl Iterator<Item = &'static Hook> {
    HOOKS.iter().filter(|h| h.marks_task)
}

/// The tracepoint that emitted an event of `kind` with `variant`, for a
/// kind several hooks emit.
pub fn variant_tracepoint(kind: &str, variant: u8) -> Option<&'static str> {
    HOOKS
        .iter()
        .find(|h| h.kind == kind && h.variant == Some(variant))
        .map(|h| h.tracepoint)
}

/// What the events of a kind feed, as the report names it.
pub fn findings_fed_by(kind: &str) -> &'static str {
    match kind {
        "sendmsg" => "TX paths from the app write (held by cwnd/rwnd/pacing), send-buffer limits",
        "window_adv" => "advertised windows: MSS rounding and clamping, SWS stalls, the window chain, buffer advice",
        "dev_start_xmit" | "dev_xmit" | "dev_queue" => "TX qdisc and driver stage costs",
        "napi_poll" => "NAPI batching (work against budget)",
        "rx_entry" | "netif_receive" => "RX driver, NAPI/GRO stage costs and GRO paths",
        "tcp_rcv" => "RTT, cwnd/rwnd/sndbuf limits (the kernel's chrono), the sender's MSS, IP/TCP stage cost",
        "data_ready" | "copy_datagram" => "RX socket-queue stage cost",
        "app_read" => "application reads: the app-read stage, slow-reader detection",
        "state" => "connection lifecycle and the handshake's MSS",
        "retransmit" => "retransmissions",
        "kfree_skb" => "drops",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::tt_kind;
    use crate::event::kind_name;

    /// Every kind but the CPU samples (a perf_event program), the socket
    /// tasks (sent by the sendmsg and copy_datagram hooks) and the pauses
    /// (the collector's) has a hook,
    /// every per-packet hook emits a kind the decoder knows and feeds
    /// something, and a kind with several hooks tells them apart.
    #[test]
    fn the_catalog_covers_every_kind_once_per_hook() {
        for kind in 1..tt_kind::TT_KIND_MAX as u8 {
            let name = kind_name(kind).expect("a named kind");
            let hooks: Vec<_> = per_packet().filter(|h| h.kind == name).collect();
            assert!(
                ["cpu_sample", "sock_task", "pause"].contains(&name) || !hooks.is_empty(),
                "{name} has no hook"
            );
            if hooks.len() > 1 {
                let mut variants: Vec<_> = hooks
                    .iter()
                    .map(|h| h.variant.expect("a variant"))
                    .collect();
                variants.sort_unstable();
                variants.dedup();
                assert_eq!(variants.len(), hooks.len(), "{name}: variants repeat");
            }
        }
        for h in per_packet() {
            assert!(
                (1..tt_kind::TT_KIND_MAX as u8).any(|k| kind_name(k) == Some(h.kind)),
                "{h:?}"
            );
            assert!(!findings_fed_by(h.kind).is_empty(), "{h:?} feeds nothing");
        }
        let mut programs: Vec<_> = HOOKS.iter().map(|h| h.program).collect();
        programs.sort_unstable();
        programs.dedup();
        assert_eq!(programs.len(), HOOKS.len(), "program names repeat");
        assert_eq!(
            variant_tracepoint("rx_entry", 0),
            Some("napi_gro_receive_entry")
        );
    }
}
