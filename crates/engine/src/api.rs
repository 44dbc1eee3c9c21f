//! The engine's public vocabulary: configuration, options, outcomes, errors and statistics.

use ringlet_types::{MemgestId, ValueKind, Version};
use std::collections::BTreeMap;

/// Which eviction policy picks victims when the data region is full or a bucket neighbourhood
/// has no free index entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// CLOCK (second chance): an LRU approximation with one reference bit per index entry
    /// and no per-key memory beyond that bit.
    #[default]
    Clock,
    /// S3-FIFO (Yang et al., SOSP '23): a small probationary FIFO, a main FIFO and a ghost
    /// FIFO of recently evicted hashes. Scan-resistant: one-hit wonders leave from the small
    /// queue without displacing the working set.
    S3Fifo,
}

/// Engine configuration. Checked once by [`EngineConfig::validate`] (called by `Engine::new`).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Most bytes the data region may commit (entries, headers and slab rounding included).
    /// The index is sized separately and reported in stats.
    pub memory_bytes_max: u64,
    /// Index buckets at start (any count: homes are multiply-shift). The index grows by 1.5×
    /// past its load factor, so this only saves the first few upsizes. The default, 2,048
    /// buckets of 16 entries (format 5), is the 32,768 entries of formats 1–4's 4,096
    /// buckets of 8: the same first table in entries and bytes, and the same sequence of
    /// sizes as it grows.
    pub index_buckets_initial: u32,
    /// Victim selection for evictable memgests.
    pub eviction: EvictionPolicy,
    /// This node's id: the origin field of every version the engine's HLC issues.
    pub origin: u32,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            memory_bytes_max: 1 << 30,
            index_buckets_initial: 1 << 11,
            eviction: EvictionPolicy::Clock,
            origin: 0,
        }
    }
}

/// A configuration field out of range; the message names the field.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("invalid engine config: {field}: {reason}")]
pub struct ConfigError {
    pub field: &'static str,
    pub reason: &'static str,
}

impl EngineConfig {
    /// Check every field once, at startup.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first bad field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.memory_bytes_max < ringlet_types::limits::ENGINE_MEMORY_BYTES_MIN {
            return Err(ConfigError {
                field: "memory_bytes_max",
                reason: "below the 1 MiB minimum",
            });
        }
        if self.memory_bytes_max > ringlet_types::limits::ENGINE_MEMORY_BYTES_MAX {
            return Err(ConfigError {
                field: "memory_bytes_max",
                reason: "above the 32 GiB a 32-bit location in 8-byte units addresses",
            });
        }
        if self.index_buckets_initial == 0
            || self.index_buckets_initial > ringlet_types::limits::INDEX_BUCKETS_MAX
        {
            return Err(ConfigError {
                field: "index_buckets_initial",
                reason: "must be 1..=2^26",
            });
        }
        Ok(())
    }
}

/// A stored value with its metadata, as returned to the writer's caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub value: Vec<u8>,
    pub version: Version,
    pub memgest: MemgestId,
    /// Absolute unix milliseconds after which the key reads as absent; `None`: no TTL.
    pub expire_at_ms: Option<u64>,
    /// A byte string or a KVL record (encoded by `ringlet-record`).
    pub kind: ValueKind,
}

/// A stored entry's metadata without its value ([`crate::Engine::head`],
/// [`crate::Engine::slot_scan_heads`]): what a caller that compares versions needs, read
/// from the index entry and the data entry's header, with no copy of the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHead {
    pub version: Version,
    pub memgest: MemgestId,
    /// Absolute unix milliseconds after which the key reads as absent; `None`: no TTL.
    pub expire_at_ms: Option<u64>,
    pub kind: ValueKind,
}

/// What a write does to the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Keep the current TTL (Redis `KEEPTTL`); a new key gets none.
    Keep,
    /// Remove any TTL.
    Persist,
    /// Expire at this absolute unix time in milliseconds. A time at or before `now_ms`
    /// deletes the key (Redis `SET ... PXAT <past>`).
    At(u64),
}

/// Precondition of a write, checked against the live (published, unexpired) entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    Always,
    /// Redis `NX`.
    IfAbsent,
    /// Redis `XX`.
    IfPresent,
    /// Compare-and-set: the live entry's version must equal this one.
    IfVersion(Version),
}

/// Options of [`crate::Engine::set`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetOptions {
    /// `None`: the engine assigns the next version of its HLC. `Some(v)`: a version chosen
    /// by a coordinator or client; the write applies only if `v` is higher than the stored
    /// version, the key's tombstone and the tombstone summary.
    pub version: Option<Version>,
    pub memgest: MemgestId,
    pub expiry: Expiry,
    pub condition: Condition,
    /// Write the entry but keep it invisible until [`crate::Engine::publish`].
    pub staged: bool,
    /// What `value` is: a byte string or an encoded record.
    pub kind: ValueKind,
}

impl Default for SetOptions {
    fn default() -> Self {
        SetOptions {
            version: None,
            memgest: MemgestId::NONE,
            expiry: Expiry::Persist,
            condition: Condition::Always,
            staged: false,
            kind: ValueKind::String,
        }
    }
}

/// Result of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetOutcome {
    /// Written with `version`; `old` is the live entry it replaced (for staged writes: the
    /// live entry at staging time, still visible until publish).
    Applied {
        version: Version,
        old: Option<Entry>,
    },
    /// The condition failed, or the version was not higher than what is stored/erased.
    NotApplied { current: Option<Entry> },
}

/// Result of a lock-free read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The value was copied into the caller's buffer.
    Hit {
        version: Version,
        memgest: MemgestId,
        expire_at_ms: Option<u64>,
        kind: ValueKind,
    },
    Miss,
    /// A torn entry or a layout change persisted through the bounded internal retries: retry
    /// later or fall back to the writer path.
    Retry,
}

/// Engine errors. `Copy`: they are returned on the hot path.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    #[error("key of {size_bytes} bytes exceeds the limit")]
    KeyTooLarge { size_bytes: u64 },
    #[error("value of {size_bytes} bytes exceeds the limit")]
    ValueTooLarge { size_bytes: u64 },
    #[error("no space: the node is full of data it may not evict")]
    NoSpace,
    #[error("value is not an integer or out of range")]
    NotInteger,
    /// A string operation on a record (Redis's WRONGTYPE).
    #[error("operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("value is not a valid float")]
    NotFloat,
    #[error("increment or decrement would overflow")]
    Overflow,
    #[error("version is not higher than the stored or erased version")]
    StaleVersion,
    #[error("unknown memgest")]
    UnknownMemgest,
    #[error("invalid engine configuration")]
    Config,
    #[error("operating system refused memory: errno {errno}")]
    Os { errno: i32 },
}

/// Work done by one [`crate::Engine::tick`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Keys removed by active expiry.
    pub expired: u32,
    /// Entries examined by active expiry.
    pub expiry_scanned: u32,
    /// Index buckets migrated by an in-progress upsize.
    pub buckets_migrated: u32,
    /// Whether an index upsize is still in progress after this tick.
    pub upsize_in_progress: bool,
    /// Data entries moved by compaction.
    pub entries_moved: u32,
    /// Bytes given back to the operating system.
    pub bytes_released: u64,
}

/// Keys and bytes of one memgest or slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub keys: u64,
    /// Bytes of the data entries (header + key + value, slab-rounded).
    pub bytes: u64,
}

/// Engine statistics (a snapshot; cheap enough to call once a second).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// Published entries stored (expired ones not yet reaped included).
    pub keys: u64,
    /// Of `keys`, those that carry an expiry (Redis INFO keyspace `expires=`).
    pub keys_with_ttl: u64,
    /// Bytes of live data entries.
    pub used_bytes: u64,
    /// Bytes of data-region memory committed (slab pages in use).
    pub committed_bytes: u64,
    /// Bytes of index-region memory committed.
    pub index_bytes: u64,
    pub memory_bytes_max: u64,
    pub per_memgest: BTreeMap<MemgestId, Usage>,
    /// Only slots that hold keys.
    pub per_slot: BTreeMap<u16, Usage>,
    pub evictions: u64,
    pub expirations: u64,
    pub hits: u64,
    pub misses: u64,
    pub tombstones: u64,
    pub staged: u64,
    pub index_buckets: u64,
    /// Index entries in use / index entry capacity.
    pub index_load_factor: f64,
    pub upsizes: u64,
    /// Writes that found no free index entry within the probe distance of their home bucket
    /// (each forces an immediate upsize, or an eviction at the maximum size).
    pub index_conflicts: u64,
    /// Queue locations examined by S3-FIFO's sweeps of stale queue entries. Kept O(writes)
    /// by sweeping only when a class's queues doubled since the last sweep; a regression test
    /// holds it to a small multiple of the writes.
    pub eviction_queue_swept: u64,
}
