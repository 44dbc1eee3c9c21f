//! `ringlet up --nodes 3 --spares 1 --default-memgest rep:3` end to end through the `ringlet`
//! binary: the cluster serves Redis Cluster (MOVED between nodes), `ringlet node drain`
//! moves a node's roles to the spare, and the data stays readable. The heavier failover and
//! linearizability tests live in crates/cluster-tests/tests/multiprocess.rs.

mod common;

use common::call;

use ringlet_codec::resp::Reply;
use std::process::Command;
use std::time::{Duration, Instant};

/// Follow MOVED like `redis-cli -c`.
fn cluster_call(mut port: u16, args: &[&[u8]]) -> Reply {
    for _ in 0..5 {
        match call(port, args) {
            Reply::Error(e) if e.starts_with(b"MOVED") => {
                let s = String::from_utf8_lossy(&e).to_string();
                let addr = s.split(' ').nth(2).expect("MOVED addr");
                port = addr.rsplit(':').next().unwrap().parse().unwrap();
            }
            r => return r,
        }
    }
    panic!("too many redirects")
}

#[test]
fn up_cluster_serves_moved_and_drains() {
    // Client and admin ports below the ephemeral range (common::free_base).
    let base = common::free_base(6);
    let (up, control, secret_file) = common::up_admin(&[
        "up",
        "--nodes",
        "3",
        "--spares",
        "1",
        "--port",
        &base.to_string(),
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
    ]);
    for i in 0..50 {
        let k = format!("k{i}");
        assert_eq!(
            cluster_call(base, &[b"SET", k.as_bytes(), b"v"]),
            Reply::ok()
        );
    }
    // Some key is not on node 1: it answers MOVED.
    let moved = (0..50).any(|i| {
        matches!(call(base, &[b"GET", format!("k{i}").as_bytes()]), Reply::Error(e) if e.starts_with(b"MOVED"))
    });
    assert!(moved);
    // The CLI's client commands reach keys of every node through any one of them: MGET
    // splits by coordinator, DEL and GET follow MOVED (a missing key prints an empty line
    // inside MGET's answer, as redis-cli does).
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
            .args(args)
            .args(["--port", &base.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ringlet {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let mut mget = vec!["mget"];
    mget.extend(keys.iter().map(String::as_str));
    mget.push("nokey");
    assert_eq!(cli(&mget), format!("{}\n", "v\n".repeat(20)));
    assert_eq!(cli(&["del", "k0", "k1", "k2", "nokey"]), "3\n");
    assert_eq!(cli(&["get", "k1"]), "(nil)\n");
    for i in 0..3 {
        let k = format!("k{i}");
        assert_eq!(
            cluster_call(base, &[b"SET", k.as_bytes(), b"v"]),
            Reply::ok()
        );
    }
    // Without the cluster secret the control plane gives nothing and drains nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(["node", "drain", "2", "--control", &control])
        .env_remove("RINGLET_CLUSTER_SECRET")
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a drain without the cluster secret was accepted"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--cluster-secret-file"),
        "the refusal does not name the flag: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!secret_file.is_empty(), "up printed no secret file");
    let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(["node", "drain", "2", "--control", &control])
        .args(["--cluster-secret-file", &secret_file])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The command follows the drain to its end and names the spare that took over.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("node 2 drained at epoch") && said.contains("moved to node 4"),
        "{said}"
    );
    // Node 2 no longer coordinates slots; every key is still readable.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "drain did not complete");
        let Reply::Bulk(nodes) = call(base, &[b"CLUSTER", b"NODES"]) else {
            panic!()
        };
        let text = String::from_utf8_lossy(&nodes).to_string();
        let me2 = format!(":{}@", base + 1);
        if text
            .lines()
            .filter(|l| l.contains(&me2))
            .all(|l| l.split(' ').nth(8).is_none())
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for i in 0..50 {
        let k = format!("k{i}");
        assert_eq!(
            cluster_call(base, &[b"GET", k.as_bytes()]),
            Reply::Bulk(b"v".to_vec())
        );
    }
    drop(up);
}

/// `up --threads N` is passed to every node it starts (it was refused before): each node's
/// runtime runs exactly N worker threads, counted in /proc from the pid the node reports.
#[test]
fn up_threads_sets_each_nodes_workers() {
    let base = common::free_base(3);
    let up = common::up(&[
        "up",
        "--nodes",
        "2",
        "--spares",
        "0",
        "--port",
        &base.to_string(),
        "--threads",
        "3",
        "--memory-mb",
        "64",
    ]);
    let pids: Vec<_> = [base, base + 1].map(|p| (p, node_pid(p))).into();
    // `node_pid` opened and closed a connection, which wakes the node's malloc-trim chore
    // within a second; count after it ran (it once ran on the blocking pool, whose threads
    // carry the workers' name, and this test failed in CI with 4 workers of 3).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    for (port, pid) in pids {
        let workers = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter(|t| {
                let comm = t.as_ref().unwrap().path().join("comm");
                std::fs::read_to_string(comm).unwrap_or_default().trim() == "tokio-rt-worker"
            })
            .count();
        assert_eq!(workers, 3, "node on port {port} (pid {pid})");
    }
    drop(up);
}

/// Send `reqs` on one connection and read one reply per request (WAIT is about the
/// connection's own writes, so every step below stays on one socket).
fn on_one_conn(s: &mut std::net::TcpStream, req: &[&[u8]]) -> Reply {
    use std::io::{Read, Write};
    let mut out = Vec::new();
    ringlet_codec::resp::encode_request(&mut out, req);
    s.write_all(&out).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some((r, _))) = ringlet_codec::resp::decode_reply(&buf) {
            return r;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The epoch this node's map is at (CLUSTER INFO `cluster_current_epoch`).
fn epoch(s: &mut std::net::TcpStream) -> String {
    let Reply::Bulk(info) = on_one_conn(s, &[b"CLUSTER", b"INFO"]) else {
        panic!("CLUSTER INFO");
    };
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("cluster_current_epoch:"))
        .expect("cluster_current_epoch")
        .trim()
        .to_string()
}

fn node_pid(port: u16) -> i32 {
    let Reply::Bulk(info) = call(port, &[b"INFO", b"server"]) else {
        panic!("INFO server");
    };
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .expect("process_id")
        .trim()
        .parse()
        .unwrap()
}

/// WAIT counts the copies besides the coordinator's that hold the connection's last write:
/// rep:3 gives 2; with one replica stopped (SIGSTOP) the write still commits on a majority
/// and WAIT 2 answers 1 after its timeout, then 2 once the replica runs again; a `none`
/// memgest can never give a copy, so WAIT answers 0 at once; arguments are checked.
#[test]
fn wait_counts_the_copies_of_the_connections_last_write() {
    let base = common::free_base(4);
    let up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--spares",
        "0",
        "--port",
        &base.to_string(),
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
    ]);
    // A key node 1 coordinates.
    let key = (0..1000)
        .map(|i| format!("w{i}"))
        .find(|k| !matches!(call(base, &[b"GET", k.as_bytes()]), Reply::Error(e) if e.starts_with(b"MOVED")))
        .expect("a key of node 1");
    let k = key.as_bytes();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", base)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    assert_eq!(on_one_conn(&mut s, &[b"SET", k, b"v1"]), Reply::ok());
    assert_eq!(
        on_one_conn(&mut s, &[b"WAIT", b"2", b"5000"]),
        Reply::Integer(2)
    );
    // More than rep:3 can give: the count at once, not a hang.
    let t = Instant::now();
    assert_eq!(
        on_one_conn(&mut s, &[b"WAIT", b"3", b"0"]),
        Reply::Integer(2)
    );
    // Not a hang (a slow CI machine may take seconds; a hang is the 30 s read timeout).
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(
        matches!(on_one_conn(&mut s, &[b"WAIT", b"1", b"-1"]), Reply::Error(e) if e == b"ERR timeout is negative")
    );
    assert!(
        matches!(on_one_conn(&mut s, &[b"WAIT", b"x", b"0"]), Reply::Error(e) if e.starts_with(b"ERR value is not an integer"))
    );

    // One replica stopped: the write commits (coordinator + the other replica), and WAIT 2
    // gives 1 once its timeout passed.
    let stopped = node_pid(base + 2);
    // The epoch as node 1 and node 2 see it: a failover on a starved machine reaches the
    // node that takes over before it reaches node 1 (in one CI run node 1 gave the slot up
    // to a fence while its own map was unchanged, and WAIT then counted copies it no longer
    // tracked), so the premise below is checked on both.
    let mut s2 = std::net::TcpStream::connect(("127.0.0.1", base + 1)).unwrap();
    s2.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let epoch_before = (epoch(&mut s), epoch(&mut s2));
    assert_eq!(unsafe { libc::kill(stopped, libc::SIGSTOP) }, 0);
    let r = on_one_conn(&mut s, &[b"SET", k, b"v2"]);
    let t = Instant::now();
    let w = on_one_conn(&mut s, &[b"WAIT", b"2", b"300"]);
    let waited = t.elapsed();
    // INFO replication shows the write the stopped node has not acknowledged.
    let Reply::Bulk(repl) = on_one_conn(&mut s, &[b"INFO", b"replication"]) else {
        panic!("INFO replication");
    };
    let epoch_after = (epoch(&mut s), epoch(&mut s2));
    assert_eq!(unsafe { libc::kill(stopped, libc::SIGCONT) }, 0);
    assert_eq!(r, Reply::ok());
    // A starved machine can let the stopped node's lease lapse: the control plane then
    // changes the map and the write's targets, and the counts below legitimately change.
    // The checks hold for the premise they test: the same map throughout the stop.
    let same_map = epoch_before == epoch_after;
    if !same_map {
        eprintln!("map changed while node 3 was stopped ({epoch_before:?} -> {epoch_after:?}): WAIT/INFO counts not checked");
    }
    if same_map {
        assert_eq!(w, Reply::Integer(1));
        let repl = String::from_utf8_lossy(&repl).to_string();
        assert!(
            repl.starts_with("# Replication\r\nrole:master\r\nconnected_slaves:2\r\n"),
            "{repl}"
        );
        let port3 = format!("port={},", base + 2);
        let line = repl
            .lines()
            .find(|l| l.starts_with("slave") && l.contains(&port3))
            .unwrap_or_else(|| panic!("no line for the stopped node: {repl}"));
        assert!(!line.contains("unacked_writes=0,"), "{line}");
        assert!(
            repl.contains("kind=rep:3,copies=3,acks_to_commit=1\r\n"),
            "{repl}"
        );
        assert!(waited >= Duration::from_millis(290), "{waited:?}");
    }
    // Running again, the replica gets the retransmitted write and acknowledges it.
    assert_eq!(
        on_one_conn(&mut s, &[b"WAIT", b"2", b"10000"]),
        Reply::Integer(2)
    );

    // ROLE names the same two peers as INFO replication.
    let Reply::Array(role) = on_one_conn(&mut s, &[b"ROLE"]) else {
        panic!("ROLE");
    };
    assert_eq!(role[0], Reply::Bulk(b"master".to_vec()));
    let Reply::Array(peers) = &role[2] else {
        panic!("ROLE peers: {role:?}");
    };
    let mut ports: Vec<Reply> = peers
        .iter()
        .map(|p| match p {
            Reply::Array(f) => f[1].clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    ports.sort_by_key(|p| format!("{p:?}"));
    assert_eq!(
        ports,
        vec![
            Reply::Bulk((base + 1).to_string().into_bytes()),
            Reply::Bulk((base + 2).to_string().into_bytes())
        ]
    );

    // rep:3 is not evictable: a full node refuses writes, Redis's noeviction.
    assert_eq!(
        on_one_conn(&mut s, &[b"CONFIG", b"GET", b"maxmemory-policy"]),
        Reply::Array(vec![
            Reply::Bulk(b"maxmemory-policy".to_vec()),
            Reply::Bulk(b"noeviction".to_vec())
        ])
    );

    // A memgest of one copy: nothing beyond the coordinator, ever.
    assert_eq!(
        on_one_conn(&mut s, &[b"MEMGEST", b"CREATE", b"solo", b"none"]),
        Reply::ok()
    );
    assert_eq!(
        on_one_conn(&mut s, &[b"SET", k, b"v3", b"MEMGEST", b"solo"]),
        Reply::ok()
    );
    let t = Instant::now();
    assert_eq!(
        on_one_conn(&mut s, &[b"WAIT", b"1", b"0"]),
        Reply::Integer(0)
    );
    // Not a hang (a slow CI machine may take seconds; a hang is the 30 s read timeout).
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    drop(up);
}

/// `up --restart`: a data node killed with SIGKILL is failed over to the spare, then started
/// again by `up`; the new process rejoins empty, as a spare, and every key written before the
/// kill is still readable.
#[test]
fn up_restart_starts_a_killed_node_again_as_a_spare() {
    let base = common::free_base(5);
    let up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--spares",
        "1",
        "--port",
        &base.to_string(),
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
        "--restart",
    ]);
    for i in 0..100 {
        let k = format!("r:{i}");
        assert_eq!(
            cluster_call(base, &[b"SET", k.as_bytes(), b"v"]),
            Reply::ok()
        );
    }
    let victim = base + 1;
    let old = node_pid(victim);
    assert_eq!(unsafe { libc::kill(old, libc::SIGKILL) }, 0);
    // Bounded wait: a new process serves node 2's port, as a spare (no slots in its own
    // CLUSTER NODES line) of the current map.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        // Refused or reset while the old process dies and before the new one listens: not
        // yet (`call` panics on those).
        let nodes = std::panic::catch_unwind(|| call(victim, &[b"CLUSTER", b"NODES"]));
        let restarted = match nodes {
            Ok(Reply::Bulk(b)) => {
                let text = String::from_utf8_lossy(&b).to_string();
                let me = text.lines().find(|l| l.contains("myself")).unwrap_or("");
                let fields: Vec<&str> = me.split(' ').collect();
                // id addr flags master ping pong epoch link-state [slots...]
                fields.len() == 8
                    && fields[7] == "connected"
                    && std::panic::catch_unwind(|| node_pid(victim)).is_ok_and(|p| p != old)
            }
            _ => false,
        };
        if restarted {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 2 was not started again as a spare within 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for i in 0..100 {
        let k = format!("r:{i}");
        assert_eq!(
            cluster_call(base, &[b"GET", k.as_bytes()]),
            Reply::Bulk(b"v".to_vec()),
            "{k} after the restart"
        );
    }
    drop(up);
}

/// A node that cannot start (its port is taken) makes `up` fail at once, naming the node,
/// instead of waiting for the readiness timeout.
#[test]
fn up_fails_fast_when_a_node_exits_at_start() {
    let base = common::free_base(4);
    let _taken = std::net::TcpListener::bind(("127.0.0.1", base + 1)).unwrap();
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args([
            "up",
            "--nodes",
            "3",
            "--port",
            &base.to_string(),
            "--memory-mb",
            "64",
        ])
        .env_remove("RINGLET_REQUIREPASS")
        .output()
        .expect("run ringlet up");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("node 2 (pid ") && err.contains("exited while the cluster was starting"),
        "{err}"
    );
    // Well inside the 120 s readiness timeout (not a timing assertion on the work, only
    // that `up` did not wait for that timeout).
    assert!(started.elapsed() < Duration::from_secs(100), "{err}");
}
