//! `MEMGEST LIST` / `MEMGEST INFO`: one [`MemgestReport`] per memgest, built from the map, the
//! nodes' usage reports and Ring's reliability model (appendix A, `ringlet_erasure::reliability`)
//! for stated node failure and rebuild rates. Pure: the control service calls it with its
//! current state.
//!
//! Counting: a node's engine counts every copy it holds, so `stored_*` sum all copies (a
//! `rep:3` key counts three times, once a replica caught up); `keys` divides by the copies the
//! scheme keeps (an estimate while replicas catch up or retire old copies after a move).
//! `ec` parity lives outside the engine's per-memgest counters, so `stored_bytes` of an ec
//! memgest is its data only; `nominal_overhead` gives the scheme's (K+M)/K.

use crate::map::ClusterMap;
use crate::plane::{EcUsage, UsageReport};
use ringlet_erasure::reliability::{reliability, ModelParams};
use ringlet_types::{MemgestKind, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Node failure and rebuild assumptions of the reliability figures.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRates {
    /// Mean time to failure of one node, hours.
    pub mttf_hours: f64,
    /// Time to rebuild one node's share (Ring Eqn. 6), hours.
    pub rebuild_hours: f64,
}

impl Default for ModelRates {
    /// MTTF 5 years, 6-hour rebuild: the pair with which the model reproduces every figure
    /// Ring's text states (docs/design/erasure-reliability.md, "Calibration").
    fn default() -> Self {
        ModelRates {
            mttf_hours: 43_800.0,
            rebuild_hours: 6.0,
        }
    }
}

impl ModelRates {
    /// Whether both rates are finite and positive (checked before the model runs).
    pub fn is_valid(&self) -> bool {
        self.mttf_hours.is_finite()
            && self.rebuild_hours.is_finite()
            && self.mttf_hours > 0.0
            && self.rebuild_hours > 0.0
    }
}

/// Everything `MEMGEST INFO` says about one memgest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemgestReport {
    pub id: u16,
    pub name: String,
    /// `none`, `rep:R` or `ec:K+M`.
    pub descriptor: String,
    pub default: bool,
    /// A drop is in progress: new writes naming it are refused.
    pub closing: bool,
    pub evictable: bool,
    /// Node failures an acknowledged write survives (DESIGN.md commit rules).
    pub failures_tolerated: u8,
    /// Memory per payload byte of the scheme: 1, R, or (K+M)/K.
    pub nominal_overhead: f64,
    /// Keys over all nodes, every copy counted.
    pub stored_keys: u64,
    /// Engine bytes (entry header + key + value, slab-rounded) over all nodes, every copy.
    pub stored_bytes: u64,
    /// Estimated distinct keys: `stored_keys / copies`.
    pub keys: u64,
    /// Nodes that may hold data (active, draining) and how many of them reported.
    pub nodes_holding: u32,
    pub nodes_reporting: u32,
    /// `s`, the data nodes of a placement group (the model's input).
    pub data_nodes: u32,
    pub rates: ModelRates,
    /// Probability of losing data within a year (None: the model refused, see
    /// `model_error`).
    pub annual_loss_probability: Option<f64>,
    /// `-log10(annual_loss_probability)`; None if infinite.
    pub loss_nines: Option<f64>,
    /// Interval availability over a year.
    pub availability: Option<f64>,
    pub availability_nines: Option<f64>,
    pub model_error: Option<String>,
    /// For an ec memgest: the erasure-coded storage of the whole cluster, *every ec memgest
    /// together* (values, arena, parity, metadata; the replica core does not split it per
    /// memgest). None for other schemes.
    pub ec_cluster: Option<EcUsage>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Memory per payload byte of `kind`.
pub fn nominal_overhead(kind: MemgestKind) -> f64 {
    match kind {
        MemgestKind::None => 1.0,
        MemgestKind::Rep { r } => f64::from(r),
        MemgestKind::Ec { k, m } => f64::from(k + m) / f64::from(k),
    }
}

/// One report per memgest of `map`, in id order.
pub fn memgest_reports(
    map: &ClusterMap,
    usage: &BTreeMap<NodeId, UsageReport>,
    rates: ModelRates,
) -> Vec<MemgestReport> {
    let holders: Vec<NodeId> = map
        .nodes
        .iter()
        .filter(|(_, n)| {
            matches!(
                n.state,
                crate::map::NodeState::Active | crate::map::NodeState::Draining
            )
        })
        .map(|(id, _)| *id)
        .collect();
    let reports: Vec<&UsageReport> = holders
        .iter()
        .filter_map(|n| {
            let inc = map.nodes.get(n)?.incarnation;
            usage.get(n).filter(|r| r.incarnation == inc)
        })
        .collect();
    let s = map.placement.as_ref().map_or(0, |p| u32::from(p.s));
    let ec_total = reports
        .iter()
        .fold(EcUsage::default(), |a, r| a.plus(&r.ec));
    map.memgests
        .iter()
        .map(|(id, m)| {
            let (stored_keys, stored_bytes) = reports
                .iter()
                .filter_map(|r| r.memgests.get(id))
                .fold((0u64, 0u64), |(k, b), u| {
                    (k.saturating_add(u.keys), b.saturating_add(u.bytes))
                });
            let copies = map.copies(*id).max(1) as u64;
            let model = if !rates.is_valid() {
                Err("failure and rebuild hours must be positive and finite".to_string())
            } else if s == 0 {
                Err("the cluster is not bootstrapped".to_string())
            } else {
                reliability(
                    m.kind,
                    &ModelParams::from_hours(s, rates.mttf_hours, rates.rebuild_hours),
                )
                .map_err(|e| e.to_string())
            };
            let (loss, nines, avail, avail_nines, model_error) = match model {
                Ok(r) => (
                    finite(r.annual_loss_probability),
                    finite(r.nines),
                    finite(r.availability),
                    finite(r.availability_nines),
                    None,
                ),
                Err(e) => (None, None, None, None, Some(e)),
            };
            MemgestReport {
                id: id.0,
                name: m.name.clone(),
                descriptor: m.kind.to_string(),
                default: *id == map.default_memgest,
                closing: m.closing,
                evictable: m.evictable,
                failures_tolerated: m.kind.failures_tolerated(),
                nominal_overhead: nominal_overhead(m.kind),
                stored_keys,
                stored_bytes,
                keys: stored_keys / copies,
                nodes_holding: holders.len() as u32,
                nodes_reporting: reports.len() as u32,
                data_nodes: s,
                rates,
                annual_loss_probability: loss,
                loss_nines: nines,
                availability: avail,
                availability_nines: avail_nines,
                model_error,
                ec_cluster: matches!(m.kind, MemgestKind::Ec { .. }).then_some(ec_total),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::plane::{Action, ControlConfig, ControlPlane, Input, MemgestUsage};
    use ringlet_types::MemgestId;

    #[test]
    fn reports_sum_copies_and_rank_schemes_by_reliability() {
        let mut cp = ControlPlane::new(ControlConfig {
            s: 3,
            d: 2,
            lease_ms: 1000,
            ..ControlConfig::default()
        })
        .unwrap();
        for i in 1..=5 {
            cp.step(
                0,
                Input::Join {
                    node: NodeId(i),
                    addr: format!("n{i}"),
                    incarnation: 1,
                },
            );
        }
        cp.step(0, Input::Bootstrap { active: 5 });
        for (n, k) in [
            ("rep:3", "rep:3"),
            ("ec:3+2", "ec:3+2"),
            ("ec:3+1", "ec:3+1"),
        ] {
            let out = cp.step(
                0,
                Input::CreateMemgest {
                    name: n.into(),
                    kind: MemgestKind::parse(k).unwrap(),
                    evictable: None,
                },
            );
            assert!(matches!(out[0], Action::Publish(_)));
        }
        let r3 = cp.map().memgest_by_name("rep:3").unwrap();
        for n in 1..=3 {
            cp.step(
                1,
                Input::Usage {
                    node: NodeId(n),
                    incarnation: 1,
                    epoch: cp.map().epoch,
                    memgests: vec![(
                        r3,
                        MemgestUsage {
                            keys: 10,
                            bytes: 1000,
                        },
                    )],
                    ec: crate::plane::EcUsage {
                        payload_bytes: 100,
                        data_bytes: 120,
                        parity_bytes: 80,
                        meta_bytes: 10,
                    },
                },
            );
        }
        let reps = memgest_reports(cp.map(), cp.usage(), ModelRates::default());
        let by = |n: &str| reps.iter().find(|r| r.name == n).unwrap().clone();
        let rep3 = by("rep:3");
        assert_eq!(
            (rep3.stored_keys, rep3.stored_bytes, rep3.keys),
            (30, 3000, 10)
        );
        assert_eq!(rep3.nodes_reporting, 3);
        assert_eq!(rep3.nodes_holding, 5);
        assert_eq!(rep3.failures_tolerated, 1);
        assert_eq!(rep3.ec_cluster, None);
        let ec = by("ec:3+2").ec_cluster.unwrap();
        assert_eq!((ec.payload_bytes, ec.parity_bytes), (300, 240));
        let none = by("none");
        assert!(none.default);
        assert_eq!(none.id, MemgestId::NONE.0);
        // The model ranks them: ec:3+2 loses data far less often than ec:3+1 and none.
        let p = |r: &MemgestReport| r.annual_loss_probability.unwrap();
        assert!(p(&by("ec:3+2")) < p(&by("ec:3+1")));
        assert!(p(&by("ec:3+1")) < p(&none));
        assert!((by("ec:3+2").nominal_overhead - 5.0 / 3.0).abs() < 1e-12);
        // Bad rates are an error in the report, not a panic.
        let bad = memgest_reports(
            cp.map(),
            cp.usage(),
            ModelRates {
                mttf_hours: 0.0,
                rebuild_hours: 6.0,
            },
        );
        assert!(bad.iter().all(|r| r.model_error.is_some()));
        let json = serde_json::to_string(&reps).unwrap();
        let back: Vec<MemgestReport> = serde_json::from_str(&json).unwrap();
        assert_eq!(back.len(), reps.len());
        assert_eq!(back[1].stored_bytes, 3000);
    }
}
