//! The io_uring worker loop (`ringlet server --io uring`, Linux): one ring per worker thread
//! instead of a tokio runtime, so a loop iteration costs one `io_uring_enter` for all its
//! connections instead of a `read` and a `write` per connection plus an `epoll_wait`.
//!
//! ```text
//! worker thread k: one IoUring (single issuer, deferred task work) + one provided-buffer ring
//!   multishot accept on this worker's dup of the listener
//!   per connection: one multishot recv (buffers picked by the kernel from the buffer ring)
//!   loop (bounded wait: shutdown and the engine tick are checked at least every 100 ms):
//!     io_uring_enter: submit every send queued by the last iteration, wait for >= 1 completion
//!     for each completion:
//!       accept -> register (conn::open_session), arm its multishot recv
//!       recv   -> data straight from the provided buffer into the connection's processor
//!                 (conn::RespProcessor or native::process: the epoll loop's code), buffer
//!                 handed back at once; only an unfinished request is copied (to rbuf)
//!       send   -> advance; short send: the rest is sent next iteration
//!     for each connection touched: one send of everything it produced (one in flight per
//!       connection: the next batch is encoded while the previous is being sent)
//! ```
//!
//! Bounds, as the epoll loop's: unparsed input `limits::CONN_READ_BUFFER_BYTES_MAX` (then
//! the same error and close); replies stop being produced once `WRITE_FLUSH_BYTES` are
//! queued besides the send in flight, and the connection's multishot recv is cancelled until
//! they drain (a client that pipelines without reading is back-pressured by TCP, as with
//! epoll, instead of growing our memory); per worker [`BUF_COUNT`] × [`BUF_SIZE`] bytes of
//! receive buffers; connections `limits::CONNECTIONS_MAX` (shared count). Malformed input
//! closes its own connection only (the processors decide; this loop just closes).
//!
//! Why one send in flight per connection: replies must leave in order, and a second send
//! queued behind a short first one could interleave. The cost is nothing at pipeline 1 (one
//! reply per round trip) and one iteration of latency for a pipelining client.

use crate::cmd::Session;
use crate::conn::{self, Progress, RespProcessor};
use crate::native;
use crate::shared::{now_ms, Shared, Stats};
use bytes::{Buf, BytesMut};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use ringlet_engine::Reader;
use ringlet_types::limits;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Ring and provided-buffer sizes: `ringlet_types::limits` (`URING_*`), where they are
/// explained.
const RING_ENTRIES: u32 = ringlet_types::limits::URING_RING_ENTRIES;
const BUF_COUNT: u16 = ringlet_types::limits::URING_RECV_BUFFERS;
const BUF_SIZE: usize = ringlet_types::limits::URING_RECV_BUFFER_BYTES;
/// Buffer group id of the provided-buffer ring (one group per ring).
const BGID: u16 = 0;

/// Longest wait for completions: shutdown and worker 0's engine tick are checked at least
/// this often.
const WAIT_MAX: Duration = Duration::from_millis(100);

/// Longest wait right after sends were submitted, for completions beyond the sends'. A send
/// to a socket with room completes inside the submitting `io_uring_enter`, so waiting for
/// `sends + 1` completions lets one enter both submit the replies and wait for the next
/// requests (instead of returning at once with the sends' completions and entering again to
/// wait). If a send could not complete at once, that count may include it and a completion
/// nobody sends: this bound turns that into a short wait, not a stall.
const WAIT_AFTER_SENDS: Duration = Duration::from_millis(1);

/// Replies queued past this stop the processing of input (as `conn::WRITE_FLUSH_BYTES`).
const WRITE_FLUSH_BYTES: usize = conn::WRITE_FLUSH_BYTES;

// user_data: kind (8 bits) | generation (24 bits) | connection slot (32 bits). The
// generation makes a completion of a closed connection's last operation harmless if its
// slot was reused.
const K_ACCEPT: u64 = 1;
const K_RECV: u64 = 2;
const K_SEND: u64 = 3;
const K_CANCEL: u64 = 4;

fn ud(kind: u64, gen: u32, slot: u32) -> u64 {
    kind << 56 | u64::from(gen & 0x00ff_ffff) << 32 | u64::from(slot)
}

fn ud_parts(u: u64) -> (u64, u32, u32) {
    (u >> 56, ((u >> 32) & 0x00ff_ffff) as u32, u as u32)
}

/// Why the io_uring loop cannot run here (the server refuses `--io uring` with it).
#[derive(Debug, thiserror::Error)]
#[error("io_uring unavailable: {what}: {source} (run with --io epoll)")]
pub struct SetupError {
    what: &'static str,
    source: io::Error,
}

fn setup_err(what: &'static str) -> impl FnOnce(io::Error) -> SetupError {
    move |source| SetupError { what, source }
}

/// Build a worker's ring: single issuer with deferred task work (completions are run in our
/// `io_uring_enter`, not by interrupting the thread), or a plain ring on a kernel without
/// those flags.
fn build_ring() -> Result<IoUring, SetupError> {
    IoUring::builder()
        .setup_cqsize(RING_ENTRIES * 4)
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(RING_ENTRIES)
        .or_else(|_| {
            IoUring::builder()
                .setup_cqsize(RING_ENTRIES * 4)
                .build(RING_ENTRIES)
        })
        .map_err(setup_err("io_uring_setup"))
}

/// Check once at start that a ring and a provided-buffer ring can be set up (io_uring
/// disabled by sysctl or seccomp, kernel < 5.19, locked-memory limits).
///
/// On a thread of its own: tearing a ring down can queue task work to the thread that
/// created it, which interrupts that thread's blocking socket calls that have a timeout
/// (`SO_RCVTIMEO` turns the restart into `EINTR`). The caller's thread (an embedding
/// application's, a test's) must not see that.
pub fn probe() -> Result<(), SetupError> {
    let t = std::thread::Builder::new()
        .name("ringlet-uring-probe".into())
        .spawn(|| {
            let ring = build_ring()?;
            let bufs = BufRing::new(&ring)?;
            drop(ring);
            drop(bufs);
            Ok(())
        })
        .map_err(setup_err("probe thread"))?;
    t.join().unwrap_or_else(|_| {
        Err(SetupError {
            what: "probe thread",
            source: io::Error::other("panicked"),
        })
    })
}

/// The provided-buffer ring: `BUF_COUNT` entries the kernel picks receive buffers from,
/// and the buffers themselves. Registered with one ring; must outlive it (the loop drops the
/// ring first).
struct BufRing {
    /// Page-aligned `BUF_COUNT` × 16-byte `io_uring_buf` entries (mmap'd).
    entries: *mut types::BufRingEntry,
    map_len: usize,
    /// Never resized: the addresses published in `entries` stay valid.
    data: Box<[u8]>,
    /// Our producer index (the kernel reads the shared tail).
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring) -> Result<BufRing, SetupError> {
        let map_len = usize::from(BUF_COUNT) * std::mem::size_of::<types::BufRingEntry>();
        // SAFETY: an anonymous private mapping; checked for failure below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(SetupError {
                what: "buffer ring mmap",
                source: io::Error::last_os_error(),
            });
        }
        let mut b = BufRing {
            entries: p.cast(),
            map_len,
            data: vec![0u8; usize::from(BUF_COUNT) * BUF_SIZE].into_boxed_slice(),
            tail: 0,
        };
        // SAFETY: `entries` is page-aligned, `BUF_COUNT` entries long, and lives (in `b`)
        // until after the ring is dropped; every buffer it publishes is in `data`.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(b.entries as u64, BUF_COUNT, BGID, 0)
                .map_err(setup_err("register provided-buffer ring"))?;
        }
        for bid in 0..BUF_COUNT {
            b.give_back(bid);
        }
        Ok(b)
    }

    /// The `len` bytes the kernel wrote into buffer `bid`.
    fn slice(&self, bid: u16, len: usize) -> &[u8] {
        let start = usize::from(bid) * BUF_SIZE;
        &self.data[start..start + len.min(BUF_SIZE)]
    }

    /// Hand buffer `bid` back to the kernel.
    fn give_back(&mut self, bid: u16) {
        if bid >= BUF_COUNT {
            return;
        }
        let idx = usize::from(self.tail & (BUF_COUNT - 1));
        let addr = self.data.as_ptr() as u64 + (usize::from(bid) * BUF_SIZE) as u64;
        // SAFETY: idx < BUF_COUNT; the kernel reads entries only below the published tail,
        // and this one is past it until the store below.
        unsafe {
            let e = &mut *self.entries.add(idx);
            e.set_addr(addr);
            e.set_len(BUF_SIZE as u32);
            e.set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is a u16 inside the mapping's first entry, read by the kernel.
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: our mapping; the ring it was registered with is gone (dropped first).
        unsafe {
            libc::munmap(self.entries.cast(), self.map_len);
        }
    }
}

/// The protocol a connection speaks, told by its first byte (as in `conn::serve`).
enum Wire {
    Unknown,
    Resp(Box<RespProcessor>),
    Native(Vec<u8>),
}

struct Conn {
    fd: RawFd,
    gen: u32,
    _reg: conn::Registration,
    session: Session,
    wire: Wire,
    /// Received bytes not yet consumed (an unfinished request, or input held back while the
    /// replies drain).
    rbuf: BytesMut,
    /// Replies being produced.
    wbuf: BytesMut,
    /// Replies being sent (`out[sent..]` is in flight or still to send); not touched while a
    /// send is in flight (the kernel reads it).
    out: BytesMut,
    sent: usize,
    send_inflight: bool,
    recv_armed: bool,
    cancel_sent: bool,
    /// The peer closed its side: finish what was received, then close.
    eof: bool,
    /// No more input is processed; close once the replies are out.
    closing: bool,
    /// Already in the loop's list of connections to settle.
    dirty: bool,
}

impl Conn {
    /// Replies are not produced past the bound until the queued ones are handed to a send.
    fn blocked(&self) -> bool {
        self.wbuf.len() >= WRITE_FLUSH_BYTES
    }
}

struct Loop {
    // Field order is drop order: the ring (and with it every operation referencing buffers)
    // goes before the buffer ring and the connections' buffers.
    ring: IoUring,
    bufs: BufRing,
    conns: Vec<Option<Conn>>,
    free: Vec<u32>,
    next_gen: u32,
    dirty: Vec<u32>,
    /// Sends queued since the last `io_uring_enter` (see [`WAIT_AFTER_SENDS`]).
    sends_queued: u32,
    cqes: Vec<(u64, i32, u32)>,
    listener: StdListener,
    accept_armed: bool,
    accept_retry_at: Option<Instant>,
    shared: Arc<Shared>,
    reader: Reader,
    now: u64,
}

/// Run worker `idx`'s io_uring loop until `shutdown` turns true. Worker 0 also runs the
/// engine tick (the epoll loop's `ticker`).
pub fn worker_main(
    idx: usize,
    listener: StdListener,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) {
    let ring = match build_ring() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(worker = idx, error = %e, "cannot start the io_uring worker");
            return;
        }
    };
    let bufs = match BufRing::new(&ring) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(worker = idx, error = %e, "cannot start the io_uring worker");
            return;
        }
    };
    // The ring waits for connections itself (poll-armed inside the kernel); a non-blocking
    // listener (the epoll loop's setting, shared by every worker's dup) is not needed and
    // would let the kernel hand `EAGAIN` back instead of waiting on some kernels.
    let _ = listener.set_nonblocking(false);
    let reader = shared.db.reader();
    let mut lp = Loop {
        ring,
        bufs,
        conns: Vec::new(),
        free: Vec::new(),
        next_gen: 1,
        dirty: Vec::new(),
        sends_queued: 0,
        cqes: Vec::with_capacity(RING_ENTRIES as usize * 4),
        listener,
        accept_armed: false,
        accept_retry_at: None,
        shared,
        reader,
        now: now_ms(),
    };
    let tick_every = Duration::from_millis(lp.shared.config.tick_interval_ms);
    let mut next_tick = Instant::now() + tick_every;
    // The event loop: the one loop without a trip bound; it ends on shutdown.
    loop {
        if *shutdown.borrow() {
            break;
        }
        let now_i = Instant::now();
        if idx == 0 && now_i >= next_tick {
            let report = lp.shared.db.lock().tick(now_ms());
            if report.expired > 0 || report.buckets_migrated > 0 {
                tracing::trace!(?report, "engine tick");
            }
            next_tick = now_i + tick_every;
        }
        if !lp.accept_armed && lp.accept_retry_at.is_none_or(|t| now_i >= t) {
            lp.arm_accept();
        }
        let mut wait = WAIT_MAX;
        if idx == 0 {
            wait = wait.min(next_tick.saturating_duration_since(now_i));
        }
        if let Some(t) = lp.accept_retry_at {
            wait = wait.min(t.saturating_duration_since(now_i));
        }
        if let Err(e) = lp.submit_and_wait(wait) {
            tracing::error!(worker = idx, error = %e, "io_uring_enter failed; worker stops");
            break;
        }
        lp.now = now_ms();
        lp.handle_completions();
        lp.settle_dirty();
    }
    // Close every connection (the ring goes first, with the operations on them).
    let Loop { ring, conns, .. } = lp;
    drop(ring);
    for c in conns.into_iter().flatten() {
        // SAFETY: our descriptor, closed once.
        unsafe {
            libc::close(c.fd);
        }
    }
}

impl Loop {
    /// Queue one submission; if the queue is full, submit what is queued first. `false` if
    /// it still could not be queued (the submit failed): the caller undoes its bookkeeping
    /// and retries on a later iteration.
    #[must_use]
    fn push(&mut self, e: squeue::Entry) -> bool {
        // Bounded: after a successful submit the queue has room.
        for _ in 0..2 {
            // SAFETY: every buffer an entry points at (a connection's `out`) stays put and
            // unmodified until its completion (`send_inflight`).
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                return true;
            }
            if let Err(err) = self.ring.submit() {
                tracing::warn!(error = %err, "io_uring submit (queue full) failed");
            }
        }
        false
    }

    fn submit_and_wait(&mut self, wait: Duration) -> io::Result<()> {
        let (want, wait) = match self.sends_queued {
            0 => (1, wait),
            n => (n as usize + 1, wait.min(WAIT_AFTER_SENDS)),
        };
        self.sends_queued = 0;
        let ts = types::Timespec::from(wait);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(want, &args) {
            Ok(_) => Ok(()),
            Err(e) => match e.raw_os_error() {
                // Timed out, interrupted, or completions pending first: handle what is there.
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => {
                    Ok(())
                }
                _ => Err(e),
            },
        }
    }

    fn arm_accept(&mut self) {
        let e = opcode::AcceptMulti::new(types::Fd(self.listener.as_raw_fd()))
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(ud(K_ACCEPT, 0, 0));
        if self.push(e) {
            self.accept_armed = true;
            self.accept_retry_at = None;
        } else {
            self.accept_retry_at = Some(Instant::now() + Duration::from_millis(10));
        }
    }

    fn handle_completions(&mut self) {
        self.cqes.clear();
        // Bounded by the completion queue's size per call; the rest (overflow) comes next
        // iteration.
        for c in self.ring.completion() {
            self.cqes.push((c.user_data(), c.result(), c.flags()));
        }
        let cqes = std::mem::take(&mut self.cqes);
        for &(u, res, flags) in &cqes {
            let (kind, gen, slot) = ud_parts(u);
            match kind {
                K_ACCEPT => self.on_accept(res, flags),
                K_RECV => self.on_recv(gen, slot, res, flags),
                K_SEND => self.on_send(gen, slot, res),
                _ => {} // K_CANCEL: the cancelled recv reports itself
            }
        }
        self.cqes = cqes;
    }

    fn conn_mut(&mut self, gen: u32, slot: u32) -> Option<&mut Conn> {
        match self.conns.get_mut(slot as usize) {
            Some(Some(c)) if c.gen & 0x00ff_ffff == gen => Some(c),
            _ => None,
        }
    }

    fn mark_dirty(&mut self, slot: u32) {
        if let Some(Some(c)) = self.conns.get_mut(slot as usize) {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(slot);
            }
        }
    }

    fn on_accept(&mut self, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
        }
        if res < 0 {
            // EMFILE and friends: back off instead of spinning on a failing accept.
            let e = io::Error::from_raw_os_error(-res);
            tracing::warn!(error = %e, "accept failed");
            if !self.accept_armed {
                self.accept_retry_at = Some(Instant::now() + Duration::from_millis(10));
            }
            return;
        }
        // SAFETY: a descriptor the kernel just gave us; owned by `s` until `into_raw_fd`.
        let s = unsafe { StdStream::from_raw_fd(res) };
        let fallback: SocketAddr = ([0, 0, 0, 0], 0).into();
        let peer = s.peer_addr().unwrap_or(fallback);
        let laddr = s.local_addr().unwrap_or(peer);
        let session = match conn::open_session(&self.shared, peer, laddr, s.as_raw_fd()) {
            Ok(s) => s,
            Err(_reg) => {
                // One non-blocking send, best effort (as the epoll loop's one write).
                let _ = s.set_nonblocking(true);
                let _ = (&s).write(conn::TOO_MANY_CLIENTS);
                return; // `s` closes the socket, `_reg` uncounts it
            }
        };
        let _ = s.set_nodelay(true);
        let fd = s.into_raw_fd();
        let (reg, session) = session;
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                (self.conns.len() - 1) as u32
            }
        };
        self.conns[slot as usize] = Some(Conn {
            fd,
            gen,
            _reg: reg,
            session,
            wire: Wire::Unknown,
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            out: BytesMut::new(),
            sent: 0,
            send_inflight: false,
            recv_armed: false,
            cancel_sent: false,
            eof: false,
            closing: false,
            dirty: false,
        });
        self.arm_recv(slot);
    }

    fn arm_recv(&mut self, slot: u32) {
        let Some(Some(c)) = self.conns.get_mut(slot as usize) else {
            return;
        };
        c.recv_armed = true;
        let e = opcode::RecvMulti::new(types::Fd(c.fd), BGID)
            .build()
            .user_data(ud(K_RECV, c.gen, slot));
        if !self.push(e) {
            if let Some(Some(c)) = self.conns.get_mut(slot as usize) {
                c.recv_armed = false;
            }
            self.mark_dirty(slot); // armed again when the connection is next settled
        }
    }

    fn on_recv(&mut self, gen: u32, slot: u32, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        let Loop {
            conns,
            bufs,
            shared,
            reader,
            now,
            ..
        } = self;
        let c = match conns.get_mut(slot as usize) {
            Some(Some(c)) if c.gen & 0x00ff_ffff == gen => c,
            _ => {
                if let Some(b) = bid {
                    bufs.give_back(b);
                }
                return;
            }
        };
        if !more {
            c.recv_armed = false;
            c.cancel_sent = false;
        }
        if res > 0 {
            if let Some(b) = bid {
                let data = bufs.slice(b, res as usize);
                Stats::add(&shared.stats.net_input_bytes, data.len() as u64);
                input(c, data, shared, reader, *now);
                bufs.give_back(b);
            }
        } else if res == 0 {
            c.eof = true;
        } else if res != -libc::ENOBUFS && res != -libc::ECANCELED {
            // A reset or another socket error: nothing more can be exchanged.
            tracing::debug!(id = c.session.id, error = %io::Error::from_raw_os_error(-res), "connection error");
            c.eof = true;
            c.closing = true;
            c.wbuf.clear();
        } else if let Some(b) = bid {
            bufs.give_back(b);
        }
        self.mark_dirty(slot);
    }

    fn on_send(&mut self, gen: u32, slot: u32, res: i32) {
        let shared = self.shared.clone();
        let Some(c) = self.conn_mut(gen, slot) else {
            return;
        };
        c.send_inflight = false;
        if res < 0 {
            tracing::debug!(id = c.session.id, error = %io::Error::from_raw_os_error(-res), "send failed");
            c.out.clear();
            c.sent = 0;
            c.wbuf.clear();
            c.closing = true;
        } else {
            c.sent += res as usize;
            Stats::add(&shared.stats.net_output_bytes, res as u64);
            if c.sent >= c.out.len() {
                c.out.clear();
                c.sent = 0;
            }
        }
        self.mark_dirty(slot);
    }

    /// For every connection touched this iteration: send what it produced, resume input
    /// held back by the reply bound, re-arm or cancel its recv, close it when done.
    fn settle_dirty(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        for &slot in &dirty {
            self.settle(slot);
        }
        let mut dirty = dirty;
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }

    fn settle(&mut self, slot: u32) {
        let Loop {
            conns,
            shared,
            reader,
            now,
            ..
        } = self;
        let Some(Some(c)) = conns.get_mut(slot as usize) else {
            return;
        };
        c.dirty = false;
        // Bounded: at most two rounds (send what was queued, refill from held-back input
        // into the then-empty wbuf).
        let mut send = None;
        for _ in 0..2 {
            if !c.send_inflight && c.out.len() == c.sent && !c.wbuf.is_empty() {
                std::mem::swap(&mut c.out, &mut c.wbuf);
                c.sent = 0;
            }
            if !c.send_inflight && c.sent < c.out.len() {
                let rest = &c.out[c.sent..];
                send = Some(
                    opcode::Send::new(types::Fd(c.fd), rest.as_ptr(), rest.len() as u32)
                        .flags(libc::MSG_NOSIGNAL)
                        .build()
                        .user_data(ud(K_SEND, c.gen, slot)),
                );
                c.send_inflight = true;
            }
            if c.closing || c.blocked() || c.rbuf.is_empty() {
                break;
            }
            let rbuf = std::mem::take(&mut c.rbuf);
            let used = pump(c, &rbuf, shared, reader, *now);
            c.rbuf = rbuf;
            c.rbuf.advance(used);
            after_input(c, shared);
            if used == 0 {
                break; // an unfinished request: wait for input
            }
        }
        if c.eof && !c.blocked() && !c.closing {
            c.closing = true;
        }
        c.session.state.buffers.record(
            (c.rbuf.len(), c.rbuf.capacity()),
            (c.wbuf.len() + c.out.len() - c.sent, c.wbuf.capacity()),
            c.session.multi.as_ref(),
        );
        // Receive: paused (cancelled) while replies are held back or the connection is
        // closing; armed again once they drain.
        let want_recv = !c.closing && !c.eof && !c.blocked();
        let mut cancel = None;
        let mut arm = false;
        if want_recv && !c.recv_armed {
            arm = true;
        } else if !want_recv && c.recv_armed && !c.cancel_sent {
            c.cancel_sent = true;
            cancel = Some(
                opcode::AsyncCancel::new(ud(K_RECV, c.gen, slot))
                    .build()
                    .user_data(ud(K_CANCEL, c.gen, slot)),
            );
        }
        let done = c.closing
            && !c.send_inflight
            && c.sent >= c.out.len()
            && c.wbuf.is_empty()
            && !c.recv_armed;
        if let Some(e) = send {
            if self.push(e) {
                self.sends_queued += 1;
            } else if let Some(Some(c)) = self.conns.get_mut(slot as usize) {
                c.send_inflight = false; // nothing was queued: sent next time
                self.mark_dirty(slot);
            }
        }
        if let Some(e) = cancel {
            if !self.push(e) {
                if let Some(Some(c)) = self.conns.get_mut(slot as usize) {
                    c.cancel_sent = false;
                }
                self.mark_dirty(slot);
            }
        }
        if arm {
            self.arm_recv(slot);
        }
        if done {
            if let Some(c) = self.conns[slot as usize].take() {
                tracing::debug!(id = c.session.id, "connection closed");
                // SAFETY: our descriptor; no operation on it is in flight (none armed).
                unsafe {
                    libc::close(c.fd);
                }
            }
            self.free.push(slot);
        }
    }
}

/// Bytes received on `c`: processed straight from the receive buffer when nothing is held
/// back, else appended to what is.
fn input(c: &mut Conn, data: &[u8], shared: &Arc<Shared>, reader: &Reader, now: u64) {
    if c.closing {
        return; // after QUIT or a protocol error nothing more is read (as with epoll)
    }
    if c.rbuf.is_empty() && !c.blocked() {
        let used = pump(c, data, shared, reader, now);
        c.rbuf.extend_from_slice(&data[used..]);
    } else {
        c.rbuf.extend_from_slice(data);
        if !c.blocked() {
            let rbuf = std::mem::take(&mut c.rbuf);
            let used = pump(c, &rbuf, shared, reader, now);
            c.rbuf = rbuf;
            c.rbuf.advance(used);
        }
    }
    after_input(c, shared);
}

/// The epoll loop's read-buffer bound: checked once everything processable was processed.
fn after_input(c: &mut Conn, shared: &Shared) {
    if !c.closing && !c.blocked() && c.rbuf.len() > limits::CONN_READ_BUFFER_BYTES_MAX as usize {
        if matches!(c.wire, Wire::Resp(_)) {
            conn::read_buffer_overflow(shared, &mut c.wbuf);
        }
        c.closing = true;
    }
}

/// Run the requests at the start of `buf` through the connection's processor until it needs
/// more input, its replies reach the bound, or it asks to close. Returns the bytes consumed.
fn pump(c: &mut Conn, buf: &[u8], shared: &Arc<Shared>, reader: &Reader, now: u64) -> usize {
    if matches!(c.wire, Wire::Unknown) {
        match buf.first() {
            Some(&b) if native::is_native(b) => c.wire = Wire::Native(Vec::new()),
            Some(_) => c.wire = Wire::Resp(Box::default()),
            None => return 0,
        }
    }
    let p: Progress = match &mut c.wire {
        Wire::Resp(proc) => proc.process(buf, shared, reader, &mut c.session, now, &mut c.wbuf),
        Wire::Native(scratch) => native::process(
            buf,
            shared,
            reader,
            scratch,
            &mut c.session,
            now,
            &mut c.wbuf,
        ),
        Wire::Unknown => return 0,
    };
    if p.close {
        c.closing = true;
    }
    p.consumed
}
