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
use crate::reply::Reply;
use crate::shared::{now_ms, ClientState, Shared, Stats};
use bytes::{Buf, BytesMut};
use parking_lot::Mutex;
use ringlet_codec::resp::{self as resp, Proto};
use ringlet_engine::Reader;
use ringlet_types::limits;
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
const WRITE_FLUSH_BYTES: usize = 256 * 1024;

/// Read granularity: reserve this much spare room before each read.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Keeps the connection count and the client registry right however the task ends.
struct Registration {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.clients.lock().remove(&self.id);
        self.shared.stats.connected.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serve one accepted connection until it closes.
pub async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    worker: Rc<Worker>,
) {
    Stats::add(&shared.stats.connections_received, 1);
    let open = shared.stats.connected.fetch_add(1, Ordering::Relaxed) + 1;
    let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
    let _reg = Registration {
        shared: shared.clone(),
        id,
    };
    if open > u64::from(limits::CONNECTIONS_MAX) {
        Stats::add(&shared.stats.connections_rejected, 1);
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    let _ = stream.set_nodelay(true);
    let laddr = stream.local_addr().unwrap_or(peer);
    let state = Arc::new(ClientState {
        id,
        addr: peer,
        laddr,
        created: Instant::now(),
        last_cmd_at_ms: AtomicU64::new(0),
        last_cmd: AtomicU64::new(u64::MAX),
        resp: AtomicU8::new(2),
        name: Mutex::new(Vec::new()),
        buffers: Default::default(),
    });
    shared.clients.lock().insert(id, state.clone());
    tracing::debug!(id, %peer, "connection opened");
    let mut session = Session {
        id,
        proto: Proto::Resp2,
        authenticated: !shared.auth_required(),
        quit: false,
        multi: None,
        state,
        user: ringlet_command::acl::ConnUser::new(&shared.acl),
    };
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
const READ_BUFFER_ERROR: &[u8] =
    b"Protocol error: request exceeds the connection read buffer limit";

/// The sans-I/O half of a RESP connection: decodes and executes the requests in a buffer,
/// encoding replies into the write buffer. The async loop below only moves bytes; tests and
/// the fuzz entry point (`fuzz_support`) drive this directly.
pub struct RespProcessor {
    decoder: resp::RequestDecoder,
    req: resp::Request,
    scratch: Vec<u8>,
    argv: Vec<&'static [u8]>,
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
        RespProcessor {
            decoder: resp::RequestDecoder::new(),
            req: resp::Request::new(),
            scratch: Vec::new(),
            argv: Vec::new(),
        }
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
                        // `argv` is reused across requests; its borrow of `rest` ends here,
                        // which `recycle` makes explicit.
                        let mut args = recycle(std::mem::take(&mut self.argv));
                        args.extend(self.req.args(rest));
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
                    return Progress {
                        consumed: pos,
                        close: false,
                    }
                }
                Err(e) => {
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
            Stats::add(&shared.stats.protocol_errors, 1);
            let mut msg = b"ERR ".to_vec();
            msg.extend_from_slice(READ_BUFFER_ERROR);
            resp::encode_error(wbuf, &msg);
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
