//! The trace file: versioned, self-describing, checksummed.
//!
//! ```text
//! file    := header block* trailer
//! header  := "TENGETR\0" | version u32 | len u32 | crc32 u32 | meta JSON (len bytes)
//! block   := "EVTS" | count u32 | len u32 | crc32 u32 | settled u64 | records (len bytes)
//! trailer := "END\0" | 0 u32 | len u32 | crc32 u32 | summary JSON (len bytes)
//! ```
//! All integers little endian. Records are stored exactly as the kernel wrote
//! them (`bpf/tenge_abi.h`), each delimited by its kind's fixed size, so a
//! block decodes without copying framing. A block's `settled` time says
//! that every record stamped before it is in that block or an earlier one:
//! `u64::MAX` where the records are in time order; a recording's records
//! come as the ring gave them, and the reader puts them in time order (see
//! `reorder.rs`). Version 1 blocks have no `settled` and are in time order.
//! A file without its trailer (the recorder was killed) or with a bad checksum is rejected with the offset
//! where it went wrong, never with a panic; or, [salvaging](TraceReader::salvaging),
//! read up to its last whole checksummed block, with the damage named.
//!
//! A recording flushes what it holds every [`FLUSH_EVERY`]: a recorder killed
//! outright loses the events of about that long at most.

use crate::event::{record_len, Event};
use crate::os::clock_ns;
use crate::plan::{HookHits, ProbePlan};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub const MAGIC: [u8; 8] = *b"TENGETR\0";
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version this build reads.
pub const FORMAT_READABLE: u32 = 1;

/// How far out of time order a recording's records may come: the collector
/// holds a record this long for the journeys that began before it
/// (`watch`'s alerts come this much later), and a replay takes the time up
/// to this much before its newest record as wholly read.
pub const HOLD_NS: u64 = 50_000_000;
const BLOCK_TAG: [u8; 4] = *b"EVTS";
const TRAILER_TAG: [u8; 4] = *b"END\0";
mod output;
mod reorder;

/// Records are checksummed in blocks of about this size: big enough to
/// amortise the checksum, small enough to lose little to a bad byte.
const BLOCK_BYTES: usize = 256 * 1024;
/// How far [`TraceReader::for_each_ahead`] looks ahead, in records: about as
/// many events as replaying takes for a load from memory to arrive.
pub const LOOK_AHEAD: usize = 8;

/// The events [`TraceReader::for_each_ahead`] shows beside the current one.
#[derive(Clone, Copy, Default)]
pub struct Ahead<'a> {
    /// [`LOOK_AHEAD`] records on.
    pub near: Option<&'a Event>,
    /// Twice as far.
    pub far: Option<&'a Event>,
}
/// How often a recording puts what it holds in the file ([`TraceWriter::flush`]).
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Bytes staged between two writes to the file: a direct write's fixed cost
/// (pinning the pages, the request) is then small per byte.
const WRITE_BYTES: usize = 1 << 20;
/// A block is sealed once it holds `BLOCK_BYTES`, so its last record starts
/// before that and ends this much later at most: enough for any record.
const RECORD_ROOM: usize = 8 * 1024;
const HEAD: usize = 16;
/// A block's `settled` time, before its records.
const SETTLED: usize = 8;
/// Upper bound on a block or JSON section, so a corrupt length cannot make
/// the reader allocate gigabytes.
const MAX_SECTION: u32 = 64 * 1024 * 1024;

/// What a trace was recorded from and how: enough to interpret it on another host.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TraceMeta {
    pub format_version: u32,
    pub abi_version: u32,
    pub tool_version: String,
    pub kernel_release: String,
    pub hostname: String,
    /// CLOCK_REALTIME − CLOCK_MONOTONIC at the start, in ns: `ts_ns + boot_offset_ns` is Unix time.
    pub boot_offset_ns: i64,
    pub started_unix_ns: u64,
    /// The probe plan the recorder used (which hook, which backend).
    pub probe_plan: serde_json::Value,
    /// The in-kernel filters.
    pub filters: serde_json::Value,
    /// 1-in-N packet sampling (1 = every packet).
    pub sample_every: u32,
    /// The sequence-space block sampling chose by ([`crate::event::SAMPLE_BLOCK`]);
    /// 0 in files from before block sampling, whose sampled events the
    /// analyses cannot follow.
    #[serde(default)]
    pub sample_block_bytes: u32,
    /// Sampling by time instead (`record --slice`): every probe attached for
    /// one slice of this many ns in each `sample_every`, every event of the
    /// slice kept, `pause` records between the slices; 0: by bytes.
    #[serde(default)]
    pub sample_slice_ns: u64,
    /// The command traced with `record -- CMD`, if any.
    pub command: Vec<String>,
    /// Size of a record of each kind, by kind name: the file describes its own layout.
    pub record_sizes: BTreeMap<String, usize>,
    /// What the kernel addresses in the records (`skb`, `napi`, the drop
    /// `location`) are; files from before this field kept them.
    #[serde(default = "KernelPointers::kept")]
    pub kernel_pointers: KernelPointers,
    /// `net.core.rmem_max` of the recording host: `SO_RCVBUF` is cut to it,
    /// so the receive-buffer advice needs it. None in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rmem_max: Option<u64>,
}

/// Kernel addresses as a recording stores them.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum KernelPointers {
    /// Each replaced by an opaque 48-bit identifier, keyed by a secret of
    /// the recording (the same address, the same identifier): the analyses
    /// match packets across hooks by them, and nobody learns an address
    /// (heap and text addresses defeat KASLR).
    #[default]
    Hashed,
    /// As the kernel gave them (`record --keep-kernel-pointers`).
    Kept,
}

impl KernelPointers {
    fn kept() -> KernelPointers {
        KernelPointers::Kept
    }
}

/// Replaces the kernel addresses of records by keyed identifiers.
struct PointerHasher {
    key: std::collections::hash_map::RandomState,
    /// The identifiers of addresses seen lately, direct-mapped: the hops of
    /// a packet's journey carry its address again and again, and hashing
    /// every record's was a tenth of the collector's time.
    memo: Box<[(u64, u64); POINTER_MEMO]>,
}

const POINTER_MEMO: usize = 256;

impl PointerHasher {
    const SKB: usize = std::mem::offset_of!(crate::abi::tt_hdr, skb);
    const KIND: usize = std::mem::offset_of!(crate::abi::tt_hdr, kind);
    const BODY: usize = std::mem::size_of::<crate::abi::tt_hdr>();

    fn new() -> PointerHasher {
        PointerHasher {
            key: Default::default(),
            memo: Box::new([(0, 0); POINTER_MEMO]),
        }
    }

    /// The identifier of `address`: never 0 (no address stays none), never
    /// in the kernel's upper half (no identifier looks like an address).
    fn id(&mut self, address: u64) -> u64 {
        use std::hash::BuildHasher;
        if address == 0 {
            return 0;
        }
        // Fibonacci hashing: slab objects' addresses differ in middle bits.
        let slot = (address.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % POINTER_MEMO;
        let (seen, id) = &mut self.memo[slot];
        if *seen != address {
            *seen = address;
            *id = (self.key.hash_one(address) >> 16).max(1);
        }
        *id
    }

    fn hide_at(&mut self, record: &mut [u8], at: usize) {
        if let Some(field) = record.get_mut(at..at + 8) {
            let address = u64::from_ne_bytes(field.try_into().expect("8 bytes"));
            field.copy_from_slice(&self.id(address).to_ne_bytes());
        }
    }

    #[inline]
    fn hide(&mut self, record: &mut [u8]) {
        use crate::abi::tt_kind;
        self.hide_at(record, Self::SKB);
        let at = match record.get(Self::KIND).map(|&k| u32::from(k)) {
            Some(k) if k == tt_kind::TT_KIND_NAPI_POLL as u32 => {
                std::mem::offset_of!(crate::abi::tt_napi_poll, napi)
            }
            Some(k) if k == tt_kind::TT_KIND_KFREE_SKB as u32 => {
                std::mem::offset_of!(crate::abi::tt_kfree_skb, location)
            }
            _ => return,
        };
        self.hide_at(record, Self::BODY + at);
    }
}

impl TraceMeta {
    /// Fills in the fields that describe this build and this host.
    pub fn for_this_host() -> TraceMeta {
        let mut record_sizes = BTreeMap::new();
        for kind in 0..=u8::MAX {
            if let (Some(name), Some(len)) = (crate::event::kind_name(kind), record_len(kind)) {
                record_sizes.insert(name.to_string(), len);
            }
        }
        TraceMeta {
            format_version: FORMAT_VERSION,
            abi_version: crate::abi::TT_ABI_VERSION,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            kernel_release: crate::os::kernel_release(),
            hostname: crate::os::hostname(),
            boot_offset_ns: crate::os::realtime_offset_ns(),
            started_unix_ns: clock_ns(libc::CLOCK_REALTIME),
            sample_every: 1,
            sample_block_bytes: crate::event::SAMPLE_BLOCK,
            record_sizes,
            kernel_pointers: KernelPointers::Hashed,
            rmem_max: crate::os::rmem_max(),
            ..Default::default()
        }
    }

    /// The header of a recording on this host by the probes of `plan`,
    /// kept by `filters`, sampling 1 in `sample_every` blocks of bytes (or
    /// slices of `sample_slice_ns`): what every command that records writes
    /// first.
    pub fn of_session(
        plan: &ProbePlan,
        filters: &impl Serialize,
        sample_every: u32,
        sample_slice_ns: u64,
    ) -> serde_json::Result<TraceMeta> {
        Ok(TraceMeta {
            probe_plan: serde_json::to_value(plan)?,
            filters: serde_json::to_value(filters)?,
            sample_every,
            sample_slice_ns,
            ..TraceMeta::for_this_host()
        })
    }
}

/// How the recording ended and what it lost.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TraceSummary {
    pub events: u64,
    /// Events the kernel could not queue (ring buffer full), by kind name. Exact.
    pub lost: BTreeMap<String, u64>,
    pub duration_ns: u64,
    pub ended_unix_ns: u64,
    /// "duration", "command exited", "interrupted", "error: ..."
    pub end_reason: String,
    /// Symbolized kernel stacks of `cpu_sample` events, by stack id (leaf first).
    pub stacks: BTreeMap<i32, Vec<String>>,
    /// Symbolized user stacks of `cpu_sample` events, by `"TGID:STACK_ID"`
    /// (leaf first): a user stack's addresses mean something in its process only.
    #[serde(default)]
    pub user_stacks: BTreeMap<String, Vec<String>>,
    /// Names of the processes `cpu_sample` events hit, read when first seen.
    #[serde(default)]
    pub process_names: BTreeMap<u32, String>,
    /// Each hooked tracepoint's hits and its program's runs, when counted
    /// (`record --count-hits`): hits beyond runs are events the kernel
    /// never gave a program, which `lost` cannot include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_hits: Option<Vec<HookHits>>,
    /// The paths (under the cgroup v2 root) of the cgroups `sock_task`
    /// events name, by id, resolved on the recording host at the end.
    #[serde(default)]
    pub cgroups: BTreeMap<u64, String>,
}

/// Where a damaged file stopped being readable, and what came before it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Damage {
    /// The byte where the damage starts (the last whole block ends there).
    pub offset: u64,
    /// Events read before it.
    pub events_read: u64,
    /// What is wrong there.
    pub what: String,
}

impl TraceSummary {
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum()
    }

    /// Hook hits that ran no program, when they were counted.
    pub fn hits_not_run(&self) -> Option<u64> {
        self.hook_hits.as_deref().map(HookHits::total_not_run)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{0}: not a tenge-trace file (bad magic)")]
    NotATrace(PathBuf),
    #[error("{path}: format version {found} is not supported (this build reads {FORMAT_READABLE} to {FORMAT_VERSION})")]
    Version { path: PathBuf, found: u32 },
    #[error(
        "{path}: event ABI version {found}: this build reads {} to {}",
        crate::abi::TT_ABI_READABLE,
        crate::abi::TT_ABI_VERSION
    )]
    Abi { path: PathBuf, found: u32 },
    #[error(
        "{path}: sampled 1 in {every} by a rule this build does not follow (blocks of {found} B; \
         this build samples blocks of {} B): record it again",
        crate::event::SAMPLE_BLOCK
    )]
    SampleRule {
        path: PathBuf,
        every: u32,
        found: u32,
    },
    #[error("{path}: corrupt at byte {offset}: {what}")]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    #[error("{path}: truncated at byte {offset} after {events} events (the recorder did not finish the file)")]
    Truncated {
        path: PathBuf,
        offset: u64,
        events: u64,
    },
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn section(tag: [u8; 4], count: u32, payload: &[u8]) -> [u8; 16] {
    let mut head = [0u8; 16];
    head[..4].copy_from_slice(&tag);
    head[4..8].copy_from_slice(&count.to_le_bytes());
    head[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    head[12..16].copy_from_slice(&crc(payload).to_le_bytes());
    head
}

/// Writes a trace. Records are copied once, into the block being filled in
/// the output's buffer; a block's head is filled in when it is sealed, and
/// `finish` writes the trailer.
pub struct TraceWriter {
    out: output::Output,
    path: PathBuf,
    /// Where the file is written until it is finished, then renamed to
    /// `path`; none for a stream or a device, written in place.
    partial: Option<PathBuf>,
    /// Where the open block's head goes in the staged bytes.
    block_start: usize,
    /// Records in the open block; 0 when no block is open.
    block_count: u32,
    events: u64,
    /// `write_event` encodes here.
    encoded: Vec<u8>,
    /// Set unless the header says the addresses are kept.
    pointers: Option<PointerHasher>,
    /// What the sealed block says of its records' times (see the module's doc).
    settled_ns: u64,
}

/// The name a recording has until it is finished: `rec.tt.partial`.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".partial");
    PathBuf::from(name)
}

/// Opens where a recording for `path` is written: `-` is standard output, a
/// device or a pipe is written in place; a file is written as
/// [`partial_path`], new and private (0600: a recording holds flows and
/// process names), and replaces `path` only once finished.
fn open_output(path: &Path) -> io::Result<(File, Option<PathBuf>)> {
    use std::os::fd::AsFd;
    if path == Path::new("-") {
        return Ok((File::from(io::stdout().as_fd().try_clone_to_owned()?), None));
    }
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return Ok((File::options().write(true).open(path)?, None));
    }
    let partial = partial_path(path);
    // One a killed recording left (or anything planted there) goes; the
    // new one is created, never opened through a link.
    match std::fs::remove_file(&partial) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&partial)?;
    Ok((file, Some(partial)))
}

impl TraceWriter {
    /// Starts a recording for `path` (see [`open_output`] for where it goes
    /// until finished).
    pub fn create(path: &Path, meta: &TraceMeta) -> Result<TraceWriter, TraceError> {
        let io_err = |source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        };
        let (file, partial) = open_output(path).map_err(io_err)?;
        let out = output::Output::new(
            file,
            WRITE_BYTES + BLOCK_BYTES + HEAD + SETTLED + RECORD_ROOM,
        )
        .map_err(io_err)?;
        let mut writer = TraceWriter {
            out,
            path: path.to_path_buf(),
            partial,
            block_start: 0,
            block_count: 0,
            events: 0,
            encoded: Vec::new(),
            pointers: (meta.kernel_pointers == KernelPointers::Hashed).then(PointerHasher::new),
            settled_ns: u64::MAX,
        };
        let json = serde_json::to_vec(meta).expect("meta serializes");
        let mut head = MAGIC.to_vec();
        head.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        head.extend_from_slice(&(json.len() as u32).to_le_bytes());
        head.extend_from_slice(&crc(&json).to_le_bytes());
        let staged = writer
            .out
            .push_all(&head)
            .and_then(|_| writer.out.push_all(&json));
        staged.map_err(|source| writer.io_error(source))?;
        writer.flush()?;
        Ok(writer)
    }

    /// Seals the open block and hands everything to the file: a recorder
    /// killed after this loses nothing written before it.
    pub fn flush(&mut self) -> Result<(), TraceError> {
        self.seal_block();
        self.out.flush().map_err(|source| self.io_error(source))
    }

    /// From here on the records come out of time order: each block says
    /// when they were all written up to ([`settle`](Self::settle)).
    pub fn out_of_time_order(&mut self) {
        self.seal_block();
        self.settled_ns = 0;
    }

    /// Every record stamped before `before_ns` has been written (out of
    /// time order; written in it, this says nothing new).
    pub fn settle(&mut self, before_ns: u64) {
        self.settled_ns = self.settled_ns.max(before_ns);
    }

    /// Appends one raw record (as read from the ring buffer).
    #[inline]
    pub fn write_record(&mut self, record: &[u8]) -> Result<(), TraceError> {
        if self.block_count == 0 || record.len() > self.out.room() {
            self.open_block(record.len())?;
        }
        let start = self.out.len();
        self.out.push(record);
        if let Some(pointers) = &mut self.pointers {
            pointers.hide(self.out.staged_mut(start));
        }
        self.block_count += 1;
        self.events += 1;
        if self.out.len() - self.block_start - HEAD - SETTLED >= BLOCK_BYTES {
            self.seal_block();
        }
        Ok(())
    }

    pub fn write_event(&mut self, ev: &Event) -> Result<(), TraceError> {
        let mut encoded = std::mem::take(&mut self.encoded);
        encoded.clear();
        ev.encode(&mut encoded);
        let written = self.write_record(&encoded);
        self.encoded = encoded;
        written
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    /// Seals the open block, if any, and starts one with room for a first
    /// record of `len` bytes, writing staged pages out first when a write's
    /// worth is staged or room is short.
    #[cold]
    fn open_block(&mut self, len: usize) -> Result<(), TraceError> {
        self.seal_block();
        if self.out.len() >= WRITE_BYTES || self.out.room() < HEAD + SETTLED + len {
            self.out
                .write_pages()
                .map_err(|source| self.io_error(source))?;
        }
        if self.out.room() < HEAD + SETTLED + len {
            let source = io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a record of {len} bytes is longer than a block"),
            );
            return Err(self.io_error(source));
        }
        self.block_start = self.out.len();
        self.out.push(&[0; HEAD + SETTLED]);
        Ok(())
    }

    /// Fills in the open block's head: it is then ready to be written.
    fn seal_block(&mut self) {
        if self.block_count == 0 {
            return;
        }
        let block = self.out.staged_mut(self.block_start);
        block[HEAD..HEAD + SETTLED].copy_from_slice(&self.settled_ns.to_le_bytes());
        let head = section(BLOCK_TAG, self.block_count, &block[HEAD..]);
        block[..HEAD].copy_from_slice(&head);
        self.block_count = 0;
    }

    /// Writes the last block and the trailer, syncs the file and renames it
    /// into place. Returns the CPU time of the thread that wrote the file
    /// (the writer's own thread only staged the bytes).
    pub fn finish(mut self, summary: &TraceSummary) -> Result<Duration, TraceError> {
        self.seal_block();
        let json = serde_json::to_vec(summary).expect("summary serializes");
        let mut trailer = section(TRAILER_TAG, 0, &json).to_vec();
        trailer.extend_from_slice(&json);
        let written = self.out.finish(&trailer, true);
        let cpu = written.map_err(|source| self.io_error(source))?;
        if let Some(partial) = self.partial.take() {
            std::fs::rename(&partial, &self.path).map_err(|source| self.io_error(source))?;
        }
        Ok(cpu)
    }

    /// Where the recording is until it is finished (`None`: written in place).
    pub fn partial(&self) -> Option<&Path> {
        self.partial.as_deref()
    }

    fn io_error(&self, source: io::Error) -> TraceError {
        TraceError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

impl Drop for TraceWriter {
    /// A writer dropped unfinished (an error stopped the recording) leaves
    /// the events it took in its [partial](TraceWriter::partial) file, which
    /// the reader calls truncated and salvages.
    fn drop(&mut self) {
        self.seal_block();
        let _ = self.out.finish(&[], false);
    }
}

/// Reads a trace: the header on open, then events block by block, each
/// straight from the file into one reused buffer (no `BufReader` copy).
pub struct TraceReader {
    input: Box<dyn Read>,
    path: PathBuf,
    meta: TraceMeta,
    offset: u64,
    block: Vec<u8>,
    pos: usize,
    events: u64,
    summary: Option<TraceSummary>,
    salvage: bool,
    damage: Option<Damage>,
    /// Where the section being read starts.
    section_start: u64,
    /// The file's format version.
    version: u32,
    /// A block as read, when its records go through `reorder`.
    read: Vec<u8>,
    reorder: reorder::Reorder,
}

impl TraceReader {
    pub fn open(path: &Path) -> Result<TraceReader, TraceError> {
        let io_err = |source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        };
        // Non-blocking to open, so a FIFO nobody writes to reads as empty
        // rather than waiting forever; blocking again to read.
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(io_err)?;
        crate::os::set_fd_flags(&file, 0, libc::O_NONBLOCK).map_err(io_err)?;
        TraceReader::from_reader(Box::new(file), path)
    }

    /// Reads a trace from `input` (a pipe, bytes in memory), called `name` in errors.
    pub fn from_reader(input: Box<dyn Read>, name: &Path) -> Result<TraceReader, TraceError> {
        let path = name;
        let mut reader = TraceReader {
            input,
            path: path.to_path_buf(),
            meta: TraceMeta::default(),
            offset: 0,
            block: Vec::new(),
            pos: 0,
            events: 0,
            summary: None,
            salvage: false,
            damage: None,
            section_start: 0,
            version: 0,
            read: Vec::new(),
            reorder: reorder::Reorder::default(),
        };
        let mut magic = [0u8; 8];
        if reader.read_exact_or_eof(&mut magic)? < magic.len() || magic != MAGIC {
            return Err(TraceError::NotATrace(path.to_path_buf()));
        }
        let mut head = [0u8; 12];
        reader.read_section_head(&mut head)?;
        reader.version = u32_at(&head, 0);
        if !(FORMAT_READABLE..=FORMAT_VERSION).contains(&reader.version) {
            return Err(TraceError::Version {
                path: path.to_path_buf(),
                found: reader.version,
            });
        }
        let (len, sum) = (u32_at(&head, 4), u32_at(&head, 8));
        let mut json = Vec::new();
        reader.read_payload(&mut json, len, sum, "header")?;
        reader.meta =
            serde_json::from_slice(&json).map_err(|e| reader.corrupt(format!("header: {e}")))?;
        let readable = crate::abi::TT_ABI_READABLE..=crate::abi::TT_ABI_VERSION;
        if !readable.contains(&reader.meta.abi_version) {
            return Err(TraceError::Abi {
                path: path.to_path_buf(),
                found: reader.meta.abi_version,
            });
        }
        let meta = &reader.meta;
        if meta.sample_every > 1 && meta.sample_block_bytes != crate::event::SAMPLE_BLOCK {
            return Err(TraceError::SampleRule {
                path: path.to_path_buf(),
                every: meta.sample_every,
                found: meta.sample_block_bytes,
            });
        }
        Ok(reader)
    }

    pub fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    /// From here on, a file that is truncated or damaged after its header
    /// reads as if it ended at its last whole block: the events before the
    /// damage, a summary that says where it stopped, and [`damage`](Self::damage).
    pub fn salvaging(mut self) -> TraceReader {
        self.salvage = true;
        self
    }

    /// Where a salvaged file stopped being readable; `None` for a whole file.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Records that came in the file after a block had called their time
    /// settled: they are handed on after later ones.
    pub fn late(&self) -> u64 {
        self.reorder.late
    }

    /// The trailer; present once every event has been read.
    pub fn summary(&self) -> Option<&TraceSummary> {
        self.summary.as_ref()
    }

    /// Salvaging, ends the file at `err` with a summary of what was read;
    /// otherwise `err` itself.
    #[cold]
    fn damaged(&mut self, err: TraceError) -> Result<bool, TraceError> {
        let corrupt_or_truncated = matches!(
            err,
            TraceError::Corrupt { .. } | TraceError::Truncated { .. }
        );
        if !self.salvage || !corrupt_or_truncated {
            return Err(err);
        }
        let offset = self.section_start;
        self.block.clear();
        self.pos = 0;
        let what = match &err {
            TraceError::Corrupt { what, .. } => what.clone(),
            _ => "the file ends in the middle of a block or before its trailer".into(),
        };
        self.summary = Some(TraceSummary {
            events: self.events,
            end_reason: format!("damaged at byte {offset}: {what}"),
            ..TraceSummary::default()
        });
        // The whole blocks before the damage: their records still held.
        let held = self.reorder.release(u64::MAX, &mut self.block);
        self.damage = Some(Damage {
            offset,
            events_read: self.events + held,
            what,
        });
        Ok(held > 0)
    }

    /// The next event, `Ok(None)` after the trailer.
    pub fn next_event(&mut self) -> Result<Option<Event>, TraceError> {
        loop {
            while self.pos >= self.block.len() {
                if self.summary.is_some() || !self.next_block()? {
                    return Ok(None);
                }
            }
            let mut ev = Event::zeroed();
            if self.decode_next(&mut ev) {
                return Ok(Some(ev));
            }
            let err = self.bad_record();
            if !self.damaged(err)? {
                return Ok(None);
            }
        }
    }

    /// Reads every event and the trailer.
    pub fn for_each(&mut self, mut f: impl FnMut(&Event)) -> Result<&TraceSummary, TraceError> {
        self.for_each_ahead(|ev, _| f(ev))
    }

    /// [`for_each`](Self::for_each) that also shows `f`, with each event, the
    /// ones [`LOOK_AHEAD`] and twice that many records on in the same block
    /// (if any): time to start loading what they will need (see
    /// `Analysis::prefetch` in tenge_trace::analysis). Records
    /// are decoded once, into a ring, that far ahead of `f`.
    pub fn for_each_ahead(
        &mut self,
        mut f: impl FnMut(&Event, Ahead<'_>),
    ) -> Result<&TraceSummary, TraceError> {
        const FAR: usize = 2 * LOOK_AHEAD;
        const RING: usize = (FAR + 1).next_power_of_two();
        let mut ring = [Event::zeroed(); RING];
        loop {
            // Records of this block decoded, and given to `f`: the first FAR
            // decoded, then one given per record decoded, then the rest given.
            let mut decoded = 0;
            while decoded < FAR && self.decode_next(&mut ring[decoded]) {
                decoded += 1;
            }
            let mut given = 0;
            while decoded == given + FAR && self.decode_next(&mut ring[decoded % RING]) {
                let ahead = Ahead {
                    near: Some(&ring[(given + LOOK_AHEAD) % RING]),
                    far: Some(&ring[decoded % RING]),
                };
                f(&ring[given % RING], ahead);
                decoded += 1;
                given += 1;
            }
            while given < decoded {
                let near = given + LOOK_AHEAD;
                let ahead = Ahead {
                    near: (near < decoded).then(|| &ring[near % RING]),
                    far: None,
                };
                f(&ring[given % RING], ahead);
                given += 1;
            }
            if self.pos < self.block.len() {
                let err = self.bad_record();
                match self.damaged(err)? {
                    // The records held from the blocks before it.
                    true => continue,
                    false => break,
                }
            }
            if self.summary.is_some() || !self.next_block()? {
                break;
            }
        }
        Ok(self
            .summary
            .as_ref()
            .expect("the loop ends only after the trailer or the damage"))
    }

    /// Decodes the record at `pos` into `ev`; false at the end of the block
    /// or at a record that is not one ([`bad_record`](Self::bad_record) then says which).
    #[inline(always)]
    fn decode_next(&mut self, ev: &mut Event) -> bool {
        let Some(len) = Event::decode_first(&self.block[self.pos..], ev) else {
            return false;
        };
        if !ev.within_kernel_bounds() {
            return false;
        }
        self.pos += len;
        self.events += 1;
        true
    }

    #[cold]
    fn bad_record(&self) -> TraceError {
        self.corrupt(format!(
            "record {} of a block has an unknown kind, overruns it, or values no kernel gives",
            self.events
        ))
    }

    /// Reads the next section: true for a block of events, false for the
    /// trailer (or, salvaging, the damage).
    fn next_block(&mut self) -> Result<bool, TraceError> {
        match self.read_section() {
            Err(err) => self.damaged(err),
            ok => ok,
        }
    }

    fn read_section(&mut self) -> Result<bool, TraceError> {
        self.section_start = self.offset;
        let mut head = [0u8; 16];
        let got = self.read_exact_or_eof(&mut head)?;
        if got < head.len() {
            return Err(TraceError::Truncated {
                path: self.path.clone(),
                offset: self.offset,
                events: self.events,
            });
        }
        let (count, len, sum) = (u32_at(&head, 4), u32_at(&head, 8), u32_at(&head, 12));
        match [head[0], head[1], head[2], head[3]] {
            BLOCK_TAG => {
                let mut block = std::mem::take(&mut self.read);
                let read = self.read_payload(&mut block, len, sum, "event block");
                self.read = block;
                // Nothing of a bad block is decoded, as if it was never read.
                self.block.clear();
                self.pos = 0;
                read?;
                if count == 0 {
                    return Err(self.corrupt("empty event block".into()));
                }
                self.take_block()?;
                Ok(true)
            }
            TRAILER_TAG => {
                let mut json = Vec::new();
                self.read_payload(&mut json, len, sum, "trailer")?;
                let summary = serde_json::from_slice(&json)
                    .map_err(|e| self.corrupt(format!("trailer: {e}")))?;
                self.summary = Some(summary);
                self.reorder.release(u64::MAX, &mut self.block);
                Ok(!self.block.is_empty())
            }
            _ => Err(self.corrupt("unknown section tag".into())),
        }
    }

    /// Puts the records of the block just read where they are decoded from:
    /// as they are, where the file says they are in time order and none is
    /// held; else those its `settled` time lets go, in time order.
    fn take_block(&mut self) -> Result<(), TraceError> {
        if self.version < 2 {
            std::mem::swap(&mut self.read, &mut self.block);
            return Ok(());
        }
        let Some(settled) = self.read.get(..SETTLED) else {
            return Err(self.corrupt("event block without its settled time".into()));
        };
        let settled = u64::from_le_bytes(settled.try_into().expect("8 bytes"));
        if settled == u64::MAX && self.reorder.is_empty() {
            std::mem::swap(&mut self.read, &mut self.block);
            self.pos = SETTLED;
            return Ok(());
        }
        if let Err(index) = self.reorder.push(&mut self.read, SETTLED) {
            return Err(self.corrupt(format!(
                "record {index} of a block has an unknown kind or overruns it"
            )));
        }
        self.reorder.release(settled, &mut self.block);
        Ok(())
    }

    fn read_section_head(&mut self, head: &mut [u8]) -> Result<(), TraceError> {
        if self.read_exact_or_eof(head)? < head.len() {
            return Err(TraceError::Truncated {
                path: self.path.clone(),
                offset: self.offset,
                events: 0,
            });
        }
        Ok(())
    }

    /// Reads a section's payload into `buf` (reused: blocks are all about
    /// the same size, so it is allocated once, not per block).
    fn read_payload(
        &mut self,
        buf: &mut Vec<u8>,
        len: u32,
        sum: u32,
        what: &str,
    ) -> Result<(), TraceError> {
        if len > MAX_SECTION {
            return Err(self.corrupt(format!("{what} claims {len} bytes")));
        }
        // Grown as the bytes arrive: a damaged length takes no memory the
        // file does not fill.
        buf.clear();
        let read = (&mut self.input).take(u64::from(len)).read_to_end(buf);
        let got = read.map_err(|source| TraceError::Io {
            path: self.path.clone(),
            source,
        })?;
        self.offset += got as u64;
        if got < len as usize {
            return Err(TraceError::Truncated {
                path: self.path.clone(),
                offset: self.offset,
                events: self.events,
            });
        }
        if crc(buf) != sum {
            self.offset -= len as u64;
            return Err(self.corrupt(format!("{what} checksum mismatch")));
        }
        Ok(())
    }

    /// Reads as much of `buf` as the file has; returns how much was read.
    fn read_exact_or_eof(&mut self, buf: &mut [u8]) -> Result<usize, TraceError> {
        let mut got = 0;
        while got < buf.len() {
            match self.input.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TraceError::Io {
                        path: self.path.clone(),
                        source,
                    })
                }
            }
        }
        self.offset += got as u64;
        Ok(got)
    }

    fn corrupt(&self, what: String) -> TraceError {
        TraceError::Corrupt {
            path: self.path.clone(),
            offset: self.offset,
            what,
        }
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{abi_addr, tt_hdr, tt_window_adv, Body};

    /// Every command that records (record, lab -o, the bench)
    /// writes its plan, filters and sampling into the header.
    #[test]
    fn a_session_header_carries_plan_filters_and_sampling() {
        use crate::plan::PlannedProbe;
        let plan = ProbePlan {
            probes: vec![PlannedProbe {
                hook: "tcp:tcp_probe".into(),
                kind: "tcp_rcv".into(),
                backend: None,
                program: String::new(),
                tried: Vec::new(),
                feeds: String::new(),
            }],
        };
        let filters = serde_json::json!({"port": 5201});
        let meta = TraceMeta::of_session(&plan, &filters, 8, 0).unwrap();
        assert_eq!(meta.probe_plan["probes"][0]["hook"], "tcp:tcp_probe");
        assert_eq!(meta.filters, filters);
        assert_eq!(meta.sample_every, 8);
        assert_eq!(meta.kernel_pointers, KernelPointers::Hashed);
    }

    fn events(n: usize) -> Vec<Event> {
        let (family, saddr) = abi_addr("198.18.0.2".parse().unwrap());
        (0..n)
            .map(|i| {
                let hdr = tt_hdr {
                    ts_ns: i as u64,
                    sock_cookie: 9,
                    family,
                    saddr,
                    sport: 5001,
                    ..Default::default()
                };
                let body = tt_window_adv {
                    seq: i as u32,
                    window: 26844,
                    rcv_mss: 8948,
                    ..Default::default()
                };
                Event::new(hdr, Body::WindowAdv(body))
            })
            .collect()
    }

    fn write(path: &Path, evs: &[Event]) -> TraceSummary {
        let mut meta = TraceMeta::for_this_host();
        meta.sample_every = 4;
        let mut w = TraceWriter::create(path, &meta).unwrap();
        for ev in evs {
            w.write_event(ev).unwrap();
        }
        let mut summary = TraceSummary {
            events: w.events(),
            end_reason: "duration".into(),
            ..Default::default()
        };
        summary.lost.insert("window_adv".into(), 3);
        w.finish(&summary).unwrap();
        summary
    }

    /// `evs` as a recording writes them: out of time order, in chunks of
    /// `chunk` reversed (each chunk's time settled once written), blocks
    /// flushed every `per_block`; finished unless `unfinished`.
    fn write_reversed_chunks(
        path: &Path,
        evs: &[Event],
        chunk: usize,
        per_block: usize,
        unfinished: bool,
    ) -> Vec<Event> {
        let mut w = TraceWriter::create(path, &TraceMeta::for_this_host()).unwrap();
        w.out_of_time_order();
        let mut written = Vec::new();
        for part in evs.chunks(chunk) {
            for ev in part.iter().rev() {
                w.write_event(ev).unwrap();
                written.push(*ev);
                if written.len() % per_block == 0 {
                    w.flush().unwrap();
                }
            }
            w.settle(part.last().unwrap().hdr.ts_ns + 1);
        }
        match unfinished {
            true => drop(w),
            false => drop(w.finish(&TraceSummary::default()).unwrap()),
        }
        written
    }

    /// The `seq` of each event: which one it was.
    fn seqs(evs: &[Event]) -> Vec<u32> {
        evs.iter()
            .map(|ev| match ev.body {
                Body::WindowAdv(w) => w.seq,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn records_written_out_of_time_order_are_read_in_it() {
        let path = tmp("reorder.ttr");
        // Two events a time (seq says which), 3000 in chunks of 70 reversed,
        // blocks of 250: each block holds records of times it does not settle.
        let mut evs = events(3000);
        for (i, ev) in evs.iter_mut().enumerate() {
            ev.hdr.ts_ns = 1_000 + i as u64 / 2;
        }
        let mut written = write_reversed_chunks(&path, &evs, 70, 250, false);
        // In time order; of the same time, as written.
        written.sort_by_key(|ev| ev.hdr.ts_ns);
        let (_, read, _) = read_all(&path).unwrap();
        assert_eq!(seqs(&read), seqs(&written));
        let mut r = TraceReader::open(&path).unwrap();
        let mut one_by_one = Vec::new();
        while let Some(ev) = r.next_event().unwrap() {
            one_by_one.push(ev);
        }
        assert_eq!(seqs(&one_by_one), seqs(&written));
        assert_eq!(r.late(), 0);
    }

    #[test]
    fn a_record_written_after_its_time_was_settled_is_late() {
        let path = tmp("late.ttr");
        let evs = events(10);
        let mut w = TraceWriter::create(&path, &TraceMeta::for_this_host()).unwrap();
        w.out_of_time_order();
        for ev in &evs[1..] {
            w.write_event(ev).unwrap();
        }
        w.settle(5);
        w.flush().unwrap();
        w.write_event(&evs[0]).unwrap();
        w.finish(&TraceSummary::default()).unwrap();
        let mut r = TraceReader::open(&path).unwrap();
        let mut read = Vec::new();
        r.for_each(|ev| read.push(*ev)).unwrap();
        assert_eq!(seqs(&read), [1, 2, 3, 4, 0, 5, 6, 7, 8, 9]);
        assert_eq!(r.late(), 1);
    }

    #[test]
    fn salvaging_an_unfinished_recording_gives_what_it_held_in_time_order() {
        let out = tmp("salvage-reorder.ttr");
        let path = TempFile(partial_path(&out));
        let evs = events(1000);
        write_reversed_chunks(&out, &evs, 300, 100, true);
        let mut r = TraceReader::open(&path).unwrap().salvaging();
        let mut read = Vec::new();
        r.for_each(|ev| read.push(*ev)).unwrap();
        assert_eq!(seqs(&read), (0..1000).collect::<Vec<_>>());
        // Counted as read before the damage: each came in a whole block.
        assert_eq!(r.damage().unwrap().events_read, 1000);
    }

    /// Version 1 files (no settled time in their blocks) are read as they were.
    #[test]
    fn version_1_files_are_read() {
        let path = tmp("v1.ttr");
        write(&path, &events(100));
        let v2 = std::fs::read(&path).unwrap();
        let head_len = MAGIC.len() + 12 + u32_at(&v2, MAGIC.len() + 4) as usize;
        let mut v1 = v2[..head_len].to_vec();
        v1[MAGIC.len()..MAGIC.len() + 4].copy_from_slice(&1u32.to_le_bytes());
        let block_len = u32_at(&v2, head_len + 8) as usize;
        let records = &v2[head_len + HEAD + SETTLED..head_len + HEAD + block_len];
        v1.extend_from_slice(&section(BLOCK_TAG, 100, records));
        v1.extend_from_slice(records);
        v1.extend_from_slice(&v2[head_len + HEAD + block_len..]);
        std::fs::write(&path, &v1).unwrap();
        let (_, read, summary) = read_all(&path).unwrap();
        assert_eq!(seqs(&read), (0..100).collect::<Vec<_>>());
        assert_eq!(summary.end_reason, "duration");
        v1[MAGIC.len()] = 3;
        std::fs::write(&path, &v1).unwrap();
        assert!(matches!(
            read_all(&path),
            Err(TraceError::Version { found: 3, .. })
        ));
    }

    fn read_all(path: &Path) -> Result<(TraceMeta, Vec<Event>, TraceSummary), TraceError> {
        let mut r = TraceReader::open(path)?;
        let mut out = Vec::new();
        let summary = r.for_each(|ev| out.push(*ev))?.clone();
        Ok((r.meta().clone(), out, summary))
    }

    /// A file of this test process in the temp dir, removed when dropped.
    struct TempFile(PathBuf);

    impl std::ops::Deref for TempFile {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl AsRef<Path> for TempFile {
        fn as_ref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
            let _ = std::fs::remove_file(partial_path(&self.0));
        }
    }

    fn tmp(name: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("tt-trace-test-{}-{name}", std::process::id())))
    }

    #[test]
    fn sampled_files_of_another_rule_are_refused() {
        let path = tmp("old-rule.ttr");
        let mut meta = TraceMeta::for_this_host();
        meta.sample_block_bytes = 0; // as before block sampling
        meta.sample_every = 1;
        TraceWriter::create(&path, &meta)
            .unwrap()
            .finish(&TraceSummary::default())
            .unwrap();
        assert!(
            TraceReader::open(&path).is_ok(),
            "unsampled: nothing to follow"
        );
        meta.sample_every = 64;
        TraceWriter::create(&path, &meta)
            .unwrap()
            .finish(&TraceSummary::default())
            .unwrap();
        let err = TraceReader::open(&path).err().expect("refused");
        assert!(
            matches!(
                err,
                TraceError::SampleRule {
                    every: 64,
                    found: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("record it again"), "{err}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn round_trip_spans_blocks() {
        let path = tmp("round.ttr");
        // Enough events for several 256 KiB blocks.
        let evs = events(10_000);
        let summary = write(&path, &evs);
        let (meta, back, got) = read_all(&path).unwrap();
        assert_eq!(meta.sample_every, 4);
        assert_eq!(meta.abi_version, crate::abi::TT_ABI_VERSION);
        assert!(meta.record_sizes["window_adv"] > 72);
        assert_eq!(back.len(), evs.len());
        assert_eq!(got, summary);
        assert_eq!(got.lost_total(), 3);
        for (a, b) in evs.iter().zip(&back) {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            a.encode(&mut x);
            b.encode(&mut y);
            assert_eq!(x, y);
        }
    }

    #[test]
    fn reading_ahead_gives_every_event_in_order_with_the_ones_ahead() {
        let path = tmp("ahead.ttr");
        let evs = events(10_000);
        let summary = write(&path, &evs);
        let mut r = TraceReader::open(&path).unwrap();
        let (mut seen, mut near_missing) = (Vec::new(), 0);
        let got = r
            .for_each_ahead(|ev, ahead| {
                // The events' ts_ns number them.
                let ts = ev.hdr.ts_ns;
                seen.push(ts);
                match ahead.near {
                    Some(near) => assert_eq!(near.hdr.ts_ns, ts + LOOK_AHEAD as u64),
                    None => near_missing += 1,
                }
                if let Some(far) = ahead.far {
                    assert_eq!(far.hdr.ts_ns, ts + 2 * LOOK_AHEAD as u64);
                }
            })
            .unwrap()
            .clone();
        assert_eq!(got, summary);
        assert_eq!(seen, (0..10_000).collect::<Vec<u64>>());
        // Only the last LOOK_AHEAD events of each block have none: the
        // 10000 records (about 100 bytes) fill four 256 KiB blocks.
        let blocks = 10_000 * record_len(evs[0].hdr.kind).unwrap() / BLOCK_BYTES + 1;
        assert_eq!(near_missing, blocks * LOOK_AHEAD);
    }

    #[test]
    fn a_writer_dropped_unfinished_leaves_every_event_it_took() {
        let path = tmp("dropped.ttr");
        let evs = events(30_000);
        let mut w = TraceWriter::create(&path, &TraceMeta::for_this_host()).unwrap();
        for ev in &evs {
            w.write_event(ev).unwrap();
        }
        drop(w);
        assert!(!path.exists(), "an unfinished recording is not in place");
        let err = read_all(&partial_path(&path)).unwrap_err();
        assert!(
            matches!(err, TraceError::Truncated { events: 30_000, .. }),
            "{err}"
        );
    }

    #[test]
    fn truncated_files_are_rejected_at_every_cut() {
        let path = tmp("trunc.ttr");
        write(&path, &events(3000));
        let bytes = std::fs::read(&path).unwrap();
        let cut_path = tmp("trunc-cut.ttr");
        for cut in [0, 5, 8, 20, 300, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&cut_path, &bytes[..cut]).unwrap();
            let err = read_all(&cut_path).unwrap_err();
            let ok = match cut {
                0..=7 => matches!(err, TraceError::NotATrace(_)),
                _ => matches!(err, TraceError::Truncated { .. }),
            };
            assert!(ok, "cut at {cut}: {err}");
        }
    }

    #[test]
    fn corruption_is_detected() {
        let path = tmp("corrupt.ttr");
        write(&path, &events(500));
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let err = read_all(&path).unwrap_err();
        assert!(matches!(err, TraceError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("checksum"), "{err}");

        std::fs::write(&path, b"GIF89a not a trace at all").unwrap();
        assert!(matches!(
            read_all(&path).unwrap_err(),
            TraceError::NotATrace(_)
        ));
    }

    /// `evs` written in blocks of `per_block` (each flushed), unfinished.
    fn write_blocks(path: &Path, evs: &[Event], per_block: usize) -> TraceWriter {
        let mut w = TraceWriter::create(path, &TraceMeta::for_this_host()).unwrap();
        for (i, ev) in evs.iter().enumerate() {
            w.write_event(ev).unwrap();
            if i % per_block == per_block - 1 {
                w.flush().unwrap();
            }
        }
        w
    }

    /// Events read from `path` salvaging (none while even its header is not in).
    fn salvage(path: &Path) -> (u64, Option<Damage>, TraceSummary) {
        let Ok(r) = TraceReader::open(path) else {
            return (0, None, TraceSummary::default());
        };
        let mut r = r.salvaging();
        let mut n = 0;
        let summary = r.for_each(|_| n += 1).unwrap().clone();
        (n, r.damage().cloned(), summary)
    }

    #[test]
    fn salvaging_reads_every_whole_block_before_the_damage() {
        let out = tmp("salvage.ttr");
        drop(write_blocks(&out, &events(3000), 500));
        let path = TempFile(partial_path(&out));
        let whole = std::fs::read(&path).unwrap();
        let block = HEAD + SETTLED + 500 * record_len(events(1)[0].hdr.kind).unwrap();
        let header = whole.len() - 6 * block;
        // Cut in the middle of the fourth block: three blocks read.
        std::fs::write(&path, &whole[..header + 3 * block + block / 2]).unwrap();
        let (n, damage, summary) = salvage(&path);
        assert_eq!(n, 1500);
        let damage = damage.expect("damaged");
        assert_eq!(damage.offset, (header + 3 * block) as u64);
        assert_eq!(damage.events_read, 1500);
        assert!(
            summary.end_reason.starts_with("damaged at byte"),
            "{summary:?}"
        );
        assert!(matches!(read_all(&path), Err(TraceError::Truncated { .. })));
        // A flipped byte in the second block: the first is read.
        let mut flipped = whole.clone();
        flipped[header + block + block / 2] ^= 0x40;
        std::fs::write(&path, &flipped).unwrap();
        let (n, damage, _) = salvage(&path);
        assert_eq!(n, 500);
        assert!(damage.unwrap().what.contains("checksum"));
        // The unfinished file whole: every block, damaged only by its missing trailer.
        std::fs::write(&path, &whole).unwrap();
        let (n, damage, _) = salvage(&path);
        assert_eq!((n, damage.unwrap().offset), (3000, whole.len() as u64));
    }

    /// What was flushed is in the file while the writer runs on (a recorder
    /// killed now loses only what came after).
    #[test]
    fn flushed_events_are_in_the_file_while_the_writer_runs() {
        let out = tmp("flushed.ttr");
        let path = TempFile(partial_path(&out));
        let evs = events(1010);
        let mut w = write_blocks(&out, &evs[..1000], 1000);
        for ev in &evs[1000..] {
            w.write_event(ev).unwrap();
        }
        // The disk thread writes what a flush handed it soon after.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while salvage(&path).0 < 1000 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(salvage(&path).0, 1000);
        w.flush().unwrap();
        while salvage(&path).0 < 1010 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(salvage(&path).0, 1010);
        w.finish(&TraceSummary::default()).unwrap();
        assert!(!path.exists(), "renamed into place");
        assert_eq!(read_all(&out).unwrap().1.len(), 1010);
    }

    /// A planted link where the partial file goes is replaced, not followed;
    /// an existing recording stays until the new one is finished.
    #[test]
    fn outputs_follow_no_planted_link_and_replace_only_when_finished() {
        let path = tmp("planted.ttr");
        let victim = tmp("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        std::fs::write(&path, b"the old recording").unwrap();
        let partial = TempFile(partial_path(&path));
        std::os::unix::fs::symlink(&*victim, &*partial).unwrap();
        let w = TraceWriter::create(&path, &TraceMeta::for_this_host()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"the old recording");
        w.finish(&TraceSummary::default()).unwrap();
        assert_eq!(std::fs::read(&*victim).unwrap(), b"keep me");
        assert!(read_all(&path).is_ok());
    }

    /// Addresses become identifiers: the same address the same one, none
    /// none, and none of them an address; with `Kept`, as they were.
    #[test]
    fn kernel_addresses_are_hidden_unless_kept() {
        let path = tmp("pointers.ttr");
        let skbs = [
            0xffff_8881_0497_96e0u64,
            0,
            0xffff_8881_0444_0500,
            0xffff_8881_0497_96e0,
        ];
        let mut evs = events(skbs.len());
        for (ev, skb) in evs.iter_mut().zip(skbs) {
            ev.hdr.skb = skb;
        }
        for kept in [false, true] {
            let mut meta = TraceMeta::for_this_host();
            if kept {
                meta.kernel_pointers = KernelPointers::Kept;
            }
            let mut w = TraceWriter::create(&path, &meta).unwrap();
            for ev in &evs {
                w.write_event(ev).unwrap();
            }
            w.finish(&TraceSummary::default()).unwrap();
            let (meta, back, _) = read_all(&path).unwrap();
            let ids: Vec<u64> = back.iter().map(|ev| ev.hdr.skb).collect();
            if kept {
                assert_eq!(meta.kernel_pointers, KernelPointers::Kept);
                assert_eq!(ids, skbs);
                continue;
            }
            assert_eq!(meta.kernel_pointers, KernelPointers::Hashed);
            assert_eq!(
                (ids[0] == ids[3], ids[1], ids[0] != ids[2]),
                (true, 0, true)
            );
            assert!(ids.iter().all(|&id| id < 1 << 48), "{ids:x?}");
        }
    }

    /// The memo of recent identifiers changes none: more addresses than it
    /// has slots, twice in another order, each time the same identifier,
    /// and no two addresses one.
    #[test]
    fn remembered_identifiers_are_the_hashed_ones() {
        let mut hasher = PointerHasher::new();
        let addresses: Vec<u64> = (0..4 * POINTER_MEMO as u64)
            .map(|i| 0xffff_8881_0440_0000 + i * 0xe8)
            .collect();
        let first: Vec<u64> = addresses.iter().map(|&a| hasher.id(a)).collect();
        let again: Vec<u64> = addresses.iter().rev().map(|&a| hasher.id(a)).collect();
        assert!(first.iter().eq(again.iter().rev()));
        use std::hash::BuildHasher;
        let hashed = |a: u64| (hasher.key.hash_one(a) >> 16).max(1);
        assert!(addresses
            .iter()
            .zip(&first)
            .all(|(&a, &id)| id == hashed(a)));
        let distinct: std::collections::BTreeSet<u64> = first.iter().copied().collect();
        assert_eq!(distinct.len(), addresses.len());
    }

    #[test]
    fn recordings_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let path = tmp("private.ttr");
        write(&path, &events(1));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn absurd_lengths_do_not_allocate() {
        let path = tmp("huge.ttr");
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            read_all(&path).unwrap_err(),
            TraceError::Corrupt { .. }
        ));
    }
}
