//! `tenge-trace check [--json]`

use std::process::ExitCode;
use tenge_trace::probe::{check, CheckReport};

pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let mut report = check();
    report.leftovers = tenge_trace::lab::netns::stale_namespaces();
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    // Usable means the tracer attached at least one probe.
    let usable = report
        .plan
        .as_ref()
        .is_some_and(|p| p.attached().next().is_some());
    if !usable {
        eprintln!(
            "tenge-trace: BPF tracing is not usable here: {}",
            report
                .plan_error
                .as_deref()
                .unwrap_or("no probe could be attached")
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_text(report: &CheckReport) {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let caps = &report.capabilities;
    println!("kernel        {}", report.kernel);
    println!("BTF           {}", yes(report.btf));
    println!(
        "privileges    euid {}  CAP_BPF {}  CAP_PERFMON {}  CAP_NET_ADMIN {}  CAP_SYS_ADMIN {}",
        caps.euid,
        yes(caps.bpf),
        yes(caps.perfmon),
        yes(caps.net_admin),
        yes(caps.sys_admin)
    );
    println!("\nhook families (each proven by loading and attaching a program):");
    for hook in &report.hooks {
        let status = if hook.works {
            "works".to_string()
        } else {
            format!("no: {}", hook.error.as_deref().unwrap_or("?"))
        };
        println!("  {:<11} {status}", hook.family);
    }
    if !report.leftovers.is_empty() {
        println!(
            "\nleft by killed runs: namespaces {} (the next `lab` removes them, or `ip netns delete NAME`)",
            report.leftovers.join(", ")
        );
    }
    match &report.plan {
        Some(plan) => {
            println!("\nprobe plan for record:");
            for probe in &plan.probes {
                let backend =
                    probe
                        .backend
                        .map_or("-".to_string(), |b| match serde_json::to_value(b) {
                            Ok(serde_json::Value::String(name)) => name,
                            _ => format!("{b:?}"),
                        });
                println!("  {:<32} {:<15} {}", probe.hook, probe.kind, backend);
                if probe.backend.is_none() {
                    println!("      lost: {}", probe.feeds);
                    for (tried, why) in &probe.tried {
                        println!("      {tried:?}: {why}");
                    }
                }
            }
        }
        None => println!(
            "\nprobe plan: none ({})",
            report.plan_error.as_deref().unwrap_or("?")
        ),
    }
}
