//! Fuzz target: SRS encode → erase → reconstruct must be byte-identical within tolerance and
//! must never panic on any shape/pattern. Thin wrapper; the logic is
//! `ringlet_erasure::fuzz_support::reconstruct_roundtrip`, also run by `cargo test`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // An Err would be an unexpected core error: surface it as a crash.
    if let Err(e) = ringlet_erasure::fuzz_support::reconstruct_roundtrip(data) {
        panic!("unexpected error: {e}");
    }
});
