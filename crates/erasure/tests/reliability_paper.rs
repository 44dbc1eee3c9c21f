//! Ring appendix A / §3.3 "Reliability of SRS codes": the model reproduces the paper's stated
//! figures and trends.
//!
//! The paper does not print its λ and µ. We use λ = 1/(5 years) (MTTF 43,800 h) and a 6 h
//! rebuild of an RS node's share, a commonplace pair; with it every statement below holds.
//! Exact chain structure (RS(3, 2)'s matrix, SRS(2, 1, 4)'s 2/5) is tested in the unit tests
//! of `reliability.rs`, independent of any rate.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use ringlet_erasure::reliability::{reliability, ModelParams, Reliability};
use ringlet_types::MemgestKind;

const MTTF_H: f64 = 43_800.0;
const REBUILD_H: f64 = 6.0;

fn ec(k: u8, m: u8, s: u32) -> Reliability {
    reliability(
        MemgestKind::Ec { k, m },
        &ModelParams::from_hours(s, MTTF_H, REBUILD_H),
    )
    .unwrap()
}

/// §3.3: "the family of SRS(3, 1, s) codes provides reliability around 3.5 nines for
/// s ∈ {3, 4, 5, 6, 7}" and "stretching maintains approximately the same level of
/// reliability".
#[test]
fn srs_3_1_family_is_about_three_and_a_half_nines() {
    let base = ec(3, 1, 3).nines;
    assert!((3.3..3.7).contains(&base), "RS(3,1): {base}");
    for s in 3..=7 {
        let n = ec(3, 1, s).nines;
        assert!((3.2..3.7).contains(&n), "SRS(3,1,{s}): {n}");
        assert!(
            (n - base).abs() < 0.3,
            "stretching keeps reliability: s={s} {n} vs {base}"
        );
    }
}

/// §3.3: "SRS(3, 2, 6) is more reliable than RS(3, 2)" (data nodes hold half as much, so
/// rebuild twice as fast, and some double data-node failures are survived).
#[test]
fn srs_3_2_6_beats_rs_3_2() {
    let rs = ec(3, 2, 3);
    let srs = ec(3, 2, 6);
    assert!(
        srs.annual_loss_probability < rs.annual_loss_probability,
        "{srs:?} vs {rs:?}"
    );
}

/// A.3: "all RS schemes and their stretched variations have availability less than 3.4
/// nines" and "maximal availability has been observed for the family of SRS(2, 1, s) codes
/// and stands at approximately 3.35 nines".
#[test]
fn availability_below_3_4_nines_and_srs_2_1_family_best() {
    let mut best = (0.0, (0, 0));
    for (k, m) in [(2u8, 1u8), (3, 1), (3, 2), (4, 2)] {
        for s in u32::from(k)..=7 {
            let a = ec(k, m, s).availability_nines;
            assert!(a < 3.4, "SRS({k},{m},{s}) availability {a}");
            if a > best.0 {
                best = (a, (k, m));
            }
        }
    }
    assert_eq!(best.1, (2, 1));
    assert!((best.0 - 3.35).abs() < 0.1, "best availability {}", best.0);
}

/// A.3: "the number of nodes in the stripe decreases the availability" (same M, larger K).
#[test]
fn more_nodes_less_availability() {
    assert!(ec(2, 1, 2).availability > ec(3, 1, 3).availability);
    assert!(ec(3, 2, 3).availability > ec(4, 2, 4).availability);
}

/// A.1 (Eqn. 6): faster rebuild, higher reliability; more parity, higher reliability.
#[test]
fn monotone_in_rebuild_rate_and_parity() {
    let slow = reliability(
        MemgestKind::Ec { k: 3, m: 1 },
        &ModelParams::from_hours(3, MTTF_H, 24.0),
    )
    .unwrap();
    assert!(slow.annual_loss_probability > ec(3, 1, 3).annual_loss_probability);
    assert!(ec(3, 2, 3).nines > ec(3, 1, 3).nines + 2.0);
}

/// `none` over s nodes loses data at the first failure: 1 − e^{−sλ}.
#[test]
fn none_is_one_copy() {
    let r = reliability(
        MemgestKind::None,
        &ModelParams::from_hours(3, MTTF_H, REBUILD_H),
    )
    .unwrap();
    let lambda = 8760.0 / MTTF_H;
    assert!((r.annual_loss_probability - (1.0 - (-3.0 * lambda).exp())).abs() < 1e-9);
    let rep3 = reliability(
        MemgestKind::Rep { r: 3 },
        &ModelParams::from_hours(3, MTTF_H, REBUILD_H),
    )
    .unwrap();
    let rep5 = reliability(
        MemgestKind::Rep { r: 5 },
        &ModelParams::from_hours(3, MTTF_H, REBUILD_H),
    )
    .unwrap();
    assert!(rep3.nines > r.nines + 2.0 && rep5.nines > rep3.nines + 2.0);
    // rep:3 tolerates one failure like ec:2+1 over the same 3-node groups, but keeps data
    // available through it.
    assert!(rep3.availability > ec(2, 1, 3).availability);
}
