//! [`ClusterClient`]: the smart client of a cluster-mode Ringlet (nodes started by
//! `ringlet up` / `ringlet-cluster up`), over the native protocol (`docs/protocol.md` §2.5).
//!
//! ```text
//!  seeds ──CLUSTER_MAP──▶ cached map (epoch, placement, node addresses [+ overrides])
//!                              │ key ─ key_slot ─▶ cohort (coordinator first)
//!       Coordinator read / writes: one request to the coordinator ──▶ MOVED / STALE_EPOCH /
//!                                                                    newer epoch ⇒ refresh
//!       Quorum read: READ_REPLICA to the first R members at once ──▶ decide on each answer
//!                    (majority of one version; data from its first responder)
//! ```
//!
//! Routing: the client fetches the map from any seed (then from any node in it), routes each
//! key to its slot's coordinator, and refreshes the map when a node answers MOVED or
//! STALE_EPOCH, when any response carries a newer epoch than the cached map (in the
//! background, so the call that noticed is not delayed), or when a node cannot be reached.
//! Refreshes are serialised and rate-limited.
//!
//! Reads: [`ReadMode::Coordinator`] reads at the coordinator (committed state);
//! [`ReadMode::Quorum`] sends a leg to each of the first R cohort members and returns as
//! soon as a majority agree (`crate::quorum` has the rule), so one slow member costs nothing
//! — the point of CliqueMap's R=3.2 reads. No decision within an attempt: retry with a fresh
//! map, then fall back to a coordinator read.
//!
//! Multi-key calls: [`ClusterClient::mget`] splits keys by coordinator and sends every
//! node's batches at once (quorum mode: one quorum read per key, all at once);
//! [`ClusterClient::mset`] sends every SET at once and reports each key's outcome.
//!
//! Address overrides ([`ClusterConfig::addr_override`]) dial another address than the one
//! the map announces for a node: a proxy in front of it (the Fig. 11 benchmark slows one node
//! for clients this way), or NAT.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ringlet_codec::native::{self, ReplicaValue, Status};
use ringlet_codec::resp::{decode_reply, Reply};
use ringlet_control::ClusterMap;
use ringlet_shm::{ShmReader, ShmReaderConfig};
use ringlet_types::{key_slot, limits, Epoch, MemgestId, MemgestKind, NodeId, Version};
use std::path::PathBuf;
use tokio::time::Instant;

use crate::client::{
    check_key, join_all, set_outcome, set_request, unexpected, DelOutcome, MgetValue, Pool,
    SetOptions, SetOutcome, Versioned,
};
use crate::config::ClientConfig;
use crate::conn::{Body, Response};
use crate::error::Error;
use crate::quorum::{decide, Leg};
use crate::retry::{Jitter, RetryBudget};

/// How GETs read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadMode {
    /// At the slot's coordinator: its committed value (one request).
    #[default]
    Coordinator,
    /// A quorum of the slot's replicas: READ_REPLICA to the first R cohort members at once;
    /// the first majority on one version decides (R requests, latency of the fastest
    /// majority).
    Quorum,
}

/// Configuration of a [`ClusterClient`].
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// Pools, deadlines, retries, MGET batch size (as for [`crate::Client`]).
    pub client: ClientConfig,
    /// How GET and MGET read.
    pub read_mode: ReadMode,
    /// Dial the value instead of the key wherever the map names the key as a node's client
    /// address (a proxy in front of that node, NAT).
    pub addr_override: HashMap<SocketAddr, SocketAddr>,
    /// Quorum attempts (each with a fresh map if one was stale) before a coordinator read.
    pub quorum_attempts: u32,
    /// Longest one quorum attempt waits for its legs (a stopped member never answers; the
    /// others usually decide long before).
    pub quorum_attempt_timeout: Duration,
    /// Shortest interval between two map fetches (a burst of MOVED replies causes one).
    pub refresh_min_interval: Duration,
    /// One-sided reads: the shared-memory socket of a node, by its client address as the map
    /// announces it (`ringlet server --cluster ... --shm-socket PATH`). GETs of keys that
    /// node coordinates are read from its memory when its validity region allows, else over
    /// the network (docs/design/cluster-shm-reads.md).
    pub shm_sockets: HashMap<SocketAddr, PathBuf>,
    /// One-sided reads from every loopback node of the map that has a socket
    /// `DIR/node-<client port>.sock` (`ringlet up --shm-dir DIR`).
    pub shm_dir: Option<PathBuf>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            client: ClientConfig::default(),
            read_mode: ReadMode::Coordinator,
            addr_override: HashMap::new(),
            quorum_attempts: 2,
            quorum_attempt_timeout: Duration::from_millis(500),
            refresh_min_interval: Duration::from_millis(20),
            shm_sockets: HashMap::new(),
            shm_dir: None,
        }
    }
}

impl ClusterConfig {
    /// Check every field.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<(), Error> {
        self.client.validate()?;
        if self.quorum_attempts == 0 || self.quorum_attempts > limits::RETRY_COUNT_MAX {
            return Err(Error::Config(
                "quorum_attempts must be 1..=RETRY_COUNT_MAX".into(),
            ));
        }
        if self.quorum_attempt_timeout.is_zero() {
            return Err(Error::Config("quorum_attempt_timeout must be > 0".into()));
        }
        Ok(())
    }
}

/// Counters of a [`ClusterClient`] (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterStats {
    /// Maps fetched and installed.
    pub map_refreshes: u64,
    /// Quorum reads decided by a majority.
    pub quorum_decided: u64,
    /// Quorum reads that fell back to a coordinator read.
    pub quorum_fallbacks: u64,
    /// MOVED replies received.
    pub moved: u64,
    /// GETs answered from a local node's shared memory (values and validated absences).
    pub shm_reads: u64,
    /// GETs of a key whose coordinator has a shared-memory socket that went over the
    /// network instead, by reason ([`ShmFallback`]); also one-sided CHASEs abandoned.
    pub shm_fallbacks: ShmFallbacks,
    /// CHASEs walked entirely over shared memory ([`ClusterClient::chase_one_sided`]).
    pub shm_chases: u64,
    /// Link hops whose hint named another node than the key's coordinator now (the slot
    /// moved): looked up by key instead.
    pub hint_stale_node: u64,
    /// Hint outcomes of the shared-memory readers (sum over nodes): direct reads at a
    /// hint, at a remembered position, stale hints by cause, lookups after them.
    pub hints: ShmHintStats,
}

/// Location-hint counters of the one-sided readers (see `ringlet_shm::ReaderStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmHintStats {
    pub hits: u64,
    pub cache_hits: u64,
    pub stale_table: u64,
    pub stale_entry: u64,
    pub missing: u64,
    pub lookups: u64,
}

/// One-sided GETs that fell back to the network, by reason (see
/// [`ringlet_shm::validity::Fallback`] for what each means).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShmFallbacks {
    pub lease: u64,
    pub not_served: u64,
    pub in_flight: u64,
    pub ec: u64,
    pub changed: u64,
    pub retry: u64,
    pub engine: u64,
    pub kind: u64,
    pub unavailable: u64,
}

impl ShmFallbacks {
    /// Their sum.
    pub fn total(&self) -> u64 {
        self.lease
            + self.not_served
            + self.in_flight
            + self.ec
            + self.changed
            + self.retry
            + self.engine
            + self.kind
            + self.unavailable
    }
}

pub use ringlet_shm::validity::Fallback as ShmFallback;

/// Counter index of a fallback reason.
fn fallback_index(f: ShmFallback) -> usize {
    match f {
        ShmFallback::Lease => 0,
        ShmFallback::NotServed => 1,
        ShmFallback::InFlight => 2,
        ShmFallback::Ec => 3,
        ShmFallback::Changed => 4,
        ShmFallback::Retry => 5,
        ShmFallback::Engine => 6,
        ShmFallback::Kind => 7,
        ShmFallback::Unavailable => 8,
    }
}

#[derive(Default)]
struct Counters {
    map_refreshes: AtomicU64,
    quorum_decided: AtomicU64,
    quorum_fallbacks: AtomicU64,
    moved: AtomicU64,
    shm_reads: AtomicU64,
    shm_fallbacks: [AtomicU64; 9],
    shm_chases: AtomicU64,
    hint_stale_node: AtomicU64,
}

/// The cached map with every node's dialled address resolved once.
struct Routing {
    map: Arc<ClusterMap>,
    addrs: HashMap<NodeId, SocketAddr>,
}

impl Routing {
    fn new(map: ClusterMap, overrides: &HashMap<SocketAddr, SocketAddr>) -> Routing {
        let addrs = map
            .nodes
            .iter()
            .filter_map(|(id, n)| {
                let a: SocketAddr = n.addr.split('@').next()?.parse().ok()?;
                Some((*id, *overrides.get(&a).unwrap_or(&a)))
            })
            .collect();
        Routing {
            map: Arc::new(map),
            addrs,
        }
    }

    fn coordinator(&self, key: &[u8]) -> Option<SocketAddr> {
        let c = self.map.coordinator(key_slot(key))?;
        self.addrs.get(&c).copied()
    }
}

struct Inner {
    cfg: ClusterConfig,
    seeds: Vec<SocketAddr>,
    routing: RwLock<Arc<Routing>>,
    pools: Mutex<HashMap<SocketAddr, Arc<Pool>>>,
    /// Serialises map fetches.
    refreshing: tokio::sync::Mutex<()>,
    last_refresh: Mutex<Option<Instant>>,
    /// A background refresh is queued or running.
    bg_refresh: AtomicBool,
    budget: RetryBudget,
    jitter: Jitter,
    counters: Counters,
    /// One reader per local node with a shared-memory socket, by node id. A reader is
    /// `&mut` (one session, one socket): the lock is held for one one-sided read (well
    /// under a µs) and never across an await.
    shm: Mutex<HashMap<NodeId, ShmSlot>>,
}

/// A local node's reader, or when to try connecting again.
enum ShmSlot {
    /// Not tried yet.
    Unknown,
    /// No socket configured for this node (remote, or not in `shm_sockets`).
    NotLocal,
    Ready(Box<ShmReader>),
    /// The socket did not answer: no attempt before this instant (the network answers).
    Down(std::time::Instant),
}

/// After a failed connect to a node's shared-memory socket, how long GETs of its keys go
/// over the network before the next attempt.
const SHM_CONNECT_PAUSE: Duration = Duration::from_millis(500);

/// An async client of a Ringlet cluster. Cheap to clone (an `Arc`); calls must run inside a
/// tokio runtime. For synchronous code use [`BlockingClusterClient`].
///
/// ```no_run
/// # async fn demo() -> Result<(), ringlet_client::Error> {
/// use ringlet_client::{ClusterClient, ClusterConfig, ReadMode, SetOptions};
/// let cfg = ClusterConfig { read_mode: ReadMode::Quorum, ..ClusterConfig::default() };
/// let c = ClusterClient::connect(&["127.0.0.1:7000"], cfg).await?;
/// c.set(b"user:1", b"alice", SetOptions::default()).await?;
/// let v = c.get(b"user:1").await?; // decided by the first two replicas that agree
/// assert_eq!(v.value.as_deref(), Some(&b"alice"[..]));
/// let many = c.mget(&["user:1", "user:2"]).await?; // any slots
/// # let _ = many; Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClusterClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClient")
            .field("seeds", &self.inner.seeds)
            .field("epoch", &self.epoch())
            .field("read_mode", &self.inner.cfg.read_mode)
            .finish()
    }
}

/// Whether a failed attempt may be repeated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Idem {
    Yes,
    No,
}

impl ClusterClient {
    /// Connect to a cluster through any of `seeds` (`host:port` of nodes' client ports, as
    /// the map announces them: overrides apply to seeds too) and fetch its map.
    ///
    /// # Errors
    /// [`Error::Config`], [`Error::Resolve`], and [`Error::ClusterMap`] if no seed gave a map.
    pub async fn connect(seeds: &[&str], cfg: ClusterConfig) -> Result<ClusterClient, Error> {
        cfg.validate()?;
        if seeds.is_empty() || seeds.len() > limits::CONNECTIONS_MAX as usize {
            return Err(Error::Config("1..=CONNECTIONS_MAX seeds".into()));
        }
        let mut addrs = Vec::with_capacity(seeds.len());
        for s in seeds {
            let a = tokio::net::lookup_host(s)
                .await
                .map_err(|e| Error::Resolve(format!("{s}: {e}")))?
                .next()
                .ok_or_else(|| Error::Resolve((*s).to_string()))?;
            addrs.push(*cfg.addr_override.get(&a).unwrap_or(&a));
        }
        let seed = cfg.client.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x9E37_79B9)
                ^ u64::from(std::process::id())
        });
        let client = ClusterClient {
            inner: Arc::new(Inner {
                budget: RetryBudget::new(
                    cfg.client.retry_budget_ratio,
                    cfg.client.retry_budget_cap,
                ),
                jitter: Jitter::new(seed),
                routing: RwLock::new(Arc::new(Routing::new(
                    ClusterMap::default(),
                    &cfg.addr_override,
                ))),
                cfg,
                seeds: addrs,
                pools: Mutex::new(HashMap::new()),
                refreshing: tokio::sync::Mutex::new(()),
                last_refresh: Mutex::new(None),
                bg_refresh: AtomicBool::new(false),
                counters: Counters::default(),
                shm: Mutex::new(HashMap::new()),
            }),
        };
        let deadline = Instant::now() + client.inner.cfg.client.timeout;
        // Bounded by the deadline; a freshly started cluster may not be bootstrapped yet.
        let mut attempt = 0u32;
        loop {
            match client.refresh(Epoch(0), true).await {
                Ok(()) if client.routing().map.placement.is_some() => return Ok(client),
                Ok(()) => {}
                Err(e @ Error::Tls { .. }) => return Err(e),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(Error::ClusterMap("the cluster is not bootstrapped".into()));
            }
            let cfg = &client.inner.cfg.client;
            let pause = client
                .inner
                .jitter
                .backoff(attempt.min(6), cfg.backoff_base, cfg.backoff_max)
                .max(Duration::from_millis(5));
            tokio::time::sleep(pause).await;
            attempt = attempt.saturating_add(1);
        }
    }

    /// The cached map's epoch.
    pub fn epoch(&self) -> Epoch {
        self.routing().map.epoch
    }

    /// The cached map.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.routing().map.clone()
    }

    /// The configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.inner.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> ClusterStats {
        let c = &self.inner.counters;
        ClusterStats {
            map_refreshes: c.map_refreshes.load(Ordering::Relaxed),
            quorum_decided: c.quorum_decided.load(Ordering::Relaxed),
            quorum_fallbacks: c.quorum_fallbacks.load(Ordering::Relaxed),
            moved: c.moved.load(Ordering::Relaxed),
            shm_reads: c.shm_reads.load(Ordering::Relaxed),
            shm_fallbacks: {
                let f = |i: usize| c.shm_fallbacks[i].load(Ordering::Relaxed);
                ShmFallbacks {
                    lease: f(0),
                    not_served: f(1),
                    in_flight: f(2),
                    ec: f(3),
                    changed: f(4),
                    retry: f(5),
                    engine: f(6),
                    kind: f(7),
                    unavailable: f(8),
                }
            },
            shm_chases: c.shm_chases.load(Ordering::Relaxed),
            hint_stale_node: c.hint_stale_node.load(Ordering::Relaxed),
            hints: {
                let readers = self.inner.shm.lock().unwrap_or_else(|p| p.into_inner());
                let mut h = ShmHintStats::default();
                for slot in readers.values() {
                    if let ShmSlot::Ready(r) = slot {
                        let s = r.stats();
                        h.hits += s.hint_hits;
                        h.cache_hits += s.hint_cache_hits;
                        h.stale_table += s.hint_stale_table;
                        h.stale_entry += s.hint_stale_entry;
                        h.missing += s.hint_missing;
                        h.lookups += s.hint_lookups;
                    }
                }
                h
            },
        }
    }

    /// The shared-memory socket of the node at `addr` (a map address), if configured.
    fn shm_path(&self, addr: SocketAddr) -> Option<PathBuf> {
        let cfg = &self.inner.cfg;
        if let Some(p) = cfg.shm_sockets.get(&addr) {
            return Some(p.clone());
        }
        let dir = cfg.shm_dir.as_ref()?;
        if !addr.ip().is_loopback() {
            return None;
        }
        Some(dir.join(format!("node-{}.sock", addr.port())))
    }

    /// A one-sided GET at `key`'s coordinator (by the cached map) if that node exports its
    /// memory to us ([`ClusterConfig::shm_sockets`], [`ClusterConfig::shm_dir`]). `None`: no
    /// such node, or it could not vouch for the value now (counted by reason in
    /// [`ClusterStats::shm_fallbacks`]); read over the network then ([`ClusterClient::get`]
    /// does both). Synchronous: never blocks beyond a local connect, needs no runtime.
    /// The key's length is the caller's to check (as [`ClusterClient::get`] does).
    pub fn get_one_sided(&self, key: &[u8]) -> Option<Versioned<Option<Bytes>>> {
        let cfg = &self.inner.cfg;
        if cfg.shm_sockets.is_empty() && cfg.shm_dir.is_none() {
            return None;
        }
        let routing = self.routing();
        let node = routing.map.coordinator(key_slot(key))?;
        let mut out = Vec::new();
        let r = self.with_shm_reader(&routing, node, |r| r.try_get_into(key, &mut out))?;
        match r {
            Ok(version) => {
                self.inner
                    .counters
                    .shm_reads
                    .fetch_add(1, Ordering::Relaxed);
                Some(Versioned {
                    value: version.map(|_| Bytes::from(out)),
                    version: version.unwrap_or(Version::ZERO),
                    epoch: routing.map.epoch,
                })
            }
            Err(f) => self.count_fallback(f),
        }
    }

    /// Run `f` on `node`'s shared-memory reader, connecting it on first use. `None`: the
    /// node does not export its memory to us (not a fallback); `Some(Err(Unavailable))`:
    /// it should but its socket does not answer (counted by the caller).
    fn with_shm_reader<T>(
        &self,
        routing: &Routing,
        node: NodeId,
        f: impl FnOnce(&mut ShmReader) -> Result<T, ShmFallback>,
    ) -> Option<Result<T, ShmFallback>> {
        let mut readers = self.inner.shm.lock().unwrap_or_else(|p| p.into_inner());
        let slot = readers.entry(node).or_insert(ShmSlot::Unknown);
        if matches!(slot, ShmSlot::NotLocal) {
            return None; // not a fallback: this node was never ours to read
        }
        if !matches!(slot, ShmSlot::Ready(_)) {
            let now = std::time::Instant::now();
            if matches!(slot, ShmSlot::Down(at) if now < *at) {
                return Some(Err(ShmFallback::Unavailable));
            }
            // The address as the map announces it (overrides are for TCP only).
            let path = routing
                .map
                .nodes
                .get(&node)
                .and_then(|n| n.addr.split('@').next()?.parse().ok())
                .and_then(|a| self.shm_path(a));
            let Some(path) = path else {
                *slot = ShmSlot::NotLocal;
                return None;
            };
            let mut rc = ShmReaderConfig::new(&path);
            // One attempt: a GET must not sleep through reconnect backoff.
            rc.reconnect_attempts = 1;
            rc.io_timeout = Duration::from_millis(500);
            match ShmReader::with_config(rc) {
                Ok(r) if r.is_cluster() => *slot = ShmSlot::Ready(Box::new(r)),
                _ => {
                    // Not there, or a single node's socket (no validity region).
                    *slot = ShmSlot::Down(now + SHM_CONNECT_PAUSE);
                    return Some(Err(ShmFallback::Unavailable));
                }
            }
        }
        Some(match slot {
            ShmSlot::Ready(r) => f(r),
            ShmSlot::Down(_) | ShmSlot::Unknown | ShmSlot::NotLocal => {
                Err(ShmFallback::Unavailable)
            }
        })
    }

    /// CHASE walked by this client over the coordinators' shared memory, each hop one
    /// direct read at the link's location hint when it is fresh (a lookup by key at the
    /// key's coordinator otherwise; `ShmReader::try_get_hinted`). The same state machine,
    /// bounds, order and stop reasons as the node's CHASE. `None` if some hop could not be
    /// read one-sided (a coordinator that does not export its memory to us, or a validity
    /// fallback, counted in [`ClusterStats::shm_fallbacks`]): ask the node then
    /// ([`ClusterClient::chase`] does both).
    pub fn chase_one_sided<L: AsRef<[u8]>>(
        &self,
        key: &[u8],
        links: &[L],
        opts: &crate::ChaseOptions,
    ) -> Option<crate::ChaseResult> {
        let cfg = &self.inner.cfg;
        if cfg.shm_sockets.is_empty() && cfg.shm_dir.is_none() {
            return None;
        }
        crate::chase::check(key, links, opts).ok()?;
        let links: Vec<Vec<u8>> = links.iter().map(|l| l.as_ref().to_vec()).collect();
        let walk = ringlet_record::chase::Chase::new(
            key.to_vec(),
            links,
            opts.depth,
            opts.limit,
            opts.fields.clone(),
        )
        .ok()?;
        let routing = self.routing();
        let c = &self.inner.counters;
        let reply = ringlet_shm::chase::drive(
            walk,
            ringlet_shm::chase::ONE_SIDED_CHASE_TIME_MAX,
            |k, hint, out| -> Result<bool, Option<ShmFallback>> {
                let node = routing.map.coordinator(key_slot(k)).ok_or(None)?;
                // A hint names the node that held the target: another node's position
                // means nothing in this one's engine.
                let hint = match hint {
                    Some(h) if h.node != node.0 => {
                        c.hint_stale_node.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    h => h.as_ref().map(ringlet_shm::chase::position),
                };
                match self.with_shm_reader(&routing, node, |r| r.try_get_hinted(k, hint, out)) {
                    None => Err(None),
                    Some(Err(f)) => Err(Some(f)),
                    Some(Ok(got)) => {
                        c.shm_reads.fetch_add(1, Ordering::Relaxed);
                        Ok(matches!(got, Some((_, ringlet_types::ValueKind::Record))))
                    }
                }
            },
        );
        match reply {
            Ok(r) => {
                c.shm_chases.fetch_add(1, Ordering::Relaxed);
                Some(crate::chase::from_reply(r))
            }
            Err(Some(f)) => self.count_fallback(f),
            Err(None) => None,
        }
    }

    fn count_fallback<T>(&self, f: ShmFallback) -> Option<T> {
        self.inner.counters.shm_fallbacks[fallback_index(f)].fetch_add(1, Ordering::Relaxed);
        None
    }

    fn routing(&self) -> Arc<Routing> {
        self.inner
            .routing
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn pool(&self, addr: SocketAddr) -> Arc<Pool> {
        let mut pools = self.inner.pools.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: one pool per address of a map node or a seed (≤ NODES_MAX + seeds).
        pools
            .entry(addr)
            .or_insert_with(|| Arc::new(Pool::new(addr, self.inner.cfg.client.connections)))
            .clone()
    }

    /// One request to `addr`, without retries.
    async fn once<E>(&self, addr: SocketAddr, encode: E) -> Result<Response, Error>
    where
        E: FnOnce(&mut BytesMut, u64),
    {
        let conn = self.pool(addr).get(&self.inner.cfg.client).await?;
        conn.send(encode).await?.wait().await
    }

    /// Fetch the map from the cached map's nodes, then the seeds, and install it if newer.
    /// Unless `force`, skipped when the cached map is at least `min_epoch` or the last fetch
    /// was less than `refresh_min_interval` ago.
    async fn refresh(&self, min_epoch: Epoch, force: bool) -> Result<(), Error> {
        let _g = self.inner.refreshing.lock().await;
        if !force {
            if self.epoch() >= min_epoch && min_epoch != Epoch(0) {
                return Ok(());
            }
            let last = *self
                .inner
                .last_refresh
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < self.inner.cfg.refresh_min_interval) {
                return Ok(());
            }
        }
        *self
            .inner
            .last_refresh
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let r = self.routing();
        let mut candidates: Vec<SocketAddr> = r.addrs.values().copied().collect();
        candidates.extend(self.inner.seeds.iter().copied());
        let mut seen = std::collections::HashSet::new();
        candidates.retain(|a| seen.insert(*a));
        let per_try = self.inner.cfg.client.connect_timeout;
        let mut last_err = Error::ClusterMap("no node to ask".into());
        // Ask REFRESH_FANOUT candidates at once and take the first map: a stopped node (it
        // accepts connections but never answers) then costs nothing while another answers.
        // Bounded: each candidate once.
        for wave in candidates.chunks(REFRESH_FANOUT) {
            let mut asks: Vec<Option<MapFuture<'_>>> = wave
                .iter()
                .map(|&addr| {
                    let f: MapFuture<'_> = Box::pin(async move {
                        let got = tokio::time::timeout(
                            per_try,
                            self.once(addr, native::encode_cluster_map_request),
                        )
                        .await;
                        let resp = match got {
                            Err(_) => return Err(Error::Timeout),
                            Ok(r) => r?,
                        };
                        match (resp.status, resp.body) {
                            (Status::OK, Body::Value(json)) => {
                                let text = std::str::from_utf8(&json)
                                    .map_err(|_| Error::ClusterMap("map is not UTF-8".into()))?;
                                ClusterMap::from_json(text).map_err(|e| {
                                    Error::ClusterMap(format!("bad map from {addr}: {e}"))
                                })
                            }
                            // A refusal (NOAUTH, NOPERM) says why: not a protocol error.
                            (status, Body::Message(message)) if status.is_error() => {
                                Err(Error::Server { status, message })
                            }
                            (s, b) => Err(unexpected("CLUSTER_MAP", s, &b)),
                        }
                    });
                    Some(f)
                })
                .collect();
            while let Some(res) = next_done(&mut asks).await {
                match res {
                    Ok(map) => {
                        self.install(map);
                        return Ok(());
                    }
                    Err(e) => last_err = e,
                }
            }
        }
        Err(last_err)
    }

    fn install(&self, map: ClusterMap) {
        let mut g = self
            .inner
            .routing
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if map.epoch > g.map.epoch || g.map.placement.is_none() {
            *g = Arc::new(Routing::new(map, &self.inner.cfg.addr_override));
            self.inner
                .counters
                .map_refreshes
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A response carried `epoch`: if newer than the cached map, refresh in the background
    /// (the call that noticed is not delayed; one refresh at a time).
    fn saw_epoch(&self, epoch: Epoch) {
        if epoch > self.epoch() && !self.inner.bg_refresh.swap(true, Ordering::AcqRel) {
            let me = self.clone();
            tokio::spawn(async move {
                let _ = me.refresh(epoch, false).await;
                me.inner.bg_refresh.store(false, Ordering::Release);
            });
        }
    }

    /// A coordinator operation on `key`: route, send, classify, refresh and retry within the
    /// deadline, `retries_max` and the retry budget.
    async fn coord_call<E>(&self, key: &[u8], idem: Idem, encode: E) -> Result<Response, Error>
    where
        E: Fn(&mut BytesMut, u64),
    {
        let cfg = &self.inner.cfg.client;
        let deadline = Instant::now() + cfg.timeout;
        let mut attempt: u32 = 0;
        // A MOVED target to try before the map catches up with it.
        let mut hint: Option<SocketAddr> = None;
        // Bounded: at most `retries_max` (≤ RETRY_COUNT_MAX) retries, and the deadline.
        loop {
            let routed = hint.take().or_else(|| self.routing().coordinator(key));
            let result = match routed {
                None => Err(Error::ClusterMap(format!(
                    "no coordinator for slot {} in map epoch {}",
                    key_slot(key),
                    self.epoch().0
                ))),
                Some(addr) => {
                    match tokio::time::timeout_at(deadline, self.once(addr, &encode)).await {
                        Err(_) => return Err(Error::Timeout),
                        Ok(r) => r,
                    }
                }
            };
            let err = match result {
                Ok(resp) if !resp.status.is_error() => {
                    self.saw_epoch(resp.epoch);
                    self.inner.budget.deposit();
                    return Ok(resp);
                }
                Ok(resp) => {
                    let message = match &resp.body {
                        Body::Message(m) => m.clone(),
                        _ => String::new(),
                    };
                    if resp.status == Status::MOVED {
                        self.inner.counters.moved.fetch_add(1, Ordering::Relaxed);
                        hint = moved_addr(&message)
                            .map(|a| *self.inner.cfg.addr_override.get(&a).unwrap_or(&a));
                    }
                    if matches!(resp.status, Status::MOVED | Status::STALE_EPOCH) {
                        let want = resp.epoch.max(Epoch(self.epoch().0 + 1));
                        let _ = tokio::time::timeout_at(deadline, self.refresh(want, false)).await;
                    } else {
                        self.saw_epoch(resp.epoch);
                    }
                    Error::Server {
                        status: resp.status,
                        message,
                    }
                }
                Err(e) => {
                    if matches!(e, Error::Connection { .. } | Error::ClusterMap(_)) {
                        // The node may be gone and the map changed: look.
                        let want = Epoch(self.epoch().0 + 1);
                        let _ = tokio::time::timeout_at(deadline, self.refresh(want, false)).await;
                    }
                    e
                }
            };
            let retryable = match &err {
                Error::ClusterMap(_) => true,
                e => e.is_retryable(idem == Idem::Yes),
            };
            let retry = attempt < cfg.retries_max.min(limits::RETRY_COUNT_MAX)
                && retryable
                && self.inner.budget.withdraw();
            if !retry {
                return Err(err);
            }
            let redirected =
                matches!(&err, Error::Server { status, .. } if *status == Status::MOVED);
            // A first MOVED is followed at once; a MOVED after a retry means the nodes' maps
            // are still settling (a move's switch): back off like any other retry, or a few
            // quick redirects between two nodes would use up every retry in microseconds.
            if !redirected || attempt > 0 {
                let pause = self
                    .inner
                    .jitter
                    .backoff(attempt, cfg.backoff_base, cfg.backoff_max);
                if Instant::now() + pause >= deadline {
                    return Err(err);
                }
                tokio::time::sleep(pause).await;
            }
            attempt = attempt.saturating_add(1);
        }
    }

    fn check_key(key: &[u8]) -> Result<(), Error> {
        check_key(key)
    }

    /// GET in the configured [`ReadMode`]: the value (`None` if absent), its version and an
    /// epoch (the answering node's, or the map's for a quorum read).
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn get(&self, key: &[u8]) -> Result<Versioned<Option<Bytes>>, Error> {
        // A one-sided read returns the coordinator's committed value, as linearizable as
        // either network mode (docs/design/cluster-shm-reads.md).
        Self::check_key(key)?;
        if let Some(v) = self.get_one_sided(key) {
            return Ok(v);
        }
        self.get_network(key).await
    }

    /// GET in the configured [`ReadMode`] over the network only.
    async fn get_network(&self, key: &[u8]) -> Result<Versioned<Option<Bytes>>, Error> {
        match self.inner.cfg.read_mode {
            ReadMode::Coordinator => self.get_coordinator(key).await,
            ReadMode::Quorum => self.get_quorum(key).await,
        }
    }

    /// GET at the coordinator, whatever the configured mode.
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn get_coordinator(&self, key: &[u8]) -> Result<Versioned<Option<Bytes>>, Error> {
        Self::check_key(key)?;
        let r = self
            .coord_call(key, Idem::Yes, |out, id| native::encode_get(out, id, key))
            .await?;
        let value = match (r.status, r.body) {
            (Status::OK, Body::Value(v)) => Some(v),
            (Status::NOT_FOUND, _) => None,
            (s, b) => return Err(unexpected("GET", s, &b)),
        };
        Ok(Versioned {
            value,
            version: r.version,
            epoch: r.epoch,
        })
    }

    /// GET by quorum, whatever the configured mode: legs to the first R cohort members at
    /// once, decided by the first majority on one version; after `quorum_attempts` attempts
    /// without a decision, a coordinator read.
    ///
    /// # Errors
    /// See [`Error`] (only from the coordinator fallback).
    pub async fn get_quorum(&self, key: &[u8]) -> Result<Versioned<Option<Bytes>>, Error> {
        Self::check_key(key)?;
        let cfg = &self.inner.cfg;
        let deadline = Instant::now() + cfg.client.timeout;
        for attempt in 0..cfg.quorum_attempts {
            if attempt > 0 {
                let pause = self.inner.jitter.backoff(
                    attempt,
                    cfg.client.backoff_base,
                    cfg.client.backoff_max,
                );
                if Instant::now() + pause >= deadline {
                    break;
                }
                tokio::time::sleep(pause).await;
            }
            let until = deadline.min(Instant::now() + cfg.quorum_attempt_timeout);
            match self.quorum_attempt(key, until).await {
                Attempt::Decided(v) => {
                    self.inner
                        .counters
                        .quorum_decided
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(v);
                }
                Attempt::Undecided { newest_epoch } => {
                    if newest_epoch > self.epoch() {
                        let _ =
                            tokio::time::timeout_at(deadline, self.refresh(newest_epoch, false))
                                .await;
                    }
                }
            }
        }
        self.inner
            .counters
            .quorum_fallbacks
            .fetch_add(1, Ordering::Relaxed);
        self.get_coordinator(key).await
    }

    async fn quorum_attempt(&self, key: &[u8], until: Instant) -> Attempt {
        let r = self.routing();
        let map = &r.map;
        let epoch = map.epoch;
        let depth = map.replica_depth();
        let cohort: Vec<NodeId> = map.cohort(key_slot(key)).into_iter().take(depth).collect();
        let mut legs: Vec<Option<LegFuture<'_>>> = cohort
            .iter()
            .map(|n| {
                let addr = r.addrs.get(n).copied();
                let node = *n;
                let f: LegFuture<'_> = Box::pin(async move {
                    let Some(addr) = addr else {
                        return (node, Err(Error::ClusterMap("node has no address".into())));
                    };
                    (
                        node,
                        self.once(addr, |out, id| {
                            native::encode_read_replica(out, id, epoch, key)
                        })
                        .await,
                    )
                });
                Some(f)
            })
            .collect();
        let mut replies: Vec<Leg<Bytes>> = Vec::with_capacity(cohort.len());
        let mut newest_epoch = epoch;
        // Bounded: one iteration per leg (each completes once), and the attempt's deadline.
        while let Ok(Some((node, res))) = tokio::time::timeout_at(until, next_done(&mut legs)).await
        {
            let Ok(resp) = res else { continue };
            newest_epoch = newest_epoch.max(resp.epoch);
            if resp.status != Status::OK || resp.epoch != epoch {
                continue; // stale epoch, not ready, overloaded: this leg does not count
            }
            let Body::Value(blob) = resp.body else {
                continue;
            };
            let Ok(rv) = ReplicaValue::parse(&blob) else {
                continue;
            };
            let value = rv.value.map(|v| blob.slice_ref(v));
            replies.push(Leg {
                node,
                version: resp.version,
                memgest: rv.memgest,
                value,
            });
            if let Some((version, value)) = decide(map, &cohort, &replies) {
                return Attempt::Decided(Versioned {
                    value,
                    version,
                    epoch,
                });
            }
        }
        Attempt::Undecided { newest_epoch }
    }

    /// SET with options (cluster mode serves SETs with a memgest, a TTL and NX or XX — a
    /// refused condition is [`SetOutcome::NotStored`]; VERSION and CAS answer `UNSUPPORTED`).
    ///
    /// # Errors
    /// [`Error::KeyTooLarge`], [`Error::ValueTooLarge`], and see [`Error`].
    pub async fn set(
        &self,
        key: &[u8],
        value: &[u8],
        opts: SetOptions,
    ) -> Result<Versioned<SetOutcome>, Error> {
        let req = set_request(key, value, &opts)?;
        let idem = if opts.idempotent() {
            Idem::Yes
        } else {
            Idem::No
        };
        let r = self
            .coord_call(key, idem, |out, id| native::encode_set(out, id, &req))
            .await?;
        set_outcome(&r)
    }

    /// INCRBY `delta` on `key`'s coordinator (a missing key counts as 0; the key keeps its
    /// TTL): the new value. Not retried after a send (not idempotent): an unknown outcome
    /// is an error, as for SET.
    ///
    /// # Errors
    /// [`Error::KeyTooLarge`]; the node's refusals (not an integer, overflow, wrong type)
    /// and see [`Error`].
    pub async fn incr_by(&self, key: &[u8], delta: i64) -> Result<Versioned<i64>, Error> {
        let r = self
            .coord_call(key, Idem::No, |out, id| {
                native::encode_incr_by(out, id, key, delta)
            })
            .await?;
        match (r.status, &r.body) {
            (Status::OK, Body::Int(v)) => Ok(Versioned {
                value: *v,
                version: r.version,
                epoch: r.epoch,
            }),
            (st, b) => Err(unexpected("INCRBY", st, b)),
        }
    }

    /// CHASE on `key`'s coordinator, which walks the links and asks the other nodes for
    /// their items itself (one client round trip; docs/design/records.md). Same arguments,
    /// bounds and stop reasons as RESP CHASE; retried like a read.
    ///
    /// # Errors
    /// `Server { status: BAD_REQUEST }` for arguments outside the node's bounds (refused
    /// before sending, with the node's text); see [`Error`].
    pub async fn chase<L: AsRef<[u8]>>(
        &self,
        key: &[u8],
        links: &[L],
        opts: &crate::ChaseOptions,
    ) -> Result<Versioned<crate::ChaseResult>, Error> {
        let depth = crate::chase::check(key, links, opts)?;
        // One-sided first when the coordinators share their memory with us: the same walk
        // and answers, without the round trip (docs/design/records.md).
        // A one-sided walk cut by its time bound (this client was slow, e.g. descheduled)
        // is redone by the node, whose own bound then decides.
        if let Some(r) = self
            .chase_one_sided(key, links, opts)
            .filter(|r| r.stop != crate::chase::Stop::Time)
        {
            return Ok(Versioned {
                value: r,
                version: Version::ZERO,
                epoch: self.epoch(),
            });
        }
        let r = self
            .coord_call(key, Idem::Yes, |out, id| {
                crate::chase::encode(out, id, key, links, depth, opts)
            })
            .await?;
        Ok(Versioned {
            value: crate::chase::result(&r)?,
            version: r.version,
            epoch: r.epoch,
        })
    }

    /// SET `value` in memgest `memgest` (by id; see [`ClusterClient::memgest`]).
    ///
    /// # Errors
    /// See [`ClusterClient::set`].
    pub async fn set_in(
        &self,
        key: &[u8],
        value: &[u8],
        memgest: MemgestId,
    ) -> Result<Versioned<SetOutcome>, Error> {
        self.set(key, value, SetOptions::default().memgest(memgest))
            .await
    }

    /// The id of the memgest named `name` (`"none"`, `"rep:3"`, ...) in the cached map.
    pub fn memgest(&self, name: &str) -> Option<MemgestId> {
        self.routing().map.memgest_by_name(name)
    }

    /// DEL: [`DelOutcome::Deleted`] with the tombstone's version, or
    /// [`DelOutcome::NotFound`] (version 0) when the key did not exist (a node older than
    /// session 14 answers `Deleted` either way).
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn del(&self, key: &[u8]) -> Result<Versioned<DelOutcome>, Error> {
        Self::check_key(key)?;
        let r = self
            .coord_call(key, Idem::Yes, |out, id| {
                native::encode_del(out, id, key, None)
            })
            .await?;
        let value = match r.status {
            Status::OK => DelOutcome::Deleted,
            Status::NOT_FOUND => DelOutcome::NotFound,
            s => return Err(unexpected("DEL", s, &r.body)),
        };
        Ok(Versioned {
            value,
            version: r.version,
            epoch: r.epoch,
        })
    }

    /// MGET across any slots: one result per key, in order.
    ///
    /// Coordinator mode: keys are grouped by coordinator and sent in batches of
    /// `mget_batch_keys`, every batch of every node at once; items a node answers MOVED
    /// (the map changed) are read again one by one after a refresh. Quorum mode: one quorum
    /// read per key, all at once.
    ///
    /// # Errors
    /// The first error of any key.
    pub async fn mget<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<MgetValue>, Error> {
        for k in keys {
            Self::check_key(k.as_ref())?;
        }
        // Keys whose coordinator exports its memory to us are read one-sided first; only the
        // rest (and those that fell back) go over the network.
        let mut out: Vec<Option<MgetValue>> = keys
            .iter()
            .map(|k| {
                self.get_one_sided(k.as_ref()).map(|v| MgetValue {
                    value: v.value,
                    version: v.version,
                })
            })
            .collect();
        if self.inner.cfg.read_mode == ReadMode::Quorum {
            let rest: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
            let futs: Vec<_> = rest
                .iter()
                .map(|&i| self.get_quorum(keys[i].as_ref()))
                .collect();
            for (&i, r) in rest.iter().zip(join_all(futs).await) {
                let v = r?;
                out[i] = Some(MgetValue {
                    value: v.value,
                    version: v.version,
                });
            }
            return out
                .into_iter()
                .map(|v| v.ok_or_else(|| Error::UnexpectedResponse("MGET lost a key".into())))
                .collect();
        }
        let r = self.routing();
        // Group key indices by coordinator (keys without one go through `get`).
        let mut groups: HashMap<Option<SocketAddr>, Vec<usize>> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            if out[i].is_none() {
                groups.entry(r.coordinator(k.as_ref())).or_default().push(i);
            }
        }
        let batch = self
            .inner
            .cfg
            .client
            .mget_batch_keys
            .clamp(1, limits::BATCH_KEYS_MAX as usize);
        let mut batches: Vec<(Option<SocketAddr>, Vec<usize>)> = Vec::new();
        for (addr, idx) in groups {
            for chunk in idx.chunks(batch) {
                batches.push((addr, chunk.to_vec()));
            }
        }
        let futs: Vec<_> = batches
            .iter()
            .map(|(addr, idx)| async move {
                let Some(addr) = *addr else {
                    return Err(Error::ClusterMap("no coordinator".into()));
                };
                let ks: Vec<&[u8]> = idx.iter().map(|&i| keys[i].as_ref()).collect();
                let resp = self
                    .once(addr, |out, id| native::encode_mget(out, id, &ks))
                    .await?;
                self.saw_epoch(resp.epoch);
                match (resp.status, resp.body) {
                    (Status::OK, Body::Values(v)) if v.len() == ks.len() => Ok(v),
                    (s, b) => Err(unexpected("MGET", s, &b)),
                }
            })
            .collect();
        let mut again: Vec<usize> = Vec::new();
        for ((_, idx), res) in batches.iter().zip(join_all(futs).await) {
            match res {
                Ok(items) => {
                    for (&i, it) in idx.iter().zip(items) {
                        match it.status {
                            Status::OK => {
                                out[i] = Some(MgetValue {
                                    value: Some(it.value),
                                    version: it.version,
                                })
                            }
                            Status::NOT_FOUND => {
                                out[i] = Some(MgetValue {
                                    value: None,
                                    version: it.version,
                                })
                            }
                            s if s.is_retryable() => again.push(i),
                            s => {
                                return Err(Error::Server {
                                    status: s,
                                    message: String::from_utf8_lossy(&it.value).into_owned(),
                                })
                            }
                        }
                    }
                }
                // The batch failed as a whole (connection, busy node): its keys go one by
                // one through the retrying path.
                Err(e) if e.is_retryable(true) || matches!(e, Error::ClusterMap(_)) => {
                    again.extend_from_slice(idx)
                }
                Err(e) => return Err(e),
            }
        }
        if !again.is_empty() {
            let _ = self.refresh(Epoch(self.epoch().0 + 1), false).await;
            let futs: Vec<_> = again
                .iter()
                .map(|&i| self.get_coordinator(keys[i].as_ref()))
                .collect();
            for (&i, res) in again.iter().zip(join_all(futs).await) {
                let v = res?;
                out[i] = Some(MgetValue {
                    value: v.value,
                    version: v.version,
                });
            }
        }
        out.into_iter()
            .map(|v| v.ok_or_else(|| Error::UnexpectedResponse("MGET lost a key".into())))
            .collect()
    }

    /// MSET across any slots: every SET at once (each to its coordinator); one outcome per
    /// pair, in order. Not atomic: some may succeed while others fail.
    pub async fn mset<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        pairs: &[(K, V)],
    ) -> Vec<Result<Versioned<SetOutcome>, Error>> {
        let futs: Vec<_> = pairs
            .iter()
            .map(|(k, v)| self.set(k.as_ref(), v.as_ref(), SetOptions::default()))
            .collect();
        join_all(futs).await
    }

    /// Fetch the map now (e.g. after a topology change you know about).
    ///
    /// # Errors
    /// [`Error::ClusterMap`] or the last node's error if none answered.
    pub async fn refresh_map(&self) -> Result<(), Error> {
        self.refresh(Epoch(0), true).await
    }

    /// `MEMGEST args...` over the native protocol (opcode MEMGEST, docs/protocol.md §2.5):
    /// the command's reply in the RESP front's shapes (docs/design/memgest-commands.md). A
    /// refused command (unknown memgest, DROP while keys live, ...) is `Ok(Reply::Error)`;
    /// `Err` is transport, routing or protocol. `MOVE`/`KEY` go to the key's coordinator,
    /// the rest to any node (they reach the control plane from there).
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn memgest_command<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Reply, Error> {
        let sub = args.first().map(|a| a.as_ref().to_ascii_lowercase());
        let keyed = matches!(sub.as_deref(), Some(b"move") | Some(b"key"));
        let key: &[u8] = match args.get(1) {
            Some(k) if keyed => k.as_ref(),
            _ => b"",
        };
        if keyed {
            Self::check_key(key)?;
        }
        let read_only = matches!(
            sub.as_deref(),
            Some(b"list") | Some(b"info") | Some(b"key") | Some(b"help")
        );
        let idem = if read_only { Idem::Yes } else { Idem::No };
        let r = self
            .coord_call(key, idem, |out, id| native::encode_memgest(out, id, args))
            .await?;
        match &r.body {
            Body::Value(b) => match decode_reply(b) {
                Ok(Some((reply, n))) if n == b.len() => Ok(reply),
                _ => Err(Error::UnexpectedResponse(
                    "MEMGEST: the reply is not one RESP value".into(),
                )),
            },
            other => Err(unexpected("MEMGEST", r.status, other)),
        }
    }

    /// COMMAND: run `args` (the command's name first) on the node that serves them, through
    /// its command layer, and return the reply (RESP3 shapes). Routed like redis-py's
    /// `RedisCluster`: by the command's keys as the command table gives them (the first
    /// key's coordinator), keyless commands to any node, keys in several slots refused here
    /// with CROSSSLOT; MOVED is followed (the map refreshed) and TRY_AGAIN backed off within
    /// the call's retries and deadline. A command the table flags `write` is never repeated
    /// once it may have run. A refused command (WRONGTYPE, syntax) is `Ok(Reply::Error)`.
    ///
    /// # Errors
    /// `Server { status: BAD_REQUEST }` with Redis's CROSSSLOT text; see [`Error`].
    pub async fn command<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Reply, Error> {
        crate::command::check_args(args)?;
        let key = crate::command::route_key(args)?;
        if let Some(k) = &key {
            Self::check_key(k)?;
        }
        let idem = if crate::command::idempotent(args) {
            Idem::Yes
        } else {
            Idem::No
        };
        let r = self
            .coord_call(key.as_deref().unwrap_or(b""), idem, |out, id| {
                native::encode_command(out, id, args)
            })
            .await?;
        crate::command::reply_of(&r)
    }

    crate::command::typed_helpers_async!();

    /// A map-changing `MEMGEST` subcommand, then the cached map refreshed until it shows the
    /// change (`done`). One refresh is not enough: it takes the first map of several nodes
    /// asked at once, and a node other than the one that answered the command may not have
    /// applied the change yet (the answering node waits for its own map to show it, for at
    /// most 2 s). Bounded by the client's timeout; past it the call still succeeds (the
    /// change is committed) and the map catches up on the next newer epoch a response
    /// carries.
    async fn memgest_change(
        &self,
        args: &[&[u8]],
        done: impl Fn(&ClusterMap) -> bool,
    ) -> Result<(), Error> {
        self.memgest_ok(args).await?;
        let deadline = Instant::now() + self.inner.cfg.client.timeout;
        // Bounded: the deadline, one refresh per 20 ms at most.
        while !done(&self.routing().map) && Instant::now() < deadline {
            let _ = self.refresh_map().await;
            if !done(&self.routing().map) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    /// A MEMGEST that answers `+OK`; a refusal becomes [`Error::Server`] (`BAD_REQUEST`)
    /// with the node's message.
    async fn memgest_ok(&self, args: &[&[u8]]) -> Result<(), Error> {
        match self.memgest_command(args).await? {
            Reply::Simple(_) => Ok(()),
            Reply::Error(m) => Err(Error::Server {
                status: Status::BAD_REQUEST,
                message: String::from_utf8_lossy(&m).into_owned(),
            }),
            other => Err(Error::UnexpectedResponse(format!("MEMGEST: {other:?}"))),
        }
    }

    /// `MEMGEST CREATE name rep R | ec K M`; the cached map is refreshed so the new memgest
    /// can be named in [`ClusterClient::memgest`] / [`ClusterClient::set_in`] at once.
    ///
    /// # Errors
    /// See [`ClusterClient::memgest_command`]; `kind` `none` cannot be created (it exists).
    pub async fn memgest_create(&self, name: &str, kind: MemgestKind) -> Result<(), Error> {
        let words: Vec<String> = match kind {
            MemgestKind::Rep { r } => vec!["rep".into(), r.to_string()],
            MemgestKind::Ec { k, m } => vec!["ec".into(), k.to_string(), m.to_string()],
            MemgestKind::None => {
                return Err(Error::Config("memgest none always exists".into()));
            }
        };
        let mut args: Vec<&[u8]> = vec![b"CREATE", name.as_bytes()];
        args.extend(words.iter().map(|w| w.as_bytes()));
        self.memgest_change(&args, |m| m.memgest_by_name(name).is_some())
            .await
    }

    /// `MEMGEST DROP name` (refused while keys live in it).
    ///
    /// # Errors
    /// See [`ClusterClient::memgest_command`].
    pub async fn memgest_drop(&self, name: &str) -> Result<(), Error> {
        self.memgest_change(&[b"DROP", name.as_bytes()], |m| {
            m.memgest_by_name(name).is_none()
        })
        .await
    }

    /// `MEMGEST DEFAULT name`.
    ///
    /// # Errors
    /// See [`ClusterClient::memgest_command`].
    pub async fn memgest_default(&self, name: &str) -> Result<(), Error> {
        self.memgest_change(&[b"DEFAULT", name.as_bytes()], |m| {
            m.memgest_by_name(name) == Some(m.default_memgest)
        })
        .await
    }

    /// `MEMGEST MOVE key name`: atomically on the key's coordinator.
    ///
    /// # Errors
    /// See [`ClusterClient::memgest_command`].
    pub async fn memgest_move(&self, key: &[u8], name: &str) -> Result<(), Error> {
        self.memgest_ok(&[b"MOVE", key, name.as_bytes()]).await
    }

    /// `MEMGEST KEY key`: the key's memgest name, descriptor and version (as the node prints
    /// it), or `None` if the key does not exist.
    ///
    /// # Errors
    /// See [`ClusterClient::memgest_command`].
    pub async fn memgest_key(&self, key: &[u8]) -> Result<Option<Vec<String>>, Error> {
        match self.memgest_command(&[b"KEY" as &[u8], key]).await? {
            Reply::Array(items) => Ok(Some(
                items
                    .into_iter()
                    .map(|i| match i {
                        Reply::Bulk(b) | Reply::Simple(b) => {
                            String::from_utf8_lossy(&b).into_owned()
                        }
                        Reply::Integer(n) => n.to_string(),
                        other => format!("{other:?}"),
                    })
                    .collect(),
            )),
            Reply::Null | Reply::NullArray => Ok(None),
            Reply::Error(m) => Err(Error::Server {
                status: Status::BAD_REQUEST,
                message: String::from_utf8_lossy(&m).into_owned(),
            }),
            other => Err(Error::UnexpectedResponse(format!("MEMGEST KEY: {other:?}"))),
        }
    }
}

enum Attempt {
    Decided(Versioned<Option<Bytes>>),
    Undecided { newest_epoch: Epoch },
}

type MapFuture<'a> = Pin<Box<dyn Future<Output = Result<ClusterMap, Error>> + Send + 'a>>;

/// Nodes asked for the map at once.
const REFRESH_FANOUT: usize = 3;

type LegFuture<'a> = Pin<Box<dyn Future<Output = (NodeId, Result<Response, Error>)> + Send + 'a>>;

/// The output of whichever leg finishes next; `None` when none is left.
async fn next_done<F: Future + Unpin>(legs: &mut [Option<F>]) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        let mut any = false;
        for slot in legs.iter_mut() {
            if let Some(f) = slot {
                any = true;
                if let Poll::Ready(v) = Pin::new(f).poll(cx) {
                    *slot = None;
                    return Poll::Ready(Some(v));
                }
            }
        }
        if any {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    })
    .await
}

/// The address of a MOVED message `"<slot> <host>:<port>"`.
fn moved_addr(message: &str) -> Option<SocketAddr> {
    message.split_whitespace().nth(1)?.parse().ok()
}

/// A synchronous [`ClusterClient`] over a private one-worker runtime (like
/// [`crate::BlockingClient`]).
///
/// # Panics
/// Calling its methods from inside an async context panics (tokio refuses to block a runtime
/// thread); use [`ClusterClient`] there.
pub struct BlockingClusterClient {
    rt: tokio::runtime::Runtime,
    client: ClusterClient,
}

impl std::fmt::Debug for BlockingClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingClusterClient")
            .field("client", &self.client)
            .finish()
    }
}

impl BlockingClusterClient {
    /// See [`ClusterClient::connect`].
    ///
    /// # Errors
    /// As [`ClusterClient::connect`]; also [`Error::Config`] if the runtime cannot start.
    pub fn connect(seeds: &[&str], cfg: ClusterConfig) -> Result<BlockingClusterClient, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ringlet-cluster-client")
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("cannot start the client runtime: {e}")))?;
        let client = rt.block_on(ClusterClient::connect(seeds, cfg))?;
        Ok(BlockingClusterClient { rt, client })
    }

    crate::command::typed_helpers_blocking!();

    /// The async client inside.
    pub fn async_client(&self) -> &ClusterClient {
        &self.client
    }

    /// See [`ClusterClient::get`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn get(&self, key: &[u8]) -> Result<Versioned<Option<Bytes>>, Error> {
        // A one-sided read needs no runtime: skip the hop into it when it answers (and do
        // not try it twice when it does not).
        ClusterClient::check_key(key)?;
        if let Some(v) = self.client.get_one_sided(key) {
            return Ok(v);
        }
        self.rt.block_on(self.client.get_network(key))
    }

    /// See [`ClusterClient::get_quorum`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn get_quorum(&self, key: &[u8]) -> Result<Versioned<Option<Bytes>>, Error> {
        self.rt.block_on(self.client.get_quorum(key))
    }

    /// See [`ClusterClient::set`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        opts: SetOptions,
    ) -> Result<Versioned<SetOutcome>, Error> {
        self.rt.block_on(self.client.set(key, value, opts))
    }

    /// See [`ClusterClient::del`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn del(&self, key: &[u8]) -> Result<Versioned<DelOutcome>, Error> {
        self.rt.block_on(self.client.del(key))
    }

    /// See [`ClusterClient::chase`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn chase<L: AsRef<[u8]>>(
        &self,
        key: &[u8],
        links: &[L],
        opts: &crate::ChaseOptions,
    ) -> Result<Versioned<crate::ChaseResult>, Error> {
        self.rt.block_on(self.client.chase(key, links, opts))
    }

    /// See [`ClusterClient::mget`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn mget<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<MgetValue>, Error> {
        self.rt.block_on(self.client.mget(keys))
    }

    /// See [`ClusterClient::mset`].
    pub fn mset<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        pairs: &[(K, V)],
    ) -> Vec<Result<Versioned<SetOutcome>, Error>> {
        self.rt.block_on(self.client.mset(pairs))
    }

    /// The cached map's epoch.
    pub fn epoch(&self) -> Epoch {
        self.client.epoch()
    }

    /// See [`ClusterClient::memgest_command`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn memgest_command<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Reply, Error> {
        self.rt.block_on(self.client.memgest_command(args))
    }

    /// See [`ClusterClient::memgest_create`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn memgest_create(&self, name: &str, kind: MemgestKind) -> Result<(), Error> {
        self.rt.block_on(self.client.memgest_create(name, kind))
    }

    /// See [`ClusterClient::memgest_move`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn memgest_move(&self, key: &[u8], name: &str) -> Result<(), Error> {
        self.rt.block_on(self.client.memgest_move(key, name))
    }

    /// See [`ClusterClient::memgest_key`].
    ///
    /// # Errors
    /// See [`Error`].
    pub fn memgest_key(&self, key: &[u8]) -> Result<Option<Vec<String>>, Error> {
        self.rt.block_on(self.client.memgest_key(key))
    }
}
