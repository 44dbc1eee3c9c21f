//! A full cluster refuses what it cannot store and keeps everything it acknowledged
//! (issue 10, case 1: before, a cluster with `--memory 8 MiB` answered OK to 20,000 SETs of
//! 1 KiB and kept 7,552 of them).
//!
//! Each test starts real node processes with a small memory budget, writes 1 KiB values
//! until well past it, and checks that:
//! * some writes were refused with Redis's `-OOM ...` text (the node really filled up);
//! * every write answered OK reads back with exactly its value;
//! * a refused write left nothing behind (a fresh key stays absent; a refused overwrite
//!   leaves the old value);
//! * deleting keys gives room back, and new writes succeed again.
//!
//! One test per memgest kind: `rep:3` (the default) and `ec:3+2` (5 nodes) refuse; a `none`
//! memgest is a cache and evicts instead (its own test).

mod common;

use common::{Client, Res};
use ringlet_codec::resp::Reply;
use std::time::{Duration, Instant};

const MEMORY: &str = "8388608"; // 8 MiB per node
const VALUE_BYTES: usize = 1024;

fn cmd(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

fn value_for(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(VALUE_BYTES, b'a' + (i % 26) as u8);
    v
}

fn call(c: &mut Client, parts: &[&[u8]], write: bool) -> Reply {
    match c.call(cmd(parts), write, Instant::now() + Duration::from_secs(30)) {
        Res::Ok(r) => r,
        Res::Io => panic!(
            "transport failure on {:?}",
            String::from_utf8_lossy(parts[0])
        ),
    }
}

fn is_oom(r: &Reply) -> bool {
    matches!(r, Reply::Error(e) if e.starts_with(b"OOM command not allowed"))
}

/// Write `n` keys (optionally under `memgest`) until OOM shows up; returns the indexes that
/// were acknowledged. Panics on any answer other than OK or OOM.
fn fill(c: &mut Client, prefix: &str, n: usize, memgest: Option<&str>) -> (Vec<usize>, usize) {
    let mut acked = Vec::new();
    let mut refused = 0;
    for i in 0..n {
        let k = format!("{prefix}:{i}");
        let v = value_for(i);
        let mut parts: Vec<&[u8]> = vec![b"SET", k.as_bytes(), &v];
        if let Some(m) = memgest {
            parts.push(b"MEMGEST");
            parts.push(m.as_bytes());
        }
        let r = call(c, &parts, true);
        if r == Reply::ok() {
            acked.push(i);
        } else if is_oom(&r) {
            refused += 1;
            // Past the first few hundred refusals the node is clearly full.
            if refused > 300 {
                break;
            }
        } else {
            panic!("SET {k}: unexpected reply {r:?}");
        }
    }
    (acked, refused)
}

fn check_all(c: &mut Client, prefix: &str, acked: &[usize]) {
    let mut lost = Vec::new();
    for &i in acked {
        let k = format!("{prefix}:{i}");
        let r = call(c, &[b"GET", k.as_bytes()], false);
        if r != Reply::Bulk(value_for(i)) {
            lost.push(i);
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes do not read back (first: {:?})",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
}

fn with_memgest<'a>(parts: &mut Vec<&'a [u8]>, memgest: Option<&'a str>) {
    if let Some(m) = memgest {
        parts.push(b"MEMGEST");
        parts.push(m.as_bytes());
    }
}

/// The checks after a fill: refusals leave nothing behind, RMW commands refuse too, deletes
/// give room back.
fn after_full(c: &mut Client, prefix: &str, acked: &[usize], memgest: Option<&str>) {
    // A fresh key: refused, and absent.
    let big = vec![b'z'; VALUE_BYTES * 8];
    let fresh = format!("{prefix}:fresh");
    let mut parts: Vec<&[u8]> = vec![b"SET", fresh.as_bytes(), &big];
    with_memgest(&mut parts, memgest);
    let r = call(c, &parts, true);
    assert!(is_oom(&r), "SET on a full cluster answered {r:?}");
    assert_eq!(call(c, &[b"GET", fresh.as_bytes()], false), Reply::Null);
    // An overwrite of an existing key with a bigger value: refused, the old value stays.
    let k0 = format!("{prefix}:{}", acked[0]);
    let mut parts: Vec<&[u8]> = vec![b"SET", k0.as_bytes(), &big];
    with_memgest(&mut parts, memgest);
    let r = call(c, &parts, true);
    assert!(is_oom(&r), "overwrite on a full cluster answered {r:?}");
    assert_eq!(
        call(c, &[b"GET", k0.as_bytes()], false),
        Reply::Bulk(value_for(acked[0]))
    );
    // APPEND: refused or applied, and STRLEN agrees with the answer either way.
    let before = value_for(acked[1]).len() as i64;
    let k1 = format!("{prefix}:{}", acked[1]);
    let r = call(c, &[b"APPEND", k1.as_bytes(), &big], true);
    let want = match r {
        Reply::Integer(n) => n,
        ref e if is_oom(e) => before,
        other => panic!("APPEND answered {other:?}"),
    };
    assert_eq!(
        call(c, &[b"STRLEN", k1.as_bytes()], false),
        Reply::Integer(want)
    );
    check_all(c, prefix, acked);
    // Deletes give room back: new writes succeed again.
    let freed: Vec<usize> = acked.iter().copied().take(acked.len() / 2).collect();
    for &i in &freed {
        let k = format!("{prefix}:{i}");
        assert_eq!(call(c, &[b"DEL", k.as_bytes()], true), Reply::Integer(1));
    }
    let again = format!("{prefix}:again");
    let v = value_for(7);
    let mut parts: Vec<&[u8]> = vec![b"SET", again.as_bytes(), &v];
    with_memgest(&mut parts, memgest);
    // The room of deleted keys comes back once the tombstones' slab pages are reused; a few
    // tries absorb the replicas' catching up.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = call(c, &parts, true);
        if r == Reply::ok() {
            break;
        }
        assert!(is_oom(&r), "SET after deletes answered {r:?}");
        assert!(Instant::now() < deadline, "deletes gave no room back");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(call(c, &[b"GET", again.as_bytes()], false), Reply::Bulk(v));
    let kept: Vec<usize> = acked.iter().copied().skip(freed.len()).collect();
    check_all(c, prefix, &kept);
}

#[test]
fn full_rep3_cluster_refuses_and_keeps_every_acknowledged_write() {
    let cl = common::start(3, 1, &["--memory", MEMORY]);
    let mut c = Client::new(cl.addrs());
    let (acked, refused) = fill(&mut c, "r", 20_000, None);
    eprintln!("rep:3: {} acknowledged, {refused} refused", acked.len());
    assert!(refused > 0, "the cluster never filled up");
    assert!(acked.len() > 100, "almost nothing fit: {}", acked.len());
    check_all(&mut c, "r", &acked);
    after_full(&mut c, "r", &acked, None);
    // INCR on a new key of a full cluster: refused, and the key stays absent.
    let r = call(&mut c, &[b"INCR", b"r:counter"], true);
    if is_oom(&r) {
        assert_eq!(call(&mut c, &[b"GET", b"r:counter"], false), Reply::Null);
    } else {
        assert_eq!(r, Reply::Integer(1));
        assert_eq!(
            call(&mut c, &[b"GET", b"r:counter"], false),
            Reply::Bulk(b"1".to_vec())
        );
    }
}

/// A single-copy `none` memgest is a cache (evictable in the map): a full node evicts from
/// it instead of refusing, as the single node does. Every write is answered OK, every key
/// reads back either exactly its value or nil (evicted) — never another value — and pinned
/// rep:3 data still finds room by evicting cache entries.
#[test]
fn full_cache_memgest_evicts_instead_of_refusing() {
    let cl = common::start(3, 1, &["--memory", MEMORY]);
    let mut c = Client::new(cl.addrs());
    let r = call(&mut c, &[b"MEMGEST", b"CREATE", b"one", b"none"], true);
    assert_eq!(r, Reply::ok(), "MEMGEST CREATE");
    // Three nodes of 8 MiB hold ~20,000 values of 1 KiB; write half again as many.
    let n = 30_000;
    let (acked, refused) = fill(&mut c, "n", n, Some("one"));
    eprintln!("none: {} acknowledged, {refused} refused", acked.len());
    assert_eq!(
        refused, 0,
        "a cache memgest refused writes instead of evicting"
    );
    assert_eq!(acked.len(), n);
    let (mut present, mut evicted) = (0, 0);
    for i in 0..n {
        let k = format!("n:{i}");
        match call(&mut c, &[b"GET", k.as_bytes()], false) {
            Reply::Null => evicted += 1,
            Reply::Bulk(v) => {
                assert!(v == value_for(i), "{k}: a value that is not its own");
                present += 1;
            }
            other => panic!("GET {k}: {other:?}"),
        }
    }
    eprintln!("none: {present} present, {evicted} evicted");
    assert!(
        evicted > 0,
        "nothing was evicted: the cluster never filled up"
    );
    assert!(present > 1000, "the cache kept almost nothing: {present}");
    // Pinned data evicts cache entries rather than being refused.
    let (acked3, refused3) = fill(&mut c, "r", 200, None);
    assert_eq!(
        refused3, 0,
        "rep:3 writes refused while cache entries could be evicted"
    );
    check_all(&mut c, "r", &acked3);
}

#[test]
fn full_ec_cluster_refuses_and_keeps_every_acknowledged_write() {
    // An ec:3+2 default shapes the placement groups as s = 3 data + d = 2 redundant nodes.
    let cl = common::start(5, 0, &["--memory", MEMORY, "--default-memgest", "ec:3+2"]);
    let mut c = Client::new(cl.addrs());
    let (acked, refused) = fill(&mut c, "e", 60_000, None);
    eprintln!("ec:3+2: {} acknowledged, {refused} refused", acked.len());
    assert!(refused > 0, "the cluster never filled up");
    check_all(&mut c, "e", &acked);
    after_full(&mut c, "e", &acked, None);
}
