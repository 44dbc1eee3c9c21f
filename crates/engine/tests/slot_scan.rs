//! The per-slot index (`Engine::enable_slot_index`): paged slot scans under concurrent writes
//! and index upsizes, and the per-(slot, memgest) digests.
//!
//! What a pull needs (docs/design/cluster-memory.md): pages resumed "after the last key
//! returned" must return every key that existed for the whole walk, once, in scan order, while
//! keys are inserted (growing the index table, several times per walk here: it starts with two
//! buckets), updated (entries relocate) and deleted between pages. The property test drives a
//! random walk of that shape and checks exactly that, plus `check_invariants` (which recomputes
//! the index from the table) after every step.

use proptest::prelude::*;
use ringlet_engine::hash::{entry_digest, scan_order};
use ringlet_engine::*;
use ringlet_types::key_slot;
use std::collections::BTreeSet;

fn eng() -> Engine {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: 64 << 20,
        index_buckets_initial: 2,
        ..EngineConfig::default()
    })
    .unwrap();
    e.enable_slot_index();
    e
}

fn put(e: &mut Engine, k: &[u8], value_len: usize, memgest: u16) {
    e.define_memgest(MemgestId(memgest), false);
    let opts = SetOptions {
        memgest: MemgestId(memgest),
        ..SetOptions::default()
    };
    e.set(k, &vec![b'v'; value_len], &opts, 1).unwrap();
}

/// A key: tag 0 is the scanned slot's, tags 1-2 other slots, 3 untagged (any slot).
fn key(tag: u8, n: u32) -> Vec<u8> {
    match tag {
        0..=2 => format!("{{t{tag}}}k{n}").into_bytes(),
        _ => format!("free{n}").into_bytes(),
    }
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u8, u16),
    Update(u16, u16),
    Delete(u16),
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4, 1u16..300).prop_map(|(t, len)| Op::Insert(t, len)),
        2 => (any::<u16>(), 1u16..600).prop_map(|(i, len)| Op::Update(i, len)),
        2 => any::<u16>().prop_map(Op::Delete),
        1 => Just(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every key of the slot that exists from the first page to the last is returned exactly
    /// once; pages are in strictly increasing scan order; nothing of another slot appears.
    #[test]
    fn pages_under_writes_and_upsizes_see_every_key_present_throughout(
        initial in 1u32..120,
        limit in 1usize..9,
        steps in proptest::collection::vec(proptest::collection::vec(op(), 0..6), 1..60),
        heads in any::<bool>(),
    ) {
        let mut e = eng();
        let slot = key_slot(b"{t0}");
        let mut next = 0u32;
        let mut live: Vec<Vec<u8>> = Vec::new();
        for i in 0..initial {
            let k = key((i % 4) as u8, next);
            next += 1;
            put(&mut e, &k, 10, (i % 3) as u16);
            live.push(k);
        }
        // Keys of the slot present at the start; those deleted during the walk drop out.
        let mut throughout: BTreeSet<Vec<u8>> =
            live.iter().filter(|k| key_slot(k) == slot).cloned().collect();
        let mut seen: Vec<Vec<u8>> = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        let mut steps = steps.into_iter();
        // Bounded: each page either ends the walk or moves the cursor forward in scan order.
        for _ in 0..10_000 {
            let page: Vec<Vec<u8>> = if heads {
                let mut out = Vec::new();
                e.slot_scan_heads(slot, after.as_deref(), limit, &mut out);
                for (k, h) in &out {
                    prop_assert_eq!(Some(*h), e.head(k));
                }
                out.into_iter().map(|(k, _)| k).collect()
            } else {
                let mut out = Vec::new();
                e.slot_scan(slot, after.as_deref(), limit, &mut out);
                for (k, en) in &out {
                    prop_assert_eq!(Some(en.clone()), e.get(k, 0));
                }
                out.into_iter().map(|(k, _)| k).collect()
            };
            prop_assert!(page.len() <= limit);
            for k in &page {
                prop_assert_eq!(key_slot(k), slot);
                if let Some(a) = &after {
                    prop_assert_eq!(scan_order(a, k), std::cmp::Ordering::Less);
                }
                after = Some(k.clone());
                seen.push(k.clone());
            }
            if page.len() < limit {
                break;
            }
            for o in steps.next().unwrap_or_default() {
                match o {
                    Op::Insert(t, len) => {
                        let k = key(t, next);
                        next += 1;
                        put(&mut e, &k, usize::from(len), u16::from(t) % 3);
                        live.push(k);
                    }
                    Op::Update(i, len) if !live.is_empty() => {
                        let k = live[usize::from(i) % live.len()].clone();
                        put(&mut e, &k, usize::from(len), 1);
                    }
                    Op::Delete(i) if !live.is_empty() => {
                        let k = live.swap_remove(usize::from(i) % live.len());
                        e.delete(&k, None, 1).unwrap();
                        throughout.remove(&k);
                    }
                    Op::Tick => {
                        e.tick(1);
                    }
                    _ => {}
                }
            }
            e.check_invariants().map_err(TestCaseError::fail)?;
        }
        let unique: BTreeSet<Vec<u8>> = seen.iter().cloned().collect();
        prop_assert_eq!(unique.len(), seen.len(), "a key returned twice");
        let missed: Vec<_> = throughout.difference(&unique).collect();
        prop_assert!(missed.is_empty(), "missed {:?}", missed);
    }
}

/// A deterministic walk that must cross several index upsizes (the property test's cases
/// mostly do too, but nothing there asserts it).
#[test]
fn a_walk_across_upsizes_misses_nothing() {
    let mut e = eng();
    let slot = key_slot(b"{t0}");
    let mut want = BTreeSet::new();
    for n in 0..200 {
        let k = key(0, n);
        put(&mut e, &k, 20, 1);
        want.insert(k);
    }
    let upsizes_before = e.stats().upsizes;
    let mut seen = BTreeSet::new();
    let mut after: Option<Vec<u8>> = None;
    let mut next = 1000;
    for _ in 0..1000 {
        let mut page = Vec::new();
        e.slot_scan_heads(slot, after.as_deref(), 3, &mut page);
        for (k, _) in &page {
            assert!(seen.insert(k.clone()), "{k:?} twice");
            after = Some(k.clone());
        }
        if page.len() < 3 {
            break;
        }
        // 40 new keys per page, in every slot: the table grows many times during the walk.
        for t in 0..4 {
            for _ in 0..10 {
                put(&mut e, &key(t, next), 20, 1);
                next += 1;
            }
        }
    }
    assert!(
        e.stats().upsizes > upsizes_before + 2,
        "no upsize during the walk"
    );
    assert!(want.is_subset(&seen));
    e.check_invariants().unwrap();
    // slot_keys (GETKEYSINSLOT) walks the same index with a numeric cursor: every key once.
    let mut keys = Vec::new();
    let mut cursor = 0;
    for _ in 0..10_000 {
        cursor = e.slot_keys(slot, cursor, 7, &mut keys);
        if cursor == 0 {
            break;
        }
    }
    let n = keys.len();
    let keys: BTreeSet<Vec<u8>> = keys.into_iter().collect();
    assert_eq!(keys.len(), n, "slot_keys returned a key twice");
    assert_eq!(keys.len() as u64, e.slot_len(slot));
}

/// The per-(slot, memgest) digests are the XOR of `entry_digest` over the published entries,
/// filterable by memgest, and `nonempty_slots` lists exactly the slots with entries; enabling
/// the index on a loaded engine builds the same state as keeping it from the start.
#[test]
fn memgest_digests_match_a_recomputation() {
    let mut plain = Engine::new(EngineConfig {
        memory_bytes_max: 64 << 20,
        index_buckets_initial: 2,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut e = eng();
    for n in 0..300u32 {
        let k = key((n % 4) as u8, n);
        put(&mut e, &k, 8, (n % 3) as u16);
        put(&mut plain, &k, 8, (n % 3) as u16);
    }
    for n in (0..300u32).step_by(7) {
        let k = key((n % 4) as u8, n);
        e.delete(&k, None, 1).unwrap();
        plain.delete(&k, None, 1).unwrap();
    }
    plain.enable_slot_index();
    plain.check_invariants().unwrap();
    e.check_invariants().unwrap();
    let slots = e.nonempty_slots(0, 16383);
    assert_eq!(slots, plain.nonempty_slots(0, 16383));
    for slot in &slots {
        let mut all = Vec::new();
        e.slot_scan_heads(*slot, None, usize::MAX, &mut all);
        assert_eq!(all.len() as u64, e.slot_len(*slot));
        for m in 0..3u16 {
            let want = all
                .iter()
                .filter(|(_, h)| h.memgest.0 == m)
                .fold(0, |d, (k, h)| d ^ entry_digest(k, h.version, m, true));
            let got = e.slot_memgest_digest(*slot, &|x| x.0 == m);
            assert_eq!(got, want);
            assert_eq!(plain.slot_memgest_digest(*slot, &|x| x.0 == m), want);
        }
    }
    let with_keys: BTreeSet<u16> = (0..300u32)
        .filter(|n| n % 7 != 0)
        .map(|n| key_slot(&key((n % 4) as u8, n)))
        .collect();
    assert_eq!(slots, with_keys.into_iter().collect::<Vec<_>>());
    // Emptied: no slot listed, every digest zero.
    e.flush_all(2);
    assert!(e.nonempty_slots(0, 16383).is_empty());
    e.check_invariants().unwrap();
}
