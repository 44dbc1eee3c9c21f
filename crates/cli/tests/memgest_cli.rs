//! `ringlet up --pg-data 3 --pg-redundant 2` and the memgest CLI end to end through the
//! `ringlet` binary: create, list, set --memgest, key, move, info, drop (refused while keys
//! live, then allowed). The per-command semantics are tested in
//! crates/cluster-tests/tests/memgest.rs; this checks the CLI wiring and output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        // SIGTERM: `up` stops its node processes.
        let _ = Command::new("kill").arg(self.0.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ringlet(port: u16, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args(args)
        .args(["--port", &port.to_string()])
        .output()
        .expect("run ringlet");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn memgest_cli_against_a_ring_shaped_cluster() {
    // Client and admin ports below the ephemeral range (common::free_base).
    let base = common::free_base(7);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringlet"))
        .args([
            "up",
            "--nodes",
            "5",
            "--spares",
            "1",
            "--port",
            &base.to_string(),
        ])
        // No --pg-data/--pg-redundant: five nodes get Ring's 3 + 2 shape by default, so the
        // README's `memgest create cold ec 3 2` works as given.
        .args(["--memory-mb", "64"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ringlet up");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _up = Up(child);
    loop {
        let l = lines.next().expect("up exited").expect("read");
        if l.starts_with("ringlet cluster ready") {
            assert!(l.contains("s=3 d=2"), "{l}");
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let p1 = base + 1;
    let ok = |port, args: &[&str]| {
        let (ok, out, err) = ringlet(port, args);
        assert!(ok, "{args:?}: {out} {err}");
        out
    };
    ok(base, &["memgest", "create", "hot", "rep", "3"]);
    ok(p1, &["memgest", "create", "cold", "ec:3+2"]);
    ok(base, &["memgest", "create", "scratch", "none"]);
    let list = ok(p1, &["memgest", "list"]);
    assert!(list.contains("hot\trep:3\t0"), "{list}");
    assert!(list.contains("cold\tec:3+2\t0"), "{list}");
    // ec:3+3 does not fit (M > d = 2): refused, naming the flag that would make it fit.
    let (refused, _, err) = ringlet(base, &["memgest", "create", "x", "ec", "3", "3"]);
    assert!(!refused && err.contains("ERR"), "{err}");
    assert!(err.contains("--pg-redundant"), "{err}");
    assert_eq!(
        ok(base + 2, &["set", "item", "v1", "--memgest", "scratch"]).trim(),
        "OK"
    );
    let key = ok(base, &["memgest", "key", "item"]);
    assert!(key.starts_with("scratch\nnone\n"), "{key}");
    ok(base + 3, &["memgest", "move", "item", "hot"]);
    assert!(ok(base, &["memgest", "key", "item"]).starts_with("hot\nrep:3\n"));
    assert_eq!(ok(base, &["get", "item"]).trim(), "v1");
    let info = ok(base, &["memgest", "info", "cold", "--mttf", "10000"]);
    for f in [
        "descriptor:ec:3+2",
        "failures_tolerated:2",
        "memory_per_payload_byte:1.6667",
        "model_mttf_hours:10000",
        "annual_loss_probability:",
    ] {
        assert!(info.contains(f), "{f} in {info}");
    }
    // DROP is refused while the key lives in `hot`, allowed for the empty `scratch`.
    let (dropped, _, err) = ringlet(base, &["memgest", "drop", "hot"]);
    assert!(!dropped && err.contains("still holds"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (dropped, _, err) = ringlet(base, &["memgest", "drop", "scratch"]);
        if dropped {
            break;
        }
        // The old `none` copy is replaced at once; only a slow usage report can delay this.
        assert!(Instant::now() < deadline, "{err}");
    }
    assert!(!ok(base, &["memgest", "list"]).contains("scratch"));
}
