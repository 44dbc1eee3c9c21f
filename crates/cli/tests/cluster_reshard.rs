//! Growing a cluster under load (issue 12): `ringlet up --nodes 3 --spares 2`, a redis-py
//! `RedisCluster` client writing and reading all along, then `ringlet node add` and `ringlet
//! node rebalance` twice (3 → 5 data nodes), then `ringlet node remove` twice (back to 3). Every operation must succeed (redis-py follows
//! MOVED; writes to a moving span are retried by the node), every acknowledged value must read
//! back, and CLUSTER SLOTS must end with five coordinators holding equal shares.

mod common;

use ringlet_codec::resp::Reply;
use std::process::Command;

const LOAD: &str = r#"
import sys, time, redis
from redis.cluster import RedisCluster
port, stop_file, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rc = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
acked, ops, failed, i = {}, 0, [], 0
import os
while not os.path.exists(stop_file) or i < 2000:
    k = "key:%d" % (i % 3000)
    v = "v%d" % i
    try:
        rc.set(k, v)
        acked[k] = v
        got = rc.get(k)
        if got is not None and got.decode() != v:
            failed.append("read %s=%r want %s" % (k, got, v))
        ops += 2
    except Exception as e:
        failed.append("%s: %r" % (k, e))
    i += 1
    if i == 100:
        open(stop_file + ".started", "w").close()
# Every acknowledged write reads back, from a fresh client (a fresh slot map).
rc2 = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
lost = []
for k, v in acked.items():
    got = rc2.get(k)
    if (got or b"").decode() != v:
        lost.append("lost %s slot %d: got %r, acked %s" % (k, rc2.keyslot(k), got, v))
with open(out, "w") as f:
    f.write("%d %d %d\n" % (ops, len(failed), len(lost)))
    for l in failed[:20] + lost[:20]:
        f.write(l + "\n")
"#;

fn ringlet(args: &[&str]) -> String {
    let out = common::ringlet(args);
    assert!(
        out.status.success(),
        "ringlet {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn grow_three_to_five_under_redis_py_load() {
    if !common::have_redis_py() {
        return;
    }
    let base = common::free_base(6);
    let b = base.to_string();
    let (up, control, secret) = common::up_admin(&[
        "up",
        "--nodes",
        "3",
        "--spares",
        "2",
        "--port",
        &b,
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
    ]);
    let dir = std::env::temp_dir().join(format!("ringlet-reshard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (stop, out) = (dir.join("stop"), dir.join("out"));
    let mut load = Command::new("python3")
        .args(["-c", LOAD, &b])
        .arg(&stop)
        .arg(&out)
        .spawn()
        .expect("python3");
    // The moves start once the load has written (a fixed sleep raced redis-py's start on a
    // loaded machine: the moves were over before the first write and copied nothing).
    common::wait_for_load(
        &dir.join("stop.started"),
        &mut load,
        "the load never wrote 100 keys",
    );
    let admin = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--control", &control, "--cluster-secret-file", &secret]);
        ringlet(&a)
    };
    // A dry run plans nothing on a balanced cluster.
    assert!(admin(&["node", "rebalance", "--dry-run"]).contains("balanced"));
    // The second grow is spelled as an operator of the issue would type it: `ringlet cluster
    // add|rebalance --port P` (any node's client port; the control plane is the one it names
    // in INFO, the secret the file `up` wrote for it).
    let by_port = |args: &[&str], port: u16| {
        let p = port.to_string();
        let mut a = args.to_vec();
        a.extend(["--port", p.as_str()]);
        ringlet(&a)
    };
    for (id, rate) in [("4", None), ("5", Some("20"))] {
        let added = if rate.is_none() {
            admin(&["node", "add", id])
        } else {
            by_port(&["cluster", "add", id], base + 1)
        };
        assert_eq!(added.trim(), "OK");
        // The second grow is rate-limited (`--rate` MB/s, paced by the new owners' pulls).
        let log = match rate {
            None => admin(&["node", "rebalance"]),
            Some(r) => by_port(&["cluster", "rebalance", "--rate", r], base + 2),
        };
        assert!(log.contains("rebalanced:"), "{log}");
        eprintln!("{log}");
    }
    assert!(admin(&["node", "rebalance", "--dry-run"]).contains("balanced"));
    // Progress is visible in INFO: the moves' new coordinators counted their rebuilt
    // handoffs, and nothing is left moving or pending.
    let info = |port: u16, field: &str| -> String {
        let Reply::Bulk(b) = common::call(port, &[b"INFO"]) else {
            panic!("INFO")
        };
        let text = String::from_utf8(b).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
            .unwrap_or_else(|| panic!("no {field} in {text}"))
    };
    let rebuilt: u64 = (0..5)
        .map(|i| {
            info(base + i, "reshard_handoffs_completed")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert!(rebuilt >= 9, "{rebuilt} handoffs rebuilt for 9 moves");
    let pulled = |field: &str| -> u64 {
        (0..5)
            .map(|i| info(base + i, field).parse::<u64>().unwrap())
            .sum()
    };
    let (keys, bytes) = (
        pulled("reshard_keys_pulled"),
        pulled("reshard_bytes_pulled"),
    );
    eprintln!("handoffs copied {keys} keys, {bytes} bytes");
    assert!(keys > 0 && bytes > 0, "the moves copied nothing");
    // Copy before the switch ran end to end: spans were copied while their old owner served.
    let copied = pulled("reshard_copies_completed");
    eprintln!("spans copied before their switch: {copied}");
    assert!(copied > 0, "no span was copied ahead of its switch");
    assert_eq!(info(base, "reshard_moving"), "-");
    assert_eq!(info(base, "reshard_handoffs_pending"), "0");
    let grown = ringlet_control::ClusterMap::from_json(admin(&["node", "map"]).trim()).unwrap();
    let per = grown.placement.as_ref().unwrap().slots_per_coordinator();
    assert_eq!(per.len(), 5, "{per:?}");
    assert!(per.values().all(|c| (3276..=3277).contains(c)), "{per:?}");
    // And shrink back to three, still under load.
    for (id, rate) in [("5", "50"), ("4", "0.5")] {
        let log = admin(&["node", "remove", id, "--rate", rate]);
        assert!(log.contains(&format!("node {id} removed")), "{log}");
        eprintln!("{log}");
    }
    std::fs::write(&stop, b"").unwrap();
    assert!(load.wait().unwrap().success(), "load script failed");
    let report = std::fs::read_to_string(&out).unwrap();
    let mut it = report.lines().next().unwrap().split(' ');
    let ops: u64 = it.next().unwrap().parse().unwrap();
    let failed: u64 = it.next().unwrap().parse().unwrap();
    let lost: u64 = it.next().unwrap().parse().unwrap();
    eprintln!("load: {ops} operations, {failed} failed, {lost} lost");
    assert!(ops > 0);
    assert_eq!((failed, lost), (0, 0), "{report}");
    // Three coordinators again, equal shares; the removed nodes are spares.
    let map = admin(&["node", "map"]);
    let m = ringlet_control::ClusterMap::from_json(map.trim()).unwrap();
    let per = m.placement.as_ref().unwrap().slots_per_coordinator();
    assert_eq!(per.len(), 3, "{per:?}");
    assert!(per.values().all(|c| (5461..=5462).contains(c)), "{per:?}");
    assert!(m.handoffs.is_empty());
    for id in [4, 5] {
        assert_eq!(
            m.node_state(ringlet_types::NodeId(id)),
            Some(ringlet_control::NodeState::Spare)
        );
    }
    drop(up);
    let _ = std::fs::remove_dir_all(&dir);
}
