//! ACL users on a single node (docs/design/acl.md), over real sockets: a change to a user
//! applies to its open connections at once, a deleted user's connections are closed, the
//! native protocol (no AUTH frame) is refused as soon as the default user is restricted, and
//! a node bound beyond loopback cannot lose its default password through ACL SETUSER. The
//! replies themselves are compared with a real Redis 7 in tests/py/test_acl_differential.py.

mod common;

use common::{start_ringlet, Raw};
use ringlet_client::{BlockingClient, ClientConfig};
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
fn native_protocol_serves_only_an_unrestricted_open_default_user() {
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
    // The native protocol has no AUTH and no ACL check: it must stop serving (also on the
    // connection already open) rather than bypass the key patterns.
    assert!(
        c.get(b"secret").is_err(),
        "native GET must not bypass the default user's ACL"
    );
    if let Ok(c2) = BlockingClient::connect(&format!("127.0.0.1:{port}"), cfg) {
        assert!(c2.get(b"secret").is_err());
    }
    // RESP applies the patterns.
    assert_eq!(
        admin.call(&[b"GET", b"secret"]),
        &b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"[..]
    );
    assert_eq!(admin.call(&[b"GET", b"public:1"]), b"$-1\r\n");
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
