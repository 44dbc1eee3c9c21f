//! The client side: [`ShmReader`] maps a same-host node's regions read-only and answers GET
//! and MGET from them without the node's CPU; everything else goes over the socket.
//!
//! GET: hash → home bucket → index entry with the key's tag → data entry → checksum, full key,
//! version check, expiry, and the index header's config id (the epoch pinned at handshake)
//! — all done by `ringlet_engine::read::read_entry_with`, the same function the node's own
//! workers use, so there is one definition of "a valid read". On `Retry` (a torn read that
//! persisted through `SHM_READ_RETRY_COUNT_MAX` attempts, or a layout this client cannot
//! follow) the reader finds out why: a changed epoch → re-handshake and read again; a region
//! that grew → remap; otherwise → the same GET over the socket.
//!
//! A dead node is noticed by a watcher thread blocked in `poll(POLLRDHUP)` on the socket: it
//! sets a flag the GET path checks with one relaxed load, and the next call reconnects
//! (bounded attempts) and re-maps the new incarnation's regions.
//!
//! Access records: the hash of every hit is batched and sent, at most
//! `ACCESS_RECORD_BATCH_MAX` per message, without blocking (a full socket drops the batch:
//! records are eviction hints, never worth stalling a read).

use crate::fdpass::{file_len, recv_with_fds};
use crate::proto::{
    encode_access, Hello, HELLO_BYTES, HELLO_FDS, HELLO_FDS_MAX, HELLO_FLAG_VALIDITY,
};
use crate::validity::{monotonic_coarse_ms_upper, monotonic_coarse_res_ms, Fallback, ValidityView};
use crate::ShmError;
use ringlet_codec::native::{
    decode_response_frame, encode_del, encode_get, encode_incr_by, encode_ping, encode_set,
    ResponseBody, SetRequest, Status,
};
use ringlet_engine::hash::key_hash;
use ringlet_engine::read::{
    locate_entry, prefetch_bucket, prefetch_entry, prefetch_position, read_entry_at_index,
    read_entry_direct, read_entry_image, read_entry_with, Position, Stale,
};
use ringlet_engine::{ReadOutcome, RegionsView};
use ringlet_types::limits::{self, ACCESS_RECORD_BATCH_MAX, KEY_BYTES_MAX};
use ringlet_types::{Epoch, MemgestId, ValueKind, Version};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Settings of a reader.
#[derive(Clone, Debug)]
pub struct ShmReaderConfig {
    /// The node's shared-memory socket.
    pub path: PathBuf,
    /// Socket read/write timeout for requests (a hung node must not hang the client).
    pub io_timeout: Duration,
    /// Connection attempts per reconnect (exponential backoff from 5 ms, capped at 200 ms).
    pub reconnect_attempts: u32,
}

impl ShmReaderConfig {
    /// Defaults: 5 s I/O timeout, `limits::RETRY_COUNT_MAX` attempts (~0.7 s in all).
    pub fn new(path: impl Into<PathBuf>) -> ShmReaderConfig {
        ShmReaderConfig {
            path: path.into(),
            io_timeout: Duration::from_secs(5),
            reconnect_attempts: limits::RETRY_COUNT_MAX,
        }
    }
}

/// Counters of one reader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// GET/MGET keys answered from shared memory (hits and validated misses).
    pub shm_hits: u64,
    pub shm_misses: u64,
    /// Keys read over the socket after a `Retry`.
    pub fallbacks: u64,
    /// Handshakes after the first (node restart, epoch change, remap).
    pub reconnects: u64,
    /// Re-handshakes that found a new generation (a restarted node).
    pub generation_changes: u64,
    /// Re-handshakes that found a new epoch.
    pub epoch_changes: u64,
    /// Regions remapped because they grew.
    pub remaps: u64,
    pub access_batches_sent: u64,
    pub access_batches_dropped: u64,
    /// Link hops answered by one direct read at the link's location hint.
    pub hint_hits: u64,
    /// ... at a position this reader remembered after a stale hint (lazy refresh).
    pub hint_cache_hits: u64,
    /// Of those two, the hops read straight at the target's data entry (the hint's data
    /// part: no index access); the others were read at the hint's index entry.
    pub hint_direct_hits: u64,
    /// Hints (or remembered positions) found stale: the table changed (grown, flushed).
    pub hint_stale_table: u64,
    /// ... the entry there is gone, another key's, or was rewritten elsewhere.
    pub hint_stale_entry: u64,
    /// ... the hint names another node than the one that serves the key now.
    pub hint_stale_node: u64,
    /// Link hops without a hint (the link was made before its target existed).
    pub hint_missing: u64,
    /// Link hops answered by a lookup by key after a stale or missing hint.
    pub hint_lookups: u64,
}

/// A read-only shared mapping of one region.
struct Map {
    ptr: *const u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is owned (unmapped once, on drop) and only read through atomics; moving
// it to another thread moves the ownership.
unsafe impl Send for Map {}

impl Map {
    fn new(fd: OwnedFd, len: u64) -> Result<Map, ShmError> {
        let real = file_len(fd.as_raw_fd())?;
        if real < len {
            return Err(ShmError::Handshake("region smaller than announced"));
        }
        // SAFETY: mapping a descriptor we own, read-only; the result is checked.
        let ptr = unsafe { map_ro_aligned(fd.as_raw_fd(), len as usize) };
        if ptr == libc::MAP_FAILED {
            return Err(ShmError::Io(io::Error::last_os_error()));
        }
        Ok(Map {
            ptr: ptr as *const u8,
            len: len as usize,
            fd,
        })
    }
}

/// Huge page size the read-only mappings are aligned to.
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Map `len` bytes of `fd` read-only and shared at an address aligned to 2 MiB. The node backs
/// its regions with huge pages where the kernel allows (`ringlet_engine::HugePages`); the
/// kernel maps a huge page of a shared file with one page-table entry only where the virtual
/// address is aligned like the file offset, which it arranges by itself only when shmem THP
/// is on globally. Unaligned, the client would take a 4 KiB TLB entry (and, in a VM, a
/// two-dimensional page walk) per page it touches even though the node has huge pages.
/// Returns `MAP_FAILED` on failure.
///
/// # Safety
/// `fd` must be a readable descriptor of at least `len` bytes.
unsafe fn map_ro_aligned(fd: i32, len: usize) -> *mut libc::c_void {
    let flags = libc::MAP_SHARED | libc::MAP_NORESERVE;
    let Some(span) = len.checked_add(HUGE_PAGE_BYTES) else {
        return libc::MAP_FAILED;
    };
    let r = libc::mmap(
        std::ptr::null_mut(),
        span,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        -1,
        0,
    );
    if r == libc::MAP_FAILED {
        return libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, flags, fd, 0);
    }
    let (r, a) = (r as usize, (r as usize).next_multiple_of(HUGE_PAGE_BYTES));
    let p = libc::mmap(
        a as *mut libc::c_void,
        len,
        libc::PROT_READ,
        flags | libc::MAP_FIXED,
        fd,
        0,
    );
    if p == libc::MAP_FAILED {
        libc::munmap(r as *mut libc::c_void, span);
        return p;
    }
    if a > r {
        libc::munmap(r as *mut libc::c_void, a - r);
    }
    let tail = a + len.next_multiple_of(4096);
    if r + span > tail {
        libc::munmap(tail as *mut libc::c_void, r + span - tail);
    }
    p
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our own mapping; no view built on it outlives the session that owns it.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// One handshake's worth of state: the socket, the mappings and the view over them.
struct Session {
    sock: UnixStream,
    hello: Hello,
    // `view` points into these two; they are dropped after it (declaration order is
    // irrelevant for raw pointers, but the Session is only ever used whole).
    index: Map,
    data: Map,
    view: RegionsView,
    /// A cluster node's validity region (HELLO flag): every one-sided read must pass it.
    validity: Option<ValidityView>,
    stale: Arc<AtomicBool>,
    watcher_stop: Arc<AtomicBool>,
    /// The index header's config id differs from the epoch this session pinned even right
    /// after a handshake (the node changed its role word without a new epoch): read over the
    /// socket until the header matches again, instead of re-handshaking on every GET.
    one_sided_off: bool,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.watcher_stop.store(true, Ordering::Release);
    }
}

/// How often the watcher re-checks its stop flag.
const WATCH_POLL_MS: i32 = 100;

fn spawn_watcher(sock: UnixStream, stale: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    let _ = std::thread::Builder::new()
        .name("shm-watch".into())
        .spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let mut p = libc::pollfd {
                    fd: sock.as_raw_fd(),
                    // Only hang-up: responses (POLLIN) belong to the request path.
                    events: libc::POLLRDHUP,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                let r = unsafe { libc::poll(&mut p, 1, WATCH_POLL_MS) };
                if r > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
                    stale.store(true, Ordering::Release);
                    return;
                }
            }
        });
}

/// A key's outcome in [`ShmReader::mget`].
pub type OwnedItem = Option<(Version, Vec<u8>)>;

/// A key's outcome in [`ShmReader::mget_with`].
pub type MgetItem<'a> = Option<(Version, &'a [u8])>;

/// Slots of the access-record repeat filter (a power of two; 8 KiB).
const ACCESS_FILTER_SLOTS: usize = 1024;

/// How many keys ahead of the one being validated [`ShmReader::mget_with`] prefetches the
/// home bucket. A validated read of a small value costs ~100-200 ns of CPU and a DRAM miss
/// about as much (more in a VM, where a TLB miss is a two-dimensional walk), so eight keys
/// between the bucket's prefetch and the scan of that bucket for the entry's address hide
/// it, and eight more between the entry's prefetch and its validation hide the second miss.
pub const MGET_BUCKET_AHEAD: usize = 16;

/// How many keys ahead [`ShmReader::mget_with`] prefetches the data entries that the key's
/// home bucket points at (with its tag). The bucket was prefetched
/// `MGET_BUCKET_AHEAD - MGET_ENTRY_AHEAD` keys earlier.
pub const MGET_ENTRY_AHEAD: usize = 8;

/// Slots of the hash ring of the pipeline: a power of two above [`MGET_BUCKET_AHEAD`].
const MGET_HASH_RING: usize = 32;
const _: () = assert!(MGET_ENTRY_AHEAD < MGET_BUCKET_AHEAD && MGET_BUCKET_AHEAD < MGET_HASH_RING);

/// A one-sided reader of a same-host node. Not `Sync`: one per thread (each has its own
/// connection for writes and fallbacks).
pub struct ShmReader {
    cfg: ShmReaderConfig,
    session: Option<Session>,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    next_id: u64,
    access: Vec<u64>,
    /// Direct-mapped filter of hashes already in `access`: a hot key read a thousand times
    /// between two flushes is reported once, which is all the node's policy needs (a
    /// reference bit / frequency bump) and saves the node a touch per repeat.
    access_seen: Box<[u64]>,
    abuf: Vec<u8>,
    out: Vec<u8>,
    stats: ReaderStats,
    last: Option<(u64, Epoch)>,
    clock_res_ms: u64,
    mono_res_ms: u64,
    /// [`ShmReader::try_get_into`]: no reconnect attempt before this (CLOCK_MONOTONIC ms),
    /// so a dead node costs a GET one flag load, not a failed connect.
    reconnect_not_before_ms: u64,
    /// Positions found by lookups after a stale or missing hint, tried before the link's own
    /// hint next time (hints are refreshed lazily, here, rather than by rewriting records).
    /// Bounded by [`HINT_CACHE_ENTRIES_MAX`]; dropped with the session (another engine).
    hint_cache: std::collections::HashMap<Vec<u8>, Position>,
}

/// Most positions [`ShmReader`] remembers for links whose hint was stale; when full it is
/// cleared (a cache miss only costs a lookup).
pub const HINT_CACHE_ENTRIES_MAX: usize = 65_536;

/// After a failed reconnect from [`ShmReader::try_get_into`], how long reads fall back
/// before the next attempt (the network path answers meanwhile).
const TRY_RECONNECT_PAUSE_MS: u64 = 200;

fn coarse_now_ms(res_ms: u64) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe {
        libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts);
    }
    // Rounded *up* by the clock's resolution: an entry may read as expired up to one tick
    // early, never late.
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000 + res_ms
}

fn coarse_res_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe {
        libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut ts);
    }
    ((ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64).div_ceil(1_000_000)).max(1)
}

/// An owned response of a socket request.
struct Resp {
    status: Status,
    epoch: Epoch,
    version: Version,
    value: Vec<u8>,
    int: i64,
}

impl ShmReader {
    /// Connect to `path` with default settings.
    ///
    /// # Errors
    /// As [`ShmReader::with_config`].
    pub fn connect(path: impl AsRef<Path>) -> Result<ShmReader, ShmError> {
        ShmReader::with_config(ShmReaderConfig::new(path.as_ref()))
    }

    /// Connect, handshake and map the regions.
    ///
    /// # Errors
    /// [`ShmError::Io`] if the node is not there, [`ShmError::Handshake`] /
    /// [`ShmError::Proto`] if it speaks another layout.
    pub fn with_config(cfg: ShmReaderConfig) -> Result<ShmReader, ShmError> {
        let mut r = ShmReader {
            cfg,
            session: None,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            next_id: 1,
            access: Vec::with_capacity(ACCESS_RECORD_BATCH_MAX as usize),
            access_seen: vec![0u64; ACCESS_FILTER_SLOTS].into_boxed_slice(),
            abuf: Vec::new(),
            out: Vec::new(),
            stats: ReaderStats::default(),
            last: None,
            clock_res_ms: coarse_res_ms(),
            mono_res_ms: monotonic_coarse_res_ms(),
            reconnect_not_before_ms: 0,
            hint_cache: std::collections::HashMap::new(),
        };
        r.session = Some(r.handshake()?);
        Ok(r)
    }

    fn handshake(&mut self) -> Result<Session, ShmError> {
        let sock = UnixStream::connect(&self.cfg.path)?;
        sock.set_read_timeout(Some(self.cfg.io_timeout))?;
        sock.set_write_timeout(Some(self.cfg.io_timeout))?;
        let mut buf = [0u8; HELLO_BYTES];
        let fds = recv_with_fds(&sock, &mut buf, HELLO_FDS_MAX)?;
        let hello = Hello::decode(&buf)?;
        let cluster = hello.flags & HELLO_FLAG_VALIDITY != 0;
        if fds.len() != HELLO_FDS + usize::from(cluster) {
            return Err(ShmError::Handshake("HELLO without its descriptors"));
        }
        let mut it = fds.into_iter();
        let (Some(ifd), Some(dfd)) = (it.next(), it.next()) else {
            return Err(ShmError::Handshake("HELLO without its descriptors"));
        };
        let validity = match it.next() {
            Some(vfd) => Some(ValidityView::map(vfd.as_raw_fd())?),
            None => None,
        };
        let index = Map::new(ifd, hello.index_len)?;
        let data = Map::new(dfd, hello.data_len)?;
        // SAFETY: both mappings are page-aligned, readable, and live as long as the Session
        // that holds them and the view.
        let view = unsafe { RegionsView::new(index.ptr, index.len, data.ptr, data.len) };
        if !view.is_valid() {
            return Err(ShmError::Handshake("index region has no Ringlet header"));
        }
        let stale = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        spawn_watcher(sock.try_clone()?, stale.clone(), stop.clone());
        if let Some((g, e)) = self.last {
            self.stats.reconnects += 1;
            if g != hello.generation {
                self.stats.generation_changes += 1;
            }
            if e != hello.epoch {
                self.stats.epoch_changes += 1;
            }
        }
        self.last = Some((hello.generation, hello.epoch));
        self.rbuf.clear();
        self.access.clear();
        self.access_seen.fill(0);
        Ok(Session {
            sock,
            hello,
            index,
            data,
            view,
            validity,
            stale,
            watcher_stop: stop,
            one_sided_off: false,
        })
    }

    /// Drop the current session and handshake again, with bounded attempts and backoff.
    fn reconnect(&mut self) -> Result<(), ShmError> {
        self.session = None;
        // Positions name the old engine's entries (validation would refuse them anyway).
        self.hint_cache.clear();
        let mut delay = Duration::from_millis(5);
        let mut last_err = ShmError::Disconnected;
        for _ in 0..self.cfg.reconnect_attempts.max(1) {
            match self.handshake() {
                Ok(s) => {
                    self.session = Some(s);
                    return Ok(());
                }
                Err(e) => last_err = e,
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(200));
        }
        Err(last_err)
    }

    #[inline]
    /// The current session's view of the regions (connecting first if needed), for a walk
    /// that prefetches its next hops' lines (`ringlet_engine::read::prefetch_position`).
    /// Use it for prefetches only: after a remap it may name unmapped memory, which a
    /// prefetch never faults on; reads go through the reader's own calls.
    ///
    /// # Errors
    /// As a reconnect.
    pub fn prefetch_view(&mut self) -> Result<RegionsView, ShmError> {
        self.ensure()?;
        self.session
            .as_ref()
            .map(|s| s.view)
            .ok_or(ShmError::Disconnected)
    }

    fn ensure(&mut self) -> Result<(), ShmError> {
        match &self.session {
            Some(s) if !s.stale.load(Ordering::Relaxed) => Ok(()),
            _ => self.reconnect(),
        }
    }

    /// The current handshake (after a reconnect: the new one).
    pub fn hello(&self) -> Option<Hello> {
        self.session.as_ref().map(|s| s.hello)
    }

    /// Counters.
    pub fn stats(&self) -> ReaderStats {
        self.stats
    }

    /// Whether the watcher saw the node hang up (the next call reconnects).
    pub fn is_stale(&self) -> bool {
        self.session
            .as_ref()
            .is_none_or(|s| s.stale.load(Ordering::Relaxed))
    }

    /// Base and length of the read-only index mapping (tests that the mapping is read-only).
    #[doc(hidden)]
    pub fn index_mapping(&self) -> Option<(*const u8, usize)> {
        self.session.as_ref().map(|s| (s.index.ptr, s.index.len))
    }

    #[inline]
    fn record(&mut self, hash: u64) {
        // Slot from bits the bucket choice (low 32) and the tag (high 16) do not use alone.
        let slot = (hash >> 20) as usize & (ACCESS_FILTER_SLOTS - 1);
        if self.access_seen[slot] == hash {
            return;
        }
        self.access_seen[slot] = hash;
        self.access.push(hash);
        if self.access.len() >= ACCESS_RECORD_BATCH_MAX as usize {
            self.flush_access();
        }
    }

    /// Send the pending access records now (without blocking: a full socket drops them).
    pub fn flush_access(&mut self) {
        if self.access.is_empty() {
            return;
        }
        let Some(s) = self.session.as_ref() else {
            self.access.clear();
            return;
        };
        self.abuf.clear();
        encode_access(&mut self.abuf, &self.access);
        self.access.clear();
        self.access_seen.fill(0);
        // SAFETY: sending our own buffer on our own socket.
        let n = unsafe {
            libc::send(
                s.sock.as_raw_fd(),
                self.abuf.as_ptr().cast(),
                self.abuf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n <= 0 {
            self.stats.access_batches_dropped += 1;
            return;
        }
        let n = n as usize;
        if n < self.abuf.len() {
            // A message must go whole or the stream loses its framing: finish it (blocking,
            // bounded by the write timeout).
            if (&s.sock).write_all(&self.abuf[n..]).is_err() {
                s.stale.store(true, Ordering::Release);
                return;
            }
        }
        self.stats.access_batches_sent += 1;
    }

    /// GET `key` into `out` (cleared). `Ok(Some(version))` on a hit.
    ///
    /// # Errors
    /// [`ShmError::KeyTooLarge`]; socket errors if the read had to fall back and the node
    /// is unreachable.
    pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Version>, ShmError> {
        if key.len() > KEY_BYTES_MAX as usize {
            return Err(ShmError::KeyTooLarge);
        }
        self.ensure()?;
        let hash = key_hash(key);
        let now = coarse_now_ms(self.clock_res_ms);
        let Some(s) = self.session.as_mut() else {
            return Err(ShmError::Disconnected);
        };
        if s.one_sided_off {
            if s.view.config_id() != Some(s.hello.epoch.0) {
                self.stats.fallbacks += 1;
                return self.rpc_get(key, out);
            }
            s.one_sided_off = false;
        }
        let (r, _) = read_entry_with(&s.view, key, hash, now, Some(s.hello.epoch.0), out);
        match r {
            ReadOutcome::Hit { version, .. } => {
                self.stats.shm_hits += 1;
                self.record(hash);
                Ok(Some(version))
            }
            ReadOutcome::Miss => {
                self.stats.shm_misses += 1;
                Ok(None)
            }
            ReadOutcome::Retry => self.slow_get(key, hash, out),
        }
    }

    /// A cluster node's one-sided GET: the value from shared memory only if the node's
    /// validity region says it may answer `key` now, checked before and after the engine
    /// read (docs/design/cluster-shm-reads.md). Never goes over the socket: on any doubt it
    /// returns the reason and the caller reads over the network. A session that is stale
    /// (node gone) reconnects once, at most every [`TRY_RECONNECT_PAUSE_MS`].
    ///
    /// `Ok(Some(version))`: a committed value, copied into `out`; `Ok(None)`: the key is
    /// absent (or expired) at its coordinator.
    ///
    /// # Errors
    /// The [`Fallback`] reason; [`Fallback::Unavailable`] also for a node without a validity
    /// region (a single node: use [`ShmReader::get_into`]).
    pub fn try_get_into(
        &mut self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Version>, Fallback> {
        if key.len() > KEY_BYTES_MAX as usize {
            return Err(Fallback::Unavailable);
        }
        if self.is_stale() {
            let now = crate::validity::monotonic_ms();
            if now < self.reconnect_not_before_ms {
                return Err(Fallback::Unavailable);
            }
            self.session = None;
            match self.handshake() {
                Ok(s) => self.session = Some(s),
                Err(_) => {
                    self.reconnect_not_before_ms = now + TRY_RECONNECT_PAUSE_MS;
                    return Err(Fallback::Unavailable);
                }
            }
        }
        let Some(s) = self.session.as_ref() else {
            return Err(Fallback::Unavailable);
        };
        let Some(v) = s.validity.as_ref() else {
            return Err(Fallback::Unavailable);
        };
        let hash = key_hash(key);
        let slot = ringlet_types::key_slot(key);
        let ticket = v.begin(
            slot,
            hash,
            s.hello.generation,
            monotonic_coarse_ms_upper(self.mono_res_ms),
        )?;
        let now = coarse_now_ms(self.clock_res_ms);
        let (r, _) = read_entry_with(&s.view, key, hash, now, Some(s.hello.epoch.0), out);
        let (memgest, result) = match r {
            ReadOutcome::Hit {
                version,
                memgest,
                kind,
                ..
            } => {
                if kind != ringlet_types::ValueKind::String {
                    return Err(Fallback::Kind);
                }
                (Some(memgest), Some(version))
            }
            ReadOutcome::Miss => (None, None),
            ReadOutcome::Retry => return Err(Fallback::Retry),
        };
        // The clock is read after the engine read: the lease must still hold *then*.
        v.end(ticket, memgest, monotonic_coarse_ms_upper(self.mono_res_ms))?;
        if result.is_some() {
            self.stats.shm_hits += 1;
            self.record(hash);
        } else {
            self.stats.shm_misses += 1;
        }
        Ok(result)
    }

    /// Read `key` (a link's target) into `out` following a location hint: first one direct
    /// read at a position this reader remembered for the key, then at `hint`, each validated
    /// like a probe (`ringlet_engine::read::read_entry_at`: same table, checksum, index
    /// re-check, full key), then a lookup by key, whose position is remembered for next time.
    /// A stale hint costs one failed read and is counted ([`ReaderStats`]); it can never
    /// return another key's item. Single-node sessions only (a cluster session answers
    /// through [`ShmReader::try_get_hinted`]).
    ///
    /// `Ok(Some((version, kind)))`: the value is in `out`; `Ok(None)`: absent or expired.
    ///
    /// # Errors
    /// [`ShmError::KeyTooLarge`]; socket errors from a reconnect; `Server { TRY_AGAIN }` if
    /// the regions stayed unreadable (torn) after a refresh.
    pub fn get_hinted(
        &mut self,
        key: &[u8],
        hint: Option<Position>,
        out: &mut Vec<u8>,
    ) -> Result<Option<(Version, ValueKind)>, ShmError> {
        if key.len() > KEY_BYTES_MAX as usize {
            return Err(ShmError::KeyTooLarge);
        }
        self.ensure()?;
        let hash = key_hash(key);
        let now = coarse_now_ms(self.clock_res_ms);
        // The common case first, flat: no remembered positions and a data hint that
        // validates (the same `read_entry_direct`, so the same guarantee). Anything else —
        // a stale or expired target, a remembered position — goes through
        // `read_at_hints`, which reads again and counts it.
        if let (true, Some(pos), Some(s)) = (self.hint_cache.is_empty(), hint, &self.session) {
            if let Some(d) = pos.data {
                prefetch_position(&s.view, pos);
                let epoch = Some(s.hello.epoch.0);
                if let Ok(ReadOutcome::Hit { version, kind, .. }) =
                    read_entry_direct(&s.view, key, hash, d, now, epoch, out)
                {
                    self.stats.hint_direct_hits += 1;
                    self.stats.hint_hits += 1;
                    self.stats.shm_hits += 1;
                    self.record(hash);
                    return Ok(Some((version, kind)));
                }
            }
        }
        if let Some(r) = self.read_at_hints(key, hash, hint, now, out) {
            return Ok(r.map(|(v, k, _)| (v, k)));
        }
        // Bounded: one lookup, one refresh, one more lookup.
        for attempt in 0..2 {
            let Some(s) = self.session.as_ref() else {
                return Err(ShmError::Disconnected);
            };
            let (r, pos) = locate_entry(&s.view, key, hash, now, Some(s.hello.epoch.0), out);
            match r {
                ReadOutcome::Hit { version, kind, .. } => {
                    self.stats.hint_lookups += 1;
                    self.stats.shm_hits += 1;
                    if let Some(p) = pos {
                        self.remember(key, p);
                    }
                    self.record(hash);
                    return Ok(Some((version, kind)));
                }
                ReadOutcome::Miss => {
                    self.stats.hint_lookups += 1;
                    self.stats.shm_misses += 1;
                    return Ok(None);
                }
                ReadOutcome::Retry if attempt == 0 && self.refresh_after_retry()? => {}
                ReadOutcome::Retry => break,
            }
        }
        Err(ShmError::Server {
            status: Status::TRY_AGAIN.0,
            message: "one-sided read stayed torn; read over the network".into(),
        })
    }

    /// The direct reads of [`ShmReader::get_hinted`] and [`ShmReader::try_get_hinted`]:
    /// `Some` if one validated (a hit, or the key's own entry found expired).
    fn read_at_hints(
        &mut self,
        key: &[u8],
        hash: u64,
        hint: Option<Position>,
        now: u64,
        out: &mut Vec<u8>,
    ) -> Option<Option<(Version, ValueKind, MemgestId)>> {
        // (An empty cache, the common case with fresh hints, costs no hashing of the key.)
        let cached = if self.hint_cache.is_empty() {
            None
        } else {
            self.hint_cache.get(key).copied()
        };
        if hint.is_none() && cached.is_none() {
            self.stats.hint_missing += 1;
        }
        let s = self.session.as_ref()?;
        let epoch = s.hello.epoch.0;
        let tries = [(cached, true), (hint.filter(|h| Some(*h) != cached), false)];
        for (pos, from_cache) in tries {
            let Some(pos) = pos else { continue };
            // Straight at the data entry first (one miss), then at the index entry (its line
            // requested now, so a stale data part does not add a miss after the first).
            if pos.data.is_some() {
                prefetch_position(&s.view, pos);
            }
            let direct = pos
                .data
                .map(|d| read_entry_direct(&s.view, key, hash, d, now, Some(epoch), out));
            let got = match direct {
                Some(Ok(r)) => {
                    if matches!(r, ReadOutcome::Hit { .. }) {
                        self.stats.hint_direct_hits += 1;
                    }
                    Ok(r)
                }
                Some(Err(Stale::Config)) => Err(Stale::Config),
                Some(Err(_)) | None => {
                    read_entry_at_index(&s.view, key, hash, pos, now, Some(epoch), out)
                }
            };
            match got {
                Ok(ReadOutcome::Hit {
                    version,
                    kind,
                    memgest,
                    ..
                }) => {
                    if from_cache {
                        self.stats.hint_cache_hits += 1;
                    } else {
                        self.stats.hint_hits += 1;
                    }
                    self.stats.shm_hits += 1;
                    self.record(hash);
                    return Some(Some((version, kind, memgest)));
                }
                Ok(_) => {
                    self.stats.shm_misses += 1;
                    return Some(None);
                }
                Err(Stale::Table | Stale::Config) => self.stats.hint_stale_table += 1,
                Err(Stale::Entry) => self.stats.hint_stale_entry += 1,
            }
            if from_cache {
                self.hint_cache.remove(key);
            }
        }
        None
    }

    fn remember(&mut self, key: &[u8], p: Position) {
        if self.hint_cache.len() >= HINT_CACHE_ENTRIES_MAX && !self.hint_cache.contains_key(key) {
            self.hint_cache.clear();
        }
        self.hint_cache.insert(key.to_vec(), p);
    }

    /// A cluster node's [`ShmReader::get_hinted`]: the direct reads and the lookup run
    /// between the validity region's checks (as [`ShmReader::try_get_into`]), records
    /// included (the caller asked for a link's target). Never goes over the socket.
    ///
    /// # Errors
    /// The [`Fallback`] reason: the caller reads over the network.
    pub fn try_get_hinted(
        &mut self,
        key: &[u8],
        hint: Option<Position>,
        out: &mut Vec<u8>,
    ) -> Result<Option<(Version, ValueKind)>, Fallback> {
        if key.len() > KEY_BYTES_MAX as usize || self.is_stale() {
            return Err(Fallback::Unavailable);
        }
        let Some(s) = self.session.as_ref() else {
            return Err(Fallback::Unavailable);
        };
        let Some(v) = s.validity.as_ref() else {
            return Err(Fallback::Unavailable);
        };
        let hash = key_hash(key);
        let slot = ringlet_types::key_slot(key);
        let ticket = v.begin(
            slot,
            hash,
            s.hello.generation,
            monotonic_coarse_ms_upper(self.mono_res_ms),
        )?;
        let now = coarse_now_ms(self.clock_res_ms);
        let found = match self.read_at_hints(key, hash, hint, now, out) {
            Some(r) => r,
            None => {
                let Some(s) = self.session.as_ref() else {
                    return Err(Fallback::Unavailable);
                };
                let (r, pos) = locate_entry(&s.view, key, hash, now, Some(s.hello.epoch.0), out);
                match r {
                    ReadOutcome::Hit {
                        version,
                        kind,
                        memgest,
                        ..
                    } => {
                        self.stats.hint_lookups += 1;
                        if let Some(p) = pos {
                            self.remember(key, p);
                        }
                        Some((version, kind, memgest))
                    }
                    ReadOutcome::Miss => {
                        self.stats.hint_lookups += 1;
                        None
                    }
                    ReadOutcome::Retry => return Err(Fallback::Retry),
                }
            }
        };
        let Some(s) = self.session.as_ref() else {
            return Err(Fallback::Unavailable);
        };
        let Some(v) = s.validity.as_ref() else {
            return Err(Fallback::Unavailable);
        };
        // `end` refuses an entry of an ec memgest (a pointer, not a value) and checks the
        // seqlock and the lease after the read, as for a GET.
        v.end(
            ticket,
            found.map(|(_, _, m)| m),
            monotonic_coarse_ms_upper(self.mono_res_ms),
        )?;
        Ok(found.map(|(v, k, _)| (v, k)))
    }

    /// Whether this session is a cluster node's (its HELLO carried a validity region).
    pub fn is_cluster(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.validity.is_some())
    }

    /// GET into a fresh buffer.
    ///
    /// # Errors
    /// As [`ShmReader::get_into`].
    pub fn get(&mut self, key: &[u8]) -> Result<Option<(Version, Vec<u8>)>, ShmError> {
        let mut out = Vec::new();
        Ok(self.get_into(key, &mut out)?.map(|v| (v, out)))
    }

    /// After a `Retry`: find out why and either re-read from shared memory once more or go
    /// over the socket.
    fn slow_get(
        &mut self,
        key: &[u8],
        hash: u64,
        out: &mut Vec<u8>,
    ) -> Result<Option<Version>, ShmError> {
        if self.refresh_after_retry()? {
            let now = coarse_now_ms(self.clock_res_ms);
            if let Some(s) = self.session.as_ref() {
                let (r, _) = read_entry_with(&s.view, key, hash, now, Some(s.hello.epoch.0), out);
                match r {
                    ReadOutcome::Hit { version, .. } => {
                        self.stats.shm_hits += 1;
                        self.record(hash);
                        return Ok(Some(version));
                    }
                    ReadOutcome::Miss => {
                        self.stats.shm_misses += 1;
                        return Ok(None);
                    }
                    ReadOutcome::Retry => {}
                }
            }
        }
        self.stats.fallbacks += 1;
        self.rpc_get(key, out)
    }

    /// Re-handshake if the epoch moved or the node went away, remap if a region grew.
    /// Returns whether anything changed (worth one more one-sided attempt).
    fn refresh_after_retry(&mut self) -> Result<bool, ShmError> {
        let Some(s) = self.session.as_ref() else {
            self.reconnect()?;
            return Ok(true);
        };
        let epoch_moved = s.view.config_id() != Some(s.hello.epoch.0);
        if s.one_sided_off {
            return Ok(false);
        }
        if epoch_moved || s.stale.load(Ordering::Acquire) {
            self.reconnect()?;
            if let Some(s) = self.session.as_mut() {
                if s.view.config_id() != Some(s.hello.epoch.0) {
                    s.one_sided_off = true;
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        let grown = file_len(s.index.fd.as_raw_fd()).is_ok_and(|l| l > s.index.len as u64)
            || file_len(s.data.fd.as_raw_fd()).is_ok_and(|l| l > s.data.len as u64);
        if grown {
            // The engine reserves its regions at full size, so this only happens with an
            // engine that grows them: the handshake maps the new sizes.
            self.stats.remaps += 1;
            self.reconnect()?;
            return Ok(true);
        }
        Ok(false)
    }

    /// MGET over shared memory, the fast path for many keys: a software pipeline that hashes
    /// key `i + MGET_BUCKET_AHEAD` and prefetches its home bucket, prefetches the data
    /// entries key `i + MGET_ENTRY_AHEAD`'s bucket points at, then validates key `i` with
    /// the full read (`read_entry_image`: the same lookup as [`ShmReader::get_into`]'s
    /// `read_entry_with` — checksum, index re-check, full key, layout and epoch — with the
    /// value handed to `f` in place in the copied image), so the two dependent cache misses
    /// of every key overlap with the work on earlier ones. Prefetches are hints over atomics and
    /// bounds-checked; nothing they see is trusted. `f(i, item)` gets key `i`'s outcome, in
    /// order; the slice is only valid during the call. A key whose read must be retried
    /// takes [`ShmReader::get_into`]'s slow path (refresh, then the socket) alone.
    ///
    /// # Errors
    /// As [`ShmReader::get_into`]; keys before the failing one have been reported.
    pub fn mget_with<K: AsRef<[u8]>>(
        &mut self,
        keys: &[K],
        mut f: impl FnMut(usize, MgetItem<'_>),
    ) -> Result<(), ShmError> {
        if keys
            .iter()
            .any(|k| k.as_ref().len() > KEY_BYTES_MAX as usize)
        {
            return Err(ShmError::KeyTooLarge);
        }
        let mut out = std::mem::take(&mut self.out);
        let r = self.mget_inner(keys, &mut out, &mut f);
        self.out = out;
        r
    }

    fn mget_inner<K: AsRef<[u8]>>(
        &mut self,
        keys: &[K],
        out: &mut Vec<u8>,
        f: &mut impl FnMut(usize, MgetItem<'_>),
    ) -> Result<(), ShmError> {
        self.ensure()?;
        // One clock read per call: a key read later in the batch may be returned although it
        // expired after the call began, which is still a value live during the call (the
        // read's interval), as an MGET promises; a fallback refreshes its own clock.
        let now = coarse_now_ms(self.clock_res_ms);
        let n = keys.len();
        // Ring of hashes for keys i .. i + MGET_BUCKET_AHEAD (a power of two above it).
        let mut hashes = [0u64; MGET_HASH_RING];
        let mut view = match self.session.as_ref() {
            Some(s) => s.view,
            None => return Err(ShmError::Disconnected),
        };
        // Prologue: buckets of the first keys, then entries of the first few of those.
        for (i, k) in keys.iter().enumerate().take(MGET_BUCKET_AHEAD) {
            let h = key_hash(k.as_ref());
            hashes[i % MGET_HASH_RING] = h;
            prefetch_bucket(&view, h);
        }
        for i in 0..n.min(MGET_ENTRY_AHEAD) {
            prefetch_entry(&view, hashes[i % MGET_HASH_RING]);
        }
        for (i, k) in keys.iter().enumerate() {
            // Steady state: while key i is validated, key i + MGET_ENTRY_AHEAD's entry and
            // key i + MGET_BUCKET_AHEAD's bucket are on their way.
            if let Some(ka) = keys.get(i + MGET_BUCKET_AHEAD) {
                let h = key_hash(ka.as_ref());
                hashes[(i + MGET_BUCKET_AHEAD) % MGET_HASH_RING] = h;
                prefetch_bucket(&view, h);
            }
            if i + MGET_ENTRY_AHEAD < n {
                prefetch_entry(&view, hashes[(i + MGET_ENTRY_AHEAD) % MGET_HASH_RING]);
            }
            let hash = hashes[i % MGET_HASH_RING];
            let key = k.as_ref();
            let Some(s) = self.session.as_ref() else {
                return Err(ShmError::Disconnected);
            };
            if s.one_sided_off {
                // As in `get_into`: the socket until the header matches the session again.
                let v = self.get_into(key, out)?;
                f(i, v.map(|v| (v, out.as_slice())));
                continue;
            }
            // The image stays in `out` and `f` sees the value inside it: no move of the
            // value per key (the callback's slice is only valid during the call anyway).
            let (r, value) = read_entry_image(&s.view, key, hash, now, Some(s.hello.epoch.0), out);
            match r {
                ReadOutcome::Hit { version, .. } => {
                    self.stats.shm_hits += 1;
                    self.record(hash);
                    f(i, Some((version, &out[value])));
                }
                ReadOutcome::Miss => {
                    self.stats.shm_misses += 1;
                    f(i, None);
                }
                ReadOutcome::Retry => {
                    let v = self.slow_get(key, hash, out)?;
                    f(i, v.map(|v| (v, out.as_slice())));
                    // A re-handshake maps the regions elsewhere: prefetch into the new view
                    // (the validation never used the old one: it reads the session's).
                    if let Some(s) = self.session.as_ref() {
                        view = s.view;
                    }
                }
            }
        }
        Ok(())
    }

    /// MGET into owned values.
    ///
    /// # Errors
    /// As [`ShmReader::mget_with`].
    pub fn mget<K: AsRef<[u8]>>(&mut self, keys: &[K]) -> Result<Vec<OwnedItem>, ShmError> {
        let mut res = vec![None; keys.len()];
        self.mget_with(keys, |i, item| {
            res[i] = item.map(|(v, b)| (v, b.to_vec()));
        })?;
        Ok(res)
    }

    // ----- socket requests --------------------------------------------------------------

    fn call(&mut self, encode: impl FnOnce(&mut Vec<u8>, u64)) -> Result<Resp, ShmError> {
        self.ensure()?;
        let id = self.next_id;
        self.next_id += 1;
        self.wbuf.clear();
        encode(&mut self.wbuf, id);
        let r = self.call_io(id);
        if let Err(ShmError::Io(_)) | Err(ShmError::Disconnected) = &r {
            // The stream may be mid-frame: it cannot be reused.
            if let Some(s) = self.session.as_ref() {
                s.stale.store(true, Ordering::Release);
            }
        }
        let resp = r?;
        if let Some(s) = self.session.as_ref() {
            if resp.epoch != s.hello.epoch {
                // The node moved on: re-handshake before the next one-sided read.
                s.stale.store(true, Ordering::Release);
            }
        }
        Ok(resp)
    }

    fn call_io(&mut self, id: u64) -> Result<Resp, ShmError> {
        let Some(s) = self.session.as_ref() else {
            return Err(ShmError::Disconnected);
        };
        (&s.sock).write_all(&self.wbuf)?;
        self.read_response(id)
    }

    fn read_response(&mut self, id: u64) -> Result<Resp, ShmError> {
        let Some(s) = self.session.as_ref() else {
            return Err(ShmError::Disconnected);
        };
        let mut sock = &s.sock;
        let mut chunk = [0u8; 16 * 1024];
        // Bounded: each iteration reads at least one byte, and the buffer is capped.
        loop {
            match decode_response_frame(&self.rbuf) {
                Ok(Some((frame, n))) => {
                    let mut resp = Resp {
                        status: frame.status,
                        epoch: frame.epoch,
                        version: frame.version,
                        value: Vec::new(),
                        int: 0,
                    };
                    match frame.body {
                        ResponseBody::Value(v) | ResponseBody::Message(v) => {
                            resp.value.extend_from_slice(v)
                        }
                        ResponseBody::Int(i) => resp.int = i,
                        ResponseBody::Empty | ResponseBody::Values(_) => {}
                    }
                    let rid = frame.request_id;
                    self.rbuf.drain(..n);
                    if rid != id {
                        return Err(ShmError::Handshake("response to another request"));
                    }
                    return Ok(resp);
                }
                Ok(None) => {}
                Err(e) => return Err(ShmError::Decode(e)),
            }
            if self.rbuf.len() > limits::CONN_READ_BUFFER_BYTES_MAX as usize {
                return Err(ShmError::Handshake("response too large"));
            }
            let n = sock.read(&mut chunk)?;
            if n == 0 {
                return Err(ShmError::Disconnected);
            }
            self.rbuf.extend_from_slice(&chunk[..n]);
        }
    }

    fn server_error(resp: &Resp) -> ShmError {
        ShmError::Server {
            status: resp.status.0,
            message: String::from_utf8_lossy(&resp.value).into_owned(),
        }
    }

    fn rpc_get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<Option<Version>, ShmError> {
        let resp = self.call(|b, id| encode_get(b, id, key))?;
        out.clear();
        match resp.status {
            Status::OK => {
                out.extend_from_slice(&resp.value);
                Ok(Some(resp.version))
            }
            Status::NOT_FOUND => Ok(None),
            _ => Err(Self::server_error(&resp)),
        }
    }

    /// SET over the socket (the node orders every mutation). Returns the new version.
    ///
    /// # Errors
    /// [`ShmError::Server`] with the node's status; socket errors.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<Version, ShmError> {
        self.set_request(&SetRequest {
            key,
            value,
            ..SetRequest::default()
        })
        .and_then(|r| {
            r.ok_or(ShmError::Server {
                status: Status::NOT_STORED.0,
                message: "not stored".into(),
            })
        })
    }

    /// Any SET (conditions, TTL, version, CAS, memgest). `Ok(None)`: condition false.
    ///
    /// # Errors
    /// As [`ShmReader::set`].
    pub fn set_request(&mut self, req: &SetRequest<'_>) -> Result<Option<Version>, ShmError> {
        let resp = self.call(|b, id| encode_set(b, id, req))?;
        match resp.status {
            Status::OK => Ok(Some(resp.version)),
            Status::NOT_STORED | Status::CAS_MISMATCH => Ok(None),
            _ => Err(Self::server_error(&resp)),
        }
    }

    /// Many unconditional SETs in one round trip (frames written back to back, responses
    /// read in order). Stops at the first refused SET.
    ///
    /// # Errors
    /// As [`ShmReader::set`].
    pub fn set_many<'a>(
        &mut self,
        items: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<(), ShmError> {
        self.ensure()?;
        self.wbuf.clear();
        let first = self.next_id;
        for (key, value) in items {
            let id = self.next_id;
            self.next_id += 1;
            encode_set(
                &mut self.wbuf,
                id,
                &SetRequest {
                    key,
                    value,
                    ..SetRequest::default()
                },
            );
        }
        let last = self.next_id;
        let Some(s) = self.session.as_ref() else {
            return Err(ShmError::Disconnected);
        };
        if let Err(e) = (&s.sock).write_all(&self.wbuf) {
            s.stale.store(true, Ordering::Release);
            return Err(e.into());
        }
        self.wbuf.clear();
        for id in first..last {
            let r = self.read_response(id);
            let resp = match r {
                Ok(resp) => resp,
                Err(e) => {
                    if let Some(s) = self.session.as_ref() {
                        s.stale.store(true, Ordering::Release);
                    }
                    return Err(e);
                }
            };
            if resp.status != Status::OK {
                // The remaining responses are still in flight: this stream is done.
                if let Some(s) = self.session.as_ref() {
                    s.stale.store(true, Ordering::Release);
                }
                return Err(Self::server_error(&resp));
            }
        }
        Ok(())
    }

    /// DEL over the socket: whether the key existed.
    ///
    /// # Errors
    /// As [`ShmReader::set`].
    pub fn del(&mut self, key: &[u8]) -> Result<bool, ShmError> {
        let resp = self.call(|b, id| encode_del(b, id, key, None))?;
        match resp.status {
            Status::OK => Ok(true),
            Status::NOT_FOUND => Ok(false),
            _ => Err(Self::server_error(&resp)),
        }
    }

    /// INCRBY over the socket.
    ///
    /// # Errors
    /// As [`ShmReader::set`].
    pub fn incr_by(&mut self, key: &[u8], delta: i64) -> Result<i64, ShmError> {
        let resp = self.call(|b, id| encode_incr_by(b, id, key, delta))?;
        match resp.status {
            Status::OK => Ok(resp.int),
            _ => Err(Self::server_error(&resp)),
        }
    }

    /// PING over the socket: the node's epoch.
    ///
    /// # Errors
    /// Socket errors.
    pub fn ping(&mut self) -> Result<Epoch, ShmError> {
        Ok(self.call(encode_ping)?.epoch)
    }

    /// GET over the socket only (for comparisons and tests).
    ///
    /// # Errors
    /// As [`ShmReader::set`].
    pub fn get_rpc(&mut self, key: &[u8]) -> Result<Option<(Version, Vec<u8>)>, ShmError> {
        let mut out = Vec::new();
        Ok(self.rpc_get(key, &mut out)?.map(|v| (v, out)))
    }
}

/// A reader may be created on one thread and used on another (one thread at a time).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<ShmReader>();
};

impl Drop for ShmReader {
    fn drop(&mut self) {
        self.flush_access();
    }
}
