//! Control-port frames from untrusted bytes (after the handshake, or on a cluster without a
//! secret): `ringlet_cluster::control::decode_control_stream` drives the connection's own
//! `read_frame` and must never panic nor allocate more than arrived (issue 10: declared
//! lengths commit no memory). Also run by the crate's proptests on every `cargo test`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ringlet_cluster::control::decode_control_stream(data);
});
