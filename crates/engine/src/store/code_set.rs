//! [`CodeSet`]: a sorted set of `u64` codes kept in fixed-size chunks, for the per-slot
//! index's scan order (`slot_index.rs`), which holds one code per published entry of a
//! cluster node.
//!
//! # Why not `BTreeSet<u64>`
//! A std B-tree leaf holds 11 keys in a 104-byte node (112 with glibc's header) and under
//! random inserts its nodes sit ~70 % full, with internal nodes on top: heaptrack put the
//! order set at ~20 B per code on a cluster node (session 18), 2.5× the code itself, and it
//! grows with every key copy a node holds.
//!
//! Here the codes sit in sorted chunks of [`CHUNK_CODES`] slots, all allocated at that one
//! size, found by a binary search over the chunks' first codes:
//!
//! ```text
//!   firsts: [ f0 | f1 | f2 | ... ]              first code of each chunk (binary search)
//!   chunks: [ c0 | c1 | c2 | ... ]              sorted, disjoint, none empty
//!   c1:     [ code code ... code | unused ]     CHUNK_CODES slots, `len` of them in use
//! ```
//!
//! **Fill.** A full chunk that takes one more code first shares with a neighbour that has
//! room (the two are rebalanced evenly); only when both neighbours are full is it split —
//! with one full neighbour, two full chunks become three chunks two-thirds full (the B*-tree
//! rule). Removing codes merges a chunk into a neighbour when the two fit in one. So chunks
//! are ≥ 2/3 full after inserts and measure ~80 % full under random inserts: ~10 B per
//! code, plus ~0.2 B of chunk headers (`memory_follows_the_codes` checks ≤ 11).
//!
//! **Why one allocation size.** Chunks never grow or shrink; a split allocates one more
//! chunk of the same size and a merge frees one, which the next split reuses exactly. A
//! structure that grows its blocks by reallocation leaves holes of every size in glibc's
//! heap that it does not give back (the ec maps' first `ChunkMap` lost most of its saving
//! to them, cluster-memory.md "Session 18").
//!
//! **Costs.** A lookup is two binary searches; an insert or remove moves at most a chunk
//! (2 KiB) and a rebalance copies at most two or three (a few hundred nanoseconds, once per
//! ~50 inserts into a chunk).

/// Slots in one chunk: 2 KiB of codes. An insert moves at most this many, and the
/// per-chunk overhead (a 16-byte chunk header, an 8-byte first code, glibc's 16-byte block
/// header) is spread over ~200 codes.
pub(crate) const CHUNK_CODES: usize = 256;

/// A sorted set of `u64` (see the module docs).
#[derive(Debug)]
pub(crate) struct CodeSet {
    firsts: Vec<u64>,
    chunks: Vec<Chunk>,
    len: usize,
    /// Slots per chunk: [`CHUNK_CODES`] (smaller in tests, to force splits and merges).
    cap: usize,
    /// Reused buffer of a rebalance.
    scratch: Vec<u64>,
}

#[derive(Debug)]
struct Chunk {
    codes: Box<[u64]>,
    len: usize,
}

impl Chunk {
    fn new(cap: usize) -> Chunk {
        Chunk {
            codes: vec![0; cap].into_boxed_slice(),
            len: 0,
        }
    }

    fn live(&self) -> &[u64] {
        &self.codes[..self.len]
    }
}

impl Default for CodeSet {
    fn default() -> Self {
        CodeSet::with_chunk_codes(CHUNK_CODES)
    }
}

impl PartialEq for CodeSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl CodeSet {
    /// An empty set whose chunks hold `cap` codes (≥ 3: a split of two makes three).
    pub(crate) fn with_chunk_codes(cap: usize) -> CodeSet {
        assert!(cap >= 3, "a chunk must hold at least 3 codes");
        CodeSet {
            firsts: Vec::new(),
            chunks: Vec::new(),
            len: 0,
            cap,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The chunk that holds `x` if any chunk does: the last whose first code is ≤ `x` (the
    /// first chunk for an `x` below every code). `None` only when empty.
    fn chunk_of(&self, x: u64) -> Option<usize> {
        if self.chunks.is_empty() {
            return None;
        }
        Some(self.firsts.partition_point(|&f| f <= x).saturating_sub(1))
    }

    #[cfg(test)]
    pub(crate) fn contains(&self, x: u64) -> bool {
        self.chunk_of(x)
            .is_some_and(|i| self.chunks[i].live().binary_search(&x).is_ok())
    }

    /// Add `x`; false if it was there.
    pub(crate) fn insert(&mut self, x: u64) -> bool {
        let Some(i) = self.chunk_of(x) else {
            let mut c = Chunk::new(self.cap);
            c.codes[0] = x;
            c.len = 1;
            self.chunks.push(c);
            self.firsts.push(x);
            self.len = 1;
            return true;
        };
        let pos = match self.chunks[i].live().binary_search(&x) {
            Ok(_) => return false,
            Err(p) => p,
        };
        self.len += 1;
        let c = &mut self.chunks[i];
        if c.len < self.cap {
            c.codes.copy_within(pos..c.len, pos + 1);
            c.codes[pos] = x;
            c.len += 1;
            self.firsts[i] = c.codes[0];
            return true;
        }
        // Full: share with a neighbour that has room, else split (with a full neighbour:
        // two into three; alone: one into two).
        let has_room = |j: usize| self.chunks.get(j).is_some_and(|c| c.len < self.cap);
        let (a, b) = if has_room(i + 1) {
            (i, i + 1)
        } else if i > 0 && has_room(i - 1) {
            (i - 1, i)
        } else if i + 1 < self.chunks.len() {
            (i, i + 1)
        } else if i > 0 {
            (i - 1, i)
        } else {
            (i, i)
        };
        self.rebalance(a, b, Some(x));
        true
    }

    /// Remove `x`; false if it was not there.
    pub(crate) fn remove(&mut self, x: u64) -> bool {
        let Some(i) = self.chunk_of(x) else {
            return false;
        };
        let c = &mut self.chunks[i];
        let Ok(pos) = c.live().binary_search(&x) else {
            return false;
        };
        c.codes.copy_within(pos + 1..c.len, pos);
        c.len -= 1;
        self.len -= 1;
        if c.len == 0 {
            self.chunks.remove(i);
            self.firsts.remove(i);
            return true;
        }
        self.firsts[i] = c.codes[0];
        // Merge with a neighbour when the two fit in one chunk.
        let fits = |j: usize| {
            self.chunks
                .get(j)
                .is_some_and(|n| n.len + self.chunks[i].len <= self.cap)
        };
        if fits(i + 1) {
            self.rebalance(i, i + 1, None);
        } else if i > 0 && fits(i - 1) {
            self.rebalance(i - 1, i, None);
        }
        true
    }

    /// Redistribute the codes of chunks `a..=b` (adjacent, `b - a` ≤ 1), plus `extra` (not
    /// present, belonging between their bounds or at either end), evenly over as few chunks
    /// as hold them at `cap` each — or, when that means one more chunk than now (an insert
    /// into full chunks), over one more.
    fn rebalance(&mut self, a: usize, b: usize, extra: Option<u64>) {
        let mut all = std::mem::take(&mut self.scratch);
        all.clear();
        for c in &self.chunks[a..=b] {
            all.extend_from_slice(c.live());
        }
        if let Some(x) = extra {
            let p = all.partition_point(|&y| y < x);
            all.insert(p, x);
        }
        let have = b - a + 1;
        let want = all.len().div_ceil(self.cap).max(1);
        debug_assert!(want <= have + 1);
        // Reuse the chunks there are; allocate or drop the difference.
        if want > have {
            for _ in have..want {
                self.chunks.insert(b + 1, Chunk::new(self.cap));
                self.firsts.insert(b + 1, 0);
            }
        } else if want < have {
            self.chunks.drain(a + want..a + have);
            self.firsts.drain(a + want..a + have);
        }
        let mut start = 0;
        for k in 0..want {
            let end = all.len() * (k + 1) / want;
            let c = &mut self.chunks[a + k];
            c.codes[..end - start].copy_from_slice(&all[start..end]);
            c.len = end - start;
            self.firsts[a + k] = all[start];
            start = end;
        }
        // At most two chunks' codes and one more: the buffer stays ≤ 4 KiB.
        debug_assert!(all.len() <= 2 * self.cap + 1);
        self.scratch = all;
    }

    /// Codes in `lo..=hi`, ascending.
    pub(crate) fn range(&self, lo: u64, hi: u64) -> Range<'_> {
        let (chunk, pos) = match self.chunk_of(lo) {
            Some(i) => (i, self.chunks[i].live().partition_point(|&y| y < lo)),
            None => (0, 0),
        };
        Range {
            set: self,
            chunk,
            pos,
            hi,
        }
    }

    /// Every code, ascending.
    pub(crate) fn iter(&self) -> Range<'_> {
        self.range(0, u64::MAX)
    }

    #[cfg(test)]
    /// Heap bytes held (chunk slots, chunk headers, first codes; not allocator headers).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.len() * self.cap * 8
            + self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.firsts.capacity() * 8
            + self.scratch.capacity() * 8
    }

    #[cfg(test)]
    /// Chunks allocated (each one block of `cap` codes).
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Check the layout (tests): chunks nonempty, sorted within and across, firsts right,
    /// the count right.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.firsts.len() != self.chunks.len() {
            return Err("code set: firsts and chunks differ in number".into());
        }
        let mut n = 0;
        let mut prev: Option<u64> = None;
        for (c, &f) in self.chunks.iter().zip(&self.firsts) {
            if c.len == 0 || c.len > self.cap || c.codes.len() != self.cap {
                return Err(format!("code set: chunk of {} codes", c.len));
            }
            if c.codes[0] != f {
                return Err("code set: stale first code".into());
            }
            for &x in c.live() {
                if prev.is_some_and(|p| p >= x) {
                    return Err("code set: codes out of order".into());
                }
                prev = Some(x);
            }
            n += c.len;
        }
        if n != self.len {
            return Err(format!("code set: {n} codes, count says {}", self.len));
        }
        Ok(())
    }
}

/// Iterator of [`CodeSet::range`].
pub(crate) struct Range<'a> {
    set: &'a CodeSet,
    chunk: usize,
    pos: usize,
    hi: u64,
}

impl Iterator for Range<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        loop {
            let c = self.set.chunks.get(self.chunk)?;
            if let Some(&x) = c.live().get(self.pos) {
                if x > self.hi {
                    self.chunk = self.set.chunks.len();
                    return None;
                }
                self.pos += 1;
                return Some(x);
            }
            self.chunk += 1;
            self.pos = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Contains(u64),
        Range(u64, u64),
    }

    fn op(domain: u64) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..domain).prop_map(Op::Insert),
            3 => (0..domain).prop_map(Op::Remove),
            1 => (0..domain).prop_map(Op::Contains),
            1 => (0..domain, 0..domain).prop_map(|(a, b)| Op::Range(a.min(b), a.max(b))),
        ]
    }

    proptest! {
        /// The set against `BTreeSet<u64>`: every insert, remove, lookup and range agrees,
        /// and the layout holds after each step. Chunks of 3 to 8 codes and a small domain
        /// force splits, two-into-three rebalances, merges and emptied chunks.
        #[test]
        fn behaves_like_btreeset(
            cap in 3usize..9,
            domain in prop_oneof![Just(64u64), Just(1_000u64)],
            ops in proptest::collection::vec(op(1_000), 1..400),
        ) {
            let mut s = CodeSet::with_chunk_codes(cap);
            let mut m = BTreeSet::new();
            for o in ops {
                match o {
                    Op::Insert(x) => prop_assert_eq!(s.insert(x % domain), m.insert(x % domain)),
                    Op::Remove(x) => prop_assert_eq!(s.remove(x % domain), m.remove(&(x % domain))),
                    Op::Contains(x) => prop_assert_eq!(s.contains(x % domain), m.contains(&(x % domain))),
                    Op::Range(a, b) => {
                        let got: Vec<u64> = s.range(a, b).collect();
                        let want: Vec<u64> = m.range(a..=b).copied().collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(s.len(), m.len());
                if let Err(e) = s.check() {
                    return Err(TestCaseError::fail(e));
                }
            }
            prop_assert!(s.iter().eq(m.iter().copied()));
        }
    }

    /// Ranges at the extremes: below everything, above everything, `u64::MAX` present.
    #[test]
    fn range_edges() {
        let mut s = CodeSet::with_chunk_codes(4);
        for x in [5, 9, 13, u64::MAX, 0] {
            s.insert(x);
        }
        assert_eq!(s.range(0, 0).collect::<Vec<_>>(), vec![0]);
        assert_eq!(s.range(1, 4).count(), 0);
        assert_eq!(s.range(14, u64::MAX).collect::<Vec<_>>(), vec![u64::MAX]);
        assert_eq!(s.iter().count(), 5);
        assert!(CodeSet::default().range(0, u64::MAX).next().is_none());
    }

    /// Memory follows the codes: 200,000 random codes (the per-slot index's insert order)
    /// take at most 11 B each in chunks, and removing 90 % of them in random order gives
    /// chunks back (at most 2× the codes left, by the merge rule).
    #[test]
    fn memory_follows_the_codes() {
        let mut s = CodeSet::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut codes = Vec::new();
        for _ in 0..200_000 {
            // xorshift: random 64-bit codes, like hash bits under a slot prefix.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.insert(x);
            codes.push(x);
        }
        let per_code = s.heap_bytes() as f64 / s.len() as f64;
        assert!(per_code <= 11.0, "{per_code:.2} B per code");
        let fill = s.len() as f64 / (s.chunk_count() * CHUNK_CODES) as f64;
        eprintln!("200,000 random codes: {per_code:.2} B per code, chunks {fill:.3} full");
        assert!(fill >= 0.75, "chunks {fill:.2} full");
        for (i, c) in codes.iter().enumerate() {
            if i % 10 != 0 {
                assert!(s.remove(*c));
            }
        }
        s.check().unwrap();
        let fill = s.len() as f64 / (s.chunk_count() * CHUNK_CODES) as f64;
        eprintln!("after removing 90 %: chunks {fill:.3} full");
        assert!(fill >= 0.5, "after removals, chunks {fill:.2} full");
    }
}
