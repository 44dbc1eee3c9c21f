//! Reads keep answering while one replica of a `rep:3` cluster is frozen with SIGSTOP.
//!
//! The control plane and nodes 1 and 2 run in this process; node 3 runs in a child process
//! (this same test binary re-executed with `--ignored --exact child_node`), so it can be
//! stopped with a signal. While it is stopped: quorum reads of every key (a third of them
//! coordinated by the stopped node) return the acknowledged values, coordinator reads of keys
//! the live nodes coordinate answer, and new writes there are read back by quorum.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ringlet_client::{ClusterClient, ClusterConfig, ReadMode, SetOptions};
use ringlet_cluster::launch::{run_control, run_node, ControlOpts, NodeOpts};
use ringlet_types::{key_slot, MemgestKind, NodeId};

const CHILD_ENV: &str = "RINGLET_TEST_CHILD_NODE";

/// Not a test: the body of the child process (a cluster node) when [`CHILD_ENV`] is set.
#[test]
#[ignore = "helper process of quorum_reads_survive_a_stopped_replica"]
fn child_node() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (id, control) = spec.split_once(' ').unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_node, addr) = run_node(&NodeOpts {
            id: id.parse().unwrap(),
            bind: "127.0.0.1:0".parse().unwrap(),
            peer_port: 0,
            control: control.to_string(),
            lease_ms: 1500,
            memory_bytes: 64 << 20,
            requirepass: None,
            tls: None,
            admin_port: None,
            admin_token: None,
        })
        .await
        .unwrap();
        println!("CHILD_ADDR {addr}");
        // Serve until the parent kills us, or exits without doing so (its end of our stdin
        // closes): never outlive the test.
        std::thread::spawn(|| {
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
            std::process::exit(0);
        });
        loop {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    });
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGCONT);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: i32) {
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0, "kill({sig})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_reads_survive_a_stopped_replica() {
    let (svc, caddr) = run_control(&ControlOpts {
        bind: "127.0.0.1:0".parse().unwrap(),
        expect_nodes: 3,
        active: 3,
        default_memgest: Some(MemgestKind::Rep { r: 3 }),
        s: 2,
        d: 1,
        lease_ms: 1500,
        // Test harness: ec resharding is exercised here.
        ec_moves: true,
    })
    .await
    .unwrap();
    let mut live = Vec::new();
    for id in 1..=2 {
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
        live.push((n, a));
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "child_node", "--nocapture"])
        .env(CHILD_ENV, format!("3 {caddr}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let child = Kill(child);
    let child_addr: SocketAddr = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(out).lines();
        let addr = loop {
            let l = lines.next().expect("child exited").unwrap();
            if let Some(a) = l.strip_prefix("CHILD_ADDR ") {
                break a.parse().unwrap();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        addr
    })
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while svc.map().placement.is_none() || live.iter().any(|(n, _)| n.map().is_none()) {
        assert!(Instant::now() < deadline, "cluster did not bootstrap");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut cfg = ClusterConfig::default();
    cfg.client.timeout = Duration::from_secs(10);
    cfg.client.seed = Some(3);
    let seeds = [live[0].1.to_string(), child_addr.to_string()];
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let writer = ClusterClient::connect(&seeds, cfg.clone()).await.unwrap();
    let quorum = ClusterClient::connect(
        &seeds,
        ClusterConfig {
            read_mode: ReadMode::Quorum,
            ..cfg.clone()
        },
    )
    .await
    .unwrap();
    let keys: Vec<String> = (0..150).map(|i| format!("s{i}")).collect();
    for k in &keys {
        writer
            .set(
                k.as_bytes(),
                format!("{k}-1").as_bytes(),
                SetOptions::default(),
            )
            .await
            .unwrap();
    }
    let map = writer.map();
    let stopped = NodeId(3);
    let on_stopped = keys
        .iter()
        .filter(|k| map.coordinator(key_slot(k.as_bytes())) == Some(stopped))
        .count();
    assert!(on_stopped > 0, "some keys are coordinated by node 3");

    // A write commits on 2 of 3; wait for the third copy to land on every node before
    // freezing one (else a key whose coordinator is frozen could have its two live copies
    // disagree, and the read would rightly wait for that coordinator). rep:3 on three nodes:
    // every node holds every key.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let live_ok = live
            .iter()
            .all(|(n, _)| n.engine().lock().len() >= keys.len() as u64);
        if live_ok && dbsize(child_addr).await >= keys.len() as i64 {
            break;
        }
        assert!(Instant::now() < deadline, "third copies never landed");
        tokio::time::sleep(Duration::from_millis(10)).await; // poll interval
    }
    signal(&child.0, libc::SIGSTOP);
    let stopped_at = Instant::now();
    // Every key by quorum, right away (the stopped node's lease has not even expired yet):
    // the two live replicas decide.
    for k in &keys {
        let v = quorum.get(k.as_bytes()).await.unwrap();
        assert_eq!(v.value.as_deref(), Some(format!("{k}-1").as_bytes()), "{k}");
    }
    let first_pass = stopped_at.elapsed();
    // Coordinator reads of keys the live nodes coordinate answer too.
    for k in keys
        .iter()
        .filter(|k| map.coordinator(key_slot(k.as_bytes())) != Some(stopped))
    {
        let v = writer.get(k.as_bytes()).await.unwrap();
        assert_eq!(v.value.as_deref(), Some(format!("{k}-1").as_bytes()));
    }
    // Writes on live coordinators commit (2 of 3) and quorum reads return them.
    for k in keys
        .iter()
        .filter(|k| map.coordinator(key_slot(k.as_bytes())) != Some(stopped))
        .take(30)
    {
        let w = writer
            .set(
                k.as_bytes(),
                format!("{k}-2").as_bytes(),
                SetOptions::default(),
            )
            .await
            .unwrap();
        let r = quorum.get(k.as_bytes()).await.unwrap();
        assert_eq!(r.value.as_deref(), Some(format!("{k}-2").as_bytes()));
        assert_eq!(r.version, w.version);
    }
    // Past the stopped node's lease (the control plane may change the map meanwhile):
    // quorum reads keep answering.
    let until = stopped_at + Duration::from_secs(4);
    let mut rounds = 0;
    while Instant::now() < until {
        for k in keys.iter().step_by(7) {
            let v = quorum.get(k.as_bytes()).await.unwrap();
            assert!(v.value.is_some(), "{k} readable while node 3 is stopped");
        }
        rounds += 1;
    }
    eprintln!(
        "quorum pass over {} keys ({on_stopped} coordinated by the stopped node) took {first_pass:?}; \
         {rounds} later rounds; client stats {:?}",
        keys.len(),
        quorum.stats()
    );
    signal(&child.0, libc::SIGCONT);
    drop(child);
    for (n, _) in &live {
        n.stop();
    }
}

/// DBSIZE of a node (its engine's key count), over RESP.
/// Entries the node stores (every copy: INFO `stored_entries`; DBSIZE counts only the keys
/// it coordinates, as on a Redis Cluster primary).
async fn dbsize(addr: SocketAddr) -> i64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return -1;
    };
    let mut req = Vec::new();
    ringlet_codec::resp::encode_request(&mut req, &[b"INFO"]);
    if s.write_all(&req).await.is_err() {
        return -1;
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some((r, _))) = ringlet_codec::resp::decode_reply(&buf) {
            let ringlet_codec::resp::Reply::Bulk(b) = r else {
                return -1;
            };
            return String::from_utf8_lossy(&b)
                .lines()
                .find_map(|l| l.strip_prefix("stored_entries:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(-1);
        }
        match s.read(&mut chunk).await {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return -1,
        }
    }
}
