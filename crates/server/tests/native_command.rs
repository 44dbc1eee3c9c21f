//! The native COMMAND opcode (12) on a single node, through the real Rust client: TTLs,
//! hashes/records and links run through the RESP command layer and seen the same over RESP;
//! an ACL user's limits hold (DENIED); commands a native connection cannot run (SUBSCRIBE,
//! MULTI, SELECT, HELLO, AUTH) are refused with UNSUPPORTED and a reason; a refused command
//! is an error reply, not a transport error.

mod common;

use bytes::Bytes;
use common::{start_ringlet, Raw};
use ringlet_client::{BlockingClient, ClientConfig, Credentials, Reply, SetOptions, Status, Ttl};
use std::time::Duration;

fn client(port: u16) -> BlockingClient {
    BlockingClient::connect(&format!("127.0.0.1:{port}"), ClientConfig::default()).expect("connect")
}

fn status_of(e: &ringlet_client::Error) -> Option<Status> {
    match e {
        ringlet_client::Error::Server { status, .. } => Some(*status),
        _ => None,
    }
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[test]
fn ttls_through_command() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let c = client(port);
    c.set(b"t", b"v", SetOptions::default()).unwrap();
    assert_eq!(c.ttl(b"t").unwrap(), Ttl::NoExpiry);
    assert_eq!(c.ttl(b"missing").unwrap(), Ttl::NoKey);
    assert!(c.expire(b"t", 100).unwrap());
    assert!(!c.expire(b"missing", 100).unwrap());
    match c.ttl(b"t").unwrap() {
        Ttl::Remaining(d) => assert!(d <= Duration::from_secs(100) && d >= Duration::from_secs(98)),
        other => panic!("{other:?}"),
    }
    // RESP sees the TTL the native command set.
    let mut r = Raw::connect(port);
    let t = r.call(&[b"TTL", b"t"]);
    assert!(
        t == b":100\r\n" || t == b":99\r\n",
        "{:?}",
        String::from_utf8_lossy(&t)
    );
    assert!(c.persist(b"t").unwrap());
    assert!(!c.persist(b"t").unwrap(), "nothing left to persist");
    assert_eq!(c.pttl(b"t").unwrap(), Ttl::NoExpiry);
    assert!(c.pexpire(b"t", Duration::from_millis(50_000)).unwrap());
    match c.pttl(b"t").unwrap() {
        Ttl::Remaining(d) => {
            assert!(d <= Duration::from_millis(50_000) && d > Duration::from_secs(40))
        }
        other => panic!("{other:?}"),
    }
    // A key with a short TTL is gone after it (the read after expiry answers a miss).
    assert!(c.pexpire(b"t", Duration::from_millis(30)).unwrap());
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(c.get(b"t").unwrap().value, None);
    assert_eq!(c.ttl(b"t").unwrap(), Ttl::NoKey);
    // SET with EX through the command layer, and the raw reply shape.
    assert_eq!(
        c.command(&["SET", "ex", "v", "EX", "50"]).unwrap(),
        Reply::Simple(b"OK".to_vec())
    );
    assert!(matches!(c.ttl(b"ex").unwrap(), Ttl::Remaining(_)));
}

#[test]
fn hashes_and_links_through_command() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let c = client(port);
    assert_eq!(
        c.hset(b"user:1", &[("name", "ada"), ("age", "36")])
            .unwrap(),
        2
    );
    assert_eq!(c.hset(b"user:1", &[("age", "37")]).unwrap(), 0);
    assert_eq!(c.hget(b"user:1", b"name").unwrap(), Some(b("ada")));
    assert_eq!(c.hget(b"user:1", b"nope").unwrap(), None);
    assert_eq!(
        c.hmget(b"user:1", &["age", "nope", "name"]).unwrap(),
        vec![Some(b("37")), None, Some(b("ada"))]
    );
    let mut all = c.hgetall(b"user:1").unwrap();
    all.sort();
    assert_eq!(all, vec![(b("age"), b("37")), (b("name"), b("ada"))]);
    assert_eq!(c.hincrby(b"user:1", b"age", 5).unwrap(), 42);
    assert_eq!(c.hdel(b"user:1", &["age", "nope"]).unwrap(), 1);
    assert_eq!(c.hgetall(b"missing").unwrap(), vec![]);
    // The RESP3 map shape arrives as is through command().
    assert!(matches!(
        c.command(&["HGETALL", "user:1"]).unwrap(),
        Reply::Map(m) if m.len() == 1
    ));
    // A hash command on a string: an error reply, mapped to WRONG_TYPE by the helper.
    c.set(b"s", b"v", SetOptions::default()).unwrap();
    let e = c.hget(b"s", b"f").unwrap_err();
    assert_eq!(status_of(&e), Some(Status::WRONG_TYPE), "{e}");
    assert!(matches!(
        c.command(&["HGET", "s", "f"]).unwrap(),
        Reply::Error(m) if m.starts_with(b"WRONGTYPE")
    ));
    // Non-integer HINCRBY: an error, not a transport failure.
    c.hset(b"user:1", &[("txt", "abc")]).unwrap();
    assert!(c.hincrby(b"user:1", b"txt", 1).is_err());

    // Links: SET, ADD (a list), GET in order, DEL; HGETALL shows a link as its target.
    assert!(c.link_set(b"user:1", b"best", b"user:2").unwrap());
    assert!(
        !c.link_set(b"user:1", b"best", b"user:3").unwrap(),
        "replaced, not new"
    );
    assert_eq!(c.link_get(b"user:1", b"best").unwrap(), vec![b("user:3")]);
    assert_eq!(
        c.link_add(b"user:1", b"friends", &["user:2", "user:3"])
            .unwrap(),
        2
    );
    assert_eq!(c.link_add(b"user:1", b"friends", &["user:4"]).unwrap(), 3);
    assert_eq!(
        c.link_get(b"user:1", b"friends").unwrap(),
        vec![b("user:2"), b("user:3"), b("user:4")]
    );
    assert_eq!(c.hget(b"user:1", b"best").unwrap(), Some(b("user:3")));
    assert!(c.link_del(b"user:1", b"friends").unwrap());
    assert!(!c.link_del(b"user:1", b"friends").unwrap());
    assert_eq!(
        c.link_get(b"user:1", b"friends").unwrap(),
        Vec::<Bytes>::new()
    );
    // RESP sees what the native commands wrote.
    let mut r = Raw::connect(port);
    assert_eq!(r.call(&[b"HGET", b"user:1", b"name"]), b"$3\r\nada\r\n");
    // Keyless commands run too; unknown ones answer the command layer's error.
    assert_eq!(
        c.command(&["PING"]).unwrap(),
        Reply::Simple(b"PONG".to_vec())
    );
    assert!(matches!(c.command(&["DBSIZE"]).unwrap(), Reply::Integer(n) if n >= 2));
    assert!(matches!(
        c.command(&["NOSUCHCMD", "x"]).unwrap(),
        Reply::Error(m) if m.starts_with(b"ERR unknown command")
    ));
    assert!(matches!(
        c.command(&["HSET", "k"]).unwrap(),
        Reply::Error(m) if m.starts_with(b"ERR wrong number of arguments")
    ));
}

#[test]
fn connection_state_commands_are_refused() {
    let node = start_ringlet(None);
    let c = client(node.local_addr().port());
    for argv in [
        &["SUBSCRIBE", "ch"][..],
        &["subscribe", "ch"],
        &["PSUBSCRIBE", "c*"],
        &["MONITOR"],
        &["MULTI"],
        &["EXEC"],
        &["SELECT", "1"],
        &["HELLO", "3"],
        &["AUTH", "pw"],
        &["CLIENT", "REPLY", "OFF"],
        &["CLIENT", "SETNAME", "x"],
        &["WAIT", "0", "0"],
        &["RESET"],
    ] {
        let e = c.command(argv).expect_err("refused");
        assert_eq!(status_of(&e), Some(Status::UNSUPPORTED), "{argv:?}: {e}");
    }
    let e = c.command(&["SUBSCRIBE", "ch"]).unwrap_err();
    assert!(e.to_string().contains("use RESP"), "{e}");
    // The connection is still usable after a refusal, and CLIENT LIST (read-only) runs.
    c.set(b"k", b"v", SetOptions::default()).unwrap();
    assert!(matches!(
        c.command(&["CLIENT", "LIST"]).unwrap(),
        Reply::Verbatim { .. } | Reply::Bulk(_)
    ));
}

#[test]
fn acl_limits_hold_for_command() {
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
    // Before AUTH: DENIED with NOAUTH, nothing runs.
    let anon = BlockingClient::connect(&addr, cfg(None)).expect("connect");
    let e = anon.command(&["HSET", "app:1", "f", "v"]).unwrap_err();
    assert_eq!(status_of(&e), Some(Status::DENIED), "{e}");
    assert!(e.to_string().contains("NOAUTH"), "{e}");
    let mut admin = Raw::connect(port);
    assert_eq!(admin.call(&[b"AUTH", b"pw"]), b"+OK\r\n");
    assert_eq!(admin.call(&[b"EXISTS", b"app:1"]), b":0\r\n");
    assert_eq!(
        admin.call(&[b"ACL", b"SETUSER", b"reader", b"on", b">rpw", b"~app:*", b"+hget", b"+ttl"]),
        b"+OK\r\n"
    );
    assert_eq!(admin.call(&[b"HSET", b"app:1", b"f", b"v"]), b":1\r\n");
    assert_eq!(admin.call(&[b"HSET", b"other", b"f", b"v"]), b":1\r\n");
    let reader = BlockingClient::connect(&addr, cfg(Some(("reader", "rpw")))).expect("connect");
    assert_eq!(reader.hget(b"app:1", b"f").unwrap(), Some(b("v")));
    assert_eq!(reader.ttl(b"app:1").unwrap(), Ttl::NoExpiry);
    // A command the user lacks: DENIED with NOPERM, and it did not run.
    let e = reader.hset(b"app:1", &[("f", "w")]).unwrap_err();
    assert_eq!(status_of(&e), Some(Status::DENIED), "{e}");
    assert!(e.to_string().contains("NOPERM"), "{e}");
    assert_eq!(admin.call(&[b"HGET", b"app:1", b"f"]), b"$1\r\nv\r\n");
    // A key outside the user's patterns.
    let e = reader.hget(b"other", b"f").unwrap_err();
    assert_eq!(status_of(&e), Some(Status::DENIED), "{e}");
    // The password's user may do anything.
    let ok = BlockingClient::connect(&addr, cfg(Some(("", "pw")))).expect("connect");
    assert_eq!(ok.hset(b"app:1", &[("g", "w")]).unwrap(), 1);
}
