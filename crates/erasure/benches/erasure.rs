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
//! Run: `cargo bench -p ringlet-erasure --bench erasure` (wall clock), or with
//! `ERASURE_BENCH_CLOCK=cpu` to measure the benchmark thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) — the cost of the work itself, not inflated by waiting for a
//! core on a shared machine. Everything here runs on the calling thread, so the two agree on
//! an idle machine.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, Throughput};
use ringlet_erasure::layout::ParityChunk;
use ringlet_erasure::{
    encode_stripe, rebuild_range, ChunkSource, Codec, Layout, ParityStore, ParityUpdate,
};
use std::hint::black_box;
use std::time::Duration;

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

fn bench_encode<M: Measurement>(c: &mut Criterion<M>) {
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

fn bench_delta<M: Measurement>(c: &mut Criterion<M>) {
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

fn bench_reconstruct<M: Measurement>(c: &mut Criterion<M>) {
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

/// Thread CPU time as a criterion measurement (formats like wall time).
struct ThreadCpu(WallTime);

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;
    fn start(&self) -> Duration {
        thread_cpu()
    }
    fn end(&self, i: Duration) -> Duration {
        thread_cpu().saturating_sub(i)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.0.formatter()
    }
}

fn run<M: Measurement>(mut c: Criterion<M>) {
    bench_encode(&mut c);
    bench_delta(&mut c);
    bench_reconstruct(&mut c);
    c.final_summary();
}

fn main() {
    let base = Criterion::default().sample_size(20);
    if std::env::var("ERASURE_BENCH_CLOCK").as_deref() == Ok("cpu") {
        run(base
            .with_measurement(ThreadCpu(WallTime))
            .configure_from_args());
    } else {
        run(base.configure_from_args());
    }
}
