//! RESP2/RESP3 reply decoding (the client side: load generator, tests, the CLI).
//!
//! Two entry points:
//! - [`scan_reply`] finds where the next reply ends and what kind it is, allocating nothing.
//!   The load generator uses it to count hits and misses without building values.
//! - [`decode_reply`] builds a [`Reply`]. It scans first, so an incomplete reply allocates
//!   nothing, and every aggregate's capacity is bounded by items that were actually received.
//!
//! Unlike the request decoder (which copies Redis's leniency), this side is strict: every line
//! and bulk must end in `\r\n`. Nesting is bounded by `limits::RESP_DEPTH_MAX`, counts by
//! `limits::ARRAY_ITEMS_MAX`, bulk lengths by `limits::RESP_BULK_BYTES_MAX`.
//!
//! Not supported: RESP3 streamed strings and aggregates (`$?`, `*?`), which Redis never sends.

use memchr::memchr;
use ringlet_types::limits;

use super::int::string2ll;
use super::reply::Reply;
use crate::error::DecodeError;

/// What [`scan_reply`] learned about a reply without building it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyInfo {
    /// The type byte (`+`, `$`, `*`, ...) of the reply (of the annotated reply for attributes).
    pub type_byte: u8,
    /// RESP2 `$-1` / `*-1` or RESP3 `_`.
    pub is_null: bool,
    /// `-` or `!`.
    pub is_error: bool,
}

/// Find the end of the reply at the start of `buf`.
///
/// Returns `Ok(None)` if more bytes are needed, else what the reply is and its length.
///
/// # Errors
/// [`DecodeError`] if the bytes are not RESP: the connection cannot be trusted any more.
pub fn scan_reply(buf: &[u8]) -> Result<Option<(ReplyInfo, usize)>, DecodeError> {
    scan_at(buf, 0, 0)
}

/// Decode the reply at the start of `buf`: `Ok(None)` if incomplete (nothing allocated), else
/// the reply and the bytes it used.
///
/// # Errors
/// See [`scan_reply`].
pub fn decode_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, DecodeError> {
    if scan_at(buf, 0, 0)?.is_none() {
        return Ok(None);
    }
    match decode_at(buf, 0, 0)? {
        Some(r) => Ok(Some(r)),
        // Unreachable after a complete scan; reported rather than asserted.
        None => Err(DecodeError::InvalidReplyLine),
    }
}

/// The line at `pos` without its type byte, and the offset after its `\r\n`.
fn line(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, DecodeError> {
    let rest = buf.get(pos..).unwrap_or(&[]);
    let Some(cr) = memchr(b'\r', rest) else {
        if rest.len() > limits::RESP_BULK_BYTES_MAX as usize {
            return Err(DecodeError::InvalidReplyLine);
        }
        return Ok(None);
    };
    match rest.get(cr.saturating_add(1)) {
        None => return Ok(None),
        Some(b'\n') => {}
        Some(_) => return Err(DecodeError::MissingCrlf),
    }
    let content = rest.get(1..cr).unwrap_or(&[]);
    // RESP lines cannot hold LF either (the encoder never writes one): refusing it keeps
    // decode and encode inverse to each other.
    if memchr(b'\n', content).is_some() {
        return Err(DecodeError::InvalidReplyLine);
    }
    Ok(Some((content, pos.saturating_add(cr).saturating_add(2))))
}

fn parse_len(content: &[u8]) -> Result<i64, DecodeError> {
    if content == b"?" {
        return Err(DecodeError::StreamedUnsupported);
    }
    string2ll(content).ok_or(DecodeError::InvalidReplyLine)
}

fn parse_double(content: &[u8]) -> Result<f64, DecodeError> {
    std::str::from_utf8(content)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or(DecodeError::InvalidReplyLine)
}

fn parse_bool(content: &[u8]) -> Result<bool, DecodeError> {
    match content {
        b"t" => Ok(true),
        b"f" => Ok(false),
        _ => Err(DecodeError::InvalidReplyLine),
    }
}

fn is_big_number(content: &[u8]) -> bool {
    let digits = content.strip_prefix(b"-").unwrap_or(content);
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

/// A bulk-like payload (`$`, `=`, `!`) at `pos`: `Ok(Some(None, next))` for the RESP2 null.
#[allow(clippy::type_complexity)]
fn blob(buf: &[u8], pos: usize, t: u8) -> Result<Option<(Option<&[u8]>, usize)>, DecodeError> {
    let Some((content, next)) = line(buf, pos)? else {
        return Ok(None);
    };
    let len = parse_len(content)?;
    if t == b'$' && len == -1 {
        return Ok(Some((None, next)));
    }
    if len < 0 || len > i64::from(limits::RESP_BULK_BYTES_MAX) {
        return Err(DecodeError::InvalidBulkLength);
    }
    let len = usize::try_from(len).map_err(|_| DecodeError::InvalidBulkLength)?;
    let end = next
        .checked_add(len)
        .ok_or(DecodeError::InvalidBulkLength)?;
    let after = end.checked_add(2).ok_or(DecodeError::InvalidBulkLength)?;
    let Some(tail) = buf.get(end..after) else {
        return Ok(None);
    };
    if tail != b"\r\n" {
        return Err(DecodeError::MissingCrlf);
    }
    let data = buf.get(next..end).unwrap_or(&[]);
    if t == b'=' && (data.len() < 4 || data.get(3) != Some(&b':')) {
        return Err(DecodeError::InvalidReplyLine);
    }
    Ok(Some((Some(data), after)))
}

/// An aggregate header at `pos`: `Ok(Some((None, next)))` for the RESP2 null array, else the
/// number of *replies* that follow (2 per pair for maps and attributes).
fn aggregate(
    buf: &[u8],
    pos: usize,
    t: u8,
    depth: u32,
) -> Result<Option<(Option<usize>, usize)>, DecodeError> {
    let Some((content, next)) = line(buf, pos)? else {
        return Ok(None);
    };
    let n = parse_len(content)?;
    if t == b'*' && n == -1 {
        return Ok(Some((None, next)));
    }
    if n < 0 || n > i64::from(limits::ARRAY_ITEMS_MAX) {
        return Err(DecodeError::InvalidMultibulkLength);
    }
    if depth >= limits::RESP_DEPTH_MAX {
        return Err(DecodeError::ReplyTooDeep);
    }
    let n = usize::try_from(n).map_err(|_| DecodeError::InvalidMultibulkLength)?;
    let items = if matches!(t, b'%' | b'|') {
        n.saturating_mul(2)
    } else {
        n
    };
    Ok(Some((Some(items), next)))
}

fn scan_at(buf: &[u8], pos: usize, depth: u32) -> Result<Option<(ReplyInfo, usize)>, DecodeError> {
    let Some(&t) = buf.get(pos) else {
        return Ok(None);
    };
    let info = |is_null: bool| ReplyInfo {
        type_byte: t,
        is_null,
        is_error: matches!(t, b'-' | b'!'),
    };
    match t {
        b'+' | b'-' | b':' | b',' | b'#' | b'_' | b'(' => {
            let Some((content, next)) = line(buf, pos)? else {
                return Ok(None);
            };
            match t {
                b':' => {
                    string2ll(content).ok_or(DecodeError::InvalidReplyLine)?;
                }
                b',' => {
                    parse_double(content)?;
                }
                b'#' => {
                    parse_bool(content)?;
                }
                b'_' if !content.is_empty() => return Err(DecodeError::InvalidReplyLine),
                b'(' if !is_big_number(content) => return Err(DecodeError::InvalidReplyLine),
                _ => {}
            }
            Ok(Some((info(t == b'_'), next)))
        }
        b'$' | b'=' | b'!' => Ok(blob(buf, pos, t)?.map(|(d, next)| (info(d.is_none()), next))),
        b'*' | b'%' | b'~' | b'>' | b'|' => {
            let Some((items, mut p)) = aggregate(buf, pos, t, depth)? else {
                return Ok(None);
            };
            let Some(items) = items else {
                return Ok(Some((info(true), p)));
            };
            let child_depth = depth.saturating_add(1);
            // Bounded by ARRAY_ITEMS_MAX (checked in `aggregate`) and by the bytes in `buf`.
            for _ in 0..items {
                match scan_at(buf, p, child_depth)? {
                    Some((_, next)) => p = next,
                    None => return Ok(None),
                }
            }
            if t == b'|' {
                // Attributes annotate the reply that follows: report that one.
                return scan_at(buf, p, child_depth);
            }
            Ok(Some((info(false), p)))
        }
        other => Err(DecodeError::UnknownReplyType(other)),
    }
}

fn decode_at(buf: &[u8], pos: usize, depth: u32) -> Result<Option<(Reply, usize)>, DecodeError> {
    let Some(&t) = buf.get(pos) else {
        return Ok(None);
    };
    match t {
        b'+' | b'-' | b':' | b',' | b'#' | b'_' | b'(' => {
            let Some((content, next)) = line(buf, pos)? else {
                return Ok(None);
            };
            let r = match t {
                b'+' => Reply::Simple(content.to_vec()),
                b'-' => Reply::Error(content.to_vec()),
                b':' => Reply::Integer(string2ll(content).ok_or(DecodeError::InvalidReplyLine)?),
                b',' => Reply::Double(parse_double(content)?),
                b'#' => Reply::Boolean(parse_bool(content)?),
                b'_' => Reply::Null,
                _ => Reply::BigNumber(content.to_vec()),
            };
            Ok(Some((r, next)))
        }
        b'$' | b'=' | b'!' => {
            let Some((data, next)) = blob(buf, pos, t)? else {
                return Ok(None);
            };
            let r = match (t, data) {
                (_, None) => Reply::Null,
                (b'$', Some(d)) => Reply::Bulk(d.to_vec()),
                (b'!', Some(d)) => Reply::BlobError(d.to_vec()),
                (_, Some(d)) => {
                    let mut format = [0u8; 3];
                    format.copy_from_slice(d.get(..3).ok_or(DecodeError::InvalidReplyLine)?);
                    Reply::Verbatim {
                        format,
                        text: d.get(4..).unwrap_or(&[]).to_vec(),
                    }
                }
            };
            Ok(Some((r, next)))
        }
        b'*' | b'%' | b'~' | b'>' | b'|' => {
            let Some((items, mut p)) = aggregate(buf, pos, t, depth)? else {
                return Ok(None);
            };
            let Some(items) = items else {
                return Ok(Some((Reply::NullArray, p)));
            };
            let child_depth = depth.saturating_add(1);
            // `decode_reply` scanned first: these `items` replies are all in `buf`, so the
            // capacity is bounded by received bytes, not by the announced count alone.
            let mut out = Vec::with_capacity(items);
            for _ in 0..items {
                match decode_at(buf, p, child_depth)? {
                    Some((r, next)) => {
                        out.push(r);
                        p = next;
                    }
                    None => return Ok(None),
                }
            }
            let pairs = |v: Vec<Reply>| {
                let mut it = v.into_iter();
                let mut pairs = Vec::new();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                pairs
            };
            let r = match t {
                b'*' => Reply::Array(out),
                b'~' => Reply::Set(out),
                b'>' => Reply::Push(out),
                b'%' => Reply::Map(pairs(out)),
                _ => {
                    let Some((inner, next)) = decode_at(buf, p, child_depth)? else {
                        return Ok(None);
                    };
                    p = next;
                    Reply::Attribute {
                        attrs: pairs(out),
                        reply: Box::new(inner),
                    }
                }
            };
            Ok(Some((r, p)))
        }
        other => Err(DecodeError::UnknownReplyType(other)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::resp::Proto;

    #[test]
    fn decodes_every_type() {
        let r = Reply::Array(vec![
            Reply::Simple(b"OK".to_vec()),
            Reply::Error(b"ERR x".to_vec()),
            Reply::Integer(-3),
            Reply::bulk("v"),
            Reply::Null,
            Reply::Map(vec![(Reply::bulk("k"), Reply::Boolean(false))]),
            Reply::Set(vec![Reply::Double(2.5)]),
            Reply::Verbatim {
                format: *b"txt",
                text: b"hi".to_vec(),
            },
            Reply::BigNumber(b"-123456789012345678901234567890".to_vec()),
            Reply::BlobError(b"SYNTAX x".to_vec()),
            Reply::Push(vec![]),
            Reply::Attribute {
                attrs: vec![(Reply::bulk("ttl"), Reply::Integer(1))],
                reply: Box::new(Reply::Integer(7)),
            },
        ]);
        let b = r.to_bytes(Proto::Resp3);
        assert_eq!(decode_reply(&b).unwrap(), Some((r, b.len())));
        for i in 0..b.len() {
            assert_eq!(decode_reply(&b[..i]).unwrap(), None);
            assert_eq!(scan_reply(&b[..i]).unwrap(), None);
        }
    }

    #[test]
    fn scan_reports_null_and_error() {
        let (i, n) = scan_reply(b"$-1\r\n").unwrap().unwrap();
        assert!(i.is_null && n == 5);
        let (i, _) = scan_reply(b"-ERR no\r\n").unwrap().unwrap();
        assert!(i.is_error);
        let (i, _) = scan_reply(b"$1\r\nx\r\n").unwrap().unwrap();
        assert!(!i.is_null && i.type_byte == b'$');
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(scan_reply(b"$1\r\nxyz"), Err(DecodeError::MissingCrlf));
        assert_eq!(
            scan_reply(b"?x\r\n"),
            Err(DecodeError::UnknownReplyType(b'?'))
        );
        assert_eq!(scan_reply(b"*?\r\n"), Err(DecodeError::StreamedUnsupported));
        // Found by the resp_reply_decode fuzz target: LF inside a simple error.
        assert_eq!(scan_reply(b"-\n-\r\n"), Err(DecodeError::InvalidReplyLine));
        assert_eq!(
            scan_reply(b"*2000000\r\n"),
            Err(DecodeError::InvalidMultibulkLength)
        );
        let deep = "*1\r\n".repeat(100);
        assert_eq!(scan_reply(deep.as_bytes()), Err(DecodeError::ReplyTooDeep));
    }
}
