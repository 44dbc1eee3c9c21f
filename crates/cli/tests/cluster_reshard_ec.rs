//! Moving erasure-coded values under load (issue 12, docs/design/cluster-resharding.md
//! "Moving ec:K+M values"): `ringlet up --nodes 3 --spares 2 --default-memgest ec:2+1`
//! (PGs of 2 data + 1 redundant node, every key ec), a redis-py `RedisCluster` client
//! writing values of 1 to 3,000 bytes and reading them back all along, then `ringlet node
//! add` + `node rebalance` twice (3 → 5 data nodes: every span that moves has its ec values
//! re-encoded in the new coordinator's group) and `node remove` twice (back to 3: the
//! removed nodes' spans move away and their groups retire). Every operation must succeed,
//! every acknowledged value must read back byte-identical from a fresh client, and the
//! shares must be equal at 5 nodes.
//!
//! Before this work `node add` was refused outright while an ec memgest existed.

mod common;

use ringlet_codec::resp::Reply;
use std::process::Command;

const LOAD: &str = r#"
import sys, os, redis
from redis.cluster import RedisCluster
port, stop_file, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rc = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
def value(i):
    # 1..3000 bytes, depending on i: a value decoded from wrong bytes differs.
    n = 1 + (i * 7919) % 3000
    return ("%d:" % i + "".join(chr(33 + (i * 31 + j * 7) % 90) for j in range(n)))[:max(n, 8)]
acked, ops, failed, i = {}, 0, [], 0
while not os.path.exists(stop_file) or i < 3000:
    k = "ec:%d" % (i % 1500)
    v = value(i)
    try:
        rc.set(k, v)
        acked[k] = v
        got = rc.get(k)
        if got is None or got.decode() != v:
            failed.append("read %s: %r... want %s..." % (k, (got or b"")[:20], v[:20]))
        ops += 2
    except Exception as e:
        failed.append("%s: %r" % (k, e))
    i += 1
    if i == 100:
        open(stop_file + ".started", "w").close()
rc2 = RedisCluster(host="127.0.0.1", port=port, socket_timeout=10)
lost = []
for k, v in acked.items():
    got = rc2.get(k)
    if (got or b"").decode() != v:
        lost.append("lost %s slot %d: got %r..., acked %s..." % (k, rc2.keyslot(k), (got or b"")[:20], v[:20]))
with open(out, "w") as f:
    f.write("%d %d %d %d\n" % (ops, len(failed), len(lost), len(acked)))
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
fn grow_and_shrink_with_ec_values_under_redis_py_load() {
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
        "ec:2+1",
        "--memory-mb",
        "64",
    ]);
    let dir = std::env::temp_dir().join(format!("ringlet-reshard-ec-{}", std::process::id()));
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
    let map = ringlet_control::ClusterMap::from_json(admin(&["node", "map"]).trim()).unwrap();
    assert_eq!(
        map.memgest_kind(map.default_memgest),
        ringlet_types::MemgestKind::Ec { k: 2, m: 1 },
        "every key of this test is erasure-coded"
    );
    for (id, rate) in [("4", None), ("5", Some("20"))] {
        assert_eq!(admin(&["node", "add", id]).trim(), "OK");
        let mut args = vec!["node", "rebalance"];
        args.extend(rate.map(|r| ["--rate", r]).into_iter().flatten());
        let log = admin(&args);
        assert!(log.contains("rebalanced:"), "{log}");
        eprintln!("{log}");
    }
    // The moves carried keys, and every key here is ec: values were re-encoded.
    let pulled: u64 = (0..5)
        .map(|i| {
            let Reply::Bulk(b) = common::call(base + i, &[b"INFO"]) else {
                panic!("INFO")
            };
            String::from_utf8(b)
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("reshard_keys_pulled:").map(str::to_string))
                .expect("reshard_keys_pulled in INFO")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    eprintln!("keys pulled by the grows' handoffs: {pulled}");
    assert!(pulled > 0, "the moves carried no ec value");
    let grown = ringlet_control::ClusterMap::from_json(admin(&["node", "map"]).trim()).unwrap();
    let per = grown.placement.as_ref().unwrap().slots_per_coordinator();
    assert_eq!(per.len(), 5, "{per:?}");
    assert!(per.values().all(|c| (3276..=3277).contains(c)), "{per:?}");
    for id in ["5", "4"] {
        let log = admin(&["node", "remove", id]);
        assert!(log.contains(&format!("node {id} removed")), "{log}");
        eprintln!("{log}");
    }
    std::fs::write(&stop, b"").unwrap();
    assert!(load.wait().unwrap().success(), "load script failed");
    let report = std::fs::read_to_string(&out).unwrap();
    let mut it = report.lines().next().unwrap().split(' ');
    let mut num = || -> u64 { it.next().unwrap().parse().unwrap() };
    let (ops, failed, lost, keys) = (num(), num(), num(), num());
    eprintln!("load: {ops} operations, {failed} failed, {lost} lost of {keys} keys");
    assert!(ops > 0 && keys > 0);
    assert_eq!((failed, lost), (0, 0), "{report}");
    let m = ringlet_control::ClusterMap::from_json(admin(&["node", "map"]).trim()).unwrap();
    let per = m.placement.as_ref().unwrap().slots_per_coordinator();
    assert_eq!(per.len(), 3, "{per:?}");
    assert!(m.handoffs.is_empty());
    drop(up);
    let _ = std::fs::remove_dir_all(&dir);
}
