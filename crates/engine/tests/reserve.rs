//! `Engine::reserve_index`: growing the index ahead of a known load (issue 13, pre-sizing
//! for location hints). After a reserve for N keys, writing up to N keys never upsizes (so
//! hints taken during the load keep naming the readers' table), everything written before
//! the reserve still reads back, and a smaller reserve never shrinks the index.

use ringlet_engine::{Engine, EngineConfig, ReadOutcome, SetOptions};

fn key(i: u64) -> Vec<u8> {
    format!("k:{i}").into_bytes()
}

#[test]
fn a_reserved_index_does_not_grow_during_the_load() {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 256 << 20,
        index_buckets_initial: 4,
        ..EngineConfig::default()
    })
    .unwrap();
    let opts = SetOptions::default();
    for i in 0..1_000 {
        e.set(&key(i), &i.to_le_bytes(), &opts, 1).unwrap();
    }
    let before = e.stats().upsizes;
    assert!(before > 0, "a 4-bucket index grew for 1,000 keys");
    let cap = e.reserve_index(100_000);
    assert!(cap >= 100_000, "capacity {cap}");
    assert_eq!(e.index_capacity(), cap);
    let grown = e.stats().upsizes;
    assert_eq!(grown, before + 1, "one upsize, straight to the size asked");
    e.check_invariants().unwrap();
    let r = e.reader();
    let mut out = Vec::new();
    for i in 0..1_000 {
        assert!(matches!(
            r.get(&key(i), 1, &mut out),
            ReadOutcome::Hit { .. }
        ));
        assert_eq!(out, i.to_le_bytes());
    }
    for i in 1_000..100_000 {
        e.set(&key(i), &i.to_le_bytes(), &opts, 1).unwrap();
    }
    assert_eq!(e.stats().upsizes, grown, "no upsize within the reserve");
    // Never shrinks.
    assert_eq!(e.reserve_index(10), cap);
    e.set(&key(100_000), b"x", &opts, 1).unwrap();
    e.check_invariants().unwrap();
}
