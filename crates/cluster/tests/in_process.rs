//! A three-node cluster inside one process (control plane + nodes on ephemeral ports): the
//! fast end-to-end check of the runtime — bootstrap, routing, MOVED, replication, RMW
//! commands — without spawning processes.

mod common;

use common::{Client, Res};
use ringlet_cluster::launch::{run_control, run_node, ControlOpts, NodeOpts};
use ringlet_codec::resp::Reply;
use ringlet_types::{key_slot, MemgestKind};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

#[test]
fn three_nodes_in_one_process() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (svc, caddr) = rt
        .block_on(run_control(&ControlOpts {
            bind: "127.0.0.1:0".parse().unwrap(),
            expect_nodes: 3,
            active: 3,
            default_memgest: Some(MemgestKind::Rep { r: 3 }),
            s: 2,
            d: 1,
            lease_ms: 1500,
        }))
        .unwrap();
    let mut nodes = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for id in 1..=3 {
        let (n, a) = rt
            .block_on(run_node(&NodeOpts {
                id,
                bind: "127.0.0.1:0".parse().unwrap(),
                peer_port: 0,
                control: caddr.to_string(),
                lease_ms: 1500,
                memory_bytes: 64 << 20,
            }))
            .unwrap();
        nodes.push(n);
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
    let mut c = Client::new(addrs.clone());
    let far = Instant::now() + Duration::from_secs(20);
    let cmd = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    for i in 0..200 {
        let r = c.call(cmd(&["SET", &format!("k{i}"), &format!("v{i}")]), true, far);
        assert_eq!(r, Res::Ok(Reply::ok()), "SET k{i}");
    }
    for i in 0..200 {
        let r = c.call(cmd(&["GET", &format!("k{i}")]), false, far);
        assert_eq!(r, Res::Ok(Reply::Bulk(format!("v{i}").into_bytes())));
    }
    assert_eq!(
        c.call(cmd(&["INCR", "n"]), true, far),
        Res::Ok(Reply::Integer(1))
    );
    assert_eq!(
        c.call(cmd(&["INCRBY", "n", "41"]), true, far),
        Res::Ok(Reply::Integer(42))
    );
    assert_eq!(
        c.call(cmd(&["APPEND", "s", "ab"]), true, far),
        Res::Ok(Reply::Integer(2))
    );
    assert_eq!(
        c.call(cmd(&["SET", "s", "x", "NX"]), true, far),
        Res::Ok(Reply::Null)
    );
    assert_eq!(
        c.call(cmd(&["DEL", "s"]), true, far),
        Res::Ok(Reply::Integer(1))
    );
    assert_eq!(
        c.call(cmd(&["DEL", "s"]), true, far),
        Res::Ok(Reply::Integer(0))
    );
    assert_eq!(c.call(cmd(&["GET", "s"]), false, far), Res::Ok(Reply::Null));
    let Res::Ok(Reply::Error(e)) = c.call(cmd(&["MGET", "a", "b"]), false, far) else {
        panic!("cross-slot MGET accepted")
    };
    assert!(e.starts_with(b"CROSSSLOT"));
    // A node that does not coordinate a key answers MOVED to the one that does.
    let owner = c.slot_owner(key_slot(b"k7")).unwrap();
    let other = *addrs.iter().find(|a| **a != owner).unwrap();
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &other.port().to_string(), "GET", "k7"])
        .output();
    if let Ok(o) = out {
        let s = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            s.contains(&format!("MOVED {} {owner}", key_slot(b"k7"))),
            "{s}"
        );
    }
    // Replication: each rep:3 key is on all three engines (after the async catch-up).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let counts: Vec<u64> = nodes.iter().map(|n| n.engine().lock().len()).collect();
        if counts.iter().all(|&k| k >= 201) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replicas did not catch up: {counts:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for n in &nodes {
        n.stop();
    }
}
