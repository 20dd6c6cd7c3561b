//! Transfers under every [`Mode`], repetitions interleaved round-robin (each
//! repetition starts the rotation one mode later), each result paired with
//! the untraced run of the same repetition: noise from other load on the
//! machine hits neighbouring runs alike, so the ratios stay honest even when
//! the absolute numbers wander.

use super::instrument::{Instrument, Mode, Target, ToolCounts};
use super::stats::Summary;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tenge_trace::lab::iperf::{run_client, Iperf3Server};
use tenge_trace::lab::{Lab, LabConfig, TransferReport};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// iperf3, default offloads, one stream: bits/s.
    IperfBulk,
    /// Lab::run_transfer, 64 KiB writes: bits/s.
    TransferBulk,
    /// iperf3 -N -l 100 (TCP_NODELAY, 100-byte writes): bits/s, i.e. writes/s.
    IperfSmall,
    /// Lab::run_transfer, 100-byte writes, TCP_NODELAY: data segments/s.
    TransferSmall,
}

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::IperfBulk,
        Workload::TransferBulk,
        Workload::IperfSmall,
        Workload::TransferSmall,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Workload::IperfBulk => "iperf3 bulk (Gbit/s)",
            Workload::TransferBulk => "in-tree sender bulk (Gbit/s)",
            Workload::IperfSmall => "iperf3 -N -l 100 (Mbit/s)",
            Workload::TransferSmall => "in-tree 100 B writes + NODELAY (kpps)",
        }
    }

    /// Result unit divisor for display.
    pub fn display_scale(self) -> f64 {
        match self {
            Workload::IperfBulk | Workload::TransferBulk => 1e9,
            Workload::IperfSmall => 1e6,
            Workload::TransferSmall => 1e3,
        }
    }

    fn uses_iperf(self) -> bool {
        matches!(self, Workload::IperfBulk | Workload::IperfSmall)
    }

    pub fn small(self) -> bool {
        matches!(self, Workload::IperfSmall | Workload::TransferSmall)
    }
}

/// One mode of one workload over all repetitions.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ModeResult {
    pub mode: Mode,
    /// Bits/s, or segments/s for TransferSmall, one per repetition.
    pub values: Vec<f64>,
    pub value: Summary,
    /// value / untraced value of the same repetition.
    pub ratio: Summary,
    /// What the tool counted, summed over repetitions.
    pub tool: ToolCounts,
    /// Data segments the sender sent, summed over repetitions; 0 where not
    /// known (iperf3).
    #[serde(default)]
    pub data_segments: u64,
}

impl ModeResult {
    /// Per data segment sent, where known: the events, the records the
    /// programs wrote, and the ring records that carried them.
    pub fn records_per_segment(&self) -> Option<PerSegment> {
        let segments = self.data_segments as f64;
        (self.data_segments > 0 && self.tool.ring_records > 0).then(|| PerSegment {
            events: self.tool.events as f64 / segments,
            // Results from before batches: every record was a ring record.
            written: match self.tool.written {
                0 => self.tool.ring_records,
                n => n,
            } as f64
                / segments,
            ring: self.tool.ring_records as f64 / segments,
        })
    }
}

/// See [`ModeResult::records_per_segment`].
pub struct PerSegment {
    pub events: f64,
    pub written: f64,
    pub ring: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadResult {
    pub workload: Workload,
    pub label: String,
    pub seconds_per_run: f64,
    pub modes: Vec<ModeResult>,
}

pub struct ThroughputSettings<'a> {
    pub reps: u32,
    pub seconds: u32,
    pub scratch: &'a Path,
    pub bpftrace_script: &'a Path,
    /// The workloads to run, in [`Workload::ALL`]'s order.
    pub workloads: Vec<Workload>,
    /// The modes to run, untraced first (every ratio is to it).
    pub modes: Vec<Mode>,
}

impl ThroughputSettings<'_> {
    /// Of `workloads` and `modes` (empty: all), the ones to run.
    pub fn choose(&mut self, workloads: &[Workload], modes: &[Mode]) {
        self.workloads = chosen(&Workload::ALL, workloads);
        self.modes = chosen(&Mode::ALL, modes);
        if !self.modes.contains(&Mode::Untraced) {
            self.modes.insert(0, Mode::Untraced);
        }
    }
}

/// The items of `all` in `wanted`, in `all`'s order; all of them if none is wanted.
fn chosen<T: Copy + PartialEq>(all: &[T], wanted: &[T]) -> Vec<T> {
    all.iter()
        .copied()
        .filter(|x| wanted.is_empty() || wanted.contains(x))
        .collect()
}

/// One lab per workload, each on its own port.
pub fn run(settings: &ThroughputSettings) -> Result<Vec<WorkloadResult>> {
    settings
        .workloads
        .iter()
        .map(|&workload| {
            let index = Workload::ALL.iter().position(|&w| w == workload);
            run_workload(workload, 15201 + index.unwrap_or(0) as u16, settings)
        })
        .collect()
}

fn run_workload(workload: Workload, port: u16, s: &ThroughputSettings) -> Result<WorkloadResult> {
    let cfg = LabConfig {
        port,
        mtu: 1500,
        write_size: if workload.small() { 100 } else { 64 << 10 },
        nodelay: workload.small(),
        bytes: u64::MAX / 2,
        ..LabConfig::default()
    };
    let lab = Lab::new(&cfg)?;
    let _server = match workload.uses_iperf() {
        true => Some(Iperf3Server::start(lab.receiver_netns().name(), port)?),
        false => None,
    };
    let target = Target {
        sender_netns: lab.sender_netns().name(),
        sender_iface: lab.sender_iface(),
        port,
        scratch: s.scratch,
        bpftrace_script: s.bpftrace_script,
    };
    let n = s.modes.len();
    let mut values = vec![Vec::new(); n];
    let mut tools = vec![ToolCounts::default(); n];
    let mut data_segments = vec![0; n];
    for rep in 0..s.reps as usize {
        for k in 0..n {
            let m = (rep + k) % n;
            let mode = s.modes[m];
            super::check_interrupted()?;
            eprintln!(
                "bench: {} rep {}/{}: {}",
                workload.label(),
                rep + 1,
                s.reps,
                mode.label()
            );
            let instrument = Instrument::start(mode, &target)
                .with_context(|| format!("starting {}", mode.label()))?;
            let measured = measure(workload, &lab, &cfg, s.seconds);
            let counts = instrument.stop()?;
            let (value, segments) = measured?;
            values[m].push(value);
            data_segments[m] += segments.unwrap_or(0);
            tools[m].events += counts.events;
            tools[m].ring_records += counts.ring_records;
            tools[m].written += counts.written;
            tools[m].lost += counts.lost;
        }
    }
    let untraced = values[0].clone();
    let modes = s
        .modes
        .iter()
        .zip(values)
        .zip(tools)
        .zip(data_segments)
        .map(|(((&mode, values), tool), data_segments)| {
            let ratios: Vec<f64> = values.iter().zip(&untraced).map(|(v, u)| v / u).collect();
            ModeResult {
                mode,
                value: Summary::of(&values),
                ratio: Summary::of(&ratios),
                values,
                tool,
                data_segments,
            }
        })
        .collect();
    Ok(WorkloadResult {
        workload,
        label: workload.label().to_string(),
        seconds_per_run: f64::from(s.seconds),
        modes,
    })
}

/// One run of the workload: bits/s, or data segments/s for TransferSmall;
/// and the data segments sent, where known (the in-tree sender's tcp_info).
fn measure(
    workload: Workload,
    lab: &Lab,
    cfg: &LabConfig,
    seconds: u32,
) -> Result<(f64, Option<u64>)> {
    let receiver = IpAddr::V4(lab.receiver_ip());
    let iperf_bps = |extra: &[&str]| -> Result<f64> {
        let report = run_client(
            lab.sender_netns().name(),
            receiver,
            cfg.port,
            seconds,
            extra,
        )?;
        report["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .context("iperf3 -J: no end.sum_received.bits_per_second")
    };
    match workload {
        Workload::IperfBulk => Ok((iperf_bps(&[])?, None)),
        Workload::IperfSmall => Ok((iperf_bps(&["-N", "-l", "100"])?, None)),
        Workload::TransferBulk | Workload::TransferSmall => {
            let report = timed_transfer(lab, cfg, seconds)?;
            let segments = u64::from(report.sender.data_segs_out);
            Ok((
                match workload {
                    Workload::TransferSmall => segments as f64 / report.elapsed.as_secs_f64(),
                    _ => report.throughput_bps,
                },
                Some(segments),
            ))
        }
    }
}

/// `cfg`'s transfer (with endless bytes) stopped after `seconds`.
pub fn timed_transfer(lab: &Lab, cfg: &LabConfig, seconds: u32) -> Result<TransferReport> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let timer = scope.spawn(|| {
            let until = Instant::now() + Duration::from_secs(seconds.into());
            while !stop.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            stop.store(true, Ordering::SeqCst);
        });
        let report = lab.run_transfer_until(cfg, &stop, |_| {});
        stop.store(true, Ordering::SeqCst);
        let _ = timer.join();
        report.context("timed lab transfer")
    })
}
