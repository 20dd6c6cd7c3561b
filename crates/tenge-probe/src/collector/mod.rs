//! Draining the ring buffer.
//!
//! The BPF side submits without waking the reader (a wakeup per event would
//! cost more than the event), and forces a wakeup only when the ring is about
//! a quarter full (each CPU counting its own share). So the [`Collector`]
//! polls the ring fd with a short timeout and then drains everything that is
//! there, handing each record to a callback as a borrowed slice: nothing is
//! allocated per event. A [`Recording`] is what `record` does with each.

mod journeys;

pub use journeys::HOLD_NS;

use crate::abi::{tt_hdr, tt_kind, tt_pause, tt_pause_edge, tt_task_role};
use crate::event::{is_incoming_packet, record_len, Body, Event};
use crate::probe::symbols::ProcessMaps;
use crate::probe::{PauseEdge, Tracer};
use crate::trace_file::{TraceError, TraceSummary, TraceWriter, FLUSH_EVERY};
use journeys::{records_of, settled_before, ts_of, Flushed, InOrder};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::BuildHasherDefault;
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tenge_events::fast_hash::FastHasher;
use tenge_events::stacks::LostStacks;

/// How often a sampled process's mappings are read again (see `Recording::read_maps`).
const MAPS_REREAD_NS: u64 = 250_000_000;

/// How long one poll(2) waits before draining anyway: alerts come this
/// late, and as late again where a journey was open ([`HOLD_NS`] at most).
/// Each wakeup preempts the traced transfer when it keeps every CPU
/// busy: waking every 10 ms cost a transfer of 100-byte writes 6 % with no
/// probe attached (`make bench`, mode `detached`); a busy ring wakes the
/// reader itself (see the module's doc).
const POLL_TIMEOUT: Duration = Duration::from_millis(50);
/// How long one poll(2) waits between time slices, when nothing can come:
/// the stop flag is seen this late at worst.
const PAUSED_POLL: Duration = Duration::from_millis(100);
/// Records taken from the ring between looks at the clock and the stop flag.
const BATCH: u64 = 4096;
/// How often [`Sink::tick`] is called.
const TICK: Duration = Duration::from_secs(1);

/// Where the [`Collector`] puts what it drains.
pub trait Sink {
    /// Whether records must come in time order. A sink that orders them
    /// itself (a recording: its reader does) takes them as the ring gives
    /// them, each journey and batch split into its records, and is told
    /// after every drain when all before a time have come ([`Sink::caught_up`]).
    fn in_time_order(&self) -> bool {
        true
    }
    /// One record as the ring holds it; an error ends the collection.
    fn record(&mut self, record: &[u8]) -> anyhow::Result<()>;
    /// About every second, with the counts so far.
    fn tick(&mut self, _stats: &CollectStats) -> anyhow::Result<()> {
        Ok(())
    }
    /// About every [`FLUSH_EVERY`]: what the sink holds goes to its file.
    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// Every record stamped before `until_ns` (CLOCK_MONOTONIC, the
    /// records' clock) has been handed on: time has come that far though
    /// some sockets sent nothing. After each drain that emptied the ring,
    /// and after every drain where records come out of time order.
    fn caught_up(&mut self, _until_ns: u64) -> anyhow::Result<()> {
        Ok(())
    }
}

/// A [`Sink`] of two closures: one for each record, one for each tick.
pub struct Callbacks<R, T>(pub R, pub T);

impl<R: FnMut(&[u8]), T: FnMut(&CollectStats)> Sink for Callbacks<R, T> {
    #[inline]
    fn record(&mut self, record: &[u8]) -> anyhow::Result<()> {
        (self.0)(record);
        Ok(())
    }

    fn tick(&mut self, stats: &CollectStats) -> anyhow::Result<()> {
        (self.1)(stats);
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectStats {
    /// Records handed to the sink: one per hook hit.
    pub events: u64,
    /// Records taken from the ring: a journey is one for several hooks, a
    /// batch one for the records and journeys a CPU gathered.
    pub ring_records: u64,
    /// Records the programs wrote: a journey is one, a batch as many as it
    /// holds.
    pub written: u64,
    /// Ring bytes taken.
    pub bytes: u64,
    /// Records handed on after a later one (held longer than [`HOLD_NS`]).
    pub late: u64,
    /// Records the kernel dropped because the ring was full, per kind
    /// (index = `tt_kind`). Exact in the final stats; refreshed every tick.
    pub lost: Vec<u64>,
    pub started: Instant,
    pub elapsed: Duration,
}

impl CollectStats {
    pub fn lost_total(&self) -> u64 {
        self.lost.iter().sum()
    }

    /// Records lost per kind name; kinds that lost none are left out.
    pub fn lost_by_name(&self) -> BTreeMap<String, u64> {
        self.lost
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .filter_map(|(kind, &n)| Some((crate::event::kind_name(kind as u8)?.to_string(), n)))
            .collect()
    }

    /// The trailer of a recording these stats end, ending now for
    /// `end_reason`; the caller adds what only it knows (stacks, process
    /// names, hook hits).
    pub fn trace_summary(&self, end_reason: &str) -> TraceSummary {
        TraceSummary {
            events: self.events,
            lost: self.lost_by_name(),
            duration_ns: self.elapsed.as_nanos() as u64,
            ended_unix_ns: crate::os::clock_ns(libc::CLOCK_REALTIME),
            end_reason: end_reason.into(),
            ..TraceSummary::default()
        }
    }
}

#[derive(Debug, Default)]
pub struct Collector {}

impl Collector {
    pub fn new() -> Collector {
        Collector {}
    }

    /// Drains `tracer` into `sink` until `stop` is set or `deadline` passes,
    /// then detaches its probes and drains once more, and reads the lost
    /// counters last. The sink's first error ends it.
    pub fn run(
        &mut self,
        tracer: &mut Tracer,
        stop: &AtomicBool,
        deadline: Option<Instant>,
        sink: &mut impl Sink,
    ) -> anyhow::Result<CollectStats> {
        let started = Instant::now();
        let mut stats = CollectStats {
            events: 0,
            ring_records: 0,
            written: 0,
            bytes: 0,
            late: 0,
            lost: tracer.lost()?,
            started,
            elapsed: Duration::ZERO,
        };
        let (mut next_tick, mut next_flush) = (started + TICK, started + FLUSH_EVERY);
        let mut handing = match (tracer.journeys(), sink.in_time_order()) {
            (false, _) => Handing::AsTaken,
            (true, true) => Handing::InOrder(InOrder::default()),
            (true, false) => Handing::Split { newest_ns: 0 },
        };
        while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
            // First: the edge the tracer's start made goes in before anything
            // is handed on after it.
            if let Some(pause) = tracer.follow_slices()? {
                record_pause(pause, &mut stats, sink, &mut handing)?;
            }
            // Batches keep the stop flag, the deadline and the ticks live when
            // the producers outrun the reader; wait only once the ring is empty.
            if !drain(tracer, &mut stats, sink, &mut handing)? {
                wait_readable(tracer.ring_fd(), poll_timeout(tracer, deadline))?;
            }
            let now = Instant::now();
            if now >= next_flush {
                sink.flush()?;
                next_flush = now + FLUSH_EVERY;
            }
            if now >= next_tick {
                stats.elapsed = now - started;
                stats.lost = tracer.lost()?;
                sink.tick(&stats)?;
                next_tick = now + TICK;
            }
        }
        // The recording ends now, not once the probes are gone: detaching
        // takes up to tens of ms under load, and a traced slice's bound put
        // after that counted it in the time scaled by.
        if let Some(pause) = tracer.end_slices() {
            record_pause(pause, &mut stats, sink, &mut handing)?;
        }
        // Detached first: a record queued after the last drain would be lost
        // without a count (one NAPI poll at the end of a transfer was).
        tracer.detach_probes()?;
        while drain(tracer, &mut stats, sink, &mut handing)? {}
        if let Handing::InOrder(in_order) = &mut handing {
            stats.events += in_order.release(u64::MAX, |record| sink.record(record))?;
            stats.late = in_order.late;
        }
        stats.lost = tracer.lost()?;
        stats.elapsed = started.elapsed();
        Ok(stats)
    }
}

/// How the records taken from the ring go to the sink.
enum Handing {
    /// As taken: a record per hook hit, each sent when it happened.
    AsTaken,
    /// Journeys and batches split into their records, in time order.
    InOrder(InOrder),
    /// Journeys and batches split into their records, as taken, for a sink
    /// that orders them itself ([`Sink::in_time_order`]); the newest
    /// record's time so far.
    Split { newest_ns: u64 },
}

/// What a drain took, and when every record stamped before had been
/// handed on, where it can say.
struct Drained {
    records: u64,
    bytes: u64,
    settled: Option<u64>,
}

/// Takes a batch from the ring into `sink`, as `handing` says. Returns
/// whether the ring may hold more (a full batch was taken).
#[inline]
fn drain(
    tracer: &mut Tracer,
    stats: &mut CollectStats,
    sink: &mut impl Sink,
    handing: &mut Handing,
) -> anyhow::Result<bool> {
    let started = crate::os::clock_ns(libc::CLOCK_MONOTONIC);
    let drained = match handing {
        Handing::AsTaken => drain_as_taken(tracer, stats, sink, started)?,
        Handing::InOrder(in_order) => drain_in_order(tracer, stats, sink, in_order, started)?,
        Handing::Split { newest_ns } => drain_split(tracer, stats, sink, newest_ns, started)?,
    };
    stats.ring_records += drained.records;
    stats.bytes += drained.bytes;
    if let Some(until) = drained.settled {
        sink.caught_up(until)?;
    }
    Ok(drained.records == BATCH)
}

#[inline]
fn drain_as_taken(
    tracer: &mut Tracer,
    stats: &mut CollectStats,
    sink: &mut impl Sink,
    started: u64,
) -> anyhow::Result<Drained> {
    let mut failed = None;
    let (records, bytes) = tracer.drain(BATCH, |record| {
        if failed.is_none() {
            failed = sink.record(record).err();
        }
    });
    stats.events += records;
    stats.written += records;
    failed.map_or(Ok(()), Err)?;
    // Emptied: no CPU holds a record longer than HOLD_NS.
    let settled = (records < BATCH).then(|| started.saturating_sub(HOLD_NS));
    Ok(Drained {
        records,
        bytes,
        settled,
    })
}

#[inline]
fn drain_in_order(
    tracer: &mut Tracer,
    stats: &mut CollectStats,
    sink: &mut impl Sink,
    in_order: &mut InOrder,
    started: u64,
) -> anyhow::Result<Drained> {
    let open_since = tracer.flush_batches()?;
    let (records, bytes) = tracer.drain(BATCH, |record| in_order.push(record));
    let caught_up = (records < BATCH).then_some(Flushed {
        at_ns: started,
        open_since,
    });
    let until = in_order.due_before(caught_up);
    stats.events += in_order.release(until, |record| sink.record(record))?;
    stats.late = in_order.late;
    stats.written = in_order.written;
    Ok(Drained {
        records,
        bytes,
        settled: caught_up.map(|_| until),
    })
}

#[inline]
fn drain_split(
    tracer: &mut Tracer,
    stats: &mut CollectStats,
    sink: &mut impl Sink,
    newest_ns: &mut u64,
    started: u64,
) -> anyhow::Result<Drained> {
    let open_since = tracer.flush_batches()?;
    let (mut failed, mut events, mut written) = (None, 0, 0);
    let (records, bytes) = tracer.drain(BATCH, |ring_record| {
        written += records_of(ring_record, |record| {
            *newest_ns = (*newest_ns).max(ts_of(record));
            events += 1;
            if failed.is_none() {
                failed = sink.record(record).err();
            }
        });
    });
    stats.events += events;
    stats.written += written;
    failed.map_or(Ok(()), Err)?;
    let caught_up = (records < BATCH).then_some(Flushed {
        at_ns: started,
        open_since,
    });
    Ok(Drained {
        records,
        bytes,
        settled: Some(settled_before(*newest_ns, caught_up)),
    })
}

/// How long to wait for records: not past the next edge of a time slice,
/// nor the deadline.
fn poll_timeout(tracer: &Tracer, deadline: Option<Instant>) -> Duration {
    let mut timeout = match tracer.probes_detached() {
        true => PAUSED_POLL,
        false => POLL_TIMEOUT,
    };
    if let Some(edge) = tracer.next_slice_edge_ns() {
        let now = crate::os::clock_ns(libc::CLOCK_MONOTONIC);
        timeout = timeout.min(Duration::from_nanos(edge.saturating_sub(now)));
    }
    match deadline {
        Some(deadline) => timeout.min(deadline.saturating_duration_since(Instant::now())),
        None => timeout,
    }
}

/// Writes a `pause` record (see `struct tt_pause`) where the kernel's would
/// go, in time order among them.
fn record_pause(
    edge: PauseEdge,
    stats: &mut CollectStats,
    sink: &mut impl Sink,
    handing: &mut Handing,
) -> anyhow::Result<()> {
    let (variant, ts_ns, edge_ns) = match edge {
        PauseEdge::Begin { at_ns, detached_ns } => {
            (tt_pause_edge::TT_PAUSE_BEGIN, at_ns, detached_ns)
        }
        PauseEdge::End {
            attaching_ns,
            at_ns,
        } => (tt_pause_edge::TT_PAUSE_END, at_ns, attaching_ns),
        PauseEdge::Bound { at_ns } => (tt_pause_edge::TT_PAUSE_BOUND, at_ns, at_ns),
    };
    let hdr = tt_hdr {
        ts_ns,
        variant: variant as u8,
        ..tt_hdr::default()
    };
    let body = Body::Pause(tt_pause { edge_ns });
    let mut record = Vec::new();
    Event::new(hdr, body).encode(&mut record);
    match handing {
        Handing::InOrder(in_order) => in_order.push(&record),
        Handing::AsTaken | Handing::Split { .. } => {
            stats.events += 1;
            sink.record(&record)?;
        }
    }
    Ok(())
}

/// poll(2) for readability; a timeout or a signal is not an error.
fn wait_readable(fd: std::os::fd::RawFd, timeout: Duration) -> anyhow::Result<()> {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up: a wait to a slice's edge must not end before it.
    let ms = timeout.as_micros().div_ceil(1000) as libc::c_int;
    // SAFETY: one valid pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pollfd, 1, ms) };
    if rc < 0 {
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(anyhow::Error::new(err).context("poll on the ring buffer"));
        }
    }
    Ok(())
}

/// What `record` does with each record: writes it to the trace file as it
/// came (out of time order: the file's reader orders them), counts the
/// sockets, and keeps the stack ids and process names of CPU samples for
/// the trace's summary. Of most records it reads only the kind and the
/// socket cookie; nothing else needs them decoded while recording.
pub struct Recording {
    writer: TraceWriter,
    sockets: SocketCount,
    stack_ids: BTreeSet<i32>,
    /// User stacks by process, and each process's mappings (read when first seen).
    user_stacks: BTreeSet<(u32, i32)>,
    maps: BTreeMap<u32, ProcessMaps>,
    /// When each process's mappings were read, by its samples' clock.
    maps_read_ns: BTreeMap<u32, u64>,
    process_names: BTreeMap<u32, String>,
    lost_stacks: LostStacks,
    /// The cgroups of sock_task events.
    cgroups: crate::os::CgroupNames,
}

impl Recording {
    pub fn new(mut writer: TraceWriter) -> Recording {
        writer.out_of_time_order();
        Recording {
            writer,
            sockets: SocketCount::default(),
            stack_ids: BTreeSet::new(),
            user_stacks: BTreeSet::new(),
            maps: BTreeMap::new(),
            maps_read_ns: BTreeMap::new(),
            process_names: BTreeMap::new(),
            lost_stacks: LostStacks::default(),
            cgroups: crate::os::CgroupNames::default(),
        }
    }

    /// Takes one record as the ring holds it. Records of unknown kinds or
    /// cut short are written but not counted (a replay rejects them).
    #[inline]
    pub fn record(&mut self, record: &[u8]) -> Result<(), TraceError> {
        if let Some((kind, cookie)) = kind_and_cookie(record) {
            self.sockets.observe(kind, cookie);
            if kind == tt_kind::TT_KIND_CPU_SAMPLE as u8 {
                self.cpu_sample(record);
            } else if kind == tt_kind::TT_KIND_SOCK_TASK as u8 {
                self.sock_task(record);
            }
        }
        self.writer.write_record(record)
    }

    #[cold]
    fn cpu_sample(&mut self, record: &[u8]) {
        let mut ev = Event::zeroed();
        if let (Some(_), Body::CpuSample(s)) = (Event::decode_first(record, &mut ev), ev.body) {
            self.lost_stacks.observe(&s);
            if s.kstack_id >= 0 {
                self.stack_ids.insert(s.kstack_id);
            }
            if s.ustack_id >= 0 {
                self.user_stacks.insert((s.tgid, s.ustack_id));
            }
            // The kernel named it just before (TT_TASK_ON_CPU) unless that
            // record was lost: then /proc, while the process lives.
            self.process_names
                .entry(s.tgid)
                .or_insert_with(|| process_name(s.tgid));
            self.read_maps(s.tgid, ev.hdr.ts_ns);
        }
    }

    /// Reads a process's mappings at its first sample and again every
    /// [`MAPS_REREAD_NS`] of its samples while it lives: `record -- CMD`'s
    /// child is sampled between its fork and its exec (seen on a loaded
    /// host: the lab's libc frames all in hex), and a process loads libraries.
    fn read_maps(&mut self, tgid: u32, ts_ns: u64) {
        let read = self.maps_read_ns.entry(tgid).or_insert(0);
        if *read != 0 && ts_ns.saturating_sub(*read) < MAPS_REREAD_NS {
            return;
        }
        *read = ts_ns.max(1);
        let maps = ProcessMaps::read(tgid);
        if !maps.is_empty() || !self.maps.contains_key(&tgid) {
            self.maps.insert(tgid, maps);
        }
    }

    #[cold]
    fn sock_task(&mut self, record: &[u8]) {
        let mut ev = Event::zeroed();
        if let (Some(_), Body::SockTask(t)) = (Event::decode_first(record, &mut ev), ev.body) {
            if t.role == tt_task_role::TT_TASK_ON_CPU as u8 {
                self.process_names
                    .insert(t.tgid, tenge_events::os::c_text(&t.comm));
                return;
            }
            // Named while the cgroup exists; a container's may be gone by the end.
            self.cgroups.name(t.cgroup_id);
        }
    }

    /// The paths of the cgroups the sock_task events named, by id.
    pub fn cgroup_paths(&self) -> BTreeMap<u64, String> {
        self.cgroups.paths()
    }

    /// Sockets seen so far: the number of flows a replay's flow table holds.
    pub fn sockets(&self) -> usize {
        self.sockets.seen.len()
    }

    pub fn events(&self) -> u64 {
        self.writer.events()
    }

    /// Kernel stack ids of the CPU samples, for [`Tracer::resolve_stacks`].
    pub fn stack_ids(&self) -> Vec<i32> {
        self.stack_ids.iter().copied().collect()
    }

    /// The user stacks of the CPU samples by process, and the processes'
    /// mappings, for [`Tracer::resolve_user_stacks`].
    pub fn user_stacks(&self) -> (&BTreeSet<(u32, i32)>, &BTreeMap<u32, ProcessMaps>) {
        (&self.user_stacks, &self.maps)
    }

    /// The CPU samples, and those whose stacks the kernel had no room for.
    pub fn lost_stacks(&self) -> LostStacks {
        self.lost_stacks
    }

    /// Names of the processes the CPU samples hit, by tgid.
    pub fn take_process_names(&mut self) -> BTreeMap<u32, String> {
        std::mem::take(&mut self.process_names)
    }

    /// Where the recording is until it is finished: see [`TraceWriter::partial`].
    pub fn partial(&self) -> Option<&std::path::Path> {
        self.writer.partial()
    }

    /// Puts what it holds in the file: see [`TraceWriter::flush`].
    pub fn flush(&mut self) -> Result<(), TraceError> {
        self.writer.flush()
    }

    /// Writes the trailer: see [`TraceWriter::finish`].
    pub fn finish(self, summary: &TraceSummary) -> Result<Duration, TraceError> {
        self.writer.finish(summary)
    }
}

impl Sink for Recording {
    fn in_time_order(&self) -> bool {
        false
    }

    #[inline]
    fn record(&mut self, record: &[u8]) -> anyhow::Result<()> {
        Ok(Recording::record(self, record)?)
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(Recording::flush(self)?)
    }

    fn caught_up(&mut self, until_ns: u64) -> anyhow::Result<()> {
        self.writer.settle(until_ns);
        Ok(())
    }
}

/// A record's kind and socket cookie, if it is a whole record of a known kind.
#[inline]
fn kind_and_cookie(record: &[u8]) -> Option<(u8, u64)> {
    let kind = *record.get(offset_of!(tt_hdr, kind))?;
    if record.len() < record_len(kind)? {
        return None;
    }
    let at = offset_of!(tt_hdr, sock_cookie);
    let cookie = u64::from_ne_bytes(record[at..at + 8].try_into().expect("8 bytes"));
    Some((kind, cookie))
}

/// The sockets of a recording, counted as `FlowTable` numbers
/// them: one per cookie an event carries of its own socket.
#[derive(Default)]
struct SocketCount {
    seen: HashSet<u64, BuildHasherDefault<FastHasher>>,
    /// Cookies seen lately, by their low bits: the records of a transfer's
    /// few sockets come interleaved, and the set is asked only on a miss.
    recent: [u64; 16],
}

impl SocketCount {
    #[inline]
    fn observe(&mut self, kind: u8, cookie: u64) {
        let slot = &mut self.recent[cookie as usize % 16];
        if cookie != 0 && cookie != *slot && !is_incoming_packet(kind) {
            self.seen.insert(cookie);
            *slot = cookie;
        }
    }
}

fn process_name(tgid: u32) -> String {
    match tgid {
        0 => "swapper".into(),
        _ => std::fs::read_to_string(format!("/proc/{tgid}/comm"))
            .map_or_else(|_| format!("pid {tgid}"), |c| c.trim().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::tt_cpu_sample;
    use crate::trace_file::{TraceMeta, TraceReader, TraceSummary};
    use tenge_analysis::flow::FlowTable;
    use tenge_events::stacks::SLOT_TAKEN;

    /// A record of every kind with a cookie of its own kind, each twice, and
    /// one more of each with cookie 7, in the kernel's layout.
    fn mixed_records() -> Vec<Vec<u8>> {
        let mut records = Vec::new();
        for kind in 1..tt_kind::TT_KIND_MAX as u8 {
            let mut record = Vec::new();
            Event::new(tt_hdr::default(), Body::CpuSample(tt_cpu_sample::default()))
                .encode(&mut record);
            record.resize(record_len(kind).unwrap(), 0);
            record[offset_of!(tt_hdr, kind)] = kind;
            for cookie in [100 + u64::from(kind), 100 + u64::from(kind), 7, 0] {
                let at = offset_of!(tt_hdr, sock_cookie);
                record[at..at + 8].copy_from_slice(&cookie.to_ne_bytes());
                records.push(record.clone());
            }
        }
        records
    }

    #[test]
    fn sockets_are_counted_as_the_flow_table_numbers_them() {
        let path = std::env::temp_dir().join(format!("tt-collector-{}.ttr", std::process::id()));
        let writer = TraceWriter::create(&path, &TraceMeta::for_this_host()).unwrap();
        let mut recording = Recording::new(writer);
        let mut flows = FlowTable::new();
        let mut ev = Event::zeroed();
        let records = mixed_records();
        for record in &records {
            recording.record(record).unwrap();
            Event::decode_first(record, &mut ev).unwrap();
            flows.observe(&ev);
        }
        // Cut short: written, not counted.
        recording.record(&records[0][..40]).unwrap();
        // 17 kinds less the 3 of incoming packets (rx_entry, netif_receive,
        // kfree_skb) carry a cookie of their own: 14, and cookie 7.
        assert_eq!(recording.sockets(), 15);
        assert_eq!(recording.sockets(), flows.len());
        assert_eq!(recording.events(), records.len() as u64 + 1);
        recording.finish(&TraceSummary::default()).unwrap();
        let read = TraceReader::open(&path).unwrap().for_each(|_| {}).is_err();
        assert!(read, "the cut record is in the file");
        // Read up to it, salvaging.
        let mut reader = TraceReader::open(&path).unwrap().salvaging();
        let mut back = 0;
        reader.for_each(|_| back += 1).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(back, records.len());
    }

    #[test]
    fn cpu_samples_keep_their_stacks_and_process() {
        let path =
            std::env::temp_dir().join(format!("tt-collector-cpu-{}.ttr", std::process::id()));
        let writer = TraceWriter::create(&path, &TraceMeta::for_this_host()).unwrap();
        let mut recording = Recording::new(writer);
        let me = std::process::id();
        for (kstack_id, ustack_id) in [(5, -1), (5, 9), (-14, -1), (SLOT_TAKEN, SLOT_TAKEN)] {
            let sample = tt_cpu_sample {
                pid: me,
                tgid: me,
                kstack_id,
                ustack_id,
            };
            let mut record = Vec::new();
            Event::new(tt_hdr::default(), Body::CpuSample(sample)).encode(&mut record);
            recording.record(&record).unwrap();
        }
        // Kernel stacks by id; user stacks by process, whose mappings were read.
        assert_eq!(recording.stack_ids(), [5]);
        let lost = recording.lost_stacks();
        assert_eq!((lost.samples, lost.kernel, lost.user), (4, 1, 1));
        let (user, maps) = recording.user_stacks();
        assert_eq!(user, &BTreeSet::from([(me, 9)]));
        assert!(!maps[&me].is_empty());
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(
            recording.take_process_names(),
            BTreeMap::from([(me, comm.trim().to_string())])
        );
        assert_eq!(recording.sockets(), 0);
        recording.finish(&TraceSummary::default()).unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
