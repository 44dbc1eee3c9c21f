//! Only members own the cluster (issue 10, case 4). Before: the control port handed the full
//! map to anyone who sent "Watch", and a peer port trusted the node id in HELLO — a forged
//! `Replicate` with version 2^127 made `GET victim` return the forger's value.
//!
//! Against a cluster started by `up` (which generates a cluster secret), as a local user who
//! does not know the secret:
//! * the control port sends a 16-byte challenge and nothing else — no map — then closes;
//! * forged HELLO + Replicate frames to every node's peer port change nothing: `GET victim`
//!   still returns the acknowledged value.

mod common;

use common::{Client, Res};
use ringlet_codec::resp::Reply;
use ringlet_replica::{Entry, PeerBody, PeerMsg};
use ringlet_types::{Epoch, MemgestId, NodeId, Version};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Everything the server sends until it closes (or 8 s pass).
fn read_all(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut b = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    got
}

#[test]
fn strangers_get_no_map_and_cannot_forge_writes() {
    let cl = common::start(3, 0, &[]);
    assert_eq!(cl.secret.len(), 64, "up printed no cluster secret file");
    let mut c = Client::new(cl.addrs());
    let deadline = Instant::now() + Duration::from_secs(30);
    let set = vec![b"SET".to_vec(), b"victim".to_vec(), b"honest".to_vec()];
    assert_eq!(c.call(set, true, deadline), Res::Ok(Reply::ok()));

    // Control port: a Watch request (4-byte length + JSON) gets no map.
    let mut s = TcpStream::connect(&cl.control).unwrap();
    let body = br#""Watch""#;
    let mut f = (body.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(body);
    s.write_all(&f).unwrap();
    let got = read_all(&mut s);
    assert!(
        got.len() <= 16 && !String::from_utf8_lossy(&got).contains("epoch"),
        "the control port answered a stranger with {} bytes",
        got.len()
    );

    // Peer ports: HELLO as the coordinator of `victim` (its real id and incarnation, the
    // current epoch), then a Replicate of `victim` at the highest version, to every replica.
    let map = cl.map();
    let coord = map.coordinator(ringlet_types::key_slot(b"victim")).unwrap();
    let incarnation = map.nodes[&coord].incarnation;
    let forged = PeerMsg {
        epoch: map.epoch,
        incarnation,
        body: PeerBody::Replicate {
            key: b"victim".to_vec(),
            entry: Entry {
                kind: ringlet_types::ValueKind::String,
                version: Version(1 << 127),
                memgest: map.default_memgest,
                value: Some(b"forged".to_vec()),
                expiry_ms: None,
            },
        },
    };
    let _ = (Epoch(0), MemgestId::NONE, NodeId(0));
    for (id, n) in &map.nodes {
        if *id == coord {
            continue;
        }
        let peer: SocketAddr = {
            let (client, port) = n.addr.split_once('@').unwrap();
            let ip = client.rsplit_once(':').unwrap().0;
            format!("{ip}:{port}").parse().unwrap()
        };
        let Ok(mut s) = TcpStream::connect(peer) else {
            continue;
        };
        let mut out = ringlet_cluster::wire::encode_hello(&ringlet_cluster::wire::Hello {
            from: coord,
            incarnation,
        });
        for _ in 0..3 {
            out.extend_from_slice(&ringlet_cluster::wire::encode_peer(&forged));
        }
        let _ = s.write_all(&out);
        let _ = read_all(&mut s);
    }
    // A replica that took the forgery holds it at once (the frames were read before the
    // link closed); its quorum-read leg shows it: `MEMGEST KEY` at the coordinator reads the
    // coordinator, so ask the coordinator to read after repair had its chance too.
    std::thread::sleep(Duration::from_millis(1500)); // > repair interval (250 ms)
    let get = vec![b"GET".to_vec(), b"victim".to_vec()];
    assert_eq!(
        c.call(get, false, Instant::now() + Duration::from_secs(30)),
        Res::Ok(Reply::Bulk(b"honest".to_vec())),
        "a forged peer frame changed an acknowledged value"
    );
}
