//! KELI Fig. 8 on one host: the cost of following a link by its location hint (one
//! validated direct read) against looking its target up by key, per hop.
//!
//! `N` records `n:<i>`, each a record with a `name` of `--value-bytes` bytes and a `next`
//! link to another record (a random cycle through all of them, so a walk touches every
//! record, cold in cache as in KELI's random walks), each link with a fresh hint. A walk of
//! `--hops` hops reads a record, scans it for `next` and reads the target:
//!   - engine, lookup:  `read_entry_with` (hash, probe, validate) on an in-process view;
//!   - engine, chase:   `read_entry_at` at the link's hint: straight at the data entry
//!     (`read_entry_direct`), the index entry if that is stale;
//!   - engine, chase at the index entry only (`read_entry_at_index`: the hint before
//!     engine format 3, one bucket miss more);
//!   - shm, lookup:     `ShmReader::get_into` over the node's regions mapped read-only;
//!   - shm, chase:      `ShmReader::get_hinted` with the link's hint.
//!
//! Usage: ringlet-keli-hops [--records 200000] [--hops 1000000] [--value-bytes 64]
//!        [--rounds 5]. Prints ns per hop (median of rounds) and chase/lookup ratios.

use parking_lot::Mutex;
use ringlet_engine::hash::key_hash;
use ringlet_engine::read::{
    locate_entry, read_entry_at, read_entry_at_index, read_entry_direct, read_entry_with, Position,
};
use ringlet_engine::{Engine, EngineConfig, ReadOutcome, SetOptions, ValueKind};
use ringlet_record::record::scan;
use ringlet_record::{Field, Hint, Link, Record};
use ringlet_shm::ShmReader;
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use std::sync::Arc;
use std::time::Instant;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `next` link of an encoded record: its target and hint.
fn next_of(value: &[u8]) -> Option<(Vec<u8>, Option<Hint>)> {
    let fields = scan(value).ok()?;
    let (_, f) = fields.iter().find(|(n, _)| *n == b"next")?;
    let (t, h) = f.links().next()?;
    Some((t.to_vec(), h))
}

fn hint_at(p: Position) -> Hint {
    ringlet_shm::chase::hint_at(p, 0, 0)
}

fn pos(h: &Hint) -> Position {
    ringlet_shm::chase::position(h)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let n = arg("--records", 200_000) as usize;
    let hops = arg("--hops", 1_000_000);
    let value_bytes = arg("--value-bytes", 64) as usize;
    let rounds = arg("--rounds", 5).max(1);

    let engine = Arc::new(Mutex::new(
        Engine::new(EngineConfig {
            memory_bytes_max: 2 << 30,
            index_buckets_initial: Engine::index_buckets_for(n as u64 * 2),
            ..EngineConfig::default()
        })
        .expect("engine"),
    ));
    // A random cycle: next[order[i]] = order[i + 1].
    let mut order: Vec<usize> = (0..n).collect();
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    for i in (1..n).rev() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let key = |i: usize| format!("n:{i}").into_bytes();
    let opts = SetOptions {
        kind: ValueKind::Record,
        ..SetOptions::default()
    };
    let record = |i: usize, target: usize, hint: Option<Hint>| {
        let mut r = Record::new();
        r.insert(
            b"name".to_vec(),
            Field::Bytes(vec![b'a' + (i % 26) as u8; value_bytes]),
        );
        r.insert(
            b"next".to_vec(),
            Field::Link(Link {
                target: key(target),
                hint,
            }),
        );
        r.encode()
    };
    {
        let mut e = engine.lock();
        // Pass 1: every record without hints; pass 2: the links with their targets' hints
        // (a rewrite keeps every index entry where it is, and moves the data entry). Pass 2
        // goes backwards along the cycle, so every target is rewritten before the hint to it
        // is taken and every hint names its target's final data entry (but the one to
        // order[0], rewritten last: one stale data hint, read at its index entry).
        for w in 0..n {
            let (a, b) = (order[w], order[(w + 1) % n]);
            e.set(&key(a), &record(a, b, None), &opts, 1).expect("set");
        }
        let view = e.reader().view();
        let mut out = Vec::new();
        for w in (0..n).rev() {
            let (a, b) = (order[w], order[(w + 1) % n]);
            let kb = key(b);
            let (r, p) = locate_entry(&view, &kb, key_hash(&kb), 1, None, &mut out);
            let hint = match (r, p) {
                (ReadOutcome::Hit { .. }, Some(p)) => Some(hint_at(p)),
                _ => None,
            };
            e.set(&key(a), &record(a, b, hint), &opts, 1).expect("set");
        }
    }
    let dir = std::env::temp_dir().join(format!("ringlet-keli-hops-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("s");
    let _x = Exporter::spawn(engine.clone(), ExporterConfig::new(&path)).expect("exporter");
    let mut shm = ShmReader::connect(&path).expect("reader");
    let view = engine.lock().reader().view();

    let start = key(order[0]);
    let start_hint = {
        let mut out = Vec::new();
        let (_, p) = locate_entry(&view, &start, key_hash(&start), 1, None, &mut out);
        p.map(hint_at)
    };
    type Step<'a> = dyn FnMut(&[u8], Option<Hint>, &mut Vec<u8>) -> bool + 'a;
    let walk = |step: &mut Step<'_>| -> f64 {
        let mut k = start.clone();
        let mut hint = start_hint;
        let mut out = Vec::new();
        let t = Instant::now();
        for _ in 0..hops {
            assert!(step(&k, hint, &mut out), "hop to {k:?} failed");
            let (nk, nh) = next_of(&out).expect("next link");
            k = nk;
            hint = nh;
        }
        t.elapsed().as_nanos() as f64 / hops as f64
    };
    // How many hops' data hints are valid (the rest read at the index entry).
    let direct_ok = {
        let mut k = start.clone();
        let mut hint = start_hint;
        let mut out = Vec::new();
        let mut ok = 0u64;
        for _ in 0..n {
            let h = hint.expect("hint");
            let d = pos(&h).data.expect("data hint");
            if read_entry_direct(&view, &k, key_hash(&k), d, 1, None, &mut out).is_ok() {
                ok += 1;
            } else {
                assert!(read_entry_at(&view, &k, key_hash(&k), pos(&h), 1, None, &mut out).is_ok());
            }
            let (nk, nh) = next_of(&out).expect("next link");
            k = nk;
            hint = nh;
        }
        ok
    };
    let mut res: Vec<(&str, Vec<f64>)> = vec![
        ("engine lookup", vec![]),
        ("engine chase", vec![]),
        ("shm lookup", vec![]),
        ("shm chase", vec![]),
        ("engine at index", vec![]),
    ];
    for _ in 0..rounds {
        res[0].1.push(walk(&mut |k, _, out| {
            matches!(
                read_entry_with(&view, k, key_hash(k), 1, None, out).0,
                ReadOutcome::Hit { .. }
            )
        }));
        res[1].1.push(walk(&mut |k, h, out| {
            let Some(h) = h else { return false };
            matches!(
                read_entry_at(&view, k, key_hash(k), pos(&h), 1, None, out),
                Ok(ReadOutcome::Hit { .. })
            )
        }));
        res[2].1.push(walk(&mut |k, _, out| {
            matches!(shm.get_into(k, out), Ok(Some(_)))
        }));
        res[3].1.push(walk(&mut |k, h, out| {
            matches!(shm.get_hinted(k, h.as_ref().map(pos), out), Ok(Some(_)))
        }));
        res[4].1.push(walk(&mut |k, h, out| {
            let Some(h) = h else { return false };
            matches!(
                read_entry_at_index(&view, k, key_hash(k), pos(&h), 1, None, out),
                Ok(ReadOutcome::Hit { .. })
            )
        }));
    }
    let st = shm.stats();
    assert_eq!(
        st.hint_stale_table + st.hint_stale_entry,
        0,
        "a hint went stale during the run"
    );
    println!(
        "{n} records, {hops} hops per walk, {value_bytes}-byte names, median of {rounds} rounds"
    );
    println!("data hints valid: {direct_ok} of {n} (the others read at the index entry)");
    let med: Vec<(&str, f64)> = res.into_iter().map(|(k, v)| (k, median(v))).collect();
    for (k, v) in &med {
        println!("{k:16} {v:8.1} ns/hop");
    }
    println!(
        "chase/lookup: engine {:.2}, shm {:.2}; at the index entry only: engine {:.2}",
        med[1].1 / med[0].1,
        med[3].1 / med[2].1,
        med[4].1 / med[0].1
    );
    // Where a hop's time goes: the same operations on one record over and over (cache-hot,
    // no miss), so walk minus hot is what the walk's cache misses cost.
    let reps = hops.min(1_000_000);
    let k0 = start.clone();
    let h0 = key_hash(&k0);
    let p0 = start_hint.map(|h| pos(&h)).expect("start hint");
    let mut out = Vec::new();
    let hot = |f: &mut dyn FnMut(&mut Vec<u8>)| -> f64 {
        let mut out = Vec::new();
        let mut v = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            for _ in 0..reps {
                f(&mut out);
            }
            v.push(t.elapsed().as_nanos() as f64 / reps as f64);
        }
        median(v)
    };
    let hash = hot(&mut |_| {
        std::hint::black_box(key_hash(std::hint::black_box(&k0)));
    });
    let scan_next = {
        assert!(matches!(
            read_entry_with(&view, &k0, h0, 1, None, &mut out).0,
            ReadOutcome::Hit { .. }
        ));
        let rec = out.clone();
        hot(&mut |_| {
            std::hint::black_box(next_of(std::hint::black_box(&rec)));
        })
    };
    let e_lookup = hot(&mut |o| {
        std::hint::black_box(read_entry_with(&view, &k0, key_hash(&k0), 1, None, o).0);
    });
    let e_chase = hot(&mut |o| {
        let _ = std::hint::black_box(read_entry_at(&view, &k0, key_hash(&k0), p0, 1, None, o));
    });
    let e_index = hot(&mut |o| {
        let _ = std::hint::black_box(read_entry_at_index(
            &view,
            &k0,
            key_hash(&k0),
            p0,
            1,
            None,
            o,
        ));
    });
    let s_lookup = hot(&mut |o| {
        let _ = std::hint::black_box(shm.get_into(&k0, o));
    });
    let s_chase = hot(&mut |o| {
        let _ = std::hint::black_box(shm.get_hinted(&k0, Some(p0), o));
    });
    println!("cache-hot, one record again and again (ns): key hash {hash:.1}, scan for next {scan_next:.1}");
    println!(
        "  engine lookup {e_lookup:.1}, engine chase {e_chase:.1} (at the index entry {e_index:.1}); shm lookup {s_lookup:.1}, shm chase {s_chase:.1}"
    );
    println!(
        "walk minus hot = the misses (ns/hop): engine lookup {:.1}, engine chase {:.1} (at the index entry {:.1}); shm lookup {:.1}, shm chase {:.1}",
        med[0].1 - e_lookup - scan_next,
        med[1].1 - e_chase - scan_next,
        med[4].1 - e_index - scan_next,
        med[2].1 - s_lookup - scan_next,
        med[3].1 - s_chase - scan_next
    );
    let _ = std::fs::remove_dir_all(&dir);
}
