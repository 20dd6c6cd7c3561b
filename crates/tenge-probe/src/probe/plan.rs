//! Which kernel hook each logical probe uses, chosen by trying them.
//!
//! Every probe of `bpf/tenge.bpf.c` comes in up to five flavours, one per
//! [`Backend`]. [`attach_all`] walks the ladder tp_btf → raw_tp → tracepoint →
//! fentry → kprobe and keeps the first flavour the kernel both loads and
//! attaches; what failed, and why, stays in the [`ProbePlan`]. Nothing here
//! looks at the kernel version.

use aya::programs::{
    BtfTracePoint, FEntry, FExit, KProbe, Program, ProgramError, RawTracePoint, TracePoint,
};
use aya::{Btf, Ebpf, EbpfLoader, VerifierLogLevel};
use std::collections::HashMap;
use tenge_events::hooks::{self, Hook};
pub use tenge_events::plan::{Backend, PlannedProbe, ProbePlan};

/// The ladder of the debug switch [`BACKENDS_VAR`] (`fentry`, or
/// `kprobe,raw_tp`: tried in that order), if it is set.
pub fn forced_backends() -> anyhow::Result<Option<Vec<Backend>>> {
    let Some(value) = std::env::var_os(BACKENDS_VAR) else {
        return Ok(None);
    };
    let value = value.to_string_lossy();
    let ladder = value
        .split(',')
        .map(|name| {
            serde_json::from_value(serde_json::Value::String(name.trim().to_owned())).map_err(
                |_| {
                    anyhow::anyhow!(
                        "{BACKENDS_VAR}={value}: {name:?} is not a backend (tp_btf, raw_tp, tracepoint, fentry, kprobe)"
                    )
                },
            )
        })
        .collect::<anyhow::Result<Vec<Backend>>>()?;
    Ok(Some(ladder))
}

/// Suffix of the C program names (`<probe>_<suffix>`) for a backend.
fn program_suffix(backend: Backend) -> &'static str {
    match backend {
        Backend::TpBtf => "btf",
        Backend::RawTp => "raw",
        Backend::Tracepoint => "tp",
        Backend::Fentry => "fentry",
        Backend::Kprobe => "kprobe",
    }
}

/// A debug switch: the backends every probe may use, in order, for every
/// command (see [`forced_backends`]).
pub const BACKENDS_VAR: &str = "TENGE_TRACE_BACKENDS";

/// Set (to anything) to have the kernel verifier's log in the reasons a
/// program was refused.
pub const VERIFIER_LOG_VAR: &str = "TENGE_TRACE_VERIFIER_LOG";

/// An object's programs, with the CO-RE relocations this kernel could not
/// give each of them (by program name), and the links of those attached.
pub(crate) struct Loaded {
    pub ebpf: Ebpf,
    relocation_failures: HashMap<String, Vec<String>>,
    pub links: Links,
}

/// A program's link: dropping it detaches the program, which stays loaded.
type Link = Box<dyn std::any::Any + Send>;

/// The links of the attached programs, each with the hook and backend it
/// was attached on: [`Links::detach`] leaves the programs loaded and
/// [`Links::attach`] attaches them again where they were, as time-sliced
/// sampling does (no program runs, so none costs anything, between slices).
#[derive(Default)]
pub(crate) struct Links {
    attached: Vec<(String, Hook, Backend, Option<Link>)>,
}

impl Links {
    pub fn detach(&mut self) {
        for (_, _, _, link) in &mut self.attached {
            *link = None;
        }
    }

    pub fn attach(&mut self, ebpf: &mut Ebpf) -> Result<(), ProgramError> {
        // A classic tracepoint is attached by its id in tracefs.
        let classic = self
            .attached
            .iter()
            .any(|(_, _, backend, link)| *backend == Backend::Tracepoint && link.is_none());
        match classic {
            true => super::tracefs::with(|| self.attach_here(ebpf)),
            false => self.attach_here(ebpf),
        }
    }

    fn attach_here(&mut self, ebpf: &mut Ebpf) -> Result<(), ProgramError> {
        for (name, hook, backend, link) in &mut self.attached {
            if link.is_none() {
                let program = ebpf.program_mut(name).ok_or(ProgramError::NotLoaded)?;
                *link = Some(attach_loaded(program, hook, *backend)?);
            }
        }
        Ok(())
    }
}

/// Loads an object (maps created, programs relocated, none loaded yet). A
/// relocation that does not fit this kernel (a field it lacks, a bitfield
/// where the object has a plain field) poisons its instruction rather than
/// failing the object (vendor/aya-obj/PATCHED.md): only a program that
/// reaches it fails, in the verifier, and the plan names the relocation.
pub(crate) fn load_object(loader: &mut EbpfLoader<'_>, object: &[u8]) -> anyhow::Result<Loaded> {
    aya_obj::btf::take_relocation_failures();
    // The verifier's log costs time and memory on every load: on demand only.
    let log = match std::env::var_os(VERIFIER_LOG_VAR) {
        Some(_) => VerifierLogLevel::VERBOSE | VerifierLogLevel::STATS,
        None => VerifierLogLevel::DISABLE,
    };
    let ebpf = loader.verifier_log_level(log).load(object).map_err(|err| {
        anyhow::anyhow!("BPF unavailable: cannot create maps: {}", error_chain(&err))
    })?;
    let mut relocation_failures: HashMap<String, Vec<String>> = HashMap::new();
    for failure in aya_obj::btf::take_relocation_failures() {
        relocation_failures
            .entry(failure.function)
            .or_default()
            .push(format!(
                "instruction {}: {}",
                failure.instruction, failure.error
            ));
    }
    Ok(Loaded {
        ebpf,
        relocation_failures,
        links: Links::default(),
    })
}

/// Attaches every probe of tenge.bpf.c on the first of `ladder` that works.
/// With an empty plan (nothing attached) the caller fails; the plan says why
/// per probe.
pub(crate) fn attach_all(loaded: &mut Loaded, btf: &Btf, ladder: &[Backend]) -> ProbePlan {
    attach_hooks(loaded, btf, hooks::per_packet(), ladder)
}

/// [`attach_all`] for the programs of `hooks` in any object.
pub(crate) fn attach_hooks<'a>(
    loaded: &mut Loaded,
    btf: &Btf,
    hooks: impl IntoIterator<Item = &'a Hook>,
    ladder: &[Backend],
) -> ProbePlan {
    let probes = hooks
        .into_iter()
        .map(|hook| attach_probe(loaded, btf, hook, ladder))
        .collect();
    ProbePlan { probes }
}

/// Fails, with every distinct reason, when nothing of `plan` attached.
pub(crate) fn require_attached(plan: &ProbePlan) -> anyhow::Result<()> {
    if plan.attached().next().is_some() {
        return Ok(());
    }
    let mut errors: Vec<String> = plan
        .probes
        .iter()
        .flat_map(|p| &p.tried)
        .map(|(b, e)| format!("{b:?}: {e}"))
        .collect();
    errors.sort();
    errors.dedup();
    anyhow::bail!(
        "BPF unavailable: no probe could be attached ({})",
        errors.join("; ")
    )
}

fn attach_probe(loaded: &mut Loaded, btf: &Btf, spec: &Hook, ladder: &[Backend]) -> PlannedProbe {
    let mut planned = PlannedProbe {
        hook: spec.name(),
        kind: spec.kind.to_owned(),
        backend: None,
        program: String::new(),
        tried: Vec::new(),
        feeds: hooks::findings_fed_by(spec.kind).to_owned(),
    };
    for &backend in ladder {
        for name in program_forms(&loaded.ebpf, spec, backend) {
            let Some(program) = loaded.ebpf.program_mut(&name) else {
                continue;
            };
            match attach_program(program, btf, spec, backend) {
                Ok(link) => {
                    planned.backend = Some(backend);
                    planned.program = name.clone();
                    loaded
                        .links
                        .attached
                        .push((name, *spec, backend, Some(link)));
                    return planned;
                }
                Err(err) => {
                    let reason = match loaded.relocation_failures.get(&name) {
                        // The verifier's "invalid func unknown#195896080" is the poison.
                        Some(failures) => format!(
                            "CO-RE relocation does not fit this kernel ({})",
                            failures.join("; ")
                        ),
                        None => error_chain(&err),
                    };
                    planned.tried.push((backend, format!("{name}: {reason}")));
                }
            }
        }
    }
    planned
}

/// The programs of `spec` for `backend`: `<prefix>_<suffix>` (the newest
/// form of the hook), then `<prefix>_<suffix>__<variant>` for older kernels'
/// forms, by name. Not every probe has every backend (no fentry without a
/// function).
fn program_forms(ebpf: &Ebpf, spec: &Hook, backend: Backend) -> Vec<String> {
    let base = format!("{}_{}", spec.program, program_suffix(backend));
    let variant = format!("{base}__");
    let mut forms: Vec<String> = ebpf
        .programs()
        .map(|(name, _)| name)
        .filter(|name| *name == base || name.starts_with(&variant))
        .map(str::to_owned)
        .collect();
    forms.sort_by_key(|name| (*name != base, name.clone()));
    forms
}

/// Loads and attaches one program; on failure it is unloaded again.
fn attach_program(
    program: &mut Program,
    btf: &Btf,
    spec: &Hook,
    backend: Backend,
) -> Result<Link, ProgramError> {
    let function = spec.function.unwrap_or(spec.tracepoint);
    match backend {
        Backend::TpBtf => {
            <&mut BtfTracePoint>::try_from(&mut *program)?.load(spec.tracepoint, btf)?
        }
        Backend::RawTp => <&mut RawTracePoint>::try_from(&mut *program)?.load()?,
        Backend::Tracepoint => <&mut TracePoint>::try_from(&mut *program)?.load()?,
        Backend::Fentry if matches!(program, Program::FExit(_)) => {
            <&mut FExit>::try_from(&mut *program)?.load(function, btf)?
        }
        Backend::Fentry => <&mut FEntry>::try_from(&mut *program)?.load(function, btf)?,
        Backend::Kprobe => <&mut KProbe>::try_from(&mut *program)?.load()?,
    }
    attach_loaded(program, spec, backend).inspect_err(|_| {
        let _ = unload(program);
    })
}

fn unload(program: &mut Program) -> Result<(), ProgramError> {
    match program {
        Program::BtfTracePoint(p) => p.unload(),
        Program::RawTracePoint(p) => p.unload(),
        Program::TracePoint(p) => p.unload(),
        Program::FEntry(p) => p.unload(),
        Program::FExit(p) => p.unload(),
        Program::KProbe(p) => p.unload(),
        _ => Ok(()),
    }
}

/// Attaches a loaded program on `spec`'s hook; the link is the caller's.
fn attach_loaded(
    program: &mut Program,
    spec: &Hook,
    backend: Backend,
) -> Result<Link, ProgramError> {
    let function = spec.function.unwrap_or(spec.tracepoint);
    macro_rules! owned {
        ($ty:ty, |$p:ident| $attach:expr) => {{
            let $p: &mut $ty = program.try_into()?;
            let id = $attach?;
            Ok(Box::new($p.take_link(id)?))
        }};
    }
    match backend {
        Backend::TpBtf => owned!(BtfTracePoint, |p| p.attach()),
        Backend::RawTp => owned!(RawTracePoint, |p| p.attach(spec.tracepoint)),
        Backend::Tracepoint => owned!(TracePoint, |p| p.attach(spec.category, spec.tracepoint)),
        // fexit where the figure is the return value (tcp_recvmsg's).
        Backend::Fentry if matches!(program, Program::FExit(_)) => owned!(FExit, |p| p.attach()),
        Backend::Fentry => owned!(FEntry, |p| p.attach()),
        Backend::Kprobe => owned!(KProbe, |p| p.attach(function, 0)),
    }
}

/// An error and its causes on one line: aya nests the errno deep inside.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every hook of the catalog has its programs in the object it belongs
    /// to (tp_btf, and raw_tp for the per-packet ones), and no program of
    /// those objects is outside the catalog.
    #[test]
    fn the_objects_have_a_program_for_every_hook_of_the_catalog() {
        let objects: [(&[u8], Vec<&Hook>, &[Backend]); 2] = [
            (
                super::super::TENGE_OBJ,
                hooks::per_packet().collect(),
                &[Backend::TpBtf, Backend::RawTp],
            ),
            (
                super::super::stages::STAGES_OBJ,
                hooks::in_stages().chain(hooks::task_marks()).collect(),
                &[Backend::TpBtf],
            ),
        ];
        for (object, hooks, backends) in objects {
            let parsed = aya_obj::Object::parse(object).expect("the object parses");
            let programs: Vec<&String> = parsed.programs.keys().collect();
            for hook in &hooks {
                for &backend in backends {
                    let name = format!("{}_{}", hook.program, program_suffix(backend));
                    assert!(
                        programs
                            .iter()
                            .any(|p| **p == name || p.starts_with(&format!("{name}__"))),
                        "{name} missing: {programs:?}"
                    );
                }
            }
            for program in &programs {
                let known = hooks
                    .iter()
                    .any(|h| program.starts_with(&format!("{}_", h.program)))
                    // Attached by other means: perf events, and none (the collector runs it).
                    || ["cpu_sample", "tt_batch_flush"].contains(&program.as_str());
                assert!(known, "{program} is in no catalog row");
            }
        }
    }

    #[test]
    fn backends_serialize_as_section_prefixes() {
        let names: Vec<String> = Backend::LADDER
            .iter()
            .map(|b| serde_json::to_string(b).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "\"tp_btf\"",
                "\"raw_tp\"",
                "\"tracepoint\"",
                "\"fentry\"",
                "\"kprobe\""
            ]
        );
    }

    static RELOCATION_TEST_OBJ: &[u8] =
        aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/relocation_test.bpf.o"));

    /// A program whose CO-RE relocation does not fit the running kernel (a
    /// field it lacks; a plain load of what is a bitfield there) fails alone,
    /// with the relocation named, and its probe falls to the next backend.
    #[test]
    fn a_relocation_that_does_not_fit_falls_back_with_its_reason() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs this as root");
            eprintln!("skipped: loading BPF needs root");
            return;
        }
        let btf = super::super::kernel_btf().unwrap();
        let mut loaded =
            load_object(EbpfLoader::new().btf(Some(&btf)), RELOCATION_TEST_OBJ).unwrap();
        let state = hooks::HOOKS
            .iter()
            .find(|h| h.kind == "state")
            .expect("a state hook");
        let specs = ["missing", "bitfield"].map(|program| Hook { program, ..*state });
        let plan = attach_hooks(&mut loaded, &btf, &specs, &[Backend::TpBtf, Backend::RawTp]);
        for (probe, why) in plan.probes.iter().zip(["no_such_field", "bitfield"]) {
            assert_eq!(probe.backend, Some(Backend::RawTp), "{probe:?}");
            let (backend, reason) = &probe.tried[0];
            assert_eq!(*backend, Backend::TpBtf);
            assert!(
                reason.contains("CO-RE relocation does not fit this kernel"),
                "{reason}"
            );
            if why == "bitfield" {
                assert!(reason.contains("bitfield"), "{reason}");
            } else {
                assert!(reason.contains("instruction"), "{reason}");
            }
        }
    }
}
