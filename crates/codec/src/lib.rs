//! `ringlet-codec`: Ringlet's wire formats as pure functions — RESP2/RESP3 (what redis-cli,
//! redis-benchmark and every Redis client speak) and the native binary frame protocol (what
//! the Rust client speaks). No I/O, no clocks, no threads: bytes in, values out, and back.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
//!
//! Goals:
//! - decode untrusted bytes without ever panicking, checking every length against
//!   [`ringlet_types::limits`] before allocating;
//! - `Ok(None)` ("incomplete") is the normal path and allocates nothing; `Err(DecodeError)`
//!   means "close this connection" and carries Redis's exact error text for RESP;
//! - zero-copy decoding on the server's hot paths (a RESP GET or a native GET allocates
//!   nothing once the connection's [`resp::Request`] has been reused once);
//! - encoders that write straight into the connection's buffer ([`Sink`]: `Vec<u8>` or
//!   `BytesMut`).
//!
//! Non-goals: command semantics (the server maps argv to operations), RESP3 streamed types,
//! TLS or compression.
//!
//! # API at a glance (for the server and the client)
//!
//! ```text
//! RESP, server side
//!   let mut dec = resp::RequestDecoder::new();  let mut req = resp::Request::new();  // per conn
//!   match dec.decode(&buf, &mut req)? {          // Err(e): write "-ERR {e}\r\n", close
//!       None => read more,
//!       Some(n) => { if !req.is_empty() { handle(req.arg(&buf, 0), ...) }  buf.advance(n) }
//!   }
//!   resp::encode_bulk(&mut out, v) / encode_null(&mut out, proto) / encode_int / encode_simple
//!   / encode_error(&mut out, b"ERR ...") / Reply::encode(proto, &mut out)
//! RESP, client side
//!   resp::encode_request(&mut out, &[b"GET", key]);  resp::decode_reply(&buf)? / scan_reply
//! Native, server side
//!   native::is_native(first_byte)                  // 0xA5: native, else RESP
//!   native::frame_len(&buf)?                       // Some(total) once the 16-byte header is in
//!   native::decode_request_frame(&buf)? -> Option<(RequestFrame { request_id, request }, n)>
//!       NativeRequest::{Ping, Get{key}, Mget{keys}, Set(SetRequest), Del{key,cas}, IncrBy{key,delta}}
//!   native::encode_get_response(&mut out, id, epoch, version, Some(value) | None)
//!   native::encode_status_response(&mut out, id, opcode, Status::OK, epoch, version)
//!   native::encode_int_response / encode_error_response(.., Status::MOVED, epoch, "slot host:port")
//!   native::MgetResponseWriter::begin(&mut out, id, epoch) .push(..) .finish(&mut out)
//! Native, client side
//!   native::encode_get / encode_set(&SetRequest) / encode_mget / encode_del / encode_incr_by / encode_ping
//!   native::decode_response_frame(&buf)? -> Option<(ResponseFrame { request_id, status, epoch,
//!                                                    version, body }, n)>
//! ```
//!
//! Byte layouts of the native protocol: `docs/protocol.md`.
//!
//! # Modules
//! - [`resp`]: RESP request decoder ([`resp::request`]), reply encoder ([`resp::reply`]),
//!   reply decoder ([`resp::reply_decode`]), Redis integer rules ([`resp::int`]);
//! - [`native`]: frame header, request frames ([`native::request`]), response frames
//!   ([`native::response`]);
//! - [`sink`]: the output buffer trait;
//! - [`error`]: the decode error type, [`DecodeError`];
//! - [`fuzz_support`]: stream decoders shared by the fuzz targets and the property tests.

pub mod error;
pub mod fuzz_support;
pub mod native;
pub mod resp;
pub mod sink;

pub use error::DecodeError;
pub use resp::{decode_request, Proto, Reply, Request};
pub use sink::Sink;
