//! One example service built two ways, for `bench/linked_mode.py` (issue 14 item 8; LInK §2,
//! §3.1 and Table 1): per-user objects (a profile and a bounded recent-activity list, 2–7 KB
//! as JSON) behind two requests over HTTP/1.1 keep-alive:
//!
//! - `GET /view/<user>`: read the object, answer a small summary;
//! - `POST /act/<user>/<item>`: read-modify-write: append an activity, bump counters.
//!
//! ```text
//!                   S+RInK (stateless)                     LInK (linked)
//!  load ──► router ──rr──► app 0 ──GET/SET──► cache    load ──► router ──slot──► app 0 [Linklet]
//!                   └────► app 1 ──GET/SET──┘                           └─────► app 1 [Linklet]
//! ```
//!
//! Modes (one binary so that both variants share every line but the state access):
//!
//! ```text
//! linked_service --mode stateless --port 0 --cache redis|ringlet --cache-addr 127.0.0.1:6379
//! linked_service --mode linked    --port 0 --index 0 --of 2
//! linked_service --mode router    --port 0 --backends 127.0.0.1:A,127.0.0.1:B --policy rr|slot
//! ```
//!
//! Each process prints `listening <addr>` on stdout once it accepts connections.
//!
//! - *stateless*: every request GETs the serialized object from the remote cache (Redis 7 or
//!   Ringlet, both over RESP with the `redis` crate), deserializes it, computes, and for `act`
//!   serializes it and SETs it back (last writer wins, as a plain S+RInK app does). A miss loads
//!   the object from the "system of record" (generated from the user id) and SETs it.
//! - *linked*: the objects live in a `Linklet<String, UserObj>` in this process, which owns
//!   the slots `s` with `s * of / 16384 == index`; `view` reads in place (`Linklet::read`),
//!   `act` updates in place (`Linklet::update`); a miss loads from the system of record.
//! - *router*: forwards each request verbatim to a backend: `slot` sends a user to the app
//!   that owns its key's slot (LInK's router), `rr` round-robins (a stateless tier). It counts
//!   the bytes it forwards and answers `GET /__stats` (not counted) with them.
//!
//! Threads: one per connection, blocking I/O, in every mode — the same model for both
//! variants, so neither pays for a runtime the other does not. No database writes in either
//! variant (the paper's experiment compares the caching tiers).

use std::collections::VecDeque;
use std::io::{self, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ringlet_linklet::{Config, Linklet};
use ringlet_types::{key_slot, Slot, SLOT_COUNT};
use serde::{Deserialize, Serialize};

#[path = "linked_common/http.rs"]
pub(crate) mod http;

/// Most activities kept per user: with ~130 B per activity as JSON, a full list makes the
/// object about 7 KB, the top of the 2–8 KB range the benchmark asks for.
const RECENT_MAX: usize = 48;

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Address {
    street: String,
    city: String,
    postcode: String,
    country: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
struct Activity {
    item: u64,
    title: String,
    category: String,
    price_cents: u32,
    qty: u16,
    at_ms: u64,
}

/// The per-user object: what a shop front keeps per signed-in user.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct UserObj {
    id: u64,
    name: String,
    email: String,
    address: Address,
    tier: String,
    created_at_ms: u64,
    interests: Vec<String>,
    views: u64,
    acts: u64,
    spent_cents: u64,
    recent: VecDeque<Activity>,
}

const FIRST: [&str; 8] = [
    "Ada", "Grace", "Linus", "Barbara", "Ken", "Radia", "Edsger", "Frances",
];
const LAST: [&str; 8] = [
    "Lovelace", "Hopper", "Torvalds", "Liskov", "Thompson", "Perlman", "Dijkstra", "Allen",
];
const CITY: [&str; 6] = ["Bertinoro", "Lisbon", "Oslo", "Kyoto", "Austin", "Nairobi"];
const CATEGORY: [&str; 8] = [
    "kitchen", "garden", "books", "toys", "audio", "outdoor", "office", "games",
];
const ADJ: [&str; 8] = [
    "stainless",
    "foldable",
    "wireless",
    "handmade",
    "organic",
    "compact",
    "vintage",
    "rugged",
];
const NOUN: [&str; 8] = [
    "water bottle",
    "camp chair",
    "headphones",
    "notebook",
    "tea set",
    "lantern",
    "desk lamp",
    "board game",
];

/// SplitMix64: the deterministic "system of record" draws its fields from the user id.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn pick<'a>(table: &[&'a str], h: u64) -> &'a str {
    table[(h % table.len() as u64) as usize]
}

fn activity(item: u64, at_ms: u64) -> Activity {
    let h = mix(item);
    Activity {
        item,
        title: format!(
            "{} {} — model {:04}, {} edition",
            pick(&ADJ, h),
            pick(&NOUN, h >> 8),
            h % 10_000,
            pick(&CITY, h >> 16)
        ),
        category: pick(&CATEGORY, h >> 24).to_owned(),
        price_cents: 199 + (h >> 32) as u32 % 20_000,
        qty: 1 + (h >> 48) as u16 % 3,
        at_ms,
    }
}

/// Load user `id` from the system of record (generated: deterministic, no I/O).
pub(crate) fn load(id: u64) -> UserObj {
    let h = mix(id);
    let first = pick(&FIRST, h);
    let last = pick(&LAST, h >> 4);
    let n = 12 + (h % 8) as usize;
    let recent = (0..n as u64)
        .map(|i| {
            activity(
                mix(id ^ (i << 40)) % 1_000_000,
                1_700_000_000_000 + i * 60_000,
            )
        })
        .collect();
    UserObj {
        id,
        name: format!("{first} {last}"),
        email: format!(
            "{}.{}{}@example.com",
            first.to_lowercase(),
            last.to_lowercase(),
            id
        ),
        address: Address {
            street: format!("{} Via Frangipane", 1 + h % 200),
            city: pick(&CITY, h >> 12).to_owned(),
            postcode: format!("{:05}", h % 100_000),
            country: "IT".to_owned(),
        },
        tier: pick(&["free", "plus", "pro"], h >> 20).to_owned(),
        created_at_ms: 1_600_000_000_000 + h % 100_000_000_000,
        interests: (0..4)
            .map(|i| pick(&CATEGORY, h >> (i * 3)).to_owned())
            .collect(),
        views: 0,
        acts: 0,
        spent_cents: 0,
        recent,
    }
}

/// Heap + inline bytes of a user object, for the Linklet's byte bound.
pub(crate) fn size_bytes(u: &UserObj) -> usize {
    let strings = u.name.len()
        + u.email.len()
        + u.address.street.len()
        + u.address.city.len()
        + u.address.postcode.len()
        + u.address.country.len()
        + u.tier.len()
        + u.interests.iter().map(|s| s.len() + 24).sum::<usize>();
    let recent: usize = u
        .recent
        .iter()
        .map(|a| std::mem::size_of::<Activity>() + a.title.len() + a.category.len())
        .sum();
    std::mem::size_of::<UserObj>() + strings + recent
}

/// `view`: the summary a page header shows.
pub(crate) fn summary(u: &UserObj) -> String {
    let mut by_cat = [0u32; CATEGORY.len()];
    let mut recent_cents = 0u64;
    for a in &u.recent {
        recent_cents += u64::from(a.price_cents) * u64::from(a.qty);
        if let Some(i) = CATEGORY.iter().position(|c| *c == a.category) {
            by_cat[i] += 1;
        }
    }
    let top = (0..CATEGORY.len()).max_by_key(|&i| by_cat[i]).unwrap_or(0);
    format!(
        "{{\"user\":{},\"name\":\"{}\",\"tier\":\"{}\",\"acts\":{},\"spent_cents\":{},\"recent\":{},\"recent_cents\":{},\"top_category\":\"{}\",\"last_item\":{}}}",
        u.id,
        u.name,
        u.tier,
        u.acts,
        u.spent_cents,
        u.recent.len(),
        recent_cents,
        CATEGORY[top],
        u.recent.back().map_or(0, |a| a.item)
    )
}

/// `act`: append an activity, keep the list bounded, bump the counters.
pub(crate) fn apply(u: &mut UserObj, item: u64, now_ms: u64) -> String {
    let a = activity(item, now_ms);
    u.acts += 1;
    u.spent_cents += u64::from(a.price_cents) * u64::from(a.qty);
    u.recent.push_back(a);
    while u.recent.len() > RECENT_MAX {
        u.recent.pop_front();
    }
    summary(u)
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A parsed request.
pub(crate) enum Op {
    View(u64),
    Act(u64, u64),
}

pub(crate) fn parse_op(msg: &[u8]) -> Option<Op> {
    let mut seg = http::request_path(msg)?.trim_start_matches('/').split('/');
    match (seg.next()?, seg.next(), seg.next()) {
        ("view", Some(u), None) => Some(Op::View(u.parse().ok()?)),
        ("act", Some(u), Some(i)) => Some(Op::Act(u.parse().ok()?, i.parse().ok()?)),
        _ => None,
    }
}

pub(crate) fn user_key(id: u64) -> String {
    format!("u:{id}")
}

/// What an app server does with one request; `Err` is answered with a 5xx.
trait Handler: Send + 'static {
    fn handle(&mut self, op: Op) -> Result<String, String>;
}

/// S+RInK: the object lives serialized in a remote cache.
struct Stateless {
    con: redis::Connection,
}

impl Stateless {
    /// GET and deserialize, or load from the system of record and SET.
    fn fetch(&mut self, id: u64, key: &str) -> Result<UserObj, String> {
        let raw: Option<Vec<u8>> = redis::cmd("GET")
            .arg(key)
            .query(&mut self.con)
            .map_err(|e| e.to_string())?;
        match raw {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
            None => {
                let u = load(id);
                self.store(key, &u)?;
                Ok(u)
            }
        }
    }

    fn store(&mut self, key: &str, u: &UserObj) -> Result<(), String> {
        let bytes = serde_json::to_vec(u).map_err(|e| e.to_string())?;
        redis::cmd("SET")
            .arg(key)
            .arg(bytes)
            .query::<()>(&mut self.con)
            .map_err(|e| e.to_string())
    }
}

impl Handler for Stateless {
    fn handle(&mut self, op: Op) -> Result<String, String> {
        match op {
            Op::View(id) => Ok(summary(&self.fetch(id, &user_key(id))?)),
            Op::Act(id, item) => {
                let key = user_key(id);
                let mut u = self.fetch(id, &key)?;
                let out = apply(&mut u, item, now_ms());
                self.store(&key, &u)?;
                Ok(out)
            }
        }
    }
}

/// LInK: the objects live in this process.
struct Linked {
    map: Arc<Linklet<String, UserObj>>,
}

impl Handler for Linked {
    fn handle(&mut self, op: Op) -> Result<String, String> {
        let (id, item) = match op {
            Op::View(id) => (id, None),
            Op::Act(id, item) => (id, Some(item)),
        };
        let key = user_key(id);
        // Two trips at most: a miss loads the object and the second trip finds it (an
        // eviction in between would need the map to be full twice over; then we give up).
        for _ in 0..2 {
            let found = match item {
                None => self.map.read(&key, summary),
                Some(item) => self.map.update(&key, |u| apply(u, item, now_ms())),
            }
            .map_err(|e| e.to_string())?;
            if let Some(out) = found {
                return Ok(out);
            }
            self.map
                .insert_if_absent(key.clone(), load(id), 0)
                .map_err(|e| e.to_string())?;
        }
        Err("object evicted as soon as loaded".to_owned())
    }
}

fn serve_app<H: Handler>(stream: TcpStream, mut handler: H) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let (mut req, mut resp) = (Vec::new(), Vec::new());
    while http::read_message(&mut reader, &mut req)? {
        resp.clear();
        match parse_op(&req) {
            Some(op) => match handler.handle(op) {
                Ok(body) => http::write_response(&mut resp, "200 OK", body.as_bytes()),
                Err(e) => http::write_response(&mut resp, "503 Service Unavailable", e.as_bytes()),
            },
            None => http::write_response(&mut resp, "404 Not Found", b"{}"),
        }
        writer.write_all(&resp)?;
    }
    Ok(())
}

/// The slots app `index` of `of` owns: `s * of / SLOT_COUNT == index` (the router's rule).
fn owned_slots(index: usize, of: usize) -> Option<std::ops::RangeInclusive<Slot>> {
    let owner = |s: Slot| usize::from(s) * of / usize::from(SLOT_COUNT);
    let lo = (0..SLOT_COUNT).find(|&s| owner(s) == index)?;
    let hi = (0..SLOT_COUNT).rev().find(|&s| owner(s) == index)?;
    Some(lo..=hi)
}

#[derive(Default)]
struct RouterStats {
    requests: AtomicU64,
    /// Bytes of requests and responses forwarded. The router forwards verbatim, so this is
    /// both the load↔router hop and the router↔app hop (each counted by the caller once).
    bytes: AtomicU64,
}

#[derive(Clone, Copy, PartialEq)]
enum Policy {
    Slot,
    RoundRobin,
}

fn serve_router(
    stream: TcpStream,
    backends: Arc<Vec<String>>,
    policy: Policy,
    rr: Arc<AtomicU64>,
    stats: Arc<RouterStats>,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let mut links: Vec<Option<(BufReader<TcpStream>, TcpStream)>> =
        backends.iter().map(|_| None).collect();
    let (mut req, mut resp) = (Vec::new(), Vec::new());
    while http::read_message(&mut reader, &mut req)? {
        let path = http::request_path(&req).unwrap_or("");
        if path == "/__stats" {
            let body = format!(
                "{{\"requests\":{},\"bytes\":{}}}",
                stats.requests.load(Ordering::Relaxed),
                stats.bytes.load(Ordering::Relaxed)
            );
            resp.clear();
            http::write_response(&mut resp, "200 OK", body.as_bytes());
            writer.write_all(&resp)?;
            continue;
        }
        let idx = match policy {
            Policy::RoundRobin => {
                (rr.fetch_add(1, Ordering::Relaxed) % backends.len() as u64) as usize
            }
            Policy::Slot => {
                let user = path.trim_start_matches('/').split('/').nth(1).unwrap_or("");
                let slot = key_slot(format!("u:{user}").as_bytes());
                usize::from(slot) * backends.len() / usize::from(SLOT_COUNT)
            }
        };
        if links[idx].is_none() {
            let s = TcpStream::connect(&backends[idx])?;
            s.set_nodelay(true)?;
            links[idx] = Some((BufReader::new(s.try_clone()?), s));
        }
        let Some((back_r, back_w)) = links[idx].as_mut() else {
            unreachable!("connected above");
        };
        back_w.write_all(&req)?;
        if !http::read_message(back_r, &mut resp)? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        writer.write_all(&resp)?;
        stats.requests.fetch_add(1, Ordering::Relaxed);
        stats
            .bytes
            .fetch_add((req.len() + resp.len()) as u64, Ordering::Relaxed);
    }
    Ok(())
}

struct Args {
    mode: String,
    port: u16,
    cache: String,
    cache_addr: String,
    index: usize,
    of: usize,
    backends: Vec<String>,
    policy: Policy,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        mode: String::new(),
        port: 0,
        cache: "redis".to_owned(),
        cache_addr: "127.0.0.1:6379".to_owned(),
        index: 0,
        of: 1,
        backends: Vec::new(),
        policy: Policy::RoundRobin,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--mode" => a.mode = val()?,
            "--port" => a.port = val()?.parse().map_err(|_| "bad --port")?,
            "--cache" => a.cache = val()?,
            "--cache-addr" => a.cache_addr = val()?,
            "--index" => a.index = val()?.parse().map_err(|_| "bad --index")?,
            "--of" => a.of = val()?.parse().map_err(|_| "bad --of")?,
            "--backends" => a.backends = val()?.split(',').map(str::to_owned).collect(),
            "--policy" => {
                a.policy = match val()?.as_str() {
                    "slot" => Policy::Slot,
                    "rr" => Policy::RoundRobin,
                    p => return Err(format!("unknown --policy {p}")),
                }
            }
            f => return Err(format!("unknown flag {f}")),
        }
    }
    if !matches!(a.cache.as_str(), "redis" | "ringlet") {
        return Err(format!("--cache must be redis or ringlet, not {}", a.cache));
    }
    if a.of == 0 || a.index >= a.of {
        return Err("need --index < --of".to_owned());
    }
    Ok(a)
}

fn main() -> io::Result<()> {
    let args = parse_args().map_err(io::Error::other)?;
    let listener = TcpListener::bind(("127.0.0.1", args.port))?;
    println!("listening {}", listener.local_addr()?);
    io::stdout().flush()?;
    match args.mode.as_str() {
        "stateless" => {
            // Ringlet speaks Redis's protocol: the same client serves both caches.
            let client = redis::Client::open(format!("redis://{}/", args.cache_addr))
                .map_err(io::Error::other)?;
            accept(listener, move || {
                let con = client.get_connection().map_err(io::Error::other)?;
                Ok(Stateless { con })
            })
        }
        "linked" => {
            let slots = owned_slots(args.index, args.of).ok_or(io::Error::other("no slots"))?;
            let map = Linklet::new(Config {
                slots_owned: vec![slots],
                ..Config::default()
            })
            .map_err(io::Error::other)?
            .with_sizer(size_bytes);
            let map = Arc::new(map);
            accept(listener, move || {
                Ok(Linked {
                    map: Arc::clone(&map),
                })
            })
        }
        "router" => {
            if args.backends.is_empty() {
                return Err(io::Error::other("router needs --backends"));
            }
            let backends = Arc::new(args.backends);
            let rr = Arc::new(AtomicU64::new(0));
            let stats = Arc::new(RouterStats::default());
            for stream in listener.incoming() {
                let stream = stream?;
                let (b, r, s) = (Arc::clone(&backends), Arc::clone(&rr), Arc::clone(&stats));
                let policy = args.policy;
                std::thread::spawn(move || serve_router(stream, b, policy, r, s));
            }
            Ok(())
        }
        m => Err(io::Error::other(format!(
            "--mode must be stateless, linked or router, not {m:?}"
        ))),
    }
}

/// Accept forever, one thread per connection, each with its own handler.
fn accept<H: Handler>(listener: TcpListener, make: impl Fn() -> io::Result<H>) -> io::Result<()> {
    for stream in listener.incoming() {
        let stream = stream?;
        let handler = make()?;
        std::thread::spawn(move || serve_app(stream, handler));
    }
    Ok(())
}
