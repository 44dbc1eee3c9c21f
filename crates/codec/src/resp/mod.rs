//! RESP2/RESP3: request decoding (server side), reply encoding (server side), reply decoding
//! and request encoding (client side).
//!
//! - [`request`]: [`decode_request`], [`RequestDecoder`], [`Request`] (zero-copy argv),
//!   [`encode_request`];
//! - [`reply`]: [`Reply`], [`Proto`] and the `encode_*` fast paths;
//! - [`reply_decode`]: [`decode_reply`] and the allocation-free [`scan_reply`];
//! - [`int`]: Redis's integer parsing rules.

pub mod int;
pub mod reply;
pub mod reply_decode;
pub mod request;

pub use reply::{
    encode_array_len, encode_big_number, encode_blob_error, encode_bool, encode_bulk,
    encode_double, encode_error, encode_int, encode_len, encode_map_len, encode_null,
    encode_null_array, encode_set_len, encode_simple, encode_verbatim, Proto, Reply,
};
pub use reply_decode::{decode_reply, scan_reply, ReplyInfo};
pub use request::{decode_request, encode_request, Args, Request, RequestDecoder, SMALL_ARGS};
