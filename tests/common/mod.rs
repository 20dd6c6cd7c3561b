//! Shared by the integration tests.

#[allow(dead_code)]
pub mod perf;

/// Sets its flag when dropped, also when a panic unwinds past it: a
/// collector or transfer that a thread scope waits for then stops, where
/// the test would hang with its panic untold.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub struct SetOnDrop<'a>(pub &'a std::sync::atomic::AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Root-only tests call this first. On a developer's unprivileged run it says
/// why the test does nothing and returns false; under CI (`CI` set) a missing
/// privilege is a failure, never a silent skip.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn require_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: CI must run the real-kernel tests as root"
    );
    eprintln!("{test}: skipped: needs root (BPF, network namespaces)");
    false
}

/// 20 `window_adv` events of one socket (198.18.0.2:5001 -> .1:40000, cookie
/// 4242), 1 ms apart, each offering 26844 = 3 x 8948 (the paper's clamped
/// window): input for file and JSON tests that need no kernel.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn clamped_windows() -> Vec<tenge_trace::event::Event> {
    use tenge_trace::event::{abi_addr, tt_hdr, tt_window_adv, Body, Event};
    let (family, saddr) = abi_addr("198.18.0.2".parse().unwrap());
    let (_, daddr) = abi_addr("198.18.0.1".parse().unwrap());
    (0..20u32)
        .map(|i| {
            let hdr = tt_hdr {
                ts_ns: 1_000_000 * u64::from(i),
                sock_cookie: 4242,
                family,
                saddr,
                daddr,
                sport: 5001,
                dport: 40000,
                ..Default::default()
            };
            let body = tt_window_adv {
                seq: 1,
                ack: 1000 + i * 8948,
                window: 26844,
                win_raw: 26844,
                rcv_mss: 8948,
                advmss: 8948,
                ..Default::default()
            };
            Event::new(hdr, Body::WindowAdv(body))
        })
        .collect()
}

/// A fresh directory of this test process, removed with what is in it when
/// dropped (also when the test fails).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub struct TempDir(std::path::PathBuf);

#[allow(dead_code)]
impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tt-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Records that may come after later ones were handed on: the collector
/// holds records until the flush before a drain finds no journey begun
/// before them still open, less a margin of 2 ms; a vCPU the host takes
/// away from a program mid-journey for longer can leave its record behind
/// (seen once: 1 of 1450, 111 us late, in the 6.12 guest while the host
/// built). One in a thousand, and one; an ordering that fails does more.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn assert_few_late(late: u64, records: u64, what: &str) {
    assert!(
        late <= 1 + records / 1000,
        "{what}: {late} of {records} records came after later ones"
    );
}

/// How far a traced count may fall short of the interface counters. Now and
/// then, in bursts of a few ms on one CPU, the kernel does not run an
/// attached tp_btf program for a tracepoint that fires: `perf stat -e
/// net:net_dev_start_xmit` counts every packet the veth counts, the
/// program's bpf_stats run count is short by as many packets as its events,
/// and no recursion miss is recorded. Seen on this VM at up to 2.8% of a
/// 2900-packet transfer (usually 0), never on packets the programs ran for:
/// every submitted record arrives, and every early return was accounted for.
/// Also covers the handful of packets veth counts that are not the
/// transfer's TCP (IPv6 neighbour and router discovery).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub const UNSEEN_BY_THE_KERNEL: f64 = 0.05;

#[allow(dead_code)]
pub fn relative_error(got: u64, want: u64) -> f64 {
    (got as f64 - want as f64).abs() / want as f64
}

/// 4 MiB paced at 200 Mbit/s (~2900 packets in 170 ms; the reader keeps up,
/// so latencies are those of the stack rather than of a queue that fills at
/// random, and comparable between runs), one MSS per skb (`gso_max_segs 1`):
/// every skb is one wire packet.
#[allow(dead_code)]
pub fn paced_one_segment_skbs() -> tenge_trace::lab::LabConfig {
    tenge_trace::lab::LabConfig {
        bytes: 4 << 20,
        gso_max_segs: Some(1),
        max_pacing_rate: Some(25_000_000),
        ..tenge_trace::lab::LabConfig::default()
    }
}

/// Fails with every error of `json` against `schema/NAME` (one that refers
/// to no other file).
#[allow(dead_code)]
pub fn assert_matches_schema(name: &str, json: &serde_json::Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(if env!("CARGO_PKG_NAME") == "tenge-trace" {
            ""
        } else {
            ".."
        })
        .join("schema")
        .join(name);
    let schema: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    jsonschema::meta::validate(&schema).expect("a valid JSON Schema");
    let errors: Vec<String> = jsonschema::validator_for(&schema)
        .unwrap()
        .iter_errors(json)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:#?}");
}

/// Packet counters of one interface (`ip -s -j link show`).
#[allow(dead_code)]
#[derive(Clone, Copy, Debug, Default)]
pub struct LinkPackets {
    pub rx: u64,
    pub tx: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
}

/// What `ip ARGS` prints as JSON; it must succeed.
#[allow(dead_code)]
fn ip_json(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("ip runs");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[allow(dead_code)]
pub fn link_packets(netns: &str, iface: &str) -> LinkPackets {
    let json = ip_json(&["-n", netns, "-s", "-j", "link", "show", "dev", iface]);
    let stats = &json[0]["stats64"];
    let count = |dir: &str, field: &str| stats[dir][field].as_u64().expect("a counter");
    LinkPackets {
        rx: count("rx", "packets"),
        tx: count("tx", "packets"),
        rx_dropped: count("rx", "dropped"),
        tx_dropped: count("tx", "dropped"),
    }
}

/// The TCP counters of `netns`, by nstat (absolute, its history file left
/// alone).
#[allow(dead_code)]
pub fn nstat(netns: &str) -> std::collections::BTreeMap<String, u64> {
    let json = ip_json(&["netns", "exec", netns, "nstat", "-asz", "--json"]);
    let counters = json["kernel"].as_object().expect("nstat's kernel counters");
    counters
        .iter()
        .map(|(name, n)| (name.clone(), n.as_u64().expect("a count")))
        .collect()
}

/// What joins a lab's namespaces in the tests that can run over either:
/// `TT_LAB_LINK` (`veth`, or `nic:SND,RCV` in the kernel matrix's two-NIC
/// guest), veth by default.
#[allow(dead_code)]
pub fn lab_link() -> tenge_trace::lab::Link {
    std::env::var("TT_LAB_LINK").map_or(tenge_trace::lab::Link::Veth, |link| {
        link.parse().unwrap_or_else(|e| panic!("TT_LAB_LINK: {e}"))
    })
}

/// Hits of `kind`'s probe that ran no program, as a run's hit counters
/// (perf against bpf_stats, `TracerOptions::count_hits`) saw them; `None`
/// when hits were not counted.
#[allow(dead_code)]
pub fn hits_not_run(run: &tenge_trace::lab::traced::TracedRun, kind: &str) -> Option<u64> {
    not_run(&run.plan, run.hook_hits.as_deref()?, kind)
}

/// The same of a tracer counting hits, once its probes detached.
#[allow(dead_code)]
pub fn hits_not_run_of(tracer: &tenge_trace::probe::Tracer, kind: &str) -> u64 {
    let hits = tracer.hook_hits().expect("hits counted");
    not_run(tracer.plan(), hits, kind).expect("the probe attached")
}

#[allow(dead_code)]
fn not_run(
    plan: &tenge_trace::probe::ProbePlan,
    hits: &[tenge_trace::probe::HookHits],
    kind: &str,
) -> Option<u64> {
    let probe = plan.attached().find(|p| p.kind == kind)?;
    let counted = hits.iter().find(|h| h.program == probe.program);
    Some(counted.expect("the probe's hits").not_run())
}
