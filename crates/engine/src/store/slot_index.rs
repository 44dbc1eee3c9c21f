//! The per-slot index: scans of one slot in a stable order, and per-(slot, memgest) digests,
//! for a cluster node's replica core (pull pages, repair key lists, resharding, GETKEYSINSLOT).
//!
//! # Why it exists and what it costs
//! The hash index has no per-slot structure: keys of one slot are spread over the whole table,
//! so listing a slot means walking every bucket and reading every key (O(all keys) per page).
//! A cluster node lists slots all the time (a replica catching up pulls every slot of its
//! ranges page by page; repair compares key lists of mismatched slots every interval), so it
//! turns this index on ([`crate::Engine::enable_slot_index`]); a single node does not pay it.
//!
//! ```text
//!   order:   CodeSet (sorted u64 in 2 KiB chunks) of
//!            slot_order_code(key) = [slot 14][low 50 bits of key_hash],
//!            one u64 per published entry (two keys of one slot with the same 50 hash bits
//!            share one code: a code is dropped only when no entry of it is left)
//!   digests: BTreeMap<(slot, memgest), (xor of hash::entry_digest, count)>   per nonempty pair
//! ```
//!
//! About 10 bytes per entry (`code_set.rs`: chunks ~80 % full; the `BTreeSet<u64>` it replaced
//! in session 19 took ~20, measured) against ~115 for the key → metadata B-tree the replica
//! store kept before (issue 16 item 3, docs/design/cluster-memory.md). Nothing here names a key: the key bytes, version, memgest,
//! expiry and value are the index's and the data entries' own.
//!
//! # How a scan finds the keys of a code
//! A code keeps the low 50 bits of the key hash, which include the low 32 bits that pick the
//! home bucket (`Layout::home`), so every key of a code homes in the same bucket of any table
//! size: a scan probes that one neighbourhood (the home bucket and its recorded reach) and
//! keeps the entries whose key has the code. Keys of one code are sorted by their bytes.
//!
//! # What a concurrent insert or an index upsize does to a paged scan
//! A page cursor is a key (scan order is `(code, key)`, a function of the key alone), not a
//! table position: the next page starts strictly after the cursor key in that order whether
//! or not the key still exists, and whatever the table looks like now. A key present from the
//! first page to the last is therefore returned exactly once; a key inserted meanwhile is
//! returned iff it sorts after the cursor when its page is read. An upsize moves index
//! entries between tables but changes no code (the order set is keyed by hash bits, not by
//! bucket), and the readers' table stays complete during a migration, which is the one probed.
//! (`tests/slot_scan.rs` checks this under random inserts, deletes and upsizes.)

use super::code_set::CodeSet;
use super::{Found, Store};
use crate::api::{Entry, EntryHead};
use crate::hash::{entry_digest, key_hash, slot_order_code, SLOT_ORDER_HASH_BITS};
use crate::layout::*;
use ringlet_types::{key_slot, MemgestId, Version};
use std::collections::BTreeMap;

/// See the module comment.
#[derive(Default)]
pub(super) struct SlotIndex {
    order: CodeSet,
    digests: BTreeMap<(u16, u16), (u64, u64)>,
}

impl SlotIndex {
    fn toggle(&mut self, slot: u16, key: &[u8], version: Version, memgest: u16, add: bool) {
        let d = entry_digest(key, version, memgest, true);
        let e = self.digests.entry((slot, memgest)).or_insert((0, 0));
        e.0 ^= d;
        if add {
            e.1 += 1;
        } else {
            debug_assert!(e.1 > 0, "slot digest count underflow");
            e.1 = e.1.saturating_sub(1);
            if e.1 == 0 {
                debug_assert_eq!(e.0, 0);
                self.digests.remove(&(slot, memgest));
            }
        }
    }
}

/// Codes whose home bucket a slot walk starts loading ahead of the one it probes.
const SCAN_PREFETCH_AHEAD: usize = 8;

/// First code of `slot` (its hash bits all zero).
fn slot_base(slot: u16) -> u64 {
    u64::from(slot) << SLOT_ORDER_HASH_BITS
}

impl Store {
    /// Start keeping the per-slot index; built from the readers' table if it holds entries.
    pub fn enable_slot_index(&mut self) {
        if self.slot_index.is_some() {
            return;
        }
        let mut ix = SlotIndex::default();
        let t = self.table;
        for b in 0..t.buckets() {
            for i in 0..BUCKET_ENTRIES {
                let w0 = self.index.load(Self::ie_off(t, b, i));
                if w0 == 0 {
                    continue;
                }
                let Some(key) = self.read_key(ie_location(w0)) else {
                    continue;
                };
                let (version, _, _, _) = self.header(ie_location(w0));
                ix.order.insert(slot_order_code(&key));
                ix.toggle(
                    key_slot(&key),
                    &key,
                    version,
                    self.memgest_at(ie_location(w0)),
                    true,
                );
            }
        }
        self.slot_index = Some(ix);
    }

    pub fn slot_index_enabled(&self) -> bool {
        self.slot_index.is_some()
    }

    /// Accounting hook: `key` was published (`add`) or unlinked (`!add`, already gone from
    /// the readers' table).
    pub(super) fn slot_index_account(
        &mut self,
        key: &[u8],
        slot: u16,
        memgest: u16,
        v: Version,
        add: bool,
    ) {
        if self.slot_index.is_none() {
            return;
        }
        let code = slot_order_code(key);
        // A code shared with another key of the slot (50-bit hash collision) stays.
        let keep = !add && self.code_in_use(code);
        if let Some(ix) = self.slot_index.as_mut() {
            ix.toggle(slot, key, v, memgest, add);
            if add {
                ix.order.insert(code);
            } else if !keep {
                ix.order.remove(code);
            }
        }
    }

    /// Accounting hook: `key`'s entry was replaced in place (new version and maybe memgest).
    pub(super) fn slot_index_replace(
        &mut self,
        key: &[u8],
        slot: u16,
        old: (u16, Version),
        new: (u16, Version),
    ) {
        if let Some(ix) = self.slot_index.as_mut() {
            ix.toggle(slot, key, old.1, old.0, false);
            ix.toggle(slot, key, new.1, new.0, true);
        }
    }

    /// Accounting hook: everything was erased.
    pub(super) fn slot_index_clear(&mut self) {
        if let Some(ix) = self.slot_index.as_mut() {
            *ix = SlotIndex::default();
        }
    }

    /// Visit the published entries of the readers' table whose key has `code`, in table
    /// order, with the key's hash.
    ///
    /// This is every per-slot scan's inner loop (a copy page, a wipe, a repair key list all
    /// come here once per code), so it does as little per neighbour as it can: each key is
    /// hashed once, and its slot computed only when the hash bits match; and a neighbour whose
    /// index tag differs from the code's (hash bits 42-49, which the code keeps since format
    /// 6) is skipped unread, so ~1 in 256 strangers is read. Session 18: reading and hashing
    /// every neighbour's key made a move's copy pages and the old owner's wipe ~30 % of a
    /// move's node CPU, and the copy 2x the CPU per MB it took when the replica store had its
    /// own key index; format 5's tag (bits 56-63, outside the code) could not filter them.
    fn code_probe(&self, code: u64, mut f: impl FnMut(Found, Vec<u8>)) {
        let want = code & crate::hash::SLOT_ORDER_HASH_MASK;
        let slot = (code >> SLOT_ORDER_HASH_BITS) as u16;
        // The home bucket depends on the low 32 hash bits only, and the tag on bits 42-49
        // (format 6): the code keeps both, so only neighbours with this tag are read.
        let tag = tag_of(want);
        self.home_entries(self.table.home(code), Some(tag), |found, h, key| {
            if h & crate::hash::SLOT_ORDER_HASH_MASK == want && key_slot(&key) == slot {
                f(found, key);
            }
        });
    }

    /// Start loading the two lines of `code`'s home bucket in the readers' table (a hint).
    fn prefetch_home(&self, code: u64) {
        let t = self.table;
        let off = t.bucket_offset(t.home(code));
        if off.saturating_add(BUCKET_BYTES) <= self.index.len() as u64 {
            let p = self.index.base().wrapping_add(off as usize);
            crate::read::prefetch(p);
            crate::read::prefetch(p.wrapping_add(64));
        }
    }

    /// Published entries of the readers' table whose key has `code`, sorted by key.
    fn code_entries(&self, code: u64) -> Vec<(Vec<u8>, Found)> {
        let mut out = Vec::new();
        self.code_probe(code, |f, key| out.push((key, f)));
        if out.len() > 1 {
            out.sort_by(|a, b| a.0.cmp(&b.0));
        }
        out
    }

    fn code_in_use(&self, code: u64) -> bool {
        let mut found = false;
        self.code_probe(code, |_f, _key| found = true);
        found
    }

    fn head_of(&self, f: &Found) -> EntryHead {
        let m = self.meta_of(f);
        EntryHead {
            version: m.version,
            memgest: m.memgest,
            expire_at_ms: m.expire_at_ms,
            kind: m.kind,
        }
    }

    /// The value bytes of the entry `f` points at: the aligned words that cover them, read in
    /// one pass, then the few bytes before the value (it starts mid-word after a short
    /// header) shifted out. Not an image of the whole entry: a copy page reads every value
    /// of its slots.
    fn value_of(&self, f: &Found) -> Option<Vec<u8>> {
        let loc = ie_location(f.w0);
        let (_, kl, vl, _) = self.header(loc);
        let hdr = de_header_bytes(self.data.load(u64::from(loc) * UNIT_BYTES + 16));
        let start = u64::from(loc) * UNIT_BYTES + hdr as u64 + u64::from(kl);
        let end = start + u64::from(vl);
        let (lo, hi) = (start & !7, (end + 7) & !7);
        if hi > self.data.len() as u64 {
            return None;
        }
        let mut value = Vec::with_capacity((hi - lo) as usize);
        self.data.read_bytes(lo, (hi - lo) as usize, &mut value);
        let skip = (start - lo) as usize;
        value.copy_within(skip..skip + vl as usize, 0);
        value.truncate(vl as usize);
        Some(value)
    }

    /// Visit published entries of `slot` in scan order, strictly after `after`, until `f`
    /// returns false. Without the index (never enabled), one walk of the whole table sorted
    /// afterwards: correct, O(all keys).
    fn slot_walk(
        &self,
        slot: u16,
        after: Option<&[u8]>,
        mut f: impl FnMut(Vec<u8>, &Found) -> bool,
    ) {
        let after_code = after.map(slot_order_code);
        let Some(ix) = self.slot_index.as_ref() else {
            let mut all: Vec<(u64, Vec<u8>, Found)> = Vec::new();
            let t = self.table;
            for b in 0..t.buckets() {
                self.home_entries(b, None, |fd, _h, key| {
                    if key_slot(&key) == slot {
                        all.push((slot_order_code(&key), key, fd));
                    }
                });
            }
            all.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
            for (code, key, fd) in all {
                if let (Some(ac), Some(a)) = (after_code, after) {
                    if (code, key.as_slice()) <= (ac, a) {
                        continue;
                    }
                }
                if !f(key, &fd) {
                    return;
                }
            }
            return;
        };
        let base = slot_base(slot);
        let lo = match after_code {
            // A cursor of another slot: start at the slot's beginning or past its end.
            Some(ac) => ac.clamp(base, base | crate::hash::SLOT_ORDER_HASH_MASK),
            None => base,
        };
        let hi = base | crate::hash::SLOT_ORDER_HASH_MASK;
        if after_code.is_some_and(|ac| ac > hi) {
            return;
        }
        // The codes' home buckets are random lines of the index: start loading a few codes
        // ahead of the probe so that their misses overlap (a copy page probes thousands).
        let mut ahead = ix.order.range(lo, hi);
        for c in ahead.by_ref().take(SCAN_PREFETCH_AHEAD) {
            self.prefetch_home(c);
        }
        for code in ix.order.range(lo, hi) {
            if let Some(c) = ahead.next() {
                self.prefetch_home(c);
            }
            for (key, fd) in self.code_entries(code) {
                if let (Some(ac), Some(a)) = (after_code, after) {
                    if code == ac && key.as_slice() <= a {
                        continue;
                    }
                }
                if !f(key, &fd) {
                    return;
                }
            }
        }
    }

    /// Up to `limit` published entries of `slot` after `after` in scan order, with values.
    pub fn slot_scan(
        &self,
        slot: u16,
        after: Option<&[u8]>,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Entry)>,
    ) {
        let mut n = 0usize;
        if limit == 0 {
            return;
        }
        self.slot_walk(slot, after, |key, f| {
            let h = self.head_of(f);
            if let Some(value) = self.value_of(f) {
                out.push((
                    key,
                    Entry {
                        value,
                        version: h.version,
                        memgest: h.memgest,
                        expire_at_ms: h.expire_at_ms,
                        kind: h.kind,
                    },
                ));
                n += 1;
            }
            n < limit
        });
    }

    /// [`Store::slot_scan`] without the values.
    pub fn slot_scan_heads(
        &self,
        slot: u16,
        after: Option<&[u8]>,
        limit: usize,
        out: &mut Vec<(Vec<u8>, EntryHead)>,
    ) {
        let mut n = 0usize;
        if limit == 0 {
            return;
        }
        self.slot_walk(slot, after, |key, f| {
            out.push((key, self.head_of(f)));
            n += 1;
            n < limit
        });
    }

    /// Keys of `slot` from cursor `cursor` (0: the start; else the hash bits of the first code
    /// to visit), whole codes at a time, at least `count` keys unless the slot ends. Returns
    /// the next cursor, 0 when done. Needs the index (the caller checks).
    pub fn slot_index_keys(
        &self,
        slot: u16,
        cursor: u64,
        count: usize,
        out: &mut Vec<Vec<u8>>,
    ) -> u64 {
        let Some(ix) = self.slot_index.as_ref() else {
            return 0;
        };
        let base = slot_base(slot);
        let lo = base | (cursor & crate::hash::SLOT_ORDER_HASH_MASK);
        let hi = base | crate::hash::SLOT_ORDER_HASH_MASK;
        let want = out.len().saturating_add(count.max(1));
        for code in ix.order.range(lo, hi) {
            for (key, _) in self.code_entries(code) {
                out.push(key);
            }
            if out.len() >= want {
                // Next code's hash bits; never 0 (the cursor that means "done"), and never
                // past the mask: the last code ends the walk below instead.
                let next = (code & crate::hash::SLOT_ORDER_HASH_MASK) + 1;
                return if code == hi { 0 } else { next };
            }
        }
        0
    }

    /// XOR of [`entry_digest`] over the published entries of `slot` whose memgest passes
    /// `filter` (0 without the index).
    pub fn slot_index_digest(&self, slot: u16, filter: &dyn Fn(MemgestId) -> bool) -> u64 {
        self.slot_index.as_ref().map_or(0, |ix| {
            ix.digests
                .range((slot, 0)..=(slot, u16::MAX))
                .filter(|((_, m), _)| filter(MemgestId(*m)))
                .fold(0, |acc, (_, (d, _))| acc ^ d)
        })
    }

    /// Slots of `first..=last` holding a published entry, ascending (empty without the
    /// index).
    pub fn slot_index_nonempty(&self, first: u16, last: u16) -> Vec<u16> {
        let Some(ix) = self.slot_index.as_ref() else {
            return Vec::new();
        };
        if first > last {
            return Vec::new();
        }
        let mut v: Vec<u16> = ix
            .digests
            .range((first, 0)..=(last, u16::MAX))
            .map(|((s, _), _)| *s)
            .collect();
        v.dedup();
        v
    }

    /// Recompute the index from the readers' table and compare (tests; O(entries)).
    pub(super) fn check_slot_index(&self) -> Result<(), String> {
        let Some(ix) = self.slot_index.as_ref() else {
            return Ok(());
        };
        let mut want = SlotIndex::default();
        let t = self.table;
        for b in 0..t.buckets() {
            for i in 0..BUCKET_ENTRIES {
                let w0 = self.index.load(Self::ie_off(t, b, i));
                if w0 == 0 {
                    continue;
                }
                let key = self.read_key(ie_location(w0)).ok_or("unreadable key")?;
                let (version, _, _, _) = self.header(ie_location(w0));
                want.order.insert(slot_order_code(&key));
                want.toggle(
                    key_slot(&key),
                    &key,
                    version,
                    self.memgest_at(ie_location(w0)),
                    true,
                );
                debug_assert_eq!(key_hash(&key) as u32, slot_order_code(&key) as u32);
            }
        }
        ix.order.check()?;
        if want.order != ix.order {
            return Err(format!(
                "slot index: {} codes, table has {}",
                ix.order.len(),
                want.order.len()
            ));
        }
        if want.digests != ix.digests {
            return Err("slot index: per-(slot, memgest) digests drifted".into());
        }
        Ok(())
    }
}
