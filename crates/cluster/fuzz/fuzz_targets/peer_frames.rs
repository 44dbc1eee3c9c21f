//! Peer-link frames from untrusted bytes: `ringlet_cluster::wire::decode_stream` must never
//! panic nor allocate beyond the limits (also exercised by the crate's proptests).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ringlet_cluster::wire::decode_stream(data);
});
