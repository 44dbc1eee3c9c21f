//! Property tests of the record codec: every record round-trips through its encoding, the
//! encoding is canonical (decode then encode gives back the same bytes), and decoding random
//! bytes or mutated valid encodings never panics.

use proptest::prelude::*;
use ringlet_record::{DataHint, Field, Hint, Link, Record};

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn link() -> impl Strategy<Value = Link> {
    (
        bytes(12),
        prop::option::of((any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>())),
        prop::option::of((any::<u32>(), any::<u32>(), any::<u16>())),
    )
        .prop_map(|(target, h, d)| Link {
            target,
            hint: h.map(|(node, epoch, table, entry)| Hint {
                node,
                epoch,
                table,
                entry,
                data: d.map(|(location, crc, memgest)| DataHint {
                    location,
                    crc,
                    memgest,
                }),
            }),
        })
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        bytes(300).prop_map(Field::Bytes),
        link().prop_map(Field::Link),
        prop::collection::vec(link(), 0..8).prop_map(Field::Links),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    prop::collection::vec((bytes(10), field()), 0..12).prop_map(|fs| {
        let mut r = Record::new();
        for (n, f) in fs {
            r.insert(n, f);
        }
        r
    })
}

proptest! {
    #[test]
    fn round_trip(r in record()) {
        let b = r.encode();
        prop_assert_eq!(b.len(), r.encoded_len());
        prop_assert!(r.within_bounds());
        let d = Record::decode(&b).unwrap();
        prop_assert_eq!(&d, &r);
        let names: Vec<&[u8]> = d.iter().map(|(n, _)| n).collect();
        let want: Vec<&[u8]> = r.iter().map(|(n, _)| n).collect();
        prop_assert_eq!(names, want);
    }

    #[test]
    fn random_bytes_never_panic(b in bytes(200)) {
        if let Ok(r) = Record::decode(&b) {
            canonical(&r, &b)?;
        }
    }

    #[test]
    fn random_bytes_after_version_never_panic(b in bytes(200)) {
        let mut v = vec![ringlet_record::FORMAT_VERSION];
        v.extend_from_slice(&b);
        if let Ok(r) = Record::decode(&v) {
            canonical(&r, &v)?;
        }
    }

    #[test]
    fn mutated_encodings_never_panic(
        r in record(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..6),
    ) {
        let mut b = r.encode();
        for (at, byte, kind) in edits {
            if b.is_empty() {
                b.push(byte);
                continue;
            }
            let i = at.index(b.len());
            match kind {
                0 => b[i] = byte,
                1 => b[i] ^= 1 << (byte % 8),
                2 => { b.insert(i, byte); }
                _ => { b.truncate(i); }
            }
        }
        // Whatever decodes is canonical: it encodes back to the same bytes.
        if let Ok(d) = Record::decode(&b) {
            canonical(&d, &b)?;
        }
    }
}

/// Whatever decodes encodes back to the same bytes, except a hint in an older form that a
/// newer one writes shorter: the fixed 38-byte form (flag 2, written before session 14) whose
/// packed form (flag 3) is shorter, a single node's flag-3 hint, written in flag 4 since
/// session 15, and a flag-4 hint in a list that repeats the table of the link before it,
/// written in flag 5 since session 19. It is read and re-encoded, so the new bytes are
/// shorter and decode to the same record.
fn canonical(d: &Record, b: &[u8]) -> Result<(), TestCaseError> {
    let e = d.encode();
    if e != b {
        prop_assert!(
            e.len() < b.len(),
            "not canonical and not shorter: {:?} -> {:?}",
            b,
            e
        );
        prop_assert_eq!(&Record::decode(&e).expect("re-encoding decodes"), d);
        prop_assert!(
            b.contains(&2) || b.contains(&3) || b.contains(&4),
            "only a flag-2, 3 or 4 hint re-encodes: {:?}",
            b
        );
    }
    Ok(())
}

fn word() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"f".to_vec()),
        Just(b"g".to_vec()),
        Just(b"1".to_vec()),
        Just(b"-1.5".to_vec()),
        Just(b"depth".to_vec()),
        Just(b"LIMIT".to_vec()),
        Just(b"fields".to_vec()),
        bytes(4),
    ]
}

fn command() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let names = prop_oneof![
        Just("hset"),
        Just("hsetnx"),
        Just("hmset"),
        Just("hget"),
        Just("hmget"),
        Just("hgetall"),
        Just("hdel"),
        Just("hlen"),
        Just("hexists"),
        Just("hkeys"),
        Just("hvals"),
        Just("hincrby"),
        Just("hincrbyfloat"),
        Just("hstrlen"),
    ];
    (names, prop::collection::vec(word(), 0..7)).prop_map(|(n, mut rest)| {
        let mut v = vec![n.as_bytes().to_vec()];
        v.append(&mut rest);
        v
    })
}

proptest! {
    /// Any argv over any record: no panic, and every stored record is within bounds and
    /// non-empty (an emptied record is a delete).
    #[test]
    fn commands_never_panic(r in prop::option::of(record()), argv in command(), sub in 0u8..5) {
        use ringlet_record::hash::{apply, Write};
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let mut outs = vec![apply(&args, r.as_ref())];
        let subs: [&[u8]; 5] = [b"set", b"add", b"get", b"del", b"x"];
        let mut link: Vec<&[u8]> = vec![b"link", subs[sub as usize]];
        link.extend(args.iter().skip(1));
        outs.push(ringlet_record::link::apply(&link, r.as_ref()));
        for a in outs {
            if let Write::Store(s) = a.write {
                prop_assert!(!s.is_empty());
                prop_assert!(s.within_bounds());
            }
        }
        let mut chase: Vec<&[u8]> = vec![b"chase"];
        chase.extend(args.iter().skip(1));
        if let Ok(mut c) = ringlet_record::chase::Chase::parse(&chase) {
            for _ in 0..10 {
                let batch = c.next_batch();
                if batch.is_empty() { break; }
                for k in batch { c.feed(&k, r.as_ref()); }
            }
            let reply = c.finish();
            let keys: std::collections::BTreeSet<&[u8]> =
                reply.entries.iter().map(|e| e.key.as_slice()).collect();
            prop_assert_eq!(keys.len(), reply.entries.len(), "each key at most once");
            prop_assert!(reply.entries.len() <= ringlet_record::CHASE_LIMIT_DEFAULT as usize);
        }
    }
}

proptest! {
    /// `scan` (CHASE's borrowing walk) sees exactly the fields `decode` builds, with the same
    /// display strings and link targets, and never panics on arbitrary bytes.
    #[test]
    fn scan_agrees_with_decode(r in record(), noise in proptest::collection::vec(any::<u8>(), 0..64)) {
        let b = r.encode();
        let fields = ringlet_record::record::scan(&b).unwrap();
        prop_assert_eq!(fields.len(), r.len());
        for ((n, f), (rn, rf)) in fields.iter().zip(r.iter()) {
            prop_assert_eq!(*n, rn);
            prop_assert_eq!(f.display(), rf.display());
            let t: Vec<&[u8]> = f.targets().collect();
            let rt: Vec<&[u8]> = rf.targets().collect();
            prop_assert_eq!(t, rt);
        }
        let _ = ringlet_record::record::scan(&noise);
        // `scan_wanted` returns the named fields `scan` sees, in record order, whichever
        // and however many are asked (names absent from the record included).
        let mut wanted: Vec<Vec<u8>> = r.iter().map(|(n, _)| n.to_vec()).step_by(2).collect();
        wanted.push(b"absent-field".to_vec());
        let some = ringlet_record::record::scan_wanted(&b, &wanted).unwrap();
        let want: Vec<_> = fields.iter().filter(|(n, _)| wanted.iter().any(|w| w == n)).collect();
        prop_assert_eq!(some.len(), want.len());
        for ((n, f), (wn, wf)) in some.iter().zip(want) {
            prop_assert_eq!(n, wn);
            prop_assert_eq!(f.display(), wf.display());
        }
        let _ = ringlet_record::record::scan_wanted(&noise, &wanted);
    }
}
