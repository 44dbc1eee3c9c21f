//! Test harness: start `ringlet-cluster up` on free ports, and a small Redis Cluster client
//! (CLUSTER SLOTS routing, MOVED refresh, retries on connection errors / TRYAGAIN) that
//! records linearizability histories.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

pub mod netns;
pub mod redis;

use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use ringlet_linearize::{Op, OpKind};
use ringlet_types::key_slot;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Cluster {
    pub child: Child,
    pub base: u16,
    pub total: usize,
    pub control: String,
    pub pids: HashMap<u32, u32>,
    /// The cluster secret `up` generated (hex), for admin commands and restarted nodes.
    pub secret: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SIGTERM to `up`: it kills its nodes. Then make sure.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in self.pids.values() {
            unsafe {
                libc::kill(*pid as i32, libc::SIGKILL);
            }
        }
    }
}

fn ports_free(base: u16, n: usize) -> bool {
    (0..n).all(|i| TcpListener::bind(("127.0.0.1", base + i as u16)).is_ok())
}

/// Whether python3 with redis-py is installed; with `RINGLET_REQUIRE_REDIS` set (CI), its
/// absence fails the test instead of skipping its redis-py part.
#[allow(dead_code)] // not every test binary that includes this module runs redis-py
pub fn have_redis_py() -> bool {
    let have = std::process::Command::new("python3")
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

/// Start `up` with `nodes` + `spares` on free ports; returns once it printed "ready".
pub fn start(nodes: usize, spares: usize, extra: &[&str]) -> Cluster {
    let total = nodes + spares;
    // Tests of one binary run in parallel in one process: the pid alone gave them the same
    // base, and the loser's nodes died with "Address already in use" (its test then hung
    // until its deadlines). A per-process counter spreads them.
    static STARTS: AtomicU64 = AtomicU64::new(0);
    let nth = STARTS.fetch_add(1, Ordering::Relaxed);
    let seed = u64::from(std::process::id()).wrapping_mul(7919) + nth * 97;
    // Below Linux's ephemeral range (32768..): the nodes' peer listeners bind port 0, and one
    // of another test's cluster once took a port here between the probe and the bind (its
    // node died with "Address already in use"; the test failed with "up exited before
    // ready"). 22768.. is left to the cli tests' clusters.
    // Ranges handed out in this process are never handed out again: two tests whose first
    // choice was busy used to step onto the same free range and race for its ports (a node
    // died with "Address already in use" in the records test).
    static CLAIMED: std::sync::Mutex<Vec<(u16, u16)>> = std::sync::Mutex::new(Vec::new());
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    let span = total as u16 + 1;
    let mut base = 22_800 + (seed % 9_000) as u16;
    let overlaps = |b: u16, c: &[(u16, u16)]| c.iter().any(|(s, e)| b < *e && *s < b + span);
    let mut tries = 0;
    while overlaps(base, &claimed) || !ports_free(base, total + 1) {
        tries += 1;
        assert!(tries < 5_000, "no free port range for a cluster");
        base += total as u16 + 3;
        if base > 32_700 - total as u16 {
            base = 22_800;
        }
    }
    claimed.push((base, base + span));
    drop(claimed);
    let mut args = vec![
        "up".to_string(),
        "--nodes".into(),
        nodes.to_string(),
        "--spares".into(),
        spares.to_string(),
        "--port".into(),
        base.to_string(),
        "--default-memgest".into(),
        "rep:3".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringlet-cluster"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn up");
    let out = child.stdout.take().unwrap();
    let mut r = BufReader::new(out);
    let mut pids = HashMap::new();
    let mut secret = String::new();
    let control;
    let mut line = String::new();
    loop {
        line.clear();
        let n = r.read_line(&mut line).unwrap();
        assert!(n > 0, "up exited before ready");
        eprint!("up: {line}");
        let w: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with("cluster secret file ") {
            secret = std::fs::read_to_string(w[3]).unwrap().trim().to_string();
        }
        if w.first() == Some(&"node") && w.get(2) == Some(&"pid") {
            pids.insert(w[1].parse().unwrap(), w[3].parse().unwrap());
        }
        if line.starts_with("ringlet cluster ready") {
            let i = w.iter().position(|x| *x == "control").unwrap();
            control = w[i + 1].trim_end_matches(',').to_string();
            break;
        }
    }
    // Keep draining its stdout so it never blocks.
    std::thread::spawn(move || {
        let mut s = String::new();
        while r.read_line(&mut s).unwrap_or(0) > 0 {
            eprint!("up: {s}");
            s.clear();
        }
    });
    Cluster {
        child,
        base,
        total,
        control,
        pids,
        secret,
    }
}

impl Cluster {
    pub fn addrs(&self) -> Vec<SocketAddr> {
        (0..self.total)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], self.base + i as u16)))
            .collect()
    }
    pub fn kill9(&mut self, node: u32) {
        let pid = self.pids.remove(&node).unwrap();
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
    /// Start node `id` again (a new process, so a new incarnation). Killed on drop.
    pub fn restart(&mut self, id: u32) -> KillOnDrop {
        let child = Command::new(env!("CARGO_BIN_EXE_ringlet-cluster"))
            .args([
                "node",
                "--id",
                &id.to_string(),
                "--port",
                &(self.base + id as u16 - 1).to_string(),
                "--control",
                &self.control,
            ])
            .env("RINGLET_CLUSTER_SECRET", &self.secret)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        KillOnDrop(child)
    }

    /// The control plane's current map.
    pub fn map(&self) -> ringlet_control::ClusterMap {
        let out = Command::new(env!("CARGO_BIN_EXE_ringlet-cluster"))
            .args(["map", "--control", &self.control])
            .env("RINGLET_CLUSTER_SECRET", &self.secret)
            .output()
            .unwrap();
        assert!(out.status.success());
        ringlet_control::ClusterMap::from_json(String::from_utf8_lossy(&out.stdout).trim()).unwrap()
    }

    pub fn drain(&self, node: u32) {
        let out = Command::new(env!("CARGO_BIN_EXE_ringlet-cluster"))
            .args(["drain", "--control", &self.control, &node.to_string()])
            .env("RINGLET_CLUSTER_SECRET", &self.secret)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "drain failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A child process killed when dropped.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A reply or why there was none.
#[derive(Debug, Clone, PartialEq)]
pub enum Res {
    Ok(Reply),
    /// Transport failure: outcome unknown for writes.
    Io,
}

pub struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(a: SocketAddr) -> Option<Conn> {
        let s = TcpStream::connect_timeout(&a, Duration::from_millis(300)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        s.set_nodelay(true).ok()?;
        Some(Conn { s, buf: Vec::new() })
    }
    /// Write `bytes` as they are (e.g. half a request), reading nothing.
    #[allow(dead_code)]
    pub fn send_raw(&mut self, bytes: &[u8]) -> Option<()> {
        self.s.write_all(bytes).ok()
    }

    /// Send all `cmds` pipelined, read all replies.
    pub fn pipeline(&mut self, cmds: &[Vec<Vec<u8>>]) -> Option<Vec<Reply>> {
        let mut out = Vec::new();
        for c in cmds {
            let a: Vec<&[u8]> = c.iter().map(|x| &x[..]).collect();
            encode_request(&mut out, &a);
        }
        self.s.write_all(&out).ok()?;
        let mut replies = Vec::with_capacity(cmds.len());
        let mut chunk = [0u8; 65536];
        while replies.len() < cmds.len() {
            match decode_reply(&self.buf) {
                Ok(Some((r, n))) => {
                    self.buf.drain(..n);
                    replies.push(r);
                    continue;
                }
                Ok(None) => {}
                Err(_) => return None,
            }
            let n = self.s.read(&mut chunk).ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Some(replies)
    }
}

/// Redis Cluster client: slot table from CLUSTER SLOTS, MOVED → refresh.
pub struct Client {
    seeds: Vec<SocketAddr>,
    slots: Vec<Option<SocketAddr>>,
    conns: HashMap<SocketAddr, Conn>,
}

impl Client {
    pub fn new(seeds: Vec<SocketAddr>) -> Client {
        let mut c = Client {
            seeds,
            slots: vec![None; 16384],
            conns: HashMap::new(),
        };
        c.refresh();
        c
    }

    /// The node the cached table sends `slot` to.
    pub fn slot_owner(&self, slot: u16) -> Option<SocketAddr> {
        self.slots[slot as usize]
    }

    pub fn refresh(&mut self) {
        for s in self.seeds.clone() {
            let Some(mut c) = Conn::open(s) else { continue };
            let Some(r) = c.pipeline(&[vec![b"CLUSTER".to_vec(), b"SLOTS".to_vec()]]) else {
                continue;
            };
            let Reply::Array(ranges) = &r[0] else {
                continue;
            };
            if ranges.is_empty() {
                continue;
            }
            for rg in ranges {
                let Reply::Array(v) = rg else { continue };
                let (Reply::Integer(f), Reply::Integer(l), Reply::Array(m)) = (&v[0], &v[1], &v[2])
                else {
                    continue;
                };
                let (Reply::Bulk(ip), Reply::Integer(port)) = (&m[0], &m[1]) else {
                    continue;
                };
                let a: SocketAddr = format!("{}:{port}", String::from_utf8_lossy(ip))
                    .parse()
                    .unwrap();
                for s in *f..=*l {
                    self.slots[s as usize] = Some(a);
                }
            }
            return;
        }
    }

    fn conn(&mut self, a: SocketAddr) -> Option<&mut Conn> {
        if let std::collections::hash_map::Entry::Vacant(e) = self.conns.entry(a) {
            e.insert(Conn::open(a)?);
        }
        self.conns.get_mut(&a)
    }

    /// One command on one key with redirects and retries until `deadline`. A transport
    /// error on a write makes it unknown: returned as `Res::Io` (never retried, since a
    /// retry could apply it twice).
    pub fn call(&mut self, cmd: Vec<Vec<u8>>, is_write: bool, deadline: Instant) -> Res {
        let slot = key_slot(&cmd[1]) as usize;
        loop {
            if Instant::now() > deadline {
                return Res::Io;
            }
            let Some(a) = self.slots[slot] else {
                self.refresh();
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            let r = self
                .conn(a)
                .and_then(|c| c.pipeline(std::slice::from_ref(&cmd)));
            match r {
                None => {
                    self.conns.remove(&a);
                    if is_write {
                        // The request may have been sent: unknown.
                        self.refresh();
                        return Res::Io;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    self.refresh();
                }
                Some(mut v) => {
                    let r = v.remove(0);
                    if let Reply::Error(e) = &r {
                        if e.starts_with(b"MOVED") {
                            let s = String::from_utf8_lossy(e).to_string();
                            let addr: SocketAddr = s.split(' ').nth(2).unwrap().parse().unwrap();
                            self.slots[slot] = Some(addr);
                            continue;
                        }
                        if e.starts_with(b"TRYAGAIN") || e.starts_with(b"CLUSTERDOWN") {
                            std::thread::sleep(Duration::from_millis(20));
                            continue;
                        }
                    }
                    return Res::Ok(r);
                }
            }
        }
    }

    /// GET many keys, pipelined per node; returns the keys whose value differs from
    /// `want` (or could not be read).
    pub fn check_many(&mut self, keys: &[(String, String)]) -> Vec<usize> {
        let mut by_node: HashMap<SocketAddr, Vec<usize>> = HashMap::new();
        let mut bad = Vec::new();
        for (i, (k, _)) in keys.iter().enumerate() {
            match self.slots[key_slot(k.as_bytes()) as usize] {
                Some(a) => by_node.entry(a).or_default().push(i),
                None => bad.push(i),
            }
        }
        for (a, idx) in by_node {
            for chunk in idx.chunks(500) {
                let cmds: Vec<Vec<Vec<u8>>> = chunk
                    .iter()
                    .map(|&i| vec![b"GET".to_vec(), keys[i].0.clone().into_bytes()])
                    .collect();
                match self.conn(a).and_then(|c| c.pipeline(&cmds)) {
                    None => {
                        self.conns.remove(&a);
                        bad.extend_from_slice(chunk);
                    }
                    Some(rs) => {
                        for (r, &i) in rs.iter().zip(chunk) {
                            if *r != Reply::Bulk(keys[i].1.clone().into_bytes()) {
                                bad.push(i);
                            }
                        }
                    }
                }
            }
        }
        bad
    }

    /// SET many keys pipelined per node (setup; every reply must be OK).
    pub fn set_many(&mut self, keys: &[(String, String)]) {
        let mut left: Vec<usize> = (0..keys.len()).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !left.is_empty() {
            assert!(Instant::now() < deadline, "setup writes did not finish");
            let mut by_node: HashMap<SocketAddr, Vec<usize>> = HashMap::new();
            for &i in &left {
                if let Some(a) = self.slots[key_slot(keys[i].0.as_bytes()) as usize] {
                    by_node.entry(a).or_default().push(i);
                }
            }
            let mut again = Vec::new();
            for (a, idx) in by_node {
                for chunk in idx.chunks(500) {
                    let cmds: Vec<Vec<Vec<u8>>> = chunk
                        .iter()
                        .map(|&i| {
                            vec![
                                b"SET".to_vec(),
                                keys[i].0.clone().into_bytes(),
                                keys[i].1.clone().into_bytes(),
                            ]
                        })
                        .collect();
                    match self.conn(a).and_then(|c| c.pipeline(&cmds)) {
                        None => {
                            self.conns.remove(&a);
                            again.extend_from_slice(chunk);
                        }
                        Some(rs) => {
                            for (r, &i) in rs.iter().zip(chunk) {
                                if *r != Reply::ok() {
                                    again.push(i);
                                }
                            }
                        }
                    }
                }
            }
            if !again.is_empty() {
                self.refresh();
            }
            left = again;
        }
    }
}

/// A shared history recorder (times in µs since the test's start).
#[derive(Clone)]
pub struct Recorder {
    t0: Instant,
    ops: Arc<Mutex<Vec<Op>>>,
    pub failed: Arc<AtomicU64>,
    /// Failed writes answered `-ERR ambiguous` (outcome unknown, a subset of `failed`).
    pub ambiguous: Arc<AtomicU64>,
    pub ok: Arc<AtomicU64>,
    pub unknown: Arc<AtomicU64>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            t0: Instant::now(),
            ops: Arc::new(Mutex::new(Vec::new())),
            failed: Arc::new(AtomicU64::new(0)),
            ambiguous: Arc::new(AtomicU64::new(0)),
            ok: Arc::new(AtomicU64::new(0)),
            unknown: Arc::new(AtomicU64::new(0)),
        }
    }
    pub fn now(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }
    pub fn push(&self, op: Op) {
        self.ops.lock().unwrap().push(op);
    }
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }
}

/// One client thread: random SET/GET on `keys` until `stop`; records every op.
pub fn load_thread(
    seeds: Vec<SocketAddr>,
    client_id: u64,
    keys: Vec<String>,
    rec: Recorder,
    stop: Arc<std::sync::atomic::AtomicBool>,
    log_failures: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut c = Client::new(seeds);
        let mut seq = 0u64;
        let mut x = client_id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        while !stop.load(Ordering::Relaxed) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = keys[(x % keys.len() as u64) as usize].clone();
            seq += 1;
            let is_write = (x >> 8).is_multiple_of(2);
            let invoke = rec.now();
            let deadline = Instant::now() + Duration::from_secs(10);
            if is_write {
                let value = format!("c{client_id}-{seq}");
                let r = c.call(
                    vec![
                        b"SET".to_vec(),
                        key.clone().into_bytes(),
                        value.clone().into_bytes(),
                    ],
                    true,
                    deadline,
                );
                let complete = match &r {
                    Res::Ok(Reply::Simple(s)) if s == b"OK" => {
                        rec.ok.fetch_add(1, Ordering::Relaxed);
                        Some(rec.now())
                    }
                    other => {
                        if log_failures {
                            eprintln!("client {client_id}: SET {key} failed: {other:?}");
                        }
                        rec.failed.fetch_add(1, Ordering::Relaxed);
                        rec.unknown.fetch_add(1, Ordering::Relaxed);
                        if matches!(other, Res::Ok(Reply::Error(e)) if e.starts_with(b"ERR ambiguous"))
                        {
                            rec.ambiguous.fetch_add(1, Ordering::Relaxed);
                        }
                        None
                    }
                };
                rec.push(Op {
                    client: client_id,
                    key,
                    invoke,
                    complete,
                    kind: OpKind::Set { value },
                });
            } else {
                let r = c.call(
                    vec![b"GET".to_vec(), key.clone().into_bytes()],
                    false,
                    deadline,
                );
                match r {
                    Res::Ok(Reply::Bulk(v)) => {
                        rec.ok.fetch_add(1, Ordering::Relaxed);
                        rec.push(Op {
                            client: client_id,
                            key,
                            invoke,
                            complete: Some(rec.now()),
                            kind: OpKind::Get {
                                result: Some(String::from_utf8_lossy(&v).into_owned()),
                            },
                        })
                    }
                    Res::Ok(Reply::Null) => {
                        rec.ok.fetch_add(1, Ordering::Relaxed);
                        rec.push(Op {
                            client: client_id,
                            key,
                            invoke,
                            complete: Some(rec.now()),
                            kind: OpKind::Get { result: None },
                        })
                    }
                    other => {
                        if log_failures {
                            eprintln!("client {client_id}: GET {key} failed: {other:?}");
                        }
                        rec.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    })
}

/// `check_many` split over `threads` client threads (each its own connections); returns
/// the keys not (yet) readable with their expected value.
pub fn par_check(
    seeds: &[SocketAddr],
    keys: &[(String, String)],
    threads: usize,
) -> Vec<(String, String)> {
    let chunk = keys.len().div_ceil(threads.max(1)).max(1);
    let hs: Vec<_> = keys
        .chunks(chunk)
        .map(|part| {
            let part = part.to_vec();
            let seeds = seeds.to_vec();
            std::thread::spawn(move || {
                let mut c = Client::new(seeds);
                let bad = c.check_many(&part);
                bad.into_iter().map(|i| part[i].clone()).collect::<Vec<_>>()
            })
        })
        .collect();
    hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
}

/// `set_many` split over `threads` client threads.
pub fn par_set(seeds: &[SocketAddr], keys: &[(String, String)], threads: usize) {
    let chunk = keys.len().div_ceil(threads.max(1)).max(1);
    let hs: Vec<_> = keys
        .chunks(chunk)
        .map(|part| {
            let part = part.to_vec();
            let seeds = seeds.to_vec();
            std::thread::spawn(move || Client::new(seeds).set_many(&part))
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// A control plane and `n` active nodes in this process on ephemeral loopback ports, with
/// `rep:3` as the default memgest, returned once every node holds the control plane's
/// bootstrapped map. The runtime carries the service's and nodes' tasks: keep it alive.
pub struct InProcess {
    pub rt: tokio::runtime::Runtime,
    pub svc: Arc<ringlet_cluster::control::ControlService>,
    pub nodes: Vec<ringlet_cluster::node::ClusterNode>,
    pub addrs: Vec<SocketAddr>,
}

pub fn in_process(n: u32, s: u8, d: u8, lease_ms: u64) -> InProcess {
    use ringlet_cluster::launch::{run_control, run_node, ControlOpts, NodeOpts};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (svc, caddr) = rt
        .block_on(run_control(&ControlOpts {
            bind: "127.0.0.1:0".parse().unwrap(),
            expect_nodes: n as usize,
            active: n as usize,
            default_memgest: Some(ringlet_types::MemgestKind::Rep { r: 3 }),
            s,
            d,
            lease_ms,
            // Test harness: ec resharding is exercised here.
            ec_moves: true,
        }))
        .unwrap();
    let mut nodes = Vec::new();
    let mut addrs = Vec::new();
    for id in 1..=n {
        let (node, a) = rt
            .block_on(run_node(&NodeOpts {
                id,
                bind: "127.0.0.1:0".parse().unwrap(),
                peer_port: 0,
                control: caddr.to_string(),
                lease_ms,
                memory_bytes: 64 << 20,
                requirepass: None,
                tls: None,
                admin_port: None,
                admin_token: None,
            }))
            .unwrap();
        nodes.push(node);
        addrs.push(a);
    }
    // Ready: every node holds the bootstrapped map of the control plane's epoch.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "cluster did not bootstrap");
        let e = svc.map().epoch;
        if svc.map().placement.is_some()
            && nodes.iter().all(|n| n.map().is_some_and(|m| m.epoch == e))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    InProcess {
        rt,
        svc,
        nodes,
        addrs,
    }
}

/// Wait (≤ 60 s) until `rec` counted `n` successful operations.
pub fn wait_ok(rec: &Recorder, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while rec.ok.load(Ordering::Relaxed) < n {
        assert!(Instant::now() < deadline, "load made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Write `rec`'s history to `<target tmp>/<name>-history.json`, check it with
/// `ringlet_linearize`, print the report and fail on any violation. Returns the op count.
pub fn check_history(name: &str, rec: &Recorder) -> usize {
    let ops = rec.ops();
    let n = ops.len();
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("{name}-history.json"));
    std::fs::write(
        &path,
        serde_json::to_string(&ringlet_linearize::History { ops }).unwrap(),
    )
    .unwrap();
    let report = ringlet_linearize::check_history_json(&path).unwrap();
    eprintln!(
        "{name}: history {} ops over {} keys written to {}; violations {:?}, unknown {:?}; ok {} failed {}",
        report.ops,
        report.keys,
        path.display(),
        report.violations,
        report.unknown,
        rec.ok.load(Ordering::Relaxed),
        rec.failed.load(Ordering::Relaxed),
    );
    assert!(
        report.is_ok(),
        "linearizability violations: {:?}",
        report.violations
    );
    n
}

/// One command on one node (no redirection).
pub fn node_call(addr: std::net::SocketAddr, cmd: &[&[u8]]) -> ringlet_codec::resp::Reply {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    ringlet_codec::resp::encode_request(&mut out, cmd);
    std::io::Write::write_all(&mut s, &out).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if let Some((r, _)) = ringlet_codec::resp::decode_reply(&buf).unwrap() {
            return r;
        }
        let n = std::io::Read::read(&mut s, &mut chunk).unwrap();
        assert!(n > 0, "node closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}
