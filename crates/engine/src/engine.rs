//! The writer: version rules, tombstones, TTL, conditions, staged writes and the Redis string
//! helpers, on top of the [`Store`] (index + data regions).
//!
//! How a mutation decides whether it applies (CliqueMap §5.2):
//! the *floor* of a key is the highest of its stored version (published, even if expired),
//! its tombstone, and the tombstone summary when the key has no tombstone of its own. A write
//! with a caller-chosen version applies only above the floor; a write without one takes the
//! next version of the HLC, which has observed every version stored, erased or summarised
//! here, so it is always above the floor.

use crate::api::{
    Condition, EngineConfig, EngineStats, Entry, Error, Expiry, ReadOutcome, SetOptions,
    SetOutcome, TickReport,
};
use crate::hash::key_hash;
use crate::store::{ExportInfo, Meta, Reader, Store};
use crate::strings;
use ringlet_types::limits::{KEY_BYTES_MAX, TOMBSTONES_MAX, VALUE_BYTES_MAX};
use ringlet_types::{Hlc, MemgestId, ValueKind, Version};
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A written but unpublished version of a key.
struct Staged {
    version: Version,
    handle: crate::store::StagedHandle,
}

/// The node-local storage engine. Single writer: every `&mut self` method is a mutation; the
/// server serialises them (a mutex). Lock-free reads go through [`Reader`]s.
pub struct Engine {
    store: Store,
    hlc: Hlc,
    memgests: BTreeMap<MemgestId, bool>,
    /// Erased keys → version of the erase. Bounded by `TOMBSTONES_MAX`; the oldest fold into
    /// `tombstone_summary`.
    tombstones: HashMap<Vec<u8>, Version>,
    /// Insertion order of `tombstones`, for folding the oldest. May hold stale pairs (a key
    /// re-erased or re-set): they are skipped when popped.
    tombstone_order: VecDeque<(Vec<u8>, Version)>,
    /// Highest version evicted or flushed: a mutation of a key with no tombstone must be above
    /// it (evictions report no key, so this one is global).
    tombstone_summary: Version,
    /// Per slot: the highest version folded out of the tombstone cache for a key of the slot.
    /// Per slot rather than global so that a node that gives a slot range away and later gets
    /// it back can forget the slots' floors ([`Engine::forget_slot_floor`]): a global summary
    /// raised by deletes elsewhere would refuse the older versions it must pull back
    /// (docs/design/cluster-resharding.md). 16,384 versions: 256 KiB per engine.
    slot_summary: Vec<Version>,
    staged: HashMap<Vec<u8>, Staged>,
    hits: Cell<u64>,
    misses: Cell<u64>,
    expirations: u64,
}

fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.len() > KEY_BYTES_MAX as usize {
        return Err(Error::KeyTooLarge {
            size_bytes: key.len() as u64,
        });
    }
    Ok(())
}

fn check_value(len: usize) -> Result<(), Error> {
    if len > VALUE_BYTES_MAX as usize {
        return Err(Error::ValueTooLarge {
            size_bytes: len as u64,
        });
    }
    Ok(())
}

fn expired(meta: &Meta, now_ms: u64) -> bool {
    matches!(meta.expire_at_ms, Some(t) if t <= now_ms)
}

impl Engine {
    /// Create an engine: reserve the regions and define memgest 0 (`none`, evictable).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration, [`Error::Os`] if the OS refuses the
    /// memory reservation.
    pub fn new(cfg: EngineConfig) -> Result<Engine, Error> {
        cfg.validate().map_err(|_| Error::Config)?;
        let store = Store::new(&cfg)?;
        let mut memgests = BTreeMap::new();
        memgests.insert(MemgestId::NONE, true);
        Ok(Engine {
            store,
            hlc: Hlc::new(cfg.origin),
            memgests,
            tombstones: HashMap::new(),
            tombstone_order: VecDeque::new(),
            tombstone_summary: Version::ZERO,
            slot_summary: vec![Version::ZERO; usize::from(ringlet_types::SLOT_COUNT)],
            staged: HashMap::new(),
            hits: Cell::new(0),
            misses: Cell::new(0),
            expirations: 0,
        })
    }

    /// The `index_buckets_initial` that holds `keys` keys without an upsize (at the 0.85
    /// load factor): provision the index for the expected corpus, as CliqueMap does.
    pub fn index_buckets_for(keys: u64) -> u32 {
        crate::store::buckets_for(keys)
    }

    /// Grow the index now, if needed, so that it holds `keys` keys without another upsize
    /// (never shrinks it; capped at the engine's largest table). For a bulk load that knows
    /// its size: location hints name index entries of the table they were taken in, and an
    /// upsize in the middle of a load stales every hint taken before it (`ringlet load`,
    /// docs/design/loader.md). The migration runs to its end here (readers keep the old table
    /// until the switch); on a nearly empty index it is nothing. Returns the keys the index
    /// now holds at the load limit.
    pub fn reserve_index(&mut self, keys: u64) -> u64 {
        self.store.reserve_index(keys)
    }

    /// Keys the current index holds before it grows (at the 0.85 load factor).
    pub fn index_capacity(&self) -> u64 {
        self.store.index_capacity()
    }

    /// A lock-free reader over this engine's regions, for any thread.
    pub fn reader(&self) -> Reader {
        self.store.reader()
    }

    /// The memfds and lengths of the regions, for the shared-memory client (map them
    /// read-only and build a [`crate::read::RegionsView`]). The fds stay owned by the engine.
    pub fn export(&self) -> ExportInfo {
        self.store.export()
    }

    /// The pages the index and data regions got (huge pages are best effort: see
    /// [`crate::HugePages`]).
    pub fn page_backing(&self) -> (crate::PageBacking, crate::PageBacking) {
        self.store.page_backing()
    }

    /// Set the config id in the index header: one-sided readers that pinned another id get
    /// `Retry` (the node's role or the cluster epoch changed under them).
    pub fn set_config_id(&mut self, id: u64) {
        self.store.set_config_id(id);
    }

    /// Declare memgest `id` and whether its keys may be evicted. Redefining changes the flag.
    pub fn define_memgest(&mut self, id: MemgestId, evictable: bool) {
        self.memgests.insert(id, evictable);
    }

    /// Issue the next HLC version (for a coordinator that needs the version before writing).
    pub fn next_version(&mut self, now_ms: u64) -> Version {
        self.hlc.next(now_ms)
    }

    /// Pull the HLC past a version seen elsewhere.
    pub fn observe_version(&mut self, v: Version) {
        self.hlc.observe(v);
    }

    /// The tombstone version of `key`, if it has one in the cache.
    pub fn tombstone(&self, key: &[u8]) -> Option<Version> {
        self.tombstones.get(key).copied()
    }

    /// The highest version folded out of the tombstone cache, evicted or flushed, over all
    /// slots.
    pub fn tombstone_summary(&self) -> Version {
        self.slot_summary
            .iter()
            .copied()
            .fold(self.tombstone_summary, Version::max)
    }

    /// The version a mutation of `key` must exceed beyond its stored entry: its tombstone,
    /// else its slot's folded-tombstone summary and the eviction/flush summary.
    pub fn floor_of(&self, key: &[u8]) -> Version {
        self.floor(key, None)
    }

    /// Drop `key`'s entry and tombstone, leaving no trace (a slot range given away: its data
    /// and its deletes belong to the new owner now). Unlike [`Engine::delete`] nothing will
    /// refuse an older version of the key afterwards, which is the point: this node may get
    /// the range back and must then take whatever its sources hold.
    pub fn forget(&mut self, key: &[u8]) {
        let h = key_hash(key);
        self.store.remove(key, h);
        if let Some(s) = self.staged.remove(key) {
            self.store.discard(s.handle);
        }
        // Its entry in `tombstone_order` goes stale and is skipped when popped.
        self.tombstones.remove(key);
    }

    /// Forget the folded-tombstone summary of `slot` (after every key of it was forgotten).
    pub fn forget_slot_floor(&mut self, slot: u16) {
        if let Some(v) = self.slot_summary.get_mut(usize::from(slot)) {
            *v = Version::ZERO;
        }
    }

    /// The published, unexpired entry of `key`.
    pub fn get(&self, key: &[u8], now_ms: u64) -> Option<Entry> {
        if key.len() > KEY_BYTES_MAX as usize {
            return None;
        }
        let h = key_hash(key);
        match self.store.get_entry(key, h) {
            Some(e) if !matches!(e.expire_at_ms, Some(t) if t <= now_ms) => {
                self.hits.set(self.hits.get() + 1);
                Some(e)
            }
            _ => {
                self.misses.set(self.misses.get() + 1);
                None
            }
        }
    }

    /// The version of `key` that a caller-chosen version must exceed.
    fn floor(&self, key: &[u8], stored: Option<&Meta>) -> Version {
        let tomb = self.tombstones.get(key).copied().unwrap_or_else(|| {
            let slot = usize::from(ringlet_types::key_slot(key));
            self.slot_summary
                .get(slot)
                .copied()
                .unwrap_or(Version::ZERO)
                .max(self.tombstone_summary)
        });
        stored.map_or(tomb, |m| m.version.max(tomb))
    }

    fn add_tombstone(&mut self, key: &[u8], v: Version) {
        self.hlc.observe(v);
        let cur = self.tombstones.entry(key.to_vec()).or_insert(Version::ZERO);
        if *cur >= v {
            return;
        }
        *cur = v;
        self.tombstone_order.push_back((key.to_vec(), v));
        // Fold the oldest while over the bound. Each pop is O(1) and the loop runs at most
        // once per stale pair pushed, so it is bounded by the pushes.
        while self.tombstones.len() > TOMBSTONES_MAX as usize
            || self.tombstone_order.len() > 2 * TOMBSTONES_MAX as usize
        {
            let Some((k, tv)) = self.tombstone_order.pop_front() else {
                break;
            };
            if self.tombstones.get(&k) == Some(&tv) {
                self.tombstones.remove(&k);
                let slot = usize::from(ringlet_types::key_slot(&k));
                if let Some(s) = self.slot_summary.get_mut(slot) {
                    *s = (*s).max(tv);
                }
            }
        }
    }

    /// Remove an expired entry found by a mutation or by active expiry; its version becomes a
    /// tombstone, so a delayed write older than the expired value cannot bring it back.
    fn reap(&mut self, key: &[u8], h: u64) {
        if let Some(m) = self.store.remove(key, h) {
            self.expirations += 1;
            self.add_tombstone(key, m.version);
        }
    }

    /// Live (published, unexpired) metadata; reaps an expired entry on the way.
    fn live_meta(&mut self, key: &[u8], h: u64, now_ms: u64) -> (Option<Meta>, Option<Meta>) {
        match self.store.get_meta(key, h) {
            Some(m) if expired(&m, now_ms) => {
                self.reap(key, h);
                (None, Some(m))
            }
            Some(m) => (Some(m), Some(m)),
            None => (None, None),
        }
    }

    /// Write `value` under `key` if the condition holds and the version is high enough.
    ///
    /// # Errors
    /// Size limits, [`Error::UnknownMemgest`], [`Error::NoSpace`] when the data region is full
    /// of data that may not be evicted.
    pub fn set(
        &mut self,
        key: &[u8],
        value: &[u8],
        opts: &SetOptions,
        now_ms: u64,
    ) -> Result<SetOutcome, Error> {
        self.set_impl(key, value, opts, now_ms, true)
    }

    /// [`Engine::set`] for a caller that does not use the replaced value (a plain Redis SET):
    /// an applied write reports `old: None` instead of copying the old value out of the data
    /// region and allocating for it, which was a third of a SET's work on an overwrite.
    /// `NotApplied { current }` is still filled in (it is rare and callers report it).
    ///
    /// # Errors
    /// As [`Engine::set`].
    pub fn set_discarding_old(
        &mut self,
        key: &[u8],
        value: &[u8],
        opts: &SetOptions,
        now_ms: u64,
    ) -> Result<SetOutcome, Error> {
        self.set_impl(key, value, opts, now_ms, false)
    }

    /// A plain Redis `SET key value` (no options: default memgest, no TTL, unconditional, an
    /// HLC version) with `h = key_hash(key)` computed by the caller: exactly
    /// [`Engine::set_discarding_old`] with [`SetOptions::default`], minus the work that form
    /// does not need. The key is hashed once (the batched request path hashed it already, to
    /// prefetch its bucket) and looked up once (the general path looks it up for the
    /// condition, then again to publish). An expired entry found on the way takes the general
    /// path, which reaps it (counted as an expiration, tombstoned) before writing.
    ///
    /// # Errors
    /// As [`Engine::set`].
    pub fn set_plain_hashed(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[u8],
        now_ms: u64,
    ) -> Result<(), Error> {
        self.set_plain_slotted(key, h, ringlet_types::key_slot(key), value, now_ms)
    }

    /// [`Engine::set_plain_hashed`] with the key's cluster slot (`key_slot(key)`, a CRC16 of
    /// the key or its hash tag) computed by the caller too: the batched request path computes
    /// it once per SET to prefetch the slot's accounting line ([`Engine::prefetch_slot`]).
    ///
    /// # Errors
    /// As [`Engine::set`].
    pub fn set_plain_slotted(
        &mut self,
        key: &[u8],
        h: u64,
        slot: u16,
        value: &[u8],
        now_ms: u64,
    ) -> Result<(), Error> {
        check_key(key)?;
        check_value(value.len())?;
        debug_assert_eq!(h, key_hash(key));
        debug_assert_eq!(slot, ringlet_types::key_slot(key));
        let opts = SetOptions::default();
        if !self.memgests.contains_key(&opts.memgest) {
            return Err(Error::UnknownMemgest);
        }
        let lookup = self.store.look_up_for_put(key, h, slot, now_ms);
        if lookup.expired {
            return self.set_impl(key, value, &opts, now_ms, false).map(|_| ());
        }
        let version = self.hlc.next(now_ms);
        self.discard_staged_below(key, version);
        let meta = Meta {
            version,
            memgest: opts.memgest,
            expire_at_ms: None,
            kind: opts.kind,
        };
        let Engine {
            store, memgests, ..
        } = self;
        let evicted = store.put_looked_up(lookup, key, value, meta, &|m| {
            memgests.get(&m).copied().unwrap_or(false)
        })?;
        for v in evicted {
            // As in `Engine::put`.
            self.tombstone_summary = self.tombstone_summary.max(v);
        }
        Ok(())
    }

    /// Start loading the accounting line of cluster slot `slot` (a hint, no effect on any
    /// result): what a SET of a key in that slot updates last. See `Store::prefetch_slot`.
    #[inline]
    pub fn prefetch_slot(&self, slot: u16) {
        self.store.prefetch_slot(slot)
    }

    /// The memgest of `key`'s live (published, unexpired) entry, without copying its value.
    pub fn live_memgest(&self, key: &[u8], now_ms: u64) -> Option<MemgestId> {
        if key.len() > KEY_BYTES_MAX as usize {
            return None;
        }
        match self.store.get_meta(key, key_hash(key)) {
            Some(m) if !expired(&m, now_ms) => Some(m.memgest),
            _ => None,
        }
    }

    fn set_impl(
        &mut self,
        key: &[u8],
        value: &[u8],
        opts: &SetOptions,
        now_ms: u64,
        keep_old: bool,
    ) -> Result<SetOutcome, Error> {
        check_key(key)?;
        check_value(value.len())?;
        if !self.memgests.contains_key(&opts.memgest) {
            return Err(Error::UnknownMemgest);
        }
        let h = key_hash(key);
        let (live, stored) = self.live_meta(key, h, now_ms);
        let current = || -> Option<Entry> {
            live.as_ref()?;
            self.store.get_entry(key, h)
        };
        let cond_ok = match opts.condition {
            Condition::Always => true,
            Condition::IfAbsent => live.is_none(),
            Condition::IfPresent => live.is_some(),
            Condition::IfVersion(v) => live.map(|m| m.version) == Some(v),
        };
        if !cond_ok {
            return Ok(SetOutcome::NotApplied { current: current() });
        }
        let version = match opts.version {
            Some(v) => {
                let mut floor = self.floor(key, stored.as_ref());
                if opts.staged {
                    if let Some(s) = self.staged.get(key) {
                        floor = floor.max(s.version);
                    }
                }
                if v <= floor {
                    return Ok(SetOutcome::NotApplied { current: current() });
                }
                self.hlc.observe(v);
                v
            }
            None => self.hlc.next(now_ms),
        };
        let expire_at_ms = match opts.expiry {
            Expiry::Keep => live.and_then(|m| m.expire_at_ms),
            Expiry::Persist => None,
            Expiry::At(t) => Some(t),
        };
        let old = if keep_old { current() } else { None };
        if matches!(expire_at_ms, Some(t) if t <= now_ms) && !opts.staged {
            // Already expired: the write is an erase at `version` (Redis SET PXAT <past>).
            self.discard_staged_below(key, version);
            if self.store.remove(key, h).is_some() {
                self.expirations += 1;
            }
            self.add_tombstone(key, version);
            return Ok(SetOutcome::Applied { version, old });
        }
        let meta = Meta {
            version,
            memgest: opts.memgest,
            expire_at_ms,
            kind: opts.kind,
        };
        if opts.staged {
            let Engine {
                store, memgests, ..
            } = self;
            let (handle, evicted) = store.stage(key, h, value, meta, &|m| {
                memgests.get(&m).copied().unwrap_or(false)
            })?;
            for v in evicted {
                self.tombstone_summary = self.tombstone_summary.max(v);
            }
            if let Some(prev) = self.staged.insert(key.to_vec(), Staged { version, handle }) {
                self.store.discard(prev.handle);
            }
        } else {
            self.discard_staged_below(key, version);
            self.put(key, h, value, meta)?;
        }
        Ok(SetOutcome::Applied { version, old })
    }

    fn put(&mut self, key: &[u8], h: u64, value: &[u8], meta: Meta) -> Result<(), Error> {
        let Engine {
            store, memgests, ..
        } = self;
        let evicted = store.put(key, h, value, meta, &|m| {
            memgests.get(&m).copied().unwrap_or(false)
        })?;
        for v in evicted {
            // An evicted key has no tombstone; folding its version into the summary keeps a
            // delayed older write from resurrecting it (CliqueMap: coarse, never inconsistent).
            self.tombstone_summary = self.tombstone_summary.max(v);
        }
        Ok(())
    }

    fn discard_staged_below(&mut self, key: &[u8], v: Version) {
        if let Some(s) = self.staged.get(key) {
            if s.version <= v {
                if let Some(s) = self.staged.remove(key) {
                    self.store.discard(s.handle);
                }
            }
        }
    }

    /// Drop the staged `version` of `key` (its write was refused or abandoned) and give its
    /// room back. Returns false if no such staged version exists.
    pub fn unstage(&mut self, key: &[u8], version: Version) -> bool {
        match self.staged.get(key) {
            Some(s) if s.version == version => {}
            _ => return false,
        }
        match self.staged.remove(key) {
            Some(s) => {
                self.store.discard(s.handle);
                true
            }
            None => false,
        }
    }

    /// Make the staged `version` of `key` visible with one atomic switch of its index entry.
    /// Returns false if no such staged version exists, or if a higher version was published
    /// or erased meanwhile (the staged one is then dropped).
    ///
    /// # Errors
    /// [`Error::NoSpace`] if the index has no room for a new key and nothing is evictable.
    pub fn publish(&mut self, key: &[u8], version: Version, now_ms: u64) -> Result<bool, Error> {
        check_key(key)?;
        let h = key_hash(key);
        match self.staged.get(key) {
            Some(s) if s.version == version => {}
            _ => return Ok(false),
        }
        let (_, stored) = self.live_meta(key, h, now_ms);
        if version <= self.floor(key, stored.as_ref()) {
            if let Some(s) = self.staged.remove(key) {
                self.store.discard(s.handle);
            }
            return Ok(false);
        }
        let Some(s) = self.staged.remove(key) else {
            return Ok(false);
        };
        let Engine {
            store, memgests, ..
        } = self;
        let evicted = store.publish(key, h, s.handle, &|m| {
            memgests.get(&m).copied().unwrap_or(false)
        })?;
        for v in evicted {
            self.tombstone_summary = self.tombstone_summary.max(v);
        }
        Ok(true)
    }

    /// Erase `key`, leaving a tombstone at `version` (or the next HLC version).
    /// Returns the live entry it erased.
    ///
    /// # Errors
    /// [`Error::StaleVersion`] if `version` is not above the stored version or tombstone.
    pub fn delete(
        &mut self,
        key: &[u8],
        version: Option<Version>,
        now_ms: u64,
    ) -> Result<Option<Entry>, Error> {
        check_key(key)?;
        let h = key_hash(key);
        let (live, stored) = self.live_meta(key, h, now_ms);
        let v = match version {
            Some(v) => {
                if v <= self.floor(key, stored.as_ref()) {
                    return Err(Error::StaleVersion);
                }
                v
            }
            None => self.hlc.next(now_ms),
        };
        let old = if live.is_some() {
            self.store.get_entry(key, h)
        } else {
            None
        };
        self.store.remove(key, h);
        self.discard_staged_below(key, v);
        self.add_tombstone(key, v);
        Ok(old)
    }

    /// Change the TTL of a live key (a mutation: it takes a new version). Returns false if the
    /// key is missing. `Expiry::At` a time at or before `now_ms` erases the key.
    ///
    /// # Errors
    /// [`Error::NoSpace`] if the rewritten entry finds no room.
    pub fn set_expiry(&mut self, key: &[u8], expiry: Expiry, now_ms: u64) -> Result<bool, Error> {
        check_key(key)?;
        let h = key_hash(key);
        let (live, _) = self.live_meta(key, h, now_ms);
        let Some(m) = live else { return Ok(false) };
        let expire_at_ms = match expiry {
            Expiry::Keep => return Ok(true),
            Expiry::Persist => None,
            Expiry::At(t) => Some(t),
        };
        if expire_at_ms == m.expire_at_ms {
            return Ok(true);
        }
        let version = self.hlc.next(now_ms);
        if matches!(expire_at_ms, Some(t) if t <= now_ms) {
            self.store.remove(key, h);
            self.expirations += 1;
            self.add_tombstone(key, version);
            return Ok(true);
        }
        let Some(e) = self.store.get_entry(key, h) else {
            return Ok(false);
        };
        self.put(
            key,
            h,
            &e.value,
            Meta {
                version,
                memgest: m.memgest,
                expire_at_ms,
                kind: m.kind,
            },
        )?;
        Ok(true)
    }

    /// Rewrite a live value (or create one) through `f`, keeping memgest and TTL; returns what
    /// `f` returned.
    fn rewrite<T>(
        &mut self,
        key: &[u8],
        now_ms: u64,
        f: impl FnOnce(Option<&[u8]>) -> Result<(Vec<u8>, T), Error>,
    ) -> Result<T, Error> {
        check_key(key)?;
        let h = key_hash(key);
        let (live, _) = self.live_meta(key, h, now_ms);
        let cur = match live {
            Some(_) => self.store.get_entry(key, h),
            None => None,
        };
        // String operations (INCR, APPEND, SETRANGE, ...) never rewrite a record.
        if cur.as_ref().is_some_and(|e| e.kind == ValueKind::Record) {
            return Err(Error::WrongType);
        }
        let (value, out) = f(cur.as_ref().map(|e| e.value.as_slice()))?;
        check_value(value.len())?;
        let version = self.hlc.next(now_ms);
        let meta = Meta {
            version,
            memgest: cur.as_ref().map_or(MemgestId::NONE, |e| e.memgest),
            expire_at_ms: cur.as_ref().and_then(|e| e.expire_at_ms),
            kind: ValueKind::String,
        };
        self.discard_staged_below(key, version);
        self.put(key, h, &value, meta)?;
        Ok(out)
    }

    /// Redis INCRBY/DECRBY: a missing key counts as 0; TTL and memgest are kept.
    ///
    /// # Errors
    /// [`Error::NotInteger`], [`Error::Overflow`], [`Error::NoSpace`].
    pub fn incr_by(&mut self, key: &[u8], delta: i64, now_ms: u64) -> Result<i64, Error> {
        self.rewrite(key, now_ms, |cur| {
            let n = match cur {
                Some(v) => strings::parse_i64(v).ok_or(Error::NotInteger)?,
                None => 0,
            };
            let n = n.checked_add(delta).ok_or(Error::Overflow)?;
            Ok((n.to_string().into_bytes(), n))
        })
    }

    /// Redis INCRBYFLOAT; returns the new value formatted as Redis replies it.
    ///
    /// # Errors
    /// [`Error::NotFloat`] for a non-numeric value or a NaN/infinite result.
    pub fn incr_by_float(&mut self, key: &[u8], delta: f64, now_ms: u64) -> Result<Vec<u8>, Error> {
        self.rewrite(key, now_ms, |cur| {
            let n = match cur {
                Some(v) => strings::parse_f64(v).ok_or(Error::NotFloat)?,
                None => 0.0,
            };
            let n = n + delta;
            if !n.is_finite() {
                return Err(Error::NotFloat);
            }
            let s = strings::format_f64(n);
            Ok((s.clone(), s))
        })
    }

    /// Redis APPEND; returns the new length.
    ///
    /// # Errors
    /// [`Error::ValueTooLarge`] past the value limit, [`Error::NoSpace`].
    pub fn append(&mut self, key: &[u8], suffix: &[u8], now_ms: u64) -> Result<usize, Error> {
        self.rewrite(key, now_ms, |cur| {
            let cur = cur.unwrap_or(&[]);
            let len = cur.len().saturating_add(suffix.len());
            check_value(len)?;
            let mut v = Vec::with_capacity(len);
            v.extend_from_slice(cur);
            v.extend_from_slice(suffix);
            Ok((v, len))
        })
    }

    /// Redis GETRANGE.
    pub fn get_range(&self, key: &[u8], start: i64, end: i64, now_ms: u64) -> Vec<u8> {
        let Some(e) = self.get(key, now_ms) else {
            return Vec::new();
        };
        match strings::range_bounds(e.value.len(), start, end) {
            Some((s, t)) => e.value.get(s..=t).map(<[u8]>::to_vec).unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// Redis SETRANGE; returns the new length. An empty `bytes` on a missing key creates
    /// nothing and returns 0.
    ///
    /// # Errors
    /// [`Error::ValueTooLarge`] if `offset + bytes.len()` passes the value limit.
    pub fn set_range(
        &mut self,
        key: &[u8],
        offset: usize,
        bytes: &[u8],
        now_ms: u64,
    ) -> Result<usize, Error> {
        let end = offset
            .checked_add(bytes.len())
            .ok_or(Error::ValueTooLarge {
                size_bytes: u64::MAX,
            })?;
        check_value(end)?;
        if bytes.is_empty() {
            return Ok(self.get(key, now_ms).map_or(0, |e| e.value.len()));
        }
        self.rewrite(key, now_ms, |cur| {
            let mut v = cur.unwrap_or(&[]).to_vec();
            if v.len() < end {
                v.resize(end, 0);
            }
            if let Some(dst) = v.get_mut(offset..end) {
                dst.copy_from_slice(bytes);
            }
            let len = v.len();
            Ok((v, len))
        })
    }

    /// Published keys stored (expired ones not yet reaped included).
    pub fn len(&self) -> u64 {
        self.store.len()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Erase every key. The tombstone summary moves to a fresh version above everything
    /// stored, so no delayed write of an older version can resurrect anything.
    pub fn flush_all(&mut self, now_ms: u64) {
        let v = self.hlc.next(now_ms);
        for (_, s) in self.staged.drain() {
            self.store.discard(s.handle);
        }
        self.store.clear();
        self.tombstones.clear();
        self.tombstone_order.clear();
        self.tombstone_summary = self.tombstone_summary.max(v);
    }

    /// Redis SCAN over live keys: a key present for the whole scan is returned at least once
    /// (even across an index upsize); keys may repeat. Returns the next cursor, 0 when done.
    pub fn scan(&self, cursor: u64, count: usize, now_ms: u64, out: &mut Vec<Vec<u8>>) -> u64 {
        self.store.scan(cursor, count, None, Some(now_ms), out)
    }

    /// [`Engine::scan`] that also deletes the expired keys it visits, as Redis's SCAN and KEYS
    /// do: after a full pass, the key count ([`Engine::len`], DBSIZE) no longer includes keys
    /// that were logically expired but not yet reaped by the bounded active expiry.
    pub fn scan_reaping(
        &mut self,
        cursor: u64,
        count: usize,
        now_ms: u64,
        out: &mut Vec<Vec<u8>>,
    ) -> u64 {
        let mut visited = Vec::with_capacity(count);
        let next = self.store.scan(cursor, count, None, None, &mut visited);
        for key in visited {
            match self.store.reap_if_expired(&key, now_ms) {
                Some(v) => {
                    self.expirations += 1;
                    self.add_tombstone(&key, v);
                }
                None => out.push(key),
            }
        }
        next
    }

    /// A random live key, chosen from `seed` (sans-I/O: the caller supplies randomness).
    pub fn random_key(&self, seed: u64, now_ms: u64) -> Option<Vec<u8>> {
        self.store.random_key(seed, now_ms)
    }

    /// Keys of one slot (expired ones included: migration moves them with their TTL), with
    /// SCAN's cursor guarantees (a key present for the whole walk is returned; with the
    /// per-slot index, exactly once).
    ///
    /// Cost: with the per-slot index ([`Engine::enable_slot_index`], cluster nodes) the keys
    /// of the page only; without it the index has no per-slot structure, so enumerating a
    /// slot walks the whole table, reading each key. A slot with no keys returns at once.
    pub fn slot_keys(&self, slot: u16, cursor: u64, count: usize, out: &mut Vec<Vec<u8>>) -> u64 {
        if self.store.slot_key_count(slot) == 0 {
            return 0;
        }
        if self.store.slot_index_enabled() {
            return self.store.slot_index_keys(slot, cursor, count, out);
        }
        self.store.scan(cursor, count, Some(slot), None, out)
    }

    /// Keep a per-slot index from now on (built from what is stored): per-slot scans in
    /// scan order ([`Engine::slot_scan`]) that cost the page, not the table, and per-(slot,
    /// memgest) digests of the published entries ([`Engine::slot_memgest_digest`]). About 12
    /// bytes per key (`store/slot_index.rs`); for a cluster node's replica core, which lists
    /// slots for pulls, repair and resharding. Idempotent.
    pub fn enable_slot_index(&mut self) {
        self.store.enable_slot_index();
    }

    /// Bytes the published entry of `key` occupies (expired or not): its data-region slot as
    /// the memory accounting counts it plus its index entry (MEMORY USAGE).
    pub fn footprint(&self, key: &[u8]) -> Option<u64> {
        if key.len() > KEY_BYTES_MAX as usize {
            return None;
        }
        self.store.footprint(key, key_hash(key))
    }

    /// The published entry of `key` without its value (expired or not: no clock here).
    pub fn head(&self, key: &[u8]) -> Option<crate::EntryHead> {
        if key.len() > KEY_BYTES_MAX as usize {
            return None;
        }
        let m = self.store.get_meta(key, key_hash(key))?;
        Some(crate::EntryHead {
            version: m.version,
            memgest: m.memgest,
            expire_at_ms: m.expire_at_ms,
            kind: m.kind,
        })
    }

    /// Up to `limit` published entries of `slot` (expired ones included), in scan order
    /// ([`crate::hash::scan_order`]), strictly after the key `after` in that order (which
    /// need not exist any more), appended to `out` with their values. Pages resumed from
    /// the last key returned see every key present throughout exactly once, whatever was
    /// written or the index did between pages (`store/slot_index.rs`). Without
    /// [`Engine::enable_slot_index`] each call walks the whole table.
    pub fn slot_scan(
        &self,
        slot: u16,
        after: Option<&[u8]>,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Entry)>,
    ) {
        self.store.slot_scan(slot, after, limit, out);
    }

    /// [`Engine::slot_scan`] without copying values.
    pub fn slot_scan_heads(
        &self,
        slot: u16,
        after: Option<&[u8]>,
        limit: usize,
        out: &mut Vec<(Vec<u8>, crate::EntryHead)>,
    ) {
        self.store.slot_scan_heads(slot, after, limit, out);
    }

    /// XOR of [`crate::hash::entry_digest`] (live) over the published entries of `slot` whose
    /// memgest passes `filter`: O(memgests of the slot). 0 without the per-slot index.
    pub fn slot_memgest_digest(&self, slot: u16, filter: &dyn Fn(MemgestId) -> bool) -> u64 {
        self.store.slot_index_digest(slot, filter)
    }

    /// Slots of `first..=last` holding a published entry, ascending (from the per-slot
    /// index; empty without it).
    pub fn nonempty_slots(&self, first: u16, last: u16) -> Vec<u16> {
        self.store.slot_index_nonempty(first, last)
    }

    /// Bytes stored for `slot` (its entries' slab footprint, as the per-memgest usage counts
    /// them; expired ones until reaped): O(1).
    pub fn slot_bytes(&self, slot: u16) -> u64 {
        self.store.slot_bytes(slot)
    }

    /// Of [`Engine::slot_len`], the keys that carry an expiry: O(1).
    pub fn slot_ttl_len(&self, slot: u16) -> u64 {
        self.store.slot_ttl_count(slot)
    }

    /// Keys stored in `slot` (expired ones until reaped): O(1).
    pub fn slot_len(&self, slot: u16) -> u64 {
        self.store.slot_key_count(slot)
    }

    /// Order-independent digest of `(key hash, version)` over the slot's stored entries
    /// (maintained incrementally: O(1)). Two replicas holding the same versions of the same
    /// keys have equal digests. Expired entries count until reaped, so compare after a tick.
    pub fn slot_digest(&self, slot: u16) -> u64 {
        self.store.slot_digest(slot)
    }

    /// Background work, bounded: active expiry of up to `EXPIRE_WORK_PER_TICK_MAX` entries,
    /// a step of index upsize, compaction of sparse slab pages.
    pub fn tick(&mut self, now_ms: u64) -> TickReport {
        let mut report = TickReport::default();
        let expired_keys = self.store.expire_step(now_ms, &mut report);
        for (key, v) in expired_keys {
            self.expirations += 1;
            report.expired += 1;
            self.add_tombstone(&key, v);
        }
        self.store.maintenance_step(&mut report);
        report
    }

    /// Note accesses reported by readers the writer never saw (one-sided readers, network
    /// workers): feeds the eviction policy. At most `ACCESS_RECORD_BATCH_MAX` are used.
    pub fn record_access(&mut self, key_hashes: &[u64]) {
        let n = key_hashes
            .len()
            .min(ringlet_types::limits::ACCESS_RECORD_BATCH_MAX as usize);
        // Each touch is a bucket miss; a batch from a one-sided walk (distinct keys) paid them
        // one after the other. Requesting the home buckets a few hashes ahead overlaps them
        // (a prefetch is a hint: what is touched does not change).
        const AHEAD: usize = 8;
        let hashes = &key_hashes[..n];
        let view = self.store.reader().view();
        for &h in hashes.iter().take(AHEAD) {
            crate::read::prefetch_bucket(&view, h);
        }
        for (i, &h) in hashes.iter().enumerate() {
            if let Some(&next) = hashes.get(i + AHEAD) {
                crate::read::prefetch_bucket(&view, next);
            }
            self.store.touch(h);
        }
    }

    /// Full consistency check of the regions and the accounting (O(keys)); for tests.
    ///
    /// # Errors
    /// A description of the first inconsistency found.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.store.check_invariants()
    }

    /// A statistics snapshot.
    /// Entries evicted so far (cache memgests), without the cost of [`Engine::stats`].
    pub fn evictions(&self) -> u64 {
        self.store.evictions()
    }

    /// Keys and bytes per memgest holding keys (every copy this engine holds), as
    /// `stats().per_memgest` counts them, without building the rest of [`Engine::stats`]:
    /// its per-slot map is 16,384 entries on a node holding keys in every slot, a ~0.4 MB
    /// allocation (mmapped and faulted in each time) built under the engine lock.
    pub fn memgest_usage(&self) -> Vec<(MemgestId, crate::Usage)> {
        self.store.memgest_usage()
    }

    pub fn stats(&self) -> EngineStats {
        let mut s = self.store.stats();
        s.hits = self.hits.get();
        s.misses = self.misses.get();
        s.expirations = self.expirations;
        s.tombstones = self.tombstones.len() as u64;
        s.staged = self.staged.len() as u64;
        s
    }
}

impl Reader {
    /// Convenience: read into a fresh buffer.
    pub fn get_vec(&self, key: &[u8], now_ms: u64) -> (ReadOutcome, Vec<u8>) {
        let mut out = Vec::new();
        let r = self.get(key, now_ms, &mut out);
        (r, out)
    }
}
