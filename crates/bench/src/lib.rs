//! `ringlet-bench`: the load generator behind `ringlet bench`. One generator for the three
//! servers we compare: RESP (Redis, Ringlet), Ringlet's native protocol, and the memcached text
//! protocol (memcached).
//!
//! Goals:
//! - closed-loop load from `--connections` connections, each writing `--pipeline` requests at
//!   once and then reading their replies (the redis-benchmark / memtier model), for
//!   `--duration` seconds; keys from a `--keys` keyspace, uniform or Zipf, in a `--ratio` of
//!   SET:GET; values of `--value-size` bytes;
//! - cheap for the generator's CPU (it shares the machine with the server): requests are
//!   formatted into reused buffers from a pre-built value, replies are *scanned* (classified
//!   without decoding values), no allocation per request;
//! - HDR latency percentiles (per reply, from the write of its batch to its parse), hits and
//!   misses, and a last line of JSON with `--json`; a progress bar only on a terminal.
//!
//! Non-goals: open-loop (fixed-rate) load, multi-key commands, cluster routing.
//!
//! Modules: [`keys`] (key format, uniform/Zipf choice, seeded generator), [`wire`] (per-protocol
//! encode and reply classification), `stats` (counters, histograms, report), [`delay_proxy`]
//! (the userspace TCP delay proxy behind `ringlet-delay-proxy`, used to slow one replica in
//! the Fig. 11 benchmark).
//!
//! Binaries: `ringlet-delay-proxy`, and `ringlet-cluster-bench` (GET latency through the
//! cluster client or against Redis, driven by `bench/fig11.py`).
//!
//! Structure for more modes: [`run`] dispatches on [`Mode`]; a new mode (e.g. one-sided
//! shared-memory reads) adds a variant and a `run_<mode>` function that fills the same
//! [`Stats`] and report.

pub mod delay_proxy;
pub mod keys;
mod stats;
#[cfg(target_os = "linux")]
mod uring_gen;
pub mod wire;

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use bytes::{Buf, BytesMut};
use ringlet_types::limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use keys::{Chooser, KeyFormat, Rng, Zipf};
pub use stats::{Report, Stats};
pub use wire::Protocol;
use wire::{Encoder, Op, Outcome};

/// What the generator does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// GET/SET over TCP in the chosen protocol.
    Kv,
    /// One-sided GETs from a same-host node's shared memory (`ringlet server --shm-socket`):
    /// `--socket PATH`, `--threads` readers, `--batch` keys per MGET. `--load` fills the keys
    /// through the socket with values every read is checked against (values loaded by the
    /// `kv` mode do not pass that check).
    ShmGet,
}

/// How the `kv` mode's measured phase drives its connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientIo {
    /// A tokio runtime of `--threads` threads, a task per connection.
    Tokio,
    /// One thread and one io_uring for every connection (Linux): the ready batches of all
    /// connections go out in one system call, which also waits for replies. Cheaper per
    /// request than `tokio`, so that at pipeline 1 the server, not the generator, saturates
    /// first (crates/bench/src/uring_gen.rs).
    Uring,
}

/// Key distribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Zipf with `--zipf-theta` (rank 0 hottest).
    Zipf,
}

/// Arguments of `ringlet bench`.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchArgs {
    /// What to run.
    #[arg(long, value_enum, default_value_t = Mode::Kv)]
    pub mode: Mode,
    /// Wire protocol of the server.
    #[arg(long, value_enum, default_value_t = Protocol::Resp)]
    pub protocol: Protocol,
    /// Server host.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Server port (default: 6379 for resp (Redis), 7379 for native (ringlet's default port),
    /// 11211 for memcache).
    #[arg(long)]
    pub port: Option<u16>,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Bytes per key (`key:` + zero-padded index, as redis-benchmark -r).
    #[arg(long = "key-size", default_value_t = 16)]
    pub key_size: usize,
    /// Bytes per value.
    #[arg(long = "value-size", default_value_t = 100)]
    pub value_size: usize,
    /// SET:GET ratio, e.g. 1:10 (0:1 = only GET, 1:0 = only SET).
    #[arg(long, default_value = "1:10")]
    pub ratio: String,
    /// Key distribution.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub distribution: Distribution,
    /// Zipf exponent, in (0, 1).
    #[arg(long = "zipf-theta", default_value_t = 0.99)]
    pub zipf_theta: f64,
    /// Concurrent connections.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// Requests written per connection before reading their replies.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Generator threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// `kv`: how the measured phase drives its connections (`--load` always uses tokio).
    #[arg(long = "client-io", value_enum, default_value_t = ClientIo::Tokio)]
    pub client_io: ClientIo,
    /// SET every key once before measuring (so GETs hit).
    #[arg(long)]
    pub load: bool,
    /// Seed of key and operation choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the summary as one JSON object on the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// `shm-get`: the node's shared-memory socket.
    #[arg(long)]
    pub socket: Option<std::path::PathBuf>,
    /// `shm-get`: keys per one-sided MGET (1 = one GET per key).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
}

/// Parsed, checked run parameters.
struct Plan {
    protocol: Protocol,
    addr: String,
    keys: u64,
    key_format: KeyFormat,
    value_size: usize,
    set_weight: u64,
    get_weight: u64,
    chooser: Chooser,
    connections: usize,
    pipeline: usize,
    duration: Duration,
    seed: u64,
}

fn parse_ratio(s: &str) -> Result<(u64, u64)> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| anyhow!("--ratio must be SET:GET, e.g. 1:10"))?;
    let (set, get): (u64, u64) = (a.trim().parse()?, b.trim().parse()?);
    if set == 0 && get == 0 {
        bail!("--ratio 0:0 sends nothing");
    }
    if set > 1_000_000 || get > 1_000_000 {
        bail!("--ratio terms must be at most 1000000");
    }
    Ok((set, get))
}

impl Plan {
    fn new(a: &BenchArgs) -> Result<Plan> {
        if a.keys == 0 {
            bail!("--keys must be at least 1");
        }
        if a.value_size > limits::VALUE_BYTES_MAX as usize {
            bail!(
                "--value-size exceeds the value limit ({} bytes)",
                limits::VALUE_BYTES_MAX
            );
        }
        if a.connections == 0 || a.connections > limits::CONNECTIONS_MAX as usize {
            bail!("--connections must be 1..={}", limits::CONNECTIONS_MAX);
        }
        if a.pipeline == 0 || a.pipeline > limits::QUEUE_CAPACITY as usize {
            bail!("--pipeline must be 1..={}", limits::QUEUE_CAPACITY);
        }
        if !(a.duration > 0.0 && a.duration <= 86_400.0) {
            bail!("--duration must be in (0, 86400] seconds");
        }
        if a.threads == 0 || a.threads > 256 {
            bail!("--threads must be 1..=256");
        }
        let (set_weight, get_weight) = parse_ratio(&a.ratio)?;
        let chooser = match a.distribution {
            Distribution::Uniform => Chooser::Uniform(a.keys),
            Distribution::Zipf => Chooser::Zipf(Zipf::new(a.keys, a.zipf_theta)?),
        };
        let port = a.port.unwrap_or(match a.protocol {
            Protocol::Memcache => 11211,
            Protocol::Resp => 6379,
            Protocol::Native => 7379,
        });
        Ok(Plan {
            protocol: a.protocol,
            addr: format!("{}:{}", a.host, port),
            keys: a.keys,
            key_format: KeyFormat::new(a.keys, a.key_size)?,
            value_size: a.value_size,
            set_weight,
            get_weight,
            chooser,
            connections: a.connections,
            pipeline: a.pipeline,
            duration: Duration::from_secs_f64(a.duration),
            seed: a.seed,
        })
    }
}

/// Run the benchmark described by `args`, print its report (human-readable, or JSON as the
/// last line with `--json`).
///
/// # Errors
/// Invalid arguments, a server that cannot be reached, or replies that are not the protocol.
pub fn run(args: &BenchArgs) -> Result<()> {
    let report = match args.mode {
        Mode::Kv => run_kv(args)?,
        Mode::ShmGet => return run_shm_get(args),
    };
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

/// The `shm-get` mode (`ringlet_shm::benchkit::shm_get_bench`): prints a summary, or with
/// `--json` one JSON object (with `ops_per_sec`) as the last line. Fails if any value read
/// differs from what was written.
///
/// # Errors
/// Invalid arguments, an unreachable socket, or a wrong value.
pub fn run_shm_get(args: &BenchArgs) -> Result<()> {
    let Some(socket) = args.socket.clone() else {
        bail!("--mode shm-get needs --socket PATH (the node's --shm-socket)");
    };
    if args.keys == 0 || args.keys > u64::from(u32::MAX) {
        bail!("--keys must be 1..=4294967295");
    }
    if args.key_size != ringlet_shm::benchkit::BENCH_KEY_BYTES {
        bail!(
            "--mode shm-get uses {}-byte keys (key: + 12 digits); leave --key-size at 16",
            ringlet_shm::benchkit::BENCH_KEY_BYTES
        );
    }
    if args.value_size > limits::VALUE_BYTES_MAX as usize {
        bail!("--value-size exceeds the value limit");
    }
    if !(args.duration > 0.0 && args.duration <= 86_400.0) {
        bail!("--duration must be in (0, 86400] seconds");
    }
    if args.threads == 0 || args.threads > 256 {
        bail!("--threads must be 1..=256");
    }
    if args.batch == 0 || args.batch > 1024 {
        bail!("--batch must be 1..=1024");
    }
    if args.client_io != ClientIo::Tokio {
        // One-sided reads make no socket calls to drive: refused rather than ignored.
        bail!("--client-io is a kv-mode option; shm-get reads shared memory, not sockets");
    }
    let o = ringlet_shm::benchkit::ShmGetOptions {
        socket,
        load: args.load,
        keys: args.keys,
        value_size: args.value_size,
        duration: Duration::from_secs_f64(args.duration),
        threads: args.threads,
        batch: args.batch,
        zipf: (args.distribution == Distribution::Zipf).then_some(args.zipf_theta),
    };
    let r = ringlet_shm::benchkit::shm_get_bench(&o).context("shm-get")?;
    if !args.json {
        println!(
            "shm-get: {:.0} GETs/s ({:.0} per client CPU-second), {} reads, {} wrong, {} misses, {} socket fallbacks",
            r.ops_per_sec, r.ops_per_cpu_sec, r.ops, r.wrong, r.misses, r.fallbacks
        );
    }
    println!("{}", r.to_json(&o));
    if r.wrong > 0 {
        bail!("{} values differed from what was written", r.wrong);
    }
    Ok(())
}

/// The `kv` mode: returns the report instead of printing it (tests, other harnesses).
///
/// # Errors
/// See [`run`].
pub fn run_kv(args: &BenchArgs) -> Result<Report> {
    let plan = Arc::new(Plan::new(args)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .context("starting the generator runtime")?;
    let show_progress = std::io::stdout().is_terminal() && !args.json;
    if args.load {
        rt.block_on(load(&plan, show_progress))?;
    }
    let stats = match args.client_io {
        ClientIo::Tokio => rt.block_on(measure(&plan, show_progress))?,
        #[cfg(target_os = "linux")]
        ClientIo::Uring => {
            if args.threads != 1 {
                bail!("--client-io uring runs one thread: leave --threads at 1");
            }
            uring_gen::measure(&plan)?
        }
        #[cfg(not(target_os = "linux"))]
        ClientIo::Uring => bail!("--client-io uring is Linux only"),
    };
    Ok(Report::new(args, &plan.addr, stats))
}

async fn connect(plan: &Plan) -> Result<TcpStream> {
    let s = TcpStream::connect(&plan.addr)
        .await
        .with_context(|| format!("connecting to {}", plan.addr))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// One connection's request/reply machinery.
struct Conn {
    sock: TcpStream,
    enc: Encoder,
    out: Vec<u8>,
    inbuf: BytesMut,
    ops: Vec<Op>,
    next_id: u64,
    protocol: Protocol,
}

/// How long past the end of the run a reply may take before the run fails (a server that
/// stopped answering must not hang the generator).
const REPLY_GRACE: Duration = Duration::from_secs(10);

impl Conn {
    async fn new(plan: &Plan) -> Result<Conn> {
        Ok(Conn {
            sock: connect(plan).await?,
            enc: Encoder::new(plan.protocol, plan.key_format.clone(), plan.value_size),
            out: Vec::with_capacity(plan.pipeline * (plan.value_size + 64)),
            inbuf: BytesMut::with_capacity(64 * 1024),
            ops: Vec::with_capacity(plan.pipeline),
            next_id: 1,
            protocol: plan.protocol,
        })
    }

    /// Write one batch of requests, read every reply, record each in `stats`.
    async fn batch(
        &mut self,
        reqs: impl Iterator<Item = (Op, u64)>,
        stats: &mut Stats,
        reply_deadline: Instant,
    ) -> Result<()> {
        self.out.clear();
        self.ops.clear();
        let base = self.next_id;
        for (op, key) in reqs {
            let id = base + self.ops.len() as u64;
            self.enc.encode(&mut self.out, op, key, id);
            self.ops.push(op);
        }
        let n = self.ops.len();
        self.next_id = base + n as u64;
        let start = std::time::Instant::now();
        self.sock.write_all(&self.out).await?;
        let mut got = 0usize;
        // Bounded: ends after `n` replies, on error, or at `reply_deadline`.
        while got < n {
            loop {
                let in_order = self.ops.get(got).copied().unwrap_or(Op::Get);
                let Some((outcome, used, id)) =
                    wire::parse_reply(self.protocol, in_order, &self.inbuf)?
                else {
                    break;
                };
                let (op, outcome) =
                    classify(self.protocol, &self.ops, base, in_order, outcome, id)?;
                stats.record(op, outcome, start.elapsed());
                self.inbuf.advance(used);
                got += 1;
                if got == n {
                    break;
                }
            }
            if got < n {
                let read =
                    tokio::time::timeout_at(reply_deadline, self.sock.read_buf(&mut self.inbuf))
                        .await
                        .map_err(|_| anyhow!("no reply from {} in time", self.protocol_name()))??;
                if read == 0 {
                    bail!("server closed the connection");
                }
            }
        }
        Ok(())
    }

    fn protocol_name(&self) -> &'static str {
        match self.protocol {
            Protocol::Resp => "the RESP server",
            Protocol::Native => "the native server",
            Protocol::Memcache => "the memcached server",
        }
    }
}

/// The request a parsed reply answers and how it ended: in order for RESP and memcache, by
/// the id a native reply names (native replies may come out of order) among the batch's
/// `ops`, whose first request had id `base`. Shared by both measured phases.
fn classify(
    protocol: Protocol,
    ops: &[Op],
    base: u64,
    in_order: Op,
    outcome: Outcome,
    id: u64,
) -> Result<(Op, Outcome)> {
    let op = if protocol == Protocol::Native {
        id.checked_sub(base)
            .and_then(|i| ops.get(i as usize))
            .copied()
            .ok_or_else(|| anyhow!("reply to unknown request id {id}"))?
    } else {
        in_order
    };
    let outcome = match (op, outcome) {
        (Op::Set, Outcome::Hit | Outcome::Miss) => Outcome::Written,
        (Op::Get, Outcome::Written) => Outcome::Hit,
        (_, o) => o,
    };
    Ok((op, outcome))
}

fn progress_bar(len: u64, show: bool, template: &str) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        pb.set_style(style);
    }
    pb
}

/// SET every key once, keys split evenly over the connections.
async fn load(plan: &Arc<Plan>, show: bool) -> Result<()> {
    let pb = progress_bar(plan.keys, show, "load {bar:40} {pos}/{len} keys {per_sec}");
    let done = Arc::new(AtomicU64::new(0));
    let conns = (plan.connections as u64).min(plan.keys);
    let per = plan.keys.div_ceil(conns);
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..conns {
        let (plan, done) = (plan.clone(), done.clone());
        tasks.spawn(async move {
            let mut conn = Conn::new(&plan).await?;
            let mut stats = Stats::new()?;
            let (lo, hi) = (c * per, ((c + 1) * per).min(plan.keys));
            let step = plan.pipeline.max(64) as u64;
            let mut k = lo;
            while k < hi {
                let end = (k + step).min(hi);
                let deadline = Instant::now() + REPLY_GRACE;
                conn.batch((k..end).map(|i| (Op::Set, i)), &mut stats, deadline)
                    .await?;
                done.fetch_add(end - k, Ordering::Relaxed);
                k = end;
            }
            if stats.errors > 0 {
                bail!("{} SETs failed while loading", stats.errors);
            }
            anyhow::Ok(())
        });
    }
    let ticker = {
        let (pb, done) = (pb.clone(), done.clone());
        tokio::spawn(async move {
            loop {
                pb.set_position(done.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let mut result = Ok(());
    while let Some(r) = tasks.join_next().await {
        if let Err(e) = r.map_err(anyhow::Error::from).and_then(|x| x) {
            result = Err(e);
        }
    }
    ticker.abort();
    pb.finish_and_clear();
    result
}

/// The measured phase.
async fn measure(plan: &Arc<Plan>, show: bool) -> Result<Stats> {
    let started = Instant::now();
    let deadline = started + plan.duration;
    let done = Arc::new(AtomicU64::new(0));
    let pb = progress_bar(
        plan.duration.as_millis() as u64,
        show,
        "{bar:40} {elapsed} {msg}",
    );
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..plan.connections {
        let (plan, done) = (plan.clone(), done.clone());
        tasks.spawn(async move {
            let mut conn = Conn::new(&plan).await?;
            let mut stats = Stats::new()?;
            let mut rng = Rng::for_stream(plan.seed, c as u64);
            let total = plan.set_weight + plan.get_weight;
            // Bounded by the deadline (checked before every batch).
            while Instant::now() < deadline {
                let reqs = (0..plan.pipeline).map(|_| {
                    let op = if rng.below(total) < plan.set_weight {
                        Op::Set
                    } else {
                        Op::Get
                    };
                    (op, plan.chooser.next(&mut rng))
                });
                conn.batch(reqs, &mut stats, deadline + REPLY_GRACE).await?;
                done.fetch_add(plan.pipeline as u64, Ordering::Relaxed);
            }
            anyhow::Ok(stats)
        });
    }
    let ticker = {
        let (pb, done) = (pb.clone(), done.clone());
        tokio::spawn(async move {
            let mut last = (Instant::now(), 0u64);
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let now = Instant::now();
                let n = done.load(Ordering::Relaxed);
                let rate = (n - last.1) as f64 / (now - last.0).as_secs_f64().max(1e-9);
                last = (now, n);
                pb.set_position((now - started).as_millis() as u64);
                pb.set_message(format!("{rate:.0} ops/s"));
            }
        })
    };
    let mut total = Stats::new()?;
    let mut first_err = None;
    while let Some(r) = tasks.join_next().await {
        match r.map_err(anyhow::Error::from).and_then(|x| x) {
            Ok(s) => total.merge(&s)?,
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    ticker.abort();
    pb.finish_and_clear();
    if let Some(e) = first_err {
        return Err(e);
    }
    total.elapsed = started.elapsed();
    Ok(total)
}
