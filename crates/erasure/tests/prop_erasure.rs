//! Property tests of the erasure core (STYLE §9 "any k of n shards rebuild the value").
//!
//! - layout: for random (K, M, s), every arena chunk of a stripe is in exactly one codeword
//!   position and back; codeword data chunks are on distinct nodes when s ≥ K (at most
//!   ⌈K/s⌉ per node otherwise); parity placement inverts;
//! - reconstruct: any ≤ M erased chunks of every codeword of a stripe come back
//!   byte-identical, and any survivable set of lost nodes is rebuilt byte-identical;
//! - deltas: after any sequence of puts, deletes and in-place writes on any data nodes,
//!   delivered to the parity holders in any interleaving across owners and with duplicates,
//!   every holder's parity equals a fresh encode of the arenas, and its metadata equals the
//!   owners' key tables;
//! - the fuzz target's function over random bytes.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use proptest::prelude::*;
use ringlet_erasure::layout::{CodewordId, DataChunk, Layout, ParityChunk};
use ringlet_erasure::{
    encode_stripe, fuzz_support, rebuild_parity_stripe, rebuild_range, Applied, Arena, ChunkSource,
    Codec, ParityStore, ParityUpdate,
};
use ringlet_types::Version;
use std::collections::BTreeSet;

const CHUNK: u32 = 64;

fn shape() -> impl Strategy<Value = (u32, u32, u32)> {
    (1u32..=8, 1u32..=4, 1u32..=9)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn layout_is_a_bijection((k, m, s) in (1u32..=16, 1u32..=4, 1u32..=64), stripe in 0u64..1_000_000) {
        let l = Layout::with_any_stretch(k, m, s, CHUNK).unwrap();
        prop_assert_eq!(l.l() % k, 0);
        prop_assert_eq!(l.l() % s, 0);
        let mut seen = BTreeSet::new();
        for node in 0..s {
            for r in 0..u64::from(l.chunks_per_node()) {
                let c = DataChunk { node, chunk: stripe * u64::from(l.chunks_per_node()) + r };
                let (cw, pos) = l.locate_chunk(c).unwrap();
                prop_assert_eq!(cw.stripe, stripe);
                prop_assert!(pos < k && cw.codeword < l.codewords_per_stripe());
                prop_assert_eq!(l.member(cw, pos).unwrap(), c);
                prop_assert!(seen.insert((cw.codeword, pos)), "chunk in two codeword slots");
            }
        }
        // l data chunks fill exactly (l/K) codewords × K positions.
        prop_assert_eq!(seen.len() as u32, l.codewords_per_stripe() * k);
        for j in 0..l.codewords_per_stripe() {
            let cw = CodewordId { stripe, codeword: j };
            let nodes: Vec<u32> = l.members(cw).unwrap().iter().map(|c| c.node).collect();
            let distinct: BTreeSet<u32> = nodes.iter().copied().collect();
            if s >= k {
                prop_assert_eq!(distinct.len(), k as usize, "s ≥ K: distinct nodes");
            }
            for n in &distinct {
                let c = nodes.iter().filter(|x| *x == n).count() as u32;
                prop_assert!(c <= k.div_ceil(s));
            }
            for q in 0..m {
                let pc = l.parity_chunk(cw, q).unwrap();
                prop_assert_eq!(l.parity_codeword(pc).unwrap(), cw);
            }
        }
        prop_assert_eq!(l.is_full_strength(), s >= k);
        prop_assert_eq!(Layout::new(k, m, s, CHUNK).is_ok(), s >= k);
        prop_assert_eq!(l.node_failures_tolerated(), m / k.div_ceil(s));
    }

    #[test]
    fn any_m_erasures_per_codeword_reconstruct(
        (k, m, s) in shape(),
        seed in any::<u64>(),
        erase in prop::collection::vec(any::<u32>(), 64),
    ) {
        let layout = Layout::with_any_stretch(k, m, s, CHUNK).unwrap();
        let codec = Codec::new(k, m).unwrap();
        let arenas = random_arenas(&layout, seed, 1);
        let parity = encode_stripe(&layout, &codec, &arenas, 0).unwrap();
        for j in 0..layout.codewords_per_stripe() {
            let cw = CodewordId { stripe: 0, codeword: j };
            let mut shards: Vec<Option<Vec<u8>>> = Vec::new();
            for c in layout.members(cw).unwrap() {
                let off = (c.chunk * u64::from(CHUNK)) as usize;
                shards.push(Some(arenas[c.node as usize][off..off + CHUNK as usize].to_vec()));
            }
            for p in &parity {
                let off = j as usize * CHUNK as usize;
                shards.push(Some(p[off..off + CHUNK as usize].to_vec()));
            }
            let original = shards.clone();
            // Erase up to M distinct positions chosen by `erase`.
            let n = (erase[j as usize % 64] % (m + 1)) as usize;
            let total = (k + m) as usize;
            let mut erased = BTreeSet::new();
            for i in 0..64 {
                if erased.len() == n { break; }
                erased.insert(erase[(i + j as usize) % 64] as usize % total);
            }
            for e in &erased { shards[*e] = None; }
            let mut data_only = shards.clone();
            codec.reconstruct(&mut shards).unwrap();
            prop_assert_eq!(&shards, &original);
            codec.reconstruct_data(&mut data_only).unwrap();
            prop_assert_eq!(&data_only[..k as usize], &original[..k as usize]);
        }
    }

    #[test]
    fn survivable_node_losses_rebuild_identically(
        (k, m, s) in shape(),
        seed in any::<u64>(),
        lost in prop::collection::vec(any::<bool>(), 13),
        stripes in 1u64..3,
    ) {
        let layout = Layout::with_any_stretch(k, m, s, CHUNK).unwrap();
        let codec = Codec::new(k, m).unwrap();
        let arenas = random_arenas(&layout, seed, stripes);
        let mut parity = vec![Vec::new(); m as usize];
        for t in 0..stripes {
            for (q, p) in encode_stripe(&layout, &codec, &arenas, t).unwrap().into_iter().enumerate() {
                parity[q].extend_from_slice(&p);
            }
        }
        let lost_data: Vec<bool> = (0..s as usize).map(|i| lost[i % 13] ).collect();
        let lost_parity: Vec<bool> = (0..m as usize).map(|q| lost[(9 + q) % 13]).collect();
        let src = Mem { arenas: &arenas, parity: &parity, lost_data: &lost_data, lost_parity: &lost_parity };
        let per = layout.stripe_bytes_per_node();
        if layout.survives(&lost_data, &lost_parity) {
            for node in 0..s {
                if lost_data[node as usize] {
                    let got = rebuild_range(&layout, &codec, &src, node, 0, per * stripes).unwrap();
                    prop_assert_eq!(&got, &arenas[node as usize]);
                }
            }
            for q in 0..m {
                if lost_parity[q as usize] {
                    for t in 0..stripes {
                        let got = rebuild_parity_stripe(&layout, &codec, &src, q, t).unwrap();
                        let n = layout.stripe_parity_bytes_per_holder() as usize;
                        prop_assert_eq!(&got[..], &parity[q as usize][t as usize * n..(t as usize + 1) * n]);
                    }
                }
            }
        }
    }

    #[test]
    fn parity_after_updates_equals_fresh_encode(
        (k, m, s) in shape(),
        ops in prop::collection::vec((0u32..9, 0u8..4, 0u8..6, 0usize..300, any::<u8>(), any::<u16>()), 1..60),
        deliver_seed in any::<u64>(),
    ) {
        let layout = Layout::with_any_stretch(k, m, s, CHUNK).unwrap();
        let codec = Codec::new(k, m).unwrap();
        let mut arenas: Vec<Arena> = (0..s).map(|n| Arena::new(layout, n, 1 << 14).unwrap()).collect();
        let mut holders: Vec<ParityStore> = (0..m).map(|q| ParityStore::new(layout, q).unwrap()).collect();
        let mut pending: Vec<Vec<ParityUpdate>> = vec![Vec::new(); s as usize];
        let mut clock = 1u64;
        for (node, op, key, len, byte, off) in ops {
            let node = node % s;
            let a = &mut arenas[node as usize];
            // A key has one coordinator (its slot's), so key spaces of owners are disjoint.
            let key = [b'k', node as u8, key];
            clock += 1;
            let v = Version::new(clock, 0, node, 0);
            let value: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8).wrapping_mul(31)).collect();
            let up = match op {
                0 | 1 => a.put(&key, v, &value).ok(),
                2 => a.delete(&key, v).ok(),
                _ => {
                    // In-place partial overwrite of an existing value.
                    match a.meta(&key) {
                        Some(meta) if meta.len > 0 && len > 0 => {
                            let start = u64::from(off) % meta.len;
                            let n = (meta.len - start).min(len as u64) as usize;
                            a.write(meta.offset + start, &value[..n]).ok()
                        }
                        _ => None,
                    }
                }
            };
            if let Some(up) = up { pending[node as usize].push(up); }
            a.check_invariants();
        }
        // Deliver: per holder, a pseudo-random interleaving of the owners' queues (order
        // kept within an owner), each update delivered twice (retries).
        for (q, h) in holders.iter_mut().enumerate() {
            let mut cursors = vec![0usize; s as usize];
            let mut x = deliver_seed ^ (q as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            loop {
                let live: Vec<usize> = (0..s as usize).filter(|o| cursors[*o] < pending[*o].len()).collect();
                if live.is_empty() { break; }
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                let o = live[(x % live.len() as u64) as usize];
                let up = &pending[o][cursors[o]];
                prop_assert_eq!(h.apply(up).unwrap(), Applied::Applied);
                prop_assert_eq!(h.apply(up).unwrap(), Applied::Duplicate);
                cursors[o] += 1;
            }
        }
        let bytes: Vec<Vec<u8>> = arenas.iter().map(|a| a.bytes().to_vec()).collect();
        let max_len = bytes.iter().map(Vec::len).max().unwrap_or(0) as u64;
        let stripes = max_len.div_ceil(layout.stripe_bytes_per_node()).max(1);
        for t in 0..stripes {
            let fresh = encode_stripe(&layout, &codec, &bytes, t).unwrap();
            for (q, h) in holders.iter().enumerate() {
                for j in 0..layout.codewords_per_stripe() {
                    let pc = layout.parity_chunk(CodewordId { stripe: t, codeword: j }, q as u32).unwrap();
                    let mut got = vec![0u8; CHUNK as usize];
                    prop_assert!(h.read(pc, 0, &mut got));
                    let c = CHUNK as usize;
                    prop_assert_eq!(&got[..], &fresh[q][j as usize * c..(j as usize + 1) * c]);
                }
            }
        }
        for h in &holders {
            h.check_invariants();
            for (n, a) in arenas.iter().enumerate() {
                for (key, meta) in h.keys_of(n as u32) {
                    prop_assert_eq!(a.meta(key), Some(meta));
                }
                let want = a.accounting().payload_bytes;
                let got: u64 = h.keys_of(n as u32).map(|(_, m)| m.len).sum();
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn fuzz_reconstruct_roundtrip_never_fails(input in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzz_support::reconstruct_roundtrip(&input).unwrap();
    }
}

struct Mem<'a> {
    arenas: &'a [Vec<u8>],
    parity: &'a [Vec<u8>],
    lost_data: &'a [bool],
    lost_parity: &'a [bool],
}

fn copy(src: &[u8], off: usize, out: &mut [u8]) {
    out.fill(0);
    if off < src.len() {
        let n = (src.len() - off).min(out.len());
        out[..n].copy_from_slice(&src[off..off + n]);
    }
}

impl ChunkSource for Mem<'_> {
    fn read_data(&self, node: u32, offset: u64, out: &mut [u8]) -> bool {
        if self.lost_data[node as usize] {
            return false;
        }
        copy(&self.arenas[node as usize], offset as usize, out);
        true
    }
    fn read_parity(&self, pc: ParityChunk, byte: u32, out: &mut [u8]) -> bool {
        if self.lost_parity[pc.holder as usize] {
            return false;
        }
        copy(
            &self.parity[pc.holder as usize],
            pc.index as usize * CHUNK as usize + byte as usize,
            out,
        );
        true
    }
}

fn random_arenas(layout: &Layout, seed: u64, stripes: u64) -> Vec<Vec<u8>> {
    let per = (layout.stripe_bytes_per_node() * stripes) as usize;
    let mut x = seed | 1;
    (0..layout.s())
        .map(|_| {
            (0..per)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        })
        .collect()
}
