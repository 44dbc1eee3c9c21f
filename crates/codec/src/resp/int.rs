//! Integer parsing with Redis's exact acceptance rules (`util.c: string2ll`).
//!
//! Redis is stricter than `str::parse`: no `+` sign, no leading zeros (`01`), no `-0`, no
//! spaces, at most 20 characters. Matching it exactly means a request that Redis rejects with
//! "invalid bulk length" is rejected here with the same text.

/// Parse `s` as Redis's `string2ll` does. `None` when Redis would fail.
pub fn string2ll(s: &[u8]) -> Option<i64> {
    // LONG_STR_SIZE is 21 in Redis: longer strings cannot be a 64-bit integer.
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let (first, rest) = digits.split_first()?;
    if !(b'1'..=b'9').contains(first) {
        return None;
    }
    let mut v: u64 = u64::from(first.wrapping_sub(b'0'));
    for &c in rest {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v
            .checked_mul(10)?
            .checked_add(u64::from(c.wrapping_sub(b'0')))?;
    }
    if negative {
        // |i64::MIN| = i64::MAX + 1.
        let min_abs = (i64::MAX as u64).checked_add(1)?;
        if v > min_abs {
            return None;
        }
        if v == min_abs {
            return Some(i64::MIN);
        }
        i64::try_from(v).ok().and_then(i64::checked_neg)
    } else {
        i64::try_from(v).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::string2ll;

    #[test]
    fn accepts_what_redis_accepts() {
        assert_eq!(string2ll(b"0"), Some(0));
        assert_eq!(string2ll(b"42"), Some(42));
        assert_eq!(string2ll(b"-1"), Some(-1));
        assert_eq!(string2ll(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(string2ll(b"-9223372036854775808"), Some(i64::MIN));
    }

    #[test]
    fn rejects_what_redis_rejects() {
        for bad in [
            &b""[..],
            b"-",
            b"+4",
            b"01",
            b"-0",
            b" 4",
            b"4 ",
            b"4x",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"123456789012345678901",
        ] {
            assert_eq!(string2ll(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
