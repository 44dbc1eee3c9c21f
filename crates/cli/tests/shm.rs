//! `ringlet server --shm-socket`: same-host clients read the real node's memory one-sided,
//! see what TCP clients wrote, follow a node restart, and `ringlet bench --mode shm-get`
//! checks every value it reads.

mod common;

use ringlet_shm::ShmReader;
use std::path::Path;
use std::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_ringlet");

/// Start `ringlet server --port 0 --shm-socket <sock>`; returns the child and its port.
fn server(sock: &Path) -> (Child, u16) {
    common::server(&["--shm-socket".as_ref(), sock.as_os_str()])
}

fn json_u64(line: &str, key: &str) -> u64 {
    let pat = format!("\"{key}\":");
    let i = line.find(&pat).unwrap_or_else(|| panic!("{key} in {line}"));
    line[i + pat.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

#[test]
fn one_sided_reads_of_a_real_node_across_a_restart() {
    let dir = std::env::temp_dir().join(format!("ringlet-cli-shm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("node.sock");
    let (mut node, port) = server(&sock);
    let p = port.to_string();
    let ok = Command::new(BIN)
        .args(["set", "greeting", "hello", "--port", &p])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let mut r = ShmReader::connect(&sock).unwrap();
    let (_, v) = r
        .get(b"greeting")
        .unwrap()
        .expect("written over TCP, read one-sided");
    assert_eq!(v, b"hello");
    assert_eq!(r.stats().shm_hits, 1);
    let generation = r.hello().unwrap().generation;

    let out = Command::new(BIN)
        .args(["bench", "--mode", "shm-get", "--socket"])
        .arg(&sock)
        .args([
            "--load",
            "--keys",
            "3000",
            "--duration",
            "0.3",
            "--threads",
            "2",
        ])
        .args(["--batch", "8", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let last = stdout.lines().last().unwrap();
    assert!(json_u64(last, "ops_per_sec") > 0, "{last}");
    assert_eq!(json_u64(last, "wrong"), 0, "{last}");
    assert_eq!(json_u64(last, "misses"), 0, "{last}");

    // Restart: the reader notices the hang-up, re-handshakes with the new incarnation (an
    // empty node) and never serves the dead node's memory again.
    node.kill().unwrap();
    node.wait().unwrap();
    let (mut node2, _) = server(&sock);
    let mut got = Some((Default::default(), b"hello".to_vec()));
    for _ in 0..100 {
        got = r.get(b"greeting").unwrap_or(got);
        if got.is_none() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(got.is_none(), "still reading the dead node's memory");
    assert_ne!(r.hello().unwrap().generation, generation);
    assert!(r.stats().generation_changes >= 1);
    node2.kill().unwrap();
    node2.wait().unwrap();
}

/// `ringlet up --nodes 3 --shm-dir DIR`: every node exports its memory at
/// `DIR/node-<port>.sock` as a cluster node (HELLO with a validity region, no requests served
/// on the socket), and the smart client reads what it wrote from there, one-sided.
#[test]
fn up_nodes_with_shm_dir_serve_one_sided_cluster_reads() {
    let dir = std::env::temp_dir().join(format!("ringlet-cli-shm-up-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = common::free_base(4);
    let base_s = base.to_string();
    let _up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--port",
        &base_s,
        "--no-admin",
        "--shm-dir",
        dir.to_str().unwrap(),
    ]);
    for port in base..base + 3 {
        let mut r = ShmReader::connect(dir.join(format!("node-{port}.sock"))).unwrap();
        assert!(r.is_cluster(), "node {port}: not a cluster node's socket");
        assert!(
            r.set(b"k", b"bypass").is_err(),
            "node {port} served a write"
        );
    }
    let seeds: Vec<String> = (base..base + 3).map(|p| format!("127.0.0.1:{p}")).collect();
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let mut cfg = ringlet_client::ClusterConfig {
        shm_dir: Some(dir.clone()),
        ..ringlet_client::ClusterConfig::default()
    };
    cfg.client.timeout = std::time::Duration::from_secs(30);
    let c = ringlet_client::BlockingClusterClient::connect(&seeds, cfg).unwrap();
    let pairs: Vec<(String, String)> = (0..100)
        .map(|i| (format!("u:{i}"), format!("v{i}")))
        .collect();
    for r in c.mset(&pairs) {
        r.unwrap();
    }
    for (k, v) in &pairs {
        assert_eq!(
            c.get(k.as_bytes()).unwrap().value.as_deref(),
            Some(v.as_bytes())
        );
    }
    let st = c.async_client().stats();
    assert_eq!(st.shm_reads + st.shm_fallbacks.total(), 100, "{st:?}");
    assert!(st.shm_reads > 0, "{st:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
