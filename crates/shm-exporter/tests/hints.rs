//! Location hints never return a wrong item (issue 13, part 2).
//!
//! A hint is a remembered `Position` (table layout word, index-entry offset). The property:
//! whatever happened since the hint was taken — the key rewritten (in place or at another
//! size), deleted, evicted, expired, the index grown by an upsize, the table flushed, the
//! slot reused by another key — and whatever position is tried (another key's hint, or
//! arbitrary numbers), `read_entry_at` either says `Stale` or returns exactly what the
//! engine's own locked read returns for that key at that moment. And a fresh hint (no write
//! since) is always answered by the direct read.
//!
//! Then the same through a real exporter and `ShmReader`: a one-sided CHASE over records
//! whose links carry hints gives the node's entries while targets are rewritten, deleted
//! and the index grows, with stale hints counted and looked up by key; and a writer thread
//! racing a reader that uses stale hints of every key never lets the reader see a value
//! that is not its key's.

use parking_lot::Mutex;
use proptest::prelude::*;
use ringlet_engine::hash::key_hash;
use ringlet_engine::read::{
    locate_entry, locate_position, locate_position_by_tag, read_entry_at, read_entry_at_index,
    read_entry_direct, Direct, Position, Stale,
};
use ringlet_engine::{
    Engine, EngineConfig, EvictionPolicy, Expiry, MemgestId, ReadOutcome, SetOptions, ValueKind,
};
use ringlet_record::chase::Chase;
use ringlet_record::{Field, Hint, Link, Record};
use ringlet_shm::testkit::{check_value, make_value};
use ringlet_shm::ShmReader;
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const EVICTABLE: MemgestId = MemgestId(1);

/// A walk's time bound far beyond any machine's slowness: the tests compare whole walks
/// (no timing assertion; the default 100 ms could cut a walk short on a loaded machine).
const LONG: std::time::Duration = std::time::Duration::from_secs(600);

fn engine(memory: u64, buckets: u32) -> Engine {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: memory,
        index_buckets_initial: buckets,
        eviction: EvictionPolicy::Clock,
        origin: 1,
    })
    .unwrap();
    e.define_memgest(EVICTABLE, true);
    e
}

#[derive(Clone, Debug)]
enum Op {
    /// Write key `k` with a value of `len` bytes (counter `n`), optionally with a TTL that
    /// expires at `now + ttl`.
    Set {
        k: u8,
        len: u16,
        ttl: Option<u8>,
    },
    Del {
        k: u8,
    },
    /// Remember where key `k` is now (a hint).
    Hint {
        k: u8,
    },
    /// Advance the clock and run maintenance (expiry, migration steps, compaction).
    Tick {
        ms: u8,
    },
    Flush,
    /// Try hint `h` (by index among those taken) for key `k`.
    Read {
        h: u16,
        k: u8,
    },
    /// Try an arbitrary position for key `k`.
    Garbage {
        layout: u64,
        entry: u64,
        data: Option<(u32, u32, u16)>,
        k: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..40, 1u16..3000, prop::option::weighted(0.15, 1u8..50))
            .prop_map(|(k, len, ttl)| Op::Set { k, len, ttl }),
        2 => (0u8..40).prop_map(|k| Op::Del { k }),
        4 => (0u8..40).prop_map(|k| Op::Hint { k }),
        1 => (0u8..60).prop_map(|ms| Op::Tick { ms }),
        1 => Just(Op::Flush),
        6 => (any::<u16>(), 0u8..40).prop_map(|(h, k)| Op::Read { h, k }),
        1 => (
            any::<u64>(),
            any::<u64>(),
            prop::option::of((any::<u32>(), any::<u32>(), any::<u16>())),
            0u8..40
        )
            .prop_map(|(layout, entry, data, k)| Op::Garbage { layout, entry, data, k }),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// `read_entry_at(key, pos)` agrees with the engine's locked read, or is stale; and so do
/// its two halves: the read straight at the data entry (`read_entry_direct`, if the position
/// names one) and the read at the index entry (`read_entry_at_index`). True if `read_entry_at`
/// answered.
fn check_at(e: &Engine, k: &[u8], pos: Position, now: u64) -> Result<bool, TestCaseError> {
    let view = e.reader().view();
    let hash = key_hash(k);
    if let Some(d) = pos.data {
        check_read(e, k, now, |out| {
            read_entry_direct(&view, k, hash, d, now, None, out)
        })?;
    }
    check_read(e, k, now, |out| {
        read_entry_at_index(&view, k, hash, pos, now, None, out)
    })?;
    check_read(e, k, now, |out| {
        read_entry_at(&view, k, hash, pos, now, None, out)
    })
}

/// Whether `read_direct` answers and is right (see [`check_at`]).
fn check_direct(e: &Engine, k: &[u8], d: Direct, now: u64) -> Result<bool, TestCaseError> {
    let view = e.reader().view();
    check_read(e, k, now, |out| {
        read_entry_direct(&view, k, key_hash(k), d, now, None, out)
    })
}

/// One read's answer against the engine's locked read: equal, or stale.
fn check_read(
    e: &Engine,
    k: &[u8],
    now: u64,
    read: impl FnOnce(&mut Vec<u8>) -> Result<ReadOutcome, Stale>,
) -> Result<bool, TestCaseError> {
    let mut out = Vec::new();
    let got = read(&mut out);
    let truth = e.get(k, now);
    match got {
        Err(_) => Ok(false),
        Ok(ReadOutcome::Hit { version, kind, .. }) => {
            let t = truth.ok_or_else(|| TestCaseError::fail("hint hit on an absent key"))?;
            prop_assert_eq!(&out[..], &t.value[..], "value of {:?}", k);
            prop_assert_eq!(version, t.version);
            prop_assert_eq!(kind, t.kind);
            prop_assert_eq!(check_value(k, &out).is_ok(), true);
            Ok(true)
        }
        Ok(ReadOutcome::Miss) => {
            prop_assert!(truth.is_none(), "hint said expired, engine has {:?}", k);
            Ok(true)
        }
        Ok(ReadOutcome::Retry) => Err(TestCaseError::fail("a hinted read never retries")),
    }
}

fn set(e: &mut Engine, k: &[u8], v: &[u8], now: u64) {
    let opts = SetOptions {
        memgest: EVICTABLE,
        ..SetOptions::default()
    };
    e.set(k, v, &opts, now).expect("set");
}

fn position_of(e: &Engine, k: &[u8]) -> Position {
    let mut out = Vec::new();
    let (_, pos) = locate_entry(&e.reader().view(), k, key_hash(k), 0, None, &mut out);
    pos.expect("present")
}

/// The case the live bit exists for: after a rewrite the old image is still intact at its
/// old place (freed, not yet reused), so its checksum still matches the hint; the read
/// straight at it must still say stale, never return the superseded value. Same after a
/// delete, and after a flush. (Remove `mark_dead` from the engine and this fails.)
#[test]
fn a_superseded_image_is_never_read_at_its_data_hint() {
    let mut e = engine(8 << 20, 64);
    let k = b"target".to_vec();
    let d = |e: &Engine, k: &[u8]| position_of(e, k).data.expect("data part");
    let direct = |e: &Engine, k: &[u8], d: Direct| {
        let mut out = Vec::new();
        let r = read_entry_direct(&e.reader().view(), k, key_hash(k), d, 0, None, &mut out);
        (r, out)
    };
    set(&mut e, &k, &make_value(&k, 1, 100), 0);
    let d1 = d(&e, &k);
    assert!(matches!(direct(&e, &k, d1).0, Ok(ReadOutcome::Hit { .. })));
    // Rewritten at another size (another slot): the old image's bytes are unchanged but
    // for the live bit.
    set(&mut e, &k, &make_value(&k, 2, 3000), 0);
    assert_eq!(direct(&e, &k, d1).0, Err(Stale::Entry));
    let d2 = d(&e, &k);
    assert_ne!(d1.location, d2.location);
    let (r, out) = direct(&e, &k, d2);
    assert!(matches!(r, Ok(ReadOutcome::Hit { .. })));
    assert_eq!(out, e.get(&k, 0).unwrap().value);
    // Rewritten at the same size: a new slot too (staged before the old is freed).
    set(&mut e, &k, &make_value(&k, 3, 3000), 0);
    assert_eq!(direct(&e, &k, d2).0, Err(Stale::Entry));
    let d3 = d(&e, &k);
    e.delete(&k, None, 0).expect("delete");
    assert_eq!(direct(&e, &k, d3).0, Err(Stale::Entry));
    set(&mut e, &k, &make_value(&k, 4, 100), 0);
    let d4 = d(&e, &k);
    e.flush_all(0);
    assert_eq!(direct(&e, &k, d4).0, Err(Stale::Entry));
    e.check_invariants().unwrap();
}

/// A data hint names the entry, not the index: it survives the index growing (which stales
/// every index-position hint), the loader's case (45% of a chunked load's hints went stale).
#[test]
fn data_hints_survive_index_growth() {
    let mut e = engine(64 << 20, 1);
    let k = b"first".to_vec();
    set(&mut e, &k, &make_value(&k, 1, 64), 0);
    let p = position_of(&e, &k);
    for i in 0..20_000u32 {
        let o = format!("other:{i}").into_bytes();
        set(&mut e, &o, &make_value(&o, 1, 32), 0);
    }
    e.tick(1);
    let view = e.reader().view();
    let mut out = Vec::new();
    let h = key_hash(&k);
    assert_eq!(
        read_entry_at_index(&view, &k, h, p, 0, None, &mut out),
        Err(Stale::Table)
    );
    let r = read_entry_direct(&view, &k, h, p.data.unwrap(), 0, None, &mut out);
    assert!(matches!(r, Ok(ReadOutcome::Hit { .. })), "{r:?}");
    assert_eq!(out, e.get(&k, 0).unwrap().value);
    assert!(matches!(
        read_entry_at(&view, &k, h, p, 0, None, &mut out),
        Ok(ReadOutcome::Hit { .. })
    ));
    e.check_invariants().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_stale_hint_never_returns_a_wrong_item(ops in prop::collection::vec(op(), 1..400)) {
        // 2 MiB: values up to 3 KB over 40 keys plus upsizes from one bucket make the
        // engine evict, grow and compact within a few hundred operations.
        let mut e = engine(2 << 20, 1);
        let mut now = 1_000u64;
        let mut counter = 0u64;
        let mut hints: Vec<(Vec<u8>, Position)> = Vec::new();
        for op in ops {
            match op {
                Op::Set { k, len, ttl } => {
                    counter += 1;
                    // Most keys evictable (eviction is one of the ways a hint goes stale);
                    // every fourth in the `none` memgest, whose hints a record keeps in
                    // flag 4 (no memgest in it).
                    let memgest = if k % 4 == 0 { MemgestId::NONE } else { EVICTABLE };
                    let k = key(k);
                    let v = make_value(&k, counter, usize::from(len).max(16));
                    let opts = SetOptions {
                        memgest,
                        expiry: ttl.map_or(Expiry::Persist, |t| Expiry::At(now + u64::from(t))),
                        ..SetOptions::default()
                    };
                    let _ = e.set(&k, &v, &opts, now);
                }
                Op::Del { k } => {
                    let _ = e.delete(&key(k), None, now);
                }
                Op::Hint { k } => {
                    let k = key(k);
                    let mut out = Vec::new();
                    let view = e.reader().view();
                    let (r, pos) = locate_entry(&view, &k, key_hash(&k), now, None, &mut out);
                    if let (ReadOutcome::Hit { .. }, Some(pos)) = (r, pos) {
                        // The writers' position (no copy, no checksum) is the reader's.
                        prop_assert_eq!(locate_position(&view, &k, key_hash(&k)), Some(pos));
                        // The bulk filler's (the tag alone): right, or another key's entry
                        // with the same tag, which every read refuses (checked, never wrong).
                        let by_tag = locate_position_by_tag(&view, key_hash(&k))
                            .ok_or_else(|| TestCaseError::fail("present key, no tag match"))?;
                        let answered = check_at(&e, &k, by_tag, now)?;
                        prop_assert!(answered || by_tag != pos, "the key's own entry refused");
                        // A fresh hint is answered by the direct read, straight at the data
                        // entry too.
                        prop_assert!(check_at(&e, &k, pos, now)?, "fresh hint refused");
                        let d = pos.data.ok_or_else(|| TestCaseError::fail("no data part"))?;
                        prop_assert!(check_direct(&e, &k, d, now)?, "fresh data hint refused");
                        // Kept as a record keeps it: a single node's hint in flag 4 (session
                        // 15: the engine's real table words and entry offsets, not only the
                        // record tests' generated ones), read back as the same position;
                        // the reads below use the decoded one.
                        let pos = stored(&k, pos)?;
                        hints.push((k, pos));
                    }
                }
                Op::Tick { ms } => {
                    now += u64::from(ms);
                    e.tick(now);
                }
                Op::Flush => e.flush_all(now),
                Op::Read { h, k } => {
                    if hints.is_empty() {
                        continue;
                    }
                    let (hk, pos) = hints[usize::from(h) % hints.len()].clone();
                    // Its own key, and another key (a hint stored in the wrong link).
                    check_at(&e, &hk, pos, now)?;
                    check_at(&e, &key(k), pos, now)?;
                }
                Op::Garbage { layout, entry, data, k } => {
                    let data = data.map(|(location, crc, memgest)| Direct { location, crc, memgest });
                    check_at(&e, &key(k), Position { layout, entry, data }, now)?;
                    // A real table word with an arbitrary entry offset, and a data location
                    // near the data actually written (entries start in the second 64 KiB
                    // page) with an arbitrary or a real checksum.
                    if let Some((_, p)) = hints.last() {
                        let near = data.map(|d| Direct {
                            location: 8192 + d.location % 65536,
                            ..p.data.unwrap_or(d)
                        });
                        let pos = Position {
                            layout: p.layout,
                            entry: entry % (1 << 24),
                            data: near,
                        };
                        check_at(&e, &key(k), pos, now)?;
                        if let (Some(n), Some(d)) = (near, data) {
                            check_direct(&e, &key(k), Direct { crc: d.crc, ..n }, now)?;
                        }
                    }
                }
            }
        }
    }
}

/// `pos` as a link to `k` stores it in a record and reads it back: the hint flag a single
/// node writes (4, "local") and the same position after the round trip.
fn stored(k: &[u8], pos: Position) -> Result<Position, TestCaseError> {
    let mut r = Record::new();
    r.insert(
        b"l".to_vec(),
        Field::Link(Link {
            target: k.to_vec(),
            hint: Some(ringlet_shm::chase::hint_at(pos, 0, 0)),
        }),
    );
    let b = r.encode();
    // | version | count | name len | 'l' | tag | target len | target | hint flag |
    // (flag 3 keeps a hint with a memgest: the local form has none)
    let want = if pos.data.is_some_and(|d| d.memgest == 0) {
        4u8
    } else {
        3
    };
    prop_assert_eq!(b.get(6 + k.len()), Some(&want), "hint flag: {:?}", b);
    let back = Record::decode(&b).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let Some(Field::Link(Link { hint: Some(h), .. })) = back.get(b"l") else {
        return Err(TestCaseError::fail("no hint after decode"));
    };
    let p = ringlet_shm::chase::position(h);
    prop_assert_eq!(p, pos);
    Ok(p)
}

/// An engine with `buckets` initial index buckets behind a real exporter.
fn node(
    name: &str,
    memory: u64,
    buckets: u32,
) -> (Arc<Mutex<Engine>>, Exporter, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("ringlet-hints-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let engine = Arc::new(Mutex::new(engine(memory, buckets)));
    let x = Exporter::spawn(engine.clone(), ExporterConfig::new(&path)).unwrap();
    (engine, x, path)
}

fn hint_of(e: &Engine, k: &[u8]) -> Option<Hint> {
    let mut out = Vec::new();
    let (r, pos) = locate_entry(&e.reader().view(), k, key_hash(k), 0, None, &mut out);
    match (r, pos) {
        (ReadOutcome::Hit { .. }, Some(p)) => Some(ringlet_shm::chase::hint_at(p, 0, 0)),
        _ => None,
    }
}

fn put_record(e: &mut Engine, k: &[u8], r: &Record) {
    let opts = SetOptions {
        kind: ValueKind::Record,
        ..SetOptions::default()
    };
    e.set(k, &r.encode(), &opts, 1).unwrap();
}

/// The node's CHASE on the same engine (the walk the server runs, under the lock).
fn node_chase(e: &Engine, links: &[Vec<u8>], depth: u32) -> ringlet_record::chase::ChaseReply {
    let mut walk = Chase::new(b"p:0".to_vec(), links.to_vec(), depth, 100_000, None).unwrap();
    loop {
        let batch = walk.next_batch();
        if batch.is_empty() {
            break;
        }
        for k in &batch {
            match e.get(k, 1) {
                Some(x) if x.kind == ValueKind::Record => walk.feed_encoded(k, Some(&x.value)),
                _ => walk.feed_encoded(k, None),
            }
        }
    }
    walk.finish()
}

#[test]
fn one_sided_chase_follows_hints_and_survives_stale_ones() {
    // 256 buckets hold the graph without an upsize; the filler below forces several.
    let (e, _x, path) = node("chase", 64 << 20, 256);
    // p:0 -> reviews r:0..r:49 (a list), each review -> author u:(i % 10).
    {
        let mut g = e.lock();
        for i in 0..10 {
            let mut u = Record::new();
            u.insert(
                b"name".to_vec(),
                Field::Bytes(format!("user{i}").into_bytes()),
            );
            put_record(&mut g, format!("u:{i}").as_bytes(), &u);
        }
        for i in 0..50 {
            let a = format!("u:{}", i % 10);
            let mut r = Record::new();
            r.insert(
                b"stars".to_vec(),
                Field::Bytes(format!("{}", i % 5).into_bytes()),
            );
            r.insert(
                b"author".to_vec(),
                Field::Link(Link {
                    hint: hint_of(&g, a.as_bytes()),
                    target: a.into_bytes(),
                }),
            );
            put_record(&mut g, format!("r:{i}").as_bytes(), &r);
        }
        let mut p = Record::new();
        p.insert(b"title".to_vec(), Field::Bytes(b"lamp".to_vec()));
        let reviews = (0..50)
            .map(|i| {
                let t = format!("r:{i}");
                Link {
                    hint: hint_of(&g, t.as_bytes()),
                    target: t.into_bytes(),
                }
            })
            .collect();
        p.insert(b"reviews".to_vec(), Field::Links(reviews));
        put_record(&mut g, b"p:0", &p);
    }
    let links = vec![b"reviews".to_vec(), b"author".to_vec()];
    let mut r = ShmReader::connect(&path).unwrap();
    let walk = || Chase::new(b"p:0".to_vec(), links.clone(), 2, 100_000, None).unwrap();

    let got = r.chase_within(walk(), &links, LONG).unwrap();
    assert_eq!(got, node_chase(&e.lock(), &links, 2));
    assert_eq!(got.entries.len(), 1 + 50 + 10);
    let s = r.stats();
    // Every hop had a fresh hint: 50 reviews and 10 authors read directly (the root has
    // no link, so it is one missing hint and one lookup).
    // ... each straight at the target's data entry (the hints are fresh).
    assert_eq!(s.hint_direct_hits, 60, "{s:?}");
    assert_eq!(
        (s.hint_hits, s.hint_missing, s.hint_lookups),
        (60, 1, 1),
        "{s:?}"
    );

    // Stale them: rewrite reviews at another size (same entry, new bytes), delete some
    // authors, then grow the index far past its size (every table position changes).
    {
        let mut g = e.lock();
        for i in (0..50).step_by(2) {
            let mut rv = Record::new();
            rv.insert(b"stars".to_vec(), Field::Bytes(vec![b'9'; 400]));
            rv.insert(
                b"author".to_vec(),
                Field::Link(Link::to(format!("u:{}", i % 10))),
            );
            put_record(&mut g, format!("r:{i}").as_bytes(), &rv);
        }
        for i in [3, 7] {
            g.delete(format!("u:{i}").as_bytes(), None, 1).unwrap();
        }
        for i in 0..20_000 {
            let k = format!("filler:{i}");
            g.set(k.as_bytes(), b"x", &SetOptions::default(), 1)
                .unwrap();
        }
        for t in 0..10_000 {
            if !g.tick(2 + t).upsize_in_progress {
                break;
            }
        }
    }
    let before = r.stats();
    let got = r.chase_within(walk(), &links, LONG).unwrap();
    assert_eq!(got, node_chase(&e.lock(), &links, 2));
    assert_eq!(got.entries.len(), 1 + 50 + 8);
    let s = r.stats();
    assert!(s.hint_stale_table > before.hint_stale_table, "{s:?}");
    // The 25 reviews not rewritten still hit: their hints name the data entry too, which
    // the index growing does not move (the rewritten ones are stale both ways).
    assert!(
        s.hint_hits >= before.hint_hits + 25,
        "untouched targets read at their data hints: {s:?}"
    );
    assert_eq!(
        s.hint_direct_hits - before.hint_direct_hits,
        s.hint_hits + s.hint_cache_hits - before.hint_hits - before.hint_cache_hits,
        "after the growth only the data part can answer: {s:?}"
    );
    // The lookups were remembered: the next walk reads at those positions (the root and the
    // 25 rewritten reviews; the two deleted authors are looked up again, and missed).
    let got = r.chase_within(walk(), &links, LONG).unwrap();
    assert_eq!(got, node_chase(&e.lock(), &links, 2));
    let s2 = r.stats();
    assert!(s2.hint_cache_hits >= s.hint_cache_hits + 26, "{s2:?}");
    assert!(s2.hint_lookups <= s.hint_lookups + 2, "{s2:?}");
}

#[test]
fn racing_writer_never_shows_a_hinted_reader_another_keys_value() {
    let (e, _x, path) = node("race", 8 << 20, 1);
    let keys: Vec<Vec<u8>> = (0..64).map(|i| format!("k{i}").into_bytes()).collect();
    {
        let mut g = e.lock();
        for (i, k) in keys.iter().enumerate() {
            g.set(k, &make_value(k, i as u64, 32), &SetOptions::default(), 1)
                .unwrap();
        }
    }
    let hints: Vec<Position> = keys
        .iter()
        .map(|k| {
            let h = hint_of(&e.lock(), k).unwrap();
            ringlet_shm::chase::position(&h)
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (e, keys, stop) = (e.clone(), keys.clone(), stop.clone());
        std::thread::spawn(move || {
            // Bounded: 20,000 writes, sizes cycling so entries move between size classes,
            // deletes and re-inserts so index entries are freed and reused by other keys.
            for n in 0..20_000u64 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let k = &keys[(n * 7 % keys.len() as u64) as usize];
                let mut g = e.lock();
                if n % 5 == 0 {
                    let _ = g.delete(k, None, 1);
                } else {
                    let len = 16 + (n % 13) as usize * 97;
                    let _ = g.set(k, &make_value(k, n, len), &SetOptions::default(), 1);
                }
            }
        })
    };
    let mut r = ShmReader::connect(&path).unwrap();
    let mut out = Vec::new();
    let mut reads = 0u64;
    // Bounded: 40,000 hinted reads, each with a hint that may be its key's or another's.
    for n in 0..40_000usize {
        let k = &keys[n % keys.len()];
        let hint = hints[(n * 31 + n / 7) % hints.len()];
        if let Some((_, kind)) = r.get_hinted(k, Some(hint), &mut out).unwrap() {
            assert_eq!(kind, ValueKind::String);
            assert!(
                check_value(k, &out).is_ok(),
                "read another key's value for {k:?}"
            );
            reads += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let s = r.stats();
    assert!(reads > 0);
    assert!(s.hint_stale_entry + s.hint_stale_table > 0, "{s:?}");
}
