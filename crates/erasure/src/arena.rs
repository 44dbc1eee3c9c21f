//! The erasure-coded arena of one data node for one ec memgest (sans-I/O).
//!
//! Values stay whole and contiguous in their coordinator's arena (DESIGN.md: a GET touches
//! one node). Every change of arena bytes produces a [`ParityUpdate`] carrying
//! `new ⊕ old` of the touched bytes and, for puts and deletes, the key metadata the parity
//! holders replicate (Ring §5.3: metadata is replicated, data is erasure coded). The
//! replica core sends it to the M parity holders; the write commits when all M acknowledge.
//!
//! # Allocation
//!
//! First fit over a free list kept in offset order (`BTreeMap`, deterministic), coalescing on
//! free. A put writes the new value into a fresh range and then frees the old one, so a
//! crash between the two never leaves a half-overwritten value that parity does not match.
//! Freed bytes are *not* zeroed: parity covers whatever bytes the arena holds, so leaving
//! them costs no parity traffic, and the next put into that range sends `new ⊕ stale`.
//! A fragmentation-resistant allocator (size classes, offset-allocator) can replace first
//! fit behind the same methods; see `docs/design/erasure-srs.md`.
//!
//! Bytes past the highest allocation are not materialised; they read as zero, which is what
//! the parity of never-written space encodes (a fresh parity chunk is all zeros).

use crate::chunk_map::ChunkMap;
use crate::codec::delta;
use crate::error::Error;
use crate::layout::Layout;
use crate::small_key::SmallKey;
use ringlet_types::limits::{KEY_BYTES_MAX, VALUE_BYTES_MAX};
use ringlet_types::{ValueKind, Version};
use std::collections::BTreeMap;
use std::num::NonZeroU64;

/// Key metadata replicated to every parity holder with each put: where the value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyMeta {
    /// Data node index (in the PG) whose arena holds the value: the key's coordinator.
    pub owner: u32,
    /// Byte offset of the value in the owner's arena.
    pub offset: u64,
    /// Value length in bytes.
    pub len: u64,
    /// Version of the value.
    pub version: Version,
    /// A byte string or a record (`ringlet-record`): in the metadata every parity holder
    /// keeps, so a takeover rebuilds a record as a record.
    pub kind: ValueKind,
    /// Expiry, unix wall-clock ms (`None`: the value does not expire). Part of the metadata
    /// every parity holder keeps, so a coordinator rebuilt from a holder's copy (takeover,
    /// resync) expires the key at the same instant. Only the coordinator acts on it
    /// (`docs/design/cluster-ttl.md`); the arena and the holders just carry it.
    /// `NonZeroU64` so the record stays 48 bytes (an `Option<u64>` would make it 64, kept
    /// once per key by the arena and by each of the M holders); 0 (1970) is never a live
    /// expiry, fronts delete a key whose expiry is not in the future.
    pub expiry_ms: Option<NonZeroU64>,
}

// One record per key on the data node and on each of the M holders: adding the expiry kept
// it at 48 bytes (see `expiry_ms`).
const _: () = assert!(std::mem::size_of::<KeyMeta>() <= 48);

/// One key's [`KeyMeta`] as the coordinator's and the holders' key maps keep it: without the
/// owner (the map says whose arena it describes), the version as two words and the length as
/// `u32` (≤ `VALUE_BYTES_MAX`), so 40 bytes at 8-byte alignment where `KeyMeta` takes 48 (its
/// `u128` version aligns it to 16). Kept once per key by the arena and by each of the M
/// holders (docs/design/cluster-memory.md, session 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackedMeta {
    version_hi: u64,
    version_lo: u64,
    offset: u64,
    expiry_ms: Option<NonZeroU64>,
    len: u32,
    kind: ValueKind,
}

const _: () = assert!(std::mem::size_of::<PackedMeta>() <= 40);
// Every length a map holds was checked against this bound first (see `PackedMeta::pack`).
const _: () = assert!(VALUE_BYTES_MAX as u64 <= u32::MAX as u64);

impl PackedMeta {
    /// Packs `m`. Callers checked `m.len ≤ VALUE_BYTES_MAX` (allocation, `restore_key`,
    /// the holders' `apply` / `restore_meta`); a longer one would saturate, never wrap.
    pub(crate) fn pack(m: &KeyMeta) -> PackedMeta {
        debug_assert!(m.len <= u64::from(VALUE_BYTES_MAX));
        PackedMeta {
            // Splitting the u128 into its two halves: the shifts and truncations are exact.
            version_hi: (m.version.0 >> 64) as u64,
            version_lo: m.version.0 as u64,
            offset: m.offset,
            expiry_ms: m.expiry_ms,
            len: u32::try_from(m.len).unwrap_or(u32::MAX),
            kind: m.kind,
        }
    }

    /// The full record, as described by `owner`'s map.
    pub(crate) fn unpack(&self, owner: u32) -> KeyMeta {
        KeyMeta {
            owner,
            offset: self.offset,
            len: u64::from(self.len),
            version: self.version(),
            kind: self.kind,
            expiry_ms: self.expiry_ms,
        }
    }

    pub(crate) fn version(&self) -> Version {
        Version((u128::from(self.version_hi) << 64) | u128::from(self.version_lo))
    }

    pub(crate) fn len(&self) -> u64 {
        u64::from(self.len)
    }
}

/// A change of key metadata carried by a parity update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaChange {
    /// The key now has this value location and version.
    Put { key: Vec<u8>, meta: KeyMeta },
    /// The key was deleted at this version (holders keep a tombstone).
    Delete { key: Vec<u8>, version: Version },
    /// The key left this memgest at `version` (it moved to another memgest): holders drop
    /// its metadata if at or below `version`, without a tombstone (the key lives on
    /// elsewhere).
    Retire { key: Vec<u8>, version: Version },
}

/// What a data node sends its parity holders after changing arena bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParityUpdate {
    /// Data node index of the arena owner.
    pub owner: u32,
    /// Per-owner sequence number, starting at 1, +1 per update: holders apply each exactly
    /// once (applying an XOR delta twice would undo it).
    pub seq: u64,
    /// Arena offset of the first changed byte.
    pub offset: u64,
    /// `new ⊕ old` of `[offset, offset + delta.len())`; may be empty (metadata-only update).
    pub delta: Vec<u8>,
    /// Metadata change, if any.
    pub meta: Option<MetaChange>,
}

/// Memory accounting of one arena or parity store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Bytes of live values (payload).
    pub payload_bytes: u64,
    /// Arena bytes materialised (payload + free holes + stale bytes below the high water).
    pub data_bytes: u64,
    /// Parity chunk bytes materialised.
    pub parity_bytes: u64,
    /// Bytes of key metadata (keys + fixed per-key record).
    pub meta_bytes: u64,
}

impl Accounting {
    /// Bytes held (data + parity + metadata) per payload byte; `None` with no payload.
    pub fn bytes_per_payload_byte(&self) -> Option<f64> {
        if self.payload_bytes == 0 {
            return None;
        }
        let held = self
            .data_bytes
            .saturating_add(self.parity_bytes)
            .saturating_add(self.meta_bytes);
        // u64 → f64 loses precision only beyond 2^53 bytes; fine for a ratio.
        Some(held as f64 / self.payload_bytes as f64)
    }

    /// Sum of two accountings (e.g. all arenas and parity stores of a PG).
    pub fn plus(&self, o: &Accounting) -> Accounting {
        Accounting {
            payload_bytes: self.payload_bytes.saturating_add(o.payload_bytes),
            data_bytes: self.data_bytes.saturating_add(o.data_bytes),
            parity_bytes: self.parity_bytes.saturating_add(o.parity_bytes),
            meta_bytes: self.meta_bytes.saturating_add(o.meta_bytes),
        }
    }
}

/// Fixed per-key metadata cost counted by [`Accounting::meta_bytes`].
pub const META_RECORD_BYTES: u64 = std::mem::size_of::<KeyMeta>() as u64;

/// Fixed bytes of one tombstone record (its version) besides the key, for accounting.
pub const TOMB_RECORD_BYTES: u64 = std::mem::size_of::<Version>() as u64;

/// One data node's arena for one ec memgest.
#[derive(Clone, Debug)]
pub struct Arena {
    layout: Layout,
    node: u32,
    capacity: u64,
    /// Materialised bytes `[0, bytes.len())`; the rest reads as zero.
    bytes: Vec<u8>,
    /// Free ranges: offset → len, disjoint, coalesced, in `[0, capacity)`.
    free: BTreeMap<u64, u64>,
    /// Allocated ranges: offset → len. One entry per live value (and per superseded value
    /// not yet freed): a [`ChunkMap`], 16 bytes an entry with ~3 % over (a B-tree's half-full
    /// nodes cost ~2× under ascending offsets; cluster-memory.md, session 18).
    used: ChunkMap<u64, u64>,
    /// Key → metadata. `SmallKey`: short keys inline in the map slot, no heap block each.
    /// Values are [`PackedMeta`] (the owner is `node`). A [`ChunkMap`] of large chunks:
    /// sorted runs whose capacity follows their length, no B-tree node slack, mmapped blocks
    /// in node processes (no heap holes as they grow).
    keys: ChunkMap<SmallKey, PackedMeta>,
    /// Keys deleted here (not live now) with their delete version: the tombstones the
    /// parity holders keep, so a holder resynchronised from this arena's snapshot gets
    /// them too. Without them a resynced holder lacked every delete from before its
    /// resync, and a coordinator taking over from it lost the tombstones (simulator seed
    /// 7334 of `ec_ttl`). Unbounded like the holders' own tombstones (cluster-ec.md).
    tombs: ChunkMap<SmallKey, Version>,
    payload_bytes: u64,
    meta_bytes: u64,
    seq: u64,
}

impl Arena {
    /// An empty arena of data node `node` able to hold `capacity` bytes.
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `node ≥ s`; [`Error::Range`] if `capacity` is 0 or above
    /// `ARENA_BYTES_MAX`.
    pub fn new(layout: Layout, node: u32, capacity: u64) -> Result<Arena, Error> {
        if node >= layout.s() {
            return Err(Error::NodeIndex {
                index: node,
                count: layout.s(),
            });
        }
        if capacity == 0 || capacity > crate::bounds::ARENA_BYTES_MAX {
            return Err(Error::Range {
                offset: 0,
                len: capacity,
            });
        }
        let mut free = BTreeMap::new();
        free.insert(0, capacity);
        Ok(Arena {
            layout,
            node,
            capacity,
            bytes: Vec::new(),
            free,
            used: ChunkMap::new(),
            keys: ChunkMap::with_large_chunks(),
            tombs: ChunkMap::new(),
            payload_bytes: 0,
            meta_bytes: 0,
            seq: 0,
        })
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    /// Data node index.
    pub fn node(&self) -> u32 {
        self.node
    }
    /// Materialised bytes (the rest of the arena is zero).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// Metadata of a key stored here.
    pub fn meta(&self, key: &[u8]) -> Option<KeyMeta> {
        self.keys.get(key).map(|p| p.unpack(self.node))
    }
    /// Sequence number of the last update produced.
    pub fn last_seq(&self) -> u64 {
        self.seq
    }

    /// Reserves `len` bytes and returns their offset. Payload accounting counts them.
    ///
    /// # Errors
    /// [`Error::Range`] if `len` is 0 or above `VALUE_BYTES_MAX`; [`Error::NoSpace`] if no
    /// free range fits.
    pub fn allocate(&mut self, len: u64) -> Result<u64, Error> {
        if len == 0 || len > u64::from(VALUE_BYTES_MAX) {
            return Err(Error::Range { offset: 0, len });
        }
        // First fit. The scan is over our own free list, bounded by its size.
        let (off, flen) = self
            .free
            .iter()
            .find(|(_, l)| **l >= len)
            .map(|(o, l)| (*o, *l))
            .ok_or(Error::NoSpace { len })?;
        self.free.remove(&off);
        let rest = flen.checked_sub(len).ok_or(Error::NoSpace { len })?;
        if rest > 0 {
            let roff = off.checked_add(len).ok_or(Error::NoSpace { len })?;
            self.free.insert(roff, rest);
        }
        self.used.insert(off, len);
        self.payload_bytes = self.payload_bytes.saturating_add(len);
        Ok(off)
    }

    /// Returns an allocated range to the free list. The bytes are left as they are (see the
    /// module docs), so no parity update is needed.
    ///
    /// # Errors
    /// [`Error::NotAllocated`] unless `[offset, offset + len)` is exactly one allocation.
    pub fn free(&mut self, offset: u64, len: u64) -> Result<(), Error> {
        if self.used.get(&offset) != Some(&len) {
            return Err(Error::NotAllocated { offset, len });
        }
        self.used.remove(&offset);
        self.payload_bytes = self.payload_bytes.saturating_sub(len);
        let mut start = offset;
        let mut end = offset.saturating_add(len);
        // Coalesce with the previous free range if it ends where we start.
        if let Some((&po, &pl)) = self.free.range(..offset).next_back() {
            if po.saturating_add(pl) == start {
                self.free.remove(&po);
                start = po;
            }
        }
        if let Some(&nl) = self.free.get(&end) {
            self.free.remove(&end);
            end = end.saturating_add(nl);
        }
        self.free.insert(start, end.saturating_sub(start));
        Ok(())
    }

    fn inside_allocation(&self, offset: u64, len: u64) -> bool {
        match self.used.last_at_or_before(&offset) {
            Some((&o, &l)) => match (o.checked_add(l), offset.checked_add(len)) {
                (Some(aend), Some(end)) => end <= aend,
                _ => false,
            },
            None => false,
        }
    }

    /// Writes `new` at `offset` (inside one allocation) and returns the parity update
    /// (`new ⊕ old`, no metadata).
    ///
    /// # Errors
    /// [`Error::NotAllocated`] if the range is not inside one allocation.
    pub fn write(&mut self, offset: u64, new: &[u8]) -> Result<ParityUpdate, Error> {
        let len = new.len() as u64;
        if len == 0 || !self.inside_allocation(offset, len) {
            return Err(Error::NotAllocated { offset, len });
        }
        let range = Error::Range { offset, len };
        let start = usize::try_from(offset).map_err(|_| range)?;
        let end = start.checked_add(new.len()).ok_or(range)?;
        if self.bytes.len() < end {
            // Grow to the end of the chunk so the materialised arena is whole chunks. Bounded
            // by `capacity` (allocations lie inside it), itself ≤ ARENA_BYTES_MAX.
            let cb = usize::try_from(self.layout.chunk_bytes()).map_err(|_| range)?;
            let rounded = end
                .checked_add(cb.saturating_sub(1))
                .and_then(|x| x.checked_div(cb))
                .and_then(|x| x.checked_mul(cb))
                .ok_or(range)?;
            let cap = usize::try_from(self.capacity).unwrap_or(usize::MAX);
            self.bytes.resize(rounded.min(cap).max(end), 0);
        }
        let target = self.bytes.get_mut(start..end).ok_or(range)?;
        let d = delta(target, new);
        target.copy_from_slice(new);
        self.seq = self.seq.saturating_add(1);
        Ok(ParityUpdate {
            owner: self.node,
            seq: self.seq,
            offset,
            delta: d,
            meta: None,
        })
    }

    /// Reads `[offset, offset + len)` (zeros past the materialised end).
    ///
    /// # Errors
    /// [`Error::Range`] if the range passes the capacity or `len > VALUE_BYTES_MAX`.
    pub fn read(&self, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
        let range = Error::Range { offset, len };
        let end = offset.checked_add(len).ok_or(range)?;
        if end > self.capacity || len > u64::from(VALUE_BYTES_MAX) {
            return Err(range);
        }
        let n = usize::try_from(len).map_err(|_| range)?;
        let mut out = vec![0u8; n];
        let start = usize::try_from(offset).map_err(|_| range)?;
        let avail = self.bytes.get(start..).unwrap_or(&[]);
        let k = avail.len().min(n);
        if let (Some(dst), Some(src)) = (out.get_mut(..k), avail.get(..k)) {
            dst.copy_from_slice(src);
        }
        Ok(out)
    }

    /// Reads the value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let m = self.meta(key)?;
        self.read(m.offset, m.len).ok()
    }

    /// Whether `key` is live here with exactly `value` of `kind` (compared in place, no
    /// copy): a write of the same bytes may then be a metadata-only [`Arena::touch`].
    pub fn holds_value(&self, key: &[u8], value: &[u8], kind: ValueKind) -> bool {
        let Some(m) = self.meta(key) else {
            return false;
        };
        if m.kind != kind || m.len != value.len() as u64 {
            return false;
        }
        let (Ok(start), Ok(end)) = (
            usize::try_from(m.offset),
            usize::try_from(m.offset.saturating_add(m.len)),
        ) else {
            return false;
        };
        // Bytes past the materialised end read as zero (see the module comment).
        let have = self
            .bytes
            .get(start.min(self.bytes.len())..end.min(self.bytes.len()));
        let Some(have) = have else {
            return false;
        };
        let (head, tail) = value.split_at(have.len().min(value.len()));
        head == have && tail.iter().all(|b| *b == 0)
    }

    /// Stores `value` for `key` at `version`: allocates a fresh range, writes it, frees the
    /// previous value's range. Returns the parity update with the metadata.
    ///
    /// # Errors
    /// [`Error::Range`] for an empty/oversized key or an oversized value (an empty value is
    /// fine: metadata only), [`Error::NoSpace`],
    /// [`Error::Stale`] if `version` is not above the stored one.
    pub fn put(
        &mut self,
        key: &[u8],
        version: Version,
        value: &[u8],
    ) -> Result<ParityUpdate, Error> {
        self.put_kind(key, version, value, ValueKind::String)
    }

    /// [`Arena::put`] of a value of `kind` (recorded in the key's metadata).
    ///
    /// # Errors
    /// As [`Arena::put`].
    pub fn put_kind(
        &mut self,
        key: &[u8],
        version: Version,
        value: &[u8],
        kind: ValueKind,
    ) -> Result<ParityUpdate, Error> {
        self.put_with(key, version, value, kind, None)
    }

    /// [`Arena::put`] of a value of `kind` that expires at `expiry_ms` (both recorded in the
    /// key's metadata, so they reach every parity holder with the update).
    ///
    /// # Errors
    /// As [`Arena::put`].
    pub fn put_with(
        &mut self,
        key: &[u8],
        version: Version,
        value: &[u8],
        kind: ValueKind,
        expiry_ms: Option<NonZeroU64>,
    ) -> Result<ParityUpdate, Error> {
        check_key(key)?;
        if let Some(old) = self.keys.get(key) {
            if version <= old.version() {
                return Err(Error::Stale);
            }
        }
        let len = value.len() as u64;
        let (offset, mut up) = if value.is_empty() {
            // An empty value (`SET k ""`) occupies no arena bytes: metadata only.
            self.seq = self.seq.saturating_add(1);
            let up = ParityUpdate {
                owner: self.node,
                seq: self.seq,
                offset: 0,
                delta: Vec::new(),
                meta: None,
            };
            (0, up)
        } else {
            let offset = self.allocate(len)?;
            match self.write(offset, value) {
                Ok(u) => (offset, u),
                Err(e) => {
                    // Undo the allocation; cannot fail since we just made it.
                    let _ = self.free(offset, len);
                    return Err(e);
                }
            }
        };
        let meta = KeyMeta {
            owner: self.node,
            offset,
            len,
            version,
            kind,
            expiry_ms,
        };
        self.drop_tomb(key);
        if let Some(old) = self
            .keys
            .insert(SmallKey::new(key), PackedMeta::pack(&meta))
        {
            // Cannot fail while the invariants hold (the key pointed at its allocation), and
            // the update must go out regardless: its sequence number is already taken.
            if old.len > 0 {
                let freed = self.free(old.offset, old.len());
                debug_assert!(freed.is_ok(), "key pointed at a non-allocation");
            }
        } else {
            self.meta_bytes = self
                .meta_bytes
                .saturating_add(key.len() as u64)
                .saturating_add(META_RECORD_BYTES);
        }
        up.meta = Some(MetaChange::Put {
            key: key.to_vec(),
            meta,
        });
        Ok(up)
    }

    /// Deletes `key` at `version`, freeing its range. Returns a metadata-only update.
    ///
    /// # Errors
    /// [`Error::NotAllocated`] if the key is absent, [`Error::Stale`] if `version` is not
    /// above the stored one.
    pub fn delete(&mut self, key: &[u8], version: Version) -> Result<ParityUpdate, Error> {
        let old = self
            .meta(key)
            .ok_or(Error::NotAllocated { offset: 0, len: 0 })?;
        if version <= old.version {
            return Err(Error::Stale);
        }
        if old.len > 0 {
            self.free(old.offset, old.len)?;
        }
        self.keys.remove(key);
        self.meta_bytes = self
            .meta_bytes
            .saturating_sub(key.len() as u64)
            .saturating_sub(META_RECORD_BYTES);
        self.note_tomb(key, version);
        self.seq = self.seq.saturating_add(1);
        Ok(ParityUpdate {
            owner: self.node,
            seq: self.seq,
            offset: old.offset,
            delta: Vec::new(),
            meta: Some(MetaChange::Delete {
                key: key.to_vec(),
                version,
            }),
        })
    }

    /// Metadata-only change of a live key: `key` keeps its bytes and their location and
    /// takes `version` and `expiry_ms` (EXPIRE, PERSIST, GETEX on an unchanged value). No
    /// arena byte changes, so the update carries no delta: the parity holders only replace
    /// the key's metadata (a [`MetaChange::Put`] at the same location, applied by version
    /// like any put). Cost: one metadata record to each holder instead of a fresh range and
    /// a value-sized delta.
    ///
    /// # Errors
    /// [`Error::NotAllocated`] if the key is absent, [`Error::Stale`] if `version` is not
    /// above the stored one. Nothing changes then.
    pub fn touch(
        &mut self,
        key: &[u8],
        version: Version,
        expiry_ms: Option<NonZeroU64>,
    ) -> Result<ParityUpdate, Error> {
        let node = self.node;
        let p = self
            .keys
            .get_mut(key)
            .ok_or(Error::NotAllocated { offset: 0, len: 0 })?;
        let mut meta = p.unpack(node);
        if version <= meta.version {
            return Err(Error::Stale);
        }
        meta.version = version;
        meta.expiry_ms = expiry_ms;
        *p = PackedMeta::pack(&meta);
        self.seq = self.seq.saturating_add(1);
        Ok(ParityUpdate {
            owner: self.node,
            seq: self.seq,
            offset: meta.offset,
            delta: Vec::new(),
            meta: Some(MetaChange::Put {
                key: key.to_vec(),
                meta,
            }),
        })
    }

    /// Like [`Arena::put`], but the previous value's range is *not* freed: it is returned so
    /// the caller can keep serving the previous (committed) value until the new one commits,
    /// then free it with [`Arena::free`]. The key's metadata points at the new range at once.
    ///
    /// # Errors
    /// As [`Arena::put`].
    pub fn put_deferred(
        &mut self,
        key: &[u8],
        version: Version,
        value: &[u8],
        kind: ValueKind,
        expiry_ms: Option<NonZeroU64>,
    ) -> Result<(ParityUpdate, Option<(u64, u64)>), Error> {
        let old = self.meta(key);
        if let Some(o) = old {
            if version <= o.version {
                return Err(Error::Stale);
            }
            // Take the old range out of the key's hands so `put` does not free it: park the
            // key as empty first (metadata only), then put.
            if let Some(m) = self.keys.get_mut(key) {
                m.len = 0;
            }
        }
        match self.put_with(key, version, value, kind, expiry_ms) {
            Ok(up) => Ok((up, old.filter(|o| o.len > 0).map(|o| (o.offset, o.len)))),
            Err(e) => {
                if let (Some(o), Some(m)) = (old, self.keys.get_mut(key)) {
                    *m = PackedMeta::pack(&o);
                }
                Err(e)
            }
        }
    }

    /// Removes `key` at `version` with the metadata change `retire` decides (a tombstone
    /// [`MetaChange::Delete`] or a [`MetaChange::Retire`]), *not* freeing its range: the
    /// range is returned for the caller to free once the change commits.
    ///
    /// # Errors
    /// [`Error::NotAllocated`] if the key is absent, [`Error::Stale`] if `version` is not
    /// above the stored one (for a retire: below it).
    pub fn remove_deferred(
        &mut self,
        key: &[u8],
        version: Version,
        retire: bool,
    ) -> Result<(ParityUpdate, Option<(u64, u64)>), Error> {
        let old = self
            .meta(key)
            .ok_or(Error::NotAllocated { offset: 0, len: 0 })?;
        if version < old.version || (!retire && version == old.version) {
            return Err(Error::Stale);
        }
        self.keys.remove(key);
        self.meta_bytes = self
            .meta_bytes
            .saturating_sub(key.len() as u64)
            .saturating_sub(META_RECORD_BYTES);
        if retire {
            self.retire_tomb(key, version);
        } else {
            self.note_tomb(key, version);
        }
        self.seq = self.seq.saturating_add(1);
        let meta = if retire {
            MetaChange::Retire {
                key: key.to_vec(),
                version,
            }
        } else {
            MetaChange::Delete {
                key: key.to_vec(),
                version,
            }
        };
        Ok((
            ParityUpdate {
                owner: self.node,
                seq: self.seq,
                offset: old.offset,
                delta: Vec::new(),
                meta: Some(meta),
            },
            (old.len > 0).then_some((old.offset, old.len)),
        ))
    }

    /// Takeover: registers `key` at `meta` (from a parity holder's metadata copy) as
    /// allocated, without producing a parity update. The bytes come later
    /// ([`Arena::restore_bytes`]).
    ///
    /// # Errors
    /// [`Error::NotAllocated`] if the range is not free (overlaps another key), or
    /// [`Error::Range`] if it passes the capacity.
    pub fn restore_key(&mut self, key: &[u8], meta: KeyMeta) -> Result<(), Error> {
        check_key(key)?;
        if self.keys.contains_key(key) {
            return Err(Error::Stale);
        }
        if meta.len > 0 {
            self.take_range(meta.offset, meta.len)?;
        }
        let meta = KeyMeta {
            owner: self.node,
            ..meta
        };
        self.drop_tomb(key);
        self.keys
            .insert(SmallKey::new(key), PackedMeta::pack(&meta));
        self.meta_bytes = self
            .meta_bytes
            .saturating_add(key.len() as u64)
            .saturating_add(META_RECORD_BYTES);
        Ok(())
    }

    /// Marks exactly `[offset, offset + len)` allocated; it must lie inside one free range.
    fn take_range(&mut self, offset: u64, len: u64) -> Result<(), Error> {
        let bad = Error::NotAllocated { offset, len };
        let end = offset.checked_add(len).ok_or(bad)?;
        if len > u64::from(VALUE_BYTES_MAX) || end > self.capacity {
            return Err(Error::Range { offset, len });
        }
        let (fo, fl) = self
            .free
            .range(..=offset)
            .next_back()
            .map(|(o, l)| (*o, *l))
            .ok_or(bad)?;
        let fend = fo.checked_add(fl).ok_or(bad)?;
        if end > fend {
            return Err(bad);
        }
        self.free.remove(&fo);
        if offset > fo {
            self.free.insert(fo, offset.saturating_sub(fo));
        }
        if fend > end {
            self.free.insert(end, fend.saturating_sub(end));
        }
        self.used.insert(offset, len);
        self.payload_bytes = self.payload_bytes.saturating_add(len);
        Ok(())
    }

    /// Takeover: writes recovered (decoded) bytes at `offset` without a parity update —
    /// parity already covers them. Any range below the capacity may be restored, allocated
    /// or not (freed space holds stale bytes that parity covers too).
    ///
    /// # Errors
    /// [`Error::Range`] if the range passes the capacity.
    pub fn restore_bytes(&mut self, offset: u64, bytes: &[u8]) -> Result<(), Error> {
        let len = bytes.len() as u64;
        let range = Error::Range { offset, len };
        let end = offset.checked_add(len).ok_or(range)?;
        if end > self.capacity {
            return Err(range);
        }
        let start = usize::try_from(offset).map_err(|_| range)?;
        let end = usize::try_from(end).map_err(|_| range)?;
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes
            .get_mut(start..end)
            .ok_or(range)?
            .copy_from_slice(bytes);
        Ok(())
    }

    /// Takeover: continues the update numbering after `seq` (what the parity holders applied
    /// from the previous owner of this arena).
    pub fn set_last_seq(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// A metadata-only update (no arena bytes change), e.g. a tombstone for a key this arena
    /// does not hold. Takes the next sequence number.
    pub fn meta_update(&mut self, meta: MetaChange) -> ParityUpdate {
        match &meta {
            MetaChange::Delete { key, version } if !self.keys.contains_key(key.as_slice()) => {
                self.note_tomb(key, *version);
            }
            MetaChange::Retire { key, version } => self.retire_tomb(key, *version),
            _ => {}
        }
        self.seq = self.seq.saturating_add(1);
        ParityUpdate {
            owner: self.node,
            seq: self.seq,
            offset: 0,
            delta: Vec::new(),
            meta: Some(meta),
        }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Up to `limit` keys strictly after `after` with their metadata, in key order.
    pub fn keys_after(&self, after: Option<&[u8]>, limit: usize) -> Vec<(&[u8], KeyMeta)> {
        self.keys
            .iter_after(after)
            .take(limit)
            .map(|(k, m)| (k.as_bytes(), m.unpack(self.node)))
            .collect()
    }

    /// Every key with its metadata, in key order.
    pub fn keys(&self) -> impl Iterator<Item = (&[u8], KeyMeta)> {
        self.keys
            .iter()
            .map(|(k, m)| (k.as_bytes(), m.unpack(self.node)))
    }

    /// Tombstones (keys deleted here, not live now) with their delete version, in key order.
    pub fn tombstones(&self) -> impl Iterator<Item = (&[u8], Version)> {
        self.tombs.iter().map(|(k, v)| (k.as_bytes(), *v))
    }

    /// Takeover: records a tombstone a parity holder kept (`key` deleted at `version`), so a
    /// later snapshot of this arena hands it on. Ignored while the key is live here or an
    /// equal or newer tombstone is recorded.
    ///
    /// # Errors
    /// [`Error::Range`] for an empty or oversized key.
    pub fn restore_tombstone(&mut self, key: &[u8], version: Version) -> Result<(), Error> {
        check_key(key)?;
        if !self.keys.contains_key(key) {
            self.note_tomb(key, version);
        }
        Ok(())
    }

    /// One snapshot page for a resynchronising parity holder: up to `limit` entries strictly
    /// after `after`, live keys (`Ok`) and tombstones (`Err(version)`) merged in key order.
    /// A key is never both (a put drops the tombstone, a delete the live entry).
    pub fn entries_after(
        &self,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Vec<(&[u8], Result<KeyMeta, Version>)> {
        let mut live = self
            .keys
            .iter_after(after)
            .map(|(k, m)| (k.as_bytes(), Ok(m.unpack(self.node))))
            .peekable();
        let mut dead = self
            .tombs
            .iter_after(after)
            .map(|(k, v)| (k.as_bytes(), Err(*v)))
            .peekable();
        let mut page = Vec::new();
        while page.len() < limit {
            let take_live = match (live.peek(), dead.peek()) {
                (Some(a), Some(b)) => a.0 <= b.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if take_live { live.next() } else { dead.next() };
            page.extend(next);
        }
        page
    }

    /// Records `key` deleted at `version` unless a newer tombstone is there.
    fn note_tomb(&mut self, key: &[u8], version: Version) {
        match self.tombs.get_mut(key) {
            Some(v) => *v = (*v).max(version),
            None => {
                self.tombs.insert(SmallKey::new(key), version);
                self.meta_bytes = self
                    .meta_bytes
                    .saturating_add(key.len() as u64)
                    .saturating_add(TOMB_RECORD_BYTES);
            }
        }
    }

    /// A retire at `version` drops a tombstone at or below it (as the holders do).
    fn retire_tomb(&mut self, key: &[u8], version: Version) {
        if self.tombs.get(key).is_some_and(|v| *v <= version) {
            self.drop_tomb(key);
        }
    }

    fn drop_tomb(&mut self, key: &[u8]) {
        if self.tombs.remove(key).is_some() {
            self.meta_bytes = self
                .meta_bytes
                .saturating_sub(key.len() as u64)
                .saturating_sub(TOMB_RECORD_BYTES);
        }
    }

    /// Memory accounting.
    pub fn accounting(&self) -> Accounting {
        Accounting {
            payload_bytes: self.payload_bytes,
            data_bytes: self.bytes.len() as u64,
            parity_bytes: 0,
            meta_bytes: self.meta_bytes,
        }
    }

    /// Checks the allocator's invariants: free and used ranges are disjoint, in bounds,
    /// cover `[0, capacity)` exactly, free ranges are coalesced, and payload matches.
    ///
    /// # Panics
    /// On a broken invariant (a bug in this module, never bad input).
    pub fn check_invariants(&self) {
        let mut all: Vec<(u64, u64, bool)> = self
            .free
            .iter()
            .map(|(o, l)| (*o, *l, true))
            .chain(self.used.iter().map(|(o, l)| (*o, *l, false)))
            .collect();
        all.sort_unstable();
        let mut cursor = 0u64;
        let mut prev_free = false;
        for (o, l, is_free) in all {
            assert_eq!(o, cursor, "arena ranges must tile [0, capacity)");
            assert!(l > 0, "empty range");
            assert!(!(prev_free && is_free), "free ranges must be coalesced");
            prev_free = is_free;
            cursor = o.saturating_add(l);
        }
        assert_eq!(cursor, self.capacity);
        let payload: u64 = self.used.values().sum();
        assert_eq!(payload, self.payload_bytes);
        for m in self.keys.values().filter(|m| m.len > 0) {
            assert_eq!(
                self.used.get(&m.offset),
                Some(&m.len()),
                "key points at its range"
            );
        }
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

    fn arena() -> Arena {
        Arena::new(Layout::new(2, 1, 3, 64).unwrap(), 1, 4096).unwrap()
    }

    /// Tombstones follow the key's life (a delete records one, a put or a retire at or
    /// above it drops it) and snapshot pages merge them with the live keys in key order.
    #[test]
    fn tombstones_are_kept_and_paged_with_live_keys() {
        let mut a = arena();
        let v = |n: u64| Version::new(n, 0, 1, 0);
        a.put(b"a", v(1), b"x").unwrap();
        a.put(b"b", v(2), b"yy").unwrap();
        a.put(b"c", v(3), b"zzz").unwrap();
        a.delete(b"b", v(4)).unwrap();
        let _ = a.meta_update(MetaChange::Delete {
            key: b"d".to_vec(),
            version: v(5),
        });
        let (_, _) = a.remove_deferred(b"c", v(6), false).unwrap();
        let page: Vec<(Vec<u8>, Option<Version>)> = a
            .entries_after(None, 10)
            .into_iter()
            .map(|(k, m)| (k.to_vec(), m.err()))
            .collect();
        assert_eq!(
            page,
            vec![
                (b"a".to_vec(), None),
                (b"b".to_vec(), Some(v(4))),
                (b"c".to_vec(), Some(v(6))),
                (b"d".to_vec(), Some(v(5))),
            ]
        );
        // Paging from a cursor, two at a time.
        let keys = |p: Vec<(&[u8], Result<KeyMeta, Version>)>| {
            p.into_iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>()
        };
        assert_eq!(
            keys(a.entries_after(Some(b"a"), 2)),
            vec![b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(keys(a.entries_after(Some(b"c"), 2)), vec![b"d".to_vec()]);
        // A put supersedes the tombstone; a retire at or above it drops it.
        a.put(b"b", v(7), b"again").unwrap();
        let _ = a.meta_update(MetaChange::Retire {
            key: b"d".to_vec(),
            version: v(5),
        });
        let _ = a.meta_update(MetaChange::Retire {
            key: b"c".to_vec(),
            version: v(5),
        });
        let left: Vec<(Vec<u8>, Version)> = a.tombstones().map(|(k, v)| (k.to_vec(), v)).collect();
        assert_eq!(left, vec![(b"c".to_vec(), v(6))]);
        // A takeover restores a holder's tombstone unless the key is live.
        a.restore_tombstone(b"e", v(8)).unwrap();
        a.restore_tombstone(b"a", v(9)).unwrap();
        assert_eq!(a.tombstones().count(), 2);
        assert!(a.meta(b"a").is_some());
        a.check_invariants();
    }

    /// The packed record the key maps keep gives back exactly the `KeyMeta` it was made
    /// from (a version with both halves set, every field at its extremes), with the owner
    /// taken from the map.
    #[test]
    fn packed_meta_round_trips() {
        let metas = [
            KeyMeta {
                owner: 7,
                offset: crate::bounds::ARENA_BYTES_MAX - 1,
                len: u64::from(VALUE_BYTES_MAX),
                version: Version(u128::MAX - 5),
                kind: ValueKind::Record,
                expiry_ms: NonZeroU64::new(u64::MAX),
            },
            KeyMeta {
                owner: 0,
                offset: 0,
                len: 0,
                version: Version::new(1 << 40, 3, 9, 1),
                kind: ValueKind::String,
                expiry_ms: None,
            },
        ];
        for m in metas {
            let p = PackedMeta::pack(&m);
            assert_eq!(p.unpack(m.owner), m);
            assert_eq!(p.version(), m.version);
            assert_eq!(p.len(), m.len);
        }
    }

    #[test]
    fn allocate_free_coalesce() {
        let mut a = arena();
        let x = a.allocate(100).unwrap();
        let y = a.allocate(200).unwrap();
        let z = a.allocate(300).unwrap();
        assert_eq!((x, y, z), (0, 100, 300));
        a.free(y, 200).unwrap();
        a.check_invariants();
        assert_eq!(a.allocate(150).unwrap(), 100);
        a.free(x, 100).unwrap();
        a.free(100, 150).unwrap();
        a.free(z, 300).unwrap();
        a.check_invariants();
        assert_eq!(a.free.len(), 1);
        assert!(a.free(0, 5).is_err());
        assert!(matches!(a.allocate(5000), Err(Error::NoSpace { .. })));
        assert!(a.allocate(0).is_err());
    }

    #[test]
    fn put_get_delete_versions() {
        let mut a = arena();
        let v1 = Version::new(1, 0, 1, 1);
        let v2 = Version::new(2, 0, 1, 2);
        let u = a.put(b"k", v1, b"hello").unwrap();
        assert_eq!(u.seq, 1);
        assert_eq!(u.delta, b"hello".to_vec()); // fresh bytes are zero
        assert_eq!(a.get(b"k").unwrap(), b"hello");
        assert_eq!(a.put(b"k", v1, b"x"), Err(Error::Stale));
        a.put(b"k", v2, b"world!").unwrap();
        assert_eq!(a.get(b"k").unwrap(), b"world!");
        a.check_invariants();
        assert_eq!(a.accounting().payload_bytes, 6);
        let d = a.delete(b"k", Version::new(3, 0, 1, 3)).unwrap();
        assert_eq!(d.seq, 3);
        assert!(a.get(b"k").is_none());
        assert_eq!(a.accounting().payload_bytes, 0);
        // What is left is the tombstone (handed to a resynchronising holder).
        assert_eq!(a.accounting().meta_bytes, 1 + TOMB_RECORD_BYTES);
        a.check_invariants();
    }

    #[test]
    fn empty_values_are_metadata_only() {
        let mut a = arena();
        let u = a.put(b"e", Version::new(1, 0, 1, 1), b"").unwrap();
        assert!(u.delta.is_empty());
        assert_eq!(a.get(b"e").unwrap(), Vec::<u8>::new());
        a.put(b"e", Version::new(2, 0, 1, 1), b"x").unwrap();
        a.put(b"e", Version::new(3, 0, 1, 1), b"").unwrap();
        a.check_invariants();
        a.delete(b"e", Version::new(4, 0, 1, 1)).unwrap();
        a.check_invariants();
        assert_eq!(a.accounting().payload_bytes, 0);
    }

    #[test]
    fn write_must_stay_inside_an_allocation() {
        let mut a = arena();
        let o = a.allocate(10).unwrap();
        assert!(a.write(o, &[1; 11]).is_err());
        assert!(a.write(o + 5, &[1; 5]).is_ok());
        assert!(a.write(100, &[1]).is_err());
        assert!(a.write(u64::MAX, &[1]).is_err());
    }

    #[test]
    fn expiry_travels_with_the_metadata_and_touch_changes_only_metadata() {
        let mut a = arena();
        let v1 = Version::new(1, 0, 1, 1);
        let u = a
            .put_with(
                b"t",
                v1,
                b"hello",
                ValueKind::String,
                NonZeroU64::new(5_000),
            )
            .unwrap();
        let Some(MetaChange::Put { meta, .. }) = &u.meta else {
            panic!("a put carries its metadata");
        };
        assert_eq!(meta.expiry_ms, NonZeroU64::new(5_000));
        let at = a.meta(b"t").unwrap();
        let seq = a.last_seq();
        // EXPIRE: same bytes, same place, new version and expiry; no delta.
        let v2 = Version::new(2, 0, 1, 1);
        let t = a.touch(b"t", v2, NonZeroU64::new(9_000)).unwrap();
        assert!(t.delta.is_empty());
        assert_eq!(t.seq, seq + 1);
        let m = a.meta(b"t").unwrap();
        assert_eq!((m.offset, m.len, m.version), (at.offset, at.len, v2));
        assert_eq!(m.expiry_ms, NonZeroU64::new(9_000));
        assert_eq!(
            t.meta,
            Some(MetaChange::Put {
                key: b"t".to_vec(),
                meta: m
            })
        );
        // PERSIST.
        a.touch(b"t", Version::new(3, 0, 1, 1), None).unwrap();
        assert_eq!(a.meta(b"t").unwrap().expiry_ms, None);
        assert_eq!(a.get(b"t").unwrap(), b"hello");
        // Stale or absent: refused, nothing changes.
        assert_eq!(a.touch(b"t", v2, NonZeroU64::new(1)), Err(Error::Stale));
        assert!(a.touch(b"nope", Version::new(9, 0, 1, 1), None).is_err());
        assert_eq!(a.meta(b"t").unwrap().expiry_ms, None);
        assert_eq!(a.accounting().payload_bytes, 5);
        a.check_invariants();
        // A deferred put keeps the expiry it is given, a plain put clears it.
        let (u, _) = a
            .put_deferred(
                b"t",
                Version::new(4, 0, 1, 1),
                b"x",
                ValueKind::Record,
                NonZeroU64::new(7),
            )
            .unwrap();
        assert!(
            matches!(&u.meta, Some(MetaChange::Put { meta, .. }) if meta.expiry_ms == NonZeroU64::new(7))
        );
        assert_eq!(a.meta(b"t").unwrap().kind, ValueKind::Record);
    }

    #[test]
    fn holds_value_compares_bytes_and_kind() {
        let mut a = arena();
        a.put(b"k", Version::new(1, 0, 1, 1), b"abc").unwrap();
        assert!(a.holds_value(b"k", b"abc", ValueKind::String));
        assert!(!a.holds_value(b"k", b"abd", ValueKind::String));
        assert!(!a.holds_value(b"k", b"abcd", ValueKind::String));
        assert!(!a.holds_value(b"k", b"abc", ValueKind::Record));
        assert!(!a.holds_value(b"other", b"abc", ValueKind::String));
        a.put(b"e", Version::new(2, 0, 1, 1), b"").unwrap();
        assert!(a.holds_value(b"e", b"", ValueKind::String));
        assert!(!a.holds_value(b"e", b"x", ValueKind::String));
    }
}
