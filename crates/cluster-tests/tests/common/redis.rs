//! A real Redis 7 beside the cluster, for differential tests (`redis-server` from apt; a
//! missing one skips loudly, or fails when `RINGLET_REQUIRE_REDIS` is set, as CI does).

use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use ringlet_testkit::redis::{start_redis, RedisProc};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

pub struct Redis {
    /// Killed on drop (`ringlet_testkit::redis`).
    _proc: RedisProc,
    conn: TcpStream,
    buf: Vec<u8>,
}

impl Redis {
    pub fn start() -> Option<Redis> {
        let proc = start_redis(&[], "differential")?;
        let conn = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], proc.port)))
            .expect("connect to redis-server");
        Some(Redis {
            _proc: proc,
            conn,
            buf: Vec::new(),
        })
    }

    /// The server's address (for raw connections of a test's own).
    #[allow(dead_code)] // not every test binary that includes this module uses it
    pub fn addr(&self) -> SocketAddr {
        self.conn.peer_addr().unwrap()
    }

    pub fn call(&mut self, cmd: &[&[u8]]) -> Reply {
        let mut out = Vec::new();
        encode_request(&mut out, cmd);
        self.conn.write_all(&out).unwrap();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((r, n)) = decode_reply(&self.buf).unwrap() {
                self.buf.drain(..n);
                return r;
            }
            let n = self.conn.read(&mut chunk).unwrap();
            assert!(n > 0, "redis closed");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}
