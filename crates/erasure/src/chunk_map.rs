//! [`ChunkMap`]: an ordered map kept as sorted runs ("chunks") of exact-capacity vectors,
//! for the ec key maps that hold one record per key per copy.
//!
//! # Why not `BTreeMap`
//!
//! The ec metadata of every key is kept three times for ec:3+2 (the coordinator's arena
//! map and one per-owner map on each of the M holders), plus the arena's offset map. As
//! `BTreeMap`s those cost their entries *and* the empty slots of their nodes: std's B-tree
//! nodes hold 11 entries, and under the benchmark's insertion order (keys spread over
//! slots, so effectively random) they sit ~70 % full, so a 64-byte entry cost ~92 bytes
//! (docs/design/cluster-memory.md, session 18 measured it per structure).
//!
//! Here the entries are sorted vectors of at most [`CHUNK_ENTRIES_MAX`] entries, and each
//! vector's *capacity* follows its length: it grows by [`CHUNK_GROW`] entries at a time
//! and is shrunk back after a split or removals. How full a chunk is (its entry count) no
//! longer decides its memory; what is left over is at most `CHUNK_GROW` entries per chunk
//! plus a 24-byte vector header and one allocator header: ~5 % of the entries, against
//! ~45 % for the B-tree.
//!
//! ```text
//!   chunks: [ c0 | c1 | c2 | ... ]            sorted, disjoint, none empty
//!   c1:     [ (k, v) (k, v) ... (k, v) ]      sorted, 1..=CHUNK_ENTRIES_MAX entries,
//!                                             capacity ≤ len + CHUNK_GROW
//! ```
//!
//! Costs: a lookup is two binary searches (chunk by first key, then inside the chunk), as
//! many comparisons as the B-tree's. An insert or remove moves on average half a chunk
//! (≤ 4 KiB for 64-byte entries) and every `CHUNK_GROW`-th insert into a chunk reallocates
//! it (a copy of ≤ 8 KiB): a few hundred nanoseconds, next to a network round trip per
//! write. A split moves the chunk headers after it (24 bytes per 64-128 entries).
//!
//! The maps with one entry per key use *large* chunks ([`ChunkMap::with_large_chunks`],
//! 256 KiB): in node processes, whose glibc mmap threshold is fixed at 128 KiB, each such
//! chunk is an mmapped block, grown by `mremap` and shrunk page by page. Small chunks in the
//! heap left their old blocks behind as glibc free space when they grew, which kept most of
//! what they saved off RSS (measured; jemalloc, which purges, showed the whole saving). A
//! large chunk costs more per insert or remove of a key (half a chunk moved, ≤ 128 KiB);
//! updates of a present key change its entry in place.
//!
//! Order and paging are exactly the B-tree's (`K`'s `Ord`, lookups by any `Q` that `K`
//! borrows as), so "entries strictly after K" gives the same pages on every node.

use std::borrow::Borrow;

/// Most entries in one chunk. 128 entries of 64 bytes = 8 KiB: an insert moves ≤ 8 KiB,
/// and the per-chunk overhead (header, allocator header, ≤ `CHUNK_GROW` spare entries)
/// is spread over 64-128 entries.
pub const CHUNK_ENTRIES_MAX: usize = 128;
/// Entries a chunk's vector grows by when full: its spare capacity never exceeds this
/// (after a split both halves are exact; removals shrink past `CHUNK_SPARE_MAX`).
pub const CHUNK_GROW: usize = 8;
/// A chunk with fewer entries than this after a removal is merged into a neighbour when
/// the two fit in one chunk.
const CHUNK_ENTRIES_MIN: usize = CHUNK_ENTRIES_MAX / 4;
/// Bytes of the large chunks of [`ChunkMap::with_large_chunks`]: 256 KiB, so that both halves
/// of a split (128 KiB) reach glibc's mmap threshold, which node processes fix at 128 KiB
/// (`launch::tune_allocator`, cluster-memory.md item 2).
pub const LARGE_CHUNK_BYTES: usize = 256 * 1024;
/// Spare capacity past which a chunk that lost entries is shrunk (back to `CHUNK_GROW`).
const CHUNK_SPARE_MAX: usize = 2 * CHUNK_GROW;

const _: () = assert!(CHUNK_GROW < CHUNK_ENTRIES_MIN && CHUNK_ENTRIES_MIN < CHUNK_ENTRIES_MAX);

/// An ordered map of `K → V` (see the module docs).
#[derive(Clone, Debug)]
pub struct ChunkMap<K, V> {
    chunks: Vec<Vec<(K, V)>>,
    len: usize,
    /// Most entries in one chunk: [`CHUNK_ENTRIES_MAX`], or [`LARGE_CHUNK_BYTES`]' worth.
    max: usize,
}

impl<K, V> Default for ChunkMap<K, V> {
    fn default() -> Self {
        ChunkMap::new()
    }
}

impl<K, V> ChunkMap<K, V> {
    /// An empty map (allocates nothing).
    pub const fn new() -> Self {
        ChunkMap {
            chunks: Vec::new(),
            len: 0,
            max: CHUNK_ENTRIES_MAX,
        }
    }

    /// An empty map whose chunks hold up to [`LARGE_CHUNK_BYTES`] of entries (at least
    /// `CHUNK_ENTRIES_MAX`). For the maps that hold one entry per key (the arena's key map,
    /// the holders' per-owner maps): in node processes each chunk past its first split is an
    /// mmapped block, so growing it is an `mremap` and shrinking it gives pages back, where
    /// heap blocks of small chunks, reallocated as they grow, left their old blocks behind as
    /// glibc free space — measured: it kept most of what the small chunks saved off RSS
    /// (cluster-memory.md, session 18). Cost: an insert or remove of a key moves half a chunk
    /// (≤ 128 KiB; only new or removed keys, an update changes its entry in place).
    pub fn with_large_chunks() -> Self {
        ChunkMap {
            chunks: Vec::new(),
            len: 0,
            max: Self::large_max(LARGE_CHUNK_BYTES),
        }
    }

    /// [`ChunkMap::with_large_chunks`] with chunks of `bytes` (tests use small ones).
    pub fn with_chunk_bytes(bytes: usize) -> Self {
        ChunkMap {
            chunks: Vec::new(),
            len: 0,
            max: Self::large_max(bytes),
        }
    }

    fn large_max(bytes: usize) -> usize {
        let entry = std::mem::size_of::<(K, V)>().max(1);
        bytes.checked_div(entry).unwrap_or(0).max(CHUNK_ENTRIES_MIN)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every entry and gives the memory back.
    pub fn clear(&mut self) {
        self.chunks = Vec::new();
        self.len = 0;
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.chunks.iter().flatten().map(|(k, v)| (k, v))
    }

    /// Every value, in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> + '_ {
        self.chunks.iter().flatten().map(|(_, v)| v)
    }

    /// Bytes this map holds on the heap, by capacity (not counting allocator headers or
    /// heap blocks the keys or values own): what the structure itself costs.
    pub fn heap_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(K, V)>();
        let chunks = self
            .chunks
            .iter()
            .map(|c| c.capacity().saturating_mul(entry))
            .fold(0usize, usize::saturating_add);
        self.chunks
            .capacity()
            .saturating_mul(std::mem::size_of::<Vec<(K, V)>>())
            .saturating_add(chunks)
    }
}

impl<K: Ord, V> ChunkMap<K, V> {
    /// Index of the chunk that holds `key` or would take it: the last chunk whose first key
    /// is ≤ `key` (the first chunk when `key` is below every key). `None` when empty.
    fn chunk_for<Q>(&self, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        if self.chunks.is_empty() {
            return None;
        }
        let after = self
            .chunks
            .partition_point(|c| c.first().is_some_and(|(k, _)| k.borrow() <= key));
        Some(after.saturating_sub(1))
    }

    fn find<Q>(&self, key: &Q) -> Option<(usize, usize)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let c = self.chunk_for(key)?;
        let i = self
            .chunks
            .get(c)?
            .binary_search_by(|(k, _)| k.borrow().cmp(key))
            .ok()?;
        Some((c, i))
    }

    /// The value of `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (c, i) = self.find(key)?;
        self.chunks.get(c)?.get(i).map(|(_, v)| v)
    }

    /// The value of `key`, mutably.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (c, i) = self.find(key)?;
        self.chunks.get_mut(c)?.get_mut(i).map(|(_, v)| v)
    }

    /// Whether `key` is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.find(key).is_some()
    }

    /// The entry with the greatest key ≤ `key` (a predecessor lookup).
    pub fn last_at_or_before<Q>(&self, key: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let c = self.chunk_for(key)?;
        let chunk = self.chunks.get(c)?;
        let n = chunk.partition_point(|(k, _)| k.borrow() <= key);
        // n = 0 only in the first chunk, when `key` is below every key.
        chunk.get(n.checked_sub(1)?).map(|(k, v)| (k, v))
    }

    /// Entries with keys strictly after `after` (every entry for `None`), in key order.
    pub fn iter_after<'a, Q>(
        &'a self,
        after: Option<&Q>,
    ) -> impl Iterator<Item = (&'a K, &'a V)> + 'a
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (c, i) = match after.and_then(|a| self.chunk_for(a).map(|c| (a, c))) {
            None => (0, 0),
            Some((a, c)) => {
                let i = self
                    .chunks
                    .get(c)
                    .map_or(0, |ch| ch.partition_point(|(k, _)| k.borrow() <= a));
                (c, i)
            }
        };
        let first = self.chunks.get(c).and_then(|ch| ch.get(i..)).unwrap_or(&[]);
        let rest = self.chunks.get(c.saturating_add(1)..).unwrap_or(&[]);
        first
            .iter()
            .chain(rest.iter().flatten())
            .map(|(k, v)| (k, v))
    }

    /// Inserts `key → value`; returns the previous value of `key`, if any.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let Some(c) = self.chunk_for(&key) else {
            let mut chunk = Vec::with_capacity(CHUNK_GROW);
            chunk.push((key, value));
            self.chunks.push(chunk);
            self.len = 1;
            return None;
        };
        let last = c.saturating_add(1) == self.chunks.len();
        let Some(chunk) = self.chunks.get_mut(c) else {
            return None; // `chunk_for` returns an index in range
        };
        let at = match chunk.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => {
                return chunk
                    .get_mut(i)
                    .map(|slot| std::mem::replace(&mut slot.1, value));
            }
            Err(i) => i,
        };
        if chunk.len() >= self.max {
            // Split. Appending past the end of the last chunk (ascending inserts, e.g.
            // arena offsets) starts a new chunk and leaves the full one full; anywhere
            // else the chunk splits in halves.
            let mid = if last && at == chunk.len() {
                chunk.len()
            } else {
                chunk.len() / 2
            };
            // Both halves get exact capacities: under the benchmark's order most chunks are
            // not written again soon after a split, and spare room left in each would be
            // ~8 % of the map (measured); the one that takes the new entry grows below.
            let mut right: Vec<(K, V)> = Vec::with_capacity(chunk.len().saturating_sub(mid));
            right.extend(chunk.drain(mid..));
            chunk.shrink_to_fit();
            let (target, pos) = if at <= mid && !(mid == at && right.is_empty()) {
                (c, at)
            } else {
                (c.saturating_add(1), at.saturating_sub(mid))
            };
            self.chunks.insert(c.saturating_add(1), right);
            if let Some(t) = self.chunks.get_mut(target) {
                grow_for_one(t);
                t.insert(pos, (key, value));
            }
        } else {
            grow_for_one(chunk);
            chunk.insert(at, (key, value));
        }
        self.len = self.len.saturating_add(1);
        None
    }

    /// Removes `key`; returns its value, if it was present.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let (c, i) = self.find(key)?;
        let chunk = self.chunks.get_mut(c)?;
        let (_, v) = chunk.remove(i);
        self.len = self.len.saturating_sub(1);
        if chunk.is_empty() {
            self.chunks.remove(c);
        } else if chunk.len() < self.max / 4 {
            self.merge_small(c);
        } else if chunk.capacity() >= chunk.len().saturating_add(CHUNK_SPARE_MAX) {
            chunk.shrink_to(chunk.len().saturating_add(CHUNK_GROW));
        }
        Some(v)
    }

    /// Merges chunk `c` (below the minimum) into its right or left neighbour when the two
    /// fit in one chunk; otherwise only trims its capacity.
    fn merge_small(&mut self, c: usize) {
        let n = self.chunks.get(c).map_or(0, Vec::len);
        let fits =
            |o: Option<&Vec<(K, V)>>| o.is_some_and(|x| x.len().saturating_add(n) <= self.max);
        let (into, from) = if fits(self.chunks.get(c.saturating_add(1))) {
            (c, c.saturating_add(1))
        } else if c > 0 && fits(self.chunks.get(c.saturating_sub(1))) {
            (c.saturating_sub(1), c)
        } else {
            if let Some(ch) = self.chunks.get_mut(c) {
                if ch.capacity() >= ch.len().saturating_add(CHUNK_SPARE_MAX) {
                    ch.shrink_to(ch.len().saturating_add(CHUNK_GROW));
                }
            }
            return;
        };
        let moved = self.chunks.remove(from);
        if let Some(dst) = self.chunks.get_mut(into) {
            dst.reserve_exact(moved.len());
            dst.extend(moved);
            dst.shrink_to(dst.len().saturating_add(CHUNK_GROW));
        }
    }

    /// Checks the structure: chunks non-empty, within bounds, sorted and disjoint, spare
    /// capacity bounded, `len` right.
    ///
    /// # Panics
    /// On a broken invariant (a bug in this module, never bad input).
    pub fn check_invariants(&self) {
        let mut n = 0usize;
        let mut prev: Option<&K> = None;
        for c in &self.chunks {
            assert!(!c.is_empty(), "empty chunk");
            assert!(c.len() <= self.max, "chunk over the bound");
            assert!(
                c.capacity() <= c.len().saturating_add(CHUNK_SPARE_MAX),
                "chunk capacity {} for {} entries",
                c.capacity(),
                c.len()
            );
            for (k, _) in c {
                assert!(prev.is_none_or(|p| p < k), "keys out of order");
                prev = Some(k);
            }
            n = n.saturating_add(c.len());
        }
        assert_eq!(n, self.len, "entry count");
    }
}

/// Makes room for one more entry, growing by `CHUNK_GROW` (not doubling: the spare
/// capacity is what this structure saves).
fn grow_for_one<T>(v: &mut Vec<T>) {
    if v.len() == v.capacity() {
        v.reserve_exact(CHUNK_GROW);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::small_key::SmallKey;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(Vec<u8>, u32),
        Remove(Vec<u8>),
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = proptest::collection::vec(0u8..6, 1..4);
        prop_oneof![
            3 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            1 => key.prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// Against a `BTreeMap` model: every insert, remove, lookup, predecessor and page
        /// "strictly after K" agrees, and the structure's invariants hold after each step.
        #[test]
        fn behaves_like_btreemap(ops in proptest::collection::vec(op(), 0..700),
                                 probes in proptest::collection::vec(
                                     proptest::collection::vec(0u8..6, 0..4), 0..8),
                                 large in any::<bool>()) {
            // Both shapes: the default chunks and "large" ones (here 40 entries, so a run
            // splits and merges them often).
            let mut m: ChunkMap<SmallKey, u32> = if large {
                ChunkMap::with_chunk_bytes(40 * std::mem::size_of::<(SmallKey, u32)>())
            } else {
                ChunkMap::new()
            };
            let mut model: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
            for o in ops {
                match o {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(m.insert(SmallKey::new(&k), v), model.insert(k, v));
                    }
                    Op::Remove(k) => prop_assert_eq!(m.remove(&k[..]), model.remove(&k)),
                }
                m.check_invariants();
                prop_assert_eq!(m.len(), model.len());
            }
            let all: Vec<(Vec<u8>, u32)> = m.iter().map(|(k, v)| (k.as_bytes().to_vec(), *v)).collect();
            let want: Vec<(Vec<u8>, u32)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
            prop_assert_eq!(all, want);
            use std::ops::Bound;
            for p in probes {
                prop_assert_eq!(m.get(&p[..]), model.get(&p));
                prop_assert_eq!(m.contains_key(&p[..]), model.contains_key(&p));
                let got: Vec<u32> = m.iter_after(Some(&p[..])).map(|(_, v)| *v).collect();
                let want: Vec<u32> = model
                    .range::<[u8], _>((Bound::Excluded(&p[..]), Bound::Unbounded))
                    .map(|(_, v)| *v)
                    .collect();
                prop_assert_eq!(got, want);
                let pred = m.last_at_or_before(&p[..]).map(|(k, v)| (k.as_bytes().to_vec(), *v));
                let want = model.range::<Vec<u8>, _>(..=p.clone()).next_back().map(|(k, v)| (k.clone(), *v));
                prop_assert_eq!(pred, want);
            }
            let none: Vec<u32> = m.iter_after(None::<&[u8]>).map(|(_, v)| *v).collect();
            prop_assert_eq!(none, model.values().copied().collect::<Vec<_>>());
        }
    }

    /// Ascending inserts (arena offsets) fill chunks completely; random inserts leave at
    /// most `CHUNK_GROW` spare entries per chunk; removals shrink and merge chunks.
    #[test]
    fn memory_follows_the_entries() {
        let mut asc: ChunkMap<u64, u64> = ChunkMap::new();
        for i in 0..10_000u64 {
            asc.insert(i, i);
        }
        asc.check_invariants();
        assert_eq!(asc.chunks.len(), 10_000usize.div_ceil(CHUNK_ENTRIES_MAX));
        let entry = std::mem::size_of::<(u64, u64)>();
        // ≤ 3 % over the entries themselves (chunk headers and spare capacity).
        assert!(
            asc.heap_bytes() * 100 <= 10_000 * entry * 103,
            "{}",
            asc.heap_bytes()
        );
        // A pseudo-random order (multiplicative hash of i).
        let mut rnd: ChunkMap<u64, u64> = ChunkMap::new();
        for i in 0..10_000u64 {
            rnd.insert(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20, i);
        }
        rnd.check_invariants();
        assert!(
            rnd.heap_bytes() * 100 <= 10_000 * entry * 112,
            "{}",
            rnd.heap_bytes()
        );
        // Removing most entries gives the memory back.
        for i in 0..9_000u64 {
            assert_eq!(
                rnd.remove(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20)),
                Some(i)
            );
        }
        rnd.check_invariants();
        assert!(
            rnd.heap_bytes() <= 1_000 * entry * 2,
            "{}",
            rnd.heap_bytes()
        );
        for i in 9_000..10_000u64 {
            rnd.remove(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20));
        }
        assert!(rnd.is_empty());
        assert_eq!(rnd.chunks.len(), 0);
    }
}
