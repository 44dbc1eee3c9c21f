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
//!  data entry (8-byte aligned, length rounded up to 8)
//!  +----------------+----------------+----------------------------------------------+
//!  | version hi 8 B | version lo 8 B | key_len 17 | value_len 27 | has_ttl 1 | record 1 | live 1 | 0 17 |
//!  +----------------+----------------+----------------------------------------------+
//!  | expire_at_ms 8 B (only if has_ttl) | key | value | padding to 8                 |
//!  +------------------------------------+-----+-------+------------------------------+
//! ```
//!
//! Why: the full version (16 B) is what CAS and replication compare; the lengths fit the limits
//! (64 KiB keys need 17 bits, 64 MiB values 27); the expiry word is there only for keys with a
//! TTL, so the common header is 24 bytes. `record` marks a KVL record (a Redis hash to RESP
//! clients; `ringlet_types::ValueKind`): inside the checksummed image, so a reader never
//! mistakes a record for a string, and free, since the word had spare bits.
//!
//! `live` (format 3) is set by the writer only while an index entry of the readers' table
//! points at the entry: set *after* the index entry that publishes it is stored, cleared
//! *before* the index stops pointing at it (replaced, deleted, evicted, moved by compaction;
//! a flush punches the data before it switches the table). A reader following a location
//! hint straight to the data entry (no index access: `read::read_entry_direct`) thereby
//! knows the entry is still the key's current one. It is not part of the checksum (the
//! writer flips it after checksumming), so the checksum masks it.
//!
//! The checksum is CRC-32C over the entry image (word 2's `live` bit taken as 0) followed by
//! index word 0 and the size field.

/// "RINGLIDX", little-endian.
pub const INDEX_MAGIC: u64 = u64::from_le_bytes(*b"RINGLIDX");
/// Bumped when any layout below changes.
pub const FORMAT_VERSION: u64 = 3;
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
/// Bytes of a data-entry header without / with the expiry word.
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

/// Data entry word 2.
pub fn de_w2(key_len: u32, value_len: u32, has_ttl: bool) -> u64 {
    u64::from(key_len & 0x1_ffff)
        | (u64::from(value_len & 0x7ff_ffff) << 17)
        | (u64::from(has_ttl) << 44)
}
/// Word 2's record bit (format 2).
pub const DE_RECORD_BIT: u64 = 1 << 45;
/// Word 2's live bit (format 3): set while the readers' index publishes the entry (module
/// docs). Not covered by the checksum.
pub const DE_LIVE_BIT: u64 = 1 << 46;
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
pub fn de_key_len(w2: u64) -> u32 {
    w2 as u32 & 0x1_ffff
}
pub fn de_value_len(w2: u64) -> u32 {
    (w2 >> 17) as u32 & 0x7ff_ffff
}
pub fn de_has_ttl(w2: u64) -> bool {
    w2 & (1 << 44) != 0
}
/// Bytes of the header of an entry with word 2 `w2`.
pub fn de_header_bytes(w2: u64) -> usize {
    if de_has_ttl(w2) {
        ENTRY_HEADER_TTL_BYTES
    } else {
        ENTRY_HEADER_BYTES
    }
}

/// Units of an entry with these lengths.
pub fn entry_units(key_len: usize, value_len: usize, has_ttl: bool) -> u64 {
    let h = if has_ttl {
        ENTRY_HEADER_TTL_BYTES
    } else {
        ENTRY_HEADER_BYTES
    };
    (h as u64 + key_len as u64 + value_len as u64).div_ceil(UNIT_BYTES)
}

/// Checksum of an entry image and the index fields that point at it (word 0, size). Word 2's
/// [`DE_LIVE_BIT`] is taken as 0, whatever the image holds (the writer sets it after
/// checksumming).
pub fn checksum(image: &[u8], w0: u64, size_units: u32) -> u32 {
    let c = if image.len() >= 24 && image[16 + 5] & 0x40 != 0 {
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
        for bit in (0..64).filter(|&b| b != 46) {
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
