//! Hash writes on the encoding (`hash::apply_encoded`, the node's path since session 25)
//! against the general path (decode, `hash::apply`, encode): the same reply and the same
//! record afterwards (or the same delete, or no write), for random records (bytes, links,
//! link lists) and random HSET / HMSET / HSETNX / HDEL / HINCRBY / HINCRBYFLOAT commands
//! naming fields the record has, new ones, and the same field twice.

use proptest::prelude::*;
use ringlet_record::hash::{apply, apply_encoded, EncodedWrite, Write};
use ringlet_record::Record;

mod common;
use common::{bytes, record};

/// A command: 0 HSET, 1 HMSET, 2 HSETNX, 3 HDEL, 4 HINCRBY, 5 HINCRBYFLOAT, with its field
/// picks (own field or new name) and values. Up to 11 picks, so that HSET and HDEL name
/// more than 8 fields at times (`record::find_name` binary-searches those, and compares a
/// few one by one).
type Cmd = (u8, Vec<(bool, prop::sample::Index, Vec<u8>, Vec<u8>)>);

fn cmd() -> impl Strategy<Value = Cmd> {
    (
        0u8..6,
        prop::collection::vec(
            (
                any::<bool>(),
                any::<prop::sample::Index>(),
                bytes(3),
                prop_oneof![bytes(8), Just(b"12".to_vec()), Just(b"-3.5".to_vec())],
            ),
            1..12,
        ),
    )
}

fn argv_of(rec: Option<&Record>, (kind, picks): &Cmd) -> Vec<Vec<u8>> {
    let name = |own: bool, pick: &prop::sample::Index, new: &[u8]| match rec {
        Some(r) if own && !r.is_empty() => r
            .iter()
            .nth(pick.index(r.len()))
            .map(|(n, _)| n.to_vec())
            .unwrap_or_default(),
        _ => new.to_vec(),
    };
    let word = ["HSET", "hmset", "HSetNX", "HDEL", "hincrby", "HINCRBYFLOAT"][*kind as usize];
    let mut argv = vec![word.as_bytes().to_vec(), b"k".to_vec()];
    match kind {
        0 | 1 => {
            for (own, pick, new, v) in picks {
                argv.push(name(*own, pick, new));
                argv.push(v.clone());
            }
        }
        3 => argv.extend(
            picks
                .iter()
                .map(|(own, pick, new, _)| name(*own, pick, new)),
        ),
        _ => {
            let (own, pick, new, v) = &picks[0];
            argv.push(name(*own, pick, new));
            argv.push(v.clone());
        }
    }
    argv
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]
    #[test]
    fn encoded_hash_writes_equal_the_general_path(rec in record(), c in cmd()) {
        let owned = argv_of(rec.as_ref(), &c);
        let argv: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let enc = rec.as_ref().map(Record::encode);
        let general = apply(&argv, rec.as_ref());
        let Some(fast) = apply_encoded(&argv, enc.as_deref(), apply) else {
            // Declined: the node runs the general path; only these cases may decline.
            prop_assert!(false, "declined {argv:?}");
            unreachable!()
        };
        prop_assert_eq!(&fast.reply, &general.reply, "{:?}", argv);
        match (&fast.write, &general.write) {
            (EncodedWrite::None, Write::None) | (EncodedWrite::Delete, Write::Delete) => {}
            (EncodedWrite::Store(bytes), Write::Store(r)) => {
                let got = Record::decode(bytes).expect("the fast path's bytes decode");
                prop_assert_eq!(&got, r, "{:?}", argv);
                // One encoding per record: the bytes are the general path's.
                prop_assert_eq!(bytes, &r.encode());
            }
            (f, g) => prop_assert!(false, "{argv:?}: fast {f:?}, general {g:?}"),
        }
    }
}

/// An arity error or a command it does not handle is declined, so the general path answers.
#[test]
fn arity_errors_and_other_commands_are_declined() {
    let rec = Record::new().encode();
    for argv in [
        &[&b"HSET"[..], b"k", b"f"][..],
        &[b"HSET", b"k", b"f", b"v", b"g"],
        &[b"HSETNX", b"k", b"f"],
        &[b"HDEL", b"k"],
        &[b"HGET", b"k", b"f"],
        &[b"HINCRBY", b"k", b"f", b"1", b"2"],
    ] {
        assert!(apply_encoded(argv, Some(&rec), apply).is_none(), "{argv:?}");
    }
}

/// A big hash: one more field is a copy of the record's bytes, not a decode of its fields
/// (what the path is for); the result is the general path's.
#[test]
fn one_field_into_a_big_hash() {
    let mut r = Record::new();
    for i in 0..20_000 {
        r.insert(
            format!("element:{i:08}").into_bytes(),
            ringlet_record::Field::Bytes(b"xxx".to_vec()),
        );
    }
    let enc = r.encode();
    let argv: [&[u8]; 4] = [b"HSET", b"k", b"new", b"v"];
    let fast = apply_encoded(&argv, Some(&enc), apply).expect("taken");
    assert_eq!(fast.reply, ringlet_record::hash::Out::Int(1));
    let EncodedWrite::Store(bytes) = fast.write else {
        panic!("{:?}", fast.write)
    };
    let Write::Store(want) = apply(&argv, Some(&r)).write else {
        panic!()
    };
    assert_eq!(bytes, want.encode());
}
