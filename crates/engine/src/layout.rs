//! Byte layout of the two shared regions. Everything here is `pub`: the shared-memory client in
//! another process decodes the same bytes, at another address, with these constants.
//!
//! All multi-byte fields are little-endian 64-bit words accessed with atomic loads/stores.
//! Every reference between (or inside) regions is an offset, never a pointer.
//!
//! # Index region (one memfd)
//!
//! ```text
//!  offset 0: header page (4 KiB)
//!  +--------+-----------------------------------------------------------------+
//!  | word 0 | MAGIC "RINGLIDX"                                                |
//!  | word 1 | layout: [gen 24][log2 buckets 8][table offset in 4 KiB pages 32]|
//!  | word 2 | config id (role/epoch word set by the server; 0 = unset)         |
//!  | word 3 | FORMAT_VERSION                                                  |
//!  +--------+-----------------------------------------------------------------+
//!  then tables, each 2^k buckets of 128 bytes at a 4 KiB-aligned offset:
//!
//!  bucket (128 B = 2 cache lines)
//!  +----------------------+----------+-------+-------+-----+-------+
//!  | meta: overflow count | reserved | ie 0  | ie 1  | ... | ie 6  |
//!  | 8 B                  | 8 B      | 16 B  | 16 B  |     | 16 B  |
//!  +----------------------+----------+-------+-------+-----+-------+
//!
//!  index entry (16 B = two words, each read atomically)
//!  word 0: [ location 32 | tag 16 | memgest 16 ]          location: data offset / 8; 0 = empty
//!  word 1: [ vcheck 32 | size 24 | policy 8 ]             size: entry length / 8
//! ```
//!
//! Why these sizes: 16 bytes per entry keeps the index at ~20 B/key at 0.8 load, the largest
//! share of the per-key budget. A 32-bit location in 8-byte units addresses 32 GiB of data.
//! The 16-bit tag (high bits of the key hash) makes a false match — which costs a wasted data
//! read, never a wrong answer, since the full key is compared — 1 in 65,536 per probed entry.
//! 16 bits of memgest id match `MemgestId`. `vcheck` is 32 bits of a hash of the full 128-bit
//! version, so a reader holding a stale index word cannot validate a *different* version of the
//! same key written at the same location (staged entries, slot reuse). `size` (24 bits, 128 MiB)
//! lets a one-sided reader fetch the whole entry in one read. `policy` holds eviction bits
//! (CLOCK reference / S3-FIFO frequency) and a has-TTL bit; it is not covered by the checksum
//! because in-process readers set the reference bit without the writer. Seven entries and a
//! 16-byte bucket header fill two cache lines: a bucket is one 128-byte read.
//! The overflow count says how many keys whose home is this bucket live in the following
//! buckets (linear probing, at most [`PROBE_BUCKETS_MAX`]); a reader stops at the home bucket
//! when it is zero.
//!
//! # Data region (one memfd)
//!
//! ```text
//!  offset 0: header page (64 KiB, never allocated: location 0 means "empty")
//!  then 64 KiB pages: slabs of one size class each, or runs of pages for large entries.
//!
//!  data entry (8-byte aligned, length rounded up to 8)
//!  +----------------+----------------+--------------------------------------+----------+
//!  | version hi 8 B | version lo 8 B | key_len 17 | value_len 27 | exp_hi 16| checksum 4|
//!  |                |                |   (word 2)                           | exp_lo 4 |
//!  +----------------+----------------+--------------------------------------+----------+
//!  | key bytes | value bytes | padding to 8                                           |
//!  +-----------+-------------+--------------------------------------------------------+
//! ```
//!
//! Why: the full version (16 B) is what CAS and replication compare; the lengths fit the limits
//! (64 KiB keys need 17 bits, 64 MiB values 27); the expiry is 48 bits of unix milliseconds
//! (0 = none, as in [`ringlet_types::Version`]'s 48-bit clock). The header is 32 bytes.
//!
//! The checksum is CRC-32C over the entry bytes (checksum field zeroed) followed by index word 0
//! and index word 1 without its policy byte: it covers key, value, version, expiry, memgest and
//! the location, size and version check that point at the entry.

/// "RINGLIDX", little-endian.
pub const INDEX_MAGIC: u64 = u64::from_le_bytes(*b"RINGLIDX");
/// Bumped when any layout below changes.
pub const FORMAT_VERSION: u64 = 1;
/// Bytes of the index header page.
pub const INDEX_HEADER_BYTES: u64 = 4096;
/// Word offsets in the index header.
pub const HDR_MAGIC: usize = 0;
pub const HDR_LAYOUT: usize = 1;
pub const HDR_CONFIG: usize = 2;
pub const HDR_FORMAT: usize = 3;

/// Alignment of index tables.
pub const TABLE_ALIGN_BYTES: u64 = 4096;
/// Bytes per bucket.
pub const BUCKET_BYTES: u64 = 128;
/// Index entries per bucket.
pub const BUCKET_ENTRIES: usize = 7;
/// Words per bucket.
pub const BUCKET_WORDS: usize = 16;
/// Word offset of entry `i` in a bucket: header takes words 0 and 1.
pub const fn entry_word(i: usize) -> usize {
    2 + 2 * i
}
/// How far past its home bucket a key may live (linear probing). Bounds a reader's work to
/// 16 buckets and the associativity to 112 entries.
pub const PROBE_BUCKETS_MAX: u64 = 16;

/// Bytes of the data region header page (also the slab page size).
pub const PAGE_BYTES: u64 = 64 * 1024;
/// Allocation unit of the data region and of `location`/`size`.
pub const UNIT_BYTES: u64 = 8;
/// Bytes of a data-entry header.
pub const ENTRY_HEADER_BYTES: usize = 32;

const _: () = assert!(BUCKET_BYTES as usize == BUCKET_WORDS * 8);
const _: () = assert!(entry_word(BUCKET_ENTRIES) == BUCKET_WORDS);
const _: () = assert!(
    ringlet_types::limits::ENTRY_BYTES_MAX as u64 / UNIT_BYTES < (1 << 24),
    "size field is 24 bits of units"
);
const _: () = assert!(ringlet_types::limits::KEY_BYTES_MAX < (1 << 17));
const _: () = assert!(ringlet_types::limits::VALUE_BYTES_MAX < (1 << 27));

/// The layout word: which table readers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Bumped on every table switch (upsize, flush); 24 bits, wrapping.
    pub gen: u32,
    pub log2_buckets: u8,
    /// Table offset in the index region, in 4 KiB pages.
    pub table_pages: u32,
}

impl Layout {
    pub fn pack(self) -> u64 {
        (u64::from(self.gen & 0xff_ffff) << 40)
            | (u64::from(self.log2_buckets) << 32)
            | u64::from(self.table_pages)
    }
    pub fn unpack(w: u64) -> Layout {
        Layout {
            gen: (w >> 40) as u32 & 0xff_ffff,
            log2_buckets: (w >> 32) as u8,
            table_pages: w as u32,
        }
    }
    pub fn buckets(self) -> u64 {
        1u64 << self.log2_buckets
    }
    pub fn table_offset(self) -> u64 {
        u64::from(self.table_pages) * TABLE_ALIGN_BYTES
    }
    pub fn table_bytes(self) -> u64 {
        self.buckets() * BUCKET_BYTES
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
pub fn ie_w1(vcheck: u32, size_units: u32) -> u64 {
    u64::from(vcheck) | (u64::from(size_units & 0xff_ffff) << 32)
}
pub fn ie_vcheck(w1: u64) -> u32 {
    w1 as u32
}
pub fn ie_size_units(w1: u64) -> u32 {
    (w1 >> 32) as u32 & 0xff_ffff
}
/// The checksummed part of word 1.
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

/// 32-bit check of a full version, stored in the index entry.
pub fn vcheck_of(v: ringlet_types::Version) -> u32 {
    let mut z = (v.0 as u64) ^ ((v.0 >> 64) as u64).rotate_left(29);
    z = (z ^ (z >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    z = (z ^ (z >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    (z ^ (z >> 33)) as u32
}

/// Data entry word 2.
pub fn de_w2(key_len: u32, value_len: u32, expire_at_ms: u64) -> u64 {
    u64::from(key_len & 0x1_ffff)
        | (u64::from(value_len & 0x7ff_ffff) << 17)
        | (((expire_at_ms >> 32) & 0xffff) << 44)
}
/// Data entry word 3 with the checksum.
pub fn de_w3(checksum: u32, expire_at_ms: u64) -> u64 {
    u64::from(checksum) | ((expire_at_ms & 0xffff_ffff) << 32)
}
pub fn de_key_len(w2: u64) -> u32 {
    w2 as u32 & 0x1_ffff
}
pub fn de_value_len(w2: u64) -> u32 {
    (w2 >> 17) as u32 & 0x7ff_ffff
}
pub fn de_expire(w2: u64, w3: u64) -> u64 {
    ((w2 >> 44) & 0xffff) << 32 | (w3 >> 32)
}
pub fn de_checksum(w3: u64) -> u32 {
    w3 as u32
}
/// Largest storable expiry (48 bits of milliseconds); later deadlines are clamped to it.
pub const EXPIRE_MS_MAX: u64 = (1 << 48) - 1;

/// Units of an entry with these lengths.
pub fn entry_units(key_len: usize, value_len: usize) -> u64 {
    (ENTRY_HEADER_BYTES as u64 + key_len as u64 + value_len as u64).div_ceil(UNIT_BYTES)
}

/// Checksum of an entry image (`bytes`, with the checksum field zero) and its index words.
pub fn checksum(bytes: &[u8], w0: u64, w1: u64) -> u32 {
    let c = crc32c::crc32c(bytes);
    let mut idx = [0u8; 16];
    idx[..8].copy_from_slice(&w0.to_le_bytes());
    idx[8..].copy_from_slice(&(w1 & IE_W1_CHECKED_MASK).to_le_bytes());
    crc32c::crc32c_append(c, &idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips() {
        let l = Layout {
            gen: 0xabcdef,
            log2_buckets: 20,
            table_pages: 77,
        };
        assert_eq!(Layout::unpack(l.pack()), l);
        let w0 = ie_w0(0xdead_beef, 0x1234, 0x0102);
        assert_eq!(
            (ie_location(w0), ie_tag(w0), ie_memgest(w0)),
            (0xdead_beef, 0x1234, 0x0102)
        );
        let w1 = ie_w1(0x8765_4321, 0xab_cdef);
        assert_eq!((ie_vcheck(w1), ie_size_units(w1)), (0x8765_4321, 0xab_cdef));
        let exp = 0xfedc_ba98_7654;
        let w2 = de_w2(65536, 64 << 20, exp);
        let w3 = de_w3(0x1111_2222, exp);
        assert_eq!(de_key_len(w2), 65536);
        assert_eq!(de_value_len(w2), 64 << 20);
        assert_eq!(de_expire(w2, w3), exp);
        assert_eq!(de_checksum(w3), 0x1111_2222);
        assert_eq!(tag_of(0), 1);
    }
}
