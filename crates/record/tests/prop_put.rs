//! `RECORD SET` straight into the encoding (`record::put_fields`, the node's path) against
//! the general path (decode, `put::apply`, fill the written link fields' hints, encode):
//! same reply, same bytes, for random records and random field specs, including names the
//! record has (replaced in place) and new ones (appended). Refusals are checked too.

use proptest::prelude::*;
use ringlet_record::hash::{Out, Write};
use ringlet_record::{put, record, DataHint, Field, Hint, Link, Record};

mod common;
use common::{bytes, record, resolve};

/// One field spec: 0 ATTR, 1 LINK, 2 LINKS, with its value or targets.
type Spec = (u8, Vec<u8>, Vec<Vec<u8>>);

fn spec() -> impl Strategy<Value = Spec> {
    (0u8..3, bytes(20), prop::collection::vec(bytes(6), 0..5))
}

fn argv_of<'a>(names: &'a [Vec<u8>], specs: &'a [Spec], counts: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
    let mut argv: Vec<&[u8]> = vec![b"RECORD", b"set", b"k"];
    for ((n, (kind, v, ts)), c) in names.iter().zip(specs).zip(counts) {
        match kind {
            0 => argv.extend([&b"ATTR"[..], n, v]),
            1 => argv.extend([&b"link"[..], n, ts.first().map_or(&b"t"[..], Vec::as_slice)]),
            _ => {
                argv.extend([&b"LINKS"[..], n, c]);
                argv.extend(ts.iter().map(Vec::as_slice));
            }
        }
    }
    argv
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn put_fields_equals_the_general_path(
        rec in record(),
        picks in prop::collection::vec((any::<bool>(), any::<prop::sample::Index>(), bytes(3)), 1..4),
        specs in prop::collection::vec(spec(), 3),
    ) {
        // Names: some of the record's own, some new; duplicates are dropped (a duplicate is
        // refused, checked below).
        let mut names: Vec<Vec<u8>> = Vec::new();
        for (own, pick, new) in &picks {
            let n = match &rec {
                Some(r) if *own && !r.is_empty() => {
                    r.iter().nth(pick.index(r.len())).map(|(n, _)| n.to_vec()).unwrap_or_default()
                }
                _ => new.clone(),
            };
            if !names.contains(&n) {
                names.push(n);
            }
        }
        let specs = &specs[..names.len()];
        let counts: Vec<Vec<u8>> = specs.iter().map(|s| s.2.len().to_string().into_bytes()).collect();
        let argv = argv_of(&names, specs, &counts);
        let parsed = put::parse(&argv).expect("valid specs parse");
        let enc = rec.as_ref().map(Record::encode);
        let (n, bytes) = record::put_fields(enc.as_deref(), &parsed, resolve).expect("encodes");
        let mut a = put::apply(&argv, rec.as_ref());
        let Write::Store(r) = &mut a.write else { panic!("general path did not store: {:?}", a.reply) };
        for f in put::link_fields(&parsed) {
            r.fill_hints(f, resolve);
        }
        prop_assert_eq!(Out::Int(n), a.reply);
        prop_assert_eq!(&bytes, &r.encode());
        prop_assert!(Record::decode(&bytes).is_ok());
    }
}

#[test]
fn record_set_refuses_bad_specs() {
    let bad: &[&[&[u8]]] = &[
        &[b"RECORD", b"SET", b"k", b"ATTR", b"a"],
        &[
            b"RECORD", b"SET", b"k", b"ATTR", b"a", b"1", b"ATTR", b"a", b"2",
        ],
        &[b"RECORD", b"SET", b"k", b"NOPE", b"a", b"1"],
        &[b"RECORD", b"SET", b"k", b"LINKS", b"a", b"2", b"t"],
        &[b"RECORD", b"SET", b"k", b"LINKS", b"a", b"-1", b"t"],
        &[b"RECORD", b"SET", b"k", b"LINKS", b"a", b"4097", b"t"],
        &[b"RECORD", b"SET", b"k", b"LINKS", b"a", b"x", b"t"],
        &[b"RECORD", b"GET", b"k", b"ATTR", b"a", b"1"],
        &[b"RECORD", b"SET", b"k", b"LINK", b"a", b"t", b"ATTR"],
    ];
    for argv in bad {
        assert!(put::parse(argv).is_err(), "{argv:?}");
        let a = put::apply(argv, None);
        assert!(matches!(a.reply, Out::Err(_)), "{argv:?}");
        assert!(matches!(a.write, Write::None));
    }
    let long = vec![b'k'; ringlet_types::limits::KEY_BYTES_MAX as usize + 1];
    assert!(put::parse(&[b"RECORD", b"SET", b"k", b"LINK", b"a", &long]).is_err());
    // An empty list is a list; a field replaced keeps its place, a new one is appended.
    let mut r = Record::new();
    r.insert(b"x".to_vec(), Field::Bytes(b"1".to_vec()));
    r.insert(b"l".to_vec(), Field::Links(vec![Link::to("old")]));
    let argv: &[&[u8]] = &[
        b"RECORD", b"SET", b"k", b"LINKS", b"l", b"2", b"a", b"b", b"LINK", b"n", b"a", b"LINKS",
        b"e", b"0",
    ];
    let p = put::parse(argv).expect("parses");
    let (n, b) = record::put_fields(Some(&r.encode()), &p, |_| None).expect("encodes");
    assert_eq!(n, 2);
    let got = Record::decode(&b).expect("decodes");
    let names: Vec<&[u8]> = got.iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec![&b"x"[..], b"l", b"n", b"e"]);
    assert_eq!(got.get(b"l").map(Field::display), Some(b"a b".to_vec()));
    // Garbage stored bytes are an error, not a panic.
    assert!(record::put_fields(Some(&[1, 9, 9]), &p, |_| None).is_err());
    let _ = DataHint {
        location: 0,
        crc: 0,
        memgest: 0,
    };
}

/// Hints are written packed (flag 3) when that is shorter than the fixed form (flag 2, 38
/// bytes), which is still read: a record written before session 14 decodes to the same
/// hint and re-encodes packed.
#[test]
fn packed_hints_round_trip_and_fixed_hints_still_decode() {
    let h = Hint {
        node: 0,
        epoch: 0,
        table: (1 << 48) | (1 << 20) | 3,
        entry: 123_456,
        data: Some(DataHint {
            location: 9_999,
            crc: 0xdead_beef,
            memgest: 0,
        }),
    };
    let mut r = Record::new();
    r.insert(
        b"f".to_vec(),
        Field::Link(Link {
            target: b"k".to_vec(),
            hint: Some(h),
        }),
    );
    let packed = r.encode();
    assert_eq!(packed[7], 3, "flag 3: {packed:?}");
    assert!(packed.len() < 8 + 38, "{} bytes", packed.len());
    assert_eq!(Record::decode(&packed).expect("decodes"), r);
    // The same link in the fixed form, by hand.
    let mut fixed = vec![1, 1, 1, b'f', 1, 1, b'k', 2];
    fixed.extend_from_slice(&h.node.to_le_bytes());
    fixed.extend_from_slice(&h.epoch.to_le_bytes());
    fixed.extend_from_slice(&h.table.to_le_bytes());
    fixed.extend_from_slice(&h.entry.to_le_bytes());
    fixed.extend_from_slice(&9_999u32.to_le_bytes());
    fixed.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    fixed.extend_from_slice(&0u16.to_le_bytes());
    assert_eq!(Record::decode(&fixed).expect("flag 2 still decodes"), r);
    // A hint whose packed form is not shorter is written fixed, and a packed one that long
    // is refused (one encoding per hint).
    let big = Hint {
        node: u32::MAX,
        epoch: u64::MAX,
        table: u64::MAX,
        entry: u64::MAX,
        data: h.data,
    };
    let mut r2 = Record::new();
    r2.insert(
        b"f".to_vec(),
        Field::Link(Link {
            target: b"k".to_vec(),
            hint: Some(big),
        }),
    );
    let b2 = r2.encode();
    assert_eq!(b2[7], 2, "fixed form: {b2:?}");
    assert_eq!(Record::decode(&b2).expect("decodes"), r2);
    let mut forged = vec![1, 1, 1, b'f', 1, 1, b'k', 3];
    for v in [u64::from(u32::MAX), u64::MAX, u64::MAX, u64::MAX, 9_999] {
        let mut v = v;
        while v >= 0x80 {
            forged.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        forged.push(v as u8);
    }
    forged.extend_from_slice(&[0xef, 0xbe, 0xad, 0xde, 0]);
    assert!(Record::decode(&forged).is_err());
}
