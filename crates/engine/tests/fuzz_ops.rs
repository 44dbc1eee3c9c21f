//! Runs the fuzz target's function over random byte strings, so CI exercises it without
//! cargo-fuzz.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
    #[test]
    fn random_operation_streams(data in prop::collection::vec(any::<u8>(), 0..1200)) {
        ringlet_engine::fuzz_support::run_ops(&data);
    }
}
