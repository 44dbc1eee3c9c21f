//! `ringlet`: run a node (`server`), run Ringlet's main job locally (`up`), talk to a node
//! (`get`, `set`, `del`, `incr`, `mget`, `ping`, `info`), load-test it (`bench`), and bulk-load
//! records into it (`load`).
//!
//! Stable output contract (tests and scripts parse it): once a node serves, `server` and `up`
//! print exactly one line `ringlet: listening on <ip>:<port>` on stdout (and, with an admin
//! port, `ringlet: admin on http://<ip>:<port>/metrics`), then flush. Logs go to stderr
//! (`RUST_LOG`, default `info`).

mod client;
mod drain;
mod etcd;
mod load;
mod memgest;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use ringlet_server::{Config, Server, DEFAULT_PORT};
use std::io::Write;
use std::net::IpAddr;

#[derive(Parser)]
#[command(
    name = "ringlet",
    version,
    about = "Ringlet: a distributed in-memory key-value store"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one node in the foreground.
    Server(NodeArgs),
    /// Run Ringlet locally with nothing else installed: one node, or with `--nodes N
    /// --spares S` a cluster (embedded control plane + N+S node processes). Ctrl-C stops it.
    Up(UpArgs),
    /// Run the embedded control plane on its own, for nodes on other machines (`ringlet server
    /// --cluster HOST:PORT --node-id ID` on each); `ringlet up` runs it in-process instead.
    Control(ControlArgs),
    /// Cluster node administration (`ringlet node drain ID --control HOST:PORT`, or `--port P`
    /// of any node); also spelled `ringlet cluster ...` (`ringlet cluster rebalance --port P`).
    #[command(alias = "cluster")]
    Node(NodeCmd),
    /// Memgests of a cluster: create, drop, default, list, info, move, key.
    Memgest(memgest::MemgestCmd),
    /// GET key.
    Get(KeyCmd),
    /// SET key value [--ex SECONDS].
    Set(SetCmd),
    /// DEL key [key ...].
    Del(KeysCmd),
    /// INCR key [--by N].
    Incr(IncrCmd),
    /// MGET key [key ...].
    Mget(KeysCmd),
    /// PING.
    Ping(Conn),
    /// INFO [section].
    Info(InfoCmd),
    /// Load generator against a node, Redis or memcached (see `ringlet bench --help`).
    Bench(ringlet_bench::BenchArgs),
    /// Bulk-load records and links from CSV, JSON Lines, SQLite or PostgreSQL by a mapping
    /// (docs/design/loader.md).
    Load(Box<load::LoadArgs>),
    /// Linked services (LInK): `coordinator` (the auto-sharder), a demo `member`, an HTTP
    /// `front` (docs/design/linked-service.md).
    Linked {
        #[command(subcommand)]
        cmd: ringlet_linked::cli::LinkedCmd,
    },
}

#[derive(Args, Clone)]
struct ControlArgs {
    /// Control port nodes join and admin commands use.
    #[arg(long)]
    port: u16,
    /// Address to listen on; off loopback it needs the TLS files and a cluster secret.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Bootstrap once this many data nodes have joined (0: no bootstrap plan).
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// Spares expected beside the data nodes (the highest ids).
    #[arg(long, default_value_t = 0)]
    spares: usize,
    /// Memgest created and made default at bootstrap (`none`, `rep:R`, `ec:K+M`).
    #[arg(long = "default-memgest")]
    default_memgest: Option<String>,
    #[command(flatten)]
    pg: memgest::PgShape,
    /// Node lease: a node silent this long is failed over.
    #[arg(long = "lease-ms", default_value_t = ringlet_cluster::launch::DEFAULT_LEASE_MS)]
    lease_ms: u64,
    /// Refuse slot moves, node add and node remove while an ec:K+M memgest exists (they
    /// are allowed by default: the span's ec values are re-encoded in the target group,
    /// docs/design/cluster-resharding.md, "Moving ec:K+M values").
    #[arg(long = "no-ec-moves")]
    no_ec_moves: bool,
    /// The cluster secret (64 hex digits), also given to every node; else
    /// `RINGLET_CLUSTER_SECRET`.
    #[arg(long = "cluster-secret-file")]
    cluster_secret_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
}

#[derive(Args, Clone)]
struct NodeArgs {
    /// Client port (RESP and native). 0 picks a free port (printed on stdout).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Address to listen on. Anything but loopback requires --requirepass.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Memory budget of the data region, MiB.
    #[arg(long = "memory-mb", default_value_t = 1024)]
    memory_mb: u64,
    /// Size the index for this many keys at start (single node; `CONFIG SET index-keys N`
    /// grows it later). Default: small, grown 1.5× at a time; each growth stales the
    /// index-entry part of location hints taken before it (docs/design/loader.md).
    #[arg(long = "index-keys")]
    index_keys: Option<u64>,
    /// Worker threads (default: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// How the single node's workers drive their sockets: `uring` (one io_uring per worker:
    /// multishot accept and receive, replies sent in one submission per loop; Linux, refused
    /// at start where the kernel or a seccomp profile does not allow it), `epoll` (a tokio
    /// runtime per worker), or `auto` (the default: `uring` where a probe ring can be set up,
    /// else `epoll`; INFO's `multiplexing_api` says which runs). Else `RINGLET_IO`. A cluster
    /// node runs its own runtime and refuses `uring`.
    #[arg(long = "io", env = "RINGLET_IO", default_value = "auto", value_parser = parse_io)]
    io: ringlet_server::IoMode,
    /// Password clients must AUTH with (the `default` user's); in a cluster, every node's.
    /// Else `RINGLET_REQUIREPASS` (how `ringlet up` gives it to the nodes it starts).
    #[arg(long, env = "RINGLET_REQUIREPASS", hide_env_values = true)]
    requirepass: Option<String>,
    /// Admin HTTP port (Prometheus /metrics): `server` off unless given, `up` port + 10000;
    /// 0 picks a free port.
    #[arg(long = "admin-port")]
    admin_port: Option<u16>,
    /// Bearer token the admin pages require (`Authorization: Bearer TOKEN`); else
    /// `RINGLET_ADMIN_TOKEN` (how `ringlet up` gives it to the nodes it starts).
    #[arg(
        long = "admin-token",
        env = "RINGLET_ADMIN_TOKEN",
        hide_env_values = true
    )]
    admin_token: Option<String>,
    /// Cluster mode: join the control plane at HOST:PORT (needs --node-id). The node then
    /// speaks Redis Cluster (MOVED, CLUSTER SLOTS/SHARDS/NODES) through crates/cluster.
    #[arg(long)]
    cluster: Option<String>,
    /// Unix socket through which clients on this host map the node's memory read-only and
    /// GET without a round trip (one-sided reads; `ringlet bench --mode shm-get`).
    #[arg(long = "shm-socket")]
    shm_socket: Option<std::path::PathBuf>,
    /// This node's id in the cluster map (cluster mode).
    #[arg(long = "node-id")]
    node_id: Option<u32>,
    /// Heartbeat lease, ms (cluster mode; must match the control plane's).
    #[arg(long = "lease-ms", default_value_t = ringlet_cluster::launch::DEFAULT_LEASE_MS)]
    lease_ms: u64,
    /// Cluster mode: the cluster secret (64 hex digits) that proves membership on peer and
    /// control links; else `RINGLET_CLUSTER_SECRET`. `ringlet up` prints its file.
    #[arg(long = "cluster-secret-file")]
    cluster_secret_file: Option<std::path::PathBuf>,
    /// Cluster mode with the control plane in etcd (`--etcd URL`, crates/cli/src/etcd.rs).
    #[command(flatten)]
    etcd: etcd::EtcdArgs,
    #[command(flatten)]
    tls: TlsArgs,
}

/// TLS on the client port, with Redis's option names (cluster mode; docs/design/cluster-tls.md).
#[derive(Args, Clone, Default)]
struct TlsArgs {
    /// Cluster mode: serve the client port over TLS only, with this certificate chain (PEM).
    /// Needs --tls-key-file and --tls-ca-cert-file. Else `RINGLET_TLS_CERT_FILE`.
    #[arg(long = "tls-cert-file", env = "RINGLET_TLS_CERT_FILE")]
    cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM). Else `RINGLET_TLS_KEY_FILE`.
    #[arg(long = "tls-key-file", env = "RINGLET_TLS_KEY_FILE")]
    key: Option<std::path::PathBuf>,
    /// The CA (PEM) that issued the nodes' certificates: nodes verify each other's client
    /// ports with it. Else `RINGLET_TLS_CA_CERT_FILE`.
    #[arg(long = "tls-ca-cert-file", env = "RINGLET_TLS_CA_CERT_FILE")]
    ca: Option<std::path::PathBuf>,
}

/// All three TLS files or none; each is read and checked now, so a bad one is named at start.
fn tls_files(t: &TlsArgs) -> Result<Option<ringlet_cluster::tls::TlsFiles>> {
    match (&t.cert, &t.key, &t.ca) {
        (None, None, None) => Ok(None),
        (Some(cert), Some(key), Some(ca)) => {
            let f = ringlet_cluster::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            };
            f.check().map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
            Ok(Some(f))
        }
        _ => {
            anyhow::bail!("TLS needs all of --tls-cert-file, --tls-key-file and --tls-ca-cert-file")
        }
    }
}

impl NodeArgs {
    fn config(&self) -> Config {
        Config {
            bind: self.bind,
            port: self.port,
            threads: self.threads,
            memory_mb: self.memory_mb,
            requirepass: self.requirepass.clone(),
            admin_port: self.admin_port,
            admin_token: self.admin_token.clone(),
            shm_socket: self.shm_socket.clone(),
            index_keys: self.index_keys,
            io: self.io,
            ..Config::default()
        }
    }
}

#[derive(Args)]
struct UpArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Refuse slot moves, node add and node remove while an ec:K+M memgest exists (they
    /// are allowed by default: the span's ec values are re-encoded in the target group,
    /// docs/design/cluster-resharding.md, "Moving ec:K+M values").
    #[arg(long = "no-ec-moves")]
    no_ec_moves: bool,
    /// Do not start the admin HTTP listener (default: on at port + 10000).
    #[arg(long = "no-admin")]
    no_admin: bool,
    /// Cluster: every node exports its engine for one-sided reads on DIR/node-<port>.sock
    /// (printed at start; docs/design/cluster-shm-reads.md).
    #[arg(long = "shm-dir")]
    shm_dir: Option<std::path::PathBuf>,
    /// Cluster: the control plane's HTTP status port (`/metrics`, `/api/events`, a page
    /// linking every node's status page).
    #[arg(long = "status-port")]
    status_port: Option<u16>,
    /// Cluster: active nodes (node i on port + i - 1). More than 1, or any spare, starts a
    /// cluster under the embedded control plane (on the port after the last node).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// Cluster: spare nodes (ports after the active ones).
    #[arg(long, default_value_t = 0)]
    spares: usize,
    /// Cluster: default memgest, e.g. `rep:3` or `none`.
    #[arg(long = "default-memgest")]
    default_memgest: Option<String>,
    #[command(flatten)]
    pg: memgest::PgShape,
    /// Cluster: run the load balancer beside the control plane: it measures ops/s per slot
    /// on every node and moves hot spans from the busiest node to the idlest
    /// (docs/design/cluster-balancer.md).
    #[arg(long = "auto-balance")]
    auto_balance: bool,
    #[command(flatten)]
    balance: BalanceArgs,
    /// Cluster: start a node again when its process exits (it rejoins empty, as a spare; at
    /// most 3 times a minute per node). Without it an exit is reported and the node stays
    /// down while the cluster fails it over.
    #[arg(long)]
    restart: bool,
}

/// The load balancer's knobs (`up --auto-balance`, `node rebalance --by load`). Options, so
/// a knob given without the balancer it tunes is refused rather than ignored.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
struct BalanceArgs {
    /// Move only when the busiest node carries more than the mean by this share [default: 0.25].
    #[arg(long = "balance-trigger", value_parser = parse_share)]
    trigger: Option<f64>,
    /// Move only when the cluster carries at least this many ops/s in all [default: 1000].
    #[arg(long = "balance-min-ops")]
    min_ops: Option<f64>,
    /// Seconds of one load measurement window [default: 10].
    #[arg(long = "balance-window")]
    window: Option<u64>,
    /// At most this many moves in any minute (`up --auto-balance`) [default: 2].
    #[arg(long = "balance-moves-per-min")]
    moves_per_min: Option<u32>,
}

impl BalanceArgs {
    fn given(&self) -> Option<&'static str> {
        if self.trigger.is_some() {
            Some("--balance-trigger")
        } else if self.min_ops.is_some() {
            Some("--balance-min-ops")
        } else if self.window.is_some() {
            Some("--balance-window")
        } else if self.moves_per_min.is_some() {
            Some("--balance-moves-per-min")
        } else {
            None
        }
    }

    fn config(&self) -> ringlet_control::BalanceConfig {
        let d = ringlet_control::BalanceConfig::default();
        ringlet_control::BalanceConfig {
            trigger: self.trigger.unwrap_or(d.trigger),
            min_ops: self.min_ops.unwrap_or(d.min_ops),
            ..d
        }
    }

    fn window(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.window.unwrap_or(10).clamp(1, 3_600))
    }
}

fn parse_share(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s} is not a number"))?;
    if !(0.01..=10.0).contains(&v) {
        return Err(format!("{s} is out of range (0.01 to 10)"));
    }
    Ok(v)
}

/// What `node rebalance` evens out.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
enum RebalanceBy {
    /// Coordinated slots per data node.
    #[default]
    Slots,
    /// Measured operations per second (CLUSTER RINGLET-LOAD SLOTS on every node).
    Load,
    /// Stored bytes of the slots each node coordinates (the engines' per-slot accounting).
    Bytes,
}

/// `node rebalance --by bytes` does nothing while the data nodes hold less than this in all:
/// evening out a nearly empty cluster only moves slots back and forth.
const BALANCE_BYTES_MIN: f64 = (1 << 20) as f64;

#[derive(Args)]
struct NodeCmd {
    #[command(subcommand)]
    action: NodeAction,
}

/// How an admin command reaches the control plane: `--control ADDR`, or `--port P` (any
/// node's client port: the node names its control plane in `INFO cluster`).
#[derive(Args)]
struct AdminConn {
    /// Control plane address (printed by `ringlet up`).
    #[arg(long, required_unless_present = "port", conflicts_with = "port")]
    control: Option<String>,
    /// A node's client port (on --host): the control plane is the one that node reports to.
    /// A plain-text client port only (with TLS on the client ports, pass --control).
    #[arg(long)]
    port: Option<u16>,
    /// The node's host, with --port.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The nodes' client password: to ask --port's node, and for `rebalance --by load|bytes`
    /// (their load is asked on the client ports).
    #[arg(long, env = "RINGLET_PASSWORD")]
    password: Option<String>,
    /// The cluster secret's file (printed by `ringlet up`); else `RINGLET_CLUSTER_SECRET`;
    /// else, with --port only, the file `ringlet up` wrote for that node's control plane.
    #[arg(long = "cluster-secret-file")]
    cluster_secret_file: Option<std::path::PathBuf>,
    /// A cluster started with TLS files encrypts its control links: the same files.
    #[command(flatten)]
    tls: TlsArgs,
}

/// `--rate MB/s` of the resharding commands.
#[derive(clap::Args, Clone, Copy, Debug)]
struct RateArg {
    /// Copy rate limit of each move in MB/s (10^6 bytes), paced by the new owner's pulls;
    /// `unlimited` (or 0): as fast as the nodes go. Default 5: a move then costs clients
    /// little (docs/design/cluster-resharding.md, "Session 17: the client tail").
    #[arg(long, value_name = "MB/s", value_parser = parse_rate)]
    rate: Option<f64>,
}

/// The copy rate of a move when `--rate` is not given (MB/s). Unlimited, a move takes both
/// cores of the 2-core test machine for its copy and GET p99 during it was 10-30x its
/// steady p99; at 5 MB/s it was within ~2x (BENCHMARKS.md, "Client tail during moves
/// (issue 12, session 17)"). An operator with cores to spare, or a maintenance window,
/// raises it or passes `--rate unlimited`.
const DEFAULT_MOVE_RATE_MB_S: f64 = 5.0;

impl RateArg {
    /// The limit in KiB/s as the control plane carries it (0 = unlimited).
    fn kib_s(self) -> u32 {
        let mb = self.rate.unwrap_or(DEFAULT_MOVE_RATE_MB_S);
        if mb == 0.0 {
            return 0;
        }
        // parse_rate bounds it to 0.001..=100000 MB/s: at least 1 KiB/s, fits u32.
        ((mb * 1e6 / 1024.0).round() as u32).max(1)
    }
}

/// MB/s, or `unlimited` / `0` (returned as 0.0: no limit).
fn parse_rate(s: &str) -> Result<f64, String> {
    if s.eq_ignore_ascii_case("unlimited") {
        return Ok(0.0);
    }
    let v: f64 = s.parse().map_err(|_| format!("not a number: {s}"))?;
    if v == 0.0 {
        return Ok(0.0);
    }
    if !(0.001..=100_000.0).contains(&v) {
        return Err(format!(
            "{s} MB/s is out of range (0.001 to 100000, or 0 / unlimited)"
        ));
    }
    Ok(v)
}

#[derive(Subcommand)]
enum NodeAction {
    /// Hand node ID's roles and data to a spare before it is stopped (planned maintenance).
    Drain {
        id: u32,
        #[command(flatten)]
        conn: AdminConn,
        /// Return once the control plane accepted the drain, without following it.
        #[arg(long)]
        no_wait: bool,
        /// Longest to follow the drain (seconds); it continues past this.
        #[arg(long, default_value_t = 60)]
        wait_timeout: u64,
    },
    /// Turn spare ID into a data node (new placement groups; no slots until a rebalance).
    Add {
        id: u32,
        #[command(flatten)]
        conn: AdminConn,
    },
    /// Move slots FIRST..=LAST (inside one slot range) to placement group PG's data index
    /// INDEX: the current owner finishes its writes, the new one rebuilds from it. Waits
    /// until the new owner holds the span (a bar on a terminal), unless --no-wait.
    MoveSlots {
        first: u16,
        last: u16,
        #[arg(long)]
        pg: u32,
        #[arg(long, default_value_t = 0)]
        index: u8,
        #[command(flatten)]
        rate: RateArg,
        /// Return once the control plane accepted the move.
        #[arg(long)]
        no_wait: bool,
        /// Longest wait for the move's handoff, in seconds.
        #[arg(long, default_value_t = 60)]
        move_timeout: u64,
        #[command(flatten)]
        conn: AdminConn,
    },
    /// Take data node ID out: groups without it are added, every slot range of a group
    /// holding it moves away span by span, then it becomes a spare (it can then be stopped).
    Remove {
        id: u32,
        /// Longest wait for one move's handoff, in seconds.
        #[arg(long, default_value_t = 60)]
        move_timeout: u64,
        #[command(flatten)]
        rate: RateArg,
        #[command(flatten)]
        conn: AdminConn,
    },
    /// Even out coordinated slots over the data nodes: plan, then move span by span, each
    /// after the previous one's handoff finished.
    Rebalance {
        /// Print the plan only.
        #[arg(long)]
        dry_run: bool,
        /// Even out slot counts (default), measured load or stored bytes: `load` measures one
        /// window, moves at most one hot span, and repeats up to --max-moves times; `bytes`
        /// does the same with each slot's stored bytes (no window).
        #[arg(long, value_enum, default_value_t = RebalanceBy::Slots)]
        by: RebalanceBy,
        /// `--by load|bytes`: most moves to make.
        #[arg(long = "max-moves")]
        max_moves: Option<u32>,
        #[command(flatten)]
        balance: BalanceArgs,
        /// Longest wait for one move's handoff, in seconds.
        #[arg(long, default_value_t = 60)]
        move_timeout: u64,
        #[command(flatten)]
        rate: RateArg,
        #[command(flatten)]
        conn: AdminConn,
    },
    /// Print the cluster map (JSON).
    Map {
        #[command(flatten)]
        conn: AdminConn,
    },
}

#[derive(Args, Clone)]
pub struct Conn {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Password, if the node has one.
    #[arg(long, env = "RINGLET_PASSWORD")]
    pub password: Option<String>,
}

#[derive(Args)]
struct KeyCmd {
    #[command(flatten)]
    conn: Conn,
    key: String,
}

#[derive(Args)]
struct KeysCmd {
    #[command(flatten)]
    conn: Conn,
    #[arg(required = true)]
    keys: Vec<String>,
}

#[derive(Args)]
struct SetCmd {
    #[command(flatten)]
    conn: Conn,
    key: String,
    value: String,
    /// Expire after this many seconds.
    #[arg(long)]
    ex: Option<u64>,
    /// Cluster mode: store the key under this memgest (`SET ... MEMGEST name`).
    #[arg(long)]
    memgest: Option<String>,
}

#[derive(Args)]
struct IncrCmd {
    #[command(flatten)]
    conn: Conn,
    key: String,
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    by: i64,
}

#[derive(Args)]
struct InfoCmd {
    #[command(flatten)]
    conn: Conn,
    section: Option<String>,
}

fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: logs redirected to a file stay plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("ringlet: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    // Every role (single node, cluster node, etcd node) serves up to CONNECTIONS_MAX clients.
    let _ = ringlet_cluster::raise_fd_limit();
    match cli.cmd {
        Cmd::Server(a) if !a.etcd.endpoints.is_empty() => {
            init_logs();
            etcd::serve(&a)
        }
        Cmd::Server(a) => {
            init_logs();
            match (&a.cluster, a.node_id) {
                (Some(control), Some(id)) => serve_cluster(&a, control, id),
                (Some(_), None) => anyhow::bail!("--cluster needs --node-id"),
                _ => {
                    refuse_single_node_tls(&a.tls)?;
                    serve(a.config())
                }
            }
        }
        Cmd::Control(a) => {
            init_logs();
            serve_control(&a)
        }
        Cmd::Node(n) => node_admin(n.action),
        Cmd::Memgest(m) => memgest::run(&m),
        Cmd::Up(a)
            if a.nodes > 1
                || a.spares > 0
                || a.default_memgest.is_some()
                || a.pg.pg_data.is_some() =>
        {
            init_logs();
            up_cluster(&a)
        }
        Cmd::Up(a) => {
            init_logs();
            refuse_single_node_tls(&a.node.tls)?;
            if a.restart {
                anyhow::bail!(
                    "--restart restarts the nodes of a cluster: start one with --nodes N (N > 1)"
                );
            }
            if a.auto_balance || a.balance.given().is_some() {
                anyhow::bail!(
                    "--auto-balance moves slots between the nodes of a cluster: start one with \
                     --nodes N (N > 1)"
                );
            }
            let mut cfg = a.node.config();
            if let Some(d) = &a.shm_dir {
                if cfg.shm_socket.is_none() {
                    cfg.shm_socket = Some(ringlet_cluster::launch::shm_socket_path(d, cfg.port));
                }
            }
            if cfg.admin_port.is_none() && !a.no_admin {
                cfg.admin_port = Some(if cfg.port == 0 {
                    0
                } else {
                    cfg.port.saturating_add(10_000)
                });
            }
            up(cfg)
        }
        Cmd::Get(c) => client::get(&c.conn, &c.key),
        Cmd::Set(SetCmd {
            conn,
            key,
            value,
            ex,
            memgest: Some(m),
        }) => memgest::set_in(&conn, &key, &value, &m, ex),
        Cmd::Set(c) => client::set(&c.conn, &c.key, &c.value, c.ex),
        Cmd::Del(c) => client::del(&c.conn, &c.keys),
        Cmd::Incr(c) => client::incr(&c.conn, &c.key, c.by),
        Cmd::Mget(c) => client::mget(&c.conn, &c.keys),
        Cmd::Ping(c) => client::ping(&c),
        Cmd::Info(c) => client::info(&c.conn, c.section.as_deref()),
        Cmd::Bench(a) => ringlet_bench::run(&a),
        Cmd::Load(a) => load::run(&a),
        Cmd::Linked { cmd } => ringlet_linked::cli::run(cmd).map_err(anyhow::Error::msg),
    }
}

/// Start one node, print the readiness line, and run until Ctrl-C / SIGTERM.
fn serve(cfg: Config) -> Result<()> {
    let handle = Server::start(cfg).context("cannot start the node")?;
    print_ready(handle.local_addr(), handle.admin_addr())?;
    wait_for_signal(handle.shutdown_trigger())?;
    handle.wait();
    eprintln!("ringlet: stopped");
    Ok(())
}

/// `ringlet up`: Ringlet's main job on this machine. One node today; `--nodes N --spares S`
/// will start N nodes on consecutive ports under the embedded control plane (the loop over
/// node configs below is where they go).
fn up(cfg: Config) -> Result<()> {
    let nodes = vec![cfg];
    let mut handles = Vec::with_capacity(nodes.len());
    for node in nodes {
        let h = Server::start(node).context("cannot start the node")?;
        print_ready(h.local_addr(), h.admin_addr())?;
        handles.push(h);
    }
    println!(
        "ringlet: up: {} node(s) serving; Ctrl-C stops",
        handles.len()
    );
    if let Some(h) = handles.first() {
        let a = h.local_addr();
        println!(
            "ringlet: try: ringlet set hello world --port {p}; ringlet get hello --port {p}  (or redis-cli -h {} -p {p})",
            a.ip(),
            p = a.port()
        );
    }
    std::io::stdout().flush()?;
    let triggers: Vec<_> = handles.iter().map(|h| h.shutdown_trigger()).collect();
    let all = ringlet_server::ShutdownTrigger::fan_out(triggers);
    wait_for_signal(all)?;
    for h in handles {
        h.wait();
    }
    eprintln!("ringlet: stopped");
    Ok(())
}

fn cluster_runtime() -> Result<tokio::runtime::Runtime> {
    cluster_runtime_threads(0)
}

/// The runtime of a cluster process: `threads` workers (0: 2 — a node's work is mostly
/// the driver thread's; the workers run the connections).
fn cluster_runtime_threads(threads: usize) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(if threads == 0 { 2 } else { threads })
        .enable_all()
        .build()?)
}

/// `--io auto|epoll|uring`.
fn parse_io(s: &str) -> std::result::Result<ringlet_server::IoMode, String> {
    ringlet_server::IoMode::parse(s)
        .ok_or_else(|| format!("expected auto, epoll or uring, got {s:?}"))
}

/// The single node has no TLS listener yet: refuse rather than serve plaintext to a user who
/// asked for TLS.
fn refuse_single_node_tls(t: &TlsArgs) -> Result<()> {
    if t.cert.is_some() || t.key.is_some() || t.ca.is_some() {
        anyhow::bail!(
            "--tls-*: TLS is served in cluster mode only so far (ringlet up --nodes N, \
             server --cluster, server --etcd); the single node has no TLS listener yet"
        );
    }
    Ok(())
}

/// Refuse what a cluster node cannot honour, rather than accept and ignore it. `how` names
/// the mode.
///
/// `--bind` off loopback (a cluster across machines) is allowed only when every link can be
/// protected: the three TLS files (client port TLS only, peer and control links mutual TLS),
/// a cluster secret (membership proof inside those sessions) and `--requirepass` (TLS
/// without client certificates lets anyone reachable connect: Redis's protected mode makes
/// the same demand). An unspecified address (0.0.0.0) is refused: a node announces its bind
/// address to peers and clients in the map.
fn check_cluster_flags(a: &NodeArgs, how: &str) -> Result<()> {
    a.config().validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    // `auto` (the default) and `epoll` both mean the node's own runtime here.
    if a.io == ringlet_server::IoMode::Uring {
        anyhow::bail!(
            "--io uring: the io_uring loop serves the single node (`ringlet server`, `up` \
             with one node); a cluster node ({how}) runs on its tokio runtime (unset RINGLET_IO \
             or pass --io epoll)"
        );
    }
    if a.index_keys.is_some() {
        // A cluster node's engine sizes its index itself (replica copies and handoffs land
        // in it too); taking the flag and not acting on it would mislead a loader's user.
        anyhow::bail!(
            "--index-keys: a cluster node ({how}) sizes its index itself and grows it as keys \
             arrive; the flag is for the single node (`ringlet server`)"
        );
    }
    if a.bind.is_unspecified() {
        anyhow::bail!(
            "--bind {}: a cluster node announces its bind address to peers and clients              ({how}); give this host's address",
            a.bind
        );
    }
    if !a.bind.is_loopback() {
        let mut missing = Vec::new();
        if tls_files(&a.tls)?.is_none() {
            missing.push("--tls-cert-file/--tls-key-file/--tls-ca-cert-file");
        }
        if ringlet_cluster::auth::ClusterSecret::load(a.cluster_secret_file.as_deref())?.is_none() {
            missing.push("--cluster-secret-file (or RINGLET_CLUSTER_SECRET)");
        }
        if a.requirepass.is_none() {
            missing.push("--requirepass");
        }
        if !missing.is_empty() {
            anyhow::bail!(
                "--bind {}: a cluster node off loopback ({how}) needs every link protected; \
                 missing: {}",
                a.bind,
                missing.join(", ")
            );
        }
    }
    Ok(())
}

/// `ringlet control --port P`: the embedded control plane (membership, leases, failover,
/// the map) as a process of its own. Off loopback every control link must be mutual TLS with
/// the cluster secret proved inside: refused otherwise, as for a node.
fn serve_control(a: &ControlArgs) -> Result<()> {
    if a.bind.is_unspecified() {
        anyhow::bail!(
            "--bind {}: nodes and admin commands reach the control plane at its bind \
             address; give this host's address",
            a.bind
        );
    }
    let tls = tls_files(&a.tls)?;
    let secret = ringlet_cluster::auth::init(a.cluster_secret_file.as_deref())?;
    if !a.bind.is_loopback() && (tls.is_none() || secret.is_none()) {
        anyhow::bail!(
            "--bind {}: a control plane off loopback needs the three --tls-* files and a \
             cluster secret (--cluster-secret-file or RINGLET_CLUSTER_SECRET)",
            a.bind
        );
    }
    if secret.is_none() {
        eprintln!(
            "ringlet: WARNING: no cluster secret (--cluster-secret-file or RINGLET_CLUSTER_SECRET): \
             the control port accepts anyone who can connect"
        );
    }
    if let Some(f) = &tls {
        ringlet_cluster::tls::set_link_tls(f).map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
    }
    let default_memgest = match &a.default_memgest {
        Some(s) => Some(ringlet_types::MemgestKind::parse(s).map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    // Placement groups shaped as `up` shapes them, unless given.
    let (s0, d0) = ringlet_cluster::launch::pg_shape(a.nodes, default_memgest);
    let o = ringlet_cluster::launch::ControlOpts {
        bind: std::net::SocketAddr::new(a.bind, a.port),
        expect_nodes: a.nodes + a.spares,
        active: a.nodes,
        default_memgest,
        s: a.pg.pg_data.unwrap_or(s0),
        d: a.pg.pg_redundant.unwrap_or(d0),
        lease_ms: a.lease_ms,
        ec_moves: !a.no_ec_moves,
    };
    cluster_runtime()?.block_on(async {
        let (_svc, addr) = ringlet_cluster::launch::run_control(&o)
            .await
            .context("cannot start the control plane")?;
        println!("ringlet: control plane listening on {addr}");
        std::io::stdout().flush()?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
        eprintln!("ringlet: control plane stopped");
        Ok(())
    })
}

/// `ringlet server --cluster CONTROL --node-id ID`: a cluster node (crates/cluster's
/// ClusterNode + Redis Cluster front end) on `--bind`/`--port`.
fn serve_cluster(a: &NodeArgs, control: &str, id: u32) -> Result<()> {
    check_cluster_flags(a, "server --cluster")?;
    if ringlet_cluster::auth::init(a.cluster_secret_file.as_deref())?.is_none() {
        eprintln!(
            "ringlet: WARNING: no cluster secret (--cluster-secret-file or RINGLET_CLUSTER_SECRET): \
             this node's peer and control links accept anyone who can connect"
        );
    }
    let rt = cluster_runtime_threads(a.threads)?;
    rt.block_on(async {
        let o = ringlet_cluster::launch::NodeOpts {
            id,
            bind: std::net::SocketAddr::new(a.bind, a.port),
            peer_port: 0,
            control: control.to_string(),
            lease_ms: a.lease_ms,
            memory_bytes: a.memory_mb.saturating_mul(1 << 20),
            requirepass: a.requirepass.clone(),
            tls: tls_files(&a.tls)?,
            admin_port: a.admin_port,
            admin_token: a.admin_token.clone(),
        };
        let (node, addr) = ringlet_cluster::launch::run_node_shm(&o, a.shm_socket.clone())
            .await
            .context("cannot start the cluster node")?;
        print_ready(addr, None)?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
        eprintln!("ringlet: shutting down");
        node.stop();
        Ok(())
    })
}

/// `ringlet up --nodes N --spares S --port BASE [--default-memgest rep:3] [--pg-data s
/// --pg-redundant d]`.
fn up_cluster(a: &UpArgs) -> Result<()> {
    if let (false, Some(flag)) = (a.auto_balance, a.balance.given()) {
        anyhow::bail!("{flag} tunes the load balancer: add --auto-balance");
    }
    if a.node.port == 0 {
        anyhow::bail!("ringlet up --nodes needs a base --port (nodes use consecutive ports)");
    }
    check_cluster_flags(&a.node, "ringlet up --nodes")?;
    if a.node.bind != std::net::IpAddr::from([127, 0, 0, 1]) {
        anyhow::bail!(
            "--bind {}: ringlet up runs every node on this host, on loopback; for a cluster \
             across machines run `ringlet control` once and `ringlet server --cluster \
             HOST:PORT --node-id ID --bind ADDR` on each machine",
            a.node.bind
        );
    }
    if a.node.shm_socket.is_some() {
        anyhow::bail!(
            "--shm-socket: with --nodes every node needs its own socket: give a directory \
             with --shm-dir DIR (node sockets DIR/node-<port>.sock)"
        );
    }
    if a.node.admin_port.is_some() {
        anyhow::bail!(
            "--admin-port: with --nodes every node gets an admin port at its client port + \
             10000 (/metrics); --no-admin turns them off"
        );
    }
    let default_memgest = match &a.default_memgest {
        Some(s) => Some(ringlet_types::MemgestKind::parse(s).map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    let o = ringlet_cluster::launch::UpOpts {
        nodes: a.nodes,
        spares: a.spares,
        base_port: a.node.port,
        control_port: None,
        default_memgest,
        lease_ms: a.node.lease_ms,
        ec_moves: !a.no_ec_moves,
        memory_bytes: a.node.memory_mb.saturating_mul(1 << 20),
        exe: std::env::current_exe()?,
        node_args: ringlet_cluster::launch::ringlet_server_node_args,
        requirepass: a.node.requirepass.clone(),
        admin_token: a.node.admin_token.clone(),
        pg: a.pg.pg_data.map(|s| (s, a.pg.pg_redundant.unwrap_or(1))),
        tls: tls_files(&a.node.tls)?,
        // As the single node's `up`: admin HTTP on port + 10000 unless --no-admin.
        admin_offset: (!a.no_admin).then_some(10_000),
        node_threads: a.node.threads,
        shm_dir: a.shm_dir.clone(),
        status_port: a.status_port,
        auto_balance: a
            .auto_balance
            .then(|| ringlet_cluster::launch::BalanceOpts {
                cfg: a.balance.config(),
                window: a.balance.window(),
                moves_per_minute: a.balance.moves_per_min.unwrap_or(2).clamp(1, 60),
                rate_kib_s: 0,
                move_timeout: std::time::Duration::from_secs(60),
            }),
        restart_nodes: a.restart,
    };
    cluster_runtime()?.block_on(ringlet_cluster::launch::up(&o))?;
    eprintln!("ringlet: stopped");
    Ok(())
}

/// The control plane an admin command talks to: `--control`, or the one `--port`'s node
/// reports to (its `INFO cluster` field `ringlet_control`).
fn admin_control(conn: &AdminConn) -> Result<String> {
    if let Some(c) = &conn.control {
        return Ok(c.clone());
    }
    let Some(port) = conn.port else {
        anyhow::bail!("pass --control ADDR or --port P (a node's client port)");
    };
    let node = Conn {
        host: conn.host.clone(),
        port,
        password: conn.password.clone(),
    };
    match client::info_field(&node, "cluster", "ringlet_control")? {
        Some(c) => Ok(c),
        None => anyhow::bail!(
            "the server on {}:{port} names no control plane (not a cluster node?): pass --control",
            conn.host
        ),
    }
}

/// The secret file of an admin command: `--cluster-secret-file`; else none if
/// `RINGLET_CLUSTER_SECRET` is set (it is used); else, only when the control plane was found
/// through `--port` (a node of a cluster on this host, named by the operator), the file
/// `ringlet up` wrote for that control port, if this user can read it. With `--control` the
/// secret is never picked up implicitly: an address alone gets nothing from a control plane
/// that requires one (`cluster_up` checks that refusal).
fn admin_secret_file(conn: &AdminConn, control: &str) -> Option<std::path::PathBuf> {
    if conn.cluster_secret_file.is_some() {
        return conn.cluster_secret_file.clone();
    }
    if conn.port.is_none() || std::env::var_os(ringlet_cluster::auth::SECRET_ENV).is_some() {
        return None;
    }
    let port: u16 = control.rsplit_once(':')?.1.parse().ok()?;
    let f = ringlet_cluster::launch::up_secret_file(port);
    f.is_file().then_some(f)
}

/// `ringlet node drain|map --control ADDR` (or `--port P`; also spelled `ringlet cluster ...`).
fn node_admin(action: NodeAction) -> Result<()> {
    use ringlet_cluster::control::{request, FromControl, ToControl};
    // Knobs of the other mode are refused before anything is asked.
    if let NodeAction::Rebalance {
        by,
        max_moves,
        balance,
        ..
    } = &action
    {
        if *by == RebalanceBy::Slots {
            // (--password is not checked: it may come from RINGLET_PASSWORD.)
            let flag = balance.given().or(max_moves.map(|_| "--max-moves"));
            if let Some(flag) = flag {
                anyhow::bail!("{flag} applies to --by load or --by bytes");
            }
        } else if balance.moves_per_min.is_some() {
            anyhow::bail!(
                "--balance-moves-per-min paces `up --auto-balance`; here --max-moves bounds the run"
            );
        } else if *by == RebalanceBy::Bytes {
            // Bytes are a level read once, not a rate over a window.
            if let Some(flag) = balance
                .window
                .map(|_| "--balance-window")
                .or(balance.min_ops.map(|_| "--balance-min-ops"))
            {
                anyhow::bail!("{flag} applies to --by load");
            }
        }
    }
    let (conn, req) = match &action {
        NodeAction::Drain { id, conn, .. } => (conn, ToControl::Drain { node: *id }),
        NodeAction::Map { conn } | NodeAction::Rebalance { conn, .. } => (conn, ToControl::Watch),
        NodeAction::Add { id, conn } => (conn, ToControl::AddNode { node: *id }),
        NodeAction::MoveSlots {
            first,
            last,
            pg,
            index,
            rate,
            conn,
            ..
        } => (
            conn,
            ToControl::MoveSlots {
                first: *first,
                last: *last,
                pg: *pg,
                data_index: *index,
                rate_kib_s: rate.kib_s(),
            },
        ),
        NodeAction::Remove { id, conn, .. } => (conn, ToControl::RemoveNode { node: *id }),
    };
    let control = &admin_control(conn)?;
    let file = admin_secret_file(conn, control);
    let tls = &conn.tls;
    let secret = ringlet_cluster::auth::init(file.as_deref())?;
    if let Some(f) = tls_files(tls)? {
        ringlet_cluster::tls::set_link_tls(&f).map_err(|e| anyhow::anyhow!("TLS: {e}"))?;
    }
    let rt = cluster_runtime()?;
    // A drain is followed to its end: the map before it says whose positions it held.
    let before = match &action {
        NodeAction::Drain { no_wait: false, .. } => {
            match rt.block_on(request(control, &ToControl::Watch)) {
                Ok(FromControl::Map(m)) => Some(m),
                _ => None,
            }
        }
        _ => None,
    };
    let reply = rt.block_on(request(control, &req)).map_err(|e| {
        // Without a secret, a member-only control port's challenge reads as garbage.
        if secret.is_none() {
            anyhow::anyhow!(
                "{e} (the control plane may require the cluster secret: pass \
                 --cluster-secret-file, printed by `ringlet up`)"
            )
        } else {
            e.into()
        }
    })?;
    if let NodeAction::Rebalance {
        dry_run,
        move_timeout,
        rate,
        by,
        max_moves,
        balance,
        conn,
    } = &action
    {
        let FromControl::Map(map) = reply else {
            anyhow::bail!("unexpected reply from the control plane: {reply:?}");
        };
        if *by == RebalanceBy::Slots {
            return rt.block_on(rebalance(control, map, *dry_run, *move_timeout, *rate));
        }
        let access = ringlet_cluster::balancer::NodeAccess {
            password: conn.password.clone(),
            tls: match tls_files(&conn.tls)? {
                Some(f) => Some(f.connector().map_err(|e| anyhow::anyhow!("TLS: {e}"))?),
                None => None,
            },
        };
        return rt.block_on(rebalance_by_load(
            control,
            &access,
            (*by, balance),
            max_moves.unwrap_or(4),
            *dry_run,
            *move_timeout,
            *rate,
        ));
    }
    if let NodeAction::MoveSlots {
        first,
        last,
        pg,
        index,
        no_wait: false,
        move_timeout,
        ..
    } = &action
    {
        if let FromControl::Error(e) = reply {
            anyhow::bail!("{e}");
        }
        return rt.block_on(async {
            let bar = move_bar(u64::from(*last) - u64::from(*first) + 1);
            bar.set_message(format!("slots {first}-{last}"));
            let t0 = std::time::Instant::now();
            let to = wait_moved(control, *first, *last, (*pg, *index), *move_timeout).await?;
            bar.finish_and_clear();
            println!(
                "slots {first}-{last} now at node {to} ({} ms)",
                t0.elapsed().as_millis()
            );
            Ok(())
        });
    }
    if let NodeAction::Remove {
        id,
        move_timeout,
        rate,
        ..
    } = &action
    {
        if let FromControl::Error(e) = reply {
            anyhow::bail!("{e}");
        }
        return rt.block_on(async {
            let FromControl::Map(map) = request(control, &ToControl::Watch).await? else {
                anyhow::bail!("the control plane sent no map");
            };
            rebalance(control, map, false, *move_timeout, *rate).await?;
            match request(control, &ToControl::RemoveNode { node: *id }).await? {
                FromControl::Ok => {
                    println!("node {id} removed: it is a spare now and may be stopped");
                    Ok(())
                }
                FromControl::Error(e) => anyhow::bail!("{e}"),
                other => anyhow::bail!("unexpected reply from the control plane: {other:?}"),
            }
        });
    }
    if let (
        NodeAction::Drain {
            id, wait_timeout, ..
        },
        Some(before),
        FromControl::Ok,
    ) = (&action, before, &reply)
    {
        println!("OK");
        return rt.block_on(drain::follow(
            control,
            *id,
            before,
            std::time::Duration::from_secs(*wait_timeout),
        ));
    }
    match reply {
        FromControl::Ok => println!("OK"),
        FromControl::Map(m) => println!("{}", m.to_json()?),
        FromControl::Error(e) => anyhow::bail!("{e}"),
        other => anyhow::bail!("unexpected reply from the control plane: {other:?}"),
    }
    Ok(())
}

/// `ringlet node rebalance`: run [`ringlet_control::plan_rebalance`]'s moves one at a time.
/// Each waits until the map shows the span at its new owner with no handoff left (the new
/// coordinator rebuilt it), so at most one span is in transit and a failure stops the run
/// with the cluster consistent (every move is atomic on its own).
async fn rebalance(
    control: &str,
    map: ringlet_control::ClusterMap,
    dry_run: bool,
    move_timeout_s: u64,
    rate: RateArg,
) -> Result<()> {
    use ringlet_cluster::control::{request, FromControl, ToControl};
    let plan = ringlet_control::plan_rebalance(&map);
    if plan.is_empty() {
        println!("balanced: nothing to move");
        return Ok(());
    }
    for m in &plan {
        println!("{}", move_line(m, None));
    }
    if dry_run {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let slots: u64 = plan
        .iter()
        .map(|m| u64::from(m.last) - u64::from(m.first) + 1)
        .sum();
    let bar = move_bar(slots);
    for (i, m) in plan.iter().enumerate() {
        let t0 = std::time::Instant::now();
        bar.set_message(format!(
            "move {}/{}: slots {}-{} to node {}",
            i + 1,
            plan.len(),
            m.first,
            m.last,
            m.to
        ));
        let req = ToControl::MoveSlots {
            first: m.first,
            last: m.last,
            pg: m.pg,
            data_index: m.data_index,
            rate_kib_s: rate.kib_s(),
        };
        match request(control, &req).await? {
            FromControl::Ok => {}
            FromControl::Error(e) => anyhow::bail!("move {}-{}: {e}", m.first, m.last),
            other => anyhow::bail!("unexpected reply: {other:?}"),
        }
        wait_moved(
            control,
            m.first,
            m.last,
            (m.pg, m.data_index),
            move_timeout_s,
        )
        .await?;
        bar.inc(u64::from(m.last) - u64::from(m.first) + 1);
        bar.suspend(|| {
            println!(
                "[{}/{}] slots {}-{} now at node {} ({} ms)",
                i + 1,
                plan.len(),
                m.first,
                m.last,
                m.to,
                t0.elapsed().as_millis()
            )
        });
    }
    bar.finish_and_clear();
    println!(
        "rebalanced: {} moves in {:.1} s",
        plan.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A bar over slots moved on a terminal (stderr), hidden otherwise (scripts, tests).
fn move_bar(slots: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(slots);
    b.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} slots, {elapsed} {msg}")
            .expect("a valid template"),
    );
    b.enable_steady_tick(std::time::Duration::from_millis(200));
    b
}

/// Poll the map (bounded by `timeout_s`) until slots `first..=last` belong to the pair
/// (placement group, data index) `to` and no handoff covers them any more (their new
/// coordinator rebuilt them); returns that coordinator.
async fn wait_moved(
    control: &str,
    first: u16,
    last: u16,
    to: (u32, u8),
    timeout_s: u64,
) -> Result<u32> {
    ringlet_cluster::balancer::wait_moved(
        control,
        first,
        last,
        to,
        std::time::Duration::from_secs(timeout_s),
    )
    .await
    .map_err(anyhow::Error::msg)
}

/// A planned move as `node rebalance` prints it; with `load` (the span's, the giver's and the
/// receiver's ops/s) as `--by load` measured it.
fn move_line(m: &ringlet_control::PlannedMove, load: Option<(f64, f64, f64, &str)>) -> String {
    let slots = u32::from(m.last) - u32::from(m.first) + 1;
    let (span, from, to) = match load {
        None => (String::new(), String::new(), String::new()),
        Some((s, f, t, unit)) => (
            format!(", {s:.0} {unit}"),
            format!(" ({f:.0} {unit})"),
            format!(" ({t:.0} {unit})"),
        ),
    };
    format!(
        "move slots {}-{} ({slots} slots{span}) from node {}{from} to node {}{to} (group {} index {})",
        m.first, m.last, m.from, m.to, m.pg, m.data_index
    )
}

/// `ringlet node rebalance --by load|bytes`: up to `max_moves` rounds of one measured window
/// (load) or one sample (bytes) and at most one move (crate docs of
/// `ringlet_cluster::balancer`); stops early once balanced.
async fn rebalance_by_load(
    control: &str,
    access: &ringlet_cluster::balancer::NodeAccess,
    (by, balance): (RebalanceBy, &BalanceArgs),
    max_moves: u32,
    dry_run: bool,
    move_timeout_s: u64,
    rate: RateArg,
) -> Result<()> {
    use ringlet_cluster::balancer::{measure_and_plan, move_and_wait, plan_by_bytes};
    use ringlet_control::Verdict;
    let mut cfg = balance.config();
    let window = balance.window();
    let bytes = by == RebalanceBy::Bytes;
    if bytes {
        cfg.min_ops = BALANCE_BYTES_MIN;
    }
    let unit = if bytes { "bytes" } else { "ops/s" };
    for round in 1..=max_moves.max(1) {
        let v = if bytes {
            plan_by_bytes(control, access, &cfg).await
        } else {
            eprintln!("measuring load for {} s ...", window.as_secs());
            measure_and_plan(control, access, window, &cfg).await
        }
        .map_err(anyhow::Error::msg)?;
        let (m, span_ops, hot, cold) = match v {
            Verdict::Move {
                planned,
                span_ops,
                busiest_ops,
                idlest_ops,
            } => (planned, span_ops, busiest_ops, idlest_ops),
            Verdict::Balanced {
                busiest_ops,
                mean_ops,
            } => {
                println!(
                    "balanced: the busiest node carries {busiest_ops:.0} {unit}, the mean is \
                     {mean_ops:.0} (trigger {:.0}%)",
                    cfg.trigger * 100.0
                );
                return Ok(());
            }
            Verdict::Quiet { total_ops } if bytes => {
                println!("nearly empty: {total_ops:.0} bytes in all, below {BALANCE_BYTES_MIN:.0}");
                return Ok(());
            }
            Verdict::Quiet { total_ops } => {
                println!(
                    "quiet: {total_ops:.0} ops/s in all, below --balance-min-ops {:.0}",
                    cfg.min_ops
                );
                return Ok(());
            }
            Verdict::NotPlaced => anyhow::bail!("fewer than two data nodes: nothing to balance"),
            Verdict::Stuck { busiest, reason } => {
                println!("node {busiest} is the busiest, but {reason}");
                return Ok(());
            }
        };
        println!("{}", move_line(&m, Some((span_ops, hot, cold, unit))));
        if dry_run {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let to = move_and_wait(
            control,
            &m,
            rate.kib_s(),
            std::time::Duration::from_secs(move_timeout_s),
        )
        .await
        .map_err(anyhow::Error::msg)?;
        println!(
            "[{round}] slots {}-{} now at node {to} ({} ms)",
            m.first,
            m.last,
            t0.elapsed().as_millis()
        );
    }
    Ok(())
}

fn print_ready(addr: std::net::SocketAddr, admin: Option<std::net::SocketAddr>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ringlet: listening on {addr}")?;
    if let Some(a) = admin {
        writeln!(out, "ringlet: admin on http://{a}/metrics")?;
    }
    out.flush()?;
    Ok(())
}

/// Block until SIGINT or SIGTERM, then trigger shutdown.
fn wait_for_signal(trigger: ringlet_server::ShutdownTrigger) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
        eprintln!("ringlet: shutting down");
        trigger.trigger();
        Ok::<(), std::io::Error>(())
    })?;
    Ok(())
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn a_move_is_paced_at_the_default_rate_unless_told_otherwise() {
        let kib = |rate| RateArg { rate }.kib_s();
        assert_eq!(
            kib(None),
            (DEFAULT_MOVE_RATE_MB_S * 1e6 / 1024.0).round() as u32
        );
        assert_eq!(kib(Some(parse_rate("unlimited").unwrap())), 0);
        assert_eq!(kib(Some(parse_rate("0").unwrap())), 0);
        assert_eq!(kib(Some(parse_rate("50").unwrap())), 48_828);
        assert!(parse_rate("-1").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("200000").is_err());
    }
}
