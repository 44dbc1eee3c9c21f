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
use std::time::Duration;

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
