//! Shared-memory GET benchmark, one client thread: one-sided GET, one-sided MGET (prefetch),
//! and the floor — an in-process hash map lookup of the same keys — over uniform and Zipf
//! key choices. Every value read is compared byte for byte with what was written.
//!
//! ```text
//! cargo run --release -p ringlet-shm-exporter --example shm_bench -- \
//!     [--keys 1000000] [--value-size 100] [--duration 2] [--runs 5] [--batch 32] [--zipf 0.99]
//! ```
//! The node (engine + exporter) runs in this process on its own threads; the client maps the
//! regions through the socket and SCM_RIGHTS exactly as another process does. The node's
//! threads are idle during the runs: one-sided GETs never reach them.

use parking_lot::Mutex;
use ringlet_engine::{Engine, EngineConfig, SetOptions};
use ringlet_shm::benchkit::{
    bench_key, bench_value, median, run_get, run_map, run_mget, Run, BENCH_KEY_BYTES,
};
use ringlet_shm::testkit::{uniform_indices, zipf_indices};
use ringlet_shm::ShmReader;
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

fn arg<T: std::str::FromStr>(args: &[String], name: &str, d: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(d)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let keys: u64 = arg(&args, "--keys", 1_000_000);
    let vlen: usize = arg(&args, "--value-size", 100);
    let dur = Duration::from_secs_f64(arg(&args, "--duration", 2.0));
    let runs: usize = arg(&args, "--runs", 5);
    let batch: usize = arg(&args, "--batch", 32);
    let theta: f64 = arg(&args, "--zipf", 0.99);

    let mem = (keys * (vlen as u64 + 96) * 2).max(64 << 20);
    let engine = Engine::new(EngineConfig {
        memory_bytes_max: mem,
        index_buckets_initial: Engine::index_buckets_for(keys),
        ..EngineConfig::default()
    })?;
    let engine = Arc::new(Mutex::new(engine));
    let mut map: HashMap<[u8; BENCH_KEY_BYTES], Vec<u8>, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(keys as usize, foldhash::fast::RandomState::default());
    {
        let mut e = engine.lock();
        let mut k = [0u8; BENCH_KEY_BYTES];
        for i in 0..keys {
            bench_key(i, &mut k);
            let v = bench_value(i, vlen);
            e.set(&k, &v, &SetOptions::default(), 1)?;
            map.insert(k, v);
        }
        let s = e.stats();
        let (ib, db) = e.page_backing();
        eprintln!(
            "loaded {} keys: data {} MiB committed, index {} MiB, {} buckets, load {:.2}, pages: index {}, data {}",
            s.keys,
            s.committed_bytes >> 20,
            s.index_bytes >> 20,
            s.index_buckets,
            s.index_load_factor,
            ib.name(),
            db.name()
        );
    }
    let dir = std::env::temp_dir().join(format!("ringlet-shm-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("s");
    let _x = Exporter::spawn(engine.clone(), ExporterConfig::new(&path))?;
    let mut r = ShmReader::connect(&path)?;
    let seq_len = 1 << 22;
    let dists = [
        ("uniform", uniform_indices(keys, seq_len, 1)),
        ("zipf", zipf_indices(keys, theta, seq_len, 2)),
    ];
    let mut json = Vec::new();
    for (name, seq) in &dists {
        let (mut g, mut m, mut f) = (Vec::new(), Vec::new(), Vec::new());
        let (mut gc, mut mc, mut fc) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            let rg: Run = run_get(&mut r, seq, vlen, dur)?;
            let rm: Run = run_mget(&mut r, seq, vlen, batch, dur)?;
            let rf: Run = run_map(&map, seq, vlen, dur);
            for x in [&rg, &rm, &rf] {
                assert_eq!(x.wrong, 0, "a value differed from what was written");
                assert_eq!(x.misses, 0, "a loaded key was missing");
            }
            eprintln!(
                "{name} run {run}: shm GET {:.2} M/s ({:.2} M/cpu-s), shm MGET({batch}) {:.2} M/s ({:.2} M/cpu-s), hash map {:.2} M/s ({:.2} M/cpu-s)",
                rg.ops_per_sec() / 1e6,
                rg.ops_per_cpu_sec() / 1e6,
                rm.ops_per_sec() / 1e6,
                rm.ops_per_cpu_sec() / 1e6,
                rf.ops_per_sec() / 1e6,
                rf.ops_per_cpu_sec() / 1e6
            );
            g.push(rg.ops_per_sec());
            m.push(rm.ops_per_sec());
            f.push(rf.ops_per_sec());
            gc.push(rg.ops_per_cpu_sec());
            mc.push(rm.ops_per_cpu_sec());
            fc.push(rf.ops_per_cpu_sec());
        }
        let (g, m, f) = (median(g), median(m), median(f));
        let (gc, mc, fc) = (median(gc), median(mc), median(fc));
        println!(
            "{name}: median of {runs}: shm GET {:.2} M/s ({:.2} M/cpu-s, floor/GET {:.2}x), shm MGET({batch}) {:.2} M/s ({:.2} M/cpu-s, floor/MGET {:.2}x), in-process hash map {:.2} M/s ({:.2} M/cpu-s)",
            g / 1e6,
            gc / 1e6,
            fc / gc,
            m / 1e6,
            mc / 1e6,
            fc / mc,
            f / 1e6,
            fc / 1e6
        );
        json.push(format!(
            "\"{name}\":{{\"shm_get_ops_per_sec\":{g:.0},\"shm_get_ops_per_cpu_sec\":{gc:.0},\"shm_mget_ops_per_sec\":{m:.0},\"shm_mget_ops_per_cpu_sec\":{mc:.0},\"hashmap_ops_per_sec\":{f:.0},\"hashmap_ops_per_cpu_sec\":{fc:.0}}}"
        ));
    }
    let st = r.stats();
    println!(
        "{{\"keys\":{keys},\"value_size\":{vlen},\"batch\":{batch},\"runs\":{runs},{},\"fallbacks\":{}}}",
        json.join(","),
        st.fallbacks
    );
    Ok(())
}
