//! SLOWLOG and LATENCY: one per node, shared by both fronts (the single node records in
//! `cmd::run`, a cluster node in its front's `command`).
//!
//! # How it works
//! Every command's run time is offered to [`Monitor::record`]. Two atomic loads decide
//! whether anything is kept (both features off: no lock, no allocation):
//!
//! - the **slow log** keeps commands that ran at least `slowlog-log-slower-than` µs
//!   (-1: off, 0: every command), newest first, at most `slowlog-max-len` entries (itself
//!   capped at `limits::SLOWLOG_LEN_MAX`); each entry keeps at most
//!   `limits::SLOWLOG_ARGS_MAX` arguments of at most `limits::SLOWLOG_ARG_BYTES_MAX` bytes,
//!   abbreviated as Redis does (`... (N more bytes)`, `... (N more arguments)`);
//! - the **latency monitor** keeps, when `latency-monitor-threshold` is above 0 ms, the
//!   commands that took at least that long, as Redis's events `command` and `fast-command`
//!   (commands flagged `fast`): per event the latest sample, the all-time maximum and the
//!   last `limits::LATENCY_SAMPLES_MAX` samples, one per second (the largest of that second).
//!
//! What is not measured, said plainly: time a command spends before it reaches its handler
//! (decoding, queueing), and on a single node the plain GETs and SETs its connection runs in
//! batches (docs/design/request-path.md), unless the slow log logs every command
//! (`slowlog-log-slower-than 0`: batching is then off and each is timed). Redis's other latency
//! events (fork, AOF, expire-cycle, eviction) do not exist here.
//!
//! Secrets never enter the log: AUTH's and HELLO AUTH's credentials, ACL SETUSER's rules,
//! CONFIG SET requirepass's value and MIGRATE's AUTH are kept as `(redacted)`, as Redis does.
//!
//! Time comes in as arguments (`now_s`), so the ring itself is deterministic.

use crate::reply::Reply;
use parking_lot::Mutex;
use ringlet_types::limits::{
    LATENCY_SAMPLES_MAX, SLOWLOG_ARGS_MAX, SLOWLOG_ARG_BYTES_MAX, SLOWLOG_LEN_MAX,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// Redis's default `slowlog-log-slower-than` (10 ms).
pub const SLOWLOG_SLOWER_THAN_US_DEFAULT: i64 = 10_000;
/// Redis's default `slowlog-max-len`.
pub const SLOWLOG_LEN_DEFAULT: u64 = 128;

/// One slow-log entry (SLOWLOG GET's six fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlowEntry {
    pub id: u64,
    /// Unix seconds when the command finished.
    pub at_s: u64,
    pub duration_us: u64,
    /// The arguments, abbreviated (see the module doc).
    pub args: Vec<Vec<u8>>,
    /// `ip:port` of the client.
    pub addr: String,
    /// The client's name (CLIENT SETNAME), empty if none.
    pub name: Vec<u8>,
}

/// One latency event: the samples of the last seconds, and the largest ever.
#[derive(Default, Debug)]
struct Event {
    /// (unix seconds, ms), oldest first; one sample per second.
    samples: VecDeque<(u64, u64)>,
    max_ms: u64,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// Newest first.
    log: VecDeque<SlowEntry>,
    events: BTreeMap<&'static str, Event>,
}

/// The node's slow log and latency monitor (see the module doc).
pub struct Monitor {
    slower_than_us: AtomicI64,
    max_len: AtomicU64,
    /// 0: the latency monitor is off (Redis's default).
    threshold_ms: AtomicU64,
    state: Mutex<State>,
}

impl Default for Monitor {
    fn default() -> Self {
        Monitor {
            slower_than_us: AtomicI64::new(SLOWLOG_SLOWER_THAN_US_DEFAULT),
            max_len: AtomicU64::new(SLOWLOG_LEN_DEFAULT),
            threshold_ms: AtomicU64::new(0),
            state: Mutex::new(State::default()),
        }
    }
}

/// CONFIG names the monitor owns, on every front.
pub const CONFIG_NAMES: [&str; 3] = [
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "latency-monitor-threshold",
];

impl Monitor {
    /// Whether a command of `duration_us` is kept by either feature (two relaxed loads: the
    /// caller may skip building the entry otherwise).
    pub fn wants(&self, duration_us: u64) -> bool {
        let slower = self.slower_than_us.load(Relaxed);
        let t = self.threshold_ms.load(Relaxed);
        (slower >= 0 && duration_us >= slower as u64) || (t > 0 && duration_us / 1000 >= t)
    }

    /// Whether every command is logged (`slowlog-log-slower-than 0`, as Redis's test suite
    /// and a user tracing a client set it): the single node's batched GET/SET path, which is
    /// not timed per command, steps aside then.
    pub fn logs_everything(&self) -> bool {
        self.slower_than_us.load(Relaxed) == 0
    }

    /// Offer one finished command. `now_s` (unix seconds) and `client` (`(addr, name)`) are
    /// asked only if it is kept: most commands are not, and a wall-clock read per command
    /// showed in a cluster node's pipelined GET profile.
    pub fn record(
        &self,
        argv: &[&[u8]],
        fast: bool,
        duration_us: u64,
        now_s: impl FnOnce() -> u64,
        client: impl FnOnce() -> (String, Vec<u8>),
    ) {
        if !self.wants(duration_us) {
            return;
        }
        let now_s = now_s();
        let slower = self.slower_than_us.load(Relaxed);
        let max_len = self.max_len.load(Relaxed) as usize;
        let t = self.threshold_ms.load(Relaxed);
        let mut st = self.state.lock();
        if slower >= 0 && duration_us >= slower as u64 && max_len > 0 {
            let (addr, name) = client();
            let id = st.next_id;
            st.next_id += 1;
            st.log.push_front(SlowEntry {
                id,
                at_s: now_s,
                duration_us,
                args: abbreviate(argv),
                addr,
                name,
            });
            st.log.truncate(max_len);
        }
        let ms = duration_us / 1000;
        if t > 0 && ms >= t {
            let e = st
                .events
                .entry(if fast { "fast-command" } else { "command" })
                .or_default();
            e.max_ms = e.max_ms.max(ms);
            match e.samples.back_mut() {
                Some(last) if last.0 == now_s => last.1 = last.1.max(ms),
                _ => {
                    e.samples.push_back((now_s, ms));
                    if e.samples.len() > LATENCY_SAMPLES_MAX {
                        e.samples.pop_front();
                    }
                }
            }
        }
    }

    /// CONFIG GET's values of [`CONFIG_NAMES`].
    pub fn config_params(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                CONFIG_NAMES[0],
                self.slower_than_us.load(Relaxed).to_string(),
            ),
            (CONFIG_NAMES[1], self.max_len.load(Relaxed).to_string()),
            (CONFIG_NAMES[2], self.threshold_ms.load(Relaxed).to_string()),
        ]
    }

    /// Parse CONFIG SET's values of the monitor's names among `pairs` (others skipped), with
    /// Redis's texts; nothing is applied. [`Monitor::apply`] applies the result.
    ///
    /// # Errors
    /// Not an integer, or out of range.
    pub fn parse(&self, pairs: &[(String, &[u8])]) -> Result<Vec<(usize, i64)>, Reply> {
        let mut out = Vec::new();
        for (name, v) in pairs {
            let Some(i) = CONFIG_NAMES.iter().position(|n| n == name) else {
                continue;
            };
            let bad = |what: &str| {
                Reply::err_owned(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - {what}"
                ))
            };
            let n = ringlet_codec::resp::int::string2ll(v)
                .ok_or_else(|| bad("argument couldn't be parsed into an integer"))?;
            let lo = if i == 0 { -1 } else { 0 };
            if n < lo {
                return Err(bad(&format!(
                    "argument must be between {lo} and {} inclusive",
                    i64::MAX
                )));
            }
            // Capped (Redis: any non-negative length), and said so rather than clamped: the
            // ring's memory is bounded.
            if i == 1 && n > i64::from(SLOWLOG_LEN_MAX) {
                return Err(bad(&format!(
                    "argument must be at most {SLOWLOG_LEN_MAX} in Ringlet"
                )));
            }
            out.push((i, n));
        }
        Ok(out)
    }

    /// Apply what [`Monitor::parse`] accepted.
    pub fn apply(&self, parsed: &[(usize, i64)]) {
        for &(i, n) in parsed {
            match i {
                0 => self.slower_than_us.store(n, Relaxed),
                1 => {
                    self.max_len.store(n as u64, Relaxed);
                    self.state.lock().log.truncate(n as usize);
                }
                _ => self.threshold_ms.store(n as u64, Relaxed),
            }
        }
    }

    /// `SLOWLOG GET|LEN|RESET|HELP ...` (the table resolved the subcommand and its arity).
    pub fn slowlog(&self, argv: &[&[u8]]) -> Reply {
        let sub = argv[1].to_ascii_lowercase();
        match sub.as_slice() {
            b"get" => {
                if argv.len() > 3 {
                    return super::err_with_arg(
                        "ERR unknown subcommand or wrong number of arguments for '",
                        argv[1],
                        "'. Try SLOWLOG HELP.",
                    );
                }
                let count = match argv.get(2) {
                    None => 10,
                    // Redis (`getRangeLongFromObjectOrReply`): one text for both.
                    Some(a) => match super::parse_i64(a) {
                        Some(n) if n >= -1 => n,
                        _ => return Reply::err("ERR count should be greater than or equal to -1"),
                    },
                };
                let st = self.state.lock();
                let n = if count < 0 {
                    st.log.len()
                } else {
                    (count as usize).min(st.log.len())
                };
                Reply::Array(
                    st.log
                        .iter()
                        .take(n)
                        .map(|e| {
                            Reply::Array(vec![
                                Reply::Int(e.id as i64),
                                Reply::Int(e.at_s as i64),
                                Reply::Int(e.duration_us as i64),
                                Reply::Array(e.args.iter().map(|a| Reply::bulk(a)).collect()),
                                Reply::bulk(e.addr.as_bytes()),
                                Reply::bulk(&e.name),
                            ])
                        })
                        .collect(),
                )
            }
            b"len" => Reply::Int(self.state.lock().log.len() as i64),
            b"reset" => {
                self.state.lock().log.clear();
                Reply::ok()
            }
            _ => super::connection::help(
                "SLOWLOG",
                &[
                    "GET [<count>]",
                    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
                    "    Entries are made of:",
                    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
                    "    client name",
                    "LEN",
                    "    Return the length of the slowlog.",
                    "RESET",
                    "    Reset the slowlog.",
                ],
            ),
        }
    }

    /// `LATENCY LATEST|HISTORY|RESET|HELP ...`.
    pub fn latency(&self, argv: &[&[u8]]) -> Reply {
        let sub = argv[1].to_ascii_lowercase();
        match sub.as_slice() {
            b"latest" => {
                let st = self.state.lock();
                Reply::Array(
                    st.events
                        .iter()
                        .filter_map(|(name, e)| {
                            let &(at, ms) = e.samples.back()?;
                            Some(Reply::Array(vec![
                                Reply::bulk(name.as_bytes()),
                                Reply::Int(at as i64),
                                Reply::Int(ms as i64),
                                Reply::Int(e.max_ms as i64),
                            ]))
                        })
                        .collect(),
                )
            }
            b"history" => {
                let st = self.state.lock();
                let name = String::from_utf8_lossy(argv[2]);
                let samples = st
                    .events
                    .get(name.as_ref())
                    .map(|e| e.samples.iter().copied().collect::<Vec<_>>())
                    .unwrap_or_default();
                Reply::Array(
                    samples
                        .into_iter()
                        .map(|(at, ms)| Reply::Array(vec![Reply::Int(at as i64), Reply::Int(ms as i64)]))
                        .collect(),
                )
            }
            b"doctor" => {
                // Plain facts rather than Redis's advice text (whose advice is about fork,
                // AOF and the like, which Ringlet does not have).
                let st = self.state.lock();
                let mut out = String::new();
                if self.threshold_ms.load(Relaxed) == 0 && st.events.is_empty() {
                    out.push_str(
                        "Latency monitoring is disabled on this node: CONFIG SET \
                         latency-monitor-threshold <milliseconds> enables it (events: command, \
                         fast-command).\n",
                    );
                } else if st.events.is_empty() {
                    out.push_str("No latency spike was observed on this node since the monitor was enabled or reset.\n");
                }
                for (name, e) in &st.events {
                    let n = e.samples.len() as u64;
                    let avg = e.samples.iter().map(|s| s.1).sum::<u64>() / n.max(1);
                    let _ = std::fmt::Write::write_fmt(
                        &mut out,
                        format_args!(
                            "{name}: {n} latency spikes (average {avg}ms) in the last {} seconds kept; worst all time {}ms.\n",
                            e.samples.len(),
                            e.max_ms
                        ),
                    );
                }
                Reply::Verbatim(bytes::Bytes::from(out))
            }
            b"reset" => {
                let mut st = self.state.lock();
                if argv.len() == 2 {
                    let n = st.events.len();
                    st.events.clear();
                    return Reply::Int(n as i64);
                }
                let mut n = 0;
                for a in &argv[2..] {
                    if st.events.remove(String::from_utf8_lossy(a).as_ref()).is_some() {
                        n += 1;
                    }
                }
                Reply::Int(n)
            }
            _ => super::connection::help(
                "LATENCY",
                &[
                    "HISTORY <event>",
                    "    Return time-latency samples for the <event> class.",
                    "LATEST",
                    "    Return the latest latency samples for all events.",
                    "DOCTOR",
                    "    Return a report of the latency events of this node.",
                    "RESET [<event> ...]",
                    "    Reset latency data of one or more <event> classes.",
                    "    (default: reset all data for all event classes)",
                    "Events: command, fast-command (commands at or above latency-monitor-threshold ms).",
                ],
            ),
        }
    }
}

/// Which arguments of `argv` are secrets the slow log must not keep (Redis's
/// `redactClientCommandArgument`): AUTH's, HELLO's after AUTH, ACL SETUSER's user and rules,
/// CONFIG SET's value of `requirepass`/`masterauth`, MIGRATE's after AUTH/AUTH2.
fn secret_args(argv: &[&[u8]]) -> Vec<bool> {
    let mut secret = vec![false; argv.len()];
    let name = argv
        .first()
        .map(|a| a.to_ascii_lowercase())
        .unwrap_or_default();
    let sub = argv
        .get(1)
        .map(|a| a.to_ascii_lowercase())
        .unwrap_or_default();
    // Options walked as their command parses them, so a name or key that happens to read
    // "auth" does not shift what is hidden.
    let walk = |secret: &mut Vec<bool>, mut j: usize, takes_value: &[&str]| {
        while j < argv.len() {
            let n = match argv[j].to_ascii_lowercase().as_slice() {
                b"auth" => 1 + usize::from(name.as_slice() == b"hello"),
                b"auth2" => 2,
                o if takes_value.iter().any(|t| t.as_bytes() == o) => {
                    j += 2;
                    continue;
                }
                b"keys" => return, // MIGRATE: the rest are keys
                _ => {
                    j += 1;
                    continue;
                }
            };
            for s in secret.iter_mut().skip(j + 1).take(n) {
                *s = true;
            }
            j += 1 + n;
        }
    };
    match name.as_slice() {
        b"auth" => secret.iter_mut().skip(1).for_each(|s| *s = true),
        b"hello" => walk(&mut secret, 1, &["setname"]),
        b"migrate" => walk(&mut secret, 6, &[]),
        b"acl" if sub == b"setuser" => secret.iter_mut().skip(2).for_each(|s| *s = true),
        b"config" if sub == b"set" => {
            let mut j = 2;
            while j + 1 < argv.len() {
                let n = argv[j].to_ascii_lowercase();
                if n == b"requirepass" || n == b"masterauth" {
                    secret[j + 1] = true;
                }
                j += 2;
            }
        }
        _ => {}
    }
    secret
}

/// The arguments a slow-log entry keeps (Redis's `slowlogCreateEntry`), secrets replaced by
/// `(redacted)`.
fn abbreviate(argv: &[&[u8]]) -> Vec<Vec<u8>> {
    let kept = argv.len().min(SLOWLOG_ARGS_MAX);
    let secret = secret_args(argv);
    let mut out = Vec::with_capacity(kept);
    for (j, a) in argv.iter().take(kept).enumerate() {
        if secret[j] {
            out.push(b"(redacted)".to_vec());
        } else if kept != argv.len() && j == kept - 1 {
            out.push(format!("... ({} more arguments)", argv.len() - kept + 1).into_bytes());
        } else if a.len() > SLOWLOG_ARG_BYTES_MAX {
            let mut v = a[..SLOWLOG_ARG_BYTES_MAX].to_vec();
            v.extend_from_slice(
                format!("... ({} more bytes)", a.len() - SLOWLOG_ARG_BYTES_MAX).as_bytes(),
            );
            out.push(v);
        } else {
            out.push(a.to_vec());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who() -> (String, Vec<u8>) {
        ("127.0.0.1:1".into(), b"n".to_vec())
    }

    #[test]
    fn keeps_what_is_slower_newest_first_and_bounded() {
        let m = Monitor::default();
        m.record(&[b"get", b"a"], true, 9_999, || 1, who);
        assert_eq!(m.slowlog(&[b"slowlog", b"len"]), Reply::Int(0));
        m.apply(&m.parse(&[("slowlog-max-len".into(), b"2")]).unwrap());
        for i in 0..3u8 {
            m.record(&[b"set", &[b'a' + i]], false, 10_000, || 5, who);
        }
        assert_eq!(m.slowlog(&[b"slowlog", b"len"]), Reply::Int(2));
        let Reply::Array(v) = m.slowlog(&[b"slowlog", b"get"]) else {
            panic!()
        };
        // Newest first: ids 2 then 1.
        assert!(matches!(&v[0], Reply::Array(e) if e[0] == Reply::Int(2)));
        assert!(matches!(&v[1], Reply::Array(e) if e[0] == Reply::Int(1)));
        assert_eq!(m.slowlog(&[b"slowlog", b"reset"]), Reply::ok());
        assert_eq!(m.slowlog(&[b"slowlog", b"len"]), Reply::Int(0));
        // Past the cap: Redis's range text.
        assert!(m.parse(&[("slowlog-max-len".into(), b"100000")]).is_err());
        assert!(m
            .parse(&[("slowlog-log-slower-than".into(), b"-2")])
            .is_err());
    }

    #[test]
    fn abbreviates_as_redis() {
        let long = vec![b'x'; 200];
        let many: Vec<&[u8]> = (0..40).map(|_| &b"a"[..]).collect();
        let a = abbreviate(&[b"set", &long]);
        assert_eq!(a[1].len(), 128 + "... (72 more bytes)".len());
        let b = abbreviate(&many);
        assert_eq!(b.len(), 32);
        assert_eq!(b[31], b"... (9 more arguments)".to_vec());
    }

    #[test]
    fn secrets_are_redacted() {
        let show = |argv: &[&[u8]]| {
            abbreviate(argv)
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(show(&[b"AUTH", b"pw"]), "AUTH (redacted)");
        assert_eq!(show(&[b"auth", b"u", b"pw"]), "auth (redacted) (redacted)");
        assert_eq!(
            show(&[b"HELLO", b"3", b"AUTH", b"u", b"pw", b"SETNAME", b"n"]),
            "HELLO 3 AUTH (redacted) (redacted) SETNAME n"
        );
        assert_eq!(
            show(&[b"acl", b"setuser", b"u", b">pw", b"+get"]),
            "acl setuser (redacted) (redacted) (redacted)"
        );
        assert_eq!(
            show(&[b"config", b"set", b"timeout", b"0", b"requirepass", b"pw"]),
            "config set timeout 0 requirepass (redacted)"
        );
        assert_eq!(
            show(&[b"migrate", b"h", b"1", b"k", b"9", b"5000", b"AUTH2", b"u", b"pw"]),
            "migrate h 1 k 9 5000 AUTH2 (redacted) (redacted)"
        );
        assert_eq!(show(&[b"get", b"auth"]), "get auth");
        assert_eq!(
            show(&[b"HELLO", b"3", b"SETNAME", b"auth", b"AUTH", b"u", b"pw"]),
            "HELLO 3 SETNAME auth AUTH (redacted) (redacted)"
        );
    }

    #[test]
    fn latency_events_by_flag_and_second() {
        let m = Monitor::default();
        m.record(&[b"get"], true, 50_000, || 7, who);
        assert_eq!(m.latency(&[b"latency", b"latest"]), Reply::Array(vec![]));
        m.apply(
            &m.parse(&[("latency-monitor-threshold".into(), b"10")])
                .unwrap(),
        );
        m.record(&[b"get"], true, 50_000, || 7, who);
        m.record(&[b"get"], true, 70_000, || 7, who);
        m.record(&[b"set"], false, 20_000, || 8, who);
        m.record(&[b"set"], false, 1_000, || 9, who); // below the threshold
        let hist = m.latency(&[b"latency", b"history", b"fast-command"]);
        assert_eq!(
            hist,
            Reply::Array(vec![Reply::Array(vec![Reply::Int(7), Reply::Int(70)])])
        );
        let Reply::Array(latest) = m.latency(&[b"latency", b"latest"]) else {
            panic!()
        };
        assert_eq!(latest.len(), 2);
        let Reply::Verbatim(doc) = m.latency(&[b"latency", b"doctor"]) else {
            panic!()
        };
        let doc = String::from_utf8_lossy(&doc).into_owned();
        assert!(doc.contains("fast-command: 1 latency spikes"), "{doc}");
        assert_eq!(
            m.latency(&[b"latency", b"reset", b"command", b"nope"]),
            Reply::Int(1)
        );
        assert_eq!(m.latency(&[b"latency", b"reset"]), Reply::Int(1));
    }
}
