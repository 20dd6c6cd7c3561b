//! Path costs on the real kernel: lab transfers traced end to end, checked
//! against the interface counters and against a ping-pong's round trips.
//! Needs root (BPF, namespaces); skipped otherwise unless CI is set.

mod common;

use common::{
    link_packets, paced_one_segment_skbs, relative_error, require_root, SetOnDrop,
    UNSEEN_BY_THE_KERNEL,
};
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tenge_trace::abi::tt_pause_edge::TT_PAUSE_BOUND;
use tenge_trace::analysis::paths::{PathAnalyzer, PathConfig, PathEntry, PathReport};
use tenge_trace::analysis::window::Advice;
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance};
use tenge_trace::collector::{Callbacks, CollectStats, Collector};
use tenge_trace::event::{Body, Event};
use tenge_trace::lab::pingpong::{self, PingPongConfig};
use tenge_trace::lab::traced::run_traced;
use tenge_trace::lab::{Lab, LabConfig, TransferReport};
use tenge_trace::probe::{Filters, Tracer, TracerOptions};

/// One test at a time: two cores, and the latencies should not fight.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A traced bulk transfer and what to compare its report with.
struct BulkRun {
    transfer: TransferReport,
    report: PathReport,
    /// Skbs the sender's veth sent, and the receiver's veth received.
    sender_tx: u64,
    receiver_rx: u64,
    /// Skbs of the connection (data or not) at the receiver's driver entry:
    /// what veth counts.
    traced_entry_skbs: u64,
    /// When each skb of the connection (data or not) left the sender
    /// (net_dev_start_xmit), in order: as many as veth counts.
    xmit_ts: Vec<u64>,
    /// The cookies of the sockets that wrote and read the data.
    writer_cookie: u64,
    reader_cookie: u64,
    /// NAPI polls traced: (time, ifindex, work).
    napi_polls: Vec<(u64, u32, i32)>,
    /// With hits counted: the hits the kernel ran no program for, of the
    /// probes whose paths loss changes.
    not_run: [(&'static str, Option<u64>); 2],
}

impl BulkRun {
    /// Skbs of the connection at net_dev_start_xmit from the sender.
    fn traced_xmit_skbs(&self) -> u64 {
        self.xmit_ts.len() as u64
    }

    /// Hits of `kind`'s probe that ran no program.
    fn not_run(&self, kind: &str) -> u64 {
        let counted = self.not_run.iter().find(|(k, _)| *k == kind);
        counted.and_then(|(_, n)| *n).expect("hits counted")
    }
}

/// Every packet traced; `count_hits`: the hits the kernel ran no program for too.
fn bulk_run(lab: &Lab, cfg: &LabConfig, count_hits: bool) -> BulkRun {
    let netns = |lab: &Lab| {
        (
            link_packets(lab.sender_netns().name(), lab.sender_iface()),
            link_packets(lab.receiver_netns().name(), lab.receiver_iface()),
        )
    };
    let (sender_before, receiver_before) = netns(lab);
    let mut paths = PathAnalyzer::default();
    let mut entry = 0;
    let (mut writer_cookie, mut reader_cookie) = (0, 0);
    let mut napi_polls = Vec::new();
    let mut xmit_ts = Vec::new();
    let sender_ip = lab.sender_addr(cfg.ipv6);
    // 64 MiB of ring: the test's collector is an unoptimized build, and in
    // the matrix's emulated guest it once drained a lossy transfer more
    // slowly than the kernel made its events (6.12: 5401 lost, the run
    // twice as long as the next two).
    let options = TracerOptions {
        count_hits,
        ring_bytes: 64 << 20,
        ..TracerOptions::default()
    };
    let run = run_traced(
        lab,
        cfg,
        options,
        &AtomicBool::new(false),
        |record| {
            let ev = Event::decode(record).expect("a valid record");
            assert_stamped(&ev);
            let from_sender = ev.src().map(|a| a.ip()) == Some(sender_ip);
            match &ev.body {
                Body::DevStartXmit(_) if from_sender => xmit_ts.push(ev.hdr.ts_ns),
                Body::RxEntry(_) if from_sender => entry += 1,
                Body::Sendmsg(_) => writer_cookie = ev.hdr.sock_cookie,
                Body::AppRead(_) => reader_cookie = ev.hdr.sock_cookie,
                Body::NapiPoll(p) => napi_polls.push((ev.hdr.ts_ns, p.ifindex, p.work)),
                _ => {}
            }
            paths.push(&ev);
        },
        |_| {},
        |_| {},
    )
    .expect("traced transfer");
    let (sender_after, receiver_after) = netns(lab);
    assert!(run.transfer.completed);
    assert_eq!(run.stats.lost_total(), 0, "the ring buffer overflowed");
    let not_run = ["window_adv", "tcp_rcv"].map(|kind| (kind, common::hits_not_run(&run, kind)));
    BulkRun {
        transfer: run.transfer,
        report: paths.finish(),
        sender_tx: sender_after.tx - sender_before.tx,
        receiver_rx: receiver_after.rx - receiver_before.rx,
        traced_entry_skbs: entry,
        writer_cookie,
        reader_cookie,
        napi_polls,
        xmit_ts,
        not_run,
    }
}

/// Runs `work` with the tracer attached to the lab's traffic; returns its
/// result and the path report of everything traced meanwhile.
fn traced<T: Send>(lab: &Lab, work: impl FnOnce() -> T + Send) -> (T, PathReport) {
    let mut paths = PathAnalyzer::default();
    let result = traced_into(lab, work, |ev| paths.push(ev));
    (result, paths.finish())
}

/// Runs `work` with the tracer on the lab's traffic, each event to `on_event`.
fn traced_into<T: Send>(
    lab: &Lab,
    work: impl FnOnce() -> T + Send,
    mut on_event: impl FnMut(&Event),
) -> T {
    let options = TracerOptions {
        filters: Filters {
            addr: Some(lab.receiver_ip().into()),
            ..Filters::default()
        },
        ..TracerOptions::default()
    };
    let mut tracer = Tracer::start(&options).expect("tracer");
    let stop = AtomicBool::new(false);
    let (result, stats) = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            let _stop = SetOnDrop(&stop);
            let result = work();
            // The last reads' events are still in the ring.
            std::thread::sleep(Duration::from_millis(100));
            result
        });
        let stats = Collector::new().run(
            &mut tracer,
            &stop,
            None,
            &mut Callbacks(
                |record: &[u8]| on_event(&Event::decode(record).expect("a valid record")),
                |_: &CollectStats| {},
            ),
        );
        (worker.join().expect("worker"), stats.expect("collector"))
    });
    assert_eq!(stats.lost_total(), 0, "the ring buffer overflowed");
    // Journeys end within the collector's hold: the events in time order.
    common::assert_few_late(stats.late, stats.events, "events out of time order");
    result
}

/// [`bulk_run`] of every packet, while a second tracer on the lab's
/// traffic, sampling as `filters` say, feeds its own path analysis (sampled
/// alike) and `seen`: the full run, the second's report and its stats.
fn beside_every_packet(
    lab: &Lab,
    cfg: &LabConfig,
    filters: Filters,
    mut seen: impl FnMut(&Event) + Send,
) -> (BulkRun, PathReport, CollectStats) {
    let mut analyzer = PathAnalyzer::new(PathConfig {
        sample_every: filters.sample_every,
        sample_slice_ns: filters.sample_slice_ns,
        ..PathConfig::default()
    });
    let mut tracer = Tracer::start(&TracerOptions {
        filters: Filters {
            addr: Some(lab.receiver_ip().into()),
            ..filters
        },
        ..TracerOptions::default()
    })
    .unwrap();
    let stop = AtomicBool::new(false);
    let (all, stats) = std::thread::scope(|s| {
        let collector = s.spawn(|| {
            let push = |record: &[u8]| {
                let ev = Event::decode(record).expect("a valid record");
                assert_stamped(&ev);
                seen(&ev);
                analyzer.push(&ev);
            };
            Collector::new().run(
                &mut tracer,
                &stop,
                None,
                &mut Callbacks(push, |_: &CollectStats| {}),
            )
        });
        let all = {
            let _stop = SetOnDrop(&stop);
            bulk_run(lab, cfg, false)
        };
        (all, collector.join().unwrap().unwrap())
    });
    (all, analyzer.finish(), stats)
}

/// Every hop is sent after it was stamped: a hop half written when its
/// journey went (a softirq ending the journey the socket owner's backlog
/// was writing) came with time 0.
fn assert_stamped(ev: &Event) {
    assert_ne!(ev.hdr.ts_ns, 0, "a hop sent before it was stamped: {ev:?}");
}

/// Packets of one direction measured at `stage`, scaled by the sampling:
/// summed over one dimension's paths, which partition the packets.
fn stage_count(report: &PathReport, direction: &str, stage: &str) -> u64 {
    let dimension = if direction == "tx" { "hold" } else { "gro" };
    (report
        .paths
        .iter()
        .filter(|p| p.direction == direction && p.dimension == dimension)
        .flat_map(|p| &p.stages)
        .filter(|s| s.stage == stage)
        .map(|s| s.count)
        .sum::<u64>() as f64
        * report.scale)
        .round() as u64
}

/// The RX path over all packets ("gro" partitions them; veth has no GRO, so
/// every packet is "single").
fn rx_all(report: &PathReport) -> &PathEntry {
    report
        .paths
        .iter()
        .find(|p| p.direction == "rx" && p.dimension == "gro" && p.path == "single")
        .unwrap_or_else(|| panic!("no rx single path:\n{}", report.render_table(None)))
}

fn print_report(tag: &str, run: &BulkRun) {
    eprintln!(
        "{tag}: {} bytes in {:?}; sender interface tx {}, receiver interface rx {} packets; traced skbs: start_xmit {}, driver entry {}",
        run.transfer.bytes,
        run.transfer.elapsed,
        run.sender_tx,
        run.receiver_rx,
        run.traced_xmit_skbs(),
        run.traced_entry_skbs
    );
    eprint!("{}", run.report.render_table(None));
}

/// What is compared with what. veth counts skbs: a TSO skb of 40 segments
/// is one tx packet on the sender's veth and one rx packet on the
/// receiver's (veth hands the skb over whole), while the report counts wire
/// segments (the unit of MAGNET's per-packet costs). So:
/// - with `gso_max_segs 1` an skb is a segment, and the report's per-stage
///   counts must match the counters (which also count the handshake, the
///   FINs and IPv6 neighbour discovery: a handful in 2900);
/// - with TSO on (the default), the skbs the tracer saw at
///   net_dev_start_xmit and at the driver entry must match the counters,
///   and the report's segments must match TCP's own segment count
///   (`tcpi_data_segs_out`).
#[test]
fn stage_counts_match_the_interface_counters_and_coverage_is_complete() {
    if !require_root("stage_counts_match_the_interface_counters") {
        return;
    }
    let _serial = serial();
    let cfg = paced_one_segment_skbs();
    let lab = Lab::new(&cfg).unwrap();
    let run = bulk_run(&lab, &cfg, false);
    print_report("one segment per skb", &run);
    // Each end's breakdown names its own socket (`flamegraph --flow COOKIE`).
    for (local, cookie) in [
        (run.transfer.sender_addr, run.writer_cookie),
        (run.transfer.receiver_addr, run.reader_cookie),
    ] {
        let row = run
            .report
            .flows
            .iter()
            .find(|f| f.local == local.to_string());
        assert_eq!(row.map(|f| f.cookie), Some(cookie), "{local}");
    }
    let c = &run.report.coverage;
    assert!(c.tx_fraction.unwrap() >= 0.95, "{c:?}");
    assert!(c.rx_fraction.unwrap() >= 0.95, "{c:?}");
    for (direction, stages, counter) in [
        ("tx", &["tcp", "qdisc", "driver"][..], run.sender_tx),
        (
            "rx",
            &["napi", "ip_tcp", "tcp_queue", "socket_queue", "read"][..],
            run.receiver_rx,
        ),
    ] {
        for stage in stages {
            let count = stage_count(&run.report, direction, stage);
            eprintln!("{direction} {stage}: {count} packets, veth counter {counter}");
            assert!(
                relative_error(count, counter) <= UNSEEN_BY_THE_KERNEL,
                "{direction} {stage}: {count} vs {counter}"
            );
        }
    }

    // 64 MiB: ~1500 skbs, so the few IPv6 neighbour/router packets a new
    // link sends stay well inside 2%.
    let cfg = LabConfig {
        bytes: 64 << 20,
        gso_max_segs: None,
        max_pacing_rate: None,
        ..cfg
    };
    let lab = Lab::new(&cfg).unwrap();
    let run = bulk_run(&lab, &cfg, false);
    print_report("TSO", &run);
    let c = &run.report.coverage;
    assert!(c.tx_fraction.unwrap() >= 0.95, "{c:?}");
    assert!(c.rx_fraction.unwrap() >= 0.95, "{c:?}");
    assert!(
        relative_error(run.traced_xmit_skbs(), run.sender_tx) <= UNSEEN_BY_THE_KERNEL,
        "{} skbs traced at start_xmit, veth sent {}",
        run.traced_xmit_skbs(),
        run.sender_tx
    );
    assert!(
        relative_error(run.traced_entry_skbs, run.receiver_rx) <= UNSEEN_BY_THE_KERNEL,
        "{} skbs traced at the driver entry, veth received {}",
        run.traced_entry_skbs,
        run.receiver_rx
    );
    // Many segments per skb, yet the same segments TCP counted.
    let segments = u64::from(run.transfer.sender.data_segs_out);
    assert!(
        segments > 4 * run.sender_tx,
        "{segments} segments in {} skbs",
        run.sender_tx
    );
    for direction in ["tx", "rx"] {
        let count = stage_count(
            &run.report,
            direction,
            if direction == "tx" { "driver" } else { "read" },
        );
        assert!(
            relative_error(count, segments) <= UNSEEN_BY_THE_KERNEL,
            "{direction}: {count} packets vs {segments} data segments out"
        );
    }
}

/// Packets down one path of one dimension (e.g. "tx" "hold" "retransmit").
fn path_packets(report: &PathReport, direction: &str, dimension: &str, path: &str) -> u64 {
    report
        .paths
        .iter()
        .filter(|p| p.direction == direction && p.dimension == dimension && p.path == path)
        .map(|p| p.packets)
        .sum()
}

/// A lossy path (the lab drops 1 in N data segments at the receiver's
/// interface): the paths loss sends packets down, against the kernel's own
/// counters of the same sockets, in segments. TX `retransmit` (seq before
/// snd_nxt at net_dev_queue) is what the sender's TCP counted as
/// retransmitted (`tcpi_total_retrans`); RX `out_of_order` (seq after
/// rcv_nxt at tcp_rcv) is what the receiver queued out of order
/// (`tcpi_rcv_ooopack`). With one segment per skb and with TSO skbs, which
/// veth hands over whole (a drop loses many segments, retransmitted in
/// parts). Now and then this kernel runs no program for a tracepoint hit
/// (see probe::hits): the hits are counted, and a count may fall short of
/// the kernel's by the segments of as many skbs as its hook's hits that ran
/// no program, never more, and exceed it by at most one in a hundred.
#[test]
fn loss_paths_match_the_kernels_retransmit_and_out_of_order_counts() {
    if !require_root("loss_paths_match_the_kernels_counts") {
        return;
    }
    let _serial = serial();
    let one_segment = LabConfig {
        drop_every: Some(50),
        ..paced_one_segment_skbs()
    };
    let tso = LabConfig {
        bytes: 32 << 20,
        drop_every: Some(20),
        ..LabConfig::default()
    };
    for (tag, cfg) in [("one segment per skb", one_segment), ("TSO", tso)] {
        let lab = Lab::new(&cfg).unwrap();
        let run = bulk_run(&lab, &cfg, true);
        print_report(tag, &run);
        let loss = lab.loss().unwrap().expect("the lab's loss program");
        let retransmitted = u64::from(run.transfer.sender.total_retrans);
        let out_of_order = u64::from(run.transfer.receiver.rcv_ooopack);
        eprintln!(
            "{tag}: {loss:?}; hits that ran no program: {:?}",
            run.not_run
        );
        // The lab itself: it dropped, and every segment lost was sent again.
        assert!(loss.dropped_skbs > 0, "{tag}: nothing dropped");
        assert!(retransmitted >= loss.dropped_segments, "{tag}");
        assert!(out_of_order > 0, "{tag}: no hole ever seen");
        let retransmit = path_packets(&run.report, "tx", "hold", "retransmit");
        let order = path_packets(&run.report, "rx", "order", "out_of_order");
        assert_counted_as_the_kernel(tag, "retransmit", retransmit, retransmitted, &run, &cfg);
        assert_counted_as_the_kernel(tag, "out_of_order", order, out_of_order, &run, &cfg);
    }
}

/// A path's packets `traced` against the kernel's count: below it by at most
/// the segments of the hits of the path's probe that ran no program (an skb:
/// at most 45 segments of 1448 bytes in 64 KiB), above it by at most a
/// segment in a hundred: the kernel counts what it queued, and a segment
/// past rcv_nxt at tcp_probe may still be discarded before the out-of-order
/// queue (the Debian 6.12 guest once: 166 against 165, no drop traced).
fn assert_counted_as_the_kernel(
    tag: &str,
    path: &str,
    traced: u64,
    kernel: u64,
    run: &BulkRun,
    cfg: &LabConfig,
) {
    let kind = match path {
        "retransmit" => "window_adv",
        _ => "tcp_rcv",
    };
    eprintln!("{tag}: {path} path {traced} packets, the kernel's count {kernel}");
    let most_unseen = run.not_run(kind) * u64::from(cfg.gso_max_segs.unwrap_or(45));
    let most_extra = (kernel / 100).max(1);
    assert!(
        traced <= kernel + most_extra && kernel.saturating_sub(traced) <= most_unseen,
        "{tag}: {path} path {traced} packets, the kernel counted {kernel}, {} {kind} hits ran no program",
        run.not_run(kind)
    );
}

/// Segments TCP took and then dropped (the window shrank to nothing under a
/// slow reader, with loss) take a path of their own, `tcp_dropped`, as the
/// kernel counts them (nstat); they are not out of order, nor counted again
/// with the copy sent after them. Before they were, the out-of-order path
/// stood above the kernel's count by every segment dropped (6160 against
/// rcv_ooopack's 5885, 57 skbs dropped at a zero window).
#[test]
fn segments_tcp_drops_take_their_own_path() {
    if !require_root("segments_tcp_drops_take_their_own_path") {
        return;
    }
    let _serial = serial();
    // Each family: the drop's headers are read per family.
    for ipv6 in [false, true] {
        let cfg = LabConfig {
            bytes: 16 << 20,
            drop_every: Some(5),
            rcvbuf: Some(64 << 10),
            shrink_window: true,
            ipv6,
            reader: tenge_trace::lab::Reader::Slow {
                initial_pause: Duration::from_millis(200),
                read_size: 4096,
                interval: Duration::from_millis(1),
                reads: 300,
            },
            ..LabConfig::default()
        };
        tcp_drops_take_their_own_path(if ipv6 { "tcp drops v6" } else { "tcp drops v4" }, &cfg);
    }
}

fn tcp_drops_take_their_own_path(tag: &str, cfg: &LabConfig) {
    let lab = Lab::new(cfg).unwrap();
    let netns = lab.receiver_netns().name().to_string();
    let before = common::nstat(&netns);
    let run = bulk_run(&lab, cfg, true);
    let after = common::nstat(&netns);
    print_report(tag, &run);
    // Beyond the window, no window, no memory (BeyondWindow is 6.17's).
    let drops = [
        "TcpExtTCPZeroWindowDrop",
        "TcpExtBeyondWindow",
        "TcpExtTCPOFODrop",
        "TcpExtTCPRcvQDrop",
    ];
    let dropped_skbs: u64 = drops
        .iter()
        .map(|name| after.get(*name).unwrap_or(&0) - before.get(*name).unwrap_or(&0))
        .sum();
    let tcp_dropped = path_packets(&run.report, "rx", "order", "tcp_dropped");
    eprintln!("{tag}: tcp_dropped {tcp_dropped} segments, the kernel dropped {dropped_skbs} skbs");
    assert!(
        dropped_skbs > 0,
        "{tag}: the scenario made TCP drop nothing"
    );
    // An skb is at least one segment, at most 45 of 1448 bytes in 64 KiB.
    assert!(
        (dropped_skbs..=dropped_skbs * 45).contains(&tcp_dropped),
        "{tag}: tcp_dropped {tcp_dropped} segments for {dropped_skbs} skbs the kernel dropped"
    );
    for (path, dimension, kernel) in [
        ("out_of_order", "order", run.transfer.receiver.rcv_ooopack),
        ("retransmit", "hold", run.transfer.sender.total_retrans),
    ] {
        let direction = if dimension == "order" { "rx" } else { "tx" };
        let traced = path_packets(&run.report, direction, dimension, path);
        assert_counted_as_the_kernel(tag, path, traced, u64::from(kernel), &run, cfg);
    }
}

/// With 1-in-8 sampling (by 16 KiB blocks of sequence space, the same rule in
/// BPF and here) the report scales its counts by 8, and its quantiles estimate
/// the distributions of all packets. Two tracers watch the same transfer,
/// one keeping every packet and one 1 in 8, so the comparison is about
/// sampling alone: two runs of a transfer on a shared 2-core VM differ more
/// than that (one socket_queue p50 was 315 µs, the next 12 µs).
#[test]
fn sampling_one_in_eight_scales_counts_and_keeps_latencies() {
    if !require_root("sampling_one_in_eight") {
        return;
    }
    let _serial = serial();
    // 64 MiB: 4096 blocks, ~512 chosen. The packets of a block go together,
    // so the counts vary as the number of chosen blocks does, binomially:
    // sqrt(7/8 / 512) = 4.1% standard deviation, which puts the 25% allowed
    // below at 6 of them. With 16 MiB (8.3%) CI once drew 161 blocks of
    // 1024, 3.1 deviations up, and the scaled count was 25.2% high.
    let cfg = LabConfig {
        bytes: 64 << 20,
        ..paced_one_segment_skbs()
    };
    let lab = Lab::new(&cfg).unwrap();
    let filters = Filters {
        sample_every: 8,
        ..Filters::default()
    };
    let (all, sampled, stats) = beside_every_packet(&lab, &cfg, filters, |_| {});
    assert_eq!(stats.lost_total(), 0);
    print_report("all", &all);
    eprint!("1 in 8:\n{}", sampled.render_table(None));
    assert_eq!(sampled.sample_every, 8);
    assert!(sampled.note.contains("scaled by 8"), "{}", sampled.note);
    let c = &sampled.coverage;
    assert!(
        c.tx_fraction.unwrap() >= 0.95 && c.rx_fraction.unwrap() >= 0.95,
        "{c:?}"
    );
    for (direction, stage, counter) in [
        ("tx", "driver", all.sender_tx),
        ("rx", "read", all.receiver_rx),
    ] {
        let (n_all, n_sampled) = (
            stage_count(&all.report, direction, stage),
            stage_count(&sampled, direction, stage),
        );
        eprintln!("{direction}: {n_all} packets, 1 in 8 scaled: {n_sampled}, veth: {counter}");
        assert!(relative_error(n_sampled, counter) <= 0.25, "{direction}");
        assert!(relative_error(n_sampled, n_all) <= 0.25, "{direction}");
    }
    // Per full path (one mode each: the direct and backlog RX paths differ
    // 50x in ip_tcp, so a p50 over both jumps with their mix), every stage
    // with enough samples: the p50s agree within 3x, or each lies below the
    // other's p90. The 3x covers the two tracers' programs on each hook,
    // which run in turn and so time a stage with the other's run inside it
    // (the qdisc stage, ~500 ns, reads ~1.4x longer in the tracer attached
    // first). The p90s cover bimodal socket stages (the reader awake, or
    // woken later): sampling keeps whole 16 KiB blocks, ~11 consecutive
    // packets that share the reader's state, so a path's sample is a few
    // dozen clusters and its p50 may sit in either mode (943 ns in all,
    // 3663 ns in 1 in 8, the full run's p90 above both). Socket hops timed by
    // independently sampled socket events were 10-30x off, failing both.
    let mut compared = 0;
    for s in sampled.combined.iter().filter(|p| p.sampled_packets >= 50) {
        // Why a packet was held is read from its write's own reading of the
        // socket, which sampling keeps with the packet; a write the kernel
        // did not run the probe for (see UNSEEN_BY_THE_KERNEL) moves its
        // packets to another class in one run only: a few percent, never many.
        let Some(a) = all
            .report
            .combined
            .iter()
            .find(|p| p.direction == s.direction && p.path == s.path)
        else {
            assert!(
                s.share < 0.10,
                "{} {} holds {:.1}% of the sampled packets and none of all",
                s.direction,
                s.path,
                s.share * 100.0
            );
            continue;
        };
        for (x, y) in a
            .stages
            .iter()
            .chain([&a.total])
            .zip(s.stages.iter().chain([&s.total]))
        {
            if y.count < 50 {
                continue;
            }
            eprintln!(
                "{} {} {}: p50 {} p90 {} ns, 1 in 8: p50 {} p90 {} ns",
                s.direction, s.path, x.stage, x.p50_ns, x.p90_ns, y.p50_ns, y.p90_ns
            );
            let ratio = y.p50_ns.max(1) as f64 / x.p50_ns.max(1) as f64;
            assert!(
                (1.0 / 3.0..=3.0).contains(&ratio)
                    || (y.p50_ns <= x.p90_ns && x.p50_ns <= y.p90_ns),
                "{} {} {}",
                s.direction,
                s.path,
                x.stage
            );
            compared += 1;
        }
    }
    assert!(compared >= 6, "only {compared} stages had enough samples");
}

/// How far 1-in-8 slices' scaled counts may lie from every packet's.
const SLICED_COUNT_ERROR: f64 = 0.08;

/// Sampling by time: one 20 ms slice in every 8 traced, the probes detached
/// in between. While a paced transfer runs (the same rate all along, so a
/// slice of it is like any other), no event comes from the time no probe
/// was attached, the pauses take the 7/8 of the time between the slices
/// and the few ms of each the probes took to come and go, every journey is
/// whole (none late), and the counts scaled (each window's events by its
/// slices over the time it was traced) match the veth counters and the
/// every-packet tracer running beside it.
#[test]
fn sampling_by_time_traces_its_slices_alone_and_scales_counts() {
    if !require_root("sampling_by_time") {
        return;
    }
    let _serial = serial();
    // 64 MiB at 12.5 MB/s: 5.4 s, 33 runs of 8 slices, one slice of each
    // traced. At a steady rate a traced ms holds as many packets as any
    // other (measured at 25 MB/s: 196 to 256 events per traced ms, every
    // slice; half that rate since a slow CI host, both vCPUs saturated by
    // two debug collectors, ran the transfer slower while the sliced
    // tracer was attached: 14% fewer packets per traced ms), so
    // each window's events times 8, times its slices over its traced time
    // where the probes came back late, count the transfer right but for
    // the runs its two ends cut, whose traced slice fell inside it or not
    // by luck (at most a run each, 3%). Scaled by the times alone, the
    // counts came 4-9% high: the probes came back late more often in the
    // idle second, while the every-packet tracer beside loaded, than in
    // the transfer (before they came back ahead of their slice, each slice
    // was cut by its attach, and the counts came −19% to +2%).
    let cfg = LabConfig {
        bytes: 64 << 20,
        max_pacing_rate: Some(12_500_000),
        ..paced_one_segment_skbs()
    };
    let lab = Lab::new(&cfg).unwrap();
    let filters = Filters {
        sample_every: 8,
        sample_slice_ns: 20_000_000,
        ..Filters::default()
    };
    let (mut edges, mut bounds) = (Vec::new(), Vec::new());
    let (mut stamps, mut xmits) = (Vec::new(), Vec::new());
    let sender_ip = lab.sender_addr(cfg.ipv6);
    let (all, sliced, stats) = beside_every_packet(&lab, &cfg, filters, |ev| {
        match ev.body {
            // The recording's bounds (traced then) aside: pauses' edges.
            Body::Pause(_) if ev.hdr.variant == TT_PAUSE_BOUND as u8 => {
                return bounds.push(ev.hdr.ts_ns)
            }
            Body::Pause(p) => return edges.push((ev.hdr.ts_ns, p.edge_ns)),
            Body::DevStartXmit(_) if ev.src().map(|a| a.ip()) == Some(sender_ip) => {
                xmits.push(ev.hdr.ts_ns)
            }
            _ => {}
        }
        stamps.push(ev.hdr.ts_ns);
    });
    assert_eq!(stats.lost_total(), 0);
    common::assert_few_late(stats.late, stats.events, "journeys cut by the pauses");
    eprint!("1 in 8 slices of 20 ms:\n{}", sliced.render_table(None));
    assert!(sliced.note.contains("by time"), "{}", sliced.note);
    // Pauses as (began to leave, all gone, began to come back, all back).
    let pauses: Vec<[u64; 4]> = edges
        .chunks(2)
        .map(|e| [e[0].0, e[0].1, e[1].1, e[1].0])
        .collect();
    // No program ran between the slices: no event is stamped between the
    // probes' leaving and their coming back, but by one a CPU was running
    // as they left (seen 41 µs late, on a vCPU the host had descheduled).
    stamps.sort_unstable();
    for p in &pauses {
        let (gone, back) = (p[1] + 200_000, p[2]);
        let inside = stamps.partition_point(|&t| t < back)
            - stamps.partition_point(|&t| t <= gone.min(back));
        assert_eq!(inside, 0, "{inside} events with no probe attached: {p:?}");
    }
    // Within each slice, with every probe back, the sliced tracer saw
    // exactly the segments the every-packet tracer saw leave the sender, but
    // for those at its edges: each tracer stamps a segment with its own
    // clock read, the every-packet one's first (attached first, it runs
    // first), so one stamped right at an edge may fall on its two sides.
    const AT_EDGE_NS: u64 = 20_000;
    xmits.sort_unstable();
    let in_window = |ts: &[u64], from: u64, to: u64| {
        // Empty if `to` comes first (a slice over before the probes were back).
        ts.partition_point(|&t| t < to)
            .saturating_sub(ts.partition_point(|&t| t < from))
    };
    let (first_xmit, last_xmit) = (all.xmit_ts[0], *all.xmit_ts.last().unwrap());
    let traced: Vec<(u64, u64)> = pauses
        .windows(2)
        .map(|w| (w[0][3], w[1][0]))
        .filter(|&(from, to)| from > first_xmit && to < last_xmit)
        .collect();
    assert!(
        traced.len() >= 20,
        "{} slices inside the transfer",
        traced.len()
    );
    for &(from, to) in &traced {
        let seen = in_window(&xmits, from, to);
        let least = in_window(&all.xmit_ts, from + AT_EDGE_NS, to - AT_EDGE_NS);
        let most = in_window(&all.xmit_ts, from - AT_EDGE_NS, to + AT_EDGE_NS);
        assert!(
            (least..=most).contains(&seen),
            "segments sent in the slice {from}..{to}: {seen}, every-packet {least}..={most}"
        );
    }
    // The probes come back ahead of each slice, by a lead that follows what
    // coming back took lately (at most half a slice): a window is traced
    // from its slice's start, on the slices' grid, unless coming back took
    // longer than the lead, and then from when they were all back. How
    // often that happens is the host's (debug build beside the every-packet
    // tracer: 31 to 37 of about 40 windows whole here, 28 of 54 on a slower
    // CI host); what follows holds on any. A window ends on the grid (the
    // end of its last slice), or where it began if the slice was over
    // before the probes were back.
    let slice = 20_000_000;
    let windows: Vec<([u64; 4], u64)> = pauses.windows(2).map(|w| (w[0], w[1][0])).collect();
    let traced = |&&(p, end): &&([u64; 4], u64)| end > p[3];
    let phase = windows.iter().find(traced).expect("a traced window").1 % slice;
    for &(p, end) in &windows {
        assert!(end % slice == phase || end == p[3], "window {p:?}..{end}");
    }
    // The probes began to come back before their slice began, but where
    // the collector woke late by more than the lead (none of 40 windows
    // here; 3 of 63 beside six busy loops).
    let slice_start = |at: u64| at - (at + slice - phase) % slice;
    let traced: Vec<[u64; 4]> = windows.iter().filter(traced).map(|w| w.0).collect();
    let ahead = traced.iter().filter(|p| slice_start(p[3]) > p[2]).count();
    let whole = traced.iter().filter(|p| slice_start(p[3]) == p[3]).count();
    eprintln!(
        "{} windows, {} traced: {whole} whole, {ahead} came back ahead, scale {}",
        windows.len(),
        traced.len(),
        sliced.scale
    );
    assert!(ahead * 4 >= traced.len() * 3, "{ahead} came back ahead");
    let (first, last) = (pauses[0][0], pauses.last().unwrap()[3]);
    let paused: u64 = pauses.iter().map(|p| p[3] - p[0]).sum();
    // A slice whose probes came back late is paused until then.
    let late: u64 = traced.iter().map(|p| p[3] - slice_start(p[3])).sum();
    let share = (paused - late) as f64 / (last - first) as f64;
    eprintln!(
        "{} pauses, {:.2}% of the time, {:.2}% but for the slices' late starts",
        pauses.len(),
        paused as f64 / (last - first) as f64 * 100.0,
        share * 100.0
    );
    // 7/8 of the time between the slices; the first and the last pause
    // may be a run's end or start apart (measured: 87.6% to 88.4%, from
    // 87.9% to 90.2% with the late starts).
    assert!((0.86..0.91).contains(&share), "paused {share}");
    // A recording that starts or ends in a traced slice has a bound there:
    // no window is longer than its slices (two at most), the first and the
    // last included (the end's bound came once the probes were gone, up to
    // 50 ms later under load; the start's after they had all attached,
    // what the first ones stamped meanwhile traced beyond the slices).
    if let Some(&b) = bounds.first().filter(|&&b| b < first) {
        assert!(
            first - b <= 2 * slice,
            "traced from the start {b} to {first}"
        );
    }
    if let Some(&b) = bounds.last().filter(|&&b| b > last) {
        assert!(b - last <= 2 * slice, "traced from {last} to the end {b}");
    }
    // The best count sampling can make: what the every-packet tracer saw
    // sent in the sliced tracer's windows, each weighed as the analysis
    // weighs it (its slices over the time it was traced). It differs from
    // the transfer's count where the traced slices ran at another rate than
    // the rest: a saturated host runs the transfer slower while a second
    // tracer is attached (a slow CI host, both vCPUs busy with two debug
    // collectors: 14% fewer packets per traced ms; four busy loops here:
    // 7%). By how much is the host's, bounded loosely; the scaled counts
    // must match it.
    let mut spans: Vec<(u64, u64, bool)> =
        windows.iter().map(|&(p, end)| (p[3], end, true)).collect();
    spans.extend(
        bounds
            .first()
            .filter(|&&b| b < first)
            .map(|&b| (b, first, true)),
    );
    spans.extend(
        bounds
            .last()
            .filter(|&&b| b > last)
            .map(|&b| (last, b, false)),
    );
    let weighed: f64 = spans
        .iter()
        .filter(|&&(from, to, _)| to > from)
        .map(|&(from, to, drawn)| {
            let weight = match drawn {
                true => (to - from).div_ceil(slice) as f64 * slice as f64 / (to - from) as f64,
                false => 1.0,
            };
            8.0 * weight * in_window(&all.xmit_ts, from, to) as f64
        })
        .sum();
    let rate_in_slices = weighed / all.xmit_ts.len() as f64;
    eprintln!("the traced slices' rate over the transfer's: {rate_in_slices:.3}");
    assert!((0.8..1.2).contains(&rate_in_slices), "{rate_in_slices}");
    for (direction, stage, counter) in [
        ("tx", "driver", all.sender_tx),
        ("rx", "read", all.receiver_rx),
    ] {
        let (n_all, n_sliced) = (
            stage_count(&all.report, direction, stage),
            stage_count(&sliced, direction, stage),
        );
        let best = |n: u64| (n as f64 * rate_in_slices) as u64;
        eprintln!(
            "{direction}: {n_all} packets, 1 in 8 slices scaled: {n_sliced} ({:+.1}%, {:+.1}% from the best), veth: {counter}",
            (n_sliced as f64 / n_all as f64 - 1.0) * 100.0,
            (n_sliced as f64 / best(n_all) as f64 - 1.0) * 100.0,
        );
        // Debug build, from the best: −1.2% to +0.3% idle, −5.1% to +0.3%
        // beside four or six busy loops (from the transfer's count there:
        // down to −14.6%). Scaled by the times, loads made +1% to +9%, and
        // before the slices started ahead of the first attach (what the
        // probes stamped while the others attached, up to 76 ms, counted
        // as traced time), CI's run came −13.4%.
        assert!(
            relative_error(n_sliced, best(counter)) <= SLICED_COUNT_ERROR,
            "{direction}"
        );
        assert!(
            relative_error(n_sliced, best(n_all)) <= SLICED_COUNT_ERROR,
            "{direction}"
        );
    }
}

/// A ping-pong's half round trip against the RX path of the same messages.
/// Half an RTT is one message's way from the client's send() to the
/// server's recv() returning, averaged over the two directions: the TX path
/// (sendmsg → driver), the RX path (driver → the read returns), and the
/// user-space loop around them. The RX total is one part of that, so it is
/// at most the half RTT; TX on veth costs less than RX (no wakeup of a
/// sleeping reader: the RX path includes the scheduler waking the reader,
/// the largest single cost), so the half RTT stays below 3 RX totals.
#[test]
fn rx_path_latency_is_consistent_with_pingpong_half_rtt() {
    if !require_root("rx_path_latency_is_consistent_with_pingpong_half_rtt") {
        return;
    }
    let _serial = serial();
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let cfg = PingPongConfig::default();
    let (pingpong, report) = traced(&lab, || pingpong::run(&lab, &cfg).unwrap());
    eprint!("{}", report.render_table(None));
    let half_rtt = pingpong.half_rtt_quantile(0.5).as_nanos() as u64;
    let rx = rx_all(&report);
    // Every message, both ways, went down the whole RX path.
    assert_eq!(
        rx.total.count,
        2 * cfg.rounds as u64,
        "{:?}",
        report.coverage
    );
    let rx_total = rx.total.p50_ns;
    eprintln!(
        "half RTT p50 {half_rtt} ns (p10 {:?}, p90 {:?}); RX driver->read p50 {rx_total} ns",
        pingpong.half_rtt_quantile(0.1),
        pingpong.half_rtt_quantile(0.9)
    );
    assert!(
        rx_total <= half_rtt,
        "RX {rx_total} ns > half RTT {half_rtt} ns"
    );
    assert!(
        half_rtt <= 3 * rx_total,
        "half RTT {half_rtt} ns > 3 x RX {rx_total} ns"
    );
}

/// Requests of 200 B written in two parts without TCP_NODELAY: Nagle's
/// algorithm holds each second part until the ACK of the first, which the
/// echo server delays (it answers only the whole request), so a round trip
/// takes the delayed-ACK timer, 40 ms or more. The ping-pong's own clock is
/// the ground truth: the `held_nagle` waits are its round trips but for the
/// echo's way back, and the writer's socket is advised of TCP_NODELAY. With
/// it, nothing is held.
#[test]
fn nagle_holds_the_second_part_of_each_request_until_the_delayed_ack() {
    if !require_root("nagle_holds_the_second_part_of_each_request_until_the_delayed_ack") {
        return;
    }
    let _serial = serial();
    let lab = Lab::new(&LabConfig::default()).unwrap();
    for nodelay in [false, true] {
        let cfg = PingPongConfig {
            rounds: 40,
            size: 200,
            writes: 2,
            nodelay,
            ..PingPongConfig::default()
        };
        let mut analysis = Analysis::new(AnalysisConfig::default());
        let pingpong = traced_into(
            &lab,
            || pingpong::run(&lab, &cfg).unwrap(),
            |ev| drop(analysis.push(ev)),
        );
        let report = analysis.finish(Provenance::default());
        eprint!("{}", report.path_costs.render_table(None));
        let rtt = pingpong.half_rtt_quantile(0.5).as_nanos() as u64 * 2;
        let client = pingpong.client.to_string();
        let writer = report.flows.iter().find(|f| f.src == client).unwrap();
        let advised = writer
            .advice
            .iter()
            .any(|a| matches!(a, Advice::Nagle { .. }));
        let held = report
            .path_costs
            .paths
            .iter()
            .find(|p| p.path == "held_nagle");
        eprintln!("nodelay {nodelay}: round trip p50 {rtt} ns");
        if nodelay {
            assert!(held.is_none() && !advised, "{:?}", writer.advice);
            assert!(rtt < 10_000_000, "round trip p50 {rtt} ns with TCP_NODELAY");
            continue;
        }
        // The first round trips ACK at once (quick ACK mode at the start).
        let held = held.expect("segments held by Nagle's algorithm");
        assert!(held.packets >= 30, "{} held of 40", held.packets);
        assert!(held.packets <= 40, "{} held of 40", held.packets);
        let wait = held.stages[0].p50_ns;
        assert!(rtt >= 40_000_000, "round trip p50 {rtt} ns: no delayed ACK");
        // The wait is the round trip but the echo's way back, within the
        // histogram's 1 %.
        assert!(
            wait * 100 <= rtt * 102 && wait * 10 >= rtt * 9,
            "held_nagle p50 {wait} ns beside the round trips' {rtt} ns"
        );
        assert!(advised, "no Nagle advice: {:?}", writer.advice);
    }
}

/// How long a vCPU of the two-NIC guest may stand still between two probes
/// of one tracepoint hit: QEMU's single-threaded TCG runs one vCPU at a time
/// and kicks the other in every 100 ms, while the guest's clock runs on.
const TCG_SLICE_NS: u64 = 100_000_000;

/// What perf records beside the tracer in the NIC test.
const PERF_EVENTS: [&str; 3] = [
    "napi:napi_poll",
    "net:napi_gro_receive_entry",
    "net:netif_receive_skb",
];

/// Per data skb received on `iface` (1000 B or more), the time from
/// napi_gro_receive_entry to netif_receive_skb of the same skb address, as
/// perf saw them (GRO off: each skb goes up whole).
fn entry_to_netif_ns(samples: &[common::perf::Sample], iface: &str) -> Vec<u64> {
    let mut entered = std::collections::HashMap::new();
    let mut latencies = Vec::new();
    for s in samples.iter().filter(|s| s.field("dev") == Some(iface)) {
        let (Some(skb), Some(len)) = (s.field("skbaddr"), s.number("len")) else {
            continue;
        };
        match s.event.as_str() {
            "net:napi_gro_receive_entry" if len >= 1000 => {
                entered.insert(skb.to_string(), s.ts_ns);
            }
            "net:netif_receive_skb" => {
                if let Some(at) = entered.remove(skb) {
                    latencies.push(s.ts_ns - at);
                }
            }
            _ => {}
        }
    }
    latencies.sort_unstable();
    latencies
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    sorted
        .get(((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0)
}

/// The ifindex of `iface` in `netns`.
fn ifindex(netns: &str, iface: &str) -> u32 {
    let out = std::process::Command::new("ip")
        .args(["-n", netns, "-j", "link", "show", "dev", iface])
        .output()
        .expect("ip runs");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j prints JSON");
    json[0]["ifindex"].as_u64().expect("an ifindex") as u32
}

/// Over two NICs (a real driver: the matrix's two-NIC guest sets
/// `TT_LAB_LINK=nic:eth0,eth1`), with GRO on and off at the receiver:
/// - every NAPI poll perf saw on the two NICs while the tracer was
///   attached is in the report's NAPI rows, with the same work (packets);
/// - the skbs traced at net_dev_start_xmit and at the driver entry are the
///   NICs' own tx and rx packet counters, and so are the report's tx driver
///   and rx napi stage counts (virtio_net over QEMU's socket netdev offers
///   no TSO and no scatter-gather: one skb per wire segment each way);
/// - with GRO on, the receiver's packets take the `gro_merged` path; with
///   GRO off none does, and the report's napi stage (driver entry to
///   netif_receive_skb) has perf's quantiles for the same skbs.
#[test]
fn nic_stages_match_its_counters_and_napi_polls_match_perf() {
    let link = common::lab_link();
    if link == tenge_trace::lab::Link::Veth {
        eprintln!(
            "skipped: TT_LAB_LINK=nic:SENDER,RECEIVER names two NICs joined to each other \
             (the kernel matrix's two-NIC guest: make matrix)"
        );
        return;
    }
    if !require_root("nic_stages_match_its_counters_and_napi_polls_match_perf") {
        return;
    }
    let _serial = serial();
    let dir = common::TempDir::new("nic-paths");
    for gro in [true, false] {
        let cfg = LabConfig {
            link: link.clone(),
            gro: Some(gro),
            bytes: 8 << 20,
            ..LabConfig::default()
        };
        let lab = Lab::new(&cfg).unwrap();
        let devices = [
            (
                lab.sender_iface().to_string(),
                ifindex(lab.sender_netns().name(), lab.sender_iface()),
            ),
            (
                lab.receiver_iface().to_string(),
                ifindex(lab.receiver_netns().name(), lab.receiver_iface()),
            ),
        ];
        let perf = common::perf::Record::start(dir.path(), &PERF_EVENTS);
        let run = bulk_run(&lab, &cfg, false);
        let samples = perf.finish();
        print_report(
            &format!("NICs, GRO {}", if gro { "on" } else { "off" }),
            &run,
        );

        // The tracer's window, widened by TCG_SLICE_NS: the link is idle
        // before the transfer and after it, and perf's clock reading of a
        // poll is taken before the program's (perf's probe was registered
        // first), as far before as the guest's vCPU may stall in between.
        let first = run
            .napi_polls
            .iter()
            .map(|p| p.0)
            .min()
            .expect("polls traced");
        let last = run.napi_polls.iter().map(|p| p.0).max().unwrap_or(first);
        for (name, index) in &devices {
            let seen: Vec<_> = samples
                .iter()
                .filter(|p| {
                    p.event == "napi:napi_poll"
                        && p.field("device") == Some(name.as_str())
                        && p.ts_ns + TCG_SLICE_NS >= first
                        && p.ts_ns <= last + TCG_SLICE_NS
                })
                .collect();
            let work: i64 = seen.iter().filter_map(|p| p.number("work")).sum();
            let row = run.report.napi.iter().find(|n| n.ifindex == *index);
            eprintln!(
                "{name} (ifindex {index}): perf {} polls, work {work}; report {row:?}",
                seen.len()
            );
            let row = row.unwrap_or_else(|| panic!("no NAPI row for {name}"));
            assert_eq!(
                (row.polls, row.packets),
                (seen.len() as u64, work as u64),
                "{name}"
            );
            assert!(
                seen.iter()
                    .all(|p| p.number("budget") == Some(i64::from(row.budget))),
                "{name}"
            );
        }

        for (traced, counter, what) in [
            (
                run.traced_xmit_skbs(),
                run.sender_tx,
                "skbs at start_xmit vs the sender NIC's tx packets",
            ),
            (
                run.traced_entry_skbs,
                run.receiver_rx,
                "skbs at the driver entry vs the receiver NIC's rx packets",
            ),
            (
                stage_count(&run.report, "tx", "driver"),
                run.sender_tx,
                "the report's tx driver packets vs tx packets",
            ),
            (
                stage_count(&run.report, "rx", "napi"),
                run.receiver_rx,
                "the report's rx napi packets vs rx packets",
            ),
        ] {
            assert!(
                relative_error(traced, counter) <= UNSEEN_BY_THE_KERNEL,
                "{what}: {traced} vs {counter}"
            );
        }
        let merged = run
            .report
            .paths
            .iter()
            .find(|p| p.direction == "rx" && p.path == "gro_merged")
            .map_or(0.0, |p| p.share);
        if gro {
            assert!(merged > 0.1, "GRO on: {merged} of the packets merged");
            continue;
        }
        assert_eq!(merged, 0.0, "GRO off: nothing merged");
        // Each skb from the driver entry to netif_receive_skb, by its address
        // in perf's samples, against the report's napi stage of the same
        // packets.
        let perf_napi = entry_to_netif_ns(&samples, lab.receiver_iface());
        let ours = rx_all(&run.report)
            .stages
            .iter()
            .find(|s| s.stage == "napi")
            .expect("a napi stage");
        eprintln!(
            "napi stage: perf {} skbs p50 {} p90 {} ns; report {} p50 {} p90 {} ns",
            perf_napi.len(),
            quantile(&perf_napi, 0.5),
            quantile(&perf_napi, 0.9),
            ours.count,
            ours.p50_ns,
            ours.p90_ns
        );
        assert!(
            relative_error(perf_napi.len() as u64, ours.count) <= UNSEEN_BY_THE_KERNEL,
            "{} skbs in perf, {} in the report",
            perf_napi.len(),
            ours.count
        );
        for (q, reported) in [(0.5, ours.p50_ns), (0.9, ours.p90_ns)] {
            let seen = quantile(&perf_napi, q);
            assert!(
                seen.abs_diff(reported) <= (seen / 10).max(5_000),
                "napi p{}: perf {seen} ns, report {reported} ns",
                q * 100.0
            );
        }
    }
}
