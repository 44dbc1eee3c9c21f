//! Byte layout of the two shared regions. Everything here is `pub`: the shared-memory client in
//! another process decodes the same bytes, at another address, with these constants.
//!
//! All multi-byte fields are little-endian 64-bit words accessed with atomic loads/stores.
//! Every reference between (or inside) regions is an offset, never a pointer.
//!
//! # Index region (one memfd)
//!
//! ```text
//!  offset 0: header (64 KiB reserved, one 4 KiB page touched)
//!  +--------+------------------------------------------------------------------+
//!  | word 0 | MAGIC "RINGLIDX"                                                 |
//!  | word 1 | layout: [gen 16][buckets 28][table offset in 64 KiB units 20]    |
//!  | word 2 | config id (role/epoch word set by the server; 0 = unset)          |
//!  | word 3 | FORMAT_VERSION                                                   |
//!  | word 4 | bytes of each policy area                                        |
//!  | word 5 | offset of the policy areas                                       |
//!  +--------+------------------------------------------------------------------+
//!  then tables at 64 KiB-aligned offsets:
//!  +-------------------------------+-----------------------------------------+
//!  | n buckets × 128 B             | n overflow counts × 2 B (4 per word)    |
//!  +-------------------------------+-----------------------------------------+
//!  and at the end of the region two policy areas (one per generation parity), a word per
//!  bucket of the largest table each:
//!  +-----------------------------------+-----------------------------------+
//!  | policy area 0 (even-gen tables)   | policy area 1 (odd-gen tables)    |
//!  +-----------------------------------+-----------------------------------+
//!
//!  bucket (128 B = 2 cache lines) = 16 index entries of 8 B
//!
//!  index entry (format 5: one word, loaded and stored atomically, published in one store)
//!  [ location 32 | tag 8 | check 24 ]        location: data offset / 8; 0 = empty
//!
//!  policy word of a bucket (in its table's policy area): a nibble per entry
//!  [ entry 15 | ... | entry 0 ], nibble = [ 0 1 | ttl 1 | freq 2 ]
//! ```
//!
//! A key's home bucket is `(low 32 bits of its hash × n) >> 32` (Lemire's multiply-shift
//! reduction), so `n` need not be a power of two: the index grows by 1.5× and can be
//! provisioned for the expected key count, keeping the load factor — and so the bytes per key —
//! high. A key lives in its home bucket or, if that is full, in one of the next
//! [`PROBE_BUCKETS_MAX`]` - 1` buckets (linear probing); the home bucket's overflow word says
//! how many of its keys live elsewhere and how far the farthest is, so a reader looks past the
//! home bucket only then, and only that far.
//!
//! Why these sizes (format 5, issue 16): the index entry is the largest per-key cost, so it is
//! one word — 9.4 B/key at load 0.85 where the 16-byte entry of formats 1–4 took 18.8. A
//! 32-bit location in 8-byte units addresses 32 GiB of data. The 8-bit tag (hash bits 42-49
//! since format 6, [`tag_of`]) makes a false match 1 in 256 per probed entry: it costs a wasted data read (the
//! full key is compared after the check), never a wrong answer. The 24-bit check is the low
//! 24 bits of CRC-32C over the data entry image (key, value, version, memgest, expiry) *and*
//! the location and tag: an index entry validates exactly one image at exactly one place, so a
//! reader holding a stale index word that points at a reused slot (or at a staged version
//! written there) sees a mismatch; a torn copy must also survive the index re-check (the word
//! unchanged), so a wrong answer needs a slot reused under the read *and* a 1-in-16.7 M check
//! collision. What left the entry, and where it went:
//! - the **size**: the entry's word 2 (its lengths) says it; a reader loads word 2, then
//!   copies that many words, and requires the copy's word 2 to equal the first load;
//! - the **memgest**: into word 2 of the data header (5 bits in the short form, 16 in the
//!   long one's spare bits), inside the checksummed image;
//! - the **policy bits** (CLOCK reference / S3-FIFO frequency, has-TTL): a nibble per entry in
//!   a policy word per bucket, in one of two *policy areas* that are never table space. Not
//!   checksummed (in-process readers set reference bits without the writer). A reader bumps
//!   a bit with a CAS of the whole word, after checking the table is still the one it read;
//!   since policy areas are never reused as index words, a bump through a layout that changed
//!   right after that check can only change another entry's policy bits, never an index entry.
//!   The two tables of a migration have consecutive generations and so use different areas.
//!
//! Sixteen entries fill two cache lines: a bucket is one 128-byte read. Overflow counts sit
//! apart so a bucket holds sixteen entries; a hit in the home bucket never reads them.
//!
//! # Data region (one memfd)
//!
//! ```text
//!  offset 0: header page (PAGE_BYTES = 128 KiB, never allocated: location 0 means "empty")
//!  then 128 KiB pages: slabs of one size class each, or runs of pages for large entries.
//!
//!  data entry (8-byte aligned, length rounded up to 8), format 4: two header forms
//!
//!  short (no TTL, key <= 255 B, value < 64 KiB, memgest < 32): 20-byte header, the key
//!  starts mid-word
//!  +----------------+----------------+--------------------------------------------------------------+
//!  | version hi 8 B | version lo 8 B | short=1 | live 1 | record 1 | key_len 8 | value_len 16 | memgest 5 |
//!  +----------------+----------------+--------------------------------------------------------------+
//!  | key | value | padding to 8                                                            |
//!
//!  long (anything else): 24-byte header, 32 with the expiry word
//!  +----------------+----------------+---------------------------------------------------------------+
//!  | version hi 8 B | version lo 8 B | short=0 | live 1 | record 1 | has_ttl 1 | key_len 17 | value_len 27 | memgest 16 |
//!  +----------------+----------------+---------------------------------------------------------------+
//!  | expire_at_ms 8 B (only if has_ttl) | key | value | padding to 8                       |
//! ```
//!
//! Why: the full version (16 B) is what CAS and replication compare, so it is stored whole in
//! both forms (no base to look up, nothing a one-sided reader could pair with the wrong
//! entry); the lengths and memgest of the entries a cache is full of fit 29 bits, so the short
//! form keeps them in word 2's low half and starts the key there — 4 bytes per entry, and for a
//! 16-byte key with a 100-byte value it is the difference between a 144- and a 136-byte slot
//! (8 B per key, the size classes step by 8). Format 5 moved the memgest out of the index
//! entry into word 2 and took its 5 bits from the short form's value length (values of 64 KiB
//! to 1 MiB now take the long form: 4 bytes more on an entry of at least 64 KiB). Memgests
//! with ids of 32 and more take the long form too (4 bytes, up to 8 after rounding, per key of
//! such a memgest): ids are small integers given out in order, and the built-in `none` is 0.
//! The long form covers the limits (64 KiB keys need 17 bits, 64 MiB values 27) and keeps the
//! expiry word aligned. Which form an entry has is a function of its lengths, TTL and memgest
//! ([`de_is_short`]), so its size follows from them. The first three flag bits sit at the
//! bottom of word 2 in both forms, so the form, the live bit and the kind are read the same
//! way whatever the form. `record` marks a KVL record (a Redis hash to RESP
//! clients; `ringlet_types::ValueKind`): inside the checksummed image, so a reader never
//! mistakes a record for a string.
//!
//! `live` (format 3) is set by the writer only while an index entry of the readers' table
//! points at the entry: set *after* the index entry that publishes it is stored, cleared
//! *before* the index stops pointing at it (replaced, deleted, evicted, moved by compaction;
//! a flush punches the data before it switches the table). A reader following a location
//! hint straight to the data entry (no index access: `read::read_entry_direct`) thereby
//! knows the entry is still the key's current one. It is not part of the checksum (the
//! writer flips it after checksumming), so the checksum masks it. The writer flips it with an
//! atomic RMW of word 2, which in the short form also holds the first key bytes: only the
//! writer stores to the word, so the RMW loses nothing.
//!
//! Because a short header puts the key at byte 20, code that compares or copies a key inside
//! the regions loads aligned words and picks the bytes out ([`bytes_eq_at`], [`bytes_at`]):
//! every access to the regions stays an aligned atomic load.
//!
//! The check is the low 24 bits of CRC-32C over the entry image (word 2's `live` bit taken as
//! 0) followed by the index word's location and tag ([`ie_bound`], as one little-endian word).

/// "RINGLIDX", little-endian.
pub const INDEX_MAGIC: u64 = u64::from_le_bytes(*b"RINGLIDX");
/// Bumped when any layout below changes (4: short data-entry headers; 5: one-word index
/// entries, memgest in the data header, policy nibbles beside the buckets; 6: the tag is
/// hash bits 42-49, [`tag_of`]).
pub const FORMAT_VERSION: u64 = 6;
/// Bytes reserved for the index header (tables start 64 KiB-aligned).
pub const INDEX_HEADER_BYTES: u64 = 64 * 1024;
/// Word offsets in the index header.
pub const HDR_MAGIC: usize = 0;
pub const HDR_LAYOUT: usize = 1;
pub const HDR_CONFIG: usize = 2;
pub const HDR_FORMAT: usize = 3;
/// Bytes of each of the two policy areas (format 5): one word per bucket of the largest
/// table, a nibble per index entry ([`Layout::policy_of`]).
pub const HDR_POLICY_AREA: usize = 4;
/// Byte offset of the first policy area; the second follows it. They sit at the end of the
/// index region, after all table space: the header then shares its first (huge) page with
/// the first table, as before format 5.
pub const HDR_POLICY_BASE: usize = 5;

/// Alignment (and offset unit) of index tables.
pub const TABLE_ALIGN_BYTES: u64 = 64 * 1024;
/// Bytes per bucket.
pub const BUCKET_BYTES: u64 = 128;
/// Bytes per index entry (one atomic word).
pub const INDEX_ENTRY_BYTES: u64 = 8;
/// Index entries per bucket.
pub const BUCKET_ENTRIES: usize = 16;
/// Words per bucket.
pub const BUCKET_WORDS: usize = 16;
/// Word offset of entry `i` in a bucket.
pub const fn entry_word(i: usize) -> usize {
    i
}
/// How far past its home bucket a key may live (linear probing): at most 63 buckets later,
/// so the associativity is 1,024 entries. Readers probe only as far as the home bucket's reach.
pub const PROBE_BUCKETS_MAX: u64 = 64;

/// A bucket's 16-bit overflow word: [reach 6][count 10]. `count` keys homed here live in
/// later buckets, the farthest `reach` buckets away (not lowered until `count` is 0 again).
pub fn overflow_count(v: u64) -> u64 {
    v & 0x3ff
}
/// How many buckets past the home bucket a reader must probe.
pub fn overflow_reach(v: u64) -> u64 {
    if overflow_count(v) == 0 {
        0
    } else {
        (v >> 10) & 0x3f
    }
}
/// Pack an overflow word.
pub fn overflow_pack(count: u64, reach: u64) -> u64 {
    if count == 0 {
        0
    } else {
        (count.min(0x3ff)) | (reach.min(0x3f) << 10)
    }
}
/// Largest bucket count the layout word can express.
pub const TABLE_BUCKETS_MAX: u64 = (1 << 28) - 1;

/// Bytes of the data region header page (also the slab page size).
///
/// 128 KiB since session 19 (was 64 KiB): an entry's real cost is its share of a slab page,
/// page / (entries per page), and a larger page makes that share closer to the entry — for
/// the benchmark's 1 KiB values (1,064-byte entries) 1,066 B instead of 1,074 B at 64 KiB
/// (the class table in `slab.rs`). Readers never depend on it: entries are
/// found by location and sized by their own header. The cost is the allocation grain: a
/// slab, the budget step and a partly filled slab per class in use are 128 KiB.
pub const PAGE_BYTES: u64 = 128 * 1024;
/// Allocation unit of the data region and of `location`.
pub const UNIT_BYTES: u64 = 8;
/// Bytes of a short data-entry header (format 4: no TTL, key <= 255 B, value < 64 KiB,
/// memgest < 32 since format 5).
pub const ENTRY_HEADER_SHORT_BYTES: usize = 20;
/// Bytes of a long data-entry header without / with the expiry word.
pub const ENTRY_HEADER_BYTES: usize = 24;
pub const ENTRY_HEADER_TTL_BYTES: usize = 32;

const _: () = assert!(BUCKET_BYTES as usize == BUCKET_WORDS * 8);
const _: () = assert!(BUCKET_ENTRIES as u64 * INDEX_ENTRY_BYTES == BUCKET_BYTES);
const _: () = assert!(entry_word(BUCKET_ENTRIES) == BUCKET_WORDS);
const _: () = assert!(
    BUCKET_ENTRIES * 4 == 64,
    "one policy word per bucket, a nibble each"
);
const _: () = assert!(ringlet_types::limits::INDEX_BUCKETS_MAX as u64 <= TABLE_BUCKETS_MAX);
const _: () = assert!(ringlet_types::limits::KEY_BYTES_MAX < (1 << 17));
const _: () = assert!(ringlet_types::limits::VALUE_BYTES_MAX < (1 << 27));

/// The layout word: which table readers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bumped on every table switch (upsize, flush); 16 bits, wrapping. A reader would have to
    /// stall across 65,536 switches to be fooled.
    pub gen: u16,
    /// Number of buckets, `1..=TABLE_BUCKETS_MAX`.
    pub buckets: u32,
    /// Table offset in the index region, in 64 KiB units (20 bits: 64 GiB).
    pub table_units: u32,
}

impl Layout {
    pub fn pack(self) -> u64 {
        (u64::from(self.gen) << 48)
            | ((u64::from(self.buckets) & TABLE_BUCKETS_MAX) << 20)
            | (u64::from(self.table_units) & 0xf_ffff)
    }
    pub fn unpack(w: u64) -> Layout {
        Layout {
            gen: (w >> 48) as u16,
            buckets: ((w >> 20) & TABLE_BUCKETS_MAX) as u32,
            table_units: (w & 0xf_ffff) as u32,
        }
    }
    pub fn buckets(self) -> u64 {
        u64::from(self.buckets)
    }
    pub fn table_offset(self) -> u64 {
        u64::from(self.table_units) * TABLE_ALIGN_BYTES
    }
    /// Bytes of the table: buckets, then overflow counts.
    pub fn table_bytes(self) -> u64 {
        self.buckets() * BUCKET_BYTES + (self.buckets() * 2).div_ceil(8) * 8
    }
    /// The home bucket of a hash.
    #[inline]
    pub fn home(self, hash: u64) -> u64 {
        (u64::from(hash as u32) * self.buckets()) >> 32
    }
    /// Bucket `k` places after `b`, wrapping.
    #[inline]
    pub fn after(self, b: u64, k: u64) -> u64 {
        let x = b + k;
        if x >= self.buckets() {
            x - self.buckets()
        } else {
            x
        }
    }
    /// Byte offset of bucket `b`.
    #[inline]
    pub fn bucket_offset(self, b: u64) -> u64 {
        self.table_offset() + b * BUCKET_BYTES
    }
    /// Byte offset of the word holding bucket `b`'s overflow count, and the count's shift.
    #[inline]
    pub fn overflow_word(self, b: u64) -> (u64, u32) {
        (
            self.table_offset() + self.buckets() * BUCKET_BYTES + (b / 4) * 8,
            ((b % 4) * 16) as u32,
        )
    }
    /// The policy word (byte offset) and nibble shift of the index entry at byte offset
    /// `ie_off` of this table (which must be an entry of it), given where the policy areas
    /// start and the bytes of each ([`HDR_POLICY_BASE`], [`HDR_POLICY_AREA`]). Tables of even and odd generation use different areas, and
    /// a new table's generation is always the readers' table's plus one, so the two tables
    /// of a migration never share policy words.
    #[inline]
    pub fn policy_of(self, area_base: u64, area_bytes: u64, ie_off: u64) -> (u64, u32) {
        let rel = ie_off - self.table_offset();
        let b = rel / BUCKET_BYTES;
        let i = (rel % BUCKET_BYTES) / INDEX_ENTRY_BYTES;
        (
            area_base + u64::from(self.gen & 1) * area_bytes + b * 8,
            policy_shift(i as usize),
        )
    }
    /// Smallest 32-bit hash prefix whose home is bucket `b` or later (`2^32` past the end).
    pub fn first_prefix(self, b: u64) -> u64 {
        (b << 32).div_ceil(self.buckets())
    }
}

/// Index entry (format 5): one word `[ location 32 | tag 8 | check 24 ]`; 0 = empty.
pub fn ie_pack(location_units: u32, tag: u8, check: u32) -> u64 {
    u64::from(location_units) | (u64::from(tag) << 32) | (u64::from(check & CHECK_MASK) << 40)
}
pub fn ie_location(w: u64) -> u32 {
    w as u32
}
pub fn ie_tag(w: u64) -> u8 {
    (w >> 32) as u8
}
/// The entry's 24-bit check ([`checksum`]).
pub fn ie_check(w: u64) -> u32 {
    (w >> 40) as u32
}
/// The part of an index word the check covers (location and tag): what binds an image to
/// one place and one key-hash tag.
pub fn ie_bound(w: u64) -> u64 {
    w & ((1 << 40) - 1)
}
/// Bits of the check stored in the index entry.
pub const CHECK_MASK: u32 = (1 << 24) - 1;

/// Policy nibble of entry `i` of a bucket: its shift in the bucket's policy word.
pub const fn policy_shift(i: usize) -> u32 {
    (i * 4) as u32
}
/// Policy nibble bits (not checksummed: in-process readers set the reference bits without
/// the writer). CLOCK reference bit / S3-FIFO frequency (2 bits, saturating at 3).
pub const POLICY_FREQ: u64 = 0b11;
/// The entry has a TTL: active expiry reads only these entries' headers.
pub const POLICY_TTL: u64 = 0b100;
/// One whole nibble.
pub const POLICY_NIBBLE: u64 = 0b1111;

/// Where the tag's 8 bits sit in the key hash ([`tag_of`]).
pub const TAG_SHIFT: u32 = 42;

/// The key-hash tag stored in index entries: hash bits 42-49, never 0.
///
/// Why those bits (format 6): they are independent of the low 32 bits that pick the home
/// bucket, so the tag still filters a bucket's neighbours, and they lie inside the 50 hash bits
/// a per-slot scan code keeps (`hash::slot_order_code`), so a slot scan can filter a code's
/// home neighbourhood by tag without reading a key. Format 5 used bits 56-63, which made the
/// scan read and hash every neighbour's key (session 18: ~22 % of a move's node CPU).
pub fn tag_of(hash: u64) -> u8 {
    ((hash >> TAG_SHIFT) as u8).max(1)
}
const _: () = assert!(TAG_SHIFT >= 32 && TAG_SHIFT + 8 <= crate::hash::SLOT_ORDER_HASH_BITS);

/// Word 2's form bit (format 4): set for the short header (module docs).
pub const DE_SHORT_BIT: u64 = 1;
/// Word 2's live bit (format 3, bit 1 since format 4): set while the readers' index publishes
/// the entry (module docs). Not covered by the checksum. In the low 32 bits, so that it is part
/// of both header forms.
pub const DE_LIVE_BIT: u64 = 1 << 1;
/// Word 2's record bit (format 2, bit 2 since format 4).
pub const DE_RECORD_BIT: u64 = 1 << 2;
/// Word 2's has-TTL bit (long form only: a short header never has an expiry word).
pub const DE_TTL_BIT: u64 = 1 << 3;
/// Largest key / value / memgest id a short header can describe (8, 16 and 5 bits).
pub const SHORT_KEY_LEN_MAX: usize = (1 << 8) - 1;
pub const SHORT_VALUE_LEN_MAX: usize = (1 << 16) - 1;
pub const SHORT_MEMGEST_MAX: u16 = (1 << 5) - 1;

/// Whether an entry with these lengths and memgest gets the short (20-byte) header: no TTL,
/// a key of at most 255 bytes, a value below 64 KiB and a memgest id below 32. The choice is a
/// function of these alone, so `entry_units` (and the size class) follow from them.
pub fn de_is_short(key_len: usize, value_len: usize, has_ttl: bool, memgest: u16) -> bool {
    !has_ttl
        && key_len <= SHORT_KEY_LEN_MAX
        && value_len <= SHORT_VALUE_LEN_MAX
        && memgest <= SHORT_MEMGEST_MAX
}

/// Data entry word 2 (flags, lengths, memgest; for the short form only the low 32 bits, the
/// high 32 are the first key bytes of the image).
pub fn de_w2(key_len: u32, value_len: u32, has_ttl: bool, memgest: u16) -> u64 {
    if de_is_short(key_len as usize, value_len as usize, has_ttl, memgest) {
        DE_SHORT_BIT
            | (u64::from(key_len) << 3)
            | (u64::from(value_len) << 11)
            | (u64::from(memgest) << 27)
    } else {
        (u64::from(has_ttl) * DE_TTL_BIT)
            | (u64::from(key_len & 0x1_ffff) << 4)
            | (u64::from(value_len & 0x7ff_ffff) << 21)
            | (u64::from(memgest) << 48)
    }
}
/// Whether word 2 is a short header's.
#[inline]
pub fn de_short(w2: u64) -> bool {
    w2 & DE_SHORT_BIT != 0
}
/// Whether word 2 says the entry is published (see [`DE_LIVE_BIT`]).
pub fn de_live(w2: u64) -> bool {
    w2 & DE_LIVE_BIT != 0
}
/// Word 2's bits for `kind` (to OR into [`de_w2`]).
pub fn de_kind_bits(kind: ringlet_types::ValueKind) -> u64 {
    match kind {
        ringlet_types::ValueKind::String => 0,
        ringlet_types::ValueKind::Record => DE_RECORD_BIT,
    }
}
/// The value kind word 2 records.
pub fn de_kind(w2: u64) -> ringlet_types::ValueKind {
    if w2 & DE_RECORD_BIT != 0 {
        ringlet_types::ValueKind::Record
    } else {
        ringlet_types::ValueKind::String
    }
}
#[inline]
pub fn de_key_len(w2: u64) -> u32 {
    if de_short(w2) {
        (w2 >> 3) as u32 & 0xff
    } else {
        (w2 >> 4) as u32 & 0x1_ffff
    }
}
#[inline]
pub fn de_value_len(w2: u64) -> u32 {
    if de_short(w2) {
        (w2 >> 11) as u32 & 0xffff
    } else {
        (w2 >> 21) as u32 & 0x7ff_ffff
    }
}
/// The memgest id word 2 records (format 5: it left the index entry).
#[inline]
pub fn de_memgest(w2: u64) -> u16 {
    if de_short(w2) {
        (w2 >> 27) as u16 & SHORT_MEMGEST_MAX
    } else {
        (w2 >> 48) as u16
    }
}
pub fn de_has_ttl(w2: u64) -> bool {
    !de_short(w2) && w2 & DE_TTL_BIT != 0
}
/// Bytes of the header of an entry with word 2 `w2`.
#[inline]
pub fn de_header_bytes(w2: u64) -> usize {
    if de_short(w2) {
        ENTRY_HEADER_SHORT_BYTES
    } else if de_has_ttl(w2) {
        ENTRY_HEADER_TTL_BYTES
    } else {
        ENTRY_HEADER_BYTES
    }
}
/// Units of the entry word 2 `w2` describes (header, key, value, padding to 8).
#[inline]
pub fn de_units(w2: u64) -> u64 {
    (de_header_bytes(w2) as u64 + u64::from(de_key_len(w2)) + u64::from(de_value_len(w2)))
        .div_ceil(UNIT_BYTES)
}
/// Bytes of the header an entry with these lengths gets.
pub fn header_bytes_for(key_len: usize, value_len: usize, has_ttl: bool, memgest: u16) -> usize {
    if de_is_short(key_len, value_len, has_ttl, memgest) {
        ENTRY_HEADER_SHORT_BYTES
    } else if has_ttl {
        ENTRY_HEADER_TTL_BYTES
    } else {
        ENTRY_HEADER_BYTES
    }
}

/// Units of an entry with these lengths.
pub fn entry_units(key_len: usize, value_len: usize, has_ttl: bool, memgest: u16) -> u64 {
    let h = header_bytes_for(key_len, value_len, has_ttl, memgest);
    (h as u64 + key_len as u64 + value_len as u64).div_ceil(UNIT_BYTES)
}

/// Whether the `len` bytes at byte offset `start` (any alignment) equal `want`, loading only
/// aligned words through `load` (`None`: out of range, compares unequal). Short headers put
/// the key at offset 20, so key comparisons in the regions cannot assume word alignment.
#[inline]
pub fn bytes_eq_at(load: impl Fn(u64) -> Option<u64>, start: u64, want: &[u8]) -> bool {
    let mut off = start & !7;
    let mut skip = (start & 7) as usize;
    let mut i = 0;
    while i < want.len() {
        let Some(w) = load(off) else {
            return false;
        };
        let b = w.to_le_bytes();
        let take = (8 - skip).min(want.len() - i);
        if b[skip..skip + take] != want[i..i + take] {
            return false;
        }
        i += take;
        skip = 0;
        off += 8;
    }
    true
}

/// Append the `len` bytes at byte offset `start` (any alignment) to `out`, loading aligned
/// words through `load`; false (with `out` partly filled) if a word is out of range.
pub fn bytes_at(
    load: impl Fn(u64) -> Option<u64>,
    start: u64,
    len: usize,
    out: &mut Vec<u8>,
) -> bool {
    let mut off = start & !7;
    let mut skip = (start & 7) as usize;
    let mut left = len;
    while left > 0 {
        let Some(w) = load(off) else {
            return false;
        };
        let b = w.to_le_bytes();
        let take = (8 - skip).min(left);
        out.extend_from_slice(&b[skip..skip + take]);
        left -= take;
        skip = 0;
        off += 8;
    }
    true
}

/// The 24-bit check of an entry image and the index fields that point at it (location and
/// tag, [`ie_bound`]): the low 24 bits of CRC-32C over the image then the bound index word.
/// Word 2's [`DE_LIVE_BIT`] is taken as 0, whatever the image holds (the writer sets it after
/// checksumming).
pub fn checksum(image: &[u8], bound: u64) -> u32 {
    let c = if image.len() >= 24 && image[16] & DE_LIVE_BIT as u8 != 0 {
        let mut w2 = [0u8; 8];
        w2.copy_from_slice(&image[16..24]);
        let w2 = u64::from_le_bytes(w2) & !DE_LIVE_BIT;
        let c = crc32c::crc32c(&image[..16]);
        let c = crc32c::crc32c_append(c, &w2.to_le_bytes());
        crc32c::crc32c_append(c, &image[24..])
    } else {
        crc32c::crc32c(image)
    };
    crc32c::crc32c_append(c, &ie_bound(bound).to_le_bytes()) & CHECK_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        let l = Layout {
            gen: 0xabcd,
            buckets: 123_456_789,
            table_units: 77,
        };
        assert_eq!(Layout::unpack(l.pack()), l);
        let w = ie_pack(0xdead_beef, 0x12, 0x87_6543);
        assert_eq!(
            (ie_location(w), ie_tag(w), ie_check(w)),
            (0xdead_beef, 0x12, 0x87_6543)
        );
        assert_eq!(ie_bound(w), ie_pack(0xdead_beef, 0x12, 0));
        let w2 = de_w2(65536, 64 << 20, true, 0xfedc);
        assert_eq!(de_key_len(w2), 65536);
        assert_eq!(de_value_len(w2), 64 << 20);
        assert_eq!(de_memgest(w2), 0xfedc);
        assert!(de_has_ttl(w2));
        assert!(!de_has_ttl(de_w2(1, 1, false, 0)));
        let s = de_w2(255, 65535, false, 31);
        assert!(de_short(s));
        assert_eq!(
            (de_key_len(s), de_value_len(s), de_memgest(s)),
            (255, 65535, 31)
        );
        // The short form's high half is key bytes: they never leak into the fields.
        let s2 = s | (u64::from(u32::MAX) << 32);
        assert_eq!(
            (de_key_len(s2), de_value_len(s2), de_memgest(s2)),
            (255, 65535, 31)
        );
        assert!(!de_short(de_w2(1, 1, false, 32)));
        assert!(!de_short(de_w2(1, 65536, false, 0)));
        assert_eq!(de_units(s), entry_units(255, 65535, false, 31));
        assert_eq!(tag_of(0), 1);
    }

    #[test]
    fn checksum_ignores_only_the_live_bit() {
        let mut img = vec![0u8; 48];
        img[..8].copy_from_slice(&7u64.to_le_bytes());
        img[16..24].copy_from_slice(&(de_w2(3, 10, false, 0) | DE_RECORD_BIT).to_le_bytes());
        img[24..27].copy_from_slice(b"key");
        let c = checksum(&img, 42);
        let w2 = de_w2(3, 10, false, 0) | DE_RECORD_BIT | DE_LIVE_BIT;
        img[16..24].copy_from_slice(&w2.to_le_bytes());
        assert!(de_live(w2));
        assert_eq!(checksum(&img, 42), c);
        // The check bits of the index word are not part of what is checked.
        assert_eq!(checksum(&img, 42 | (0xabc << 40)), c);
        assert_ne!(checksum(&img, 43), c);
        assert_ne!(checksum(&img, 42 | (7 << 32)), c);
        // Every other bit of word 2 (and the rest of the image) still counts.
        for bit in (0..64).filter(|&b| b != 1) {
            let mut other = img.clone();
            other[16 + bit / 8] ^= 1 << (bit % 8);
            assert_ne!(checksum(&other, 42), c, "bit {bit}");
        }
    }

    #[test]
    fn home_buckets_are_monotone_and_in_range() {
        for n in [1u32, 2, 3, 7, 1000, 168_068] {
            let l = Layout {
                gen: 0,
                buckets: n,
                table_units: 1,
            };
            let mut last = 0;
            for i in 0..1000u64 {
                let h = i * (u64::from(u32::MAX) / 999);
                let b = l.home(h);
                assert!(b < u64::from(n) && b >= last);
                last = b;
            }
            for b in 0..u64::from(n).min(50) {
                let p = l.first_prefix(b);
                assert_eq!(l.home(p), b, "n {n} b {b}");
                if p > 0 {
                    assert!(l.home(p - 1) < b);
                }
            }
        }
    }
}
