//! The generator against IN-TEST servers built from `ringlet-codec` (RESP and native) — not
//! ringlet-server, not Redis. What this covers: the load phase writes every key, the measured
//! phase classifies every reply (all GETs hit after a load, none before), pipelined and
//! native out-of-order replies are matched, and the JSON report has the promised fields. It
//! asserts counts and consistency only, never speed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use clap::Parser;
use ringlet_bench::{run_kv, BenchArgs};
use ringlet_codec::native::{self, NativeRequest, Opcode, Status};
use ringlet_codec::resp::{self, Request, RequestDecoder};
use ringlet_types::{Epoch, Version};
use std::io::{Read, Write};
use std::net::TcpListener;

type Store = Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>>;

/// A threaded server: RESP GET/SET, or native GET/SET answered in reverse order per read.
fn start(native_proto: bool, store: Store) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for sock in l.incoming() {
            let Ok(mut sock) = sock else { return };
            let store = store.clone();
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = vec![0u8; 64 * 1024];
                let mut dec = RequestDecoder::new();
                let mut req = Request::new();
                loop {
                    let n = match sock.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    let mut out = Vec::new();
                    let mut replies: Vec<Vec<u8>> = Vec::new();
                    loop {
                        if native_proto {
                            let Ok(Some((f, used))) = native::decode_request_frame(&buf) else {
                                break;
                            };
                            let mut o = Vec::new();
                            match f.request {
                                NativeRequest::Get { key } => {
                                    let st = store.lock().unwrap();
                                    native::encode_get_response(
                                        &mut o,
                                        f.request_id,
                                        Epoch(1),
                                        Version(1),
                                        st.get(key).map(Vec::as_slice),
                                    );
                                }
                                NativeRequest::Set(s) => {
                                    store
                                        .lock()
                                        .unwrap()
                                        .insert(s.key.to_vec(), s.value.to_vec());
                                    native::encode_status_response(
                                        &mut o,
                                        f.request_id,
                                        Opcode::Set,
                                        Status::OK,
                                        Epoch(1),
                                        Version(1),
                                    );
                                }
                                _ => return,
                            }
                            replies.push(o);
                            buf.drain(..used);
                        } else {
                            let Ok(Some(used)) = dec.decode(&buf, &mut req) else {
                                break;
                            };
                            let mut st = store.lock().unwrap();
                            if req.arg_eq_ignore_case(&buf, 0, b"GET") {
                                match st.get(req.arg(&buf, 1).unwrap()) {
                                    Some(v) => resp::encode_bulk(&mut out, v),
                                    None => resp::encode_null(&mut out, resp::Proto::Resp2),
                                }
                            } else if req.arg_eq_ignore_case(&buf, 0, b"SET") {
                                st.insert(
                                    req.arg(&buf, 1).unwrap().to_vec(),
                                    req.arg(&buf, 2).unwrap().to_vec(),
                                );
                                resp::encode_simple(&mut out, b"OK");
                            } else {
                                resp::encode_error(&mut out, b"ERR unknown command");
                            }
                            drop(st);
                            buf.drain(..used);
                        }
                    }
                    for r in replies.into_iter().rev() {
                        out.extend_from_slice(&r);
                    }
                    if sock.write_all(&out).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn args(port: u16, extra: &[&str]) -> BenchArgs {
    let port = port.to_string();
    let mut v = vec![
        "bench",
        "--port",
        &port,
        "--keys",
        "500",
        "--connections",
        "4",
        "--duration",
        "0.3",
        "--threads",
        "1",
    ];
    v.extend_from_slice(extra);
    Cli::parse_from(v).args
}

#[test]
fn resp_load_then_all_gets_hit() {
    let store: Store = Arc::default();
    let port = start(false, store.clone());
    let r = run_kv(&args(
        port,
        &["--load", "--ratio", "0:1", "--pipeline", "8"],
    ))
    .unwrap();
    assert_eq!(store.lock().unwrap().len(), 500, "load wrote every key");
    let s = &r.stats;
    assert!(s.gets > 0 && s.sets == 0);
    assert_eq!((s.hits, s.misses, s.errors), (s.gets, 0, 0));
    assert_eq!(s.latency_us.len(), s.gets);
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    for f in [
        "ops_per_sec",
        "gets",
        "sets",
        "hits",
        "misses",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
    ] {
        assert!(json.get(f).is_some(), "missing {f}");
    }
}

#[test]
fn resp_without_load_misses_then_sets() {
    let store: Store = Arc::default();
    let port = start(false, store.clone());
    let r = run_kv(&args(
        port,
        &["--ratio", "1:1", "--distribution", "zipf", "--seed", "9"],
    ))
    .unwrap();
    let s = &r.stats;
    assert!(s.sets > 0 && s.gets > 0);
    assert_eq!(s.hits + s.misses, s.gets);
    assert!(s.misses > 0, "an empty server must miss at first");
    assert_eq!(s.errors, 0);
}

#[test]
fn native_out_of_order_replies_are_matched() {
    let store: Store = Arc::default();
    let port = start(true, store.clone());
    let r = run_kv(&args(
        port,
        &[
            "--protocol",
            "native",
            "--load",
            "--ratio",
            "1:3",
            "--pipeline",
            "16",
        ],
    ))
    .unwrap();
    let s = &r.stats;
    assert!(s.gets > 0 && s.sets > 0);
    assert_eq!((s.hits, s.misses, s.errors), (s.gets, 0, 0));
}

#[test]
fn bad_arguments_are_refused() {
    assert!(run_kv(&args(1, &["--ratio", "0:0"])).is_err());
    assert!(run_kv(&args(1, &["--key-size", "2"])).is_err());
    assert!(run_kv(&args(1, &["--distribution", "zipf", "--zipf-theta", "1.5"])).is_err());
}

/// `run_kv` with `--client-io uring`, or `None` (a loud SKIP) where this kernel or sandbox
/// refuses io_uring; `RINGLET_REQUIRE_URING` makes that a failure.
#[cfg(target_os = "linux")]
fn run_uring(port: u16, extra: &[&str]) -> Option<ringlet_bench::Report> {
    let mut v = vec!["--client-io", "uring"];
    v.extend_from_slice(extra);
    match run_kv(&args(port, &v)) {
        Ok(r) => Some(r),
        Err(e)
            if format!("{e:#}").contains("io_uring_setup")
                && std::env::var_os("RINGLET_REQUIRE_URING").is_none() =>
        {
            eprintln!("SKIP: io_uring is not available here ({e:#})");
            None
        }
        Err(e) => panic!("{e:#}"),
    }
}

/// The io_uring phase keeps the model: every reply matched to its request (in order for
/// RESP, by id for native frames answered out of order), hits where keys were loaded.
#[cfg(target_os = "linux")]
#[test]
fn uring_client_matches_every_reply() {
    let store: Store = Arc::default();
    let port = start(false, store.clone());
    let Some(r) = run_uring(port, &["--load", "--ratio", "1:3", "--pipeline", "8"]) else {
        return;
    };
    let s = &r.stats;
    assert!(s.gets > 0 && s.sets > 0);
    assert_eq!((s.hits, s.misses, s.errors), (s.gets, 0, 0));
    assert_eq!(s.latency_us.len(), s.gets + s.sets);

    let store: Store = Arc::default();
    let port = start(true, store.clone());
    let Some(r) = run_uring(
        port,
        &["--protocol", "native", "--ratio", "1:1", "--pipeline", "16"],
    ) else {
        return;
    };
    let s = &r.stats;
    assert!(s.gets > 0 && s.sets > 0);
    assert_eq!(s.hits + s.misses, s.gets);
    assert_eq!(s.errors, 0);
}

/// `--client-io uring` means nothing to the one-sided mode: refused, not ignored.
#[test]
fn client_io_is_refused_outside_kv() {
    let mut a = args(
        1,
        &["--client-io", "uring", "--socket", "/nonexistent.sock"],
    );
    a.mode = ringlet_bench::Mode::ShmGet;
    let e = ringlet_bench::run(&a).unwrap_err();
    assert!(format!("{e}").contains("--client-io"), "{e}");
}

/// One thread drives every connection: more threads are refused, not ignored.
#[cfg(target_os = "linux")]
#[test]
fn uring_client_refuses_more_threads() {
    let mut a = args(1, &["--client-io", "uring"]);
    a.threads = 2;
    let e = run_kv(&a).unwrap_err();
    assert!(format!("{e}").contains("one thread"), "{e}");
}
