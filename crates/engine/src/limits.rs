//! Engine-internal bounds, each with its reason. Limits shared with other crates (key and value
//! sizes, work per tick) live in `ringlet_types::limits`.

/// Smallest data-region budget: one slab page of every small size class would not fit below it.
pub const MEMORY_BYTES_MIN: u64 = 1 << 20;

/// Largest data-region budget: index entries locate data in 8-byte units with 32 bits, so the
/// data region can span 2^32 × 8 B = 32 GiB.
pub const MEMORY_BYTES_MAX: u64 = (1 << 32) * 8;

/// Most index buckets: 2^26 buckets × 8 entries ≈ 540 M keys, and an 8 GiB index; beyond that
/// a node should be split, not grown.
pub const INDEX_BUCKETS_MAX: u32 = 1 << 26;

/// Internal retries of a lock-free read before it reports `Retry` (a writer rewriting the same
/// entry continuously could otherwise starve a reader forever).
pub const READ_RETRY_COUNT_MAX: u32 = ringlet_types::limits::SHM_READ_RETRY_COUNT_MAX;
