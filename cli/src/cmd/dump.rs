//! `tenge-trace dump FILE [--json]`: one event per line.

use crate::cli::DumpArgs;
use std::io::Write;
use std::process::ExitCode;
use tenge_trace::replay;

pub fn run(args: DumpArgs) -> anyhow::Result<ExitCode> {
    for kind in &args.kind {
        anyhow::ensure!(
            (0..=u8::MAX).any(|k| tenge_trace::event::kind_name(k) == Some(kind.as_str())),
            "unknown event kind {kind:?}"
        );
    }
    let mut reader = args.input.open()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut failed = None;
    let keep = |ev: &tenge_trace::event::Event, cookie: Option<u64>| {
        let wanted_kind = args.kind.is_empty() || args.kind.iter().any(|k| k == ev.kind_name());
        wanted_kind && (args.flow.is_none() || cookie == args.flow)
    };
    // A reader gone (`| head`) ends it: see `main`.
    replay::dump(&mut reader, args.json, keep, |line| {
        match writeln!(out, "{line}") {
            Ok(()) => true,
            Err(err) => {
                failed = Some(err);
                false
            }
        }
    })?;
    if let Some(err) = failed {
        return Err(err.into());
    }
    out.flush()?;
    args.input.warn_after_reading(&reader);
    if let Some(lost) = reader.summary().map(|s| s.lost_total()).filter(|&n| n > 0) {
        eprintln!("tenge-trace: warning: {lost} events were lost while recording this trace");
    }
    Ok(ExitCode::SUCCESS)
}
