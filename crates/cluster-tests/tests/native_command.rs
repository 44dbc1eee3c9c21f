//! The native COMMAND opcode (12) against a real multi-process rep:3 cluster (3 nodes and a
//! spare), through the smart client (`BlockingClusterClient`):
//!
//! 1. TTLs, hashes and links on keys whose slots are coordinated by every node, each routed
//!    by the command table's key; RESP (a MOVED-following RESP client) sees what the native
//!    commands wrote, and the other way round;
//! 2. keys of one command in several slots are refused client-side with CROSSSLOT; the same
//!    keys under one hash tag run; keyless commands run on any node; SUBSCRIBE is refused;
//! 3. after the coordinator of some keys is drained (its slots move to the spare), the
//!    client, still holding the old map, follows MOVED and reads the records, TTLs and links
//!    at the new coordinator.

mod common;

use common::{Client, Res};
use ringlet_client::{BlockingClusterClient, ClusterConfig, Reply, Status, Ttl};
use ringlet_codec::native::{self, ResponseBody};
use ringlet_types::{key_slot, NodeId};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Owned copies of byte strings (the client returns `bytes::Bytes`).
fn vs<T: AsRef<[u8]>>(v: Vec<T>) -> Vec<Vec<u8>> {
    v.iter().map(|x| x.as_ref().to_vec()).collect()
}

fn opt<T: AsRef<[u8]>>(v: Option<T>) -> Option<Vec<u8>> {
    v.map(|x| x.as_ref().to_vec())
}

fn resp(c: &mut Client, cmd: &[&str]) -> Reply {
    let v = cmd.iter().map(|p| p.as_bytes().to_vec()).collect();
    match c.call(v, true, Instant::now() + Duration::from_secs(30)) {
        Res::Ok(r) => r,
        Res::Io => panic!("{cmd:?}: transport failure"),
    }
}

/// One COMMAND frame to one node (no routing); the whole response frame.
fn raw_command(addr: std::net::SocketAddr, args: &[&[u8]]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    native::encode_command(&mut out, 1, args);
    s.write_all(&out).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(n) = native::frame_len(&buf).unwrap() {
            if buf.len() >= n {
                buf.truncate(n);
                return buf;
            }
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "node closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn ttls_hashes_and_links_through_the_smart_client() {
    let cl = common::start(3, 1, &[]);
    let seeds: Vec<String> = cl.addrs().iter().map(ToString::to_string).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let c = BlockingClusterClient::connect(&seeds, ClusterConfig::default()).unwrap();
    let mut r = Client::new(cl.addrs());

    // Keys over many slots, grouped by the node that coordinates them.
    let map = cl.map();
    let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
    let mut by_node: BTreeMap<NodeId, Vec<&str>> = BTreeMap::new();
    for k in &keys {
        let n = map
            .coordinator(key_slot(k.as_bytes()))
            .expect("coordinator");
        by_node.entry(n).or_default().push(k);
    }
    assert_eq!(by_node.len(), 3, "the keys span every node: {by_node:?}");

    // 1. Hashes, TTLs and links on every key; links point at keys on other nodes.
    for (i, k) in keys.iter().enumerate() {
        let kb = k.as_bytes();
        let name = format!("name{i}");
        assert_eq!(
            c.hset(kb, &[("name", name.as_str()), ("n", "1")]).unwrap(),
            2,
            "{k}"
        );
        assert_eq!(c.hincrby(kb, b"n", i as i64).unwrap(), 1 + i as i64);
        assert_eq!(opt(c.hget(kb, b"name").unwrap()), Some(b(&name)));
        let next = &keys[(i + 1) % keys.len()];
        let prev = &keys[(i + keys.len() - 1) % keys.len()];
        assert!(c.link_set(kb, b"next", next.as_bytes()).unwrap());
        assert_eq!(
            c.link_add(kb, b"near", &[next.as_str(), prev.as_str()])
                .unwrap(),
            2
        );
        assert!(c.expire(kb, 1000).unwrap());
    }
    for (i, k) in keys.iter().enumerate() {
        let kb = k.as_bytes();
        let next = &keys[(i + 1) % keys.len()];
        let prev = &keys[(i + keys.len() - 1) % keys.len()];
        assert_eq!(vs(c.link_get(kb, b"next").unwrap()), vec![b(next)]);
        assert_eq!(vs(c.link_get(kb, b"near").unwrap()), vec![b(next), b(prev)]);
        let mut all: Vec<(Vec<u8>, Vec<u8>)> = c
            .hgetall(kb)
            .unwrap()
            .into_iter()
            .map(|(f, v)| (f.to_vec(), v.to_vec()))
            .collect();
        all.sort();
        let name = format!("name{i}");
        let n = (1 + i).to_string();
        assert_eq!(
            all,
            vec![
                (b("n"), b(&n)),
                (b("name"), b(&name)),
                (b("near"), b(&format!("{next} {prev}"))),
                (b("next"), b(next)),
            ],
            "{k}"
        );
        match c.ttl(kb).unwrap() {
            Ttl::Remaining(d) => assert!(d > Duration::from_secs(900), "{k}: {d:?}"),
            other => panic!("{k}: {other:?}"),
        }
        // RESP sees the same record, TTL and links.
        assert_eq!(
            resp(&mut r, &["HGET", k, "name"]),
            Reply::Bulk(name.into_bytes())
        );
        assert!(matches!(resp(&mut r, &["TTL", k]), Reply::Integer(t) if t > 900));
    }
    // PERSIST / PTTL, and a TTL set over RESP read natively.
    let k0 = keys[0].as_bytes();
    assert!(c.persist(k0).unwrap());
    assert_eq!(c.pttl(k0).unwrap(), Ttl::NoExpiry);
    assert_eq!(
        resp(&mut r, &["EXPIRE", &keys[0], "500"]),
        Reply::Integer(1)
    );
    assert!(matches!(c.ttl(k0).unwrap(), Ttl::Remaining(d) if d > Duration::from_secs(400)));
    assert!(c.pexpire(k0, Duration::from_secs(2000)).unwrap());
    // SET with EX through the command layer: the TTL travels with the value.
    assert_eq!(
        c.command(&["SET", "with-ex", "v", "EX", "300"]).unwrap(),
        Reply::Simple(b"OK".to_vec())
    );
    assert!(
        matches!(c.ttl(b"with-ex").unwrap(), Ttl::Remaining(d) if d > Duration::from_secs(200))
    );
    assert!(matches!(resp(&mut r, &["TTL", "with-ex"]), Reply::Integer(t) if t > 200));
    // HDEL, LINK DEL; a hash command on a string key is WRONGTYPE.
    assert_eq!(c.hdel(k0, &["n", "nope"]).unwrap(), 1);
    assert!(c.link_del(k0, b"near").unwrap());
    assert_eq!(vs(c.link_get(k0, b"near").unwrap()), Vec::<Vec<u8>>::new());
    assert_eq!(
        resp(&mut r, &["SET", "plain", "v"]),
        Reply::Simple(b"OK".to_vec())
    );
    let e = c.hget(b"plain", b"f").unwrap_err();
    assert!(
        matches!(&e, ringlet_client::Error::Server { status, .. } if *status == Status::WRONG_TYPE),
        "{e}"
    );

    // 2. CROSSSLOT client-side; one hash tag is fine; keyless commands; refusals.
    let (a, z) = (&keys[0], &keys[1]);
    assert_ne!(key_slot(a.as_bytes()), key_slot(z.as_bytes()));
    let e = c.command(&["MGET", a.as_str(), z.as_str()]).unwrap_err();
    assert!(e.to_string().contains("CROSSSLOT"), "{e}");
    assert_eq!(
        c.command(&["MSET", "{t}a", "1", "{t}b", "2"]).unwrap(),
        Reply::Simple(b"OK".to_vec())
    );
    assert_eq!(
        c.command(&["MGET", "{t}a", "{t}b"]).unwrap(),
        Reply::Array(vec![Reply::Bulk(b"1".to_vec()), Reply::Bulk(b"2".to_vec())])
    );
    assert_eq!(
        c.command(&["PING"]).unwrap(),
        Reply::Simple(b"PONG".to_vec())
    );
    assert!(matches!(c.command(&["DBSIZE"]).unwrap(), Reply::Integer(_)));
    let e = c.command(&["SUBSCRIBE", "ch"]).unwrap_err();
    assert!(
        matches!(&e, ringlet_client::Error::Server { status, .. } if *status == Status::UNSUPPORTED),
        "{e}"
    );

    // Frame by frame: a keyed COMMAND sent to a node that does not coordinate the key is
    // answered MOVED "<slot> <addr>" before it runs; a keyless one runs there.
    let (other, k) = {
        let (n, ks) = by_node.iter().next().unwrap();
        let other = map
            .nodes
            .iter()
            .find(|(id, _)| *id != n && by_node.contains_key(id))
            .map(|(id, _)| *id)
            .unwrap();
        (other, ks[0])
    };
    let other_addr = cl.addrs()[other.0 as usize - 1];
    let reply = raw_command(other_addr, &[b"HGET", k.as_bytes(), b"name"]);
    let (f, _) = native::decode_response_frame(&reply).unwrap().unwrap();
    assert_eq!(f.status, Status::MOVED, "{f:?}");
    let ResponseBody::Message(m) = f.body else {
        panic!("{f:?}")
    };
    let m = String::from_utf8_lossy(m);
    assert!(
        m.starts_with(&format!("{} ", key_slot(k.as_bytes()))),
        "{m}"
    );
    let reply = raw_command(other_addr, &[b"DBSIZE"]);
    let (f, _) = native::decode_response_frame(&reply).unwrap().unwrap();
    assert_eq!(f.status, Status::OK, "{f:?}");

    // 3. Drain the coordinator of a third of the keys: its slots move (to the spare); the
    //    client's map is now stale for them and it must follow MOVED.
    let victim = *by_node.keys().next().unwrap();
    let moved_keys = by_node[&victim].clone();
    let before = c.async_client().stats();
    cl.drain(victim.0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "slots of node {victim:?} did not move"
        );
        let m = cl.map();
        if moved_keys
            .iter()
            .all(|k| m.coordinator(key_slot(k.as_bytes())) != Some(victim))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for k in &moved_keys {
        let i: usize = k.trim_start_matches("user:").parse().unwrap();
        let next = &keys[(i + 1) % keys.len()];
        assert_eq!(
            opt(c.hget(k.as_bytes(), b"name").unwrap()),
            Some(b(&format!("name{i}"))),
            "{k}"
        );
        assert_eq!(
            vs(c.link_get(k.as_bytes(), b"next").unwrap()),
            vec![b(next)],
            "{k}"
        );
        assert!(matches!(
            c.ttl(k.as_bytes()).unwrap(),
            Ttl::Remaining(_) | Ttl::NoExpiry
        ));
        // A write lands on the new coordinator too.
        assert_eq!(
            c.hset(k.as_bytes(), &[("after", "drain")]).unwrap(),
            1,
            "{k}"
        );
        assert_eq!(
            resp(&mut r, &["HGET", k, "after"]),
            Reply::Bulk(b"drain".to_vec())
        );
    }
    let after = c.async_client().stats();
    eprintln!(
        "after the drain: {} MOVED, {} map refreshes",
        after.moved - before.moved,
        after.map_refreshes - before.map_refreshes
    );
    assert!(
        after.map_refreshes > before.map_refreshes,
        "the client learned the new map"
    );
}

/// DUMP and RESTORE (docs/design/dump-restore.md) through the smart client's COMMAND, on
/// keys coordinated by every node: a string and a record dumped and restored under new keys
/// read back equal (a record as a record: HGETALL and HLEN work on it), with the TTL RESTORE
/// gave; RESTORE over an existing key is BUSYKEY unless REPLACE; a record with links is not
/// dumped; RESP reads what the native RESTORE wrote.
#[test]
fn dump_and_restore_through_the_smart_client() {
    let cl = common::start(3, 0, &[]);
    let seeds: Vec<String> = cl.addrs().iter().map(ToString::to_string).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let c = BlockingClusterClient::connect(&seeds, ClusterConfig::default()).unwrap();
    let mut r = Client::new(cl.addrs());
    let map = cl.map();
    let keys: Vec<String> = (0..24).map(|i| format!("d:{i}")).collect();
    let nodes: std::collections::BTreeSet<NodeId> = keys
        .iter()
        .map(|k| {
            map.coordinator(key_slot(k.as_bytes()))
                .expect("coordinator")
        })
        .collect();
    assert_eq!(nodes.len(), 3, "the keys span every node");

    let bulk = |reply: Reply| match reply {
        Reply::Bulk(b) => b,
        other => panic!("not a bulk reply: {other:?}"),
    };
    for (i, k) in keys.iter().enumerate() {
        let (s, h) = (format!("{k}:s"), format!("{{{k}}}:h"));
        let value = format!("value {i} ").repeat(1 + i * 40);
        assert_eq!(
            c.command(&["SET", s.as_str(), value.as_str()]).unwrap(),
            Reply::Simple(b"OK".to_vec())
        );
        c.hset(h.as_bytes(), &[("a", "1"), ("b", value.as_str())])
            .unwrap();
        for (src, ttl) in [(&s, "0"), (&h, "100000")] {
            let payload = bulk(c.command(&["DUMP", src.as_str()]).unwrap());
            let dst = format!("{src}:copy");
            let restore = |extra: &[&[u8]]| {
                let mut args: Vec<&[u8]> =
                    vec![b"RESTORE", dst.as_bytes(), ttl.as_bytes(), &payload];
                args.extend_from_slice(extra);
                c.command(&args).unwrap()
            };
            assert_eq!(restore(&[]), Reply::Simple(b"OK".to_vec()), "{dst}");
            match restore(&[]) {
                Reply::Error(e) => assert!(e.starts_with(b"BUSYKEY"), "{dst}"),
                other => panic!("{dst}: {other:?}"),
            }
            assert_eq!(restore(&[b"REPLACE"]), Reply::Simple(b"OK".to_vec()));
        }
        assert_eq!(
            resp(&mut r, &["GET", &format!("{s}:copy")]),
            Reply::Bulk(value.clone().into_bytes())
        );
        let hc = format!("{h}:copy");
        let mut all: Vec<(Vec<u8>, Vec<u8>)> = c
            .hgetall(hc.as_bytes())
            .unwrap()
            .into_iter()
            .map(|(f, v)| (f.to_vec(), v.to_vec()))
            .collect();
        all.sort();
        assert_eq!(all, vec![(b("a"), b("1")), (b("b"), b(&value))]);
        assert_eq!(c.hincrby(hc.as_bytes(), b"a", 2).unwrap(), 3);
        match c.ttl(hc.as_bytes()).unwrap() {
            Ttl::Remaining(d) => assert!(d > Duration::from_secs(90), "{hc}: {d:?}"),
            other => panic!("{hc}: {other:?}"),
        }
    }
    // A record with links is refused, not dumped without them.
    let (k0, k1) = (keys[0].as_bytes(), keys[1].as_bytes());
    c.hset(k0, &[("name", "x")]).unwrap();
    assert!(c.link_set(k0, b"next", k1).unwrap());
    match c.command(&["DUMP", keys[0].as_str()]).unwrap() {
        Reply::Error(e) => assert!(
            String::from_utf8_lossy(&e).contains("record with links"),
            "{e:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        c.command(&["DUMP", "no-such-key"]).unwrap(),
        Reply::Null,
        "a missing key dumps as nil"
    );
}
