//! The value a command produces, independent of the wire protocol.
//!
//! Commands build a [`Reply`]; the connection turns it into RESP2, RESP3 or a native frame
//! with the codec's encoders (see `conn.rs`). Keeping the value protocol-neutral is what lets
//! one command implementation serve every protocol, and lets RESP3-only shapes (maps, sets,
//! doubles, verbatim strings) degrade to their RESP2 forms exactly as Redis does.

use bytes::Bytes;

/// One reply value. Error texts carry their code as the first word (`"ERR syntax error"`,
/// `"WRONGPASS ..."`), as Redis writes them after the `-`.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `+text` (status reply).
    Simple(Bytes),
    /// `-CODE text`.
    Error(Bytes),
    /// `:n`.
    Int(i64),
    /// `$len bytes`.
    Bulk(Bytes),
    /// RESP2 `$-1`, RESP3 `_`.
    Nil,
    /// RESP2 `*-1`, RESP3 `_`.
    NilArray,
    /// `*n ...`.
    Array(Vec<Reply>),
    /// RESP3 `%n`; RESP2 a flat array of 2n items.
    Map(Vec<(Reply, Reply)>),
    /// RESP3 `~n`; RESP2 an array.
    Set(Vec<Reply>),
    /// RESP3 `,d`; RESP2 a bulk string (Redis formats it with `%.17g`).
    Double(f64),
    /// RESP3 `=len txt:...`; RESP2 a bulk string (INFO, CLIENT LIST/INFO use it).
    Verbatim(Bytes),
}

impl Reply {
    /// `+OK`.
    pub const fn ok() -> Reply {
        Reply::Simple(Bytes::from_static(b"OK"))
    }

    /// An error reply from a static text (`"ERR syntax error"`).
    pub const fn err(text: &'static str) -> Reply {
        Reply::Error(Bytes::from_static(text.as_bytes()))
    }

    /// A bulk reply copying `bytes`.
    pub fn bulk(bytes: &[u8]) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(bytes))
    }

    /// A bulk reply holding the decimal form of `n` (Redis returns some numbers as bulk).
    pub fn bulk_i64(n: i64) -> Reply {
        Reply::Bulk(Bytes::from(n.to_string()))
    }

    /// An error reply from an owned text (user input in it must not hold CR/LF: the encoder
    /// of the codec replaces them, as Redis does).
    pub fn err_owned(text: String) -> Reply {
        Reply::Error(Bytes::from(text))
    }

    /// A status reply from a static text.
    pub const fn simple(text: &'static str) -> Reply {
        Reply::Simple(Bytes::from_static(text.as_bytes()))
    }

    /// True for `Reply::Error`.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// Errors every command shares, with Redis's exact texts (clients match on them).
pub mod errors {
    /// `shared.syntaxerr`.
    pub const SYNTAX: &str = "ERR syntax error";
    /// `shared.outofrangeerr` / integer parse failure.
    pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
    /// Float parse failure (`getLongDoubleFromObjectOrReply`).
    pub const NOT_FLOAT: &str = "ERR value is not a valid float";
    /// `shared.noautherr`.
    pub const NOAUTH: &str = "NOAUTH Authentication required.";
    /// Wrong password (`addReplyError(c, "-WRONGPASS ...")`).
    pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
    /// INCR family overflow.
    pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
    /// `shared.wrongtypeerr`: a string command on a record (a hash to Redis clients).
    pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
}
