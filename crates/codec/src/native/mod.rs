//! The native binary protocol: versioned, length-prefixed frames with request ids.
//!
//! Full byte diagrams: `docs/protocol.md`. In short, every frame is a 16-byte header and a
//! body; all integers are big-endian (versions are 128-bit big-endian, their ordering form):
//!
//! ```text
//!  0       1         2        3       4                              12              16
//! +-------+---------+--------+-------+-------------------------------+---------------+
//! | magic | version | opcode | flags |        request id (u64)       | body len (u32)|
//! | 0xA5  |   0x01  |        |       |                               |               |
//! +-------+---------+--------+-------+-------------------------------+---------------+
//! ```
//!
//! A response has the request's opcode and id, flag bit 0 set, and a body that always starts
//! with `status u8 | epoch u64 | version u128`.
//!
//! Why these choices (more in `docs/design/codec-native.md`): the magic byte 0xA5 can never
//! start a RESP request (`*` or an inline command's printable byte), so one port serves both
//! protocols by looking at the first byte; the body length comes first in the decoder's eyes so
//! a server can check it against `limits::FRAME_BYTES_MAX` and reserve exactly once; request
//! ids let a client pipeline any number of requests on one connection and match responses
//! that a future server may send out of order.
//!
//! Decoding borrows: keys and values are `&[u8]` into the caller's buffer, MGET key lists and
//! MGET results are validated once and then iterated in place, so decoding a frame never
//! allocates.

pub mod chase;
mod cursor;
pub mod request;
pub mod response;

pub use chase::{
    encode_chase, ChaseItem, ChaseItems, ChaseRequest, ChaseResponseWriter, ChaseStop,
    CHASE_PAYLOAD_BYTES_MAX,
};
pub use request::{
    decode_cluster_request_frame, decode_request_frame, encode_auth, encode_cluster_map_request,
    encode_cluster_request_frame, encode_command, encode_del, encode_get, encode_incr_by,
    encode_memgest, encode_mget, encode_ping, encode_read_replica, encode_request_frame,
    encode_set, ArgList, ClusterRequest, ClusterRequestFrame, KeyList, NativeRequest, RequestFrame,
    SetCond, SetRequest,
};
pub use response::{
    decode_response_frame, encode_cluster_map_response, encode_command_response,
    encode_error_response, encode_get_response, encode_int_response, encode_memgest_response,
    encode_read_replica_response, encode_response_frame, encode_status_response, MgetItem,
    MgetItems, MgetResponseWriter, ReplicaValue, ResponseBody, ResponseFrame, Status,
};

use crate::error::DecodeError;
use crate::sink::Sink;
use ringlet_types::limits;

/// First byte of every native frame. Not `*`, not printable ASCII: never the start of RESP.
pub const MAGIC: u8 = 0xA5;
/// The protocol version this build speaks. A peer sending another version is refused with
/// [`DecodeError::UnsupportedVersion`] (the connection closes; there is one version so far).
pub const PROTOCOL_VERSION: u8 = 1;
/// Bytes of the frame header.
pub const HEADER_BYTES: usize = 16;
/// Header flag: this frame is a response.
pub const FLAG_RESPONSE: u8 = 0x01;
/// Largest body length accepted: a frame is at most `limits::FRAME_BYTES_MAX` bytes.
pub const BODY_BYTES_MAX: u32 = limits::FRAME_BYTES_MAX - HEADER_BYTES as u32;

/// Operation of a frame. 0 is reserved so that a zeroed buffer is never a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Liveness check; the response carries the epoch.
    Ping = 1,
    /// Read one key.
    Get = 2,
    /// Read many keys in one frame.
    Mget = 3,
    /// Write one key (conditions, version, expiry, memgest).
    Set = 4,
    /// Delete one key (optionally only at a given version).
    Del = 5,
    /// Add to an integer value.
    IncrBy = 6,
    /// Cluster mode: the node's cluster map (JSON of `ringlet_control::ClusterMap`).
    ClusterMap = 7,
    /// Cluster mode: one quorum-read leg: this node's version, memgest and value of a key.
    ReadReplica = 8,
    /// Cluster mode: a MEMGEST management command (the words after `MEMGEST`); the reply is
    /// MEMGEST's RESP3 reply, carried as bytes.
    Memgest = 9,
    /// Follow links breadth-first from a key (RESP's CHASE; `chase` module).
    Chase = 10,
    /// Authenticate the connection as a user (RESP's `AUTH [user] password`); until it
    /// succeeds, a node whose default user needs a password answers every other request
    /// with `DENIED`.
    Auth = 11,
    /// Any command of the node's RESP command layer (`count u32 | arg * count`, the name
    /// first): run through the same table, ACL check and handlers as on RESP; the reply is
    /// the command's RESP3 reply, carried as bytes (as MEMGEST's).
    Command = 12,
}

impl Opcode {
    /// Parse an opcode byte.
    pub fn from_u8(b: u8) -> Option<Opcode> {
        Some(match b {
            1 => Opcode::Ping,
            2 => Opcode::Get,
            3 => Opcode::Mget,
            4 => Opcode::Set,
            5 => Opcode::Del,
            6 => Opcode::IncrBy,
            7 => Opcode::ClusterMap,
            8 => Opcode::ReadReplica,
            9 => Opcode::Memgest,
            10 => Opcode::Chase,
            11 => Opcode::Auth,
            12 => Opcode::Command,
            _ => return None,
        })
    }
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The operation.
    pub opcode: Opcode,
    /// Flag bits ([`FLAG_RESPONSE`]); other bits are zero.
    pub flags: u8,
    /// Chosen by the client; echoed in the response.
    pub request_id: u64,
    /// Bytes after the header; at most [`BODY_BYTES_MAX`].
    pub body_len: u32,
}

impl Header {
    /// Whether [`FLAG_RESPONSE`] is set.
    pub fn is_response(&self) -> bool {
        self.flags & FLAG_RESPONSE != 0
    }

    /// Header plus body bytes.
    pub fn frame_len(&self) -> usize {
        HEADER_BYTES.saturating_add(self.body_len as usize)
    }
}

/// Decode the header at the start of `buf`. Bad magic, version, opcode or flags are reported
/// as soon as their byte has arrived, before the whole header has.
///
/// # Errors
/// [`DecodeError::BadMagic`], [`DecodeError::UnsupportedVersion`], [`DecodeError::UnknownOpcode`],
/// [`DecodeError::ReservedFlags`], [`DecodeError::FrameTooLarge`].
pub fn decode_header(buf: &[u8]) -> Result<Option<Header>, DecodeError> {
    if let Some(&m) = buf.first() {
        if m != MAGIC {
            return Err(DecodeError::BadMagic(m));
        }
    }
    if let Some(&v) = buf.get(1) {
        if v != PROTOCOL_VERSION {
            return Err(DecodeError::UnsupportedVersion(v));
        }
    }
    let opcode = match buf.get(2) {
        Some(&o) => Some(Opcode::from_u8(o).ok_or(DecodeError::UnknownOpcode(o))?),
        None => None,
    };
    if let Some(&f) = buf.get(3) {
        if f & !FLAG_RESPONSE != 0 {
            return Err(DecodeError::ReservedFlags(f));
        }
    }
    let (Some(opcode), Some(h)) = (opcode, buf.get(..HEADER_BYTES)) else {
        return Ok(None);
    };
    let mut c = cursor::Cursor::new(h);
    c.skip(3)?;
    let flags = c.u8()?;
    let request_id = c.u64()?;
    let body_len = c.u32()?;
    if body_len > BODY_BYTES_MAX {
        return Err(DecodeError::FrameTooLarge(body_len));
    }
    Ok(Some(Header {
        opcode,
        flags,
        request_id,
        body_len,
    }))
}

/// Total length of the frame at the start of `buf` once its header has arrived (so a reader
/// can wait for, or reserve, exactly that many bytes).
///
/// # Errors
/// As [`decode_header`].
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    Ok(decode_header(buf)?.map(|h| h.frame_len()))
}

/// Whether a connection whose first byte is `first` speaks the native protocol (else RESP).
pub fn is_native(first: u8) -> bool {
    first == MAGIC
}

/// `n` as a wire length. Lengths above `u32::MAX` cannot come from a caller that respects
/// `limits` (values are ≤ 64 MiB); they saturate and the peer refuses the frame.
fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Write a header.
fn put_header<S: Sink + ?Sized>(out: &mut S, opcode: Opcode, flags: u8, id: u64, body_len: usize) {
    out.put(&[MAGIC, PROTOCOL_VERSION, opcode as u8, flags]);
    out.put(&id.to_be_bytes());
    out.put(&len32(body_len).to_be_bytes());
}

/// Write a length-prefixed byte string.
fn put_bytes<S: Sink + ?Sized>(out: &mut S, b: &[u8]) {
    out.put(&len32(b.len()).to_be_bytes());
    out.put(b);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn header_errors_are_early() {
        assert_eq!(decode_header(b"*"), Err(DecodeError::BadMagic(b'*')));
        assert_eq!(
            decode_header(&[MAGIC, 9]),
            Err(DecodeError::UnsupportedVersion(9))
        );
        assert_eq!(
            decode_header(&[MAGIC, 1, 0]),
            Err(DecodeError::UnknownOpcode(0))
        );
        assert_eq!(
            decode_header(&[MAGIC, 1, 2, 0x80]),
            Err(DecodeError::ReservedFlags(0x80))
        );
        assert_eq!(decode_header(&[MAGIC, 1, 2, 0]), Ok(None));
        let mut h = vec![MAGIC, 1, 2, 0];
        h.extend_from_slice(&7u64.to_be_bytes());
        h.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(decode_header(&h), Err(DecodeError::FrameTooLarge(u32::MAX)));
    }

    #[test]
    fn magic_is_not_resp() {
        assert!(!MAGIC.is_ascii());
        assert!(is_native(MAGIC) && !is_native(b'*') && !is_native(b'G'));
    }
}
