//! The man pages `gen-docs` writes (and the .deb installs), rendered by
//! man(1) with groff's warnings on: every page has the sections a reader
//! looks for, and the subcommands' pages have examples.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;

#[test]
fn man_pages_render_with_examples_exit_status_files_and_see_also() {
    let dir = common::TempDir::new("man");
    let out = Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
        .args(["gen-docs", "--out"])
        .arg(dir.path())
        .output()
        .expect("gen-docs runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut pages: Vec<_> = std::fs::read_dir(dir.join("man"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    pages.sort();
    assert!(pages.len() >= 10, "{pages:?}");
    for page in &pages {
        let rendered = Command::new("man")
            .args(["--warnings", "-l"])
            .arg(page)
            .env("MANWIDTH", "80")
            .output();
        let Ok(rendered) = rendered else {
            assert!(
                std::env::var_os("CI").is_none(),
                "man not installed: run scripts/install-deps.sh"
            );
            eprintln!("skipped: man not installed (scripts/install-deps.sh installs it)");
            return;
        };
        // Bold and underline as a terminal-less man writes them: "N\x08N".
        let mut text = String::new();
        for c in String::from_utf8_lossy(&rendered.stdout).chars() {
            match c {
                '\x08' => drop(text.pop()),
                c => text.push(c),
            }
        }
        let warnings = String::from_utf8_lossy(&rendered.stderr);
        let name = page.file_name().unwrap().to_string_lossy();
        assert!(
            rendered.status.success() && warnings.trim().is_empty(),
            "{name}: {warnings}"
        );
        for section in [
            "NAME",
            "SYNOPSIS",
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "SEE ALSO",
        ] {
            assert!(
                text.lines().any(|l| l == section),
                "{name}: no {section}\n{text}"
            );
        }
        if name.starts_with("tenge-trace-") {
            assert!(text.lines().any(|l| l == "EXAMPLES"), "{name}: no EXAMPLES");
            let command = name
                .trim_start_matches("tenge-trace-")
                .trim_end_matches(".1");
            assert!(
                text.contains(&format!("tenge-trace {command}")),
                "{name}: no example of {command}"
            );
        }
    }
}
