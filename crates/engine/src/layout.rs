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
//!  +--------+------------------------------------------------------------------+
//!  then tables at 64 KiB-aligned offsets:
//!  +-------------------------------+-----------------------------------------+
//!  | n buckets × 128 B             | n overflow counts × 2 B (4 per word)    |
//!  +-------------------------------+-----------------------------------------+
//!
//!  bucket (128 B = 2 cache lines) = 8 index entries of 16 B
//!
//!  index entry (16 B = two words, each read atomically)
//!  word 0: [ location 32 | tag 16 | memgest 16 ]       location: data offset / 8; 0 = empty
//!  word 1: [ crc32c 32 | size 24 | policy 8 ]          size: entry length / 8
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
//! Why these sizes: 16 bytes per entry keeps the index near 19 B/key at 0.85 load, the largest
//! share of the per-key budget. A 32-bit location in 8-byte units addresses 32 GiB of data.
//! The 16-bit tag (high bits of the key hash) makes a false match — which costs a wasted data
//! read, never a wrong answer, since the full key is compared — 1 in 65,536 per probed entry.
//! 16 bits of memgest id match `MemgestId`. The CRC-32C lives in the index entry rather than
//! in the data entry: it covers the data entry (key, value, version, expiry) *and* index word 0
//! and the size, so an index entry validates exactly one entry image at exactly one place — a
//! reader holding a stale index entry that points at a reused slot (or at a staged, not yet
//! published version written there) sees a mismatch — and the data header stays 24 bytes.
//! `size` (24 bits, 128 MiB) lets a one-sided reader fetch the whole entry in one read. `policy`
//! holds eviction bits (CLOCK reference / S3-FIFO frequency) and a has-TTL bit; it is not
//! covered by the checksum because in-process readers set the reference bit without the writer.
//! Eight entries fill two cache lines: a bucket is one 128-byte read. Overflow counts sit apart
//! so a bucket holds eight entries rather than seven; a hit in the home bucket never reads them.
//!
//! # Data region (one memfd)
//!
//! ```text
//!  offset 0: header page (64 KiB, never allocated: location 0 means "empty")
//!  then 64 KiB pages: slabs of one size class each, or runs of pages for large entries.
//!
//!  data entry (8-byte aligned, length rounded up to 8), format 4: two header forms
//!
//!  short (no TTL, key <= 255 B, value < 1 MiB): 20-byte header, the key starts mid-word
//!  +----------------+----------------+----------------------------------------------------+
//!  | version hi 8 B | version lo 8 B | short=1 | live 1 | record 1 | 0 1 | key_len 8 | value_len 20 |
//!  +----------------+----------------+----------------------------------------------------+
//!  | key | value | padding to 8                                                            |
//!
//!  long (anything else): 24-byte header, 32 with the expiry word
//!  +----------------+----------------+---------------------------------------------------------------+
//!  | version hi 8 B | version lo 8 B | short=0 | live 1 | record 1 | has_ttl 1 | key_len 17 | value_len 27 | 0 16 |
//!  +----------------+----------------+---------------------------------------------------------------+
//!  | expire_at_ms 8 B (only if has_ttl) | key | value | padding to 8                       |
//! ```
//!
//! Why: the full version (16 B) is what CAS and replication compare, so it is stored whole in
//! both forms (no base to look up, nothing a one-sided reader could pair with the wrong
//! entry); the lengths of the entries a cache is full of fit 28 bits, so the short form keeps
//! them in word 2's low half and starts the key there — 4 bytes per entry, and for a 16-byte
//! key with a 100-byte value it is the difference between a 144- and a 136-byte slot (8 B per
//! key, the size classes step by 8). The long form covers the limits (64 KiB keys need 17
//! bits, 64 MiB values 27) and keeps the expiry word aligned. Which form an entry has is a
//! function of its lengths and TTL ([`de_is_short`]), so its size follows from them. The four
//! flag bits sit at the bottom of word 2 in both forms, so the form, the live bit and the kind
//! are read the same way whatever the form. `record` marks a KVL record (a Redis hash to RESP
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
//! The checksum is CRC-32C over the entry image (word 2's `live` bit taken as 0) followed by
//! index word 0 and the size field.

/// "RINGLIDX", little-endian.
pub const INDEX_MAGIC: u64 = u64::from_le_bytes(*b"RINGLIDX");
/// Bumped when any layout below changes (4: short data-entry headers).
pub const FORMAT_VERSION: u64 = 4;
/// Bytes reserved for the index header (tables start 64 KiB-aligned).
pub const INDEX_HEADER_BYTES: u64 = 64 * 1024;
/// Word offsets in the index header.
pub const HDR_MAGIC: usize = 0;
pub const HDR_LAYOUT: usize = 1;
pub const HDR_CONFIG: usize = 2;
pub const HDR_FORMAT: usize = 3;

/// Alignment (and offset unit) of index tables.
pub const TABLE_ALIGN_BYTES: u64 = 64 * 1024;
/// Bytes per bucket.
pub const BUCKET_BYTES: u64 = 128;
/// Index entries per bucket.
pub const BUCKET_ENTRIES: usize = 8;
/// Words per bucket.
pub const BUCKET_WORDS: usize = 16;
/// Word offset of entry `i` in a bucket.
pub const fn entry_word(i: usize) -> usize {
    2 * i
}
/// How far past its home bucket a key may live (linear probing): at most 63 buckets later,
/// so the associativity is 512 entries. Readers probe only as far as the home bucket's reach.
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
pub const PAGE_BYTES: u64 = 64 * 1024;
/// Allocation unit of the data region and of `location`/`size`.
pub const UNIT_BYTES: u64 = 8;
/// Bytes of a short data-entry header (format 4: no TTL, key <= 255 B, value < 1 MiB).
pub const ENTRY_HEADER_SHORT_BYTES: usize = 20;
/// Bytes of a long data-entry header without / with the expiry word.
pub const ENTRY_HEADER_BYTES: usize = 24;
pub const ENTRY_HEADER_TTL_BYTES: usize = 32;

const _: () = assert!(BUCKET_BYTES as usize == BUCKET_WORDS * 8);
const _: () = assert!(entry_word(BUCKET_ENTRIES) == BUCKET_WORDS);
const _: () = assert!(ringlet_types::limits::INDEX_BUCKETS_MAX as u64 <= TABLE_BUCKETS_MAX);
const _: () = assert!(
    ringlet_types::limits::ENTRY_BYTES_MAX as u64 / UNIT_BYTES < (1 << 24),
    "size field is 24 bits of units"
);
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
    /// Smallest 32-bit hash prefix whose home is bucket `b` or later (`2^32` past the end).
    pub fn first_prefix(self, b: u64) -> u64 {
        (b << 32).div_ceil(self.buckets())
    }
}

/// Index entry word 0.
pub fn ie_w0(location_units: u32, tag: u16, memgest: u16) -> u64 {
    u64::from(location_units) | (u64::from(tag) << 32) | (u64::from(memgest) << 48)
}
pub fn ie_location(w0: u64) -> u32 {
    w0 as u32
}
pub fn ie_tag(w0: u64) -> u16 {
    (w0 >> 32) as u16
}
pub fn ie_memgest(w0: u64) -> u16 {
    (w0 >> 48) as u16
}

/// Index entry word 1 (policy byte zero).
pub fn ie_w1(crc: u32, size_units: u32) -> u64 {
    u64::from(crc) | (u64::from(size_units & 0xff_ffff) << 32)
}
pub fn ie_crc(w1: u64) -> u32 {
    w1 as u32
}
pub fn ie_size_units(w1: u64) -> u32 {
    (w1 >> 32) as u32 & 0xff_ffff
}
/// The part of word 1 readers compare when re-checking an entry (crc and size).
pub const IE_W1_CHECKED_MASK: u64 = (1 << 56) - 1;
/// Policy bits (not checksummed).
pub const POLICY_SHIFT: u32 = 56;
/// CLOCK reference bit / S3-FIFO frequency (2 bits, saturating at 3).
pub const POLICY_FREQ_MASK: u64 = 0b11 << POLICY_SHIFT;
/// The entry has a TTL: active expiry reads only these entries' headers.
pub const POLICY_TTL: u64 = 0b100 << POLICY_SHIFT;

/// The key-hash tag stored in index entries: the hash's top 16 bits, never 0 so that a
/// zeroed (punched) bucket never matches.
pub fn tag_of(hash: u64) -> u16 {
    ((hash >> 48) as u16).max(1)
}

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
/// Largest key / value a short header can describe (8 and 20 bits).
pub const SHORT_KEY_LEN_MAX: usize = (1 << 8) - 1;
pub const SHORT_VALUE_LEN_MAX: usize = (1 << 20) - 1;

/// Whether an entry with these lengths gets the short (20-byte) header: no TTL, a key of at
/// most 255 bytes and a value below 1 MiB. The choice is a function of the lengths alone, so
/// `entry_units` (and the size class) follow from them.
pub fn de_is_short(key_len: usize, value_len: usize, has_ttl: bool) -> bool {
    !has_ttl && key_len <= SHORT_KEY_LEN_MAX && value_len <= SHORT_VALUE_LEN_MAX
}

/// Data entry word 2 (flags and lengths; for the short form only the low 32 bits, the high
/// 32 are the first key bytes of the image).
pub fn de_w2(key_len: u32, value_len: u32, has_ttl: bool) -> u64 {
    if de_is_short(key_len as usize, value_len as usize, has_ttl) {
        DE_SHORT_BIT | (u64::from(key_len) << 4) | (u64::from(value_len) << 12)
    } else {
        (u64::from(has_ttl) * DE_TTL_BIT)
            | (u64::from(key_len & 0x1_ffff) << 4)
            | (u64::from(value_len & 0x7ff_ffff) << 21)
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
        (w2 >> 4) as u32 & 0xff
    } else {
        (w2 >> 4) as u32 & 0x1_ffff
    }
}
#[inline]
pub fn de_value_len(w2: u64) -> u32 {
    if de_short(w2) {
        (w2 >> 12) as u32 & 0xf_ffff
    } else {
        (w2 >> 21) as u32 & 0x7ff_ffff
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
/// Bytes of the header an entry with these lengths gets.
pub fn header_bytes_for(key_len: usize, value_len: usize, has_ttl: bool) -> usize {
    if de_is_short(key_len, value_len, has_ttl) {
        ENTRY_HEADER_SHORT_BYTES
    } else if has_ttl {
        ENTRY_HEADER_TTL_BYTES
    } else {
        ENTRY_HEADER_BYTES
    }
}

/// Units of an entry with these lengths.
pub fn entry_units(key_len: usize, value_len: usize, has_ttl: bool) -> u64 {
    let h = header_bytes_for(key_len, value_len, has_ttl);
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

/// Checksum of an entry image and the index fields that point at it (word 0, size). Word 2's
/// [`DE_LIVE_BIT`] is taken as 0, whatever the image holds (the writer sets it after
/// checksumming).
pub fn checksum(image: &[u8], w0: u64, size_units: u32) -> u32 {
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
    let mut idx = [0u8; 12];
    idx[..8].copy_from_slice(&w0.to_le_bytes());
    idx[8..].copy_from_slice(&size_units.to_le_bytes());
    crc32c::crc32c_append(c, &idx)
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
        let w0 = ie_w0(0xdead_beef, 0x1234, 0x0102);
        assert_eq!(
            (ie_location(w0), ie_tag(w0), ie_memgest(w0)),
            (0xdead_beef, 0x1234, 0x0102)
        );
        let w1 = ie_w1(0x8765_4321, 0xab_cdef);
        assert_eq!((ie_crc(w1), ie_size_units(w1)), (0x8765_4321, 0xab_cdef));
        let w2 = de_w2(65536, 64 << 20, true);
        assert_eq!(de_key_len(w2), 65536);
        assert_eq!(de_value_len(w2), 64 << 20);
        assert!(de_has_ttl(w2));
        assert!(!de_has_ttl(de_w2(1, 1, false)));
        assert_eq!(tag_of(0), 1);
    }

    #[test]
    fn checksum_ignores_only_the_live_bit() {
        let mut img = vec![0u8; 48];
        img[..8].copy_from_slice(&7u64.to_le_bytes());
        img[16..24].copy_from_slice(&(de_w2(3, 10, false) | DE_RECORD_BIT).to_le_bytes());
        img[24..27].copy_from_slice(b"key");
        let c = checksum(&img, 42, 6);
        let w2 = de_w2(3, 10, false) | DE_RECORD_BIT | DE_LIVE_BIT;
        img[16..24].copy_from_slice(&w2.to_le_bytes());
        assert!(de_live(w2));
        assert_eq!(checksum(&img, 42, 6), c);
        // Every other bit of word 2 (and the rest of the image) still counts.
        for bit in (0..64).filter(|&b| b != 1) {
            let mut other = img.clone();
            other[16 + bit / 8] ^= 1 << (bit % 8);
            assert_ne!(checksum(&other, 42, 6), c, "bit {bit}");
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
