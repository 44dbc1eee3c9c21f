//! Peer transport: one outbound TCP link per peer, frames from [`crate::wire`].
//!
//! ```text
//!  stepping thread --send(to, msg)--+-- link idle (plain TCP, nothing queued or buffered):
//!                                   |     written to the socket right here (try_write)
//!                                   +-> [bounded queue per peer] --> link task --TCP--> peer
//!                   |  full: SendOutcome::Dropped (counted)          | connect fails / breaks:
//!                   |                                               | backoff 10ms x2 .. 1s, retry
//!  listener task <--TCP-- peers: HELLO then PEER frames --> inbound callback (driver channel)
//! ```
//!
//! The direct write (session 18, issue 11): a rep:3 SET's Replicates and the replicas' acks
//! used to be queued to the link task, which tokio then had to schedule (often by waking its
//! second worker to steal it) before the frame reached the socket: one more wake-up per hop
//! of every replicated write. Now the sender writes a small frame to the socket itself when
//! the link is *idle*: connected over plain TCP, the queue empty and the task's buffer
//! flushed. Idleness is a slot the task fills (under the link's lock, only after finding the
//! queue empty and with its buffer flushed) and every queueing sender empties, so the bytes of
//! one link still come out in `send` order: a frame is either written whole before any later
//! one is queued, or (socket buffer full, partial write) its rest is queued first and the
//! link is no longer idle. TLS links and frames that would be chunked always take the queue.
//!
//! Why dropping is the right back-pressure outcome: every peer message of the replica core is
//! either retransmitted on a timer (Replicate, pull requests) or re-derived (acks answer a
//! retransmit, probes repeat), so a dropped frame costs a retransmit interval, never
//! correctness; blocking the driver instead would stall every slot of the node behind one
//! slow peer. Links carry no state across reconnects for the same reason.

use crate::wire::{self, Frame, Hello, WireError};
use parking_lot::Mutex;
use ringlet_replica::PeerMsg;
use ringlet_types::{limits, NodeId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Frames queued to one peer before new ones are dropped (raft's `Inflights` analogue).
pub const PEER_QUEUE_FRAMES_MAX: usize = limits::REPLICATION_INFLIGHT_MAX as usize;
/// Bytes queued to one peer before new frames are dropped.
pub const PEER_QUEUE_BYTES_MAX: u64 = limits::REPLICATION_INFLIGHT_BYTES_MAX;
/// First reconnect delay; doubles per failure up to [`RECONNECT_BACKOFF_MAX`].
pub const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest reconnect delay: a restarted peer is found within a second.
pub const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Inbound peer connections accepted at once (a cluster has at most NODES_MAX peers).
pub const INBOUND_LINKS_MAX: u64 = ringlet_control::map::NODES_MAX as u64;

/// What happened to one message handed to [`Transport::send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    Queued,
    /// The peer's queue is full (frames or bytes): dropped, the core will retransmit.
    Dropped,
    /// No address known for the peer (not in the map yet).
    NoRoute,
}

/// Counters (metrics `peer_*`).
#[derive(Debug, Default)]
pub struct TransportStats {
    pub frames_sent: AtomicU64,
    /// Of `frames_sent`: written by the sender straight to an idle link's socket.
    pub frames_sent_direct: AtomicU64,
    pub frames_received: AtomicU64,
    pub frames_dropped_full: AtomicU64,
    pub frames_no_route: AtomicU64,
    pub connects: AtomicU64,
    pub connect_failures: AtomicU64,
    pub bad_frames: AtomicU64,
    /// Links refused (either way) for a missing or wrong cluster-secret proof.
    pub auth_failures: AtomicU64,
}

struct Link {
    addr: SocketAddr,
    tx: mpsc::Sender<Vec<u8>>,
    queued_bytes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
    idle: Arc<IdleSlot>,
}

/// The socket of an *idle* link (module doc): `Some` only while the link task waits for its
/// queue with nothing queued or buffered, on a plain TCP connection. The lock orders a
/// sender's direct write or queueing against the task's check that the queue is empty.
type IdleSlot = Mutex<Option<Arc<TcpStream>>>;

/// The node's peer links.
pub struct Transport {
    hello: Hello,
    links: Mutex<HashMap<NodeId, Link>>,
    stats: Arc<TransportStats>,
    rt: tokio::runtime::Handle,
    /// Dropping the transport stops the listener and every inbound reader.
    stop: tokio::sync::watch::Sender<bool>,
}

/// Where inbound messages go (the driver's channel). Any `Fn(NodeId, PeerMsg)` is one.
pub trait InboundSink: Send + Sync {
    /// One message from peer `from`.
    fn deliver(&self, from: NodeId, msg: PeerMsg);
    /// `true`: the messages delivered next arrived together (whole frames already read), so
    /// what they cause may be held and sent together; `false` (always following a `true`,
    /// before the reader waits for more bytes): send it now.
    fn batch(&self, _start: bool) {}
}

impl<F: Fn(NodeId, PeerMsg) + Send + Sync> InboundSink for F {
    fn deliver(&self, from: NodeId, msg: PeerMsg) {
        self(from, msg);
    }
}

/// See [`InboundSink`].
pub type Inbound = Arc<dyn InboundSink>;

/// Whether `b` starts with a whole frame (its header and body both read already).
fn whole_frame_buffered(b: &[u8]) -> bool {
    match b.get(..4).map(wire::frame_len) {
        Some(Ok(Some(total))) => b.len() >= total,
        _ => false,
    }
}

/// Ends an inbound batch ([`InboundSink::batch`]) when the reader stops for any reason.
struct BatchGuard<'a> {
    sink: &'a Inbound,
    on: bool,
}

impl BatchGuard<'_> {
    fn set(&mut self, on: bool) {
        if self.on != on {
            self.on = on;
            self.sink.batch(on);
        }
    }
}

impl Drop for BatchGuard<'_> {
    fn drop(&mut self) {
        self.set(false);
    }
}

impl Transport {
    /// Bind `addr` for inbound peer links and return the transport and the bound address.
    ///
    /// # Errors
    /// The bind error.
    pub async fn bind(
        addr: SocketAddr,
        me: NodeId,
        incarnation: u64,
        inbound: Inbound,
    ) -> std::io::Result<(Arc<Transport>, SocketAddr)> {
        let listener = crate::listen(addr)?;
        let local = listener.local_addr()?;
        let t = Arc::new(Transport {
            hello: Hello {
                from: me,
                incarnation,
            },
            links: Mutex::new(HashMap::new()),
            stats: Arc::new(TransportStats::default()),
            rt: tokio::runtime::Handle::current(),
            stop: tokio::sync::watch::channel(false).0,
        });
        let stats = t.stats.clone();
        tokio::spawn(accept_loop(listener, inbound, stats, t.stop.subscribe()));
        Ok((t, local))
    }

    pub fn stats(&self) -> &Arc<TransportStats> {
        &self.stats
    }

    /// Make the set of links match `peers` (from the cluster map): new peers get a link, a
    /// changed address replaces it, peers no longer listed are closed.
    pub fn set_peers(&self, peers: &[(NodeId, SocketAddr)]) {
        let mut links = self.links.lock();
        links.retain(|id, l| {
            let keep = peers.iter().any(|(p, a)| p == id && *a == l.addr);
            if !keep {
                l.task.abort();
            }
            keep
        });
        for (id, addr) in peers {
            if *id == self.hello.from || links.contains_key(id) {
                continue;
            }
            let (tx, rx) = mpsc::channel(PEER_QUEUE_FRAMES_MAX);
            let queued_bytes = Arc::new(AtomicU64::new(0));
            let idle = Arc::new(IdleSlot::new(None));
            let task = self.rt.spawn(link_loop(
                *addr,
                self.hello,
                rx,
                queued_bytes.clone(),
                self.stats.clone(),
                idle.clone(),
            ));
            links.insert(
                *id,
                Link {
                    addr: *addr,
                    tx,
                    queued_bytes,
                    task,
                    idle,
                },
            );
        }
    }

    /// Send `msg` to `to`: written to the socket now if the link is idle and the frame small,
    /// queued for the link task otherwise. Never blocks.
    pub fn send(&self, to: NodeId, msg: &PeerMsg) -> SendOutcome {
        self.send_frames(to, wire::encode_peer(msg), 1)
    }

    /// Send `msgs` to `to`, in order, in as few writes as possible: consecutive frames are
    /// concatenated up to one chunk's size and each concatenation goes as [`Transport::send`]
    /// sends one frame (the link task writes a buffer of that size verbatim, so whole frames
    /// in it reach the peer as they were). A pipelined load's replication messages to one
    /// peer then cost one system call per batch instead of one each (node.rs, "cork").
    pub fn send_batch<'a>(&self, to: NodeId, msgs: impl IntoIterator<Item = &'a PeerMsg>) {
        let max = 4 + limits::PEER_CHUNK_BYTES as usize;
        let mut buf = Vec::new();
        let mut frames = 0;
        for m in msgs {
            let f = wire::encode_peer(m);
            if !buf.is_empty() && buf.len() + f.len() > max {
                self.send_frames(to, std::mem::take(&mut buf), frames);
                frames = 0;
            }
            if f.len() > max {
                self.send_frames(to, f, 1); // chunked by the link task
                continue;
            }
            buf.extend_from_slice(&f);
            frames += 1;
        }
        if !buf.is_empty() {
            self.send_frames(to, buf, frames);
        }
    }

    /// [`Transport::send`] of `frames` whole encoded frames in `frame` (several only when
    /// they fit one chunk together).
    fn send_frames(&self, to: NodeId, mut frame: Vec<u8>, frames: u64) -> SendOutcome {
        let links = self.links.lock();
        let Some(l) = links.get(&to) else {
            self.stats
                .frames_no_route
                .fetch_add(frames, Ordering::Relaxed);
            return SendOutcome::NoRoute;
        };
        let mut idle = l.idle.lock();
        if let Some(sock) = idle.as_ref() {
            if frame.len() <= 4 + limits::PEER_CHUNK_BYTES as usize {
                match write_now(sock, &frame) {
                    Ok(n) if n == frame.len() => {
                        self.stats.frames_sent.fetch_add(frames, Ordering::Relaxed);
                        self.stats
                            .frames_sent_direct
                            .fetch_add(frames, Ordering::Relaxed);
                        return SendOutcome::Queued;
                    }
                    // The socket's buffer is full: the rest goes first in the queue (the
                    // task writes small frames verbatim), before anything sent after it.
                    // It cannot be dropped below: an idle link's queue is empty (0 frames,
                    // 0 bytes) and the rest is under one chunk, far below both bounds.
                    Ok(n) => {
                        frame.drain(..n);
                    }
                    // A broken connection: queue the frame, which wakes the task; its write
                    // fails too and it reconnects (the frame is lost, as any frame in flight
                    // on a broken link: the core retransmits). Nothing of it was written
                    // (`write_now` reports an error only before the first byte).
                    Err(_) => {}
                }
            }
            // Not idle any more: this frame (or its rest) is queued, so later ones must
            // queue behind it. The task finds the link idle again once it drained the queue.
            *idle = None;
        }
        let n = frame.len() as u64;
        if l.queued_bytes.load(Ordering::Relaxed).saturating_add(n) > PEER_QUEUE_BYTES_MAX {
            self.stats
                .frames_dropped_full
                .fetch_add(frames, Ordering::Relaxed);
            return SendOutcome::Dropped;
        }
        match l.tx.try_send(frame) {
            Ok(()) => {
                l.queued_bytes.fetch_add(n, Ordering::Relaxed);
                // The task counts one frame per buffer it writes.
                self.stats
                    .frames_sent
                    .fetch_add(frames.saturating_sub(1), Ordering::Relaxed);
                SendOutcome::Queued
            }
            Err(_) => {
                self.stats
                    .frames_dropped_full
                    .fetch_add(frames, Ordering::Relaxed);
                SendOutcome::Dropped
            }
        }
    }
}

/// Write as much of `frame` as the socket takes now, without waiting: the bytes written, or
/// the error if the first write failed (an error after some bytes went out ends the loop
/// with what was written; the task's next write on the broken connection reports it).
fn write_now(sock: &TcpStream, frame: &[u8]) -> std::io::Result<usize> {
    let mut done = 0;
    // Bounded: every pass writes at least one byte or stops.
    while done < frame.len() {
        match sock.try_write(frame.get(done..).unwrap_or_default()) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) if done > 0 => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A plain TCP stream shared between the link task (reads and writes through this, with
/// tokio's readiness) and senders writing directly while the link is idle.
struct SharedTcp(Arc<TcpStream>);

impl AsyncWrite for SharedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        // tokio's documented pairing: wait for readiness, try; WouldBlock clears the
        // readiness, so the next poll registers the waker. Each pass either returns or
        // observed a readiness that the failed try then cleared.
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(())) // TCP has no user-space buffer here
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(())) // the socket closes when its last holder drops it
    }
}

impl AsyncRead for SharedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            match self.0.try_read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// Connect a link: plain TCP shared with direct senders when the process has no link TLS,
/// [`crate::tls::link_connect`] (TLS, never written directly) otherwise.
async fn connect_link(
    addr: SocketAddr,
) -> std::io::Result<(crate::tls::LinkStream, Option<Arc<TcpStream>>)> {
    if crate::tls::link_tls_enabled() {
        return Ok((crate::tls::link_connect(&addr.to_string()).await?, None));
    }
    let tcp = TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    let tcp = Arc::new(tcp);
    Ok((Box::new(SharedTcp(tcp.clone())), Some(tcp)))
}

impl Drop for Transport {
    fn drop(&mut self) {
        for (_, l) in self.links.lock().drain() {
            l.task.abort();
        }
        let _ = self.stop.send(true);
    }
}

async fn link_loop(
    addr: SocketAddr,
    hello: Hello,
    mut rx: mpsc::Receiver<Vec<u8>>,
    queued: Arc<AtomicU64>,
    stats: Arc<TransportStats>,
    idle: Arc<IdleSlot>,
) {
    let mut backoff = RECONNECT_BACKOFF_MIN;
    loop {
        // TCP, and TLS over it when the process has link TLS (tls::set_link_tls).
        let (stream, plain) = match connect_link(addr).await {
            Ok(s) => s,
            Err(_) => {
                stats.connect_failures.fetch_add(1, Ordering::Relaxed);
                // While the peer is unreachable, what is queued is stale: drop it so the
                // queue bound applies to fresh traffic (the core retransmits what matters).
                while let Ok(f) = rx.try_recv() {
                    queued.fetch_sub(f.len() as u64, Ordering::Relaxed);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
                continue;
            }
        };
        let mut stream = stream;
        if let Some(secret) = crate::auth::process_secret() {
            let me = hello.from.0.to_string();
            if let Err(e) =
                crate::auth::connect(&mut stream, secret, crate::auth::PEER_ROLE, me.as_bytes())
                    .await
            {
                stats.auth_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    "ringlet node {}: peer link to {addr} refused: {e}",
                    hello.from
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
                continue;
            }
        }
        stats.connects.fetch_add(1, Ordering::Relaxed);
        backoff = RECONNECT_BACKOFF_MIN;
        let mut w = BufWriter::with_capacity(64 * 1024, stream);
        // Flushed at once: the link may turn idle before the first frame, and a direct write
        // must find HELLO on the wire, not in the buffer.
        if w.write_all(&wire::encode_hello(&hello)).await.is_err() || w.flush().await.is_err() {
            continue;
        }
        let gone = write_frames(&mut w, &mut rx, &queued, &stats, &idle, plain.as_ref())
            .await
            .is_none();
        // Not idle while (re)connecting; a sender that found it idle just before wrote to
        // the old socket, which is broken anyway.
        *idle.lock() = None;
        if gone {
            return; // transport dropped
        }
        // The connection broke: reconnect; what was in the writer is lost (retransmitted).
    }
}

/// Write queued frames to one connection until it breaks (`Some`) or the transport is
/// dropped (`None`). A frame above [`limits::PEER_CHUNK_BYTES`] goes out one chunk at a time,
/// and every small frame queued meanwhile is written between two chunks: a 64 MiB Replicate
/// no longer holds up the acks and small writes behind it for the whole transfer. Large frames
/// wait their turn in arrival order (at most the queue's frames and bytes bounds: they are
/// counted in `queued` until their last chunk is written).
///
/// With `plain` (a plain TCP connection), the link is marked idle (module doc) whenever the
/// queue is empty, nothing is being chunked and the writer is flushed.
async fn write_frames<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut BufWriter<W>,
    rx: &mut mpsc::Receiver<Vec<u8>>,
    queued: &AtomicU64,
    stats: &TransportStats,
    idle: &IdleSlot,
    plain: Option<&Arc<TcpStream>>,
) -> Option<()> {
    // Large frames being chunked: (frame, body bytes already sent).
    let mut large: std::collections::VecDeque<(Vec<u8>, usize)> = Default::default();
    loop {
        if large.is_empty() {
            // Every earlier iteration ended with a flush (and HELLO was flushed): nothing
            // of ours is buffered. Under the lock, so no sender queues between the check
            // and the mark.
            let next = {
                let mut slot = idle.lock();
                match rx.try_recv() {
                    Ok(f) => Some(f),
                    Err(_) => {
                        *slot = plain.cloned();
                        None
                    }
                }
            };
            let f = match next {
                Some(f) => f,
                // Woken by a sender that queued, which cleared the slot first.
                None => rx.recv().await?,
            };
            if write_or_defer(w, f, &mut large, queued, stats)
                .await
                .is_err()
            {
                return Some(());
            }
        }
        // Batch whatever else is queued into the same flush (small frames first).
        while let Ok(f) = rx.try_recv() {
            if write_or_defer(w, f, &mut large, queued, stats)
                .await
                .is_err()
            {
                return Some(());
            }
        }
        if let Some((f, sent)) = large.front_mut() {
            let body = f.get(4..).unwrap_or_default();
            let n = (body.len() - *sent).min(limits::PEER_CHUNK_BYTES as usize);
            let more = *sent + n < body.len();
            let piece = body.get(*sent..*sent + n).unwrap_or_default();
            let header = wire::chunk_header(piece.len(), more);
            if w.write_all(&header).await.is_err() || w.write_all(piece).await.is_err() {
                return Some(());
            }
            *sent += n;
            if !more {
                let len = f.len() as u64;
                large.pop_front();
                queued.fetch_sub(len, Ordering::Relaxed);
                stats.frames_sent.fetch_add(1, Ordering::Relaxed);
            }
        }
        if w.flush().await.is_err() {
            return Some(());
        }
    }
}

/// Write a small frame now; queue a large one for chunking.
async fn write_or_defer<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut BufWriter<W>,
    f: Vec<u8>,
    large: &mut std::collections::VecDeque<(Vec<u8>, usize)>,
    queued: &AtomicU64,
    stats: &TransportStats,
) -> std::io::Result<()> {
    if f.len() > 4 + limits::PEER_CHUNK_BYTES as usize {
        large.push_back((f, 0));
        return Ok(());
    }
    queued.fetch_sub(f.len() as u64, Ordering::Relaxed);
    w.write_all(&f).await?;
    stats.frames_sent.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

async fn accept_loop(
    listener: TcpListener,
    inbound: Inbound,
    stats: Arc<TransportStats>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let open = Arc::new(AtomicU64::new(0));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if open.load(Ordering::Relaxed) >= INBOUND_LINKS_MAX {
            continue; // dropped: closes the socket
        }
        open.fetch_add(1, Ordering::Relaxed);
        let inbound = inbound.clone();
        let stats = stats.clone();
        let open = open.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = read_link(stream, &inbound, &stats) => {
                    if r.is_err() {
                        stats.bad_frames.fetch_add(1, Ordering::Relaxed);
                    }
                }
                _ = stop.changed() => {}
            }
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

/// Why an inbound link closed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("wire: {0}")]
    Wire(#[from] WireError),
    #[error("first frame was not HELLO")]
    NoHello,
    #[error("cluster secret: {0}")]
    Auth(#[from] crate::auth::AuthError),
    #[error("HELLO names node {hello}, the proof was for {proven}")]
    WrongIdentity { hello: String, proven: String },
}

async fn read_frame(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> Result<Option<Frame>, LinkError> {
    let mut h = [0u8; 4];
    match stream.read_exact(&mut h).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // Checked against the limit before the body buffer grows.
    let Some(total) = wire::frame_len(&h)? else {
        return Ok(None);
    };
    let body = total - 4;
    // The buffer grows with the bytes that arrive, not with the declared length: four bytes
    // declaring 72 MB used to commit 72 MB per connection before any of it came (issue 10,
    // case 2), and zero-filling 64 MiB per large frame was most of a replica's CPU.
    if buf.capacity() > FRAME_BUFFER_KEEP_BYTES {
        *buf = Vec::new(); // one large frame does not pin its buffer for the link's life
    }
    buf.clear();
    buf.reserve(body.min(FRAME_BUFFER_KEEP_BYTES));
    let got = (&mut *stream).take(body as u64).read_to_end(buf).await?;
    if got != body {
        return Ok(None); // EOF inside a frame: the link is gone
    }
    Ok(Some(wire::decode_body(buf)?))
}

/// Buffer capacity a peer link keeps between frames (larger ones are freed after use).
const FRAME_BUFFER_KEEP_BYTES: usize = 1 << 20;
/// Read buffer of an inbound peer link (the write side batches into 64 KiB too).
const LINK_READ_BUFFER_BYTES: usize = 64 * 1024;

async fn read_link(
    stream: TcpStream,
    inbound: &Inbound,
    stats: &TransportStats,
) -> Result<(), LinkError> {
    // With link TLS, a connector without a certificate from the cluster's CA fails here.
    let mut stream = crate::tls::link_accept(stream).await.inspect_err(|_| {
        stats.auth_failures.fetch_add(1, Ordering::Relaxed);
    })?;
    // Members only: the connector proves the cluster secret for the node id it then claims
    // in HELLO (a forged HELLO used to be trusted as is).
    let proven = match crate::auth::process_secret() {
        Some(secret) => {
            match crate::auth::accept(&mut stream, secret, crate::auth::PEER_ROLE).await {
                Ok(id) => Some(String::from_utf8_lossy(&id).into_owned()),
                Err(e) => {
                    stats.auth_failures.fetch_add(1, Ordering::Relaxed);
                    return Err(e.into());
                }
            }
        }
        None => None,
    };
    // Buffered from here on (after the handshake, so no handshake byte is held back): a
    // frame's header and body, and the frames that arrived with it, come in one read
    // syscall instead of two or more per frame.
    let mut stream = tokio::io::BufReader::with_capacity(LINK_READ_BUFFER_BYTES, stream);
    let mut buf = Vec::new();
    let from = match read_frame(&mut stream, &mut buf).await? {
        Some(Frame::Hello(h)) => h.from,
        None => return Ok(()),
        Some(_) => return Err(LinkError::NoHello),
    };
    if let Some(p) = proven {
        if p != from.0.to_string() {
            stats.auth_failures.fetch_add(1, Ordering::Relaxed);
            return Err(LinkError::WrongIdentity {
                hello: from.0.to_string(),
                proven: p,
            });
        }
    }
    let mut assembly = wire::Assembly::default();
    // Frames that arrived in one read are delivered as a batch, so the acks they cause leave
    // in one write per peer (node.rs, "cork"); the batch ends before the reader can wait.
    let mut batch = BatchGuard {
        sink: inbound,
        on: false,
    };
    loop {
        let more = whole_frame_buffered(stream.buffer());
        batch.set(more);
        let Some(frame) = read_frame(&mut stream, &mut buf).await? else {
            return Ok(()); // EOF (an unfinished chunked frame is dropped with the link)
        };
        let frame = match frame {
            Frame::Chunk { more, piece } => assembly.push(more, &piece)?,
            f => Some(f),
        };
        match frame {
            Some(Frame::Peer(m)) => {
                stats.frames_received.fetch_add(1, Ordering::Relaxed);
                inbound.deliver(from, m);
            }
            Some(Frame::Hello(_)) => return Err(LinkError::NoHello),
            // A piece (the frame is not whole yet); Assembly never returns a Chunk.
            Some(Frame::Chunk { .. }) | None => {}
        }
        // A very large frame leaves a large buffer behind: give it back.
        if buf.capacity() > 1 << 20 {
            buf = Vec::new();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ringlet_replica::PeerBody;
    use ringlet_types::{Epoch, Version};

    fn msg(i: u64) -> PeerMsg {
        PeerMsg {
            epoch: Epoch(i),
            incarnation: 1,
            body: PeerBody::Retire {
                key: b"k".to_vec(),
                version: Version(u128::from(i)),
            },
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn delivers_in_order_and_reconnects() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let inbound: Inbound = Arc::new(move |from, m| {
            let _ = tx.send((from, m));
        });
        let (b, b_addr) = Transport::bind(
            "127.0.0.1:0".parse().unwrap(),
            NodeId(2),
            1,
            inbound.clone(),
        )
        .await
        .unwrap();
        let noop: Inbound = Arc::new(|_, _| {});
        let (a, _) = Transport::bind("127.0.0.1:0".parse().unwrap(), NodeId(1), 1, noop)
            .await
            .unwrap();
        assert_eq!(a.send(NodeId(2), &msg(0)), SendOutcome::NoRoute);
        a.set_peers(&[(NodeId(2), b_addr)]);
        for i in 1..=100 {
            assert_eq!(a.send(NodeId(2), &msg(i)), SendOutcome::Queued);
        }
        for i in 1..=100 {
            let (from, m) = rx.recv().await.unwrap();
            assert_eq!(from, NodeId(1));
            assert_eq!(m, msg(i));
        }
        // Peer goes away and comes back on the same port: the link reconnects by itself.
        drop(b);
        let (tx2, mut rx2) = mpsc::unbounded_channel();
        let inbound2: Inbound = Arc::new(move |from, m| {
            let _ = tx2.send((from, m));
        });
        let _b2 = loop {
            // The old listener task may still hold the port for a moment.
            match Transport::bind(b_addr, NodeId(2), 2, inbound2.clone()).await {
                Ok(t) => break t,
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        // Keep sending until one arrives (frames sent into the dying link are lost: allowed).
        let got = loop {
            a.send(NodeId(2), &msg(7));
            match tokio::time::timeout(Duration::from_millis(50), rx2.recv()).await {
                Ok(Some(x)) => break x,
                _ => continue,
            }
        };
        assert_eq!(got.1, msg(7));
    }

    /// current_thread: the link task cannot run between the sends below (no await), so the
    /// queue fills deterministically.
    #[tokio::test]
    async fn full_queue_drops_explicitly() {
        let noop: Inbound = Arc::new(|_, _| {});
        let (a, _) = Transport::bind("127.0.0.1:0".parse().unwrap(), NodeId(1), 1, noop)
            .await
            .unwrap();
        // A peer address that accepts nothing: bind then drop to get a closed port.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        a.set_peers(&[(NodeId(9), closed)]);
        let mut dropped = 0;
        for i in 0..(PEER_QUEUE_FRAMES_MAX as u64 * 2) {
            if a.send(NodeId(9), &msg(i)) == SendOutcome::Dropped {
                dropped += 1;
            }
        }
        assert_eq!(dropped, PEER_QUEUE_FRAMES_MAX as u64);
        assert_eq!(
            a.stats().frames_dropped_full.load(Ordering::Relaxed),
            dropped
        );
    }

    /// Node 1's transport linked to node 2's, whose inbound frames arrive on the receiver
    /// (node 2's transport is returned to keep it alive).
    async fn linked_pair() -> (
        Arc<Transport>,
        Arc<Transport>,
        mpsc::UnboundedReceiver<PeerMsg>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let inbound: Inbound = Arc::new(move |_, m| {
            let _ = tx.send(m);
        });
        let (b, b_addr) = Transport::bind("127.0.0.1:0".parse().unwrap(), NodeId(2), 1, inbound)
            .await
            .unwrap();
        let noop: Inbound = Arc::new(|_, _| {});
        let (a, _) = Transport::bind("127.0.0.1:0".parse().unwrap(), NodeId(1), 1, noop)
            .await
            .unwrap();
        a.set_peers(&[(NodeId(2), b_addr)]);
        (a, b, rx)
    }

    /// A frame larger than a chunk does not hold up the small frames queued behind it: they
    /// are written between its chunks. current_thread: every send below is queued before the
    /// link task first runs, so the order on the wire is deterministic.
    #[tokio::test]
    async fn small_frames_pass_a_large_one() {
        let (a, _b, mut rx) = linked_pair().await;
        // Bytes that vary along the value: a chunk out of place would not compare equal.
        let big = replicate(1 << 20, 16 << 20);
        assert_eq!(a.send(NodeId(2), &big), SendOutcome::Queued);
        for i in 1..=100 {
            assert_eq!(a.send(NodeId(2), &msg(i)), SendOutcome::Queued);
        }
        let mut got = Vec::new();
        while got.len() < 101 {
            got.push(rx.recv().await.unwrap());
        }
        // Every small frame arrived, in order, before the large one was whole; then the large
        // one arrived intact.
        assert_eq!(got[..100], (1..=100).map(msg).collect::<Vec<_>>()[..]);
        assert_eq!(got[100], big);
        assert_eq!(a.stats().frames_sent.load(Ordering::Relaxed), 101);
    }

    fn replicate(i: u64, len: usize) -> PeerMsg {
        PeerMsg {
            epoch: Epoch(i),
            incarnation: 1,
            body: PeerBody::Replicate {
                key: i.to_be_bytes().to_vec(),
                entry: ringlet_replica::Entry {
                    version: Version(u128::from(i)),
                    memgest: ringlet_types::MemgestId(0),
                    value: Some((0..len as u64).map(|j| ((i + j) % 251) as u8).collect()),
                    expiry_ms: None,
                    kind: ringlet_types::ValueKind::String,
                },
            },
        }
    }

    /// Frames sent from a thread outside the runtime (as the driver thread does) while the
    /// link flips between idle (direct writes) and busy (queued), with values large enough
    /// to fill the socket's buffer (partial direct writes whose rest is queued), arrive whole
    /// and in send order, and some were written directly.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn direct_and_queued_frames_keep_order() {
        let (a, _b, mut rx) = linked_pair().await;
        // Wait until the link is up and idle (the first direct write proves it).
        let mut i = 0u64;
        loop {
            i += 1;
            a.send(NodeId(2), &replicate(i, 10));
            assert_eq!(rx.recv().await.unwrap(), replicate(i, 10));
            if a.stats().frames_sent_direct.load(Ordering::Relaxed) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let first = i + 1;
        // Small and large (< one chunk, 200 KiB) values mixed; the queue holds 4,096 frames,
        // so pace the sender by what arrived.
        let sizes = |j: u64| if j.is_multiple_of(7) { 200 * 1024 } else { 100 };
        let sender = {
            let a = a.clone();
            std::thread::spawn(move || {
                for j in first..first + 3_000 {
                    while a.send(NodeId(2), &replicate(j, sizes(j))) == SendOutcome::Dropped {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    if j.is_multiple_of(500) {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            })
        };
        for j in first..first + 3_000 {
            let m = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(m, replicate(j, sizes(j)), "frame {j}");
        }
        sender.join().unwrap();
        assert!(a.stats().frames_sent_direct.load(Ordering::Relaxed) > 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn garbage_closes_only_that_link() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let inbound: Inbound = Arc::new(move |from, m| {
            let _ = tx.send((from, m));
        });
        let (b, b_addr) = Transport::bind("127.0.0.1:0".parse().unwrap(), NodeId(2), 1, inbound)
            .await
            .unwrap();
        let mut s = TcpStream::connect(b_addr).await.unwrap();
        s.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3])
            .await
            .unwrap();
        let mut one = [0u8; 1];
        // The server closes the connection: read returns 0 (or a reset).
        let n = s.read(&mut one).await.unwrap_or(0);
        assert_eq!(n, 0);
        // A good link still works.
        let noop: Inbound = Arc::new(|_, _| {});
        let (a, _) = Transport::bind("127.0.0.1:0".parse().unwrap(), NodeId(1), 1, noop)
            .await
            .unwrap();
        a.set_peers(&[(NodeId(2), b_addr)]);
        a.send(NodeId(2), &msg(1));
        assert_eq!(rx.recv().await.unwrap().1, msg(1));
        assert!(b.stats().bad_frames.load(Ordering::Relaxed) >= 1);
    }
}
