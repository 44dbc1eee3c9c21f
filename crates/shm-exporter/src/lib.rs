//! `ringlet-shm-exporter`: the node side of one-sided reads (the client side, its protocol
//! and the validity region are `ringlet-shm`, which clients depend on without this crate).
//!
//! The node side: a Unix socket that hands the engine's regions to same-host clients and
//! serves their mutations, fallback reads and access records.
//!
//! Per connection: the server sends HELLO with two read-only memfds attached (SCM_RIGHTS),
//! then serves native frames (`docs/protocol.md`) and ACCESS batches until the client leaves.
//! One thread per connection, blocking I/O: shared-memory clients are a handful of processes
//! on this host whose GETs never reach us; what does reach us (writes, rare fallbacks,
//! access batches) is not worth an event loop. Connections are bounded by
//! [`ExporterConfig::connections_max`].
//!
//! Server integration (a few lines):
//! ```ignore
//! let engine = Arc::new(parking_lot::Mutex::new(engine));
//! let exporter = Exporter::spawn(engine.clone(), ExporterConfig::new(path))?;
//! // on a cluster-map change:
//! exporter.set_epoch(Epoch(7));
//! ```

use parking_lot::Mutex;
use ringlet_codec::native::{
    encode_error_response, encode_get_response, encode_int_response, encode_status_response,
    MgetResponseWriter, NativeRequest, Opcode, RequestFrame, SetCond, Status,
};
use ringlet_engine::{Condition, Engine, Expiry, ReadOutcome, Reader, SetOptions, SetOutcome};
use ringlet_shm::fdpass::{reopen_read_only, send_with_fds};
use ringlet_shm::proto::{decode_client_message, ClientMessage, Hello, HELLO_FLAG_VALIDITY};
use ringlet_shm::ShmError;
use ringlet_types::{limits, Epoch, MemgestId, ValueKind, Version};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Whatever holds the node's engine behind its writer lock. Implemented for the two mutexes;
/// the server implements it for its own `Db` in three lines.
pub trait EngineHost: Send + Sync + 'static {
    /// Run `f` with the writer lock held. Keep `f` short: every writer waits.
    fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R;
}

impl EngineHost for parking_lot::Mutex<Engine> {
    fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        f(&mut self.lock())
    }
}

impl EngineHost for std::sync::Mutex<Engine> {
    fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        // A poisoned lock means a writer panicked mid-mutation; the engine's own invariants
        // hold per call (it never panics on input), so keep serving.
        let mut g = self.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }
}

/// Exporter settings.
#[derive(Clone, Debug)]
pub struct ExporterConfig {
    /// Path of the Unix socket. A stale socket file left by a dead node is replaced.
    pub path: PathBuf,
    /// The node's epoch at start.
    pub epoch: Epoch,
    /// This incarnation's generation; 0 = pick one at random.
    pub generation: u64,
    /// Most simultaneous client connections; more are closed at accept.
    pub connections_max: u32,
    /// A cluster node's validity region (`ringlet_shm::validity`), sent read-only as HELLO's third
    /// fd. Only read during [`Exporter::spawn`] (re-opened read-only there).
    pub validity_fd: Option<RawFd>,
    /// Serve native frames (writes and fallback reads) against the engine. A cluster node
    /// says no: its writes must go through the replica core, and its reads through the
    /// core's checks, so clients use the cluster's own ports for both (PING still answers).
    /// Access records are then counted but not applied (see `serve_conn`).
    pub serve_requests: bool,
}

impl ExporterConfig {
    /// Defaults: epoch 0, random generation, [`limits::SHM_CONNECTIONS_MAX`] connections.
    pub fn new(path: impl Into<PathBuf>) -> ExporterConfig {
        ExporterConfig {
            path: path.into(),
            epoch: Epoch(0),
            generation: 0,
            connections_max: limits::SHM_CONNECTIONS_MAX,
            validity_fd: None,
            serve_requests: true,
        }
    }
}

/// Counters of an exporter (monotonic, for metrics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExporterStats {
    pub connections_accepted: u64,
    pub connections_refused: u64,
    pub connections_open: u64,
    pub requests: u64,
    pub access_batches: u64,
    pub access_hashes: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    open: AtomicU64,
    requests: AtomicU64,
    access_batches: AtomicU64,
    access_hashes: AtomicU64,
}

struct Shared<H> {
    host: Arc<H>,
    reader: Reader,
    index_ro: OwnedFd,
    data_ro: OwnedFd,
    validity_ro: Option<OwnedFd>,
    serve_requests: bool,
    index_len: u64,
    data_len: u64,
    epoch: AtomicU64,
    generation: u64,
    stop: AtomicBool,
    counters: Counters,
    conns: Mutex<Vec<(u64, UnixStream)>>,
    connections_max: u32,
}

/// A running exporter. Dropping it stops accepting, closes every client connection and
/// removes the socket file.
pub struct Exporter {
    stop: Arc<dyn Fn() + Send + Sync>,
    epoch_setter: Arc<dyn Fn(Epoch) + Send + Sync>,
    stats: Arc<dyn Fn() -> ExporterStats + Send + Sync>,
    accept: Option<JoinHandle<()>>,
    path: PathBuf,
    generation: u64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A random non-zero generation (what [`ExporterConfig::generation`] 0 picks).
pub fn random_generation() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = nanos ^ (u64::from(std::process::id()) << 40) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

impl Exporter {
    /// Bind `cfg.path`, stamp the epoch into the index header (readers pin it) and start
    /// accepting on a background thread.
    ///
    /// # Errors
    /// [`ShmError::Io`] if the socket cannot be bound or the memfds cannot be re-opened
    /// read-only.
    pub fn spawn<H: EngineHost>(host: Arc<H>, cfg: ExporterConfig) -> Result<Exporter, ShmError> {
        let (info, reader) = host.with_engine(|e| {
            e.set_config_id(cfg.epoch.0);
            (e.export(), e.reader())
        });
        let index_ro = reopen_read_only(info.index_fd)?;
        let data_ro = reopen_read_only(info.data_fd)?;
        let validity_ro = cfg.validity_fd.map(reopen_read_only).transpose()?;
        // A socket file whose listener is gone (a killed node) would make bind fail; one that
        // still answers belongs to a live node and must not be stolen.
        if cfg.path.exists() {
            if UnixStream::connect(&cfg.path).is_ok() {
                return Err(ShmError::Io(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another node is listening on this socket",
                )));
            }
            let _ = std::fs::remove_file(&cfg.path);
        }
        let listener = UnixListener::bind(&cfg.path)?;
        listener.set_nonblocking(true)?;
        let generation = if cfg.generation == 0 {
            random_generation()
        } else {
            cfg.generation
        };
        let shared = Arc::new(Shared {
            host,
            reader,
            index_ro,
            data_ro,
            validity_ro,
            serve_requests: cfg.serve_requests,
            index_len: info.index_len as u64,
            data_len: info.data_len as u64,
            epoch: AtomicU64::new(cfg.epoch.0),
            generation,
            stop: AtomicBool::new(false),
            counters: Counters::default(),
            conns: Mutex::new(Vec::new()),
            connections_max: cfg.connections_max,
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("shm-accept".into())
            .spawn(move || accept_loop(&s, &listener))?;
        let (s1, s2, s3) = (shared.clone(), shared.clone(), shared);
        Ok(Exporter {
            stop: Arc::new(move || {
                s1.stop.store(true, Ordering::Release);
                for (_, c) in s1.conns.lock().iter() {
                    let _ = c.shutdown(std::net::Shutdown::Both);
                }
            }),
            epoch_setter: Arc::new(move |e: Epoch| {
                // Header first, then the handshake value: a client that connects in between
                // gets the old epoch, pins it, and is told by its first read to reconnect.
                s2.host.with_engine(|eng| eng.set_config_id(e.0));
                s2.epoch.store(e.0, Ordering::Release);
            }),
            stats: Arc::new(move || {
                let c = &s3.counters;
                ExporterStats {
                    connections_accepted: c.accepted.load(Ordering::Relaxed),
                    connections_refused: c.refused.load(Ordering::Relaxed),
                    connections_open: c.open.load(Ordering::Relaxed),
                    requests: c.requests.load(Ordering::Relaxed),
                    access_batches: c.access_batches.load(Ordering::Relaxed),
                    access_hashes: c.access_hashes.load(Ordering::Relaxed),
                }
            }),
            accept: Some(accept),
            path: cfg.path,
            generation,
        })
    }

    /// Move the node to `epoch`: one-sided readers pinned to another epoch stop reading the
    /// regions at their next GET and re-handshake.
    pub fn set_epoch(&self, epoch: Epoch) {
        (self.epoch_setter)(epoch);
    }

    /// This incarnation's generation (sent in HELLO).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A counters snapshot.
    pub fn stats(&self) -> ExporterStats {
        (self.stats)()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        (self.stop)();
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Poll interval of the accept loop: how long `Drop` may wait for it.
const ACCEPT_POLL_MS: u64 = 50;

fn accept_loop<H: EngineHost>(shared: &Arc<Shared<H>>, listener: &UnixListener) {
    let mut next_id = 0u64;
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((sock, _)) => {
                let c = &shared.counters;
                if c.open.load(Ordering::Relaxed) >= u64::from(shared.connections_max) {
                    c.refused.fetch_add(1, Ordering::Relaxed);
                    continue; // dropped: closed
                }
                c.accepted.fetch_add(1, Ordering::Relaxed);
                c.open.fetch_add(1, Ordering::Relaxed);
                next_id += 1;
                let id = next_id;
                if let Ok(clone) = sock.try_clone() {
                    shared.conns.lock().push((id, clone));
                }
                let s = shared.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("shm-conn".into())
                        .spawn(move || {
                            let _ = serve_conn(&s, sock);
                            s.conns.lock().retain(|(i, _)| *i != id);
                            s.counters.open.fetch_sub(1, Ordering::Relaxed);
                        });
                if spawned.is_err() {
                    shared.conns.lock().retain(|(i, _)| *i != id);
                    c.open.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(ACCEPT_POLL_MS));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(ACCEPT_POLL_MS)),
        }
    }
}

/// Read chunk of a connection.
const READ_CHUNK_BYTES: usize = 64 * 1024;

fn serve_conn<H: EngineHost>(shared: &Shared<H>, mut sock: UnixStream) -> io::Result<()> {
    sock.set_nonblocking(false)?;
    let mut hello = Hello::new(
        shared.index_len,
        shared.data_len,
        Epoch(shared.epoch.load(Ordering::Acquire)),
        shared.generation,
    );
    let mut fds = vec![shared.index_ro.as_raw_fd(), shared.data_ro.as_raw_fd()];
    if let Some(v) = &shared.validity_ro {
        hello.flags |= HELLO_FLAG_VALIDITY;
        fds.push(v.as_raw_fd());
    }
    send_with_fds(&sock, &hello.encode(), &fds)?;
    let mut rbuf: Vec<u8> = Vec::new();
    let mut wbuf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    let mut hashes = Vec::new();
    let mut scratch = Vec::new();
    loop {
        let mut pos = 0usize;
        let mut close = false;
        // Bounded by rbuf.len(): every decoded message consumes at least its header.
        while pos < rbuf.len() {
            match decode_client_message(&rbuf[pos..], &mut hashes) {
                Ok(Some((ClientMessage::Access, n))) => {
                    // A cluster node (no requests served) counts them but does not feed its
                    // eviction policy, as its own fast-path reads do not (crates/cluster
                    // node.rs `fast_get`: every entry marked hot left a full node's eviction
                    // scan without a victim for pinned writes).
                    if shared.serve_requests {
                        shared.host.with_engine(|e| e.record_access(&hashes));
                    }
                    let c = &shared.counters;
                    c.access_batches.fetch_add(1, Ordering::Relaxed);
                    c.access_hashes
                        .fetch_add(hashes.len() as u64, Ordering::Relaxed);
                    pos += n;
                }
                Ok(Some((ClientMessage::Request(frame), n))) => {
                    shared.counters.requests.fetch_add(1, Ordering::Relaxed);
                    handle(shared, &frame, &mut scratch, now_ms(), &mut wbuf);
                    pos += n;
                }
                Ok(None) => break,
                Err(e) => {
                    // No request id to answer to: the stream cannot be resynchronised.
                    let epoch = Epoch(shared.epoch.load(Ordering::Relaxed));
                    encode_error_response(
                        &mut wbuf,
                        0,
                        Opcode::Ping,
                        Status::BAD_REQUEST,
                        epoch,
                        &e.to_string(),
                    );
                    close = true;
                    break;
                }
            }
        }
        rbuf.drain(..pos);
        if rbuf.len() > limits::CONN_READ_BUFFER_BYTES_MAX as usize {
            close = true;
        }
        if !wbuf.is_empty() {
            sock.write_all(&wbuf)?;
            wbuf.clear();
        }
        if close {
            return Ok(());
        }
        let n = match sock.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(());
        }
        rbuf.extend_from_slice(&chunk[..n]);
    }
}

fn error_status(e: ringlet_engine::Error) -> Status {
    use ringlet_engine::Error as E;
    match e {
        E::KeyTooLarge { .. } | E::ValueTooLarge { .. } => Status::TOO_LARGE,
        E::NoSpace => Status::NO_SPACE,
        E::NotInteger | E::NotFloat => Status::NOT_INTEGER,
        E::Overflow => Status::OVERFLOW,
        E::StaleVersion | E::UnknownMemgest => Status::BAD_REQUEST,
        E::WrongType => Status::WRONG_TYPE,
        E::Config | E::Os { .. } => Status::INTERNAL,
    }
}

/// Lock-free read, falling back to the writer lock on `Retry`.
fn read<H: EngineHost>(
    shared: &Shared<H>,
    key: &[u8],
    now: u64,
    scratch: &mut Vec<u8>,
) -> Option<(Version, ValueKind)> {
    match shared.reader.get(key, now, scratch) {
        ReadOutcome::Hit { version, kind, .. } => Some((version, kind)),
        ReadOutcome::Miss => None,
        ReadOutcome::Retry => shared.host.with_engine(|e| e.get(key, now)).map(|e| {
            scratch.clear();
            scratch.extend_from_slice(&e.value);
            (e.version, e.kind)
        }),
    }
}

/// One native request against the engine (the semantics of the server's native handler).
fn handle<H: EngineHost>(
    shared: &Shared<H>,
    frame: &RequestFrame<'_>,
    scratch: &mut Vec<u8>,
    now: u64,
    out: &mut Vec<u8>,
) {
    let id = frame.request_id;
    let epoch = Epoch(shared.epoch.load(Ordering::Acquire));
    if !shared.serve_requests && !matches!(frame.request, NativeRequest::Ping) {
        return encode_error_response(
            out,
            id,
            frame.request.opcode(),
            Status::BAD_REQUEST,
            epoch,
            "a cluster node's shm socket serves one-sided reads only: \
             send requests to its client port",
        );
    }
    match frame.request {
        NativeRequest::Ping => {
            encode_status_response(out, id, Opcode::Ping, Status::OK, epoch, Version::ZERO)
        }
        NativeRequest::Get { key } => match read(shared, key, now, scratch) {
            Some((v, ValueKind::String)) => encode_get_response(out, id, epoch, v, Some(scratch)),
            // A record is a hash to Redis clients: GET of it is WRONGTYPE, as in Redis.
            Some((_, ValueKind::Record)) => encode_error_response(
                out,
                id,
                Opcode::Get,
                Status::WRONG_TYPE,
                epoch,
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            None => encode_get_response(out, id, epoch, Version::ZERO, None),
        },
        NativeRequest::Mget { keys } => {
            let mut w = MgetResponseWriter::begin(out, id, epoch);
            for key in keys.iter() {
                match read(shared, key, now, scratch) {
                    Some((v, ValueKind::String)) => w.push(out, Status::OK, v, scratch),
                    // Redis's MGET answers nil for a key that holds another type.
                    Some((_, ValueKind::Record)) | None => {
                        w.push(out, Status::NOT_FOUND, Version::ZERO, &[])
                    }
                }
            }
            w.finish(out);
        }
        NativeRequest::Set(s) => {
            if s.ttl_ms == Some(0) {
                return encode_error_response(
                    out,
                    id,
                    Opcode::Set,
                    Status::BAD_REQUEST,
                    epoch,
                    "ttl_ms must be > 0",
                );
            }
            let condition = match (s.cas, s.cond) {
                (Some(v), _) if v == Version::ZERO => Condition::IfAbsent,
                (Some(v), _) => Condition::IfVersion(v),
                (None, SetCond::Always) => Condition::Always,
                (None, SetCond::IfAbsent) => Condition::IfAbsent,
                (None, SetCond::IfPresent) => Condition::IfPresent,
            };
            let expiry = match s.ttl_ms {
                Some(ttl) => Expiry::At(now.saturating_add(ttl)),
                None => Expiry::Persist,
            };
            let r = shared.host.with_engine(|engine| {
                let memgest = s.memgest.unwrap_or_else(|| {
                    engine
                        .get(s.key, now)
                        .map_or(MemgestId::NONE, |e| e.memgest)
                });
                let opts = SetOptions {
                    version: s.version,
                    memgest,
                    expiry,
                    condition,
                    staged: false,
                    kind: ringlet_types::ValueKind::String,
                };
                engine.set(s.key, s.value, &opts, now)
            });
            match r {
                Ok(SetOutcome::Applied { version, .. }) => {
                    encode_status_response(out, id, Opcode::Set, Status::OK, epoch, version)
                }
                Ok(SetOutcome::NotApplied { current }) => {
                    let status = if s.cas.is_some() {
                        Status::CAS_MISMATCH
                    } else {
                        Status::NOT_STORED
                    };
                    let v = current.map_or(Version::ZERO, |e| e.version);
                    encode_status_response(out, id, Opcode::Set, status, epoch, v)
                }
                Err(e) => encode_error_response(
                    out,
                    id,
                    Opcode::Set,
                    error_status(e),
                    epoch,
                    &e.to_string(),
                ),
            }
        }
        NativeRequest::Del { key, cas } => {
            let r = shared.host.with_engine(|engine| {
                let have = engine.get(key, now).map(|e| e.version);
                if let Some(want) = cas {
                    if have.unwrap_or(Version::ZERO) != want {
                        return Ok((Status::CAS_MISMATCH, have.unwrap_or(Version::ZERO)));
                    }
                }
                if have.is_none() {
                    return Ok((Status::NOT_FOUND, Version::ZERO));
                }
                let v = engine.next_version(now);
                engine.delete(key, Some(v), now).map(|_| (Status::OK, v))
            });
            match r {
                Ok((st, v)) => encode_status_response(out, id, Opcode::Del, st, epoch, v),
                Err(e) => encode_error_response(
                    out,
                    id,
                    Opcode::Del,
                    error_status(e),
                    epoch,
                    &e.to_string(),
                ),
            }
        }
        // CHASE reads many keys under the writer lock per level: it is the client port's job
        // (a one-sided client chases links itself, `ShmReader::chase`).
        NativeRequest::Chase(_) => encode_error_response(
            out,
            id,
            Opcode::Chase,
            Status::UNSUPPORTED,
            epoch,
            "CHASE is served on the node's client port",
        ),
        // The command layer (ACL users, every command) is the client port's.
        NativeRequest::Command { .. } => encode_error_response(
            out,
            id,
            Opcode::Command,
            Status::UNSUPPORTED,
            epoch,
            "COMMAND is served on the node's client port",
        ),
        // The socket's file permissions are its access control (docs/design/acl.md): there
        // are no users to log in as here.
        NativeRequest::Auth { .. } => encode_error_response(
            out,
            id,
            Opcode::Auth,
            Status::UNSUPPORTED,
            epoch,
            "AUTH is served on the node's client port; this socket is guarded by its file \
             permissions",
        ),
        NativeRequest::IncrBy { key, delta } => {
            let r = shared.host.with_engine(|engine| {
                engine
                    .incr_by(key, delta, now)
                    .map(|v| (v, engine.get(key, now).map_or(Version::ZERO, |e| e.version)))
            });
            match r {
                Ok((v, version)) => encode_int_response(out, id, epoch, version, v),
                Err(e) => encode_error_response(
                    out,
                    id,
                    Opcode::IncrBy,
                    error_status(e),
                    epoch,
                    &e.to_string(),
                ),
            }
        }
    }
}
