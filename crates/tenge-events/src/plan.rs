//! What a recording's probes were: the hook each logical probe ran from
//! (chosen by the loader, trying backends in turn) and what each hook was
//! hit. Stored in the trace header and shown by `report`, `check` and the
//! metrics; the choosing itself is the loader's (`tenge_trace::probe`).

use serde::{Deserialize, Serialize};

/// A kind of kernel hook a probe can run from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    TpBtf,
    RawTp,
    Tracepoint,
    Fentry,
    Kprobe,
}

impl Backend {
    /// The order in which backends are tried: cheapest and most precise first.
    pub const LADDER: [Backend; 5] = [
        Backend::TpBtf,
        Backend::RawTp,
        Backend::Tracepoint,
        Backend::Fentry,
        Backend::Kprobe,
    ];
}

/// What happened to one probe: the backend it runs on (None: nothing
/// attached) and every backend tried before, with the kernel's error.
/// Backends the probe has no program for are not tried (classic
/// tcp:tcp_sendmsg_locked has no socket pointer; fentry/kprobe flavours exist
/// for sendmsg, window_adv, tcp_rcv, data_ready and app_read (fexit; no
/// kprobe: a kretprobe does not see the socket)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedProbe {
    /// The tracepoint, as `category:name`.
    pub hook: String,
    /// The event kind it emits (see `event::kind_name`).
    pub kind: String,
    pub backend: Option<Backend>,
    /// The C function that is attached (empty when nothing is).
    pub program: String,
    pub tried: Vec<(Backend, String)>,
    /// The findings this probe's events feed: what is lost without it.
    #[serde(default)]
    pub feeds: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbePlan {
    pub probes: Vec<PlannedProbe>,
}

impl ProbePlan {
    pub fn attached(&self) -> impl Iterator<Item = &PlannedProbe> {
        self.probes.iter().filter(|p| p.backend.is_some())
    }
}

/// One hooked tracepoint: its hits and its program's runs while counted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookHits {
    /// The tracepoint, as `category:name`.
    pub hook: String,
    /// The program attached there whose runs these are (a tracepoint may
    /// have several). Absent in older recordings.
    #[serde(default)]
    pub program: String,
    pub hits: u64,
    pub runs: u64,
}

impl HookHits {
    /// Hits that ran no program. The counters start and stop a few events
    /// apart, on a busy hook, so this errs low by as many.
    pub fn not_run(&self) -> u64 {
        self.hits.saturating_sub(self.runs)
    }

    /// Hits that ran no program, over every hook counted.
    pub fn total_not_run(hits: &[HookHits]) -> u64 {
        hits.iter().map(HookHits::not_run).sum()
    }
}
