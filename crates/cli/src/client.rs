//! Client subcommands (`ringlet get/set/del/incr/mget/ping/info`).
//!
//! GET, SET, DEL, INCR, MGET and PING speak the native protocol through `ringlet-client`.
//! A password is sent as the native AUTH frame. INFO speaks RESP (through the codec's request
//! encoder and reply decoder): the native protocol has no INFO frame. Output
//! follows redis-cli's plain (non-tty) style: one value per line, `(nil)` for a missing key,
//! `(error) ...` with exit code 1.

use crate::Conn;
use anyhow::{bail, Context, Result};
use ringlet_client::{
    BlockingClient, BlockingClusterClient, ClientConfig, ClusterConfig, DelOutcome, SetOptions,
    Status,
};

use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Largest reply the CLI buffers (INFO, MGET of big values): one max-size frame.
const REPLY_BYTES_MAX: usize = ringlet_types::limits::FRAME_BYTES_MAX as usize;

struct Session {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Session {
    fn open(c: &Conn) -> Result<Session> {
        let stream = TcpStream::connect((c.host.as_str(), c.port))
            .with_context(|| format!("cannot connect to {}:{}", c.host, c.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut s = Session {
            stream,
            buf: Vec::new(),
        };
        if let Some(p) = &c.password {
            let r = s.call(&[b"AUTH", p.as_bytes()])?;
            if let Reply::Error(e) = r {
                bail!("AUTH failed: {}", String::from_utf8_lossy(&e));
            }
        }
        Ok(s)
    }

    fn call(&mut self, args: &[&[u8]]) -> Result<Reply> {
        let mut out = Vec::new();
        encode_request(&mut out, args);
        self.stream.write_all(&out)?;
        let mut chunk = [0u8; 16 * 1024];
        // Bounded by REPLY_BYTES_MAX.
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
}

/// Print a reply like `redis-cli` does when its output is not a terminal.
fn print(r: &Reply) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match r {
        Reply::Error(e) | Reply::BlobError(e) => {
            bail!("(error) {}", String::from_utf8_lossy(e));
        }
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => {
            for i in items {
                match i {
                    Reply::Null | Reply::NullArray => writeln!(out)?,
                    other => write_scalar(&mut out, other)?,
                }
            }
        }
        Reply::Null | Reply::NullArray => writeln!(out, "(nil)")?,
        other => write_scalar(&mut out, other)?,
    }
    Ok(())
}

fn write_scalar(out: &mut impl Write, r: &Reply) -> Result<()> {
    match r {
        Reply::Simple(s) | Reply::Bulk(s) | Reply::BigNumber(s) => {
            out.write_all(s)?;
            writeln!(out)?;
        }
        Reply::Verbatim { text, .. } => {
            out.write_all(text)?;
            writeln!(out)?;
        }
        Reply::Integer(i) => writeln!(out, "{i}")?,
        Reply::Double(d) => writeln!(out, "{d}")?,
        Reply::Boolean(b) => writeln!(out, "{}", i32::from(*b))?,
        other => writeln!(out, "{other:?}")?,
    }
    Ok(())
}

fn run(c: &Conn, args: &[&[u8]]) -> Result<()> {
    let mut s = Session::open(c)?;
    print(&s.call(args)?)
}

/// The client settings of the CLI's native calls: a long deadline, and `--password` as AUTH.
fn client_config(c: &Conn) -> ClientConfig {
    ClientConfig {
        timeout: Duration::from_secs(30),
        auth: c.password.as_ref().map(|p| ringlet_client::Credentials {
            user: String::new(),
            password: p.clone(),
        }),
        ..ClientConfig::default()
    }
}

/// A native client (`Option` for the callers' RESP fallback, which no mode needs now).
fn native(c: &Conn) -> Result<Option<BlockingClient>> {
    let addr = format!("{}:{}", c.host, c.port);
    let cfg = client_config(c);
    let client =
        BlockingClient::connect(&addr, cfg).with_context(|| format!("cannot connect to {addr}"))?;
    Ok(Some(client))
}

fn print_value(v: Option<&[u8]>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match v {
        Some(b) => {
            out.write_all(b)?;
            writeln!(out)?;
        }
        None => writeln!(out, "(nil)")?,
    }
    Ok(())
}

pub fn get(c: &Conn, key: &str) -> Result<()> {
    match native(c)? {
        Some(n) => print_value(n.get(key.as_bytes())?.value.as_deref()),
        None => run(c, &[b"GET", key.as_bytes()]),
    }
}

pub fn set(c: &Conn, key: &str, value: &str, ex: Option<u64>) -> Result<()> {
    if let Some(n) = native(c)? {
        let mut opts = SetOptions::default();
        if let Some(s) = ex {
            if s == 0 {
                bail!("(error) ERR invalid expire time in 'set' command");
            }
            opts = opts.ttl(Duration::from_secs(s));
        }
        n.set(key.as_bytes(), value.as_bytes(), opts)?;
        println!("OK");
        return Ok(());
    }
    match ex {
        Some(s) => run(
            c,
            &[
                b"SET",
                key.as_bytes(),
                value.as_bytes(),
                b"EX",
                s.to_string().as_bytes(),
            ],
        ),
        None => run(c, &[b"SET", key.as_bytes(), value.as_bytes()]),
    }
}

pub fn del(c: &Conn, keys: &[String]) -> Result<()> {
    if let Some(n) = native(c)? {
        let mut deleted = 0;
        for k in keys {
            if n.del(k.as_bytes(), None)?.value == DelOutcome::Deleted {
                deleted += 1;
            }
        }
        println!("{deleted}");
        return Ok(());
    }
    let mut args: Vec<&[u8]> = vec![b"DEL"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    run(c, &args)
}

pub fn incr(c: &Conn, key: &str, by: i64) -> Result<()> {
    if let Some(n) = native(c)? {
        println!("{}", n.incr_by(key.as_bytes(), by)?.value);
        return Ok(());
    }
    run(c, &[b"INCRBY", key.as_bytes(), by.to_string().as_bytes()])
}

pub fn mget(c: &Conn, keys: &[String]) -> Result<()> {
    if let Some(n) = native(c)? {
        let ks: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let values: Vec<Option<_>> = match n.mget(&ks) {
            Ok(v) => v.value.into_iter().map(|v| v.value).collect(),
            // A cluster node coordinates only some of the keys: the node-level client sends
            // one batch and follows MOVED per key only for single-key calls, so read through
            // the cluster client, which splits the keys by coordinator (MGET only reads, so
            // asking again is safe).
            Err(ringlet_client::Error::Server { status, .. }) if status == Status::MOVED => {
                let addr = format!("{}:{}", c.host, c.port);
                let cfg = ClusterConfig {
                    client: client_config(c),
                    ..ClusterConfig::default()
                };
                let cluster = BlockingClusterClient::connect(&[addr.as_str()], cfg)
                    .with_context(|| format!("cannot reach the cluster through {addr}"))?;
                cluster.mget(&ks)?.into_iter().map(|v| v.value).collect()
            }
            Err(e) => return Err(e.into()),
        };
        for v in values {
            // redis-cli prints an empty line for a missing key inside an array.
            match v {
                Some(b) => print_value(Some(&b))?,
                None => println!(),
            }
        }
        return Ok(());
    }
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    run(c, &args)
}

pub fn ping(c: &Conn) -> Result<()> {
    if let Some(n) = native(c)? {
        n.ping()?;
        println!("PONG");
        return Ok(());
    }
    run(c, &[b"PING"])
}

/// The value of `field` in `INFO section` (None if the server has no such field).
pub fn info_field(c: &Conn, section: &str, field: &str) -> Result<Option<String>> {
    let mut s = Session::open(c)?;
    let text = match s.call(&[b"INFO", section.as_bytes()])? {
        Reply::Bulk(b) | Reply::Verbatim { text: b, .. } => {
            String::from_utf8_lossy(&b).into_owned()
        }
        Reply::Error(e) => bail!("INFO: {}", String::from_utf8_lossy(&e)),
        other => bail!("INFO: unexpected reply {other:?}"),
    };
    Ok(text.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    }))
}

pub fn info(c: &Conn, section: Option<&str>) -> Result<()> {
    match section {
        Some(s) => run(c, &[b"INFO", s.as_bytes()]),
        None => run(c, &[b"INFO"]),
    }
}
