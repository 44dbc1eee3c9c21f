//! The Linklet's map: native objects behind per-entry locks, in lock shards by slot, with a
//! byte and entry bound enforced by CLOCK eviction.
//!
//! # How it works
//!
//! ```text
//!  Linklet
//!   ├─ shards[64]: RwLock<Shard>          slot s -> shard s % 64
//!   │    ├─ states[256]: SlotState        slot s -> states[s / 64]
//!   │    ├─ tables: slot -> (key -> Entry)
//!   │    └─ ring: VecDeque<(slot, key, gen)>    the CLOCK ring of this shard
//!   │  Entry { cell: Arc<RwLock<V>>, meta: Arc<{ source_version, validated_at_ms }>,
//!   │          size_bytes, referenced bit, pins, gen }
//!   ├─ bytes, entries: AtomicU64          the charged totals (all states)
//!   └─ hand: AtomicUsize                  which shard evicts next
//! ```
//!
//! Two kinds of lock: shard locks (`parking_lot::RwLock`, writer-preferring) and one lock per
//! entry. A thread holds at most one shard lock at a time.
//!
//! - **reads** (`get`, `read`, `get_fresh`) take the shard lock shared, check the slot serves
//!   reads, take the entry's read lock *recursively* (it does not queue behind a waiting
//!   writer) and drop the shard lock: the returned [`Ref`] holds only that entry's read lock.
//! - **updates in place** take the shard lock *shared* and `try_write` the entry, and keep
//!   both while the closure runs. If a guard holds the entry they let go of the shard lock,
//!   wait for the entry with no shard lock held, and start over. Updates of different keys run
//!   in parallel; an update excludes readers and updaters of its own key only.
//! - **structural changes** (insert, remove, eviction, slot state changes of a move) take the
//!   shard lock exclusive. Version checks read the entry's metadata atomics, never its lock.
//!
//! Why no deadlock: a thread holding a shard lock never waits for an entry lock except for an
//! updater that is inside its closure (holding nothing else it could wait on), and waits for
//! entries held by guards happen with no shard lock held. Without this rule, a guard holder
//! calling `get` on a shard where an insert is queued behind an updater of the guarded key
//! would close a cycle (regression test: `a_guard_holder_can_read_while_an_update_waits`).
//!
//! Why updates hold the shard lock shared: a move marks a slot `Moving` under the shard lock
//! held exclusive, so once the mark is set every update of the slot has either finished (its
//! effect is in what the export copies) or will see the mark and be refused. That is the whole
//! argument that a move loses no acknowledged update.
//!
//! # Eviction: CLOCK
//!
//! The engine offers CLOCK and S3-FIFO (`ringlet_engine::api::EvictionPolicy`). Here it is
//! CLOCK, one ring per shard: S3-FIFO's win is scan resistance for one-hit-wonder traffic of a
//! cache in front of many clients; a Linklet holds the working set of one application process,
//! whose objects are usually created once and then used many times, and CLOCK's single
//! reference bit costs one relaxed store on a read, nothing else. The hand visits shards in
//! turn (`hand`) so victims spread over the whole map like one global clock.
//!
//! A position is skipped (and kept) when its entry is *pinned*: an explicit [`crate::Linklet::pin`],
//! a live [`Ref`] guard (the cell's `Arc` count is above one — exact, because guards are only
//! created under the shard lock that eviction holds exclusive), or a slot that is moving or
//! importing (evicting there would silently drop state that a move is carrying).
//!
//! Removed keys leave stale ring positions (their `gen` no longer matches); the ring is
//! compacted when it exceeds `2 * entries + CLOCK_RING_SLACK`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::{Deref, RangeInclusive};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{ArcRwLockReadGuard, RawRwLock, RwLock};
use ringlet_types::{key_slot, Slot, SLOT_COUNT};

use crate::clock::{Clock, MonotonicClock};
use crate::limits::{self, SHARD_COUNT, SLOTS_PER_SHARD};
use crate::marshal::{InlineSizer, LinkKey, Sizer};
use crate::notify::{LossReason, Notifier, StateLoss, StateLossReceiver};
use crate::Error;

/// What a Linklet does with one slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotState {
    /// Owned: reads and writes are served.
    Serving,
    /// Owned, being exported: reads served, writes refused with [`Error::Moving`].
    Moving,
    /// Being imported: values are installed but nothing is served ([`Error::NotOwner`]).
    Importing,
    /// Not owned: nothing is served ([`Error::NotOwner`]).
    NotOwned,
}

/// Capacity and ownership of a Linklet. Checked once by [`Config::validate`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Byte bound over all entries (key + [`Sizer`] estimate + `ENTRY_OVERHEAD_BYTES` each).
    pub bytes_max: u64,
    /// Entry bound.
    pub entries_max: u64,
    /// Target payload of one move batch (`1..=MOVE_BATCH_BYTES_MAX`).
    pub move_batch_bytes: usize,
    /// Slots this Linklet serves at start; all others are `NotOwned`. A process that is the
    /// only member owns everything (the default); a member that joins a running group owns
    /// nothing until slots are imported.
    pub slots_owned: Vec<RangeInclusive<Slot>>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bytes_max: 1 << 30,
            entries_max: 1 << 24,
            move_batch_bytes: limits::MOVE_BATCH_BYTES_DEFAULT,
            slots_owned: vec![0..=SLOT_COUNT - 1],
        }
    }
}

impl Config {
    /// Check every field.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first bad field.
    pub fn validate(&self) -> Result<(), Error> {
        if self.bytes_max == 0 {
            return Err(Error::Config {
                field: "bytes_max",
                reason: "must be positive",
            });
        }
        if self.entries_max == 0 {
            return Err(Error::Config {
                field: "entries_max",
                reason: "must be positive",
            });
        }
        if self.move_batch_bytes == 0 || self.move_batch_bytes > limits::MOVE_BATCH_BYTES_MAX {
            return Err(Error::Config {
                field: "move_batch_bytes",
                reason: "must be in 1..=MOVE_BATCH_BYTES_MAX",
            });
        }
        for r in &self.slots_owned {
            if check_range(r).is_err() {
                return Err(Error::Config {
                    field: "slots_owned",
                    reason: "slot range out of bounds",
                });
            }
        }
        Ok(())
    }
}

/// Counters, read with [`crate::Linklet::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Entries held (any slot state).
    pub entries: u64,
    /// Bytes charged.
    pub bytes: u64,
    /// Entries evicted since start.
    pub evictions: u64,
    /// `get_fresh` calls that found a value older than their bound.
    pub stale_misses: u64,
    /// Entries dropped by `invalidate*`.
    pub invalidations: u64,
}

/// A value with its freshness metadata, on its way into the map (insert, import).
pub(crate) struct Item<V> {
    pub(crate) value: V,
    /// The system-of-record version the value reflects (LInK §4.2 "Freshness").
    pub(crate) source_version: u64,
    /// When the value was last loaded or confirmed from the system of record ([`Clock`] ms).
    pub(crate) validated_at_ms: u64,
}

/// An entry's freshness metadata. Atomics outside the value's lock, so that version checks
/// under a shard lock (insert, invalidate, import) never wait for an entry lock.
#[derive(Debug)]
pub(crate) struct Meta {
    pub(crate) source_version: AtomicU64,
    pub(crate) validated_at_ms: AtomicU64,
}

impl Meta {
    pub(crate) fn source_version(&self) -> u64 {
        self.source_version.load(Ordering::Acquire)
    }
    pub(crate) fn validated_at_ms(&self) -> u64 {
        self.validated_at_ms.load(Ordering::Acquire)
    }
}

pub(crate) struct Entry<V> {
    /// The object. Its own `Arc` so a [`Ref`] can own a read guard on it.
    pub(crate) cell: Arc<RwLock<V>>,
    pub(crate) meta: Arc<Meta>,
    /// Charged bytes; changed by updates (under the entry's write lock).
    size_bytes: AtomicU64,
    /// CLOCK reference bit; set by reads and updates, cleared by the hand.
    referenced: AtomicBool,
    /// Explicit pins ([`crate::Linklet::pin`]).
    pins: AtomicU32,
    /// Identity of this entry in the ring: a removed-and-reinserted key gets a new one.
    gen: u64,
}

impl<V> Entry<V> {
    fn evictable(&self) -> bool {
        self.pins.load(Ordering::Relaxed) == 0 && Arc::strong_count(&self.cell) == 1
    }
}

pub(crate) struct Shard<K, V> {
    states: Vec<SlotState>,
    /// Recent invalidations (key → newest system-of-record version announced), kept whatever
    /// the slot's state and whether or not the key is held, so that a load or a move batch
    /// carrying an older version that arrives *after* the notification is refused. Bounded
    /// FIFO (`RECENT_INVALIDATIONS_PER_SHARD`); see `Linklet::invalidate_if_older`.
    recent: HashMap<K, u64>,
    recent_order: VecDeque<K>,
    pub(crate) tables: HashMap<Slot, HashMap<K, Entry<V>>>,
    ring: VecDeque<(Slot, K, u64)>,
    next_gen: u64,
    len: usize,
}

impl<K: LinkKey, V> Shard<K, V> {
    pub(crate) fn state(&self, slot: Slot) -> SlotState {
        self.states[usize::from(slot) / SHARD_COUNT]
    }
    pub(crate) fn set_state(&mut self, slot: Slot, state: SlotState) {
        self.states[usize::from(slot) / SHARD_COUNT] = state;
    }
    pub(crate) fn entry(&self, slot: Slot, key: &K) -> Option<&Entry<V>> {
        self.tables.get(&slot)?.get(key)
    }

    /// Install (or replace) `key`. Returns the replaced entry's charged bytes, if any.
    fn install(&mut self, slot: Slot, key: K, item: Item<V>, size_bytes: u64) -> Option<u64> {
        let table = self.tables.entry(slot).or_default();
        let meta = Arc::new(Meta {
            source_version: AtomicU64::new(item.source_version),
            validated_at_ms: AtomicU64::new(item.validated_at_ms),
        });
        let cell = Arc::new(RwLock::new(item.value));
        if let Some(e) = table.get_mut(&key) {
            // Replace the cell, not the value inside it: a reader holding a guard on the old
            // object keeps it (detached) and the insert never waits for that reader.
            e.cell = cell;
            e.meta = meta;
            e.referenced.store(true, Ordering::Relaxed);
            return Some(e.size_bytes.swap(size_bytes, Ordering::Relaxed));
        }
        let gen = self.next_gen;
        self.next_gen += 1;
        table.insert(
            key.clone(),
            Entry {
                cell,
                meta,
                size_bytes: AtomicU64::new(size_bytes),
                // A new entry gets its first pass for free, so a burst of inserts does not
                // evict each other before anyone reads them.
                referenced: AtomicBool::new(true),
                pins: AtomicU32::new(0),
                gen,
            },
        );
        self.len += 1;
        self.ring.push_back((slot, key, gen));
        if self.ring.len() > 2 * self.len + limits::CLOCK_RING_SLACK {
            self.compact_ring();
        }
        None
    }

    /// Remember that the system of record has `version` of `key` (keeps the newest).
    fn note_invalidation(&mut self, key: &K, version: u64) {
        if let Some(v) = self.recent.get_mut(key) {
            *v = (*v).max(version);
            return;
        }
        if self.recent_order.len() >= limits::RECENT_INVALIDATIONS_PER_SHARD {
            if let Some(old) = self.recent_order.pop_front() {
                self.recent.remove(&old);
            }
        }
        self.recent.insert(key.clone(), version);
        self.recent_order.push_back(key.clone());
    }

    /// Whether a value of `key` at `version` is older than an invalidation seen for it.
    pub(crate) fn superseded(&self, key: &K, version: u64) -> bool {
        self.recent.get(key).is_some_and(|&v| version < v)
    }

    /// Remove `key`; returns its charged bytes.
    pub(crate) fn take(&mut self, slot: Slot, key: &K) -> Option<u64> {
        let table = self.tables.get_mut(&slot)?;
        let e = table.remove(key)?;
        if table.is_empty() {
            self.tables.remove(&slot);
        }
        self.len -= 1;
        Some(e.size_bytes.load(Ordering::Relaxed))
    }

    /// Drop every entry of `slot`; returns (entries, bytes).
    pub(crate) fn drop_slot(&mut self, slot: Slot) -> (u64, u64) {
        let Some(table) = self.tables.remove(&slot) else {
            return (0, 0);
        };
        let bytes = table
            .values()
            .map(|e| e.size_bytes.load(Ordering::Relaxed))
            .sum();
        self.len -= table.len();
        (table.len() as u64, bytes)
    }

    fn compact_ring(&mut self) {
        let tables = &self.tables;
        self.ring.retain(|(slot, key, gen)| {
            tables
                .get(slot)
                .and_then(|t| t.get(key))
                .is_some_and(|e| e.gen == *gen)
        });
    }

    /// Advance this shard's CLOCK hand by at most `budget` positions until one entry is evicted.
    /// Returns (positions examined, the victim's slot and bytes).
    fn evict_one(&mut self, budget: u32) -> (u32, Option<(Slot, K, u64)>) {
        let mut examined = 0;
        while examined < budget {
            let Some((slot, key, gen)) = self.ring.pop_front() else {
                break;
            };
            examined += 1;
            let state = self.state(slot);
            let Some(e) = self.entry(slot, &key).filter(|e| e.gen == gen) else {
                continue; // stale position: the key was removed
            };
            if state != SlotState::Serving || !e.evictable() {
                self.ring.push_back((slot, key, gen));
                continue;
            }
            if e.referenced.swap(false, Ordering::Relaxed) {
                self.ring.push_back((slot, key, gen)); // second chance
                continue;
            }
            let bytes = self.take(slot, &key);
            return (examined, bytes.map(|b| (slot, key, b)));
        }
        (examined, None)
    }
}

/// A read guard on one object, from [`crate::Linklet::get`]: the object itself, not a copy.
///
/// While it lives, the entry cannot be evicted and updates of *this key* wait (other keys are
/// unaffected). Keep it short: never hold it across an `.await` or while updating the same key
/// on the same thread (that deadlocks). If the key is replaced by `insert` or removed, the
/// guard keeps the old object alive, detached from the map.
pub struct Ref<V> {
    guard: ArcRwLockReadGuard<RawRwLock, V>,
    meta: Arc<Meta>,
}

impl<V> Ref<V> {
    /// The system-of-record version of the object.
    pub fn source_version(&self) -> u64 {
        self.meta.source_version()
    }
}

impl<V> Deref for Ref<V> {
    type Target = V;
    fn deref(&self) -> &V {
        &self.guard
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for Ref<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ref")
            .field("value", &*self.guard)
            .field("source_version", &self.meta.source_version())
            .finish()
    }
}

/// The store linked into the application: a concurrent map from keys to native objects.
/// See the crate documentation for the model and [`crate::moving`] for moves.
pub struct Linklet<K, V> {
    pub(crate) shards: Box<[RwLock<Shard<K, V>>]>,
    pub(crate) bytes: AtomicU64,
    pub(crate) entries: AtomicU64,
    evictions: AtomicU64,
    stale_misses: AtomicU64,
    invalidations: AtomicU64,
    hand: AtomicUsize,
    pub(crate) config: Config,
    sizer: Box<dyn Sizer<V>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) notifier: Notifier,
    /// Replication's change log (see [`crate::replica`]): off unless a replicated service
    /// turned it on, so an unreplicated Linklet pays one relaxed load per write.
    pub(crate) dirty: crate::replica::DirtyLog<K>,
}

/// Check a slot range.
pub(crate) fn check_range(r: &RangeInclusive<Slot>) -> Result<(), Error> {
    if r.start() > r.end() || *r.end() >= SLOT_COUNT {
        return Err(Error::BadRange);
    }
    Ok(())
}

/// The slots of `range` that live in shard `idx`, ascending.
pub(crate) fn slots_in_shard(
    range: &RangeInclusive<Slot>,
    idx: usize,
) -> impl Iterator<Item = Slot> {
    let first = usize::from(*range.start());
    let last = usize::from(*range.end());
    let start = first + (idx + SHARD_COUNT - first % SHARD_COUNT) % SHARD_COUNT;
    (start..=last).step_by(SHARD_COUNT).map(|s| s as Slot)
}

impl<K: LinkKey, V: Send + Sync + 'static> Linklet<K, V> {
    /// A Linklet with the [`InlineSizer`] and the process's monotonic clock.
    ///
    /// # Errors
    /// [`Error::Config`] from [`Config::validate`].
    pub fn new(config: Config) -> Result<Self, Error> {
        config.validate()?;
        let shards = (0..SHARD_COUNT)
            .map(|idx| {
                let mut states = vec![SlotState::NotOwned; SLOTS_PER_SHARD];
                for r in &config.slots_owned {
                    for s in slots_in_shard(r, idx) {
                        states[usize::from(s) / SHARD_COUNT] = SlotState::Serving;
                    }
                }
                RwLock::new(Shard {
                    states,
                    recent: HashMap::new(),
                    recent_order: VecDeque::new(),
                    tables: HashMap::new(),
                    ring: VecDeque::new(),
                    next_gen: 0,
                    len: 0,
                })
            })
            .collect();
        Ok(Linklet {
            shards,
            bytes: AtomicU64::new(0),
            entries: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            stale_misses: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
            hand: AtomicUsize::new(0),
            config,
            sizer: Box::new(InlineSizer),
            clock: Arc::new(MonotonicClock::default()),
            notifier: Notifier::new(),
            dirty: crate::replica::DirtyLog::new(),
        })
    }

    /// Replace the value size estimate (before the Linklet holds anything).
    pub fn with_sizer(mut self, sizer: impl Sizer<V> + 'static) -> Self {
        self.sizer = Box::new(sizer);
        self
    }

    /// Replace the clock used for freshness (before the Linklet holds anything).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The Redis Cluster slot of `key` (CRC16 of its hash tag, mod 16384).
    pub fn slot_of(key: &K) -> Slot {
        key_slot(key.key_bytes())
    }

    pub(crate) fn shard(&self, slot: Slot) -> &RwLock<Shard<K, V>> {
        &self.shards[usize::from(slot) % SHARD_COUNT]
    }

    /// The state of `slot` here.
    ///
    /// # Panics
    /// If `slot >= 16384` (a caller bug).
    pub fn slot_state(&self, slot: Slot) -> SlotState {
        assert!(slot < SLOT_COUNT, "slot {slot} out of range");
        self.shard(slot).read().state(slot)
    }

    pub(crate) fn charge(&self, key: &K, value: &V) -> u64 {
        let value_bytes = self.sizer.size_bytes(value) as u64;
        (key.key_bytes().len() as u64)
            .saturating_add(value_bytes)
            .saturating_add(limits::ENTRY_OVERHEAD_BYTES)
    }

    /// The object under `key`, read in place (see [`Ref`] for what holding it means).
    ///
    /// Returns `Ok(None)` on a miss.
    ///
    /// # Errors
    /// [`Error::NotOwner`] if the slot is not served here.
    pub fn get(&self, key: &K) -> Result<Option<Ref<V>>, Error> {
        let slot = Self::slot_of(key);
        let shard = self.shard(slot).read();
        readable(slot, shard.state(slot))?;
        Ok(shard.entry(slot, key).map(|e| {
            e.referenced.store(true, Ordering::Relaxed);
            Ref {
                // Recursive: never queues behind a *waiting* updater (which waits outside
                // every shard lock, see `update_inner`), so a thread holding this shard lock
                // only ever waits for an updater that is running its closure.
                guard: e.cell.read_arc_recursive(),
                meta: Arc::clone(&e.meta),
            }
        }))
    }

    /// Run `f` on the object under `key` without handing out a guard.
    ///
    /// # Errors
    /// As [`Linklet::get`].
    pub fn read<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Result<Option<R>, Error> {
        Ok(self.get(key)?.map(|r| f(&r)))
    }

    /// Like [`Linklet::get`], but a value last loaded or confirmed from the system of record
    /// more than `max_staleness` ago counts as a miss (`Ok(None)`; `stale_misses` counts it).
    /// The entry stays: a reader with a looser bound may still use it, and the caller that
    /// missed reloads and calls [`Linklet::insert`] (or [`Linklet::revalidate`] if the source
    /// version did not change).
    ///
    /// Age is measured on this Linklet's [`Clock`] from the insert or revalidation; a moved
    /// value keeps its age (the batch carries it).
    ///
    /// # Errors
    /// As [`Linklet::get`].
    pub fn get_fresh(&self, key: &K, max_staleness: Duration) -> Result<Option<Ref<V>>, Error> {
        let Some(r) = self.get(key)? else {
            return Ok(None);
        };
        let age_ms = self.clock.now_ms().saturating_sub(r.meta.validated_at_ms());
        if u128::from(age_ms) > max_staleness.as_millis() {
            self.stale_misses.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        Ok(Some(r))
    }

    /// Insert or replace `key` with `value` at `source_version` (the system-of-record version,
    /// 0 for state that has none), evicting to make room.
    ///
    /// Returns the source version of the object it replaced, if any.
    ///
    /// # Errors
    /// [`Error::Stale`] if `source_version` is older than a remembered invalidation of `key`;
    /// [`Error::Moving`] / [`Error::NotOwner`] if the slot takes no writes here;
    /// [`Error::TooLarge`] if the value alone exceeds the capacity; [`Error::NoSpace`] if room
    /// could not be made.
    pub fn insert(&self, key: K, value: V, source_version: u64) -> Result<Option<u64>, Error> {
        let slot = Self::slot_of(&key);
        let item = Item {
            value,
            source_version,
            validated_at_ms: self.clock.now_ms(),
        };
        self.install(slot, key, item, &[SlotState::Serving], |_| true)
            .map(|(_, prev)| prev)
    }

    /// Insert `key` only if it is absent. Returns whether it inserted.
    ///
    /// # Errors
    /// As [`Linklet::insert`].
    pub fn insert_if_absent(&self, key: K, value: V, source_version: u64) -> Result<bool, Error> {
        let slot = Self::slot_of(&key);
        let item = Item {
            value,
            source_version,
            validated_at_ms: self.clock.now_ms(),
        };
        self.install(slot, key, item, &[SlotState::Serving], |_| false)
            .map(|(installed, _)| installed)
    }

    /// Install `item` if the slot is in one of `states` and `keep(existing_version)` allows it.
    /// Returns (installed, replaced version).
    pub(crate) fn install(
        &self,
        slot: Slot,
        key: K,
        item: Item<V>,
        states: &[SlotState],
        keep: impl Fn(u64) -> bool,
    ) -> Result<(bool, Option<u64>), Error> {
        let size = self.charge(&key, &item.value);
        if size > self.config.bytes_max {
            return Err(Error::TooLarge { size_bytes: size });
        }
        {
            // Check the state before evicting for a write that will be refused anyway.
            let shard = self.shard(slot).read();
            writable(slot, shard.state(slot), states)?;
            if shard.state(slot) == SlotState::Serving {
                self.dirty.check_room(slot)?;
            }
            if let Some(e) = shard.entry(slot, &key) {
                if !keep(e.meta.source_version()) {
                    return Ok((false, None));
                }
            }
        }
        self.make_room(size, 1)?;
        let prev = {
            let mut shard = self.shard(slot).write();
            writable(slot, shard.state(slot), states)?;
            // Checked under the shard lock that `invalidate_if_older` records under, so a
            // notification is either seen here or drops what this installs.
            if shard.superseded(&key, item.source_version) {
                return Err(Error::Stale { slot });
            }
            let prev_version = match shard.entry(slot, &key) {
                Some(e) => {
                    let v = e.meta.source_version();
                    if !keep(v) {
                        return Ok((false, None));
                    }
                    Some(v)
                }
                None => None,
            };
            if shard.state(slot) == SlotState::Serving {
                // Under the shard lock, so a move's `Moving` mark comes after the record.
                self.dirty.record(slot, &key);
            }
            match shard.install(slot, key, item, size) {
                Some(old_bytes) => self.sub_bytes(old_bytes),
                None => {
                    self.entries.fetch_add(1, Ordering::Relaxed);
                }
            }
            self.bytes.fetch_add(size, Ordering::Relaxed);
            prev_version
        };
        Ok((true, prev))
    }

    fn sub_bytes(&self, b: u64) {
        self.bytes.fetch_sub(b, Ordering::Relaxed);
    }

    /// Change the object under `key` in place: `f` runs with the key's write lock held, so it is
    /// atomic with respect to every other reader and writer of the key. The source version is
    /// kept (use [`Linklet::update_versioned`] after writing through to the system of record).
    ///
    /// Returns `Ok(None)` on a miss, else `f`'s result. An update that grows the object may take
    /// the map over its byte bound; eviction then runs at once (best effort, never failing the
    /// update that already happened).
    ///
    /// `f` must not call into this Linklet (it runs under a shard lock and the key's write lock,
    /// so a nested call can deadlock) and should be short: it delays inserts of the shard's
    /// other keys. If a [`Ref`] guard holds the key, `update` waits for it to be dropped.
    ///
    /// # Errors
    /// [`Error::Moving`] / [`Error::NotOwner`].
    pub fn update<R>(&self, key: &K, f: impl FnOnce(&mut V) -> R) -> Result<Option<R>, Error> {
        self.update_inner(key, None, f)
    }

    /// [`Linklet::update`] that also sets the object's source version (and marks it validated
    /// now): for a write-through application that has just written `source_version` to the
    /// system of record.
    ///
    /// # Errors
    /// As [`Linklet::update`].
    pub fn update_versioned<R>(
        &self,
        key: &K,
        source_version: u64,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<Option<R>, Error> {
        self.update_inner(key, Some(source_version), f)
    }

    fn update_inner<R>(
        &self,
        key: &K,
        source_version: Option<u64>,
        f: impl FnOnce(&mut V) -> R,
    ) -> Result<Option<R>, Error> {
        let slot = Self::slot_of(key);
        // Never wait for an entry lock while holding a shard lock: a reader holding a guard
        // may itself be waiting for this shard (behind a queued insert), which would close a
        // cycle. So: try the entry lock under the shard lock; if a guard holds it, let go of
        // the shard, wait for the key to be free, and start over (the slot state may have
        // changed meanwhile). Each round waits for the guards that existed; a retry fails
        // only if a new guard was taken in the instant between, so this is not a spin.
        let (out, grew) = loop {
            let shard = self.shard(slot).read();
            writable(slot, shard.state(slot), &[SlotState::Serving])?;
            let Some(e) = shard.entry(slot, key) else {
                return Ok(None);
            };
            self.dirty.check_room(slot)?;
            let Some(mut value) = e.cell.try_write() else {
                let cell = Arc::clone(&e.cell);
                drop(shard);
                drop(cell.write());
                continue;
            };
            let out = f(&mut value);
            if let Some(v) = source_version {
                e.meta.source_version.store(v, Ordering::Release);
                e.meta
                    .validated_at_ms
                    .store(self.clock.now_ms(), Ordering::Release);
            }
            let size = self.charge(key, &value);
            let old = e.size_bytes.swap(size, Ordering::Relaxed);
            e.referenced.store(true, Ordering::Relaxed);
            if size >= old {
                self.bytes.fetch_add(size - old, Ordering::Relaxed);
            } else {
                self.sub_bytes(old - size);
            }
            // After the change and still under the shard lock: a replication drain that sees
            // the record reads the changed value, and a move's mark comes after the record.
            drop(value);
            self.dirty.record(slot, key);
            break (out, size > old);
        };
        if grew && self.bytes.load(Ordering::Relaxed) > self.config.bytes_max {
            let _ = self.make_room(0, 0);
        }
        Ok(Some(out))
    }

    /// Remove `key`. Returns whether it was there.
    ///
    /// # Errors
    /// [`Error::Moving`] / [`Error::NotOwner`].
    pub fn remove(&self, key: &K) -> Result<bool, Error> {
        self.remove_if(key, |_| true)
    }

    fn remove_if(&self, key: &K, cond: impl Fn(u64) -> bool) -> Result<bool, Error> {
        let slot = Self::slot_of(key);
        let mut shard = self.shard(slot).write();
        writable(slot, shard.state(slot), &[SlotState::Serving])?;
        let Some(e) = shard.entry(slot, key) else {
            return Ok(false);
        };
        if !cond(e.meta.source_version()) {
            return Ok(false);
        }
        if let Some(b) = shard.take(slot, key) {
            self.sub_bytes(b);
            self.entries.fetch_sub(1, Ordering::Relaxed);
        }
        self.dirty.record(slot, key);
        Ok(true)
    }

    /// Drop `key` because the system of record changed it. Emits
    /// `StateLoss { slots: slot..=slot, reason: Invalidated }` if something was dropped.
    ///
    /// Refused with [`Error::Moving`] while the slot moves (the copy may already be in flight);
    /// the invalidation source retries, like any writer, and reaches the new owner.
    ///
    /// # Errors
    /// [`Error::Moving`] / [`Error::NotOwner`].
    pub fn invalidate(&self, key: &K) -> Result<bool, Error> {
        // Not remembered: there is no version a reload could be compared with.
        self.invalidate_inner(key, u64::MAX, false)
    }

    /// Drop `key` if its source version is older than `source_version` (the version the system
    /// of record now has). An out-of-order or duplicate notification for a version the Linklet
    /// already holds is a no-op. Returns whether the entry was dropped.
    ///
    /// The version is remembered per key (a bounded recent-invalidation table, whatever the
    /// slot's state and whether the key is held), and `insert`/`import_batch` refuse a value
    /// older than it: a load that read v1 before the change to v2 but installs after this
    /// notification gets [`Error::Stale`] instead of caching v1, and a move batch carrying v1
    /// is skipped at the target. So every member of a service should see every notification
    /// (the PostgreSQL source in `ringlet-linked` does). A staged (importing) copy is dropped
    /// too.
    ///
    /// # Errors
    /// [`Error::Moving`] (the notification is remembered; retry until the move ends) /
    /// [`Error::NotOwner`] (remembered; nothing else to do here). An importing slot is not an
    /// error: its staged copy, if older, is dropped.
    pub fn invalidate_if_older(&self, key: &K, source_version: u64) -> Result<bool, Error> {
        self.invalidate_inner(key, source_version, true)
    }

    fn invalidate_inner(
        &self,
        key: &K,
        source_version: u64,
        remember: bool,
    ) -> Result<bool, Error> {
        let slot = Self::slot_of(key);
        let dropped = {
            let mut shard = self.shard(slot).write();
            if remember {
                shard.note_invalidation(key, source_version);
            }
            // Staged values of an importing slot are dropped too (they are not served, and
            // the import must not install them after this); a moving slot refuses, like any
            // write: its copy may be in flight, and the new owner's table catches that copy.
            writable(
                slot,
                shard.state(slot),
                &[SlotState::Serving, SlotState::Importing],
            )?;
            match shard.entry(slot, key) {
                Some(e) if e.meta.source_version() < source_version => {
                    if let Some(b) = shard.take(slot, key) {
                        self.sub_bytes(b);
                        self.entries.fetch_sub(1, Ordering::Relaxed);
                    }
                    if shard.state(slot) == SlotState::Serving {
                        self.dirty.record(slot, key);
                    }
                    true
                }
                _ => false,
            }
        };
        if dropped {
            self.invalidations.fetch_add(1, Ordering::Relaxed);
            self.notifier.emit(StateLoss {
                slots: slot..=slot,
                reason: LossReason::Invalidated,
            });
        }
        Ok(dropped)
    }

    /// Mark `key` as confirmed fresh now if it still holds `source_version` (the application
    /// checked the system of record and nothing changed). Returns whether it did.
    ///
    /// # Errors
    /// [`Error::NotOwner`].
    pub fn revalidate(&self, key: &K, source_version: u64) -> Result<bool, Error> {
        let slot = Self::slot_of(key);
        let shard = self.shard(slot).read();
        readable(slot, shard.state(slot))?;
        let Some(e) = shard.entry(slot, key) else {
            return Ok(false);
        };
        if e.meta.source_version() != source_version {
            return Ok(false);
        }
        e.meta
            .validated_at_ms
            .store(self.clock.now_ms(), Ordering::Release);
        Ok(true)
    }

    /// Pin `key` so eviction never takes it (pins nest; each needs an [`Linklet::unpin`]).
    /// Returns whether the key was there. Pins do not travel with a move.
    ///
    /// # Errors
    /// [`Error::NotOwner`].
    pub fn pin(&self, key: &K) -> Result<bool, Error> {
        self.with_entry(key, |e| {
            e.pins.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Undo one [`Linklet::pin`]. Returns whether the key was there.
    ///
    /// # Errors
    /// [`Error::NotOwner`].
    pub fn unpin(&self, key: &K) -> Result<bool, Error> {
        self.with_entry(key, |e| {
            let _ = e
                .pins
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| p.checked_sub(1));
        })
    }

    fn with_entry(&self, key: &K, f: impl FnOnce(&Entry<V>)) -> Result<bool, Error> {
        let slot = Self::slot_of(key);
        let shard = self.shard(slot).read();
        readable(slot, shard.state(slot))?;
        Ok(shard.entry(slot, key).map(f).is_some())
    }

    /// Register `f` to run on every [`StateLoss`] (on the thread that caused it, with no
    /// Linklet lock held).
    ///
    /// # Errors
    /// [`Error::TooManyCallbacks`] past [`limits::STATE_LOSS_CALLBACKS_MAX`].
    pub fn on_state_loss(
        &self,
        f: impl Fn(&StateLoss) + Send + Sync + 'static,
    ) -> Result<(), Error> {
        self.notifier.register(Arc::new(f))
    }

    /// A bounded async stream of the [`StateLoss`] events from now on.
    pub fn subscribe(&self) -> StateLossReceiver {
        self.notifier.subscribe()
    }

    /// Tell the application that the member owning `slots` crashed and its state is gone (the
    /// entry point for the `ringlet-linked` coordinator's crash reports; nothing here detects crashes).
    ///
    /// # Errors
    /// [`Error::BadRange`].
    pub fn report_member_crashed(&self, slots: RangeInclusive<Slot>) -> Result<(), Error> {
        check_range(&slots)?;
        self.notifier.emit(StateLoss {
            slots,
            reason: LossReason::MemberCrashed,
        });
        Ok(())
    }

    /// Entries and charged bytes held for the slots of `range` (any slot state): the per-range
    /// load a linked member reports to the auto-sharder. One read lock per shard touched;
    /// O(entries of the range).
    ///
    /// # Panics
    /// Never for a valid range; an invalid one (`first > last` or past the last slot) counts
    /// nothing.
    pub fn usage(&self, range: RangeInclusive<Slot>) -> (u64, u64) {
        if check_range(&range).is_err() {
            return (0, 0);
        }
        let (mut entries, mut bytes) = (0, 0);
        for idx in 0..SHARD_COUNT {
            let shard = self.shards[idx].read();
            for s in slots_in_shard(&range, idx) {
                if let Some(t) = shard.tables.get(&s) {
                    entries += t.len() as u64;
                    bytes += t
                        .values()
                        .map(|e| e.size_bytes.load(Ordering::Relaxed))
                        .sum::<u64>();
                }
            }
        }
        (entries, bytes)
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        Stats {
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            stale_misses: self.stale_misses.load(Ordering::Relaxed),
            invalidations: self.invalidations.load(Ordering::Relaxed),
        }
    }

    /// Evict until `need_bytes` more bytes and `need_entries` more entries fit, examining at
    /// most [`limits::EVICTION_SCAN_MAX`] ring positions. Emits one `Evicted` loss per slot.
    fn make_room(&self, need_bytes: u64, need_entries: u64) -> Result<(), Error> {
        let fits = || {
            self.bytes
                .load(Ordering::Relaxed)
                .saturating_add(need_bytes)
                <= self.config.bytes_max
                && self
                    .entries
                    .load(Ordering::Relaxed)
                    .saturating_add(need_entries)
                    <= self.config.entries_max
        };
        let mut budget = limits::EVICTION_SCAN_MAX;
        let mut evicted: BTreeMap<Slot, u64> = BTreeMap::new();
        let mut result = Ok(());
        while !fits() {
            if budget == 0 {
                result = Err(Error::NoSpace);
                break;
            }
            let idx = self.hand.fetch_add(1, Ordering::Relaxed) % SHARD_COUNT;
            let mut shard = self.shards[idx].write();
            // An empty shard still costs one unit, so the loop ends even if nothing is held.
            let ring_len = u32::try_from(shard.ring.len()).unwrap_or(u32::MAX);
            let (examined, victim) = shard.evict_one(budget.min(ring_len.saturating_mul(2)));
            if let Some((slot, key, _)) = &victim {
                // A replicated owner's backup drops it too (eviction only takes serving slots).
                self.dirty.record(*slot, key);
            }
            drop(shard);
            budget = budget.saturating_sub(examined.max(1));
            if let Some((slot, _, bytes)) = victim {
                self.sub_bytes(bytes);
                self.entries.fetch_sub(1, Ordering::Relaxed);
                self.evictions.fetch_add(1, Ordering::Relaxed);
                *evicted.entry(slot).or_default() += 1;
            }
        }
        for (slot, keys) in evicted {
            self.notifier.emit(StateLoss {
                slots: slot..=slot,
                reason: LossReason::Evicted { keys },
            });
        }
        result
    }

    /// Assert the cheap invariants: the counters equal the sums over the shards, every entry
    /// sits in the table of its own slot, and the ring covers every entry.
    ///
    /// # Panics
    /// On a broken invariant (a bug in this crate). Call it only when no other thread is
    /// changing the map.
    pub fn check_invariants(&self) {
        let (mut entries, mut bytes) = (0u64, 0u64);
        for shard in self.shards.iter() {
            let shard = shard.read();
            let mut len = 0;
            for (slot, table) in &shard.tables {
                assert!(!table.is_empty(), "empty table kept for slot {slot}");
                for (key, e) in table {
                    assert_eq!(Self::slot_of(key), *slot, "entry in the wrong slot table");
                    assert!(
                        shard
                            .ring
                            .iter()
                            .any(|(s, k, g)| s == slot && k == key && *g == e.gen),
                        "entry missing from the CLOCK ring"
                    );
                    bytes += e.size_bytes.load(Ordering::Relaxed);
                }
                len += table.len();
            }
            assert_eq!(len, shard.len, "shard length drifted");
            entries += len as u64;
        }
        assert_eq!(
            entries,
            self.entries.load(Ordering::Relaxed),
            "entry count drifted"
        );
        assert_eq!(
            bytes,
            self.bytes.load(Ordering::Relaxed),
            "byte count drifted"
        );
    }
}

/// Reads are served while a slot serves or moves.
fn readable(slot: Slot, state: SlotState) -> Result<(), Error> {
    match state {
        SlotState::Serving | SlotState::Moving => Ok(()),
        SlotState::Importing | SlotState::NotOwned => Err(Error::NotOwner { slot }),
    }
}

/// Writes are served in the listed states only.
fn writable(slot: Slot, state: SlotState, allowed: &[SlotState]) -> Result<(), Error> {
    if allowed.contains(&state) {
        return Ok(());
    }
    match state {
        SlotState::Moving => Err(Error::Moving { slot }),
        SlotState::Serving => Err(Error::SlotState { slot, state }),
        _ if allowed.contains(&SlotState::Serving) => Err(Error::NotOwner { slot }),
        _ => Err(Error::SlotState { slot, state }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::notify::RecvError;
    use std::sync::Mutex;

    #[derive(Debug, Default, PartialEq)]
    struct Session {
        user: String,
        clicks: u64,
    }

    fn linklet<V: Send + Sync + 'static>(config: Config) -> Linklet<String, V> {
        Linklet::new(config).unwrap()
    }

    fn k(s: &str) -> String {
        s.to_owned()
    }

    fn collect_losses(l: &Linklet<String, u64>) -> Arc<Mutex<Vec<StateLoss>>> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        l.on_state_loss(move |loss| sink.lock().unwrap().push(loss.clone()))
            .unwrap();
        seen
    }

    #[test]
    fn get_reads_the_object_in_place_and_update_changes_it() {
        let l = linklet::<Session>(Config::default());
        assert_eq!(
            l.insert(
                k("s1"),
                Session {
                    user: "ann".into(),
                    clicks: 0
                },
                7
            ),
            Ok(None)
        );
        {
            let r = l.get(&k("s1")).unwrap().unwrap();
            assert_eq!(r.user, "ann");
            assert_eq!(r.source_version(), 7);
        }
        assert_eq!(
            l.update(&k("s1"), |s| {
                s.clicks += 1;
                s.clicks
            }),
            Ok(Some(1))
        );
        assert_eq!(l.read(&k("s1"), |s| s.clicks), Ok(Some(1)));
        // `update` keeps the source version, `update_versioned` sets it.
        assert_eq!(l.get(&k("s1")).unwrap().unwrap().source_version(), 7);
        l.update_versioned(&k("s1"), 9, |s| s.clicks += 1).unwrap();
        assert_eq!(l.get(&k("s1")).unwrap().unwrap().source_version(), 9);
        assert_eq!(l.update(&k("nobody"), |s| s.clicks), Ok(None));
        assert_eq!(l.insert(k("s1"), Session::default(), 10), Ok(Some(9)));
        assert!(l.remove(&k("s1")).unwrap());
        assert!(!l.remove(&k("s1")).unwrap());
        assert!(l.get(&k("s1")).unwrap().is_none());
        l.check_invariants();
        assert_eq!(l.stats().entries, 0);
        assert_eq!(l.stats().bytes, 0);
    }

    #[test]
    fn insert_detaches_the_object_a_guard_holds() {
        let l = linklet::<u64>(Config::default());
        l.insert(k("a"), 1, 0).unwrap();
        let old = l.get(&k("a")).unwrap().unwrap();
        // Replacing does not wait for the reader; the reader keeps the object it read.
        l.insert(k("a"), 2, 0).unwrap();
        assert_eq!(*old, 1);
        assert_eq!(l.read(&k("a"), |v| *v), Ok(Some(2)));
        assert!(!l.insert_if_absent(k("a"), 3, 0).unwrap());
        assert_eq!(l.read(&k("a"), |v| *v), Ok(Some(2)));
    }

    #[test]
    fn updates_are_atomic_per_key() {
        let l = linklet::<u64>(Config::default());
        l.insert(k("counter"), 0, 0).unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        // A read-modify-write inside the closure: lost updates would show.
                        l.update(&k("counter"), |v| *v = v.wrapping_add(1)).unwrap();
                    }
                });
            }
        });
        assert_eq!(l.read(&k("counter"), |v| *v), Ok(Some(4000)));
    }

    #[test]
    fn unowned_slots_are_refused() {
        let l = linklet::<u64>(Config {
            slots_owned: vec![0..=99],
            ..Config::default()
        });
        let foo = k("foo"); // slot 12182
        let slot = Linklet::<String, u64>::slot_of(&foo);
        assert_eq!(slot, 12182);
        assert_eq!(l.insert(foo.clone(), 1, 0), Err(Error::NotOwner { slot }));
        assert!(matches!(l.get(&foo), Err(Error::NotOwner { slot: 12182 })));
        assert_eq!(l.slot_state(5), SlotState::Serving);
        assert_eq!(l.slot_state(100), SlotState::NotOwned);
    }

    #[test]
    fn config_is_validated() {
        let bad = |c: Config| Linklet::<String, u64>::new(c).err();
        assert!(matches!(
            bad(Config {
                bytes_max: 0,
                ..Config::default()
            }),
            Some(Error::Config {
                field: "bytes_max",
                ..
            })
        ));
        assert!(matches!(
            bad(Config {
                move_batch_bytes: limits::MOVE_BATCH_BYTES_MAX + 1,
                ..Config::default()
            }),
            Some(Error::Config {
                field: "move_batch_bytes",
                ..
            })
        ));
        assert!(matches!(
            bad(Config {
                slots_owned: vec![0..=SLOT_COUNT],
                ..Config::default()
            }),
            Some(Error::Config {
                field: "slots_owned",
                ..
            })
        ));
    }

    #[test]
    fn eviction_keeps_the_entry_bound_and_reports_state_loss() {
        let l = linklet::<u64>(Config {
            entries_max: 10,
            ..Config::default()
        });
        let mut rx = l.subscribe();
        let seen = collect_losses(&l);
        for i in 0..25 {
            l.insert(format!("key{i}"), i, 0).unwrap();
            assert!(l.stats().entries <= 10);
        }
        assert_eq!(l.stats().evictions, 15);
        l.check_invariants();
        let evicted = |losses: &[StateLoss]| -> u64 {
            losses
                .iter()
                .map(|loss| match loss.reason {
                    LossReason::Evicted { keys } => {
                        assert_eq!(loss.slots.start(), loss.slots.end());
                        keys
                    }
                    other => panic!("unexpected {other:?}"),
                })
                .sum()
        };
        assert_eq!(evicted(&seen.lock().unwrap()), 15);
        let mut streamed = Vec::new();
        while let Some(loss) = rx.try_recv().unwrap() {
            streamed.push(loss);
        }
        assert_eq!(evicted(&streamed), 15);
    }

    #[test]
    fn eviction_keeps_the_byte_bound() {
        // Each value is charged its length + key + overhead.
        let l = linklet::<Vec<u8>>(Config {
            bytes_max: 10_000,
            ..Config::default()
        })
        .with_sizer(|v: &Vec<u8>| v.len());
        for i in 0..100 {
            l.insert(format!("k{i}"), vec![0; 500], 0).unwrap();
            assert!(l.stats().bytes <= 10_000, "{:?}", l.stats());
        }
        assert!(l.stats().evictions > 70);
        assert_eq!(
            l.insert(k("huge"), vec![0; 20_000], 0),
            Err(Error::TooLarge {
                size_bytes: 20_000 + 4 + 96
            })
        );
        // An update that grows an object evicts others at once.
        l.update(&k("k99"), |v| v.resize(5_000, 1)).unwrap();
        assert!(l.stats().bytes <= 10_000);
        assert_eq!(l.read(&k("k99"), Vec::len), Ok(Some(5_000)));
        l.check_invariants();
    }

    #[test]
    fn pinned_and_guarded_entries_are_never_evicted() {
        let l = linklet::<u64>(Config {
            entries_max: 4,
            ..Config::default()
        });
        for i in 0..4 {
            l.insert(format!("k{i}"), i, 0).unwrap();
        }
        assert!(l.pin(&k("k0")).unwrap());
        assert!(l.pin(&k("k1")).unwrap());
        let guard = l.get(&k("k2")).unwrap().unwrap();
        for i in 4..20 {
            l.insert(format!("k{i}"), i, 0).unwrap();
        }
        for key in ["k0", "k1", "k2"] {
            assert!(l.get(&k(key)).unwrap().is_some(), "{key} was evicted");
        }
        // With k19 pinned too, everything is held: no room.
        assert!(l.pin(&k("k19")).unwrap());
        assert_eq!(l.insert(k("one-more"), 0, 0), Err(Error::NoSpace));
        drop(guard);
        assert!(l.unpin(&k("k0")).unwrap());
        l.insert(k("one-more"), 0, 0).unwrap();
        assert!(l.get(&k("k1")).unwrap().is_some());
        assert!(l.get(&k("k19")).unwrap().is_some());
        l.check_invariants();
    }

    #[test]
    fn clock_gives_read_entries_a_second_chance() {
        // One hash tag: one slot, one shard, one ring, so the order is CLOCK's alone.
        let l = linklet::<u64>(Config {
            entries_max: 4,
            ..Config::default()
        });
        for name in ["a", "b", "c", "d"] {
            l.insert(format!("{{t}}{name}"), 0, 0).unwrap();
        }
        // Every entry had its free first pass: the hand clears them all, then takes `a`.
        l.insert(k("{t}e"), 0, 0).unwrap();
        assert!(l.get(&k("{t}a")).unwrap().is_none());
        // `b` is read, so the next victim is `c`.
        let _ = l.get(&k("{t}b")).unwrap();
        l.insert(k("{t}f"), 0, 0).unwrap();
        assert!(l.get(&k("{t}b")).unwrap().is_some());
        assert!(l.get(&k("{t}c")).unwrap().is_none());
        assert!(l.get(&k("{t}d")).unwrap().is_some());
    }

    #[test]
    fn ring_stays_bounded_under_churn() {
        let l = linklet::<u64>(Config::default());
        for i in 0..10_000u64 {
            l.insert(k("{t}churn"), i, 0).unwrap();
            l.remove(&k("{t}churn")).unwrap();
        }
        let slot = Linklet::<String, u64>::slot_of(&k("{t}churn"));
        let ring_len = l.shard(slot).read().ring.len();
        assert!(ring_len <= 2 + limits::CLOCK_RING_SLACK + 1, "{ring_len}");
        l.check_invariants();
    }

    #[test]
    fn get_fresh_treats_old_values_as_misses() {
        let clock = Arc::new(ManualClock::new(1_000));
        let l = linklet::<u64>(Config::default()).with_clock(clock.clone());
        l.insert(k("price"), 10, 1).unwrap();
        clock.advance_ms(500);
        let bound = Duration::from_millis(1_000);
        assert_eq!(
            l.get_fresh(&k("price"), bound).unwrap().map(|r| *r),
            Some(10)
        );
        clock.advance_ms(501);
        assert!(l.get_fresh(&k("price"), bound).unwrap().is_none());
        assert_eq!(l.stats().stale_misses, 1);
        // The entry is still there for a looser bound.
        assert!(l
            .get_fresh(&k("price"), Duration::from_secs(60))
            .unwrap()
            .is_some());
        // Revalidating at the same source version resets the age; another version does not.
        assert!(!l.revalidate(&k("price"), 2).unwrap());
        assert!(l.revalidate(&k("price"), 1).unwrap());
        assert!(l.get_fresh(&k("price"), bound).unwrap().is_some());
        // An in-place versioned update also counts as fresh.
        clock.advance_ms(5_000);
        l.update_versioned(&k("price"), 2, |v| *v = 11).unwrap();
        assert!(l.get_fresh(&k("price"), bound).unwrap().is_some());
    }

    #[test]
    fn a_load_older_than_a_remembered_invalidation_is_refused() {
        let l = linklet::<u64>(Config::default());
        let slot = Linklet::<String, u64>::slot_of(&k("row"));
        // The notification for v2 comes before the racing load of v1 is installed.
        assert!(!l.invalidate_if_older(&k("row"), 2).unwrap());
        assert_eq!(l.insert(k("row"), 1, 1), Err(Error::Stale { slot }));
        assert_eq!(
            l.insert_if_absent(k("row"), 1, 1),
            Err(Error::Stale { slot })
        );
        assert!(l.get(&k("row")).unwrap().is_none());
        // The reload at v2 (or later) is fine.
        l.insert(k("row"), 2, 2).unwrap();
        // A plain `invalidate` is not remembered: a reload at any version is accepted.
        assert!(l.invalidate(&k("row")).unwrap());
        l.insert(k("row"), 3, 2).unwrap();
        // Remembered also for slots not served here.
        let other = linklet::<u64>(Config {
            slots_owned: Vec::new(),
            ..Config::default()
        });
        assert_eq!(
            other.invalidate_if_older(&k("row"), 9),
            Err(Error::NotOwner { slot })
        );
        other.begin_import(slot..=slot).unwrap();
        other.commit_import(slot..=slot).unwrap();
        assert_eq!(other.insert(k("row"), 1, 8), Err(Error::Stale { slot }));
        other.insert(k("row"), 1, 9).unwrap();
    }

    #[test]
    fn the_recent_invalidation_table_is_bounded() {
        let l = linklet::<u64>(Config::default());
        let n = limits::RECENT_INVALIDATIONS_PER_SHARD * SHARD_COUNT * 2;
        for i in 0..n {
            let _ = l.invalidate_if_older(&format!("k{i}"), 5);
        }
        let held: usize = l.shards.iter().map(|s| s.read().recent.len()).sum();
        assert!(held <= limits::RECENT_INVALIDATIONS_PER_SHARD * SHARD_COUNT);
        // The oldest are forgotten (a stale load of them is accepted again), the newest kept.
        l.insert(format!("k{}", n - 1), 1, 4).unwrap_err();
        let forgotten = (0..n)
            .map(|i| format!("k{i}"))
            .find(|key| l.insert(key.clone(), 1, 4).is_ok());
        assert!(forgotten.is_some());
    }

    #[test]
    fn invalidation_respects_source_versions_and_notifies() {
        let l = linklet::<u64>(Config::default());
        let seen = collect_losses(&l);
        l.insert(k("row"), 1, 5).unwrap();
        // A notification for a version we already have (or an older one) is a no-op.
        assert!(!l.invalidate_if_older(&k("row"), 5).unwrap());
        assert!(!l.invalidate_if_older(&k("row"), 3).unwrap());
        assert!(l.get(&k("row")).unwrap().is_some());
        assert!(l.invalidate_if_older(&k("row"), 6).unwrap());
        assert!(l.get(&k("row")).unwrap().is_none());
        l.insert(k("row"), 2, 6).unwrap();
        assert!(l.invalidate(&k("row")).unwrap());
        assert!(!l.invalidate(&k("row")).unwrap());
        let slot = Linklet::<String, u64>::slot_of(&k("row"));
        let losses = seen.lock().unwrap().clone();
        assert_eq!(
            losses,
            vec![
                StateLoss {
                    slots: slot..=slot,
                    reason: LossReason::Invalidated
                };
                2
            ]
        );
        assert_eq!(l.stats().invalidations, 2);
    }

    #[test]
    fn state_loss_stream_is_bounded_and_reports_lag() {
        let l = linklet::<u64>(Config::default());
        let mut rx = l.subscribe();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        l.report_member_crashed(100..=200).unwrap();
        let first = rt.block_on(rx.recv()).unwrap();
        assert_eq!(
            first,
            StateLoss {
                slots: 100..=200,
                reason: LossReason::MemberCrashed
            }
        );
        // Overflow the channel: the receiver is told how much it missed, then resumes.
        let extra = 10;
        for _ in 0..limits::STATE_LOSS_CHANNEL_CAPACITY + extra {
            l.report_member_crashed(0..=1).unwrap();
        }
        assert_eq!(
            rt.block_on(rx.recv()),
            Err(RecvError::Lagged {
                missed: extra as u64
            })
        );
        assert!(rt.block_on(rx.recv()).is_ok());
        assert_eq!(
            l.report_member_crashed(RangeInclusive::new(5, 4)),
            Err(Error::BadRange)
        );
        drop(l);
        // Drain what is left, then the stream ends.
        let mut n = 0;
        while rt.block_on(rx.recv()).is_ok() {
            n += 1;
        }
        assert_eq!(n, limits::STATE_LOSS_CHANNEL_CAPACITY - 1);
        assert_eq!(rt.block_on(rx.recv()), Err(RecvError::Closed));
    }

    #[test]
    fn callbacks_are_bounded() {
        let l = linklet::<u64>(Config::default());
        for _ in 0..limits::STATE_LOSS_CALLBACKS_MAX {
            l.on_state_loss(|_| {}).unwrap();
        }
        assert_eq!(l.on_state_loss(|_| {}), Err(Error::TooManyCallbacks));
    }

    #[test]
    fn slots_in_shard_partitions_a_range() {
        let range = 5..=300;
        let mut all: Vec<Slot> = (0..SHARD_COUNT)
            .flat_map(|i| slots_in_shard(&range, i))
            .collect();
        all.sort_unstable();
        assert_eq!(all, (5..=300).collect::<Vec<_>>());
        assert!(slots_in_shard(&(16383..=16383), 63).eq([16383]));
    }
}

#[cfg(test)]
mod deadlock_tests {
    use super::*;
    use std::sync::mpsc;

    /// A thread holds a guard on `k1` while another updates `k1` (and must wait) and a third
    /// inserts into the same shard (a queued exclusive shard lock). The guard holder must
    /// still be able to read another key of that shard. With the update waiting *inside* the
    /// shard lock this was a cycle. Short sleeps let the two others reach their waits; the
    /// watchdog turns a deadlock into a failure instead of a hung test.
    #[test]
    fn a_guard_holder_can_read_while_an_update_waits() {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let l = Arc::new(Linklet::<String, u64>::new(Config::default()).unwrap());
            for key in ["{t}k1", "{t}k3"] {
                l.insert(key.to_owned(), 1, 0).unwrap();
            }
            let guard = l.get(&"{t}k1".to_owned()).unwrap().unwrap();
            let updater = {
                let l = Arc::clone(&l);
                std::thread::spawn(move || l.update(&"{t}k1".to_owned(), |v| *v += 1).unwrap())
            };
            std::thread::sleep(Duration::from_millis(50));
            let inserter = {
                let l = Arc::clone(&l);
                std::thread::spawn(move || l.insert("{t}k2".to_owned(), 2, 0).unwrap())
            };
            std::thread::sleep(Duration::from_millis(50));
            let other = l.read(&"{t}k3".to_owned(), |v| *v).unwrap();
            // The same thread may also read the key it already holds.
            let again = l.read(&"{t}k1".to_owned(), |v| *v).unwrap();
            drop(guard);
            updater.join().unwrap();
            inserter.join().unwrap();
            let after = l.read(&"{t}k1".to_owned(), |v| *v).unwrap();
            tx.send((other, again, after)).unwrap();
        });
        let got = rx.recv_timeout(Duration::from_secs(20)).expect("deadlock");
        assert_eq!(got, (Some(1), Some(1), Some(2)));
    }
}
