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
