//! Property tests of the RESP codec: requests and replies round-trip through encode/decode,
//! every split point of a valid message is "incomplete" (never an error, never a wrong
//! message), and random bytes never panic the decoders (the same stream functions the fuzz
//! targets call).

use proptest::prelude::*;
use ringlet_codec::fuzz_support;
use ringlet_codec::resp::{self, Proto, Reply};

fn argv() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..20)
}

fn line_text() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        any::<u8>().prop_filter("no CR/LF", |b| *b != b'\r' && *b != b'\n'),
        0..20,
    )
}

fn reply() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        line_text().prop_map(Reply::Simple),
        line_text().prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        prop::collection::vec(any::<u8>(), 0..30).prop_map(Reply::Bulk),
        Just(Reply::Null),
        any::<f64>()
            .prop_filter("NaN != NaN", |d| !d.is_nan())
            .prop_map(Reply::Double),
        any::<bool>().prop_map(Reply::Boolean),
        prop::collection::vec(any::<u8>(), 0..30).prop_map(|text| Reply::Verbatim {
            format: *b"txt",
            text
        }),
        "-?[1-9][0-9]{0,40}".prop_map(|s| Reply::BigNumber(s.into_bytes())),
        prop::collection::vec(any::<u8>(), 0..30).prop_map(Reply::BlobError),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Reply::Array),
            prop::collection::vec(inner.clone(), 0..8).prop_map(Reply::Set),
            prop::collection::vec(inner.clone(), 0..8).prop_map(Reply::Push),
            prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Reply::Map),
            (
                prop::collection::vec((inner.clone(), inner.clone()), 0..3),
                inner
            )
                .prop_map(|(attrs, r)| Reply::Attribute {
                    attrs,
                    reply: Box::new(r)
                }),
        ]
    })
}

/// Replies RESP2 can carry unchanged (no RESP3-only type anywhere inside).
fn resp2_reply() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        line_text().prop_map(Reply::Simple),
        line_text().prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        prop::collection::vec(any::<u8>(), 0..30).prop_map(Reply::Bulk),
        Just(Reply::Null),
        Just(Reply::NullArray),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop::collection::vec(inner, 0..8).prop_map(Reply::Array)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn request_round_trips_and_splits(args in argv()) {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let mut buf = Vec::new();
        resp::encode_request(&mut buf, &refs);
        let (req, n) = resp::decode_request(&buf).unwrap().unwrap();
        prop_assert_eq!(n, buf.len());
        prop_assert_eq!(req.to_vecs(&buf), args);
        for i in 0..buf.len() {
            prop_assert!(resp::decode_request(&buf[..i]).unwrap().is_none(), "split {}", i);
        }
    }

    #[test]
    fn pipelined_requests_decode_in_order(batch in prop::collection::vec(argv(), 1..6)) {
        let mut buf = Vec::new();
        for args in &batch {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            resp::encode_request(&mut buf, &refs);
        }
        let mut dec = resp::RequestDecoder::new();
        let mut req = resp::Request::new();
        let mut rest = &buf[..];
        for args in &batch {
            let n = dec.decode(rest, &mut req).unwrap().unwrap();
            prop_assert_eq!(&req.to_vecs(rest), args);
            rest = &rest[n..];
        }
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn reply_resp3_round_trips_and_splits(r in reply()) {
        let buf = r.to_bytes(Proto::Resp3);
        prop_assert_eq!(resp::decode_reply(&buf).unwrap(), Some((r.clone(), buf.len())));
        let (_, m) = resp::scan_reply(&buf).unwrap().unwrap();
        prop_assert_eq!(m, buf.len());
        for i in 0..buf.len() {
            prop_assert_eq!(resp::decode_reply(&buf[..i]).unwrap(), None);
        }
    }

    #[test]
    fn reply_resp2_round_trips(r in resp2_reply()) {
        let buf = r.to_bytes(Proto::Resp2);
        prop_assert_eq!(resp::decode_reply(&buf).unwrap(), Some((r, buf.len())));
    }

    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzz_support::resp_decode_stream(&data);
        fuzz_support::resp_reply_decode_stream(&data);
    }

    #[test]
    fn resp_like_bytes_never_panic(parts in prop::collection::vec(
        prop_oneof![
            Just(b"*".to_vec()), Just(b"$".to_vec()), Just(b"\r\n".to_vec()),
            Just(b"\"".to_vec()), Just(b"'".to_vec()), Just(b"\\x4".to_vec()),
            Just(b"%".to_vec()), Just(b"|".to_vec()), Just(b"_".to_vec()),
            "[0-9-]{1,4}".prop_map(String::into_bytes),
            prop::collection::vec(any::<u8>(), 0..4),
        ], 0..64)) {
        let data: Vec<u8> = parts.concat();
        fuzz_support::resp_decode_stream(&data);
        fuzz_support::resp_reply_decode_stream(&data);
    }
}

/// Inputs the fuzz targets found (kept so `cargo test` replays them).
#[test]
fn fuzz_regressions() {
    // LF inside a simple error line: now rejected by the strict reply decoder.
    fuzz_support::resp_reply_decode_stream(b"-\n-\r\n\x00~~");
    // RESP2 null array: decodes, and RESP3 re-encodes it as the single null `_`.
    fuzz_support::resp_reply_decode_stream(b"*-1\r\n");
}
