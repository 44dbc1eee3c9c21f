//! Load-based balancing: which slot span to move so the busiest data node sheds load to the
//! idlest (issue 12 item 3; docs/design/cluster-balancer.md). Pure: a map and per-slot load
//! in, at most one move out. The caller (`ringlet node rebalance --by load` once, or the
//! automatic balancer of `ringlet up --auto-balance`) measures, runs the move through
//! [`crate::Input::MoveSlots`], waits for its handoff, measures again.
//!
//! Why one move per plan (Slicer's incremental style, LInK §4.1): load is measured, not known,
//! and a move changes what the next measurement sees (a moved span warms up on its new owner,
//! clients follow MOVED); planning several moves from one measurement stacks up errors. One
//! move, then a fresh window, converges without overshoot, and a budget of moves per minute
//! bounds the churn.
//!
//! The rules:
//! - **Hysteresis.** Nothing moves unless the busiest node is above `mean × (1 + trigger)` and
//!   the cluster carries at least `min_ops` per second (a quiet cluster is balanced enough).
//! - **No overshoot.** A move carries at most half the gap between the busiest and the idlest
//!   node, so after it the receiver is no busier than the giver was: a single hot slot that
//!   carries more than that is left where it is (a slot is the unit of placement; moving it
//!   would only move the hot spot).
//! - **Fewest bytes for the load moved.** Of the spans that carry enough load (at least half of
//!   the target), the shortest is chosen: hot slots move, cold bulk stays.
//! - **Slot share bound.** The receiver may hold at most `max_slot_share` × its fair share of
//!   the slots after the move, so load balancing cannot pile the keyspace (and its memory) on
//!   one node when load is concentrated on a few slots.

use crate::map::{ClusterMap, NodeState};
use crate::rebalance::PlannedMove;
use ringlet_types::{NodeId, Slot, SLOT_COUNT};
use std::collections::BTreeMap;

/// When and how much to move.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BalanceConfig {
    /// Move only when the busiest node carries more than `mean × (1 + trigger)`.
    pub trigger: f64,
    /// Move only when the whole cluster carries at least this many operations per second.
    pub min_ops: f64,
    /// A receiver may end with at most this many times its fair share of slots.
    pub max_slot_share: f64,
}

impl Default for BalanceConfig {
    fn default() -> Self {
        BalanceConfig {
            trigger: 0.25,
            min_ops: 1_000.0,
            max_slot_share: 2.0,
        }
    }
}

/// Why no move was planned (the balancer logs it; `--dry-run` prints it).
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// One move, and the loads it expects before and after.
    Move {
        planned: PlannedMove,
        /// Operations per second the span carried in the window.
        span_ops: f64,
        busiest_ops: f64,
        idlest_ops: f64,
    },
    /// The map has no placement or fewer than two usable data nodes.
    NotPlaced,
    /// Less than [`BalanceConfig::min_ops`] in the whole cluster.
    Quiet { total_ops: f64 },
    /// The busiest node is within the trigger of the mean.
    Balanced { busiest_ops: f64, mean_ops: f64 },
    /// The busiest node's load sits in slots that cannot move without overshooting (a single
    /// hot slot) or without breaking the slot share bound.
    Stuck { busiest: NodeId, reason: String },
}

/// Plan at most one move from per-slot operations per second (`slot_ops[s]` for slot `s`;
/// slots absent from the slice count as idle).
pub fn plan_by_load(map: &ClusterMap, slot_ops: &[f64], cfg: &BalanceConfig) -> Verdict {
    let Some(p) = map.placement.as_ref() else {
        return Verdict::NotPlaced;
    };
    let active: Vec<NodeId> = map
        .nodes
        .iter()
        .filter(|(id, n)| n.state == NodeState::Active && map.removing != Some(**id))
        .map(|(id, _)| *id)
        .collect();
    if active.len() < 2 || map.removing.is_some() {
        return Verdict::NotPlaced;
    }
    let ops = |s: Slot| {
        slot_ops
            .get(usize::from(s))
            .copied()
            .unwrap_or(0.0)
            .max(0.0)
    };
    // Load and slots per coordinating node.
    let mut load: BTreeMap<NodeId, f64> = active.iter().map(|id| (*id, 0.0)).collect();
    for r in &p.ranges {
        if let Some(c) = p.range_coordinator(r) {
            if let Some(l) = load.get_mut(&c) {
                *l += (r.first..=r.last).map(ops).sum::<f64>();
            }
        }
    }
    let slots = p.slots_per_coordinator();
    let total: f64 = load.values().sum();
    if total < cfg.min_ops {
        return Verdict::Quiet { total_ops: total };
    }
    let mean = total / load.len() as f64;
    // Busiest and idlest (ties: lowest id, so plans are deterministic).
    let Some((&from, &hot)) = load
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(a.0)))
    else {
        return Verdict::NotPlaced;
    };
    if hot <= mean * (1.0 + cfg.trigger) {
        return Verdict::Balanced {
            busiest_ops: hot,
            mean_ops: mean,
        };
    }
    let Some((&to, &cold)) = load
        .iter()
        .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(b.0)))
    else {
        return Verdict::NotPlaced;
    };
    // Target: bring the busiest to the mean without pushing the idlest above it; cap: half
    // the gap (beyond it the receiver would end busier than the giver started).
    let target = (hot - mean).min(mean - cold).max(0.0);
    let cap = (hot - cold) / 2.0;
    let fair = f64::from(SLOT_COUNT) / active.len() as f64;
    let room = (fair * cfg.max_slot_share - f64::from(*slots.get(&to).unwrap_or(&0))).floor();
    if room < 1.0 {
        return Verdict::Stuck {
            busiest: from,
            reason: format!(
                "node {to} already holds {:.1}x its fair share of slots",
                cfg.max_slot_share
            ),
        };
    }
    // The receiving pair: a placement group where `to` is a data node, preferring one that
    // also holds `from` (fewer copies change hands when replicas stay put).
    let mut pair: Option<(u32, u8, bool)> = None;
    for (gi, g) in (0u32..).zip(p.groups.iter()) {
        if g.is_empty() {
            continue;
        }
        let Some(j) = g.iter().take(usize::from(p.s)).position(|x| *x == to) else {
            continue;
        };
        let shared = g.contains(&from);
        if pair.is_none_or(|(_, _, s)| shared && !s) {
            pair = Some((gi, j as u8, shared));
        }
    }
    let Some((pg, data_index, _)) = pair else {
        return Verdict::Stuck {
            busiest: from,
            reason: format!("node {to} is a data node of no placement group"),
        };
    };
    // The shortest span inside one of `from`'s ranges carrying between target/2 and cap
    // (two pointers per range: for each left end, the shortest right end reaching target/2).
    let want = target / 2.0;
    let mut best: Option<(u32, f64, Slot, Slot)> = None; // (len, ops, first, last)
    for r in p
        .ranges
        .iter()
        .filter(|r| p.range_coordinator(r) == Some(from))
    {
        let (first, last) = (u32::from(r.first), u32::from(r.last));
        let mut right = first; // exclusive
        let mut sum = 0.0;
        for left in first..=last {
            while right <= last && sum < want {
                sum += ops(right as Slot);
                right += 1;
            }
            if sum < want {
                break;
            }
            let len = right - left;
            if sum <= cap && f64::from(len) <= room {
                let better = match best {
                    None => true,
                    Some((bl, bs, _, _)) => {
                        len < bl || (len == bl && (sum - target).abs() < (bs - target).abs())
                    }
                };
                if better {
                    best = Some((len, sum, left as Slot, (right - 1) as Slot));
                }
            }
            sum -= ops(left as Slot);
        }
    }
    match best {
        Some((_, span_ops, first, last)) => Verdict::Move {
            planned: PlannedMove {
                first,
                last,
                pg,
                data_index,
                from,
                to,
            },
            span_ops,
            busiest_ops: hot,
            idlest_ops: cold,
        },
        None => Verdict::Stuck {
            busiest: from,
            reason: format!(
                "no span of node {from}'s slots carries between {want:.0} and {cap:.0} ops/s \
                 within {room:.0} slots (a single hot slot cannot be split)"
            ),
        },
    }
}

/// Per-slot operations per second between two samples of cumulative per-slot counts taken
/// `secs` apart. A count that went down (a node restarted, a slot changed owner and the
/// counter belongs to a new process) gives no rate for that slot.
pub fn slot_rates(before: &[u64], after: &[u64], secs: f64) -> Vec<f64> {
    let n = usize::from(SLOT_COUNT);
    (0..n)
        .map(|s| {
            let (a, b) = (
                before.get(s).copied().unwrap_or(0),
                after.get(s).copied().unwrap_or(0),
            );
            if secs > 0.0 && b >= a {
                (b - a) as f64 / secs
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::{ControlConfig, ControlPlane, Input};
    use proptest::prelude::*;

    fn cluster(n: u32) -> ClusterMap {
        let mut cp = ControlPlane::new(ControlConfig {
            s: 2,
            d: 1,
            lease_ms: 1000,
            ..ControlConfig::default()
        })
        .unwrap();
        for i in 1..=n {
            cp.step(
                0,
                Input::Join {
                    node: NodeId(i),
                    addr: format!("n{i}"),
                    incarnation: 1,
                },
            );
        }
        cp.step(0, Input::Bootstrap { active: n as usize });
        let map = ClusterMap::clone(cp.map());
        assert!(map.placement.is_some(), "{n} nodes not placed");
        map
    }

    fn per_node(map: &ClusterMap, ops: &[f64]) -> BTreeMap<NodeId, f64> {
        let p = map.placement.as_ref().unwrap();
        let mut out = BTreeMap::new();
        for s in 0..SLOT_COUNT {
            *out.entry(p.coordinator(s).unwrap()).or_insert(0.0) += ops[usize::from(s)];
        }
        out
    }

    #[test]
    fn uniform_load_moves_nothing_and_a_quiet_cluster_neither() {
        let map = cluster(3);
        let even = vec![1.0; usize::from(SLOT_COUNT)];
        assert!(matches!(
            plan_by_load(&map, &even, &BalanceConfig::default()),
            Verdict::Balanced { .. }
        ));
        let quiet = vec![0.01; usize::from(SLOT_COUNT)];
        assert!(matches!(
            plan_by_load(&map, &quiet, &BalanceConfig::default()),
            Verdict::Quiet { .. }
        ));
    }

    #[test]
    fn a_hot_node_sheds_its_hottest_slots_to_the_idlest() {
        let map = cluster(3);
        let p = map.placement.as_ref().unwrap();
        let hot_node = p.coordinator(0).unwrap();
        let mut ops = vec![1.0; usize::from(SLOT_COUNT)];
        // 200 hot slots at the start of node 1's first range carry most of the load.
        for o in ops.iter_mut().take(200) {
            *o = 100.0;
        }
        let Verdict::Move {
            planned, span_ops, ..
        } = plan_by_load(&map, &ops, &BalanceConfig::default())
        else {
            panic!("expected a move");
        };
        assert_eq!(planned.from, hot_node);
        assert_ne!(planned.to, hot_node);
        // Only hot slots: the shortest span carrying enough load.
        assert!(planned.last < 200, "{planned:?}");
        let before = per_node(&map, &ops);
        let hot = before[&planned.from];
        let cold = before[&planned.to];
        assert!(span_ops <= (hot - cold) / 2.0 + 1e-9);
    }

    #[test]
    fn a_single_hot_slot_is_left_alone() {
        let map = cluster(3);
        let mut ops = vec![0.0; usize::from(SLOT_COUNT)];
        ops[5] = 50_000.0;
        let v = plan_by_load(&map, &ops, &BalanceConfig::default());
        assert!(matches!(v, Verdict::Stuck { .. }), "{v:?}");
    }

    proptest! {
        /// Applying the plan's move never makes the busiest node busier or the spread wider,
        /// and never leaves the receiver busier than the giver was.
        #[test]
        fn a_planned_move_narrows_the_spread(
            hot in proptest::collection::vec((0u16..SLOT_COUNT, 1u32..5_000), 1..40),
            base in 0u32..50,
            nodes in 3u32..7,
        ) {
            let map = cluster(nodes);
            let mut ops = vec![f64::from(base); usize::from(SLOT_COUNT)];
            for (s, o) in hot {
                ops[usize::from(s)] += f64::from(o);
            }
            let before = per_node(&map, &ops);
            if let Verdict::Move { planned, span_ops, .. } =
                plan_by_load(&map, &ops, &BalanceConfig::default())
            {
                let mut after = before.clone();
                let moved: f64 = (planned.first..=planned.last).map(|s| ops[usize::from(s)]).sum();
                prop_assert!((moved - span_ops).abs() < 1e-6);
                *after.get_mut(&planned.from).unwrap() -= moved;
                *after.get_mut(&planned.to).unwrap() += moved;
                let max = |m: &BTreeMap<NodeId, f64>| m.values().cloned().fold(f64::MIN, f64::max);
                let min = |m: &BTreeMap<NodeId, f64>| m.values().cloned().fold(f64::MAX, f64::min);
                prop_assert!(max(&after) <= max(&before) + 1e-6);
                prop_assert!(max(&after) - min(&after) <= max(&before) - min(&before) + 1e-6);
                prop_assert!(after[&planned.to] <= before[&planned.from] + 1e-6);
                // The span lies inside one range of the giver.
                let p = map.placement.as_ref().unwrap();
                let r = p.range_of(planned.first).unwrap();
                prop_assert!(r.contains(planned.last));
                prop_assert_eq!(p.range_coordinator(r), Some(planned.from));
            }
        }
    }

    #[test]
    fn rates_from_two_samples() {
        let mut a = vec![0u64; usize::from(SLOT_COUNT)];
        let mut b = a.clone();
        b[3] = 500;
        a[4] = 10; // went down: a restart, no rate
        let r = slot_rates(&a, &b, 2.0);
        assert_eq!(r[3], 250.0);
        assert_eq!(r[4], 0.0);
    }
}
