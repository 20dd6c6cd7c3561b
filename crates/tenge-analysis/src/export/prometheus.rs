//! Live metrics for Prometheus: `watch --prometheus ADDR:PORT` serves the
//! OpenMetrics text format on `/metrics`.
//!
//! The watch loop builds a [`Snapshot`] of the analyses once per collector
//! tick and [`MetricsServer::publish`](super::metrics_server::MetricsServer::publish)es it; the server encodes the
//! latest snapshot on each scrape (prometheus-client, through a registry
//! [`Collector`]). The per-event path takes no lock.
//!
//! Cardinality is bounded: per-flow series (labels `src`, `dst`, `cookie`,
//! and `comm` and `cgroup` of the socket's process, "" until the trace names it)
//! exist for the `top_flows` busiest open sockets by bytes sent + received,
//! and the other open sockets are summed into one series whose labels are all
//! `"other"`. Closed sockets (last state seen `TCP_CLOSE`) leave the per-flow
//! series, which then go stale as Prometheus expects of finished things; the
//! global series keep counting them, after `watch` retired them too. A
//! socket that moves between the top and `other` makes the `other` counters
//! step, which Prometheus reads as a counter reset; the global series have no
//! such step.
//!
//! Every name starts with `tenge_trace_`:
//!
//! | series | type | labels |
//! |---|---|---|
//! | `flow_transferred_bytes_total` | counter | flow, `direction` (sent, received) |
//! | `flow_window_limited_seconds_total` | counter | flow, `cause` (rwnd, cwnd, sndbuf, app) |
//! | `flow_advertised_windows_total`, `flow_mss_rounded_windows_total` | counter | flow |
//! | `flow_mss_rounding_lost_bytes_total` | counter | flow |
//! | `flow_window_rounding_loss_ratio` | gauge | flow (top flows only) |
//! | `flow_sws_stalls_total`, `flow_sws_stall_seconds_total` | counter | flow |
//! | `flow_sws_stalled` | gauge | flow (0/1; for `other`, how many) |
//! | `flow_alert_active` | gauge | flow (top flows only), `kind` (the alerts' kinds; 0/1) |
//! | `flow_limited_ratio` | gauge | flow (top flows only), `cause` (rwnd, cwnd, sndbuf, app, unlimited: the report's shares) |
//! | `window_limited_seconds_total` | counter | `cause` |
//! | `mss_rounding_lost_bytes_total`, `sws_stalls_total`, `sws_stall_seconds_total` | counter | |
//! | `sws_stalled_flows`, `flows` | gauge | |
//! | `stage_latency_seconds` | histogram | `direction`, `stage` |
//! | `events_total`, `events_lost_total` | counter | `kind` (lost only) |
//! | `probes_attached`, `probes_failed` | gauge | |
//! | `build_info` | gauge (1) | `version`, `abi` |
//! | `probe_attached` | gauge | `hook`, `kind`, `backend` |
//!
//! Limited time is busy time only (data queued or in flight): rwnd and sndbuf
//! from the kernel's chrono counters where the trace carries them (the
//! figures `report` shows), cwnd and app from the per-event analysis; so
//! `rate(...limited_seconds_total[1m])` is the share of wall time a flow
//! spent waiting on that cause. Stage latencies count sampled
//! packets (`--sample N` is not scaled in).

use crate::analysis::paths::StageLatency;
use crate::analysis::window::{ActiveAlerts, AlertKind, LimitFractions, LimitTimes, LiveWindow};
use crate::analysis::Analysis;
use crate::plan::ProbePlan;
use crate::task::Task;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{text, DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

/// The default `--prometheus-flows`.
pub const DEFAULT_TOP_FLOWS: usize = 20;

/// Upper bounds of the stage latency buckets, ns: 1-2.5-5 steps from 1 µs to 1 s.
pub const LATENCY_BOUNDS_NS: [u64; 19] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// `PORT` (on 127.0.0.1) or `ADDR:PORT`.
pub fn parse_listen_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    s.parse().map_err(|_| {
        format!("{s:?}: expected PORT or ADDR:PORT (e.g. 9464, 0.0.0.0:9464, [::1]:9464)")
    })
}

/// The figures of one flow, or summed over several.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowFigures {
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub limited: LimitTimes,
    pub advertised_windows: u64,
    pub mss_rounded_windows: u64,
    pub mss_rounding_bytes_lost: u64,
    /// One flow's recent rounding loss (see [`LiveWindow`]); None for sums.
    pub rounding_loss: Option<f64>,
    pub sws_stalls: u64,
    pub sws_stall_ns: u64,
    /// Flows in an SWS stall now.
    pub stalled_flows: u64,
    /// One flow's running alert episodes; None for sums.
    pub alerting: Option<ActiveAlerts>,
    /// One flow's limit shares, as `report` gives them; None for sums.
    pub limit_shares: Option<LimitFractions>,
}

impl FlowFigures {
    fn of(bytes_sent: u64, bytes_received: u64, window: Option<&LiveWindow>) -> FlowFigures {
        let w = window.copied().unwrap_or_default();
        FlowFigures {
            bytes_sent,
            bytes_received,
            limited: w.limited,
            advertised_windows: w.advertised_count,
            mss_rounded_windows: w.mss_rounded_count,
            mss_rounding_bytes_lost: w.mss_rounding_bytes_lost,
            rounding_loss: w.recent_rounding_loss,
            sws_stalls: w.sws_stalls,
            sws_stall_ns: w.sws_stall_ns,
            stalled_flows: u64::from(w.stalled),
            alerting: window.map(|w| w.alerting),
            limit_shares: window.and_then(|w| w.limit_shares),
        }
    }

    fn add(&mut self, other: &FlowFigures) {
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
        self.limited.add(&other.limited);
        self.advertised_windows += other.advertised_windows;
        self.mss_rounded_windows += other.mss_rounded_windows;
        self.mss_rounding_bytes_lost += other.mss_rounding_bytes_lost;
        self.rounding_loss = None;
        self.sws_stalls += other.sws_stalls;
        self.sws_stall_ns += other.sws_stall_ns;
        self.stalled_flows += other.stalled_flows;
    }

    fn limited_by_cause(&self) -> [(&'static str, u64); 4] {
        let l = &self.limited;
        [
            ("rwnd", l.rwnd_ns),
            ("cwnd", l.cwnd_ns),
            ("sndbuf", l.sndbuf_ns),
            ("app", l.app_ns),
        ]
    }
}

/// One of the busiest flows.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowSeries {
    pub src: String,
    pub dst: String,
    pub cookie: String,
    /// The process (`comm`) the socket belongs to, "" when not known.
    pub comm: String,
    /// Its cgroup's id, and path once named ([`Snapshot::name_cgroups`]).
    pub cgroup_id: u64,
    pub cgroup: String,
    pub figures: FlowFigures,
}

/// Everything one scrape shows.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The busiest flows, busiest first.
    pub flows: Vec<FlowSeries>,
    /// The other flows, summed; None when there are none.
    pub other: Option<FlowFigures>,
    /// All flows, summed.
    pub total: FlowFigures,
    pub tracked_flows: usize,
    pub stages: Vec<StageLatency>,
    /// Events recorded, and events the kernel could not queue by kind name.
    pub events: u64,
    pub events_lost: BTreeMap<String, u64>,
    pub probes: ProbePlan,
}

impl Snapshot {
    /// Names the flows' cgroups (`name` looks an id up, None when unknown).
    pub fn name_cgroups(&mut self, mut name: impl FnMut(u64) -> Option<String>) {
        for flow in self.flows.iter_mut().filter(|f| f.cgroup_id != 0) {
            flow.cgroup = name(flow.cgroup_id).unwrap_or_default();
        }
    }

    /// The analyses' figures so far; `events` and `events_lost` come from the collector.
    pub fn of(
        analysis: &Analysis,
        top_flows: usize,
        events: u64,
        events_lost: BTreeMap<String, u64>,
        probes: &ProbePlan,
    ) -> Snapshot {
        let windows: HashMap<u64, LiveWindow> = analysis
            .window()
            .live_flows()
            .map(|w| (w.sock_cookie, w))
            .collect();
        let owners: HashMap<u64, &Task> = analysis.window().owners().collect();
        let mut snapshot = Snapshot {
            tracked_flows: analysis.flows().len(),
            stages: analysis.paths().stage_latencies(&LATENCY_BOUNDS_NS),
            events,
            events_lost,
            probes: probes.clone(),
            ..Snapshot::default()
        };
        let mut open = 0;
        for flow in analysis.flows().flows() {
            let figures = FlowFigures::of(
                flow.bytes_sent,
                flow.bytes_received,
                windows.get(&flow.sock_cookie),
            );
            snapshot.total.add(&figures);
            // A listening socket (its ends unknown: no peer) moves no data
            // and has no window: not a flow to show, the tool's own
            // /metrics listener included.
            if flow.is_closed() || flow.dst.ends_with(":0") {
                continue;
            }
            open += 1;
            if open <= top_flows {
                let owner = owners.get(&flow.sock_cookie);
                snapshot.flows.push(FlowSeries {
                    src: flow.src.clone(),
                    dst: flow.dst.clone(),
                    cookie: flow.sock_cookie.to_string(),
                    comm: owner.map_or(String::new(), |t| t.comm.clone()),
                    cgroup_id: owner.map_or(0, |t| t.cgroup_id),
                    cgroup: String::new(),
                    figures,
                });
            } else {
                snapshot
                    .other
                    .get_or_insert_with(FlowFigures::default)
                    .add(&figures);
            }
        }
        // Retired sockets stay in the totals, which are counters.
        if let Some(retired) = analysis.retired_totals() {
            snapshot.total.add(&FlowFigures::of(
                retired.bytes_sent,
                retired.bytes_received,
                Some(&retired.window),
            ));
        }
        snapshot
    }

    /// Every flow series with its labels: the busiest flows, then `other`.
    fn per_flow(&self) -> impl Iterator<Item = (Labels<'_>, &FlowFigures)> + '_ {
        let top = self.flows.iter().map(|f| {
            (
                vec![
                    ("src", &*f.src),
                    ("dst", &*f.dst),
                    ("cookie", &*f.cookie),
                    ("comm", &*f.comm),
                    ("cgroup", &*f.cgroup),
                ],
                &f.figures,
            )
        });
        let other = self.other.iter().map(|figures| {
            (
                vec![
                    ("src", "other"),
                    ("dst", "other"),
                    ("cookie", "other"),
                    ("comm", "other"),
                    ("cgroup", "other"),
                ],
                figures,
            )
        });
        top.chain(other)
    }

    fn encode(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        self.encode_flows(enc)?;
        self.encode_totals(enc)?;
        self.encode_tool(enc)
    }

    /// The per-flow families (top flows and `other`).
    fn encode_flows(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        family(
            enc,
            "flow_transferred",
            "TCP payload bytes the socket sent and received",
            Some(&Unit::Bytes),
            self.per_flow().flat_map(|(labels, f)| {
                [("sent", f.bytes_sent), ("received", f.bytes_received)]
                    .map(|(direction, n)| (with(&labels, ("direction", direction)), counter(n)))
            }),
        )?;
        family(
            enc,
            "flow_window_limited",
            "Busy time the sender waited on the receive window, the congestion window, the send buffer or the application",
            Some(&Unit::Seconds),
            self.per_flow().flat_map(|(labels, f)| {
                f.limited_by_cause()
                    .map(|(cause, ns)| (with(&labels, ("cause", cause)), seconds(ns)))
            }),
        )?;
        family(
            enc,
            "flow_advertised_windows",
            "Windows the socket advertised (segments sent outside the handshake)",
            None,
            self.per_flow()
                .map(|(l, f)| (l, counter(f.advertised_windows))),
        )?;
        family(
            enc,
            "flow_mss_rounded_windows",
            "Advertised windows rounded down to a multiple of rcv_mss (no window scaling)",
            None,
            self.per_flow()
                .map(|(l, f)| (l, counter(f.mss_rounded_windows))),
        )?;
        family(
            enc,
            "flow_mss_rounding_lost",
            "Free receive space left out of advertised windows by MSS rounding, summed over windows",
            Some(&Unit::Bytes),
            self.per_flow().map(|(l, f)| (l, counter(f.mss_rounding_bytes_lost))),
        )?;
        family(
            enc,
            "flow_window_rounding_loss_ratio",
            "Share of free receive space the latest 32 advertised windows lost to MSS rounding, wscale alignment or the 65535 clamp",
            None,
            self.per_flow()
                .filter_map(|(l, f)| Some((l, ConstGauge::new(f.rounding_loss?)))),
        )?;
        family(
            enc,
            "flow_sws_stalls",
            "Silly-window stalls: window below one MSS with data waiting (the one in progress included)",
            None,
            self.per_flow().map(|(l, f)| (l, counter(f.sws_stalls))),
        )?;
        family(
            enc,
            "flow_sws_stall",
            "Time in silly-window stalls",
            Some(&Unit::Seconds),
            self.per_flow().map(|(l, f)| (l, seconds(f.sws_stall_ns))),
        )?;
        family(
            enc,
            "flow_limited_ratio",
            "Share of the flow's busy time limited by each cause, the figures of report's limits (rwnd and sndbuf the kernel's chrono where traced; they sum to 1; top flows only)",
            None,
            self.per_flow().flat_map(|(labels, f)| {
                f.limit_shares.into_iter().flat_map(move |s| {
                    [
                        ("rwnd", s.rwnd),
                        ("cwnd", s.cwnd),
                        ("sndbuf", s.sndbuf),
                        ("app", s.app),
                        ("unlimited", s.unlimited),
                    ]
                    .map(|(cause, share)| (with(&labels, ("cause", cause)), ConstGauge::new(share)))
                })
            }),
        )?;
        family(
            enc,
            "flow_alert_active",
            "1 while an episode of the alert kind runs on the flow: from watch's ALERT line to its CLEARED line or the socket's close (top flows only)",
            None,
            self.per_flow().flat_map(|(labels, f)| {
                f.alerting.into_iter().flat_map(move |active| {
                    AlertKind::ALL.map(|kind| {
                        let value = ConstGauge::new(i64::from(active.contains(kind)));
                        (with(&labels, ("kind", kind.name())), value)
                    })
                })
            }),
        )?;
        family(
            enc,
            "flow_sws_stalled",
            "1 while the flow is in a silly-window stall (for other: how many are)",
            None,
            self.per_flow()
                .map(|(l, f)| (l, ConstGauge::new(f.stalled_flows as i64))),
        )?;
        Ok(())
    }

    /// All flows together, and the stage latencies.
    fn encode_totals(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let total = &self.total;
        family(
            enc,
            "window_limited",
            "Busy time of all flows limited by each cause",
            Some(&Unit::Seconds),
            total
                .limited_by_cause()
                .map(|(cause, ns)| (vec![("cause", cause)], seconds(ns))),
        )?;
        single(
            enc,
            "mss_rounding_lost",
            "Free receive space all flows' advertised windows lost to MSS rounding",
            Some(&Unit::Bytes),
            counter(total.mss_rounding_bytes_lost),
        )?;
        single(
            enc,
            "sws_stalls",
            "Silly-window stalls of all flows",
            None,
            counter(total.sws_stalls),
        )?;
        single(
            enc,
            "sws_stall",
            "Time all flows spent in silly-window stalls",
            Some(&Unit::Seconds),
            seconds(total.sws_stall_ns),
        )?;
        single(
            enc,
            "sws_stalled_flows",
            "Flows in a silly-window stall now",
            None,
            ConstGauge::new(total.stalled_flows as i64),
        )?;
        single(
            enc,
            "flows",
            "Sockets tracked",
            None,
            ConstGauge::new(self.tracked_flows as i64),
        )?;
        family(
            enc,
            "stage_latency",
            "Time sampled packets spent in each stage of the stack, all flows",
            Some(&Unit::Seconds),
            self.stages.iter().map(|s| {
                (
                    vec![("direction", s.direction), ("stage", s.stage)],
                    StageHistogram(s),
                )
            }),
        )?;
        Ok(())
    }

    /// The tool itself: events read and lost, probes attached.
    fn encode_tool(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        let abi = crate::abi::TT_ABI_VERSION.to_string();
        family(
            enc,
            "build_info",
            "1, labelled with the version of tenge-trace and of its event ABI",
            None,
            std::iter::once((
                vec![
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("abi", abi.as_str()),
                ],
                ConstGauge::new(1),
            )),
        )?;
        single(
            enc,
            "events",
            "Events read from the ring buffer",
            None,
            counter(self.events),
        )?;
        family(
            enc,
            "events_lost",
            "Events the kernel could not queue (ring buffer full), by kind",
            None,
            // Every kind from the start, at 0 until one is lost: a counter
            // that first appears at N is invisible to rate() and increase().
            // Pauses are the collector's records, never the kernel's to lose.
            (0..=u8::MAX)
                .filter_map(crate::event::kind_name)
                .filter(|&kind| kind != "pause")
                .map(|kind| {
                    let lost = self.events_lost.get(kind).copied().unwrap_or(0);
                    (vec![("kind", kind)], counter(lost))
                }),
        )?;
        let attached = self.probes.attached().count();
        single(
            enc,
            "probes_attached",
            "Probes attached",
            None,
            ConstGauge::new(attached as i64),
        )?;
        single(
            enc,
            "probes_failed",
            "Probes no backend could attach on this kernel",
            None,
            ConstGauge::new((self.probes.probes.len() - attached) as i64),
        )?;
        let backends: Vec<String> = self
            .probes
            .probes
            .iter()
            .map(|p| {
                p.backend.map_or(String::new(), |b| {
                    serde_json::to_value(b)
                        .ok()
                        .and_then(|v| v.as_str().map(String::from))
                        .unwrap_or_default()
                })
            })
            .collect();
        family(
            enc,
            "probe_attached",
            "1 if the probe is attached (backend: the hook flavour it runs on)",
            None,
            self.probes
                .probes
                .iter()
                .zip(&backends)
                .map(|(p, backend)| {
                    (
                        vec![
                            ("hook", p.hook.as_str()),
                            ("kind", p.kind.as_str()),
                            ("backend", backend.as_str()),
                        ],
                        ConstGauge::new(i64::from(p.backend.is_some())),
                    )
                }),
        )
    }
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// `labels` and one more.
fn counter(n: u64) -> ConstCounter<u64> {
    ConstCounter::new(n)
}

fn seconds(ns: u64) -> ConstCounter<f64> {
    ConstCounter::new(ns as f64 / 1e9)
}

fn with<'a>(labels: &Labels<'a>, extra: (&'static str, &'a str)) -> Labels<'a> {
    labels.iter().copied().chain([extra]).collect()
}

/// One metric family: its descriptor, then one sample set per label set.
fn family<'a, M: EncodeMetric + TypedMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    series: impl IntoIterator<Item = (Labels<'a>, M)>,
) -> fmt::Result {
    let mut metric = enc.encode_descriptor(name, help, unit, M::TYPE)?;
    for (labels, m) in series {
        m.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A metric family of one series without labels.
fn single<M: EncodeMetric + TypedMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: M,
) -> fmt::Result {
    metric.encode(enc.encode_descriptor(name, help, unit, M::TYPE)?)
}

/// A stage's latencies as a classic histogram, in seconds.
struct StageHistogram<'a>(&'a StageLatency);

impl TypedMetric for StageHistogram<'_> {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for StageHistogram<'_> {
    fn encode(&self, mut encoder: MetricEncoder) -> fmt::Result {
        let s = self.0;
        let bounds = LATENCY_BOUNDS_NS
            .iter()
            .map(|&ns| ns as f64 / 1e9)
            .chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds.zip(s.buckets.iter().copied()).collect();
        encoder.encode_histogram::<Labels>(s.sum_ns as f64 / 1e9, s.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The registry's view of the latest snapshot.
#[derive(Debug)]
struct Published(Arc<Mutex<Snapshot>>);

impl Collector for Published {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .encode(&mut encoder)
    }
}

pub(super) fn registry(snapshot: Arc<Mutex<Snapshot>>) -> Registry {
    let mut registry = Registry::with_prefix("tenge_trace");
    registry.register_collector(Box::new(Published(snapshot)));
    registry
}

/// The OpenMetrics text of a snapshot.
/// The Prometheus text format 0.0.4 of an OpenMetrics text, for scrapers
/// that do not ask for OpenMetrics (promtool, curl, older agents): counter
/// families are named with their `_total` samples' name, and the `# UNIT`
/// and `# EOF` lines, which 0.0.4 lacks, go.
pub fn text_004(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let family = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(family.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

pub fn render(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    text::encode(&mut out, &registry(Arc::new(Mutex::new(snapshot.clone()))))
        .expect("writing to a String does not fail");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::AnalysisConfig;
    use crate::event::{abi_addr, tt_hdr, tt_state, tt_window_adv, Body, Event};

    /// A segment of `len` bytes from 198.18.0.1:`sport` to 198.18.0.2:5201.
    fn segment(cookie: u64, sport: u16, ts_ns: u64, len: u32) -> Event {
        let (family, saddr) = abi_addr("198.18.0.1".parse().unwrap());
        let (_, daddr) = abi_addr("198.18.0.2".parse().unwrap());
        let hdr = tt_hdr {
            ts_ns,
            sock_cookie: cookie,
            family,
            saddr,
            daddr,
            sport,
            dport: 5201,
            ..Default::default()
        };
        let body = tt_window_adv {
            len,
            window: 14480,
            rcv_mss: 1448,
            ..Default::default()
        };
        Event::new(hdr, Body::WindowAdv(body))
    }

    /// Four sockets sending 3000, 2000, 1000 and 500 bytes; the busiest one closed.
    fn analysis() -> Analysis {
        let mut analysis = Analysis::new(AnalysisConfig::default());
        for (cookie, bytes) in [(11, 3000), (12, 2000), (13, 1000), (14, 500)] {
            let sport = 40000 + cookie as u16;
            analysis.push(&segment(cookie, sport, cookie * 10, bytes));
            analysis.push(&segment(cookie, sport, cookie * 10 + 1, 0));
        }
        let mut close = segment(11, 40011, 200, 0);
        close.body = Body::State(tt_state {
            oldstate: 4,
            newstate: crate::event::tcp_state::CLOSE,
            ..Default::default()
        });
        analysis.push(&close);
        analysis
    }

    /// A listening socket (no peer: its ends are 0.0.0.0:0) gets no series,
    /// even among fewer flows than the top allows.
    #[test]
    fn a_listener_is_no_flow_series() {
        let mut analysis = Analysis::new(AnalysisConfig::default());
        analysis.push(&segment(21, 40021, 10, 1000));
        let (family, _) = abi_addr("0.0.0.0".parse().unwrap());
        let listen = Event::new(
            tt_hdr {
                ts_ns: 20,
                sock_cookie: 22,
                family,
                ..Default::default()
            },
            Body::State(tt_state {
                oldstate: crate::event::tcp_state::CLOSE,
                newstate: 10,
                ..Default::default()
            }),
        );
        analysis.push(&listen);
        let snapshot = Snapshot::of(&analysis, 20, 2, BTreeMap::new(), &ProbePlan::default());
        let cookies: Vec<&str> = snapshot.flows.iter().map(|f| f.cookie.as_str()).collect();
        assert_eq!(cookies, ["21"]);
        assert_eq!(snapshot.tracked_flows, 2);
    }

    #[test]
    fn top_open_flows_get_series_and_the_rest_one_other() {
        let lost = BTreeMap::from([("tcp_rcv".to_string(), 4)]);
        let snapshot = Snapshot::of(&analysis(), 2, 9, lost, &ProbePlan::default());
        // 11 is closed: 12 and 13 are the busiest open flows, 14 is "other".
        let cookies: Vec<&str> = snapshot.flows.iter().map(|f| f.cookie.as_str()).collect();
        assert_eq!(cookies, ["12", "13"]);
        assert_eq!(snapshot.flows[0].src, "198.18.0.1:40012");
        assert_eq!(snapshot.other.as_ref().map(|o| o.bytes_sent), Some(500));
        assert_eq!(snapshot.total.bytes_sent, 6500);
        // Two windows per socket (the state event is not one).
        assert_eq!(snapshot.total.advertised_windows, 8);
        assert_eq!(snapshot.tracked_flows, 4);
        assert_eq!(snapshot.stages.len(), 8);

        let text = render(&snapshot);
        for line in [
            "# TYPE tenge_trace_flow_transferred_bytes counter",
            "tenge_trace_flow_transferred_bytes_total{src=\"198.18.0.1:40012\",dst=\"198.18.0.2:5201\",cookie=\"12\",comm=\"\",cgroup=\"\",direction=\"sent\"} 2000",
            "tenge_trace_flow_transferred_bytes_total{src=\"other\",dst=\"other\",cookie=\"other\",comm=\"other\",cgroup=\"other\",direction=\"sent\"} 500",
            "tenge_trace_flow_advertised_windows_total{src=\"other\",dst=\"other\",cookie=\"other\",comm=\"other\",cgroup=\"other\"} 2",
            "tenge_trace_window_limited_seconds_total{cause=\"rwnd\"} 0.0",
            "tenge_trace_flows 4",
            "tenge_trace_events_total 9",
            "tenge_trace_events_lost_total{kind=\"tcp_rcv\"} 4",
            // Kinds with none lost are there too, at 0, for rate() to see the first loss.
            "tenge_trace_events_lost_total{kind=\"window_adv\"} 0",
            "tenge_trace_stage_latency_seconds_bucket{le=\"1.0\",direction=\"rx\",stage=\"read\"} 0",
            "tenge_trace_stage_latency_seconds_bucket{le=\"+Inf\",direction=\"tx\",stage=\"tcp\"} 0",
            "tenge_trace_probes_failed 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("cookie=\"11\""));
        let build = format!(
            "tenge_trace_build_info{{version=\"{}\",abi=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            crate::abi::TT_ABI_VERSION
        );
        assert!(text.lines().any(|l| l == build), "{build} missing");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn text_004_names_counter_families_by_their_samples() {
        let openmetrics = "# HELP x_bytes Bytes.\n# TYPE x_bytes counter\n# UNIT x_bytes bytes\n\
                           x_bytes_total{a=\"1\"} 5\n# HELP y Now.\n# TYPE y gauge\ny 2\n# EOF\n";
        assert_eq!(
            text_004(openmetrics),
            "# HELP x_bytes_total Bytes.\n# TYPE x_bytes_total counter\n\
             x_bytes_total{a=\"1\"} 5\n# HELP y Now.\n# TYPE y gauge\ny 2\n"
        );
    }

    #[test]
    fn listen_addr_defaults_to_loopback() {
        assert_eq!(
            parse_listen_addr("9464"),
            Ok("127.0.0.1:9464".parse().unwrap())
        );
        assert_eq!(
            parse_listen_addr("0.0.0.0:9100"),
            Ok("0.0.0.0:9100".parse().unwrap())
        );
        assert_eq!(
            parse_listen_addr("[::1]:9464"),
            Ok("[::1]:9464".parse().unwrap())
        );
        assert!(parse_listen_addr("localhost").is_err());
        assert!(parse_listen_addr("70000").is_err());
    }
}
