//! Differential tests: the same command sequences go to a real Redis 7 and to a Ringlet node,
//! and the raw reply bytes must be identical (RESP2, then RESP3 after `HELLO 3`).
//!
//! This is not a list of expected answers: Redis is the oracle. Each script line is one
//! command, optionally prefixed by how to compare:
//!
//! - (no prefix) byte-identical replies;
//! - `sorted:` both are arrays; compared as sorted multisets (KEYS order is unspecified);
//! - `ttl<N>:` both integers within N of each other (time passes between the two sends);
//! - field-level modes for replies that legitimately differ in part (ids, ports, Ringlet's
//!   command table being a subset of Redis's): `int:` both positive integers; `client:` CLIENT
//!   INFO/LIST lines with the same fields in the same order and equal deterministic fields;
//!   `commands:` / `docs:` every entry Ringlet lists equals Redis's entry for that command;
//!   `count:` COMMAND COUNT equals the number of entries COMMAND returns, on each server;
//!   `config:` the same parameter names, integer values; `info:` Ringlet's sections appear in
//!   Redis's order, each of its fields exists in Redis's section, deterministic fields equal;
//!   `hello:` the same keys in the same order, equal proto/mode/role/modules;
//! - `ignore:` sent to both (for its effect), reply not compared.
//!
//! Arguments are split on spaces; `\s` is a space, `\xHH` any byte, `\e` the empty string.
//! Times use absolute EXAT/PXAT far in the future, or TTL ranges, so no assertion depends
//! on how long the test takes.

mod common;

use common::{start_redis, start_ringlet, Raw, Val};

/// Parse one script argument (`\s`, `\xHH`, `\e` escapes).
fn arg(w: &str) -> Vec<u8> {
    if w == "\\e" {
        return Vec::new();
    }
    let b = w.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b's' => {
                    out.push(b' ');
                    i += 2;
                    continue;
                }
                b'x' if i + 3 < b.len() => {
                    let h = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(h, 16).unwrap());
                    i += 4;
                    continue;
                }
                _ => {}
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

enum Mode {
    Exact,
    Sorted,
    Ttl(i64),
    Field(Field),
    Ignore,
}

#[derive(Clone, Copy)]
enum Field {
    Int,
    Client,
    Commands,
    Docs,
    Count,
    Config,
    Info,
    Hello,
}

fn parse_line(line: &str) -> (Mode, Vec<Vec<u8>>) {
    let (mode, rest) = if let Some(r) = line.strip_prefix("sorted:") {
        (Mode::Sorted, r)
    } else if let Some((f, r)) = [
        ("int:", Field::Int),
        ("client:", Field::Client),
        ("commands:", Field::Commands),
        ("docs:", Field::Docs),
        ("count:", Field::Count),
        ("config:", Field::Config),
        ("info:", Field::Info),
        ("hello:", Field::Hello),
    ]
    .iter()
    .find_map(|(p, f)| line.strip_prefix(p).map(|r| (*f, r)))
    {
        (Mode::Field(f), r)
    } else if let Some(r) = line.strip_prefix("ignore:") {
        (Mode::Ignore, r)
    } else if let Some(r) = line.strip_prefix("ttl") {
        let (n, r) = r.split_once(':').expect("ttlN:");
        (Mode::Ttl(n.parse().unwrap()), r)
    } else {
        (Mode::Exact, line)
    };
    (
        mode,
        rest.split(' ').filter(|w| !w.is_empty()).map(arg).collect(),
    )
}

/// Elements of a flat RESP array reply (bulk strings / integers only), for `sorted:`.
fn array_items(reply: &[u8]) -> Vec<Vec<u8>> {
    let text = reply;
    assert!(
        matches!(text[0], b'*' | b'~' | b'%'),
        "not an array: {}",
        String::from_utf8_lossy(reply)
    );
    let mut items = Vec::new();
    let mut pos = text.iter().position(|&c| c == b'\n').unwrap() + 1;
    while pos < text.len() {
        let (info, n) = ringlet_codec::resp::scan_reply(&text[pos..])
            .unwrap()
            .unwrap();
        let _ = info;
        items.push(text[pos..pos + n].to_vec());
        pos += n;
    }
    items.sort();
    items
}

fn int_of(reply: &[u8]) -> i64 {
    assert_eq!(
        reply[0],
        b':',
        "not an integer: {}",
        String::from_utf8_lossy(reply)
    );
    std::str::from_utf8(&reply[1..reply.len() - 2])
        .unwrap()
        .parse()
        .unwrap()
}

/// Run `script` on both servers over one connection each and compare.
fn run(script: &str, redis: &mut Raw, ringlet: &mut Raw) {
    for (n, line) in script.lines().map(str::trim).enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (mode, args) = parse_line(line);
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let want = redis.call(&argv);
        let got = ringlet.call(&argv);
        let show = |b: &[u8]| {
            let s = String::from_utf8_lossy(b).into_owned();
            if s.len() > 400 {
                format!(
                    "{}... ({} bytes)",
                    &s[..s.floor_char_boundary(400)],
                    b.len()
                )
            } else {
                s
            }
        };
        let ctx = || {
            format!(
                "line {}: `{line}`\n redis:   {:?}\n ringlet: {:?}",
                n + 1,
                show(&want),
                show(&got)
            )
        };
        match mode {
            Mode::Exact => assert!(want == got, "{}", ctx()),
            Mode::Sorted => assert!(array_items(&want) == array_items(&got), "{}", ctx()),
            Mode::Ttl(tol) => assert!((int_of(&want) - int_of(&got)).abs() <= tol, "{}", ctx()),
            Mode::Field(f) => fields(f, &argv, &want, &got, redis, ringlet, &ctx),
            Mode::Ignore => {}
        }
    }
}

/// Fields of CLIENT INFO / CLIENT LIST whose values do not depend on timing, sockets or ids.
const CLIENT_FIXED: &[&str] = &[
    "name", "db", "sub", "psub", "ssub", "multi", "flags", "events", "cmd", "user", "redir", "resp",
];

/// INFO fields whose values do not depend on the process, the build or the time
/// (`multiplexing_api` is left out: it names the node's loop, io_uring where the kernel allows
/// it, and Redis says epoll).
const INFO_FIXED: &[&str] = &[
    "redis_mode",
    "arch_bits",
    "uptime_in_days",
    "connected_clients",
    "maxclients",
    "blocked_clients",
];

/// Commands Ringlet has and Redis does not (allowed to be absent from Redis's table).
const RINGLET_ONLY: &[&str] = &["memgest", "link", "record", "chase"];
/// Subcommands Redis 7.0 lacks: CLUSTER RINGLET-LOAD (a node's load report) and Redis 7.2's
/// CLIENT SETINFO.
const RINGLET_ONLY_SUBCOMMANDS: &[&str] = &["cluster|ringlet-load", "client|setinfo"];

/// `(name, fields)` per INFO section, in order.
fn info_sections(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        if let Some(h) = line.strip_prefix("# ") {
            out.push((h.to_string(), Vec::new()));
        } else {
            let (k, v) = line.split_once(':').expect("field line");
            out.last_mut()
                .expect("field before any section")
                .1
                .push((k.to_string(), v.to_string()));
        }
    }
    out
}

/// The field-level comparisons (see the module comment).
fn fields(
    f: Field,
    argv: &[&[u8]],
    want: &[u8],
    got: &[u8],
    redis: &mut Raw,
    ringlet: &mut Raw,
    ctx: &dyn Fn() -> String,
) {
    if want[0] == b'-' || got[0] == b'-' {
        // Errors are deterministic: compare them whole.
        assert!(want == got, "{}", ctx());
        return;
    }
    let (w, g) = (Val::parse(want), Val::parse(got));
    match f {
        Field::Int => {
            for v in [&w, &g] {
                let Val::Line(b':', n) = v else {
                    panic!("not an integer\n{}", ctx())
                };
                let n: i64 = std::str::from_utf8(n).unwrap().parse().unwrap();
                assert!(n > 0, "{}", ctx());
            }
        }
        Field::Client => {
            let lines = |v: &Val| -> Vec<Vec<(String, String)>> {
                v.text()
                    .lines()
                    .map(|l| {
                        l.split(' ')
                            .map(|kv| {
                                let (k, v) = kv.split_once('=').expect("k=v");
                                (k.to_string(), v.to_string())
                            })
                            .collect()
                    })
                    .collect()
            };
            let (wl, gl) = (lines(&w), lines(&g));
            assert_eq!(wl.len(), gl.len(), "client count\n{}", ctx());
            assert!(!gl.is_empty(), "{}", ctx());
            for (wf, gf) in wl.iter().zip(&gl) {
                let names =
                    |f: &[(String, String)]| f.iter().map(|p| p.0.clone()).collect::<Vec<_>>();
                assert_eq!(names(wf), names(gf), "field names\n{}", ctx());
                for ((k, wv), (_, gv)) in wf.iter().zip(gf) {
                    if CLIENT_FIXED.contains(&k.as_str()) {
                        assert_eq!(wv, gv, "field {k}\n{}", ctx());
                    }
                }
            }
        }
        Field::Commands => {
            let (we, ge) = (common::command_entries(&w), common::command_entries(&g));
            let mut compared = 0;
            for (name, entry) in &ge {
                match we.get(name) {
                    Some(r) => {
                        if let Some(why) = common::command_entry_mismatch(r, entry) {
                            panic!("COMMAND entry of {name}: {why}\n{}", ctx());
                        }
                        compared += 1;
                    }
                    None => assert!(
                        RINGLET_ONLY.contains(&name.as_str()),
                        "{name}: not a Redis command\n{}",
                        ctx()
                    ),
                }
            }
            assert!(
                compared >= 40,
                "only {compared} entries compared\n{}",
                ctx()
            );
        }
        Field::Docs => {
            let map = |v: &Val| -> std::collections::BTreeMap<String, Val> {
                v.pairs()
                    .into_iter()
                    .map(|(k, v)| (k.text().to_ascii_lowercase(), v))
                    .collect()
            };
            let (wd, gd) = (map(&w), map(&g));
            assert!(gd.len() >= 40, "{}", ctx());
            for (name, doc) in &gd {
                match wd.get(name) {
                    Some(r) => {
                        // `subcommands`: Ringlet documents the ones it has, each as Redis.
                        let (rp, gp) = (r.pairs(), doc.pairs());
                        for (k, v) in &gp {
                            let rv = &rp.iter().find(|(rk, _)| rk == k).expect("doc field").1;
                            if k.text() == "subcommands" {
                                let rs = rv.pairs();
                                for (sk, sv) in v.pairs() {
                                    if RINGLET_ONLY_SUBCOMMANDS.contains(&sk.text().as_str()) {
                                        continue;
                                    }
                                    let want = rs.iter().find(|(rk, _)| *rk == sk).map(|x| &x.1);
                                    assert_eq!(want, Some(&sv), "{}\n{}", sk.text(), ctx());
                                }
                            } else {
                                assert_eq!(rv, v, "COMMAND DOCS {name} {}\n{}", k.text(), ctx());
                            }
                        }
                        assert_eq!(rp.len(), gp.len(), "COMMAND DOCS {name} fields\n{}", ctx());
                    }
                    None => assert!(RINGLET_ONLY.contains(&name.as_str()), "{name}\n{}", ctx()),
                }
            }
        }
        Field::Count => {
            for (conn, v) in [(redis, &w), (ringlet, &g)] {
                let Val::Line(b':', n) = v else {
                    panic!("not an integer\n{}", ctx())
                };
                let n: usize = std::str::from_utf8(n).unwrap().parse().unwrap();
                let all = Val::parse(&conn.call(&[b"COMMAND"]));
                assert_eq!(n, all.items().len(), "COMMAND COUNT vs COMMAND\n{}", ctx());
            }
        }
        Field::Config => {
            let (wp, gp) = (w.pairs(), g.pairs());
            let names = |p: &[(Val, Val)]| p.iter().map(|x| x.0.text()).collect::<Vec<_>>();
            assert_eq!(names(&wp), names(&gp), "{}", ctx());
            for (_, v) in wp.iter().chain(&gp) {
                assert!(v.text().parse::<u64>().is_ok(), "{}", ctx());
            }
        }
        Field::Info => {
            let (ws, gs) = (info_sections(&w.text()), info_sections(&g.text()));
            let explicit = argv.len() > 1;
            let wn: Vec<&String> = ws.iter().map(|s| &s.0).collect();
            let gn: Vec<&String> = gs.iter().map(|s| &s.0).collect();
            if explicit {
                assert_eq!(wn, gn, "sections\n{}", ctx());
            } else {
                // Ringlet's default sections, in Redis's order (a subsequence).
                let mut it = wn.iter();
                assert!(
                    gn.iter().all(|g| it.any(|w| w == g)),
                    "sections {gn:?} not in Redis's order {wn:?}\n{}",
                    ctx()
                );
            }
            for (name, gf) in &gs {
                let wf = &ws.iter().find(|s| &s.0 == name).expect("section").1;
                for (k, v) in gf {
                    if k.starts_with("ringlet_") {
                        continue;
                    }
                    let Some((_, rv)) = wf.iter().find(|(rk, _)| rk == k) else {
                        panic!("INFO {name}: {k} is not a Redis field\n{}", ctx())
                    };
                    if INFO_FIXED.contains(&k.as_str()) {
                        assert_eq!(rv, v, "INFO {name}: {k}\n{}", ctx());
                    }
                }
            }
        }
        Field::Hello => {
            let (wp, gp) = (w.pairs(), g.pairs());
            let names = |p: &[(Val, Val)]| p.iter().map(|x| x.0.text()).collect::<Vec<_>>();
            assert_eq!(names(&wp), names(&gp), "{}", ctx());
            for ((k, wv), (_, gv)) in wp.iter().zip(&gp) {
                if ["proto", "mode", "role", "modules"].contains(&k.text().as_str()) {
                    assert_eq!(wv, gv, "HELLO {}\n{}", k.text(), ctx());
                }
            }
        }
    }
}

/// Occurrences of `pat` in `hay`.
fn count(hay: &[u8], pat: &[u8]) -> usize {
    hay.windows(pat.len()).filter(|w| *w == pat).count()
}

/// Start both servers, open one connection to each, run every script (FLUSHALL first).
fn differential(scripts: &[&str], resp3: bool) {
    let Some(redis) = start_redis(&[]) else {
        return;
    };
    let node = start_ringlet(None);
    let mut r = Raw::connect(redis.port);
    let mut g = Raw::connect(node.local_addr().port());
    // The readiness probe's connection (`wait_ready`) is closed, but a loaded machine may
    // not have let the server reap it yet, and the scripts' CLIENT LIST counts clients:
    // wait (bounded) until this connection is the only one listed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // One line per client, each with one " laddr=" (counting "addr=" matched "laddr=" too,
    // so the count never fell to 1 and every run waited out the deadline).
    while count(&g.call(&[b"CLIENT", b"LIST"]), b" laddr=") > 1
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10)); // poll interval
    }
    if resp3 {
        r.call(&[b"HELLO", b"3"]);
        g.call(&[b"HELLO", b"3"]);
    }
    for s in scripts {
        run("FLUSHALL", &mut r, &mut g);
        run(s, &mut r, &mut g);
    }
}

const CONNECTION: &str = r"
PING
PING hello
PING a b
ECHO hi
ECHO
ECHO \e
SELECT 0
SELECT 16
SELECT -1
SELECT abc
SELECT 99999999999999999999
SELECT 9223372036854775807
SELECT 2147483648
SELECT -2147483649
HELLO 4
HELLO 1
HELLO abc
HELLO 3 foo
HELLO 2 SETNAME
AUTH x
AUTH a b c
AUTH default anything
AUTH nobody pass
CLIENT
CLIENT foo
CLIENT SETNAME
CLIENT SETNAME a\sb
CLIENT SETNAME a\x0ab
CLIENT SETNAME myname
CLIENT GETNAME
CLIENT SETNAME \e
CLIENT GETNAME
CLIENT GETNAME x
CLIENT ID x
CLIENT INFO x
CLIENT LIST ID abc
CLIENT LIST ID 0
CLIENT LIST TYPE bogus
CLIENT LIST foo bar
int: CLIENT ID
client: CLIENT INFO
client: CLIENT LIST
client: CLIENT LIST TYPE normal
CLIENT LIST TYPE pubsub
foo
foo a b
FOO a\x0d\x0ab
get
GET
SET
sEt k
";

const SERVER: &str = r"
COMMAND foo
COMMAND INFO get set mget nosuchcommand
COMMAND INFO GET
COMMAND INFO incrbyfloat expire scan keys getex
COMMAND DOCS get set
COMMAND DOCS nosuch
docs: COMMAND DOCS
count: COMMAND COUNT
commands: COMMAND
commands: COMMAND INFO
CONFIG
CONFIG GET
CONFIG GET nosuchparam
CONFIG GET timeout
sorted: CONFIG GET save appendonly
CONFIG SET
CONFIG SET foo
CONFIG SET foo bar
CONFIG SET timeout 0 foo
config: CONFIG GET maxmemory
DBSIZE
DBSIZE x
SET a 1
SET b 2
DBSIZE
FLUSHDB foo
FLUSHDB sync
FLUSHALL async
FLUSHALL a b
DBSIZE
INFO a b c
info: INFO
SET a 1
INFO keyspace
info: INFO server clients
";

const STRINGS: &str = r"
GET nokey
SET k v
GET k
SET k v2 NX
SET k v3 XX
GET k
SET k v NX XX
SET k v XX NX
SET k v EX
SET k v EX 0
SET k v EX -1
SET k v EX abc
SET k v EX 10 PX 100
SET k v EX 10 KEEPTTL
SET k v KEEPTTL EX 10
SET k v PX 9223372036854775807
SET k v EX 9223372036854775
SET k v EXAT 0
SET k v PXAT -5
SET k v FOO
SET k v GET
SET k v2 GET NX
SET nk v GET NX
SET k v3 GET XX
SET missing v GET XX
GET missing
SET k v EXAT 4102444800
ttl2: TTL k
SET k v EX 1000 EX 2000
ttl2: TTL k
SET k v2 KEEPTTL
ttl2: TTL k
SET k v3
TTL k
SET k v nx\x00junk
SET k v PXAT 4102444800000
ttl2000: PTTL k
SETNX k v
SETNX k2 v
SETNX
GET k2
SETEX k 0 v
SETEX k -1 v
SETEX k abc v
SETEX k 100 v
ttl2: TTL k
PSETEX k 0 v
PSETEX k 100000 v
ttl2000: PTTL k
GETSET k new
GETSET nokey new
GET nokey
TTL k
GETDEL k
GETDEL k
GETDEL
SET k v
GETEX k
GETEX k EX 100
ttl2: TTL k
GETEX k PERSIST
TTL k
GETEX k PX 100000
ttl2000: PTTL k
GETEX k EXAT 4102444800
GETEX k PXAT 4102444800000
GETEX k EX 0
GETEX k EX abc
GETEX k PERSIST EX 10
GETEX k KEEPTTL
GETEX k NX
GETEX k FOO
GETEX nokey EX 0
GETEX nokey
GETEX k EXAT 1
GET k
MSET a 1 b 2 c 3
MGET a b c d
MSET a 1 b
MSET
MSETNX a 1 x 2
MSETNX x 1 y 2
MGET x y
MSETNX x 1 y
MGET
";

const COUNTERS: &str = r"
INCR n
INCR n
DECR n
INCRBY n 10
INCRBY n -100
DECRBY n 5
DECRBY n -5
INCRBY n abc
INCRBY n 1.5
DECRBY n 9223372036854775808
DECRBY n -9223372036854775808
SET big 9223372036854775807
INCR big
SET small -9223372036854775808
DECR small
INCRBY small -1
SET s abc
INCR s
SET s 01
INCR s
SET s +1
INCR s
SET s \s1
INCR s
SET s -0
INCR s
SET s 12345678901234567890
INCR s
SET s \e
INCR s
INCRBYFLOAT f 0.1
INCRBYFLOAT f 0.2
INCRBYFLOAT f -0.3
INCRBYFLOAT f 1e3
INCRBYFLOAT f 5.0e3
INCRBYFLOAT f abc
INCRBYFLOAT f \s1
INCRBYFLOAT f nan
INCRBYFLOAT f inf
INCRBYFLOAT f 1e400
INCRBYFLOAT g 1e4000
INCRBYFLOAT g 3.14159265358979323846
INCRBYFLOAT g -3.14159265358979323846
INCRBYFLOAT h 10.5
INCRBYFLOAT h 0.1
SET h 5.0e3
INCRBYFLOAT h 2.0e2
SET h abc
INCRBYFLOAT h 1
INCRBYFLOAT
SET t 10
EXPIRE t 1000
INCR t
ttl2: TTL t
INCRBYFLOAT t 1.5
ttl2: TTL t
";

const RANGES: &str = r"
APPEND a hello
APPEND a \sworld
GET a
STRLEN a
STRLEN nokey
APPEND
GETRANGE a 0 4
GETRANGE a -5 -1
GETRANGE a 0 -1
GETRANGE a 5 3
GETRANGE a -1 -5
GETRANGE a 100 200
GETRANGE a -100 2
GETRANGE a 0 100
GETRANGE nokey 0 10
GETRANGE a x 1
GETRANGE a 0 x
GETRANGE a 9223372036854775807 -9223372036854775808
SETRANGE a 6 WORLD
GET a
SETRANGE a 20 x
GET a
STRLEN a
SETRANGE b 3 abc
GET b
SETRANGE c 0 \e
EXISTS c
SETRANGE a 0 \e
SETRANGE a -1 x
SETRANGE a x x
SETRANGE a 536870912 x
SETRANGE a 536870911 xx
SET e v
SETRANGE e 600000000 \e
EXPIRE e 1000
SETRANGE e 1 X
GET e
ttl2: TTL e
APPEND e !
ttl2: TTL e
";

const KEYSPACE: &str = r"
MSET a 1 b 2 c 3 hello 1 hallo 2 hxllo 3 hllo 4 heeeello 5
DEL a b nokey
DEL
UNLINK c nokey
EXISTS hello hello nokey
EXISTS
TYPE hello
TYPE nokey
sorted: KEYS *
sorted: KEYS h?llo
sorted: KEYS h*llo
sorted: KEYS h[ae]llo
sorted: KEYS h[^e]llo
sorted: KEYS h[a-b]llo
sorted: KEYS h[b-a]llo
sorted: KEYS h\*llo
sorted: KEYS H*
sorted: KEYS *llo*
sorted: KEYS [
sorted: KEYS h[ae
KEYS
KEYS a b
SCAN abc
SCAN \s0
SCAN 1x
SCAN 0 COUNT 0
SCAN 0 COUNT -1
SCAN 0 COUNT abc
SCAN 0 MATCH
SCAN 0 FOO bar
SCAN 0 COUNT 1000 MATCH nomatch*
SCAN 0 COUNT 1000 TYPE hash
SCAN 0 COUNT 1000 TYPE list MATCH *
FLUSHALL
RANDOMKEY
SET only 1
RANDOMKEY
RANDOMKEY x
FLUSHALL
SET s1 v PXAT 99999999999999
SET n1 12345
TOUCH s1 n1 nokey s1
TOUCH
RENAME nokey x
RENAMENX nokey x
RENAME s1 s1
RENAMENX s1 s1
RENAME s1 s2
GET s1
GET s2
ttl5: PTTL s2
RENAMENX s2 n1
RENAMENX s2 s3
GET s3
RENAME
RENAME a
COPY s3 c1
COPY s3 c1
COPY s3 c1 REPLACE
ttl5: PTTL c1
COPY s3 s3
COPY nokey c2
COPY s3 c3 DB 0
# COPY ... DB 1: Redis copies to database 1; Ringlet has one (resp-compat.md)
COPY s3 c5 DB -1
COPY s3 c6 DB x
COPY s3 c6 DB 99
COPY s3 c7 FOO
COPY s3 c8 REPLACE REPLACE
COPY a
SET e1 hello
SET e2 01
SET e3 -7
SET e4 1234567890123456789012
SET e5 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
SET e6 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
OBJECT ENCODING n1
OBJECT ENCODING e1
OBJECT ENCODING e2
OBJECT ENCODING e3
OBJECT ENCODING e4
OBJECT ENCODING e5
OBJECT ENCODING e6
OBJECT ENCODING nokey
OBJECT ENCODING
OBJECT FOO
OBJECT
SET rc1 0
SET rc2 9999
SET rc3 10000
SET rc4 -1
INCR rc5
OBJECT REFCOUNT rc1
OBJECT REFCOUNT rc2
OBJECT REFCOUNT rc3
OBJECT REFCOUNT rc4
OBJECT REFCOUNT rc5
OBJECT REFCOUNT e1
OBJECT REFCOUNT e2
OBJECT REFCOUNT e6
OBJECT REFCOUNT nokey
OBJECT REFCOUNT
OBJECT REFCOUNT a b
SUBSTR e1 1 3
SUBSTR e1 -3 -1
SUBSTR nokey 0 1
SUBSTR e1 a b
SET et1 v PXAT 99999999999999
SET et2 v PXAT 99999999999499
SET et3 v
EXPIRETIME et1
PEXPIRETIME et1
EXPIRETIME et2
EXPIRETIME et3
PEXPIRETIME et3
EXPIRETIME nokey
PEXPIRETIME nokey
EXPIRETIME
SET l1 ohmytext
SET l2 mynewtext
LCS l1 l2
LCS l1 l2 LEN
LCS l1 l2 IDX
LCS l1 l2 IDX MINMATCHLEN 4
LCS l1 l2 IDX MINMATCHLEN 4 WITHMATCHLEN
LCS l1 l2 IDX WITHMATCHLEN
LCS l1 l2 IDX MINMATCHLEN -1
LCS l1 l2 LEN IDX
LCS l1 l2 MINMATCHLEN
LCS l1 l2 MINMATCHLEN x
LCS l1 l2 FOO
LCS l1 nokey
LCS nokey nokey2 IDX
LCS l1 l1 IDX WITHMATCHLEN
SET l3 abcabcabcxyzabc
SET l4 xabcyabcabczzabcabc
LCS l3 l4
LCS l3 l4 IDX WITHMATCHLEN
LCS l4 l3 IDX MINMATCHLEN 2
LCS l1
SETBIT b1 7 1
SETBIT b1 7 1
SETBIT b1 7 0
SETBIT b1 100 1
GET b1
STRLEN b1
SETBIT b1 -1 1
SETBIT b1 4294967296 1
SETBIT b1 1 2
SETBIT b1 1 a
SETBIT b1 x 1
GETBIT b1 100
GETBIT b1 7
GETBIT b1 100000
GETBIT nokey 3
GETBIT b1 -1
SET bc foobar
BITCOUNT bc
BITCOUNT bc 0 0
BITCOUNT bc 1 1
BITCOUNT bc 1 1 BYTE
BITCOUNT bc 5 30 BIT
BITCOUNT bc -2 -1
BITCOUNT bc -1 -2
BITCOUNT bc 0 -100
BITCOUNT bc 0 100
BITCOUNT bc 1
BITCOUNT bc 1 2 FOO
BITCOUNT bc a b
BITCOUNT nokey
BITCOUNT nokey a b
SET bp \xff\xf0\x00
BITPOS bp 0
BITPOS bp 1
BITPOS bp 0 1
BITPOS bp 1 2
BITPOS bp 0 2 -1
BITPOS bp 1 2 -1
BITPOS bp 0 0 -1
BITPOS bp 0 0 0
BITPOS bp 1 7 15 BIT
BITPOS bp 0 7 15 BIT
BITPOS bp 0 0 11 BIT
BITPOS bp 1 12 23 BIT
BITPOS bp 2
BITPOS bp a
BITPOS bp 1 a
BITPOS bp 1 0 1 FOO
BITPOS nokey 1
BITPOS nokey 0
SET bz \x00\x00
BITPOS bz 1
BITPOS bz 0
SET bf \xff\xff
BITPOS bf 0
BITPOS bf 0 0 -1
BITPOS bf 0 0
FUNCTION FLUSH
FUNCTION FLUSH ASYNC
FUNCTION FLUSH SYNC
FUNCTION LIST
FUNCTION FOO
TIME x
";

const EXPIRY: &str = r"
SET k v
TTL k
PTTL k
TTL nokey
PTTL nokey
EXPIRE nokey 100
EXPIRE k 100
ttl2: TTL k
EXPIRE k 100 NX
EXPIRE k 200 XX
ttl2: TTL k
EXPIRE k 100 GT
EXPIRE k 300 GT
ttl2: TTL k
EXPIRE k 400 LT
EXPIRE k 50 LT
ttl2: TTL k
EXPIRE k 10 NX XX
EXPIRE k 10 GT LT
EXPIRE k 10 NX GT
EXPIRE k 10 foo
EXPIRE k 10 foo\x0d\x0a
EXPIRE k 10 a\x0ab\x0a\x0a
HELLO 3 bad\x0a
EXPIRE k abc
EXPIRE k 10 xx XX
EXPIRE k 9223372036854775807
EXPIRE k 9223372036854775
EXPIRE k -9223372036854775808
PEXPIRE k 9223372036854775807
PERSIST k
PERSIST k
PERSIST nokey
TTL k
EXPIRE k 100 XX
EXPIRE k 100 GT
EXPIRE k 100 LT
TTL k
PERSIST k
EXPIREAT k 4102444800
ttl2: TTL k
PEXPIREAT k 4102444800000
ttl2000: PTTL k
EXPIREAT k 4102444800 GT
EXPIREAT k 4102444801 GT
PEXPIREAT k abc
PEXPIREAT k 9223372036854775807
EXPIREAT k 9223372036854775807
EXPIRE k 0
EXISTS k
SET k v
EXPIRE k -10
GET k
SET k v
PEXPIRE k -1
GET k
SET k v
EXPIREAT k 1
GET k
SET k v
PEXPIREAT k 1000
GET k
TTL
EXPIRE k
";

const BINARY: &str = r"
SET \x00\xff\x0d\x0a \x00\x01\x02
GET \x00\xff\x0d\x0a
STRLEN \x00\xff\x0d\x0a
EXISTS \x00\xff\x0d\x0a
SET \e empty-key
GET \e
SET ek \e
GET ek
STRLEN ek
APPEND ek \x00
GET ek
MSET \x01 a \x02 b
MGET \x01 \x02 \x03
sorted: KEYS \x01
sorted: KEYS *
DEL \x00\xff\x0d\x0a \e
";

/// Protocol switches last (they change how every later reply is encoded).
const HELLO: &str = r"
hello: HELLO
hello: HELLO 3
GET nokey
MGET nokey nokey
INCRBYFLOAT f 1.5
hello: HELLO 2 SETNAME renamed
CLIENT GETNAME
GET nokey
hello: HELLO 3 AUTH default whatever
GET nokey
";

/// Records are hashes to Redis clients (crates/record): the hash commands, WRONGTYPE both
/// ways, and keyspace commands over a hash.
const HASHES: &str = r"
HSET h f1 v1 f2 v2
HSET h f1 v1b f3 v3
HGET h f1
HGET h nofield
HGET nokey f
HMGET h f1 nofield f3
HGETALL h
HGETALL nokey
HLEN h
HLEN nokey
HEXISTS h f2
HEXISTS h nofield
HKEYS h
HVALS h
HSTRLEN h f3
HSTRLEN h nofield
HSETNX h f1 other
HSETNX h f4 v4
HMSET h a 1 b 2
HMSET h a
HSET h
HSET h f
HSET h f v g
HDEL h f1 nofield
HDEL h f1
HGETALL h
HSET h f1 back
HGETALL h
HSET h d 1 e 2 d 3
HGET h d
HMGET h d d nofield e
HDEL h d d e
HGETALL h
HSET gone x 1 y 2
HDEL gone x y nofield
EXISTS gone
HSETNX gone x 1
HINCRBY gone2 n 3
HGETALL gone2
HINCRBY h f1 1
HINCRBY h n 5
HINCRBY h n -7
HINCRBY h f3 1
HINCRBY h n abc
HSET h big 9223372036854775807
HINCRBY h big 1
HINCRBYFLOAT h fl 10.5
HINCRBYFLOAT h fl 0.1
HINCRBYFLOAT h fl 5.0e3
HINCRBYFLOAT h fl abc
HINCRBYFLOAT h f3 1
TYPE h
EXISTS h
OBJECT ENCODING h
OBJECT REFCOUNT h
GET h
STRLEN h
APPEND h x
INCR h
GETRANGE h 0 1
SETRANGE h 0 x
GETSET h v
SET h v GET
MGET h nokey
SET s str
HGET s f
HSET s f v
HGETALL s
HLEN s
TYPE s
EXPIRE h 100
ttl2:TTL h
HSET h again 1
ttl2:TTL h
PERSIST h
TTL h
RENAME h h2
HGETALL h2
TYPE h2
COPY h2 h3
HGETALL h3
SET h3 nowastring
TYPE h3
GET h3
HDEL h2 f2 f3 f4 a b n big fl f1 again
EXISTS h2
HSET e \e \e
HGETALL e
HSTRLEN e \e
HSET big f0 v f1 v f2 v f3 v f4 v f5 v f6 v f7 v f8 v f9 v f10 v f11 v f12 v f13 v f14 v f15 v f16 v f17 v f18 v f19 v f20 v f21 v f22 v f23 v f24 v f25 v f26 v f27 v f28 v f29 v f30 v f31 v f32 v f33 v f34 v f35 v f36 v f37 v f38 v f39 v f40 v f41 v f42 v f43 v f44 v f45 v f46 v f47 v f48 v f49 v f50 v f51 v f52 v f53 v f54 v f55 v f56 v f57 v f58 v f59 v f60 v f61 v f62 v f63 v f64 v f65 v f66 v f67 v f68 v f69 v f70 v f71 v f72 v f73 v f74 v f75 v f76 v f77 v f78 v f79 v f80 v f81 v f82 v f83 v f84 v f85 v f86 v f87 v f88 v f89 v f90 v f91 v f92 v f93 v f94 v f95 v f96 v f97 v f98 v f99 v f100 v f101 v f102 v f103 v f104 v f105 v f106 v f107 v f108 v f109 v f110 v f111 v f112 v f113 v f114 v f115 v f116 v f117 v f118 v f119 v f120 v f121 v f122 v f123 v f124 v f125 v f126 v f127 v f128 v f129 v f130 v f131 v f132 v f133 v f134 v f135 v f136 v f137 v f138 v f139 v f140 v f141 v f142 v f143 v f144 v f145 v f146 v f147 v f148 v f149 v f150 v f151 v f152 v f153 v f154 v f155 v f156 v f157 v f158 v f159 v f160 v f161 v f162 v f163 v f164 v f165 v f166 v f167 v f168 v f169 v f170 v f171 v f172 v f173 v f174 v f175 v f176 v f177 v f178 v f179 v f180 v f181 v f182 v f183 v f184 v f185 v f186 v f187 v f188 v f189 v f190 v f191 v f192 v f193 v f194 v f195 v f196 v f197 v f198 v f199 v
OBJECT ENCODING big
sorted: CONFIG GET hash-max-*
CONFIG GET hash-max-ziplist-entries
CONFIG SET hash-max-ziplist-entries -1
CONFIG SET hash-max-ziplist-entries abc
CONFIG SET hash-max-ziplist-entries 1
HSET hc1 a 1 b 2
OBJECT ENCODING hc1
HSET hc2 a 1
OBJECT ENCODING hc2
CONFIG SET hash-max-ziplist-entries 512 hash-max-listpack-value 3
HSET hc3 abcd 1
OBJECT ENCODING hc3
HSET hc4 abc 1
OBJECT ENCODING hc4
CONFIG SET hash-max-listpack-value 64 hash-max-listpack-entries x
CONFIG GET hash-max-listpack-value
CONFIG SET hash-max-listpack-value 64
";

/// MULTI/EXEC/DISCARD (no WATCH): queueing, nesting, refusals that abort the transaction
/// (unknown command, arity), run-time errors that do not, empty transactions.
const TRANSACTIONS: &str = r"
EXEC
DISCARD
MULTI x
MULTI
SET t1 1
INCR t1
GET t1
PING
EXEC
GET t1
MULTI
EXEC
MULTI
MULTI
SET t2 x
DISCARD
GET t2
MULTI
NOSUCH a
SET t3 x
EXEC
GET t3
MULTI
GET
SET t3 x
EXEC
GET t3
MULTI
EXEC x
SET t3 x
EXEC
MULTI
DISCARD x
DISCARD
SET tstr abc
MULTI
INCR tstr
SET t4 v
HSET tstr f v
EXEC
GET t4
MULTI
INCRBYFLOAT t5 1.0
INCRBYFLOAT t5 1.0
GET t5
EXEC
RESET x
MULTI
SET t6 x
RESET
EXEC
GET t6
PING
";

/// HSCAN and HRANDFIELD where Redis 7.0's reply is deterministic: small (listpack) hashes,
/// returned whole; counts covering the hash; single-field hashes; every error, and the order
/// in which Redis checks cursor, options, key and type.
const HASH_SCAN: &str = r"
HSET hs a 1 b 2 c 3 abc 4 xyz 5
HSCAN hs 0
HSCAN hs 0 COUNT 2
HSCAN hs 7 COUNT 1
HSCAN hs 0 MATCH a*
HSCAN hs 0 MATCH * COUNT 100
HSCAN hs 0 match ?b?
HSCAN hs 0 MATCH nothing*
HSCAN hs 0 COUNT 0
HSCAN hs 0 COUNT -1
HSCAN hs 0 COUNT abc
HSCAN hs 0 MATCH
HSCAN hs 0 BOGUS x
HSCAN hs abc
HSCAN hs 0 TYPE string
HSCAN nokey 0
HSCAN nokey 0 COUNT 0
HSCAN nokey abc
SET hsstr x
HSCAN hsstr 0
HSCAN hsstr abc
HSCAN hs
HRANDFIELD hs 100
HRANDFIELD hs 5
HRANDFIELD hs 100 WITHVALUES
HRANDFIELD hs 5 withvalues
HRANDFIELD hs 0
HRANDFIELD hs 0 WITHVALUES
HRANDFIELD hs abc
HRANDFIELD hs 1 WITHVALUE
HRANDFIELD hs 1 WITHVALUES extra
HRANDFIELD hs -9223372036854775808
HRANDFIELD hs 9223372036854775807
HRANDFIELD hs 9223372036854775807 WITHVALUES
HRANDFIELD hs -9223372036854775807 WITHVALUES
HRANDFIELD nokey
HRANDFIELD nokey 5
HRANDFIELD nokey -5 WITHVALUES
HRANDFIELD hsstr
HRANDFIELD hsstr 3
HRANDFIELD hsstr abc
HSET hsone only v
HRANDFIELD hsone
HRANDFIELD hsone 1
HRANDFIELD hsone -3
HRANDFIELD hsone -3 WITHVALUES
HRANDFIELD hsone 1 WITHVALUES
HRANDFIELD hsone 2 WITHVALUES
HRANDFIELD
HDEL hs a b c abc xyz
HSCAN hs 0
HRANDFIELD hs
";

const ALL: &[&str] = &[
    CONNECTION,
    SERVER,
    STRINGS,
    COUNTERS,
    RANGES,
    KEYSPACE,
    EXPIRY,
    BINARY,
    HELLO,
    HASHES,
    HASH_SCAN,
    TRANSACTIONS,
];

/// A hash of 600 fields (past hash-max-listpack-entries, 512), grown one field at a time (a write on the encoding, session 25:
/// the fields it names decoded, the rest copied as bytes), then read and shrunk: every reply
/// as Redis's (which keeps such a hash in a hash table; HGETALL's order differs there, so
/// it is not compared).
#[test]
fn a_big_hash_matches_redis() {
    let mut script = String::new();
    for i in 0..600 {
        script.push_str(&format!("HSET big f{i} v{i}\n"));
    }
    for i in (0..600).step_by(5) {
        script.push_str(&format!(
            "HGET big f{i}\nHEXISTS big f{i}\nHSTRLEN big f{i}\nHSETNX big f{i} x\n\
             HINCRBY big n{i} {i}\nHMGET big f{i} n{i} none\nHDEL big f{i} f{i} none\nHLEN big\n"
        ));
    }
    script.push_str("HSET big f1 a f1 b f2 c\nHMGET big f1 f2\nHLEN big\n");
    differential(&[&script], false);
}

#[test]
fn resp2_replies_match_redis() {
    differential(ALL, false);
}

#[test]
fn resp3_replies_match_redis() {
    differential(ALL, true);
}

/// A pipeline of many commands in one write: the replies come back in order, all of them,
/// identical to Redis's.
#[test]
fn pipelined_replies_match_redis() {
    let Some(redis) = start_redis(&[]) else {
        return;
    };
    let node = start_ringlet(None);
    let mut batch = Vec::new();
    let mut count = 0;
    for i in 0..500 {
        for cmd in [
            vec![
                b"SET".to_vec(),
                format!("key:{i}").into_bytes(),
                format!("value-{i}").into_bytes(),
            ],
            vec![b"GET".to_vec(), format!("key:{i}").into_bytes()],
            vec![b"INCR".to_vec(), b"counter".to_vec()],
            vec![b"GET".to_vec(), format!("missing:{i}").into_bytes()],
            vec![b"BOGUS".to_vec(), format!("{i}").into_bytes()],
        ] {
            let argv: Vec<&[u8]> = cmd.iter().map(|a| a.as_slice()).collect();
            batch.extend_from_slice(&common::encode(&argv));
            count += 1;
        }
    }
    // Inline commands in the same stream, as redis-cli / telnet send them.
    batch.extend_from_slice(b"PING\r\nECHO \"a b\"\r\nGET key:1\r\n");
    count += 3;
    let mut outs = Vec::new();
    for port in [redis.port, node.local_addr().port()] {
        let mut c = Raw::connect(port);
        c.send(&batch);
        let replies: Vec<Vec<u8>> = (0..count).map(|_| c.reply()).collect();
        outs.push(replies);
    }
    assert_eq!(outs[0].len(), outs[1].len());
    for (i, (a, b)) in outs[0].iter().zip(&outs[1]).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(a),
            String::from_utf8_lossy(b),
            "reply {i}"
        );
    }
}

/// AUTH and NOAUTH behaviour with a password configured, against `redis-server
/// --requirepass`.
#[test]
fn auth_matches_redis() {
    let Some(redis) = start_redis(&["--requirepass", "s3cret"]) else {
        return;
    };
    let node = start_ringlet(Some("s3cret"));
    let script = r"
GET k
SET k v
foo
GET
PING
ECHO x
CLIENT ID
HELLO 3
HELLO 2 AUTH default wrong
HELLO 2 AUTH nobody s3cret
AUTH wrong
AUTH default wrong
AUTH a b c
AUTH
AUTH s3cret
GET k
SET k v
GET k
AUTH wrong
GET k
";
    let mut r = Raw::connect(redis.port);
    let mut g = Raw::connect(node.local_addr().port());
    run(script, &mut r, &mut g);

    // Before AUTH, Redis 7 refuses requests of more than 10 arguments or bulk strings over
    // 16 KiB, then closes the connection.
    let big_bulk = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n", 16 * 1024 + 1);
    for garbage in [&b"*11\r\n"[..], big_bulk.as_bytes()] {
        let mut outs = Vec::new();
        for port in [redis.port, node.local_addr().port()] {
            let mut c = Raw::connect(port);
            c.send(garbage);
            outs.push(c.read_to_close());
        }
        assert_eq!(
            String::from_utf8_lossy(&outs[0]),
            String::from_utf8_lossy(&outs[1])
        );
    }

    // HELLO with AUTH authenticates and switches protocol in one step.
    let mut r = Raw::connect(redis.port);
    let mut g = Raw::connect(node.local_addr().port());
    run(
        "GET k\nhello: HELLO 3 AUTH default s3cret\nGET k\nGET nokey",
        &mut r,
        &mut g,
    );
}

/// Protocol errors: the same garbage gets the same error text, then the connection closes.
#[test]
fn protocol_errors_match_redis() {
    let Some(redis) = start_redis(&[]) else {
        return;
    };
    let node = start_ringlet(None);
    let cases: &[&[u8]] = &[
        b"*abc\r\n",
        b"*1\r\n$abc\r\n",
        b"*1\r\n$-5\r\n",
        b"*2\r\n$3\r\nGET\r\n:1\r\n",
        b"*9999999999\r\n",
        b"*1\r\n$999999999999\r\n",
        b"PING \"unbalanced\r\n",
        b"*1\r\n$4\r\nPING\r\n*x\r\n",
    ];
    for case in cases {
        let mut outs = Vec::new();
        for port in [redis.port, node.local_addr().port()] {
            let mut c = Raw::connect(port);
            c.send(case);
            outs.push(c.read_to_close());
        }
        assert_eq!(
            String::from_utf8_lossy(&outs[0]),
            String::from_utf8_lossy(&outs[1]),
            "input {:?}",
            String::from_utf8_lossy(case)
        );
    }
}

/// QUIT replies +OK and closes, like Redis.
#[test]
fn quit_closes_like_redis() {
    let Some(redis) = start_redis(&[]) else {
        return;
    };
    let node = start_ringlet(None);
    for port in [redis.port, node.local_addr().port()] {
        let mut c = Raw::connect(port);
        c.send(b"*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n");
        assert_eq!(c.read_to_close(), b"+OK\r\n");
    }
}

/// HSCAN and HRANDFIELD where Redis's replies are random or order-dependent (a hash past
/// the listpack bounds, random picks), compared by their properties on both servers:
/// a full HSCAN iteration returns every field once with its value; HRANDFIELD with a
/// positive count returns that many distinct fields of the hash, with a negative count that
/// many picks, WITHVALUES the right value beside each field (RESP2 flat, RESP3 pairs).
#[test]
fn hscan_and_hrandfield_properties_match_redis() {
    use std::collections::BTreeMap;
    let Some(redis) = start_redis(&[]) else {
        return;
    };
    let node = start_ringlet(None);
    for port in [redis.port, node.local_addr().port()] {
        let mut r = Raw::connect(port);
        // 300 fields: a `hashtable` in both (past 128 entries).
        let mut want = BTreeMap::new();
        for i in 0..300 {
            let (f, v) = (format!("f{i}"), format!("v{i}"));
            r.call(&[b"HSET", b"big", f.as_bytes(), v.as_bytes()]);
            want.insert(f, v);
        }
        let mut got = BTreeMap::new();
        let mut cursor = "0".to_string();
        // Bounded: a full iteration of 300 fields at COUNT 7 takes well under 1,000 calls.
        for _ in 0..1_000 {
            let v = Val::parse(&r.call(&[b"HSCAN", b"big", cursor.as_bytes(), b"COUNT", b"7"]));
            let items = v.items();
            cursor = items[0].text();
            for p in items[1].items().chunks(2) {
                let prev = got.insert(p[0].text(), p[1].text());
                assert!(
                    prev.is_none(),
                    "port {port}: {} returned twice",
                    p[0].text()
                );
            }
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(cursor, "0", "port {port}: iteration did not end");
        assert_eq!(got, want, "port {port}: HSCAN iteration");
        // Redis's guarantee under writes: a field present from the start of a full iteration
        // to its end is returned. Every call deletes two fields already returned and adds
        // one new field (a cursor that counted positions skipped fields after each delete).
        r.call(&[b"DEL", b"churn"]);
        // 1,000 fields: past both servers' listpack limit (hash-max-listpack-entries 512).
        for i in 0..1_000 {
            let f = format!("f{i}");
            r.call(&[b"HSET", b"churn", f.as_bytes(), b"v"]);
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut deleted = std::collections::BTreeSet::new();
        let mut cursor = "0".to_string();
        for added in 0..1_000 {
            let v = Val::parse(&r.call(&[b"HSCAN", b"churn", cursor.as_bytes(), b"COUNT", b"7"]));
            cursor = v.items()[0].text();
            let page: Vec<String> = v.items()[1]
                .items()
                .chunks(2)
                .map(|p| p[0].text())
                .collect();
            for f in page.iter().filter(|f| f.starts_with('f')).take(2) {
                r.call(&[b"HDEL", b"churn", f.as_bytes()]);
                deleted.insert(f.clone());
            }
            seen.extend(page);
            let n = format!("new{added}");
            r.call(&[b"HSET", b"churn", n.as_bytes(), b"v"]);
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(cursor, "0", "port {port}: churned iteration did not end");
        let missed: Vec<String> = (0..1_000)
            .map(|i| format!("f{i}"))
            .filter(|f| !deleted.contains(f) && !seen.contains(f))
            .collect();
        assert!(
            missed.is_empty(),
            "port {port}: present throughout, never returned: {missed:?}"
        );
        // MATCH over a hashtable: only matching fields, all of them.
        let mut matched = Vec::new();
        let mut cursor = "0".to_string();
        for _ in 0..1_000 {
            let v = Val::parse(&r.call(&[
                b"HSCAN",
                b"big",
                cursor.as_bytes(),
                b"MATCH",
                b"f1?",
                b"COUNT",
                b"50",
            ]));
            cursor = v.items()[0].text();
            matched.extend(v.items()[1].items().chunks(2).map(|p| p[0].text()));
            if cursor == "0" {
                break;
            }
        }
        matched.sort();
        let expect: Vec<String> = (10..20).map(|i| format!("f{i}")).collect();
        assert_eq!(matched, expect, "port {port}: MATCH");

        for (count, distinct) in [(10i64, true), (299, true), (-20, false), (-500, false)] {
            let c = count.to_string();
            let v = Val::parse(&r.call(&[b"HRANDFIELD", b"big", c.as_bytes()]));
            let fields: Vec<String> = v.items().iter().map(Val::text).collect();
            assert_eq!(
                fields.len() as i64,
                count.abs(),
                "port {port}: count {count}"
            );
            assert!(fields.iter().all(|f| want.contains_key(f)));
            if distinct {
                let set: std::collections::BTreeSet<_> = fields.iter().collect();
                assert_eq!(set.len(), fields.len(), "port {port}: {count} not distinct");
            }
        }
        let v = Val::parse(&r.call(&[b"HRANDFIELD", b"big", b"5", b"WITHVALUES"]));
        for p in v.items().chunks(2) {
            assert_eq!(want.get(&p[0].text()), Some(&p[1].text()));
        }
        let one = Val::parse(&r.call(&[b"HRANDFIELD", b"big"])).text();
        assert!(want.contains_key(&one));
        // RESP3: WITHVALUES pairs are two-element arrays (negative count: with repeats).
        r.call(&[b"HELLO", b"3"]);
        let v = Val::parse(&r.call(&[b"HRANDFIELD", b"big", b"-4", b"WITHVALUES"]));
        assert_eq!(v.items().len(), 4, "port {port}");
        for p in v.items() {
            let p = p.items();
            assert_eq!(want.get(&p[0].text()), Some(&p[1].text()));
        }
    }
}

/// INFO commandstats and errorstats count as Redis's do: the same requests (pipelined plain
/// GET/SET, which a Ringlet node answers in batches, errors that ran, and refusals before
/// running: unknown command, arity, NOAUTH-free refusals) leave the same `calls`,
/// `rejected_calls` and `failed_calls` per command and the same error codes. `usec` is
/// time, not compared.
#[test]
fn commandstats_and_errorstats_match_redis() {
    let Some(redis) = start_redis(&[]) else {
        return;
    };
    let node = start_ringlet(None);
    let mut batch = Vec::new();
    let mut count = 0;
    let mut push = |argv: &[&[u8]]| {
        batch.extend_from_slice(&common::encode(argv));
        count += 1;
    };
    push(&[b"HSET", b"rec", b"f", b"v"]);
    for i in 0..300 {
        let k = format!("k{i}");
        push(&[b"SET", k.as_bytes(), b"v"]);
        push(&[b"GET", k.as_bytes()]);
        if i % 7 == 0 {
            push(&[b"GET", b"rec"]); // WRONGTYPE inside a batch of GETs
        }
        if i % 11 == 0 {
            push(&[b"INCR", k.as_bytes()]); // runs, fails: not an integer
            push(&[b"GET"]); // refused: arity
            push(&[b"NOSUCHCOMMAND", b"x"]); // refused: unknown (no command counted)
            push(&[b"SET", k.as_bytes(), b"v", b"BADOPT"]); // runs, fails: syntax
        }
    }
    for port in [redis.port, node.local_addr().port()] {
        let mut c = Raw::connect(port);
        c.send(&batch);
        for _ in 0..count {
            c.reply();
        }
    }
    let stats = |port: u16, section: &[u8]| -> Vec<String> {
        let mut c = Raw::connect(port);
        let text = Val::parse(&c.call(&[b"INFO", section])).text();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.contains(':'))
            // usec and usec_per_call are times; INFO itself and the readiness probe's PING
            // (`wait_ready` may send more than one) are not compared.
            .filter(|l| !l.starts_with("cmdstat_info:") && !l.starts_with("cmdstat_ping:"))
            .map(|l| {
                l.split(',')
                    .filter(|f| !f.starts_with("usec"))
                    .collect::<Vec<_>>()
                    .join(",")
                    .replace(":calls", " calls")
            })
            .collect();
        lines.sort();
        lines
    };
    let ringlet = node.local_addr().port();
    for section in [&b"commandstats"[..], b"errorstats"] {
        let (want, got) = (stats(redis.port, section), stats(ringlet, section));
        assert!(!want.is_empty());
        assert_eq!(want, got, "INFO {}", String::from_utf8_lossy(section));
    }
    // CONFIG RESETSTAT: both count from zero again (the reset itself and what follows it
    // count, as on Redis).
    for port in [redis.port, ringlet] {
        let mut c = Raw::connect(port);
        assert_eq!(c.call(&[b"CONFIG", b"RESETSTAT"]), b"+OK\r\n");
        c.call(&[b"GET", b"k1"]);
        c.call(&[b"GET", b"nokey"]);
        c.call(&[b"INCR", b"k1"]);
    }
    for section in [&b"commandstats"[..], b"errorstats"] {
        let (want, got) = (stats(redis.port, section), stats(ringlet, section));
        assert_eq!(
            want,
            got,
            "INFO {} after RESETSTAT",
            String::from_utf8_lossy(section)
        );
    }
    let fields = |port: u16| -> Vec<String> {
        let mut c = Raw::connect(port);
        let text = Val::parse(&c.call(&[b"INFO", b"stats"])).text();
        let mut v: Vec<String> = text
            .lines()
            .filter(|l| {
                [
                    "total_connections_received:",
                    "total_commands_processed:",
                    "total_error_replies:",
                    "keyspace_hits:",
                    "keyspace_misses:",
                    "expired_keys:",
                    "evicted_keys:",
                ]
                .iter()
                .any(|f| l.starts_with(f))
            })
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    let (want, got) = (fields(redis.port), fields(ringlet));
    assert_eq!(want.len(), 7, "{want:?}");
    assert_eq!(want, got, "INFO stats after RESETSTAT");
}
