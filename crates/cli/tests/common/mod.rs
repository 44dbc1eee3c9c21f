//! Shared by the cli crate's tests: free ports, a `ringlet up` that is stopped on drop, a
//! `ringlet server` on a port it chose, one RESP call, and whether redis-py is there
//! (honouring `RINGLET_REQUIRE_REDIS`).

#![allow(dead_code)] // each test binary uses part of this module

use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Ranges already handed to a test of this process. Tests of one binary run in parallel
/// threads and start from the same pid-derived base: without this, two of them probed the same
/// free range before either bound it, and both `ringlet up`s failed to start (CI, issue 17).
static CLAIMED: std::sync::Mutex<Vec<(u16, u16)>> = std::sync::Mutex::new(Vec::new());

/// Client ports are taken from 20000..22767 so that their admin ports (30000..32767) stay
/// below Linux's ephemeral range (32768..60999 by default): the nodes' peer listeners and
/// every outgoing connection take ephemeral ports, and one of them once took an admin port
/// between the probe here and `up`'s bind (`Address already in use`, CI).
const BASE_FIRST: u16 = 20_000;
const BASE_LAST: u16 = 22_767;

/// A base port with `n` free consecutive ports, whose admin ports (+10000, where `ringlet up`
/// puts each node's admin HTTP listener unless `--no-admin`) are free too, and none handed
/// to another test of this process.
pub fn free_base(n: u16) -> u16 {
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    let span = BASE_LAST - BASE_FIRST - n;
    let mut base = BASE_FIRST + (std::process::id() % u32::from(span)) as u16;
    for _ in 0..span {
        let overlaps = claimed
            .iter()
            .any(|&(b, len)| base < b + len && b < base + n);
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if !overlaps && (0..n).all(|i| free(base + i) && free(base + 10_000 + i)) {
            claimed.push((base, n));
            return base;
        }
        base += n + 1;
        if base + n > BASE_LAST {
            base = BASE_FIRST;
        }
    }
    panic!("no {n} free ports (and admin ports) in {BASE_FIRST}..{BASE_LAST}");
}

/// Run `ringlet <args>` to completion (admin commands such as `node map`).
pub fn ringlet(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(args)
        .output()
        .expect("run ringlet")
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
    up_admin(args).0
}

/// [`up`], also returning the control plane's address and the cluster secret's file that it
/// printed (what `ringlet node ...` needs).
pub fn up_admin(args: &[&str]) -> (Up, String, String) {
    // stderr goes to a file so that a cluster that never gets ready says why in the failure.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let log =
        std::env::temp_dir().join(format!("ringlet-test-up-{}-{run}.log", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(args)
        .env_remove("RINGLET_REQUIREPASS")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("up log file"))
        .spawn()
        .expect("spawn ringlet up");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let up = Up(child);
    let mut secret = String::new();
    let control = loop {
        let Some(l) = lines.next() else {
            let err = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = err.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "up exited before it was ready; its stderr ends:\n{}",
                tail.join("\n")
            );
        };
        let l = l.expect("read");
        if let Some(p) = l.strip_prefix("cluster secret file ") {
            secret = p.trim().to_string();
        }
        if l.starts_with("ringlet cluster ready") {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w
                .iter()
                .position(|x| *x == "control")
                .expect("control address");
            break w[i + 1].trim_end_matches(',').to_string();
        }
    };
    let _ = std::fs::remove_file(&log);
    std::thread::spawn(move || for _ in lines {});
    (up, control, secret)
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

/// One RESP command on a new connection to 127.0.0.1:`port`, its reply (10 s read timeout).
pub fn call(port: u16, args: &[&[u8]]) -> Reply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut out = Vec::new();
    encode_request(&mut out, args);
    s.write_all(&out).expect("write");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some((r, _))) = decode_reply(&buf) {
            return r;
        }
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Start `ringlet server --port 0 <extra>` and read the port from its readiness line.
pub fn server(extra: &[&std::ffi::OsStr]) -> (Child, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(["server", "--port", "0"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ringlet server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("bad readiness line {line:?}"));
    (child, port)
}

/// `GET key` at `port`, following one MOVED to the node that serves it.
pub fn get_following_moved(port: u16, key: &[u8]) -> Reply {
    match call(port, &[b"GET", key]) {
        Reply::Error(e) if e.starts_with(b"MOVED") => {
            let e = String::from_utf8_lossy(&e).into_owned();
            let p: u16 = e
                .rsplit(':')
                .next()
                .and_then(|p| p.trim().parse().ok())
                .expect("MOVED port");
            call(p, &[b"GET", key])
        }
        r => r,
    }
}

/// Wait (at most 120 s) until `path` exists, written by the running load script `child` to
/// say it has started; panics with `what` on timeout, or if the script exits first.
pub fn wait_for_load(path: &std::path::Path, child: &mut Child, what: &str) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < Duration::from_secs(120), "{what}");
        if let Ok(Some(s)) = child.try_wait() {
            panic!("the load script exited early: {s}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
