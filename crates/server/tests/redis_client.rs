//! Differential test through a real client library: the `redis` crate talks to Redis 7 and to
//! Ringlet, and every command's decoded result (value or error code + text) must be equal.
//! Covers binary keys and values, a `redis::pipe()` pipeline and an atomic (MULTI-less)
//! pipeline of mixed successes and errors.

mod common;

use common::{start_redis, start_ringlet};

fn outcome(r: redis::RedisResult<redis::Value>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("ERR code={:?} detail={:?}", e.code(), e.detail()),
    }
}

fn run_both(cmds: &[Vec<Vec<u8>>], a: &mut redis::Connection, b: &mut redis::Connection) {
    for args in cmds {
        let mut c = redis::cmd(std::str::from_utf8(&args[0]).unwrap());
        for x in &args[1..] {
            c.arg(x.as_slice());
        }
        let want = outcome(c.query(a));
        let got = outcome(c.query(b));
        assert_eq!(
            want,
            got,
            "command {:?}",
            args.iter()
                .map(|x| String::from_utf8_lossy(x))
                .collect::<Vec<_>>()
        );
    }
}

fn v(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

#[test]
fn redis_crate_sees_identical_results() {
    let Some(redis_proc) = start_redis(&[]) else {
        return;
    };
    let node = start_ringlet(None);
    let mut a = redis::Client::open(format!("redis://127.0.0.1:{}/", redis_proc.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut b = redis::Client::open(format!("redis://127.0.0.1:{}/", node.local_addr().port()))
        .unwrap()
        .get_connection()
        .unwrap();

    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let cmds = vec![
        v(&[b"FLUSHALL"]),
        v(&[b"SET", b"\x00bin\xffkey\r\n", b"\x00\x01\x02\xff"]),
        v(&[b"GET", b"\x00bin\xffkey\r\n"]),
        v(&[b"SET", b"big", &big]),
        v(&[b"GET", b"big"]),
        v(&[b"STRLEN", b"big"]),
        v(&[b"GETRANGE", b"big", b"1000", b"1010"]),
        v(&[b"APPEND", b"big", b"tail"]),
        v(&[b"GETRANGE", b"big", b"-4", b"-1"]),
        v(&[b"MSET", b"a", b"1", b"b", b"2"]),
        v(&[b"MGET", b"a", b"b", b"zz"]),
        v(&[b"INCRBY", b"a", b"41"]),
        v(&[b"INCRBYFLOAT", b"b", b"0.25"]),
        v(&[b"INCR", b"big"]),
        v(&[b"SET", b"k", b"v", b"EXAT", b"4102444800", b"GET"]),
        v(&[b"GETEX", b"k", b"PERSIST"]),
        v(&[b"TTL", b"k"]),
        v(&[b"EXPIREAT", b"k", b"4102444800", b"NX"]),
        v(&[b"EXPIRETIME_NOT_A_COMMAND", b"k"]),
        v(&[b"DEL", b"a", b"b", b"nope"]),
        v(&[b"EXISTS", b"a", b"k", b"k"]),
        v(&[b"TYPE", b"k"]),
        v(&[b"SET", b"k"]),
        v(&[b"ECHO", b"\x00\xff"]),
        // No replicas on either side: 0 copies (Redis after the 10 ms, Ringlet at once).
        v(&[b"WAIT", b"0", b"0"]),
        v(&[b"WAIT", b"1", b"10"]),
        v(&[b"WAIT", b"1", b"-1"]),
        v(&[b"WAIT", b"x", b"0"]),
        v(&[b"ROLE"]),
        v(&[b"ROLE", b"x"]),
    ];
    run_both(&cmds, &mut a, &mut b);

    // One pipeline, many replies (errors included), compared element by element.
    let mut p = redis::pipe();
    for i in 0..200 {
        p.cmd("SET").arg(format!("p:{i}")).arg(i);
        p.cmd("INCR").arg(format!("p:{i}"));
        p.cmd("GET").arg(format!("p:{i}"));
        p.cmd("INCRBY").arg(format!("p:{i}")).arg("x").ignore();
    }
    p.cmd("MGET").arg("p:1").arg("p:199").arg("p:none");
    let want: redis::RedisResult<Vec<redis::Value>> = p.query(&mut a);
    let got: redis::RedisResult<Vec<redis::Value>> = p.query(&mut b);
    assert_eq!(format!("{want:?}"), format!("{got:?}"));
}
