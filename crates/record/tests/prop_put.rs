//! `RECORD SET` straight into the encoding (`record::put_fields`, the node's path) against
//! the general path (decode, `put::apply`, fill the written link fields' hints, encode):
//! same reply, same bytes, for random records and random field specs, including names the
//! record has (replaced in place) and new ones (appended). Refusals are checked too.

use proptest::prelude::*;
use ringlet_record::hash::{Out, Write};
use ringlet_record::{put, record, DataHint, Field, Hint, Link, Packed, PutValue, Record};

mod common;
use common::{bytes, record, resolve};

/// One field spec: 0 ATTR, 1 LINK, 2 LINKS, 3 LINKSPACKED, 4 DEL, with its value or targets.
type Spec = (u8, Vec<u8>, Vec<Vec<u8>>);

fn spec() -> impl Strategy<Value = Spec> {
    (0u8..5, bytes(20), prop::collection::vec(bytes(6), 0..5))
}

/// The argument after a list spec's name: the count for LINKS, the packed targets for
/// LINKSPACKED.
fn count_or_blob((kind, _, ts): &Spec) -> Vec<u8> {
    if *kind == 3 {
        let mut b = Vec::new();
        Packed::encode(ts.iter().map(Vec::as_slice), &mut b);
        b
    } else {
        ts.len().to_string().into_bytes()
    }
}

fn argv_of<'a>(names: &'a [Vec<u8>], specs: &'a [Spec], counts: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
    let mut argv: Vec<&[u8]> = vec![b"RECORD", b"set", b"k"];
    for ((n, (kind, v, ts)), c) in names.iter().zip(specs).zip(counts) {
        match kind {
            0 => argv.extend([&b"ATTR"[..], n, v]),
            1 => argv.extend([&b"link"[..], n, ts.first().map_or(&b"t"[..], Vec::as_slice)]),
            2 => {
                argv.extend([&b"LINKS"[..], n, c]);
                argv.extend(ts.iter().map(Vec::as_slice));
            }
            3 => argv.extend([&b"linksPacked"[..], n, c]),
            _ => argv.extend([&b"Del"[..], n]),
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
        let counts: Vec<Vec<u8>> = specs.iter().map(count_or_blob).collect();
        let argv = argv_of(&names, specs, &counts);
        let parsed = put::parse(&argv).expect("valid specs parse");
        let enc = rec.as_ref().map(Record::encode);
        let (n, bytes) = record::put_fields(enc.as_deref(), &parsed, resolve).expect("encodes");
        let mut a = put::apply(&argv, rec.as_ref());
        if record::is_empty_encoding(&bytes) {
            // `DEL`s removed every field (or wrote none on a missing key): the node deletes
            // the key, or writes nothing; so does the general path.
            prop_assert!(specs.iter().all(|s| s.0 == 4), "{:?}", specs);
            let want = if rec.is_some() { Write::Delete } else { Write::None };
            prop_assert_eq!(&a.write, &want);
            prop_assert_eq!(Out::Int(n), a.reply);
            return Ok(());
        }
        let Write::Store(r) = &mut a.write else { panic!("general path did not store: {:?}", a.reply) };
        for f in put::link_fields(&parsed) {
            r.fill_hints(f, resolve);
        }
        prop_assert_eq!(Out::Int(n), a.reply);
        prop_assert_eq!(&bytes, &r.encode());
        // And back: the bytes decode to the general path's record (its hints' values too:
        // a flag-5 link takes its table from the link before).
        prop_assert_eq!(&Record::decode(&bytes).expect("decodes"), &*r);
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
        // LINKSPACKED: no blob, a length past the end, a non-shortest length, an overlong
        // length varint.
        &[b"RECORD", b"SET", b"k", b"LINKSPACKED", b"a"],
        &[
            b"RECORD",
            b"SET",
            b"k",
            b"LINKSPACKED",
            b"a",
            b"\x01t\x05ab",
        ],
        &[b"RECORD", b"SET", b"k", b"LINKSPACKED", b"a", b"\x81\x00t"],
        &[
            b"RECORD",
            b"SET",
            b"k",
            b"LINKSPACKED",
            b"a",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        ],
    ];
    for argv in bad {
        assert!(put::parse(argv).is_err(), "{argv:?}");
        let a = put::apply(argv, None);
        assert!(matches!(a.reply, Out::Err(_)), "{argv:?}");
        assert!(matches!(a.write, Write::None));
    }
    let long = vec![b'k'; ringlet_types::limits::KEY_BYTES_MAX as usize + 1];
    assert!(put::parse(&[b"RECORD", b"SET", b"k", b"LINK", b"a", &long]).is_err());
    // A packed target over the key bound, and more targets than a list may hold, are
    // refused before anything is stored; the bound itself is accepted.
    let mut blob = Vec::new();
    Packed::encode([&long[..]], &mut blob);
    let e = put::parse(&[b"RECORD", b"SET", b"k", b"LINKSPACKED", b"a", &blob]).unwrap_err();
    assert!(e.contains("maximum key size"), "{e}");
    let max = ringlet_record::LINKS_PER_FIELD_MAX;
    let mut blob = Vec::new();
    Packed::encode(std::iter::repeat_n(&b"t"[..], max), &mut blob);
    let ok = [&b"RECORD"[..], b"SET", b"k", b"LINKSPACKED", b"a", &blob];
    match put::parse(&ok).expect("the bound parses")[..] {
        [(_, PutValue::Packed(p))] => assert_eq!(p.len(), max),
        ref other => panic!("{other:?}"),
    }
    blob.extend_from_slice(b"\x01t");
    let e = put::parse(&[b"RECORD", b"SET", b"k", b"LINKSPACKED", b"a", &blob]).unwrap_err();
    assert!(e.contains("more than"), "{e}");
    // An empty blob is an empty list, as `LINKS a 0`.
    let p = put::parse(&[b"RECORD", b"SET", b"k", b"LINKSPACKED", b"a", b""]).expect("empty");
    let (_, b) = record::put_fields(None, &p, |_| None).expect("encodes");
    let got = Record::decode(&b).expect("decodes");
    assert_eq!(got.get(b"a"), Some(&Field::Links(Vec::new())));
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
    // DEL removes a field where it was, whatever it held, adds nothing, and a DEL of a
    // field the record lacks changes nothing; the last field removed empties the record.
    let argv: &[&[u8]] = &[
        b"RECORD", b"SET", b"k", b"DEL", b"l", b"DEL", b"zz", b"ATTR", b"y", b"2",
    ];
    let p = put::parse(argv).expect("parses");
    let (n, b2) = record::put_fields(Some(&r.encode()), &p, |_| None).expect("encodes");
    assert_eq!(n, 1);
    let got = Record::decode(&b2).expect("decodes");
    let names: Vec<&[u8]> = got.iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec![&b"x"[..], b"y"]);
    let argv: &[&[u8]] = &[b"RECORD", b"SET", b"k", b"DEL", b"x", b"DEL", b"y"];
    let p = put::parse(argv).expect("parses");
    let (n, b3) = record::put_fields(Some(&b2), &p, |_| None).expect("encodes");
    assert_eq!(n, 0);
    assert!(record::is_empty_encoding(&b3));
    assert!(matches!(put::apply(argv, Some(&got)).write, Write::Delete));
    assert!(matches!(put::apply(argv, None).write, Write::None));
    // DEL takes a name; a name deleted and set in one command is named twice.
    assert!(put::parse(&[b"RECORD", b"SET", b"k", b"DEL"]).is_err());
    assert!(put::parse(&[b"RECORD", b"SET", b"k", b"DEL", b"a", b"ATTR", b"a", b"1"]).is_err());
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
    // A cluster node's hint (node and epoch set): a single node's goes to flag 4, below.
    let h = Hint {
        node: 2,
        epoch: 5,
        table: (1 << 48) | (1 << 20) | 3,
        entry: 123_456,
        data: Some(DataHint {
            location: 9_999,
            crc: 0xdead_beef,
            memgest: 0,
        }),
    };
    let r = one_link(h);
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

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `{f: link "k" with h}` with the hint in flag 3's form, by hand.
fn flag3(h: &Hint) -> Vec<u8> {
    let d = h.data.expect("a data hint");
    let mut b = vec![1, 1, 1, b'f', 1, 1, b'k', 3];
    for v in [
        u64::from(h.node),
        h.epoch,
        h.table,
        h.entry,
        u64::from(d.location),
    ] {
        varint(&mut b, v);
    }
    b.extend_from_slice(&d.crc.to_le_bytes());
    varint(&mut b, u64::from(d.memgest));
    b
}

fn one_link(h: Hint) -> Record {
    let mut r = Record::new();
    r.insert(
        b"f".to_vec(),
        Field::Link(Link {
            target: b"k".to_vec(),
            hint: Some(h),
        }),
    );
    r
}

/// A single node's hints (node, epoch, memgest 0) are written in flag 4 (session 15): the
/// same values in fewer bytes. Records written before (flag 3, flag 2) still decode to the
/// same hint and re-encode in flag 4; forged flag-4 parts out of their range are refused.
#[test]
fn local_hints_are_shorter_and_older_forms_still_decode() {
    // What the single node's loader writes: the table after one pre-size switch (gen 1),
    // 2^18 buckets, an entry deep in the table, a data location ~100 MB in.
    let h = Hint {
        node: 0,
        epoch: 0,
        table: (1 << 48) | ((1 << 18) << 20) | 2,
        entry: (2 << 16) + 2_000_000 * 8,
        data: Some(DataHint {
            location: 12_500_000,
            crc: 0xdead_beef,
            memgest: 0,
        }),
    };
    let r = one_link(h);
    let local = r.encode();
    assert_eq!(local[7], 4, "flag 4: {local:?}");
    let old = flag3(&h);
    assert!(
        local.len() + 6 <= old.len(),
        "{} bytes against flag 3's {}",
        local.len(),
        old.len()
    );
    assert_eq!(Record::decode(&local).expect("decodes"), r);
    assert_eq!(Record::decode(&old).expect("flag 3 still decodes"), r);
    // Forged: the table's middle part over its 28 bits, the high part over 16, an entry
    // whose byte offset overflows.
    for parts in [
        [1u64, 1 << 28, 2, 5, 9],
        [1 << 16, 1, 2, 5, 9],
        [1, 1, 1 << 20, 5, 9],
        [1, 1, 2, u64::MAX / 4, 9],
        [1, 1, 2, 5, 1 << 32],
    ] {
        let mut b = vec![1, 1, 1, b'f', 1, 1, b'k', 4];
        for v in parts {
            varint(&mut b, v);
        }
        b.extend_from_slice(&[0xef, 0xbe, 0xad, 0xde]);
        assert!(Record::decode(&b).is_err(), "{parts:?}");
    }
    // A hint with a memgest, or an entry not a word of its table, keeps flag 3.
    for h2 in [
        Hint {
            data: Some(DataHint {
                memgest: 1,
                ..h.data.expect("data")
            }),
            ..h
        },
        Hint { entry: 13, ..h },
        Hint { entry: 8, ..h },
    ] {
        let b = one_link(h2).encode();
        assert_eq!(b[7], 3, "{h2:?}");
        assert_eq!(b, flag3(&h2));
    }
}

fn any_hint() -> impl Strategy<Value = Hint> {
    let small = prop_oneof![Just(0u64), 0u64..300, any::<u64>()];
    (
        prop_oneof![Just(0u32), any::<u32>()],
        small.clone(),
        small.clone(),
        prop_oneof![small, (0u64..1 << 40).prop_map(|e| e * 8)],
        any::<u32>(),
        any::<u32>(),
        prop_oneof![Just(0u16), any::<u16>()],
    )
        .prop_map(|(node, epoch, table, entry, location, crc, memgest)| Hint {
            node,
            epoch,
            table,
            entry,
            data: Some(DataHint {
                location,
                crc,
                memgest,
            }),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]
    /// Every data hint round-trips; one a single node writes is in flag 4 and shorter than
    /// its flag-3 form, which still decodes to it; every other keeps its session-14 form.
    #[test]
    fn every_data_hint_round_trips_in_its_shortest_form(h in any_hint()) {
        let r = one_link(h);
        let b = r.encode();
        prop_assert_eq!(&Record::decode(&b).expect("decodes"), &r);
        let d = h.data.expect("data");
        let base = (h.table & 0xf_ffff) * 65536;
        let local = h.node == 0
            && h.epoch == 0
            && d.memgest == 0
            && h.entry >= base
            && (h.entry - base) % 8 == 0;
        let old = flag3(&h);
        if local {
            prop_assert_eq!(b[7], 4);
            prop_assert!(b.len() < old.len(), "{:?} vs {:?}", b, old);
            prop_assert_eq!(&Record::decode(&old).expect("flag 3 decodes"), &r);
        } else {
            prop_assert!(b[7] == 3 || b[7] == 2, "{:?}", b);
            if b[7] == 3 {
                prop_assert_eq!(&b, &old);
            }
        }
    }
}

/// `link` in flag 4's form (`same`: flag 5's, the table left out), by hand.
fn local_link(out: &mut Vec<u8>, target: &[u8], h: &Hint, same: bool) {
    let d = h.data.expect("a data hint");
    varint(out, target.len() as u64);
    out.extend_from_slice(target);
    if same {
        out.push(5);
    } else {
        out.push(4);
        varint(out, h.table >> 48);
        varint(out, (h.table >> 20) & 0xfff_ffff);
        varint(out, h.table & 0xf_ffff);
    }
    varint(out, (h.entry - (h.table & 0xf_ffff) * 65536) / 8);
    varint(out, u64::from(d.location));
    out.extend_from_slice(&d.crc.to_le_bytes());
}

/// In a link list, a single node's hint whose table is the one of the link before leaves
/// the table out (flag 5, session 19): a loaded chunk's links all name one pre-sized table.
/// A change of table, a link without a flag-4-form hint in between, and the first link
/// write the table again (flag 4); flag 5 is refused where no table comes before it and in
/// a single-link field; a list written before session 19 (flag 4 throughout) still decodes
/// to the same record and re-encodes in the shorter form.
#[test]
fn list_links_leave_out_the_table_of_the_link_before() {
    let at = |table: u64, words: u64, location: u32| Hint {
        node: 0,
        epoch: 0,
        table,
        entry: (table & 0xf_ffff) * 65536 + words * 8,
        data: Some(DataHint {
            location,
            crc: 0x0102_0304 ^ location,
            memgest: 0,
        }),
    };
    let (t1, t2) = (
        (1u64 << 48) | ((1 << 18) << 20) | 2,
        (1u64 << 48) | ((1 << 19) << 20) | 9,
    );
    let links = [
        (&b"v:1"[..], Some(at(t1, 70_000, 12_000_000))),
        (b"v:22", Some(at(t1, 5, 3))),
        (b"v:333", Some(at(t1, 1 << 20, 99))),
        (b"v:4", Some(at(t2, 7, 1))),
        (b"v:5", Some(at(t2, 8, 2))),
        (b"v:6", None),
        (b"v:7", Some(at(t2, 9, 3))),
        (
            b"v:8",
            Some(Hint {
                node: 3,
                ..at(t2, 10, 4)
            }),
        ),
        (b"v:9", Some(at(t2, 11, 5))),
    ];
    let same = [false, true, true, false, true, false, false, false, false];
    let mut r = Record::new();
    r.insert(
        b"f".to_vec(),
        Field::Links(
            links
                .iter()
                .map(|(t, h)| Link {
                    target: t.to_vec(),
                    hint: *h,
                })
                .collect(),
        ),
    );
    let b = r.encode();
    let mut want = vec![1, 1, 1, b'f', 2, links.len() as u8];
    let mut old = want.clone();
    for ((t, h), &s) in links.iter().zip(&same) {
        match h {
            Some(h) if h.node == 0 => {
                local_link(&mut want, t, h, s);
                local_link(&mut old, t, h, false);
            }
            Some(h) => {
                let f3 = flag3(h);
                // `flag3` writes `{f: link "k" h}`: its link's hint starts after byte 7.
                for out in [&mut want, &mut old] {
                    varint(out, t.len() as u64);
                    out.extend_from_slice(t);
                    out.extend_from_slice(&f3[7..]);
                }
            }
            None => {
                for out in [&mut want, &mut old] {
                    varint(out, t.len() as u64);
                    out.extend_from_slice(t);
                    out.push(0);
                }
            }
        }
    }
    assert_eq!(b, want);
    assert!(
        b.len() + 2 * 5 <= old.len(),
        "{} against {}",
        b.len(),
        old.len()
    );
    assert_eq!(Record::decode(&b).expect("decodes"), r);
    assert_eq!(
        Record::decode(&old).expect("flag 4 throughout still decodes"),
        r
    );
    let fields = record::scan(&b).expect("scans");
    let got: Vec<_> = fields[0].1.links().map(|(t, h)| (t.to_vec(), h)).collect();
    let exp: Vec<_> = links.iter().map(|(t, h)| (t.to_vec(), *h)).collect();
    assert_eq!(got, exp);

    // Refused: flag 5 first in a list, after a link without a hint, in a single link.
    let h = at(t1, 5, 3);
    let mut first = vec![1, 1, 1, b'f', 2, 1];
    local_link(&mut first, b"k", &h, true);
    assert!(Record::decode(&first).is_err());
    assert!(record::scan(&first).is_err());
    let mut after_none = vec![1, 1, 1, b'f', 2, 2, 1, b'a', 0];
    local_link(&mut after_none, b"k", &h, true);
    assert!(Record::decode(&after_none).is_err());
    let mut single = vec![1, 1, 1, b'f', 1];
    local_link(&mut single, b"k", &h, true);
    assert!(Record::decode(&single).is_err());
    assert_eq!(one_link(h).encode()[7], 4, "a single link keeps its table");
}
