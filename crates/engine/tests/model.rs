//! Property test: random operation sequences against a simple model (a `BTreeMap` with
//! versions, tombstones and TTLs). After every operation the engine's answer must equal the
//! model's, and the engine's internal invariants (index ↔ data, checksums, accounting, digests)
//! must hold. Small keys spaces make conflicts, CAS races, re-sets after deletes and expiries
//! frequent; a tiny initial index makes upsizes happen mid-sequence.

use proptest::prelude::*;
use ringlet_engine::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    Set {
        key: u8,
        len: u16,
        version: Option<u16>,
        cond: u8,
        expiry: Option<u8>,
        keep: bool,
    },
    Get(u8),
    ReaderGet(u8),
    Delete {
        key: u8,
        version: Option<u16>,
    },
    CasLast {
        key: u8,
        len: u16,
    },
    Incr(u8, i8),
    Append(u8, u8),
    Expire(u8, Option<u8>),
    StagePublish {
        key: u8,
        len: u16,
        publish: bool,
    },
    Advance(u8),
    Tick,
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u8>(), 0u16..300, prop::option::of(any::<u16>()), 0u8..4, prop::option::of(any::<u8>()), any::<bool>())
            .prop_map(|(key, len, version, cond, expiry, keep)| Op::Set { key, len, version, cond, expiry, keep }),
        3 => any::<u8>().prop_map(Op::Get),
        2 => any::<u8>().prop_map(Op::ReaderGet),
        2 => (any::<u8>(), prop::option::of(any::<u16>())).prop_map(|(key, version)| Op::Delete { key, version }),
        1 => (any::<u8>(), 0u16..100).prop_map(|(key, len)| Op::CasLast { key, len }),
        1 => (any::<u8>(), any::<i8>()).prop_map(|(k, d)| Op::Incr(k, d)),
        1 => (any::<u8>(), any::<u8>()).prop_map(|(k, n)| Op::Append(k, n)),
        1 => (any::<u8>(), prop::option::of(any::<u8>())).prop_map(|(k, e)| Op::Expire(k, e)),
        1 => (any::<u8>(), 0u16..200, any::<bool>()).prop_map(|(key, len, publish)| Op::StagePublish { key, len, publish }),
        1 => any::<u8>().prop_map(Op::Advance),
        1 => Just(Op::Tick),
        1 => (0u8..40).prop_filter_map("rare", |x| (x == 0).then_some(Op::Flush)),
    ]
}

#[derive(Clone, Debug, PartialEq)]
struct MEntry {
    value: Vec<u8>,
    version: Version,
    expire: Option<u64>,
}

#[derive(Default)]
struct Model {
    live: BTreeMap<Vec<u8>, MEntry>,
    tomb: BTreeMap<Vec<u8>, Version>,
    summary: Version,
}

impl Model {
    fn reap(&mut self, k: &[u8], now: u64) {
        if let Some(e) = self.live.get(k) {
            if matches!(e.expire, Some(t) if t <= now) {
                let v = e.version;
                self.live.remove(k);
                let t = self.tomb.entry(k.to_vec()).or_insert(Version::ZERO);
                *t = (*t).max(v);
            }
        }
    }
    fn floor(&self, k: &[u8]) -> Version {
        let t = self.tomb.get(k).copied().unwrap_or(self.summary);
        self.live.get(k).map_or(t, |e| e.version.max(t))
    }
    fn get(&self, k: &[u8], now: u64) -> Option<&MEntry> {
        self.live
            .get(k)
            .filter(|e| !matches!(e.expire, Some(t) if t <= now))
    }
}

fn key_of(k: u8) -> Vec<u8> {
    // 24 distinct keys: collisions of operations on one key are the point.
    format!("key:{}", k % 24).into_bytes()
}

fn value_of(len: u16, salt: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(31) ^ salt) as u8)
        .collect()
}

fn explicit(v: u16, now: u64) -> Version {
    // Around the HLC's current millisecond so explicit and assigned versions interleave.
    Version::new(now.saturating_sub(2) + u64::from(v % 5), v, 7, u32::from(v))
}

fn run(ops: Vec<Op>, policy: EvictionPolicy) -> Result<(), TestCaseError> {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 16 << 20,
        index_buckets_initial: 2,
        eviction: policy,
        origin: 1,
    })
    .unwrap();
    let reader = e.reader();
    let mut m = Model::default();
    let mut now = 1_000u64;
    let mut salt = 0u64;
    let mut buf = Vec::new();
    for op in ops {
        salt += 1;
        match op {
            Op::Set {
                key,
                len,
                version,
                cond,
                expiry,
                keep,
            } => {
                let k = key_of(key);
                let value = value_of(len, salt);
                m.reap(&k, now);
                let live = m.get(&k, now).cloned();
                let condition = match cond {
                    0 => Condition::Always,
                    1 => Condition::IfAbsent,
                    2 => Condition::IfPresent,
                    _ => Condition::IfVersion(live.as_ref().map_or(Version(5), |e| e.version)),
                };
                let exp = match (expiry, keep) {
                    (_, true) => Expiry::Keep,
                    (None, false) => Expiry::Persist,
                    (Some(d), false) => Expiry::At(now + u64::from(d) * 3),
                };
                let v = version.map(|v| explicit(v, now));
                let opts = SetOptions {
                    version: v,
                    expiry: exp,
                    condition,
                    ..SetOptions::default()
                };
                let out = e.set(&k, &value, &opts, now).unwrap();
                let cond_ok = match condition {
                    Condition::Always => true,
                    Condition::IfAbsent => live.is_none(),
                    Condition::IfPresent => live.is_some(),
                    Condition::IfVersion(x) => live.as_ref().map(|e| e.version) == Some(x),
                };
                let floor = m.floor(&k);
                let ok = cond_ok && v.is_none_or(|v| v > floor);
                match out {
                    SetOutcome::Applied { version, old } => {
                        prop_assert!(ok, "applied but model says no");
                        prop_assert!(version > floor);
                        prop_assert_eq!(
                            old.map(|o| o.value),
                            live.as_ref().map(|e| e.value.clone())
                        );
                        let expire = match exp {
                            Expiry::Keep => live.as_ref().and_then(|e| e.expire),
                            Expiry::Persist => None,
                            Expiry::At(t) => Some(t),
                        };
                        if matches!(expire, Some(t) if t <= now) {
                            m.live.remove(&k);
                            m.tomb.insert(k.clone(), version);
                        } else {
                            m.live.insert(
                                k.clone(),
                                MEntry {
                                    value,
                                    version,
                                    expire,
                                },
                            );
                        }
                    }
                    SetOutcome::NotApplied { current } => {
                        prop_assert!(!ok, "not applied but model says yes");
                        prop_assert_eq!(current.map(|o| o.value), live.map(|e| e.value));
                    }
                }
            }
            Op::Get(key) => {
                let k = key_of(key);
                let got = e.get(&k, now);
                let want = m.get(&k, now);
                prop_assert_eq!(
                    got.as_ref().map(|g| (&g.value, g.version, g.expire_at_ms)),
                    want.map(|w| (&w.value, w.version, w.expire))
                );
            }
            Op::ReaderGet(key) => {
                let k = key_of(key);
                let r = reader.get(&k, now, &mut buf);
                match (r, m.get(&k, now)) {
                    (
                        ReadOutcome::Hit {
                            version,
                            expire_at_ms,
                            ..
                        },
                        Some(w),
                    ) => {
                        prop_assert_eq!(&buf, &w.value);
                        prop_assert_eq!(version, w.version);
                        prop_assert_eq!(expire_at_ms, w.expire);
                    }
                    (ReadOutcome::Miss, None) => {}
                    (r, w) => prop_assert!(false, "reader {:?} vs model {:?}", r, w),
                }
            }
            Op::Delete { key, version } => {
                let k = key_of(key);
                m.reap(&k, now);
                let v = version.map(|v| explicit(v, now));
                let floor = m.floor(&k);
                let r = e.delete(&k, v, now);
                if v.is_some_and(|v| v <= floor) {
                    prop_assert_eq!(r, Err(Error::StaleVersion));
                } else {
                    let old = r.unwrap();
                    let want = m.live.remove(&k);
                    prop_assert_eq!(old.map(|o| o.value), want.map(|w| w.value));
                    let tv = e.tombstone(&k).unwrap();
                    if let Some(v) = v {
                        prop_assert_eq!(tv, v);
                    }
                    m.tomb.insert(k.clone(), tv);
                }
            }
            Op::CasLast { key, len } => {
                let k = key_of(key);
                m.reap(&k, now);
                if let Some(cur) = m.get(&k, now).cloned() {
                    let value = value_of(len, salt);
                    let opts = SetOptions {
                        condition: Condition::IfVersion(cur.version),
                        expiry: Expiry::Keep,
                        ..SetOptions::default()
                    };
                    match e.set(&k, &value, &opts, now).unwrap() {
                        SetOutcome::Applied { version, .. } => {
                            m.live.insert(
                                k,
                                MEntry {
                                    value,
                                    version,
                                    expire: cur.expire,
                                },
                            );
                        }
                        other => prop_assert!(false, "CAS failed: {:?}", other),
                    }
                }
            }
            Op::Incr(key, d) => {
                let k = key_of(key);
                m.reap(&k, now);
                let cur = m.get(&k, now).cloned();
                let r = e.incr_by(&k, i64::from(d), now);
                let parsed = match &cur {
                    None => Some(0i64),
                    Some(c) => std::str::from_utf8(&c.value)
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .filter(|n| n.to_string().as_bytes() == c.value.as_slice()),
                };
                match parsed {
                    Some(n) => {
                        let n2 = n + i64::from(d);
                        prop_assert_eq!(r, Ok(n2));
                        let version = e.get(&k, now).unwrap().version;
                        m.live.insert(
                            k,
                            MEntry {
                                value: n2.to_string().into_bytes(),
                                version,
                                expire: cur.and_then(|c| c.expire),
                            },
                        );
                    }
                    None => prop_assert_eq!(r, Err(Error::NotInteger)),
                }
            }
            Op::Append(key, n) => {
                let k = key_of(key);
                m.reap(&k, now);
                let cur = m.get(&k, now).cloned();
                let suffix = vec![b'x'; usize::from(n)];
                let mut v = cur.as_ref().map(|c| c.value.clone()).unwrap_or_default();
                v.extend_from_slice(&suffix);
                prop_assert_eq!(e.append(&k, &suffix, now), Ok(v.len()));
                let version = e.get(&k, now).unwrap().version;
                m.live.insert(
                    k,
                    MEntry {
                        value: v,
                        version,
                        expire: cur.and_then(|c| c.expire),
                    },
                );
            }
            Op::Expire(key, d) => {
                let k = key_of(key);
                m.reap(&k, now);
                let exists = m.get(&k, now).is_some();
                let exp = match d {
                    None => Expiry::Persist,
                    Some(d) => Expiry::At(now + u64::from(d % 8)),
                };
                prop_assert_eq!(e.set_expiry(&k, exp, now), Ok(exists));
                if exists {
                    match exp {
                        Expiry::At(t) if t <= now => {
                            m.live.remove(&k);
                            m.tomb.insert(k.clone(), e.tombstone(&k).unwrap());
                        }
                        _ => {
                            let g = e.get(&k, now).unwrap();
                            let ent = m.live.get_mut(&k).unwrap();
                            ent.expire = g.expire_at_ms;
                            ent.version = g.version;
                            prop_assert_eq!(
                                ent.expire,
                                match exp {
                                    Expiry::At(t) => Some(t),
                                    _ => None,
                                }
                            );
                        }
                    }
                }
            }
            Op::StagePublish { key, len, publish } => {
                let k = key_of(key);
                m.reap(&k, now);
                let before = m.get(&k, now).cloned();
                let v = e.next_version(now);
                let value = value_of(len, salt);
                let opts = SetOptions {
                    version: Some(v),
                    staged: true,
                    ..SetOptions::default()
                };
                let staged_ok = matches!(
                    e.set(&k, &value, &opts, now).unwrap(),
                    SetOutcome::Applied { .. }
                );
                prop_assert!(staged_ok);
                // Invisible until published.
                prop_assert_eq!(
                    e.get(&k, now).map(|g| g.value),
                    before.as_ref().map(|b| b.value.clone())
                );
                let r = reader.get(&k, now, &mut buf);
                prop_assert_eq!(matches!(r, ReadOutcome::Hit { .. }), before.is_some());
                if publish {
                    prop_assert_eq!(e.publish(&k, v, now), Ok(true));
                    m.live.insert(
                        k,
                        MEntry {
                            value,
                            version: v,
                            expire: None,
                        },
                    );
                }
            }
            Op::Advance(d) => now += u64::from(d % 16),
            Op::Tick => {
                e.tick(now);
                let expired: Vec<Vec<u8>> = m
                    .live
                    .iter()
                    .filter(|(_, e)| matches!(e.expire, Some(t) if t <= now))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in expired {
                    m.reap(&k, now);
                }
            }
            Op::Flush => {
                e.flush_all(now);
                m.live.clear();
                m.tomb.clear();
                m.summary = e.tombstone_summary();
            }
        }
        if let Err(err) = e.check_invariants() {
            prop_assert!(false, "invariant: {}", err);
        }
    }
    // Every live model key is found by a full scan.
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = 0;
    for _ in 0..100_000 {
        let mut out = Vec::new();
        cursor = e.scan(cursor, 10, now, &mut out);
        seen.extend(out);
        if cursor == 0 {
            break;
        }
    }
    for (k, v) in &m.live {
        if !matches!(v.expire, Some(t) if t <= now) {
            prop_assert!(seen.contains(k), "scan missed {:?}", k);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model_clock(ops in prop::collection::vec(op(), 1..200)) {
        run(ops, EvictionPolicy::Clock)?;
    }

    #[test]
    fn engine_matches_model_s3fifo(ops in prop::collection::vec(op(), 1..200)) {
        run(ops, EvictionPolicy::S3Fifo)?;
    }
}

/// Under memory pressure (1 MiB budget, values from 0 B to 40 KiB so both slab classes and
/// large runs compete), with half the keys pinned: a read returns the last acknowledged value
/// or nothing for evictable keys, always the last value for pinned keys, and invariants hold
/// (including committed bytes ≤ budget).
fn run_pressure(
    ops: Vec<(u8, u16, bool, u8)>,
    policy: EvictionPolicy,
) -> Result<(), TestCaseError> {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 1 << 20,
        index_buckets_initial: 2,
        eviction: policy,
        origin: 1,
    })
    .unwrap();
    e.define_memgest(MemgestId(1), false);
    let reader = e.reader();
    let mut last: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut buf = Vec::new();
    for (i, (key, len, delete, touch)) in ops.into_iter().enumerate() {
        let pinned = key % 2 == 0;
        let k = format!("k{key}").into_bytes();
        // Sizes: mostly small, some medium, a few large.
        let len = match len % 10 {
            0 => usize::from(len) % 40_000,
            1 | 2 => usize::from(len) % 4_000,
            _ => usize::from(len) % 300,
        };
        if delete {
            e.delete(&k, None, 1).unwrap();
            last.remove(&k);
        } else {
            let value = value_of(len as u16, i as u64);
            let opts = SetOptions {
                memgest: MemgestId(u16::from(pinned)),
                ..SetOptions::default()
            };
            match e.set(&k, &value, &opts, 1) {
                Ok(SetOutcome::Applied { .. }) => {
                    let mut v = value;
                    v.truncate(len);
                    last.insert(k.clone(), v);
                }
                Err(Error::NoSpace) => {
                    // A refused write leaves the previous value in place.
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
        if touch % 3 == 0 {
            e.record_access(&[ringlet_engine::hash::key_hash(&k)]);
        }
        if touch % 7 == 0 {
            e.tick(1);
        }
        if let Err(err) = e.check_invariants() {
            prop_assert!(false, "invariant: {}", err);
        }
        for (k, v) in &last {
            let pinned = k[1..]
                .iter()
                .fold(0u32, |a, d| a * 10 + u32::from(d - b'0'))
                % 2
                == 0;
            match e.get(k, 1) {
                Some(g) => prop_assert_eq!(&g.value, v),
                None => prop_assert!(!pinned, "pinned key {:?} lost", k),
            }
            match reader.get(k, 1, &mut buf) {
                ReadOutcome::Hit { .. } => prop_assert_eq!(&buf, v),
                ReadOutcome::Miss => prop_assert!(!pinned),
                ReadOutcome::Retry => prop_assert!(false, "retry without a writer"),
            }
        }
    }
    if std::env::var_os("ENGINE_DEBUG").is_some() {
        let st = e.stats();
        eprintln!(
            "keys {} evictions {} committed {}",
            st.keys, st.evictions, st.committed_bytes
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]
    #[test]
    fn pressure_clock(ops in prop::collection::vec((0u8..60, any::<u16>(), prop::bool::weighted(0.1), any::<u8>()), 1..300)) {
        run_pressure(ops, EvictionPolicy::Clock)?;
    }

    #[test]
    fn pressure_s3fifo(ops in prop::collection::vec((0u8..60, any::<u16>(), prop::bool::weighted(0.1), any::<u8>()), 1..300)) {
        run_pressure(ops, EvictionPolicy::S3Fifo)?;
    }
}
