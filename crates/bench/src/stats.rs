//! Counters and latency histograms of a run, and its report (text or one JSON line).

use std::time::Duration;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;

use crate::wire::{Op, Outcome};
use crate::BenchArgs;

/// What one connection (or, merged, the whole run) saw.
#[derive(Clone, Debug)]
pub struct Stats {
    /// GETs answered.
    pub gets: u64,
    /// SETs answered.
    pub sets: u64,
    /// GETs that found their key.
    pub hits: u64,
    /// GETs that did not.
    pub misses: u64,
    /// Error replies.
    pub errors: u64,
    /// Latency of every reply, µs (1 µs .. 60 s, 3 significant digits).
    pub latency_us: Histogram<u64>,
    /// Measured wall time (set on the merged total).
    pub elapsed: Duration,
}

impl Stats {
    /// Empty stats.
    ///
    /// # Errors
    /// Never in practice (fixed, valid histogram bounds).
    pub fn new() -> Result<Stats> {
        Ok(Stats {
            gets: 0,
            sets: 0,
            hits: 0,
            misses: 0,
            errors: 0,
            latency_us: Histogram::new_with_bounds(1, 60_000_000, 3).context("histogram")?,
            elapsed: Duration::ZERO,
        })
    }

    /// Count one reply to `op`.
    pub fn record(&mut self, op: Op, outcome: Outcome, latency: Duration) {
        match op {
            Op::Get => self.gets += 1,
            Op::Set => self.sets += 1,
        }
        match outcome {
            Outcome::Hit => self.hits += 1,
            Outcome::Miss => self.misses += 1,
            Outcome::Error => self.errors += 1,
            Outcome::Written => {}
        }
        // Saturate beyond the histogram's range rather than fail the run.
        let us = (latency.as_micros() as u64).clamp(1, 60_000_000);
        self.latency_us.saturating_record(us);
    }

    /// Add `other` into `self`.
    ///
    /// # Errors
    /// Histograms with different bounds (cannot happen: all come from [`Stats::new`]).
    pub fn merge(&mut self, other: &Stats) -> Result<()> {
        self.gets += other.gets;
        self.sets += other.sets;
        self.hits += other.hits;
        self.misses += other.misses;
        self.errors += other.errors;
        self.latency_us
            .add(&other.latency_us)
            .map_err(|e| anyhow::anyhow!("merging histograms: {e:?}"))
    }
}

/// The summary of a run.
#[derive(Clone, Debug)]
pub struct Report {
    /// Protocol name.
    pub protocol: String,
    /// Server address.
    pub addr: String,
    /// Parameters, for the record.
    pub connections: usize,
    /// Requests per batch.
    pub pipeline: usize,
    /// Keyspace size.
    pub keys: u64,
    /// Value bytes.
    pub value_size: usize,
    /// SET:GET.
    pub ratio: String,
    /// uniform / zipf(θ).
    pub distribution: String,
    /// Replies per second over the measured time.
    pub ops_per_sec: f64,
    /// Counters and latencies.
    pub stats: Stats,
}

impl Report {
    pub(crate) fn new(args: &BenchArgs, addr: &str, stats: Stats) -> Report {
        let ops = stats.gets + stats.sets;
        let secs = stats.elapsed.as_secs_f64().max(1e-9);
        Report {
            protocol: format!("{:?}", args.protocol).to_lowercase(),
            addr: addr.to_string(),
            connections: args.connections,
            pipeline: args.pipeline,
            keys: args.keys,
            value_size: args.value_size,
            ratio: args.ratio.clone(),
            distribution: match args.distribution {
                crate::Distribution::Uniform => "uniform".into(),
                crate::Distribution::Zipf => format!("zipf({})", args.zipf_theta),
            },
            ops_per_sec: ops as f64 / secs,
            stats,
        }
    }

    fn q(&self, q: f64) -> u64 {
        self.stats.latency_us.value_at_quantile(q)
    }

    /// One JSON object (no newline).
    pub fn to_json(&self) -> String {
        let s = &self.stats;
        serde_json::json!({
            "protocol": self.protocol,
            "addr": self.addr,
            "connections": self.connections,
            "pipeline": self.pipeline,
            "keys": self.keys,
            "value_size": self.value_size,
            "ratio": self.ratio,
            "distribution": self.distribution,
            "duration_s": s.elapsed.as_secs_f64(),
            "ops_per_sec": (self.ops_per_sec * 10.0).round() / 10.0,
            "gets": s.gets,
            "sets": s.sets,
            "hits": s.hits,
            "misses": s.misses,
            "errors": s.errors,
            "p50_us": self.q(0.5),
            "p99_us": self.q(0.99),
            "p999_us": self.q(0.999),
            "max_us": s.latency_us.max(),
            "mean_us": (s.latency_us.mean() * 10.0).round() / 10.0,
        })
        .to_string()
    }

    /// Human-readable summary.
    pub fn to_text(&self) -> String {
        let s = &self.stats;
        format!(
            "{} {}  connections {}  pipeline {}  keys {}  value {} B  SET:GET {}  {}\n\
             {:.0} ops/s over {:.2} s  (gets {}, sets {}, hits {}, misses {}, errors {})\n\
             latency us: p50 {}  p99 {}  p99.9 {}  max {}  mean {:.1}\n",
            self.protocol,
            self.addr,
            self.connections,
            self.pipeline,
            self.keys,
            self.value_size,
            self.ratio,
            self.distribution,
            self.ops_per_sec,
            s.elapsed.as_secs_f64(),
            s.gets,
            s.sets,
            s.hits,
            s.misses,
            s.errors,
            self.q(0.5),
            self.q(0.99),
            self.q(0.999),
            s.latency_us.max(),
            s.latency_us.mean(),
        )
    }
}
