//! Redis string helpers: integer and float parsing/formatting and GETRANGE index arithmetic.
//! Pure functions, so they are tested without an engine.

/// Parse a value as Redis does for INCR (`string2ll`): optional `-`, decimal digits, no
/// spaces, no `+`, no leading zeros (except "0"), fits in i64.
pub fn parse_i64(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    let (neg, digits) = match bytes.first() {
        Some(b'-') => (true, bytes.get(1..)?),
        _ => (false, bytes),
    };
    if digits.is_empty() || (digits.len() > 1 && digits.first() == Some(&b'0')) {
        return None;
    }
    if neg && digits == b"0" {
        return None;
    }
    let mut acc: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        acc = acc.checked_mul(10)?;
        acc = if neg {
            acc.checked_sub(d)?
        } else {
            acc.checked_add(d)?
        };
    }
    Some(acc)
}

/// Parse a value as Redis does for INCRBYFLOAT: no surrounding spaces, finite result.
pub fn parse_f64(bytes: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(bytes).ok()?;
    if s.is_empty() || s.trim() != s {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    if lower.contains("nan") || lower.contains("inf") {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    v.is_finite().then_some(v)
}

/// Format a float as Redis's INCRBYFLOAT reply does: shortest decimal that round-trips, no
/// exponent, no trailing zeros, "-0" shown as "0".
pub fn format_f64(v: f64) -> Vec<u8> {
    if v == 0.0 {
        return b"0".to_vec();
    }
    format!("{v}").into_bytes()
}

/// Byte range `[start, end]` of a value of `len` bytes under Redis GETRANGE rules (negative
/// indexes count from the end, both ends inclusive, clamped); `None` for an empty result.
pub fn range_bounds(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    if len == 0 {
        return None;
    }
    let n = i64::try_from(len).ok()?;
    let mut s = if start < 0 {
        n.saturating_add(start)
    } else {
        start
    };
    let mut e = if end < 0 { n.saturating_add(end) } else { end };
    if s < 0 {
        s = 0;
    }
    if e < 0 {
        e = 0;
    }
    if e >= n {
        e = n - 1;
    }
    if s > e {
        return None;
    }
    Some((usize::try_from(s).ok()?, usize::try_from(e).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_like_redis() {
        assert_eq!(parse_i64(b"10"), Some(10));
        assert_eq!(parse_i64(b"-10"), Some(-10));
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1.0",
            b"9223372036854775808",
            b"abc",
            b"-",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", std::str::from_utf8(bad));
        }
    }

    #[test]
    fn floats_like_redis() {
        assert_eq!(parse_f64(b"10.5"), Some(10.5));
        assert_eq!(parse_f64(b"5.0e3"), Some(5000.0));
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b"inf"), None);
        assert_eq!(format_f64(10.5 + 0.1), b"10.6".to_vec());
        assert_eq!(format_f64(5000.0), b"5000".to_vec());
        assert_eq!(format_f64(-0.0), b"0".to_vec());
        assert_eq!(format_f64(3.0e20), b"300000000000000000000".to_vec());
    }

    #[test]
    fn getrange_bounds() {
        // "This is a string" examples from the Redis GETRANGE docs.
        let s = b"This is a string";
        let r = |a, b| range_bounds(s.len(), a, b).map(|(x, y)| &s[x..=y]);
        assert_eq!(r(0, 3), Some(&b"This"[..]));
        assert_eq!(r(-3, -1), Some(&b"ing"[..]));
        assert_eq!(r(0, -1), Some(&s[..]));
        assert_eq!(r(10, 100), Some(&b"string"[..]));
        assert_eq!(r(5, 2), None);
        assert_eq!(range_bounds(0, 0, -1), None);
        assert_eq!(r(-100, -50), Some(&b"T"[..]));
    }
}
