//! Key → slot, exactly as Redis Cluster computes it (`CRC16-XMODEM(key) mod 16384`, hashing only
//! the first non-empty `{...}` hash tag when there is one), so cluster-aware Redis clients route
//! to the right node without knowing they talk to Ringlet.

/// Number of slots: Redis Cluster's 16384.
pub const SLOT_COUNT: u16 = 16384;

/// A slot number in `0..SLOT_COUNT`.
pub type Slot = u16;

/// CRC16-XMODEM with the `crc` crate's slice-by-16 tables (8 KiB): 16 bytes per step
/// instead of one. Why: a slot is computed for every request of a cluster node and every
/// SET of a single node (its per-slot accounting), and the byte-at-a-time table walk was
/// 3.8 % of a pipelined SET's server CPU (session 19 profile); for a 16-byte key the crate
/// takes ~5-8 ns against ~25-37 ns (microbenchmark in BENCHMARKS.md, issue 16 session 19).
static CRC16_XMODEM: crc::Crc<u16, crc::Table<16>> =
    crc::Crc::<u16, crc::Table<16>>::new(&crc::CRC_16_XMODEM);

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as in Redis `crc16.c`.
pub fn crc16(bytes: &[u8]) -> u16 {
    CRC16_XMODEM.checksum(bytes)
}

/// The part of `key` that is hashed: the content of the first `{...}` if it is non-empty,
/// else the whole key (Redis `keyHashSlot`).
pub fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&b| b == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&b| b == b'}') {
            if close > 0 {
                return &rest[..close];
            }
        }
    }
    key
}

/// The slot of `key`.
pub fn key_slot(key: &[u8]) -> Slot {
    crc16(hash_tag(key)) & (SLOT_COUNT - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis_reference_values() {
        // From the Redis Cluster specification: CRC16 of "123456789" is 0x31C3.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // `redis-cli CLUSTER KEYSLOT foo` = 12182, `bar` = 5061.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
    }

    /// The crate's tables against the bit-at-a-time definition, over every length up to 64
    /// (the slice-by-16 path and its byte-wise tail) and every byte value.
    #[test]
    fn crc16_matches_the_bitwise_definition() {
        fn bitwise(bytes: &[u8]) -> u16 {
            let mut crc: u16 = 0;
            for &b in bytes {
                crc ^= u16::from(b) << 8;
                for _ in 0..8 {
                    crc = if crc & 0x8000 != 0 {
                        (crc << 1) ^ 0x1021
                    } else {
                        crc << 1
                    };
                }
            }
            crc
        }
        let data: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for len in 0..=64 {
            for start in [0usize, 1, 7, 100, 300] {
                let s = &data[start..start + len];
                assert_eq!(crc16(s), bitwise(s), "len {len} at {start}");
            }
        }
    }

    #[test]
    fn hash_tags() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        // Slots as Redis computes them (`CLUSTER KEYSLOT`; redis-py's `redis.crc.key_slot`
        // gives the same): an empty tag hashes the whole key, the first `{...}` counts.
        assert_eq!(key_slot(b"foo{}{bar}"), 8363);
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(key_slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(key_slot(b"foo{bar}{zap}"), 5061);
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
    }
}
