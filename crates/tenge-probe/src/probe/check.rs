//! `tenge-trace check`: what this kernel lets us do, proven by doing it.
//!
//! Each hook family is tested by loading and attaching an empty program from
//! `bpf/check.bpf.c`; then the real probes are attached with filters that
//! match nothing, to show the plan `record` would use. Nothing here fails:
//! every problem ends up in the report.

use super::plan::error_chain;
use super::{Filters, ProbePlan, Tracer, TracerOptions};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::tc::TcAttachType;
use aya::programs::{
    BtfTracePoint, FEntry, KProbe, PerfEvent, Program, ProgramError, RawTracePoint,
    SchedClassifier, TracePoint,
};
use aya::{Btf, EbpfLoader};
use serde::Serialize;

pub(crate) static CHECK_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/check.bpf.o"));

/// Hook families, as named in the report, with the program that proves each.
const FAMILIES: [(&str, &str); 7] = [
    ("fentry", "check_fentry"),
    ("kprobe", "check_kprobe"),
    ("tp_btf", "check_tp_btf"),
    ("raw_tp", "check_raw_tp"),
    ("tracepoint", "check_tracepoint"),
    ("tc", "check_tc"),
    ("perf_event", "check_perf_event"),
];

#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// `uname -r`
    pub kernel: String,
    /// /sys/kernel/btf/vmlinux is present and parses.
    pub btf: bool,
    pub capabilities: Capabilities,
    pub hooks: Vec<HookCheck>,
    /// The probes `record` would attach, or None if it could not start.
    pub plan: Option<ProbePlan>,
    /// Why the plan is missing.
    pub plan_error: Option<String>,
    /// What killed runs of the tool left on the host: namespaces of labs
    /// whose process is gone (`ip netns delete NAME`, or the next `lab`,
    /// removes them).
    pub leftovers: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct HookCheck {
    pub family: String,
    pub works: bool,
    pub error: Option<String>,
}

/// Effective user and the capabilities that matter (from /proc/self/status).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Capabilities {
    pub euid: u32,
    pub bpf: bool,
    pub perfmon: bool,
    pub net_admin: bool,
    pub sys_admin: bool,
}

impl Capabilities {
    pub fn current() -> Capabilities {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let effective = status
            .lines()
            .find_map(|line| line.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or(0);
        let has = |cap: u32| effective & (1 << cap) != 0;
        Capabilities {
            euid,
            bpf: has(39),
            perfmon: has(38),
            net_admin: has(12),
            sys_admin: has(21),
        }
    }
}

pub fn check() -> CheckReport {
    let btf = Btf::from_sys_fs();
    let hooks = match &btf {
        Ok(btf) => check_hooks(btf),
        Err(err) => FAMILIES
            .iter()
            .map(|(family, _)| HookCheck {
                family: family.to_string(),
                works: false,
                error: Some(format!("no BTF: {err}")),
            })
            .collect(),
    };
    // Port 1 in netns inode 1: nothing matches, so nothing is recorded.
    let nothing = TracerOptions {
        filters: Filters {
            port: Some(1),
            netns: Some(1),
            ..Filters::default()
        },
        ring_bytes: 4096,
        ..TracerOptions::default()
    };
    let (plan, plan_error) = match Tracer::start(&nothing) {
        Ok(tracer) => (Some(tracer.plan().clone()), None),
        Err(err) => (None, Some(format!("{err:#}"))),
    };
    CheckReport {
        kernel: kernel_release(),
        btf: btf.is_ok(),
        capabilities: Capabilities::current(),
        hooks,
        plan,
        plan_error,
        // The lab's to say: see `lab::netns::stale_namespaces`.
        leftovers: Vec::new(),
    }
}

fn check_hooks(btf: &Btf) -> Vec<HookCheck> {
    super::tracefs::with(|| check_hooks_here(btf))
}

/// [`check_hooks`] where tracefs is mounted.
fn check_hooks_here(btf: &Btf) -> Vec<HookCheck> {
    let loaded = super::plan::load_object(EbpfLoader::new().btf(Some(btf)), CHECK_OBJ);
    let mut ebpf = match loaded {
        Ok(loaded) => loaded.ebpf,
        Err(err) => {
            let error = format!("{err:#}");
            return FAMILIES
                .iter()
                .map(|(family, _)| HookCheck {
                    family: family.to_string(),
                    works: false,
                    error: Some(error.clone()),
                })
                .collect();
        }
    };
    let hooks = FAMILIES
        .iter()
        .map(|&(family, program)| {
            let program = ebpf
                .program_mut(program)
                .expect("check.bpf.c defines every family's program");
            let result = try_family(family, program, btf);
            HookCheck {
                family: family.to_string(),
                works: result.is_ok(),
                error: result.err().map(|e| error_chain(&e)),
            }
        })
        .collect();
    drop(ebpf); // detaches every link made above
    hooks
}

fn try_family(family: &str, program: &mut Program, btf: &Btf) -> Result<(), ProgramError> {
    match family {
        "fentry" => {
            let p: &mut FEntry = program.try_into()?;
            p.load("tcp_rcv_established", btf)?;
            p.attach().map(drop)
        }
        "kprobe" => {
            let p: &mut KProbe = program.try_into()?;
            p.load()?;
            p.attach("tcp_rcv_established", 0).map(drop)
        }
        "tp_btf" => {
            let p: &mut BtfTracePoint = program.try_into()?;
            p.load("netif_receive_skb", btf)?;
            p.attach().map(drop)
        }
        "raw_tp" => {
            let p: &mut RawTracePoint = program.try_into()?;
            p.load()?;
            p.attach("netif_receive_skb").map(drop)
        }
        "tracepoint" => {
            let p: &mut TracePoint = program.try_into()?;
            p.load()?;
            p.attach("net", "netif_receive_skb").map(drop)
        }
        "tc" => {
            let p: &mut SchedClassifier = program.try_into()?;
            p.load()?;
            in_private_netns(|| {
                // TCX (6.6+) needs no qdisc; before, a clsact qdisc on lo,
                // gone with the namespace.
                let link = match p.attach("lo", TcAttachType::Ingress) {
                    Ok(link) => link,
                    Err(_) => {
                        aya::programs::tc::qdisc_add_clsact("lo")?;
                        p.attach("lo", TcAttachType::Ingress)?
                    }
                };
                p.detach(link)
            })
        }
        "perf_event" => {
            let p: &mut PerfEvent = program.try_into()?;
            p.load()?;
            p.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu: 0 },
                SamplePolicy::Frequency(1),
                false,
            )
            .map(drop)
        }
        _ => unreachable!("unknown hook family {family}"),
    }
}

/// Runs `f` on a thread of its own in a new, empty network namespace, so
/// that what it attaches to that namespace's lo vanishes with it.
fn in_private_netns(
    f: impl FnOnce() -> Result<(), ProgramError> + Send,
) -> Result<(), ProgramError> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: unshare affects this thread only (CLONE_NEWNET).
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                    return Err(ProgramError::SyscallError(aya::sys::SyscallError {
                        call: "unshare(CLONE_NEWNET)",
                        io_error: std::io::Error::last_os_error(),
                    }));
                }
                f()
            })
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

fn kernel_release() -> String {
    // SAFETY: uname fills the struct; release is NUL-terminated.
    unsafe {
        let mut name: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut name) != 0 {
            return String::new();
        }
        std::ffi::CStr::from_ptr(name.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}
