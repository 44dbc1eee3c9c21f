//! One-sided GET throughput of the smart client against a cluster whose nodes export their
//! memory (`ringlet up --nodes 3 --shm-dir DIR`): `bench/cluster_shm.py` runs it beside
//! `redis-benchmark -t get` against Redis 7 (BENCHMARKS.md, "Cluster GET one-sided").
//!
//! ```text
//! cluster_shm_bench --seeds 127.0.0.1:7379,127.0.0.1:7380 --shm-dir DIR
//!                   [--keys 100000] [--value-size 100] [--duration 5] [--threads 1] [--load]
//! ```
//!
//! `--load` writes keys `key:000000000000..` with `benchkit::bench_value` values through the
//! cluster (MSET batches over the network). Then each thread (its own `BlockingClusterClient`,
//! so its own reader per node) GETs uniformly random keys for the duration; every value is
//! compared with what was written. Prints one JSON line: GETs/s, how many were one-sided and
//! how many fell back (by reason), wrong values and misses (both must be 0).

use ringlet_client::{BlockingClusterClient, ClusterConfig};
use ringlet_shm::benchkit::{bench_key, bench_value, bench_value_ok, BENCH_KEY_BYTES};
use std::time::{Duration, Instant};

struct Opts {
    seeds: Vec<String>,
    shm_dir: std::path::PathBuf,
    keys: u64,
    value_size: usize,
    duration: Duration,
    threads: usize,
    load: bool,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        seeds: Vec::new(),
        shm_dir: std::path::PathBuf::new(),
        keys: 100_000,
        value_size: 100,
        duration: Duration::from_secs(5),
        threads: 1,
        load: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--seeds" => o.seeds = val()?.split(',').map(str::to_string).collect(),
            "--shm-dir" => o.shm_dir = val()?.into(),
            "--keys" => o.keys = val()?.parse().map_err(|e| format!("--keys: {e}"))?,
            "--value-size" => {
                o.value_size = val()?.parse().map_err(|e| format!("--value-size: {e}"))?
            }
            "--duration" => {
                let s: f64 = val()?.parse().map_err(|e| format!("--duration: {e}"))?;
                o.duration = Duration::from_secs_f64(s);
            }
            "--threads" => o.threads = val()?.parse().map_err(|e| format!("--threads: {e}"))?,
            "--load" => o.load = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.seeds.is_empty() || o.keys == 0 || o.threads == 0 {
        return Err("--seeds, --keys > 0 and --threads > 0 are required".into());
    }
    Ok(o)
}

fn client(o: &Opts) -> BlockingClusterClient {
    let seeds: Vec<&str> = o.seeds.iter().map(String::as_str).collect();
    let mut cfg = ClusterConfig {
        shm_dir: Some(o.shm_dir.clone()),
        ..ClusterConfig::default()
    };
    cfg.client.timeout = Duration::from_secs(30);
    BlockingClusterClient::connect(&seeds, cfg).unwrap_or_else(|e| panic!("connect: {e}"))
}

/// xorshift64*: a key choice per GET without a table.
fn next(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn main() {
    let o = parse().unwrap_or_else(|e| {
        eprintln!("cluster_shm_bench: {e}");
        std::process::exit(2)
    });
    if o.load {
        let c = client(&o);
        // Batches of 1,000 keys: one MSET call sends them to their coordinators at once.
        let mut i = 0u64;
        while i < o.keys {
            let n = (o.keys - i).min(1000);
            let kv: Vec<(Vec<u8>, Vec<u8>)> = (i..i + n)
                .map(|j| {
                    let mut k = [0u8; BENCH_KEY_BYTES];
                    bench_key(j, &mut k);
                    (k.to_vec(), bench_value(j, o.value_size))
                })
                .collect();
            for r in c.mset(&kv) {
                r.unwrap_or_else(|e| panic!("set: {e}"));
            }
            i += n;
        }
    }
    let results: Vec<(u64, u64, u64, ringlet_client::ClusterStats, f64)> =
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..o.threads)
                .map(|t| {
                    let o = &o;
                    s.spawn(move || {
                        let c = client(o);
                        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
                        let mut key = [0u8; BENCH_KEY_BYTES];
                        // Warm-up: every reader connected and every page touched once.
                        for i in 0..o.keys.min(10_000) {
                            bench_key(i, &mut key);
                            let _ = c.get(&key);
                        }
                        let before = c.async_client().stats();
                        let (mut ops, mut wrong, mut misses) = (0u64, 0u64, 0u64);
                        let start = Instant::now();
                        // Bounded by the duration (the clock is read every 1,024 GETs).
                        loop {
                            for _ in 0..1024 {
                                let i = next(&mut x) % o.keys;
                                bench_key(i, &mut key);
                                match c.get(&key) {
                                    Ok(v) => match v.value {
                                        Some(b) => {
                                            wrong += u64::from(!bench_value_ok(i, &b, o.value_size))
                                        }
                                        None => misses += 1,
                                    },
                                    Err(e) => panic!("get: {e}"),
                                }
                            }
                            ops += 1024;
                            if start.elapsed() >= o.duration {
                                break;
                            }
                        }
                        let secs = start.elapsed().as_secs_f64();
                        let after = c.async_client().stats();
                        let mut st = after;
                        st.shm_reads -= before.shm_reads;
                        let f = |a: u64, b: u64| a - b;
                        let (a, b) = (after.shm_fallbacks, before.shm_fallbacks);
                        st.shm_fallbacks.lease = f(a.lease, b.lease);
                        st.shm_fallbacks.not_served = f(a.not_served, b.not_served);
                        st.shm_fallbacks.in_flight = f(a.in_flight, b.in_flight);
                        st.shm_fallbacks.ec = f(a.ec, b.ec);
                        st.shm_fallbacks.changed = f(a.changed, b.changed);
                        st.shm_fallbacks.retry = f(a.retry, b.retry);
                        st.shm_fallbacks.engine = f(a.engine, b.engine);
                        st.shm_fallbacks.kind = f(a.kind, b.kind);
                        st.shm_fallbacks.unavailable = f(a.unavailable, b.unavailable);
                        (ops, wrong, misses, st, secs)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| panic!("reader thread")))
                .collect()
        });
    let (mut ops, mut wrong, mut misses, mut one_sided, mut fallbacks, mut rate) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0f64);
    let mut secs = 0f64;
    for (o_, w, m, st, s) in &results {
        ops += o_;
        wrong += w;
        misses += m;
        one_sided += st.shm_reads;
        fallbacks += st.shm_fallbacks.total();
        rate += *o_ as f64 / s;
        secs = secs.max(*s);
        eprintln!(
            "thread: {o_} GETs in {s:.2} s, fallbacks {:?}",
            st.shm_fallbacks
        );
    }
    println!(
        "{{\"ops_per_sec\":{rate:.0},\"ops\":{ops},\"secs\":{secs:.3},\"threads\":{},\"keys\":{},\"value_size\":{},\"one_sided\":{one_sided},\"fallbacks\":{fallbacks},\"wrong\":{wrong},\"misses\":{misses}}}",
        o.threads, o.keys, o.value_size
    );
}
