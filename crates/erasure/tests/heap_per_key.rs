//! Heap bytes per key of the ec key maps, measured with a counting allocator (issue 16 item
//! 3, docs/design/cluster-memory.md "Session 18").
//!
//! Builds what one ec:3+2 key costs on the heap outside the value and parity bytes: the
//! coordinator's [`Arena`] (key map + offset map) and the key maps of the M = 2
//! [`ParityStore`]s, for 20,000 keys of the benchmark's shape (`r0:ec32:load:<i>`, loaded in
//! that order, as `bench/memgest.py` does), then measures each structure's live heap bytes as
//! glibc charges them (usable size + its 8-byte header per block). One-byte values keep the
//! arena's byte vector and the parity chunks negligible; what they cost is subtracted anyway.
//! A `BTreeMap` of the same 64-byte entries, filled in the same order, is measured beside it
//! as the reference the maps replaced.
//!
//! It fails if a copy of a key's metadata costs more than 1.15 × its 64-byte entry
//! (24-byte inline key + 40-byte record): the B-tree cost 1.81 × (115.8 B).

use ringlet_erasure::{Arena, Layout, ParityStore};
use ringlet_types::Version;
use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};

/// Live heap bytes as glibc charges them: usable size + the 8-byte chunk header.
static LIVE: AtomicI64 = AtomicI64::new(0);

struct Counting;

fn charged(p: *mut u8) -> i64 {
    // SAFETY: `p` is a live block from the system allocator (glibc malloc).
    let usable = unsafe { libc::malloc_usable_size(p.cast()) };
    i64::try_from(usable).unwrap_or(i64::MAX).saturating_add(8)
}

// SAFETY: forwards to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: AllocLayout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            LIVE.fetch_add(charged(p), Ordering::Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: AllocLayout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            LIVE.fetch_add(charged(p), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: AllocLayout) {
        LIVE.fetch_sub(charged(p), Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: AllocLayout, new: usize) -> *mut u8 {
        let old = charged(p);
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_sub(old, Ordering::Relaxed);
            LIVE.fetch_add(charged(q), Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

const KEYS: usize = 20_000;

/// One test (one thread allocating) so the counter sees only this scenario.
#[test]
fn ec_key_maps_cost_close_to_their_entries() {
    let layout = Layout::new(3, 2, 3, 4096).unwrap();
    let keys: Vec<Vec<u8>> = (0..KEYS)
        .map(|i| format!("r0:ec32:load:{i}").into_bytes())
        .collect();

    // The coordinator's arena: key map + offset map (+ the byte vector, subtracted).
    let before = live();
    let mut arena = Arena::new(layout, 0, 1 << 30).unwrap();
    let mut ups = Vec::with_capacity(KEYS);
    for (i, k) in keys.iter().enumerate() {
        let v = Version::new(1 + i as u64, 0, 1, 0);
        ups.push(arena.put(k, v, b"x").unwrap());
    }
    // The updates (delta + metadata copy each) are not the arena's: a clone of them costs
    // the same blocks, so measure it and count them out.
    let with_updates = live() - before;
    let at = live();
    let kept = ups.clone();
    let updates_heap = live() - at;
    drop(ups);
    let arena_heap = with_updates - updates_heap;
    let arena_bytes_vec = arena.bytes().len() as i64; // ≤ capacity; chunk-rounded
    arena.check_invariants();

    // Two holders apply every update.
    let mut per_holder = Vec::new();
    for q in 0..2 {
        let at = live();
        let mut h = ParityStore::with_arena_capacity(layout, q, 1 << 30).unwrap();
        for u in &kept {
            h.apply(u).unwrap();
        }
        h.check_invariants();
        let parity = h.accounting().parity_bytes as i64;
        let chunks = parity / 4096;
        // Parity chunks: 4,096 bytes + glibc's header each, plus their B-tree (small).
        per_holder.push(live() - at - parity - chunks * 16);
        std::mem::forget(h); // keep it live, do not perturb the count
    }
    drop(kept);

    // The reference: a B-tree of the same 64-byte entries in the same order.
    let at = live();
    let mut bt: BTreeMap<ringlet_erasure::SmallKey, [u64; 5]> = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        bt.insert(ringlet_erasure::SmallKey::new(k), [i as u64; 5]);
    }
    let btree = live() - at;
    assert_eq!(bt.len(), KEYS);

    // The arena's offset map as a B-tree (offsets ascending, as allocations are made).
    let at = live();
    let mut used: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..KEYS as u64 {
        used.insert(i * 1024, 1024);
    }
    let used_btree = live() - at;
    assert_eq!(used.len(), KEYS);

    // The same entries in a `ChunkMap`, measured by the counter and by its own capacity.
    let at = live();
    let mut cm: ringlet_erasure::ChunkMap<ringlet_erasure::SmallKey, [u64; 5]> =
        ringlet_erasure::ChunkMap::new();
    for (i, k) in keys.iter().enumerate() {
        cm.insert(ringlet_erasure::SmallKey::new(k), [i as u64; 5]);
    }
    let chunked = live() - at;
    let chunked_own = cm.heap_bytes();
    cm.check_invariants();

    let n = KEYS as f64;
    let arena_per_key = (arena_heap - arena_bytes_vec) as f64 / n;
    let holder_per_key: Vec<f64> = per_holder.iter().map(|b| *b as f64 / n).collect();
    let btree_per_key = btree as f64 / n;
    eprintln!(
        "heap per key: arena (key map + offset map) {arena_per_key:.1} B, holders {holder_per_key:.1?} B, \
         reference B-trees: 64-byte entries {btree_per_key:.1} B, offset map {:.1} B; ChunkMap of them {:.1} B \
         (by capacity {:.1} B)",
        used_btree as f64 / n,
        chunked as f64 / n,
        chunked_own as f64 / n
    );
    // A holder's copy: one 64-byte entry, ≤ 15 % over.
    for h in &holder_per_key {
        assert!(*h <= 64.0 * 1.15, "holder key map {h:.1} B per key");
    }
    // The arena: the key map entry (64) + the offset map entry (16), ≤ 15 % over (the byte
    // vector's spare capacity is at most as large as its length, 1 byte per key here).
    assert!(
        arena_per_key <= 80.0 * 1.15 + 1.0,
        "arena maps {arena_per_key:.1} B per key"
    );
    // And the reference is what the maps replaced: much more per entry.
    assert!(
        btree_per_key > 64.0 * 1.3,
        "B-tree {btree_per_key:.1} B per key"
    );
}
