//! A minimal test node: the real engine, ticked every millisecond, exported by the real
//! [`ringlet_shm_exporter::Exporter`]. Used by the multi-process tests and the benchmark until the
//! `ringlet server --shm-socket` flag exists. Commands on stdin, one per line:
//! `epoch N` (move to epoch N), `stats` (print a JSON line), `quit`. EOF on stdin quits.
//!
//! ```text
//! ringlet-shm-node --socket PATH [--memory BYTES] [--buckets N] [--epoch E]
//!                  [--eviction clock|s3fifo] [--generation G]
//! ```

use parking_lot::Mutex;
use ringlet_engine::{Engine, EngineConfig, EvictionPolicy};
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use ringlet_types::Epoch;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = arg::<String>(&args, "--socket") else {
        eprintln!("usage: ringlet-shm-node --socket PATH [--memory BYTES] [--buckets N] [--epoch E] [--eviction clock|s3fifo] [--generation G]");
        std::process::exit(2);
    };
    let cfg = EngineConfig {
        memory_bytes_max: arg(&args, "--memory").unwrap_or(256 << 20),
        index_buckets_initial: arg(&args, "--buckets").unwrap_or(1 << 12),
        eviction: match arg::<String>(&args, "--eviction").as_deref() {
            Some("s3fifo") => EvictionPolicy::S3Fifo,
            _ => EvictionPolicy::Clock,
        },
        origin: 1,
    };
    let engine = match Engine::new(cfg) {
        Ok(e) => Arc::new(Mutex::new(e)),
        Err(e) => {
            eprintln!("engine: {e}");
            std::process::exit(1);
        }
    };
    let mut ecfg = ExporterConfig::new(&path);
    ecfg.epoch = Epoch(arg(&args, "--epoch").unwrap_or(0));
    ecfg.generation = arg(&args, "--generation").unwrap_or(0);
    let exporter = match Exporter::spawn(engine.clone(), ecfg) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("exporter: {e}");
            std::process::exit(1);
        }
    };
    // Background work the server would do: expiry, upsize steps, compaction.
    let stop = Arc::new(AtomicBool::new(false));
    let released = Arc::new(AtomicU64::new(0));
    let migrated = Arc::new(AtomicU64::new(0));
    let moved = Arc::new(AtomicU64::new(0));
    let ticker = {
        let (engine, stop) = (engine.clone(), stop.clone());
        let (released, migrated, moved) = (released.clone(), migrated.clone(), moved.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let r = engine.lock().tick(now_ms());
                released.fetch_add(r.bytes_released, Ordering::Relaxed);
                migrated.fetch_add(u64::from(r.buckets_migrated), Ordering::Relaxed);
                moved.fetch_add(u64::from(r.entries_moved), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    println!("ready generation={}", exporter.generation());
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut it = line.split_whitespace();
        match it.next() {
            Some("epoch") => {
                if let Some(e) = it.next().and_then(|s| s.parse().ok()) {
                    exporter.set_epoch(Epoch(e));
                    println!("ok epoch={e}");
                }
            }
            Some("stats") => {
                let s = engine.lock().stats();
                let x = exporter.stats();
                println!(
                    "{{\"keys\":{},\"used_bytes\":{},\"committed_bytes\":{},\"evictions\":{},\"upsizes\":{},\"index_buckets\":{},\"bytes_released\":{},\"buckets_migrated\":{},\"entries_moved\":{},\"connections_accepted\":{},\"requests\":{},\"access_batches\":{},\"access_hashes\":{}}}",
                    s.keys,
                    s.used_bytes,
                    s.committed_bytes,
                    s.evictions,
                    s.upsizes,
                    s.index_buckets,
                    released.load(Ordering::Relaxed),
                    migrated.load(Ordering::Relaxed),
                    moved.load(Ordering::Relaxed),
                    x.connections_accepted,
                    x.requests,
                    x.access_batches,
                    x.access_hashes,
                );
            }
            Some("check") => match engine.lock().check_invariants() {
                Ok(()) => println!("ok check"),
                Err(e) => println!("bad check: {e}"),
            },
            Some("quit") => break,
            _ => println!("unknown command"),
        }
        let _ = std::io::stdout().flush();
    }
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.join();
    drop(exporter);
}
