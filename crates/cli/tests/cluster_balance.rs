//! Load-based balancing (issue 12 item 3): `ringlet up --nodes 3 --auto-balance`, a redis-py
//! `RedisCluster` client hammering keys that all live on one node; the balancer must notice,
//! move the hot slots' span away from it, and the client must see no failed operation and no
//! lost write. Also: the one-shot `ringlet node rebalance --by load` on an idle cluster says
//! it is quiet, and the balancer's knobs are refused without the balancer.

mod common;

use std::process::Command;

/// Hammers 40 keys that live on the node at `port` (as the client's slot map says at start);
/// stops when the stop file exists, or when some of them moved to another node and a few
/// more seconds passed, or after 90 s. Writes "ops failed lost moved".
const LOAD: &str = r#"
import os, sys, time, redis
from redis.cluster import RedisCluster
port, stop_file, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rc = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
hot, i = [], 0
while len(hot) < 40:
    k = "hot:%d" % i
    if rc.get_node_from_key(k).port == port:
        hot.append(k)
    i += 1
acked, ops, failed, moved_at = {}, 0, [], None
t0 = time.time()
n = 0
while not os.path.exists(stop_file) and time.time() - t0 < 90:
    k = hot[n % len(hot)]
    v = "v%d" % n
    try:
        rc.set(k, v)
        acked[k] = v
        got = rc.get(k)
        if got is None or got.decode() != v:
            failed.append("read %s=%r want %s" % (k, got, v))
        ops += 2
    except Exception as e:
        failed.append("%s: %r" % (k, e))
    n += 1
    if n % 200 == 0 and moved_at is None:
        if any(rc.get_node_from_key(x).port != port for x in hot):
            moved_at = time.time()
    if moved_at is not None and time.time() - moved_at > 3:
        break
rc2 = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
lost = [k for k, v in acked.items() if (rc2.get(k) or b"").decode() != v]
moved = sum(1 for k in hot if rc2.get_node_from_key(k).port != port)
with open(out, "w") as f:
    f.write("%d %d %d %d\n" % (ops, len(failed), len(lost), moved))
    for l in failed[:20] + lost[:20]:
        f.write(str(l) + "\n")
"#;

use common::ringlet;

#[test]
fn the_balancer_moves_a_hot_span_off_the_busy_node_under_redis_py_load() {
    if !common::have_redis_py() {
        return;
    }
    let base = common::free_base(4);
    let b = base.to_string();
    let (up, control, secret) = common::up_admin(&[
        "up",
        "--nodes",
        "3",
        "--port",
        &b,
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
        "--auto-balance",
        "--balance-window",
        "2",
        "--balance-min-ops",
        "50",
        "--balance-moves-per-min",
        "6",
    ]);
    // Idle: the one-shot planner finds too little load to move anything.
    let quiet = ringlet(&[
        "node",
        "rebalance",
        "--by",
        "load",
        "--dry-run",
        "--balance-window",
        "1",
        "--control",
        &control,
        "--cluster-secret-file",
        &secret,
    ]);
    let text = String::from_utf8_lossy(&quiet.stdout);
    assert!(
        quiet.status.success() && text.contains("quiet"),
        "{text}{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    let dir = std::env::temp_dir().join(format!("ringlet-balance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (stop, out) = (dir.join("stop"), dir.join("out"));
    let load = Command::new("python3")
        .args(["-c", LOAD, &b])
        .arg(&stop)
        .arg(&out)
        .status()
        .expect("python3");
    assert!(load.success(), "load script failed");
    let report = std::fs::read_to_string(&out).unwrap();
    let first = report.lines().next().unwrap();
    let v: Vec<u64> = first.split(' ').map(|x| x.parse().unwrap()).collect();
    let (ops, failed, lost, moved) = (v[0], v[1], v[2], v[3]);
    eprintln!("load: {ops} operations, {failed} failed, {lost} lost; {moved} of 40 hot keys moved");
    assert!(
        moved > 0,
        "the balancer moved none of the hot keys: {report}"
    );
    assert_eq!((failed, lost), (0, 0), "{report}");
    // The map agrees: the first node no longer coordinates every slot it started with, and
    // no handoff is left.
    let map = ringlet(&[
        "node",
        "map",
        "--control",
        &control,
        "--cluster-secret-file",
        &secret,
    ]);
    let m = ringlet_control::ClusterMap::from_json(String::from_utf8_lossy(&map.stdout).trim())
        .unwrap();
    let per = m.placement.as_ref().unwrap().slots_per_coordinator();
    assert_eq!(per.len(), 3, "{per:?}");
    assert!(
        per.values().any(|c| *c < 5461),
        "no node gave slots away: {per:?}"
    );
    drop(up);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn balancer_knobs_without_the_balancer_are_refused() {
    let o = ringlet(&["up", "--nodes", "3", "--port", "1", "--balance-window", "2"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("add --auto-balance"), "{err}");
    let o = ringlet(&["up", "--port", "1", "--auto-balance"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--nodes N"), "{err}");
    let o = ringlet(&[
        "node",
        "rebalance",
        "--max-moves",
        "2",
        "--control",
        "127.0.0.1:1",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--max-moves applies to --by load"), "{err}");
}

/// `node rebalance --by bytes`: 6 MB of values all on one node of three; the rebalance must
/// move spans of them away (planned from the engines' per-slot bytes), leave the node that
/// held them with less, and lose nothing. A window flag is refused with --by bytes.
#[test]
fn rebalance_by_bytes_moves_stored_bytes_off_the_fullest_node() {
    use ringlet_codec::resp::Reply;
    let base = common::free_base(4);
    let b = base.to_string();
    let (up, control, secret) = common::up_admin(&[
        "up",
        "--nodes",
        "3",
        "--port",
        &b,
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "128",
    ]);
    let value = vec![b'x'; 10_000];
    let mut mine = Vec::new();
    let mut i = 0;
    while mine.len() < 600 {
        let k = format!("bytes:{i}");
        i += 1;
        match common::call(base, &[b"SET", k.as_bytes(), &value]) {
            Reply::Simple(s) if s == b"OK" => mine.push(k),
            Reply::Error(e) if e.starts_with(b"MOVED") => {}
            other => panic!("SET {k}: {other:?}"),
        }
    }
    let node_bytes = |port: u16| -> u64 {
        let Reply::Bulk(j) = common::call(port, &[b"CLUSTER", b"RINGLET-LOAD", b"SLOTS"]) else {
            panic!("load report")
        };
        let v: serde_json::Value = serde_json::from_slice(&j).unwrap();
        v["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_u64().unwrap())
            .sum()
    };
    let before = node_bytes(base);
    assert!(before >= 6_000_000, "{before}");
    let refused = ringlet(&[
        "node",
        "rebalance",
        "--by",
        "bytes",
        "--balance-window",
        "2",
        "--control",
        &control,
        "--cluster-secret-file",
        &secret,
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--balance-window applies to --by load"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let o = ringlet(&[
        "node",
        "rebalance",
        "--by",
        "bytes",
        "--max-moves",
        "4",
        "--control",
        &control,
        "--cluster-secret-file",
        &secret,
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("now at node"), "no move made: {out}");
    assert!(out.contains(" bytes"), "{out}");
    let after = node_bytes(base);
    assert!(
        after < before * 3 / 4,
        "still {after} of {before} bytes on the full node: {out}"
    );
    for k in &mine {
        assert_eq!(
            common::get_following_moved(base, k.as_bytes()),
            Reply::Bulk(value.clone()),
            "{k}"
        );
    }
    drop(up);
}
