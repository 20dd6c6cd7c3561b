//! The hook catalog (`tenge_trace::hooks`) against what else names hooks:
//! the JSON schema of `dump --json` and the bpftrace twin of the probes in
//! `bench/equivalent.bt` (the C programs are checked against it in
//! `probe::plan`'s tests). A probe added to one and not the other fails here.

use std::collections::BTreeSet;
use tenge_trace::hooks;

fn repo_file(path: &str) -> String {
    let at = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&at).unwrap_or_else(|e| panic!("{}: {e}", at.display()))
}

fn names(values: &serde_json::Value) -> BTreeSet<String> {
    values
        .as_array()
        .expect("an enum")
        .iter()
        .map(|v| v.as_str().expect("a name").to_string())
        .collect()
}

#[test]
fn the_dump_schema_names_the_catalogs_kinds_and_hooks() {
    let schema: serde_json::Value =
        serde_json::from_str(&repo_file("schema/dump-event.schema.json")).unwrap();
    let kinds: BTreeSet<String> = (1..tenge_trace::abi::tt_kind::TT_KIND_MAX as u8)
        .filter_map(|k| tenge_trace::event::kind_name(k).map(str::to_string))
        .collect();
    assert_eq!(names(&schema["properties"]["kind"]["enum"]), kinds);
    let variants: BTreeSet<String> = hooks::HOOKS
        .iter()
        .filter(|h| h.variant.is_some())
        .map(|h| h.tracepoint.to_string())
        .collect();
    assert_eq!(names(&schema["properties"]["hook"]["enum"]), variants);
}

#[test]
fn the_bpftrace_twin_hooks_what_the_per_packet_probes_hook() {
    let script = repo_file("bench/equivalent.bt");
    let twin: BTreeSet<String> = script
        .lines()
        .filter_map(|line| line.trim().strip_prefix("tracepoint:"))
        .map(|rest| {
            let end = rest.find([' ', ',', '{', '/']);
            rest[..end.unwrap_or(rest.len())].to_string()
        })
        .collect();
    let ours: BTreeSet<String> = hooks::per_packet().map(|h| h.name()).collect();
    assert_eq!(twin, ours);
}
