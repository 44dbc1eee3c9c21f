//! Zipmap: the blob of a type-9 hash (what Redis 2.4 and earlier wrote for a small hash;
//! a payload from an RDB file of that age can still carry one).
//!
//! ```text
//! <count: 1 byte, 254 = unknown> (<len> field <len> <free> value <free bytes>)* 0xFF
//!
//! len: 1 byte if < 254, else 0xFE + u32 LE (Redis wrote host order; every Redis of that
//!      age that we know of ran little-endian)
//! free: 1 byte, the count of unused bytes after the value
//! ```
//!
//! Cheap enough to read (a dozen lines), so it is read rather than refused. Checks follow
//! Redis's `zipmapValidateIntegrity` (deep): the last byte is the end marker, every length
//! and string lies inside the blob before it, the map is not empty, and the count (unless
//! 254) is the number of pairs. A value length byte of 255 (Redis would read it as a 5-byte
//! length) is refused: no Redis wrote one.

use crate::{Element, Error, Fields, Pairs};

const COUNT_UNKNOWN: u8 = 254;
const LEN_BIG: u8 = 0xFE;
const END: u8 = 0xFF;

/// Decode a zipmap into a hash.
pub(crate) fn decode(blob: &[u8]) -> Result<Fields, Error> {
    let bad = Error::Malformed;
    let (&count, rest) = blob
        .split_first()
        .ok_or(bad("zipmap shorter than its header"))?;
    let mut p = match rest.split_last() {
        Some((&END, entries)) => entries,
        _ => return Err(bad("zipmap without its end byte")),
    };
    let mut pairs = Pairs::new();
    let mut seen: u64 = 0;
    // Bounded: each turn consumes at least 3 bytes.
    while !p.is_empty() {
        let name = take(&mut p, 0)?;
        let value = take(&mut p, 1)?;
        pairs.push(Element::Bytes(name))?;
        pairs.push(Element::Bytes(value))?;
        seen = seen.saturating_add(1);
    }
    if count != COUNT_UNKNOWN && u64::from(count) != seen {
        return Err(bad("zipmap count differs from its entries"));
    }
    pairs.finish()
}

/// Take one string from the start of `p`: a length, then `free_bytes` (0 for a field name,
/// 1 for a value) giving the count of unused bytes after the string, then the string, then
/// the unused bytes.
fn take<'a>(p: &mut &'a [u8], free_bytes: usize) -> Result<&'a [u8], Error> {
    let past = Error::Malformed("zipmap entry past its end");
    let (len, at) = match p.first() {
        None => return Err(past),
        Some(&END) => return Err(Error::Malformed("zipmap end byte in place of a length")),
        Some(&LEN_BIG) => {
            let b = p.get(1..5).ok_or(past)?;
            let b: [u8; 4] = b.try_into().map_err(|_| past)?;
            (usize::try_from(u32::from_le_bytes(b)).map_err(|_| past)?, 5)
        }
        Some(&b) => (usize::from(b), 1),
    };
    let free = match free_bytes {
        0 => 0,
        _ => usize::from(*p.get(at).ok_or(past)?),
    };
    let start = at.checked_add(free_bytes).ok_or(past)?;
    let stop = start.checked_add(len).ok_or(past)?;
    let s = p.get(start..stop).ok_or(past)?;
    *p = p.get(stop.checked_add(free).ok_or(past)?..).ok_or(past)?;
    Ok(s)
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::unwrap_used
)]
pub(crate) mod tests {
    use super::*;

    fn len(out: &mut Vec<u8>, n: usize) {
        if n < 254 {
            out.push(n as u8);
        } else {
            out.push(LEN_BIG);
            out.extend((n as u32).to_le_bytes());
        }
    }

    /// A zipmap of `pairs`, each value followed by `free` unused bytes.
    pub(crate) fn encode(pairs: &[(&[u8], &[u8])], free: u8) -> Vec<u8> {
        let mut out = vec![pairs.len().min(254) as u8];
        for (k, v) in pairs {
            len(&mut out, k.len());
            out.extend(*k);
            len(&mut out, v.len());
            out.push(free);
            out.extend(*v);
            out.extend(std::iter::repeat_n(0xAA, usize::from(free)));
        }
        out.push(END);
        out
    }

    #[test]
    fn decodes_short_and_long_lengths_and_free_bytes() {
        let long = vec![b'L'; 300];
        let zm = encode(&[(b"foo", b"bar"), (b"hello", &long)], 2);
        assert_eq!(
            decode(&zm).unwrap(),
            vec![
                (b"foo".to_vec(), b"bar".to_vec()),
                (b"hello".to_vec(), long)
            ]
        );
        // The example of Redis's zipmap.c.
        let zm = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
        assert_eq!(decode(zm).unwrap().len(), 2);
    }

    #[test]
    fn malformed_zipmaps_are_refused() {
        let good = encode(&[(b"k", b"v")], 0);
        assert!(decode(&good).is_ok());
        let mut t = good.clone();
        t[0] = 2; // count
        assert!(decode(&t).is_err());
        let mut t = good.clone();
        t[1] = 9; // field length past the end
        assert!(decode(&t).is_err());
        let mut t = good.clone();
        t[4] = 5; // free count past the end
        assert!(decode(&t).is_err());
        let mut t = good.clone();
        t[3] = 0xFF; // value length 255
        assert!(decode(&t).is_err());
        assert!(decode(&[0, END]).is_err()); // empty
        assert!(decode(&encode(&[(b"k", b"v"), (b"k", b"w")], 0)) == Err(Error::DuplicateField));
        for cut in 0..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
    }
}
