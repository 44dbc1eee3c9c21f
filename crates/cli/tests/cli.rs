//! End-to-end tests of the `ringlet` binary: the readiness line contract, client
//! subcommands against a real node, refusal of a non-loopback bind without a password,
//! `/metrics` on the admin port, and clean shutdown on SIGINT / SIGTERM.
//!
//! Readiness is the `ringlet: listening on <addr>` line on stdout: no test sleeps.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ringlet");

struct Node {
    child: Child,
    stdout: BufReader<ChildStdout>,
    port: u16,
    admin: Option<String>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawn `ringlet <args>` and read its stdout up to the readiness line(s).
fn spawn(args: &[&str]) -> Node {
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ringlet");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("ringlet: listening on ")
        .unwrap_or_else(|| panic!("bad line {line:?}"));
    let port = addr.rsplit(':').next().unwrap().parse().unwrap();
    let mut admin = None;
    if args.contains(&"--admin-port") || args.first() == Some(&"up") {
        let mut l = String::new();
        stdout.read_line(&mut l).unwrap();
        admin = l
            .trim()
            .strip_prefix("ringlet: admin on ")
            .map(str::to_owned);
    }
    Node {
        child,
        stdout,
        port,
        admin,
    }
}

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).output().expect("run ringlet");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn server_prints_port_and_serves_client_commands() {
    let mut node = spawn(&[
        "server",
        "--port",
        "0",
        "--threads",
        "2",
        "--memory-mb",
        "64",
    ]);
    let p = node.port.to_string();
    let c = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--port", &p]);
        cli(&v)
    };
    assert_eq!(c(&["ping"]), (true, "PONG\n".into(), String::new()));
    assert_eq!(c(&["set", "greeting", "hello world"]).1, "OK\n");
    assert_eq!(c(&["get", "greeting"]).1, "hello world\n");
    assert_eq!(c(&["get", "missing"]).1, "(nil)\n");
    assert_eq!(c(&["incr", "n"]).1, "1\n");
    assert_eq!(c(&["incr", "n", "--by", "-5"]).1, "-4\n");
    assert_eq!(
        c(&["mget", "greeting", "missing", "n"]).1,
        "hello world\n\n-4\n"
    );
    assert_eq!(c(&["del", "greeting", "missing"]).1, "1\n");
    let (ok, info, _) = c(&["info", "keyspace"]);
    assert!(ok && info.contains("db0:keys=1,expires=0"), "{info}");
    assert_eq!(c(&["set", "s", "abc"]).1, "OK\n");
    let (ok, _, err) = c(&["incr", "s"]);
    assert!(!ok && err.contains("NOT_INTEGER"), "{err}");

    // SIGTERM stops the node cleanly: exit status 0, stdout closed.
    signal(&node.child, "-TERM");
    let status = node.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let mut rest = String::new();
    node.stdout.read_to_string(&mut rest).unwrap();
}

#[test]
fn non_loopback_bind_without_password_is_refused() {
    let (ok, _, err) = cli(&["server", "--port", "0", "--bind", "0.0.0.0"]);
    assert!(!ok);
    assert!(err.contains("--requirepass"), "{err}");
    assert!(err.contains("0.0.0.0"), "{err}");
}

#[test]
fn password_protected_node_and_client_password() {
    let node = spawn(&[
        "server",
        "--port",
        "0",
        "--requirepass",
        "pw",
        "--memory-mb",
        "64",
    ]);
    let p = node.port.to_string();
    let (ok, _, err) = cli(&["get", "k", "--port", &p]);
    assert!(!ok, "a GET without the password must fail");
    assert!(!err.is_empty());
    assert_eq!(
        cli(&["set", "k", "v", "--port", &p, "--password", "pw"]).1,
        "OK\n"
    );
    assert_eq!(
        cli(&["get", "k", "--port", &p, "--password", "pw"]).1,
        "v\n"
    );
}

#[test]
fn up_serves_metrics_and_stops_on_ctrl_c() {
    let mut node = spawn(&["up", "--port", "0", "--memory-mb", "64"]);
    let admin = node.admin.clone().expect("admin line");
    let mut line = String::new();
    node.stdout.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("ringlet: up: 1 node(s) serving"),
        "{line:?}"
    );

    // Some traffic, then scrape.
    let p = node.port.to_string();
    assert_eq!(cli(&["set", "k", "v", "--port", &p]).1, "OK\n");
    let hostport = admin
        .trim_start_matches("http://")
        .trim_end_matches("/metrics");
    let mut s = TcpStream::connect(hostport).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.contains("ringlet_commands_processed_total"), "{body}");
    assert!(body.contains("ringlet_keys 1"), "{body}");

    signal(&node.child, "-INT");
    let status = node.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
