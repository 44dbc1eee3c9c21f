//! `LINK SET|ADD` on encoded bytes (`link::apply_encoded`, the node's fast path) against the
//! general path it short-cuts (decode, `link::apply_owned`, fill the field's missing hints,
//! encode): whenever the fast path answers, its reply and bytes are exactly the general
//! path's; when it declines, the general path still decides.

use proptest::prelude::*;
use ringlet_record::hash::{Out, Write};
use ringlet_record::{link, Field, Link, Record};

mod common;
use common::{bytes, record, resolve};

/// The general path, as `ringlet-server`'s `cmd::record::run` takes it.
fn general(argv: &[&[u8]], rec: Option<Record>) -> (Out, Option<(Vec<u8>, Record)>) {
    let mut a = link::apply_owned(argv, rec);
    if let Write::Store(r) = &mut a.write {
        r.fill_hints(argv[3], resolve);
    }
    match a.write {
        Write::Store(r) => (a.reply, Some((r.encode(), r))),
        _ => (a.reply, None),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn splice_equals_the_general_path(
        rec in record(),
        pick in any::<prop::sample::Index>(),
        own_name in any::<bool>(),
        new_name in bytes(3),
        add in any::<bool>(),
        targets in prop::collection::vec(bytes(6), 1..5),
    ) {
        let name = match &rec {
            Some(r) if own_name && !r.is_empty() => {
                r.iter().nth(pick.index(r.len())).map(|(n, _)| n.to_vec()).unwrap_or_default()
            }
            _ => new_name,
        };
        let mut argv: Vec<&[u8]> = vec![b"LINK", if add { b"ADD" } else { b"set" }, b"k", &name];
        let n = if add { targets.len() } else { 1 };
        argv.extend(targets[..n].iter().map(Vec::as_slice));
        let enc = rec.as_ref().map(Record::encode);
        let fast = link::apply_encoded(&argv, enc.as_deref(), resolve);
        let (reply, stored) = general(&argv, rec.clone());
        if let Some((out, bytes)) = fast {
            prop_assert_eq!(out, reply);
            let Some((want, r)) = stored else {
                return Err(TestCaseError::fail("the general path stored nothing"));
            };
            prop_assert_eq!(&bytes, &want);
            // The spliced bytes decode to the general path's record, hints included (a new
            // link after old ones may leave out the table of the last old one: flag 5).
            prop_assert_eq!(Record::decode(&bytes).expect("decodes"), r);
        } else {
            // Declined: only where the general path must decide (an error, a single link
            // turned into a list, or old links without a hint that it fills).
            let f = rec.as_ref().and_then(|r| r.get(&name));
            let declinable = add && match f {
                Some(Field::Bytes(_)) | Some(Field::Link(_)) => true,
                Some(Field::Links(ls)) => ls.iter().any(|l| l.hint.is_none()),
                None => false,
            };
            prop_assert!(declinable, "declined {:?} on {:?}", argv, rec);
        }
    }
}

#[test]
fn splice_declines_what_it_cannot_decide() {
    let mut r = Record::new();
    r.insert(b"b".to_vec(), Field::Bytes(b"x".to_vec()));
    r.insert(b"l".to_vec(), Field::Link(Link::to("t")));
    r.insert(b"ls".to_vec(), Field::Links(vec![Link::to("u")]));
    let enc = r.encode();
    let add = |f: &'static [u8]| -> Vec<&'static [u8]> { vec![b"LINK", b"ADD", b"k", f, b"t2"] };
    // Plain bytes (an error), a single link (becomes a list), a list with a link to fill.
    for f in [&b"b"[..], b"l", b"ls"] {
        assert!(link::apply_encoded(&add(f), Some(&enc), resolve).is_none());
    }
    // A target over the key bound, a garbage record, GET, a SET of two targets.
    let long = vec![b'k'; ringlet_types::limits::KEY_BYTES_MAX as usize + 1];
    assert!(
        link::apply_encoded(&[b"LINK", b"ADD", b"k", b"n", &long], Some(&enc), resolve).is_none()
    );
    assert!(link::apply_encoded(&add(b"n"), Some(&[9, 9, 9]), resolve).is_none());
    assert!(link::apply_encoded(&[b"LINK", b"GET", b"k", b"ls"], Some(&enc), resolve).is_none());
    assert!(link::apply_encoded(
        &[b"LINK", b"SET", b"k", b"n", b"a", b"b"],
        Some(&enc),
        resolve
    )
    .is_none());
    // A new field and a missing key are spliced.
    let (out, b) = link::apply_encoded(&add(b"n"), Some(&enc), resolve).expect("spliced");
    assert_eq!(out, Out::Int(1));
    assert_eq!(Record::decode(&b).expect("decodes").len(), 4);
    let (out, b) = link::apply_encoded(&add(b"n"), None, resolve).expect("spliced");
    assert_eq!(out, Out::Int(1));
    assert_eq!(
        Record::decode(&b)
            .expect("decodes")
            .get(b"n")
            .map(Field::display),
        Some(b"t2".to_vec())
    );
}
