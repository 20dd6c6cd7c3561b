//! `tenge-trace dump FILE [--json]`: one event per line.

use crate::cli::DumpArgs;
use std::process::ExitCode;
use tenge_trace::export::json::{event_json, event_text};
use tenge_trace::flow::FlowTable;
use tenge_trace::trace_file::TraceReader;

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    for kind in &args.kind {
        anyhow::ensure!(
            (0..=u8::MAX).any(|k| tenge_trace::event::kind_name(k) == Some(kind.as_str())),
            "unknown event kind {kind:?}"
        );
    }
    let mut reader = TraceReader::open(&args.file)?;
    let mut flows = FlowTable::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut line = String::new();
    while let Some(ev) = reader.next_event()? {
        let cookie = flows.observe(&ev);
        let wanted_kind = args.kind.is_empty() || args.kind.iter().any(|k| k == ev.kind_name());
        if !wanted_kind || (args.flow.is_some() && cookie != args.flow) {
            continue;
        }
        line.clear();
        if args.json {
            line.push_str(&event_json(&ev).to_string());
        } else {
            event_text(&ev, &mut line);
        }
        line.push('\n');
        if !super::write_stdout(&mut out, line.as_bytes())? {
            return Ok(ExitCode::SUCCESS);
        }
    }
    super::write_stdout(&mut out, b"")?;
    if let Some(lost) = reader.summary().map(|s| s.lost_total()).filter(|&n| n > 0) {
        eprintln!("tenge-trace: warning: {lost} events were lost while recording this trace");
    }
    Ok(ExitCode::SUCCESS)
}
