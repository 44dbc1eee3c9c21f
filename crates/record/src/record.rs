//! The KVL record value and its byte format.
//!
//! A [`Record`] is an ordered list of uniquely named fields. It is kept as a `Vec` (the order
//! the fields were first inserted, which HGETALL/HKEYS show, as Redis does for small hashes)
//! plus a `BTreeMap` from name to position, so a lookup is `O(log n)` and a command that
//! touches `m` fields of an `n`-field record stays `O(n + m log n)` instead of `O(n·m)`.
//! Removing a field is `O(n)` (the positions after it shift); every command already pays
//! `O(n)` to decode and encode the record, so that costs nothing extra asymptotically.
//! The map duplicates the names; a decoded record lives only for one command, so the
//! transient memory was preferred to a quadratic HSET of many pairs.
//!
//! See the crate docs for the byte layout.

use std::collections::BTreeMap;

use ringlet_types::limits::{KEY_BYTES_MAX, VALUE_BYTES_MAX};

use crate::{FIELD_NAME_BYTES_MAX, LINKS_PER_FIELD_MAX};

/// First byte of every encoded record. A new layout gets a new number; decoders refuse
/// versions they do not know instead of guessing.
pub const FORMAT_VERSION: u8 = 1;

const TAG_BYTES: u8 = 0;
const TAG_LINK: u8 = 1;
const TAG_LINKS: u8 = 2;

const HINT_NONE: u8 = 0;
const HINT_SOME: u8 = 1;
/// A hint that also names the data entry ([`Hint::data`]).
const HINT_DATA: u8 = 2;
/// [`HINT_DATA`]'s fields in varints (the crc as 4 bytes): what is written since session 14.
/// A single node's hint is mostly zeros and small offsets; the fixed form's 38 bytes were
/// most of a link (a target key of ~8 bytes), and the bytes a bulk load writes are what
/// its node spends its time on (the kernel zeroing fresh pages, the copies).
const HINT_PACKED: u8 = 3;
/// A single node's data hint (node, epoch and memgest 0: what a single node writes), without
/// those three zeros and with the table word and the entry offset in fewer bytes: written
/// since session 15 for every hint it can hold (docs/design/loader.md, "Smaller links").
/// The values are [`HINT_PACKED`]'s, so a reader validates it exactly as before.
const HINT_LOCAL: u8 = 4;
/// [`HINT_LOCAL`] without the table word, in a link list only: the hint's table is the one
/// of the link before it in the same list (session 19). A loaded list's targets all sit in
/// one pre-sized index table, so flag 4 repeated the same ~5 bytes in every link (~28 a
/// link, a fifth of a chunked graph's bytes); the table is written once per run of links
/// that share it. The values are flag 4's (the table is carried over, exactly), so a
/// reader validates such a hint as before. Written for a link whose hint has a flag-4 form
/// and whose list predecessor's hint has one with the same table ([`local_table`]); refused
/// first in a list, after a link without such a hint, and in a single-link field.
const HINT_LOCAL_SAME: u8 = 5;

/// [`HINT_LOCAL`] splits the table word at these bits, each part a varint: the engine's
/// layout word is `gen u16 << 48 | buckets << 20 | table offset units`, whose high bits make
/// one varint of it 8 bytes where its parts take ~5. Any u64 splits (the parts' ranges are
/// checked when decoded), so this is a size choice, not a dependency on the engine.
const TABLE_HIGH_SHIFT: u32 = 48;
const TABLE_MID_SHIFT: u32 = 20;
const TABLE_MID_MASK: u64 = (1 << (TABLE_HIGH_SHIFT - TABLE_MID_SHIFT)) - 1;
const TABLE_LOW_MASK: u64 = (1 << TABLE_MID_SHIFT) - 1;
/// [`HINT_LOCAL`] writes the entry offset in words from the start of its table: an index
/// entry is an 8-byte-aligned word inside the table, and the table starts at the table
/// word's low part × 64 KiB (the engine's `layout::TABLE_ALIGN_BYTES`), so the offset
/// takes ~3 bytes where the absolute one took ~4. A hint whose entry is not at such a
/// place keeps flag 3: again a size choice, every value is written exactly.
const ENTRY_ALIGN: u64 = 8;
const TABLE_UNIT_BYTES: u64 = 64 * 1024;

/// The table a following link of the same list may leave out ([`HINT_LOCAL_SAME`]): `h`'s,
/// if `h` has a [`HINT_LOCAL`] form. Decided from the hint's values, not from the flag it
/// was read with, so that the encoder and the decoder agree however the links before were
/// written (a list appended to by `splice_links` keeps its old links' bytes, which may be
/// in flag 3 or, before session 19, flag 4 throughout).
fn local_table(h: Option<&Hint>) -> Option<u64> {
    let h = h?;
    let d = h.data?;
    local_words(h, &d).map(|_| h.table)
}

/// The word offset of `h.entry` from its table's start, if [`HINT_LOCAL`] can write it.
fn local_entry(h: &Hint) -> Option<u64> {
    let rel = h
        .entry
        .checked_sub((h.table & TABLE_LOW_MASK) * TABLE_UNIT_BYTES)?;
    (rel % ENTRY_ALIGN == 0).then_some(rel / ENTRY_ALIGN)
}

/// Encoded size of a hint after its flag byte: node u32 + epoch u64 + table u64 + entry u64.
const HINT_BYTES: usize = 4 + 8 + 8 + 8;
/// Encoded size of a [`HINT_DATA`] hint: the above + location u32 + crc u32 + memgest u16.
const HINT_DATA_BYTES: usize = HINT_BYTES + 4 + 4 + 2;

/// Fewest bytes one encoded link can take: target length (1) + hint flag (1).
const LINK_BYTES_MIN: usize = 2;
/// Fewest bytes one encoded field can take: name length (1) + tag (1) + one more byte (a
/// value length, a link's target length, or a list count).
const FIELD_BYTES_MIN: usize = 3;

/// Where a link's target was last seen: which node held it and where in that node's
/// engine its index entry was (`ringlet_engine::read::Position`), enough for a reader to
/// try one direct read there. A hint is only a guess and is never trusted: the read is
/// validated like a probe (same table, checksum, index re-check, full key; docs/design/
/// records.md), and a stale hint (node moved, table grown, entry rewritten elsewhere,
/// evicted, deleted) falls back to a lookup by key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hint {
    /// Node that held the target (its cluster node id; 0 on a single node).
    pub node: u32,
    /// Cluster-map epoch in which the hint was taken (0 on a single node); diagnostics.
    pub epoch: u64,
    /// The engine's index layout word when the hint was taken (names the table).
    pub table: u64,
    /// Byte offset of the target's index entry in that node's index region.
    pub entry: u64,
    /// The target's data entry, for a read that skips the index
    /// (`ringlet_engine::read::read_entry_direct`); None in hints written before format 3 of
    /// the engine's regions.
    pub data: Option<DataHint>,
}

/// Where a link target's data entry was and which image it held
/// (`ringlet_engine::read::Direct`): the reader checks the entry there is still published
/// (its live bit) and is that image (this checksum), so it needs no index access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataHint {
    /// Data offset / 8.
    pub location: u32,
    /// CRC-32C the index held for the entry.
    pub crc: u32,
    /// The entry's memgest (checksummed with the location).
    pub memgest: u16,
}

/// A link to another item, by key, with an optional location hint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Link {
    /// Key of the linked item.
    pub target: Vec<u8>,
    /// Where the target was last seen, if known. Commands create links without hints; a
    /// resolver (bulk loader, server) fills them in.
    pub hint: Option<Hint>,
}

impl Link {
    fn as_ref(&self) -> LinkRef<'_> {
        LinkRef {
            target: &self.target,
            hint: self.hint,
        }
    }

    /// A link to `target` without a hint.
    pub fn to(target: impl Into<Vec<u8>>) -> Link {
        Link {
            target: target.into(),
            hint: None,
        }
    }
}

/// The value of one record field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// Plain bytes, as a Redis hash value.
    Bytes(Vec<u8>),
    /// One link.
    Link(Link),
    /// A list of links (KELI's follower lists), in insertion order.
    Links(Vec<Link>),
}

impl Field {
    /// What HGET / HGETALL / HVALS show for this field: the bytes themselves; a link's target
    /// key; a link list's target keys joined by one space (`"a b c"`; an empty list shows
    /// `""`). Keys containing spaces are therefore ambiguous in the display string: use
    /// `LINK GET` to read a list exactly.
    pub fn display(&self) -> Vec<u8> {
        match self {
            Field::Bytes(b) => b.clone(),
            Field::Link(l) => l.target.clone(),
            Field::Links(ls) => {
                let len = ls.iter().map(|l| l.target.len() + 1).sum::<usize>();
                let mut out = Vec::with_capacity(len);
                for (i, l) in ls.iter().enumerate() {
                    if i > 0 {
                        out.push(b' ');
                    }
                    out.extend_from_slice(&l.target);
                }
                out
            }
        }
    }

    /// Length of [`Field::display`] without building it (HSTRLEN).
    pub fn display_len(&self) -> usize {
        match self {
            Field::Bytes(b) => b.len(),
            Field::Link(l) => l.target.len(),
            Field::Links(ls) => {
                ls.iter().map(|l| l.target.len()).sum::<usize>() + ls.len().saturating_sub(1)
            }
        }
    }

    /// Whether this is a link or a link list.
    pub fn is_link(&self) -> bool {
        !matches!(self, Field::Bytes(_))
    }

    /// The link targets of this field, in order (none for plain bytes).
    pub fn targets(&self) -> impl Iterator<Item = &[u8]> {
        let links: &[Link] = match self {
            Field::Bytes(_) => &[],
            Field::Link(l) => std::slice::from_ref(l),
            Field::Links(ls) => ls,
        };
        links.iter().map(|l| l.target.as_slice())
    }

    fn encoded_len(&self) -> usize {
        1 + match self {
            Field::Bytes(b) => varint_len(b.len() as u64) + b.len(),
            Field::Link(l) => link_encoded_len(l, &mut None),
            Field::Links(ls) => {
                let mut prev = None;
                varint_len(ls.len() as u64)
                    + ls.iter()
                        .map(|l| link_encoded_len(l, &mut prev))
                        .sum::<usize>()
            }
        }
    }
}

/// Why bytes are not a valid encoded record. Every variant means "malformed": a record is
/// always stored whole, so there is no "incomplete".
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Zero bytes: not even a format version.
    #[error("record is empty")]
    Empty,
    /// The first byte names a format this build does not know.
    #[error("unknown record format version {version}")]
    UnknownVersion {
        /// The version byte found.
        version: u8,
    },
    /// A length, count or fixed-size item runs past the end of the input.
    #[error("record is truncated")]
    Truncated,
    /// A varint is longer than 10 bytes, overflows u64, or is not in its shortest form.
    #[error("record has a malformed varint")]
    BadVarint,
    /// A field tag or hint flag byte has an unknown value.
    #[error("record has an unknown tag {tag}")]
    BadTag {
        /// The tag byte found.
        tag: u8,
    },
    /// A length or count is beyond this crate's bounds.
    #[error("record {what} exceeds its bound")]
    TooLarge {
        /// Which item: "record", "field name", "link target" or "link list".
        what: &'static str,
    },
    /// Two fields have the same name.
    #[error("record has a duplicate field name")]
    DuplicateField,
    /// Bytes are left after the last field.
    #[error("record has trailing bytes")]
    TrailingBytes,
}

/// A KVL record: named fields in insertion order, names unique.
#[derive(Clone, Debug, Default)]
pub struct Record {
    fields: Vec<(Vec<u8>, Field)>,
    /// Name → index into `fields`. Always describes `fields` exactly.
    index: BTreeMap<Vec<u8>, usize>,
}

impl PartialEq for Record {
    fn eq(&self, other: &Record) -> bool {
        // `index` is a function of `fields`.
        self.fields == other.fields
    }
}
impl Eq for Record {}

impl Record {
    /// An empty record.
    pub fn new() -> Record {
        Record::default()
    }

    /// The field named `name`.
    pub fn get(&self, name: &[u8]) -> Option<&Field> {
        let i = *self.index.get(name)?;
        self.fields.get(i).map(|(_, f)| f)
    }

    /// The field named `name`, to change in place.
    pub fn get_mut(&mut self, name: &[u8]) -> Option<&mut Field> {
        let i = *self.index.get(name)?;
        self.fields.get_mut(i).map(|(_, f)| f)
    }

    /// Give every link of field `name` that has no hint the one `resolve` finds for its
    /// target (None: leave it without). Links that have a hint keep it: hints are refreshed
    /// lazily, by readers that find them stale. Returns how many were filled.
    pub fn fill_hints(
        &mut self,
        name: &[u8],
        mut resolve: impl FnMut(&[u8]) -> Option<Hint>,
    ) -> usize {
        let Some(&i) = self.index.get(name) else {
            return 0;
        };
        let Some((_, f)) = self.fields.get_mut(i) else {
            return 0;
        };
        let links: &mut [Link] = match f {
            Field::Bytes(_) => return 0,
            Field::Link(l) => std::slice::from_mut(l),
            Field::Links(ls) => ls,
        };
        let mut n = 0;
        for l in links.iter_mut().filter(|l| l.hint.is_none()) {
            l.hint = resolve(&l.target);
            n += usize::from(l.hint.is_some());
        }
        n
    }

    /// Sets field `name` to `f`, keeping its position if it exists, else appending it.
    /// Returns true if the field is new.
    pub fn insert(&mut self, name: Vec<u8>, f: Field) -> bool {
        match self.index.get(&name) {
            Some(&i) => {
                self.fields[i].1 = f;
                false
            }
            None => {
                self.index.insert(name.clone(), self.fields.len());
                self.fields.push((name, f));
                true
            }
        }
    }

    /// Removes field `name`. Returns true if it was there.
    pub fn remove(&mut self, name: &[u8]) -> bool {
        let Some(i) = self.index.remove(name) else {
            return false;
        };
        self.fields.remove(i);
        for v in self.index.values_mut() {
            if *v > i {
                *v -= 1;
            }
        }
        true
    }

    /// Removes every field whose name is in `names`, in one pass. Returns how many were
    /// removed (a name given twice counts once, as in HDEL).
    pub fn remove_all(&mut self, names: &[&[u8]]) -> usize {
        let doomed: std::collections::BTreeSet<&[u8]> = names
            .iter()
            .copied()
            .filter(|n| self.index.contains_key(*n))
            .collect();
        if doomed.is_empty() {
            return 0;
        }
        self.fields.retain(|(n, _)| !doomed.contains(n.as_slice()));
        self.reindex();
        doomed.len()
    }

    fn reindex(&mut self) {
        self.index = self
            .fields
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether the record has no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Fields in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Field)> {
        self.fields.iter().map(|(n, f)| (n.as_slice(), f))
    }

    /// Exact length of [`Record::encode`]'s output, computed without encoding.
    pub fn encoded_len(&self) -> usize {
        1 + varint_len(self.fields.len() as u64)
            + self
                .fields
                .iter()
                .map(|(n, f)| varint_len(n.len() as u64) + n.len() + f.encoded_len())
                .sum::<usize>()
    }

    /// Whether [`Record::decode`] would accept this record's encoding: every field name,
    /// link target and link list within its bound and the whole within
    /// [`VALUE_BYTES_MAX`]. Commands check this before they store a record.
    pub fn within_bounds(&self) -> bool {
        self.encoded_len() <= VALUE_BYTES_MAX as usize
            && self.fields.iter().all(|(n, f)| {
                n.len() <= FIELD_NAME_BYTES_MAX
                    && match f {
                        Field::Bytes(_) => true,
                        Field::Link(l) => l.target.len() <= KEY_BYTES_MAX as usize,
                        Field::Links(ls) => {
                            ls.len() <= LINKS_PER_FIELD_MAX
                                && ls.iter().all(|l| l.target.len() <= KEY_BYTES_MAX as usize)
                        }
                    }
            })
    }

    /// Encodes the record (layout in the crate docs). Deterministic: equal records encode to
    /// equal bytes, and `decode(encode(r)) == r` for every record within bounds.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.push(FORMAT_VERSION);
        put_varint(&mut out, self.fields.len() as u64);
        for (name, f) in &self.fields {
            put_varint(&mut out, name.len() as u64);
            out.extend_from_slice(name);
            match f {
                Field::Bytes(b) => {
                    out.push(TAG_BYTES);
                    put_varint(&mut out, b.len() as u64);
                    out.extend_from_slice(b);
                }
                Field::Link(l) => {
                    out.push(TAG_LINK);
                    put_link(&mut out, &l.as_ref(), &mut None);
                }
                Field::Links(ls) => {
                    out.push(TAG_LINKS);
                    put_varint(&mut out, ls.len() as u64);
                    let mut prev = None;
                    for l in ls {
                        put_link(&mut out, &l.as_ref(), &mut prev);
                    }
                }
            }
        }
        debug_assert_eq!(out.len(), self.encoded_len());
        out
    }

    /// Decodes an encoded record.
    ///
    /// Never panics, and never allocates more than a small multiple of `b.len()`: every
    /// length and count is checked against the bytes that remain (and against the crate's
    /// bounds) before anything is allocated for it.
    ///
    /// # Errors
    /// [`RecordError`] for anything but one exact, canonical encoding: an unknown version,
    /// truncation, a non-shortest varint, an unknown tag, a bound exceeded, a duplicate
    /// field name or trailing bytes.
    pub fn decode(b: &[u8]) -> Result<Record, RecordError> {
        decode(b)
    }
}

#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
fn decode(b: &[u8]) -> Result<Record, RecordError> {
    let (mut r, count) = Reader::header(b)?;
    let mut fields = Vec::new();
    for _ in 0..count {
        let name = r.bytes(FIELD_NAME_BYTES_MAX, "field name")?;
        let f = match r.byte()? {
            TAG_BYTES => Field::Bytes(r.bytes(VALUE_BYTES_MAX as usize, "record")?.to_vec()),
            TAG_LINK => Field::Link(r.link(&mut None)?),
            TAG_LINKS => {
                let n = r.varint()?;
                if n > LINKS_PER_FIELD_MAX as u64 {
                    return Err(RecordError::TooLarge { what: "link list" });
                }
                if n > (r.b.len() / LINK_BYTES_MIN) as u64 {
                    return Err(RecordError::Truncated);
                }
                let mut ls = Vec::new();
                let mut prev = None;
                for _ in 0..n {
                    ls.push(r.link(&mut prev)?);
                }
                Field::Links(ls)
            }
            tag => return Err(RecordError::BadTag { tag }),
        };
        fields.push((name.to_vec(), f));
    }
    if !r.b.is_empty() {
        return Err(RecordError::TrailingBytes);
    }
    let mut index = BTreeMap::new();
    for (i, (n, _)) in fields.iter().enumerate() {
        if index.insert(n.clone(), i).is_some() {
            return Err(RecordError::DuplicateField);
        }
    }
    Ok(Record { fields, index })
}

struct Reader<'a> {
    b: &'a [u8],
}

#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
impl<'a> Reader<'a> {
    /// Checks the size and format version of an encoded record and reads its field count
    /// (bounded by the bytes left): the reader positioned at the first field, and the count.
    /// Shared by [`decode`] (owned fields) and [`scan`] (borrowed ones).
    fn header(b: &'a [u8]) -> Result<(Reader<'a>, u64), RecordError> {
        if b.len() > VALUE_BYTES_MAX as usize {
            return Err(RecordError::TooLarge { what: "record" });
        }
        let (&version, rest) = b.split_first().ok_or(RecordError::Empty)?;
        if version != FORMAT_VERSION {
            return Err(RecordError::UnknownVersion { version });
        }
        let mut r = Reader { b: rest };
        let count = r.varint()?;
        if count > (r.b.len() / FIELD_BYTES_MIN) as u64 {
            return Err(RecordError::Truncated);
        }
        Ok((r, count))
    }
}

#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, RecordError> {
        let (&x, rest) = self.b.split_first().ok_or(RecordError::Truncated)?;
        self.b = rest;
        Ok(x)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if n > self.b.len() {
            return Err(RecordError::Truncated);
        }
        let (x, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(x)
    }

    /// LEB128, at most 10 bytes, shortest form only (so every record has one encoding).
    // Inlined for its one-byte case (a packed list's lengths, every link's target length:
    // it was 2 % of a loading node's samples as a call), the loop kept out of line.
    #[inline]
    fn varint(&mut self) -> Result<u64, RecordError> {
        // Most varints are one byte (lengths under 128): no loop for them.
        if let Some((&byte, rest)) = self.b.split_first() {
            if byte & 0x80 == 0 {
                self.b = rest;
                return Ok(u64::from(byte));
            }
        }
        self.varint_long()
    }

    /// [`Reader::varint`] of two bytes or more.
    #[inline(never)]
    fn varint_long(&mut self) -> Result<u64, RecordError> {
        let mut v: u64 = 0;
        let mut shift: u32 = 0;
        for i in 0..10u32 {
            let byte = self.byte()?;
            let low = u64::from(byte & 0x7f);
            // The 10th byte may only carry bit 63.
            if i == 9 && low > 1 {
                return Err(RecordError::BadVarint);
            }
            v |= low.wrapping_shl(shift);
            shift = shift.wrapping_add(7);
            if byte & 0x80 == 0 {
                if byte == 0 && i > 0 {
                    return Err(RecordError::BadVarint);
                }
                return Ok(v);
            }
        }
        Err(RecordError::BadVarint)
    }

    /// A varint length, checked against `max` and the bytes left, then that many bytes.
    fn bytes(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        let n = self.varint()?;
        if n > max as u64 {
            return Err(RecordError::TooLarge { what });
        }
        let n = usize::try_from(n).map_err(|_| RecordError::Truncated)?;
        self.take(n)
    }

    /// A link; `prev` is the table a [`HINT_LOCAL_SAME`] hint takes (the list's link
    /// before, [`local_table`]; `None` first in a list and in a single-link field), updated
    /// for the next link.
    fn link(&mut self, prev: &mut Option<u64>) -> Result<Link, RecordError> {
        let (target, hint) = self.link_ref(prev)?;
        Ok(Link {
            target: target.to_vec(),
            hint,
        })
    }
}

/// A hint from its [`HINT_BYTES`] or [`HINT_DATA_BYTES`] bytes.
fn hint_from(h: &[u8]) -> Result<Hint, RecordError> {
    let word = |at: usize, n: usize| -> Result<u64, RecordError> {
        let b = h.get(at..at + n).ok_or(RecordError::Truncated)?;
        let mut w = [0u8; 8];
        w.get_mut(..n)
            .ok_or(RecordError::Truncated)?
            .copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    };
    Ok(Hint {
        node: u32::try_from(word(0, 4)?).map_err(|_| RecordError::Truncated)?,
        epoch: word(4, 8)?,
        table: word(12, 8)?,
        entry: word(20, 8)?,
        data: if h.len() == HINT_DATA_BYTES {
            Some(DataHint {
                location: word(28, 4)? as u32,
                crc: word(32, 4)? as u32,
                memgest: word(36, 2)? as u16,
            })
        } else {
            None
        },
    })
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes of `l` as [`put_link`] writes it after a link whose [`local_table`] was `prev`
/// (updated for the next link).
fn link_encoded_len(l: &Link, prev: &mut Option<u64>) -> usize {
    let n = varint_len(l.target.len() as u64)
        + l.target.len()
        + 1
        + match &l.hint {
            None => 0,
            Some(Hint { data: None, .. }) => HINT_BYTES,
            Some(h @ Hint { data: Some(d), .. }) => data_hint_len(h, d, *prev),
        };
    *prev = local_table(l.hint.as_ref());
    n
}

/// Bytes of a hint with a data part after its flag, in the form [`put_link`] writes after a
/// link whose [`local_table`] was `prev`.
fn data_hint_len(h: &Hint, d: &DataHint, prev: Option<u64>) -> usize {
    match local_len(h, d) {
        Some(n) if prev == Some(h.table) => n - table_parts_len(h.table),
        Some(n) => n,
        None => packed_len(h, d).min(HINT_DATA_BYTES),
    }
}

/// Bytes of the table word's three parts in a [`HINT_LOCAL`] hint (what
/// [`HINT_LOCAL_SAME`] leaves out).
fn table_parts_len(table: u64) -> usize {
    varint_len(table >> TABLE_HIGH_SHIFT)
        + varint_len((table >> TABLE_MID_SHIFT) & TABLE_MID_MASK)
        + varint_len(table & TABLE_LOW_MASK)
}

/// Bytes of `h`'s [`HINT_LOCAL`] form after its flag, if it has one (node, epoch and memgest
/// 0, the entry a word of its table). It is always shorter than the packed form (three
/// one-byte zeros dropped, at most two bytes more for the table's parts, the entry's words
/// from the table's start shorter or equal), so a hint that has it is written in it.
fn local_len(h: &Hint, d: &DataHint) -> Option<usize> {
    let words = local_words(h, d)?;
    Some(table_parts_len(h.table) + varint_len(words) + varint_len(u64::from(d.location)) + 4)
}

/// `h`'s entry in words from its table's start, if `h` has a [`HINT_LOCAL`] form (what
/// [`local_len`] decides, without summing the lengths: [`put_link`] asks it for every
/// link of a load).
fn local_words(h: &Hint, d: &DataHint) -> Option<u64> {
    if h.node != 0 || h.epoch != 0 || d.memgest != 0 {
        return None;
    }
    local_entry(h)
}

/// Bytes of `h`'s [`HINT_PACKED`] form after its flag. The encoder writes it when it is
/// shorter than the fixed form (always, for a single node's hints), else the fixed form, so
/// every hint still has one encoding.
fn packed_len(h: &Hint, d: &DataHint) -> usize {
    varint_len(u64::from(h.node))
        + varint_len(h.epoch)
        + varint_len(h.table)
        + varint_len(h.entry)
        + varint_len(u64::from(d.location))
        + 4
        + varint_len(u64::from(d.memgest))
}

/// A link by reference, for encoding without owning its target.
struct LinkRef<'a> {
    target: &'a [u8],
    hint: Option<Hint>,
}

/// Writes `l` after a link whose [`local_table`] was `prev` (`None` first in a list and
/// for a single-link field), and sets `prev` for the next link of the same list.
fn put_link(out: &mut Vec<u8>, l: &LinkRef<'_>, prev: &mut Option<u64>) {
    put_varint(out, l.target.len() as u64);
    out.extend_from_slice(l.target);
    let after = prev.take();
    let Some(h) = &l.hint else {
        out.push(HINT_NONE);
        return;
    };
    // The flag-4 form, decided once per link (its words kept for the bytes below).
    if let Some((d, words)) = h.data.and_then(|d| local_words(h, &d).map(|w| (d, w))) {
        *prev = Some(h.table);
        if after == Some(h.table) {
            out.push(HINT_LOCAL_SAME);
        } else {
            out.push(HINT_LOCAL);
            put_varint(out, h.table >> TABLE_HIGH_SHIFT);
            put_varint(out, (h.table >> TABLE_MID_SHIFT) & TABLE_MID_MASK);
            put_varint(out, h.table & TABLE_LOW_MASK);
        }
        put_varint(out, words);
        put_varint(out, u64::from(d.location));
        out.extend_from_slice(&d.crc.to_le_bytes());
        return;
    }
    match h.data {
        Some(d) if packed_len(h, &d) < HINT_DATA_BYTES => {
            out.push(HINT_PACKED);
            put_varint(out, u64::from(h.node));
            put_varint(out, h.epoch);
            put_varint(out, h.table);
            put_varint(out, h.entry);
            put_varint(out, u64::from(d.location));
            out.extend_from_slice(&d.crc.to_le_bytes());
            put_varint(out, u64::from(d.memgest));
        }
        _ => {
            out.push(if h.data.is_some() {
                HINT_DATA
            } else {
                HINT_SOME
            });
            out.extend_from_slice(&h.node.to_le_bytes());
            out.extend_from_slice(&h.epoch.to_le_bytes());
            out.extend_from_slice(&h.table.to_le_bytes());
            out.extend_from_slice(&h.entry.to_le_bytes());
            if let Some(d) = h.data {
                out.extend_from_slice(&d.location.to_le_bytes());
                out.extend_from_slice(&d.crc.to_le_bytes());
                out.extend_from_slice(&d.memgest.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        let mut r = Record::new();
        r.insert(b"name".to_vec(), Field::Bytes(b"ann".to_vec()));
        r.insert(b"".to_vec(), Field::Bytes(b"".to_vec()));
        r.insert(
            b"boss".to_vec(),
            Field::Link(Link {
                target: b"user:2".to_vec(),
                hint: Some(Hint {
                    node: 7,
                    epoch: 3,
                    table: u64::MAX - 1,
                    entry: 4096,
                    data: None,
                }),
            }),
        );
        r.insert(
            b"follows".to_vec(),
            Field::Links(vec![Link::to("a"), Link::to("b c"), Link::to("")]),
        );
        r
    }

    #[test]
    fn round_trip_and_exact_bytes() {
        let r = sample();
        let b = r.encode();
        assert_eq!(b.len(), r.encoded_len());
        assert_eq!(Record::decode(&b), Ok(r));
        let empty = Record::new();
        assert_eq!(empty.encode(), vec![FORMAT_VERSION, 0]);
        let mut one = Record::new();
        one.insert(b"f".to_vec(), Field::Bytes(b"vv".to_vec()));
        assert_eq!(one.encode(), vec![1, 1, 1, b'f', 0, 2, b'v', b'v']);
        let mut l = Record::new();
        l.insert(b"f".to_vec(), Field::Link(Link::to("k")));
        assert_eq!(l.encode(), vec![1, 1, 1, b'f', 1, 1, b'k', 0]);
    }

    #[test]
    fn insertion_order_replace_keeps_position_remove_shifts() {
        let mut r = sample();
        assert!(!r.insert(b"name".to_vec(), Field::Bytes(b"bob".to_vec())));
        let names: Vec<&[u8]> = r.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"name"[..], b"", b"boss", b"follows"]);
        assert!(r.remove(b""));
        assert!(!r.remove(b""));
        assert_eq!(r.get(b"follows").map(Field::display_len), Some(6));
        assert_eq!(r.remove_all(&[b"name", b"name", b"nope"]), 1);
        assert_eq!(r.len(), 2);
        assert_eq!(r.get(b"boss").map(Field::display), Some(b"user:2".to_vec()));
        assert!(r.insert(b"z".to_vec(), Field::Bytes(vec![])));
        assert_eq!(r.get(b"z"), Some(&Field::Bytes(vec![])));
    }

    #[test]
    fn display_strings() {
        let r = sample();
        assert_eq!(
            r.get(b"follows").map(Field::display),
            Some(b"a b c ".to_vec())
        );
        assert_eq!(Field::Links(vec![]).display(), b"");
        assert_eq!(Field::Links(vec![]).display_len(), 0);
    }

    #[test]
    fn decode_errors() {
        assert_eq!(Record::decode(&[]), Err(RecordError::Empty));
        assert_eq!(
            Record::decode(&[9, 0]),
            Err(RecordError::UnknownVersion { version: 9 })
        );
        assert_eq!(Record::decode(&[1]), Err(RecordError::Truncated));
        assert_eq!(Record::decode(&[1, 0, 0]), Err(RecordError::TrailingBytes));
        assert_eq!(Record::decode(&[1, 0x80, 0]), Err(RecordError::BadVarint));
        // A huge count with no bytes behind it is refused before any allocation.
        assert_eq!(
            Record::decode(&[1, 0xff, 0xff, 0xff, 0xff, 0x0f]),
            Err(RecordError::Truncated)
        );
        assert_eq!(
            Record::decode(&[1, 1, 0, 7, 0]),
            Err(RecordError::BadTag { tag: 7 })
        );
        // Hint flag 2 (a data hint) needs its 38 bytes, flag 3 (packed) and 4 (local) their
        // varints; 5 is unknown.
        assert_eq!(
            Record::decode(&[1, 1, 0, 1, 0, 2]),
            Err(RecordError::Truncated)
        );
        assert_eq!(
            Record::decode(&[1, 1, 0, 1, 0, 3]),
            Err(RecordError::Truncated)
        );
        assert_eq!(
            Record::decode(&[1, 1, 0, 1, 0, 4]),
            Err(RecordError::Truncated)
        );
        assert_eq!(
            Record::decode(&[1, 1, 0, 1, 0, 5]),
            Err(RecordError::BadTag { tag: 5 })
        );
        assert_eq!(
            Record::decode(&[1, 2, 1, b'a', 0, 0, 1, b'a', 0, 0]),
            Err(RecordError::DuplicateField)
        );
        assert_eq!(
            Record::decode(&[1, 1, 1, b'a', 0, 5, b'x']),
            Err(RecordError::Truncated)
        );
        // A link list longer than the bound.
        let mut b = vec![1, 1, 0, TAG_LINKS];
        put_varint(&mut b, LINKS_PER_FIELD_MAX as u64 + 1);
        assert_eq!(
            Record::decode(&b),
            Err(RecordError::TooLarge { what: "link list" })
        );
        // Largest varint (u64::MAX) is accepted as a varint, then refused as a length.
        let mut b = vec![1, 1];
        put_varint(&mut b, u64::MAX);
        assert_eq!(
            Record::decode(&b),
            Err(RecordError::TooLarge { what: "field name" })
        );
    }

    #[test]
    fn bounds() {
        let mut r = Record::new();
        assert!(r.within_bounds());
        r.insert(vec![0; FIELD_NAME_BYTES_MAX + 1], Field::Bytes(vec![]));
        assert!(!r.within_bounds());
        let mut r = Record::new();
        r.insert(
            b"l".to_vec(),
            Field::Links(vec![Link::to("x"); LINKS_PER_FIELD_MAX + 1]),
        );
        assert!(!r.within_bounds());
    }
}

/// What [`splice_links`] does to its field: LINK SET's or LINK ADD's edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Splice {
    /// Replace the field (or append it) with one link.
    Set,
    /// Append links to the field's list (or append the field as a list).
    Add,
}

/// `LINK SET` / `LINK ADD` straight on an encoded record (`None`: the key is missing), without
/// decoding it: the new encoding and the reply's integer (SET: 1 if the field is new, else 0;
/// ADD: the list's new length). The bytes before and after the field are copied as they are,
/// the new links are encoded with the hint `hint` gives each target (in order), so nothing is
/// allocated per link and no old link is decoded or re-encoded.
///
/// Why: a bulk load writes each chunk item with a `LINK ADD` and each list owner with one
/// more `LINK SET` of its `next` link; decoding a 100-link record into a `Record` (one
/// allocation per link) and encoding it again was most of the node's time per command
/// (BENCHMARKS.md, "Loader and reader chase").
///
/// `None` whenever the general path must decide (same writes, same replies, same errors, it
/// is only slower): bytes that do not scan or name the field twice, a target or field name
/// over its bound, LINK ADD onto plain bytes or a single link, a list that would exceed
/// [`LINKS_PER_FIELD_MAX`], a list with links still without a hint (the general path fills
/// them, [`Record::fill_hints`]), or a result over `VALUE_BYTES_MAX`. (Two *other* fields
/// with one name, which Ringlet never writes, are copied as they are where the general path
/// would refuse to decode them; reads scan such bytes without complaint too.)
pub fn splice_links(
    b: Option<&[u8]>,
    field: &[u8],
    op: Splice,
    targets: &[&[u8]],
    mut hint: impl FnMut(&[u8]) -> Option<Hint>,
) -> Option<(i64, Vec<u8>)> {
    if targets.is_empty()
        || (op == Splice::Set && targets.len() != 1)
        || field.len() > FIELD_NAME_BYTES_MAX
        || targets.iter().any(|t| t.len() > KEY_BYTES_MAX as usize)
    {
        return None;
    }
    // Where the field is: (its first byte, one past its last, its value).
    let mut count = 0u64;
    let mut body_start = 0usize;
    let mut found: Option<(usize, usize, FieldRef<'_>)> = None;
    if let Some(b) = b {
        let (mut r, n) = Reader::header(b).ok()?;
        count = n;
        body_start = b.len() - r.b.len();
        for _ in 0..n {
            let start = b.len() - r.b.len();
            let (name, f) = r.field_ref().ok()?;
            if name == field {
                if found.is_some() {
                    return None;
                }
                found = Some((start, b.len() - r.b.len(), f));
            }
        }
        if !r.b.is_empty() {
            return None;
        }
    }
    // The new field's encoding.
    // `prev`: the table the first new link may leave out (the old list's last link's,
    // `local_table`), as if the whole list were encoded anew.
    let mut prev = None;
    let (old_links, had) = match (op, found.map(|(_, _, f)| f)) {
        (Splice::Add, Some(FieldRef::Links(raw, n))) => {
            for (_, h) in FieldRef::Links(raw, n).links() {
                h?;
                prev = local_table(h.as_ref());
            }
            (raw, usize::try_from(n).ok()?)
        }
        (Splice::Add, Some(_)) => return None,
        _ => (&[][..], 0),
    };
    if op == Splice::Add && had.saturating_add(targets.len()) > LINKS_PER_FIELD_MAX {
        return None;
    }
    let mut f = Vec::with_capacity(
        field.len() + 12 + old_links.len() + targets.iter().map(|t| t.len() + 41).sum::<usize>(),
    );
    put_varint(&mut f, field.len() as u64);
    f.extend_from_slice(field);
    match op {
        Splice::Set => f.push(TAG_LINK),
        Splice::Add => {
            f.push(TAG_LINKS);
            put_varint(&mut f, (had + targets.len()) as u64);
            f.extend_from_slice(old_links);
        }
    }
    for t in targets {
        put_link(
            &mut f,
            &LinkRef {
                target: t,
                hint: hint(t),
            },
            &mut prev,
        );
    }
    let mut out;
    match (b, found) {
        (Some(b), Some((start, end, _))) => {
            out = Vec::with_capacity(b.len() - (end - start) + f.len());
            out.extend_from_slice(&b[..start]);
            out.extend_from_slice(&f);
            out.extend_from_slice(&b[end..]);
        }
        _ => {
            let rest = b.map_or(&[][..], |b| &b[body_start..]);
            out = Vec::with_capacity(11 + rest.len() + f.len());
            out.push(FORMAT_VERSION);
            put_varint(&mut out, count.checked_add(1)?);
            out.extend_from_slice(rest);
            out.extend_from_slice(&f);
        }
    }
    if out.len() > VALUE_BYTES_MAX as usize {
        return None;
    }
    let reply = match op {
        Splice::Set => i64::from(found.is_none()),
        Splice::Add => (had + targets.len()) as i64,
    };
    Some((reply, out))
}

/// The value of one field a `RECORD SET` writes, borrowed from the command's arguments
/// (`crate::put`).
#[derive(Clone, Copy, Debug)]
pub enum PutValue<'a> {
    /// Plain bytes.
    Bytes(&'a [u8]),
    /// One link to this target.
    Link(&'a [u8]),
    /// A link list of these targets, in order.
    Links(&'a [&'a [u8]]),
    /// A link list packed in one argument (`LINKSPACKED`), checked.
    Packed(Packed<'a>),
    /// No field of this name (`DEL name`): an old one is removed, none is written. What lets
    /// `ringlet load` replace an item in one write instead of a `DEL` or `LINK DEL` first.
    Del,
}

/// A link list packed in one argument (`RECORD SET key LINKSPACKED name blob`): the targets
/// back to back, each `| varint len | bytes |` (the record format's own length: LEB128,
/// shortest form). Why: a 100-link chunk is one RESP argument instead of 100, so the node
/// decodes one bulk string per chunk (docs/design/loader.md, "Smaller links").
///
/// Only [`Packed::parse`] makes one, after checking every length against the bytes left
/// and `KEY_BYTES_MAX`, and the count against [`LINKS_PER_FIELD_MAX`]: nothing is
/// allocated for it, and its iterator cannot fail.
#[derive(Clone, Copy, Debug)]
pub struct Packed<'a> {
    b: &'a [u8],
    n: usize,
}

impl<'a> Packed<'a> {
    /// Check `blob` and count its targets.
    ///
    /// # Errors
    /// [`RecordError::Truncated`] (a length past the end), [`RecordError::BadVarint`],
    /// [`RecordError::TooLarge`] (a target over `KEY_BYTES_MAX`, more than
    /// [`LINKS_PER_FIELD_MAX`] targets).
    pub fn parse(blob: &'a [u8]) -> Result<Packed<'a>, RecordError> {
        let mut r = Reader { b: blob };
        let mut n = 0;
        // Every target takes at least its length byte, so this loop ends within the blob's
        // length; the count bound stops it earlier.
        while !r.b.is_empty() {
            if n == LINKS_PER_FIELD_MAX {
                return Err(RecordError::TooLarge { what: "link list" });
            }
            r.bytes(KEY_BYTES_MAX as usize, "link target")?;
            n += 1;
        }
        Ok(Packed { b: blob, n })
    }

    /// Pack `targets` as [`Packed::parse`] reads them (what `ringlet load` sends).
    pub fn encode<'t>(targets: impl IntoIterator<Item = &'t [u8]>, out: &mut Vec<u8>) {
        for t in targets {
            put_varint(out, t.len() as u64);
            out.extend_from_slice(t);
        }
    }

    /// How many targets.
    pub fn len(&self) -> usize {
        self.n
    }

    /// No target.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The packed bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.b
    }

    /// The targets, in order.
    pub fn iter(&self) -> PackedIter<'a> {
        PackedIter(Reader { b: self.b })
    }
}

/// The targets of a [`Packed`] list.
pub struct PackedIter<'a>(Reader<'a>);

impl<'a> Iterator for PackedIter<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.0.b.is_empty() {
            return None;
        }
        // Checked by `Packed::parse`: an error here cannot happen, and would end the list.
        self.0.bytes(KEY_BYTES_MAX as usize, "link target").ok()
    }
}

/// `name`'s index in `sorted` (ordered by [`name_order`], `key` giving each element's
/// name), for a lookup made once per field of a record walked. A few names (a command's
/// usual one to eight) are compared one by one with [`same_name`], which rejects most
/// without `memcmp`; more are binary-searched.
pub fn find_name<T>(sorted: &[T], key: impl Fn(&T) -> &[u8], name: &[u8]) -> Option<usize> {
    const LINEAR_MAX: usize = 8;
    if sorted.len() <= LINEAR_MAX {
        sorted.iter().position(|e| same_name(key(e), name))
    } else {
        sorted.binary_search_by(|e| name_order(key(e), name)).ok()
    }
}

/// Whether two field names are equal, deciding most unequal pairs from their lengths and
/// their last 8 bytes (names of one hash often share a prefix and a length, as
/// redis-benchmark's `element:<12 digits>` do, and differ at the end).
#[inline]
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if let (Some(x), Some(y)) = (a.last_chunk::<8>(), b.last_chunk::<8>()) {
        if x != y {
            return false;
        }
    }
    a == b
}

/// An order of field names for lookups while a record is walked: by length, then bytes.
/// Most names met differ in length from the few looked for, so a comparison is decided
/// without reading the bytes (a lexicographic one called `memcmp` for every field of a big
/// hash).
pub fn name_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// `RECORD SET` straight into the encoding: the record `b` (`None`: the key is missing) with
/// each of `fields` set — a field that exists is replaced in its place, a new one appended
/// in the order given, a `DEL` removing its old field — and every other field copied as its
/// bytes. Each new link gets the hint `hint` finds for its target, in order. Returns how many
/// fields are new, and the encoding (of no field at all when the `DEL`s removed every one:
/// [`is_empty_encoding`]; the caller deletes the key). Nothing is allocated per link and no
/// old field is decoded.
///
/// Why: a bulk load writes every item once, with all of its links, instead of one command
/// per link field and a rewrite of the item for its `next` link (docs/design/loader.md).
///
/// The caller checked `fields` (distinct names, every length within its bound:
/// `crate::put::parse`); they are checked again here so that no input makes bytes `decode`
/// would refuse.
///
/// # Errors
/// [`RecordError`] if `b` does not scan or names a field twice, a field is out of its bounds
/// or named twice in `fields`, or the result is over `VALUE_BYTES_MAX`.
pub fn put_fields(
    b: Option<&[u8]>,
    fields: &[(&[u8], PutValue<'_>)],
    hint: impl FnMut(&[u8]) -> Option<Hint>,
) -> Result<(i64, Vec<u8>), RecordError> {
    put_fields_located(b, fields, hint, None)
}

/// Fields of an encoded record found by name ([`locate_fields`]): the record's field
/// count, and each field found with its byte range in the record, in record order.
#[derive(Clone, Debug)]
pub struct Located<'b> {
    /// How many fields the record has.
    pub fields: u64,
    /// Each field found: its bytes' range, its name and its value.
    pub found: Vec<(std::ops::Range<usize>, &'b [u8], FieldRef<'b>)>,
}

/// One walk of the encoded record `b` (validated as [`scan`] validates it) that finds the
/// fields whose names `wanted` accepts, for a write that then needs no second walk
/// ([`put_fields_located`]): a hash write to a big record walked it twice.
///
/// # Errors
/// As [`scan`].
pub fn locate_fields<'b>(
    b: &'b [u8],
    mut wanted: impl FnMut(&[u8]) -> bool,
) -> Result<Located<'b>, RecordError> {
    let (mut r, n) = Reader::header(b)?;
    let mut found = Vec::new();
    for _ in 0..n {
        let start = b.len() - r.b.len();
        let (name, f) = r.field_ref()?;
        if wanted(name) {
            found.push((start..b.len() - r.b.len(), name, f));
        }
    }
    if !r.b.is_empty() {
        return Err(RecordError::TrailingBytes);
    }
    Ok(Located { fields: n, found })
}

/// [`put_fields`], given what [`locate_fields`] found in `b` for names that include every
/// name in `fields` that `b` has (`None`: walk `b` here). A located field no spec names is
/// copied unchanged.
///
/// # Errors
/// As [`put_fields`].
pub fn put_fields_located(
    b: Option<&[u8]>,
    fields: &[(&[u8], PutValue<'_>)],
    mut hint: impl FnMut(&[u8]) -> Option<Hint>,
    located: Option<&Located<'_>>,
) -> Result<(i64, Vec<u8>), RecordError> {
    // The new fields by name: (name, index in `fields`, whether an old field of that name
    // was met), sorted by name once they are all in and looked up by binary search. One
    // allocation where a `BTreeMap` made one per few fields (a loader's item: every command).
    let mut new: Vec<(&[u8], usize, bool)> = Vec::with_capacity(fields.len());
    for (i, (name, v)) in fields.iter().enumerate() {
        let ok = name.len() <= FIELD_NAME_BYTES_MAX
            && match v {
                PutValue::Bytes(_) => true,
                PutValue::Link(t) => t.len() <= KEY_BYTES_MAX as usize,
                PutValue::Links(ts) => {
                    ts.len() <= LINKS_PER_FIELD_MAX
                        && ts.iter().all(|t| t.len() <= KEY_BYTES_MAX as usize)
                }
                // Checked when it was made.
                PutValue::Packed(_) | PutValue::Del => true,
            };
        if !ok {
            return Err(RecordError::TooLarge { what: "field" });
        }
        new.push((name, i, false));
    }
    // Ordered by length first ([`name_order`]): every old field is looked up here.
    new.sort_unstable_by(|a, b| name_order(a.0, b.0));
    if new.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(RecordError::DuplicateField);
    }
    let find = |new: &[(&[u8], usize, bool)], name: &[u8]| find_name(new, |e| e.0, name);
    // How many old fields, and where each one a new field replaces (or a `DEL` removes)
    // starts and ends, in record order: the fields between are copied as runs of bytes.
    // Only the replaced are kept (at most `fields.len()`), not every old field: a `Vec` of
    // all n was a fresh mapping per write to a big hash, paid in page faults. Allocated
    // only when one is met: a loader's write replaces none.
    let mut old_n = 0usize;
    let mut replaced: Vec<(usize, usize)> = Vec::new();
    let mut body = &[][..];
    if let (Some(b), Some(located)) = (b, located) {
        let (r, _) = Reader::header(b)?;
        body = r.b;
        old_n = usize::try_from(located.fields).map_err(|_| RecordError::Truncated)?;
        for (range, name, _) in &located.found {
            if let Some(j) = find(&new, name) {
                new[j].2 = true;
                replaced.push((range.start, range.end));
            }
        }
    } else if let Some(b) = b {
        let (mut r, n) = Reader::header(b)?;
        body = r.b;
        // The old record's names are not checked for repeats here: every writer (this
        // function, `Record::encode`, `splice_links`) makes distinct names, the engine's
        // checksum guards the stored bytes, and `decode` still refuses a repeat. Checking
        // them made a write O(n log n) with an allocation per few fields: an HSET of one
        // field into a 20,000-field hash spent most of its 9 ms there and in decoding.
        for _ in 0..n {
            let start = b.len() - r.b.len();
            let (name, _) = r.field_ref()?;
            if let Some(j) = find(&new, name) {
                new[j].2 = true;
                replaced.push((start, b.len() - r.b.len()));
            }
            old_n += 1;
        }
        if !r.b.is_empty() {
            return Err(RecordError::TrailingBytes);
        }
    }
    // The new fields no old one had, appended in the order given (found by name again below
    // instead of gathered in one more `Vec`: one allocation less per command). A `DEL` adds
    // nothing, and removes the old field it met.
    let is_del = |i: usize| matches!(fields[i].1, PutValue::Del);
    let added = new.iter().filter(|e| !e.2 && !is_del(e.1)).count();
    let removed = new.iter().filter(|e| e.2 && is_del(e.1)).count();
    let guess = body.len()
        + 11
        + fields
            .iter()
            .map(|(n, v)| {
                n.len()
                    + 12
                    + match v {
                        PutValue::Bytes(x) | PutValue::Link(x) => x.len() + HINT_DATA_BYTES,
                        PutValue::Links(ts) => {
                            ts.iter().map(|t| t.len() + 2 + HINT_DATA_BYTES).sum()
                        }
                        PutValue::Packed(p) => p.b.len() + p.n * (1 + HINT_DATA_BYTES),
                        PutValue::Del => 0,
                    }
            })
            .sum::<usize>();
    let mut out = Vec::with_capacity(guess.min(VALUE_BYTES_MAX as usize + 64));
    out.push(FORMAT_VERSION);
    put_varint(&mut out, (old_n - removed + added) as u64);
    let mut put = |out: &mut Vec<u8>, (name, v): &(&[u8], PutValue<'_>)| {
        put_varint(out, name.len() as u64);
        out.extend_from_slice(name);
        match v {
            PutValue::Bytes(x) => {
                out.push(TAG_BYTES);
                put_varint(out, x.len() as u64);
                out.extend_from_slice(x);
            }
            PutValue::Link(t) => {
                out.push(TAG_LINK);
                put_link(
                    out,
                    &LinkRef {
                        target: t,
                        hint: hint(t),
                    },
                    &mut None,
                );
            }
            PutValue::Links(ts) => {
                out.push(TAG_LINKS);
                put_varint(out, ts.len() as u64);
                let mut prev = None;
                for t in ts.iter() {
                    put_link(
                        out,
                        &LinkRef {
                            target: t,
                            hint: hint(t),
                        },
                        &mut prev,
                    );
                }
            }
            // Never put: skipped where it replaces an old field, and among the appended.
            PutValue::Del => {}
            PutValue::Packed(p) => {
                out.push(TAG_LINKS);
                put_varint(out, p.n as u64);
                let mut prev = None;
                for t in p.iter() {
                    put_link(
                        out,
                        &LinkRef {
                            target: t,
                            hint: hint(t),
                        },
                        &mut prev,
                    );
                }
            }
        }
    };
    if let Some(b) = b {
        let too_large = |out: &Vec<u8>| out.len() > VALUE_BYTES_MAX as usize;
        let mut at = b.len() - body.len();
        for &(start, end) in &replaced {
            out.extend_from_slice(&b[at..start]);
            // `start..end` holds the name first: find the new field by it.
            let (name, _) = Reader { b: &b[start..end] }.field_ref()?;
            let i = new[find(&new, name).expect("a replaced field was found above")].1;
            if !is_del(i) {
                put(&mut out, &fields[i]);
            }
            if too_large(&out) {
                return Err(RecordError::TooLarge { what: "record" });
            }
            at = end;
        }
        out.extend_from_slice(&b[at..]);
        if too_large(&out) {
            return Err(RecordError::TooLarge { what: "record" });
        }
    }
    if added > 0 {
        for (i, f) in fields.iter().enumerate() {
            if new[find(&new, f.0).expect("every field is in `new`")].2 || is_del(i) {
                continue; // replaced in place above, or nothing to write
            }
            put(&mut out, f);
            if out.len() > VALUE_BYTES_MAX as usize {
                return Err(RecordError::TooLarge { what: "record" });
            }
        }
    }
    Ok((added as i64, out))
}

/// Whether `b` is the encoding of a record without fields, which no key holds (an emptied
/// record is deleted, as Redis deletes an empty hash): what [`put_fields`] returns when its
/// `DEL`s removed every field.
pub fn is_empty_encoding(b: &[u8]) -> bool {
    b == [FORMAT_VERSION, 0]
}

/// A field of an encoded record, borrowed from its bytes (see [`scan`]).
#[derive(Clone, Copy, Debug)]
pub enum FieldRef<'a> {
    Bytes(&'a [u8]),
    /// A single link: its target key and hint.
    Link(&'a [u8], Option<Hint>),
    /// A link list: its encoded links (already validated) and how many.
    Links(&'a [u8], u64),
}

impl<'a> FieldRef<'a> {
    /// The link targets (none for plain bytes), in order.
    pub fn targets(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (mut r, n, single) = match *self {
            FieldRef::Bytes(_) => (Reader { b: &[] }, 0, None),
            FieldRef::Link(t, _) => (Reader { b: &[] }, 0, Some(t)),
            FieldRef::Links(raw, n) => (Reader { b: raw }, n, None),
        };
        // `scan` validated every link, so parsing again cannot fail; a failure would only
        // end the list early.
        let mut prev = None;
        single
            .into_iter()
            .chain((0..n).map_while(move |_| r.link_target(&mut prev).ok()))
    }

    /// The links (none for plain bytes) with their hints, in order.
    pub fn links(&self) -> impl Iterator<Item = (&'a [u8], Option<Hint>)> + 'a {
        let (mut r, n, single) = match *self {
            FieldRef::Bytes(_) => (Reader { b: &[] }, 0, None),
            FieldRef::Link(t, h) => (Reader { b: &[] }, 0, Some((t, h))),
            FieldRef::Links(raw, n) => (Reader { b: raw }, n, None),
        };
        let mut prev = None;
        single
            .into_iter()
            .chain((0..n).map_while(move |_| r.link_ref(&mut prev).ok()))
    }

    /// The owned [`Field`] (as [`Record::decode`] would have made it).
    pub fn to_field(&self) -> Field {
        match *self {
            FieldRef::Bytes(b) => Field::Bytes(b.to_vec()),
            FieldRef::Link(t, hint) => Field::Link(Link {
                target: t.to_vec(),
                hint,
            }),
            FieldRef::Links(..) => Field::Links(
                self.links()
                    .map(|(t, hint)| Link {
                        target: t.to_vec(),
                        hint,
                    })
                    .collect(),
            ),
        }
    }

    /// What hash commands show for it (as [`Field::display`]).
    pub fn display(&self) -> Vec<u8> {
        match *self {
            FieldRef::Bytes(b) | FieldRef::Link(b, _) => b.to_vec(),
            FieldRef::Links(..) => {
                let mut out = Vec::new();
                for (i, t) in self.targets().enumerate() {
                    if i > 0 {
                        out.push(b' ');
                    }
                    out.extend_from_slice(t);
                }
                out
            }
        }
    }
}

/// The fields of an encoded record, borrowed, without building a [`Record`]: what CHASE
/// needs from every item it visits (a few attributes and some link targets), without one
/// allocation per link — decoding whole records was most of a deep CHASE's server time.
/// Validates what it walks as [`Record::decode`] does, except duplicate names (a read path;
/// Ringlet never writes them).
///
/// # Errors
/// As [`Record::decode`].
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
pub fn scan(b: &[u8]) -> Result<Vec<(&[u8], FieldRef<'_>)>, RecordError> {
    let (mut r, count) = Reader::header(b)?;
    let mut fields = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    for _ in 0..count {
        fields.push(r.field_ref()?);
    }
    if !r.b.is_empty() {
        return Err(RecordError::TrailingBytes);
    }
    Ok(fields)
}

/// [`scan`] without the `Vec`: `each` is called with every field in record order until it
/// answers `false` (then the rest is neither walked nor validated). What a big hash's
/// commands walk: one allocation of n fields was a fresh mapping per command (glibc maps
/// large blocks), paid in page faults.
///
/// # Errors
/// As [`scan`], for the part walked.
pub fn scan_each<'b>(
    b: &'b [u8],
    mut each: impl FnMut(&'b [u8], FieldRef<'b>) -> bool,
) -> Result<(), RecordError> {
    let (mut r, count) = Reader::header(b)?;
    for _ in 0..count {
        let (name, f) = r.field_ref()?;
        if !each(name, f) {
            return Ok(());
        }
    }
    if !r.b.is_empty() {
        return Err(RecordError::TrailingBytes);
    }
    Ok(())
}

/// How many fields an encoded record has, from its header alone (HLEN).
///
/// # Errors
/// As [`scan`] for the header.
pub fn field_count(b: &[u8]) -> Result<u64, RecordError> {
    Reader::header(b).map(|(_, n)| n)
}

/// The fields named `wanted` (distinct names) of an encoded record, in record order,
/// walking it only until all of them were met: the fields after the last one wanted are
/// neither returned nor validated. What CHASE uses when it needs a few fields of a record
/// whose other fields may be large (a leaf's name before its 4,096-link list). Every byte
/// it does read is checked as [`scan`] checks it; a fault after the wanted fields goes
/// unnoticed (nothing from there is used).
///
/// # Errors
/// As [`scan`], for the part walked.
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
pub fn scan_wanted<'b>(
    b: &'b [u8],
    wanted: &[Vec<u8>],
) -> Result<Vec<(&'b [u8], FieldRef<'b>)>, RecordError> {
    let (mut r, count) = Reader::header(b)?;
    let mut fields = Vec::with_capacity(wanted.len());
    for _ in 0..count {
        if fields.len() == wanted.len() {
            return Ok(fields);
        }
        let (name, f) = r.field_ref()?;
        if wanted.iter().any(|w| w.as_slice() == name) {
            fields.push((name, f));
        }
    }
    if !r.b.is_empty() {
        return Err(RecordError::TrailingBytes);
    }
    Ok(fields)
}

#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
impl<'a> Reader<'a> {
    /// One field: its name and its value, links walked and validated in place.
    fn field_ref(&mut self) -> Result<(&'a [u8], FieldRef<'a>), RecordError> {
        let name = self.bytes(FIELD_NAME_BYTES_MAX, "field name")?;
        let f = match self.byte()? {
            TAG_BYTES => FieldRef::Bytes(self.bytes(VALUE_BYTES_MAX as usize, "record")?),
            TAG_LINK => {
                let (t, h) = self.link_ref(&mut None)?;
                FieldRef::Link(t, h)
            }
            TAG_LINKS => {
                let n = self.varint()?;
                if n > LINKS_PER_FIELD_MAX as u64 {
                    return Err(RecordError::TooLarge { what: "link list" });
                }
                if n > (self.b.len() / LINK_BYTES_MIN) as u64 {
                    return Err(RecordError::Truncated);
                }
                let start = self.b;
                let mut prev = None;
                for _ in 0..n {
                    self.link_target(&mut prev)?;
                }
                let used = start
                    .len()
                    .checked_sub(self.b.len())
                    .ok_or(RecordError::Truncated)?;
                FieldRef::Links(start.get(..used).ok_or(RecordError::Truncated)?, n)
            }
            tag => return Err(RecordError::BadTag { tag }),
        };
        Ok((name, f))
    }

    /// A link's target and hint. `prev` is the table a [`HINT_LOCAL_SAME`] hint takes (the
    /// [`local_table`] of the list's link before; `None` first in a list and in a
    /// single-link field, where that flag is refused), set for the next link.
    fn link_ref(
        &mut self,
        prev: &mut Option<u64>,
    ) -> Result<(&'a [u8], Option<Hint>), RecordError> {
        let target = self.bytes(KEY_BYTES_MAX as usize, "link target")?;
        let hint = match self.byte()? {
            HINT_NONE => None,
            HINT_SOME => Some(hint_from(self.take(HINT_BYTES)?)?),
            HINT_DATA => Some(hint_from(self.take(HINT_DATA_BYTES)?)?),
            HINT_PACKED => Some(self.packed_hint()?),
            HINT_LOCAL => Some(self.local_hint(None)?),
            HINT_LOCAL_SAME => match *prev {
                Some(table) => Some(self.local_hint(Some(table))?),
                None => {
                    return Err(RecordError::BadTag {
                        tag: HINT_LOCAL_SAME,
                    })
                }
            },
            tag => return Err(RecordError::BadTag { tag }),
        };
        *prev = local_table(hint.as_ref());
        Ok((target, hint))
    }

    /// A link's target, its hint validated (and decoded: the next link's `prev` depends on
    /// its values) and dropped.
    fn link_target(&mut self, prev: &mut Option<u64>) -> Result<&'a [u8], RecordError> {
        self.link_ref(prev).map(|(t, _)| t)
    }

    /// A [`HINT_PACKED`] hint: each varint in its shortest form and within its field's
    /// width (a node id and a location are u32, a memgest u16), so a hint has one encoding.
    fn packed_hint(&mut self) -> Result<Hint, RecordError> {
        let node = u32::try_from(self.varint()?).map_err(|_| RecordError::BadVarint)?;
        let epoch = self.varint()?;
        let table = self.varint()?;
        let entry = self.varint()?;
        let location = u32::try_from(self.varint()?).map_err(|_| RecordError::BadVarint)?;
        let crc = <[u8; 4]>::try_from(self.take(4)?).map_err(|_| RecordError::Truncated)?;
        let memgest = u16::try_from(self.varint()?).map_err(|_| RecordError::BadVarint)?;
        let h = Hint {
            node,
            epoch,
            table,
            entry,
            data: Some(DataHint {
                location,
                crc: u32::from_le_bytes(crc),
                memgest,
            }),
        };
        // Written only when shorter than the fixed form: anything else is not canonical.
        let d = DataHint {
            location,
            crc: u32::from_le_bytes(crc),
            memgest,
        };
        if packed_len(&h, &d) >= HINT_DATA_BYTES {
            return Err(RecordError::BadVarint);
        }
        Ok(h)
    }

    /// A [`HINT_LOCAL`] hint: node, epoch and memgest 0; the table word's parts each within
    /// its bits, the entry (table start + words × 8) within u64, every varint shortest. Every hint it decodes
    /// to is one the encoder writes in this form, the same bytes: one encoding per hint.
    ///
    /// `same`: a [`HINT_LOCAL_SAME`] hint, whose table word (a [`local_table`], so its parts
    /// are in range) is not in the bytes but given.
    fn local_hint(&mut self, same: Option<u64>) -> Result<Hint, RecordError> {
        let (high, mid, low) = match same {
            Some(t) => (
                t >> TABLE_HIGH_SHIFT,
                (t >> TABLE_MID_SHIFT) & TABLE_MID_MASK,
                t & TABLE_LOW_MASK,
            ),
            None => (self.varint()?, self.varint()?, self.varint()?),
        };
        if high > u64::from(u16::MAX) || mid > TABLE_MID_MASK || low > TABLE_LOW_MASK {
            return Err(RecordError::BadVarint);
        }
        let entry = self
            .varint()?
            .checked_mul(ENTRY_ALIGN)
            .and_then(|rel| rel.checked_add(low.checked_mul(TABLE_UNIT_BYTES)?))
            .ok_or(RecordError::BadVarint)?;
        let location = u32::try_from(self.varint()?).map_err(|_| RecordError::BadVarint)?;
        let crc = <[u8; 4]>::try_from(self.take(4)?).map_err(|_| RecordError::Truncated)?;
        Ok(Hint {
            node: 0,
            epoch: 0,
            table: (high << TABLE_HIGH_SHIFT) | (mid << TABLE_MID_SHIFT) | low,
            entry,
            data: Some(DataHint {
                location,
                crc: u32::from_le_bytes(crc),
                memgest: 0,
            }),
        })
    }
}
