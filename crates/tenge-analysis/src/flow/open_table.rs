//! An open-addressing hash table for the per-event lookups: each key and its
//! value in one 32-byte slot, probed linearly, so a lookup reads one cache
//! line where std's map reads its control bytes and then the entry (two
//! misses with 10k sockets, each event's largest cost).

use super::FastHasher;

/// A key the table can hold: hashed by a multiply, and one value of it
/// (`VACANT`) marks a free slot (a key equal to it is kept aside).
pub(crate) trait SlotKey: Copy + Eq {
    const VACANT: Self;
    fn hash(&self) -> u64;
}

impl SlotKey for u64 {
    const VACANT: Self = 0;
    /// Fibonacci hashing: cookies count up, and multiples of 2^64/φ spread
    /// evenly over the top bits (FastHasher's 2^64/π lines them up in
    /// stripes: 19 slots of probing on average with 10k connections).
    fn hash(&self) -> u64 {
        self.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

impl SlotKey for (u32, u64, u64) {
    const VACANT: Self = (0, 0, 0);
    fn hash(&self) -> u64 {
        let mix = FastHasher::mix;
        mix(mix(mix(0, self.0.into()), self.1), self.2)
    }
}

/// Aligned to its size, so that no slot straddles two cache lines.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
struct Slot<K, V> {
    key: K,
    value: V,
}

#[derive(Debug)]
pub(crate) struct OpenTable<K, V> {
    /// A power of two long, at most 3/4 full; empty before the first insert.
    slots: Vec<Slot<K, V>>,
    len: usize,
    /// The value of the key equal to `K::VACANT`, which no slot can hold.
    vacant_key: Option<V>,
}

impl<K: SlotKey, V: Copy + Default> Default for OpenTable<K, V> {
    fn default() -> Self {
        OpenTable {
            slots: Vec::new(),
            len: 0,
            vacant_key: None,
        }
    }
}

impl<K: SlotKey, V: Copy + Default> OpenTable<K, V> {
    /// The slot a key's probe starts at: the hash's top bits (the multiply mixes upwards).
    fn home(&self, key: &K) -> usize {
        let bits = self.slots.len().trailing_zeros();
        (key.hash() >> (64 - bits)) as usize
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot holding `key`, or the free slot that ends its probe.
    fn find(&self, key: &K) -> usize {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            let slot = &self.slots[i];
            if slot.key == *key || slot.key == K::VACANT {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    pub fn get(&self, key: &K) -> Option<V> {
        if *key == K::VACANT {
            return self.vacant_key;
        }
        if self.slots.is_empty() {
            return None;
        }
        let slot = &self.slots[self.find(key)];
        (slot.key == *key).then_some(slot.value)
    }

    /// Starts loading the slot a lookup of `key` reads first.
    #[inline]
    pub fn prefetch(&self, key: &K) {
        if !self.slots.is_empty() {
            super::prefetch(&self.slots[self.home(key)]);
        }
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if key == K::VACANT {
            return self.vacant_key.replace(value);
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let i = self.find(&key);
        let slot = &mut self.slots[i];
        if slot.key == key {
            return Some(std::mem::replace(&mut slot.value, value));
        }
        *slot = Slot { key, value };
        self.len += 1;
        None
    }

    /// Removes `key`, shifting back the keys whose probe passed its slot.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        if *key == K::VACANT {
            return self.vacant_key.take();
        }
        if self.slots.is_empty() {
            return None;
        }
        let mut hole = self.find(key);
        if self.slots[hole].key != *key {
            return None;
        }
        let value = self.slots[hole].value;
        let mask = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let moved = self.slots[i];
            if moved.key == K::VACANT {
                break;
            }
            // It may fill the hole when the hole lies on its probe (from its home to it).
            let home = self.home(&moved.key);
            if i.wrapping_sub(home) & mask >= i.wrapping_sub(hole) & mask {
                self.slots[hole] = moved;
                hole = i;
            }
        }
        self.slots[hole].key = K::VACANT;
        self.len -= 1;
        Some(value)
    }

    #[cold]
    fn grow(&mut self) {
        let vacant = Slot {
            key: K::VACANT,
            value: V::default(),
        };
        let size = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![vacant; size]);
        for slot in old.into_iter().filter(|s| s.key != K::VACANT) {
            let i = self.find(&slot.key);
            self.slots[i] = slot;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Against std's map, through growth and removals that shift probes back.
    #[test]
    fn agrees_with_a_hash_map() {
        let mut table: OpenTable<u64, usize> = OpenTable::default();
        let mut model = HashMap::new();
        // Keys inserted again (a replace), removed while others probe past
        // them, and key 0, kept aside.
        let keys: Vec<u64> = (0..3000u64)
            .map(|k| k.wrapping_mul(0x9e37_79b9) % 4099)
            .collect();
        for (n, &k) in keys.iter().enumerate() {
            assert_eq!(table.insert(k, n), model.insert(k, n), "insert {k}");
            if n % 3 == 0 {
                let gone = keys[n / 2];
                assert_eq!(table.remove(&gone), model.remove(&gone), "remove {gone}");
            }
        }
        for k in 0..4099 {
            assert_eq!(table.get(&k), model.get(&k).copied(), "get {k}");
        }
        assert_eq!(table.len, model.len() - usize::from(model.contains_key(&0)));
        assert_eq!(table.remove(&5000), None);
    }

    #[test]
    fn v4_keys_differ_in_every_word() {
        let mut table: OpenTable<(u32, u64, u64), usize> = OpenTable::default();
        let keys = [
            (1, 2, 3),
            (2, 2, 3),
            (1, 3, 3),
            (1, 2, 4),
            (0, 0, 0),
            (3, 2, 1),
        ];
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(table.insert(*k, i), None);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(table.get(k), Some(i));
        }
        assert_eq!(table.remove(&(0, 0, 0)), Some(4));
        assert_eq!(table.get(&(0, 0, 0)), None);
        assert_eq!(table.get(&(1, 2, 5)), None);
    }

    /// Cookies count up: 20000 of them in 32768 slots (61 % full) must sit
    /// at or next to their home slot, not in runs (1/π multiples gave 19).
    #[test]
    fn sequential_cookies_probe_little() {
        let mut table: OpenTable<u64, usize> = OpenTable::default();
        let cookies = 1..=20_000u64;
        for k in cookies.clone() {
            table.insert(k, 0);
        }
        assert_eq!(table.slots.len(), 32768);
        let mask = table.mask();
        let displaced: usize = cookies
            .map(|k| table.find(&k).wrapping_sub(table.home(&k)) & mask)
            .sum();
        // Uniform hashing would give about 0.78 per key at this load.
        assert!(displaced < 20_000 / 4, "{displaced} slots of probing");
    }
}
