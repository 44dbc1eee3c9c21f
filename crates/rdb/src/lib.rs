//! Redis's DUMP payload format, for strings and hashes: read what Redis DUMPs, write what
//! every Redis RESTOREs. Sans-I/O: bytes in, an [`Object`] or bytes out.
//!
//! `DUMP key` replies with one serialized object and `RESTORE key ttl payload` takes it back.
//! Tools that move data between Redis servers (`MIGRATE`, `redis-cli --cluster import`,
//! redis-shake's restore mode, DUMP/RESTORE scripts) speak only this payload, so a Ringlet node
//! that reads and writes it can be their source or their target. The DUMP and RESTORE command
//! handlers live in the server and cluster crates; this crate is only the codec.
//!
//! ```
//! use ringlet_rdb::{dump_hash, dump_string, restore, Object};
//!
//! let payload = dump_hash([(&b"name"[..], &b"ringlet"[..])].into_iter());
//! let fields = vec![(b"name".to_vec(), b"ringlet".to_vec())];
//! assert_eq!(restore(&payload), Ok(Object::Hash(fields)));
//!
//! // What Redis 7.0 replies to `SET n 12345` then `DUMP n`: an INT16-encoded string.
//! let redis = b"\x00\xc1\x39\x30\x0a\x00\x9d\x94\xea\x27\x93\xfc\x08\xb9";
//! assert_eq!(restore(redis), Ok(Object::String(b"12345".to_vec())));
//! assert_eq!(restore(&dump_string(b"12345")), restore(redis));
//! ```
//!
//! # Goals
//!
//! - Read every encoding Redis (2.6 up to 7.4) DUMPs for a string or a hash, and the zipmap
//!   hashes of older RDB files.
//! - Write payloads that every Redis from 2.6 on RESTOREs (but 3.2: see "What we write").
//! - Never panic on any input and never allocate a length that came from the payload before
//!   it has been checked against the bytes left and [`ringlet_types::limits`].
//!
//! # Non-goals
//!
//! - Lists, sets, sorted sets, streams and module values: Ringlet stores none of them, so
//!   they are refused with an error that names the type ([`Error::Unsupported`]).
//! - Whole RDB files (header, aux fields, databases, expiry opcodes): a payload is one object.
//! - Writing compact encodings (listpack, LZF): see "What we write" below.
//!
//! # The payload
//!
//! ```text
//! +-------------+--------------------------+-------------------+--------------------+
//! | type (1 B)  | object (type-specific)   | RDB version u16LE | CRC-64 u64LE       |
//! +-------------+--------------------------+-------------------+--------------------+
//!               '---- RDB object encoding   '--- 2 bytes        '--- over every byte
//!                                                                    before it (Jones,
//!                                                                    reflected, init 0)
//! ```
//!
//! [`restore`] checks the footer first, as Redis's `verifyDumpPayload` does: a version of 0 or
//! above [`RDB_VERSION_MAX`], or a CRC mismatch, is refused before any byte of the object is parsed.
//! Redis 7.0 writes version 10, 7.2 writes 11 and 7.4 writes 12; the type bytes this crate
//! reads mean the same in all of them (7.4's new hash types 22–25 carry field expirations,
//! which Ringlet does not keep, and are refused by name).
//!
//! ## Lengths and strings
//!
//! A length is 1, 2, 5 or 9 bytes, chosen by the top two bits of its first byte:
//!
//! ```text
//! 00LLLLLL                    6-bit length
//! 01LLLLLL LLLLLLLL           14-bit length (big-endian)
//! 10000000 + u32 big-endian   32-bit length
//! 10000001 + u64 big-endian   64-bit length
//! 11EEEEEE                    not a length: a string in special encoding E follows
//! ```
//!
//! A string is a length and that many bytes, or a special encoding: E = 0, 1, 2 are integers
//! stored as i8, i16 LE, i32 LE (the string is their decimal text, as GET shows it); E = 3 is
//! an LZF-compressed string: `<compressed length><original length><LZF bytes>`. Redis
//! compresses any string over 20 bytes when that saves space (`rdbcompression yes`, the
//! default), so DUMPs of long values and of hash fields in a hash table use it. The original
//! length is checked against the limit of what the string is (a field name, a value) and
//! against what the compressed bytes could possibly expand to (LZF turns 3 bytes into at most
//! 264) before the output buffer is allocated, and decompression must fill it exactly.
//!
//! ## Objects this crate reads
//!
//! | type | what | layout |
//! |---|---|---|
//! | 0 | string | one string |
//! | 4 | hash ("hashtable") | length N, then N × (field string, value string) |
//! | 16 | hash as listpack (7.x small hashes) | one string holding a listpack |
//! | 13 | hash as ziplist (what Redis 2.6–6.2 DUMPed for small hashes) | one string holding a ziplist |
//! | 9 | hash as zipmap (Redis ≤ 2.4) | one string holding a zipmap |
//!
//! The three compact encodings alternate field, value, field, value; their own headers (total
//! bytes, element count, tail offset, back-lengths) are checked against the blob they came in,
//! as Redis's deep sanitization does (`sanitize-dump-payload yes`). Integers inside them come
//! back as their decimal text. See the modules `listpack`, `ziplist` and `zipmap`.
//!
//! A hash with no fields, or with one field twice, is refused, as Redis refuses it ("Bad data
//! format"). Bytes after the object and before the footer are refused too (Redis ignores
//! them; a payload with extra bytes was not made by a DUMP, so something is wrong with it).
//!
//! ## Limits
//!
//! - the payload: at most `COMMAND_ARG_BYTES_MAX` (it arrives as one command argument);
//! - a string or a field's value: at most `VALUE_BYTES_MAX`; a field name: `KEY_BYTES_MAX`
//!   (a record's field name limit); a hash: at most `ARRAY_ITEMS_MAX` fields;
//! - a hash's field names and values together: at most `VALUE_BYTES_MAX`, because Ringlet
//!   stores a record as one value, so a larger hash could never be stored. This bound also
//!   caps what LZF can make a small payload expand to.
//!
//! # What we write
//!
//! [`dump_string`] and [`dump_hash`] write the plain encodings (type 0 with a raw length, type
//! 4 with raw strings), which every Redis since 2.6 reads: a listpack (type 16) would be
//! refused by anything before 7.0, and LZF saves bytes only on the wire. Redis converts a
//! type-4 hash to a listpack itself when it is small, so the restored key is the same as one
//! Redis made.
//!
//! The footer says RDB version 6 (Redis 2.6's), not 10, because the version, not the
//! encoding, is what decides whether a Redis accepts a payload: Redis 4.0 and later accept
//! any version up to their own (so 7.0 refuses 11 and 12, and 6.x refuses 10), and Redis
//! 2.6 to 3.0 accept exactly 6 (3.2 accepts exactly 7, the one release this misses). RESTORE
//! reads the version for nothing else. Version 6 has no 64-bit length; we write one only
//! for a string over 4 GiB, far beyond `VALUE_BYTES_MAX`.
//!
//! # Modules
//!
//! - this file: the payload, its footer, lengths and strings, type 0 and type 4, the limits
//!   every hash encoding shares (`HashBuilder`);
//! - `listpack`: the listpack blob of type 16;
//! - `ziplist`: the ziplist blob of type 13;
//! - `zipmap`: the zipmap blob of type 9.

#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

mod listpack;
mod ziplist;
mod zipmap;

use ringlet_types::limits::{
    ARRAY_ITEMS_MAX, COMMAND_ARG_BYTES_MAX, KEY_BYTES_MAX, VALUE_BYTES_MAX,
};
use std::collections::HashSet;

/// The RDB version [`dump_string`] and [`dump_hash`] write: Redis 2.6's. Redis 4.0 and later
/// RESTORE a payload whose version is at most their own, Redis 2.6 to 3.0 only version 6, so
/// the oldest version that holds our encodings reaches the most servers (every Redis but 3.2;
/// version 10, what Redis 7.0 writes, would shut out every Redis before 7.0).
pub const RDB_VERSION_DUMP: u16 = 6;

/// The highest RDB version [`restore`] accepts: Redis 7.4's. Later versions may give the type
/// bytes new meanings, so they are refused as Redis refuses versions above its own.
pub const RDB_VERSION_MAX: u16 = 12;

/// Redis's CRC-64 (Jones polynomial, reflected, initial value 0), as `crc64(0, ...)` in
/// `src/crc64.c`. Slice-by-16 tables (32 KiB): a payload of up to 64 MiB is checksummed
/// once on RESTORE and once on DUMP: 60 MiB took ~150 ms byte at a time, ~44 ms like this
/// (release build, this machine).
const CRC64: crc::Crc<u64, crc::Table<16>> =
    crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_REDIS);

/// Bytes of the footer: the RDB version (2) and the CRC (8).
const FOOTER_BYTES: usize = 10;

/// Largest blob (listpack, ziplist, zipmap) one hash may come in. Not a new limit: derived
/// from the ones a hash already has. Each element costs at most 10 bytes of header in any of
/// the three encodings (listpack: 5 of encoding + 5 of back-length; ziplist: 5 of previous
/// length + 5 of encoding), a hash holds at most `2 × ARRAY_ITEMS_MAX` elements and at most
/// `VALUE_BYTES_MAX` bytes of them, and the blob has a header and an end byte.
const BLOB_BYTES_MAX: u64 = VALUE_BYTES_MAX as u64 + 2 * ARRAY_ITEMS_MAX as u64 * 10 + 64;

/// Most output bytes LZF can make from one input byte: a back-reference of 3 bytes copies at
/// most 264 bytes (7 + 255 + 2), so an original length above 88 × the compressed length can
/// only be a lie, and is refused before its buffer is allocated.
const LZF_EXPANSION_MAX: u64 = 88;

/// A hash's fields and values, in order.
pub type Fields = Vec<(Vec<u8>, Vec<u8>)>;

/// One object of a DUMP payload, as a Redis client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Object {
    /// A string value (integers come back as their decimal text, as GET shows them).
    String(Vec<u8>),
    /// A hash: its fields and values, in the payload's order, no field twice.
    Hash(Fields),
}

/// Why a payload was refused. The `Display` texts read after "ERR " in a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The footer's RDB version is 0 or above [`RDB_VERSION_MAX`] (Redis's text).
    #[error("DUMP payload version or checksum are wrong")]
    Version {
        /// The version the payload claims.
        version: u16,
    },
    /// The CRC-64 does not match the bytes, or the payload is too short to have a footer
    /// (Redis's text).
    #[error("DUMP payload version or checksum are wrong")]
    Checksum,
    /// The payload holds an object of a type Redis has but Ringlet does not store.
    #[error("DUMP payload holds a {type_name}, which Ringlet does not store")]
    Unsupported {
        /// The type, as a user names it: "list", "set", "sorted set", "stream", ...
        type_name: &'static str,
    },
    /// The type byte is not one of Redis's object types.
    #[error("Bad data format: unknown object type {type_byte}")]
    UnknownType {
        /// The first byte of the payload.
        type_byte: u8,
    },
    /// The object ends before its lengths say it does.
    #[error("Bad data format: the payload ends inside the object")]
    Truncated,
    /// Something is larger than Ringlet allows.
    #[error("DUMP payload's {what} {len} is over Ringlet's limit of {max}")]
    TooLarge {
        /// What is too large: "payload length", "string length", "field name length",
        /// "field value length", "hash field count", "hash size", "encoded hash length".
        what: &'static str,
        /// Its size (bytes; fields for "hash field count").
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A hash names the same field twice.
    #[error("Bad data format: a hash has a duplicate field")]
    DuplicateField,
    /// Bytes are left between the object and the footer.
    #[error("Bad data format: {count} bytes after the object")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// The bytes are not a valid encoding; the text says which rule they broke.
    #[error("Bad data format: {0}")]
    Malformed(&'static str),
}

/// Serialize a string value as a DUMP payload (type 0, raw length encoding, RDB version
/// [`RDB_VERSION_DUMP`]).
///
/// # Panics
///
/// Never (a value longer than `u64::MAX` bytes cannot exist).
pub fn dump_string(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len().saturating_add(24));
    out.push(TYPE_STRING);
    encode_string(&mut out, value);
    finish(out)
}

/// Serialize a hash as a DUMP payload (type 4: a field count, then raw field and value
/// strings, RDB version [`RDB_VERSION_DUMP`]).
///
/// The caller hands distinct fields (a record's); a hash with no fields makes a payload that
/// Redis and [`restore`] refuse, as there is no empty hash in Redis.
///
/// # Panics
///
/// If `fields.len()` is not the number of items `fields` yields (a broken
/// `ExactSizeIterator`, a caller bug): the count is written first, so the payload would be
/// corrupt.
pub fn dump_hash<'a>(fields: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(TYPE_HASH);
    let count = fields.len();
    encode_len(&mut out, count as u64);
    let mut written = 0usize;
    for (name, value) in fields {
        encode_string(&mut out, name);
        encode_string(&mut out, value);
        written = written.saturating_add(1);
    }
    assert_eq!(
        written, count,
        "ExactSizeIterator::len() differs from the items it yields"
    );
    finish(out)
}

/// Parse a DUMP payload.
///
/// Checks the size, then the footer (version, CRC), then parses the object; see the crate
/// documentation for what is accepted.
///
/// # Errors
///
/// [`Error::Version`] and [`Error::Checksum`] for a bad footer, [`Error::Unsupported`] for a
/// list, set, sorted set, stream or module value, and the other variants for a payload that
/// is malformed or over a limit.
///
/// # Panics
///
/// Never, whatever the bytes.
pub fn restore(payload: &[u8]) -> Result<Object, Error> {
    if payload.len() as u64 > u64::from(COMMAND_ARG_BYTES_MAX) {
        return Err(Error::TooLarge {
            what: "payload length",
            len: payload.len() as u64,
            max: u64::from(COMMAND_ARG_BYTES_MAX),
        });
    }
    let body_len = payload
        .len()
        .checked_sub(FOOTER_BYTES)
        .ok_or(Error::Checksum)?;
    let (body, footer) = payload.split_at(body_len);
    let (version, crc) = footer.split_at(2);
    let version = u16::from_le_bytes(version.try_into().map_err(|_| Error::Checksum)?);
    if version == 0 || version > RDB_VERSION_MAX {
        return Err(Error::Version { version });
    }
    let crc = u64::from_le_bytes(crc.try_into().map_err(|_| Error::Checksum)?);
    let crc_bytes = payload
        .get(..body_len.saturating_add(2))
        .ok_or(Error::Checksum)?;
    if CRC64.checksum(crc_bytes) != crc {
        return Err(Error::Checksum);
    }

    let mut r = Reader::new(body);
    let object = match r.u8()? {
        TYPE_STRING => Object::String(r.string(Bound::Value)?),
        TYPE_HASH => Object::Hash(hash_table(&mut r)?),
        TYPE_HASH_ZIPMAP => Object::Hash(zipmap::decode(&r.string(Bound::Blob)?)?),
        TYPE_HASH_ZIPLIST => Object::Hash(ziplist::decode_hash(&r.string(Bound::Blob)?)?),
        TYPE_HASH_LISTPACK => Object::Hash(listpack::decode_hash(&r.string(Bound::Blob)?)?),
        other => {
            return Err(match type_name(other) {
                Some(type_name) => Error::Unsupported { type_name },
                None => Error::UnknownType { type_byte: other },
            })
        }
    };
    match r.left() {
        0 => Ok(object),
        count => Err(Error::TrailingBytes { count }),
    }
}

// Object types (`RDB_TYPE_*` in Redis's `src/rdb.h`) this crate reads or writes.
const TYPE_STRING: u8 = 0;
const TYPE_HASH: u8 = 4;
const TYPE_HASH_ZIPMAP: u8 = 9;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_HASH_LISTPACK: u8 = 16;

/// The name of every other object type Redis (up to 7.4) has, for the refusal.
fn type_name(type_byte: u8) -> Option<&'static str> {
    Some(match type_byte {
        1 | 10 | 14 | 18 => "list",
        2 | 11 | 20 => "set",
        3 | 5 | 12 | 17 => "sorted set",
        6 | 7 => "module value",
        15 | 19 | 21 => "stream",
        22..=25 => "hash with field expirations",
        _ => return None,
    })
}

/// A type-4 hash: a count, then that many (field, value) string pairs.
fn hash_table(r: &mut Reader<'_>) -> Result<Fields, Error> {
    let count = r.len()?;
    if count > u64::from(ARRAY_ITEMS_MAX) {
        return Err(Error::TooLarge {
            what: "hash field count",
            len: count,
            max: u64::from(ARRAY_ITEMS_MAX),
        });
    }
    // Each pair takes at least 2 bytes (two 1-byte lengths), so this reserve is bounded by
    // the payload, not by the count it claims.
    let reserve = usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(r.left() / 2);
    let mut hash = HashBuilder::with_capacity(reserve);
    // Bounded: `count` ≤ ARRAY_ITEMS_MAX.
    for _ in 0..count {
        let name = r.string(Bound::FieldName)?;
        let value = r.string(Bound::Value)?;
        hash.push(name, value)?;
    }
    hash.finish()
}

/// Collects a hash's fields and checks the limits every encoding shares: the field count,
/// each name's and value's length, the total bytes, no field twice, at least one field.
struct HashBuilder {
    fields: Fields,
    bytes: u64,
}

impl HashBuilder {
    fn with_capacity(reserve: usize) -> Self {
        Self {
            fields: Vec::with_capacity(reserve.min(ARRAY_ITEMS_MAX as usize)),
            bytes: 0,
        }
    }

    fn push(&mut self, name: Vec<u8>, value: Vec<u8>) -> Result<(), Error> {
        check_len("field name length", name.len(), KEY_BYTES_MAX)?;
        check_len("field value length", value.len(), VALUE_BYTES_MAX)?;
        if self.fields.len() >= ARRAY_ITEMS_MAX as usize {
            return Err(Error::TooLarge {
                what: "hash field count",
                len: (self.fields.len() as u64).saturating_add(1),
                max: u64::from(ARRAY_ITEMS_MAX),
            });
        }
        self.add_bytes(name.len().saturating_add(value.len()))?;
        self.fields.push((name, value));
        Ok(())
    }

    /// Count `n` more bytes of names and values against the hash's total.
    fn add_bytes(&mut self, n: usize) -> Result<(), Error> {
        self.bytes = self.bytes.saturating_add(n as u64);
        if self.bytes > u64::from(VALUE_BYTES_MAX) {
            return Err(Error::TooLarge {
                what: "hash size",
                len: self.bytes,
                max: u64::from(VALUE_BYTES_MAX),
            });
        }
        Ok(())
    }

    fn finish(self) -> Result<Fields, Error> {
        if self.fields.is_empty() {
            return Err(Error::Malformed("a hash has no fields"));
        }
        let mut seen = HashSet::with_capacity(self.fields.len());
        if !self
            .fields
            .iter()
            .all(|(name, _)| seen.insert(name.as_slice()))
        {
            return Err(Error::DuplicateField);
        }
        Ok(self.fields)
    }
}

fn check_len(what: &'static str, len: usize, max: u32) -> Result<(), Error> {
    if len as u64 > u64::from(max) {
        return Err(Error::TooLarge {
            what,
            len: len as u64,
            max: u64::from(max),
        });
    }
    Ok(())
}

/// What a string read from the payload is, and so how long it may be.
#[derive(Clone, Copy)]
enum Bound {
    Value,
    FieldName,
    Blob,
}

impl Bound {
    fn max(self) -> (&'static str, u64) {
        match self {
            Bound::Value => ("string length", u64::from(VALUE_BYTES_MAX)),
            Bound::FieldName => ("field name length", u64::from(KEY_BYTES_MAX)),
            Bound::Blob => ("encoded hash length", BLOB_BYTES_MAX),
        }
    }
}

/// One element of a listpack or ziplist: a string, or an integer it stores as such.
#[derive(Clone, Copy, Debug)]
enum Element<'a> {
    Bytes(&'a [u8]),
    Int(i64),
}

impl Element<'_> {
    fn to_vec(self) -> Vec<u8> {
        match self {
            Element::Bytes(b) => b.to_vec(),
            Element::Int(v) => decimal(v),
        }
    }
}

/// Pairs the elements of a compact encoding (field, value, field, value, ...) into a hash.
struct Pairs {
    hash: HashBuilder,
    name: Option<Vec<u8>>,
}

impl Pairs {
    fn new() -> Self {
        Self {
            hash: HashBuilder::with_capacity(0),
            name: None,
        }
    }

    fn push(&mut self, element: Element<'_>) -> Result<(), Error> {
        match self.name.take() {
            None => self.name = Some(element.to_vec()),
            Some(name) => self.hash.push(name, element.to_vec())?,
        }
        Ok(())
    }

    fn finish(self) -> Result<Fields, Error> {
        if self.name.is_some() {
            return Err(Error::Malformed("a field without a value"));
        }
        self.hash.finish()
    }
}

/// A cursor over the object's bytes; every read checks what is left.
struct Reader<'a> {
    bytes: &'a [u8],
}

/// A length field: a plain length, or the marker of a specially encoded string.
enum Length {
    Plain(u64),
    Special(u8),
}

// Special string encodings (`RDB_ENC_*`).
const ENC_INT8: u8 = 0;
const ENC_INT16: u8 = 1;
const ENC_INT32: u8 = 2;
const ENC_LZF: u8 = 3;

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    fn left(&self) -> usize {
        self.bytes.len()
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], Error> {
        let n = usize::try_from(n).map_err(|_| Error::Truncated)?;
        if n > self.bytes.len() {
            return Err(Error::Truncated);
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        self.take(N as u64)?
            .try_into()
            .map_err(|_| Error::Truncated)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    /// A length or a special-encoding marker (`rdbLoadLenByRef`).
    fn length(&mut self) -> Result<Length, Error> {
        let first = self.u8()?;
        Ok(match first >> 6 {
            0 => Length::Plain(u64::from(first & 0x3f)),
            1 => Length::Plain(u64::from(first & 0x3f) << 8 | u64::from(self.u8()?)),
            3 => Length::Special(first & 0x3f),
            _ => match first {
                0x80 => Length::Plain(u64::from(u32::from_be_bytes(self.array()?))),
                0x81 => Length::Plain(u64::from_be_bytes(self.array()?)),
                _ => return Err(Error::Malformed("unknown length encoding")),
            },
        })
    }

    /// A length where a special encoding makes no sense (a count, an LZF length).
    fn len(&mut self) -> Result<u64, Error> {
        match self.length()? {
            Length::Plain(n) => Ok(n),
            Length::Special(_) => Err(Error::Malformed("an encoded string where a length belongs")),
        }
    }

    /// A string in any of its encodings, at most `bound` long once decoded.
    fn string(&mut self, bound: Bound) -> Result<Vec<u8>, Error> {
        let (what, max) = bound.max();
        let too_large = |len| Error::TooLarge { what, len, max };
        match self.length()? {
            Length::Plain(n) => {
                if n > max {
                    return Err(too_large(n));
                }
                Ok(self.take(n)?.to_vec())
            }
            Length::Special(ENC_INT8) => Ok(decimal(i64::from(i8::from_le_bytes(self.array()?)))),
            Length::Special(ENC_INT16) => Ok(decimal(i64::from(i16::from_le_bytes(self.array()?)))),
            Length::Special(ENC_INT32) => Ok(decimal(i64::from(i32::from_le_bytes(self.array()?)))),
            Length::Special(ENC_LZF) => {
                let compressed_len = self.len()?;
                let len = self.len()?;
                if len > max {
                    return Err(too_large(len));
                }
                let compressed = self.take(compressed_len)?;
                if len > (compressed.len() as u64).saturating_mul(LZF_EXPANSION_MAX) {
                    return Err(Error::Malformed(
                        "LZF length larger than its data can expand to",
                    ));
                }
                // `len` ≤ max (≤ BLOB_BYTES_MAX) and ≤ 88 × bytes present: safe to allocate.
                let mut out = vec![0u8; usize::try_from(len).map_err(|_| too_large(len))?];
                match lzf_rust::decompress(compressed, &mut out) {
                    Ok(n) if n == out.len() => Ok(out),
                    _ => Err(Error::Malformed("invalid LZF compressed string")),
                }
            }
            Length::Special(_) => Err(Error::Malformed("unknown string encoding")),
        }
    }
}

/// An integer's decimal text: what Redis shows for an integer-encoded string.
fn decimal(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// Append a length in its shortest encoding (`rdbSaveLen`).
fn encode_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if let Ok(len) = u32::try_from(len) {
        out.push(0x80);
        out.extend_from_slice(&len.to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// Append a raw string: its length and its bytes (never integer-encoded nor compressed).
fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    encode_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Append the footer: the RDB version, then the CRC of everything before the CRC.
fn finish(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&RDB_VERSION_DUMP.to_le_bytes());
    let crc = CRC64.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[cfg(test)]
mod tests;
