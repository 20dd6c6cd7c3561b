//! A recording as a Chrome trace-event JSON timeline, which ui.perfetto.dev
//! and chrome://tracing open (the "Trace Event Format" document: a
//! `traceEvents` array of objects with `ph`, `ts` in microseconds, `pid`,
//! `tid`).
//!
//! - One process "CPUs" with a thread per CPU: every event of the recording
//!   as an instant where its hook ran.
//! - One process per flow (a socket's view: local and remote end): each
//!   stage a packet went through, as the path analysis measured it, as an
//!   async span (`b`/`e`, category `tx` or `rx`, named by the stage), so
//!   spans of packets in flight together may overlap; and the window its
//!   socket advertised, as a counter.
//!
//! Times are the recording's monotonic clock, in microseconds with the
//! nanoseconds as three decimals, so every span's length is exactly the
//! latency the report counted.

use crate::analysis::paths::StageSpan;
use crate::event::{addr_text, Body, Event, FlowKey};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{self, Write};

/// The process whose threads are the CPUs.
const CPUS_PID: u32 = 1;

/// Writes trace events as they are pushed; [`finish`](Self::finish) closes the JSON.
pub struct PerfettoWriter<W: Write> {
    out: W,
    /// Flow processes by flow, numbered from 2.
    flows: HashMap<FlowKey, u32>,
    cpus: HashSet<u32>,
    next_span: u64,
    first: bool,
}

impl<W: Write> PerfettoWriter<W> {
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(br#"{"displayTimeUnit":"ns","traceEvents":["#)?;
        let mut writer = PerfettoWriter {
            out,
            flows: HashMap::new(),
            cpus: HashSet::new(),
            next_span: 0,
            first: true,
        };
        writer.name_process(CPUS_PID, "CPUs")?;
        Ok(writer)
    }

    /// The event as an instant on its CPU's track; a window advertisement
    /// also as a point of its flow's window counter.
    pub fn push_event(&mut self, ev: &Event) -> io::Result<()> {
        let tid = self.cpu_thread(ev.hdr.cpu)?;
        let mut args = json!({});
        if let (Some(src), Some(dst)) = (ev.src(), ev.dst()) {
            args["flow"] = format!("{} > {}", addr_text(&src), addr_text(&dst)).into();
        }
        if ev.hdr.sock_cookie != 0 {
            args["cookie"] = ev.hdr.sock_cookie.into();
        }
        let ts = micros(ev.hdr.ts_ns);
        self.write(json!({"name": ev.kind_name(), "ph": "i", "s": "t", "pid": CPUS_PID, "tid": tid, "ts": ts, "args": args}))?;
        if let (Body::WindowAdv(w), Some(local), Some(remote)) = (&ev.body, ev.src(), ev.dst()) {
            let flow = FlowKey {
                netns: ev.hdr.netns,
                local,
                remote,
            };
            let pid = self.flow_process(&flow)?;
            self.write(json!({"name": "advertised window", "ph": "C", "pid": pid, "ts": ts, "args": {"bytes": w.window}}))?;
        }
        Ok(())
    }

    /// One stage of one packet as an async span on its flow's process.
    pub fn push_span(&mut self, span: &StageSpan) -> io::Result<()> {
        let pid = self.flow_process(&span.flow)?;
        self.next_span += 1;
        let id = format!("{:#x}", self.next_span);
        let (name, cat) = (span.stage_name(), span.direction());
        let args =
            json!({"path": span.path.frames().join(";"), "packets": span.packets, "seq": span.seq});
        self.write(json!({"name": name, "cat": cat, "ph": "b", "id": id, "pid": pid, "tid": pid, "ts": micros(span.start_ns), "args": args}))?;
        self.write(json!({"name": name, "cat": cat, "ph": "e", "id": id, "pid": pid, "tid": pid, "ts": micros(span.end_ns)}))
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b"]}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn cpu_thread(&mut self, cpu: u32) -> io::Result<u32> {
        // tid 0 is the idle task to some readers: CPU n is thread n + 1.
        let tid = cpu + 1;
        if self.cpus.insert(cpu) {
            self.write(json!({"name": "thread_name", "ph": "M", "pid": CPUS_PID, "tid": tid, "args": {"name": format!("CPU {cpu}")}}))?;
            self.write(json!({"name": "thread_sort_index", "ph": "M", "pid": CPUS_PID, "tid": tid, "args": {"sort_index": cpu}}))?;
        }
        Ok(tid)
    }

    fn flow_process(&mut self, flow: &FlowKey) -> io::Result<u32> {
        if let Some(&pid) = self.flows.get(flow) {
            return Ok(pid);
        }
        let pid = CPUS_PID + 1 + self.flows.len() as u32;
        self.flows.insert(*flow, pid);
        let name = format!(
            "{} > {} (netns {})",
            addr_text(&flow.local),
            addr_text(&flow.remote),
            flow.netns
        );
        self.name_process(pid, &name)?;
        Ok(pid)
    }

    fn name_process(&mut self, pid: u32, name: &str) -> io::Result<()> {
        self.write(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}))
    }

    fn write(&mut self, event: Value) -> io::Result<()> {
        if !std::mem::take(&mut self.first) {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut self.out, &event)?;
        Ok(())
    }
}

/// Nanoseconds as microseconds with three decimals, exactly: a JSON number
/// written as text, not a float rounded on the way.
fn micros(ns: u64) -> Value {
    let text = format!("{}.{:03}", ns / 1000, ns % 1000);
    Value::Number(text.parse().expect("a decimal number"))
}
