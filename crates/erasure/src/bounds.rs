//! Bounds of the erasure core, each with its reason.
//!
//! These belong with `ringlet_types::limits` in spirit; they live here because only this crate
//! (and its callers, through [`crate::Layout::new`]) use them. K and M bounds come from
//! [`ringlet_types::memgest::EC_K_MAX`] / [`ringlet_types::memgest::EC_M_MAX`].

/// Most data nodes in one placement group (`s`). The control plane builds PGs by rotation over
/// the cluster; 64 data nodes is far beyond Ring's evaluation (s = 3) and keeps
/// `lcm(K, s) ≤ 16 × 64 = 1024` blocks per stripe.
pub const DATA_NODES_MAX: u32 = 64;

/// Smallest chunk. Below 64 B the per-chunk bookkeeping (one parity-update piece header per
/// chunk touched) costs more than the bytes it covers.
pub const CHUNK_BYTES_MIN: u32 = 64;

/// Chunk size a memgest uses unless configured otherwise: one page. Coding is byte-wise, so
/// the chunk size does not limit how little a delta or a decode-on-demand touches; it sets
/// the granularity of layout bookkeeping (one parity-update piece per chunk a value spans)
/// and of lazy parity allocation. 4 KiB keeps a 1 KiB value in one or two pieces and a
/// parity holder's untouched space unallocated.
pub const CHUNK_BYTES_DEFAULT: u32 = 4096;

/// Largest chunk. A chunk is the unit a parity holder allocates lazily; 1 MiB bounds the
/// memory a single small delta can make it commit.
pub const CHUNK_BYTES_MAX: u32 = 1024 * 1024;

/// Largest erasure-coded arena of one data node per memgest: 1 TiB, far above any node's
/// DRAM, so offsets arriving from peers are checked against a bound before any arithmetic.
pub const ARENA_BYTES_MAX: u64 = 1 << 40;

/// Most nodes (`s + M`) for which the reliability model enumerates every failure set to find
/// which ones SRS survives (2^20 sets × l/K codewords stays well under a second).
pub const MODEL_NODES_MAX: u32 = 20;

const _: () = assert!(CHUNK_BYTES_MIN.is_power_of_two() && CHUNK_BYTES_MAX.is_power_of_two());
const _: () = assert!(CHUNK_BYTES_MIN <= CHUNK_BYTES_MAX);
const _: () = assert!(
    CHUNK_BYTES_DEFAULT.is_power_of_two()
        && CHUNK_BYTES_DEFAULT >= CHUNK_BYTES_MIN
        && CHUNK_BYTES_DEFAULT <= CHUNK_BYTES_MAX
);
const _: () = assert!(ARENA_BYTES_MAX.is_multiple_of(CHUNK_BYTES_MAX as u64));
