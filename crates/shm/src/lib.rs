//! `ringlet-shm`: one-sided reads from shared memory for clients on the same host
//! (DESIGN.md "Read paths" 1; CliqueMap §3–4's 2×R GET without RDMA).
//!
//! Purpose: a node exports its engine's index and data regions (memfds) through a Unix
//! socket; a client process maps them read-only and answers GET and MGET itself — hash,
//! bucket, index entry, data entry, checksum, full key, version check, epoch — so a GET costs
//! the node no CPU. Mutations, and the rare read that cannot be validated, go over the same
//! socket as native frames (`docs/protocol.md`). Readers report the key hashes they touched
//! in batches so the node's eviction stays recency-aware (CliqueMap §4.2).
//!
//! Goals:
//! - a client never accepts a wrong value: every read is validated by the engine's own
//!   reader function, with bounded retries and a socket fallback;
//! - a node restart, an epoch change or a region that grew is noticed and the client
//!   re-handshakes by itself;
//! - the client's mapping cannot write the node's memory (read-only descriptors);
//! - the transport is one module: the read algorithm only needs a `RegionsView` (two byte
//!   ranges); HELLO/SCM_RIGHTS/mmap is how *this* transport obtains them.
//!
//! Non-goals: cross-host access (that is the TCP path), authentication beyond the socket
//! file's permissions, clients that write shared memory.
//!
//! Modules:
//! - [`proto`]: HELLO (layout parameters, sizes, epoch, generation) and ACCESS messages;
//! - [`fdpass`]: SCM_RIGHTS and read-only memfd descriptors;
//! - the node side (`Exporter`) is the crate `ringlet-shm-exporter`, so a client does not
//!   compile the node's code;
//! - [`reader`]: the client side ([`ShmReader`]), including reads at a link's location hint;
//! - [`chase`]: CHASE walked by the client over one-sided reads, hop by hop at the hints;
//! - [`validity`]: a cluster node's validity region (slots served, lease deadline, writes
//!   in flight) that one-sided readers check around every read;
//! - [`benchkit`]: keys, checked values and timed loops of the GET benchmark;
//! - [`testkit`]: deterministic values and workload helpers shared by tests, the test
//!   binaries and the benchmark.

pub mod benchkit;
pub mod chase;
pub mod fdpass;
pub mod proto;
pub mod reader;
pub mod testkit;
pub mod validity;

pub use proto::{Hello, ProtoError};
pub use reader::{ReaderStats, ShmReader, ShmReaderConfig};
pub use validity::{Fallback, ValidityWriter};

/// Errors of the exporter and the reader.
#[derive(thiserror::Error, Debug)]
pub enum ShmError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Proto(#[from] ProtoError),
    #[error("native frame: {0}")]
    Decode(#[from] ringlet_codec::DecodeError),
    #[error("handshake: {0}")]
    Handshake(&'static str),
    #[error("key exceeds the size limit")]
    KeyTooLarge,
    #[error("node disconnected")]
    Disconnected,
    #[error("node answered status 0x{status:02x}: {message}")]
    Server { status: u8, message: String },
}
