//! One-sided reads in cluster mode (issue 11, item 4; docs/design/cluster-shm-reads.md):
//! nodes started by `up --shm-dir DIR` export their engine and a validity region; a client on
//! the same host reads keys from their memory. Against real processes:
//! - a smart client (`ClusterClient` with `shm_dir`) reads back every value written through
//!   RESP, absences and deletes included, and counts one-sided reads vs network fallbacks;
//! - readers racing a writer of one register never read a value older than one acknowledged
//!   before their read began, nor go back (writes in flight fall back to the network);
//! - after the coordinator of a key is SIGSTOPped (or killed, or drained) and the key is
//!   rewritten at its successor, a reader holding the old node's mapping never gets the old
//!   value: a stopped node's lease deadline in shared memory lapses without any action of its
//!   own; a drained one clears the slot's bit.

mod common;

use common::{Client, Res};
use ringlet_client::{BlockingClusterClient, ChaseOptions, ClusterConfig, ShmFallback, ShmReader};
use ringlet_codec::resp::Reply;
use ringlet_types::key_slot;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn shm_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ringlet-shm-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn start(dir: &Path) -> common::Cluster {
    common::start(3, 1, &["--shm-dir", dir.to_str().unwrap()])
}

/// SET until acknowledged: a transport failure (the coordinator stopped or died under the
/// request) leaves the outcome unknown, and writing the same value again is harmless here.
fn set(c: &mut Client, k: &[u8], v: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    // Bounded by the deadline.
    loop {
        match c.call(
            vec![b"SET".to_vec(), k.to_vec(), v.to_vec()],
            true,
            deadline,
        ) {
            Res::Ok(r) => {
                assert_eq!(r, Reply::ok(), "SET {k:?}");
                return;
            }
            Res::Io => assert!(Instant::now() < deadline, "SET {k:?}: transport failure"),
        }
    }
}

fn del(c: &mut Client, k: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    assert!(matches!(
        c.call(vec![b"DEL".to_vec(), k.to_vec()], true, deadline),
        Res::Ok(Reply::Integer(1))
    ));
}

fn info_field(addr: std::net::SocketAddr, field: &str) -> u64 {
    let Reply::Bulk(b) = common::node_call(addr, &[b"INFO"]) else {
        panic!("INFO")
    };
    let text = String::from_utf8(b).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO"))
        .trim()
        .parse()
        .unwrap()
}

fn smart_client(cl: &common::Cluster, dir: &Path) -> BlockingClusterClient {
    let seeds: Vec<String> = cl.addrs().iter().map(|a| a.to_string()).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let mut cfg = ClusterConfig {
        shm_dir: Some(dir.to_path_buf()),
        ..ClusterConfig::default()
    };
    cfg.client.timeout = Duration::from_secs(30);
    BlockingClusterClient::connect(&seeds, cfg).unwrap()
}

#[test]
fn one_sided_reads_return_acknowledged_values_and_are_counted() {
    let dir = shm_dir("basic");
    let cl = start(&dir);
    let mut c = Client::new(cl.addrs());
    const N: usize = 200;
    for i in 0..N {
        set(
            &mut c,
            format!("k:{i}").as_bytes(),
            format!("v:{i}").as_bytes(),
        );
    }
    let sc = smart_client(&cl, &dir);
    for i in 0..N {
        let v = sc.get(format!("k:{i}").as_bytes()).unwrap();
        assert_eq!(v.value.as_deref(), Some(format!("v:{i}").as_bytes()));
    }
    assert_eq!(sc.get(b"never-written").unwrap().value, None);
    del(&mut c, b"k:0");
    assert_eq!(sc.get(b"k:0").unwrap().value, None);
    set(&mut c, b"k:1", b"again");
    assert_eq!(
        sc.get(b"k:1").unwrap().value.as_deref(),
        Some(&b"again"[..])
    );
    let st = sc.async_client().stats();
    eprintln!(
        "one-sided {} fallbacks {:?}",
        st.shm_reads, st.shm_fallbacks
    );
    // Every GET went one of the two ways, and (with no write in flight and every lease
    // held) most of them one-sided.
    assert_eq!(st.shm_reads + st.shm_fallbacks.total(), N as u64 + 3);
    assert!(st.shm_reads >= N as u64 / 2, "{st:?}");
    // MGET across slots: read one-sided per key, the rest over the network.
    let keys: Vec<String> = (2..50).map(|i| format!("k:{i}")).collect();
    let got = sc.mget(&keys).unwrap();
    for (i, g) in (2..50).zip(&got) {
        assert_eq!(g.value.as_deref(), Some(format!("v:{i}").as_bytes()));
    }
    let st2 = sc.async_client().stats();
    assert_eq!(
        st2.shm_reads + st2.shm_fallbacks.total(),
        st.shm_reads + st.shm_fallbacks.total() + 48
    );
    // The nodes see their one-sided clients (the reads themselves never reach them).
    let clients: u64 = cl
        .addrs()
        .iter()
        .take(3)
        .map(|a| info_field(*a, "shm_clients"))
        .sum();
    assert!(clients >= 1);
    // A raw reader of node 1 sees a cluster node's socket (a validity region in HELLO), and
    // its socket serves no requests: writes must go through the cluster's ports.
    let mut r = ShmReader::connect(dir.join(format!("node-{}.sock", cl.base))).unwrap();
    assert!(r.is_cluster());
    assert!(r.set(b"k:5", b"bypass").is_err());
}

#[test]
fn readers_racing_a_writer_never_read_older_than_acknowledged() {
    let dir = shm_dir("race");
    let cl = start(&dir);
    let mut c = Client::new(cl.addrs());
    set(&mut c, b"reg", b"0");
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    const WRITES: u64 = 400;
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (acked, done) = (acked.clone(), done.clone());
        let sc = smart_client(&cl, &dir);
        readers.push(std::thread::spawn(move || {
            let mut last = 0u64;
            let mut reads = 0u64;
            // Bounded by the writer, which ends after WRITES acknowledged writes.
            while !done.load(Ordering::Acquire) {
                let floor = acked.load(Ordering::Acquire);
                let v = sc.get(b"reg").unwrap();
                let got: u64 = std::str::from_utf8(&v.value.unwrap())
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(got >= floor, "read {got} after {floor} was acknowledged");
                assert!(got >= last, "read {got} after reading {last}");
                last = got;
                reads += 1;
            }
            (reads, sc.async_client().stats())
        }));
    }
    for i in 1..=WRITES {
        set(&mut c, b"reg", i.to_string().as_bytes());
        acked.store(i, Ordering::Release);
    }
    done.store(true, Ordering::Release);
    let mut one_sided = 0;
    let mut in_flight = 0;
    for r in readers {
        let (reads, st) = r.join().unwrap();
        eprintln!(
            "reader: {reads} reads, one-sided {}, fallbacks {:?}",
            st.shm_reads, st.shm_fallbacks
        );
        one_sided += st.shm_reads;
        in_flight += st.shm_fallbacks.in_flight;
    }
    eprintln!("one-sided {one_sided}, in-flight fallbacks {in_flight}");
    assert!(one_sided > 0);
}

/// The node (id, client port, pid) that coordinates `key` now.
fn coordinator(cl: &common::Cluster, key: &[u8]) -> (u32, u16, u32) {
    let map = cl.map();
    let id = map.coordinator(key_slot(key)).unwrap().0;
    (id, cl.base + id as u16 - 1, cl.pids[&id])
}

/// Read `key` one-sided from `r` `reads` times, asserting it never returns `old`; returns
/// how many reads were answered one-sided and the fallback reasons seen.
fn never_old(r: &mut ShmReader, key: &[u8], old: &[u8], reads: usize) -> (usize, Vec<ShmFallback>) {
    let mut hits = 0;
    let mut reasons = Vec::new();
    let mut out = Vec::new();
    for _ in 0..reads {
        match r.try_get_into(key, &mut out) {
            Ok(Some(_)) => {
                assert_ne!(out, old, "the deposed coordinator's value was read");
                hits += 1;
            }
            Ok(None) => hits += 1,
            Err(f) => {
                if !reasons.contains(&f) {
                    reasons.push(f);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    (hits, reasons)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Depose {
    Stop,
    Kill,
    Drain,
}

fn deposed_coordinator(how: Depose) {
    let dir = shm_dir(&format!("{how:?}"));
    let mut cl = start(&dir);
    let mut c = Client::new(cl.addrs());
    let key = b"deposed";
    set(&mut c, key, b"old");
    let (id, port, pid) = coordinator(&cl, key);
    let mut r = ShmReader::connect(dir.join(format!("node-{port}.sock"))).unwrap();
    let mut out = Vec::new();
    // The node serves it one-sided once its state is published (a few ticks at most).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match r.try_get_into(key, &mut out) {
            Ok(Some(_)) => break,
            other => assert!(Instant::now() < deadline, "never served: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(out, b"old");
    match how {
        Depose::Kill => cl.kill9(id),
        // SAFETY: signalling a child of the test's cluster.
        Depose::Stop => unsafe {
            libc::kill(pid as i32, libc::SIGSTOP);
        },
        Depose::Drain => cl.drain(id),
    }
    // The successor accepts the write only after the old lease lapsed (or, for a drain,
    // after the old coordinator handed the slot over). Written until the map names it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        set(&mut c, key, b"new");
        if coordinator(&cl, key).0 != id {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the key never moved off node {id}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (hits, reasons) = never_old(&mut r, key, b"old", 200);
    eprintln!("deposed node: {hits} one-sided, fallbacks {reasons:?}");
    assert_eq!(hits, 0);
    if how == Depose::Stop {
        // Woken up, the old node learns it was replaced (fenced, wiped): still never the
        // old value, whatever it publishes on the way.
        // SAFETY: as above.
        unsafe {
            libc::kill(pid as i32, libc::SIGCONT);
        }
        let (hits, reasons) = never_old(&mut r, key, b"old", 1000);
        eprintln!("after SIGCONT: {hits} one-sided, fallbacks {reasons:?}");
    }
    // The smart client follows the map to the successor's memory.
    let sc = smart_client(&cl, &dir);
    assert_eq!(sc.get(key).unwrap().value.as_deref(), Some(&b"new"[..]));
}

#[test]
fn sigstopped_coordinator_regions_stop_validating() {
    deposed_coordinator(Depose::Stop);
}

#[test]
fn killed_coordinator_regions_stop_validating() {
    deposed_coordinator(Depose::Kill);
}

/// A drained coordinator is alive and keeps its lease: what stops its readers is the slot
/// bit it clears when it applies the map that moves the slot.
#[test]
fn drained_coordinator_regions_stop_validating() {
    deposed_coordinator(Depose::Drain);
}

/// ec keys are not read one-sided: their engine entry is a pointer into the SRS arena, which
/// only the node decodes. Every GET of one falls back with the reason `ec` and still returns
/// the value (over the network); an absent key is still answered one-sided.
#[test]
fn ec_keys_fall_back_with_their_reason() {
    let dir = shm_dir("ec");
    let cl = common::start(
        5,
        0,
        &[
            "--default-memgest",
            "ec:3+2",
            "--shm-dir",
            dir.to_str().unwrap(),
        ],
    );
    let mut c = Client::new(cl.addrs());
    const N: usize = 30;
    for i in 0..N {
        set(
            &mut c,
            format!("e:{i}").as_bytes(),
            format!("x:{i}").as_bytes(),
        );
    }
    let sc = smart_client(&cl, &dir);
    for i in 0..N {
        let v = sc.get(format!("e:{i}").as_bytes()).unwrap();
        assert_eq!(v.value.as_deref(), Some(format!("x:{i}").as_bytes()));
    }
    assert_eq!(sc.get(b"e:absent").unwrap().value, None);
    let st = sc.async_client().stats();
    eprintln!(
        "ec: one-sided {} fallbacks {:?}",
        st.shm_reads, st.shm_fallbacks
    );
    assert_eq!(st.shm_fallbacks.ec, N as u64, "{st:?}");
}

/// The racing test across a failover: three one-sided readers and a writer of one register;
/// a third of the way through, the register's coordinator is SIGSTOPped (its successor takes
/// the writes), two thirds through it is SIGCONTed (fenced, it rejoins empty). No reader ever
/// reads a value older than one acknowledged before its read began, nor goes back.
#[test]
fn racing_readers_across_a_failover_never_read_stale() {
    let dir = shm_dir("race-failover");
    let cl = start(&dir);
    let mut c = Client::new(cl.addrs());
    set(&mut c, b"reg", b"0");
    let (_, _, pid) = coordinator(&cl, b"reg");
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    const WRITES: u64 = 300;
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (acked, done) = (acked.clone(), done.clone());
        let sc = smart_client(&cl, &dir);
        readers.push(std::thread::spawn(move || {
            let mut last = 0u64;
            // Bounded by the writer, which ends after WRITES acknowledged writes.
            while !done.load(Ordering::Acquire) {
                let floor = acked.load(Ordering::Acquire);
                let Ok(v) = sc.get(b"reg") else {
                    continue; // a read that timed out against the stopped node
                };
                let got: u64 = std::str::from_utf8(&v.value.unwrap())
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(got >= floor, "read {got} after {floor} was acknowledged");
                assert!(got >= last, "read {got} after reading {last}");
                last = got;
            }
            sc.async_client().stats()
        }));
    }
    for i in 1..=WRITES {
        if i == WRITES / 3 {
            // SAFETY: signalling a child of the test's cluster.
            unsafe {
                libc::kill(pid as i32, libc::SIGSTOP);
            }
        }
        if i == 2 * WRITES / 3 {
            // SAFETY: as above.
            unsafe {
                libc::kill(pid as i32, libc::SIGCONT);
            }
        }
        set(&mut c, b"reg", i.to_string().as_bytes());
        acked.store(i, Ordering::Release);
    }
    done.store(true, Ordering::Release);
    for r in readers {
        let st = r.join().unwrap();
        eprintln!(
            "reader: one-sided {}, fallbacks {:?}",
            st.shm_reads, st.shm_fallbacks
        );
    }
}

fn call_ok(c: &mut Client, cmd: &[&str]) -> Reply {
    let v = cmd.iter().map(|p| p.as_bytes().to_vec()).collect();
    match c.call(v, true, Instant::now() + Duration::from_secs(30)) {
        Res::Ok(r) => r,
        Res::Io => panic!("{cmd:?}: transport failure"),
    }
}

/// Links filled with location hints by the coordinator (LINK SET/ADD of targets it
/// coordinates) and followed one-sided by `ClusterClient::chase_one_sided`: the same
/// entries and stop reason as the node's CHASE over the network, hops read at their hints
/// (counted), targets on other slots looked up by key; after targets are deleted and
/// rewritten the walk still answers as the node does.
#[test]
fn one_sided_chase_follows_hints_across_the_cluster() {
    let dir = shm_dir("chase");
    let cl = start(&dir);
    let mut c = Client::new(cl.addrs());
    // One hash tag: the page, its reviews and their authors share a slot (a coordinator),
    // so every link gets a hint; `ext:*` keys live elsewhere and get none.
    for i in 0..10 {
        call_ok(
            &mut c,
            &["HSET", &format!("{{g}}u:{i}"), "name", &format!("user{i}")],
        );
        call_ok(
            &mut c,
            &["HSET", &format!("ext:{i}"), "name", &format!("ext{i}")],
        );
    }
    for i in 0..30 {
        let r = format!("{{g}}r:{i}");
        call_ok(&mut c, &["HSET", &r, "stars", &format!("{}", i % 5)]);
        call_ok(
            &mut c,
            &["LINK", "SET", &r, "author", &format!("{{g}}u:{}", i % 10)],
        );
        call_ok(
            &mut c,
            &["LINK", "SET", &r, "source", &format!("ext:{}", i % 10)],
        );
        call_ok(&mut c, &["LINK", "ADD", "{g}p:0", "reviews", &r]);
    }
    let sc = smart_client(&cl, &dir);
    let seeds: Vec<String> = cl.addrs().iter().map(|a| a.to_string()).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let net = BlockingClusterClient::connect(&seeds, ClusterConfig::default()).unwrap();
    let links = ["reviews", "author", "source"];
    let opts = ChaseOptions::default().depth(2);

    // A whole one-sided walk: one cut by the 100 ms bound on a loaded machine (stop `time`)
    // or refused by a validity check is tried again, bounded by a deadline; the counters
    // are those of the walk that completed.
    let walk_whole = || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let before = sc.async_client().stats().hints;
            let r = sc.async_client().chase_one_sided(b"{g}p:0", &links, &opts);
            match r {
                Some(r) if r.stop != ringlet_client::chase::Stop::Time => {
                    return (r, before, sc.async_client().stats().hints)
                }
                _ => assert!(Instant::now() < deadline, "no whole one-sided walk"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let (one, before, after) = walk_whole();
    let want = net.chase(b"{g}p:0", &links, &opts).unwrap().value;
    assert_eq!(want.entries.len(), 1 + 30 + 10 + 10);
    assert_eq!(one, want);
    let st = sc.async_client().stats();
    let hits = after.hits - before.hits;
    // Keys without a hint are looked up, or (on a walk after a retried one) read at the
    // position the first lookup remembered.
    let unhinted_reads = after.lookups - before.lookups + after.cache_hits - before.cache_hits;
    // 30 reviews and 10 authors at their hints, and the ext keys the same node coordinates
    // (a node fills hints for its own targets only); the root and the other ext keys have
    // none.
    let map = sc.async_client().map();
    let home = map.coordinator(key_slot(b"{g}p:0"));
    let local_ext = (0..10)
        .filter(|i| map.coordinator(key_slot(format!("ext:{i}").as_bytes())) == home)
        .count() as u64;
    assert_eq!(hits, 40 + local_ext, "{st:?}");
    let unhinted = 1 + 10 - local_ext;
    assert_eq!(unhinted_reads, unhinted, "{st:?}");
    assert!(st.shm_chases >= 1);

    // Delete some authors, rewrite reviews bigger (in place or not), re-create an author:
    // the walk still answers as the node, and stale hints are counted, never followed.
    for i in [2, 5] {
        del(&mut c, format!("{{g}}u:{i}").as_bytes());
    }
    for i in (0..30).step_by(3) {
        call_ok(
            &mut c,
            &["HSET", &format!("{{g}}r:{i}"), "text", &"x".repeat(500)],
        );
    }
    call_ok(&mut c, &["HSET", "{g}u:5", "name", "again"]);
    let want = net.chase(b"{g}p:0", &links, &opts).unwrap().value;
    // A walk may also meet a key with a write in flight (None: the caller asks the node).
    let (one, _, _) = walk_whole();
    assert_eq!(one, want);
    assert_eq!(want.entries.len(), 1 + 30 + 9 + 10);
    // `chase` itself takes the one-sided path when it can.
    assert_eq!(sc.chase(b"{g}p:0", &links, &opts).unwrap().value, want);
    let st = sc.async_client().stats();
    assert!(st.hints.stale_entry + st.hints.stale_table >= 1, "{st:?}");

    // RECORD SET (the loader's one write per item) gets hints for its LINK and LINKS fields
    // as LINK SET/ADD do: every review of this second page is read at its hint.
    let mut cmd: Vec<String> = ["RECORD", "SET", "{g}p:1", "ATTR", "title", "two"]
        .map(String::from)
        .to_vec();
    cmd.extend(["LINKS".into(), "reviews".into(), "30".into()]);
    cmd.extend((0..30).map(|i| format!("{{g}}r:{i}")));
    cmd.extend(["LINK".into(), "first".into(), "{g}r:0".into()]);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    assert_eq!(call_ok(&mut c, &cmd), Reply::Integer(3));
    let one_level = ChaseOptions::default().depth(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (one, hits) = loop {
        let before = sc.async_client().stats().hints.hits;
        match sc
            .async_client()
            .chase_one_sided(b"{g}p:1", &["reviews", "first"], &one_level)
        {
            Some(r) if r.stop != ringlet_client::chase::Stop::Time => {
                break (r, sc.async_client().stats().hints.hits - before)
            }
            _ => assert!(Instant::now() < deadline, "no whole one-sided walk"),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let want = net
        .chase(b"{g}p:1", &["reviews", "first"], &one_level)
        .unwrap()
        .value;
    assert_eq!(one, want);
    assert_eq!(want.entries.len(), 1 + 30);
    assert_eq!(hits, 30, "RECORD SET's links carry no hints");
}
