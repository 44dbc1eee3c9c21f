//! `ringlet load` end to end (docs/design/loader.md): the same small social graph — users
//! with attributes and a `boss` foreign key, a one-to-many `follows` table chunked at 2
//! targets per item, one edge to a user that does not exist — loaded from CSV and JSON Lines
//! into a single node and into `ringlet up --nodes 3`, from SQLite and from a throwaway
//! PostgreSQL cluster; each checked with HGETALL, LINK GET and CHASE. Then `--every`: a reader
//! loop follows the alias while generations are reloaded and never sees two generations'
//! values at once, and the old generations' keys are deleted.

mod common;

use common::call;
use ringlet_testkit::pg::{postgres_bin, Pg};

use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ringlet");

/// Send `cmds` in one write on `s` and read their replies.
fn pipeline(s: &mut TcpStream, cmds: &[Vec<Vec<u8>>]) -> Vec<Reply> {
    let mut out = Vec::new();
    for c in cmds {
        let args: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
        encode_request(&mut out, &args);
    }
    s.write_all(&out).expect("write");
    let (mut buf, mut start, mut replies) = (Vec::new(), 0, Vec::new());
    let mut chunk = [0u8; 16 * 1024];
    while replies.len() < cmds.len() {
        if let Ok(Some((r, n))) = decode_reply(&buf[start..]) {
            replies.push(r);
            start += n;
            continue;
        }
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
    replies
}

/// Follow MOVED like `redis-cli -c`.
fn rcall(mut port: u16, args: &[&str]) -> Reply {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    for _ in 0..5 {
        match call(port, &args) {
            Reply::Error(e) if e.starts_with(b"MOVED") => {
                let s = String::from_utf8_lossy(&e).to_string();
                let addr = s.split(' ').nth(2).expect("MOVED addr");
                port = addr.rsplit(':').next().unwrap().parse().unwrap();
            }
            r => return r,
        }
    }
    panic!("too many redirects")
}

fn strings(r: Reply) -> Vec<String> {
    let items = match r {
        Reply::Array(v) => v,
        Reply::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
        other => panic!("not an array: {other:?}"),
    };
    items
        .into_iter()
        .map(|i| match i {
            Reply::Bulk(b) => String::from_utf8(b).unwrap(),
            Reply::Simple(b) => String::from_utf8(b).unwrap(),
            Reply::Integer(n) => n.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

fn hgetall(port: u16, key: &str) -> std::collections::BTreeMap<String, String> {
    let v = strings(rcall(port, &["HGETALL", key]));
    v.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect()
}

/// A single `ringlet server` on a free port, killed on drop.
struct Node(Child, u16);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server() -> Node {
    let (child, port) = common::server(&["--memory-mb".as_ref(), "64".as_ref()]);
    Node(child, port)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ringlet-load-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The graph every source below carries: 5 users (user 5 has no boss, user 3's boss is 9,
/// who does not exist), user 1 follows 2, 3, 4, 5 and 9 (9 dangling): chunks of 2. User 9
/// (no record) follows 1 and 2 in a run of two rows: both dangling by their owner.
const USERS: &[(&str, &str, &str, &str)] = &[
    ("1", "ann", "31", "2"),
    ("2", "bob", "42", "5"),
    ("3", "cy", "23", "9"),
    ("4", "di", "54", "5"),
    ("5", "ed", "65", ""),
];
const FOLLOWS: &[(&str, &str)] = &[
    ("1", "2"),
    ("1", "3"),
    ("2", "1"),
    ("9", "1"),
    ("9", "2"),
    ("1", "4"),
    ("1", "9"),
    ("1", "5"),
];

fn mapping(dir: &Path, users: &str, follows: &str) -> PathBuf {
    let m = dir.join("mapping.toml");
    std::fs::write(
        &m,
        format!(
            r#"
[[records]]
source = "{users}"
key = "user:{{id}}"
attributes = ["name", "age"]
links = [{{ field = "boss", target = "user:{{boss_id}}" }}]

[[lists]]
source = "{follows}"
key = "user:{{src}}"
field = "follows"
target = "user:{{dst}}"
chunk = 2
"#
        ),
    )
    .unwrap();
    m
}

fn write_csv(dir: &Path) -> (PathBuf, PathBuf) {
    let u = dir.join("users.csv");
    let mut s = "id,name,age,boss_id\n".to_string();
    for (id, n, a, b) in USERS {
        s += &format!("{id},{n},{a},{b}\n");
    }
    std::fs::write(&u, s).unwrap();
    let f = dir.join("follows.csv");
    let mut s = "src,dst\n".to_string();
    for (a, b) in FOLLOWS {
        s += &format!("{a},{b}\n");
    }
    std::fs::write(&f, s).unwrap();
    (u, f)
}

fn write_jsonl(dir: &Path) -> (PathBuf, PathBuf) {
    let u = dir.join("users.jsonl");
    let mut s = String::new();
    for (id, n, a, b) in USERS {
        let boss = if b.is_empty() {
            "null".to_string()
        } else {
            b.to_string()
        };
        // Numbers as JSON numbers, a null foreign key as null.
        s += &format!("{{\"id\": {id}, \"name\": \"{n}\", \"age\": {a}, \"boss_id\": {boss}}}\n");
    }
    std::fs::write(&u, s).unwrap();
    let f = dir.join("follows.jsonl");
    let mut s = String::new();
    for (a, b) in FOLLOWS {
        s += &format!("{{\"src\": \"{a}\", \"dst\": \"{b}\"}}\n");
    }
    std::fs::write(&f, s).unwrap();
    (u, f)
}

/// `--mapping M --csv C ...`: a load's arguments for mapping `m` and CSV files `csvs`.
fn csv_args<'a>(m: &'a Path, csvs: &[&'a Path]) -> Vec<&'a str> {
    let mut args = vec!["--mapping", m.to_str().unwrap()];
    for c in csvs {
        args.extend(["--csv", c.to_str().unwrap()]);
    }
    args
}

/// Run `ringlet load --port P ARGS` to completion; its stdout.
fn load(port: u16, args: &[&str]) -> String {
    load_with_stderr(port, args).0
}

/// [`load`], with what the loader said on stderr.
fn load_with_stderr(port: u16, args: &[&str]) -> (String, String) {
    let out = Command::new(BIN)
        .args(["load", "--port", &port.to_string()])
        .args(args)
        .output()
        .expect("run ringlet load");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "ringlet load failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    (stdout, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The graph above, as the loader must have written it (under `prefix`).
fn check_graph(port: u16, summary: &str, prefix: &str) {
    // 5 records; links: 3 bosses (5 has none, 9 dangling) + 5 follows (9 dangling; 9's
    // own two rows dangling by their owner).
    assert!(
        summary.contains("5 records, 8 links, 4 dangling, 0 skipped rows"),
        "{summary}"
    );
    let k = |s: &str| format!("{prefix}{s}");
    let u1 = hgetall(port, &k("user:1"));
    assert_eq!(u1["name"], "ann");
    assert_eq!(u1["age"], "31");
    assert_eq!(u1["boss"], k("user:2"));
    // The first chunk in the owner, the rest in continuation items linked by follows.next.
    assert_eq!(
        strings(rcall(port, &["LINK", "GET", &k("user:1"), "follows"])),
        [k("user:2"), k("user:3")]
    );
    let c1 = k("user:1#follows#1");
    assert_eq!(
        strings(rcall(port, &["LINK", "GET", &k("user:1"), "follows.next"])),
        std::slice::from_ref(&c1)
    );
    assert_eq!(
        strings(rcall(port, &["LINK", "GET", &c1, "follows"])),
        [k("user:4"), k("user:5")]
    );
    assert_eq!(
        strings(rcall(port, &["LINK", "GET", &c1, "follows.next"])),
        Vec::<String>::new()
    );
    assert_eq!(
        strings(rcall(port, &["LINK", "GET", &k("user:2"), "follows"])),
        [k("user:1")]
    );
    let u3 = hgetall(port, &k("user:3"));
    assert!(!u3.contains_key("boss"), "dangling boss written: {u3:?}");
    assert!(!hgetall(port, &k("user:5")).contains_key("boss"));
    // CHASE walks the whole list through the chunks.
    let Reply::Array(items) = rcall(
        port,
        &[
            "CHASE",
            &k("user:1"),
            "follows",
            "follows.next",
            "DEPTH",
            "2",
            "FIELDS",
            "name",
        ],
    ) else {
        panic!("CHASE reply")
    };
    let mut names: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            Reply::Array(e) => match e.get(2) {
                Some(Reply::Array(f)) if f.len() == 2 => match &f[1] {
                    Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect();
    names.sort();
    assert_eq!(names, ["ann", "bob", "cy", "di", "ed"], "{items:?}");
}

#[test]
fn csv_and_jsonl_into_a_single_node() {
    let node = server();
    let dir = tmpdir("single");
    let (u, f) = write_csv(&dir);
    let m = mapping(&dir, "users", "follows");
    let out = load(node.1, &csv_args(&m, &[&u, &f]));
    check_graph(node.1, &out, "");
    // A second load over the first (no generation) replaces the lists, not appends to them.
    let again = load(node.1, &csv_args(&m, &[&u, &f]));
    check_graph(node.1, &again, "");

    let node2 = server();
    let (u, f) = write_jsonl(&dir);
    let out = load(
        node2.1,
        &[
            "--mapping",
            m.to_str().unwrap(),
            "--jsonl",
            u.to_str().unwrap(),
            "--jsonl",
            &format!("follows={}", f.display()),
        ],
    );
    check_graph(node2.1, &out, "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ringlet up --nodes 3` (64 MiB each, no admin port) with `extra` arguments: its first
/// node's port and the cluster, stopped when dropped.
fn three_nodes(extra: &[&str]) -> (u16, common::Up) {
    let base = common::free_base(4);
    let port = base.to_string();
    let mut args = vec![
        "up",
        "--nodes",
        "3",
        "--port",
        &port,
        "--no-admin",
        "--memory-mb",
        "64",
    ];
    args.extend_from_slice(extra);
    (base, common::up(&args))
}

#[test]
fn csv_and_jsonl_into_a_cluster() {
    let (base, _up) = three_nodes(&[]);
    let dir = tmpdir("cluster");
    let (u, f) = write_csv(&dir);
    let m = mapping(&dir, "users", "follows");
    let (out, err) = load_with_stderr(base, &csv_args(&m, &[&u, &f]));
    check_graph(base, &out, "");
    // Each cluster node takes `index-keys` too (since session 23; before, the loader said
    // once that pre-sizing was not available and went on): no refusal, and a node's index
    // grows when asked.
    assert!(!err.contains("pre-siz"), "{err}");
    let before = index_keys(base + 1);
    let want = (before * 3).to_string();
    assert_eq!(
        rcall(base + 1, &["CONFIG", "SET", "index-keys", &want]),
        Reply::Simple(b"OK".to_vec())
    );
    assert!(
        index_keys(base + 1) >= before * 3,
        "{}",
        index_keys(base + 1)
    );
    assert!(matches!(
        rcall(base + 1, &["CONFIG", "SET", "index-keys", "many"]),
        Reply::Error(_)
    ));
    // JSON Lines into generation 1 of an alias: every key under `g@1:`, the alias set.
    let (u, f) = write_jsonl(&dir);
    let out = load(
        base + 1,
        &[
            "--mapping",
            m.to_str().unwrap(),
            "--jsonl",
            u.to_str().unwrap(),
            "--jsonl",
            f.to_str().unwrap(),
            "--alias",
            "g",
            "--grace",
            "0s",
        ],
    );
    assert!(out.contains("generation 1 published: g -> g@1:"), "{out}");
    check_graph(base, &out, "g@1:");
    // Generation 2 replaces it: published, then generation 1's keys (5 users and one list
    // item) are found by SCAN on every node and deleted.
    let out = load(
        base + 2,
        &[
            "--mapping",
            m.to_str().unwrap(),
            "--jsonl",
            u.to_str().unwrap(),
            "--jsonl",
            f.to_str().unwrap(),
            "--alias",
            "g",
            "--grace",
            "0s",
        ],
    );
    assert!(out.contains("generation 2 published: g -> g@2:"), "{out}");
    assert!(out.contains("deleted 6 keys of older generations"), "{out}");
    check_graph(base, &out, "g@2:");
    for k in ["g@1:user:1", "g@1:user:5", "g@1:user:1#follows#1"] {
        assert_eq!(rcall(base, &["EXISTS", k]), Reply::Integer(0), "{k}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sqlite_query() {
    let node = server();
    let dir = tmpdir("sqlite");
    let db = dir.join("graph.db");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch(
            "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT, age INTEGER, boss_id INTEGER);
             CREATE TABLE follows(src INTEGER, dst INTEGER);",
        )
        .unwrap();
        for (id, n, a, b) in USERS {
            let boss: Option<i64> = b.parse().ok();
            c.execute(
                "INSERT INTO users VALUES (?1, ?2, ?3, ?4)",
                rusqlite::params![
                    id.parse::<i64>().unwrap(),
                    n,
                    a.parse::<i64>().unwrap(),
                    boss
                ],
            )
            .unwrap();
        }
        for (i, (a, b)) in FOLLOWS.iter().enumerate() {
            c.execute(
                "INSERT INTO follows(rowid, src, dst) VALUES (?1, ?2, ?3)",
                rusqlite::params![i as i64 + 1, a, b],
            )
            .unwrap();
        }
    }
    let m = mapping(&dir, "users", "follows");
    let out = load(
        node.1,
        &[
            "--mapping",
            m.to_str().unwrap(),
            "--sqlite",
            db.to_str().unwrap(),
            "--query",
            "users=SELECT id, name, age, boss_id FROM users",
            "--query",
            "follows=SELECT src, dst FROM follows ORDER BY rowid",
        ],
    );
    check_graph(node.1, &out, "");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres_query() {
    let Some(bin) = postgres_bin() else {
        assert!(
            std::env::var_os("RINGLET_REQUIRE_POSTGRES").is_none(),
            "PostgreSQL is not installed (apt-get install postgresql) and RINGLET_REQUIRE_POSTGRES is set"
        );
        eprintln!("SKIPPED postgres_query: no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)");
        return;
    };
    let dir = tmpdir("postgres");
    let pg = Pg::start(bin, &dir);
    let mut sql = String::from(
        "CREATE TABLE users(id int PRIMARY KEY, name text, age int, boss_id int);
         CREATE TABLE follows(n serial, src int, dst int);",
    );
    for (id, n, a, b) in USERS {
        let boss = if b.is_empty() { "NULL" } else { b };
        sql += &format!("INSERT INTO users VALUES ({id}, '{n}', {a}, {boss});");
    }
    for (a, b) in FOLLOWS {
        sql += &format!("INSERT INTO follows(src, dst) VALUES ({a}, {b});");
    }
    pg.psql(&sql);
    let node = server();
    let m = mapping(&dir, "users", "follows");
    let url = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port
    );
    let out = load(
        node.1,
        &[
            "--mapping",
            m.to_str().unwrap(),
            "--postgres",
            &url,
            "--query",
            "users=SELECT id, name, age, boss_id FROM users",
            "--query",
            "follows=SELECT src, dst FROM follows ORDER BY n",
        ],
    );
    check_graph(node.1, &out, "");
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--every`: the loader reloads a CSV whose `v` column the test bumps after each published
/// generation (the file is replaced by rename, as a producer would). A reader loop reads the
/// alias, then every record's `v` and `next` link under that prefix; within one read all
/// values are equal and every link points into the same generation — never a mix — and no
/// record is missing (the 1.5 s grace period covers a round, one pipelined write). Once the
/// old generations are deleted, the node holds one generation plus the alias (DBSIZE).
#[test]
fn every_swaps_generations_atomically() {
    const N: usize = 40;
    let node = server();
    let port = node.1;
    let dir = tmpdir("every");
    let csv = dir.join("items.csv");
    let write = |v: usize| {
        let mut s = "id,v,next\n".to_string();
        for i in 0..N {
            s += &format!("{i},{v},{}\n", (i + 1) % N);
        }
        let tmp = dir.join("items.tmp");
        std::fs::write(&tmp, s).unwrap();
        std::fs::rename(&tmp, &csv).unwrap();
    };
    write(1);
    let m = dir.join("mapping.toml");
    std::fs::write(
        &m,
        "[[records]]\nkey = \"item:{id}\"\nattributes = [\"v\"]\nlinks = [{ field = \"next\", target = \"item:{next}\" }]\n",
    )
    .unwrap();
    let mut loader = Command::new(BIN)
        .args(["load", "--port", &port.to_string(), "--mapping"])
        .arg(&m)
        .arg("--csv")
        .arg(&csv)
        .args([
            "--alias", "cat", "--every", "300ms", "--grace", "1500ms", "--count", "4",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ringlet load --every");
    let lines = BufReader::new(loader.stdout.take().unwrap()).lines();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _loader = Kill(loader);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut rounds = 0u64;
        let mut seen = std::collections::BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut conn = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(10))).ok();
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
            let prefix = match pipeline(&mut conn, &[vec![b"GET".to_vec(), b"cat".to_vec()]]).pop()
            {
                Some(Reply::Bulk(p)) => String::from_utf8(p).unwrap(),
                Some(Reply::Null) => continue, // nothing published yet
                r => panic!("GET cat: {r:?}"),
            };
            // Every record's `v` and `next` link under the prefix, in one pipelined round so a
            // round stays well inside the grace period even on a loaded machine.
            let mut cmds = Vec::new();
            for i in 0..N {
                let key = format!("{prefix}item:{i}").into_bytes();
                cmds.push(vec![b"HGET".to_vec(), key.clone(), b"v".to_vec()]);
                cmds.push(vec![
                    b"LINK".to_vec(),
                    b"GET".to_vec(),
                    key,
                    b"next".to_vec(),
                ]);
            }
            let replies = pipeline(&mut conn, &cmds);
            let mut vs = std::collections::BTreeSet::new();
            for (i, pair) in replies.chunks(2).enumerate() {
                match &pair[0] {
                    Reply::Bulk(v) => vs.insert(String::from_utf8(v.clone()).unwrap()),
                    r => panic!("{prefix}item:{i}: missing within the grace period: {r:?}"),
                };
                assert_eq!(
                    strings(pair[1].clone()),
                    [format!("{prefix}item:{}", (i + 1) % N)]
                );
            }
            assert_eq!(vs.len(), 1, "a reader saw a mix of generations: {vs:?}");
            seen.extend(vs);
            rounds += 1;
        }
        (rounds, seen)
    });

    // Bump the data after each published generation; the loader stops after the fourth.
    let mut published = 0;
    for l in lines {
        if l.unwrap().contains("published") {
            published += 1;
            write(published + 1);
        }
    }
    assert_eq!(published, 4);
    // One generation + the alias: the older generations' keys are gone.
    assert_eq!(call(port, &[b"DBSIZE"]), Reply::Integer(N as i64 + 1));
    let Reply::Bulk(p) = call(port, &[b"GET", b"cat"]) else {
        panic!("no alias")
    };
    assert_eq!(p, b"cat@4:");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (rounds, seen) = reader.join().unwrap();
    assert!(rounds > 3, "the reader ran only {rounds} rounds");
    assert!(seen.len() >= 2, "the reader saw only generations {seen:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The edges of the mapping: an `external` link is written although its target is not a
/// record of the load; a row without a key is skipped and counted; a column the source lacks
/// and a server-side refusal (WRONGTYPE on a key holding a string) fail the load with a
/// message that names them.
/// `index-keys` of a node (`CONFIG GET`): the keys its index holds before it grows.
fn index_keys(port: u16) -> u64 {
    strings(rcall(port, &["CONFIG", "GET", "index-keys"]))[1]
        .parse()
        .unwrap()
}

/// 30,000 flat records (`people.csv`: id, name) and their mapping (`p:{id}`, `name`) in
/// `dir`: the CSV and the mapping's paths.
fn people(dir: &Path) -> (PathBuf, PathBuf) {
    let csv = dir.join("people.csv");
    let mut text = String::from("id,name\n");
    for i in 0..30_000 {
        text.push_str(&format!("{i},n{i}\n"));
    }
    std::fs::write(&csv, text).unwrap();
    let m = dir.join("people.toml");
    std::fs::write(
        &m,
        "[[records]]\nkey = \"p:{id}\"\nattributes = [\"name\"]\n",
    )
    .unwrap();
    (csv, m)
}

/// A load whose record sources are files sizes each node's index before pass 1 for the
/// files' lines (docs/design/loader.md, "Session 21"), so pass 1 does not grow it step by
/// step: a flat load of 30,000 records into a fresh node (whose index holds 27,852 keys)
/// leaves the index at the size asked for, 30,001 keys (the lines, header included), where
/// the same load without pre-sizing grows it once by half (41,778). Same records either way.
#[test]
fn the_index_is_sized_before_pass_1() {
    let dir = tmpdir("presize");
    let (csv, m) = people(&dir);
    let args = csv_args(&m, &[&csv]);
    let sized = server();
    let grown = server();
    let fresh = index_keys(sized.1);
    assert!(fresh < 30_000, "{fresh}");
    let out = load(sized.1, &args);
    assert!(out.contains("30000 records"), "{out}");
    let mut unsized_args = args.clone();
    unsized_args.push("--no-index-reserve");
    let out = load(grown.1, &unsized_args);
    assert!(out.contains("30000 records"), "{out}");
    let (a, b) = (index_keys(sized.1), index_keys(grown.1));
    assert!((30_000..=30_016).contains(&a), "pre-sized: {a}");
    assert!(b > a + 10_000, "grown: {b}, pre-sized: {a}");
    for port in [sized.1, grown.1] {
        assert_eq!(rcall(port, &["DBSIZE"]), Reply::Integer(30_000));
        assert_eq!(hgetall(port, "p:29999")["name"], "n29999");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn external_links_skipped_rows_and_errors() {
    let node = server();
    let dir = tmpdir("edges");
    let csv = dir.join("pages.csv");
    std::fs::write(
        &csv,
        "id,title,site\n1,home,a.example\n,orphan,b.example\n2,about,\n",
    )
    .unwrap();
    let m = dir.join("pages.toml");
    std::fs::write(
        &m,
        "[[records]]\nkey = \"page:{id}\"\nattributes = [\"title\"]\n\
         links = [{ field = \"site\", target = \"site:{site}\", external = true }]\n",
    )
    .unwrap();
    let args = csv_args(&m, &[&csv]);
    let out = load(node.1, &args);
    assert!(
        out.contains("2 records, 1 links, 0 dangling, 1 skipped rows"),
        "{out}"
    );
    assert_eq!(
        strings(rcall(node.1, &["LINK", "GET", "page:1", "site"])),
        ["site:a.example"]
    );
    assert!(!hgetall(node.1, "page:2").contains_key("site"));

    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[records]]\nkey = \"page:{id}\"\nattributes = [\"colour\"]\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["load", "--port", &node.1.to_string(), "--mapping"])
        .arg(&bad)
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no column \"colour\""), "{err}");

    assert_eq!(
        rcall(node.1, &["SET", "page:1", "a string"]),
        Reply::Simple(b"OK".to_vec())
    );
    let out = Command::new(BIN)
        .args(["load", "--port", &node.1.to_string()])
        .args(args)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1 commands failed") && err.contains("WRONGTYPE"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reload (no generation) whose list is shorter than the earlier load's: the `next` link
/// of the new last item goes in the same write (`RECORD SET ... DEL follows.next`), at a
/// continuation item and at the owner, so a walk ends where the new list ends.
#[test]
fn a_shorter_reload_drops_the_old_next_link() {
    let node = server();
    let dir = tmpdir("shorter");
    let (u, _) = write_csv(&dir);
    let m = mapping(&dir, "users", "follows");
    let next = |key: &str| strings(rcall(node.1, &["LINK", "GET", key, "follows.next"]));
    let list = |key: &str| strings(rcall(node.1, &["LINK", "GET", key, "follows"]));
    let f = dir.join("follows.csv");
    let load_follows = |targets: &[&str]| {
        let mut s = "src,dst\n".to_string();
        for t in targets {
            s += &format!("1,{t}\n");
        }
        std::fs::write(&f, s).unwrap();
        load(node.1, &csv_args(&m, &[&u, &f]))
    };
    // Chunks of 2: the owner [2 3], item 1 [4 5], item 2 [1].
    load_follows(&["2", "3", "4", "5", "1"]);
    assert_eq!(next("user:1"), ["user:1#follows#1"]);
    assert_eq!(next("user:1#follows#1"), ["user:1#follows#2"]);
    assert_eq!(list("user:1#follows#2"), ["user:1"]);
    // Item 1 becomes the last: its `next` goes.
    load_follows(&["2", "3", "4"]);
    assert_eq!(list("user:1#follows#1"), ["user:4"]);
    assert_eq!(next("user:1#follows#1"), Vec::<String>::new());
    // The owner becomes the last: its `next` goes, its attributes stay.
    load_follows(&["2"]);
    assert_eq!(list("user:1"), ["user:2"]);
    assert_eq!(next("user:1"), Vec::<String>::new());
    assert_eq!(hgetall(node.1, "user:1")["name"], "ann");
    let _ = std::fs::remove_dir_all(&dir);
}

/// In a cluster whose default memgest is `rep:3`, every node's engine holds a copy of every
/// key it coordinates or replicates, so the loader asks each node for the records times the
/// copies over the nodes (`holders_per_key`): 30,000 flat records on three nodes leave each
/// index at the 30,001 keys asked for. Sized for a third of that (the share before session
/// 24), each node's index grew by half during the load (41,778).
#[test]
fn a_replicated_cluster_is_sized_for_its_copies() {
    let (base, _up) = three_nodes(&["--default-memgest", "rep:3"]);
    let dir = tmpdir("presize-rep");
    let (csv, m) = people(&dir);
    let out = load(base, &csv_args(&m, &[&csv]));
    assert!(out.contains("30000 records"), "{out}");
    for port in base..base + 3 {
        let k = index_keys(port);
        assert!(
            (30_000..=30_016).contains(&k),
            "node {port}: index-keys {k}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
