//! Differential test against a real Redis 7: Redis is the oracle for both directions.
//!
//! 1. Values are written into Redis with SET/HSET, DUMPed by Redis, and `restore` must give
//!    exactly what GET/HGETALL give. The cases cover every encoding Redis 7 DUMPs for strings
//!    and hashes: integer strings (INT8/16/32 and a 64-bit one Redis stores as text), short
//!    and long raw strings, an LZF-compressed string, binary and empty strings, a listpack
//!    hash, hashtable hashes (too many fields; one value too long), integer fields/values.
//!    OBJECT ENCODING confirms Redis used the encoding each case is meant to exercise.
//! 2. Each of those values is serialized with `dump_string`/`dump_hash`, RESTOREd into Redis
//!    (with REPLACE), and GET/HGETALL must give the value back.
//! 3. Redis's DUMPs of a list, set, sorted set and stream are refused with their type named.
//!
//! `redis-server` is started on a free loopback port with `--save "" --appendonly no` and the
//! listpack thresholds pinned to Redis's defaults (Debian's build may ship others). Without
//! `redis-server` the test prints a loud SKIP and passes, unless `RINGLET_REQUIRE_REDIS` is
//! set (CI sets it), in which case it fails. Readiness is awaited by polling PING (bounded),
//! never by a fixed sleep.

use redis::Connection;
use ringlet_rdb::{dump_hash, dump_string, restore, Error, Fields, Object};
use ringlet_testkit::redis::RedisProc;

/// Redis with the listpack thresholds pinned (this Debian build defaults to 512 entries), so
/// each case gets the encoding it is meant to exercise.
fn start_redis() -> Option<RedisProc> {
    ringlet_testkit::redis::start_redis(
        &[
            "--hash-max-listpack-entries",
            "128",
            "--hash-max-listpack-value",
            "64",
        ],
        "DUMP/RESTORE differential test",
    )
}

fn connect(r: &RedisProc) -> Connection {
    redis::Client::open(format!("redis://127.0.0.1:{}/", r.port))
        .expect("client")
        .get_connection()
        .expect("connect to redis-server")
}

fn dump(con: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP").arg(key).query(con).expect("DUMP")
}

fn encoding(con: &mut Connection, key: &str) -> String {
    redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query(con)
        .expect("OBJECT ENCODING")
}

fn get(con: &mut Connection, key: &str) -> Vec<u8> {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

/// HGETALL, sorted by field (a hashtable's order is Redis's own).
fn hgetall(con: &mut Connection, key: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let flat: Vec<Vec<u8>> = redis::cmd("HGETALL").arg(key).query(con).expect("HGETALL");
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = flat
        .chunks(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect();
    pairs.sort();
    pairs
}

fn restore_into(con: &mut Connection, key: &str, payload: &[u8]) {
    let ok: String = redis::cmd("RESTORE")
        .arg(key)
        .arg(0)
        .arg(payload)
        .arg("REPLACE")
        .query(con)
        .unwrap_or_else(|e| panic!("RESTORE {key}: {e}"));
    assert_eq!(ok, "OK");
}

fn sorted(mut h: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    h.sort();
    h
}

#[test]
fn dump_and_restore_match_redis() {
    let Some(server) = start_redis() else { return };
    let mut con = connect(&server);

    // Strings: (key, value, the encoding OBJECT ENCODING must report).
    let compressible: Vec<u8> = b"ringlet-".iter().cycle().take(10_000).copied().collect();
    let binary: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let long_text: Vec<u8> = (0..3000u32).map(|i| b'!' + (i * 7919 % 90) as u8).collect();
    let strings: Vec<(&str, Vec<u8>, &str)> = vec![
        ("i0", b"0".to_vec(), "int"),
        ("i-1", b"-1".to_vec(), "int"),
        ("i127", b"127".to_vec(), "int"),
        ("i32767", b"32767".to_vec(), "int"),
        ("i2^31-1", b"2147483647".to_vec(), "int"),
        ("i-2^31", b"-2147483648".to_vec(), "int"),
        ("i2^63-1", b"9223372036854775807".to_vec(), "int"),
        ("short", b"hello".to_vec(), "embstr"),
        ("long", long_text, "raw"),
        ("compressible", compressible.clone(), "raw"),
        ("binary", binary, "raw"),
        ("empty", Vec::new(), "embstr"),
    ];
    for (key, value, enc) in &strings {
        let _: () = redis::cmd("SET")
            .arg(*key)
            .arg(value)
            .query(&mut con)
            .expect("SET");
        assert_eq!(&encoding(&mut con, key), enc, "{key}");
        let payload = dump(&mut con, key);
        assert_eq!(
            restore(&payload),
            Ok(Object::String(get(&mut con, key))),
            "{key}"
        );
        assert_eq!(get(&mut con, key), *value, "{key}");
    }
    // The 10 kB string went through LZF (it is far smaller than its value).
    assert!(dump(&mut con, "compressible").len() < 1_000);
    // The 32-bit integers went through the INT encodings (type byte, then 0b11xxxxxx).
    assert_eq!(dump(&mut con, "i-2^31")[1] >> 6, 3);

    // Hashes: (key, fields, the encoding OBJECT ENCODING must report).
    let small: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"name".to_vec(), b"ringlet".to_vec()),
        (b"".to_vec(), b"empty field name".to_vec()),
        (b"bin\x00\xff".to_vec(), b"\x00\x01\x02".to_vec()),
        (b"empty".to_vec(), Vec::new()),
    ];
    let many: Vec<(Vec<u8>, Vec<u8>)> = (0..200)
        .map(|i| {
            (
                format!("field:{i}").into_bytes(),
                format!("value {i}").into_bytes(),
            )
        })
        .collect();
    let wide: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"a".to_vec(), b"short".to_vec()),
        (b"wide".to_vec(), vec![b'w'; 100]),
        (b"7".to_vec(), b"-7".to_vec()),
    ];
    let ints: Vec<(Vec<u8>, Vec<u8>)> = [
        ("0", "127"),
        ("1", "-1"),
        ("128", "-4096"),
        ("32767", "-32768"),
        ("100000", "-8388608"),
        ("2147483647", "-2147483648"),
        ("9223372036854775807", "-9223372036854775808"),
        ("12.5", "1e3"),
    ]
    .iter()
    .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
    .collect();
    // The fields of Redis's own "Hash ziplist of various encodings" test (unit/type/hash):
    // 14- and 32-bit lengths, integers of every width, LZF in a hashtable.
    let various: Fields = [
        ("ZIP_INT_8B", "127".into()),
        ("ZIP_INT_16B", "32767".into()),
        ("ZIP_INT_32B", "2147483647".into()),
        ("ZIP_INT_64B", "9223372036854775808".into()),
        ("ZIP_INT_IMM_MIN", "0".into()),
        ("ZIP_INT_IMM_MAX", "12".into()),
        ("ZIP_STR_06B", "x".repeat(31)),
        ("ZIP_STR_14B", "x".repeat(8191)),
        ("ZIP_STR_32B", "x".repeat(65535)),
    ]
    .into_iter()
    .map(|(f, v): (&str, String)| (f.as_bytes().to_vec(), v.into_bytes()))
    .collect();
    let hashes: Vec<(&str, &Fields, &str)> = vec![
        ("small", &small, "listpack"),
        ("many", &many, "hashtable"),
        ("wide", &wide, "hashtable"),
        ("ints", &ints, "listpack"),
        ("various", &various, "hashtable"),
    ];
    for (key, fields, enc) in &hashes {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(*key);
        for (f, v) in fields.iter() {
            cmd.arg(f).arg(v);
        }
        let _: i64 = cmd.query(&mut con).expect("HSET");
        assert_eq!(&encoding(&mut con, key), enc, "{key}");
        let payload = dump(&mut con, key);
        let Ok(Object::Hash(got)) = restore(&payload) else {
            panic!("{key}: {:?}", restore(&payload));
        };
        assert_eq!(got.len(), fields.len(), "{key}: no field lost or doubled");
        assert_eq!(sorted(got), hgetall(&mut con, key), "{key}");
        assert_eq!(hgetall(&mut con, key), sorted(fields.to_vec()), "{key}");
    }

    // The same fields in a listpack (Redis allowed to keep long values in one), and an i64:
    // 32-bit string lengths, 32- and 64-bit integers, the whole blob LZF-compressed.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hash-max-listpack-value")
        .arg(100_000)
        .query(&mut con)
        .expect("CONFIG SET");
    let mut cmd = redis::cmd("HSET");
    cmd.arg("lp:various").arg("i64").arg(i64::MIN);
    for (f, v) in &various {
        cmd.arg(f).arg(v);
    }
    let _: i64 = cmd.query(&mut con).expect("HSET");
    assert_eq!(encoding(&mut con, "lp:various"), "listpack");
    let payload = dump(&mut con, "lp:various");
    assert_eq!(
        payload[..2],
        [16, 0xC3],
        "type 16: a listpack, LZF-compressed"
    );
    let Ok(Object::Hash(got)) = restore(&payload) else {
        panic!("lp:various: {:?}", restore(&payload));
    };
    assert_eq!(sorted(got), hgetall(&mut con, "lp:various"));

    // Our payloads, RESTOREd into Redis.
    for (key, value, _) in &strings {
        let copy = format!("copy:{key}");
        restore_into(&mut con, &copy, &dump_string(value));
        assert_eq!(get(&mut con, &copy), *value, "{copy}");
    }
    for (key, fields, _) in &hashes {
        let copy = format!("copy:{key}");
        restore_into(
            &mut con,
            &copy,
            &dump_hash(fields.iter().map(|(f, v)| (f.as_slice(), v.as_slice()))),
        );
        assert_eq!(hgetall(&mut con, &copy), sorted(fields.to_vec()), "{copy}");
    }
    // REPLACE over an existing key of another type works too, and a re-DUMP by Redis of what
    // we wrote still reads back the same.
    restore_into(
        &mut con,
        "copy:short",
        &dump_hash([(&b"f"[..], &b"v"[..])].into_iter()),
    );
    assert_eq!(
        restore(&dump(&mut con, "copy:short")),
        Ok(Object::Hash(vec![(b"f".to_vec(), b"v".to_vec())]))
    );
    // Redis refuses a hash with no fields, as `restore` does.
    let empty = dump_hash(std::iter::empty());
    let refused: redis::RedisResult<String> = redis::cmd("RESTORE")
        .arg("copy:empty-hash")
        .arg(0)
        .arg(&empty)
        .query(&mut con);
    assert!(refused.is_err(), "{refused:?}");
    assert!(restore(&empty).is_err());

    // Types Ringlet does not store are refused by name.
    let _: () = redis::cmd("RPUSH")
        .arg("list")
        .arg("a")
        .arg("b")
        .query(&mut con)
        .expect("RPUSH");
    let _: () = redis::cmd("SADD")
        .arg("set")
        .arg("a")
        .arg("b")
        .query(&mut con)
        .expect("SADD");
    let _: () = redis::cmd("SADD")
        .arg("intset")
        .arg(1)
        .arg(2)
        .query(&mut con)
        .expect("SADD");
    let _: () = redis::cmd("ZADD")
        .arg("zset")
        .arg(1)
        .arg("a")
        .query(&mut con)
        .expect("ZADD");
    let _: String = redis::cmd("XADD")
        .arg("stream")
        .arg("*")
        .arg("f")
        .arg("v")
        .query(&mut con)
        .expect("XADD");
    for (key, type_name) in [
        ("list", "list"),
        ("set", "set"),
        ("intset", "set"),
        ("zset", "sorted set"),
        ("stream", "stream"),
    ] {
        assert_eq!(
            restore(&dump(&mut con, key)),
            Err(Error::Unsupported { type_name }),
            "{key}"
        );
    }
}
