//! Memory overhead per key: RSS growth for 1,000,000 keys of 16 bytes with 100-byte values,
//! minus the 116 payload bytes.
//!
//! `cargo run --release -p ringlet-engine --example mem_overhead [-- --grow]`
//!
//! RSS is read from `/proc/self/status` (`VmRSS`: anonymous + file + shared memory, which
//! includes the engine's memfd pages as they are touched). It is measured after the engine is
//! created and after the keys are inserted (and pending index migration is finished by ticks),
//! so the delta is what the keys cost: index entries, data entries, slab rounding and any
//! writer-side heap. Keys and values are generated on the fly (not held in a Vec).
//!
//! By default the index is provisioned for the expected key count (`index_buckets_initial`,
//! as CliqueMap provisions its index on restart from the expected corpus); `--grow` starts
//! from the default size and lets the index upsize at run time.

use ringlet_engine::{Engine, EngineConfig, SetOptions};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix("VmRSS:") {
            let kb: u64 = rest
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0);
            return kb * 1024;
        }
    }
    0
}

fn main() {
    const KEYS: u64 = 1_000_000;
    let grow = std::env::args().any(|a| a == "--grow");
    let mut cfg = EngineConfig {
        memory_bytes_max: 1 << 30,
        ..EngineConfig::default()
    };
    if !grow {
        cfg.index_buckets_initial = Engine::index_buckets_for(KEYS);
    }
    let mut e = Engine::new(cfg).expect("engine");
    let before = rss_bytes();
    let opts = SetOptions::default();
    let mut value = [0u8; 100];
    for i in 0..KEYS {
        let key = format!("key:{i:012}");
        debug_assert_eq!(key.len(), 16);
        value[..8].copy_from_slice(&i.to_le_bytes());
        e.set(key.as_bytes(), &value, &opts, 1).expect("set");
    }
    for _ in 0..100_000 {
        if !e.tick(1).upsize_in_progress {
            break;
        }
    }
    let after = rss_bytes();
    let st = e.stats();
    assert_eq!(st.keys, KEYS);
    let per_key = (after - before) as f64 / KEYS as f64;
    println!(
        "mode: {}",
        if grow {
            "index grown at run time"
        } else {
            "index provisioned for 1M keys"
        }
    );
    println!(
        "keys: {} (index upsizes during the load: {}, forced by a full neighbourhood: {})",
        st.keys, st.upsizes, st.index_conflicts
    );
    println!(
        "index: {} buckets, load factor {:.3}, {:.1} B/key",
        st.index_buckets,
        st.index_load_factor,
        st.index_bytes as f64 / KEYS as f64
    );
    println!(
        "data: committed {:.1} B/key (used {:.1})",
        st.committed_bytes as f64 / KEYS as f64,
        st.used_bytes as f64 / KEYS as f64
    );
    println!("rss delta: {:.1} B/key", per_key);
    println!(
        "overhead beyond 116 payload bytes: {:.1} B/key",
        per_key - 116.0
    );
}
