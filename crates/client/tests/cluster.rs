//! `ClusterClient` against a real three-node `rep:3` cluster started inside this process
//! (control plane + nodes on ephemeral ports, the same code `ringlet-cluster up` runs):
//! routing by slot, cross-slot MGET/MSET, memgests `none` and `rep:3`, quorum reads that
//! return the latest acknowledged write, and address overrides.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ringlet_client::{ClusterClient, ClusterConfig, DelOutcome, ReadMode, SetOptions, SetOutcome};
use ringlet_cluster::launch::{run_control, run_node, ControlOpts, NodeOpts};
use ringlet_cluster::node::ClusterNode;
use ringlet_types::{key_slot, MemgestKind};

struct InProcess {
    nodes: Vec<ClusterNode>,
    addrs: Vec<SocketAddr>,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        for n in &self.nodes {
            n.stop();
        }
    }
}

async fn start() -> InProcess {
    start_with(3, 3).await.0
}

/// `total` nodes of which `active` get slots (the rest are spares); also the control address.
async fn start_with(total: u32, active: usize) -> (InProcess, SocketAddr) {
    let (svc, caddr) = run_control(&ControlOpts {
        bind: "127.0.0.1:0".parse().unwrap(),
        expect_nodes: total as usize,
        active,
        default_memgest: Some(MemgestKind::Rep { r: 3 }),
        s: 2,
        d: 1,
        lease_ms: 1500,
        // Test harness: ec resharding is exercised here.
        ec_moves: true,
    })
    .await
    .unwrap();
    let mut nodes = Vec::new();
    let mut addrs = Vec::new();
    for id in 1..=total {
        let (n, a) = run_node(&NodeOpts {
            id,
            bind: "127.0.0.1:0".parse().unwrap(),
            peer_port: 0,
            control: caddr.to_string(),
            lease_ms: 1500,
            memory_bytes: 64 << 20,
            requirepass: None,
            tls: None,
            admin_port: None,
            admin_token: None,
        })
        .await
        .unwrap();
        nodes.push(n);
        addrs.push(a);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "cluster did not bootstrap");
        let e = svc.map().epoch;
        if svc.map().placement.is_some()
            && nodes.iter().all(|n| n.map().is_some_and(|m| m.epoch == e))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (InProcess { nodes, addrs }, caddr)
}

fn cfg(mode: ReadMode) -> ClusterConfig {
    let mut c = ClusterConfig {
        read_mode: mode,
        ..ClusterConfig::default()
    };
    c.client.timeout = Duration::from_secs(10);
    c.client.seed = Some(7);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_multikey_memgests_and_quorum_reads() {
    let c = start().await;
    // Bootstrap from one seed only: the rest is learned from the map.
    let seed = c.addrs[2].to_string();
    let coord = ClusterClient::connect(&[&seed], cfg(ReadMode::Coordinator))
        .await
        .unwrap();
    let quorum = ClusterClient::connect(&[&seed], cfg(ReadMode::Quorum))
        .await
        .unwrap();
    let map = coord.map();
    assert!(map.placement.is_some());
    assert_eq!(map.nodes.len(), 3);

    // Keys over many slots, so every node coordinates some.
    let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).collect();
    let owners: std::collections::BTreeSet<_> = keys
        .iter()
        .filter_map(|k| map.coordinator(key_slot(k.as_bytes())))
        .collect();
    assert_eq!(owners.len(), 3, "keys spread over all coordinators");

    // Cross-slot MSET: one outcome per pair, all stored.
    let pairs: Vec<(String, String)> = keys.iter().map(|k| (k.clone(), format!("v-{k}"))).collect();
    for r in coord.mset(&pairs).await {
        assert_eq!(r.unwrap().value, SetOutcome::Stored);
    }
    // Cross-slot MGET, both modes, with a missing key in the middle.
    let mut ask: Vec<String> = keys.clone();
    ask.insert(150, "never-written".into());
    for client in [&coord, &quorum] {
        let got = client.mget(&ask).await.unwrap();
        assert_eq!(got.len(), ask.len());
        for (k, v) in ask.iter().zip(&got) {
            if k == "never-written" {
                assert_eq!(v.value, None);
            } else {
                assert_eq!(v.value.as_deref(), Some(format!("v-{k}").as_bytes()), "{k}");
                assert!(v.version.0 > 0);
            }
        }
    }
    // Quorum reads of every key: decided by a majority, none fell back.
    for k in &keys {
        let v = quorum.get(k.as_bytes()).await.unwrap();
        assert_eq!(v.value.as_deref(), Some(format!("v-{k}").as_bytes()));
    }
    let s = quorum.stats();
    assert!(s.quorum_decided >= keys.len() as u64, "{s:?}");
    assert_eq!(s.quorum_fallbacks, 0, "{s:?}");

    // Quorum reads return the latest acknowledged write, read after read.
    for i in 0..100u32 {
        let k = format!("counter:{}", i % 7);
        let w = coord
            .set(
                k.as_bytes(),
                i.to_string().as_bytes(),
                SetOptions::default(),
            )
            .await
            .unwrap();
        let r = quorum.get(k.as_bytes()).await.unwrap();
        assert_eq!(r.value.as_deref(), Some(i.to_string().as_bytes()));
        assert_eq!(r.version, w.version, "the acknowledged write's version");
    }
    // DEL: a tombstone; both modes read it as absent.
    coord.del(b"key:1").await.unwrap();
    assert_eq!(coord.get(b"key:1").await.unwrap().value, None);
    assert_eq!(quorum.get(b"key:1").await.unwrap().value, None);
    // Never-written keys: "not found" needs the coordinator in the agreeing set.
    assert_eq!(quorum.get(b"nothing-here").await.unwrap().value, None);

    // Memgest `none`: only the coordinator holds the key, and a quorum read still finds it
    // (the coordinator decides a single-copy key alone).
    let none = coord.memgest("none").expect("none memgest");
    let rep3 = coord.memgest("rep:3").expect("rep:3 memgest");
    coord.set_in(b"solo", b"only-here", none).await.unwrap();
    coord.set_in(b"triple", b"everywhere", rep3).await.unwrap();
    assert_eq!(
        quorum.get(b"solo").await.unwrap().value.as_deref(),
        Some(&b"only-here"[..])
    );
    assert_eq!(
        quorum.get(b"triple").await.unwrap().value.as_deref(),
        Some(&b"everywhere"[..])
    );
    assert_eq!(
        coord.get(b"solo").await.unwrap().value.as_deref(),
        Some(&b"only-here"[..])
    );

    // NX / XX, run under the coordinator's per-key lock: NX stores only a new key, XX only
    // an existing one; a refused one writes nothing and says NotStored.
    let nx = |k: &'static [u8], v: &'static [u8]| coord.set(k, v, SetOptions::default().nx());
    let w = nx(b"nx-key", b"first").await.unwrap();
    assert_eq!(w.value, SetOutcome::Stored);
    assert!(w.version.0 > 0, "a stored NX carries its version");
    assert_eq!(
        nx(b"nx-key", b"second").await.unwrap().value,
        SetOutcome::NotStored
    );
    assert_eq!(
        coord.get(b"nx-key").await.unwrap().value.as_deref(),
        Some(&b"first"[..])
    );
    let xx = SetOptions::default().xx();
    assert_eq!(
        coord.set(b"xx-missing", b"v", xx).await.unwrap().value,
        SetOutcome::NotStored
    );
    assert_eq!(coord.get(b"xx-missing").await.unwrap().value, None);
    assert_eq!(
        coord.set(b"nx-key", b"third", xx).await.unwrap().value,
        SetOutcome::Stored
    );
    assert_eq!(
        quorum.get(b"nx-key").await.unwrap().value.as_deref(),
        Some(&b"third"[..])
    );
    // NX with a TTL and a memgest.
    let opts = SetOptions::default()
        .nx()
        .ttl(std::time::Duration::from_secs(100))
        .memgest(rep3);
    assert_eq!(
        coord.set(b"nx-ttl", b"v", opts).await.unwrap().value,
        SetOutcome::Stored
    );
    // CAS by version (the coordinator's core compares): the version the last write
    // returned applies once, then it is stale.
    let cur = coord.get(b"k").await.unwrap().version;
    let first = coord
        .set(b"k", b"cas1", SetOptions::default().cas(cur))
        .await
        .unwrap();
    assert_eq!(first.value, SetOutcome::Stored);
    let again = coord
        .set(b"k", b"cas2", SetOptions::default().cas(cur))
        .await
        .unwrap();
    assert_eq!(again.value, SetOutcome::CasMismatch);
    assert_eq!(
        again.version, first.version,
        "the mismatch names the current version"
    );
    assert_eq!(
        quorum.get(b"k").await.unwrap().value.as_deref(),
        Some(&b"cas1"[..])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_and_quorum_reads_never_go_back() {
    let c = start().await;
    let seeds: Vec<String> = c.addrs.iter().map(|a| a.to_string()).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let writer = ClusterClient::connect(&seeds, cfg(ReadMode::Coordinator))
        .await
        .unwrap();
    let reader = ClusterClient::connect(&seeds, cfg(ReadMode::Quorum))
        .await
        .unwrap();
    const KEYS: usize = 8;
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let w = {
        let acked = acked.clone();
        tokio::spawn(async move {
            for i in 1..=400u64 {
                let k = (i as usize) % KEYS;
                writer
                    .set(
                        format!("mono:{k}").as_bytes(),
                        i.to_string().as_bytes(),
                        SetOptions::default(),
                    )
                    .await
                    .unwrap();
                acked[k].store(i, Ordering::SeqCst);
            }
        })
    };
    let mut readers = Vec::new();
    for t in 0..4 {
        let reader = reader.clone();
        let acked = acked.clone();
        readers.push(tokio::spawn(async move {
            let mut n = 0u64;
            for j in 0..300usize {
                let k = (j + t) % KEYS;
                // Acknowledged before the read started: the read must see it or later.
                let floor = acked[k].load(Ordering::SeqCst);
                let v = reader.get(format!("mono:{k}").as_bytes()).await.unwrap();
                let got: u64 = v
                    .value
                    .map(|b| std::str::from_utf8(&b).unwrap().parse().unwrap())
                    .unwrap_or(0);
                assert!(got >= floor, "read {got} after {floor} was acknowledged");
                n += 1;
            }
            n
        }));
    }
    w.await.unwrap();
    for r in readers {
        assert_eq!(r.await.unwrap(), 300);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn address_override_dials_the_proxy() {
    let c = start().await;
    // A trivial TCP relay in front of node 1; the client is told to dial it instead.
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay.local_addr().unwrap();
    let target = c.addrs[0];
    let relayed = Arc::new(AtomicU64::new(0));
    let counter = relayed.clone();
    tokio::spawn(async move {
        while let Ok((mut a, _)) = relay.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut b = tokio::net::TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
            });
        }
    });
    let mut conf = cfg(ReadMode::Quorum);
    conf.addr_override = HashMap::from([(target, relay_addr)]);
    let seed = c.addrs[1].to_string();
    let client = ClusterClient::connect(&[&seed], conf).await.unwrap();
    for i in 0..50 {
        let k = format!("o{i}");
        client
            .set(k.as_bytes(), b"x", SetOptions::default())
            .await
            .unwrap();
        assert_eq!(
            client.get(k.as_bytes()).await.unwrap().value.as_deref(),
            Some(&b"x"[..])
        );
    }
    assert!(
        relayed.load(Ordering::SeqCst) > 0,
        "node 1 was reached through the relay"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_cluster_client() {
    let c = start().await;
    let seed = c.addrs[0].to_string();
    // The blocking client owns its runtime: use it from a plain thread.
    let done = std::thread::spawn(move || {
        let b = ringlet_client::BlockingClusterClient::connect(&[&seed], cfg(ReadMode::Quorum))
            .unwrap();
        let pairs: Vec<(String, String)> =
            (0..40).map(|i| (format!("b{i}"), format!("{i}"))).collect();
        for r in b.mset(&pairs) {
            r.unwrap();
        }
        let keys: Vec<&String> = pairs.iter().map(|(k, _)| k).collect();
        let got = b.mget(&keys).unwrap();
        for ((_, v), g) in pairs.iter().zip(got) {
            assert_eq!(g.value.as_deref(), Some(v.as_bytes()));
        }
        b.del(b"b3").unwrap();
        assert_eq!(b.get(b"b3").unwrap().value, None);
        assert_eq!(
            b.get_quorum(b"b4").unwrap().value.as_deref(),
            Some(&b"4"[..])
        );
        assert!(b.epoch().0 > 0);
    });
    tokio::task::spawn_blocking(move || done.join().unwrap())
        .await
        .unwrap();
    drop(c);
}

/// A drain changes the map under a client that cached the old one: MOVED / STALE_EPOCH /
/// newer epochs make it refresh, and every read and write keeps succeeding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_change_under_the_client() {
    let (c, caddr) = start_with(4, 3).await;
    let seeds: Vec<String> = c.addrs.iter().map(|a| a.to_string()).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let coord = ClusterClient::connect(&seeds, cfg(ReadMode::Coordinator))
        .await
        .unwrap();
    let quorum = ClusterClient::connect(&seeds, cfg(ReadMode::Quorum))
        .await
        .unwrap();
    let before = coord.epoch();
    let keys: Vec<String> = (0..120).map(|i| format!("d{i}")).collect();
    for k in &keys {
        coord
            .set(k.as_bytes(), b"1", SetOptions::default())
            .await
            .unwrap();
    }
    let r = ringlet_cluster::control::request(
        &caddr.to_string(),
        &ringlet_cluster::control::ToControl::Drain { node: 1 },
    )
    .await
    .unwrap();
    assert!(
        matches!(r, ringlet_cluster::control::FromControl::Ok),
        "{r:?}"
    );
    // Keep using the clients while the spare takes node 1's roles.
    let until = Instant::now() + Duration::from_secs(4);
    let mut round = 1u32;
    while Instant::now() < until {
        round += 1;
        let v = round.to_string();
        let prev = (round - 1).to_string();
        for k in keys.iter().step_by(3) {
            let prev = if round == 2 { "1" } else { prev.as_str() };
            match coord
                .set(k.as_bytes(), v.as_bytes(), SetOptions::default())
                .await
            {
                Ok(_) => {
                    let got = quorum.get(k.as_bytes()).await.unwrap();
                    assert_eq!(
                        got.value.as_deref(),
                        Some(v.as_bytes()),
                        "{k} round {round}"
                    );
                }
                // A write in flight while its coordinator hands over may be reported
                // ambiguous (docs/design/cluster-runtime.md): either value may be there.
                Err(e) if e.to_string().contains("ambiguous") => {
                    let got = quorum.get(k.as_bytes()).await.unwrap();
                    let got = got.value.unwrap();
                    assert!(got == v.as_bytes() || got == prev.as_bytes(), "{k}");
                }
                Err(e) => panic!("{k} round {round}: {e}"),
            }
        }
    }
    let got = coord.mget(&keys).await.unwrap();
    assert!(got.iter().all(|g| g.value.is_some()));
    assert!(coord.epoch() > before, "the client learned the new map");
    assert!(coord.stats().map_refreshes >= 2, "{:?}", coord.stats());
    assert!(quorum.epoch() > before);
}

/// Memgest management over the native protocol (issue 6): create, set under it by name,
/// move between memgests on the key's coordinator, query a key's memgest and version, list,
/// and DROP refused while keys live then allowed — all through `ClusterClient`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memgest_management_over_native_frames() {
    let c = start().await;
    let seed = c.addrs[0].to_string();
    let client = ClusterClient::connect(&[&seed], cfg(ReadMode::Coordinator))
        .await
        .unwrap();
    client
        .memgest_create("pair", MemgestKind::Rep { r: 2 })
        .await
        .unwrap();
    let pair = client.memgest("pair").expect("the refreshed map names it");
    // Keys over all coordinators: MOVE and KEY must be routed to each key's coordinator.
    let keys: Vec<String> = (0..12).map(|i| format!("mg:{i}")).collect();
    for k in &keys {
        client.set_in(k.as_bytes(), b"v1", pair).await.unwrap();
        let info = client.memgest_key(k.as_bytes()).await.unwrap().unwrap();
        assert_eq!(info[0], "pair", "{k}: {info:?}");
        assert_eq!(info[1], "rep:2");
    }
    // The default memgest of this cluster is rep:3 (named "rep:3").
    for k in &keys {
        client.memgest_move(k.as_bytes(), "rep:3").await.unwrap();
        let info = client.memgest_key(k.as_bytes()).await.unwrap().unwrap();
        assert_eq!(info[1], "rep:3", "{k}: {info:?}");
        assert_eq!(
            client.get(k.as_bytes()).await.unwrap().value.as_deref(),
            Some(&b"v1"[..]),
            "a move keeps the value"
        );
    }
    assert!(client.memgest_key(b"mg:absent").await.unwrap().is_none());
    // LIST names it; MEMGEST INFO answers (raw reply).
    let list = client.memgest_command(&["LIST"]).await.unwrap();
    let ringlet_codec::resp::Reply::Array(rows) = &list else {
        panic!("{list:?}")
    };
    assert!(
        rows.iter()
            .any(|r| matches!(r, ringlet_codec::resp::Reply::Array(c)
            if c.first() == Some(&ringlet_codec::resp::Reply::Bulk(b"pair".to_vec())))),
        "{list:?}"
    );
    // A key still in "pair": DROP is refused with the node's message, then allowed once the
    // key moved out.
    client.set_in(b"mg:last", b"x", pair).await.unwrap();
    let e = client.memgest_drop("pair").await.unwrap_err();
    assert!(e.to_string().contains("still holds"), "{e}");
    client.memgest_move(b"mg:last", "rep:3").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.memgest_drop("pair").await {
            Ok(()) => break,
            // Usage reports lag the move by up to a report interval.
            Err(e) if Instant::now() < deadline => {
                eprintln!("drop retried: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("drop never allowed: {e}"),
        }
    }
    assert!(client.memgest("pair").is_none());
    // Unknown memgest: a refusal, not a transport error.
    let e = client.memgest_move(b"mg:0", "nope").await.unwrap_err();
    assert!(e.to_string().to_lowercase().contains("nope"), "{e}");
}

/// A map-changing MEMGEST call returns with the client's cached map showing the change, every
/// time: the call's own refresh asks several nodes at once and takes the first map, which a
/// node that has not applied the change yet would answer with the old one (a CI run saw a
/// dropped memgest still named). Many rounds of create, default and drop, each checked at
/// once on the cached map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memgest_changes_show_in_the_cached_map_at_once() {
    let c = start().await;
    let seed = c.addrs[1].to_string();
    let client = ClusterClient::connect(&[&seed], cfg(ReadMode::Coordinator))
        .await
        .unwrap();
    for round in 0..12 {
        let name = format!("m{round}");
        client
            .memgest_create(&name, MemgestKind::Rep { r: 2 })
            .await
            .unwrap();
        assert!(client.memgest(&name).is_some(), "round {round}: created");
        let default = if round % 2 == 0 {
            name.as_str()
        } else {
            "rep:3"
        };
        client.memgest_default(default).await.unwrap();
        assert_eq!(
            client.memgest(default),
            Some(client.map().default_memgest),
            "round {round}: the default"
        );
        client.memgest_default("rep:3").await.unwrap();
        client.memgest_drop(&name).await.unwrap();
        assert!(client.memgest(&name).is_none(), "round {round}: dropped");
    }
}

/// `ringlet_client::Pipeline` on a real cluster: 200 SETs over many slots in one wave, then
/// GETs and an MGET of them in one batch; commands on one key keep their order inside one
/// pipeline (SET then GET, two INCRBYs, DEL then GET); a failing INCRBY is that command's
/// error while the others succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_results_in_order_with_per_command_errors() {
    use ringlet_client::{Error, Pipeline, PipelineOp, PipelineReply};
    let c = start().await;
    let seed = c.addrs[0].to_string();
    let client = ClusterClient::connect(&[&seed], cfg(ReadMode::Coordinator))
        .await
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("pipe:{i}").into_bytes()).collect();
    let mut p = Pipeline::new();
    for k in &keys {
        p.push(PipelineOp::Set {
            key: k.clone(),
            value: k.repeat(2),
            opts: SetOptions::default(),
        })
        .unwrap();
    }
    let got = p.execute(&client).await;
    assert!(p.is_empty());
    assert_eq!(got.len(), keys.len());
    for r in got {
        assert_eq!(r.unwrap(), PipelineReply::Set(SetOutcome::Stored));
    }
    for k in &keys {
        p.push(PipelineOp::Get(k.clone())).unwrap();
    }
    p.push(PipelineOp::Mget(vec![
        keys[0].clone(),
        b"pipe:absent".to_vec(),
    ]))
    .unwrap();
    let got = p.execute(&client).await;
    for (k, r) in keys.iter().zip(&got) {
        assert_eq!(r, &Ok(PipelineReply::Value(Some(k.repeat(2).into()))));
    }
    assert_eq!(
        got.last().unwrap(),
        &Ok(PipelineReply::Values(vec![
            Some(keys[0].repeat(2).into()),
            None
        ]))
    );

    // Order on one key, and a per-command error.
    let ops = vec![
        PipelineOp::Set {
            key: b"pipe:o".to_vec(),
            value: b"text".to_vec(),
            opts: SetOptions::default(),
        },
        PipelineOp::Get(b"pipe:o".to_vec()),
        PipelineOp::IncrBy {
            key: b"pipe:o".to_vec(),
            delta: 1,
        },
        PipelineOp::IncrBy {
            key: b"pipe:n".to_vec(),
            delta: 2,
        },
        PipelineOp::IncrBy {
            key: b"pipe:n".to_vec(),
            delta: 3,
        },
        PipelineOp::Del(b"pipe:o".to_vec()),
        PipelineOp::Get(b"pipe:o".to_vec()),
        PipelineOp::Del(b"pipe:o".to_vec()),
    ];
    let got = ringlet_client::pipeline::execute(&client, ops).await;
    assert_eq!(got[0], Ok(PipelineReply::Set(SetOutcome::Stored)));
    assert_eq!(
        got[1],
        Ok(PipelineReply::Value(Some(b"text".to_vec().into())))
    );
    assert!(matches!(got[2], Err(Error::Server { .. })), "{:?}", got[2]);
    assert_eq!(got[3], Ok(PipelineReply::Int(2)));
    assert_eq!(got[4], Ok(PipelineReply::Int(5)));
    assert_eq!(got[5], Ok(PipelineReply::Del(DelOutcome::Deleted)));
    assert_eq!(got[6], Ok(PipelineReply::Value(None)));
    // A DEL of a key that no longer exists says so (it said Deleted before session 14).
    assert_eq!(got[7], Ok(PipelineReply::Del(DelOutcome::NotFound)));
}

/// Resharding under the smart client (issue 12): a spare is added, the plan's moves run one
/// after another, then the node is removed again (its spans move back), while one task
/// writes and reads through `ClusterClient` all along. The client follows the maps (MOVED,
/// newer epochs; a moving span's writes are retried by its node): no operation fails, not
/// even ambiguously, and every acknowledged value reads back from a fresh client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_and_shrink_under_the_smart_client() {
    use ringlet_cluster::control::{request, FromControl, ToControl};
    let (c, caddr) = start_with(4, 3).await;
    let caddr = caddr.to_string();
    let seeds: Vec<String> = c.addrs.iter().map(|a| a.to_string()).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let client = Arc::new(
        ClusterClient::connect(&seeds, cfg(ReadMode::Coordinator))
            .await
            .unwrap(),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut acked: HashMap<String, String> = HashMap::new();
            let mut failures = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) || i < 500 {
                let (k, v) = (format!("g{}", i % 400), format!("v{i}"));
                match client
                    .set(k.as_bytes(), v.as_bytes(), SetOptions::default())
                    .await
                {
                    Ok(_) => {
                        acked.insert(k.clone(), v.clone());
                        match client.get(k.as_bytes()).await {
                            Ok(got) if got.value.as_deref() == Some(v.as_bytes()) => {}
                            other => failures.push(format!("read {k}: {other:?}")),
                        }
                    }
                    Err(e) => failures.push(format!("write {k}: {e}")),
                }
                i += 1;
            }
            (i, acked, failures)
        })
    };
    let map = || async {
        match request(&caddr, &ToControl::Watch).await.unwrap() {
            FromControl::Map(m) => m,
            other => panic!("{other:?}"),
        }
    };
    let ok = |r: FromControl| assert!(matches!(r, FromControl::Ok), "{r:?}");
    let run_plan = |m: ringlet_control::ClusterMap| {
        let caddr = caddr.clone();
        async move {
            let plan = ringlet_control::plan_rebalance(&m);
            assert!(!plan.is_empty());
            for mv in &plan {
                let r = request(
                    &caddr,
                    &ToControl::MoveSlots {
                        first: mv.first,
                        last: mv.last,
                        pg: mv.pg,
                        data_index: mv.data_index,
                        rate_kib_s: 0,
                    },
                )
                .await
                .unwrap();
                assert!(matches!(r, FromControl::Ok), "{r:?}");
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    assert!(Instant::now() < deadline, "move {mv:?} did not finish");
                    if let FromControl::Map(now) = request(&caddr, &ToControl::Watch).await.unwrap()
                    {
                        if now.moving.is_none()
                            && now.coordinator(mv.first) == Some(mv.to)
                            && now.handoff(mv.first, mv.last).is_none()
                        {
                            break;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            plan.len()
        }
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    ok(request(&caddr, &ToControl::AddNode { node: 4 })
        .await
        .unwrap());
    let grown = run_plan(map().await).await;
    assert_eq!(
        map().await.placement.unwrap().slots_per_coordinator().len(),
        4
    );
    ok(request(&caddr, &ToControl::RemoveNode { node: 4 })
        .await
        .unwrap());
    let shrunk = run_plan(map().await).await;
    ok(request(&caddr, &ToControl::RemoveNode { node: 4 })
        .await
        .unwrap());
    stop.store(true, Ordering::Relaxed);
    let (ops, acked, failures) = load.await.unwrap();
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    let fresh = ClusterClient::connect(&seeds, cfg(ReadMode::Coordinator))
        .await
        .unwrap();
    let keys: Vec<&String> = acked.keys().collect();
    let got = fresh.mget(&keys).await.unwrap();
    for (k, g) in keys.iter().zip(&got) {
        assert_eq!(g.value.as_deref(), Some(acked[*k].as_bytes()), "lost {k}");
    }
    eprintln!(
        "{ops} writes (+ reads) through {grown} + {shrunk} moves, {} keys checked; client map refreshes {}",
        keys.len(),
        client.stats().map_refreshes
    );
    assert!(client.stats().map_refreshes >= 2, "{:?}", client.stats());
}
