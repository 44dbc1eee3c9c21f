//! The one error type of the codec.
//!
//! Decoders separate "need more bytes" (`Ok(None)`, the normal path, allocation-free) from
//! "malformed" (`Err(DecodeError)`). A `DecodeError` means the byte stream cannot be resynchronised:
//! the server replies with the error's text (RESP: `-ERR <Display>`) and closes that one
//! connection. The error is `Copy` so the hot path never boxes or allocates for it.
//!
//! The RESP request variants render *exactly* the text Redis 7 sends (checked against
//! redis-server 7.0.15), so clients and tests written for Redis see the same messages.

use thiserror::Error;

/// Why a byte stream was rejected. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    // ---- RESP requests (texts identical to Redis 7's networking.c) ----
    /// `*<n>` where `<n>` is not an integer, or larger than `limits::ARRAY_ITEMS_MAX`.
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// `$<n>` where `<n>` is not an integer, is negative, or exceeds `limits::RESP_BULK_BYTES_MAX`.
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// An argument of a multibulk request that does not start with `$`.
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedDollar(u8),
    /// A multibulk count above 10 before the client authenticated (Redis 7 bounds what an
    /// unauthenticated client can make the server buffer).
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    /// A bulk length above 16384 before the client authenticated.
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
    /// An inline command line longer than `limits::INLINE_BYTES_MAX` without a newline.
    #[error("Protocol error: too big inline request")]
    TooBigInlineRequest,
    /// A `*<n>` line longer than `limits::INLINE_BYTES_MAX` without `\r`.
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    /// A `$<n>` line longer than `limits::INLINE_BYTES_MAX` without `\r`.
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// An inline command with an unterminated quote, or a closing quote not followed by space.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,

    // ---- RESP replies (client side) ----
    /// A reply starting with a byte that is no RESP2/RESP3 type.
    #[error("Protocol error: unknown reply type byte 0x{0:02x}")]
    UnknownReplyType(u8),
    /// A reply line (integer, double, boolean, length) that does not parse.
    #[error("Protocol error: invalid reply line")]
    InvalidReplyLine,
    /// Aggregates nested deeper than `limits::RESP_DEPTH_MAX`.
    #[error("Protocol error: reply nested too deeply")]
    ReplyTooDeep,
    /// A bulk or aggregate that is not followed by the `\r\n` it must end with.
    #[error("Protocol error: missing CRLF after reply")]
    MissingCrlf,
    /// RESP3 streamed strings/aggregates (`$?`, `*?`): not produced by Redis, not supported.
    #[error("Protocol error: streamed RESP3 types are not supported")]
    StreamedUnsupported,

    // ---- native frames ----
    /// First byte of a native frame is not [`crate::native::MAGIC`].
    #[error("native protocol: bad magic byte 0x{0:02x}")]
    BadMagic(u8),
    /// A protocol version this build does not speak.
    #[error("native protocol: unsupported version {0}")]
    UnsupportedVersion(u8),
    /// An opcode this build does not know.
    #[error("native protocol: unknown opcode {0}")]
    UnknownOpcode(u8),
    /// Reserved flag bits set (they must be zero so they can gain a meaning later).
    #[error("native protocol: reserved flag bits set: 0x{0:02x}")]
    ReservedFlags(u8),
    /// Body length beyond `limits::FRAME_BYTES_MAX`.
    #[error("native protocol: frame of {0} bytes exceeds the frame limit")]
    FrameTooLarge(u32),
    /// A key length beyond `limits::KEY_BYTES_MAX`.
    #[error("native protocol: key of {0} bytes exceeds the key limit")]
    KeyTooLarge(u32),
    /// A value length beyond `limits::VALUE_BYTES_MAX`.
    #[error("native protocol: value of {0} bytes exceeds the value limit")]
    ValueTooLarge(u32),
    /// A batch count beyond `limits::BATCH_KEYS_MAX`.
    #[error("native protocol: batch of {0} items exceeds the batch limit")]
    BatchTooLarge(u32),
    /// A field runs past the end of the frame body.
    #[error("native protocol: field runs past the end of the frame body")]
    Truncated,
    /// Bytes left in the body after the last field.
    #[error("native protocol: trailing bytes after the last field")]
    TrailingBytes,
    /// A field whose value is not allowed (NX with XX, a flagged-off field that is not zero,
    /// a status byte that does not exist).
    #[error("native protocol: invalid field: {0}")]
    InvalidField(&'static str),
}
