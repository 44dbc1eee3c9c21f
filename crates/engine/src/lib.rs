//! `ringlet-engine`: the node-local storage engine of Ringlet.
//!
//! Purpose: hold one node's keys in two shared-memory regions — an *index* of fixed-size
//! buckets and a *data* region of checksummed entries — so that a mutating writer and any
//! number of lock-free readers (threads of the server, or other processes mapping the regions
//! read-only) work at the same time, and a reader returns either a committed value or "retry".
//! (DESIGN.md "The engine"; CliqueMap §3–4.)
//!
//! Goals:
//! - sans-I/O: no sockets, threads or clocks; time is an argument (`now_ms`);
//! - versions are the rule: a write applies only above the key's stored version, tombstone and
//!   tombstone summary; deletes never let a late write resurrect a key;
//! - staged writes published by one atomic switch; readers only see published entries;
//! - bounded work per call (eviction scan, active expiry, upsize steps) and typed errors.
//!
//! Non-goals: persistence, replication (the `replica` crate decides *what* to apply; the engine
//! applies it), data types other than strings.
//!
//! Modules:
//! - [`api`]: config, options, outcomes, errors, stats;
//! - `engine`: the writer's rules (versions, tombstones, TTL, conditions, string helpers);
//! - `store`: index + data regions under the writer;
//! - [`strings`]: Redis integer/float/range helpers;
//! - [`hash`]: key hashing and digest terms;
//! - [`fuzz_support`]: the operation-stream fuzz entry point;
//! - [`limits`]: engine-internal bounds.

pub mod api;
mod engine;
pub mod fuzz_support;
pub mod hash;
pub mod layout;
pub mod limits;
pub mod read;
mod region;
mod slab;
mod store;
pub mod strings;

pub use api::{
    Condition, ConfigError, EngineConfig, EngineStats, Entry, Error, EvictionPolicy, Expiry,
    ReadOutcome, SetOptions, SetOutcome, TickReport, Usage,
};
pub use engine::Engine;
pub use read::{read_entry, read_entry_with, RegionsView};
pub use ringlet_types::{MemgestId, Version};
pub use store::{ExportInfo, Reader};
