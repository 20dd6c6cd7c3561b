//! Which process and cgroup each socket belongs to, against processes the
//! test starts itself: an iperf3 server and client, each in a cgroup the
//! test creates, between two lab namespaces. Needs root.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tenge_trace::analysis::stages::StagesSummary;
use tenge_trace::analysis::Report;
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance};
use tenge_trace::collector::{Callbacks, CollectStats, Collector};
use tenge_trace::event::Event;
use tenge_trace::lab::{ss, Lab, LabConfig};
use tenge_trace::os;
use tenge_trace::probe::{Filters, StageTracer, TaskFilter, Tracer, TracerOptions};
use tenge_trace::task::Task;

/// A cgroup v2 directory, removed (once its processes are gone) when dropped.
struct TempCgroup {
    dir: PathBuf,
    /// Its path as the report names it.
    path: String,
}

impl TempCgroup {
    fn new(name: &str) -> TempCgroup {
        let root = os::cgroup2_root().expect("a cgroup v2 hierarchy");
        let dir = root.join(name);
        std::fs::create_dir(&dir).unwrap();
        TempCgroup {
            dir,
            path: format!("/{name}"),
        }
    }

    /// `ip netns exec NETNS iperf3 ARGS` in this cgroup from its first
    /// instruction, started by [`go`] (its pid is known before: the
    /// shell's, which iperf3 keeps).
    fn spawn_in(&self, netns: &str, args: &[&str]) -> Child {
        let procs = self.dir.join("cgroup.procs");
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {} && read go && exec ip netns exec {netns} iperf3 \"$@\"",
                procs.display()
            ))
            .arg("sh")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }
}

impl Drop for TempCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// One transfer at a time: the ports and the two cores are shared.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn assert_task(task: Option<&Task>, pid: u32, cgroup: &TempCgroup, what: &str) {
    let task = task.unwrap_or_else(|| panic!("{what}: no task"));
    assert_eq!(task.tgid, pid, "{what}: {task:?}");
    assert_eq!(task.comm, "iperf3", "{what}: {task:?}");
    assert_eq!(
        task.cgroup.as_deref(),
        Some(cgroup.path.as_str()),
        "{what}: {task:?}"
    );
}

/// Lets a process [`TempCgroup::spawn_in`] started go on.
fn go(child: &mut Child) {
    let mut stdin = child.stdin.take().expect("a gated child");
    stdin.write_all(b"go\n").unwrap();
}

/// `iperf3 -s -1 -p PORT` in the receiver's namespace, in `cgroup`, listening.
fn server(lab: &Lab, cgroup: &TempCgroup, port: u16) -> Killed {
    let netns = lab.receiver_netns().name();
    let mut server = Killed(cgroup.spawn_in(netns, &["-s", "-1", "-p", &port.to_string()]));
    go(&mut server.0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ss::is_listening(netns, port).unwrap() {
        assert!(
            Instant::now() < deadline,
            "iperf3 -s -p {port} not listening"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// Traces (with the filters `filters` makes of the clients' pids, to the
/// lab's receiver) while an iperf3 client in each cgroup of `clients` sends
/// to its port for a second, all at once; the report, its cgroups named,
/// and the clients' pids.
fn traced_clients(
    lab: &Lab,
    filters: impl FnOnce(&[u32]) -> Filters,
    clients: &[(&TempCgroup, u16)],
    extra: &[&str],
) -> (Report, Vec<u32>) {
    let receiver = lab.receiver_ip().to_string();
    let mut running: Vec<Child> = clients
        .iter()
        .map(|(cgroup, port)| {
            let port = port.to_string();
            let mut args = vec!["-c", &receiver, "-p", &port, "-t", "1"];
            args.extend(extra);
            cgroup.spawn_in(lab.sender_netns().name(), &args)
        })
        .collect();
    let pids: Vec<u32> = running.iter().map(Child::id).collect();
    let mut tracer = Tracer::start(&TracerOptions {
        filters: Filters {
            addr: Some(lab.receiver_ip().into()),
            ..filters(&pids)
        },
        ..TracerOptions::default()
    })
    .unwrap();
    running.iter_mut().for_each(go);
    let mut analysis = Analysis::new(AnalysisConfig::default());
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let clients = s.spawn(|| {
            for client in running {
                let out = client.wait_with_output().unwrap();
                assert!(out.status.success(), "iperf3 -c failed");
            }
            std::thread::sleep(Duration::from_millis(200));
            done.store(true, Ordering::SeqCst);
        });
        Collector::new()
            .run(
                &mut tracer,
                &done,
                Some(Instant::now() + Duration::from_secs(30)),
                &mut Callbacks(
                    |r: &[u8]| analysis.push(&Event::decode(r).unwrap()).for_each(drop),
                    |_: &CollectStats| {},
                ),
            )
            .unwrap();
        clients.join().unwrap();
    });
    let mut report = analysis.finish(Provenance::default());
    // Named while the cgroups exist, as a live `watch` or `record` does.
    report.resolve_cgroups(&os::cgroup_paths(&report.cgroup_ids()));
    (report, pids)
}

#[test]
fn sockets_and_alerts_name_the_process_and_cgroup_that_use_them() {
    if !common::require_root("attribution_lab") {
        return;
    }
    let _serial = serial();
    let me = std::process::id();
    let (server_cg, client_cg) = (
        TempCgroup::new(&format!("tt-attr-{me}-server")),
        TempCgroup::new(&format!("tt-attr-{me}-client")),
    );
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let receiver = format!("{}:", lab.receiver_ip());
    let server = server(&lab, &server_cg, 5201);
    // A 4 KiB socket buffer at both ends: windows small enough to alert on.
    let clients = [(&client_cg, 5201)];
    let (report, pids) = traced_clients(&lab, |_| Filters::default(), &clients, &["-w", "4K"]);
    let (server_pid, client_pid) = (server.0.id(), pids[0]);
    drop(server);

    let mut ends = BTreeSet::new();
    for flow in report.flows.iter().filter(|f| f.src.starts_with(&receiver)) {
        // The server's sockets: each read by iperf3 -s in its cgroup
        // (the control connection is written too).
        assert_task(
            flow.tasks.reader.as_ref(),
            server_pid,
            &server_cg,
            &flow.src,
        );
        ends.insert("server");
    }
    for flow in report.flows.iter().filter(|f| f.dst.starts_with(&receiver)) {
        assert_task(
            flow.tasks.writer.as_ref(),
            client_pid,
            &client_cg,
            &flow.src,
        );
        ends.insert("client");
    }
    let names: Vec<_> = report.flows.iter().map(|f| &f.src).collect();
    assert_eq!(ends.len(), 2, "{names:?}");
    let alerts: Vec<_> = report.flows.iter().flat_map(|f| &f.alerts).collect();
    for alert in &alerts {
        let (pid, cgroup) = match alert.flow.starts_with(&receiver) {
            true => (server_pid, &server_cg),
            false => (client_pid, &client_cg),
        };
        assert_task(alert.process.as_ref(), pid, cgroup, &alert.flow);
    }
    println!(
        "{} sockets named by process and cgroup, {} alerts",
        report.flows.len(),
        alerts.len()
    );
}

/// Two clients, each in its own cgroup, send at once: `--pid` of one keeps
/// its sockets alone, `--cgroup` of the other the other's.
#[test]
fn task_filters_keep_only_that_processs_flows() {
    if !common::require_root("attribution_lab") {
        return;
    }
    let _serial = serial();
    let me = std::process::id();
    let cgroups = [
        TempCgroup::new(&format!("tt-filter-{me}-server")),
        TempCgroup::new(&format!("tt-filter-{me}-a")),
        TempCgroup::new(&format!("tt-filter-{me}-b")),
    ];
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let clients = [(&cgroups[1], 5201), (&cgroups[2], 5202)];
    let kept = |task: &dyn Fn(&[u32]) -> TaskFilter, keep: usize, sample_every: u32| {
        let _servers = [
            server(&lab, &cgroups[0], 5201),
            server(&lab, &cgroups[0], 5202),
        ];
        let filters = |pids: &[u32]| Filters {
            task: task(pids),
            sample_every,
            ..Filters::default()
        };
        let (report, pids) = traced_clients(&lab, filters, &clients, &[]);
        let (cgroup, port) = clients[keep];
        let flows: Vec<_> = report.flows.iter().filter(|f| !f.src.is_empty()).collect();
        // Its control and data connections, from its side only; sampled, the
        // control connection's few bytes may lie in no kept block.
        assert!(
            flows.len() >= if sample_every == 1 { 2 } else { 1 },
            "{flows:?}"
        );
        for flow in &flows {
            assert!(
                flow.dst.ends_with(&format!(":{port}")),
                "{} -> {}",
                flow.src,
                flow.dst
            );
            // Sampled, a socket whose kept bytes it only read (the control
            // connection's results) has no writer named.
            if sample_every == 1 || flow.tasks.writer.is_some() {
                assert_task(flow.tasks.writer.as_ref(), pids[keep], cgroup, &flow.src);
            }
        }
        assert!(flows.iter().any(|f| f.tasks.writer.is_some()), "{flows:?}");
        println!("kept {} sockets of client {keep}", flows.len());
    };
    let by_pid = |pids: &[u32]| TaskFilter {
        pid: Some(pids[0]),
        ..TaskFilter::default()
    };
    kept(&by_pid, 0, 1);
    let by_cgroup = |_: &[u32]| TaskFilter {
        cgroup: Some(cgroups[2].path.clone()),
        ..TaskFilter::default()
    };
    kept(&by_cgroup, 1, 1);
    // Sampled by bytes, the filter still learns the flow at every write,
    // and the writer is named at the writes sampling keeps.
    kept(&by_pid, 0, 64);
}

/// `stages` with a task filter: two clients send at once, one a known
/// amount (`iperf3 -n`, paced so that the VM's blind bursts, see
/// `UNSEEN_BY_THE_KERNEL`, cost few bytes), the other as much as it can for
/// a second; with
/// `--pid` or `--cgroup` of the first, the bytes the in-kernel stages count
/// leaving the sender are that amount (and its headers and ACKs), not the
/// other's gigabytes.
#[test]
fn stages_with_a_task_filter_count_only_that_processs_bytes() {
    if !common::require_root("attribution_lab") {
        return;
    }
    let _serial = serial();
    let me = std::process::id();
    let cgroups = [
        TempCgroup::new(&format!("tt-stages-{me}-server")),
        TempCgroup::new(&format!("tt-stages-{me}-a")),
        TempCgroup::new(&format!("tt-stages-{me}-b")),
    ];
    let lab = Lab::new(&LabConfig::default()).unwrap();
    let receiver = lab.receiver_ip().to_string();
    const SENT: u64 = 20 << 20;
    let counted = |task: &dyn Fn(u32) -> TaskFilter| {
        let _servers = [
            server(&lab, &cgroups[0], 5201),
            server(&lab, &cgroups[0], 5202),
        ];
        let netns = lab.sender_netns().name();
        let mut known = cgroups[1].spawn_in(
            netns,
            &["-c", &receiver, "-p", "5201", "-n", "20M", "-b", "160M"],
        );
        let mut other = cgroups[2].spawn_in(netns, &["-c", &receiver, "-p", "5202", "-t", "1"]);
        let tracer = StageTracer::start(&Filters {
            addr: Some(lab.receiver_ip().into()),
            task: task(known.id()),
            ..Filters::default()
        })
        .unwrap();
        go(&mut known);
        go(&mut other);
        for client in [known, other] {
            let out = client.wait_with_output().unwrap();
            assert!(out.status.success(), "iperf3 -c failed");
        }
        std::thread::sleep(Duration::from_millis(200));
        let summary = StagesSummary::of(&tracer.read().unwrap());
        let marks: Vec<_> = tracer
            .plan()
            .attached()
            .map(|p| p.hook.clone())
            .filter(|h| h.contains("sendmsg") || h.contains("copy_datagram"))
            .collect();
        assert_eq!(marks.len(), 2, "{marks:?}");
        let bytes = |name: &str| summary.hooks.iter().find(|h| h.hook == name).unwrap().bytes;
        bytes("net_dev_queue")
    };
    let by_pid = |pid: u32| TaskFilter {
        pid: Some(pid),
        ..TaskFilter::default()
    };
    let by_cgroup = |_: u32| TaskFilter {
        cgroup: Some(cgroups[1].path.clone()),
        ..TaskFilter::default()
    };
    for (what, task) in [
        ("--pid", &by_pid as &dyn Fn(u32) -> TaskFilter),
        ("--cgroup", &by_cgroup),
    ] {
        let queued = counted(task);
        println!("{what}: {queued} B queued for {SENT} B sent");
        // Measured: 21.00 MB, the headers of ~500 skbs and the ACKs over.
        let least = SENT - (SENT as f64 * common::UNSEEN_BY_THE_KERNEL) as u64;
        assert!(
            (least..SENT + SENT / 50).contains(&queued),
            "{what}: {queued} B counted at net_dev_queue for {SENT} B sent"
        );
    }
}
