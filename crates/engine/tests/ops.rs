//! Scenario tests of the engine's operations, one behaviour per test: versions and
//! tombstones, conditions, TTL, staged writes, string helpers, scan, digests, readers.

use ringlet_engine::*;

fn eng() -> Engine {
    Engine::new(EngineConfig {
        memory_bytes_max: 64 << 20,
        index_buckets_initial: 64,
        ..EngineConfig::default()
    })
    .unwrap()
}

fn set(e: &mut Engine, k: &[u8], v: &[u8], now: u64) -> SetOutcome {
    e.set(k, v, &SetOptions::default(), now).unwrap()
}

fn opts_v(v: Version) -> SetOptions {
    SetOptions {
        version: Some(v),
        ..SetOptions::default()
    }
}

#[test]
fn set_get_delete() {
    let mut e = eng();
    assert!(e.get(b"k", 1).is_none());
    let SetOutcome::Applied { version, old } = set(&mut e, b"k", b"v1", 1) else {
        panic!()
    };
    assert!(old.is_none());
    let got = e.get(b"k", 1).unwrap();
    assert_eq!(got.value, b"v1");
    assert_eq!(got.version, version);
    assert_eq!(e.len(), 1);
    let SetOutcome::Applied { old, .. } = set(&mut e, b"k", b"v2", 2) else {
        panic!()
    };
    assert_eq!(old.unwrap().value, b"v1");
    let deleted = e.delete(b"k", None, 3).unwrap().unwrap();
    assert_eq!(deleted.value, b"v2");
    assert!(e.get(b"k", 3).is_none());
    assert_eq!(e.len(), 0);
    assert_eq!(e.delete(b"k", None, 3).unwrap(), None);
}

#[test]
fn versions_must_increase_and_tombstones_block_resurrection() {
    let mut e = eng();
    let v = |n| Version::new(1000, 0, 1, n);
    assert!(matches!(
        e.set(b"k", b"a", &opts_v(v(5)), 1).unwrap(),
        SetOutcome::Applied { .. }
    ));
    assert!(matches!(
        e.set(b"k", b"b", &opts_v(v(4)), 1).unwrap(),
        SetOutcome::NotApplied { .. }
    ));
    assert!(matches!(
        e.set(b"k", b"b", &opts_v(v(5)), 1).unwrap(),
        SetOutcome::NotApplied { .. }
    ));
    assert_eq!(e.delete(b"k", Some(v(3)), 1), Err(Error::StaleVersion));
    e.delete(b"k", Some(v(7)), 1).unwrap();
    // A late write older than the erase must not resurrect the key.
    assert!(matches!(
        e.set(b"k", b"c", &opts_v(v(6)), 1).unwrap(),
        SetOutcome::NotApplied { .. }
    ));
    assert!(e.get(b"k", 1).is_none());
    assert!(matches!(
        e.set(b"k", b"d", &opts_v(v(8)), 1).unwrap(),
        SetOutcome::Applied { .. }
    ));
    // An engine-assigned version is above everything observed.
    let SetOutcome::Applied { version, .. } = set(&mut e, b"k", b"e", 1) else {
        panic!()
    };
    assert!(version > v(8));
}

#[test]
fn flush_all_moves_the_summary() {
    let mut e = eng();
    let SetOutcome::Applied { version, .. } = set(&mut e, b"k", b"a", 1) else {
        panic!()
    };
    e.flush_all(2);
    assert!(e.get(b"k", 2).is_none());
    assert!(e.tombstone_summary() > version);
    let late = Version(version.0 + 1);
    assert!(matches!(
        e.set(b"k", b"x", &opts_v(late), 2).unwrap(),
        SetOutcome::NotApplied { .. }
    ));
}

#[test]
fn conditions() {
    let mut e = eng();
    let nx = SetOptions {
        condition: Condition::IfAbsent,
        ..SetOptions::default()
    };
    let xx = SetOptions {
        condition: Condition::IfPresent,
        ..SetOptions::default()
    };
    assert!(matches!(
        e.set(b"k", b"a", &xx, 1).unwrap(),
        SetOutcome::NotApplied { current: None }
    ));
    let SetOutcome::Applied { version, .. } = e.set(b"k", b"a", &nx, 1).unwrap() else {
        panic!()
    };
    let SetOutcome::NotApplied { current } = e.set(b"k", b"b", &nx, 1).unwrap() else {
        panic!()
    };
    assert_eq!(current.unwrap().value, b"a");
    let cas_bad = SetOptions {
        condition: Condition::IfVersion(Version(1)),
        ..SetOptions::default()
    };
    assert!(matches!(
        e.set(b"k", b"c", &cas_bad, 1).unwrap(),
        SetOutcome::NotApplied { .. }
    ));
    let cas = SetOptions {
        condition: Condition::IfVersion(version),
        ..SetOptions::default()
    };
    assert!(matches!(
        e.set(b"k", b"c", &cas, 1).unwrap(),
        SetOutcome::Applied { .. }
    ));
    assert_eq!(e.get(b"k", 1).unwrap().value, b"c");
}

#[test]
fn ttl_lazy_active_and_keep() {
    let mut e = eng();
    let ex = SetOptions {
        expiry: Expiry::At(100),
        ..SetOptions::default()
    };
    set(&mut e, b"a", b"1", 10);
    e.set(b"k", b"v", &ex, 10).unwrap();
    assert_eq!(e.get(b"k", 99).unwrap().expire_at_ms, Some(100));
    let keep = SetOptions {
        expiry: Expiry::Keep,
        ..SetOptions::default()
    };
    e.set(b"k", b"w", &keep, 20).unwrap();
    assert_eq!(e.get(b"k", 20).unwrap().expire_at_ms, Some(100));
    assert_eq!(e.incr_by(b"n", 1, 20).unwrap(), 1);
    assert!(e.set_expiry(b"n", Expiry::At(150), 20).unwrap());
    assert_eq!(e.incr_by(b"n", 1, 20).unwrap(), 2);
    assert_eq!(
        e.get(b"n", 20).unwrap().expire_at_ms,
        Some(150),
        "INCR keeps the TTL"
    );
    assert!(e.get(b"k", 100).is_none(), "expired at its deadline");
    let (r, _) = e.reader().get_vec(b"k", 100);
    assert_eq!(r, ReadOutcome::Miss);
    let rep = e.tick(200);
    assert_eq!(rep.expired, 2);
    assert_eq!(e.len(), 1);
    assert!(!e.set_expiry(b"missing", Expiry::At(5), 200).unwrap());
    assert!(
        e.set_expiry(b"a", Expiry::At(5), 200).unwrap(),
        "a past deadline deletes"
    );
    assert!(e.get(b"a", 200).is_none());
    assert_eq!(e.len(), 0);
}

#[test]
fn staged_writes_are_invisible_until_published() {
    let mut e = eng();
    set(&mut e, b"k", b"old", 1);
    let v = e.next_version(2);
    let staged = SetOptions {
        version: Some(v),
        staged: true,
        ..SetOptions::default()
    };
    assert!(matches!(
        e.set(b"k", b"new", &staged, 2).unwrap(),
        SetOutcome::Applied { .. }
    ));
    assert_eq!(e.get(b"k", 2).unwrap().value, b"old");
    assert_eq!(e.reader().get_vec(b"k", 2).1, b"old");
    assert!(!e.publish(b"k", Version(v.0 + 1), 2).unwrap());
    assert!(e.publish(b"k", v, 2).unwrap());
    assert_eq!(e.get(b"k", 2).unwrap().value, b"new");
    assert_eq!(e.reader().get_vec(b"k", 2).1, b"new");
    assert!(!e.publish(b"k", v, 2).unwrap(), "published once");
}

#[test]
fn string_helpers() {
    let mut e = eng();
    assert_eq!(e.incr_by(b"n", 5, 1).unwrap(), 5);
    assert_eq!(e.incr_by(b"n", -7, 1).unwrap(), -2);
    set(&mut e, b"s", b"abc", 1);
    assert_eq!(e.incr_by(b"s", 1, 1), Err(Error::NotInteger));
    set(&mut e, b"m", i64::MAX.to_string().as_bytes(), 1);
    assert_eq!(e.incr_by(b"m", 1, 1), Err(Error::Overflow));
    set(&mut e, b"f", b"10.5", 1);
    assert_eq!(e.incr_by_float(b"f", 0.1, 1).unwrap(), b"10.6");
    assert_eq!(e.incr_by_float(b"s", 0.1, 1), Err(Error::NotFloat));
    assert_eq!(e.append(b"s", b"def", 1).unwrap(), 6);
    assert_eq!(e.append(b"new", b"xy", 1).unwrap(), 2);
    assert_eq!(e.get_range(b"s", 1, -2, 1), b"bcde");
    assert_eq!(e.get_range(b"nokey", 0, -1, 1), b"");
    assert_eq!(e.set_range(b"s", 8, b"Z", 1).unwrap(), 9);
    assert_eq!(e.get(b"s", 1).unwrap().value, b"abcdef\0\0Z");
    assert_eq!(e.set_range(b"empty", 3, b"", 1).unwrap(), 0);
    assert!(e.get(b"empty", 1).is_none());
    assert!(matches!(
        e.set_range(b"s", usize::MAX, b"x", 1),
        Err(Error::ValueTooLarge { .. })
    ));
}

#[test]
fn size_limits_are_typed_errors() {
    let mut e = eng();
    let big_key = vec![0u8; ringlet_types::limits::KEY_BYTES_MAX as usize + 1];
    assert!(matches!(
        e.set(&big_key, b"v", &SetOptions::default(), 1),
        Err(Error::KeyTooLarge { .. })
    ));
    let um = SetOptions {
        memgest: MemgestId(9),
        ..SetOptions::default()
    };
    assert_eq!(e.set(b"k", b"v", &um, 1), Err(Error::UnknownMemgest));
}

#[test]
fn pinned_data_is_never_evicted() {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 1 << 20,
        index_buckets_initial: 64,
        ..EngineConfig::default()
    })
    .unwrap();
    e.define_memgest(MemgestId(1), false);
    let pinned = SetOptions {
        memgest: MemgestId(1),
        ..SetOptions::default()
    };
    let value = vec![7u8; 1000];
    let mut stored = 0;
    let mut full = false;
    for i in 0..10_000u32 {
        match e.set(format!("p{i}").as_bytes(), &value, &pinned, 1) {
            Ok(SetOutcome::Applied { .. }) => stored += 1,
            Err(Error::NoSpace) => {
                full = true;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(full, "a 1 MiB engine must fill up");
    for i in 0..stored {
        assert!(
            e.get(format!("p{i}").as_bytes(), 1).is_some(),
            "pinned key {i} lost"
        );
    }
    // Cache data evicts instead of failing.
    for i in 0..5_000u32 {
        e.set(
            format!("c{i}").as_bytes(),
            &value,
            &SetOptions::default(),
            1,
        )
        .unwrap_or_else(|err| {
            // Only possible if every byte is pinned.
            assert_eq!(err, Error::NoSpace);
            SetOutcome::NotApplied { current: None }
        });
    }
    for i in 0..stored {
        assert!(
            e.get(format!("p{i}").as_bytes(), 1).is_some(),
            "pinned key {i} lost"
        );
    }
}

#[test]
fn cache_evicts_when_full() {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 1 << 20,
        index_buckets_initial: 64,
        ..EngineConfig::default()
    })
    .unwrap();
    let value = vec![7u8; 1000];
    for i in 0..5_000u32 {
        e.set(
            format!("c{i}").as_bytes(),
            &value,
            &SetOptions::default(),
            1,
        )
        .unwrap();
    }
    assert!(e.stats().evictions > 0);
    assert!(e.len() < 5_000);
    assert!(e.get(b"c4999", 1).is_some(), "the newest key stays");
}

#[test]
fn scan_returns_every_key() {
    let mut e = eng();
    for i in 0..1000u32 {
        set(&mut e, format!("k{i}").as_bytes(), b"v", 1);
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = 0;
    let mut calls = 0;
    loop {
        let mut out = Vec::new();
        cursor = e.scan(cursor, 37, 1, &mut out);
        seen.extend(out);
        calls += 1;
        if cursor == 0 {
            break;
        }
        // Grow the index mid-scan: keys present throughout must still be returned.
        if calls == 3 {
            for i in 1000..5000u32 {
                set(&mut e, format!("k{i}").as_bytes(), b"v", 1);
            }
        }
        for _ in 0..3 {
            e.tick(1);
        }
        assert!(calls < 100_000);
    }
    for i in 0..1000u32 {
        assert!(seen.contains(format!("k{i}").as_bytes()), "k{i} missed");
    }
}

#[test]
fn slot_iteration_and_digest() {
    let mut a = eng();
    let mut b = eng();
    let slot = ringlet_types::key_slot(b"{u1}x");
    let mut versions = Vec::new();
    for i in 0..50u32 {
        let k = format!("{{u1}}{i}");
        let SetOutcome::Applied { version, .. } = set(&mut a, k.as_bytes(), b"v", 1) else {
            panic!()
        };
        versions.push((k, version));
        set(&mut a, format!("other{i}").as_bytes(), b"v", 1);
    }
    // The same versions applied in the opposite order give the same digest.
    for (k, v) in versions.iter().rev() {
        b.set(k.as_bytes(), b"v", &opts_v(*v), 1).unwrap();
    }
    assert_eq!(a.slot_digest(slot), b.slot_digest(slot));
    assert_ne!(a.slot_digest(slot), 0);
    let mut keys = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = a.slot_keys(slot, cursor, 7, &mut keys);
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 50);
    assert!(keys.iter().all(|k| ringlet_types::key_slot(k) == slot));
    a.delete(b"{u1}0", None, 2).unwrap();
    assert_ne!(a.slot_digest(slot), b.slot_digest(slot));
    assert_eq!(a.stats().per_slot.get(&slot).unwrap().keys, 49);
}

#[test]
fn random_key_and_stats() {
    let mut e = eng();
    assert!(e.random_key(1, 1).is_none());
    set(&mut e, b"only", b"v", 1);
    assert_eq!(e.random_key(42, 1).unwrap(), b"only");
    let s = e.stats();
    assert_eq!(s.keys, 1);
    assert_eq!(s.per_memgest.get(&MemgestId::NONE).unwrap().keys, 1);
    assert!(s.used_bytes > 0);
    // The per-memgest counts alone (what a cluster node reports every 100 ms) are the
    // ones `stats` gives, and an emptied memgest is left out as there.
    let per: Vec<_> = s.per_memgest.iter().map(|(k, u)| (*k, *u)).collect();
    assert_eq!(e.memgest_usage(), per);
    e.delete(b"only", None, 2).unwrap();
    assert!(e.memgest_usage().is_empty());
    assert!(e.stats().per_memgest.is_empty());
}

#[test]
fn reader_is_clone_send_sync() {
    fn check<T: Clone + Send + Sync>() {}
    fn send<T: Send>() {}
    check::<Reader>();
    send::<Engine>();
    let mut e = eng();
    set(&mut e, b"k", b"hello", 1);
    let r = e.reader();
    let t = std::thread::spawn(move || r.get_vec(b"k", 1));
    let (out, v) = t.join().unwrap();
    assert!(matches!(out, ReadOutcome::Hit { .. }));
    assert_eq!(v, b"hello");
}

/// A record's kind is part of its entry: `get`, the lock-free reader and a TTL change keep
/// it, a plain SET makes the key a string again, and string rewrites of a record are
/// refused (WRONGTYPE) without touching it.
#[test]
fn record_kind_is_kept_and_string_ops_refuse_records() {
    let mut e = eng();
    let rec = SetOptions {
        kind: ringlet_types::ValueKind::Record,
        ..SetOptions::default()
    };
    e.set(b"r", b"\x01encoded", &rec, 1).unwrap();
    let got = e.get(b"r", 1).unwrap();
    assert_eq!(got.kind, ringlet_types::ValueKind::Record);
    assert_eq!(got.value, b"\x01encoded");
    let mut out = Vec::new();
    match e.reader().get(b"r", 1, &mut out) {
        ReadOutcome::Hit { kind, .. } => assert_eq!(kind, ringlet_types::ValueKind::Record),
        other => panic!("{other:?}"),
    }
    assert_eq!(out, b"\x01encoded");
    assert!(e.set_expiry(b"r", Expiry::At(1_000), 2).unwrap());
    assert_eq!(
        e.get(b"r", 3).unwrap().kind,
        ringlet_types::ValueKind::Record
    );
    assert_eq!(e.append(b"r", b"x", 3), Err(Error::WrongType));
    assert_eq!(e.incr_by(b"r", 1, 3), Err(Error::WrongType));
    assert_eq!(e.get(b"r", 3).unwrap().value, b"\x01encoded");
    set(&mut e, b"r", b"plain", 4);
    assert_eq!(
        e.get(b"r", 4).unwrap().kind,
        ringlet_types::ValueKind::String
    );
    set(&mut e, b"s", b"1", 4);
    assert_eq!(e.incr_by(b"s", 1, 4), Ok(2));
    assert_eq!(
        e.get(b"s", 4).unwrap().kind,
        ringlet_types::ValueKind::String
    );
}

/// SCAN and KEYS reap the expired keys they visit, as Redis's do: afterwards the key count
/// (DBSIZE) no longer includes them. Found by the random differential test: `PSETEX k 1 v`,
/// then SCAN, then DBSIZE answered 1 where Redis answered 0.
#[test]
fn scan_reaping_deletes_expired_keys_it_visits() {
    let mut e = eng();
    let ttl = SetOptions {
        expiry: Expiry::At(20),
        ..SetOptions::default()
    };
    e.set(b"short", b"v", &ttl, 10).unwrap();
    set(&mut e, b"live", b"v", 10);
    assert_eq!(e.len(), 2);
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = e.scan_reaping(cursor, 10, 30, &mut out);
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(out, vec![b"live".to_vec()]);
    assert_eq!(e.len(), 1, "the expired key was not reaped");
    assert!(e.get(b"short", 0).is_none());
    e.check_invariants().unwrap();
}
