//! Builds the BPF side: compiles every `bpf/*.bpf.c` with clang (CO-RE against
//! the committed `bpf/include/<arch>/vmlinux.h`, never the build host's BTF).
//! The Rust mirror of the event ABI is the events crate's (crates/tenge-events).

use std::{env, path::PathBuf, process::Command};

/// The BPF side, at the top of the repository.
const BPF: &str = "../../bpf";

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86_64",
        other => panic!("tenge-trace ships a vmlinux.h for x86_64 only, not {other}"),
    };
    println!("cargo:rerun-if-changed={BPF}");
    println!("cargo:rerun-if-env-changed=CLANG");
    compile_bpf(&out, arch);
}

fn compile_bpf(out: &std::path::Path, arch: &str) {
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let include = format!("{BPF}/include/{arch}");
    for entry in std::fs::read_dir(BPF).expect("read bpf/") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".bpf.c") else {
            continue;
        };
        let obj = out.join(format!("{stem}.bpf.o"));
        let status = Command::new(&clang)
            .args([
                "-target",
                "bpf",
                "-O2",
                "-g",
                "-Wall",
                "-Werror",
                "-D__TARGET_ARCH_x86",
            ])
            .args(["-I", BPF, "-I", &include])
            .arg("-c")
            .arg(&path)
            .arg("-o")
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run {clang} ({e}): install clang, llvm and libbpf-dev (see README)")
            });
        assert!(status.success(), "clang failed on {}", path.display());
    }
}
