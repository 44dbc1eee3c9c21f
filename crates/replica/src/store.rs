//! Per-node key state as the replication core sees it: [`ReplicaStore`], and [`MemStore`], the
//! `BTreeMap` implementation the simulator uses.
//!
//! The server implements [`ReplicaStore`] over `ringlet-engine` ([`crate::EngineStore`]:
//! staged writes published on commit, tombstone cache + summary version, the engine's per-slot
//! index). The trait is deliberately small — get, apply-if-newer, retire, scan a slot, digest
//! a slot — so the engine can answer each call from its index without the replica core knowing
//! its layout.
//!
//! **Scan order.** Slot scans, pull pages and repair key lists run in [`scan_order`]:
//! `(slot_order_code(key), key bytes)`, where the code is `[slot 14][low 50 bits of the
//! engine's key hash]` — the order the engine's per-slot index keeps, a total order every node
//! computes alike from the key, so a cursor "after key K" names the same window on every node
//! and survives any change of the engine's table. Every store and every comparison of cursors
//! in the core uses it (not the keys' byte order).

pub use ringlet_engine::hash::{scan_order, slot_order_code};
use ringlet_types::{key_slot, MemgestId, Slot, ValueKind, Version};
use std::collections::BTreeMap;

/// A stored entry: a value or a tombstone, with its version and memgest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub version: Version,
    pub memgest: MemgestId,
    /// `None` is a tombstone (a delete at `version`).
    pub value: Option<Vec<u8>>,
    /// When the value expires, unix wall-clock ms (`None`: never). Part of the entry, so it
    /// replicates, rebuilds and repairs with it; one version has one expiry. Only the
    /// coordinator acts on it (its fronts hide an expired value, its driver deletes it with
    /// [`crate::ClientOp::Expire`]), so replicas never diverge by their clocks.
    pub expiry_ms: Option<u64>,
    /// A byte string or a KVL record (`ringlet-record`): part of the entry, so every copy
    /// agrees on it (a tombstone is a `String`).
    pub kind: ValueKind,
}

impl Entry {
    /// Bytes this entry costs on the wire (for in-flight and page budgets).
    pub fn wire_bytes(&self, key: &[u8]) -> u64 {
        let v = self.value.as_ref().map_or(0, |v| v.len());
        (key.len() as u64)
            .saturating_add(v as u64)
            .saturating_add(32)
    }
}

/// What [`ReplicaStore::apply`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// Stored: the version was higher than everything the store knew for the key.
    Applied,
    /// Refused: the store holds this version or a higher one (entry, tombstone or summary).
    /// For replication this still counts as "applied" — the key is at least this new here.
    Superseded { current: Version },
    /// Refused: the store has no room for the entry (its memgest may not be evicted and the
    /// node's memory is full). Nothing changed; the key keeps what it held.
    Refused,
}

/// The node-local key state the replica core drives. Implementations must make `apply`
/// refuse any version not higher than what they hold for the key, including tombstones and
/// any tombstone summary (DESIGN.md invariant: at most one live entry per key).
pub trait ReplicaStore {
    /// The entry or tombstone for `key`.
    fn get(&self, key: &[u8]) -> Option<Entry>;
    /// The version and memgest of `key`'s entry, and whether it is live (not a tombstone),
    /// without copying the value.
    fn head(&self, key: &[u8]) -> Option<(Version, MemgestId, bool)> {
        self.get(key)
            .map(|e| (e.version, e.memgest, e.value.is_some()))
    }
    /// Store `entry` if its version is higher than anything held for `key`.
    fn apply(&mut self, key: &[u8], entry: Entry) -> ApplyOutcome;
    /// Set aside room for `entry` (a coordinator's write before it is sent to the replicas),
    /// invisible to readers until [`ReplicaStore::apply`] of the same key and version uses it.
    /// `false`: no room — the write must be refused before anything leaves the node, so a
    /// coordinator never acknowledges a write it cannot store. A store without a capacity
    /// bound always has room.
    fn reserve(&mut self, _key: &[u8], _entry: &Entry) -> bool {
        true
    }
    /// Give back what [`ReplicaStore::reserve`] set aside for `key` at `version` (the write
    /// was refused or abandoned). A no-op when nothing is reserved.
    fn unreserve(&mut self, _key: &[u8], _version: Version) {}
    /// The memgests this node may evict from when full (single-copy caches: `none` kinds
    /// declared evictable in the map). Replicated memgests are never listed: a copy evicted
    /// on one replica and not another would be "repaired" back forever. A store without a
    /// capacity bound ignores it.
    fn set_evictable(&mut self, _memgests: &[MemgestId]) {}
    /// Up to `limit` live entries whose expiry is at or before `wall_ms`, soonest first, as
    /// `(key, version)`. A store that keeps no expiry index returns none (values then only
    /// look expired to readers until overwritten).
    fn expired(&self, _wall_ms: u64, _limit: usize) -> Vec<(Vec<u8>, Version)> {
        Vec::new()
    }
    /// Drop `key` (no tombstone) if its stored version is `<= version`. Used when a key's
    /// memgest no longer places a copy here. Returns whether something was dropped.
    fn retire(&mut self, key: &[u8], version: Version) -> bool;
    /// Drop `key`'s entry or tombstone and leave nothing that would refuse an older version
    /// later (a slot range given away: when this node gets it back it must take what its
    /// sources hold). The default is [`ReplicaStore::retire`] at the highest version, right
    /// for stores whose retire leaves no trace.
    fn forget(&mut self, key: &[u8]) {
        self.retire(key, Version(u128::MAX));
    }
    /// Forget any summary floor kept for `slot` (after every key of it was forgotten).
    fn forget_floor(&mut self, _slot: Slot) {}
    /// Entries of `slot` in [`scan_order`], strictly after `after` in that order (a key that
    /// need not exist any more), at most `limit` of them.
    fn scan_slot(&self, slot: Slot, after: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Entry)>;
    /// Like [`ReplicaStore::scan_slot`] but only `(key, version, memgest)`: repair compares
    /// versions for whole slots and needs values only for the keys it pushes. A store that
    /// keeps metadata apart from values overrides this to skip reading every value.
    fn scan_slot_heads(
        &self,
        slot: Slot,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Version, MemgestId)> {
        self.scan_slot(slot, after, limit)
            .into_iter()
            .map(|(k, e)| (k, e.version, e.memgest))
            .collect()
    }
    /// Slots in `first..=last` holding at least one entry or tombstone.
    fn nonempty_slots(&self, first: Slot, last: Slot) -> Vec<Slot>;
    /// Order-independent digest of `(key, version, memgest, tombstone)` over the entries of
    /// `slot` whose memgest passes `filter`; 0 when there are none.
    fn slot_digest(&self, slot: Slot, filter: &dyn Fn(MemgestId) -> bool) -> u64;
    /// Forget everything (a restarted node comes back empty).
    fn clear(&mut self);
    /// Number of entries and tombstones.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Digest contribution of one entry: [`ringlet_engine::hash::entry_digest`] over (key,
/// version, memgest, live). The engine keeps the live entries' part of it in its per-slot
/// index, so [`crate::EngineStore`] digests a slot without a key list of its own.
pub fn entry_digest(key: &[u8], e: &Entry) -> u64 {
    ringlet_engine::hash::entry_digest(key, e.version, e.memgest.0, e.value.is_some())
}

/// Per-(slot, memgest) XOR of [`entry_digest`] and key count, maintained incrementally by a
/// store as entries come and go, so a slot's digest costs one range lookup. Shared by every
/// [`ReplicaStore`] (the simulator's [`MemStore`] and the server's engine-backed store) so
/// that both answer digest comparisons identically.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotDigests(BTreeMap<(Slot, MemgestId), (u64, u64)>);

impl SlotDigests {
    /// Fold one entry in (`add`) or out (`!add`).
    pub fn toggle(&mut self, slot: Slot, key: &[u8], e: &Entry, add: bool) {
        let d = entry_digest(key, e);
        let slot_d = self.0.entry((slot, e.memgest)).or_insert((0, 0));
        slot_d.0 ^= d;
        if add {
            slot_d.1 += 1;
        } else {
            debug_assert!(slot_d.1 > 0, "digest count underflow");
            slot_d.1 = slot_d.1.saturating_sub(1);
            if slot_d.1 == 0 {
                debug_assert_eq!(slot_d.0, 0);
                self.0.remove(&(slot, e.memgest));
            }
        }
    }

    /// Slots in `first..=last` that hold at least one entry, ascending.
    pub fn nonempty_slots(&self, first: Slot, last: Slot) -> Vec<Slot> {
        let mut v: Vec<Slot> = self
            .0
            .range((first, MemgestId(0))..=(last, MemgestId(u16::MAX)))
            .map(|((s, _), _)| *s)
            .collect();
        v.dedup();
        v
    }

    /// XOR digest of the entries of `slot` whose memgest passes `filter`.
    pub fn slot_digest(&self, slot: Slot, filter: &dyn Fn(MemgestId) -> bool) -> u64 {
        self.0
            .range((slot, MemgestId(0))..=(slot, MemgestId(u16::MAX)))
            .filter(|((_, m), _)| filter(*m))
            .fold(0, |acc, (_, (d, _))| acc ^ d)
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// One end of a range of a map keyed `(slot_order_code(key), key)`.
pub type ScanBound = std::ops::Bound<(u64, Vec<u8>)>;

/// The part of a map in scan order (keyed `(slot_order_code(key), key)`) that holds `slot`'s
/// entries strictly after `after` (in scan order; a cursor of another slot is clamped to
/// this slot's bounds).
pub fn slot_range(slot: Slot, after: Option<&[u8]>) -> (ScanBound, ScanBound) {
    use std::ops::Bound;
    let bits = ringlet_engine::hash::SLOT_ORDER_HASH_BITS;
    let first = u64::from(slot) << bits;
    let next = (u64::from(slot) + 1) << bits;
    let hi = Bound::Excluded((next, Vec::new()));
    let lo = match after.map(|a| (slot_order_code(a), a)) {
        Some((c, a)) if c >= first && c < next => Bound::Excluded((c, a.to_vec())),
        // Past this slot: an empty range.
        Some((c, _)) if c >= next => return (Bound::Included((next, Vec::new())), hi),
        _ => Bound::Included((first, Vec::new())),
    };
    (lo, hi)
}

/// In-memory [`ReplicaStore`]: a `BTreeMap` in scan order (`(slot_order_code(key), key)`;
/// the code starts with the slot), plus per-(slot, memgest)
/// XOR digests maintained incrementally so a digest costs one lookup per memgest.
///
/// Tombstones are kept until overwritten (no cache bound, no summary): fine for the simulator's
/// small key sets; the engine bounds them.
#[derive(Clone, Debug, Default)]
pub struct MemStore {
    entries: BTreeMap<(u64, Vec<u8>), Entry>,
    digests: SlotDigests,
    /// Capacity in value bytes (`None`: unbounded), so the simulator can fill a node.
    value_bytes_max: Option<u64>,
    /// Value bytes of live entries.
    value_bytes: u64,
    /// Room set aside by `reserve`, per (key, version).
    reserved: BTreeMap<(Vec<u8>, Version), u64>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    /// A store that refuses values once `value_bytes_max` bytes of values (live plus
    /// reserved) would be exceeded, as a full engine with pinned memgests does.
    pub fn with_capacity(value_bytes_max: u64) -> MemStore {
        MemStore {
            value_bytes_max: Some(value_bytes_max),
            ..MemStore::default()
        }
    }

    fn reserved_bytes(&self) -> u64 {
        self.reserved.values().sum()
    }

    /// Whether `need` more value bytes fit, counting what is reserved except `own`.
    fn fits(&self, need: u64, freed: u64, own: u64) -> bool {
        match self.value_bytes_max {
            None => true,
            Some(max) => {
                let used = self
                    .value_bytes
                    .saturating_sub(freed)
                    .saturating_add(self.reserved_bytes().saturating_sub(own));
                used.saturating_add(need) <= max
            }
        }
    }

    fn digest_toggle(&mut self, slot: Slot, key: &[u8], e: &Entry, add: bool) {
        self.digests.toggle(slot, key, e, add);
    }

    /// Recompute every digest from scratch and compare (costly; for tests and invariants).
    pub fn check_invariants(&self) {
        let mut want = SlotDigests::default();
        for ((code, key), e) in &self.entries {
            assert_eq!(
                *code,
                slot_order_code(key),
                "entry filed under the wrong code"
            );
            want.toggle(key_slot(key), key, e, true);
        }
        assert_eq!(want, self.digests, "incremental digests drifted");
    }
}

impl ReplicaStore for MemStore {
    fn get(&self, key: &[u8]) -> Option<Entry> {
        self.entries
            .get(&(slot_order_code(key), key.to_vec()))
            .cloned()
    }

    fn head(&self, key: &[u8]) -> Option<(Version, MemgestId, bool)> {
        self.entries
            .get(&(slot_order_code(key), key.to_vec()))
            .map(|e| (e.version, e.memgest, e.value.is_some()))
    }

    fn apply(&mut self, key: &[u8], entry: Entry) -> ApplyOutcome {
        let slot = key_slot(key);
        let k = (slot_order_code(key), key.to_vec());
        let old = self.entries.get(&k).cloned();
        if let Some(old) = &old {
            if old.version >= entry.version {
                return ApplyOutcome::Superseded {
                    current: old.version,
                };
            }
        }
        let need = entry.value.as_ref().map_or(0, |v| v.len() as u64);
        let freed = old
            .as_ref()
            .and_then(|o| o.value.as_ref())
            .map_or(0, |v| v.len() as u64);
        let own = self
            .reserved
            .get(&(key.to_vec(), entry.version))
            .copied()
            .unwrap_or(0);
        if !self.fits(need, freed, own) {
            return ApplyOutcome::Refused;
        }
        self.reserved.remove(&(key.to_vec(), entry.version));
        if let Some(old) = &old {
            self.digest_toggle(slot, key, old, false);
        }
        self.value_bytes = self.value_bytes.saturating_sub(freed).saturating_add(need);
        self.digest_toggle(slot, key, &entry, true);
        self.entries.insert(k, entry);
        ApplyOutcome::Applied
    }

    fn reserve(&mut self, key: &[u8], entry: &Entry) -> bool {
        let need = entry.value.as_ref().map_or(0, |v| v.len() as u64);
        // Conservative: the old value's room is not counted as free, as in the engine,
        // where the new version is written before the old one is released.
        if !self.fits(need, 0, 0) {
            return false;
        }
        self.reserved.insert((key.to_vec(), entry.version), need);
        true
    }

    fn unreserve(&mut self, key: &[u8], version: Version) {
        self.reserved.remove(&(key.to_vec(), version));
    }

    fn retire(&mut self, key: &[u8], version: Version) -> bool {
        let slot = key_slot(key);
        let k = (slot_order_code(key), key.to_vec());
        match self.entries.get(&k) {
            Some(e) if e.version <= version => {
                let e = e.clone();
                let freed = e.value.as_ref().map_or(0, |v| v.len() as u64);
                self.value_bytes = self.value_bytes.saturating_sub(freed);
                self.digest_toggle(slot, key, &e, false);
                self.entries.remove(&k);
                true
            }
            _ => false,
        }
    }

    fn scan_slot(&self, slot: Slot, after: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Entry)> {
        self.entries
            .range(slot_range(slot, after))
            .take(limit)
            .map(|((_, k), e)| (k.clone(), e.clone()))
            .collect()
    }

    fn nonempty_slots(&self, first: Slot, last: Slot) -> Vec<Slot> {
        self.digests.nonempty_slots(first, last)
    }

    fn slot_digest(&self, slot: Slot, filter: &dyn Fn(MemgestId) -> bool) -> u64 {
        self.digests.slot_digest(slot, filter)
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.digests.clear();
        self.value_bytes = 0;
        self.reserved.clear();
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn e(v: u128, val: Option<&str>) -> Entry {
        Entry {
            version: Version(v),
            memgest: MemgestId(1),
            value: val.map(|s| s.as_bytes().to_vec()),
            expiry_ms: None,
            kind: ValueKind::String,
        }
    }

    #[test]
    fn apply_refuses_not_newer_and_digests_track() {
        let mut s = MemStore::new();
        assert_eq!(s.apply(b"k", e(5, Some("a"))), ApplyOutcome::Applied);
        assert_eq!(
            s.apply(b"k", e(5, Some("b"))),
            ApplyOutcome::Superseded {
                current: Version(5)
            }
        );
        assert_eq!(s.apply(b"k", e(7, None)), ApplyOutcome::Applied);
        // A late write below the tombstone cannot resurrect the key.
        assert!(matches!(
            s.apply(b"k", e(6, Some("c"))),
            ApplyOutcome::Superseded { .. }
        ));
        s.check_invariants();
        let slot = key_slot(b"k");
        let d = s.slot_digest(slot, &|_| true);
        assert_ne!(d, 0);
        assert_eq!(s.slot_digest(slot, &|m| m.0 != 1), 0);
        let mut t = MemStore::new();
        t.apply(b"k", e(7, None));
        assert_eq!(t.slot_digest(slot, &|_| true), d);
        assert!(s.retire(b"k", Version(7)));
        assert_eq!(s.slot_digest(slot, &|_| true), 0);
        assert!(s.nonempty_slots(0, 16383).is_empty());
        s.check_invariants();
    }

    #[test]
    fn scan_pages_in_scan_order() {
        let mut s = MemStore::new();
        let mut keys: Vec<Vec<u8>> = ["{t}a", "{t}b", "{t}c"]
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        for k in &keys {
            s.apply(k, e(1, Some("x")));
        }
        // A key of another slot is never in this slot's pages.
        s.apply(b"{u}a", e(1, Some("x")));
        keys.sort_by(|a, b| scan_order(a, b));
        let slot = key_slot(b"{t}a");
        let p1 = s.scan_slot(slot, None, 2);
        assert_eq!(p1.len(), 2);
        assert_eq!((&p1[0].0, &p1[1].0), (&keys[0], &keys[1]));
        let p2 = s.scan_slot(slot, Some(&p1[1].0), 2);
        assert_eq!(p2.len(), 1);
        assert_eq!(p2[0].0, keys[2]);
        // A cursor key that is gone still resumes after its place in the order.
        assert!(s.retire(&keys[1], Version(1)));
        assert_eq!(s.scan_slot(slot, Some(&keys[1]), 5), p2);
        assert_eq!(s.nonempty_slots(slot, slot), vec![slot]);
    }
}
