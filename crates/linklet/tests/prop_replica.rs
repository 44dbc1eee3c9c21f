//! Seeding a backup (snapshot batches) interleaved with dirty-log drains, against writers
//! (`src/replica.rs`). What must hold: once a drain that covers a write was applied at the
//! backup, the backup holds that write or a newer value of the key (so a promoted backup loses
//! no acknowledged update), and once the snapshot is through and the log drained with the
//! writers stopped, the backup equals the owner on the range.
//!
//! Two tests: one runs a proptest-chosen sequence of steps (write, remove, drain, pull one
//! snapshot batch) in one thread, so every interleaving at step granularity is reachable and
//! the failing sequence shrinks; the other runs real writer threads against a replicator
//! thread and a promotion at a random point, with writers acknowledging only covered writes.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use proptest::prelude::*;
use ringlet_linklet::{Config, Error, Linklet, ReplItem, Slot};
use ringlet_types::key_slot;

type L = Linklet<String, u64>;

fn keys_in(range: &RangeInclusive<Slot>, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("k{i}"))
        .filter(|k| range.contains(&key_slot(k.as_bytes())))
        .take(n)
        .collect()
}

fn pair(batch_bytes: usize) -> (L, L) {
    let owner = L::new(Config {
        move_batch_bytes: batch_bytes,
        ..Config::default()
    })
    .unwrap();
    let backup = L::new(Config {
        slots_owned: vec![],
        ..Config::default()
    })
    .unwrap();
    owner.set_dirty_tracking(true);
    (owner, backup)
}

fn contents(l: &L, keys: &[String]) -> BTreeMap<String, u64> {
    keys.iter()
        .filter_map(|k| l.read(k, |v| *v).unwrap().map(|v| (k.clone(), v)))
        .collect()
}

/// What the backup holds, read by promoting a copy's view: the staged values are not served,
/// so commit, read, and the caller must not use the backup afterwards.
fn promoted(backup: &L, range: &RangeInclusive<Slot>, keys: &[String]) -> BTreeMap<String, u64> {
    backup.commit_import(range.clone()).unwrap();
    contents(backup, keys)
}

#[derive(Clone, Debug)]
enum Step {
    Write(usize),
    Remove(usize),
    Drain,
    Snapshot,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..64).prop_map(Step::Write),
        1 => (0usize..64).prop_map(Step::Remove),
        2 => Just(Step::Drain),
        2 => Just(Step::Snapshot),
    ]
}

fn run_steps(first: Slot, len: u16, n_keys: usize, batch_bytes: usize, steps: &[Step]) {
    let range = first..=first.saturating_add(len).min(16383);
    let keys = keys_in(&range, n_keys);
    let (owner, backup) = pair(batch_bytes);
    for (i, k) in keys.iter().enumerate() {
        owner.insert(k.clone(), i as u64, 0).unwrap();
    }
    // Writes before the seed are drained and dropped: the backup was not importing yet.
    let before = owner.take_dirty().unwrap();
    assert_eq!(backup.apply_replica(&before.items).unwrap().applied, 0);
    backup.begin_import(range.clone()).unwrap();
    let mut snapshot = owner.snapshot_range(range.clone()).unwrap();
    let mut snapshot_done = false;
    let mut counter = 1000u64;
    // Keys written since the seed started: after a drain, the backup must match the owner.
    let mut touched = vec![false; keys.len()];
    for s in steps {
        match s {
            Step::Write(i) => {
                let i = i % keys.len();
                counter += 1;
                let c = counter;
                if owner.update(&keys[i], |v| *v = c).unwrap().is_none() {
                    owner.insert(keys[i].clone(), c, 0).unwrap();
                }
                touched[i] = true;
            }
            Step::Remove(i) => {
                let i = i % keys.len();
                owner.remove(&keys[i]).unwrap();
                touched[i] = true;
            }
            Step::Drain => {
                let d = owner.take_dirty().unwrap();
                backup.apply_replica(&d.items).unwrap();
                for (i, k) in keys.iter().enumerate() {
                    if touched[i] || snapshot_done {
                        // The staged copy is not served: compare through the installed state.
                        assert_eq!(
                            staged(&backup, k),
                            owner.read(k, |v| *v).unwrap(),
                            "{k} differs after a drain"
                        );
                    }
                }
            }
            Step::Snapshot => {
                if let Some(b) = snapshot.next() {
                    let b = b.unwrap();
                    snapshot_done = b.done;
                    let items: Vec<ReplItem> = b.items.into_iter().map(ReplItem::Put).collect();
                    backup.apply_replica(&items).unwrap();
                }
            }
        }
    }
    for b in snapshot {
        let items: Vec<ReplItem> = b.unwrap().items.into_iter().map(ReplItem::Put).collect();
        backup.apply_replica(&items).unwrap();
    }
    let d = owner.take_dirty().unwrap();
    backup.apply_replica(&d.items).unwrap();
    assert_eq!(promoted(&backup, &range, &keys), contents(&owner, &keys));
}

/// The staged (not served) value of `k` at a backup.
fn staged(backup: &L, k: &str) -> Option<u64> {
    backup.peek(&k.to_owned(), |v| *v)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn snapshot_and_drains_in_any_order_leave_the_backup_equal(
        first in 0u16..16384,
        len in 0u16..4000,
        n_keys in 1usize..40,
        batch_bytes in 1usize..200,
        steps in proptest::collection::vec(step(), 0..120),
    ) {
        run_steps(first, len, n_keys, batch_bytes, &steps);
    }
}

/// Writers update counters and acknowledge an update only once a drain covering it was
/// applied at the backup; a replicator thread seeds the backup and drains; at a random point
/// the owner "dies" and the backup is promoted. Every acknowledged increment must be there.
fn run_threads(n_keys: usize, batch_bytes: usize, writes: usize, crash_after_rounds: usize) {
    let range: RangeInclusive<Slot> = 0..=16383;
    let keys = keys_in(&range, n_keys);
    let (owner, backup) = pair(batch_bytes);
    for k in &keys {
        owner.insert(k.clone(), 0, 0).unwrap();
    }
    let applied_upto = AtomicU64::new(0);
    let crashed = AtomicBool::new(false);
    let acked: Vec<Mutex<u64>> = keys.iter().map(|_| Mutex::new(0)).collect();
    backup.begin_import(range.clone()).unwrap();
    std::thread::scope(|s| {
        for w in 0..2 {
            let (owner, keys, acked, applied_upto, crashed) =
                (&owner, &keys, &acked, &applied_upto, &crashed);
            s.spawn(move || {
                for n in 0..writes {
                    if crashed.load(Ordering::Acquire) {
                        return;
                    }
                    let i = (n * 5 + w * 3) % keys.len();
                    L::take_thread_write_seq();
                    let v = match owner.update(&keys[i], |v| {
                        *v += 1;
                        *v
                    }) {
                        Ok(Some(v)) => v,
                        Err(Error::Backlog { .. }) => continue,
                        other => panic!("unexpected {other:?}"),
                    };
                    let seq = L::take_thread_write_seq();
                    assert!(seq > 0, "an update was not recorded");
                    // Wait (bounded by the replicator's progress or the crash) for coverage.
                    while applied_upto.load(Ordering::Acquire) < seq {
                        if crashed.load(Ordering::Acquire) {
                            return; // never acknowledged
                        }
                        std::thread::yield_now();
                    }
                    let mut a = acked[i].lock().unwrap();
                    *a = (*a).max(v);
                }
            });
        }
        // The replicator: snapshot batches interleaved with drains, then drains only.
        let mut snapshot = owner.snapshot_range(range.clone()).unwrap();
        let mut rounds = 0;
        loop {
            if let Some(b) = snapshot.next() {
                let items: Vec<ReplItem> =
                    b.unwrap().items.into_iter().map(ReplItem::Put).collect();
                backup.apply_replica(&items).unwrap();
            }
            let d = owner.take_dirty().unwrap();
            backup.apply_replica(&d.items).unwrap();
            applied_upto.store(d.upto, Ordering::Release);
            rounds += 1;
            if rounds >= crash_after_rounds {
                crashed.store(true, Ordering::Release);
                break;
            }
        }
    });
    // Writers that were mid-update when the owner "died" never acknowledged it.
    let got = promoted(&backup, &range, &keys);
    for (i, k) in keys.iter().enumerate() {
        let a = *acked[i].lock().unwrap();
        let b = got.get(k).copied();
        assert!(
            a == 0 || b.is_some_and(|b| b >= a),
            "{k}: acknowledged {a}, backup has {b:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn a_promoted_backup_holds_every_acknowledged_update(
        n_keys in 1usize..30,
        batch_bytes in 1usize..200,
        writes in 50usize..400,
        crash_after_rounds in 1usize..60,
    ) {
        run_threads(n_keys, batch_bytes, writes, crash_after_rounds);
    }
}
