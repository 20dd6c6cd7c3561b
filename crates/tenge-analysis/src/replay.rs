//! A recording read back: what `report`, `dump` and `flamegraph` make of a
//! [`TraceReader`], as functions the commands and the fuzz harness share.
//!
//! Whatever a file's bytes say, reading it costs time and memory in
//! proportion to its size ([`MEMORY_PER_BYTE`]): every count, length and
//! value the analyses take from it only ever sizes what its own events fill.

use crate::analysis::paths::{PathAnalyzer, PathConfig};
use crate::analysis::{Analysis, AnalysisConfig, Provenance, Report};
use crate::event::{Body, Event};
use crate::export::flamegraph::{folded_cpu, folded_paths};
use crate::export::json::{event_json, event_text};
use crate::flow::FlowTable;
use crate::trace_file::{TraceError, TraceReader, HOLD_NS};
use std::collections::HashMap;
use tenge_events::stacks::{slot_taken, LostStacks, KERNEL_STACK_LOST, USER_STACK_LOST};

/// The heap any of these functions takes, at most, per byte of the file
/// read, on top of [`MEMORY_BASE`]: checked by the fuzz harness on every input.
pub const MEMORY_PER_BYTE: usize = 64;
/// The heap they take whatever the file: the block buffer, the tables'
/// first allocations.
pub const MEMORY_BASE: usize = 32 << 20;

/// How often, in the recording's time, a replay looks for alerts due by
/// time (a stall that went on with no event).
const TICK_NS: u64 = 1_000_000;

/// The analyses of every event, and the report `report` prints.
pub fn report(reader: &mut TraceReader, cfg: AnalysisConfig) -> Result<Report, TraceError> {
    let mut analysis = Analysis::new(cfg);
    let (mut newest, mut next_tick) = (0, 0);
    let summary = reader
        .for_each_ahead(|ev, ahead| {
            analysis.prefetch(ahead);
            // Read whole up to HOLD_NS before the newest record, as the
            // collector hands them on: what fell due by then fires at its
            // time, before a later event of its socket finds it.
            newest = newest.max(ev.hdr.ts_ns);
            if newest >= next_tick {
                analysis.tick_each_due(newest.saturating_sub(HOLD_NS));
                next_tick = newest + TICK_NS;
            }
            analysis.push(ev).for_each(drop);
        })?
        .clone();
    let meta = reader.meta();
    let mut report = analysis.finish(Provenance {
        kernel_release: meta.kernel_release.clone(),
        sample_every: meta.sample_every,
        hits_not_run: summary.hits_not_run(),
        lost: summary.lost,
        damage: reader.damage().cloned(),
    });
    report.resolve_cgroups(&summary.cgroups);
    Ok(report)
}

/// Each event as `dump` prints it, one line (JSON or text) each, to `line`
/// while it returns true; `keep` picks events by their socket's cookie.
pub fn dump(
    reader: &mut TraceReader,
    json: bool,
    keep: impl Fn(&Event, Option<u64>) -> bool,
    mut line: impl FnMut(&str) -> bool,
) -> Result<(), TraceError> {
    let mut flows = FlowTable::new();
    let mut text = String::new();
    while let Some(ev) = reader.next_event()? {
        let cookie = flows.observe(&ev);
        if !keep(&ev, cookie) {
            continue;
        }
        text.clear();
        match json {
            true => text.push_str(&event_json(&ev).to_string()),
            false => event_text(&ev, &mut text),
        }
        if !line(&text) {
            break;
        }
    }
    Ok(())
}

/// The path costs as folded stacks (direction;path;stage), of one flow or all.
pub fn path_stacks(reader: &mut TraceReader, flow: Option<u64>) -> Result<Vec<String>, TraceError> {
    let cfg = PathConfig::of_recording(reader.meta());
    let mut paths = PathAnalyzer::new(cfg);
    reader.for_each(|ev| paths.push(ev))?;
    Ok(folded_paths(&paths.finish(), flow))
}

/// CPU samples as folded stacks, root first: process, user frames (`[user]`
/// when the recording could not name them), kernel frames; a stack the
/// kernel did not store (another held its slot) as one frame that says so.
/// With the samples' count of such stacks.
pub fn cpu_stacks(reader: &mut TraceReader) -> Result<(Vec<String>, LostStacks), TraceError> {
    let mut counts: HashMap<(u32, i32, i32), u64> = HashMap::new();
    let mut lost = LostStacks::default();
    let summary = reader
        .for_each(|ev| {
            if let Body::CpuSample(s) = ev.body {
                lost.observe(&s);
                *counts
                    .entry((s.tgid, s.kstack_id, s.ustack_id))
                    .or_default() += 1;
            }
        })?
        .clone();
    let samples = counts.into_iter().map(|((tgid, kstack, ustack), count)| {
        let name = summary
            .process_names
            .get(&tgid)
            .cloned()
            .unwrap_or_else(|| format!("pid {tgid}"));
        let mut frames = vec![name];
        match summary.user_stacks.get(&format!("{tgid}:{ustack}")) {
            // Stacks are stored leaf first.
            Some(user) => frames.extend(user.iter().rev().cloned()),
            None if ustack >= 0 => frames.push("[user]".into()),
            None if slot_taken(ustack) => frames.push(USER_STACK_LOST.into()),
            None => {}
        }
        match summary.stacks.get(&kstack) {
            Some(kernel) => frames.extend(kernel.iter().rev().cloned()),
            None if slot_taken(kstack) => frames.push(KERNEL_STACK_LOST.into()),
            None => {}
        }
        (frames, count)
    });
    Ok((folded_cpu(samples), lost))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{tt_cpu_sample, tt_hdr};
    use crate::trace_file::{TraceMeta, TraceSummary, TraceWriter};
    use std::collections::BTreeMap;
    use tenge_events::stacks::SLOT_TAKEN;

    /// Samples whose stacks were stored, lost to a taken slot, or never
    /// there (-EFAULT: no user stack in a kernel thread), folded root first.
    #[test]
    fn cpu_stacks_draw_lost_stacks_and_count_them() {
        let path = std::env::temp_dir().join(format!("tt-replay-cpu-{}.ttr", std::process::id()));
        let mut writer = TraceWriter::create(&path, &TraceMeta::for_this_host()).unwrap();
        let (lost, no_stack) = (SLOT_TAKEN, -14);
        for (kstack_id, ustack_id) in [(5, 9), (5, 9), (lost, 9), (5, lost), (lost, no_stack)] {
            let sample = tt_cpu_sample {
                pid: 7,
                tgid: 7,
                kstack_id,
                ustack_id,
            };
            let mut record = Vec::new();
            Event::new(tt_hdr::default(), Body::CpuSample(sample)).encode(&mut record);
            writer.write_record(&record).unwrap();
        }
        let summary = TraceSummary {
            stacks: BTreeMap::from([(5, vec!["leaf_k".into(), "root_k".into()])]),
            user_stacks: BTreeMap::from([("7:9".into(), vec!["leaf_u".into(), "main".into()])]),
            process_names: BTreeMap::from([(7, "app".into())]),
            ..TraceSummary::default()
        };
        writer.finish(&summary).unwrap();
        let (folded, counted) = cpu_stacks(&mut TraceReader::open(&path).unwrap()).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            folded,
            [
                "app;[kernel_stack_lost] 1",
                "app;[user_stack_lost];root_k;leaf_k 1",
                "app;main;leaf_u;[kernel_stack_lost] 1",
                "app;main;leaf_u;root_k;leaf_k 2",
            ]
        );
        assert_eq!(
            counted,
            LostStacks {
                samples: 5,
                kernel: 2,
                user: 1
            }
        );
    }
}
