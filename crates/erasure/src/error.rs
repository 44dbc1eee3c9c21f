//! The one error type of `ringlet-erasure`.
//!
//! Every variant is something a caller can act on: bad parameters are a configuration or
//! protocol error (close that peer, refuse that memgest), `NotEnoughShards` means too many
//! failures (the data is lost, the application is told), `SeqGap` means a parity update was
//! lost on the way and the holder must be resynchronised. All variants are `Copy` because
//! parity updates are on the write path (STYLE §5).

use thiserror::Error;

/// Errors of the erasure core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum Error {
    /// K, M or s out of range (see [`crate::bounds`]).
    #[error("invalid SRS shape K={k} M={m} s={s}")]
    Shape { k: u32, m: u32, s: u32 },
    /// `s < K`: a codeword's K data chunks cannot all be on distinct data nodes, so the
    /// memgest would not survive M failures (use `Layout::with_any_stretch` to build it anyway).
    #[error(
        "SRS needs s >= K (K={k}, s={s}): a data node would hold several chunks of one codeword"
    )]
    UnderStretched { k: u32, s: u32 },
    /// Chunk size not a power of two within bounds.
    #[error("invalid chunk size {chunk_bytes} bytes")]
    ChunkSize { chunk_bytes: u32 },
    /// A node index that is not a data node (or parity index not a parity holder) of the PG.
    #[error("node index {index} out of range (count {count})")]
    NodeIndex { index: u32, count: u32 },
    /// A byte range beyond the arena bound or overflowing u64.
    #[error("byte range offset {offset} len {len} out of bounds")]
    Range { offset: u64, len: u64 },
    /// Buffers whose lengths disagree (shards of one codeword, chunk vs delta).
    #[error("buffer length mismatch: expected {expected}, got {got}")]
    Length { expected: u64, got: u64 },
    /// Fewer than K chunks of a codeword are available: the data is lost.
    #[error("codeword unrecoverable: {missing} chunks missing, at most {tolerated} tolerated")]
    NotEnoughShards { missing: u32, tolerated: u32 },
    /// The arena has no free range large enough.
    #[error("arena full: no free range of {len} bytes")]
    NoSpace { len: u64 },
    /// Free of a range that is not exactly an allocated range.
    #[error("range offset {offset} len {len} is not allocated")]
    NotAllocated { offset: u64, len: u64 },
    /// A put or delete whose version is not above the stored one (DESIGN.md invariant).
    #[error("stale version")]
    Stale,
    /// A parity update arrived after a gap in the owner's update sequence.
    #[error("parity update sequence gap for owner {owner}: expected {expected}, got {got}")]
    SeqGap { owner: u32, expected: u64, got: u64 },
    /// A reliability model parameter that is not a finite positive number, or a model too
    /// large to enumerate.
    #[error("invalid reliability parameter: {what}")]
    ModelParam { what: &'static str },
    /// The Reed-Solomon library refused the input (should not happen after our own checks).
    #[error("reed-solomon: {0:?}")]
    Codec(CodecError),
}

/// Mirror of `reed_solomon_erasure::Error` kept `Copy` and independent of the crate's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecError {
    /// Shard sizes disagree or are zero.
    ShardSize,
    /// Too few shards present.
    TooFewShardsPresent,
    /// Any other library error.
    Other,
}

impl From<reed_solomon_erasure::Error> for Error {
    fn from(e: reed_solomon_erasure::Error) -> Self {
        use reed_solomon_erasure::Error as E;
        Error::Codec(match e {
            E::IncorrectShardSize | E::EmptyShard => CodecError::ShardSize,
            E::TooFewShardsPresent => CodecError::TooFewShardsPresent,
            _ => CodecError::Other,
        })
    }
}
