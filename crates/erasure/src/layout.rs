//! SRS(K, M, s) stripe layout: which arena bytes form which Reed-Solomon codeword.
//!
//! # How it works (Ring §3.3)
//!
//! A placement group has `s` data nodes and, for an `ec:K+M` memgest, `M` parity holders (the
//! PG's first M redundant nodes). Each data node keeps one *arena* per ec memgest, cut into
//! fixed-size chunks of `chunk_bytes`. With `l = lcm(K, s)`:
//!
//! - a **stripe** takes `l/s` consecutive chunks from every data node's arena, `l` data
//!   chunks in all, numbered `b = node·(l/s) + r` (r = chunk within the node's slice) — this
//!   is Ring's `D_i = [D̃_{(i-1)l/s+1} … D̃_{il/s}]`;
//! - those `l` chunks form `l/K` RS(K, M) **codewords**: block `b` is data position
//!   `p = b / (l/K)` of codeword `j = b mod (l/K)` — Ring's `H_exp = H ∘ E` (Eqn. 2), where
//!   row block `p` of `H_exp` is the identity over blocks `p·l/K … (p+1)·l/K`;
//! - parity holder `q` keeps, per stripe, the `l/K` parity chunks `P̃` of its row of `H`:
//!   chunk `stripe·(l/K) + j` of its parity store is parity `q` of codeword `j`.
//!
//! When `s ≥ K`, consecutive data positions of a codeword are `l/K ≥ l/s` blocks apart, so
//! they fall in different nodes' slices: **every codeword's K data chunks are on K distinct
//! nodes** and losing one data node loses at most one chunk per codeword. When `s < K` (not a
//! case Ring defines: the paper requires `s ≥ k`) the same formula still places every chunk
//! in exactly one codeword and spreads each codeword as evenly as possible, but a node then
//! holds up to `⌈K/s⌉` chunks of one codeword, so the layout tolerates only
//! `⌊M / ⌈K/s⌉⌋` data-node failures instead of M. [`Layout::new`] therefore refuses `s < K`
//! ([`Error::UnderStretched`]); [`Layout::with_any_stretch`] builds it anyway (the mapping is
//! well defined, the diagrams in `docs/design/erasure-srs.md` show it, the reliability model
//! evaluates it) and [`Layout::node_failures_tolerated`] reports the reduced guarantee.
//!
//! ```text
//! SRS(2, 1, 3): l = 6, l/s = 2 chunks per node per stripe, l/K = 3 codewords per stripe
//!
//!   node 0 arena : [ b0 | b1 ][ b0 | b1 ] ...     b = node·2 + r ; codeword j = b mod 3 ;
//!   node 1 arena : [ b2 | b3 ][ ...               position p = b / 3
//!   node 2 arena : [ b4 | b5 ][ ...
//!                   stripe 0    stripe 1
//!   codeword 0 = (b0 on n0, b3 on n1) -> P̃0 ; codeword 1 = (b1 n0, b4 n2) -> P̃1 ;
//!   codeword 2 = (b2 n1, b5 n2) -> P̃2          (Ring Eqn. 4: P̃1 = D̃1 ⊕ D̃4, ...)
//! ```

use crate::bounds::{ARENA_BYTES_MAX, CHUNK_BYTES_MAX, CHUNK_BYTES_MIN, DATA_NODES_MAX};
use crate::error::Error;
use ringlet_types::memgest::{EC_K_MAX, EC_M_MAX};

/// The shape of one SRS(K, M, s) memgest on one placement group, plus its chunk size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    k: u32,
    m: u32,
    s: u32,
    chunk_bytes: u32,
    /// `lcm(k, s)`: data chunks per stripe.
    l: u32,
    /// `l / s`: chunks each data node contributes to a stripe.
    chunks_per_node: u32,
    /// `l / k`: codewords per stripe (and parity chunks per holder per stripe).
    codewords_per_stripe: u32,
}

/// One RS(K, M) codeword: `codeword` in `0..l/K` of `stripe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CodewordId {
    /// Stripe number (the same on every data node of the PG).
    pub stripe: u64,
    /// Codeword within the stripe, `0..l/K`.
    pub codeword: u32,
}

/// A data chunk: chunk number `chunk` of data node `node`'s arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DataChunk {
    /// Data node index in the PG, `0..s`.
    pub node: u32,
    /// Chunk number in that node's arena (byte offset / chunk_bytes).
    pub chunk: u64,
}

/// A parity chunk: chunk number `index` of parity holder `holder`'s store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ParityChunk {
    /// Parity index `q` in `0..M`: the PG's q-th redundant node.
    pub holder: u32,
    /// `stripe · (l/K) + codeword`.
    pub index: u64,
}

/// Where one arena byte lives in the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// The codeword holding the byte's chunk.
    pub codeword: CodewordId,
    /// Data position of the chunk in the codeword, `0..K`.
    pub position: u32,
    /// The chunk itself.
    pub chunk: DataChunk,
    /// Byte offset inside the chunk.
    pub byte_in_chunk: u32,
}

/// A piece of an arena byte range that lies in one chunk (see [`Layout::pieces`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Where the piece starts.
    pub at: Location,
    /// Bytes in the piece (≤ chunk_bytes − byte_in_chunk).
    pub len: u32,
    /// Offset of the piece from the start of the range.
    pub range_offset: u64,
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    // Euclid; terminates because b strictly decreases. Trip count ≤ ~2·log2(max) ≤ 64.
    while let Some(r) = a.checked_rem(b) {
        a = b;
        b = r;
    }
    a
}

impl Layout {
    /// Builds the layout of SRS(k, m, s) with chunks of `chunk_bytes`, requiring `s ≥ k`
    /// (Ring's definition), so every codeword's K data chunks are on distinct nodes and the
    /// memgest survives any M node failures, as DESIGN.md's commit rule promises.
    ///
    /// # Errors
    /// As [`Layout::with_any_stretch`], plus [`Error::UnderStretched`] if `s < k`.
    pub fn new(k: u32, m: u32, s: u32, chunk_bytes: u32) -> Result<Layout, Error> {
        let l = Layout::with_any_stretch(k, m, s, chunk_bytes)?;
        if s < k {
            return Err(Error::UnderStretched { k, s });
        }
        Ok(l)
    }

    /// Builds the layout of SRS(k, m, s) for any `s`, including `s < k`, where a data node
    /// holds up to `⌈k/s⌉` chunks of a codeword and the memgest tolerates only
    /// [`Layout::node_failures_tolerated`] failures. For analysis (the reliability model),
    /// diagrams and tests; a control plane that accepts it must report the weaker guarantee.
    ///
    /// # Errors
    /// [`Error::Shape`] unless `1 ≤ k ≤ EC_K_MAX`, `1 ≤ m ≤ EC_M_MAX`, `1 ≤ s ≤
    /// DATA_NODES_MAX`; [`Error::ChunkSize`] unless `chunk_bytes` is a power of two in
    /// `CHUNK_BYTES_MIN..=CHUNK_BYTES_MAX`.
    pub fn with_any_stretch(k: u32, m: u32, s: u32, chunk_bytes: u32) -> Result<Layout, Error> {
        let shape = Error::Shape { k, m, s };
        if k == 0 || k > u32::from(EC_K_MAX) || m == 0 || m > u32::from(EC_M_MAX) {
            return Err(shape);
        }
        if s == 0 || s > DATA_NODES_MAX {
            return Err(shape);
        }
        if !chunk_bytes.is_power_of_two()
            || !(CHUNK_BYTES_MIN..=CHUNK_BYTES_MAX).contains(&chunk_bytes)
        {
            return Err(Error::ChunkSize { chunk_bytes });
        }
        let g = gcd(k, s);
        // lcm = k / g * s; k ≤ 16 and s ≤ 64, so l ≤ 1024: no overflow, but stay checked.
        let l = k
            .checked_div(g)
            .and_then(|x| x.checked_mul(s))
            .ok_or(shape)?;
        let chunks_per_node = l.checked_div(s).ok_or(shape)?;
        let codewords_per_stripe = l.checked_div(k).ok_or(shape)?;
        Ok(Layout {
            k,
            m,
            s,
            chunk_bytes,
            l,
            chunks_per_node,
            codewords_per_stripe,
        })
    }

    /// Data chunks per codeword (K).
    pub fn k(&self) -> u32 {
        self.k
    }
    /// Parity chunks per codeword (M) = parity holders.
    pub fn m(&self) -> u32 {
        self.m
    }
    /// Data nodes of the PG (s).
    pub fn s(&self) -> u32 {
        self.s
    }
    /// Bytes per chunk.
    pub fn chunk_bytes(&self) -> u32 {
        self.chunk_bytes
    }
    /// `lcm(K, s)`: data chunks per stripe.
    pub fn l(&self) -> u32 {
        self.l
    }
    /// `l/s`: chunks each data node contributes to one stripe.
    pub fn chunks_per_node(&self) -> u32 {
        self.chunks_per_node
    }
    /// `l/K`: codewords per stripe, and parity chunks per holder per stripe.
    pub fn codewords_per_stripe(&self) -> u32 {
        self.codewords_per_stripe
    }
    /// Bytes of one data node's arena that belong to one stripe: `l/s · chunk_bytes`.
    pub fn stripe_bytes_per_node(&self) -> u64 {
        u64::from(self.chunks_per_node).saturating_mul(u64::from(self.chunk_bytes))
    }
    /// Bytes of parity one holder keeps per stripe: `l/K · chunk_bytes`.
    pub fn stripe_parity_bytes_per_holder(&self) -> u64 {
        u64::from(self.codewords_per_stripe).saturating_mul(u64::from(self.chunk_bytes))
    }

    /// Bytes stored (data + parity, all holders) per payload byte: `1 + M/K`.
    ///
    /// Each codeword protects K data chunks with M parity chunks, whatever `s` is; stretching
    /// changes which node holds what, not the overhead (Ring §3.3).
    pub fn bytes_per_payload_byte(&self) -> f64 {
        1.0 + f64::from(self.m) / f64::from(self.k)
    }

    fn check_node(&self, node: u32) -> Result<(), Error> {
        if node >= self.s {
            return Err(Error::NodeIndex {
                index: node,
                count: self.s,
            });
        }
        Ok(())
    }

    /// Block number inside its stripe of a data chunk, and the stripe.
    fn block_of(&self, c: DataChunk) -> Result<(u64, u32), Error> {
        self.check_node(c.node)?;
        let per = u64::from(self.chunks_per_node);
        let range = Error::Range {
            offset: c.chunk,
            len: 1,
        };
        let stripe = c.chunk.checked_div(per).ok_or(range)?;
        let r = c.chunk.checked_rem(per).ok_or(range)?;
        // b = node · (l/s) + r < l ≤ 1024.
        let b = u64::from(c.node)
            .checked_mul(per)
            .and_then(|x| x.checked_add(r))
            .ok_or(range)?;
        let b = u32::try_from(b).map_err(|_| range)?;
        Ok((stripe, b))
    }

    /// The codeword and data position of an arena chunk.
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `c.node ≥ s`.
    pub fn locate_chunk(&self, c: DataChunk) -> Result<(CodewordId, u32), Error> {
        let (stripe, b) = self.block_of(c)?;
        let shape = self.shape_err();
        let position = b.checked_div(self.codewords_per_stripe).ok_or(shape)?;
        let codeword = b.checked_rem(self.codewords_per_stripe).ok_or(shape)?;
        Ok((CodewordId { stripe, codeword }, position))
    }

    fn shape_err(&self) -> Error {
        Error::Shape {
            k: self.k,
            m: self.m,
            s: self.s,
        }
    }

    /// Where byte `offset` of data node `node`'s arena lives in the code.
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `node ≥ s`; [`Error::Range`] if `offset ≥ ARENA_BYTES_MAX`.
    pub fn locate(&self, node: u32, offset: u64) -> Result<Location, Error> {
        if offset >= ARENA_BYTES_MAX {
            return Err(Error::Range { offset, len: 1 });
        }
        let cb = u64::from(self.chunk_bytes);
        let range = Error::Range { offset, len: 1 };
        let chunk = DataChunk {
            node,
            chunk: offset.checked_div(cb).ok_or(range)?,
        };
        let byte_in_chunk = offset.checked_rem(cb).ok_or(range)?;
        let byte_in_chunk = u32::try_from(byte_in_chunk).map_err(|_| range)?;
        let (codeword, position) = self.locate_chunk(chunk)?;
        Ok(Location {
            codeword,
            position,
            chunk,
            byte_in_chunk,
        })
    }

    /// The data chunk at data position `position` of codeword `cw` (inverse of
    /// [`Layout::locate_chunk`]).
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `position ≥ K` or `cw.codeword ≥ l/K`; [`Error::Range`] if the
    /// chunk number overflows.
    pub fn member(&self, cw: CodewordId, position: u32) -> Result<DataChunk, Error> {
        if position >= self.k {
            return Err(Error::NodeIndex {
                index: position,
                count: self.k,
            });
        }
        if cw.codeword >= self.codewords_per_stripe {
            return Err(Error::NodeIndex {
                index: cw.codeword,
                count: self.codewords_per_stripe,
            });
        }
        let shape = self.shape_err();
        // b = p · (l/K) + j < l.
        let b = position
            .checked_mul(self.codewords_per_stripe)
            .and_then(|x| x.checked_add(cw.codeword))
            .ok_or(shape)?;
        let node = b.checked_div(self.chunks_per_node).ok_or(shape)?;
        let r = b.checked_rem(self.chunks_per_node).ok_or(shape)?;
        let range = Error::Range {
            offset: cw.stripe,
            len: 1,
        };
        let chunk = cw
            .stripe
            .checked_mul(u64::from(self.chunks_per_node))
            .and_then(|x| x.checked_add(u64::from(r)))
            .ok_or(range)?;
        Ok(DataChunk { node, chunk })
    }

    /// The K data chunks of codeword `cw`, by data position.
    ///
    /// # Errors
    /// As [`Layout::member`].
    pub fn members(&self, cw: CodewordId) -> Result<Vec<DataChunk>, Error> {
        (0..self.k).map(|p| self.member(cw, p)).collect()
    }

    /// Where parity `holder` of codeword `cw` is kept.
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `holder ≥ M` or `cw.codeword ≥ l/K`; [`Error::Range`] on
    /// overflow.
    pub fn parity_chunk(&self, cw: CodewordId, holder: u32) -> Result<ParityChunk, Error> {
        if holder >= self.m {
            return Err(Error::NodeIndex {
                index: holder,
                count: self.m,
            });
        }
        if cw.codeword >= self.codewords_per_stripe {
            return Err(Error::NodeIndex {
                index: cw.codeword,
                count: self.codewords_per_stripe,
            });
        }
        let index = cw
            .stripe
            .checked_mul(u64::from(self.codewords_per_stripe))
            .and_then(|x| x.checked_add(u64::from(cw.codeword)))
            .ok_or(Error::Range {
                offset: cw.stripe,
                len: 1,
            })?;
        Ok(ParityChunk { holder, index })
    }

    /// The codeword a parity chunk belongs to (inverse of [`Layout::parity_chunk`]).
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `p.holder ≥ M`.
    pub fn parity_codeword(&self, p: ParityChunk) -> Result<CodewordId, Error> {
        if p.holder >= self.m {
            return Err(Error::NodeIndex {
                index: p.holder,
                count: self.m,
            });
        }
        let per = u64::from(self.codewords_per_stripe);
        let range = Error::Range {
            offset: p.index,
            len: 1,
        };
        let stripe = p.index.checked_div(per).ok_or(range)?;
        let codeword = p.index.checked_rem(per).ok_or(range)?;
        let codeword = u32::try_from(codeword).map_err(|_| range)?;
        Ok(CodewordId { stripe, codeword })
    }

    /// Splits `[offset, offset + len)` of data node `node`'s arena into per-chunk pieces, in
    /// order. A parity update touches exactly these pieces, each with its own coefficient.
    ///
    /// # Errors
    /// [`Error::NodeIndex`] if `node ≥ s`; [`Error::Range`] if the range passes
    /// `ARENA_BYTES_MAX` or overflows.
    pub fn pieces(&self, node: u32, offset: u64, len: u64) -> Result<Pieces, Error> {
        self.check_node(node)?;
        let end = offset
            .checked_add(len)
            .filter(|e| *e <= ARENA_BYTES_MAX)
            .ok_or(Error::Range { offset, len })?;
        Ok(Pieces {
            layout: *self,
            node,
            start: offset,
            cur: offset,
            end,
        })
    }

    /// For every codeword of a stripe (the pattern is the same in every stripe), how many of
    /// its K data chunks sit on each data node: `counts[j][node]`.
    pub fn codeword_node_counts(&self) -> Vec<Vec<u32>> {
        let mut counts = Vec::new();
        for j in 0..self.codewords_per_stripe {
            let mut per_node = vec![0u32; usize::try_from(self.s).unwrap_or(0)];
            for p in 0..self.k {
                let cw = CodewordId {
                    stripe: 0,
                    codeword: j,
                };
                if let Ok(c) = self.member(cw, p) {
                    if let Some(n) = usize::try_from(c.node)
                        .ok()
                        .and_then(|i| per_node.get_mut(i))
                    {
                        *n = n.saturating_add(1);
                    }
                }
            }
            counts.push(per_node);
        }
        counts
    }

    /// Most chunks of one codeword on one data node: 1 when `s ≥ K`, `⌈K/s⌉` otherwise.
    pub fn max_chunks_per_node_in_codeword(&self) -> u32 {
        self.codeword_node_counts()
            .iter()
            .flat_map(|v| v.iter().copied())
            .max()
            .unwrap_or(0)
    }

    /// Whether the layout keeps RS(K, M)'s guarantee: any M node failures are survivable.
    /// True exactly when `s ≥ K`.
    pub fn is_full_strength(&self) -> bool {
        self.max_chunks_per_node_in_codeword() <= 1
    }

    /// Number of arbitrary node failures (data or parity) the layout always survives:
    /// M when `s ≥ K`, and `⌊M / ⌈K/s⌉⌋` when `s < K` (worst case: all failures hit data
    /// nodes that share one codeword).
    pub fn node_failures_tolerated(&self) -> u32 {
        let c = self.max_chunks_per_node_in_codeword().max(1);
        self.m.checked_div(c).unwrap_or(0)
    }

    /// Whether the PG survives (no codeword loses more than M chunks) when the data nodes
    /// with `failed_data[node] == true` and the parity holders with `failed_parity[q] == true`
    /// are lost. Missing entries count as alive.
    pub fn survives(&self, failed_data: &[bool], failed_parity: &[bool]) -> bool {
        let lost_parity = failed_parity
            .iter()
            .take(usize::try_from(self.m).unwrap_or(0))
            .filter(|f| **f)
            .count();
        for per_node in self.codeword_node_counts() {
            let mut lost = lost_parity;
            for (node, count) in per_node.iter().enumerate() {
                if failed_data.get(node).copied().unwrap_or(false) {
                    lost = lost.saturating_add(usize::try_from(*count).unwrap_or(usize::MAX));
                }
            }
            if lost > usize::try_from(self.m).unwrap_or(0) {
                return false;
            }
        }
        true
    }
}

/// Iterator over the per-chunk pieces of an arena byte range (see [`Layout::pieces`]).
/// Finite: every step advances `cur` by at least one byte towards `end`.
#[derive(Clone, Debug)]
pub struct Pieces {
    layout: Layout,
    node: u32,
    start: u64,
    cur: u64,
    end: u64,
}

impl Iterator for Pieces {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if self.cur >= self.end {
            return None;
        }
        let at = self.layout.locate(self.node, self.cur).ok()?;
        let room = self.layout.chunk_bytes.checked_sub(at.byte_in_chunk)?;
        let left = self.end.checked_sub(self.cur)?;
        let len = u32::try_from(left.min(u64::from(room))).ok()?;
        let range_offset = self.cur.checked_sub(self.start)?;
        self.cur = self.cur.checked_add(u64::from(len))?;
        Some(Piece {
            at,
            len,
            range_offset,
        })
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;

    /// Ring §3.3, "Example of building SRS(2, 1, 3)" and Eqn. (4):
    /// P̃1 = D̃1 ⊕ D̃4, P̃2 = D̃2 ⊕ D̃5, P̃3 = D̃3 ⊕ D̃6 with D̃1,D̃2 on node 1, D̃3,D̃4 on
    /// node 2, D̃5,D̃6 on node 3 (1-based in the paper, 0-based here).
    #[test]
    fn ring_srs_2_1_3_example() {
        let l = Layout::new(2, 1, 3, 64).unwrap();
        assert_eq!(
            (l.l(), l.chunks_per_node(), l.codewords_per_stripe()),
            (6, 2, 3)
        );
        let cw = |j| CodewordId {
            stripe: 0,
            codeword: j,
        };
        let dc = |node, chunk| DataChunk { node, chunk };
        // Block b of the paper (0-based) is chunk b mod 2 of node b / 2.
        assert_eq!(l.members(cw(0)).unwrap(), vec![dc(0, 0), dc(1, 1)]); // D̃1, D̃4
        assert_eq!(l.members(cw(1)).unwrap(), vec![dc(0, 1), dc(2, 0)]); // D̃2, D̃5
        assert_eq!(l.members(cw(2)).unwrap(), vec![dc(1, 0), dc(2, 1)]); // D̃3, D̃6
        assert!(l.is_full_strength());
    }

    #[test]
    fn rs_is_srs_with_s_equal_k() {
        // SRS(k, m, k) = RS(k, m): one chunk per node per stripe, one codeword per stripe.
        let l = Layout::new(3, 2, 3, 64).unwrap();
        assert_eq!(
            (l.l(), l.chunks_per_node(), l.codewords_per_stripe()),
            (3, 1, 1)
        );
        let cw = CodewordId {
            stripe: 7,
            codeword: 0,
        };
        let m = l.members(cw).unwrap();
        assert_eq!(
            m.iter().map(|c| (c.node, c.chunk)).collect::<Vec<_>>(),
            vec![(0, 7), (1, 7), (2, 7)]
        );
    }

    #[test]
    fn s_less_than_k_is_weaker_and_says_so() {
        // K = 3, s = 2: l = 6, 3 chunks per node per stripe, 2 codewords.
        assert_eq!(
            Layout::new(3, 1, 2, 64),
            Err(Error::UnderStretched { k: 3, s: 2 })
        );
        let l = Layout::with_any_stretch(3, 1, 2, 64).unwrap();
        assert_eq!(
            (l.l(), l.chunks_per_node(), l.codewords_per_stripe()),
            (6, 3, 2)
        );
        assert_eq!(l.max_chunks_per_node_in_codeword(), 2);
        assert!(!l.is_full_strength());
        assert_eq!(l.node_failures_tolerated(), 0);
        let l = Layout::with_any_stretch(3, 2, 2, 64).unwrap();
        assert_eq!(l.node_failures_tolerated(), 1);
        assert!(l.survives(&[true, false], &[false, false]));
        assert!(!l.survives(&[true, false], &[true, false]));
    }

    /// Ring appendix A.2: SRS(2, 1, 4) "can always tolerate a single failure and with
    /// probability 2/5 overtake the second failure".
    #[test]
    fn srs_2_1_4_survives_two_fifths_of_double_failures() {
        let l = Layout::new(2, 1, 4, 64).unwrap();
        let mut ok = 0;
        let mut all = 0;
        for a in 0..5usize {
            for b in (a + 1)..5 {
                let mut d = [false; 4];
                let mut p = [false; 1];
                for x in [a, b] {
                    if x < 4 {
                        d[x] = true
                    } else {
                        p[0] = true
                    }
                }
                all += 1;
                ok += usize::from(l.survives(&d, &p));
            }
        }
        assert_eq!((ok, all), (4, 10));
    }

    #[test]
    fn pieces_split_at_chunk_boundaries() {
        let l = Layout::new(2, 1, 3, 64).unwrap();
        let p: Vec<_> = l.pieces(1, 60, 200).unwrap().collect();
        assert_eq!(p.iter().map(|x| x.len).sum::<u32>(), 200);
        assert_eq!(p[0].len, 4);
        assert_eq!(p[1].at.byte_in_chunk, 0);
        assert_eq!(p[1].range_offset, 4);
        assert!(l.pieces(3, 0, 1).is_err());
        assert!(l.pieces(0, u64::MAX, 2).is_err());
        assert_eq!(l.pieces(0, 10, 0).unwrap().count(), 0);
    }

    #[test]
    fn rejects_bad_shapes() {
        assert!(Layout::new(0, 1, 3, 64).is_err());
        assert!(Layout::new(3, 0, 3, 64).is_err());
        assert!(Layout::new(17, 1, 3, 64).is_err());
        assert!(Layout::new(3, 1, 0, 64).is_err());
        assert!(Layout::new(3, 1, 65, 64).is_err());
        assert!(Layout::new(3, 1, 3, 100).is_err());
        assert!(Layout::new(3, 1, 3, 32).is_err());
    }
}
