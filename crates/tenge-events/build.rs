//! Generates the Rust mirror of the event ABI (`bpf/tenge_abi.h`, the one
//! definition of the event layout, shared with the BPF programs) with bindgen.

use std::{env, path::PathBuf};

const BPF: &str = "../../bpf";

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed={BPF}/tenge_abi.h");
    generate_abi(&out);
}

#[derive(Debug)]
struct SerializeDerive;

impl bindgen::callbacks::ParseCallbacks for SerializeDerive {
    fn add_derives(&self, info: &bindgen::callbacks::DeriveInfo<'_>) -> Vec<String> {
        // Bodies are serialized straight into JSON with the kernel's field names
        // (the stage map values are summarized first: serde has no 160-array).
        // Journeys are only split into their records.
        let summarized = [
            "tt_hdr",
            "tt_stage_stats",
            "tt_hook_counts",
            "tt_tx_journey",
            "tt_rx_journey",
        ];
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
        .clang_arg(format!("-I{BPF}"))
        .allowlist_type("tt_.*")
        .allowlist_var("TT_.*")
        .rustified_enum("tt_kind")
        .rustified_enum("tt_rx_entry_variant")
        .rustified_enum("tt_journey")
        .rustified_enum("tt_task_role")
        .rustified_enum("tt_pause_edge")
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
