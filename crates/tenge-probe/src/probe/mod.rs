//! Loading and attaching the BPF programs.
//!
//! [`Tracer::start`] loads `bpf/tenge.bpf.c` with the filters baked into its
//! `.rodata`, attaches every probe on the best hook the kernel allows (see
//! [`plan`]) and hands out the ring buffer; dropping the [`Tracer`] detaches
//! everything. [`check`] reports what this kernel supports without tracing.
//! [`StageTracer`] loads `bpf/stages.bpf.c` instead: stage latencies
//! aggregated in the kernel, no ring buffer.

mod check;
mod direct_map;
mod hits;
mod loss;
mod plan;
#[cfg(feature = "bench")]
mod reference;
mod ring;
mod slices;
mod stages;
mod stats;
pub mod symbols;
mod tracefs;

pub use check::{check, Capabilities, CheckReport, HookCheck};
use hits::HitCounter;
pub use hits::HookHits;
pub use loss::{Loss, LossCounts};
pub use plan::{Backend, PlannedProbe, ProbePlan, BACKENDS_VAR, VERIFIER_LOG_VAR};
#[cfg(feature = "bench")]
pub use reference::{system_program_stats, ReferencePrograms};
pub use ring::Ring;
pub use slices::PauseEdge;
pub use stages::StageTracer;
pub use stats::{BpfStatsEnabled, ProgramStats, BATCH_FLUSH_HOOK};
pub use tracefs::for_child as tracefs_for_child;

use crate::abi::tt_kind;
use anyhow::{bail, Context};
use aya::maps::{PerCpuArray, StackTraceMap};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{PerfEvent, ProgramError, RawTracePoint};
use aya::{Btf, Ebpf, EbpfLoader, RawTracePointRunOptions, TestRun};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};

static TENGE_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tenge.bpf.o"));

/// Which events the kernel keeps. Applied in BPF, before any socket state is read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filters {
    /// Source or destination port.
    pub port: Option<u16>,
    /// Source or destination address.
    pub addr: Option<IpAddr>,
    /// Network namespace inode (as in `ls -L -i /proc/<pid>/ns/net`).
    pub netns: Option<u32>,
    /// Keep one block of 16 KiB of each flow's sequence space in this many
    /// (0 or 1: all), with every event that handles a byte of a kept block
    /// ([`crate::event::sampled_range`]), so a kept packet is kept at every
    /// hop; napi_poll is kept 1 in this many per CPU; state, retransmit and
    /// kfree_skb are always kept.
    pub sample_every: u32,
    /// Sample by time instead: every event of one slice of this many ns in
    /// each `sample_every`, the probes detached in between (see
    /// [`Tracer::follow_slices`]); 0: by bytes as above.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sample_slice_ns: u64,
    /// Only the flows of these tasks.
    #[serde(default, skip_serializing_if = "TaskFilter::is_off")]
    pub task: TaskFilter,
}

/// The tasks whose flows the kernel keeps: a socket counts once a task that
/// matches every field given wrote or read it (before that, its events are
/// not kept: a connection's handshake, for one).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFilter {
    /// The process (thread group) id, as in the root PID namespace.
    pub pid: Option<u32>,
    /// The task's command name (`comm`, at most 15 bytes).
    pub comm: Option<String>,
    /// A cgroup v2 path under its root (e.g. `/system.slice/nginx.service`):
    /// tasks in it or below it.
    pub cgroup: Option<String>,
}

impl TaskFilter {
    pub fn is_off(&self) -> bool {
        self == &TaskFilter::default()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracerOptions {
    pub filters: Filters,
    /// Ring buffer size: a power of two, at least one page.
    pub ring_bytes: u32,
    /// Sample on-CPU stacks (cpu-clock, every CPU).
    pub cpu_profile: Option<CpuProfile>,
    /// The backends to try for each probe, in order (default: [`Backend::LADDER`]).
    /// Narrow it to compare backends or to avoid one.
    pub backends: Vec<Backend>,
    /// Every hook sends its own record, instead of one record per packet
    /// journey (see `struct tt_tx_journey` in bpf/tenge_abi.h): the same
    /// records in the end, at a higher cost; for checking journeys.
    #[serde(default)]
    pub per_hook: bool,
    /// Count each tracepoint probe's hits (perf) against its program's runs
    /// (bpf_stats) until the probes detach, for [`Tracer::hook_hits`]
    /// (probe/hits.rs says why). Costs every hit more.
    #[serde(default)]
    pub count_hits: bool,
}

/// The inode of a named network namespace (`ip netns add NAME`), for [`Filters::netns`].
pub fn netns_inode(name: &str) -> anyhow::Result<u32> {
    use std::os::unix::fs::MetadataExt;
    let path = std::path::Path::new("/var/run/netns").join(name);
    let meta = std::fs::metadata(&path)
        .with_context(|| format!("no network namespace named {name:?} (see `ip netns list`)"))?;
    Ok(meta.ino() as u32)
}

impl Default for TracerOptions {
    fn default() -> Self {
        TracerOptions {
            filters: Filters::default(),
            ring_bytes: 16 << 20,
            cpu_profile: None,
            backends: Backend::LADDER.to_vec(),
            per_hook: false,
            count_hits: false,
        }
    }
}

/// On-CPU stack sampling: how often, and how many stacks each of the
/// kernel's two stack tables (kernel, user) holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuProfile {
    /// Samples per second on each CPU.
    pub hz: u64,
    /// Slots per table (the kernel rounds up to a power of two), about 1 KiB
    /// each: a stack whose slot another stack holds is lost
    /// ([`tenge_events::stacks`]), so fill a table by an eighth at most.
    pub stacks: u32,
}

impl CpuProfile {
    pub const DEFAULT_STACKS: u32 = 16384;
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The loaded and attached programs. Dropping it detaches them all.
pub struct Tracer {
    ring: Ring,
    journeys: bool,
    /// Journeys: the CPUs whose batches [`flush_batches`](Self::flush_batches) writes out.
    cpus: Vec<u32>,
    links: plan::Links,
    slices: Option<slices::Sliced>,
    /// `count_hits`: counting until the probes detach, then what it counted.
    hit_counter: Option<HitCounter>,
    hook_hits: Option<Vec<HookHits>>,
    ebpf: Ebpf,
    plan: ProbePlan,
}

impl Tracer {
    pub fn start(options: &TracerOptions) -> anyhow::Result<Tracer> {
        require_privileges()?;
        let btf = kernel_btf()?;
        let ring_bytes = options.ring_bytes;
        if !ring_bytes.is_power_of_two() || ring_bytes < 4096 {
            bail!("ring buffer size {ring_bytes} must be a power of two of at least 4096 bytes");
        }
        let filters = CommonGlobals::of(&options.filters)?;
        let cpus =
            aya::util::online_cpus().map_err(|(path, err)| anyhow::anyhow!("{path}: {err}"))?;
        // Each CPU wakes the reader once it queued its share of a quarter ring.
        let wakeup_bytes = (u64::from(ring_bytes / 4) / cpus.len().max(1) as u64).max(1);
        let per_hook = u8::from(options.per_hook);
        // By time, every event of a traced slice is kept.
        let sample_every = match options.filters.sample_slice_ns {
            0 => options.filters.sample_every,
            _ => 1,
        };
        let mut loader = EbpfLoader::new();
        filters.apply(loader.btf(Some(&btf)));
        loader
            .override_global("sample_every", &sample_every, true)
            .override_global("wakeup_bytes", &wakeup_bytes, true)
            .override_global("per_hook", &per_hook, true)
            .map_max_entries("events", ring_bytes);
        // Unused tables take one slot each.
        let stacks = options.cpu_profile.map_or(1, |p| p.stacks);
        for table in STACK_TABLES {
            loader.map_max_entries(table, stacks);
        }
        let mut loaded = plan::load_object(&mut loader, TENGE_OBJ)?;
        // Before the probes attach: what they trace until sampling by time
        // takes over (below) is traced whole.
        if !options.per_hook {
            batch_flush(&mut loaded.ebpf)?
                .load()
                .context("loading tt_batch_flush")?;
        }
        let ladder = plan::forced_backends()?.unwrap_or_else(|| options.backends.clone());
        // Sampling by time starts here: what the first probes stamp while
        // the others attach (76 ms under load) falls in its first slice.
        let attaching_ns = crate::os::clock_ns(libc::CLOCK_MONOTONIC);
        let plan = tracefs::with(|| plan::attach_all(&mut loaded, &btf, &ladder));
        let (mut ebpf, mut links) = (loaded.ebpf, loaded.links);
        plan::require_attached(&plan)?;
        if let Some(profile) = options.cpu_profile {
            attach_cpu_profile(&mut ebpf, profile.hz, &cpus)?;
        }
        let ring = Ring::new(ebpf.take_map("events").context("no events map")?)?;
        let slices = sliced(
            &options.filters,
            attaching_ns,
            &mut links,
            &mut ebpf,
            zero_journeys,
        )?;
        let mut tracer = Tracer {
            ring,
            journeys: !options.per_hook,
            cpus,
            links,
            slices,
            hit_counter: None,
            hook_hits: None,
            ebpf,
            plan,
        };
        // The collector flushes the batches before each drain: fail here if it cannot.
        tracer
            .flush_batches()
            .context("the batches need BPF_PROG_TEST_RUN of raw_tp programs on a CPU (Linux 5.10); --per-hook does without")?;
        if options.count_hits {
            tracer.hit_counter = Some(HitCounter::start(&tracer)?);
        }
        Ok(tracer)
    }

    /// What [`TracerOptions::count_hits`] counted, once the probes detached.
    pub fn hook_hits(&self) -> Option<&[HookHits]> {
        self.hook_hits.as_deref()
    }

    /// Sampling by time: when the probes next attach or detach
    /// (CLOCK_MONOTONIC ns); call [`follow_slices`](Self::follow_slices) then.
    pub fn next_slice_edge_ns(&self) -> Option<u64> {
        self.slices.as_ref().map(|s| s.next_edge_ns())
    }

    /// Sampling by time, between slices: no probe is attached, so nothing
    /// comes into the ring until the next edge.
    pub fn probes_detached(&self) -> bool {
        self.slices.as_ref().is_some_and(|s| s.paused())
    }

    /// Sampling by time: attaches or detaches the probes as the slice of now
    /// calls for. Returns the edge of the pause it made (its beginning or
    /// its end), if it made one.
    pub fn follow_slices(&mut self) -> anyhow::Result<Option<PauseEdge>> {
        match &mut self.slices {
            Some(slices) => slices.follow(&mut self.links, &mut self.ebpf),
            None => Ok(None),
        }
    }

    /// Detaches the probes for good; the programs and the ring stay, so that
    /// the last drain reads every record they queued and their statistics
    /// can still be read.
    pub fn detach_probes(&mut self) -> anyhow::Result<()> {
        // The hit counters stop first: a hit after the programs left would
        // count as one the kernel ran no program for.
        if let Some(counter) = self.hit_counter.take() {
            self.hook_hits = Some(counter.stop(self)?);
        }
        self.links.detach();
        Ok(())
    }

    /// Journeys: writes every CPU's batch to the ring, where the records
    /// each CPU gathered wait until then, so that a drain that follows takes
    /// every record stamped before this call but those of journeys still
    /// open. Returns the first hop of the oldest of those (`u64::MAX`:
    /// none), or None where that is not known (no journeys, or a CPU's batch
    /// still being written after every try).
    pub fn flush_batches(&mut self) -> anyhow::Result<Option<u64>> {
        if !self.journeys {
            return Ok(None);
        }
        let program = batch_flush(&mut self.ebpf)?;
        let mut flushed = true;
        for &cpu in &self.cpus {
            flushed &= flush_cpu(program, cpu)?;
        }
        if !flushed {
            return Ok(None);
        }
        let map = self
            .ebpf
            .map("tt_open_since")
            .context("no tt_open_since map")?;
        let open_since = PerCpuArray::<_, u64>::try_from(map)?.get(&0, 0)?;
        Ok(Some(
            open_since
                .iter()
                .copied()
                .filter(|&ts| ts != 0)
                .min()
                .unwrap_or(u64::MAX),
        ))
    }

    /// Sampling by time: the end of the pause running now, if one is (the recording ends).
    pub fn end_slices(&mut self) -> Option<PauseEdge> {
        self.slices.as_mut()?.end()
    }

    /// Whether the ring carries journeys (records of several hooks, out of
    /// time order with the others) besides records of one hook.
    pub fn journeys(&self) -> bool {
        self.journeys
    }

    pub fn plan(&self) -> &ProbePlan {
        &self.plan
    }

    /// The ring buffer's fd, readable when records are waiting (the BPF side
    /// wakes it only once a CPU queued its share of a quarter ring: poll
    /// with a timeout).
    pub fn ring_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Hands up to `max_records` of the records now in the ring to
    /// `on_record`; returns (records, bytes). See [`Ring::drain`].
    pub fn drain(&mut self, max_records: u64, on_record: impl FnMut(&[u8])) -> (u64, u64) {
        self.ring.drain(max_records, on_record)
    }

    /// Records the kernel could not queue because the ring was full, per
    /// kind (index = `tt_kind`, TT_LOST_SLOTS of them), summed over CPUs.
    pub fn lost(&self) -> anyhow::Result<Vec<u64>> {
        let map = self.ebpf.map("tt_lost").context("no tt_lost map")?;
        let lost = PerCpuArray::<_, u64>::try_from(map)?;
        (0..tt_kind::TT_KIND_MAX as u32)
            .map(|kind| Ok(lost.get(&kind, 0)?.iter().sum()))
            .collect()
    }

    /// The kernel stacks `ids` of the stack map, leaf first, by name.
    pub fn resolve_stacks(&self, ids: &[i32]) -> HashMap<i32, Vec<String>> {
        let symbolizer = blazesym::symbolize::Symbolizer::new();
        ids.iter()
            .filter_map(|&id| {
                let frames = symbols::kernel_frames(&symbolizer, &self.stack(KERNEL_STACKS, id)?);
                Some((id, frames))
            })
            .collect()
    }

    /// The user stacks of `stacks` ((process, stack id)), leaf first, by
    /// name from the mappings `maps` read of each process, keyed
    /// `"TGID:ID"` as [`TraceSummary::user_stacks`](crate::trace_file::TraceSummary::user_stacks).
    pub fn resolve_user_stacks(
        &self,
        stacks: &BTreeSet<(u32, i32)>,
        maps: &BTreeMap<u32, symbols::ProcessMaps>,
    ) -> BTreeMap<String, Vec<String>> {
        let symbolizer = blazesym::symbolize::Symbolizer::new();
        let none = symbols::ProcessMaps::default();
        stacks
            .iter()
            .filter_map(|&(tgid, id)| {
                let maps = maps.get(&tgid).unwrap_or(&none);
                let frames = symbols::user_frames(&symbolizer, maps, &self.stack(USER_STACKS, id)?);
                Some((format!("{tgid}:{id}"), frames))
            })
            .collect()
    }

    /// The addresses of stack `id` of stack table `table`, leaf first.
    fn stack(&self, table: &str, id: i32) -> Option<Vec<u64>> {
        let stacks = StackTraceMap::try_from(self.ebpf.map(table)?).ok()?;
        let trace = stacks.get(&u32::try_from(id).ok()?, 0).ok()?;
        Some(trace.frames().iter().map(|f| f.ip).collect())
    }
}

/// The stack tables of tenge.bpf.c's cpu_sample.
const KERNEL_STACKS: &str = "tt_kstacks";
const USER_STACKS: &str = "tt_ustacks";
const STACK_TABLES: [&str; 2] = [KERNEL_STACKS, USER_STACKS];

/// The per-CPU maps of tenge.bpf.c that hold packets between hooks.
const JOURNEY_MAPS: [&str; 4] = ["tx_journeys", "rx_journeys", "rx_entries", "xmit_stash"];

/// Before a slice: what the CPUs held when the probes left would otherwise
/// end the first journeys of this slice.
fn zero_journeys(ebpf: &mut Ebpf, moment: slices::Moment) -> anyhow::Result<()> {
    if moment != slices::Moment::Coming {
        return Ok(());
    }
    JOURNEY_MAPS
        .iter()
        .try_for_each(|map| zero_per_cpu(ebpf, map))
}

/// Whether `filters` sample by time slices (a slice, and 1 in more than one).
fn time_sliced(filters: &Filters) -> bool {
    filters.sample_slice_ns > 0 && filters.sample_every > 1
}

/// Sampling by time over `links`, attached from `attaching_ns` on, if
/// `filters` ask for it; `at_moment` runs as they come and go.
fn sliced(
    filters: &Filters,
    attaching_ns: u64,
    links: &mut plan::Links,
    ebpf: &mut Ebpf,
    at_moment: slices::AtMoment,
) -> anyhow::Result<Option<slices::Sliced>> {
    if !time_sliced(filters) {
        return Ok(None);
    }
    let slice = std::time::Duration::from_nanos(filters.sample_slice_ns);
    let every = filters.sample_every;
    slices::Sliced::start(every, slice, attaching_ns, links, ebpf, at_moment).map(Some)
}

/// Zeroes element 0 of the per-CPU array `name` on every CPU. aya updates a
/// per-CPU map only through a Rust type of the value's size; these values
/// are C structs private to the BPF side, so the update is the syscall's.
fn zero_per_cpu(ebpf: &Ebpf, name: &str) -> anyhow::Result<()> {
    use std::os::fd::AsFd;
    let Some(aya::maps::Map::PerCpuArray(map)) = ebpf.map(name) else {
        bail!("no per-CPU array {name}");
    };
    let stride = (map.info()?.value_size() as usize).next_multiple_of(8);
    let cpus = aya::util::nr_cpus().map_err(|(path, err)| anyhow::anyhow!("{path}: {err}"))?;
    let (key, zeros) = (0u32, vec![0u8; stride * cpus]);
    #[repr(C)]
    struct MapElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    let attr = MapElemAttr {
        map_fd: map.fd().as_fd().as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: zeros.as_ptr() as u64,
        flags: 0, // BPF_ANY
    };
    const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
    // SAFETY: the kernel reads the 4-byte key and a value of the map's size
    // rounded up to 8 per possible CPU, both alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_UPDATE_ELEM,
            &attr as *const MapElemAttr,
            std::mem::size_of::<MapElemAttr>(),
        )
    };
    anyhow::ensure!(
        rc == 0,
        "clearing {name}: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

/// How often [`Tracer::flush_batches`] asks a CPU whose batch is being written.
const FLUSH_TRIES: usize = 100;

/// Runs tt_batch_flush on `cpu`; returns whether the batch was written (a
/// program writing it, busy, is done within microseconds, and writes it
/// itself if asked by then).
fn flush_cpu(program: &mut RawTracePoint, cpu: u32) -> anyhow::Result<bool> {
    for _ in 0..FLUSH_TRIES {
        let run = RawTracePointRunOptions {
            cpu: Some(cpu),
            ..RawTracePointRunOptions::new()
        };
        match program.test_run(run) {
            Ok(result) if result.return_value == 0 => return Ok(true),
            Ok(_) => std::thread::yield_now(),
            // Taken offline since the start: nothing runs there, and its
            // batch is written when it runs again.
            Err(ProgramError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::ENXIO) =>
            {
                return Ok(true)
            }
            Err(e) => return Err(e).with_context(|| format!("flushing the batch of CPU {cpu}")),
        }
    }
    Ok(false)
}

/// tenge.bpf.c's tt_batch_flush, which the collector runs on each CPU.
fn batch_flush(ebpf: &mut Ebpf) -> anyhow::Result<&mut RawTracePoint> {
    let program = ebpf
        .program_mut("tt_batch_flush")
        .context("no tt_batch_flush program")?;
    Ok(program.try_into()?)
}

fn attach_cpu_profile(ebpf: &mut Ebpf, hz: u64, cpus: &[u32]) -> anyhow::Result<()> {
    let program: &mut PerfEvent = ebpf
        .program_mut("cpu_sample")
        .context("no cpu_sample program")?
        .try_into()?;
    program.load().context("loading the perf_event program")?;
    for &cpu in cpus {
        program
            .attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu },
                SamplePolicy::Frequency(hz),
                false,
            )
            .with_context(|| format!("attaching cpu-clock sampling on CPU {cpu}"))?;
    }
    Ok(())
}

/// The `.rodata` globals of tenge_common.bpf.h, which every object that
/// includes it has (sampling aside): the filters, and where the kernel's
/// direct map is.
struct CommonGlobals {
    port: u16,
    addr_set: u8,
    addr: [u8; 16],
    netns: u32,
    task: u8,
    tgid: u32,
    comm: [u64; 2],
    cgroup: u64,
    cgroup_level: u32,
    direct_map: direct_map::DirectMap,
}

impl CommonGlobals {
    fn of(filters: &Filters) -> anyhow::Result<CommonGlobals> {
        let (addr_set, addr) = filters
            .addr
            .map_or((0, [0; 16]), |ip| (1, crate::event::abi_addr(ip).1));
        let task = &filters.task;
        let (cgroup, cgroup_level) = task.cgroup.as_deref().map_or(Ok((0, 0)), cgroup_of)?;
        Ok(CommonGlobals {
            port: filters.port.unwrap_or(0),
            addr_set,
            addr,
            netns: filters.netns.unwrap_or(0),
            task: u8::from(!task.is_off()),
            tgid: task.pid.unwrap_or(0),
            comm: task.comm.as_deref().map_or(Ok([0; 2]), comm_words)?,
            cgroup,
            cgroup_level,
            direct_map: direct_map::DirectMap::of_this_kernel(),
        })
    }

    fn apply<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader
            .override_global("filter_port", &self.port, true)
            .override_global("filter_addr", &self.addr, true)
            .override_global("filter_addr_set", &self.addr_set, true)
            .override_global("filter_netns", &self.netns, true)
            .override_global("filter_task", &self.task, true)
            .override_global("filter_tgid", &self.tgid, true)
            .override_global("filter_comm", &self.comm, true)
            .override_global("filter_cgroup", &self.cgroup, true)
            .override_global("filter_cgroup_level", &self.cgroup_level, true)
            .override_global(
                "page_offset_base_at",
                &self.direct_map.page_offset_base_at,
                true,
            )
            .override_global("vmemmap_base_at", &self.direct_map.vmemmap_base_at, true);
    }
}

/// A command name as `bpf_get_current_comm()` gives it: 16 bytes, NUL-padded.
fn comm_words(comm: &str) -> anyhow::Result<[u64; 2]> {
    anyhow::ensure!(
        !comm.is_empty() && comm.len() < 16 && !comm.contains('\0'),
        "--comm {comm:?}: a task's command name has 1 to 15 bytes (see /proc/PID/comm)"
    );
    let mut bytes = [0u8; 16];
    bytes[..comm.len()].copy_from_slice(comm.as_bytes());
    let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    Ok([word(0), word(8)])
}

/// A cgroup v2 path's id (its directory's inode) and depth below the root.
fn cgroup_of(path: &str) -> anyhow::Result<(u64, u32)> {
    use std::os::unix::fs::MetadataExt;
    let root = crate::os::cgroup2_root().context("--cgroup: no cgroup v2 hierarchy is mounted")?;
    let relative = path.trim_start_matches('/');
    let dir = root.join(relative);
    let meta = std::fs::metadata(&dir)
        .with_context(|| format!("--cgroup {path}: no such cgroup under {}", root.display()))?;
    anyhow::ensure!(meta.is_dir(), "--cgroup {path}: not a cgroup directory");
    let level = relative.split('/').filter(|c| !c.is_empty()).count() as u32;
    Ok((meta.ino(), level))
}

fn kernel_btf() -> anyhow::Result<Btf> {
    Btf::from_sys_fs().map_err(|err| {
        anyhow::anyhow!(
            "no kernel BTF at /sys/kernel/btf/vmlinux ({err}); tenge-trace needs a kernel built with CONFIG_DEBUG_INFO_BTF"
        )
    })
}

fn require_privileges() -> anyhow::Result<()> {
    let caps = Capabilities::current();
    if caps.euid != 0 && !(caps.bpf && caps.perfmon) && !caps.sys_admin {
        bail!(
            "not root: tracing needs root or CAP_BPF + CAP_PERFMON (euid {})",
            caps.euid
        );
    }
    Ok(())
}
