//! Mutations of recordings: most keep the file's framing and checksums right,
//! so that the damage reaches the analyses (edited fields and times, records
//! and blocks dropped, doubled, swapped or spliced from another recording,
//! extreme numbers in the header and trailer); the rest damage the bytes as
//! a disk or a kill would (bit flips, truncations at and around every block
//! boundary, insertions).

use std::mem::offset_of;
use tenge_trace::abi::tt_hdr;
use tenge_trace::event::record_len;

const HEAD: usize = 16;
const FILE_HEAD: usize = 20;

/// A recording taken apart: the header's JSON, the blocks' records, the trailer's JSON.
#[derive(Clone)]
struct Layout {
    prefix: Vec<u8>,
    header: Vec<u8>,
    blocks: Vec<Block>,
    trailer: Option<Vec<u8>>,
}

#[derive(Clone)]
struct Block {
    /// Its settled time (format version 2 on).
    settled: Option<[u8; 8]>,
    records: Vec<Vec<u8>>,
}

impl Layout {
    fn parse(bytes: &[u8]) -> Layout {
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let len = u32_at(12);
        let settled = u32_at(8) >= 2;
        let mut layout = Layout {
            prefix: bytes[..12].to_vec(),
            header: bytes[FILE_HEAD..FILE_HEAD + len].to_vec(),
            blocks: Vec::new(),
            trailer: None,
        };
        let mut at = FILE_HEAD + len;
        while at + HEAD <= bytes.len() {
            let len = u32_at(at + 8);
            let payload = &bytes[at + HEAD..at + HEAD + len];
            if &bytes[at..at + 4] == b"END\0" {
                layout.trailer = Some(payload.to_vec());
                break;
            }
            let (settled, mut pos) = match settled {
                true => (Some(payload[..8].try_into().unwrap()), 8),
                false => (None, 0),
            };
            let mut records = Vec::new();
            while pos < payload.len() {
                let n = record_len(payload[pos + offset_of!(tt_hdr, kind)]).unwrap();
                records.push(payload[pos..pos + n].to_vec());
                pos += n;
            }
            layout.blocks.push(Block { settled, records });
            at += HEAD + len;
        }
        layout
    }

    /// The file, with right checksums except where `bad_sum` picks.
    fn write(&self, rng: &mut Rng, bad_sum: bool) -> (Vec<u8>, Vec<usize>) {
        let mut out = self.prefix.clone();
        let section = |out: &mut Vec<u8>, rng: &mut Rng, tag: &[u8], count: u32, payload: &[u8]| {
            let mut sum = crc32fast::hash(payload);
            if bad_sum && rng.below(4) == 0 {
                sum ^= 1 << rng.below(32);
            }
            out.extend_from_slice(tag);
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            out.extend_from_slice(&sum.to_le_bytes());
            out.extend_from_slice(payload);
        };
        out.extend_from_slice(&(self.header.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&self.header).to_le_bytes());
        out.extend_from_slice(&self.header);
        let mut boundaries = vec![out.len()];
        for block in &self.blocks {
            let mut payload = block.settled.map(Vec::from).unwrap_or_default();
            payload.extend(block.records.concat());
            let count = match rng.below(50) {
                0 => rng.next() as u32,
                _ => block.records.len() as u32,
            };
            section(&mut out, rng, b"EVTS", count, &payload);
            boundaries.push(out.len());
        }
        if let Some(trailer) = &self.trailer {
            section(&mut out, rng, b"END\0", 0, trailer);
        }
        (out, boundaries)
    }
}

/// xorshift64*: fast, and the same inputs from the same seed.
pub struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values that break arithmetic: extremes, signs, powers of two, off by one.
fn interesting(rng: &mut Rng, width: usize) -> u64 {
    let max = if width == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * width)) - 1
    };
    let v = match rng.below(10) {
        0 => 0,
        1 => 1,
        2 => max,
        3 => max - 1,
        4 => max >> 1,
        5 => (max >> 1) + 1,
        6 => 1 << rng.below(8 * width),
        7 => rng.next(),
        _ => rng.next() % 100_000,
    };
    v & max
}

pub struct Mutator {
    seeds: Vec<Layout>,
}

impl Mutator {
    pub fn new(seeds: &[Vec<u8>]) -> Mutator {
        Mutator {
            seeds: seeds.iter().map(|b| Layout::parse(b)).collect(),
        }
    }

    /// The input of `key`: the same key, the same input, on any machine.
    pub fn input(&self, key: u64) -> Vec<u8> {
        let rng = &mut Rng(key.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut layout = self.seeds[rng.below(self.seeds.len())].clone();
        for _ in 0..=rng.below(4) {
            let other = &self.seeds[rng.below(self.seeds.len())];
            structured(rng, &mut layout, other);
        }
        let bad_sum = rng.below(10) == 0;
        let (mut bytes, boundaries) = layout.write(rng, bad_sum);
        if rng.below(3) == 0 {
            raw(rng, &mut bytes, &boundaries);
        }
        bytes
    }
}

/// One change that keeps the framing.
fn structured(rng: &mut Rng, layout: &mut Layout, other: &Layout) {
    let blocks = layout.blocks.len();
    match rng.below(12) {
        0..=3 => {
            // A field of a record: any bytes of it, at any width.
            if let Some(record) = pick_record(rng, layout) {
                let width = [1, 2, 4, 8][rng.below(4)];
                let at = rng.below(record.len().saturating_sub(width) + 1);
                let value = interesting(rng, width).to_le_bytes();
                record[at..at + width].copy_from_slice(&value[..width]);
            }
        }
        4 if blocks > 0 && rng.below(4) == 0 => {
            // A block's settled time: extreme, or any.
            if let Some(settled) = &mut layout.blocks[rng.below(blocks)].settled {
                *settled = interesting(rng, 8).to_le_bytes();
            }
        }
        4 => {
            // A time: extreme, or moved far.
            if let Some(record) = pick_record(rng, layout) {
                let at = offset_of!(tt_hdr, ts_ns);
                let ts = u64::from_le_bytes(record[at..at + 8].try_into().unwrap());
                let new = match rng.below(3) {
                    0 => interesting(rng, 8),
                    1 => ts.wrapping_add(rng.next() >> rng.below(64)),
                    _ => ts.wrapping_sub(rng.next() >> rng.below(64)),
                };
                record[at..at + 8].copy_from_slice(&new.to_le_bytes());
            }
        }
        5 if blocks > 0 => {
            // Records doubled, dropped, reordered, or taken from another recording.
            let b = rng.below(blocks);
            let block = &mut layout.blocks[b].records;
            if block.is_empty() {
                return;
            }
            let i = rng.below(block.len());
            match rng.below(4) {
                0 => {
                    let copy = block[i].clone();
                    for _ in 0..=rng.below(64) {
                        block.insert(i, copy.clone());
                    }
                }
                1 => {
                    block.remove(i);
                }
                2 => block.reverse(),
                _ => {
                    let mut others = other.blocks.iter().flat_map(|b| &b.records);
                    if let Some(from) = others.nth(rng.below(1000)) {
                        block.insert(i, from.clone());
                    }
                }
            }
        }
        6 if blocks > 0 => {
            // Blocks doubled, dropped, swapped, or spliced from another recording.
            let b = rng.below(blocks);
            match rng.below(4) {
                0 => {
                    let copy = layout.blocks[b].clone();
                    layout.blocks.insert(b, copy);
                }
                1 => {
                    layout.blocks.remove(b);
                }
                2 => layout.blocks.swap(b, rng.below(blocks)),
                _ => {
                    if !other.blocks.is_empty() {
                        let from = other.blocks[rng.below(other.blocks.len())].clone();
                        layout.blocks.insert(b, from);
                    }
                }
            }
        }
        7 => {
            // An event kind: another kind's, or none.
            if let Some(record) = pick_record(rng, layout) {
                record[offset_of!(tt_hdr, kind)] = rng.below(20) as u8;
            }
        }
        8 | 9 => edit_json(rng, &mut layout.header),
        10 => match &mut layout.trailer {
            Some(trailer) => edit_json(rng, trailer),
            None => layout.trailer = other.trailer.clone(),
        },
        _ => layout.trailer = None,
    }
}

fn pick_record<'a>(rng: &mut Rng, layout: &'a mut Layout) -> Option<&'a mut Vec<u8>> {
    if layout.blocks.is_empty() {
        return None;
    }
    let b = rng.below(layout.blocks.len());
    let block = &mut layout.blocks[b].records;
    let i = rng.below(block.len());
    block.get_mut(i)
}

/// A number in the JSON replaced by an extreme one, or its text cut.
fn edit_json(rng: &mut Rng, json: &mut Vec<u8>) {
    let numbers: Vec<(usize, usize)> = {
        let mut found = Vec::new();
        let mut i = 0;
        while i < json.len() {
            if json[i].is_ascii_digit() {
                let start = i;
                while i < json.len() && json[i].is_ascii_digit() {
                    i += 1;
                }
                found.push((start, i));
            }
            i += 1;
        }
        found
    };
    if numbers.is_empty() || rng.below(8) == 0 {
        json.truncate(rng.below(json.len() + 1));
        return;
    }
    let (start, end) = numbers[rng.below(numbers.len())];
    let new = match rng.below(7) {
        0 => "0".to_string(),
        1 => "-1".to_string(),
        2 => u32::MAX.to_string(),
        3 => u64::MAX.to_string(),
        4 => "1e308".to_string(),
        5 => i64::MIN.to_string(),
        _ => interesting(rng, 8).to_string(),
    };
    json.splice(start..end, new.into_bytes());
}

/// Damage to the bytes themselves.
fn raw(rng: &mut Rng, bytes: &mut Vec<u8>, boundaries: &[usize]) {
    if bytes.is_empty() {
        return;
    }
    match rng.below(5) {
        0 => {
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 << rng.below(8);
        }
        1 => {
            // At a block boundary, or a few bytes either side.
            let at = boundaries[rng.below(boundaries.len())] as i64 + rng.below(41) as i64 - 20;
            bytes.truncate(at.clamp(0, bytes.len() as i64) as usize);
        }
        2 => bytes.truncate(rng.below(bytes.len())),
        3 => {
            let at = rng.below(bytes.len());
            let junk: Vec<u8> = (0..=rng.below(64)).map(|_| rng.next() as u8).collect();
            bytes.splice(at..at, junk);
        }
        _ => {
            let at = rng.below(bytes.len());
            let end = (at + rng.below(4096)).min(bytes.len());
            bytes.drain(at..end);
        }
    }
}
