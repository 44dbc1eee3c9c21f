#![no_main]
//! The exporter's view of a client byte stream (ACCESS batches and native frames) and HELLO.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ringlet_shm::proto::fuzz_support::decode_client_stream(data);
});
