//! Memgest commands of the CLI (docs/design/memgest-commands.md), against any node of a
//! cluster over RESP:
//!
//! ```text
//! ringlet memgest create NAME none|rep:R|ec:K+M   (or: rep R / ec K M)
//! ringlet memgest drop NAME | default NAME | list
//! ringlet memgest info [NAME] [--mttf HOURS] [--rebuild HOURS]
//! ringlet memgest move KEY NAME | key KEY
//! ringlet set KEY VALUE --memgest NAME
//! ringlet up --nodes N --spares S --port BASE --pg-data 3 --pg-redundant 2   (Ring's shape)
//! ```
//!
//! Management commands go to the node given (it forwards them to the control plane); per-key
//! commands follow `-MOVED` to the key's coordinator (at most a few hops).
//! Kept apart from `main.rs` so other cluster wiring (etcd) does not collide with it.

use crate::Conn;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Largest reply buffered (MEMGEST INFO of many memgests is a few KiB).
const REPLY_BYTES_MAX: usize = ringlet_types::limits::FRAME_BYTES_MAX as usize;
/// MOVED hops followed before giving up (a map change during the command).
const MOVED_HOPS_MAX: usize = 5;

#[derive(Args)]
pub struct MemgestCmd {
    #[command(flatten)]
    conn: MemgestConn,
    #[command(subcommand)]
    action: MemgestAction,
}

/// The node to talk to; global so it may follow the subcommand
/// (`ringlet memgest list --port 7001`).
#[derive(Args, Clone)]
struct MemgestConn {
    #[arg(long, global = true, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, global = true, default_value_t = ringlet_server::DEFAULT_PORT)]
    port: u16,
    /// Password, if the node has one.
    #[arg(long, global = true, env = "RINGLET_PASSWORD")]
    password: Option<String>,
}

impl MemgestConn {
    fn conn(&self) -> Conn {
        Conn {
            host: self.host.clone(),
            port: self.port,
            password: self.password.clone(),
        }
    }
}

#[derive(Subcommand)]
enum MemgestAction {
    /// Create a memgest: `none`, `rep:R` / `rep R`, `ec:K+M` / `ec K M`.
    Create {
        name: String,
        #[arg(required = true, num_args = 1..=3)]
        descriptor: Vec<String>,
    },
    /// Drop a memgest (refused while keys live in it).
    Drop { name: String },
    /// Make NAME the memgest of writes that name none.
    Default { name: String },
    /// List memgests: name, descriptor, default, keys, closing.
    List,
    /// Descriptor, keys, bytes, memory per payload byte, failures tolerated, and Ring's
    /// annual reliability and availability for the stated node MTTF and rebuild time.
    Info {
        name: Option<String>,
        /// Node mean time to failure, hours (default 43800 = 5 years).
        #[arg(long)]
        mttf: Option<f64>,
        /// Time to rebuild one node's share, hours (default 6).
        #[arg(long)]
        rebuild: Option<f64>,
    },
    /// Move KEY to memgest NAME (atomic: readers never see it missing).
    Move { key: String, name: String },
    /// The memgest and version of KEY.
    Key { key: String },
}

/// A RESP session to one node that follows MOVED.
struct Session {
    conn: Conn,
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Session {
    fn open(c: &Conn) -> Result<Session> {
        let stream = connect(&c.host, c.port, c.password.as_deref())?;
        Ok(Session {
            conn: c.clone(),
            stream,
            buf: Vec::new(),
        })
    }

    fn call_here(&mut self, args: &[&[u8]]) -> Result<Reply> {
        let mut out = Vec::new();
        encode_request(&mut out, args);
        self.stream.write_all(&out)?;
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some((reply, used)) = decode_reply(&self.buf)? {
                self.buf.drain(..used);
                return Ok(reply);
            }
            if self.buf.len() > REPLY_BYTES_MAX {
                bail!("reply larger than {REPLY_BYTES_MAX} bytes");
            }
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                bail!("connection closed by the server");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Run `args`; on `-MOVED slot ip:port` reconnect there and run it again.
    fn call(&mut self, args: &[&[u8]]) -> Result<Reply> {
        for _ in 0..MOVED_HOPS_MAX {
            let r = self.call_here(args)?;
            let Reply::Error(e) = &r else { return Ok(r) };
            let text = String::from_utf8_lossy(e).to_string();
            let Some(rest) = text.strip_prefix("MOVED ") else {
                return Ok(r);
            };
            let addr = rest.split(' ').nth(1).context("malformed MOVED")?;
            let (host, port) = addr.rsplit_once(':').context("malformed MOVED address")?;
            let port: u16 = port.parse().context("malformed MOVED port")?;
            self.stream = connect(host, port, self.conn.password.as_deref())?;
            self.buf.clear();
        }
        bail!("the key's coordinator kept moving (more than {MOVED_HOPS_MAX} MOVED)")
    }
}

fn connect(host: &str, port: u16, password: Option<&str>) -> Result<TcpStream> {
    let mut s = TcpStream::connect((host, port))
        .with_context(|| format!("cannot connect to {host}:{port}"))?;
    // A drop waits for every node's usage report (a few seconds at most).
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    if let Some(p) = password {
        let mut out = Vec::new();
        encode_request(&mut out, &[b"AUTH", p.as_bytes()]);
        s.write_all(&out)?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 512];
        loop {
            if let Some((r, _)) = decode_reply(&buf)? {
                if let Reply::Error(e) = r {
                    bail!("AUTH failed: {}", String::from_utf8_lossy(&e));
                }
                break;
            }
            let n = s.read(&mut chunk)?;
            if n == 0 || buf.len() > 4096 {
                bail!("AUTH: no reply");
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }
    Ok(s)
}

fn bulk_text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) | Reply::Simple(b) => String::from_utf8_lossy(b).to_string(),
        Reply::Integer(i) => i.to_string(),
        Reply::Null => "(nil)".to_string(),
        other => format!("{other:?}"),
    }
}

/// Print a reply; an error reply is the command's error (exit code 1).
fn print(r: &Reply) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match r {
        Reply::Error(e) | Reply::BlobError(e) => bail!("(error) {}", String::from_utf8_lossy(e)),
        Reply::Bulk(b) => {
            out.write_all(b)?;
            if !b.ends_with(b"\n") {
                writeln!(out)?;
            }
        }
        Reply::Array(items) => {
            for i in items {
                match i {
                    Reply::Array(f) => {
                        writeln!(
                            out,
                            "{}",
                            f.iter().map(bulk_text).collect::<Vec<_>>().join("\t")
                        )?;
                    }
                    other => writeln!(out, "{}", bulk_text(other))?,
                }
            }
        }
        other => writeln!(out, "{}", bulk_text(other))?,
    }
    Ok(())
}

/// `ringlet memgest ...`.
pub fn run(cmd: &MemgestCmd) -> Result<()> {
    let mut s = Session::open(&cmd.conn.conn())?;
    let mut args: Vec<Vec<u8>> = vec![b"MEMGEST".to_vec()];
    let mut push = |a: &str| args.push(a.as_bytes().to_vec());
    match &cmd.action {
        MemgestAction::Create { name, descriptor } => {
            push("CREATE");
            push(name);
            for d in descriptor {
                push(d);
            }
        }
        MemgestAction::Drop { name } => {
            push("DROP");
            push(name);
        }
        MemgestAction::Default { name } => {
            push("DEFAULT");
            push(name);
        }
        MemgestAction::List => push("LIST"),
        MemgestAction::Info {
            name,
            mttf,
            rebuild,
        } => {
            push("INFO");
            if let Some(n) = name {
                push(n);
            }
            if let Some(h) = mttf {
                push("MTTF");
                push(&h.to_string());
            }
            if let Some(h) = rebuild {
                push("REBUILD");
                push(&h.to_string());
            }
        }
        MemgestAction::Move { key, name } => {
            push("MOVE");
            push(key);
            push(name);
        }
        MemgestAction::Key { key } => {
            push("KEY");
            push(key);
        }
    }
    if matches!(cmd.action, MemgestAction::List) {
        println!("name\tdescriptor\tdefault\tkeys\tclosing");
    }
    let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
    print(&s.call(&refs)?)
}

/// `ringlet set KEY VALUE --memgest NAME [--ex S]` (cluster mode: TTLs are refused there).
pub fn set_in(c: &Conn, key: &str, value: &str, memgest: &str, ex: Option<u64>) -> Result<()> {
    let mut s = Session::open(c)?;
    let ex_s = ex.map(|e| e.to_string());
    let mut args: Vec<&[u8]> = vec![b"SET", key.as_bytes(), value.as_bytes()];
    if let Some(e) = &ex_s {
        args.push(b"EX");
        args.push(e.as_bytes());
    }
    args.push(b"MEMGEST");
    args.push(memgest.as_bytes());
    print(&s.call(&args)?)
}

/// Placement-group shape for `ringlet up` (Ring's evaluation: 5 nodes, s = 3, d = 2, so
/// rep:3 and ec:3+2 both fit).
#[derive(Args, Clone, Copy, Debug)]
pub struct PgShape {
    /// Data nodes per placement group (s). With --pg-redundant, `up` builds the cluster
    /// itself with this shape (the default shape is s = 2, d = 1).
    #[arg(long = "pg-data", requires = "pg_redundant")]
    pub pg_data: Option<u8>,
    /// Redundant nodes per placement group (d): bounds ec's M and rep's R <= s + d.
    #[arg(long = "pg-redundant", requires = "pg_data")]
    pub pg_redundant: Option<u8>,
}

/// What [`up_shaped`] needs from `ringlet up`'s arguments.
pub struct ShapedUp {
    pub nodes: usize,
    pub spares: usize,
    pub base_port: u16,
    pub default_memgest: Option<ringlet_types::MemgestKind>,
    pub lease_ms: u64,
    pub memory_bytes: u64,
    pub s: u8,
    pub d: u8,
}

/// `ringlet up --nodes N --spares S --port BASE --pg-data s --pg-redundant d`: like
/// `ringlet_cluster::launch::up` (control plane in this process on BASE+N+S, N+S
/// `ringlet server --cluster` processes on BASE..), with the placement-group shape given.
/// Prints `node ID pid PID port PORT` per node, then `ringlet cluster ready: ...` once every
/// node answers CLUSTER INFO with the control plane's epoch; Ctrl-C / SIGTERM stops all.
pub fn up_shaped(o: &ShapedUp) -> Result<()> {
    use ringlet_cluster::launch::{ringlet_server_node_args, run_control, ControlOpts};
    if o.s == 0 || o.nodes < usize::from(o.s) + usize::from(o.d) {
        bail!(
            "placement groups of s={} d={} need at least {} active nodes (--nodes {})",
            o.s,
            o.d,
            usize::from(o.s) + usize::from(o.d),
            o.nodes
        );
    }
    let total = o.nodes + o.spares;
    let control_port = o.base_port.saturating_add(total as u16);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (svc, caddr) = run_control(&ControlOpts {
            bind: std::net::SocketAddr::from(([127, 0, 0, 1], control_port)),
            expect_nodes: total,
            active: o.nodes,
            default_memgest: o.default_memgest,
            s: o.s,
            d: o.d,
            lease_ms: o.lease_ms,
        })
        .await?;
        let exe = std::env::current_exe()?;
        let mut children = Vec::new();
        for i in 0..total {
            let port = o.base_port.saturating_add(i as u16);
            let args = ringlet_server_node_args(
                (i + 1) as u32,
                port,
                &caddr.to_string(),
                o.lease_ms,
                o.memory_bytes,
            );
            let child = std::process::Command::new(&exe)
                .args(&args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .spawn()?;
            println!("node {} pid {} port {port}", i + 1, child.id());
            children.push(child);
        }
        let ports: Vec<u16> = (0..total)
            .map(|i| o.base_port.saturating_add(i as u16))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        let ready = loop {
            let map = svc.map();
            if map.placement.is_some() {
                let want = format!("cluster_current_epoch:{}\r\n", map.epoch.0);
                let ps = ports.clone();
                // Blocking probes off the runtime's workers: the control service shares them.
                let all = tokio::task::spawn_blocking(move || {
                    ps.iter().all(|p| {
                        cluster_info(*p)
                            .is_some_and(|i| i.starts_with("cluster_state:ok") && i.contains(&want))
                    })
                })
                .await
                .unwrap_or(false);
                if all {
                    break Some(map.epoch);
                }
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        match ready {
            Some(e) => {
                println!(
                    "ringlet cluster ready: {} nodes + {} spares on 127.0.0.1:{}..{}, control {caddr}, epoch {e}, placement groups s={} d={}",
                    o.nodes,
                    o.spares,
                    o.base_port,
                    o.base_port as usize + total - 1,
                    o.s,
                    o.d
                );
                std::io::stdout().flush()?;
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            None => eprintln!("ringlet up: the cluster did not become ready within 60 s"),
        }
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        Ok::<(), anyhow::Error>(())
    })
}

/// `CLUSTER INFO` of the node on `port` (blocking, short timeouts: readiness polling).
fn cluster_info(port: u16) -> Option<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"*2\r\n$7\r\nCLUSTER\r\n$4\r\nINFO\r\n").ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some((Reply::Bulk(b), _))) = decode_reply(&buf) {
            return String::from_utf8(b).ok();
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 || buf.len() > 64 * 1024 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
