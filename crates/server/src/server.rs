//! Starting and stopping a node: bind, spawn one worker thread per core, each with its own
//! tokio `current_thread` runtime, plus the admin HTTP thread.
//!
//! ```text
//!            std TcpListener (bound once, port 0 resolved here)
//!              | try_clone() per worker
//!   +----------+-----------+------------------+
//!   | worker 0             | worker 1  ...    |   one OS thread + current_thread runtime each
//!   |  accept loop         |  accept loop     |   (LocalSet: connection tasks never migrate)
//!   |  connections (tasks) |  connections     |
//!   |  Reader (lock-free)  |  Reader          |   GET/MGET/EXISTS/TTL answered here
//!   |  engine tick timer   |                  |   worker 0 only
//!   +----------+-----------+------------------+
//!              | mutations: parking_lot Mutex<Engine> (Db::lock)
//! ```
//!
//! Every worker polls the same listening socket (each through its own dup'd fd in its own
//! epoll); whichever wakes first accepts. See `docs/design/server-threading.md`.
//!
//! With `Config::io = IoMode::Uring` a worker runs `crate::uring::worker_main` instead of
//! the tokio runtime: same listener, same processors, one io_uring per worker (worker 0
//! still ticks the engine).

use crate::admin;
use crate::config::{Config, ConfigError, IoMode};
use crate::conn::{self, Worker};
use crate::db::Db;
use crate::shared::{now_ms, Shared, Stats};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::watch;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("engine: {0}")]
    Engine(#[from] ringlet_engine::Error),
    #[error("cannot start a worker thread: {0}")]
    Thread(std::io::Error),
    #[error("shared-memory socket: {0}")]
    Shm(ringlet_shm::ShmError),
    /// `--io uring` asked for, and this kernel or process cannot set up a ring.
    #[error("--io uring: {0}")]
    Uring(String),
}

/// The loop the workers run: `Uring` if asked for and possible (else the start fails),
/// `Epoll` if asked for, and for `Auto` whichever of the two this kernel and process allow.
fn resolve_io(asked: IoMode) -> Result<IoMode, StartError> {
    fn probe() -> Result<(), String> {
        #[cfg(target_os = "linux")]
        return crate::uring::probe().map_err(|e| e.to_string());
        #[cfg(not(target_os = "linux"))]
        return Err("io_uring is Linux only".into());
    }
    match asked {
        IoMode::Epoll => Ok(IoMode::Epoll),
        IoMode::Uring => probe().map(|()| IoMode::Uring).map_err(StartError::Uring),
        IoMode::Auto => match probe() {
            Ok(()) => Ok(IoMode::Uring),
            Err(why) => {
                tracing::info!(%why, "io_uring is not available; the workers run the epoll loop");
                Ok(IoMode::Epoll)
            }
        },
    }
}

/// Entry point of the node runtime.
pub struct Server;

impl Server {
    /// Validate `config`, bind the client (and admin) port, start the workers, and return
    /// once the node accepts connections.
    ///
    /// # Errors
    /// [`StartError`]: invalid config, port in use, engine memory refused.
    pub fn start(config: Config) -> Result<ServerHandle, StartError> {
        config.validate()?;
        let addr = SocketAddr::new(config.bind, config.port);
        let listener =
            StdListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| StartError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;

        let admin_listener = match config.admin_port {
            Some(p) => {
                let a = SocketAddr::new(config.admin_bind, p);
                let l =
                    StdListener::bind(a).map_err(|source| StartError::Bind { addr: a, source })?;
                l.set_nonblocking(true)
                    .map_err(|source| StartError::Bind { addr: a, source })?;
                Some(l)
            }
            None => None,
        };
        let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());

        // An explicit `--io uring` that cannot work is refused here, before any worker starts,
        // rather than served by a loop the operator did not ask for; the default (`auto`)
        // takes io_uring where the same probe succeeds and epoll otherwise.
        let mut config = config;
        config.io = resolve_io(config.io)?;
        let io = config.io;
        let db = Db::with_index(config.memory_mb << 20, config.index_keys)?;
        let threads = config.threads_effective();
        let shared = Arc::new(Shared::new(config, db, local_addr.port()));
        let (tx, rx) = watch::channel(false);
        let shm = match &shared.config.shm_socket {
            Some(path) => Some(
                ringlet_shm_exporter::Exporter::spawn(
                    shared.clone(),
                    ringlet_shm_exporter::ExporterConfig::new(path),
                )
                .map_err(StartError::Shm)?,
            ),
            None => None,
        };

        let mut handles = Vec::with_capacity(threads + 1);
        for idx in 0..threads {
            let l = listener
                .try_clone()
                .map_err(|source| StartError::Bind { addr, source })?;
            let shared = shared.clone();
            let rx = rx.clone();
            let h = std::thread::Builder::new()
                .name(format!("ringlet-worker-{idx}"))
                .spawn(move || match io {
                    #[cfg(target_os = "linux")]
                    IoMode::Uring => crate::uring::worker_main(idx, l, shared, rx),
                    _ => worker_main(idx, l, shared, rx),
                })
                .map_err(StartError::Thread)?;
            handles.push(h);
        }
        if let Some(l) = admin_listener {
            let shared = shared.clone();
            let rx = rx.clone();
            let h = std::thread::Builder::new()
                .name("ringlet-admin".into())
                .spawn(move || admin::run(l, shared, rx))
                .map_err(StartError::Thread)?;
            handles.push(h);
        }
        tracing::info!(%local_addr, ?admin_addr, threads, ?io, "ringlet node listening");
        Ok(ServerHandle {
            local_addr,
            admin_addr,
            shutdown: Arc::new(tx),
            threads: handles,
            shared,
            _shm: shm,
        })
    }
}

/// A running node. Dropping it stops the node and joins its threads.
pub struct ServerHandle {
    local_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    shutdown: Arc<watch::Sender<bool>>,
    threads: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
    /// One-sided read exporter (`--shm-socket`); dropped after the workers stop.
    _shm: Option<ringlet_shm_exporter::Exporter>,
}

/// Stops one or several nodes from anywhere (a signal handler, another thread).
#[derive(Clone)]
pub struct ShutdownTrigger(Vec<Arc<watch::Sender<bool>>>);

impl ShutdownTrigger {
    /// Ask every worker to stop; connections are closed.
    pub fn trigger(&self) {
        for s in &self.0 {
            let _ = s.send(true);
        }
    }

    /// One trigger that stops every node of `triggers` (a local cluster).
    pub fn fan_out(triggers: Vec<ShutdownTrigger>) -> ShutdownTrigger {
        ShutdownTrigger(triggers.into_iter().flat_map(|t| t.0).collect())
    }
}

impl ServerHandle {
    /// The client address actually bound (the port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The admin HTTP address, if enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// A handle that stops this node.
    pub fn shutdown_trigger(&self) -> ShutdownTrigger {
        ShutdownTrigger(vec![self.shutdown.clone()])
    }

    /// Connections currently open (for tests and `ringlet up` status lines).
    pub fn connected_clients(&self) -> u64 {
        Stats::get(&self.shared.stats.connected)
    }

    /// Block until a [`ShutdownTrigger`] fires and every thread has stopped.
    pub fn wait(mut self) {
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }

    /// Stop the node and wait for its threads.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker_main(
    idx: usize,
    listener: StdListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(worker = idx, error = %e, "cannot build the worker runtime");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(worker = idx, error = %e, "cannot register the listener");
                return;
            }
        };
        let worker = Rc::new(Worker::new(shared.db.reader()));
        if idx == 0 {
            tokio::task::spawn_local(ticker(shared.clone(), shutdown.clone()));
        }
        // The event loop: the one loop without a trip bound; it ends on shutdown.
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                r = listener.accept() => match r {
                    Ok((stream, peer)) => {
                        tokio::task::spawn_local(conn::serve(stream, peer, shared.clone(), worker.clone()));
                    }
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning on a failing accept.
                        tracing::warn!(worker = idx, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }
    });
    // Dropping the LocalSet drops every connection task, which closes their sockets.
    drop(local);
}

/// Drives the engine's bounded background work (active expiry, incremental upsize,
/// compaction) every `tick_interval_ms`.
async fn ticker(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_millis(shared.config.tick_interval_ms));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = every.tick() => {
                let report = shared.db.lock().tick(now_ms());
                if report.expired > 0 || report.buckets_migrated > 0 {
                    tracing::trace!(?report, "engine tick");
                }
            }
        }
    }
}
