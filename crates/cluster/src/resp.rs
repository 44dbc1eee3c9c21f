//! RESP front end of a node in cluster mode, speaking Redis Cluster to clients:
//! `-MOVED <slot> <ip>:<port>` for keys another node coordinates, `CLUSTER SLOTS`,
//! `CLUSTER SHARDS`, `CLUSTER NODES`, `CLUSTER KEYSLOT`, `CLUSTER INFO`, `CLUSTER MYID`,
//! and `COMMAND` from the one command table (ringlet-command) (redis-py's `RedisCluster` reads it to find
//! key positions). So `redis-cli -c` and redis-py `RedisCluster` work unchanged.
//!
//! Data commands go through [`ClusterNode::submit`]: the replica core checks that this node
//! coordinates the slot in its current epoch, orders the write, and answers when the
//! memgest's commit rule holds. Read-modify-write commands (INCR, APPEND, SET NX/XX/GET, DEL's
//! count) take a per-key lock on this node around "read committed value, write new one":
//! every mutation of a key on its coordinator takes the same lock, so the pair is atomic;
//! if the coordinator changes in between, the write is refused (`NotCoordinator`) and the
//! command answers MOVED/TRYAGAIN without effect.
//!
//! Definite refusals (`StaleEpoch`, `NotReady`, `Busy`, `NotCoordinator` while the map still
//! names this node) are retried here with a short backoff up to [`OP_DEADLINE`]; that is the
//! window in which a failover completes without the client seeing an error. Past it: `-TRYAGAIN`.
//! An `Ambiguous` write answers `-ERR` and says so: the client must treat it as unknown.
//!
//! Memgest commands (docs/design/memgest-commands.md): `MEMGEST CREATE|DROP|LIST|DEFAULT|INFO`
//! go to the control plane from any node; `SET key value ... MEMGEST name`,
//! `MEMGEST MOVE key name` and `MEMGEST KEY key` route by key like any data command. MOVE
//! runs on the coordinator under the key's lock: read the committed value, write it under the
//! new memgest with a new version; readers see the old version until the new one commits,
//! never a missing key; the replica core retires the old copies.
//!
//! TTLs replicate with each entry (docs/design/cluster-ttl.md). Key commands written once for
//! both fronts (`ringlet_server::cmd::{string, bits, lcs, keyspace}`: INCR, APPEND, SETRANGE,
//! EXPIRE, TTL, RENAME, COPY, MSETNX, ... ) run here over the replicated keyspace
//! (`resp/keyspace.rs`, `Replicated`: the per-key lock, a read at the coordinator, writes
//! through the core), and so do DEL, EXISTS, the per-node enumerations (KEYS, SCAN,
//! RANDOMKEY, DBSIZE, FLUSHALL) and the records family (HSET …, LINK, RECORD SET).
//! GET, SET, MGET and MSET keep this front's own handlers (fast read path, blind-write
//! ambiguity resolution), and CHASE its own walk (resp/records.rs).
//! Not supported in cluster mode (answered with an error): multi-slot commands (`-CROSSSLOT`,
//! as Redis). Transactions (MULTI/EXEC) within one slot are in `resp/transaction.rs`.

mod admin;
mod clients;
mod conditional;
pub(crate) use admin::SlotLoadReport;
pub(crate) use clients::{NativeLogin, NativeSession};
pub(crate) use conditional::CondOutcome;
mod keyspace;
mod records;
mod reshard;
mod transaction;

use crate::control::{FromControl, ToControl};
use crate::node::{client_addr, ClusterNode, FrontRetry, StepKind, SubmitError};
use parking_lot::Mutex;
use ringlet_codec::resp::{Proto, Reply, Request, RequestDecoder};
use ringlet_command::Mode;
use ringlet_control::{ClusterMap, MemgestReport, NodeState};
use ringlet_replica::{ClientOp, ClientReply};
use ringlet_server::cmd::node;
use ringlet_types::{key_slot, limits, MemgestId, MemgestKind, NodeId, Slot, ValueKind};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a command keeps retrying definite refusals (failover, rebuild, back-pressure)
/// before answering `-TRYAGAIN`. Above lease + rebuild so a failover is usually invisible.
pub const OP_DEADLINE: Duration = Duration::from_secs(4);
/// First retry delay; doubles up to [`RETRY_BACKOFF_MAX`].
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(2);
const RETRY_BACKOFF_MAX: Duration = Duration::from_millis(50);
/// Requests decoded from one read before they are run (bounds a pipeline's working set).
const PIPELINE_BATCH_MAX: usize = 1024;
/// Replies buffered before they are written (and the connection waits for the client to read
/// them): 150 pipelined GETs of a 16 MiB value, never read, grew a node past 2.8 GB when a
/// whole batch was buffered (issue 10, case 3).
const OUT_FLUSH_BYTES: usize = 1 << 20;
/// Pipelined single-key writes on distinct keys run concurrently at most (see
/// `write_run`): bounds the writes one connection has in the core at once (their arguments
/// are in the read buffer anyway).
const WRITE_RUN_MAX: usize = 64;

/// Writes that never join a run although they name one key: a memgest move re-places the
/// key through the control plane (a slow, rare operation whose order against the writes
/// around it the client may rely on), and RESTORE may carry a 64 MiB payload whose decode
/// should not overlap others'.
const WRITE_RUN_EXCLUDED: &[&str] = &["memgest|move", "restore", "restore-asking"];

/// The one key of `argv` if it is a write of exactly one key (by the command table) that may
/// join a pipelined run; `None` otherwise (reads, multi-key and keyless commands, unknown
/// ones, connection and transaction commands, [`WRITE_RUN_EXCLUDED`]).
fn run_key(argv: &[Vec<u8>]) -> Option<&[u8]> {
    let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let spec = ringlet_command::table().spec(ringlet_command::lookup(&args).ok()?);
    if !spec.write || WRITE_RUN_EXCLUDED.contains(&spec.name) || !spec.arity_ok(args.len()) {
        return None;
    }
    let mut keys = spec.key_args(&args);
    match (keys.next(), keys.next()) {
        (Some(k), None) => Some(k),
        _ => None,
    }
}

/// Polls `inner` with the node's peer messages corked ([`ClusterNode::corked`]): whatever
/// the operations it submits during one poll emit is sent, one write per peer, when that
/// poll returns — before the task waits, so no message is held across a wait.
struct Corked<'a, F> {
    node: &'a ClusterNode,
    inner: std::pin::Pin<Box<F>>,
}

impl<F: std::future::Future> std::future::Future for Corked<'_, F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let node = self.node;
        let inner = self.inner.as_mut();
        node.corked(|| inner.poll(cx))
    }
}

/// Whether `reply` says the connection's user was deleted: the connection is then closed,
/// as Redis does.
fn user_gone(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(e) if e == ringlet_command::acl::USER_GONE.as_bytes())
}

/// How many requests from the start of `batch` form a run of single-key writes on distinct
/// keys (at most [`WRITE_RUN_MAX`]); 0 or 1 means no run.
fn write_run(batch: &[Vec<Vec<u8>>]) -> usize {
    let mut keys: Vec<&[u8]> = Vec::new();
    for a in batch.iter().take(WRITE_RUN_MAX) {
        match run_key(a) {
            Some(k) if !keys.contains(&k) => keys.push(k),
            _ => break,
        }
    }
    keys.len()
}

/// Pipelined GETs run concurrently at most: their values are held until encoded, so this
/// bounds a connection's reply memory to ~16 values (≤ 16 × 64 MiB worst case, the
/// single node's write-buffer bound is 256 MiB).
const GET_RUN_MAX: usize = 16;
/// See [`Front::reset_stats`].
#[derive(Clone, Copy, Default)]
struct StatBases {
    received: u64,
    expired: u64,
    evicted: u64,
}

/// The reply a connection past [`limits::CONNECTIONS_MAX`] gets before it is closed (Redis's).
const MAX_CLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";

tokio::task_local! {
    /// Per connection (scoped around each connection's task): its newest acknowledged
    /// write, which WAIT waits on, and whether it is running an EXEC (WAIT inside a
    /// transaction answers at once, as in Redis).
    static CONN_WRITES: ConnWrites;
}

/// Remember `key`'s acknowledged write `version` as the connection's newest (for WAIT); a
/// no-op outside a connection's task.
fn note_write(key: &[u8], version: ringlet_types::Version) {
    // The newest, not the last to complete: a pipelined run's SETs complete in any order.
    let _ = CONN_WRITES.try_with(|w| {
        let mut last = w.last.borrow_mut();
        if last.as_ref().is_none_or(|(_, v)| *v <= version) {
            *last = Some((key.to_vec(), version));
        }
    });
}

/// See [`CONN_WRITES`].
#[derive(Default)]
struct ConnWrites {
    last: std::cell::RefCell<Option<(Vec<u8>, ringlet_types::Version)>>,
    in_exec: std::cell::Cell<bool>,
}
/// Keys with an RMW lock held at once: bounded by connections (one command each).
const KEY_LOCKS_MAX: usize = limits::CONNECTIONS_MAX as usize;

/// Longest a memgest command waits for the control plane (a drop waits for usage reports:
/// `control::DROP_WAIT_MS`, plus margin).
const CONTROL_DEADLINE: Duration = Duration::from_millis(crate::control::DROP_WAIT_MS + 2_000);
/// Longest a write naming a memgest this node's map does not know yet waits for the map
/// (a memgest created through another node reaches every node within a push).
const MEMGEST_MAP_WAIT: Duration = Duration::from_secs(2);

/// Redis's reply to a string command on a hash (a record here).
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A key's value as the coordinator holds it.
struct Got {
    value: Vec<u8>,
    /// Unix ms (`None`: no TTL).
    expiry_ms: Option<u64>,
    kind: ValueKind,
}

const AMBIGUOUS: &str = "ERR ambiguous: the coordinator changed with this write in flight; it may or may not have taken effect";
/// What Redis answers a write it cannot store (`maxmemory` reached, `noeviction`).
const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// The front end shared by all connections of a node.
pub struct Front {
    node: ClusterNode,
    locks: Mutex<HashMap<Vec<u8>, Arc<tokio::sync::Mutex<()>>>>,
    /// The password of the `default` user (`--requirepass`): every node of a cluster is
    /// given the same one (`ringlet up` passes its own to the nodes it starts), and a node
    /// uses it for its own RESP calls to peers (ambiguity resolution).
    requirepass: Option<Vec<u8>>,
    /// With TLS on the client port (docs/design/cluster-tls.md): how this node reaches other
    /// nodes' client ports (ambiguity resolution).
    tls_connector: Option<tokio_rustls::TlsConnector>,
    /// This node's RESP connections (CLIENT ID/LIST/INFO/SETNAME).
    clients: clients::Clients,
    /// The admin port's Prometheus recorder (resp/admin.rs): this node's own.
    recorder: metrics_exporter_prometheus::PrometheusRecorder,
    /// Transactions (resp/transaction.rs): every RESP command runs under the read side, EXEC
    /// under the write side, so no other client's command runs in between. An async lock:
    /// commands hold it across replication round trips.
    exec: tokio::sync::RwLock<()>,
    /// CONFIG `hash-max-listpack-*` of this node: only what OBJECT ENCODING names a record
    /// (per node, as CONFIG SET on a Redis Cluster node).
    hash_encoding: ringlet_server::cmd::keyspace::HashEncodingMax,
    /// SLOWLOG and LATENCY of this node (`ringlet_server::cmd::slowlog`, the single node's),
    /// fed by [`Front::command`].
    monitor: ringlet_server::cmd::slowlog::Monitor,
    /// INFO stats' counters that come from elsewhere (connections accepted, the engine's
    /// expirations and evictions) as they were at the last CONFIG RESETSTAT: INFO counts
    /// from there.
    stat_bases: Mutex<StatBases>,
    /// Requests served per slot and latency per command (crate::load): the status page's
    /// heat map and charts, INFO commandstats/latencystats, the per-range `/metrics`.
    load: Arc<crate::load::Load>,
    /// ACL users (docs/design/acl.md): this node's `default` user (from `requirepass`) and
    /// the cluster map's users, rebuilt when the map's `users_version` moves.
    acl: ringlet_command::acl::AclTable,
    /// `users_version` of the map `acl` was built from (`u64::MAX`: none yet).
    acl_version: std::sync::atomic::AtomicU64,
    /// Slots marked `CLUSTER SETSLOT s MIGRATING id` on this node, with their target
    /// (resp/reshard.rs): MIGRATE moves only slots marked to its destination.
    migrating: Mutex<HashMap<Slot, NodeId>>,
}

/// TLS of the client port: the server side, and the client side for calls to other nodes.
#[derive(Clone)]
pub struct ClientTls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub connector: tokio_rustls::TlsConnector,
}

/// Serve RESP clients on `listener` until the task is dropped (over TLS only, if `tls`).
pub async fn serve(
    listener: TcpListener,
    node: ClusterNode,
    requirepass: Option<String>,
    tls: Option<ClientTls>,
    admin: Option<(TcpListener, Option<std::sync::Arc<str>>)>,
) {
    let front = Arc::new(Front {
        node,
        locks: Mutex::new(HashMap::new()),
        requirepass: requirepass.clone().map(String::into_bytes),
        tls_connector: tls.as_ref().map(|t| t.connector.clone()),
        clients: clients::Clients::default(),
        recorder: metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
        exec: tokio::sync::RwLock::new(()),
        hash_encoding: Default::default(),
        monitor: Default::default(),
        stat_bases: Mutex::new(StatBases::default()),
        load: Arc::new(crate::load::Load::default()),
        acl: ringlet_command::acl::AclTable::new(ringlet_command::acl::Users::new(
            requirepass.as_deref().map(str::as_bytes),
        )),
        acl_version: std::sync::atomic::AtomicU64::new(u64::MAX),
        migrating: Mutex::new(HashMap::new()),
    });
    tokio::spawn(crate::load::sample_forever(Arc::downgrade(&front.load)));
    if let Some((l, token)) = admin {
        tokio::spawn(ringlet_server::admin::serve(l, front.clone(), token));
    }
    let acceptor = tls.map(|t| t.acceptor);
    let open = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let closed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    trim_after_closes(&closed);
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if open.load(std::sync::atomic::Ordering::Relaxed) >= limits::CONNECTIONS_MAX {
            // Say why before closing (a bare close reads as a reset), without waiting on a
            // client that does not read.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(MAX_CLIENTS))
                    .await;
            });
            continue;
        }
        open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let f = front.clone();
        let open = open.clone();
        let closed = closed.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(CONN_WRITES.scope(ConnWrites::default(), async move {
            match acceptor {
                None => {
                    let _ = f.connection(stream).await;
                }
                Some(acceptor) => {
                    // RESP and native frames over TLS, told apart by the first byte as on
                    // TCP. A client that does not finish the handshake in time is dropped.
                    let _ = stream.set_nodelay(true);
                    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
                    let (Ok(addr), Ok(laddr)) = (stream.peer_addr(), stream.local_addr()) else {
                        open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                        return;
                    };
                    let hs = tokio::time::timeout(
                        crate::tls::HANDSHAKE_TIMEOUT,
                        acceptor.accept(stream),
                    )
                    .await;
                    if let Ok(Ok(tls)) = hs {
                        // A one-byte buffer to look at the first byte: reads larger than
                        // it bypass it, so the connection keeps its own buffer bounds.
                        let mut tls = tokio::io::BufReader::with_capacity(1, tls);
                        let native = matches!(
                            tokio::io::AsyncBufReadExt::fill_buf(&mut tls).await,
                            Ok([b, ..]) if ringlet_codec::native::is_native(*b)
                        );
                        if native {
                            let _ = crate::native::connection(f, tls).await;
                        } else {
                            let _ = f.resp_connection(tls, addr, laddr, fd).await;
                        }
                    }
                }
            }
            open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }));
    }
}

/// Give the memory of closed connections back to the OS. Their buffers are freed at close,
/// but glibc's malloc keeps freed chunks below its (dynamic) mmap threshold in its heaps, so
/// 2,000 closed half-sent 64 KiB requests left ~100 MiB resident for good (issue 10, case 8).
/// At most once a second, and only after connections closed: `malloc_trim` walks the heaps
/// and returns their free pages. It runs on a thread of its own, named `ringlet-trim`, so no
/// connection task waits for it and the runtime's blocking pool is not grown by a background
/// chore (a blocking-pool thread carries the workers' name, and `up --threads N` is checked
/// by counting those). The thread ends once the listener that counts closes is gone.
fn trim_after_closes(closed: &Arc<std::sync::atomic::AtomicU64>) {
    let closed = Arc::downgrade(closed);
    let spawned = std::thread::Builder::new()
        .name("ringlet-trim".into())
        .spawn(move || loop {
            std::thread::sleep(TRIM_INTERVAL);
            let Some(closed) = closed.upgrade() else {
                return;
            };
            if closed.swap(0, std::sync::atomic::Ordering::Relaxed) == 0 {
                continue;
            }
            #[cfg(all(target_os = "linux", target_env = "gnu"))]
            // SAFETY: malloc_trim takes no pointers; it only releases free heap memory.
            unsafe {
                libc::malloc_trim(0);
            }
        });
    if let Err(e) = spawned {
        // Not fatal: memory of closed connections then stays in malloc's heaps.
        tracing::warn!("cannot start the malloc trim thread: {e}");
    }
}

/// How often [`trim_after_closes`] may run.
const TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// Write the buffered replies once they pass [`OUT_FLUSH_BYTES`]: the connection then waits
/// for the client to read (TCP back-pressure) instead of buffering without bound. A large
/// buffer is given back after use.
async fn flush_if_large<S: AsyncWrite + Unpin>(
    stream: &mut S,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    if out.len() >= OUT_FLUSH_BYTES {
        stream.write_all(out).await?;
        stream.flush().await?;
        out.clear();
        if out.capacity() > 4 * OUT_FLUSH_BYTES {
            *out = Vec::with_capacity(16 * 1024);
        }
    }
    Ok(())
}

/// Capacity a drained buffer may keep between requests (what one read brings in at most).
const IDLE_BUFFER_BYTES: usize = READ_CHUNK_BYTES;
/// Room reserved for one read, once the socket is readable.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Give back a buffer's capacity beyond [`IDLE_BUFFER_BYTES`] once it holds nothing beyond
/// that: a large value or pipeline once passed through must not stay with the connection.
fn shrink_idle(b: &mut Vec<u8>) {
    if b.capacity() > IDLE_BUFFER_BYTES && b.len() <= IDLE_BUFFER_BYTES {
        b.shrink_to(IDLE_BUFFER_BYTES.max(b.len()));
    }
}

/// Bytes one read takes while the buffer has no room reserved: held in the connection's task,
/// so an idle connection costs this, not a heap buffer.
const SMALL_READ_BYTES: usize = 4096;

/// One read appended to `buf`. `Ok(0)` is end of stream. While the buffer has little room the
/// read goes through a small array in the task (an idle connection reserves nothing); once a
/// read fills it, more is likely on its way and room is reserved for the next read to land in
/// the buffer directly. Works on TCP and TLS streams alike.
async fn read_some<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() >= SMALL_READ_BYTES {
        return stream.read_buf(buf).await;
    }
    let mut small = [0u8; SMALL_READ_BYTES];
    let n = stream.read(&mut small).await?;
    buf.extend_from_slice(&small[..n]);
    if n == SMALL_READ_BYTES {
        buf.reserve(READ_CHUNK_BYTES);
    }
    Ok(n)
}

/// INFO lines saying where slow requests wait (docs/design/cluster-resharding.md, "Session
/// 17: the client tail"): long core steps by kind, GETs answered through the core, and the
/// fronts' retries by reason. Counters since the node started: a benchmark subtracts two
/// readings to attribute one window.
fn request_wait_lines(st: &crate::node::NodeStats) -> String {
    use std::fmt::Write as _;
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = String::new();
    let ms = ["1ms", "5ms", "20ms"];
    for (c, m) in st.slow_steps.iter().zip(ms) {
        let _ = write!(out, "core_steps_over_{m}:{}\r\n", c.load(Relaxed));
    }
    let _ = write!(
        out,
        "core_slow_step_us:{}\r\n",
        st.slow_step_us.load(Relaxed)
    );
    let _ = write!(out, "core_step_max_us:{}\r\n", st.step_max_us.load(Relaxed));
    for k in StepKind::ALL {
        let _ = write!(
            out,
            "core_steps_over_5ms_{}:{}\r\n",
            k.name(),
            st.slow_steps_by_kind[k as usize].load(Relaxed)
        );
    }
    let _ = write!(out, "core_gets:{}\r\n", st.core_gets.load(Relaxed));
    let _ = write!(
        out,
        "core_gets_queued:{}\r\n",
        st.core_gets_queued.load(Relaxed)
    );
    let _ = write!(out, "core_get_us:{}\r\n", st.core_get_us.load(Relaxed));
    for (c, m) in st.core_gets_slow.iter().zip(ms) {
        let _ = write!(out, "core_gets_over_{m}:{}\r\n", c.load(Relaxed));
    }
    for r in FrontRetry::ALL {
        let _ = write!(
            out,
            "front_retries_{}:{}\r\n",
            r.name(),
            st.front_retries[r as usize].load(Relaxed)
        );
    }
    let _ = write!(
        out,
        "front_retry_sleep_us:{}\r\n",
        st.front_retry_sleep_us.load(Relaxed)
    );
    out
}

fn err(s: impl Into<Vec<u8>>) -> Reply {
    Reply::Error(s.into())
}

fn hex_id(n: NodeId) -> String {
    format!("{:040x}", n.0)
}

impl Front {
    async fn connection(self: Arc<Self>, stream: TcpStream) -> std::io::Result<()> {
        // Native frames (first byte 0xA5, docs/protocol.md §2.5) go to the native front.
        let mut first = [0u8; 1];
        if stream.peek(&mut first).await? == 1 && ringlet_codec::native::is_native(first[0]) {
            let _ = stream.set_nodelay(true);
            return crate::native::connection(self.clone(), stream).await;
        }
        let _ = stream.set_nodelay(true);
        let (addr, laddr) = (stream.peer_addr()?, stream.local_addr()?);
        let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
        self.resp_connection(stream, addr, laddr, fd).await
    }

    /// A RESP connection over any stream (plain TCP, or TLS once the handshake is done).
    async fn resp_connection<S: AsyncRead + AsyncWrite + Unpin + Send>(
        self: Arc<Self>,
        mut stream: S,
        addr: std::net::SocketAddr,
        laddr: std::net::SocketAddr,
        fd: i32,
    ) -> std::io::Result<()> {
        self.sync_users();
        let registered = self.clients.register(
            addr,
            laddr,
            fd,
            ringlet_command::acl::ConnUser::new(&self.acl),
        );
        let conn = registered.conn.clone();
        // Both buffers start empty and grow with the bytes that actually arrive (`read_some`
        // reserves room only once a read filled its small array), and large ones are given
        // back once drained: an idle connection holds at most IDLE_BUFFER_BYTES of each.
        let mut buf: Vec<u8> = Vec::new();
        let mut out: Vec<u8> = Vec::new();
        let mut dec = RequestDecoder::new();
        let mut req = Request::new();
        let mut proto = Proto::Resp2;
        let mut authed = self.requirepass.is_none();
        // The commands queued since MULTI (`None` outside a transaction).
        let mut multi: Option<ringlet_server::cmd::transaction::Queue> = None;
        loop {
            // Users changed through the control plane apply from the next batch on.
            self.sync_users();
            // Decode every whole request in the buffer (pipelining), run them, then flush.
            let mut used = 0;
            let mut batch: Vec<Vec<Vec<u8>>> = Vec::new();
            let mut bad = None;
            loop {
                match dec.decode(&buf[used..], &mut req) {
                    Ok(None) => break,
                    Ok(Some(n)) => {
                        let argv = req.to_vecs(&buf[used..]);
                        used += n;
                        if !argv.is_empty() {
                            batch.push(argv);
                        }
                        if batch.len() >= PIPELINE_BATCH_MAX {
                            break;
                        }
                    }
                    Err(e) => {
                        bad = Some(e.to_string());
                        break;
                    }
                }
            }
            // What CLIENT LIST shows while this batch runs (Redis counts the request being
            // run as `qbuf`: a connection listing itself sees its own request).
            conn.buffers.record(
                (buf.len(), buf.capacity()),
                (out.len(), out.capacity()),
                multi.as_ref(),
            );
            let mut i = 0;
            while i < batch.len() {
                // A run of consecutive GETs runs concurrently (replies stay in order): reads
                // commute with each other, and everything before the run has completed.
                // Inside MULTI, GETs are queued like any command.
                let run = batch[i..]
                    .iter()
                    .take(if authed && multi.is_none() && self.unrestricted(&conn) {
                        GET_RUN_MAX
                    } else {
                        0
                    })
                    .take(GET_RUN_MAX)
                    .take_while(|a| a.len() == 2 && a[0].eq_ignore_ascii_case(b"get"))
                    .count();
                if run > 1 {
                    let exec = self.exec.read().await;
                    let replies = self.get_run(&batch[i..i + run], proto, authed, &conn).await;
                    drop(exec);
                    i += run;
                    for reply in replies {
                        reply.encode(proto, &mut out);
                        flush_if_large(&mut stream, &mut out).await?;
                    }
                    continue;
                }
                // A run of consecutive single-key writes on distinct keys (SET, HSET, INCR,
                // RECORD SET, DEL k, ...) runs concurrently too, replies in order.
                // Sequentially, each write of a pipeline waited for its own replication round
                // trip before the next was submitted, so a rep:3 node served a pipelined
                // connection one round trip per write (bench/cluster_load.py: ~44k SET/s
                // against ~316k for `none`). The writes of a pipeline are concurrent
                // operations for the client (none was answered when the next was sent), so
                // any order of their effects is linearizable; on distinct keys none can see
                // another's, and everything before the run has completed and everything
                // after starts once the run is answered, so the connection's other commands
                // see them in order. A repeated key ends the run (`SET k 1` then `SET k 2`
                // must leave 2), as does any read, multi-key or keyless command.
                let writes = if authed && multi.is_none() {
                    write_run(&batch[i..])
                } else {
                    0
                };
                if writes > 1 {
                    let exec = self.exec.read().await;
                    // Submitted under one cork: the run's Replicates leave in one write per
                    // peer at the end of each poll, not one system call each.
                    let run = batch[i..i + writes].iter();
                    let replies = Corked {
                        node: &self.node,
                        inner: Box::pin(self.commands_together(run, proto, authed, &conn)),
                    }
                    .await;
                    drop(exec);
                    i += writes;
                    let mut gone = false;
                    for reply in replies {
                        gone |= user_gone(&reply);
                        reply.encode(proto, &mut out);
                        flush_if_large(&mut stream, &mut out).await?;
                    }
                    if gone {
                        stream.write_all(&out).await?;
                        stream.flush().await?;
                        return Ok(());
                    }
                    continue;
                }
                let argv = &batch[i];
                i += 1;
                let mut quit = argv[0].eq_ignore_ascii_case(b"quit");
                let reply = match self
                    .transaction_step(&mut multi, argv, &mut proto, &mut authed, &conn)
                    .await
                {
                    Some(r) => r,
                    // RECORDS is another node's CHASE reading committed records: it never
                    // waits for this node's EXEC, so two nodes each in an EXEC that chases
                    // into the other cannot wait on each other.
                    None if argv[0].eq_ignore_ascii_case(b"records") => {
                        self.command(argv, &mut proto, &mut authed, &conn).await
                    }
                    // WAIT blocks this connection only: it must not hold off other clients'
                    // EXEC (which takes the exec lock's write side) while it waits.
                    None if argv[0].eq_ignore_ascii_case(b"wait") => {
                        self.command(argv, &mut proto, &mut authed, &conn).await
                    }
                    None => {
                        let _exec = self.exec.read().await;
                        self.command(argv, &mut proto, &mut authed, &conn).await
                    }
                };
                // A connection whose user was deleted is closed, as Redis does.
                quit |= user_gone(&reply);
                reply.encode(proto, &mut out);
                drop(reply);
                flush_if_large(&mut stream, &mut out).await?;
                if quit {
                    stream.write_all(&out).await?;
                    stream.flush().await?;
                    return Ok(());
                }
            }
            if let Some(e) = bad {
                // The decoder's text already starts "Protocol error: " (as the single node
                // answers it, and Redis).
                let mut msg = b"ERR ".to_vec();
                msg.extend_from_slice(e.as_bytes());
                err(msg).encode(proto, &mut out);
                stream.write_all(&out).await?;
                stream.flush().await?;
                return Ok(());
            }
            buf.drain(..used);
            conn.buffers.record(
                (buf.len(), buf.capacity()),
                (out.len(), out.capacity()),
                multi.as_ref(),
            );
            if !out.is_empty() {
                // flush: a TLS stream holds records back until asked (TCP: a no-op).
                stream.write_all(&out).await?;
                stream.flush().await?;
                out.clear();
            }
            shrink_idle(&mut buf);
            shrink_idle(&mut out);
            if buf.len() > limits::CONN_READ_BUFFER_BYTES_MAX as usize {
                return Ok(());
            }
            if batch.len() >= PIPELINE_BATCH_MAX {
                continue; // more whole requests may be buffered already: run them first
            }
            if read_some(&mut stream, &mut buf).await? == 0 {
                return Ok(());
            }
        }
    }

    /// A run of pipelined GETs, replies in order (the caller checked: each is `GET key`, the
    /// user may run anything, no MULTI). Every GET counts in the statistics, the balancer's
    /// load samples and SLOWLOG as a lone one does (until session 23 a run bypassed them).
    ///
    /// The GETs the engine answers at once (ClusterNode::fast_get: a string or a miss on a
    /// slot this node serves) are answered here and counted together, timed as one batch, as
    /// the single node's batched path does; the others (MOVED, a record's WRONGTYPE, a read
    /// through the core) go through [`Front::command`], polled together, so one that waits
    /// for the core waits beside the others. With SLOWLOG logging every command, every GET
    /// takes `command`, timed on its own. (A task per GET, as before, cost a spawn, a
    /// cross-thread wake and a join each; `command` per GET its clock reads, table lookups
    /// and allocations: a pipelined GET's node CPU went 2.19 -> 1.41 s per million over the
    /// two steps.)
    async fn get_run(
        &self,
        run: &[Vec<Vec<u8>>],
        proto: Proto,
        authed: bool,
        conn: &clients::Conn,
    ) -> Vec<Reply> {
        static GET: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let get_idx = *GET.get_or_init(|| {
            ringlet_command::lookup(&[b"get", b"k"]).expect("GET is in the command table")
        });
        let started = Instant::now();
        let mut replies: Vec<Option<Reply>> = Vec::with_capacity(run.len());
        let mut slots: Vec<u16> = Vec::with_capacity(run.len());
        if !self.monitor.logs_everything() {
            for argv in run {
                let key = &argv[1];
                let slot = key_slot(key);
                let fast = if self.moved(slot).is_none() {
                    self.node.fast_get(key)
                } else {
                    None
                };
                let reply = fast.and_then(|v| {
                    let live = v.value.filter(|_| !crate::expired(v.expiry_ms));
                    match live {
                        None => Some(Reply::Null),
                        Some(value) if v.kind == ValueKind::String => Some(Reply::Bulk(value)),
                        Some(_) => None, // WRONGTYPE: the general path answers and counts it
                    }
                });
                if reply.is_some() {
                    slots.push(slot);
                }
                replies.push(reply);
            }
        }
        if !slots.is_empty() {
            conn.touch("get", started);
            let took = started.elapsed();
            self.load.record_read_batch(get_idx, &slots, took);
            let each_us = took.as_micros() as u64 / slots.len() as u64;
            for (argv, _) in run.iter().zip(&replies).filter(|(_, r)| r.is_some()) {
                let args = [&argv[0][..], &argv[1][..]];
                self.monitor.record(
                    &args,
                    true,
                    each_us,
                    || crate::wall_ms() / 1000,
                    || conn.slowlog_client(),
                );
            }
        }
        replies.resize(run.len(), None);
        if replies.iter().all(Option::is_some) {
            return replies.into_iter().flatten().collect();
        }
        let rest = run
            .iter()
            .zip(&replies)
            .filter(|(_, r)| r.is_none())
            .map(|(argv, _)| argv);
        let mut rest = self
            .commands_together(rest, proto, authed, conn)
            .await
            .into_iter();
        replies
            .into_iter()
            .map(|r| {
                r.or_else(|| rest.next())
                    .unwrap_or_else(|| err("ERR internal error"))
            })
            .collect()
    }

    /// `argvs` through [`Front::command`], polled together on the caller's task, replies in
    /// order (pipelined runs: commands that may run concurrently, none of which changes the
    /// connection's protocol or authentication). Each command's future is boxed on its own:
    /// a command's future is large, and 64 of them in one allocation went to mmap and back
    /// on every run (page faults and zeroing; a `none` load lost a third of its rate to it).
    fn commands_together<'a>(
        &'a self,
        argvs: impl Iterator<Item = &'a Vec<Vec<u8>>>,
        proto: Proto,
        authed: bool,
        conn: &'a clients::Conn,
    ) -> impl std::future::Future<Output = Vec<Reply>> + 'a {
        futures_util::future::join_all(argvs.map(move |argv| {
            let (mut p, mut a) = (proto, authed);
            Box::pin(async move { self.command(argv, &mut p, &mut a, conn).await })
        }))
    }

    fn map(&self) -> Option<Arc<ClusterMap>> {
        self.node.map().filter(|m| m.placement.is_some())
    }

    /// `-MOVED` if the current map gives `slot` to another node; `None` if this node (or
    /// nobody yet).
    fn moved(&self, slot: Slot) -> Option<Reply> {
        let map = self.map()?;
        let c = map.coordinator(slot)?;
        if c == self.node.id() {
            return None;
        }
        let addr = map.nodes.get(&c).and_then(|n| client_addr(&n.addr))?;
        Some(err(format!("MOVED {slot} {addr}")))
    }

    /// Run `op` through the core, retrying definite refusals until [`OP_DEADLINE`].
    async fn run(&self, op: ClientOp) -> Result<ClientReply, Reply> {
        let slot = key_slot(op.key());
        let deadline = Instant::now() + OP_DEADLINE;
        let mut backoff = RETRY_BACKOFF_MIN;
        let mut fast = 0u32;
        loop {
            if self.map().is_none() {
                return Err(err("CLUSTERDOWN The cluster is down"));
            }
            if let Some(m) = self.moved(slot) {
                return Err(m);
            }
            let why = match self.node.submit(op.clone()).await {
                Err(SubmitError::Stopped) => return Err(err("ERR node is stopping")),
                Err(SubmitError::Overloaded) => FrontRetry::Overloaded,
                Ok(r) => match r.body {
                    ClientReply::StaleEpoch { .. } => {
                        // Our epoch moved between reading it and the core stepping: retry
                        // at once a few times (no sleep), then back off.
                        fast += 1;
                        if fast <= limits::RETRY_COUNT_MAX {
                            self.node
                                .count_front_retry(FrontRetry::StaleEpoch, Duration::ZERO);
                            continue;
                        }
                        FrontRetry::StaleEpoch
                    }
                    ClientReply::NotCoordinator => FrontRetry::NotCoordinator,
                    ClientReply::NotReady => FrontRetry::NotReady,
                    ClientReply::Busy => FrontRetry::Busy,
                    ClientReply::Ambiguous { version } => {
                        // A SET the new coordinator serves took effect: say so (resolve.rs).
                        // Boxed: the check may ask another node over TCP, a ~4.6 KiB
                        // future that every write's future (and each command future a
                        // pipelined run boxes, `commands_together`) carried for this rare
                        // branch.
                        if matches!(op, ClientOp::Set { .. })
                            && Box::pin(crate::resolve::took_effect(
                                &self.node,
                                op.key(),
                                version,
                            ))
                            .await
                        {
                            self.node.count_ambiguous_resolved();
                            note_write(op.key(), version);
                            return Ok(ClientReply::Written { version });
                        }
                        return Err(err(AMBIGUOUS));
                    }
                    // Redis's exact text, so clients that special-case OOM keep working.
                    ClientReply::OutOfMemory => return Err(err(OOM)),
                    ClientReply::TooLarge => {
                        return Err(err("ERR key or value exceeds the size limit"))
                    }
                    ClientReply::NoSuchMemgest => {
                        return Err(err("ERR the memgest does not exist or is not supported"))
                    }
                    ClientReply::Unsupported => {
                        return Err(err(
                            "ERR this memgest's scheme is not supported by the node yet (nothing was written)",
                        ))
                    }
                    body => {
                        if let ClientReply::Written { version } = &body {
                            note_write(op.key(), *version);
                        }
                        return Ok(body);
                    }
                },
            };
            if Instant::now() >= deadline {
                return Err(err("TRYAGAIN the slot is failing over; retry"));
            }
            self.node.count_front_retry(why, backoff);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RETRY_BACKOFF_MAX);
        }
    }

    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
        Ok(self.get_full(key).await?.map(|(v, _)| v))
    }

    /// A string value and its expiry (unix ms); `None` for a missing or expired key (an
    /// expired value is absent to every reader; the coordinator's driver deletes it soon).
    /// A record is Redis's WRONGTYPE: every string command reads through here.
    async fn get_full(&self, key: &[u8]) -> Result<Option<(Vec<u8>, Option<u64>)>, Reply> {
        match self.get_any(key).await? {
            Some(g) if g.kind == ValueKind::Record => Err(err(WRONGTYPE)),
            g => Ok(g.map(|g| (g.value, g.expiry_ms))),
        }
    }

    /// The key's value of any kind (`None`: missing or expired).
    async fn get_any(&self, key: &[u8]) -> Result<Option<Got>, Reply> {
        // The fast path: answered on this thread from the engine when the node may
        // (ClusterNode::fast_get); otherwise through the core below. (Without a map the node
        // publishes no servable range, so fast_get declines and `run` answers CLUSTERDOWN.)
        if self.moved(key_slot(key)).is_none() {
            if let Some(v) = self.node.fast_get(key) {
                return Ok(v
                    .value
                    .filter(|_| !crate::expired(v.expiry_ms))
                    .map(|value| Got {
                        value,
                        expiry_ms: v.expiry_ms,
                        kind: v.kind,
                    }));
            }
        }
        match self.run(ClientOp::Get { key: key.to_vec() }).await? {
            ClientReply::Value {
                value,
                expiry_ms,
                kind,
                ..
            } => Ok(value
                .filter(|_| !crate::expired(expiry_ms))
                .map(|value| Got {
                    value,
                    expiry_ms,
                    kind,
                })),
            other => Err(err(format!("ERR unexpected reply {other:?}"))),
        }
    }

    /// A plain SET or DEL: like [`Front::write`], but an ambiguous outcome (the coordinator
    /// changed with the write in flight, e.g. a drain) is resolved by reading the key at
    /// its new coordinator once that serves: if it holds exactly what we wrote (the value,
    /// or absence for a delete), answering success is linearizable for a register — either
    /// our write took effect, or the register already/also held that value, and our write
    /// can be placed just before the one that set it. Otherwise the error stands.
    async fn write_resolving(&self, key: &[u8], value: Option<Vec<u8>>) -> Result<(), Reply> {
        match self.write(key, value.clone()).await {
            Err(Reply::Error(e)) if e == AMBIGUOUS.as_bytes() => {
                // Boxed, as `took_effect` in `run`: a read over TCP (and TLS) is a large
                // future every plain SET's would otherwise carry for this rare branch.
                match Box::pin(self.read_at_coordinator(key)).await {
                    Some(now) if now == value => Ok(()),
                    _ => Err(err(AMBIGUOUS)),
                }
            }
            other => other,
        }
    }

    /// Read `key` at whichever node coordinates it now (this one, or another over RESP),
    /// following MOVED a few times; `None` if that fails within [`OP_DEADLINE`].
    async fn read_at_coordinator(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let deadline = Instant::now() + OP_DEADLINE;
        for _ in 0..limits::RETRY_COUNT_MAX {
            let map = self.map()?;
            let c = map.coordinator(key_slot(key))?;
            if c == self.node.id() {
                return self.get(key).await.ok();
            }
            let addr = map.nodes.get(&c).and_then(|n| client_addr(&n.addr))?;
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(
                left,
                remote_get(
                    addr,
                    key,
                    self.requirepass.as_deref(),
                    self.tls_connector.as_ref(),
                ),
            )
            .await
            {
                Ok(Some(Reply::Bulk(v))) => return Some(Some(v)),
                Ok(Some(Reply::Null)) => return Some(None),
                Ok(_) => tokio::time::sleep(RETRY_BACKOFF_MAX).await,
                Err(_) => return None,
            }
        }
        None
    }

    async fn write(&self, key: &[u8], value: Option<Vec<u8>>) -> Result<(), Reply> {
        self.write_in(key, value, None).await
    }

    /// A write under `memgest` (`None`: the map's default; ignored for a delete).
    async fn write_in(
        &self,
        key: &[u8],
        value: Option<Vec<u8>>,
        memgest: Option<MemgestId>,
    ) -> Result<(), Reply> {
        self.write_ttl(key, value, memgest, None).await
    }

    /// A write with an expiry (unix ms; `None`: none). Writes that must keep a key's TTL
    /// (INCR, APPEND: Redis keeps it) pass the old expiry back.
    async fn write_ttl(
        &self,
        key: &[u8],
        value: Option<Vec<u8>>,
        memgest: Option<MemgestId>,
        expiry_ms: Option<u64>,
    ) -> Result<(), Reply> {
        self.write_kind(key, value, memgest, expiry_ms, ValueKind::String)
            .await
    }

    /// A write of a value of `kind` (records: HSET and friends, and commands that move or
    /// re-time a key without changing what it holds).
    async fn write_kind(
        &self,
        key: &[u8],
        value: Option<Vec<u8>>,
        memgest: Option<MemgestId>,
        expiry_ms: Option<u64>,
        kind: ValueKind,
    ) -> Result<(), Reply> {
        let op = match value {
            Some(value) => ClientOp::Set {
                key: key.to_vec(),
                value,
                memgest,
                expiry_ms,
                kind,
            },
            None => ClientOp::Delete { key: key.to_vec() },
        };
        match self.run(op).await? {
            ClientReply::Written { .. } => Ok(()),
            other => Err(err(format!("ERR unexpected reply {other:?}"))),
        }
    }

    /// The per-key mutation lock (see the module doc).
    async fn lock(&self, key: &[u8]) -> Result<KeyGuard<'_>, Reply> {
        let m = {
            let mut locks = self.locks.lock();
            if locks.len() >= KEY_LOCKS_MAX && !locks.contains_key(key) {
                return Err(err("TRYAGAIN too many keys being written at once"));
            }
            locks.entry(key.to_vec()).or_default().clone()
        };
        let g = m.clone().lock_owned().await;
        Ok(KeyGuard {
            front: self,
            key: key.to_vec(),
            lock: m,
            guard: Some(g),
        })
    }

    fn same_slot(keys: &[&[u8]]) -> Result<(), Reply> {
        let mut it = keys.iter().map(|k| key_slot(k));
        if let Some(first) = it.next() {
            if it.any(|s| s != first) {
                return Err(err("CROSSSLOT Keys in request don't hash to the same slot"));
            }
        }
        Ok(())
    }

    async fn command(
        &self,
        argv: &[Vec<u8>],
        proto: &mut Proto,
        authed: &mut bool,
        conn: &clients::Conn,
    ) -> Reply {
        let started = Instant::now();
        // One table for every front (ringlet-command): the name, subcommand, arity and
        // authentication are checked there with Redis's errors, in Redis's order.
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let (idx, spec) = match ringlet_command::lookup(&args) {
            Ok(i) => (i, ringlet_command::table().spec(i)),
            Err(e) => {
                let reply = convert(&e);
                if let Reply::Error(text) = &reply {
                    self.load.record_error(text);
                }
                return reply;
            }
        };
        conn.touch(spec.name, started);
        let checked = spec
            .check(argv.len(), !*authed, Mode::Cluster)
            .map_err(|e| convert(&e))
            .and_then(|()| self.acl_check(conn, idx, &args));
        let refused = checked.is_err();
        let result = match checked {
            Ok(()) => {
                self.command_inner(spec.top_name(), &args, argv, proto, authed, conn)
                    .await
            }
            Err(e) => Err(e),
        };
        // Redis's split: refused before running (arity, auth, ACL, and the routing answers
        // MOVED/ASK/CROSSSLOT/TRYAGAIN/CLUSTERDOWN) is `rejected_calls`; an error after is
        // `failed_calls` (ringlet_server::cmdstats).
        let reply = match result {
            Ok(r) | Err(r) => r,
        };
        let outcome = match &reply {
            _ if refused => crate::load::Outcome::Rejected,
            Reply::Error(e) => crate::load::Outcome::of_error(Some(e)),
            _ => crate::load::Outcome::Ok,
        };
        if let Reply::Error(e) = &reply {
            self.load.record_error(e);
        }
        let class = crate::load::class_of(spec);
        let took = started.elapsed();
        self.load
            .record_spec(idx, spec, class, &args, took, outcome);
        // EXEC is not logged itself (Redis's `skip_slowlog`).
        if spec.name != "exec" {
            self.monitor.record(
                &args,
                spec.fast,
                took.as_micros() as u64,
                || crate::wall_ms() / 1000,
                || conn.slowlog_client(),
            );
        }
        reply
    }

    /// CONFIG RESETSTAT on this node: INFO's counters (stats, commandstats, errorstats,
    /// latencystats) count from zero again, as Redis's. The per-slot request counts and the
    /// class histograms behind the balancer and the status page are rates taken as
    /// differences, and stay.
    fn reset_stats(&self) {
        let e = self.node.engine().lock().stats();
        *self.stat_bases.lock() = StatBases {
            received: self.clients.total_received(),
            expired: e.expirations,
            evicted: e.evictions,
        };
        self.load.commands().reset();
    }

    /// This node's load counters (crate::load).
    pub(crate) fn load(&self) -> &crate::load::Load {
        &self.load
    }

    /// The user `user`/`password` authenticate (on, and `nopass` or a matching SHA-256,
    /// compared in constant time: ringlet_command::acl).
    fn authenticate(
        &self,
        user: &[u8],
        password: &[u8],
    ) -> Option<Arc<ringlet_command::acl::User>> {
        self.sync_users();
        self.acl.snapshot().authenticate(user, password)
    }

    /// Rebuild the user table if the map's users changed since the last build: this node's
    /// `default` user and the map's others.
    pub(crate) fn sync_users(&self) {
        use std::sync::atomic::Ordering::{Acquire, Release};
        let Some(map) = self.node.map() else { return };
        if self.acl_version.load(Acquire) == map.users_version {
            return;
        }
        let default = ringlet_command::acl::Users::new(self.requirepass.as_deref())
            .default_user()
            .clone();
        let (users, bad) = ringlet_command::acl::Users::from_descriptions(default, &map.users);
        if !bad.is_empty() {
            // Only a node running another command table can get here (a rolling upgrade).
            tracing::warn!(
                "ringlet: ACL users of the cluster map this node cannot parse, left out: {bad:?}"
            );
        }
        self.acl.replace(users);
        self.acl_version.store(map.users_version, Release);
    }

    /// The ACL check of a request on `conn` that the table resolved to `idx` (after arity
    /// and NOAUTH).
    fn acl_check(&self, conn: &clients::Conn, idx: usize, args: &[&[u8]]) -> Result<(), Reply> {
        match conn.user.lock().check(&self.acl, idx, args) {
            Ok(()) => Ok(()),
            Err(ringlet_command::acl::CheckError::Denied(r)) => Err(convert(&r)),
            Err(ringlet_command::acl::CheckError::UserGone) => {
                Err(err(ringlet_command::acl::USER_GONE))
            }
        }
    }

    /// Whether `conn`'s user may run anything on any key (pipelined GET runs then skip the
    /// per-request ACL check).
    fn unrestricted(&self, conn: &clients::Conn) -> bool {
        let u = conn.user.lock();
        u.generation_is(self.acl.generation()) && u.unrestricted()
    }

    /// `ACL ...`: read-only subcommands from this node's table; SETUSER and DELUSER go to
    /// the control plane, which publishes the new users with the map (every node, and a node
    /// that joins later, gets them); the reply waits until this node's map has them, so the
    /// next command on this connection sees the change.
    async fn acl_command(&self, args: &[&[u8]], conn: &clients::Conn) -> Result<Reply, Reply> {
        use ringlet_command::acl::{self, AclAction};
        self.sync_users();
        let users = self.acl.snapshot();
        let whoami = conn.user.lock().name().to_owned();
        match acl::acl_command(&users, &whoami, args) {
            AclAction::Reply(r) => Ok(convert(&r)),
            AclAction::SetUser { name, rules } => {
                let name_s = acl::check_username(name)
                    .map_err(|e| convert(&e))?
                    .to_owned();
                if name_s == "default" {
                    return Err(err(ringlet_control::DEFAULT_USER_LOCAL));
                }
                // Checked here first: Redis's error at once, no control round trip for a typo.
                let mut probe = (*users).clone();
                probe.setuser(name, rules).map_err(|e| convert(&e))?;
                let expected = probe.get(name).map(|u| u.describe());
                let before = self.node.map().map_or(0, |m| m.users_version);
                self.control(ToControl::SetUser {
                    name: name_s.clone(),
                    rules: acl::hash_rules(rules),
                })
                .await?;
                self.await_map(|m| {
                    m.users_version > before || m.users.get(&name_s) == expected.as_ref()
                })
                .await;
                self.sync_users();
                Ok(Reply::ok())
            }
            AclAction::DelUser { names } => {
                if names.iter().any(|n| *n == b"default") {
                    return Err(err("ERR The 'default' user cannot be removed"));
                }
                let names: Vec<String> = names
                    .iter()
                    .filter_map(|n| std::str::from_utf8(n).ok().map(str::to_owned))
                    .collect();
                let map = self.node.map();
                let existing = names
                    .iter()
                    .filter(|n| map.as_ref().is_some_and(|m| m.users.contains_key(*n)))
                    .count();
                if existing > 0 {
                    self.control(ToControl::DelUsers {
                        names: names.clone(),
                    })
                    .await?;
                    self.await_map(|m| names.iter().all(|n| !m.users.contains_key(n)))
                        .await;
                    self.sync_users();
                }
                Ok(Reply::Integer(existing as i64))
            }
            AclAction::GenPass { bits } => {
                let mut random = vec![0u8; (bits as usize).div_ceil(8)];
                getrandom::fill(&mut random)
                    .map_err(|e| err(format!("ERR no randomness for ACL GENPASS: {e}")))?;
                Ok(convert(&acl::genpass(bits, &random)))
            }
        }
    }

    /// Run as `user` from now on.
    fn log_in(&self, conn: &clients::Conn, user: Arc<ringlet_command::acl::User>) {
        conn.user.lock().set(user, &self.acl);
    }

    async fn command_inner(
        &self,
        name: &str,
        args: &[&[u8]],
        argv: &[Vec<u8>],
        proto: &mut Proto,
        authed: &mut bool,
        conn: &clients::Conn,
    ) -> Result<Reply, Reply> {
        let a = |i: usize| -> &[u8] { argv.get(i).map(|v| &v[..]).unwrap_or(b"") };
        use ringlet_server::cmd::{bits, keyspace as keyspace_cmd, lcs, record, string};
        let ks = keyspace::Replicated(self);
        match name {
            "ping" => Ok(convert(&node::ping(args))),
            "echo" => Ok(convert(&node::echo(args))),
            "wait" => self.wait(argv).await,
            "role" => Ok(self.role()),
            "quit" | "readonly" | "readwrite" => Ok(Reply::ok()),
            "reset" => {
                // As a new connection: RESP2, no name, and not authenticated when a password
                // is set (a transaction was discarded by transaction_step).
                *proto = Proto::Resp2;
                conn.resp.store(2, std::sync::atomic::Ordering::Relaxed);
                conn.set_name(b"")?;
                *authed = self.requirepass.is_none();
                let default = self.acl.snapshot().default_user().clone();
                self.log_in(conn, default);
                Ok(Reply::Simple(b"RESET".to_vec()))
            }
            "select" => Ok(convert(&node::select(args, Mode::Cluster))),
            "auth" => {
                let nopass = self.acl.snapshot().default_user().nopass;
                let (user, password) = node::auth_args(args, nopass).map_err(|e| convert(&e))?;
                let Some(u) = self.authenticate(user, password) else {
                    return Err(err(WRONGPASS));
                };
                self.log_in(conn, u);
                *authed = true;
                Ok(Reply::ok())
            }
            "hello" => {
                // Parsed whole before anything is applied (ringlet_server::cmd::node).
                let h = node::hello_args(args).map_err(|e| convert(&e))?;
                if let Some((user, password)) = h.auth {
                    let Some(u) = self.authenticate(user, password) else {
                        return Err(err(WRONGPASS));
                    };
                    self.log_in(conn, u);
                    *authed = true;
                }
                if !*authed {
                    return Err(err(node::HELLO_NOAUTH));
                }
                if let Some(n) = h.setname {
                    conn.set_name(n)?;
                }
                match h.proto {
                    Some(3) => *proto = Proto::Resp3,
                    Some(_) => *proto = Proto::Resp2,
                    None => {}
                }
                let v = if *proto == Proto::Resp3 { 3 } else { 2 };
                conn.resp.store(v, std::sync::atomic::Ordering::Relaxed);
                Ok(convert(&node::hello_reply(v, conn.id, Mode::Cluster)))
            }
            "client" => clients::client(&self.clients, conn, argv),
            "acl" => self.acl_command(args, conn).await,
            "config" => {
                let view = NodeView {
                    front: self,
                    laddr: conn.laddr(),
                };
                Ok(convert(&match args[1].to_ascii_lowercase().as_slice() {
                    b"get" => node::config_get(&view, args),
                    b"set" => node::config_set(&view, args),
                    b"resetstat" => {
                        self.reset_stats();
                        ringlet_command::reply::Reply::ok()
                    }
                    _ => node::config_help(&view),
                }))
            }
            "info" => {
                let view = NodeView {
                    front: self,
                    laddr: conn.laddr(),
                };
                Ok(convert(&node::info(&view, args)))
            }
            "memory" => {
                if args[1].eq_ignore_ascii_case(b"usage") {
                    if let Some(m) = self.moved(key_slot(a(2))) {
                        return Err(m);
                    }
                }
                let view = NodeView {
                    front: self,
                    laddr: conn.laddr(),
                };
                Ok(convert(&node::memory(&view, args, crate::wall_ms())))
            }
            "slowlog" => Ok(convert(&self.monitor.slowlog(args))),
            "latency" => Ok(convert(&self.monitor.latency(args))),
            "function" => Ok(convert(&ringlet_server::cmd::server::function_reply(args))),
            "command" => Ok(convert(&ringlet_command::introspect::command(
                args,
                Mode::Cluster,
            ))),
            "cluster" => match self.cluster_reshard(argv).await {
                Some(r) => r,
                None => self.cluster(argv),
            },
            "migrate" => self.migrate(argv).await,
            "memgest" => self.memgest(argv).await,
            // Records: the single node's drivers over the replicated keyspace.
            n if ringlet_record::hash::is_hash_command(n) => shared(record::hash(&ks, args).await),
            "link" => shared(record::link(&ks, args).await),
            "record" => shared(record::record_set(&ks, args).await),
            "hscan" => shared(record::hscan(&ks, args).await),
            "hrandfield" => {
                let seed = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
                    ^ u64::from(key_slot(a(1)));
                let resp3 = *proto == Proto::Resp3;
                shared(record::hrandfield(&ks, args, resp3, seed).await)
            }
            // Boxed: a walk's future (its connections to other nodes) is the largest of
            // any command's, and every command's future is as large as its largest arm.
            "chase" => Box::pin(self.chase(argv)).await,
            "records" => self.records(argv).await,
            // Key commands written once for both fronts (ringlet_server::cmd, over the
            // replicated keyspace: resp/keyspace.rs `Replicated`).
            "get" => shared(string::get(&ks, args).await),
            "set" => shared(string::set(&ks, args).await),
            "mget" => shared(string::mget(&ks, args).await),
            "mset" => shared(string::mset(&ks, args).await),
            "setnx" => shared(string::setnx(&ks, args).await),
            "getset" => shared(string::getset(&ks, args).await),
            "getdel" => shared(string::getdel(&ks, args).await),
            "incr" => shared(string::incr(&ks, args).await),
            "decr" => shared(string::decr(&ks, args).await),
            "incrby" => shared(string::incrby(&ks, args).await),
            "decrby" => shared(string::decrby(&ks, args).await),
            "incrbyfloat" => shared(string::incrbyfloat(&ks, args).await),
            "append" => shared(string::append(&ks, args).await),
            "strlen" => shared(string::strlen(&ks, args).await),
            "getrange" | "substr" => shared(string::getrange(&ks, args).await),
            "setrange" => shared(string::setrange(&ks, args).await),
            "setex" => shared(string::setex(&ks, args).await),
            "psetex" => shared(string::psetex(&ks, args).await),
            "getex" => shared(string::getex(&ks, args).await),
            "msetnx" => shared(string::msetnx(&ks, args).await),
            "setbit" => shared(bits::setbit_cmd(&ks, args).await),
            "getbit" => shared(bits::getbit_cmd(&ks, args).await),
            "bitcount" => shared(bits::bitcount_cmd(&ks, args).await),
            "bitpos" => shared(bits::bitpos_cmd(&ks, args).await),
            "lcs" => shared(lcs::lcs_cmd(&ks, args).await),
            "del" | "unlink" => shared(keyspace_cmd::del(&ks, args).await),
            "exists" => shared(keyspace_cmd::exists(&ks, args).await),
            "expire" => shared(keyspace_cmd::expire(&ks, args).await),
            "pexpire" => shared(keyspace_cmd::pexpire(&ks, args).await),
            "expireat" => shared(keyspace_cmd::expireat(&ks, args).await),
            "pexpireat" => shared(keyspace_cmd::pexpireat(&ks, args).await),
            "ttl" => shared(keyspace_cmd::ttl(&ks, args).await),
            "pttl" => shared(keyspace_cmd::pttl(&ks, args).await),
            "expiretime" => shared(keyspace_cmd::expiretime(&ks, args).await),
            "pexpiretime" => shared(keyspace_cmd::pexpiretime(&ks, args).await),
            "persist" => shared(keyspace_cmd::persist(&ks, args).await),
            "type" => shared(keyspace_cmd::type_(&ks, args).await),
            "touch" => shared(keyspace_cmd::touch(&ks, args).await),
            "copy" => shared(keyspace_cmd::copy(&ks, args).await),
            "dump" => shared(keyspace_cmd::dump(&ks, args).await),
            // No ASKING state to honour: a slot moves whole, so RESTORE-ASKING is RESTORE.
            "restore" | "restore-asking" => shared(keyspace_cmd::restore(&ks, args).await),
            "rename" => shared(keyspace_cmd::rename(&ks, args).await),
            "renamenx" => shared(keyspace_cmd::renamenx(&ks, args).await),
            "object" => shared(keyspace_cmd::object(&ks, args).await),
            // Per node, for the slots this node coordinates (as Redis Cluster).
            "keys" => shared(keyspace_cmd::keys(&ks, args).await),
            "scan" => shared(keyspace_cmd::scan(&ks, args).await),
            "randomkey" => shared(keyspace_cmd::randomkey(&ks, args).await),
            "dbsize" => shared(keyspace_cmd::dbsize(&ks, args).await),
            "flushall" | "flushdb" => shared(keyspace_cmd::flushall(&ks, args).await),
            "time" => Ok(convert(&node::time())),
            // The table has the command but this front has no handler for it: a bug that
            // `every_table_command_has_a_cluster_handler` (tests/in_process.rs) catches.
            _ => Err(err(format!(
                "ERR '{name}' has no handler on a cluster node"
            ))),
        }
    }

    /// The id of memgest `name` for a new write: it must exist and not be closing. A name
    /// this node's map does not know yet is waited for briefly (created through another
    /// node, the map push may still be on its way).
    async fn writable_memgest(&self, name: &[u8]) -> Result<MemgestId, Reply> {
        let name = std::str::from_utf8(name).map_err(|_| err("ERR no such memgest"))?;
        let deadline = Instant::now() + MEMGEST_MAP_WAIT;
        loop {
            if let Some(map) = self.node.map() {
                if let Some(id) = map.memgest_by_name(name) {
                    return match map.writable_memgest(name) {
                        Some(_) => Ok(id),
                        None => Err(err(format!("ERR memgest '{name}' is being dropped"))),
                    };
                }
            }
            if Instant::now() >= deadline {
                return Err(err(format!("ERR no such memgest '{name}'")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// One request to the control plane.
    async fn control(&self, req: ToControl) -> Result<FromControl, Reply> {
        match tokio::time::timeout(
            CONTROL_DEADLINE,
            crate::control::request(self.node.control_addr(), &req),
        )
        .await
        {
            Ok(Ok(FromControl::Error(e))) => Err(err(format!("ERR {e}"))),
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(err(format!("CLUSTERDOWN control plane unreachable: {e}"))),
            Err(_) => Err(err("TRYAGAIN the control plane did not answer in time")),
        }
    }

    /// Wait until this node's map satisfies `done` (so a command that changed the map is
    /// followed by commands on this connection that see the change).
    async fn await_map(&self, done: impl Fn(&ClusterMap) -> bool) {
        let deadline = Instant::now() + MEMGEST_MAP_WAIT;
        while Instant::now() < deadline {
            if self.node.map().is_some_and(|m| done(&m)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn memgest_reports(
        &self,
        mttf_hours: Option<f64>,
        rebuild_hours: Option<f64>,
    ) -> Result<Vec<MemgestReport>, Reply> {
        match self
            .control(ToControl::Memgests {
                mttf_hours,
                rebuild_hours,
            })
            .await?
        {
            FromControl::Memgests(v) => Ok(v),
            other => Err(err(format!("ERR unexpected control reply {other:?}"))),
        }
    }

    /// `MEMGEST CREATE|DROP|LIST|DEFAULT|INFO|MOVE|KEY` (module doc).
    /// The node this front serves.
    /// Whether clients must AUTH (RESP's AUTH or the native AUTH frame).
    /// INCRBY under the key's lock (RESP's INCR family and the native INCRBY opcode): the
    /// key's value as an integer plus `delta`, written back with its TTL kept, as Redis does.
    pub(crate) async fn incr_by(&self, key: &[u8], delta: i64) -> Result<i64, Reply> {
        ringlet_server::cmd::string::incr_by(&keyspace::Replicated(self), key, delta)
            .await
            .map_err(|e| convert(&e))
    }

    pub(crate) fn auth_required(&self) -> bool {
        self.requirepass.is_some()
    }

    pub(crate) fn node(&self) -> &ClusterNode {
        &self.node
    }

    /// `MEMGEST ...` (`argv[0]` is the command name); also served over native frames.
    pub(crate) async fn memgest(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        let sub = argv
            .get(1)
            .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
            .unwrap_or_default();
        let wrong = || {
            err(format!(
                "ERR wrong number of arguments for 'memgest|{sub}' command"
            ))
        };
        let text = |i: usize| -> Result<String, Reply> {
            let v = argv.get(i).ok_or_else(wrong)?;
            String::from_utf8(v.clone()).map_err(|_| err("ERR memgest names are UTF-8"))
        };
        match sub.as_str() {
            "create" => {
                let name = text(2)?;
                let kind = parse_descriptor(&argv[3.min(argv.len())..])?;
                self.control(ToControl::CreateMemgest {
                    name: name.clone(),
                    kind: kind.to_string(),
                })
                .await?;
                self.await_map(|m| m.memgest_by_name(&name).is_some()).await;
                Ok(Reply::ok())
            }
            "drop" => {
                if argv.len() != 3 {
                    return Err(wrong());
                }
                let name = text(2)?;
                self.control(ToControl::DropMemgest { name: name.clone() })
                    .await?;
                self.await_map(|m| m.memgest_by_name(&name).is_none()).await;
                Ok(Reply::ok())
            }
            "default" => {
                if argv.len() != 3 {
                    return Err(wrong());
                }
                let name = text(2)?;
                self.control(ToControl::SetDefault { name: name.clone() })
                    .await?;
                self.await_map(|m| {
                    m.memgest_by_name(&name)
                        .is_some_and(|id| id == m.default_memgest)
                })
                .await;
                Ok(Reply::ok())
            }
            "list" => {
                if argv.len() != 2 {
                    return Err(wrong());
                }
                let reps = self.memgest_reports(None, None).await?;
                Ok(Reply::Array(
                    reps.into_iter()
                        .map(|r| {
                            Reply::Array(vec![
                                Reply::Bulk(r.name.into_bytes()),
                                Reply::Bulk(r.descriptor.into_bytes()),
                                Reply::Integer(i64::from(r.default)),
                                Reply::Integer(r.keys.min(i64::MAX as u64) as i64),
                                Reply::Integer(i64::from(r.closing)),
                            ])
                        })
                        .collect(),
                ))
            }
            "info" => {
                // MEMGEST INFO [name] [MTTF hours] [REBUILD hours]
                let mut name = None;
                let (mut mttf, mut rebuild) = (None, None);
                let mut i = 2;
                while i < argv.len() {
                    let w = String::from_utf8_lossy(&argv[i]).to_ascii_lowercase();
                    let num = |j: usize| -> Result<f64, Reply> {
                        argv.get(j)
                            .and_then(|v| std::str::from_utf8(v).ok())
                            .and_then(|v| v.parse::<f64>().ok())
                            .filter(|x| x.is_finite() && *x > 0.0)
                            .ok_or_else(|| {
                                err("ERR MTTF and REBUILD take a positive number of hours")
                            })
                    };
                    match w.as_str() {
                        "mttf" => {
                            mttf = Some(num(i + 1)?);
                            i += 2;
                        }
                        "rebuild" => {
                            rebuild = Some(num(i + 1)?);
                            i += 2;
                        }
                        _ if i == 2 => {
                            name = Some(text(2)?);
                            i += 1;
                        }
                        _ => return Err(err("ERR syntax error")),
                    }
                }
                let reps = self.memgest_reports(mttf, rebuild).await?;
                let chosen: Vec<&MemgestReport> = match &name {
                    Some(n) => {
                        let r = reps
                            .iter()
                            .find(|r| &r.name == n)
                            .ok_or_else(|| err(format!("ERR no such memgest '{n}'")))?;
                        vec![r]
                    }
                    None => reps.iter().collect(),
                };
                let mut text = chosen
                    .iter()
                    .map(|r| memgest_info_text(r))
                    .collect::<Vec<_>>()
                    .join("\r\n");
                // RSS beside the accounting (issue 16 item 3): the answering node's, since
                // nodes report only engine counters to the control plane.
                text.push_str("\r\n# Node\r\n");
                text.push_str(&self.node_memory_lines());
                Ok(Reply::Bulk(text.into_bytes()))
            }
            "move" => {
                if argv.len() != 4 {
                    return Err(wrong());
                }
                let key = &argv[2][..];
                if let Some(m) = self.moved(key_slot(key)) {
                    return Err(m);
                }
                let memgest = self.writable_memgest(&argv[3]).await?;
                let _g = self.lock(key).await?;
                let Some(g) = self.get_any(key).await? else {
                    return Err(err("ERR no such key"));
                };
                // The key moves whole: value, kind (a record stays a record) and TTL.
                self.write_kind(key, Some(g.value), Some(memgest), g.expiry_ms, g.kind)
                    .await?;
                Ok(Reply::ok())
            }
            "key" => {
                if argv.len() != 3 {
                    return Err(wrong());
                }
                let key = &argv[2][..];
                if let Some(m) = self.moved(key_slot(key)) {
                    return Err(m);
                }
                match self
                    .run(ClientOp::ReadReplica { key: key.to_vec() })
                    .await?
                {
                    ClientReply::Replica { value: None, .. } => Ok(Reply::Null),
                    ClientReply::Replica {
                        version, memgest, ..
                    } => {
                        let map = self.node.map();
                        let (name, kind) = map
                            .as_ref()
                            .and_then(|m| m.memgests.get(&memgest))
                            .map_or_else(
                                || (format!("#{}", memgest.0), "none".to_string()),
                                |i| (i.name.clone(), i.kind.to_string()),
                            );
                        Ok(Reply::Array(vec![
                            Reply::Bulk(name.into_bytes()),
                            Reply::Bulk(kind.into_bytes()),
                            Reply::Bulk(version.to_string().into_bytes()),
                        ]))
                    }
                    other => Err(err(format!("ERR unexpected reply {other:?}"))),
                }
            }
            "help" => Ok(Reply::Array(
                [
                    "MEMGEST CREATE <name> none|rep <R>|ec <K> <M>",
                    "MEMGEST DROP <name>  (refused while keys live in it)",
                    "MEMGEST DEFAULT <name>",
                    "MEMGEST LIST  -> [name, descriptor, default, keys, closing] per memgest",
                    "MEMGEST INFO [<name>] [MTTF <hours>] [REBUILD <hours>]",
                    "MEMGEST MOVE <key> <name>",
                    "MEMGEST KEY <key>  -> [name, descriptor, version]",
                    "SET <key> <value> [NX|XX] [GET] [MEMGEST <name>]",
                ]
                .iter()
                .map(|l| Reply::Simple(l.as_bytes().to_vec()))
                .collect(),
            )),
            _ => Err(err(format!(
                "ERR unknown subcommand '{sub}'. Try MEMGEST HELP."
            ))),
        }
    }

    /// INFO [section ...] of this node (the status page's text; `node::info_text`).
    fn info(&self, sections: &[String]) -> String {
        // INFO does not read the connection's address (only CONFIG does).
        let laddr = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        node::info_text(&NodeView { front: self, laddr }, sections)
    }

    /// This node's memory, accounted and resident, as `field:value` lines (MEMGEST INFO's
    /// `# Node` section): engine bytes (data pages + index), RSS, and the allocator's view.
    fn node_memory_lines(&self) -> String {
        let e = self.node.engine().lock().stats();
        format!(
            "node_used_memory:{}\r\nnode_used_memory_rss:{}\r\n{}",
            e.committed_bytes + e.index_bytes,
            ringlet_server::info::rss_bytes(),
            allocator_lines(),
        )
    }

    /// The Server text, the Cluster and Ringlet sections, and the Keyspace text.
    fn info_core(&self) -> (String, String, String) {
        use std::sync::atomic::Ordering::Relaxed;
        let map = self.map();
        let st = self.node.stats();
        // Each in its own statement: a guard inside format!'s arguments lives until the end
        // of the statement, and the engine lock is not reentrant.
        let stored = self.node.engine().lock().len();
        let (own, expires) = self.owned_key_counts();
        let shm = self.node.shm_stats().unwrap_or_default();
        let server = format!(
            "# Server\r\nredis_version:{}\r\nringlet_version:{}\r\nredis_mode:cluster\r\n\
             os:{} {}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\n\
             ringlet_node_id:{}\r\n",
            ringlet_server::cmd::connection::REDIS_COMPAT_VERSION,
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            self.node.id(),
        );
        let mut cluster = format!(
            "# Cluster\r\ncluster_enabled:1\r\ncluster_epoch:{}\r\nringlet_control:{}\r\n\r\n# Ringlet\r\nmaps_applied:{}\r\nfenced:{}\r\npossible_loss:{}\r\nambiguous_resolved:{}\r\nec_arenas_not_ready:{}\r\nstored_entries:{}\r\nfast_reads:{}\r\nfast_read_fallbacks:{}\r\ncore_steps_inline:{}\r\ncore_steps_queued:{}\r\nshm_clients:{}\r\nshm_access_hashes:{}\r\nshm_keys_in_flight:{}\r\nreshard_moving:{}\r\nreshard_handoffs_pending:{}\r\nreshard_handoffs_completed:{}\r\nreshard_keys_purged:{}\r\nreshard_bytes_pulled:{}\r\nreshard_keys_pulled:{}\r\nreshard_last_move_bytes:{}\r\nreshard_last_move_ms:{}\r\nreshard_moves_ms:{}\r\nreshard_copies_completed:{}\r\nreshard_copies_aborted:{}\r\nreshard_delta_keys:{}\r\n",
            map.as_ref().map_or(0, |m| m.epoch.0),
            // The control plane this node reports to: how `ringlet node ... --port P` finds
            // it from a node's client port (behind AUTH like every INFO field).
            self.node.control_addr(),
            st.maps_applied.load(Relaxed),
            st.fenced.load(Relaxed),
            st.possible_loss.load(Relaxed),
            st.ambiguous_resolved.load(Relaxed),
            st.ec_arenas_not_ready.load(Relaxed),
            // Every entry this node stores (its keys, replica copies, ec metadata); db0 is
            // its own keys, as DBSIZE.
            stored,
            st.fast_reads.load(Relaxed),
            st.fast_read_fallbacks.load(Relaxed),
            st.steps_inline.load(Relaxed),
            st.steps_queued.load(Relaxed),
            shm.connections_open,
            shm.access_hashes,
            st.shm_keys_in_flight.load(Relaxed),
            // The span in phase 1 of a move, cluster-wide ("-" when none), and the spans
            // whose new owner has not yet reported them rebuilt.
            map.as_ref()
                .and_then(|m| m.moving)
                .map_or_else(|| "-".to_string(), |m| format!("{}-{}", m.first, m.last)),
            map.as_ref().map_or(0, |m| m.handoffs.len()),
            st.handoffs_completed.load(Relaxed),
            st.handoff_keys_purged.load(Relaxed),
            st.handoff_bytes_pulled.load(Relaxed),
            st.handoff_keys_pulled.load(Relaxed),
            st.last_handoff_bytes.load(Relaxed),
            st.last_handoff_ms.load(Relaxed),
            st.handoff_ms.load(Relaxed),
            st.move_copies_completed.load(Relaxed),
            st.move_copies_aborted.load(Relaxed),
            st.move_delta_keys.load(Relaxed),
        );
        cluster.push_str(&request_wait_lines(st));
        let keyspace = format!("# Keyspace\r\ndb0:keys={own},expires={expires},avg_ttl=0\r\n");
        (server, cluster, keyspace)
    }

    fn cluster(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        let sub = argv
            .get(1)
            .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
            .unwrap_or_default();
        if sub == "keyslot" {
            // Arity 3, checked by the command table.
            return Ok(Reply::Integer(i64::from(key_slot(&argv[2]))));
        }
        if sub == "help" {
            return Ok(convert(&ringlet_command::introspect::help(
                "CLUSTER",
                &[
                    "COUNTKEYSINSLOT <slot>",
                    "    Return the number of keys in <slot> (0 unless this node serves it).",
                    "GETKEYSINSLOT <slot> <count>",
                    "    Return key names stored by current node in a slot.",
                    "INFO",
                    "    Return information about the cluster.",
                    "KEYSLOT <key>",
                    "    Return the hash slot for <key>.",
                    "MYID",
                    "    Return the node id.",
                    "NODES",
                    "    Return cluster configuration seen by node. Output format:",
                    "    <id> <ip:port@bus-port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
                    "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
                    "    Resharding as redis-cli --cluster reshard drives it: NODE moves the whole",
                    "    slot to <node-id>; MIGRATE then moves a MIGRATING slot's keys (Ringlet).",
                    "SHARDS",
                    "    Return information about slot range mappings and the nodes associated with them.",
                    "SLOTS",
                    "    Return information about slots range mappings. Each range is made of:",
                    "    start, end, master and replicas IP addresses, ports and ids",
                    "RINGLET-LOAD [SLOTS]",
                    "    Return this node's load per slot range (or per slot) as JSON (Ringlet).",
                ],
            )));
        }
        if sub == "myid" {
            return Ok(Reply::Bulk(hex_id(self.node.id()).into_bytes()));
        }
        if sub == "ringlet-load" {
            // This node's load report as JSON (resp/admin.rs): the status pages of other
            // nodes ask for it to draw the cluster's heat map; with SLOTS, the cumulative
            // per-slot counts the load balancer diffs (docs/design/cluster-balancer.md).
            return match argv.get(2).map(|a| a.to_ascii_lowercase()) {
                None => Ok(Reply::Bulk(
                    serde_json::to_vec(&self.load_report()).unwrap_or_default(),
                )),
                Some(a) if a == b"slots" && argv.len() == 3 => Ok(Reply::Bulk(
                    serde_json::to_vec(&self.slot_load_report()).unwrap_or_default(),
                )),
                Some(_) => Err(err(
                    "ERR syntax error: CLUSTER RINGLET-LOAD takes no argument or SLOTS",
                )),
            };
        }
        let map = self.node.map();
        match sub.as_str() {
            "info" => Ok(Reply::Bulk(
                cluster_info(map.as_deref(), self.node.id()).into_bytes(),
            )),
            "slots" => Ok(map.map_or(Reply::Array(vec![]), |m| cluster_slots(&m))),
            "shards" => Ok(map.map_or(Reply::Array(vec![]), |m| cluster_shards(&m))),
            "nodes" => Ok(Reply::Bulk(
                map.map_or(String::new(), |m| cluster_nodes(&m, self.node.id()))
                    .into_bytes(),
            )),
            _ => Err(err(format!(
                "ERR unknown subcommand '{sub}'. Try CLUSTER HELP."
            ))),
        }
    }
}

/// A memgest descriptor from `MEMGEST CREATE`'s arguments: `none`, `rep R`, `ec K M`, or
/// one word `rep:R` / `ec:K+M`.
fn parse_descriptor(args: &[Vec<u8>]) -> Result<MemgestKind, Reply> {
    let words: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
        .collect();
    let desc = match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [one] => one.to_string(),
        ["rep", r] => format!("rep:{r}"),
        ["ec", k, m] => format!("ec:{k}+{m}"),
        _ => {
            return Err(err(
                "ERR syntax error: MEMGEST CREATE <name> none|rep <R>|ec <K> <M>",
            ))
        }
    };
    MemgestKind::parse(&desc).map_err(|e| err(format!("ERR {e}")))
}

fn opt_num(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v}"))
}

/// The heap allocator's view (glibc `mallinfo2`): bytes handed out (`allocated`: engine
/// regions are not in it, they are memfd pages), free bytes it still holds (`free`: resident
/// once touched, the fragmentation RSS shows beyond the accounting), and what it maps.
/// Empty where the allocator is not glibc's.
pub fn allocator_lines() -> String {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct.
        let m = unsafe { libc::mallinfo2() };
        format!(
            "allocator:glibc\r\nallocator_allocated:{}\r\nallocator_free:{}\r\n\
             allocator_mapped:{}\r\n",
            m.uordblks + m.hblkhd,
            m.fordblks,
            m.arena + m.hblkhd,
        )
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    String::new()
}

/// `MEMGEST INFO`'s text for one memgest: `field:value` lines, like Redis INFO.
pub fn memgest_info_text(r: &MemgestReport) -> String {
    let per_key = if r.stored_keys > 0 {
        format!("{:.1}", r.stored_bytes as f64 / r.stored_keys as f64)
    } else {
        "-".to_string()
    };
    let mut s = format!(
        "# Memgest {}\r\nname:{}\r\nid:{}\r\ndescriptor:{}\r\ndefault:{}\r\nclosing:{}\r\nevictable:{}\r\nfailures_tolerated:{}\r\nmemory_per_payload_byte:{:.4}\r\nkeys:{}\r\nstored_keys:{}\r\nstored_bytes:{}\r\nstored_bytes_per_stored_key:{}\r\nnodes_reporting:{}\r\nnodes_holding:{}\r\nmodel_data_nodes:{}\r\nmodel_mttf_hours:{}\r\nmodel_rebuild_hours:{}\r\nannual_loss_probability:{}\r\nreliability_nines:{}\r\nannual_availability:{}\r\navailability_nines:{}\r\n",
        r.name,
        r.name,
        r.id,
        r.descriptor,
        u8::from(r.default),
        u8::from(r.closing),
        u8::from(r.evictable),
        r.failures_tolerated,
        r.nominal_overhead,
        r.keys,
        r.stored_keys,
        r.stored_bytes,
        per_key,
        r.nodes_reporting,
        r.nodes_holding,
        r.data_nodes,
        r.rates.mttf_hours,
        r.rates.rebuild_hours,
        opt_num(r.annual_loss_probability),
        opt_num(r.loss_nines),
        opt_num(r.availability),
        opt_num(r.availability_nines),
    );
    if let Some(e) = &r.model_error {
        s.push_str(&format!("model_error:{e}\r\n"));
    }
    if let Some(ec) = &r.ec_cluster {
        // Every ec memgest of the cluster together (module doc of ringlet_control::report).
        s.push_str(&format!(
            "all_ec_payload_bytes:{}\r\nall_ec_data_bytes:{}\r\nall_ec_parity_bytes:{}\r\nall_ec_meta_bytes:{}\r\n",
            ec.payload_bytes, ec.data_bytes, ec.parity_bytes, ec.meta_bytes
        ));
    }
    s
}

/// One GET over RESP to another node (ambiguity resolution), over TLS where the client
/// ports use it.
async fn remote_get(
    addr: std::net::SocketAddr,
    key: &[u8],
    password: Option<&[u8]>,
    tls: Option<&tokio_rustls::TlsConnector>,
) -> Option<Reply> {
    remote_call(
        addr,
        &[b"GET", key],
        password,
        tls,
        limits::RESP_BULK_BYTES_MAX as usize,
    )
    .await
}

/// One command to another node's client port (AUTH first if the cluster has a password, TLS
/// if its ports use it); `None` if it fails or its reply passes `reply_bytes_max`.
pub(crate) async fn remote_call(
    addr: std::net::SocketAddr,
    argv: &[&[u8]],
    password: Option<&[u8]>,
    tls: Option<&tokio_rustls::TlsConnector>,
    reply_bytes_max: usize,
) -> Option<Reply> {
    match tls {
        None => {
            let s = TcpStream::connect(addr).await.ok()?;
            remote_call_on(s, argv, password, reply_bytes_max).await
        }
        Some(c) => {
            let s = crate::tls::connect(c, addr).await.ok()?;
            remote_call_on(s, argv, password, reply_bytes_max).await
        }
    }
}

async fn remote_call_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    argv: &[&[u8]],
    password: Option<&[u8]>,
    reply_bytes_max: usize,
) -> Option<Reply> {
    let mut out = Vec::new();
    if let Some(p) = password {
        ringlet_codec::resp::encode_request(&mut out, &[b"AUTH", p]);
    }
    ringlet_codec::resp::encode_request(&mut out, argv);
    s.write_all(&out).await.ok()?;
    s.flush().await.ok()?;
    let mut buf = Vec::new();
    let mut skip_auth_reply = password.is_some();
    loop {
        if let Ok(Some((r, n))) = ringlet_codec::resp::decode_reply(&buf) {
            if skip_auth_reply {
                if r != Reply::ok() {
                    return None; // a peer with another password: no answer
                }
                skip_auth_reply = false;
                buf.drain(..n);
                continue;
            }
            return Some(r);
        }
        if buf.len() > reply_bytes_max + 64 {
            return None;
        }
        if read_some(&mut s, &mut buf).await.ok()? == 0 {
            return None;
        }
    }
}

struct KeyGuard<'a> {
    front: &'a Front,
    key: Vec<u8>,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut locks = self.front.locks.lock();
        // Last user (the map's copy plus ours): forget the key's lock.
        if Arc::strong_count(&self.lock) <= 2 {
            locks.remove(&self.key);
        }
    }
}

/// Slot ranges with their coordinator (a one-element list), consecutive ranges of the same
/// coordinator merged.
///
/// Why no replicas: to clients every Ringlet node is a master, as CLUSTER NODES says.
/// Replication is internal and per memgest, and a replica never answers a client's read (it
/// answers MOVED), so a replica listed here would send `read_from_replicas` clients to a
/// node that cannot serve them. Listing them also broke redis-py: it keeps the first role
/// it sees per node, so with rep:3 ranges all but one node became "replicas", and
/// `target_nodes=PRIMARIES` commands (FLUSHALL by default, KEYS/DBSIZE when asked) reached
/// only that one node.
fn ranges(map: &ClusterMap) -> Vec<(Slot, Slot, Vec<NodeId>)> {
    let Some(p) = &map.placement else {
        return Vec::new();
    };
    let depth = 1;
    let mut out: Vec<(Slot, Slot, Vec<NodeId>)> = Vec::new();
    for r in &p.ranges {
        let cohort: Vec<NodeId> = map.cohort(r.first).into_iter().take(depth).collect();
        match out.last_mut() {
            Some(last) if last.2 == cohort && last.1.checked_add(1) == Some(r.first) => {
                last.1 = r.last
            }
            _ => out.push((r.first, r.last, cohort)),
        }
    }
    out
}

fn node_addr(map: &ClusterMap, n: NodeId) -> (String, u16, u16) {
    let addr = map
        .nodes
        .get(&n)
        .map(|i| i.addr.clone())
        .unwrap_or_default();
    let c = client_addr(&addr);
    let bus = addr
        .split_once('@')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(0);
    (
        c.map_or_else(|| "0.0.0.0".to_string(), |a| a.ip().to_string()),
        c.map_or(0, |a| a.port()),
        bus,
    )
}

/// `CLUSTER SLOTS`: `[first, last, [ip, port, id]]` per range (no replicas: see [`ranges`]).
pub fn cluster_slots(map: &ClusterMap) -> Reply {
    Reply::Array(
        ranges(map)
            .into_iter()
            .map(|(first, last, cohort)| {
                let mut v = vec![
                    Reply::Integer(i64::from(first)),
                    Reply::Integer(i64::from(last)),
                ];
                for n in cohort {
                    let (ip, port, _) = node_addr(map, n);
                    v.push(Reply::Array(vec![
                        Reply::Bulk(ip.into_bytes()),
                        Reply::Integer(i64::from(port)),
                        Reply::Bulk(hex_id(n).into_bytes()),
                    ]));
                }
                Reply::Array(v)
            })
            .collect(),
    )
}

/// `CLUSTER SHARDS`: one shard per coordinator: its slot ranges and itself as master (no
/// replicas: see [`ranges`]).
pub fn cluster_shards(map: &ClusterMap) -> Reply {
    type Shard = (NodeId, Vec<(Slot, Slot)>, Vec<NodeId>);
    let mut shards: Vec<Shard> = Vec::new();
    for (first, last, cohort) in ranges(map) {
        let Some(c) = cohort.first().copied() else {
            continue;
        };
        match shards.iter_mut().find(|s| s.0 == c) {
            Some(s) => s.1.push((first, last)),
            None => shards.push((c, vec![(first, last)], cohort)),
        }
    }
    let node = |n: NodeId, role: &str| {
        let (ip, port, _) = node_addr(map, n);
        Reply::Map(vec![
            (Reply::bulk("id"), Reply::Bulk(hex_id(n).into_bytes())),
            (Reply::bulk("port"), Reply::Integer(i64::from(port))),
            (Reply::bulk("ip"), Reply::Bulk(ip.clone().into_bytes())),
            (Reply::bulk("endpoint"), Reply::Bulk(ip.into_bytes())),
            (Reply::bulk("role"), Reply::bulk(role)),
            (Reply::bulk("replication-offset"), Reply::Integer(0)),
            (Reply::bulk("health"), Reply::bulk("online")),
        ])
    };
    Reply::Array(
        shards
            .into_iter()
            .map(|(c, slots, cohort)| {
                let mut nodes = vec![node(c, "master")];
                nodes.extend(cohort.iter().skip(1).map(|n| node(*n, "replica")));
                Reply::Map(vec![
                    (
                        Reply::bulk("slots"),
                        Reply::Array(
                            slots
                                .iter()
                                .flat_map(|(f, l)| {
                                    [Reply::Integer(i64::from(*f)), Reply::Integer(i64::from(*l))]
                                })
                                .collect(),
                        ),
                    ),
                    (Reply::bulk("nodes"), Reply::Array(nodes)),
                ])
            })
            .collect(),
    )
}

/// `CLUSTER NODES`: one line per node, Redis's format. Every active node is a master (it
/// coordinates slots); spares and draining nodes are listed without slots.
pub fn cluster_nodes(map: &ClusterMap, me: NodeId) -> String {
    let rs = ranges(map);
    let mut s = String::new();
    for (id, info) in &map.nodes {
        let (ip, port, bus) = node_addr(map, *id);
        let mut flags = Vec::new();
        if *id == me {
            flags.push("myself");
        }
        flags.push("master");
        if info.state == NodeState::Failed {
            flags.push("fail");
        }
        let link = if info.state == NodeState::Failed {
            "disconnected"
        } else {
            "connected"
        };
        s.push_str(&format!(
            "{} {ip}:{port}@{bus} {} - 0 0 {} {link}",
            hex_id(*id),
            flags.join(","),
            map.epoch.0
        ));
        for (f, l, c) in &rs {
            if c.first() == Some(id) {
                if f == l {
                    s.push_str(&format!(" {f}"));
                } else {
                    s.push_str(&format!(" {f}-{l}"));
                }
            }
        }
        s.push('\n');
    }
    s
}

/// `CLUSTER INFO`.
pub fn cluster_info(map: Option<&ClusterMap>, me: NodeId) -> String {
    let placed = map.is_some_and(|m| m.placement.is_some());
    let (known, size, epoch) = map.map_or((0, 0, 0), |m| {
        let coords: std::collections::BTreeSet<NodeId> = ranges(m)
            .iter()
            .filter_map(|r| r.2.first().copied())
            .collect();
        (m.nodes.len(), coords.len(), m.epoch.0)
    });
    let _ = me;
    format!(
        "cluster_state:{}\r\ncluster_slots_assigned:{}\r\ncluster_slots_ok:{}\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:{known}\r\ncluster_size:{size}\r\ncluster_current_epoch:{epoch}\r\ncluster_my_epoch:{epoch}\r\n",
        if placed { "ok" } else { "fail" },
        if placed { 16384 } else { 0 },
        if placed { 16384 } else { 0 },
    )
}

impl Front {
    /// The other active data nodes, which hold copies of what this node coordinates (ROLE
    /// and INFO replication list the same ones), with their client addresses.
    fn peer_data_nodes(&self) -> Vec<(NodeId, std::net::SocketAddr)> {
        let me = self.node.id();
        self.map().map_or(Vec::new(), |m| {
            m.nodes
                .iter()
                .filter(|(id, n)| **id != me && n.state == NodeState::Active)
                .filter_map(|(id, n)| Some((*id, client_addr(&n.addr)?)))
                .collect()
        })
    }

    /// ROLE: every data node is the master of the slots it coordinates, and the other
    /// active data nodes hold its copies: ["master", 0, [[ip, port, "0"], ...]], the same
    /// nodes as INFO replication's `slaveN` lines. Offsets are 0: there is no replication
    /// stream to count in (writes are acknowledged one by one; WAIT reports them).
    fn role(&self) -> Reply {
        let peers = self
            .peer_data_nodes()
            .into_iter()
            .map(|(_, a)| {
                Reply::Array(vec![
                    Reply::Bulk(a.ip().to_string().into_bytes()),
                    Reply::Bulk(a.port().to_string().into_bytes()),
                    Reply::Bulk(b"0".to_vec()),
                ])
            })
            .collect();
        Reply::Array(vec![
            Reply::Bulk(b"master".to_vec()),
            Reply::Integer(0),
            Reply::Array(peers),
        ])
    }

    /// Redis's name for the default memgest's rule when memory is full (CONFIG GET
    /// maxmemory-policy, INFO memory): clients such as job queues check it.
    fn maxmemory_policy(&self) -> &'static str {
        let evictable = self.map().is_some_and(|m| {
            m.memgests
                .get(&m.default_memgest)
                .is_some_and(|g| g.evictable)
        });
        if evictable {
            "allkeys-lru"
        } else {
            "noeviction"
        }
    }

    /// INFO's Replication section for a Ringlet node (docs/design/cluster-keyspace.md, INFO).
    /// Every data node is a master of the slots it coordinates and holds copies for others,
    /// so Redis's fields are kept where they mean the same (`role:master`,
    /// `connected_slaves`: the other data nodes this node's writes go to, one `slaveN` line
    /// each with what is sent to it and not acknowledged yet), then Ringlet's: the writes
    /// the core still tracks and its replication and repair counters, and one line per
    /// memgest with the copies a write of it waits for and keeps.
    fn replication_section(&self) -> String {
        use std::fmt::Write as _;
        let info = self.node.replication_info().unwrap_or_default();
        let map = self.map();
        let mut t = String::from("# Replication\r\nrole:master\r\n");
        let peers = self.peer_data_nodes();
        let _ = write!(t, "connected_slaves:{}\r\n", peers.len());
        for (i, (id, addr)) in peers.iter().enumerate() {
            let (ip, port) = (addr.ip(), addr.port());
            let (w, b) = info
                .per_peer
                .iter()
                .find(|(n, _, _)| n == id)
                .map_or((0, 0), |(_, w, b)| (*w, *b));
            let _ = write!(
                t,
                "slave{i}:ip={ip},port={port},ringlet_node={id},unacked_writes={w},unacked_bytes={b}\r\n"
            );
        }
        let s = &info.stats;
        let _ = write!(
            t,
            "ringlet_writes_tracked:{}\r\nringlet_writes_committed:{}\r\n\
             ringlet_replicate_refused:{}\r\nringlet_store_refused:{}\r\n\
             ringlet_repair_pushed:{}\r\nringlet_repair_fetched:{}\r\nringlet_repair_retired:{}\r\n\
             ringlet_repair_key_lists:{}\r\n\
             ringlet_rebuilds_completed:{}\r\nringlet_syncs_completed:{}\r\n\
             ringlet_ec_takeovers:{}\r\nringlet_ec_decodes_on_demand:{}\r\n",
            info.pending,
            s.writes_committed,
            s.replicate_refused,
            s.store_refused,
            s.repair_pushed,
            s.repair_fetched,
            s.repair_retired,
            s.repair_key_lists,
            s.rebuilds_completed,
            s.syncs_completed,
            s.ec_takeovers,
            s.ec_decodes_on_demand,
        );
        if let Some(m) = &map {
            for g in m.memgests.values() {
                let (copies, acks) = match g.kind {
                    MemgestKind::None => (1, 0),
                    MemgestKind::Rep { r } => (usize::from(r), usize::from(r) / 2),
                    MemgestKind::Ec { m, .. } => (1, usize::from(m)),
                };
                let _ = write!(
                    t,
                    "memgest_{}:kind={},copies={copies},acks_to_commit={acks}\r\n",
                    g.name, g.kind
                );
            }
        }
        t
    }

    /// `WAIT numreplicas timeout` (docs/design/cluster-keyspace.md, "WAIT"): how many nodes
    /// besides this coordinator hold the connection's newest acknowledged write, answered
    /// once at least `numreplicas` do or `timeout` ms passed (0: Redis's "no timeout",
    /// bounded here by [`limits::WAIT_BLOCK_MS_MAX`]). It answers at once when the write's
    /// memgest can never give `numreplicas` copies (rep:R gives R - 1, ec:K+M its M parity
    /// holders, none 0) and inside EXEC. Without a write on the connection: the copies the
    /// default memgest keeps beyond the coordinator's (Redis counts every replica then).
    async fn wait(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let (want, timeout) = ringlet_server::cmd::server::wait_args(&args).map_err(err)?;
        let last = CONN_WRITES
            .try_with(|w| w.last.borrow().clone())
            .ok()
            .flatten();
        let in_exec = CONN_WRITES.try_with(|w| w.in_exec.get()).unwrap_or(false);
        let Some((key, version)) = last else {
            let copies = self
                .map()
                .map_or(0, |m| m.memgest_kind(m.default_memgest).other_holders());
            return Ok(Reply::Integer(copies as i64));
        };
        let ms = if timeout == 0 {
            limits::WAIT_BLOCK_MS_MAX
        } else {
            timeout.min(limits::WAIT_BLOCK_MS_MAX)
        };
        let deadline = Instant::now() + Duration::from_millis(ms);
        let mut nap = Duration::from_micros(100);
        // Bounded by the deadline; each round is one lookup under the core's lock.
        loop {
            let (acked, possible) = self.node.write_acks(&key, version).unwrap_or((0, 0));
            let now = Instant::now();
            if acked as i64 >= want || want > possible as i64 || in_exec || now >= deadline {
                return Ok(Reply::Integer(acked as i64));
            }
            tokio::time::sleep(nap.min(deadline - now)).await;
            nap = (nap * 2).min(Duration::from_millis(10));
        }
    }
}

/// A cluster node as the shared node-local commands see it (`ringlet_server::cmd::node`),
/// from one connection (CONFIG GET `bind`/`port` are the address it reached).
struct NodeView<'a> {
    front: &'a Front,
    laddr: std::net::SocketAddr,
}

impl node::NodeContext for NodeView<'_> {
    fn config_params(&self) -> Vec<(&'static str, String)> {
        let f = self.front;
        let memory = f.node.engine().lock().stats().memory_bytes_max;
        // maxmemory-policy is per memgest in Ringlet: the default memgest's rule is what a
        // client that names none gets (an evictable memgest drops its least recently used
        // keys when full, any other refuses writes with Redis's OOM error).
        let mut p = node::base_config_params(
            self.laddr,
            memory,
            f.maxmemory_policy(),
            f.requirepass.as_deref(),
        );
        p.push(("cluster-enabled", "yes".to_string()));
        // Ringlet's, as on the single node: keys this node's engine index holds before it
        // grows (CONFIG SET grows it now).
        p.push((
            "index-keys",
            f.node.engine().lock().index_capacity().to_string(),
        ));
        p.extend(f.hash_encoding.params());
        p
    }

    /// `hash-max-listpack-*` (per node: it names an encoding, nothing else), `index-keys`
    /// (per node: its engine's index) and the slow log's settings: the password is the
    /// cluster's (every node must agree), the rest is fixed at start ("can't set immutable
    /// config").
    fn config_settable(&self) -> Vec<&'static str> {
        std::iter::once("index-keys")
            .chain(ringlet_server::cmd::keyspace::HashEncodingMax::names())
            .collect()
    }

    fn config_apply(&self, pairs: &[(String, &[u8])]) -> Result<(), ringlet_command::reply::Reply> {
        // index-keys parsed before anything is applied (all or nothing, as Redis).
        let index_keys = node::index_keys_arg(pairs)?;
        self.front.hash_encoding.set(pairs)?;
        if let Some(k) = index_keys {
            // Grows this node's index now (a bulk load about to write k keys here: `ringlet
            // load` asks each node for its share, so that location hints taken during the
            // load do not go stale when the index grows under them); never shrinks. Every
            // engine entry counts: a replicated memgest's copies of other nodes' keys too.
            self.front.node.engine().lock().reserve_index(k);
        }
        Ok(())
    }

    fn monitor(&self) -> &ringlet_server::cmd::slowlog::Monitor {
        &self.front.monitor
    }

    fn engine_stats(&self) -> ringlet_engine::EngineStats {
        self.front.node.engine().lock().stats()
    }

    /// The coordinator's entry (the caller answered MOVED for another node's key). The
    /// engine never expires a replicated entry by itself: the coordinator decides, by the
    /// wall clock.
    fn key_footprint(&self, key: &[u8], now_ms: u64) -> Option<u64> {
        node::live_footprint(&self.front.node.engine().lock(), key, now_ms)
    }

    fn connected_clients(&self) -> u64 {
        self.front.clients.len() as u64
    }

    fn maxmemory_policy(&self) -> String {
        self.front.maxmemory_policy().to_string()
    }

    fn memory_extra_lines(&self) -> String {
        allocator_lines()
    }

    fn info_sections(&self) -> &'static [(&'static [&'static str], bool)] {
        &[
            (&["server"], true),
            (&["clients"], true),
            (&["memory"], true),
            (&["stats"], true),
            (&["replication"], true),
            (&["cpu"], true),
            // Redis's order; commandstats and latencystats are not in the default set.
            (&["commandstats"], false),
            (&["errorstats"], true),
            (&["latencystats"], false),
            (&["cluster", "ringlet"], true),
            (&["keyspace"], true),
        ]
    }

    fn info_section(&self, name: &str) -> String {
        let f = self.front;
        match name {
            "server" => f.info_core().0,
            "stats" => {
                // MIGRATE here moves a slot over the cluster's links: no cached sockets.
                let (calls, failed) = f.load.commands().totals();
                let e = f.node.engine().lock().stats();
                let b = *f.stat_bases.lock();
                format!(
                    "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{calls}\r\n\
                     total_error_replies:{failed}\r\nexpired_keys:{}\r\nevicted_keys:{}\r\n\
                     migrate_cached_sockets:0\r\n",
                    f.clients.total_received().saturating_sub(b.received),
                    e.expirations.saturating_sub(b.expired),
                    e.evictions.saturating_sub(b.evicted),
                )
            }
            "replication" => f.replication_section(),
            "cluster" => f.info_core().1,
            "keyspace" => f.info_core().2,
            "commandstats" => f.load.commands().commandstats_text(),
            "errorstats" => f.load.commands().errorstats_text(),
            "latencystats" => f.load.commands().latencystats_text(),
            _ => String::new(),
        }
    }
}

/// The reply of a key command written once over `Keyspace` (ringlet_server::cmd).
fn shared(
    r: Result<ringlet_command::reply::Reply, ringlet_command::reply::Reply>,
) -> Result<Reply, Reply> {
    r.map(|r| convert(&r)).map_err(|e| convert(&e))
}

fn convert(r: &ringlet_command::reply::Reply) -> Reply {
    use ringlet_command::reply::Reply as S;
    match r {
        S::Simple(b) => Reply::Simple(b.to_vec()),
        S::Error(b) => Reply::Error(b.to_vec()),
        S::Int(i) => Reply::Integer(*i),
        S::Bulk(b) => Reply::Bulk(b.to_vec()),
        S::Nil => Reply::Null,
        S::NilArray => Reply::NullArray,
        S::Array(v) => Reply::Array(v.iter().map(convert).collect()),
        S::Map(v) => Reply::Map(v.iter().map(|(a, b)| (convert(a), convert(b))).collect()),
        S::Set(v) => Reply::Set(v.iter().map(convert).collect()),
        S::Double(d) => Reply::Double(*d),
        S::Verbatim(b) => Reply::Verbatim {
            format: *b"txt",
            text: b.to_vec(),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ringlet_control::{ControlConfig, ControlPlane, Input};

    fn map() -> Arc<ClusterMap> {
        let mut cp = ControlPlane::new(ControlConfig::default()).unwrap();
        for i in 1..=4u32 {
            cp.step(
                0,
                Input::Join {
                    node: NodeId(i),
                    addr: format!("127.0.0.1:{}@{}", 7000 + i, 17000 + i),
                    incarnation: 1,
                },
            );
        }
        cp.step(
            0,
            Input::CreateMemgest {
                name: "rep:3".into(),
                kind: ringlet_types::MemgestKind::Rep { r: 3 },
                evictable: None,
            },
        );
        cp.step(
            0,
            Input::SetDefault {
                name: "rep:3".into(),
            },
        );
        cp.step(0, Input::Bootstrap { active: 3 });
        cp.map().clone()
    }

    #[test]
    fn slots_cover_everything_once_with_only_masters() {
        let m = map();
        let Reply::Array(rs) = cluster_slots(&m) else {
            panic!()
        };
        let mut next = 0i64;
        for r in rs {
            let Reply::Array(v) = r else { panic!() };
            assert_eq!(v[0], Reply::Integer(next));
            let Reply::Integer(last) = v[1] else { panic!() };
            next = last + 1;
            // Coordinator only, even for rep:3 (see `ranges`).
            assert_eq!(v.len(), 2 + 1);
            let Reply::Array(master) = &v[2] else {
                panic!()
            };
            assert_eq!(master[0], Reply::bulk("127.0.0.1"));
        }
        assert_eq!(next, 16384);
    }

    #[test]
    fn nodes_lines_and_info() {
        let m = map();
        let text = cluster_nodes(&m, NodeId(1));
        assert_eq!(text.lines().count(), 4);
        let me = text.lines().find(|l| l.contains("myself")).unwrap();
        assert!(me.contains("127.0.0.1:7001@17001"), "{me}");
        let slots: u32 = text
            .lines()
            .flat_map(|l| l.split(' ').skip(8))
            .map(|r| match r.split_once('-') {
                Some((a, b)) => b.parse::<u32>().unwrap() - a.parse::<u32>().unwrap() + 1,
                None => 1,
            })
            .sum();
        assert_eq!(slots, 16384);
        let info = cluster_info(Some(&m), NodeId(1));
        assert!(info.starts_with("cluster_state:ok\r\n"));
        assert!(info.contains("cluster_size:3\r\n"));
        let Reply::Array(shards) = cluster_shards(&m) else {
            panic!()
        };
        assert_eq!(shards.len(), 3);
    }
}
