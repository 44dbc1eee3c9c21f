//! Closed-loop load generator for `linked_service` (driven by `bench/linked_mode.py`).
//!
//! `--conns K` threads, each with one keep-alive HTTP/1.1 connection to the router, send
//! `view` (GET /view/<user>) or, with probability `--act-pct`, `act` (POST /act/<user>/<item>)
//! back to back. Users are drawn Zipf(`--zipf`, 0 = uniform) over `--users` ids with a seeded
//! xorshift per thread. Phases:
//!
//! 1. preload: one `view` of every user, so that every object exists in the cache or the
//!    Linklet before anything is measured (a miss loads from the "system of record");
//! 2. warm-up for `--warmup-s` (not recorded);
//! 3. measure for `--duration-s`. With `--rate R` (requests/s over all connections) each
//!    connection sends on a fixed schedule (every `conns / R` s) and a request's latency runs
//!    from its scheduled send time, so a stall is not hidden by the closed loop waiting
//!    (coordinated omission); without it, requests go back to back. Recorded: latency of every request completed in the window (from
//!    before its write to after its whole response is read), and, at both ends of the window,
//!    the CPU ticks (utime + stime, `/proc/<pid>/stat`) of every `--pids` process, the
//!    router's forwarded bytes (`GET /__stats`) and, with `--cache-addr`, the cache's
//!    `total_net_input_bytes + total_net_output_bytes` (`INFO stats`; Redis and Ringlet both
//!    keep them), and, with `--extra-stats A,B`, the `bytes` of each `GET /__stats` at those
//!    addresses added to the router's (linked members' replication traffic).
//!
//! Prints one JSON object on stdout; the script turns ticks and bytes into per-request
//! figures.

use std::io::{self, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "linked_common/http.rs"]
mod http;

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

struct Args {
    router: String,
    conns: usize,
    users: u64,
    zipf: f64,
    act_pct: u64,
    warmup_s: f64,
    duration_s: f64,
    pids: Vec<u32>,
    cache_addr: Option<String>,
    seed: u64,
    /// Requests per second over all connections; 0: back to back.
    rate: f64,
    /// More `/__stats` endpoints whose `bytes` count as forwarded bytes.
    extra_stats: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        router: "127.0.0.1:8080".to_owned(),
        conns: 8,
        users: 10_000,
        zipf: 0.99,
        act_pct: 20,
        warmup_s: 2.0,
        duration_s: 10.0,
        pids: Vec::new(),
        cache_addr: None,
        seed: 1,
        rate: 0.0,
        extra_stats: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |_| format!("bad value for {flag}: {v}");
        match flag.as_str() {
            "--router" => a.router = v.clone(),
            "--conns" => a.conns = v.parse().map_err(bad)?,
            "--users" => a.users = v.parse().map_err(bad)?,
            "--zipf" => a.zipf = v.parse().map_err(|_| format!("bad --zipf {v}"))?,
            "--act-pct" => a.act_pct = v.parse().map_err(bad)?,
            "--warmup-s" => a.warmup_s = v.parse().map_err(|_| format!("bad --warmup-s {v}"))?,
            "--duration-s" => {
                a.duration_s = v.parse().map_err(|_| format!("bad --duration-s {v}"))?
            }
            "--pids" => {
                a.pids = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|p| p.parse().map_err(|_| format!("bad pid {p}")))
                    .collect::<Result<_, _>>()?
            }
            "--cache-addr" => a.cache_addr = Some(v.clone()),
            "--seed" => a.seed = v.parse().map_err(bad)?,
            "--rate" => a.rate = v.parse().map_err(|_| format!("bad --rate {v}"))?,
            "--extra-stats" => {
                a.extra_stats = v
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            f => return Err(format!("unknown flag {f}")),
        }
    }
    if a.conns == 0 || a.users == 0 || a.act_pct > 100 {
        return Err("need --conns > 0, --users > 0, --act-pct <= 100".to_owned());
    }
    Ok(a)
}

/// xorshift64*: cheap, seeded, good enough to pick users.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Rank → cumulative probability; user = rank (ids hash to slots, so hot users spread).
fn zipf_cdf(users: u64, s: f64) -> Vec<f64> {
    let mut acc = 0.0;
    let mut cdf: Vec<f64> = (1..=users)
        .map(|r| {
            acc += 1.0 / (r as f64).powf(s);
            acc
        })
        .collect();
    for c in &mut cdf {
        *c /= acc;
    }
    cdf
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    req: Vec<u8>,
    resp: Vec<u8>,
}

impl Conn {
    fn open(addr: &str) -> io::Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
            req: Vec::new(),
            resp: Vec::new(),
        })
    }

    /// One request; returns the response status.
    fn call(&mut self, method: &str, path: &str) -> io::Result<u16> {
        self.req.clear();
        write!(
            self.req,
            "{method} {path} HTTP/1.1\r\nHost: ringlet\r\nContent-Length: 0\r\n\r\n"
        )?;
        self.writer.write_all(&self.req)?;
        if !http::read_message(&mut self.reader, &mut self.resp)? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        http::response_status(&self.resp).ok_or(io::Error::other("bad status line"))
    }
}

/// A paced request sent this long after its scheduled time was held up by the one before it
/// on its connection: the offered rate was not being kept up with.
const LATE: Duration = Duration::from_millis(1);

#[derive(Default)]
struct Tally {
    /// From the scheduled send time (paced) or the send (back to back) to the whole response.
    latencies_ns: Vec<u64>,
    /// From the send to the whole response.
    service_ns: Vec<u64>,
    /// Paced requests sent more than `LATE` after their scheduled time.
    late: u64,
    errors: u64,
}

fn worker(args: Arc<Args>, cdf: Arc<Vec<f64>>, phase: Arc<AtomicU8>, id: u64) -> io::Result<Tally> {
    let mut conn = Conn::open(&args.router)?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (args.seed.wrapping_mul(1000) + id + 1));
    let mut tally = Tally::default();
    let mut path = String::new();
    let interval =
        (args.rate > 0.0).then(|| Duration::from_secs_f64(args.conns as f64 / args.rate));
    // Stagger the connections' schedules over one interval.
    let mut next = Instant::now() + interval.map_or(Duration::ZERO, |i| i.mul_f64(rng.unit()));
    // The event loop of this thread: ends when the main thread sets STOP.
    loop {
        let p = phase.load(Ordering::Relaxed);
        if p == STOP {
            return Ok(tally);
        }
        let user = if args.zipf > 0.0 {
            let u = rng.unit();
            cdf.partition_point(|&c| c < u).min(cdf.len() - 1) as u64
        } else {
            rng.next() % args.users
        };
        path.clear();
        let act = rng.next() % 100 < args.act_pct;
        let method = if act {
            use std::fmt::Write as _;
            let _ = write!(path, "/act/{user}/{}", rng.next() % 1_000_000);
            "POST"
        } else {
            use std::fmt::Write as _;
            let _ = write!(path, "/view/{user}");
            "GET"
        };
        let scheduled = match interval {
            Some(i) => {
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
                let at = next;
                next += i;
                Some(at)
            }
            None => None,
        };
        let sent = Instant::now();
        let status = conn.call(method, &path)?;
        let done = Instant::now();
        if phase.load(Ordering::Relaxed) == MEASURE {
            if status == 200 {
                let from = scheduled.unwrap_or(sent);
                tally.latencies_ns.push((done - from).as_nanos() as u64);
                tally.service_ns.push((done - sent).as_nanos() as u64);
                if sent - from > LATE {
                    tally.late += 1;
                }
            } else {
                tally.errors += 1;
            }
        }
    }
}

/// CPU ticks, router bytes and requests, cache bytes at one instant.
struct Snapshot {
    ticks: Vec<u64>,
    router_bytes: u64,
    router_requests: u64,
    cache_bytes: Option<u64>,
}

fn cpu_ticks(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces): state is 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    match (get(11), get(12)) {
        (Some(u), Some(s)) => Ok(u + s),
        _ => Err(io::Error::other(format!("bad /proc/{pid}/stat"))),
    }
}

fn cache_bytes(con: &mut redis::Connection) -> io::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(con)
        .map_err(io::Error::other)?;
    let field = |name: &str| {
        info.lines().find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(':')?
                .trim()
                .parse::<u64>()
                .ok()
        })
    };
    match (
        field("total_net_input_bytes"),
        field("total_net_output_bytes"),
    ) {
        (Some(i), Some(o)) => Ok(i + o),
        _ => Err(io::Error::other("INFO stats lacks total_net_*_bytes")),
    }
}

fn stats_json(stats: &mut Conn) -> io::Result<serde_json::Value> {
    stats.call("GET", "/__stats")?;
    let body_at = stats
        .resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |i| i + 4);
    serde_json::from_slice(&stats.resp[body_at..]).map_err(io::Error::other)
}

fn snapshot(
    args: &Args,
    stats: &mut Conn,
    extra: &mut [Conn],
    cache: &mut Option<redis::Connection>,
) -> io::Result<Snapshot> {
    let ticks = args
        .pids
        .iter()
        .map(|&p| cpu_ticks(p))
        .collect::<io::Result<_>>()?;
    let v = stats_json(stats)?;
    let mut extra_bytes = 0;
    for c in extra {
        extra_bytes += stats_json(c)?["bytes"].as_u64().unwrap_or(0);
    }
    let cache_bytes = match cache {
        Some(con) => Some(cache_bytes(con)?),
        None => None,
    };
    Ok(Snapshot {
        ticks,
        router_bytes: v["bytes"].as_u64().unwrap_or(0) + extra_bytes,
        router_requests: v["requests"].as_u64().unwrap_or(0),
        cache_bytes,
    })
}

fn preload(args: &Args) -> io::Result<()> {
    let per = args.users.div_ceil(args.conns as u64);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.conns as u64)
            .map(|t| {
                s.spawn(move || -> io::Result<()> {
                    let mut conn = Conn::open(&args.router)?;
                    for user in (t * per)..((t + 1) * per).min(args.users) {
                        if conn.call("GET", &format!("/view/{user}"))? != 200 {
                            return Err(io::Error::other(format!("preload of user {user} failed")));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().map_err(|_| io::Error::other("preload panicked"))?)
    })
}

fn percentile_us(sorted_ns: &[u64], q: f64) -> f64 {
    if sorted_ns.is_empty() {
        return 0.0;
    }
    let i = ((sorted_ns.len() as f64 * q).ceil() as usize).clamp(1, sorted_ns.len()) - 1;
    sorted_ns[i] as f64 / 1000.0
}

fn main() -> io::Result<()> {
    let args = Arc::new(parse_args().map_err(io::Error::other)?);
    let t = Instant::now();
    preload(&args)?;
    let preload_s = t.elapsed().as_secs_f64();

    let cdf = Arc::new(if args.zipf > 0.0 {
        zipf_cdf(args.users, args.zipf)
    } else {
        Vec::new()
    });
    let phase = Arc::new(AtomicU8::new(WARMUP));
    let workers: Vec<_> = (0..args.conns as u64)
        .map(|id| {
            let (a, c, p) = (Arc::clone(&args), Arc::clone(&cdf), Arc::clone(&phase));
            std::thread::spawn(move || worker(a, c, p, id))
        })
        .collect();

    let mut stats = Conn::open(&args.router)?;
    let mut cache = match &args.cache_addr {
        Some(addr) => Some(
            redis::Client::open(format!("redis://{addr}/"))
                .and_then(|c| c.get_connection())
                .map_err(io::Error::other)?,
        ),
        None => None,
    };
    std::thread::sleep(Duration::from_secs_f64(args.warmup_s));
    let mut extra = args
        .extra_stats
        .iter()
        .map(|a| Conn::open(a))
        .collect::<io::Result<Vec<_>>>()?;
    let before = snapshot(&args, &mut stats, &mut extra, &mut cache)?;
    let t0 = Instant::now();
    phase.store(MEASURE, Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs_f64(args.duration_s));
    phase.store(STOP, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    let after = snapshot(&args, &mut stats, &mut extra, &mut cache)?;

    let (mut all, mut service) = (Vec::new(), Vec::new());
    let (mut errors, mut late) = (0, 0);
    for w in workers {
        let tally = w
            .join()
            .map_err(|_| io::Error::other("worker panicked"))??;
        all.extend_from_slice(&tally.latencies_ns);
        service.extend_from_slice(&tally.service_ns);
        errors += tally.errors;
        late += tally.late;
    }
    all.sort_unstable();
    service.sort_unstable();
    let ticks: Vec<String> = args
        .pids
        .iter()
        .zip(before.ticks.iter().zip(&after.ticks))
        .map(|(p, (b, a))| format!("\"{p}\":{}", a - b))
        .collect();
    let cache = match (before.cache_bytes, after.cache_bytes) {
        (Some(b), Some(a)) => (a - b).to_string(),
        _ => "null".to_owned(),
    };
    println!(
        "{{\"requests\":{},\"errors\":{},\"secs\":{:.3},\"rps\":{:.1},\"p50_us\":{:.1},\"p99_us\":{:.1},\"p999_us\":{:.1},\"service_p50_us\":{:.1},\"service_p99_us\":{:.1},\"late\":{},\"cpu_ticks\":{{{}}},\"router_bytes\":{},\"router_requests\":{},\"cache_bytes\":{},\"preload_s\":{:.2}}}",
        all.len(),
        errors,
        secs,
        all.len() as f64 / secs,
        percentile_us(&all, 0.50),
        percentile_us(&all, 0.99),
        percentile_us(&all, 0.999),
        percentile_us(&service, 0.50),
        percentile_us(&service, 0.99),
        late,
        ticks.join(","),
        after.router_bytes - before.router_bytes,
        after.router_requests - before.router_requests,
        cache,
        preload_s
    );
    Ok(())
}
