//! The crate graph is the architecture (README, Layout): the events crate
//! has no BPF loader under it, the analyses never reach the loader or the
//! lab, and neither the loader nor the lab reaches the analyses. Checked on
//! what cargo resolves, not on imports.

/// The packages under `package`'s normal (non-dev, non-build) dependencies.
fn dependencies(package: &str) -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--package",
            package,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn layers_depend_only_on_layers_below() {
    let loader = [
        "aya",
        "aya-obj",
        "tenge-probe",
        "tenge-lab",
        "tenge-trace",
        "tenge-trace-cli",
    ];
    for (package, forbidden) in [
        ("tenge-events", [&loader[..], &["tenge-analysis"]].concat()),
        ("tenge-analysis", loader.to_vec()),
        (
            "tenge-probe",
            vec![
                "tenge-analysis",
                "tenge-lab",
                "tenge-trace",
                "tenge-trace-cli",
            ],
        ),
        (
            "tenge-lab",
            vec!["tenge-analysis", "tenge-trace", "tenge-trace-cli"],
        ),
    ] {
        let found = dependencies(package);
        assert!(found.iter().any(|d| d == package), "{package}: {found:?}");
        for name in forbidden {
            assert!(
                !found.contains(&name.to_string()),
                "{package} depends on {name}: {found:?}"
            );
        }
    }
    // And the top stands on all of them.
    let trace = dependencies("tenge-trace");
    for name in [
        "aya",
        "tenge-events",
        "tenge-probe",
        "tenge-analysis",
        "tenge-lab",
    ] {
        assert!(
            trace.contains(&name.to_string()),
            "tenge-trace lacks {name}"
        );
    }
}
