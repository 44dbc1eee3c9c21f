//! Real multi-process tests: a node process (the real engine + Exporter), writer processes
//! mutating over the socket, reader processes reading one-sided from shared memory and
//! checking every value against `make_value(key, n, len)` and that `n` never goes back.
//! Zero wrong values are accepted. No timing assertions: durations only bound the work.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

const NODE: &str = env!("CARGO_BIN_EXE_ringlet-shm-node");
const WORKER: &str = env!("CARGO_BIN_EXE_ringlet-shm-worker");

struct Node {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Node {
    fn start(sock: &Path, extra: &[&str]) -> Node {
        let mut child = Command::new(NODE)
            .arg("--socket")
            .arg(sock)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn node");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready"), "node said {line:?}");
        Node {
            child,
            stdin,
            stdout,
        }
    }

    fn command(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn quit(mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
    }
}

/// Poll the node's `stats` until `key` reaches `at_least` (bounded: 60 s, then fail).
fn wait_stat(node: &mut Node, key: &str, at_least: u64, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let stats = node.command("stats");
        if json_u64(&stats, key) >= at_least {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what} ({key} >= {at_least}): {stats}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn json_u64(line: &str, key: &str) -> u64 {
    let pat = format!("\"{key}\":");
    let i = line
        .find(&pat)
        .unwrap_or_else(|| panic!("{key} missing in {line}"));
    line[i + pat.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

fn spawn_worker(args: &[String]) -> Child {
    Command::new(WORKER)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn worker")
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "worker failed: {:?}", out.status);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap_or("")
        .to_string()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ringlet-shm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn check_readers(outs: &[String]) {
    for o in outs {
        assert_eq!(
            json_u64(o, "wrong"),
            0,
            "reader accepted a wrong value: {o}"
        );
        assert!(json_u64(o, "hits") > 0, "reader never hit: {o}");
        assert!(json_u64(o, "shm_hits") > 0, "no one-sided hit: {o}");
    }
}

/// Writers grow the index from 16 buckets, grow the data region with large values, shrink
/// it with small values and deletes, and overflow a 4 MiB node (eviction), while readers
/// (GET and MGET) validate everything they read.
#[test]
fn readers_never_accept_wrong_values_across_upsize_growth_shrink_and_eviction() {
    churn("churn-clock", "clock");
}

/// The same with the scan-resistant policy (S3-FIFO), whose queues the access records feed.
#[test]
fn readers_never_accept_wrong_values_with_s3fifo_eviction() {
    churn("churn-s3fifo", "s3fifo");
}

fn churn(name: &str, eviction: &str) {
    let dir = tmpdir(name);
    let sock = dir.join("node.sock");
    let stop = dir.join("stop");
    let mut node = Node::start(
        &sock,
        &[
            "--memory",
            "4194304",
            "--buckets",
            "16",
            "--eviction",
            eviction,
        ],
    );
    let sock_s = sock.to_str().unwrap().to_string();
    let stop_s = stop.to_str().unwrap().to_string();
    let writers: Vec<Child> = (0..2)
        .map(|w| {
            spawn_worker(&s(&[
                "writer",
                "--socket",
                &sock_s,
                "--id",
                &w.to_string(),
                "--keys",
                "3000",
                "--ops",
                "24000",
                "--sizes",
                "48,1800,48,3000,48",
                "--phase-ops",
                "4000",
                "--delete-pct",
                "10",
                "--seed",
                &(11 + w).to_string(),
            ]))
        })
        .collect();
    let readers: Vec<Child> = [1usize, 16, 48]
        .iter()
        .enumerate()
        .map(|(i, b)| {
            spawn_worker(&s(&[
                "reader",
                "--socket",
                &sock_s,
                "--writers",
                "2",
                "--keys",
                "3000",
                "--mget",
                &b.to_string(),
                "--until-file",
                &stop_s,
                "--max-ms",
                "120000",
                "--seed",
                &(100 + i).to_string(),
            ]))
        })
        .collect();
    let wouts: Vec<String> = writers.into_iter().map(finish).collect();
    std::fs::write(&stop, b"").unwrap();
    let routs: Vec<String> = readers.into_iter().map(finish).collect();
    let stats = node.command("stats");
    let check = node.command("check");
    node.quit();
    eprintln!("writers: {wouts:?}\nreaders: {routs:?}\nnode: {stats}");
    check_readers(&routs);
    for w in &wouts {
        assert!(json_u64(w, "sets") > 0, "{w}");
    }
    assert!(
        json_u64(&stats, "upsizes") >= 2,
        "index never upsized: {stats}"
    );
    assert!(
        json_u64(&stats, "evictions") > 0,
        "nothing evicted: {stats}"
    );
    assert!(
        json_u64(&stats, "bytes_released") > 0,
        "data region never shrank: {stats}"
    );
    assert!(
        json_u64(&stats, "access_hashes") > 0,
        "no access records: {stats}"
    );
    assert!(check.starts_with("ok"), "engine invariants: {check}");
}

/// An epoch change and a node restart (SIGKILL, new process on the same socket) under load:
/// readers notice both, re-handshake, keep hitting in the new incarnation, never accept a
/// wrong value.
#[test]
fn readers_follow_epoch_change_and_node_restart() {
    let dir = tmpdir("restart");
    let sock = dir.join("node.sock");
    let stop = dir.join("stop");
    let sock_s = sock.to_str().unwrap().to_string();
    let stop_s = stop.to_str().unwrap().to_string();
    let mut node = Node::start(&sock, &["--memory", "16777216", "--buckets", "64"]);
    let writer = spawn_worker(&s(&[
        "writer",
        "--socket",
        &sock_s,
        "--id",
        "0",
        "--keys",
        "500",
        "--sizes",
        "64,400",
        "--phase-ops",
        "1000",
        "--until-file",
        &stop_s,
        "--seed",
        "5",
    ]));
    let readers: Vec<Child> = [1usize, 8, 40]
        .iter()
        .enumerate()
        .map(|(i, b)| {
            spawn_worker(&s(&[
                "reader",
                "--socket",
                &sock_s,
                "--writers",
                "1",
                "--keys",
                "500",
                "--mget",
                &b.to_string(),
                "--until-file",
                &stop_s,
                "--max-ms",
                "120000",
                "--seed",
                &(200 + i).to_string(),
            ]))
        })
        .collect();
    // Every step waits for what the readers must have seen, not for a fixed time: on a
    // loaded 2-core machine a reader process can attach after `epoch 7` (then it counts one
    // epoch change, not two) or still be reconnecting when the stop file appears.
    // Each handshake is one accepted connection: the writer and three readers.
    wait_stat(
        &mut node,
        "connections_accepted",
        4,
        "every worker attached",
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(node.command("epoch 7").starts_with("ok"));
    // The readers re-handshake on noticing the new epoch (the writer may too).
    wait_stat(
        &mut node,
        "connections_accepted",
        7,
        "the readers saw epoch 7",
    );
    std::thread::sleep(Duration::from_millis(500));
    node.kill();
    let mut node = Node::start(
        &sock,
        &["--memory", "16777216", "--buckets", "64", "--epoch", "9"],
    );
    wait_stat(
        &mut node,
        "connections_accepted",
        4,
        "every worker reattached",
    );
    wait_stat(&mut node, "keys", 500, "the writer rewrote its keys");
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(&stop, b"").unwrap();
    let wout = finish(writer);
    let routs: Vec<String> = readers.into_iter().map(finish).collect();
    let stats = node.command("stats");
    node.quit();
    eprintln!("writer: {wout}\nreaders: {routs:?}\nnode: {stats}");
    check_readers(&routs);
    for o in &routs {
        assert!(
            json_u64(o, "epoch_changes") >= 2,
            "missed an epoch change: {o}"
        );
        assert!(
            json_u64(o, "generation_changes") >= 1,
            "missed the restart: {o}"
        );
        assert!(
            json_u64(o, "generations_with_hits") >= 2,
            "no hits after the restart: {o}"
        );
        assert_eq!(json_u64(o, "epoch"), 9, "{o}");
    }
}

/// A client's mapping is read-only: `mprotect(PROT_WRITE)` is refused (the descriptor is
/// read-only) and a write through the mapping kills the child with SIGSEGV.
#[test]
fn client_mapping_is_read_only() {
    let dir = tmpdir("ro");
    let sock = dir.join("node.sock");
    let node = Node::start(&sock, &["--memory", "2097152"]);
    let out = Command::new(WORKER)
        .args(["probe-write", "--socket", sock.to_str().unwrap()])
        .output()
        .unwrap();
    node.quit();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("mprotect rc=-1 errno={}", libc_eacces())),
        "mprotect was not refused: {stdout}"
    );
    assert!(!stdout.contains("write succeeded"), "{stdout}");
    assert_eq!(
        out.status.signal(),
        Some(11),
        "child not killed by SIGSEGV: {:?}",
        out.status
    );
}

fn libc_eacces() -> i32 {
    13
}

/// The benchmark binary loads keys over the socket, reads them back one-sided from two
/// threads, checks every value, and ends with a JSON line.
#[test]
fn shm_bench_loads_reads_and_checks_every_value() {
    let dir = tmpdir("bench");
    let sock = dir.join("node.sock");
    let node = Node::start(&sock, &["--memory", "33554432"]);
    let bench = env!("CARGO_BIN_EXE_ringlet-shm-bench");
    let run = |extra: &[&str]| {
        let out = Command::new(bench)
            .args(["--socket", sock.to_str().unwrap(), "--keys", "3000"])
            .args(["--duration", "0.3", "--threads", "2", "--json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .last()
            .unwrap()
            .to_string()
    };
    let first = run(&["--load"]);
    let mget = run(&["--batch", "16", "--zipf", "0.99"]);
    node.quit();
    for j in [&first, &mget] {
        assert!(json_u64(j, "ops_per_sec") > 0, "{j}");
        assert_eq!(json_u64(j, "wrong"), 0, "{j}");
        assert_eq!(json_u64(j, "misses"), 0, "{j}");
    }
}
