//! RESP replies: the [`Reply`] value, encoders for RESP2 and RESP3, and the fast-path encoder
//! functions the server uses for its hot commands.
//!
//! RESP3 types have RESP2 fallbacks, the same ones Redis uses when a client did not send
//! `HELLO 3`:
//!
//! | RESP3                  | RESP2                                   |
//! |------------------------|-----------------------------------------|
//! | `_` null               | `$-1` (or `*-1` for a null array)       |
//! | `%` map of n pairs     | `*` array of 2n items, key then value   |
//! | `~` set, `>` push      | `*` array                               |
//! | `,` double             | `$` bulk string of the number           |
//! | `#t` / `#f` boolean    | `:1` / `:0`                             |
//! | `=` verbatim `txt:...` | `$` bulk string of the text only        |
//! | `(` big number         | `$` bulk string of the digits           |
//! | `!` blob error         | `-` simple error (CR/LF become spaces)  |
//! | `\|` attribute         | dropped; only the reply it annotates     |

use crate::sink::Sink;

/// The protocol version a connection speaks (Redis `HELLO 2` / `HELLO 3`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Proto {
    /// RESP2: the default until a client sends `HELLO 3`.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

/// A RESP reply value. Owned, for the general and the client side; the server's hot paths
/// use the `encode_*` functions directly.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+OK`. Must not contain CR or LF (the encoder replaces them with spaces).
    Simple(Vec<u8>),
    /// `-ERR message`: the text includes its code (`ERR`, `MOVED`, `WRONGTYPE`, ...).
    Error(Vec<u8>),
    /// `:42`.
    Integer(i64),
    /// `$3\r\nfoo`.
    Bulk(Vec<u8>),
    /// The null bulk string (RESP2 `$-1`, RESP3 `_`).
    Null,
    /// The null array (RESP2 `*-1`, RESP3 `_`).
    NullArray,
    /// `*n`.
    Array(Vec<Reply>),
    /// RESP3 `%n`.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~n`.
    Set(Vec<Reply>),
    /// RESP3 `>n` (out-of-band pushes: pub/sub, invalidation).
    Push(Vec<Reply>),
    /// RESP3 `,1.5`.
    Double(f64),
    /// RESP3 `#t`.
    Boolean(bool),
    /// RESP3 `=len\r\ntxt:text`: `format` is three bytes such as `txt` or `mkd`.
    Verbatim {
        /// Three-byte format tag.
        format: [u8; 3],
        /// The text.
        text: Vec<u8>,
    },
    /// RESP3 `(12345678901234567890`: the decimal digits.
    BigNumber(Vec<u8>),
    /// RESP3 `!len\r\nERR ...`.
    BlobError(Vec<u8>),
    /// RESP3 `|n` attributes annotating the reply that follows them.
    Attribute {
        /// Attribute pairs.
        attrs: Vec<(Reply, Reply)>,
        /// The annotated reply.
        reply: Box<Reply>,
    },
}

impl Reply {
    /// Shorthand for `Reply::Simple(b"OK")`.
    pub fn ok() -> Reply {
        Reply::Simple(b"OK".to_vec())
    }

    /// Shorthand for a bulk string.
    pub fn bulk(b: impl Into<Vec<u8>>) -> Reply {
        Reply::Bulk(b.into())
    }

    /// Shorthand for an error reply.
    pub fn error(msg: impl Into<Vec<u8>>) -> Reply {
        Reply::Error(msg.into())
    }

    /// Whether this is an error (simple or blob).
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_) | Reply::BlobError(_))
    }

    /// Encode in protocol `proto` (see the module table for RESP2 fallbacks).
    pub fn encode<S: Sink + ?Sized>(&self, proto: Proto, out: &mut S) {
        match self {
            Reply::Simple(s) => encode_simple(out, s),
            Reply::Error(e) => encode_error(out, e),
            Reply::Integer(i) => encode_int(out, *i),
            Reply::Bulk(b) => encode_bulk(out, b),
            Reply::Null => encode_null(out, proto),
            Reply::NullArray => encode_null_array(out, proto),
            Reply::Array(items) => {
                encode_len(out, b'*', items.len());
                for r in items {
                    r.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                encode_map_len(out, proto, pairs.len());
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Set(items) => {
                encode_set_len(out, proto, items.len());
                for r in items {
                    r.encode(proto, out);
                }
            }
            Reply::Push(items) => {
                encode_len(
                    out,
                    if proto == Proto::Resp3 { b'>' } else { b'*' },
                    items.len(),
                );
                for r in items {
                    r.encode(proto, out);
                }
            }
            Reply::Double(d) => encode_double(out, proto, *d),
            Reply::Boolean(b) => encode_bool(out, proto, *b),
            Reply::Verbatim { format, text } => encode_verbatim(out, proto, *format, text),
            Reply::BigNumber(d) => encode_big_number(out, proto, d),
            Reply::BlobError(e) => encode_blob_error(out, proto, e),
            Reply::Attribute { attrs, reply } => {
                if proto == Proto::Resp3 {
                    encode_len(out, b'|', attrs.len());
                    for (k, v) in attrs {
                        k.encode(proto, out);
                        v.encode(proto, out);
                    }
                }
                reply.encode(proto, out);
            }
        }
    }

    /// Encode into a new `Vec` (tests, slow paths).
    pub fn to_bytes(&self, proto: Proto) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(proto, &mut v);
        v
    }
}

/// `<prefix><n>\r\n`: the header of an aggregate or bulk.
#[inline]
pub fn encode_len<S: Sink + ?Sized>(out: &mut S, prefix: u8, n: usize) {
    let mut b = itoa::Buffer::new();
    out.put_u8(prefix);
    out.put(b.format(n).as_bytes());
    out.put(b"\r\n");
}

/// Put `s`, replacing CR and LF with spaces so a line-typed reply cannot break framing
/// (Redis does the same for error texts).
fn put_line_safe<S: Sink + ?Sized>(out: &mut S, s: &[u8]) {
    if memchr::memchr2(b'\r', b'\n', s).is_none() {
        out.put(s);
    } else {
        for &c in s {
            out.put_u8(if c == b'\r' || c == b'\n' { b' ' } else { c });
        }
    }
}

/// `+s\r\n`.
#[inline]
pub fn encode_simple<S: Sink + ?Sized>(out: &mut S, s: &[u8]) {
    out.put_u8(b'+');
    put_line_safe(out, s);
    out.put(b"\r\n");
}

/// `-msg\r\n`; `msg` carries its own code (`ERR ...`, `MOVED 3999 127.0.0.1:6381`).
#[inline]
pub fn encode_error<S: Sink + ?Sized>(out: &mut S, msg: &[u8]) {
    out.put_u8(b'-');
    put_line_safe(out, msg);
    out.put(b"\r\n");
}

/// `:i\r\n`.
#[inline]
pub fn encode_int<S: Sink + ?Sized>(out: &mut S, i: i64) {
    let mut b = itoa::Buffer::new();
    out.put_u8(b':');
    out.put(b.format(i).as_bytes());
    out.put(b"\r\n");
}

/// `$len\r\nbytes\r\n`: the GET hit path.
#[inline]
pub fn encode_bulk<S: Sink + ?Sized>(out: &mut S, bytes: &[u8]) {
    encode_len(out, b'$', bytes.len());
    out.put(bytes);
    out.put(b"\r\n");
}

/// The null bulk string: RESP2 `$-1\r\n`, RESP3 `_\r\n` (the GET miss path).
#[inline]
pub fn encode_null<S: Sink + ?Sized>(out: &mut S, proto: Proto) {
    out.put(match proto {
        Proto::Resp2 => b"$-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// The null array: RESP2 `*-1\r\n`, RESP3 `_\r\n`.
#[inline]
pub fn encode_null_array<S: Sink + ?Sized>(out: &mut S, proto: Proto) {
    out.put(match proto {
        Proto::Resp2 => b"*-1\r\n",
        Proto::Resp3 => b"_\r\n",
    });
}

/// Header of an array of `n` items.
#[inline]
pub fn encode_array_len<S: Sink + ?Sized>(out: &mut S, n: usize) {
    encode_len(out, b'*', n);
}

/// Header of a map of `n` pairs: RESP3 `%n`, RESP2 `*2n` (the caller then writes key, value,
/// key, value...).
pub fn encode_map_len<S: Sink + ?Sized>(out: &mut S, proto: Proto, n: usize) {
    match proto {
        Proto::Resp3 => encode_len(out, b'%', n),
        Proto::Resp2 => encode_len(out, b'*', n.saturating_mul(2)),
    }
}

/// Header of a set of `n` items: RESP3 `~n`, RESP2 `*n`.
pub fn encode_set_len<S: Sink + ?Sized>(out: &mut S, proto: Proto, n: usize) {
    encode_len(out, if proto == Proto::Resp3 { b'~' } else { b'*' }, n);
}

/// Decimal text of a double as RESP3 writes it: `inf`, `-inf`, `nan`, else the shortest text
/// that parses back to the same `f64`.
fn double_text(d: f64) -> String {
    if d.is_nan() {
        "nan".to_string()
    } else if d.is_infinite() {
        if d > 0.0 { "inf" } else { "-inf" }.to_string()
    } else {
        format!("{d:?}")
    }
}

/// A double: RESP3 `,1.5\r\n`, RESP2 the bulk string `1.5`.
pub fn encode_double<S: Sink + ?Sized>(out: &mut S, proto: Proto, d: f64) {
    let t = double_text(d);
    match proto {
        Proto::Resp3 => {
            out.put_u8(b',');
            out.put(t.as_bytes());
            out.put(b"\r\n");
        }
        Proto::Resp2 => encode_bulk(out, t.as_bytes()),
    }
}

/// A boolean: RESP3 `#t` / `#f`, RESP2 `:1` / `:0`.
pub fn encode_bool<S: Sink + ?Sized>(out: &mut S, proto: Proto, b: bool) {
    match (proto, b) {
        (Proto::Resp3, true) => out.put(b"#t\r\n"),
        (Proto::Resp3, false) => out.put(b"#f\r\n"),
        (Proto::Resp2, true) => out.put(b":1\r\n"),
        (Proto::Resp2, false) => out.put(b":0\r\n"),
    }
}

/// A verbatim string: RESP3 `=len\r\nfmt:text\r\n`, RESP2 the bulk string `text`.
pub fn encode_verbatim<S: Sink + ?Sized>(out: &mut S, proto: Proto, format: [u8; 3], text: &[u8]) {
    match proto {
        Proto::Resp3 => {
            encode_len(out, b'=', text.len().saturating_add(4));
            out.put(&format);
            out.put_u8(b':');
            out.put(text);
            out.put(b"\r\n");
        }
        Proto::Resp2 => encode_bulk(out, text),
    }
}

/// A big number (decimal digits, optional leading `-`): RESP3 `(digits`, RESP2 a bulk string.
pub fn encode_big_number<S: Sink + ?Sized>(out: &mut S, proto: Proto, digits: &[u8]) {
    match proto {
        Proto::Resp3 => {
            out.put_u8(b'(');
            put_line_safe(out, digits);
            out.put(b"\r\n");
        }
        Proto::Resp2 => encode_bulk(out, digits),
    }
}

/// A blob error: RESP3 `!len\r\nmsg\r\n`, RESP2 the simple error `-msg`.
pub fn encode_blob_error<S: Sink + ?Sized>(out: &mut S, proto: Proto, msg: &[u8]) {
    match proto {
        Proto::Resp3 => {
            encode_len(out, b'!', msg.len());
            out.put(msg);
            out.put(b"\r\n");
        }
        Proto::Resp2 => encode_error(out, msg),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fast_paths() {
        let mut o = Vec::new();
        encode_bulk(&mut o, b"hello");
        encode_int(&mut o, -7);
        encode_simple(&mut o, b"OK");
        encode_error(&mut o, b"ERR bad\r\nthing");
        encode_null(&mut o, Proto::Resp2);
        encode_null(&mut o, Proto::Resp3);
        assert_eq!(
            o,
            b"$5\r\nhello\r\n:-7\r\n+OK\r\n-ERR bad  thing\r\n$-1\r\n_\r\n".to_vec()
        );
    }

    #[test]
    fn resp2_fallbacks() {
        let m = Reply::Map(vec![(Reply::bulk("a"), Reply::Integer(1))]);
        assert_eq!(m.to_bytes(Proto::Resp2), b"*2\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(m.to_bytes(Proto::Resp3), b"%1\r\n$1\r\na\r\n:1\r\n");
        assert_eq!(Reply::Boolean(true).to_bytes(Proto::Resp2), b":1\r\n");
        assert_eq!(Reply::Double(1.5).to_bytes(Proto::Resp3), b",1.5\r\n");
        assert_eq!(Reply::Double(1.5).to_bytes(Proto::Resp2), b"$3\r\n1.5\r\n");
        assert_eq!(
            Reply::Double(f64::NEG_INFINITY).to_bytes(Proto::Resp3),
            b",-inf\r\n"
        );
        let v = Reply::Verbatim {
            format: *b"txt",
            text: b"hi".to_vec(),
        };
        assert_eq!(v.to_bytes(Proto::Resp3), b"=6\r\ntxt:hi\r\n");
        assert_eq!(v.to_bytes(Proto::Resp2), b"$2\r\nhi\r\n");
        assert_eq!(Reply::NullArray.to_bytes(Proto::Resp2), b"*-1\r\n");
    }
}
