//! Unit tests: payloads built by hand for each encoding, and every way a payload is refused.
//! The listpack, ziplist and zipmap blobs come from the test encoders in their modules.

#![allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::unwrap_used
)]

use super::*;
use crate::listpack::tests::{encode as lp, Lp};
use crate::ziplist::tests::{encode as zl, Zl};

/// `body` with a footer of `version` and a correct CRC.
fn payload_v(body: &[u8], version: u16) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend(version.to_le_bytes());
    let crc = CRC64.checksum(&out);
    out.extend(crc.to_le_bytes());
    out
}

fn payload(body: &[u8]) -> Vec<u8> {
    payload_v(body, 10)
}

/// `s` as a raw RDB string.
fn raw(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_string(&mut out, s);
    out
}

/// `s` as an LZF-compressed RDB string.
fn lzf(s: &[u8]) -> Vec<u8> {
    let mut c = vec![0u8; s.len() + 64];
    let n = lzf_rust::compress(s, &mut c).unwrap();
    c.truncate(n);
    let mut out = vec![0xC3];
    encode_len(&mut out, c.len() as u64);
    encode_len(&mut out, s.len() as u64);
    out.extend(c);
    out
}

fn string_of(body: &[u8]) -> Result<Object, Error> {
    restore(&payload(&[&[TYPE_STRING][..], body].concat()))
}

fn hash(pairs: &[(&[u8], &[u8])]) -> Object {
    Object::Hash(
        pairs
            .iter()
            .map(|(a, b)| (a.to_vec(), b.to_vec()))
            .collect(),
    )
}

fn s(v: &[u8]) -> Object {
    Object::String(v.to_vec())
}

#[test]
fn crc_is_redis_crc64() {
    // The check value of Redis's src/crc64.c self-test.
    assert_eq!(CRC64.checksum(b"123456789"), 0xe9c6d914c4b8d9ca);
}

#[test]
fn dump_string_matches_redis_bytes() {
    // `SET s hello` then `DUMP s` on redis-server 7.0.15.
    let redis = b"\x00\x05hello\x0a\x00\x63\x72\xdf\x76\x65\x34\x20\x0a";
    assert_eq!(restore(redis), Ok(s(b"hello")));
    // The same object; only the footer differs (version 6, and so the CRC).
    let ours = dump_string(b"hello");
    assert_eq!(ours[..7], redis[..7]);
    assert_eq!(ours[7..9], [6, 0]);
    assert_eq!(ours, payload_v(&redis[..7], 6));
}

#[test]
fn listpack_hash_from_redis_decodes() {
    // `HSET h f v` then `DUMP h` on redis-server 7.0.15 (type 16).
    let redis = b"\x10\x0d\x0d\x00\x00\x00\x02\x00\x81f\x02\x81v\x02\xff\x0a\x00\x20\xf1\x3d\x44\x23\x54\x08\x9d";
    assert_eq!(restore(redis), Ok(hash(&[(b"f", b"v")])));
}

#[test]
fn string_lengths_in_every_width() {
    assert_eq!(string_of(b"\x00"), Ok(s(b"")));
    assert_eq!(string_of(b"\x03abc"), Ok(s(b"abc")));
    let v = vec![b'x'; 300];
    assert_eq!(string_of(&raw(&v)), Ok(s(&v)));
    assert_eq!(raw(&v)[0] >> 6, 1, "14-bit length");
    let v = vec![b'y'; 20_000];
    assert_eq!(raw(&v)[0], 0x80, "32-bit length");
    assert_eq!(string_of(&raw(&v)), Ok(s(&v)));
    // A 64-bit length (Redis writes one only past 4 GiB, but reads it at any size).
    assert_eq!(string_of(b"\x81\0\0\0\0\0\0\0\x02hi"), Ok(s(b"hi")));
    // An unknown length encoding (0x82) is refused.
    assert_eq!(
        string_of(b"\x82"),
        Err(Error::Malformed("unknown length encoding"))
    );
}

#[test]
fn integer_encodings_read_as_decimal_text() {
    assert_eq!(string_of(b"\xc0\x00"), Ok(s(b"0")));
    assert_eq!(string_of(b"\xc0\xff"), Ok(s(b"-1")));
    assert_eq!(string_of(b"\xc0\x7f"), Ok(s(b"127")));
    assert_eq!(string_of(b"\xc1\xff\x7f"), Ok(s(b"32767")));
    assert_eq!(string_of(b"\xc1\x00\x80"), Ok(s(b"-32768")));
    assert_eq!(string_of(b"\xc2\xff\xff\xff\x7f"), Ok(s(b"2147483647")));
    assert_eq!(string_of(b"\xc2\x00\x00\x00\x80"), Ok(s(b"-2147483648")));
    assert_eq!(
        string_of(b"\xc4"),
        Err(Error::Malformed("unknown string encoding"))
    );
    assert_eq!(string_of(b"\xc2\x00\x00"), Err(Error::Truncated));
}

#[test]
fn lzf_strings_decompress_to_their_stated_length() {
    let v: Vec<u8> = b"abcdefgh".iter().cycle().take(10_000).copied().collect();
    let body = lzf(&v);
    assert!(body.len() < 200, "compressible");
    assert_eq!(string_of(&body), Ok(s(&v)));

    // The same data with a stated length one short or one long is refused.
    let mut c = vec![0u8; v.len()];
    let n = lzf_rust::compress(&v, &mut c).unwrap();
    for stated in [v.len() - 1, v.len() + 1] {
        let mut body = vec![0xC3];
        encode_len(&mut body, n as u64);
        encode_len(&mut body, stated as u64);
        body.extend(&c[..n]);
        assert_eq!(
            string_of(&body),
            Err(Error::Malformed("invalid LZF compressed string")),
            "stated {stated}"
        );
    }
    // A stated length over the limit is refused before anything is allocated...
    let mut body = vec![0xC3, 0x01];
    encode_len(&mut body, u64::from(VALUE_BYTES_MAX) + 1);
    body.push(0);
    assert!(matches!(
        string_of(&body),
        Err(Error::TooLarge {
            what: "string length",
            ..
        })
    ));
    // ... and so is one that 4 bytes could never expand to.
    let mut body = vec![0xC3, 0x04];
    encode_len(&mut body, 4 * LZF_EXPANSION_MAX + 1);
    body.extend([0, 0, 0, 0]);
    assert_eq!(
        string_of(&body),
        Err(Error::Malformed(
            "LZF length larger than its data can expand to"
        ))
    );
    // Garbage LZF data.
    assert_eq!(
        string_of(b"\xc3\x02\x05\xe0\x00"),
        Err(Error::Malformed("invalid LZF compressed string"))
    );
    // An encoded string where the compressed length belongs.
    assert!(string_of(b"\xc3\xc0\x05").is_err());
}

#[test]
fn hash_table_reads_every_string_encoding() {
    let long: Vec<u8> = b"0123456789".iter().cycle().take(500).copied().collect();
    let mut body = vec![TYPE_HASH, 3];
    body.extend(raw(b"name"));
    body.extend(raw(b"value"));
    body.extend(b"\xc1\x39\x30"); // field 12345
    body.extend(b"\xc0\xf6"); // value -10
    body.extend(lzf(
        b"a long field name that compresses compresses compresses",
    ));
    body.extend(lzf(&long));
    assert_eq!(
        restore(&payload(&body)),
        Ok(hash(&[
            (b"name", b"value"),
            (b"12345", b"-10"),
            (
                b"a long field name that compresses compresses compresses",
                &long
            ),
        ]))
    );
}

#[test]
fn hash_table_errors() {
    // Duplicate field (12 as an integer and as text are the same field).
    let mut body = vec![TYPE_HASH, 2];
    body.extend(b"\xc0\x0c\x01a\x0212\x01b");
    assert_eq!(restore(&payload(&body)), Err(Error::DuplicateField));
    // No fields.
    assert_eq!(
        restore(&payload(&[TYPE_HASH, 0])),
        Err(Error::Malformed("a hash has no fields"))
    );
    // More fields than the limit, refused before reading them.
    let mut body = vec![TYPE_HASH];
    encode_len(&mut body, u64::from(ARRAY_ITEMS_MAX) + 1);
    assert!(matches!(
        restore(&payload(&body)),
        Err(Error::TooLarge {
            what: "hash field count",
            ..
        })
    ));
    // A huge count with few bytes is truncated, not allocated.
    let mut body = vec![TYPE_HASH];
    encode_len(&mut body, u64::from(ARRAY_ITEMS_MAX));
    body.extend(b"\x01a\x01b");
    assert_eq!(restore(&payload(&body)), Err(Error::Truncated));
    // A field name over KEY_BYTES_MAX.
    let mut body = vec![TYPE_HASH, 1];
    body.extend(raw(&vec![b'n'; KEY_BYTES_MAX as usize + 1]));
    body.extend(raw(b"v"));
    assert!(matches!(
        restore(&payload(&body)),
        Err(Error::TooLarge {
            what: "field name length",
            ..
        })
    ));
    // A value length over VALUE_BYTES_MAX, refused from its length alone.
    let mut body = vec![TYPE_HASH, 1, 1, b'f'];
    encode_len(&mut body, u64::from(VALUE_BYTES_MAX) + 1);
    assert!(matches!(
        restore(&payload(&body)),
        Err(Error::TooLarge {
            what: "string length",
            ..
        })
    ));
    // The count itself must be a plain length.
    assert!(restore(&payload(&[TYPE_HASH, 0xC0, 1])).is_err());
}

#[test]
fn hash_total_bytes_are_bounded() {
    let half = VALUE_BYTES_MAX as usize / 2;
    let mut h = HashBuilder::with_capacity(2);
    h.push(b"a".to_vec(), vec![0; half]).unwrap();
    assert!(matches!(
        h.push(b"b".to_vec(), vec![0; half]),
        Err(Error::TooLarge {
            what: "hash size",
            ..
        })
    ));
}

#[test]
fn compact_hash_encodings_decode() {
    let want = hash(&[(b"f1", b"v1"), (b"7", b"-300")]);
    let blob = lp(
        &[Lp::S(b"f1"), Lp::S(b"v1"), Lp::I(7, 0), Lp::I(-300, 0xC0)],
        None,
    );
    let mut body = vec![TYPE_HASH_LISTPACK];
    body.extend(raw(&blob));
    assert_eq!(restore(&payload(&body)), Ok(want.clone()));

    let blob = zl(
        &[
            Zl::S(b"f1"),
            Zl::S(b"v1"),
            Zl::I(7, 0xF8),
            Zl::I(-300, 0xC0),
        ],
        None,
    );
    let mut body = vec![TYPE_HASH_ZIPLIST];
    body.extend(raw(&blob));
    assert_eq!(restore(&payload(&body)), Ok(want));

    let blob = crate::zipmap::tests::encode(&[(b"f1", b"v1"), (b"7", b"-300")], 1);
    let mut body = vec![TYPE_HASH_ZIPMAP];
    body.extend(raw(&blob));
    assert_eq!(
        restore(&payload(&body)),
        Ok(hash(&[(b"f1", b"v1"), (b"7", b"-300")]))
    );

    // A blob may itself be LZF-compressed (Redis compresses any string over 20 bytes).
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..40)
        .map(|i| (format!("field:{i}").into_bytes(), b"same value".to_vec()))
        .collect();
    let elements: Vec<Lp<'_>> = pairs
        .iter()
        .flat_map(|(f, v)| [Lp::S(f), Lp::S(v)])
        .collect();
    let mut body = vec![TYPE_HASH_LISTPACK];
    body.extend(lzf(&lp(&elements, None)));
    assert_eq!(restore(&payload(&body)), Ok(Object::Hash(pairs)));
}

#[test]
fn footer_is_checked_first() {
    let good = dump_string(b"v");
    assert_eq!(restore(&good), Ok(s(b"v")));
    // Any single flipped bit of the CRC or the body is a checksum error.
    for i in 0..good.len() {
        if i == good.len() - 10 || i == good.len() - 9 {
            continue; // the version bytes: see below
        }
        let mut bad = good.clone();
        bad[i] ^= 0x01;
        assert_eq!(restore(&bad), Err(Error::Checksum), "byte {i}");
    }
    // Version 13 (and 0) refused even with a correct CRC; 1..=12 accepted.
    let body = [TYPE_STRING, 1, b'v'];
    assert_eq!(
        restore(&payload_v(&body, 13)),
        Err(Error::Version { version: 13 })
    );
    assert_eq!(
        restore(&payload_v(&body, 0)),
        Err(Error::Version { version: 0 })
    );
    assert_eq!(
        restore(&payload_v(&body, 0x0A00)),
        Err(Error::Version { version: 0x0A00 })
    );
    for v in 1..=RDB_VERSION_MAX {
        assert_eq!(restore(&payload_v(&body, v)), Ok(s(b"v")), "version {v}");
    }
    // Too short to hold a footer.
    for n in 0..10 {
        assert_eq!(restore(&good[..n]), Err(Error::Checksum));
    }
    assert_eq!(
        Error::Version { version: 13 }.to_string(),
        "DUMP payload version or checksum are wrong"
    );
    assert_eq!(
        Error::Checksum.to_string(),
        "DUMP payload version or checksum are wrong"
    );
    assert_eq!(
        Error::TooLarge {
            what: "field name length",
            len: 65537,
            max: 65536
        }
        .to_string(),
        "DUMP payload's field name length 65537 is over Ringlet's limit of 65536"
    );
}

#[test]
fn oversized_payload_is_refused_before_its_crc() {
    let big = vec![0u8; COMMAND_ARG_BYTES_MAX as usize + 1];
    assert!(matches!(
        restore(&big),
        Err(Error::TooLarge {
            what: "payload length",
            ..
        })
    ));
}

#[test]
fn trailing_bytes_are_refused() {
    assert_eq!(
        restore(&payload(b"\x00\x01vXY")),
        Err(Error::TrailingBytes { count: 2 })
    );
    let mut body = vec![TYPE_HASH, 1];
    body.extend(b"\x01f\x01v\x00");
    assert_eq!(
        restore(&payload(&body)),
        Err(Error::TrailingBytes { count: 1 })
    );
}

#[test]
fn truncated_everywhere_with_a_valid_footer() {
    // Every prefix of each object's body, re-footed with a correct CRC, is refused (never
    // accepted as a shorter object, never a panic).
    let long: Vec<u8> = b"xyz".iter().cycle().take(1000).copied().collect();
    let mut hash_body = vec![TYPE_HASH, 2];
    hash_body.extend(raw(b"field"));
    hash_body.extend(lzf(&long));
    hash_body.extend(b"\xc1\x39\x30");
    hash_body.extend(raw(b"v"));
    let mut lp_body = vec![TYPE_HASH_LISTPACK];
    lp_body.extend(raw(&lp(&[Lp::S(b"f"), Lp::I(1, 0xF3)], None)));
    let mut zl_body = vec![TYPE_HASH_ZIPLIST];
    zl_body.extend(raw(&zl(&[Zl::S(b"f"), Zl::I(1, 0xD0)], None)));
    let bodies = [
        [&[TYPE_STRING][..], &raw(b"hello world")].concat(),
        [&[TYPE_STRING][..], &lzf(&long)].concat(),
        [&[TYPE_STRING][..], b"\xc2\x01\x02\x03\x04"].concat(),
        hash_body,
        lp_body,
        zl_body,
    ];
    for body in &bodies {
        assert!(restore(&payload(body)).is_ok());
        for cut in 0..body.len() {
            let r = restore(&payload(&body[..cut]));
            assert!(r.is_err(), "cut {cut} of {body:?}: {r:?}");
        }
    }
}

#[test]
fn other_types_are_refused_by_name() {
    let cases: [(u8, &str); 21] = [
        (1, "list"),
        (10, "list"),
        (14, "list"),
        (18, "list"),
        (2, "set"),
        (11, "set"),
        (20, "set"),
        (3, "sorted set"),
        (5, "sorted set"),
        (12, "sorted set"),
        (17, "sorted set"),
        (6, "module value"),
        (7, "module value"),
        (15, "stream"),
        (19, "stream"),
        (21, "stream"),
        (22, "hash with field expirations"),
        (23, "hash with field expirations"),
        (24, "hash with field expirations"),
        (25, "hash with field expirations"),
        (2, "set"),
    ];
    for (t, name) in cases {
        let err = restore(&payload(&[t, 0])).unwrap_err();
        assert_eq!(err, Error::Unsupported { type_name: name });
    }
    assert_eq!(
        Error::Unsupported { type_name: "set" }.to_string(),
        "DUMP payload holds a set, which Ringlet does not store"
    );
    for t in [8u8, 26, 200, 255] {
        assert_eq!(
            restore(&payload(&[t, 0])),
            Err(Error::UnknownType { type_byte: t })
        );
    }
}

#[test]
fn dump_hash_round_trips_and_uses_plain_encodings() {
    let big = vec![b'v'; 70_000];
    let fields: [(&[u8], &[u8]); 3] = [(b"a", b"1"), (b"", b""), (b"big", &big)];
    let p = dump_hash(fields.iter().copied());
    assert_eq!(p[0], TYPE_HASH);
    assert_eq!(p[1], 3);
    assert_eq!(&p[p.len() - 10..p.len() - 8], &[6, 0]);
    assert_eq!(restore(&p), Ok(hash(&fields)));
    // 100 fields: a 14-bit count.
    let names: Vec<Vec<u8>> = (0..100).map(|i| format!("f{i}").into_bytes()).collect();
    let p = dump_hash(names.iter().map(|n| (n.as_slice(), n.as_slice())));
    assert_eq!(&p[..3], &[TYPE_HASH, 0x40, 100]);
    match restore(&p) {
        Ok(Object::Hash(h)) => assert_eq!(h.len(), 100),
        other => panic!("{other:?}"),
    }
}

mod props {
    //! The compact hash decoders on mutated blobs (no footer involved): never a panic, and
    //! what they accept respects the limits.

    use super::*;
    use proptest::prelude::*;

    fn blobs() -> Vec<Vec<u8>> {
        let mid = vec![b'm'; 300];
        vec![
            lp(
                &[
                    Lp::S(b"f"),
                    Lp::I(-5000, 0xF1),
                    Lp::S(&mid),
                    Lp::I(1 << 40, 0xF4),
                    Lp::I(5, 0),
                    Lp::S(b"v"),
                ],
                None,
            ),
            zl(
                &[
                    Zl::S(&mid),
                    Zl::I(-5, 0xFE),
                    Zl::S(b"g"),
                    Zl::I(1 << 20, 0xF0),
                    Zl::I(3, 0xF4),
                    Zl::S(b""),
                ],
                None,
            ),
            crate::zipmap::tests::encode(&[(b"k", b"v"), (&mid, b"w")], 2),
        ]
    }

    fn check(r: Result<Fields, Error>) {
        if let Ok(h) = r {
            assert!(!h.is_empty());
            let mut seen = HashSet::new();
            for (f, v) in &h {
                assert!(f.len() <= KEY_BYTES_MAX as usize && v.len() <= VALUE_BYTES_MAX as usize);
                assert!(seen.insert(f));
            }
        }
    }

    proptest! {
        #[test]
        fn mutated_blobs_never_panic(
            which in 0usize..3,
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
            do_cut in any::<bool>(),
        ) {
            let mut b = blobs().swap_remove(which);
            for (at, byte) in &flips {
                let i = at.index(b.len());
                b[i] = *byte;
            }
            if do_cut {
                b.truncate(cut.index(b.len()));
            }
            check(listpack::decode_hash(&b));
            check(ziplist::decode_hash(&b));
            check(zipmap::decode(&b));
        }

        #[test]
        fn garbage_blobs_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
            check(listpack::decode_hash(&b));
            check(ziplist::decode_hash(&b));
            check(zipmap::decode(&b));
        }
    }
}
