//! Flamegraphs: folded stacks (`frame;frame;…;leaf weight`, one per line,
//! the format of Brendan Gregg's stackcollapse tools) and SVG through inferno.

use crate::analysis::paths::PathReport;
use std::collections::BTreeMap;
use std::io::Write;

/// Folded stacks of path costs: `direction;path…;stage total_ns`, one per
/// stage of each full path (an RX path is several frames: gro;socket;order),
/// weighted by the time all its packets spent in that stage, in ns (scaled
/// for sampling). `flow` restricts them to the socket with that cookie.
/// Stages without time are left out; lines are sorted.
pub fn folded_paths(report: &PathReport, flow: Option<u64>) -> Vec<String> {
    let entries: Vec<_> = match flow {
        None => report.combined.iter().collect(),
        Some(cookie) => report
            .flows
            .iter()
            .filter(|f| f.cookie == cookie)
            .flat_map(|f| &f.combined)
            .collect(),
    };
    let stacks = entries.into_iter().flat_map(|e| {
        e.stages.iter().map(move |s| {
            (
                format!("{};{};{}", e.direction, e.path, s.stage),
                s.total_ns,
            )
        })
    });
    fold(stacks)
}

/// The same stacks with each direction's weights scaled to a million (parts
/// per million of that direction's time): TX and RX each take half the
/// width, where seconds of waiting to send would otherwise leave the
/// receive path's microseconds a sliver. A stack keeps at least 1.
pub fn per_direction_shares(folded: &[String]) -> Vec<String> {
    let parse = |line: &String| {
        let (stack, weight) = line.rsplit_once(' ')?;
        Some((stack.to_string(), weight.parse::<u64>().ok()?))
    };
    let stacks: Vec<(String, u64)> = folded.iter().filter_map(parse).collect();
    let direction = |stack: &str| stack.split(';').next().unwrap_or("").to_string();
    let mut totals: BTreeMap<String, u128> = BTreeMap::new();
    for (stack, weight) in &stacks {
        *totals.entry(direction(stack)).or_default() += u128::from(*weight);
    }
    stacks
        .iter()
        .map(|(stack, weight)| {
            let total = totals[&direction(stack)].max(1);
            let ppm = (u128::from(*weight) * 1_000_000 / total).max(1);
            format!("{stack} {ppm}")
        })
        .collect()
}

/// Folded stacks of CPU samples. Frames go root first, leaf last (reverse a
/// `bpf_get_stackid` trace, which starts at the leaf). Equal stacks are
/// added up; `;` and whitespace in frame names become `:` and `_`, as they
/// would split the line.
pub fn folded_cpu(samples: impl Iterator<Item = (Vec<String>, u64)>) -> Vec<String> {
    let clean = |frame: &str| frame.replace(';', ":").replace(char::is_whitespace, "_");
    fold(
        samples
            .filter(|(frames, _)| !frames.is_empty())
            .map(|(frames, count)| {
                (
                    frames
                        .iter()
                        .map(|f| clean(f))
                        .collect::<Vec<_>>()
                        .join(";"),
                    count,
                )
            }),
    )
}

fn fold(stacks: impl Iterator<Item = (String, u64)>) -> Vec<String> {
    let mut weights: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, weight) in stacks.filter(|&(_, w)| w > 0) {
        *weights.entry(stack).or_default() += weight;
    }
    weights
        .into_iter()
        .map(|(stack, weight)| format!("{stack} {weight}"))
        .collect()
}

/// Renders folded CPU stacks as an SVG flamegraph; widths are in samples.
pub fn render_svg(folded: &[String], title: &str, out: impl Write) -> anyhow::Result<()> {
    render(folded, title, "samples", false, out)
}

/// Renders [`folded_paths`] as an SVG flamegraph, widths in `unit` (ns, or
/// ppm after [`per_direction_shares`]). Every frame is drawn: a qdisc
/// stage of a few hundred ns beside seconds of waiting to send is under the
/// tenth of a pixel below which inferno drops a frame, and a path
/// flamegraph has only a few dozen, each worth finding with the SVG's search.
pub fn render_paths_svg(
    folded: &[String],
    title: &str,
    unit: &str,
    out: impl Write,
) -> anyhow::Result<()> {
    render(folded, title, unit, true, out)
}

fn render(
    folded: &[String],
    title: &str,
    count_name: &str,
    every_frame: bool,
    out: impl Write,
) -> anyhow::Result<()> {
    anyhow::ensure!(!folded.is_empty(), "no stacks to draw for {title:?}");
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.count_name = count_name.to_string();
    if every_frame {
        options.min_width = 0.0;
    }
    inferno::flamegraph::from_lines(&mut options, folded.iter().map(String::as_str), out)?;
    Ok(())
}
