//! CHASE over native frames: the request and the reply payload (`docs/protocol.md` §2.6).
//!
//! The request carries RESP CHASE's arguments as typed fields:
//!
//! ```text
//! CHASE  0          1          2              6
//!        +----------+----------+--------------+-------------+---------+
//!        | depth u8 | flags u8 | limit u32    | key len u32 | key ... |
//!        +----------+----------+--------------+-------------+---------+
//!        | count u32 | (len u32 | link field) * count |              count ≥ 1
//!        | count u32 | (len u32 | attr)       * count |              count = 0 unless FIELDS
//!        flags: 0x01 FIELDS (return only the attributes listed; else all of them)
//! ```
//!
//! The codec checks the shapes (lengths within `limits::KEY_BYTES_MAX`, counts within
//! `limits::BATCH_KEYS_MAX` and what the body can hold, at least one link field, no attribute
//! without FIELDS); the server checks DEPTH and LIMIT against `ringlet-record`'s bounds and
//! answers `BAD_REQUEST` with RESP CHASE's error text.
//!
//! The OK reply's payload is one length-prefixed field, like READ_REPLICA's, so
//! [`super::ResponseBody::Value`] carries it and re-encodes it unchanged:
//!
//! ```text
//! +-------------+---------+-----------+--------------------------------------------+
//! | len u32     | stop u8 | count u32 | entry * count                              |
//! +-------------+---------+-----------+--------------------------------------------+
//! entry = | key len u32 | key | depth u32 | attr count u32 | (name | value) * attr count |
//!         (name and value: len u32 | bytes)
//! stop:   0 complete, 1 limit, 2 bytes, 3 time   (RESP CHASE's last element)
//! ```
//!
//! [`ChaseItems::parse`] validates a payload once; [`ChaseItems::iter`] then walks it in
//! place without allocating. [`ChaseResponseWriter`] streams entries into the response
//! buffer and patches the lengths at the end.

use super::cursor::Cursor;
use super::{len32, put_bytes, put_header, KeyList, Opcode, FLAG_RESPONSE, HEADER_BYTES};
use crate::error::DecodeError;
use crate::sink::Sink;
use ringlet_types::{limits, Epoch, Version};

/// CHASE flag: the attribute list is meaningful (RESP's `FIELDS`).
pub const CHASE_FIELDS: u8 = 0x01;
/// Bytes of the fixed part of a CHASE body (before the key).
pub const CHASE_FIXED_BYTES: usize = 1 + 1 + 4;

/// The fields of a CHASE request. Borrowed from the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChaseRequest<'a> {
    /// The key the walk starts from (routes the request).
    pub key: &'a [u8],
    /// Link fields to follow (at least one).
    pub links: KeyList<'a>,
    /// Hops (RESP's DEPTH; the server bounds it).
    pub depth: u8,
    /// Most entries (RESP's LIMIT; the server bounds it).
    pub limit: u32,
    /// The attributes to return; `None`: all of each item's.
    pub fields: Option<KeyList<'a>>,
}

impl<'a> ChaseRequest<'a> {
    pub(crate) fn decode(c: &mut Cursor<'a>) -> Result<ChaseRequest<'a>, DecodeError> {
        let depth = c.u8()?;
        let flags = c.u8()?;
        if flags & !CHASE_FIELDS != 0 {
            return Err(DecodeError::InvalidField("CHASE flags"));
        }
        let limit = c.u32()?;
        let key = c.key()?;
        let links = KeyList::parse(c)?;
        if links.is_empty() {
            return Err(DecodeError::InvalidField("CHASE without a link field"));
        }
        let attrs = KeyList::parse(c)?;
        let fields = if flags & CHASE_FIELDS != 0 {
            Some(attrs)
        } else if attrs.is_empty() {
            None
        } else {
            return Err(DecodeError::InvalidField("CHASE attributes without FIELDS"));
        };
        Ok(ChaseRequest {
            key,
            links,
            depth,
            limit,
            fields,
        })
    }

    pub(crate) fn encode<S: Sink + ?Sized>(&self, out: &mut S, request_id: u64) {
        let attrs_raw = self.fields.map_or(&[][..], |f| f.raw);
        let body = CHASE_FIXED_BYTES
            .saturating_add(4)
            .saturating_add(self.key.len())
            .saturating_add(4)
            .saturating_add(self.links.raw.len())
            .saturating_add(4)
            .saturating_add(attrs_raw.len());
        put_header(out, Opcode::Chase, 0, request_id, body);
        out.put_u8(self.depth);
        out.put_u8(if self.fields.is_some() {
            CHASE_FIELDS
        } else {
            0
        });
        out.put(&self.limit.to_be_bytes());
        put_bytes(out, self.key);
        out.put(&self.links.count.to_be_bytes());
        out.put(self.links.raw);
        out.put(&self.fields.map_or(0, |f| f.count).to_be_bytes());
        out.put(attrs_raw);
    }
}

/// CHASE `key` following `links` up to `depth` hops, at most `limit` entries, returning the
/// attributes `fields` (`None`: all). The caller keeps every name within
/// `limits::KEY_BYTES_MAX` and the lists within `limits::BATCH_KEYS_MAX`; the node refuses
/// the frame otherwise.
pub fn encode_chase<S: Sink + ?Sized, L: AsRef<[u8]>, F: AsRef<[u8]>>(
    out: &mut S,
    request_id: u64,
    key: &[u8],
    links: &[L],
    depth: u8,
    limit: u32,
    fields: Option<&[F]>,
) {
    let list_bytes = |n: usize| n.saturating_add(4);
    let links_bytes = links.iter().fold(0usize, |n, l| {
        n.saturating_add(list_bytes(l.as_ref().len()))
    });
    let fields_bytes = fields.unwrap_or(&[]).iter().fold(0usize, |n, f| {
        n.saturating_add(list_bytes(f.as_ref().len()))
    });
    let body = CHASE_FIXED_BYTES
        .saturating_add(4)
        .saturating_add(key.len())
        .saturating_add(4)
        .saturating_add(links_bytes)
        .saturating_add(4)
        .saturating_add(fields_bytes);
    put_header(out, Opcode::Chase, 0, request_id, body);
    out.put_u8(depth);
    out.put_u8(if fields.is_some() { CHASE_FIELDS } else { 0 });
    out.put(&limit.to_be_bytes());
    put_bytes(out, key);
    out.put(&len32(links.len()).to_be_bytes());
    for l in links {
        put_bytes(out, l.as_ref());
    }
    let fields = fields.unwrap_or(&[]);
    out.put(&len32(fields.len()).to_be_bytes());
    for f in fields {
        put_bytes(out, f.as_ref());
    }
}

/// Why a CHASE stopped, as the reply's `stop` byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChaseStop {
    /// Everything reachable within DEPTH was returned.
    Complete = 0,
    /// LIMIT entries were reached.
    Limit = 1,
    /// The reply byte bound was reached.
    Bytes = 2,
    /// The node's time bound was reached.
    Time = 3,
}

impl ChaseStop {
    /// Parse the stop byte.
    pub fn from_u8(b: u8) -> Option<ChaseStop> {
        Some(match b {
            0 => ChaseStop::Complete,
            1 => ChaseStop::Limit,
            2 => ChaseStop::Bytes,
            3 => ChaseStop::Time,
            _ => return None,
        })
    }
}

/// One entry of a CHASE reply, borrowed from the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChaseItem<'a> {
    /// The item's key.
    pub key: &'a [u8],
    /// Hops from the root.
    pub depth: u32,
    attrs_count: u32,
    attrs_raw: &'a [u8],
}

impl<'a> ChaseItem<'a> {
    /// Number of attributes.
    pub fn attrs_len(&self) -> usize {
        self.attrs_count as usize
    }
    /// `(name, value)` pairs, in the node's order.
    pub fn attrs(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let mut c = Cursor::new(self.attrs_raw);
        (0..self.attrs_count).map_while(move |_| Some((c.key().ok()?, c.value().ok()?)))
    }
}

/// A CHASE reply payload, validated by [`ChaseItems::parse`] and iterated in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChaseItems<'a> {
    /// Why the walk stopped.
    pub stop: ChaseStop,
    count: u32,
    raw: &'a [u8],
}

/// Bytes an entry takes at least: key length, depth, attribute count.
const CHASE_ENTRY_MIN_BYTES: usize = 4 + 4 + 4;

fn chase_item<'a>(c: &mut Cursor<'a>) -> Result<ChaseItem<'a>, DecodeError> {
    let key = c.key()?;
    let depth = c.u32()?;
    // Each attribute takes at least its two lengths.
    let attrs_count = c.count(8)?;
    let start = c.remaining();
    let body = c.rest();
    let mut a = Cursor::new(body);
    for _ in 0..attrs_count {
        a.key()?;
        a.value()?;
    }
    let used = start.saturating_sub(a.remaining());
    let attrs_raw = body.get(..used).ok_or(DecodeError::Truncated)?;
    *c = Cursor::new(body.get(used..).unwrap_or(&[]));
    Ok(ChaseItem {
        key,
        depth,
        attrs_count,
        attrs_raw,
    })
}

impl<'a> ChaseItems<'a> {
    /// Validate the bytes inside the payload's length prefix (what
    /// [`super::ResponseBody::Value`] holds for an OK CHASE response).
    ///
    /// # Errors
    /// [`DecodeError::Truncated`], [`DecodeError::InvalidField`] (unknown stop byte),
    /// [`DecodeError::BatchTooLarge`], [`DecodeError::KeyTooLarge`],
    /// [`DecodeError::ValueTooLarge`], [`DecodeError::TrailingBytes`].
    pub fn parse(blob: &'a [u8]) -> Result<ChaseItems<'a>, DecodeError> {
        let mut c = Cursor::new(blob);
        let stop = ChaseStop::from_u8(c.u8()?).ok_or(DecodeError::InvalidField("CHASE stop"))?;
        let count = c.count(CHASE_ENTRY_MIN_BYTES)?;
        let raw = c.rest();
        let mut e = Cursor::new(raw);
        for _ in 0..count {
            chase_item(&mut e)?;
        }
        e.finish()?;
        Ok(ChaseItems { stop, count, raw })
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count as usize
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// The entries in BFS order.
    pub fn iter(&self) -> impl Iterator<Item = ChaseItem<'a>> + 'a {
        let mut c = Cursor::new(self.raw);
        (0..self.count).map_while(move |_| chase_item(&mut c).ok())
    }
}

/// Largest CHASE payload (what a decoder accepts): a value's bound, so a reply is never
/// larger than the largest GET. The node stops adding entries before it (`bytes`).
pub const CHASE_PAYLOAD_BYTES_MAX: usize = limits::VALUE_BYTES_MAX as usize;

/// Streams a CHASE response: `begin`, one `push` per entry, `finish` with the stop reason
/// (patches the lengths and the count).
#[derive(Debug)]
pub struct ChaseResponseWriter {
    start: usize,
    count: u32,
}

impl ChaseResponseWriter {
    /// Write the header, the fixed prefix and placeholders.
    pub fn begin<S: Sink + ?Sized>(out: &mut S, request_id: u64, epoch: Epoch) -> Self {
        let start = out.len();
        put_header(out, Opcode::Chase, FLAG_RESPONSE, request_id, 0);
        out.put_u8(super::Status::OK.0);
        out.put(&epoch.0.to_be_bytes());
        out.put(&Version::ZERO.to_be_bytes());
        out.put(&0u32.to_be_bytes()); // payload length
        out.put_u8(0); // stop
        out.put(&0u32.to_be_bytes()); // count
        ChaseResponseWriter { start, count: 0 }
    }

    /// Bytes `push` would add for this entry (to keep a reply within
    /// [`CHASE_PAYLOAD_BYTES_MAX`]).
    pub fn entry_bytes<A: AsRef<[u8]>, B: AsRef<[u8]>>(key: &[u8], attrs: &[(A, B)]) -> usize {
        attrs.iter().fold(
            CHASE_ENTRY_MIN_BYTES.saturating_add(key.len()),
            |n, (a, b)| {
                n.saturating_add(8)
                    .saturating_add(a.as_ref().len())
                    .saturating_add(b.as_ref().len())
            },
        )
    }

    /// Payload bytes written so far.
    pub fn payload_bytes<S: Sink + ?Sized>(&self, out: &S) -> usize {
        out.len()
            .saturating_sub(self.start)
            .saturating_sub(HEADER_BYTES + super::response::RESPONSE_FIXED_BYTES + 4)
    }

    /// Append one entry.
    pub fn push<S: Sink + ?Sized, A: AsRef<[u8]>, B: AsRef<[u8]>>(
        &mut self,
        out: &mut S,
        key: &[u8],
        depth: u32,
        attrs: &[(A, B)],
    ) {
        put_bytes(out, key);
        out.put(&depth.to_be_bytes());
        out.put(&len32(attrs.len()).to_be_bytes());
        for (a, b) in attrs {
            put_bytes(out, a.as_ref());
            put_bytes(out, b.as_ref());
        }
        self.count = self.count.saturating_add(1);
    }

    /// Patch the body length, payload length, stop and count. Returns false if the sink lost
    /// bytes written since `begin` (a caller bug: the frame is then unusable).
    pub fn finish<S: Sink + ?Sized>(self, out: &mut S, stop: ChaseStop) -> bool {
        let body = out
            .len()
            .saturating_sub(self.start)
            .saturating_sub(HEADER_BYTES);
        let payload_at = self
            .start
            .saturating_add(HEADER_BYTES)
            .saturating_add(super::response::RESPONSE_FIXED_BYTES);
        let payload = body.saturating_sub(super::response::RESPONSE_FIXED_BYTES + 4);
        out.patch(self.start.saturating_add(12), &len32(body).to_be_bytes())
            && out.patch(payload_at, &len32(payload).to_be_bytes())
            && out.patch(payload_at.saturating_add(4), &[stop as u8])
            && out.patch(payload_at.saturating_add(5), &self.count.to_be_bytes())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::super::{decode_request_frame, decode_response_frame, encode_request_frame};
    use super::super::{NativeRequest, ResponseBody};
    use super::*;

    #[test]
    fn request_round_trips_and_every_prefix_waits() {
        for fields in [None, Some(&["name", "age"][..])] {
            let mut out = Vec::new();
            encode_chase(&mut out, 3, b"u:1", &["follows", "likes"], 2, 500, fields);
            let (f, n) = decode_request_frame(&out).unwrap().unwrap();
            assert_eq!((f.request_id, n), (3, out.len()));
            let NativeRequest::Chase(c) = f.request else {
                panic!("not CHASE")
            };
            assert_eq!((c.key, c.depth, c.limit), (&b"u:1"[..], 2, 500));
            assert_eq!(
                c.links.iter().collect::<Vec<_>>(),
                [&b"follows"[..], b"likes"]
            );
            assert_eq!(
                c.fields.map(|f| f.iter().collect::<Vec<_>>()),
                fields.map(|f| f.iter().map(|s| s.as_bytes()).collect())
            );
            let mut again = Vec::new();
            encode_request_frame(&mut again, 3, &f.request);
            assert_eq!(again, out);
            for i in 0..out.len() {
                assert_eq!(decode_request_frame(&out[..i]).unwrap(), None);
            }
        }
    }

    #[test]
    fn malformed_requests_are_refused() {
        let none: Option<&[&str]> = None;
        // No link field.
        let mut out = Vec::new();
        encode_chase::<_, &str, &str>(&mut out, 1, b"k", &[], 1, 10, none);
        assert!(matches!(
            decode_request_frame(&out),
            Err(DecodeError::InvalidField(_))
        ));
        // Unknown flag; attributes without FIELDS.
        let mut out = Vec::new();
        encode_chase(&mut out, 1, b"k", &["f"], 1, 10, Some(&["a"][..]));
        out[17] = 0x02;
        assert!(matches!(
            decode_request_frame(&out),
            Err(DecodeError::InvalidField(_))
        ));
        out[17] = 0;
        assert!(matches!(
            decode_request_frame(&out),
            Err(DecodeError::InvalidField(_))
        ));
        // A link count the body cannot hold, and one over the batch bound.
        let mut out = Vec::new();
        encode_chase(&mut out, 1, b"k", &["f"], 1, 10, none);
        let at = 16 + CHASE_FIXED_BYTES + 4 + 1;
        out[at..at + 4].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(decode_request_frame(&out), Err(DecodeError::Truncated));
        out[at..at + 4].copy_from_slice(&(limits::BATCH_KEYS_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_request_frame(&out),
            Err(DecodeError::BatchTooLarge(limits::BATCH_KEYS_MAX + 1))
        );
        // A key over the key bound, before its bytes are awaited.
        let mut out = Vec::new();
        encode_chase(&mut out, 1, b"k", &["f"], 1, 10, none);
        out[16 + CHASE_FIXED_BYTES..16 + CHASE_FIXED_BYTES + 4]
            .copy_from_slice(&(limits::KEY_BYTES_MAX + 1).to_be_bytes());
        assert_eq!(
            decode_request_frame(&out),
            Err(DecodeError::KeyTooLarge(limits::KEY_BYTES_MAX + 1))
        );
    }

    #[test]
    fn reply_round_trips() {
        let mut out = b"xx".to_vec();
        let mut w = ChaseResponseWriter::begin(&mut out, 9, Epoch(4));
        let a: &[(&[u8], &[u8])] = &[(b"name", b"ann"), (b"follows", b"u:2 u:3")];
        w.push(&mut out, b"u:1", 0, a);
        let none: &[(&[u8], &[u8])] = &[];
        w.push(&mut out, b"u:2", 1, none);
        assert_eq!(
            w.payload_bytes(&out),
            1 + 4
                + ChaseResponseWriter::entry_bytes(b"u:1", a)
                + ChaseResponseWriter::entry_bytes(b"u:2", none)
        );
        assert!(w.finish(&mut out, ChaseStop::Limit));
        let (f, n) = decode_response_frame(&out[2..]).unwrap().unwrap();
        assert_eq!(
            (n, f.opcode, f.epoch),
            (out.len() - 2, Opcode::Chase, Epoch(4))
        );
        let ResponseBody::Value(blob) = f.body else {
            panic!()
        };
        let items = ChaseItems::parse(blob).unwrap();
        assert_eq!((items.stop, items.len()), (ChaseStop::Limit, 2));
        let v: Vec<_> = items.iter().collect();
        assert_eq!(
            (v[0].key, v[0].depth, v[0].attrs_len()),
            (&b"u:1"[..], 0, 2)
        );
        assert_eq!(v[0].attrs().collect::<Vec<_>>(), a.to_vec());
        assert_eq!(
            (v[1].key, v[1].depth, v[1].attrs().count()),
            (&b"u:2"[..], 1, 0)
        );
        let mut again = Vec::new();
        super::super::encode_response_frame(&mut again, &f);
        assert_eq!(again, out[2..]);
        // Corruptions: unknown stop, a count beyond the bytes, trailing bytes.
        let stop_at = 2 + HEADER_BYTES + super::super::response::RESPONSE_FIXED_BYTES + 4;
        let mut bad = out.clone();
        bad[stop_at] = 9;
        assert!(decode_response_frame(&bad[2..]).is_err());
        let mut bad = out.clone();
        bad[stop_at + 1..stop_at + 5].copy_from_slice(&3u32.to_be_bytes());
        assert!(decode_response_frame(&bad[2..]).is_err());
        let mut bad = out.clone();
        bad[stop_at + 1..stop_at + 5].copy_from_slice(&1u32.to_be_bytes());
        assert_eq!(
            decode_response_frame(&bad[2..]),
            Err(DecodeError::TrailingBytes)
        );
    }
}
