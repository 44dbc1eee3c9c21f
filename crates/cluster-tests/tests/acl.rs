//! ACL users on a cluster (docs/design/acl.md): `ACL SETUSER` on one node of a 3-node
//! `ringlet up` (plus a spare) reaches every node through the control plane, including a
//! node that restarts afterwards (it gets the users with its first map); each node checks
//! commands and keys the same way; `ACL DELUSER` on another node removes the user
//! everywhere; redis-py `RedisCluster(username=..., password=...)` routes and is refused as
//! Redis words it. Needs `python3` with the `redis` package for the last part (skipped
//! loudly without it, failed when `RINGLET_REQUIRE_REDIS` is set).

mod common;

use common::{node_call, Conn};
use ringlet_codec::resp::Reply;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn text(r: &Reply) -> String {
    match r {
        Reply::Simple(s) | Reply::Error(s) | Reply::Bulk(s) => String::from_utf8_lossy(s).into(),
        Reply::Integer(i) => i.to_string(),
        Reply::Array(items) => items.iter().map(text).collect::<Vec<_>>().join("\n"),
        other => format!("{other:?}"),
    }
}

fn cmd(parts: &[&str]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.as_bytes().to_vec()).collect()
}

/// The replies of `cmds` on one connection to `addr`.
fn session(addr: SocketAddr, cmds: &[&[&str]]) -> Vec<String> {
    let mut c = Conn::open(addr).expect("connect");
    let cmds: Vec<Vec<Vec<u8>>> = cmds.iter().map(|c| cmd(c)).collect();
    c.pipeline(&cmds)
        .expect("replies")
        .iter()
        .map(text)
        .collect()
}

/// Wait (bounded) until `addr` lists `want` among its ACL users.
fn wait_users(addr: SocketAddr, want: &str, present: bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // A restarting node may accept and drop connections until it serves: retried.
        let r = Conn::open(addr)
            .and_then(|mut c| c.pipeline(&[cmd(&["ACL", "USERS"])]))
            .map(|mut v| v.remove(0));
        let has = matches!(&r, Some(Reply::Array(v)) if v.iter().any(|u| text(u) == want));
        if has == present {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{addr}: ACL USERS {r:?}, want {want} {present}"
        );
        std::thread::sleep(Duration::from_millis(50)); // poll interval
    }
}

#[test]
fn users_reach_every_node_through_the_control_plane() {
    let mut cluster = common::start(3, 1, &[]);
    let addrs = cluster.addrs();
    let r = session(
        addrs[0],
        &[&[
            "ACL",
            "SETUSER",
            "alice",
            "on",
            ">apw",
            "~app:*",
            "+@read",
            "+set",
            "-strlen",
            "+acl|whoami",
        ]],
    );
    assert_eq!(r, vec!["OK"]);
    // The reply waited for node 1's own map: it lists alice at once.
    let list0 = node_call(addrs[0], &[b"ACL", b"LIST"]);
    assert!(text(&list0).contains("user alice on #"), "{list0:?}");
    // Every node (the spare included) gets the same users, passwords as hashes only.
    for a in &addrs {
        wait_users(*a, "alice", true);
        assert_eq!(node_call(*a, &[b"ACL", b"LIST"]), list0, "{a}");
        assert!(!format!("{list0:?}").contains("apw"));
    }
    // A node restarted afterwards (new incarnation, empty) gets them with its first map.
    cluster.kill9(4);
    // SIGKILL is asynchronous: restarting before the old process is gone races it for the
    // port (the new one then fails to bind).
    let deadline = Instant::now() + Duration::from_secs(20);
    while Conn::open(addrs[3]).is_some() {
        assert!(Instant::now() < deadline, "node 4 did not die");
        std::thread::sleep(Duration::from_millis(50)); // poll interval
    }
    let _n4 = cluster.restart(4);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Conn::open(addrs[3]).is_none() {
        assert!(Instant::now() < deadline, "node 4 did not come back");
        std::thread::sleep(Duration::from_millis(50)); // poll interval
    }
    wait_users(addrs[3], "alice", true);
    assert_eq!(node_call(addrs[3], &[b"ACL", b"LIST"]), list0);
    // The same checks on every node: commands, keys, subcommands, WHOAMI, wrong passwords.
    for a in &addrs {
        let r = session(
            *a,
            &[
                &["AUTH", "alice", "wrong"],
                &["AUTH", "alice", "apw"],
                &["ACL", "WHOAMI"],
                &["GET", "other"],
                &["DEL", "app:x"],
                &["STRLEN", "app:x"],
                &["CONFIG", "GET", "maxmemory"],
                &["ACL", "SETUSER", "bob"],
            ],
        );
        assert_eq!(
            r,
            vec![
                "WRONGPASS invalid username-password pair or user is disabled.",
                "OK",
                "alice",
                "NOPERM this user has no permissions to access one of the keys used as arguments",
                "NOPERM this user has no permissions to run the 'del' command",
                "NOPERM this user has no permissions to run the 'strlen' command",
                "NOPERM this user has no permissions to run the 'config|get' command",
                "NOPERM this user has no permissions to run the 'acl|setuser' command",
            ],
            "{a}"
        );
        assert_eq!(
            session(*a, &[&["ACL", "DRYRUN", "alice", "get", "nope"]]),
            vec!["This user has no permissions to access the 'nope' key"]
        );
    }
    // A change on another node applies to connections already open elsewhere.
    let mut open = Conn::open(addrs[2]).unwrap();
    let before = open
        .pipeline(&[cmd(&["AUTH", "alice", "apw"]), cmd(&["ACL", "WHOAMI"])])
        .unwrap();
    assert_eq!(text(&before[1]), "alice");
    // CLIENT LIST names each connection's user.
    let list = text(&node_call(addrs[2], &[b"CLIENT", b"LIST"]));
    assert!(
        list.contains("user=alice") && list.contains("user=default"),
        "{list}"
    );
    // ... and its socket (Redis's `fd`; it was a constant 0): a real descriptor, one each.
    let fds: Vec<i64> = list
        .lines()
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("fd=")))
        .map(|f| f.parse().expect("a numeric fd"))
        .collect();
    assert!(fds.len() >= 2 && fds.iter().all(|&f| f > 2), "{list}");
    let distinct: std::collections::HashSet<_> = fds.iter().collect();
    assert_eq!(distinct.len(), fds.len(), "{list}");
    assert_eq!(
        session(addrs[1], &[&["ACL", "SETUSER", "alice", "+strlen"]]),
        vec!["OK"]
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // `app:{0}`'s slot may live elsewhere: MOVED means the ACL let it through.
        let r = text(&open.pipeline(&[cmd(&["STRLEN", "app:x"])]).unwrap()[0]);
        if !r.starts_with("NOPERM") {
            break;
        }
        assert!(Instant::now() < deadline, "STRLEN still refused: {r}");
        std::thread::sleep(Duration::from_millis(50)); // poll interval
    }
    // DELUSER on a third node: gone everywhere, and its open connections are closed.
    assert_eq!(
        session(addrs[1], &[&["ACL", "DELUSER", "alice", "nobody"]]),
        vec!["1"]
    );
    for a in &addrs {
        wait_users(*a, "alice", false);
    }
    let after = open.pipeline(&[cmd(&["GET", "app:x"])]);
    assert!(
        after.is_none() || after.is_some_and(|r| text(&r[0]).contains("was deleted")),
        "a deleted user's connection must not keep working"
    );
    // The default user of a cluster is each node's --requirepass: refused with the reason.
    let r = session(addrs[0], &[&["ACL", "SETUSER", "default", "off"]]);
    assert!(r[0].contains("--requirepass"), "{r:?}");
    // Unsupported rules are refused, never accepted and ignored.
    let r = session(
        addrs[0],
        &[&["ACL", "SETUSER", "carol", "%R~x"], &["ACL", "LOG"]],
    );
    assert!(r[0].contains("not supported by Ringlet"), "{r:?}");
    assert!(r[1].contains("not supported by Ringlet"), "{r:?}");
    wait_users(addrs[2], "carol", false);

    // redis-py RedisCluster as a named user.
    if !common::have_redis_py() {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/acl_cluster.py");
    let out = std::process::Command::new("python3")
        .args([script, &cluster.base.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "redis-py ACL script failed");
}
