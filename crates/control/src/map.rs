//! The cluster map: nodes, placement, memgests, epoch. Everything a node or client needs to
//! route and to know its roles. Immutable once published (shared as `Arc<ClusterMap>`).

use ringlet_placement::{Placement, PlacementError};
use ringlet_types::{Epoch, MemgestId, MemgestKind, NodeId, Slot};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// Most memgests in one cluster. Ids are u16 on every index entry; 1024 named schemes is far
/// beyond any real deployment and bounds a map's size.
pub const MEMGESTS_MAX: usize = 1024;
/// Most nodes in one cluster map: bounds a decoded map (etcd values are limited to ~1.5 MiB).
pub const NODES_MAX: usize = 4096;
/// Longest memgest name or node address.
pub const NAME_BYTES_MAX: usize = 256;

/// Lifecycle of a node in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeState {
    /// Holds PG positions and serves them.
    Active,
    /// Running, no role; ready to take over.
    Spare,
    /// Its roles went to a spare; still running so the spare can pull its data.
    Draining,
    /// Lease lapsed or restarted: fenced. May still sit in PGs until a spare is available.
    Failed,
}

/// One node of the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub addr: String,
    pub state: NodeState,
    /// Bumped on every restart: a new incarnation comes back empty.
    pub incarnation: u64,
    /// Epoch at which the node took its current PG positions. Equal to
    /// [`ClusterMap::placed_epoch`] for nodes placed at bootstrap: those start serving at once
    /// (no data existed before them); any later taker of a position must first rebuild/sync.
    pub roles_epoch: Epoch,
}

/// One memgest of the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemgestInfo {
    pub name: String,
    pub kind: MemgestKind,
    pub evictable: bool,
    /// Being dropped (`MEMGEST DROP`, docs/design/memgest-commands.md): front ends refuse new
    /// writes naming it while the control plane checks that no node still holds keys of it.
    /// Existing keys stay readable and keep their scheme.
    pub closing: bool,
    /// Some coordinator may have written a key of this memgest ([`crate::Input::MarkWritten`],
    /// set before the first write of a replicated or erasure-coded memgest starts, never
    /// cleared). While false no write of it was ever acknowledged, so a rebuild need not wait
    /// for a majority of its old replicas (or a handed-off span's old coordinator): a memgest
    /// with nothing in it takes over at once after a failure beyond its tolerance (issue 10,
    /// case 6). ec memgests take the mark since session 16; a map persisted before that may
    /// hold ec data with the mark unset (the next write of it sets the mark).
    pub written: bool,
}

/// A map that fails validation.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MapError {
    #[error("placement: {0}")]
    Placement(#[from] PlacementError),
    #[error("bad memgest descriptor: {0}")]
    Memgest(String),
    #[error("malformed map: {0}")]
    Malformed(&'static str),
}

/// The cluster map. `epoch` orders maps; a node or client holding an older one refreshes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ClusterMapWire", into = "ClusterMapWire")]
pub struct ClusterMap {
    pub epoch: Epoch,
    pub nodes: BTreeMap<NodeId, NodeInfo>,
    /// `None` until the cluster is bootstrapped.
    pub placement: Option<Placement>,
    pub memgests: BTreeMap<MemgestId, MemgestInfo>,
    pub default_memgest: MemgestId,
    /// Epoch of the bootstrap plan (0 before bootstrap).
    pub placed_epoch: Epoch,
    /// Nodes asked to drain that still hold their roles (drain phase 1), with the epoch of
    /// the request. Such a node refuses new writes (`Busy`, retried by clients) and finishes
    /// those in flight; once it reports none left for that epoch (or after
    /// `plane::DRAIN_QUIESCE_MS_MAX`) its roles move to a spare. Handing over with nothing in
    /// flight is what lets a drain fail no client operation (docs/design/cluster-drain.md).
    pub leaving: BTreeMap<NodeId, Epoch>,
    /// A slot span on its way to another (PG, data index) pair (resharding phase 1, docs/
    /// design/cluster-resharding.md): its coordinator refuses new writes to it (`Busy`,
    /// retried by clients) and finishes those in flight, then reports `Quiesced`; the span
    /// is reassigned on that report or after `plane::DRAIN_QUIESCE_MS_MAX`. One at a time.
    pub moving: Option<SlotMove>,
    /// Spans reassigned by a move, newest last, with the pair they came from: the new
    /// cohort rebuilds from the old one (which keeps the data until released). Bounded by
    /// [`HANDOFFS_MAX`]; an entry goes when a later move overlaps it.
    pub handoffs: Vec<Handoff>,
    /// A data node on its way out (`ringlet node remove`): groups without it were added, no
    /// move may target a group holding it, and once no slot range or handoff uses such a
    /// group it becomes a spare and those groups are retired.
    pub removing: Option<NodeId>,
    /// ACL users other than `default` (each node's own, from its `--requirepass`): name →
    /// rules as `ACL LIST` describes them, passwords as SHA-256 only
    /// (`ringlet_command::acl::User::describe`). Changed by `ACL SETUSER`/`DELUSER` on any
    /// node through the control plane, so every node — one that joins later too — serves
    /// the same users (docs/design/acl.md). Never sent to clients ([`ClusterMap::for_client`]).
    pub users: BTreeMap<String, String>,
    /// Bumped by every change of `users`: a node rebuilds its user table only when it moves.
    pub users_version: u64,
}

/// Handoff records kept in a map: far more than the moves a rebalance makes at once (one per
/// slot range a node gives away), and small (a few dozen bytes of JSON each).
pub const HANDOFFS_MAX: usize = 4096;

/// Resharding phase 1: slots `first..=last` are about to move to (`pg`, `data_index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotMove {
    pub first: Slot,
    pub last: Slot,
    pub pg: u32,
    pub data_index: u8,
    /// Epoch of the map that started the move: a quiesce report must be at least as new.
    pub epoch: u64,
    /// Copy rate limit of the move in KiB/s (`--rate`), 0 = unlimited. Carried into the
    /// span's [`Handoff`]: the new coordinator paces its rebuild pulls by it.
    #[serde(default)]
    pub rate_kib_s: u32,
    /// Phase 0 (copy before the switch): the old coordinator keeps serving reads and writes
    /// of the span while the target pair's coordinator copies it (snapshot, then one
    /// catch-up pass); the target reports it (`plane::Input::MoveCopied`), and the move
    /// turns into phase 1 (`copying = false`, the quiesce). A map from before
    /// phase 0 existed decodes as phase 1.
    #[serde(default)]
    pub copying: bool,
    /// The span's coordinator and the target pair's coordinator when the move started
    /// (node ids; 0 in maps from before phase 0): a copying move whose source or target is
    /// no longer that node, or no longer Active, is called off (the old owner never stopped
    /// serving, and the target purges its partial copy).
    #[serde(default)]
    pub source: u32,
    #[serde(default)]
    pub target: u32,
}

/// A span that moved at `epoch` from (`from_pg`, `from_data_index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub first: Slot,
    pub last: Slot,
    pub from_pg: u32,
    pub from_data_index: u8,
    pub epoch: u64,
    /// Rebuild pull rate limit in KiB/s, 0 = unlimited (from the move's [`SlotMove`]).
    #[serde(default)]
    pub rate_kib_s: u32,
    /// The span's coordinator at the switch and its incarnation (0: not recorded, maps
    /// from before ec moves). A node at the old pair that is not this one replaced it:
    /// it holds the span's ec values (decoded from the old group's parity) and nothing
    /// else, and the new coordinator asks it for those only.
    #[serde(default)]
    pub source: u32,
    #[serde(default)]
    pub source_incarnation: u64,
}

impl Default for ClusterMap {
    fn default() -> Self {
        let mut memgests = BTreeMap::new();
        memgests.insert(
            MemgestId::NONE,
            MemgestInfo {
                name: "none".into(),
                kind: MemgestKind::None,
                evictable: true,
                closing: false,
                written: false,
            },
        );
        ClusterMap {
            epoch: Epoch(0),
            nodes: BTreeMap::new(),
            placement: None,
            memgests,
            default_memgest: MemgestId::NONE,
            placed_epoch: Epoch(0),
            leaving: BTreeMap::new(),
            moving: None,
            handoffs: Vec::new(),
            removing: None,
            users: BTreeMap::new(),
            users_version: 0,
        }
    }
}

impl ClusterMap {
    /// This map as a client may see it: without the ACL users (their password hashes are
    /// for the nodes that check them).
    pub fn for_client(&self) -> ClusterMap {
        let mut m = self.clone();
        m.users.clear();
        m
    }

    /// Coordinator of `slot`, if placed.
    pub fn coordinator(&self, slot: Slot) -> Option<NodeId> {
        self.placement.as_ref()?.coordinator(slot)
    }

    /// The node that coordinates the span being moved (it must quiesce before the switch).
    pub fn moving_source(&self) -> Option<NodeId> {
        self.coordinator(self.moving?.first)
    }

    /// Whether `slot` is in the span being moved and past its copy (phase 1: its
    /// coordinator refuses new writes to it and quiesces).
    pub fn is_moving(&self, slot: Slot) -> bool {
        self.moving
            .is_some_and(|m| !m.copying && m.first <= slot && slot <= m.last)
    }

    /// The coordinator of the pair a move goes to (the node that copies it in phase 0).
    pub fn move_target(&self, m: &SlotMove) -> Option<NodeId> {
        let p = self.placement.as_ref()?;
        let group = p.group(m.pg)?;
        if group.is_empty() {
            return None;
        }
        group.get(usize::from(m.data_index) % group.len()).copied()
    }

    /// The handoff that gave exactly `first..=last` its current owner, if any.
    pub fn handoff(&self, first: Slot, last: Slot) -> Option<&Handoff> {
        self.handoffs
            .iter()
            .rev()
            .find(|h| h.first == first && h.last == last)
    }

    /// The cohort a handed-off span had before its move (old coordinator first), in the
    /// current map's membership of that group (a failed old member replaced by a spare
    /// shows the spare, which holds nothing and so never answers a rebuild pull).
    pub fn prior_cohort(&self, h: &Handoff) -> Vec<NodeId> {
        let Some(p) = &self.placement else {
            return Vec::new();
        };
        p.range_cohort(&ringlet_placement::SlotRange {
            first: h.first,
            last: h.last,
            pg: h.from_pg,
            data_index: h.from_data_index,
            moved: 0,
        })
    }

    /// Cohort of `slot` (coordinator first).
    pub fn cohort(&self, slot: Slot) -> Vec<NodeId> {
        self.placement
            .as_ref()
            .map(|p| p.cohort(slot))
            .unwrap_or_default()
    }

    /// Kind of memgest `id`; unknown ids (dropped memgests) behave as `none`: the coordinator
    /// keeps the key, nobody replicates it.
    pub fn memgest_kind(&self, id: MemgestId) -> MemgestKind {
        self.memgests
            .get(&id)
            .map(|m| m.kind)
            .unwrap_or(MemgestKind::None)
    }

    /// How many cohort positions (coordinator included) hold a full copy of a key of memgest
    /// `id`: 1 for `none` and `ec` (parity holders keep parity, not copies), R for `rep:R`.
    pub fn copies(&self, id: MemgestId) -> usize {
        match self.memgest_kind(id) {
            MemgestKind::Rep { r } => usize::from(r),
            MemgestKind::None | MemgestKind::Ec { .. } => 1,
        }
    }

    /// Deepest cohort position holding copies of any memgest: positions `1..depth` are
    /// replicas that must be synced when they change hands.
    pub fn replica_depth(&self) -> usize {
        self.memgests
            .keys()
            .map(|id| self.copies(*id))
            .max()
            .unwrap_or(1)
    }

    /// The memgest a new write may name: it exists and is not being dropped.
    pub fn writable_memgest(&self, name: &str) -> Option<MemgestId> {
        self.memgest_by_name(name)
            .filter(|id| self.memgests.get(id).is_some_and(|m| !m.closing))
    }

    /// The memgest with `name`.
    pub fn memgest_by_name(&self, name: &str) -> Option<MemgestId> {
        self.memgests
            .iter()
            .find(|(_, m)| m.name == name)
            .map(|(id, _)| *id)
    }

    /// State of `node`, if known.
    pub fn node_state(&self, node: NodeId) -> Option<NodeState> {
        self.nodes.get(&node).map(|n| n.state)
    }

    /// JSON form (for etcd and the wire).
    ///
    /// # Errors
    /// Only if serde_json fails, which it does not for this type.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// Parse and validate a JSON map.
    ///
    /// # Errors
    /// Malformed JSON or a map that fails [`ClusterMap::validate`].
    pub fn from_json(s: &str) -> Result<ClusterMap, serde_json::Error> {
        serde_json::from_str(s)
    }

    /// Structural rules: placement valid; every PG member is a known Active or Failed node;
    /// every Active node is in a PG; the default memgest exists; sizes bounded.
    ///
    /// # Errors
    /// The first broken rule.
    pub fn validate(&self) -> Result<(), MapError> {
        if self.nodes.len() > NODES_MAX || self.memgests.len() > MEMGESTS_MAX {
            return Err(MapError::Malformed("too many nodes or memgests"));
        }
        match self.memgests.get(&self.default_memgest) {
            None => return Err(MapError::Malformed("default memgest missing")),
            Some(m) if m.closing => {
                return Err(MapError::Malformed("default memgest is being dropped"))
            }
            Some(_) => {}
        }
        let mut names: Vec<&str> = self.memgests.values().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w.first() == w.get(1)) {
            return Err(MapError::Malformed("two memgests with one name"));
        }
        if let Some(p) = &self.placement {
            p.validate()?;
            for m in self.memgests.values() {
                let fits = match m.kind {
                    MemgestKind::None => true,
                    MemgestKind::Rep { r } => usize::from(r) <= usize::from(p.s) + usize::from(p.d),
                    MemgestKind::Ec { m, .. } => m <= p.d,
                };
                if !fits {
                    return Err(MapError::Malformed(
                        "memgest does not fit the placement groups",
                    ));
                }
            }
            let members = p.members();
            for m in &members {
                match self.node_state(*m) {
                    Some(NodeState::Active) | Some(NodeState::Failed) => {}
                    _ => return Err(MapError::Malformed("PG member is not active or failed")),
                }
            }
            for (id, n) in &self.nodes {
                if n.state == NodeState::Active && members.binary_search(id).is_err() {
                    return Err(MapError::Malformed("active node without a PG position"));
                }
            }
        } else if self.nodes.values().any(|n| n.state == NodeState::Active) {
            return Err(MapError::Malformed("active node before bootstrap"));
        }
        if self
            .leaving
            .keys()
            .any(|n| self.node_state(*n) != Some(NodeState::Active))
        {
            return Err(MapError::Malformed("a leaving node is not active"));
        }
        if self.handoffs.len() > HANDOFFS_MAX {
            return Err(MapError::Malformed("too many handoffs"));
        }
        let acl_bytes: usize = self.users.iter().map(|(n, r)| n.len() + r.len()).sum();
        if self.users.len() > ringlet_types::limits::ACL_USERS_MAX as usize
            || acl_bytes > ringlet_types::limits::ACL_TABLE_BYTES_MAX as usize
        {
            return Err(MapError::Malformed("ACL user table over its bounds"));
        }
        if let Some(m) = &self.moving {
            let p = self
                .placement
                .as_ref()
                .ok_or(MapError::Malformed("a move before bootstrap"))?;
            let inside = p.range_of(m.first).is_some_and(|r| r.last >= m.last);
            let target = p.group(m.pg).is_some() && m.data_index < p.s;
            if m.first > m.last || !inside || !target {
                return Err(MapError::Malformed(
                    "a move must lie within one slot range and name a placement group",
                ));
            }
        }
        if let Some(n) = self.removing {
            if self.node_state(n) != Some(NodeState::Active) {
                return Err(MapError::Malformed("a node being removed is not active"));
            }
        }
        for h in &self.handoffs {
            let known = self
                .placement
                .as_ref()
                .is_some_and(|p| p.group(h.from_pg).is_some() && h.from_data_index < p.s);
            if h.first > h.last || !known {
                return Err(MapError::Malformed("a handoff names no placement group"));
            }
        }
        Ok(())
    }

    /// [`ClusterMap::validate`] as an assertion.
    ///
    /// # Panics
    /// On a broken invariant: a bug in the control plane.
    pub fn check_invariants(&self) {
        if let Err(e) = self.validate() {
            panic!("cluster map invariant broken at epoch {}: {e}", self.epoch);
        }
    }
}

// ---- wire form: plain integers and descriptor strings, so the map's JSON is stable and
// readable in etcd (`etcdctl get`) without knowing Rust types.

#[derive(Clone, Debug, Serialize, Deserialize)]
struct NodeWire {
    id: u32,
    addr: String,
    state: NodeState,
    incarnation: u64,
    #[serde(default)]
    roles_epoch: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct MemgestWire {
    id: u16,
    name: String,
    kind: String,
    evictable: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    closing: bool,
    /// Absent in maps written before the mark existed: those count as written (the safe
    /// reading — a rebuild then waits for its majority as it always did).
    #[serde(default = "yes")]
    written: bool,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ClusterMapWire {
    epoch: u64,
    nodes: Vec<NodeWire>,
    placement: Option<Placement>,
    memgests: Vec<MemgestWire>,
    default_memgest: u16,
    #[serde(default)]
    placed_epoch: u64,
    /// `[node, epoch]` pairs; absent in maps written before drains had two phases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    leaving: Vec<(u32, u64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    moving: Option<SlotMove>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    handoffs: Vec<Handoff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    removing: Option<u32>,
    /// ACL users (absent in maps from before users existed, and while there are none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    users: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    users_version: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl From<ClusterMap> for ClusterMapWire {
    fn from(m: ClusterMap) -> Self {
        ClusterMapWire {
            epoch: m.epoch.0,
            nodes: m
                .nodes
                .into_iter()
                .map(|(id, n)| NodeWire {
                    id: id.0,
                    addr: n.addr,
                    state: n.state,
                    incarnation: n.incarnation,
                    roles_epoch: n.roles_epoch.0,
                })
                .collect(),
            placement: m.placement,
            memgests: m
                .memgests
                .into_iter()
                .map(|(id, g)| MemgestWire {
                    id: id.0,
                    name: g.name,
                    kind: g.kind.to_string(),
                    evictable: g.evictable,
                    closing: g.closing,
                    written: g.written,
                })
                .collect(),
            default_memgest: m.default_memgest.0,
            placed_epoch: m.placed_epoch.0,
            leaving: m.leaving.iter().map(|(n, e)| (n.0, e.0)).collect(),
            moving: m.moving,
            handoffs: m.handoffs,
            removing: m.removing.map(|n| n.0),
            users: m.users,
            users_version: m.users_version,
        }
    }
}

impl TryFrom<ClusterMapWire> for ClusterMap {
    type Error = MapError;
    fn try_from(w: ClusterMapWire) -> Result<Self, Self::Error> {
        if w.nodes.len() > NODES_MAX
            || w.memgests.len() > MEMGESTS_MAX
            || w.leaving.len() > NODES_MAX
            || w.handoffs.len() > HANDOFFS_MAX
        {
            return Err(MapError::Malformed("too many nodes or memgests"));
        }
        let mut nodes = BTreeMap::new();
        for n in w.nodes {
            if n.addr.len() > NAME_BYTES_MAX {
                return Err(MapError::Malformed("node address too long"));
            }
            let dup = nodes.insert(
                NodeId(n.id),
                NodeInfo {
                    addr: n.addr,
                    state: n.state,
                    incarnation: n.incarnation,
                    roles_epoch: Epoch(n.roles_epoch),
                },
            );
            if dup.is_some() {
                return Err(MapError::Malformed("duplicate node id"));
            }
        }
        let mut memgests = BTreeMap::new();
        for g in w.memgests {
            if g.name.len() > NAME_BYTES_MAX {
                return Err(MapError::Malformed("memgest name too long"));
            }
            let kind = MemgestKind::parse(&g.kind).map_err(|e| MapError::Memgest(e.to_string()))?;
            let dup = memgests.insert(
                MemgestId(g.id),
                MemgestInfo {
                    name: g.name,
                    kind,
                    evictable: g.evictable,
                    closing: g.closing,
                    written: g.written,
                },
            );
            if dup.is_some() {
                return Err(MapError::Malformed("duplicate memgest id"));
            }
        }
        let m = ClusterMap {
            epoch: Epoch(w.epoch),
            nodes,
            placement: w.placement,
            memgests,
            default_memgest: MemgestId(w.default_memgest),
            placed_epoch: Epoch(w.placed_epoch),
            leaving: w
                .leaving
                .iter()
                .map(|&(n, e)| (NodeId(n), Epoch(e)))
                .collect(),
            moving: w.moving,
            handoffs: w.handoffs,
            removing: w.removing.map(NodeId),
            users: w.users,
            users_version: w.users_version,
        };
        m.validate()?;
        Ok(m)
    }
}
