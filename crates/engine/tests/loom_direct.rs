//! Loom model of the read straight at a data entry (`read::read_entry_direct`, a KELI data
//! hint) against the writer's live bit (`store.rs`: `mark_live` after the index publishes an
//! entry, `mark_dead` before it stops; a fence before a slot's image is rewritten),
//! exhaustively over interleavings and loom's weak-memory behaviours.
//!
//! The model in miniature: one index entry (one word, format 5: location | check) and two data
//! slots of three words (word 2 with the live bit, version, value). Every image has the same
//! word 2 apart from the live bit (the worst case for the seqlock: only the live bit and the
//! checksum tell incarnations apart). Version 1 is published in slot A before the reader
//! starts, and the reader holds a data hint for it (slot A, checksum of version 1's image).
//! The writer then replaces it by version 2 in slot B, says so on a flag (Release), frees A
//! and reuses it for version 3. The reader runs the direct read's algorithm. Checked:
//! - a hit is exactly version 1's image (never a torn mix, never version 3 read at the old
//!   hint);
//! - a reader that saw the flag (version 2 published) never gets version 1: the data hint
//!   never returns a superseded item.
//!
//! Like `loom_protocol.rs`, this checks the algorithm, not `read.rs` itself; the property
//! tests in `crates/shm-exporter/tests/hints.rs` run the real code (a superseded image intact at its
//! old place, garbage hints, and a racing writer).

use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

const SLOT_A: usize = 1;
const SLOT_B: usize = 2;
/// Word 2's live bit (layout::DE_LIVE_BIT).
const LIVE: u64 = 1 << 1;
/// Word 2 of every image here (lengths), live bit clear.
const W2: u64 = 0x1234;

struct Region {
    /// The index entry: `location | check << 8` (one word since format 5).
    w: AtomicU64,
    /// Per slot: word 2, version, value.
    slots: [[AtomicU64; 3]; 3],
    /// Set by the writer once version 2 is published (the model's "a later reader knows").
    v2_published: AtomicBool,
}

fn value_of(version: u64) -> u64 {
    version * 1000 + 7
}

/// Stand-in for CRC-32C over (image without the live bit, location).
fn checksum(loc: u64, w2: u64, version: u64, value: u64) -> u64 {
    (((w2 & !LIVE).wrapping_mul(0x2545_f491)
        ^ version.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ value.rotate_left(17)
        ^ loc.wrapping_mul(31))
        & 0xff_ffff)
        | 1
}

/// The writer: write the image into a (free) slot, kill the old entry, switch the index,
/// mark the new one live — `Store::stage` + `Store::publish` in that order.
fn publish(r: &Region, old: Option<usize>, new: usize, version: u64) {
    let slot = &r.slots[new];
    // write_entry: the slot may be a freed one a direct reader is copying.
    fence(Ordering::Release);
    slot[0].store(W2, Ordering::Relaxed);
    slot[1].store(version, Ordering::Relaxed);
    slot[2].store(value_of(version), Ordering::Relaxed);
    let crc = checksum(new as u64, W2, version, value_of(version));
    // mark_dead and mark_live are a load and a Release store (the writer is word 2's only
    // writer), not read-modify-writes: `Store::mark_live`.
    if let Some(o) = old {
        let w2 = &r.slots[o][0];
        w2.store(w2.load(Ordering::Relaxed) & !LIVE, Ordering::Release); // mark_dead
    }
    // The one-word publish.
    r.w.store(new as u64 | (crc << 8), Ordering::Release);
    slot[0].store(slot[0].load(Ordering::Relaxed) | LIVE, Ordering::Release); // mark_live
}

/// `read_entry_direct` in miniature: `None` = stale.
fn read_direct(r: &Region, loc: usize, crc: u64) -> Option<(u64, u64)> {
    let slot = &r.slots[loc];
    let s1 = slot[0].load(Ordering::Acquire);
    if s1 & LIVE == 0 {
        return None;
    }
    let version = slot[1].load(Ordering::Relaxed);
    let value = slot[2].load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    if slot[0].load(Ordering::Relaxed) != s1 {
        return None;
    }
    if checksum(loc as u64, s1, version, value) != crc {
        return None;
    }
    Some((version, value))
}

#[test]
fn a_data_hint_never_returns_a_torn_or_superseded_item() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let r = Arc::new(Region {
            w: AtomicU64::new(0),
            slots: Default::default(),
            v2_published: AtomicBool::new(false),
        });
        publish(&r, None, SLOT_A, 1);
        let hint_crc = checksum(SLOT_A as u64, W2, 1, value_of(1));
        let rw = r.clone();
        let writer = thread::spawn(move || {
            publish(&rw, Some(SLOT_A), SLOT_B, 2);
            rw.v2_published.store(true, Ordering::Release);
            // Slot A is free now: reuse it at once for version 3.
            publish(&rw, Some(SLOT_B), SLOT_A, 3);
        });
        let knew = r.v2_published.load(Ordering::Acquire);
        if let Some((version, value)) = read_direct(&r, SLOT_A, hint_crc) {
            assert_eq!((version, value), (1, value_of(1)), "torn or another image");
            assert!(!knew, "version 1 read after version 2 was published");
        }
        writer.join().unwrap();
        // Afterwards the old hint is stale, and a hint to version 3's image reads it.
        assert_eq!(read_direct(&r, SLOT_A, hint_crc), None);
        let crc3 = checksum(SLOT_A as u64, W2, 3, value_of(3));
        assert_eq!(read_direct(&r, SLOT_A, crc3), Some((3, value_of(3))));
    });
}

/// The same with a hint to version 2 in slot B read while B is killed and A reused:
/// a reader that saw version 3 published must not get version 2.
#[test]
fn a_data_hint_is_stale_once_its_entry_is_replaced() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let r = Arc::new(Region {
            w: AtomicU64::new(0),
            slots: Default::default(),
            v2_published: AtomicBool::new(false),
        });
        publish(&r, None, SLOT_A, 1);
        publish(&r, Some(SLOT_A), SLOT_B, 2);
        let hint_crc = checksum(SLOT_B as u64, W2, 2, value_of(2));
        let rw = r.clone();
        let writer = thread::spawn(move || {
            publish(&rw, Some(SLOT_B), SLOT_A, 3);
            // "v2_published" here means: version 3 replaced it.
            rw.v2_published.store(true, Ordering::Release);
        });
        let replaced = r.v2_published.load(Ordering::Acquire);
        if let Some(got) = read_direct(&r, SLOT_B, hint_crc) {
            assert_eq!(got, (2, value_of(2)));
            assert!(!replaced, "version 2 read after version 3 replaced it");
        }
        writer.join().unwrap();
        assert_eq!(read_direct(&r, SLOT_B, hint_crc), None);
    });
}
