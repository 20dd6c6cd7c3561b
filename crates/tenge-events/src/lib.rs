//! The data tenge-trace records, and nothing that records it: the event ABI
//! shared with the BPF programs (`abi`, generated from `bpf/tenge_abi.h`),
//! events decoded from it (`event`), the hook catalog (`hooks`), CPU
//! samples' lost stacks (`stacks`), the trace file (`trace_file`), what
//! the probes were (`plan`), and the OS helpers these need (`os`). No BPF
//! loader: a program that only reads recordings builds from here up.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod abi;
pub mod event;
pub mod fast_hash;
pub mod hooks;
pub mod os;
pub mod plan;
pub mod stacks;
pub mod stage_maps;
pub mod trace_file;
