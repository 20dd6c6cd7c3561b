//! What tenge-trace makes of recorded events: the flow table (`flow`), the
//! window and path analyses (`analysis`), replays of recordings (`replay`),
//! synthetic event streams (`synth`) and the exporters (`export`: tables,
//! JSON, flamegraphs, Prometheus). Pure: events in, figures out; depends
//! on tenge-events only, never on the BPF loader.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod analysis;
pub mod export;
pub mod flow;
pub mod replay;
pub mod synth;
pub mod task;

// The events crate's modules under the names the analyses use.
pub(crate) use tenge_events::{abi, event, plan, trace_file};
