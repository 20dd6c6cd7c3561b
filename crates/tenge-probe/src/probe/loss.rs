//! The lab's loss (bpf/lab_loss.bpf.c): a tc program on an interface's
//! ingress that drops every N-th TCP skb carrying data, for a lossy path
//! on kernels without netem. It counts what it dropped, so that a test can
//! hold the kernel's retransmit and out-of-order counters against the
//! tracer's paths. Detached when dropped (and gone with its namespace).

use anyhow::Context;
use aya::maps::PerCpuArray;
use aya::programs::tc::{self, TcAttachType};
use aya::programs::SchedClassifier;
use aya::{Ebpf, EbpfLoader};
use serde::{Deserialize, Serialize};

static LOSS_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/lab_loss.bpf.o"));

#[derive(Debug)]
pub struct Loss {
    ebpf: Ebpf,
}

/// What the program saw and dropped, summed over the CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LossCounts {
    /// TCP skbs carrying data that reached the program.
    pub data_skbs: u64,
    pub dropped_skbs: u64,
    /// The dropped skbs' segments (`gso_segs`; 1 for a plain skb).
    pub dropped_segments: u64,
}

impl Loss {
    /// Drops every `drop_every`-th data skb arriving at `iface`, an
    /// interface of the calling thread's network namespace.
    pub fn attach(iface: &str, drop_every: u32) -> anyhow::Result<Loss> {
        let mut ebpf = EbpfLoader::new()
            .override_global("drop_every", &drop_every, true)
            .load(LOSS_OBJ)
            .context("loading the lab's loss program")?;
        let program: &mut SchedClassifier = ebpf
            .program_mut("lab_loss")
            .context("no program lab_loss")?
            .try_into()?;
        program.load()?;
        // TCX (6.6+) needs no qdisc; before, a clsact qdisc, gone with the interface.
        if program.attach(iface, TcAttachType::Ingress).is_err() {
            tc::qdisc_add_clsact(iface).with_context(|| format!("clsact on {iface}"))?;
            program
                .attach(iface, TcAttachType::Ingress)
                .with_context(|| format!("the loss program on {iface}'s ingress"))?;
        }
        Ok(Loss { ebpf })
    }

    pub fn counts(&self) -> anyhow::Result<LossCounts> {
        let map = self
            .ebpf
            .map("lab_loss_counts")
            .context("no lab_loss_counts")?;
        let counts = PerCpuArray::<_, u64>::try_from(map)?;
        let sum = |index: u32| -> anyhow::Result<u64> { Ok(counts.get(&index, 0)?.iter().sum()) };
        Ok(LossCounts {
            data_skbs: sum(0)?,
            dropped_skbs: sum(1)?,
            dropped_segments: sum(2)?,
        })
    }
}
