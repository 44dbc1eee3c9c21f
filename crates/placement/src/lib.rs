//! `ringlet-placement`: where a key lives. Pure functions, no I/O, deterministic.
//!
//! ```text
//!  key --CRC16--> slot --ranges--> (placement group, data index) --rotate--> cohort
//!                                                                   |
//!                   rep:R replicas = cohort[0..R]   ec:K+M parity = PG[s..s+M]
//! ```
//!
//! Goals:
//! - build placement groups (PGs) of `s` data + `d` redundant nodes by rotating over the active
//!   node list, so every node is in exactly `s + d` PGs, once at each position: load (as
//!   coordinator), replica memory and parity memory all balance;
//! - assign the 16384 slots to (PG, data index) pairs in contiguous ranges (Redis `CLUSTER
//!   SLOTS` wants ranges) with every node coordinating within one slot of `16384 / n`;
//! - answer cohort, replica and parity questions for a slot;
//! - replace a failed or drained node by a spare *in place* (same PG positions), so nothing
//!   else moves.
//!
//! Non-goals: load-aware rebalancing with hysteresis (the control plane's planner will drive
//! resharding later), erasure stripe layout (crates/erasure).
//!
//! Modules: everything is in this file; `docs/design/cluster-placement.md` explains the why.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use ringlet_types::{key_slot, MemgestKind, NodeId, Slot, SLOT_COUNT};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Largest PG (s + d): a cohort is a PG, and replication beyond 7 buys only latency
/// (matches `ringlet_types::memgest::REP_FACTOR_MAX`); parity needs at most `EC_M_MAX`.
pub const PG_NODES_MAX: usize = 16;

/// Why a placement cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum PlacementError {
    #[error("need s >= 1 data nodes per placement group, got 0")]
    NoDataNodes,
    #[error("placement group of {size} nodes exceeds the maximum {PG_NODES_MAX}")]
    GroupTooLarge { size: usize },
    #[error("need at least {needed} active nodes for s + d = {needed}, got {have}")]
    TooFewNodes { needed: usize, have: usize },
    #[error("node {0} is listed twice")]
    DuplicateNode(NodeId),
    #[error("more than {SLOT_COUNT} (PG, data index) pairs: {pairs}")]
    TooManyPairs { pairs: usize },
    #[error("malformed placement: {0}")]
    Malformed(&'static str),
}

/// Serialized form of [`Placement`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlacementWire {
    pub s: u8,
    pub d: u8,
    pub groups: Vec<Vec<u32>>,
    pub ranges: Vec<SlotRange>,
}

impl From<Placement> for PlacementWire {
    fn from(p: Placement) -> Self {
        PlacementWire {
            s: p.s,
            d: p.d,
            groups: p
                .groups
                .iter()
                .map(|g| g.iter().map(|n| n.0).collect())
                .collect(),
            ranges: p.ranges,
        }
    }
}

impl TryFrom<PlacementWire> for Placement {
    type Error = PlacementError;
    fn try_from(w: PlacementWire) -> Result<Self, Self::Error> {
        if w.groups.len() > usize::from(SLOT_COUNT) || w.ranges.len() > usize::from(SLOT_COUNT) {
            return Err(PlacementError::Malformed("too many groups or ranges"));
        }
        let p = Placement {
            s: w.s,
            d: w.d,
            groups: w
                .groups
                .into_iter()
                .map(|g| g.into_iter().map(NodeId).collect())
                .collect(),
            ranges: w.ranges,
        };
        p.validate()?;
        Ok(p)
    }
}

/// A contiguous, inclusive run of slots owned by one (PG, data index) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    pub first: Slot,
    pub last: Slot,
    /// Index into [`Placement::groups`].
    pub pg: u32,
    /// Position of the coordinator among the PG's data nodes (`0..s`).
    pub data_index: u8,
    /// Epoch of the move that gave the range its pair; 0 while it still has the pair it got
    /// at bootstrap. A node placed at bootstrap serves such a range at once (nothing existed
    /// before it); a moved range is always rebuilt or synced first, whatever the node.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moved: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl SlotRange {
    pub fn contains(&self, slot: Slot) -> bool {
        self.first <= slot && slot <= self.last
    }
    /// Number of slots in the range.
    pub fn len(&self) -> u32 {
        u32::from(self.last)
            .saturating_sub(u32::from(self.first))
            .saturating_add(1)
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Placement groups plus the slot map. What the cluster map ships to nodes and clients.
/// Serialized through [`PlacementWire`] (node ids as plain integers); deserializing validates
/// the structure, so a corrupted map from the wire or etcd is an error, not a panic later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PlacementWire", into = "PlacementWire")]
pub struct Placement {
    /// Data nodes per PG.
    pub s: u8,
    /// Redundant nodes per PG.
    pub d: u8,
    /// Each PG: `s` data nodes then `d` redundant nodes, all distinct.
    pub groups: Vec<Vec<NodeId>>,
    /// Sorted, disjoint, covering `0..SLOT_COUNT`.
    pub ranges: Vec<SlotRange>,
}

/// Build PGs by rotation: PG `i` = `nodes[i], nodes[i+1], ..., nodes[i+s+d-1]` (mod n).
///
/// Why rotation: every node then sits at every PG position exactly once, so it is a data node
/// in `s` PGs and a redundant node in `d` PGs — coordinator load, replica memory and parity
/// memory are equal on all nodes (Ring §5.4 notes the imbalance a fixed layout causes).
///
/// # Errors
/// Too few nodes, duplicates, or an oversized group.
pub fn plan_groups(nodes: &[NodeId], s: u8, d: u8) -> Result<Vec<Vec<NodeId>>, PlacementError> {
    if s == 0 {
        return Err(PlacementError::NoDataNodes);
    }
    let size = usize::from(s).saturating_add(usize::from(d));
    if size > PG_NODES_MAX {
        return Err(PlacementError::GroupTooLarge { size });
    }
    let n = nodes.len();
    if n < size {
        return Err(PlacementError::TooFewNodes {
            needed: size,
            have: n,
        });
    }
    let mut sorted = nodes.to_vec();
    sorted.sort_unstable();
    for w in sorted.windows(2) {
        if let [a, b] = w {
            if a == b {
                return Err(PlacementError::DuplicateNode(*a));
            }
        }
    }
    let mut groups = Vec::with_capacity(n);
    for i in 0..n {
        let mut g = Vec::with_capacity(size);
        for j in 0..size {
            // i + j < 2n, no overflow for any realistic n; `% n` with n >= size >= 1.
            let idx = i.wrapping_add(j).checked_rem(n).unwrap_or(0);
            if let Some(node) = nodes.get(idx) {
                g.push(*node);
            }
        }
        groups.push(g);
    }
    Ok(groups)
}

/// Assign the slots to the `groups.len() * s` (PG, data index) pairs in contiguous ranges.
///
/// Every pair gets `16384 / pairs` slots; the remainder goes one slot each to pairs taken
/// in *rounds by data index* — all PGs' data index 0, then all data index 1, ... Under rotation
/// the nodes at data index `j` over all PGs are a permutation of the nodes, so each round gives
/// each node at most one extra slot and per-node totals differ by at most one.
///
/// # Errors
/// More pairs than slots.
pub fn plan_slots(pg_count: usize, s: u8) -> Result<Vec<SlotRange>, PlacementError> {
    let pairs = pg_count.saturating_mul(usize::from(s));
    let total = usize::from(SLOT_COUNT);
    if pairs == 0 {
        return Err(PlacementError::NoDataNodes);
    }
    if pairs > total {
        return Err(PlacementError::TooManyPairs { pairs });
    }
    let base = total.checked_div(pairs).unwrap_or(0);
    let extra = total.checked_rem(pairs).unwrap_or(0);
    let mut ranges = Vec::with_capacity(pairs);
    let mut next: usize = 0;
    for pg in 0..pg_count {
        for j in 0..usize::from(s) {
            // Rank of this pair in the remainder order (j-major, then pg).
            let rank = j.saturating_mul(pg_count).saturating_add(pg);
            let len = if rank < extra {
                base.saturating_add(1)
            } else {
                base
            };
            let first = next;
            next = next.saturating_add(len);
            let last = next.saturating_sub(1);
            ranges.push(SlotRange {
                first: u16::try_from(first).unwrap_or(SLOT_COUNT - 1),
                last: u16::try_from(last).unwrap_or(SLOT_COUNT - 1),
                pg: u32::try_from(pg).unwrap_or(u32::MAX),
                data_index: u8::try_from(j).unwrap_or(u8::MAX),
                moved: 0,
            });
        }
    }
    debug_assert_eq!(next, total);
    Ok(ranges)
}

impl Placement {
    /// Plan a fresh placement over `nodes` (in the given order).
    ///
    /// # Errors
    /// See [`plan_groups`] and [`plan_slots`].
    pub fn plan(nodes: &[NodeId], s: u8, d: u8) -> Result<Placement, PlacementError> {
        let groups = plan_groups(nodes, s, d)?;
        let ranges = plan_slots(groups.len(), s)?;
        Ok(Placement {
            s,
            d,
            groups,
            ranges,
        })
    }

    /// Index into `ranges` of the range holding `slot`.
    pub fn range_index(&self, slot: Slot) -> Option<usize> {
        let i = self.ranges.partition_point(|r| r.last < slot);
        match self.ranges.get(i) {
            Some(r) if r.contains(slot) => Some(i),
            _ => None,
        }
    }

    /// The range holding `slot`.
    pub fn range_of(&self, slot: Slot) -> Option<&SlotRange> {
        self.range_index(slot).and_then(|i| self.ranges.get(i))
    }

    /// The PG of a range.
    pub fn group(&self, pg: u32) -> Option<&[NodeId]> {
        self.groups
            .get(usize::try_from(pg).ok()?)
            .map(|g| g.as_slice())
    }

    /// Coordinator of a range: the PG's data node at `data_index`.
    pub fn range_coordinator(&self, r: &SlotRange) -> Option<NodeId> {
        self.group(r.pg)?.get(usize::from(r.data_index)).copied()
    }

    /// Cohort of a range: the coordinator, then the rest of the PG in cyclic order after it.
    ///
    /// Why cyclic rather than "PG order skipping the coordinator": with cyclic order the
    /// second replica of the coordinator at data index `j` is the node at PG position `j+1`,
    /// so replica load is spread over positions `1..=s` instead of always landing on
    /// position 0 or 1 of the PG.
    pub fn range_cohort(&self, r: &SlotRange) -> Vec<NodeId> {
        let Some(g) = self.group(r.pg) else {
            return Vec::new();
        };
        let start = usize::from(r.data_index);
        let n = g.len();
        (0..n)
            .filter_map(|k| {
                let idx = start.wrapping_add(k).checked_rem(n)?;
                g.get(idx).copied()
            })
            .collect()
    }

    /// Coordinator of `slot`.
    pub fn coordinator(&self, slot: Slot) -> Option<NodeId> {
        self.range_of(slot).and_then(|r| self.range_coordinator(r))
    }

    /// Cohort of `slot`.
    pub fn cohort(&self, slot: Slot) -> Vec<NodeId> {
        self.range_of(slot)
            .map(|r| self.range_cohort(r))
            .unwrap_or_default()
    }

    /// Coordinator of `key`.
    pub fn key_coordinator(&self, key: &[u8]) -> Option<NodeId> {
        self.coordinator(key_slot(key))
    }

    /// Nodes holding a copy of a `slot`'s key under `kind`: `none` → coordinator;
    /// `rep:R` → the first R cohort members; `ec:K+M` → the coordinator (data) then the PG's
    /// first M redundant nodes (parity).
    pub fn holders(&self, slot: Slot, kind: MemgestKind) -> Vec<NodeId> {
        let Some(r) = self.range_of(slot) else {
            return Vec::new();
        };
        match kind {
            MemgestKind::None => self.range_coordinator(r).into_iter().collect(),
            MemgestKind::Rep { r: factor } => {
                let mut c = self.range_cohort(r);
                c.truncate(usize::from(factor));
                c
            }
            MemgestKind::Ec { m, .. } => {
                let mut v: Vec<NodeId> = self.range_coordinator(r).into_iter().collect();
                v.extend(self.parity(r.pg, m));
                v
            }
        }
    }

    /// The PG's first `m` redundant nodes: parity holders of `ec:K+M`.
    pub fn parity(&self, pg: u32, m: u8) -> Vec<NodeId> {
        self.group(pg)
            .map(|g| {
                g.iter()
                    .skip(usize::from(self.s))
                    .take(usize::from(m))
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every node named in some PG, sorted and deduplicated.
    pub fn members(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.groups.iter().flatten().copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Replace `old` by `new` at every PG position `old` holds. Returns how many positions
    /// changed. Nothing else moves: the slot ranges and every other node keep their roles.
    ///
    /// # Panics
    /// If `new` already is in a PG (a caller bug: the control plane only substitutes spares).
    pub fn substitute(&mut self, old: NodeId, new: NodeId) -> usize {
        assert!(
            !self.groups.iter().flatten().any(|n| *n == new),
            "substitute: {new} already holds a PG position"
        );
        let mut changed: usize = 0;
        for n in self.groups.iter_mut().flatten() {
            if *n == old {
                *n = new;
                changed = changed.saturating_add(1);
            }
        }
        changed
    }

    /// Reassign slots `first..=last` to the pair (`pg`, `data_index`), splitting the ranges
    /// they fall in. Neighbouring ranges are never merged: a node's replica core matches its
    /// new ranges to the old ones by containment, and a merge would make a range that no old
    /// range contains (docs/design/cluster-resharding.md).
    ///
    /// # Errors
    /// `Malformed` for an empty or out-of-bounds span, a missing PG or data index.
    pub fn assign(
        &mut self,
        first: Slot,
        last: Slot,
        pg: u32,
        data_index: u8,
        epoch: u64,
    ) -> Result<(), PlacementError> {
        use PlacementError::Malformed;
        if first > last || last >= SLOT_COUNT {
            return Err(Malformed("slot span empty or out of bounds"));
        }
        if self.group(pg).is_none_or(|g| g.is_empty()) || data_index >= self.s {
            return Err(Malformed("assignment names a missing PG or data index"));
        }
        let mut out = Vec::with_capacity(self.ranges.len().saturating_add(2));
        for r in &self.ranges {
            if r.last < first || r.first > last {
                out.push(*r);
                continue;
            }
            if r.first < first {
                out.push(SlotRange {
                    last: first.saturating_sub(1),
                    ..*r
                });
            }
            if r.first <= first {
                out.push(SlotRange {
                    first,
                    last,
                    pg,
                    data_index,
                    moved: epoch,
                });
            }
            if r.last > last {
                out.push(SlotRange {
                    first: last.saturating_add(1),
                    ..*r
                });
            }
        }
        let before = std::mem::replace(&mut self.ranges, out);
        self.validate().inspect_err(|_| self.ranges = before)
    }

    /// Append placement groups (a node joined: the groups that contain it). Existing group
    /// indices never change, so ranges and erasure-coded arenas keep naming the same group.
    ///
    /// # Errors
    /// A group of the wrong size, with repeated members, or too many groups.
    pub fn add_groups(&mut self, groups: Vec<Vec<NodeId>>) -> Result<(), PlacementError> {
        if self.groups.len().saturating_add(groups.len()) > usize::from(SLOT_COUNT) {
            return Err(PlacementError::Malformed("too many placement groups"));
        }
        let n = self.groups.len();
        self.groups.extend(groups);
        self.validate().inspect_err(|_| self.groups.truncate(n))
    }

    /// Retire group `pg` (a node is leaving the data nodes): its member list is emptied but
    /// its index stays, so every other group, range and arena keeps its number.
    ///
    /// # Errors
    /// A range still names the group.
    pub fn retire_group(&mut self, pg: u32) -> Result<(), PlacementError> {
        if self.ranges.iter().any(|r| r.pg == pg) {
            return Err(PlacementError::Malformed(
                "a slot range still names the group",
            ));
        }
        if let Some(g) = usize::try_from(pg)
            .ok()
            .and_then(|i| self.groups.get_mut(i))
        {
            g.clear();
        }
        Ok(())
    }

    /// Index of the group with exactly these members in this order, if any.
    pub fn group_index(&self, group: &[NodeId]) -> Option<u32> {
        self.groups
            .iter()
            .position(|g| g.as_slice() == group)
            .and_then(|i| u32::try_from(i).ok())
    }

    /// Slots coordinated by each node.
    pub fn slots_per_coordinator(&self) -> std::collections::BTreeMap<NodeId, u32> {
        let mut m = std::collections::BTreeMap::new();
        for r in &self.ranges {
            if let Some(c) = self.range_coordinator(r) {
                let e = m.entry(c).or_insert(0u32);
                *e = e.saturating_add(r.len());
            }
        }
        m
    }

    /// Structural checks: PG shape and distinctness; ranges sorted, disjoint, covering.
    ///
    /// # Errors
    /// `Malformed` naming the first broken rule.
    pub fn validate(&self) -> Result<(), PlacementError> {
        use PlacementError::Malformed;
        if self.s == 0 {
            return Err(PlacementError::NoDataNodes);
        }
        let size = usize::from(self.s).saturating_add(usize::from(self.d));
        if size > PG_NODES_MAX {
            return Err(PlacementError::GroupTooLarge { size });
        }
        for g in &self.groups {
            if g.is_empty() {
                continue; // retired (Placement::retire_group): kept so indices never shift
            }
            if g.len() != size {
                return Err(Malformed("PG size differs from s + d"));
            }
            let mut s = g.clone();
            s.sort_unstable();
            s.dedup();
            if s.len() != size {
                return Err(Malformed("PG members not distinct"));
            }
        }
        let mut expect: u32 = 0;
        for r in &self.ranges {
            if u32::from(r.first) != expect || r.first > r.last {
                return Err(Malformed("slot ranges not contiguous"));
            }
            let live_group = usize::try_from(r.pg)
                .ok()
                .and_then(|p| self.groups.get(p))
                .is_some_and(|g| !g.is_empty());
            if !live_group || r.data_index >= self.s {
                return Err(Malformed("slot range names a missing PG or data index"));
            }
            expect = u32::from(r.last).saturating_add(1);
        }
        if expect != u32::from(SLOT_COUNT) {
            return Err(Malformed("slot ranges do not cover all slots"));
        }
        Ok(())
    }

    /// [`Placement::validate`], as an assertion.
    ///
    /// # Panics
    /// On a broken invariant (a bug in the planner or a corrupted map).
    pub fn check_invariants(&self) {
        if let Err(e) = self.validate() {
            panic!("placement invariant broken: {e}");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn ids(n: u32) -> Vec<NodeId> {
        (1..=n).map(NodeId).collect()
    }

    #[test]
    fn rotation_groups() {
        let g = plan_groups(&ids(4), 2, 1).unwrap();
        assert_eq!(g.len(), 4);
        assert_eq!(g[0], vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(g[3], vec![NodeId(4), NodeId(1), NodeId(2)]);
    }

    #[test]
    fn assign_splits_and_keeps_cover() {
        let mut p = Placement::plan(&ids(4), 2, 1).unwrap();
        let before = p.ranges.len();
        let r0 = p.ranges[0];
        p.assign(r0.first + 10, r0.first + 19, 3, 1, 7).unwrap();
        assert_eq!(p.range_of(r0.first + 10).unwrap().moved, 7);
        assert_eq!(p.range_of(r0.first).unwrap().moved, 0);
        assert_eq!(p.ranges.len(), before + 2);
        assert_eq!(p.coordinator(r0.first + 10), Some(p.groups[3][1]));
        assert_eq!(p.coordinator(r0.first + 9), p.range_coordinator(&r0));
        assert_eq!(p.coordinator(r0.first + 20), p.range_coordinator(&r0));
        // A span across two ranges replaces both parts.
        let a = p.ranges[3];
        p.assign(a.last - 1, a.last + 1, 0, 0, 8).unwrap();
        assert_eq!(p.coordinator(a.last), Some(p.groups[0][0]));
        assert_eq!(p.coordinator(a.last + 1), Some(p.groups[0][0]));
        p.check_invariants();
        assert!(p.assign(5, 4, 0, 0, 9).is_err());
        assert!(p.assign(0, 1, 99, 0, 9).is_err());
        assert!(p.assign(0, 1, 0, 2, 9).is_err());
        assert!(p.assign(0, SLOT_COUNT, 0, 0, 9).is_err());
    }

    #[test]
    fn add_groups_checks_shape() {
        let mut p = Placement::plan(&ids(3), 2, 1).unwrap();
        p.add_groups(vec![vec![NodeId(4), NodeId(1), NodeId(2)]])
            .unwrap();
        assert_eq!(p.group_index(&[NodeId(4), NodeId(1), NodeId(2)]), Some(3));
        assert!(p
            .add_groups(vec![vec![NodeId(4), NodeId(4), NodeId(2)]])
            .is_err());
    }

    #[test]
    fn errors() {
        assert_eq!(
            plan_groups(&ids(2), 2, 1),
            Err(PlacementError::TooFewNodes { needed: 3, have: 2 })
        );
        assert_eq!(plan_groups(&ids(3), 0, 1), Err(PlacementError::NoDataNodes));
        assert_eq!(
            plan_groups(&[NodeId(1), NodeId(1), NodeId(2)], 1, 1),
            Err(PlacementError::DuplicateNode(NodeId(1)))
        );
    }

    #[test]
    fn holders_by_memgest() {
        let p = Placement::plan(&ids(5), 3, 2).unwrap();
        p.check_invariants();
        let slot = 0;
        let cohort = p.cohort(slot);
        assert_eq!(cohort.len(), 5);
        assert_eq!(p.holders(slot, MemgestKind::None), vec![cohort[0]]);
        assert_eq!(
            p.holders(slot, MemgestKind::Rep { r: 3 }),
            cohort[..3].to_vec()
        );
        let r = p.range_of(slot).unwrap();
        let g = p.group(r.pg).unwrap();
        assert_eq!(
            p.holders(slot, MemgestKind::Ec { k: 2, m: 2 }),
            vec![cohort[0], g[3], g[4]]
        );
    }

    #[test]
    fn substitute_keeps_everything_else() {
        let mut p = Placement::plan(&ids(5), 2, 1).unwrap();
        let before = p.clone();
        let n = p.substitute(NodeId(3), NodeId(9));
        assert_eq!(n, 3);
        p.check_invariants();
        assert_eq!(p.ranges, before.ranges);
        for (a, b) in p
            .groups
            .iter()
            .flatten()
            .zip(before.groups.iter().flatten())
        {
            if *b == NodeId(3) {
                assert_eq!(*a, NodeId(9));
            } else {
                assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn key_routing_matches_slot() {
        let p = Placement::plan(&ids(3), 1, 2).unwrap();
        assert_eq!(p.key_coordinator(b"foo"), p.coordinator(12182));
    }
}
