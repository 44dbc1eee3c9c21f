//! ACL users on a single node (docs/design/acl.md), over real sockets: a change to a user
//! applies to its open connections at once, a deleted user's connections are closed, the
//! native protocol logs in with AUTH and is held to the same limits, and
//! a node bound beyond loopback cannot lose its default password through ACL SETUSER. The
//! replies themselves are compared with a real Redis 7 in tests/py/test_acl_differential.py.

mod common;

use common::{start_ringlet, Raw};
use ringlet_client::{BlockingClient, ClientConfig, Credentials, SetOptions};
use ringlet_codec::native::Status;
use ringlet_server::config::Config;
use ringlet_server::server::Server;
use std::time::Duration;

#[test]
fn changes_apply_to_open_connections_and_deleted_users_are_disconnected() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let mut admin = Raw::connect(port);
    assert_eq!(
        admin.call(&[b"ACL", b"SETUSER", b"alice", b"on", b">apw", b"~k*", b"+get", b"+set"]),
        b"+OK\r\n"
    );
    let mut alice = Raw::connect(port);
    assert_eq!(alice.call(&[b"AUTH", b"alice", b"apw"]), b"+OK\r\n");
    // CLIENT LIST names each connection's user.
    let list = String::from_utf8_lossy(&admin.call(&[b"CLIENT", b"LIST"])).into_owned();
    assert!(
        list.contains("user=alice") && list.contains("user=default"),
        "{list}"
    );
    assert_eq!(alice.call(&[b"SET", b"k1", b"v"]), b"+OK\r\n");
    assert_eq!(alice.call(&[b"GET", b"k1"]), b"$1\r\nv\r\n");
    assert_eq!(
        alice.call(&[b"GET", b"x"]),
        &b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"[..]
    );
    // MULTI is a command like any other: alice was not given it.
    assert_eq!(
        alice.call(&[b"MULTI"]),
        &b"-NOPERM this user has no permissions to run the 'multi' command\r\n"[..]
    );
    assert_eq!(
        admin.call(&[b"ACL", b"SETUSER", b"alice", b"-get"]),
        b"+OK\r\n"
    );
    assert_eq!(
        alice.call(&[b"GET", b"k1"]),
        &b"-NOPERM this user has no permissions to run the 'get' command\r\n"[..]
    );
    assert_eq!(admin.call(&[b"ACL", b"DELUSER", b"alice"]), b":1\r\n");
    alice.send(&common::encode(&[b"SET", b"k1", b"w"]));
    let rest = alice.read_to_close();
    assert!(
        String::from_utf8_lossy(&rest).contains("was deleted"),
        "{}",
        String::from_utf8_lossy(&rest)
    );
    assert_eq!(
        admin.call(&[b"GET", b"k1"]),
        b"$1\r\nv\r\n",
        "the write was refused"
    );
}

#[test]
fn native_protocol_applies_the_default_users_limits() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let cfg = ClientConfig {
        timeout: Duration::from_secs(2),
        retries_max: 0,
        ..ClientConfig::default()
    };
    let c = BlockingClient::connect(&format!("127.0.0.1:{port}"), cfg.clone()).expect("connect");
    c.get(b"k").expect("native GET with an open default user");
    let mut admin = Raw::connect(port);
    assert_eq!(
        admin.call(&[b"ACL", b"SETUSER", b"default", b"resetkeys", b"~public:*"]),
        b"+OK\r\n"
    );
    // The native requests are checked as the RESP commands they stand for, on the
    // connection already open too: the key patterns hold, never bypassed.
    let denied = c
        .get(b"secret")
        .expect_err("native GET must not bypass the key patterns");
    assert_eq!(status_of(&denied), Some(Status::DENIED), "{denied}");
    assert!(denied.to_string().contains("NOPERM"), "{denied}");
    assert!(c.get(b"public:1").expect("allowed key").value.is_none());
    c.set(b"public:1", b"v", SetOptions::default())
        .expect("allowed SET");
    // RESP applies the same patterns.
    assert_eq!(
        admin.call(&[b"GET", b"secret"]),
        &b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"[..]
    );
    assert_eq!(admin.call(&[b"GET", b"public:1"]), b"$1\r\nv\r\n");
}

fn status_of(e: &ringlet_client::Error) -> Option<Status> {
    match e {
        ringlet_client::Error::Server { status, .. } => Some(*status),
        _ => None,
    }
}

/// AUTH over the native protocol: before it, a node with a password answers `DENIED`
/// (`NOAUTH`); a wrong password is refused (`WRONGPASS`); the right one logs the connection
/// in, as the password's user or an ACL user, whose command and key limits then hold.
#[test]
fn native_auth_logs_in_as_a_user_and_its_limits_hold() {
    let node = start_ringlet(Some("pw"));
    let port = node.local_addr().port();
    let addr = format!("127.0.0.1:{port}");
    let cfg = |auth: Option<(&str, &str)>| ClientConfig {
        timeout: Duration::from_secs(2),
        retries_max: 0,
        auth: auth.map(|(u, p)| Credentials {
            user: u.into(),
            password: p.into(),
        }),
        ..ClientConfig::default()
    };
    // No AUTH: refused, with RESP's NOAUTH text.
    let anon = BlockingClient::connect(&addr, cfg(None)).expect("connect");
    let e = anon.get(b"k").expect_err("no AUTH");
    assert_eq!(status_of(&e), Some(Status::DENIED), "{e}");
    assert!(e.to_string().contains("NOAUTH"), "{e}");
    // A wrong password: the connection's AUTH is refused, nothing runs.
    let wrong = BlockingClient::connect(&addr, cfg(Some(("", "nope"))));
    let e = match wrong {
        Ok(c) => c.get(b"k").expect_err("wrong password"),
        Err(e) => e,
    };
    assert_eq!(status_of(&e), Some(Status::DENIED), "{e}");
    assert!(e.to_string().contains("WRONGPASS"), "{e}");
    // The password of the default user.
    let ok = BlockingClient::connect(&addr, cfg(Some(("", "pw")))).expect("connect");
    ok.set(b"app:1", b"v", SetOptions::default())
        .expect("SET after AUTH");
    ok.set(b"other", b"w", SetOptions::default())
        .expect("SET after AUTH");
    // An ACL user limited to app:* and to reads.
    let mut admin = Raw::connect(port);
    assert_eq!(admin.call(&[b"AUTH", b"pw"]), b"+OK\r\n");
    assert_eq!(
        admin.call(&[b"ACL", b"SETUSER", b"reader", b"on", b">rpw", b"~app:*", b"+get", b"+mget"]),
        b"+OK\r\n"
    );
    let reader = BlockingClient::connect(&addr, cfg(Some(("reader", "rpw")))).expect("connect");
    assert_eq!(
        reader.get(b"app:1").expect("allowed").value.as_deref(),
        Some(&b"v"[..])
    );
    let e = reader.get(b"other").expect_err("key outside ~app:*");
    assert!(e.to_string().contains("NOPERM"), "{e}");
    let e = reader
        .set(b"app:2", b"x", SetOptions::default())
        .expect_err("no +set");
    assert_eq!(status_of(&e), Some(Status::DENIED), "{e}");
    assert!(e.to_string().contains("NOPERM"), "{e}");
    let e = reader
        .mget(&[&b"app:1"[..], b"other"])
        .expect_err("one key outside");
    assert!(e.to_string().contains("NOPERM"), "{e}");
    assert_eq!(
        admin.call(&[b"GET", b"app:2"]),
        b"$-1\r\n",
        "the refused SET wrote"
    );
}

#[test]
fn a_node_bound_beyond_loopback_keeps_its_default_password() {
    let cfg = Config {
        bind: std::net::IpAddr::from([0, 0, 0, 0]),
        port: 0,
        threads: 1,
        memory_mb: 16,
        requirepass: Some("pw".into()),
        io: common::io_from_env(),
        ..Config::default()
    };
    let h = Server::start(cfg).expect("start");
    let mut r = Raw::connect(h.local_addr().port());
    assert_eq!(r.call(&[b"AUTH", b"pw"]), b"+OK\r\n");
    let e = r.call(&[b"ACL", b"SETUSER", b"default", b"nopass"]);
    assert!(
        String::from_utf8_lossy(&e).contains("non-loopback"),
        "{}",
        String::from_utf8_lossy(&e)
    );
    // Named users with passwords are fine, and the default password still works.
    assert_eq!(
        r.call(&[b"ACL", b"SETUSER", b"bob", b"on", b">b"]),
        b"+OK\r\n"
    );
    let mut r2 = Raw::connect(h.local_addr().port());
    assert_eq!(
        r2.call(&[b"GET", b"k"]),
        b"-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(r2.call(&[b"AUTH", b"default", b"pw"]), b"+OK\r\n");
}
