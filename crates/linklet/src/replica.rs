//! Replication of a slot range to a backup Linklet (the mechanism; carrying the items is the
//! caller's job, as for moves). Used by `ringlet-linked` for services with a backup per unit.
//!
//! # Protocol
//!
//! ```text
//!   owner (serves R)                               backup (does not serve R)
//!   ────────────────                               ─────────────────────────
//!   set_dirty_tracking(true)                       begin_import(R)   R: NotOwned→Importing
//!   every write of a serving slot records its key
//!   in the dirty log (under the shard lock)
//!   seeding:  snapshot_range(R) batches ─────────> apply_replica(puts)   (no Moving mark:
//!             interleaved with                                            writes go on)
//!   rounds:   take_dirty() → (upto, items) ──────> apply_replica(items)  puts and deletes
//!             once applied, every write with seq ≤ upto is at the backup
//!   the owner died:                                commit_import(R)  R: Importing→Serving
//!   the backup is dropped:                         discard_import(R) (no state-loss event)
//! ```
//!
//! **The dirty log.** One set of keys per lock shard, each behind its own mutex, and one
//! write sequence. A write takes the shard's log mutex, draws the next sequence number and
//! inserts its key, all while still holding the shard lock it wrote under (after the change).
//! [`Linklet::take_dirty`] reads the sequence *first*, then empties every shard's set: a write
//! numbered at or below what it read had already drawn its number inside its log mutex, so its
//! key is in the set when the drain locks that mutex. The drain marshals each key's *current*
//! value (a delete if it is gone). So once the items of one drain are applied at the backup,
//! every write numbered `<= upto` is there: the caller acknowledges a request when the drain
//! that covers the request's last write ([`Linklet::take_thread_write_seq`]) was applied.
//!
//! **Why the order of application is enough.** Every item, whether from a snapshot batch or a
//! drain, is the key's value at the moment it was marshalled, and the caller sends and applies
//! items in the order they were marshalled (one sender, one ordered connection). A key written
//! after the snapshot marshalled it is in a later drain, which is applied after; a key the
//! snapshot reaches after a drain shipped it carries a value at least as new. So the backup
//! ends with each key's newest value once the log is drained, whatever the interleaving.
//! `tests/prop_replica.rs` checks this against random interleavings, with real writer threads.
//!
//! **Bound.** At most [`crate::limits::DIRTY_KEYS_PER_SHARD_MAX`] keys wait per shard; an
//! insert or update that finds its shard's log full is refused with [`Error::Backlog`] (the
//! caller retries, like `Moving`). Removes, invalidations and evictions are never refused and
//! may overshoot the bound by the writers in flight.

use std::cell::Cell;
use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use ringlet_types::{key_slot, limits as global, Slot};

use crate::limits::{self, SHARD_COUNT};
use crate::map::{check_range, Item, Linklet, SlotState};
use crate::marshal::{LinkKey, Marshal};
use crate::moving::{BatchItem, Export};
use crate::Error;

thread_local! {
    /// The sequence number of the last write this thread recorded in any dirty log.
    static THREAD_WRITE_SEQ: Cell<u64> = const { Cell::new(0) };
}

/// The per-shard sets of keys written since the last drain (see the module documentation).
pub(crate) struct DirtyLog<K> {
    on: AtomicBool,
    seq: AtomicU64,
    shards: Box<[Mutex<HashSet<K>>]>,
}

impl<K: LinkKey> DirtyLog<K> {
    pub(crate) fn new() -> Self {
        DirtyLog {
            on: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            shards: (0..SHARD_COUNT)
                .map(|_| Mutex::new(HashSet::new()))
                .collect(),
        }
    }

    fn on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Refuse a write whose shard's log is full.
    pub(crate) fn check_room(&self, slot: Slot) -> Result<(), Error> {
        if self.on()
            && self.shards[usize::from(slot) % SHARD_COUNT].lock().len()
                >= limits::DIRTY_KEYS_PER_SHARD_MAX
        {
            return Err(Error::Backlog { slot });
        }
        Ok(())
    }

    /// Record that `key` changed. Call with the slot's shard lock held, after the change.
    pub(crate) fn record(&self, slot: Slot, key: &K) {
        if !self.on() {
            return;
        }
        let mut set = self.shards[usize::from(slot) % SHARD_COUNT].lock();
        // Drawn inside the mutex: see the module documentation for why this order matters.
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        if !set.contains(key) {
            set.insert(key.clone());
        }
        THREAD_WRITE_SEQ.with(|c| c.set(seq));
    }
}

/// One replicated change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplItem {
    /// The key's current value (as in a move batch: version and age travel).
    Put(BatchItem),
    /// The key is gone at the owner (removed, invalidated, evicted).
    Del {
        /// The key's slot.
        slot: Slot,
        /// [`LinkKey::key_bytes`].
        key: Vec<u8>,
    },
}

impl ReplItem {
    /// The item's slot.
    pub fn slot(&self) -> Slot {
        match self {
            ReplItem::Put(b) => b.slot,
            ReplItem::Del { slot, .. } => *slot,
        }
    }

    /// Bytes it is charged (key, value, framing), as a move batch charges.
    pub fn charged_bytes(&self) -> usize {
        match self {
            ReplItem::Put(b) => b.key.len() + b.value.len() + limits::BATCH_ITEM_OVERHEAD_BYTES,
            ReplItem::Del { key, .. } => key.len() + limits::BATCH_ITEM_OVERHEAD_BYTES,
        }
    }
}

/// What one [`Linklet::take_dirty`] drained.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Every write numbered `<= upto` is covered by `items` or by an earlier drain.
    pub upto: u64,
    /// The changed keys of slots this Linklet serves (or is exporting), current values.
    pub items: Vec<ReplItem>,
}

/// What one [`Linklet::apply_replica`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// Puts and deletes applied.
    pub applied: u64,
    /// Items skipped: their slot is not `Importing` here (the backup was dropped or promoted),
    /// or the value is older than a remembered invalidation.
    pub ignored: u64,
}

impl<K: LinkKey, V: Marshal + Send + Sync + 'static> Linklet<K, V> {
    /// Turn the dirty log on or off. On: every write of a serving slot records its key until
    /// [`Linklet::take_dirty`] drains it. Off: the log is emptied.
    pub fn set_dirty_tracking(&self, on: bool) {
        self.dirty.on.store(on, Ordering::Release);
        if !on {
            for s in self.dirty.shards.iter() {
                s.lock().clear();
            }
        }
    }

    /// The sequence number of the last write recorded in the dirty log by the calling thread
    /// (0 if none since the last call), and reset it. A request handler that runs on one
    /// thread calls it before (to reset) and after: a non-zero result is the drain `upto` the
    /// request must wait for before it is answered.
    pub fn take_thread_write_seq() -> u64 {
        THREAD_WRITE_SEQ.with(|c| c.replace(0))
    }

    /// The last write sequence number handed out.
    pub fn write_seq(&self) -> u64 {
        self.dirty.seq.load(Ordering::SeqCst)
    }

    /// Drain the dirty log: the current value of every key written since the last drain
    /// (a [`ReplItem::Del`] for a key that is gone), for slots that are `Serving` or `Moving`
    /// here (keys of slots that left are dropped: their state went with the move).
    ///
    /// # Errors
    /// [`Error::Marshal`] for a value that does not marshal (the rest of the drain is lost
    /// with it: the caller must treat the backup as out of date).
    pub fn take_dirty(&self) -> Result<Dirty, Error> {
        // First the sequence, then the sets: see the module documentation.
        let upto = self.dirty.seq.load(Ordering::SeqCst);
        let mut items = Vec::new();
        for idx in 0..SHARD_COUNT {
            let keys = std::mem::take(&mut *self.dirty.shards[idx].lock());
            for key in keys {
                if let Some(item) = self.replica_item(&key)? {
                    items.push(item);
                }
            }
        }
        Ok(Dirty { upto, items })
    }

    /// Put `keys` back in the dirty log (their shipment failed): they will be drained again,
    /// with their values as they are then. Keys of slots no longer served are dropped.
    pub fn mark_dirty(&self, keys: &[(Slot, K)]) {
        for (slot, key) in keys {
            let shard = self.shard(*slot).read();
            if matches!(shard.state(*slot), SlotState::Serving | SlotState::Moving) {
                self.dirty.record(*slot, key);
            }
        }
    }

    fn replica_item(&self, key: &K) -> Result<Option<ReplItem>, Error> {
        let slot = Self::slot_of(key);
        let shard = self.shard(slot).read();
        if !matches!(shard.state(slot), SlotState::Serving | SlotState::Moving) {
            return Ok(None);
        }
        let Some(e) = shard.entry(slot, key) else {
            return Ok(Some(ReplItem::Del {
                slot,
                key: key.key_bytes().to_vec(),
            }));
        };
        // Recursive read under the shard lock, as a move's export does: an updater holding
        // the entry is inside its closure and finishes without needing anything we hold.
        let object = e.cell.read_recursive();
        let mut value = Vec::new();
        object
            .marshal(&mut value)
            .map_err(|_| Error::Marshal { slot })?;
        Ok(Some(ReplItem::Put(BatchItem {
            slot,
            key: key.key_bytes().to_vec(),
            source_version: e.meta.source_version(),
            age_ms: self.clock.now_ms().saturating_sub(e.meta.validated_at_ms()),
            value,
        })))
    }

    /// A snapshot of `range` to seed a backup: like [`Linklet::export_range`] but without the
    /// `Moving` mark (writes go on; run it with the dirty log on and ship drains after its
    /// batches). Values are marshalled as the iterator is pulled.
    ///
    /// # Errors
    /// [`Error::BadRange`]; [`Error::SlotState`] if a slot is not `Serving` or `Moving`. The
    /// iterator yields [`Error::SlotState`] if a slot stops being served under it.
    pub fn snapshot_range(&self, range: RangeInclusive<Slot>) -> Result<Export<'_, K, V>, Error> {
        check_range(&range)?;
        for s in range.clone() {
            let state = self.shard(s).read().state(s);
            if !matches!(state, SlotState::Serving | SlotState::Moving) {
                return Err(Error::SlotState { slot: s, state });
            }
        }
        Ok(Export::new(self, range, true))
    }

    /// Apply replicated items at a backup, in order. Only slots that are `Importing` here take
    /// them (others are counted as ignored: the caller decides what an ignored item means). A
    /// put replaces the staged value whatever its version (the owner's updates keep the source
    /// version), except one older than a remembered invalidation.
    ///
    /// # Errors
    /// [`Error::BadBatch`] on an item over the size limits or whose key is not of its slot
    /// (nothing applied); [`Error::Marshal`]; [`Error::NoSpace`] / [`Error::TooLarge`].
    pub fn apply_replica(&self, items: &[ReplItem]) -> Result<ApplyOutcome, Error> {
        if items.len() > limits::IMPORT_BATCH_ITEMS_MAX {
            return Err(Error::BadBatch {
                reason: "too many items",
            });
        }
        let mut decoded = Vec::with_capacity(items.len());
        let mut bytes = 0usize;
        for it in items {
            let (slot, key) = match it {
                ReplItem::Put(b) => (b.slot, &b.key),
                ReplItem::Del { slot, key } => (*slot, key),
            };
            bytes = bytes.saturating_add(it.charged_bytes());
            if key.len() > global::KEY_BYTES_MAX as usize
                || bytes > limits::IMPORT_BATCH_BYTES_MAX
                || matches!(it, ReplItem::Put(b) if b.value.len() > global::VALUE_BYTES_MAX as usize)
            {
                return Err(Error::BadBatch {
                    reason: "replica items over the size limits",
                });
            }
            if slot >= ringlet_types::SLOT_COUNT || key_slot(key) != slot {
                return Err(Error::BadBatch {
                    reason: "item key not of its slot",
                });
            }
            let k = K::from_key_bytes(key).ok_or(Error::Marshal { slot })?;
            let v = match it {
                ReplItem::Put(b) => Some((
                    V::unmarshal(&b.value).map_err(|_| Error::Marshal { slot })?,
                    b.source_version,
                    b.age_ms,
                )),
                ReplItem::Del { .. } => None,
            };
            decoded.push((slot, k, v));
        }
        let now_ms = self.clock.now_ms();
        let mut out = ApplyOutcome::default();
        for (slot, key, v) in decoded {
            let applied = match v {
                Some((value, source_version, age_ms)) => {
                    let item = Item {
                        value,
                        source_version,
                        validated_at_ms: now_ms.saturating_sub(age_ms),
                    };
                    match self.install(slot, key, item, &[SlotState::Importing], |_| true) {
                        Ok((installed, _)) => installed,
                        Err(Error::Stale { .. } | Error::SlotState { .. }) => false,
                        Err(Error::NotOwner { .. } | Error::Moving { .. }) => false,
                        Err(e) => return Err(e),
                    }
                }
                None => self.remove_staged(slot, &key),
            };
            if applied {
                out.applied += 1;
            } else {
                out.ignored += 1;
            }
        }
        Ok(out)
    }

    /// Remove a staged key of an importing slot; whether the slot was importing.
    fn remove_staged(&self, slot: Slot, key: &K) -> bool {
        let mut shard = self.shard(slot).write();
        if shard.state(slot) != SlotState::Importing {
            return false;
        }
        if let Some(b) = shard.take(slot, key) {
            self.bytes.fetch_sub(b, Ordering::Relaxed);
            self.entries.fetch_sub(1, Ordering::Relaxed);
        }
        true
    }

    /// Run `f` on the value under `key` whatever its slot's state (a backup's staged copy
    /// included), without serving it: for diagnostics and tests. `None` if absent.
    pub fn peek<R>(&self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        let slot = Self::slot_of(key);
        let shard = self.shard(slot).read();
        let e = shard.entry(slot, key)?;
        let v = e.cell.read_recursive();
        Some(f(&v))
    }

    /// Drop a staged range without telling the application (`Importing → NotOwned`): a backup
    /// copy that is no longer wanted, which the application never served and so never lost.
    /// Returns the entries dropped.
    ///
    /// # Errors
    /// [`Error::BadRange`]; [`Error::SlotState`] if a slot is not `Importing`.
    pub fn discard_import(&self, range: RangeInclusive<Slot>) -> Result<u64, Error> {
        self.transition(&range, SlotState::Importing, SlotState::NotOwned)?;
        Ok(self.drop_range(&range))
    }
}
