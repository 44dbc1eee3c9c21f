//! [`InflightKeys`]: which keys may have a write in flight at this coordinator, readable by
//! other threads without asking the core.
//!
//! Why: a coordinator must not answer a read with the old value of a key whose new version a
//! majority may already hold — a quorum read could have returned the new one, and reading
//! the old one after it is not linearizable. The core parks such reads (`uncommitted`). A
//! front end that reads the engine directly (the fast path, no thread hop to the driver)
//! needs the same knowledge, so the core mirrors its `uncommitted` set here as counters in a
//! fixed array hashed by key: a zero counter proves no write of that key is in flight; a
//! non-zero one (the key's own write, or another key's that hashes alike) sends the read
//! through the core. False positives cost a fallback, never a wrong answer.
//!
//! Ordering: the core increments a counter *before* the step that sends the first
//! Replicate returns, and decrements it *after* the committed value is in the store (Release),
//! so a reader that loads zero (Acquire) and then reads the store either overlaps the write
//! (any answer is linearizable) or sees it published.

use std::sync::atomic::{AtomicU32, Ordering};

/// Counters in the filter: 64 Ki × 4 B = 256 KiB per node; with a few thousand writes in
/// flight (the replication bound) under 5% of reads fall back for a false positive.
pub const INFLIGHT_SLOTS: usize = 1 << 16;

/// See the module doc.
pub struct InflightKeys {
    counts: Box<[AtomicU32]>,
}

impl Default for InflightKeys {
    fn default() -> Self {
        InflightKeys {
            counts: (0..INFLIGHT_SLOTS).map(|_| AtomicU32::new(0)).collect(),
        }
    }
}

impl std::fmt::Debug for InflightKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InflightKeys").finish_non_exhaustive()
    }
}

/// FNV-1a: short keys, no allocation, no per-process seed (nothing here is exposed to input
/// an attacker could aim at a seedless hash beyond making reads take the slower path).
fn index(key: &[u8]) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h as usize) & (INFLIGHT_SLOTS - 1)
}

impl InflightKeys {
    /// A write of `key` became in flight (its first uncommitted version).
    pub fn add(&self, key: &[u8]) {
        if let Some(c) = self.counts.get(index(key)) {
            c.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The last in-flight write of `key` ended (committed and stored, refused or abandoned).
    pub fn remove(&self, key: &[u8]) {
        if let Some(c) = self.counts.get(index(key)) {
            // Never below zero, even if a caller pairs them wrongly: a stuck non-zero count
            // only slows reads, an underflow would wrap to "in flight" forever as well.
            let _ = c.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1));
        }
    }

    /// Whether a write of `key` may be in flight.
    pub fn may_have(&self, key: &[u8]) -> bool {
        self.counts
            .get(index(key))
            .is_none_or(|c| c.load(Ordering::Acquire) != 0)
    }

    /// Forget everything (the core wiped its state).
    pub fn clear(&self) {
        for c in self.counts.iter() {
            c.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_key_and_never_underflows() {
        let f = InflightKeys::default();
        assert!(!f.may_have(b"a"));
        f.add(b"a");
        f.add(b"a");
        assert!(f.may_have(b"a"));
        f.remove(b"a");
        assert!(f.may_have(b"a"));
        f.remove(b"a");
        assert!(!f.may_have(b"a"));
        f.remove(b"a");
        assert!(!f.may_have(b"a"));
        f.add(b"b");
        f.clear();
        assert!(!f.may_have(b"b"));
    }
}
