//! tenge-trace's lab: two network namespaces joined by a veth pair or two
//! lent NICs, real transfers between them, and the ground truth of tools
//! nobody here wrote (ss, tcpdump/tshark, iperf3). Above the loader
//! (tenge-probe): it traces what it runs.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod lab;

// The lower crates' modules under the names the lab uses.
pub(crate) use tenge_events::os;
pub(crate) use tenge_probe::{collector, probe};
