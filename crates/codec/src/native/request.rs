//! Native request frames: decode (server side) and encode (client side).
//!
//! Bodies (after the 16-byte header; `key` and `value` are `len u32 | bytes`):
//!
//! | opcode | body |
//! |---|---|
//! | PING   | empty |
//! | GET    | `key` |
//! | MGET   | `count u32 \| key * count` |
//! | SET    | `set_flags u8 \| memgest u16 \| ttl_ms u64 \| version u128 \| cas u128 \| key \| value` |
//! | DEL    | `del_flags u8 \| cas u128 \| key` |
//! | INCRBY | `delta i64 \| key` |
//! | CLUSTER_MAP | empty (cluster mode only) |
//! | READ_REPLICA | `epoch u64 \| key` (cluster mode only) |
//! | MEMGEST | `count u32 \| arg * count` (cluster mode only; each arg ≤ `limits::KEY_BYTES_MAX`) |
//! | CHASE  | `depth u8 \| flags u8 \| limit u32 \| key \| links \| attrs` ([`super::chase`]) |
//! | AUTH   | `user \| password` (each `len u32 \| bytes` ≤ `limits::KEY_BYTES_MAX`; an empty user is `default`) |
//! | COMMAND | `count u32 \| arg * count` (1 ≤ count ≤ `limits::COMMAND_ARGS_MAX`, each arg `len u32 \| bytes` ≤ `limits::COMMAND_ARG_BYTES_MAX`; the command name first) |
//!
//! [`decode_request_frame`] (a single node) refuses the cluster-only opcodes as unknown;
//! [`decode_cluster_request_frame`] (a cluster-mode node) accepts them.
//!
//! Optional SET/DEL fields are always present at fixed offsets (fixed layout, one branch per
//! flag) and must be zero when their flag is clear, so every request has exactly one encoding.

use ringlet_types::{Epoch, MemgestId, Version};

use super::chase::ChaseRequest;
use super::cursor::Cursor;
use super::{decode_header, len32, put_bytes, put_header, Opcode, HEADER_BYTES};
use crate::error::DecodeError;
use crate::sink::Sink;

/// SET flag: only if the key does not exist (Redis NX).
pub const SET_NX: u8 = 0x01;
/// SET flag: only if the key exists (Redis XX).
pub const SET_XX: u8 = 0x02;
/// SET flag: `ttl_ms` is meaningful: expire `ttl_ms` after the write is applied.
pub const SET_TTL: u8 = 0x04;
/// SET flag: `version` is meaningful: store under this client-nominated version (it must be
/// higher than the stored one; loaders and repair use it).
pub const SET_VERSION: u8 = 0x08;
/// SET flag: `cas` is meaningful: write only if the current version equals `cas`.
pub const SET_CAS: u8 = 0x10;
/// SET flag: `memgest` is meaningful: store the key in this memgest.
pub const SET_MEMGEST: u8 = 0x20;
const SET_FLAGS_ALL: u8 = SET_NX | SET_XX | SET_TTL | SET_VERSION | SET_CAS | SET_MEMGEST;
/// Bytes of the fixed part of a SET body (before the key).
pub const SET_FIXED_BYTES: usize = 1 + 2 + 8 + 16 + 16;

/// DEL flag: `cas` is meaningful: delete only if the current version equals `cas`.
pub const DEL_CAS: u8 = 0x01;
/// Bytes of the fixed part of a DEL body (before the key).
pub const DEL_FIXED_BYTES: usize = 1 + 16;

/// Existence condition of a SET.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SetCond {
    /// Write unconditionally.
    #[default]
    Always,
    /// Only if absent (NX).
    IfAbsent,
    /// Only if present (XX).
    IfPresent,
}

/// The fields of a SET. Keys and values borrow from the frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetRequest<'a> {
    /// The key (≤ `limits::KEY_BYTES_MAX`).
    pub key: &'a [u8],
    /// The value (≤ `limits::VALUE_BYTES_MAX`).
    pub value: &'a [u8],
    /// NX / XX.
    pub cond: SetCond,
    /// Relative expiry in milliseconds (the server makes it absolute; clients' clocks are not
    /// trusted). `None`: no expiry.
    pub ttl_ms: Option<u64>,
    /// Client-nominated version.
    pub version: Option<Version>,
    /// Compare-and-set: the version the key must currently have (`Version::ZERO`: absent).
    pub cas: Option<Version>,
    /// Memgest to store the key in; `None`: keep the key's memgest (or the default).
    pub memgest: Option<MemgestId>,
}

/// A batch of keys (MGET), validated at decode time and iterated in place without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyList<'a> {
    pub(crate) count: u32,
    /// `(len u32 | key) * count`, already checked.
    pub(crate) raw: &'a [u8],
}

impl<'a> KeyList<'a> {
    /// Number of keys.
    pub fn len(&self) -> usize {
        self.count as usize
    }
    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The keys, in request order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut c = Cursor::new(self.raw);
        // Validated at decode: `key()` cannot fail here; stopping on error keeps this total.
        (0..self.count).map_while(move |_| c.key().ok())
    }
    pub(crate) fn parse(c: &mut Cursor<'a>) -> Result<KeyList<'a>, DecodeError> {
        // Each key takes at least its 4-byte length.
        let count = c.count(4)?;
        let raw = checked_items(c, count, Cursor::key)?;
        Ok(KeyList { count, raw })
    }
}

/// The arguments of a COMMAND frame (the command name first), validated at decode time —
/// count and every length checked against `limits` before anything is read or reserved —
/// and iterated in place without allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgList<'a> {
    count: u32,
    /// `(len u32 | arg) * count`, already checked.
    raw: &'a [u8],
}

impl<'a> ArgList<'a> {
    /// Number of arguments (≥ 1).
    pub fn len(&self) -> usize {
        self.count as usize
    }
    /// Whether there are no arguments (never, for a decoded frame).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The arguments, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut c = Cursor::new(self.raw);
        // Validated at decode: `arg()` cannot fail here; stopping on error keeps this total.
        (0..self.count).map_while(move |_| c.arg().ok())
    }
    fn parse(c: &mut Cursor<'a>) -> Result<ArgList<'a>, DecodeError> {
        let count = c.arg_count()?;
        let raw = checked_items(c, count, Cursor::arg)?;
        Ok(ArgList { count, raw })
    }
}

/// Checks `count` length-prefixed items at `c` with `item` (which bounds each length) and
/// returns their bytes; `c` is left after them, so `finish` reports trailing bytes.
fn checked_items<'a>(
    c: &mut Cursor<'a>,
    count: u32,
    item: fn(&mut Cursor<'a>) -> Result<&'a [u8], DecodeError>,
) -> Result<&'a [u8], DecodeError> {
    let start = c.remaining();
    let body = c.rest();
    let mut k = Cursor::new(body);
    for _ in 0..count {
        item(&mut k)?;
    }
    let used = start.saturating_sub(k.remaining());
    let raw = body.get(..used).ok_or(DecodeError::Truncated)?;
    *c = Cursor::new(body.get(used..).unwrap_or(&[]));
    Ok(raw)
}

/// A decoded request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeRequest<'a> {
    /// PING.
    Ping,
    /// GET key.
    Get {
        /// The key.
        key: &'a [u8],
    },
    /// MGET keys.
    Mget {
        /// The keys.
        keys: KeyList<'a>,
    },
    /// SET.
    Set(SetRequest<'a>),
    /// DEL key.
    Del {
        /// The key.
        key: &'a [u8],
        /// Delete only at this version.
        cas: Option<Version>,
    },
    /// INCRBY key delta.
    IncrBy {
        /// The key.
        key: &'a [u8],
        /// Amount to add (may be negative).
        delta: i64,
    },
    /// CHASE key links [DEPTH] [LIMIT] [FIELDS].
    Chase(ChaseRequest<'a>),
    /// AUTH: run as `user` (empty: `default`) from now on if `password` is its.
    Auth {
        /// The user's name; empty for `default`.
        user: &'a [u8],
        /// The password.
        password: &'a [u8],
    },
    /// COMMAND: any command of the RESP command layer, its RESP3 reply carried back as bytes.
    Command {
        /// The command's name and arguments.
        args: ArgList<'a>,
    },
}

impl NativeRequest<'_> {
    /// The opcode of this request.
    pub fn opcode(&self) -> Opcode {
        match self {
            NativeRequest::Ping => Opcode::Ping,
            NativeRequest::Get { .. } => Opcode::Get,
            NativeRequest::Mget { .. } => Opcode::Mget,
            NativeRequest::Set(_) => Opcode::Set,
            NativeRequest::Del { .. } => Opcode::Del,
            NativeRequest::IncrBy { .. } => Opcode::IncrBy,
            NativeRequest::Chase(_) => Opcode::Chase,
            NativeRequest::Auth { .. } => Opcode::Auth,
            NativeRequest::Command { .. } => Opcode::Command,
        }
    }
}

/// A request with its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestFrame<'a> {
    /// Echo this in the response.
    pub request_id: u64,
    /// The operation.
    pub request: NativeRequest<'a>,
}

/// Decode one request frame from the start of `buf`: `Ok(None)` until the whole frame has
/// arrived (nothing allocated, ever), else the frame and its length.
///
/// # Errors
/// Header errors (see [`super::decode_header`]), a response frame where a request was expected
/// ([`DecodeError::InvalidField`]), limits ([`DecodeError::KeyTooLarge`], ...), malformed bodies
/// ([`DecodeError::Truncated`], [`DecodeError::TrailingBytes`]). All mean: close the connection.
pub fn decode_request_frame(buf: &[u8]) -> Result<Option<(RequestFrame<'_>, usize)>, DecodeError> {
    match decode_cluster_request_frame(buf)? {
        None => Ok(None),
        Some((f, n)) => match f.request {
            ClusterRequest::Data(request) => Ok(Some((
                RequestFrame {
                    request_id: f.request_id,
                    request,
                },
                n,
            ))),
            // A single-node server knows nothing of cluster maps: to it these opcodes are as
            // unknown as they were before they existed (the connection closes).
            ClusterRequest::ClusterMap => Err(DecodeError::UnknownOpcode(Opcode::ClusterMap as u8)),
            ClusterRequest::ReadReplica { .. } => {
                Err(DecodeError::UnknownOpcode(Opcode::ReadReplica as u8))
            }
            ClusterRequest::Memgest { .. } => {
                Err(DecodeError::UnknownOpcode(Opcode::Memgest as u8))
            }
        },
    }
}

/// A request a cluster-mode node serves: the data operations of a single node plus the
/// cluster-only opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterRequest<'a> {
    /// PING, GET, MGET, SET, DEL, INCRBY.
    Data(NativeRequest<'a>),
    /// CLUSTER_MAP: send the node's cluster map. Empty body.
    ClusterMap,
    /// READ_REPLICA: one quorum-read leg. `epoch` is the epoch of the client's map (the map
    /// it chose the cohort from); a node in another epoch answers `STALE_EPOCH`.
    ReadReplica {
        /// The client's map epoch.
        epoch: Epoch,
        /// The key.
        key: &'a [u8],
    },
    /// MEMGEST: a memgest management command. `args` are the words after `MEMGEST` (e.g.
    /// `CREATE cold ec 3 2`, `MOVE key name`); at most `limits::BATCH_KEYS_MAX` of them, each
    /// at most `limits::KEY_BYTES_MAX` bytes (an argument may be a key). Same layout as MGET's
    /// key list, validated at decode, iterated in place.
    Memgest {
        /// The subcommand and its arguments.
        args: KeyList<'a>,
    },
}

impl ClusterRequest<'_> {
    /// The opcode of this request.
    pub fn opcode(&self) -> Opcode {
        match self {
            ClusterRequest::Data(r) => r.opcode(),
            ClusterRequest::ClusterMap => Opcode::ClusterMap,
            ClusterRequest::ReadReplica { .. } => Opcode::ReadReplica,
            ClusterRequest::Memgest { .. } => Opcode::Memgest,
        }
    }
}

/// A cluster-mode request with its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterRequestFrame<'a> {
    /// Echo this in the response.
    pub request_id: u64,
    /// The operation.
    pub request: ClusterRequest<'a>,
}

/// Decode one request frame as a cluster-mode node does: like [`decode_request_frame`], and
/// also the cluster-only opcodes (CLUSTER_MAP, READ_REPLICA).
///
/// # Errors
/// As [`decode_request_frame`].
pub fn decode_cluster_request_frame(
    buf: &[u8],
) -> Result<Option<(ClusterRequestFrame<'_>, usize)>, DecodeError> {
    let Some(h) = decode_header(buf)? else {
        return Ok(None);
    };
    if h.is_response() {
        return Err(DecodeError::InvalidField("response flag on a request"));
    }
    let len = h.frame_len();
    let Some(body) = buf.get(HEADER_BYTES..len) else {
        return Ok(None);
    };
    let mut c = Cursor::new(body);
    let data = |r| ClusterRequest::Data(r);
    let request = match h.opcode {
        Opcode::Ping => data(NativeRequest::Ping),
        Opcode::Get => data(NativeRequest::Get { key: c.key()? }),
        Opcode::Mget => data(NativeRequest::Mget {
            keys: KeyList::parse(&mut c)?,
        }),
        Opcode::Set => data(NativeRequest::Set(decode_set(&mut c)?)),
        Opcode::Del => {
            let flags = c.u8()?;
            if flags & !DEL_CAS != 0 {
                return Err(DecodeError::InvalidField("DEL flags"));
            }
            let cas = optional(flags & DEL_CAS != 0, c.u128()?, "DEL cas")?;
            data(NativeRequest::Del {
                key: c.key()?,
                cas: cas.map(Version),
            })
        }
        Opcode::IncrBy => {
            let delta = c.i64()?;
            data(NativeRequest::IncrBy {
                key: c.key()?,
                delta,
            })
        }
        Opcode::ClusterMap => ClusterRequest::ClusterMap,
        Opcode::ReadReplica => {
            let epoch = Epoch(c.u64()?);
            ClusterRequest::ReadReplica {
                epoch,
                key: c.key()?,
            }
        }
        Opcode::Memgest => ClusterRequest::Memgest {
            args: KeyList::parse(&mut c)?,
        },
        Opcode::Chase => data(NativeRequest::Chase(ChaseRequest::decode(&mut c)?)),
        Opcode::Auth => data(NativeRequest::Auth {
            user: c.key()?,
            password: c.key()?,
        }),
        Opcode::Command => data(NativeRequest::Command {
            args: ArgList::parse(&mut c)?,
        }),
    };
    c.finish()?;
    Ok(Some((
        ClusterRequestFrame {
            request_id: h.request_id,
            request,
        },
        len,
    )))
}

/// Encode any cluster-mode request.
pub fn encode_cluster_request_frame<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    req: &ClusterRequest<'_>,
) {
    match req {
        ClusterRequest::Data(r) => encode_request_frame(out, request_id, r),
        ClusterRequest::ClusterMap => encode_cluster_map_request(out, request_id),
        ClusterRequest::ReadReplica { epoch, key } => {
            encode_read_replica(out, request_id, *epoch, key)
        }
        ClusterRequest::Memgest { args } => {
            // The list was validated at decode: write it back as it came.
            put_raw_args(out, Opcode::Memgest, request_id, args.count, args.raw)
        }
    }
}

/// MEMGEST `args` (the words after `MEMGEST`). The caller keeps each argument within
/// `limits::KEY_BYTES_MAX` and their number within `limits::BATCH_KEYS_MAX`; the node refuses
/// the frame otherwise.
pub fn encode_memgest<S: Sink + ?Sized, A: AsRef<[u8]>>(out: &mut S, request_id: u64, args: &[A]) {
    put_args(out, Opcode::Memgest, request_id, args)
}

/// CLUSTER_MAP (empty body).
pub fn encode_cluster_map_request<S: Sink + ?Sized>(out: &mut S, request_id: u64) {
    put_header(out, Opcode::ClusterMap, 0, request_id, 0);
}

/// READ_REPLICA `key` for a client whose map has `epoch`.
pub fn encode_read_replica<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    epoch: Epoch,
    key: &[u8],
) {
    put_header(
        out,
        Opcode::ReadReplica,
        0,
        request_id,
        12usize.saturating_add(key.len()),
    );
    out.put(&epoch.0.to_be_bytes());
    put_bytes(out, key);
}

/// A fixed-offset optional field: present iff its flag is set, zero otherwise.
fn optional<T: PartialEq + Default>(
    flag: bool,
    v: T,
    what: &'static str,
) -> Result<Option<T>, DecodeError> {
    if flag {
        Ok(Some(v))
    } else if v == T::default() {
        Ok(None)
    } else {
        Err(DecodeError::InvalidField(what))
    }
}

fn decode_set<'a>(c: &mut Cursor<'a>) -> Result<SetRequest<'a>, DecodeError> {
    let flags = c.u8()?;
    if flags & !SET_FLAGS_ALL != 0 {
        return Err(DecodeError::InvalidField("SET flags"));
    }
    let cond = match (flags & SET_NX != 0, flags & SET_XX != 0) {
        (false, false) => SetCond::Always,
        (true, false) => SetCond::IfAbsent,
        (false, true) => SetCond::IfPresent,
        (true, true) => return Err(DecodeError::InvalidField("SET with both NX and XX")),
    };
    let memgest = optional(flags & SET_MEMGEST != 0, c.u16()?, "SET memgest")?;
    let ttl_ms = optional(flags & SET_TTL != 0, c.u64()?, "SET ttl")?;
    let version = optional(flags & SET_VERSION != 0, c.u128()?, "SET version")?;
    let cas = optional(flags & SET_CAS != 0, c.u128()?, "SET cas")?;
    Ok(SetRequest {
        key: c.key()?,
        value: c.value()?,
        cond,
        ttl_ms,
        version: version.map(Version),
        cas: cas.map(Version),
        memgest: memgest.map(MemgestId),
    })
}

/// Encode any request.
pub fn encode_request_frame<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    req: &NativeRequest<'_>,
) {
    match req {
        NativeRequest::Ping => encode_ping(out, request_id),
        NativeRequest::Get { key } => encode_get(out, request_id, key),
        NativeRequest::Mget { keys } => {
            put_header(
                out,
                Opcode::Mget,
                0,
                request_id,
                4usize.saturating_add(keys.raw.len()),
            );
            out.put(&keys.count.to_be_bytes());
            out.put(keys.raw);
        }
        NativeRequest::Set(s) => encode_set(out, request_id, s),
        NativeRequest::Del { key, cas } => encode_del(out, request_id, key, *cas),
        NativeRequest::IncrBy { key, delta } => encode_incr_by(out, request_id, key, *delta),
        NativeRequest::Chase(c) => c.encode(out, request_id),
        NativeRequest::Auth { user, password } => encode_auth(out, request_id, user, password),
        NativeRequest::Command { args } => {
            // Validated at decode: write it back as it came.
            put_raw_args(out, Opcode::Command, request_id, args.count, args.raw)
        }
    }
}

/// COMMAND `args` (the command's name first). The caller keeps the count within
/// `1..=limits::COMMAND_ARGS_MAX` and each argument within `limits::COMMAND_ARG_BYTES_MAX`
/// (the client checks before encoding); the node refuses the frame otherwise.
pub fn encode_command<S: Sink + ?Sized, A: AsRef<[u8]>>(out: &mut S, request_id: u64, args: &[A]) {
    put_args(out, Opcode::Command, request_id, args)
}

/// An argument-list frame (MEMGEST, COMMAND): `count u32 | (len u32 | arg) * count`.
fn put_args<S: Sink + ?Sized, A: AsRef<[u8]>>(
    out: &mut S,
    opcode: Opcode,
    request_id: u64,
    args: &[A],
) {
    let body = args.iter().fold(4usize, |n, a| {
        n.saturating_add(4).saturating_add(a.as_ref().len())
    });
    put_header(out, opcode, 0, request_id, body);
    out.put(&len32(args.len()).to_be_bytes());
    for a in args {
        put_bytes(out, a.as_ref());
    }
}

/// An argument-list frame whose list was validated at decode, written back as it came.
fn put_raw_args<S: Sink + ?Sized>(
    out: &mut S,
    opcode: Opcode,
    request_id: u64,
    count: u32,
    raw: &[u8],
) {
    put_header(out, opcode, 0, request_id, 4usize.saturating_add(raw.len()));
    out.put(&count.to_be_bytes());
    out.put(raw);
}

/// PING.
pub fn encode_ping<S: Sink + ?Sized>(out: &mut S, request_id: u64) {
    put_header(out, Opcode::Ping, 0, request_id, 0);
}

/// GET `key`.
pub fn encode_get<S: Sink + ?Sized>(out: &mut S, request_id: u64, key: &[u8]) {
    put_header(
        out,
        Opcode::Get,
        0,
        request_id,
        4usize.saturating_add(key.len()),
    );
    put_bytes(out, key);
}

/// AUTH as `user` (empty: `default`) with `password`. The caller keeps both within
/// `limits::KEY_BYTES_MAX` (the server refuses longer ones as a malformed frame).
pub fn encode_auth<S: Sink + ?Sized>(out: &mut S, request_id: u64, user: &[u8], password: &[u8]) {
    put_header(
        out,
        Opcode::Auth,
        0,
        request_id,
        8usize
            .saturating_add(user.len())
            .saturating_add(password.len()),
    );
    put_bytes(out, user);
    put_bytes(out, password);
}

/// MGET `keys`.
pub fn encode_mget<S: Sink + ?Sized, K: AsRef<[u8]>>(out: &mut S, request_id: u64, keys: &[K]) {
    let body = keys.iter().fold(4usize, |n, k| {
        n.saturating_add(4).saturating_add(k.as_ref().len())
    });
    put_header(out, Opcode::Mget, 0, request_id, body);
    out.put(&len32(keys.len()).to_be_bytes());
    for k in keys {
        put_bytes(out, k.as_ref());
    }
}

/// SET with all its options.
pub fn encode_set<S: Sink + ?Sized>(out: &mut S, request_id: u64, s: &SetRequest<'_>) {
    let body = SET_FIXED_BYTES
        .saturating_add(8)
        .saturating_add(s.key.len())
        .saturating_add(s.value.len());
    put_header(out, Opcode::Set, 0, request_id, body);
    let mut flags = match s.cond {
        SetCond::Always => 0,
        SetCond::IfAbsent => SET_NX,
        SetCond::IfPresent => SET_XX,
    };
    if s.ttl_ms.is_some() {
        flags |= SET_TTL;
    }
    if s.version.is_some() {
        flags |= SET_VERSION;
    }
    if s.cas.is_some() {
        flags |= SET_CAS;
    }
    if s.memgest.is_some() {
        flags |= SET_MEMGEST;
    }
    out.put_u8(flags);
    out.put(&s.memgest.map_or(0, |m| m.0).to_be_bytes());
    out.put(&s.ttl_ms.unwrap_or(0).to_be_bytes());
    out.put(&s.version.unwrap_or_default().to_be_bytes());
    out.put(&s.cas.unwrap_or_default().to_be_bytes());
    put_bytes(out, s.key);
    put_bytes(out, s.value);
}

/// DEL `key`, optionally only at version `cas`.
pub fn encode_del<S: Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    key: &[u8],
    cas: Option<Version>,
) {
    let body = DEL_FIXED_BYTES.saturating_add(4).saturating_add(key.len());
    put_header(out, Opcode::Del, 0, request_id, body);
    out.put_u8(if cas.is_some() { DEL_CAS } else { 0 });
    out.put(&cas.unwrap_or_default().to_be_bytes());
    put_bytes(out, key);
}

/// INCRBY `key` `delta`.
pub fn encode_incr_by<S: Sink + ?Sized>(out: &mut S, request_id: u64, key: &[u8], delta: i64) {
    put_header(
        out,
        Opcode::IncrBy,
        0,
        request_id,
        12usize.saturating_add(key.len()),
    );
    out.put(&delta.to_be_bytes());
    put_bytes(out, key);
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use ringlet_types::limits;

    fn round_trip(req: NativeRequest<'_>) {
        let mut out = Vec::new();
        encode_request_frame(&mut out, 77, &req);
        let (f, n) = decode_request_frame(&out).unwrap().unwrap();
        assert_eq!(n, out.len());
        assert_eq!(f.request_id, 77);
        assert_eq!(f.request, req);
        for i in 0..out.len() {
            assert_eq!(decode_request_frame(&out[..i]).unwrap(), None);
        }
    }

    #[test]
    fn every_opcode_round_trips() {
        round_trip(NativeRequest::Ping);
        round_trip(NativeRequest::Get { key: b"k" });
        round_trip(NativeRequest::Del {
            key: b"k",
            cas: Some(Version(5)),
        });
        round_trip(NativeRequest::IncrBy {
            key: b"n",
            delta: -3,
        });
        round_trip(NativeRequest::Auth {
            user: b"app",
            password: b"s3cret",
        });
        round_trip(NativeRequest::Auth {
            user: b"",
            password: b"",
        });
        round_trip(NativeRequest::Set(SetRequest {
            key: b"k",
            value: b"v",
            cond: SetCond::IfAbsent,
            ttl_ms: Some(1000),
            version: Some(Version(1 << 90)),
            cas: None,
            memgest: Some(MemgestId(3)),
        }));
        let mut out = Vec::new();
        encode_mget(&mut out, 9, &[&b"a"[..], b"bb", b""]);
        let (f, _) = decode_request_frame(&out).unwrap().unwrap();
        let NativeRequest::Mget { keys } = f.request else {
            panic!("not mget")
        };
        assert_eq!(keys.iter().collect::<Vec<_>>(), vec![&b"a"[..], b"bb", b""]);
        round_trip(f.request);
    }

    #[test]
    fn auth_lengths_are_checked_before_the_bytes_arrive() {
        let mut out = Vec::new();
        encode_auth(&mut out, 1, b"u", b"p");
        // The password's length over the limit: refused from the length alone.
        out[21..25].copy_from_slice(&(limits::KEY_BYTES_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_request_frame(&out),
            Err(DecodeError::KeyTooLarge(limits::KEY_BYTES_MAX + 1))
        );
        // A body one byte short of its lengths: truncated, not a panic.
        let mut out = Vec::new();
        encode_auth(&mut out, 1, b"u", b"p");
        out[12..16].copy_from_slice(&9u32.to_be_bytes());
        out.pop();
        assert_eq!(decode_request_frame(&out), Err(DecodeError::Truncated));
    }

    #[test]
    fn limits_and_malformed_bodies() {
        // GET with a key length over the limit: refused before waiting for the key bytes.
        let mut out = Vec::new();
        encode_get(&mut out, 1, b"k");
        out[16..20].copy_from_slice(&(limits::KEY_BYTES_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_request_frame(&out),
            Err(DecodeError::KeyTooLarge(limits::KEY_BYTES_MAX + 1))
        );
        // Trailing bytes.
        let mut out = Vec::new();
        encode_get(&mut out, 1, b"k");
        out[15] += 1;
        out.push(0);
        assert_eq!(decode_request_frame(&out), Err(DecodeError::TrailingBytes));
        // MGET count larger than the body could hold.
        let mut out = Vec::new();
        encode_mget::<_, &[u8]>(&mut out, 1, &[]);
        out[16..20].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(decode_request_frame(&out), Err(DecodeError::Truncated));
        // NX and XX together.
        let mut out = Vec::new();
        encode_set(
            &mut out,
            1,
            &SetRequest {
                key: b"k",
                value: b"v",
                ..Default::default()
            },
        );
        out[16] = SET_NX | SET_XX;
        assert!(matches!(
            decode_request_frame(&out),
            Err(DecodeError::InvalidField(_))
        ));
        // A flagged-off field that is not zero.
        out[16] = 0;
        out[20] = 1; // inside ttl_ms
        assert!(matches!(
            decode_request_frame(&out),
            Err(DecodeError::InvalidField(_))
        ));
    }

    #[test]
    fn cluster_opcodes_round_trip_and_single_node_refuses_them() {
        let mut memgest_buf = Vec::new();
        encode_memgest(&mut memgest_buf, 9, &["CREATE", "cold", "ec", "3", "2"]);
        fn memgest_req(buf: &[u8]) -> ClusterRequest<'_> {
            let (f, _) = decode_cluster_request_frame(buf).unwrap().unwrap();
            let ClusterRequest::Memgest { args } = f.request else {
                panic!("not MEMGEST")
            };
            let words: Vec<&[u8]> = args.iter().collect();
            assert_eq!(words, [&b"CREATE"[..], b"cold", b"ec", b"3", b"2"]);
            f.request
        }
        for req in [
            ClusterRequest::ClusterMap,
            ClusterRequest::ReadReplica {
                epoch: Epoch(42),
                key: b"user:1",
            },
            ClusterRequest::Data(NativeRequest::Get { key: b"k" }),
            memgest_req(&memgest_buf),
        ] {
            let mut out = Vec::new();
            encode_cluster_request_frame(&mut out, 5, &req);
            let (f, n) = decode_cluster_request_frame(&out).unwrap().unwrap();
            assert_eq!((f.request_id, f.request, n), (5, req, out.len()));
            assert_eq!(f.request.opcode() as u8, out[2]);
            for i in 0..out.len() {
                assert_eq!(decode_cluster_request_frame(&out[..i]).unwrap(), None);
            }
            let single = decode_request_frame(&out);
            match req {
                ClusterRequest::Data(r) => assert_eq!(single.unwrap().unwrap().0.request, r),
                _ => assert_eq!(single, Err(DecodeError::UnknownOpcode(out[2]))),
            }
        }
        // READ_REPLICA key over the limit.
        let mut out = Vec::new();
        encode_read_replica(&mut out, 1, Epoch(1), b"k");
        out[24..28].copy_from_slice(&(limits::KEY_BYTES_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_cluster_request_frame(&out),
            Err(DecodeError::KeyTooLarge(limits::KEY_BYTES_MAX + 1))
        );
        // MEMGEST: too many arguments, or an argument over the key limit, are refused.
        let mut out = Vec::new();
        encode_memgest(&mut out, 1, &["LIST"]);
        out[16..20].copy_from_slice(&(limits::BATCH_KEYS_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_cluster_request_frame(&out),
            Err(DecodeError::BatchTooLarge(limits::BATCH_KEYS_MAX + 1))
        );
        let mut out = Vec::new();
        encode_memgest(&mut out, 1, &["LIST"]);
        out[20..24].copy_from_slice(&(limits::KEY_BYTES_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_cluster_request_frame(&out),
            Err(DecodeError::KeyTooLarge(limits::KEY_BYTES_MAX + 1))
        );
        // CLUSTER_MAP with a body is malformed.
        let mut out = Vec::new();
        encode_cluster_map_request(&mut out, 1);
        out[15] = 1;
        out.push(0);
        assert_eq!(
            decode_cluster_request_frame(&out),
            Err(DecodeError::TrailingBytes)
        );
    }

    #[test]
    fn command_round_trips_and_accepts_value_sized_arguments() {
        // An argument past the key limit is fine: COMMAND carries values (HSET k f <value>).
        let big = vec![b'x'; limits::KEY_BYTES_MAX as usize + 1];
        let args: [&[u8]; 4] = [b"HSET", b"k", b"f", &big];
        let mut out = Vec::new();
        encode_command(&mut out, 42, &args);
        let (f, n) = decode_request_frame(&out).unwrap().unwrap();
        assert_eq!((f.request_id, n), (42, out.len()));
        let NativeRequest::Command { args: got } = f.request else {
            panic!("not COMMAND")
        };
        assert_eq!(got.len(), 4);
        assert_eq!(got.iter().collect::<Vec<_>>(), args.to_vec());
        round_trip(f.request);
        // The cluster decoder sees it as a data request (both fronts serve it).
        let (cf, _) = decode_cluster_request_frame(&out).unwrap().unwrap();
        assert_eq!(cf.request, ClusterRequest::Data(f.request));
        assert_eq!(cf.request.opcode(), Opcode::Command);
    }

    #[test]
    fn command_counts_and_lengths_are_checked_before_allocation() {
        let mut base = Vec::new();
        encode_command(&mut base, 1, &["GET", "k"]);
        // No arguments at all: there is no command to run.
        let mut out = base.clone();
        out[12..16].copy_from_slice(&4u32.to_be_bytes());
        out.truncate(20);
        out[16..20].copy_from_slice(&0u32.to_be_bytes());
        assert!(matches!(
            decode_request_frame(&out),
            Err(DecodeError::InvalidField(_))
        ));
        // A count over the limit: refused from the count alone.
        let mut out = base.clone();
        out[16..20].copy_from_slice(&(limits::COMMAND_ARGS_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_request_frame(&out),
            Err(DecodeError::BatchTooLarge(limits::COMMAND_ARGS_MAX + 1))
        );
        // A count the body cannot hold (4 bytes per argument at least): truncated.
        let mut out = base.clone();
        out[16..20].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(decode_request_frame(&out), Err(DecodeError::Truncated));
        // An argument length over the limit: refused before its bytes are looked at.
        let mut out = base.clone();
        out[20..24].copy_from_slice(&(limits::COMMAND_ARG_BYTES_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_request_frame(&out),
            Err(DecodeError::ValueTooLarge(
                limits::COMMAND_ARG_BYTES_MAX + 1
            ))
        );
        // An argument longer than what is left of the body: truncated, not a panic.
        let mut out = base.clone();
        out[20..24].copy_from_slice(&100u32.to_be_bytes());
        assert_eq!(decode_request_frame(&out), Err(DecodeError::Truncated));
        // Bytes after the last argument.
        let mut out = base.clone();
        out[15] += 1;
        out.push(0);
        assert_eq!(decode_request_frame(&out), Err(DecodeError::TrailingBytes));
        // Every prefix of a good frame is "incomplete", never an error.
        for i in 0..base.len() {
            assert_eq!(decode_request_frame(&base[..i]).unwrap(), None);
        }
    }
}
