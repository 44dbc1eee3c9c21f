//! `ringlet-sim`: a deterministic, single-threaded cluster simulator. It drives the real
//! [`ringlet_control::ControlPlane`] and [`ringlet_replica::Replica`] cores with a message bus
//! and injected faults, runs clients that record histories, and checks the run.
//!
//! ```text
//!   seed ─▶ SplitMix64 ─▶ swarm choice of faults and rates, cluster shape, workload
//!                 │
//!   event queue (time, seq) ─▶ deliver message | node tick | control tick | client op | fault
//!                 │                     │ drop · delay · duplicate · reorder · partition
//!                 ▼                     │ crash+restart · drain
//!   cores step ─▶ outputs ─▶ bus ───────┘        check_invariants() after every step
//!
//!   checkers: epochs never go backwards · acknowledged rep:3 writes survive (≤1 failure at a
//!   time) · replicas converge to the same per-slot digests after healing · linearizable
//!   histories (ringlet-linearize) · no rebuild gave up (PossibleLoss) in tolerated runs
//! ```
//!
//! Replay: every failure message starts with `SEED=<n>`; `SEED=<n> cargo test -p ringlet-sim`
//! runs exactly that seed again (same events in the same order: all iteration is over
//! ordered maps, all randomness comes from the seed).
//!
//! Goals: find protocol bugs in the cores the server runs, cheaply, reproducibly.
//! Non-goals: performance modelling; clock skew (leases assume bounded drift, documented in
//! docs/design/cluster-replication.md). `SimOptions::ec` runs the erasure-coded scenario
//! (5 + 2 nodes, s = 3, d = 2, `ec:3+2` / `ec:2+1` keys and keys moving between memgests);
//! `SimOptions::ec_double` adds crashes of two members of one PG at once (ec:3+2 only);
//! `SimOptions::ttl` adds TTL keys in the ec memgests, the nodes' active expiry and a TTL
//! model checker (expiries survive takeovers; nothing expired is served, nothing live lost).
//!
//! Modules: [`rng`] (SplitMix64), [`sim`] (the world, clients, checkers).

pub mod rng;
pub mod sim;
pub mod store;

pub use sim::{run_seed, RunStats, SimOptions};
