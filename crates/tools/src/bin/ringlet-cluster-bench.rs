//! `ringlet-cluster-bench`: closed-loop GET latency through `ringlet-client`'s
//! `ClusterClient` (coordinator or quorum reads), or against a Redis server with the same
//! loop, for the CliqueMap Fig. 11 comparison (`bench/fig11.py` drives it).
//!
//! `--concurrency` tasks each issue one GET at a time (uniform random key of the chosen key
//! set) for `--duration` seconds after `--warmup`; every GET's latency goes into an HDR
//! histogram (1 µs .. 60 s, 3 digits). The last stdout line is JSON with `--json`.
//!
//! Key sets (cluster only), relative to `--slow-node` (the map address of the slowed node):
//! `all`; `slow-coord`: keys that node coordinates; `slow-replica`: keys whose first R cohort
//! members include it as a non-coordinator.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use ringlet_bench::keys::Rng;
use ringlet_bench::wire::{parse_reply, Op, Outcome, Protocol};
use ringlet_client::{ClusterClient, ClusterConfig, ReadMode};
use ringlet_types::key_slot;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Target {
    /// The smart Rust client over the native protocol.
    Cluster,
    /// Redis at `--addr`, raw RESP.
    Redis,
    /// A Ringlet cluster through the same raw-RESP loop as `redis`, each GET sent to its
    /// key's coordinator (slots from CLUSTER SLOTS at `--addr`): the server side alone,
    /// with the client code identical to the Redis run.
    ClusterResp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum MeasuredOp {
    Get,
    Set,
    /// `SET` and `WAIT 1 0` in one write, timed until both replies are in: a Redis write
    /// acknowledged by a second copy (one replica), the like-for-like baseline of a rep:3
    /// SET (acknowledged by a majority: two copies). A `WAIT` answering 0 counts as an error.
    SetWait,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Coordinator,
    Quorum,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum KeySet {
    All,
    SlowCoord,
    SlowReplica,
}

#[derive(Parser)]
#[command(
    name = "ringlet-cluster-bench",
    about = "GET latency through the cluster client or against Redis"
)]
struct Cli {
    #[arg(long, value_enum, default_value_t = Target::Cluster)]
    target: Target,
    /// Cluster seeds (comma-separated host:port), or the Redis address.
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: String,
    #[arg(long, value_enum, default_value_t = Mode::Coordinator)]
    read_mode: Mode,
    /// Dial TO wherever the map says FROM (FROM=TO; repeatable): a delay proxy in front of a node.
    #[arg(long = "override")]
    overrides: Vec<String>,
    /// Map address of the slowed node (for --keyset).
    #[arg(long)]
    slow_node: Option<SocketAddr>,
    #[arg(long, value_enum, default_value_t = KeySet::All)]
    keyset: KeySet,
    /// Distinct keys (`fig11:%08d`).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Write every key first.
    #[arg(long)]
    load: bool,
    /// The measured requests of the raw-RESP loops (`redis`, `cluster-resp`): GETs, or SETs of
    /// `--value-size` bytes (a cluster SET is acknowledged after its memgest's commit rule),
    /// or SET + `WAIT 1 0` (Redis with a replica).
    #[arg(long, value_enum, default_value_t = MeasuredOp::Get)]
    op: MeasuredOp,
    /// Concurrent closed-loop tasks.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Client runtime worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Connections per node (cluster client pool).
    #[arg(long, default_value_t = 2)]
    connections: usize,
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    json: bool,
}

fn key(i: u64) -> Vec<u8> {
    format!("fig11:{i:08}").into_bytes()
}

struct Run {
    hist: Histogram<u64>,
    gets: u64,
    misses: u64,
    errors: u64,
}

fn new_hist() -> Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000, 3).context("histogram")
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if cli.concurrency == 0 || cli.concurrency > 4096 {
        bail!("--concurrency must be 1..=4096");
    }
    if cli.keys == 0 || cli.keys > 100_000_000 {
        bail!("--keys must be 1..=1e8");
    }
    if !(cli.duration > 0.0 && cli.duration <= 3600.0 && (0.0..=600.0).contains(&cli.warmup)) {
        bail!("--duration must be in (0, 3600] and --warmup in [0, 600]");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads.clamp(1, 64))
        .enable_all()
        .build()?;
    rt.block_on(async {
        match cli.target {
            Target::Cluster => cluster(&cli).await,
            Target::Redis => redis(&cli, None).await,
            Target::ClusterResp => {
                let slots = cluster_slots(&cli.addr).await?;
                redis(&cli, Some(std::sync::Arc::new(slots))).await
            }
        }
    })
}

fn report(cli: &Cli, label: &str, runs: Vec<Run>, elapsed: Duration, extra: &str) -> Result<()> {
    let mut hist = new_hist()?;
    let (mut gets, mut misses, mut errors) = (0, 0, 0);
    for r in runs {
        hist.add(&r.hist).map_err(|e| anyhow!("{e:?}"))?;
        gets += r.gets;
        misses += r.misses;
        errors += r.errors;
    }
    let q = |p: f64| hist.value_at_quantile(p);
    let ops = gets as f64 / elapsed.as_secs_f64();
    println!(
        "{label}: {gets} GETs in {:.1}s = {ops:.0}/s  p50 {} us  p99 {} us  p99.9 {} us  max {} us  misses {misses}  errors {errors}",
        elapsed.as_secs_f64(),
        q(0.5),
        q(0.99),
        q(0.999),
        hist.max()
    );
    if cli.json {
        println!(
            "{{\"label\":\"{label}\",\"gets\":{gets},\"ops_per_s\":{ops:.1},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"misses\":{misses},\"errors\":{errors}{extra}}}",
            q(0.5),
            q(0.99),
            q(0.999),
            hist.max()
        );
    }
    Ok(())
}

async fn cluster(cli: &Cli) -> Result<()> {
    let mut addr_override = HashMap::new();
    for o in &cli.overrides {
        let (a, b) = o
            .split_once('=')
            .ok_or_else(|| anyhow!("--override FROM=TO"))?;
        addr_override.insert(a.parse::<SocketAddr>()?, b.parse::<SocketAddr>()?);
    }
    let mut cfg = ClusterConfig {
        read_mode: match cli.read_mode {
            Mode::Coordinator => ReadMode::Coordinator,
            Mode::Quorum => ReadMode::Quorum,
        },
        addr_override,
        ..ClusterConfig::default()
    };
    cfg.client.connections = cli.connections;
    cfg.client.timeout = Duration::from_secs(10);
    cfg.client.seed = Some(cli.seed);
    let seeds: Vec<&str> = cli.addr.split(',').collect();
    let client = ClusterClient::connect(&seeds, cfg)
        .await
        .map_err(|e| anyhow!("connect: {e}"))?;
    if cli.load {
        let value = vec![b'v'; cli.value_size];
        let ids: Vec<u64> = (0..cli.keys).collect();
        for chunk in ids.chunks(512) {
            let pairs: Vec<(Vec<u8>, &[u8])> =
                chunk.iter().map(|&i| (key(i), value.as_slice())).collect();
            for r in client.mset(&pairs).await {
                r.map_err(|e| anyhow!("load: {e}"))?;
            }
        }
    }
    // The key set, from the map.
    let map = client.map();
    let slow_id = cli.slow_node.and_then(|a| {
        map.nodes
            .iter()
            .find(|(_, n)| n.addr.split('@').next() == Some(a.to_string().as_str()))
            .map(|(id, _)| *id)
    });
    if cli.keyset != KeySet::All && slow_id.is_none() {
        bail!("--keyset needs --slow-node naming a node of the map");
    }
    let depth = map.replica_depth();
    let ids: Vec<u64> = (0..cli.keys)
        .filter(|&i| {
            let cohort: Vec<_> = map
                .cohort(key_slot(&key(i)))
                .into_iter()
                .take(depth)
                .collect();
            match cli.keyset {
                KeySet::All => true,
                KeySet::SlowCoord => cohort.first().copied() == slow_id,
                KeySet::SlowReplica => {
                    cohort.first().copied() != slow_id
                        && slow_id.is_some_and(|s| cohort.contains(&s))
                }
            }
        })
        .collect();
    if ids.is_empty() {
        bail!("the key set is empty");
    }
    let ids = Arc::new(ids);
    let warm_end = Instant::now() + Duration::from_secs_f64(cli.warmup);
    let end = warm_end + Duration::from_secs_f64(cli.duration);
    let mut tasks = Vec::new();
    for t in 0..cli.concurrency {
        let client = client.clone();
        let ids = ids.clone();
        let (seed, stream) = (cli.seed, t as u64);
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::for_stream(seed, stream);
            let mut run = Run {
                hist: new_hist()?,
                gets: 0,
                misses: 0,
                errors: 0,
            };
            loop {
                let i = ids[rng.below(ids.len() as u64) as usize];
                let k = key(i);
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let r = client.get(&k).await;
                let lat = t0.elapsed();
                if t0 < warm_end {
                    continue;
                }
                run.gets += 1;
                match r {
                    Ok(v) if v.value.is_some() => {}
                    Ok(_) => run.misses += 1,
                    Err(_) => run.errors += 1,
                }
                run.hist
                    .saturating_record((lat.as_micros() as u64).clamp(1, 60_000_000));
            }
            anyhow::Ok(run)
        }));
    }
    let mut runs = Vec::new();
    for t in tasks {
        runs.push(t.await??);
    }
    let s = client.stats();
    let label = format!(
        "cluster {:?} reads, keyset {:?} ({} keys)",
        cli.read_mode,
        cli.keyset,
        ids.len()
    );
    report(
        cli,
        &label,
        runs,
        Duration::from_secs_f64(cli.duration),
        &format!(
            ",\"quorum_decided\":{},\"quorum_fallbacks\":{},\"map_refreshes\":{},\"moved\":{}",
            s.quorum_decided, s.quorum_fallbacks, s.map_refreshes, s.moved
        ),
    )
}

/// One RESP request/reply on `s` (the reply's bytes are taken out of `buf`; any bytes after
/// it stay).
async fn resp_call(s: &mut TcpStream, req: &[u8], op: Op, buf: &mut Vec<u8>) -> Result<Outcome> {
    s.write_all(req).await?;
    buf.clear();
    let mut chunk = [0u8; 16 * 1024];
    // Bounded: a reply is at most one value plus framing.
    loop {
        if let Some((outcome, used, _)) = parse_reply(Protocol::Resp, op, buf)? {
            // What follows (a pipelined request's reply) stays for the caller.
            buf.drain(..used);
            return Ok(outcome);
        }
        if buf.len() > ringlet_types::limits::RESP_BULK_BYTES_MAX as usize + 64 {
            bail!("reply too large");
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The reply to the `WAIT 1 0` that followed a SET ([`resp_call`] consumed the SET's reply
/// and left what came after it in `buf`): whether at least one replica acknowledged.
async fn wait_acked(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<bool> {
    let mut chunk = [0u8; 1024];
    loop {
        if let Some((reply, _)) = ringlet_codec::resp::decode_reply(buf)? {
            return Ok(matches!(reply, ringlet_codec::resp::Reply::Integer(n) if n >= 1));
        }
        if buf.len() > 1024 {
            bail!("WAIT reply too large");
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The coordinator's address of every slot, from CLUSTER SLOTS at `seed`.
async fn cluster_slots(seed: &str) -> Result<Vec<String>> {
    use ringlet_codec::resp::Reply;
    let mut s = TcpStream::connect(seed).await?;
    let mut req = Vec::new();
    ringlet_codec::resp::encode_request(&mut req, &[b"CLUSTER", b"SLOTS"]);
    s.write_all(&req).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let reply = loop {
        if let Some((r, _)) = ringlet_codec::resp::decode_reply(&buf)? {
            break r;
        }
        if buf.len() > 16 << 20 {
            bail!("CLUSTER SLOTS reply too large");
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let mut slots = vec![String::new(); 16384];
    let Reply::Array(ranges) = reply else {
        bail!("CLUSTER SLOTS: {reply:?}")
    };
    for r in ranges {
        let Reply::Array(r) = r else { continue };
        let (Some(Reply::Integer(a)), Some(Reply::Integer(b)), Some(Reply::Array(node))) =
            (r.first(), r.get(1), r.get(2))
        else {
            continue;
        };
        let (Some(Reply::Bulk(ip)), Some(Reply::Integer(port))) = (node.first(), node.get(1))
        else {
            continue;
        };
        let addr = format!("{}:{port}", String::from_utf8_lossy(ip));
        for slot in (*a).max(0)..=(*b).min(16383) {
            slots[slot as usize] = addr.clone();
        }
    }
    if slots.iter().any(String::is_empty) {
        bail!("CLUSTER SLOTS does not cover every slot");
    }
    Ok(slots)
}

/// One connection per address, opened on first use.
struct Conns(std::collections::HashMap<String, TcpStream>);

impl Conns {
    async fn get(&mut self, addr: &str) -> Result<&mut TcpStream> {
        if !self.0.contains_key(addr) {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            self.0.insert(addr.to_owned(), s);
        }
        self.0.get_mut(addr).context("connection")
    }
}

/// The raw-RESP closed loop, against Redis (`slots` = None: everything to `--addr`) or a
/// cluster's coordinators (`slots[key_slot(k)]`).
async fn redis(cli: &Cli, slots: Option<std::sync::Arc<Vec<String>>>) -> Result<()> {
    let addr = cli.addr.clone();
    let route = move |slots: &Option<std::sync::Arc<Vec<String>>>, k: &[u8]| -> String {
        match slots {
            Some(s) => s[usize::from(ringlet_types::key_slot(k))].clone(),
            None => addr.clone(),
        }
    };
    if cli.load {
        let mut conns = Conns(Default::default());
        let value = vec![b'v'; cli.value_size];
        let mut buf = Vec::new();
        for i in 0..cli.keys {
            let k = key(i);
            let mut req = Vec::new();
            ringlet_codec::resp::encode_request(&mut req, &[b"SET", &k, &value]);
            let s = conns.get(&route(&slots, &k)).await?;
            resp_call(s, &req, Op::Set, &mut buf).await?;
        }
    }
    let warm_end = Instant::now() + Duration::from_secs_f64(cli.warmup);
    let end = warm_end + Duration::from_secs_f64(cli.duration);
    let mut tasks = Vec::new();
    for t in 0..cli.concurrency {
        let route = route.clone();
        let slots = slots.clone();
        let keys = cli.keys;
        let (op_kind, value_size) = (cli.op, cli.value_size);
        let (seed, stream) = (cli.seed, t as u64);
        tasks.push(tokio::spawn(async move {
            let mut conns = Conns(Default::default());
            let mut rng = Rng::for_stream(seed, stream);
            let mut buf = Vec::with_capacity(4096);
            let mut req = Vec::with_capacity(64);
            let mut run = Run {
                hist: new_hist()?,
                gets: 0,
                misses: 0,
                errors: 0,
            };
            let value = vec![b'w'; value_size];
            loop {
                let k = key(rng.below(keys));
                req.clear();
                let op = match op_kind {
                    MeasuredOp::Set | MeasuredOp::SetWait => {
                        ringlet_codec::resp::encode_request(&mut req, &[b"SET", &k, &value]);
                        if op_kind == MeasuredOp::SetWait {
                            ringlet_codec::resp::encode_request(&mut req, &[b"WAIT", b"1", b"0"]);
                        }
                        Op::Set
                    }
                    MeasuredOp::Get => {
                        ringlet_codec::resp::encode_request(&mut req, &[b"GET", &k]);
                        Op::Get
                    }
                };
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let a = route(&slots, &k);
                let s = conns.get(&a).await?;
                let mut r = resp_call(s, &req, op, &mut buf).await?;
                if op_kind == MeasuredOp::SetWait && !wait_acked(s, &mut buf).await? {
                    r = Outcome::Error;
                }
                let lat = t0.elapsed();
                if t0 < warm_end {
                    continue;
                }
                run.gets += 1;
                match r {
                    Outcome::Hit | Outcome::Written => {}
                    Outcome::Miss => run.misses += 1,
                    _ => run.errors += 1,
                }
                run.hist
                    .saturating_record((lat.as_micros() as u64).clamp(1, 60_000_000));
            }
            anyhow::Ok(run)
        }));
    }
    let mut runs = Vec::new();
    for t in tasks {
        runs.push(t.await??);
    }
    report(
        cli,
        match (slots.is_some(), cli.op) {
            (true, MeasuredOp::Get) => "cluster-resp GET",
            (true, MeasuredOp::Set) => "cluster-resp SET",
            (true, MeasuredOp::SetWait) => "cluster-resp SET+WAIT",
            (false, MeasuredOp::SetWait) => "redis SET+WAIT 1 0",
            (false, MeasuredOp::Get) => "redis GET",
            (false, MeasuredOp::Set) => "redis SET",
        },
        runs,
        Duration::from_secs_f64(cli.duration),
        "",
    )
}
