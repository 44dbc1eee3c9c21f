//! `ringlet-cluster`: the I/O side of a Ringlet cluster. The sans-I/O cores
//! (`ringlet-control`'s [`ControlPlane`](ringlet_control::ControlPlane), `ringlet-replica`'s
//! [`Replica`](ringlet_replica::Replica)) decide; this crate gives them sockets, clocks and
//! threads.
//!
//! ```text
//!   redis-cli -c / redis-py RedisCluster / ringlet client
//!        |  RESP (MOVED, CLUSTER SLOTS/SHARDS/NODES)
//!        v
//!   front (resp.rs) --submit--> ClusterNode driver thread (node.rs)
//!                                 | Replica<EngineStore>::step(now, input)
//!              peer frames <------+------> control frames (JSON)
//!        transport.rs (TCP, bounded queues,        control.rs: ControlClient <-> ControlService
//!        reconnect with backoff)                   (ControlBackend: embedded ControlPlane)
//! ```
//!
//! Goals:
//! - [`store::EngineStore`]: the replica core's store over the node's engine;
//! - [`wire`]: length-prefixed peer frames, every length checked before allocation;
//! - [`transport`]: one TCP link per peer, bounded send queue with an explicit drop outcome,
//!   reconnect with bounded exponential backoff;
//! - [`control`]: the control plane as a TCP service with a JSON frame API (join, heartbeat
//!   leases, map push on every epoch, drain), behind the [`control::ControlBackend`] trait;
//! - [`node`]: [`node::ClusterNode`], the driver that steps the replica core from one thread
//!   with a tick timer and offers `submit(op) -> reply` to front ends;
//! - [`resp`]: a Redis Cluster compatible RESP front end for cluster mode;
//! - [`launch`]: `up` (control plane + N+S node processes) and process helpers.
//!
//! Non-goals (now): the etcd backend (the trait is the seam), TLS on peer links, TTLs and
//! multi-key commands in cluster mode, ec memgests (the replica core refuses them).
//!
//! Design notes and measured figures: `docs/design/cluster-runtime.md`.

/// The cluster secret's challenge on every link (crates/link).
pub use ringlet_link::auth;
pub mod balancer;
/// The control plane as a service, its client and both backends' seam (crates/control-service).
pub use ringlet_control_service as control;
pub mod control_http;
pub mod launch;
pub mod load;
pub mod native;
pub mod node;
pub mod resolve;
pub mod resp;
/// TLS on links and client ports (crates/link).
pub use ringlet_link::tls;
/// The replica core's store over the node's engine (it lives in `ringlet-replica` so the
/// simulator runs the same store as a node).
pub use ringlet_replica::engine_store as store;
#[cfg(feature = "etcd")]
pub mod etcd_node;
pub mod transport;
pub mod wire;

pub use store::EngineStore;

pub use ringlet_link::{listen, mono_ms, wall_ms};

/// Raise this process's open-file limit so that [`limits::CONNECTIONS_MAX`] clients plus
/// [`limits::FDS_RESERVED`] of the node's own fit, as Redis does for `maxclients`: Debian's
/// default soft limit of 1,024 made accepts fail with EMFILE long before the client limit,
/// so clients waited in the backlog instead of getting "max number of clients reached".
/// The soft limit is raised up to the hard limit, never past it. Returns (limit now, wanted).
///
/// [`limits::CONNECTIONS_MAX`]: ringlet_types::limits::CONNECTIONS_MAX
/// [`limits::FDS_RESERVED`]: ringlet_types::limits::FDS_RESERVED
pub fn raise_fd_limit() -> (u64, u64) {
    use ringlet_types::limits;
    let want = u64::from(limits::CONNECTIONS_MAX + limits::FDS_RESERVED);
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return (0, want);
        }
        if r.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want.min(r.rlim_max),
                rlim_max: r.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                r = raised;
            }
        }
    }
    (r.rlim_cur, want)
}

/// Whether a value with this expiry (unix ms) has expired by the wall clock. Only fronts of
/// the coordinator ask (see `ringlet_replica::Entry::expiry_ms`).
pub fn expired(expiry_ms: Option<u64>) -> bool {
    expiry_ms.is_some_and(|x| x <= wall_ms())
}

/// The etcd control-plane backend (`ringlet server --etcd`): the backend itself lives with
/// the control service (crates/control-service, feature `etcd`); running a node on it is here.
#[cfg(feature = "etcd")]
pub mod etcd {
    pub use crate::etcd_node::{run_node_etcd, EtcdNode, EtcdNodeOpts};
    pub use ringlet_control_service::etcd::*;
    /// `run_node_etcd` and its defaults.
    pub mod run {
        pub use crate::etcd_node::*;
    }
}
