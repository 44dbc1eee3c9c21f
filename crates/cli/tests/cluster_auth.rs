//! A cluster started by `ringlet up --nodes 3 --requirepass PW` requires AUTH on every node
//! (RESP commands before AUTH get NOAUTH, a wrong password WRONGPASS; the smart client's
//! native connections log in with AUTH too), serves redis-py `RedisCluster(password=...)`
//! and the smart client with the password, and flags a cluster node cannot
//! honour are refused at start with an error naming the flag instead of being ignored.

mod common;

use common::{free_base, have_redis_py};
use ringlet_client::{BlockingClusterClient, ClientConfig, ClusterConfig, Credentials, SetOptions};
use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

const PW: &str = "s3cret-pw";

/// Send `reqs` on one connection and read one reply per request.
fn calls(port: u16, reqs: &[&[&[u8]]]) -> Vec<Reply> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut out = Vec::new();
    for r in reqs {
        encode_request(&mut out, r);
    }
    s.write_all(&out).expect("write");
    let mut buf = Vec::new();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while got.len() < reqs.len() {
        if let Ok(Some((r, n))) = decode_reply(&buf) {
            got.push(r);
            buf.drain(..n);
            continue;
        }
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "connection closed after {} replies", got.len());
        buf.extend_from_slice(&chunk[..n]);
    }
    got
}

fn error_text(r: &Reply) -> String {
    match r {
        Reply::Error(e) => String::from_utf8_lossy(e).to_string(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn up_with_requirepass_requires_auth_on_every_node() {
    let base = free_base(5);
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
        "--requirepass",
        PW,
    ]);
    for port in base..base + 4 {
        let r = calls(
            port,
            &[
                &[b"GET", b"k"],
                &[b"CLUSTER", b"SLOTS"],
                &[b"AUTH", b"wrong"],
                &[b"AUTH", b"default", b"wrong"],
                &[b"HELLO", b"3"],
                &[b"PING"],
                &[b"AUTH", PW.as_bytes()],
                &[b"PING"],
            ],
        );
        assert!(error_text(&r[0]).starts_with("NOAUTH"), "{r:?}");
        assert!(error_text(&r[1]).starts_with("NOAUTH"), "{r:?}");
        assert!(error_text(&r[2]).starts_with("WRONGPASS"), "{r:?}");
        assert!(error_text(&r[3]).starts_with("WRONGPASS"), "{r:?}");
        assert!(error_text(&r[4]).starts_with("NOAUTH"), "{r:?}");
        assert!(error_text(&r[5]).starts_with("NOAUTH"), "{r:?}");
        assert_eq!(r[6], Reply::ok());
        assert_eq!(r[7], Reply::Simple(b"PONG".to_vec()));
        // HELLO AUTH authenticates and switches protocol in one step.
        let r = calls(
            port,
            &[
                &[b"HELLO", b"3", b"AUTH", b"default", PW.as_bytes()],
                &[b"PING"],
            ],
        );
        assert!(matches!(r[0], Reply::Map(_)), "{r:?}");
        assert_eq!(r[1], Reply::Simple(b"PONG".to_vec()));
    }
    // The smart client over the native protocol: without the password it is refused with
    // NOAUTH (the map it asks for first included), with a wrong one WRONGPASS; with the
    // password it writes and reads across every node.
    let seed = format!("127.0.0.1:{base}");
    let cfg = |password: Option<&str>| ClusterConfig {
        client: ClientConfig {
            timeout: Duration::from_secs(10),
            retries_max: 1,
            auth: password.map(|p| Credentials {
                user: String::new(),
                password: p.into(),
            }),
            ..ClientConfig::default()
        },
        ..ClusterConfig::default()
    };
    let refused = |password: Option<&str>| -> String {
        match BlockingClusterClient::connect(&[seed.as_str()], cfg(password)) {
            Ok(c) => c
                .get(b"k")
                .expect_err("served without the password")
                .to_string(),
            Err(e) => e.to_string(),
        }
    };
    let e = refused(None);
    assert!(e.contains("NOAUTH"), "{e}");
    let e = refused(Some("wrong"));
    assert!(e.contains("WRONGPASS"), "{e}");
    let c = BlockingClusterClient::connect(&[seed.as_str()], cfg(Some(PW))).expect("connect");
    for i in 0..200 {
        let k = format!("n{i}");
        c.set(k.as_bytes(), b"v", SetOptions::default())
            .expect("SET");
    }
    for i in 0..200 {
        let k = format!("n{i}");
        assert_eq!(
            c.get(k.as_bytes()).unwrap().value.as_deref(),
            Some(&b"v"[..])
        );
    }
    // redis-py's RedisCluster with the password: writes and reads across all slots.
    if !have_redis_py() {
        return;
    }
    let script = format!(
        r#"
import redis, redis.cluster, sys
try:
    redis.cluster.RedisCluster(host="127.0.0.1", port={base}).get("x")
    sys.exit("no password accepted")
except Exception as e:  # RedisClusterException is not a RedisError
    print("without password:", type(e).__name__, e)
rc = redis.cluster.RedisCluster(host="127.0.0.1", port={base}, password="{PW}")
for i in range(300):
    rc.set(f"k{{i}}", f"v{{i}}", ex=100)
assert all(rc.get(f"k{{i}}") == f"v{{i}}".encode() for i in range(300))
assert 0 < rc.ttl("k7") <= 100
print("ok", len(rc.get_nodes()), "nodes")
"#
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(up);
}

/// Each flag alone makes `ringlet up --nodes 3` / `ringlet server --cluster` exit non-zero
/// at once, naming the flag.
#[test]
fn flags_a_cluster_node_cannot_honour_are_refused() {
    let base = free_base(5).to_string();
    let up = ["up", "--nodes", "3", "--port", &base];
    let server = ["server", "--cluster", "127.0.0.1:1", "--node-id", "1"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            [&up[..], &["--shm-socket", "/tmp/ringlet-x.sock"]].concat(),
            "--shm-socket",
        ),
        // One admin port cannot serve several nodes (each gets port + 10000).
        (
            [&up[..], &["--admin-port", "9999"]].concat(),
            "--admin-port",
        ),
        (
            [&up[..], &["--bind", "0.0.0.0", "--requirepass", "x"]].concat(),
            "--bind",
        ),
        (
            [&up[..], &["--requirepass", "has space"]].concat(),
            "requirepass",
        ),
        // The index of a cluster node is sized by the node (the flag was accepted and
        // ignored before session 13).
        (
            [&up[..], &["--index-keys", "100000"]].concat(),
            "--index-keys",
        ),
        (
            [&server[..], &["--index-keys", "100000"]].concat(),
            "--index-keys",
        ),
        // The io_uring loop serves the single node; a cluster node runs its own front
        // (`--io auto`, the default, and `epoll` mean that front there).
        ([&up[..], &["--io", "uring"]].concat(), "--io uring"),
        ([&server[..], &["--io", "uring"]].concat(), "--io uring"),
        // `server --cluster --shm-socket` is honoured (docs/design/cluster-shm-reads.md);
        // with `up --nodes` one path cannot serve several nodes (--shm-dir does).
        (
            [&server[..], &["--bind", "0.0.0.0", "--requirepass", "x"]].concat(),
            "--bind",
        ),
    ];
    for (args, flag) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
            .args(&args)
            .env_remove("RINGLET_REQUIREPASS")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
