//! TLS on a cluster's client ports (issue 10; docs/design/cluster-tls.md), with a throwaway
//! CA made here by rcgen: `ringlet up --nodes 3 --tls-cert-file --tls-key-file
//! --tls-ca-cert-file` comes up (its readiness probes speak TLS), `redis-cli --tls` and
//! redis-py `RedisCluster(ssl=True)` work against it, a plaintext client gets nothing, a
//! client that does not trust the CA fails the handshake, and incomplete or bad TLS flags are
//! refused at start. The same files make the member links (peer, control, the CLI's admin
//! requests) mutual TLS: a plaintext or certificate-less connection to a peer or control port
//! gets nothing, and `ringlet node map` needs the files.

mod common;

use common::{free_base, have_redis_py};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// ca.pem, node.pem (for 127.0.0.1 and localhost, signed by the CA) and node.key in a fresh
/// directory; plus other-ca.pem, a CA that signed nothing here.
fn make_certs(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    make_certs_for(dir, &[])
}

/// [`make_certs`] with the node certificate also naming `ips`.
fn make_certs_for(dir: &Path, ips: &[std::net::IpAddr]) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let ca_of = |name: &str| {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        (cert, key)
    };
    let (ca, ca_key) = ca_of("ringlet test CA");
    let (other, _) = ca_of("some other CA");
    let mut p = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    for ip in ips {
        p.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    p.distinguished_name
        .push(DnType::CommonName, "ringlet node");
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("node.pem"),
        dir.join("node.key"),
        dir.join("other-ca.pem"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    std::fs::write(&paths.3, other.pem()).unwrap();
    (paths.0, paths.1, paths.2, paths.3)
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ringlet-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn cluster_serves_resp_over_tls_only() {
    let dir = tmpdir("up");
    let (ca, cert, key, other_ca) = make_certs(&dir);
    let base = free_base(5);
    let b = base.to_string();
    let up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--spares",
        "1",
        "--port",
        &b,
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
        "--tls-cert-file",
        s(&cert),
        "--tls-key-file",
        s(&key),
        "--tls-ca-cert-file",
        s(&ca),
    ]);
    for port in base..base + 4 {
        // Plaintext gets no reply: the node waits for a ClientHello, then drops it.
        let mut t = TcpStream::connect(("127.0.0.1", port)).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        t.write_all(b"PING\r\n").unwrap();
        let mut got = Vec::new();
        let _ = t.read_to_end(&mut got);
        assert!(
            !String::from_utf8_lossy(&got).contains("PONG"),
            "plaintext answered on port {port}: {got:?}"
        );
        // redis-cli over TLS, trusting the CA.
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert", s(&ca), "-p", &port.to_string(), "PING"])
            .output()
            .expect("redis-cli (scripts/setup.sh installs it)");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "PONG",
            "port {port}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A client that trusts another CA fails the handshake.
        let out = Command::new("redis-cli")
            .args([
                "--tls",
                "--cacert",
                s(&other_ca),
                "-p",
                &port.to_string(),
                "PING",
            ])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("PONG"),
            "a client trusting another CA got an answer"
        );
    }
    // redis-cli in cluster mode follows MOVED over TLS.
    for i in 0..20 {
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert", s(&ca), "-c", "-p", &b])
            .args(["SET", &format!("cli:{i}"), &format!("v{i}")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    }
    if have_redis_py() {
        let script = format!(
            r#"
import redis, redis.cluster, sys
rc = redis.cluster.RedisCluster(host="127.0.0.1", port={base}, ssl=True,
                                ssl_ca_certs="{ca}")
for i in range(300):
    rc.set(f"k{{i}}", f"v{{i}}", ex=100)
assert all(rc.get(f"k{{i}}") == f"v{{i}}".encode() for i in range(300))
assert all(rc.get(f"cli:{{i}}") == f"v{{i}}".encode() for i in range(20))
assert rc.mget_nonatomic([f"k{{i}}" for i in range(50)]) == [f"v{{i}}".encode() for i in range(50)]
big = b"x" * (4 << 20)
rc.set("big", big)
assert rc.get("big") == big
print("ok", len(rc.get_nodes()), "nodes over TLS")
"#,
            ca = s(&ca)
        );
        let out = Command::new("python3")
            .args(["-c", &script])
            .output()
            .unwrap();
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    drop(up);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn incomplete_or_bad_tls_flags_are_refused() {
    let dir = tmpdir("flags");
    let (ca, cert, key, _) = make_certs(&dir);
    let garbage = dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let base = free_base(5).to_string();
    let up = ["up", "--nodes", "3", "--port", &base];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // Only two of the three files.
        (
            [
                &up[..],
                &["--tls-cert-file", s(&cert), "--tls-key-file", s(&key)],
            ]
            .concat(),
            "--tls-ca-cert-file",
        ),
        // A file without a certificate, named in the error.
        (
            [
                &up[..],
                &["--tls-cert-file", s(&garbage), "--tls-key-file", s(&key)],
                &["--tls-ca-cert-file", s(&ca)],
            ]
            .concat(),
            "garbage.pem",
        ),
        // The single node has no TLS listener: refused, not served in plaintext.
        (
            vec![
                "server",
                "--port",
                "0",
                "--tls-cert-file",
                s(&cert),
                "--tls-key-file",
                s(&key),
                "--tls-ca-cert-file",
                s(&ca),
            ],
            "cluster mode only",
        ),
    ];
    for (args, want) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bytes a plaintext client gets from `addr` after sending `probe` (the server is expected to
/// drop it at the TLS handshake: nothing, or a TLS alert, never a frame).
fn plaintext_answer(addr: &str, probe: &[u8]) -> Vec<u8> {
    let mut t = TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let _ = t.write_all(probe);
    let mut got = Vec::new();
    let _ = t.read_to_end(&mut got);
    got
}

#[test]
fn member_links_are_mutual_tls() {
    let dir = tmpdir("links");
    let (ca, cert, key, _) = make_certs(&dir);
    let base = free_base(5);
    let b = base.to_string();
    let up = common::up(&[
        "up",
        "--nodes",
        "3",
        "--spares",
        "1",
        "--port",
        &b,
        "--default-memgest",
        "rep:3",
        "--memory-mb",
        "64",
        "--tls-cert-file",
        s(&cert),
        "--tls-key-file",
        s(&key),
        "--tls-ca-cert-file",
        s(&ca),
    ]);
    // The cluster came up, so its peer and control links work over mutual TLS; replicated
    // writes cross the peer links.
    for i in 0..20 {
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert", s(&ca), "-c", "-p", &b])
            .args(["SET", &format!("link:{i}"), "v"])
            .output()
            .expect("redis-cli (scripts/setup.sh installs it)");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    }
    let control = format!("127.0.0.1:{}", base + 4);
    let secret = std::env::temp_dir().join(format!("ringlet-cluster-{}.secret", base + 4));
    // The CLI without the TLS files gets no map: the control port wants a TLS handshake.
    let map = |tls: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ringlet"));
        c.args([
            "node",
            "map",
            "--control",
            &control,
            "--cluster-secret-file",
        ])
        .arg(&secret)
        .env_remove("RINGLET_TLS_CERT_FILE")
        .env_remove("RINGLET_TLS_KEY_FILE")
        .env_remove("RINGLET_TLS_CA_CERT_FILE");
        if tls {
            c.args(["--tls-cert-file", s(&cert), "--tls-key-file", s(&key)])
                .args(["--tls-ca-cert-file", s(&ca)]);
        }
        c.output().unwrap()
    };
    let plain = map(false);
    assert!(!plain.status.success(), "map without TLS files succeeded");
    let out = map(true);
    assert!(
        out.status.success(),
        "node map over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(json.contains("epoch"), "{json}");
    // A stranger on the control port: a Watch frame in plaintext gets no map.
    let watch = br#"{"Watch":null}"#;
    let mut frame = (watch.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(watch);
    let got = plaintext_answer(&control, &frame);
    assert!(
        !String::from_utf8_lossy(&got).contains("epoch"),
        "plaintext control client got {got:?}"
    );
    // Every peer port (`ip:port@peerport` in the map) refuses plaintext the same way.
    let peers: Vec<u16> = json
        .split('@')
        .skip(1)
        .filter_map(|t| {
            let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect();
    assert_eq!(peers.len(), 4, "peer ports in {json}");
    for p in peers {
        let got = plaintext_answer(&format!("127.0.0.1:{p}"), &frame);
        // A TLS server answers garbage with at most an alert record (content type 21).
        assert!(
            got.is_empty() || got[0] == 21,
            "plaintext peer client on {p} got {got:?}"
        );
    }
    drop(up);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child killed when dropped.
struct Proc(std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A veth pair with an address on one end, removed when dropped: another "host" address on
/// this machine that is not loopback (this kernel has no `dummy` links; the namespace tests
/// use veth too).
struct Dummy(String);

impl Dummy {
    fn new(ip: &str) -> Result<Dummy, String> {
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let name = format!("rgl{}", std::process::id() % 100_000);
        let ip_cmd = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .output()
                .map_err(|e| format!("ip: {e}"))
                .and_then(|o| {
                    if o.status.success() {
                        Ok(())
                    } else {
                        Err(String::from_utf8_lossy(&o.stderr).into_owned())
                    }
                })
        };
        let peer = format!("{name}p");
        ip_cmd(&["link", "add", &name, "type", "veth", "peer", "name", &peer])?;
        let d = Dummy(name.clone());
        ip_cmd(&["addr", "add", &format!("{ip}/32"), "dev", &name])?;
        ip_cmd(&["link", "set", &peer, "up"])?;
        ip_cmd(&["link", "set", &name, "up"])?;
        Ok(d)
    }
}

impl Drop for Dummy {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

/// A cluster across "machines": `ringlet control` and three `ringlet server --cluster` nodes
/// bound to a non-loopback address (a veth address stands in for a second host). Off
/// loopback every link must be protected, so each process refuses to start without the TLS
/// files, the cluster secret or (nodes) a password; with all of them redis-cli follows MOVED
/// over TLS with AUTH, and the map announces the bind address.
#[test]
fn a_cluster_off_loopback_needs_tls_a_secret_and_a_password() {
    let octet = 10 + std::process::id() % 200;
    let ip = format!("10.77.{octet}.1");
    let _dummy = match Dummy::new(&ip) {
        Ok(d) => d,
        Err(why) => {
            // The multi-host tests (crates/cluster-tests, network namespaces) need root too;
            // CI runs as root and sets RINGLET_REQUIRE_NETNS, so there this cannot skip.
            assert!(
                std::env::var_os("RINGLET_REQUIRE_NETNS").is_none(),
                "a non-loopback address needs root and `ip`: {why}"
            );
            eprintln!("SKIPPED: a non-loopback address needs root and `ip` ({why})");
            return;
        }
    };
    let dir = tmpdir("offloop");
    let (ca, cert, key, _) = make_certs_for(&dir, &[ip.parse().unwrap()]);
    let secret = dir.join("secret");
    std::fs::write(&secret, "ab".repeat(32)).unwrap();
    let exe = env!("CARGO_BIN_EXE_ringlet");
    let tls = [
        "--tls-cert-file",
        s(&cert),
        "--tls-key-file",
        s(&key),
        "--tls-ca-cert-file",
        s(&ca),
    ];
    let base = free_base(5);
    let control_port = (base + 4).to_string();
    let control = format!("{ip}:{control_port}");
    // Refusals first: each names what is missing, and nothing starts.
    let refused = |args: &[&str], want: &str| {
        let out = Command::new(exe)
            .args(args)
            .env_remove("RINGLET_CLUSTER_SECRET")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(err.contains(want), "{args:?}: {err}");
    };
    refused(
        &["control", "--port", &control_port, "--bind", &ip],
        "--tls-* files",
    );
    let mut no_pass = vec![
        "server",
        "--cluster",
        &control,
        "--node-id",
        "1",
        "--bind",
        &ip,
    ];
    no_pass.extend(["--port", "1", "--cluster-secret-file", s(&secret)]);
    no_pass.extend(tls);
    refused(&no_pass, "--requirepass");
    refused(
        &[
            "server",
            "--cluster",
            &control,
            "--node-id",
            "1",
            "--bind",
            "0.0.0.0",
        ]
        .into_iter()
        .chain(["--requirepass", "pw"])
        .collect::<Vec<_>>(),
        "announces its bind address",
    );
    // With everything: a control plane and three nodes on the dummy address.
    let mut procs = Vec::new();
    let mut c = Command::new(exe);
    c.args([
        "control",
        "--port",
        &control_port,
        "--bind",
        &ip,
        "--nodes",
        "3",
    ])
    .args([
        "--default-memgest",
        "rep:3",
        "--cluster-secret-file",
        s(&secret),
    ])
    .args(tls)
    .stdout(Stdio::null());
    procs.push(Proc(c.spawn().unwrap()));
    for id in 1..=3u16 {
        let mut c = Command::new(exe);
        c.args([
            "server",
            "--cluster",
            &control,
            "--node-id",
            &id.to_string(),
        ])
        .args(["--bind", &ip, "--port", &(base + id - 1).to_string()])
        .args(["--requirepass", "pw", "--memory-mb", "64"])
        .args(["--cluster-secret-file", s(&secret)])
        .args(tls)
        .stdout(Stdio::null());
        procs.push(Proc(c.spawn().unwrap()));
    }
    let cli = |port: u16, args: &[&str]| -> String {
        let out = Command::new("redis-cli")
            .args([
                "--tls",
                "--cacert",
                s(&ca),
                "-h",
                &ip,
                "-a",
                "pw",
                "--no-auth-warning",
            ])
            .args(["-c", "-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (scripts/setup.sh installs it)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(base..base + 3).all(|p| cli(p, &["CLUSTER", "INFO"]).contains("cluster_state:ok")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster off loopback did not come up"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    for i in 0..30 {
        assert_eq!(
            cli(base, &["SET", &format!("k{i}"), &format!("v{i}")]).trim(),
            "OK"
        );
    }
    for i in 0..30 {
        assert_eq!(
            cli(base + 2, &["GET", &format!("k{i}")]).trim(),
            format!("v{i}")
        );
    }
    let slots = cli(base, &["CLUSTER", "SLOTS"]);
    assert!(slots.contains(&ip), "the map announces {ip}: {slots}");
    assert!(!slots.contains("127.0.0.1"), "{slots}");
    drop(procs);
    let _ = std::fs::remove_dir_all(&dir);
}
