//! Starting things: the control service ([`run_control`]), one node ([`run_node`]), and a
//! whole local cluster ([`up`]: the control plane in this process, N+S node processes).
//! Used by the `ringlet-cluster` binary and, through it, by `ringlet up` / `ringlet server
//! --cluster`.

use crate::control::{BootstrapPlan, ControlService, EmbeddedBackend};
use crate::node::{ClusterNode, NodeConfig};
use ringlet_control::ControlConfig;
use ringlet_engine::EngineConfig;
use ringlet_replica::ReplicaConfig;
use ringlet_types::{MemgestKind, NodeId};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Default heartbeat lease (control plane and nodes must agree). 1.5 s keeps the failover
/// window (lease + rebuild) near the 3 s goal; heartbeats every 100 ms give 15 chances, and
/// 1 s produced false failovers on a 2-core machine at load average 16 (debug builds).
pub const DEFAULT_LEASE_MS: u64 = 1500;

/// Retry-dedup entries a cluster node keeps ([`ReplicaConfig::dedup_clients_max`]): its
/// front never reuses a client id, so the table only has to outlive nothing; a small bound
/// keeps a late lookup harmless and the memory flat (~0.2 MiB instead of ~12 MiB).
pub const CLUSTER_DEDUP_CLIENTS: usize = 1024;

/// glibc malloc's mmap threshold, fixed (docs/design/cluster-memory.md). Left dynamic,
/// glibc raises it to the size of the largest mmapped block ever freed (up to 32 MiB): after
/// the first large connection buffer or pull page is freed, multi-MiB buffers (ec arenas
/// growing by doubling, pages) are carved from the heap, where each growth copies and leaves
/// the old block behind as resident free space. Fixed at glibc's initial 128 KiB, large
/// blocks stay mmapped: growth is an `mremap` (untouched capacity is not resident) and a
/// free is an `munmap`.
const MALLOC_MMAP_THRESHOLD_BYTES: i32 = 128 * 1024;

/// glibc malloc's trim threshold: free memory at the top of a heap is given back to the OS
/// only beyond this. Fixing the mmap threshold (above) also fixes this one at glibc's
/// initial 128 KiB, and a pipelined write run boxes up to `WRITE_RUN_MAX` (64) command
/// futures of ~8.8 KiB each (resp.rs `commands_together`): every run grew the heap's top by
/// ~0.5 MiB, faulting fresh zeroed pages in, and its free gave them back — a page-fault
/// churn that was 0.5-1 s of kernel time in a KELI graph load on three nodes (session 24,
/// docs/design/cluster-memory.md). At 4 MiB a few connections' runs reuse the same pages;
/// memory freed beyond that still goes back, and the `ringlet-trim` thread still returns
/// the heaps' free pages after connections close.
const MALLOC_TRIM_THRESHOLD_BYTES: i32 = 4 << 20;

/// Fix the allocator's tunables for a node process (see [`MALLOC_MMAP_THRESHOLD_BYTES`],
/// [`MALLOC_TRIM_THRESHOLD_BYTES`]). Idempotent; process-wide (every node of an in-process
/// test shares it).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes two integers and changes only malloc's parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES);
    }
}

/// Control service options.
#[derive(Clone, Debug)]
pub struct ControlOpts {
    pub bind: SocketAddr,
    /// Bootstrap when this many nodes joined (0: never bootstrap by itself).
    pub expect_nodes: usize,
    pub active: usize,
    pub default_memgest: Option<MemgestKind>,
    pub s: u8,
    pub d: u8,
    pub lease_ms: u64,
    /// Allow resharding while an ec memgest exists (default; `--no-ec-moves` turns it off,
    /// ControlConfig::ec_moves).
    pub ec_moves: bool,
}

/// Start the embedded control plane service in the current runtime.
///
/// # Errors
/// Bad config or bind failure.
pub async fn run_control(o: &ControlOpts) -> std::io::Result<(Arc<ControlService>, SocketAddr)> {
    let backend = EmbeddedBackend::new(ControlConfig {
        s: o.s,
        d: o.d,
        lease_ms: o.lease_ms,
        ec_moves: o.ec_moves,
    })
    .map_err(|e| std::io::Error::other(e.to_string()))?;
    let plan = (o.expect_nodes > 0).then_some(BootstrapPlan {
        expect_nodes: o.expect_nodes,
        active: o.active,
        default_memgest: o.default_memgest,
    });
    ControlService::start(o.bind, Arc::new(backend), plan).await
}

/// Node options.
#[derive(Clone, Debug)]
pub struct NodeOpts {
    pub id: u32,
    pub bind: SocketAddr,
    /// Peer port (0: any free port; peers learn it from the map).
    pub peer_port: u16,
    pub control: String,
    pub lease_ms: u64,
    pub memory_bytes: u64,
    /// The `default` user's password on the client port (`--requirepass`); the same on
    /// every node of a cluster.
    pub requirepass: Option<String>,
    /// TLS on the client port (docs/design/cluster-tls.md).
    pub tls: Option<crate::tls::TlsFiles>,
    /// Admin HTTP port (`/metrics`, status; resp/admin.rs) on the bind address; 0 picks a
    /// free port; None: none.
    pub admin_port: Option<u16>,
    /// Bearer token the admin pages require (`--admin-token`); None: none.
    pub admin_token: Option<String>,
}

/// Environment variables through which `up` gives its nodes the TLS files (the CLI's
/// `--tls-cert-file`, `--tls-key-file`, `--tls-ca-cert-file` read them).
pub const TLS_CERT_ENV: &str = "RINGLET_TLS_CERT_FILE";
pub const TLS_KEY_ENV: &str = "RINGLET_TLS_KEY_FILE";
pub const TLS_CA_ENV: &str = "RINGLET_TLS_CA_CERT_FILE";

/// Environment variable through which `up` gives its nodes the client password (not argv:
/// other local users can read a process's arguments).
pub const REQUIREPASS_ENV: &str = "RINGLET_REQUIREPASS";

/// Environment variable through which `up` gives its nodes the admin token (`--admin-token`).
pub const ADMIN_TOKEN_ENV: &str = "RINGLET_ADMIN_TOKEN";

/// Start a node (client RESP listener, peer listener, control link, driver) in the current
/// runtime. Returns the node and its client address.
///
/// # Errors
/// Bind or engine failures.
pub async fn run_node(o: &NodeOpts) -> std::io::Result<(ClusterNode, SocketAddr)> {
    run_node_shm(o, None).await
}

/// [`run_node`], exporting the engine for one-sided reads on `shm_socket` (`ringlet server
/// --cluster ... --shm-socket PATH`; docs/design/cluster-shm-reads.md).
///
/// # Errors
/// As [`run_node`]; the socket cannot be bound (another live node owns it).
pub async fn run_node_shm(
    o: &NodeOpts,
    shm_socket: Option<std::path::PathBuf>,
) -> std::io::Result<(ClusterNode, SocketAddr)> {
    tune_allocator();
    // The TLS files encrypt the member links too (before any link opens).
    if let Some(f) = &o.tls {
        crate::tls::set_link_tls(f).map_err(std::io::Error::other)?;
    }
    let (fds, want) = crate::raise_fd_limit();
    if fds < want {
        tracing::warn!(
            "ringlet node: open-file limit {fds} (hard) is below the {want} that {} clients need: clients past \
             about {} will wait in the listen backlog; raise `ulimit -Hn`",
            ringlet_types::limits::CONNECTIONS_MAX,
            fds.saturating_sub(u64::from(ringlet_types::limits::FDS_RESERVED))
        );
    }
    let listener = crate::listen(o.bind)?;
    let client_addr = listener.local_addr()?;
    // A restarted process must carry a higher incarnation: wall-clock ms at start does.
    let incarnation = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64);
    let cfg = NodeConfig {
        id: NodeId(o.id),
        incarnation,
        client_addr,
        peer_bind: SocketAddr::new(o.bind.ip(), o.peer_port),
        control_addr: o.control.clone(),
        engine: EngineConfig {
            memory_bytes_max: o.memory_bytes,
            ..EngineConfig::default()
        },
        replica: ReplicaConfig {
            heartbeat_interval_ms: 100,
            lease_ms: o.lease_ms,
            lease_margin_ms: 100,
            retransmit_ms: 100,
            // TCP does not lose frames; a retry shorter than a loaded page round trip
            // discards every late page (see docs/design/cluster-runtime.md).
            pull_retry_ms: 1000,
            repair_interval_ms: 250,
            rebuild_timeout_ms: rebuild_timeout_ms(),
            // The ec values this node holds as a data node count against its memory budget
            // too, so a full node refuses ec writes with OOM instead of growing its arenas
            // past --memory-mb.
            ec_data_bytes_max: o.memory_bytes,
            // The front stamps a fresh client id per request and retries under a new one,
            // so no dedup entry is ever looked up again: keep only a few (each ~190 B; the
            // default 65,536 held ~12 MiB per node, docs/design/cluster-memory.md).
            dedup_clients_max: CLUSTER_DEDUP_CLIENTS,
            ..ReplicaConfig::default()
        },
        tick_ms: 10,
        shm_socket: shm_socket.clone(),
    };
    if let Some(p) = &shm_socket {
        tracing::info!("ringlet node {}: shm socket {}", o.id, p.display());
    }
    let tls = match &o.tls {
        None => None,
        Some(f) => Some(crate::resp::ClientTls {
            acceptor: f.acceptor().map_err(std::io::Error::other)?,
            connector: f.connector().map_err(std::io::Error::other)?,
        }),
    };
    let admin = match o.admin_port {
        Some(p) => {
            let l = crate::listen(SocketAddr::new(o.bind.ip(), p))?;
            tracing::info!("ringlet node {}: admin http on {}", o.id, l.local_addr()?);
            if let Some(t) = &o.admin_token {
                if !ringlet_server::config::admin_token_ok(t) {
                    return Err(std::io::Error::other(
                        "--admin-token: must be 1 to 256 visible characters",
                    ));
                }
            }
            Some((l, o.admin_token.as_deref().map(std::sync::Arc::from)))
        }
        None => None,
    };
    let (node, _peer) = ClusterNode::start(cfg).await?;
    tokio::spawn(crate::resp::serve(
        listener,
        node.clone(),
        o.requirepass.clone(),
        tls,
        admin,
    ));
    Ok((node, client_addr))
}

/// How long a rebuild waits for a majority of a replicated memgest's old replicas before it
/// serves what it has and reports possible loss: 20 s, or `RINGLET_REBUILD_TIMEOUT_MS` (read
/// by each node process; `up` passes its environment on). Operators who prefer
/// unavailability to any possible loss set it high; tests set it high to prove a takeover
/// did not need it.
pub fn rebuild_timeout_ms() -> u64 {
    std::env::var("RINGLET_REBUILD_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// Longest `up` waits for every node to serve the control plane's epoch.
const UP_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// `up` options.
#[derive(Clone, Debug)]
pub struct UpOpts {
    pub nodes: usize,
    pub spares: usize,
    pub base_port: u16,
    /// Defaults to the port after the last node's.
    pub control_port: Option<u16>,
    pub default_memgest: Option<MemgestKind>,
    pub lease_ms: u64,
    /// Allow resharding while an ec memgest exists (default; off with `--no-ec-moves`).
    pub ec_moves: bool,
    pub memory_bytes: u64,
    /// The binary that runs a node (normally this executable).
    pub exe: std::path::PathBuf,
    /// Its arguments for one node; [`ringlet_cluster_node_args`] for the `ringlet-cluster`
    /// binary, [`ringlet_server_node_args`] for `ringlet server --cluster`.
    pub node_args: NodeArgsFn,
    /// The client password every node requires (passed through [`REQUIREPASS_ENV`]).
    pub requirepass: Option<String>,
    /// The bearer token every node's admin pages require (passed through
    /// [`ADMIN_TOKEN_ENV`]).
    pub admin_token: Option<String>,
    /// Placement-group shape (s data, d redundant nodes); `None`: [`pg_shape`].
    pub pg: Option<(u8, u8)>,
    /// TLS on every node's client port (given to the nodes through [`TLS_CERT_ENV`] etc.).
    pub tls: Option<crate::tls::TlsFiles>,
    /// Node i gets an admin HTTP port at its client port + this offset (`--admin-port` is
    /// appended to its arguments: only for binaries whose node command takes it, i.e.
    /// `ringlet server`); None: no admin ports.
    pub admin_offset: Option<u16>,
    /// Worker threads of each node's runtime (`--threads N` appended to its arguments: only
    /// for binaries whose node command takes it, i.e. `ringlet server`); 0: the node's
    /// default (2).
    pub node_threads: usize,
    /// Node i exports its engine for one-sided reads on `DIR/node-<client port>.sock`
    /// (`--shm-socket` is appended to its arguments; both `ringlet server` and
    /// `ringlet-cluster node` take it); None: no export.
    pub shm_dir: Option<std::path::PathBuf>,
    /// The control plane's HTTP status port (crate::control_http): `/metrics`, `/api/events`
    /// and a page linking the nodes' pages. None: not served.
    pub status_port: Option<u16>,
    /// Run the load balancer (crate::balancer) beside the control plane once the cluster is
    /// ready. None: slots move only when an operator asks.
    pub auto_balance: Option<BalanceOpts>,
    /// Start a node process again when it exits after the cluster was ready (it rejoins
    /// empty, as a spare with a new incarnation), at most [`UP_RESTARTS_PER_MINUTE`] times a
    /// minute per node. Off: an exit is reported and the node stays down.
    pub restart_nodes: bool,
}

/// At most this many restarts of one node within a minute (`up --restart`): a node that
/// keeps exiting at start is left down rather than restarted in a loop.
pub const UP_RESTARTS_PER_MINUTE: usize = 3;

/// How often `up` looks for node processes that exited.
const UP_CHILD_POLL: Duration = Duration::from_millis(250);

/// The node processes `up` started: their commands (to start one again) and their last
/// restart times.
struct Children {
    cmds: Vec<std::process::Command>,
    procs: Vec<Option<std::process::Child>>,
    ports: Vec<u16>,
    restarts: Vec<std::collections::VecDeque<std::time::Instant>>,
}

impl Children {
    /// Nodes whose process exited since the last call: (node id, pid, port, status). The
    /// process is reaped and forgotten.
    fn exited(&mut self) -> Vec<(usize, u32, u16, std::process::ExitStatus)> {
        let mut out = Vec::new();
        for (i, slot) in self.procs.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            if let Ok(Some(status)) = c.try_wait() {
                out.push((i + 1, c.id(), self.ports[i], status));
                *slot = None;
            }
        }
        out
    }

    /// Start node `id` again unless it was restarted [`UP_RESTARTS_PER_MINUTE`] times in the
    /// last minute; the new pid.
    fn restart(&mut self, id: usize) -> Result<u32, String> {
        let i = id - 1;
        let now = std::time::Instant::now();
        let recent = &mut self.restarts[i];
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > Duration::from_secs(60))
        {
            recent.pop_front();
        }
        if recent.len() >= UP_RESTARTS_PER_MINUTE {
            return Err(format!(
                "restarted {UP_RESTARTS_PER_MINUTE} times in the last minute; left down"
            ));
        }
        recent.push_back(now);
        let child = self.cmds[i].spawn().map_err(|e| e.to_string())?;
        let pid = child.id();
        self.procs[i] = Some(child);
        Ok(pid)
    }

    fn kill_all(&mut self) {
        for c in self.procs.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `up --auto-balance` settings (crate::balancer::AutoBalance without the addresses).
#[derive(Clone, Debug)]
pub struct BalanceOpts {
    pub cfg: ringlet_control::BalanceConfig,
    pub window: Duration,
    pub moves_per_minute: u32,
    /// KiB/s per move's copy; 0: unlimited.
    pub rate_kib_s: u32,
    pub move_timeout: Duration,
}

/// Where `ringlet up` writes the cluster secret of the control plane on `control_port` (a
/// file only this user can read); admin commands look there when given no secret.
pub fn up_secret_file(control_port: u16) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ringlet-cluster-{control_port}.secret"))
}

/// The shared-memory socket `up --shm-dir DIR` gives the node on `port`.
pub fn shm_socket_path(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    dir.join(format!("node-{port}.sock"))
}

/// Builds a node process's arguments from (node id, client port, control address, lease ms,
/// engine memory bytes).
pub type NodeArgsFn = fn(u32, u16, &str, u64, u64) -> Vec<String>;

/// `ringlet-cluster node --id ID --port P --control ADDR --lease-ms L --memory M`.
pub fn ringlet_cluster_node_args(
    id: u32,
    port: u16,
    control: &str,
    lease_ms: u64,
    memory: u64,
) -> Vec<String> {
    vec![
        "node".into(),
        "--id".into(),
        id.to_string(),
        "--port".into(),
        port.to_string(),
        "--control".into(),
        control.into(),
        "--lease-ms".into(),
        lease_ms.to_string(),
        "--memory".into(),
        memory.to_string(),
    ]
}

/// `ringlet server --port P --cluster ADDR --node-id ID --lease-ms L --memory-mb M`
/// (`ringlet up --nodes` in crates/cli).
pub fn ringlet_server_node_args(
    id: u32,
    port: u16,
    control: &str,
    lease_ms: u64,
    memory: u64,
) -> Vec<String> {
    vec![
        "server".into(),
        "--port".into(),
        port.to_string(),
        "--cluster".into(),
        control.into(),
        "--node-id".into(),
        id.to_string(),
        "--lease-ms".into(),
        lease_ms.to_string(),
        "--memory-mb".into(),
        (memory >> 20).max(1).to_string(),
    ]
}

/// Ask a node for `CLUSTER INFO` over RESP (readiness polling), after AUTH if the nodes
/// have a password, over TLS if their client ports use it.
pub async fn cluster_info(
    addr: SocketAddr,
    password: Option<&str>,
    tls: Option<&tokio_rustls::TlsConnector>,
) -> Option<String> {
    let tcp = tokio::time::timeout(
        Duration::from_millis(500),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .ok()?
    .ok()?;
    match tls {
        None => cluster_info_on(tcp, password).await,
        Some(c) => {
            let name = rustls_pki_types::ServerName::IpAddress(addr.ip().into());
            let s = tokio::time::timeout(Duration::from_millis(2_000), c.connect(name, tcp))
                .await
                .ok()?
                .ok()?;
            cluster_info_on(s, password).await
        }
    }
}

async fn cluster_info_on<S>(mut s: S, password: Option<&str>) -> Option<String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut req = Vec::new();
    if let Some(p) = password {
        ringlet_codec::resp::encode_request(&mut req, &[b"AUTH", p.as_bytes()]);
    }
    ringlet_codec::resp::encode_request(&mut req, &[b"CLUSTER", b"INFO"]);
    s.write_all(&req).await.ok()?;
    s.flush().await.ok()?;
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    loop {
        let n = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        // The AUTH reply (+OK) comes first; an error there is returned by the next decode.
        let mut at = 0;
        while let Ok(Some((r, n))) = ringlet_codec::resp::decode_reply(&got[at..]) {
            match r {
                ringlet_codec::resp::Reply::Bulk(b) => return String::from_utf8(b).ok(),
                ringlet_codec::resp::Reply::Error(_) => return None,
                _ => at += n,
            }
        }
        if got.len() > 64 * 1024 {
            return None;
        }
    }
}

/// Placement-group shape (s data nodes, d redundant nodes) `up` bootstraps with for a
/// default memgest on `nodes` active nodes: `ec:K+M` gets Ring's SRS(K, M, K) shape (s = K,
/// d = M; e.g. ec:3+2 → 3 + 2, the PG of Ring's evaluation), so the default memgest fits and
/// keeps its full M-failure tolerance; otherwise 3 + 2 from five nodes on, 2 + 1 on three or
/// four (rep:3 = the whole PG), and 1 + 1 on two (rep:2, ec:1+1), so that `up --nodes 2`
/// starts without flags.
pub fn pg_shape(nodes: usize, default_memgest: Option<MemgestKind>) -> (u8, u8) {
    match default_memgest {
        Some(MemgestKind::Ec { k, m }) if usize::from(k) + usize::from(m) <= nodes => (k, m),
        // Five nodes or more: Ring's evaluation shape, so `MEMGEST CREATE cold ec 3 2` (any
        // ec:K+M with M <= 2) and rep:R up to 5 fit without flags.
        _ if nodes >= 5 => (3, 2),
        _ if nodes == 2 => (1, 1),
        _ => (2, 1),
    }
}

/// Run a local cluster until Ctrl-C / SIGTERM: the control plane here, `nodes + spares` node
/// processes on `base_port..`, spares last. Prints one line per node (`node ID pid PID port
/// PORT`), then `ringlet cluster ready ...` once every node serves the bootstrapped map.
///
/// # Errors
/// Bind or spawn failures.
pub async fn up(o: &UpOpts) -> std::io::Result<()> {
    let total = o.nodes + o.spares;
    let (s, d) = o.pg.unwrap_or_else(|| pg_shape(o.nodes, o.default_memgest));
    if s == 0 || o.nodes < usize::from(s) + usize::from(d) {
        return Err(std::io::Error::other(format!(
            "placement groups of s={s} d={d} need at least {} active nodes (--nodes {})",
            usize::from(s) + usize::from(d),
            o.nodes
        )));
    }
    // Readiness probes speak TLS where the nodes do; bad files fail here, before any node.
    let tls = match &o.tls {
        Some(f) => Some(f.connector().map_err(std::io::Error::other)?),
        None => None,
    };
    if let Some(f) = &o.tls {
        f.check().map_err(std::io::Error::other)?;
    }
    // The cluster secret (docs/design/cluster-auth.md): the one given by the environment, else
    // a fresh one. The control plane here and every node spawned below prove it on connect.
    let secret = match crate::auth::ClusterSecret::load(None) {
        Ok(Some(s)) => s,
        Ok(None) => crate::auth::ClusterSecret::generate().map_err(std::io::Error::other)?,
        Err(e) => return Err(std::io::Error::other(e)),
    };
    crate::auth::set_process_secret(Some(secret.clone()));
    if crate::auth::process_secret() != Some(&secret) {
        return Err(std::io::Error::other(
            "cluster secret already fixed differently in this process",
        ));
    }
    // The control service runs in this process: with TLS files its links are mutual TLS.
    if let Some(f) = &o.tls {
        crate::tls::set_link_tls(f).map_err(std::io::Error::other)?;
    }
    let control_port = o
        .control_port
        .unwrap_or(o.base_port.saturating_add(total as u16));
    let (svc, caddr) = run_control(&ControlOpts {
        bind: SocketAddr::from(([127, 0, 0, 1], control_port)),
        expect_nodes: total,
        active: o.nodes,
        default_memgest: o.default_memgest,
        s,
        d,
        lease_ms: o.lease_ms,
        ec_moves: o.ec_moves,
    })
    .await?;
    if let Some(port) = o.status_port {
        // Loopback only without a token, as the nodes' admin ports.
        let ip: [u8; 4] = if o.admin_token.is_some() {
            [0, 0, 0, 0]
        } else {
            [127, 0, 0, 1]
        };
        let l = tokio::net::TcpListener::bind(SocketAddr::from((ip, port))).await?;
        let pages = crate::control_http::ControlPages {
            svc: svc.clone(),
            admin_ports: o
                .admin_offset
                .map(|off| {
                    (0..total)
                        .map(|i| {
                            let port = o.base_port.saturating_add(i as u16);
                            ((i + 1) as u32, port.saturating_add(off))
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        tokio::spawn(ringlet_server::admin::serve(
            l,
            Arc::new(pages),
            o.admin_token.as_deref().map(Arc::from),
        ));
        println!("control status page http://127.0.0.1:{port}/");
    }
    // Admin commands (`ringlet node drain|map --control ...`) need the secret too: a file only
    // this user can read.
    let secret_file = up_secret_file(caddr.port());
    secret
        .write_file(&secret_file)
        .map_err(std::io::Error::other)?;
    println!("cluster secret file {}", secret_file.display());
    let mut children = Children {
        cmds: Vec::new(),
        procs: Vec::new(),
        ports: Vec::new(),
        restarts: vec![Default::default(); total],
    };
    for i in 0..total {
        let port = o.base_port.saturating_add(i as u16);
        let args = (o.node_args)(
            (i + 1) as u32,
            port,
            &caddr.to_string(),
            o.lease_ms,
            o.memory_bytes,
        );
        let mut args = args;
        if let Some(off) = o.admin_offset {
            args.push("--admin-port".into());
            args.push(port.saturating_add(off).to_string());
        }
        if o.node_threads != 0 {
            args.push("--threads".into());
            args.push(o.node_threads.to_string());
        }
        let shm = o.shm_dir.as_deref().map(|d| shm_socket_path(d, port));
        if let Some(p) = &shm {
            args.push("--shm-socket".into());
            args.push(p.display().to_string());
        }
        let mut cmd = std::process::Command::new(&o.exe);
        cmd.args(&args)
            .env(crate::auth::SECRET_ENV, secret.to_hex())
            .stdin(std::process::Stdio::null());
        match &o.requirepass {
            Some(p) => cmd.env(REQUIREPASS_ENV, p),
            None => cmd.env_remove(REQUIREPASS_ENV),
        };
        match &o.admin_token {
            Some(t) => cmd.env(ADMIN_TOKEN_ENV, t),
            None => cmd.env_remove(ADMIN_TOKEN_ENV),
        };
        match &o.tls {
            Some(t) => cmd
                .env(TLS_CERT_ENV, &t.cert)
                .env(TLS_KEY_ENV, &t.key)
                .env(TLS_CA_ENV, &t.ca),
            None => cmd
                .env_remove(TLS_CERT_ENV)
                .env_remove(TLS_KEY_ENV)
                .env_remove(TLS_CA_ENV),
        };
        let child = cmd.spawn()?;
        match &shm {
            Some(p) => println!(
                "node {} pid {} port {port} shm {}",
                i + 1,
                child.id(),
                p.display()
            ),
            None => println!("node {} pid {} port {port}", i + 1, child.id()),
        }
        children.cmds.push(cmd);
        children.procs.push(Some(child));
        children.ports.push(port);
    }
    let addrs: Vec<SocketAddr> = (0..total)
        .map(|i| SocketAddr::from(([127, 0, 0, 1], o.base_port.saturating_add(i as u16))))
        .collect();
    let stop = async {
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                r = tokio::signal::ctrl_c() => r,
                _ = term.recv() => Ok(()),
            }
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c().await
    };
    let ready = async {
        let deadline = tokio::time::Instant::now() + UP_READY_TIMEOUT;
        loop {
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "the cluster did not become ready within {} s (see the nodes' logs above)",
                    UP_READY_TIMEOUT.as_secs()
                ));
            }
            // A node that exits while starting (a port in use, a bad flag) never gets
            // ready: say which, now, rather than after the timeout.
            if let Some((id, pid, port, status)) = children.exited().into_iter().next() {
                return Err(format!(
                    "node {id} (pid {pid}, port {port}) exited while the cluster was starting: \
                     {status} (see its log above)"
                ));
            }
            let map = svc.map();
            if map.placement.is_some() {
                let want = format!("cluster_current_epoch:{}\r\n", map.epoch.0);
                let mut all = true;
                for a in &addrs {
                    match cluster_info(*a, o.requirepass.as_deref(), tls.as_ref()).await {
                        Some(i) if i.starts_with("cluster_state:ok") && i.contains(&want) => {}
                        _ => {
                            all = false;
                            break;
                        }
                    }
                }
                if all {
                    return Ok(map.epoch);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::pin!(stop);
    let mut outcome = Ok(());
    tokio::select! {
        r = ready => match r {
            Ok(e) => {
                println!(
                    "ringlet cluster ready: {} nodes + {} spares on 127.0.0.1:{}..{}, control {caddr}, epoch {e}, placement groups s={s} d={d}",
                    o.nodes, o.spares, o.base_port, o.base_port as usize + total - 1
                );
                use std::io::Write;
                let _ = std::io::stdout().flush();
                let balancer = o.auto_balance.as_ref().map(|b| {
                    println!(
                        "load balancer on: windows of {} s, at most {} moves a minute",
                        b.window.as_secs_f64(),
                        b.moves_per_minute
                    );
                    tokio::spawn(crate::balancer::run(crate::balancer::AutoBalance {
                        control: caddr.to_string(),
                        access: crate::balancer::NodeAccess {
                            password: o.requirepass.clone(),
                            tls: tls.clone(),
                        },
                        cfg: b.cfg,
                        window: b.window,
                        moves_per_minute: b.moves_per_minute,
                        rate_kib_s: b.rate_kib_s,
                        move_timeout: b.move_timeout,
                    }))
                });
                supervise(&mut children, o.restart_nodes, &mut stop).await;
                if let Some(b) = balancer {
                    b.abort();
                }
            }
            Err(why) => outcome = Err(std::io::Error::other(why)),
        },
        _ = &mut stop => {}
    }
    children.kill_all();
    let _ = std::fs::remove_file(&secret_file);
    outcome
}

/// Until `stop` completes: report every node process that exits and, with `restart`, start
/// it again (bounded by [`UP_RESTARTS_PER_MINUTE`]); the control plane fails the exited
/// node over to a spare either way.
async fn supervise(
    children: &mut Children,
    restart: bool,
    stop: &mut (impl std::future::Future + Unpin),
) {
    loop {
        tokio::select! {
            _ = &mut *stop => return,
            _ = tokio::time::sleep(UP_CHILD_POLL) => {}
        }
        for (id, pid, port, status) in children.exited() {
            tracing::warn!("node {id} (pid {pid}, port {port}) exited: {status}");
            if !restart {
                continue;
            }
            match children.restart(id) {
                Ok(pid) => tracing::warn!(
                    "node {id} started again (pid {pid}, port {port}): it rejoins empty, as a spare"
                ),
                Err(why) => tracing::warn!("node {id} not started again: {why}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_shape_fits_every_node_count_up_accepts() {
        for nodes in 2..=9 {
            let (s, d) = pg_shape(nodes, None);
            assert!(
                s >= 1 && usize::from(s) + usize::from(d) <= nodes,
                "{nodes}: {s}+{d}"
            );
        }
        assert_eq!(pg_shape(2, None), (1, 1));
        assert_eq!(pg_shape(3, None), (2, 1));
        assert_eq!(pg_shape(5, None), (3, 2));
        assert_eq!(pg_shape(6, Some(MemgestKind::Ec { k: 4, m: 2 })), (4, 2));
        // An ec default that does not fit falls back to the node count's shape (and the
        // memgest is refused by name later, not here).
        assert_eq!(pg_shape(3, Some(MemgestKind::Ec { k: 3, m: 2 })), (2, 1));
    }
}
