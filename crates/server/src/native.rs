//! The native binary protocol on the client port (frames of `ringlet_codec::native`,
//! `docs/protocol.md`): PING, GET, MGET, SET (NX/XX, TTL, client version, CAS, memgest), DEL
//! (CAS), INCRBY, CHASE (the RESP command's walk, `cmd::record::walk_local`). A connection is native when its first byte is the codec's magic byte.
//!
//! GET and MGET are answered from the worker's lock-free reader, like RESP GET. Every
//! response carries the node's epoch (0 until the control plane assigns one).
//!
//! Authentication: the native protocol has no AUTH frame yet, so on a node with a password a
//! native connection gets one `BAD_REQUEST` error response and is closed; it never bypasses
//! `requirepass`.

use crate::cmd::Session;
use crate::conn::{flush, read_more, Progress};
use crate::shared::{now_ms, Shared, Stats};
use bytes::{Buf, BytesMut};
use ringlet_codec::native::{
    decode_request_frame, encode_error_response, encode_get_response, encode_int_response,
    encode_status_response, MgetResponseWriter, NativeRequest, Opcode, RequestFrame, SetCond,
    Status,
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

/// The sans-I/O half of a native connection (both worker loops drive it): run every
/// complete frame at the start of `buf`, stopping early once `wbuf` holds
/// `WRITE_FLUSH_BYTES` (the caller sends, drops `consumed` bytes and calls again). A
/// malformed frame, or a node that needs AUTH, encodes one error response and asks to close.
pub(crate) fn process(
    buf: &[u8],
    shared: &Shared,
    reader: &ringlet_engine::Reader,
    scratch: &mut Vec<u8>,
    session: &Session,
    now: u64,
    wbuf: &mut BytesMut,
) -> Progress {
    // No AUTH frame yet: native requests run as the default user without an ACL check,
    // so only while that user needs no password and may do anything (checked per read,
    // so an ACL change applies to open connections too).
    if !shared.acl.default_free() {
        encode_error_response(
            wbuf,
            0,
            Opcode::Ping,
            Status::BAD_REQUEST,
            EPOCH,
            "authentication required: the native protocol has no AUTH yet; use RESP",
        );
        return Progress {
            consumed: 0,
            close: true,
        };
    }
    let mut pos = 0usize;
    // Bounded by buf.len(): every decoded frame consumes its header at least.
    loop {
        match decode_request_frame(&buf[pos..]) {
            Ok(Some((frame, used))) => {
                Stats::add(&shared.stats.commands_processed, 1);
                {
                    // Not inside another client's EXEC (see `Shared::exec`).
                    let _exec = shared.exec.read();
                    handle(&frame, shared, reader, scratch, now, wbuf);
                }
                pos += used;
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
