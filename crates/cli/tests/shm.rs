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
