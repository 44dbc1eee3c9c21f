//! Rebalancing plans: which slot spans to move so every active data node coordinates an equal
//! share of the 16,384 slots (docs/design/cluster-resharding.md). Pure: a map in, moves out;
//! the caller (`ringlet node rebalance`) runs them one at a time through
//! [`crate::Input::MoveSlots`], waiting for each handoff to finish.
//!
//! Why slot counts only: the control plane has per-node bytes and key counts (usage reports)
//! but not per-slot ones, so a byte-balanced plan would be a guess. Equal slots give equal
//! load under uniform keys; load-driven plans need per-slot usage first (not built yet).

use crate::map::{ClusterMap, NodeState};
use ringlet_types::{NodeId, Slot, SLOT_COUNT};
use std::collections::BTreeMap;

/// Moves one plan may hold: a rebalance after adding or removing one node moves about one
/// span per node; far fewer than this.
pub const PLAN_MOVES_MAX: usize = 256;

/// One planned move: slots `first..=last` to the placement pair (`pg`, `data_index`), whose
/// coordinator is `to` (taken from `from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedMove {
    pub first: Slot,
    pub last: Slot,
    pub pg: u32,
    pub data_index: u8,
    pub from: NodeId,
    pub to: NodeId,
}

/// Plan moves that bring every active data node's coordinated slots within one of
/// `16384 / nodes`. Each move lies within one slot range of the map as it will be when the
/// moves before it have run, and goes to a placement group where the receiving node is a
/// data node. Empty when the map is balanced (or not placed).
pub fn plan_rebalance(map: &ClusterMap) -> Vec<PlannedMove> {
    let Some(mut p) = map.placement.clone() else {
        return Vec::new();
    };
    // A node being removed takes no slots and gives all its groups' ranges away.
    let active: Vec<NodeId> = map
        .nodes
        .iter()
        .filter(|(id, n)| n.state == NodeState::Active && map.removing != Some(**id))
        .map(|(id, _)| *id)
        .collect();
    let ec = map
        .memgests
        .values()
        .any(|m| matches!(m.kind, ringlet_types::MemgestKind::Ec { .. }));
    let usable = |g: &Vec<NodeId>| !g.is_empty() && map.removing.is_none_or(|n| !g.contains(&n));
    if active.is_empty() {
        return Vec::new();
    }
    let n = active.len() as u32;
    let total = u32::from(SLOT_COUNT);
    // Balanced: every node holds `base` or `base + 1` slots (`ceil`).
    let base = total / n;
    let ceil = base + u32::from(total % n != 0);
    let mut moves = Vec::new();
    while moves.len() < PLAN_MOVES_MAX {
        let mut have: BTreeMap<NodeId, u32> = active.iter().map(|id| (*id, 0)).collect();
        for (id, c) in p.slots_per_coordinator() {
            if let Some(h) = have.get_mut(&id) {
                *h = c;
            }
        }
        // First every range of a group that holds the node being removed, whole, to the
        // usable pair whose coordinator has the fewest slots.
        let leaving = p
            .ranges
            .iter()
            .copied()
            .find(|r| p.group(r.pg).is_some_and(|g| !usable(&g.to_vec())));
        if let Some(r) = leaving {
            let mut best: Option<(u32, u8, NodeId, u32)> = None;
            for (gi, g) in (0u32..).zip(p.groups.iter()) {
                if !usable(g) {
                    continue;
                }
                for (j, n) in g.iter().take(usize::from(p.s)).enumerate() {
                    // With an ec memgest the span must change coordinator: a move to
                    // another pair of the same node is refused (plane.rs).
                    if ec && p.range_coordinator(&r) == Some(*n) {
                        continue;
                    }
                    let c = *have.get(n).unwrap_or(&u32::MAX);
                    if best.is_none_or(|b| c < b.3) {
                        best = Some((gi, j as u8, *n, c));
                    }
                }
            }
            let Some((pg, data_index, to, _)) = best else {
                break;
            };
            let from = p.range_coordinator(&r).unwrap_or(to);
            if p.assign(r.first, r.last, pg, data_index, 1).is_err() {
                break;
            }
            moves.push(PlannedMove {
                first: r.first,
                last: r.last,
                pg,
                data_index,
                from,
                to,
            });
            continue;
        }
        // Most loaded and least loaded node (ties: lowest id), stop within one slot.
        let Some((&from, &most)) = have
            .iter()
            .max_by_key(|(id, c)| (**c, std::cmp::Reverse(**id)))
        else {
            break;
        };
        let Some((&to, &least)) = have.iter().min_by_key(|(id, c)| (**c, **id)) else {
            break;
        };
        if most <= least.saturating_add(1) {
            break;
        }
        let len_want = most
            .saturating_sub(base)
            .min(ceil.saturating_sub(least))
            .max(1);
        // The receiving pair: a group where `to` is a data node, preferring one that also
        // holds `from` (fewer copies change hands when replicas stay put).
        let mut pair = None;
        for (gi, g) in (0u32..).zip(p.groups.iter()) {
            if !usable(g) {
                continue;
            }
            let Some(j) = g.iter().take(usize::from(p.s)).position(|x| *x == to) else {
                continue;
            };
            let score = u8::from(g.contains(&from));
            if pair.is_none_or(|(_, _, s)| score > s) {
                pair = Some((gi, j as u8, score));
            }
        }
        let Some((pg, data_index, _)) = pair else {
            break;
        };
        // The last span of `from`'s last range, as long as both counts allow.
        let Some(r) = p
            .ranges
            .iter()
            .rev()
            .find(|r| p.range_coordinator(r) == Some(from))
            .copied()
        else {
            break;
        };
        let len = len_want.min(r.len());
        let first = (u32::from(r.last) + 1 - len) as Slot;
        if p.assign(first, r.last, pg, data_index, 1).is_err() {
            break;
        }
        moves.push(PlannedMove {
            first,
            last: r.last,
            pg,
            data_index,
            from,
            to,
        });
    }
    moves
}

/// Why a slot cannot be given to a node ([`pair_for`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    #[error("the cluster has no placement yet")]
    NotPlaced,
    #[error("slot {0} is out of range")]
    BadSlot(Slot),
    #[error("node {0} is not an active data node of any placement group (add it first: `ringlet node add`)")]
    NotADataNode(u32),
}

/// The placement pair (`pg`, `data_index`) to move `slot` to so that `to` coordinates it:
/// the slot's own group if `to` is one of its data nodes (its replicas then stay put),
/// otherwise the lowest-numbered usable group where `to` is a data node, preferring one that
/// also holds the slot's current coordinator (fewer copies change hands). `Ok(None)`: `to`
/// coordinates the slot already. Used by the Redis Cluster resharding commands (`CLUSTER
/// SETSLOT … NODE`, `MIGRATE`), which name a node where Ringlet moves name a pair.
///
/// # Errors
/// No placement, a slot out of range, or `to` not an active data node of any group.
pub fn pair_for(map: &ClusterMap, slot: Slot, to: NodeId) -> Result<Option<(u32, u8)>, PairError> {
    let p = map.placement.as_ref().ok_or(PairError::NotPlaced)?;
    let r = p.range_of(slot).ok_or(PairError::BadSlot(slot))?;
    let from = p.range_coordinator(r);
    if from == Some(to) {
        return Ok(None);
    }
    if map
        .nodes
        .get(&to)
        .is_none_or(|n| n.state != NodeState::Active)
        || map.removing == Some(to)
    {
        return Err(PairError::NotADataNode(to.0));
    }
    let data_index = |g: &[NodeId]| {
        g.iter()
            .take(usize::from(p.s))
            .position(|x| *x == to)
            .map(|j| j as u8)
    };
    if let Some(j) = p.group(r.pg).and_then(data_index) {
        return Ok(Some((r.pg, j)));
    }
    let mut best: Option<(u32, u8, bool)> = None;
    for (gi, g) in (0u32..).zip(p.groups.iter()) {
        if g.is_empty() || map.removing.is_some_and(|n| g.contains(&n)) {
            continue;
        }
        let Some(j) = data_index(g) else { continue };
        let holds_from = from.is_some_and(|f| g.contains(&f));
        if best.is_none_or(|b| holds_from && !b.2) {
            best = Some((gi, j, holds_from));
        }
    }
    best.map(|(pg, j, _)| Some((pg, j)))
        .ok_or(PairError::NotADataNode(to.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::{ControlConfig, ControlPlane, Input};

    fn cluster(n: u32, active: usize) -> ControlPlane {
        let mut cp = ControlPlane::new(ControlConfig::default()).unwrap();
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
        cp.step(0, Input::Bootstrap { active });
        cp
    }

    #[test]
    fn a_balanced_map_plans_nothing() {
        assert!(plan_rebalance(&cluster(3, 3).map().clone()).is_empty());
    }

    #[test]
    fn an_added_node_gets_its_share_and_the_plan_runs() {
        let mut cp = cluster(5, 3);
        for (t, n) in [(1, 4), (2, 5)] {
            cp.step(t, Input::AddNode { node: NodeId(n) });
        }
        let plan = plan_rebalance(&cp.map().clone());
        assert!(!plan.is_empty());
        // Run it through the control plane: each move quiesces (the 3 s limit here),
        // switches, and its handoff is reported done by the new coordinator.
        for (now, m) in (10u64..).zip(plan.iter()) {
            let out = cp.step(
                now,
                Input::MoveSlots {
                    first: m.first,
                    last: m.last,
                    pg: m.pg,
                    data_index: m.data_index,
                    rate_kib_s: 0,
                },
            );
            assert!(
                !out.iter().any(|a| matches!(a, crate::Action::Rejected(_))),
                "{out:?}"
            );
            // Phase 0: the target reports the span copied.
            let epoch = cp.map().moving.unwrap().epoch;
            cp.step(
                now,
                Input::MoveCopied {
                    node: m.to,
                    incarnation: 1,
                    first: m.first,
                    last: m.last,
                    epoch,
                },
            );
            assert!(!cp.map().moving.unwrap().copying);
            let src = cp.map().moving_source().unwrap();
            let inc = cp.map().nodes[&src].incarnation;
            let e = cp.map().epoch;
            cp.step(
                now,
                Input::Quiesced {
                    node: src,
                    incarnation: 1.max(inc),
                    epoch: e,
                },
            );
            assert_eq!(cp.map().coordinator(m.first), Some(m.to));
            cp.step(
                now,
                Input::HandoffDone {
                    node: m.to,
                    incarnation: 1,
                    first: m.first,
                    last: m.last,
                },
            );
            assert!(cp.map().handoffs.is_empty());
        }
        let per = cp.map().placement.as_ref().unwrap().slots_per_coordinator();
        assert_eq!(per.len(), 5);
        for c in per.values() {
            assert!((3276..=3277).contains(c), "{per:?}");
        }
        assert!(plan_rebalance(&cp.map().clone()).is_empty());
        // And back: remove node 5, then node 4.
        for gone in [5u32, 4] {
            let out = cp.step(100, Input::RemoveNode { node: NodeId(gone) });
            assert!(
                !out.iter().any(|a| matches!(a, crate::Action::Rejected(_))),
                "{out:?}"
            );
            assert_eq!(cp.map().removing, Some(NodeId(gone)));
            // Too early: its ranges are still there.
            let out = cp.step(100, Input::RemoveNode { node: NodeId(gone) });
            assert!(
                matches!(
                    out.as_slice(),
                    [crate::Action::Rejected(
                        crate::ControlError::RemovePending { .. }
                    )]
                ),
                "{out:?}"
            );
            let plan = plan_rebalance(&cp.map().clone());
            assert!(plan.iter().all(|m| m.to != NodeId(gone)));
            for m in &plan {
                cp.step(
                    200,
                    Input::MoveSlots {
                        first: m.first,
                        last: m.last,
                        pg: m.pg,
                        data_index: m.data_index,
                        rate_kib_s: 0,
                    },
                );
                let epoch = cp.map().moving.unwrap().epoch;
                cp.step(
                    200,
                    Input::MoveCopied {
                        node: m.to,
                        incarnation: 1,
                        first: m.first,
                        last: m.last,
                        epoch,
                    },
                );
                let src = cp.map().moving_source().unwrap();
                let e = cp.map().epoch;
                cp.step(
                    200,
                    Input::Quiesced {
                        node: src,
                        incarnation: 1,
                        epoch: e,
                    },
                );
                cp.step(
                    200,
                    Input::HandoffDone {
                        node: m.to,
                        incarnation: 1,
                        first: m.first,
                        last: m.last,
                    },
                );
            }
            let out = cp.step(300, Input::RemoveNode { node: NodeId(gone) });
            assert!(
                !out.iter().any(|a| matches!(a, crate::Action::Rejected(_))),
                "{out:?}"
            );
            let m = cp.map();
            assert_eq!(m.node_state(NodeId(gone)), Some(NodeState::Spare));
            assert!(m.removing.is_none());
            assert!(!m
                .placement
                .as_ref()
                .unwrap()
                .members()
                .contains(&NodeId(gone)));
            cp.check_invariants();
        }
        let per = cp.map().placement.as_ref().unwrap().slots_per_coordinator();
        assert_eq!(per.len(), 3, "{per:?}");
        assert!(per.values().all(|c| (5461..=5462).contains(c)), "{per:?}");
        // The removed nodes can come back.
        let out = cp.step(400, Input::AddNode { node: NodeId(4) });
        assert!(
            !out.iter().any(|a| matches!(a, crate::Action::Rejected(_))),
            "{out:?}"
        );
    }

    #[test]
    fn pair_for_names_a_pair_whose_coordinator_is_the_target() {
        let mut cp = cluster(5, 3);
        for (t, n) in [(1, 4), (2, 5)] {
            cp.step(t, Input::AddNode { node: NodeId(n) });
        }
        let map = cp.map().clone();
        let p = map.placement.clone().unwrap();
        for slot in [0u16, 5000, 16383] {
            let owner = p.coordinator(slot).unwrap();
            assert_eq!(pair_for(&map, slot, owner), Ok(None));
            for to in (1..=5).map(NodeId).filter(|n| *n != owner) {
                let (pg, j) = pair_for(&map, slot, to).unwrap().unwrap();
                assert_eq!(
                    p.group(pg).unwrap()[usize::from(j)],
                    to,
                    "slot {slot} to {to:?}"
                );
            }
        }
        assert_eq!(
            pair_for(&map, 0, NodeId(9)),
            Err(PairError::NotADataNode(9))
        );
        // A spare (joined, never added) is not a data node.
        let map = cluster(4, 3).map().clone();
        assert_eq!(
            pair_for(&map, 0, NodeId(4)),
            Err(PairError::NotADataNode(4))
        );
    }
}
