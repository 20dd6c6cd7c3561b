//! Reading a recording with the library: the advertised windows of each
//! socket, as a histogram, straight from the events (no analysis module).
//!
//! ```sh
//! sudo tenge-trace lab --scenario mss-clamp -o /tmp/lab.ttr
//! cargo run --example replay -- /tmp/lab.ttr
//! ```

use std::collections::{BTreeMap, HashMap};
use tenge_trace::event::Body;
use tenge_trace::trace_file::TraceReader;

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: replay FILE"))?;
    let mut reader = TraceReader::open(path.as_ref())?;
    println!(
        "recorded on kernel {} with sampling 1/{}",
        reader.meta().kernel_release,
        reader.meta().sample_every
    );
    let mut windows: HashMap<(String, u64), BTreeMap<u32, u64>> = HashMap::new();
    let summary = reader.for_each(|ev| {
        if let (Body::WindowAdv(w), Some(src)) = (ev.body, ev.src()) {
            *windows
                .entry((src.to_string(), ev.hdr.sock_cookie))
                .or_default()
                .entry(w.window)
                .or_default() += 1;
        }
    })?;
    println!("{} events, {} lost", summary.events, summary.lost_total());
    for ((src, cookie), histogram) in &windows {
        println!("{src} (cookie {cookie}):");
        for (window, count) in histogram.iter().rev().take(8) {
            println!("  window {window:>8} B  x{count}");
        }
    }
    Ok(())
}
