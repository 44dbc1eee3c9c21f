//! Test harness: a real Redis 7 (`redis-server` on a free port) and an in-process Ringlet node
//! on 127.0.0.1:0, side by side, so the same command sequences can be sent to both.
//!
//! Redis missing: the tests print a loud SKIP message and pass, unless `RINGLET_REQUIRE_REDIS`
//! is set (CI sets it), in which case they fail.
//!
//! Readiness is awaited by polling a connection with PING (bounded attempts), never by a
//! fixed sleep.

#![allow(dead_code)]

use ringlet_codec::resp::scan_reply;
use ringlet_server::{Config, Server, ServerHandle};
use ringlet_testkit::redis::wait_ready;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub use ringlet_testkit::redis::RedisProc;

/// Start `redis-server` with `extra` arguments (`ringlet_testkit::redis`), or `None` when it
/// is not installed and `RINGLET_REQUIRE_REDIS` is unset.
pub fn start_redis(extra: &[&str]) -> Option<RedisProc> {
    ringlet_testkit::redis::start_redis(extra, "differential test")
}

/// The worker loop the suites run on: unset, the node's default (`auto`: io_uring where this
/// kernel allows it); `RINGLET_IO=epoll` runs every suite that starts its node through this
/// harness on the epoll loop (scripts/ci.sh runs the crate's suites once each way).
pub fn io_from_env() -> ringlet_server::IoMode {
    match std::env::var("RINGLET_IO") {
        Ok(v) => ringlet_server::IoMode::parse(&v)
            .unwrap_or_else(|| panic!("RINGLET_IO={v:?}: expected auto, epoll or uring")),
        Err(_) => ringlet_server::IoMode::Auto,
    }
}

/// Start an in-process Ringlet node on a free port.
pub fn start_ringlet(requirepass: Option<&str>) -> ServerHandle {
    let cfg = Config {
        port: 0,
        threads: 2,
        memory_mb: 64,
        requirepass: requirepass.map(str::to_owned),
        io: io_from_env(),
        ..Config::default()
    };
    let h = Server::start(cfg).expect("start ringlet");
    assert!(wait_ready(h.local_addr()));
    h
}

/// A raw RESP connection: send bytes, read back exactly one reply's bytes.
pub struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Raw { s, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).expect("write");
    }

    /// Read one complete RESP reply and return its bytes.
    pub fn reply(&mut self) -> Vec<u8> {
        let mut chunk = [0u8; 65536];
        loop {
            if let Some((_, n)) = scan_reply(&self.buf).expect("valid RESP reply") {
                return self.buf.drain(..n).collect();
            }
            let n = self.s.read(&mut chunk).expect("read reply");
            assert!(
                n > 0,
                "connection closed while waiting for a reply (have {:?})",
                String::from_utf8_lossy(&self.buf)
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Encode `args` as a RESP array, send it, and return the reply bytes.
    pub fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(&encode(args));
        self.reply()
    }

    /// Everything until the server closes the connection (for protocol-error tests).
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        let mut chunk = [0u8; 65536];
        loop {
            match self.s.read(&mut chunk) {
                Ok(0) => return out,
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return out,
                Err(e) => panic!("read: {e}"),
            }
        }
    }
}

pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    ringlet_codec::resp::encode_request(&mut out, args);
    out
}

/// Split a command line on spaces (tests write `"SET k v EX 10"`).
pub fn words(line: &str) -> Vec<Vec<u8>> {
    line.split(' ')
        .filter(|w| !w.is_empty())
        .map(|w| w.as_bytes().to_vec())
        .collect()
}

/// A parsed RESP2/RESP3 reply, for field-level comparisons where whole replies legitimately
/// differ (ids, ports, a command table that is a subset of Redis's).
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(dead_code)] // each test binary uses a different part of this module
pub enum Val {
    /// `+ - : , # ( _` and the like: type byte and the line.
    Line(u8, Vec<u8>),
    /// `$` or `=` (verbatim) or `!`; None for a RESP2 null bulk.
    Bulk(Option<Vec<u8>>),
    /// `* ~ >`; an empty RESP2 null array parses as an empty list.
    List(Vec<Val>),
    /// `%` (RESP3 maps); RESP2 servers send maps as flat lists.
    Map(Vec<(Val, Val)>),
}

#[allow(dead_code)]
impl Val {
    /// Parse one complete reply (panics on malformed input: the test's oracle is broken then).
    pub fn parse(b: &[u8]) -> Val {
        let (v, n) = Self::at(b);
        assert_eq!(n, b.len(), "trailing bytes after a reply");
        v
    }

    fn at(b: &[u8]) -> (Val, usize) {
        let eol = b.windows(2).position(|w| w == b"\r\n").expect("CRLF");
        let line = &b[1..eol];
        let num = || -> i64 { std::str::from_utf8(line).unwrap().parse().unwrap() };
        match b[0] {
            b'$' | b'=' | b'!' => {
                let n = num();
                if n < 0 {
                    return (Val::Bulk(None), eol + 2);
                }
                let s = eol + 2;
                let n = n as usize;
                // A verbatim string's `txt:` prefix is framing, not content.
                let skip = if b[0] == b'=' { 4 } else { 0 };
                (Val::Bulk(Some(b[s + skip..s + n].to_vec())), s + n + 2)
            }
            b'*' | b'~' | b'>' | b'%' => {
                let n = num();
                let mut pos = eol + 2;
                let count = if n < 0 { 0 } else { n as usize };
                let mut items = Vec::new();
                for _ in 0..count * if b[0] == b'%' { 2 } else { 1 } {
                    let (v, used) = Self::at(&b[pos..]);
                    items.push(v);
                    pos += used;
                }
                if b[0] == b'%' {
                    let mut it = items.into_iter();
                    let mut pairs = Vec::new();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    (Val::Map(pairs), pos)
                } else {
                    (Val::List(items), pos)
                }
            }
            t => (Val::Line(t, line.to_vec()), eol + 2),
        }
    }

    /// The string inside a bulk or simple-string reply.
    pub fn text(&self) -> String {
        match self {
            Val::Bulk(Some(b)) | Val::Line(_, b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("not a string: {other:?}"),
        }
    }

    /// Key/value pairs of a map reply, or of a RESP2 flat list of alternating keys and values.
    pub fn pairs(&self) -> Vec<(Val, Val)> {
        match self {
            Val::Map(p) => p.clone(),
            Val::List(items) => {
                assert!(items.len() % 2 == 0, "odd-length list is not a map");
                items
                    .chunks(2)
                    .map(|c| (c[0].clone(), c[1].clone()))
                    .collect()
            }
            other => panic!("not a map: {other:?}"),
        }
    }

    pub fn items(&self) -> &[Val] {
        match self {
            Val::List(items) => items,
            other => panic!("not a list: {other:?}"),
        }
    }
}

/// A COMMAND / COMMAND INFO entry of Ringlet against Redis's entry for the same command:
/// equal element by element, except element 9 (subcommands), where Ringlet lists a subset
/// (of CLIENT, CONFIG, COMMAND), each equal to Redis's.
#[allow(dead_code)]
pub fn command_entry_mismatch(redis: &Val, ringlet: &Val) -> Option<String> {
    let (ri, gi) = (redis.items(), ringlet.items());
    if ri.len() != gi.len() {
        return Some(format!("{} elements vs Redis's {}", gi.len(), ri.len()));
    }
    for (i, (a, b)) in ri.iter().zip(gi).enumerate() {
        if i == 9 {
            let subs = a.items();
            for e in b.items() {
                // Subcommands Redis 7.0 lacks (Ringlet's own, and 7.2's CLIENT SETINFO) are
                // not Redis's to judge.
                let own = matches!(
                    e.items().first().map(Val::text).as_deref(),
                    Some("cluster|ringlet-load" | "client|setinfo")
                );
                if !own && !subs.contains(e) {
                    return Some(format!("subcommand entry {e:?} differs from Redis's"));
                }
            }
        } else if a != b {
            return Some(format!("element {i}: {b:?} vs Redis's {a:?}"));
        }
    }
    None
}

/// `name -> entry` of a COMMAND / COMMAND INFO reply (null entries skipped).
#[allow(dead_code)]
pub fn command_entries(v: &Val) -> std::collections::BTreeMap<String, Val> {
    v.items()
        .iter()
        .filter(|e| matches!(e, Val::List(items) if !items.is_empty()))
        .map(|e| (e.items()[0].text().to_ascii_lowercase(), e.clone()))
        .collect()
}

/// A SET and a GET of key `healthy:{i}` on `c` that must succeed: the connection (and the
/// node) still serve after another connection misbehaved.
pub fn healthy_roundtrip(c: &mut Raw, i: usize) {
    let key = format!("healthy:{i}");
    assert_eq!(c.call(&[b"SET", key.as_bytes(), b"v"]), b"+OK\r\n");
    assert_eq!(c.call(&[b"GET", key.as_bytes()]), b"$1\r\nv\r\n");
}
