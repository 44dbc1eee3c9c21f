//! The native protocol on the same client port as RESP, driven by the real Rust client
//! (`ringlet-client`): GET/SET/DEL/INCRBY/MGET with versions, NX/XX, CAS and TTL, and RESP
//! seeing the same data. Also: a node with a password refuses native connections (the native
//! protocol has no AUTH frame yet) instead of letting them bypass `requirepass`.

mod common;

use common::{start_ringlet, Raw};
use ringlet_client::{
    BlockingClient, ChaseOptions, ClientConfig, DelOutcome, SetOptions, SetOutcome,
};
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

    // INFO commandstats counts native requests under the RESP command each stands for.
    let info = String::from_utf8_lossy(&r.call(&[b"INFO", b"commandstats"])).into_owned();
    for want in [
        "cmdstat_incrby:calls=2,",
        "cmdstat_mget:calls=1,",
        "cmdstat_del:calls=3,",
        // Six native SETs and RESP's two (batched) ones.
        "cmdstat_set:calls=8,",
    ] {
        assert!(info.contains(want), "{want} in {info}");
    }
    let incrby = info
        .lines()
        .find(|l| l.starts_with("cmdstat_incrby:"))
        .unwrap();
    assert!(incrby.ends_with("failed_calls=1"), "{incrby}");
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

/// RESP CHASE's reply as `(entries, stop)`, each entry `(key, depth, [attr, value, ...])`.
type Walk = (Vec<(String, i64, Vec<String>)>, String);

fn resp_chase(r: &mut Raw, args: &[&[u8]]) -> Walk {
    let mut argv: Vec<&[u8]> = vec![b"CHASE"];
    argv.extend_from_slice(args);
    let v = common::Val::parse(&r.call(&argv));
    let items = v.items();
    let (stop, entries) = items.split_last().expect("stop status");
    let entries = entries
        .iter()
        .map(|e| {
            let e = e.items();
            let depth = match &e[1] {
                common::Val::Line(b':', n) => std::str::from_utf8(n).unwrap().parse().unwrap(),
                other => panic!("depth {other:?}"),
            };
            let attrs = e[2].items().iter().map(common::Val::text).collect();
            (e[0].text(), depth, attrs)
        })
        .collect();
    (entries, stop.text())
}

fn native_chase(c: &BlockingClient, key: &[u8], links: &[&str], opts: &ChaseOptions) -> Walk {
    let r = c.chase(key, links, opts).expect("native CHASE").value;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let entries = r
        .entries
        .iter()
        .map(|e| {
            let attrs = e
                .attrs
                .iter()
                .flat_map(|(a, v)| [text(a), text(v)])
                .collect();
            (text(&e.key), i64::from(e.depth), attrs)
        })
        .collect();
    (entries, r.stop.as_str().to_string())
}

#[test]
fn native_chase_answers_as_resp_chase() {
    let node = start_ringlet(None);
    let port = node.local_addr().port();
    let c = client(port);
    let mut r = Raw::connect(port);
    // u:1 -> u:2 u:3; u:2 -> u:3 u:4 (a diamond); u:3 -> u:1 (a cycle); u:4 is a string;
    // u:5 is reached only through `likes`.
    for (k, name) in [("u:1", "ann"), ("u:2", "bob"), ("u:3", "cy")] {
        assert_eq!(
            r.call(&[b"HSET", k.as_bytes(), b"name", name.as_bytes()]),
            b":1\r\n"
        );
    }
    r.call(&[b"LINK", b"ADD", b"u:1", b"follows", b"u:2", b"u:3"]);
    r.call(&[b"LINK", b"ADD", b"u:2", b"follows", b"u:3", b"u:4"]);
    r.call(&[b"LINK", b"SET", b"u:3", b"follows", b"u:1"]);
    r.call(&[b"LINK", b"SET", b"u:3", b"likes", b"u:5"]);
    r.call(&[b"SET", b"u:4", b"plain"]);
    r.call(&[b"HSET", b"u:5", b"name", b"eve"]);

    type Case<'a> = (Vec<&'a [u8]>, Vec<&'a str>, ChaseOptions);
    let cases: Vec<Case> = vec![
        (vec![b"follows"], vec!["follows"], ChaseOptions::default()),
        (
            vec![b"follows", b"likes", b"DEPTH", b"3"],
            vec!["follows", "likes"],
            ChaseOptions::default().depth(3),
        ),
        (
            vec![b"follows", b"DEPTH", b"2", b"FIELDS", b"name", b"nope"],
            vec!["follows"],
            ChaseOptions::default().depth(2).fields(&["name", "nope"]),
        ),
        (
            vec![b"follows", b"DEPTH", b"8", b"LIMIT", b"2"],
            vec!["follows"],
            ChaseOptions::default().depth(8).limit(2),
        ),
        (
            vec![b"follows", b"DEPTH", b"0"],
            vec!["follows"],
            ChaseOptions::default().depth(0),
        ),
    ];
    for (resp_args, links, opts) in cases {
        let mut args: Vec<&[u8]> = vec![b"u:1"];
        args.extend(resp_args);
        let want = resp_chase(&mut r, &args);
        assert!(!want.0.is_empty());
        assert_eq!(native_chase(&c, b"u:1", &links, &opts), want, "{opts:?}");
    }
    // Depth 3 over both link kinds reaches u:5; LIMIT 2 says it stopped early.
    let all = native_chase(
        &c,
        b"u:1",
        &["follows", "likes"],
        &ChaseOptions::default().depth(3),
    );
    let keys: Vec<&str> = all.0.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(keys, ["u:1", "u:2", "u:3", "u:5"]);
    assert_eq!(all.1, "complete");
    let cut = native_chase(
        &c,
        b"u:1",
        &["follows"],
        &ChaseOptions::default().depth(8).limit(2),
    );
    assert_eq!((cut.0.len(), cut.1.as_str()), (2, "limit"));
    // A missing root: no entries, complete.
    assert_eq!(
        native_chase(&c, b"nobody", &["follows"], &ChaseOptions::default()),
        (vec![], "complete".to_string())
    );

    // The client refuses arguments outside the node's bounds before sending...
    for bad in [
        ChaseOptions::default().depth(9),
        ChaseOptions::default().limit(0),
        ChaseOptions::default().limit(100_001),
        ChaseOptions::default().fields::<&str>(&[]),
    ] {
        assert!(matches!(
            c.chase(b"u:1", &["follows"], &bad),
            Err(ringlet_client::Error::Server { status, .. })
                if status == ringlet_client::Status::BAD_REQUEST
        ));
    }
    let none: &[&str] = &[];
    assert!(c.chase(b"u:1", none, &ChaseOptions::default()).is_err());
    // ...and the node refuses them too, with RESP CHASE's error text (a raw frame).
    let mut frame = Vec::new();
    ringlet_codec::native::encode_chase::<_, &str, &str>(
        &mut frame,
        7,
        b"u:1",
        &["follows"],
        9,
        10,
        None,
    );
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut s, &frame).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (f, _) = loop {
        if let Some(x) = ringlet_codec::native::decode_response_frame(&buf).unwrap() {
            break x;
        }
        let n = std::io::Read::read(&mut s, &mut chunk).unwrap();
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    };
    assert_eq!(f.status, ringlet_client::Status::BAD_REQUEST);
    assert_eq!(
        f.body,
        ringlet_codec::native::ResponseBody::Message(b"ERR DEPTH must be between 0 and 8")
    );
}

/// LINK SET/ADD on a real node fill location hints that a one-sided reader follows: a
/// `ShmReader::chase` over the node's shared memory gives RESP CHASE's entries with every
/// hinted hop read directly (the root has none); a link made before its target exists gets
/// none and is looked up by key.
#[test]
fn link_hints_filled_by_the_node_are_followed_one_sided() {
    use ringlet_record::chase::Chase;
    let dir = std::env::temp_dir().join(format!("ringlet-native-hints-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("s");
    let cfg = ringlet_server::config::Config {
        port: 0,
        threads: 1,
        memory_mb: 64,
        shm_socket: Some(sock.clone()),
        io: common::io_from_env(),
        ..ringlet_server::config::Config::default()
    };
    let node = ringlet_server::server::Server::start(cfg).expect("start");
    let mut r = Raw::connect(node.local_addr().port());
    for i in 0..20 {
        r.call(&[
            b"HSET",
            format!("u:{i}").as_bytes(),
            b"name",
            format!("n{i}").as_bytes(),
        ]);
    }
    for i in 0..20 {
        let (a, b) = (format!("u:{i}"), format!("u:{}", (i * 7 + 3) % 20));
        r.call(&[b"LINK", b"ADD", a.as_bytes(), b"follows", b.as_bytes()]);
    }
    // A link to a key that does not exist yet: no hint; the key is created afterwards.
    r.call(&[b"LINK", b"ADD", b"u:0", b"follows", b"late"]);
    r.call(&[b"HSET", b"late", b"name", b"l"]);
    let want = resp_chase(
        &mut r,
        &[b"u:0", b"follows", b"DEPTH", b"8", b"LIMIT", b"1000"],
    );
    let links = vec![b"follows".to_vec()];
    let mut shm = ringlet_shm::ShmReader::connect(&sock).unwrap();
    let walk = Chase::new(b"u:0".to_vec(), links.clone(), 8, 1000, None).unwrap();
    let got = shm
        .chase_within(walk, &links, Duration::from_secs(600))
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let got: Walk = (
        got.entries
            .iter()
            .map(|e| {
                let attrs = e
                    .attrs
                    .iter()
                    .flat_map(|(a, v)| [text(a), text(v)])
                    .collect();
                (text(&e.key), i64::from(e.depth), attrs)
            })
            .collect(),
        got.stop.as_str().to_string(),
    );
    assert_eq!(got, want);
    let visited = want.0.len() as u64;
    let st = shm.stats();
    // Every hop but the root and `late` was read at the hint LINK filled.
    assert_eq!(st.hint_hits, visited - 2, "{st:?}");
    assert_eq!((st.hint_missing, st.hint_lookups), (2, 2), "{st:?}");
}

/// `--index-keys` (Config::index_keys) sizes the index at start and `CONFIG SET index-keys`
/// grows it at run time, never shrinks it; CONFIG GET reports what the index holds before it
/// grows. A location hint taken after the growth still names the readers' table after
/// writing up to that many keys (`ringlet load` asks for this before its pass 2).
#[test]
fn config_set_index_keys_presizes_the_index() {
    let index_keys = |r: &mut Raw| -> u64 {
        let reply = r.call(&[b"CONFIG", b"GET", b"index-keys"]);
        let text = String::from_utf8_lossy(&reply).into_owned();
        let last = text.trim_end().rsplit("\r\n").next().unwrap().to_string();
        last.parse()
            .unwrap_or_else(|_| panic!("CONFIG GET index-keys: {text:?}"))
    };
    let cfg = ringlet_server::config::Config {
        port: 0,
        threads: 1,
        memory_mb: 64,
        index_keys: Some(50_000),
        io: common::io_from_env(),
        ..ringlet_server::config::Config::default()
    };
    let node = ringlet_server::server::Server::start(cfg).expect("start");
    let mut r = Raw::connect(node.local_addr().port());
    let start = index_keys(&mut r);
    assert!(start >= 50_000, "--index-keys 50000 gave {start}");
    assert_eq!(
        r.call(&[b"CONFIG", b"SET", b"index-keys", b"200000"]),
        b"+OK\r\n"
    );
    let grown = index_keys(&mut r);
    assert!(grown >= 200_000, "{grown}");
    assert_eq!(
        r.call(&[b"CONFIG", b"SET", b"index-keys", b"10"]),
        b"+OK\r\n"
    );
    assert_eq!(index_keys(&mut r), grown, "never shrinks");
    let bad = r.call(&[b"CONFIG", b"SET", b"index-keys", b"-1"]);
    assert!(
        bad.starts_with(b"-ERR CONFIG SET failed (possibly related to argument 'index-keys')"),
        "{}",
        String::from_utf8_lossy(&bad)
    );
    assert_eq!(index_keys(&mut r), grown);
}
