//! Peer frames: the binary form of [`PeerMsg`] on node-to-node links.
//!
//! ```text
//!  frame:   +-----------+--------+---------------------------+
//!           | len u32 BE| kind u8| payload (len - 1 bytes)   |
//!           +-----------+--------+---------------------------+
//!  kind 1 HELLO:  magic "RGLP" | version u16 | from node u32 | incarnation u64
//!  kind 2 PEER:   epoch u64 | incarnation u64 | tag u8 | body (per tag, below)
//!  kind 3 CHUNK:  more u8 | piece of a frame body (kind + payload) too large for one
//!                 chunk (limits::PEER_CHUNK_BYTES); the pieces, joined in order up to the
//!                 one with more = 0, are that frame's body. A sender chunks one frame at a
//!                 time, so pieces of two frames never interleave (whole frames may).
//!
//!  bytes  = len u32 | data           (len checked against the key/value limit first)
//!  entry  = version u128 | memgest u16 | has_value u8 | [value bytes]
//!  list   = count u32 | items        (count checked against its bound AND against the
//!                                     bytes left / the smallest item size)
//!  cursor = has u8 | [slot u16 | key bytes]
//!  ec tags 13..=20 (EcUpdate, EcAck, EcMetaReq, EcMetaResp, EcReadReq, EcReadResp,
//!  EcSyncReq, EcSyncResp) and 22, 23 (EcRelease, EcReleased: memgest u16 | pg u32 | pos u32),
//!  with
//!  ecmeta  = tag u8 (0 none | 1 put | 2 delete | 3 retire | 4 record put | 5 put with
//!            expiry | 6 record put with expiry) | [key bytes | version u128
//!            | (put: offset u64 | len u64 | (5, 6: expiry u64))]
//!  keymeta = key bytes | version u128 | offset u64 | len u64 | flag u8 (0 string | 1
//!            tombstone | 2 record | 3 string with expiry | 4 record with expiry)
//!            | (3, 4: expiry u64)
//!  range   = parity u8 | index u64 | offset u64 | len u32
//!  (every delta, piece and snapshot page is checked against VALUE_BYTES_MAX, every list
//!  against its bound and the bytes left)
//! ```
//!
//! Integers are big-endian. Why hand-written rather than serde + bincode: the replica core's
//! types carry no serde derives, and a mirror type set plus conversions is as much code as
//! this, without the per-field limit checks this decoder makes before every allocation.
//! Every decode error is a typed [`WireError`]; the link that sent it is closed.

use ringlet_replica::{EcKeyMeta, EcMeta, EcRange, Entry, PeerBody, PeerMsg, PullPurpose};
use ringlet_types::{limits, Epoch, MemgestId, NodeId, Slot, ValueKind, Version};
use thiserror::Error;

/// Largest peer frame: a pull or repair page is cut at 4 MiB but always carries at least
/// one entry, which may be a maximum-size entry; plus headers.
pub const PEER_FRAME_BYTES_MAX: u32 = limits::ENTRY_BYTES_MAX + 8 * 1024 * 1024;
/// Items in one list of a peer message: pages and key lists are bounded by the replica
/// core at a few thousand; anything beyond this is malformed.
pub const PEER_LIST_ITEMS_MAX: u32 = 1 << 20;
/// Protocol version in HELLO. 2: entries may carry an expiry (value flag 2). 3: records
/// (value flags 3 and 4). 4: CHUNK frames. 5: ec key metadata may carry an expiry (ecmeta
/// tags 5 and 6, keymeta flags 3 and 4). 6: EcMetaResp names the answering group position;
/// EcRelease / EcReleased (a draining node's kept parity).
pub const PEER_PROTOCOL_VERSION: u16 = 6;
const MAGIC: &[u8; 4] = b"RGLP";

pub const KIND_HELLO: u8 = 1;
pub const KIND_PEER: u8 = 2;
pub const KIND_CHUNK: u8 = 3;

/// A malformed frame.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum WireError {
    #[error("frame of {0} bytes exceeds the peer frame limit")]
    FrameTooLarge(u64),
    #[error("empty frame")]
    Empty,
    #[error("truncated: needed {needed} more bytes")]
    Truncated { needed: usize },
    #[error("{what} of {len} exceeds its limit {max}")]
    TooLong {
        what: &'static str,
        len: u64,
        max: u64,
    },
    #[error("unknown {what} tag {tag}")]
    BadTag { what: &'static str, tag: u8 },
    #[error("bad hello: {0}")]
    Hello(&'static str),
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// First frame on a peer link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub from: NodeId,
    pub incarnation: u64,
}

/// A decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    Peer(PeerMsg),
    /// A piece of a larger frame's body ([`chunk_frame`]); `more` is false on the last.
    Chunk {
        more: bool,
        piece: Vec<u8>,
    },
}

// ------------------------------------------------------------------ encode

struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn entry(&mut self, e: &Entry) {
        self.0.extend_from_slice(&e.version.to_be_bytes());
        self.u16(e.memgest.0);
        // Flag: 0 tombstone, 1 value, 2 value with an expiry (u64 unix ms after the bytes);
        // 3 and 4 the same for a record (protocol 3).
        let record = u8::from(e.kind == ValueKind::Record) * 2;
        match (&e.value, e.expiry_ms) {
            (Some(v), None) => {
                self.u8(1 + record);
                self.bytes(v);
            }
            (Some(v), Some(x)) => {
                self.u8(2 + record);
                self.bytes(v);
                self.u64(x);
            }
            (None, _) => self.u8(0),
        }
    }
    fn entries(&mut self, es: &[(Vec<u8>, Entry)]) {
        self.u32(es.len() as u32);
        for (k, e) in es {
            self.bytes(k);
            self.entry(e);
        }
    }
    fn version(&mut self, v: &Version) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn ec_meta(&mut self, m: &EcMeta) {
        match m {
            EcMeta::None => self.u8(0),
            EcMeta::Put {
                key,
                version,
                offset,
                len,
                kind,
                expiry_ms,
            } => {
                // 1: a string's location, 4: a record's (protocol 3); 5 and 6: the same with
                // an expiry after them (protocol 5). Values without a TTL keep tags 1 and 4.
                let record = *kind == ValueKind::Record;
                self.u8(match (record, expiry_ms.is_some()) {
                    (false, false) => 1,
                    (true, false) => 4,
                    (false, true) => 5,
                    (true, true) => 6,
                });
                self.bytes(key);
                self.version(version);
                self.u64(*offset);
                self.u64(*len);
                if let Some(x) = expiry_ms {
                    self.u64(*x);
                }
            }
            EcMeta::Delete { key, version } => {
                self.u8(2);
                self.bytes(key);
                self.version(version);
            }
            EcMeta::Retire { key, version } => {
                self.u8(3);
                self.bytes(key);
                self.version(version);
            }
        }
    }
    fn key_metas(&mut self, ks: &[EcKeyMeta]) {
        self.u32(ks.len() as u32);
        for k in ks {
            self.bytes(&k.key);
            self.version(&k.version);
            self.u64(k.offset);
            self.u64(k.len);
            // 0 live string, 1 tombstone, 2 live record (protocol 3); 3 and 4: a live
            // string / record with an expiry after the flag (protocol 5).
            let expiry = k.expiry_ms.filter(|_| !k.tombstone);
            self.u8(match (k.tombstone, k.kind, expiry.is_some()) {
                (true, _, _) => 1,
                (false, ValueKind::String, false) => 0,
                (false, ValueKind::Record, false) => 2,
                (false, ValueKind::String, true) => 3,
                (false, ValueKind::Record, true) => 4,
            });
            if let Some(x) = expiry {
                self.u64(x);
            }
        }
    }
    fn cursor(&mut self, c: &Option<(Slot, Vec<u8>)>) {
        match c {
            Some((s, k)) => {
                self.u8(1);
                self.u16(*s);
                self.bytes(k);
            }
            None => self.u8(0),
        }
    }
    fn opt_key(&mut self, k: &Option<Vec<u8>>) {
        match k {
            Some(k) => {
                self.u8(1);
                self.bytes(k);
            }
            None => self.u8(0),
        }
    }
}

fn frame(kind: u8, body: impl FnOnce(&mut Enc)) -> Vec<u8> {
    let mut e = Enc(Vec::with_capacity(64));
    e.u32(0);
    e.u8(kind);
    body(&mut e);
    let len = (e.0.len() - 4) as u32;
    e.0[..4].copy_from_slice(&len.to_be_bytes());
    e.0
}

/// Split an encoded frame (`len u32 | body`) into CHUNK frames of at most
/// [`limits::PEER_CHUNK_BYTES`] of its body each, or `None` if it fits in one chunk. The
/// receiver joins the pieces ([`Assembly`]) and decodes the body as if it had come whole.
pub fn chunk_frame(frame: &[u8]) -> Option<impl Iterator<Item = Vec<u8>> + '_> {
    let body = frame.get(4..)?;
    let n = limits::PEER_CHUNK_BYTES as usize;
    if body.len() <= n {
        return None;
    }
    let count = body.len().div_ceil(n);
    Some(body.chunks(n).enumerate().map(move |(i, piece)| {
        let mut f = Vec::with_capacity(6 + piece.len());
        f.extend_from_slice(&chunk_header(piece.len(), i + 1 < count));
        f.extend_from_slice(piece);
        f
    }))
}

/// The 6 bytes before a chunk's piece: `len u32 | KIND_CHUNK | more u8`.
pub fn chunk_header(piece_len: usize, more: bool) -> [u8; 6] {
    let mut h = [0u8; 6];
    h[..4].copy_from_slice(&((2 + piece_len) as u32).to_be_bytes());
    h[4] = KIND_CHUNK;
    h[5] = u8::from(more);
    h
}

/// The receiving side of [`chunk_frame`]: joins pieces into one body, bounded by
/// [`PEER_FRAME_BYTES_MAX`] like a frame that came whole; the buffer grows with the bytes
/// that arrived.
#[derive(Debug, Default)]
pub struct Assembly {
    body: Vec<u8>,
}

impl Assembly {
    /// Add a piece; with the last one, the whole frame.
    ///
    /// # Errors
    /// The joined body would exceed the frame limit, a piece is empty, or the joined body
    /// is itself a CHUNK or fails to decode.
    pub fn push(&mut self, more: bool, piece: &[u8]) -> Result<Option<Frame>, WireError> {
        if piece.is_empty() {
            return Err(WireError::Empty);
        }
        let total = self.body.len() as u64 + piece.len() as u64;
        if total > u64::from(PEER_FRAME_BYTES_MAX) {
            return Err(WireError::FrameTooLarge(total));
        }
        self.body.extend_from_slice(piece);
        if more {
            return Ok(None);
        }
        let body = std::mem::take(&mut self.body);
        match decode_body(&body)? {
            Frame::Chunk { .. } => Err(WireError::BadTag {
                what: "chunked frame kind",
                tag: KIND_CHUNK,
            }),
            f => Ok(Some(f)),
        }
    }

    /// Bytes held for an unfinished frame.
    pub fn pending_bytes(&self) -> usize {
        self.body.len()
    }
}

/// Encode a HELLO frame.
pub fn encode_hello(h: &Hello) -> Vec<u8> {
    frame(KIND_HELLO, |e| {
        e.0.extend_from_slice(MAGIC);
        e.u16(PEER_PROTOCOL_VERSION);
        e.u32(h.from.0);
        e.u64(h.incarnation);
    })
}

/// Encode a peer message frame. Messages the replica core builds are within the limits by
/// construction (its pages are bounded); [`decode_frame`] checks them anyway on the far side.
pub fn encode_peer(m: &PeerMsg) -> Vec<u8> {
    frame(KIND_PEER, |e| {
        e.u64(m.epoch.0);
        e.u64(m.incarnation);
        match &m.body {
            PeerBody::Replicate { key, entry } => {
                e.u8(1);
                e.bytes(key);
                e.entry(entry);
            }
            PeerBody::ReplicateAck { key, version, ok } => {
                e.u8(2);
                e.bytes(key);
                e.0.extend_from_slice(&version.to_be_bytes());
                e.u8(u8::from(*ok));
            }
            PeerBody::PullReq {
                id,
                purpose,
                first,
                last,
                after,
                delta,
                have,
            } => {
                e.u8(3);
                e.u64(*id);
                e.u8(match purpose {
                    PullPurpose::Rebuild => 0,
                    PullPurpose::Sync => 1,
                    PullPurpose::Copy => 2,
                });
                e.u16(*first);
                e.u16(*last);
                e.cursor(after);
                // Delta pulls (resharding): appended after the original fields.
                e.u8(u8::from(*delta));
                e.u32(have.len() as u32);
                for (s, d) in have {
                    e.u16(*s);
                    e.u64(*d);
                }
            }
            PeerBody::PullResp {
                id,
                ready,
                resets,
                entries,
                next,
            } => {
                e.u8(4);
                e.u64(*id);
                e.u8(u8::from(*ready));
                e.entries(entries);
                e.cursor(next);
                e.u32(resets.len() as u32);
                for s in resets {
                    e.u16(*s);
                }
            }
            PeerBody::Probe {
                first,
                last,
                digests,
            } => {
                e.u8(5);
                e.u16(*first);
                e.u16(*last);
                e.u32(digests.len() as u32);
                for (s, d) in digests {
                    e.u16(*s);
                    e.u64(*d);
                }
            }
            PeerBody::ProbeResp { mismatched } => {
                e.u8(6);
                e.u32(mismatched.len() as u32);
                for s in mismatched {
                    e.u16(*s);
                }
            }
            PeerBody::KeyListReq { slot, after } => {
                e.u8(7);
                e.u16(*slot);
                e.opt_key(after);
            }
            PeerBody::KeyList {
                slot,
                after,
                keys,
                more,
            } => {
                e.u8(8);
                e.u16(*slot);
                e.opt_key(after);
                e.u32(keys.len() as u32);
                for (k, v) in keys {
                    e.bytes(k);
                    e.0.extend_from_slice(&v.to_be_bytes());
                }
                e.u8(u8::from(*more));
            }
            PeerBody::RepairPush { entries } => {
                e.u8(9);
                e.entries(entries);
            }
            PeerBody::RepairFetch { keys } => {
                e.u8(10);
                e.u32(keys.len() as u32);
                for k in keys {
                    e.bytes(k);
                }
            }
            PeerBody::RepairFetchResp { entries } => {
                e.u8(11);
                e.entries(entries);
            }
            PeerBody::Retire { key, version } => {
                e.u8(12);
                e.bytes(key);
                e.0.extend_from_slice(&version.to_be_bytes());
            }
            PeerBody::ReplicateRefused { key, version } => {
                e.u8(21);
                e.bytes(key);
                e.0.extend_from_slice(&version.to_be_bytes());
            }
            PeerBody::EcUpdate {
                memgest,
                pg,
                owner,
                base,
                seq,
                offset,
                delta,
                meta,
            } => {
                e.u8(13);
                e.u16(memgest.0);
                e.u32(*pg);
                e.u32(*owner);
                e.u64(*base);
                e.u64(*seq);
                e.u64(*offset);
                e.bytes(delta);
                e.ec_meta(meta);
            }
            PeerBody::EcAck {
                memgest,
                pg,
                owner,
                seq,
                ok,
            } => {
                e.u8(14);
                e.u16(memgest.0);
                e.u32(*pg);
                e.u32(*owner);
                e.u64(*seq);
                e.u8(u8::from(*ok));
            }
            PeerBody::EcMetaReq {
                id,
                memgest,
                pg,
                owner,
                after,
            } => {
                e.u8(15);
                e.u64(*id);
                e.u16(memgest.0);
                e.u32(*pg);
                e.u32(*owner);
                e.opt_key(after);
            }
            PeerBody::EcMetaResp {
                id,
                ready,
                seq,
                high_water,
                keys,
                next,
                pos,
            } => {
                e.u8(16);
                e.u64(*id);
                e.u8(u8::from(*ready));
                e.u64(*seq);
                e.u64(*high_water);
                e.key_metas(keys);
                e.opt_key(next);
                e.u32(*pos);
            }
            PeerBody::EcRelease { memgest, pg, pos } => {
                e.u8(22);
                e.u16(memgest.0);
                e.u32(*pg);
                e.u32(*pos);
            }
            PeerBody::EcReleased { memgest, pg, pos } => {
                e.u8(23);
                e.u16(memgest.0);
                e.u32(*pg);
                e.u32(*pos);
            }
            PeerBody::EcReadReq {
                id,
                memgest,
                pg,
                seq,
                ranges,
            } => {
                e.u8(17);
                e.u64(*id);
                e.u16(memgest.0);
                e.u32(*pg);
                match seq {
                    Some(s) => {
                        e.u8(1);
                        e.u64(*s);
                    }
                    None => e.u8(0),
                }
                e.u32(ranges.len() as u32);
                for r in ranges {
                    e.u8(u8::from(r.parity));
                    e.u64(r.index);
                    e.u64(r.offset);
                    e.u32(r.len);
                }
            }
            PeerBody::EcReadResp {
                id,
                ready,
                seqs,
                pieces,
            } => {
                e.u8(18);
                e.u64(*id);
                e.u8(u8::from(*ready));
                e.u32(seqs.len() as u32);
                for s in seqs {
                    e.u64(*s);
                }
                e.u32(pieces.len() as u32);
                for p in pieces {
                    e.bytes(p);
                }
            }
            PeerBody::EcSyncReq {
                id,
                memgest,
                pg,
                offset,
                after,
            } => {
                e.u8(19);
                e.u64(*id);
                e.u16(memgest.0);
                e.u32(*pg);
                e.u64(*offset);
                e.opt_key(after);
            }
            PeerBody::EcSyncResp {
                id,
                ready,
                seq,
                base,
                total,
                offset,
                bytes,
                keys,
                done,
            } => {
                e.u8(20);
                e.u64(*id);
                e.u8(u8::from(*ready));
                e.u64(*seq);
                e.u64(*base);
                e.u64(*total);
                e.u64(*offset);
                e.bytes(bytes);
                e.key_metas(keys);
                e.u8(u8::from(*done));
            }
        }
    })
}

// ------------------------------------------------------------------ decode

struct Dec<'a> {
    b: &'a [u8],
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Truncated {
                needed: n - self.b.len(),
            });
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self, what: &'static str) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(WireError::BadTag { what, tag }),
        }
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let mut a = [0u8; 2];
        a.copy_from_slice(self.take(2)?);
        Ok(u16::from_be_bytes(a))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_be_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    fn version(&mut self) -> Result<Version, WireError> {
        let mut a = [0u8; 16];
        a.copy_from_slice(self.take(16)?);
        Ok(Version::from_be_bytes(a))
    }
    fn slot(&mut self) -> Result<Slot, WireError> {
        let s = self.u16()?;
        if s >= ringlet_types::SLOT_COUNT {
            return Err(WireError::TooLong {
                what: "slot",
                len: u64::from(s),
                max: u64::from(ringlet_types::SLOT_COUNT - 1),
            });
        }
        Ok(s)
    }
    /// Length-prefixed bytes, the length checked against `max` before allocating.
    fn bytes(&mut self, what: &'static str, max: u32) -> Result<Vec<u8>, WireError> {
        let n = self.u32()?;
        if n > max {
            return Err(WireError::TooLong {
                what,
                len: u64::from(n),
                max: u64::from(max),
            });
        }
        Ok(self.take(n as usize)?.to_vec())
    }
    fn key(&mut self) -> Result<Vec<u8>, WireError> {
        self.bytes("key", limits::KEY_BYTES_MAX)
    }
    /// A list count: bounded, and not more items than the remaining bytes can hold.
    fn count(&mut self, what: &'static str, min_item: usize) -> Result<usize, WireError> {
        let n = self.u32()?;
        let fit = self.b.len() / min_item.max(1);
        if n > PEER_LIST_ITEMS_MAX || n as usize > fit {
            return Err(WireError::TooLong {
                what,
                len: u64::from(n),
                max: (fit as u64).min(u64::from(PEER_LIST_ITEMS_MAX)),
            });
        }
        Ok(n as usize)
    }
    fn entry(&mut self) -> Result<Entry, WireError> {
        let version = self.version()?;
        let memgest = MemgestId(self.u16()?);
        let flag = self.u8()?;
        let kind = if matches!(flag, 3 | 4) {
            ValueKind::Record
        } else {
            ValueKind::String
        };
        let (value, expiry_ms) = match flag {
            0 => (None, None),
            1 | 3 => (Some(self.bytes("value", limits::VALUE_BYTES_MAX)?), None),
            2 | 4 => {
                let v = self.bytes("value", limits::VALUE_BYTES_MAX)?;
                (Some(v), Some(self.u64()?))
            }
            tag => {
                return Err(WireError::BadTag {
                    what: "value flag",
                    tag,
                })
            }
        };
        Ok(Entry {
            version,
            memgest,
            value,
            expiry_ms,
            kind,
        })
    }
    fn entries(&mut self) -> Result<Vec<(Vec<u8>, Entry)>, WireError> {
        // Smallest entry: key len 4 + version 16 + memgest 2 + flag 1.
        let n = self.count("entries", 23)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let k = self.key()?;
            v.push((k, self.entry()?));
        }
        Ok(v)
    }
    fn ec_meta(&mut self) -> Result<EcMeta, WireError> {
        Ok(match self.u8()? {
            0 => EcMeta::None,
            tag @ (1 | 4 | 5 | 6) => EcMeta::Put {
                key: self.key()?,
                version: self.version()?,
                offset: self.u64()?,
                len: self.u64()?,
                kind: if matches!(tag, 4 | 6) {
                    ValueKind::Record
                } else {
                    ValueKind::String
                },
                expiry_ms: if matches!(tag, 5 | 6) {
                    Some(self.u64()?)
                } else {
                    None
                },
            },
            2 => EcMeta::Delete {
                key: self.key()?,
                version: self.version()?,
            },
            3 => EcMeta::Retire {
                key: self.key()?,
                version: self.version()?,
            },
            tag => {
                return Err(WireError::BadTag {
                    what: "ec meta",
                    tag,
                })
            }
        })
    }
    fn key_metas(&mut self) -> Result<Vec<EcKeyMeta>, WireError> {
        // Smallest item: key len 4 + version 16 + offset 8 + len 8 + flag 1.
        let n = self.count("key metas", 37)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let (key, version, offset, len) =
                (self.key()?, self.version()?, self.u64()?, self.u64()?);
            let (tombstone, kind, expiry) = match self.u8()? {
                0 => (false, ValueKind::String, false),
                1 => (true, ValueKind::String, false),
                2 => (false, ValueKind::Record, false),
                3 => (false, ValueKind::String, true),
                4 => (false, ValueKind::Record, true),
                tag => {
                    return Err(WireError::BadTag {
                        what: "key meta flag",
                        tag,
                    })
                }
            };
            let expiry_ms = if expiry { Some(self.u64()?) } else { None };
            v.push(EcKeyMeta {
                key,
                version,
                offset,
                len,
                tombstone,
                kind,
                expiry_ms,
            });
        }
        Ok(v)
    }
    fn cursor(&mut self) -> Result<Option<(Slot, Vec<u8>)>, WireError> {
        if self.bool("cursor flag")? {
            let s = self.slot()?;
            Ok(Some((s, self.key()?)))
        } else {
            Ok(None)
        }
    }
    fn opt_key(&mut self) -> Result<Option<Vec<u8>>, WireError> {
        if self.bool("key flag")? {
            Ok(Some(self.key()?))
        } else {
            Ok(None)
        }
    }
}

/// Length of the frame at the start of `buf` once its 4-byte header is in: `Ok(None)` until
/// then. Checked against [`PEER_FRAME_BYTES_MAX`] before the caller buffers the body.
///
/// # Errors
/// An oversized or empty frame.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    let Some(h) = buf.get(..4) else {
        return Ok(None);
    };
    let mut a = [0u8; 4];
    a.copy_from_slice(h);
    let n = u32::from_be_bytes(a);
    if n == 0 {
        return Err(WireError::Empty);
    }
    if n > PEER_FRAME_BYTES_MAX {
        return Err(WireError::FrameTooLarge(u64::from(n)));
    }
    Ok(Some(4 + n as usize))
}

/// Decode one frame body (after the length prefix: kind + payload).
///
/// # Errors
/// Any malformed field; never panics.
pub fn decode_body(body: &[u8]) -> Result<Frame, WireError> {
    let mut d = Dec { b: body };
    let f = match d.u8()? {
        KIND_HELLO => {
            if d.take(4)? != MAGIC {
                return Err(WireError::Hello("bad magic"));
            }
            if d.u16()? != PEER_PROTOCOL_VERSION {
                return Err(WireError::Hello("unsupported protocol version"));
            }
            let from = NodeId(d.u32()?);
            let incarnation = d.u64()?;
            Frame::Hello(Hello { from, incarnation })
        }
        KIND_CHUNK => {
            let more = d.bool("more")?;
            let piece = d.b.to_vec();
            d.b = &[];
            Frame::Chunk { more, piece }
        }
        KIND_PEER => {
            let epoch = Epoch(d.u64()?);
            let incarnation = d.u64()?;
            let body = match d.u8()? {
                1 => {
                    let key = d.key()?;
                    PeerBody::Replicate {
                        key,
                        entry: d.entry()?,
                    }
                }
                2 => PeerBody::ReplicateAck {
                    key: d.key()?,
                    version: d.version()?,
                    ok: d.bool("ok")?,
                },
                3 => PeerBody::PullReq {
                    id: d.u64()?,
                    purpose: match d.u8()? {
                        0 => PullPurpose::Rebuild,
                        1 => PullPurpose::Sync,
                        2 => PullPurpose::Copy,
                        tag => {
                            return Err(WireError::BadTag {
                                what: "pull purpose",
                                tag,
                            })
                        }
                    },
                    first: d.slot()?,
                    last: d.slot()?,
                    after: d.cursor()?,
                    delta: d.bool("delta")?,
                    have: {
                        let n = d.count("have", 10)?;
                        let mut have = Vec::with_capacity(n);
                        for _ in 0..n {
                            let s = d.slot()?;
                            have.push((s, d.u64()?));
                        }
                        have
                    },
                },
                4 => {
                    let id = d.u64()?;
                    let ready = d.bool("ready")?;
                    let entries = d.entries()?;
                    let next = d.cursor()?;
                    let n = d.count("resets", 2)?;
                    let mut resets = Vec::with_capacity(n);
                    for _ in 0..n {
                        resets.push(d.slot()?);
                    }
                    PeerBody::PullResp {
                        id,
                        ready,
                        resets,
                        entries,
                        next,
                    }
                }
                5 => {
                    let first = d.slot()?;
                    let last = d.slot()?;
                    let n = d.count("digests", 10)?;
                    let mut digests = Vec::with_capacity(n);
                    for _ in 0..n {
                        let s = d.slot()?;
                        digests.push((s, d.u64()?));
                    }
                    PeerBody::Probe {
                        first,
                        last,
                        digests,
                    }
                }
                6 => {
                    let n = d.count("mismatched", 2)?;
                    let mut mismatched = Vec::with_capacity(n);
                    for _ in 0..n {
                        mismatched.push(d.slot()?);
                    }
                    PeerBody::ProbeResp { mismatched }
                }
                7 => PeerBody::KeyListReq {
                    slot: d.slot()?,
                    after: d.opt_key()?,
                },
                8 => {
                    let slot = d.slot()?;
                    let after = d.opt_key()?;
                    let n = d.count("keys", 20)?;
                    let mut keys = Vec::with_capacity(n);
                    for _ in 0..n {
                        let k = d.key()?;
                        keys.push((k, d.version()?));
                    }
                    PeerBody::KeyList {
                        slot,
                        after,
                        keys,
                        more: d.bool("more")?,
                    }
                }
                9 => PeerBody::RepairPush {
                    entries: d.entries()?,
                },
                10 => {
                    let n = d.count("keys", 4)?;
                    let mut keys = Vec::with_capacity(n);
                    for _ in 0..n {
                        keys.push(d.key()?);
                    }
                    PeerBody::RepairFetch { keys }
                }
                11 => PeerBody::RepairFetchResp {
                    entries: d.entries()?,
                },
                12 => PeerBody::Retire {
                    key: d.key()?,
                    version: d.version()?,
                },
                21 => PeerBody::ReplicateRefused {
                    key: d.key()?,
                    version: d.version()?,
                },
                13 => PeerBody::EcUpdate {
                    memgest: MemgestId(d.u16()?),
                    pg: d.u32()?,
                    owner: d.u32()?,
                    base: d.u64()?,
                    seq: d.u64()?,
                    offset: d.u64()?,
                    delta: d.bytes("delta", limits::VALUE_BYTES_MAX)?,
                    meta: d.ec_meta()?,
                },
                14 => PeerBody::EcAck {
                    memgest: MemgestId(d.u16()?),
                    pg: d.u32()?,
                    owner: d.u32()?,
                    seq: d.u64()?,
                    ok: d.bool("ok")?,
                },
                15 => PeerBody::EcMetaReq {
                    id: d.u64()?,
                    memgest: MemgestId(d.u16()?),
                    pg: d.u32()?,
                    owner: d.u32()?,
                    after: d.opt_key()?,
                },
                16 => PeerBody::EcMetaResp {
                    id: d.u64()?,
                    ready: d.bool("ready")?,
                    seq: d.u64()?,
                    high_water: d.u64()?,
                    keys: d.key_metas()?,
                    next: d.opt_key()?,
                    pos: d.u32()?,
                },
                22 => PeerBody::EcRelease {
                    memgest: MemgestId(d.u16()?),
                    pg: d.u32()?,
                    pos: d.u32()?,
                },
                23 => PeerBody::EcReleased {
                    memgest: MemgestId(d.u16()?),
                    pg: d.u32()?,
                    pos: d.u32()?,
                },
                17 => {
                    let id = d.u64()?;
                    let memgest = MemgestId(d.u16()?);
                    let pg = d.u32()?;
                    let seq = if d.bool("seq flag")? {
                        Some(d.u64()?)
                    } else {
                        None
                    };
                    let n = d.count("ranges", 21)?;
                    let mut ranges = Vec::with_capacity(n);
                    for _ in 0..n {
                        ranges.push(EcRange {
                            parity: d.bool("parity")?,
                            index: d.u64()?,
                            offset: d.u64()?,
                            len: d.u32()?,
                        });
                    }
                    PeerBody::EcReadReq {
                        id,
                        memgest,
                        pg,
                        seq,
                        ranges,
                    }
                }
                18 => {
                    let id = d.u64()?;
                    let ready = d.bool("ready")?;
                    let n = d.count("seqs", 8)?;
                    let mut seqs = Vec::with_capacity(n);
                    for _ in 0..n {
                        seqs.push(d.u64()?);
                    }
                    let n = d.count("pieces", 4)?;
                    let mut pieces = Vec::with_capacity(n);
                    let mut total: u64 = 0;
                    for _ in 0..n {
                        let p = d.bytes("piece", limits::VALUE_BYTES_MAX)?;
                        total = total.saturating_add(p.len() as u64);
                        if total > u64::from(limits::VALUE_BYTES_MAX) {
                            return Err(WireError::TooLong {
                                what: "pieces",
                                len: total,
                                max: u64::from(limits::VALUE_BYTES_MAX),
                            });
                        }
                        pieces.push(p);
                    }
                    PeerBody::EcReadResp {
                        id,
                        ready,
                        seqs,
                        pieces,
                    }
                }
                19 => PeerBody::EcSyncReq {
                    id: d.u64()?,
                    memgest: MemgestId(d.u16()?),
                    pg: d.u32()?,
                    offset: d.u64()?,
                    after: d.opt_key()?,
                },
                20 => PeerBody::EcSyncResp {
                    id: d.u64()?,
                    ready: d.bool("ready")?,
                    seq: d.u64()?,
                    base: d.u64()?,
                    total: d.u64()?,
                    offset: d.u64()?,
                    bytes: d.bytes("snapshot page", limits::VALUE_BYTES_MAX)?,
                    keys: d.key_metas()?,
                    done: d.bool("done")?,
                },
                tag => {
                    return Err(WireError::BadTag {
                        what: "peer body",
                        tag,
                    })
                }
            };
            Frame::Peer(PeerMsg {
                epoch,
                incarnation,
                body,
            })
        }
        tag => return Err(WireError::BadTag { what: "frame", tag }),
    };
    if !d.b.is_empty() {
        return Err(WireError::Trailing(d.b.len()));
    }
    Ok(f)
}

/// Decode every whole frame at the start of `buf`; returns the frames and the bytes used.
/// For fuzzing and property tests: the same path the transport's reader takes.
///
/// # Errors
/// The first malformed frame.
pub fn decode_stream(buf: &[u8]) -> Result<(Vec<Frame>, usize), WireError> {
    let mut used = 0;
    let mut out = Vec::new();
    while let Some(n) = frame_len(&buf[used..])? {
        let Some(f) = buf.get(used + 4..used + n) else {
            break;
        };
        out.push(decode_body(f)?);
        used += n;
    }
    Ok((out, used))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry() -> impl Strategy<Value = Entry> {
        (
            any::<u128>(),
            any::<u16>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::option::of(any::<u64>()),
            any::<bool>(),
        )
            .prop_map(|(v, m, value, x, record)| Entry {
                version: Version(v),
                memgest: MemgestId(m),
                // A tombstone carries no expiry and no kind.
                expiry_ms: value.as_ref().and(x),
                kind: if record && value.is_some() {
                    ValueKind::Record
                } else {
                    ValueKind::String
                },
                value,
            })
    }
    fn key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..20)
    }
    fn slot() -> impl Strategy<Value = Slot> {
        0u16..16384
    }
    fn cursor() -> impl Strategy<Value = Option<(Slot, Vec<u8>)>> {
        proptest::option::of((slot(), key()))
    }
    fn entries() -> impl Strategy<Value = Vec<(Vec<u8>, Entry)>> {
        proptest::collection::vec((key(), entry()), 0..5)
    }

    fn body() -> impl Strategy<Value = PeerBody> {
        prop_oneof![
            (key(), entry()).prop_map(|(key, entry)| PeerBody::Replicate { key, entry }),
            (key(), any::<u128>(), any::<bool>()).prop_map(|(key, v, ok)| {
                PeerBody::ReplicateAck {
                    key,
                    version: Version(v),
                    ok,
                }
            }),
            (
                any::<u64>(),
                0u8..3,
                slot(),
                slot(),
                cursor(),
                any::<bool>(),
                proptest::collection::vec((slot(), any::<u64>()), 0..4)
            )
                .prop_map(|(id, r, first, last, after, delta, have)| {
                    PeerBody::PullReq {
                        id,
                        purpose: match r {
                            0 => PullPurpose::Rebuild,
                            1 => PullPurpose::Sync,
                            _ => PullPurpose::Copy,
                        },
                        first,
                        last,
                        after,
                        delta,
                        have,
                    }
                }),
            (
                any::<u64>(),
                any::<bool>(),
                proptest::collection::vec(slot(), 0..4),
                entries(),
                cursor()
            )
                .prop_map(|(id, ready, resets, entries, next)| PeerBody::PullResp {
                    id,
                    ready,
                    resets,
                    entries,
                    next
                }),
            (
                slot(),
                slot(),
                proptest::collection::vec((slot(), any::<u64>()), 0..5)
            )
                .prop_map(|(first, last, digests)| PeerBody::Probe {
                    first,
                    last,
                    digests
                }),
            proptest::collection::vec(slot(), 0..5)
                .prop_map(|mismatched| PeerBody::ProbeResp { mismatched }),
            (slot(), proptest::option::of(key()))
                .prop_map(|(slot, after)| PeerBody::KeyListReq { slot, after }),
            (
                slot(),
                proptest::option::of(key()),
                proptest::collection::vec((key(), any::<u128>().prop_map(Version)), 0..5),
                any::<bool>()
            )
                .prop_map(|(slot, after, keys, more)| PeerBody::KeyList {
                    slot,
                    after,
                    keys,
                    more
                }),
            entries().prop_map(|entries| PeerBody::RepairPush { entries }),
            proptest::collection::vec(key(), 0..5).prop_map(|keys| PeerBody::RepairFetch { keys }),
            entries().prop_map(|entries| PeerBody::RepairFetchResp { entries }),
            (key(), any::<u128>()).prop_map(|(key, v)| PeerBody::ReplicateRefused {
                key,
                version: Version(v)
            }),
            (key(), any::<u128>()).prop_map(|(key, v)| PeerBody::Retire {
                key,
                version: Version(v)
            }),
            ec_body(),
        ]
    }

    fn ec_meta() -> impl Strategy<Value = EcMeta> {
        prop_oneof![
            Just(EcMeta::None),
            (
                key(),
                any::<u128>(),
                any::<u64>(),
                any::<u64>(),
                any::<bool>(),
                proptest::option::of(any::<u64>()),
            )
                .prop_map(|(key, v, offset, len, record, expiry_ms)| EcMeta::Put {
                    key,
                    version: Version(v),
                    offset,
                    len,
                    kind: if record {
                        ValueKind::Record
                    } else {
                        ValueKind::String
                    },
                    expiry_ms,
                }),
            (key(), any::<u128>()).prop_map(|(key, v)| EcMeta::Delete {
                key,
                version: Version(v)
            }),
            (key(), any::<u128>()).prop_map(|(key, v)| EcMeta::Retire {
                key,
                version: Version(v)
            }),
        ]
    }
    fn key_metas() -> impl Strategy<Value = Vec<EcKeyMeta>> {
        proptest::collection::vec(
            (
                key(),
                any::<u128>(),
                any::<u64>(),
                any::<u64>(),
                any::<bool>(),
                any::<bool>(),
                proptest::option::of(any::<u64>()),
            )
                .prop_map(|(key, v, offset, len, tombstone, record, x)| EcKeyMeta {
                    key,
                    version: Version(v),
                    offset,
                    len,
                    tombstone,
                    kind: if record && !tombstone {
                        ValueKind::Record
                    } else {
                        ValueKind::String
                    },
                    // A tombstone has no expiry.
                    expiry_ms: x.filter(|_| !tombstone),
                }),
            0..4,
        )
    }
    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..40)
    }

    fn ec_body() -> impl Strategy<Value = PeerBody> {
        prop_oneof![
            (
                any::<u16>(),
                any::<u32>(),
                any::<u32>(),
                any::<(u64, u64, u64)>(),
                bytes(),
                ec_meta()
            )
                .prop_map(|(m, pg, owner, (base, seq, offset), delta, meta)| {
                    PeerBody::EcUpdate {
                        memgest: MemgestId(m),
                        pg,
                        owner,
                        base,
                        seq,
                        offset,
                        delta,
                        meta,
                    }
                }),
            (
                any::<u16>(),
                any::<u32>(),
                any::<u32>(),
                any::<u64>(),
                any::<bool>()
            )
                .prop_map(|(m, pg, owner, seq, ok)| PeerBody::EcAck {
                    memgest: MemgestId(m),
                    pg,
                    owner,
                    seq,
                    ok
                }),
            (
                any::<u64>(),
                any::<u16>(),
                any::<u32>(),
                any::<u32>(),
                proptest::option::of(key())
            )
                .prop_map(|(id, m, pg, owner, after)| PeerBody::EcMetaReq {
                    id,
                    memgest: MemgestId(m),
                    pg,
                    owner,
                    after
                }),
            (
                any::<u64>(),
                any::<bool>(),
                any::<u64>(),
                any::<u64>(),
                key_metas(),
                proptest::option::of(key()),
                any::<u32>()
            )
                .prop_map(|(id, ready, seq, high_water, keys, next, pos)| {
                    PeerBody::EcMetaResp {
                        id,
                        ready,
                        seq,
                        high_water,
                        keys,
                        next,
                        pos,
                    }
                }),
            (any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(m, pg, pos)| {
                PeerBody::EcRelease {
                    memgest: MemgestId(m),
                    pg,
                    pos,
                }
            }),
            (any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(m, pg, pos)| {
                PeerBody::EcReleased {
                    memgest: MemgestId(m),
                    pg,
                    pos,
                }
            }),
            (
                any::<u64>(),
                any::<u16>(),
                any::<u32>(),
                proptest::option::of(any::<u64>()),
                proptest::collection::vec(
                    (any::<bool>(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(
                        |(parity, index, offset, len)| EcRange {
                            parity,
                            index,
                            offset,
                            len
                        }
                    ),
                    0..4
                )
            )
                .prop_map(|(id, m, pg, seq, ranges)| PeerBody::EcReadReq {
                    id,
                    memgest: MemgestId(m),
                    pg,
                    seq,
                    ranges
                }),
            (
                any::<u64>(),
                any::<bool>(),
                proptest::collection::vec(any::<u64>(), 0..4),
                proptest::collection::vec(bytes(), 0..4)
            )
                .prop_map(|(id, ready, seqs, pieces)| PeerBody::EcReadResp {
                    id,
                    ready,
                    seqs,
                    pieces
                }),
            (
                any::<u64>(),
                any::<u16>(),
                any::<u32>(),
                any::<u64>(),
                proptest::option::of(key())
            )
                .prop_map(|(id, m, pg, offset, after)| PeerBody::EcSyncReq {
                    id,
                    memgest: MemgestId(m),
                    pg,
                    offset,
                    after
                }),
            (
                any::<u64>(),
                any::<bool>(),
                any::<(u64, u64, u64, u64)>(),
                bytes(),
                key_metas(),
                any::<bool>()
            )
                .prop_map(
                    |(id, ready, (seq, base, total, offset), bytes, keys, done)| {
                        PeerBody::EcSyncResp {
                            id,
                            ready,
                            seq,
                            base,
                            total,
                            offset,
                            bytes,
                            keys,
                            done,
                        }
                    }
                ),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(e in any::<u64>(), inc in any::<u64>(), b in body()) {
            let m = PeerMsg { epoch: Epoch(e), incarnation: inc, body: b };
            let mut bytes = encode_hello(&Hello { from: NodeId(3), incarnation: inc });
            bytes.extend(encode_peer(&m));
            let (frames, used) = decode_stream(&bytes).unwrap();
            prop_assert_eq!(used, bytes.len());
            prop_assert_eq!(frames, vec![
                Frame::Hello(Hello { from: NodeId(3), incarnation: inc }),
                Frame::Peer(m),
            ]);
        }

        /// Arbitrary bytes never panic, and never make the decoder allocate past the limits.
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_stream(&b);
            if b.len() > 4 {
                let _ = decode_body(&b[4..]);
            }
        }

        /// Truncating or flipping a byte of a valid frame gives an error or another valid
        /// frame, never a panic.
        #[test]
        fn mutated_frames(b in body(), cut in any::<usize>(), flip in any::<(usize, u8)>()) {
            let bytes = encode_peer(&PeerMsg { epoch: Epoch(1), incarnation: 1, body: b });
            let cut = cut % bytes.len();
            let _ = decode_stream(&bytes[..cut]);
            let mut m = bytes.clone();
            let i = flip.0 % m.len();
            m[i] ^= flip.1;
            let _ = decode_stream(&m);
        }
    }

    fn large_replicate(len: usize) -> PeerMsg {
        PeerMsg {
            epoch: Epoch(5),
            incarnation: 2,
            body: PeerBody::Replicate {
                key: b"big".to_vec(),
                entry: Entry {
                    version: Version(9),
                    memgest: MemgestId(1),
                    value: Some((0..len).map(|i| (i % 251) as u8).collect()),
                    expiry_ms: None,
                    kind: ValueKind::String,
                },
            },
        }
    }

    #[test]
    fn chunked_frames_join_into_the_original() {
        let chunk = limits::PEER_CHUNK_BYTES as usize;
        // Small frames are never chunked.
        assert!(chunk_frame(&encode_peer(&large_replicate(chunk - 100))).is_none());
        for len in [chunk, 3 * chunk, 3 * chunk + 17] {
            let m = large_replicate(len);
            let whole = encode_peer(&m);
            let pieces: Vec<Vec<u8>> = chunk_frame(&whole).unwrap().collect();
            assert_eq!(pieces.len(), (whole.len() - 4).div_ceil(chunk));
            // On the wire the pieces are ordinary frames, each within one chunk.
            let stream: Vec<u8> = pieces.concat();
            let (frames, used) = decode_stream(&stream).unwrap();
            assert_eq!(used, stream.len());
            let mut a = Assembly::default();
            let mut out = Vec::new();
            for f in frames {
                let Frame::Chunk { more, piece } = f else {
                    panic!("not a chunk: {f:?}")
                };
                assert!(piece.len() <= chunk);
                out.extend(a.push(more, &piece).unwrap());
            }
            assert_eq!(out, vec![Frame::Peer(m)]);
            assert_eq!(a.pending_bytes(), 0);
        }
    }

    #[test]
    fn chunks_are_bounded_like_whole_frames() {
        let mut a = Assembly::default();
        let piece = vec![0u8; limits::PEER_CHUNK_BYTES as usize];
        let mut refused = false;
        // Pieces that never end are refused once they pass the frame limit, not buffered.
        for _ in 0..=(PEER_FRAME_BYTES_MAX / limits::PEER_CHUNK_BYTES) + 1 {
            match a.push(true, &piece) {
                Ok(None) => {}
                Err(WireError::FrameTooLarge(_)) => {
                    refused = true;
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(refused);
        assert!(a.pending_bytes() <= PEER_FRAME_BYTES_MAX as usize);
        // A chunked frame whose body is itself a chunk is malformed.
        let mut a = Assembly::default();
        assert!(a.push(false, &[KIND_CHUNK, 0, 1]).is_err());
        // Empty pieces are malformed.
        assert_eq!(Assembly::default().push(false, &[]), Err(WireError::Empty));
    }

    #[test]
    fn lengths_are_checked_before_allocation() {
        // A frame claiming 4 GiB is refused from its header alone.
        assert!(matches!(
            frame_len(&[0xff, 0xff, 0xff, 0xff]),
            Err(WireError::FrameTooLarge(_))
        ));
        // A list claiming a million entries in a 30-byte body is refused by count.
        let mut b = vec![KIND_PEER];
        b.extend(1u64.to_be_bytes());
        b.extend(1u64.to_be_bytes());
        b.push(9); // RepairPush
        b.extend(1_000_000u32.to_be_bytes());
        assert!(matches!(decode_body(&b), Err(WireError::TooLong { .. })));
        // A key longer than KEY_BYTES_MAX is refused before reading it.
        let mut b = vec![KIND_PEER];
        b.extend(1u64.to_be_bytes());
        b.extend(1u64.to_be_bytes());
        b.push(12);
        b.extend((limits::KEY_BYTES_MAX + 1).to_be_bytes());
        assert!(matches!(
            decode_body(&b),
            Err(WireError::TooLong { what: "key", .. })
        ));
        // An ec delta longer than VALUE_BYTES_MAX is refused from its length field.
        let mut b = vec![KIND_PEER];
        b.extend(1u64.to_be_bytes());
        b.extend(1u64.to_be_bytes());
        b.push(13);
        b.extend(1u16.to_be_bytes());
        b.extend([0u8; 8 + 24]);
        b.extend((limits::VALUE_BYTES_MAX + 1).to_be_bytes());
        assert!(matches!(
            decode_body(&b),
            Err(WireError::TooLong { what: "delta", .. })
        ));
        // A read request claiming more ranges than its bytes can hold is refused by count.
        let mut b = vec![KIND_PEER];
        b.extend(1u64.to_be_bytes());
        b.extend(1u64.to_be_bytes());
        b.push(17);
        b.extend(9u64.to_be_bytes());
        b.extend(1u16.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.push(0);
        b.extend(1_000u32.to_be_bytes());
        assert!(matches!(
            decode_body(&b),
            Err(WireError::TooLong { what: "ranges", .. })
        ));
    }
}
