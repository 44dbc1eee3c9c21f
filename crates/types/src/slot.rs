//! Key → slot, exactly as Redis Cluster computes it (`CRC16-XMODEM(key) mod 16384`, hashing only
//! the first non-empty `{...}` hash tag when there is one), so cluster-aware Redis clients route
//! to the right node without knowing they talk to Ringlet.

/// Number of slots: Redis Cluster's 16384.
pub const SLOT_COUNT: u16 = 16384;

/// A slot number in `0..SLOT_COUNT`.
pub type Slot = u16;

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC16_TABLE: [u16; 256] = crc16_table();

/// CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as in Redis `crc16.c`.
pub fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc = (crc << 8) ^ CRC16_TABLE[usize::from(((crc >> 8) as u8) ^ b)];
    }
    crc
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
