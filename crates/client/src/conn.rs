//! One pipelined connection.
//!
//! ```text
//!  callers ──encode under lock──▶ write buffer ──notify──▶ writer task ──▶ socket
//!     │  insert id → oneshot                                                 │
//!     ▼                                                                      ▼
//!  pending table ◀──── remove id, send Response ───── reader task ◀──── socket
//! ```
//!
//! Callers encode their frame straight into a shared write buffer (no per-request allocation
//! or channel hop) and wake the writer, which writes whatever has accumulated in one syscall:
//! requests issued concurrently are coalesced, which is what makes pipelining cheap. The reader
//! splits complete frames off its buffer as `Bytes` (values are zero-copy slices of them) and
//! completes the waiter registered under the frame's request id. Responses may arrive in any
//! order.
//!
//! Bounds: a semaphore of `in_flight_per_connection_max` permits bounds the pending table and
//! the write buffer; the reader reserves at most one frame, whose length the codec checked
//! against `limits::FRAME_BYTES_MAX`.
//!
//! Failure: the first I/O or protocol error marks the connection dead and fails every pending
//! call with `Error::Connection { maybe_executed: true }`; later sends fail with
//! `maybe_executed: false`. The pool replaces dead connections. Dropping the last handle stops
//! both tasks, which closes the socket.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ringlet_codec::native::{self, ResponseBody, Status};
use ringlet_types::{Epoch, Version};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::Error;
use crate::tls::{ClientTls, ConnIo};

/// One item of an MGET response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MgetEntry {
    /// OK, NOT_FOUND, or an error status (then `value` holds the message).
    pub status: Status,
    /// The entry's version (0 if not found).
    pub version: Version,
    /// The value (a zero-copy slice of the response frame).
    pub value: Bytes,
}

/// Payload of an owned response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Body {
    Empty,
    Value(Bytes),
    Values(Vec<MgetEntry>),
    Int(i64),
    Message(String),
}

/// An owned response frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    pub(crate) status: Status,
    pub(crate) epoch: Epoch,
    pub(crate) version: Version,
    pub(crate) body: Body,
}

type Waiter = oneshot::Sender<Result<Response, Error>>;

struct Shared {
    addr: SocketAddr,
    write: Mutex<BytesMut>,
    pending: Mutex<HashMap<u64, Waiter>>,
    writer_wake: Notify,
    shutdown: Notify,
    alive: AtomicBool,
    next_id: AtomicU64,
    in_flight: Arc<Semaphore>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these short locks cannot leave the data half-updated in a
    // way that matters (a map insert/remove, a buffer append), so poisoning is ignored.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    fn conn_error(&self, message: String, maybe_executed: bool) -> Error {
        Error::Connection {
            addr: self.addr.to_string(),
            message,
            maybe_executed,
        }
    }

    /// Mark dead and fail every pending call. Idempotent.
    fn fail(&self, err: Error) {
        self.alive.store(false, Ordering::SeqCst);
        let drained: Vec<Waiter> = lock(&self.pending).drain().map(|(_, w)| w).collect();
        for w in drained {
            let _ = w.send(Err(err.clone()));
        }
        self.writer_wake.notify_one();
        self.shutdown.notify_one();
    }
}

/// A handle to one connection; dropping the last handle closes it.
pub(crate) struct Conn {
    shared: Arc<Shared>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.shared.fail(
            self.shared
                .conn_error("client dropped the connection".into(), true),
        );
    }
}

/// A request written to a connection, waiting for its response.
pub(crate) struct Pending {
    rx: oneshot::Receiver<Result<Response, Error>>,
    id: u64,
    shared: Arc<Shared>,
    _permit: OwnedSemaphorePermit,
}

impl Pending {
    pub(crate) async fn wait(mut self) -> Result<Response, Error> {
        match (&mut self.rx).await {
            Ok(r) => r,
            Err(_) => Err(self.shared.conn_error("connection closed".into(), true)),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // A caller that gave up (deadline) must not leave its waiter in the table.
        lock(&self.shared.pending).remove(&self.id);
    }
}

impl Conn {
    /// Connect and start the reader and writer tasks (on the current tokio runtime).
    pub(crate) async fn connect(
        addr: SocketAddr,
        timeout: Duration,
        in_flight_max: usize,
        tls: Option<&ClientTls>,
    ) -> Result<Conn, Error> {
        let not_sent = |m: String| Error::Connection {
            addr: addr.to_string(),
            message: m,
            maybe_executed: false,
        };
        // TCP, then the TLS handshake if configured, both within `timeout`. A failed
        // handshake is its own error: a certificate that is not trusted stays untrusted, so
        // callers must not retry it until their deadline.
        let open = async {
            let tcp = TcpStream::connect(addr)
                .await
                .map_err(|e| not_sent(e.to_string()))?;
            tcp.set_nodelay(true).map_err(|e| not_sent(e.to_string()))?;
            match tls {
                None => Ok::<Box<dyn ConnIo>, Error>(Box::new(tcp)),
                Some(t) => t.handshake(tcp).await.map_err(|e| Error::Tls {
                    addr: addr.to_string(),
                    message: e.to_string(),
                }),
            }
        };
        let stream = match tokio::time::timeout(timeout, open).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(not_sent("connect timed out".into())),
        };
        let (rd, wr) = tokio::io::split(stream);
        let shared = Arc::new(Shared {
            addr,
            write: Mutex::new(BytesMut::with_capacity(16 * 1024)),
            pending: Mutex::new(HashMap::new()),
            writer_wake: Notify::new(),
            shutdown: Notify::new(),
            alive: AtomicBool::new(true),
            next_id: AtomicU64::new(1),
            in_flight: Arc::new(Semaphore::new(in_flight_max)),
        });
        tokio::spawn(writer(shared.clone(), wr));
        tokio::spawn(reader(shared.clone(), rd));
        Ok(Conn { shared })
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Queue one request (`encode(out, request_id)` writes its frame) and return its waiter.
    /// Waits for an in-flight permit first (back-pressure).
    pub(crate) async fn send<F>(&self, encode: F) -> Result<Pending, Error>
    where
        F: FnOnce(&mut BytesMut, u64),
    {
        let s = &self.shared;
        let permit = s
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| s.conn_error("connection closed".into(), false))?;
        if !self.is_alive() {
            return Err(s.conn_error("connection is closed".into(), false));
        }
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&s.pending).insert(id, tx);
        // Checked after the insert: `fail` sets `alive` before draining, so either the drain
        // saw our waiter or we see the connection dead here.
        if !self.is_alive() {
            lock(&s.pending).remove(&id);
            return Err(s.conn_error("connection is closed".into(), false));
        }
        encode(&mut lock(&s.write), id);
        s.writer_wake.notify_one();
        Ok(Pending {
            rx,
            id,
            shared: s.clone(),
            _permit: permit,
        })
    }
}

async fn writer(shared: Arc<Shared>, mut wr: WriteHalf<Box<dyn ConnIo>>) {
    let mut out = BytesMut::with_capacity(16 * 1024);
    // The connection's event loop: runs until the connection dies or is dropped.
    loop {
        shared.writer_wake.notified().await;
        if !shared.alive.load(Ordering::SeqCst) {
            let _ = wr.shutdown().await;
            return;
        }
        // Drain everything callers appended, one buffer swap per write.
        loop {
            std::mem::swap(&mut *lock(&shared.write), &mut out);
            if out.is_empty() {
                break;
            }
            if let Err(e) = wr.write_all(&out).await {
                shared.fail(shared.conn_error(format!("write: {e}"), true));
                return;
            }
            out.clear();
        }
        // TLS holds records until flushed (a no-op on TCP).
        if let Err(e) = wr.flush().await {
            shared.fail(shared.conn_error(format!("write: {e}"), true));
            return;
        }
    }
}

async fn reader(shared: Arc<Shared>, mut rd: ReadHalf<Box<dyn ConnIo>>) {
    let mut buf = BytesMut::with_capacity(64 * 1024);
    // The connection's event loop: runs until the connection dies or is dropped.
    loop {
        // Dispatch every complete frame.
        loop {
            match native::frame_len(&buf) {
                Ok(Some(n)) if buf.len() >= n => {
                    let frame = buf.split_to(n).freeze();
                    if let Err(e) = dispatch(&shared, frame) {
                        shared.fail(e);
                        return;
                    }
                }
                Ok(Some(n)) => {
                    // `n` was checked against FRAME_BYTES_MAX by the codec.
                    buf.reserve(n.saturating_sub(buf.len()));
                    break;
                }
                Ok(None) => {
                    buf.reserve(4096);
                    break;
                }
                Err(e) => {
                    shared.fail(Error::Protocol(e));
                    return;
                }
            }
        }
        tokio::select! {
            r = rd.read_buf(&mut buf) => match r {
                Ok(0) => {
                    shared.fail(shared.conn_error("closed by server".into(), true));
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    shared.fail(shared.conn_error(format!("read: {e}"), true));
                    return;
                }
            },
            _ = shared.shutdown.notified() => return,
        }
    }
}

fn dispatch(shared: &Shared, frame: Bytes) -> Result<(), Error> {
    let (f, _) = match native::decode_response_frame(&frame) {
        Ok(Some(x)) => x,
        Ok(None) => {
            return Err(Error::UnexpectedResponse(
                "frame shorter than its header says".into(),
            ))
        }
        Err(e) => return Err(Error::Protocol(e)),
    };
    let body = match f.body {
        ResponseBody::Empty => Body::Empty,
        ResponseBody::Value(v) => Body::Value(frame.slice_ref(v)),
        ResponseBody::Int(i) => Body::Int(i),
        ResponseBody::Message(m) => Body::Message(String::from_utf8_lossy(m).into_owned()),
        ResponseBody::Values(items) => Body::Values(
            items
                .iter()
                .map(|it| MgetEntry {
                    status: it.status,
                    version: it.version,
                    value: frame.slice_ref(it.value),
                })
                .collect(),
        ),
    };
    let resp = Response {
        status: f.status,
        epoch: f.epoch,
        version: f.version,
        body,
    };
    // An id nobody waits for belongs to a call that gave up: drop the response.
    if let Some(w) = lock(&shared.pending).remove(&f.request_id) {
        let _ = w.send(Ok(resp));
    }
    Ok(())
}
