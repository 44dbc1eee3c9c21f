//! Property tests: for any node count and PG shape, PGs are distinct and balanced, and every
//! node coordinates within one slot of the ideal `16384 / n`.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use proptest::prelude::*;
use ringlet_placement::Placement;
use ringlet_types::{NodeId, SLOT_COUNT};
use std::collections::BTreeMap;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn balanced_and_distinct(n in 1usize..40, s in 1u8..6, d in 0u8..4, shuffle in any::<u64>()) {
        prop_assume!(usize::from(s) + usize::from(d) <= n);
        // Arbitrary node ids in an arbitrary order.
        let mut nodes: Vec<NodeId> = (0..n as u32).map(|i| NodeId(i * 7 + 3)).collect();
        let mut x = shuffle;
        for i in (1..nodes.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            nodes.swap(i, (x >> 33) as usize % (i + 1));
        }
        let p = Placement::plan(&nodes, s, d).unwrap();
        p.check_invariants();

        // Coordinator slots within 1 of ideal.
        let per = p.slots_per_coordinator();
        prop_assert_eq!(per.len(), n);
        let ideal_lo = u32::from(SLOT_COUNT) / n as u32;
        for c in per.values() {
            prop_assert!(*c == ideal_lo || *c == ideal_lo + 1, "count {} ideal {}", c, ideal_lo);
        }
        // Every node at every PG position exactly once.
        let size = usize::from(s) + usize::from(d);
        let mut pos: BTreeMap<(NodeId, usize), u32> = BTreeMap::new();
        for g in &p.groups {
            for (i, node) in g.iter().enumerate() {
                *pos.entry((*node, i)).or_default() += 1;
            }
        }
        prop_assert_eq!(pos.len(), n * size);
        prop_assert!(pos.values().all(|c| *c == 1));
        // Cohorts are permutations of their PG starting with the coordinator.
        for r in &p.ranges {
            let c = p.range_cohort(r);
            prop_assert_eq!(c[0], p.range_coordinator(r).unwrap());
            let mut a = c.clone(); a.sort();
            let mut b = p.group(r.pg).unwrap().to_vec(); b.sort();
            prop_assert_eq!(a, b);
        }
        // Lookups agree with ranges.
        for slot in [0u16, 1, 8191, 16383] {
            let r = p.range_of(slot).unwrap();
            prop_assert!(r.contains(slot));
        }
    }
}
