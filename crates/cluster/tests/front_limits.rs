//! Bounded memory and honest limits on a cluster node's client port (issue 10, cases 3, 8).
//!
//! * 150 pipelined GETs of a 16 MiB value that the client never reads: replies were buffered
//!   per batch, and a node grew past 2.8 GB. Now replies are written (and the connection waits
//!   for the client) past 1 MiB, and at most 16 GETs run at once, so the node's resident
//!   memory (VmRSS) grows by a bounded amount — a memory bound, not a timing one.
//! * The client port listens with a backlog of at least 511 (Redis's), not Linux's 128.

mod common;

use common::{Client, Res};
use ringlet_codec::resp::{encode_request, Reply};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn rss_mib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap()
        / 1024
}

#[test]
fn unread_pipelined_replies_do_not_grow_the_node_without_bound() {
    let cl = common::start(3, 0, &["--memory", "268435456"]);
    let mut c = Client::new(cl.addrs());
    let key = b"big:unread".to_vec();
    let value = vec![b'v'; 16 << 20];
    let deadline = Instant::now() + Duration::from_secs(60);
    match c.call(vec![b"SET".to_vec(), key.clone(), value], true, deadline) {
        Res::Ok(r) => assert_eq!(r, Reply::ok()),
        Res::Io => panic!("SET failed"),
    }
    let owner = c.slot_owner(ringlet_types::key_slot(&key)).unwrap();
    let node = u32::from(owner.port() - cl.base) + 1;
    let pid = cl.pids[&node];
    let before = rss_mib(pid);
    let mut s = TcpStream::connect(owner).unwrap();
    let mut out = Vec::new();
    for _ in 0..150 {
        encode_request(&mut out, &[b"GET", &key]);
    }
    s.write_all(&out).unwrap();
    // Sample for a while: the node runs GETs until its writes block on our unread socket.
    let mut peak = before;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(rss_mib(pid));
    }
    eprintln!(
        "node {node}: VmRSS {before} MiB before, peak {peak} MiB with 150 unread 16 MiB GETs"
    );
    assert!(
        peak.saturating_sub(before) < 640,
        "the node grew by {} MiB for replies its client never read (150 x 16 MiB = 2,400 MiB)",
        peak - before
    );
    drop(s);
}

#[test]
fn client_port_listen_backlog_is_at_least_511() {
    let cl = common::start(3, 0, &[]);
    let port = cl.base;
    let out = std::process::Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2) is needed");
    let text = String::from_utf8_lossy(&out.stdout);
    // LISTEN  Recv-Q  Send-Q(=backlog)  local  peer
    let backlog: u32 = text
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no listener on {port}: {text:?}"));
    assert!(backlog >= 511, "listen backlog {backlog}");
}
