//! `ringlet-erasure`: the pure erasure-coding core of Ring's per-key resilience —
//! Stretched Reed-Solomon SRS(K, M, s) (Ring §3.3, DESIGN.md "Writes, memgests and
//! consistency").
//!
//! An `ec:K+M` memgest keeps each value whole in its coordinator's *arena*; the `s` arenas of
//! a placement group are cut into chunks and, stripe by stripe, RS(K, M)-encoded in codewords
//! whose K data chunks sit on distinct data nodes; parity lives on the PG's first M redundant
//! nodes. A write sends `new ⊕ old` of the touched bytes plus the key metadata to the parity
//! holders, which fold it in with their coefficient.
//!
//! Goals:
//! - the layout as pure functions (arena byte ↔ codeword position ↔ parity chunk), for any
//!   K, M, s, including s < K (reported as weaker) and s > K (Ring's stretched codes);
//! - encode, parity deltas that provably agree with a fresh encode, reconstruct of any ≤ M
//!   lost chunks, and decode-on-demand of one value's byte range;
//! - sans-I/O state for a data node ([`Arena`]) and a parity holder ([`ParityStore`]) that
//!   the replica core drives; memory accounting;
//! - Ring's appendix Markov model of annual reliability and availability ([`reliability`]).
//!
//! Non-goals: no networking, no clocks, no threads; commit rules, retries and the choice of
//! which peer to read from belong to `ringlet-replica`. Bulk SIMD encoders whose coefficients
//! are hidden (reed-solomon-simd) are not used: deltas need the encoder's exact matrix.
//!
//! Modules:
//! - [`layout`]: SRS stripe layout ([`Layout`]);
//! - [`codec`]: RS(K, M) over GF(2^8): [`Codec`], [`delta`], [`parity_coefficient`],
//!   [`apply_delta`];
//! - [`stripe`]: [`encode_stripe`], [`rebuild_range`], [`rebuild_parity_stripe`] over a
//!   [`ChunkSource`], and [`rebuild_sources`] (what to fetch for a decode);
//! - [`arena`]: a data node's arena, [`ParityUpdate`], [`Accounting`];
//! - [`parity`]: a parity holder's store;
//! - [`chunk_map`]: the ordered map of sorted runs the key maps use ([`ChunkMap`]);
//! - [`reliability`]: Markov reliability/availability model;
//! - [`fuzz_support`]: entry points of the fuzz targets;
//! - [`bounds`]: size bounds; [`error`]: the error type.
//!
//! Layout diagrams and measurements: `docs/design/erasure-srs.md`; model:
//! `docs/design/erasure-reliability.md`.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

pub mod arena;
pub mod bounds;
pub mod chunk_map;
pub mod codec;
pub mod error;
pub mod fuzz_support;
pub mod layout;
pub mod parity;
pub mod reliability;
pub mod small_key;
pub mod stripe;

pub use arena::{Accounting, Arena, KeyMeta, MetaChange, ParityUpdate};
pub use chunk_map::ChunkMap;
pub use codec::{apply_delta, delta, parity_coefficient, Codec};
pub use error::Error;
pub use layout::{CodewordId, DataChunk, Layout, Location, ParityChunk, Piece};
pub use parity::{Applied, ParityStore};
pub use small_key::SmallKey;
pub use stripe::{
    encode_stripe, rebuild_parity_stripe, rebuild_range, rebuild_sources, ChunkSource, SourceRange,
};
