//! Fuzz target: thin wrapper over `ringlet_codec::fuzz_support::native_decode_stream`, which asserts the decode
//! properties (never panic, progress, limits, canonical re-encoding). `cargo test -p
//! ringlet-codec` runs the same function over random bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ringlet_codec::fuzz_support::native_decode_stream(data);
});
