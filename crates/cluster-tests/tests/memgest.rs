//! Memgest management over RESP (docs/design/memgest-commands.md): every `MEMGEST`
//! subcommand, `SET ... MEMGEST`, DROP refused while keys live, MOVE atomic for readers, and
//! Ring §2's use cases (hot/cold tiering, heavy updates with a reliable backup, temporary
//! blobs committed later). One five-node cluster in this process (s = 3, d = 2: Ring's
//! evaluation shape, so rep:2, rep:3 and ec:K+M with M <= 2 all fit), shared by the tests;
//! each test uses its own keys and memgest names.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use ringlet_cluster::node::ClusterNode;
use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

struct TestCluster {
    _rt: tokio::runtime::Runtime,
    addrs: Vec<SocketAddr>,
    nodes: Vec<ClusterNode>,
}

fn cluster() -> &'static TestCluster {
    static C: OnceLock<TestCluster> = OnceLock::new();
    C.get_or_init(|| {
        let common::InProcess {
            rt,
            svc,
            nodes,
            addrs,
        } = common::in_process(5, 3, 2, 3000);
        // The service lives in the runtime's tasks; keep the Arc alive with them.
        std::mem::forget(svc);
        TestCluster {
            _rt: rt,
            addrs,
            nodes,
        }
    })
}

/// A tiny Redis Cluster client: one connection per node, follows MOVED, retries TRYAGAIN.
struct Client {
    conns: HashMap<SocketAddr, TcpStream>,
    seed: SocketAddr,
    /// Where the last key-routed command went, by slot.
    routes: HashMap<u16, SocketAddr>,
}

impl Client {
    fn new() -> Client {
        Client {
            conns: HashMap::new(),
            seed: cluster().addrs[0],
            routes: HashMap::new(),
        }
    }

    fn once(&mut self, addr: SocketAddr, args: &[&[u8]]) -> Reply {
        let s = self.conns.entry(addr).or_insert_with(|| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            s
        });
        let mut out = Vec::new();
        encode_request(&mut out, args);
        s.write_all(&out).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 16384];
        loop {
            if let Ok(Some((r, _))) = decode_reply(&buf) {
                return r;
            }
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed");
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Send `args`, routed by `key` (None: any node).
    fn call(&mut self, key: Option<&[u8]>, args: &[&str]) -> Reply {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.call_bytes(key, &args)
    }

    fn call_bytes(&mut self, key: Option<&[u8]>, args: &[&[u8]]) -> Reply {
        let slot = key.map(ringlet_types::key_slot);
        let mut addr = slot
            .and_then(|s| self.routes.get(&s).copied())
            .unwrap_or(self.seed);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < deadline, "no answer for {args:?}");
            let r = self.once(addr, args);
            if let Reply::Error(e) = &r {
                let e = String::from_utf8_lossy(e).to_string();
                if let Some(rest) = e.strip_prefix("MOVED ") {
                    addr = rest.split(' ').nth(1).unwrap().parse().unwrap();
                    if let Some(s) = slot {
                        self.routes.insert(s, addr);
                    }
                    continue;
                }
                if e.starts_with("TRYAGAIN") {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
            }
            return r;
        }
    }

    fn ok(&mut self, key: Option<&[u8]>, args: &[&str]) {
        let r = self.call(key, args);
        assert_eq!(r, Reply::ok(), "{args:?}");
    }

    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        match self.call(Some(key.as_bytes()), &["GET", key]) {
            Reply::Bulk(v) => Some(v),
            Reply::Null => None,
            other => panic!("GET {key}: {other:?}"),
        }
    }

    /// `MEMGEST KEY`: (memgest name, version text).
    fn memgest_of(&mut self, key: &str) -> Option<(String, String)> {
        match self.call(Some(key.as_bytes()), &["MEMGEST", "KEY", key]) {
            Reply::Array(v) => {
                let s = |r: &Reply| match r {
                    Reply::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
                    other => panic!("{other:?}"),
                };
                Some((s(&v[0]), s(&v[2])))
            }
            Reply::Null => None,
            other => panic!("MEMGEST KEY {key}: {other:?}"),
        }
    }

    fn info(&mut self, name: &str, extra: &[&str]) -> HashMap<String, String> {
        let mut args = vec!["MEMGEST", "INFO", name];
        args.extend_from_slice(extra);
        let Reply::Bulk(b) = self.call(None, &args) else {
            panic!("MEMGEST INFO {name}")
        };
        String::from_utf8(b)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Whether ec writes work on this build (the ec write path is being built alongside).
    fn ec_supported(&mut self, memgest: &str) -> bool {
        let key = format!("ec-probe-{memgest}");
        match self.call(
            Some(key.as_bytes()),
            &["SET", &key, "x", "MEMGEST", memgest],
        ) {
            r if r == Reply::ok() => {
                assert_eq!(self.get(&key).as_deref(), Some(&b"x"[..]));
                assert_eq!(
                    self.call(Some(key.as_bytes()), &["DEL", &key]),
                    Reply::Integer(1)
                );
                true
            }
            Reply::Error(e) => {
                let e = String::from_utf8_lossy(&e).to_string();
                assert!(e.contains("not supported"), "{e}");
                eprintln!("note: {memgest} writes are not supported by this build: {e}");
                false
            }
            other => panic!("{other:?}"),
        }
    }
}

fn version_ms(v: &str) -> (u64, u64) {
    // "ms.logical@origin#seq"
    let (ms, rest) = v.split_once('.').unwrap();
    let logical = rest.split('@').next().unwrap();
    (ms.parse().unwrap(), logical.parse().unwrap())
}

fn err_text(r: &Reply) -> String {
    match r {
        Reply::Error(e) => String::from_utf8_lossy(e).to_string(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn list(c: &mut Client) -> Vec<(String, String, i64, i64)> {
    let Reply::Array(v) = c.call(None, &["MEMGEST", "LIST"]) else {
        panic!()
    };
    v.into_iter()
        .map(|r| {
            let Reply::Array(f) = r else { panic!() };
            let s = |r: &Reply| match r {
                Reply::Bulk(b) => String::from_utf8(b.clone()).unwrap(),
                _ => panic!(),
            };
            let i = |r: &Reply| match r {
                Reply::Integer(i) => *i,
                _ => panic!(),
            };
            (s(&f[0]), s(&f[1]), i(&f[2]), i(&f[3]))
        })
        .collect()
}

#[test]
fn every_memgest_command() {
    let mut c = Client::new();
    // LIST: the built-in `none` and the bootstrap default `rep:3`.
    let l = list(&mut c);
    assert!(l.iter().any(|m| m.0 == "none" && m.1 == "none" && m.2 == 0));
    assert!(l
        .iter()
        .any(|m| m.0 == "rep:3" && m.1 == "rep:3" && m.2 == 1));
    // CREATE in every syntax; the command answers once this node's map has it.
    c.ok(None, &["MEMGEST", "CREATE", "t1-r2", "rep", "2"]);
    c.ok(None, &["MEMGEST", "CREATE", "t1-ec", "ec", "3", "2"]);
    c.ok(None, &["MEMGEST", "CREATE", "t1-none", "none"]);
    c.ok(None, &["MEMGEST", "CREATE", "t1-r3", "rep:3"]);
    // Refusals are Redis-style errors.
    for bad in [
        vec!["MEMGEST", "CREATE", "t1-r2", "rep", "2"], // exists
        vec!["MEMGEST", "CREATE", "t1-x", "rep", "9"],  // factor out of range
        vec!["MEMGEST", "CREATE", "t1-x", "ec", "3", "3"], // M > d = 2
        vec!["MEMGEST", "CREATE", "t1-x", "raid", "5"],
        vec!["MEMGEST", "CREATE", "t1-x"],
        vec!["MEMGEST", "DROP", "rep:3"], // the default
        vec!["MEMGEST", "DROP", "none"],
        vec!["MEMGEST", "DROP", "t1-nosuch"],
        vec!["MEMGEST", "DEFAULT", "t1-nosuch"],
        vec!["MEMGEST", "INFO", "t1-nosuch"],
        vec!["MEMGEST", "INFO", "rep:3", "MTTF", "-1"],
        vec!["MEMGEST", "FROB"],
    ] {
        let e = err_text(&c.call(None, &bad));
        assert!(e.starts_with("ERR"), "{bad:?}: {e}");
    }
    let l = list(&mut c);
    for (n, d) in [
        ("t1-r2", "rep:2"),
        ("t1-ec", "ec:3+2"),
        ("t1-none", "none"),
        ("t1-r3", "rep:3"),
    ] {
        assert!(l.iter().any(|m| m.0 == n && m.1 == d), "{n} in {l:?}");
    }
    // SET ... MEMGEST; KEY names the memgest and the version; GET never names one.
    c.ok(Some(b"t1-k"), &["SET", "t1-k", "v1", "MEMGEST", "t1-r2"]);
    let (m, v1) = c.memgest_of("t1-k").unwrap();
    assert_eq!(m, "t1-r2");
    assert_eq!(c.get("t1-k").as_deref(), Some(&b"v1"[..]));
    assert_eq!(c.memgest_of("t1-missing"), None);
    // Combined with NX / XX / GET.
    assert_eq!(
        c.call(
            Some(b"t1-k"),
            &["SET", "t1-k", "v2", "NX", "MEMGEST", "t1-none"]
        ),
        Reply::Null
    );
    assert_eq!(c.memgest_of("t1-k").unwrap().0, "t1-r2");
    assert_eq!(
        c.call(
            Some(b"t1-k"),
            &["SET", "t1-k", "v2", "XX", "GET", "MEMGEST", "t1-none"]
        ),
        Reply::Bulk(b"v1".to_vec())
    );
    let (m, v2) = c.memgest_of("t1-k").unwrap();
    assert_eq!(m, "t1-none");
    assert!(version_ms(&v2) > version_ms(&v1), "{v1} -> {v2}");
    let e = err_text(&c.call(Some(b"t1-k"), &["SET", "t1-k", "v", "MEMGEST", "t1-nosuch"]));
    assert!(e.contains("no such memgest"), "{e}");
    let e = err_text(&c.call(Some(b"t1-k"), &["SET", "t1-k", "v", "MEMGEST"]));
    assert!(e.contains("syntax"), "{e}");
    // MOVE: same value, new memgest, newer version.
    c.ok(Some(b"t1-k"), &["MEMGEST", "MOVE", "t1-k", "t1-r3"]);
    let (m, v3) = c.memgest_of("t1-k").unwrap();
    assert_eq!(m, "t1-r3");
    assert!(version_ms(&v3) > version_ms(&v2));
    assert_eq!(c.get("t1-k").as_deref(), Some(&b"v2"[..]));
    let e = err_text(&c.call(Some(b"t1-gone"), &["MEMGEST", "MOVE", "t1-gone", "t1-r3"]));
    assert!(e.contains("no such key"), "{e}");
    // Writes that name no memgest keep the key where it lives (the default is rep:3 here,
    // t1-r2 is not it): plain SET, INCR and APPEND.
    c.ok(Some(b"t1-n"), &["SET", "t1-n", "1", "MEMGEST", "t1-r2"]);
    c.ok(Some(b"t1-n"), &["SET", "t1-n", "5"]);
    assert_eq!(c.memgest_of("t1-n").unwrap().0, "t1-r2");
    assert_eq!(c.call(Some(b"t1-n"), &["INCR", "t1-n"]), Reply::Integer(6));
    assert_eq!(c.memgest_of("t1-n").unwrap().0, "t1-r2");
    assert_eq!(
        c.call(Some(b"t1-n"), &["APPEND", "t1-n", "0"]),
        Reply::Integer(2)
    );
    assert_eq!(c.memgest_of("t1-n").unwrap().0, "t1-r2");
    assert_eq!(c.call(Some(b"t1-n"), &["DEL", "t1-n"]), Reply::Integer(1));
    // After a delete the key is new again: the default.
    c.ok(Some(b"t1-n"), &["SET", "t1-n", "x"]);
    assert_eq!(c.memgest_of("t1-n").unwrap().0, "rep:3");
    assert_eq!(c.call(Some(b"t1-n"), &["DEL", "t1-n"]), Reply::Integer(1));
    // DEFAULT: a plain SET lands in the new default.
    c.ok(None, &["MEMGEST", "DEFAULT", "t1-none"]);
    c.ok(Some(b"t1-d"), &["SET", "t1-d", "x"]);
    assert_eq!(c.memgest_of("t1-d").unwrap().0, "t1-none");
    assert!(list(&mut c).iter().any(|m| m.0 == "t1-none" && m.2 == 1));
    c.ok(None, &["MEMGEST", "DEFAULT", "rep:3"]);
    // DROP is refused while keys live in the memgest, then allowed once they moved out.
    c.ok(Some(b"t1-k"), &["MEMGEST", "MOVE", "t1-k", "t1-r2"]);
    let e = err_text(&c.call(None, &["MEMGEST", "DROP", "t1-r2"]));
    assert!(e.contains("still holds"), "{e}");
    assert!(list(&mut c).iter().any(|m| m.0 == "t1-r2"));
    assert_eq!(c.get("t1-k").as_deref(), Some(&b"v2"[..]));
    c.ok(Some(b"t1-k"), &["MEMGEST", "MOVE", "t1-k", "t1-r3"]);
    // The replica's old rep:2 copy is retired by the core's repair (every 250 ms).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match c.call(None, &["MEMGEST", "DROP", "t1-r2"]) {
            r if r == Reply::ok() => break,
            r => {
                let e = err_text(&r);
                assert!(e.contains("still holds"), "{e}");
                assert!(Instant::now() < deadline, "old copies never retired: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    assert!(!list(&mut c).iter().any(|m| m.0 == "t1-r2"));
    let e = err_text(&c.call(Some(b"t1-k"), &["SET", "t1-k", "v", "MEMGEST", "t1-r2"]));
    assert!(e.contains("no such memgest"), "{e}");
    assert_eq!(c.get("t1-k").as_deref(), Some(&b"v2"[..]));
    // Deleted keys do not hold a memgest (their tombstones do not count).
    let e = err_text(&c.call(None, &["MEMGEST", "DROP", "t1-none"]));
    assert!(e.contains("still holds 1 keys"), "{e}");
    assert_eq!(c.call(Some(b"t1-d"), &["DEL", "t1-d"]), Reply::Integer(1));
    c.ok(None, &["MEMGEST", "DROP", "t1-none"]);
    // INFO: descriptor, counts, memory per payload byte, failures tolerated, reliability.
    for i in 0..30 {
        let k = format!("t1-info-{i}");
        c.ok(
            Some(k.as_bytes()),
            &["SET", &k, "0123456789", "MEMGEST", "t1-r3"],
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let info = loop {
        let info = c.info("t1-r3", &[]);
        // 30 + t1-k, three copies each once the replicas caught up.
        if info["stored_keys"] == "93" {
            break info;
        }
        assert!(Instant::now() < deadline, "{info:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(info["descriptor"], "rep:3");
    assert_eq!(info["keys"], "31");
    assert_eq!(info["failures_tolerated"], "1");
    assert_eq!(info["memory_per_payload_byte"], "3.0000");
    assert_eq!(info["model_mttf_hours"], "43800");
    assert!(info["stored_bytes"].parse::<u64>().unwrap() >= 93 * 10);
    let p: f64 = info["annual_loss_probability"].parse().unwrap();
    assert!(p > 0.0 && p < 0.01, "{p}");
    // Rates can be overridden; worse hardware loses data more often.
    let worse = c.info("t1-r3", &["MTTF", "1000", "REBUILD", "24"]);
    assert_eq!(worse["model_mttf_hours"], "1000");
    assert!(worse["annual_loss_probability"].parse::<f64>().unwrap() > p);
    let ec = c.info("t1-ec", &[]);
    assert_eq!(ec["failures_tolerated"], "2");
    assert_eq!(ec["memory_per_payload_byte"], "1.6667");
    let pec: f64 = ec["annual_loss_probability"].parse().unwrap();
    assert!(
        pec < p,
        "ec:3+2 ({pec}) must be more reliable than rep:3 ({p})"
    );
    // ec writes: as far as the core supports them in this build.
    if c.ec_supported("t1-ec") {
        c.ok(Some(b"t1-e"), &["SET", "t1-e", "ev", "MEMGEST", "t1-ec"]);
        assert_eq!(c.get("t1-e").as_deref(), Some(&b"ev"[..]));
        assert_eq!(c.memgest_of("t1-e").unwrap().0, "t1-ec");
    }
}

/// A reader polling GET during MOVEs never sees the key missing or any other value; the
/// version only grows.
#[test]
fn move_is_atomic_for_readers() {
    let mut c = Client::new();
    for (n, d) in [("t2-a", "rep:3"), ("t2-b", "none"), ("t2-c", "rep:2")] {
        c.ok(None, &["MEMGEST", "CREATE", n, d]);
    }
    let keys: Vec<String> = (0..4).map(|i| format!("t2-key-{i}")).collect();
    for k in &keys {
        let v = format!("value-of-{k}");
        c.ok(Some(k.as_bytes()), &["SET", k, &v, "MEMGEST", "t2-a"]);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, reads, keys) = (stop.clone(), reads.clone(), keys.clone());
            std::thread::spawn(move || {
                let mut r = Client::new();
                while !stop.load(Ordering::Relaxed) {
                    for k in &keys {
                        let got = r.get(k);
                        assert_eq!(
                            got.as_deref(),
                            Some(format!("value-of-{k}").as_bytes()),
                            "reader saw {k} missing or changed during a MOVE"
                        );
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let order = ["t2-b", "t2-c", "t2-a"];
    let mut last: HashMap<String, (u64, u64)> = HashMap::new();
    for round in 0..30 {
        for k in &keys {
            let to = order[round % order.len()];
            c.ok(Some(k.as_bytes()), &["MEMGEST", "MOVE", k, to]);
            let (m, v) = c.memgest_of(k).unwrap();
            assert_eq!(m, to);
            let v = version_ms(&v);
            if let Some(prev) = last.insert(k.clone(), v) {
                assert!(v > prev, "version went back on {k}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader saw a torn MOVE");
    }
    eprintln!(
        "{} MOVEs, {} concurrent GETs, none missing or changed",
        30 * keys.len(),
        reads.load(Ordering::Relaxed)
    );
    assert!(reads.load(Ordering::Relaxed) > 0);
}

/// Ring §2 "transparent multi-temperature data management": hot keys live replicated; keys
/// that cool down move to erasure coding (ec:3+2 when the build supports it, else rep:2 as
/// a stand-in cold tier, said so), and move back when they heat up; readers never notice.
#[test]
fn use_case_hot_cold_tiering() {
    let mut c = Client::new();
    c.ok(None, &["MEMGEST", "CREATE", "t3-hot", "rep", "3"]);
    c.ok(None, &["MEMGEST", "CREATE", "t3-ec", "ec", "3", "2"]);
    c.ok(None, &["MEMGEST", "CREATE", "t3-r2", "rep", "2"]);
    let cold = if c.ec_supported("t3-ec") {
        "t3-ec"
    } else {
        "t3-r2"
    };
    let keys: Vec<String> = (0..40).map(|i| format!("t3-obj-{i}")).collect();
    let value = |k: &str| format!("{k}:{}", "p".repeat(200));
    for k in &keys {
        c.ok(
            Some(k.as_bytes()),
            &["SET", k, &value(k), "MEMGEST", "t3-hot"],
        );
    }
    // A temperature tracker says 30 of them are cold.
    for k in &keys[10..] {
        c.ok(Some(k.as_bytes()), &["MEMGEST", "MOVE", k, cold]);
    }
    for k in &keys {
        assert_eq!(c.get(k), Some(value(k).into_bytes()));
    }
    for k in &keys[10..] {
        assert_eq!(c.memgest_of(k).unwrap().0, cold);
    }
    // The hot tier shrinks to the 10 hot keys once the old copies are retired.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let hot = c.info("t3-hot", &[]);
        let cold_info = c.info(cold, &[]);
        if hot["keys"] == "10" && cold_info["keys"] == "30" {
            break;
        }
        assert!(Instant::now() < deadline, "{hot:?} {cold_info:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    if cold == "t3-ec" {
        // The erasure-coded bytes (values, arena, parity, metadata) are reported too.
        let i = c.info("t3-ec", &[]);
        let n = |f: &str| i[f].parse::<u64>().unwrap();
        assert!(n("all_ec_payload_bytes") >= 30 * 200, "{i:?}");
        assert!(n("all_ec_parity_bytes") > 0, "{i:?}");
    }
    // One heats up again: back to the hot tier.
    c.ok(
        Some(keys[20].as_bytes()),
        &["MEMGEST", "MOVE", &keys[20], "t3-hot"],
    );
    assert_eq!(c.memgest_of(&keys[20]).unwrap().0, "t3-hot");
    assert_eq!(c.get(&keys[20]), Some(value(&keys[20]).into_bytes()));
}

/// Ring §2 "heavy updates": during a burst an item is updated in the fast single-copy
/// memgest while a reliable backup (a second key in the same slot) is refreshed in rep:3
/// every so often; after the burst the item moves back to rep:3.
#[test]
fn use_case_heavy_updates_with_reliable_backup() {
    let mut c = Client::new();
    c.ok(None, &["MEMGEST", "CREATE", "t4-fast", "none"]);
    c.ok(None, &["MEMGEST", "CREATE", "t4-safe", "rep:3"]);
    let item = "{auction:7}:price";
    let backup = "{auction:7}:backup";
    c.ok(
        Some(item.as_bytes()),
        &["SET", item, "100", "MEMGEST", "t4-safe"],
    );
    // The burst: move to the fast memgest, update many times.
    c.ok(Some(item.as_bytes()), &["MEMGEST", "MOVE", item, "t4-fast"]);
    let mut price = 100;
    for i in 1..=200 {
        price += 1;
        c.ok(
            Some(item.as_bytes()),
            &["SET", item, &price.to_string(), "MEMGEST", "t4-fast"],
        );
        if i % 50 == 0 {
            c.ok(
                Some(backup.as_bytes()),
                &["SET", backup, &price.to_string(), "MEMGEST", "t4-safe"],
            );
            assert_eq!(c.memgest_of(backup).unwrap().0, "t4-safe");
        }
    }
    assert_eq!(c.memgest_of(item).unwrap().0, "t4-fast");
    assert_eq!(c.get(backup), Some(b"300".to_vec()));
    // The burst is over: the item becomes reliable again.
    c.ok(Some(item.as_bytes()), &["MEMGEST", "MOVE", item, "t4-safe"]);
    assert_eq!(c.memgest_of(item).unwrap().0, "t4-safe");
    assert_eq!(c.get(item), Some(b"300".to_vec()));
}

/// Ring §2 "temporary blob storage": uploads land in the cheap single-copy memgest; a
/// commit moves the blob to rep:3, a discard deletes it.
#[test]
fn use_case_temporary_blobs_committed_later() {
    let mut c = Client::new();
    c.ok(None, &["MEMGEST", "CREATE", "t5-tmp", "none"]);
    c.ok(None, &["MEMGEST", "CREATE", "t5-durable", "rep", "3"]);
    let blob = vec![b'b'; 64 * 1024];
    for i in 0..6 {
        let k = format!("t5-blob-{i}");
        c.call_bytes(
            Some(k.as_bytes()),
            &[b"SET", k.as_bytes(), &blob, b"MEMGEST", b"t5-tmp"],
        );
        assert_eq!(c.memgest_of(&k).unwrap().0, "t5-tmp");
    }
    // The user commits blobs 0-2 (filters applied) and discards 3-5.
    for i in 0..6 {
        let k = format!("t5-blob-{i}");
        if i < 3 {
            c.ok(Some(k.as_bytes()), &["MEMGEST", "MOVE", &k, "t5-durable"]);
        } else {
            assert_eq!(c.call(Some(k.as_bytes()), &["DEL", &k]), Reply::Integer(1));
        }
    }
    for i in 0..6 {
        let k = format!("t5-blob-{i}");
        if i < 3 {
            assert_eq!(c.memgest_of(&k).unwrap().0, "t5-durable");
            assert_eq!(c.get(&k), Some(blob.clone()));
        } else {
            assert_eq!(c.get(&k), None);
        }
    }
    // Committed blobs are on three nodes; the temporary memgest is empty and can go.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let d = c.info("t5-durable", &[]);
        if d["stored_keys"] == "9" {
            break;
        }
        assert!(Instant::now() < deadline, "{d:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    c.ok(None, &["MEMGEST", "DROP", "t5-tmp"]);
    let _ = cluster().nodes.len();
}
