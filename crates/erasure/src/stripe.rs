//! Whole-stripe encode, and decode of lost data or parity from whatever survives.
//!
//! Reading surviving chunks is the caller's business (it may be local memory, or bytes that
//! arrived from peers); the core sees them through [`ChunkSource`], which fills caller
//! buffers and says whether a chunk is available. Decoding a byte range of a lost data
//! node touches only the codewords the range overlaps, and within them only the same byte
//! sub-range of K surviving chunks, because GF(2^8) coding is byte-wise (see
//! [`crate::codec`]). That is what lets a new coordinator decode one value on demand
//! (Ring §5.5, §6.4) without decoding the whole arena.

use crate::codec::Codec;
use crate::error::Error;
use crate::layout::{CodewordId, Layout, ParityChunk};
use ringlet_types::limits::VALUE_BYTES_MAX;

/// Read access to surviving chunks. Implementations never block on the core's behalf: a
/// driver gathers bytes first (or reads local memory) and then calls the decode functions.
pub trait ChunkSource {
    /// Fills `out` with bytes `[offset, offset + out.len())` of data node `node`'s arena.
    /// Bytes past the end of the arena read as zero (never-written arena space is zero and
    /// is encoded as such). Returns false if that node's data is unavailable.
    fn read_data(&self, node: u32, offset: u64, out: &mut [u8]) -> bool;

    /// Fills `out` with bytes `[byte_in_chunk, byte_in_chunk + out.len())` of a parity chunk
    /// (never-written chunks read as zero). Returns false if that holder is unavailable.
    fn read_parity(&self, chunk: ParityChunk, byte_in_chunk: u32, out: &mut [u8]) -> bool;
}

/// Most bytes one [`rebuild_range`] call decodes: one value. Whole arenas are rebuilt stripe
/// by stripe, so a peer-supplied length can never make us allocate more than this at once.
pub const REBUILD_BYTES_MAX: u64 = VALUE_BYTES_MAX as u64;

fn chunk_len(layout: &Layout) -> Result<usize, Error> {
    usize::try_from(layout.chunk_bytes()).map_err(|_| Error::ChunkSize {
        chunk_bytes: layout.chunk_bytes(),
    })
}

fn slice_at(arena: &[u8], offset: u64, out: &mut [u8]) {
    // Zero-extend: bytes past the arena end are zero.
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let avail = arena.get(start..).unwrap_or(&[]);
    let n = avail.len().min(out.len());
    let (head, tail) = out.split_at_mut(n);
    if let Some(src) = avail.get(..n) {
        head.copy_from_slice(src);
    }
    tail.fill(0);
}

/// Computes stripe `stripe`'s parity for every holder from the `s` data arenas (shorter
/// arenas are zero-extended). Returns M buffers of `l/K · chunk_bytes` bytes: codeword `j`'s
/// parity chunk at `[j·chunk_bytes, (j+1)·chunk_bytes)`, which is what holder q stores at
/// parity chunk index `stripe·(l/K) + j`.
///
/// # Errors
/// [`Error::Length`] if `arenas.len() != s`; [`Error::Range`] on offset overflow.
pub fn encode_stripe<A: AsRef<[u8]>>(
    layout: &Layout,
    codec: &Codec,
    arenas: &[A],
    stripe: u64,
) -> Result<Vec<Vec<u8>>, Error> {
    check_codec(layout, codec)?;
    if arenas.len() != usize::try_from(layout.s()).unwrap_or(usize::MAX) {
        return Err(Error::Length {
            expected: u64::from(layout.s()),
            got: arenas.len() as u64,
        });
    }
    let c = chunk_len(layout)?;
    let holder_bytes =
        usize::try_from(layout.stripe_parity_bytes_per_holder()).map_err(|_| Error::ChunkSize {
            chunk_bytes: layout.chunk_bytes(),
        })?;
    let m = usize::try_from(layout.m()).unwrap_or(0);
    let k = usize::try_from(layout.k()).unwrap_or(0);
    let mut out = vec![vec![0u8; holder_bytes]; m];
    let mut data = vec![vec![0u8; c]; k];
    let mut parity = vec![vec![0u8; c]; m];
    for j in 0..layout.codewords_per_stripe() {
        let cw = CodewordId {
            stripe,
            codeword: j,
        };
        for (p, buf) in (0u32..).zip(data.iter_mut()) {
            let dc = layout.member(cw, p)?;
            let off = dc
                .chunk
                .checked_mul(u64::from(layout.chunk_bytes()))
                .ok_or(Error::Range {
                    offset: dc.chunk,
                    len: 1,
                })?;
            let arena = arenas
                .get(usize::try_from(dc.node).unwrap_or(usize::MAX))
                .ok_or(Error::NodeIndex {
                    index: dc.node,
                    count: layout.s(),
                })?;
            slice_at(arena.as_ref(), off, buf);
        }
        codec.encode(&data, &mut parity)?;
        let ju = usize::try_from(j).unwrap_or(usize::MAX);
        let start = ju.checked_mul(c).ok_or(Error::Range {
            offset: u64::from(j),
            len: 1,
        })?;
        let end = start.checked_add(c).ok_or(Error::Range {
            offset: u64::from(j),
            len: 1,
        })?;
        for (dst, src) in out.iter_mut().zip(parity.iter()) {
            dst.get_mut(start..end)
                .ok_or(Error::Range {
                    offset: start as u64,
                    len: c as u64,
                })?
                .copy_from_slice(src);
        }
    }
    Ok(out)
}

fn check_codec(layout: &Layout, codec: &Codec) -> Result<(), Error> {
    if layout.k() != codec.k() || layout.m() != codec.m() {
        return Err(Error::Shape {
            k: codec.k(),
            m: codec.m(),
            s: layout.s(),
        });
    }
    Ok(())
}

/// Gathers the bytes `[byte, byte + len)` of every chunk of codeword `cw` except those in
/// `skip` (positions `0..K` data, `K..K+M` parity), stopping once K are present — recovery
/// needs any K (Ring §3.2), so reading more is wasted traffic.
fn gather(
    layout: &Layout,
    src: &dyn ChunkSource,
    cw: CodewordId,
    byte: u32,
    len: usize,
    skip: u32,
) -> Result<Vec<Option<Vec<u8>>>, Error> {
    let k = layout.k();
    let total = k.saturating_add(layout.m());
    let mut shards: Vec<Option<Vec<u8>>> = Vec::new();
    let mut present = 0u32;
    let cb = u64::from(layout.chunk_bytes());
    for pos in 0..total {
        if pos == skip || present >= k {
            shards.push(None);
            continue;
        }
        let mut buf = vec![0u8; len];
        let ok = if pos < k {
            let dc = layout.member(cw, pos)?;
            let off = dc
                .chunk
                .checked_mul(cb)
                .and_then(|x| x.checked_add(u64::from(byte)))
                .ok_or(Error::Range {
                    offset: dc.chunk,
                    len: len as u64,
                })?;
            src.read_data(dc.node, off, &mut buf)
        } else {
            let q = pos.checked_sub(k).ok_or(Error::NodeIndex {
                index: pos,
                count: total,
            })?;
            let pc = layout.parity_chunk(cw, q)?;
            src.read_parity(pc, byte, &mut buf)
        };
        if ok {
            present = present.saturating_add(1);
            shards.push(Some(buf));
        } else {
            shards.push(None);
        }
    }
    Ok(shards)
}

/// One byte range a decode may read: what a driver fetches from peers before calling
/// [`rebuild_range`] with a [`ChunkSource`] over the fetched bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceRange {
    /// Bytes `[offset, offset + len)` of data node `node`'s arena.
    Data { node: u32, offset: u64, len: u32 },
    /// Bytes `[byte, byte + len)` of a parity chunk.
    Parity {
        chunk: ParityChunk,
        byte: u32,
        len: u32,
    },
}

/// Every byte range that can help decode `[offset, offset + len)` of lost data node `node`:
/// per overlapped codeword, the same sub-range of its other K − 1 data chunks and of its M
/// parity chunks. Any K of the K + M per piece suffice; a driver may fetch the data ranges
/// and parity 0 first and more only if some are unavailable.
///
/// # Errors
/// As [`rebuild_range`].
pub fn rebuild_sources(
    layout: &Layout,
    node: u32,
    offset: u64,
    len: u64,
) -> Result<Vec<SourceRange>, Error> {
    if len > REBUILD_BYTES_MAX {
        return Err(Error::Range { offset, len });
    }
    let cb = u64::from(layout.chunk_bytes());
    let mut out = Vec::new();
    for piece in layout.pieces(node, offset, len)? {
        let cw = piece.at.codeword;
        for p in 0..layout.k() {
            if p == piece.at.position {
                continue;
            }
            let dc = layout.member(cw, p)?;
            let off = dc
                .chunk
                .checked_mul(cb)
                .and_then(|x| x.checked_add(u64::from(piece.at.byte_in_chunk)))
                .ok_or(Error::Range { offset, len })?;
            out.push(SourceRange::Data {
                node: dc.node,
                offset: off,
                len: piece.len,
            });
        }
        for q in 0..layout.m() {
            out.push(SourceRange::Parity {
                chunk: layout.parity_chunk(cw, q)?,
                byte: piece.at.byte_in_chunk,
                len: piece.len,
            });
        }
    }
    Ok(out)
}

/// Decodes bytes `[offset, offset + len)` of lost data node `node`'s arena from the other
/// chunks of the codewords the range overlaps. The node's own data is never read, even if
/// `src` has it.
///
/// # Errors
/// [`Error::Range`] if `len > REBUILD_BYTES_MAX` or the range is out of bounds;
/// [`Error::NotEnoughShards`] if some overlapped codeword has fewer than K available chunks
/// (that data is lost).
pub fn rebuild_range(
    layout: &Layout,
    codec: &Codec,
    src: &dyn ChunkSource,
    node: u32,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Error> {
    check_codec(layout, codec)?;
    if len > REBUILD_BYTES_MAX {
        return Err(Error::Range { offset, len });
    }
    let total = usize::try_from(len).map_err(|_| Error::Range { offset, len })?;
    let mut out = vec![0u8; total];
    for piece in layout.pieces(node, offset, len)? {
        let plen = usize::try_from(piece.len).unwrap_or(usize::MAX);
        let mut shards = gather(
            layout,
            src,
            piece.at.codeword,
            piece.at.byte_in_chunk,
            plen,
            piece.at.position,
        )?;
        codec.reconstruct_data(&mut shards)?;
        let got = shards
            .get(usize::try_from(piece.at.position).unwrap_or(usize::MAX))
            .and_then(|s| s.as_ref())
            .ok_or(Error::NotEnoughShards {
                missing: layout.m().saturating_add(1),
                tolerated: layout.m(),
            })?;
        let start = usize::try_from(piece.range_offset).unwrap_or(usize::MAX);
        let end = start
            .checked_add(plen)
            .ok_or(Error::Range { offset, len })?;
        out.get_mut(start..end)
            .ok_or(Error::Range { offset, len })?
            .copy_from_slice(got);
    }
    Ok(out)
}

/// Decodes lost parity holder `holder`'s chunks of stripe `stripe` (a buffer laid out as in
/// [`encode_stripe`]) from the data chunks and the other holders. The holder's own parity is
/// never read.
///
/// # Errors
/// [`Error::NotEnoughShards`] if some codeword has fewer than K available chunks.
pub fn rebuild_parity_stripe(
    layout: &Layout,
    codec: &Codec,
    src: &dyn ChunkSource,
    holder: u32,
    stripe: u64,
) -> Result<Vec<u8>, Error> {
    check_codec(layout, codec)?;
    if holder >= layout.m() {
        return Err(Error::NodeIndex {
            index: holder,
            count: layout.m(),
        });
    }
    let c = chunk_len(layout)?;
    let skip = layout.k().saturating_add(holder);
    let mut out = Vec::new();
    for j in 0..layout.codewords_per_stripe() {
        let cw = CodewordId {
            stripe,
            codeword: j,
        };
        let mut shards = gather(layout, src, cw, 0, c, skip)?;
        codec.reconstruct(&mut shards)?;
        let got = shards
            .get(usize::try_from(skip).unwrap_or(usize::MAX))
            .and_then(|s| s.as_ref())
            .ok_or(Error::NotEnoughShards {
                missing: layout.m().saturating_add(1),
                tolerated: layout.m(),
            })?;
        out.extend_from_slice(got);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    struct Mem {
        arenas: Vec<Vec<u8>>,
        parity: Vec<Vec<u8>>, // per holder, whole parity store (chunks by index)
        chunk: usize,
        down_data: BTreeSet<u32>,
        down_parity: BTreeSet<u32>,
    }

    impl ChunkSource for Mem {
        fn read_data(&self, node: u32, offset: u64, out: &mut [u8]) -> bool {
            if self.down_data.contains(&node) {
                return false;
            }
            slice_at(&self.arenas[node as usize], offset, out);
            true
        }
        fn read_parity(&self, chunk: ParityChunk, byte: u32, out: &mut [u8]) -> bool {
            if self.down_parity.contains(&chunk.holder) {
                return false;
            }
            let off = chunk.index as usize * self.chunk + byte as usize;
            slice_at(&self.parity[chunk.holder as usize], off as u64, out);
            true
        }
    }

    fn setup(k: u32, m: u32, s: u32, stripes: u64) -> (Layout, Codec, Mem) {
        let layout = Layout::new(k, m, s, 64).unwrap();
        let codec = Codec::new(k, m).unwrap();
        let per = layout.stripe_bytes_per_node() as usize * stripes as usize;
        let arenas: Vec<Vec<u8>> = (0..s)
            .map(|n| {
                (0..per)
                    .map(|i| (i as u32 * 31 + n * 7 + 1) as u8)
                    .collect()
            })
            .collect();
        let mut parity = vec![Vec::new(); m as usize];
        for t in 0..stripes {
            let p = encode_stripe(&layout, &codec, &arenas, t).unwrap();
            for (q, buf) in p.into_iter().enumerate() {
                parity[q].extend_from_slice(&buf);
            }
        }
        let mem = Mem {
            arenas,
            parity,
            chunk: 64,
            down_data: BTreeSet::new(),
            down_parity: BTreeSet::new(),
        };
        (layout, codec, mem)
    }

    #[test]
    fn rebuild_value_of_lost_node() {
        let (layout, codec, mut mem) = setup(3, 2, 4, 3);
        mem.down_data.insert(2);
        mem.down_parity.insert(0);
        let got = rebuild_range(&layout, &codec, &mem, 2, 100, 333).unwrap();
        assert_eq!(got, mem.arenas[2][100..433]);
        // SRS(3, 2, 4): codeword 2 of stripe 0 = chunks on nodes 0, 2, 3. Losing node 1 as
        // well does not touch it (stretched codes sometimes survive more than M failures)...
        mem.down_data.insert(1);
        assert_eq!(
            rebuild_range(&layout, &codec, &mem, 2, 0, 64).unwrap(),
            mem.arenas[2][..64]
        );
        // ...but losing node 3 is a third failure in that codeword: too many.
        mem.down_data.insert(3);
        assert!(matches!(
            rebuild_range(&layout, &codec, &mem, 2, 0, 64),
            Err(Error::NotEnoughShards { .. })
        ));
    }

    #[test]
    fn rebuild_parity_of_lost_holder() {
        let (layout, codec, mut mem) = setup(2, 2, 3, 2);
        mem.down_parity.insert(1);
        mem.down_data.insert(0);
        let got = rebuild_parity_stripe(&layout, &codec, &mem, 1, 1).unwrap();
        let n = layout.stripe_parity_bytes_per_holder() as usize;
        assert_eq!(got, mem.parity[1][n..2 * n]);
    }

    /// A driver that fetched exactly `rebuild_sources` (and nothing of the lost node) can
    /// decode; the sources touch only the codewords the range overlaps.
    #[test]
    fn rebuild_from_planned_sources_only() {
        let (layout, codec, mem) = setup(2, 1, 3, 4);
        let (node, off, len) = (1u32, 70u64, 100u64);
        let plan = rebuild_sources(&layout, node, off, len).unwrap();
        let mut fetched = Mem {
            arenas: vec![vec![0; mem.arenas[0].len()]; 3],
            parity: vec![vec![0; mem.parity[0].len()]],
            chunk: 64,
            down_data: BTreeSet::new(),
            down_parity: BTreeSet::new(),
        };
        for r in &plan {
            match *r {
                SourceRange::Data {
                    node: n,
                    offset,
                    len,
                } => {
                    assert_ne!(n, node);
                    let (a, b) = (offset as usize, offset as usize + len as usize);
                    fetched.arenas[n as usize][a..b].copy_from_slice(&mem.arenas[n as usize][a..b]);
                }
                SourceRange::Parity { chunk, byte, len } => {
                    let a = chunk.index as usize * 64 + byte as usize;
                    let b = a + len as usize;
                    fetched.parity[0][a..b].copy_from_slice(&mem.parity[0][a..b]);
                }
            }
        }
        let got = rebuild_range(&layout, &codec, &fetched, node, off, len).unwrap();
        assert_eq!(got, mem.arenas[1][70..170]);
        // 100 bytes from byte 70 of node 1: pieces in chunks 1 and 2 only, 2 ranges each.
        assert_eq!(plan.len(), 4);
    }

    #[test]
    fn rejects_oversized_rebuild() {
        let (layout, codec, mem) = setup(2, 1, 2, 1);
        assert!(rebuild_range(&layout, &codec, &mem, 0, 0, REBUILD_BYTES_MAX + 1).is_err());
    }
}
