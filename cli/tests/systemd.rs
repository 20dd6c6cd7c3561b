//! The systemd unit of examples/systemd, checked by systemd itself
//! (`systemd-analyze verify`): its directives, the man page its
//! Documentation= names, and its binary.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;

const UNIT: &str = "tenge-trace-watch.service";

#[test]
fn watch_unit_passes_systemd_analyze_verify() {
    let present = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        assert!(
            std::env::var_os("CI").is_none(),
            "no systemd-analyze (scripts/install-deps.sh installs systemd)"
        );
        eprintln!("skipped: no systemd-analyze");
        return;
    }
    let dir = common::TempDir::new("systemd");
    let bin = env!("CARGO_BIN_EXE_tenge-trace");
    let docs = Command::new(bin)
        .args(["gen-docs", "--out"])
        .arg(dir.path())
        .output()
        .expect("gen-docs runs");
    assert!(docs.status.success());
    // man(1) looks for section 1 pages in man1/ under each MANPATH entry.
    let manpath = dir.join("manpath");
    std::fs::create_dir_all(manpath.join("man1")).unwrap();
    for page in std::fs::read_dir(dir.join("man")).unwrap() {
        let page = page.unwrap().path();
        std::fs::copy(&page, manpath.join("man1").join(page.file_name().unwrap())).unwrap();
    }
    // The unit as the .deb installs it, with the binary where the build put it.
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/systemd")
        .join(UNIT);
    let unit = std::fs::read_to_string(&source).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/tenge-trace watch "));
    assert!(unit.contains("CapabilityBoundingSet=CAP_BPF CAP_PERFMON"));
    let unit = unit.replace("/usr/bin/tenge-trace", bin);
    let verify = |text: &str| {
        let unit_path = dir.join(UNIT);
        std::fs::write(&unit_path, text).unwrap();
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit_path)
            .env("MANPATH", &manpath)
            .output()
            .expect("systemd-analyze runs");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said)
    };
    let (ok, said) = verify(&unit);
    assert!(ok && said.is_empty(), "systemd-analyze verify: {said}");
    // And it does fail where it should: a directive systemd does not know.
    let (_, said) = verify(&format!("{unit}\nNoSuchDirective=1\n"));
    assert!(!said.is_empty(), "an unknown directive went unnoticed");
}
