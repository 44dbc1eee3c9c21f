//! The coordinator dies and a new one starts on the same address: no state is lost.
//!
//! Real processes: a coordinator on a fixed port, two `ringlet-linked member` processes of the
//! demo `accounts` service, a router here. Accounts are written; the coordinator is
//! SIGKILLed; a new coordinator starts on the same port. What must hold (no timing
//! assertions; waits are bounded only so a stuck run fails instead of hanging):
//! - the members keep their Linklets, rejoin with their old ids and get their units back
//!   (the new coordinator rebuilds its map from them during its recovery window);
//! - every balance is intact afterwards and writes work again;
//! - nobody hears of lost state (no `MemberCrashed` at the members, no `StateLost` at the
//!   router, which re-watches the new coordinator by itself);
//! - a member joining the new coordinator afterwards is balanced in (the sharder works on).

#[path = "linked_common/mod.rs"]
mod common;

use common::{member, Proc, WAIT};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use ringlet_linked::Router;

const UNITS: u16 = 16;
const KEYS: usize = 200;

fn coordinator(listen: &str) -> (Proc, String) {
    let p = Proc::start(&[
        "coordinator",
        "--listen",
        listen,
        "--units",
        &UNITS.to_string(),
        "--lease-ms",
        "1500",
        "--heartbeat-ms",
        "150",
        "--tick-ms",
        "50",
        "--moves-per-minute",
        "600",
        "--recovery-ms",
        "1800",
    ]);
    let addr = p.line("coordinator ")[12..].to_owned();
    (p, addr)
}

fn key(i: usize) -> String {
    format!("cust{i}")
}

fn owners(router: &Router) -> HashMap<u64, BTreeSet<u16>> {
    let mut out: HashMap<u64, BTreeSet<u16>> = HashMap::new();
    for (u, o) in router.map().owners.iter().enumerate() {
        if let Some(o) = o {
            out.entry(o.member).or_default().insert(u as u16);
        }
    }
    out
}

async fn wait_map(router: &Router, what: &str, f: impl Fn(&Router) -> bool) {
    let end = Instant::now() + WAIT;
    while !f(router) {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        let epoch = router.map().epoch + 1;
        router.wait_map(epoch, Duration::from_millis(200)).await;
    }
}

async fn call(router: &Router, k: &str, body: &str) -> String {
    let b = router
        .call(k.as_bytes(), body.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{body} {k}: {e}"));
    String::from_utf8(b).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_coordinator_rebuilds_the_map_from_its_members_and_nothing_is_lost() {
    let (coord, addr) = coordinator("127.0.0.1:0");
    let (a, a_id) = member(&addr);
    let (b, b_id) = member(&addr);
    let router = Router::connect(&addr, "accounts").await.unwrap();
    wait_map(&router, "units on both members", |r| {
        let o = owners(r);
        [a_id, b_id]
            .iter()
            .all(|m| o.get(m).is_some_and(|s| !s.is_empty()))
            && o.values().map(BTreeSet::len).sum::<usize>() == usize::from(UNITS)
    })
    .await;
    let mut lost = router.lost_events();
    let mut expected = vec![0i64; KEYS];
    for (i, e) in expected.iter_mut().enumerate() {
        *e = call(&router, &key(i), &format!("add {}", i + 3))
            .await
            .parse()
            .unwrap();
    }
    let before = owners(&router);

    // The coordinator dies; a new one takes its address.
    let mut coord = coord;
    coord.child.kill().unwrap();
    coord.child.wait().unwrap();
    let (coord2, addr2) = coordinator(&addr);
    assert_eq!(addr2, addr);

    // Both members rejoin with their ids and units; the router follows the new coordinator.
    wait_map(&router, "the members' units back in the new map", |r| {
        owners(r) == before
    })
    .await;
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(
            call(&router, &key(i), "get").await,
            e.to_string(),
            "{}",
            key(i)
        );
    }
    for (i, e) in expected.iter_mut().enumerate().take(20) {
        *e = call(&router, &key(i), "add 1").await.parse().unwrap();
    }
    // The sharder works on: a third member is balanced in and nothing moves wrongly.
    let (c, c_id) = member(&addr);
    wait_map(&router, "units on the new member", |r| {
        owners(r).get(&c_id).is_some_and(|s| !s.is_empty())
    })
    .await;
    for (i, e) in expected.iter().enumerate() {
        assert_eq!(
            call(&router, &key(i), "get").await,
            e.to_string(),
            "{}",
            key(i)
        );
    }
    assert!(lost.try_recv().is_err(), "the router heard of lost state");
    for p in [&a, &b, &c] {
        assert!(
            p.lines.try_iter().all(|l| !l.starts_with("loss ")),
            "a member heard of lost state"
        );
    }
    drop((a, b, c, coord2));
}
