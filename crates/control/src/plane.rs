//! The control plane state machine.
//!
//! How it works: every input may change the map; a change goes through [`ControlPlane::commit`],
//! which bumps the epoch (asserting it grows), validates the new map and emits
//! [`Action::Publish`]. The driver sends published maps to every node and client; a node that
//! heartbeats with an older epoch also gets the map back directly (so a dropped publish heals).
//!
//! Leases: a node's lease is `lease_ms` from the *arrival* of its last heartbeat; the node
//! itself counts its lease from the heartbeat's *send* time, which is earlier, so a coordinator
//! always stops serving before the control plane hands its slots to someone else (assuming
//! clock rates agree within the margin the node subtracts).
//!
//! Spares are chosen deterministically (lowest node id), so the simulator replays exactly.

use crate::map::{
    ClusterMap, MemgestInfo, NodeInfo, NodeState, MEMGESTS_MAX, NAME_BYTES_MAX, NODES_MAX,
};
use ringlet_placement::Placement;
use ringlet_types::{Epoch, MemgestId, MemgestKind, NodeId, Slot};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use thiserror::Error;

/// How long after a memgest is closed every data-holding node's usage report must reach
/// before `DropMemgest` trusts a zero: writes that were already in flight when the closing
/// map arrived commit within a replication round trip (ms) in normal operation; five
/// report intervals (nodes report every 100 ms) leave room for a slow node.
pub const DROP_SETTLE_MS: u64 = 500;

/// Why a cluster refuses to change the `default` user through the control plane.
pub const DEFAULT_USER_LOCAL: &str = "ERR the 'default' user of a cluster node is set by --requirepass (the same on every node, which nodes also use to reach each other); create named users instead";

/// Longest a draining node may take to finish its in-flight writes before its roles move
/// anyway (drain phase 2). Writes normally finish within a replication round trip; a node
/// that cannot report (overloaded, its report lost, an etcd leader change) must not stall
/// maintenance forever. Writes still in flight then are answered `Ambiguous`, as before
/// drains had two phases.
pub const DRAIN_QUIESCE_MS_MAX: u64 = 3_000;

/// Longest phase 0 of a move (the target copying the span while the old coordinator still
/// serves it) before the move is called off. The copy runs at the node's pace or at the
/// move's `--rate`: 10 minutes is ~60 GB unlimited, or 600 MB at 1 MB/s; a move that needs
/// longer is split (a rebalance moves one span per coordinator pair anyway). Calling off is
/// safe at any time in phase 0: the old owner never stopped serving.
pub const MOVE_COPY_MS_MAX: u64 = 600_000;

/// Keys and bytes of one memgest on one node (a node's engine counts every copy it holds:
/// a `rep:3` key is counted on three nodes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemgestUsage {
    pub keys: u64,
    pub bytes: u64,
}

/// Erasure-coded storage on one node, every ec memgest together (the replica core keeps one
/// accounting over its arenas and parity stores): values, arena bytes, parity, key metadata.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EcUsage {
    pub payload_bytes: u64,
    pub data_bytes: u64,
    pub parity_bytes: u64,
    pub meta_bytes: u64,
}

impl EcUsage {
    /// Field-wise saturating sum.
    pub fn plus(&self, o: &EcUsage) -> EcUsage {
        EcUsage {
            payload_bytes: self.payload_bytes.saturating_add(o.payload_bytes),
            data_bytes: self.data_bytes.saturating_add(o.data_bytes),
            parity_bytes: self.parity_bytes.saturating_add(o.parity_bytes),
            meta_bytes: self.meta_bytes.saturating_add(o.meta_bytes),
        }
    }
}

/// A node's latest usage report, as the control plane received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageReport {
    pub incarnation: u64,
    /// The node's map epoch when it counted.
    pub epoch: Epoch,
    /// Control-plane time of arrival.
    pub at_ms: u64,
    pub memgests: BTreeMap<MemgestId, MemgestUsage>,
    pub ec: EcUsage,
}

/// Configuration, checked once by [`ControlConfig::validate`].
#[derive(Clone, Debug)]
pub struct ControlConfig {
    /// Data nodes per placement group.
    pub s: u8,
    /// Redundant nodes per placement group.
    pub d: u8,
    /// A node whose heartbeat has not arrived for this long is fenced.
    pub lease_ms: u64,
    /// Resharding (moves, node add and remove) while an `ec:K+M` memgest exists. On by
    /// default since session 13 (the all-faults simulator sweeps pass:
    /// docs/design/cluster-resharding.md, "Moving ec:K+M values"). An operator who wants
    /// the layout of erasure-coded data frozen turns it off (`--no-ec-moves`); these
    /// requests are then refused with the flag named.
    pub ec_moves: bool,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            s: 2,
            d: 1,
            lease_ms: 1500,
            ec_moves: true,
        }
    }
}

impl ControlConfig {
    /// # Errors
    /// A field out of range, named.
    pub fn validate(&self) -> Result<(), ControlError> {
        if self.s == 0 {
            return Err(ControlError::Config("s must be >= 1"));
        }
        if usize::from(self.s) + usize::from(self.d) > ringlet_placement::PG_NODES_MAX {
            return Err(ControlError::Config("s + d exceeds PG_NODES_MAX"));
        }
        if self.lease_ms < 10 {
            return Err(ControlError::Config("lease_ms must be >= 10"));
        }
        Ok(())
    }
}

/// What the control plane is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A node is alive. `sent_ms` is echoed back so the node can time its own lease.
    Heartbeat {
        node: NodeId,
        incarnation: u64,
        epoch: Epoch,
        sent_ms: u64,
    },
    /// A node process started (first start or restart: a restart has a higher incarnation).
    Join {
        node: NodeId,
        addr: String,
        incarnation: u64,
    },
    /// Time passed: expire leases, fill failed positions with spares.
    Tick,
    /// Plan placement over the first `active` spares (by node id). Once.
    Bootstrap {
        active: usize,
    },
    /// Planned maintenance: hand `node`'s roles to a spare. Two phases
    /// (docs/design/cluster-drain.md): the node is first listed in [`ClusterMap::leaving`]
    /// (it keeps its roles, refuses new writes and finishes those in flight); its roles move
    /// to a spare on [`Input::Quiesced`] or after [`DRAIN_QUIESCE_MS_MAX`].
    Drain {
        node: NodeId,
    },
    /// A leaving node has no uncommitted write at `epoch` (its map's epoch, at least the
    /// one that listed it as leaving): its roles can move without abandoning a write.
    Quiesced {
        node: NodeId,
        incarnation: u64,
        epoch: Epoch,
    },
    CreateMemgest {
        name: String,
        kind: MemgestKind,
        evictable: Option<bool>,
    },
    /// `ACL SETUSER name rules...` from any node, its passwords already hashed
    /// (`ringlet_command::acl::hash_rules`): applied to the map's user as it is now, so two
    /// nodes changing one user do not lose each other's rules.
    SetUser {
        name: String,
        rules: Vec<String>,
    },
    /// `ACL DELUSER names...`.
    DelUsers {
        names: Vec<String>,
    },
    /// Resharding (docs/design/cluster-resharding.md): move slots `first..=last` (inside one
    /// slot range) to the pair (`pg`, `data_index`). Phase 1 lists the span in
    /// [`ClusterMap::moving`]; phase 2 reassigns it on [`Input::Quiesced`] from its
    /// coordinator or after [`DRAIN_QUIESCE_MS_MAX`], and records a [`crate::Handoff`].
    MoveSlots {
        first: Slot,
        last: Slot,
        pg: u32,
        data_index: u8,
        /// Copy rate limit in KiB/s; 0 = as fast as the nodes go.
        rate_kib_s: u32,
    },
    /// The new coordinator of a handed-off span holds everything its old cohort had: drop
    /// the handoff record (the old cohort then releases its copies).
    HandoffDone {
        node: NodeId,
        incarnation: u64,
        first: Slot,
        last: Slot,
    },
    /// Resharding phase 0: the target coordinator of the move that started at `epoch`
    /// holds a copy of `first..=last` (snapshot and catch-up): the move turns into phase 1
    /// (the quiesce). Stale or foreign reports (another span, target or move) do nothing.
    MoveCopied {
        node: NodeId,
        incarnation: u64,
        first: Slot,
        last: Slot,
        epoch: u64,
    },
    /// Turn a spare into a data node: it joins the placement groups a rotation over the
    /// active nodes and it would form. It holds no slots until moves give it some.
    AddNode {
        node: NodeId,
    },
    /// Take a data node out, in two calls (docs/design/cluster-resharding.md): the first adds
    /// the placement groups a rotation over the other active nodes forms and lists the node
    /// in [`ClusterMap::removing`]; the caller then moves every slot range of a group holding
    /// it elsewhere; the second call, once none is left and no handoff is pending, retires
    /// those groups and makes the node a spare.
    RemoveNode {
        node: NodeId,
    },
    /// A coordinator is about to start the first write of `memgest` it has seen: mark the
    /// memgest written ([`crate::MemgestInfo::written`]) and publish. Idempotent; the
    /// coordinator waits for a map showing the mark before it writes.
    MarkWritten {
        memgest: MemgestId,
    },
    /// Drop a memgest, refused while any node holds keys of it. Two steps, driven by the
    /// caller (docs/design/memgest-commands.md): the first call *closes* the memgest (published: front ends refuse new writes naming it);
    /// later calls answer [`ControlError::DropPending`] until every data-holding node has
    /// reported at the closing epoch for [`DROP_SETTLE_MS`], then remove it if all report
    /// zero keys, or reopen it and refuse ([`ControlError::MemgestInUse`]).
    DropMemgest {
        name: String,
    },
    /// Give up a pending drop: reopen the memgest (the caller's wait ran out).
    CancelDrop {
        name: String,
    },
    SetDefault {
        name: String,
    },
    /// A node's per-memgest key and byte counts (sent beside heartbeats). Ignored unless it
    /// comes from the node's current incarnation. Bounded: at most `MEMGESTS_MAX` entries.
    Usage {
        node: NodeId,
        incarnation: u64,
        epoch: Epoch,
        memgests: Vec<(MemgestId, MemgestUsage)>,
        ec: EcUsage,
    },
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A new map: send it to every node and client (and persist it, with etcd).
    Publish(Arc<ClusterMap>),
    /// Send the current map to one node that is behind.
    SendMap { to: NodeId, map: Arc<ClusterMap> },
    /// Lease renewed.
    HeartbeatAck {
        to: NodeId,
        incarnation: u64,
        epoch: Epoch,
        sent_ms: u64,
    },
    /// This incarnation has been fenced: it must drop its state and rejoin as a new incarnation.
    Fenced { to: NodeId, incarnation: u64 },
    /// A command was refused.
    Rejected(ControlError),
}

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ControlError {
    #[error("bad config: {0}")]
    Config(&'static str),
    #[error("already bootstrapped")]
    AlreadyBootstrapped,
    #[error("not enough spares: need {needed}, have {have}")]
    NotEnoughNodes { needed: usize, have: usize },
    #[error("placement: {0}")]
    Placement(String),
    #[error("unknown node {0}")]
    UnknownNode(NodeId),
    #[error("node {0} is not active")]
    NotActive(NodeId),
    #[error("no spare available")]
    NoSpare,
    #[error("memgest {0} already exists")]
    MemgestExists(String),
    /// A refused `ACL SETUSER`/`DELUSER`: Redis's error text, `ERR ` included.
    #[error("{}", .0.strip_prefix("ERR ").unwrap_or(.0))]
    Acl(String),
    #[error("no memgest named {0}")]
    NoSuchMemgest(String),
    #[error("memgest {0} is the default and cannot be dropped")]
    DropDefault(String),
    #[error(
        "memgest {name} still holds {keys} keys (counting every copy); move or delete them first"
    )]
    MemgestInUse { name: String, keys: u64 },
    #[error("node {0} is already draining (finishing its in-flight writes)")]
    AlreadyLeaving(NodeId),
    #[error("memgest {0} is being dropped: waiting for every node's usage report")]
    DropPending(String),
    #[error("memgest {0} is being dropped")]
    MemgestClosing(String),
    #[error("memgest {0} is not being dropped")]
    NotClosing(String),
    #[error(
        "memgest {kind} does not fit placement groups of s={s}, d={d} (ec:K+M needs M <= d, \
         rep:R needs R <= s+d: start the cluster with --pg-data/--pg-redundant, or more --nodes)"
    )]
    MemgestShape { kind: String, s: u8, d: u8 },
    #[error("too many memgests")]
    TooManyMemgests,
    #[error("name too long")]
    NameTooLong,
    #[error("too many nodes in the cluster map")]
    TooManyNodes,
    #[error("the cluster is not bootstrapped")]
    NotPlaced,
    #[error("slots {first}-{last} are already moving; wait for that move to finish")]
    MoveInProgress { first: Slot, last: Slot },
    #[error("slots {first}-{last} are still being handed off to their new owner; retry shortly")]
    HandoffPending { first: Slot, last: Slot },
    #[error("bad move: {0}")]
    BadMove(String),
    #[error(
        "memgest {0} is erasure-coded: a span cannot move to another placement pair of its own \
         coordinator (its ec values would stay in the old group's arena); pick a pair \
         coordinated by another node"
    )]
    EcMove(String),
    #[error(
        "memgest {0} is erasure-coded and this control plane was started with --no-ec-moves: \
         slot moves, node add and node remove are refused while an ec memgest exists (restart \
         the control plane without the flag to allow them)"
    )]
    EcMovesOff(String),
    #[error("node {0} is not a spare")]
    NotSpare(NodeId),
    #[error("a drain is in progress; retry when it has finished")]
    DrainInProgress,
    #[error("node {node} still holds {ranges} slot ranges or handoffs; move them first (`ringlet node remove` does)")]
    RemovePending { node: NodeId, ranges: usize },
    #[error("node {0} is being removed")]
    Removing(NodeId),
    #[error("removing node {node} would leave {left} data nodes; placement groups need {needed}")]
    TooFewToRemove {
        node: NodeId,
        left: usize,
        needed: usize,
    },
}

#[derive(Clone, Debug)]
struct Lease {
    incarnation: u64,
    last_ms: u64,
}

/// The control plane core.
#[derive(Debug)]
pub struct ControlPlane {
    cfg: ControlConfig,
    map: Arc<ClusterMap>,
    leases: BTreeMap<NodeId, Lease>,
    usage: BTreeMap<NodeId, UsageReport>,
    /// Memgests being dropped: the epoch and time at which they were closed.
    closing: BTreeMap<MemgestId, (Epoch, u64)>,
    /// When each node of `map.leaving` was asked to leave (this process's clock; a resumed
    /// leader starts counting when it first ticks).
    leaving_since: BTreeMap<NodeId, u64>,
    /// When the current [`ClusterMap::moving`] span was listed (this process's clock).
    moving_since: Option<u64>,
    /// What happened, derived from every committed map change ([`crate::events`]).
    events: crate::events::EventLog,
    /// The `now_ms` of the step being run (the event log's clock; `commit` has no argument
    /// for it).
    now_ms: u64,
}

impl ControlPlane {
    /// # Errors
    /// Invalid config.
    pub fn new(cfg: ControlConfig) -> Result<ControlPlane, ControlError> {
        cfg.validate()?;
        Ok(ControlPlane {
            cfg,
            map: Arc::new(ClusterMap::default()),
            leases: BTreeMap::new(),
            usage: BTreeMap::new(),
            closing: BTreeMap::new(),
            leaving_since: BTreeMap::new(),
            moving_since: None,
            events: crate::events::EventLog::default(),
            now_ms: 0,
        })
    }

    /// Continue from a published map (a new etcd leader loading `<prefix>/map`): the next
    /// change commits `map.epoch + 1`, so epochs never go backwards across leaders. Every
    /// node the map lists as alive gets a lease starting at `now_ms`, as if it had just
    /// heartbeated: the new leader cannot know when the old one last heard from it.
    ///
    /// # Errors
    /// Invalid config, or a map that fails validation.
    pub fn resume(
        cfg: ControlConfig,
        map: ClusterMap,
        now_ms: u64,
    ) -> Result<ControlPlane, ControlError> {
        map.validate()
            .map_err(|e| ControlError::Placement(e.to_string()))?;
        let mut cp = ControlPlane::new(cfg)?;
        cp.leases = map
            .nodes
            .iter()
            .filter(|(_, n)| n.state != NodeState::Failed)
            .map(|(id, n)| {
                (
                    *id,
                    Lease {
                        incarnation: n.incarnation,
                        last_ms: now_ms,
                    },
                )
            })
            .collect();
        cp.map = Arc::new(map);
        cp.now_ms = now_ms;
        cp.events.record(
            now_ms,
            cp.map.epoch,
            crate::events::EventKind::Started { resumed: true },
        );
        Ok(cp)
    }

    /// The current map.
    pub fn map(&self) -> &Arc<ClusterMap> {
        &self.map
    }

    pub fn config(&self) -> &ControlConfig {
        &self.cfg
    }

    /// The latest usage report of every node that sent one (current incarnations only).
    pub fn usage(&self) -> &BTreeMap<NodeId, UsageReport> {
        &self.usage
    }

    /// The event log (what the published maps changed, with their epochs).
    pub fn events(&self) -> &crate::events::EventLog {
        &self.events
    }

    /// One step. Never fails: refused commands come back as [`Action::Rejected`].
    pub fn step(&mut self, now_ms: u64, input: Input) -> Vec<Action> {
        let mut out = Vec::new();
        self.now_ms = now_ms;
        match input {
            Input::Heartbeat {
                node,
                incarnation,
                epoch,
                sent_ms,
            } => self.on_heartbeat(now_ms, node, incarnation, epoch, sent_ms, &mut out),
            Input::Join {
                node,
                addr,
                incarnation,
            } => self.on_join(now_ms, node, addr, incarnation, &mut out),
            Input::Tick => self.on_tick(now_ms, &mut out),
            Input::Bootstrap { active } => {
                if let Err(e) = self.bootstrap(active, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
            Input::Drain { node } => {
                if let Err(e) = self.drain(now_ms, node, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
            Input::Quiesced {
                node,
                incarnation,
                epoch,
            } => {
                let asked = self.map.leaving.get(&node).copied();
                let same = self
                    .map
                    .nodes
                    .get(&node)
                    .is_some_and(|n| n.incarnation == incarnation);
                if same && asked.is_some_and(|e| epoch >= e) {
                    self.finish_drain(node, &mut out);
                }
                let moving = self.map.moving;
                if same
                    && moving
                        .is_some_and(|m| !m.copying && epoch.0 >= m.epoch && m.source == node.0)
                    && self.map.moving_source() == Some(node)
                {
                    self.finish_move(&mut out);
                }
            }
            Input::MoveSlots {
                first,
                last,
                pg,
                data_index,
                rate_kib_s,
            } => {
                let to = (pg, data_index);
                if let Err(e) = self.move_slots(now_ms, first, last, to, rate_kib_s, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
            Input::HandoffDone {
                node,
                incarnation,
                first,
                last,
            } => {
                let same = self
                    .map
                    .nodes
                    .get(&node)
                    .is_some_and(|n| n.incarnation == incarnation);
                if same
                    && self.map.coordinator(first) == Some(node)
                    && self.map.handoff(first, last).is_some()
                {
                    let mut next = (*self.map).clone();
                    next.handoffs
                        .retain(|h| !(h.first == first && h.last == last));
                    self.commit(next, &mut out);
                }
            }
            Input::MoveCopied {
                node,
                incarnation,
                first,
                last,
                epoch,
            } => {
                let same = self
                    .map
                    .nodes
                    .get(&node)
                    .is_some_and(|n| n.incarnation == incarnation);
                let copied = self.map.moving.filter(|m| {
                    m.copying
                        && m.epoch == epoch
                        && (m.first, m.last) == (first, last)
                        && self.map.move_target(m) == Some(node)
                });
                if same && copied.is_some() {
                    self.fence_move(now_ms, &mut out);
                }
            }
            Input::AddNode { node } => {
                if let Err(e) = self.add_node(node, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
            Input::RemoveNode { node } => {
                if let Err(e) = self.remove_node(node, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
            Input::MarkWritten { memgest } => {
                if self.map.memgests.get(&memgest).is_some_and(|m| !m.written) {
                    let mut next = (*self.map).clone();
                    if let Some(m) = next.memgests.get_mut(&memgest) {
                        m.written = true;
                    }
                    self.commit(next, &mut out);
                }
            }
            Input::CreateMemgest {
                name,
                kind,
                evictable,
            } => {
                if let Err(e) = self.create_memgest(name, kind, evictable, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
            Input::SetUser { name, rules } => {
                if name == "default" {
                    out.push(Action::Rejected(ControlError::Acl(
                        DEFAULT_USER_LOCAL.into(),
                    )));
                } else {
                    match ringlet_command::acl::apply_setuser(&self.map.users, &name, &rules) {
                        Ok(users) => self.set_users(users, &mut out),
                        Err(e) => out.push(Action::Rejected(ControlError::Acl(e))),
                    }
                }
            }
            Input::DelUsers { names } => {
                match ringlet_command::acl::apply_deluser(&self.map.users, &names) {
                    Ok((users, n)) if n > 0 => self.set_users(users, &mut out),
                    Ok(_) => {}
                    Err(e) => out.push(Action::Rejected(ControlError::Acl(e))),
                }
            }
            Input::DropMemgest { name } => {
                if let Err(e) = self.drop_memgest(now_ms, &name, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
            Input::CancelDrop { name } => {
                if let Err(e) = self.cancel_drop(&name, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
            Input::Usage {
                node,
                incarnation,
                epoch,
                memgests,
                ec,
            } => self.on_usage(now_ms, node, incarnation, epoch, memgests, ec),
            Input::SetDefault { name } => {
                if let Err(e) = self.set_default(&name, &mut out) {
                    out.push(Action::Rejected(e));
                }
            }
        }
        out
    }

    /// Publish a new user table (a new epoch, like any map change).
    fn set_users(&mut self, users: BTreeMap<String, String>, out: &mut Vec<Action>) {
        if users == self.map.users {
            return;
        }
        let mut next = (*self.map).clone();
        next.users = users;
        next.users_version = next.users_version.saturating_add(1);
        self.commit(next, out);
    }

    fn next_epoch(&self) -> Epoch {
        Epoch(self.map.epoch.0.saturating_add(1))
    }

    /// Publish `next` with the next epoch.
    fn commit(&mut self, mut next: ClusterMap, out: &mut Vec<Action>) {
        let new_epoch = Epoch(self.map.epoch.0.saturating_add(1));
        assert!(new_epoch > self.map.epoch, "epoch must strictly increase");
        next.epoch = new_epoch;
        next.check_invariants();
        for e in crate::events::diff(&self.map, &next) {
            self.events.record(self.now_ms, new_epoch, e);
        }
        self.map = Arc::new(next);
        out.push(Action::Publish(self.map.clone()));
    }

    fn on_heartbeat(
        &mut self,
        now_ms: u64,
        node: NodeId,
        incarnation: u64,
        epoch: Epoch,
        sent_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let Some(info) = self.map.nodes.get(&node) else {
            return; // never joined: ignore (it will send Join)
        };
        if incarnation < info.incarnation {
            return; // a dead incarnation's late message
        }
        if incarnation > info.incarnation {
            // Restarted but its Join was lost: it must (re)join.
            out.push(Action::Fenced {
                to: node,
                incarnation,
            });
            return;
        }
        if info.state == NodeState::Failed {
            out.push(Action::Fenced {
                to: node,
                incarnation,
            });
            return;
        }
        self.leases.insert(
            node,
            Lease {
                incarnation,
                last_ms: now_ms,
            },
        );
        out.push(Action::HeartbeatAck {
            to: node,
            incarnation,
            epoch: self.map.epoch,
            sent_ms,
        });
        if epoch < self.map.epoch {
            out.push(Action::SendMap {
                to: node,
                map: self.map.clone(),
            });
        }
    }

    fn on_join(
        &mut self,
        now_ms: u64,
        node: NodeId,
        addr: String,
        incarnation: u64,
        out: &mut Vec<Action>,
    ) {
        if addr.len() > NAME_BYTES_MAX {
            out.push(Action::Rejected(ControlError::NameTooLong));
            return;
        }
        if !self.map.nodes.contains_key(&node) && self.map.nodes.len() >= NODES_MAX {
            out.push(Action::Rejected(ControlError::TooManyNodes));
            return;
        }
        let mut next = (*self.map).clone();
        match next.nodes.get(&node) {
            Some(info) if incarnation < info.incarnation => return,
            Some(info) if incarnation == info.incarnation => {
                // Duplicate Join: refresh the lease, resend the map.
                if info.state != NodeState::Failed {
                    self.leases.insert(
                        node,
                        Lease {
                            incarnation,
                            last_ms: now_ms,
                        },
                    );
                }
                out.push(Action::SendMap {
                    to: node,
                    map: self.map.clone(),
                });
                return;
            }
            // A restart (higher incarnation) or a new node: handled below.
            Some(_) | None => {}
        }
        let in_pg = next
            .placement
            .as_ref()
            .is_some_and(|p| p.members().binary_search(&node).is_ok());
        if in_pg {
            // The old incarnation held positions. Hand them to another spare if there is one;
            // otherwise this node takes them back as a fresh incarnation.
            if let Some(info) = next.nodes.get_mut(&node) {
                info.state = NodeState::Failed;
            }
            next.leaving.remove(&node);
            if next.removing == Some(node) {
                next.removing = None; // a restart calls the removal off
            }
            let spare = pick_spare(&next, Some(node));
            let replacement = spare.unwrap_or(node);
            if replacement != node {
                if let Some(p) = next.placement.as_mut() {
                    p.substitute(node, replacement);
                }
                set_state(&mut next, replacement, NodeState::Active);
                next.nodes.insert(
                    node,
                    NodeInfo {
                        addr,
                        state: NodeState::Spare,
                        incarnation,
                        roles_epoch: Epoch(0),
                    },
                );
            } else {
                next.nodes.insert(
                    node,
                    NodeInfo {
                        addr,
                        state: NodeState::Active,
                        incarnation,
                        roles_epoch: self.next_epoch(),
                    },
                );
            }
        } else {
            next.nodes.insert(
                node,
                NodeInfo {
                    addr,
                    state: NodeState::Spare,
                    incarnation,
                    roles_epoch: Epoch(0),
                },
            );
        }
        self.leases.insert(
            node,
            Lease {
                incarnation,
                last_ms: now_ms,
            },
        );
        self.fill_failed(&mut next);
        self.commit(next, out);
    }

    fn on_tick(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        let mut next = (*self.map).clone();
        let mut changed = false;
        let lease_ms = self.cfg.lease_ms;
        for (id, info) in next.nodes.iter_mut() {
            if info.state == NodeState::Failed {
                continue;
            }
            let expired = match self.leases.get(id) {
                Some(l) if l.incarnation == info.incarnation => {
                    now_ms > l.last_ms.saturating_add(lease_ms)
                }
                _ => true,
            };
            if expired {
                info.state = NodeState::Failed;
                changed = true;
            }
        }
        changed |= self.fill_failed(&mut next);
        // A node that failed while leaving is no longer leaving: failover took its roles.
        let before = next.leaving.len();
        next.leaving.retain(|n, _| {
            next.nodes
                .get(n)
                .is_some_and(|i| i.state == NodeState::Active)
        });
        changed |= next.leaving.len() != before;
        // Likewise a node that failed while being removed: the removal is called off.
        if next
            .removing
            .is_some_and(|n| next.node_state(n) != Some(NodeState::Active))
        {
            next.removing = None;
            changed = true;
        }
        if changed {
            self.commit(next, out);
        }
        // Leaving nodes that did not report quiesced in time hand over anyway.
        let leaving: Vec<NodeId> = self.map.leaving.keys().copied().collect();
        self.leaving_since.retain(|n, _| leaving.contains(n));
        for n in leaving {
            let since = *self.leaving_since.entry(n).or_insert(now_ms);
            if now_ms.saturating_sub(since) >= DRAIN_QUIESCE_MS_MAX {
                self.finish_drain(n, out);
            }
        }
        // A copying move whose source or target failed, was replaced or left, or that
        // copies for too long, is called off: the old owner never stopped serving.
        if let Some(m) = self.map.moving.filter(|m| m.copying) {
            let active = |n: u32| self.map.node_state(NodeId(n)) == Some(NodeState::Active);
            let stale = !active(m.source)
                || !active(m.target)
                || self.map.moving_source() != Some(NodeId(m.source))
                || self.map.move_target(&m) != Some(NodeId(m.target));
            let since = *self.moving_since.get_or_insert(now_ms);
            if stale || now_ms.saturating_sub(since) >= MOVE_COPY_MS_MAX {
                self.moving_since = None;
                let mut next = (*self.map).clone();
                next.moving = None;
                self.commit(next, out);
            }
            return;
        }
        // A fencing move (phase 1) whose source or target failed, was replaced or left is
        // called off too, before the switch: the old pair stays authoritative and a spare
        // takes the failed node's roles there as in any takeover (rep keys from a
        // majority, ec values decoded from the old group's parity). Switching instead
        // would leave the span's ec values in the failed node's old arena, which the new
        // coordinator cannot pull (docs/design/cluster-resharding.md, "Moving ec values").
        if let Some(m) = self.map.moving {
            let active = |n: u32| self.map.node_state(NodeId(n)) == Some(NodeState::Active);
            let stale = !active(m.source)
                || !active(m.target)
                || self.map.moving_source() != Some(NodeId(m.source))
                || self.map.move_target(&m) != Some(NodeId(m.target));
            if stale {
                self.moving_since = None;
                let mut next = (*self.map).clone();
                next.moving = None;
                self.commit(next, out);
                return;
            }
        }
        // A move whose coordinator did not report quiesced in time switches anyway (its
        // writes still in flight then end Ambiguous, as a drain's do) — unless an ec
        // memgest exists: then it is called off. A source that does not report may not
        // hold the span whole (it reports only once its range is Ready), and after a
        // switch it would answer the new coordinator's pulls "not ready": the span's ec
        // values live only in its arena, so they would be lost, where rep keys still have
        // their old replicas' majority. Calling off keeps the old pair authoritative.
        match (self.map.moving, self.moving_since) {
            (Some(_), None) => self.moving_since = Some(now_ms),
            (Some(_), Some(since)) if now_ms.saturating_sub(since) >= DRAIN_QUIESCE_MS_MAX => {
                if self.has_ec_memgest() {
                    self.moving_since = None;
                    let mut next = (*self.map).clone();
                    next.moving = None;
                    self.commit(next, out);
                } else {
                    self.finish_move(out)
                }
            }
            (None, Some(_)) => self.moving_since = None,
            _ => {}
        }
    }

    /// Resharding phase 1: list the span as moving (its coordinator stops taking writes to
    /// it and reports when none is left in flight).
    fn move_slots(
        &mut self,
        now_ms: u64,
        first: Slot,
        last: Slot,
        (pg, data_index): (u32, u8),
        rate_kib_s: u32,
        out: &mut Vec<Action>,
    ) -> Result<(), ControlError> {
        let p = self.map.placement.as_ref().ok_or(ControlError::NotPlaced)?;
        if let Some(m) = self.map.moving {
            return Err(ControlError::MoveInProgress {
                first: m.first,
                last: m.last,
            });
        }
        if !self.map.leaving.is_empty() {
            return Err(ControlError::DrainInProgress);
        }
        if first > last || last >= ringlet_types::SLOT_COUNT {
            return Err(ControlError::BadMove(format!("empty span {first}-{last}")));
        }
        let r = p
            .range_of(first)
            .filter(|r| r.last >= last)
            .ok_or_else(|| {
                ControlError::BadMove(format!(
                    "slots {first}-{last} span more than one slot range (move each part)"
                ))
            })?;
        if r.pg == pg && r.data_index == data_index {
            return Err(ControlError::BadMove(format!(
                "slots {first}-{last} already belong to group {pg} index {data_index}"
            )));
        }
        let group = p
            .group(pg)
            .ok_or_else(|| ControlError::BadMove(format!("no placement group {pg}")))?;
        if data_index >= p.s {
            return Err(ControlError::BadMove(format!(
                "data index {data_index} >= s = {}",
                p.s
            )));
        }
        if group.is_empty() {
            return Err(ControlError::BadMove(format!(
                "placement group {pg} is retired"
            )));
        }
        if let Some(n) = group
            .iter()
            .find(|n| self.map.node_state(**n) != Some(NodeState::Active))
        {
            return Err(ControlError::NotActive(*n));
        }
        if let Some(n) = self.map.removing.filter(|n| group.contains(n)) {
            return Err(ControlError::Removing(n));
        }
        if let Some(h) = self
            .map
            .handoffs
            .iter()
            .find(|h| h.first <= last && first <= h.last)
        {
            return Err(ControlError::HandoffPending {
                first: h.first,
                last: h.last,
            });
        }
        if self.map.handoffs.len() >= crate::map::HANDOFFS_MAX {
            return Err(ControlError::HandoffPending { first, last });
        }
        self.refuse_ec_moves_unless_allowed()?;
        let mut next = (*self.map).clone();
        let mut m = crate::map::SlotMove {
            first,
            last,
            pg,
            data_index,
            epoch: self.next_epoch().0,
            rate_kib_s,
            copying: false,
            source: self.map.coordinator(first).map_or(0, |n| n.0),
            target: 0,
        };
        m.target = self.map.move_target(&m).map_or(0, |n| n.0);
        if m.source == m.target {
            self.refuse_same_node_move_with_ec()?;
        }
        // Phase 0 unless the span stays with its coordinator (another pair of the same
        // node: it holds everything already).
        m.copying = m.source != m.target;
        next.moving = Some(m);
        self.moving_since = Some(now_ms);
        self.commit(next, out);
        Ok(())
    }

    /// Resharding phase 0 → 1: the target holds a copy of the span; its coordinator now
    /// refuses new writes to it, finishes those in flight and reports `Quiesced` (the
    /// short fence before the switch), counted from now.
    fn fence_move(&mut self, now_ms: u64, out: &mut Vec<Action>) {
        let Some(mut m) = self.map.moving else { return };
        let mut next = (*self.map).clone();
        m.copying = false;
        m.epoch = self.next_epoch().0;
        next.moving = Some(m);
        self.moving_since = Some(now_ms);
        self.commit(next, out);
    }

    /// Resharding phase 2: reassign the moving span and record where it came from.
    fn finish_move(&mut self, out: &mut Vec<Action>) {
        self.moving_since = None;
        let Some(m) = self.map.moving else { return };
        let mut next = (*self.map).clone();
        next.moving = None;
        let epoch = self.next_epoch().0;
        let from = next
            .placement
            .as_ref()
            .and_then(|p| p.range_of(m.first))
            .copied();
        let moved = match (next.placement.as_mut(), from) {
            (Some(p), Some(from)) => p
                .assign(m.first, m.last, m.pg, m.data_index, epoch)
                .map(|()| from),
            _ => Err(ringlet_placement::PlacementError::Malformed("no placement")),
        };
        match moved {
            Ok(from) => {
                next.handoffs
                    .retain(|h| h.last < m.first || m.last < h.first);
                next.handoffs.push(crate::map::Handoff {
                    first: m.first,
                    last: m.last,
                    from_pg: from.pg,
                    from_data_index: from.data_index,
                    epoch,
                    rate_kib_s: m.rate_kib_s,
                    source: m.source,
                    source_incarnation: self
                        .map
                        .nodes
                        .get(&NodeId(m.source))
                        .map_or(0, |n| n.incarnation),
                });
                self.commit(next, out);
            }
            Err(e) => {
                // The span no longer fits (cannot happen: validate keeps moves inside one
                // range); call the move off rather than publish a broken map.
                self.commit(next, out);
                out.push(Action::Rejected(ControlError::Placement(e.to_string())));
            }
        }
    }

    /// A move to another pair of the span's own coordinator is refused while an ec memgest
    /// exists. Every other move re-encodes the span's ec values: the new coordinator pulls
    /// them decoded from the old one and writes them through its own ec path into its
    /// group's arena (docs/design/cluster-resharding.md, "Moving ec:K+M values"). A
    /// same-node move has no pull (the node holds the span already), so its values would
    /// stay in the old group's arena, which a later removal retires: refused rather than
    /// lost. The planner never proposes one while an ec memgest exists.
    fn has_ec_memgest(&self) -> bool {
        self.map
            .memgests
            .values()
            .any(|m| matches!(m.kind, MemgestKind::Ec { .. }))
    }

    fn refuse_ec_moves_unless_allowed(&self) -> Result<(), ControlError> {
        if self.cfg.ec_moves {
            return Ok(());
        }
        match self
            .map
            .memgests
            .values()
            .find(|m| matches!(m.kind, MemgestKind::Ec { .. }))
        {
            Some(m) => Err(ControlError::EcMovesOff(m.name.clone())),
            None => Ok(()),
        }
    }

    /// Refuse a move to another pair of the same coordinator while an ec memgest exists.
    fn refuse_same_node_move_with_ec(&self) -> Result<(), ControlError> {
        match self
            .map
            .memgests
            .values()
            .find(|m| matches!(m.kind, MemgestKind::Ec { .. }))
        {
            Some(m) => Err(ControlError::EcMove(m.name.clone())),
            None => Ok(()),
        }
    }

    /// The current map with the placement groups a rotation over `nodes` forms appended,
    /// those that pass `keep` and are not already present (existing groups keep their index).
    fn with_rotation_groups(
        &self,
        nodes: &[NodeId],
        keep: impl Fn(&[NodeId]) -> bool,
    ) -> Result<ClusterMap, ControlError> {
        let mut next = (*self.map).clone();
        let p = next.placement.as_mut().ok_or(ControlError::NotPlaced)?;
        let fresh: Vec<Vec<NodeId>> = ringlet_placement::plan_groups(nodes, p.s, p.d)
            .map_err(|e| ControlError::Placement(e.to_string()))?
            .into_iter()
            .filter(|g| keep(g) && p.group_index(g).is_none())
            .collect();
        p.add_groups(fresh)
            .map_err(|e| ControlError::Placement(e.to_string()))?;
        Ok(next)
    }

    /// Remove a data node, first or second call (see [`Input::RemoveNode`]).
    fn remove_node(&mut self, node: NodeId, out: &mut Vec<Action>) -> Result<(), ControlError> {
        let p = self.map.placement.as_ref().ok_or(ControlError::NotPlaced)?;
        match self.map.node_state(node) {
            None => return Err(ControlError::UnknownNode(node)),
            Some(NodeState::Active) => {}
            Some(_) => return Err(ControlError::NotActive(node)),
        }
        let holding: Vec<u32> = (0u32..)
            .zip(p.groups.iter())
            .filter(|(_, g)| g.contains(&node))
            .map(|(i, _)| i)
            .collect();
        if self.map.removing == Some(node) {
            // Second call: nothing may still use a group holding the node.
            let busy =
                p.ranges.iter().filter(|r| holding.contains(&r.pg)).count()
                    + self
                        .map
                        .handoffs
                        .iter()
                        .filter(|h| holding.contains(&h.from_pg))
                        .count()
                    + usize::from(self.map.moving.is_some_and(|m| {
                        p.range_of(m.first).is_some_and(|r| holding.contains(&r.pg))
                    }));
            if busy > 0 {
                return Err(ControlError::RemovePending { node, ranges: busy });
            }
            let mut next = (*self.map).clone();
            if let Some(np) = next.placement.as_mut() {
                for pg in &holding {
                    np.retire_group(*pg)
                        .map_err(|e| ControlError::Placement(e.to_string()))?;
                }
            }
            next.removing = None;
            set_state(&mut next, node, NodeState::Spare);
            self.commit(next, out);
            return Ok(());
        }
        if let Some(other) = self.map.removing {
            return Err(ControlError::Removing(other));
        }
        if !self.map.leaving.is_empty() {
            return Err(ControlError::DrainInProgress);
        }
        self.refuse_ec_moves_unless_allowed()?;
        let others: Vec<NodeId> = self
            .map
            .nodes
            .iter()
            .filter(|(id, n)| n.state == NodeState::Active && **id != node)
            .map(|(id, _)| *id)
            .collect();
        let needed = usize::from(p.s) + usize::from(p.d);
        if others.len() < needed {
            return Err(ControlError::TooFewToRemove {
                node,
                left: others.len(),
                needed,
            });
        }
        let mut next = self.with_rotation_groups(&others, |_| true)?;
        next.removing = Some(node);
        self.commit(next, out);
        Ok(())
    }

    /// A spare becomes a data node: the placement groups that a rotation over the active
    /// nodes plus it would form and that contain it are appended (existing groups keep
    /// their index). It coordinates nothing until slots move to it.
    fn add_node(&mut self, node: NodeId, out: &mut Vec<Action>) -> Result<(), ControlError> {
        self.map.placement.as_ref().ok_or(ControlError::NotPlaced)?;
        match self.map.node_state(node) {
            None => return Err(ControlError::UnknownNode(node)),
            Some(NodeState::Spare) => {}
            Some(_) => return Err(ControlError::NotSpare(node)),
        }
        self.refuse_ec_moves_unless_allowed()?;
        let mut nodes: Vec<NodeId> = self
            .map
            .nodes
            .iter()
            .filter(|(_, n)| n.state == NodeState::Active)
            .map(|(id, _)| *id)
            .collect();
        nodes.push(node);
        let mut next = self.with_rotation_groups(&nodes, |g| g.contains(&node))?;
        set_state(&mut next, node, NodeState::Active);
        self.commit(next, out);
        Ok(())
    }

    /// Substitute live spares for failed PG members. Returns whether anything changed.
    fn fill_failed(&self, next: &mut ClusterMap) -> bool {
        let Some(p) = next.placement.as_ref() else {
            return false;
        };
        let failed: Vec<NodeId> = p
            .members()
            .into_iter()
            .filter(|n| next.node_state(*n) == Some(NodeState::Failed))
            .collect();
        let mut changed = false;
        for f in failed {
            let Some(spare) = pick_spare(next, None) else {
                break;
            };
            if let Some(p) = next.placement.as_mut() {
                p.substitute(f, spare);
            }
            set_state(next, spare, NodeState::Active);
            changed = true;
        }
        changed
    }

    fn bootstrap(&mut self, active: usize, out: &mut Vec<Action>) -> Result<(), ControlError> {
        if self.map.placement.is_some() {
            return Err(ControlError::AlreadyBootstrapped);
        }
        let spares: Vec<NodeId> = self
            .map
            .nodes
            .iter()
            .filter(|(_, n)| n.state == NodeState::Spare)
            .map(|(id, _)| *id)
            .collect();
        if spares.len() < active {
            return Err(ControlError::NotEnoughNodes {
                needed: active,
                have: spares.len(),
            });
        }
        let chosen = spares.get(..active).unwrap_or(&[]);
        let placement = Placement::plan(chosen, self.cfg.s, self.cfg.d)
            .map_err(|e| ControlError::Placement(e.to_string()))?;
        let mut next = (*self.map).clone();
        for n in chosen {
            set_state(&mut next, *n, NodeState::Active);
        }
        next.placement = Some(placement);
        next.placed_epoch = self.next_epoch();
        self.commit(next, out);
        Ok(())
    }

    /// Drain phase 1: list `node` as leaving (it keeps its roles and stops taking writes).
    /// Asking again while it is leaving is refused (the caller gets a verdict either way).
    fn drain(
        &mut self,
        now_ms: u64,
        node: NodeId,
        out: &mut Vec<Action>,
    ) -> Result<(), ControlError> {
        match self.map.node_state(node) {
            None => return Err(ControlError::UnknownNode(node)),
            Some(NodeState::Active) => {}
            Some(_) => return Err(ControlError::NotActive(node)),
        }
        if self.map.leaving.contains_key(&node) {
            return Err(ControlError::AlreadyLeaving(node));
        }
        // Refuse now rather than after the quiesce if no spare could take the roles.
        pick_spare(&self.map, Some(node)).ok_or(ControlError::NoSpare)?;
        let mut next = (*self.map).clone();
        next.leaving.insert(node, self.next_epoch());
        self.leaving_since.insert(node, now_ms);
        self.commit(next, out);
        Ok(())
    }

    /// Drain phase 2: substitute a spare at every position of the leaving `node`. With no
    /// spare left (it failed meanwhile) the drain is called off so the node takes writes
    /// again.
    fn finish_drain(&mut self, node: NodeId, out: &mut Vec<Action>) {
        self.leaving_since.remove(&node);
        let mut next = (*self.map).clone();
        if next.leaving.remove(&node).is_none() {
            return;
        }
        match pick_spare(&next, Some(node)) {
            Some(spare) => {
                if let Some(p) = next.placement.as_mut() {
                    p.substitute(node, spare);
                }
                set_state(&mut next, spare, NodeState::Active);
                set_state(&mut next, node, NodeState::Draining);
                self.commit(next, out);
            }
            None => {
                self.commit(next, out);
                out.push(Action::Rejected(ControlError::NoSpare));
            }
        }
    }

    fn create_memgest(
        &mut self,
        name: String,
        kind: MemgestKind,
        evictable: Option<bool>,
        out: &mut Vec<Action>,
    ) -> Result<(), ControlError> {
        if name.len() > NAME_BYTES_MAX {
            return Err(ControlError::NameTooLong);
        }
        if self.map.memgest_by_name(&name).is_some() {
            return Err(ControlError::MemgestExists(name));
        }
        let (s, d) = (self.cfg.s, self.cfg.d);
        let fits = match kind {
            MemgestKind::None => true,
            MemgestKind::Rep { r } => usize::from(r) <= usize::from(s) + usize::from(d),
            MemgestKind::Ec { m, .. } => m <= d,
        };
        if !fits {
            return Err(ControlError::MemgestShape {
                kind: kind.to_string(),
                s,
                d,
            });
        }
        if self.map.memgests.len() >= MEMGESTS_MAX {
            return Err(ControlError::TooManyMemgests);
        }
        // Above every id in use, so a dropped id is not handed out again while a node with
        // a lagging map (or an old tombstone) may still know it under its old scheme; the
        // lowest free id only once u16 is exhausted.
        let above = self
            .map
            .memgests
            .keys()
            .next_back()
            .and_then(|m| m.0.checked_add(1))
            .map(MemgestId);
        let id = above
            .or_else(|| {
                (1..=u16::MAX)
                    .map(MemgestId)
                    .find(|id| !self.map.memgests.contains_key(id))
            })
            .ok_or(ControlError::TooManyMemgests)?;
        let mut next = (*self.map).clone();
        next.memgests.insert(
            id,
            MemgestInfo {
                name,
                kind,
                evictable: evictable.unwrap_or(kind.evictable_by_default()),
                closing: false,
                written: false,
            },
        );
        self.commit(next, out);
        Ok(())
    }

    fn on_usage(
        &mut self,
        now_ms: u64,
        node: NodeId,
        incarnation: u64,
        epoch: Epoch,
        memgests: Vec<(MemgestId, MemgestUsage)>,
        ec: EcUsage,
    ) {
        let current = self
            .map
            .nodes
            .get(&node)
            .is_some_and(|n| n.incarnation == incarnation && n.state != NodeState::Failed);
        if !current || memgests.len() > MEMGESTS_MAX {
            return;
        }
        self.usage.insert(
            node,
            UsageReport {
                incarnation,
                epoch,
                at_ms: now_ms,
                memgests: memgests.into_iter().collect(),
                ec,
            },
        );
    }

    /// Nodes that may hold data: their reports decide whether a memgest is empty. Failed
    /// nodes' data is gone (a restart comes back empty); spares hold nothing.
    fn holders(&self) -> Vec<NodeId> {
        self.map
            .nodes
            .iter()
            .filter(|(_, n)| matches!(n.state, NodeState::Active | NodeState::Draining))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Keys of `id` in the latest reports of the current holders.
    fn reported_keys(&self, id: MemgestId) -> u64 {
        self.holders()
            .iter()
            .filter_map(|n| {
                let inc = self.map.nodes.get(n)?.incarnation;
                self.usage.get(n).filter(|r| r.incarnation == inc)
            })
            .filter_map(|r| r.memgests.get(&id))
            .map(|u| u.keys)
            .sum()
    }

    fn drop_memgest(
        &mut self,
        now_ms: u64,
        name: &str,
        out: &mut Vec<Action>,
    ) -> Result<(), ControlError> {
        let id = self
            .map
            .memgest_by_name(name)
            .ok_or_else(|| ControlError::NoSuchMemgest(name.to_string()))?;
        if id == self.map.default_memgest || id == MemgestId::NONE {
            return Err(ControlError::DropDefault(name.to_string()));
        }
        let Some(&(closed_epoch, closed_ms)) = self.closing.get(&id) else {
            // Step 1: close. No early refusal on the reports at hand: they may predate a
            // delete or move the client just made, and a refusal must reflect the state
            // after the request.
            let mut next = (*self.map).clone();
            if let Some(m) = next.memgests.get_mut(&id) {
                m.closing = true;
            }
            self.commit(next, out);
            self.closing.insert(id, (self.map.epoch, now_ms));
            return Ok(());
        };
        // Step 2: every holder must have counted at the closing epoch, long enough after it.
        let settled = self.holders().iter().all(|n| {
            let inc = self.map.nodes.get(n).map(|i| i.incarnation);
            self.usage.get(n).is_some_and(|r| {
                Some(r.incarnation) == inc
                    && r.epoch >= closed_epoch
                    && r.at_ms >= closed_ms.saturating_add(DROP_SETTLE_MS)
            })
        });
        if !settled {
            return Err(ControlError::DropPending(name.to_string()));
        }
        let keys = self.reported_keys(id);
        let mut next = (*self.map).clone();
        self.closing.remove(&id);
        if keys > 0 {
            if let Some(m) = next.memgests.get_mut(&id) {
                m.closing = false;
            }
            self.commit(next, out);
            return Err(ControlError::MemgestInUse {
                name: name.to_string(),
                keys,
            });
        }
        next.memgests.remove(&id);
        self.commit(next, out);
        Ok(())
    }

    fn cancel_drop(&mut self, name: &str, out: &mut Vec<Action>) -> Result<(), ControlError> {
        let id = self
            .map
            .memgest_by_name(name)
            .ok_or_else(|| ControlError::NoSuchMemgest(name.to_string()))?;
        if self.closing.remove(&id).is_none() {
            return Err(ControlError::NotClosing(name.to_string()));
        }
        let mut next = (*self.map).clone();
        if let Some(m) = next.memgests.get_mut(&id) {
            m.closing = false;
        }
        self.commit(next, out);
        Ok(())
    }

    fn set_default(&mut self, name: &str, out: &mut Vec<Action>) -> Result<(), ControlError> {
        let id = self
            .map
            .memgest_by_name(name)
            .ok_or_else(|| ControlError::NoSuchMemgest(name.to_string()))?;
        if self.closing.contains_key(&id) {
            return Err(ControlError::MemgestClosing(name.to_string()));
        }
        let mut next = (*self.map).clone();
        next.default_memgest = id;
        self.commit(next, out);
        Ok(())
    }

    /// # Panics
    /// On a broken invariant (a bug here).
    pub fn check_invariants(&self) {
        self.map.check_invariants();
        for id in self.closing.keys() {
            assert!(
                self.map.memgests.get(id).is_some_and(|m| m.closing),
                "a pending drop's memgest must be closed in the map"
            );
        }
        for m in self.map.memgests.values() {
            if m.closing {
                let id = self.map.memgest_by_name(&m.name);
                assert!(
                    id.is_some_and(|id| self.closing.contains_key(&id)),
                    "a closed memgest must have a pending drop"
                );
            }
        }
        for (id, l) in &self.leases {
            if let Some(n) = self.map.nodes.get(id) {
                assert!(
                    l.incarnation <= n.incarnation,
                    "lease of a future incarnation"
                );
            }
        }
    }
}

/// Lowest-id live spare, excluding `except`.
fn pick_spare(map: &ClusterMap, except: Option<NodeId>) -> Option<NodeId> {
    map.nodes
        .iter()
        .find(|(id, n)| n.state == NodeState::Spare && Some(**id) != except)
        .map(|(id, _)| *id)
}

fn set_state(map: &mut ClusterMap, node: NodeId, state: NodeState) {
    let next_epoch = Epoch(map.epoch.0.saturating_add(1));
    if let Some(n) = map.nodes.get_mut(&node) {
        if state == NodeState::Active && n.state != NodeState::Active {
            // Takes PG positions in the map about to be committed (epoch + 1).
            n.roles_epoch = next_epoch;
        }
        n.state = state;
    }
    if state != NodeState::Active {
        map.leaving.remove(&node);
        // A node that fails while being removed: failover takes its positions instead.
        if map.removing == Some(node) {
            map.removing = None;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn published(out: &[Action]) -> Option<Arc<ClusterMap>> {
        out.iter().rev().find_map(|a| match a {
            Action::Publish(m) => Some(m.clone()),
            _ => None,
        })
    }

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
        let out = cp.step(0, Input::Bootstrap { active });
        assert!(published(&out).is_some(), "{out:?}");
        cp.check_invariants();
        cp
    }

    fn beat(cp: &mut ControlPlane, now: u64, node: u32) -> Vec<Action> {
        let inc = cp.map().nodes[&NodeId(node)].incarnation;
        let epoch = cp.map().epoch;
        cp.step(
            now,
            Input::Heartbeat {
                node: NodeId(node),
                incarnation: inc,
                epoch,
                sent_ms: now,
            },
        )
    }

    #[test]
    fn lease_expiry_hands_roles_to_spare() {
        let mut cp = cluster(4, 3);
        let e0 = cp.map().epoch;
        // Node 2 stops heartbeating.
        for t in (100..=2000).step_by(100) {
            for n in [1, 3, 4] {
                beat(&mut cp, t, n);
            }
            cp.step(t, Input::Tick);
            cp.check_invariants();
        }
        let m = cp.map();
        assert!(m.epoch > e0);
        assert_eq!(m.node_state(NodeId(2)), Some(NodeState::Failed));
        assert_eq!(m.node_state(NodeId(4)), Some(NodeState::Active));
        let members = m.placement.as_ref().unwrap().members();
        assert!(!members.contains(&NodeId(2)));
        assert!(members.contains(&NodeId(4)));
        // A heartbeat from the fenced incarnation is told so.
        let out = cp.step(
            2100,
            Input::Heartbeat {
                node: NodeId(2),
                incarnation: 1,
                epoch: e0,
                sent_ms: 2100,
            },
        );
        assert!(matches!(out[0], Action::Fenced { .. }));
    }

    #[test]
    fn restart_rejoins_as_spare_and_roles_move() {
        let mut cp = cluster(4, 3);
        let e0 = cp.map().epoch;
        let out = cp.step(
            10,
            Input::Join {
                node: NodeId(1),
                addr: "n1".into(),
                incarnation: 2,
            },
        );
        let m = published(&out).unwrap();
        assert!(m.epoch > e0);
        assert_eq!(m.node_state(NodeId(1)), Some(NodeState::Spare));
        assert_eq!(m.nodes[&NodeId(1)].incarnation, 2);
        assert_eq!(m.node_state(NodeId(4)), Some(NodeState::Active));
    }

    #[test]
    fn restart_without_spare_takes_back_its_positions_fresh() {
        let mut cp = cluster(3, 3);
        let out = cp.step(
            10,
            Input::Join {
                node: NodeId(2),
                addr: "n2".into(),
                incarnation: 5,
            },
        );
        let m = published(&out).unwrap();
        assert_eq!(m.node_state(NodeId(2)), Some(NodeState::Active));
        assert_eq!(m.nodes[&NodeId(2)].incarnation, 5);
    }

    #[test]
    fn add_node_then_move_slots_in_two_phases() {
        let mut cp = cluster(4, 3);
        let groups_before = cp.map().placement.as_ref().unwrap().groups.len();
        let m = published(&cp.step(5, Input::AddNode { node: NodeId(4) })).unwrap();
        assert_eq!(m.node_state(NodeId(4)), Some(NodeState::Active));
        let p = m.placement.as_ref().unwrap();
        assert!(p.groups.len() > groups_before);
        // No slots yet: node 4 coordinates nothing.
        assert!(!p.slots_per_coordinator().contains_key(&NodeId(4)));
        // Adding it again is refused.
        assert!(matches!(
            cp.step(6, Input::AddNode { node: NodeId(4) }).as_slice(),
            [Action::Rejected(ControlError::NotSpare(_))]
        ));
        // A group where node 4 is data index 0.
        let pg = (0u32..)
            .zip(p.groups.iter())
            .find(|(_, g)| g[0] == NodeId(4))
            .map(|(i, _)| i)
            .unwrap();
        let r0 = p.ranges[0];
        let source = p.range_coordinator(&r0).unwrap();
        let (first, last) = (r0.first, r0.first + 99);
        let m = published(&cp.step(
            10,
            Input::MoveSlots {
                first,
                last,
                pg,
                data_index: 0,
                rate_kib_s: 0,
            },
        ))
        .unwrap();
        assert_eq!(m.moving.unwrap().first, first);
        assert_eq!(m.moving_source(), Some(source));
        // Phase 0: the target copies while the owner keeps serving (writes included).
        let mv = m.moving.unwrap();
        assert!(mv.copying && !m.is_moving(first));
        assert_eq!((mv.source, mv.target), (source.0, 4));
        assert_eq!(m.move_target(&mv), Some(NodeId(4)));
        let inc = |cp: &ControlPlane, n: NodeId| cp.map().nodes[&n].incarnation;
        let copied = |node, incarnation, epoch| Input::MoveCopied {
            node,
            incarnation,
            first,
            last,
            epoch,
        };
        // Only the target's report of exactly this move ends phase 0; a quiesce report
        // from the source is too early, and a handoff report is something else.
        let e = mv.epoch;
        assert!(published(&cp.step(10, copied(source, inc(&cp, source), e))).is_none());
        assert!(published(&cp.step(10, copied(NodeId(4), inc(&cp, NodeId(4)), e - 1))).is_none());
        let handoff_done = Input::HandoffDone {
            node: NodeId(4),
            incarnation: inc(&cp, NodeId(4)),
            first,
            last,
        };
        assert!(published(&cp.step(10, handoff_done)).is_none());
        let early = Input::Quiesced {
            node: source,
            incarnation: inc(&cp, source),
            epoch: m.epoch,
        };
        assert!(published(&cp.step(10, early)).is_none());
        let m = published(&cp.step(10, copied(NodeId(4), inc(&cp, NodeId(4)), e))).unwrap();
        assert!(!m.moving.unwrap().copying && m.moving.unwrap().epoch == m.epoch.0);
        assert!(m.is_moving(first) && !m.is_moving(last + 1));
        // Phase 1 keeps the owner; a second move is refused meanwhile.
        assert_eq!(m.coordinator(first), Some(source));
        assert!(matches!(
            cp.step(
                11,
                Input::MoveSlots {
                    first: 9000,
                    last: 9001,
                    pg,
                    data_index: 0,
                    rate_kib_s: 0,
                }
            )
            .as_slice(),
            [Action::Rejected(ControlError::MoveInProgress { .. })]
        ));
        // A quiesce report from another node, or too old, does nothing.
        let other = if source == NodeId(1) {
            NodeId(2)
        } else {
            NodeId(1)
        };
        let q = |node, incarnation, epoch| Input::Quiesced {
            node,
            incarnation,
            epoch,
        };
        assert!(published(&cp.step(12, q(other, inc(&cp, other), m.epoch))).is_none());
        assert!(published(&cp.step(12, q(source, inc(&cp, source), Epoch(1)))).is_none());
        // Phase 2: the span belongs to node 4, with a handoff from the old pair.
        let m = published(&cp.step(13, q(source, inc(&cp, source), m.epoch))).unwrap();
        assert!(m.moving.is_none());
        assert_eq!(m.coordinator(first), Some(NodeId(4)));
        assert_eq!(m.coordinator(last + 1), Some(source));
        let h = *m.handoff(first, last).unwrap();
        assert_eq!((h.from_pg, h.from_data_index), (r0.pg, r0.data_index));
        assert_eq!(m.prior_cohort(&h)[0], source);
        assert_eq!(
            m.placement.as_ref().unwrap().range_of(first).unwrap().moved,
            m.epoch.0
        );
        // Overlapping moves wait for the handoff to finish.
        assert!(matches!(
            cp.step(
                14,
                Input::MoveSlots {
                    first,
                    last: first,
                    pg: r0.pg,
                    data_index: r0.data_index,
                    rate_kib_s: 0,
                }
            )
            .as_slice(),
            [Action::Rejected(ControlError::HandoffPending { .. })]
        ));
        // Only the new coordinator ends the handoff.
        let done = |node, incarnation| Input::HandoffDone {
            node,
            incarnation,
            first,
            last,
        };
        assert!(published(&cp.step(15, done(source, inc(&cp, source)))).is_none());
        let m = published(&cp.step(16, done(NodeId(4), inc(&cp, NodeId(4))))).unwrap();
        assert!(m.handoffs.is_empty());
        // The map's JSON round-trips with the moved range.
        let back = ClusterMap::from_json(&m.to_json().unwrap()).unwrap();
        assert_eq!(*m, back);
        // Moving back is accepted now.
        published(&cp.step(
            17,
            Input::MoveSlots {
                first,
                last,
                pg: r0.pg,
                data_index: r0.data_index,
                rate_kib_s: 0,
            },
        ))
        .unwrap();
        cp.check_invariants();
    }

    /// ACL users (docs/design/acl.md): SETUSER applies rules to the map's user as it is
    /// (two changes from different nodes both hold), publishes a new epoch with a new
    /// `users_version`, refuses bad rules and the `default` user with the reason, and the
    /// users survive the map's JSON but never reach a client's copy.
    #[test]
    fn acl_users_travel_in_the_map() {
        let mut cp = cluster(3, 3);
        let e0 = cp.map().epoch;
        let set = |name: &str, rules: &[&str]| Input::SetUser {
            name: name.into(),
            rules: rules.iter().map(|r| r.to_string()).collect(),
        };
        let hash = format!("#{}", "ab".repeat(32));
        let m = published(&cp.step(1, set("alice", &["on", &hash, "~k*", "+get"]))).unwrap();
        assert!(m.epoch > e0);
        assert_eq!(m.users_version, 1);
        assert_eq!(
            m.users["alice"],
            format!("on {hash} ~k* resetchannels -@all +get")
        );
        // A second change from another node keeps the first one's rules.
        let m = published(&cp.step(2, set("alice", &["+set"]))).unwrap();
        assert_eq!(
            m.users["alice"],
            format!("on {hash} ~k* resetchannels -@all +get +set")
        );
        assert_eq!(m.users_version, 2);
        // Bad rules and the default user are refused with the reason; nothing published.
        let out = cp.step(3, set("alice", &["+nosuch"]));
        assert!(published(&out).is_none());
        assert!(matches!(
            out.as_slice(),
            [Action::Rejected(ControlError::Acl(e))] if e.contains("Unknown command")
        ));
        let out = cp.step(3, set("default", &["off"]));
        assert!(matches!(
            out.as_slice(),
            [Action::Rejected(ControlError::Acl(e))] if e.contains("--requirepass")
        ));
        // An unchanged user publishes nothing.
        assert!(published(&cp.step(4, set("alice", &["+set"]))).is_none());
        let back = ClusterMap::from_json(&cp.map().to_json().unwrap()).unwrap();
        assert_eq!(back, *cp.map().as_ref());
        assert!(cp.map().for_client().users.is_empty());
        let m = published(&cp.step(
            5,
            Input::DelUsers {
                names: vec!["alice".into(), "nobody".into()],
            },
        ))
        .unwrap();
        assert!(m.users.is_empty());
        assert_eq!(m.users_version, 3);
        cp.check_invariants();
    }

    #[test]
    fn moves_are_refused_clearly() {
        let mut cp = cluster(4, 3);
        let rej = |out: Vec<Action>| match out.as_slice() {
            [Action::Rejected(e)] => e.clone(),
            o => panic!("{o:?}"),
        };
        let p = cp.map().placement.clone().unwrap();
        let r0 = p.ranges[0];
        let r1 = p.ranges[1];
        let mv = |first, last, pg, data_index| Input::MoveSlots {
            first,
            last,
            pg,
            data_index,
            rate_kib_s: 0,
        };
        assert!(matches!(
            rej(cp.step(1, mv(r0.first, r1.first, r1.pg, 0))),
            ControlError::BadMove(_)
        ));
        assert!(matches!(
            rej(cp.step(1, mv(r0.first, r0.first, r0.pg, r0.data_index))),
            ControlError::BadMove(_)
        ));
        assert!(matches!(
            rej(cp.step(1, mv(0, 0, 99, 0))),
            ControlError::BadMove(_)
        ));
        assert!(matches!(
            rej(cp.step(1, mv(0, 0, 1, 9))),
            ControlError::BadMove(_)
        ));
        // With an ec memgest, a span moves to another node's pair (its values are
        // re-encoded there) but not to another pair of its own coordinator.
        cp.step(
            1,
            Input::CreateMemgest {
                name: "cold".into(),
                kind: MemgestKind::Ec { k: 2, m: 1 },
                evictable: None,
            },
        );
        let id = cp.map().memgest_by_name("cold").unwrap();
        cp.step(1, Input::MarkWritten { memgest: id });
        let p = cp.map().placement.clone().unwrap();
        let coord = p.range_coordinator(&r0).unwrap();
        let pair = |same: bool| {
            (0u32..).zip(p.groups.iter()).find_map(|(gi, g)| {
                g.iter()
                    .take(usize::from(p.s))
                    .position(|n| (*n == coord) == same)
                    .filter(|_| gi != r0.pg)
                    .map(|j| (gi, j as u8))
            })
        };
        // On by default (ControlConfig::ec_moves); turned off (--no-ec-moves) the move is
        // refused with the flag named, and nothing is published.
        assert!(ControlConfig::default().ec_moves);
        cp.cfg.ec_moves = false;
        let epoch = cp.map().epoch;
        let (gi, j) = pair(false).unwrap();
        let e = rej(cp.step(1, mv(r0.first, r0.first, gi, j)));
        assert!(matches!(e, ControlError::EcMovesOff(_)), "{e:?}");
        assert!(e.to_string().contains("--no-ec-moves"), "{e}");
        assert_eq!(cp.map().epoch, epoch);
        assert!(cp.map().moving.is_none());
        cp.cfg.ec_moves = true;
        let (gi, j) = pair(true).unwrap();
        assert!(matches!(
            rej(cp.step(1, mv(r0.first, r0.first, gi, j))),
            ControlError::EcMove(_)
        ));
        let (gi, j) = pair(false).unwrap();
        published(&cp.step(1, mv(r0.first, r0.first, gi, j))).unwrap();
    }

    #[test]
    fn an_unreported_move_switches_after_the_quiesce_limit() {
        let mut cp = cluster(4, 3);
        let r0 = cp.map().placement.as_ref().unwrap().ranges[0];
        let target = (r0.pg + 1) % 3;
        published(&cp.step(
            0,
            Input::MoveSlots {
                first: 0,
                last: 9,
                pg: target,
                data_index: 0,
                rate_kib_s: 0,
            },
        ))
        .unwrap();
        let mv = cp.map().moving.unwrap();
        if mv.copying {
            let node = NodeId(mv.target);
            let incarnation = cp.map().nodes[&node].incarnation;
            let copied = Input::MoveCopied {
                node,
                incarnation,
                first: 0,
                last: 9,
                epoch: mv.epoch,
            };
            published(&cp.step(50, copied)).unwrap();
        }
        for t in (100..=DRAIN_QUIESCE_MS_MAX + 200).step_by(100) {
            for n in 1..=4 {
                beat(&mut cp, t, n);
            }
            cp.step(t, Input::Tick);
        }
        let m = cp.map();
        assert!(m.moving.is_none());
        assert_eq!(
            m.placement.as_ref().unwrap().range_of(0).unwrap().pg,
            target
        );
        assert!(m.handoff(0, 9).is_some());
    }

    /// With an ec memgest, a fence whose source never reports quiesced is called off at
    /// the limit instead of switching (the source may not hold the span's ec values whole).
    #[test]
    fn with_an_ec_memgest_an_unreported_fence_is_called_off_at_the_quiesce_limit() {
        let mut cp = cluster(4, 3);
        cp.step(
            0,
            Input::CreateMemgest {
                name: "cold".into(),
                kind: MemgestKind::Ec { k: 2, m: 1 },
                evictable: None,
            },
        );
        let p = cp.map().placement.clone().unwrap();
        let r0 = p.ranges[0];
        let source = p.range_coordinator(&r0).unwrap();
        let (pg, di) = (0u32..)
            .zip(p.groups.iter())
            .find_map(|(gi, g)| {
                g.iter()
                    .take(usize::from(p.s))
                    .position(|n| *n != source)
                    .map(|j| (gi, j as u8))
            })
            .unwrap();
        published(&cp.step(
            0,
            Input::MoveSlots {
                first: r0.first,
                last: r0.first,
                pg,
                data_index: di,
                rate_kib_s: 0,
            },
        ))
        .unwrap();
        let mv = cp.map().moving.unwrap();
        if mv.copying {
            let node = NodeId(mv.target);
            let incarnation = cp.map().nodes[&node].incarnation;
            let copied = Input::MoveCopied {
                node,
                incarnation,
                first: mv.first,
                last: mv.last,
                epoch: mv.epoch,
            };
            published(&cp.step(50, copied)).unwrap();
        }
        assert!(!cp.map().moving.unwrap().copying);
        for t in (100..=DRAIN_QUIESCE_MS_MAX + 200).step_by(100) {
            for n in 1..=4 {
                beat(&mut cp, t, n);
            }
            cp.step(t, Input::Tick);
        }
        let m = cp.map();
        assert!(m.moving.is_none());
        let r = *m.placement.as_ref().unwrap().range_of(r0.first).unwrap();
        assert_eq!((r.pg, r.data_index), (r0.pg, r0.data_index));
        assert!(m.handoff(r0.first, r0.first).is_none());
    }

    /// Phase 0 is called off, with the old owner untouched, when the target fails, when
    /// the source fails, and when the copy outlasts [`MOVE_COPY_MS_MAX`].
    #[test]
    fn a_copying_move_is_called_off_when_its_source_or_target_fails_or_it_takes_too_long() {
        for case in ["target", "source", "slow"] {
            let mut cp = cluster(5, 4);
            let p = cp.map().placement.clone().unwrap();
            let r0 = p.ranges[0];
            let source = p.range_coordinator(&r0).unwrap();
            // A pair whose coordinator is another node.
            let (pg, g) = (0u32..)
                .zip(p.groups.iter())
                .find(|(_, g)| g[0] != source && !g.is_empty())
                .unwrap();
            let target = g[0];
            let mv = Input::MoveSlots {
                first: r0.first,
                last: r0.first + 5,
                pg,
                data_index: 0,
                rate_kib_s: 0,
            };
            let m = published(&cp.step(0, mv)).unwrap();
            assert!(m.moving.unwrap().copying, "{case}");
            let (alive, horizon) = match case {
                "target" => (vec![target], 3_000),
                "source" => (vec![source], 3_000),
                _ => (vec![], MOVE_COPY_MS_MAX + 500),
            };
            let mut t = 100;
            while t <= horizon {
                for n in 1..=5 {
                    if !alive.contains(&NodeId(n)) {
                        beat(&mut cp, t, n);
                    }
                }
                cp.step(t, Input::Tick);
                t += 100;
            }
            let m = cp.map();
            assert!(m.moving.is_none(), "{case}: the move is called off");
            assert!(m.handoffs.is_empty(), "{case}: nothing switched");
            let r = *m.placement.as_ref().unwrap().range_of(r0.first).unwrap();
            assert_eq!((r.pg, r.data_index), (r0.pg, r0.data_index), "{case}");
            let events: Vec<String> = cp
                .events()
                .after(0, usize::MAX)
                .iter()
                .map(|e| e.kind.name().to_string())
                .collect();
            assert!(
                events.iter().any(|e| e == "move_cancelled"),
                "{case}: {events:?}"
            );
        }
    }

    /// Phase 1 (the fence) is called off too when the source or the target fails: the old
    /// pair stays authoritative (a spare takes the failed node's roles there), and a quiesce
    /// report from the spare that replaced the source does not switch the span.
    #[test]
    fn a_fencing_move_is_called_off_when_its_source_or_target_fails() {
        for case in ["target", "source"] {
            let mut cp = cluster(5, 4);
            let p = cp.map().placement.clone().unwrap();
            let r0 = p.ranges[0];
            let source = p.range_coordinator(&r0).unwrap();
            let (pg, g) = (0u32..)
                .zip(p.groups.iter())
                .find(|(_, g)| g[0] != source && !g.is_empty())
                .unwrap();
            let target = g[0];
            let mv = Input::MoveSlots {
                first: r0.first,
                last: r0.first + 5,
                pg,
                data_index: 0,
                rate_kib_s: 0,
            };
            let m = published(&cp.step(0, mv)).unwrap();
            let moving = m.moving.unwrap();
            let copied = Input::MoveCopied {
                node: target,
                incarnation: m.nodes[&target].incarnation,
                first: r0.first,
                last: r0.first + 5,
                epoch: moving.epoch,
            };
            let m = published(&cp.step(50, copied)).unwrap();
            assert!(!m.moving.unwrap().copying, "{case}: fencing");
            let dead = if case == "target" { target } else { source };
            // Past the quiesce limit, after which a live fence switches anyway.
            let mut t = 100;
            while t <= DRAIN_QUIESCE_MS_MAX + 2_000 {
                for n in 1..=5 {
                    if NodeId(n) != dead {
                        beat(&mut cp, t, n);
                    }
                }
                // The node now coordinating the span reports quiesced every step: only
                // the move's own source may end the fence.
                let now = cp.map().clone();
                if let Some(c) = now.coordinator(r0.first).filter(|c| *c != source) {
                    cp.step(
                        t,
                        Input::Quiesced {
                            node: c,
                            incarnation: now.nodes[&c].incarnation,
                            epoch: now.epoch,
                        },
                    );
                }
                cp.step(t, Input::Tick);
                t += 100;
            }
            let m = cp.map();
            assert!(m.moving.is_none(), "{case}: the move is called off");
            assert!(m.handoffs.is_empty(), "{case}: nothing switched");
            let r = *m.placement.as_ref().unwrap().range_of(r0.first).unwrap();
            assert_eq!((r.pg, r.data_index), (r0.pg, r0.data_index), "{case}");
        }
    }

    #[test]
    fn drain_moves_roles_once_the_node_is_quiesced() {
        let mut cp = cluster(4, 3);
        let inc = cp.map().nodes[&NodeId(3)].incarnation;
        // Phase 1: listed as leaving, roles kept.
        let out = cp.step(10, Input::Drain { node: NodeId(3) });
        let m = published(&out).unwrap();
        let asked = m.leaving[&NodeId(3)];
        assert_eq!(asked, m.epoch);
        assert_eq!(m.node_state(NodeId(3)), Some(NodeState::Active));
        assert_eq!(m.node_state(NodeId(4)), Some(NodeState::Spare));
        // Asking again is refused and changes nothing.
        assert_eq!(
            cp.step(11, Input::Drain { node: NodeId(3) }),
            vec![Action::Rejected(ControlError::AlreadyLeaving(NodeId(3)))]
        );
        // A report for an older epoch or another incarnation does not count.
        let stale = Input::Quiesced {
            node: NodeId(3),
            incarnation: inc,
            epoch: Epoch(asked.0 - 1),
        };
        assert!(cp.step(12, stale).is_empty());
        let other = Input::Quiesced {
            node: NodeId(3),
            incarnation: inc + 1,
            epoch: asked,
        };
        assert!(cp.step(12, other).is_empty());
        // Phase 2 on the node's report.
        let out = cp.step(
            13,
            Input::Quiesced {
                node: NodeId(3),
                incarnation: inc,
                epoch: asked,
            },
        );
        let m = published(&out).unwrap();
        assert!(m.leaving.is_empty());
        assert_eq!(m.node_state(NodeId(3)), Some(NodeState::Draining));
        assert_eq!(m.node_state(NodeId(4)), Some(NodeState::Active));
        // No second spare: refused up front.
        let out = cp.step(14, Input::Drain { node: NodeId(1) });
        assert_eq!(out, vec![Action::Rejected(ControlError::NoSpare)]);
    }

    #[test]
    fn drain_moves_roles_after_the_quiesce_limit_without_a_report() {
        let mut cp = cluster(4, 3);
        for n in 1..=4 {
            beat(&mut cp, 100, n);
        }
        published(&cp.step(100, Input::Drain { node: NodeId(3) })).unwrap();
        for n in 1..=4 {
            beat(&mut cp, 100 + DRAIN_QUIESCE_MS_MAX - 10, n);
        }
        assert!(cp
            .step(100 + DRAIN_QUIESCE_MS_MAX - 1, Input::Tick)
            .is_empty());
        let out = cp.step(100 + DRAIN_QUIESCE_MS_MAX, Input::Tick);
        let m = published(&out).unwrap();
        assert!(m.leaving.is_empty());
        assert_eq!(m.node_state(NodeId(3)), Some(NodeState::Draining));
    }

    #[test]
    fn memgests_and_epochs() {
        let mut cp = cluster(3, 3);
        let mut last = cp.map().epoch;
        let steps = vec![
            Input::CreateMemgest {
                name: "r3".into(),
                kind: MemgestKind::Rep { r: 3 },
                evictable: None,
            },
            Input::SetDefault { name: "r3".into() },
        ];
        for s in steps {
            let out = cp.step(1, s);
            let m = published(&out).unwrap();
            assert!(m.epoch > last);
            last = m.epoch;
        }
        let id = cp.map().memgest_by_name("r3").unwrap();
        assert_eq!(cp.map().default_memgest, id);
        assert_eq!(cp.map().replica_depth(), 3);
        assert!(matches!(
            cp.step(1, Input::DropMemgest { name: "r3".into() })[0],
            Action::Rejected(ControlError::DropDefault(_))
        ));
        assert!(matches!(
            cp.step(
                1,
                Input::CreateMemgest {
                    name: "r5".into(),
                    kind: MemgestKind::Rep { r: 5 },
                    evictable: None
                }
            )[0],
            Action::Rejected(ControlError::MemgestShape { .. })
        ));
    }

    fn report(cp: &mut ControlPlane, now: u64, node: u32, id: MemgestId, keys: u64) {
        let inc = cp.map().nodes[&NodeId(node)].incarnation;
        let epoch = cp.map().epoch;
        cp.step(
            now,
            Input::Usage {
                node: NodeId(node),
                incarnation: inc,
                epoch,
                memgests: vec![(
                    id,
                    MemgestUsage {
                        keys,
                        bytes: keys * 100,
                    },
                )],
                ec: EcUsage::default(),
            },
        );
    }

    fn create(cp: &mut ControlPlane, name: &str, kind: &str) -> MemgestId {
        let out = cp.step(
            0,
            Input::CreateMemgest {
                name: name.into(),
                kind: MemgestKind::parse(kind).unwrap(),
                evictable: None,
            },
        );
        assert!(published(&out).is_some(), "{out:?}");
        cp.map().memgest_by_name(name).unwrap()
    }

    #[test]
    fn drop_is_refused_while_keys_live_then_allowed() {
        let mut cp = cluster(4, 3);
        let id = create(&mut cp, "cold", "rep:2");
        let drop = |cp: &mut ControlPlane, now| {
            cp.step(
                now,
                Input::DropMemgest {
                    name: "cold".into(),
                },
            )
        };
        // Keys reported before the request do not refuse it at once (they may be gone by
        // now): the first call closes (published), writes naming it are refused.
        report(&mut cp, 10, 2, id, 5);
        let out = drop(&mut cp, 40);
        assert!(published(&out).is_some(), "{out:?}");
        assert!(cp.map().memgests[&id].closing);
        assert_eq!(cp.map().writable_memgest("cold"), None);
        cp.check_invariants();
        // Reports from before the closing epoch do not count.
        let out = drop(&mut cp, 40 + DROP_SETTLE_MS + 1);
        assert!(
            matches!(&out[..], [Action::Rejected(ControlError::DropPending(_))]),
            "{out:?}"
        );
        // A key that landed after the close (a write already in flight) reopens it.
        let t = 40 + DROP_SETTLE_MS + 10;
        report(&mut cp, t, 1, id, 0);
        report(&mut cp, t, 2, id, 1);
        report(&mut cp, t, 3, id, 0);
        let out = drop(&mut cp, t + 1);
        assert!(matches!(
            out.last(),
            Some(Action::Rejected(ControlError::MemgestInUse { keys: 1, .. }))
        ));
        assert!(published(&out).is_some());
        assert!(!cp.map().memgests[&id].closing);
        cp.check_invariants();
        // Empty for good: close, settle, drop.
        let t = t + 100;
        for n in 1..=3 {
            report(&mut cp, t, n, id, 0);
        }
        assert!(published(&drop(&mut cp, t)).is_some());
        let t2 = t + DROP_SETTLE_MS;
        for n in 1..=3 {
            report(&mut cp, t2, n, id, 0);
        }
        let out = drop(&mut cp, t2 + 1);
        let m = published(&out).unwrap();
        assert!(m.memgest_by_name("cold").is_none());
        cp.check_invariants();
    }

    #[test]
    fn cancel_drop_reopens_and_stale_incarnations_do_not_report() {
        let mut cp = cluster(4, 3);
        let id = create(&mut cp, "tmp", "none");
        let out = cp.step(1, Input::DropMemgest { name: "tmp".into() });
        assert!(published(&out).is_some());
        assert!(matches!(
            cp.step(1, Input::SetDefault { name: "tmp".into() })[0],
            Action::Rejected(ControlError::MemgestClosing(_))
        ));
        let out = cp.step(2, Input::CancelDrop { name: "tmp".into() });
        assert!(published(&out).is_some());
        assert!(!cp.map().memgests[&id].closing);
        assert!(matches!(
            cp.step(3, Input::CancelDrop { name: "tmp".into() })[0],
            Action::Rejected(ControlError::NotClosing(_))
        ));
        cp.check_invariants();
        // A report from a dead incarnation is ignored.
        cp.step(
            4,
            Input::Usage {
                node: NodeId(1),
                incarnation: 0,
                epoch: cp.map().epoch,
                memgests: vec![(id, MemgestUsage { keys: 9, bytes: 9 })],
                ec: EcUsage::default(),
            },
        );
        assert!(!cp.usage().contains_key(&NodeId(1)));
    }

    #[test]
    fn json_round_trip_and_validation() {
        let cp = cluster(4, 3);
        let json = cp.map().to_json().unwrap();
        let back = ClusterMap::from_json(&json).unwrap();
        assert_eq!(&back, &**cp.map());
        // A corrupted map is an error, not a panic.
        let bad = json.replace("\"Active\"", "\"Spare\"");
        assert!(ClusterMap::from_json(&bad).is_err());
        assert!(ClusterMap::from_json("{").is_err());
    }

    fn event_kinds(cp: &ControlPlane, after: u64) -> Vec<crate::events::EventKind> {
        cp.events()
            .after(after, usize::MAX)
            .into_iter()
            .map(|e| e.kind)
            .collect()
    }

    #[test]
    fn the_event_log_tells_joins_failover_drain_moves_and_memgests() {
        use crate::events::EventKind as K;
        let mut cp = cluster(5, 3);
        let kinds = event_kinds(&cp, 0);
        assert_eq!(
            kinds.first(),
            Some(&K::NodeJoined {
                node: 1,
                addr: "n1".into()
            })
        );
        assert_eq!(
            kinds.last(),
            Some(&K::Bootstrapped {
                active: vec![1, 2, 3]
            })
        );
        // Every event carries the epoch of the map that recorded it.
        let boot = cp.events().after(0, usize::MAX).pop().unwrap();
        assert_eq!(boot.epoch, cp.map().epoch);
        // Failover: node 2 stops heartbeating; spare 4 takes its roles.
        let mark = cp.events().last_seq();
        for t in (100..=2000).step_by(100) {
            for n in [1, 3, 4, 5] {
                beat(&mut cp, t, n);
            }
            cp.step(t, Input::Tick);
        }
        let kinds = event_kinds(&cp, mark);
        assert_eq!(
            kinds,
            vec![
                K::NodeFailed { node: 2 },
                K::SparePromoted {
                    spare: 4,
                    replaced: 2,
                    failover: true
                }
            ]
        );
        let failed = cp.events().after(mark, 1).pop().unwrap();
        assert!(failed.at_ms > 1500, "{failed:?}");
        // Drain of node 3: started, then spare 5 takes over, then finished.
        let mark = cp.events().last_seq();
        cp.step(2100, Input::Drain { node: NodeId(3) });
        let inc = cp.map().nodes[&NodeId(3)].incarnation;
        let asked = cp.map().leaving[&NodeId(3)];
        cp.step(
            2110,
            Input::Quiesced {
                node: NodeId(3),
                incarnation: inc,
                epoch: asked,
            },
        );
        assert_eq!(
            event_kinds(&cp, mark),
            vec![
                K::DrainStarted { node: 3 },
                // One map change, its events in node order.
                K::DrainFinished { node: 3 },
                K::SparePromoted {
                    spare: 5,
                    replaced: 3,
                    failover: false
                },
            ]
        );
        // Memgests: created, closed, dropped; a new default.
        let mark = cp.events().last_seq();
        create(&mut cp, "warm", "rep:2");
        cp.step(
            2200,
            Input::SetDefault {
                name: "warm".into(),
            },
        );
        create(&mut cp, "cold", "none");
        cp.step(
            2300,
            Input::DropMemgest {
                name: "cold".into(),
            },
        );
        cp.step(
            2310,
            Input::CancelDrop {
                name: "cold".into(),
            },
        );
        assert_eq!(
            event_kinds(&cp, mark),
            vec![
                K::MemgestCreated {
                    name: "warm".into(),
                    memgest_kind: "rep:2".into()
                },
                K::DefaultMemgest {
                    name: "warm".into()
                },
                K::MemgestCreated {
                    name: "cold".into(),
                    memgest_kind: "none".into()
                },
                K::MemgestClosing {
                    name: "cold".into()
                },
                K::MemgestReopened {
                    name: "cold".into()
                },
            ]
        );
        // Texts are for people.
        let last = cp.events().after(0, usize::MAX).pop().unwrap();
        assert_eq!(last.kind.to_string(), "memgest cold reopened");
    }

    #[test]
    fn the_event_log_tells_slot_moves_and_handoffs() {
        use crate::events::EventKind as K;
        let mut cp = cluster(4, 3);
        let out = cp.step(10, Input::AddNode { node: NodeId(4) });
        assert!(published(&out).is_some(), "{out:?}");
        assert_eq!(
            event_kinds(&cp, cp.events().last_seq() - 1),
            vec![K::NodeAdded { node: 4 }]
        );
        let p = cp.map().placement.clone().unwrap();
        let r = *p.range_of(0).unwrap();
        let pg = (0u32..)
            .zip(&p.groups)
            .find(|(i, g)| *i != r.pg && g.first() == Some(&NodeId(4)))
            .map(|(i, _)| i)
            .unwrap();
        let mark = cp.events().last_seq();
        let from = cp.map().coordinator(0).map(|n| n.0);
        let out = cp.step(
            20,
            Input::MoveSlots {
                first: 0,
                last: 9,
                pg,
                data_index: 0,
                rate_kib_s: 0,
            },
        );
        assert!(published(&out).is_some(), "{out:?}");
        // Phase 0 ends with the target's copy report.
        let inc4 = cp.map().nodes[&NodeId(4)].incarnation;
        let epoch0 = cp.map().moving.unwrap().epoch;
        cp.step(
            25,
            Input::MoveCopied {
                node: NodeId(4),
                incarnation: inc4,
                first: 0,
                last: 9,
                epoch: epoch0,
            },
        );
        let epoch = cp.map().moving.unwrap().epoch;
        let src = cp.map().moving_source().unwrap();
        let inc = cp.map().nodes[&src].incarnation;
        cp.step(
            30,
            Input::Quiesced {
                node: src,
                incarnation: inc,
                epoch: Epoch(epoch),
            },
        );
        let to = cp.map().coordinator(0).unwrap();
        let inc = cp.map().nodes[&to].incarnation;
        cp.step(
            40,
            Input::HandoffDone {
                node: to,
                incarnation: inc,
                first: 0,
                last: 9,
            },
        );
        assert_eq!(
            event_kinds(&cp, mark),
            vec![
                K::SlotsMoving {
                    first: 0,
                    last: 9,
                    pg,
                    data_index: 0
                },
                K::SlotsCopied { first: 0, last: 9 },
                K::SlotsMoved {
                    first: 0,
                    last: 9,
                    from,
                    to: Some(4)
                },
                K::HandoffDone { first: 0, last: 9 },
            ]
        );
    }
}
