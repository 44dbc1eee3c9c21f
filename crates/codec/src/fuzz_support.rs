//! Entry points for the fuzz targets in `crates/codec/fuzz/` (thin wrappers over these), also
//! run by `cargo test` over random bytes (`tests/prop_*.rs`), so CI exercises them without
//! cargo-fuzz.
//!
//! Each function decodes a whole byte stream the way a server or client connection would
//! (decode, consume, repeat) and asserts the properties every accepted message must have:
//! progress on every step, arguments inside the limits, and re-encoding giving bytes that
//! decode to the same message. Returning normally means "no property violated"; a violation
//! panics (which is what a fuzzer reports).

use ringlet_types::limits;

use crate::native::{self, ClusterRequest, NativeRequest, ResponseBody};
use crate::resp::{self, Proto, Request, RequestDecoder};

/// Upper bound on messages decoded from one input, so a target always terminates.
const MESSAGES_MAX: usize = 100_000;

/// Decode `data` as a stream of RESP requests.
#[allow(clippy::panic)]
pub fn resp_decode_stream(data: &[u8]) {
    let mut dec = RequestDecoder::new();
    let mut req = Request::new();
    let mut buf = data;
    for _ in 0..MESSAGES_MAX {
        match dec.decode(buf, &mut req) {
            Ok(Some(n)) => {
                assert!(n > 0 && n <= buf.len(), "no progress or overrun: {n}");
                assert!(req.argc() <= limits::ARRAY_ITEMS_MAX as usize);
                for a in req.args(buf) {
                    assert!(a.len() <= limits::RESP_BULK_BYTES_MAX as usize);
                }
                // Multibulk re-encoding decodes to the same argv.
                if !req.is_empty() {
                    let args: Vec<&[u8]> = req.args(buf).collect();
                    let mut enc = Vec::new();
                    resp::encode_request(&mut enc, &args);
                    match resp::decode_request(&enc) {
                        Ok(Some((r2, m))) => {
                            assert_eq!(m, enc.len());
                            assert_eq!(r2.to_vecs(&enc), req.to_vecs(buf));
                        }
                        other => panic!("re-encoded request does not decode: {other:?}"),
                    }
                }
                buf = buf.get(n..).unwrap_or(&[]);
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// Decode `data` as a stream of RESP replies.
#[allow(clippy::panic)]
pub fn resp_reply_decode_stream(data: &[u8]) {
    let mut buf = data;
    for _ in 0..MESSAGES_MAX {
        let scanned = resp::scan_reply(buf);
        match resp::decode_reply(buf) {
            Ok(Some((r, n))) => {
                assert!(
                    matches!(scanned, Ok(Some((_, m))) if m == n),
                    "scan and decode disagree"
                );
                assert!(n > 0 && n <= buf.len());
                // Re-encoding is a fixpoint: encode(decode(encode(r))) == encode(r). (Not
                // r2 == r: RESP3 has one null, so RESP2's `*-1` comes back as `Null`.)
                for proto in [Proto::Resp2, Proto::Resp3] {
                    let enc = r.to_bytes(proto);
                    match resp::decode_reply(&enc) {
                        Ok(Some((r2, m))) => {
                            assert_eq!(m, enc.len());
                            assert_eq!(r2.to_bytes(proto), enc, "encoding is not a fixpoint");
                        }
                        other => panic!("re-encoded reply does not decode: {other:?}"),
                    }
                }
                buf = buf.get(n..).unwrap_or(&[]);
            }
            Ok(None) => {
                assert!(matches!(scanned, Ok(None)));
                return;
            }
            Err(_) => return,
        }
    }
}

/// Properties of a decoded data request: every field within its limit.
fn check_request(r: &NativeRequest<'_>) {
    match *r {
        NativeRequest::Get { key }
        | NativeRequest::Del { key, .. }
        | NativeRequest::IncrBy { key, .. } => {
            assert!(key.len() <= limits::KEY_BYTES_MAX as usize)
        }
        NativeRequest::Set(s) => {
            assert!(s.key.len() <= limits::KEY_BYTES_MAX as usize);
            assert!(s.value.len() <= limits::VALUE_BYTES_MAX as usize);
        }
        NativeRequest::Mget { keys } => {
            assert!(keys.len() <= limits::BATCH_KEYS_MAX as usize);
            assert_eq!(keys.iter().count(), keys.len());
        }
        NativeRequest::Chase(c) => {
            assert!(c.key.len() <= limits::KEY_BYTES_MAX as usize);
            assert!(!c.links.is_empty());
            for list in [Some(c.links), c.fields].into_iter().flatten() {
                assert!(list.len() <= limits::BATCH_KEYS_MAX as usize);
                assert_eq!(list.iter().count(), list.len());
            }
        }
        NativeRequest::Auth { user, password } => {
            assert!(user.len() <= limits::KEY_BYTES_MAX as usize);
            assert!(password.len() <= limits::KEY_BYTES_MAX as usize);
        }
        NativeRequest::Command { args } => {
            assert!(!args.is_empty());
            assert!(args.len() <= limits::COMMAND_ARGS_MAX as usize);
            assert_eq!(args.iter().count(), args.len());
            assert!(args
                .iter()
                .all(|a| a.len() <= limits::COMMAND_ARG_BYTES_MAX as usize));
        }
        NativeRequest::Ping => {}
    }
}

/// Decode `data` as a stream of native frames, as requests (cluster-mode superset) and as
/// responses.
#[allow(clippy::panic)]
pub fn native_decode_stream(data: &[u8]) {
    let mut buf = data;
    for _ in 0..MESSAGES_MAX {
        let mut advanced = false;
        if let Ok(Some((f, n))) = native::decode_cluster_request_frame(buf) {
            assert!(n >= native::HEADER_BYTES && n <= buf.len());
            assert!(n <= limits::FRAME_BYTES_MAX as usize);
            // The single-node decoder agrees on the data opcodes and refuses the cluster ones.
            let single = native::decode_request_frame(buf);
            match f.request {
                ClusterRequest::Data(r) => {
                    assert!(matches!(single, Ok(Some((g, m))) if g.request == r && m == n));
                    check_request(&r);
                }
                ClusterRequest::ClusterMap => assert!(single.is_err()),
                ClusterRequest::ReadReplica { key, .. } => {
                    assert!(single.is_err());
                    assert!(key.len() <= limits::KEY_BYTES_MAX as usize);
                }
                ClusterRequest::Memgest { args } => {
                    assert!(single.is_err());
                    assert!(args.len() <= limits::BATCH_KEYS_MAX as usize);
                    assert_eq!(args.iter().count(), args.len());
                    assert!(args
                        .iter()
                        .all(|a| a.len() <= limits::KEY_BYTES_MAX as usize));
                }
            }
            let mut enc = Vec::new();
            native::encode_cluster_request_frame(&mut enc, f.request_id, &f.request);
            assert_eq!(
                enc.as_slice(),
                buf.get(..n).unwrap_or(&[]),
                "encoding is canonical"
            );
            buf = buf.get(n..).unwrap_or(&[]);
            advanced = true;
        } else if let Ok(Some((f, n))) = native::decode_response_frame(buf) {
            assert!(n >= native::HEADER_BYTES && n <= buf.len());
            if let ResponseBody::Values(items) = f.body {
                assert_eq!(items.iter().count(), items.len());
            }
            if let (native::Opcode::ReadReplica, ResponseBody::Value(blob)) = (f.opcode, f.body) {
                assert!(
                    native::ReplicaValue::parse(blob).is_ok(),
                    "validated at decode"
                );
            }
            if let (native::Opcode::Chase, ResponseBody::Value(blob)) = (f.opcode, f.body) {
                match native::ChaseItems::parse(blob) {
                    Ok(items) => {
                        assert_eq!(items.iter().count(), items.len());
                        for it in items.iter() {
                            assert_eq!(it.attrs().count(), it.attrs_len());
                        }
                    }
                    Err(e) => panic!("validated at decode, yet {e}"),
                }
            }
            let mut enc = Vec::new();
            native::encode_response_frame(&mut enc, &f);
            assert_eq!(
                enc.as_slice(),
                buf.get(..n).unwrap_or(&[]),
                "encoding is canonical"
            );
            buf = buf.get(n..).unwrap_or(&[]);
            advanced = true;
        }
        if !advanced {
            return;
        }
    }
}
