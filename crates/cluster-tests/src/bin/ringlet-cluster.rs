//! `ringlet-cluster`: run the pieces of a Ringlet cluster.
//!
//! ```text
//! ringlet-cluster up --nodes N --spares S --port BASE [--default-memgest rep:3] [--lease-ms MS] [--shm-dir DIR]
//! ringlet-cluster control --port P [--bind IP] [--nodes N --spares S] [--default-memgest rep:3] [--pg-data S --pg-redundant D]
//! ringlet-cluster node --id ID --port P [--bind IP] --control HOST:PORT [--peer-port P] [--lease-ms MS] [--shm-socket PATH]
//! ringlet-cluster drain --control HOST:PORT ID
//! ringlet-cluster map --control HOST:PORT
//! ```

use ringlet_cluster::control::{request, FromControl, ToControl};
use ringlet_cluster::launch::{self, ControlOpts, NodeOpts, UpOpts, DEFAULT_LEASE_MS};
use ringlet_types::MemgestKind;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "usage:\n  ringlet-cluster up --nodes N --spares S --port BASE [--default-memgest rep:3] [--lease-ms MS] [--shm-dir DIR] [--status-port P]\n  ringlet-cluster control --port P [--bind IP] [--nodes N --spares S] [--default-memgest rep:3] [--pg-data S --pg-redundant D]\n  ringlet-cluster node --id ID --port P [--bind IP] --control HOST:PORT [--peer-port P] [--lease-ms MS] [--shm-socket PATH]\n  ringlet-cluster drain --control HOST:PORT ID\n  ringlet-cluster map --control HOST:PORT"
    );
    ExitCode::from(2)
}

struct Args {
    flags: HashMap<String, String>,
    positional: Vec<String>,
}

impl Args {
    fn parse(v: &[String]) -> Option<Args> {
        let mut flags = HashMap::new();
        let mut positional = Vec::new();
        let mut it = v.iter();
        while let Some(a) = it.next() {
            if let Some(f) = a.strip_prefix("--") {
                flags.insert(f.to_string(), it.next()?.clone());
            } else {
                positional.push(a.clone());
            }
        }
        Some(Args { flags, positional })
    }
    fn get<T: std::str::FromStr>(&self, k: &str) -> Result<Option<T>, String> {
        match self.flags.get(k) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("bad value for --{k}: {v}")),
        }
    }
    fn req<T: std::str::FromStr>(&self, k: &str) -> Result<T, String> {
        self.get(k)?.ok_or_else(|| format!("--{k} is required"))
    }
    /// `--bind IP` (default loopback). Multi-host tests run nodes in network namespaces and
    /// bind them to their veth address; the announced address in the map is this one.
    fn bind_ip(&self) -> Result<std::net::IpAddr, String> {
        Ok(self
            .get("bind")?
            .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1])))
    }
    fn memgest(&self) -> Result<Option<MemgestKind>, String> {
        match self.flags.get("default-memgest") {
            None => Ok(None),
            Some(s) => MemgestKind::parse(s).map(Some).map_err(|e| e.to_string()),
        }
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

fn run(cmd: &str, a: &Args) -> Result<(), String> {
    let rt = runtime().map_err(|e| e.to_string())?;
    let lease_ms = a.get("lease-ms")?.unwrap_or(DEFAULT_LEASE_MS);
    let memory_bytes = a.get("memory")?.unwrap_or(512u64 << 20);
    match cmd {
        "up" => {
            let o = UpOpts {
                nodes: a.req("nodes")?,
                spares: a.get("spares")?.unwrap_or(0),
                base_port: a.req("port")?,
                control_port: a.get("control-port")?,
                default_memgest: a.memgest()?,
                lease_ms,
                // Test harness: ec resharding is exercised here.
                ec_moves: true,
                memory_bytes,
                exe: std::env::current_exe().map_err(|e| e.to_string())?,
                node_args: launch::ringlet_cluster_node_args,
                requirepass: std::env::var(launch::REQUIREPASS_ENV).ok(),
                admin_token: None,
                pg: None,
                tls: None,
                admin_offset: None,
                node_threads: 0,
                shm_dir: a.get("shm-dir")?,
                status_port: a.get("status-port")?,
                auto_balance: None,
                restart_nodes: false,
            };
            rt.block_on(launch::up(&o)).map_err(|e| e.to_string())
        }
        "control" => {
            let nodes: usize = a.get("nodes")?.unwrap_or(0);
            let spares: usize = a.get("spares")?.unwrap_or(0);
            let port: u16 = a.req("port")?;
            // PG shape: as `up` chooses it (an ec:K+M default gets s=K, d=M), unless given.
            let (s0, d0) = launch::pg_shape(nodes, a.memgest()?);
            let o = ControlOpts {
                bind: SocketAddr::new(a.bind_ip()?, port),
                expect_nodes: nodes + spares,
                active: nodes,
                default_memgest: a.memgest()?,
                s: a.get("pg-data")?.unwrap_or(s0),
                d: a.get("pg-redundant")?.unwrap_or(d0),
                lease_ms,
                // Test harness: ec resharding is exercised here.
                ec_moves: true,
            };
            rt.block_on(async {
                let (_svc, addr) = launch::run_control(&o).await.map_err(|e| e.to_string())?;
                println!("ringlet control plane listening on {addr}");
                wait_for_signal().await;
                Ok(())
            })
        }
        "node" => {
            let port: u16 = a.req("port")?;
            let o = NodeOpts {
                id: a.req("id")?,
                bind: SocketAddr::new(a.bind_ip()?, port),
                peer_port: a.get("peer-port")?.unwrap_or(0),
                control: a.req("control")?,
                lease_ms,
                memory_bytes,
                requirepass: std::env::var(launch::REQUIREPASS_ENV).ok(),
                admin_token: None,
                tls: None,
                admin_port: None,
            };
            rt.block_on(async {
                let (node, addr) = launch::run_node_shm(&o, a.get("shm-socket")?)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("ringlet node {} serving on {addr}", o.id);
                wait_for_signal().await;
                node.stop();
                Ok(())
            })
        }
        "drain" | "map" => {
            let control: String = a.req("control")?;
            let req = if cmd == "drain" {
                let id: u32 = a
                    .positional
                    .first()
                    .and_then(|s| s.parse().ok())
                    .ok_or("drain needs a node id")?;
                ToControl::Drain { node: id }
            } else {
                ToControl::Watch
            };
            let r = rt
                .block_on(request(&control, &req))
                .map_err(|e| e.to_string())?;
            match r {
                FromControl::Ok => {
                    println!("OK");
                    Ok(())
                }
                FromControl::Map(m) => {
                    println!("{}", m.to_json().map_err(|e| e.to_string())?);
                    Ok(())
                }
                FromControl::Error(e) => Err(e),
                other => Err(format!("unexpected reply {other:?}")),
            }
        }
        _ => Err(format!("unknown command {cmd}")),
    }
}

fn main() -> ExitCode {
    // The cluster crates log warnings through `tracing`: print them, as `ringlet` does.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = argv.split_first() else {
        return usage();
    };
    let Some(a) = Args::parse(rest) else {
        return usage();
    };
    match run(cmd, &a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringlet-cluster {cmd}: {e}");
            ExitCode::FAILURE
        }
    }
}
