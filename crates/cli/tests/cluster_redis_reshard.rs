//! Redis Cluster's own resharding tool against a Ringlet cluster (issue 12 item 4): the real
//! `redis-cli --cluster reshard` moves slots holding keys from one node to another through
//! CLUSTER SETSLOT / GETKEYSINSLOT and MIGRATE (crates/cluster/src/resp/reshard.rs); every
//! key must read back with its value afterwards, and `redis-cli --cluster check` must find
//! the slots covered with every node agreeing. Also the refusals: MIGRATE of a slot that was
//! not marked MIGRATING, MIGRATE COPY, MIGRATE outside the cluster, an unknown node id.

mod common;

use common::call;
use ringlet_codec::resp::Reply;
use std::io::Write;
use std::process::{Command, Stdio};

fn have_redis_cli() -> bool {
    let have = Command::new("redis-cli")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have && std::env::var_os("RINGLET_REQUIRE_REDIS").is_some() {
        panic!("redis-cli is required (RINGLET_REQUIRE_REDIS is set)");
    }
    have
}

fn text(r: &Reply) -> String {
    match r {
        Reply::Bulk(b) | Reply::Simple(b) | Reply::Error(b) => String::from_utf8_lossy(b).into(),
        other => format!("{other:?}"),
    }
}

/// `redis-cli -c -p port` fed `lines` on stdin; its stdout.
fn redis_cli_pipe(port: u16, lines: &str) -> String {
    let mut child = Command::new("redis-cli")
        .args(["-c", "-p", &port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("redis-cli");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("redis-cli output");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// node id (40 hex) → (port, slots it serves), from CLUSTER NODES.
fn nodes(port: u16) -> Vec<(String, u16, u32)> {
    let r = call(port, &[b"CLUSTER", b"NODES"]);
    text(&r)
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let p: u16 = w[1]
                .split('@')
                .next()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let slots: u32 = w[8..]
                .iter()
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => b.parse::<u32>().unwrap() - a.parse::<u32>().unwrap() + 1,
                    None => 1,
                })
                .sum();
            (w[0].to_string(), p, slots)
        })
        .collect()
}

#[test]
fn redis_cli_reshard_moves_slots_with_their_keys() {
    if !have_redis_cli() {
        return;
    }
    let base = common::free_base(4);
    let b = base.to_string();
    let _up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--port",
        &b,
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
    ]);
    let n = 4000;
    let sets: String = (0..n).map(|i| format!("SET rk:{i} v{i}\n")).collect();
    redis_cli_pipe(base, &sets);
    let before = nodes(base);
    assert_eq!(before.len(), 3, "{before:?}");
    let (from, from_port, from_slots) = before.iter().find(|n| n.1 == base).unwrap().clone();
    let (to, to_port, to_slots) = before.iter().find(|n| n.1 == base + 1).unwrap().clone();

    // Refusals, each with its reason.
    let own_key = (0..n)
        .map(|i| format!("rk:{i}"))
        .find(|k| {
            let s = call(base, &[b"CLUSTER", b"KEYSLOT", k.as_bytes()]);
            let Reply::Integer(slot) = s else {
                return false;
            };
            matches!(call(base, &[b"CLUSTER", b"COUNTKEYSINSLOT", slot.to_string().as_bytes()]),
                Reply::Integer(c) if c > 0)
        })
        .expect("a key served by the first node");
    let p = to_port.to_string();
    let r = call(
        base,
        &[
            b"MIGRATE",
            b"127.0.0.1",
            p.as_bytes(),
            own_key.as_bytes(),
            b"0",
            b"1000",
        ],
    );
    assert!(
        text(&r).contains("CLUSTER SETSLOT"),
        "unmarked MIGRATE: {r:?}"
    );
    let r = call(
        base,
        &[
            b"MIGRATE",
            b"127.0.0.1",
            p.as_bytes(),
            own_key.as_bytes(),
            b"0",
            b"1000",
            b"COPY",
        ],
    );
    assert!(text(&r).contains("COPY is not supported"), "{r:?}");
    let r = call(
        base,
        &[
            b"MIGRATE",
            b"127.0.0.1",
            b"1",
            own_key.as_bytes(),
            b"0",
            b"1000",
        ],
    );
    assert!(text(&r).contains("not a member"), "{r:?}");
    let r = call(
        base,
        &[
            b"CLUSTER",
            b"SETSLOT",
            b"1",
            b"NODE",
            b"00000000000000000000000000000000000000ff",
        ],
    );
    assert!(text(&r).contains("don't know about node"), "{r:?}");
    let r = call(base, &[b"CLUSTER", b"SETSLOT", b"16384", b"STABLE"]);
    assert!(text(&r).contains("out of range slot"), "{r:?}");

    // The real tool, unchanged.
    let moved = 40;
    let out = Command::new("redis-cli")
        .args([
            "--cluster",
            "reshard",
            &format!("127.0.0.1:{base}"),
            "--cluster-from",
            &from,
            "--cluster-to",
            &to,
            "--cluster-slots",
            &moved.to_string(),
            "--cluster-yes",
        ])
        .output()
        .expect("redis-cli --cluster reshard");
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "reshard failed: {log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A dot per MIGRATE batch: some moved slots held keys.
    assert!(
        log.lines()
            .any(|l| l.starts_with("Moving slot") && l.ends_with('.')),
        "{log}"
    );

    let after = nodes(base);
    let slots_of = |id: &str| after.iter().find(|n| n.0 == id).unwrap().2;
    assert_eq!(slots_of(&from), from_slots - moved, "{after:?}");
    assert_eq!(slots_of(&to), to_slots + moved, "{after:?}");
    let check = Command::new("redis-cli")
        .args(["--cluster", "check", &format!("127.0.0.1:{from_port}")])
        .output()
        .expect("redis-cli --cluster check");
    let check = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.contains("All nodes agree about slots configuration"),
        "{check}"
    );
    assert!(check.contains("All 16384 slots covered"), "{check}");

    let gets: String = (0..n).map(|i| format!("GET rk:{i}\n")).collect();
    let got = redis_cli_pipe(base, &gets);
    // redis-cli -c prints "-> Redirected to slot ..." before a redirected command's reply.
    let got: Vec<&str> = got
        .lines()
        .filter(|l| !l.starts_with("-> Redirected"))
        .collect();
    assert_eq!(got.len(), n, "one reply per GET");
    // A reply other than the value is read again by itself for up to 10 s: an error reply
    // (TRYAGAIN while a node of a loaded machine misses its lease and fails over) is
    // transient, a lost or wrong value is not. Each one is printed either way.
    for (i, v) in got.iter().enumerate() {
        let want = format!("v{i}");
        if *v == want {
            continue;
        }
        eprintln!("rk:{i}: redis-cli read {v:?} after the reshard; reading it again");
        let key = format!("rk:{i}");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let r = common::get_following_moved(base, key.as_bytes());
            if r == Reply::Bulk(want.clone().into_bytes()) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline && matches!(r, Reply::Error(_)),
                "rk:{i} after the reshard: {r:?}, want {want}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
