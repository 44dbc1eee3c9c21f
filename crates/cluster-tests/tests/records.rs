//! Records (KELI) in cluster mode, against a rep:3 cluster of real processes with a spare:
//!
//! 1. the hash commands (HSCAN and HRANDFIELD where Redis is deterministic) and WRONGTYPE both ways, sent to a real Redis 7 and to the cluster,
//!    replies compared (keys over many slots; the front routes by MOVED);
//! 2. LINK and CHASE across nodes: a small graph whose keys live on every node, walked
//!    breadth-first in one call with DEPTH, FIELDS and LIMIT, over RESP and over native
//!    frames (`ClusterClient::chase`, the same entries and stop reasons);
//! 3. SIGKILL of the coordinator of record keys: after the spare takes over, every record
//!    reads back whole, still a hash, and string commands on it still say WRONGTYPE (the
//!    kind travels with the replicated entry, not only in the coordinator's memory).

mod common;

use common::redis::Redis;
use common::{Client, Res};
use ringlet_client::{BlockingClusterClient, ChaseOptions, ChaseResult, ClusterConfig};
use ringlet_codec::resp::Reply;
use ringlet_types::key_slot;
use std::time::{Duration, Instant};

fn call(c: &mut Client, cmd: &[&str]) -> Reply {
    let v = cmd.iter().map(|p| p.as_bytes().to_vec()).collect();
    match c.call(v, true, Instant::now() + Duration::from_secs(30)) {
        Res::Ok(r) => r,
        Res::Io => panic!("{cmd:?}: transport failure"),
    }
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

const SCRIPT: &str = "
HSET h f1 v1 f2 v2
HSET h f1 v1b f3 v3
HGET h f1
HGET h nofield
HGET nokey f
HMGET h f1 nofield f3
HGETALL h
HLEN h
HEXISTS h f2
HKEYS h
HVALS h
HSTRLEN h f3
HSETNX h f1 other
HSETNX h f4 v4
HMSET h a 1 b 2
HSET h f
HDEL h f1 nofield
HGETALL h
HINCRBY h n 5
HINCRBY h f3 1
HINCRBYFLOAT h fl 10.5
HINCRBYFLOAT h fl 0.1
HINCRBYFLOAT h fl 5.0e3
TYPE h
EXISTS h
OBJECT ENCODING h
GET h
STRLEN h
APPEND h x
INCR h
SET h v GET
SET s str
HGET s f
HSET s f v
TYPE s
HSCAN h 0
HSCAN h 0 MATCH f* COUNT 1
HSCAN h abc
HSCAN h 0 COUNT 0
HSCAN nokey 0
HSCAN s 0
HRANDFIELD h 100 WITHVALUES
HRANDFIELD h 0
HRANDFIELD h -9223372036854775808
HRANDFIELD nokey
HRANDFIELD nokey 3
HRANDFIELD s 2
HDEL h f2 f3 f4 a b n fl
EXISTS h
";

#[test]
fn records_match_redis_link_chase_and_survive_failover() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let mut cl = common::start(3, 1, &[]);
    let mut c = Client::new(cl.addrs());

    // 1. Hash commands: the same replies as Redis 7 (RESP2).
    for line in SCRIPT.lines().filter(|l| !l.trim().is_empty()) {
        let cmd: Vec<&str> = line.split(' ').collect();
        let parts: Vec<&[u8]> = cmd.iter().map(|s| s.as_bytes()).collect();
        let want = redis.call(&parts);
        let got = call(&mut c, &cmd);
        assert_eq!(got, want, "{line}");
    }

    // 2. A graph over many slots: u:0 -> (friend) u:1, u:1 -> (friends) u:2..u:6, each of
    //    those -> (friend) u:0 (a cycle back to the root).
    for i in 0..7 {
        let name = format!("n{i}");
        let k = format!("u:{i}");
        assert_eq!(
            call(&mut c, &["HSET", &k, "name", &name]),
            Reply::Integer(1)
        );
    }
    call(&mut c, &["LINK", "SET", "u:0", "friend", "u:1"]);
    assert_eq!(
        call(
            &mut c,
            &["LINK", "ADD", "u:1", "friends", "u:2", "u:3", "u:4", "u:5", "u:6"]
        ),
        Reply::Integer(5)
    );
    for i in 2..7 {
        call(&mut c, &["LINK", "SET", &format!("u:{i}"), "friend", "u:0"]);
    }
    let coordinators: std::collections::BTreeSet<_> = (0..7)
        .filter_map(|i| c.slot_owner(key_slot(format!("u:{i}").as_bytes())))
        .collect();
    assert!(
        coordinators.len() >= 2,
        "the graph should span nodes: {coordinators:?}"
    );
    assert_eq!(
        call(&mut c, &["LINK", "GET", "u:1", "friends"]),
        Reply::Array((2..7).map(|i| bulk(&format!("u:{i}"))).collect())
    );
    assert_eq!(
        call(&mut c, &["HGET", "u:1", "friends"]),
        bulk("u:2 u:3 u:4 u:5 u:6")
    );
    // RECORD SET's DEL on the cluster front: a field removed in the write that sets
    // others, a missing one ignored, a record emptied deleted, DELs alone on a missing
    // key writing nothing.
    let rs = |c: &mut Client, args: &[&str]| {
        let mut cmd = vec!["RECORD", "SET"];
        cmd.extend_from_slice(args);
        call(c, &cmd)
    };
    assert_eq!(
        rs(&mut c, &["r:x", "ATTR", "a", "1", "LINK", "l", "u:0"]),
        Reply::Integer(2)
    );
    assert_eq!(
        rs(
            &mut c,
            &["r:x", "DEL", "l", "DEL", "nope", "ATTR", "b", "2"]
        ),
        Reply::Integer(1)
    );
    assert_eq!(
        call(&mut c, &["HGETALL", "r:x"]),
        Reply::Array(["a", "1", "b", "2"].map(bulk).to_vec())
    );
    assert_eq!(
        rs(&mut c, &["r:x", "DEL", "a", "DEL", "b"]),
        Reply::Integer(0)
    );
    assert_eq!(call(&mut c, &["EXISTS", "r:x"]), Reply::Integer(0));
    assert_eq!(rs(&mut c, &["r:y", "DEL", "a"]), Reply::Integer(0));
    assert_eq!(call(&mut c, &["EXISTS", "r:y"]), Reply::Integer(0));
    let walk = call(
        &mut c,
        &[
            "CHASE", "u:0", "friend", "friends", "DEPTH", "3", "FIELDS", "name",
        ],
    );
    let Reply::Array(items) = walk else {
        panic!("{walk:?}")
    };
    let (stop, entries) = items.split_last().unwrap();
    assert_eq!(*stop, bulk("complete"));
    let mut seen = Vec::new();
    for e in entries {
        let Reply::Array(e) = e else { panic!("{e:?}") };
        let (Reply::Bulk(k), Reply::Integer(d), Reply::Array(attrs)) = (&e[0], &e[1], &e[2]) else {
            panic!("{e:?}")
        };
        let k = String::from_utf8_lossy(k).to_string();
        let i: usize = k[2..].parse().unwrap();
        assert_eq!(attrs, &vec![bulk("name"), bulk(&format!("n{i}"))], "{k}");
        seen.push((k, *d));
    }
    // BFS order, each key once (the cycle back to u:0 is not revisited).
    let want: Vec<(String, i64)> = [("u:0", 0), ("u:1", 1)]
        .into_iter()
        .map(|(k, d)| (k.to_string(), d))
        .chain((2..7).map(|i| (format!("u:{i}"), 2)))
        .collect();
    assert_eq!(seen, want);
    let limited = call(
        &mut c,
        &[
            "CHASE", "u:0", "friend", "friends", "DEPTH", "3", "LIMIT", "3",
        ],
    );
    let Reply::Array(items) = limited else {
        panic!()
    };
    assert_eq!(items.len(), 4, "3 entries and the stop status");
    assert_eq!(items[3], bulk("limit"));

    // The same walks over native frames (ClusterClient::chase): the coordinator of u:0
    // forwards the hops, the entries and stop reasons are RESP CHASE's.
    let seeds: Vec<String> = cl.addrs().iter().map(ToString::to_string).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let nc = BlockingClusterClient::connect(&seeds, ClusterConfig::default()).unwrap();
    let links = ["friend", "friends"];
    for (resp, opts) in [
        (
            vec!["DEPTH", "3", "FIELDS", "name"],
            ChaseOptions::default().depth(3).fields(&["name"]),
        ),
        (
            vec!["DEPTH", "3", "LIMIT", "3"],
            ChaseOptions::default().depth(3).limit(3),
        ),
        (vec![], ChaseOptions::default()),
    ] {
        let mut cmd = vec!["CHASE", "u:0", "friend", "friends"];
        cmd.extend(resp);
        assert_eq!(
            native_as_resp(&nc.chase(b"u:0", &links, &opts).unwrap().value),
            call(&mut c, &cmd),
            "{cmd:?}"
        );
    }
    // Rooted at a key another node coordinates than the one asked first: routed by slot.
    for root in ["u:1", "u:4"] {
        assert_eq!(
            native_as_resp(
                &nc.chase(root.as_bytes(), &links, &ChaseOptions::default())
                    .unwrap()
                    .value
            ),
            call(&mut c, &["CHASE", root, "friend", "friends"]),
        );
    }

    // 3. SIGKILL the coordinator of u:1 (a record with a link list): the spare serves it.
    let victim_addr = c.slot_owner(key_slot(b"u:1")).unwrap();
    let victim = u32::from(victim_addr.port() - cl.base) + 1;
    let before: Vec<Reply> = (0..7)
        .map(|i| call(&mut c, &["HGETALL", &format!("u:{i}")]))
        .collect();
    cl.kill9(victim);
    let deadline = Instant::now() + Duration::from_secs(60);
    for (i, want) in before.iter().enumerate() {
        let k = format!("u:{i}");
        loop {
            let v = k.as_bytes().to_vec();
            match c.call(
                vec![b"HGETALL".to_vec(), v],
                false,
                Instant::now() + Duration::from_secs(5),
            ) {
                Res::Ok(r) if r == *want => break,
                _ => {
                    assert!(Instant::now() < deadline, "{k} not served as before");
                    std::thread::sleep(Duration::from_millis(100));
                    c.refresh();
                }
            }
        }
        assert_eq!(call(&mut c, &["TYPE", &k]), Reply::Simple(b"hash".to_vec()));
        match call(&mut c, &["GET", &k]) {
            Reply::Error(e) => assert!(e.starts_with(b"WRONGTYPE"), "{k}"),
            other => panic!("GET {k} after failover: {other:?}"),
        }
    }
    assert_ne!(c.slot_owner(key_slot(b"u:1")), Some(victim_addr));
    let again = call(&mut c, &["CHASE", "u:0", "friend", "friends", "DEPTH", "3"]);
    let Reply::Array(items) = again else { panic!() };
    assert_eq!(
        items.len(),
        8,
        "7 entries and the stop status after failover"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let opts = ChaseOptions::default().depth(3);
        match nc.chase(b"u:0", &links, &opts) {
            Ok(r) if r.value.entries.len() == 7 => break,
            other => assert!(
                Instant::now() < deadline,
                "native CHASE after failover: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A native CHASE result in RESP CHASE's reply shape (to compare the two).
fn native_as_resp(r: &ChaseResult) -> Reply {
    let mut items: Vec<Reply> = r
        .entries
        .iter()
        .map(|e| {
            Reply::Array(vec![
                Reply::Bulk(e.key.to_vec()),
                Reply::Integer(i64::from(e.depth)),
                Reply::Array(
                    e.attrs
                        .iter()
                        .flat_map(|(a, v)| [Reply::Bulk(a.to_vec()), Reply::Bulk(v.to_vec())])
                        .collect(),
                ),
            ])
        })
        .collect();
    items.push(bulk(r.stop.as_str()));
    Reply::Array(items)
}

/// Records in an `ec:3+2` memgest (the default here): written whole to the coordinator's
/// arena with their kind in every parity holder's key metadata, so after two data nodes are
/// SIGKILLed at once the spares rebuild the index from that metadata and decode the values,
/// and every record reads back whole and still as a hash.
#[test]
fn records_in_ec_memgest_survive_two_failures() {
    let mut cl = common::start(5, 2, &["--default-memgest", "ec:3+2"]);
    let mut c = Client::new(cl.addrs());
    let keys: Vec<String> = (0..60).map(|i| format!("rec:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let big = "x".repeat(1 + (i * 37) % 500);
        assert_eq!(
            call(&mut c, &["HSET", k, "name", &format!("n{i}"), "blob", &big]),
            Reply::Integer(2)
        );
        let next = &keys[(i + 1) % keys.len()];
        assert_eq!(
            call(&mut c, &["LINK", "SET", k, "next", next]),
            Reply::Integer(1)
        );
    }
    let before: Vec<Reply> = keys.iter().map(|k| call(&mut c, &["HGETALL", k])).collect();
    cl.kill9(1);
    cl.kill9(2);
    let deadline = Instant::now() + Duration::from_secs(90);
    for (k, want) in keys.iter().zip(&before) {
        loop {
            match c.call(
                vec![b"HGETALL".to_vec(), k.as_bytes().to_vec()],
                false,
                Instant::now() + Duration::from_secs(5),
            ) {
                Res::Ok(r) if r == *want => break,
                _ => {
                    assert!(Instant::now() < deadline, "{k} not served as before");
                    std::thread::sleep(Duration::from_millis(100));
                    c.refresh();
                }
            }
        }
        assert_eq!(call(&mut c, &["TYPE", k]), Reply::Simple(b"hash".to_vec()));
    }
    let walk = call(
        &mut c,
        &["CHASE", "rec:0", "next", "DEPTH", "5", "FIELDS", "name"],
    );
    let Reply::Array(items) = walk else { panic!() };
    assert_eq!(items.len(), 7, "6 entries and the stop status");
}
