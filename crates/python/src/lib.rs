//! `ringlet-python`: the `ringlet` Python package, PyO3 bindings over `ringlet-client`'s
//! [`ringlet_client::ClusterClient`]. No logic of its own: every call is one call of the Rust
//! client, run on a tokio runtime owned by the Python object with the GIL released.
//!
//! ```text
//!  Python thread ──ringlet.Cluster.get(k)──▶ copy k out of the Python object (GIL held)
//!                                            │ py.detach: GIL released
//!                                            ▼
//!                          runtime.block_on(ClusterClient::get(k)) ──▶ nodes (native protocol)
//!                                            │ GIL taken again
//!                                            ▼
//!                          bytes | None, or a ringlet.RingletError subclass
//! ```
//!
//! Goals:
//! - `ringlet.Cluster`: GET/SET (TTL, memgest)/INCR/DEL, cross-slot MGET/MSET, memgest
//!   commands, coordinator or quorum reads, as the Rust cluster client offers them;
//! - `Cluster.pipeline()`: queued commands sent at once (`ringlet_client::pipeline`), one
//!   result or exception per command;
//! - `ringlet.AsyncCluster` / `AsyncPipeline`: the same as asyncio awaitables, on the same
//!   runtime;
//! - `ringlet.ShmReader`: one-sided GET/MGET from a node on this host (`ringlet_client::ShmReader`);
//! - one Python exception class per client error a caller can act on (`error.rs`);
//! - an abi3 wheel (CPython >= 3.9) built by maturin from `crates/python/pyproject.toml`.
//!
//! Non-goals (for now): what the cluster's native front does not serve (CAS, NX/XX, whether
//! a DEL found the key); AUTH; the single-node TCP client.
//!
//! Modules:
//! - `cluster`: the `Cluster` class and its runtime;
//! - `pipeline`: the `Pipeline` class;
//! - `aio`: `AsyncCluster`, `AsyncPipeline` and the bridge from tokio futures to asyncio;
//! - `shm`: the `ShmReader` class;
//! - `error`: the exception classes and the mapping from [`ringlet_client::Error`].

use pyo3::prelude::*;

mod aio;
mod cluster;
mod error;
mod pipeline;
mod shm;

/// The extension module `ringlet._ringlet`; `ringlet/__init__.py` re-exports it.
#[pymodule]
fn _ringlet(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<cluster::Cluster>()?;
    m.add_class::<shm::ShmReader>()?;
    m.add_class::<pipeline::Pipeline>()?;
    m.add_class::<aio::AsyncCluster>()?;
    m.add_class::<aio::AsyncPipeline>()?;
    error::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
