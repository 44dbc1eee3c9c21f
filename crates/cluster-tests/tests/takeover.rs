//! Takeover per memgest (issue 10, case 6): a replicated memgest that never held a key does
//! not hold up a failover beyond its tolerance.
//!
//! Before: with ec:3+2 data and an empty rep:3 memgest in the map, SIGKILLing two nodes at
//! once left the affected slots unreadable until the rep:3 rebuild gave up waiting for a
//! majority of its old replicas (20 s), then logged "data may be lost" although nothing was.
//! Now the map says whether a replicated memgest was ever written (the first write waits for
//! that mark), and a rebuild waits for a majority only for memgests that were.
//!
//! The test sets the rebuild timeout to 10 minutes (`RINGLET_REBUILD_TIMEOUT_MS`), so the old
//! behaviour cannot pass by waiting it out: every ec key must read back within the test's
//! one-minute liveness bound.

mod common;

use common::{par_check, par_set, start, Client, Res};
use ringlet_codec::resp::Reply;
use std::time::{Duration, Instant};

fn wait_all_readable(seeds: &[std::net::SocketAddr], keys: &[(String, String)], what: &str) {
    let t = Instant::now();
    let deadline = t + Duration::from_secs(60);
    let mut left: Vec<(String, String)> = keys.to_vec();
    loop {
        left = par_check(seeds, &left, 4);
        if left.is_empty() {
            eprintln!("{what}: all {} read back in {:?}", keys.len(), t.elapsed());
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {} keys still unreadable after 60 s (first: {})",
            left.len(),
            keys.len(),
            left[0].0
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn empty_rep_memgest_does_not_hold_up_an_ec_takeover() {
    // Inherited by `up` and its node processes.
    std::env::set_var("RINGLET_REBUILD_TIMEOUT_MS", "600000");
    let mut cluster = start(5, 2, &["--default-memgest", "ec:3+2"]);
    let seeds = cluster.addrs();
    let mut c = Client::new(seeds.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    let cmd = |p: &[&str]| p.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    match c.call(cmd(&["MEMGEST", "CREATE", "r3", "rep:3"]), true, deadline) {
        Res::Ok(r) => assert_eq!(r, Reply::ok(), "MEMGEST CREATE r3 rep:3"),
        Res::Io => panic!("MEMGEST CREATE: transport failure"),
    }
    let keys: Vec<(String, String)> = (0..600)
        .map(|i| {
            (
                format!("t:{i}"),
                format!("value-{i}-{}", "x".repeat(i % 300)),
            )
        })
        .collect();
    par_set(&seeds, &keys, 4);
    wait_all_readable(&seeds, &keys, "before failures");
    let epoch = cluster.map().epoch;
    // Nodes 1 and 2 share every PG of this 5-node placement: each of their ranges loses two
    // of its rep:3 replicas (beyond tolerance) and two ec data/parity chunks (within it).
    cluster.kill9(1);
    cluster.kill9(2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.map().epoch == epoch {
        assert!(Instant::now() < deadline, "no failover after two SIGKILLs");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_all_readable(&seeds, &keys, "after SIGKILL of nodes 1 and 2");
    // The rep:3 memgest is usable afterwards, and its first write marks it in the map.
    let deadline = Instant::now() + Duration::from_secs(30);
    match c.call(cmd(&["SET", "r3key", "v", "MEMGEST", "r3"]), true, deadline) {
        Res::Ok(r) => assert_eq!(r, Reply::ok(), "SET in rep:3 after the takeover"),
        Res::Io => panic!("SET: transport failure"),
    }
    let m = cluster.map();
    let r3 = m.memgest_by_name("r3").expect("r3 exists");
    assert!(
        m.memgests[&r3].written,
        "the first write did not mark r3 written"
    );
}
