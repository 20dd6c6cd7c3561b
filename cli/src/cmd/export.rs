//! `tenge-trace export FILE --format pcapng|perfetto|text [-o OUT]`

use super::output::OutputFile;
use crate::cli::{ExportArgs, ExportFormat};
use anyhow::{bail, Context};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;
use tenge_trace::analysis::paths::PathConfig;
use tenge_trace::analysis::{Analysis, AnalysisConfig, Provenance};
use tenge_trace::export::json::event_text_wall;
use tenge_trace::export::pcapng::{PcapngWriter, Section, WindowScales};
use tenge_trace::export::perfetto::PerfettoWriter;
use tenge_trace::trace_file::{TraceMeta, TraceReader};

/// Spans are written in batches of about this many events.
const SPAN_BATCH_EVENTS: u64 = 65536;

pub fn run(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let to_stdout = args.output == Path::new("-");
    if args.format == ExportFormat::Pcapng && to_stdout && std::io::stdout().is_terminal() {
        bail!("pcapng is binary: give -o FILE, or pipe standard output (e.g. into `tshark -r -`)");
    }
    let mut out = OutputFile::create(&args.output, &[&args.input.file])?;
    let reader = match args.format {
        ExportFormat::Pcapng => pcapng(&args, &mut out)?,
        ExportFormat::Perfetto => perfetto(&args, &mut out)?,
        ExportFormat::Text => text(&args, &mut out)?,
    };
    out.commit()
        .with_context(|| format!("writing {}", args.output.display()))?;
    args.input.warn_after_reading(&reader);
    if let Some(lost) = reader.summary().map(|s| s.lost_total()).filter(|&n| n > 0) {
        eprintln!("tenge-trace: warning: {lost} events were lost while recording this trace");
    }
    Ok(ExitCode::SUCCESS)
}

fn pcapng(args: &ExportArgs, out: &mut OutputFile) -> anyhow::Result<TraceReader> {
    let (mut first, mut reader) = args.input.open_twice()?;
    let mut scales = WindowScales::default();
    first.for_each(|ev| scales.learn(ev))?;
    let meta = reader.meta().clone();
    let section = Section {
        comment: pcapng_comment(&args.input.file, &meta),
        os: format!("Linux {}", meta.kernel_release),
        boot_offset_ns: meta.boot_offset_ns,
        every_interface: args.every_interface,
    };
    let mut writer = PcapngWriter::new(out, scales, &section)?;
    while let Some(ev) = reader.next_event()? {
        writer.push(&ev)?;
    }
    let (_, summary) = writer.finish()?;
    eprintln!(
        "tenge-trace: {} packets on {} interfaces{}{}",
        summary.packets,
        summary.interfaces,
        match summary.sightings_left_out {
            0 => String::new(),
            n => format!(
                " ({n} later sightings of a segment on another interface left out: \
                 --every-interface keeps them)"
            ),
        },
        match summary.handshakes_left_out {
            0 => String::new(),
            n => format!(
                "; {n} SYN packets left out: their connections' window scales are not in the \
                 recording, so Wireshark shows those windows unscaled (scale unknown)"
            ),
        }
    );
    Ok(reader)
}

fn pcapng_comment(file: &Path, meta: &TraceMeta) -> String {
    let sampling = match (meta.sample_every, meta.sample_slice_ns) {
        (0 | 1, _) => "Every packet was traced.".to_string(),
        (n, 0) => {
            format!("Sampled: 1 in {n} blocks of sequence space, so a sample of the packets.")
        }
        (n, ns) => format!(
            "Sampled: every packet of 1 in {n} slices of {} of time, none in between.",
            tenge_trace::export::table::duration(ns)
        ),
    };
    format!(
        "Reconstructed by tenge-trace from the recording {} made on {}: IP and TCP headers \
         rebuilt from the fields traced at net_dev_start_xmit (sent) and netif_receive_skb \
         (received); no payload (a packet's original length counts it); no TCP options but \
         the window scale of SYNs; TCP checksums not computed. {sampling}",
        file.display(),
        meta.hostname,
    )
}

fn perfetto(args: &ExportArgs, out: &mut OutputFile) -> anyhow::Result<TraceReader> {
    let mut reader = args.input.open()?;
    let cfg = AnalysisConfig {
        paths: PathConfig {
            spans: true,
            ..PathConfig::of_recording(reader.meta())
        },
        ..AnalysisConfig::default()
    };
    let mut analysis = Analysis::new(cfg);
    let mut writer = PerfettoWriter::new(out)?;
    let mut events = 0u64;
    while let Some(ev) = reader.next_event()? {
        writer.push_event(&ev)?;
        analysis.push(&ev).for_each(drop);
        events += 1;
        if events.is_multiple_of(SPAN_BATCH_EVENTS) {
            analysis
                .take_spans()
                .iter()
                .try_for_each(|s| writer.push_span(s))?;
        }
    }
    let (_, spans) = analysis.finish_with_spans(Provenance::default());
    spans.iter().try_for_each(|s| writer.push_span(s))?;
    writer.finish()?;
    Ok(reader)
}

fn text(args: &ExportArgs, out: &mut OutputFile) -> anyhow::Result<TraceReader> {
    let mut reader = args.input.open()?;
    let boot_offset_ns = reader.meta().boot_offset_ns;
    let mut line = String::new();
    while let Some(ev) = reader.next_event()? {
        line.clear();
        event_text_wall(&ev, boot_offset_ns, &mut line);
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    Ok(reader)
}
