//! Per-packet path profiling, after MAGNET (Feng et al., SC'03 §3.2): for a
//! sample of packets, which path each took through the stack, what each
//! stage of that path cost, and what sent packets down the slower paths.
//!
//! Stages (hop → next hop):
//! - TX: `tcp` (sendmsg wrote the bytes → their segment at net_dev_queue),
//!   `qdisc` (→ net_dev_start_xmit), `driver` (→ net_dev_xmit).
//! - RX: `napi` (driver entry → netif_receive_skb: GRO/backlog wait),
//!   `ip_tcp` (→ tcp_rcv; includes the socket backlog wait), `tcp_queue`
//!   (→ data_ready; out-of-order data waits here), `socket_queue`
//!   (→ copy_datagram: waiting for the application), `read` (→ the read returns).
//!
//! Paths: TX by why TCP held the segment (see [`stats::TX`]); RX by GRO
//! merge, direct vs backlog, and order (see [`stats::RX`]).
//!
//! Identity: flows by [`FlowKey`] (device events have no cookie), bytes by
//! 32-bit sequence ranges; skb addresses only break ties within one hop.
//! With 1-in-N sampling the kernel keeps whole blocks of sequence space
//! ([`crate::event::sampled_range`]): every event that handles a kept byte,
//! packet or socket call, is kept. A packet counts when one byte of it is
//! kept (TX: a segment's first, RX: a unit's last; see tx and rx), which
//! happens with probability 1/N whatever its size, so the kept packets are an
//! unbiased sample of the latencies; counts are scaled by N in the report.

mod report;
mod rx;
pub mod stats;
#[cfg(test)]
mod tests;
mod tx;

pub(crate) use report::aligned;
pub use report::{Coverage, Evictions, FlowPaths, NapiStats, PathEntry, PathReport, StageStats};

pub(crate) use super::pauses::{Pauses, Turn};
use crate::event::{Body, Event, FlowKey};
use crate::flow::{place, prefetch, EventKey, KeyMap};
pub use stats::StageSpan;
use stats::{NapiAcc, PathTable, Recorder, DIRECTIONS};

pub use crate::event::{seq_after, seq_before};

#[derive(Clone, Debug)]
pub struct PathConfig {
    /// The rate the trace was sampled at (`Filters::sample_every`); 1: every event.
    pub sample_every: u32,
    /// Sampled by time slices of this many ns (`record --slice`), not by
    /// blocks of bytes: every byte of a traced slice was kept. Counts are
    /// scaled by `sample_every` all the same.
    pub sample_slice_ns: u64,
    /// A segment that leaves TCP later than this after its write was held.
    pub held_after_ns: u64,
    /// A packet that makes no progress inside the stack for this long is dropped.
    pub stale_ns: u64,
    /// The same for waits on the application or the peer (unread data,
    /// writes held by a closed window).
    pub app_wait_ns: u64,
    /// Flows tracked at all; events of further flows are counted and ignored.
    pub max_flows: usize,
    /// Flows with their own per-path breakdown (the first ones seen).
    pub max_flow_breakdown: usize,
    /// Packets (or writes) waiting at one hop of one flow.
    pub max_pending_per_flow: usize,
    /// Keep every stage measurement as a [`StageSpan`] (for timelines), to be
    /// taken with [`PathAnalyzer::take_spans`].
    pub spans: bool,
}

impl PathConfig {
    /// The defaults, for a recording sampled as `meta` says.
    pub fn of_recording(meta: &crate::trace_file::TraceMeta) -> PathConfig {
        PathConfig {
            sample_every: meta.sample_every.max(1),
            sample_slice_ns: meta.sample_slice_ns,
            ..PathConfig::default()
        }
    }

    /// The 1-in-N of the kernel's rule on bytes ([`sampled_byte`](crate::event::sampled_byte)):
    /// 1 when sampled by time, every byte of a slice kept.
    pub fn byte_every(&self) -> u32 {
        match self.sample_slice_ns {
            0 => self.sample_every,
            _ => 1,
        }
    }
}

impl Default for PathConfig {
    fn default() -> Self {
        PathConfig {
            sample_every: 1,
            sample_slice_ns: 0,
            held_after_ns: 50_000,
            stale_ns: 1_000_000_000,
            app_wait_ns: 60_000_000_000,
            max_flows: 4096,
            max_flow_breakdown: 64,
            max_pending_per_flow: 8192,
            spans: false,
        }
    }
}

/// One stage's latencies so far, merged over the paths of its direction and
/// counted into buckets: what a live histogram shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageLatency {
    pub direction: &'static str,
    pub stage: &'static str,
    /// Sampled packets measured (not scaled by `sample_every`), and the exact
    /// sum of their latencies.
    pub count: u64,
    pub sum_ns: u64,
    /// `buckets[i]`: latencies in `(bounds[i-1], bounds[i]]`; the last one,
    /// those above every bound. Values are placed to the histogram's 1 %.
    pub buckets: Vec<u64>,
}

/// Sampled packet counts for coverage, and evictions.
#[derive(Default)]
struct Counters {
    tx_packets: u64,
    tx_complete: u64,
    rx_packets: u64,
    rx_complete: u64,
    evictions: Evictions,
}

/// What a flow handler needs besides the flow itself.
struct Ctx<'a> {
    cfg: &'a PathConfig,
    rec: Recorder<'a>,
    counters: &'a mut Counters,
}

struct Flow {
    key: FlowKey,
    cookie: u64,
    table: Option<Box<PathTable>>,
    pending: Pending,
    /// Flows created before this one: orders the breakdowns in the report.
    created: u64,
    /// The flow table's sockets whose [`SocketHint`] names this flow.
    hinted: u32,
    /// A socket of this flow was retired: the flow is freed once no socket
    /// names it and nothing of it is in flight.
    closing: bool,
}

impl Flow {
    fn new(key: FlowKey, created: u64, breakdown: bool) -> Flow {
        Flow {
            key,
            cookie: 0,
            table: breakdown.then(Box::default),
            pending: Pending::default(),
            created,
            hinted: 0,
            closing: false,
        }
    }
}

/// A flow's packets in flight, per direction.
#[derive(Default)]
struct Pending {
    tx: tx::TxFlow,
    rx: rx::RxFlow,
}

impl Pending {
    fn is_settled(&self) -> bool {
        self.tx.is_settled() && self.rx.is_settled()
    }
}

/// The flow a socket's events with `key` go to: an index in
/// `PathAnalyzer::flows`, or [`OVER_CAP`]; [`NO_FLOW`] when not known.
#[derive(Clone, Copy)]
struct SocketHint {
    key: (u32, u64, u64),
    flow: u32,
}

impl Default for SocketHint {
    fn default() -> Self {
        SocketHint {
            key: (0, 0, 0),
            flow: NO_FLOW,
        }
    }
}

const NO_FLOW: u32 = u32::MAX;
/// The key of a free slot of `PathAnalyzer::flows`.
const UNKNOWN_KEY: FlowKey = FlowKey {
    netns: 0,
    local: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::UNSPECIFIED,
        0,
    )),
    remote: std::net::SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::UNSPECIFIED,
        0,
    )),
};
/// Not tracked: it was first seen after `max_flows` were.
const OVER_CAP: u32 = u32::MAX - 1;

/// Trace time between sweeps for stale packets.
const SWEEP_EVERY_NS: u64 = 100_000_000;

/// Incremental path analysis: [`push`](Self::push) events in time order,
/// live or from a recording, then [`finish`](Self::finish).
pub struct PathAnalyzer {
    cfg: PathConfig,
    flows: Vec<Flow>,
    index: KeyMap<usize>,
    /// The latest key looked up and its flow, if tracked: events come in
    /// runs per flow, and beyond `max_flows` most find none.
    last_flow: Option<(FlowKey, Option<usize>)>,
    /// By the flow table's socket number: the flow its events went to last.
    by_socket: Vec<SocketHint>,
    overall: PathTable,
    napi: Vec<NapiAcc>,
    counters: Counters,
    /// The first event's time and the latest (0: none yet), and the time
    /// paused between them (sampling by time).
    first_ns: u64,
    now_ns: u64,
    pauses: Pauses,
    next_sweep_ns: u64,
    /// Flows created so far; the first `max_flow_breakdown` get a breakdown.
    created: u64,
    /// Slots of `flows` freed after their sockets were retired.
    free: Vec<usize>,
    /// Breakdowns of the freed flows, by `created`.
    retired_rows: Vec<(u64, FlowPaths)>,
    /// Stage spans not yet taken, when the config keeps them.
    spans: Vec<StageSpan>,
}

impl Default for PathAnalyzer {
    fn default() -> Self {
        PathAnalyzer::new(PathConfig::default())
    }
}

impl PathAnalyzer {
    pub fn new(cfg: PathConfig) -> PathAnalyzer {
        let pauses = Pauses::sliced(cfg.sample_slice_ns);
        PathAnalyzer {
            cfg,
            flows: Vec::new(),
            index: KeyMap::default(),
            last_flow: None,
            by_socket: Vec::new(),
            overall: PathTable::default(),
            napi: Vec::new(),
            counters: Counters::default(),
            first_ns: 0,
            now_ns: 0,
            pauses,
            next_sweep_ns: 0,
            created: 0,
            free: Vec::new(),
            retired_rows: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// The stage spans recorded since the last call (none unless `cfg.spans`).
    pub fn take_spans(&mut self) -> Vec<StageSpan> {
        std::mem::take(&mut self.spans)
    }

    pub fn push(&mut self, ev: &Event) {
        match self.follow_pauses(ev) {
            Turn::Traced => self.push_keyed(ev, &EventKey::of(ev), None),
            Turn::Began => self.pause(),
            Turn::Skipped => {}
        }
    }

    /// Where `ev` stands against the pauses (sampling by time), which the
    /// caller then follows: [`push_keyed`](Self::push_keyed) a traced event,
    /// [`pause`](Self::pause) at a pause's beginning, nothing else. A pause's
    /// edges move the clock on: the time they cover counts in the scale.
    #[inline]
    pub(crate) fn follow_pauses(&mut self, ev: &Event) -> Turn {
        let turn = self.pauses.turn(ev);
        if turn != Turn::Traced && matches!(ev.body, Body::Pause(_)) && ev.hdr.ts_ns > self.now_ns {
            self.advance_clock(ev.hdr.ts_ns);
        }
        turn
    }

    /// The pauses so far.
    pub(crate) fn pauses(&self) -> Pauses {
        self.pauses
    }

    /// [`push`](Self::push) with the event's key computed by the caller, and
    /// the number of its socket in the flow table if known: the
    /// flow a socket's events went to last is remembered by that number.
    /// Inlined into [`Analysis::push`](crate::analysis::Analysis::push):
    /// most events find their flow untracked or have none, and then cost a
    /// few tests, not a call.
    #[inline(always)]
    pub(crate) fn push_keyed(&mut self, ev: &Event, key: &EventKey, socket: Option<usize>) {
        let ts = ev.hdr.ts_ns;
        if ts > self.now_ns {
            self.advance_clock(ts);
        }
        // Whether the event may start tracking a flow: the first data it sees.
        let create = match &ev.body {
            Body::Sendmsg(_) => true,
            Body::WindowAdv(b) => b.len > 0,
            Body::RxEntry(p) | Body::NetifReceive(p) => p.len > 0,
            Body::TcpRcv(b) => b.len > 0,
            Body::DevStartXmit(_)
            | Body::DevXmit(_)
            | Body::DataReady(_)
            | Body::CopyDatagram(_)
            | Body::AppRead(_) => false,
            Body::NapiPoll(p) => return self.napi_poll(p.ifindex, p.work, p.budget),
            Body::KfreeSkb(b) => return self.kfree_skb(ev, b.seq, b.len),
            Body::Pause(_) => return,
            Body::State(_) | Body::Retransmit(_) | Body::CpuSample(_) | Body::SockTask(_) => return,
        };
        // Device-layer packets name the flow by addresses ([`socket_key`]):
        // outgoing ones (start_xmit, xmit) from the sender's side, the rest
        // from the receiver's.
        let found = match (socket, key.v4) {
            (Some(s), Some(v4)) => self.flow_of_socket(s, v4, key, create),
            _ => key.full().and_then(|key| self.flow_index(key, create)),
        };
        if let Some(i) = found {
            self.on_flow_event(ev, i);
        }
    }

    /// Starts loading the flow table's socket `socket`'s hint.
    #[inline]
    pub(crate) fn prefetch(&self, socket: usize) {
        if let Some(hint) = self.by_socket.get(socket) {
            prefetch(hint);
        }
    }

    /// What the counts so far are multiplied by (see [`PathReport::scale`]).
    fn scale(&self) -> report::Scale {
        let every = f64::from(self.cfg.sample_every.max(1));
        let elapsed = self.now_ns.saturating_sub(self.first_ns);
        report::Scale(match self.cfg.sample_slice_ns {
            0 => every,
            _ => self
                .pauses
                .scale(self.cfg.sample_every, elapsed)
                .unwrap_or(every),
        })
    }

    /// Time moved on to `ts`: packets that made no progress for too long are swept now and then.
    #[inline(never)]
    fn advance_clock(&mut self, ts: u64) {
        if self.first_ns == 0 {
            self.first_ns = ts;
        }
        self.now_ns = ts;
        if ts >= self.next_sweep_ns {
            self.sweep();
            self.next_sweep_ns = ts + SWEEP_EVERY_NS;
        }
    }

    /// An event of the tracked flow `i`.
    #[inline(never)]
    fn on_flow_event(&mut self, ev: &Event, i: usize) {
        let (ts, skb, cpu) = (ev.hdr.ts_ns, ev.hdr.skb, ev.hdr.cpu);
        // A received skb can still carry the sending socket (veth keeps
        // skb->sk across namespaces): before TCP, the cookie is the peer's.
        let own_socket = !matches!(ev.body, Body::RxEntry(_) | Body::NetifReceive(_));
        if ev.hdr.sock_cookie != 0 && own_socket {
            self.flows[i].cookie = ev.hdr.sock_cookie;
        }
        let (f, mut ctx) = self.parts(i);
        let ctx = &mut ctx;
        match &ev.body {
            Body::Sendmsg(b) => f.tx.on_sendmsg(ts, b, ctx),
            Body::WindowAdv(b) => f.tx.on_queue(ts, skb, cpu, b, ctx),
            Body::DevStartXmit(p) => f.tx.on_start_xmit(ts, skb, cpu, p),
            Body::DevXmit(p) => f.tx.on_xmit(ts, skb, cpu, p, ctx),
            Body::RxEntry(p) => f.rx.on_entry(ts, p, ctx),
            Body::NetifReceive(p) => f.rx.on_netif_receive(ts, p, ctx),
            Body::TcpRcv(b) => {
                f.tx.on_ack(ts, b);
                f.rx.on_tcp_rcv(ts, b, ctx)
            }
            Body::DataReady(b) => f.rx.on_data_ready(ts, b),
            Body::CopyDatagram(b) => f.rx.on_copy(ts, b),
            Body::AppRead(b) => f.rx.on_app_read(ts, b, ctx),
            Body::NapiPoll(_)
            | Body::KfreeSkb(_)
            | Body::State(_)
            | Body::Retransmit(_)
            | Body::CpuSample(_)
            | Body::SockTask(_)
            | Body::Pause(_) => {}
        }
    }

    /// Nothing is traced for a while (sampling by time): the packets in
    /// flight will not be seen going on, so they end here, as at the end
    /// of a trace, counted apart.
    #[cold]
    pub(crate) fn pause(&mut self) {
        for i in 0..self.flows.len() {
            let (flow, mut ctx) = self.parts(i);
            let cut = flow.rx.drain(&mut ctx) + flow.tx.cut();
            ctx.counters.evictions.cut_by_pause += cut;
        }
    }

    pub fn finish(self) -> PathReport {
        self.finish_with_spans().0
    }

    /// [`finish`](Self::finish), and the spans not yet taken, those of the
    /// packets still in flight included.
    pub fn finish_with_spans(mut self) -> (PathReport, Vec<StageSpan>) {
        let scale = self.scale();
        for i in 0..self.flows.len() {
            let (flow, mut ctx) = self.parts(i);
            let in_flight = flow.rx.drain(&mut ctx) + flow.tx.in_flight();
            ctx.counters.evictions.in_flight_at_end += in_flight;
        }
        let mut rows = std::mem::take(&mut self.retired_rows);
        rows.extend(self.flows.iter().filter_map(|f| {
            let table = f.table.as_deref()?;
            Some((
                f.created,
                report::flow_paths(scale, &f.key, f.cookie, table),
            ))
        }));
        rows.sort_unstable_by_key(|&(created, _)| created);
        let report = report::build(
            &self.cfg,
            scale,
            &self.overall,
            rows.into_iter().map(|(_, row)| row).collect(),
            &self.napi,
            &self.counters,
        );
        (report, self.spans)
    }

    /// The flow table retired `socket` (with addresses `key`): its flow is
    /// freed at a sweep once no other socket names it and nothing of it is
    /// in flight, so the sweeps and the end of the trace count exactly what
    /// they would have had it stayed.
    pub(crate) fn retire(&mut self, socket: usize, key: &FlowKey) {
        if let Some(hint) = self.by_socket.get_mut(socket) {
            let named = std::mem::take(hint).flow;
            self.unhint(named);
        }
        if let Some(i) = self.index.get(key) {
            self.flows[i].closing = true;
        }
    }

    /// A socket hint no longer names `flow`.
    fn unhint(&mut self, flow: u32) {
        if flow < OVER_CAP {
            self.flows[flow as usize].hinted -= 1;
        }
    }

    /// Flow slots in use or free: the analyses' memory.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.flows.len()
    }

    /// Flows tracked now (freed ones not counted).
    fn tracked(&self) -> usize {
        self.flows.len() - self.free.len()
    }

    /// Frees closing flow `i`, keeping its breakdown for the report.
    fn free_flow(&mut self, i: usize) {
        let flow = std::mem::replace(&mut self.flows[i], Flow::new(UNKNOWN_KEY, u64::MAX, false));
        self.index.remove_if(&flow.key, &i);
        if self.last_flow.is_some_and(|(key, _)| key == flow.key) {
            self.last_flow = None;
        }
        if let Some(table) = flow.table {
            let row = report::flow_paths(self.scale(), &flow.key, flow.cookie, &table);
            self.retired_rows.push((flow.created, row));
        }
        self.free.push(i);
    }

    /// Every stage's latencies so far, over all flows, bucketed at
    /// `bounds_ns` (ascending). Cheap enough for once a second: it walks the
    /// recorded histogram buckets, nothing per packet.
    pub fn stage_latencies(&self, bounds_ns: &[u64]) -> Vec<StageLatency> {
        let mut out = Vec::new();
        for (dir, spec) in DIRECTIONS.iter().enumerate() {
            for (k, &stage) in spec.stages.iter().enumerate() {
                let mut latency = StageLatency {
                    direction: spec.name,
                    stage,
                    count: 0,
                    sum_ns: 0,
                    buckets: vec![0; bounds_ns.len() + 1],
                };
                for (_, acc) in self.overall.iter().filter(|(id, _)| id.dir as usize == dir) {
                    let s = &acc.stages[k];
                    latency.count += s.hist.len();
                    latency.sum_ns = latency.sum_ns.saturating_add(s.sum_ns);
                    for v in s.hist.iter_recorded() {
                        let value = s.hist.lowest_equivalent(v.value_iterated_to());
                        latency.buckets[bounds_ns.partition_point(|&b| b < value)] +=
                            u64::from(v.count_at_value());
                    }
                }
                out.push(latency);
            }
        }
        out
    }

    /// [`flow_index`](Self::flow_index) through the flow socket `socket`'s
    /// events with this key went to last (IPv4 keys: `compact`). Inlined:
    /// almost every event finds its flow so, in a test or two.
    #[inline(always)]
    fn flow_of_socket(
        &mut self,
        socket: usize,
        compact: (u32, u64, u64),
        key: &EventKey,
        create: bool,
    ) -> Option<usize> {
        match self.by_socket.get(socket) {
            Some(hint) if hint.key == compact => match hint.flow {
                NO_FLOW => {}
                OVER_CAP => {
                    // A flow not tracked once the cap was reached never is.
                    if create {
                        self.counters.evictions.events_over_flow_cap += 1;
                    }
                    return None;
                }
                i => return Some(i as usize),
            },
            _ => {}
        }
        self.hint_socket(socket, compact, key, create)
    }

    /// [`flow_of_socket`](Self::flow_of_socket) without a hint: looks the
    /// flow up by its key and leaves the hint for the socket's next events.
    #[inline(never)]
    fn hint_socket(
        &mut self,
        socket: usize,
        compact: (u32, u64, u64),
        key: &EventKey,
        create: bool,
    ) -> Option<usize> {
        let found = self.flow_index(key.full()?, create);
        let flow = match found {
            Some(i) => {
                self.flows[i].hinted += 1;
                i as u32
            }
            None if self.tracked() >= self.cfg.max_flows => OVER_CAP,
            // Not created by this event, it may be by a later one.
            None => return None,
        };
        if self.by_socket.len() <= socket {
            self.by_socket.resize(socket + 1, SocketHint::default());
        }
        let replaced = std::mem::replace(
            &mut self.by_socket[socket],
            SocketHint { key: compact, flow },
        );
        self.unhint(replaced.flow);
        found
    }

    fn flow_index(&mut self, key: FlowKey, create: bool) -> Option<usize> {
        let found = match self.last_flow {
            Some((last, found)) if last == key => found,
            _ => self.index.get(&key),
        };
        let i = match found {
            Some(i) => i,
            None if !create => {
                self.last_flow = Some((key, None));
                return None;
            }
            None if self.tracked() >= self.cfg.max_flows => {
                self.counters.evictions.events_over_flow_cap += 1;
                self.last_flow = Some((key, None));
                return None;
            }
            None => self.add_flow(key),
        };
        self.last_flow = Some((key, Some(i)));
        Some(i)
    }

    /// A new flow, in a freed slot if there is one. Once per flow: kept out
    /// of [`flow_index`](Self::flow_index), which every event runs.
    #[cold]
    fn add_flow(&mut self, key: FlowKey) -> usize {
        let breakdown = self.created < self.cfg.max_flow_breakdown as u64;
        if !breakdown {
            self.counters.evictions.flows_without_breakdown += 1;
        }
        let flow = Flow::new(key, self.created, breakdown);
        self.created += 1;
        let i = place(&mut self.flows, &mut self.free, flow);
        self.index.insert(key, i);
        i
    }

    /// Splits the borrows: one flow, and the context that records for it.
    fn parts(&mut self, i: usize) -> (&mut Pending, Ctx<'_>) {
        let Flow {
            key,
            table,
            pending,
            ..
        } = &mut self.flows[i];
        let ctx = Ctx {
            cfg: &self.cfg,
            rec: Recorder {
                overall: &mut self.overall,
                flow: table.as_deref_mut(),
                spans: self.cfg.spans.then_some((&mut self.spans, &*key)),
            },
            counters: &mut self.counters,
        };
        (pending, ctx)
    }

    fn napi_poll(&mut self, ifindex: u32, work: i32, budget: i32) {
        let i = match self.napi.iter().position(|n| n.ifindex == ifindex) {
            Some(i) => i,
            None => {
                self.napi.push(NapiAcc {
                    ifindex,
                    ..Default::default()
                });
                self.napi.len() - 1
            }
        };
        self.napi[i].record(work, budget);
    }

    /// A drop: of a received packet before TCP or by it, or of a sent one before the driver.
    fn kfree_skb(&mut self, ev: &Event, seq: u32, len: u32) {
        for outgoing in [false, true] {
            let Some(key) = FlowKey::of(ev, outgoing) else {
                return;
            };
            let Some(i) = self.flow_index(key, false) else {
                continue;
            };
            let (flow, mut ctx) = self.parts(i);
            let found = if outgoing {
                flow.tx.on_drop(seq, len, &mut ctx)
            } else {
                flow.rx.on_drop(seq, len, &mut ctx)
            };
            if found {
                return;
            }
        }
    }

    #[cold]
    fn sweep(&mut self) {
        let now = self.now_ns;
        for i in 0..self.flows.len() {
            let (flow, mut ctx) = self.parts(i);
            flow.tx.expire(now, &mut ctx);
            flow.rx.expire(now, &mut ctx);
            let flow = &self.flows[i];
            if flow.closing && flow.hinted == 0 && flow.pending.is_settled() {
                self.free_flow(i);
            }
        }
    }
}
