//! TTLs in cluster mode (issue 11): `SET ... EX`, SETEX/PSETEX, EXPIRE/PEXPIRE/EXPIREAT/
//! PEXPIREAT with NX/XX/GT/LT, TTL/PTTL/EXPIRETIME/PEXPIRETIME, PERSIST, GETEX, KEEPTTL, and
//! INCR/APPEND keeping a TTL — each command sent to a real Redis 7 and to a rep:3 cluster
//! (real processes), replies compared (TTL figures within a second's tolerance: the two
//! servers' clocks are read at slightly different moments). Then active expiry: a key with a
//! short TTL reads nil once due, and is deleted on every copy (its `MEMGEST KEY`, which
//! reads the stored entry without hiding expired values, turns nil).
//!
//! Needs `redis-server` (skips loudly without it unless `RINGLET_REQUIRE_REDIS` is set, as CI
//! does).

mod common;

use common::redis::Redis;
use common::{Client, Res};
use ringlet_codec::resp::Reply;
use std::time::{Duration, Instant};

fn cluster_call(c: &mut Client, cmd: &[&[u8]]) -> Reply {
    let write = !matches!(
        cmd[0].to_ascii_lowercase().as_slice(),
        b"get" | b"ttl" | b"pttl" | b"expiretime" | b"pexpiretime"
    );
    let v = cmd.iter().map(|p| p.to_vec()).collect();
    match c.call(v, write, Instant::now() + Duration::from_secs(30)) {
        Res::Ok(r) => r,
        Res::Io => panic!("{:?}: transport failure", String::from_utf8_lossy(cmd[0])),
    }
}

#[test]
fn ttl_commands_match_redis_and_keys_expire_on_every_copy() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let cl = common::start(3, 0, &[]);
    let mut c = Client::new(cl.addrs());
    let future_s = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1000)
        .to_string();
    let future_ms = format!("{future_s}000");
    let script: Vec<Vec<&str>> = vec![
        vec!["SET", "t:a", "1", "EX", "100"],
        vec!["TTL", "t:a"],
        vec!["PTTL", "t:a"],
        vec!["INCR", "t:a"],
        vec!["TTL", "t:a"], // INCR keeps the TTL
        vec!["APPEND", "t:a", "x"],
        vec!["TTL", "t:a"], // so does APPEND
        vec!["SET", "t:a", "2", "KEEPTTL"],
        vec!["TTL", "t:a"],
        vec!["SET", "t:a", "3"],
        vec!["TTL", "t:a"], // a plain SET clears it
        vec!["TTL", "t:missing"],
        vec!["EXPIRE", "t:missing", "10"],
        vec!["EXPIRE", "t:a", "50", "XX"], // no TTL: XX fails
        vec!["EXPIRE", "t:a", "50", "GT"], // no TTL counts as infinite: GT fails
        vec!["EXPIRE", "t:a", "50", "NX"],
        vec!["EXPIRE", "t:a", "60", "NX"],
        vec!["EXPIRE", "t:a", "40", "GT"],
        vec!["EXPIRE", "t:a", "70", "GT"],
        vec!["EXPIRE", "t:a", "80", "LT"],
        vec!["EXPIRE", "t:a", "20", "LT"],
        vec!["TTL", "t:a"],
        vec!["EXPIRE", "t:a", "10", "NX", "XX"],
        vec!["EXPIRE", "t:a", "10", "GT", "LT"],
        vec!["EXPIRE", "t:a", "10", "BOGUS"],
        vec!["EXPIRE", "t:a", "notanumber"],
        vec!["PEXPIRE", "t:a", "90000"],
        vec!["PTTL", "t:a"],
        vec!["EXPIREAT", "t:a", &future_s],
        vec!["EXPIRETIME", "t:a"],
        vec!["PEXPIREAT", "t:a", &future_ms],
        vec!["PEXPIRETIME", "t:a"],
        vec!["PERSIST", "t:a"],
        vec!["PERSIST", "t:a"],
        vec!["TTL", "t:a"],
        vec!["EXPIRETIME", "t:a"],
        vec!["SETEX", "t:b", "100", "v"],
        vec!["TTL", "t:b"],
        vec!["SETEX", "t:b", "0", "v"],
        vec!["SETEX", "t:b", "-5", "v"],
        vec!["PSETEX", "t:b", "100000", "w"],
        vec!["GET", "t:b"],
        vec!["PTTL", "t:b"],
        vec!["SET", "t:c", "v", "EX", "0"],
        vec!["SET", "t:c", "v", "EX", "10", "PX", "100"],
        vec!["SET", "t:c", "v", "PX", "100000", "GET"],
        vec!["GETEX", "t:c", "EX", "200"],
        vec!["TTL", "t:c"],
        vec!["GETEX", "t:c", "PERSIST"],
        vec!["TTL", "t:c"],
        vec!["GETEX", "t:missing"],
        vec!["GETEX", "t:c", "EX", "-1"],
        vec!["EXPIRE", "t:c", "-1"], // in the past: deletes
        vec!["GET", "t:c"],
        vec!["TTL", "t:c"],
    ];
    for cmd in &script {
        let parts: Vec<&[u8]> = cmd.iter().map(|s| s.as_bytes()).collect();
        let want = redis.call(&parts);
        let got = cluster_call(&mut c, &parts);
        let timing = matches!(cmd[0], "TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME");
        match (&want, &got) {
            (Reply::Integer(w), Reply::Integer(g)) if timing && *w >= 0 => {
                let tol = if cmd[0].starts_with('P') { 1000 } else { 1 };
                assert!((w - g).abs() <= tol, "{cmd:?}: redis {w}, cluster {g}");
            }
            _ => assert_eq!(got, want, "{cmd:?}"),
        }
    }
    // Active expiry: due keys read nil at once, and are deleted on every copy soon.
    for i in 0..20 {
        let k = format!("t:short:{i}");
        let r = cluster_call(&mut c, &[b"SET", k.as_bytes(), b"v", b"PX", b"200"]);
        assert_eq!(r, Reply::ok());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for i in 0..20 {
        let k = format!("t:short:{i}");
        loop {
            let gone = cluster_call(&mut c, &[b"GET", k.as_bytes()]) == Reply::Null
                && cluster_call(&mut c, &[b"MEMGEST", b"KEY", k.as_bytes()]) == Reply::Null;
            if gone {
                break;
            }
            assert!(Instant::now() < deadline, "{k} was never expired");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
