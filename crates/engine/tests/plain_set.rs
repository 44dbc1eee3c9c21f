//! The plain-SET fast path (`Engine::set_plain_hashed`: one hash, one lookup) against the
//! general path it shortcuts (`Engine::set_discarding_old` with default options), and entry
//! images of every length around the 8-byte unit written by both paths and read back by the
//! checking reader.

use proptest::prelude::*;
use ringlet_engine::hash::key_hash;
use ringlet_engine::*;

fn eng(memory: u64) -> Engine {
    Engine::new(EngineConfig {
        memory_bytes_max: memory,
        index_buckets_initial: 64,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// Every image length around the 8-byte unit: key 1..=17 bytes, value 0..=40, through the
/// fast path, the general path and with the TTL word, each overwriting the previous one. The
/// reader recomputes the checksum of what it copied and answers `Retry` on a mismatch.
#[test]
fn entry_images_of_every_length_read_back() {
    let mut e = eng(64 << 20);
    let r = e.reader();
    let ttl = SetOptions {
        expiry: Expiry::At(1 << 40),
        ..SetOptions::default()
    };
    for kl in 1..=17usize {
        for vl in 0..=40usize {
            let key: Vec<u8> = (0..kl).map(|i| b'a' + (i % 26) as u8).collect();
            let value: Vec<u8> = (0..vl).map(|i| (i * 7 + kl) as u8).collect();
            for (form, opts) in [
                ("plain", None),
                ("general", Some(SetOptions::default())),
                ("ttl", Some(ttl)),
            ] {
                match opts {
                    None => e.set_plain_hashed(&key, key_hash(&key), &value, 1).unwrap(),
                    Some(o) => {
                        e.set(&key, &value, &o, 1).unwrap();
                    }
                }
                let mut out = Vec::new();
                let got = r.get(&key, 1, &mut out);
                assert!(
                    matches!(got, ReadOutcome::Hit { .. }),
                    "{form} key {kl} B value {vl} B: {got:?}"
                );
                assert_eq!(out, value, "{form} key {kl} B value {vl} B");
                assert_eq!(e.get(&key, 1).unwrap().value, value);
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// A plain SET (fast path on one engine, general path on the other).
    Set(u8, u16),
    /// SET with a TTL ending at `now + ms` (both engines: general path), so later plain SETs
    /// meet live and expired entries.
    SetTtl(u8, u16, u8),
    Del(u8),
    /// Let time pass.
    Tick(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..40u8, 0..600u16).prop_map(|(k, l)| Op::Set(k, l)),
        2 => (0..40u8, 0..600u16, 1..20u8).prop_map(|(k, l, t)| Op::SetTtl(k, l, t)),
        1 => (0..40u8).prop_map(Op::Del),
        1 => (1..10u8).prop_map(Op::Tick),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The same operations through the fast path and through the general path leave equal
    /// engines: every key's value, version and TTL, and every counter (keys, bytes per slot
    /// and memgest, expirations, evictions, tombstones) and slot digest. A 1 MiB budget makes
    /// writes evict, which is where the fast path must look its key up again.
    #[test]
    fn plain_set_equals_the_general_path(ops in proptest::collection::vec(op(), 1..300)) {
        let mut fast = eng(1 << 20);
        let mut general = eng(1 << 20);
        let mut now = 1u64;
        for op in &ops {
            match *op {
                Op::Set(k, l) => {
                    let (k, v) = (key(k), vec![k; usize::from(l) * 8]);
                    let a = fast.set_plain_hashed(&k, key_hash(&k), &v, now);
                    let b = general
                        .set_discarding_old(&k, &v, &SetOptions::default(), now)
                        .map(|_| ());
                    prop_assert_eq!(a, b);
                }
                Op::SetTtl(k, l, t) => {
                    let (k, v) = (key(k), vec![k ^ 0x55; usize::from(l)]);
                    let o = SetOptions {
                        expiry: Expiry::At(now + u64::from(t)),
                        ..SetOptions::default()
                    };
                    prop_assert_eq!(fast.set(&k, &v, &o, now), general.set(&k, &v, &o, now));
                }
                Op::Del(k) => {
                    let k = key(k);
                    prop_assert_eq!(fast.delete(&k, None, now), general.delete(&k, None, now));
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
    }
}
