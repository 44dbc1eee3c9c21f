//! Client tests against an IN-TEST server built from `ringlet-codec` — NOT ringlet-server.
//!
//! What this covers: the client's connection handling, pipelining (responses matched by id,
//! deliberately sent out of order), batched MGET, the mapping of statuses to results, retries
//! (BUSY is retried within the budget, INCRBY is not repeated after a broken connection),
//! MOVED redirects to a second server, per-call deadlines, and the blocking wrapper. The fake
//! server keeps a `HashMap` and assigns versions from a counter; it implements just enough
//! semantics to check what the client does with each answer. Tests against the real server
//! live in `real_server.rs`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use ringlet_client::{
    BlockingClient, Client, ClientConfig, DelOutcome, Error, SetOptions, SetOutcome, Status,
};
use ringlet_codec::native::{self, NativeRequest, Opcode, SetCond};
use ringlet_types::{Epoch, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const EPOCH: Epoch = Epoch(42);

#[derive(Default)]
struct State {
    data: HashMap<Vec<u8>, (Vec<u8>, Version)>,
    next_version: u128,
    /// Remaining BUSY answers for keys starting with "busy".
    busy_left: u32,
    /// Where keys starting with "moved" live.
    moved_to: Option<SocketAddr>,
    /// Requests seen, by opcode.
    seen: HashMap<u8, u64>,
    /// Close the connection on the next INCRBY without answering.
    drop_on_incr: bool,
}

struct FakeServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

fn respond(st: &mut State, id: u64, req: &NativeRequest<'_>, out: &mut Vec<u8>) -> bool {
    *st.seen.entry(req.opcode() as u8).or_default() += 1;
    let key = match req {
        NativeRequest::Get { key }
        | NativeRequest::Del { key, .. }
        | NativeRequest::IncrBy { key, .. } => Some(*key),
        NativeRequest::Set(s) => Some(s.key),
        _ => None,
    };
    if let Some(k) = key {
        if k.starts_with(b"busy") && st.busy_left > 0 {
            st.busy_left -= 1;
            native::encode_error_response(out, id, req.opcode(), Status::BUSY, EPOCH, "shed");
            return true;
        }
        if k.starts_with(b"moved") {
            if let Some(to) = st.moved_to {
                let msg = format!("{} {}", ringlet_types::key_slot(k), to);
                native::encode_error_response(out, id, req.opcode(), Status::MOVED, EPOCH, &msg);
                return true;
            }
        }
        if k.starts_with(b"slow") {
            return true; // never answered
        }
    }
    match *req {
        NativeRequest::Ping => {
            native::encode_status_response(out, id, Opcode::Ping, Status::OK, EPOCH, Version::ZERO)
        }
        NativeRequest::Get { key } => match st.data.get(key) {
            Some((v, ver)) => native::encode_get_response(out, id, EPOCH, *ver, Some(v)),
            None => native::encode_get_response(out, id, EPOCH, Version::ZERO, None),
        },
        NativeRequest::Mget { keys } => {
            let mut w = native::MgetResponseWriter::begin(out, id, EPOCH);
            for k in keys.iter() {
                match st.data.get(k) {
                    Some((v, ver)) => w.push(out, Status::OK, *ver, v),
                    None => w.push(out, Status::NOT_FOUND, Version::ZERO, b""),
                }
            }
            assert!(w.finish(out));
        }
        NativeRequest::Set(s) => {
            let cur = st.data.get(s.key).map(|(_, v)| *v);
            let refused = match s.cond {
                SetCond::IfAbsent => cur.is_some(),
                SetCond::IfPresent => cur.is_none(),
                SetCond::Always => false,
            };
            if refused {
                native::encode_status_response(
                    out,
                    id,
                    Opcode::Set,
                    Status::NOT_STORED,
                    EPOCH,
                    cur.unwrap_or_default(),
                );
            } else if s.cas.is_some() && s.cas != Some(cur.unwrap_or_default()) {
                native::encode_status_response(
                    out,
                    id,
                    Opcode::Set,
                    Status::CAS_MISMATCH,
                    EPOCH,
                    cur.unwrap_or_default(),
                );
            } else {
                st.next_version += 1;
                let ver = s.version.unwrap_or(Version(st.next_version));
                st.data.insert(s.key.to_vec(), (s.value.to_vec(), ver));
                native::encode_status_response(out, id, Opcode::Set, Status::OK, EPOCH, ver);
            }
        }
        NativeRequest::Del { key, .. } => {
            st.next_version += 1;
            let status = if st.data.remove(key).is_some() {
                Status::OK
            } else {
                Status::NOT_FOUND
            };
            native::encode_status_response(
                out,
                id,
                Opcode::Del,
                status,
                EPOCH,
                Version(st.next_version),
            );
        }
        NativeRequest::Chase(_) => native::encode_error_response(
            out,
            id,
            Opcode::Chase,
            Status::UNSUPPORTED,
            EPOCH,
            "not in this fake",
        ),
        NativeRequest::Command { .. } => native::encode_error_response(
            out,
            id,
            Opcode::Command,
            Status::UNSUPPORTED,
            EPOCH,
            "not in this fake",
        ),
        NativeRequest::Auth { .. } => native::encode_error_response(
            out,
            id,
            Opcode::Auth,
            Status::UNSUPPORTED,
            EPOCH,
            "not in this fake",
        ),
        NativeRequest::IncrBy { key, delta } => {
            if st.drop_on_incr {
                st.drop_on_incr = false;
                return false;
            }
            st.next_version += 1;
            let ver = Version(st.next_version);
            let cur = st
                .data
                .get(key)
                .map(|(v, _)| String::from_utf8_lossy(v).parse::<i64>());
            match cur {
                Some(Err(_)) => native::encode_error_response(
                    out,
                    id,
                    Opcode::IncrBy,
                    Status::NOT_INTEGER,
                    EPOCH,
                    "value is not an integer",
                ),
                other => {
                    let n = other.map(|r| r.unwrap_or(0)).unwrap_or(0) + delta;
                    st.data
                        .insert(key.to_vec(), (n.to_string().into_bytes(), ver));
                    native::encode_int_response(out, id, EPOCH, ver, n);
                }
            }
        }
    }
    true
}

async fn start_fake(state: Arc<Mutex<State>>) -> FakeServer {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let st = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = l.accept().await else {
                return;
            };
            let st = st.clone();
            tokio::spawn(async move {
                let mut buf = BytesMut::with_capacity(64 * 1024);
                loop {
                    // Answer every complete frame of this read, in REVERSE order, so the
                    // client must match responses by request id.
                    let mut answers: Vec<Vec<u8>> = Vec::new();
                    loop {
                        match native::decode_request_frame(&buf) {
                            Ok(Some((f, n))) => {
                                let mut out = Vec::new();
                                let keep = respond(
                                    &mut st.lock().unwrap(),
                                    f.request_id,
                                    &f.request,
                                    &mut out,
                                );
                                if !keep {
                                    return; // drop the connection
                                }
                                answers.push(out);
                                let _ = buf.split_to(n);
                            }
                            Ok(None) => break,
                            Err(_) => return,
                        }
                    }
                    let all: Vec<u8> = answers.into_iter().rev().flatten().collect();
                    if sock.write_all(&all).await.is_err() {
                        return;
                    }
                    match sock.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            });
        }
    });
    FakeServer { addr, state }
}

fn cfg() -> ClientConfig {
    ClientConfig {
        connections: 1,
        timeout: Duration::from_secs(5),
        seed: Some(1),
        ..ClientConfig::default()
    }
}

#[tokio::test]
async fn get_set_del_incr_with_versions_and_epoch() {
    let s = start_fake(Arc::default()).await;
    let c = Client::connect(&s.addr.to_string(), cfg()).await.unwrap();
    assert_eq!(c.ping().await.unwrap(), EPOCH);
    assert_eq!(c.get(b"k").await.unwrap().value, None);
    let w = c.set(b"k", b"v1", SetOptions::default()).await.unwrap();
    assert_eq!(w.value, SetOutcome::Stored);
    assert_eq!(w.epoch, EPOCH);
    let r = c.get(b"k").await.unwrap();
    assert_eq!(r.value.as_deref(), Some(&b"v1"[..]));
    assert_eq!(r.version, w.version);
    // NX on an existing key; CAS with a stale version; CAS with the right one.
    assert_eq!(
        c.set(b"k", b"x", SetOptions::default().nx())
            .await
            .unwrap()
            .value,
        SetOutcome::NotStored
    );
    assert_eq!(
        c.set(b"k", b"x", SetOptions::default().cas(Version(999)))
            .await
            .unwrap()
            .value,
        SetOutcome::CasMismatch
    );
    assert_eq!(
        c.set(b"k", b"v2", SetOptions::default().cas(w.version))
            .await
            .unwrap()
            .value,
        SetOutcome::Stored
    );
    assert_eq!(c.del(b"k", None).await.unwrap().value, DelOutcome::Deleted);
    assert_eq!(c.del(b"k", None).await.unwrap().value, DelOutcome::NotFound);
    assert_eq!(c.incr_by(b"n", 5).await.unwrap().value, 5);
    assert_eq!(c.incr_by(b"n", -7).await.unwrap().value, -2);
    c.set(b"s", b"abc", SetOptions::default()).await.unwrap();
    match c.incr_by(b"s", 1).await {
        Err(Error::Server { status, .. }) => assert_eq!(status, Status::NOT_INTEGER),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.epoch(), EPOCH);
}

#[tokio::test]
async fn many_in_flight_on_one_connection_match_by_id() {
    let s = start_fake(Arc::default()).await;
    let c = Client::connect(&s.addr.to_string(), cfg()).await.unwrap();
    for i in 0..200u32 {
        c.set(
            format!("k{i}").as_bytes(),
            format!("v{i}").as_bytes(),
            SetOptions::default(),
        )
        .await
        .unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let r = c.get(format!("k{i}").as_bytes()).await.unwrap();
            assert_eq!(r.value.as_deref(), Some(format!("v{i}").as_bytes()));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn mget_is_batched_and_ordered() {
    let s = start_fake(Arc::default()).await;
    let c = Client::connect(
        &s.addr.to_string(),
        ClientConfig {
            mget_batch_keys: 7,
            connections: 3,
            ..cfg()
        },
    )
    .await
    .unwrap();
    for i in (0..50u32).step_by(2) {
        c.set(
            format!("m{i}").as_bytes(),
            format!("{i}").as_bytes(),
            SetOptions::default(),
        )
        .await
        .unwrap();
    }
    let keys: Vec<String> = (0..50).map(|i| format!("m{i}")).collect();
    let r = c.mget(&keys).await.unwrap();
    assert_eq!(r.value.len(), 50);
    for (i, v) in r.value.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(v.value.as_deref(), Some(i.to_string().as_bytes()));
            assert_ne!(v.version, Version::ZERO);
        } else {
            assert_eq!(v.value, None);
        }
    }
    assert_eq!(
        s.state.lock().unwrap().seen[&(Opcode::Mget as u8)],
        8,
        "50 keys in batches of 7"
    );
    assert!(c.mget::<&[u8]>(&[]).await.unwrap().value.is_empty());
}

#[tokio::test]
async fn busy_is_retried_within_budget() {
    let state = Arc::new(Mutex::new(State {
        busy_left: 2,
        ..State::default()
    }));
    let s = start_fake(state.clone()).await;
    let c = Client::connect(&s.addr.to_string(), cfg()).await.unwrap();
    assert_eq!(
        c.get(b"busy1").await.unwrap().value,
        None,
        "2 BUSY then an answer"
    );
    // More BUSY answers than retries allowed: the error surfaces.
    state.lock().unwrap().busy_left = 100;
    let c2 = Client::connect(
        &s.addr.to_string(),
        ClientConfig {
            retries_max: 2,
            ..cfg()
        },
    )
    .await
    .unwrap();
    match c2.get(b"busy2").await {
        Err(Error::Server { status, .. }) => assert_eq!(status, Status::BUSY),
        other => panic!("{other:?}"),
    }
    assert_eq!(state.lock().unwrap().busy_left, 97, "1 try + 2 retries");
}

#[tokio::test]
async fn incr_is_not_repeated_after_a_broken_connection_but_get_is() {
    let state = Arc::new(Mutex::new(State {
        drop_on_incr: true,
        ..State::default()
    }));
    let s = start_fake(state.clone()).await;
    let c = Client::connect(&s.addr.to_string(), cfg()).await.unwrap();
    match c.incr_by(b"n", 1).await {
        Err(
            e @ Error::Connection {
                maybe_executed: true,
                ..
            },
        ) => assert!(!e.is_retryable(false)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        state.lock().unwrap().seen[&(Opcode::IncrBy as u8)],
        1,
        "not retried"
    );
    // The pool reconnects for the next call.
    assert_eq!(c.incr_by(b"n", 1).await.unwrap().value, 1);
}

#[tokio::test]
async fn moved_redirects_to_the_named_node() {
    let target = start_fake(Arc::default()).await;
    let origin_state = Arc::new(Mutex::new(State {
        moved_to: Some(target.addr),
        ..State::default()
    }));
    let origin = start_fake(origin_state.clone()).await;
    let c = Client::connect(&origin.addr.to_string(), cfg())
        .await
        .unwrap();
    assert_eq!(
        c.set(b"moved-key", b"v", SetOptions::default())
            .await
            .unwrap()
            .value,
        SetOutcome::Stored
    );
    assert!(target
        .state
        .lock()
        .unwrap()
        .data
        .contains_key(&b"moved-key"[..]));
    // The route is remembered: the next call goes straight to the target.
    let before = origin_state
        .lock()
        .unwrap()
        .seen
        .get(&(Opcode::Get as u8))
        .copied()
        .unwrap_or(0);
    assert_eq!(
        c.get(b"moved-key").await.unwrap().value.as_deref(),
        Some(&b"v"[..])
    );
    assert_eq!(
        origin_state
            .lock()
            .unwrap()
            .seen
            .get(&(Opcode::Get as u8))
            .copied()
            .unwrap_or(0),
        before
    );
}

#[tokio::test(start_paused = true)]
async fn deadline_bounds_a_call_that_gets_no_answer() {
    let s = start_fake(Arc::default()).await;
    let c = Client::connect(
        &s.addr.to_string(),
        ClientConfig {
            timeout: Duration::from_millis(200),
            ..cfg()
        },
    )
    .await
    .unwrap();
    assert_eq!(c.get(b"slow").await, Err(Error::Timeout));
    // The connection is still usable afterwards (the abandoned waiter was removed).
    assert_eq!(c.get(b"fast").await.unwrap().value, None);
}

#[tokio::test]
async fn limits_are_checked_before_sending() {
    let s = start_fake(Arc::default()).await;
    let c = Client::connect(&s.addr.to_string(), cfg()).await.unwrap();
    let big = vec![0u8; ringlet_types::limits::KEY_BYTES_MAX as usize + 1];
    assert_eq!(c.get(&big).await, Err(Error::KeyTooLarge(big.len())));
    assert!(matches!(
        Client::connect(
            &s.addr.to_string(),
            ClientConfig {
                retries_max: 99,
                ..cfg()
            }
        )
        .await,
        Err(Error::Config(_))
    ));
}

#[test]
fn blocking_client_works_outside_a_runtime() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let s = rt.block_on(start_fake(Arc::default()));
    let c = BlockingClient::connect(&s.addr.to_string(), cfg()).unwrap();
    c.set(b"a", b"1", SetOptions::default()).unwrap();
    assert_eq!(c.get(b"a").unwrap().value.as_deref(), Some(&b"1"[..]));
    assert_eq!(c.incr_by(b"a", 2).unwrap().value, 3);
    assert_eq!(c.mget(&["a", "b"]).unwrap().value.len(), 2);
    assert_eq!(c.ping().unwrap(), EPOCH);
}
