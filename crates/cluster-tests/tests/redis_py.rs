//! redis-py's `RedisCluster` runs unchanged against a ringlet cluster (COMMAND, CLUSTER SLOTS,
//! MOVED, pipelines). Needs `python3` with the `redis` package; without them the test says so
//! and passes, unless `RINGLET_REQUIRE_REDIS` is set (CI sets it): then it fails.

mod common;

#[test]
fn redis_py_cluster_client_works_unchanged() {
    if !common::have_redis_py() {
        return;
    }
    let cluster = common::start(3, 1, &[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/redis_py_cluster.py");
    let out = std::process::Command::new("python3")
        .args([script, &cluster.base.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "redis-py script failed");
}
