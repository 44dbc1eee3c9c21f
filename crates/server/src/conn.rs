//! One client connection: protocol detection, the read → decode all → execute → write once
//! loop (pipelining), and the bounds that keep one bad client from hurting the others.
//!
//! # Lifecycle
//!
//! ```text
//! accept -> over CONNECTIONS_MAX? "-ERR max number of clients reached", close
//!        -> register in the client list
//!        -> loop: read (append to rbuf)
//!                 first byte ever == native MAGIC ? native frames : RESP
//!                 decode every complete request in rbuf, execute, encode into wbuf
//!                   (wbuf flushed early past WRITE_FLUSH_BYTES: the reply backlog is bounded)
//!                 malformed input -> "-ERR Protocol error: ..." then close (this connection only)
//!                 rbuf > CONN_READ_BUFFER_BYTES_MAX -> error, close
//!                 write wbuf in one write
//!        -> unregister
//! ```

use crate::cmd::{self, Ctx, Session};
use crate::native;
use crate::reply::{errors, Reply};
use crate::shared::{now_ms, ClientState, Shared, Stats};
use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use ringlet_codec::resp::{self as resp, Proto};
use ringlet_engine::{ReadOutcome, Reader};
use ringlet_types::{limits, ValueKind};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// State one worker thread shares between its connections.
pub struct Worker {
    /// This worker's lock-free engine reader.
    pub reader: Reader,
}

impl Worker {
    pub fn new(reader: Reader) -> Worker {
        Worker { reader }
    }
}

/// Replies buffered past this are written before decoding more requests, so a pipeline of
/// large GETs holds at most this much (plus one reply) per connection.
pub(crate) const WRITE_FLUSH_BYTES: usize = 256 * 1024;

/// Read granularity: reserve this much spare room before each read.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Keeps the connection count and the client registry right however the connection ends
/// (a task dropped at shutdown included; the io_uring loop drops it with the connection).
pub(crate) struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.clients.lock().remove(&self.id);
        self.shared.stats.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The reply a connection over [`limits::CONNECTIONS_MAX`] gets before it is closed.
pub(crate) const TOO_MANY_CLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";

/// Count and register an accepted connection (both worker loops). `Err` holds the
/// registration of a connection over [`limits::CONNECTIONS_MAX`]: send it
/// [`TOO_MANY_CLIENTS`], then close.
pub(crate) fn open_session(
    shared: &Arc<Shared>,
    peer: SocketAddr,
    laddr: SocketAddr,
    fd: i32,
) -> Result<(Registration, Session), Registration> {
    Stats::add(&shared.stats.connections_received, 1);
    let open = shared.stats.connected.fetch_add(1, Ordering::Relaxed) + 1;
    let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
    let reg = Registration {
        shared: shared.clone(),
        id,
    };
    if open > u64::from(limits::CONNECTIONS_MAX) {
        Stats::add(&shared.stats.connections_rejected, 1);
        return Err(reg);
    }
    let state = Arc::new(ClientState {
        id,
        addr: peer,
        laddr,
        created: Instant::now(),
        last_cmd_at_ms: AtomicU64::new(0),
        last_cmd: AtomicU64::new(u64::MAX),
        resp: AtomicU8::new(2),
        name: Mutex::new(Vec::new()),
        buffers: cmd::connection::ConnBuffers::with_fd(fd),
        user: Mutex::new("default".to_string()),
    });
    shared.clients.lock().insert(id, state.clone());
    tracing::debug!(id, %peer, "connection opened");
    let session = Session {
        id,
        proto: Proto::Resp2,
        authenticated: !shared.auth_required(),
        quit: false,
        multi: None,
        state,
        user: ringlet_command::acl::ConnUser::new(&shared.acl),
    };
    Ok((reg, session))
}

/// Serve one accepted connection until it closes.
pub async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    worker: Rc<Worker>,
) {
    let laddr = stream.local_addr().unwrap_or(peer);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let (_reg, mut session) = match open_session(&shared, peer, laddr, fd) {
        Ok(s) => s,
        Err(_reg) => {
            let _ = stream.write_all(TOO_MANY_CLIENTS).await;
            return;
        }
    };
    let id = session.id;
    let _ = stream.set_nodelay(true);
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut wbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let result = match first_byte(&mut stream, &mut rbuf, &shared).await {
        Some(b) if native::is_native(b) => {
            native::serve(
                &mut stream,
                &mut rbuf,
                &mut wbuf,
                &shared,
                &worker,
                &mut session,
            )
            .await
        }
        Some(_) => {
            serve_resp(
                &mut stream,
                &mut rbuf,
                &mut wbuf,
                &shared,
                &worker,
                &mut session,
            )
            .await
        }
        None => Ok(()),
    };
    if let Err(e) = result {
        tracing::debug!(id, error = %e, "connection error");
    }
    tracing::debug!(id, "connection closed");
}

/// Read until at least one byte is buffered; `None` if the peer closed first.
async fn first_byte(stream: &mut TcpStream, rbuf: &mut BytesMut, shared: &Shared) -> Option<u8> {
    match read_more(stream, rbuf, shared).await {
        Ok(n) if n > 0 => rbuf.first().copied(),
        _ => None,
    }
}

/// One read into the spare room of `rbuf`. `Ok(0)` is end of stream.
pub async fn read_more(
    stream: &mut TcpStream,
    rbuf: &mut BytesMut,
    shared: &Shared,
) -> std::io::Result<usize> {
    if rbuf.capacity() - rbuf.len() < READ_CHUNK_BYTES / 4 {
        rbuf.reserve(READ_CHUNK_BYTES);
    }
    // No `recv` that fails with EAGAIN follows a short read: tokio (1.54,
    // `PollEvented::poll_read`) clears the socket's readiness itself when a read returns
    // fewer bytes than asked for, so the next read waits for epoll's edge.
    let n = stream.read_buf(rbuf).await?;
    Stats::add(&shared.stats.net_input_bytes, n as u64);
    Ok(n)
}

/// Write and clear `wbuf`.
pub async fn flush(
    stream: &mut TcpStream,
    wbuf: &mut BytesMut,
    shared: &Shared,
) -> std::io::Result<()> {
    if !wbuf.is_empty() {
        stream.write_all(wbuf).await?;
        Stats::add(&shared.stats.net_output_bytes, wbuf.len() as u64);
        wbuf.clear();
    }
    Ok(())
}

/// The reply sent before closing a connection whose buffered request passed the bound.
pub(crate) const READ_BUFFER_ERROR: &[u8] =
    b"Protocol error: request exceeds the connection read buffer limit";

/// The sans-I/O half of a RESP connection: decodes and executes the requests in a buffer,
/// encoding replies into the write buffer. The async loop below only moves bytes; tests and
/// the fuzz entry point (`fuzz_support`) drive this directly.
///
/// # Batches (the pipelined fast path)
///
/// `GET key`, `SET key value` (no options) and `RECORD SET key spec ...`, from an
/// authenticated connection outside MULTI, are not dispatched one by one: they are decoded
/// ahead into a batch of at most [`BATCH_OPS_MAX`] operations, and the batch runs when a
/// request of another kind, the end of the buffer or the batch bound is reached, in request
/// order, before that other request.
///
/// ```text
/// decode GET a, SET b, GET c ...   hash each key, prefetch its index bucket     (touch 1)
/// run:  prefetch the entries the buckets point at                               (touch 2)
///       Shared::exec read guard once; engine lock taken at the first SET, kept to the end
///       GET: lock-free reader -> bulk encoded straight from the reader's copy into wbuf
///       SET: Engine::set_discarding_old (no copy of the replaced value)  -> +OK
///       RECORD SET: its handler (`cmd::record::record_set`), the engine lock taken per
///                   command as in dispatch (released first if the batch's SETs hold it)
///       counters added once per batch
/// ```
///
/// A `RECORD SET` (what `ringlet load` sends, one per item: docs/design/loader.md) is batched
/// for the touches and for what `cmd::dispatch` costs per request — the table lookup, the
/// timing, the per-command counters — which was a fifth of a bulk load's node time; its own
/// work is the one-by-one handler's, so its reply and effects are too.
///
/// At a million keys every lookup misses the cache twice (bucket, entry); touching all the
/// batch's buckets, then all its entries, before the first lookup overlaps those misses
/// (MICA's and CliqueMap's batched lookups). One lock acquisition per batch instead of one
/// per SET, one `exec` guard instead of one per command, and no `Reply` value (an allocation
/// and a copy per GET) are the rest of the saving; `docs/design/request-path.md` has the
/// profile. Replies, counters (`commands_processed`, hits, misses, `cmd=` of CLIENT LIST) and
/// the order of effects are those of the one-by-one path, which every other request takes.
pub struct RespProcessor {
    decoder: resp::RequestDecoder,
    req: resp::Request,
    scratch: Vec<u8>,
    argv: Vec<&'static [u8]>,
    /// The pending batch (positions in the buffer of the current `process` call).
    ops: Vec<FastOp>,
    /// Where the batch's RECORD SET arguments are in the buffer (offset, length), back to
    /// back; `FastOp::args` indexes it.
    rec_args: Vec<(usize, usize)>,
    /// Table indexes of GET, SET and RECORD SET, for CLIENT LIST's `cmd=` and commandstats.
    get_idx: u64,
    set_idx: u64,
    record_idx: u64,
    /// Off only in tests: every request then takes `cmd::dispatch`, the oracle the batched
    /// path is compared with (`tests/batch.rs`).
    batching: bool,
}

/// Operations in one batch. Bounds the engine lock's hold time (32 SETs of 100 B are a few
/// microseconds) and the replies produced before the write-buffer bound is checked again
/// (it is checked after every operation anyway).
pub const BATCH_OPS_MAX: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FastKind {
    Get,
    Set,
    Record,
}

/// One batched request: where its key and value are in the buffer, where it ends, and the
/// key's hash (computed once for the prefetch and the lookup).
#[derive(Clone, Copy, Debug)]
struct FastOp {
    kind: FastKind,
    key: (usize, usize),
    value: (usize, usize),
    end: usize,
    hash: u64,
    /// A SET's or RECORD SET's cluster slot (`key_slot(key)`), computed once here for the
    /// prefetch of the slot's accounting line (and a SET's accounting); 0 for a GET.
    slot: u16,
    /// A RECORD SET's arguments: a range of `RespProcessor::rec_args` (empty otherwise).
    args: (usize, usize),
}

/// Offset of `arg` (a slice of `within`) in `within`.
fn offset_in(within: &[u8], arg: &[u8]) -> usize {
    arg.as_ptr() as usize - within.as_ptr() as usize
}

/// What one [`RespProcessor::process`] call did.
pub struct Progress {
    /// Bytes of the buffer fully consumed (drop them before the next call).
    pub consumed: usize,
    /// The connection must be closed after the write buffer is flushed (QUIT, protocol error).
    pub close: bool,
}

impl Default for RespProcessor {
    fn default() -> Self {
        RespProcessor::new()
    }
}

impl RespProcessor {
    pub fn new() -> RespProcessor {
        let t = cmd::table();
        RespProcessor {
            decoder: resp::RequestDecoder::new(),
            req: resp::Request::new(),
            scratch: Vec::new(),
            argv: Vec::new(),
            ops: Vec::with_capacity(BATCH_OPS_MAX),
            rec_args: Vec::new(),
            get_idx: t.index("get").map_or(u64::MAX, |i| i as u64),
            set_idx: t.index("set").map_or(u64::MAX, |i| i as u64),
            record_idx: ringlet_command::table::find(b"record|set").map_or(u64::MAX, |i| i as u64),
            batching: true,
        }
    }

    /// Turn batching off (tests: the one-by-one path as an oracle) or back on.
    pub fn set_batching(&mut self, on: bool) {
        self.batching = on;
    }

    /// The just-decoded request (`self.req`, `used` bytes at `base` of `buf`) as a batch
    /// operation, if it is one: GET with one key, SET without options or RECORD SET with a
    /// key and at least one spec's worth of arguments, multibulk, from a connection that may
    /// run commands now (authenticated, not queueing a MULTI, its ACL user unrestricted).
    /// Exactly the requests whose lookup, arity and auth checks in `cmd::dispatch` cannot
    /// fail and whose handler is `string::get`, `string::set` with default options or
    /// `record::record_set`.
    fn fast_op(
        &mut self,
        buf: &[u8],
        base: usize,
        used: usize,
        session: &Session,
        shared: &Shared,
    ) -> Option<FastOp> {
        if !self.batching || self.req.is_inline() || session.multi.is_some() {
            return None;
        }
        // SLOWLOG set to log every command (`slowlog-log-slower-than 0`): one by one, timed.
        if shared.monitor.logs_everything() {
            return None;
        }
        let rest = &buf[base..];
        let name = self.req.arg(rest, 0)?;
        let kind = match (self.req.argc(), name.len()) {
            (2, 3) if name.eq_ignore_ascii_case(b"get") => FastKind::Get,
            (3, 3) if name.eq_ignore_ascii_case(b"set") => FastKind::Set,
            // `record|set`'s arity is -5.
            (n, 6)
                if n >= 5
                    && name.eq_ignore_ascii_case(b"record")
                    && self.req.arg(rest, 1)?.eq_ignore_ascii_case(b"set") =>
            {
                FastKind::Record
            }
            _ => return None,
        };
        if !session.authenticated && shared.auth_required() {
            return None;
        }
        // ACL: only a user allowed everything, as last looked up with the table unchanged
        // since; any other user (or an ACL change, which may restrict or delete this one)
        // takes `cmd::dispatch`, where the check runs and the user is looked up again.
        if !session.user.unrestricted() || !session.user.generation_is(shared.acl.generation()) {
            return None;
        }
        let key = self
            .req
            .arg(rest, if kind == FastKind::Record { 2 } else { 1 })?;
        let value = match kind {
            FastKind::Set => self.req.arg(rest, 2)?,
            FastKind::Get | FastKind::Record => &[][..],
        };
        let args = if kind == FastKind::Record {
            let from = self.rec_args.len();
            let at = |a: &[u8]| (base + offset_in(rest, a), a.len());
            self.rec_args.extend(self.req.args(rest).map(at));
            (from, self.rec_args.len())
        } else {
            (0, 0)
        };
        Some(FastOp {
            kind,
            key: (base + offset_in(rest, key), key.len()),
            value: match kind {
                FastKind::Set => (base + offset_in(rest, value), value.len()),
                FastKind::Get | FastKind::Record => (0, 0),
            },
            end: base + used,
            hash: ringlet_engine::hash::key_hash(key),
            slot: match kind {
                FastKind::Set | FastKind::Record => ringlet_types::key_slot(key),
                FastKind::Get => 0,
            },
            args,
        })
    }

    /// INFO commandstats/errorstats for a batch that ran `gets` GETs, `sets` SETs and
    /// `records` RECORD SETs in the time since `started`, `errors` of them answering an error.
    fn count_batch(
        &self,
        shared: &Shared,
        started: std::time::Instant,
        [gets, sets, records]: [u64; 3],
        errors: &[(FastKind, Reply)],
    ) {
        let n = gets + sets + records;
        if n == 0 {
            return;
        }
        let usec = started.elapsed().as_micros() as u64;
        let stats = &shared.cmdstats;
        let failed = |k: FastKind| errors.iter().filter(|(e, _)| *e == k).count() as u64;
        for (idx, count, kind) in [
            (self.get_idx, gets, FastKind::Get),
            (self.set_idx, sets, FastKind::Set),
            (self.record_idx, records, FastKind::Record),
        ] {
            if count == 0 {
                continue;
            }
            let idx = idx as usize;
            let f = failed(kind);
            stats
                .by_index(idx)
                .record_batch(count - f, usec * (count - f) / n);
            for _ in 0..f {
                stats
                    .by_index(idx)
                    .record(usec / n, crate::cmdstats::Outcome::Failed);
            }
        }
        for (_, r) in errors {
            if let Reply::Error(text) = r {
                stats.record_error(text);
            }
        }
    }

    /// Run the pending batch (see the type's documentation). Returns where to resume if the
    /// write buffer reached [`WRITE_FLUSH_BYTES`]: the end of the last operation run (the
    /// rest of the batch is decoded again after the flush); `None` if every operation ran and
    /// the buffer is below the bound.
    fn run_batch(
        &mut self,
        buf: &[u8],
        shared: &Shared,
        reader: &Reader,
        session: &Session,
        now: u64,
        wbuf: &mut BytesMut,
    ) -> Option<usize> {
        if self.ops.is_empty() {
            return None;
        }
        // INFO commandstats: the batch is timed as a whole, each request counted at its mean.
        let started = std::time::Instant::now();
        // Not inside another client's EXEC (see `Shared::exec`); one guard for the batch.
        let _exec = shared.exec.read();
        // A batch with a SET takes the engine lock here, before touch 2, rather than at its
        // first SET: touch 2 prefetches each SET's slot accounting line, which lives in the
        // engine. (The lock is held to the end of the batch either way; a GET before the first
        // SET runs on the lock-free reader all the same. Lock order: exec, then engine.)
        // With a RECORD SET too: its slot's accounting line is prefetched here, the lock
        // released before it runs (its handler locks per command).
        let mut engine = self
            .ops
            .iter()
            .any(|op| op.kind != FastKind::Get)
            .then(|| shared.db.lock());
        // Touch 2: the buckets were prefetched while the batch was decoded; now the data
        // entries they point at, and each SET's slot accounting line, for the whole batch
        // before its first operation runs. (Issuing it a few operations ahead of the running
        // one instead was measured and lost, session 20: `docs/design/request-path.md`.)
        for op in &self.ops {
            reader.prefetch_entry(op.hash);
            if let (FastKind::Set | FastKind::Record, Some(e)) = (op.kind, engine.as_ref()) {
                e.prefetch_slot(op.slot);
            }
        }
        let (mut hits, mut misses, mut retries, mut ran) = (0u64, 0u64, 0u64, 0usize);
        // GETs and RECORD SETs that ran (the rest of `ran` are SETs), and the error replies
        // (rare: WRONGTYPE, OOM).
        let (mut gets, mut records) = (0u64, 0u64);
        let mut argv: Vec<&[u8]> = Vec::new();
        let mut errors: Vec<(FastKind, Reply)> = Vec::new();
        let mut stop = None;
        for op in &self.ops {
            let key = &buf[op.key.0..op.key.0 + op.key.1];
            match op.kind {
                FastKind::Get => {
                    self.scratch.clear();
                    let kind = match reader.get_hashed(key, op.hash, now, &mut self.scratch) {
                        ReadOutcome::Hit { kind, .. } => Some(kind),
                        ReadOutcome::Miss => None,
                        ReadOutcome::Retry => {
                            retries += 1;
                            let e = engine.get_or_insert_with(|| shared.db.lock());
                            e.get(key, now).map(|e| {
                                self.scratch.clear();
                                self.scratch.extend_from_slice(&e.value);
                                e.kind
                            })
                        }
                    };
                    match kind {
                        Some(ValueKind::String) => {
                            hits += 1;
                            resp::encode_bulk(wbuf, &self.scratch);
                        }
                        Some(ValueKind::Record) => {
                            hits += 1;
                            let r = Reply::err(errors::WRONGTYPE);
                            encode(&r, session.proto, wbuf);
                            errors.push((FastKind::Get, r));
                        }
                        None => {
                            misses += 1;
                            resp::encode_null(wbuf, session.proto);
                        }
                    }
                }
                FastKind::Set => {
                    let value = &buf[op.value.0..op.value.0 + op.value.1];
                    let e = engine.get_or_insert_with(|| shared.db.lock());
                    // `cmd::string::set_plain`'s engine call, with the batch's slot as well as
                    // its hash (`Engine::set_plain_slotted`).
                    match e.set_plain_slotted(key, op.hash, op.slot, value, now) {
                        Ok(()) => resp::encode_simple(wbuf, b"OK"),
                        Err(err) => {
                            let r = cmd::string::engine_error(err);
                            encode(&r, session.proto, wbuf);
                            errors.push((FastKind::Set, r));
                        }
                    }
                }
                FastKind::Record => {
                    // The handler takes the engine lock itself, per command as `dispatch`
                    // would (not reentrant: a guard the batch's SETs hold goes first).
                    drop(engine.take());
                    argv.clear();
                    argv.extend(
                        self.rec_args[op.args.0..op.args.1]
                            .iter()
                            .map(|&(at, len)| &buf[at..at + len]),
                    );
                    let ks = cmd::keyspace_api::Local::with_scratch(
                        shared,
                        reader,
                        now,
                        std::mem::take(&mut self.scratch),
                    );
                    let reply = cmd::keyspace_api::ready(cmd::record::record_set(&ks, &argv))
                        .unwrap_or_else(|e| e);
                    self.scratch = ks.into_scratch();
                    encode(&reply, session.proto, wbuf);
                    if let Reply::Error(_) = reply {
                        errors.push((FastKind::Record, reply));
                    }
                }
            }
            ran += 1;
            gets += u64::from(op.kind == FastKind::Get);
            records += u64::from(op.kind == FastKind::Record);
            if wbuf.len() >= WRITE_FLUSH_BYTES {
                stop = Some(op.end);
                break;
            }
        }
        drop(engine);
        let sets = ran as u64 - gets - records;
        self.count_batch(shared, started, [gets, sets, records], &errors);
        let st = &shared.stats;
        Stats::add(&st.commands_processed, ran as u64);
        if hits > 0 {
            Stats::add(&st.keyspace_hits, hits);
        }
        if misses > 0 {
            Stats::add(&st.keyspace_misses, misses);
        }
        if retries > 0 {
            Stats::add(&st.reader_retries, retries);
        }
        if let Some(last) = ran.checked_sub(1).and_then(|i| self.ops.get(i)) {
            let idx = match last.kind {
                FastKind::Get => self.get_idx,
                FastKind::Set => self.set_idx,
                FastKind::Record => self.record_idx,
            };
            session.state.last_cmd.store(idx, Ordering::Relaxed);
            session.state.last_cmd_at_ms.store(now, Ordering::Relaxed);
        }
        self.ops.clear();
        self.rec_args.clear();
        stop
    }

    /// Execute every complete request at the start of `buf`, stopping early once `wbuf`
    /// holds [`WRITE_FLUSH_BYTES`] (the caller flushes, drops `consumed` bytes, and calls
    /// again). Malformed input encodes `-ERR Protocol error: ...` and asks to close.
    pub fn process(
        &mut self,
        buf: &[u8],
        shared: &Shared,
        reader: &Reader,
        session: &mut Session,
        now: u64,
        wbuf: &mut BytesMut,
    ) -> Progress {
        let mut pos = 0usize;
        self.ops.clear();
        self.rec_args.clear();
        // Bounded by buf.len(): every successful decode consumes at least one byte.
        loop {
            let rest = &buf[pos..];
            // Redis's tighter request limits until the client has authenticated (a password
            // is set and no AUTH yet): at most 10 arguments of at most 16 KiB.
            self.decoder
                .set_unauthenticated(!session.authenticated && shared.auth_required());
            match self.decoder.decode(rest, &mut self.req) {
                Ok(Some(used)) => {
                    if self.req.argc() > 0 {
                        if let Some(op) = self.fast_op(buf, pos, used, session, shared) {
                            // Touch 1 of the batched lookup.
                            reader.prefetch_bucket(op.hash);
                            self.ops.push(op);
                            pos += used;
                            if self.ops.len() >= BATCH_OPS_MAX {
                                if let Some(stop) =
                                    self.run_batch(buf, shared, reader, session, now, wbuf)
                                {
                                    return Progress {
                                        consumed: stop,
                                        close: false,
                                    };
                                }
                            }
                            continue;
                        }
                        // Any other request runs after the batch decoded before it.
                        if let Some(stop) = self.run_batch(buf, shared, reader, session, now, wbuf)
                        {
                            return Progress {
                                consumed: stop,
                                close: false,
                            };
                        }
                        // `argv` is reused across requests; its borrow of `rest` ends here,
                        // which `recycle` makes explicit.
                        let mut args = recycle(std::mem::take(&mut self.argv));
                        args.extend(self.req.args(rest));
                        session.state.buffers.note_query(rest.len(), buf.len());
                        let reply = {
                            let mut ctx = Ctx {
                                shared,
                                reader,
                                scratch: &mut self.scratch,
                                session,
                                now_ms: now,
                            };
                            cmd::dispatch(&mut ctx, &args)
                        };
                        self.argv = recycle(args);
                        encode(&reply, session.proto, wbuf);
                    }
                    pos += used;
                    if session.quit {
                        return Progress {
                            consumed: pos,
                            close: true,
                        };
                    }
                    if wbuf.len() >= WRITE_FLUSH_BYTES {
                        return Progress {
                            consumed: pos,
                            close: false,
                        };
                    }
                }
                Ok(None) => {
                    let stop = self.run_batch(buf, shared, reader, session, now, wbuf);
                    return Progress {
                        consumed: stop.unwrap_or(pos),
                        close: false,
                    };
                }
                Err(e) => {
                    // The requests before the malformed one are answered first.
                    if let Some(stop) = self.run_batch(buf, shared, reader, session, now, wbuf) {
                        return Progress {
                            consumed: stop,
                            close: false,
                        };
                    }
                    Stats::add(&shared.stats.protocol_errors, 1);
                    tracing::debug!(id = session.id, error = %e, "protocol error");
                    resp::encode_error(wbuf, format!("ERR {e}").as_bytes());
                    return Progress {
                        consumed: pos,
                        close: true,
                    };
                }
            }
        }
    }
}

async fn serve_resp(
    stream: &mut TcpStream,
    rbuf: &mut BytesMut,
    wbuf: &mut BytesMut,
    shared: &Arc<Shared>,
    worker: &Worker,
    session: &mut Session,
) -> std::io::Result<()> {
    let mut processor = RespProcessor::new();
    // The event loop of one connection: ends on EOF, QUIT, an error or a protocol error.
    loop {
        let now = now_ms();
        let mut close;
        // Bounded: each round either consumes bytes or stops (flush threshold or need input).
        loop {
            let p = processor.process(rbuf, shared, &worker.reader, session, now, wbuf);
            rbuf.advance(p.consumed);
            close = p.close;
            if close || wbuf.len() < WRITE_FLUSH_BYTES {
                break;
            }
            flush(stream, wbuf, shared).await?;
        }
        if !close && rbuf.len() > limits::CONN_READ_BUFFER_BYTES_MAX as usize {
            read_buffer_overflow(shared, wbuf);
            close = true;
        }
        // What CLIENT LIST shows for this connection while it waits: its unrun input and
        // the replies still queued (before the flush empties them).
        session.state.buffers.record(
            (rbuf.len(), rbuf.capacity()),
            (wbuf.len(), wbuf.capacity()),
            session.multi.as_ref(),
        );
        flush(stream, wbuf, shared).await?;
        if close {
            return Ok(());
        }
        if read_more(stream, rbuf, shared).await? == 0 {
            return Ok(());
        }
    }
}

/// A RESP connection's unparsed input passed [`limits::CONN_READ_BUFFER_BYTES_MAX`]: count it
/// and encode the error it gets before being closed (both worker loops).
pub(crate) fn read_buffer_overflow(shared: &Shared, wbuf: &mut BytesMut) {
    Stats::add(&shared.stats.protocol_errors, 1);
    let mut msg = b"ERR ".to_vec();
    msg.extend_from_slice(READ_BUFFER_ERROR);
    resp::encode_error(wbuf, &msg);
}

/// Empty a vector of borrowed slices so it can hold slices of another lifetime, keeping its
/// capacity (the allocation is reused; no slice survives the call).
fn recycle<'a, 'b>(mut v: Vec<&'a [u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter().map(|_| -> &'b [u8] { &[] }).collect()
}

/// Encode a [`Reply`] with the codec's encoders in the connection's protocol.
pub fn encode(r: &Reply, proto: Proto, out: &mut BytesMut) {
    match r {
        Reply::Simple(s) => resp::encode_simple(out, s),
        Reply::Error(e) => resp::encode_error(out, e),
        Reply::Int(i) => resp::encode_int(out, *i),
        Reply::Bulk(b) => resp::encode_bulk(out, b),
        Reply::Nil => resp::encode_null(out, proto),
        Reply::NilArray => resp::encode_null_array(out, proto),
        Reply::Array(items) => {
            resp::encode_array_len(out, items.len());
            for i in items {
                encode(i, proto, out);
            }
        }
        Reply::Map(pairs) => {
            resp::encode_map_len(out, proto, pairs.len());
            for (k, v) in pairs {
                encode(k, proto, out);
                encode(v, proto, out);
            }
        }
        Reply::Set(items) => {
            resp::encode_set_len(out, proto, items.len());
            for i in items {
                encode(i, proto, out);
            }
        }
        Reply::Double(d) => resp::encode_double(out, proto, *d),
        Reply::Verbatim(t) => resp::encode_verbatim(out, proto, *b"txt", t),
    }
}
