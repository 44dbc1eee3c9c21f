//! INCRBYFLOAT with Redis's exact arithmetic and formatting (x87 `long double`), via the small
//! C function in `ldouble.c`. Why C: Rust has no 80-bit float, and doing it in f64 changes
//! the reply text clients see (`INCRBYFLOAT k 0.1` would answer `0.10000000000000001`).

/// Why INCRBYFLOAT refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatError {
    /// The stored value or the increment is not a float (`ERR value is not a valid float`).
    NotFloat,
    /// The sum is NaN or infinite.
    NanOrInfinity,
}

/// `MAX_LONG_DOUBLE_CHARS` of Redis: room for `%.17Lf` of any finite long double.
const OUT_BYTES: usize = 5 * 1024;

extern "C" {
    fn ringlet_incrbyfloat(
        cur: *const u8,
        curlen: usize,
        incr: *const u8,
        incrlen: usize,
        out: *mut u8,
        outcap: usize,
    ) -> std::os::raw::c_long;
}

/// The new value text of `INCRBYFLOAT` applied to `cur` (`None`: missing key, counts as 0).
///
/// # Errors
/// [`FloatError`] as above.
pub fn incr_by_float(cur: Option<&[u8]>, incr: &[u8]) -> Result<Vec<u8>, FloatError> {
    let mut out = vec![0u8; OUT_BYTES];
    let (cp, cl) = cur.map_or((std::ptr::null(), 0), |c| (c.as_ptr(), c.len()));
    // SAFETY: every pointer/length pair describes a live slice; the C side reads at most
    // `len` bytes of each input (it copies them into its own NUL-terminated buffer after
    // checking the length) and writes at most `outcap` bytes into `out`.
    let n = unsafe {
        ringlet_incrbyfloat(
            cp,
            cl,
            incr.as_ptr(),
            incr.len(),
            out.as_mut_ptr(),
            out.len(),
        )
    };
    match n {
        -1 => Err(FloatError::NotFloat),
        -2 => Err(FloatError::NanOrInfinity),
        n if n >= 0 => {
            out.truncate(n as usize);
            Ok(out)
        }
        _ => Err(FloatError::NotFloat),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis_text() {
        assert_eq!(incr_by_float(None, b"0.1").unwrap(), b"0.1");
        assert_eq!(incr_by_float(Some(b"10.50"), b"0.1").unwrap(), b"10.6");
        assert_eq!(incr_by_float(Some(b"5.0e3"), b"2.0e2").unwrap(), b"5200");
        assert_eq!(incr_by_float(Some(b"3"), b"-3").unwrap(), b"0");
        assert_eq!(incr_by_float(Some(b"abc"), b"1"), Err(FloatError::NotFloat));
        assert_eq!(incr_by_float(Some(b" 1"), b"1"), Err(FloatError::NotFloat));
        assert_eq!(incr_by_float(None, b"nan"), Err(FloatError::NotFloat));
        assert_eq!(incr_by_float(None, b""), Err(FloatError::NotFloat));
        assert_eq!(
            incr_by_float(None, b"\0"),
            Err(FloatError::NotFloat),
            "embedded NUL"
        );
        assert_eq!(
            incr_by_float(None, b"1\x002"),
            Err(FloatError::NotFloat),
            "embedded NUL"
        );
        assert_eq!(
            incr_by_float(Some(b"1e4932"), b"1e4932"),
            Err(FloatError::NanOrInfinity)
        );
    }
}
