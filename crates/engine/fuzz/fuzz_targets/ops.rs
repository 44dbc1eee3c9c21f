#![no_main]
//! Operation streams against the engine: no panic, invariants hold, reader agrees with writer.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ringlet_engine::fuzz_support::run_ops(data);
});
