//! TTLs on erasure-coded values, real processes: `ringlet-cluster up --nodes 5 --spares 2
//! --default-memgest ec:3+2`, driven by redis-py `RedisCluster` (ec_ttl_cluster.py): SET
//! EX/PX/EXAT/PXAT, SETEX, PSETEX, the EXPIRE family with its flags, PERSIST, GETEX, SET
//! KEEPTTL and a MEMGEST MOVE of a TTL key into ec; every key's value and PEXPIRETIME are
//! recorded, a coordinator is SIGKILLed, and after its spare rebuilt the ec index from the
//! parity holders' metadata every key must read back with exactly the same PEXPIRETIME
//! (docs/design/cluster-ec.md "TTLs"). Needs `python3` with the `redis` package (skipped
//! without it unless `RINGLET_REQUIRE_REDIS` is set, like redis_py.rs).
//!
//! Run: `cargo test -p ringlet-cluster-tests --test ec_ttl -- --nocapture`

mod common;

use std::time::{Duration, Instant};

fn python(phase: &str, port: u16, state: &std::path::Path) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ec_ttl_cluster.py");
    let out = std::process::Command::new("python3")
        .args([
            script,
            phase,
            &port.to_string(),
            &state.display().to_string(),
        ])
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "ec_ttl_cluster.py {phase} failed");
}

#[test]
fn ec_ttls_survive_a_coordinator_sigkill_through_redis_py() {
    if !common::have_redis_py() {
        return;
    }
    let mut cluster = common::start(5, 2, &["--default-memgest", "ec:3+2"]);
    let state = std::env::temp_dir().join(format!("ringlet-ec-ttl-{}.json", std::process::id()));
    python("before", cluster.base, &state);
    // Node 1 coordinates about a third of the slots: its ec keys are rebuilt by a spare
    // from the parity holders' metadata (expiry included).
    let epoch = cluster.map().epoch;
    cluster.kill9(1);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let m = cluster.map();
        if m.epoch > epoch
            && m.placement
                .as_ref()
                .is_some_and(|p| !p.members().contains(&ringlet_types::NodeId(1)))
        {
            break;
        }
        assert!(Instant::now() < deadline, "node 1 not replaced");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Talk to a surviving node (node 1 listened on `base`).
    python("after", cluster.base + 2, &state);
    let _ = std::fs::remove_file(&state);
}
