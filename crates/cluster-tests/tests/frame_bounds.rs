//! Declared lengths do not commit memory (issue 10, case 2): four bytes declaring a 72 MB
//! frame to a node's peer port used to allocate 72 MB at once, ten such connections 720 MB.
//! Now buffers grow with the bytes that arrive. The test opens ten connections to a node's
//! peer port and ten to the control port, each sending only a large length prefix (and a few
//! bytes), holds them open, and checks the processes' resident memory (VmRSS) did not grow by
//! anything like the declared total. A memory bound, not a timing one.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

fn probe(addr: SocketAddr, declared: u32) -> Vec<TcpStream> {
    (0..10)
        .map(|_| {
            let mut s = TcpStream::connect(addr).unwrap();
            let mut b = declared.to_be_bytes().to_vec();
            b.extend_from_slice(&[0u8; 16]);
            s.write_all(&b).unwrap();
            s
        })
        .collect()
}

#[test]
fn declared_frame_lengths_commit_no_memory() {
    let cl = common::start(3, 0, &[]);
    let map = cl.map();
    let node1 = &map.nodes[&ringlet_types::NodeId(1)];
    // "ip:port@peerport"
    let (client, peer) = node1.addr.split_once('@').unwrap();
    let ip: std::net::IpAddr = client.rsplit_once(':').unwrap().0.parse().unwrap();
    let peer_addr = SocketAddr::new(ip, peer.parse().unwrap());
    let pid = cl.pids[&1];
    let before = rss_kib(pid);
    let declared = 75_567_104u32; // the probe: 72 MiB, under the peer frame limit
    let held = probe(peer_addr, declared);
    std::thread::sleep(Duration::from_millis(500)); // let the node read what was sent
    let after = rss_kib(pid);
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!("peer port: VmRSS {before} KiB -> {after} KiB with 10 x {declared} B declared");
    assert!(
        grown_mib < 64,
        "peer port: node grew by {grown_mib} MiB for 10 frames declaring 72 MiB each"
    );
    drop(held);
    // The control port (in `up`'s process): 16 MiB is its frame limit. Its old buffer came
    // from calloc (lazily committed pages), so this half is a bound that holds either way;
    // the peer half above fails on the old code (207 MiB grown in one run).
    let up_pid = cl.child.id();
    let before = rss_kib(up_pid);
    let caddr: SocketAddr = cl.control.parse().unwrap();
    let held = probe(caddr, 16 * 1024 * 1024);
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(up_pid);
    let grown_mib = after.saturating_sub(before) / 1024;
    eprintln!("control port: VmRSS {before} KiB -> {after} KiB with 10 x 16 MiB declared");
    assert!(
        grown_mib < 64,
        "control port: grew by {grown_mib} MiB for 10 frames declaring 16 MiB each"
    );
    drop(held);
}
