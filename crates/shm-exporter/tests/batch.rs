//! The batched one-sided read (`ShmReader::mget_with`, a software pipeline of prefetches
//! ahead of the validated reads): it must answer exactly what one GET per key answers — for
//! hits of every size, misses, expired keys, duplicates and batch lengths on both sides of
//! the pipeline's distances — never return a value that was not written, even while a
//! writer overwrites and deletes the keys, and follow an epoch change or a role word it
//! cannot match (stale regions) like the single GET does. The node runs in this process;
//! the reader maps its regions through the socket as another process would.

use parking_lot::Mutex;
use ringlet_codec::native::SetRequest;
use ringlet_engine::{Engine, EngineConfig};
use ringlet_shm::reader::{MGET_BUCKET_AHEAD, MGET_ENTRY_AHEAD};
use ringlet_shm::testkit::{check_value, make_value, Rng};
use ringlet_shm::ShmReader;
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use ringlet_types::{Epoch, Version};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn node(name: &str) -> (Arc<Mutex<Engine>>, Exporter, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ringlet-shm-b-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let engine = Arc::new(Mutex::new(
        Engine::new(EngineConfig {
            memory_bytes_max: 64 << 20,
            // Small on purpose: the load below upsizes the index several times.
            index_buckets_initial: 16,
            ..EngineConfig::default()
        })
        .unwrap(),
    ));
    let x = Exporter::spawn(engine.clone(), ExporterConfig::new(&path)).unwrap();
    (engine, x, path)
}

fn key(i: u64) -> Vec<u8> {
    format!("bk:{i}").into_bytes()
}

/// One key's outcome of `mget_with`, owned: its index and its item.
type Outcome = (usize, Option<(Version, Vec<u8>)>);

/// Every outcome of `mget_with`, in call order.
fn mget_all(r: &mut ShmReader, keys: &[Vec<u8>]) -> Vec<Outcome> {
    let mut got = Vec::with_capacity(keys.len());
    r.mget_with(keys, |i, item| {
        got.push((i, item.map(|(v, b)| (v, b.to_vec()))))
    })
    .unwrap();
    got
}

#[test]
fn mget_answers_what_get_answers_for_hits_misses_sizes_and_batch_lengths() {
    let (_e, _x, path) = node("agree");
    let mut r = ShmReader::connect(&path).unwrap();
    let n = 3000u64;
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut rng = Rng(7);
    for i in 0..n {
        let k = key(i);
        match i % 7 {
            // Absent.
            0 => {}
            // Expired: the reader's own expiry check must hide it (no tick runs here).
            1 => {
                let v = make_value(&k, i, 40);
                r.set_request(&SetRequest {
                    key: &k,
                    value: &v,
                    ttl_ms: Some(1),
                    ..SetRequest::default()
                })
                .unwrap();
            }
            // Sizes from below one cache line to many (beyond what the prefetch covers).
            _ => {
                let len = [32usize, 100, 300, 1500, 9000][rng.below(5) as usize];
                let v = make_value(&k, i, len);
                r.set(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
    }
    std::thread::sleep(Duration::from_millis(20));
    let lens = [
        0,
        1,
        2,
        MGET_ENTRY_AHEAD - 1,
        MGET_ENTRY_AHEAD,
        MGET_ENTRY_AHEAD + 1,
        MGET_BUCKET_AHEAD - 1,
        MGET_BUCKET_AHEAD,
        MGET_BUCKET_AHEAD + 1,
        3 * MGET_BUCKET_AHEAD + 5,
        1000,
        n as usize + 100,
    ];
    for len in lens {
        // Keys drawn from a range a little larger than the loaded one (never-written keys
        // too), with repeats.
        let keys: Vec<Vec<u8>> = (0..len).map(|_| key(rng.below(n + n / 10))).collect();
        let got = mget_all(&mut r, &keys);
        assert_eq!(got.len(), len, "one outcome per key");
        for (j, (i, item)) in got.into_iter().enumerate() {
            assert_eq!(i, j, "outcomes in order");
            let k = &keys[i];
            let want = model.get(k);
            assert_eq!(
                item.as_ref().map(|(_, v)| v),
                want,
                "batch of {len}, key {}",
                String::from_utf8_lossy(k)
            );
            // The single GET agrees, version included.
            assert_eq!(r.get(k).unwrap(), item, "batch of {len}");
        }
    }
    let st = r.stats();
    assert_eq!(st.fallbacks, 0, "{st:?}");
    assert!(st.shm_misses > 0 && st.shm_hits > 0, "{st:?}");
}

#[test]
fn mget_never_returns_an_unwritten_value_while_keys_are_rewritten_and_deleted() {
    let (_e, _x, path) = node("churn");
    let keys_n = 400u64;
    let keys: Vec<Vec<u8>> = (0..keys_n).map(key).collect();
    let mut w = ShmReader::connect(&path).unwrap();
    for (i, k) in keys.iter().enumerate() {
        w.set(k, &make_value(k, 0, 64 + i % 300)).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let done = done.clone();
        let keys = keys.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(11);
            // Overwrites in other size classes (entries move), deletes and re-creates.
            for c in 1..=20_000u64 {
                let k = &keys[rng.below(keys_n) as usize];
                if c % 9 == 0 {
                    w.del(k).unwrap();
                } else {
                    let len = 40 + rng.below(2000) as usize;
                    w.set(k, &make_value(k, c, len)).unwrap();
                }
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut r = ShmReader::connect(&path).unwrap();
    let mut last: HashMap<usize, Version> = HashMap::new();
    let mut rng = Rng(12);
    let (mut hits, mut rounds) = (0u64, 0u64);
    // Bounded: the writer finishes its fixed number of operations; then one more round.
    let mut after = 0;
    while after < 2 {
        if done.load(Ordering::Acquire) {
            after += 1;
        }
        let idx: Vec<usize> = (0..97).map(|_| rng.below(keys_n) as usize).collect();
        let batch: Vec<&[u8]> = idx.iter().map(|&i| keys[i].as_slice()).collect();
        r.mget_with(&batch, |j, item| {
            if let Some((v, value)) = item {
                hits += 1;
                if let Err(e) = check_value(batch[j], value) {
                    panic!("key {}: {e}", String::from_utf8_lossy(batch[j]));
                }
                // Reads of one key never go back in time (versions only grow).
                let prev = last.insert(idx[j], v);
                assert!(prev.is_none_or(|p| p <= v), "{prev:?} then {v:?}");
            }
        })
        .unwrap();
        rounds += 1;
    }
    writer.join().unwrap();
    assert!(hits > 0 && rounds > 2, "hits {hits}, rounds {rounds}");
}

#[test]
fn mget_follows_an_epoch_change_and_a_role_word_it_cannot_match() {
    let (e, x, path) = node("stale");
    let mut r = ShmReader::connect(&path).unwrap();
    let keys: Vec<Vec<u8>> = (0..100).map(key).collect();
    for (i, k) in keys.iter().enumerate() {
        r.set(k, &make_value(k, i as u64, 100)).unwrap();
    }
    let check = |got: &[Outcome]| {
        assert_eq!(got.len(), keys.len());
        for (i, item) in got {
            let (_, v) = item.as_ref().expect("every key is present");
            assert_eq!(check_value(&keys[*i], v), Ok(*i as u64));
        }
    };
    // A new epoch: the first key's read is void, the reader re-handshakes once and the rest
    // of the batch is read one-sided from the new session.
    x.set_epoch(Epoch(5));
    check(&mget_all(&mut r, &keys));
    let st = r.stats();
    assert_eq!(
        (st.epoch_changes, st.reconnects, st.fallbacks),
        (1, 1, 0),
        "{st:?}"
    );
    assert_eq!(r.hello().unwrap().epoch, Epoch(5));
    // The role word changes without an epoch: every key over the socket, right, and one
    // re-handshake for the whole batch, not one per key.
    e.lock().set_config_id(999);
    check(&mget_all(&mut r, &keys));
    let st = r.stats();
    assert_eq!(st.fallbacks, keys.len() as u64, "{st:?}");
    assert_eq!(st.reconnects, 2, "{st:?}");
    // The header matches the session again: one-sided again.
    e.lock().set_config_id(5);
    let hits = r.stats().shm_hits;
    check(&mget_all(&mut r, &keys));
    let st = r.stats();
    assert_eq!(st.shm_hits, hits + keys.len() as u64, "{st:?}");
    assert_eq!(st.fallbacks, keys.len() as u64, "{st:?}");
}
