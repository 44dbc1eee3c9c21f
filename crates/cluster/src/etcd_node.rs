//! [`run_node_etcd`]: one `ringlet server --etcd URL` process — lease, agent, campaign,
//! command port and the cluster node, wired together.

use crate::control::ControlService;
use crate::launch::{run_node, NodeOpts};
use crate::node::ClusterNode;
use ringlet_control_service::etcd::agent::{
    follow_leader, follow_map, forward_usage, register_loop, EtcdBackend,
};
use ringlet_control_service::etcd::etcd_client;
use ringlet_control_service::etcd::etcd_client::{Compare, CompareOp, Txn, TxnOp};
use ringlet_control_service::etcd::keys::{decode_record, ClusterConfig, Keys};
use ringlet_control_service::etcd::leader::{
    campaign, serve_commands, Campaign, LeaderStatus, COMMAND_QUEUE_MAX,
};
use ringlet_control_service::etcd::lease::NodeLease;
use ringlet_control_service::etcd::{call, connect, EtcdError};
use ringlet_types::NodeId;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "/ringlet";
/// Default TTL of a process's etcd lease (etcd's minimum with its default 1 s election
/// timeout is 2 s). The failover window is about this plus etcd's expiry check (≤ 0.5 s).
pub const DEFAULT_LEASE_TTL_S: u64 = 2;
/// How long a starting process waits for etcd before giving up with an error.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Options of one etcd-mode process.
#[derive(Clone, Debug)]
pub struct EtcdNodeOpts {
    /// etcd client endpoints (`host:port` or `http://host:port`).
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub node_id: u32,
    /// Client (RESP) listener.
    pub bind: SocketAddr,
    /// Command port (drain, memgest commands; served by whichever process leads). Port 0:
    /// any free port; the leader's is in `<prefix>/leader`.
    pub control_bind: SocketAddr,
    pub lease_ttl_s: u64,
    pub memory_bytes: u64,
    /// Offered as `<prefix>/config` if none is stored yet (the first one stored wins).
    pub config: Option<ClusterConfig>,
    pub connect_timeout: Duration,
    /// The `default` user's password on the client port (the same on every node).
    pub requirepass: Option<String>,
    /// TLS on the client port (docs/design/cluster-tls.md).
    pub tls: Option<crate::tls::TlsFiles>,
    /// Admin HTTP port (`/metrics`); None: none.
    pub admin_port: Option<u16>,
    /// Bearer token the admin pages require.
    pub admin_token: Option<String>,
}

/// A running etcd-mode process.
pub struct EtcdNode {
    pub node: ClusterNode,
    /// RESP address.
    pub client_addr: SocketAddr,
    /// Command port address.
    pub control_addr: SocketAddr,
    pub status: Arc<LeaderStatus>,
    pub backend: Arc<EtcdBackend>,
    pub config: Option<ClusterConfig>,
    lease: Arc<NodeLease>,
    client: etcd_client::Client,
    tasks: Vec<JoinHandle<()>>,
}

impl EtcdNode {
    pub fn is_leader(&self) -> bool {
        self.status.is_leader()
    }

    /// Stop: campaign and agent tasks, the node, then revoke the lease so the cluster fails
    /// this node now rather than after the TTL (and a new leader is elected at once if this
    /// one led).
    pub async fn shutdown(mut self) {
        for t in &self.tasks {
            t.abort();
        }
        self.node.stop();
        self.lease.revoke(&mut self.client).await;
    }
}

/// Start everything for one process in the current (multi-thread) tokio runtime.
///
/// # Errors
/// etcd unreachable at start (named endpoints), a bad prefix or config, bind failures.
pub async fn run_node_etcd(o: &EtcdNodeOpts) -> Result<EtcdNode, EtcdError> {
    let keys = Keys::new(&o.prefix)?;
    if let Some(c) = &o.config {
        c.validate()?;
    }
    // The TLS files encrypt this process's member links (its control service, the leader's,
    // peers) before any opens.
    if let Some(f) = &o.tls {
        crate::tls::set_link_tls(f).map_err(|e| EtcdError::BadConfig(e.to_string()))?;
    }
    let mut client = connect(&o.endpoints, o.connect_timeout).await?;
    let config = ensure_config(&mut client, &keys, o.config.as_ref()).await?;
    let lease = NodeLease::grant(&mut client, o.lease_ttl_s).await?;
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(lease.clone().run(client.clone())));

    let node_id = NodeId(o.node_id);
    let backend = EtcdBackend::new(node_id, lease.clone());
    tasks.push(tokio::spawn(follow_map(
        backend.clone(),
        client.clone(),
        keys.clone(),
    )));
    tasks.push(tokio::spawn(follow_leader(
        backend.clone(),
        client.clone(),
        keys.clone(),
    )));
    tasks.push(tokio::spawn(forward_usage(backend.clone())));
    tasks.push(tokio::spawn(register_loop(
        backend.clone(),
        client.clone(),
        keys.clone(),
    )));
    let (_svc, agent_addr) =
        ControlService::start(SocketAddr::from(([127, 0, 0, 1], 0)), backend.clone(), None).await?;

    let listener = TcpListener::bind(o.control_bind).await?;
    let control_addr = listener.local_addr()?;
    let status = Arc::new(LeaderStatus::default());
    let (cmd_tx, cmd_rx) = tokio::sync::mpsc::channel(COMMAND_QUEUE_MAX);
    let b = backend.clone();
    tasks.push(tokio::spawn(serve_commands(
        listener,
        cmd_tx,
        status.clone(),
        Arc::new(move || b.current_map()),
        keys.clone(),
    )));
    tasks.push(tokio::spawn(campaign(Campaign {
        client: client.clone(),
        keys: keys.clone(),
        node: node_id,
        control: control_addr.to_string(),
        lease: lease.clone(),
        status: status.clone(),
        commands: cmd_rx,
    })));

    // The node's own lease equals the etcd TTL: its acks carry keepalive send times, so it
    // ends (minus the replica's margin) before etcd can expire the key.
    let (node, client_addr) = run_node(&NodeOpts {
        id: o.node_id,
        bind: o.bind,
        peer_port: 0,
        control: agent_addr.to_string(),
        lease_ms: lease.ttl_ms(),
        memory_bytes: o.memory_bytes,
        requirepass: o.requirepass.clone(),
        tls: o.tls.clone(),
        admin_port: o.admin_port,
        admin_token: o.admin_token.clone(),
    })
    .await?;
    Ok(EtcdNode {
        node,
        client_addr,
        control_addr,
        status,
        backend,
        config,
        lease,
        client,
        tasks,
    })
}

/// Store `offer` as `<prefix>/config` unless one exists; return what is stored.
async fn ensure_config(
    client: &mut etcd_client::Client,
    keys: &Keys,
    offer: Option<&ClusterConfig>,
) -> Result<Option<ClusterConfig>, EtcdError> {
    let key = keys.config();
    // The client refuses and_then after or_else: build the success branch first.
    let mut txn = Txn::new().when(vec![Compare::create_revision(
        key.clone(),
        CompareOp::Equal,
        0,
    )]);
    if let Some(c) = offer {
        let json = serde_json::to_vec(c).map_err(|e| EtcdError::BadConfig(e.to_string()))?;
        txn = txn.and_then(vec![TxnOp::put(key.clone(), json, None)]);
    }
    let txn = txn.or_else(vec![TxnOp::get(key.clone(), None)]);
    let r = call("config txn", client.txn(txn)).await?;
    if r.succeeded() {
        return Ok(offer.cloned());
    }
    let stored = r.op_responses().into_iter().find_map(|o| match o {
        etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
        _ => None,
    });
    match stored {
        Some(v) => {
            let c: ClusterConfig = decode_record(&key, &v)?;
            c.validate()?;
            if offer.is_some_and(|o| *o != c) {
                tracing::warn!(
                    "ringlet-etcd: {key} already holds {c:?}; using it instead of this process's flags"
                );
            }
            Ok(Some(c))
        }
        None => Ok(None),
    }
}
