//! tenge-trace: an eBPF TCP path profiler.
//!
//! The tree follows the data: `bpf/` (C programs) → [`abi`] (the event layout,
//! generated from `bpf/tenge_abi.h`) → [`probe`] (loading and attaching) →
//! [`collector`] (draining the ring buffer) → [`trace_file`] (recording) →
//! [`flow`] (the flow table) → [`analysis`] (pure code over events) →
//! [`export`] (JSON, tables, flamegraphs); [`replay`] reads a recording back
//! through them. [`lab`] builds namespaces and
//! real transfers to trace; [`synth`] makes realistic event streams for
//! benchmarks and tests without them.

// No `unwrap` outside tests: a value read from a file or the kernel gets an
// error, not a panic (`expect` states an invariant that holds whatever the input).
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod collector;
pub mod lab;
pub mod probe;

pub use tenge_analysis::{analysis, export, flow, replay, synth};
pub use tenge_events::{abi, event, hooks, os, plan, trace_file};
