//! Ziplist: the blob of a type-13 hash (what Redis 2.6 to 6.2 DUMPed for a small hash).
//!
//! ```text
//! +-------------+-------------+--------------+---------+-----+------+
//! | total bytes | tail offset | entry count  | entry 0 | ... | 0xFF |
//! | u32 LE      | u32 LE      | u16 LE       |         |     |      |
//! +-------------+-------------+--------------+---------+-----+------+
//!               (offset of the  (65535: unknown)
//!                last entry)
//!
//! entry: <previous entry's size: 1 byte if < 254, else 0xFE + u32 LE> <encoding> <data>
//! ```
//!
//! | encoding | element |
//! |---|---|
//! | `00LLLLLL` | string of L < 64 bytes |
//! | `01LLLLLL` + 1 byte | string of a 14-bit length (big-endian) |
//! | `10xxxxxx` + u32 BE | string of a 32-bit length (the low 6 bits are ignored) |
//! | `0xC0` / `0xD0` / `0xE0` | i16 / i32 / i64, little-endian |
//! | `0xF0` | i24, little-endian |
//! | `0xFE` | i8 |
//! | `0xF1`..=`0xFD` | the integer 0..=12 itself (encoding − 0xF1) |
//!
//! Checks follow Redis's `ziplistValidateIntegrity`: the total equals the blob's size, the
//! last byte is the end marker, each entry lies inside the blob before it, each entry's
//! previous-size field equals the size of the entry before it (0 for the first), the tail
//! offset points at the last entry, and the count (unless 65535) is the number of entries.

use crate::{Element, Error, Fields, Pairs};

const HEADER_BYTES: usize = 10;
const COUNT_UNKNOWN: u16 = u16::MAX;
const END: u8 = 0xFF;
const PREVLEN_BIG: u8 = 0xFE;

/// Decode a ziplist holding field, value, field, value, ... into a hash.
pub(crate) fn decode_hash(blob: &[u8]) -> Result<Fields, Error> {
    let bad = Error::Malformed;
    let header = blob
        .first_chunk::<HEADER_BYTES>()
        .ok_or(bad("ziplist shorter than its header"))?;
    let [b0, b1, b2, b3, t0, t1, t2, t3, c0, c1] = *header;
    if u32::from_le_bytes([b0, b1, b2, b3]) as usize != blob.len() {
        return Err(bad("ziplist total bytes differ from its size"));
    }
    let tail = u32::from_le_bytes([t0, t1, t2, t3]) as usize;
    let count = u16::from_le_bytes([c0, c1]);
    let end = blob
        .len()
        .checked_sub(1)
        .ok_or(bad("ziplist without its end byte"))?;
    if blob.get(end) != Some(&END) || end < HEADER_BYTES {
        return Err(bad("ziplist without its end byte"));
    }
    if tail > end {
        return Err(bad("ziplist tail offset past its end"));
    }

    let mut pairs = Pairs::new();
    let mut seen: u64 = 0;
    let mut at = HEADER_BYTES;
    let mut last_start = None;
    let mut prev_size = 0usize;
    // Bounded: each turn moves `at` forward by at least 2 bytes.
    loop {
        let p = blob.get(at..end).ok_or(bad("ziplist entry past its end"))?;
        // The end byte stops the walk (no entry starts with 0xFF: a previous size of 255
        // would be written as 0xFE + u32).
        if p.is_empty() {
            break;
        }
        let (prev, element, size) = entry(p)?;
        if prev != prev_size {
            return Err(bad("ziplist previous-entry size does not match"));
        }
        pairs.push(element)?;
        seen = seen.saturating_add(1);
        last_start = Some(at);
        prev_size = size;
        at = at
            .checked_add(size)
            .ok_or(bad("ziplist entry past its end"))?;
    }
    if let Some(last) = last_start {
        if last != tail {
            return Err(bad("ziplist tail offset is not its last entry"));
        }
    }
    if count != COUNT_UNKNOWN && u64::from(count) != seen {
        return Err(bad("ziplist entry count differs from its entries"));
    }
    pairs.finish()
}

/// The entry at the start of `p` (which ends before the ziplist's end byte): its previous
/// size field, its element, and its whole size, all of which lie in `p`.
fn entry(p: &[u8]) -> Result<(usize, Element<'_>, usize), Error> {
    let past = Error::Malformed("ziplist entry past its end");
    let (&first, rest) = p.split_first().ok_or(past)?;
    let (prev, prev_bytes) = match first {
        END => return Err(Error::Malformed("ziplist end byte inside its entries")),
        PREVLEN_BIG => {
            let n = rest.first_chunk::<4>().ok_or(past)?;
            (
                usize::try_from(u32::from_le_bytes(*n)).map_err(|_| past)?,
                5,
            )
        }
        n => (usize::from(n), 1),
    };
    let e = p.get(prev_bytes..).ok_or(past)?;
    let (&enc, data) = e.split_first().ok_or(past)?;
    // (element, bytes of encoding and data)
    let (element, body) = match enc {
        0x00..=0x3F => string(e, 1, usize::from(enc & 0x3F))?,
        0x40..=0x7F => {
            let &low = data.first().ok_or(past)?;
            string(e, 2, usize::from(enc & 0x3F) << 8 | usize::from(low))?
        }
        0x80..=0xBF => {
            let len = data.first_chunk::<4>().ok_or(past)?;
            string(
                e,
                5,
                usize::try_from(u32::from_be_bytes(*len)).map_err(|_| past)?,
            )?
        }
        0xC0 => int::<2>(data)?,
        0xD0 => int::<4>(data)?,
        0xE0 => int::<8>(data)?,
        0xF0 => int::<3>(data)?,
        0xFE => int::<1>(data)?,
        0xF1..=0xFD => (Element::Int(i64::from(enc & 0x0F).saturating_sub(1)), 1),
        _ => return Err(Error::Malformed("unknown ziplist encoding")),
    };
    let size = body.checked_add(prev_bytes).ok_or(past)?;
    Ok((prev, element, size))
}

/// A string of `len` bytes after a `header` of encoding bytes.
fn string(e: &[u8], header: usize, len: usize) -> Result<(Element<'_>, usize), Error> {
    let size = header
        .checked_add(len)
        .ok_or(Error::Malformed("ziplist entry too long"))?;
    let data = e
        .get(header..size)
        .ok_or(Error::Malformed("ziplist entry past its end"))?;
    Ok((Element::Bytes(data), size))
}

/// An integer of `N` little-endian bytes, sign-extended.
fn int<const N: usize>(data: &[u8]) -> Result<(Element<'static>, usize), Error> {
    let b = data
        .first_chunk::<N>()
        .ok_or(Error::Malformed("ziplist entry past its end"))?;
    let mut le = [0u8; 8];
    le.get_mut(..N)
        .ok_or(Error::Malformed("ziplist integer too wide"))?
        .copy_from_slice(b);
    let unused = 64u32.saturating_sub(8u32.saturating_mul(N as u32));
    let v = i64::from_le_bytes(le)
        .wrapping_shl(unused)
        .wrapping_shr(unused);
    Ok((Element::Int(v), N.saturating_add(1)))
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::unwrap_used
)]
pub(crate) mod tests {
    //! Ziplists are built by hand here (an encoder for tests only), then decoded.

    use super::*;

    /// One test element: a string, or an integer with its encoding byte.
    pub(crate) enum Zl<'a> {
        S(&'a [u8]),
        I(i64, u8),
    }

    fn encode_body(e: &Zl<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        match *e {
            Zl::S(s) if s.len() < 64 => out.push(s.len() as u8),
            Zl::S(s) if s.len() < 16384 => out.extend([0x40 | (s.len() >> 8) as u8, s.len() as u8]),
            Zl::S(s) => {
                out.push(0x80);
                out.extend((s.len() as u32).to_be_bytes());
            }
            Zl::I(v, enc @ 0xF1..=0xFD) => {
                assert_eq!(i64::from(enc - 0xF1), v);
                out.push(enc);
            }
            Zl::I(v, enc) => {
                let n = match enc {
                    0xFE => 1,
                    0xC0 => 2,
                    0xF0 => 3,
                    0xD0 => 4,
                    _ => 8,
                };
                out.push(enc);
                out.extend(&v.to_le_bytes()[..n]);
            }
        }
        if let Zl::S(s) = e {
            out.extend(*s);
        }
        out
    }

    pub(crate) fn encode(elements: &[Zl<'_>], count: Option<u16>) -> Vec<u8> {
        let mut body = Vec::new();
        let mut prev = 0usize;
        let mut tail = HEADER_BYTES;
        for e in elements {
            tail = HEADER_BYTES + body.len();
            let start = body.len();
            if prev < 254 {
                body.push(prev as u8);
            } else {
                body.push(PREVLEN_BIG);
                body.extend((prev as u32).to_le_bytes());
            }
            body.extend(encode_body(e));
            prev = body.len() - start;
        }
        let total = (HEADER_BYTES + body.len() + 1) as u32;
        let mut out = total.to_le_bytes().to_vec();
        out.extend((tail as u32).to_le_bytes());
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
        let mid = vec![b'm'; 300];
        let big = vec![b'z'; 20_000];
        let zl = encode(
            &[
                Zl::S(b"a"),
                Zl::I(0, 0xF1),
                Zl::S(b"b"),
                Zl::I(12, 0xFD),
                Zl::S(b"c"),
                Zl::I(-128, 0xFE),
                Zl::S(b"d"),
                Zl::I(-32768, 0xC0),
                Zl::S(b"e"),
                Zl::I(-8_388_608, 0xF0),
                Zl::S(b"f"),
                Zl::I(i64::from(i32::MAX), 0xD0),
                Zl::S(b"g"),
                Zl::I(i64::MAX, 0xE0),
                Zl::S(&mid),
                Zl::S(&big),
                Zl::I(7, 0xF8),
                Zl::S(b""),
            ],
            None,
        );
        let want = pairs(&[
            (b"a", b"0"),
            (b"b", b"12"),
            (b"c", b"-128"),
            (b"d", b"-32768"),
            (b"e", b"-8388608"),
            (b"f", b"2147483647"),
            (b"g", b"9223372036854775807"),
            (&mid, &big),
            (b"7", b""),
        ]);
        assert_eq!(decode_hash(&zl).unwrap(), want);
        let zl = encode(&[Zl::S(b"k"), Zl::S(b"v")], Some(COUNT_UNKNOWN));
        assert_eq!(decode_hash(&zl).unwrap(), pairs(&[(b"k", b"v")]));
    }

    #[test]
    fn header_and_entries_are_checked() {
        let good = encode(&[Zl::S(b"k"), Zl::S(b"v")], None);
        assert!(decode_hash(&good).is_ok());
        assert!(decode_hash(&encode(&[Zl::S(b"k"), Zl::S(b"v")], Some(3))).is_err());
        // Wrong total, tail offset, previous size, end byte, encoding.
        for (at, byte) in [
            (0, 0x30),
            (4, 0x0B),
            (HEADER_BYTES + 3, 0x05),
            (good.len() - 1, 0),
        ] {
            let mut t = good.clone();
            t[at] = byte;
            assert!(decode_hash(&t).is_err(), "byte {at} = {byte:#x}");
        }
        let mut t = good.clone();
        t[HEADER_BYTES + 1] = 0xC5; // not an encoding
        assert!(decode_hash(&t).is_err());
        assert_eq!(
            decode_hash(&encode(&[Zl::S(b"k")], None)),
            Err(Error::Malformed("a field without a value"))
        );
        assert_eq!(
            decode_hash(&encode(&[], None)),
            Err(Error::Malformed("a hash has no fields"))
        );
        let full = encode(&[Zl::S(b"key"), Zl::I(1000, 0xC0)], None);
        for cut in 0..full.len() {
            let mut t = full[..cut].to_vec();
            if t.len() >= 4 {
                t[..4].copy_from_slice(&(cut as u32).to_le_bytes());
            }
            assert!(decode_hash(&t).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn big_previous_sizes_decode() {
        // An entry of 300 bytes makes the next one use the 5-byte previous size.
        let mid = vec![b'q'; 300];
        let zl = encode(
            &[Zl::S(&mid), Zl::S(b"v"), Zl::S(b"k2"), Zl::I(3, 0xF4)],
            None,
        );
        assert_eq!(
            decode_hash(&zl).unwrap(),
            pairs(&[(&mid, b"v"), (b"k2", b"3")])
        );
    }

    #[test]
    fn duplicate_fields_are_refused() {
        let zl = encode(
            &[Zl::S(b"5"), Zl::S(b"a"), Zl::I(5, 0xF6), Zl::S(b"b")],
            None,
        );
        assert_eq!(decode_hash(&zl), Err(Error::DuplicateField));
    }
}
