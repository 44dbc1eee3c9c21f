//! Key hashing. One 64-bit xxh3 hash per key picks the bucket (low bits), the tag (high 16
//! bits) and identifies the key in access records and slot digests.

/// The 64-bit hash of a key. Stable across processes and versions of this crate: one-sided
/// readers in other processes and access records depend on it.
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// Mix a key hash with a version into a digest term (order-independent sums of these form
/// the slot digest). SplitMix64's finaliser over the xor of the three words.
pub fn digest_term(hash: u64, version: ringlet_types::Version) -> u64 {
    let mut z = hash ^ (version.0 as u64).rotate_left(17) ^ ((version.0 >> 64) as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Bits of the key hash kept in a [`slot_order_code`] below the slot number.
pub const SLOT_ORDER_HASH_BITS: u32 = 50;
/// Mask of the hash bits of a [`slot_order_code`].
pub const SLOT_ORDER_HASH_MASK: u64 = (1 << SLOT_ORDER_HASH_BITS) - 1;
const _: () = assert!(SLOT_ORDER_HASH_BITS + 14 == 64);

/// Where `key` sorts in its slot's scan order: `[slot 14][low 50 bits of key_hash]`.
///
/// Scan order (the engine's per-slot scans, the replica core's pull pages and repair key
/// lists) is `(slot_order_code(key), key bytes)`: a total order that every node computes the
/// same way from the key alone, so a page cursor "after key K" means the same window on every
/// node and survives any change of the hash table (it is not a table position). The hash bits
/// are the *low* ones because they hold the home-bucket prefix (`layout::Layout::home` reads
/// the low 32): every key of one code homes in one bucket, so the keys behind a code are found
/// by probing a single neighbourhood.
pub fn slot_order_code(key: &[u8]) -> u64 {
    (u64::from(ringlet_types::key_slot(key)) << SLOT_ORDER_HASH_BITS)
        | (key_hash(key) & SLOT_ORDER_HASH_MASK)
}

/// Compare two keys in scan order (see [`slot_order_code`]).
pub fn scan_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    slot_order_code(a)
        .cmp(&slot_order_code(b))
        .then_with(|| a.cmp(b))
}

/// Digest term of one stored entry or tombstone: FNV-1a over (key, version, memgest, live),
/// finished with a splitmix64 mix so that XOR-combining many entries does not cancel
/// structured patterns. Not cryptographic: it only has to make accidental equality of
/// different slot contents unlikely (2^-64 per compare). The replica core's repair digests
/// (`ringlet_replica::entry_digest`) are this function, so the engine can keep the live part
/// of them ([`crate::Engine::enable_slot_index`]) and both sides agree bit for bit.
pub fn entry_digest(key: &[u8], version: ringlet_types::Version, memgest: u16, live: bool) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    };
    for b in key {
        eat(*b);
    }
    for b in version.0.to_be_bytes() {
        eat(b);
    }
    for b in memgest.to_be_bytes() {
        eat(b);
    }
    eat(u8::from(live));
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
