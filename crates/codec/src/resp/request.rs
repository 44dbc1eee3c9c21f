//! RESP request decoding: multibulk (`*N\r\n$len\r\n...`) and inline commands, with Redis 7's
//! exact acceptance rules and error texts (`networking.c: processMultibulkBuffer`,
//! `processInlineBuffer`, `sds.c: sdssplitargs`).
//!
//! # How it works
//!
//! A decoded [`Request`] is an argv of *spans*: (start, len) ranges into the caller's buffer.
//! Nothing is copied for multibulk requests; the caller reads an argument with
//! [`Request::arg`]`(buf, i)` while the buffer still holds the request, then advances the buffer
//! by the consumed count. Inline commands (telnet-style, rare) may contain escapes such as
//! `"\x41"`, so their unescaped bytes are kept in the request's own buffer instead.
//!
//! Allocation: [`RequestDecoder::decode`] fills a caller-owned [`Request`] whose vectors keep
//! their capacity, so a connection that reuses one `Request` decodes `GET k` with no
//! allocation at all after its first request. Requests of up to [`SMALL_ARGS`] arguments are
//! parsed in one pass into a stack array and copied into the request only once complete; longer
//! ones are first *scanned* (no storing) and only filled in once the scan found every argument,
//! so `Ok(None)` (incomplete) never allocates. The scan of a long, incomplete request is
//! resumable: the decoder remembers how far it got, so a 1M-argument request arriving in many
//! reads is scanned once, not once per read.
//!
//! # Redis quirks kept on purpose
//!
//! - The two bytes after a bulk string are skipped without checking they are `\r\n`, and the
//!   byte after `\r` on a length line is not checked to be `\n` (Redis does the same:
//!   `*1\r\n$4\r\nPINGxx` is a valid PING).
//! - `*0` and `*-1` are empty requests that are consumed and ignored, as are blank inline lines.
//! - An inline line ends at its first NUL byte (`sdssplitargs` works on C strings).
//!
//! Limits: a multibulk count above `limits::ARRAY_ITEMS_MAX` is "invalid multibulk length", a
//! bulk length above `limits::RESP_BULK_BYTES_MAX` is "invalid bulk length", a line without
//! terminator longer than `limits::INLINE_BYTES_MAX` is "too big ...".

use memchr::memchr;
use ringlet_types::limits;

use super::int::string2ll;
use crate::error::DecodeError;
use crate::sink::Sink;

/// Requests with at most this many arguments are decoded in a single pass through a stack
/// array (GET, SET with options, small MGETs); longer ones take a scan pass and a fill pass.
pub const SMALL_ARGS: usize = 8;

/// One argument: `len` bytes at `start` in the decoded buffer (or in the request's own buffer
/// for inline commands).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    start: usize,
    len: usize,
}

/// A decoded command: an argv of byte strings. See the module documentation for the
/// borrowing rule: pass the same buffer that was decoded to [`Request::arg`].
#[derive(Clone, Debug, Default)]
pub struct Request {
    spans: Vec<Span>,
    /// Unescaped argument bytes of an inline command; empty (no allocation) for multibulk.
    inline_bytes: Vec<u8>,
    inline: bool,
}

impl Request {
    /// An empty request, to be filled by [`RequestDecoder::decode`]. Allocates nothing.
    pub fn new() -> Request {
        Request::default()
    }

    /// Number of arguments (the command name included). 0 for an empty command, which the
    /// caller skips: Redis ignores `*0\r\n` and blank inline lines.
    pub fn argc(&self) -> usize {
        self.spans.len()
    }

    /// Whether this is the empty command (see [`Request::argc`]).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Whether the request came as an inline (telnet-style) command.
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// Argument `i`, borrowed from `buf` (the buffer that was decoded) or from the request.
    /// `None` if `i >= argc()` or if `buf` is not the decoded buffer and too short.
    pub fn arg<'a>(&'a self, buf: &'a [u8], i: usize) -> Option<&'a [u8]> {
        let span = self.spans.get(i)?;
        let src: &'a [u8] = if self.inline { &self.inline_bytes } else { buf };
        src.get(span.start..span.start.checked_add(span.len)?)
    }

    /// Iterator over every argument; see [`Request::arg`].
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> Args<'a> {
        Args {
            req: self,
            buf,
            next: 0,
        }
    }

    /// Whether argument `i` equals `word` ignoring ASCII case (command names, options).
    pub fn arg_eq_ignore_case(&self, buf: &[u8], i: usize, word: &[u8]) -> bool {
        self.arg(buf, i)
            .is_some_and(|a| a.eq_ignore_ascii_case(word))
    }

    /// Copy every argument out (tests, slow paths).
    pub fn to_vecs(&self, buf: &[u8]) -> Vec<Vec<u8>> {
        self.args(buf).map(<[u8]>::to_vec).collect()
    }

    fn clear(&mut self) {
        self.spans.clear();
        self.inline_bytes.clear();
        self.inline = false;
    }
}

/// Iterator returned by [`Request::args`].
pub struct Args<'a> {
    req: &'a Request,
    buf: &'a [u8],
    next: usize,
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let a = self.req.arg(self.buf, self.next)?;
        self.next = self.next.saturating_add(1);
        Some(a)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.req.argc().saturating_sub(self.next);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Args<'_> {}

/// Progress of a long multibulk request whose scan stopped for lack of bytes.
#[derive(Clone, Copy, Debug)]
struct Resume {
    /// Number of arguments announced by `*N`.
    count: usize,
    /// Offset of the first `$` line.
    first_arg: usize,
    /// Arguments found complete so far.
    done: usize,
    /// Offset just after the last complete argument.
    pos: usize,
}

/// A RESP request decoder for one connection. It is cheap state (a few words) that lets a long
/// request that arrives over many reads be scanned only once; see the module documentation.
///
/// Contract: between a call that returned `Ok(None)` and the next call, the caller only
/// *appends* to the buffer. After `Ok(Some(n))` it drops the first `n` bytes.
#[derive(Clone, Debug, Default)]
pub struct RequestDecoder {
    resume: Option<Resume>,
    /// Whether the connection still has to AUTH: Redis 7 then refuses more than
    /// [`UNAUTHENTICATED_ARGS_MAX`] arguments and bulks above [`UNAUTHENTICATED_BULK_BYTES_MAX`].
    unauthenticated: bool,
}

/// Arguments an unauthenticated client may send in one request (Redis 7: 10).
pub const UNAUTHENTICATED_ARGS_MAX: i64 = 10;
/// Bulk length an unauthenticated client may send (Redis 7: 16384).
pub const UNAUTHENTICATED_BULK_BYTES_MAX: i64 = 16384;

enum Step {
    Incomplete,
    /// An empty command ending at this offset: skip it.
    Empty(usize),
    /// A request ending at this offset.
    Done(usize),
}

/// Decode one request from the start of `buf` into a fresh [`Request`].
///
/// Returns `Ok(None)` if `buf` holds no complete request yet (nothing allocated), or the
/// request and the number of bytes it used. A request with `argc() == 0` means `buf` started
/// with empty commands only (consume them and call again).
///
/// # Errors
/// [`DecodeError`] with Redis's text: reply `-ERR <text>` and close the connection.
pub fn decode_request(buf: &[u8]) -> Result<Option<(Request, usize)>, DecodeError> {
    let mut req = Request::new();
    let mut dec = RequestDecoder::default();
    Ok(dec.decode(buf, &mut req)?.map(|n| (req, n)))
}

impl RequestDecoder {
    /// A decoder with no request in progress.
    pub fn new() -> RequestDecoder {
        RequestDecoder::default()
    }

    /// Apply (or lift) Redis's limits for connections that must still AUTH: a server with a
    /// password sets this on accept and clears it after a successful AUTH.
    pub fn set_unauthenticated(&mut self, unauthenticated: bool) {
        self.unauthenticated = unauthenticated;
    }

    /// Decode one request from the start of `buf` into `req` (its previous content is
    /// replaced, its capacity reused). Empty commands at the start of `buf` are skipped.
    ///
    /// Returns `Ok(Some(consumed))` when `req` holds a request (possibly empty: `argc() == 0`
    /// when `buf` held only empty commands before an incomplete one), `Ok(None)` when more
    /// bytes are needed.
    ///
    /// # Errors
    /// See [`decode_request`].
    pub fn decode(&mut self, buf: &[u8], req: &mut Request) -> Result<Option<usize>, DecodeError> {
        let resume = self.resume.take();
        let mut pos = 0usize;
        // Bounded by buf.len(): every Empty step consumes at least one byte.
        loop {
            let Some(&first) = buf.get(pos) else {
                return Ok(self.finish_empty(pos, req));
            };
            let step = if first == b'*' {
                let resume = if pos == 0 { resume } else { None };
                self.multibulk(buf, pos, req, resume)?
            } else {
                inline(buf, pos, req)?
            };
            match step {
                Step::Incomplete => return Ok(self.finish_empty(pos, req)),
                Step::Empty(next) => pos = next,
                Step::Done(next) => {
                    self.resume = None;
                    return Ok(Some(next));
                }
            }
        }
    }

    /// End of input after `pos` bytes of empty commands.
    fn finish_empty(&mut self, pos: usize, req: &mut Request) -> Option<usize> {
        if pos == 0 {
            return None;
        }
        // Hand the skipped empties back as an empty request; any scan progress was relative
        // to a request starting after them, so it is dropped (the caller re-offers the rest).
        self.resume = None;
        req.clear();
        Some(pos)
    }

    fn multibulk(
        &mut self,
        buf: &[u8],
        pos: usize,
        req: &mut Request,
        resume: Option<Resume>,
    ) -> Result<Step, DecodeError> {
        let (count, first_arg) = match resume {
            // The caller promised the prefix is unchanged, but check what is cheap to check.
            Some(r) if r.pos <= buf.len() && r.first_arg <= r.pos => (r.count, r.first_arg),
            _ => match multibulk_header(buf, pos, self.unauthenticated)? {
                Header::Incomplete => return Ok(Step::Incomplete),
                Header::Empty(next) => return Ok(Step::Empty(next)),
                Header::Count(count, first_arg) => (count, first_arg),
            },
        };

        if count <= SMALL_ARGS {
            let mut local = [Span::default(); SMALL_ARGS];
            let mut p = first_arg;
            for slot in local.iter_mut().take(count) {
                match bulk(buf, p, self.unauthenticated)? {
                    Some((span, next)) => {
                        *slot = span;
                        p = next;
                    }
                    None => return Ok(Step::Incomplete),
                }
            }
            req.clear();
            req.spans
                .extend_from_slice(local.get(..count).unwrap_or(&[]));
            return Ok(Step::Done(p));
        }

        // Long request: scan (resumably) without storing, then fill.
        let (mut done, mut p) = match resume {
            Some(r) if r.count == count && r.first_arg == first_arg && r.pos <= buf.len() => {
                (r.done, r.pos)
            }
            _ => (0, first_arg),
        };
        while done < count {
            match bulk(buf, p, self.unauthenticated)? {
                Some((_, next)) => {
                    p = next;
                    done = done.saturating_add(1);
                }
                None => {
                    if pos == 0 {
                        self.resume = Some(Resume {
                            count,
                            first_arg,
                            done,
                            pos: p,
                        });
                    }
                    return Ok(Step::Incomplete);
                }
            }
        }
        let end = p;
        req.clear();
        // `count` arguments were just found in `buf`, so this reservation is bounded by the
        // bytes actually received (each argument takes at least 6 bytes: `$0\r\n\r\n`).
        req.spans.reserve_exact(count);
        let mut p = first_arg;
        for _ in 0..count {
            match bulk(buf, p, self.unauthenticated)? {
                Some((span, next)) => {
                    req.spans.push(span);
                    p = next;
                }
                // Unreachable: the scan above found every argument complete.
                None => return Ok(Step::Incomplete),
            }
        }
        Ok(Step::Done(end))
    }
}

enum Header {
    Incomplete,
    Empty(usize),
    /// Argument count and offset of the first argument.
    Count(usize, usize),
}

/// Bytes of a length line searched byte by byte before handing over to `memchr`: length lines
/// (`*3`, `$16`) end within a few bytes, where memchr's dispatch and SIMD set-up cost more than
/// the search (profiled: 20% of a GET's decode time went to three memchr calls).
const SHORT_SCAN_BYTES: usize = 24;

/// Offset of the first `\r` in `rest`.
#[inline]
fn find_cr(rest: &[u8]) -> Option<usize> {
    let head = rest.get(..SHORT_SCAN_BYTES).unwrap_or(rest);
    if let Some(i) = head.iter().position(|&b| b == b'\r') {
        return Some(i);
    }
    if head.len() == rest.len() {
        return None;
    }
    memchr(b'\r', rest.get(SHORT_SCAN_BYTES..).unwrap_or(&[]))
        .map(|i| i.saturating_add(SHORT_SCAN_BYTES))
}

/// Parse the `*N\r\n` line at `pos`.
fn multibulk_header(buf: &[u8], pos: usize, unauth: bool) -> Result<Header, DecodeError> {
    let rest = buf.get(pos..).unwrap_or(&[]);
    let Some(cr) = find_cr(rest) else {
        if rest.len() > limits::INLINE_BYTES_MAX as usize {
            return Err(DecodeError::TooBigMultibulkCount);
        }
        return Ok(Header::Incomplete);
    };
    let Some(line_end) = cr.checked_add(2).filter(|&e| e <= rest.len()) else {
        return Ok(Header::Incomplete);
    };
    let digits = rest.get(1..cr).unwrap_or(&[]);
    let n = string2ll(digits).ok_or(DecodeError::InvalidMultibulkLength)?;
    if n > i64::from(limits::ARRAY_ITEMS_MAX) {
        return Err(DecodeError::InvalidMultibulkLength);
    }
    if unauth && n > UNAUTHENTICATED_ARGS_MAX {
        return Err(DecodeError::UnauthenticatedMultibulkLength);
    }
    let next = pos.saturating_add(line_end);
    if n <= 0 {
        return Ok(Header::Empty(next));
    }
    let n = usize::try_from(n).map_err(|_| DecodeError::InvalidMultibulkLength)?;
    Ok(Header::Count(n, next))
}

/// Parse one `$len\r\n<bytes>\r\n` at `p`: its span and the offset after it.
#[inline]
fn bulk(buf: &[u8], p: usize, unauth: bool) -> Result<Option<(Span, usize)>, DecodeError> {
    let rest = buf.get(p..).unwrap_or(&[]);
    let Some(cr) = find_cr(rest) else {
        if rest.len() > limits::INLINE_BYTES_MAX as usize {
            return Err(DecodeError::TooBigBulkCount);
        }
        return Ok(None);
    };
    let Some(line_end) = cr.checked_add(2).filter(|&e| e <= rest.len()) else {
        return Ok(None);
    };
    match rest.first() {
        Some(b'$') => {}
        Some(&other) => return Err(DecodeError::ExpectedDollar(other)),
        None => return Ok(None),
    }
    let digits = rest.get(1..cr).unwrap_or(&[]);
    let len = string2ll(digits).ok_or(DecodeError::InvalidBulkLength)?;
    if len < 0 || len > i64::from(limits::RESP_BULK_BYTES_MAX) {
        return Err(DecodeError::InvalidBulkLength);
    }
    if unauth && len > UNAUTHENTICATED_BULK_BYTES_MAX {
        return Err(DecodeError::UnauthenticatedBulkLength);
    }
    let len = usize::try_from(len).map_err(|_| DecodeError::InvalidBulkLength)?;
    let start = p.saturating_add(line_end);
    // +2: the terminator Redis skips without checking.
    let end = start
        .checked_add(len)
        .and_then(|e| e.checked_add(2))
        .ok_or(DecodeError::InvalidBulkLength)?;
    if end > buf.len() {
        return Ok(None);
    }
    Ok(Some((Span { start, len }, end)))
}

/// Parse an inline command line at `pos`.
fn inline(buf: &[u8], pos: usize, req: &mut Request) -> Result<Step, DecodeError> {
    let rest = buf.get(pos..).unwrap_or(&[]);
    let Some(nl) = memchr(b'\n', rest) else {
        if rest.len() > limits::INLINE_BYTES_MAX as usize {
            return Err(DecodeError::TooBigInlineRequest);
        }
        return Ok(Step::Incomplete);
    };
    let mut line = rest.get(..nl).unwrap_or(&[]);
    if let Some((b'\r', head)) = line.split_last() {
        line = head;
    }
    split_args(line, req)?;
    let next = pos.saturating_add(nl).saturating_add(1);
    if req.is_empty() {
        Ok(Step::Empty(next))
    } else {
        Ok(Step::Done(next))
    }
}

/// `isspace()` in the C locale.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c.wrapping_sub(b'0')),
        b'a'..=b'f' => Some(c.wrapping_sub(b'a').wrapping_add(10)),
        b'A'..=b'F' => Some(c.wrapping_sub(b'A').wrapping_add(10)),
        _ => None,
    }
}

/// Port of Redis `sdssplitargs`: split on whitespace, with `"..."` (C escapes, `\xHH`) and
/// `'...'` (only `\'`) quoting. Fills `req` with inline arguments.
fn split_args(line: &[u8], req: &mut Request) -> Result<(), DecodeError> {
    req.clear();
    req.inline = true;
    // C-string semantics: the line ends at its first NUL.
    let line = match memchr(0, line) {
        Some(i) => line.get(..i).unwrap_or(&[]),
        None => line,
    };
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let out = &mut req.inline_bytes;
    let mut p = 0usize;
    // Bounded: each outer iteration consumes at least one byte or returns.
    loop {
        while at(p) != 0 && is_space(at(p)) {
            p = p.saturating_add(1);
        }
        if at(p) == 0 {
            return Ok(());
        }
        let start = out.len();
        let (mut inq, mut insq, mut done) = (false, false, false);
        while !done {
            let c = at(p);
            if inq {
                let hex = (at(p.saturating_add(2)), at(p.saturating_add(3)));
                if c == b'\\' && at(p.saturating_add(1)) == b'x' {
                    if let (Some(h), Some(l)) = (hex_val(hex.0), hex_val(hex.1)) {
                        out.push(h.wrapping_mul(16).wrapping_add(l));
                        p = p.saturating_add(3);
                    } else {
                        // `\x` without two hex digits: the generic escape below (yields 'x').
                        p = p.saturating_add(1);
                        out.push(b'x');
                    }
                } else if c == b'\\' && at(p.saturating_add(1)) != 0 {
                    p = p.saturating_add(1);
                    out.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    // A closing quote must be followed by a space or nothing at all.
                    let after = at(p.saturating_add(1));
                    if after != 0 && !is_space(after) {
                        return Err(DecodeError::UnbalancedQuotes);
                    }
                    done = true;
                } else if c == 0 {
                    return Err(DecodeError::UnbalancedQuotes);
                } else {
                    out.push(c);
                }
            } else if insq {
                if c == b'\\' && at(p.saturating_add(1)) == b'\'' {
                    p = p.saturating_add(1);
                    out.push(b'\'');
                } else if c == b'\'' {
                    let after = at(p.saturating_add(1));
                    if after != 0 && !is_space(after) {
                        return Err(DecodeError::UnbalancedQuotes);
                    }
                    done = true;
                } else if c == 0 {
                    return Err(DecodeError::UnbalancedQuotes);
                } else {
                    out.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => done = true,
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    _ => out.push(c),
                }
            }
            if at(p) != 0 {
                p = p.saturating_add(1);
            }
        }
        let len = out.len().saturating_sub(start);
        req.spans.push(Span { start, len });
    }
}

/// Encode `args` as a RESP multibulk request (what clients send).
pub fn encode_request<S: Sink + ?Sized>(out: &mut S, args: &[&[u8]]) {
    super::reply::encode_len(out, b'*', args.len());
    for a in args {
        super::reply::encode_bulk(out, a);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    type Decoded = Option<(Vec<Vec<u8>>, usize)>;

    fn dec(s: &[u8]) -> Result<Decoded, DecodeError> {
        Ok(decode_request(s)?.map(|(r, n)| (r.to_vecs(s), n)))
    }

    fn v(args: &[&str]) -> Vec<Vec<u8>> {
        args.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    #[test]
    fn multibulk_get() {
        let b = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\nrest";
        assert_eq!(dec(b).unwrap(), Some((v(&["GET", "key"]), 22)));
    }

    #[test]
    fn multibulk_incomplete_at_every_split() {
        let b = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n";
        for i in 0..b.len() {
            assert_eq!(dec(&b[..i]).unwrap(), None, "split {i}");
        }
        assert_eq!(dec(b).unwrap().unwrap().1, b.len());
    }

    #[test]
    fn redis_error_texts() {
        // Each case checked against redis-server 7.0.15 (see docs/design/codec-resp.md).
        let cases: &[(&[u8], &str)] = &[
            (b"*x\r\n", "Protocol error: invalid multibulk length"),
            (
                b"*3000000000\r\n",
                "Protocol error: invalid multibulk length",
            ),
            (b"*01\r\n", "Protocol error: invalid multibulk length"),
            (b"*1\r\nx\r\n", "Protocol error: expected '$', got 'x'"),
            (b"*1\r\n$-1\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\n$abc\r\n", "Protocol error: invalid bulk length"),
            (b"*1\r\n$+4\r\n", "Protocol error: invalid bulk length"),
            (
                b"*1\r\n$536870913\r\n",
                "Protocol error: invalid bulk length",
            ),
            (
                b"set a \"b\r\n",
                "Protocol error: unbalanced quotes in request",
            ),
            (
                b"set a \"b\"c\r\n",
                "Protocol error: unbalanced quotes in request",
            ),
            (
                b"set a 'b\r\n",
                "Protocol error: unbalanced quotes in request",
            ),
        ];
        for (input, text) in cases {
            let err = decode_request(input).unwrap_err();
            assert_eq!(
                err.to_string(),
                *text,
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn find_cr_short_and_long() {
        assert_eq!(find_cr(b"$3\r\n"), Some(2));
        assert_eq!(find_cr(b""), None);
        let mut long = vec![b'1'; 100];
        assert_eq!(find_cr(&long), None);
        long[SHORT_SCAN_BYTES] = b'\r';
        assert_eq!(find_cr(&long), Some(SHORT_SCAN_BYTES));
        long[SHORT_SCAN_BYTES] = b'1';
        long[99] = b'\r';
        assert_eq!(find_cr(&long), Some(99));
    }

    #[test]
    fn too_big_lines() {
        let long = vec![b'a'; limits::INLINE_BYTES_MAX as usize + 1];
        assert_eq!(
            decode_request(&long).unwrap_err(),
            DecodeError::TooBigInlineRequest
        );
        let mut mb = b"*".to_vec();
        mb.extend_from_slice(&long);
        assert_eq!(
            decode_request(&mb).unwrap_err(),
            DecodeError::TooBigMultibulkCount
        );
        let mut b = b"*1\r\n$".to_vec();
        b.extend_from_slice(&long);
        assert_eq!(
            decode_request(&b).unwrap_err(),
            DecodeError::TooBigBulkCount
        );
        // Just under the limit: still incomplete.
        assert_eq!(dec(&long[1..]).unwrap(), None);
    }

    #[test]
    fn unauthenticated_limits_like_redis() {
        // Texts checked against redis-server 7.0.15 with `requirepass`. A fresh decoder per
        // buffer: a decoder may only see one growing buffer between requests.
        let dec = |unauth: bool, b: &[u8]| {
            let mut d = RequestDecoder::new();
            d.set_unauthenticated(unauth);
            d.decode(b, &mut Request::new())
        };
        assert_eq!(
            dec(true, b"*11\r\n").unwrap_err().to_string(),
            "Protocol error: unauthenticated multibulk length"
        );
        assert_eq!(dec(true, b"*10\r\n").unwrap(), None);
        assert_eq!(
            dec(true, b"*2\r\n$4\r\nAUTH\r\n$16385\r\n")
                .unwrap_err()
                .to_string(),
            "Protocol error: unauthenticated bulk length"
        );
        assert_eq!(dec(true, b"*2\r\n$4\r\nAUTH\r\n$16384\r\n").unwrap(), None);
        assert_eq!(dec(false, b"*11\r\n").unwrap(), None);
    }

    #[test]
    fn crlf_after_bulk_is_not_checked_like_redis() {
        let b = b"*1\r\n$4\r\nPINGxx";
        assert_eq!(dec(b).unwrap(), Some((v(&["PING"]), b.len())));
    }

    #[test]
    fn empty_commands_are_skipped() {
        let b = b"*0\r\n*-1\r\n\r\n  \r\nPING\r\n";
        assert_eq!(dec(b).unwrap(), Some((v(&["PING"]), b.len())));
        // Only empties, then an incomplete request: hand the empties back as argc 0.
        let b = b"*0\r\n*1\r\n$4\r\nPI";
        let (r, n) = decode_request(b).unwrap().unwrap();
        assert!(r.is_empty());
        assert_eq!(n, 4);
    }

    #[test]
    fn inline_like_sdssplitargs() {
        assert_eq!(
            dec(b"set  k   v\r\n").unwrap().unwrap().0,
            v(&["set", "k", "v"])
        );
        assert_eq!(dec(b"ping\n").unwrap().unwrap(), (v(&["ping"]), 5));
        assert_eq!(
            dec(b"echo \"a\\x41\\n\\\"q\" 'it\\'s' x\"y z\"\r\n")
                .unwrap()
                .unwrap()
                .0,
            vec![
                b"echo".to_vec(),
                b"aA\n\"q".to_vec(),
                b"it's".to_vec(),
                b"xy z".to_vec()
            ]
        );
        assert_eq!(dec(b"echo \"\"\r\n").unwrap().unwrap().0, v(&["echo", ""]));
        // A NUL ends the line for sdssplitargs.
        assert_eq!(dec(b"PI\0NG x\r\n").unwrap().unwrap().0, v(&["PI"]));
        assert_eq!(dec(b"ping").unwrap(), None);
    }

    #[test]
    fn long_request_resumes_and_reuses_request() {
        let mut msg = b"*20\r\n".to_vec();
        for i in 0..20 {
            let a = format!("arg{i}");
            msg.extend_from_slice(format!("${}\r\n{}\r\n", a.len(), a).as_bytes());
        }
        let mut d = RequestDecoder::new();
        let mut r = Request::new();
        for i in 0..msg.len() {
            assert_eq!(d.decode(&msg[..i], &mut r).unwrap(), None, "split {i}");
        }
        assert_eq!(d.decode(&msg, &mut r).unwrap(), Some(msg.len()));
        assert_eq!(r.argc(), 20);
        assert_eq!(r.arg(&msg, 19).unwrap(), b"arg19");
        // Reuse for a small request.
        let b = b"*1\r\n$4\r\nPING\r\n";
        assert_eq!(d.decode(b, &mut r).unwrap(), Some(b.len()));
        assert_eq!(r.to_vecs(b), v(&["PING"]));
        assert!(r.arg_eq_ignore_case(b, 0, b"ping"));
    }

    #[test]
    fn encode_request_round_trips() {
        let mut out = Vec::new();
        encode_request(&mut out, &[b"SET", b"k", b"v\r\n"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n");
        assert_eq!(
            dec(&out).unwrap().unwrap().0,
            vec![b"SET".to_vec(), b"k".to_vec(), b"v\r\n".to_vec()]
        );
    }
}
