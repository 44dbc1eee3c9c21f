//! Entry points shared by the cargo-fuzz targets (`crates/erasure/fuzz/`) and by the
//! proptests, so CI exercises the same code without cargo-fuzz.

use crate::codec::Codec;
use crate::error::Error;
use crate::layout::{Layout, ParityChunk};
use crate::stripe::{encode_stripe, rebuild_range, ChunkSource};

/// Input bytes beyond this are ignored: one stripe of at most 64 data nodes × 64 B chunks
/// needs far less, and the fuzzer should not spend time on huge inputs.
const INPUT_BYTES_MAX: usize = 1 << 16;

struct Survivors<'a> {
    arenas: &'a [Vec<u8>],
    parity: &'a [Vec<u8>],
    lost_data: u32,
    lost_parity: &'a [bool],
    chunk: u64,
}

impl ChunkSource for Survivors<'_> {
    fn read_data(&self, node: u32, offset: u64, out: &mut [u8]) -> bool {
        if node == self.lost_data {
            return false;
        }
        let Some(a) = usize::try_from(node).ok().and_then(|i| self.arenas.get(i)) else {
            return false;
        };
        copy_zero_ext(a, offset, out);
        true
    }
    fn read_parity(&self, pc: ParityChunk, byte: u32, out: &mut [u8]) -> bool {
        let h = usize::try_from(pc.holder).unwrap_or(usize::MAX);
        if self.lost_parity.get(h).copied().unwrap_or(true) {
            return false;
        }
        let Some(p) = self.parity.get(h) else {
            return false;
        };
        // One stripe only: chunk index is the codeword number.
        let Some(off) = pc
            .index
            .checked_mul(self.chunk)
            .and_then(|x| x.checked_add(u64::from(byte)))
        else {
            return false;
        };
        copy_zero_ext(p, off, out);
        true
    }
}

fn copy_zero_ext(src: &[u8], offset: u64, out: &mut [u8]) {
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let avail = src.get(start..).unwrap_or(&[]);
    let n = avail.len().min(out.len());
    let (head, tail) = out.split_at_mut(n);
    if let Some(s) = avail.get(..n) {
        head.copy_from_slice(s);
    }
    tail.fill(0);
}

/// Decodes a fuzz input into an SRS shape, one stripe of data and a failure pattern; encodes,
/// erases, reconstructs, and asserts the result is byte-identical whenever the pattern is
/// within what the layout survives.
///
/// Input: `[k, m, s, lost data node, lost parity mask, erase mask, data...]`.
///
/// Returns `Ok(true)` if something was reconstructed and checked, `Ok(false)` if the
/// pattern was beyond the code's tolerance (and the core correctly refused or still
/// returned the right bytes).
///
/// # Errors
/// Only if the core returns an unexpected error.
///
/// # Panics
/// If a reconstruction is not byte-identical: that is the bug the fuzzer looks for.
pub fn reconstruct_roundtrip(input: &[u8]) -> Result<bool, Error> {
    let input = input.get(..INPUT_BYTES_MAX).unwrap_or(input);
    let (head, data) = input.split_at(input.len().min(6));
    let b = |i: usize| u32::from(head.get(i).copied().unwrap_or(0));
    let k = b(0).checked_rem(16).unwrap_or(0).saturating_add(1);
    let m = b(1).checked_rem(4).unwrap_or(0).saturating_add(1);
    let s = b(2).checked_rem(8).unwrap_or(0).saturating_add(1);
    let lost_data = b(3).checked_rem(s).unwrap_or(0);
    let parity_mask = b(4);
    let erase_mask = b(5);
    let layout = Layout::with_any_stretch(k, m, s, 64)?;
    let codec = Codec::new(k, m)?;

    // One stripe per node, filled from the input (cycled), or zeros for empty input.
    let per = usize::try_from(layout.stripe_bytes_per_node()).unwrap_or(0);
    let mut it = data.iter().copied().cycle();
    let arenas: Vec<Vec<u8>> = (0..s)
        .map(|_| (0..per).map(|_| it.next().unwrap_or(0)).collect())
        .collect();
    let parity = encode_stripe(&layout, &codec, &arenas, 0)?;

    // 1. Codeword level: erase up to M of the K + M chunks of codeword 0 per erase_mask.
    let total = k.saturating_add(m);
    let mut shards: Vec<Option<Vec<u8>>> = Vec::new();
    let cw = crate::layout::CodewordId {
        stripe: 0,
        codeword: 0,
    };
    let c = usize::try_from(layout.chunk_bytes()).unwrap_or(0);
    for pos in 0..total {
        let mut buf = vec![0u8; c];
        if pos < k {
            let dc = layout.member(cw, pos)?;
            let a = arenas
                .get(usize::try_from(dc.node).unwrap_or(usize::MAX))
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            copy_zero_ext(a, dc.chunk.saturating_mul(64), &mut buf);
        } else {
            let q = usize::try_from(pos.saturating_sub(k)).unwrap_or(usize::MAX);
            copy_zero_ext(parity.get(q).map(Vec::as_slice).unwrap_or(&[]), 0, &mut buf);
        }
        shards.push(Some(buf));
    }
    let original = shards.clone();
    let mut erased = 0u32;
    for (i, sh) in (0u32..).zip(shards.iter_mut()) {
        if erased < m && i < 8 && (erase_mask >> i) & 1 == 1 {
            *sh = None;
            erased = erased.saturating_add(1);
        }
    }
    codec.reconstruct(&mut shards)?;
    assert_eq!(
        shards, original,
        "codeword reconstruct must be byte-identical"
    );

    // 2. Node level: lose one data node and the masked parity holders, rebuild its slice.
    let lost_parity: Vec<bool> = (0..m)
        .map(|q| q < 8 && (parity_mask >> q) & 1 == 1)
        .collect();
    let mut failed_data = vec![false; usize::try_from(s).unwrap_or(0)];
    if let Some(f) = failed_data.get_mut(usize::try_from(lost_data).unwrap_or(usize::MAX)) {
        *f = true;
    }
    let src = Survivors {
        arenas: &arenas,
        parity: &parity,
        lost_data,
        lost_parity: &lost_parity,
        chunk: 64,
    };
    let expect = arenas
        .get(usize::try_from(lost_data).unwrap_or(usize::MAX))
        .cloned()
        .unwrap_or_default();
    let got = rebuild_range(&layout, &codec, &src, lost_data, 0, per as u64);
    if layout.survives(&failed_data, &lost_parity) {
        assert_eq!(got?, expect, "node rebuild must be byte-identical");
        Ok(true)
    } else {
        match got {
            Ok(bytes) => assert_eq!(bytes, expect, "a rebuild that succeeds must be right"),
            Err(Error::NotEnoughShards { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(false)
    }
}
