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
