//! Shared harness of the linked-service process tests: a `ringlet-linked` child whose stdout
//! lines are read on a thread (waits bounded by [`WAIT`] so a stuck run fails instead of
//! hanging), and a demo `accounts` member.
#![allow(dead_code)] // each test file uses its own part

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ringlet-linked");
/// Upper bound of every wait: long enough for a loaded CI host, only there to fail a stuck run.
pub const WAIT: Duration = Duration::from_secs(60);

pub struct Proc {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
}

impl Proc {
    pub fn start(args: &[&str]) -> Proc {
        let verbose = std::env::var_os("RINGLET_TEST_VERBOSE").is_some();
        let mut child = Command::new(BIN)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(if verbose {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .expect("spawn ringlet-linked");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// The next line starting with `prefix` (others are skipped).
    pub fn line(&self, prefix: &str) -> String {
        let end = Instant::now() + WAIT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let l = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no `{prefix}` line"));
            if l.starts_with(prefix) {
                return l;
            }
        }
    }

    /// `MemberCrashed` loss lines printed so far.
    pub fn crash_losses(&self) -> Vec<String> {
        self.lines
            .try_iter()
            .filter(|l| l.starts_with("loss ") && l.ends_with("MemberCrashed"))
            .collect()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A demo `accounts` member of the coordinator at `coord`, and its id.
pub fn member(coord: &str) -> (Proc, u64) {
    let p = Proc::start(&["member", "--coordinator", coord, "--service", "accounts"]);
    let l = p.line("member ");
    let id = l.split_whitespace().nth(1).unwrap().parse().unwrap();
    (p, id)
}
