//! Generators shared by the record crate's property tests (prop_put, prop_splice): random
//! records of bytes, links and link lists, with hints as a node would resolve them.

#![allow(dead_code)] // each test binary uses part of this module

use proptest::prelude::*;
use ringlet_record::{DataHint, Field, Hint, Link, Record};

pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

/// A deterministic resolver: some targets have no hint (not stored), the others one derived
/// from their bytes, with or without a data part. About a third are a single node's hints
/// (flag 4's form) in one of two tables, so that lists hold runs of links sharing a table
/// (flag 5, session 19) and runs broken by another table or another form.
pub fn resolve(t: &[u8]) -> Option<Hint> {
    let h = t.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    if h % 3 == 1 {
        let table = [
            (1u64 << 48) | ((1 << 18) << 20) | 2,
            (2u64 << 48) | ((1 << 19) << 20) | 5,
        ][(h >> 8) as usize & 1];
        return Some(Hint {
            node: 0,
            epoch: 0,
            table,
            entry: (table & 0xf_ffff) * 65536 + ((h >> 16) & 0xf_ffff) * 8,
            data: Some(DataHint {
                location: (h >> 20) as u32,
                crc: (h >> 32) as u32,
                memgest: 0,
            }),
        });
    }
    (h % 5 != 0).then_some(Hint {
        node: 0,
        epoch: 0,
        table: h >> 3,
        entry: h & 0xfff8,
        data: (h % 3 != 0).then_some(DataHint {
            location: h as u32,
            crc: (h >> 32) as u32,
            memgest: 0,
        }),
    })
}

pub fn link_strategy() -> impl Strategy<Value = Link> {
    (bytes(6), any::<bool>()).prop_map(|(target, hinted)| Link {
        hint: if hinted {
            resolve(&target).or(Some(Hint {
                node: 1,
                epoch: 2,
                table: 3,
                entry: 8,
                data: None,
            }))
        } else {
            None
        },
        target,
    })
}

pub fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        bytes(40).prop_map(Field::Bytes),
        link_strategy().prop_map(Field::Link),
        prop::collection::vec(link_strategy(), 0..6).prop_map(Field::Links),
    ]
}

pub fn record() -> impl Strategy<Value = Option<Record>> {
    prop::option::weighted(
        0.9,
        prop::collection::vec((bytes(3), field()), 1..6).prop_map(|fs| {
            let mut r = Record::new();
            for (n, f) in fs {
                r.insert(n, f);
            }
            r
        }),
    )
}
