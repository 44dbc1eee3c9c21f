//! The native protocol on the same client port as RESP, driven by the real Rust client
//! (`ringlet-client`): GET/SET/DEL/INCRBY/MGET with versions, NX/XX, CAS and TTL, and RESP
//! seeing the same data. Also: a node with a password refuses native connections (the native
//! protocol has no AUTH frame yet) instead of letting them bypass `requirepass`.

mod common;

use common::{start_ringlet, Raw};
use ringlet_client::{BlockingClient, ClientConfig, DelOutcome, SetOptions, SetOutcome};
use ringlet_types::Version;
use std::time::Duration;

fn client(port: u16) -> BlockingClient {
    BlockingClient::connect(&format!("127.0.0.1:{port}"), ClientConfig::default()).expect("connect")
}

#[test]
fn native_and_resp_share_one_port_and_one_keyspace() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let c = client(port);
    c.ping().unwrap();

    assert_eq!(c.get(b"k").unwrap().value, None);
    let s = c.set(b"k", b"v1", SetOptions::default()).unwrap();
    assert_eq!(s.value, SetOutcome::Stored);
    let v1 = s.version;
    assert!(v1 > Version::ZERO);
    let g = c.get(b"k").unwrap();
    assert_eq!(g.value.as_deref(), Some(&b"v1"[..]));
    assert_eq!(g.version, v1, "GET returns the version SET assigned");

    // NX / XX.
    assert_eq!(
        c.set(b"k", b"x", SetOptions::default().nx()).unwrap().value,
        SetOutcome::NotStored
    );
    assert_eq!(
        c.set(b"absent", b"x", SetOptions::default().xx())
            .unwrap()
            .value,
        SetOutcome::NotStored
    );

    // CAS: a stale version is refused and told the current one; the right one wins.
    let stale = c
        .set(b"k", b"v2", SetOptions::default().cas(Version::ZERO))
        .unwrap();
    assert_eq!(stale.value, SetOutcome::CasMismatch);
    assert_eq!(stale.version, v1);
    let s2 = c.set(b"k", b"v2", SetOptions::default().cas(v1)).unwrap();
    assert_eq!(s2.value, SetOutcome::Stored);
    assert!(s2.version > v1);

    // RESP sees what native wrote, and the other way round.
    let mut r = Raw::connect(port);
    assert_eq!(r.call(&[b"GET", b"k"]), b"$2\r\nv2\r\n");
    assert_eq!(r.call(&[b"SET", b"n", b"41"]), b"+OK\r\n");
    assert_eq!(c.incr_by(b"n", 1).unwrap().value, 42);
    assert_eq!(r.call(&[b"GET", b"n"]), b"$2\r\n42\r\n");

    // TTL set natively shows in RESP TTL.
    c.set(
        b"t",
        b"v",
        SetOptions::default().ttl(Duration::from_secs(100)),
    )
    .unwrap();
    let ttl = r.call(&[b"TTL", b"t"]);
    assert!(
        ttl == b":100\r\n" || ttl == b":99\r\n",
        "{:?}",
        String::from_utf8_lossy(&ttl)
    );

    // MGET mixes hits and misses, in order.
    let m = c.mget(&[&b"k"[..], b"nope", b"n"]).unwrap().value;
    let vals: Vec<Option<&[u8]>> = m.iter().map(|x| x.value.as_deref()).collect();
    assert_eq!(vals, vec![Some(&b"v2"[..]), None, Some(&b"42"[..])]);

    // DEL with a wrong CAS version is refused; then deleted; then not found.
    assert_eq!(
        c.del(b"k", Some(v1)).unwrap().value,
        DelOutcome::CasMismatch
    );
    assert_eq!(c.del(b"k", None).unwrap().value, DelOutcome::Deleted);
    assert_eq!(c.del(b"k", None).unwrap().value, DelOutcome::NotFound);
    assert_eq!(r.call(&[b"EXISTS", b"k"]), b":0\r\n");

    // INCRBY on a non-integer is a typed error, not a dropped connection.
    r.call(&[b"SET", b"s", b"abc"]);
    assert!(c.incr_by(b"s", 1).is_err());
    c.ping().unwrap();
}

#[test]
fn native_refused_when_password_required() {
    let node = start_ringlet(Some("pw"));
    let port = node.local_addr().port();
    let c = BlockingClient::connect(
        &format!("127.0.0.1:{port}"),
        ClientConfig {
            timeout: Duration::from_secs(2),
            retries_max: 0,
            ..ClientConfig::default()
        },
    );
    if let Ok(c) = c {
        assert!(
            c.get(b"k").is_err(),
            "native GET must not bypass requirepass"
        );
    }
    // RESP still works with AUTH.
    let mut r = Raw::connect(port);
    assert_eq!(
        r.call(&[b"GET", b"k"]),
        b"-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(r.call(&[b"AUTH", b"pw"]), b"+OK\r\n");
    assert_eq!(r.call(&[b"GET", b"k"]), b"$-1\r\n");
}
