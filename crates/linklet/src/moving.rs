//! Moving the values of a slot range between two Linklets (LInK §4.2 "Resharding support":
//! relocate values to the server newly assigned the keys, so resharding causes no state loss).
//! The mechanism only: batches are plain values, and carrying them (RPC, the cluster's peer
//! transport) is the caller's job.
//!
//! # Protocol
//!
//! ```text
//!   source (owns R)                      target (does not own R)
//!   ─────────────────                    ───────────────────────
//!   export_range(R) ── R: Serving→Moving     begin_import(R) ── R: NotOwned→Importing
//!     reads served, writes -> Moving           nothing served, values staged
//!   for batch in export:  ─────────────────>  import_batch(&batch)   (byte-bounded batches,
//!                                                                      pulled one at a time)
//!                                             commit_import(R) ── R: Importing→Serving
//!   router flips R to the target; writers that got `Moving` retry there
//!   finish_export(R) ── R: Moving→NotOwned, source copy dropped
//!
//!   failure before commit:  abort_export(R) ── Moving→Serving (source stays authoritative)
//!                           abort_import(R) ── Importing→NotOwned, staged values dropped,
//!                                              StateLoss{R, MoveFailed} on the target
//! ```
//!
//! Why no update is lost: `export_range` marks each slot `Moving` under its shard lock held
//! exclusive, and updates hold that lock shared for their whole duration (see [`crate::map`]).
//! So every update of the range either finished before the mark (and the export, which reads
//! after the mark, copies its effect) or is refused. Nothing writes the source's copy of `R`
//! after the mark, so the batches are a consistent snapshot even though they are produced
//! lazily, and the target serves only after it holds all of them.
//!
//! Why the stream is pulled: [`Export`] is an iterator producing one batch per `next()`, so at
//! most one batch per move is marshalled ahead of the transport: back-pressure for free, and
//! the memory bound is the batch size ([`crate::Config::move_batch_bytes`]).
//!
//! Each item carries the value's source version and its age, so freshness survives the move,
//! and `import_batch` never replaces a staged value with an older version (a batch replayed
//! after a retry is harmless).

use std::collections::VecDeque;
use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;

use ringlet_types::{key_slot, limits as global, Slot};
use serde::{Deserialize, Serialize};

use crate::limits::{self, SHARD_COUNT};
use crate::map::{check_range, slots_in_shard, Item, Linklet, SlotState};
use crate::marshal::{LinkKey, Marshal};
use crate::notify::{LossReason, StateLoss};
use crate::Error;

/// One batch of a move: marshalled objects of one slot range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// First slot of the move's range.
    pub first: Slot,
    /// Last slot of the move's range.
    pub last: Slot,
    /// Position of this batch in the move, from 0.
    pub seq: u64,
    /// Whether this is the last batch of the move.
    pub done: bool,
    /// The objects.
    pub items: Vec<BatchItem>,
}

/// One object in a [`Batch`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchItem {
    /// The key's slot (checked against the key on import).
    pub slot: Slot,
    /// [`LinkKey::key_bytes`].
    pub key: Vec<u8>,
    /// The system-of-record version.
    pub source_version: u64,
    /// Milliseconds since the value was loaded or revalidated, at export.
    pub age_ms: u64,
    /// [`Marshal::marshal`] bytes.
    pub value: Vec<u8>,
}

impl BatchItem {
    fn charged_bytes(&self) -> usize {
        self.key.len() + self.value.len() + limits::BATCH_ITEM_OVERHEAD_BYTES
    }
}

impl Batch {
    /// Payload bytes (keys, values and per-item framing).
    pub fn bytes(&self) -> usize {
        self.items.iter().map(BatchItem::charged_bytes).sum()
    }
}

/// What one [`Linklet::import_batch`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportOutcome {
    /// Items installed.
    pub installed: u64,
    /// Items skipped because a staged copy with the same or a newer version was there.
    pub skipped: u64,
}

/// The batches of one export, produced lazily; from [`Linklet::export_range`].
pub struct Export<'a, K, V> {
    linklet: &'a Linklet<K, V>,
    range: RangeInclusive<Slot>,
    /// Next slot whose keys are to be listed (u32: it passes the last slot 16383).
    next_slot: u32,
    /// Keys of the current slot not yet marshalled.
    pending: VecDeque<(Slot, K)>,
    /// An item marshalled but left for the next batch because it would overflow this one.
    carry: Option<BatchItem>,
    seq: u64,
    finished: bool,
    /// A replication snapshot (`Linklet::snapshot_range`): slots stay `Serving`, no mark.
    snapshot: bool,
}

impl<'a, K, V> Export<'a, K, V> {
    pub(crate) fn new(
        linklet: &'a Linklet<K, V>,
        range: RangeInclusive<Slot>,
        snapshot: bool,
    ) -> Self {
        Export {
            linklet,
            next_slot: u32::from(*range.start()),
            range,
            pending: VecDeque::new(),
            carry: None,
            seq: 0,
            finished: false,
            snapshot,
        }
    }

    /// Whether `state` lets this stream go on reading its slot.
    fn readable(&self, state: SlotState) -> bool {
        state == SlotState::Moving || (self.snapshot && state == SlotState::Serving)
    }
}

impl<K: LinkKey, V: Marshal + Send + Sync + 'static> Iterator for Export<'_, K, V> {
    type Item = Result<Batch, Error>;

    /// The next batch. Once a batch with `done` is returned, `None`.
    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let batch_bytes_max = self.linklet.config.move_batch_bytes;
        let mut items = Vec::new();
        let mut bytes = 0usize;
        if let Some(item) = self.carry.take() {
            bytes += item.charged_bytes();
            items.push(item);
        }
        // Bounded: each round consumes a pending key or a slot of the range.
        while bytes < batch_bytes_max {
            let next = match self.next_key() {
                Ok(next) => next,
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            };
            let Some((slot, key)) = next else { break };
            let item = match self.marshal(slot, &key) {
                Ok(Some(item)) => item,
                Ok(None) => continue,
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            };
            if !items.is_empty() && bytes + item.charged_bytes() > batch_bytes_max {
                if self.snapshot {
                    // Not carried: writes go on during a snapshot, and a value marshalled now
                    // but sent with the next batch could overwrite a newer one a drain shipped
                    // in between (found by tests/prop_replica.rs). Marshal it again next time.
                    self.pending.push_front((slot, key));
                } else {
                    self.carry = Some(item);
                }
                break;
            }
            bytes += item.charged_bytes();
            items.push(item);
        }
        let done = self.carry.is_none() && self.pending.is_empty() && self.slots_exhausted();
        self.finished = done;
        let batch = Batch {
            first: *self.range.start(),
            last: *self.range.end(),
            seq: self.seq,
            done,
            items,
        };
        self.seq += 1;
        Some(Ok(batch))
    }
}

impl<K: LinkKey, V: Marshal + Send + Sync + 'static> Export<'_, K, V> {
    fn slots_exhausted(&self) -> bool {
        self.next_slot > u32::from(*self.range.end())
    }

    fn next_key(&mut self) -> Result<Option<(Slot, K)>, Error> {
        // Bounded by the range: each round lists one slot.
        loop {
            if let Some(k) = self.pending.pop_front() {
                return Ok(Some(k));
            }
            if self.slots_exhausted() {
                return Ok(None);
            }
            let slot = self.next_slot as Slot;
            self.next_slot += 1;
            let shard = self.linklet.shard(slot).read();
            if !self.readable(shard.state(slot)) {
                // finish_export or abort_export ran while this stream was alive.
                return Err(Error::SlotState {
                    slot,
                    state: shard.state(slot),
                });
            }
            if let Some(table) = shard.tables.get(&slot) {
                self.pending.extend(table.keys().map(|k| (slot, k.clone())));
            }
        }
    }

    fn marshal(&self, slot: Slot, key: &K) -> Result<Option<BatchItem>, Error> {
        let shard = self.linklet.shard(slot).read();
        if !self.readable(shard.state(slot)) {
            // finish_export or abort_export ran while this stream was alive: stop copying.
            return Err(Error::SlotState {
                slot,
                state: shard.state(slot),
            });
        }
        let Some(e) = shard.entry(slot, key) else {
            return Ok(None);
        };
        // No updater can hold the entry (the slot is Moving), and a recursive read does not
        // queue behind one waiting outside the shard lock: this never blocks for long.
        let object = e.cell.read_recursive();
        let mut value = Vec::new();
        object
            .marshal(&mut value)
            .map_err(|_| Error::Marshal { slot })?;
        Ok(Some(BatchItem {
            slot,
            key: key.key_bytes().to_vec(),
            source_version: e.meta.source_version(),
            age_ms: self
                .linklet
                .clock
                .now_ms()
                .saturating_sub(e.meta.validated_at_ms()),
            value,
        }))
    }
}

impl<K: LinkKey, V: Marshal + Send + Sync + 'static> Linklet<K, V> {
    /// Start moving `range` away: every slot goes `Serving → Moving` (reads still served,
    /// writes refused with [`Error::Moving`]), and the returned iterator yields the range's
    /// objects in batches of about [`crate::Config::move_batch_bytes`], the last one with
    /// `done` set. Follow with [`Linklet::finish_export`] once the target committed, or
    /// [`Linklet::abort_export`].
    ///
    /// # Errors
    /// [`Error::BadRange`]; [`Error::SlotState`] if a slot of the range is not `Serving`
    /// (nothing is changed then). The iterator yields [`Error::Marshal`] for a value that does
    /// not marshal, and [`Error::SlotState`] if the export was finished or aborted under it.
    pub fn export_range(&self, range: RangeInclusive<Slot>) -> Result<Export<'_, K, V>, Error> {
        self.transition(&range, SlotState::Serving, SlotState::Moving)?;
        Ok(Export::new(self, range, false))
    }

    /// The move committed at the target: every slot of `range` goes `Moving → NotOwned` and the
    /// source copy is dropped (no state-loss event: the state lives on at the target). Returns
    /// the number of entries dropped.
    ///
    /// # Errors
    /// [`Error::BadRange`]; [`Error::SlotState`] if a slot is not `Moving`.
    pub fn finish_export(&self, range: RangeInclusive<Slot>) -> Result<u64, Error> {
        self.transition(&range, SlotState::Moving, SlotState::NotOwned)?;
        Ok(self.drop_range(&range))
    }

    /// The move failed: every slot of `range` goes `Moving → Serving`. The source never stopped
    /// being authoritative, so nothing is lost.
    ///
    /// # Errors
    /// [`Error::BadRange`]; [`Error::SlotState`] if a slot is not `Moving`.
    pub fn abort_export(&self, range: RangeInclusive<Slot>) -> Result<(), Error> {
        self.transition(&range, SlotState::Moving, SlotState::Serving)
    }

    /// Prepare to receive `range`: `NotOwned → Importing`.
    ///
    /// # Errors
    /// [`Error::BadRange`]; [`Error::SlotState`] if a slot is not `NotOwned`.
    pub fn begin_import(&self, range: RangeInclusive<Slot>) -> Result<(), Error> {
        self.transition(&range, SlotState::NotOwned, SlotState::Importing)
    }

    /// Install one batch, not yet served. Checks the whole batch before installing any of it.
    /// Evicts serving entries if needed to make room.
    ///
    /// # Errors
    /// [`Error::BadBatch`] on a batch over the limits or with an item outside its range;
    /// [`Error::Marshal`] on a key or value that does not unmarshal; [`Error::SlotState`] if the
    /// range is not `Importing`; [`Error::NoSpace`] / [`Error::TooLarge`] if it does not fit
    /// (the mover then aborts).
    pub fn import_batch(&self, batch: &Batch) -> Result<ImportOutcome, Error> {
        let range = batch.first..=batch.last;
        check_range(&range).map_err(|_| Error::BadBatch {
            reason: "slot range out of bounds",
        })?;
        if batch.items.len() > limits::IMPORT_BATCH_ITEMS_MAX {
            return Err(Error::BadBatch {
                reason: "too many items",
            });
        }
        let mut bytes = 0usize;
        let mut decoded = Vec::with_capacity(batch.items.len());
        for it in &batch.items {
            if it.key.len() > global::KEY_BYTES_MAX as usize
                || it.value.len() > global::VALUE_BYTES_MAX as usize
            {
                return Err(Error::BadBatch {
                    reason: "key or value over the size limits",
                });
            }
            bytes = bytes.saturating_add(it.charged_bytes());
            if bytes > limits::IMPORT_BATCH_BYTES_MAX {
                return Err(Error::BadBatch {
                    reason: "batch over IMPORT_BATCH_BYTES_MAX",
                });
            }
            if !range.contains(&it.slot) || key_slot(&it.key) != it.slot {
                return Err(Error::BadBatch {
                    reason: "item outside the batch's slots",
                });
            }
            let key = K::from_key_bytes(&it.key).ok_or(Error::Marshal { slot: it.slot })?;
            let value = V::unmarshal(&it.value).map_err(|_| Error::Marshal { slot: it.slot })?;
            decoded.push((it.slot, key, value, it.source_version, it.age_ms));
        }
        let now_ms = self.clock.now_ms();
        let mut outcome = ImportOutcome::default();
        for (slot, key, value, source_version, age_ms) in decoded {
            let item = Item {
                value,
                source_version,
                validated_at_ms: now_ms.saturating_sub(age_ms),
            };
            let installed = match self.install(slot, key, item, &[SlotState::Importing], |staged| {
                staged < source_version
            }) {
                Ok((installed, _)) => installed,
                // The system of record announced a newer version here while the value was in
                // flight: the old copy is not installed (the application reloads on a miss).
                Err(Error::Stale { .. }) => false,
                Err(e) => return Err(e),
            };
            if installed {
                outcome.installed += 1;
            } else {
                outcome.skipped += 1;
            }
        }
        Ok(outcome)
    }

    /// Serve the imported range: `Importing → Serving`. Returns the entries now served.
    ///
    /// # Errors
    /// [`Error::BadRange`]; [`Error::SlotState`] if a slot is not `Importing`.
    pub fn commit_import(&self, range: RangeInclusive<Slot>) -> Result<u64, Error> {
        self.transition(&range, SlotState::Importing, SlotState::Serving)?;
        Ok(self.count_range(&range))
    }

    /// Give up an import: `Importing → NotOwned`, staged values dropped, and
    /// `StateLoss { range, MoveFailed }` emitted (the application on this side was about to
    /// serve that state and now will not). Returns the entries dropped.
    ///
    /// # Errors
    /// [`Error::BadRange`]; [`Error::SlotState`] if a slot is not `Importing`.
    pub fn abort_import(&self, range: RangeInclusive<Slot>) -> Result<u64, Error> {
        self.transition(&range, SlotState::Importing, SlotState::NotOwned)?;
        let dropped = self.drop_range(&range);
        self.notifier.emit(StateLoss {
            slots: range,
            reason: LossReason::MoveFailed,
        });
        Ok(dropped)
    }

    /// Move every slot of `range` from `from` to `to`, shard by shard, each under its shard
    /// lock held exclusive. If a slot is not in `from`, the slots already changed are put
    /// back and nothing has changed.
    pub(crate) fn transition(
        &self,
        range: &RangeInclusive<Slot>,
        from: SlotState,
        to: SlotState,
    ) -> Result<(), Error> {
        check_range(range)?;
        let mut done = 0;
        let mut failed = None;
        'shards: for idx in 0..SHARD_COUNT {
            let mut shard = self.shards[idx].write();
            let bad = slots_in_shard(range, idx).find(|&s| shard.state(s) != from);
            if let Some(slot) = bad {
                failed = Some(Error::SlotState {
                    slot,
                    state: shard.state(slot),
                });
                break 'shards;
            }
            for s in slots_in_shard(range, idx) {
                shard.set_state(s, to);
            }
            done = idx + 1;
        }
        let Some(err) = failed else { return Ok(()) };
        for idx in 0..done {
            let mut shard = self.shards[idx].write();
            for s in slots_in_shard(range, idx) {
                shard.set_state(s, from);
            }
        }
        Err(err)
    }

    pub(crate) fn drop_range(&self, range: &RangeInclusive<Slot>) -> u64 {
        let mut dropped = 0;
        for idx in 0..SHARD_COUNT {
            let mut shard = self.shards[idx].write();
            for s in slots_in_shard(range, idx) {
                let (n, b) = shard.drop_slot(s);
                self.entries.fetch_sub(n, Ordering::Relaxed);
                self.bytes.fetch_sub(b, Ordering::Relaxed);
                dropped += n;
            }
        }
        dropped
    }

    fn count_range(&self, range: &RangeInclusive<Slot>) -> u64 {
        let mut n = 0;
        for idx in 0..SHARD_COUNT {
            let shard = self.shards[idx].read();
            for s in slots_in_shard(range, idx) {
                n += shard.tables.get(&s).map_or(0, |t| t.len() as u64);
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::clock::ManualClock;
    use crate::map::Config;
    use crate::notify::LossReason;

    type L = Linklet<String, Vec<u32>>;

    fn pair(batch_bytes: usize) -> (L, L) {
        let source = L::new(Config {
            move_batch_bytes: batch_bytes,
            ..Config::default()
        })
        .unwrap();
        let target = L::new(Config {
            slots_owned: vec![],
            ..Config::default()
        })
        .unwrap();
        (source, target)
    }

    fn keys_in(range: &RangeInclusive<Slot>, n: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("user:{i}"))
            .filter(|k| range.contains(&key_slot(k.as_bytes())))
            .take(n)
            .collect()
    }

    fn move_all(source: &L, target: &L, range: RangeInclusive<Slot>) -> Vec<Batch> {
        target.begin_import(range.clone()).unwrap();
        let batches: Vec<Batch> = source
            .export_range(range.clone())
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for b in &batches {
            target.import_batch(b).unwrap();
        }
        target.commit_import(range.clone()).unwrap();
        source.finish_export(range).unwrap();
        batches
    }

    #[test]
    fn a_move_carries_values_versions_and_age_in_bounded_batches() {
        let clock = Arc::new(ManualClock::new(10_000));
        let (source, target) = pair(2_000);
        let source = source.with_clock(clock.clone());
        let target = target.with_clock(clock.clone());
        let range: RangeInclusive<Slot> = 1000..=3000;
        let keys = keys_in(&range, 300);
        for (i, key) in keys.iter().enumerate() {
            source
                .insert(key.clone(), vec![i as u32; i % 20], i as u64)
                .unwrap();
        }
        // Keys outside the range stay.
        source.insert("elsewhere".to_owned(), vec![1], 1).unwrap();
        clock.advance_ms(250);

        let batches = move_all(&source, &target, range.clone());
        assert!(batches.len() > 5, "{} batches", batches.len());
        for (i, b) in batches.iter().enumerate() {
            assert_eq!(b.seq, i as u64);
            assert_eq!(b.done, i == batches.len() - 1);
            assert!(
                b.bytes() <= 2_000 || b.items.len() == 1,
                "batch {i}: {} bytes",
                b.bytes()
            );
        }
        assert_eq!(batches.iter().map(|b| b.items.len()).sum::<usize>(), 300);
        for (i, key) in keys.iter().enumerate() {
            let r = target.get(key).unwrap().unwrap();
            assert_eq!(*r, vec![i as u32; i % 20]);
            assert_eq!(r.source_version(), i as u64);
            assert_eq!(
                source.get(key).err(),
                Some(Error::NotOwner {
                    slot: key_slot(key.as_bytes())
                })
            );
        }
        // Age travelled: 250 ms old at export, so a 200 ms bound misses and a 300 ms bound hits.
        let k0 = &keys[0];
        assert!(target
            .get_fresh(k0, std::time::Duration::from_millis(200))
            .unwrap()
            .is_none());
        assert!(target
            .get_fresh(k0, std::time::Duration::from_millis(300))
            .unwrap()
            .is_some());
        assert_eq!(source.stats().entries, 1);
        assert_eq!(target.stats().entries, 300);
        source.check_invariants();
        target.check_invariants();
    }

    #[test]
    fn an_empty_range_moves_as_one_done_batch() {
        let (source, target) = pair(1024);
        let batches = move_all(&source, &target, 7..=7);
        assert_eq!(batches.len(), 1);
        assert!(batches[0].done && batches[0].items.is_empty());
        assert_eq!(target.slot_state(7), SlotState::Serving);
        assert_eq!(source.slot_state(7), SlotState::NotOwned);
    }

    #[test]
    fn writes_are_refused_and_reads_served_while_moving() {
        let (source, _) = pair(1024);
        let key = "{m}k".to_owned();
        let slot = key_slot(key.as_bytes());
        source.insert(key.clone(), vec![1], 1).unwrap();
        let export = source.export_range(slot..=slot).unwrap();
        assert_eq!(source.slot_state(slot), SlotState::Moving);
        assert_eq!(
            source.update(&key, |v| v.push(2)),
            Err(Error::Moving { slot })
        );
        assert_eq!(
            source.insert(key.clone(), vec![], 2),
            Err(Error::Moving { slot })
        );
        assert_eq!(source.remove(&key), Err(Error::Moving { slot }));
        assert_eq!(source.invalidate(&key), Err(Error::Moving { slot }));
        assert_eq!(*source.get(&key).unwrap().unwrap(), vec![1]);
        // A second export of a moving slot is refused.
        assert!(matches!(
            source.export_range(slot..=slot),
            Err(Error::SlotState { .. })
        ));
        drop(export);
        source.abort_export(slot..=slot).unwrap();
        // Abort: the source is authoritative again, nothing lost.
        source.update(&key, |v| v.push(2)).unwrap();
        assert_eq!(*source.get(&key).unwrap().unwrap(), vec![1, 2]);
    }

    #[test]
    fn finishing_the_export_under_a_live_stream_stops_it() {
        let (source, _) = pair(64);
        for k in keys_in(&(0..=100), 50) {
            source.insert(k, vec![0; 8], 0).unwrap();
        }
        let mut export = source.export_range(0..=100).unwrap();
        assert!(export.next().unwrap().is_ok());
        source.abort_export(0..=100).unwrap();
        assert!(matches!(export.next(), Some(Err(Error::SlotState { .. }))));
        assert!(export.next().is_none());
    }

    #[test]
    fn an_aborted_import_drops_staged_values_and_reports_move_failed() {
        let (source, target) = pair(1024);
        let range: RangeInclusive<Slot> = 0..=500;
        for k in keys_in(&range, 20) {
            source.insert(k, vec![1, 2, 3], 4).unwrap();
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        target
            .on_state_loss(move |l| sink.lock().unwrap().push(l.clone()))
            .unwrap();
        target.begin_import(range.clone()).unwrap();
        let mut export = source.export_range(range.clone()).unwrap();
        let first = export.next().unwrap().unwrap();
        target.import_batch(&first).unwrap();
        // Staged values are not served.
        let key = String::from_key_bytes(&first.items[0].key).unwrap();
        assert!(matches!(target.get(&key), Err(Error::NotOwner { .. })));
        assert_eq!(
            target.abort_import(range.clone()).unwrap(),
            first.items.len() as u64
        );
        source.abort_export(range.clone()).unwrap();
        assert_eq!(target.stats().entries, 0);
        assert_eq!(source.stats().entries, 20);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![StateLoss {
                slots: range,
                reason: LossReason::MoveFailed
            }]
        );
        target.check_invariants();
    }

    #[test]
    fn a_replayed_batch_never_overwrites_newer_staged_values() {
        let (source, target) = pair(1 << 20);
        let key = "{r}k".to_owned();
        let slot = key_slot(key.as_bytes());
        source.insert(key.clone(), vec![1], 3).unwrap();
        target.begin_import(slot..=slot).unwrap();
        let batch = source
            .export_range(slot..=slot)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(
            target.import_batch(&batch).unwrap(),
            ImportOutcome {
                installed: 1,
                skipped: 0
            }
        );
        assert_eq!(
            target.import_batch(&batch).unwrap(),
            ImportOutcome {
                installed: 0,
                skipped: 1
            }
        );
        let mut older = batch.clone();
        older.items[0].source_version = 2;
        older.items[0].value = b"[9]".to_vec();
        assert_eq!(target.import_batch(&older).unwrap().skipped, 1);
        target.commit_import(slot..=slot).unwrap();
        assert_eq!(*target.get(&key).unwrap().unwrap(), vec![1]);
    }

    #[test]
    fn an_invalidation_during_a_move_keeps_the_old_copy_out_of_the_target() {
        let (source, target) = pair(1 << 20);
        let (a, b) = ("{inv}a".to_owned(), "{inv}b".to_owned());
        let slot = key_slot(a.as_bytes());
        source.insert(a.clone(), vec![1], 1).unwrap();
        source.insert(b.clone(), vec![2], 1).unwrap();
        target.begin_import(slot..=slot).unwrap();
        let batch = source
            .export_range(slot..=slot)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        // The change to `a` (v2) is announced while the batch is in flight: the source refuses
        // (moving) and the target remembers it, so the batch's v1 of `a` is not installed.
        assert_eq!(
            source.invalidate_if_older(&a, 2),
            Err(Error::Moving { slot })
        );
        assert_eq!(target.invalidate_if_older(&a, 2), Ok(false));
        assert_eq!(
            target.import_batch(&batch).unwrap(),
            ImportOutcome {
                installed: 1,
                skipped: 1
            }
        );
        // Announced after the batch landed: the staged copy is dropped.
        assert_eq!(target.invalidate_if_older(&b, 2), Ok(true));
        target.commit_import(slot..=slot).unwrap();
        source.finish_export(slot..=slot).unwrap();
        assert!(target.get(&a).unwrap().is_none());
        assert!(target.get(&b).unwrap().is_none());
        target.check_invariants();
    }

    #[test]
    fn bad_batches_are_refused_whole() {
        let (source, target) = pair(1 << 20);
        let key = "{b}k".to_owned();
        let slot = key_slot(key.as_bytes());
        source.insert(key.clone(), vec![1], 3).unwrap();
        let batch = source
            .export_range(slot..=slot)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        // Not importing yet.
        assert!(matches!(
            target.import_batch(&batch),
            Err(Error::SlotState { .. })
        ));
        target.begin_import(slot..=slot).unwrap();
        let mut wrong_slot = batch.clone();
        wrong_slot.items[0].key = b"not-in-this-slot".to_vec();
        assert!(matches!(
            target.import_batch(&wrong_slot),
            Err(Error::BadBatch { .. })
        ));
        let mut garbage = batch.clone();
        garbage.items[0].value = b"{not json".to_vec();
        assert_eq!(target.import_batch(&garbage), Err(Error::Marshal { slot }));
        let mut bad_range = batch.clone();
        bad_range.last = 20_000;
        assert!(matches!(
            target.import_batch(&bad_range),
            Err(Error::BadBatch { .. })
        ));
        assert_eq!(target.stats().entries, 0);
    }

    #[test]
    fn range_transitions_are_all_or_nothing() {
        let (source, _) = pair(1024);
        // Slot 200 is already moving: exporting 0..=300 fails and leaves 0..=300 as it was.
        let _e = source.export_range(200..=200).unwrap();
        assert_eq!(
            source.export_range(0..=300).err(),
            Some(Error::SlotState {
                slot: 200,
                state: SlotState::Moving
            })
        );
        for s in (0..=300).filter(|&s| s != 200) {
            assert_eq!(source.slot_state(s), SlotState::Serving, "slot {s}");
        }
        assert_eq!(
            source.commit_import(0..=3).err(),
            Some(Error::SlotState {
                slot: 0,
                state: SlotState::Serving
            })
        );
        assert_eq!(
            source.finish_export(RangeInclusive::new(9, 3)).err(),
            Some(Error::BadRange)
        );
    }
}
