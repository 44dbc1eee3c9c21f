//! [`EngineStore`]: the replica core's [`ReplicaStore`] over the node's engine.
//!
//! The engine holds the values and everything the core asks about them: version, memgest,
//! kind and expiry (index entry and data-entry header), the tombstone cache and its summary
//! version (which refuse any write not newer than what the node knows), staged writes, and —
//! turned on here ([`Engine::enable_slot_index`]) — a per-slot index: slot scans in
//! [`crate::scan_order`] resumable from a key, and per-(slot, memgest) digests of the
//! published entries. So the store keeps no key index of its own; only what the engine
//! cannot know:
//!
//! ```text
//!   engine:      key -> entry (published, versioned, checksummed)   + per-slot order & digests
//!   tombs:       (slot_order_code, key) -> (version, memgest)   tombstones the core lists;
//!                bounded by limits::TOMBSTONES_MAX, oldest folded (the engine's floor stays)
//!   tomb_digests crate::SlotDigests of the tombstones only
//!   by_expiry:   (expiry, slot, key) of live entries with a TTL, soonest first
//! ```
//!
//! A slot's digest is the engine's part XOR the tombstones' part, bit for bit what
//! [`crate::MemStore`] computes over the same entries, so stores of either kind compare equal
//! iff they hold the same (key, version, memgest, tombstone) set. A scan merges the engine's
//! page with the slot's tombstones in the same order. The key → metadata B-tree this store
//! kept before (~115 B per copy of a key, the largest excess of RSS over the accounting in
//! cluster mode) is gone: the engine's per-slot index costs ~12 B per key
//! (docs/design/cluster-memory.md).
//!
//! Evictions (cache memgests) need no bookkeeping here: an evicted entry leaves the engine's
//! index, order and digests in the same step. Only `by_expiry` may keep a stale line for an
//! evicted key with a TTL; [`ReplicaStore::expired`] drops such lines when it meets them.
//!
//! Time: the trait is timeless, so every engine call here passes `now_ms = 0`, which never
//! expires anything; entries carry their expiry in the engine's header (the fronts' fast path
//! reads it there too) and the core expires them through `ReplicaStore::expired`.

use crate::{ApplyOutcome, Entry, ReplicaStore, SlotDigests};
use parking_lot::Mutex;
use ringlet_engine::hash::slot_order_code;
use ringlet_engine::{Engine, EngineConfig, SetOptions, SetOutcome};
use ringlet_types::{key_slot, limits, MemgestId, Slot, ValueKind, Version};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The entry's expiry in the engine's header: what the core reads back and what the fronts'
/// fast path (`ClusterNode::fast_get`) reads. (Every engine call here passes `now_ms = 0`, so
/// the engine itself never expires anything; the default `Expiry::Keep` would have kept a
/// previous value's TTL.)
fn engine_expiry(expiry_ms: Option<u64>) -> ringlet_engine::Expiry {
    expiry_ms.map_or(ringlet_engine::Expiry::Persist, ringlet_engine::Expiry::At)
}

/// A tombstone the core can list (a delete at `version` of a key of `memgest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tomb {
    version: Version,
    memgest: MemgestId,
}

fn tomb_entry(t: &Tomb) -> Entry {
    Entry {
        version: t.version,
        memgest: t.memgest,
        value: None,
        expiry_ms: None,
        kind: ValueKind::String,
    }
}

/// Counters of what the engine refused (exported as metrics; a non-zero `apply_errors`
/// means the node ran out of memory for data it may not evict and refused writes).
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Engine errors on apply (NoSpace, size limits): the write was NOT stored.
    pub apply_errors: AtomicU64,
    /// Tombstones dropped from the listed tombstones past [`limits::TOMBSTONES_MAX`].
    pub tombstones_folded: AtomicU64,
    /// Stale expiry lines (of entries evicted from a cache memgest) dropped.
    pub evicted_pruned: AtomicU64,
}

/// [`ReplicaStore`] over a shared engine. The replica core owns the store, other threads
/// (INFO, metrics) share the engine through [`EngineStore::engine`].
pub struct EngineStore {
    engine: Arc<Mutex<Engine>>,
    cfg: EngineConfig,
    /// Tombstones, in scan order (the code starts with the slot). A key is never both here
    /// and published in the engine.
    tombs: BTreeMap<(u64, Vec<u8>), Tomb>,
    tomb_digests: SlotDigests,
    /// Tombstones in the order written, to fold the oldest past the bound. May hold stale
    /// pairs (a key rewritten since): skipped when popped.
    tombstone_order: VecDeque<(Vec<u8>, Version)>,
    stats: Arc<StoreStats>,
    /// Cache memgests (the core's [`ReplicaStore::set_evictable`]): the engine may evict
    /// their entries when full.
    evictable: BTreeSet<MemgestId>,
    /// Live entries with an expiry, soonest first (active expiry: [`ReplicaStore::expired`]).
    /// A mutex only so that `expired(&self)` can drop lines of evicted keys; the core and
    /// the driver run on one thread, so it is never contended.
    by_expiry: Mutex<BTreeSet<(u64, Slot, Vec<u8>)>>,
    /// How many times [`ReplicaStore::clear`] replaced the engine behind the shared handle.
    engine_generation: u64,
    /// Keys the core reserved or applied since the driver last took them (only while a
    /// shared-memory export needs them: [`EngineStore::track_touched`]). The driver re-checks
    /// them against the core's in-flight mirror after every step (docs/design/
    /// cluster-shm-reads.md); bounded by what one step writes, since it drains every step.
    /// (A mutex only because the driver holds the store through `Replica::store(&self)`;
    /// the core and the driver run on the same thread, so it is never contended.)
    touched: Mutex<Option<Vec<Vec<u8>>>>,
}

/// Lines of `by_expiry` one [`ReplicaStore::expired`] call may examine beyond its limit
/// (stale lines of evicted keys are dropped as they are met, so this bounds one call's work,
/// not what it can clean over time).
const EXPIRY_STALE_VISITS_MAX: usize = 1024;

impl EngineStore {
    /// A store over a fresh engine built from `cfg` (the node's id should be `cfg.origin`).
    ///
    /// # Errors
    /// The engine's (bad config, memory refused).
    pub fn new(cfg: EngineConfig) -> Result<EngineStore, ringlet_engine::Error> {
        let engine = Engine::new(cfg.clone())?;
        Ok(EngineStore::with_engine(Arc::new(Mutex::new(engine)), cfg))
    }

    /// A store over an existing engine; `cfg` is what [`ReplicaStore::clear`] uses to rebuild
    /// it. Turns the engine's per-slot index on (built from what it holds, if anything).
    pub fn with_engine(engine: Arc<Mutex<Engine>>, cfg: EngineConfig) -> EngineStore {
        {
            let mut e = engine.lock();
            // Replicated data is a store, not a cache: the engine refuses writes when full
            // rather than silently dropping acknowledged data (DESIGN.md "pinned").
            e.define_memgest(MemgestId::NONE, false);
            e.enable_slot_index();
        }
        EngineStore {
            engine,
            cfg,
            tombs: BTreeMap::new(),
            tomb_digests: SlotDigests::default(),
            tombstone_order: VecDeque::new(),
            stats: Arc::new(StoreStats::default()),
            evictable: BTreeSet::new(),
            by_expiry: Mutex::new(BTreeSet::new()),
            engine_generation: 0,
            touched: Mutex::new(None),
        }
    }

    /// The engine (shared with the server for INFO/metrics).
    pub fn engine(&self) -> &Arc<Mutex<Engine>> {
        &self.engine
    }

    /// Moves each time the engine behind [`EngineStore::engine`] is replaced (a fenced node
    /// comes back empty): lock-free readers made before then read the old one.
    pub fn engine_generation(&self) -> u64 {
        self.engine_generation
    }

    /// Start recording the keys of reservations and applies (see `touched`).
    pub fn track_touched(&self) {
        self.touched.lock().get_or_insert_with(Vec::new);
    }

    /// Move the recorded keys into `out` (empties the record).
    pub fn take_touched(&self, out: &mut Vec<Vec<u8>>) {
        if let Some(t) = self.touched.lock().as_mut() {
            out.append(t);
        }
    }

    fn touch(&self, key: &[u8]) {
        if let Some(t) = self.touched.lock().as_mut() {
            t.push(key.to_vec());
        }
    }

    pub fn stats(&self) -> &Arc<StoreStats> {
        &self.stats
    }

    /// The tombstone of `key`, without allocating (a range over the key's code).
    fn tomb(&self, key: &[u8]) -> Option<Tomb> {
        if self.tombs.is_empty() {
            return None;
        }
        let code = slot_order_code(key);
        self.tombs
            .range((code, Vec::new())..(code + 1, Vec::new()))
            .find(|((_, k), _)| k.as_slice() == key)
            .map(|(_, t)| *t)
    }

    fn set_tomb(&mut self, key: &[u8], t: Option<Tomb>) {
        let slot = key_slot(key);
        let k = (slot_order_code(key), key.to_vec());
        if let Some(old) = self.tombs.remove(&k) {
            self.tomb_digests
                .toggle(slot, key, &tomb_entry(&old), false);
        }
        if let Some(t) = t {
            self.tomb_digests.toggle(slot, key, &tomb_entry(&t), true);
            self.tombstone_order.push_back((key.to_vec(), t.version));
            self.tombs.insert(k, t);
            self.fold_tombstones();
        }
    }

    /// Bound the tombstones the store lists, oldest first. The engine keeps its own bounded
    /// cache plus a summary version, which is what refuses late writes; this store only loses
    /// the ability to *list* very old tombstones in repair.
    fn fold_tombstones(&mut self) {
        let max = limits::TOMBSTONES_MAX as usize;
        while self.tombs.len() > max || self.tombstone_order.len() > 2 * max {
            let Some((k, v)) = self.tombstone_order.pop_front() else {
                break;
            };
            if self.tomb(&k).is_some_and(|t| t.version == v) {
                self.set_tomb(&k, None);
                self.stats.tombstones_folded.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn unfile_expiry(&self, key: &[u8], expiry_ms: Option<u64>) {
        if let Some(x) = expiry_ms {
            self.by_expiry
                .lock()
                .remove(&(x, key_slot(key), key.to_vec()));
        }
    }

    fn ensure_memgest(&self, engine: &mut Engine, m: MemgestId) {
        // Redefining is idempotent; every replicated memgest is pinned (see with_engine), a
        // single-copy cache memgest is evictable.
        engine.define_memgest(m, self.evictable.contains(&m));
    }

    /// The slot's tombstones strictly after `after` in scan order, in that order.
    fn tombs_after(
        &self,
        slot: Slot,
        after: Option<&[u8]>,
    ) -> impl Iterator<Item = (&Vec<u8>, &Tomb)> + '_ {
        self.tombs
            .range(crate::store::slot_range(slot, after))
            .map(|((_, k), t)| (k, t))
    }

    /// Full recomputation of the tombstones' digests and a check of the engine (its regions,
    /// accounting and per-slot index); no key both published and a tombstone (tests).
    ///
    /// # Errors
    /// The first inconsistency found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let engine = self.engine.lock();
        engine.check_invariants()?;
        let mut want = SlotDigests::default();
        for ((code, key), t) in &self.tombs {
            if *code != slot_order_code(key) {
                return Err("tombstone filed under the wrong code".into());
            }
            if let Some(h) = engine.head(key) {
                return Err(format!(
                    "key {:?}: tombstone {} beside a published entry {}",
                    String::from_utf8_lossy(key),
                    t.version,
                    h.version
                ));
            }
            want.toggle(key_slot(key), key, &tomb_entry(t), true);
        }
        if want != self.tomb_digests {
            return Err("incremental tombstone digests drifted".into());
        }
        for (x, _, key) in self.by_expiry.lock().iter() {
            // Lines of evicted keys may linger until met by `expired`; a published key's line
            // must match its entry.
            if let Some(h) = engine.head(key) {
                if h.expire_at_ms != Some(*x) && !self.evictable.contains(&h.memgest) {
                    return Err(format!(
                        "key {:?}: expiry line {x} but entry expires {:?}",
                        String::from_utf8_lossy(key),
                        h.expire_at_ms
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Merge a page of the engine's published entries with the slot's tombstones, both in scan
/// order, keeping the first `limit` in that order.
fn merge_page<T>(
    live: Vec<(Vec<u8>, T)>,
    tombs: impl Iterator<Item = (Vec<u8>, T)>,
    limit: usize,
) -> Vec<(Vec<u8>, T)> {
    let mut out = Vec::with_capacity(limit.min(live.len() + 16));
    let mut live = live.into_iter().peekable();
    let mut tombs = tombs.peekable();
    while out.len() < limit {
        let take_live = match (live.peek(), tombs.peek()) {
            (Some((a, _)), Some((b, _))) => crate::scan_order(a, b).is_lt(),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_live { live.next() } else { tombs.next() };
        match next {
            Some(x) => out.push(x),
            None => break,
        }
    }
    out
}

impl ReplicaStore for EngineStore {
    fn head(&self, key: &[u8]) -> Option<(Version, MemgestId, bool)> {
        if let Some(h) = self.engine.lock().head(key) {
            return Some((h.version, h.memgest, true));
        }
        self.tomb(key).map(|t| (t.version, t.memgest, false))
    }

    fn get(&self, key: &[u8]) -> Option<Entry> {
        if let Some(e) = self.engine.lock().get(key, 0) {
            return Some(Entry {
                version: e.version,
                memgest: e.memgest,
                value: Some(e.value),
                expiry_ms: e.expire_at_ms,
                kind: e.kind,
            });
        }
        self.tomb(key).map(|t| tomb_entry(&t))
    }

    fn apply(&mut self, key: &[u8], entry: Entry) -> ApplyOutcome {
        self.touch(key);
        let mut engine = self.engine.lock();
        let old = engine.head(key);
        let held = old
            .map(|h| h.version)
            .or_else(|| self.tomb(key).map(|t| t.version));
        if let Some(v) = held {
            if v >= entry.version {
                return ApplyOutcome::Superseded { current: v };
            }
        }
        // The engine's own floor: a retired key's tombstone, else the key's slot summary.
        let floor = engine.floor_of(key);
        if floor >= entry.version {
            return ApplyOutcome::Superseded { current: floor };
        }
        let result = match &entry.value {
            Some(value) => {
                self.ensure_memgest(&mut engine, entry.memgest);
                // A coordinator reserved room for its own write (`reserve`): publish it with
                // one switch of the index entry. Otherwise (a replica, or the reservation was
                // replaced by a newer write of the key) write it now.
                match engine.publish(key, entry.version, 0) {
                    Ok(true) => Ok(true),
                    Ok(false) | Err(_) => {
                        let opts = SetOptions {
                            version: Some(entry.version),
                            memgest: entry.memgest,
                            kind: entry.kind,
                            expiry: engine_expiry(entry.expiry_ms),
                            ..SetOptions::default()
                        };
                        match engine.set(key, value, &opts, 0) {
                            Ok(SetOutcome::Applied { .. }) => Ok(true),
                            Ok(SetOutcome::NotApplied { .. }) => Ok(false),
                            Err(e) => Err(e),
                        }
                    }
                }
            }
            None => match engine.delete(key, Some(entry.version), 0) {
                Ok(_) => Ok(true),
                Err(ringlet_engine::Error::StaleVersion) => Ok(false),
                Err(e) => Err(e),
            },
        };
        drop(engine);
        match result {
            Ok(true) => {
                self.unfile_expiry(key, old.and_then(|h| h.expire_at_ms));
                if entry.value.is_some() {
                    if let Some(x) = entry.expiry_ms {
                        self.by_expiry
                            .lock()
                            .insert((x, key_slot(key), key.to_vec()));
                    }
                    if !self.tombs.is_empty() {
                        self.set_tomb(key, None);
                    }
                } else {
                    self.set_tomb(
                        key,
                        Some(Tomb {
                            version: entry.version,
                            memgest: entry.memgest,
                        }),
                    );
                }
                ApplyOutcome::Applied
            }
            Ok(false) => ApplyOutcome::Superseded {
                current: held.unwrap_or(entry.version),
            },
            Err(_) => {
                // NoSpace (pinned data fills the node) or a size limit: nothing was stored.
                // The core refuses the write (coordinator) or tells the coordinator
                // (replica), so no client is told OK for a write this node does not hold.
                self.stats.apply_errors.fetch_add(1, Ordering::Relaxed);
                ApplyOutcome::Refused
            }
        }
    }

    fn reserve(&mut self, key: &[u8], entry: &Entry) -> bool {
        self.touch(key);
        let Some(value) = &entry.value else {
            return true; // a tombstone needs no data room
        };
        let mut engine = self.engine.lock();
        self.ensure_memgest(&mut engine, entry.memgest);
        let opts = SetOptions {
            version: Some(entry.version),
            memgest: entry.memgest,
            staged: true,
            kind: entry.kind,
            expiry: engine_expiry(entry.expiry_ms),
            ..SetOptions::default()
        };
        match engine.set(key, value, &opts, 0) {
            // Staged (invisible to readers until `apply` publishes it), or not newer than
            // what is held: `apply` will report Superseded then, as without a reservation.
            Ok(_) => true,
            Err(_) => {
                self.stats.apply_errors.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    fn expired(&self, wall_ms: u64, limit: usize) -> Vec<(Vec<u8>, Version)> {
        let mut out = Vec::new();
        let mut stale = Vec::new();
        let mut by_expiry = self.by_expiry.lock();
        {
            let engine = self.engine.lock();
            let visits = limit.saturating_add(EXPIRY_STALE_VISITS_MAX);
            for line in by_expiry.iter().take(visits) {
                let (x, _, key) = line;
                if *x > wall_ms || out.len() >= limit {
                    break;
                }
                match engine.head(key) {
                    Some(h) if h.expire_at_ms == Some(*x) => out.push((key.clone(), h.version)),
                    // Evicted (cache memgest) or rewritten without this line being dropped:
                    // nothing to expire.
                    _ => stale.push(line.clone()),
                }
            }
        }
        for line in &stale {
            by_expiry.remove(line);
        }
        self.stats
            .evicted_pruned
            .fetch_add(stale.len() as u64, Ordering::Relaxed);
        out
    }

    fn set_evictable(&mut self, memgests: &[MemgestId]) {
        let next: BTreeSet<MemgestId> = memgests.iter().copied().collect();
        if next == self.evictable {
            return;
        }
        let mut engine = self.engine.lock();
        for m in self.evictable.difference(&next) {
            engine.define_memgest(*m, false);
        }
        for m in &next {
            engine.define_memgest(*m, true);
        }
        drop(engine);
        self.evictable = next;
    }

    fn unreserve(&mut self, key: &[u8], version: Version) {
        self.engine.lock().unstage(key, version);
    }

    fn retire(&mut self, key: &[u8], version: Version) -> bool {
        let mut engine = self.engine.lock();
        if let Some(h) = engine.head(key) {
            if h.version > version {
                return false;
            }
            // The engine has no "drop without tombstone"; a tombstone one sequence step above
            // the retired version blocks only the retired write's own replays: any later write
            // of the key has a strictly greater (ms, logical) pair, so it still applies.
            let t = Version(h.version.0.saturating_add(1));
            let _ = engine.delete(key, Some(t), 0);
            drop(engine);
            self.unfile_expiry(key, h.expire_at_ms);
            return true;
        }
        drop(engine);
        match self.tomb(key) {
            Some(t) if t.version <= version => {
                self.set_tomb(key, None);
                true
            }
            _ => false,
        }
    }

    fn scan_slot_heads(
        &self,
        slot: Slot,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Version, MemgestId)> {
        // Versions only, from the engine's index and entry headers: no value copy (repair's
        // key lists compared every value-carrying entry of a slot, ~70% of a loaded driver's
        // time, when they were read with values).
        let mut live = Vec::new();
        self.engine
            .lock()
            .slot_scan_heads(slot, after, limit, &mut live);
        let live = live
            .into_iter()
            .map(|(k, h)| (k, (h.version, h.memgest)))
            .collect();
        let tombs = self
            .tombs_after(slot, after)
            .map(|(k, t)| (k.clone(), (t.version, t.memgest)));
        merge_page(live, tombs, limit)
            .into_iter()
            .map(|(k, (v, m))| (k, v, m))
            .collect()
    }

    fn forget(&mut self, key: &[u8]) {
        let head = self.engine.lock().head(key);
        if head.is_some() || self.tomb(key).is_some() {
            self.engine.lock().forget(key);
            self.unfile_expiry(key, head.and_then(|h| h.expire_at_ms));
            self.set_tomb(key, None);
        }
    }

    fn forget_floor(&mut self, slot: Slot) {
        self.engine.lock().forget_slot_floor(slot);
    }

    fn scan_slot(&self, slot: Slot, after: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Entry)> {
        let mut live = Vec::new();
        self.engine.lock().slot_scan(slot, after, limit, &mut live);
        let live = live
            .into_iter()
            .map(|(k, e)| {
                let en = Entry {
                    version: e.version,
                    memgest: e.memgest,
                    value: Some(e.value),
                    expiry_ms: e.expire_at_ms,
                    kind: e.kind,
                };
                (k, en)
            })
            .collect();
        let tombs = self
            .tombs_after(slot, after)
            .map(|(k, t)| (k.clone(), tomb_entry(t)));
        merge_page(live, tombs, limit)
    }

    fn nonempty_slots(&self, first: Slot, last: Slot) -> Vec<Slot> {
        let mut v = self.engine.lock().nonempty_slots(first, last);
        if !self.tombs.is_empty() {
            v.extend(self.tomb_digests.nonempty_slots(first, last));
            v.sort_unstable();
            v.dedup();
        }
        v
    }

    fn slot_digest(&self, slot: Slot, filter: &dyn Fn(MemgestId) -> bool) -> u64 {
        self.engine.lock().slot_memgest_digest(slot, filter)
            ^ self.tomb_digests.slot_digest(slot, filter)
    }

    fn clear(&mut self) {
        // A fenced incarnation comes back empty. `flush_all` would keep a tombstone summary
        // above every version seen, and the re-sync that follows would be refused; a fresh
        // engine starts from version zero, as a restarted process does.
        match Engine::new(self.cfg.clone()) {
            Ok(fresh) => {
                let mut e = self.engine.lock();
                *e = fresh;
                // Readers made from the old engine still map its regions: the driver makes new
                // ones when this moves (`ClusterNode::fast_get`'s reader).
                self.engine_generation += 1;
                e.define_memgest(MemgestId::NONE, false);
                e.enable_slot_index();
                for m in &self.evictable {
                    e.define_memgest(*m, true);
                }
            }
            Err(_) => {
                // Could not reserve a new region: fall back to erasing in place. Later syncs
                // of older versions are then refused (reported by check_invariants users).
                self.engine.lock().flush_all(0);
            }
        }
        self.by_expiry.lock().clear();
        self.tombs.clear();
        self.tomb_digests.clear();
        self.tombstone_order.clear();
    }

    fn len(&self) -> usize {
        self.engine.lock().len() as usize + self.tombs.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::MemStore;
    use proptest::prelude::*;

    fn cfg() -> EngineConfig {
        EngineConfig {
            memory_bytes_max: 8 << 20,
            index_buckets_initial: 64,
            origin: 7,
            ..EngineConfig::default()
        }
    }

    fn e(v: u128, m: u16, val: Option<&str>) -> Entry {
        Entry {
            version: Version(v << 64),
            memgest: MemgestId(m),
            value: val.map(|s| s.as_bytes().to_vec()),
            expiry_ms: None,
            kind: ValueKind::String,
        }
    }

    /// Entries with an expiry are listed by `expired` once due, soonest first, and only
    /// while they are the key's live entry.
    #[test]
    fn expired_lists_due_live_entries_only() {
        let mut s = EngineStore::new(cfg()).unwrap();
        let ttl = |v: u128, x: u64| Entry {
            expiry_ms: Some(x),
            ..e(v, 1, Some("v"))
        };
        s.apply(b"a", ttl(1, 200));
        s.apply(b"b", ttl(2, 100));
        s.apply(b"c", e(3, 1, Some("forever")));
        assert!(s.expired(99, 10).is_empty());
        assert_eq!(s.expired(150, 10), vec![(b"b".to_vec(), Version(2 << 64))]);
        assert_eq!(s.expired(1000, 1).len(), 1, "limit");
        assert_eq!(s.get(b"a").unwrap().expiry_ms, Some(200));
        // Renewed without a TTL, deleted: no longer due.
        s.apply(b"a", e(4, 1, Some("renewed")));
        s.apply(b"b", e(5, 1, None));
        assert!(s.expired(1000, 10).is_empty());
        assert_eq!(s.get(b"a").unwrap().expiry_ms, None);
        s.check_invariants().unwrap();
    }

    #[test]
    fn apply_get_tombstone_and_supersede() {
        let mut s = EngineStore::new(cfg()).unwrap();
        assert_eq!(s.apply(b"k", e(5, 1, Some("a"))), ApplyOutcome::Applied);
        assert_eq!(s.get(b"k").unwrap().value.as_deref(), Some(&b"a"[..]));
        assert!(matches!(
            s.apply(b"k", e(5, 1, Some("b"))),
            ApplyOutcome::Superseded { .. }
        ));
        assert_eq!(s.apply(b"k", e(7, 1, None)), ApplyOutcome::Applied);
        let g = s.get(b"k").unwrap();
        assert_eq!(
            (g.version, g.memgest, g.value),
            (Version(7 << 64), MemgestId(1), None)
        );
        // A late write below the tombstone cannot resurrect the key.
        assert!(matches!(
            s.apply(b"k", e(6, 1, Some("c"))),
            ApplyOutcome::Superseded { .. }
        ));
        assert_eq!(s.len(), 1);
        s.check_invariants().unwrap();
    }

    #[test]
    fn retire_drops_without_blocking_newer_writes() {
        let mut s = EngineStore::new(cfg()).unwrap();
        s.apply(b"k", e(5, 1, Some("a")));
        assert!(!s.retire(b"k", Version(4 << 64)));
        assert!(s.retire(b"k", Version(5 << 64)));
        assert_eq!(s.get(b"k"), None);
        assert!(s.is_empty());
        // The retired write's replay is refused, a newer one applies.
        assert!(matches!(
            s.apply(b"k", e(5, 1, Some("a"))),
            ApplyOutcome::Superseded { .. }
        ));
        assert_eq!(s.apply(b"k", e(6, 1, Some("b"))), ApplyOutcome::Applied);
        s.check_invariants().unwrap();
    }

    #[test]
    fn forget_leaves_no_trace_so_the_same_version_applies_again() {
        // A range given away and taken back (resharding): the keys pulled back carry the
        // versions this node once held, and must apply.
        let mut s = EngineStore::new(cfg()).unwrap();
        s.apply(b"k", e(5, 1, Some("a")));
        s.apply(b"t", e(6, 1, None));
        s.forget(b"k");
        s.forget(b"t");
        s.forget_floor(key_slot(b"k"));
        assert!(s.is_empty());
        assert_eq!(s.apply(b"k", e(5, 1, Some("a"))), ApplyOutcome::Applied);
        assert_eq!(s.apply(b"t", e(4, 1, Some("old"))), ApplyOutcome::Applied);
        assert_eq!(s.get(b"k").unwrap().value.as_deref(), Some(&b"a"[..]));
        // Heads are the scan's keys, versions and memgests, without values.
        let slot = key_slot(b"k");
        let full: Vec<(Vec<u8>, Version, MemgestId)> = s
            .scan_slot(slot, None, 10)
            .into_iter()
            .map(|(k, e)| (k, e.version, e.memgest))
            .collect();
        assert_eq!(s.scan_slot_heads(slot, None, 10), full);
        assert!(!full.is_empty());
        s.check_invariants().unwrap();
    }

    #[test]
    fn clear_starts_from_version_zero() {
        let mut s = EngineStore::new(cfg()).unwrap();
        s.apply(b"k", e(50, 1, Some("a")));
        s.apply(b"j", e(60, 1, None));
        s.clear();
        assert!(s.is_empty());
        assert_eq!(s.engine().lock().len(), 0);
        // A re-sync of older versions (from the new coordinator) must apply.
        assert_eq!(s.apply(b"k", e(10, 1, Some("x"))), ApplyOutcome::Applied);
        s.check_invariants().unwrap();
    }

    #[test]
    fn engine_full_is_not_reported_applied() {
        let mut s = EngineStore::new(EngineConfig {
            memory_bytes_max: 1 << 20,
            ..cfg()
        })
        .unwrap();
        let big = "x".repeat(64 * 1024);
        let mut refused = 0;
        for i in 0..64u128 {
            let k = format!("k{i}");
            match s.apply(k.as_bytes(), e(i + 1, 1, Some(&big))) {
                ApplyOutcome::Applied => assert!(s.get(k.as_bytes()).is_some()),
                ApplyOutcome::Refused => {
                    refused += 1;
                    assert!(s.get(k.as_bytes()).is_none());
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(refused > 0, "1 MiB cannot hold 4 MiB of pinned values");
        assert_eq!(s.stats().apply_errors.load(Ordering::Relaxed), refused);
        s.check_invariants().unwrap();
    }

    /// A cache memgest evicts instead of refusing; the metadata of evicted entries is pruned
    /// as evictions happen, so the index stays near what the engine holds.
    #[test]
    fn cache_memgest_evicts_and_its_metadata_is_pruned() {
        let mut s = EngineStore::new(EngineConfig {
            memory_bytes_max: 1 << 20,
            ..cfg()
        })
        .unwrap();
        s.set_evictable(&[MemgestId(1)]);
        let big = "x".repeat(16 * 1024);
        for i in 0..1024u128 {
            let k = format!("k{i}");
            assert_eq!(
                s.apply(k.as_bytes(), e(i + 1, 1, Some(&big))),
                ApplyOutcome::Applied
            );
            s.check_invariants().unwrap();
        }
        let held = s.engine().lock().len() as usize;
        assert!(held < 1024, "1 MiB cannot hold 16 MiB: nothing was evicted");
        // Never wrong: a key reads its own value or nothing.
        for i in 0..1024u128 {
            if let Some(g) = s.get(format!("k{i}").as_bytes()) {
                assert_eq!(g.version, Version((i + 1) << 64));
            }
        }
        // Nothing of an evicted entry is left to prune: the store lists what the engine holds.
        assert_eq!(s.len(), held);
        // A pinned memgest is never evicted from: it refuses instead.
        s.set_evictable(&[]);
        let mut refused = 0;
        for i in 0..256u128 {
            if s.apply(format!("p{i}").as_bytes(), e(5000 + i, 1, Some(&big)))
                == ApplyOutcome::Refused
            {
                refused += 1;
            }
        }
        assert!(refused > 0);
        s.check_invariants().unwrap();
    }

    /// A coordinator's reservation holds room that later writes cannot take, stays invisible
    /// until applied, and is given back by `unreserve`.
    #[test]
    fn reserve_publish_and_unreserve() {
        let mut s = EngineStore::new(EngineConfig {
            memory_bytes_max: 1 << 20,
            ..cfg()
        })
        .unwrap();
        let big = "x".repeat(64 * 1024);
        // Reserve until the engine refuses.
        let mut reserved = Vec::new();
        for i in 0..64u128 {
            let k = format!("r{i}");
            let entry = e(i + 1, 1, Some(&big));
            if !s.reserve(k.as_bytes(), &entry) {
                break;
            }
            assert!(s.get(k.as_bytes()).is_none(), "a reservation is invisible");
            reserved.push((k, entry));
        }
        assert!(!reserved.is_empty() && reserved.len() < 64);
        // Reserved room is taken: a plain apply of another key is refused.
        assert_eq!(
            s.apply(b"other", e(1000, 1, Some(&big))),
            ApplyOutcome::Refused
        );
        // Applying a reserved write publishes it (no new room needed).
        let (k0, e0) = reserved.remove(0);
        assert_eq!(s.apply(k0.as_bytes(), e0), ApplyOutcome::Applied);
        assert_eq!(s.get(k0.as_bytes()).unwrap().value.unwrap(), big.as_bytes());
        // Unreserving gives the room back.
        for (k, en) in &reserved {
            s.unreserve(k.as_bytes(), en.version);
        }
        assert_eq!(
            s.apply(b"other", e(1001, 1, Some(&big))),
            ApplyOutcome::Applied
        );
        s.check_invariants().unwrap();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Apply(u8, u8, u8, Option<u8>),
        Retire(u8, u8),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u8..12, 1u8..40, 0u8..3, proptest::option::of(0u8..4))
                .prop_map(|(k, v, m, val)| Op::Apply(k, v, m, val)),
            2 => (0u8..12, 1u8..40).prop_map(|(k, v)| Op::Retire(k, v)),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// A pull's pages (`scan_slot` resumed from the last key) while writes land between
        /// pages: every key of the slot that holds an entry or a tombstone from the first page
        /// to the last is returned exactly once, in strictly increasing scan order, with what
        /// it held when its page was read. The index starts at 2 buckets, so it grows during
        /// the walk.
        #[test]
        fn pull_pages_under_writes_see_every_key_present_throughout(
            initial in 1u32..80,
            limit in 1usize..6,
            writes in proptest::collection::vec((0u32..200, 0u8..4, any::<bool>()), 0..200),
        ) {
            let mut s = EngineStore::new(EngineConfig {
                index_buckets_initial: 2,
                ..cfg()
            })
            .unwrap();
            let key = |n: u32, tag: u8| format!("{{t{tag}}}k{n}").into_bytes();
            let slot = key_slot(b"{t0}");
            let mut v = 1u128;
            for n in 0..initial {
                let tomb = n % 5 == 0;
                s.apply(&key(n, (n % 3) as u8), e(v, 1, (!tomb).then_some("x")));
                v += 1;
            }
            // Keys of the slot present at the start; rewriting keeps a key present (a value
            // or a tombstone), only a retire removes it.
            let mut throughout: std::collections::BTreeSet<Vec<u8>> = (0..initial)
                .filter(|n| n % 3 == 0)
                .map(|n| key(n, 0))
                .collect();
            let mut seen = Vec::new();
            let mut after: Option<Vec<u8>> = None;
            let mut writes = writes.chunks(7);
            for _ in 0..10_000 {
                let page = s.scan_slot(slot, after.as_deref(), limit);
                for (k, en) in &page {
                    prop_assert_eq!(key_slot(k), slot);
                    if let Some(a) = &after {
                        prop_assert!(crate::scan_order(a, k).is_lt());
                    }
                    prop_assert_eq!(Some(en.clone()), s.get(k));
                    after = Some(k.clone());
                    seen.push(k.clone());
                }
                if page.len() < limit {
                    break;
                }
                for &(n, tag, del) in writes.next().unwrap_or(&[]) {
                    let k = key(n, tag % 3);
                    if tag == 3 {
                        // Retire: the key leaves without a trace.
                        let held = s.head(&k).map(|h| h.0);
                        if let Some(h) = held {
                            s.retire(&k, h);
                            throughout.remove(&k);
                        }
                        continue;
                    }
                    s.apply(&k, e(v, 1 + u16::from(tag % 2), (!del).then_some("y")));
                    v += 1;
                }
                s.check_invariants().map_err(TestCaseError::fail)?;
            }
            let unique: std::collections::BTreeSet<Vec<u8>> = seen.iter().cloned().collect();
            prop_assert_eq!(unique.len(), seen.len(), "a key returned twice");
            let missed: Vec<_> = throughout.difference(&unique).collect();
            prop_assert!(missed.is_empty(), "missed {:?}", missed);
        }

        /// EngineStore behaves exactly like the reference MemStore the simulator uses:
        /// same outcomes (modulo the retire tombstone, see `retire`), same reads, same scans,
        /// same digests.
        #[test]
        fn matches_memstore(ops in proptest::collection::vec(op(), 1..120)) {
            let mut a = EngineStore::new(cfg()).unwrap();
            let mut b = MemStore::new();
            // Keys share hash tags so several land in one slot (scan order matters).
            let key = |k: u8| format!("{{t{}}}k{k}", k % 3).into_bytes();
            // Retired (key, version) pairs: EngineStore refuses their replays, MemStore not.
            let mut retired: std::collections::BTreeSet<(Vec<u8>, u128)> = Default::default();
            for o in ops {
                match o {
                    Op::Apply(k, v, m, val) => {
                        let ent = e(u128::from(v), u16::from(m), val.map(|x| ["a","b","c","d"][x as usize]));
                        let ra = a.apply(&key(k), ent.clone());
                        if retired.iter().any(|(rk, rv)| *rk == key(k) && *rv >= ent.version.0) {
                            let sup = matches!(ra, ApplyOutcome::Superseded { .. });
                            prop_assert!(sup);
                            continue;
                        }
                        let rb = b.apply(&key(k), ent);
                        prop_assert_eq!(matches!(ra, ApplyOutcome::Applied), matches!(rb, ApplyOutcome::Applied));
                    }
                    Op::Retire(k, v) => {
                        let v = Version(u128::from(v) << 64);
                        let held = a.get(&key(k)).map(|e| e.version);
                        let ra = a.retire(&key(k), v);
                        let rb = b.retire(&key(k), v);
                        prop_assert_eq!(ra, rb);
                        if let (true, Some(h)) = (ra, held) { retired.insert((key(k), h.0)); }
                    }
                    Op::Clear => { a.clear(); b.clear(); retired.clear(); }
                }
                a.check_invariants().map_err(TestCaseError::fail)?;
            }
            for k in 0..12u8 {
                prop_assert_eq!(a.get(&key(k)), b.get(&key(k)));
            }
            prop_assert_eq!(a.len(), b.len());
            prop_assert_eq!(a.nonempty_slots(0, 16383), b.nonempty_slots(0, 16383));
            for s in a.nonempty_slots(0, 16383) {
                prop_assert_eq!(a.scan_slot(s, None, 100), b.scan_slot(s, None, 100));
                let first = a.scan_slot(s, None, 1);
                let after = first[0].0.clone();
                prop_assert_eq!(a.scan_slot(s, Some(&after), 2), b.scan_slot(s, Some(&after), 2));
                prop_assert_eq!(a.slot_digest(s, &|_| true), b.slot_digest(s, &|_| true));
                prop_assert_eq!(a.slot_digest(s, &|m| m.0 == 1), b.slot_digest(s, &|m| m.0 == 1));
            }
        }
    }
}
