//! Network partitions between real node processes, each in its own network namespace.
//!
//! Topology (made per test, removed on drop; names carry the test's pid so parallel runs do
//! not collide):
//!
//! ```text
//!   root namespace: bridge rb<tag> 10.98.X.1  -- control plane (ringlet-cluster control)
//!        |  veth rl<tag>v1  ... veth rl<tag>v4             -- test clients
//!   ns rl<tag>-1: eth0 10.98.X.11   ringlet-cluster node --id 1
//!   ns rl<tag>-2: eth0 10.98.X.12   ringlet-cluster node --id 2
//!   ns rl<tag>-3: eth0 10.98.X.13   ringlet-cluster node --id 3
//!   ns rl<tag>-4: eth0 10.98.X.14   ringlet-cluster node --id 4   (spare)
//! ```
//!
//! A partition is an nft table inside the victim's namespace dropping packets to and from
//! chosen addresses (this kernel has no netem; loss is what nft can do). Scenarios:
//! * the coordinator of slot 0 cut off from everything (control plane, peers, clients);
//! * the coordinator of slot 0 cut off from the control plane only (peers still reach it);
//! * the coordinator of slot 0 cut off from its peers only (its lease stays valid).
//!
//! Every scenario runs client load on hot keys during the cut and after the heal, then
//! checks: every write acknowledged before the cut still reads back, the recorded history is
//! linearizable (`ringlet_linearize`), and the cluster serves every key again afterwards.
//!
//! Needs root (network namespaces, nft). Without it the tests print why and pass, unless
//! `RINGLET_REQUIRE_NETNS=1` is set (CI sets it: CI runs as root).
//!
//! Run: `cargo test -p ringlet-cluster-tests --test partition -- --nocapture --test-threads 1`

mod common;

use common::netns::setup;
use common::{check_history, load_thread, par_check, par_set, wait_ok, Client, Recorder};
use ringlet_types::key_slot;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which peers the victim loses.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Control plane, peers and clients.
    Everything,
    /// The control plane only: its lease lapses while peers still reach it.
    ControlOnly,
    /// The other nodes only: its lease stays valid.
    PeersOnly,
}

fn scenario(test_index: u8, cut: Cut) {
    let Some(net) = setup(test_index, 3, 1) else {
        return;
    };
    let seeds = net.seeds();
    let keys: Vec<(String, String)> = (0..2_000)
        .map(|i| (format!("key:{i}"), format!("value-{i}")))
        .collect();
    par_set(&seeds, &keys, 4);
    let victim = net.map().coordinator(0).expect("slot 0 placed").0;
    let victim_inc = net.map().nodes[&ringlet_types::NodeId(victim)].incarnation;
    let seeds = net.seeds_victim_last(victim);
    let victim_addr = net.node_addr(victim);
    let c = Client::new(seeds.clone());
    let affected: Vec<(String, String)> = keys
        .iter()
        .filter(|(k, _)| c.slot_owner(key_slot(k.as_bytes())) == Some(victim_addr))
        .cloned()
        .collect();
    assert!(!affected.is_empty());

    let rec = Recorder::new();
    let stop = Arc::new(AtomicBool::new(false));
    let hot: Vec<String> = (0..32).map(|i| format!("hot:{i}")).collect();
    let threads: Vec<_> = (1..=4)
        .map(|id| {
            load_thread(
                seeds.clone(),
                id,
                hot.clone(),
                rec.clone(),
                stop.clone(),
                false,
            )
        })
        .collect();
    wait_ok(&rec, rec.ok.load(Ordering::Relaxed) + 200);

    let peers: Vec<Ipv4Addr> = (1..=net.total as u32)
        .filter(|&i| i != victim)
        .map(|i| net.node_ip(i))
        .collect();
    let targets = match cut {
        Cut::Everything => {
            let mut v = peers.clone();
            v.push(net.host_ip());
            v
        }
        Cut::ControlOnly => vec![net.host_ip()],
        Cut::PeersOnly => peers.clone(),
    };
    let t0 = Instant::now();
    net.cut(victim, &targets);
    eprintln!("{cut:?}: node {victim} cut off from {targets:?}");

    let fails_over = !matches!(cut, Cut::PeersOnly);
    if fails_over {
        // The victim's lease lapses; a spare takes its roles and rebuilds from the
        // survivors: every key it coordinated reads back its value through the new one.
        let mut left = affected.clone();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !left.is_empty() {
            assert!(
                Instant::now() < deadline,
                "{} keys of the cut-off coordinator not readable after 60 s",
                left.len()
            );
            left = par_check(&seeds, &left, 4);
            if !left.is_empty() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        eprintln!(
            "{cut:?}: all {} keys of node {victim} readable through its successor {} ms after the cut",
            affected.len(),
            t0.elapsed().as_millis()
        );
        wait_ok(&rec, rec.ok.load(Ordering::Relaxed) + 200);
    } else {
        // The lease stays valid, so no failover: the victim's slots cannot commit writes
        // (no replica acknowledges) — a stall, never a wrong answer. Keep the cut a while.
        std::thread::sleep(Duration::from_secs(3));
        let m = net.map();
        eprintln!(
            "{cut:?}: after 3 s the map still has node {victim} as {:?} (coordinator of slot 0: {:?})",
            m.nodes[&ringlet_types::NodeId(victim)].state,
            m.coordinator(0)
        );
    }
    net.heal(victim);
    eprintln!("{cut:?}: healed after {} ms", t0.elapsed().as_millis());
    // After the heal: a fenced victim wipes itself and rejoins as a spare with a new
    // incarnation; an unfenced one simply serves again.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "victim did not come back");
        let m = net.map();
        let n = &m.nodes[&ringlet_types::NodeId(victim)];
        let back = if fails_over {
            n.incarnation != victim_inc && n.state == ringlet_control::NodeState::Spare
        } else {
            n.state == ringlet_control::NodeState::Active
        };
        if back {
            eprintln!(
                "{cut:?}: node {victim} is {:?} (incarnation {} -> {}) {} ms after the cut",
                n.state,
                victim_inc,
                n.incarnation,
                t0.elapsed().as_millis()
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_ok(&rec, rec.ok.load(Ordering::Relaxed) + 200);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // Every setup write still reads back, and the history is linearizable.
    let mut left = keys.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !left.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} acknowledged keys not readable after the heal: {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
        left = par_check(&seeds, &left, 4);
    }
    check_history(&format!("partition-{cut:?}"), &rec);
}

#[test]
fn coordinator_cut_off_from_everything_is_replaced() {
    scenario(1, Cut::Everything);
}

#[test]
fn coordinator_cut_off_from_control_plane_is_replaced() {
    scenario(2, Cut::ControlOnly);
}

#[test]
fn coordinator_cut_off_from_peers_stalls_but_loses_nothing() {
    scenario(3, Cut::PeersOnly);
}
