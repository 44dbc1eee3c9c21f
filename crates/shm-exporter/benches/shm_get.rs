//! Criterion: one-sided GET and MGET vs an in-process hash map, 100k keys, 100 B values,
//! uniform keys. The full 1M-key / Zipf comparison with medians is the `shm_bench` example
//! (`docs/design/shm-bench.md`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use parking_lot::Mutex;
use ringlet_engine::{Engine, EngineConfig, SetOptions};
use ringlet_shm::benchkit::{bench_key, bench_value, bench_value_ok, BENCH_KEY_BYTES};
use ringlet_shm::testkit::uniform_indices;
use ringlet_shm::ShmReader;
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use std::collections::HashMap;
use std::sync::Arc;

const KEYS: u64 = 100_000;
const VLEN: usize = 100;

fn bench(c: &mut Criterion) {
    let engine = Engine::new(EngineConfig {
        memory_bytes_max: 64 << 20,
        index_buckets_initial: Engine::index_buckets_for(KEYS),
        ..EngineConfig::default()
    })
    .unwrap();
    let engine = Arc::new(Mutex::new(engine));
    let mut map: HashMap<[u8; BENCH_KEY_BYTES], Vec<u8>, foldhash::fast::RandomState> =
        HashMap::default();
    {
        let mut e = engine.lock();
        let mut k = [0u8; BENCH_KEY_BYTES];
        for i in 0..KEYS {
            bench_key(i, &mut k);
            let v = bench_value(i, VLEN);
            e.set(&k, &v, &SetOptions::default(), 1).unwrap();
            map.insert(k, v);
        }
    }
    let dir = std::env::temp_dir().join(format!("ringlet-shm-crit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let _x = Exporter::spawn(engine.clone(), ExporterConfig::new(&path)).unwrap();
    let mut r = ShmReader::connect(&path).unwrap();
    let seq = uniform_indices(KEYS, 1 << 20, 3);
    let mut g = c.benchmark_group("get_100k_keys_100B");
    g.throughput(Throughput::Elements(1));
    let mut pos = 0usize;
    let mut key = [0u8; BENCH_KEY_BYTES];
    let mut out = Vec::new();
    g.bench_function("shm_get", |b| {
        b.iter(|| {
            let i = u64::from(seq[pos % seq.len()]);
            pos += 1;
            bench_key(i, &mut key);
            let hit = r.get_into(&key, &mut out).unwrap();
            assert!(hit.is_some() && bench_value_ok(i, &out, VLEN));
        })
    });
    g.bench_function("hashmap_get", |b| {
        b.iter(|| {
            let i = u64::from(seq[pos % seq.len()]);
            pos += 1;
            bench_key(i, &mut key);
            assert!(bench_value_ok(i, map.get(&key).unwrap(), VLEN));
        })
    });
    g.throughput(Throughput::Elements(32));
    let mut keys = [[0u8; BENCH_KEY_BYTES]; 32];
    let mut idx = [0u64; 32];
    g.bench_function("shm_mget_32", |b| {
        b.iter(|| {
            for j in 0..32 {
                idx[j] = u64::from(seq[pos % seq.len()]);
                pos += 1;
                bench_key(idx[j], &mut keys[j]);
            }
            r.mget_with(&keys, |j, item| {
                assert!(item.is_some_and(|(_, v)| bench_value_ok(idx[j], v, VLEN)));
            })
            .unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
