//! `tenge-trace flamegraph` on real recordings: a lab transfer's path costs
//! as an SVG that a browser renders, and a CPU profile of a bulk transfer.
//! Needs root (BPF, namespaces); skipped otherwise unless CI is set.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::TempDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// Two cores: the transfers should not fight.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tenge-trace"))
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// Kept after the test for people to look at: target/test-artifacts/.
fn artifact(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is target/tmp")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn path_flamegraph_of_a_lab_transfer_names_the_stages_and_renders() {
    if !common::require_root("path_flamegraph_of_a_lab_transfer") {
        return;
    }
    let _serial = serial();
    let tmp = TempDir::new("flamegraph-paths");
    let trace = tmp.join("lab.tt");
    run(bin().args(["lab", "--bytes", "16000000", "-o"]).arg(&trace));
    let svg = artifact("paths-flamegraph.svg");
    run(bin().arg("flamegraph").arg(&trace).arg("-o").arg(&svg));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<?xml") && text.contains("<svg"),
        "not an SVG"
    );
    // `-o -`: the same SVG on standard output, no file named `-`.
    let stdout = run(bin().arg("flamegraph").arg(&trace).args(["-o", "-"])).stdout;
    assert_eq!(String::from_utf8(stdout).unwrap(), text);
    // Frames are direction;path…;stage: every stage of both directions is a
    // frame (inferno puts the full name in each frame's <title>).
    let missing: Vec<_> = [
        "tcp",
        "qdisc",
        "driver",
        "napi",
        "ip_tcp",
        "tcp_queue",
        "socket_queue",
        "read",
    ]
    .into_iter()
    .filter(|stage| !text.contains(&format!("<title>{stage} (")))
    .collect();
    assert!(
        missing.is_empty(),
        "no frame for {missing:?} in {} (report: {})",
        svg.display(),
        String::from_utf8_lossy(&run(bin().arg("report").arg(&trace)).stdout)
    );
    for frame in ["<title>tx (", "<title>rx ("] {
        assert!(text.contains(frame), "no {frame} frame");
    }

    // One direction alone: waiting to send dwarfs the receive path otherwise.
    let rx_svg = artifact("paths-flamegraph-rx.svg");
    run(bin()
        .arg("flamegraph")
        .arg(&trace)
        .args(["--direction", "rx", "-o"])
        .arg(&rx_svg));
    let rx_text = std::fs::read_to_string(&rx_svg).unwrap();
    assert!(rx_text.contains("<title>rx (") && rx_text.contains("<title>read ("));
    assert!(
        !rx_text.contains("<title>tx ("),
        "--direction rx keeps only rx stacks"
    );

    let png = artifact("paths-flamegraph.png");
    let _ = std::fs::remove_file(&png);
    let profile = tmp.join("chromium-profile");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,800",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .output()
        .expect("chromium runs (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A blank 1200x800 page compresses to a few hundred bytes; frames with
    // text do not.
    let size = std::fs::metadata(&png)
        .expect("chromium wrote the PNG")
        .len();
    assert!(size > 5_000, "{} is only {size} bytes", png.display());
    eprintln!("rendered {} ({size} bytes)", png.display());
}

#[test]
fn cpu_flamegraph_of_a_bulk_transfer_shows_tcp_and_copy_frames() {
    if !common::require_root("cpu_flamegraph_of_a_bulk_transfer") {
        return;
    }
    let _serial = serial();
    let tmp = TempDir::new("flamegraph-cpu");
    let trace = tmp.join("cpu.tt");
    // CPU samples are not filtered by address or port; port 1 keeps every
    // packet event out, so the file holds just the profile of the transfer
    // that `lab` runs (and of everything else on the machine meanwhile).
    run(bin()
        .args([
            "record",
            "--cpu-profile",
            "--cpu-hz",
            "999",
            // A stack is lost when another holds its slot: some 530 user
            // stacks of a debug build in 131072 slots lose one of them in
            // 250, not one in 30 as in the default 16384 (CI lost the lab's
            // recv stacks so in a table shared with the kernel's, of 4096).
            "--stack-storage",
            "131072",
            "--port",
            "1",
            "-q",
            "-o",
        ])
        .arg(&trace)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_tenge-trace"))
        .args(["lab", "--bytes", "200000000"]));
    let folded = tmp.join("cpu.folded");
    run(bin()
        .args(["flamegraph", "--cpu", "--folded"])
        .arg(&trace)
        .arg("-o")
        .arg(&folded));
    let stacks = std::fs::read_to_string(&folded).unwrap();
    let frames: Vec<&str> = stacks
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .flat_map(|(stack, _)| stack.split(';'))
        .collect();
    assert!(
        frames.iter().any(|f| f.starts_with("tcp_")),
        "no tcp_ frame in {} stacks",
        stacks.lines().count()
    );
    // Copies to and from user space: _copy_to_iter, skb_copy_datagram_iter, …
    assert!(
        frames.iter().any(|f| f.contains("copy")),
        "no copy frame in {} stacks",
        stacks.lines().count()
    );
    // User frames by name (blazesym, from the ELF files mapped into the
    // lab while it ran): the sender's and receiver's calls into libc.
    let lab_stacks: Vec<&str> = stacks
        .lines()
        .filter(|l| l.starts_with("tenge-trace;"))
        .collect();
    let named_user = |f: &&str| f.contains("send") || f.contains("recv");
    assert!(
        lab_stacks.iter().any(|l| l
            .split(';')
            .take_while(|f| !f.starts_with("entry_SYSCALL"))
            .any(|f| named_user(&f))),
        "no named send or recv user frame in {} stacks of the lab: {:?}",
        lab_stacks.len(),
        &lab_stacks[..lab_stacks.len().min(5)]
    );
    let svg = artifact("cpu-flamegraph.svg");
    run(bin()
        .args(["flamegraph", "--cpu"])
        .arg(&trace)
        .arg("-o")
        .arg(&svg));
    assert!(std::fs::read_to_string(&svg).unwrap().contains("tcp_"));
}

/// A process outside the recorder's PID namespace (as when the recorder
/// runs in a container) is named by the kernel, not by a `/proc` that does
/// not show it: a spinning shell started as `tt-spinner` from the host, a
/// recorder under `unshare --pid --mount-proc`.
#[test]
fn cpu_profile_names_processes_the_recorder_cannot_see() {
    if !common::require_root("cpu_profile_names_processes_the_recorder_cannot_see") {
        return;
    }
    let _serial = serial();
    let tmp = TempDir::new("flamegraph-pidns");
    let spinner = tmp.join("tt-spinner");
    std::os::unix::fs::symlink("/bin/sh", &spinner).unwrap();
    let mut spinning = Command::new(&spinner)
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let trace = tmp.join("cpu.tt");
    let recorded = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(env!("CARGO_BIN_EXE_tenge-trace"))
        .args([
            "record",
            "--cpu-profile",
            "--port",
            "1",
            "--duration",
            "2",
            "-q",
            "-o",
        ])
        .arg(&trace)
        .output();
    let _ = spinning.kill();
    let _ = spinning.wait();
    let recorded = recorded.unwrap();
    assert!(
        recorded.status.success(),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let folded = tmp.join("cpu.folded");
    run(bin()
        .args(["flamegraph", "--cpu", "--folded"])
        .arg(&trace)
        .arg("-o")
        .arg(&folded));
    let stacks = std::fs::read_to_string(&folded).unwrap();
    let processes: std::collections::BTreeSet<&str> =
        stacks.lines().filter_map(|l| l.split(';').next()).collect();
    // At 99 Hz for 2 s, the spinner holds about half the two cores.
    assert!(
        processes.contains("tt-spinner"),
        "the spinner is not named: {processes:?}"
    );
    assert!(
        // Folded stacks have no spaces in names: "pid N" is "pid_N" there.
        !processes.iter().any(|p| p.starts_with("pid_")),
        "a process named by its pid: {processes:?}"
    );
}
