//! ns per operation by value size (16 B … 64 KiB): `Reader::get` (the lock-free path network
//! workers and one-sided readers use), `Engine::get` (writer path, copies into an `Entry`) and
//! `Engine::set` (overwrite of an existing key: allocate, write, checksum, switch, free).
//!
//! `cargo bench -p ringlet-engine --bench engine`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ringlet_engine::{Engine, EngineConfig, SetOptions};
use std::hint::black_box;
use std::time::Duration;

const SIZES: [usize; 6] = [16, 128, 1024, 4096, 16 * 1024, 64 * 1024];
const KEYS: usize = 1024;

fn engine_with(size: usize) -> Engine {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 512 << 20,
        index_buckets_initial: Engine::index_buckets_for(KEYS as u64),
        ..EngineConfig::default()
    })
    .expect("engine");
    let v = vec![0xabu8; size];
    for i in 0..KEYS {
        e.set(
            format!("bench:key:{i:06}").as_bytes(),
            &v,
            &SetOptions::default(),
            1,
        )
        .expect("set");
    }
    e
}

fn keys() -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(|i| format!("bench:key:{i:06}").into_bytes())
        .collect()
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let mut g = c.benchmark_group("reader_get");
    for size in SIZES {
        let e = engine_with(size);
        let r = e.reader();
        let mut out = Vec::with_capacity(size);
        let mut i = 0usize;
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                black_box(r.get(&keys[i], 1, &mut out));
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("engine_get");
    for size in SIZES {
        let e = engine_with(size);
        let mut i = 0usize;
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                black_box(e.get(&keys[i], 1));
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("engine_set");
    for size in SIZES {
        let mut e = engine_with(size);
        let v = vec![0xcdu8; size];
        let opts = SetOptions::default();
        let mut i = 0usize;
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, _| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                black_box(e.set(&keys[i], &v, &opts, 1).expect("set"));
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = bench
}
criterion_main!(benches);
