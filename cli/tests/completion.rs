//! The bash completion `gen-docs` writes (and the .deb installs), tried in
//! bash itself: options of a subcommand complete.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;

/// What bash's completion offers for the words of `line` (the last one
/// being completed).
fn complete(script: &std::path::Path, line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split(' ').collect();
    let program = format!(
        "source {script}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{line}'; \
         COMP_POINT=${{#COMP_LINE}}; _tenge__trace tenge-trace '{cur}' '{prev}'; \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script = script.display(),
        words = words.join(" "),
        cword = words.len() - 1,
        cur = words[words.len() - 1],
        prev = words[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["-c", &program])
        .output()
        .expect("bash runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_subcommand_options() {
    let dir = common::TempDir::new("completion");
    let status = Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
        .args(["gen-docs", "--out"])
        .arg(dir.path())
        .output()
        .expect("gen-docs runs");
    assert!(status.status.success());
    let script = dir.join("completions/tenge-trace.bash");
    let offered = complete(&script, "tenge-trace watch --pro");
    assert!(
        offered.iter().any(|o| o == "--prometheus"),
        "watch --pro: {offered:?}"
    );
    assert!(
        offered.iter().all(|o| o.starts_with("--pro")),
        "{offered:?}"
    );
    let mut offered = complete(&script, "tenge-trace lab --li");
    offered.sort();
    assert_eq!(offered, ["--link", "--list"], "lab --li");
    let offered = complete(&script, "tenge-trace di");
    assert_eq!(offered, ["diff"], "subcommands");
}
