//! `ringlet server --etcd URL[,URL..] --node-id ID --port P`: a cluster node whose control
//! plane lives in etcd (crates/etcd; docs/design/control-etcd.md). Start one per machine (or
//! several on one machine with different ids and ports); the first process to store
//! `<prefix>/config` fixes the bootstrap plan, e.g.
//!
//! ```text
//! ringlet server --etcd 127.0.0.1:2379 --node-id 1 --port 7001 \
//!     --etcd-nodes 3 --etcd-spares 1 --etcd-default-memgest rep:3
//! ringlet server --etcd 127.0.0.1:2379 --node-id 2 --port 7002     # ... ids 3 and 4 alike
//! ```
//!
//! Liveness is the process's etcd lease (`--etcd-lease-s`; `--lease-ms` does not apply).
//! `MEMGEST ...` over RESP works at any node (relayed to the leader); `ringlet node drain ID
//! --control ADDR` takes the leader's command address, stored in `<prefix>/leader`.

//!
//! The backend is the `etcd` feature (on by default). etcd-client's build script needs
//! `protoc`; `scripts/up.sh` builds without the feature where protoc is missing, so the
//! README's run command works with only rustup, and `--etcd` then says how to get it.

use anyhow::Result;
use clap::Args;

/// `<prefix>` default (ringlet_cluster::etcd::run::DEFAULT_PREFIX; checked equal below).
const DEFAULT_PREFIX: &str = "/ringlet";
/// Lease TTL default (ringlet_cluster::etcd::run::DEFAULT_LEASE_TTL_S; checked equal below).
const DEFAULT_LEASE_TTL_S: u64 = 2;
#[cfg(feature = "etcd")]
const _: () = {
    assert!(DEFAULT_LEASE_TTL_S == ringlet_cluster::etcd::run::DEFAULT_LEASE_TTL_S);
    let (a, b) = (
        DEFAULT_PREFIX.as_bytes(),
        ringlet_cluster::etcd::run::DEFAULT_PREFIX.as_bytes(),
    );
    assert!(a.len() == b.len());
    let mut i = 0;
    while i < a.len() {
        assert!(a[i] == b[i]);
        i += 1;
    }
};

#[derive(Args, Clone, Debug, Default)]
pub struct EtcdArgs {
    /// Cluster mode with the control plane in etcd: client endpoints, comma-separated
    /// (`host:port` or `http://host:port`). Needs --node-id.
    #[arg(long = "etcd", value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// Key prefix of this cluster in etcd.
    #[arg(long = "etcd-prefix", default_value = DEFAULT_PREFIX)]
    pub prefix: String,
    /// TTL of this process's etcd lease, seconds (etcd raises it to its minimum: 2 s with
    /// its default election timeout). The failover window is about TTL + 0.5 s + rebuild.
    #[arg(long = "etcd-lease-s", default_value_t = DEFAULT_LEASE_TTL_S)]
    pub lease_s: u64,
    /// Port of the command service this process runs while it leads (0: any free port).
    #[arg(long = "etcd-control-port", default_value_t = 0)]
    pub control_port: u16,
    /// Bootstrap plan: active nodes (the lowest ids). Stored in `<prefix>/config` by the
    /// first process that gives one; the others may omit it.
    #[arg(long = "etcd-nodes", id = "etcd_nodes")]
    pub nodes: Option<usize>,
    /// Bootstrap plan: spares (bootstrap waits for nodes + spares registrations).
    #[arg(long = "etcd-spares", id = "etcd_spares", default_value_t = 0)]
    pub spares: usize,
    /// Bootstrap plan: default memgest, e.g. `rep:3`.
    #[arg(long = "etcd-default-memgest", id = "etcd_default_memgest")]
    pub default_memgest: Option<String>,
}

/// Without the `etcd` feature: refuse, saying how to get it.
#[cfg(not(feature = "etcd"))]
pub fn serve(_a: &crate::NodeArgs) -> Result<()> {
    anyhow::bail!(
        "--etcd: this ringlet was built without the etcd backend (protoc was not found when \
         it was built); install protobuf-compiler and run `cargo build --release -p ringlet-cli`"
    )
}

/// Run one etcd-mode node until Ctrl-C / SIGTERM (which revokes its lease: the cluster
/// fails it at once rather than after the TTL).
#[cfg(feature = "etcd")]
pub fn serve(a: &crate::NodeArgs) -> Result<()> {
    use anyhow::Context;
    let Some(id) = a.node_id else {
        anyhow::bail!("--etcd needs --node-id");
    };
    super::check_cluster_flags(a, "server --etcd")?;
    if a.shm_socket.is_some() {
        anyhow::bail!(
            "--shm-socket: one-sided reads are served by `ringlet server --cluster` nodes, \
             not yet by etcd-backed ones (server --etcd)"
        );
    }
    let e = &a.etcd;
    let config = e.nodes.map(|n| ringlet_cluster::etcd::ClusterConfig {
        expect_nodes: n + e.spares,
        active: n,
        default_memgest: e.default_memgest.clone(),
        s: 2,
        d: 1,
    });
    let o = ringlet_cluster::etcd::EtcdNodeOpts {
        endpoints: e.endpoints.clone(),
        prefix: e.prefix.clone(),
        node_id: id,
        bind: std::net::SocketAddr::new(a.bind, a.port),
        control_bind: std::net::SocketAddr::new(a.bind, e.control_port),
        lease_ttl_s: e.lease_s,
        memory_bytes: a.memory_mb.saturating_mul(1 << 20),
        config,
        connect_timeout: ringlet_cluster::etcd::run::DEFAULT_CONNECT_TIMEOUT,
        requirepass: a.requirepass.clone(),
        tls: super::tls_files(&a.tls)?,
        admin_port: a.admin_port,
        admin_token: a.admin_token.clone(),
    };
    let rt = super::cluster_runtime_threads(a.threads)?;
    rt.block_on(async {
        let n = ringlet_cluster::etcd::run_node_etcd(&o)
            .await
            .context("cannot start the etcd-mode node")?;
        eprintln!(
            "ringlet: etcd mode: node {id}, prefix {} (the command port serves while this process leads)",
            o.prefix
        );
        {
            // Scripts (and the tests) read the command port here, beside the client address.
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            writeln!(out, "ringlet: control on {}", n.control_addr)?;
        }
        super::print_ready(n.client_addr, None)?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r?,
            _ = term.recv() => {}
        }
        eprintln!("ringlet: shutting down (revoking the etcd lease)");
        n.shutdown().await;
        Ok(())
    })
}
