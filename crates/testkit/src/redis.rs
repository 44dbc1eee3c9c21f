//! A real Redis 7 (`redis-server` from apt) on a free loopback port, for differential tests.
//! Missing: a loud SKIP and `None`, unless `RINGLET_REQUIRE_REDIS` is set (CI sets it), then
//! a panic. Readiness is awaited by polling PING (bounded), never by a fixed sleep.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process, killed on drop.
pub struct RedisProc {
    child: Child,
    pub port: u16,
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Poll until `addr` answers PING (+PONG or -NOAUTH), at most ~10 s (a Redis or a Ringlet node).
pub fn wait_ready(addr: SocketAddr) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    // Bounded by the deadline.
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            if s.write_all(b"PING\r\n").is_ok() {
                let mut b = [0u8; 64];
                if let Ok(n) = s.read(&mut b) {
                    if n > 0 {
                        return true;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20)); // poll interval, not a readiness guess
    }
    false
}

/// Start `redis-server` with `extra` arguments, or `None` (after a loud message naming
/// `what` was not run) when it is not installed and `RINGLET_REQUIRE_REDIS` is unset.
pub fn start_redis(extra: &[&str], what: &str) -> Option<RedisProc> {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok();
    if !found {
        if std::env::var_os("RINGLET_REQUIRE_REDIS").is_some() {
            panic!("redis-server is not installed and RINGLET_REQUIRE_REDIS is set");
        }
        eprintln!("\n*** SKIP: redis-server not installed; {what} not run ***\n");
        return None;
    }
    // A port can be taken between probe and bind; retry a few times.
    for _ in 0..5 {
        let port = free_port();
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
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let mut p = RedisProc { child, port };
        if wait_ready(SocketAddr::from(([127, 0, 0, 1], port))) {
            return Some(p);
        }
        let _ = p.child.kill();
    }
    panic!("redis-server did not become ready");
}
