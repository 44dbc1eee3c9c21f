//! One etcd-mode process (the same as `ringlet server --etcd URL`, without the CLI's other
//! commands; the tests start this binary):
//!
//! `ringlet-etcd-node --etcd URL[,URL..] --node-id ID --port P [--prefix /ringlet]
//!  [--control-port C] [--lease-s 2] [--memory-mb 256]
//!  [--nodes N --spares S --default-memgest rep:3]`
//!
//! Prints `ringlet: listening on ADDR` and `ringlet: control on ADDR`, then runs until
//! SIGINT/SIGTERM (which revokes the lease: the cluster fails this node at once).

use ringlet_etcd::{run_node_etcd, ClusterConfig, EtcdNodeOpts};
use std::io::Write;
use std::net::SocketAddr;

fn parse() -> Result<EtcdNodeOpts, String> {
    let mut o = EtcdNodeOpts {
        endpoints: Vec::new(),
        prefix: ringlet_etcd::run::DEFAULT_PREFIX.into(),
        node_id: 0,
        bind: SocketAddr::from(([127, 0, 0, 1], 0)),
        control_bind: SocketAddr::from(([127, 0, 0, 1], 0)),
        lease_ttl_s: ringlet_etcd::run::DEFAULT_LEASE_TTL_S,
        memory_bytes: 256 << 20,
        config: None,
        connect_timeout: ringlet_etcd::run::DEFAULT_CONNECT_TIMEOUT,
        requirepass: std::env::var(ringlet_cluster::launch::REQUIREPASS_ENV).ok(),
        tls: None,
        admin_port: None,
        admin_token: None,
    };
    let (mut nodes, mut spares, mut memgest) = (None::<usize>, 0usize, None::<String>);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or_else(|| format!("{a} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|e| format!("{s}: {e}"));
        match a.as_str() {
            "--etcd" => o.endpoints = val()?.split(',').map(str::to_string).collect(),
            "--prefix" => o.prefix = val()?,
            "--node-id" => o.node_id = num(val()?)? as u32,
            "--port" => o.bind.set_port(num(val()?)? as u16),
            "--control-port" => o.control_bind.set_port(num(val()?)? as u16),
            "--lease-s" => o.lease_ttl_s = num(val()?)?,
            "--memory-mb" => o.memory_bytes = num(val()?)? << 20,
            "--nodes" => nodes = Some(num(val()?)? as usize),
            "--spares" => spares = num(val()?)? as usize,
            "--default-memgest" => memgest = Some(val()?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.endpoints.is_empty() || o.node_id == 0 {
        return Err("--etcd URL and --node-id ID (> 0) are required".into());
    }
    if let Some(n) = nodes {
        o.config = Some(ClusterConfig {
            expect_nodes: n + spares,
            active: n,
            default_memgest: memgest,
            s: 2,
            d: 1,
        });
    }
    Ok(o)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ringlet-etcd-node: {e}");
            std::process::exit(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ringlet-etcd-node: runtime: {e}");
            std::process::exit(1);
        }
    };
    let r: Result<(), String> = rt.block_on(async {
        let n = run_node_etcd(&o).await.map_err(|e| e.to_string())?;
        {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "ringlet: listening on {}", n.client_addr);
            let _ = writeln!(out, "ringlet: control on {}", n.control_addr);
            let _ = out.flush();
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| e.to_string())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        n.shutdown().await;
        Ok(())
    });
    if let Err(e) = r {
        eprintln!("ringlet-etcd-node: error: {e}");
        std::process::exit(1);
    }
}
