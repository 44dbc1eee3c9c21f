//! Entry point for fuzzing operation streams (the cargo-fuzz target in `fuzz/` is a thin
//! wrapper; `cargo test` runs the same function over random bytes).
//!
//! Bytes decode into a stream of engine operations on a small key space, with sizes up to a
//! few KiB and a small memory budget so that eviction, index growth and compaction all run.
//! After every operation the engine's invariants are checked and the lock-free reader must
//! agree with the writer's view. Any panic or mismatch is a bug.

use crate::{
    Condition, Engine, EngineConfig, EvictionPolicy, Expiry, MemgestId, ReadOutcome, SetOptions,
    Version,
};

/// Decode `data` into operations and run them; panics on any inconsistency.
pub fn run_ops(data: &[u8]) {
    let mut it = data.iter().copied();
    let mut next = move || it.next();
    let policy = if next().unwrap_or(0) & 1 == 0 {
        EvictionPolicy::Clock
    } else {
        EvictionPolicy::S3Fifo
    };
    let mut e = match Engine::new(EngineConfig {
        memory_bytes_max: 1 << 20,
        index_buckets_initial: 1,
        eviction: policy,
        origin: 9,
    }) {
        Ok(e) => e,
        Err(_) => return,
    };
    e.define_memgest(MemgestId(1), false);
    let reader = e.reader();
    let mut now = 1_000u64;
    let mut buf = Vec::new();
    // Bounded by the input length: every iteration consumes at least one byte.
    while let Some(op) = next() {
        let k = next().unwrap_or(0);
        let key = format!("f{}", k % 32).into_bytes();
        let arg = u16::from(next().unwrap_or(0)) << 8 | u16::from(next().unwrap_or(0));
        match op % 12 {
            0..=3 => {
                let len = match op >> 6 {
                    0 => usize::from(arg % 64),
                    1 => usize::from(arg % 512),
                    2 => usize::from(arg % 4096),
                    _ => usize::from(arg) % 20_000,
                };
                let value = vec![k; len];
                let opts = SetOptions {
                    version: (op & 0x10 != 0).then(|| Version::new(now, arg, 3, 0)),
                    memgest: MemgestId(u16::from(k % 3 == 0)),
                    expiry: match (op >> 2) % 4 {
                        0 => Expiry::Keep,
                        1 => Expiry::At(now + u64::from(arg % 50)),
                        _ => Expiry::Persist,
                    },
                    condition: match arg % 5 {
                        0 => Condition::IfAbsent,
                        1 => Condition::IfPresent,
                        _ => Condition::Always,
                    },
                    staged: op & 0x20 != 0,
                    kind: if op & 0x40 != 0 {
                        ringlet_types::ValueKind::Record
                    } else {
                        ringlet_types::ValueKind::String
                    },
                };
                if let Ok(crate::SetOutcome::Applied { version, .. }) =
                    e.set(&key, &value, &opts, now)
                {
                    if opts.staged {
                        let _ = e.publish(&key, version, now);
                    }
                }
            }
            4 => {
                let _ = e.delete(&key, None, now);
            }
            5 => {
                let _ = e.incr_by(&key, i64::from(arg as i16), now);
            }
            6 => {
                let _ = e.append(&key, &[b'a'; 7], now);
            }
            7 => {
                let _ = e.set_range(&key, usize::from(arg % 300), b"xyz", now);
            }
            8 => {
                let _ = e.set_expiry(&key, Expiry::At(now + u64::from(arg % 20)), now);
            }
            9 => {
                now += u64::from(arg % 30);
                e.tick(now);
            }
            10 => {
                e.record_access(&[crate::hash::key_hash(&key)]);
                let mut out = Vec::new();
                e.scan(u64::from(arg), 5, now, &mut out);
            }
            _ => {
                if arg % 50 == 0 {
                    e.flush_all(now);
                }
            }
        }
        if let Err(err) = e.check_invariants() {
            panic!("invariant broken: {err}");
        }
        let want = e.get(&key, now);
        match (reader.get(&key, now, &mut buf), want) {
            (ReadOutcome::Hit { version, .. }, Some(w)) => {
                assert_eq!(buf, w.value, "reader value differs");
                assert_eq!(version, w.version, "reader version differs");
            }
            (ReadOutcome::Miss, None) => {}
            (r, w) => panic!("reader {r:?} vs writer {w:?}"),
        }
    }
}
