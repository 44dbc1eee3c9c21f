//! `ringlet-replica`: the replication core of one node — commit rules per memgest, quorum
//! read legs, failover rebuild, new-replica sync, digest repair. Sans-I/O: the server and the
//! simulator (`ringlet-sim`) drive the same [`Replica::step`].
//!
//! Goals:
//! - DESIGN.md "Writes, memgests and consistency": the coordinator orders each key's
//!   mutations and assigns versions (HLC); `none` commits on the coordinator, `rep:R` when a
//!   majority of the R replicas (coordinator included) applied it; the rest catch up;
//! - a coordinator serves only in an epoch where it is coordinator, with a live lease;
//! - failover: a new coordinator rebuilds from a majority of the old cohort before serving;
//!   a restarted node comes back empty and rejoins as a spare;
//! - repair: cohort members compare per-slot digests and fix dirty replicas, bounded per tick;
//! - in-flight replication bounded by count and bytes (`ringlet_types::limits`);
//! - `ec:K+M` (`node/ec.rs`, `docs/design/cluster-ec.md`): values whole in the coordinator's
//!   arena, parity updates committed when all M holders applied them, takeover from a parity
//!   holder's metadata copy with on-demand and background decode, holder resync.
//!
//! Non-goals (now): MOVE as a command (a Set with another memgest moves the key; old copies
//! are retired: ec arenas at commit, rep replicas by repair), resharding of slot ranges,
//! client-nominated versions.
//!
//! Modules: [`store`] (the [`ReplicaStore`] trait and [`MemStore`]), [`msg`] (client and peer
//! messages), [`node`] (the state machine), [`inflight`] (which keys have a write in flight,
//! for front ends that read the store without the core). Protocol and reasons:
//! `docs/design/cluster-replication.md`.

pub mod engine_store;
pub mod inflight;
pub mod msg;
pub mod node;
pub mod store;

pub use engine_store::{EngineStore, StoreStats};
pub use inflight::InflightKeys;
pub use msg::*;
pub use node::{Input, Output, Replica, ReplicaConfig, ReplicaStats};
pub use store::{
    scan_order, slot_order_code, ApplyOutcome, Entry, MemStore, ReplicaStore, SlotDigests,
};
