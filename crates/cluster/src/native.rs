//! Native binary front of a node in cluster mode (`docs/protocol.md` §2.5): what the smart
//! Rust client (`ringlet-client`'s `ClusterClient`) speaks.
//!
//! The RESP front (`resp.rs`) hands a connection here when its first byte is the native magic
//! `0xA5`, so one client port serves both protocols.
//!
//! ```text
//!  socket ─▶ reader: decode_cluster_request_frame ─▶ one task per request ──┐
//!                      (≤ IN_FLIGHT_PER_CONN_MAX, a semaphore)              │ encoded frame
//!  socket ◀─ writer: coalesce every ready response into one write ◀─ mpsc ◀─┘
//! ```
//!
//! Requests run concurrently and are answered out of order (the protocol matches responses
//! by request id): a slow write does not hold back the reads pipelined behind it.
//!
//! Served: PING, GET, MGET (per item: a value, NOT_FOUND, or MOVED for keys this node does
//! not coordinate), plain SET (optionally with a memgest and a TTL: a blind write, the expiry
//! made absolute on this coordinator's clock as RESP's SET PX does), plain DEL (NOT_FOUND for a
//! missing key: a read, then a delete conditional on the version read), CLUSTER_MAP,
//! READ_REPLICA (one quorum-read leg) and MEMGEST (the RESP front's handler; MOVE/KEY routed
//! by key), INCRBY (run by the RESP front's INCRBY, under its per-key lock), SET NX/XX (run
//! under the same lock, resp/conditional.rs), CHASE (the RESP front's walk: one client round
//! trip, one `RECORDS` call per other node and level). Versioned SETs (VERSION, CAS) and CAS
//! DELs answer `UNSUPPORTED`: resp/conditional.rs says why the lock is not enough for them.
//!
//! Coordinator operations retry definite refusals (failover, rebuild, back-pressure) for up to
//! [`OP_DEADLINE`] like the RESP front, then answer `TRY_AGAIN`. A quorum-read leg is never
//! retried here: the client decides with the legs that answer, so a leg that cannot answer
//! now (`NotReady`, another epoch) says so at once.

use crate::node::{client_addr, ClusterNode, SubmitError};
use crate::resp::{Front, OP_DEADLINE};
use bytes::BytesMut;
use ringlet_codec::native::{
    self, ClusterRequest, MgetResponseWriter, NativeRequest, Opcode, ReplicaValue, SetCond, Status,
};
use ringlet_replica::{ClientOp, ClientReply};
use ringlet_types::{key_slot, limits, Epoch, ValueKind, Version};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Semaphore};

/// Requests of one connection running at once; the reader waits for a permit before it
/// starts another (back-pressure on a client that pipelines without bound).
pub const IN_FLIGHT_PER_CONN_MAX: usize = 4096;
/// First retry delay of a coordinator operation; doubles up to [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(2);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(50);
/// Keys of one MGET frame read concurrently (a frame may hold `BATCH_KEYS_MAX` keys; the
/// driver queue holds `DRIVER_QUEUE_MAX` events for everyone).
const MGET_CONCURRENCY_MAX: usize = 1024;
/// Bytes read from the socket per read call.
const READ_CHUNK: usize = 64 * 1024;
/// DEL: conditional deletes tried before an unconditional one (`delete_existing`).
const DEL_CAS_TRIES: usize = 8;

/// Why a request failed: a status ≥ 0x10 and its message.
struct Fail(Status, String);

fn fail(s: Status, m: impl Into<String>) -> Fail {
    Fail(s, m.into())
}

/// An owned request (the frame's borrowed slices do not outlive the read buffer).
enum Req {
    Ping,
    Get(Vec<u8>),
    Mget(Vec<Vec<u8>>),
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        memgest: Option<ringlet_types::MemgestId>,
        /// Relative TTL; the front turns it into an absolute expiry (the coordinator's clock
        /// decides, as for RESP's SET EX).
        ttl_ms: Option<u64>,
    },
    Del(Vec<u8>),
    /// SET NX / XX, run by the RESP front under its per-key lock (resp/conditional.rs).
    SetCond {
        key: Vec<u8>,
        value: Vec<u8>,
        memgest: Option<ringlet_types::MemgestId>,
        ttl_ms: Option<u64>,
        cond: SetCond,
    },
    /// SET with CAS / DEL with CAS: a compare-and-set decided by the coordinator's core
    /// (`ClientOp::SetIf`); `value` `None` is the DEL. `expect` 0 means "absent" (as the
    /// single node reads `cas 0`).
    CasWrite {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        memgest: Option<ringlet_types::MemgestId>,
        ttl_ms: Option<u64>,
        expect: Version,
    },
    /// Run by the RESP front's INCRBY (under its per-key lock).
    IncrBy {
        key: Vec<u8>,
        delta: i64,
    },
    ClusterMap,
    ReadReplica {
        epoch: Epoch,
        key: Vec<u8>,
    },
    /// `MEMGEST args...` (the words after MEMGEST).
    Memgest(Vec<Vec<u8>>),
    /// Decoded fine but not served in cluster mode.
    Unsupported(Opcode, &'static str),
    /// CHASE, run by the RESP front's walk; `Err` is RESP CHASE's error for its arguments.
    Chase(Result<Box<ringlet_record::chase::Chase>, String>),
    /// COMMAND: any command of the RESP front (`Front::command`), as the connection's login
    /// (`session`, set by the connection loop before the request starts).
    Command {
        argv: Vec<Vec<u8>>,
        session: Option<crate::resp::NativeSession>,
    },
}

fn own(r: &ClusterRequest<'_>) -> Req {
    match *r {
        ClusterRequest::Data(NativeRequest::Ping) => Req::Ping,
        ClusterRequest::Data(NativeRequest::Get { key }) => Req::Get(key.to_vec()),
        ClusterRequest::Data(NativeRequest::Mget { keys }) => {
            Req::Mget(keys.iter().map(<[u8]>::to_vec).collect())
        }
        ClusterRequest::Data(NativeRequest::Set(s)) => {
            if s.version.is_some() {
                // The coordinator's core assigns versions (HLC), so a client cannot.
                Req::Unsupported(
                    Opcode::Set,
                    "VERSION is not supported in cluster mode (the coordinator assigns versions; NX/XX and CAS are served)",
                )
            } else if let Some(expect) = s.cas {
                Req::CasWrite {
                    key: s.key.to_vec(),
                    value: Some(s.value.to_vec()),
                    memgest: s.memgest,
                    ttl_ms: s.ttl_ms,
                    expect,
                }
            } else if s.cond != SetCond::Always {
                Req::SetCond {
                    key: s.key.to_vec(),
                    value: s.value.to_vec(),
                    memgest: s.memgest,
                    ttl_ms: s.ttl_ms,
                    cond: s.cond,
                }
            } else {
                Req::Set {
                    key: s.key.to_vec(),
                    value: s.value.to_vec(),
                    memgest: s.memgest,
                    ttl_ms: s.ttl_ms,
                }
            }
        }
        ClusterRequest::Data(NativeRequest::Del { key, cas }) => match cas {
            None => Req::Del(key.to_vec()),
            Some(expect) => Req::CasWrite {
                key: key.to_vec(),
                value: None,
                memgest: None,
                ttl_ms: None,
                expect,
            },
        },
        ClusterRequest::Data(NativeRequest::IncrBy { key, delta }) => Req::IncrBy {
            key: key.to_vec(),
            delta,
        },
        ClusterRequest::ClusterMap => Req::ClusterMap,
        ClusterRequest::ReadReplica { epoch, key } => Req::ReadReplica {
            epoch,
            key: key.to_vec(),
        },
        ClusterRequest::Memgest { args } => Req::Memgest(args.iter().map(<[u8]>::to_vec).collect()),
        ClusterRequest::Data(NativeRequest::Chase(c)) => {
            Req::Chase(ringlet_server::cmd::record::chase_from_frame(&c).map(Box::new))
        }
        ClusterRequest::Data(NativeRequest::Command { args }) => Req::Command {
            argv: args.iter().map(<[u8]>::to_vec).collect(),
            session: None,
        },
        // Answered by `gate` in the connection's loop; never started.
        ClusterRequest::Data(NativeRequest::Auth { .. }) => {
            Req::Unsupported(Opcode::Auth, "AUTH is answered by the connection")
        }
    }
}

/// AUTH, NOAUTH and the ACL check of one request (as a RESP connection's, through the same
/// users): `None` to run it; else the response frame already decided (AUTH's, or a
/// `DENIED` refusal) and whether to close the connection after it (its user was deleted).
fn gate(
    front: &Front,
    login: &mut crate::resp::NativeLogin,
    id: u64,
    r: &ClusterRequest<'_>,
) -> Option<(Vec<u8>, bool)> {
    let epoch = front.node().epoch();
    let mut out = Vec::new();
    if let ClusterRequest::Data(NativeRequest::Auth { user, password }) = *r {
        if front.native_auth(login, user, password) {
            native::encode_status_response(
                &mut out,
                id,
                Opcode::Auth,
                Status::OK,
                epoch,
                Version::ZERO,
            );
        } else {
            let m = ringlet_server::native::WRONGPASS;
            native::encode_error_response(&mut out, id, Opcode::Auth, Status::DENIED, epoch, m);
        }
        return Some((out, false));
    }
    let mut argv: Vec<&[u8]> = Vec::new();
    let opcode = match *r {
        ClusterRequest::Data(ref d) => {
            ringlet_server::native::acl_argv(d, &mut argv);
            d.opcode()
        }
        ClusterRequest::ClusterMap => {
            argv.extend([&b"CLUSTER"[..], b"SLOTS"]);
            Opcode::ClusterMap
        }
        ClusterRequest::ReadReplica { key, .. } => {
            argv.extend([&b"GET"[..], key]);
            Opcode::ReadReplica
        }
        ClusterRequest::Memgest { args } => {
            argv.push(b"MEMGEST");
            argv.extend(args.iter());
            Opcode::Memgest
        }
    };
    match front.native_gate(login, &argv) {
        Ok(()) => None,
        Err((message, close)) => {
            native::encode_error_response(&mut out, id, opcode, Status::DENIED, epoch, &message);
            Some((out, close))
        }
    }
}

/// Serve one native connection (its first byte, not yet consumed, is the magic) until the
/// peer closes it or sends a malformed frame.
///
/// # Errors
/// Socket errors.
pub async fn connection<S>(front: Arc<Front>, stream: S) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut login = front.native_login();
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(IN_FLIGHT_PER_CONN_MAX);
    let writer = tokio::spawn(async move {
        let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
        while let Some(frame) = rx.recv().await {
            out.extend_from_slice(&frame);
            // Coalesce whatever else is ready into the same write.
            while out.len() < limits::CONN_WRITE_BUFFER_BYTES_MAX as usize {
                match rx.try_recv() {
                    Ok(f) => out.extend_from_slice(&f),
                    Err(_) => break,
                }
            }
            // flush: a TLS stream holds records until asked (a no-op on TCP).
            if wr.write_all(&out).await.is_err() || wr.flush().await.is_err() {
                return;
            }
            out.clear();
        }
    });
    let permits = Arc::new(Semaphore::new(IN_FLIGHT_PER_CONN_MAX));
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let result = loop {
        // Users changed through the control plane apply from the next batch on (as on RESP).
        front.sync_users();
        // Start every whole frame in the buffer.
        loop {
            match native::decode_cluster_request_frame(&buf) {
                Ok(Some((f, n))) => {
                    let id = f.request_id;
                    // AUTH and the login/ACL check run here, in arrival order, before the
                    // request is started: a request after an AUTH runs as its user.
                    if let Some((frame, close)) = gate(&front, &mut login, id, &f.request) {
                        let _ = buf.split_to(n);
                        let _ = tx.send(frame).await;
                        if close {
                            drop(tx);
                            let _ = writer.await;
                            return Ok(());
                        }
                        continue;
                    }
                    let mut req = own(&f.request);
                    if let Req::Command { session, .. } = &mut req {
                        // The gate checked it as the login of now; `Front::command` checks it
                        // again as the connection's user when it runs (an AUTH pipelined
                        // after it may have changed that user: both must allow it).
                        *session = Some(front.native_session(&login));
                    }
                    let _ = buf.split_to(n);
                    let Ok(permit) = permits.clone().acquire_owned().await else {
                        return Ok(());
                    };
                    let front = front.clone();
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let frame = handle(&front, id, req).await;
                        let _ = tx.send(frame).await;
                        drop(permit);
                    });
                }
                Ok(None) => break,
                // Malformed: the stream cannot be resynchronised; close (protocol §1).
                Err(_) => {
                    drop(tx);
                    let _ = writer.await;
                    return Ok(());
                }
            }
        }
        if buf.len() > limits::CONN_READ_BUFFER_BYTES_MAX as usize {
            break Ok(());
        }
        // The header's length was checked against FRAME_BYTES_MAX by the codec: reserving
        // up to one frame is bounded.
        let want = native::frame_len(&buf).ok().flatten().unwrap_or(0);
        buf.reserve(want.saturating_sub(buf.len()).max(READ_CHUNK));
        match rd.read_buf(&mut buf).await {
            Ok(0) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    // Let the requests in flight finish and their responses go out.
    drop(tx);
    let _ = writer.await;
    result
}

/// Run one request and encode its response frame.
async fn handle(front: &Front, id: u64, req: Req) -> Vec<u8> {
    let node = front.node();
    let mut out = Vec::new();
    let opcode = match &req {
        Req::Ping => Opcode::Ping,
        Req::Get(_) => Opcode::Get,
        Req::Mget(_) => Opcode::Mget,
        Req::Set { .. } => Opcode::Set,
        Req::Del(_) => Opcode::Del,
        Req::ClusterMap => Opcode::ClusterMap,
        Req::ReadReplica { .. } => Opcode::ReadReplica,
        Req::Memgest(_) => Opcode::Memgest,
        Req::IncrBy { .. } => Opcode::IncrBy,
        Req::SetCond { .. } => Opcode::Set,
        Req::CasWrite { value: Some(_), .. } => Opcode::Set,
        Req::CasWrite { value: None, .. } => Opcode::Del,
        Req::Unsupported(op, _) => *op,
        Req::Chase(_) => Opcode::Chase,
        Req::Command { .. } => Opcode::Command,
    };
    // `Front::command` records a COMMAND's load under the command's own name.
    let counted_here = !matches!(req, Req::Command { .. });
    // Load and latency (crate::load): which slots the request reads or writes.
    let (load_name, load_class, load_slots) = load_of(&req);
    let started = Instant::now();
    let result: Result<(), Fail> = async {
        match req {
            Req::Ping => {
                native::encode_status_response(
                    &mut out,
                    id,
                    Opcode::Ping,
                    Status::OK,
                    node.epoch(),
                    Version::ZERO,
                );
            }
            Req::Get(key) => {
                let (version, value) = match get(node, &key).await? {
                    (_, Some((_, ValueKind::Record))) => {
                        return Err(fail(Status::WRONG_TYPE, WRONGTYPE));
                    }
                    (v, value) => (v, value.map(|(v, _)| v)),
                };
                native::encode_get_response(&mut out, id, node.epoch(), version, value.as_deref());
            }
            Req::Mget(keys) => {
                // At most MGET_CONCURRENCY_MAX reads of one frame in the core at once.
                let mut results = Vec::with_capacity(keys.len());
                for chunk in keys.chunks(MGET_CONCURRENCY_MAX) {
                    results.extend(join_all(chunk.iter().map(|k| get(node, k)).collect()).await);
                }
                let mut w = MgetResponseWriter::begin(&mut out, id, node.epoch());
                for r in results {
                    match r {
                        Ok((v, Some((val, ValueKind::String)))) => {
                            w.push(&mut out, Status::OK, v, &val)
                        }
                        // Redis's MGET answers nil for a key holding another type.
                        Ok((_, Some((_, ValueKind::Record))) | (_, None)) => {
                            w.push(&mut out, Status::NOT_FOUND, Version::ZERO, b"")
                        }
                        Err(Fail(s, m)) => w.push(&mut out, s, Version::ZERO, m.as_bytes()),
                    }
                }
                if !w.finish(&mut out) {
                    return Err(fail(Status::INTERNAL, "MGET response lost bytes"));
                }
            }
            Req::Set {
                key,
                value,
                memgest,
                ttl_ms,
            } => {
                if ttl_ms == Some(0) {
                    return Err(fail(Status::BAD_REQUEST, "ttl_ms must be > 0"));
                }
                let op = ClientOp::Set {
                    key,
                    value,
                    memgest,
                    // Absolute, on this coordinator's wall clock (as RESP's SET PX).
                    expiry_ms: ttl_ms.map(|t| crate::wall_ms().saturating_add(t)),
                    kind: ValueKind::String,
                };
                let version = written(run(node, op).await?)?;
                native::encode_status_response(
                    &mut out,
                    id,
                    Opcode::Set,
                    Status::OK,
                    node.epoch(),
                    version,
                );
            }
            Req::CasWrite {
                key,
                value,
                memgest,
                ttl_ms,
                expect,
            } => {
                if ttl_ms == Some(0) {
                    return Err(fail(Status::BAD_REQUEST, "ttl_ms must be > 0"));
                }
                let op_code = if value.is_some() {
                    Opcode::Set
                } else {
                    Opcode::Del
                };
                let del = value.is_none();
                // DEL with `cas 0` writes nothing (the single node answers NOT_FOUND for a
                // missing key, CAS_MISMATCH otherwise).
                let reply = if del && expect == Version::ZERO {
                    ClientReply::Unchanged
                } else {
                    let op = ClientOp::SetIf {
                        key: key.clone(),
                        value,
                        memgest,
                        expiry_ms: ttl_ms.map(|t| crate::wall_ms().saturating_add(t)),
                        kind: ValueKind::String,
                        expect,
                    };
                    run(node, op).await?
                };
                let (status, version) = match reply {
                    ClientReply::Unchanged => {
                        // The version to retry with, read after the refusal (informational:
                        // a CAS naming it may still lose to a newer write).
                        let (current, value) = get(node, &key).await?;
                        match value {
                            None if del => (Status::NOT_FOUND, Version::ZERO),
                            None => (Status::CAS_MISMATCH, Version::ZERO),
                            Some(_) => (Status::CAS_MISMATCH, current),
                        }
                    }
                    other => (Status::OK, written(other)?),
                };
                native::encode_status_response(
                    &mut out,
                    id,
                    op_code,
                    status,
                    node.epoch(),
                    version,
                );
            }
            Req::Del(key) => {
                let (status, version) = delete_existing(node, key).await?;
                native::encode_status_response(
                    &mut out,
                    id,
                    Opcode::Del,
                    status,
                    node.epoch(),
                    version,
                );
            }
            Req::ClusterMap => {
                let map = node
                    .map()
                    .filter(|m| m.placement.is_some())
                    .ok_or_else(|| fail(Status::TRY_AGAIN, "no bootstrapped cluster map yet"))?;
                // Without the ACL users: their password hashes are for the nodes.
                let json = map
                    .for_client()
                    .to_json()
                    .map_err(|e| fail(Status::INTERNAL, format!("map to JSON: {e}")))?;
                if json.len() > limits::VALUE_BYTES_MAX as usize {
                    return Err(fail(
                        Status::INTERNAL,
                        "cluster map exceeds VALUE_BYTES_MAX",
                    ));
                }
                native::encode_cluster_map_response(&mut out, id, map.epoch, json.as_bytes());
            }
            Req::ReadReplica { epoch, key } => {
                let mine = node.epoch();
                if epoch != mine {
                    return Err(stale(mine));
                }
                let r = node
                    .submit(ClientOp::ReadReplica { key })
                    .await
                    .map_err(submit_fail)?;
                match r.body {
                    ClientReply::Replica {
                        kind: ValueKind::Record,
                        ..
                    } => return Err(fail(Status::WRONG_TYPE, WRONGTYPE)),
                    ClientReply::Replica {
                        version,
                        memgest,
                        value,
                        expiry_ms,
                        kind: ValueKind::String,
                    } => native::encode_read_replica_response(
                        &mut out,
                        id,
                        r.epoch,
                        version,
                        &ReplicaValue {
                            memgest,
                            // An expired value is absent to every reader (its delete follows).
                            value: value.as_deref().filter(|_| !crate::expired(expiry_ms)),
                        },
                    ),
                    ClientReply::StaleEpoch { current } => return Err(stale(current)),
                    ClientReply::NotReady => {
                        return Err(fail(
                            Status::TRY_AGAIN,
                            "not a ready cohort member for this slot now",
                        ))
                    }
                    other => return Err(unexpected(&other)),
                }
            }
            Req::Unsupported(_, why) => return Err(fail(Status::UNSUPPORTED, why)),
            Req::Command { argv, session } => {
                let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                if let Some(why) = ringlet_server::native::command_refusal(&args) {
                    return Err(fail(Status::UNSUPPORTED, why));
                }
                // A keyed command runs on its key's coordinator: MOVED otherwise, before
                // anything runs (as GET/SET frames). Keyless ones run on any node.
                if let Some(key) = ringlet_command::table::command_keys(&args).first() {
                    moved(node, key)?;
                }
                let session =
                    session.ok_or_else(|| fail(Status::INTERNAL, "COMMAND without a login"))?;
                let reply = front.native_command(&session, &argv).await;
                // Routing the command met while it ran (the map moved, a failover outlasted
                // the retries) is the frame's status, so the client re-routes or retries
                // as for every other opcode; other errors are the command's reply.
                if let ringlet_codec::resp::Reply::Error(e) = &reply {
                    if e.starts_with(b"MOVED ")
                        || e.starts_with(b"TRYAGAIN")
                        || e.starts_with(b"CLUSTERDOWN")
                    {
                        return Err(resp_error(reply));
                    }
                }
                let bytes = reply.to_bytes(ringlet_codec::resp::Proto::Resp3);
                if bytes.len() > limits::COMMAND_REPLY_BYTES_MAX as usize {
                    return Err(fail(
                        Status::TOO_LARGE,
                        "the reply exceeds the native reply limit: ask for less (SCAN/HSCAN) or use RESP",
                    ));
                }
                native::encode_command_response(&mut out, id, node.epoch(), &bytes);
            }
            Req::Chase(walk) => {
                let walk = walk.map_err(|e| fail(Status::BAD_REQUEST, e))?;
                // On the root's coordinator (MOVED otherwise, so the client re-routes).
                moved(node, walk.root())?;
                let reply = front.chase_walk(*walk).await.map_err(resp_error)?;
                ringlet_server::cmd::record::encode_chase_native(
                    &mut out,
                    id,
                    node.epoch(),
                    &reply,
                )
                .map_err(|e| fail(Status::TOO_LARGE, e))?;
            }
            Req::SetCond {
                key,
                value,
                memgest,
                ttl_ms,
                cond,
            } => {
                if ttl_ms == Some(0) {
                    return Err(fail(Status::BAD_REQUEST, "ttl_ms must be > 0"));
                }
                moved(node, &key)?;
                // Absolute, on this coordinator's wall clock (as a plain SET's).
                let expiry_ms = ttl_ms.map(|t| crate::wall_ms().saturating_add(t));
                let (status, version) = match front
                    .set_conditional(&key, value, memgest, expiry_ms, cond)
                    .await
                    .map_err(resp_error)?
                {
                    crate::resp::CondOutcome::Stored(v) => (Status::OK, v),
                    // As the single node answers an NX/XX that did not apply.
                    crate::resp::CondOutcome::NotStored => (Status::NOT_STORED, Version::ZERO),
                };
                native::encode_status_response(
                    &mut out,
                    id,
                    Opcode::Set,
                    status,
                    node.epoch(),
                    version,
                );
            }
            Req::IncrBy { key, delta } => {
                moved(node, &key)?;
                match front.incr_by(&key, delta).await {
                    Ok(v) => {
                        native::encode_int_response(&mut out, id, node.epoch(), Version::ZERO, v)
                    }
                    Err(r) => return Err(resp_error(r)),
                }
            }
            Req::Memgest(args) => {
                // MOVE and KEY name a key: they run on its coordinator (MOVE under the RESP
                // front's per-key lock), so route like any keyed request.
                let sub = args.first().map(|s| s.to_ascii_lowercase());
                if matches!(sub.as_deref(), Some(b"move") | Some(b"key")) {
                    if let Some(key) = args.get(1) {
                        moved(node, key)?;
                    }
                }
                let mut argv = Vec::with_capacity(args.len() + 1);
                argv.push(b"MEMGEST".to_vec());
                argv.extend(args);
                let reply = match front.memgest(&argv).await {
                    Ok(r) | Err(r) => r,
                };
                native::encode_memgest_response(
                    &mut out,
                    id,
                    node.epoch(),
                    &reply.to_bytes(ringlet_codec::resp::Proto::Resp3),
                );
            }
        }
        Ok(())
    }
    .await;
    if counted_here {
        front.load().record_slots(
            crate::load::CommandId::Named(load_name),
            load_class,
            &load_slots,
            started.elapsed(),
            match &result {
                Ok(_) => crate::load::Outcome::Ok,
                // A redirect is a refusal before running, as Redis counts MOVED.
                Err(Fail(s, _)) if *s == Status::MOVED || *s == Status::TRY_AGAIN => {
                    crate::load::Outcome::Rejected
                }
                Err(_) => crate::load::Outcome::Failed,
            },
        );
    }
    if let Err(Fail(status, message)) = result {
        out.clear();
        native::encode_error_response(&mut out, id, opcode, status, node.epoch(), &message);
    }
    out
}

/// The command name (as RESP's, so both fronts count together), class and slots a request
/// is counted under in crate::load. A quorum-read leg is a read but not its slot's load
/// (the coordinator of the slot counts the client's read).
fn load_of(req: &Req) -> (&'static str, crate::load::Class, Vec<u16>) {
    use crate::load::Class;
    match req {
        Req::Get(k) => ("get", Class::Read, vec![key_slot(k)]),
        Req::Mget(keys) => (
            "mget",
            Class::Read,
            keys.iter().map(|k| key_slot(k)).collect(),
        ),
        Req::Set { key, .. } | Req::SetCond { key, .. } => {
            ("set", Class::Write, vec![key_slot(key)])
        }
        Req::CasWrite { key, value, .. } => (
            if value.is_some() { "set" } else { "del" },
            Class::Write,
            vec![key_slot(key)],
        ),
        Req::Del(k) => ("del", Class::Write, vec![key_slot(k)]),
        Req::IncrBy { key, .. } => ("incrby", Class::Write, vec![key_slot(key)]),
        Req::ReadReplica { .. } => ("read_replica", Class::Read, Vec::new()),
        Req::Ping => ("ping", Class::Other, Vec::new()),
        Req::ClusterMap => ("cluster_map", Class::Other, Vec::new()),
        Req::Memgest(_) => ("memgest", Class::Other, Vec::new()),
        Req::Unsupported(..) => ("unsupported", Class::Other, Vec::new()),
        // Requests added later count as `other` until given a class here.
        #[allow(unreachable_patterns)]
        _ => ("other", Class::Other, Vec::new()),
    }
}

/// The native status for the RESP front's error reply (INCRBY run through it): the same
/// statuses the single node gives for the same failures, the text kept.
fn resp_error(r: ringlet_codec::resp::Reply) -> Fail {
    let text = match &r {
        ringlet_codec::resp::Reply::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => format!("unexpected reply {other:?}"),
    };
    let status = if text.starts_with("ERR value is not an integer") {
        Status::NOT_INTEGER
    } else if text.contains("would overflow") {
        Status::OVERFLOW
    } else if text.starts_with("WRONGTYPE") {
        Status::WRONG_TYPE
    } else if text.starts_with("OOM") {
        Status::NO_SPACE
    } else if text.starts_with("MOVED") {
        Status::MOVED
    } else if text.starts_with("TRYAGAIN") || text.starts_with("CLUSTERDOWN") {
        Status::TRY_AGAIN
    } else {
        Status::INTERNAL
    };
    // MOVED's text for native frames is "<slot> <addr>" (no code word).
    let text = match status {
        Status::MOVED => text.trim_start_matches("MOVED ").to_string(),
        _ => text,
    };
    fail(status, text)
}

fn stale(current: Epoch) -> Fail {
    fail(
        Status::STALE_EPOCH,
        format!("the node is at epoch {}", current.0),
    )
}

fn submit_fail(e: SubmitError) -> Fail {
    match e {
        SubmitError::Overloaded => fail(Status::BUSY, "node overloaded"),
        SubmitError::Stopped => fail(Status::TRY_AGAIN, "node is stopping"),
    }
}

fn unexpected(r: &ClientReply) -> Fail {
    fail(Status::INTERNAL, format!("unexpected reply {r:?}"))
}

/// DEL as the single node answers it: NOT_FOUND for a key that does not exist (so a caller
/// can count deletions, as RESP's DEL does), else the delete's version. The delete is
/// conditional on the version read, so two concurrent DELs of one key cannot both report
/// it deleted; a delete that keeps losing to concurrent writes (bounded) is made
/// unconditional, the key having existed throughout.
async fn delete_existing(node: &ClusterNode, key: Vec<u8>) -> Result<(Status, Version), Fail> {
    for _ in 0..DEL_CAS_TRIES {
        let (current, value) = get(node, &key).await?;
        if value.is_none() {
            return Ok((Status::NOT_FOUND, Version::ZERO));
        }
        let op = ClientOp::SetIf {
            key: key.clone(),
            value: None,
            memgest: None,
            expiry_ms: None,
            kind: ValueKind::String,
            expect: current,
        };
        match run(node, op).await? {
            ClientReply::Unchanged => continue,
            other => return Ok((Status::OK, written(other)?)),
        }
    }
    let version = written(run(node, ClientOp::Delete { key }).await?)?;
    Ok((Status::OK, version))
}

fn written(r: ClientReply) -> Result<Version, Fail> {
    match r {
        ClientReply::Written { version } => Ok(version),
        other => Err(unexpected(&other)),
    }
}

/// Redis's WRONGTYPE text, sent with [`Status::WRONG_TYPE`] for a string read of a record.
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A coordinator read: `(version, value and its kind)`.
async fn get(
    node: &ClusterNode,
    key: &[u8],
) -> Result<(Version, Option<(Vec<u8>, ValueKind)>), Fail> {
    // The fast path first (ClusterNode::fast_get), as on the RESP front.
    if moved(node, key).is_ok() {
        if let Some(v) = node.fast_get(key) {
            let value = v.value.filter(|_| !crate::expired(v.expiry_ms));
            return Ok((v.version, value.map(|x| (x, v.kind))));
        }
    }
    match run(node, ClientOp::Get { key: key.to_vec() }).await? {
        ClientReply::Value {
            version,
            value,
            expiry_ms,
            kind,
        } => Ok((
            version,
            value
                .filter(|_| !crate::expired(expiry_ms))
                .map(|v| (v, kind)),
        )),
        other => Err(unexpected(&other)),
    }
}

/// `MOVED "<slot> <addr>"` if the current map gives the key's slot to another node.
fn moved(node: &ClusterNode, key: &[u8]) -> Result<(), Fail> {
    let Some(map) = node.map().filter(|m| m.placement.is_some()) else {
        return Err(fail(Status::TRY_AGAIN, "the cluster is not bootstrapped"));
    };
    let slot = key_slot(key);
    match map.coordinator(slot) {
        Some(c) if c != node.id() => {
            let addr = map
                .nodes
                .get(&c)
                .and_then(|n| client_addr(&n.addr))
                .ok_or_else(|| fail(Status::TRY_AGAIN, "coordinator has no address"))?;
            Err(fail(Status::MOVED, format!("{slot} {addr}")))
        }
        Some(_) => Ok(()),
        None => Err(fail(Status::TRY_AGAIN, "slot has no coordinator")),
    }
}

/// Run a coordinator operation, retrying definite refusals until [`OP_DEADLINE`] (the same
/// policy as the RESP front, so a failover is usually invisible to the client).
async fn run(node: &ClusterNode, op: ClientOp) -> Result<ClientReply, Fail> {
    let deadline = Instant::now() + OP_DEADLINE;
    let mut backoff = RETRY_BACKOFF_MIN;
    let mut fast = 0u32;
    // Bounded by the deadline (and the immediate retries by RETRY_COUNT_MAX).
    loop {
        moved(node, op.key())?;
        match node.submit(op.clone()).await {
            Err(SubmitError::Stopped) => return Err(fail(Status::TRY_AGAIN, "node is stopping")),
            Err(SubmitError::Overloaded) => {}
            Ok(r) => match r.body {
                ClientReply::StaleEpoch { .. } => {
                    // The epoch moved between reading it and the core stepping: retry at
                    // once a few times, then back off.
                    fast += 1;
                    if fast <= limits::RETRY_COUNT_MAX {
                        continue;
                    }
                }
                ClientReply::NotCoordinator | ClientReply::NotReady | ClientReply::Busy => {}
                ClientReply::Ambiguous { version } => {
                    // A SET the new coordinator serves took effect: say so (resolve.rs).
                    if matches!(op, ClientOp::Set { .. })
                        && crate::resolve::took_effect(node, op.key(), version).await
                    {
                        node.count_ambiguous_resolved();
                        return Ok(ClientReply::Written { version });
                    }
                    return Err(fail(
                        Status::INTERNAL,
                        "ambiguous: the coordinator changed with this write in flight; it may or may not have taken effect",
                    ));
                }
                ClientReply::TooLarge => {
                    return Err(fail(
                        Status::TOO_LARGE,
                        "key or value exceeds the size limit",
                    ))
                }
                ClientReply::OutOfMemory => {
                    return Err(fail(
                        Status::NO_SPACE,
                        "OOM command not allowed when used memory > 'maxmemory'.",
                    ))
                }
                ClientReply::NoSuchMemgest => {
                    return Err(fail(
                        Status::BAD_REQUEST,
                        "the memgest does not exist or is not supported",
                    ))
                }
                ClientReply::Unsupported => {
                    return Err(fail(
                        Status::UNSUPPORTED,
                        "the memgest's scheme is not implemented",
                    ))
                }
                body => return Ok(body),
            },
        }
        if Instant::now() >= deadline {
            return Err(fail(Status::TRY_AGAIN, "the slot is failing over; retry"));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
    }
}

/// Poll every future until all are done; outputs in input order (the keys of one MGET).
async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (f, slot) in futs.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *slot = Some(v),
                    Poll::Pending => all = false,
                }
            }
        }
        if all {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
