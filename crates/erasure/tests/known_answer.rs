//! Known-answer test: the generator coefficients and the parity of fixed data are pinned.
//!
//! Parity is state shared between nodes: a data node computes deltas with one build, a parity
//! holder folds them with another, a spare re-encodes with a third. Builds with and without
//! `simd-accel`, or with a future reed-solomon-erasure, must therefore agree bit for bit. If
//! this test fails after a dependency bump, the on-memory code changed and mixed-version
//! clusters would corrupt parity: do not just update the constants.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use ringlet_erasure::Codec;

fn coefficients(k: u32, m: u32) -> Vec<u8> {
    let c = Codec::new(k, m).unwrap();
    (0..m)
        .flat_map(|q| (0..k).map(move |p| (q, p)))
        .map(|(q, p)| c.coefficient(q, p).unwrap())
        .collect()
}

fn parity_3_2() -> Vec<Vec<u8>> {
    let c = Codec::new(3, 2).unwrap();
    let data: Vec<Vec<u8>> = (0..3u32)
        .map(|d| (0..16u32).map(|i| ((d * 16 + i) * 7 + 1) as u8).collect())
        .collect();
    let mut parity = vec![vec![0u8; 16]; 2];
    c.encode(&data, &mut parity).unwrap();
    parity
}

/// Values from reed-solomon-erasure 6.0.0, identical with and without `simd-accel`
/// (checked with `cargo test --test known_answer` and `--no-default-features`).
#[test]
fn coefficients_and_parity_are_pinned() {
    assert_eq!(coefficients(2, 1), [3, 2]);
    assert_eq!(coefficients(3, 1), [1, 1, 1]); // RS(3, 1) is plain XOR
    assert_eq!(coefficients(3, 2), [1, 1, 1, 15, 8, 6]);
    assert_eq!(
        parity_3_2(),
        [
            [145, 152, 159, 102, 109, 180, 187, 130, 137, 208, 215, 222, 165, 172, 243, 250],
            [220, 213, 210, 152, 147, 13, 2, 6, 13, 206, 201, 192, 252, 245, 74, 67],
        ]
    );
}
