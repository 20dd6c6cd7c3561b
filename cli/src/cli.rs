//! Argument definitions.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use tenge_trace::probe::CpuProfile;

#[derive(Parser, Debug)]
#[command(
    name = "tenge-trace",
    version = crate::cmd::VERSION,
    about = "eBPF TCP path profiler: per-packet stage costs, MSS-aligned window clamping and SWS stalls",
    long_about = "tenge-trace follows TCP packets through the Linux stack with eBPF tracepoints \
(device, NAPI/GRO, TCP send and receive, window selection) and tells where time goes and \
what limits the window: MSS-rounded advertised windows, silly-window-syndrome stalls, \
receive-window, congestion-window and send-buffer limits.\n\n\
Typical use:\n  tenge-trace check                  # can this kernel do it?\n  \
tenge-trace lab --scenario mss-clamp  # built-in namespace pair with a real transfer\n  \
tenge-trace record -o t.ttr --port 5201 -- iperf3 -c HOST\n  \
tenge-trace report t.ttr\n  tenge-trace watch --port 5201\n  \
tenge-trace stages --interval 10    # in-kernel stage latencies, cheap enough to leave on"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Colour alerts, warnings, advice and titles: when standard output (or
    /// error) is a terminal and NO_COLOR is unset (auto), always, or never.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "auto",
        value_name = "WHEN"
    )]
    pub color: ColorChoice,
    /// Print tables as wide as they are instead of wrapping them to the
    /// terminal's width (or $COLUMNS).
    #[arg(long, global = true)]
    pub wide: bool,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check the kernel: release, BTF, privileges, which hook families load, and the probe plan.
    Check {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Record per-packet events to a trace file.
    Record(RecordArgs),
    /// Stage latencies and per-hook packet counts aggregated in the kernel: no record per packet, cheap enough to leave running.
    Stages(StagesArgs),
    /// Print the events of a trace file, one per line.
    Dump(DumpArgs),
    /// Analyse a trace file: window pathologies, limits and path costs.
    Report(ReportArgs),
    /// Two recordings side by side (before and after a change): throughput,
    /// limit shares, window losses, stalls, path counts and stage costs.
    Diff(DiffArgs),
    /// Trace live and alert as flows become window-limited, clamped or stalled.
    Watch(WatchArgs),
    /// Render a path-cost (or CPU) flamegraph from a trace file.
    Flamegraph(FlamegraphArgs),
    /// Write a recording in a format others' tools open: pcapng (Wireshark,
    /// tshark), perfetto (ui.perfetto.dev, chrome://tracing), text (perf script-like).
    Export(ExportArgs),
    /// Run a real TCP transfer between two fresh network namespaces and trace it.
    Lab(LabArgs),
    /// Measure the overhead of tracing side by side with no tracing, bpftrace and tcpdump (root).
    #[cfg(feature = "bench")]
    Bench(BenchArgs),
    /// Write the man pages and shell completions (bash, zsh, fish) into a directory.
    #[command(hide = true)]
    GenDocs {
        #[arg(long, value_name = "DIR", default_value = "target/docs")]
        out: PathBuf,
    },
}

#[derive(Args, Debug, Clone)]
pub struct FilterArgs {
    #[command(flatten)]
    pub flow: FlowFilterArgs,
    /// Keep 1 in N blocks of 16 KiB of each flow's sequence space, with every event that handles
    /// their bytes (so every stage of a kept packet is seen); lifecycle events are all kept, NAPI polls 1 in N per CPU.
    /// Path counts and bytes are scaled by N; windows are those of the kept segments, so no advice
    /// is given (use --slice, or every packet, for every window).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub sample: u32,
    /// With --sample N: trace every packet of 1 in N slices of this much time (e.g. 20ms),
    /// at a random position in each run of N, instead of 1 in N blocks of sequence space;
    /// between slices the probes are detached and cost nothing.
    #[arg(long, value_name = "TIME", value_parser = value::duration)]
    pub slice: Option<std::time::Duration>,
    /// Ring buffer size in MiB (a power of two).
    #[arg(long, value_name = "MIB", default_value_t = 16, value_parser = value::ring_mib)]
    pub ring_mib: u32,
    #[command(flatten)]
    pub journeys: JourneyArgs,
}

/// Only the flows of some processes, applied in the kernel: a socket counts
/// from the first write or read by a matching task (its handshake is not kept).
#[derive(Args, Debug, Clone)]
pub struct TaskFilterArgs {
    /// Only sockets written or read by this process (its PID as the host sees it).
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Only sockets written or read by tasks of this command name (as in /proc/PID/comm).
    #[arg(long, value_name = "NAME")]
    pub comm: Option<String>,
    /// Only sockets written or read by tasks in this cgroup v2 (or below it),
    /// e.g. /system.slice/nginx.service.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
}

#[derive(Args, Debug, Clone, Copy)]
pub struct JourneyArgs {
    /// Have every hook send its own record to the ring at once, instead of one record per
    /// packet journey (the hops of one skb on one CPU) gathered with the CPU's others into
    /// batches: the same events at a higher cost, for checking.
    #[arg(long)]
    pub per_hook: bool,
}

/// Which connections and packets count, applied in the kernel.
#[derive(Args, Debug, Clone)]
pub struct FlowFilterArgs {
    /// Only connections with this local or remote port.
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Only connections with this local or remote address.
    #[arg(long, value_name = "IP")]
    pub addr: Option<IpAddr>,
    /// Only this network namespace (a name from `ip netns list`); default: all.
    #[arg(long, value_name = "NAME", value_parser = value::netns)]
    pub netns: Option<String>,
    #[command(flatten)]
    pub task: TaskFilterArgs,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Trace file to write (`-`: standard output). Written as FILE.partial
    /// (mode 0600) and renamed when finished; a recorder killed outright
    /// leaves FILE.partial, which `report` reads up to its last flush.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub filters: FilterArgs,
    /// Stop after this long: seconds, or with a unit (500ms, 2m, 1h) (default: until the command exits or Ctrl-C).
    #[arg(long, value_name = "TIME", value_parser = value::duration)]
    pub duration: Option<std::time::Duration>,
    /// Also sample kernel and user stacks on every CPU (perf_event, cpu-clock).
    #[arg(long)]
    pub cpu_profile: bool,
    /// Sampling frequency for --cpu-profile.
    #[arg(long, value_name = "HZ", default_value_t = 99, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub cpu_hz: u64,
    /// Stacks each of the kernel and user stack tables of --cpu-profile holds (about 1 KiB
    /// each, in kernel memory while recording). A stack whose slot another holds is lost:
    /// its sample is drawn as [kernel_stack_lost] or [user_stack_lost] and counted.
    #[arg(long, value_name = "STACKS", default_value_t = CpuProfile::DEFAULT_STACKS, requires = "cpu_profile",
          value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    pub stack_storage: u32,
    /// Also count each hooked tracepoint's hits (perf) against its program's runs (bpf_stats,
    /// held on by a BPF_ENABLE_STATS descriptor while recording; no sysctl is written), to
    /// report the hits the kernel ran no program for, which no lost count can see. Costs every
    /// hit more. Not with --slice (between slices the hooks fire with no program attached).
    #[arg(long, conflicts_with = "slice")]
    pub count_hits: bool,
    /// Store the kernel's addresses (skb, napi, drop location) as they are.
    /// By default each is replaced by an opaque identifier keyed by a secret
    /// of the recording: the analyses need only identity, and addresses in a
    /// file handed around would defeat KASLR.
    #[arg(long)]
    pub keep_kernel_pointers: bool,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
    /// Command to run while recording; recording stops when it exits.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct StagesArgs {
    #[command(flatten)]
    pub filters: FlowFilterArgs,
    /// Also print each interval's table this often: seconds, or with a unit (default: only the totals at the end).
    #[arg(long, value_name = "TIME", value_parser = value::duration)]
    pub interval: Option<std::time::Duration>,
    /// With --slice: count in 1 of every N slices of time (N > 1).
    #[arg(long, value_name = "N", requires = "slice", value_parser = clap::value_parser!(u32).range(2..))]
    pub sample: Option<u32>,
    /// With --sample N: count every packet of 1 in N slices of this much time (e.g. 20ms), at a
    /// random position in each run of N; between slices the programs are detached and cost
    /// nothing. Counts are scaled by the time elapsed over the time counted; latencies are those
    /// of the packets counted. Not with --interval (an interval may hold no slice).
    #[arg(long, value_name = "TIME", requires = "sample", conflicts_with = "interval", value_parser = value::duration)]
    pub slice: Option<std::time::Duration>,
    /// Stop after this long: seconds, or with a unit (500ms, 2m, 1h) (default: until the command exits or Ctrl-C).
    #[arg(long, value_name = "TIME", value_parser = value::duration)]
    pub duration: Option<std::time::Duration>,
    /// Also write the totals and the intervals as JSON to FILE (`-`: stdout; the tables and the command's output then go to stderr).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Command to run while counting; counting stops when it exits.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// A recording to read.
#[derive(Args, Debug)]
pub struct TraceInput {
    /// The recording (`-`: standard input).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Refuse a truncated or damaged recording (exit 2) instead of reading it
    /// up to its last whole block with a warning.
    #[arg(long)]
    pub strict: bool,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The recording before the change.
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,
    /// The recording after it.
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,
    /// Refuse a truncated or damaged recording (exit 2) instead of reading
    /// it up to its last whole block with a warning.
    #[arg(long)]
    pub strict: bool,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct DumpArgs {
    #[command(flatten)]
    pub input: TraceInput,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Only events of these kinds (e.g. window_adv, tcp_rcv); repeatable.
    #[arg(long, value_name = "KIND")]
    pub kind: Vec<String>,
    /// Only events of this socket cookie.
    #[arg(long, value_name = "COOKIE")]
    pub flow: Option<u64>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub input: TraceInput,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub alerts: AlertArgs,
    #[command(flatten)]
    pub retire: RetireArgs,
}

/// Retiring sockets that closed or went silent: their state is finished into
/// their report rows and freed, so a long trace's memory stays bounded.
/// `watch` retires by default; `report` when one of these is given.
#[derive(Args, Debug, Clone)]
pub struct RetireArgs {
    /// Retire a socket with no event for this long (closed sockets go after
    /// 1 s without one); 0: only closed ones. Default when retiring: 300.
    #[arg(long, value_name = "SECS")]
    pub flow_idle: Option<f64>,
    /// Retired sockets the final report shows (those with window findings
    /// first, then the busiest); the others are summed into its totals.
    /// Default when retiring: 1000.
    #[arg(long, value_name = "N")]
    pub flow_rows: Option<usize>,
}

#[derive(Args, Debug, Clone)]
pub struct AlertArgs {
    /// A condition must last this long before it is an alert, and be gone
    /// this long before its alert is cleared.
    #[arg(long, value_name = "MS", default_value_t = AlertArgs::default().min_duration)]
    pub min_duration: u64,
    /// Alert when the loss or the limited fraction exceeds this percentage.
    #[arg(long, value_name = "PCT", default_value_t = AlertArgs::default().threshold, value_parser = value::percent)]
    pub threshold: f64,
}

/// The library's defaults: `report`, `watch`, `lab` and the replay bench
/// alert alike.
impl Default for AlertArgs {
    fn default() -> Self {
        let window = tenge_trace::analysis::window::WindowConfig::default();
        AlertArgs {
            min_duration: window.min_duration_ns / 1_000_000,
            threshold: window.threshold_pct,
        }
    }
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    pub filters: FilterArgs,
    #[command(flatten)]
    pub alerts: AlertArgs,
    #[command(flatten)]
    pub retire: RetireArgs,
    /// Alerts and the summary as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Exit (status 3) at the first alert.
    #[arg(long)]
    pub exit_on_alert: bool,
    /// Stop after this long: seconds, or with a unit (500ms, 2m, 1h) (default: until Ctrl-C).
    #[arg(long, value_name = "TIME", value_parser = value::duration)]
    pub duration: Option<std::time::Duration>,
    /// Serve Prometheus metrics (text format, or OpenMetrics when asked) on http://ADDR:PORT/metrics
    /// (https with a TLS web config); a port alone listens on 127.0.0.1.
    #[arg(long, value_name = "ADDR:PORT", value_parser = tenge_trace::export::prometheus::parse_listen_addr)]
    pub prometheus: Option<SocketAddr>,
    /// Who may scrape, and over what: a Prometheus exporter-toolkit web
    /// config (the file node_exporter's --web.config.file takes):
    /// `basic_auth_users` (users and bcrypt hashes of their passwords) and
    /// `tls_server_config` (cert_file, key_file; client_ca_file with
    /// client_auth_type RequireAndVerifyClientCert for client certificates).
    #[arg(long, value_name = "FILE", requires = "prometheus")]
    pub prometheus_web_config: Option<PathBuf>,
    /// Per-flow metric series for the N busiest flows (by bytes); the rest are summed into one "other" series.
    #[arg(long, value_name = "N", default_value_t = tenge_trace::export::prometheus::DEFAULT_TOP_FLOWS, requires = "prometheus")]
    pub prometheus_flows: usize,
}

#[derive(Args, Debug)]
pub struct FlamegraphArgs {
    #[command(flatten)]
    pub input: TraceInput,
    /// Output file (SVG, or folded stacks with --folded; `-`: standard output).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: PathBuf,
    /// Write folded stacks instead of an SVG.
    #[arg(long)]
    pub folded: bool,
    /// Only this socket cookie.
    #[arg(long, value_name = "COOKIE")]
    pub flow: Option<u64>,
    /// Where the CPU time went (needs a recording made with --cpu-profile).
    #[arg(long)]
    pub cpu: bool,
    /// Only one direction: time spent waiting to send dwarfs the receive
    /// path, so each is easier to read alone.
    #[arg(long, value_name = "tx|rx", conflicts_with = "cpu")]
    pub direction: Option<Direction>,
    /// Weight path stacks by time in ns (also in --folded output), instead
    /// of giving each direction half the width (parts per million of its
    /// time), where seconds of waiting to send leave the receive path a sliver.
    #[arg(long, conflicts_with = "cpu")]
    pub absolute: bool,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub input: TraceInput,
    /// pcapng: one packet per TCP segment at the device layer, headers rebuilt
    /// (no payload), stage times in packet comments. perfetto: Chrome trace
    /// events, the hooks on per-CPU tracks, each packet's stages as spans and
    /// the advertised window as a counter per flow. text: one line per event
    /// with its Unix time (UTC).
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// pcapng: write a segment on every traced interface it crossed (a veth
    /// pair, a bridge), as `tcpdump -i any` does, not only where it was seen
    /// first (Wireshark takes the later sightings for retransmissions).
    #[arg(long)]
    pub every_interface: bool,
    /// Output file (`-`: standard output).
    #[arg(short = 'o', long, value_name = "FILE", default_value = "-")]
    pub output: PathBuf,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum ExportFormat {
    Pcapng,
    Perfetto,
    Text,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum Direction {
    Tx,
    Rx,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum ReaderKind {
    Fast,
    Slow,
}

#[derive(Args, Debug)]
pub struct LabArgs {
    /// A named scenario (its settings can be overridden by the flags below).
    #[arg(long, value_name = "NAME")]
    pub scenario: Option<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    pub list: bool,
    /// What joins the two namespaces: `veth` (a veth pair the lab creates),
    /// or `nic:SENDER,RECEIVER`: two NICs of this host cabled to each other,
    /// lent to the namespaces for the run and given back after (a real
    /// driver: its NAPI polls, GRO and TX completions).
    #[arg(long, value_name = "veth|nic:SND,RCV", default_value = "veth")]
    pub link: tenge_trace::lab::Link,
    /// MTU of the link, both ends.
    #[arg(long, value_name = "N")]
    pub mtu: Option<u32>,
    /// Generic receive offload on the receiver's interface (ethtool -K gro).
    #[arg(long, value_name = "on|off")]
    pub gro: Option<OnOff>,
    /// SO_RCVBUF of the receiver, set before listen().
    #[arg(long, value_name = "BYTES")]
    pub rcvbuf: Option<u32>,
    /// TCP window scaling in the receiver's namespace.
    #[arg(long, value_name = "on|off")]
    pub window_scaling: Option<OnOff>,
    /// How the receiver reads: at once, or slowly (SWS stalls).
    #[arg(long)]
    pub reader: Option<ReaderKind>,
    /// Bytes to transfer.
    #[arg(long, value_name = "N")]
    pub bytes: Option<u64>,
    /// Transfer over IPv6 (fd74:7400::/48) instead of IPv4 (198.18.0.0/15).
    #[arg(long)]
    pub ipv6: bool,
    /// Drop every N-th TCP skb carrying data at the receiver's interface (a
    /// segment, or a TSO skb that veth hands over whole; a tc program on its
    /// ingress, per CPU): a lossy path, with its retransmits and out-of-order
    /// queueing, where the kernel has no netem.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..))]
    pub drop_every: Option<u32>,
    /// Also keep the recording (as FILE.partial until the transfer is done).
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Keep 1 in N blocks of 16 KiB of sequence space (see `record --sample`).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub sample: u32,
    #[command(flatten)]
    pub journeys: JourneyArgs,
    #[command(flatten)]
    pub alerts: AlertArgs,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

/// A part of `tenge-trace bench`.
#[cfg(feature = "bench")]
#[derive(Copy, Clone, Debug, ValueEnum, PartialEq, Eq)]
pub enum BenchPart {
    /// Bulk and small-segment transfers: untraced, tenge-trace full and 1/64, bpftrace, tcpdump.
    Throughput,
    /// In-kernel ns per event of each program (bpf_stats), minus an empty program on the same hook.
    KernelCost,
    /// The highest event rate held with zero loss, and the collector's CPU at that rate.
    MaxRate,
    /// The collector alone replaying a synthesized 10k-flow trace: events/s per core, peak memory.
    Replay,
}

#[cfg(feature = "bench")]
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Short runs and 2 repetitions, for development: the numbers are rough.
    #[arg(long)]
    pub quick: bool,
    /// Run only these parts (repeatable); default: all.
    #[arg(long, value_name = "PART")]
    pub only: Vec<BenchPart>,
    /// Repetitions of each mode, interleaved (default 5; 2 with --quick).
    #[arg(long, value_name = "N")]
    pub reps: Option<u32>,
    /// Throughput: run only these modes (repeatable; untraced always runs,
    /// as every ratio is to it); default: all.
    #[arg(long, value_name = "MODE")]
    pub mode: Vec<crate::cmd::bench::Mode>,
    /// Throughput: run only these workloads (repeatable); default: all.
    #[arg(long, value_name = "WORKLOAD")]
    pub workload: Vec<crate::cmd::bench::Workload>,
    /// Where the results go as JSON.
    #[arg(long, value_name = "FILE", default_value = "bench/results.json")]
    pub json: PathBuf,
    /// Where the results go as a Markdown table.
    #[arg(long, value_name = "FILE", default_value = "BENCHMARKS.md")]
    pub markdown: PathBuf,
    /// The bpftrace script to compare with (its $1 is the port to filter on).
    #[arg(long, value_name = "FILE", default_value = "bench/equivalent.bt")]
    pub bpftrace_script: PathBuf,
    /// Measure nothing: render the Markdown again from the JSON results file.
    #[arg(long)]
    pub render_only: bool,
    /// Internal: replay FILE and print the result as JSON (run as a child, so
    /// that the parent can read its peak memory).
    #[arg(long, value_name = "FILE", hide = true)]
    pub replay_only: Option<PathBuf>,
}

/// Values checked as they are parsed: a bad one is refused (exit 2) before
/// any probe is attached or any file touched.
pub mod value {
    use std::time::Duration;

    const YEAR_S: f64 = 365.0 * 86400.0;

    /// A span of time: seconds (`1.5`), or with a unit (`500ms`, `2s`, `5m`,
    /// `1h`); finite, above 0, at most a year.
    pub fn duration(text: &str) -> Result<Duration, String> {
        let t = text.trim();
        let (number, unit_s) = [
            ("ms", 1e-3),
            ("us", 1e-6),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .iter()
        .find_map(|&(unit, s)| t.strip_suffix(unit).map(|n| (n, s)))
        .unwrap_or((t, 1.0));
        let value: f64 = number.trim().parse().map_err(|_| {
            format!("{text:?} is not a time: give seconds, or a number with ms, s, m or h")
        })?;
        let secs = value * unit_s;
        if !secs.is_finite() || secs <= 0.0 || secs > YEAR_S {
            return Err(format!("{text:?}: must be more than 0 and at most a year"));
        }
        Ok(Duration::from_secs_f64(secs))
    }

    /// A percentage: finite, 0 to 100.
    pub fn percent(text: &str) -> Result<f64, String> {
        let value: f64 = text
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a number"))?;
        if !(0.0..=100.0).contains(&value) {
            return Err(format!("{text:?}: must be from 0 to 100"));
        }
        Ok(value)
    }

    /// Ring buffer MiB: a power of two from 1 to 1024.
    pub fn ring_mib(text: &str) -> Result<u32, String> {
        let value: u32 = text
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a whole number"))?;
        if !value.is_power_of_two() || value > 1024 {
            return Err(format!("{text:?}: must be a power of two from 1 to 1024"));
        }
        Ok(value)
    }

    /// A network namespace that `ip netns list` shows.
    pub fn netns(text: &str) -> Result<String, String> {
        if text.is_empty() || text.contains('/') || text == "." || text == ".." {
            return Err(format!(
                "{text:?} is not a namespace name (one of `ip netns list`)"
            ));
        }
        if !std::path::Path::new("/run/netns").join(text).exists() {
            return Err(format!(
                "no network namespace {text:?} (`ip netns list` shows the names)"
            ));
        }
        Ok(text.to_string())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn times_take_units_and_refuse_what_is_not_one() {
            assert_eq!(duration("1.5"), Ok(Duration::from_millis(1500)));
            assert_eq!(duration("1s"), Ok(Duration::from_secs(1)));
            assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
            assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
            assert_eq!(duration("1h"), Ok(Duration::from_secs(3600)));
            for bad in ["nan", "inf", "1e20", "-1", "0", "", "1 fortnight", "-inf"] {
                assert!(duration(bad).is_err(), "{bad}");
            }
        }

        #[test]
        fn numbers_out_of_range_are_refused() {
            assert!(percent("nan").is_err() && percent("101").is_err() && percent("-1").is_err());
            assert_eq!(percent("12.5"), Ok(12.5));
            assert!(ring_mib("4096").is_err() && ring_mib("3").is_err() && ring_mib("0").is_err());
            assert_eq!(ring_mib("64"), Ok(64));
            for bad in ["", "../../etc/passwd", "..", "a/b", "tt-no-such-namespace"] {
                assert!(netns(bad).is_err(), "{bad}");
            }
        }
    }
}
