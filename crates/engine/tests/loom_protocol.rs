//! Loom model of the reader/writer protocol of `read.rs` and `store.rs`, exhaustively over
//! interleavings (and C11 weak-memory behaviours loom simulates).
//!
//! The model is the protocol in miniature, with loom's atomics instead of a mapped region:
//! one index entry (word 0 = location, word 1 = checksum) and two data slots of two words
//! (version, value). The writer publishes version 1 into slot A, then version 2 into slot B,
//! then frees A and *reuses* it for version 3 (the slot-reuse race that makes entries tear).
//! The reader runs the real algorithm: Acquire-load both index words, copy the slot with Relaxed
//! loads, Acquire fence, re-check the index words, verify the checksum. Every value it accepts
//! must be a committed (version, value) pair whose version is at least the one published before
//! the read began — never a torn mix, never a staged or freed image.
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
    w0: AtomicU64,
    w1: AtomicU64,
    slots: [[AtomicU64; 2]; 3],
}

fn value_of(version: u64) -> u64 {
    version * 1000 + 7
}

/// Stand-in for CRC-32C over (image, location): any injective-enough mix works for the model.
fn checksum(loc: u64, version: u64, value: u64) -> u64 {
    (version.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ value.rotate_left(17) ^ loc.wrapping_mul(31)) | 1
}

fn publish(r: &Region, loc: u64, version: u64) {
    let value = value_of(version);
    let slot = &r.slots[loc as usize];
    slot[0].store(version, Ordering::Relaxed);
    slot[1].store(value, Ordering::Relaxed);
    r.w1.store(checksum(loc, version, value), Ordering::Release);
    r.w0.store(loc, Ordering::Release);
}

/// One attempt of the reader; `None` = torn (retry).
fn read_once(r: &Region) -> Option<Option<(u64, u64)>> {
    let w0 = r.w0.load(Ordering::Acquire);
    if w0 == 0 {
        return Some(None);
    }
    let w1 = r.w1.load(Ordering::Acquire);
    let slot = &r.slots[w0 as usize];
    let version = slot[0].load(Ordering::Relaxed);
    let value = slot[1].load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    if checksum(w0, version, value) != w1 {
        return None;
    }
    if r.w0.load(Ordering::Relaxed) != w0 || r.w1.load(Ordering::Relaxed) != w1 {
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
        let r = Arc::new(Region {
            w0: AtomicU64::new(0),
            w1: AtomicU64::new(0),
            slots: [
                [AtomicU64::new(0), AtomicU64::new(0)],
                [AtomicU64::new(0), AtomicU64::new(0)],
                [AtomicU64::new(0), AtomicU64::new(0)],
            ],
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
