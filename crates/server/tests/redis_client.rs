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

/// A redis-crate connection to a server on this host.
fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
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
    let mut a = connect(redis_proc.port);
    let mut b = connect(node.local_addr().port());

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

/// The shape of a reply: its type at every level, with integers and bulk strings replaced
/// by their kind (values such as timestamps and byte counts differ between the servers).
fn shape(v: &redis::Value) -> String {
    use redis::Value as V;
    match v {
        V::Nil => "nil".into(),
        V::Int(_) => "int".into(),
        V::BulkString(_) => "bulk".into(),
        V::Array(items) => format!(
            "[{}]",
            items.iter().map(shape).collect::<Vec<_>>().join(",")
        ),
        V::SimpleString(s) => format!("+{s}"),
        V::Okay => "OK".into(),
        other => format!("{other:?}"),
    }
}

/// MEMORY, SLOWLOG and LATENCY (issue 11, docs/design/commands.md): the deterministic replies
/// are equal to Redis 7's (errors, empty logs, nil for a missing key, CONFIG texts), the
/// others have Redis's shape (a slow-log entry is six fields with the arguments as sent;
/// MEMORY USAGE an integer).
#[test]
fn introspection_commands_match_redis() {
    let Some(redis_proc) = start_redis(&[]) else {
        return;
    };
    let node = start_ringlet(None);
    let mut a = connect(redis_proc.port);
    let mut b = connect(node.local_addr().port());
    let mut shapes = Vec::new();
    let cmds = vec![
        v(&[b"FLUSHALL"]),
        v(&[b"SET", b"k", b"v"]),
        v(&[b"MEMORY", b"USAGE", b"nope"]),
        v(&[b"MEMORY", b"USAGE", b"k", b"SAMPLES", b"x"]),
        v(&[b"MEMORY", b"USAGE", b"k", b"SAMPLES"]),
        v(&[b"MEMORY", b"USAGE", b"k", b"FOO", b"1"]),
        v(&[b"MEMORY", b"USAGE"]),
        v(&[b"MEMORY", b"NOPE"]),
        v(&[b"SLOWLOG", b"RESET"]),
        v(&[b"SLOWLOG", b"LEN"]),
        v(&[b"SLOWLOG", b"GET"]),
        v(&[b"SLOWLOG", b"GET", b"-2"]),
        v(&[b"SLOWLOG", b"GET", b"x"]),
        v(&[b"SLOWLOG", b"GET", b"1", b"2"]),
        v(&[b"SLOWLOG", b"LEN", b"x"]),
        v(&[b"CONFIG", b"GET", b"slowlog-max-len"]),
        v(&[b"CONFIG", b"GET", b"slowlog-log-slower-than"]),
        v(&[b"CONFIG", b"GET", b"latency-monitor-threshold"]),
        v(&[b"CONFIG", b"SET", b"slowlog-max-len", b"-1"]),
        v(&[b"CONFIG", b"SET", b"slowlog-log-slower-than", b"-2"]),
        v(&[b"CONFIG", b"SET", b"slowlog-log-slower-than", b"abc"]),
        v(&[b"LATENCY", b"LATEST"]),
        v(&[b"LATENCY", b"HISTORY", b"command"]),
        v(&[b"LATENCY", b"HISTORY"]),
        v(&[b"LATENCY", b"RESET"]),
        v(&[b"LATENCY", b"RESET", b"command", b"fast-command"]),
    ];
    run_both(&cmds, &mut a, &mut b);

    // Every command logged from here; the newest entry is the SET, with its arguments as
    // sent (SLOWLOG GET logs itself only after it answered).
    for c in [&mut a, &mut b] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg("0")
            .query(c)
            .unwrap();
        let _: () = redis::cmd("SLOWLOG").arg("RESET").query(c).unwrap();
        let set: redis::Value = redis::cmd("SET").arg("k").arg("vv").query(c).unwrap();
        assert_eq!(set, redis::Value::Okay);
        let got: redis::Value = redis::cmd("SLOWLOG").arg("GET").arg("1").query(c).unwrap();
        let redis::Value::Array(entries) = &got else {
            panic!("{got:?}")
        };
        let redis::Value::Array(e) = &entries[0] else {
            panic!("{got:?}")
        };
        assert_eq!(
            e[3],
            redis::Value::Array(vec![
                redis::Value::BulkString(b"SET".to_vec()),
                redis::Value::BulkString(b"k".to_vec()),
                redis::Value::BulkString(b"vv".to_vec()),
            ]),
            "{got:?}"
        );
        let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(c).unwrap();
        assert!(len >= 2, "{len}");
        let usage: redis::Value = redis::cmd("MEMORY").arg("USAGE").arg("k").query(c).unwrap();
        shapes.push((shape(&got), shape(&usage)));
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg("10000")
            .query(c)
            .unwrap();
    }
    assert_eq!(shapes[0], shapes[1]);
    assert_eq!(shapes[1].1, "int");
}
