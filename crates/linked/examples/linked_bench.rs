//! The LInK benchmark's example service (`crates/linklet/examples/linked_service.rs`: per-user
//! objects, `view` and `act`) run as a *linked service*: members that join a coordinator and
//! get their slot units from the auto-sharder, and an HTTP front that routes with
//! [`ringlet_linked::Router`]. The `linked+router` variant of `bench/linked_mode.py`.
//!
//! ```text
//! linked_bench member --coordinator ADDR [--threads N] [--stats-port P]
//!                                           # prints `member ID ADDR` (then `stats ADDR`)
//! linked_bench front  --coordinator ADDR --port 0 [--async]      # prints `listening ADDR`
//! ```
//!
//! The front reads the load generator's HTTP/1.1 requests on one thread per connection, sends
//! `v <user>` or `a <user> <item>` to the owner of `u:<user>` through a
//! [`ringlet_linked::BlockingRouter`] of that thread, and answers with the member's summary:
//! per request one `recv` and one `send` on each hop, like the static router of the other
//! variants. `--async` runs the earlier front instead (one tokio task per connection on a
//! one-thread runtime, the async [`Router`]): every hop then adds an `epoll_wait` and runtime
//! wake-ups (measured: BENCHMARKS.md, linked mode). Earlier still, blocking threads that
//! `block_on` each async call handed every request between two threads (~2x the CPU). `GET /__stats` gives
//! `{"requests", "bytes", "units": [units per member], "epoch"}`; `bytes` counts both hops:
//! the HTTP bytes load↔front and the frame bytes front↔member (request and response frames of
//! the successful attempt; retries not counted); `backups_ready` counts units whose backup is
//! seeded (services with replicas). A member given `--stats-port` answers `GET /__stats` there
//! with `{"bytes"}`: its replication bytes (frames to its backups and their acks).

// The shared service code has parts only its own `main` uses.
#[allow(dead_code)]
#[path = "../../linklet/examples/linked_service.rs"]
mod svc;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ringlet_linked::{HandleError, Member, MemberConfig, Router};
use ringlet_linklet::{Config, Linklet};
use svc::http;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn handle(
    l: &Linklet<String, svc::UserObj>,
    key: String,
    body: &[u8],
) -> Result<Vec<u8>, HandleError> {
    let text = std::str::from_utf8(body).map_err(|_| HandleError::App("utf-8".into()))?;
    let mut w = text.split(' ');
    let (op, id, item) = (w.next(), w.next(), w.next());
    let id: u64 = id
        .and_then(|x| x.parse().ok())
        .ok_or_else(|| HandleError::App("bad user".into()))?;
    let item: Option<u64> = match (op, item) {
        (Some("v"), None) => None,
        (Some("a"), Some(i)) => Some(i.parse().map_err(|_| HandleError::App("bad item".into()))?),
        _ => return Err(HandleError::App("bad op".into())),
    };
    // As the benchmark's linked app: two trips at most (a miss loads the object).
    for _ in 0..2 {
        let found = match item {
            None => l.read(&key, svc::summary)?,
            Some(item) => l.update(&key, |u| svc::apply(u, item, svc::now_ms()))?,
        };
        if let Some(out) = found {
            return Ok(out.into_bytes());
        }
        l.insert_if_absent(key.clone(), svc::load(id), 0)?;
    }
    Err(HandleError::App("object evicted as soon as loaded".into()))
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let coordinator = arg("--coordinator").expect("--coordinator ADDR");
    // One thread per process (`--threads N` for more): at a paced load every request would
    // otherwise wake a second worker of a multi-thread runtime on each hop (work stealing),
    // which costs more CPU than the request itself. The other variants' processes are
    // single-threaded per connection too.
    let threads: usize = arg("--threads").and_then(|t| t.parse().ok()).unwrap_or(1);
    let rt = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
    .expect("runtime");
    match mode.as_str() {
        "member" => rt.block_on(async {
            let l = Linklet::new(Config {
                slots_owned: Vec::new(),
                ..Config::default()
            })
            .expect("config")
            .with_sizer(svc::size_bytes);
            let cfg = MemberConfig {
                coordinator,
                service: "bench".into(),
                listen: "127.0.0.1:0".parse().expect("addr"),
                advertise: None,
            };
            let mut m = Member::start(cfg, Arc::new(l), handle).await.expect("join");
            println!("member {} {}", m.id(), m.addr());
            let m_stats = Arc::new(std::sync::Mutex::new(0u64));
            if let Some(port) = arg("--stats-port") {
                let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
                    .await
                    .expect("bind stats");
                println!("stats {}", listener.local_addr().expect("addr"));
                let cell = Arc::clone(&m_stats);
                tokio::spawn(async move { stats_server(listener, cell).await });
            }
            std::io::stdout().flush().expect("stdout");
            // The member's counter, published for the stats server every 50 ms (the server
            // cannot borrow the member, which `closed()` below holds).
            let cell = Arc::clone(&m_stats);
            let bytes = m.replication_bytes_handle();
            tokio::spawn(async move {
                loop {
                    *cell.lock().expect("stats") = bytes();
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            });
            eprintln!("linked_bench member: {}", m.closed().await);
        }),
        "front" if !std::env::args().any(|a| a == "--async") => {
            // The router's map watch runs on the runtime, on a thread of its own; the
            // connections are served by blocking threads.
            let router = rt
                .block_on(Router::connect(&coordinator, "bench"))
                .expect("router");
            std::thread::spawn(move || rt.block_on(std::future::pending::<()>()));
            let port = arg("--port").unwrap_or_else(|| "0".into());
            let listener = std::net::TcpListener::bind(format!("127.0.0.1:{port}")).expect("bind");
            println!("listening {}", listener.local_addr().expect("addr"));
            std::io::stdout().flush().expect("stdout");
            let stats = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (router, stats) = (router.blocking(), Arc::clone(&stats));
                std::thread::spawn(move || front_conn_blocking(stream, router, &stats));
            }
        }
        "front" => {
            rt.block_on(async {
                let router = Router::connect(&coordinator, "bench")
                    .await
                    .expect("router");
                let port = arg("--port").unwrap_or_else(|| "0".into());
                let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
                    .await
                    .expect("bind");
                println!("listening {}", listener.local_addr().expect("addr"));
                std::io::stdout().flush().expect("stdout");
                let stats = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let (router, stats) = (router.clone(), Arc::clone(&stats));
                    tokio::spawn(async move { front_conn(stream, &router, &stats).await });
                }
            });
        }
        m => panic!("mode must be member or front, not {m:?}"),
    }
}

fn stats_body(map: &ringlet_linked::wire::ServiceMap, stats: &(AtomicU64, AtomicU64)) -> String {
    let mut units = std::collections::BTreeMap::<u64, usize>::new();
    for o in map.owners.iter().flatten() {
        *units.entry(o.member).or_default() += 1;
    }
    let ready = map.backups.iter().flatten().filter(|b| b.ready).count();
    format!(
        "{{\"requests\":{},\"bytes\":{},\"units\":{:?},\"epoch\":{},\"backups_ready\":{}}}",
        stats.0.load(Ordering::Relaxed),
        stats.1.load(Ordering::Relaxed),
        units.values().collect::<Vec<_>>(),
        map.epoch,
        ready
    )
}

/// Frame bytes of one routed call: the request frame (len, kind, id, two length-prefixed
/// fields) and the response frame (len, kind, id, tag, one length-prefixed field).
fn frame_bytes(key: &str, body: &str, out: &[u8]) -> usize {
    (4 + 1 + 8 + 4 + key.len() + 4 + body.len()) + (4 + 1 + 8 + 1 + 4 + out.len())
}

/// One front connection on its own thread, with its own blocking router handle.
fn front_conn_blocking(
    stream: std::net::TcpStream,
    mut router: ringlet_linked::BlockingRouter,
    stats: &(AtomicU64, AtomicU64),
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = std::io::BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let (mut req, mut resp) = (Vec::new(), Vec::new());
    while http::read_message(&mut reader, &mut req)? {
        resp.clear();
        if http::request_path(&req) == Some("/__stats") {
            let body = stats_body(&router.map(), stats);
            http::write_response(&mut resp, "200 OK", body.as_bytes());
            writer.write_all(&resp)?;
            continue;
        }
        let (key, body) = match svc::parse_op(&req) {
            Some(svc::Op::View(id)) => (svc::user_key(id), format!("v {id}")),
            Some(svc::Op::Act(id, item)) => (svc::user_key(id), format!("a {id} {item}")),
            None => {
                http::write_response(&mut resp, "404 Not Found", b"{}");
                writer.write_all(&resp)?;
                continue;
            }
        };
        let out = router.call(key.as_bytes(), body.as_bytes());
        let fb = match &out {
            Ok(b) => frame_bytes(&key, &body, b),
            Err(_) => 0,
        };
        match out {
            Ok(b) => http::write_response(&mut resp, "200 OK", &b),
            Err(e) => http::write_response(
                &mut resp,
                "503 Service Unavailable",
                e.to_string().as_bytes(),
            ),
        }
        writer.write_all(&resp)?;
        stats.0.fetch_add(1, Ordering::Relaxed);
        stats
            .1
            .fetch_add((req.len() + resp.len() + fb) as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// `GET /__stats` → `{"bytes": replication bytes}` on every request of every connection.
async fn stats_server(listener: tokio::net::TcpListener, cell: Arc<std::sync::Mutex<u64>>) {
    use tokio::io::AsyncWriteExt;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let cell = Arc::clone(&cell);
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut reader = tokio::io::BufReader::new(r);
            let (mut req, mut resp) = (Vec::new(), Vec::new());
            while let Ok(true) = read_message(&mut reader, &mut req).await {
                resp.clear();
                let n = *cell.lock().expect("stats");
                http::write_response(&mut resp, "200 OK", format!("{{\"bytes\":{n}}}").as_bytes());
                if w.write_all(&resp).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// One HTTP/1.1 message (head + `Content-Length` body) into `buf`, with the bounds of the
/// benchmark's blocking reader (`linked_common/http.rs`). `Ok(false)` on a clean close.
async fn read_message<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<bool> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_owned());
    buf.clear();
    let mut body = 0usize;
    // Bounded by HEAD_BYTES_MAX: every line adds at least one byte.
    loop {
        let start = buf.len();
        if r.read_until(b'\n', buf).await? == 0 {
            if start == 0 {
                return Ok(false);
            }
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if buf.len() > http::HEAD_BYTES_MAX {
            return Err(bad("head too large"));
        }
        let line = &buf[start..];
        if line == b"\r\n" {
            break;
        }
        let text = String::from_utf8_lossy(line).to_ascii_lowercase();
        if let Some(v) = text.strip_prefix("content-length:") {
            body = v.trim().parse().map_err(|_| bad("content-length"))?;
        }
    }
    if body > http::BODY_BYTES_MAX {
        return Err(bad("body too large"));
    }
    let at = buf.len();
    buf.resize(at + body, 0);
    r.read_exact(&mut buf[at..]).await?;
    Ok(true)
}

async fn front_conn(
    stream: tokio::net::TcpStream,
    router: &Router,
    stats: &(AtomicU64, AtomicU64),
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    stream.set_nodelay(true)?;
    let (r, mut writer) = stream.into_split();
    let mut reader = tokio::io::BufReader::new(r);
    let (mut req, mut resp) = (Vec::new(), Vec::new());
    while read_message(&mut reader, &mut req).await? {
        resp.clear();
        if http::request_path(&req) == Some("/__stats") {
            let body = stats_body(&router.map(), stats);
            http::write_response(&mut resp, "200 OK", body.as_bytes());
            writer.write_all(&resp).await?;
            continue;
        }
        let (key, body) = match svc::parse_op(&req) {
            Some(svc::Op::View(id)) => (svc::user_key(id), format!("v {id}")),
            Some(svc::Op::Act(id, item)) => (svc::user_key(id), format!("a {id} {item}")),
            None => {
                http::write_response(&mut resp, "404 Not Found", b"{}");
                writer.write_all(&resp).await?;
                continue;
            }
        };
        let out = router.call(key.as_bytes(), body.as_bytes()).await;
        let frame_bytes = match &out {
            Ok(b) => frame_bytes(&key, &body, b),
            Err(_) => 0,
        };
        match out {
            Ok(b) => http::write_response(&mut resp, "200 OK", &b),
            Err(e) => http::write_response(
                &mut resp,
                "503 Service Unavailable",
                e.to_string().as_bytes(),
            ),
        }
        writer.write_all(&resp).await?;
        stats.0.fetch_add(1, Ordering::Relaxed);
        stats.1.fetch_add(
            (req.len() + resp.len() + frame_bytes) as u64,
            Ordering::Relaxed,
        );
    }
    Ok(())
}
