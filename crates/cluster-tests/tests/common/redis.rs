//! A real Redis 7 beside the cluster, for differential tests (`redis-server` from apt; a
//! missing one skips loudly, or fails when `RINGLET_REQUIRE_REDIS` is set, as CI does).

use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Redis {
    child: Child,
    conn: TcpStream,
    buf: Vec<u8>,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Redis {
    pub fn start() -> Option<Redis> {
        if Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_err()
        {
            assert!(
                std::env::var_os("RINGLET_REQUIRE_REDIS").is_none(),
                "redis-server is not installed and RINGLET_REQUIRE_REDIS is set"
            );
            eprintln!("\n*** SKIP: redis-server not installed; differential not run ***\n");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        let conn = loop {
            if let Ok(c) = TcpStream::connect(addr) {
                break c;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Some(Redis {
            child,
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
