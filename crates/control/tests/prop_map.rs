//! A cluster map arrives from the wire and from etcd: decoding arbitrary or corrupted JSON
//! must return an error or a map that passes validation — never panic.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use ringlet_control::{Action, ClusterMap, ControlConfig, ControlPlane, Input};
use ringlet_types::{MemgestKind, NodeId};

fn sample_json() -> String {
    let mut cp = ControlPlane::new(ControlConfig::default()).unwrap();
    for i in 1..=4 {
        cp.step(
            0,
            Input::Join {
                node: NodeId(i),
                addr: format!("10.0.0.{i}:7000"),
                incarnation: 1,
            },
        );
    }
    let out = cp.step(0, Input::Bootstrap { active: 3 });
    assert!(out.iter().any(|a| matches!(a, Action::Publish(_))));
    cp.step(
        0,
        Input::CreateMemgest {
            name: "r3".into(),
            kind: MemgestKind::Rep { r: 3 },
            evictable: None,
        },
    );
    cp.map().to_json().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn decode_random_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let s = String::from_utf8_lossy(&bytes);
        if let Ok(m) = ClusterMap::from_json(&s) {
            m.check_invariants();
        }
    }

    #[test]
    fn decode_mutated_map_never_panics(pos in any::<usize>(), byte in any::<u8>(), cut in any::<bool>()) {
        let json = sample_json();
        let mut b = json.into_bytes();
        let i = pos % b.len();
        if cut { b.truncate(i); } else { b[i] = byte; }
        let s = String::from_utf8_lossy(&b);
        if let Ok(m) = ClusterMap::from_json(&s) {
            m.check_invariants();
            // A map that decodes also re-encodes to something that decodes to itself.
            let again = ClusterMap::from_json(&m.to_json().unwrap()).unwrap();
            prop_assert_eq!(again, m);
        }
    }
}
