//! Linked members as real processes: a coordinator, three `ringlet-linked member` processes of
//! the demo `accounts` service, and a router in this test process.
//!
//! What must hold (no timing assertions; waits are bounded only to fail instead of hanging):
//! - members that join a running service get units moved to them by the auto-sharder, driven
//!   by a skewed load, while that load runs;
//! - every acknowledged update is still there afterwards, on whichever member now owns its key
//!   (the keys written before the other members joined can only be there by being moved);
//! - a SIGKILLed member is reported: the survivors' Linklets emit `MemberCrashed` for exactly
//!   the ranges it owned, the router gets the same `StateLost`, its keys come back empty on
//!   their new owners, and every other key keeps its value.

#[path = "linked_common/mod.rs"]
mod common;

use common::{member, Proc, WAIT};
use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::{Duration, Instant};

use ringlet_linked::Router;
use ringlet_types::key_slot;

const UNITS: u16 = 16;
const SLOTS_PER_UNIT: u16 = 16384 / UNITS;
const KEYS: usize = 400;
/// Units 0..HOT_UNITS get most of the load.
const HOT_UNITS: u16 = 4;

fn key(i: usize) -> String {
    format!("user{i}")
}

fn unit_of(k: &str) -> u16 {
    key_slot(k.as_bytes()) / SLOTS_PER_UNIT
}

/// Units owned per member id in the router's current map.
fn owners(router: &Router) -> HashMap<u64, BTreeSet<u16>> {
    let mut out: HashMap<u64, BTreeSet<u16>> = HashMap::new();
    for (u, o) in router.map().owners.iter().enumerate() {
        if let Some(o) = o {
            out.entry(o.member).or_default().insert(u as u16);
        }
    }
    out
}

async fn add(router: &Router, k: &str, n: i64) -> i64 {
    let b = router
        .call(k.as_bytes(), format!("add {n}").as_bytes())
        .await
        .unwrap_or_else(|e| panic!("add to {k}: {e}"));
    String::from_utf8(b).unwrap().parse().unwrap()
}

async fn get(router: &Router, k: &str) -> String {
    let b = router
        .call(k.as_bytes(), b"get")
        .await
        .unwrap_or_else(|e| panic!("get {k}: {e}"));
    String::from_utf8(b).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_rebalance_by_load_without_losing_state_and_a_killed_member_is_reported() {
    let coord = Proc::start(&[
        "coordinator",
        "--listen",
        "127.0.0.1:0",
        "--units",
        &UNITS.to_string(),
        "--lease-ms",
        "1500",
        "--heartbeat-ms",
        "150",
        "--moves-per-minute",
        "600",
        "--unit-cooldown-ms",
        "1000",
        "--tick-ms",
        "50",
    ]);
    let coord_addr = coord.line("coordinator ")[12..].to_owned();
    let (a, a_id) = member(&coord_addr);
    let router = Router::connect(&coord_addr, "accounts").await.unwrap();
    // The first member adopts every unit.
    let mut epoch = router.map().epoch;
    while owners(&router).get(&a_id).map_or(0, BTreeSet::len) < usize::from(UNITS) {
        epoch += 1;
        let m = router.wait_map(epoch, WAIT).await;
        assert!(m.epoch >= epoch, "member A never got the units");
    }

    // Every key written while A is the only member.
    let mut expected: Vec<i64> = vec![0; KEYS];
    for (i, e) in expected.iter_mut().enumerate() {
        *e = add(&router, &key(i), i as i64 + 1).await;
        assert_eq!(*e, i as i64 + 1);
    }
    let hot: Vec<usize> = (0..KEYS)
        .filter(|&i| unit_of(&key(i)) < HOT_UNITS)
        .collect();
    assert!(!hot.is_empty());

    let (b, b_id) = member(&coord_addr);
    let (c, c_id) = member(&coord_addr);
    let start_epoch = router.map().epoch;

    // Skewed load from 8 tasks, each owning a disjoint set of keys (so each knows its keys'
    // exact balances): 80% of the adds go to the hot units. It runs until the sharder has
    // given units to both joiners, then a little longer so moves happen under load.
    let deadline = Instant::now() + WAIT;
    let mut tasks = Vec::new();
    for t in 0..8usize {
        let router = router.clone();
        let mine: Vec<usize> = (0..KEYS).filter(|i| i % 8 == t).collect();
        let hot_mine: Vec<usize> = mine.iter().copied().filter(|i| hot.contains(i)).collect();
        let mut exp: HashMap<usize, i64> = mine.iter().map(|&i| (i, expected[i])).collect();
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            let mut settled_at: Option<Instant> = None;
            // Bounded by `deadline`.
            while Instant::now() < deadline {
                let i = if n % 5 != 0 && !hot_mine.is_empty() {
                    hot_mine[n % hot_mine.len()]
                } else {
                    mine[n % mine.len()]
                };
                n += 1;
                let v = add(&router, &key(i), 1).await;
                let e = exp.get_mut(&i).unwrap();
                *e += 1;
                assert_eq!(
                    v,
                    *e,
                    "add on {} returned a balance that lost an update",
                    key(i)
                );
                if n % 50 == 0 {
                    let o = owners(&router);
                    let spread = [a_id, b_id, c_id]
                        .iter()
                        .all(|m| o.get(m).is_some_and(|s| !s.is_empty()));
                    if spread && router.map().epoch >= start_epoch + 2 {
                        let at = *settled_at.get_or_insert_with(Instant::now);
                        if at.elapsed() > Duration::from_secs(2) {
                            break;
                        }
                    }
                }
            }
            exp
        }));
    }
    for t in tasks {
        for (i, e) in t.await.unwrap() {
            expected[i] = e;
        }
    }
    let o = owners(&router);
    eprintln!(
        "units per member after the skewed load: {o:?}; router {:?}",
        router.stats()
    );
    for m in [a_id, b_id, c_id] {
        assert!(
            o.get(&m).is_some_and(|s| !s.is_empty()),
            "member {m} got no unit: {o:?}"
        );
    }
    // Keys written to A alone and now owned elsewhere: their state can only have moved.
    let a_units = o[&a_id].clone();
    let moved: Vec<usize> = (0..KEYS)
        .filter(|&i| !a_units.contains(&unit_of(&key(i))))
        .collect();
    assert!(!moved.is_empty());
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(get(&router, &key(i)).await, e.to_string(), "{}", key(i));
    }
    eprintln!(
        "{} of {KEYS} keys moved off the first member; all {KEYS} balances intact",
        moved.len()
    );

    // SIGKILL C. Its units are reported lost to the survivors' applications and the router.
    let mut lost_rx = router.lost_events();
    let c_units = owners(&router).get(&c_id).cloned().unwrap_or_default();
    assert!(!c_units.is_empty());
    let c_slots: BTreeSet<u16> = c_units
        .iter()
        .flat_map(|u| u * SLOTS_PER_UNIT..(u + 1) * SLOTS_PER_UNIT)
        .collect();
    let mut c = c;
    let killed = Instant::now();
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    for (name, p) in [("A", &a), ("B", &b)] {
        let mut seen = BTreeSet::new();
        while seen != c_slots {
            let l = p.line("loss ");
            let f: Vec<&str> = l.split_whitespace().collect();
            if f[3] != "MemberCrashed" {
                continue;
            }
            let (first, last): (u16, u16) = (f[1].parse().unwrap(), f[2].parse().unwrap());
            seen.extend(first..=last);
            assert!(
                seen.is_subset(&c_slots),
                "{name} told of slots C did not own"
            );
        }
        eprintln!(
            "member {name} told of C's crash {} ms after the SIGKILL (goal: 3000)",
            killed.elapsed().as_millis()
        );
    }
    let ev = tokio::time::timeout(WAIT, lost_rx.recv())
        .await
        .expect("router told of the crash")
        .unwrap();
    assert_eq!(ev.member, c_id);
    let ev_slots: BTreeSet<u16> = ev.ranges.iter().flat_map(|r| r.first..=r.last).collect();
    assert_eq!(ev_slots, c_slots);

    // C's keys are served again, empty; everything else is intact.
    for (i, e) in expected.iter().enumerate() {
        let k = key(i);
        let want = if c_units.contains(&unit_of(&k)) {
            "none".to_owned()
        } else {
            e.to_string()
        };
        assert_eq!(get(&router, &k).await, want, "{k}");
    }
    let o = owners(&router);
    assert!(!o.contains_key(&c_id));
    drop((a, b, coord));
}

/// One HTTP request on a fresh connection; returns (status, body).
fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    // Bounded by the content length (or the read timeout).
    loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "front closed early");
        got.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap()
                .parse()
                .unwrap();
            if body.len() >= len {
                let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                return (status, body.trim_end().to_owned());
            }
        }
    }
}

#[test]
fn the_http_front_routes_through_the_router() {
    let coord = Proc::start(&["coordinator", "--listen", "127.0.0.1:0"]);
    let coord_addr = coord.line("coordinator ")[12..].to_owned();
    let (_m1, _) = member(&coord_addr);
    let (_m2, _) = member(&coord_addr);
    let front = Proc::start(&[
        "front",
        "--coordinator",
        &coord_addr,
        "--listen",
        "127.0.0.1:0",
    ]);
    let addr = front.line("front ")[6..].to_owned();
    // The first member may still be adopting when the first request comes: the router waits.
    assert_eq!(http_get(&addr, "/u/alice/add/5"), (200, "5".into()));
    assert_eq!(http_get(&addr, "/u/alice/add/-2"), (200, "3".into()));
    assert_eq!(http_get(&addr, "/u/alice"), (200, "3".into()));
    assert_eq!(http_get(&addr, "/u/nobody"), (200, "none".into()));
    assert_eq!(http_get(&addr, "/u/alice/add/x").0, 400);
    assert_eq!(http_get(&addr, "/nope").0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_given_sigterm_hands_its_units_over_and_nothing_is_lost() {
    let coord = Proc::start(&[
        "coordinator",
        "--listen",
        "127.0.0.1:0",
        "--units",
        &UNITS.to_string(),
        "--moves-per-minute",
        "600",
        "--tick-ms",
        "50",
        "--heartbeat-ms",
        "150",
        "--lease-ms",
        "1500",
    ]);
    let coord_addr = coord.line("coordinator ")[12..].to_owned();
    let (a, a_id) = member(&coord_addr);
    let router = Router::connect(&coord_addr, "accounts").await.unwrap();
    let (b, b_id) = member(&coord_addr);
    // At rest the sharder balances by unit count: wait until b owns some.
    let mut epoch = router.map().epoch;
    while owners(&router).get(&b_id).map_or(0, BTreeSet::len) == 0 {
        epoch += 1;
        assert!(
            router.wait_map(epoch, WAIT).await.epoch >= epoch,
            "b never got a unit"
        );
    }
    let mut expected = vec![0i64; KEYS];
    for (i, e) in expected.iter_mut().enumerate() {
        *e = add(&router, &key(i), i as i64 + 7).await;
    }
    let mut lost = router.lost_events();
    let st = Command::new("kill")
        .args(["-TERM", &b.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let left = b.line("left ");
    assert!(left.contains("drained"), "{left}");
    // Every unit is a's again and every balance is intact; no state-loss anywhere.
    let mut epoch = router.map().epoch;
    while owners(&router).get(&a_id).map_or(0, BTreeSet::len) < usize::from(UNITS) {
        epoch += 1;
        assert!(
            router.wait_map(epoch, WAIT).await.epoch >= epoch,
            "a never got all units back"
        );
    }
    assert!(!owners(&router).contains_key(&b_id));
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(get(&router, &key(i)).await, e.to_string(), "{}", key(i));
    }
    // The blocking handle (thread-per-connection frontends) sees the same state, from a
    // plain thread, through its own connections.
    let mut br = router.blocking();
    let want = expected.clone();
    tokio::task::spawn_blocking(move || {
        for (i, e) in want.iter().enumerate() {
            let got = br.call(key(i).as_bytes(), b"get").unwrap();
            assert_eq!(String::from_utf8(got).unwrap(), e.to_string(), "{}", key(i));
        }
        let got = br.call(key(0).as_bytes(), b"add 1").unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), (want[0] + 1).to_string());
        assert!(matches!(
            br.call(key(0).as_bytes(), b"bogus"),
            Err(ringlet_linked::RouteError::App(_))
        ));
    })
    .await
    .unwrap();
    assert!(
        lost.try_recv().is_err(),
        "a graceful leave reported lost state"
    );
    assert!(a.lines.try_iter().all(|l| !l.starts_with("loss ")));
    drop((a, b, coord));
}
