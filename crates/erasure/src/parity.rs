//! The parity store of one parity holder for one ec memgest on one placement group.
//!
//! Holder `q` (the PG's q-th redundant node) keeps parity `q` of every codeword, as chunks
//! indexed `stripe · (l/K) + codeword` ([`crate::Layout::parity_chunk`]), allocated lazily:
//! a chunk nobody wrote is all zeros, which is the parity of all-zero data. Because a
//! codeword mixes chunks of all `s` data nodes, the store is per PG, not per arena owner.
//!
//! It folds each [`ParityUpdate`] in exactly once: for every per-chunk piece of the delta,
//! `chunk[byte..] ^= G[q][position] · delta_piece`. Updates from one owner carry consecutive
//! sequence numbers; a repeated one is a no-op (`Duplicate`), a gap is an error
//! ([`Error::SeqGap`]) because XOR deltas are not idempotent and a lost one leaves parity
//! wrong until the holder is resynchronised. Updates from different owners commute (XOR), so
//! no order is needed between owners.
//!
//! It also keeps the replicated key metadata `key → (owner, offset, len, version)`, which a
//! new coordinator reads back after a failure before serving (DESIGN.md "Takeover").
//!
//! Every update is validated completely before anything is modified, so a rejected update
//! leaves the store unchanged.

use crate::arena::{Accounting, KeyMeta, MetaChange, PackedMeta, ParityUpdate, META_RECORD_BYTES};
use crate::chunk_map::ChunkMap;
use crate::codec::Codec;
use crate::error::Error;
use crate::layout::{Layout, ParityChunk};
use crate::small_key::SmallKey;
use ringlet_types::limits::{KEY_BYTES_MAX, VALUE_BYTES_MAX};
use ringlet_types::Version;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Outcome of [`ParityStore::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Folded in.
    Applied,
    /// Already applied earlier (same or lower sequence number): nothing done. Safe to ack.
    Duplicate,
}

/// Parity chunks and key metadata of one holder. `Clone` (the codec is shared) so a
/// simulator can snapshot it.
#[derive(Clone, Debug)]
pub struct ParityStore {
    layout: Layout,
    codec: Arc<Codec>,
    holder: u32,
    chunks: BTreeMap<u64, Vec<u8>>,
    /// Key metadata per owner (data node index): each owner's arena is described on its
    /// own. One map for all owners lost keys: a slot span moved between two data nodes of
    /// the same group is re-encoded at the same version in the new owner's arena, so a
    /// key-only map ignored the new owner's put (not newer) and then dropped the key on the
    /// old owner's retire (simulator seed 29063: acknowledged write lost after the next
    /// takeover of the new owner).
    /// Keys are `SmallKey`s: short keys inline in the map slot (cluster-memory.md).
    /// Values are [`PackedMeta`]: the owner is the map's index.
    meta: Vec<ChunkMap<SmallKey, PackedMeta>>,
    /// Last applied sequence number per owner (data node index).
    applied_seq: Vec<u64>,
    /// Arena size the owners use: updates beyond it are refused, so a faulty or hostile
    /// peer cannot make this holder materialise parity for arbitrary far offsets.
    arena_capacity: u64,
    meta_bytes: u64,
    payload_bytes: u64,
    /// Tombstones per owner: key → version. Not bounded here (like the simulator's store);
    /// the engine-side summary bounds them in a later step. Not counted in `meta_bytes`.
    tombs: Vec<ChunkMap<SmallKey, Version>>,
    /// Per owner: highest arena byte (exclusive) any applied update touched.
    high_water: Vec<u64>,
}

impl ParityStore {
    /// An empty store for parity holder `holder` (`0..M`), accepting updates anywhere below
    /// `ARENA_BYTES_MAX`. Prefer [`ParityStore::with_arena_capacity`] with the memgest's
    /// configured arena size.
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `holder ≥ M`.
    pub fn new(layout: Layout, holder: u32) -> Result<ParityStore, Error> {
        ParityStore::with_arena_capacity(layout, holder, crate::bounds::ARENA_BYTES_MAX)
    }

    /// An empty store for parity holder `holder` whose owners' arenas hold `arena_capacity`
    /// bytes; updates past it are refused with [`Error::Range`].
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `holder ≥ M`; [`Error::Range`] if `arena_capacity` is 0 or
    /// above `ARENA_BYTES_MAX`.
    pub fn with_arena_capacity(
        layout: Layout,
        holder: u32,
        arena_capacity: u64,
    ) -> Result<ParityStore, Error> {
        if arena_capacity == 0 || arena_capacity > crate::bounds::ARENA_BYTES_MAX {
            return Err(Error::Range {
                offset: 0,
                len: arena_capacity,
            });
        }
        if holder >= layout.m() {
            return Err(Error::NodeIndex {
                index: holder,
                count: layout.m(),
            });
        }
        let codec = Arc::new(Codec::new(layout.k(), layout.m())?);
        let s = usize::try_from(layout.s()).map_err(|_| Error::Shape {
            k: layout.k(),
            m: layout.m(),
            s: layout.s(),
        })?;
        Ok(ParityStore {
            layout,
            codec,
            holder,
            chunks: BTreeMap::new(),
            meta: vec![ChunkMap::with_large_chunks(); s],
            applied_seq: vec![0; s],
            arena_capacity,
            meta_bytes: 0,
            payload_bytes: 0,
            tombs: vec![ChunkMap::new(); s],
            high_water: vec![0; s],
        })
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// Parity index of this holder.
    pub fn holder(&self) -> u32 {
        self.holder
    }

    /// Last sequence number applied from `owner` (0 = none).
    pub fn last_seq(&self, owner: u32) -> Option<u64> {
        self.applied_seq.get(usize::try_from(owner).ok()?).copied()
    }

    /// Sets the sequence number expected next from `owner` minus one: used when a new
    /// coordinator takes over an arena and restarts its numbering, or after a resync.
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `owner ≥ s`.
    pub fn set_last_seq(&mut self, owner: u32, seq: u64) -> Result<(), Error> {
        let s = self.layout.s();
        let slot = usize::try_from(owner)
            .ok()
            .and_then(|i| self.applied_seq.get_mut(i))
            .ok_or(Error::NodeIndex {
                index: owner,
                count: s,
            })?;
        *slot = seq;
        Ok(())
    }

    /// Folds one update in (see the module docs).
    ///
    /// # Errors
    /// [`Error::NodeIndex`] for a bad owner; [`Error::Range`] for a delta beyond
    /// `VALUE_BYTES_MAX` or the arena bound, or a bad key length; [`Error::SeqGap`] if
    /// updates from this owner were lost. On error nothing is modified.
    pub fn apply(&mut self, up: &ParityUpdate) -> Result<Applied, Error> {
        let s = self.layout.s();
        let owner_idx = usize::try_from(up.owner).map_err(|_| Error::NodeIndex {
            index: up.owner,
            count: s,
        })?;
        let last = *self.applied_seq.get(owner_idx).ok_or(Error::NodeIndex {
            index: up.owner,
            count: s,
        })?;
        if up.seq <= last {
            return Ok(Applied::Duplicate);
        }
        let expected = last.saturating_add(1);
        if up.seq != expected {
            return Err(Error::SeqGap {
                owner: up.owner,
                expected,
                got: up.seq,
            });
        }
        let len = up.delta.len() as u64;
        if len > u64::from(VALUE_BYTES_MAX) {
            return Err(Error::Range {
                offset: up.offset,
                len,
            });
        }
        let end = up.offset.checked_add(len);
        if end.is_none_or(|e| e > self.arena_capacity) {
            return Err(Error::Range {
                offset: up.offset,
                len,
            });
        }
        // Validates node and range bounds before any mutation.
        let pieces = self.layout.pieces(up.owner, up.offset, len)?;
        match &up.meta {
            Some(MetaChange::Put { key, meta }) => {
                check_key(key)?;
                if meta.owner != up.owner || meta.len > u64::from(VALUE_BYTES_MAX) {
                    return Err(Error::Range {
                        offset: meta.offset,
                        len: meta.len,
                    });
                }
            }
            Some(MetaChange::Delete { key, .. }) | Some(MetaChange::Retire { key, .. }) => {
                check_key(key)?
            }
            None => {}
        }
        let cb = usize::try_from(self.layout.chunk_bytes()).map_err(|_| Error::ChunkSize {
            chunk_bytes: self.layout.chunk_bytes(),
        })?;
        // Coefficients per data position, computed before mutating.
        let mut work = Vec::new();
        for piece in pieces {
            let coef = self.codec.coefficient(self.holder, piece.at.position)?;
            let pc = self.layout.parity_chunk(piece.at.codeword, self.holder)?;
            let start = usize::try_from(piece.range_offset).map_err(|_| Error::Range {
                offset: up.offset,
                len,
            })?;
            let end = start
                .checked_add(usize::try_from(piece.len).unwrap_or(usize::MAX))
                .ok_or(Error::Range {
                    offset: up.offset,
                    len,
                })?;
            work.push((pc.index, coef, piece.at.byte_in_chunk, start, end));
        }
        for (index, coef, byte, start, end) in work {
            let d = up.delta.get(start..end).ok_or(Error::Range {
                offset: up.offset,
                len,
            })?;
            if coef == 0 || d.iter().all(|b| *b == 0) {
                continue;
            }
            let chunk = self.chunks.entry(index).or_insert_with(|| vec![0u8; cb]);
            crate::codec::apply_delta(chunk, coef, d, usize::try_from(byte).unwrap_or(usize::MAX))?;
        }
        match &up.meta {
            Some(MetaChange::Put { key, meta }) => self.put_meta(owner_idx, key, *meta),
            Some(MetaChange::Delete { key, version }) => {
                self.drop_meta(owner_idx, key, *version, false);
                self.put_tomb(owner_idx, key, *version);
            }
            Some(MetaChange::Retire { key, version }) => {
                self.drop_meta(owner_idx, key, *version, true)
            }
            None => {}
        }
        if let Some(slot) = self.applied_seq.get_mut(owner_idx) {
            *slot = up.seq;
        }
        self.raise_high_water(owner_idx, up.offset, len);
        Ok(Applied::Applied)
    }

    /// Drops `owner`'s metadata of `key` if older than `version` (at or below it for a
    /// retire, which drops that owner's tombstone too). Other owners' entries of the same
    /// key describe other arenas and stay.
    fn drop_meta(&mut self, owner: usize, key: &[u8], version: Version, inclusive: bool) {
        let Some(meta) = self.meta.get_mut(owner) else {
            return;
        };
        if let Some(old) = meta.get(key) {
            let v = old.version();
            if v < version || (inclusive && v == version) {
                let old_len = old.len();
                meta.remove(key);
                self.payload_bytes = self.payload_bytes.saturating_sub(old_len);
                self.meta_bytes = self
                    .meta_bytes
                    .saturating_sub(key.len() as u64)
                    .saturating_sub(META_RECORD_BYTES);
            }
        }
        if inclusive {
            if let Some(tombs) = self.tombs.get_mut(owner) {
                if tombs.get(key).is_some_and(|t| *t <= version) {
                    tombs.remove(key);
                }
            }
        }
    }

    /// Records `owner`'s delete of `key` at `version` unless a newer tombstone or live entry
    /// of that owner is there.
    fn put_tomb(&mut self, owner: usize, key: &[u8], version: Version) {
        let live = self.meta.get(owner).is_some_and(|m| m.contains_key(key));
        let Some(tombs) = self.tombs.get_mut(owner) else {
            return;
        };
        if !live && tombs.get(key).is_none_or(|t| *t < version) {
            tombs.insert(SmallKey::new(key), version);
        }
    }

    fn raise_high_water(&mut self, owner_idx: usize, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        if let Some(h) = self.high_water.get_mut(owner_idx) {
            *h = (*h).max(offset.saturating_add(len));
        }
    }

    /// Highest arena byte (exclusive) `owner` ever changed: a new coordinator for that owner
    /// must recover `[0, high_water)`; everything above is zero.
    pub fn high_water(&self, owner: u32) -> u64 {
        usize::try_from(owner)
            .ok()
            .and_then(|i| self.high_water.get(i))
            .copied()
            .unwrap_or(0)
    }

    /// Last applied sequence number of every owner, by data node index.
    pub fn applied_seqs(&self) -> &[u64] {
        &self.applied_seq
    }

    /// Up to `limit` of `owner`'s keys strictly after `after`, in key order: one page of
    /// [`ParityStore::keys_of`] without scanning the keys before `after`.
    pub fn keys_of_after(
        &self,
        owner: u32,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(&[u8], KeyMeta)> {
        let Some(meta) = usize::try_from(owner).ok().and_then(|o| self.meta.get(o)) else {
            return Vec::new();
        };
        meta.iter_after(after)
            .take(limit)
            .map(|(k, m)| (k.as_bytes(), m.unpack(owner)))
            .collect()
    }

    /// Up to `limit` of `owner`'s tombstones strictly after `after`, in key order.
    pub fn tombstones_of_after(
        &self,
        owner: u32,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(&[u8], Version)> {
        let Some(tombs) = usize::try_from(owner).ok().and_then(|o| self.tombs.get(o)) else {
            return Vec::new();
        };
        tombs
            .iter_after(after)
            .take(limit)
            .map(|(k, v)| (k.as_bytes(), *v))
            .collect()
    }

    /// Tombstones (deletes) of `owner`'s keys, in key order: a new coordinator adopts them so
    /// that an older copy elsewhere (e.g. of the key's previous memgest) cannot resurrect.
    pub fn tombstones_of(&self, owner: u32) -> impl Iterator<Item = (&[u8], Version)> {
        usize::try_from(owner)
            .ok()
            .and_then(|o| self.tombs.get(o))
            .into_iter()
            .flat_map(|t| t.iter().map(|(k, v)| (k.as_bytes(), *v)))
    }

    /// Parity-holder resync: folds owner `owner`'s arena bytes `[offset, offset+bytes.len())`
    /// (a snapshot page; the previous content counted as zero) into the parity, without a
    /// sequence number. Used only on a store that was [`ParityStore::reset`] and has not yet
    /// seen this owner's range.
    ///
    /// # Errors
    /// [`Error::Range`] / [`Error::NodeIndex`] on bad bounds; nothing changes then.
    pub fn fold_snapshot(&mut self, owner: u32, offset: u64, bytes: &[u8]) -> Result<(), Error> {
        let seq = self.last_seq(owner).ok_or(Error::NodeIndex {
            index: owner,
            count: self.layout.s(),
        })?;
        let up = ParityUpdate {
            owner,
            seq: seq.saturating_add(1),
            offset,
            delta: bytes.to_vec(),
            meta: None,
        };
        self.apply(&up)?;
        self.set_last_seq(owner, seq)
    }

    /// Parity-holder resync: records `key`'s metadata (or a tombstone when `meta` is
    /// `None`) as a snapshot page carries it.
    ///
    /// # Errors
    /// [`Error::Range`] for a bad key or an owner out of range.
    pub fn restore_meta(
        &mut self,
        key: &[u8],
        owner: u32,
        meta: Option<KeyMeta>,
        version: Version,
    ) -> Result<(), Error> {
        check_key(key)?;
        if owner >= self.layout.s() {
            return Err(Error::NodeIndex {
                index: owner,
                count: self.layout.s(),
            });
        }
        match meta {
            Some(m) => {
                if m.len > u64::from(VALUE_BYTES_MAX) {
                    return Err(Error::Range {
                        offset: m.offset,
                        len: m.len,
                    });
                }
                let idx = usize::try_from(owner).unwrap_or(usize::MAX);
                self.put_meta(idx, key, KeyMeta { owner, ..m });
                self.raise_high_water(idx, m.offset, m.len);
            }
            None => {
                let idx = usize::try_from(owner).unwrap_or(usize::MAX);
                self.drop_meta(idx, key, version, false);
                self.put_tomb(idx, key, version);
            }
        }
        Ok(())
    }

    /// Forgets everything (parity, metadata, sequence numbers): the first step of a resync.
    pub fn reset(&mut self) {
        self.chunks.clear();
        self.meta.iter_mut().for_each(ChunkMap::clear);
        self.tombs.iter_mut().for_each(ChunkMap::clear);
        self.applied_seq.iter_mut().for_each(|s| *s = 0);
        self.high_water.iter_mut().for_each(|s| *s = 0);
        self.meta_bytes = 0;
        self.payload_bytes = 0;
    }

    fn put_meta(&mut self, owner: usize, key: &[u8], meta: KeyMeta) {
        let (Some(tombs), Some(metas)) = (self.tombs.get_mut(owner), self.meta.get_mut(owner))
        else {
            return;
        };
        if let Some(t) = tombs.get(key) {
            if *t >= meta.version {
                return; // deleted later than this put
            }
            tombs.remove(key);
        }
        match metas.get_mut(key) {
            Some(old) => {
                // Higher version wins; an older one (a late message after a takeover) is
                // ignored for metadata, while its delta was still folded (the bytes changed).
                if old.version() < meta.version {
                    self.payload_bytes = self
                        .payload_bytes
                        .saturating_sub(old.len())
                        .saturating_add(meta.len);
                    *old = PackedMeta::pack(&meta);
                }
            }
            None => {
                metas.insert(SmallKey::new(key), PackedMeta::pack(&meta));
                self.payload_bytes = self.payload_bytes.saturating_add(meta.len);
                self.meta_bytes = self
                    .meta_bytes
                    .saturating_add(key.len() as u64)
                    .saturating_add(META_RECORD_BYTES);
            }
        }
    }

    /// Parity chunk `index` if it was ever written (`None` means all zeros).
    pub fn chunk(&self, index: u64) -> Option<&[u8]> {
        self.chunks.get(&index).map(|c| c.as_slice())
    }

    /// Fills `out` from bytes `[byte, byte + out.len())` of this holder's chunk `pc`
    /// (zeros for never-written chunks). Returns false if `pc` is not this holder's or the
    /// range passes the chunk end.
    pub fn read(&self, pc: ParityChunk, byte: u32, out: &mut [u8]) -> bool {
        if pc.holder != self.holder {
            return false;
        }
        let start = usize::try_from(byte).unwrap_or(usize::MAX);
        let Some(end) = start.checked_add(out.len()) else {
            return false;
        };
        if end > usize::try_from(self.layout.chunk_bytes()).unwrap_or(0) {
            return false;
        }
        match self.chunks.get(&pc.index) {
            Some(c) => match c.get(start..end) {
                Some(src) => {
                    out.copy_from_slice(src);
                    true
                }
                None => false,
            },
            None => {
                out.fill(0);
                true
            }
        }
    }

    /// Installs a whole stripe of this holder's parity (from [`crate::encode_stripe`] or
    /// [`crate::rebuild_parity_stripe`]), e.g. when a spare takes over this role.
    ///
    /// # Errors
    /// [`Error::Length`] unless `bytes` is `l/K · chunk_bytes` long.
    pub fn install_stripe(&mut self, stripe: u64, bytes: &[u8]) -> Result<(), Error> {
        let want = self.layout.stripe_parity_bytes_per_holder();
        if bytes.len() as u64 != want {
            return Err(Error::Length {
                expected: want,
                got: bytes.len() as u64,
            });
        }
        let cb = usize::try_from(self.layout.chunk_bytes()).unwrap_or(usize::MAX);
        for (j, chunk) in (0u32..).zip(bytes.chunks(cb)) {
            let cw = crate::layout::CodewordId {
                stripe,
                codeword: j,
            };
            let pc = self.layout.parity_chunk(cw, self.holder)?;
            if chunk.iter().all(|b| *b == 0) {
                self.chunks.remove(&pc.index);
            } else {
                self.chunks.insert(pc.index, chunk.to_vec());
            }
        }
        Ok(())
    }

    /// Replicated metadata of `key`: the newest of the owners that describe it (two do
    /// while a move between data nodes of this group has not retired the old copy).
    pub fn meta(&self, key: &[u8]) -> Option<KeyMeta> {
        (0u32..)
            .zip(&self.meta)
            .filter_map(|(o, m)| m.get(key).map(|p| p.unpack(o)))
            .max_by_key(|m| m.version)
    }

    /// All keys owned by data node `owner`, in key order: what a new coordinator for that
    /// node reads back before serving.
    pub fn keys_of(&self, owner: u32) -> impl Iterator<Item = (&[u8], KeyMeta)> {
        usize::try_from(owner)
            .ok()
            .and_then(|o| self.meta.get(o))
            .into_iter()
            .flat_map(move |m| m.iter().map(move |(k, m)| (k.as_bytes(), m.unpack(owner))))
    }

    /// Memory accounting: payload is the sum of value lengths the metadata describes.
    pub fn accounting(&self) -> Accounting {
        let cb = u64::from(self.layout.chunk_bytes());
        Accounting {
            payload_bytes: 0,
            data_bytes: 0,
            parity_bytes: (self.chunks.len() as u64).saturating_mul(cb),
            meta_bytes: self.meta_bytes,
        }
    }

    /// Checks the store's invariants: one sequence slot per data node, every materialised
    /// chunk exactly `chunk_bytes` long, metadata byte and payload counters consistent.
    ///
    /// # Panics
    /// On a broken invariant (a bug in this module, never bad input).
    pub fn check_invariants(&self) {
        assert_eq!(self.applied_seq.len() as u64, u64::from(self.layout.s()));
        let cb = self.layout.chunk_bytes() as usize;
        assert!(self.chunks.values().all(|c| c.len() == cb), "chunk size");
        assert_eq!(
            self.meta.len(),
            self.applied_seq.len(),
            "a key map per owner"
        );
        assert_eq!(
            self.tombs.len(),
            self.applied_seq.len(),
            "a tombstone map per owner"
        );
        let meta: u64 = self
            .meta
            .iter()
            .flat_map(|m| m.iter().map(|(k, _)| k))
            .map(|k| (k.as_bytes().len() as u64).saturating_add(META_RECORD_BYTES))
            .fold(0u64, u64::saturating_add);
        assert_eq!(meta, self.meta_bytes, "metadata accounting");
        let payload = self
            .meta
            .iter()
            .flat_map(|m| m.values())
            .map(PackedMeta::len)
            .fold(0u64, u64::saturating_add);
        assert_eq!(payload, self.payload_bytes, "payload accounting");
        // Each entry's owner is its map's index by construction (`PackedMeta` has no owner).
    }

    /// Sum of value lengths described by the replicated metadata.
    pub fn described_payload_bytes(&self) -> u64 {
        self.payload_bytes
    }
}

fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() || key.len() > usize::try_from(KEY_BYTES_MAX).unwrap_or(usize::MAX) {
        return Err(Error::Range {
            offset: 0,
            len: key.len() as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;
    use crate::arena::Arena;
    use ringlet_types::{ValueKind, Version};
    use std::num::NonZeroU64;

    /// A span moved between two data nodes of one group: the new owner re-encodes the key
    /// at the same version, then the old owner retires its copy. The holder must still
    /// describe the key under the new owner (a key-only map lost it: sim seed 29063).
    #[test]
    fn same_version_move_between_owners_keeps_the_new_owners_key() {
        let layout = Layout::new(3, 2, 3, 64).unwrap();
        let mut old = Arena::new(layout, 1, 1 << 16).unwrap();
        let mut new = Arena::new(layout, 2, 1 << 16).unwrap();
        let mut p = ParityStore::new(layout, 0).unwrap();
        let v = Version::new(5, 0, 0, 1);
        p.apply(&old.put(b"k", v, &[7; 66]).unwrap()).unwrap();
        assert_eq!(p.keys_of(1).count(), 1);
        // The re-encode in the new owner's arena, then the old owner's retire, both at v.
        let (up, _) = new
            .put_deferred(b"k", v, &[7; 66], ValueKind::String, None)
            .unwrap();
        p.apply(&up).unwrap();
        let (up, _) = old.remove_deferred(b"k", v, true).unwrap();
        p.apply(&up).unwrap();
        p.check_invariants();
        assert_eq!(p.keys_of(1).count(), 0, "the old owner's copy is retired");
        let moved: Vec<_> = p.keys_of(2).map(|(k, m)| (k.to_vec(), m.version)).collect();
        assert_eq!(
            moved,
            vec![(b"k".to_vec(), v)],
            "the new owner's copy stays"
        );
        assert_eq!(p.meta(b"k").map(|m| m.owner), Some(2));
        // Retire and put in the other order give the same end state.
        let mut q = ParityStore::new(layout, 0).unwrap();
        let mut old = Arena::new(layout, 1, 1 << 16).unwrap();
        let mut new = Arena::new(layout, 2, 1 << 16).unwrap();
        q.apply(&old.put(b"k", v, &[7; 66]).unwrap()).unwrap();
        q.apply(&old.remove_deferred(b"k", v, true).unwrap().0)
            .unwrap();
        let (up, _) = new
            .put_deferred(b"k", v, &[7; 66], ValueKind::String, None)
            .unwrap();
        q.apply(&up).unwrap();
        q.check_invariants();
        assert_eq!(q.keys_of(2).count(), 1);
        assert_eq!(q.keys_of(1).count(), 0);
        // A delete by one owner leaves the other owner's tombstones and keys alone.
        let v2 = Version::new(6, 0, 0, 1);
        q.apply(&new.remove_deferred(b"k", v2, false).unwrap().0)
            .unwrap();
        assert_eq!(
            q.tombstones_of(2).collect::<Vec<_>>(),
            vec![(&b"k"[..], v2)]
        );
        assert_eq!(q.tombstones_of(1).count(), 0);
        q.check_invariants();
    }

    #[test]
    fn duplicates_are_noops_and_gaps_are_errors() {
        let layout = Layout::new(2, 1, 2, 64).unwrap();
        let mut a = Arena::new(layout, 0, 1 << 16).unwrap();
        let mut p = ParityStore::new(layout, 0).unwrap();
        let u1 = a.put(b"a", Version::new(1, 0, 0, 1), &[9; 100]).unwrap();
        let u2 = a.put(b"b", Version::new(1, 0, 0, 2), &[7; 10]).unwrap();
        assert!(matches!(
            p.apply(&u2),
            Err(Error::SeqGap {
                expected: 1,
                got: 2,
                ..
            })
        ));
        assert_eq!(p.apply(&u1), Ok(Applied::Applied));
        let snapshot = p.chunk(0).unwrap().to_vec();
        assert_eq!(p.apply(&u1), Ok(Applied::Duplicate));
        assert_eq!(p.chunk(0).unwrap(), snapshot.as_slice());
        assert_eq!(p.apply(&u2), Ok(Applied::Applied));
        assert_eq!(p.meta(b"a").unwrap().len, 100);
        assert_eq!(p.keys_of(0).count(), 2);
        assert_eq!(p.described_payload_bytes(), 110);
    }

    #[test]
    fn rejected_update_changes_nothing() {
        let layout = Layout::new(2, 1, 2, 64).unwrap();
        let mut p = ParityStore::new(layout, 0).unwrap();
        let bad = ParityUpdate {
            owner: 0,
            seq: 1,
            offset: crate::bounds::ARENA_BYTES_MAX - 1,
            delta: vec![1, 2],
            meta: None,
        };
        assert!(p.apply(&bad).is_err());
        assert_eq!(p.last_seq(0), Some(0));
        let bad_owner = ParityUpdate {
            owner: 2,
            ..bad.clone()
        };
        assert!(p.apply(&bad_owner).is_err());
        let mut small = ParityStore::with_arena_capacity(layout, 0, 4096).unwrap();
        let far = ParityUpdate {
            offset: 4095,
            ..bad
        };
        assert!(matches!(small.apply(&far), Err(Error::Range { .. })));
        assert_eq!(small.accounting().parity_bytes, 0);
        let near = ParityUpdate {
            offset: 4094,
            ..far
        };
        assert_eq!(small.apply(&near), Ok(Applied::Applied));
        assert!(ParityStore::new(layout, 1).is_err());
    }

    /// A metadata-only update (EXPIRE/PERSIST on an ec key: `Arena::touch`) replaces the
    /// holder's metadata (version, expiry) and leaves the parity bytes alone; a late older
    /// put cannot bring the old expiry back.
    #[test]
    fn touch_replaces_metadata_and_keeps_parity() {
        let layout = Layout::new(2, 1, 2, 64).unwrap();
        let mut a = Arena::new(layout, 1, 1 << 16).unwrap();
        let mut p = ParityStore::new(layout, 0).unwrap();
        let v1 = Version::new(1, 0, 0, 1);
        let u1 = a
            .put_with(
                b"k",
                v1,
                &[5; 150],
                ValueKind::String,
                NonZeroU64::new(1_000),
            )
            .unwrap();
        p.apply(&u1).unwrap();
        assert_eq!(p.meta(b"k").unwrap().expiry_ms, NonZeroU64::new(1_000));
        let parity: Vec<Vec<u8>> = (0..4)
            .filter_map(|i| p.chunk(i).map(<[u8]>::to_vec))
            .collect();
        let v2 = Version::new(2, 0, 0, 1);
        let u2 = a.touch(b"k", v2, NonZeroU64::new(2_000)).unwrap();
        assert_eq!(p.apply(&u2), Ok(Applied::Applied));
        let m = p.meta(b"k").unwrap();
        assert_eq!(
            (m.version, m.expiry_ms, m.len),
            (v2, NonZeroU64::new(2_000), 150)
        );
        assert_eq!(m.offset, u1_offset(&u1));
        let after: Vec<Vec<u8>> = (0..4)
            .filter_map(|i| p.chunk(i).map(<[u8]>::to_vec))
            .collect();
        assert_eq!(parity, after, "a touch changes no parity byte");
        assert_eq!(p.described_payload_bytes(), 150);
        // PERSIST then a delete: the tombstone wins, the expiry goes with the metadata.
        p.apply(&a.touch(b"k", Version::new(3, 0, 0, 1), None).unwrap())
            .unwrap();
        assert_eq!(p.meta(b"k").unwrap().expiry_ms, None);
        p.apply(&a.delete(b"k", Version::new(4, 0, 0, 1)).unwrap())
            .unwrap();
        assert!(p.meta(b"k").is_none());
        p.check_invariants();
    }

    fn u1_offset(u: &ParityUpdate) -> u64 {
        match &u.meta {
            Some(MetaChange::Put { meta, .. }) => meta.offset,
            _ => u64::MAX,
        }
    }

    /// A resync snapshot carries the expiry (restore_meta keeps the whole KeyMeta).
    #[test]
    fn restore_meta_keeps_the_expiry() {
        let layout = Layout::new(2, 1, 2, 64).unwrap();
        let mut p = ParityStore::new(layout, 0).unwrap();
        let m = KeyMeta {
            owner: 1,
            offset: 64,
            len: 10,
            version: Version::new(7, 0, 0, 1),
            kind: ValueKind::Record,
            expiry_ms: NonZeroU64::new(123_456),
        };
        p.restore_meta(b"r", 1, Some(m), m.version).unwrap();
        assert_eq!(p.meta(b"r"), Some(m));
    }
}
