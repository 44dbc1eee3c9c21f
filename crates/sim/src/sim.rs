//! The simulated world. See the crate docs for the picture.

use crate::rng::Rng;
use crate::store::SimStore;
use ringlet_control::{
    Action, ClusterMap, ControlConfig, ControlPlane, Input as CpInput, NodeState,
};
use ringlet_linearize::{check_history, Op, OpKind, DEFAULT_BUDGET};
use ringlet_replica::{
    ClientOp, ClientReply, ClientRequest, EngineStore, Input, MemStore, Output, PeerMsg, Replica,
    ReplicaConfig, ReplicaStore, Reply, ReqId,
};
use ringlet_types::{key_slot, Epoch, MemgestId, MemgestKind, NodeId, Version};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Knobs a test may override; everything else comes from the seed.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// Virtual milliseconds of workload with faults.
    pub duration_ms: u64,
    /// Virtual milliseconds allowed for healing and convergence afterwards.
    pub heal_ms_max: u64,
    /// Force every fault kind on (instead of the seed's swarm choice).
    pub all_faults: bool,
    /// Erasure-coded scenario: 5 active nodes (s = 3, d = 2) + 2 spares, `ec:3+2` and
    /// `ec:2+1` keys (values of varying sizes over 64-byte chunks) beside `rep:3` and `none`.
    pub ec: bool,
    /// With `ec`: only `ec:3+2` (no `ec:2+1`), and crashes sometimes take two members of one
    /// PG at once (M = 2 simultaneous failures).
    pub ec_double: bool,
    /// Capacity of every node's store in value bytes (`None`: unbounded). Small values make
    /// nodes full, so writes are refused with `OutOfMemory` — coordinators and replicas —
    /// under the same faults; the checkers then also prove that a refused write never
    /// surfaces later and that no acknowledged write is lost.
    pub store_value_bytes_max: Option<u64>,
    /// Force resharding faults on (slot moves and spares added as data nodes).
    pub moves: bool,
    /// Run every node on [`EngineStore`], the store a real node runs over its engine,
    /// instead of the reference `MemStore` (ignored with `store_value_bytes_max`, whose
    /// value-byte capacity only the reference store has).
    pub engine_store: bool,
    /// Control-plane failovers: the control plane goes silent for 50-1000 ms (every message
    /// to it lost, no ticks), then a new leader resumes from the last published map
    /// ([`ControlPlane::resume`], what an etcd leader change does), losing the old one's
    /// in-memory state (move and drain timers, usage reports). Happens as a disruption of its
    /// own and, with `moves`, in place of some move faults (while a move copies or fences).
    pub cp_failover: bool,
    /// With `ec`: TTL keys in every ec memgest, each owned by one client that writes them
    /// with expiries (virtual ms), changes their TTL by rewriting the same value (EXPIRE,
    /// PERSIST: metadata-only ec updates) and reads them; the nodes run the active expiry
    /// (`ClientOp::Expire` for due keys, as the cluster driver does every 100 ms), and
    /// crashes favour the TTL keys' coordinators (takeovers rebuild the expiry from parity
    /// metadata). Checked by a TTL model instead of the register linearizability check: a
    /// read returns only a (value, expiry) pair that was written and not superseded by an
    /// acknowledged write (so an expired value is never served as live and an expiry is
    /// never lost or changed), a key is absent only once an expiry it may hold has passed,
    /// and at the end every due key is deleted and every other acknowledged one is present.
    pub ttl: bool,
    /// Aim moves at targets that take a copy before the switch (a pair whose node has no
    /// role in the span: not a member of the span's group), adding a spare first when no
    /// such node exists, so the copy phase and its ec re-encodes are what the move faults
    /// hit (session 15).
    pub ec_copy_focus: bool,
    /// Run the nodes with `ReplicaConfig::ec_copy_ahead` (ec values copied ahead of a
    /// move's switch; off by default, see there).
    pub ec_copy_ahead: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            duration_ms: 12_000,
            heal_ms_max: 40_000,
            all_faults: false,
            ec: false,
            ec_double: false,
            store_value_bytes_max: None,
            moves: false,
            engine_store: false,
            cp_failover: false,
            ttl: false,
            ec_copy_focus: false,
            ec_copy_ahead: false,
        }
    }
}

/// What one run did (for reports and for "the checkers saw something" assertions).
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub seed: u64,
    pub events: u64,
    pub ops_ok: u64,
    pub ops_unknown: u64,
    pub ops_failed: u64,
    pub writes_acked: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub drains: u64,
    /// Slot moves requested (resharding) and spares turned into data nodes.
    pub moves: u64,
    pub nodes_added: u64,
    pub nodes_removed: u64,
    /// Crashes or partitions of a move's source or target while the move copies or fences.
    pub move_faults: u64,
    /// Move faults (crash or partition of the source or target, or a control-plane
    /// failover) that hit while the target held ec values its copy had re-encoded into the
    /// target group ahead of the switch (session 15), and how many of those had
    /// re-encodes still in flight.
    pub move_faults_during_ec_copy: u64,
    pub move_faults_during_ec_reencode: u64,
    /// ec values re-encoded by copies before their switch, and copies called off (live
    /// nodes at the end).
    pub ec_copied: u64,
    pub copies_aborted: u64,
    /// Control-plane failovers ([`SimOptions::cp_failover`]), and how many hit a listed move.
    pub cp_failovers: u64,
    pub cp_failovers_during_moves: u64,
    pub failovers_epochs: u64,
    pub messages: u64,
    pub dropped: u64,
    pub history_ops: usize,
    pub faults: String,
    pub timeouts: u64,
    pub ambiguous_replies: u64,
    /// Writes refused with `OutOfMemory` (with `store_value_bytes_max`).
    pub oom_replies: u64,
    /// Reliable keys whose final committed value was read back and checked.
    pub readback_checked: u64,
    /// ec: takeovers (metadata rebuilt from parity), on-demand decodes, holder syncs.
    pub ec_takeovers: u64,
    pub ec_decodes_on_demand: u64,
    pub ec_holder_syncs: u64,
    /// ec values re-encoded by new coordinators of moved spans (live nodes at the end).
    pub ec_reencoded: u64,
    /// Pages of ec values answered by the replacement of a moved span's failed old
    /// coordinator.
    pub ec_replacement_pages: u64,
    /// TTL scenario: reads checked against the TTL model, of which answered absent because
    /// an expiry had passed; keys deleted by the active expiry; TTL keys checked at the end;
    /// ec writes sent as metadata-only updates (EXPIRE/PERSIST of an unchanged value).
    pub ttl_reads_checked: u64,
    pub ttl_reads_expired: u64,
    pub ttl_active_expiries: u64,
    pub ttl_final_checked: u64,
    pub ec_meta_only_writes: u64,
}

const LEASE_MS: u64 = 1500;
const NODE_TICK_MS: u64 = 20;
const CP_TICK_MS: u64 = 50;
const CLIENT_TIMEOUT_MS: u64 = 400;
const CLIENT_ATTEMPTS_MAX: u32 = 12;
/// Client id of the nodes' active expiry (its replies go to no one).
const EXPIRY_CLIENT: u64 = u64::MAX - 1;
/// Active expiry pass period and work bound (the cluster driver's: 100 ms, bounded keys).
const EXPIRY_PERIOD_MS: u64 = 100;
const EXPIRY_KEYS_PER_PASS: usize = 64;

#[derive(Clone, Debug)]
struct Faults {
    drop_p: f64,
    dup_p: f64,
    delay_max_ms: u64,
    crash: bool,
    partition: bool,
    drain: bool,
    /// Resharding: slot spans moved to other placement pairs, spares added as data nodes.
    moves: bool,
    /// Mean gap between disruptive faults.
    gap_ms: u64,
    /// [`SimOptions::cp_failover`] (never drawn from the seed, so that other runs replay as
    /// before).
    cp_failover: bool,
}

#[derive(Clone, Debug)]
enum Addr {
    Node(NodeId),
    Cp,
    Client(usize),
}

#[derive(Clone, Debug)]
enum Msg {
    Peer { from: NodeId, msg: PeerMsg },
    ToCp { input: CpInput },
    Map(Arc<ClusterMap>),
    HbAck { incarnation: u64, sent_ms: u64 },
    Fenced { incarnation: u64 },
    Request { client: usize, req: ClientRequest },
    Reply(Reply),
}

#[derive(Clone, Debug)]
enum Event {
    Deliver {
        to: Addr,
        msg: Msg,
    },
    NodeTick(NodeId),
    CpTick,
    ClientNext(usize),
    ClientTimeout {
        client: usize,
        attempt: u64,
    },
    ClientRetry {
        client: usize,
        attempt: u64,
    },
    Disrupt,
    Restart(NodeId),
    Heal(NodeId),
    /// A new control-plane leader resumes from the last published map.
    CpResume,
    Bootstrap,
    /// The next step of a resharding plan (a removal in progress): one move, or the removal's
    /// final call once nothing is left, as `ringlet node remove` drives it.
    ReshardStep,
    /// Crash or partition the source or the target of the move issued at `issued_ms`, some
    /// ms after it started, while it copies or fences (the map still lists it), unless
    /// another fault happened since (one failure at a time).
    MoveFault {
        source: NodeId,
        target: NodeId,
        issued_ms: u64,
    },
}

enum InputKind {
    Tick,
    Other,
}

struct NodeSlot {
    replica: Option<Replica<SimStore>>,
    incarnation: u64,
    last_epoch: Epoch,
}

#[derive(Clone, Debug)]
enum Pending {
    Get {
        quorum: bool,
    },
    Set {
        value: String,
        /// TTL keys: absolute expiry (virtual ms); always `None` elsewhere.
        expiry: Option<u64>,
    },
    Delete,
}

#[derive(Clone, Debug)]
struct InFlight {
    key: String,
    kind: Pending,
    hist: usize,
    req: ReqId,
    attempt: u64,
    attempts: u32,
    /// An attempt timed out: the write may have happened at `target`.
    ambiguous: bool,
    target: Option<(NodeId, u64)>,
    /// Quorum read replies of the current attempt: (node, version, memgest, value).
    replies: Vec<(NodeId, Version, MemgestId, Option<Vec<u8>>)>,
    quorum_nodes: Vec<NodeId>,
    fallback: bool,
    /// TTL keys: index of this write in the key's TTL model.
    ttl_write: Option<usize>,
}

struct Client {
    id: u64,
    map: Arc<ClusterMap>,
    seq: u64,
    op: Option<InFlight>,
}

struct KeySpec {
    name: String,
    memgest: MemgestId,
    rep: bool,
    /// Survives two simultaneous failures (ec:3+2).
    two_failures: bool,
    /// A TTL key ([`SimOptions::ttl`]): only client `owner` operates on it.
    ttl: Option<usize>,
}

/// One write of a TTL key, in its owner's order.
#[derive(Clone, Debug)]
struct TtlWrite {
    value: String,
    expiry: Option<u64>,
    acked: bool,
    /// Refused by every attempt: it never took effect.
    never: bool,
}

struct World {
    seed: u64,
    opts: SimOptions,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BTreeMap<(u64, u64), Event>,
    cp: ControlPlane,
    cp_last_epoch: Epoch,
    nodes: BTreeMap<NodeId, NodeSlot>,
    isolated: BTreeSet<NodeId>,
    clients: Vec<Client>,
    keys: Vec<KeySpec>,
    faults: Faults,
    faults_on: bool,
    history: Vec<Op>,
    acked: BTreeMap<String, Version>,
    stats: RunStats,
    r3: MemgestId,
    ec_memgests: Vec<MemgestId>,
    /// Keys whose Sets alternate between rep:3, ec:3+2 and ec:2+1.
    movers: BTreeSet<String>,
    disruptive_seen: bool,
    /// Two nodes failed at once at least once (ec scenario).
    double_seen: bool,
    possible_loss: u64,
    active: usize,
    cp_touched: bool,
    quiet_until: u64,
    /// The control plane is down (failing over) until this time; 0: up.
    cp_down_until: u64,
    /// When the last crash, partition or drain was started (a move fault scheduled before
    /// it is skipped).
    last_fault_ms: u64,
    /// TTL keys: every write in the owner's order, and the index of the last acknowledged.
    ttl_writes: BTreeMap<String, Vec<TtlWrite>>,
    ttl_acked: BTreeMap<String, usize>,
    /// The first TTL-model violation (reported after the event that found it).
    ttl_failure: Option<String>,
    expiry_seq: u64,
    next_expiry_ms: BTreeMap<NodeId, u64>,
}

fn fail(seed: u64, what: impl std::fmt::Display) -> String {
    format!("SEED={seed} {what}")
}

/// Run one seed. `Err` carries a message starting with `SEED=`.
pub fn run_seed(seed: u64, opts: &SimOptions) -> Result<RunStats, String> {
    let mut w = World::new(seed, opts.clone())?;
    w.run()?;
    Ok(w.stats)
}

impl World {
    fn new(seed: u64, opts: SimOptions) -> Result<World, String> {
        let mut rng = Rng::new(seed);
        let mut active = rng.range(3, 5) as usize;
        let mut s = rng.range(1, active.min(3) as u64) as u8;
        let d_min = 3u8.saturating_sub(s);
        let mut d = rng.range(u64::from(d_min), (active as u64 - u64::from(s)).min(2)) as u8;
        let mut spares = rng.range(1, 2) as usize;
        if opts.ec {
            (active, s, d, spares) = (5, 3, 2, 2);
        }
        let all = opts.all_faults;
        let faults = Faults {
            drop_p: if all || rng.chance(0.5) {
                rng.range(1, 50) as f64 / 1000.0
            } else {
                0.0
            },
            dup_p: if all || rng.chance(0.4) {
                rng.range(1, 50) as f64 / 1000.0
            } else {
                0.0
            },
            delay_max_ms: *rng.pick(&[1u64, 3, 10, 40, 100]).unwrap_or(&1),
            crash: all || rng.chance(0.5),
            partition: all || rng.chance(0.4),
            drain: all || rng.chance(0.4),
            // Moving into a full node is not checked up front (the rebuild retries and then reports
            // the refused memgests as possibly lost: docs/design/cluster-resharding.md).
            moves: opts.store_value_bytes_max.is_none() && (all || opts.moves || rng.chance(0.4)),
            gap_ms: rng.range(1500, 4000),
            cp_failover: opts.cp_failover,
        };
        let cfg = ControlConfig {
            s,
            d,
            lease_ms: LEASE_MS,
            // The simulator is where ec moves are tested, faults and all.
            ec_moves: true,
        };
        let cp = ControlPlane::new(cfg).map_err(|e| fail(seed, e))?;
        let mut nodes = BTreeMap::new();
        for i in 1..=(active + spares) as u32 {
            nodes.insert(
                NodeId(i),
                NodeSlot {
                    replica: None,
                    incarnation: 1,
                    last_epoch: Epoch(0),
                },
            );
        }
        let stats = RunStats {
            seed,
            faults: format!(
                "n={active}+{spares} s={s} d={d} drop={} dup={} delay<={} crash={} partition={} drain={} moves={}",
                faults.drop_p, faults.dup_p, faults.delay_max_ms, faults.crash, faults.partition, faults.drain, faults.moves
            ),
            ..RunStats::default()
        };
        let mut w = World {
            seed,
            opts,
            rng,
            now: 0,
            seq: 0,
            queue: BTreeMap::new(),
            cp,
            cp_last_epoch: Epoch(0),
            nodes,
            isolated: BTreeSet::new(),
            clients: Vec::new(),
            keys: Vec::new(),
            faults,
            faults_on: true,
            history: Vec::new(),
            acked: BTreeMap::new(),
            stats,
            r3: MemgestId(0),
            ec_memgests: Vec::new(),
            movers: BTreeSet::new(),
            disruptive_seen: false,
            double_seen: false,
            possible_loss: 0,
            active,
            cp_touched: false,
            quiet_until: 0,
            cp_down_until: 0,
            last_fault_ms: 0,
            ttl_writes: BTreeMap::new(),
            ttl_acked: BTreeMap::new(),
            ttl_failure: None,
            expiry_seq: 0,
            next_expiry_ms: BTreeMap::new(),
        };
        let ids: Vec<NodeId> = w.nodes.keys().copied().collect();
        for id in ids {
            w.start_node(id);
            let phase = w.rng.range(0, NODE_TICK_MS - 1);
            w.schedule(phase, Event::NodeTick(id));
        }
        w.schedule(CP_TICK_MS, Event::CpTick);
        w.schedule(400, Event::Bootstrap);
        Ok(w)
    }

    fn schedule(&mut self, after_ms: u64, e: Event) {
        self.seq += 1;
        self.queue.insert((self.now + after_ms, self.seq), e);
    }

    fn start_node(&mut self, id: NodeId) {
        let Some(slot) = self.nodes.get_mut(&id) else {
            return;
        };
        let cfg = ReplicaConfig {
            addr: format!("sim:{}", id.0),
            heartbeat_interval_ms: 150,
            lease_ms: LEASE_MS,
            lease_margin_ms: 100,
            // Small chunks so that values span chunks, stripes and codewords.
            ec_chunk_bytes: 64,
            ec_arena_bytes: 1 << 20,
            ec_copy_ahead: self.opts.ec_copy_ahead,
            ..ReplicaConfig::default()
        };
        let store = match self.opts.store_value_bytes_max {
            Some(b) => SimStore::Mem(MemStore::with_capacity(b)),
            // The store a real node runs (64 MiB of engine memory, far above a run's data).
            None if self.opts.engine_store => {
                let cfg = ringlet_engine::EngineConfig {
                    memory_bytes_max: 64 << 20,
                    index_buckets_initial: 1 << 8,
                    origin: id.0,
                    ..Default::default()
                };
                match EngineStore::new(cfg) {
                    Ok(s) => SimStore::Engine(Box::new(s)),
                    Err(e) => panic!("SEED={} engine store: {e}", self.seed),
                }
            }
            None => SimStore::Mem(MemStore::new()),
        };
        slot.replica = Some(Replica::new(id, slot.incarnation, cfg, store));
        slot.last_epoch = Epoch(0);
    }

    /// Put a message on the bus, subject to faults.
    fn send(&mut self, from: Option<NodeId>, to: Addr, msg: Msg) {
        self.stats.messages += 1;
        let blocked = |n: &NodeId| self.isolated.contains(n);
        let to_blocked = matches!(&to, Addr::Node(n) if blocked(n));
        if from.as_ref().is_some_and(blocked) || to_blocked {
            self.stats.dropped += 1;
            return;
        }
        if self.faults_on && self.rng.chance(self.faults.drop_p) {
            self.stats.dropped += 1;
            return;
        }
        let delay = self.rng.range(0, self.faults.delay_max_ms);
        if self.faults_on && self.rng.chance(self.faults.dup_p) {
            let d2 = self.rng.range(0, self.faults.delay_max_ms * 2);
            self.schedule(
                d2,
                Event::Deliver {
                    to: to.clone(),
                    msg: msg.clone(),
                },
            );
        }
        self.schedule(delay, Event::Deliver { to, msg });
    }

    fn run(&mut self) -> Result<(), String> {
        let end = self.opts.duration_ms;
        self.schedule(self.faults.gap_ms + 2000, Event::Disrupt);
        while let Some(((t, _), e)) = self.queue.pop_first() {
            if t > end {
                self.queue.insert((t, 0), e);
                break;
            }
            self.now = t;
            self.stats.events += 1;
            self.handle(e)?;
        }
        // Heal: no more faults, restart crashed nodes, end partitions, let clients finish.
        self.faults_on = false;
        let isolated: Vec<NodeId> = self.isolated.iter().copied().collect();
        for n in isolated {
            self.isolated.remove(&n);
        }
        let down: Vec<NodeId> = self
            .nodes
            .iter()
            .filter(|(_, s)| s.replica.is_none())
            .map(|(id, _)| *id)
            .collect();
        for n in down {
            self.schedule(0, Event::Restart(n));
        }
        let deadline = self.now + self.opts.heal_ms_max;
        let mut converged_at = None;
        while let Some(((t, _), e)) = self.queue.pop_first() {
            if t > deadline {
                break;
            }
            self.now = t;
            self.stats.events += 1;
            self.handle(e)?;
            if self.clients.iter().all(|c| c.op.is_none())
                && self.stats.events.is_multiple_of(64)
                && self.converged().is_ok()
            {
                converged_at = Some(t);
                break;
            }
        }
        if converged_at.is_none() {
            let why = self.converged().err().unwrap_or_default();
            return Err(fail(
                self.seed,
                format!(
                    "did not converge within {} ms of healing: {why} [{}]",
                    self.opts.heal_ms_max, self.stats.faults
                ),
            ));
        }
        self.final_checks()
    }

    fn handle(&mut self, e: Event) -> Result<(), String> {
        match e {
            Event::Bootstrap => {
                let actions = self.cp.step(
                    self.now,
                    CpInput::Bootstrap {
                        active: self.active,
                    },
                );
                if !actions.iter().any(|a| matches!(a, Action::Publish(_))) {
                    // Joins not all in yet (dropped): retry.
                    self.schedule(200, Event::Bootstrap);
                    self.cp_actions(actions);
                    return Ok(());
                }
                self.cp_actions(actions);
                let a = self.cp.step(
                    self.now,
                    CpInput::CreateMemgest {
                        name: "r3".into(),
                        kind: MemgestKind::Rep { r: 3 },
                        evictable: None,
                    },
                );
                self.cp_actions(a);
                self.r3 = self.cp.map().memgest_by_name("r3").unwrap_or(MemgestId(0));
                if self.opts.ec {
                    let kinds: &[(&str, u8, u8)] = if self.opts.ec_double {
                        &[("e32", 3, 2)]
                    } else {
                        &[("e32", 3, 2), ("e21", 2, 1)]
                    };
                    for &(name, k, m) in kinds {
                        let a = self.cp.step(
                            self.now,
                            CpInput::CreateMemgest {
                                name: name.into(),
                                kind: MemgestKind::Ec { k, m },
                                evictable: None,
                            },
                        );
                        self.cp_actions(a);
                        match self.cp.map().memgest_by_name(name) {
                            Some(id) => self.ec_memgests.push(id),
                            None => return Err(fail(self.seed, format!("memgest {name} refused"))),
                        }
                    }
                }
                self.setup_workload();
            }
            Event::NodeTick(id) => {
                self.step_node(id, Input::Tick)?;
                if self.opts.ttl {
                    self.active_expiry(id)?;
                }
                self.schedule(NODE_TICK_MS, Event::NodeTick(id));
            }
            Event::CpTick => {
                if !self.cp_down() {
                    let a = self.cp.step(self.now, CpInput::Tick);
                    self.cp_actions(a);
                }
                self.schedule(CP_TICK_MS, Event::CpTick);
            }
            Event::CpResume => {
                let cfg = self.cp.config().clone();
                let map = ClusterMap::clone(self.cp.map());
                self.cp = ControlPlane::resume(cfg, map, self.now)
                    .map_err(|e| fail(self.seed, format!("control plane resume: {e}")))?;
                self.cp_down_until = 0;
                self.cp_touched = true;
                if std::env::var_os("SIM_TRACE").is_some() {
                    eprintln!("t={} control plane resumed", self.now);
                }
            }
            Event::Deliver { to, msg } => self.deliver(to, msg)?,
            Event::ClientNext(c) => self.client_next(c),
            Event::ClientTimeout { client, attempt } => self.client_timeout(client, attempt),
            Event::ClientRetry { client, attempt } => {
                if self
                    .clients
                    .get(client)
                    .and_then(|cl| cl.op.as_ref())
                    .is_some_and(|op| op.attempt == attempt)
                {
                    self.client_attempt(client);
                }
            }
            Event::Disrupt => {
                self.disrupt();
                let gap = self
                    .rng
                    .range(self.faults.gap_ms / 2, self.faults.gap_ms * 3 / 2);
                self.schedule(gap, Event::Disrupt);
            }
            Event::Restart(id) => {
                self.quiet_until = self.now + LEASE_MS + 500;
                if let Some(s) = self.nodes.get_mut(&id) {
                    if s.replica.is_none() {
                        s.incarnation += 1;
                        self.start_node(id);
                    }
                }
            }
            Event::Heal(id) => {
                self.isolated.remove(&id);
                self.quiet_until = self.now + LEASE_MS + 500;
            }
            Event::MoveFault {
                source,
                target,
                issued_ms,
            } => self.move_fault(source, target, issued_ms),
            Event::ReshardStep if self.cp_down() => self.schedule(250, Event::ReshardStep),
            Event::ReshardStep => {
                let map = self.cp.map().clone();
                if let Some(node) = map.removing {
                    let plan = ringlet_control::plan_rebalance(&map);
                    let input = match plan.first() {
                        Some(m) => CpInput::MoveSlots {
                            first: m.first,
                            last: m.last,
                            pg: m.pg,
                            data_index: m.data_index,
                            rate_kib_s: 0,
                        },
                        None => CpInput::RemoveNode { node },
                    };
                    self.stats.moves += 1;
                    let a = self.cp.step(self.now, input);
                    self.cp_actions(a);
                    // Refusals (a move or handoff still running) just wait for the next step.
                    self.schedule(250, Event::ReshardStep);
                }
            }
        }
        if self.cp_touched {
            self.cp_touched = false;
            self.check_cp()?;
        }
        if let Some(e) = self.ttl_failure.take() {
            return Err(fail(self.seed, format!("{e} [{}]", self.stats.faults)));
        }
        Ok(())
    }

    fn check_cp(&mut self) -> Result<(), String> {
        self.cp.check_invariants();
        let e = self.cp.map().epoch;
        if e < self.cp_last_epoch {
            return Err(fail(self.seed, "control plane epoch went backwards"));
        }
        self.cp_last_epoch = e;
        Ok(())
    }

    fn cp_actions(&mut self, actions: Vec<Action>) {
        // Every control-plane step ends here: check its invariants after this event.
        self.cp_touched = true;
        for a in actions {
            match a {
                Action::Publish(m) => {
                    self.stats.failovers_epochs += 1;
                    if std::env::var_os("SIM_TRACE").is_some() {
                        let states: Vec<String> = m
                            .nodes
                            .iter()
                            .map(|(id, n)| format!("{id}:{:?}#{}", n.state, n.incarnation))
                            .collect();
                        let moves: Vec<String> = m
                            .moving
                            .iter()
                            .map(|x| {
                                format!(
                                    "moving {}-{} to {}/{} copying={} {}->{}",
                                    x.first,
                                    x.last,
                                    x.pg,
                                    x.data_index,
                                    x.copying,
                                    x.source,
                                    x.target
                                )
                            })
                            .chain(m.handoffs.iter().map(|h| {
                                format!(
                                    "handoff {}-{} from {}/{}",
                                    h.first, h.last, h.from_pg, h.from_data_index
                                )
                            }))
                            .collect();
                        eprintln!(
                            "t={} publish epoch {} {} {} removing={:?}",
                            self.now,
                            m.epoch,
                            states.join(" "),
                            moves.join(", "),
                            m.removing
                        );
                    }
                    let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
                    for id in ids {
                        self.send(None, Addr::Node(id), Msg::Map(m.clone()));
                    }
                }
                Action::SendMap { to, map } => self.send(None, Addr::Node(to), Msg::Map(map)),
                Action::HeartbeatAck {
                    to,
                    incarnation,
                    sent_ms,
                    ..
                } => self.send(
                    None,
                    Addr::Node(to),
                    Msg::HbAck {
                        incarnation,
                        sent_ms,
                    },
                ),
                Action::Fenced { to, incarnation } => {
                    self.send(None, Addr::Node(to), Msg::Fenced { incarnation })
                }
                Action::Rejected(_) => {}
            }
        }
    }

    fn deliver(&mut self, to: Addr, msg: Msg) -> Result<(), String> {
        match to {
            Addr::Cp => {
                if self.cp_down() {
                    self.stats.dropped += 1;
                    return Ok(());
                }
                if let Msg::ToCp { input, .. } = msg {
                    let a = self.cp.step(self.now, input);
                    self.cp_actions(a);
                }
            }
            Addr::Node(id) => {
                let input = match msg {
                    Msg::Peer { from, msg } => Input::Peer { from, msg },
                    Msg::Map(m) => Input::Map(m),
                    Msg::HbAck {
                        incarnation,
                        sent_ms,
                    } => Input::HeartbeatAck {
                        incarnation,
                        sent_ms,
                    },
                    Msg::Fenced { incarnation } => Input::Fenced { incarnation },
                    Msg::Request { client, req } => Input::Client {
                        client: client as u64,
                        req,
                    },
                    Msg::ToCp { .. } | Msg::Reply(_) => return Ok(()),
                };
                self.step_node(id, input)?;
            }
            Addr::Client(c) => {
                if let Msg::Reply(r) = msg {
                    self.client_reply(c, r);
                }
            }
        }
        Ok(())
    }

    fn step_node(&mut self, id: NodeId, input: Input) -> Result<(), String> {
        let now = self.now;
        let seed = self.seed;
        let Some(slot) = self.nodes.get_mut(&id) else {
            return Ok(());
        };
        let Some(r) = slot.replica.as_mut() else {
            return Ok(());
        };
        let input_kind = if matches!(input, Input::Tick) {
            InputKind::Tick
        } else {
            InputKind::Other
        };
        let outs = r.step(now, input);
        r.check_invariants();
        if matches!(input_kind, InputKind::Tick) {
            // The store's full digest recomputation is O(entries): once per tick is enough.
            r.store().check_invariants();
        }
        if r.incarnation() == slot.incarnation {
            if r.epoch() < slot.last_epoch {
                return Err(fail(seed, format!("node {id} epoch went backwards")));
            }
        } else {
            // The core wiped itself and rejoined as a new incarnation.
            slot.incarnation = r.incarnation();
        }
        slot.last_epoch = r.epoch();
        for o in outs {
            match o {
                Output::Send { to, msg } => {
                    self.send(Some(id), Addr::Node(to), Msg::Peer { from: id, msg })
                }
                Output::Reply { client, reply } => {
                    self.send(Some(id), Addr::Client(client as usize), Msg::Reply(reply))
                }
                Output::Control(input) => self.send(Some(id), Addr::Cp, Msg::ToCp { input }),
                Output::PossibleLoss { .. } => self.possible_loss += 1,
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------------ faults

    /// Whether the cluster has fully recovered from the last disruption: the next one then
    /// keeps us within "one failure at a time".
    fn converged(&self) -> Result<(), String> {
        self.healthy(true)
    }

    /// `strict`: also no write in flight and equal digests (the end-of-run convergence
    /// check). Not strict: every role is filled and complete (the precondition for the next
    /// disruption to stay within one failure at a time; in-flight writes are covered by the
    /// majority rule).
    fn healthy(&self, strict: bool) -> Result<(), String> {
        let map = self.cp.map();
        let Some(p) = &map.placement else {
            return Err("not bootstrapped".into());
        };
        for m in p.members() {
            if map.node_state(m) != Some(NodeState::Active) {
                return Err(format!("node {m} in a PG is not active"));
            }
        }
        for (id, s) in &self.nodes {
            let Some(r) = &s.replica else {
                return Err(format!("node {id} down"));
            };
            if self.isolated.contains(id) {
                return Err(format!("node {id} isolated"));
            }
            if r.epoch() != map.epoch {
                return Err(format!(
                    "node {id} at epoch {} not {}",
                    r.epoch(),
                    map.epoch
                ));
            }
            if r.is_pulling() || (strict && !r.is_settled()) {
                return Err(format!("node {id} not settled: {}", r.debug_unsettled()));
            }
        }
        let depth = map.replica_depth();
        for k in &self.keys {
            let slot = key_slot(k.name.as_bytes());
            let cohort = map.cohort(slot);
            let Some(coord) = cohort.first() else {
                continue;
            };
            let Some(c) = self.nodes.get(coord).and_then(|s| s.replica.as_ref()) else {
                return Err("coordinator down".into());
            };
            if c.ready_at(slot) != Some(0) {
                return Err(format!("coordinator {coord} of slot {slot} not ready"));
            }
            for (o, n) in cohort.iter().enumerate().take(depth).skip(1) {
                let Some(r) = self.nodes.get(n).and_then(|s| s.replica.as_ref()) else {
                    return Err("replica down".into());
                };
                if r.ready_at(slot) != Some(o) {
                    return Err(format!("replica {n} of slot {slot} not ready"));
                }
                if strict && r.slot_digest_at(slot, o) != c.slot_digest_at(slot, o) {
                    return Err(format!(
                        "slot {slot}: replica {n} digest differs from coordinator {coord}"
                    ));
                }
            }
        }
        Ok(())
    }

    fn disrupt(&mut self) {
        // After a partition heals (or a node restarts), its old lease may still lapse a little
        // later; wait a lease before the next disruption so failures never overlap.
        if !self.faults_on || self.now < self.quiet_until || self.cp_down() {
            return;
        }
        if let Err(why) = self.healthy(false) {
            if std::env::var_os("SIM_TRACE").is_some() {
                eprintln!("t={} no disruption: {why}", self.now);
            }
            return;
        }
        let map = self.cp.map().clone();
        let Some(p) = &map.placement else { return };
        let members = p.members();
        let mut kinds = Vec::new();
        if self.faults.crash {
            kinds.push(0);
        }
        if self.faults.partition {
            kinds.push(1);
        }
        let spare_exists = map.nodes.values().any(|n| n.state == NodeState::Spare);
        if self.faults.drain && spare_exists {
            kinds.push(2);
        }
        if self.faults.moves {
            kinds.push(3);
            kinds.push(5);
            if spare_exists {
                kinds.push(4);
            }
        }
        if self.faults.cp_failover {
            kinds.push(6);
        }
        if self.opts.ec_copy_focus && self.faults.moves {
            // Mostly moves (each brings its own source/target fault), see `ec_copy_focus`.
            kinds.extend([3, 3, 3, 3, 3, 3]);
        }
        let Some(kind) = self.rng.pick(&kinds).copied() else {
            return;
        };
        let Some(mut victim) = self.rng.pick(&members).copied() else {
            return;
        };
        // TTL scenario: half the faults hit a TTL key's coordinator, so takeovers rebuild
        // expiries from the parity holders' metadata.
        if self.opts.ttl && self.rng.chance(0.5) {
            let ttl_keys: Vec<String> = self
                .keys
                .iter()
                .filter(|k| k.ttl.is_some())
                .map(|k| k.name.clone())
                .collect();
            if let Some(k) = self.rng.pick(&ttl_keys) {
                if let Some(c) = map.coordinator(key_slot(k.as_bytes())) {
                    victim = c;
                }
            }
        }
        match kind {
            // ec scenario: sometimes two members of one PG at once (ec:3+2 tolerates it;
            // keys of weaker memgests are then exempt from the checks, like `none` keys).
            0 if self.opts.ec_double && self.rng.chance(0.5) => {
                let Some(group) = p
                    .groups
                    .get(self.rng.range(0, p.groups.len() as u64 - 1) as usize)
                else {
                    return;
                };
                let a = self.rng.range(0, group.len() as u64 - 1) as usize;
                let b = (a + 1 + self.rng.range(0, group.len() as u64 - 2) as usize) % group.len();
                self.stats.crashes += 2;
                self.disruptive_seen = true;
                self.double_seen = true;
                for v in [group[a], group[b]] {
                    if let Some(s) = self.nodes.get_mut(&v) {
                        s.replica = None;
                    }
                    let down = self.rng.range(0, 2500);
                    self.schedule(down, Event::Restart(v));
                }
            }
            0 => {
                self.last_fault_ms = self.now;
                self.stats.crashes += 1;
                self.disruptive_seen = true;
                if let Some(s) = self.nodes.get_mut(&victim) {
                    s.replica = None;
                }
                let down = self.rng.range(0, 2500);
                self.schedule(down, Event::Restart(victim));
            }
            1 => {
                self.last_fault_ms = self.now;
                self.stats.partitions += 1;
                self.disruptive_seen = true;
                self.isolated.insert(victim);
                let dur = self.rng.range(300, 4000);
                self.schedule(dur, Event::Heal(victim));
            }
            2 => {
                self.last_fault_ms = self.now;
                self.stats.drains += 1;
                let a = self.cp.step(self.now, CpInput::Drain { node: victim });
                self.cp_actions(a);
            }
            3 | 5 if map.removing.is_some() => {
                // A removal in progress: run the next step of its plan, or finish it.
                let plan = ringlet_control::plan_rebalance(&map);
                let input = match plan.first() {
                    Some(m) if map.moving.is_none() => CpInput::MoveSlots {
                        first: m.first,
                        last: m.last,
                        pg: m.pg,
                        data_index: m.data_index,
                        rate_kib_s: 0,
                    },
                    _ => CpInput::RemoveNode {
                        node: map.removing.unwrap_or(victim),
                    },
                };
                self.stats.moves += 1;
                let a = self.cp.step(self.now, input);
                self.cp_actions(a);
            }
            5 => {
                self.stats.nodes_removed += 1;
                let a = self.cp.step(self.now, CpInput::RemoveNode { node: victim });
                self.cp_actions(a);
                self.schedule(250, Event::ReshardStep);
            }
            3 => {
                // Move a span around a workload key's slot to another (PG, data index), so
                // the keys the checkers watch are the ones that move.
                // ec runs move the ec keys' spans most of the time (their values are
                // re-encoded in the target's group).
                let pool: Vec<String> = if self.opts.ec && self.rng.chance(0.7) {
                    self.keys
                        .iter()
                        .filter(|k| self.ec_memgests.contains(&k.memgest))
                        .map(|k| k.name.clone())
                        .collect()
                } else {
                    self.keys.iter().map(|k| k.name.clone()).collect()
                };
                let Some(key) = self.rng.pick(&pool).cloned() else {
                    return;
                };
                let slot = ringlet_types::key_slot(key.as_bytes());
                let Some(r) = p.range_of(slot) else { return };
                let lo = slot
                    .saturating_sub(self.rng.range(0, 50) as u16)
                    .max(r.first);
                let hi = slot
                    .saturating_add(self.rng.range(0, 50) as u16)
                    .min(r.last);
                let mut pg = self.rng.range(0, p.groups.len() as u64 - 1) as u32;
                let mut di = self.rng.range(0, u64::from(p.s) - 1) as u8;
                // With ec memgests a move must change coordinator (refused otherwise):
                // a few more draws to find such a pair.
                let coord = p.range_coordinator(r);
                let focus = self.opts.ec_copy_focus;
                let old_group: Vec<NodeId> =
                    p.group(r.pg).map(<[NodeId]>::to_vec).unwrap_or_default();
                if focus && p.members().iter().all(|n| old_group.contains(n)) {
                    // Every data node is in the span's group: none would take a copy. Add
                    // a spare (a later move can then target it).
                    if let Some(spare) = map
                        .nodes
                        .iter()
                        .find(|(_, n)| n.state == NodeState::Spare)
                        .map(|(id, _)| *id)
                    {
                        self.stats.nodes_added += 1;
                        let a = self.cp.step(self.now, CpInput::AddNode { node: spare });
                        self.cp_actions(a);
                    }
                    return;
                }
                for _ in 0..if focus { 64 } else { 8 } {
                    let to = p.group(pg).and_then(|g| g.get(usize::from(di)).copied());
                    let copies = to.is_some_and(|t| !old_group.contains(&t));
                    if (!self.opts.ec || to != coord) && (!focus || copies) {
                        break;
                    }
                    pg = self.rng.range(0, p.groups.len() as u64 - 1) as u32;
                    di = self.rng.range(0, u64::from(p.s) - 1) as u8;
                }
                // Half the moves rate-limited (`--rate`): paced pulls under the same faults.
                let rate_kib_s = match self.rng.range(0, 1) {
                    0 => 0,
                    _ => self.rng.range(4, 64) as u32,
                };
                self.stats.moves += 1;
                let a = self.cp.step(
                    self.now,
                    CpInput::MoveSlots {
                        first: lo,
                        last: hi,
                        pg,
                        data_index: di,
                        rate_kib_s,
                    },
                );
                self.cp_actions(a);
                // Accepted moves lose their source or target part-way (when crashes or
                // partitions are on): within 120 ms the move usually still copies or fences.
                let started = self
                    .cp
                    .map()
                    .moving
                    .filter(|m| m.first == lo && m.last == hi);
                if let Some(m) = started {
                    if self.faults.crash || self.faults.partition || self.faults.cp_failover {
                        let after = self.rng.range(0, 120);
                        self.schedule(
                            after,
                            Event::MoveFault {
                                source: NodeId(m.source),
                                target: NodeId(m.target),
                                issued_ms: self.now,
                            },
                        );
                    }
                }
            }
            6 => self.cp_failover(map.moving.is_some()),
            _ => {
                let Some(spare) = map
                    .nodes
                    .iter()
                    .find(|(_, n)| n.state == NodeState::Spare)
                    .map(|(id, _)| *id)
                else {
                    return;
                };
                self.stats.nodes_added += 1;
                let a = self.cp.step(self.now, CpInput::AddNode { node: spare });
                self.cp_actions(a);
            }
        }
    }

    /// Whether the control plane is failing over (silent).
    fn cp_down(&self) -> bool {
        self.now < self.cp_down_until
    }

    /// Take the control plane down for 50-1000 ms; [`Event::CpResume`] brings a new leader
    /// up from the last published map ([`SimOptions::cp_failover`]).
    fn cp_failover(&mut self, during_move: bool) {
        let dur = self.rng.range(50, 1000);
        self.last_fault_ms = self.now;
        self.stats.cp_failovers += 1;
        if during_move {
            self.stats.cp_failovers_during_moves += 1;
        }
        self.disruptive_seen = true;
        self.cp_down_until = self.now + dur;
        self.quiet_until = self.now + dur + LEASE_MS + 500;
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!("t={} control plane down for {dur} ms", self.now);
        }
        self.schedule(dur, Event::CpResume);
    }

    /// [`Event::MoveFault`]: crash or cut off the move's source or target (whichever phase
    /// the move is in now), as the one failure of its time.
    fn move_fault(&mut self, source: NodeId, target: NodeId, issued_ms: u64) {
        if !self.faults_on || self.last_fault_ms >= issued_ms || self.now < self.quiet_until {
            return;
        }
        let map = self.cp.map().clone();
        let Some(p) = &map.placement else { return };
        let whole = p
            .members()
            .iter()
            .all(|m| map.node_state(*m) == Some(NodeState::Active));
        let up = self
            .nodes
            .iter()
            .all(|(id, s)| s.replica.is_some() && !self.isolated.contains(id));
        // Only while the move is listed (its copy or its fence): after the switch the new
        // coordinator serves before its new replicas have synced, and losing it then is
        // beyond one failure at a time (docs/design/cluster-resharding.md, "Not built").
        let listed = map
            .moving
            .is_some_and(|m| NodeId(m.source) == source && NodeId(m.target) == target);
        if !whole || !up || !listed {
            return;
        }
        let ec_copy = self
            .nodes
            .get(&target)
            .and_then(|s| s.replica.as_ref())
            .and_then(|r| r.copy_ec_progress())
            .filter(|(copied, _)| *copied > 0);
        let copying = map.moving.is_some_and(|m| m.copying);
        if self.opts.ec_copy_focus
            && ec_copy.is_none()
            && copying
            && self.now.saturating_sub(issued_ms) < 1500
        {
            // Wait (20 ms at a time, 1.5 s at most) for the target to hold ec values of its
            // copy, so the fault lands in the early re-encode (`ec_copy_focus`).
            self.schedule(
                20,
                Event::MoveFault {
                    source,
                    target,
                    issued_ms,
                },
            );
            return;
        }
        if let Some((_, in_flight)) = ec_copy {
            self.stats.move_faults_during_ec_copy += 1;
            if in_flight > 0 {
                self.stats.move_faults_during_ec_reencode += 1;
            }
        }
        if self.faults.cp_failover
            && (!(self.faults.crash || self.faults.partition) || self.rng.chance(0.4))
        {
            self.cp_failover(true);
            return;
        }
        let victim = if self.rng.chance(0.5) { source } else { target };
        if !self.nodes.contains_key(&victim) {
            return;
        }
        self.last_fault_ms = self.now;
        self.stats.move_faults += 1;
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!("t={} move fault on node {victim}", self.now);
        }
        self.disruptive_seen = true;
        let crash = self.faults.crash && (!self.faults.partition || self.rng.chance(0.5));
        if crash {
            self.stats.crashes += 1;
            if let Some(s) = self.nodes.get_mut(&victim) {
                s.replica = None;
            }
            let down = self.rng.range(0, 2500);
            self.schedule(down, Event::Restart(victim));
        } else {
            self.stats.partitions += 1;
            self.isolated.insert(victim);
            let dur = self.rng.range(300, 4000);
            self.schedule(dur, Event::Heal(victim));
        }
    }

    // ------------------------------------------------------------------ clients

    fn setup_workload(&mut self) {
        let n_clients = self.rng.range(2, 4) as usize;
        let n_rep = self.rng.range(3, 6);
        for i in 0..n_rep {
            self.keys.push(KeySpec {
                name: format!("r{i}"),
                memgest: self.r3,
                rep: true,
                two_failures: false,
                ttl: None,
            });
        }
        for i in 0..2 {
            self.keys.push(KeySpec {
                name: format!("n{i}"),
                memgest: MemgestId::NONE,
                rep: false,
                two_failures: false,
                ttl: None,
            });
        }
        // ec keys count as reliable ("rep" here means: must survive tolerated failures).
        let ec = self.ec_memgests.clone();
        for (j, m) in ec.iter().enumerate() {
            let n = if j == 0 { 4 } else { 3 };
            for i in 0..n {
                self.keys.push(KeySpec {
                    name: format!("e{j}k{i}"),
                    memgest: *m,
                    rep: true,
                    two_failures: j == 0,
                    ttl: None,
                });
            }
        }
        if !ec.is_empty() {
            for i in 0..2 {
                let name = format!("em{i}");
                self.movers.insert(name.clone());
                self.keys.push(KeySpec {
                    name,
                    memgest: self.r3,
                    rep: true,
                    two_failures: false,
                    ttl: None,
                });
            }
        }
        if self.opts.ttl {
            // Three TTL keys per ec memgest, owned round-robin by the clients.
            let mut owner = 0usize;
            for (j, m) in ec.iter().enumerate() {
                for i in 0..3 {
                    self.keys.push(KeySpec {
                        name: format!("t{j}k{i}"),
                        memgest: *m,
                        rep: true,
                        two_failures: j == 0,
                        ttl: Some(owner % n_clients),
                    });
                    owner += 1;
                }
            }
        }
        for c in 0..n_clients {
            self.clients.push(Client {
                id: c as u64 + 1,
                map: self.cp.map().clone(),
                seq: 0,
                op: None,
            });
            let t = self.rng.range(300, 600);
            self.schedule(t, Event::ClientNext(c));
        }
    }

    fn client_next(&mut self, c: usize) {
        if !self.faults_on {
            return; // healing: no new operations
        }
        let Some(cl) = self.clients.get(c) else {
            return;
        };
        if cl.op.is_some() {
            return;
        }
        let mut key_i = (self.rng.next_u64() % self.keys.len() as u64) as usize;
        // A TTL key is operated on by its owner only (its model is one client's sequence):
        // other clients take the next key that is not someone else's.
        for _ in 0..self.keys.len() {
            match self.keys[key_i].ttl {
                Some(o) if o != c => key_i = (key_i + 1) % self.keys.len(),
                _ => break,
            }
        }
        if self.keys[key_i].ttl.is_some_and(|o| o != c) {
            return;
        }
        let key = self.keys[key_i].name.clone();
        if self.keys[key_i].ttl.is_some() {
            return self.ttl_next(c, key);
        }
        let roll = self.rng.range(0, 99);
        let cl = &mut self.clients[c];
        cl.seq += 1;
        let seq = cl.seq;
        let client_id = cl.id;
        let (kind, hist_kind) = match roll {
            0..=29 => (Pending::Get { quorum: false }, OpKind::Get { result: None }),
            30..=44 => (Pending::Get { quorum: true }, OpKind::Get { result: None }),
            45..=89 => {
                let mut v = format!("c{client_id}-{seq}");
                if key.starts_with('e') {
                    // ec values: 0..400 bytes, so they cross 64-byte chunks and stripes.
                    let pad = self.rng.range(0, 400) as usize;
                    v.extend(std::iter::repeat_n(
                        char::from(b'a' + (seq % 26) as u8),
                        pad,
                    ));
                }
                (
                    Pending::Set {
                        value: v.clone(),
                        expiry: None,
                    },
                    OpKind::Set { value: v },
                )
            }
            _ => (Pending::Delete, OpKind::Delete),
        };
        self.seq += 1;
        let hist = self.history.len();
        self.history.push(Op {
            client: client_id,
            key: key.clone(),
            invoke: self.seq,
            complete: None,
            kind: hist_kind,
        });
        self.clients[c].op = Some(InFlight {
            key,
            kind,
            hist,
            req: ReqId {
                client: client_id,
                seq,
            },
            attempt: 0,
            attempts: 0,
            ambiguous: false,
            target: None,
            replies: Vec::new(),
            quorum_nodes: Vec::new(),
            fallback: false,
            ttl_write: None,
        });
        self.client_attempt(c);
    }

    /// The owner's next operation on TTL key `key`: a read (40%), a new value with an expiry
    /// 150..2500 ms ahead or none (35%), or a TTL change of the last acknowledged value —
    /// the same bytes again with a new expiry or none (EXPIRE / PERSIST).
    fn ttl_next(&mut self, c: usize, key: String) {
        let roll = self.rng.range(0, 99);
        let cl = &mut self.clients[c];
        cl.seq += 1;
        let seq = cl.seq;
        let client_id = cl.id;
        let last = self
            .ttl_acked
            .get(&key)
            .and_then(|i| self.ttl_writes.get(&key).and_then(|w| w.get(*i)))
            .map(|w| w.value.clone());
        let ahead = self.rng.range(150, 2500);
        let persist = self.rng.chance(0.2);
        let expiry = (!persist).then_some(self.now + ahead);
        let kind = match (roll, last) {
            (0..=39, _) => Pending::Get { quorum: false },
            (75..=99, Some(v)) => Pending::Set { value: v, expiry },
            _ => {
                let mut v = format!("c{client_id}-{seq}");
                let pad = self.rng.range(0, 300) as usize;
                v.extend(std::iter::repeat_n('t', pad));
                Pending::Set { value: v, expiry }
            }
        };
        let ttl_write = match &kind {
            Pending::Set { value, expiry } => {
                let w = self.ttl_writes.entry(key.clone()).or_default();
                w.push(TtlWrite {
                    value: value.clone(),
                    expiry: *expiry,
                    acked: false,
                    never: false,
                });
                Some(w.len() - 1)
            }
            _ => None,
        };
        // The register history does not model expiry: TTL keys keep a placeholder entry
        // (filtered out before the linearizability check) and their own model.
        self.seq += 1;
        let hist = self.history.len();
        self.history.push(Op {
            client: client_id,
            key: key.clone(),
            invoke: self.seq,
            complete: None,
            kind: OpKind::Get { result: None },
        });
        self.clients[c].op = Some(InFlight {
            key,
            kind,
            hist,
            req: ReqId {
                client: client_id,
                seq,
            },
            attempt: 0,
            attempts: 0,
            ambiguous: false,
            target: None,
            replies: Vec::new(),
            quorum_nodes: Vec::new(),
            fallback: false,
            ttl_write,
        });
        self.client_attempt(c);
    }

    /// The (value, expiry) pairs `key` may hold now: the last acknowledged write and every
    /// write whose outcome is unknown (timed out: it may take effect at any point after its
    /// invocation, as in a linearizable history). Acknowledged writes before the last one
    /// are superseded, refused ones never happened. `None`: nothing acknowledged yet.
    fn ttl_candidates(&self, key: &str) -> (Option<usize>, Vec<TtlWrite>) {
        let Some(ws) = self.ttl_writes.get(key) else {
            return (None, Vec::new());
        };
        let last = self.ttl_acked.get(key).copied();
        let c = ws
            .iter()
            .enumerate()
            .filter(|(i, w)| Some(*i) == last || (!w.acked && !w.never))
            .map(|(_, w)| w.clone())
            .collect();
        (last, c)
    }

    /// Check a coordinator read of TTL key `key` (answered `value`, `expiry`) at `now`
    /// against the model; returns what a front shows (absent once the expiry passed).
    fn ttl_check_read(
        &mut self,
        key: &str,
        value: Option<Vec<u8>>,
        expiry: Option<u64>,
    ) -> Result<Option<Vec<u8>>, String> {
        let now = self.now;
        let (acked, cands) = self.ttl_candidates(key);
        self.stats.ttl_reads_checked += 1;
        match &value {
            Some(v) => {
                let v = String::from_utf8_lossy(v);
                if !cands.iter().any(|w| w.value == v && w.expiry == expiry) {
                    return Err(format!(
                        "TTL key {key}: read ({} bytes, expiry {expiry:?}) at {now} is no \
                         write that may be current (last acked #{acked:?}; candidates {:?})",
                        v.len(),
                        cands
                            .iter()
                            .map(|w| (w.value.len(), w.expiry, w.acked))
                            .collect::<Vec<_>>()
                    ));
                }
            }
            None => {
                let may_be_gone =
                    acked.is_none() || cands.iter().any(|w| w.expiry.is_some_and(|x| x <= now));
                if !may_be_gone {
                    return Err(format!(
                        "TTL key {key}: absent at {now} before any expiry it may hold (last \
                         acked #{acked:?}; candidates {:?})",
                        cands
                            .iter()
                            .map(|w| (w.value.len(), w.expiry, w.acked))
                            .collect::<Vec<_>>()
                    ));
                }
            }
        }
        // The front hides a value whose expiry passed (the coordinator's clock decides).
        if value.is_some() && expiry.is_some_and(|x| x <= now) {
            self.stats.ttl_reads_expired += 1;
            return Ok(None);
        }
        if value.is_none() {
            self.stats.ttl_reads_expired += 1;
        }
        Ok(value)
    }

    /// The node's active expiry pass (what the cluster driver runs every 100 ms): delete the
    /// due keys it coordinates through the core, each only if not renewed meanwhile.
    fn active_expiry(&mut self, id: NodeId) -> Result<(), String> {
        let now = self.now;
        let next = self.next_expiry_ms.entry(id).or_insert(0);
        if now < *next {
            return Ok(());
        }
        *next = now + EXPIRY_PERIOD_MS;
        let Some(r) = self.nodes.get(&id).and_then(|s| s.replica.as_ref()) else {
            return Ok(());
        };
        let Some(map) = r.map().cloned() else {
            return Ok(());
        };
        let epoch = r.epoch();
        let due = r.store().expired(now, EXPIRY_KEYS_PER_PASS);
        for (key, version) in due {
            if map.coordinator(key_slot(&key)) != Some(id) {
                continue;
            }
            self.expiry_seq += 1;
            self.stats.ttl_active_expiries += 1;
            let req = ClientRequest {
                id: ReqId {
                    client: EXPIRY_CLIENT,
                    seq: self.expiry_seq,
                },
                epoch,
                op: ClientOp::Expire { key, version },
            };
            self.step_node(
                id,
                Input::Client {
                    client: EXPIRY_CLIENT,
                    req,
                },
            )?;
        }
        Ok(())
    }

    fn client_attempt(&mut self, c: usize) {
        let map = self.cp.map().clone();
        let Some(cl) = self.clients.get_mut(c) else {
            return;
        };
        let Some(op) = cl.op.as_mut() else { return };
        op.attempts += 1;
        if op.attempts > CLIENT_ATTEMPTS_MAX {
            self.client_finish(c, None, true);
            return;
        }
        // Refresh the map (the client watches the control plane).
        if op.ambiguous {
            // After a timed-out write, only a retry to the same incarnation of the same
            // coordinator is safe (its dedup table knows the request).
            let slot = key_slot(op.key.as_bytes());
            let same = op.target.is_some_and(|(n, inc)| {
                map.coordinator(slot) == Some(n)
                    && map.nodes.get(&n).is_some_and(|i| i.incarnation == inc)
            });
            if !same {
                self.client_finish(c, None, false);
                return;
            }
        }
        cl.map = map.clone();
        // Attempt ids are unique across all ops (the global sequence), so a stale timer of an
        // earlier op can never match.
        self.seq += 1;
        op.attempt = self.seq;
        op.replies.clear();
        let key = op.key.clone().into_bytes();
        let slot = key_slot(&key);
        let epoch = map.epoch;
        let memgest = self
            .keys
            .iter()
            .find(|k| k.name == op.key)
            .map(|k| k.memgest);
        let mut sends = Vec::new();
        match (&op.kind, op.fallback) {
            (Pending::Get { quorum: true }, false) => {
                let depth = map.replica_depth();
                let cohort: Vec<NodeId> = map.cohort(slot).into_iter().take(depth).collect();
                op.quorum_nodes = cohort.clone();
                for n in cohort {
                    sends.push((n, ClientOp::ReadReplica { key: key.clone() }));
                }
            }
            (k, _) => {
                let Some(coord) = map.coordinator(slot) else {
                    return;
                };
                let inc = map.nodes.get(&coord).map_or(0, |n| n.incarnation);
                let o = match k {
                    Pending::Get { .. } => ClientOp::Get { key },
                    Pending::Set { value, expiry } => ClientOp::Set {
                        key,
                        expiry_ms: *expiry,
                        kind: ringlet_types::ValueKind::String,
                        value: value.clone().into_bytes(),
                        // "Mover" keys change memgest from write to write (what MEMGEST MOVE
                        // does): the choice is a function of the value, so retries agree.
                        memgest: if self.movers.contains(&op.key) && !self.ec_memgests.is_empty() {
                            let mut choices = vec![self.r3];
                            choices.extend(self.ec_memgests.iter().copied());
                            Some(choices[value.len() % choices.len()])
                        } else {
                            memgest
                        },
                    },
                    Pending::Delete => ClientOp::Delete { key },
                };
                if !matches!(k, Pending::Get { .. }) {
                    op.target = Some((coord, inc));
                }
                sends.push((coord, o));
            }
        }
        let req = op.req;
        let attempt = op.attempt;
        for (n, o) in sends {
            self.send(
                None,
                Addr::Node(n),
                Msg::Request {
                    client: c,
                    req: ClientRequest {
                        id: req,
                        epoch,
                        op: o,
                    },
                },
            );
        }
        self.schedule(
            CLIENT_TIMEOUT_MS,
            Event::ClientTimeout { client: c, attempt },
        );
    }

    fn client_timeout(&mut self, c: usize, attempt: u64) {
        let Some(op) = self.clients.get_mut(c).and_then(|cl| cl.op.as_mut()) else {
            return;
        };
        if op.attempt != attempt {
            return;
        }
        if !matches!(op.kind, Pending::Get { .. }) {
            op.ambiguous = true;
            self.stats.timeouts += 1;
            if std::env::var_os("SIM_TRACE").is_some() {
                eprintln!(
                    "t={} timeout client {c} {:?} key {} target {:?} attempts {}",
                    self.now, op.req, op.key, op.target, op.attempts
                );
            }
        }
        if let Pending::Get { quorum: true } = op.kind {
            op.fallback = op.attempts >= 3;
        }
        self.client_attempt(c);
    }

    /// A definite refusal: retry after a short backoff with a fresh map. Unlike a timeout,
    /// this does not make a write ambiguous.
    fn client_retry_later(&mut self, c: usize) {
        let Some(op) = self.clients.get_mut(c).and_then(|cl| cl.op.as_mut()) else {
            return;
        };
        self.seq += 1;
        op.attempt = self.seq; // ignore the old attempt's timeout and stragglers
        let attempt = op.attempt;
        let backoff = self.rng.range(20, 120);
        self.schedule(backoff, Event::ClientRetry { client: c, attempt });
    }

    fn client_reply(&mut self, c: usize, r: Reply) {
        let Some(cl) = self.clients.get_mut(c) else {
            return;
        };
        let client_epoch = cl.map.epoch;
        let Some(op) = cl.op.as_mut() else { return };
        if r.id != op.req {
            return;
        }
        if std::env::var_os("SIM_TRACE_KEY").is_some_and(|k| k == op.key.as_str()) {
            eprintln!(
                "t={} reply to client {c} from {} epoch {} {:?} for {:?}",
                self.now, r.from, r.epoch, r.body, op.kind
            );
        }
        match (&op.kind, op.fallback, r.body) {
            (
                Pending::Get { quorum: true },
                false,
                ClientReply::Replica {
                    version,
                    memgest,
                    value,
                    ..
                },
            ) => {
                if r.epoch != client_epoch {
                    return;
                }
                if op.replies.iter().any(|(n, ..)| *n == r.from) {
                    return;
                }
                op.replies.push((r.from, version, memgest, value));
                if let Some(v) = decide_quorum(&cl.map, &op.quorum_nodes, &op.replies) {
                    self.client_finish(c, Some(v), false);
                }
            }
            (Pending::Get { quorum: true }, false, _) => {}
            (
                Pending::Get { .. },
                _,
                ClientReply::Value {
                    value, expiry_ms, ..
                },
            ) => {
                let key = op.key.clone();
                let value = if self.ttl_writes.contains_key(&key)
                    || self.keys.iter().any(|k| k.name == key && k.ttl.is_some())
                {
                    match self.ttl_check_read(&key, value, expiry_ms) {
                        Ok(v) => v,
                        Err(e) => {
                            self.ttl_failure = Some(e);
                            None
                        }
                    }
                } else {
                    value
                };
                self.client_finish(c, Some(value), false);
            }
            (Pending::Set { .. } | Pending::Delete, _, ClientReply::Written { version }) => {
                // Durability is checked on Sets: a Delete of a key that does not exist goes
                // to the default memgest (`none`), and losing that tombstone with its node
                // changes nothing a client can see. Deletes are covered by the final
                // read-back and the linearizability check.
                if matches!(op.kind, Pending::Set { .. }) {
                    let key = op.key.clone();
                    if let Some(i) = op.ttl_write {
                        if let Some(w) = self.ttl_writes.get_mut(&key).and_then(|w| w.get_mut(i)) {
                            w.acked = true;
                        }
                        let a = self.ttl_acked.entry(key.clone()).or_insert(i);
                        *a = (*a).max(i);
                    }
                    let e = self.acked.entry(key).or_insert(Version::ZERO);
                    *e = (*e).max(version);
                }
                self.stats.writes_acked += 1;
                self.client_finish(c, None, false);
            }
            (_, _, ClientReply::Ambiguous { .. }) => {
                self.stats.ambiguous_replies += 1;
                op.ambiguous = true;
                self.client_finish(c, None, false);
            }
            (_, _, ClientReply::OutOfMemory) => {
                self.stats.oom_replies += 1;
                self.client_retry_later(c)
            }
            (_, _, body) if body.is_definite_failure() => self.client_retry_later(c),
            _ => {}
        }
    }

    /// Complete the in-flight op. `result`: for gets the value read; `gave_up`: every attempt
    /// failed definitely (the op had no effect).
    fn client_finish(&mut self, c: usize, result: Option<Option<Vec<u8>>>, gave_up: bool) {
        let Some(cl) = self.clients.get_mut(c) else {
            return;
        };
        let Some(op) = cl.op.take() else { return };
        self.seq += 1;
        let now_seq = self.seq;
        let h = &mut self.history[op.hist];
        match op.kind {
            Pending::Get { .. } => match result {
                Some(v) => {
                    h.complete = Some(now_seq);
                    h.kind = OpKind::Get {
                        result: v.map(|b| String::from_utf8_lossy(&b).into_owned()),
                    };
                    self.stats.ops_ok += 1;
                }
                None => self.stats.ops_failed += 1, // unknown read: dropped by the checker
            },
            Pending::Set { .. } | Pending::Delete => {
                if op.ambiguous {
                    self.stats.ops_unknown += 1; // complete stays None
                } else if gave_up {
                    if let Some(i) = op.ttl_write {
                        if let Some(w) = self.ttl_writes.get_mut(&op.key).and_then(|w| w.get_mut(i))
                        {
                            w.never = true;
                        }
                    }
                    // Every attempt was refused: it never executed; drop it from the history
                    // (an unknown-outcome read carries no information).
                    h.kind = OpKind::Get { result: None };
                    h.complete = None;
                    self.stats.ops_failed += 1;
                } else {
                    h.complete = Some(now_seq);
                    self.stats.ops_ok += 1;
                }
            }
        }
        let think = self.rng.range(0, 30);
        self.schedule(think, Event::ClientNext(c));
    }

    // ------------------------------------------------------------------ final checks

    fn final_checks(&mut self) -> Result<(), String> {
        let seed = self.seed;
        for s in self.nodes.values() {
            if let Some(r) = &s.replica {
                self.stats.ec_takeovers += r.stats.ec_takeovers;
                self.stats.ec_decodes_on_demand += r.stats.ec_decodes_on_demand;
                self.stats.ec_holder_syncs += r.stats.ec_holder_syncs;
                self.stats.ec_reencoded += r.stats.move_ec_reencoded;
                self.stats.ec_copied += r.stats.move_ec_copied;
                self.stats.copies_aborted += r.stats.move_copies_aborted;
                self.stats.ec_replacement_pages += r.stats.move_ec_replacement_pages;
                self.stats.ec_meta_only_writes += r.stats.ec_meta_only_writes;
            }
        }
        let map = self.cp.map().clone();
        self.ttl_final_checks(&map)?;
        if std::env::var_os("SIM_TRACE").is_some() {
            for (id, s) in &self.nodes {
                if let Some(r) = &s.replica {
                    eprintln!("node {id}: {:?}", r.stats);
                }
            }
        }
        let map = self.cp.map().clone();
        // Durability: every acknowledged rep:3 write is still there (version at least as new).
        for k in &self.keys {
            if (!k.rep && self.disruptive_seen) || (self.double_seen && !k.two_failures) {
                continue; // `none` keys are lost with their node, by definition
            }
            let Some(acked) = self.acked.get(&k.name) else {
                continue;
            };
            let slot = key_slot(k.name.as_bytes());
            let Some(coord) = map.coordinator(slot) else {
                continue;
            };
            let have = self
                .nodes
                .get(&coord)
                .and_then(|s| s.replica.as_ref())
                .and_then(|r| r.store().get(k.name.as_bytes()))
                .map_or(Version::ZERO, |e| e.version);
            if have < *acked {
                return Err(fail(
                    seed,
                    format!(
                        "acknowledged write lost: key {} acked {} but coordinator {} has {} [{}]",
                        k.name, acked, coord, have, self.stats.faults
                    ),
                ));
            }
        }
        if self.possible_loss > 0 && !self.double_seen {
            return Err(fail(
                seed,
                format!(
                    "a rebuild gave up waiting for a majority [{}]",
                    self.stats.faults
                ),
            ));
        }
        // Read-back: every reliable key's committed value at its coordinator (ec values from
        // the arena, decoded after takeovers) joins the history as a final read, so the
        // linearizability check below proves it byte-identical to the last write that took
        // effect.
        for k in &self.keys {
            if !k.rep || (self.double_seen && !k.two_failures) || k.ttl.is_some() {
                continue;
            }
            let slot = key_slot(k.name.as_bytes());
            let Some(coord) = map.coordinator(slot) else {
                continue;
            };
            let Some(r) = self.nodes.get(&coord).and_then(|s| s.replica.as_ref()) else {
                continue;
            };
            let Some(v) = r.committed_value(k.name.as_bytes()) else {
                return Err(fail(
                    seed,
                    format!(
                        "key {}: value not recovered at {coord} after convergence",
                        k.name
                    ),
                ));
            };
            self.seq += 1;
            let at = self.seq;
            self.history.push(Op {
                client: u64::MAX,
                key: k.name.clone(),
                invoke: at,
                complete: Some(at),
                kind: OpKind::Get {
                    result: v.map(|b| String::from_utf8_lossy(&b).into_owned()),
                },
            });
            self.stats.readback_checked += 1;
        }
        // Linearizability of the recorded history (rep keys always; `none` keys only when no
        // node was lost during the run).
        let ops: Vec<Op> = self
            .history
            .iter()
            .filter(|o| {
                self.keys.iter().any(|k| {
                    k.name == o.key
                        && k.ttl.is_none()
                        && (k.rep || !self.disruptive_seen)
                        && (k.two_failures || !self.double_seen)
                })
            })
            .cloned()
            .collect();
        self.stats.history_ops = ops.len();
        let t0 = std::time::Instant::now();
        let report = check_history(&ops, DEFAULT_BUDGET).map_err(|e| fail(seed, e))?;
        if std::env::var_os("SIM_TRACE").is_some() {
            eprintln!("linearize: {} ops in {:?}", ops.len(), t0.elapsed());
        }
        if !report.is_ok() {
            // Keep the history for offline study (`ringlet_linearize::check_history_json`).
            let path = std::env::temp_dir().join(format!("ringlet-sim-{seed}.json"));
            let json = serde_json::to_string(&ringlet_linearize::History { ops: ops.clone() })
                .unwrap_or_default();
            let _ = std::fs::write(&path, json);
            let bad = &report.violations[0];
            let mut lines: Vec<String> = ops
                .iter()
                .filter(|o| &o.key == bad)
                .map(|o| format!("  {:?}", o))
                .collect();
            lines.truncate(200);
            return Err(fail(
                seed,
                format!(
                    "linearizability violation on key {bad} [{}] (history: {})\n{}",
                    self.stats.faults,
                    path.display(),
                    lines.join("\n")
                ),
            ));
        }
        Ok(())
    }
}

impl World {
    /// End of a TTL run (healed, converged): each TTL key's coordinator holds a candidate
    /// (value, expiry) of the model, or nothing only if an expiry it may hold has passed;
    /// a key whose expiry passed more than a second ago is deleted (active expiry, engine
    /// store only: the reference store keeps no expiry index).
    fn ttl_final_checks(&mut self, map: &ClusterMap) -> Result<(), String> {
        let seed = self.seed;
        let now = self.now;
        let names: Vec<(String, bool)> = self
            .keys
            .iter()
            .filter(|k| k.ttl.is_some())
            .map(|k| (k.name.clone(), k.two_failures))
            .collect();
        for (name, two) in names {
            if self.double_seen && !two {
                continue;
            }
            let Some(coord) = map.coordinator(key_slot(name.as_bytes())) else {
                continue;
            };
            let Some(r) = self.nodes.get(&coord).and_then(|s| s.replica.as_ref()) else {
                continue;
            };
            let entry = r.store().get(name.as_bytes());
            let Some(value) = r.committed_value(name.as_bytes()) else {
                return Err(fail(seed, format!("TTL key {name}: value not recovered")));
            };
            let expiry = entry.as_ref().and_then(|e| e.expiry_ms);
            if value.is_some()
                && self.opts.engine_store
                && expiry.is_some_and(|x| x.saturating_add(1000) < now)
            {
                return Err(fail(
                    seed,
                    format!("TTL key {name}: expired at {expiry:?}, still stored at {now}"),
                ));
            }
            // A read at `now`, the model decides (it counts in ttl_reads_checked).
            self.ttl_check_read(&name, value, expiry)
                .map_err(|e| fail(seed, format!("final: {e} [{}]", self.stats.faults)))?;
            self.stats.ttl_final_checked += 1;
        }
        Ok(())
    }
}

/// Quorum read decision (CliqueMap R=3.2 style): a version wins when a majority of the first
/// R cohort members (R from the memgest the replies report) returned exactly it; data comes
/// from the first responder that had it. A `none` key is decided by the coordinator alone.
fn decide_quorum(
    map: &ClusterMap,
    cohort: &[NodeId],
    replies: &[(NodeId, Version, MemgestId, Option<Vec<u8>>)],
) -> Option<Option<Vec<u8>>> {
    let coord = *cohort.first()?;
    if let Some((_, v, m, val)) = replies.iter().find(|(n, ..)| *n == coord) {
        if *v != Version::ZERO && map.copies(*m) == 1 {
            return Some(val.clone());
        }
    }
    let max_copies = replies
        .iter()
        .filter(|(_, v, ..)| *v != Version::ZERO)
        .map(|(_, _, m, _)| map.copies(*m))
        .max()
        .unwrap_or(cohort.len());
    let mut best: Option<(Version, Option<Vec<u8>>)> = None;
    let versions: BTreeSet<Version> = replies.iter().map(|(_, v, ..)| *v).collect();
    for v in versions {
        let (r, val) = match replies.iter().find(|(_, x, ..)| *x == v) {
            Some((_, _, m, val)) if v != Version::ZERO => (map.copies(*m), val.clone()),
            _ => {
                // "Not found" only counts with the coordinator in the agreeing set: a key of
                // a single-copy memgest lives only there, and replicas cannot know it exists.
                if !replies.iter().any(|(n, x, ..)| *n == coord && *x == v) {
                    continue;
                }
                (max_copies, None)
            }
        };
        let holders = &cohort[..r.min(cohort.len())];
        let count = replies
            .iter()
            .filter(|(n, x, ..)| *x == v && holders.contains(n))
            .count();
        if count > r / 2 && best.as_ref().is_none_or(|(b, _)| v > *b) {
            best = Some((v, val));
        }
    }
    best.map(|(_, val)| val)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringlet_control::{ControlConfig, ControlPlane, Input};

    fn map() -> Arc<ClusterMap> {
        let mut cp = ControlPlane::new(ControlConfig {
            s: 1,
            d: 2,
            lease_ms: 1500,
            ec_moves: true,
        })
        .unwrap();
        for i in 1..=3 {
            cp.step(
                0,
                Input::Join {
                    node: NodeId(i),
                    addr: String::new(),
                    incarnation: 1,
                },
            );
        }
        cp.step(0, Input::Bootstrap { active: 3 });
        cp.step(
            0,
            Input::CreateMemgest {
                name: "r3".into(),
                kind: MemgestKind::Rep { r: 3 },
                evictable: None,
            },
        );
        cp.map().clone()
    }

    #[test]
    fn quorum_decisions() {
        let m = map();
        let r3 = m.memgest_by_name("r3").unwrap();
        let cohort = [NodeId(1), NodeId(2), NodeId(3)];
        let v = |x| Version(x);
        let val = |s: &str| Some(s.as_bytes().to_vec());
        // Two of three agree: decided, data from the agreeing replies.
        let replies = vec![
            (NodeId(2), v(5), r3, val("a")),
            (NodeId(3), v(5), r3, val("a")),
        ];
        assert_eq!(decide_quorum(&m, &cohort, &replies), Some(val("a")));
        // Disagreement: no decision yet.
        let replies = vec![
            (NodeId(2), v(5), r3, val("a")),
            (NodeId(3), v(4), r3, val("b")),
        ];
        assert_eq!(decide_quorum(&m, &cohort, &replies), None);
        // "Not found" from two replicas without the coordinator is not a quorum: a `none` key
        // lives only on the coordinator.
        let replies = vec![
            (NodeId(2), Version::ZERO, MemgestId::NONE, None),
            (NodeId(3), Version::ZERO, MemgestId::NONE, None),
        ];
        assert_eq!(decide_quorum(&m, &cohort, &replies), None);
        // The coordinator alone decides a `none` key.
        let replies = vec![(NodeId(1), v(9), MemgestId::NONE, val("n"))];
        assert_eq!(decide_quorum(&m, &cohort, &replies), Some(val("n")));
    }
}
