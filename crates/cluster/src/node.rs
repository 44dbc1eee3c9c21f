//! [`ClusterNode`]: one node's replica core with real sockets and a real clock.
//!
//! ```text
//!  front ends --submit(op)--+                 peer transport --Peer--+
//!                           v                                        v
//!                     Shared::offer(event): core free and nothing queued?
//!                      | yes: step it here (front worker /         | no
//!                      |      peer reader thread, no hop)          v
//!                      |                  bounded event channel (DRIVER_QUEUE_MAX)
//!                      |                  <--Map/HbAck/Fenced-- control client
//!                      v                                           |
//!          Mutex<Driver>: Replica::step(mono_ms(), input) <-- driver thread: ticks,
//!                      |                                     queued events, control
//!     Send -> transport.send (never blocks) · Reply -> the waiting oneshot
//!     Control -> control client · PossibleLoss -> counter + log
//! ```
//!
//! The replica core is stepped by one thread at a time (the driver mutex). A small client
//! operation or replication message is stepped on the thread that received it when the core
//! is free and no event is queued (docs/design/cluster-replication.md, "A SET's path"): a
//! rep:3 SET then costs no thread hop on the coordinator or the replicas beyond the sockets'
//! own. Everything else (ticks, pulls, repair, large values, control) is stepped by the
//! driver thread, and once anything is queued every event queues behind it, so the events
//! of one source are stepped in arrival order whichever thread steps them. The engine the
//! core writes through ([`EngineStore`]) is shared (behind its mutex) with whoever serves INFO.
//! A full event channel refuses: a client gets `Busy` (nothing happened), a peer frame is
//! dropped (the sender retransmits).

use crate::control::{ControlClient, FromControl, ToControl};
use crate::mono_ms;
use crate::store::EngineStore;
use crate::transport::{Inbound, Transport};
use parking_lot::{Mutex, RwLock};
use ringlet_control::{ClusterMap, Input as ControlInput, NodeState};
use ringlet_engine::{Engine, EngineConfig};
use ringlet_engine::{ReadOutcome, Reader};
use ringlet_replica::{
    ClientOp, ClientReply, ClientRequest, Input, Output, PeerMsg, Replica, ReplicaConfig, Reply,
    ReqId,
};
use ringlet_replica::{InflightKeys, ReplicaStore};
use ringlet_shm::{ShmError, ValidityWriter};
use ringlet_shm_exporter::{Exporter, ExporterConfig};
use ringlet_types::{
    key_slot, limits, Epoch, MemgestId, MemgestKind, NodeId, Slot, ValueKind, Version,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::oneshot;

/// Events queued to the driver before new ones are refused.
pub const DRIVER_QUEUE_MAX: usize = limits::QUEUE_CAPACITY as usize;
/// Client requests awaiting a reply from the core (bounded like the queue).
pub const WAITING_MAX: usize = limits::QUEUE_CAPACITY as usize;
/// Longest a thread waits for the core's lock to step an event inline before it queues the
/// event instead. Inline steps are short (a small value: a few µs), so a brief wait beats the
/// driver thread's wake-up; the bound keeps an I/O worker from waiting out a long step of the
/// driver's (a pull page, a repair round), and once anything is queued, events queue until
/// the driver has caught up (see `Shared::offer`), so a collision used to cost several hops.
pub const INLINE_LOCK_WAIT: Duration = Duration::from_micros(50);
/// Largest value (or ec delta) a front worker or a peer reader steps through the core on its
/// own thread. Larger ones go to the driver thread: a step copies, checksums and encodes the
/// value once per replica, milliseconds for a large one, and an I/O worker busy that long
/// would stall every other connection it serves.
pub const INLINE_STEP_BYTES_MAX: usize = 64 * 1024;

/// How a node runs.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub id: NodeId,
    /// Process incarnation (restarts must use a higher one: we use the start time in ms).
    pub incarnation: u64,
    /// Client address announced in the map (MOVED and CLUSTER SLOTS point here).
    pub client_addr: SocketAddr,
    /// Peer listener bind address (port 0: any).
    pub peer_bind: SocketAddr,
    /// Control service address.
    pub control_addr: String,
    pub engine: EngineConfig,
    /// Replica timing (lease must equal the control plane's).
    pub replica: ReplicaConfig,
    /// Driver tick interval.
    pub tick_ms: u64,
    /// Export the engine for one-sided reads on this Unix socket (docs/design/
    /// cluster-shm-reads.md).
    pub shm_socket: Option<std::path::PathBuf>,
}

/// Why a submit got no reply from the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("node overloaded: request refused before it ran")]
    Overloaded,
    #[error("node stopped")]
    Stopped,
}

enum Event {
    Client {
        req: ClientRequest,
        reply: oneshot::Sender<Reply>,
    },
    Peer {
        from: NodeId,
        msg: PeerMsg,
    },
    Control(FromControl),
    /// Something is waiting in `Shared::control`.
    Wake,
    Stop,
}

/// Longest a draining node holds a new map back so its in-flight writes are handed to the
/// successor's rebuild rather than abandoned (a few replication round trips).
const DRAIN_HANDOVER_MS: u64 = 300;

/// How often a node reports its per-memgest key and byte counts to the control plane
/// (`MEMGEST INFO`, and the check that refuses to drop a memgest that still holds keys).
/// Engine statistics cost a pass over 16,384 slot counters under the engine lock (tens of µs).
pub const USAGE_REPORT_MS: u64 = 100;

/// Control messages waiting for the driver (maps, acks, fences): a handful per heartbeat.
const CONTROL_PENDING_MAX: usize = 1024;

/// How often the driver looks for expired keys it coordinates (active expiry).
const EXPIRY_SCAN_MS: u64 = 100;
/// The client id of the driver's own expiry deletes (node ids are < 2^24, front clients
/// are `node << 40 | n`: this one is outside both).
const EXPIRY_CLIENT: u64 = u64::MAX;

/// How often the heartbeat thread looks whether a heartbeat is due.
const HEARTBEAT_POLL_MS: u64 = 20;

/// Longest the heartbeat thread keeps renewing the lease for a driver that has not finished a
/// step. Long enough for the slowest honest step (a 64 MiB value replicated or applied on a
/// loaded host, seconds in a debug build); short enough that a wedged driver still loses its
/// roles to a spare instead of holding them forever.
pub const DRIVER_STALL_MAX_MS: u64 = 10_000;

/// Counters (metrics `cluster_*`).
#[derive(Debug, Default)]
pub struct NodeStats {
    pub events_refused: AtomicU64,
    pub possible_loss: AtomicU64,
    pub maps_applied: AtomicU64,
    pub fenced: AtomicU64,
    /// Lease renewals sent by the heartbeat thread while the driver was inside a long step.
    pub heartbeats_for_busy_driver: AtomicU64,
    /// Ambiguous writes the fronts resolved as done (the new coordinator served them).
    pub ambiguous_resolved: AtomicU64,
    /// ec arenas still loading or decoding after a takeover (the core's count after its last
    /// step); INFO `ec_arenas_not_ready`.
    pub ec_arenas_not_ready: AtomicU64,
    /// Coordinator reads answered from the engine by the front's own thread.
    pub fast_reads: AtomicU64,
    /// Reads that went through the core instead (slot not served here, write in flight,
    /// ec value, lease or map changed during the read).
    pub fast_read_fallbacks: AtomicU64,
    /// Keys whose counter in the shm validity region is raised (writes in flight that
    /// one-sided readers must not read around); 0 without `--shm-socket`.
    pub shm_keys_in_flight: AtomicU64,
    /// Resharding: handed-off ranges this node rebuilt as their new coordinator, and keys it
    /// dropped from ranges it gave away once released (the core's counters after its last
    /// step; INFO `reshard_*`, docs/design/cluster-resharding.md).
    pub handoffs_completed: AtomicU64,
    pub handoff_keys_purged: AtomicU64,
    /// Resharding copy progress: bytes and keys received by completed handoff rebuilds, and
    /// the last one's bytes and duration (its copy throughput is their quotient).
    pub handoff_bytes_pulled: AtomicU64,
    pub handoff_keys_pulled: AtomicU64,
    pub last_handoff_bytes: AtomicU64,
    pub last_handoff_ms: AtomicU64,
    pub handoff_ms: AtomicU64,
    /// Copy before the switch: spans copied ahead of their switch, copies called off, and
    /// keys the switch's delta pull applied (INFO `reshard_copies_*`, `reshard_delta_keys`).
    pub move_copies_completed: AtomicU64,
    pub move_copies_aborted: AtomicU64,
    pub move_delta_keys: AtomicU64,
    /// Client operations and peer messages stepped on the thread that received them, and
    /// those queued to the driver thread instead (core busy, something already queued, or
    /// a large or background message); INFO `core_steps_inline` / `core_steps_queued`.
    pub steps_inline: AtomicU64,
    pub steps_queued: AtomicU64,
    /// Where a slow request's time goes (docs/design/cluster-resharding.md, "Session 17: the
    /// client tail"): core steps (the core's lock held, so every read through the core and
    /// every inline step waits) of at least 1, 5 and 20 ms ([`SLOW_STEP_US`]), the µs spent
    /// in those of ≥ 1 ms, and the ≥ 5 ms ones by what was stepped ([`StepKind`]).
    pub slow_steps: [AtomicU64; 3],
    pub slow_step_us: AtomicU64,
    pub slow_steps_by_kind: [AtomicU64; StepKind::COUNT],
    /// Longest step so far (µs); INFO `core_step_max_us`.
    pub step_max_us: AtomicU64,
    /// GETs answered through the core (each attempt; fast-path declines), those that were
    /// queued to the driver thread (the core was busy), their total time in µs, and those
    /// that took ≥ 1, 5 and 20 ms between submit and reply.
    pub core_gets: AtomicU64,
    pub core_gets_queued: AtomicU64,
    pub core_get_us: AtomicU64,
    pub core_gets_slow: [AtomicU64; 3],
    /// The fronts' retries of definite refusals ([`FrontRetry`]) and the time they slept.
    pub front_retries: [AtomicU64; FrontRetry::COUNT],
    pub front_retry_sleep_us: AtomicU64,
}

/// Thresholds of the slow-step and slow-GET counters (µs).
pub const SLOW_STEP_US: [u64; 3] = [1_000, 5_000, 20_000];

/// What a core step stepped, for the slow-step counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A pull request answered: a page of a copy, a rebuild or a sync built from the store.
    PullServe,
    /// A pull page applied (and, for ec, re-encoded).
    PullApply,
    /// ec parity, metadata and sync messages.
    Ec,
    /// The driver's tick (timers, purges, repair rounds, expiry).
    Tick,
    /// A client operation.
    Client,
    /// Anything else (replication, repair, maps).
    Other,
}

impl StepKind {
    pub const COUNT: usize = 6;
    pub const ALL: [StepKind; StepKind::COUNT] = [
        StepKind::PullServe,
        StepKind::PullApply,
        StepKind::Ec,
        StepKind::Tick,
        StepKind::Client,
        StepKind::Other,
    ];

    /// INFO / metrics name.
    pub fn name(self) -> &'static str {
        match self {
            StepKind::PullServe => "pull_serve",
            StepKind::PullApply => "pull_apply",
            StepKind::Ec => "ec",
            StepKind::Tick => "tick",
            StepKind::Client => "client",
            StepKind::Other => "other",
        }
    }

    fn of(input: &Input) -> StepKind {
        use ringlet_replica::PeerBody as B;
        match input {
            Input::Tick => StepKind::Tick,
            Input::Client { .. } => StepKind::Client,
            Input::Peer { msg, .. } => match &msg.body {
                B::PullReq { .. } => StepKind::PullServe,
                B::PullResp { .. } => StepKind::PullApply,
                B::EcUpdate { .. }
                | B::EcAck { .. }
                | B::EcMetaReq { .. }
                | B::EcMetaResp { .. }
                | B::EcReadReq { .. }
                | B::EcReadResp { .. }
                | B::EcSyncReq { .. }
                | B::EcSyncResp { .. }
                | B::EcRelease { .. }
                | B::EcReleased { .. } => StepKind::Ec,
                _ => StepKind::Other,
            },
            _ => StepKind::Other,
        }
    }
}

/// Why a front retried a request (the core's definite refusals, or a full queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontRetry {
    NotReady,
    Busy,
    NotCoordinator,
    StaleEpoch,
    Overloaded,
}

impl FrontRetry {
    pub const COUNT: usize = 5;
    pub const ALL: [FrontRetry; FrontRetry::COUNT] = [
        FrontRetry::NotReady,
        FrontRetry::Busy,
        FrontRetry::NotCoordinator,
        FrontRetry::StaleEpoch,
        FrontRetry::Overloaded,
    ];

    /// INFO / metrics name.
    pub fn name(self) -> &'static str {
        match self {
            FrontRetry::NotReady => "not_ready",
            FrontRetry::Busy => "busy",
            FrontRetry::NotCoordinator => "not_coordinator",
            FrontRetry::StaleEpoch => "stale_epoch",
            FrontRetry::Overloaded => "overloaded",
        }
    }
}

/// Count `us` against the thresholds of [`SLOW_STEP_US`].
fn count_slow(counters: &[AtomicU64; 3], us: u64) {
    for (c, t) in counters.iter().zip(SLOW_STEP_US) {
        if us >= t {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Shared {
    id: NodeId,
    tx: SyncSender<Event>,
    /// Events sent to `tx` and not yet handled by the driver thread. An event is stepped
    /// inline only while this is 0, so it never overtakes an earlier event of its source.
    queued: AtomicUsize,
    /// The core, for the threads that step it inline ([`Shared::offer`]); the driver thread
    /// holds the only strong reference, so the core goes away with it.
    core: OnceLock<Weak<Mutex<Driver>>>,
    map: RwLock<Option<Arc<ClusterMap>>>,
    /// The core's epoch after its last step (what a request must carry).
    epoch: AtomicU64,
    next_client: AtomicU64,
    stats: NodeStats,
    /// Priority lane for control messages, drained before every queued event.
    control: Mutex<std::collections::VecDeque<FromControl>>,
    /// The control service's address (front ends send memgest commands there).
    control_addr: String,
    /// What the heartbeat thread needs (see [`heartbeat_loop`]).
    hb: HeartbeatState,
    /// What front ends need to read without the driver (see [`ClusterNode::fast_get`]).
    fast: FastReads,
    /// The shared-memory export, if `--shm-socket` was given.
    shm: Option<ShmExport>,
}

/// One-sided reads from other processes (docs/design/cluster-shm-reads.md): the engine's
/// regions through an [`Exporter`] that serves no requests, and the validity region that
/// carries what [`ClusterNode::fast_get`] checks, for readers that cannot call us.
struct ShmExport {
    path: std::path::PathBuf,
    validity: ValidityWriter,
    /// The exporter of the current engine (replaced with it; `None` once stopped).
    exporter: Mutex<Option<Exporter>>,
}

impl ShmExport {
    /// Export the engine now behind `engine` under a fresh generation, published in the
    /// validity region *before* the old exporter goes: sessions that mapped the old engine
    /// fail their next check (`Fallback::Engine`) even before their watcher sees the hang-up.
    fn respawn(&self, engine: &Arc<Mutex<Engine>>, snap: &FastSnapshot) -> Result<(), ShmError> {
        let generation = ringlet_shm_exporter::random_generation();
        self.validity
            .publish(snap.epoch, generation, &snap.ranges, &snap.ec);
        let mut cur = self.exporter.lock();
        *cur = None; // unbinds the socket before the new exporter binds it
        let mut cfg = ExporterConfig::new(&self.path);
        cfg.generation = generation;
        cfg.validity_fd = Some(self.validity.fd());
        cfg.serve_requests = false;
        *cur = Some(Exporter::spawn(engine.clone(), cfg)?);
        Ok(())
    }
}

/// Published by the driver after every step, *before* that step's messages go out, so
/// nothing another node does in reaction to a step can precede what the fronts see of it.
struct FastReads {
    /// Bumped after every new snapshot: a read that saw it change falls back.
    gen: AtomicU64,
    /// The core's lease (driver clock, [`mono_ms`]).
    lease_until_ms: AtomicU64,
    snapshot: RwLock<Arc<FastSnapshot>>,
    /// The core's keys with a write in flight.
    inflight: Arc<InflightKeys>,
    /// A lock-free reader over the node's engine; replaced with the engine (a fenced node
    /// starts a fresh one, and a reader of the old one would serve its old values: found by
    /// the nemesis test, 25 of 32 keys read stale after a node was fenced and promoted again).
    reader: RwLock<Reader>,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct FastSnapshot {
    epoch: u64,
    /// [`Replica::fast_read_ranges`].
    ranges: Vec<(Slot, Slot)>,
    /// ec memgests: their engine entries are pointers into an arena, read through the core.
    ec: Vec<MemgestId>,
}

/// A value read on the fast path (the same fields as the core's `ClientReply::Value`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FastValue {
    /// The entry's version (`Version::ZERO` when absent, as the core answers).
    pub version: Version,
    pub value: Option<Vec<u8>>,
    /// Unix ms; the caller treats an expired value as absent, as for the core's replies.
    pub expiry_ms: Option<u64>,
    pub kind: ValueKind,
}

/// Lease renewal that does not queue behind data. The replica core decides *whether* this node
/// heartbeats (joined, incarnation) and the driver thread sends its heartbeats as before; but a
/// driver busy with one long step (a 64 MiB value copied, checksummed and replicated) sends
/// none, and a lease that lapses because of that fails over a healthy node (issue 10, case 5).
/// So a separate thread repeats the driver's last heartbeat whenever none went out for an
/// interval, with the epoch the core last reached. Safe: the lease is counted from *send*
/// times on both sides (control grants `lease_ms` from receipt, the core trusts `sent_ms +
/// lease_ms - margin`), whichever thread sends; and a heartbeat only ever reports an epoch the
/// core has really applied.
#[derive(Default)]
struct HeartbeatState {
    /// 0 while the core is not joined (it sends Join itself); else its incarnation.
    incarnation: AtomicU64,
    /// Monotonic ms of the last heartbeat sent by either thread.
    last_sent_ms: AtomicU64,
    /// Monotonic ms when the driver last finished a step or a wait.
    driver_alive_ms: AtomicU64,
    interval_ms: AtomicU64,
    stopped: std::sync::atomic::AtomicBool,
}

/// A running cluster node. Cheap to clone.
#[derive(Clone)]
pub struct ClusterNode {
    shared: Arc<Shared>,
    engine: Arc<Mutex<Engine>>,
    transport: Arc<Transport>,
    _control: Arc<ControlClient>,
    driver: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
    /// Ends the control link's own runtime (see `start`).
    control_rt_stop: Arc<Mutex<Option<oneshot::Sender<()>>>>,
}

impl ClusterNode {
    /// Start the peer listener, the control link and the driver thread in the current tokio
    /// runtime. Returns once the peer port is bound; the node joins on its first tick.
    ///
    /// # Errors
    /// Engine creation or peer bind failures.
    pub async fn start(cfg: NodeConfig) -> Result<(ClusterNode, SocketAddr), std::io::Error> {
        let store = EngineStore::new(EngineConfig {
            origin: cfg.id.0,
            ..cfg.engine.clone()
        })
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        let engine = store.engine().clone();
        let reader = engine.lock().reader();
        let (tx, rx) = sync_channel::<Event>(DRIVER_QUEUE_MAX);
        let shared = Arc::new(Shared {
            id: cfg.id,
            tx: tx.clone(),
            queued: AtomicUsize::new(0),
            core: OnceLock::new(),
            map: RwLock::new(None),
            epoch: AtomicU64::new(0),
            next_client: AtomicU64::new(1),
            stats: NodeStats::default(),
            control: Mutex::new(std::collections::VecDeque::new()),
            control_addr: cfg.control_addr.clone(),
            hb: HeartbeatState::default(),
            fast: FastReads {
                gen: AtomicU64::new(0),
                lease_until_ms: AtomicU64::new(0),
                snapshot: RwLock::new(Arc::default()),
                inflight: Arc::new(InflightKeys::default()),
                reader: RwLock::new(reader),
            },
            shm: match &cfg.shm_socket {
                Some(path) => Some(ShmExport {
                    path: path.clone(),
                    validity: ValidityWriter::create()?,
                    exporter: Mutex::new(None),
                }),
                None => None,
            },
        });
        if let Some(x) = &shared.shm {
            store.track_touched();
            x.respawn(&engine, &FastSnapshot::default())
                .map_err(|e| std::io::Error::other(format!("--shm-socket: {e}")))?;
        }
        shared
            .hb
            .interval_ms
            .store(cfg.replica.heartbeat_interval_ms.max(1), Ordering::Relaxed);
        shared
            .hb
            .driver_alive_ms
            .store(mono_ms(), Ordering::Relaxed);
        let inbound: Inbound = Arc::new(NodeInbound(shared.clone()));
        let (transport, peer_addr) =
            Transport::bind(cfg.peer_bind, cfg.id, cfg.incarnation, inbound).await?;
        // The control link (heartbeats out, acks and maps in) runs on its own one-thread
        // runtime: on the shared runtime it waited behind tasks busy with a 64 MiB value
        // (a peer frame being read, a RESP bulk being parsed), its lease lapsed and a
        // healthy node was failed over (issue 10, case 5).
        let control_rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let control_handle = control_rt.handle().clone();
        let (control_rt_stop, control_rt_stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("ringlet-ctl-{}", cfg.id))
            .spawn(move || {
                control_rt.block_on(async {
                    let _ = control_rt_stopped.await;
                });
            })?;
        let s3 = shared.clone();
        let control = Arc::new(ControlClient::start(
            cfg.control_addr.clone(),
            Arc::new(move |m| {
                // Control messages jump the queue: a new map (or a fence) must not wait
                // behind thousands of client and peer events (see `Shared::control`).
                {
                    let mut q = s3.control.lock();
                    if q.len() >= CONTROL_PENDING_MAX {
                        q.pop_front(); // the oldest is the least useful (maps supersede)
                        s3.stats.events_refused.fetch_add(1, Ordering::Relaxed);
                    }
                    q.push_back(m);
                }
                let _ = s3.enqueue(Event::Wake);
            }),
            &control_handle,
        ));
        let mut rcfg = cfg.replica.clone();
        // Announced as Redis CLUSTER NODES does: ip:port@cport.
        rcfg.addr = format!("{}@{}", cfg.client_addr, peer_addr.port());
        let mut replica = Replica::new(cfg.id, cfg.incarnation, rcfg, store);
        replica.set_inflight_keys(shared.fast.inflight.clone());
        let d = Driver {
            replica,
            shared: shared.clone(),
            transport: transport.clone(),
            control: control.clone(),
            waiting: HashMap::new(),
            trace: std::env::var_os("RINGLET_TRACE").is_some(),
            was_pulling: false,
            pulls_done: 0,
            deferred: None,
            engine: engine.clone(),
            next_usage_ms: 0,
            next_expiry_ms: 0,
            expiry_seq: 0,
            fast_scratch: Vec::new(),
            fast_engine_generation: 0,
            shm_held: HashMap::new(),
            shm_touched: Vec::new(),
            cork: 0,
            held: Vec::new(),
        };
        let core = Arc::new(Mutex::new(d));
        let _ = shared.core.set(Arc::downgrade(&core));
        let (s5, tick_ms) = (shared.clone(), cfg.tick_ms.max(1));
        let handle = std::thread::Builder::new()
            .name(format!("ringlet-node-{}", cfg.id))
            .spawn(move || run_driver(&core, &s5, &rx, tick_ms))?;
        let (s4, c4) = (shared.clone(), control.clone());
        std::thread::Builder::new()
            .name(format!("ringlet-hb-{}", cfg.id))
            .spawn(move || heartbeat_loop(&s4, &c4))?;
        Ok((
            ClusterNode {
                shared,
                engine,
                transport,
                _control: control,
                driver: Arc::new(Mutex::new(Some(handle))),
                control_rt_stop: Arc::new(Mutex::new(Some(control_rt_stop))),
            },
            peer_addr,
        ))
    }

    pub fn id(&self) -> NodeId {
        self.shared.id
    }

    /// Address of the control service this node reports to.
    pub fn control_addr(&self) -> &str {
        &self.shared.control_addr
    }

    /// The newest map the node applied.
    pub fn map(&self) -> Option<Arc<ClusterMap>> {
        self.shared.map.read().clone()
    }

    /// The lock-free reader over this node's current engine: where a key's index entry is
    /// now, for the location hints of links (docs/design/records.md).
    pub fn engine_reader(&self) -> Reader {
        self.shared.fast.reader.read().clone()
    }

    /// The node's epoch.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.shared.epoch.load(Ordering::Acquire))
    }

    /// The engine (shared; for INFO, DBSIZE, metrics).
    pub fn engine(&self) -> &Arc<Mutex<Engine>> {
        &self.engine
    }

    pub fn stats(&self) -> &NodeStats {
        &self.shared.stats
    }

    /// The shared-memory exporter's counters (clients, access records), if `--shm-socket`.
    /// One-sided reads themselves never reach the node: clients count them.
    pub fn shm_stats(&self) -> Option<ringlet_shm_exporter::ExporterStats> {
        let x = self.shared.shm.as_ref()?;
        x.exporter.lock().as_ref().map(Exporter::stats)
    }

    pub fn count_ambiguous_resolved(&self) {
        self.shared
            .stats
            .ambiguous_resolved
            .fetch_add(1, Ordering::Relaxed);
    }

    pub fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    /// Read `key` from the engine on the caller's thread, without the driver, if this node
    /// may answer it now: it coordinates the slot with a complete copy, its lease lasts, no
    /// write of the key is in flight and the value is not an ec pointer. `None`: ask the core
    /// ([`ClusterNode::submit`]). Linearizable for the same reasons as the core's own read:
    /// the checks that precede the engine read are the core's, and the ones repeated after it
    /// (snapshot generation, lease) prove the node still coordinated when it read. Writes
    /// reach the engine only when committed (staged until then), so no uncommitted value is
    /// ever returned.
    pub fn fast_get(&self, key: &[u8]) -> Option<FastValue> {
        let v = self.fast_get_inner(key);
        let c = if v.is_some() {
            &self.shared.stats.fast_reads
        } else {
            &self.shared.stats.fast_read_fallbacks
        };
        c.fetch_add(1, Ordering::Relaxed);
        v
    }

    fn fast_get_inner(&self, key: &[u8]) -> Option<FastValue> {
        let f = &self.shared.fast;
        let gen = f.gen.load(Ordering::Acquire);
        if mono_ms() >= f.lease_until_ms.load(Ordering::Acquire) {
            return None;
        }
        let snap = f.snapshot.read().clone();
        let slot = key_slot(key);
        if !snap.ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot)) {
            return None;
        }
        if f.inflight.may_have(key) {
            return None;
        }
        let mut out = Vec::new();
        // now_ms 0: the engine never expires on read here, as for the core (the caller
        // compares the expiry with the wall clock, as for the core's replies).
        // Without recording the access (`Reader::get` would): cluster reads have never fed the
        // eviction policy (the core reads with the locked `Engine::get`), and with every entry
        // marked hot, a pinned write on a full node ran out of eviction scan budget before it
        // found a cache entry to evict (tests/oom.rs `full_cache_memgest_evicts...`).
        let read = ringlet_engine::read_entry_bounded(
            &f.reader.read().view(),
            key,
            0,
            u64::from(limits::FAST_READ_BYTES_MAX),
            &mut out,
        );
        let v = match read {
            ReadOutcome::Hit {
                version,
                memgest,
                expire_at_ms,
                kind,
            } => {
                if snap.ec.contains(&memgest) {
                    return None;
                }
                FastValue {
                    version,
                    value: Some(out),
                    expiry_ms: expire_at_ms,
                    kind,
                }
            }
            ReadOutcome::Miss => FastValue {
                version: Version::ZERO,
                value: None,
                expiry_ms: None,
                kind: ValueKind::String,
            },
            ReadOutcome::Retry => return None,
        };
        if f.gen.load(Ordering::Acquire) != gen
            || mono_ms() >= f.lease_until_ms.load(Ordering::Acquire)
        {
            return None;
        }
        Some(v)
    }

    /// Run `f` with the core's peer messages corked: what the operations it submits emit is
    /// sent in one write per peer when it returns (a pipelined run of writes; resp.rs).
    /// `f` must not wait for anything (it is synchronous: one poll of the run's futures).
    pub fn corked<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Uncork<'a>(&'a Shared);
        impl Drop for Uncork<'_> {
            fn drop(&mut self) {
                self.0.uncork();
            }
        }
        self.shared.cork();
        let _u = Uncork(&self.shared);
        f()
    }

    /// Run one client operation through the replica core at the node's current epoch.
    /// Every call is a new request id (front ends do not retry writes on their own: a retry
    /// after an ambiguous outcome is the client's decision).
    ///
    /// # Errors
    /// The request could not be queued, or the node stopped before answering.
    pub async fn submit(&self, op: ClientOp) -> Result<Reply, SubmitError> {
        let client = (u64::from(self.shared.id.0) << 40)
            | self.shared.next_client.fetch_add(1, Ordering::Relaxed);
        let req = ClientRequest {
            id: ReqId { client, seq: 1 },
            epoch: self.epoch(),
            op,
        };
        // Timed for the core-GET statistics only (a clock read per write is not free).
        let started = matches!(req.op, ClientOp::Get { .. }).then(std::time::Instant::now);
        let (tx, rx) = oneshot::channel();
        match self.shared.offer(Event::Client { req, reply: tx }) {
            Ok(()) => {}
            Err(SubmitError::Overloaded) => {
                self.shared
                    .stats
                    .events_refused
                    .fetch_add(1, Ordering::Relaxed);
                return Err(SubmitError::Overloaded);
            }
            Err(SubmitError::Stopped) => return Err(SubmitError::Stopped),
        }
        let r = rx.await.map_err(|_| SubmitError::Stopped);
        if let Some(started) = started {
            let st = &self.shared.stats;
            let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            st.core_gets.fetch_add(1, Ordering::Relaxed);
            st.core_get_us.fetch_add(us, Ordering::Relaxed);
            count_slow(&st.core_gets_slow, us);
        }
        r
    }

    /// A front retried a refused request (`why`) and slept `slept` before the retry.
    pub fn count_front_retry(&self, why: FrontRetry, slept: Duration) {
        let st = &self.shared.stats;
        st.front_retries[why as usize].fetch_add(1, Ordering::Relaxed);
        st.front_retry_sleep_us.fetch_add(
            u64::try_from(slept.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// INFO replication: the core's counters, the writes it still tracks, and per peer the
    /// writes and bytes sent and not yet acknowledged; `None` if the core is gone.
    pub fn replication_info(&self) -> Option<ReplicationInfo> {
        let core = self.shared.core.get().and_then(Weak::upgrade)?;
        let d = core.lock();
        let (pending, per_peer) = d.replica.replication_backlog();
        Some(ReplicationInfo {
            stats: d.replica.stats.clone(),
            pending,
            per_peer,
        })
    }

    /// WAIT: `(acked, possible)` for this node's write `version` of `key`
    /// ([`ringlet_replica::Replica::write_acks`]); `None` if the core is gone. Takes the
    /// core's lock for a lookup.
    pub fn write_acks(&self, key: &[u8], version: Version) -> Option<(usize, usize)> {
        let core = self.shared.core.get().and_then(Weak::upgrade)?;
        let d = core.lock();
        Some(d.replica.write_acks(key, version))
    }

    /// Stop the driver thread (the process is going away).
    pub fn stop(&self) {
        if let Some(x) = &self.shared.shm {
            x.validity.set_lease(0);
            *x.exporter.lock() = None;
        }
        self.shared.hb.stopped.store(true, Ordering::Release);
        self.shared.queued.fetch_add(1, Ordering::AcqRel);
        let _ = self.shared.tx.send(Event::Stop);
        if let Some(h) = self.driver.lock().take() {
            let _ = h.join();
        }
        if let Some(tx) = self.control_rt_stop.lock().take() {
            let _ = tx.send(());
        }
    }
}

/// See [`ClusterNode::replication_info`].
#[derive(Clone, Debug, Default)]
pub struct ReplicationInfo {
    pub stats: ringlet_replica::ReplicaStats,
    pub pending: usize,
    pub per_peer: Vec<(NodeId, u32, u64)>,
}

struct Driver {
    replica: Replica<EngineStore>,
    shared: Arc<Shared>,
    transport: Arc<Transport>,
    control: Arc<ControlClient>,
    waiting: HashMap<u64, oneshot::Sender<Reply>>,
    /// `RINGLET_TRACE` set: log epoch changes and rebuild/sync progress to stderr.
    trace: bool,
    was_pulling: bool,
    pulls_done: u64,
    /// A map held back during a drain hand-over, and until when (see `handle`).
    deferred: Option<(Arc<ClusterMap>, u64)>,
    engine: Arc<Mutex<Engine>>,
    next_usage_ms: u64,
    next_expiry_ms: u64,
    expiry_seq: u64,
    /// Reused by [`Driver::publish_fast_reads`].
    fast_scratch: Vec<(Slot, Slot)>,
    /// The store's engine generation the fronts' reader was made for.
    fast_engine_generation: u64,
    /// Keys whose counter in the shm validity region this driver raised (once each), with
    /// their engine hash: exactly the keys among those it has seen that the core's in-flight
    /// mirror still reports (see [`Driver::sync_shm_inflight`]).
    shm_held: HashMap<Vec<u8>, u64>,
    /// Reused: keys the store reserved or applied during the last step.
    shm_touched: Vec<Vec<u8>>,
    /// While > 0 ("corked"), peer messages the core emits are held in `held` instead of
    /// being written one system call each; the last [`Driver::uncork`] sends them, grouped
    /// per peer in their order ([`Transport::send_batch`]). Corked by a front around a
    /// pipelined run of writes and by the driver thread around the events it finds queued,
    /// never across an await: every cork is undone before its thread waits for anything.
    cork: u32,
    held: Vec<(NodeId, PeerMsg)>,
}

/// Peer messages into the core; a batch of them (frames that arrived in one read) is
/// stepped corked, so the acks it causes leave in one write per peer.
struct NodeInbound(Arc<Shared>);

impl crate::transport::InboundSink for NodeInbound {
    fn deliver(&self, from: NodeId, msg: PeerMsg) {
        if self.0.offer(Event::Peer { from, msg }).is_err() {
            self.0.stats.events_refused.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn batch(&self, start: bool) {
        if start {
            self.0.cork();
        } else {
            self.0.uncork();
        }
    }
}

impl Shared {
    /// Cork the core's peer messages (see `Driver::cork`) while the caller submits a run of
    /// operations; [`Shared::uncork`] must follow before the caller waits for anything.
    fn cork(&self) {
        if let Some(core) = self.core.get().and_then(Weak::upgrade) {
            core.lock().cork();
        }
    }

    /// Undo [`Shared::cork`], sending what was held.
    fn uncork(&self) {
        if let Some(core) = self.core.get().and_then(Weak::upgrade) {
            core.lock().uncork();
        }
    }

    /// Hand `ev` to the core. A small client operation or replication message is stepped
    /// right here when the core is free (or frees within [`INLINE_LOCK_WAIT`]) and nothing
    /// is queued (no thread hop: the reply or the messages it produces leave from this
    /// thread); anything else goes to the driver thread's channel.
    ///
    /// # Errors
    /// `Overloaded`: the channel is full (the event is dropped: nothing happened);
    /// `Stopped`: the driver thread is gone.
    fn offer(&self, ev: Event) -> Result<(), SubmitError> {
        if steps_inline(&ev) && self.queued.load(Ordering::Acquire) == 0 {
            if let Some(core) = self.core.get().and_then(Weak::upgrade) {
                if let Some(mut d) = core.try_lock_for(INLINE_LOCK_WAIT) {
                    // Checked again under the lock: the driver thread decrements only after
                    // it stepped an event, holding the lock, so 0 here means every event
                    // queued before this one has been stepped.
                    if self.queued.load(Ordering::Acquire) == 0
                        && !self.hb.stopped.load(Ordering::Acquire)
                    {
                        d.drain_control();
                        d.handle(ev);
                        self.stats.steps_inline.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                }
            }
        }
        if matches!(ev, Event::Client { .. } | Event::Peer { .. }) {
            self.stats.steps_queued.fetch_add(1, Ordering::Relaxed);
        }
        if let Event::Client { req, .. } = &ev {
            if matches!(req.op, ClientOp::Get { .. }) {
                self.stats.core_gets_queued.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.enqueue(ev)
    }

    /// Queue `ev` for the driver thread (counted in `queued` until it has been stepped).
    ///
    /// # Errors
    /// As [`Shared::offer`].
    fn enqueue(&self, ev: Event) -> Result<(), SubmitError> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        self.tx.try_send(ev).map_err(|e| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            match e {
                TrySendError::Full(_) => SubmitError::Overloaded,
                TrySendError::Disconnected(_) => SubmitError::Stopped,
            }
        })
    }
}

/// Whether `ev` may be stepped on the thread that received it: client operations and the
/// messages of the replication hot path (Replicate and its answers, ec updates and acks,
/// retires), with at most [`INLINE_STEP_BYTES_MAX`] bytes of value. Pulls, repair and probes
/// are background work whose steps scan the store: the driver thread runs them.
fn steps_inline(ev: &Event) -> bool {
    use ringlet_replica::PeerBody as B;
    let small = |v: Option<&Vec<u8>>| v.is_none_or(|v| v.len() <= INLINE_STEP_BYTES_MAX);
    match ev {
        Event::Client { req, .. } => match &req.op {
            ClientOp::Set { value, .. } => small(Some(value)),
            ClientOp::SetIf { value, .. } => small(value.as_ref()),
            ClientOp::Get { .. }
            | ClientOp::ReadReplica { .. }
            | ClientOp::Delete { .. }
            | ClientOp::Expire { .. } => true,
        },
        Event::Peer { msg, .. } => match &msg.body {
            B::Replicate { entry, .. } => small(entry.value.as_ref()),
            B::EcUpdate { delta, .. } => small(Some(delta)),
            B::ReplicateAck { .. } | B::ReplicateRefused { .. } | B::EcAck { .. } => true,
            B::Retire { .. } => true,
            _ => false,
        },
        Event::Control(_) | Event::Wake | Event::Stop => false,
    }
}

/// Events the driver thread steps under one cork after the one it woke for: bounds how long
/// it holds the core's lock (and the held messages) while a queue is deep.
const DRIVER_BATCH_EVENTS_MAX: usize = 64;

/// The driver thread: ticks (every `tick_ms`), control messages, and the events queued to
/// it; it takes the core's lock for each, so inline steps interleave between them. The one
/// loop without a trip bound: it runs until `Stop` or the channel closes.
fn run_driver(
    core: &Arc<Mutex<Driver>>,
    shared: &Shared,
    rx: &std::sync::mpsc::Receiver<Event>,
    tick_ms: u64,
) {
    let mut next_tick = mono_ms();
    loop {
        {
            let mut d = core.lock();
            let now = mono_ms();
            shared.hb.driver_alive_ms.store(now, Ordering::Relaxed);
            if now >= next_tick {
                d.tick(now);
                next_tick = now + tick_ms;
            }
            d.drain_control();
            d.apply_deferred();
        }
        let wait = Duration::from_millis(next_tick.saturating_sub(mono_ms()));
        match rx.recv_timeout(wait) {
            Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Ok(ev) => {
                let mut d = core.lock();
                // The events already queued behind this one are stepped under one cork (and
                // one lock hold), so their peer messages leave in one write per peer.
                d.cork();
                d.drain_control();
                d.handle(ev);
                // Under the lock: see `Shared::offer`.
                shared.queued.fetch_sub(1, Ordering::AcqRel);
                let mut stop = false;
                for _ in 0..DRIVER_BATCH_EVENTS_MAX {
                    match rx.try_recv() {
                        Ok(Event::Stop) => {
                            stop = true;
                            break;
                        }
                        Ok(ev) => {
                            d.drain_control();
                            d.handle(ev);
                            shared.queued.fetch_sub(1, Ordering::AcqRel);
                        }
                        Err(_) => break,
                    }
                }
                d.uncork();
                if stop {
                    return;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

impl Driver {
    /// Hold peer messages until the matching [`Driver::uncork`] (see `cork`).
    fn cork(&mut self) {
        self.cork = self.cork.saturating_add(1);
    }

    /// Undo one [`Driver::cork`]; the last sends what was held, one batch per peer in the
    /// order the core emitted it (each peer's messages keep their order; messages to
    /// different peers were never ordered).
    fn uncork(&mut self) {
        self.cork = self.cork.saturating_sub(1);
        if self.cork > 0 || self.held.is_empty() {
            return;
        }
        let mut held = std::mem::take(&mut self.held);
        // Stable: each peer's messages stay in emission order.
        held.sort_by_key(|(to, _)| *to);
        let mut rest = held.as_slice();
        while let Some((to, _)) = rest.first() {
            let n = rest.iter().take_while(|(t, _)| t == to).count();
            let (run, tail) = rest.split_at(n);
            self.transport.send_batch(*to, run.iter().map(|(_, m)| m));
            rest = tail;
        }
        held.clear();
        self.held = held; // keep the allocation
    }

    /// The periodic work: the core's tick, forgetting abandoned requests, usage reports and
    /// active expiry.
    fn tick(&mut self, now: u64) {
        self.step(Input::Tick);
        // Replies whose requester gave up: forget them (bounds `waiting`).
        self.waiting.retain(|_, tx| !tx.is_closed());
        if now >= self.next_usage_ms {
            self.next_usage_ms = now + USAGE_REPORT_MS;
            self.report_usage();
        }
        if now >= self.next_expiry_ms {
            self.next_expiry_ms = now + EXPIRY_SCAN_MS;
            self.expire_keys();
        }
    }

    /// Step every control message waiting in the priority lane (maps, acks, fences): they go
    /// before any client or peer event, whichever thread steps it.
    fn drain_control(&mut self) {
        let pending: Vec<FromControl> = {
            let mut q = self.shared.control.lock();
            if q.is_empty() {
                return;
            }
            q.drain(..).collect()
        };
        for m in pending {
            self.handle(Event::Control(m));
        }
    }

    /// Apply a map held back for a drain hand-over once the core settled or the hold ran out.
    fn apply_deferred(&mut self) {
        if let Some((map, until)) = self.deferred.clone() {
            if self.replica.is_settled() || mono_ms() >= until {
                self.deferred = None;
                self.step(Input::Map(map));
            }
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Client { req, reply } => {
                if self.waiting.len() >= WAITING_MAX || self.deferred.is_some() {
                    let _ = reply.send(Reply {
                        id: req.id,
                        from: self.shared.id,
                        epoch: self.replica.epoch(),
                        body: ClientReply::Busy,
                    });
                    return;
                }
                let client = req.id.client;
                self.waiting.insert(client, reply);
                self.step(Input::Client { client, req });
            }
            Event::Peer { from, msg } => self.step(Input::Peer { from, msg }),
            Event::Control(m) => match m {
                FromControl::Map(map) => {
                    let map = Arc::new(map);
                    self.set_peers(&map);
                    // Drain hand-over: the successor's first rebuild pull takes over our
                    // in-flight writes (`extra` in the core's on_pull_req) only while we still
                    // hold them. Applying the map first would abandon them (Ambiguous, and lost
                    // unless a replica had them). So a draining node with writes in flight
                    // holds the new map back briefly, taking no new client operations.
                    let draining = map.node_state(self.shared.id) == Some(NodeState::Draining)
                        && self.replica.map().is_some_and(|m| {
                            m.node_state(self.shared.id) == Some(NodeState::Active)
                        });
                    if draining && !self.replica.is_settled() {
                        let until = self
                            .deferred
                            .as_ref()
                            .map_or(mono_ms() + DRAIN_HANDOVER_MS, |d| d.1);
                        self.deferred = Some((map, until));
                        return;
                    }
                    self.deferred = None;
                    self.step(Input::Map(map));
                    self.shared
                        .stats
                        .maps_applied
                        .fetch_add(1, Ordering::Relaxed);
                }
                FromControl::HeartbeatAck {
                    incarnation,
                    sent_ms,
                } => self.step(Input::HeartbeatAck {
                    incarnation,
                    sent_ms,
                }),
                FromControl::Fenced { incarnation } => {
                    self.shared.stats.fenced.fetch_add(1, Ordering::Relaxed);
                    self.step(Input::Fenced { incarnation })
                }
                FromControl::Ok
                | FromControl::Error(_)
                | FromControl::Memgests(_)
                | FromControl::Events(_) => {}
            },
            Event::Wake | Event::Stop => {}
        }
    }

    /// Active expiry: delete the expired keys this node coordinates, through the core like
    /// any write (so replicas drop them too), each only if it was not renewed meanwhile
    /// (`ClientOp::Expire`). Bounded per pass; keys still pending come back next pass and
    /// are answered `Unchanged`.
    fn expire_keys(&mut self) {
        let Some(map) = self.replica.map().cloned() else {
            return;
        };
        let due = self
            .replica
            .store()
            .expired(crate::wall_ms(), limits::EXPIRE_WORK_PER_TICK_MAX as usize);
        for (key, version) in due {
            if map.coordinator(ringlet_types::key_slot(&key)) != Some(self.shared.id) {
                continue; // a replica's copy: its coordinator deletes it
            }
            self.expiry_seq += 1;
            let req = ClientRequest {
                id: ReqId {
                    client: EXPIRY_CLIENT,
                    seq: self.expiry_seq,
                },
                epoch: self.replica.epoch(),
                op: ClientOp::Expire { key, version },
            };
            // The reply goes to no one (`waiting` has no entry for this client).
            self.step(Input::Client {
                client: EXPIRY_CLIENT,
                req,
            });
        }
    }

    /// Send the engine's per-memgest counts (every copy this node holds) with the epoch they
    /// were counted at: the control plane trusts a zero only from a count made after the
    /// node applied the map that closed the memgest.
    ///
    /// Only the per-memgest counts are taken (`Engine::memgest_usage`): `Engine::stats`
    /// also built its per-slot map, under the engine lock every 100 ms — 16,384 entries on a
    /// node with keys in every slot, a ~0.4 MB allocation mmapped, faulted in and unmapped
    /// each time (two thirds of a rep:3 node's page faults during a bulk load, session 24).
    fn report_usage(&self) {
        let memgests: Vec<(u16, u64, u64)> = self
            .engine
            .lock()
            .memgest_usage()
            .iter()
            .map(|(id, u)| (id.0, u.keys, u.bytes))
            .collect();
        let a = self.replica.ec_accounting();
        let _ = self.control.send(ToControl::Usage {
            node: self.shared.id.0,
            incarnation: self.replica.incarnation(),
            epoch: self.replica.epoch().0,
            memgests,
            ec: ringlet_control::EcUsage {
                payload_bytes: a.payload_bytes,
                data_bytes: a.data_bytes,
                parity_bytes: a.parity_bytes,
                meta_bytes: a.meta_bytes,
            },
        });
    }

    fn set_peers(&self, map: &ClusterMap) {
        let peers: Vec<(NodeId, SocketAddr)> = map
            .nodes
            .iter()
            .filter_map(|(id, n)| peer_addr(&n.addr).map(|a| (*id, a)))
            .collect();
        self.transport.set_peers(&peers);
    }

    /// Publish what [`ClusterNode::fast_get`] checks: the ranges this node may answer reads
    /// for, the ec memgests, the lease. A new snapshot only when it changed (ranges move with
    /// maps and rebuilds, not with every write).
    fn publish_fast_reads(&mut self) {
        let f = &self.shared.fast;
        self.replica.fast_read_ranges(&mut self.fast_scratch);
        let epoch = self.replica.epoch().0;
        let mut changed = {
            let cur = f.snapshot.read();
            cur.epoch != epoch || cur.ranges != self.fast_scratch
        };
        let engine_generation = self.replica.store().engine_generation();
        let engine_changed = engine_generation != self.fast_engine_generation;
        if engine_changed {
            let fresh = self.engine.lock().reader();
            *f.reader.write() = fresh;
            self.fast_engine_generation = engine_generation;
            changed = true; // reads that began on the old reader fall back
        }
        if changed {
            let ec = self
                .replica
                .map()
                .map(|m| {
                    m.memgests
                        .iter()
                        .filter(|(_, g)| matches!(g.kind, MemgestKind::Ec { .. }))
                        .map(|(id, _)| *id)
                        .collect()
                })
                .unwrap_or_default();
            let snap = Arc::new(FastSnapshot {
                epoch,
                ranges: self.fast_scratch.clone(),
                ec,
            });
            if let Some(x) = &self.shared.shm {
                if engine_changed {
                    if let Err(e) = x.respawn(&self.engine, &snap) {
                        // One-sided readers of this node fall back to the network until
                        // the next engine (they see another engine generation).
                        tracing::warn!("ringlet node {}: shm export: {e}", self.shared.id);
                    }
                } else if let Some(g) = x.exporter.lock().as_ref().map(Exporter::generation) {
                    x.validity.publish(snap.epoch, g, &snap.ranges, &snap.ec);
                }
            }
            *f.snapshot.write() = snap;
            f.gen.fetch_add(1, Ordering::AcqRel);
        }
        let lease = self.replica.lease_until_ms();
        f.lease_until_ms.store(lease, Ordering::Release);
        if let Some(x) = &self.shared.shm {
            x.validity.set_lease(shm_lease_deadline(lease));
        }
    }

    /// Keep the validity region's in-flight counters a superset of the core's mirror for
    /// every key a reader could be wrong about. Runs after each step, before its messages
    /// leave. A write becomes in flight in the step that reserves it in the store (the core
    /// reserves before its first Replicate) or applies a handed-over one, so the keys touched
    /// by the store are the only new candidates; a held key is released once the core's
    /// mirror no longer reports it, which happens after its committed value is in the
    /// engine. A hash collision in the core's mirror only holds a key longer.
    fn sync_shm_inflight(&mut self) {
        if self.shared.shm.is_none() {
            return;
        }
        self.replica.store().take_touched(&mut self.shm_touched);
        let Some(x) = &self.shared.shm else {
            return;
        };
        let mirror = self.replica.inflight_keys().clone();
        for key in self.shm_touched.drain(..) {
            if !self.shm_held.contains_key(&key) && mirror.may_have(&key) {
                let h = ringlet_engine::hash::key_hash(&key);
                x.validity.inflight_add(h);
                self.shm_held.insert(key, h);
            }
        }
        // O(keys in flight), bounded by the core's replication window.
        self.shm_held.retain(|key, h| {
            let keep = mirror.may_have(key);
            if !keep {
                x.validity.inflight_remove(*h);
            }
            keep
        });
        self.shared
            .stats
            .shm_keys_in_flight
            .store(self.shm_held.len() as u64, Ordering::Relaxed);
    }

    fn step(&mut self, input: Input) {
        let kind = StepKind::of(&input);
        let started = std::time::Instant::now();
        self.step_timed(input);
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let st = &self.shared.stats;
        st.step_max_us.fetch_max(us, Ordering::Relaxed);
        if us >= SLOW_STEP_US[0] {
            count_slow(&st.slow_steps, us);
            st.slow_step_us.fetch_add(us, Ordering::Relaxed);
            if us >= SLOW_STEP_US[1] {
                st.slow_steps_by_kind[kind as usize].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn step_timed(&mut self, input: Input) {
        let before = self.replica.epoch();
        let outs = self.replica.step(mono_ms(), input);
        // Before any output of this step leaves the node (see `FastReads`).
        self.publish_fast_reads();
        self.sync_shm_inflight();
        let epoch = self.replica.epoch();
        if self.trace {
            let pulling = self.replica.is_pulling();
            let done = self.replica.stats.rebuilds_completed + self.replica.stats.syncs_completed;
            if epoch != before || pulling != self.was_pulling || done != self.pulls_done {
                self.pulls_done = done;
                let t = self.transport.stats();
                // A debugging trace (enabled by `trace`), printed whether or not the
                // process installed a log subscriber (in-process tests do not).
                eprintln!(
                    "[{} ms] node {}: epoch {} pulling {} stats {:?} peer sent {} recv {} dropped {} noroute {} connects {} connfail {}",
                    crate::wall_ms(),
                    self.shared.id,
                    epoch,
                    pulling,
                    self.replica.stats,
                    t.frames_sent.load(Ordering::Relaxed),
                    t.frames_received.load(Ordering::Relaxed),
                    t.frames_dropped_full.load(Ordering::Relaxed),
                    t.frames_no_route.load(Ordering::Relaxed),
                    t.connects.load(Ordering::Relaxed),
                    t.connect_failures.load(Ordering::Relaxed),
                );
            }
            self.was_pulling = pulling;
        }
        self.shared.epoch.store(epoch.0, Ordering::Release);
        self.shared
            .stats
            .ec_arenas_not_ready
            .store(self.replica.ec_arenas_not_ready(), Ordering::Relaxed);
        let rs = &self.replica.stats;
        self.shared
            .stats
            .handoffs_completed
            .store(rs.handoffs_completed, Ordering::Relaxed);
        self.shared
            .stats
            .handoff_keys_purged
            .store(rs.handoff_keys_purged, Ordering::Relaxed);
        let st = &self.shared.stats;
        st.handoff_bytes_pulled
            .store(rs.handoff_bytes_pulled, Ordering::Relaxed);
        st.handoff_keys_pulled
            .store(rs.handoff_keys_pulled, Ordering::Relaxed);
        st.last_handoff_bytes
            .store(rs.last_handoff_bytes, Ordering::Relaxed);
        st.last_handoff_ms
            .store(rs.last_handoff_ms, Ordering::Relaxed);
        st.handoff_ms.store(rs.handoff_ms, Ordering::Relaxed);
        st.move_copies_completed
            .store(rs.move_copies_completed, Ordering::Relaxed);
        st.move_copies_aborted
            .store(rs.move_copies_aborted, Ordering::Relaxed);
        st.move_delta_keys
            .store(rs.move_delta_keys, Ordering::Relaxed);
        if let Some(m) = self.replica.map() {
            // Checked under the read lock first: a new map is rare, and a write lock on every
            // step (every SET, every ack) contended with the fronts reading the map.
            let newer =
                |cur: &Option<Arc<ClusterMap>>| cur.as_ref().is_none_or(|c| c.epoch < m.epoch);
            if newer(&self.shared.map.read()) {
                let mut cur = self.shared.map.write();
                if newer(&cur) {
                    *cur = Some(m.clone());
                }
            }
        }
        for o in outs {
            match o {
                Output::Send { to, msg } if self.cork > 0 => self.held.push((to, msg)),
                Output::Send { to, msg } => {
                    let _ = self.transport.send(to, &msg);
                }
                Output::Reply { client, reply } => {
                    if let Some(tx) = self.waiting.remove(&client) {
                        let _ = tx.send(reply);
                    }
                }
                Output::Control(c) => {
                    let m = match c {
                        ControlInput::Join {
                            node,
                            addr,
                            incarnation,
                        } => {
                            // Not joined (or rejoining after a fence): no lease to renew.
                            self.shared.hb.incarnation.store(0, Ordering::Relaxed);
                            ToControl::Join {
                                node: node.0,
                                addr,
                                incarnation,
                            }
                        }
                        ControlInput::Heartbeat {
                            node,
                            incarnation,
                            epoch,
                            sent_ms,
                        } => {
                            let hb = &self.shared.hb;
                            hb.incarnation.store(incarnation, Ordering::Relaxed);
                            hb.last_sent_ms.fetch_max(sent_ms, Ordering::Relaxed);
                            ToControl::Heartbeat {
                                node: node.0,
                                incarnation,
                                epoch: epoch.0,
                                sent_ms,
                            }
                        }
                        ControlInput::Quiesced {
                            node,
                            incarnation,
                            epoch,
                        } => ToControl::Quiesced {
                            node: node.0,
                            incarnation,
                            epoch: epoch.0,
                        },
                        ControlInput::MarkWritten { memgest } => {
                            ToControl::MarkWritten { memgest: memgest.0 }
                        }
                        ControlInput::HandoffDone {
                            node,
                            incarnation,
                            first,
                            last,
                        } => ToControl::HandoffDone {
                            node: node.0,
                            incarnation,
                            first,
                            last,
                        },
                        ControlInput::MoveCopied {
                            node,
                            incarnation,
                            first,
                            last,
                            epoch,
                        } => ToControl::MoveCopied {
                            node: node.0,
                            incarnation,
                            first,
                            last,
                            epoch,
                        },
                        // The core only emits Join, Heartbeat, Quiesced, MarkWritten,
                        // HandoffDone and MoveCopied.
                        _ => continue,
                    };
                    let _ = self.control.send(m);
                }
                Output::PossibleLoss {
                    first,
                    last,
                    memgest,
                    keys_lost,
                } => {
                    self.shared
                        .stats
                        .possible_loss
                        .fetch_add(1, Ordering::Relaxed);
                    let name = self
                        .replica
                        .map()
                        .and_then(|m| m.memgests.get(&memgest))
                        .map_or_else(|| format!("#{}", memgest.0), |m| m.name.clone());
                    let what = match keys_lost {
                        Some(n) => format!("{n} keys lost (their values could not be decoded)"),
                        None => "acknowledged writes may be missing (no surviving copy \
                                 records how many)"
                            .to_string(),
                    };
                    tracing::warn!(
                        "ringlet node {}: memgest {name}, slots {first}-{last}: more copies failed than it tolerates: {what}",
                        self.shared.id
                    );
                }
            }
        }
    }
}

/// The core's lease deadline (driver clock, [`mono_ms`]) on this host's CLOCK_MONOTONIC,
/// for readers in other processes. `mono_ms` counts from an `Instant`, which is
/// CLOCK_MONOTONIC on Linux; each of the two readings truncates to whole ms, so the offset
/// is off by at most 1 ms either way: 2 ms are taken off (a reader may fall back early, never
/// read late). 0 stays 0 (no lease).
fn shm_lease_deadline(lease_until_ms: u64) -> u64 {
    if lease_until_ms == 0 {
        return 0;
    }
    let offset = ringlet_shm::validity::monotonic_ms().saturating_sub(mono_ms());
    (lease_until_ms + offset).saturating_sub(2)
}

/// The heartbeat thread (see [`HeartbeatState`]): repeats the core's heartbeat while the
/// driver is busy, and only while its stall stays under [`DRIVER_STALL_MAX_MS`].
fn heartbeat_loop(shared: &Shared, control: &ControlClient) {
    let hb = &shared.hb;
    while !hb.stopped.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(HEARTBEAT_POLL_MS));
        let incarnation = hb.incarnation.load(Ordering::Relaxed);
        let now = mono_ms();
        let interval = hb.interval_ms.load(Ordering::Relaxed);
        let last = hb.last_sent_ms.load(Ordering::Relaxed);
        let stalled_for = now.saturating_sub(hb.driver_alive_ms.load(Ordering::Relaxed));
        if incarnation == 0
            || now.saturating_sub(last) < interval
            || stalled_for > DRIVER_STALL_MAX_MS
        {
            continue;
        }
        hb.last_sent_ms.fetch_max(now, Ordering::Relaxed);
        // Only a busy driver gets here (an idle one ticks every few ms and sends its own).
        if stalled_for >= interval {
            shared
                .stats
                .heartbeats_for_busy_driver
                .fetch_add(1, Ordering::Relaxed);
        }
        let _ = control.send(ToControl::Heartbeat {
            node: shared.id.0,
            incarnation,
            epoch: shared.epoch.load(Ordering::Acquire),
            sent_ms: now,
        });
    }
}

/// The client address of a map entry `ip:port@cport`.
pub fn client_addr(addr: &str) -> Option<SocketAddr> {
    addr.split('@').next()?.parse().ok()
}

/// The peer address of a map entry `ip:port@cport`.
pub fn peer_addr(addr: &str) -> Option<SocketAddr> {
    let (c, p) = addr.split_once('@')?;
    let c: SocketAddr = c.parse().ok()?;
    let p: u16 = p.parse().ok()?;
    Some(SocketAddr::new(c.ip(), p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(len: usize) -> Event {
        Event::Client {
            req: ClientRequest {
                id: ReqId { client: 1, seq: 1 },
                epoch: Epoch(1),
                op: ClientOp::Set {
                    key: b"k".to_vec(),
                    value: vec![0; len],
                    memgest: None,
                    expiry_ms: None,
                    kind: ValueKind::String,
                },
            },
            reply: oneshot::channel().0,
        }
    }

    fn peer(body: ringlet_replica::PeerBody) -> Event {
        Event::Peer {
            from: NodeId(2),
            msg: PeerMsg {
                epoch: Epoch(1),
                incarnation: 1,
                body,
            },
        }
    }

    /// The replication hot path is stepped where it arrives; large values, background work
    /// (pulls, repair) and control stay on the driver thread.
    #[test]
    fn what_is_stepped_inline() {
        use ringlet_replica::PeerBody as B;
        assert!(steps_inline(&set(100)));
        assert!(steps_inline(&set(INLINE_STEP_BYTES_MAX)));
        assert!(!steps_inline(&set(INLINE_STEP_BYTES_MAX + 1)));
        let entry = |len: usize| ringlet_replica::Entry {
            version: Version(1),
            memgest: MemgestId(0),
            value: Some(vec![0; len]),
            expiry_ms: None,
            kind: ValueKind::String,
        };
        assert!(steps_inline(&peer(B::Replicate {
            key: b"k".to_vec(),
            entry: entry(100),
        })));
        assert!(!steps_inline(&peer(B::Replicate {
            key: b"k".to_vec(),
            entry: entry(INLINE_STEP_BYTES_MAX + 1),
        })));
        assert!(steps_inline(&peer(B::ReplicateAck {
            key: b"k".to_vec(),
            version: Version(1),
            ok: true,
        })));
        assert!(!steps_inline(&peer(B::PullResp {
            id: 1,
            ready: true,
            resets: Vec::new(),
            entries: Vec::new(),
            next: None,
        })));
        assert!(!steps_inline(&peer(B::ProbeResp {
            mismatched: Vec::new()
        })));
        assert!(!steps_inline(&Event::Wake));
    }

    #[test]
    fn addr_forms() {
        assert_eq!(
            client_addr("127.0.0.1:7000@17000"),
            Some("127.0.0.1:7000".parse().unwrap_or_else(|_| unreachable!()))
        );
        assert_eq!(
            peer_addr("127.0.0.1:7000@17000"),
            Some("127.0.0.1:17000".parse().unwrap_or_else(|_| unreachable!()))
        );
        assert_eq!(peer_addr("127.0.0.1:7000"), None);
    }
}
