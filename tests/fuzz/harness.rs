//! What one input goes through: everything `dump`, `report` and
//! `flamegraph` do with a recording, and what came of it.

#[path = "alloc.rs"]
pub mod alloc;
#[path = "mutate.rs"]
pub mod mutate;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tenge_trace::analysis::AnalysisConfig;
use tenge_trace::export::flamegraph::{render_paths_svg, render_svg};
use tenge_trace::export::table::render_report;
use tenge_trace::replay;
use tenge_trace::trace_file::{TraceError, TraceReader, TraceWriter};

#[derive(Debug)]
pub enum Outcome {
    /// Read whole.
    Read,
    /// Read up to its damage.
    Salvaged,
    /// Refused (not a recording, another version, a damaged header).
    Refused(&'static str),
    Panicked,
}

pub struct Ran {
    pub outcome: Outcome,
    pub peak: usize,
    pub elapsed: Duration,
    pub finding: Option<PathBuf>,
}

#[derive(Default)]
pub struct Totals {
    outcomes: BTreeMap<String, u64>,
    max_peak_per_byte: f64,
    max_peak: usize,
    max_elapsed: Duration,
    pub findings: Vec<PathBuf>,
}

impl Totals {
    pub fn add(&mut self, input: &[u8], ran: &Ran) {
        let name = match ran.outcome {
            Outcome::Refused(why) => why.to_string(),
            ref other => format!("{other:?}").to_lowercase(),
        };
        *self.outcomes.entry(name).or_default() += 1;
        self.max_peak = self.max_peak.max(ran.peak);
        let beyond_base = ran.peak.saturating_sub(replay::MEMORY_BASE) as f64;
        self.max_peak_per_byte = self
            .max_peak_per_byte
            .max(beyond_base / input.len().max(1) as f64);
        self.max_elapsed = self.max_elapsed.max(ran.elapsed);
        self.findings.extend(ran.finding.clone());
    }

    pub fn merge(&mut self, other: Totals) {
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        self.max_peak = self.max_peak.max(other.max_peak);
        self.max_peak_per_byte = self.max_peak_per_byte.max(other.max_peak_per_byte);
        self.max_elapsed = self.max_elapsed.max(other.max_elapsed);
        self.findings.extend(other.findings);
    }
}

impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "outcomes {:?}, slowest {:?}, most heap {} KiB ({:.1} B per input byte beyond the base), {} findings",
            self.outcomes,
            self.max_elapsed,
            self.max_peak >> 10,
            self.max_peak_per_byte,
            self.findings.len()
        )
    }
}

/// `report` and `report --json`, `--strict`, and by turns `dump` or `dump
/// --json` and `flamegraph` or `flamegraph --cpu`, on `bytes`. A panic is
/// an outcome.
pub fn run_input(bytes: &[u8], turn: u64) -> Outcome {
    let run = std::panic::catch_unwind(|| commands(bytes, turn));
    run.unwrap_or(Outcome::Panicked)
}

fn commands(bytes: &[u8], turn: u64) -> Outcome {
    let open = |strict: bool| {
        let input = Box::new(Cursor::new(bytes.to_vec()));
        let reader = TraceReader::from_reader(input, Path::new("fuzz"))?;
        Ok::<_, TraceError>(if strict { reader } else { reader.salvaging() })
    };
    let mut reader = match open(false) {
        Ok(reader) => reader,
        Err(err) => return Outcome::Refused(refusal(&err)),
    };
    let outcome = match replay::report(&mut reader, AnalysisConfig::default()) {
        Ok(report) => {
            std::hint::black_box(render_report(&report, None));
            std::hint::black_box(serde_json::to_string_pretty(&report).unwrap());
            match reader.damage() {
                Some(_) => Outcome::Salvaged,
                None => Outcome::Read,
            }
        }
        Err(err) => Outcome::Refused(refusal(&err)),
    };
    let mut printed = 0;
    let json = turn.is_multiple_of(2);
    let _ = replay::dump(
        &mut open(false).unwrap(),
        json,
        |_, _| true,
        |line| {
            printed += line.len();
            true
        },
    );
    std::hint::black_box(printed);
    if turn % 4 < 2 {
        if let Ok(folded) = replay::path_stacks(&mut open(false).unwrap(), None) {
            let _ = render_paths_svg(&folded, "paths", "ns", std::io::sink());
        }
    } else if let Ok((folded, _)) = replay::cpu_stacks(&mut open(false).unwrap()) {
        let _ = render_svg(&folded, "cpu", std::io::sink());
    }
    if let Ok(mut strict) = open(true) {
        let _ = strict.for_each(|ev| {
            std::hint::black_box(ev);
        });
    }
    outcome
}

fn refusal(err: &TraceError) -> &'static str {
    match err {
        TraceError::Io { .. } => "io",
        TraceError::NotATrace(_) => "not a trace",
        TraceError::Version { .. } => "version",
        TraceError::Abi { .. } => "abi",
        TraceError::SampleRule { .. } => "sample rule",
        TraceError::Corrupt { .. } => "corrupt header",
        TraceError::Truncated { .. } => "truncated header",
    }
}

/// Peak RSS of this process (VmHWM).
pub fn max_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// Two cuts of `path` into `out`: its first events and some from its
/// middle, a hundred each (small inputs run fast), in blocks of 20, with its
/// header and trailer.
pub fn cut_recording(path: &Path, out: &Path) {
    const EVENTS: usize = 100;
    let mut reader = TraceReader::open(path).unwrap();
    let mut events = Vec::new();
    let summary = reader.for_each(|ev| events.push(*ev)).unwrap().clone();
    let stem = path.file_stem().unwrap().to_string_lossy();
    let middle = events.len().saturating_sub(EVENTS) / 2;
    for (name, from) in [("first", 0), ("middle", middle)] {
        let cut = &events[from..(from + EVENTS).min(events.len())];
        let file = out.join(format!("{stem}-{name}.tt"));
        let mut writer = TraceWriter::create(&file, reader.meta()).unwrap();
        for (i, ev) in cut.iter().enumerate() {
            writer.write_event(ev).unwrap();
            if i % 20 == 19 {
                writer.flush().unwrap();
            }
        }
        let mut summary = summary.clone();
        summary.events = cut.len() as u64;
        writer.finish(&summary).unwrap();
    }
}

/// A recording (`bytes`) written again as `record` writes one: out of time
/// order (chunks of 7 events reversed, each chunk's time settled once it is
/// written), in blocks of 20; through a file in `dir`.
pub fn written_out_of_time_order(bytes: &[u8], dir: &Path) -> Vec<u8> {
    let mut reader = TraceReader::from_reader(Box::new(Cursor::new(bytes.to_vec())), dir).unwrap();
    let mut events = Vec::new();
    let summary = reader.for_each(|ev| events.push(*ev)).unwrap().clone();
    let file = dir.join(format!("out-of-order-{:08x}.tt", crc32fast::hash(bytes)));
    let mut writer = TraceWriter::create(&file, reader.meta()).unwrap();
    writer.out_of_time_order();
    for (i, chunk) in events.chunks(7).enumerate() {
        for ev in chunk.iter().rev() {
            writer.write_event(ev).unwrap();
        }
        writer.settle(chunk[0].hdr.ts_ns);
        if i % 3 == 2 {
            writer.flush().unwrap();
        }
    }
    writer.finish(&summary).unwrap();
    let written = std::fs::read(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    written
}
