//! Builds the BPF side: compiles every `bpf/*.bpf.c` with clang (CO-RE against
//! the committed `bpf/include/<arch>/vmlinux.h`, never the build host's BTF) and
//! generates the Rust mirror of the event ABI (`bpf/tenge_abi.h`) with bindgen.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86_64",
        other => panic!("tenge-trace ships a vmlinux.h for x86_64 only, not {other}"),
    };
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-env-changed=CLANG");
    compile_bpf(&out, arch);
    generate_abi(&out);
}

fn compile_bpf(out: &std::path::Path, arch: &str) {
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let include = format!("bpf/include/{arch}");
    for entry in std::fs::read_dir("bpf").expect("read bpf/") {
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
            .args(["-I", "bpf", "-I", &include])
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

#[derive(Debug)]
struct SerializeDerive;

impl bindgen::callbacks::ParseCallbacks for SerializeDerive {
    fn add_derives(&self, info: &bindgen::callbacks::DeriveInfo<'_>) -> Vec<String> {
        // Bodies are serialized straight into JSON with the kernel's field names
        // (the stage map values are summarized first: serde has no 160-array).
        let summarized = ["tt_hdr", "tt_stage_stats", "tt_hook_counts"];
        if info.name.starts_with("tt_")
            && !info.name.starts_with("tt_ev_")
            && !summarized.contains(&info.name)
        {
            vec!["serde::Serialize".into()]
        } else {
            vec![]
        }
    }
}

fn generate_abi(out: &std::path::Path) {
    let prelude = "typedef unsigned char __u8; typedef unsigned short __u16; \
                   typedef unsigned int __u32; typedef unsigned long long __u64; \
                   typedef int __s32; typedef signed char __s8;\n#include \"tenge_abi.h\"\n";
    bindgen::Builder::default()
        .header_contents("abi_wrapper.h", prelude)
        .clang_arg("-Ibpf")
        .allowlist_type("tt_.*")
        .allowlist_var("TT_.*")
        .rustified_enum("tt_kind")
        .rustified_enum("tt_rx_entry_variant")
        .rustified_enum("tt_stage")
        .rustified_enum("tt_stage_hook")
        .derive_default(true)
        .derive_debug(true)
        .derive_copy(true)
        .parse_callbacks(Box::new(SerializeDerive))
        .layout_tests(true)
        .generate()
        .expect("bindgen on bpf/tenge_abi.h")
        .write_to_file(out.join("abi.rs"))
        .expect("write abi.rs");
}
