//! The etcd backend: the cluster's control plane kept in etcd (v3 API, tested with etcd 3.4).
//! Several `ringlet server --etcd URL` processes, on one machine or many, form one cluster
//! with no embedded control process: node liveness is an etcd lease per process, one
//! process is elected leader and runs the sans-I/O `ControlPlane`, and the cluster map lives
//! under a key prefix.
//!
//! ```text
//!            etcd:  <prefix>/nodes/<id> (lease)   <prefix>/leader (lease)   <prefix>/map
//!                        ^   |                          ^                    ^     |
//!          put on Join,  |   | watch (prefix)           | txn: create if     |     | watch
//!          keepalive     |   v                          | absent             |     v
//!  +-- each ringlet server --etcd process --------------------------------------------------+
//!  |  NodeLease (keepalive task) ─ ok_sent_ms ─┐                                             |
//!  |                                           v                                             |
//!  |  ClusterNode ──ControlClient──▶ ControlService(EtcdBackend: the node's local agent)     |
//!  |     Join/Heartbeat ◀── HeartbeatAck only while the etcd lease is proven alive,          |
//!  |                        Map from the <prefix>/map watch, Fenced once the map fails it    |
//!  |  Campaign: if leader ─ ControlPlane::resume(map) ─ nodes watch → Join/Heartbeat/Tick    |
//!  |            ─ Publish → txn(if leader key's create_revision unchanged) put <prefix>/map  |
//!  |            ─ command port: drain, MEMGEST commands (relayed by agents), usage reports   |
//!  +-----------------------------------------------------------------------------------------+
//! ```
//!
//! Goals:
//! - the same `ControlPlane` decides in both modes; the node talks to the same
//!   [`ControlService`](crate::ControlService) protocol, here served by a
//!   per-process [`agent::EtcdBackend`] (an implementation of `ControlBackend`);
//! - a node serves only while its etcd lease is provably alive: heartbeat acks carry the send
//!   time of the last answered etcd keepalive, so the node's own lease ends before etcd can
//!   expire its key and the leader hand its slots to a spare;
//! - a deposed leader cannot publish (map writes are transactions guarded by the leader
//!   key's create revision); a new leader resumes from the stored map, so epochs never go
//!   backwards;
//! - every etcd call has a deadline, every retry loop a bounded backoff, and a process that
//!   cannot reach etcd at start fails with a message naming the endpoints.
//!
//! Commands (drain, `MEMGEST ...`) that reach a node's agent are relayed by the service to
//! the leader's command port (`ControlBackend::command_forward`); nodes' usage reports are
//! forwarded there too, so the leader decides memgest drops as the embedded service does.
//!
//! Non-goals (now): TLS/auth to etcd, several clusters per process, compaction of etcd's
//! history (an operator's etcd setting).
//!
//! Modules: [`keys`] (what is stored where), [`lease`] (the process's etcd lease),
//! [`agent`] (the node-facing `ControlBackend`), [`leader`] (election, the leader loop and
//! its command port); running a node on it (`run_node_etcd`) is `ringlet_cluster::etcd_node`.
//! Design notes and figures: `docs/design/control-etcd.md`.

pub mod agent;
pub mod keys;
pub mod leader;
pub mod lease;

/// The etcd client, for the code that runs a node on this backend (`ringlet_cluster::etcd_node`).
pub use etcd_client;
pub use keys::{ClusterConfig, Keys, LeaderRecord, NodeRecord};

use std::future::Future;
use std::time::Duration;

/// Deadline of one etcd request (get, put, txn, grant, opening a stream). etcd answers a
/// loopback request in about a millisecond; 2 s covers an etcd leader election (default
/// election timeout 1 s) without letting a dead endpoint hang a task.
pub const ETCD_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// First delay of every etcd retry loop; doubles up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest delay between retries of an etcd operation.
pub const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// What can go wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("bad etcd key prefix {0:?}: it must start with '/', not be '/' alone, be at most 256 bytes and contain no whitespace")]
    BadPrefix(String),
    #[error("bad cluster config: {0}")]
    BadConfig(String),
    #[error("bad value under {key}: {why}")]
    BadValue { key: String, why: String },
    #[error("cannot reach etcd at {endpoints}: {why}")]
    Unreachable { endpoints: String, why: String },
    #[error("etcd request `{op}` got no answer within {} ms", ETCD_CALL_TIMEOUT.as_millis())]
    Timeout { op: &'static str },
    #[error("etcd request `{op}` failed: {err}")]
    Etcd {
        op: &'static str,
        err: etcd_client::Error,
    },
    #[error("etcd watch on {0} ended")]
    WatchEnded(String),
    #[error("no longer the leader (the leader key changed)")]
    Deposed,
    #[error("this process's etcd lease was lost")]
    LeaseLost,
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// One etcd request with [`ETCD_CALL_TIMEOUT`].
///
/// # Errors
/// [`EtcdError::Timeout`] or the client's error, both naming `op`.
pub async fn call<T>(
    op: &'static str,
    f: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdError> {
    match tokio::time::timeout(ETCD_CALL_TIMEOUT, f).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(err)) => Err(EtcdError::Etcd { op, err }),
        Err(_) => Err(EtcdError::Timeout { op }),
    }
}

/// `host:port` → `http://host:port` (the client wants a scheme).
pub fn endpoint_url(e: &str) -> String {
    if e.starts_with("http://") || e.starts_with("https://") {
        e.to_string()
    } else {
        format!("http://{e}")
    }
}

/// Connect and prove etcd answers (a `status` request) within `deadline`.
///
/// # Errors
/// [`EtcdError::Unreachable`] naming the endpoints and the cause.
pub async fn connect(
    endpoints: &[String],
    deadline: Duration,
) -> Result<etcd_client::Client, EtcdError> {
    let urls: Vec<String> = endpoints.iter().map(|e| endpoint_url(e)).collect();
    let named = urls.join(",");
    let unreachable = |why: String| EtcdError::Unreachable {
        endpoints: named.clone(),
        why,
    };
    if urls.is_empty() {
        return Err(unreachable("no endpoint given".into()));
    }
    let opts = etcd_client::ConnectOptions::new()
        .with_connect_timeout(deadline)
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2));
    let work = async {
        let mut c = etcd_client::Client::connect(&urls, Some(opts))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        c.status().await.map_err(|e| unreachable(e.to_string()))?;
        Ok(c)
    };
    match tokio::time::timeout(deadline, work).await {
        Ok(r) => r,
        Err(_) => Err(unreachable(format!(
            "no answer within {} ms",
            deadline.as_millis()
        ))),
    }
}

/// Bounded exponential backoff for retry loops.
#[derive(Debug)]
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(BACKOFF_MIN)
    }
    pub(crate) fn reset(&mut self) {
        self.0 = BACKOFF_MIN;
    }
    pub(crate) async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
    }
}

/// Log to stderr at most once per `every_ms` per call site (retry loops must not flood).
#[derive(Debug, Default)]
pub(crate) struct RateLog {
    last_ms: Option<u64>,
}

impl RateLog {
    pub(crate) fn log(&mut self, every_ms: u64, msg: impl FnOnce() -> String) {
        let now = ringlet_link::mono_ms();
        if self
            .last_ms
            .is_none_or(|l| now >= l.saturating_add(every_ms))
        {
            self.last_ms = Some(now);
            tracing::warn!("ringlet-etcd: {}", msg());
        }
    }
}
