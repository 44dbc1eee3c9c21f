//! The store a simulated node runs: the reference [`MemStore`], or [`EngineStore`], the store
//! a real node runs over its engine (`ringlet-replica::engine_store`). Running the simulator
//! on the engine store is what lets it find bugs that live in the engine's bookkeeping
//! (tombstone floors, purges, eviction), which the reference store cannot have: a purge bug
//! found in session 9 by a multi-process test was of that kind.

use ringlet_replica::{ApplyOutcome, EngineStore, Entry, MemStore, ReplicaStore};
use ringlet_types::{MemgestId, Slot, Version};

/// One of the two stores, chosen per run ([`crate::SimOptions::engine_store`]).
pub enum SimStore {
    Mem(MemStore),
    Engine(Box<EngineStore>),
}

/// Call `$method` on whichever store this is.
macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            SimStore::Mem($s) => $e,
            SimStore::Engine($s) => $e,
        }
    };
}

impl ReplicaStore for SimStore {
    fn get(&self, key: &[u8]) -> Option<Entry> {
        each!(self, s => s.get(key))
    }
    fn head(&self, key: &[u8]) -> Option<(Version, MemgestId, bool)> {
        each!(self, s => s.head(key))
    }
    fn apply(&mut self, key: &[u8], entry: Entry) -> ApplyOutcome {
        each!(self, s => s.apply(key, entry))
    }
    fn reserve(&mut self, key: &[u8], entry: &Entry) -> bool {
        each!(self, s => s.reserve(key, entry))
    }
    fn unreserve(&mut self, key: &[u8], version: Version) {
        each!(self, s => s.unreserve(key, version))
    }
    fn set_evictable(&mut self, memgests: &[MemgestId]) {
        each!(self, s => s.set_evictable(memgests))
    }
    fn expired(&self, wall_ms: u64, limit: usize) -> Vec<(Vec<u8>, Version)> {
        each!(self, s => s.expired(wall_ms, limit))
    }
    fn retire(&mut self, key: &[u8], version: Version) -> bool {
        each!(self, s => s.retire(key, version))
    }
    fn forget(&mut self, key: &[u8]) {
        each!(self, s => s.forget(key))
    }
    fn forget_floor(&mut self, slot: Slot) {
        each!(self, s => s.forget_floor(slot))
    }
    fn scan_slot(&self, slot: Slot, after: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Entry)> {
        each!(self, s => s.scan_slot(slot, after, limit))
    }
    fn scan_slot_heads(
        &self,
        slot: Slot,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Version, MemgestId)> {
        each!(self, s => s.scan_slot_heads(slot, after, limit))
    }
    fn nonempty_slots(&self, first: Slot, last: Slot) -> Vec<Slot> {
        each!(self, s => s.nonempty_slots(first, last))
    }
    fn slot_digest(&self, slot: Slot, filter: &dyn Fn(MemgestId) -> bool) -> u64 {
        each!(self, s => s.slot_digest(slot, filter))
    }
    fn clear(&mut self) {
        each!(self, s => s.clear())
    }
    fn len(&self) -> usize {
        each!(self, s => s.len())
    }
    fn is_empty(&self) -> bool {
        each!(self, s => s.is_empty())
    }
}

impl SimStore {
    /// The reference store's internal consistency checks (the engine store keeps its own
    /// metadata, checked by its proptest against the reference store).
    pub fn check_invariants(&self) {
        if let SimStore::Mem(s) = self {
            s.check_invariants();
        }
    }
}
