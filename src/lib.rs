//! tenge-trace: an eBPF TCP path profiler.
//!
//! The crates follow the data: `bpf/` (C programs) → tenge-probe ([`probe`]:
//! loading and attaching; [`collector`]: draining the ring buffer) →
//! tenge-events ([`abi`]: the event layout generated from
//! `bpf/tenge_abi.h`; [`event`]; [`hooks`]: the hook catalog; [`stacks`];
//! [`trace_file`]: recording) → tenge-analysis ([`flow`]: the flow table;
//! [`analysis`]: pure code over events; [`export`]: JSON, tables,
//! flamegraphs, Prometheus; [`replay`]: a recording read back through them;
//! [`synth`]: realistic event streams without a kernel) → tenge-lab
//! ([`lab`]: namespaces and real transfers to trace). This crate re-exports
//! them under their module names, for the CLI, the tests and the examples.

// No `unwrap` outside tests: a value read from a file or the kernel gets an
// error, not a panic (`expect` states an invariant that holds whatever the input).
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub use tenge_analysis::{analysis, export, flow, replay, synth, task};
pub use tenge_events::{abi, event, hooks, os, plan, stacks, trace_file};
pub use tenge_lab::lab;
pub use tenge_probe::{collector, probe};
