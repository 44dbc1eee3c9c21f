//! Shared by the cli crate's cluster tests: free ports, a `ringlet up` that is stopped on
//! drop, and whether redis-py is there (honouring `RINGLET_REQUIRE_REDIS`).

#![allow(dead_code)] // each test binary uses part of this module

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A base port with `n` free consecutive ports.
pub fn free_base(n: u16) -> u16 {
    let mut base = 26_000 + (std::process::id() % 6_000) as u16;
    while !(0..n).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
        base += n + 1;
    }
    base
}

/// A running `ringlet up`; SIGTERM on drop makes it stop its nodes (SIGKILL would leave
/// them running).
pub struct Up(pub std::process::Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
    }
}

/// Start `ringlet <args>` and return once it printed "ringlet cluster ready" (its later
/// output is drained in the background).
pub fn up(args: &[&str]) -> Up {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(args)
        .env_remove("RINGLET_REQUIREPASS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ringlet up");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let up = Up(child);
    loop {
        let l = lines.next().expect("up exited").expect("read");
        if l.starts_with("ringlet cluster ready") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    up
}

/// Whether python3 with redis-py is installed; with `RINGLET_REQUIRE_REDIS` set (CI), its
/// absence fails the test instead of skipping a part of it.
pub fn have_redis_py() -> bool {
    let have = Command::new("python3")
        .args(["-c", "import redis.cluster"])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        assert!(
            std::env::var_os("RINGLET_REQUIRE_REDIS").is_none(),
            "python3 with the redis package is not installed and RINGLET_REQUIRE_REDIS is set"
        );
        eprintln!("SKIPPED redis-py part: python3 with the redis package is not installed");
    }
    have
}
