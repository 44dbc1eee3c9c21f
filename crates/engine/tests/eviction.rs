//! Eviction policy behaviour (deterministic: no randomness, no timing).
//!
//! A hot set of keys is read repeatedly (through `Reader::get`, which sets access bits), then a
//! one-pass scan writes many cold keys through a cache that cannot hold them all. A
//! scan-resistant policy keeps the hot set; both policies must keep every pinned key.

use ringlet_engine::*;

fn survivors(policy: EvictionPolicy) -> (usize, u64) {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 2 << 20,
        index_buckets_initial: 1024,
        eviction: policy,
        origin: 1,
    })
    .unwrap();
    let r = e.reader();
    let v = vec![5u8; 100];
    let hot = 2_000u32;
    for i in 0..hot {
        e.set(format!("hot{i}").as_bytes(), &v, &SetOptions::default(), 1)
            .unwrap();
    }
    let mut out = Vec::new();
    for round in 0..3u32 {
        for i in 0..hot {
            let _ = r.get(format!("hot{i}").as_bytes(), 1, &mut out);
        }
        // Interleave the scan with reads of the hot set, as a live cache sees it.
        for i in 0..8_000u32 {
            let k = format!("scan{round}-{i}");
            e.set(k.as_bytes(), &v, &SetOptions::default(), 1).unwrap();
            if i % 5 == 0 {
                let j = (i / 5) % hot;
                let _ = r.get(format!("hot{j}").as_bytes(), 1, &mut out);
            }
        }
    }
    e.check_invariants().unwrap();
    let alive = (0..hot)
        .filter(|i| e.get(format!("hot{i}").as_bytes(), 1).is_some())
        .count();
    (alive, e.stats().evictions)
}

#[test]
fn hot_set_survives_a_scan() {
    let (clock, ev_c) = survivors(EvictionPolicy::Clock);
    let (s3, ev_s) = survivors(EvictionPolicy::S3Fifo);
    eprintln!("hot keys alive: clock {clock}/2000 ({ev_c} evictions), s3fifo {s3}/2000 ({ev_s} evictions)");
    assert!(
        ev_c > 5_000 && ev_s > 5_000,
        "the scan must overflow the cache"
    );
    assert!(
        s3 >= 1_600,
        "S3-FIFO must keep most of the hot set, kept {s3}"
    );
    assert!(
        clock >= 1_000,
        "CLOCK must keep much of the hot set, kept {clock}"
    );
}

/// Regression: with S3-FIFO, a write could take 100-250 ms when the value size moved to a new
/// class on a full node — the stale-entry sweep of the eviction queues ran on every write once
/// most queued locations were live (reused locations are queued twice), and each check read a
/// key from a possibly punched page. The sweep's work must stay O(writes).
#[test]
fn s3fifo_queue_sweeps_stay_linear_in_writes() {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 4 << 20,
        index_buckets_initial: 16,
        eviction: EvictionPolicy::S3Fifo,
        origin: 1,
    })
    .unwrap();
    let sizes = [48usize, 1800, 48, 3000, 48];
    let ops = 24_000u64;
    let mut x = 10u64;
    for op in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = format!("k{}", x % 3000);
        if x % 100 < 10 {
            e.delete(key.as_bytes(), None, 1).unwrap();
        } else {
            let v = vec![(op % 251) as u8; sizes[(op / 4000) as usize % sizes.len()]];
            e.set(key.as_bytes(), &v, &SetOptions::default(), 1)
                .unwrap();
        }
    }
    e.check_invariants().unwrap();
    let st = e.stats();
    eprintln!(
        "{ops} ops: {} evictions, {} queue locations swept",
        st.evictions, st.eviction_queue_swept
    );
    assert!(st.evictions > 1_000, "the workload must evict");
    assert!(
        st.eviction_queue_swept <= 8 * ops,
        "queue sweeps examined {} locations for {ops} writes",
        st.eviction_queue_swept
    );
}
