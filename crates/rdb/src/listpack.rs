//! Listpack: the blob of a type-16 hash (what Redis 7.x DUMPs for a small hash).
//!
//! ```text
//! +-------------+----------------+---------+---------+-----+------+
//! | total bytes | element count  | entry 0 | entry 1 | ... | 0xFF |
//! | u32 LE      | u16 LE         |         |         |     |      |
//! +-------------+----------------+---------+---------+-----+------+
//!                 (65535: unknown)
//!
//! entry: <encoding + data> <back-length: size of encoding + data, 1-5 bytes>
//! ```
//!
//! | first byte | element |
//! |---|---|
//! | `0xxxxxxx` | integer 0..=127 |
//! | `10LLLLLL` | string of L < 64 bytes |
//! | `110xxxxx` + 1 byte | 13-bit signed integer (big-endian, two's complement) |
//! | `1110LLLL` + 1 byte | string of a 12-bit length (big-endian) |
//! | `0xF0` + u32 LE | string of a 32-bit length |
//! | `0xF1` / `0xF2` / `0xF3` / `0xF4` | i16 / i24 / i32 / i64, little-endian |
//! | `0xFF` | end of the listpack |
//!
//! The back-length lets Redis walk backwards: 7 bits per byte, stored so that reading from
//! the entry's last byte towards its start gives the low bits first, a set top bit meaning
//! "one more byte". It is checked here (as Redis's deep sanitization does) even though
//! decoding forwards does not need it: a listpack whose back-lengths are wrong is corrupt,
//! and the same corruption elsewhere could have changed a value.
//!
//! Every check follows Redis's `lpValidateIntegrity`: the total equals the blob's size, the
//! last byte is the end marker, each entry lies inside the blob before the end marker, the
//! entries end exactly at the end marker, and the count (unless 65535) is the number of
//! entries.

use crate::{Element, Error, Fields, Pairs};

const HEADER_BYTES: usize = 6;
const COUNT_UNKNOWN: u16 = u16::MAX;
const END: u8 = 0xFF;

/// Decode a listpack holding field, value, field, value, ... into a hash.
pub(crate) fn decode_hash(blob: &[u8]) -> Result<Fields, Error> {
    let bad = Error::Malformed;
    let (header, rest) = blob
        .split_first_chunk::<HEADER_BYTES>()
        .ok_or(bad("listpack shorter than its header"))?;
    let [b0, b1, b2, b3, c0, c1] = *header;
    if u32::from_le_bytes([b0, b1, b2, b3]) as usize != blob.len() {
        return Err(bad("listpack total bytes differ from its size"));
    }
    let count = u16::from_le_bytes([c0, c1]);
    // Entries are `rest` without the end byte, which must be there.
    let entries = match rest.split_last() {
        Some((&END, entries)) => entries,
        _ => return Err(bad("listpack without its end byte")),
    };

    let mut pairs = Pairs::new();
    let mut seen: u64 = 0;
    let mut p = entries;
    // Bounded: each turn consumes at least 2 bytes of the blob.
    while !p.is_empty() {
        let (element, size) = entry(p)?;
        let backlen_size = backlen_size(size);
        let total = size
            .checked_add(backlen_size)
            .ok_or(bad("listpack entry too long"))?;
        let (whole, next) = p
            .split_at_checked(total)
            .ok_or(bad("listpack entry past its end"))?;
        let backlen = whole
            .get(size..)
            .ok_or(bad("listpack entry past its end"))?;
        if decode_backlen(backlen) != Some(size as u64) {
            return Err(bad("listpack back-length does not match its entry"));
        }
        pairs.push(element)?;
        seen = seen.saturating_add(1);
        p = next;
    }
    if count != COUNT_UNKNOWN && u64::from(count) != seen {
        return Err(bad("listpack element count differs from its entries"));
    }
    pairs.finish()
}

/// The element at the start of `p` and the bytes of its encoding and data (without the
/// back-length), all of which are in `p`.
fn entry(p: &[u8]) -> Result<(Element<'_>, usize), Error> {
    let bad = Error::Malformed;
    let past = bad("listpack entry past its end");
    let (&first, rest) = p.split_first().ok_or(past)?;
    // An integer of `N` little-endian bytes after the first, sign-extended.
    fn int<const N: usize>(rest: &[u8]) -> Result<(Element<'_>, usize), Error> {
        let b = rest
            .first_chunk::<N>()
            .ok_or(Error::Malformed("listpack entry past its end"))?;
        let mut le = [0u8; 8];
        le.get_mut(..N)
            .ok_or(Error::Malformed("listpack integer too wide"))?
            .copy_from_slice(b);
        let unused = 64u32.saturating_sub(8u32.saturating_mul(N as u32));
        let v = i64::from_le_bytes(le)
            .wrapping_shl(unused)
            .wrapping_shr(unused);
        Ok((Element::Int(v), N.saturating_add(1)))
    }
    // A string of `len` bytes after a header of `header` bytes (the first byte included).
    fn string(p: &[u8], header: usize, len: usize) -> Result<(Element<'_>, usize), Error> {
        let size = header
            .checked_add(len)
            .ok_or(Error::Malformed("listpack entry too long"))?;
        let data = p
            .get(header..size)
            .ok_or(Error::Malformed("listpack entry past its end"))?;
        Ok((Element::Bytes(data), size))
    }
    match first {
        0x00..=0x7F => Ok((Element::Int(i64::from(first)), 1)),
        0x80..=0xBF => string(p, 1, usize::from(first & 0x3F)),
        0xC0..=0xDF => {
            let &low = rest.first().ok_or(past)?;
            // 13 bits, two's complement: shift into the top of an i16 and back.
            let v = (i16::from(first & 0x1F) << 8 | i16::from(low)).wrapping_shl(3) >> 3;
            Ok((Element::Int(i64::from(v)), 2))
        }
        0xE0..=0xEF => {
            let &low = rest.first().ok_or(past)?;
            string(p, 2, usize::from(first & 0x0F) << 8 | usize::from(low))
        }
        0xF0 => {
            let len = rest.first_chunk::<4>().ok_or(past)?;
            let len = usize::try_from(u32::from_le_bytes(*len)).map_err(|_| past)?;
            string(p, 5, len)
        }
        0xF1 => int::<2>(rest),
        0xF2 => int::<3>(rest),
        0xF3 => int::<4>(rest),
        0xF4 => int::<8>(rest),
        _ => Err(bad("unknown listpack encoding")),
    }
}

/// Bytes of the back-length of an entry of `size` bytes (`lpEncodeBacklen`'s thresholds).
fn backlen_size(size: usize) -> usize {
    match size {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// Read a back-length from its last byte backwards; `None` if it does not end within
/// `bytes` (`lpDecodeBacklen`).
fn decode_backlen(bytes: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for (i, &b) in bytes.iter().rev().enumerate() {
        let shift = u32::try_from(i).ok()?.checked_mul(7)?;
        v |= u64::from(b & 0x7F).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::unwrap_used
)]
pub(crate) mod tests {
    //! Listpacks are built by hand here (an encoder for tests only), then decoded.

    use super::*;

    /// One test element: a string, or an integer in a chosen encoding.
    pub(crate) enum Lp<'a> {
        S(&'a [u8]),
        /// An integer in the given encoding's first byte (0 = 7-bit, 0xC0 = 13-bit, 0xF1..0xF4).
        I(i64, u8),
    }

    pub(crate) fn encode_entry(e: &Lp<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        match *e {
            Lp::S(s) if s.len() < 64 => out.push(0x80 | s.len() as u8),
            Lp::S(s) if s.len() < 4096 => out.extend([0xE0 | (s.len() >> 8) as u8, s.len() as u8]),
            Lp::S(s) => {
                out.push(0xF0);
                out.extend((s.len() as u32).to_le_bytes());
            }
            Lp::I(v, 0) => out.push(v as u8 & 0x7F),
            Lp::I(v, 0xC0) => out.extend([0xC0 | ((v >> 8) as u8 & 0x1F), v as u8]),
            Lp::I(v, enc) => {
                let n = match enc {
                    0xF1 => 2,
                    0xF2 => 3,
                    0xF3 => 4,
                    _ => 8,
                };
                out.push(enc);
                out.extend(&v.to_le_bytes()[..n]);
            }
        }
        if let Lp::S(s) = e {
            out.extend(*s);
        }
        let size = out.len() as u64;
        // The back-length, high bits first, every byte but the first flagged.
        let n = backlen_size(out.len());
        for i in (0..n).rev() {
            let bits = ((size >> (7 * i)) & 0x7F) as u8;
            out.push(if i == n - 1 { bits } else { bits | 0x80 });
        }
        out
    }

    pub(crate) fn encode(elements: &[Lp<'_>], count: Option<u16>) -> Vec<u8> {
        let body: Vec<u8> = elements.iter().flat_map(encode_entry).collect();
        let total = (HEADER_BYTES + body.len() + 1) as u32;
        let mut out = total.to_le_bytes().to_vec();
        out.extend(count.unwrap_or(elements.len() as u16).to_le_bytes());
        out.extend(body);
        out.push(END);
        out
    }

    fn pairs(h: &[(&[u8], &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
        h.iter().map(|(a, b)| (a.to_vec(), b.to_vec())).collect()
    }

    #[test]
    fn every_encoding_decodes() {
        let big = vec![b'z'; 5000];
        let mid = vec![b'm'; 300];
        let lp = encode(
            &[
                Lp::S(b"a"),
                Lp::I(0, 0),
                Lp::S(b"b"),
                Lp::I(127, 0),
                Lp::S(b"c"),
                Lp::I(-4096, 0xC0),
                Lp::S(b"d"),
                Lp::I(4095, 0xC0),
                Lp::S(b"e"),
                Lp::I(-32768, 0xF1),
                Lp::S(b"f"),
                Lp::I(-8_388_608, 0xF2),
                Lp::S(b"g"),
                Lp::I(i64::from(i32::MIN), 0xF3),
                Lp::S(b"h"),
                Lp::I(i64::MIN, 0xF4),
                Lp::I(12, 0),
                Lp::S(&mid),
                Lp::S(&big),
                Lp::S(b""),
            ],
            None,
        );
        let want = pairs(&[
            (b"a", b"0"),
            (b"b", b"127"),
            (b"c", b"-4096"),
            (b"d", b"4095"),
            (b"e", b"-32768"),
            (b"f", b"-8388608"),
            (b"g", b"-2147483648"),
            (b"h", b"-9223372036854775808"),
            (b"12", &mid),
            (&big, b""),
        ]);
        assert_eq!(decode_hash(&lp).unwrap(), want);
        // The unknown count (65535) is accepted too.
        let lp = encode(&[Lp::S(b"k"), Lp::S(b"v")], Some(COUNT_UNKNOWN));
        assert_eq!(decode_hash(&lp).unwrap(), pairs(&[(b"k", b"v")]));
    }

    #[test]
    fn header_and_entries_are_checked() {
        let good = encode(&[Lp::S(b"k"), Lp::S(b"v")], None);
        assert!(decode_hash(&good).is_ok());
        // Wrong count, wrong total, missing end byte, odd element count, empty.
        assert!(decode_hash(&encode(&[Lp::S(b"k"), Lp::S(b"v")], Some(4))).is_err());
        let mut t = good.clone();
        t[0] += 1;
        assert!(decode_hash(&t).is_err());
        let mut t = good.clone();
        *t.last_mut().unwrap() = 0xFE;
        assert!(decode_hash(&t).is_err());
        assert_eq!(
            decode_hash(&encode(&[Lp::S(b"k")], None)),
            Err(Error::Malformed("a field without a value"))
        );
        assert_eq!(
            decode_hash(&encode(&[], None)),
            Err(Error::Malformed("a hash has no fields"))
        );
        // A wrong back-length.
        let mut t = good.clone();
        t[HEADER_BYTES + 2] = 3;
        assert!(decode_hash(&t).is_err());
        // An unknown encoding byte.
        let mut t = good.clone();
        t[HEADER_BYTES] = 0xF5;
        assert!(decode_hash(&t).is_err());
        // A string length running past the end byte.
        let mut t = good;
        t[HEADER_BYTES] = 0x80 | 9;
        assert!(decode_hash(&t).is_err());
        // Every truncation, with the total patched to match, is refused.
        let full = encode(&[Lp::S(b"key"), Lp::I(1000, 0xC0)], None);
        for cut in 0..full.len() {
            let mut t = full[..cut].to_vec();
            if t.len() >= 4 {
                t[..4].copy_from_slice(&(cut as u32).to_le_bytes());
            }
            assert!(decode_hash(&t).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn duplicate_fields_are_refused() {
        let lp = encode(&[Lp::S(b"1"), Lp::S(b"a"), Lp::I(1, 0), Lp::S(b"b")], None);
        assert_eq!(decode_hash(&lp), Err(Error::DuplicateField));
    }

    #[test]
    fn backlen_sizes_match_redis_thresholds() {
        for (size, n) in [
            (127, 1),
            (128, 2),
            (16382, 2),
            (16383, 3),
            (2097150, 3),
            (2097151, 4),
        ] {
            assert_eq!(backlen_size(size), n, "{size}");
        }
        assert_eq!(decode_backlen(&[0x01, 0x80 | 0x05]), Some(0x85));
        assert_eq!(decode_backlen(&[0x80]), None);
    }
}
