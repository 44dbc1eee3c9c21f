//! `ringlet-control`: the control plane's sans-I/O core — the cluster map and the state machine
//! that changes it (membership, heartbeat leases, spares, drains, memgests, epochs).
//!
//! ```text
//!   Heartbeat / Join / Drain / Tick / memgest commands
//!              |
//!              v
//!   ControlPlane::step(now_ms, Input) -> Vec<Action>     (no clock, no sockets, no threads)
//!              |
//!              v
//!   Publish(map) · SendMap(to) · HeartbeatAck(to) · Fenced(to) · Rejected(reason)
//! ```
//!
//! Goals:
//! - one [`ClusterMap`] type, serde-(de)serializable (JSON) so it can ship over the wire and
//!   be stored in etcd later; deserializing validates it;
//! - heartbeat leases: a node whose lease lapsed is fenced by a new epoch and its roles go to a
//!   spare, in place (same PG positions), so nothing else moves;
//! - a restarted node (new incarnation) is treated as failed-and-rejoined: its old incarnation's
//!   roles go to a spare, the new incarnation is a spare (it never votes on data it lost);
//! - `drain` hands a node's roles to a spare while it still runs (warm spare, CliqueMap §6.1);
//! - memgests created, dropped (refused while keys live), and the default chosen at run time;
//! - the epoch strictly increases on every map change (asserted);
//! - resharding: spares added as data nodes (new placement groups), slot spans moved between
//!   (PG, data index) pairs in two phases with a handoff record, and [`rebalance`] plans that
//!   even out coordinated slots (docs/design/cluster-resharding.md).
//!
//! Non-goals (for now): load-aware (bytes, ops/s) resharding and an automatic balancer.
//!
//! - memgest usage: nodes report per-memgest key/byte counts; a memgest is dropped only once
//!   every data-holding node reports it empty after it was closed to new writes;
//! - [`report`]: `MEMGEST LIST/INFO` figures, with Ring's reliability model (appendix A).
//!
//! Modules: [`map`] (the cluster map), [`plane`] (the state machine), [`report`] (memgest
//! reports), [`events`] (the bounded event log derived from every map change).

pub mod balance;
pub mod events;
pub mod map;
pub mod plane;
pub mod rebalance;
pub mod report;

pub use balance::{plan_by_load, slot_rates, BalanceConfig, Verdict};
pub use events::{Event, EventKind, EventLog, StampedEvent};
pub use map::{ClusterMap, Handoff, MapError, MemgestInfo, NodeInfo, NodeState, SlotMove};
pub use plane::{
    Action, ControlConfig, ControlError, ControlPlane, EcUsage, Input, MemgestUsage, UsageReport,
    DEFAULT_USER_LOCAL,
};
pub use rebalance::{pair_for, plan_rebalance, PairError, PlannedMove};
pub use report::{memgest_reports, MemgestReport, ModelRates};
