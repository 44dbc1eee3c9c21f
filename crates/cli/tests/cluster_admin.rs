//! Every node of `ringlet up --nodes N` serves Prometheus `/metrics` and a status page on its
//! client port + 10000 (issue 11 item 6), with figures that follow the cluster: the map's
//! epoch, the node's state in it, its own keys and stored copies.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// GET `path` on 127.0.0.1:`port`: (status line, body).
fn http_get(port: u16, path: &str) -> (String, String) {
    http_get_with(port, path, "")
}

/// GET with extra header lines (each ending in \r\n).
fn http_get_with(port: u16, path: &str, headers: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("admin port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n").unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    let (head, body) = got.split_once("\r\n\r\n").expect("HTTP response");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of an unlabelled (or exactly labelled) sample, e.g. `ringlet_keys` or
/// `ringlet_node_state{state="active"}`.
fn sample(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
fn every_node_serves_metrics_that_follow_the_cluster() {
    let base = common::free_base(5);
    let b = base.to_string();
    let up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--spares",
        "1",
        "--port",
        &b,
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
    ]);
    let epoch0 = sample(
        &http_get(base + 10_000, "/metrics").1,
        "ringlet_cluster_epoch",
    )
    .unwrap();
    assert!(epoch0 > 0.0);
    for i in 0..4u16 {
        let (status, body) = http_get(base + 10_000 + i, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        let state = if i < 3 { "active" } else { "spare" };
        assert_eq!(
            sample(&body, &format!("ringlet_node_state{{state=\"{state}\"}}")),
            Some(1.0),
            "node {}: {body}",
            i + 1
        );
        let (status, page) = http_get(base + 10_000 + i, "/");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(page.contains("cluster_state:ok"), "{page}");
        assert_eq!(
            http_get(base + 10_000 + i, "/nope").0,
            "HTTP/1.1 404 Not Found"
        );
    }
    // 200 keys through redis-cli in cluster mode: every node counts its own, and the three
    // active nodes store three copies of each.
    const KEYS: usize = 200;
    for k in 0..KEYS {
        let out = Command::new("redis-cli")
            .args(["-c", "-p", &b, "SET", &format!("m:{k}"), "v"])
            .output()
            .expect("redis-cli (scripts/setup.sh installs it)");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (mut own, mut stored) = (0.0, 0.0);
        for i in 0..4u16 {
            let body = http_get(base + 10_000 + i, "/metrics").1;
            own += sample(&body, "ringlet_keys").unwrap();
            stored += sample(&body, "ringlet_stored_entries").unwrap();
        }
        if own == KEYS as f64 && stored == 3.0 * KEYS as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "metrics say {own} own keys and {stored} stored entries for {KEYS} keys at rep:3"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Replication and transport counters: the coordinators committed every write, and
    // each active node sent its replicas frames.
    let mut committed = 0.0;
    for i in 0..3u16 {
        let body = http_get(base + 10_000 + i, "/metrics").1;
        committed += sample(&body, "ringlet_replica_writes_committed_total").unwrap();
        assert!(
            sample(&body, "ringlet_transport_frames_sent_total").unwrap() > 0.0,
            "node {}: {body}",
            i + 1
        );
        assert!(
            body.contains("# HELP ringlet_transport_connects_total "),
            "{body}"
        );
        assert_eq!(
            sample(&body, "ringlet_transport_bad_frames_total"),
            Some(0.0)
        );
    }
    assert!(
        committed >= KEYS as f64,
        "{committed} writes committed for {KEYS}"
    );
    drop(up);
}

#[test]
fn no_admin_turns_the_ports_off_and_one_admin_port_for_many_nodes_is_refused() {
    let base = common::free_base(5);
    let b = base.to_string();
    let up = common::up(&["up", "--nodes", "3", "--port", &b, "--no-admin"]);
    for i in 0..3u16 {
        assert!(
            TcpStream::connect(("127.0.0.1", base + 10_000 + i)).is_err(),
            "admin port of node {} open with --no-admin",
            i + 1
        );
    }
    drop(up);
    let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(["up", "--nodes", "3", "--port", &b, "--admin-port", "9999"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--admin-port"));
}

/// `--admin-token T`: every node's admin pages answer 401 without `Authorization: Bearer T`
/// (and show no figures), 200 with it; a token with spaces is refused at start.
#[test]
fn admin_token_guards_every_node_admin_page() {
    let base = common::free_base(5);
    let b = base.to_string();
    let up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--port",
        &b,
        "--admin-token",
        "tok-3e1f",
    ]);
    for i in 0..3u16 {
        let port = base + 10_000 + i;
        for path in ["/metrics", "/", "/status"] {
            let (status, body) = http_get(port, path);
            assert_eq!(status, "HTTP/1.1 401 Unauthorized", "node {} {path}", i + 1);
            assert!(!body.contains("ringlet_"), "{body}");
            let (status, _) = http_get_with(port, path, "Authorization: Bearer wrong\r\n");
            assert_eq!(status, "HTTP/1.1 401 Unauthorized");
        }
        let (status, body) = http_get_with(port, "/metrics", "Authorization: Bearer tok-3e1f\r\n");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.contains("ringlet_cluster_epoch"), "{body}");
    }
    drop(up);
    let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(["server", "--port", "0", "--admin-port", "0"])
        .args(["--admin-token", "has space"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("admin_token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
