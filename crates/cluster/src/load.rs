//! Per-slot load and per-command latency of one cluster node: what the status page's heat map
//! and charts, INFO `commandstats`/`latencystats` and the per-range `/metrics` series show.
//!
//! ```text
//!  RESP / native request served ──▶ Load::record(command, class, slots, elapsed, outcome)
//!      per slot: reads[slot] / writes[slot] += 1          (16384 + 16384 atomics)
//!      per class (read/write/other): log-bucketed histogram (atomic buckets)
//!      per command: calls, usec, rejected, failed, histogram (ringlet_server::cmdstats)
//!  every SAMPLE_MS: sampler copies the counters ──▶ the last window's ops/s per slot and
//!      p50/p99 per class; HISTORY_MAX windows of totals for the charts
//! ```
//!
//! Why counters per slot and not per range: ranges change under a node (moves, failovers);
//! slots do not. A range's figure is the sum over its slots in whatever map is current when
//! someone asks. Only a request this node *served* counts (an error reply such as MOVED does
//! not), so a slot's load is counted by its coordinator alone; an MGET frame counts each key.
//!
//! The per-command figures and the histogram are the single node's too
//! (`ringlet_server::cmdstats`), so INFO reads the same on both fronts.
//!
//! Limits: a [`HISTORY_MAX`]-window ring, memory ~0.3 MiB per node plus ~2.3 KiB per command
//! that ran (names outside the command table: `cmdstats::OTHER_NAMES_MAX`).

use parking_lot::Mutex;
pub use ringlet_server::cmdstats::{
    CommandId, CommandStat, CommandStats, Counts, Histogram, Outcome,
};
use ringlet_types::{key_slot, SLOT_COUNT};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Weak;
use std::time::Duration;

/// How often the sampler turns counters into rates (the page polls at the same pace).
pub const SAMPLE_MS: u64 = 1_000;
/// Windows kept for the charts (a minute at [`SAMPLE_MS`]).
pub const HISTORY_MAX: usize = 60;

/// What kind of work a command is: the three latency charts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    Read,
    Write,
    Other,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::Read, Class::Write, Class::Other];

    pub fn name(self) -> &'static str {
        match self {
            Class::Read => "read",
            Class::Write => "write",
            Class::Other => "other",
        }
    }

    fn index(self) -> usize {
        match self {
            Class::Read => 0,
            Class::Write => 1,
            Class::Other => 2,
        }
    }
}

/// Figures of one sampling window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// Wall clock at the window's end (ms since the Unix epoch).
    pub at_unix_ms: u64,
    /// The window's length.
    pub ms: u64,
    pub reads_per_sec: f64,
    pub writes_per_sec: f64,
    pub other_per_sec: f64,
    /// Per class: p50 and p99 in µs (`None`: nothing ran).
    pub read_p50_us: Option<u64>,
    pub read_p99_us: Option<u64>,
    pub write_p50_us: Option<u64>,
    pub write_p99_us: Option<u64>,
    pub other_p50_us: Option<u64>,
    pub other_p99_us: Option<u64>,
}

struct Snapshot {
    at_mono_ms: u64,
    reads: Vec<u64>,
    writes: Vec<u64>,
    classes: [Counts; 3],
}

#[derive(Default)]
struct Sampler {
    last: Option<Snapshot>,
    /// Per slot, the last window's reads and writes per second.
    slot_rates: Vec<(f32, f32)>,
    history: VecDeque<Window>,
}

/// A node's load counters.
pub struct Load {
    reads: Box<[AtomicU64]>,
    writes: Box<[AtomicU64]>,
    classes: [Histogram; 3],
    commands: CommandStats,
    sampler: Mutex<Sampler>,
}

impl Default for Load {
    fn default() -> Self {
        let slots = || (0..SLOT_COUNT).map(|_| AtomicU64::new(0)).collect();
        Load {
            reads: slots(),
            writes: slots(),
            classes: Default::default(),
            commands: CommandStats::default(),
            sampler: Mutex::new(Sampler::default()),
        }
    }
}

impl Load {
    /// Count one request: its [`Outcome`]; `keys` are the keys whose slots it read or
    /// wrote (counted only when it ran without an error).
    pub fn record<K: AsRef<[u8]>>(
        &self,
        command: CommandId,
        class: Class,
        keys: &[K],
        elapsed: Duration,
        outcome: Outcome,
    ) {
        let slots = keys.iter().map(|k| key_slot(k.as_ref()));
        self.record_each(command, class, slots, elapsed, outcome);
    }

    /// [`Load::record`] of a command the table resolved (`idx`, `spec`), without allocating:
    /// the keys' slots are counted straight from the arguments.
    pub fn record_spec(
        &self,
        idx: usize,
        spec: &ringlet_command::Spec,
        class: Class,
        args: &[&[u8]],
        elapsed: Duration,
        outcome: Outcome,
    ) {
        let slots = spec.key_args(args).map(key_slot);
        self.record_each(CommandId::Spec(idx), class, slots, elapsed, outcome);
    }

    /// A batch of reads of command `idx` that ran without an error, one per slot in
    /// `slots`, timed together (`took`): as many [`Load::record`]s of `took / n` each.
    pub fn record_read_batch(&self, idx: usize, slots: &[u16], took: Duration) {
        let n = slots.len() as u64;
        if n == 0 {
            return;
        }
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        if let Some(h) = self.classes.get(Class::Read.index()) {
            h.record_n(us / n, n);
        }
        for s in slots {
            if let Some(c) = self.reads.get(usize::from(*s)) {
                c.fetch_add(1, Relaxed);
            }
        }
        self.commands.stat(CommandId::Spec(idx)).record_batch(n, us);
    }

    /// [`Load::record`] with the slots already known.
    pub fn record_slots(
        &self,
        command: CommandId,
        class: Class,
        slots: &[u16],
        elapsed: Duration,
        outcome: Outcome,
    ) {
        self.record_each(command, class, slots.iter().copied(), elapsed, outcome);
    }

    /// What every `record*` counts for one request; `slots` (its keys' slots) are only
    /// walked when it ran without an error and reads or writes keys.
    fn record_each(
        &self,
        command: CommandId,
        class: Class,
        slots: impl Iterator<Item = u16>,
        elapsed: Duration,
        outcome: Outcome,
    ) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        if outcome != Outcome::Rejected {
            if let Some(h) = self.classes.get(class.index()) {
                h.record(us);
            }
        }
        if outcome == Outcome::Ok && class != Class::Other {
            let per_slot = if class == Class::Read {
                &self.reads
            } else {
                &self.writes
            };
            for s in slots {
                if let Some(c) = per_slot.get(usize::from(s)) {
                    c.fetch_add(1, Relaxed);
                }
            }
        }
        self.commands.stat(command).record(us, outcome);
    }

    /// Count an error reply's code (INFO errorstats).
    pub fn record_error(&self, text: &[u8]) {
        self.commands.record_error(text);
    }

    /// The per-command figures (INFO commandstats, errorstats, latencystats; `/metrics`).
    pub fn commands(&self) -> &CommandStats {
        &self.commands
    }

    /// Requests served per slot since start: (reads, writes).
    pub fn slot_totals(&self, first: u16, last: u16) -> (u64, u64) {
        let r = usize::from(first)..=usize::from(last);
        let sum = |v: &[AtomicU64]| {
            v.get(r.clone())
                .unwrap_or_default()
                .iter()
                .map(|c| c.load(Relaxed))
                .sum()
        };
        (sum(&self.reads), sum(&self.writes))
    }

    /// Reads and writes per second over slots `first..=last` in the last window.
    pub fn slot_rates(&self, first: u16, last: u16) -> (f64, f64) {
        let s = self.sampler.lock();
        s.slot_rates
            .get(usize::from(first)..=usize::from(last))
            .unwrap_or_default()
            .iter()
            .fold((0.0, 0.0), |(r, w), (a, b)| {
                (r + f64::from(*a), w + f64::from(*b))
            })
    }

    /// The class's latency histogram since start.
    pub fn class_counts(&self, c: Class) -> Counts {
        self.classes
            .get(c.index())
            .map(Histogram::snapshot)
            .unwrap_or_default()
    }

    /// The last [`HISTORY_MAX`] windows, oldest first.
    pub fn history(&self) -> Vec<Window> {
        self.sampler.lock().history.iter().cloned().collect()
    }

    /// Close a window at `now_mono_ms` (the sampler calls this every [`SAMPLE_MS`]; tests
    /// call it directly).
    pub fn sample(&self, now_mono_ms: u64, now_unix_ms: u64) {
        let cur = Snapshot {
            at_mono_ms: now_mono_ms,
            reads: self.reads.iter().map(|c| c.load(Relaxed)).collect(),
            writes: self.writes.iter().map(|c| c.load(Relaxed)).collect(),
            classes: [
                self.classes[0].snapshot(),
                self.classes[1].snapshot(),
                self.classes[2].snapshot(),
            ],
        };
        let mut s = self.sampler.lock();
        if let Some(prev) = s.last.take() {
            let ms = cur.at_mono_ms.saturating_sub(prev.at_mono_ms).max(1);
            let per_sec = |n: u64| n as f64 * 1000.0 / ms as f64;
            s.slot_rates = cur
                .reads
                .iter()
                .zip(&prev.reads)
                .zip(cur.writes.iter().zip(&prev.writes))
                .map(|((r, pr), (w, pw))| {
                    (
                        per_sec(r.saturating_sub(*pr)) as f32,
                        per_sec(w.saturating_sub(*pw)) as f32,
                    )
                })
                .collect();
            let d: Vec<Counts> = cur
                .classes
                .iter()
                .zip(&prev.classes)
                .map(|(c, p)| c.since(p))
                .collect();
            let q = |i: usize, x: f64| d.get(i).and_then(|c| c.quantile(x));
            let w = Window {
                at_unix_ms: now_unix_ms,
                ms,
                reads_per_sec: per_sec(d.first().map_or(0, Counts::total)),
                writes_per_sec: per_sec(d.get(1).map_or(0, Counts::total)),
                other_per_sec: per_sec(d.get(2).map_or(0, Counts::total)),
                read_p50_us: q(0, 0.5),
                read_p99_us: q(0, 0.99),
                write_p50_us: q(1, 0.5),
                write_p99_us: q(1, 0.99),
                other_p50_us: q(2, 0.5),
                other_p99_us: q(2, 0.99),
            };
            if s.history.len() >= HISTORY_MAX {
                s.history.pop_front();
            }
            s.history.push_back(w);
        }
        s.last = Some(cur);
    }

    /// Prometheus text: per-class duration histograms and per-command counters (the
    /// per-range series need the map; the admin page adds them).
    pub fn prometheus(&self) -> String {
        /// `le` bounds in µs.
        const LE_US: [u64; 15] = [
            10, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
            500_000, 1_000_000,
        ];
        let mut out = String::new();
        out.push_str(
            "# HELP ringlet_command_duration_seconds Time to serve a request, by class (bucket resolution 12.5%).\n\
             # TYPE ringlet_command_duration_seconds histogram\n",
        );
        for c in Class::ALL {
            let counts = self.class_counts(c);
            for le in LE_US {
                out.push_str(&format!(
                    "ringlet_command_duration_seconds_bucket{{class=\"{}\",le=\"{}\"}} {}\n",
                    c.name(),
                    le as f64 / 1e6,
                    counts.at_most(le)
                ));
            }
            let total = counts.total();
            out.push_str(&format!(
                "ringlet_command_duration_seconds_bucket{{class=\"{}\",le=\"+Inf\"}} {total}\n",
                c.name()
            ));
            let usec: u64 = self
                .commands
                .all()
                .iter()
                .filter(|(n, _)| command_class(n) == c)
                .map(|(_, s)| s.usec.load(Relaxed))
                .sum();
            out.push_str(&format!(
                "ringlet_command_duration_seconds_sum{{class=\"{}\"}} {}\n\
                 ringlet_command_duration_seconds_count{{class=\"{}\"}} {total}\n",
                c.name(),
                usec as f64 / 1e6,
                c.name()
            ));
        }
        out.push_str(
            "# HELP ringlet_commands_total Requests served, by command.\n# TYPE ringlet_commands_total counter\n",
        );
        let cmds = self.commands.all();
        for (name, s) in &cmds {
            out.push_str(&format!(
                "ringlet_commands_total{{command=\"{name}\"}} {}\n",
                s.calls.load(Relaxed)
            ));
        }
        out.push_str(
            "# HELP ringlet_commands_failed_total Requests answered with an error (run or refused), by command.\n# TYPE ringlet_commands_failed_total counter\n",
        );
        for (name, s) in &cmds {
            out.push_str(&format!(
                "ringlet_commands_failed_total{{command=\"{name}\"}} {}\n",
                s.failed.load(Relaxed) + s.rejected.load(Relaxed)
            ));
        }
        out
    }
}

/// Sample `load` every [`SAMPLE_MS`] until it is dropped (the node's front went away).
pub async fn sample_forever(load: Weak<Load>) {
    let mut tick = tokio::time::interval(Duration::from_millis(SAMPLE_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(l) = load.upgrade() else { return };
        l.sample(crate::mono_ms(), crate::wall_ms());
    }
}

/// The class of a command by its full lowercase name (`get`, `client|list`), from the
/// shared command table: a `write` command is a write, a command with keys a read, the rest
/// (PING, INFO, CLUSTER, MEMGEST LIST, ...) `other`.
pub fn command_class(name: &str) -> Class {
    ringlet_command::table::find(name.as_bytes())
        .map_or(Class::Other, |i| class_of(ringlet_command::table().spec(i)))
}

/// [`command_class`] of a spec already looked up.
pub fn class_of(spec: &ringlet_command::Spec) -> Class {
    if spec.write {
        Class::Write
    } else if spec.first_key > 0 {
        Class::Read
    } else {
        Class::Other
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_windows() {
        let load = Load::default();
        load.sample(0, 1_000);
        for _ in 0..98 {
            load.record(
                CommandId::Named("get"),
                Class::Read,
                &[b"a"],
                Duration::from_micros(100),
                Outcome::Ok,
            );
        }
        for _ in 0..2 {
            load.record(
                CommandId::Named("get"),
                Class::Read,
                &[b"a"],
                Duration::from_millis(20),
                Outcome::Ok,
            );
        }
        load.record(
            CommandId::Named("set"),
            Class::Write,
            &[b"b"],
            Duration::from_micros(40),
            Outcome::Ok,
        );
        // An error reply counts as a call and a failure, not as load on the slot.
        load.record(
            CommandId::Named("set"),
            Class::Write,
            &[b"b"],
            Duration::from_micros(40),
            Outcome::Failed,
        );
        load.sample(2_000, 3_000);
        let h = load.history();
        assert_eq!(h.len(), 1);
        let w = &h[0];
        assert_eq!(w.ms, 2_000);
        assert!((w.reads_per_sec - 50.0).abs() < 1e-9, "{w:?}");
        assert!((w.writes_per_sec - 1.0).abs() < 1e-9, "{w:?}");
        let p50 = w.read_p50_us.unwrap();
        assert!((100..=113).contains(&p50), "{p50}");
        let p99 = w.read_p99_us.unwrap();
        assert!((20_000..=22_500).contains(&p99), "{p99}");
        assert_eq!(w.other_p50_us, None);
        let sa = key_slot(b"a");
        let sb = key_slot(b"b");
        assert_eq!(load.slot_totals(sa, sa), (100, 0));
        assert_eq!(load.slot_totals(sb, sb), (0, 1));
        let (r, _) = load.slot_rates(0, SLOT_COUNT - 1);
        assert!((r - 50.0).abs() < 1e-3, "{r}");
        // The next window starts from the last sample.
        load.sample(3_000, 4_000);
        assert_eq!(load.history()[1].reads_per_sec, 0.0);
        let info = format!(
            "{}{}",
            load.commands().commandstats_text(),
            load.commands().latencystats_text()
        );
        assert!(info.contains("cmdstat_get:calls=100,"), "{info}");
        assert!(info.contains("cmdstat_set:calls=2,"), "{info}");
        assert!(info.contains("failed_calls=1"), "{info}");
        assert!(info.contains("latency_percentiles_usec_get:p50="), "{info}");
        let prom = load.prometheus();
        assert!(
            prom.contains(
                "ringlet_command_duration_seconds_bucket{class=\"read\",le=\"0.0001\"} 0"
            ),
            "{prom}"
        );
        assert!(
            prom.contains(
                "ringlet_command_duration_seconds_bucket{class=\"read\",le=\"0.00025\"} 98"
            ),
            "{prom}"
        );
        assert!(
            prom.contains("ringlet_command_duration_seconds_count{class=\"read\"} 100"),
            "{prom}"
        );
        assert!(prom.contains("ringlet_commands_total{command=\"set\"} 2"));
        assert!(prom.contains("ringlet_commands_failed_total{command=\"set\"} 1"));
    }

    /// The Grafana dashboard (docs/grafana/ringlet.json) names only metrics a node exports:
    /// every `ringlet_*` name in it (less a histogram's `_bucket`/`_count`/`_sum`) is written
    /// by the admin page's code or this module's.
    #[test]
    fn grafana_dashboard_uses_exported_metric_names() {
        let dash = include_str!("../../../docs/grafana/ringlet.json");
        let sources = [
            include_str!("resp/admin.rs"),
            include_str!("load.rs"),
            include_str!("control_http.rs"),
        ];
        let v: serde_json::Value = serde_json::from_str(dash).unwrap();
        assert!(v["panels"].as_array().unwrap().len() > 10);
        let mut names = std::collections::BTreeSet::new();
        for part in dash.split("ringlet_").skip(1) {
            let n: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(n);
        }
        assert!(names.len() > 10, "{names:?}");
        for n in names {
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(&n);
            let name = format!("ringlet_{base}");
            assert!(
                sources.iter().any(|s| s.contains(&format!("\"{name}"))
                    || s.contains(&format!("\\n{name} "))),
                "the dashboard uses {name}, which no node exports"
            );
        }
    }

    #[test]
    fn classes_come_from_the_command_table() {
        assert_eq!(command_class("mset"), Class::Write);
        assert_eq!(command_class("mget"), Class::Read);
        assert_eq!(command_class("info"), Class::Other);
        assert_eq!(command_class("hset"), Class::Write);
        assert_eq!(command_class("object|encoding"), Class::Read);
        assert_eq!(command_class("memgest|list"), Class::Other);
    }
}
