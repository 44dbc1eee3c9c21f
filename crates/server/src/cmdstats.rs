//! Per-command figures of a node, for both fronts: INFO `commandstats`, `errorstats` and
//! `latencystats` in Redis 7's format, and the cluster's per-command `/metrics` series.
//!
//! ```text
//!  request ──▶ lookup / arity / auth / ACL / cluster routing ──✗──▶ rejected (calls unchanged)
//!                      │ ok
//!                      ▼
//!                 handler ──▶ calls += 1, usec += t, latency[t] += 1; an error reply: failed += 1
//!  every error reply (rejected or failed) ──▶ errorstats[first word] += 1
//! ```
//!
//! This is Redis's split (server.c `processCommand` / `call`): a command refused before it
//! runs — wrong arity, NOAUTH, NOPERM, MOVED, ASK, CROSSSLOT, TRYAGAIN, CLUSTERDOWN, OOM —
//! counts in `rejected_calls` and not in `calls`; one that ran and answered an error counts in
//! both `calls` and `failed_calls`.
//!
//! Commands of the shared table are counted by table index (a slot per spec, allocated on the
//! first call, no lock on the way); the few names outside the table (the native front's
//! `read_replica`, `cluster_map`) go to a small map bounded by [`OTHER_NAMES_MAX`].
//!
//! Why a hand-rolled histogram and not `hdrhistogram` (in Cargo.lock, used by the bench): the
//! hot path records from many threads at once, and hdrhistogram's recorder is not `Sync`; a
//! mutex per request, or one histogram per thread merged later, costs more than 288 relaxed
//! atomic buckets. Buckets are exact below 16 µs, then 8 per power of two (values within
//! 12.5 %), up to ~38 hours; quantiles report a bucket's upper bound.

use parking_lot::{Mutex, RwLock};
use ringlet_command::table;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// Names outside the command table with their own figures; more are counted as `other`.
pub const OTHER_NAMES_MAX: usize = 32;
/// Distinct error codes INFO errorstats keeps (Redis's `ERROR_STATS_NUMBER`); later codes
/// are counted under `ERRORSTATS_OVERFLOW`.
pub const ERROR_CODES_MAX: usize = 128;
/// Histogram buckets: 16 exact (0–15 µs) then 8 per power of two from 2^4 to 2^36 µs.
const BUCKETS: usize = 16 + 33 * 8;

fn bucket_of(us: u64) -> usize {
    if us < 16 {
        return us as usize;
    }
    let e = 63 - us.leading_zeros() as usize; // >= 4
    if e > 36 {
        return BUCKETS - 1;
    }
    let sub = ((us >> (e - 3)) & 7) as usize;
    16 + (e - 4) * 8 + sub
}

/// The largest value (µs) bucket `i` holds.
fn bucket_high(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let e = (i - 16) / 8 + 4;
    let sub = ((i - 16) % 8) as u64;
    ((8 + sub + 1) << (e - 3)) - 1
}

/// A latency histogram anyone may record into at once.
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Histogram {
    /// Back to empty (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for b in self.buckets.iter() {
            b.store(0, Relaxed);
        }
    }

    pub fn record(&self, us: u64) {
        self.record_n(us, 1);
    }

    /// `n` values of `us` each (a batch of requests timed together).
    pub fn record_n(&self, us: u64, n: u64) {
        if let Some(b) = self.buckets.get(bucket_of(us)) {
            b.fetch_add(n, Relaxed);
        }
    }

    pub fn snapshot(&self) -> Counts {
        Counts(self.buckets.iter().map(|b| b.load(Relaxed)).collect())
    }
}

/// A histogram's bucket counts at one moment (subtract two for a window).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts(Vec<u64>);

impl Counts {
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `self - older`, bucket by bucket.
    pub fn since(&self, older: &Counts) -> Counts {
        Counts(
            self.0
                .iter()
                .enumerate()
                .map(|(i, v)| v.saturating_sub(older.0.get(i).copied().unwrap_or(0)))
                .collect(),
        )
    }

    /// The `q` quantile (0..=1) in µs: the upper bound of the bucket holding it; `None`
    /// when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        // The rank of the q-quantile, 1-based, at least 1.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.0.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_high(i));
            }
        }
        Some(bucket_high(BUCKETS - 1))
    }

    /// Values at most `us`, at bucket resolution (Prometheus `le` buckets).
    pub fn at_most(&self, us: u64) -> u64 {
        self.0
            .iter()
            .enumerate()
            .take_while(|(i, _)| bucket_high(*i) <= us)
            .map(|(_, c)| c)
            .sum()
    }
}

/// How a request ended, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and answered without an error.
    Ok,
    /// It ran and answered an error (`calls` and `failed_calls`).
    Failed,
    /// It was refused before running (`rejected_calls` only).
    Rejected,
}

impl Outcome {
    /// The outcome of a command that ran and answered `error` (`None`: no error). A cluster
    /// front answers its routing refusals from inside the handler; these words are the ones
    /// Redis gives before `call` and counts as rejections.
    pub fn of_error(error: Option<&[u8]>) -> Outcome {
        const REFUSALS: [&[u8]; 7] = [
            b"MOVED ",
            b"ASK ",
            b"CROSSSLOT ",
            b"TRYAGAIN ",
            b"CLUSTERDOWN ",
            b"NOAUTH ",
            b"NOPERM ",
        ];
        match error {
            None => Outcome::Ok,
            Some(e) if REFUSALS.iter().any(|w| e.starts_with(w)) => Outcome::Rejected,
            Some(_) => Outcome::Failed,
        }
    }
}

/// One command's figures.
#[derive(Default)]
pub struct CommandStat {
    pub calls: AtomicU64,
    pub usec: AtomicU64,
    pub rejected: AtomicU64,
    pub failed: AtomicU64,
    pub latency: Histogram,
}

impl CommandStat {
    /// Back to zero (CONFIG RESETSTAT).
    pub fn reset(&self) {
        for c in [&self.calls, &self.usec, &self.rejected, &self.failed] {
            c.store(0, Relaxed);
        }
        self.latency.reset();
    }

    /// Count one request that took `us`.
    pub fn record(&self, us: u64, outcome: Outcome) {
        if outcome == Outcome::Rejected {
            self.rejected.fetch_add(1, Relaxed);
            return;
        }
        self.calls.fetch_add(1, Relaxed);
        self.usec.fetch_add(us, Relaxed);
        self.latency.record(us);
        if outcome == Outcome::Failed {
            self.failed.fetch_add(1, Relaxed);
        }
    }

    /// Count `n` requests that ran without an error in `usec` together (a batch): each is
    /// put in the histogram at the batch's mean.
    pub fn record_batch(&self, n: u64, usec: u64) {
        if n == 0 {
            return;
        }
        self.calls.fetch_add(n, Relaxed);
        self.usec.fetch_add(usec, Relaxed);
        self.latency.record_n(usec / n, n);
    }

    fn any(&self) -> bool {
        self.calls.load(Relaxed) + self.rejected.load(Relaxed) > 0
    }
}

/// Which command a request counts under: its index in the command table (what a front that
/// looked the request up has), or a name (a native request's RESP name, or one outside the
/// table).
#[derive(Clone, Copy, Debug)]
pub enum CommandId {
    Spec(usize),
    Named(&'static str),
}

/// A node's per-command and per-error figures.
pub struct CommandStats {
    by_spec: Box<[OnceLock<CommandStat>]>,
    others: RwLock<BTreeMap<&'static str, Arc<CommandStat>>>,
    errors: Mutex<BTreeMap<String, u64>>,
}

impl Default for CommandStats {
    fn default() -> Self {
        CommandStats {
            by_spec: (0..table().specs.len()).map(|_| OnceLock::new()).collect(),
            others: RwLock::new(BTreeMap::new()),
            errors: Mutex::new(BTreeMap::new()),
        }
    }
}

impl CommandStats {
    /// The figures of the command at table index `idx`.
    pub fn by_index(&self, idx: usize) -> &CommandStat {
        // An index from the same table is always in range; a counter never panics.
        let last = self.by_spec.len().saturating_sub(1);
        self.by_spec[idx.min(last)].get_or_init(CommandStat::default)
    }

    /// The figures of `name` (lowercase; `client|list` for a subcommand): a table command by
    /// its index, any other name in the bounded map (`other` past [`OTHER_NAMES_MAX`]).
    pub fn by_name(&self, name: &'static str) -> CommandStatRef<'_> {
        let t = table();
        let idx = match name.split_once('|') {
            None => t.index(name),
            Some((c, sub)) => t
                .index(c)
                .and_then(|i| t.spec(i).subcommands.get(sub).copied()),
        };
        if let Some(i) = idx {
            return CommandStatRef::Spec(self.by_index(i));
        }
        if let Some(s) = self.others.read().get(name) {
            return CommandStatRef::Other(s.clone());
        }
        let mut t = self.others.write();
        let key = if t.len() < OTHER_NAMES_MAX {
            name
        } else {
            "other"
        };
        CommandStatRef::Other(t.entry(key).or_default().clone())
    }

    /// The figures of `id` ([`CommandStats::by_index`] or [`CommandStats::by_name`]).
    pub fn stat(&self, id: CommandId) -> CommandStatRef<'_> {
        match id {
            CommandId::Spec(i) => CommandStatRef::Spec(self.by_index(i)),
            CommandId::Named(name) => self.by_name(name),
        }
    }

    /// Count one error reply under its code (the first word, as Redis's errorstats).
    pub fn record_error(&self, text: &[u8]) {
        let word = text.split(|&b| b == b' ').next().unwrap_or_default();
        // Borrowed unless the code is not UTF-8: an error already counted allocates nothing.
        let word = String::from_utf8_lossy(&word[..word.len().min(64)]);
        let mut e = self.errors.lock();
        if let Some(n) = e.get_mut(word.as_ref()) {
            *n += 1;
        } else if e.len() < ERROR_CODES_MAX {
            e.insert(word.into_owned(), 1);
        } else {
            *e.entry("ERRORSTATS_OVERFLOW".to_string()).or_default() += 1;
        }
    }

    /// CONFIG RESETSTAT: every command's figures and every error count back to zero, as
    /// Redis's `resetCommandTableStats` and `resetErrorTableStats`. (A command counted while
    /// this runs may keep part of its figures: statistics, not accounting.)
    pub fn reset(&self) {
        for s in self.by_spec.iter().filter_map(OnceLock::get) {
            s.reset();
        }
        for s in self.others.read().values() {
            s.reset();
        }
        self.errors.lock().clear();
    }

    /// Every command with a call or a rejection, by full name (`client|list`).
    pub fn commands(&self) -> Vec<(&'static str, &CommandStat)> {
        let t = table();
        let mut v: Vec<(&'static str, &CommandStat)> = self
            .by_spec
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.get().filter(|s| s.any()).map(|s| (t.spec(i).name, s)))
            .collect();
        v.sort_by_key(|(n, _)| *n);
        v
    }

    /// The names outside the table, with their figures.
    pub fn others(&self) -> Vec<(&'static str, Arc<CommandStat>)> {
        self.others
            .read()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }

    /// Every command with figures, table commands then the other names, each by name.
    pub fn all(&self) -> Vec<(&'static str, CommandStatRef<'_>)> {
        let mut v: Vec<_> = self
            .commands()
            .into_iter()
            .map(|(n, s)| (n, CommandStatRef::Spec(s)))
            .collect();
        v.extend(
            self.others()
                .into_iter()
                .map(|(n, s)| (n, CommandStatRef::Other(s))),
        );
        v
    }

    /// (calls, error replies) over every command: INFO stats' `total_commands_processed`
    /// and `total_error_replies`.
    pub fn totals(&self) -> (u64, u64) {
        let calls = self.all().iter().map(|(_, s)| s.calls.load(Relaxed)).sum();
        (calls, self.errors.lock().values().sum())
    }

    /// INFO `# Commandstats`.
    pub fn commandstats_text(&self) -> String {
        let mut out = String::from("# Commandstats\r\n");
        let mut line = |name: &str, s: &CommandStat| {
            let calls = s.calls.load(Relaxed);
            let usec = s.usec.load(Relaxed);
            let _ = write!(
                out,
                "cmdstat_{name}:calls={calls},usec={usec},usec_per_call={:.2},rejected_calls={},failed_calls={}\r\n",
                if calls == 0 { 0.0 } else { usec as f64 / calls as f64 },
                s.rejected.load(Relaxed),
                s.failed.load(Relaxed)
            );
        };
        for (name, s) in self.all() {
            line(name, &s);
        }
        out
    }

    /// INFO `# Errorstats`.
    pub fn errorstats_text(&self) -> String {
        let mut out = String::from("# Errorstats\r\n");
        for (code, n) in self.errors.lock().iter() {
            let _ = write!(out, "errorstat_{code}:count={n}\r\n");
        }
        out
    }

    /// INFO `# Latencystats` (p50, p99, p99.9 per command that ran).
    pub fn latencystats_text(&self) -> String {
        let mut out = String::from("# Latencystats\r\n");
        let mut line = |name: &str, s: &CommandStat| {
            let c = s.latency.snapshot();
            if c.total() == 0 {
                return;
            }
            let q = |x: f64| c.quantile(x).unwrap_or(0) as f64;
            let _ = write!(
                out,
                "latency_percentiles_usec_{name}:p50={:.3},p99={:.3},p99.9={:.3}\r\n",
                q(0.5),
                q(0.99),
                q(0.999)
            );
        };
        for (name, s) in self.all() {
            line(name, &s);
        }
        out
    }
}

/// A command's figures as [`CommandStats::by_name`] found them.
pub enum CommandStatRef<'a> {
    Spec(&'a CommandStat),
    Other(Arc<CommandStat>),
}

impl std::ops::Deref for CommandStatRef<'_> {
    type Target = CommandStat;
    fn deref(&self) -> &CommandStat {
        match self {
            CommandStatRef::Spec(s) => s,
            CommandStatRef::Other(s) => s,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_hold_their_values() {
        let mut prev = None;
        for i in 0..BUCKETS {
            let hi = bucket_high(i);
            if let Some(p) = prev {
                assert!(hi > p, "bucket {i}");
            }
            assert_eq!(bucket_of(hi), i, "bucket {i} high {hi}");
            prev = Some(hi);
        }
        for v in [0, 1, 15, 16, 17, 100, 1_000, 12_345, 1 << 30] {
            let b = bucket_of(v);
            assert!(bucket_high(b) >= v);
            // Within 12.5 % above.
            assert!(bucket_high(b) as f64 <= v as f64 * 1.125 + 1.0, "{v}");
        }
    }

    #[test]
    fn rejections_are_not_calls() {
        let s = CommandStats::default();
        let get = table().index("get").unwrap();
        s.by_index(get).record(10, Outcome::Ok);
        s.by_index(get).record(0, Outcome::Rejected);
        s.by_name("incr").record(5, Outcome::Failed);
        s.by_name("read_replica").record(7, Outcome::Ok);
        s.by_name("client|list").record(3, Outcome::Ok);
        s.by_index(get).record_batch(4, 40);
        s.record_error(b"ERR wrong number of arguments for 'get' command");
        s.record_error(b"ERR value is not an integer or out of range");
        s.record_error(b"MOVED 1 127.0.0.1:7000");
        let c = s.commandstats_text();
        assert!(
            c.contains("cmdstat_get:calls=5,usec=50,usec_per_call=10.00,rejected_calls=1,failed_calls=0\r\n"),
            "{c}"
        );
        assert!(c.contains("cmdstat_incr:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=1\r\n"), "{c}");
        assert!(c.contains("cmdstat_read_replica:calls=1,"), "{c}");
        assert!(c.contains("cmdstat_client|list:calls=1,"), "{c}");
        assert!(s.others().iter().all(|(n, _)| *n == "read_replica"));
        assert!(!c.contains("cmdstat_set"), "{c}");
        let e = s.errorstats_text();
        assert_eq!(
            e,
            "# Errorstats\r\nerrorstat_ERR:count=2\r\nerrorstat_MOVED:count=1\r\n"
        );
        assert_eq!(s.totals(), (8, 3));
        let l = s.latencystats_text();
        assert!(
            l.contains("latency_percentiles_usec_get:p50=10.000,"),
            "{l}"
        );
        assert_eq!(
            Outcome::of_error(Some(b"MOVED 3 127.0.0.1:1")),
            Outcome::Rejected
        );
        assert_eq!(Outcome::of_error(Some(b"WRONGTYPE x")), Outcome::Failed);
        assert_eq!(Outcome::of_error(None), Outcome::Ok);
    }

    #[test]
    fn names_and_error_codes_are_bounded() {
        let s = CommandStats::default();
        let names: Vec<&'static str> = (0..OTHER_NAMES_MAX + 5)
            .map(|i| &*Box::leak(format!("zz{i}").into_boxed_str()))
            .collect();
        for n in &names {
            s.by_name(n).record(1, Outcome::Ok);
        }
        assert_eq!(s.others().len(), OTHER_NAMES_MAX + 1);
        for i in 0..ERROR_CODES_MAX + 10 {
            s.record_error(format!("E{i} x").as_bytes());
        }
        let e = s.errorstats_text();
        assert!(
            e.contains("errorstat_ERRORSTATS_OVERFLOW:count=10\r\n"),
            "{e}"
        );
    }
}
