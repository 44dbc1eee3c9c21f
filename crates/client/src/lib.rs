//! `ringlet-client`: the Rust client of Ringlet over the native protocol
//! (`docs/protocol.md`, codec in `ringlet-codec`).
//!
//! Goals:
//! - async [`Client`] (tokio) and synchronous [`BlockingClient`];
//! - a pool of connections per node, each pipelining many requests matched by request id;
//! - every result carries the entry's version and the node's epoch ([`Versioned`]);
//! - a deadline per call (retries and backoff included), retries bounded by
//!   `limits::RETRY_COUNT_MAX`, backed off with seeded full jitter, and limited overall by a
//!   retry budget; non-idempotent requests are never repeated once they may have executed;
//! - MOVED replies teach the client the slot's node (Redis-Cluster-style redirects);
//! - MGET of any size, split into batches that are all in flight at once.
//!
//! - one-sided GET/MGET from the shared memory of a node on the same host: [`ShmReader`]
//!   (from `ringlet-shm`; the node runs with `--shm-socket PATH`, docs/design/shm-reads.md).
//!
//! - cluster mode: [`ClusterClient`] (and [`BlockingClusterClient`]) fetches the cluster
//!   map from any node, routes by slot, refreshes on MOVED / STALE_EPOCH / a newer epoch,
//!   splits cross-slot MGET/MSET per node, and reads at the coordinator or by quorum
//!   ([`ReadMode`]; docs/design/client-cluster.md).
//!
//! TLS: [`ClientConfig::tls`] with a [`ClientTls`] (the cluster's CA) for nodes whose client
//! ports serve TLS.
//!
//! Every other command the node serves (TTLs, hashes/records, links, SCAN, INFO, ...) goes
//! through COMMAND ([`Client::command`], [`ClusterClient::command`] and the typed helpers in
//! [`command`]).
//!
//! Modules:
//! - [`client`]: [`Client`] (one node, MOVED-learned routes), results and [`SetOptions`];
//! - [`chase`]: [`ChaseOptions`], [`ChaseResult`]: CHASE (links followed by the node);
//! - [`command`]: COMMAND, any command of the node's command layer (`Client::command`,
//!   `ClusterClient::command`, routed by the command table's keys), and typed helpers over it:
//!   TTLs (`expire`, `ttl`, `persist`, ...), hashes/records (`hset`, `hgetall`, ...), links
//!   (`link_set`, `link_add`, `link_get`, `link_del`);
//! - [`cluster`]: [`ClusterClient`], [`ClusterConfig`], [`ReadMode`];
//! - [`pipeline`]: [`Pipeline`]: queued GET/MGET/SET/DEL/INCRBY run at once on a
//!   [`ClusterClient`], one result per command;
//! - `quorum`: the quorum-read decision rule;
//! - `conn`: one pipelined connection (reader and writer tasks, pending table);
//! - `retry`: backoff jitter and the retry budget;
//! - [`config`]: [`ClientConfig`] and its validation;
//! - [`blocking`]: the synchronous [`BlockingClient`];
//! - [`error`]: the error type, [`Error`].

pub mod blocking;
pub mod chase;
pub mod client;
pub mod cluster;
pub mod command;
pub mod config;
mod conn;
pub mod error;
pub mod pipeline;
mod quorum;
mod retry;
pub mod tls;

pub use blocking::BlockingClient;
pub use chase::{ChaseEntry, ChaseOptions, ChaseResult};
pub use client::{Client, DelOutcome, MgetValue, SetOptions, SetOutcome, Versioned};
pub use cluster::{
    BlockingClusterClient, ClusterClient, ClusterConfig, ClusterStats, ReadMode, ShmFallback,
    ShmFallbacks, ShmHintStats,
};
pub use command::Ttl;
pub use config::{ClientConfig, Credentials};
pub use conn::MgetEntry;
pub use error::Error;
pub use pipeline::{Pipeline, PipelineOp, PipelineReply, PIPELINE_COMMANDS_MAX};
pub use ringlet_codec::native::{SetCond, Status};
pub use ringlet_codec::resp::Reply;
pub use ringlet_shm::{ReaderStats as ShmReaderStats, ShmError, ShmReader, ShmReaderConfig};
pub use tls::ClientTls;
