//! Property tests of the DUMP payload codec.
//!
//! - `restore(dump_string(v))` and `restore(dump_hash(fields))` give back exactly what went in;
//! - `restore` of arbitrary bytes, and of real payloads with bytes flipped, inserted or cut,
//!   never panics. A mutated payload keeping its old footer must fail the CRC; re-footed
//!   with a correct CRC it reaches the parser, and then anything it accepts must respect the
//!   limits (no string or field over its bound, no empty hash, no field twice);
//! - the LZF decoder never panics on garbage.
//!
//! The corpus holds payloads `DUMP` returned on redis-server 7.0.15 (listpack hash with
//! every small integer width, LZF string, hashtable hash with an LZF value and an integer
//! field, integer string) besides our own `dump_*` output.

use proptest::prelude::*;
use ringlet_rdb::{dump_hash, dump_string, restore, Error, Object};
use ringlet_types::limits::{ARRAY_ITEMS_MAX, KEY_BYTES_MAX, VALUE_BYTES_MAX};
use std::collections::{BTreeMap, HashSet};

const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// DUMP replies from redis-server 7.0.15, with what they hold.
fn redis_corpus() -> Vec<(Vec<u8>, Object)> {
    let pairs = |p: &[(&str, &str)]| {
        Object::Hash(
            p.iter()
                .map(|(a, b)| (a.as_bytes().to_vec(), b.as_bytes().to_vec()))
                .collect(),
        )
    };
    vec![
        // HSET lp a 1 b -300 c 100000 d hello (type 16: 7-bit, 13-bit, 24-bit integers)
        (
            unhex("10242400000008008161020101816202ded402816302f2a08601048164028568656c6c6f06ff0a0038f19a0665e92316"),
            pairs(&[("a", "1"), ("b", "-300"), ("c", "100000"), ("d", "hello")]),
        ),
        // SET lzf <100 × "a">b (an LZF string)
        (
            unhex("00c3094065016161e058000161620a00e462c73f4bc3f938"),
            Object::String([&[b'a'; 100][..], b"b"].concat()),
        ),
        // HSET ht f1 <100 × "x"> 12345 v2 (type 4: LZF value, INT16 field)
        (
            unhex("0402026631c3094064017878e05700017878c139300276320a0066fffe3b06c511a9"),
            Object::Hash(vec![
                (b"f1".to_vec(), vec![b'x'; 100]),
                (b"12345".to_vec(), b"v2".to_vec()),
            ]),
        ),
        // SET int 12345 (INT16)
        (unhex("00c139300a009d94ea2793fc08b9"), Object::String(b"12345".to_vec())),
    ]
}

fn corpus() -> Vec<Vec<u8>> {
    let mut c: Vec<Vec<u8>> = redis_corpus().into_iter().map(|(p, _)| p).collect();
    c.push(dump_string(b"a short value"));
    c.push(dump_string(&[0u8; 300]));
    let fields: [(&[u8], &[u8]); 3] = [(b"f", b"v"), (b"n", b"123"), (b"", b"empty name")];
    c.push(dump_hash(fields.iter().copied()));
    c
}

/// Replace the footer of `p` (if it has one) with version 10 and a correct CRC.
fn refoot(p: &[u8]) -> Vec<u8> {
    let body = &p[..p.len().saturating_sub(10)];
    let mut out = body.to_vec();
    out.extend(10u16.to_le_bytes());
    let crc = CRC64.checksum(&out);
    out.extend(crc.to_le_bytes());
    out
}

/// What anything `restore` accepts must satisfy.
fn check_accepted(o: &Object) {
    match o {
        Object::String(v) => assert!(v.len() <= VALUE_BYTES_MAX as usize),
        Object::Hash(h) => {
            assert!(!h.is_empty());
            assert!(h.len() <= ARRAY_ITEMS_MAX as usize);
            let mut seen = HashSet::new();
            for (f, v) in h {
                assert!(f.len() <= KEY_BYTES_MAX as usize);
                assert!(v.len() <= VALUE_BYTES_MAX as usize);
                assert!(seen.insert(f), "duplicate field accepted");
            }
        }
    }
}

#[test]
fn redis_corpus_decodes_to_what_redis_stored() {
    for (p, want) in redis_corpus() {
        assert_eq!(restore(&p), Ok(want));
    }
}

/// One edit of a payload.
#[derive(Clone, Debug)]
enum Edit {
    Flip { at: usize, mask: u8 },
    Insert { at: usize, byte: u8 },
    Cut { at: usize },
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(at, mask)| Edit::Flip { at, mask }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Edit::Insert { at, byte }),
        any::<usize>().prop_map(|at| Edit::Cut { at }),
    ]
}

fn apply(p: &mut Vec<u8>, e: &Edit) {
    match *e {
        Edit::Flip { at, mask } => {
            let n = p.len();
            p[at % n] ^= mask;
        }
        Edit::Insert { at, byte } => {
            let at = at % (p.len() + 1);
            p.insert(at, byte);
        }
        Edit::Cut { at } => p.truncate(at % p.len()),
    }
}

proptest! {
    #[test]
    fn string_round_trips(v in prop::collection::vec(any::<u8>(), 0..20_000)) {
        prop_assert_eq!(restore(&dump_string(&v)), Ok(Object::String(v)));
    }

    #[test]
    fn hash_round_trips(
        fields in prop::collection::btree_map(
            prop::collection::vec(any::<u8>(), 0..40),
            prop::collection::vec(any::<u8>(), 0..300),
            1..80,
        )
    ) {
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = fields.into_iter().collect();
        let p = dump_hash(pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())));
        prop_assert_eq!(restore(&p), Ok(Object::Hash(pairs)));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(o) = restore(&bytes) {
            check_accepted(&o);
        }
        // With a correct footer the parser itself sees the bytes; lead with a type it parses.
        for t in [0u8, 4, 9, 13, 16] {
            let mut p = vec![t];
            p.extend(&bytes);
            p.extend([0; 10]);
            if let Ok(o) = restore(&refoot(&p)) {
                check_accepted(&o);
            }
        }
    }

    #[test]
    fn mutated_payloads_never_panic(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..4),
    ) {
        let corpus = corpus();
        let original = which.get(&corpus).clone();
        let mut p = original.clone();
        for e in &edits {
            if p.is_empty() {
                break;
            }
            apply(&mut p, e);
        }
        if p != original {
            // The old footer no longer matches: the CRC (or the version, if a flip hit it)
            // refuses it, or it is too short to have a footer.
            let r = restore(&p);
            prop_assert!(
                matches!(r, Err(Error::Checksum) | Err(Error::Version { .. })),
                "{:?}", r
            );
        }
        // Re-footed, the parser must refuse it cleanly or accept something within limits.
        if let Ok(o) = restore(&refoot(&p)) {
            check_accepted(&o);
        }
    }

    #[test]
    fn lzf_decoder_never_panics(
        input in prop::collection::vec(any::<u8>(), 0..300),
        out_len in 0usize..4096,
    ) {
        let mut out = vec![0u8; out_len];
        if let Ok(n) = lzf_rust::decompress(&input, &mut out) {
            prop_assert!(n <= out_len);
        }
    }
}

#[test]
fn hash_round_trip_keeps_order_and_binary_names() {
    // Not sorted: the payload's order is kept (btree_map above always feeds sorted input).
    let fields: BTreeMap<u8, u8> = (0..=255u8).map(|b| (b, b)).collect();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = fields
        .iter()
        .rev()
        .map(|(f, v)| (vec![*f, 0, 0xFF], vec![*v]))
        .collect();
    let p = dump_hash(pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())));
    assert_eq!(restore(&p), Ok(Object::Hash(pairs)));
}
