//! [`EngineStore`]: the replica core's [`ReplicaStore`] over the node's engine.
//!
//! The engine holds the values (checksummed entries, memory accounting, the tombstone cache and
//! its summary version, which already refuse any write not newer than what the node knows).
//! What the engine does not offer is what the replica core needs beyond a key-value map:
//! entries of one slot *in key order* (pull pages and repair key lists resume from a key),
//! the memgest of a tombstone, and per-(slot, memgest) digests that can be filtered by
//! memgest. So the store keeps a small metadata index beside the engine:
//!
//! ```text
//!   meta:    BTreeMap<(slot, key), Meta { version, memgest, tombstone }>   key order per slot
//!   digests: crate::SlotDigests (xor of entry_digest + count per (slot, memgest)), O(1) per change
//!   engine:  key -> value (published, versioned, checksummed)              the data
//! ```
//!
//! The metadata costs ~80 bytes per key in the B-tree slot (keys up to 22 bytes inline,
//! longer ones again on the heap), ~115 B per key with the nodes' slack; the alternative — sorting a
//! slot's keys out of the engine's hash index on every page — costs O(n log n) per page and
//! would still need a tombstone-memgest table. Digests are kept in the same
//! `crate::SlotDigests` as [`crate::MemStore`]'s, so two nodes compare
//! equal iff their metadata agree.
//!
//! Time: the trait is timeless, so every engine call here passes `now_ms = 0`, which never
//! expires anything; entries carry their expiry (in the metadata, and in the engine's header
//! for the fronts' fast path) and the core expires them through `ReplicaStore::expired`.

use crate::{ApplyOutcome, Entry, ReplicaStore, SlotDigests};
use parking_lot::Mutex;
use ringlet_engine::{Engine, EngineConfig, SetOptions, SetOutcome};
use ringlet_types::{key_slot, limits, MemgestId, Slot, ValueKind, Version};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The entry's expiry in the engine's header too: the metadata index is what the core reads,
/// but the fronts' fast path (`ClusterNode::fast_get`) reads the engine directly and must see
/// the same expiry. (Every engine call here passes `now_ms = 0`, so the engine itself never
/// expires anything; the default `Expiry::Keep` would have kept a previous value's TTL.)
fn engine_expiry(expiry_ms: Option<u64>) -> ringlet_engine::Expiry {
    expiry_ms.map_or(ringlet_engine::Expiry::Persist, ringlet_engine::Expiry::At)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta {
    version: Version,
    memgest: MemgestId,
    tombstone: bool,
    /// The entry's expiry (unix ms), also filed in `EngineStore::by_expiry`.
    expiry_ms: Option<u64>,
    /// String or record (the engine keeps it too; here so scans and tombstones need no read).
    kind: ValueKind,
}

/// A key in the metadata index, stored inline when it is at most [`INLINE_KEY_BYTES`]
/// long. A `Vec<u8>` costs the same 24 bytes in the B-tree *plus* a heap block (32 B for any
/// key up to 24 bytes): one per copy of every key, ~0.03 bytes of RSS per payload byte of
/// 1 KiB values per copy (docs/design/cluster-memory.md). Ordered by its bytes, exactly as
/// the `Vec<u8>` was, so pages and key lists keep their order.
#[derive(Clone)]
enum SmallKey {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    Heap(Box<[u8]>),
}

/// Longest key kept inline: what fits beside the tag and the length in 24 bytes.
const INLINE_KEY_BYTES: usize = 22;
const _: () = assert!(std::mem::size_of::<SmallKey>() == 24);

impl SmallKey {
    fn new(key: &[u8]) -> SmallKey {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE_KEY_BYTES => {
                let mut bytes = [0u8; INLINE_KEY_BYTES];
                if let Some(dst) = bytes.get_mut(..key.len()) {
                    dst.copy_from_slice(key);
                }
                SmallKey::Inline { len, bytes }
            }
            _ => SmallKey::Heap(key.into()),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            SmallKey::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or(&[]),
            SmallKey::Heap(b) => b,
        }
    }
}

impl std::ops::Deref for SmallKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for SmallKey {
    fn eq(&self, other: &SmallKey) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}
impl Eq for SmallKey {}
impl PartialOrd for SmallKey {
    fn partial_cmp(&self, other: &SmallKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for SmallKey {
    fn cmp(&self, other: &SmallKey) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}
impl std::fmt::Debug for SmallKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// Counters of what the engine refused (exported as metrics; a non-zero `apply_errors`
/// means the node ran out of memory for data it may not evict and refused writes).
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Engine errors on apply (NoSpace, size limits): the write was NOT stored.
    pub apply_errors: AtomicU64,
    /// Tombstones dropped from the metadata index past [`limits::TOMBSTONES_MAX`].
    pub tombstones_folded: AtomicU64,
    /// Metadata of cache entries the engine evicted, dropped by the prune pass.
    pub evicted_pruned: AtomicU64,
}

/// [`ReplicaStore`] over a shared engine. Cheap to clone the handle parts; the replica core
/// owns the store, other threads (INFO, metrics) share the engine through [`EngineStore::engine`].
pub struct EngineStore {
    engine: Arc<Mutex<Engine>>,
    cfg: EngineConfig,
    meta: BTreeMap<(Slot, SmallKey), Meta>,
    digests: SlotDigests,
    /// Tombstones in the order written, to fold the oldest past the bound.
    tombstone_order: std::collections::VecDeque<(Vec<u8>, Version)>,
    tombstones: usize,
    stats: Arc<StoreStats>,
    /// Cache memgests (the core's [`ReplicaStore::set_evictable`]): the engine may evict
    /// their entries when full. Their metadata then outlives the entry until pruned.
    evictable: std::collections::BTreeSet<MemgestId>,
    /// The engine's eviction count when the metadata was last pruned.
    seen_evictions: u64,
    /// Where the next prune pass resumes (round robin over the metadata index).
    prune_cursor: Option<(Slot, SmallKey)>,
    /// Live entries with an expiry, soonest first (active expiry: [`ReplicaStore::expired`]).
    by_expiry: std::collections::BTreeSet<(u64, Slot, Vec<u8>)>,
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

/// Metadata entries checked per engine eviction: evictions are found by a round-robin pass,
/// so the index of a cache under churn stays within a small factor of what the engine holds.
const PRUNE_CHECKS_PER_EVICTION: u64 = 4;
/// Upper bound of one prune pass (it runs under the engine lock, inside a write).
const PRUNE_CHECKS_MAX: u64 = 4096;

impl EngineStore {
    /// A store over a fresh engine built from `cfg` (the node's id should be `cfg.origin`).
    ///
    /// # Errors
    /// The engine's (bad config, memory refused).
    pub fn new(cfg: EngineConfig) -> Result<EngineStore, ringlet_engine::Error> {
        let engine = Engine::new(cfg.clone())?;
        Ok(EngineStore::with_engine(Arc::new(Mutex::new(engine)), cfg))
    }

    /// A store over an existing (empty) engine; `cfg` is what [`ReplicaStore::clear`] uses
    /// to rebuild it.
    pub fn with_engine(engine: Arc<Mutex<Engine>>, cfg: EngineConfig) -> EngineStore {
        {
            let mut e = engine.lock();
            // Replicated data is a store, not a cache: the engine refuses writes when full
            // rather than silently dropping acknowledged data (DESIGN.md "pinned").
            e.define_memgest(MemgestId::NONE, false);
        }
        EngineStore {
            engine,
            cfg,
            meta: BTreeMap::new(),
            digests: SlotDigests::default(),
            tombstone_order: Default::default(),
            tombstones: 0,
            stats: Arc::new(StoreStats::default()),
            evictable: Default::default(),
            seen_evictions: 0,
            prune_cursor: None,
            by_expiry: Default::default(),
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

    fn digest_toggle(&mut self, slot: Slot, key: &[u8], m: &Meta, add: bool) {
        self.digests.toggle(slot, key, &meta_entry(m), add);
    }

    fn set_meta(&mut self, slot: Slot, key: &[u8], m: Option<Meta>) {
        let k = (slot, SmallKey::new(key));
        if let Some(old) = self.meta.remove(&k) {
            if let Some(x) = old.expiry_ms {
                self.by_expiry.remove(&(x, slot, key.to_vec()));
            }
            self.digest_toggle(slot, key, &old, false);
            if old.tombstone {
                self.tombstones = self.tombstones.saturating_sub(1);
            }
        }
        if let Some(m) = m {
            if let (Some(x), false) = (m.expiry_ms, m.tombstone) {
                self.by_expiry.insert((x, slot, key.to_vec()));
            }
            self.digest_toggle(slot, key, &m, true);
            if m.tombstone {
                self.tombstones += 1;
                self.tombstone_order.push_back((key.to_vec(), m.version));
            }
            self.meta.insert(k, m);
        }
        self.fold_tombstones();
    }

    /// Bound the tombstones kept in the metadata index, oldest first. The engine keeps its
    /// own bounded cache plus a summary version, which is what refuses late writes; this
    /// index only loses the ability to *list* very old tombstones in repair.
    fn fold_tombstones(&mut self) {
        let max = limits::TOMBSTONES_MAX as usize;
        while self.tombstones > max || self.tombstone_order.len() > 2 * max {
            let Some((k, v)) = self.tombstone_order.pop_front() else {
                break;
            };
            let slot = key_slot(&k);
            let kk = (slot, SmallKey::new(&k));
            if let Some(m) = self.meta.get(&kk).copied() {
                if m.tombstone && m.version == v {
                    self.meta.remove(&kk);
                    self.digest_toggle(slot, &k, &m, false);
                    self.tombstones = self.tombstones.saturating_sub(1);
                    self.stats.tombstones_folded.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    fn ensure_memgest(&self, engine: &mut Engine, m: MemgestId) {
        // Redefining is idempotent; every replicated memgest is pinned (see with_engine), a
        // single-copy cache memgest is evictable.
        engine.define_memgest(m, self.evictable.contains(&m));
    }

    /// Drop the metadata of entries the engine evicted since the last pass: up to
    /// [`PRUNE_CHECKS_PER_EVICTION`] index entries per new eviction, round robin. Reads never
    /// depend on it (`get` asks the engine); it bounds the index of a cache under churn.
    fn prune_evicted(&mut self) {
        if self.evictable.is_empty() {
            return;
        }
        let engine = self.engine.clone();
        let engine = engine.lock();
        let evictions = engine.evictions();
        let new = evictions.saturating_sub(self.seen_evictions);
        if new == 0 {
            return;
        }
        self.seen_evictions = evictions;
        let budget = new
            .saturating_mul(PRUNE_CHECKS_PER_EVICTION)
            .min(PRUNE_CHECKS_MAX)
            .min(self.meta.len() as u64);
        let mut gone = Vec::new();
        let mut last = None;
        {
            let start = self.prune_cursor.take();
            let after = start.as_ref().map(|k| {
                (
                    std::ops::Bound::Excluded(k.clone()),
                    std::ops::Bound::Unbounded,
                )
            });
            let first = after.map_or_else(
                || self.meta.range(..),
                |r| self.meta.range::<(Slot, SmallKey), _>(r),
            );
            // Wrap around once: the pass continues from the start of the index.
            for (k, m) in first.chain(self.meta.range(..)).take(budget as usize) {
                last = Some(k.clone());
                if m.tombstone || !self.evictable.contains(&m.memgest) {
                    continue;
                }
                let held = engine.get(&k.1, 0).map(|e| e.version);
                if held != Some(m.version) {
                    gone.push((k.clone(), *m));
                }
            }
        }
        drop(engine);
        self.prune_cursor = last;
        for ((slot, key), m) in gone {
            if self.meta.remove(&(slot, key.clone())).is_some() {
                if let Some(x) = m.expiry_ms {
                    self.by_expiry.remove(&(x, slot, key.to_vec()));
                }
                self.digest_toggle(slot, &key, &m, false);
                self.stats.evicted_pruned.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Full recomputation of the digests and a cross-check with the engine (tests).
    ///
    /// # Errors
    /// The first inconsistency found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut want = SlotDigests::default();
        let mut present = 0u64;
        let engine = self.engine.lock();
        for ((slot, key), m) in &self.meta {
            if *slot != key_slot(key) {
                return Err("entry filed under the wrong slot".into());
            }
            want.toggle(*slot, key, &meta_entry(m), true);
            let e = engine.get(key, 0);
            match (m.tombstone, e) {
                (true, None) => {}
                (false, Some(e)) if e.version == m.version && e.memgest == m.memgest => {
                    present += 1
                }
                // Evicted from a cache memgest; its metadata waits for the prune pass.
                (false, None) if self.evictable.contains(&m.memgest) => {}
                (t, e) => {
                    return Err(format!(
                        "key {:?}: metadata (tombstone={t}, {}) disagrees with engine {:?}",
                        String::from_utf8_lossy(key),
                        m.version,
                        e.map(|e| e.version)
                    ))
                }
            }
        }
        if want != self.digests {
            return Err("incremental digests drifted".into());
        }
        if engine.len() != present {
            return Err(format!(
                "engine holds {} keys, metadata {present}",
                engine.len()
            ));
        }
        Ok(())
    }
}

fn meta_entry(m: &Meta) -> Entry {
    // The digest covers (key, version, memgest, tombstone): the value is implied by the
    // version (one version, one value), so it need not be read to digest.
    Entry {
        version: m.version,
        memgest: m.memgest,
        value: if m.tombstone { None } else { Some(Vec::new()) },
        expiry_ms: None, // implied by the version too; `entry_digest` does not read it
        kind: m.kind,
    }
}

impl ReplicaStore for EngineStore {
    fn head(&self, key: &[u8]) -> Option<(Version, MemgestId, bool)> {
        let m = self.meta.get(&(key_slot(key), SmallKey::new(key)))?;
        Some((m.version, m.memgest, !m.tombstone))
    }

    fn get(&self, key: &[u8]) -> Option<Entry> {
        let m = *self.meta.get(&(key_slot(key), SmallKey::new(key)))?;
        if m.tombstone {
            return Some(Entry {
                version: m.version,
                memgest: m.memgest,
                value: None,
                expiry_ms: None,
                kind: ValueKind::String,
            });
        }
        let e = self.engine.lock().get(key, 0)?;
        Some(Entry {
            version: e.version,
            memgest: e.memgest,
            value: Some(e.value),
            expiry_ms: m.expiry_ms,
            kind: e.kind,
        })
    }

    fn apply(&mut self, key: &[u8], entry: Entry) -> ApplyOutcome {
        self.touch(key);
        let slot = key_slot(key);
        let held = self
            .meta
            .get(&(slot, SmallKey::new(key)))
            .map(|m| m.version);
        if let Some(v) = held {
            if v >= entry.version {
                return ApplyOutcome::Superseded { current: v };
            }
        }
        let mut engine = self.engine.lock();
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
                let m = Meta {
                    version: entry.version,
                    memgest: entry.memgest,
                    tombstone: entry.value.is_none(),
                    expiry_ms: entry.value.as_ref().and(entry.expiry_ms),
                    kind: entry.kind,
                };
                self.set_meta(slot, key, Some(m));
                self.prune_evicted();
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
            Ok(_) => {
                drop(engine);
                self.prune_evicted();
                true
            }
            Err(_) => {
                self.stats.apply_errors.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    fn expired(&self, wall_ms: u64, limit: usize) -> Vec<(Vec<u8>, Version)> {
        self.by_expiry
            .range(..=(wall_ms, Slot::MAX, Vec::new()))
            .take_while(|(x, _, _)| *x <= wall_ms)
            .filter_map(|(_, slot, key)| {
                let m = self.meta.get(&(*slot, SmallKey::new(key)))?;
                (!m.tombstone).then(|| (key.clone(), m.version))
            })
            .take(limit)
            .collect()
    }

    fn set_evictable(&mut self, memgests: &[MemgestId]) {
        let next: std::collections::BTreeSet<MemgestId> = memgests.iter().copied().collect();
        if next == self.evictable {
            return;
        }
        let pinned_now: Vec<MemgestId> = self.evictable.difference(&next).copied().collect();
        let mut engine = self.engine.lock();
        for m in &pinned_now {
            engine.define_memgest(*m, false);
        }
        for m in &next {
            engine.define_memgest(*m, true);
        }
        // A memgest that stops being a cache (rare: its flag is fixed at creation) must not
        // keep metadata of entries evicted meanwhile: one full pass over its entries.
        let gone: Vec<((Slot, SmallKey), Meta)> = if pinned_now.is_empty() {
            Vec::new()
        } else {
            self.meta
                .iter()
                .filter(|(k, m)| {
                    !m.tombstone
                        && pinned_now.contains(&m.memgest)
                        && engine.get(&k.1, 0).map(|e| e.version) != Some(m.version)
                })
                .map(|(k, m)| (k.clone(), *m))
                .collect()
        };
        drop(engine);
        for ((slot, key), m) in gone {
            if self.meta.remove(&(slot, key.clone())).is_some() {
                if let Some(x) = m.expiry_ms {
                    self.by_expiry.remove(&(x, slot, key.to_vec()));
                }
                self.digest_toggle(slot, &key, &m, false);
                self.stats.evicted_pruned.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.evictable = next;
    }

    fn unreserve(&mut self, key: &[u8], version: Version) {
        self.engine.lock().unstage(key, version);
    }

    fn retire(&mut self, key: &[u8], version: Version) -> bool {
        let slot = key_slot(key);
        let Some(m) = self.meta.get(&(slot, SmallKey::new(key))).copied() else {
            return false;
        };
        if m.version > version {
            return false;
        }
        if !m.tombstone {
            // The engine has no "drop without tombstone"; a tombstone one sequence step above
            // the retired version blocks only the retired write's own replays: any later write
            // of the key has a strictly greater (ms, logical) pair, so it still applies.
            let t = Version(m.version.0.saturating_add(1));
            let _ = self.engine.lock().delete(key, Some(t), 0);
        }
        self.set_meta(slot, key, None);
        true
    }

    fn scan_slot_heads(
        &self,
        slot: Slot,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(Vec<u8>, Version, MemgestId)> {
        use std::ops::Bound;
        let lo = match after {
            Some(a) => Bound::Excluded((slot, SmallKey::new(a))),
            None => Bound::Included((slot, SmallKey::new(&[]))),
        };
        // From the metadata alone: no engine lookup, no value copy (repair's key lists
        // compared every value-carrying entry of a slot, ~70% of a loaded driver's time).
        self.meta
            .range((lo, Bound::Unbounded))
            .take_while(|((s, _), _)| *s == slot)
            .take(limit)
            .map(|((_, k), m)| (k.to_vec(), m.version, m.memgest))
            .collect()
    }

    fn forget(&mut self, key: &[u8]) {
        let slot = key_slot(key);
        if self.meta.contains_key(&(slot, SmallKey::new(key))) {
            self.engine.lock().forget(key);
            self.set_meta(slot, key, None);
        }
    }

    fn forget_floor(&mut self, slot: Slot) {
        self.engine.lock().forget_slot_floor(slot);
    }

    fn scan_slot(&self, slot: Slot, after: Option<&[u8]>, limit: usize) -> Vec<(Vec<u8>, Entry)> {
        use std::ops::Bound;
        let lo = match after {
            Some(a) => Bound::Excluded((slot, SmallKey::new(a))),
            None => Bound::Included((slot, SmallKey::new(&[]))),
        };
        let engine = self.engine.lock();
        let mut out = Vec::new();
        for ((s, k), m) in self.meta.range((lo, Bound::Unbounded)) {
            if *s != slot || out.len() >= limit {
                break;
            }
            let value = if m.tombstone {
                None
            } else {
                match engine.get(k, 0) {
                    Some(e) if e.version == m.version => Some(e.value),
                    // Metadata and engine agree by construction (check_invariants); skip
                    // rather than ship a value under the wrong version if they ever do not.
                    _ => continue,
                }
            };
            out.push((
                k.to_vec(),
                Entry {
                    version: m.version,
                    memgest: m.memgest,
                    value,
                    expiry_ms: m.expiry_ms,
                    kind: m.kind,
                },
            ));
        }
        out
    }

    fn nonempty_slots(&self, first: Slot, last: Slot) -> Vec<Slot> {
        self.digests.nonempty_slots(first, last)
    }

    fn slot_digest(&self, slot: Slot, filter: &dyn Fn(MemgestId) -> bool) -> u64 {
        self.digests.slot_digest(slot, filter)
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
                for m in &self.evictable {
                    e.define_memgest(*m, true);
                }
                self.seen_evictions = 0;
            }
            Err(_) => {
                // Could not reserve a new region: fall back to erasing in place. Later syncs
                // of older versions are then refused (reported by check_invariants users).
                self.engine.lock().flush_all(0);
            }
        }
        self.meta.clear();
        self.by_expiry.clear();
        self.prune_cursor = None;
        self.digests.clear();
        self.tombstone_order.clear();
        self.tombstones = 0;
    }

    fn len(&self) -> usize {
        self.meta.len()
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

    /// The inline key orders exactly like its bytes across the inline/heap boundary (scan
    /// pages resume from a key, so the index order is part of the protocol), and costs no
    /// more than the `Vec<u8>` it replaced.
    #[test]
    fn small_keys_order_by_bytes_across_inline_and_heap() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            b"a".to_vec(),
            vec![b'a'; INLINE_KEY_BYTES],
            vec![b'a'; INLINE_KEY_BYTES + 1],
            b"ab".to_vec(),
            vec![b'b'; 40],
            vec![0xff; 3],
        ];
        for x in &keys {
            assert_eq!(SmallKey::new(x).as_bytes(), &x[..]);
            for y in &keys {
                assert_eq!(
                    SmallKey::new(x).cmp(&SmallKey::new(y)),
                    x.cmp(y),
                    "{x:?} {y:?}"
                );
            }
        }
        assert!(matches!(
            SmallKey::new(&[7; INLINE_KEY_BYTES]),
            SmallKey::Inline { .. }
        ));
        assert!(matches!(
            SmallKey::new(&[7; INLINE_KEY_BYTES + 1]),
            SmallKey::Heap(_)
        ));
        assert_eq!(
            std::mem::size_of::<SmallKey>(),
            std::mem::size_of::<Vec<u8>>()
        );
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
        assert!(s.stats().evicted_pruned.load(Ordering::Relaxed) > 0);
        // Never wrong: a key reads its own value or nothing.
        for i in 0..1024u128 {
            if let Some(g) = s.get(format!("k{i}").as_bytes()) {
                assert_eq!(g.version, Version((i + 1) << 64));
            }
        }
        assert!(
            s.meta.len() < 2 * held + 64,
            "index {} entries for {held} held",
            s.meta.len()
        );
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
