//! The native-protocol front of cluster nodes (crates/cluster/src/native.rs), frame by frame
//! with the codec: CLUSTER_MAP, MOVED for keys another node coordinates, per-item MOVED in
//! MGET, SET with a TTL, INCRBY, SET NX/XX, READ_REPLICA legs and their STALE_EPOCH, UNSUPPORTED for what cluster
//! mode does not serve (CAS), and RESP still working on the same port. (The smart client on top is tested in
//! crates/client/tests/cluster.rs.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ringlet_codec::native::{self, ReplicaValue, ResponseBody, SetCond, SetRequest, Status};
use ringlet_control::ClusterMap;
use ringlet_types::{key_slot, Epoch, Version};

/// One request frame, one owned response: (status, epoch, version, payload bytes).
fn call(addr: SocketAddr, req: &[u8]) -> (Status, Epoch, Version, Vec<u8>, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((f, _)) = native::decode_response_frame(&buf).unwrap() {
            let (payload, items) = match f.body {
                ResponseBody::Value(v) | ResponseBody::Message(v) => (v.to_vec(), Vec::new()),
                ResponseBody::Int(v) => (Vec::new(), v.to_be_bytes().to_vec()),
                ResponseBody::Values(items) => (
                    Vec::new(),
                    items.iter().map(|i| i.status.0).collect::<Vec<u8>>(),
                ),
                _ => (Vec::new(), Vec::new()),
            };
            return (f.status, f.epoch, f.version, payload, items);
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn native_front_serves_cluster_opcodes() {
    // `_rt` keeps the runtime (and with it the nodes and the control plane) alive.
    let common::InProcess {
        rt: _rt,
        svc: _svc,
        nodes,
        addrs,
    } = common::in_process(3, 2, 1, 1500);

    // CLUSTER_MAP: the node's map, as JSON, with its epoch.
    let mut req = Vec::new();
    native::encode_cluster_map_request(&mut req, 1);
    let (st, epoch, _, json, _) = call(addrs[0], &req);
    assert_eq!(st, Status::OK);
    let map = ClusterMap::from_json(std::str::from_utf8(&json).unwrap()).unwrap();
    assert_eq!(map.epoch, epoch);
    assert!(map.placement.is_some());

    let key = b"native-key";
    let slot = key_slot(key);
    let coord = map.coordinator(slot).unwrap();
    let coord_addr: SocketAddr = map.nodes[&coord]
        .addr
        .split('@')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let other = *addrs.iter().find(|a| **a != coord_addr).unwrap();

    // SET at a non-coordinator: MOVED "<slot> <coordinator>"; at the coordinator: OK.
    let set = SetRequest {
        key,
        value: b"v1",
        ..SetRequest::default()
    };
    let mut req = Vec::new();
    native::encode_set(&mut req, 2, &set);
    let (st, _, _, msg, _) = call(other, &req);
    assert_eq!(st, Status::MOVED);
    assert_eq!(
        String::from_utf8(msg).unwrap(),
        format!("{slot} {coord_addr}")
    );
    let (st, _, written, _, _) = call(coord_addr, &req);
    assert_eq!(st, Status::OK);
    assert!(written > Version::ZERO);

    // GET at the coordinator returns it with the write's version.
    let mut req = Vec::new();
    native::encode_get(&mut req, 3, key);
    let (st, _, v, val, _) = call(coord_addr, &req);
    assert_eq!((st, v, val.as_slice()), (Status::OK, written, &b"v1"[..]));

    // The first write of rep:3 marked it written in the map (a new epoch): read the map
    // again for the epoch the legs must carry.
    let mut req = Vec::new();
    native::encode_cluster_map_request(&mut req, 1);
    let (_, _, _, json, _) = call(coord_addr, &req);
    let map = ClusterMap::from_json(std::str::from_utf8(&json).unwrap()).unwrap();
    let rep3 = map.memgest_by_name("rep:3").unwrap();
    assert!(map.memgests[&rep3].written);

    // READ_REPLICA at every member (the third copy lands asynchronously: wait for it).
    let mut req = Vec::new();
    native::encode_read_replica(&mut req, 4, map.epoch, key);
    for a in &addrs {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (st, e, v, blob, _) = call(*a, &req);
            // A member may not have applied the marked map yet: it answers with its older
            // epoch and TRY_AGAIN.
            assert!(
                e == map.epoch || (e < map.epoch && st == Status::TRY_AGAIN),
                "{e:?} {st}"
            );
            // TRY_AGAIN: not answering legs yet (e.g. no lease acknowledged since startup).
            assert!(st == Status::OK || st == Status::TRY_AGAIN, "{st}");
            if st == Status::OK && v == written {
                let rv = ReplicaValue::parse(&blob).unwrap();
                assert_eq!(rv.value, Some(&b"v1"[..]));
                assert_eq!(Some(rv.memgest), map.memgest_by_name("rep:3"));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replica {a} never answered the write"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // ... from a client with another epoch: STALE_EPOCH carrying the node's epoch.
    let mut req = Vec::new();
    native::encode_read_replica(&mut req, 5, Epoch(map.epoch.0 + 100), key);
    let (st, e, _, _, _) = call(addrs[0], &req);
    assert_eq!((st, e), (Status::STALE_EPOCH, map.epoch));

    // MGET at one node over keys of several coordinators: hits here, MOVED items elsewhere.
    let keys: Vec<Vec<u8>> = (0..30).map(|i| format!("m{i}").into_bytes()).collect();
    let mut req = Vec::new();
    native::encode_mget(&mut req, 6, &keys);
    let (st, _, _, _, items) = call(addrs[0], &req);
    assert_eq!(st, Status::OK);
    let me = nodes[0].id();
    for (k, s) in keys.iter().zip(items) {
        let here = map.coordinator(key_slot(k)) == Some(me);
        assert_eq!(
            Status(s),
            if here {
                Status::NOT_FOUND
            } else {
                Status::MOVED
            },
            "{k:?}"
        );
    }

    // A SET with a TTL is served (a blind write; the coordinator makes the expiry absolute):
    // readable at once, gone after it; a zero TTL is a bad request.
    let ttl_key: &[u8] = b"native-ttl{native-key}";
    let mut req = Vec::new();
    native::encode_set(
        &mut req,
        9,
        &SetRequest {
            key: ttl_key,
            value: b"short",
            // Long enough to survive a slow machine between the SET and the GET below.
            ttl_ms: Some(3000),
            ..SetRequest::default()
        },
    );
    assert_eq!(call(coord_addr, &req).0, Status::OK);
    let mut get = Vec::new();
    native::encode_get(&mut get, 10, ttl_key);
    let (st, _, _, val, _) = call(coord_addr, &get);
    assert_eq!((st, val.as_slice()), (Status::OK, &b"short"[..]));
    let gone_by = std::time::Instant::now() + Duration::from_secs(15);
    while call(coord_addr, &get).0 != Status::NOT_FOUND {
        assert!(
            std::time::Instant::now() < gone_by,
            "the TTL never expired the key"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut req = Vec::new();
    native::encode_set(
        &mut req,
        11,
        &SetRequest {
            key: ttl_key,
            value: b"x",
            ttl_ms: Some(0),
            ..SetRequest::default()
        },
    );
    assert_eq!(call(coord_addr, &req).0, Status::BAD_REQUEST);

    // NX / XX are served (under the RESP front's per-key lock): NX on the existing key is
    // NOT_STORED and writes nothing; XX on it stores.
    let mut req = Vec::new();
    native::encode_set(
        &mut req,
        7,
        &SetRequest {
            cond: SetCond::IfAbsent,
            value: b"not-this",
            ..set
        },
    );
    assert_eq!(call(coord_addr, &req).0, Status::NOT_STORED);
    let mut req = Vec::new();
    native::encode_set(
        &mut req,
        14,
        &SetRequest {
            cond: SetCond::IfPresent,
            value: b"v1",
            ..set
        },
    );
    assert_eq!(call(coord_addr, &req).0, Status::OK);
    // CAS by version, decided by the coordinator's core: a wrong version is CAS_MISMATCH
    // with the current one, which then applies.
    let mut req = Vec::new();
    native::encode_set(
        &mut req,
        15,
        &SetRequest {
            cas: Some(Version(1)),
            value: b"not-this",
            ..set
        },
    );
    let (st, _, current, _, _) = call(coord_addr, &req);
    assert_eq!(st, Status::CAS_MISMATCH);
    assert_ne!(current, Version::ZERO);
    let mut req = Vec::new();
    native::encode_set(
        &mut req,
        16,
        &SetRequest {
            cas: Some(current),
            value: b"cas-ok",
            ..set
        },
    );
    let (st, _, written, _, _) = call(coord_addr, &req);
    assert_eq!(st, Status::OK);
    assert!(written > current);
    // INCRBY runs the RESP front's INCRBY: an integer reply, the key's non-integer value
    // refused with NOT_INTEGER as on the single node, MOVED at another node.
    let counter: &[u8] = b"native-counter{native-key}";
    let mut req = Vec::new();
    native::encode_incr_by(&mut req, 8, counter, 5);
    let (st, _, _, _, body) = call(coord_addr, &req);
    assert_eq!(st, Status::OK);
    assert_eq!(body, 5i64.to_be_bytes());
    let mut req = Vec::new();
    native::encode_incr_by(&mut req, 12, counter, -2);
    assert_eq!(call(coord_addr, &req).4, 3i64.to_be_bytes());
    let mut req = Vec::new();
    native::encode_incr_by(&mut req, 13, key, 1);
    assert_eq!(call(coord_addr, &req).0, Status::NOT_INTEGER);
    assert_eq!(call(other, &req).0, Status::MOVED);

    // RESP on the same port still works.
    let mut s = TcpStream::connect(coord_addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"*2\r\n$3\r\nGET\r\n$10\r\nnative-key\r\n")
        .unwrap();
    let mut got = [0u8; 64];
    let n = s.read(&mut got).unwrap();
    assert_eq!(&got[..n], b"$6\r\ncas-ok\r\n", "the CAS above wrote it");
    for n in &nodes {
        n.stop();
    }
}
