//! The records of a file written out of time order, read back in it.
//!
//! `record` writes the records as the ring gives them (a journey's hops
//! come when it ends, after records other CPUs sent meanwhile): putting
//! them in order while recording was a third of the collector's CPU. Each
//! block says when every record stamped before a time had been written
//! (its `settled` time), as perf's rounds do. The reader sorts each block's
//! records by time into a run and merges the runs up to that time: a
//! record costs a sort's share and a heap step among the runs held, however
//! a file's times lie, and the held runs are the file's own bytes.

use crate::abi::tt_hdr;
use crate::event::record_len;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::mem::offset_of;

const KIND_AT: usize = offset_of!(tt_hdr, kind);
const TS_AT: usize = offset_of!(tt_hdr, ts_ns);

/// One block's records, sorted by time.
#[derive(Default)]
struct Run {
    bytes: Vec<u8>,
    /// Per record: its time, offset and length in `bytes`; by time, records
    /// of the same time as written.
    order: Vec<(u64, u32, u32)>,
    /// The first record not yet handed on.
    next: usize,
}

/// Blocks' records waiting for their time.
#[derive(Default)]
pub(super) struct Reorder {
    /// Held runs by slot; `None`: free.
    runs: Vec<Option<Run>>,
    /// Each held run's next record: (time, the run's number in the file,
    /// its slot). Records of the same time come in the order written.
    heads: BinaryHeap<Reverse<(u64, u64, usize)>>,
    /// Runs numbered as read.
    next_number: u64,
    /// Buffers of runs handed on, for the next blocks.
    spare: Vec<Vec<u8>>,
    /// The newest time handed on.
    released_ns: u64,
    /// Records handed on after a later one: written after a block that
    /// called their time settled.
    pub late: u64,
}

impl Reorder {
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// Takes the records of `block` from `start` on (the buffer is swapped
    /// for one of its own). Err: the index of a record that is not one
    /// (an unknown kind, or one that overruns the block); those before it
    /// are taken.
    pub fn push(&mut self, block: &mut Vec<u8>, start: usize) -> Result<(), usize> {
        let mut run = Run {
            bytes: std::mem::replace(block, self.spare.pop().unwrap_or_default()),
            order: Vec::new(),
            next: 0,
        };
        let (mut at, mut taken) = (start, Ok(()));
        while at < run.bytes.len() {
            let rest = &run.bytes[at..];
            let len = rest
                .get(KIND_AT)
                .and_then(|&kind| record_len(kind))
                .filter(|&len| len <= rest.len());
            let Some(len) = len else {
                taken = Err(run.order.len());
                break;
            };
            let ts = u64::from_ne_bytes(rest[TS_AT..TS_AT + 8].try_into().expect("8 bytes"));
            run.order.push((ts, at as u32, len as u32));
            at += len;
        }
        // Stable: records of the same time stay as written.
        run.order.sort_by_key(|&(ts, ..)| ts);
        let Some(&(first_ns, ..)) = run.order.first() else {
            self.spare.push(run.bytes);
            return taken;
        };
        let slot = match self.runs.iter().position(Option::is_none) {
            Some(slot) => slot,
            None => {
                self.runs.push(None);
                self.runs.len() - 1
            }
        };
        self.runs[slot] = Some(run);
        self.heads.push(Reverse((first_ns, self.next_number, slot)));
        self.next_number += 1;
        taken
    }

    /// Appends to `out`, in time order, every held record stamped before
    /// `until_ns` (all of them with `u64::MAX`). Returns how many.
    pub fn release(&mut self, until_ns: u64, out: &mut Vec<u8>) -> u64 {
        let mut released = 0;
        let due = |ts: u64| ts < until_ns || until_ns == u64::MAX;
        while let Some(&Reverse((ts, number, slot))) = self.heads.peek() {
            if !due(ts) {
                break;
            }
            self.heads.pop();
            // The next run's head: this one's records go on until it.
            let other = self.heads.peek().map_or((u64::MAX, u64::MAX), |h| {
                let Reverse((ts, number, _)) = *h;
                (ts, number)
            });
            let run = self.runs[slot].as_mut().expect("a held run");
            while let Some(&(ts, at, len)) = run.order.get(run.next) {
                if !due(ts) || (ts, number) > other {
                    self.heads.push(Reverse((ts, number, slot)));
                    break;
                }
                if ts < self.released_ns {
                    self.late += 1;
                }
                self.released_ns = self.released_ns.max(ts);
                out.extend_from_slice(&run.bytes[at as usize..(at + len) as usize]);
                run.next += 1;
                released += 1;
            }
            if run.next == run.order.len() {
                let mut done = self.runs[slot].take().expect("a held run");
                done.bytes.clear();
                self.spare.push(done.bytes);
            }
        }
        released
    }
}
