//! `ringlet-control-service`: the control plane as a service, with both its backends — the
//! embedded one here and etcd in [`etcd`] (feature `etcd`).
//!
//! The control plane as a service: [`ControlBackend`] (the seam for etcd later),
//! [`EmbeddedBackend`] (the sans-I/O `ControlPlane` with a real clock), [`ControlService`]
//! (TCP, JSON frames) and [`ControlClient`] (a node's link to it).
//!
//! ```text
//!  frame: +-----------+------------------------------+
//!         | len u32 BE| JSON (ToControl / FromControl)|   len <= CONTROL_FRAME_BYTES_MAX
//!         +-----------+------------------------------+
//!
//!  node ──Join/Heartbeat──▶ service ──step──▶ backend (ControlPlane)
//!       ◀──Map (every epoch, pushed) / HeartbeatAck / Fenced──
//!  ringlet node drain ID ──Drain──▶ service ──▶ Ok | Error
//!  node ──Usage (per-memgest keys/bytes, every 100 ms)──▶ service (drop checks, INFO)
//!  MEMGEST CREATE/DROP/DEFAULT ──▶ service ──▶ Ok | Error;  MEMGEST LIST/INFO ──▶ Memgests
//!  status pages ──Events { after }──▶ service ──▶ Events (the plane's log, wall-clock stamped)
//! ```
//!
//! Why JSON here and binary on peer links: control traffic is a few frames per node per
//! heartbeat interval, the map already has a validated JSON form (the one etcd will store),
//! and a human can read it with `nc`. Why push instead of long-poll: a node holds one
//! connection anyway for heartbeats; pushing every published map on it is the cheapest watch.
//! A heartbeat carrying an older epoch also gets the map back, so a lost push heals within
//! one heartbeat.

#[cfg(feature = "etcd")]
pub mod etcd;

use parking_lot::Mutex;
use ringlet_control::{
    memgest_reports, Action, ClusterMap, ControlConfig, ControlError, ControlPlane, EcUsage, Input,
    MemgestReport, MemgestUsage, ModelRates, StampedEvent, UsageReport,
};
use ringlet_link::mono_ms;
use ringlet_types::{Epoch, MemgestId, MemgestKind, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// Largest control frame: a map of NODES_MAX nodes and 16384 ranges is ~2 MiB of JSON.
pub const CONTROL_FRAME_BYTES_MAX: u32 = 16 * 1024 * 1024;
/// Frames queued to one control connection before the connection is dropped (a node that
/// does not read its maps is broken; it reconnects and gets the current map).
pub const CONTROL_QUEUE_FRAMES_MAX: usize = 1024;
/// Control connections at once.
pub const CONTROL_CONNECTIONS_MAX: usize = ringlet_control::map::NODES_MAX * 2;
/// How often the service ticks the backend (lease expiry is detected within this).
pub const CONTROL_TICK_MS: u64 = 50;
/// Longest a `DropMemgest` request waits for every node's usage report after closing the
/// memgest; past it the drop is cancelled (the memgest reopens) and refused. Reports come
/// every `ringlet_cluster::node::USAGE_REPORT_MS`, the settle time is `ringlet_control::plane::
/// DROP_SETTLE_MS`.
pub const DROP_WAIT_MS: u64 = 3_000;

/// Requests to the control plane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ToControl {
    Join {
        node: u32,
        addr: String,
        incarnation: u64,
    },
    Heartbeat {
        node: u32,
        incarnation: u64,
        epoch: u64,
        sent_ms: u64,
    },
    Drain {
        node: u32,
    },
    /// A leaving node has nothing uncommitted at `epoch` (drain phase 2 may start).
    Quiesced {
        node: u32,
        incarnation: u64,
        epoch: u64,
    },
    /// A coordinator's first write of a replicated memgest waits for this mark in the map
    /// (`ringlet_control::Input::MarkWritten`).
    MarkWritten {
        memgest: u16,
    },
    /// Reply with the current map (and keep pushing maps on this connection).
    Watch,
    /// Resharding: move slots `first..=last` (inside one slot range) to the placement pair
    /// (`pg`, `data_index`) (`ringlet node move-slots`, `ringlet node rebalance`).
    MoveSlots {
        first: u16,
        last: u16,
        pg: u32,
        data_index: u8,
        /// Copy rate limit in KiB/s (`--rate`), 0 or absent = unlimited.
        #[serde(default)]
        rate_kib_s: u32,
    },
    /// Turn spare `node` into a data node (`ringlet node add`).
    AddNode {
        node: u32,
    },
    /// Take data node `node` out (two calls: prepare, then finish once its ranges moved;
    /// `ringlet node remove`).
    RemoveNode {
        node: u32,
    },
    /// A new coordinator rebuilt a handed-off span (the map drops its handoff record).
    HandoffDone {
        node: u32,
        incarnation: u64,
        first: u16,
        last: u16,
    },
    /// A move's target copied its span before the switch (resharding phase 0; the move
    /// that started at `epoch` turns into phase 1).
    MoveCopied {
        node: u32,
        incarnation: u64,
        first: u16,
        last: u16,
        epoch: u64,
    },
    CreateMemgest {
        name: String,
        kind: String,
    },
    SetDefault {
        name: String,
    },
    /// `ACL SETUSER` from a node: its rules with passwords already hashed
    /// (`ringlet_command::acl::hash_rules`; plaintext never leaves the node).
    SetUser {
        name: String,
        rules: Vec<String>,
    },
    /// `ACL DELUSER`.
    DelUsers {
        names: Vec<String>,
    },
    /// Drop a memgest; refused while any node holds keys of it (answered once decided, up
    /// to [`DROP_WAIT_MS`] later).
    DropMemgest {
        name: String,
    },
    /// A node's per-memgest counts: `(memgest id, keys, bytes)` of every copy it holds, and
    /// its erasure-coded storage (all ec memgests together).
    Usage {
        node: u32,
        incarnation: u64,
        epoch: u64,
        memgests: Vec<(u16, u64, u64)>,
        #[serde(default)]
        ec: EcUsage,
    },
    /// `MEMGEST LIST/INFO`: reports of every memgest, reliability for the given rates
    /// (defaults: [`ModelRates::default`]).
    Memgests {
        mttf_hours: Option<f64>,
        rebuild_hours: Option<f64>,
    },
    /// The control plane's event log (`ringlet_control::events`): the events after sequence
    /// number `after`, oldest first, at most `ringlet_control::events::EVENTS_ANSWER_MAX`
    /// (the newest of them). The status pages ask for it.
    Events {
        after: u64,
    },
}

/// Messages from the control plane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
// Maps are most of what the control plane sends, and each is decoded into its own value
// anyway: boxing the variant would add an allocation per map for nothing.
#[allow(clippy::large_enum_variant)]
pub enum FromControl {
    Map(ClusterMap),
    HeartbeatAck {
        incarnation: u64,
        sent_ms: u64,
    },
    Fenced {
        incarnation: u64,
    },
    Ok,
    Error(String),
    Memgests(Vec<MemgestReport>),
    /// The answer to [`ToControl::Events`], stamped with the answering process's wall clock.
    Events(Vec<StampedEvent>),
}

/// A control frame that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ControlWireError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes exceeds {CONTROL_FRAME_BYTES_MAX}")]
    TooLarge(u32),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("connection closed")]
    Closed,
    #[error("cluster secret: {0}")]
    Auth(String),
}

/// Encode one frame.
///
/// # Errors
/// Only if serde fails (it does not for these types).
pub fn encode<T: Serialize>(m: &T) -> Result<Vec<u8>, serde_json::Error> {
    let body = serde_json::to_vec(m)?;
    let mut out = Vec::with_capacity(body.len() + 4);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Read one frame; the length is checked before the body is buffered.
///
/// # Errors
/// I/O, oversize, bad JSON (including a map that fails validation), or EOF.
pub async fn read_frame<T: for<'de> Deserialize<'de>>(
    r: &mut (impl AsyncReadExt + Unpin),
) -> Result<T, ControlWireError> {
    let mut h = [0u8; 4];
    match r.read_exact(&mut h).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(ControlWireError::Closed)
        }
        Err(e) => return Err(e.into()),
    }
    let n = u32::from_be_bytes(h);
    if n > CONTROL_FRAME_BYTES_MAX {
        return Err(ControlWireError::TooLarge(n));
    }
    // Grows with the bytes that arrive, not with the declared length (issue 10, case 2).
    let mut body = Vec::with_capacity((n as usize).min(64 * 1024));
    let got = r.take(u64::from(n)).read_to_end(&mut body).await?;
    if got != n as usize {
        return Err(ControlWireError::Closed);
    }
    Ok(serde_json::from_slice(&body)?)
}

/// Decode a byte stream of control frames the way a connection does (fuzz target
/// `control_frames` and the proptest below): frames until the first error or the end.
/// Returns how many decoded. Never panics; allocates at most what arrived.
pub fn decode_control_stream(data: &[u8]) -> usize {
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(_) => return 0,
    };
    rt.block_on(async {
        let mut r = data;
        let mut n = 0;
        // Every frame consumes at least its 4-byte header: bounded by data.len() / 4.
        while read_frame::<ToControl>(&mut r).await.is_ok() {
            n += 1;
        }
        n
    })
}

// ------------------------------------------------------------------ backend

/// Where the cluster map lives and changes. The embedded backend runs the sans-I/O
/// [`ControlPlane`] in this process; an etcd backend would keep the map under a key prefix,
/// run the same state machine on the elected leader, and turn `Publish` into a transaction
/// (the map's JSON form is already the stored form).
pub trait ControlBackend: Send + Sync + 'static {
    /// Apply one input at the backend's own clock; return what must be carried out.
    fn step(&self, input: Input) -> Vec<Action>;
    /// The current map.
    fn map(&self) -> Arc<ClusterMap>;
    /// The nodes' latest usage reports (`MEMGEST INFO`). A backend that does not keep them
    /// reports none.
    fn usage(&self) -> BTreeMap<NodeId, UsageReport> {
        BTreeMap::new()
    }
    /// Where commands (drain, memgest commands and reports) go when this backend does not
    /// decide them itself: the etcd backend (crates/etcd) runs one per process and forwards
    /// them to the elected leader's command port. `None`: decided here.
    fn command_forward(&self) -> Option<String> {
        None
    }
    /// The event log after sequence number `after` (see [`ToControl::Events`]). A backend
    /// that keeps none (it forwards commands elsewhere) answers none.
    fn events(&self, _after: u64) -> Vec<StampedEvent> {
        Vec::new()
    }
}

/// Longest a forwarded command waits for its answer (a drop waits for usage reports).
pub const COMMAND_FORWARD_MS: u64 = DROP_WAIT_MS + 1_000;

/// Relay one command to `addr` and return its answer (see
/// [`ControlBackend::command_forward`]).
async fn forward_command(addr: &str, req: &ToControl) -> FromControl {
    match tokio::time::timeout(
        Duration::from_millis(COMMAND_FORWARD_MS),
        request(addr, req),
    )
    .await
    {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => FromControl::Error(format!("control plane leader at {addr}: {e}")),
        Err(_) => FromControl::Error(format!("control plane leader at {addr} did not answer")),
    }
}

/// [`ControlPlane`] behind a mutex, clocked by [`mono_ms`].
pub struct EmbeddedBackend {
    cp: Mutex<ControlPlane>,
}

impl EmbeddedBackend {
    /// # Errors
    /// An invalid config.
    pub fn new(cfg: ControlConfig) -> Result<EmbeddedBackend, ringlet_control::ControlError> {
        Ok(EmbeddedBackend {
            cp: Mutex::new(ControlPlane::new(cfg)?),
        })
    }
}

impl ControlBackend for EmbeddedBackend {
    fn step(&self, input: Input) -> Vec<Action> {
        let mut cp = self.cp.lock();
        let out = cp.step(mono_ms(), input);
        cp.check_invariants();
        out
    }
    fn map(&self) -> Arc<ClusterMap> {
        self.cp.lock().map().clone()
    }
    fn usage(&self) -> BTreeMap<NodeId, UsageReport> {
        self.cp.lock().usage().clone()
    }
    fn events(&self, after: u64) -> Vec<StampedEvent> {
        let (now, unix) = (mono_ms(), ringlet_link::wall_ms());
        self.cp
            .lock()
            .events()
            .after(after, ringlet_control::events::EVENTS_ANSWER_MAX)
            .iter()
            .map(|e| e.stamped(now, unix))
            .collect()
    }
}

// ------------------------------------------------------------------ service

/// What the service does by itself once enough nodes joined.
#[derive(Clone, Debug)]
pub struct BootstrapPlan {
    /// Bootstrap once this many nodes have joined.
    pub expect_nodes: usize,
    /// Active nodes (the rest stay spares). The lowest node ids become active.
    pub active: usize,
    /// Memgest created and made the default before bootstrap (e.g. `rep:3`).
    pub default_memgest: Option<MemgestKind>,
}

struct Conn {
    tx: mpsc::Sender<Vec<u8>>,
}

struct ServiceState {
    conns: HashMap<u64, Conn>,
    /// node -> connection id that last spoke for it.
    nodes: HashMap<NodeId, u64>,
    /// Connections that asked to watch the map (clients, CLI).
    watchers: std::collections::HashSet<u64>,
}

/// The control plane's TCP service.
pub struct ControlService {
    backend: Arc<dyn ControlBackend>,
    state: Mutex<ServiceState>,
    next_conn: AtomicU64,
    plan: Mutex<Option<BootstrapPlan>>,
}

impl ControlService {
    /// The event log after sequence number `after` (the control status port's page).
    pub fn events(&self, after: u64) -> Vec<StampedEvent> {
        self.backend.events(after)
    }

    /// `MEMGEST LIST/INFO` figures with the default rates (the control status port).
    pub fn memgest_reports(&self) -> Vec<MemgestReport> {
        memgest_reports(
            &self.backend.map(),
            &self.backend.usage(),
            ModelRates::default(),
        )
    }

    /// Bind and serve in the current tokio runtime. Returns the service and its address.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start(
        addr: SocketAddr,
        backend: Arc<dyn ControlBackend>,
        plan: Option<BootstrapPlan>,
    ) -> std::io::Result<(Arc<ControlService>, SocketAddr)> {
        let listener = ringlet_link::listen(addr)?;
        let local = listener.local_addr()?;
        let svc = Arc::new(ControlService {
            backend,
            state: Mutex::new(ServiceState {
                conns: HashMap::new(),
                nodes: HashMap::new(),
                watchers: Default::default(),
            }),
            next_conn: AtomicU64::new(1),
            plan: Mutex::new(plan),
        });
        let s = svc.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if s.state.lock().conns.len() >= CONTROL_CONNECTIONS_MAX {
                    continue;
                }
                let s2 = s.clone();
                tokio::spawn(async move {
                    // With link TLS, only holders of a certificate from the cluster's CA
                    // get past the handshake.
                    let mut stream = match ringlet_link::tls::link_accept(stream).await {
                        Ok(s) => s,
                        Err(e) => {
                            CONTROL_AUTH_FAILURES.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!("ringlet control: TLS handshake refused: {e}");
                            return;
                        }
                    };
                    // Members only: without the proof, nothing (no map, no command) is served.
                    if let Some(secret) = ringlet_link::auth::process_secret() {
                        if let Err(e) = ringlet_link::auth::accept(
                            &mut stream,
                            secret,
                            ringlet_link::auth::CONTROL_ROLE,
                        )
                        .await
                        {
                            CONTROL_AUTH_FAILURES.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!("ringlet control: connection refused: {e}");
                            return;
                        }
                    }
                    s2.serve(stream).await
                });
            }
        });
        let s = svc.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(Duration::from_millis(CONTROL_TICK_MS));
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                t.tick().await;
                s.maybe_bootstrap();
                let a = s.backend.step(Input::Tick);
                s.carry_out(a, None);
            }
        });
        Ok((svc, local))
    }

    pub fn map(&self) -> Arc<ClusterMap> {
        self.backend.map()
    }

    fn maybe_bootstrap(&self) {
        let mut plan = self.plan.lock();
        let Some(p) = plan.as_ref() else { return };
        let map = self.backend.map();
        if map.placement.is_some() {
            *plan = None;
            return;
        }
        if map.nodes.len() < p.expect_nodes {
            return;
        }
        if let Some(kind) = p.default_memgest {
            if kind != MemgestKind::None {
                let name = kind.to_string();
                if map.memgest_by_name(&name).is_none() {
                    let a = self.backend.step(Input::CreateMemgest {
                        name: name.clone(),
                        kind,
                        evictable: None,
                    });
                    self.carry_out(a, None);
                }
                let a = self.backend.step(Input::SetDefault { name });
                self.carry_out(a, None);
            }
        }
        let a = self.backend.step(Input::Bootstrap { active: p.active });
        self.carry_out(a, None);
        *plan = None;
    }

    fn send_to_conn(&self, conn: u64, frame: Vec<u8>) {
        let mut st = self.state.lock();
        let full = match st.conns.get(&conn) {
            Some(c) => c.tx.try_send(frame).is_err(),
            None => false,
        };
        if full {
            // A reader this far behind is dropped; it reconnects and is sent the map.
            st.conns.remove(&conn);
        }
    }

    fn send_to_node(&self, node: NodeId, m: &FromControl) {
        let conn = self.state.lock().nodes.get(&node).copied();
        if let (Some(c), Ok(f)) = (conn, encode(m)) {
            self.send_to_conn(c, f);
        }
    }

    /// Carry out the backend's actions. `reply_to`: the connection that sent a command, which
    /// gets `Ok` or the rejection.
    fn carry_out(&self, actions: Vec<Action>, reply_to: Option<u64>) -> Option<FromControl> {
        let mut verdict = None;
        for a in actions {
            match a {
                Action::Publish(map) => {
                    if let Ok(f) = encode(&FromControl::Map((*map).clone())) {
                        // Nodes and watchers get every map; one-shot command
                        // connections only their verdict.
                        let conns: Vec<u64> = {
                            let st = self.state.lock();
                            let mut c: Vec<u64> = st.nodes.values().copied().collect();
                            c.extend(st.watchers.iter().copied());
                            c.sort_unstable();
                            c.dedup();
                            c
                        };
                        for c in conns {
                            self.send_to_conn(c, f.clone());
                        }
                    }
                    verdict.get_or_insert(FromControl::Ok);
                }
                Action::SendMap { to, map } => {
                    self.send_to_node(to, &FromControl::Map((*map).clone()))
                }
                Action::HeartbeatAck {
                    to,
                    incarnation,
                    sent_ms,
                    ..
                } => self.send_to_node(
                    to,
                    &FromControl::HeartbeatAck {
                        incarnation,
                        sent_ms,
                    },
                ),
                Action::Fenced { to, incarnation } => {
                    self.send_to_node(to, &FromControl::Fenced { incarnation })
                }
                Action::Rejected(e) => verdict = Some(FromControl::Error(e.to_string())),
            }
        }
        // A command always gets a verdict: one that changed nothing and was not rejected is
        // `Ok` (without this, a no-op command left its requester waiting forever).
        reply_to.map(|_| verdict.unwrap_or(FromControl::Ok))
    }

    async fn serve(self: Arc<Self>, stream: ringlet_link::tls::LinkStream) {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(CONTROL_QUEUE_FRAMES_MAX);
        self.state.lock().conns.insert(id, Conn { tx });
        let (mut r, mut w) = tokio::io::split(stream);
        let writer = tokio::spawn(async move {
            while let Some(f) = rx.recv().await {
                // flush: TLS holds records until asked.
                if w.write_all(&f).await.is_err() || w.flush().await.is_err() {
                    break;
                }
            }
        });
        while let Ok(req) = read_frame::<ToControl>(&mut r).await {
            let command = matches!(
                req,
                ToControl::Drain { .. }
                    | ToControl::MoveSlots { .. }
                    | ToControl::AddNode { .. }
                    | ToControl::RemoveNode { .. }
                    | ToControl::CreateMemgest { .. }
                    | ToControl::SetDefault { .. }
                    | ToControl::SetUser { .. }
                    | ToControl::DelUsers { .. }
                    | ToControl::DropMemgest { .. }
                    | ToControl::Memgests { .. }
                    | ToControl::Events { .. }
            );
            if let Some(addr) = self.backend.command_forward().filter(|_| command) {
                let s = self.clone();
                tokio::spawn(async move {
                    let rep = forward_command(&addr, &req).await;
                    if let Ok(f) = encode(&rep) {
                        s.send_to_conn(id, f);
                    }
                });
                continue;
            }
            if let ToControl::DropMemgest { name } = req {
                // Decided over several report intervals: answer from a task so this
                // connection's other frames keep flowing.
                let s = self.clone();
                tokio::spawn(async move {
                    let rep = s.drop_memgest(name).await;
                    if let Ok(f) = encode(&rep) {
                        s.send_to_conn(id, f);
                    }
                });
                continue;
            }
            let reply = self.handle(id, req);
            if let Some(rep) = reply {
                if let Ok(f) = encode(&rep) {
                    self.send_to_conn(id, f);
                }
            }
        }
        {
            let mut st = self.state.lock();
            st.conns.remove(&id);
            st.nodes.retain(|_, c| *c != id);
            st.watchers.remove(&id);
        }
        writer.abort();
    }

    fn handle(&self, conn: u64, req: ToControl) -> Option<FromControl> {
        match req {
            ToControl::Join {
                node,
                addr,
                incarnation,
            } => {
                self.state.lock().nodes.insert(NodeId(node), conn);
                let a = self.backend.step(Input::Join {
                    node: NodeId(node),
                    addr,
                    incarnation,
                });
                self.carry_out(a, None)
            }
            ToControl::Heartbeat {
                node,
                incarnation,
                epoch,
                sent_ms,
            } => {
                self.state.lock().nodes.insert(NodeId(node), conn);
                let a = self.backend.step(Input::Heartbeat {
                    node: NodeId(node),
                    incarnation,
                    epoch: Epoch(epoch),
                    sent_ms,
                });
                self.carry_out(a, None)
            }
            ToControl::Drain { node } => {
                let a = self.backend.step(Input::Drain { node: NodeId(node) });
                self.carry_out(a, Some(conn))
            }
            ToControl::MoveSlots {
                first,
                last,
                pg,
                data_index,
                rate_kib_s,
            } => {
                let a = self.backend.step(Input::MoveSlots {
                    first,
                    last,
                    pg,
                    data_index,
                    rate_kib_s,
                });
                self.carry_out(a, Some(conn))
            }
            ToControl::AddNode { node } => {
                let a = self.backend.step(Input::AddNode { node: NodeId(node) });
                self.carry_out(a, Some(conn))
            }
            ToControl::RemoveNode { node } => {
                let a = self.backend.step(Input::RemoveNode { node: NodeId(node) });
                self.carry_out(a, Some(conn))
            }
            ToControl::HandoffDone {
                node,
                incarnation,
                first,
                last,
            } => {
                let a = self.backend.step(Input::HandoffDone {
                    node: NodeId(node),
                    incarnation,
                    first,
                    last,
                });
                self.carry_out(a, None)
            }
            ToControl::MoveCopied {
                node,
                incarnation,
                first,
                last,
                epoch,
            } => {
                let a = self.backend.step(Input::MoveCopied {
                    node: NodeId(node),
                    incarnation,
                    first,
                    last,
                    epoch,
                });
                self.carry_out(a, None)
            }
            ToControl::Quiesced {
                node,
                incarnation,
                epoch,
            } => {
                let a = self.backend.step(Input::Quiesced {
                    node: NodeId(node),
                    incarnation,
                    epoch: Epoch(epoch),
                });
                self.carry_out(a, None)
            }
            ToControl::MarkWritten { memgest } => {
                let a = self.backend.step(Input::MarkWritten {
                    memgest: ringlet_types::MemgestId(memgest),
                });
                self.carry_out(a, None)
            }
            ToControl::Watch => {
                self.state.lock().watchers.insert(conn);
                Some(FromControl::Map((*self.backend.map()).clone()))
            }
            ToControl::CreateMemgest { name, kind } => match MemgestKind::parse(&kind) {
                Ok(kind) => {
                    let a = self.backend.step(Input::CreateMemgest {
                        name,
                        kind,
                        evictable: None,
                    });
                    self.carry_out(a, Some(conn))
                }
                Err(e) => Some(FromControl::Error(e.to_string())),
            },
            ToControl::SetDefault { name } => {
                let a = self.backend.step(Input::SetDefault { name });
                self.carry_out(a, Some(conn))
            }
            ToControl::SetUser { name, rules } => {
                let a = self.backend.step(Input::SetUser { name, rules });
                self.carry_out(a, Some(conn))
            }
            ToControl::DelUsers { names } => {
                let a = self.backend.step(Input::DelUsers { names });
                self.carry_out(a, Some(conn))
            }
            ToControl::DropMemgest { .. } => {
                Some(FromControl::Error("internal: drop not routed".into()))
            }
            ToControl::Usage {
                node,
                incarnation,
                epoch,
                memgests,
                ec,
            } => {
                let memgests = memgests
                    .into_iter()
                    .map(|(id, keys, bytes)| (MemgestId(id), MemgestUsage { keys, bytes }))
                    .collect();
                let a = self.backend.step(Input::Usage {
                    node: NodeId(node),
                    incarnation,
                    epoch: Epoch(epoch),
                    memgests,
                    ec,
                });
                self.carry_out(a, None)
            }
            ToControl::Memgests {
                mttf_hours,
                rebuild_hours,
            } => {
                let d = ModelRates::default();
                let rates = ModelRates {
                    mttf_hours: mttf_hours.unwrap_or(d.mttf_hours),
                    rebuild_hours: rebuild_hours.unwrap_or(d.rebuild_hours),
                };
                Some(FromControl::Memgests(memgest_reports(
                    &self.backend.map(),
                    &self.backend.usage(),
                    rates,
                )))
            }
            ToControl::Events { after } => Some(FromControl::Events(self.backend.events(after))),
        }
    }

    /// Close `name`, wait for every node's usage report at the closing epoch, then drop it or
    /// refuse (see `ringlet_control::Input::DropMemgest`).
    async fn drop_memgest(&self, name: String) -> FromControl {
        let deadline = std::time::Instant::now() + Duration::from_millis(DROP_WAIT_MS);
        loop {
            let a = self.backend.step(Input::DropMemgest { name: name.clone() });
            let pending = a
                .iter()
                .any(|x| matches!(x, Action::Rejected(ControlError::DropPending(_))));
            let verdict = self.carry_out(a, Some(0)).unwrap_or(FromControl::Ok);
            if !pending {
                let closed_only = verdict == FromControl::Ok
                    && self
                        .backend
                        .map()
                        .memgest_by_name(&name)
                        .and_then(|id| self.backend.map().memgests.get(&id).map(|m| m.closing))
                        .unwrap_or(false);
                if !closed_only {
                    return verdict;
                }
            }
            if std::time::Instant::now() >= deadline {
                let a = self.backend.step(Input::CancelDrop { name: name.clone() });
                self.carry_out(a, None);
                return FromControl::Error(format!(
                    "memgest {name}: not every node reported its keys within {DROP_WAIT_MS} ms; drop cancelled"
                ));
            }
            tokio::time::sleep(Duration::from_millis(CONTROL_TICK_MS)).await;
        }
    }
}

/// Control connections refused for a missing or wrong cluster-secret proof (metric).
pub static CONTROL_AUTH_FAILURES: AtomicU64 = AtomicU64::new(0);

/// The connector's half of the membership proof on a control connection (no-op without a
/// secret).
async fn prove(s: &mut ringlet_link::tls::LinkStream) -> Result<(), ControlWireError> {
    if let Some(secret) = ringlet_link::auth::process_secret() {
        ringlet_link::auth::connect(s, secret, ringlet_link::auth::CONTROL_ROLE, b"")
            .await
            .map_err(|e| ControlWireError::Auth(e.to_string()))?;
    }
    Ok(())
}

// ------------------------------------------------------------------ client

/// First reconnect delay of a node's control link; doubles up to [`CONTROL_BACKOFF_MAX`].
pub const CONTROL_BACKOFF_MIN: Duration = Duration::from_millis(20);
/// Longest delay between control reconnects.
pub const CONTROL_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// A node's link to the control service: requests go out through a bounded queue (a full
/// queue drops: heartbeats repeat), everything received goes to `inbound`. Reconnects with
/// bounded backoff; the node's own heartbeat timer re-establishes its lease and gets the map.
pub struct ControlClient {
    tx: mpsc::Sender<ToControl>,
    task: tokio::task::JoinHandle<()>,
}

impl ControlClient {
    pub fn start(
        addr: String,
        inbound: Arc<dyn Fn(FromControl) + Send + Sync>,
        rt: &tokio::runtime::Handle,
    ) -> ControlClient {
        let (tx, rx) = mpsc::channel(CONTROL_QUEUE_FRAMES_MAX);
        let task = rt.spawn(control_link(addr, rx, inbound));
        ControlClient { tx, task }
    }

    /// Queue a request; false if the queue is full (dropped).
    pub fn send(&self, m: ToControl) -> bool {
        self.tx.try_send(m).is_ok()
    }
}

impl Drop for ControlClient {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn control_link(
    addr: String,
    mut rx: mpsc::Receiver<ToControl>,
    inbound: Arc<dyn Fn(FromControl) + Send + Sync>,
) {
    let mut backoff = CONTROL_BACKOFF_MIN;
    loop {
        let connected = match ringlet_link::tls::link_connect(&addr).await {
            Ok(mut s) => match prove(&mut s).await {
                Ok(()) => Some(s),
                Err(e) => {
                    // A wrong or missing secret: say so (a node that cannot join must not
                    // fail silently), and keep retrying with backoff.
                    tracing::warn!("ringlet node: control plane at {addr} refused us: {e}");
                    None
                }
            },
            Err(_) => None,
        };
        let Some(stream) = connected else {
            // Stale requests (old heartbeats) are worthless after an outage.
            while rx.try_recv().is_ok() {}
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(CONTROL_BACKOFF_MAX);
            continue;
        };
        backoff = CONTROL_BACKOFF_MIN;
        let (mut r, mut w) = tokio::io::split(stream);
        let inb = inbound.clone();
        let mut reader = tokio::spawn(async move {
            while let Ok(m) = read_frame::<FromControl>(&mut r).await {
                inb(m);
            }
        });
        loop {
            tokio::select! {
                m = rx.recv() => {
                    let Some(m) = m else { reader.abort(); return };
                    let Ok(f) = encode(&m) else { continue };
                    if w.write_all(&f).await.is_err() || w.flush().await.is_err() {
                        break;
                    }
                }
                _ = &mut reader => break,
            }
        }
        reader.abort();
    }
}

/// Open a member connection to a control service: the link (TLS when the process has link
/// TLS) and the cluster-secret proof, ready for frames.
///
/// # Errors
/// Connection, handshake or proof failures.
pub async fn connect_member(addr: &str) -> Result<ringlet_link::tls::LinkStream, ControlWireError> {
    let mut s = ringlet_link::tls::link_connect(addr).await?;
    prove(&mut s).await?;
    Ok(s)
}

/// One request/response exchange with the control service (CLI: drain, map).
///
/// # Errors
/// Connection or protocol failures.
pub async fn request(addr: &str, req: &ToControl) -> Result<FromControl, ControlWireError> {
    let mut s = connect_member(addr).await?;
    s.write_all(&encode(req)?).await?;
    s.flush().await?;
    read_frame::<FromControl>(&mut s).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn valid_frames() -> Vec<u8> {
        let mut out = Vec::new();
        for m in [
            ToControl::Watch,
            ToControl::Drain { node: 7 },
            ToControl::CreateMemgest {
                name: "cold".into(),
                kind: "ec:3+2".into(),
            },
        ] {
            out.extend(encode(&m).unwrap());
        }
        out
    }

    proptest! {
        /// Arbitrary bytes on a control port: no panic, and nothing decodes from noise
        /// beyond what its frames declare.
        #[test]
        fn control_decoder_survives_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let _ = decode_control_stream(&data);
        }

        /// Valid frames with bytes flipped, truncated or extended: no panic; the untouched
        /// prefix still decodes.
        #[test]
        fn control_decoder_survives_mutated_frames(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
            cut in any::<usize>(),
            tail in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut data = valid_frames();
            let clean = data.clone();
            for (at, b) in flips {
                let i = at % data.len();
                data[i] ^= b;
            }
            data.truncate(cut % (data.len() + 1));
            data.extend(tail);
            let _ = decode_control_stream(&data);
            prop_assert_eq!(decode_control_stream(&clean), 3);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn join_bootstrap_heartbeat_drain() {
        let backend = Arc::new(
            EmbeddedBackend::new(ControlConfig {
                s: 2,
                d: 1,
                // Long: the clients never heartbeat (but once), and no step here is about
                // expiry; with 1 s a slow machine failed nodes in the middle of the test.
                lease_ms: 30_000,
                ..ControlConfig::default()
            })
            .unwrap(),
        );
        let (_svc, addr) = ControlService::start(
            "127.0.0.1:0".parse().unwrap(),
            backend,
            Some(BootstrapPlan {
                expect_nodes: 4,
                active: 3,
                default_memgest: Some(MemgestKind::Rep { r: 3 }),
            }),
        )
        .await
        .unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut clients = Vec::new();
        for n in 1..=4u32 {
            let tx = tx.clone();
            let c = ControlClient::start(
                addr.to_string(),
                Arc::new(move |m| {
                    let _ = tx.send((n, m));
                }),
                &tokio::runtime::Handle::current(),
            );
            assert!(c.send(ToControl::Join {
                node: n,
                addr: format!("127.0.0.1:{}", 7000 + n),
                incarnation: 1,
            }));
            clients.push(c);
        }
        // Every node sees a bootstrapped map with rep:3 as the default memgest.
        let mut placed = std::collections::BTreeSet::new();
        let mut epoch = 0;
        while placed.len() < 4 {
            let (n, m) = rx.recv().await.unwrap();
            if let FromControl::Map(m) = m {
                if m.placement.is_some() {
                    let d = m.default_memgest;
                    assert_eq!(m.memgest_kind(d), MemgestKind::Rep { r: 3 });
                    placed.insert(n);
                    epoch = epoch.max(m.epoch.0);
                }
            }
        }
        // A heartbeat is acknowledged with its send time.
        clients[0].send(ToControl::Heartbeat {
            node: 1,
            incarnation: 1,
            epoch,
            sent_ms: 4242,
        });
        loop {
            let (n, m) = rx.recv().await.unwrap();
            if n == 1
                && m == (FromControl::HeartbeatAck {
                    incarnation: 1,
                    sent_ms: 4242,
                })
            {
                break;
            }
        }
        // Drain node 2 (no heartbeats needed meanwhile: the lease is 30 s).
        let r = request(&addr.to_string(), &ToControl::Drain { node: 2 })
            .await
            .unwrap();
        assert_eq!(r, FromControl::Ok);
        let r = request(&addr.to_string(), &ToControl::Drain { node: 2 })
            .await
            .unwrap();
        assert!(matches!(r, FromControl::Error(_)), "{r:?}");
        // Phase 1: node 2 is leaving but keeps its roles until it reports Quiesced (over its
        // node link, as the replica core's report travels).
        let r = request(&addr.to_string(), &ToControl::Watch).await.unwrap();
        let FromControl::Map(m) = r else {
            panic!("{r:?}")
        };
        assert_eq!(
            m.node_state(NodeId(2)),
            Some(ringlet_control::NodeState::Active)
        );
        let asked = m.leaving[&NodeId(2)];
        assert!(clients[1].send(ToControl::Quiesced {
            node: 2,
            incarnation: 1,
            epoch: asked.0,
        }));
        loop {
            let (n, m) = rx.recv().await.unwrap();
            if let (1, FromControl::Map(m)) = (n, m) {
                if m.node_state(NodeId(2)) == Some(ringlet_control::NodeState::Draining) {
                    assert!(m.leaving.is_empty());
                    break;
                }
            }
        }
        // The event log tells the story, with epochs and wall-clock times.
        let r = request(&addr.to_string(), &ToControl::Events { after: 0 })
            .await
            .unwrap();
        let FromControl::Events(ev) = r else {
            panic!("{r:?}")
        };
        let kinds: Vec<&str> = ev.iter().map(|e| e.kind.name()).collect();
        for k in [
            "node_joined",
            "memgest_created",
            "bootstrapped",
            "drain_started",
            "drain_finished",
            "spare_promoted",
        ] {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
        assert!(ev.windows(2).all(|w| w[0].seq < w[1].seq));
        let finished = ev
            .iter()
            .find(|e| e.kind.name() == "drain_finished")
            .unwrap();
        assert_eq!(finished.about_node, Some(2));
        assert!(finished.at_unix_ms > 1_600_000_000_000, "{finished:?}");
        // `after` skips what the reader has seen.
        let last = ev.last().unwrap().seq;
        let r = request(&addr.to_string(), &ToControl::Events { after: last })
            .await
            .unwrap();
        assert_eq!(r, FromControl::Events(Vec::new()));
    }

    #[tokio::test]
    async fn oversized_frame_is_refused() {
        let mut b: &[u8] = &[0xff, 0xff, 0xff, 0xff, b'{'];
        let r = read_frame::<ToControl>(&mut b).await;
        assert!(matches!(r, Err(ControlWireError::TooLarge(_))));
        let body = b"{\"Drain\":{\"node\":\"x\"}}";
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        let r = read_frame::<ToControl>(&mut &f[..]).await;
        assert!(matches!(r, Err(ControlWireError::Json(_))));
    }
}
