//! The etcd backend against a real etcd (3.4 from apt; `scripts/setup.sh` installs it):
//! this test starts its own `etcd` on free loopback ports with a temporary data dir, then
//! five `ringlet server --etcd` processes (3 active + 2 spares, `rep:3`), and checks through
//! RESP (the `redis` crate, following `-MOVED`) and through etcd itself:
//!
//! 1. the cluster serves SET/GET and its map is stored under the prefix (parsed and
//!    validated as a `ClusterMap`);
//! 2. the leader key deleted under the leader: a leader is elected again, serving goes on;
//! 3. SIGKILL of the leader's process: another process leads, the epoch grows, the victim is
//!    Failed in the stored map, every acknowledged write is readable;
//! 4. SIGKILL of a data node: its key vanishes from etcd when its lease expires, the map
//!    fails it, a spare takes its positions, every acknowledged write is readable (the window
//!    is printed, not asserted).
//! 5. etcd paused (SIGSTOP) for longer than the TTL: every lease expires when it resumes;
//!    no node is failed and every acknowledged write is readable again;
//! 6. a sixth process joins as a spare; a drain through the leader's command port moves a
//!    node's positions to it (another process's port refuses it);
//! 7. `MEMGEST CREATE/LIST/DROP` over RESP at a non-leader node are forwarded to the leader;
//!    the drop is decided from every node's forwarded usage report.
//!
//! Every map read checks that the stored epoch never went backwards.
//!
//! Skips (printing why) when `/usr/bin/etcd` is missing, unless `RINGLET_REQUIRE_ETCD=1`.
//! Run: `cargo test -p ringlet-cli --test etcd -- --nocapture`

use ringlet_cluster::control::{FromControl, ToControl};
use ringlet_cluster::etcd::keys::{decode_map, decode_record, Keys, LeaderRecord};
use ringlet_control::{ClusterMap, NodeState};
use ringlet_types::{key_slot, NodeId};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ETCD: &str = "/usr/bin/etcd";
const PREFIX: &str = "/ringlet-test";

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn etcd_available() -> bool {
    if std::path::Path::new(ETCD).exists() {
        return true;
    }
    if std::env::var("RINGLET_REQUIRE_ETCD").as_deref() == Ok("1") {
        panic!("RINGLET_REQUIRE_ETCD=1 but {ETCD} is missing (scripts/setup.sh installs it)");
    }
    eprintln!("SKIPPED: {ETCD} not found (apt-get install etcd-server, or scripts/setup.sh)");
    false
}

/// A private single-member etcd. Election timeout 250 ms (heartbeat 25 ms) lets it accept
/// 1 s leases; the test uses 2 s.
struct Etcd {
    _proc: KillOnDrop,
    _dir: tempfile::TempDir,
    url: String,
}

fn start_etcd() -> Etcd {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cport, pport) = (free_port(), free_port());
    let curl = format!("http://127.0.0.1:{cport}");
    let purl = format!("http://127.0.0.1:{pport}");
    let child = Command::new(ETCD)
        .args([
            "--name",
            "t",
            "--data-dir",
            &dir.path().join("data").to_string_lossy(),
            "--listen-client-urls",
            &curl,
            "--advertise-client-urls",
            &curl,
            "--listen-peer-urls",
            &purl,
            "--initial-advertise-peer-urls",
            &purl,
            "--initial-cluster",
            &format!("t={purl}"),
            "--heartbeat-interval",
            "25",
            "--election-timeout",
            "250",
            "--log-level",
            "warn",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn etcd");
    let e = Etcd {
        _proc: KillOnDrop(child),
        _dir: dir,
        url: curl,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while block_on(ringlet_cluster::etcd::connect(
        std::slice::from_ref(&e.url),
        Duration::from_secs(1),
    ))
    .is_err()
    {
        assert!(Instant::now() < deadline, "etcd did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    e
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// etcd reads done by the test itself.
struct EtcdView {
    url: String,
    keys: Keys,
    /// Highest epoch read so far: the stored map's epoch must never go backwards.
    seen: std::cell::Cell<u64>,
}

impl EtcdView {
    fn get(&self, key: String) -> Option<Vec<u8>> {
        block_on(async {
            let mut c = ringlet_cluster::etcd::connect(
                std::slice::from_ref(&self.url),
                Duration::from_secs(2),
            )
            .await
            .ok()?;
            let r = c.get(key, None).await.ok()?;
            r.kvs().first().map(|kv| kv.value().to_vec())
        })
    }
    fn map(&self) -> Option<ClusterMap> {
        let key = self.keys.map();
        let v = self.get(key.clone())?;
        let m = decode_map(&key, &v).expect("the stored map decodes and validates");
        assert!(
            m.epoch.0 >= self.seen.get(),
            "stored epoch went back from {} to {}",
            self.seen.get(),
            m.epoch
        );
        self.seen.set(m.epoch.0);
        Some(m)
    }
    fn delete(&self, key: String) {
        block_on(async {
            let mut c = ringlet_cluster::etcd::connect(
                std::slice::from_ref(&self.url),
                Duration::from_secs(2),
            )
            .await
            .expect("connect");
            c.delete(key, None).await.expect("delete");
        })
    }
    fn leader_control(&self) -> Option<String> {
        let key = self.keys.leader();
        let v = self.get(key.clone())?;
        Some(
            decode_record::<LeaderRecord>(&key, &v)
                .expect("leader record")
                .control,
        )
    }
    fn leader(&self) -> Option<u32> {
        let key = self.keys.leader();
        let v = self.get(key.clone())?;
        Some(
            decode_record::<LeaderRecord>(&key, &v)
                .expect("leader record")
                .node,
        )
    }
    fn node_key_present(&self, id: u32) -> bool {
        self.get(self.keys.node(NodeId(id))).is_some()
    }
}

/// Lease TTL of the node processes: 2 s, or `RINGLET_ETCD_LEASE_S` (the test's etcd
/// accepts 1 s) for measuring the failover window at other TTLs.
fn lease_s() -> String {
    std::env::var("RINGLET_ETCD_LEASE_S").unwrap_or_else(|_| "2".into())
}

struct Node {
    id: u32,
    addr: SocketAddr,
    /// Command port.
    control: String,
    proc: Option<KillOnDrop>,
}

fn start_node(etcd: &str, id: u32) -> Node {
    start_node_with(etcd, id, 2)
}

/// A node process; the first one started stores the plan "3 active + `spares`".
fn start_node_with(etcd: &str, id: u32, spares: u32) -> Node {
    let spares = spares.to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args([
            "server",
            "--etcd",
            etcd,
            "--etcd-prefix",
            PREFIX,
            "--node-id",
            &id.to_string(),
            "--port",
            "0",
            "--etcd-lease-s",
            &lease_s(),
            "--memory-mb",
            "64",
            "--etcd-nodes",
            "3",
            "--etcd-spares",
            &spares,
            "--etcd-default-memgest",
            "rep:3",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn node");
    let out = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(out).lines();
    let (mut addr, mut control) = (None, None);
    while addr.is_none() || control.is_none() {
        let l = lines
            .next()
            .expect("node exited before listening")
            .expect("read");
        if let Some(a) = l.strip_prefix("ringlet: listening on ") {
            addr = Some(a.parse().expect("addr"));
        }
        if let Some(a) = l.strip_prefix("ringlet: control on ") {
            control = Some(a.to_string());
        }
    }
    // Keep draining stdout so the child never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Node {
        id,
        addr: addr.expect("addr"),
        control: control.expect("control"),
        proc: Some(KillOnDrop(child)),
    }
}

/// One request to a process's command port.
fn command(addr: &str, req: ToControl) -> FromControl {
    block_on(ringlet_cluster::control::request(addr, &req)).expect("command port answers")
}

/// A small Redis Cluster client: slot → node cache, follows `-MOVED`, retries other
/// errors (a failover in progress) until a deadline.
struct Kv {
    seeds: Vec<SocketAddr>,
    owner: HashMap<u16, SocketAddr>,
    conns: HashMap<SocketAddr, redis::Connection>,
    next_seed: usize,
}

impl Kv {
    fn new(seeds: Vec<SocketAddr>) -> Kv {
        Kv {
            seeds,
            owner: HashMap::new(),
            conns: HashMap::new(),
            next_seed: 0,
        }
    }

    fn conn(&mut self, a: SocketAddr) -> Option<&mut redis::Connection> {
        use std::collections::hash_map::Entry;
        match self.conns.entry(a) {
            Entry::Occupied(e) => Some(e.into_mut()),
            Entry::Vacant(e) => {
                let c = redis::Client::open(format!("redis://{a}/")).ok()?;
                let c = c.get_connection_with_timeout(Duration::from_secs(1)).ok()?;
                c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                c.set_write_timeout(Some(Duration::from_secs(5))).ok()?;
                Some(e.insert(c))
            }
        }
    }

    fn query(
        &mut self,
        cmd: &redis::Cmd,
        key: &str,
        deadline: Instant,
    ) -> Result<redis::Value, String> {
        let slot = key_slot(key.as_bytes());
        let mut last = String::new();
        while Instant::now() < deadline {
            let a = match self.owner.get(&slot) {
                Some(a) => *a,
                None => {
                    self.next_seed = (self.next_seed + 1) % self.seeds.len();
                    self.seeds[self.next_seed]
                }
            };
            let r = match self.conn(a) {
                Some(c) => cmd.query::<redis::Value>(c),
                None => {
                    self.owner.remove(&slot);
                    last = format!("connect {a} failed");
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            };
            match r {
                Ok(v) => return Ok(v),
                Err(e) if e.kind() == redis::ErrorKind::Moved => {
                    if let Some((to, _)) = e.redirect_node() {
                        if let Ok(to) = to.parse() {
                            self.owner.insert(slot, to);
                            continue;
                        }
                    }
                    last = e.to_string();
                }
                Err(e) => {
                    last = e.to_string();
                    self.conns.remove(&a);
                    self.owner.remove(&slot);
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        Err(format!("{key}: gave up: {last}"))
    }

    fn set(&mut self, k: &str, v: &str) -> Result<(), String> {
        let mut c = redis::cmd("SET");
        c.arg(k).arg(v);
        match self.query(&c, k, Instant::now() + Duration::from_secs(30))? {
            redis::Value::Okay => Ok(()),
            other => Err(format!("SET {k}: {other:?}")),
        }
    }

    /// The keys of `keys` that do not (yet) read back their value; one try each.
    fn unreadable(&mut self, keys: &[(String, String)]) -> Vec<(String, String)> {
        let mut left = Vec::new();
        for (k, v) in keys {
            let mut c = redis::cmd("GET");
            c.arg(k);
            let ok = matches!(
                self.query(&c, k, Instant::now() + Duration::from_millis(500)),
                Ok(redis::Value::BulkString(b)) if b == v.as_bytes()
            );
            if !ok {
                left.push((k.clone(), v.clone()));
            }
        }
        left
    }

    fn forget(&mut self, dead: SocketAddr) {
        self.seeds.retain(|a| *a != dead);
        self.conns.remove(&dead);
        self.owner.retain(|_, a| *a != dead);
    }
}

fn wait_for<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Poll until every key reads back; returns how long it took.
fn all_readable(kv: &mut Kv, keys: &[(String, String)], secs: u64) -> Duration {
    let t = Instant::now();
    let mut left = keys.to_vec();
    while !left.is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{} acknowledged keys still unreadable, e.g. {:?}",
            left.len(),
            left.first()
        );
        left = kv.unreadable(&left);
    }
    t.elapsed()
}

/// Wait until every Active node of `map` holds at least `keys` entries (INFO
/// `stored_entries`: every copy; db0/DBSIZE count only the keys a node coordinates). With
/// `rep:3` over 3 active nodes every node holds every key, so this is "the replacement's
/// sync finished": the next failure is then one at a time, as the design assumes.
fn wait_settled(map: &ClusterMap, keys: usize) {
    for (id, n) in &map.nodes {
        if n.state != NodeState::Active {
            continue;
        }
        let addr = n.addr.split('@').next().unwrap_or_default().to_string();
        wait_for(&format!("node {id} to hold {keys} keys"), 60, || {
            let c = redis::Client::open(format!("redis://{addr}/")).ok()?;
            let mut c = c.get_connection_with_timeout(Duration::from_secs(1)).ok()?;
            let info: String = redis::cmd("INFO").query(&mut c).ok()?;
            let have: usize = info
                .split("stored_entries:")
                .nth(1)?
                .split('\r')
                .next()?
                .trim()
                .parse()
                .ok()?;
            (have >= keys).then_some(())
        });
    }
}

#[test]
fn etcd_cluster_serves_elects_and_fails_over() {
    if !etcd_available() {
        return;
    }
    let etcd = start_etcd();
    let view = EtcdView {
        url: etcd.url.clone(),
        keys: Keys::new(PREFIX).expect("prefix"),
        seen: std::cell::Cell::new(0),
    };
    let mut nodes: Vec<Node> = (1..=5).map(|id| start_node(&etcd.url, id)).collect();
    let seeds: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();

    // 1. Bootstrapped map in etcd, cluster serving.
    let map = wait_for("a bootstrapped map in etcd", 30, || {
        view.map().filter(|m| m.placement.is_some())
    });
    assert_eq!(map.nodes.len(), 5);
    let active = map
        .nodes
        .values()
        .filter(|n| n.state == NodeState::Active)
        .count();
    assert_eq!(active, 3, "{map:?}");
    for id in 1..=5 {
        assert!(view.node_key_present(id), "node {id} has no lease key");
    }
    let mut kv = Kv::new(seeds.clone());
    let keys: Vec<(String, String)> = (0..1500)
        .map(|i| (format!("k:{i}"), format!("v{i}")))
        .collect();
    for (k, v) in &keys {
        kv.set(k, v).expect("SET");
    }
    all_readable(&mut kv, &keys, 30);
    eprintln!(
        "bootstrapped at epoch {}, {} keys written and read",
        map.epoch,
        keys.len()
    );

    // 1b. ACL users through the etcd backend (docs/design/acl.md): SETUSER on one node goes
    //     to the leader, the map in etcd carries the user (hashed), every node serves it.
    {
        let mut c = redis::Client::open(format!("redis://{}/", nodes[0].addr))
            .expect("client")
            .get_connection()
            .expect("connect");
        let ok: String = redis::cmd("ACL")
            .arg(
                &[
                    "SETUSER",
                    "etcd-user",
                    "on",
                    ">etcd-pw",
                    "~*",
                    "+@all",
                    "-flushall",
                ][..],
            )
            .query(&mut c)
            .expect("ACL SETUSER");
        assert_eq!(ok, "OK");
        let m = wait_for("the user in etcd's map", 30, || {
            view.map().filter(|m| m.users.contains_key("etcd-user"))
        });
        assert!(!m.users["etcd-user"].contains("etcd-pw"), "{:?}", m.users);
        for n in &nodes {
            wait_for("the user on every node", 30, || {
                let mut c = redis::Client::open(format!("redis://{}/", n.addr))
                    .ok()?
                    .get_connection()
                    .ok()?;
                let ok: String = redis::cmd("AUTH")
                    .arg(&["etcd-user", "etcd-pw"][..])
                    .query(&mut c)
                    .ok()?;
                let refused = redis::cmd("FLUSHALL").query::<String>(&mut c).err()?;
                (ok == "OK" && refused.to_string().contains("NOPERM")).then_some(())
            });
        }
        eprintln!(
            "ACL user created on node {} served by every node",
            nodes[0].id
        );
    }

    // 2. The leader key vanishes under the leader (as if an operator deleted it): a leader
    //    is elected again (the old one steps down on its watch) and serving goes on — node
    //    liveness does not depend on the leader.
    let first = wait_for("a leader", 10, || view.leader());
    view.delete(view.keys.leader());
    let again = wait_for("a leader again", 30, || view.leader());
    kv.set("during", "re-election")
        .expect("SET during re-election");
    all_readable(&mut kv, &keys, 30);
    eprintln!("leader key deleted under node {first}: node {again} leads now; serving throughout");

    // 3. SIGKILL the leader's process.
    let leader = wait_for("a leader", 10, || view.leader());
    let e_before = view.map().expect("map").epoch;
    let victim = nodes
        .iter_mut()
        .find(|n| n.id == leader)
        .expect("leader is ours");
    let dead_addr = victim.addr;
    victim.proc = None; // SIGKILL (Child::kill) + wait
    let killed = Instant::now();
    kv.forget(dead_addr);
    let new_leader = wait_for("a new leader", 30, || {
        view.leader().filter(|l| *l != leader)
    });
    let m = wait_for("the old leader failed in the map", 30, || {
        view.map()
            .filter(|m| m.node_state(NodeId(leader)) == Some(NodeState::Failed))
    });
    assert!(m.epoch > e_before, "epoch {} after {e_before}", m.epoch);
    let t_map = killed.elapsed();
    let t_read = all_readable(&mut kv, &keys, 60) + t_map;
    eprintln!(
        "LEADER KILL: node {leader} -> node {new_leader} leads; epoch {e_before} -> {}; map failed the victim after {} ms; all keys readable after {} ms",
        m.epoch,
        t_map.as_millis(),
        t_read.as_millis()
    );

    // 4. SIGKILL a data node that does not lead (a spare must still be there to take over),
    //    once the first replacement finished syncing.
    wait_settled(&view.map().expect("map"), keys.len());
    let m = wait_for("a spare", 30, || {
        view.map()
            .filter(|m| m.nodes.values().any(|n| n.state == NodeState::Spare))
    });
    let current_leader = view.leader().expect("leader");
    let victim_id = m
        .nodes
        .iter()
        .find(|(id, n)| n.state == NodeState::Active && id.0 != current_leader)
        .map(|(id, _)| id.0)
        .expect("an active non-leader");
    let victim = nodes.iter_mut().find(|n| n.id == victim_id).expect("ours");
    let dead_addr = victim.addr;
    let e_before = m.epoch;
    // The victim's keys: those whose slot it coordinates (the failover window is theirs).
    let coordinated: Vec<(String, String)> = keys
        .iter()
        .filter(|(k, _)| m.coordinator(key_slot(k.as_bytes())) == Some(NodeId(victim_id)))
        .cloned()
        .collect();
    victim.proc = None;
    let killed = Instant::now();
    kv.forget(dead_addr);
    wait_for("the victim's lease key to expire in etcd", 30, || {
        (!view.node_key_present(victim_id)).then_some(())
    });
    let t_lease = killed.elapsed();
    let m2 = wait_for("the victim failed and replaced", 30, || {
        view.map()
            .filter(|m| m.node_state(NodeId(victim_id)) == Some(NodeState::Failed))
    });
    let t_map = killed.elapsed();
    assert!(m2.epoch > e_before);
    let members = m2.placement.as_ref().expect("placement").members();
    assert!(!members.contains(&NodeId(victim_id)));
    assert_eq!(
        m2.nodes
            .iter()
            .filter(|(id, n)| n.state == NodeState::Active && members.contains(id))
            .count(),
        3,
        "a spare took the failed node's positions: {m2:?}"
    );
    let t_coord = all_readable(&mut kv, &coordinated, 60) + t_map;
    let t_all = all_readable(&mut kv, &keys, 60) + t_map;
    eprintln!(
        "DATA NODE KILL: node {victim_id}: lease key gone after {} ms, map epoch {e_before} -> {} after {} ms, its {} coordinated keys readable after {} ms, all {} keys after {} ms",
        t_lease.as_millis(),
        m2.epoch,
        t_map.as_millis(),
        coordinated.len(),
        t_coord.as_millis(),
        keys.len(),
        t_all.as_millis()
    );
    // Writes still work after both failures.
    kv.set("after", "failover").expect("SET after failover");
    assert!(kv
        .unreadable(&[("after".into(), "failover".into())])
        .is_empty());

    // 5. etcd itself stops answering for longer than the TTL (SIGSTOP 5 s): every lease
    //    expires when it resumes. Nodes stop serving meanwhile (they cannot prove their
    //    lease), then re-register; the new leader waits for them instead of failing them
    //    all, so no node is failed and no acknowledged write is lost.
    let alive: Vec<u32> = m2
        .nodes
        .iter()
        .filter(|(_, n)| n.state == NodeState::Active)
        .map(|(id, _)| id.0)
        .collect();
    wait_settled(&m2, keys.len());
    let pid = etcd._proc.0.id() as i32;
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    std::thread::sleep(Duration::from_secs(5));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let t_back = all_readable(&mut kv, &keys, 60);
    let m3 = view.map().expect("map");
    for id in &alive {
        assert_eq!(
            m3.node_state(NodeId(*id)),
            Some(NodeState::Active),
            "node {id} was failed by the etcd outage: {m3:?}"
        );
    }
    eprintln!(
        "ETCD PAUSE 5 s: all {} keys readable {} ms after etcd resumed; map epoch {} (no node failed)",
        keys.len(),
        t_back.as_millis(),
        m3.epoch
    );

    // 6. A new process joins as a spare; a drain through the leader's command port hands a
    //    node's positions to it (a non-leader's port refuses, naming where the leader is).
    nodes.push(start_node(&etcd.url, 6));
    wait_for("node 6 as a spare", 30, || {
        view.map()
            .filter(|m| m.node_state(NodeId(6)) == Some(NodeState::Spare))
    });
    let leader = wait_for("a leader", 30, || view.leader());
    let target = *alive
        .iter()
        .find(|id| **id != leader)
        .expect("a non-leader");
    let other = nodes
        .iter()
        .find(|n| n.id != leader && n.proc.is_some())
        .expect("a live non-leader");
    match command(&other.control, ToControl::Drain { node: target }) {
        FromControl::Error(e) => assert!(e.contains("not the leader"), "{e}"),
        r => panic!("a non-leader accepted a drain: {r:?}"),
    }
    let lc = view.leader_control().expect("leader record");
    let r = command(&lc, ToControl::Drain { node: target });
    assert_eq!(r, FromControl::Ok, "drain through the leader");
    let m4 = wait_for("the drain in the map", 30, || {
        view.map().filter(|m| {
            m.node_state(NodeId(target)) == Some(NodeState::Draining)
                && m.node_state(NodeId(6)) == Some(NodeState::Active)
        })
    });
    all_readable(&mut kv, &keys, 60);
    eprintln!(
        "DRAIN: node {target} -> node 6 through the leader (node {leader}) at epoch {}; all keys readable",
        m4.epoch
    );
    // The leader's event log tells the drain (the status pages ask for it through their
    // node's agent, which forwards to this port); a non-leader's port refuses.
    let FromControl::Events(ev) = command(&lc, ToControl::Events { after: 0 }) else {
        panic!("the leader's command port has no event log")
    };
    for kind in ["drain_started", "drain_finished", "spare_promoted"] {
        assert!(
            ev.iter()
                .any(|e| e.kind.name() == kind && e.about_node == Some(target)),
            "no {kind} about node {target} in {ev:?}"
        );
    }
    assert!(ev.windows(2).all(|w| w[0].seq < w[1].seq), "{ev:?}");
    match command(&other.control, ToControl::Events { after: 0 }) {
        FromControl::Error(e) => assert!(e.contains("not the leader"), "{e}"),
        r => panic!("a non-leader answered events: {r:?}"),
    }

    // 7. MEMGEST commands over RESP at a non-leader reach the leader (forwarded by the
    //    node's agent); a drop is decided from every node's usage report, forwarded too.
    let at = nodes
        .iter()
        .find(|n| n.id != leader && n.proc.is_some())
        .expect("a live non-leader")
        .addr;
    let mut c = redis::Client::open(format!("redis://{at}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .expect("connect");
    let memgest = |c: &mut redis::Connection, args: &[&str]| -> redis::Value {
        let mut cmd = redis::cmd("MEMGEST");
        for a in args {
            cmd.arg(*a);
        }
        cmd.query(c)
            .unwrap_or_else(|e| panic!("MEMGEST {args:?}: {e}"))
    };
    let listed = |v: &redis::Value| format!("{v:?}").contains("r2");
    assert_eq!(
        memgest(&mut c, &["CREATE", "r2", "rep", "2"]),
        redis::Value::Okay
    );
    assert!(listed(&memgest(&mut c, &["LIST"])));
    wait_for("r2 in the stored map", 30, || {
        view.map().filter(|m| m.memgest_by_name("r2").is_some())
    });
    assert_eq!(memgest(&mut c, &["DROP", "r2"]), redis::Value::Okay);
    assert!(!listed(&memgest(&mut c, &["LIST"])));
    eprintln!("MEMGEST: create, list, drop of r2 through node at {at} (leader node {leader})");

    // 8. An erasure-coded memgest and a slot move through the etcd leader: ec values are
    //    re-encoded in the target pair's group (copied ahead of the switch), the handoff
    //    completes, and every acknowledged ec write reads back (cluster-resharding.md; the
    //    simulator runs ec moves across leader changes, this runs them on real etcd).
    let created = memgest(&mut c, &["CREATE", "e21", "ec", "2", "1"]);
    assert_eq!(created, redis::Value::Okay, "{created:?}");
    wait_for("e21 in the stored map", 30, || {
        view.map().filter(|m| m.memgest_by_name("e21").is_some())
    });
    let ec_keys: Vec<(String, String)> = (0..300)
        .map(|i| {
            (
                format!("ec:{i}"),
                format!("ec-value-{i}-{}", "x".repeat(i % 97)),
            )
        })
        .collect();
    for (k, v) in &ec_keys {
        let mut cmd = redis::cmd("SET");
        cmd.arg(k).arg(v).arg("MEMGEST").arg("e21");
        let r = kv.query(&cmd, k, Instant::now() + Duration::from_secs(30));
        assert_eq!(r, Ok(redis::Value::Okay), "SET {k} MEMGEST e21");
    }
    all_readable(&mut kv, &ec_keys, 30);
    // Move the slot range holding the first ec key to a pair another node coordinates.
    let m5 = view.map().expect("map");
    let p = m5.placement.as_ref().expect("placement");
    let slot = key_slot(ec_keys[0].0.as_bytes());
    let from = *p
        .ranges
        .iter()
        .find(|r| r.first <= slot && slot <= r.last)
        .expect("a range holds the slot");
    let coord = p.groups[from.pg as usize][from.data_index as usize];
    let (pg, data_index) = (0u32..)
        .zip(p.groups.iter())
        .flat_map(|(pg, g)| (0..p.s).map(move |i| (pg, i, g[i as usize])))
        .find(|(_, _, n)| *n != coord && m5.node_state(*n) == Some(NodeState::Active))
        .map(|(pg, i, _)| (pg, i))
        .expect("a pair of another active node");
    let moved_keys: Vec<(String, String)> = ec_keys
        .iter()
        .filter(|(k, _)| {
            let s = key_slot(k.as_bytes());
            from.first <= s && s <= from.last
        })
        .cloned()
        .collect();
    let lc = view.leader_control().expect("leader record");
    let r = command(
        &lc,
        ToControl::MoveSlots {
            first: from.first,
            last: from.last,
            pg,
            data_index,
            rate_kib_s: 0,
        },
    );
    assert_eq!(r, FromControl::Ok, "move through the leader");
    let m6 = wait_for("the move switched and its handoff done", 60, || {
        view.map().filter(|m| {
            m.moving.is_none()
                && m.handoffs.is_empty()
                && m.placement.as_ref().is_some_and(|p| {
                    p.ranges.iter().any(|r| {
                        r.first <= slot
                            && slot <= r.last
                            && r.pg == pg
                            && r.data_index == data_index
                    })
                })
        })
    });
    all_readable(&mut kv, &ec_keys, 60);
    eprintln!(
        "EC MOVE: slots {}-{} ({} of the {} ec:2+1 keys) from node {} to pair ({pg}, {data_index}) through the etcd leader at epoch {}; all readable",
        from.first,
        from.last,
        moved_keys.len(),
        ec_keys.len(),
        coord,
        m6.epoch
    );
    assert!(!moved_keys.is_empty(), "the moved range held no ec key");
}

#[test]
fn unreachable_etcd_is_a_clear_error() {
    let port = free_port(); // nothing listens there
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args([
            "server",
            "--etcd",
            &format!("127.0.0.1:{port}"),
            "--node-id",
            "1",
            "--port",
            "0",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot reach etcd at http://127.0.0.1:"),
        "stderr: {err}"
    );
    eprintln!(
        "unreachable etcd reported after {:?}: {}",
        t.elapsed(),
        err.trim()
    );
}

/// A TCP relay between one node process and etcd that can be cut: every open connection is
/// shut down and new ones are closed at once, as if the node lost its network path to etcd
/// (and only to etcd: its peers and clients still reach it).
struct Relay {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    fn start(to: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind relay");
        let addr = l.local_addr().expect("addr");
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
        let (c2, k2) = (cut.clone(), conns.clone());
        std::thread::spawn(move || {
            for a in l.incoming() {
                let Ok(a) = a else { continue };
                if c2.load(Ordering::SeqCst) {
                    let _ = a.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(b) = TcpStream::connect(to) else {
                    continue;
                };
                let pairs = [
                    (a.try_clone(), b.try_clone()),
                    (b.try_clone(), a.try_clone()),
                ];
                if let Ok(mut k) = k2.lock() {
                    k.extend(a.try_clone().ok());
                    k.extend(b.try_clone().ok());
                }
                for (r, w) in pairs {
                    if let (Ok(mut r), Ok(mut w)) = (r, w) {
                        std::thread::spawn(move || {
                            let _ = std::io::copy(&mut r, &mut w);
                            let _ = w.shutdown(Shutdown::Both);
                        });
                    }
                }
            }
        });
        Relay { addr, cut, conns }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        if let Ok(mut k) = self.conns.lock() {
            for c in k.drain(..) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// GET straight at one node (no MOVED following): the value, or the error text.
fn get_at(addr: SocketAddr, key: &str) -> Result<Option<String>, String> {
    let c = redis::Client::open(format!("redis://{addr}/")).map_err(|e| e.to_string())?;
    let mut c = c
        .get_connection_with_timeout(Duration::from_secs(1))
        .map_err(|e| e.to_string())?;
    c.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    redis::cmd("GET")
        .arg(key)
        .query::<Option<String>>(&mut c)
        .map_err(|e| e.to_string())
}

/// A node cut off from etcd only (its peers and clients still reach it) loses its lease:
/// the leader fails it and a spare takes its slots, and the cut-off node — which cannot see
/// that map — must already have stopped serving: once the new coordinator acknowledged new
/// values, a read at the old node never returns the old ones. Healed, it learns it was
/// failed, wipes itself and rejoins as a spare with a new incarnation.
#[test]
fn a_node_cut_from_etcd_stops_serving_before_its_replacement() {
    if !etcd_available() {
        return;
    }
    let etcd = start_etcd();
    let view = EtcdView {
        url: etcd.url.clone(),
        keys: Keys::new(PREFIX).expect("prefix"),
        seen: std::cell::Cell::new(0),
    };
    let etcd_addr: SocketAddr = etcd
        .url
        .trim_start_matches("http://")
        .parse()
        .expect("etcd addr");
    let relay = Relay::start(etcd_addr);
    // Node 1 starts first (it most likely leads); node 3, active, talks to etcd through the
    // relay; node 4 is the spare.
    let mut nodes = vec![start_node_with(&etcd.url, 1, 1)];
    nodes.push(start_node_with(&etcd.url, 2, 1));
    nodes.push(start_node_with(&relay.addr.to_string(), 3, 1));
    nodes.push(start_node_with(&etcd.url, 4, 1));
    let map = wait_for("a bootstrapped map", 30, || {
        view.map().filter(|m| m.placement.is_some())
    });
    assert_eq!(map.node_state(NodeId(3)), Some(NodeState::Active));
    let victim = nodes[2].addr;
    let seeds: Vec<SocketAddr> = nodes.iter().map(|n| n.addr).collect();
    let mut kv = Kv::new(seeds);
    let keys: Vec<(String, String)> = (0..600)
        .map(|i| (format!("c:{i}"), format!("old-{i}")))
        .collect();
    for (k, v) in &keys {
        kv.set(k, v).expect("SET");
    }
    all_readable(&mut kv, &keys, 30);
    let theirs: Vec<(String, String)> = keys
        .iter()
        .filter(|(k, _)| map.coordinator(key_slot(k.as_bytes())) == Some(NodeId(3)))
        .take(50)
        .cloned()
        .collect();
    assert!(!theirs.is_empty());
    // Node 3 serves its keys before the cut.
    assert_eq!(
        get_at(victim, &theirs[0].0),
        Ok(Some(theirs[0].1.clone())),
        "node 3 coordinates {}",
        theirs[0].0
    );

    relay.cut();
    let cut = Instant::now();
    let m = wait_for("node 3 failed by the leader", 30, || {
        view.map()
            .filter(|m| m.node_state(NodeId(3)) == Some(NodeState::Failed))
    });
    let t_failed = cut.elapsed();
    assert_eq!(m.node_state(NodeId(4)), Some(NodeState::Active));
    // New values through the new coordinators (node 3 is no seed for them any more).
    kv.forget(victim);
    let new: Vec<(String, String)> = theirs
        .iter()
        .map(|(k, _)| (k.clone(), format!("new-{k}")))
        .collect();
    for (k, v) in &new {
        kv.set(k, v).expect("SET at the new coordinator");
    }
    // Straight at node 3: never the old value (it answers an error, or, once it knows,
    // a redirect; it cannot know the new value).
    // (In parallel: each refused read takes the front's 4 s retry window.)
    let reads: Vec<_> = theirs
        .iter()
        .zip(&new)
        .take(10)
        .map(|((k, old), (_, newv))| {
            let (k, old, newv) = (k.clone(), old.clone(), newv.clone());
            std::thread::spawn(move || (get_at(victim, &k), k, old, newv))
        })
        .collect();
    let mut refused = 0;
    for t in reads {
        let (r, k, old, newv) = t.join().expect("reader");
        match r {
            Ok(Some(v)) => {
                assert_ne!(
                    v, old,
                    "node 3 served a stale value for {k} after its lease lapsed"
                );
                assert_eq!(v, newv);
            }
            Ok(None) => panic!("node 3 answered nil for {k}"),
            Err(_) => refused += 1,
        }
    }
    eprintln!(
        "CUT FROM ETCD: node 3 failed in the map {} ms after the cut; {refused}/10 reads at node 3 refused, none stale",
        t_failed.as_millis()
    );

    // Healed: node 3 finds out, wipes itself, and rejoins as a spare (new incarnation).
    let old_inc = m.nodes[&NodeId(3)].incarnation;
    relay.heal();
    let m2 = wait_for("node 3 back as a spare", 60, || {
        view.map().filter(|m| {
            m.nodes
                .get(&NodeId(3))
                .is_some_and(|n| n.state == NodeState::Spare && n.incarnation > old_inc)
        })
    });
    all_readable(&mut kv, &new, 60);
    eprintln!(
        "HEALED: node 3 rejoined as a spare, incarnation {} -> {}, epoch {}",
        old_inc,
        m2.nodes[&NodeId(3)].incarnation,
        m2.epoch
    );
}
