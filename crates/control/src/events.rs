//! The control plane's event log: a bounded ring of what happened to the cluster (a node
//! joined, failed, came back; a spare took over; a drain started or finished; slots moved;
//! memgests came and went), each with the map epoch that recorded it and the plane's time.
//!
//! How it works: every map change goes through `ControlPlane::commit`, so events are derived
//! there by [`diff`]ing the map before and after, rather than by a call at every place that
//! changes the map. One hook cannot be forgotten by the next input someone adds, and the log
//! says exactly what the published maps say (an event never describes a change that was not
//! published). What the diff cannot see it does not invent: why a node failed (lease lapsed
//! or a restart) is told by its incarnation, nothing more.
//!
//! Alternatives rejected: logging in each handler (easy to miss one; the handlers are the
//! part of the plane that changes most), and letting nodes derive events from the maps they
//! receive (a node misses maps while it is down, and each node would tell its own story).
//!
//! Limits: [`EVENTS_MAX`] events are kept (the oldest go first); sequence numbers keep
//! growing, so a reader asking "after seq N" sees a gap when it fell behind. The log lives in
//! the plane's memory: a new etcd leader (or a restarted embedded control plane) starts an
//! empty one (its first event says it resumed).

use crate::map::{ClusterMap, NodeState};
use ringlet_types::{Epoch, NodeId, Slot};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Events kept. A failover of one node is 2–3 events, a rebalance one or two per moved span;
/// 1024 covers hours of an eventful cluster at ~100 bytes each.
pub const EVENTS_MAX: usize = 1024;
/// Events one answer carries at most (the page shows the newest).
pub const EVENTS_ANSWER_MAX: usize = 256;

/// What happened. Node and memgest names are the map's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// The plane started (or a new leader resumed a stored map): earlier events are elsewhere.
    Started {
        resumed: bool,
    },
    /// Placement groups were planned over these nodes.
    Bootstrapped {
        active: Vec<u32>,
    },
    /// A node process joined for the first time.
    NodeJoined {
        node: u32,
        addr: String,
    },
    /// A node's lease lapsed (or it was fenced): it is failed.
    NodeFailed {
        node: u32,
    },
    /// A node came back as a new incarnation (restarted, empty).
    NodeRestarted {
        node: u32,
        incarnation: u64,
        state: String,
    },
    /// A spare took over `replaced`'s placement-group positions (failover, or a drain's
    /// second phase).
    SparePromoted {
        spare: u32,
        replaced: u32,
        failover: bool,
    },
    DrainStarted {
        node: u32,
    },
    /// The draining node's roles moved to a spare; it may be stopped.
    DrainFinished {
        node: u32,
    },
    /// The node stopped leaving without handing over (it failed, or no spare was left).
    DrainCancelled {
        node: u32,
    },
    SlotsMoving {
        first: Slot,
        last: Slot,
        pg: u32,
        data_index: u8,
    },
    /// The move's target copied the span (phase 0 done); its old coordinator now
    /// finishes the writes in flight before the switch.
    SlotsCopied {
        first: Slot,
        last: Slot,
    },
    /// The span changed coordinator (`from` -> `to`); the new cohort rebuilds it.
    SlotsMoved {
        first: Slot,
        last: Slot,
        from: Option<u32>,
        to: Option<u32>,
    },
    MoveCancelled {
        first: Slot,
        last: Slot,
    },
    /// The new coordinator of a moved span holds everything; the old cohort releases it.
    HandoffDone {
        first: Slot,
        last: Slot,
    },
    /// A spare became a data node (new placement groups).
    NodeAdded {
        node: u32,
    },
    RemoveStarted {
        node: u32,
    },
    /// A removed data node is a spare again.
    NodeRemoved {
        node: u32,
    },
    RemoveCancelled {
        node: u32,
    },
    MemgestCreated {
        name: String,
        memgest_kind: String,
    },
    /// Closed to new writes while the plane checks it is empty.
    MemgestClosing {
        name: String,
    },
    /// A drop was refused or given up: the memgest takes writes again.
    MemgestReopened {
        name: String,
    },
    MemgestDropped {
        name: String,
    },
    DefaultMemgest {
        name: String,
    },
}

impl EventKind {
    /// The node the event is about, if one (the page links and colours by it).
    pub fn node(&self) -> Option<u32> {
        match self {
            EventKind::NodeJoined { node, .. }
            | EventKind::NodeFailed { node }
            | EventKind::NodeRestarted { node, .. }
            | EventKind::DrainStarted { node }
            | EventKind::DrainFinished { node }
            | EventKind::DrainCancelled { node }
            | EventKind::NodeAdded { node }
            | EventKind::RemoveStarted { node }
            | EventKind::NodeRemoved { node }
            | EventKind::RemoveCancelled { node } => Some(*node),
            EventKind::SparePromoted { replaced, .. } => Some(*replaced),
            _ => None,
        }
    }

    /// Short snake_case name (the JSON `kind`).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Started { .. } => "started",
            EventKind::Bootstrapped { .. } => "bootstrapped",
            EventKind::NodeJoined { .. } => "node_joined",
            EventKind::NodeFailed { .. } => "node_failed",
            EventKind::NodeRestarted { .. } => "node_restarted",
            EventKind::SparePromoted { .. } => "spare_promoted",
            EventKind::DrainStarted { .. } => "drain_started",
            EventKind::DrainFinished { .. } => "drain_finished",
            EventKind::DrainCancelled { .. } => "drain_cancelled",
            EventKind::SlotsMoving { .. } => "slots_moving",
            EventKind::SlotsCopied { .. } => "slots_copied",
            EventKind::SlotsMoved { .. } => "slots_moved",
            EventKind::MoveCancelled { .. } => "move_cancelled",
            EventKind::HandoffDone { .. } => "handoff_done",
            EventKind::NodeAdded { .. } => "node_added",
            EventKind::RemoveStarted { .. } => "remove_started",
            EventKind::NodeRemoved { .. } => "node_removed",
            EventKind::RemoveCancelled { .. } => "remove_cancelled",
            EventKind::MemgestCreated { .. } => "memgest_created",
            EventKind::MemgestClosing { .. } => "memgest_closing",
            EventKind::MemgestReopened { .. } => "memgest_reopened",
            EventKind::MemgestDropped { .. } => "memgest_dropped",
            EventKind::DefaultMemgest { .. } => "default_memgest",
        }
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
        let opt = |v: &Option<u32>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        match self {
            EventKind::Started { resumed: true } => {
                write!(
                    f,
                    "control plane resumed the stored map (earlier events not kept)"
                )
            }
            EventKind::Started { resumed: false } => write!(f, "control plane started"),
            EventKind::Bootstrapped { active } => {
                write!(f, "cluster bootstrapped over nodes {}", ids(active))
            }
            EventKind::NodeJoined { node, addr } => write!(f, "node {node} joined ({addr})"),
            EventKind::NodeFailed { node } => write!(f, "node {node} failed"),
            EventKind::NodeRestarted {
                node,
                incarnation,
                state,
            } => write!(
                f,
                "node {node} restarted (incarnation {incarnation}), now {state}"
            ),
            EventKind::SparePromoted {
                spare,
                replaced,
                failover,
            } => write!(
                f,
                "spare {spare} took over node {replaced}'s roles ({})",
                if *failover { "failover" } else { "drain" }
            ),
            EventKind::DrainStarted { node } => write!(f, "drain of node {node} started"),
            EventKind::DrainFinished { node } => {
                write!(f, "drain of node {node} finished: it may be stopped")
            }
            EventKind::DrainCancelled { node } => write!(f, "drain of node {node} called off"),
            EventKind::SlotsMoving {
                first,
                last,
                pg,
                data_index,
            } => write!(
                f,
                "slots {first}-{last} moving to group {pg} index {data_index}"
            ),
            EventKind::SlotsMoved {
                first,
                last,
                from,
                to,
            } => write!(
                f,
                "slots {first}-{last} moved from node {} to node {}",
                opt(from),
                opt(to)
            ),
            EventKind::SlotsCopied { first, last } => {
                write!(f, "slots {first}-{last} copied to their target; switching")
            }
            EventKind::MoveCancelled { first, last } => {
                write!(f, "move of slots {first}-{last} called off")
            }
            EventKind::HandoffDone { first, last } => {
                write!(f, "handoff of slots {first}-{last} done")
            }
            EventKind::NodeAdded { node } => write!(f, "node {node} added as a data node"),
            EventKind::RemoveStarted { node } => write!(f, "removal of node {node} started"),
            EventKind::NodeRemoved { node } => write!(f, "node {node} removed (now a spare)"),
            EventKind::RemoveCancelled { node } => {
                write!(f, "removal of node {node} called off")
            }
            EventKind::MemgestCreated { name, memgest_kind } => {
                write!(f, "memgest {name} created ({memgest_kind})")
            }
            EventKind::MemgestClosing { name } => {
                write!(f, "memgest {name} closed for dropping")
            }
            EventKind::MemgestReopened { name } => write!(f, "memgest {name} reopened"),
            EventKind::MemgestDropped { name } => write!(f, "memgest {name} dropped"),
            EventKind::DefaultMemgest { name } => write!(f, "default memgest is now {name}"),
        }
    }
}

/// One recorded event (what travels is its [`StampedEvent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Position in this plane's log, from 1, never reused.
    pub seq: u64,
    /// Epoch of the map that recorded the change (the current epoch for `Started`).
    pub epoch: Epoch,
    /// The plane's clock (the `now_ms` its driver passed to `step`).
    pub at_ms: u64,
    pub kind: EventKind,
}

/// An event with a wall-clock time, as the control service hands it out: the driver knows
/// both its clock and the wall clock, the sans-I/O plane knows neither.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StampedEvent {
    pub seq: u64,
    pub epoch: u64,
    /// Milliseconds since the Unix epoch (estimated: now's wall clock minus the event's age
    /// on the plane's clock).
    pub at_unix_ms: u64,
    /// Human-readable, e.g. `node 2 failed`.
    pub text: String,
    /// The node concerned, if one (named apart from the kinds' own `node` fields, which the
    /// flattened kind also writes).
    pub about_node: Option<u32>,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// `self` stamped with wall-clock time, given the plane's clock and the wall clock now.
    pub fn stamped(&self, now_ms: u64, unix_now_ms: u64) -> StampedEvent {
        StampedEvent {
            seq: self.seq,
            epoch: self.epoch.0,
            at_unix_ms: unix_now_ms.saturating_sub(now_ms.saturating_sub(self.at_ms)),
            text: self.kind.to_string(),
            about_node: self.kind.node(),
            kind: self.kind.clone(),
        }
    }
}

/// The bounded ring.
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    ring: VecDeque<Event>,
    next_seq: u64,
}

impl EventLog {
    /// Append, dropping the oldest past [`EVENTS_MAX`].
    pub fn record(&mut self, at_ms: u64, epoch: Epoch, kind: EventKind) {
        self.next_seq = self.next_seq.saturating_add(1);
        if self.ring.len() >= EVENTS_MAX {
            self.ring.pop_front();
        }
        self.ring.push_back(Event {
            seq: self.next_seq,
            epoch,
            at_ms,
            kind,
        });
    }

    /// Events with `seq > after`, oldest first, at most `max` (the newest of them).
    pub fn after(&self, after: u64, max: usize) -> Vec<Event> {
        let newer: Vec<&Event> = self.ring.iter().filter(|e| e.seq > after).collect();
        let skip = newer.len().saturating_sub(max);
        newer.into_iter().skip(skip).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Sequence number of the newest event (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.next_seq
    }
}

fn state_name(s: NodeState) -> &'static str {
    match s {
        NodeState::Active => "active",
        NodeState::Spare => "spare",
        NodeState::Draining => "draining",
        NodeState::Failed => "failed",
    }
}

/// What changed from `old` to `new`, as events, in a fixed order (nodes by id, then slots,
/// then memgests), so the simulator replays the same log.
pub fn diff(old: &ClusterMap, new: &ClusterMap) -> Vec<EventKind> {
    let mut out = Vec::new();
    if old.placement.is_none() {
        if let Some(p) = &new.placement {
            out.push(EventKind::Bootstrapped {
                active: p.members().iter().map(|n| n.0).collect(),
            });
        }
    }
    // Positions that changed hands: (old holder, new holder), group by group.
    let mut substituted: Vec<(NodeId, NodeId)> = Vec::new();
    let mut added_groups_hold = std::collections::BTreeSet::new();
    if let (Some(op), Some(np)) = (&old.placement, &new.placement) {
        for (i, ng) in np.groups.iter().enumerate() {
            match op.groups.get(i) {
                Some(og) => {
                    for (a, b) in og.iter().zip(ng.iter()) {
                        if a != b && !substituted.contains(&(*a, *b)) {
                            substituted.push((*a, *b));
                        }
                    }
                }
                None => added_groups_hold.extend(ng.iter().copied()),
            }
        }
    }
    for (id, n) in &new.nodes {
        match old.nodes.get(id) {
            None => out.push(EventKind::NodeJoined {
                node: id.0,
                addr: n.addr.clone(),
            }),
            Some(o) if n.incarnation > o.incarnation => {
                if o.state != NodeState::Failed {
                    out.push(EventKind::NodeFailed { node: id.0 });
                }
                out.push(EventKind::NodeRestarted {
                    node: id.0,
                    incarnation: n.incarnation,
                    state: state_name(n.state).to_string(),
                });
            }
            Some(o) if o.state != n.state => match n.state {
                NodeState::Failed => out.push(EventKind::NodeFailed { node: id.0 }),
                NodeState::Active if old.placement.is_some() => {
                    if let Some((replaced, _)) = substituted.iter().find(|(_, b)| b == id) {
                        let failover = new.node_state(*replaced) == Some(NodeState::Failed)
                            || new
                                .nodes
                                .get(replaced)
                                .zip(old.nodes.get(replaced))
                                .is_some_and(|(a, b)| a.incarnation > b.incarnation);
                        out.push(EventKind::SparePromoted {
                            spare: id.0,
                            replaced: replaced.0,
                            failover,
                        });
                    } else if added_groups_hold.contains(id) {
                        out.push(EventKind::NodeAdded { node: id.0 });
                    }
                }
                NodeState::Draining if old.leaving.contains_key(id) => {
                    out.push(EventKind::DrainFinished { node: id.0 })
                }
                NodeState::Spare if old.removing == Some(*id) => {
                    out.push(EventKind::NodeRemoved { node: id.0 })
                }
                _ => {}
            },
            Some(_) => {}
        }
    }
    for id in new.leaving.keys() {
        if !old.leaving.contains_key(id) {
            out.push(EventKind::DrainStarted { node: id.0 });
        }
    }
    for id in old.leaving.keys() {
        let gone = !new.leaving.contains_key(id);
        let state = new.node_state(*id);
        // Finished is told by the node's state change above; a failure by NodeFailed.
        if gone && state == Some(NodeState::Active) {
            out.push(EventKind::DrainCancelled { node: id.0 });
        }
    }
    match (old.removing, new.removing) {
        (None, Some(n)) => out.push(EventKind::RemoveStarted { node: n.0 }),
        (Some(n), None) if new.node_state(n) == Some(NodeState::Active) => {
            out.push(EventKind::RemoveCancelled { node: n.0 })
        }
        _ => {}
    }
    match (old.moving, new.moving) {
        (Some(a), Some(b)) if a.copying && !b.copying => out.push(EventKind::SlotsCopied {
            first: b.first,
            last: b.last,
        }),
        (None, Some(m)) => out.push(EventKind::SlotsMoving {
            first: m.first,
            last: m.last,
            pg: m.pg,
            data_index: m.data_index,
        }),
        (Some(m), None) => {
            let moved = new
                .handoffs
                .iter()
                .any(|h| h.first == m.first && h.last == m.last)
                && !old
                    .handoffs
                    .iter()
                    .any(|h| h.first == m.first && h.last == m.last && h.epoch == new.epoch.0);
            if moved {
                out.push(EventKind::SlotsMoved {
                    first: m.first,
                    last: m.last,
                    from: old.coordinator(m.first).map(|n| n.0),
                    to: new.coordinator(m.first).map(|n| n.0),
                });
            } else {
                out.push(EventKind::MoveCancelled {
                    first: m.first,
                    last: m.last,
                });
            }
        }
        _ => {}
    }
    for h in &old.handoffs {
        let still = new
            .handoffs
            .iter()
            .any(|x| x.first == h.first && x.last == h.last && x.epoch == h.epoch);
        // A handoff replaced by a newer move of an overlapping span is not "done".
        let overlapped = new
            .handoffs
            .iter()
            .any(|x| x.epoch != h.epoch && x.first <= h.last && h.first <= x.last);
        if !still && !overlapped {
            out.push(EventKind::HandoffDone {
                first: h.first,
                last: h.last,
            });
        }
    }
    for (id, g) in &new.memgests {
        match old.memgests.get(id) {
            None => out.push(EventKind::MemgestCreated {
                name: g.name.clone(),
                memgest_kind: g.kind.to_string(),
            }),
            Some(o) if !o.closing && g.closing => out.push(EventKind::MemgestClosing {
                name: g.name.clone(),
            }),
            Some(o) if o.closing && !g.closing => out.push(EventKind::MemgestReopened {
                name: g.name.clone(),
            }),
            Some(_) => {}
        }
    }
    for (id, g) in &old.memgests {
        if !new.memgests.contains_key(id) {
            out.push(EventKind::MemgestDropped {
                name: g.name.clone(),
            });
        }
    }
    if old.default_memgest != new.default_memgest {
        if let Some(g) = new.memgests.get(&new.default_memgest) {
            out.push(EventKind::DefaultMemgest {
                name: g.name.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_answers_after_a_seq() {
        let mut log = EventLog::default();
        for i in 0..(EVENTS_MAX as u32 + 10) {
            log.record(u64::from(i), Epoch(1), EventKind::NodeFailed { node: i });
        }
        assert_eq!(log.len(), EVENTS_MAX);
        assert_eq!(log.last_seq(), EVENTS_MAX as u64 + 10);
        let newest = log.after(0, 3);
        assert_eq!(
            newest.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![
                EVENTS_MAX as u64 + 8,
                EVENTS_MAX as u64 + 9,
                EVENTS_MAX as u64 + 10
            ]
        );
        assert!(log.after(log.last_seq(), 10).is_empty());
        // The oldest ten were dropped.
        assert_eq!(log.after(0, usize::MAX).first().unwrap().seq, 11);
    }

    #[test]
    fn stamped_events_carry_wall_clock_and_text() {
        let e = Event {
            seq: 3,
            epoch: Epoch(9),
            at_ms: 1_000,
            kind: EventKind::NodeFailed { node: 2 },
        };
        let s = e.stamped(4_000, 1_700_000_000_000);
        assert_eq!(s.at_unix_ms, 1_700_000_000_000 - 3_000);
        assert_eq!(s.text, "node 2 failed");
        assert_eq!(s.about_node, Some(2));
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["kind"], "node_failed");
        assert_eq!(v["epoch"], 9);
        let back: StampedEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
