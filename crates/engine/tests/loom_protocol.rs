//! Loom model of the reader/writer protocol of `read.rs` and `store.rs`, exhaustively over
//! interleavings (and C11 weak-memory behaviours loom simulates).
//!
//! The model is the protocol in miniature (format 5), with loom's atomics instead of a mapped
//! region: one index entry of **one word** (`location | check << 8`, as the real entry packs
//! location, tag and a 24-bit check) and three data slots of four words (a length word standing
//! for the header's word 2, version, value, and an extra word that only long entries have).
//! The index word has no size, so the reader loads the slot's length word first and copies as
//! many words as it says. The writer publishes version 1 (long) into slot A, then version 2
//! (short) into slot B, then frees A and *reuses* it for version 3 (short: a different length,
//! so a reader that raced the reuse may size its copy from either image). The reader runs the
//! real algorithm: Acquire-load the index word, load the length word, copy that many words with
//! Relaxed loads, Acquire fence, require the copy's length word to equal the first load, verify
//! the check, re-load the index word. Every value it accepts must be a committed (version,
//! value) pair whose version is at least the one published before the read began — never a
//! torn mix, never a staged or freed image.
//!
//! This checks the algorithm, not `read.rs` itself: a divergence between this model and the code
//! would not fail it. `stress.rs` runs the real `Reader` (docs/design/engine-layout.md, "What the
//! concurrency tests check, exactly").

use loom::sync::atomic::{fence, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

const SLOT_A: u64 = 1;
const SLOT_B: u64 = 2;

struct Region {
    w: AtomicU64,
    slots: [[AtomicU64; 4]; 3],
}

fn value_of(version: u64) -> u64 {
    version * 1000 + 7
}

/// Body words of a version's entry: odd versions are long (three words), even short (two).
fn len_of(version: u64) -> u64 {
    if version % 2 == 1 {
        3
    } else {
        2
    }
}

/// Stand-in for the 24-bit check over (image, location): any injective-enough mix works for
/// the model; it is kept to 24 bits and never 0 like the real one is not (the real check may
/// be 0: the model's `| 1` only keeps `w != 0` for a published entry).
fn checksum(loc: u64, len: u64, version: u64, value: u64, extra: u64) -> u64 {
    ((version.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ value.rotate_left(17)
        ^ extra.rotate_left(29)
        ^ len.wrapping_mul(0x51_7cc1)
        ^ loc.wrapping_mul(31))
        & 0xff_ffff)
        | 1
}

fn publish(r: &Region, loc: u64, version: u64) {
    let value = value_of(version);
    let len = len_of(version);
    let extra = if len == 3 { version ^ 0x55 } else { 0 };
    let slot = &r.slots[loc as usize];
    slot[0].store(len, Ordering::Relaxed);
    slot[1].store(version, Ordering::Relaxed);
    slot[2].store(value, Ordering::Relaxed);
    if len == 3 {
        slot[3].store(extra, Ordering::Relaxed);
    }
    // The one-word publish.
    r.w.store(
        loc | (checksum(loc, len, version, value, extra) << 8),
        Ordering::Release,
    );
}

/// One attempt of the reader; `None` = torn (retry).
fn read_once(r: &Region) -> Option<Option<(u64, u64)>> {
    let w = r.w.load(Ordering::Acquire);
    if w == 0 {
        return Some(None);
    }
    let loc = w & 0xff;
    let slot = &r.slots[loc as usize];
    let len = slot[0].load(Ordering::Relaxed);
    if !(2..=3).contains(&len) {
        return None;
    }
    // Copy the words the length word names (the length word itself included, as the real
    // copy includes word 2).
    let len_copy = slot[0].load(Ordering::Relaxed);
    let version = slot[1].load(Ordering::Relaxed);
    let value = slot[2].load(Ordering::Relaxed);
    let extra = if len == 3 {
        slot[3].load(Ordering::Relaxed)
    } else {
        0
    };
    fence(Ordering::Acquire);
    if len_copy != len || checksum(loc, len, version, value, extra) != w >> 8 {
        return None;
    }
    if r.w.load(Ordering::Relaxed) != w {
        return None;
    }
    Some(Some((version, value)))
}

#[test]
fn reader_sees_only_committed_values() {
    // A preemption bound of 3 covers the interesting interleavings (a context switch inside
    // the reader's copy, inside the writer's publish, and at the re-check) and keeps the
    // model to seconds in debug builds.
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let slot = || {
            [
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
                AtomicU64::new(0),
            ]
        };
        let r = Arc::new(Region {
            w: AtomicU64::new(0),
            slots: [slot(), slot(), slot()],
        });
        // Version 1 is committed before the reader starts.
        publish(&r, SLOT_A, 1);
        let rw = r.clone();
        let writer = thread::spawn(move || {
            publish(&rw, SLOT_B, 2);
            // Slot A is free now; reuse it at once for version 3.
            publish(&rw, SLOT_A, 3);
        });
        // Two attempts (the real reader retries up to a bound, then reports Retry).
        let mut accepted = None;
        for _ in 0..2 {
            if let Some(got) = read_once(&r) {
                accepted = Some(got);
                break;
            }
        }
        if let Some(got) = accepted {
            let (version, value) = got.expect("a committed key never reads as missing");
            assert!((1..=3).contains(&version), "version {version}");
            assert_eq!(value, value_of(version), "torn: value of another version");
        }
        writer.join().unwrap();
        // After the writer, a read sees the last version.
        assert_eq!(read_once(&r), Some(Some((3, value_of(3)))));
    });
}
