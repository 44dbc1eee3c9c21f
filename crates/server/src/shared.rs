//! State every worker thread shares: the engine (behind its writer mutex), counters for INFO
//! and `/metrics`, the client registry for CLIENT LIST, and runtime-settable config.

use crate::config::Config;
use crate::db::Db;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Wall-clock unix time in milliseconds: the `now_ms` every engine call gets. TTLs are absolute
/// unix times (EXAT/PXAT), so this must be the wall clock, not a monotonic one.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Counters shown by INFO `stats`/`clients` and exported to Prometheus. Relaxed atomics: they
/// are statistics, read without any ordering requirement.
#[derive(Default)]
pub struct Stats {
    pub connections_received: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub connected: AtomicU64,
    pub commands_processed: AtomicU64,
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    pub expired_keys: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    /// Reads answered by a worker's lock-free engine reader.
    pub reader_hits: AtomicU64,
    /// Reads that fell back to the locked engine after the reader said `Retry`.
    pub reader_retries: AtomicU64,
    /// The engine's expiry and eviction counts at the last CONFIG RESETSTAT: INFO's
    /// `expired_keys` and `evicted_keys` count from there (the engine's own counters, which
    /// the Prometheus export reads, never go back).
    pub engine_expired_base: AtomicU64,
    pub engine_evicted_base: AtomicU64,
}

impl Stats {
    /// CONFIG RESETSTAT: every counter back to zero, as Redis's `resetServerStats`; the
    /// connected-clients gauge stays. `engine` is the engine's (expirations, evictions) now.
    pub fn reset(&self, engine: (u64, u64)) {
        for c in [
            &self.connections_received,
            &self.connections_rejected,
            &self.commands_processed,
            &self.keyspace_hits,
            &self.keyspace_misses,
            &self.expired_keys,
            &self.protocol_errors,
            &self.net_input_bytes,
            &self.net_output_bytes,
            &self.reader_hits,
            &self.reader_retries,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.engine_expired_base.store(engine.0, Ordering::Relaxed);
        self.engine_evicted_base.store(engine.1, Ordering::Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// One connected client, as CLIENT LIST shows it. Fields a connection changes on every
/// command are atomics so the registry lock is only taken on connect, disconnect, SETNAME and
/// CLIENT LIST.
pub struct ClientState {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub created: Instant,
    pub last_cmd_at_ms: AtomicU64,
    /// Index of the last command in the command table (for `cmd=`), `u64::MAX` if none.
    pub last_cmd: AtomicU64,
    pub resp: AtomicU8,
    pub name: Mutex<Vec<u8>>,
    /// Buffer figures for CLIENT LIST, stored by the connection's loop.
    pub buffers: crate::cmd::connection::ConnBuffers,
    /// The ACL user's name (CLIENT LIST's `user=`), set by AUTH, HELLO AUTH and RESET.
    pub user: Mutex<String>,
}

/// Shared node state.
pub struct Shared {
    pub config: Config,
    pub db: Db,
    pub stats: Stats,
    /// Password of the default user; CONFIG SET requirepass changes it at run time.
    pub requirepass: RwLock<Option<Vec<u8>>>,
    pub clients: Mutex<BTreeMap<u64, Arc<ClientState>>>,
    pub next_client_id: AtomicU64,
    pub started: Instant,
    /// The client port actually bound (differs from `config.port` when that was 0).
    pub port: u16,
    /// Seed for RANDOMKEY, advanced on every call (the engine takes randomness as input).
    pub random_seed: AtomicU64,
    /// Transactions: every RESP command and native request runs under a read guard, EXEC
    /// holds the write guard while it runs its queue, so no other client's command runs in
    /// between (Redis runs EXEC on its one thread). A separate lock rather than holding the
    /// engine's: handlers take the engine lock per command (and GET reads lock-free), so
    /// holding it across a queue would need every handler rewritten. One-sided shm readers
    /// take no lock and may see a transaction half applied.
    pub exec: RwLock<()>,
    /// CONFIG `hash-max-listpack-*`: only what OBJECT ENCODING names a record.
    pub hash_encoding: crate::cmd::keyspace::HashEncodingMax,
    /// ACL users (`ringlet_command::acl`, docs/design/acl.md); the `default` user's password
    /// is `requirepass`.
    pub acl: ringlet_command::acl::AclTable,
    /// SLOWLOG and LATENCY (`cmd::slowlog`), fed by `cmd::run`.
    pub monitor: crate::cmd::slowlog::Monitor,
    /// INFO commandstats / errorstats / latencystats (crate::cmdstats).
    pub cmdstats: crate::cmdstats::CommandStats,
}

impl Shared {
    pub fn new(config: Config, db: Db, port: u16) -> Shared {
        let requirepass = config.requirepass.clone().map(String::into_bytes);
        let acl = ringlet_command::acl::AclTable::new(ringlet_command::acl::Users::new(
            requirepass.as_deref(),
        ));
        Shared {
            acl,
            config,
            db,
            stats: Stats::default(),
            requirepass: RwLock::new(requirepass),
            clients: Mutex::new(BTreeMap::new()),
            next_client_id: AtomicU64::new(1),
            started: Instant::now(),
            port,
            random_seed: AtomicU64::new(now_ms() ^ 0x9e37_79b9_7f4a_7c15),
            exec: RwLock::new(()),
            hash_encoding: Default::default(),
            monitor: Default::default(),
            cmdstats: Default::default(),
        }
    }

    /// Whether a new connection must AUTH before other commands: the `default` user is
    /// not `on` + `nopass` (a `requirepass`, or ACL SETUSER default).
    pub fn auth_required(&self) -> bool {
        !self.acl.default_open()
    }

    /// A fresh pseudo-random u64 (splitmix64 over a shared counter).
    pub fn next_random(&self) -> u64 {
        let mut z = self
            .random_seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The shared-memory exporter serves mutations and access records through the same writer
/// lock as every other command.
impl ringlet_shm_exporter::EngineHost for Shared {
    fn with_engine<R>(&self, f: impl FnOnce(&mut ringlet_engine::Engine) -> R) -> R {
        f(&mut self.db.lock())
    }
}
