//! Throughput of the erasure core for ec:2+1, ec:3+1, ec:3+2 (SRS with s = 3 as in Ring's
//! evaluation, 4 KiB chunks):
//!
//! - `encode`: full parity of stripes from the data arenas ([`encode_stripe`]); bytes = data
//!   bytes encoded;
//! - `delta_apply`: one parity holder folding 1 KiB updates ([`ParityStore::apply`]); bytes
//!   = delta bytes;
//! - `reconstruct`: decoding a lost data node's arena range of 1 MiB from survivors
//!   ([`rebuild_range`]); bytes = rebuilt bytes.
//!
//! Run: `cargo bench -p ringlet-erasure --bench erasure`.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringlet_erasure::layout::ParityChunk;
use ringlet_erasure::{
    encode_stripe, rebuild_range, ChunkSource, Codec, Layout, ParityStore, ParityUpdate,
};
use std::hint::black_box;

const S: u32 = 3;
const CHUNK: u32 = 4096;
const ARENA: usize = 4 << 20;
const SHAPES: [(u32, u32); 3] = [(2, 1), (3, 1), (3, 2)];

fn arenas() -> Vec<Vec<u8>> {
    let mut x = 0x1234_5678_9abc_def1u64;
    (0..S)
        .map(|_| {
            (0..ARENA)
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

fn bench_encode(c: &mut Criterion) {
    let data = arenas();
    let mut g = c.benchmark_group("encode");
    for (k, m) in SHAPES {
        let layout = Layout::new(k, m, S, CHUNK).unwrap();
        let codec = Codec::new(k, m).unwrap();
        let stripes = ARENA as u64 / layout.stripe_bytes_per_node();
        g.throughput(Throughput::Bytes(
            stripes * layout.stripe_bytes_per_node() * u64::from(S),
        ));
        g.bench_function(BenchmarkId::from_parameter(format!("ec:{k}+{m}")), |b| {
            b.iter(|| {
                for t in 0..stripes {
                    black_box(encode_stripe(&layout, &codec, &data, t).unwrap());
                }
            })
        });
    }
    g.finish();
}

fn bench_delta(c: &mut Criterion) {
    let mut g = c.benchmark_group("delta_apply");
    const UPDATES: u64 = 1024;
    const LEN: usize = 1024;
    for (k, m) in SHAPES {
        let layout = Layout::new(k, m, S, CHUNK).unwrap();
        let ups: Vec<ParityUpdate> = (0..UPDATES)
            .map(|i| ParityUpdate {
                owner: (i % u64::from(S)) as u32,
                seq: i / u64::from(S) + 1,
                offset: (i * 3001) % (ARENA as u64 - LEN as u64),
                delta: (0..LEN).map(|b| (b as u64 ^ i) as u8 | 1).collect(),
                meta: None,
            })
            .collect();
        g.throughput(Throughput::Bytes(UPDATES * LEN as u64));
        g.bench_function(BenchmarkId::from_parameter(format!("ec:{k}+{m}")), |b| {
            b.iter_batched_ref(
                || ParityStore::new(layout, m - 1).unwrap(),
                |store| {
                    for u in &ups {
                        black_box(store.apply(u).unwrap());
                    }
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

struct Src<'a> {
    arenas: &'a [Vec<u8>],
    parity: &'a [Vec<u8>],
    lost: u32,
    chunk: usize,
}

impl ChunkSource for Src<'_> {
    fn read_data(&self, node: u32, offset: u64, out: &mut [u8]) -> bool {
        if node == self.lost {
            return false;
        }
        let o = offset as usize;
        out.copy_from_slice(&self.arenas[node as usize][o..o + out.len()]);
        true
    }
    fn read_parity(&self, pc: ParityChunk, byte: u32, out: &mut [u8]) -> bool {
        let o = pc.index as usize * self.chunk + byte as usize;
        out.copy_from_slice(&self.parity[pc.holder as usize][o..o + out.len()]);
        true
    }
}

fn bench_reconstruct(c: &mut Criterion) {
    let data = arenas();
    let mut g = c.benchmark_group("reconstruct");
    const LEN: u64 = 1 << 20;
    for (k, m) in SHAPES {
        let layout = Layout::new(k, m, S, CHUNK).unwrap();
        let codec = Codec::new(k, m).unwrap();
        let stripes = ARENA as u64 / layout.stripe_bytes_per_node();
        let mut parity = vec![Vec::new(); m as usize];
        for t in 0..stripes {
            for (q, p) in encode_stripe(&layout, &codec, &data, t)
                .unwrap()
                .into_iter()
                .enumerate()
            {
                parity[q].extend_from_slice(&p);
            }
        }
        let src = Src {
            arenas: &data,
            parity: &parity,
            lost: 1,
            chunk: CHUNK as usize,
        };
        assert_eq!(
            rebuild_range(&layout, &codec, &src, 1, 0, LEN).unwrap(),
            data[1][..LEN as usize]
        );
        g.throughput(Throughput::Bytes(LEN));
        g.bench_function(BenchmarkId::from_parameter(format!("ec:{k}+{m}")), |b| {
            b.iter(|| black_box(rebuild_range(&layout, &codec, &src, 1, 0, LEN).unwrap()))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench_encode, bench_delta, bench_reconstruct
}
criterion_main!(benches);
