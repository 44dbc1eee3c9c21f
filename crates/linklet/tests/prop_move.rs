//! A planned move between two Linklets in one process, with writers and a reader running the
//! whole time (LInK §4.2 "Resharding support": values relocate, so resharding loses no state).
//!
//! How: a shared "router" flag says which Linklet owns the moving range. Writers increment
//! counters through it and retry on `Moving` / `NotOwner` exactly as a router library would; a
//! reader checks each counter never goes backwards. A mover thread runs the protocol
//! (`begin_import`, `export_range`, `import_batch`*, then `commit_import` + flip the router +
//! `finish_export`, or `abort_import` + `abort_export` part way through). Afterwards every
//! counter at its owner equals its initial value plus the increments that were acknowledged:
//! no acknowledged update was lost and no refused one was applied. Proptest picks the keys, the
//! range, the batch size, the write load and whether and when the move aborts.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use ringlet_linklet::{Config, Error, Linklet, LossReason, Slot};
use ringlet_types::key_slot;

type L = Linklet<String, u64>;

/// Retries one writer makes before declaring a livelock (a bug): moves here take milliseconds.
const RETRIES_MAX: u32 = 10_000_000;

fn keys(range: &RangeInclusive<Slot>, inside: usize, outside: usize) -> Vec<String> {
    let mut ins: Vec<String> = (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| range.contains(&key_slot(k.as_bytes())))
        .take(inside)
        .collect();
    let outs = (0..)
        .map(|i| format!("o{i}"))
        .filter(|k| !range.contains(&key_slot(k.as_bytes())))
        .take(outside);
    ins.extend(outs);
    ins
}

struct Router {
    source: L,
    target: L,
    range: RangeInclusive<Slot>,
    /// Set once the target serves the range. Monotonic.
    moved: AtomicBool,
}

impl Router {
    fn owner(&self, key: &str) -> &L {
        if self.moved.load(Ordering::Acquire) && self.range.contains(&key_slot(key.as_bytes())) {
            &self.target
        } else {
            &self.source
        }
    }
}

fn run(
    first: Slot,
    len: u16,
    inside: usize,
    outside: usize,
    batch_bytes: usize,
    writes: usize,
    abort_after: Option<usize>,
) {
    let range = first..=first.saturating_add(len).min(16383);
    let keys = keys(&range, inside, outside);
    let source = L::new(Config {
        move_batch_bytes: batch_bytes,
        ..Config::default()
    })
    .unwrap();
    let target = L::new(Config {
        slots_owned: vec![],
        ..Config::default()
    })
    .unwrap();
    for (i, k) in keys.iter().enumerate() {
        source.insert(k.clone(), i as u64 * 1000, i as u64).unwrap();
    }
    let losses = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&losses);
    target
        .on_state_loss(move |l| sink.lock().unwrap().push(l.clone()))
        .unwrap();
    let router = Router {
        source,
        target,
        range: range.clone(),
        moved: AtomicBool::new(false),
    };
    let done = AtomicBool::new(false);
    let acked: Vec<Mutex<u64>> = keys.iter().map(|_| Mutex::new(0)).collect();

    std::thread::scope(|s| {
        for w in 0..2 {
            let (router, keys, acked) = (&router, &keys, &acked);
            s.spawn(move || {
                for n in 0..writes {
                    let i = (n * 7 + w * 3) % keys.len();
                    let mut retries = 0;
                    loop {
                        match router.owner(&keys[i]).update(&keys[i], |v| *v += 1) {
                            Ok(Some(())) => break,
                            Ok(None) => panic!("{} vanished", keys[i]),
                            Err(Error::Moving { .. } | Error::NotOwner { .. }) => {
                                retries += 1;
                                assert!(retries < RETRIES_MAX, "writer livelocked");
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("unexpected {e:?}"),
                        }
                    }
                    *acked[i].lock().unwrap() += 1;
                }
            });
        }
        let (router, keys, done_ref) = (&router, &keys, &done);
        s.spawn(move || {
            let mut last: HashMap<&str, u64> = HashMap::new();
            // Bounded by the writers' progress: the mover sets `done` when the move ends.
            while !done_ref.load(Ordering::Acquire) {
                for k in keys {
                    match router.owner(k).read(k, |v| *v) {
                        Ok(Some(v)) => {
                            let prev = last.insert(k, v).unwrap_or(0);
                            assert!(v >= prev, "{k} went back from {prev} to {v}");
                        }
                        Ok(None) => panic!("{k} vanished"),
                        Err(Error::NotOwner { .. }) => {}
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                }
            }
        });
        // The mover.
        let r = &router;
        r.target.begin_import(range.clone()).unwrap();
        let export = r.source.export_range(range.clone()).unwrap();
        let mut aborted = false;
        for (i, batch) in export.enumerate() {
            if abort_after == Some(i) {
                aborted = true;
                break;
            }
            r.target.import_batch(&batch.unwrap()).unwrap();
        }
        if aborted {
            r.target.abort_import(range.clone()).unwrap();
            r.source.abort_export(range.clone()).unwrap();
        } else {
            r.target.commit_import(range.clone()).unwrap();
            r.moved.store(true, Ordering::Release);
            r.source.finish_export(range.clone()).unwrap();
        }
        done.store(true, Ordering::Release);
    });

    let moved = router.moved.load(Ordering::Acquire);
    for (i, k) in keys.iter().enumerate() {
        let expected = i as u64 * 1000 + *acked[i].lock().unwrap();
        let owner = router.owner(k);
        assert_eq!(
            owner.read(k, |v| *v),
            Ok(Some(expected)),
            "{k}: lost or phantom update"
        );
        assert_eq!(
            owner.get(k).unwrap().unwrap().source_version(),
            i as u64,
            "{k}: version not carried"
        );
        if moved && range.contains(&key_slot(k.as_bytes())) {
            assert!(matches!(router.source.get(k), Err(Error::NotOwner { .. })));
        }
    }
    let total = router.source.stats().entries + router.target.stats().entries;
    assert_eq!(total, keys.len() as u64);
    router.source.check_invariants();
    router.target.check_invariants();
    let losses = losses.lock().unwrap();
    if moved {
        assert!(losses.is_empty());
    } else {
        assert_eq!(losses.len(), 1);
        assert_eq!(losses[0].reason, LossReason::MoveFailed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn a_move_under_concurrent_writers_loses_no_update(
        first in 0u16..16384,
        len in 0u16..6000,
        inside in 1usize..30,
        outside in 0usize..10,
        batch_bytes in 1usize..400,
        writes in 50usize..400,
        abort_after in proptest::option::weighted(0.3, 0usize..6),
    ) {
        run(first, len, inside, outside, batch_bytes, writes, abort_after);
    }
}

#[test]
fn a_committed_move_of_the_whole_key_space() {
    run(0, 16383, 40, 0, 256, 500, None);
}

#[test]
fn an_aborted_move_of_the_whole_key_space() {
    run(0, 16383, 40, 0, 256, 500, Some(1));
}
