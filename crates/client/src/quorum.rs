//! The quorum-read decision rule (docs/design/cluster-replication.md "Reads"; the same rule
//! as the simulator's client, `decide_quorum` in crates/sim, which the linearizability
//! checker exercises under faults).
//!
//! A read sends one READ_REPLICA leg to each of the first `depth` members of the key's cohort
//! (coordinator first) and feeds every answer, in arrival order, to [`decide`]:
//!
//! - a version wins when a majority of the first R members returned exactly it, R being the
//!   number of copies of the memgest the replies name (`rep:3` → 2 of the first 3);
//! - the data comes from the first responder that had the winning version;
//! - "not found" (version 0) only counts if the coordinator is in the agreeing set: a key of
//!   a single-copy memgest (`none`) lives only on the coordinator, so replicas cannot know it;
//! - a single-copy key the coordinator holds is decided by the coordinator alone;
//! - several winners (possible only across memgests): the highest version.
//!
//! No decision: the caller retries and then falls back to a coordinator read.
//!
//! Why this is linearizable: a node's reported version of a key only grows, a write is
//! acknowledged only once a majority of its R holders stored it, and two majorities of the
//! same R nodes intersect; a node that may lack data (syncing, lease lapsed, fenced) does not
//! answer a leg at all.

use ringlet_control::ClusterMap;
use ringlet_types::{MemgestId, NodeId, Version};

/// One answered leg: who, its version, memgest and value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Leg<V> {
    pub(crate) node: NodeId,
    pub(crate) version: Version,
    pub(crate) memgest: MemgestId,
    pub(crate) value: Option<V>,
}

/// The decided read: `Some((version, value))` once the replies so far settle it (`value`
/// `None`: not found or deleted), `None` while they do not.
pub(crate) fn decide<V: Clone>(
    map: &ClusterMap,
    cohort: &[NodeId],
    replies: &[Leg<V>],
) -> Option<(Version, Option<V>)> {
    let coord = *cohort.first()?;
    // A single-copy key is decided by the coordinator alone.
    if let Some(c) = replies.iter().find(|l| l.node == coord) {
        if c.version != Version::ZERO && map.copies(c.memgest) == 1 {
            return Some((c.version, c.value.clone()));
        }
    }
    // R for "not found": the most copies any reply's memgest has, else the cohort we asked.
    let max_copies = replies
        .iter()
        .filter(|l| l.version != Version::ZERO)
        .map(|l| map.copies(l.memgest))
        .max()
        .unwrap_or(cohort.len());
    let mut best: Option<(Version, Option<V>)> = None;
    // At most `cohort.len()` replies (one per member): quadratic is a handful of steps.
    for (i, first) in replies.iter().enumerate() {
        let v = first.version;
        if replies[..i].iter().any(|l| l.version == v) {
            continue; // this version was considered at its first responder
        }
        let r = if v == Version::ZERO {
            if !replies.iter().any(|l| l.node == coord && l.version == v) {
                continue;
            }
            max_copies
        } else {
            map.copies(first.memgest)
        };
        let holders = &cohort[..r.min(cohort.len())];
        let count = replies
            .iter()
            .filter(|l| l.version == v && holders.contains(&l.node))
            .count();
        if count > r / 2 && best.as_ref().is_none_or(|(b, _)| v > *b) {
            best = Some((v, first.value.clone()));
        }
    }
    best
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ringlet_control::{ControlConfig, ControlPlane, Input};
    use ringlet_types::MemgestKind;

    fn map() -> std::sync::Arc<ClusterMap> {
        let mut cp = ControlPlane::new(ControlConfig {
            s: 1,
            d: 2,
            lease_ms: 1500,
            ..ControlConfig::default()
        })
        .unwrap();
        for i in 1..=3 {
            cp.step(
                0,
                Input::Join {
                    node: NodeId(i),
                    addr: String::new(),
                    incarnation: 1,
                },
            );
        }
        cp.step(0, Input::Bootstrap { active: 3 });
        cp.step(
            0,
            Input::CreateMemgest {
                name: "r3".into(),
                kind: MemgestKind::Rep { r: 3 },
                evictable: None,
            },
        );
        cp.map().clone()
    }

    fn leg(n: u32, v: u128, m: MemgestId, val: Option<&str>) -> Leg<String> {
        Leg {
            node: NodeId(n),
            version: Version(v),
            memgest: m,
            value: val.map(str::to_string),
        }
    }

    #[test]
    fn the_simulator_cases() {
        let m = map();
        let r3 = m.memgest_by_name("r3").unwrap();
        let cohort = [NodeId(1), NodeId(2), NodeId(3)];
        // Two of three agree: decided, data from the agreeing replies.
        let replies = [leg(2, 5, r3, Some("a")), leg(3, 5, r3, Some("a"))];
        assert_eq!(
            decide(&m, &cohort, &replies),
            Some((Version(5), Some("a".into())))
        );
        // Disagreement: no decision yet.
        let replies = [leg(2, 5, r3, Some("a")), leg(3, 4, r3, Some("b"))];
        assert_eq!(decide(&m, &cohort, &replies), None);
        // "Not found" from two replicas without the coordinator is not a quorum.
        let replies = [
            leg(2, 0, MemgestId::NONE, None),
            leg(3, 0, MemgestId::NONE, None),
        ];
        assert_eq!(decide(&m, &cohort, &replies), None);
        // With the coordinator it is.
        let replies = [
            leg(1, 0, MemgestId::NONE, None),
            leg(3, 0, MemgestId::NONE, None),
        ];
        assert_eq!(decide(&m, &cohort, &replies), Some((Version(0), None)));
        // The coordinator alone decides a `none` key.
        let replies = [leg(1, 9, MemgestId::NONE, Some("n"))];
        assert_eq!(
            decide(&m, &cohort, &replies),
            Some((Version(9), Some("n".into())))
        );
    }

    #[test]
    fn data_from_the_first_responder_and_newest_majority() {
        let m = map();
        let r3 = m.memgest_by_name("r3").unwrap();
        let cohort = [NodeId(1), NodeId(2), NodeId(3)];
        // The slow third member changes nothing once two agree.
        let replies = [
            leg(3, 7, r3, Some("first")),
            leg(1, 7, r3, Some("second")),
            leg(2, 6, r3, Some("old")),
        ];
        assert_eq!(
            decide(&m, &cohort, &replies),
            Some((Version(7), Some("first".into())))
        );
        // A tombstone with a majority reads as absent.
        let replies = [leg(2, 8, r3, None), leg(3, 8, r3, None)];
        assert_eq!(decide(&m, &cohort, &replies), Some((Version(8), None)));
        // One reply of a rep:3 key is never enough.
        let replies = [leg(1, 8, r3, Some("x"))];
        assert_eq!(decide(&m, &cohort, &replies), None);
        // Nodes outside the first R do not count.
        let cohort4 = [NodeId(1), NodeId(2), NodeId(3), NodeId(4)];
        let replies = [leg(4, 8, r3, Some("x")), leg(2, 8, r3, Some("x"))];
        assert_eq!(decide(&m, &cohort4, &replies), None);
    }
}
