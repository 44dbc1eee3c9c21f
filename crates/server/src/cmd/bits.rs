//! SETBIT, GETBIT, BITCOUNT, BITPOS (Redis `bitops.c`, 7.0): pure functions over a value,
//! and the handlers of both fronts over [`Keyspace`] (cmd/keyspace_api.rs). Errors are
//! Redis's texts.

use ringlet_types::limits;

pub const OFFSET_ERR: &str = "ERR bit offset is not an integer or out of range";
pub const BIT_ERR: &str = "ERR bit is not an integer or out of range";
pub const BITPOS_BIT_ERR: &str = "ERR The bit argument must be 1 or 0.";
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub const SYNTAX: &str = "ERR syntax error";

fn int(a: &[u8]) -> Option<i64> {
    super::parse_i64(a)
}

/// A bit offset: non-negative and inside the largest value (Redis: `proto-max-bulk-len`, here
/// `limits::VALUE_BYTES_MAX`, so offsets past 64 MiB × 8 are refused with Redis's text).
pub fn parse_offset(a: &[u8]) -> Result<u64, &'static str> {
    match int(a) {
        Some(o) if o >= 0 && ((o as u64) >> 3) < u64::from(limits::VALUE_BYTES_MAX) => Ok(o as u64),
        _ => Err(OFFSET_ERR),
    }
}

/// The bit value argument of SETBIT.
pub fn parse_bit(a: &[u8]) -> Result<bool, &'static str> {
    match a {
        b"0" => Ok(false),
        b"1" => Ok(true),
        _ => Err(BIT_ERR),
    }
}

/// Set bit `offset` (bit 0 is the most significant of byte 0), growing the value with zero
/// bytes; returns the bit's old value.
pub fn setbit(v: &mut Vec<u8>, offset: u64, on: bool) -> i64 {
    let byte = (offset >> 3) as usize;
    let mask = 1u8 << (7 - (offset & 7) as u8);
    if v.len() <= byte {
        v.resize(byte + 1, 0);
    }
    let old = v[byte] & mask != 0;
    if on {
        v[byte] |= mask;
    } else {
        v[byte] &= !mask;
    }
    i64::from(old)
}

pub fn getbit(v: &[u8], offset: u64) -> i64 {
    let byte = (offset >> 3) as usize;
    v.get(byte)
        .map_or(0, |b| i64::from(b & (1u8 << (7 - (offset & 7) as u8)) != 0))
}

/// Resolve a [start, end] range in BYTE or BIT units as Redis does: negative indexes count
/// from the end, then clamp. Returns byte (start, end) and the masks of bits outside the
/// range in the first and last byte.
fn range(len: i64, mut start: i64, mut end: i64, bit: bool) -> (i64, i64, u8, u8) {
    let totlen = if bit { len << 3 } else { len };
    if start < 0 {
        start += totlen;
    }
    if end < 0 {
        end += totlen;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= totlen {
        end = totlen - 1;
    }
    let (mut first, mut last) = (0u8, 0u8);
    if bit && start <= end {
        first = !((1u16 << (8 - (start & 7))) - 1) as u8;
        last = ((1u16 << (7 - (end & 7))) - 1) as u8;
        start >>= 3;
        end >>= 3;
    }
    (start, end, first, last)
}

fn unit(a: &[u8]) -> Result<bool, &'static str> {
    if a.eq_ignore_ascii_case(b"bit") {
        Ok(true)
    } else if a.eq_ignore_ascii_case(b"byte") {
        Ok(false)
    } else {
        Err(SYNTAX)
    }
}

/// BITCOUNT key [start end [BYTE|BIT]] over `v` (None: the key does not exist, which Redis
/// answers 0 before looking at the other arguments).
pub fn bitcount(v: Option<&[u8]>, argv: &[&[u8]]) -> Result<i64, &'static str> {
    let Some(p) = v else {
        return Ok(0);
    };
    let len = p.len() as i64;
    let (start, end, first, last) = match argv.len() {
        2 => (0, len - 1, 0, 0),
        4 | 5 => {
            let s = int(argv[2]).ok_or(NOT_INTEGER)?;
            let e = int(argv[3]).ok_or(NOT_INTEGER)?;
            let bit = if argv.len() == 5 {
                unit(argv[4])?
            } else {
                false
            };
            if s < 0 && e < 0 && s > e {
                return Ok(0);
            }
            range(len, s, e, bit)
        }
        _ => return Err(SYNTAX),
    };
    if start > end {
        return Ok(0);
    }
    let bytes = &p[start as usize..=end as usize];
    let mut count: i64 = bytes.iter().map(|b| i64::from(b.count_ones())).sum();
    if first != 0 {
        count -= i64::from((bytes[0] & first).count_ones());
    }
    if last != 0 {
        count -= i64::from((bytes[bytes.len() - 1] & last).count_ones());
    }
    Ok(count)
}

/// `redisBitpos`: the first bit equal to `bit` in `p`; for 0 not found, the bit after the end
/// (the string is treated as padded with zeros); for 1 not found, -1.
fn first_bit(p: &[u8], bit: bool) -> i64 {
    for (i, &b) in p.iter().enumerate() {
        let b = if bit { b } else { !b };
        if b != 0 {
            return (i as i64) * 8 + i64::from(b.leading_zeros());
        }
    }
    if bit {
        -1
    } else {
        (p.len() as i64) * 8
    }
}

/// BITPOS key bit [start [end [BYTE|BIT]]] over `v` (None: the key does not exist).
pub fn bitpos(v: Option<&[u8]>, argv: &[&[u8]]) -> Result<i64, &'static str> {
    let bit = match int(argv[2]) {
        Some(0) => false,
        Some(1) => true,
        Some(_) => return Err(BITPOS_BIT_ERR),
        None => return Err(NOT_INTEGER),
    };
    let Some(p) = v else {
        // An infinite run of zero bits.
        return Ok(if bit { -1 } else { 0 });
    };
    let len = p.len() as i64;
    let mut end_given = false;
    let (mut start, end, first, last) = match argv.len() {
        3 => (0, len - 1, 0, 0),
        4..=6 => {
            let s = int(argv[3]).ok_or(NOT_INTEGER)?;
            let isbit = if argv.len() == 6 {
                unit(argv[5])?
            } else {
                false
            };
            let e = if argv.len() >= 5 {
                end_given = true;
                int(argv[4]).ok_or(NOT_INTEGER)?
            } else if isbit {
                (len << 3) + 7
            } else {
                len - 1
            };
            range(len, s, e, isbit)
        }
        _ => return Err(SYNTAX),
    };
    if start > end {
        return Ok(-1);
    }
    let mut bytes = end - start + 1;
    let pos;
    'result: {
        if first != 0 {
            let mut c = if bit {
                p[start as usize] & !first
            } else {
                p[start as usize] | first
            };
            if last != 0 && bytes == 1 {
                c = if bit { c & !last } else { c | last };
            }
            let at = first_bit(&[c], bit);
            if bytes == 1 || (at != -1 && at != 8) {
                pos = at;
                break 'result;
            }
            start += 1;
            bytes -= 1;
        }
        let cur = bytes - i64::from(last != 0);
        if cur > 0 {
            let at = first_bit(&p[start as usize..(start + cur) as usize], bit);
            if bytes == cur || (at != -1 && at != cur << 3) {
                pos = at;
                break 'result;
            }
            start += cur;
            bytes -= cur;
        }
        let c = if bit {
            p[end as usize] & !last
        } else {
            p[end as usize] | last
        };
        pos = first_bit(&[c], bit);
    }
    // With an explicit end, clear bits past the range are not there: none found is -1.
    if end_given && !bit && pos == bytes << 3 {
        return Ok(-1);
    }
    Ok(if pos != -1 { pos + (start << 3) } else { pos })
}

// ---------------------------------------------------------------- handlers (both fronts)

use super::keyspace_api::{Change, Keyspace, Put, Ttl, Value};
use super::string::KsResult;
use crate::reply::Reply;

/// The string value of `key` (`None`: missing); a record is WRONGTYPE.
async fn value_of<K: Keyspace>(ks: &K, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    Ok(Value::string(ks.read(key).await?)?.map(|v| v.bytes))
}

pub async fn setbit_cmd<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let offset = parse_offset(argv[2]).map_err(Reply::err)?;
    let on = parse_bit(argv[3]).map_err(Reply::err)?;
    ks.update(argv[1], |cur| {
        let mut v = Value::string(cur)?.map(|v| v.bytes).unwrap_or_default();
        let old = setbit(&mut v, offset, on);
        // Redis keeps the key's TTL across SETBIT.
        Ok((Change::Put(Put::string(v, Ttl::Keep)), Reply::Int(old)))
    })
    .await
}

pub async fn getbit_cmd<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let offset = parse_offset(argv[2]).map_err(Reply::err)?;
    let v = value_of(ks, argv[1]).await?;
    Ok(Reply::Int(v.map_or(0, |v| getbit(&v, offset))))
}

pub async fn bitcount_cmd<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let v = value_of(ks, argv[1]).await?;
    bitcount(v.as_deref(), argv)
        .map(Reply::Int)
        .map_err(Reply::err)
}

pub async fn bitpos_cmd<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let v = value_of(ks, argv[1]).await?;
    bitpos(v.as_deref(), argv)
        .map(Reply::Int)
        .map_err(Reply::err)
}
