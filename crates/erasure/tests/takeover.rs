//! Scenario: the ec:K+M takeover path of DESIGN.md ("Failures and maintenance") and Ring
//! §5.5/§6.4, driven through the public sans-I/O types only.
//!
//! Three coordinators of an SRS(2, 2, 3) memgest take puts, overwrites and deletes; every
//! parity update goes to both parity holders. Then data node 1 and parity holder 0 fail (M = 2
//! failures). A new coordinator for node 1 first rebuilds its metadata from the surviving
//! holder (`keys_of`), then decodes each value on demand from the other arenas and the
//! surviving parity (`rebuild_sources` says what to fetch, `rebuild_range` decodes), and
//! finally a spare for holder 0 re-derives its parity (`rebuild_parity_stripe`), which must
//! equal what the dead holder had.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use ringlet_erasure::layout::ParityChunk;
use ringlet_erasure::{
    rebuild_parity_stripe, rebuild_range, rebuild_sources, Arena, ChunkSource, Codec, Layout,
    ParityStore, SourceRange,
};
use ringlet_types::Version;
use std::collections::BTreeMap;

const CAPACITY: u64 = 1 << 18;

struct Survivors<'a> {
    arenas: &'a [Option<Arena>],
    holders: &'a [Option<ParityStore>],
}

impl ChunkSource for Survivors<'_> {
    fn read_data(&self, node: u32, offset: u64, out: &mut [u8]) -> bool {
        match &self.arenas[node as usize] {
            Some(a) => {
                out.copy_from_slice(&a.read(offset, out.len() as u64).unwrap());
                true
            }
            None => false,
        }
    }
    fn read_parity(&self, pc: ParityChunk, byte: u32, out: &mut [u8]) -> bool {
        match &self.holders[pc.holder as usize] {
            Some(h) => h.read(pc, byte, out),
            None => false,
        }
    }
}

#[test]
fn coordinator_and_parity_holder_fail_then_recover() {
    let (k, m, s) = (2, 2, 3);
    let layout = Layout::new(k, m, s, 256).unwrap();
    let codec = Codec::new(k, m).unwrap();
    let mut arenas: Vec<Option<Arena>> = (0..s)
        .map(|n| Some(Arena::new(layout, n, CAPACITY).unwrap()))
        .collect();
    let mut holders: Vec<Option<ParityStore>> = (0..m)
        .map(|q| Some(ParityStore::with_arena_capacity(layout, q, CAPACITY).unwrap()))
        .collect();
    let mut truth: BTreeMap<(u32, Vec<u8>), Vec<u8>> = BTreeMap::new();

    let mut clock = 0u64;
    for round in 0..4u32 {
        for i in 0..60u32 {
            let node = i % s;
            let key = format!("n{node}-k{}", i % 23).into_bytes();
            clock += 1;
            let v = Version::new(clock, 0, node, i);
            let a = arenas[node as usize].as_mut().unwrap();
            let up = if (i + round) % 7 == 0 && truth.contains_key(&(node, key.clone())) {
                truth.remove(&(node, key.clone()));
                a.delete(&key, v).unwrap()
            } else {
                let len = 1 + ((i * 37 + round * 11) % 700) as usize;
                let value: Vec<u8> = (0..len)
                    .map(|b| (b as u32 * 13 + i + round) as u8)
                    .collect();
                truth.insert((node, key.clone()), value.clone());
                a.put(&key, v, &value).unwrap()
            };
            for h in holders.iter_mut().flatten() {
                h.apply(&up).unwrap();
            }
        }
    }
    let stripes = CAPACITY / layout.stripe_bytes_per_node();
    let lost_parity: Vec<Vec<u8>> = (0..stripes)
        .map(|t| {
            let mut v = vec![0u8; layout.stripe_parity_bytes_per_holder() as usize];
            for j in 0..layout.codewords_per_stripe() {
                let pc = layout
                    .parity_chunk(
                        ringlet_erasure::CodewordId {
                            stripe: t,
                            codeword: j,
                        },
                        0,
                    )
                    .unwrap();
                let c = layout.chunk_bytes() as usize;
                assert!(holders[0].as_ref().unwrap().read(
                    pc,
                    0,
                    &mut v[j as usize * c..(j as usize + 1) * c]
                ));
            }
            v
        })
        .collect();

    // Two failures: coordinator 1 and parity holder 0.
    arenas[1] = None;
    holders[0] = None;
    let src = Survivors {
        arenas: &arenas,
        holders: &holders,
    };

    // 1. Metadata first, from the surviving holder.
    let meta: Vec<(Vec<u8>, ringlet_erasure::KeyMeta)> = holders[1]
        .as_ref()
        .unwrap()
        .keys_of(1)
        .map(|(k, m)| (k.to_vec(), m))
        .collect();
    let want_keys: Vec<Vec<u8>> = truth
        .keys()
        .filter(|(n, _)| *n == 1)
        .map(|(_, k)| k.clone())
        .collect();
    assert_eq!(
        meta.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        want_keys
    );

    // 2. Values on demand.
    for (key, m) in &meta {
        let plan = rebuild_sources(&layout, 1, m.offset, m.len).unwrap();
        assert!(plan
            .iter()
            .all(|r| !matches!(r, SourceRange::Data { node: 1, .. })));
        let value = rebuild_range(&layout, &codec, &src, 1, m.offset, m.len).unwrap();
        assert_eq!(
            &value,
            &truth[&(1, key.clone())],
            "key {}",
            String::from_utf8_lossy(key)
        );
    }

    // 3. A spare for parity holder 0 re-derives exactly the lost parity. It needs node 1's
    //    data, which is gone: decode it first into a rebuilt arena image.
    let rebuilt_1 = rebuild_range(&layout, &codec, &src, 1, 0, CAPACITY).unwrap();
    let images: Vec<Vec<u8>> = (0..s)
        .map(|n| match &arenas[n as usize] {
            Some(a) => a.read(0, CAPACITY).unwrap(),
            None => rebuilt_1.clone(),
        })
        .collect();
    struct Images<'a>(&'a [Vec<u8>]);
    impl ChunkSource for Images<'_> {
        fn read_data(&self, node: u32, offset: u64, out: &mut [u8]) -> bool {
            let o = offset as usize;
            out.copy_from_slice(&self.0[node as usize][o..o + out.len()]);
            true
        }
        fn read_parity(&self, _: ParityChunk, _: u32, _: &mut [u8]) -> bool {
            false
        }
    }
    let mut spare = ParityStore::new(layout, 0).unwrap();
    for t in 0..stripes {
        let p = rebuild_parity_stripe(&layout, &codec, &Images(&images), 0, t).unwrap();
        assert_eq!(p, lost_parity[t as usize], "stripe {t}");
        spare.install_stripe(t, &p).unwrap();
    }
    spare.check_invariants();
}
