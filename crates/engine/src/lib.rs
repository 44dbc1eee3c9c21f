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
//! # Layout (details and the reason for every field size in [`layout`])
//!
//! ```text
//!  index memfd: [header: magic | layout word | config id | format | policy areas]
//!               [table] ([next table]) ... [policy area 0 | policy area 1]
//!  table: n buckets × 128 B, then n × 2 B overflow words [reach 6 | count 10]
//!
//!  bucket (128 B) = 16 index entries
//!  index entry (8 B, format 5): [location 32 | tag 8 | check 24]
//!  policy word (8 B per bucket, in a policy area): a nibble per entry [0 | ttl | freq 2]
//!
//!  data memfd: [header page] [128 KiB slab pages of one size class | runs of pages for large]
//!  data entry, short (20 B header): [version 16 B][short|live|record|key_len 8|value_len 16|memgest 5]
//!                                   [key][value][pad to 8]
//!  data entry, long (24/32 B):      [version 16 B][0|live|record|ttl|key_len 17|value_len 27|memgest 16]
//!                                   [expire_at_ms 8 B, only with a TTL][key][value][pad to 8]
//! ```
//!
//! Offsets everywhere (locations in 8-byte units, tables by offset in the header), so another
//! process can map both memfds read-only at any address and run [`read::read_entry`].
//!
//! Modules:
//! - [`api`]: config, options, outcomes, errors, stats;
//! - `engine`: the writer's rules (versions, tombstones, TTL, conditions, string helpers);
//! - `store`: index tables (lookup, insert, upsize), data entries, eviction, expiry, scan,
//!   accounting — the writer's side of the regions; `store/slot_index.rs`: the opt-in
//!   per-slot index (scan order, per-(slot, memgest) digests) a cluster node's replica core
//!   pages slots with;
//! - [`read`]: the lock-free reader over read-only views (`RegionsView`), with the
//!   memory-ordering argument;
//! - [`layout`]: byte layouts and constants shared with other processes;
//! - `region`: memfd reservations (huge pages where the kernel allows), atomic word access,
//!   hole punching;
//! - `slab`: size-class slabs and page runs in the data region;
//! - [`strings`]: Redis integer/float/range helpers;
//! - [`hash`]: key hashing and digest terms;
//! - [`fuzz_support`]: the operation-stream fuzz entry point;

pub mod api;
mod engine;
pub mod fuzz_support;
pub mod hash;
pub mod layout;
pub mod read;
mod region;
mod slab;
mod store;
pub mod strings;

pub use api::{
    Condition, ConfigError, EngineConfig, EngineStats, Entry, EntryHead, Error, EvictionPolicy,
    Expiry, ReadOutcome, SetOptions, SetOutcome, TickReport, Usage,
};
pub use engine::Engine;
pub use read::{read_entry, read_entry_bounded, read_entry_with, RegionsView};
pub use region::{huge_pages, set_huge_pages, shmem_thp_honoured, HugePages, PageBacking};
pub use ringlet_types::{MemgestId, ValueKind, Version};
pub use store::{ExportInfo, Reader};
