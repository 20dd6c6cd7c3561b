//! `tenge-trace gen-docs --out DIR`: man pages and shell completions from the
//! clap definitions, so they never disagree with `--help`.

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

pub fn run(out: &Path) -> anyhow::Result<ExitCode> {
    let man = out.join("man");
    let completions = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    let cmd = crate::cli::Cli::command();
    man_pages(cmd.clone(), &man)?;
    for shell in [Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), "tenge-trace", &completions)?;
    }
    std::fs::write(completions.join("tenge-trace.bash"), bash_completion())?;
    println!(
        "man pages in {}, completions in {}",
        man.display(),
        completions.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The bash completion script. clap_complete names a subcommand's case
/// label after the binary with its hyphen turned into `__subcmd__`
/// (`tenge__subcmd__trace__subcmd__watch`) while its dispatcher builds
/// `tenge__trace__subcmd__watch`, so no option of any subcommand completed;
/// the labels are renamed to what the dispatcher builds.
pub fn bash_completion() -> String {
    let mut script = Vec::new();
    clap_complete::generate(
        Shell::Bash,
        &mut crate::cli::Cli::command(),
        "tenge-trace",
        &mut script,
    );
    String::from_utf8_lossy(&script)
        .replace("tenge__subcmd__trace__subcmd__", "tenge__trace__subcmd__")
}

/// A page per command (`tenge-trace.1`, `tenge-trace-record.1`, ...): the
/// sections clap_mangen makes from `--help`, then EXIT STATUS, ENVIRONMENT,
/// FILES, EXAMPLES and SEE ALSO.
fn man_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<()> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| s.get_name().to_string())
        .collect();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_page(sub.clone(), sub.get_name(), &names, dir)?;
    }
    man_page(cmd, "", &names, dir)
}

fn man_page(
    cmd: clap::Command,
    name: &str,
    commands: &[String],
    dir: &Path,
) -> std::io::Result<()> {
    let man = Man::new(cmd.clone());
    let mut page = std::fs::File::create(dir.join(man.get_filename()))?;
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page)?;
    }
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut page)?;
    }
    section(&mut page, "EXIT STATUS", EXIT_STATUS)?;
    section(&mut page, "ENVIRONMENT", ENVIRONMENT)?;
    section(&mut page, "FILES", FILES)?;
    section(&mut page, "EXAMPLES", examples(name))?;
    let mut see_also: Vec<String> = commands
        .iter()
        .filter(|c| c.as_str() != name)
        .map(|c| format!("\\fBtenge-trace-{c}\\fR(1)"))
        .collect();
    if !name.is_empty() {
        see_also.insert(0, "\\fBtenge-trace\\fR(1)".into());
    }
    see_also.extend(SEE_ALSO.iter().map(|s| s.to_string()));
    writeln!(page, ".SH \"SEE ALSO\"\n{}", see_also.join(", "))?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut page)?;
    }
    Ok(())
}

const EXIT_STATUS: &[(&str, &str)] = &[
    ("0", "Done."),
    ("1", "check found BPF unusable."),
    (
        "2",
        "An error: bad arguments, a file that cannot be read, no privileges.",
    ),
    ("3", "watch --exit-on-alert alerted."),
    (
        "128 + N",
        "Signal N ended the recording (130: SIGINT, 143: SIGTERM).",
    ),
    ("141", "The reader of the output went away."),
];

const ENVIRONMENT: &[(&str, &str)] = &[
    ("TENGE_TRACE_BACKENDS", "The hook backends every probe may use, in order, comma-separated (fentry, kprobe, tp_btf, raw_tp, tracepoint): a debugging switch."),
    ("TENGE_TRACE_VERIFIER_LOG", "When set, a refused program's reason includes the kernel verifier's log."),
];

const FILES: &[(&str, &str)] = &[
    ("FILE.partial", "A recording (record -o FILE, lab -o FILE) while it is written (mode 0600); renamed to FILE when finished."),
    ("FILE", "A self-describing recording: a JSON header (format and ABI versions, kernel release, the boot-time offset that turns event times into Unix time, the probe plan, the filters, the sampling), checksummed blocks of raw events in the kernel's layout (bpf/tenge_abi.h), and a trailer (event count, lost events, end reason)."),
    ("/usr/share/doc/tenge-trace/schema", "JSON schemas of report --json, diff --json, watch --json and stages --json."),
    ("/usr/share/doc/tenge-trace/examples", "Prometheus scrape config and alert rules, a Grafana dashboard."),
];

const SEE_ALSO: &[&str] = &[
    "\\fBtcpdump\\fR(8)",
    "\\fBtshark\\fR(1)",
    "\\fBss\\fR(8)",
    "\\fBnstat\\fR(8)",
    "\\fBperf\\fR(1)",
    "\\fBbpftool\\fR(8)",
    "\\fBtcp\\fR(7)",
];

/// Command lines worth copying, per subcommand ("": the main page).
fn examples(name: &str) -> &'static [(&'static str, &'static str)] {
    match name {
        "" | "lab" => &[
            ("tenge-trace lab --scenario mss-clamp", "The paper's clamp between two fresh namespaces: MTU 9000, no window scaling, a receive buffer that MSS rounding wastes; the report says what it cost and which SO_RCVBUF would not."),
            ("tenge-trace lab --list", "The built-in scenarios and their settings."),
        ],
        "check" => &[("tenge-trace check", "Which hook families load on this kernel, and the probe plan record would use.")],
        "record" => &[
            ("tenge-trace record -o t.ttr --port 5201 -- iperf3 -c HOST", "Trace the connections of port 5201 while iperf3 runs, then report: tenge-trace report t.ttr."),
            ("tenge-trace record -o t.ttr --sample 64 --duration 30s", "Every namespace for 30 s, keeping 1 in 64 blocks of each flow's sequence space."),
            ("tenge-trace record -o t.ttr --sample 64 --slice 50ms --duration 10m", "Every packet of 1 in 64 slices of 50 ms for ten minutes, the probes detached in between: a profile that costs next to nothing."),
            ("tenge-trace record -o - --port 5201 | tenge-trace report -", "Record to a pipe and analyse as it arrives."),
        ],
        "report" => &[
            ("tenge-trace report t.ttr", "Window findings, limits and path costs, as tables."),
            ("tenge-trace report --json t.ttr | jq .flows", "The same as JSON (schema/report.schema.json)."),
        ],
        "diff" => &[("tenge-trace diff before.ttr after.ttr", "What a tuning step changed: throughput, limit shares, window losses, stalls, paths and stage costs.")],
        "dump" => &[("tenge-trace dump --kind window_adv --json t.ttr", "Every advertised window, one JSON object per line.")],
        "watch" => &[
            ("tenge-trace watch --port 5201", "Alert live as flows become window-limited, clamped or stalled; a report at Ctrl-C."),
            ("tenge-trace watch --json --prometheus 127.0.0.1:9433", "Alerts as JSON lines, and metrics for Prometheus."),
        ],
        "stages" => &[
            ("tenge-trace stages --interval 10s", "In-kernel stage latency histograms every 10 s, cheap enough to leave running."),
            ("tenge-trace stages --cgroup /system.slice/nginx.service --duration 1m", "The stage latencies of one service's connections alone, for a minute."),
        ],
        "flamegraph" => &[
            ("tenge-trace flamegraph t.ttr -o paths.svg", "Path costs: direction, path, stage, weighted by time."),
            ("tenge-trace flamegraph t.ttr --direction rx -o rx.svg", "The receive path alone."),
        ],
        "export" => &[
            ("tenge-trace export t.ttr --format pcapng -o t.pcapng", "Open the traced packets in Wireshark (headers rebuilt, no payload)."),
            ("tenge-trace export t.ttr --format perfetto -o t.json", "A timeline for ui.perfetto.dev: hooks per CPU, each packet's stages per flow."),
            ("tenge-trace export t.ttr --format text | less", "One line per event with its UTC time."),
        ],
        "bench" => &[
            ("tenge-trace bench --quick", "The overhead benchmark, shorter: no tracing against each mode, side by side (`make bench` runs it in full)."),
        ],
        _ => &[],
    }
}

/// A section of tagged paragraphs, the tags bold; none when empty.
fn section(page: &mut impl Write, title: &str, items: &[(&str, &str)]) -> std::io::Result<()> {
    if !items.is_empty() {
        writeln!(page, ".SH \"{title}\"")?;
    }
    for (tag, text) in items {
        writeln!(page, ".TP\n\\fB{}\\fR\n{}", roff(tag), roff(text))?;
    }
    Ok(())
}

/// Text for roff: backslashes and hyphens escaped, no line starting with a control character.
fn roff(text: &str) -> String {
    let text = text.replace('\\', "\\e").replace('-', "\\-");
    match text.starts_with(['.', '\'']) {
        true => format!("\\&{text}"),
        false => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Every example is a command line the parser takes (up to a pipe).
    #[test]
    fn examples_parse() {
        let cmd = crate::cli::Cli::command();
        let names = std::iter::once("").chain(cmd.get_subcommands().map(|s| s.get_name()));
        for name in names {
            for (line, _) in examples(name) {
                let words = line.split(" | ").next().unwrap().split_whitespace();
                let parsed = crate::cli::Cli::try_parse_from(words);
                assert!(parsed.is_ok(), "{line}: {}", parsed.unwrap_err());
            }
        }
    }
}
