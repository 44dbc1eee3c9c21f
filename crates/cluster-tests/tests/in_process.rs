//! A three-node cluster inside one process (control plane + nodes on ephemeral ports): the
//! fast end-to-end check of the runtime — bootstrap, routing, MOVED, replication, RMW
//! commands — without spawning processes.

mod common;

use common::{Client, Res};
use ringlet_codec::resp::Reply;
use ringlet_types::key_slot;
use std::time::{Duration, Instant};

#[test]
fn three_nodes_in_one_process() {
    // `_rt` keeps the runtime (and with it the nodes and the control plane) alive.
    let common::InProcess {
        rt: _rt,
        svc: _svc,
        nodes,
        addrs,
    } = common::in_process(3, 2, 1, 1500);
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
    // Asked directly (a raw RESP connection, no external tool that could be missing).
    let moved = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(other).unwrap();
        let mut req = Vec::new();
        ringlet_codec::resp::encode_request(&mut req, &[b"GET", b"k7"]);
        s.write_all(&req).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 512];
        loop {
            if let Some((r, _)) = ringlet_codec::resp::decode_reply(&buf).unwrap() {
                break r;
            }
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "node closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    assert_eq!(
        moved,
        Reply::Error(format!("MOVED {} {owner}", key_slot(b"k7")).into_bytes())
    );
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

/// Every command of the shared table (ringlet-command) that a cluster node serves has a
/// handler in this front: each is sent once, with as many arguments as its arity asks, to
/// one node, and no reply may be "no handler" or "unknown command". A command added to the
/// table (or to the single node) and forgotten here fails this test.
#[test]
fn every_table_command_has_a_cluster_handler() {
    let common::InProcess {
        rt: _rt,
        svc: _svc,
        nodes: _nodes,
        addrs,
    } = common::in_process(3, 2, 1, 1500);
    // Wait for the cluster to serve (a SET through the routing client).
    let mut c = Client::new(addrs.clone());
    let far = Instant::now() + Duration::from_secs(20);
    let set = vec![b"SET".to_vec(), b"{t}k".to_vec(), b"1".to_vec()];
    assert_eq!(c.call(set, true, far), Res::Ok(Reply::ok()));
    let t = ringlet_command::table();
    let mut sent = 0;
    for spec in &t.specs {
        if !spec.subcommands.is_empty() || !spec.served_in(ringlet_command::Mode::Cluster) {
            continue;
        }
        // QUIT closes the connection and MULTI would queue the rest: both are exercised
        // by their own tests.
        if matches!(spec.name, "quit" | "multi" | "exec" | "discard") {
            continue;
        }
        let mut argv: Vec<Vec<u8>> = spec
            .name
            .split('|')
            .map(|p| p.as_bytes().to_vec())
            .collect();
        let want = spec.arity.unsigned_abs() as usize;
        while argv.len() < want {
            let i = argv.len() as i64;
            let is_key = spec.first_key > 0 && i >= spec.first_key;
            argv.push(if is_key {
                b"{t}k".to_vec()
            } else {
                b"1".to_vec()
            });
        }
        let mut conn = common::Conn::open(addrs[0]).expect("connect");
        let reply = conn
            .pipeline(std::slice::from_ref(&argv))
            .and_then(|mut v| v.pop())
            .unwrap_or_else(|| panic!("{}: no reply", spec.name));
        if let Reply::Error(e) = &reply {
            let e = String::from_utf8_lossy(e);
            assert!(
                !e.contains("no handler")
                    && !e.contains("unknown command")
                    && !e.contains("unknown subcommand"),
                "{}: {e}",
                spec.name
            );
        }
        sent += 1;
    }
    assert!(sent > 80, "only {sent} commands tried");
}
