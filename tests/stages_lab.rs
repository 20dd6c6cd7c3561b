//! In-kernel stage aggregation (`bpf/stages.bpf.c`) on the real kernel: a
//! lab transfer counted by the programs and by the veth pair's own
//! counters. Needs root (BPF, namespaces); skipped otherwise unless CI is set.

mod common;

use common::LinkPackets;
use common::{
    link_packets, paced_one_segment_skbs, relative_error, require_root, UNSEEN_BY_THE_KERNEL,
};
use std::time::Duration;
use tenge_trace::analysis::stages::StagesSummary;
use tenge_trace::lab::{Lab, LabConfig, TransferReport};
use tenge_trace::probe::{Filters, StageTracer};

/// Both ends of the lab: every skb of the transfer leaves one veth and
/// enters the other, data one way and ACKs the other. Dropped ones count:
/// veth counts an skb it could not hand to its peer as tx_dropped, after
/// net_dev_start_xmit saw it.
fn lab_packets(lab: &Lab) -> LinkPackets {
    let a = link_packets(lab.sender_netns().name(), lab.sender_iface());
    let b = link_packets(lab.receiver_netns().name(), lab.receiver_iface());
    LinkPackets {
        rx: a.rx + a.rx_dropped + b.rx + b.rx_dropped,
        tx: a.tx + a.tx_dropped + b.tx + b.tx_dropped,
        ..LinkPackets::default()
    }
}

/// A lab transfer of `cfg` counted by the stage programs (the lab's own
/// addresses: other tests' traffic does not count), read `settle` after it
/// ended; and the skbs its veth pair counted meanwhile.
fn counted_transfer(
    cfg: &LabConfig,
    settle: Duration,
) -> (TransferReport, StagesSummary, LinkPackets) {
    let lab = Lab::new(cfg).unwrap();
    let filters = Filters {
        addr: Some(std::net::IpAddr::V4(lab.receiver_ip())),
        ..Filters::default()
    };
    let tracer = StageTracer::start(&filters).unwrap();
    let before = lab_packets(&lab);
    let transfer = lab.run_transfer(cfg, |_| {}).unwrap();
    assert!(transfer.completed);
    std::thread::sleep(settle);
    let totals = tracer.read().unwrap();
    let after = lab_packets(&lab);
    drop(tracer);
    let summary = StagesSummary::of(&totals);
    print_summary(&summary);
    let skbs = LinkPackets {
        tx: after.tx - before.tx,
        rx: after.rx - before.rx,
        ..LinkPackets::default()
    };
    (transfer, summary, skbs)
}

#[test]
fn hook_counts_match_the_veth_counters_and_every_stage_has_samples() {
    if !require_root("hook_counts_match_the_veth_counters") {
        return;
    }
    // The FINs' last ACKs may still be on their way.
    let (_, summary, skbs) =
        counted_transfer(&paced_one_segment_skbs(), Duration::from_millis(200));
    let (tx, rx) = (skbs.tx, skbs.rx);
    let hook = |name: &str| {
        summary
            .hooks
            .iter()
            .find(|h| h.hook == name)
            .unwrap_or_else(|| panic!("no hook {name}"))
            .packets
    };
    // 4 MiB in 1448-byte segments is 2897 data skbs, before any ACK.
    assert!(tx > 2897, "{tx} skbs sent: fewer than the data segments");
    for (name, counter) in [
        ("net_dev_queue", tx),
        ("net_dev_start_xmit", tx),
        ("net_dev_xmit", tx),
        ("rx_entry", rx),
        ("netif_receive_skb", rx),
    ] {
        let got = hook(name);
        eprintln!("{name}: {got} packets, veth counters {counter}");
        assert!(
            relative_error(got, counter) <= UNSEEN_BY_THE_KERNEL,
            "{name}: {got} packets vs {counter} counted by veth"
        );
    }
    // TCP sees the data and the ACKs of established sockets only.
    assert!(
        hook("tcp_probe") > rx / 2,
        "tcp_probe {}",
        hook("tcp_probe")
    );
    for s in &summary.stages {
        assert!(s.samples > 0, "{s:?}");
        assert!(
            s.p50_ns <= s.p90_ns && s.p90_ns <= s.p99_ns && s.p99_ns <= s.max_ns,
            "{s:?}"
        );
        assert!(
            s.min_bucket_ns as f64 <= s.mean_ns && s.mean_ns <= s.max_ns as f64,
            "{s:?}"
        );
    }
}

/// A bulk transfer over veth, whose TSO skbs arrive whole: each counts as
/// its gso_segs packets, as in the report's paths, so the hooks count what
/// the two sockets' `tcp_info` say they sent (segs_out: TCP's count, a TSO
/// skb's segments each), not the skbs veth counts. Counting skbs, they were
/// a twentieth of it here (and in the rwnd-limited lab the napi p50 under
/// a third of the report's: 1.9 µs beside 6.8).
#[test]
fn a_gso_skb_counts_as_its_segments_as_tcp_info_does() {
    if !require_root("a_gso_skb_counts_as_its_segments") {
        return;
    }
    let (transfer, summary, skbs) = counted_transfer(&LabConfig::default(), Duration::ZERO);
    let queued = summary.hooks.iter().find(|h| h.hook == "net_dev_queue");
    let queued = queued.unwrap().packets;
    let segs_out = u64::from(transfer.sender.segs_out + transfer.receiver.segs_out);
    let skbs = skbs.tx;
    eprintln!("net_dev_queue: {queued} packets; tcp_info segs_out {segs_out}; veth {skbs} skbs");
    assert!(skbs * 2 < segs_out, "{skbs} skbs: no TSO skb to count");
    // tcp_info was read as the last byte came: the FINs and the last ACKs
    // were still to be sent.
    assert!(
        (segs_out..=segs_out + 8).contains(&queued),
        "{queued} packets counted, segs_out {segs_out}"
    );
}

fn print_summary(summary: &StagesSummary) {
    for s in &summary.stages {
        eprintln!("{s:?}");
    }
    for h in &summary.hooks {
        eprintln!("{h:?}");
    }
}
