//! The read-modify-write that reuses its read's lookup (`Engine::get_for_update`, then
//! `Updating::set`) against what it replaces (`Engine::get`, then
//! `Engine::set_discarding_old`): the same reads, outcomes, errors and end state over random
//! operations — TTLs kept, set, cleared and already past, live and expired entries, staged
//! versions below the write, memgests known and unknown, and evictions under a small budget
//! (where the write must look its key up again).

use proptest::prelude::*;
use ringlet_engine::*;

fn eng(memory: u64) -> Engine {
    let mut e = Engine::new(EngineConfig {
        memory_bytes_max: memory,
        index_buckets_initial: 64,
        ..EngineConfig::default()
    })
    .unwrap();
    e.define_memgest(MemgestId(1), false);
    e
}

#[derive(Clone, Debug)]
enum Op {
    /// Read `key`, write a value of `len` 8-byte words with expiry form `ttl` (0 keep, 1
    /// persist, 2 at now + 5, 3 at now: already past), memgest `m` (2 is unknown), kind.
    Update {
        k: u8,
        len: u16,
        ttl: u8,
        m: u8,
        record: bool,
    },
    /// Read, then delete through the handle's engine.
    UpdateDelete(u8),
    /// A plain write with a TTL ending at `now + ms`, so updates meet expiring entries.
    SetTtl(u8, u16, u8),
    /// A staged write (version chosen by the HLC), left unpublished: an update discards it.
    Stage(u8),
    Tick(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..40u8, 0..600u16, 0..4u8, 0..3u8, any::<bool>()).prop_map(|(k, len, ttl, m, record)| {
            Op::Update { k, len, ttl, m, record }
        }),
        1 => (0..40u8).prop_map(Op::UpdateDelete),
        2 => (0..40u8, 0..200u16, 1..20u8).prop_map(|(k, l, t)| Op::SetTtl(k, l, t)),
        1 => (0..40u8).prop_map(Op::Stage),
        1 => (1..10u8).prop_map(Op::Tick),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Both ways leave equal engines: every read, outcome and error along the way, then every
    /// key's value, version, memgest and TTL, every counter (hits, misses, keys, bytes per
    /// slot and memgest, expirations, evictions) and slot digest.
    #[test]
    fn update_equals_get_then_set(ops in proptest::collection::vec(op(), 1..300)) {
        let mut fast = eng(1 << 20);
        let mut general = eng(1 << 20);
        let mut now = 1u64;
        for op in &ops {
            match *op {
                Op::Update { k, len, ttl, m, record } => {
                    let k = key(k);
                    let opts = SetOptions {
                        memgest: MemgestId(u16::from(m)),
                        expiry: match ttl {
                            0 => Expiry::Keep,
                            1 => Expiry::Persist,
                            2 => Expiry::At(now + 5),
                            _ => Expiry::At(now),
                        },
                        kind: if record { ValueKind::Record } else { ValueKind::String },
                        ..SetOptions::default()
                    };
                    let (a_old, up) = fast.get_for_update(&k, now);
                    let b_old = general.get(&k, now);
                    prop_assert_eq!(&a_old, &b_old);
                    // The new value depends on the old one, as a handler's would.
                    let mut v = vec![len as u8; usize::from(len) * 8];
                    v.extend_from_slice(&a_old.map_or(0, |e| e.value.len()).to_le_bytes());
                    let a = up.set(&v, &opts);
                    let b = general.set_discarding_old(&k, &v, &opts, now);
                    prop_assert_eq!(a, b);
                }
                Op::UpdateDelete(k) => {
                    let k = key(k);
                    let (a_old, up) = fast.get_for_update(&k, now);
                    let b_old = general.get(&k, now);
                    prop_assert_eq!(&a_old, &b_old);
                    let a = up.into_engine().delete(&k, None, now);
                    prop_assert_eq!(a, general.delete(&k, None, now));
                }
                Op::SetTtl(k, l, t) => {
                    let (k, v) = (key(k), vec![k ^ 0x55; usize::from(l)]);
                    let o = SetOptions {
                        expiry: Expiry::At(now + u64::from(t)),
                        ..SetOptions::default()
                    };
                    prop_assert_eq!(fast.set(&k, &v, &o, now), general.set(&k, &v, &o, now));
                }
                Op::Stage(k) => {
                    let k = key(k);
                    let o = SetOptions { staged: true, ..SetOptions::default() };
                    prop_assert_eq!(fast.set(&k, b"staged", &o, now), general.set(&k, b"staged", &o, now));
                }
                Op::Tick(t) => now += u64::from(t),
            }
        }
        for k in 0..40u8 {
            let k = key(k);
            prop_assert_eq!(fast.get(&k, now), general.get(&k, now));
        }
        prop_assert_eq!(format!("{:?}", fast.stats()), format!("{:?}", general.stats()));
        for slot in 0..ringlet_types::SLOT_COUNT {
            prop_assert_eq!(fast.slot_digest(slot), general.slot_digest(slot));
        }
        fast.check_invariants().map_err(TestCaseError::fail)?;
    }
}

/// A key longer than the limit: read as missing, and the write refused as the general path
/// refuses it.
#[test]
fn an_overlong_key_is_refused_as_before() {
    let mut e = eng(1 << 20);
    let k = vec![b'k'; ringlet_types::limits::KEY_BYTES_MAX as usize + 1];
    let (old, up) = e.get_for_update(&k, 1);
    assert!(old.is_none());
    assert!(matches!(
        up.set(b"v", &SetOptions::default()),
        Err(Error::KeyTooLarge { .. })
    ));
}
