//! The native binary protocol on the client port (frames of `ringlet_codec::native`,
//! `docs/protocol.md`): PING, GET, MGET, SET (NX/XX, TTL, client version, CAS, memgest), DEL
//! (CAS), INCRBY, CHASE (the RESP command's walk, `cmd::record::walk_local`), and COMMAND:
//! any command of the RESP command layer ([`crate::cmd::dispatch`], the RESP front's own entry
//! point: same table, arity, ACL check and handlers), its RESP3 reply carried back as bytes.
//! A connection is native when its first byte is the codec's magic byte.
//!
//! GET and MGET are answered from the worker's lock-free reader, like RESP GET. Every
//! response carries the node's epoch (0 until the control plane assigns one).
//!
//! Authentication and ACLs as on RESP: an AUTH frame logs the connection in as a user
//! (`default` when the frame names none); until then, on a node whose default user needs a
//! password, every other request is answered `DENIED` (`NOAUTH ...`). Each request is checked
//! against the connection's user as the RESP command it stands for ([`acl_argv`]), so a user
//! limited to `~app:*` or without `+set` is held to it here too (`DENIED`, `NOPERM ...`).

use crate::cmd::Session;
use crate::conn::{flush, read_more, Progress};
use crate::shared::{now_ms, Shared, Stats};
use bytes::{Buf, BytesMut};
use ringlet_codec::native::{
    decode_request_frame, encode_command_response, encode_error_response, encode_get_response,
    encode_int_response, encode_status_response, ArgList, MgetResponseWriter, NativeRequest,
    Opcode, RequestFrame, SetCond, Status,
};
use ringlet_engine::{Condition, Engine, Expiry, ReadOutcome, SetOptions, SetOutcome};
use ringlet_types::{limits, Epoch, MemgestId, ValueKind, Version};
use std::sync::Arc;
use tokio::net::TcpStream;

/// Whether a connection starting with byte `first` speaks the native protocol.
pub fn is_native(first: u8) -> bool {
    ringlet_codec::native::is_native(first)
}

/// The epoch every response carries (single node: 0 until the control plane exists).
const EPOCH: Epoch = Epoch(0);

/// Flush replies past this many buffered bytes (as for RESP).
const WRITE_FLUSH_BYTES: usize = 256 * 1024;

pub async fn serve(
    stream: &mut TcpStream,
    rbuf: &mut BytesMut,
    wbuf: &mut BytesMut,
    shared: &Arc<Shared>,
    worker: &crate::conn::Worker,
    session: &mut Session,
) -> std::io::Result<()> {
    let mut scratch = Vec::new();
    // The event loop of one connection: ends on EOF or a malformed frame.
    loop {
        let now = now_ms();
        let mut close;
        // Bounded: each round consumes frames or stops (flush threshold or need input).
        loop {
            let p = process(
                rbuf,
                shared,
                &worker.reader,
                &mut scratch,
                session,
                now,
                wbuf,
            );
            rbuf.advance(p.consumed);
            close = p.close;
            if close || wbuf.len() < WRITE_FLUSH_BYTES {
                break;
            }
            flush(stream, wbuf, shared).await?;
        }
        if !close && rbuf.len() > limits::CONN_READ_BUFFER_BYTES_MAX as usize {
            close = true;
        }
        flush(stream, wbuf, shared).await?;
        if close || read_more(stream, rbuf, shared).await? == 0 {
            return Ok(());
        }
    }
}

/// What [`gate`] decided for one request.
enum Gate {
    /// Run it.
    Run,
    /// Its response is written (an AUTH, or a refusal).
    Answered,
    /// A refusal is written and the connection must close (its user was deleted).
    Close,
}

/// AUTH, NOAUTH and the ACL check of one native request, as `cmd::dispatch` does for RESP.
fn gate(
    frame: &RequestFrame<'_>,
    shared: &Shared,
    session: &mut Session,
    out: &mut BytesMut,
) -> Gate {
    let id = frame.request_id;
    let op = frame.request.opcode();
    if let NativeRequest::Auth { user, password } = frame.request {
        let name: &[u8] = if user.is_empty() { b"default" } else { user };
        match shared.acl.snapshot().authenticate(name, password) {
            Some(u) => {
                session.user.set(u, &shared.acl);
                *session.state.user.lock() = session.user.name().to_string();
                session.authenticated = true;
                encode_status_response(out, id, op, Status::OK, EPOCH, Version::ZERO);
            }
            None => encode_error_response(out, id, op, Status::DENIED, EPOCH, WRONGPASS),
        }
        return Gate::Answered;
    }
    if !session.authenticated && shared.auth_required() {
        encode_error_response(out, id, op, Status::DENIED, EPOCH, NOAUTH);
        return Gate::Answered;
    }
    // One atomic load and a branch for an unrestricted user, as on RESP.
    if session.user.generation_is(shared.acl.generation()) && session.user.unrestricted() {
        return Gate::Run;
    }
    let mut argv = Vec::new();
    acl_argv(&frame.request, &mut argv);
    match acl_check(&mut session.user, &shared.acl, &argv) {
        Ok(()) => Gate::Run,
        Err((message, close)) => {
            encode_error_response(out, id, op, Status::DENIED, EPOCH, &message);
            if close {
                Gate::Close
            } else {
                Gate::Answered
            }
        }
    }
}

/// The sans-I/O half of a native connection (both worker loops drive it): run every
/// complete frame at the start of `buf`, stopping early once `wbuf` holds
/// `WRITE_FLUSH_BYTES` (the caller sends, drops `consumed` bytes and calls again). A
/// malformed frame, or a request of a deleted user, encodes one error response and asks to
/// close.
pub(crate) fn process(
    buf: &[u8],
    shared: &Shared,
    reader: &ringlet_engine::Reader,
    scratch: &mut Vec<u8>,
    session: &mut Session,
    now: u64,
    wbuf: &mut BytesMut,
) -> Progress {
    let mut pos = 0usize;
    // Bounded by buf.len(): every decoded frame consumes its header at least.
    loop {
        match decode_request_frame(&buf[pos..]) {
            Ok(Some((frame, used))) => {
                Stats::add(&shared.stats.commands_processed, 1);
                pos += used;
                match gate(&frame, shared, session, wbuf) {
                    Gate::Run => {
                        if let NativeRequest::Command { args } = frame.request {
                            // `cmd::dispatch` takes `Shared::exec` itself.
                            let ctx = &mut crate::cmd::Ctx {
                                shared,
                                reader,
                                scratch,
                                session,
                                now_ms: now,
                            };
                            if command(ctx, frame.request_id, args, wbuf) {
                                return Progress {
                                    consumed: pos,
                                    close: true,
                                };
                            }
                        } else {
                            // Not inside another client's EXEC (see `Shared::exec`).
                            let _exec = shared.exec.read();
                            let (started, at) = (std::time::Instant::now(), wbuf.len());
                            handle(&frame, shared, reader, scratch, now, wbuf);
                            count(shared, &frame.request, started, &wbuf[at..]);
                        }
                    }
                    Gate::Answered => {}
                    Gate::Close => {
                        return Progress {
                            consumed: pos,
                            close: true,
                        }
                    }
                }
                if wbuf.len() >= WRITE_FLUSH_BYTES {
                    return Progress {
                        consumed: pos,
                        close: false,
                    };
                }
            }
            Ok(None) => {
                return Progress {
                    consumed: pos,
                    close: false,
                }
            }
            Err(e) => {
                // No request id to answer to: the stream cannot be resynchronised.
                Stats::add(&shared.stats.protocol_errors, 1);
                tracing::debug!(id = session.id, error = %e, "native protocol error");
                encode_error_response(
                    wbuf,
                    0,
                    Opcode::Ping,
                    Status::BAD_REQUEST,
                    EPOCH,
                    &e.to_string(),
                );
                return Progress {
                    consumed: pos,
                    close: true,
                };
            }
        }
    }
}

/// Why a COMMAND frame may not run `argv` on a native connection, if it may not: the
/// commands that change or need connection state a native connection does not have (its
/// requests may be answered out of order, it has no RESP protocol version, no database
/// number, no transaction queue, no push channel). AUTH has its own opcode. Checked by name
/// before the table (SUBSCRIBE and MONITOR are not in it, yet deserve more than "unknown").
pub fn command_refusal(argv: &[&[u8]]) -> Option<&'static str> {
    let name = argv.first()?.to_ascii_lowercase();
    let sub = argv.get(1).map(|s| s.to_ascii_lowercase());
    Some(match name.as_slice() {
        b"subscribe" | b"psubscribe" | b"ssubscribe" | b"unsubscribe" | b"punsubscribe"
        | b"sunsubscribe" | b"monitor" => {
            "pub/sub and MONITOR push messages, which a native connection cannot carry: use RESP"
        }
        b"multi" | b"exec" | b"discard" | b"watch" | b"unwatch" => {
            "transactions queue commands on a connection and a native connection runs its requests concurrently: use RESP for MULTI/EXEC"
        }
        b"auth" => "AUTH has its own native opcode (AUTH, 11)",
        b"hello" | b"reset" | b"quit" | b"select" => {
            "HELLO, RESET, QUIT and SELECT change a RESP connection's state; a native connection has none (replies are always RESP3, database 0)"
        }
        b"wait" => {
            "WAIT counts the replicas of the connection's last write, and a native connection's requests run out of order: use RESP"
        }
        b"client" => match sub.as_deref() {
            // Read-only views of the node's connections are fine.
            Some(b"list") | Some(b"help") | None => return None,
            _ => "CLIENT subcommands other than LIST change or describe a RESP connection: use RESP",
        },
        _ => return None,
    })
}

/// Run one COMMAND frame through the command layer and write its response: the RESP3 reply
/// as bytes, `UNSUPPORTED` for a command a native connection cannot run, `TOO_LARGE` for a
/// reply over `limits::COMMAND_REPLY_BYTES_MAX`. True when the connection must close (its
/// ACL user was deleted, as RESP closes it).
fn command(ctx: &mut crate::cmd::Ctx<'_>, id: u64, args: ArgList<'_>, out: &mut BytesMut) -> bool {
    let argv: Vec<&[u8]> = args.iter().collect();
    if let Some(why) = command_refusal(&argv) {
        encode_error_response(out, id, Opcode::Command, Status::UNSUPPORTED, EPOCH, why);
        return false;
    }
    // Replies in RESP3's richer shapes (maps for HGETALL, doubles, verbatim strings); the
    // client decodes them with the codec's reply decoder.
    ctx.session.proto = ringlet_codec::resp::Proto::Resp3;
    let reply = crate::cmd::dispatch(ctx, &argv);
    let mut bytes = BytesMut::new();
    crate::conn::encode(&reply, ringlet_codec::resp::Proto::Resp3, &mut bytes);
    if bytes.len() > limits::COMMAND_REPLY_BYTES_MAX as usize {
        encode_error_response(
            out,
            id,
            Opcode::Command,
            Status::TOO_LARGE,
            EPOCH,
            "the reply exceeds the native reply limit: ask for less (SCAN/HSCAN) or use RESP",
        );
    } else {
        encode_command_response(out, id, EPOCH, &bytes);
    }
    ctx.session.quit
}

/// INFO commandstats for a native data request (COMMAND frames are counted by
/// `cmd::dispatch`), under the RESP command it stands for, as a cluster node counts them:
/// `response` is what it answered, whose status byte follows the frame header.
fn count(shared: &Shared, req: &NativeRequest<'_>, started: std::time::Instant, response: &[u8]) {
    use crate::cmdstats::Outcome;
    let name = match req {
        NativeRequest::Get { .. } => "get",
        NativeRequest::Mget { .. } => "mget",
        NativeRequest::Set(_) => "set",
        NativeRequest::Del { .. } => "del",
        NativeRequest::IncrBy { .. } => "incrby",
        NativeRequest::Chase(_) => "chase",
        NativeRequest::Ping => "ping",
        NativeRequest::Auth { .. } | NativeRequest::Command { .. } => return,
    };
    let failed = response
        .get(ringlet_codec::native::HEADER_BYTES)
        .is_some_and(|&status| Status(status).is_error());
    let outcome = if failed { Outcome::Failed } else { Outcome::Ok };
    let us = started.elapsed().as_micros() as u64;
    shared.cmdstats.by_name(name).record(us, outcome);
}

/// RESP's reply to a wrong AUTH, sent as a `DENIED` message.
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// RESP's reply to a request before AUTH, sent as a `DENIED` message.
pub const NOAUTH: &str = "NOAUTH Authentication required.";

/// The RESP command a native data request stands for, for the ACL check: the command's
/// name, its keys where the command table says they are, and placeholders for the other
/// arguments (the check reads the command and its keys).
pub fn acl_argv<'a>(req: &NativeRequest<'a>, argv: &mut Vec<&'a [u8]>) {
    match *req {
        NativeRequest::Ping => argv.push(b"PING"),
        NativeRequest::Auth { .. } => argv.extend([&b"AUTH"[..], b"-"]),
        NativeRequest::Get { key } => argv.extend([&b"GET"[..], key]),
        NativeRequest::Mget { keys } => {
            argv.push(b"MGET");
            argv.extend(keys.iter());
        }
        NativeRequest::Set(s) => argv.extend([&b"SET"[..], s.key, s.value]),
        NativeRequest::Del { key, .. } => argv.extend([&b"DEL"[..], key]),
        NativeRequest::IncrBy { key, .. } => argv.extend([&b"INCRBY"[..], key, b"0"]),
        NativeRequest::Chase(c) => {
            argv.extend([&b"CHASE"[..], c.key]);
            argv.extend(c.links.iter());
        }
        // The command itself: checked exactly as RESP checks it.
        NativeRequest::Command { args } => argv.extend(args.iter()),
    }
}

/// Check `argv` (from [`acl_argv`]) against `user`: the refusal's message and whether the
/// connection must close (its user was deleted, as RESP closes it).
///
/// # Errors
/// `NOPERM ...` (the RESP reply's text), or the deleted-user error with `true`.
pub fn acl_check(
    user: &mut ringlet_command::acl::ConnUser,
    table: &ringlet_command::acl::AclTable,
    argv: &[&[u8]],
) -> Result<(), (String, bool)> {
    use ringlet_command::acl::CheckError;
    // Every fixed opcode stands for a known command; a COMMAND frame naming an unknown one
    // runs and gets the command layer's own "unknown command" error (no key is touched).
    let Ok(idx) = ringlet_command::lookup(argv) else {
        return Ok(());
    };
    match user.check(table, idx, argv) {
        Ok(()) => Ok(()),
        Err(CheckError::Denied(r)) => Err((reply_text(&r), false)),
        Err(CheckError::UserGone) => Err((ringlet_command::acl::USER_GONE.into(), true)),
    }
}

/// The text of an error reply (its message without RESP framing).
fn reply_text(r: &ringlet_command::reply::Reply) -> String {
    match r {
        ringlet_command::reply::Reply::Error(m) => String::from_utf8_lossy(m).into_owned(),
        other => format!("{other:?}"),
    }
}

fn error_status(e: ringlet_engine::Error) -> (Status, String) {
    use ringlet_engine::Error as E;
    let s = match e {
        E::KeyTooLarge { .. } | E::ValueTooLarge { .. } => Status::TOO_LARGE,
        E::NoSpace => Status::NO_SPACE,
        E::NotInteger | E::NotFloat => Status::NOT_INTEGER,
        E::Overflow => Status::OVERFLOW,
        E::StaleVersion | E::UnknownMemgest => Status::BAD_REQUEST,
        E::WrongType => Status::WRONG_TYPE,
        E::Config | E::Os { .. } => Status::INTERNAL,
    };
    (s, e.to_string())
}

fn handle(
    frame: &RequestFrame<'_>,
    shared: &Shared,
    reader: &ringlet_engine::Reader,
    scratch: &mut Vec<u8>,
    now: u64,
    out: &mut BytesMut,
) {
    let id = frame.request_id;
    match frame.request {
        NativeRequest::Ping => {
            encode_status_response(out, id, Opcode::Ping, Status::OK, EPOCH, Version::ZERO)
        }
        // Run by `command` (it needs the session), never here.
        NativeRequest::Command { .. } => encode_error_response(
            out,
            id,
            Opcode::Command,
            Status::INTERNAL,
            EPOCH,
            "COMMAND reached the fixed-opcode handler",
        ),
        // Answered by `gate` before any request runs.
        NativeRequest::Auth { .. } => {
            encode_status_response(out, id, Opcode::Auth, Status::OK, EPOCH, Version::ZERO)
        }
        NativeRequest::Get { key } => match read(shared, reader, key, now, scratch) {
            Some((v, ValueKind::String)) => encode_get_response(out, id, EPOCH, v, Some(scratch)),
            // A record is a hash to Redis clients: GET of it is WRONGTYPE, as in Redis.
            Some((_, ValueKind::Record)) => encode_error_response(
                out,
                id,
                Opcode::Get,
                Status::WRONG_TYPE,
                EPOCH,
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            None => encode_get_response(out, id, EPOCH, Version::ZERO, None),
        },
        NativeRequest::Mget { keys } => {
            let mut w = MgetResponseWriter::begin(out, id, EPOCH);
            for key in keys.iter() {
                match read(shared, reader, key, now, scratch) {
                    Some((v, ValueKind::String)) => w.push(out, Status::OK, v, scratch),
                    // Redis's MGET answers nil for a key that holds another type.
                    Some((_, ValueKind::Record)) | None => {
                        w.push(out, Status::NOT_FOUND, Version::ZERO, &[])
                    }
                }
            }
            let ok = w.finish(out);
            debug_assert!(ok, "MGET response lost bytes");
        }
        NativeRequest::Set(s) => {
            if s.ttl_ms == Some(0) {
                return encode_error_response(
                    out,
                    id,
                    Opcode::Set,
                    Status::BAD_REQUEST,
                    EPOCH,
                    "ttl_ms must be > 0",
                );
            }
            let mut engine = shared.db.lock();
            // A SET without a memgest keeps the key's (only its memgest is needed: no copy
            // of the value).
            let memgest = s
                .memgest
                .unwrap_or_else(|| engine.live_memgest(s.key, now).unwrap_or(MemgestId::NONE));
            let condition = match (s.cas, s.cond) {
                (Some(v), _) if v == Version::ZERO => Condition::IfAbsent,
                (Some(v), _) => Condition::IfVersion(v),
                (None, SetCond::Always) => Condition::Always,
                (None, SetCond::IfAbsent) => Condition::IfAbsent,
                (None, SetCond::IfPresent) => Condition::IfPresent,
            };
            let expiry = match s.ttl_ms {
                Some(ttl) => Expiry::At(now.saturating_add(ttl)),
                None => Expiry::Persist,
            };
            let opts = SetOptions {
                version: s.version,
                memgest,
                expiry,
                condition,
                staged: false,
                kind: ValueKind::String,
            };
            match engine.set_discarding_old(s.key, s.value, &opts, now) {
                Ok(SetOutcome::Applied { version, .. }) => {
                    encode_status_response(out, id, Opcode::Set, Status::OK, EPOCH, version)
                }
                Ok(SetOutcome::NotApplied { current }) => {
                    let status = if s.cas.is_some() {
                        Status::CAS_MISMATCH
                    } else {
                        Status::NOT_STORED
                    };
                    let v = current.map_or(Version::ZERO, |e| e.version);
                    encode_status_response(out, id, Opcode::Set, status, EPOCH, v)
                }
                Err(e) => {
                    let (st, msg) = error_status(e);
                    encode_error_response(out, id, Opcode::Set, st, EPOCH, &msg)
                }
            }
        }
        NativeRequest::Del { key, cas } => {
            let mut engine = shared.db.lock();
            del(&mut engine, id, key, cas, now, out)
        }
        NativeRequest::Chase(c) => {
            use crate::cmd::record::{chase_from_frame, encode_chase_native, walk_local};
            let walk = match chase_from_frame(&c) {
                Ok(w) => w,
                Err(e) => {
                    return encode_error_response(
                        out,
                        id,
                        Opcode::Chase,
                        Status::BAD_REQUEST,
                        EPOCH,
                        &e,
                    )
                }
            };
            let reply = walk_local(shared, walk, now);
            if let Err(e) = encode_chase_native(out, id, EPOCH, &reply) {
                encode_error_response(out, id, Opcode::Chase, Status::TOO_LARGE, EPOCH, e);
            }
        }
        NativeRequest::IncrBy { key, delta } => {
            let mut engine = shared.db.lock();
            match engine.incr_by(key, delta, now) {
                Ok(v) => {
                    let version = engine.get(key, now).map_or(Version::ZERO, |e| e.version);
                    encode_int_response(out, id, EPOCH, version, v)
                }
                Err(e) => {
                    let (st, msg) = error_status(e);
                    encode_error_response(out, id, Opcode::IncrBy, st, EPOCH, &msg)
                }
            }
        }
    }
}

fn del(
    engine: &mut Engine,
    id: u64,
    key: &[u8],
    cas: Option<Version>,
    now: u64,
    out: &mut BytesMut,
) {
    let current = engine.get(key, now);
    if let Some(want) = cas {
        let have = current.as_ref().map_or(Version::ZERO, |e| e.version);
        if have != want {
            return encode_status_response(out, id, Opcode::Del, Status::CAS_MISMATCH, EPOCH, have);
        }
    }
    if current.is_none() {
        return encode_status_response(
            out,
            id,
            Opcode::Del,
            Status::NOT_FOUND,
            EPOCH,
            Version::ZERO,
        );
    }
    let version = engine.next_version(now);
    match engine.delete(key, Some(version), now) {
        Ok(_) => encode_status_response(out, id, Opcode::Del, Status::OK, EPOCH, version),
        Err(e) => {
            let (st, msg) = error_status(e);
            encode_error_response(out, id, Opcode::Del, st, EPOCH, &msg)
        }
    }
}

/// Lock-free read into `scratch`, falling back to the engine lock on `Retry`. Returns the
/// entry's version on a hit.
fn read(
    shared: &Shared,
    reader: &ringlet_engine::Reader,
    key: &[u8],
    now: u64,
    scratch: &mut Vec<u8>,
) -> Option<(Version, ValueKind)> {
    scratch.clear();
    let r = match reader.get(key, now, scratch) {
        ReadOutcome::Hit { version, kind, .. } => Some((version, kind)),
        ReadOutcome::Miss => None,
        ReadOutcome::Retry => {
            Stats::add(&shared.stats.reader_retries, 1);
            shared.db.lock().get(key, now).map(|e| {
                scratch.clear();
                scratch.extend_from_slice(&e.value);
                (e.version, e.kind)
            })
        }
    };
    let st = &shared.stats;
    Stats::add(
        if r.is_some() {
            &st.keyspace_hits
        } else {
            &st.keyspace_misses
        },
        1,
    );
    r
}
