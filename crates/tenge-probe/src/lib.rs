//! The kernel side of tenge-trace: the BPF programs of `bpf/` (built by
//! build.rs), loading and attaching them on the best hook each kernel
//! allows (`probe`), and draining their ring buffer into a `Sink`
//! (`collector`). Depends on tenge-events only; the analyses never see it.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod collector;
pub mod probe;

// The events crate's modules under the names the loader uses.
pub(crate) use tenge_events::{abi, event, os, trace_file};
