//! LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN] (Redis 7.0 `t_string.c`), as a
//! pure function over the two values, and the handler of both fronts over `Keyspace` (a
//! cluster serves it when both keys are in one slot). The dynamic-programming table is transient
//! memory of (|a|+1)(|b|+1) × 4 bytes; Redis bounds it by `proto-max-bulk-len`, we by
//! `limits::VALUE_BYTES_MAX`, with Redis's error text.

use ringlet_types::limits;

/// One matching range: (a start, a end, b start, b end, length).
pub type Match = (u32, u32, u32, u32, u32);

/// What LCS answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Lcs {
    /// The common subsequence itself.
    Str(Vec<u8>),
    /// `LEN`: its length.
    Len(i64),
    /// `IDX`: the matching ranges (last first, as Redis emits them) and the length;
    /// `with_len` adds each range's length.
    Idx {
        matches: Vec<Match>,
        len: i64,
        with_len: bool,
    },
}

/// Parse the options (arguments from index 3) and compute.
///
/// # Errors
/// Redis's texts: syntax error, a MINMATCHLEN that is not an integer, LEN with IDX, and a
/// table over the memory bound.
pub fn lcs(a: &[u8], b: &[u8], argv: &[&[u8]]) -> Result<Lcs, &'static str> {
    let (mut get_len, mut get_idx, mut with_len) = (false, false, false);
    let mut min_len: i64 = 0;
    let mut j = 3;
    while j < argv.len() {
        let opt = argv[j];
        let more = argv.len() - 1 - j;
        if opt.eq_ignore_ascii_case(b"idx") {
            get_idx = true;
        } else if opt.eq_ignore_ascii_case(b"len") {
            get_len = true;
        } else if opt.eq_ignore_ascii_case(b"withmatchlen") {
            with_len = true;
        } else if opt.eq_ignore_ascii_case(b"minmatchlen") && more > 0 {
            min_len = super::parse_i64(argv[j + 1])
                .ok_or("ERR value is not an integer or out of range")?
                .max(0);
            j += 1;
        } else {
            return Err("ERR syntax error");
        }
        j += 1;
    }
    if get_idx && get_len {
        return Err("ERR If you want both the length and indexes, please just use IDX.");
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells.saturating_mul(4) > u64::from(limits::VALUE_BYTES_MAX) {
        return Err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    let w = blen + 1;
    let mut t = vec![0u32; cells as usize];
    for i in 1..=alen {
        for jj in 1..=blen {
            t[i * w + jj] = if a[i - 1] == b[jj - 1] {
                t[(i - 1) * w + jj - 1] + 1
            } else {
                t[(i - 1) * w + jj].max(t[i * w + jj - 1])
            };
        }
    }
    let total = t[alen * w + blen];
    if get_len {
        return Ok(Lcs::Len(i64::from(total)));
    }
    // Walk back from the end, building the string and the ranges exactly as Redis does.
    let mut result = vec![0u8; total as usize];
    let mut idx = total as usize;
    let mut matches = Vec::new();
    let unset = alen as u32;
    let (mut a_start, mut a_end, mut b_start, mut b_end) = (unset, 0u32, 0u32, 0u32);
    let (mut i, mut jj) = (alen, blen);
    while i > 0 && jj > 0 {
        let mut emit = false;
        if a[i - 1] == b[jj - 1] {
            result[idx - 1] = a[i - 1];
            if a_start == unset {
                a_start = (i - 1) as u32;
                a_end = (i - 1) as u32;
                b_start = (jj - 1) as u32;
                b_end = (jj - 1) as u32;
            } else if a_start == i as u32 && b_start == jj as u32 {
                a_start -= 1;
                b_start -= 1;
            } else {
                emit = true;
            }
            if a_start == 0 || b_start == 0 {
                emit = true;
            }
            idx -= 1;
            i -= 1;
            jj -= 1;
        } else {
            if t[(i - 1) * w + jj] > t[i * w + jj - 1] {
                i -= 1;
            } else {
                jj -= 1;
            }
            if a_start != unset {
                emit = true;
            }
        }
        let match_len = a_end.wrapping_sub(a_start).wrapping_add(1);
        if emit {
            if min_len == 0 || i64::from(match_len) >= min_len {
                matches.push((a_start, a_end, b_start, b_end, match_len));
            }
            a_start = unset;
        }
    }
    Ok(if get_idx {
        Lcs::Idx {
            matches,
            len: i64::from(total),
            with_len,
        }
    } else {
        Lcs::Str(result)
    })
}

// ---------------------------------------------------------------- handler (both fronts)

use crate::reply::Reply;
use bytes::Bytes;

/// The reply of [`lcs`]'s answer (RESP2 gets the IDX map as a flat array).
pub fn to_reply(l: Lcs) -> Reply {
    match l {
        Lcs::Str(s) => Reply::Bulk(Bytes::from(s)),
        Lcs::Len(n) => Reply::Int(n),
        Lcs::Idx {
            matches,
            len,
            with_len,
        } => {
            let pair =
                |x: u32, y: u32| Reply::Array(vec![Reply::Int(x.into()), Reply::Int(y.into())]);
            let ranges = matches
                .into_iter()
                .map(|(a0, a1, b0, b1, n)| {
                    let mut v = vec![pair(a0, a1), pair(b0, b1)];
                    if with_len {
                        v.push(Reply::Int(n.into()));
                    }
                    Reply::Array(v)
                })
                .collect();
            Reply::Map(vec![
                (Reply::bulk(b"matches"), Reply::Array(ranges)),
                (Reply::bulk(b"len"), Reply::Int(len)),
            ])
        }
    }
}

/// LCS key1 key2 [...]: both values read together (one slot in a cluster).
pub async fn lcs_cmd<K: super::keyspace_api::Keyspace>(
    ks: &K,
    argv: &[&[u8]],
) -> super::string::KsResult {
    use super::keyspace_api::Value;
    let mut vals = ks.read_many(&[argv[1], argv[2]]).await?.into_iter();
    let mut next = || -> Result<Vec<u8>, Reply> {
        Ok(Value::string(vals.next().flatten())?
            .map(|v| v.bytes)
            .unwrap_or_default())
    };
    let (a, b) = (next()?, next()?);
    lcs(&a, &b, argv).map(to_reply).map_err(Reply::err)
}
