//! KELI's BFS, one-sided: the client half of `bench/keli_bfs.py` for Ringlet's shared-memory
//! reader. For each root it runs `ShmReader::chase` of
//! `CHASE v:<root> follows CHUNKED DEPTH d LIMIT 100000 FIELDS name` (each hop one validated
//! read at the link's location hint, continuation chunks included; no round trip to the node).
//!
//! Usage: ringlet-keli-bfs --socket PATH --roots FILE [--depth 2] [--rounds 3]
//! [--index-only-hints] (ignore the hints' data part: hops read at the index entry only, as
//! before data hints existed; for measuring what each part of a hint is worth).
//! FILE: one root key a line. Prints `round <µs per root ...>` per round, then one
//! `visit <count> <digest>` per root (last round): the number of vertices visited and the
//! wrapping sum over them of FNV-1a-64(`key` `=` `name`), an order-free digest the script
//! compares with Redis's BFS; then `stats <reader counters>`.

use ringlet_engine::read::Position;
use ringlet_engine::ValueKind;
use ringlet_record::chase::{Chase, Stop};
use ringlet_shm::ShmReader;
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// FNV-1a, 64 bits: the script computes the same.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn main() {
    let sock = arg("--socket").expect("--socket PATH");
    let roots_file = arg("--roots").expect("--roots FILE");
    let rounds: usize = arg("--rounds").and_then(|v| v.parse().ok()).unwrap_or(3);
    let depth: u32 = arg("--depth").and_then(|v| v.parse().ok()).unwrap_or(2);
    let roots: Vec<Vec<u8>> = std::fs::read_to_string(&roots_file)
        .expect("roots file")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.as_bytes().to_vec())
        .collect();
    let index_only = std::env::args().any(|a| a == "--index-only-hints");
    let mut shm = ShmReader::connect(&sock).expect("shm reader");
    let links = vec![b"follows".to_vec()];
    let mut visits = Vec::new();
    for _ in 0..rounds.max(1) {
        visits.clear();
        let mut us = Vec::with_capacity(roots.len());
        for root in &roots {
            let t = Instant::now();
            let walk = Chase::new(
                root.clone(),
                links.clone(),
                depth,
                ringlet_record::CHASE_LIMIT_MAX,
                Some(vec![b"name".to_vec()]),
            )
            .expect("chase arguments")
            .chunked();
            // The walk runs in this process (it stalls no node), so it gets a longer time
            // bound than the node's 100 ms: a 2-hop BFS at KELI's scale reads ~10^4 items.
            let reply = if index_only {
                // The same walk and the same look-ahead prefetching as `chase_within`, with
                // the hints' data part dropped.
                let strip = |h: &ringlet_record::Hint| Position {
                    data: None,
                    ..ringlet_shm::chase::position(h)
                };
                let view = shm.prefetch_view().expect("shm session");
                ringlet_shm::chase::drive_prefetching(
                    walk,
                    Duration::from_secs(10),
                    |h| ringlet_engine::read::prefetch_position(&view, strip(h)),
                    |k, h, out| {
                        shm.get_hinted(k, h.as_ref().map(strip), out)
                            .map(|r| matches!(r, Some((_, ValueKind::Record))))
                    },
                )
            } else {
                shm.chase_within(walk, &links, Duration::from_secs(10))
            }
            .expect("one-sided chase");
            us.push(t.elapsed().as_nanos() as f64 / 1e3);
            assert_eq!(reply.stop, Stop::Complete, "one-sided chase stopped early");
            let digest = reply.entries.iter().fold(0u64, |acc, e| {
                let name = e
                    .attrs
                    .iter()
                    .find(|(n, _)| n == b"name")
                    .map_or(&b""[..], |(_, v)| v.as_slice());
                acc.wrapping_add(fnv1a(&[&e.key, b"=", name]))
            });
            visits.push((reply.entries.len(), digest));
        }
        let line: Vec<String> = us.iter().map(|v| format!("{v:.2}")).collect();
        println!("round {}", line.join(" "));
    }
    for (n, d) in &visits {
        println!("visit {n} {d}");
    }
    let st = shm.stats();
    println!(
        "stats hops at a hint {} ({} straight at the data entry), hints stale (table {}, \
         entry {}, node {}), no hint {}, lookups by key {} (the roots included), at a \
         remembered position {}",
        st.hint_hits,
        st.hint_direct_hits,
        st.hint_stale_table,
        st.hint_stale_entry,
        st.hint_stale_node,
        st.hint_missing,
        st.hint_lookups,
        st.hint_cache_hits
    );
}
