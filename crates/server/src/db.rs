//! The node's keyspace: the engine behind its single-writer mutex, plus the reader prototype
//! every worker clones. See `docs/design/server-threading.md` for why a mutex.

use parking_lot::{Mutex, MutexGuard};
use ringlet_engine::{Engine, EngineConfig, Reader};

/// Engine + lock. Mutations (and reads that must see the writer's view, e.g. after a reader
/// `Retry`) take [`Db::lock`]; plain reads go through a worker's own [`Reader`] without it.
pub struct Db {
    engine: Mutex<Engine>,
    reader: Reader,
}

impl Db {
    /// Build the engine with a data region of `memory_bytes_max`.
    ///
    /// # Errors
    /// The engine's error (bad size, OS refused the reservation).
    pub fn new(memory_bytes_max: u64) -> Result<Db, ringlet_engine::Error> {
        Db::with_index(memory_bytes_max, None)
    }

    /// [`Db::new`] with the index sized for `index_keys` keys from the start (no upsize
    /// until then: location hints taken meanwhile stay in the readers' table).
    ///
    /// # Errors
    /// As [`Db::new`].
    pub fn with_index(
        memory_bytes_max: u64,
        index_keys: Option<u64>,
    ) -> Result<Db, ringlet_engine::Error> {
        let mut cfg = EngineConfig {
            memory_bytes_max,
            ..EngineConfig::default()
        };
        if let Some(k) = index_keys {
            cfg.index_buckets_initial = cfg.index_buckets_initial.max(Engine::index_buckets_for(k));
        }
        let engine = Engine::new(cfg)?;
        let reader = engine.reader();
        Ok(Db {
            engine: Mutex::new(engine),
            reader,
        })
    }

    /// The writer. Hold it for one command only: every worker waits on it.
    pub fn lock(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock()
    }

    /// A lock-free reader for one worker thread.
    pub fn reader(&self) -> Reader {
        self.reader.clone()
    }
}
