//! Numbers as Redis 7 reads and writes them for HINCRBY and HINCRBYFLOAT.
//!
//! Integers follow Redis `string2ll` exactly: an optional `-`, no `+`, no leading zeros
//! (except `0` itself), no spaces, at most 20 bytes, within i64.
//!
//! Floats: Redis parses with `strtold` into an x87 80-bit `long double`, adds, and prints with
//! `%.17Lf` before trimming trailing zeros (`ld2string(.., LD_STR_HUMAN)`; not `%.17Lg`). The
//! 64-bit mantissa makes the 17 printed decimals come out "as typed" for ordinary numbers:
//! `10.5 + 0.1 = 10.6`, `0.1 + 0.2 = 0.3`, `5.0e3 + 2.0e2 = 5200`. Rust has no `long double`,
//! and `f64` would print `0.30000000000000004`, so instead:
//!
//! - when both operands are plain decimals (`[-+]digits[.digits][e[-+]digits]`) with at most
//!   36 significant digits and a modest exponent, the sum is computed *exactly* in decimal
//!   (i128 mantissa, base-10 exponent) and rounded half-to-even to 17 fractional digits.
//!   This equals Redis's output whenever the long-double sum is within half a unit of the 17th
//!   decimal of the exact sum, i.e. for every value with up to ~18 significant digits;
//! - otherwise (hex floats are not accepted at all, `inf`, or huge or tiny magnitudes) both
//!   operands are parsed as `f64`, added, and printed as `%.17f` of the double. Output then
//!   differs from Redis in the digits beyond f64's precision (Redis would show long-double
//!   noise there instead).

/// Redis `LONG_STR_SIZE`: a valid i64 string is shorter than this.
const LONG_STR_BYTES: usize = 21;
/// Redis `MAX_LONG_DOUBLE_CHARS`: longer float strings are refused.
const LONG_DOUBLE_CHARS_MAX: usize = 5 * 1024;
/// Significant decimal digits an i128 mantissa holds with room to align and add.
const DEC_DIGITS_MAX: u32 = 36;
/// Decimal exponents the exact path handles; beyond them the f64 path (and its `inf`) rules.
const DEC_EXP_MIN: i32 = -400;
const DEC_EXP_MAX: i32 = 60;
/// Fractional digits `%.17Lf` prints.
const FRAC_DIGITS: u32 = 17;

/// Redis `string2ll`.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() >= LONG_STR_BYTES {
        return None;
    }
    if b == b"0" {
        return Some(0);
    }
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// A parsed float operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    /// Exactly `mant × 10^exp`.
    Dec { mant: i128, exp: i32 },
    /// Anything else `strtold` would accept that we support; may be ±inf, never NaN.
    F64(f64),
}

impl Num {
    fn to_f64(self) -> f64 {
        match self {
            Num::F64(x) => x,
            // Via the string form so rounding is correct.
            Num::Dec { mant, exp } => format!("{mant}e{exp}").parse().unwrap_or(f64::NAN),
        }
    }

    pub(crate) fn is_finite(self) -> bool {
        match self {
            Num::Dec { .. } => true,
            Num::F64(x) => x.is_finite(),
        }
    }
}

/// Redis `string2ld`: the whole string must be a number; NaN is refused, `inf` accepted.
/// Returns None where Redis says "not a valid float".
pub(crate) fn parse_float(b: &[u8]) -> Option<Num> {
    if b.is_empty() || b.len() >= LONG_DOUBLE_CHARS_MAX {
        return None;
    }
    let s = std::str::from_utf8(b).ok()?;
    if let Some(n) = parse_decimal(b) {
        return Some(n);
    }
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s).to_ascii_lowercase();
    if unsigned == "inf" || unsigned == "infinity" {
        return Some(Num::F64(if s.starts_with('-') {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        }));
    }
    // Plain decimals outside the exact path's range.
    if !is_decimal_syntax(b) {
        return None;
    }
    let x: f64 = s.parse().ok()?;
    // strtold's ERANGE: overflow to inf or underflow to 0 of a nonzero literal is refused.
    // (f64's range is narrower than long double's; see the module docs.)
    let nonzero_digits = b
        .iter()
        .take_while(|c| !matches!(c, b'e' | b'E'))
        .any(|c| (b'1'..=b'9').contains(c));
    if x.is_infinite() || (x == 0.0 && nonzero_digits) {
        return None;
    }
    Some(Num::F64(x))
}

fn is_decimal_syntax(b: &[u8]) -> bool {
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let start = i;
    while b.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    let mut digits = i - start;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let f = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        digits += i - f;
    }
    if digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let e = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == e {
            return false;
        }
    }
    i == b.len()
}

/// The exact path: a plain decimal with few enough significant digits.
fn parse_decimal(b: &[u8]) -> Option<Num> {
    if !is_decimal_syntax(b) {
        return None;
    }
    let neg = b.first() == Some(&b'-');
    let body = b.strip_prefix(b"-").or(b.strip_prefix(b"+")).unwrap_or(b);
    let (num, exp_part) = match body.iter().position(|c| matches!(c, b'e' | b'E')) {
        Some(p) => (&body[..p], Some(&body[p + 1..])),
        None => (body, None),
    };
    let mut exp: i64 = match exp_part {
        Some(e) => {
            let e = std::str::from_utf8(e).ok()?;
            // Exponents too long for i64 are far outside the exact range anyway.
            e.parse::<i64>().ok()?
        }
        None => 0,
    };
    let mut mant: i128 = 0;
    let mut sig = 0u32;
    let mut seen_dot = false;
    for &c in num {
        if c == b'.' {
            seen_dot = true;
            continue;
        }
        let d = i128::from(c - b'0');
        if mant == 0 && d == 0 {
            // Leading zero: only shifts the exponent if after the dot.
            if seen_dot {
                exp -= 1;
            }
            continue;
        }
        if sig >= DEC_DIGITS_MAX {
            return None;
        }
        mant = mant * 10 + d;
        sig += 1;
        if seen_dot {
            exp -= 1;
        }
    }
    if mant == 0 {
        return Some(Num::Dec { mant: 0, exp: 0 });
    }
    let exp = i32::try_from(exp).ok()?;
    if !(DEC_EXP_MIN..=DEC_EXP_MAX).contains(&exp) {
        return None;
    }
    Some(Num::Dec {
        mant: if neg { -mant } else { mant },
        exp,
    })
}

/// `a + b` as Redis prints it, or None if the sum is NaN or infinite.
pub(crate) fn add_and_format(a: Num, b: Num) -> Option<Vec<u8>> {
    if let (Num::Dec { mant: ma, exp: ea }, Num::Dec { mant: mb, exp: eb }) = (a, b) {
        if let Some(s) = add_dec(ma, ea, mb, eb) {
            return Some(s);
        }
    }
    let x = a.to_f64() + b.to_f64();
    if !x.is_finite() {
        return None;
    }
    Some(trim(format!("{x:.17}")))
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

fn add_dec(ma: i128, ea: i32, mb: i128, eb: i32) -> Option<Vec<u8>> {
    let e = ea.min(eb);
    let ma = ma.checked_mul(pow10((ea - e) as u32)?)?;
    let mb = mb.checked_mul(pow10((eb - e) as u32)?)?;
    let mut m = ma.checked_add(mb)?;
    let mut e = e;
    // Round to 17 fractional digits, half to even (the binary sum is rarely an exact tie).
    if e < -(FRAC_DIGITS as i32) {
        let drop = (-(FRAC_DIGITS as i32) - e) as u32;
        m = match pow10(drop) {
            Some(p) => {
                let (q, r) = (m / p, m % p);
                let twice = r.unsigned_abs() * 2;
                let half = p.unsigned_abs();
                let up = twice > half || (twice == half && q % 2 != 0);
                if up {
                    q + m.signum()
                } else {
                    q
                }
            }
            None => 0, // |m| < 10^38 <= p/2: rounds to zero.
        };
        e = -(FRAC_DIGITS as i32);
    }
    let neg = m < 0;
    let digits = m.unsigned_abs().to_string();
    let mut s = String::with_capacity(digits.len() + 24);
    if neg {
        s.push('-');
    }
    if e >= 0 {
        s.push_str(&digits);
        s.extend(std::iter::repeat_n('0', e as usize));
    } else {
        let frac = (-e) as usize;
        if digits.len() > frac {
            let (int, f) = digits.split_at(digits.len() - frac);
            s.push_str(int);
            s.push('.');
            s.push_str(f);
        } else {
            s.push_str("0.");
            s.extend(std::iter::repeat_n('0', frac - digits.len()));
            s.push_str(&digits);
        }
    }
    Some(trim(s))
}

/// `ld2string`'s LD_STR_HUMAN tail: drop trailing zeros after a '.', then the '.', and turn
/// "-0" into "0".
fn trim(mut s: String) -> Vec<u8> {
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s == "-0" {
        s = "0".to_string();
    }
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(a: &str, b: &str) -> Option<String> {
        let a = parse_float(a.as_bytes())?;
        let b = parse_float(b.as_bytes())?;
        add_and_format(a, b).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn integers_like_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"+1",
            b"01",
            b" 1",
            b"1 ",
            b"1.0",
            b"9223372036854775808",
            b"abc",
            b"00000000000000000000001",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_like_redis() {
        assert_eq!(add("10.5", "0.1").as_deref(), Some("10.6"));
        assert_eq!(add("5.0e3", "2.0e2").as_deref(), Some("5200"));
        assert_eq!(add("3", "1.5").as_deref(), Some("4.5"));
        assert_eq!(add("0.1", "0.2").as_deref(), Some("0.3"));
        assert_eq!(add("0", "-0").as_deref(), Some("0"));
        assert_eq!(add("1", "-1").as_deref(), Some("0"));
        assert_eq!(add("-5", "2.25").as_deref(), Some("-2.75"));
        assert_eq!(add("1e-20", "0").as_deref(), Some("0"));
        assert_eq!(add("-1e-20", "0").as_deref(), Some("0"));
        assert_eq!(add("1.6e-17", "0").as_deref(), Some("0.00000000000000002"));
        assert_eq!(add(".5", "5.").as_deref(), Some("5.5"));
        assert_eq!(add("+1", "1E2").as_deref(), Some("101"));
        assert_eq!(add("1e300", "1").as_deref().map(str::len), Some(301));
        assert_eq!(add("inf", "1"), None);
        assert_eq!(add("1e308", "1e308"), None);
        for bad in [
            "", " 1", "1 ", "abc", "nan", "1e", "e5", ".", "0x10", "1e999",
        ] {
            assert_eq!(parse_float(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(parse_float(b"-Infinity"), Some(Num::F64(f64::NEG_INFINITY)));
    }
}
