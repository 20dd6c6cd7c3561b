//! A fast hasher for keys the kernel gave (cookies, addresses): the flow
//! table's and the recorder's socket sets.

use std::hash::Hasher;

/// rustc's FxHash: a multiply and a rotate per word. Every event looks up
/// its flow, and SipHash (std's default, built against hash flooding) was a
/// fifth of replay time; keys here are cookies and addresses the kernel saw.
#[derive(Clone, Copy, Default)]
pub struct FastHasher(u64);

impl FastHasher {
    /// One round: what the hash of `word` after `h` is.
    pub fn mix(h: u64, word: u64) -> u64 {
        (h.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95)
    }

    fn add(&mut self, word: u64) {
        self.0 = Self::mix(self.0, word);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, n: u8) {
        self.add(n.into());
    }
    fn write_u16(&mut self, n: u16) {
        self.add(n.into());
    }
    fn write_u32(&mut self, n: u32) {
        self.add(n.into());
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}
