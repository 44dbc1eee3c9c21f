//! Native response frames.
//!
//! Every response body starts with the same 25 bytes, so a client learns the outcome, the
//! cluster-map epoch and the entry's version without looking at the opcode:
//!
//! ```text
//! +-----------+--------------+------------------+-----------------------+
//! | status u8 | epoch u64    | version u128     | payload (see below)   |
//! +-----------+--------------+------------------+-----------------------+
//! ```
//!
//! | status | opcode | payload |
//! |---|---|---|
//! | error (≥ 0x10) | any | `message` (`len u32 \| UTF-8 text`) |
//! | OK | GET | `value` |
//! | OK | MGET | `count u32 \| (item_status u8 \| version u128 \| value) * count` |
//! | OK | INCRBY | `value i64` |
//! | OK | CLUSTER_MAP | `map` (`len u32 \| JSON`) |
//! | OK | MEMGEST | `reply` (`len u32 \| RESP3 bytes`, ≤ `limits::VALUE_BYTES_MAX`) |
//! | OK | COMMAND | `reply` (`len u32 \| RESP3 bytes`, ≤ `limits::COMMAND_REPLY_BYTES_MAX`) |
//! | OK | CHASE | `len u32 \| stop u8 \| count u32 \| entry * count` ([`super::chase`]) |
//! | OK | READ_REPLICA | `len u32 \| memgest u16 \| present u8 \| value bytes` ([`ReplicaValue`]) |
//! | anything else | | empty |
//!
//! `version` is the entry's version: the value read (GET), the version written (SET,
//! INCRBY), the tombstone's (DEL), the current one on `CAS_MISMATCH`, `0` for a missing key or
//! for MGET (each item has its own).

use ringlet_types::{limits, Epoch, MemgestId, Version};

use super::cursor::Cursor;
use super::{decode_header, len32, put_bytes, put_header, Opcode, FLAG_RESPONSE, HEADER_BYTES};
use crate::error::DecodeError;
use crate::sink::Sink;

/// Outcome of a request. A newtype over the wire byte, so that a newer server's error codes
/// (any byte ≥ 0x10) still decode as errors with a message on an older client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status(pub u8);

impl Status {
    /// Done.
    pub const OK: Status = Status(0x00);
    /// The key does not exist (GET, DEL, MGET item).
    pub const NOT_FOUND: Status = Status(0x01);
    /// An NX/XX condition was false; nothing written.
    pub const NOT_STORED: Status = Status(0x02);
    /// CAS: the key's version is not the expected one (the response carries the current one).
    pub const CAS_MISMATCH: Status = Status(0x03);
    /// The key's slot is served elsewhere: message `"<slot> <host>:<port>"`; refresh the map.
    pub const MOVED: Status = Status(0x10);
    /// The request named an older epoch than the node's: refresh the map and retry.
    pub const STALE_EPOCH: Status = Status(0x11);
    /// Transient (slot migrating, node starting): retry after a backoff.
    pub const TRY_AGAIN: Status = Status(0x12);
    /// Semantically invalid request (e.g. TTL 0); not retried.
    pub const BAD_REQUEST: Status = Status(0x13);
    /// Key or value beyond a limit.
    pub const TOO_LARGE: Status = Status(0x14);
    /// INCRBY on a value that is not a 64-bit decimal integer.
    pub const NOT_INTEGER: Status = Status(0x15);
    /// INCRBY would overflow.
    pub const OVERFLOW: Status = Status(0x16);
    /// No memory for the write and nothing evictable.
    pub const NO_SPACE: Status = Status(0x17);
    /// Overloaded: the request was shed; retry after a backoff.
    pub const BUSY: Status = Status(0x18);
    /// The server does not implement this (opcode, option).
    pub const UNSUPPORTED: Status = Status(0x19);
    /// A string operation (GET, INCRBY, ...) on a key that holds a record (Redis's WRONGTYPE).
    pub const WRONG_TYPE: Status = Status(0x1A);
    /// Not allowed: the connection has not authenticated (message `NOAUTH ...`), AUTH's
    /// credentials are wrong (`WRONGPASS ...`), or its user may not run this request
    /// (`NOPERM ...`), as RESP's errors of the same names. Not retried.
    pub const DENIED: Status = Status(0x1B);
    /// A server bug or unexpected condition.
    pub const INTERNAL: Status = Status(0x1F);

    /// Whether this status carries a message and means the request failed.
    pub fn is_error(self) -> bool {
        self.0 >= 0x10
    }

    /// Whether a client may retry the same request (after refreshing its map or a backoff).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Status::MOVED | Status::STALE_EPOCH | Status::TRY_AGAIN | Status::BUSY
        )
    }

    fn check(self) -> Result<Status, DecodeError> {
        if self.0 <= Status::CAS_MISMATCH.0 || self.is_error() {
            Ok(self)
        } else {
            Err(DecodeError::InvalidField("status"))
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match *self {
            Status::OK => "OK",
            Status::NOT_FOUND => "NOT_FOUND",
            Status::NOT_STORED => "NOT_STORED",
            Status::CAS_MISMATCH => "CAS_MISMATCH",
            Status::MOVED => "MOVED",
            Status::STALE_EPOCH => "STALE_EPOCH",
            Status::TRY_AGAIN => "TRY_AGAIN",
            Status::BAD_REQUEST => "BAD_REQUEST",
            Status::TOO_LARGE => "TOO_LARGE",
            Status::NOT_INTEGER => "NOT_INTEGER",
            Status::OVERFLOW => "OVERFLOW",
            Status::NO_SPACE => "NO_SPACE",
            Status::BUSY => "BUSY",
            Status::UNSUPPORTED => "UNSUPPORTED",
            Status::WRONG_TYPE => "WRONG_TYPE",
            Status::DENIED => "DENIED",
            Status::INTERNAL => "INTERNAL",
            Status(other) => return write!(f, "STATUS_0x{other:02x}"),
        };
        f.write_str(name)
    }
}

/// Bytes of the common response prefix: status, epoch, version.
pub const RESPONSE_FIXED_BYTES: usize = 1 + 8 + 16;
/// Bytes of an MGET item before its value bytes.
pub const MGET_ITEM_FIXED_BYTES: usize = 1 + 16 + 4;

/// One MGET result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MgetItem<'a> {
    /// OK, NOT_FOUND or an error.
    pub status: Status,
    /// The entry's version (0 if not found).
    pub version: Version,
    /// The value (OK), the message (error) or empty.
    pub value: &'a [u8],
}

/// MGET results, validated at decode time and iterated in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MgetItems<'a> {
    count: u32,
    raw: &'a [u8],
}

impl<'a> MgetItems<'a> {
    /// Number of items (the number of keys asked for).
    pub fn len(&self) -> usize {
        self.count as usize
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The items, in request order.
    pub fn iter(&self) -> impl Iterator<Item = MgetItem<'a>> + 'a {
        let mut c = Cursor::new(self.raw);
        (0..self.count).map_while(move |_| mget_item(&mut c).ok())
    }
}

fn mget_item<'a>(c: &mut Cursor<'a>) -> Result<MgetItem<'a>, DecodeError> {
    let status = Status(c.u8()?).check()?;
    let version = Version(c.u128()?);
    let value = c.value()?;
    Ok(MgetItem {
        status,
        version,
        value,
    })
}

/// Payload of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseBody<'a> {
    /// Nothing beyond status, epoch and version.
    Empty,
    /// GET hit.
    Value(&'a [u8]),
    /// MGET results.
    Values(MgetItems<'a>),
    /// INCRBY result.
    Int(i64),
    /// Error message.
    Message(&'a [u8]),
}

/// A decoded response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseFrame<'a> {
    /// The id of the request this answers.
    pub request_id: u64,
    /// The request's opcode.
    pub opcode: Opcode,
    /// Outcome.
    pub status: Status,
    /// The node's cluster-map epoch when it answered.
    pub epoch: Epoch,
    /// The entry's version (see the module documentation).
    pub version: Version,
    /// Payload.
    pub body: ResponseBody<'a>,
}

/// Decode one response frame from the start of `buf`; `Ok(None)` until it has fully arrived.
///
/// # Errors
/// As [`super::decode_request_frame`]; also a request frame where a response was expected,
/// an unknown non-error status, or a payload that does not fit the status and opcode.
pub fn decode_response_frame(
    buf: &[u8],
) -> Result<Option<(ResponseFrame<'_>, usize)>, DecodeError> {
    let Some(h) = decode_header(buf)? else {
        return Ok(None);
    };
    if !h.is_response() {
        return Err(DecodeError::InvalidField(
            "request frame where a response was expected",
        ));
    }
    let len = h.frame_len();
    let Some(body) = buf.get(HEADER_BYTES..len) else {
        return Ok(None);
    };
    let mut c = Cursor::new(body);
    let status = Status(c.u8()?).check()?;
    let epoch = Epoch(c.u64()?);
    let version = Version(c.u128()?);
    let body = if status.is_error() {
        ResponseBody::Message(c.value()?)
    } else if status == Status::OK {
        match h.opcode {
            Opcode::Get => ResponseBody::Value(c.value()?),
            Opcode::Mget => {
                let count = c.count(MGET_ITEM_FIXED_BYTES)?;
                let start = c.remaining();
                let all = c.rest();
                let mut items = Cursor::new(all);
                for _ in 0..count {
                    mget_item(&mut items)?;
                }
                let used = start.saturating_sub(items.remaining());
                let raw = all.get(..used).ok_or(DecodeError::Truncated)?;
                c = Cursor::new(all.get(used..).unwrap_or(&[]));
                ResponseBody::Values(MgetItems { count, raw })
            }
            Opcode::IncrBy => ResponseBody::Int(c.i64()?),
            Opcode::ClusterMap | Opcode::Memgest => ResponseBody::Value(c.value()?),
            Opcode::Command => ResponseBody::Value(c.command_reply()?),
            Opcode::ReadReplica => {
                let blob = c.replica_blob()?;
                ReplicaValue::parse(blob)?;
                ResponseBody::Value(blob)
            }
            Opcode::Chase => {
                let blob = c.value()?;
                super::chase::ChaseItems::parse(blob)?;
                ResponseBody::Value(blob)
            }
            Opcode::Ping | Opcode::Set | Opcode::Del | Opcode::Auth => ResponseBody::Empty,
        }
    } else {
        ResponseBody::Empty
    };
    c.finish()?;
    Ok(Some((
        ResponseFrame {
            request_id: h.request_id,
            opcode: h.opcode,
            status,
            epoch,
            version,
            body,
        },
        len,
    )))
}

fn put_prefix<S: Sink + ?Sized>(out: &mut S, status: Status, epoch: Epoch, version: Version) {
    out.put_u8(status.0);
    out.put(&epoch.0.to_be_bytes());
    out.put(&version.to_be_bytes());
}

/// Encode any response. For MGET prefer [`MgetResponseWriter`], which needs no item list.
pub fn encode_response_frame<S: Sink + ?Sized>(out: &mut S, r: &ResponseFrame<'_>) {
    match r.body {
        ResponseBody::Empty => {
            encode_status_response(out, r.request_id, r.opcode, r.status, r.epoch, r.version)
        }
        ResponseBody::Value(v) | ResponseBody::Message(v) => {
            let body = RESPONSE_FIXED_BYTES
                .saturating_add(4)
                .saturating_add(v.len());
            put_header(out, r.opcode, FLAG_RESPONSE, r.request_id, body);
            put_prefix(out, r.status, r.epoch, r.version);
            put_bytes(out, v);
        }
        ResponseBody::Int(i) => {
            let body = RESPONSE_FIXED_BYTES.saturating_add(8);
            put_header(out, r.opcode, FLAG_RESPONSE, r.request_id, body);
            put_prefix(out, r.status, r.epoch, r.version);
            out.put(&i.to_be_bytes());
        }
        ResponseBody::Values(items) => {
            let body = RESPONSE_FIXED_BYTES
                .saturating_add(4)
                .saturating_add(items.raw.len());
            put_header(out, r.opcode, FLAG_RESPONSE, r.request_id, body);
            put_prefix(out, r.status, r.epoch, r.version);
            out.put(&items.count.to_be_bytes());
            out.put(items.raw);
        }
    }
}

/// A response with an empty payload: SET/DEL/PING results, NOT_FOUND, NOT_STORED,
/// CAS_MISMATCH. Do not use with an error status (those carry a message).
pub fn encode_status_response<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    opcode: Opcode,
    status: Status,
    epoch: Epoch,
    version: Version,
) {
    debug_assert!(!status.is_error(), "error statuses carry a message");
    put_header(out, opcode, FLAG_RESPONSE, request_id, RESPONSE_FIXED_BYTES);
    put_prefix(out, status, epoch, version);
}

/// GET result: `Some(value)` is a hit (OK), `None` a miss (NOT_FOUND).
pub fn encode_get_response<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    epoch: Epoch,
    version: Version,
    value: Option<&[u8]>,
) {
    match value {
        Some(v) => {
            let body = RESPONSE_FIXED_BYTES
                .saturating_add(4)
                .saturating_add(v.len());
            put_header(out, Opcode::Get, FLAG_RESPONSE, request_id, body);
            put_prefix(out, Status::OK, epoch, version);
            put_bytes(out, v);
        }
        None => encode_status_response(
            out,
            request_id,
            Opcode::Get,
            Status::NOT_FOUND,
            epoch,
            Version::ZERO,
        ),
    }
}

/// INCRBY result.
pub fn encode_int_response<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    epoch: Epoch,
    version: Version,
    value: i64,
) {
    put_header(
        out,
        Opcode::IncrBy,
        FLAG_RESPONSE,
        request_id,
        RESPONSE_FIXED_BYTES.saturating_add(8),
    );
    put_prefix(out, Status::OK, epoch, version);
    out.put(&value.to_be_bytes());
}

/// An error response (status ≥ 0x10) with a human-readable message.
pub fn encode_error_response<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    opcode: Opcode,
    status: Status,
    epoch: Epoch,
    message: &str,
) {
    debug_assert!(status.is_error());
    let body = RESPONSE_FIXED_BYTES
        .saturating_add(4)
        .saturating_add(message.len());
    put_header(out, opcode, FLAG_RESPONSE, request_id, body);
    put_prefix(out, status, epoch, Version::ZERO);
    put_bytes(out, message.as_bytes());
}

/// Bytes of a READ_REPLICA payload before the value bytes (inside its length prefix).
pub const REPLICA_FIXED_BYTES: usize = 2 + 1;
/// READ_REPLICA flag: the node holds a value (clear: absent, or a tombstone if the version
/// is not zero).
pub const REPLICA_PRESENT: u8 = 0x01;

/// The payload of an OK READ_REPLICA response: the node's state for the key. The frame's
/// `version` field is the entry's version (0: the node has never seen the key).
///
/// On the wire it is one length-prefixed field (so [`ResponseBody::Value`] carries it and
/// re-encodes it unchanged):
///
/// ```text
/// +-------------+--------------+------------+-----------------+
/// | len u32     | memgest u16  | flags u8   | value bytes ... |
/// +-------------+--------------+------------+-----------------+
///   len = 3 + value bytes; flags: 0x01 PRESENT; value bytes empty unless PRESENT
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaValue<'a> {
    /// The memgest the node holds the key in (`MemgestId::NONE` if it has no entry).
    pub memgest: MemgestId,
    /// The value; `None` if absent or deleted.
    pub value: Option<&'a [u8]>,
}

impl<'a> ReplicaValue<'a> {
    /// Parse the bytes inside the length prefix (what [`ResponseBody::Value`] holds for an
    /// OK READ_REPLICA response).
    ///
    /// # Errors
    /// [`DecodeError::Truncated`], [`DecodeError::InvalidField`] (unknown flags, or value
    /// bytes without PRESENT), [`DecodeError::ValueTooLarge`].
    pub fn parse(blob: &'a [u8]) -> Result<ReplicaValue<'a>, DecodeError> {
        let mut c = Cursor::new(blob);
        let memgest = MemgestId(c.u16()?);
        let flags = c.u8()?;
        if flags & !REPLICA_PRESENT != 0 {
            return Err(DecodeError::InvalidField("READ_REPLICA flags"));
        }
        let rest = c.rest();
        if rest.len() > limits::VALUE_BYTES_MAX as usize {
            return Err(DecodeError::ValueTooLarge(len32(rest.len())));
        }
        let value = if flags & REPLICA_PRESENT != 0 {
            Some(rest)
        } else if rest.is_empty() {
            None
        } else {
            return Err(DecodeError::InvalidField(
                "READ_REPLICA value without PRESENT",
            ));
        };
        Ok(ReplicaValue { memgest, value })
    }
}

/// OK READ_REPLICA response: the node's `version`, memgest and value of the key.
pub fn encode_read_replica_response<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    epoch: Epoch,
    version: Version,
    r: &ReplicaValue<'_>,
) {
    let v = r.value.unwrap_or(&[]);
    let inner = REPLICA_FIXED_BYTES.saturating_add(v.len());
    let body = RESPONSE_FIXED_BYTES.saturating_add(4).saturating_add(inner);
    put_header(out, Opcode::ReadReplica, FLAG_RESPONSE, request_id, body);
    put_prefix(out, Status::OK, epoch, version);
    out.put(&len32(inner).to_be_bytes());
    out.put(&r.memgest.0.to_be_bytes());
    out.put_u8(if r.value.is_some() {
        REPLICA_PRESENT
    } else {
        0
    });
    out.put(v);
}

/// OK CLUSTER_MAP response: `json` is the map (`ringlet_control::ClusterMap::to_json`) and
/// `epoch` its epoch.
pub fn encode_cluster_map_response<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    epoch: Epoch,
    json: &[u8],
) {
    let body = RESPONSE_FIXED_BYTES
        .saturating_add(4)
        .saturating_add(json.len());
    put_header(out, Opcode::ClusterMap, FLAG_RESPONSE, request_id, body);
    put_prefix(out, Status::OK, epoch, Version::ZERO);
    put_bytes(out, json);
}

/// OK MEMGEST response: `resp3` is the command's reply as RESP3 bytes (the same reply the
/// RESP front sends, decoded by the client with the codec's RESP reply decoder), so the native
/// protocol needs no second encoding of every MEMGEST reply shape. A MEMGEST that fails
/// (unknown memgest, refused DROP) is still `OK` here with a RESP error reply inside: the
/// frame status is about transport and routing (MOVED, TRY_AGAIN), the reply about the command.
pub fn encode_memgest_response<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    epoch: Epoch,
    resp3: &[u8],
) {
    encode_resp3_response(out, Opcode::Memgest, request_id, epoch, resp3)
}

/// OK COMMAND response: `resp3` is the command's reply as RESP3 bytes, the same reply the
/// RESP front sends a RESP3 client. As for MEMGEST, a command that fails (WRONGTYPE, a syntax
/// error, CROSSSLOT) is `OK` with a RESP error reply inside: the frame status is about
/// transport, access and routing (`DENIED`, `MOVED`, `TRY_AGAIN`, `UNSUPPORTED`,
/// `TOO_LARGE`), the reply about the command. The caller keeps `resp3` within
/// `limits::COMMAND_REPLY_BYTES_MAX` (answer `TOO_LARGE` instead).
pub fn encode_command_response<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    epoch: Epoch,
    resp3: &[u8],
) {
    encode_resp3_response(out, Opcode::Command, request_id, epoch, resp3)
}

/// An OK response carrying a RESP3 reply as bytes (MEMGEST, COMMAND).
fn encode_resp3_response<S: Sink + ?Sized>(
    out: &mut S,
    opcode: Opcode,
    request_id: u64,
    epoch: Epoch,
    resp3: &[u8],
) {
    let body = RESPONSE_FIXED_BYTES
        .saturating_add(4)
        .saturating_add(resp3.len());
    put_header(out, opcode, FLAG_RESPONSE, request_id, body);
    put_prefix(out, Status::OK, epoch, Version::ZERO);
    put_bytes(out, resp3);
}

/// Streams an MGET response into a sink: `begin`, one `push` per key, `finish` (which fills
/// in the body length and the count). Nothing is buffered besides the sink itself.
#[derive(Debug)]
pub struct MgetResponseWriter {
    start: usize,
    count: u32,
}

impl MgetResponseWriter {
    /// Write the header and the fixed prefix with placeholders.
    pub fn begin<S: Sink + ?Sized>(out: &mut S, request_id: u64, epoch: Epoch) -> Self {
        let start = out.len();
        put_header(out, Opcode::Mget, FLAG_RESPONSE, request_id, 0);
        put_prefix(out, Status::OK, epoch, Version::ZERO);
        out.put(&0u32.to_be_bytes());
        MgetResponseWriter { start, count: 0 }
    }

    /// Append one item: `status` OK with the value, NOT_FOUND with an empty value, or an
    /// error status with its message.
    pub fn push<S: Sink + ?Sized>(
        &mut self,
        out: &mut S,
        status: Status,
        version: Version,
        value: &[u8],
    ) {
        out.put_u8(status.0);
        out.put(&version.to_be_bytes());
        put_bytes(out, value);
        self.count = self.count.saturating_add(1);
    }

    /// Patch the body length and count. Returns false if the sink lost bytes written since
    /// `begin` (a caller bug: the frame is then unusable).
    pub fn finish<S: Sink + ?Sized>(self, out: &mut S) -> bool {
        let body = len32(
            out.len()
                .saturating_sub(self.start)
                .saturating_sub(HEADER_BYTES),
        );
        let count_at = self
            .start
            .saturating_add(HEADER_BYTES)
            .saturating_add(RESPONSE_FIXED_BYTES);
        out.patch(self.start.saturating_add(12), &body.to_be_bytes())
            && out.patch(count_at, &self.count.to_be_bytes())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn get_hit_and_miss() {
        let mut out = Vec::new();
        encode_get_response(&mut out, 5, Epoch(3), Version(9), Some(b"val"));
        encode_get_response(&mut out, 6, Epoch(3), Version(9), None);
        let (a, n) = decode_response_frame(&out).unwrap().unwrap();
        assert_eq!(
            (a.request_id, a.status, a.epoch, a.version, a.body),
            (
                5,
                Status::OK,
                Epoch(3),
                Version(9),
                ResponseBody::Value(b"val")
            )
        );
        let (b, m) = decode_response_frame(&out[n..]).unwrap().unwrap();
        assert_eq!(
            (b.status, b.version, b.body),
            (Status::NOT_FOUND, Version::ZERO, ResponseBody::Empty)
        );
        assert_eq!(n + m, out.len());
    }

    #[test]
    fn mget_writer_round_trips() {
        let mut out = b"junk".to_vec();
        let mut w = MgetResponseWriter::begin(&mut out, 1, Epoch(2));
        w.push(&mut out, Status::OK, Version(4), b"x");
        w.push(&mut out, Status::NOT_FOUND, Version::ZERO, b"");
        w.push(&mut out, Status::MOVED, Version::ZERO, b"7 127.0.0.1:7000");
        assert!(w.finish(&mut out));
        let (f, n) = decode_response_frame(&out[4..]).unwrap().unwrap();
        assert_eq!(n, out.len() - 4);
        let ResponseBody::Values(items) = f.body else {
            panic!()
        };
        let v: Vec<_> = items.iter().collect();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].value, b"x");
        assert_eq!(v[2].status, Status::MOVED);
        // Re-encoding the decoded frame gives the same bytes.
        let mut again = Vec::new();
        encode_response_frame(&mut again, &f);
        assert_eq!(again, out[4..]);
    }

    #[test]
    fn errors_and_unknown_statuses() {
        let mut out = Vec::new();
        encode_error_response(
            &mut out,
            1,
            Opcode::Set,
            Status::TOO_LARGE,
            Epoch(1),
            "too big",
        );
        let (f, _) = decode_response_frame(&out).unwrap().unwrap();
        assert_eq!(f.body, ResponseBody::Message(b"too big"));
        assert!(f.status.is_error() && !f.status.is_retryable());
        // A future error code still decodes as an error with a message.
        out[16] = 0x42;
        assert_eq!(
            decode_response_frame(&out).unwrap().unwrap().0.status,
            Status(0x42)
        );
        // An unknown non-error status does not.
        out[16] = 0x07;
        assert!(decode_response_frame(&out).is_err());
    }

    #[test]
    fn read_replica_and_cluster_map_responses() {
        let mut out = Vec::new();
        let hit = ReplicaValue {
            memgest: MemgestId(2),
            value: Some(b"v1"),
        };
        let tomb = ReplicaValue {
            memgest: MemgestId(2),
            value: None,
        };
        encode_read_replica_response(&mut out, 1, Epoch(4), Version(9), &hit);
        encode_read_replica_response(&mut out, 2, Epoch(4), Version(10), &tomb);
        encode_cluster_map_response(&mut out, 3, Epoch(4), b"{}");
        let (a, n) = decode_response_frame(&out).unwrap().unwrap();
        let ResponseBody::Value(blob) = a.body else {
            panic!()
        };
        assert_eq!(ReplicaValue::parse(blob).unwrap(), hit);
        assert_eq!((a.version, a.epoch), (Version(9), Epoch(4)));
        let mut again = Vec::new();
        encode_response_frame(&mut again, &a);
        assert_eq!(again, out[..n]);
        let (b, m) = decode_response_frame(&out[n..]).unwrap().unwrap();
        let ResponseBody::Value(blob) = b.body else {
            panic!()
        };
        assert_eq!(ReplicaValue::parse(blob).unwrap(), tomb);
        let (c, _) = decode_response_frame(&out[n + m..]).unwrap().unwrap();
        assert_eq!(c.body, ResponseBody::Value(b"{}"));
        let mut mg = Vec::new();
        encode_memgest_response(&mut mg, 7, Epoch(4), b"+OK\r\n");
        let (d, k) = decode_response_frame(&mg).unwrap().unwrap();
        assert_eq!(
            (d.opcode, d.body, k),
            (Opcode::Memgest, ResponseBody::Value(b"+OK\r\n"), mg.len())
        );
        let mut again = Vec::new();
        encode_response_frame(&mut again, &d);
        assert_eq!(again, mg);
        // COMMAND carries a RESP3 reply the same way; its length is checked against
        // COMMAND_REPLY_BYTES_MAX before the bytes are looked at.
        let mut cm = Vec::new();
        encode_command_response(&mut cm, 8, Epoch(4), b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n");
        let (e, k) = decode_response_frame(&cm).unwrap().unwrap();
        assert_eq!(
            (e.opcode, e.status, e.body, k),
            (
                Opcode::Command,
                Status::OK,
                ResponseBody::Value(b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"),
                cm.len()
            )
        );
        let mut again = Vec::new();
        encode_response_frame(&mut again, &e);
        assert_eq!(again, cm);
        let len_at = HEADER_BYTES + RESPONSE_FIXED_BYTES;
        cm[len_at..len_at + 4]
            .copy_from_slice(&(limits::COMMAND_REPLY_BYTES_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_response_frame(&cm),
            Err(DecodeError::ValueTooLarge(
                limits::COMMAND_REPLY_BYTES_MAX + 1
            ))
        );
        // Value bytes without PRESENT, and unknown flags, are malformed.
        let mut bad = Vec::new();
        encode_read_replica_response(&mut bad, 1, Epoch(4), Version(9), &hit);
        let flags_at = HEADER_BYTES + RESPONSE_FIXED_BYTES + 4 + 2;
        bad[flags_at] = 0;
        assert!(decode_response_frame(&bad).is_err());
        bad[flags_at] = 0x81;
        assert!(decode_response_frame(&bad).is_err());
        // A payload length beyond the limit is refused.
        bad[flags_at] = REPLICA_PRESENT;
        bad[flags_at - 6..flags_at - 2].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(
            decode_response_frame(&bad),
            Err(DecodeError::ValueTooLarge(u32::MAX))
        );
    }
}
