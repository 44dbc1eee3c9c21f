//! `ringlet-server`: the node runtime. It owns the sockets, the threads and the timers; the
//! engine and the codecs it drives never do I/O themselves.
//!
//! Goals:
//! - one client port speaking RESP2/RESP3 (any Redis client, redis-cli, redis-benchmark) and
//!   the native binary protocol, told apart by the connection's first byte;
//! - Redis 7 behaviour for the same input: replies, error codes and texts
//!   (`docs/design/resp-compat.md` lists the deliberate differences);
//! - thread per core: one tokio `current_thread` runtime per worker; GETs answered by the
//!   worker from its lock-free engine [`ringlet_engine::Reader`]; mutations under the engine
//!   mutex (`docs/design/server-threading.md`);
//! - safe by default: loopback bind unless a password is set, every wire length bounded,
//!   malformed input closes only its own connection;
//! - observable: INFO with Redis field names, Prometheus `/metrics`, `tracing` logs.
//!
//! Non-goals (for now): clustering (MOVED, CLUSTER SLOTS), replication, TLS, ACL users
//! beyond `default`, data types other than strings, persistence.
//!
//! Modules:
//! - [`config`]: [`Config`] and its one-time [`Config::validate`];
//! - [`server`]: [`Server::start`] → [`ServerHandle`]: bind, worker threads, engine tick;
//! - `conn`: one connection's lifecycle and RESP pipelining;
//! - `native`: the native-protocol connection loop;
//! - `uring`: the io_uring worker loop (`--io uring`, Linux), driving the same processors;
//! - [`cmd`]: command table (generated from Redis 7) and one file per command family;
//! - [`reply`]: the protocol-neutral reply value commands produce;
//! - [`glob`]: Redis `stringmatchlen`;
//! - `info`: INFO and CLIENT LIST text; `admin`: `/metrics` and the status page;
//! - `db`: the engine behind its writer mutex; `shared`: state all workers share;
//! - `ldouble`: INCRBYFLOAT in `long double`, as Redis computes it;
//! - [`fuzz_support`]: the request path without sockets, for proptest and fuzzing.

pub mod admin;
pub mod cmd;
pub mod cmdstats;
pub mod config;
mod conn;
mod db;
pub mod fuzz_support;
pub use ringlet_command::glob;
pub mod info;
pub mod ldouble;
pub mod native;
pub use ringlet_command::reply;
pub mod server;
mod shared;
#[cfg(target_os = "linux")]
mod uring;

pub use config::{Config, ConfigError, IoMode, DEFAULT_PORT};
pub use server::{Server, ServerHandle, ShutdownTrigger, StartError};
