//! The command line of linked services: the coordinator, a member of the demo `accounts`
//! service ([`crate::demo`]) and an HTTP front over the [`Router`]. Shared by the
//! `ringlet-linked` binary and `ringlet linked`.
//!
//! ```text
//! ringlet linked coordinator --listen 127.0.0.1:7400
//! ringlet linked member --coordinator 127.0.0.1:7400 --service accounts
//! ringlet linked front --coordinator 127.0.0.1:7400 --service accounts --listen 127.0.0.1:8080
//! curl 127.0.0.1:8080/u/alice/add/5     # -> 5
//! ```
//!
//! Each prints one line when ready (`coordinator ADDR`, `member ID ADDR`, `front ADDR`) so
//! scripts and tests can find the ports; members then print `loss FIRST LAST REASON` for every
//! state-loss event their Linklet reports. A member given SIGTERM leaves gracefully (its units
//! are moved to the others) and prints `left <why>`.

use std::io::Write;
use std::net::SocketAddr;

use clap::Subcommand;

use crate::coordinator::{self, CoordinatorConfig};
use crate::{demo, limits, Member, MemberConfig, Router, SharderConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `ringlet-linked <cmd>` and `ringlet linked <cmd>`.
#[derive(Subcommand)]
pub enum LinkedCmd {
    /// Run the coordinator (auto-sharder) for linked services.
    Coordinator {
        #[arg(long, default_value = "127.0.0.1:7400")]
        listen: SocketAddr,
        /// Units the slots are cut into.
        #[arg(long, default_value_t = 64)]
        units: u16,
        #[arg(long, default_value_t = 2000)]
        lease_ms: u64,
        #[arg(long, default_value_t = 250)]
        heartbeat_ms: u64,
        #[arg(long, default_value_t = 30)]
        moves_per_minute: u32,
        #[arg(long, default_value_t = 30_000)]
        unit_cooldown_ms: u64,
        #[arg(long, default_value_t = 0.25)]
        imbalance_threshold: f64,
        #[arg(long, default_value_t = 100)]
        tick_ms: u64,
        /// Copies of each unit for every service: 1 (no replication, the default) or 2 (a
        /// backup member per unit; writes answered once the backup has them).
        #[arg(long, default_value_t = 1)]
        replicas: u8,
        /// Per-service override, `SERVICE=N` (repeatable).
        #[arg(long = "replicas-for", value_parser = parse_replicas_for)]
        replicas_for: Vec<(String, u8)>,
        /// After a start, rebuild the map from rejoining members for this long before giving
        /// unclaimed units away (default: lease + heartbeat; 0: none, a fresh start).
        #[arg(long)]
        recovery_ms: Option<u64>,
    },
    /// Run a member of the demo `accounts` service.
    Member {
        #[arg(long)]
        coordinator: String,
        #[arg(long, default_value = "accounts")]
        service: String,
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// Run an HTTP front: `GET /u/<user>` and `GET /u/<user>/add/<n>`.
    Front {
        #[arg(long)]
        coordinator: String,
        #[arg(long, default_value = "accounts")]
        service: String,
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
}

fn parse_replicas_for(s: &str) -> Result<(String, u8), String> {
    let (name, n) = s.split_once('=').ok_or("expected SERVICE=N")?;
    let n: u8 = n.parse().map_err(|_| "N: 1 or 2")?;
    Ok((name.to_owned(), n))
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Run one subcommand to its end on a runtime of its own (two workers: the coordinator and
/// the demo member are light, and the hosts these run on are small).
///
/// # Errors
/// What stopped it, as text.
pub fn run(cmd: LinkedCmd) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run_async(cmd))
}

async fn run_async(cmd: LinkedCmd) -> Result<(), String> {
    match cmd {
        LinkedCmd::Coordinator {
            listen,
            units,
            lease_ms,
            heartbeat_ms,
            moves_per_minute,
            unit_cooldown_ms,
            imbalance_threshold,
            tick_ms,
            replicas,
            replicas_for,
            recovery_ms,
        } => {
            let cfg = CoordinatorConfig {
                sharder: SharderConfig {
                    units,
                    lease_ms,
                    heartbeat_ms,
                    moves_per_minute,
                    unit_cooldown_ms,
                    imbalance_threshold,
                    replicas,
                    recovery_ms: recovery_ms.unwrap_or(lease_ms + heartbeat_ms),
                    ..SharderConfig::default()
                },
                tick_ms,
                replicas_for: replicas_for.into_iter().collect(),
            };
            match coordinator::spawn(listen, cfg).await {
                Ok((addr, task)) => {
                    say(&format!("coordinator {addr}"));
                    match task.await {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
                Err(e) => Err(e.to_string()),
            }
        }
        LinkedCmd::Member {
            coordinator,
            service,
            listen,
        } => {
            let linklet = demo::linklet();
            let mut losses = linklet.subscribe();
            let cfg = MemberConfig {
                coordinator,
                service,
                listen,
                advertise: None,
            };
            match Member::start(cfg, linklet, demo::handle).await {
                Ok(mut m) => {
                    say(&format!("member {} {}", m.id(), m.addr()));
                    tokio::spawn(async move {
                        // Ends with the Linklet (never, in this process).
                        while let Ok(l) = losses.recv().await {
                            say(&format!(
                                "loss {} {} {:?}",
                                l.slots.start(),
                                l.slots.end(),
                                l.reason
                            ));
                        }
                    });
                    // SIGTERM: leave gracefully (units moved away, nothing lost), then exit.
                    let mut term =
                        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                            .map_err(|e| e.to_string())?;
                    tokio::select! {
                        why = m.closed() => return Err(why),
                        _ = term.recv() => {}
                    }
                    m.leave().await;
                    let why = m.closed().await;
                    say(&format!("left {why}"));
                    Ok(())
                }
                Err(e) => Err(e.to_string()),
            }
        }
        LinkedCmd::Front {
            coordinator,
            service,
            listen,
        } => front(&coordinator, &service, listen).await,
    }
}

async fn front(coordinator: &str, service: &str, listen: SocketAddr) -> Result<(), String> {
    let router = Router::connect(coordinator, service)
        .await
        .map_err(|e| e.to_string())?;
    // The demo front has no authentication either.
    crate::coordinator::loopback_only(listen).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| e.to_string())?;
    say(&format!(
        "front {}",
        listener.local_addr().map_err(|e| e.to_string())?
    ));
    loop {
        let (mut s, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let router = router.clone();
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(1024);
            // One request per round (keep-alive); ends when the client closes or misbehaves.
            loop {
                let Some(end) = read_head(&mut s, &mut buf).await else {
                    return;
                };
                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                buf.drain(..end + 4);
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
                let (status, body) = match parts.as_slice() {
                    ["u", user] => route(&router, user, "get".into()).await,
                    ["u", user, "add", n] => route(&router, user, format!("add {n}")).await,
                    _ => (404, "not found\n".to_owned()),
                };
                let resp = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\ncontent-type: text/plain\r\n\r\n{body}",
                    if status == 200 { "OK" } else { "ERR" },
                    body.len()
                );
                if s.write_all(resp.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

async fn route(router: &Router, user: &str, body: String) -> (u16, String) {
    match router.call(user.as_bytes(), body.as_bytes()).await {
        Ok(b) => (200, format!("{}\n", String::from_utf8_lossy(&b))),
        Err(crate::RouteError::App(m)) => (400, format!("{m}\n")),
        Err(e) => (503, format!("{e}\n")),
    }
}

/// Read until the end of a request head (`\r\n\r\n`); its offset, or `None` on close/abuse.
async fn read_head(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i);
        }
        if buf.len() > limits::HTTP_HEAD_BYTES_MAX {
            return None;
        }
        let mut chunk = [0u8; 1024];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
