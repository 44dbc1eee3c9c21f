//! The LInK benchmark's example service (`crates/linklet/examples/linked_service.rs`: per-user
//! objects, `view` and `act`) run as a *linked service*: members that join a coordinator and
//! get their slot units from the auto-sharder, and an HTTP front that routes with
//! [`ringlet_linked::Router`]. The `linked+router` variant of `bench/linked_mode.py`.
//!
//! ```text
//! linked_bench member --coordinator ADDR        # prints `member ID ADDR`
//! linked_bench front  --coordinator ADDR --port 0   # prints `listening ADDR`
//! ```
//!
//! The front reads the load generator's HTTP/1.1 requests (thread per connection, blocking, as
//! the benchmark's other router), sends `v <user>` or `a <user> <item>` to the owner of
//! `u:<user>` through the router, and answers with the member's summary. `GET /__stats` gives
//! `{"requests", "bytes", "units": [units per member], "epoch"}`; `bytes` counts both hops:
//! the HTTP bytes load↔front and the frame bytes front↔member (request and response frames of
//! the successful attempt; retries not counted).

// The shared service code has parts only its own `main` uses.
#[allow(dead_code)]
#[path = "../../linklet/examples/linked_service.rs"]
mod svc;

use std::io::{BufReader, Write};
use std::net::TcpListener;
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
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
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
            std::io::stdout().flush().expect("stdout");
            eprintln!("linked_bench member: {}", m.closed().await);
        }),
        "front" => {
            let router = rt
                .block_on(Router::connect(&coordinator, "bench"))
                .expect("router");
            let port = arg("--port").unwrap_or_else(|| "0".into());
            let listener = TcpListener::bind(format!("127.0.0.1:{port}")).expect("bind");
            println!("listening {}", listener.local_addr().expect("addr"));
            std::io::stdout().flush().expect("stdout");
            let stats = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (router, stats, h) = (router.clone(), Arc::clone(&stats), rt.handle().clone());
                std::thread::spawn(move || front_conn(stream, &router, &stats, &h));
            }
        }
        m => panic!("mode must be member or front, not {m:?}"),
    }
}

fn front_conn(
    stream: std::net::TcpStream,
    router: &Router,
    stats: &(AtomicU64, AtomicU64),
    rt: &tokio::runtime::Handle,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let (mut req, mut resp) = (Vec::new(), Vec::new());
    while http::read_message(&mut reader, &mut req)? {
        resp.clear();
        if http::request_path(&req) == Some("/__stats") {
            let map = router.map();
            let mut units = std::collections::BTreeMap::<u64, usize>::new();
            for o in map.owners.iter().flatten() {
                *units.entry(o.member).or_default() += 1;
            }
            let body = format!(
                "{{\"requests\":{},\"bytes\":{},\"units\":{:?},\"epoch\":{}}}",
                stats.0.load(Ordering::Relaxed),
                stats.1.load(Ordering::Relaxed),
                units.values().collect::<Vec<_>>(),
                map.epoch
            );
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
        let out = rt.block_on(router.call(key.as_bytes(), body.as_bytes()));
        let frame_bytes = match &out {
            // Request frame: len, kind, id, two length-prefixed fields; response: len, kind,
            // id, tag, one length-prefixed field.
            Ok(b) => (4 + 1 + 8 + 4 + key.len() + 4 + body.len()) + (4 + 1 + 8 + 1 + 4 + b.len()),
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
        stats.1.fetch_add(
            (req.len() + resp.len() + frame_bytes) as u64,
            Ordering::Relaxed,
        );
    }
    Ok(())
}
