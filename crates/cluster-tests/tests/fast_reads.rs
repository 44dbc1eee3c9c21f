//! Coordinator reads on the fast path (issue 11, item 3): a cluster GET is answered by the
//! front's own thread from the engine when the node coordinates the slot with a complete copy,
//! holds its lease and the key has no write in flight (`ClusterNode::fast_get`); otherwise it
//! goes through the replica core as before. These checks run against real processes:
//! - reads are served on the fast path at all (INFO `fast_reads` moves by at least the
//!   number of GETs) and return what was written, deletes and expiries included;
//! - a register written in sequence is never read older than a write acknowledged before the
//!   read began, with reads on several threads racing the writer;
//! - records answer WRONGTYPE to GET there too.
//!
//! The linearizability of fast-path reads under failures is checked by the tests that already
//! read through the fronts under faults (multiprocess, nemesis, ec_multiprocess, partition).

mod common;

/// No test here kills, stops or partitions a node: a 5 s lease keeps a node that a loaded CI
/// machine pauses for over a second from being failed over (the map would change under
/// assertions about which node holds what).
const LONG_LEASE: &[&str] = &["--lease-ms", "5000"];

use common::{node_call, Client, Res};
use ringlet_codec::resp::Reply;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn info_field(addr: std::net::SocketAddr, field: &str) -> u64 {
    let Reply::Bulk(b) = node_call(addr, &[b"INFO"]) else {
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

fn call(c: &mut Client, cmd: &[&[u8]], write: bool) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(30);
    match c.call(cmd.iter().map(|a| a.to_vec()).collect(), write, deadline) {
        Res::Ok(r) => r,
        Res::Io => panic!("{cmd:?}: transport failure"),
    }
}

fn fast_reads(addrs: &[std::net::SocketAddr]) -> u64 {
    addrs.iter().map(|a| info_field(*a, "fast_reads")).sum()
}

#[test]
fn reads_take_the_fast_path_and_see_every_write() {
    let cl = common::start(3, 1, LONG_LEASE);
    let addrs: Vec<_> = cl.addrs().into_iter().take(3).collect();
    let mut c = Client::new(cl.addrs());
    const N: usize = 200;
    for i in 0..N {
        let (k, v) = (format!("k:{i}"), format!("v:{i}"));
        assert_eq!(
            call(&mut c, &[b"SET", k.as_bytes(), v.as_bytes()], true),
            Reply::ok()
        );
    }
    let before = fast_reads(&addrs);
    for i in 0..N {
        let (k, v) = (format!("k:{i}"), format!("v:{i}"));
        assert_eq!(
            call(&mut c, &[b"GET", k.as_bytes()], false),
            Reply::Bulk(v.into_bytes())
        );
    }
    let after = fast_reads(&addrs);
    assert!(
        after - before >= N as u64,
        "only {} of {N} GETs took the fast path",
        after - before
    );
    // Deletes and overwrites are seen at once.
    for i in (0..N).step_by(2) {
        let k = format!("k:{i}");
        assert_eq!(
            call(&mut c, &[b"DEL", k.as_bytes()], true),
            Reply::Integer(1)
        );
        assert_eq!(call(&mut c, &[b"GET", k.as_bytes()], false), Reply::Null);
    }
    assert_eq!(call(&mut c, &[b"SET", b"k:1", b"new"], true), Reply::ok());
    assert_eq!(
        call(&mut c, &[b"GET", b"k:1"], false),
        Reply::Bulk(b"new".to_vec())
    );
    // An expired value is absent on the fast path too.
    assert_eq!(
        call(&mut c, &[b"SET", b"short", b"x", b"PX", b"300"], true),
        Reply::ok()
    );
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(call(&mut c, &[b"GET", b"short"], false), Reply::Null);
    // The expiry read on the fast path is the key's own (TTL reads through it): a SET
    // without EX after one with EX removes it, as in Redis.
    assert_eq!(
        call(&mut c, &[b"SET", b"t", b"x", b"EX", b"100"], true),
        Reply::ok()
    );
    let Reply::Integer(ttl) = call(&mut c, &[b"TTL", b"t"], false) else {
        panic!("TTL")
    };
    assert!((99..=100).contains(&ttl), "TTL {ttl}");
    assert_eq!(call(&mut c, &[b"SET", b"t", b"y"], true), Reply::ok());
    assert_eq!(call(&mut c, &[b"TTL", b"t"], false), Reply::Integer(-1));
    // A record is WRONGTYPE to GET.
    assert_eq!(
        call(&mut c, &[b"HSET", b"rec", b"f", b"1"], true),
        Reply::Integer(1)
    );
    let r = call(&mut c, &[b"GET", b"rec"], false);
    assert!(
        matches!(&r, Reply::Error(e) if e.starts_with(b"WRONGTYPE")),
        "{r:?}"
    );
}

#[test]
fn reads_racing_a_writer_never_go_back() {
    let cl = common::start(3, 1, LONG_LEASE);
    let seeds = cl.addrs();
    // acked[i] = when SET reg i was acknowledged.
    let acked: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut c = Client::new(seeds.clone());
    assert_eq!(call(&mut c, &[b"SET", b"reg", b"0"], true), Reply::ok());
    acked.lock().unwrap().push(Instant::now());
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (seeds, acked, stop) = (seeds.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut c = Client::new(seeds);
                let mut reads = 0u64;
                let mut last = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    // Everything acknowledged before the read began must be visible.
                    let floor = acked.lock().unwrap().len() - 1;
                    let Reply::Bulk(v) = call(&mut c, &[b"GET", b"reg"], false) else {
                        panic!("GET reg")
                    };
                    let got: usize = String::from_utf8(v).unwrap().parse().unwrap();
                    assert!(got >= floor, "read {got} after {floor} was acknowledged");
                    assert!(got >= last, "read {got} after reading {last}");
                    last = got;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for i in 1..=500usize {
        let v = i.to_string();
        assert_eq!(
            call(&mut c, &[b"SET", b"reg", v.as_bytes()], true),
            Reply::ok()
        );
        acked.lock().unwrap().push(Instant::now());
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads > 0);
    let addrs: Vec<_> = seeds.into_iter().take(3).collect();
    eprintln!(
        "{reads} reads racing 500 writes; fast_reads {} fallbacks {}",
        fast_reads(&addrs),
        addrs
            .iter()
            .map(|a| info_field(*a, "fast_read_fallbacks"))
            .sum::<u64>()
    );
}
