//! Memory accounting: with the arenas full of values, an SRS(K, M, s) memgest holds
//! `1 + M/K` bytes of data + parity per payload byte, whatever s is (Ring §3.3: stretching
//! changes placement, not overhead), plus the replicated metadata.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use ringlet_erasure::{Accounting, Arena, Layout, ParityStore};
use ringlet_types::Version;

fn fill(k: u32, m: u32, s: u32) -> (Accounting, Layout) {
    let layout = Layout::new(k, m, s, 4096).unwrap();
    let mut arenas: Vec<Arena> = (0..s)
        .map(|n| Arena::new(layout, n, 8 << 20).unwrap())
        .collect();
    let mut holders: Vec<ParityStore> = (0..m)
        .map(|q| ParityStore::new(layout, q).unwrap())
        .collect();
    for i in 0..3000u32 {
        let node = i % s;
        let key = format!("key-{i}");
        let value = vec![(i % 251) as u8 | 1; 1000];
        let up = arenas[node as usize]
            .put(key.as_bytes(), Version::new(1, 0, node, i), &value)
            .unwrap();
        for h in &mut holders {
            h.apply(&up).unwrap();
        }
    }
    let mut total = Accounting::default();
    for a in &arenas {
        total = total.plus(&a.accounting());
    }
    for h in &holders {
        h.check_invariants();
        total = total.plus(&h.accounting());
    }
    (total, layout)
}

#[test]
fn overhead_is_one_plus_m_over_k() {
    for (k, m, s) in [
        (2, 1, 2),
        (2, 1, 3),
        (3, 1, 3),
        (3, 2, 3),
        (3, 2, 6),
        (2, 2, 4),
    ] {
        let (acc, layout) = fill(k, m, s);
        let data_parity = (acc.data_bytes + acc.parity_bytes) as f64 / acc.payload_bytes as f64;
        let want = layout.bytes_per_payload_byte();
        // Chunk rounding at the arena tails costs < 1%.
        assert!(
            (data_parity - want).abs() < 0.01 * want,
            "SRS({k},{m},{s}): {data_parity} vs {want}"
        );
        let with_meta = acc.bytes_per_payload_byte().unwrap();
        assert!(
            with_meta > data_parity && with_meta < data_parity + 0.2,
            "{with_meta}"
        );
    }
}
