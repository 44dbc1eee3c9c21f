//! The validity region: what a cluster node lets one-sided readers check before and after
//! they read its engine regions (docs/design/cluster-shm-reads.md).
//!
//! A cluster node may answer a read of a key from its engine only while it coordinates the
//! key's slot with a complete copy, holds its lease, has no write of the key in flight and the
//! entry is a value (not an ec pointer). The node's own fronts check exactly that
//! (`ClusterNode::fast_get`); a reader in another process cannot call into the node, so the
//! node keeps the same facts in a small memfd it exports read-only beside the engine's two:
//!
//! ```text
//!  word  0: magic "RINGLVAL"        word 1: format (1)
//!  word  2: seq — even: stable; odd: the node is rewriting words 3..=5 and the bitmaps
//!  word  3: epoch                   word 4: lease deadline, CLOCK_MONOTONIC ms (0: none)
//!  word  5: engine generation (the engine whose regions readers must have mapped)
//!  word  8..264:    servable slots, one bit per slot (16,384)
//!  word  264..1288: ec memgests, one bit per memgest id (65,536)
//!  byte  1288*8..:  in-flight counters, 65,536 × u32, indexed by key hash bits 32..48
//! ```
//!
//! Why a lease *deadline* and not a flag the node clears when the lease lapses: a node that is
//! SIGSTOPped, wedged or killed clears nothing, and it is precisely the deposed coordinator
//! whose regions must stop validating. The reader compares the deadline with its own reading
//! of the same host's monotonic clock, so the region goes invalid by itself.
//!
//! Why the counters are outside the seqlock: they change with every write (twice), the slot
//! and ec bitmaps only with maps and rebuilds. A counter is raised before the write's first
//! message leaves the node and lowered after its committed value is in the engine, like the
//! node's private mirror (`ringlet_replica::InflightKeys`), so one acquire load before the
//! engine read is what the reader needs (argument in the design note).
//!
//! Single writer: the node's driver thread. Readers never write (their mapping is read-only).

use ringlet_types::{MemgestId, Slot, SLOT_COUNT};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// "RINGLVAL".
pub const VALIDITY_MAGIC: u64 = u64::from_be_bytes(*b"RINGLVAL");
/// Format of the region; a reader refuses any other.
pub const VALIDITY_FORMAT: u64 = 1;
const W_MAGIC: usize = 0;
const W_FORMAT: usize = 1;
const W_SEQ: usize = 2;
const W_EPOCH: usize = 3;
const W_LEASE: usize = 4;
const W_ENGINE: usize = 5;
const W_SLOTS: usize = 8;
const SLOT_WORDS: usize = SLOT_COUNT as usize / 64;
const W_EC: usize = W_SLOTS + SLOT_WORDS;
const EC_WORDS: usize = (u16::MAX as usize + 1) / 64;
const W_INFLIGHT: usize = W_EC + EC_WORDS;
/// In-flight counters (as many as the node's private mirror: under 5% false positives with a
/// few thousand writes in flight).
pub const INFLIGHT_COUNTERS: usize = 1 << 16;
const USED_BYTES: usize = W_INFLIGHT * 8 + INFLIGHT_COUNTERS * 4;
/// Bytes of the region (whole pages: it is mapped).
pub const VALIDITY_BYTES: usize = USED_BYTES.div_ceil(4096) * 4096;
const _: () = assert!((SLOT_COUNT as usize).is_multiple_of(64));
const _: () = assert!(VALIDITY_BYTES >= USED_BYTES && VALIDITY_BYTES < 1 << 20);

/// Counter of a key, from the engine's key hash (bits the bucket choice and tag do not use
/// alone; any fixed function would do, both sides compute it from the same hash).
#[inline]
pub fn inflight_index(key_hash: u64) -> usize {
    (key_hash >> 32) as usize & (INFLIGHT_COUNTERS - 1)
}

/// This host's CLOCK_MONOTONIC in ms (the same clock in every process of the host).
pub fn monotonic_ms() -> u64 {
    clock_ms(libc::CLOCK_MONOTONIC)
}

fn clock_ms(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe {
        libc::clock_gettime(clock, &mut ts);
    }
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// CLOCK_MONOTONIC_COARSE rounded *up* by its resolution (+1 ms for the truncation): never
/// earlier than the real monotonic time, so a lease deadline can only look passed too early.
pub fn monotonic_coarse_ms_upper(res_ms: u64) -> u64 {
    clock_ms(libc::CLOCK_MONOTONIC_COARSE) + res_ms + 1
}

/// Resolution of CLOCK_MONOTONIC_COARSE in ms, at least 1.
pub fn monotonic_coarse_res_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out pointer.
    unsafe {
        libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts);
    }
    ((ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64).div_ceil(1_000_000)).max(1)
}

/// Why a one-sided read was not answered from shared memory (the caller reads over the
/// network instead). Counted per reason by the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// The node's lease lapsed (or it never had one): it may have been deposed.
    Lease,
    /// The node does not serve this slot from its engine now (not coordinator, rebuilding).
    NotServed,
    /// A write of the key may be in flight.
    InFlight,
    /// The entry belongs to an ec memgest: the engine holds a pointer into the SRS arena,
    /// which only the node decodes.
    Ec,
    /// The node changed its snapshot (map, ranges, engine) during the read.
    Changed,
    /// The engine's reader could not validate the entry (torn, moved, layout change).
    Retry,
    /// The session maps another engine than the node now exports (reconnect pending).
    Engine,
    /// The key holds a record (a hash to Redis clients): the network path answers the type
    /// error.
    Kind,
    /// No session (node unreachable) or the reader is not connected to a cluster node.
    Unavailable,
}

/// A mapping of the region (read-write on the node, read-only in readers).
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned (unmapped once on drop) and only accessed through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above: every access is an atomic load or store.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(fd: RawFd, writable: bool) -> io::Result<Mapping> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: mapping a descriptor of at least VALIDITY_BYTES (checked by callers).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                VALIDITY_BYTES,
                prot,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len: VALIDITY_BYTES,
        })
    }

    #[inline]
    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!((i + 1) * 8 <= self.len);
        // SAFETY: i < W_INFLIGHT (callers use the constants above), inside the mapping,
        // 8-aligned (page-aligned base); the memory lives as long as `self`.
        unsafe { &*(self.ptr.add(i * 8) as *const AtomicU64) }
    }

    #[inline]
    fn counter(&self, i: usize) -> &AtomicU32 {
        let i = i & (INFLIGHT_COUNTERS - 1);
        // SAFETY: inside the mapping (USED_BYTES <= len), 4-aligned.
        unsafe { &*(self.ptr.add(W_INFLIGHT * 8 + i * 4) as *const AtomicU32) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// The node side: creates the memfd and keeps it current. One per node process; only the
/// driver thread calls the `publish`/`set_lease`/`inflight_*` methods.
pub struct ValidityWriter {
    fd: OwnedFd,
    map: Mapping,
}

impl ValidityWriter {
    /// A fresh region: no lease, no slot served (every read falls back until the first
    /// publish).
    ///
    /// # Errors
    /// memfd creation, sizing or mapping failed.
    pub fn create() -> io::Result<ValidityWriter> {
        // SAFETY: a NUL-terminated name; the result is checked.
        let raw = unsafe { libc::memfd_create(c"ringlet-validity".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor we just created and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: valid descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), VALIDITY_BYTES as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Mapping::map(fd.as_raw_fd(), true)?;
        map.word(W_FORMAT).store(VALIDITY_FORMAT, Ordering::Relaxed);
        map.word(W_MAGIC).store(VALIDITY_MAGIC, Ordering::Release);
        Ok(ValidityWriter { fd, map })
    }

    /// The read-write descriptor (the exporter re-opens it read-only for clients).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Replace the snapshot: epoch, engine generation, servable slot ranges, ec memgests.
    /// Readers that overlap this call see `seq` move and fall back.
    pub fn publish(
        &self,
        epoch: u64,
        engine_generation: u64,
        ranges: &[(Slot, Slot)],
        ec: &[MemgestId],
    ) {
        let m = &self.map;
        let seq = m.word(W_SEQ).load(Ordering::Relaxed);
        m.word(W_SEQ).store(seq | 1, Ordering::Relaxed);
        // The odd seq is visible before any word below changes.
        fence(Ordering::Release);
        m.word(W_EPOCH).store(epoch, Ordering::Relaxed);
        m.word(W_ENGINE).store(engine_generation, Ordering::Relaxed);
        let mut bits = [0u64; SLOT_WORDS];
        for &(a, b) in ranges {
            // Bounded by SLOT_COUNT per range; ranges never overlap.
            for s in a..=b.min(SLOT_COUNT - 1) {
                bits[s as usize / 64] |= 1 << (s % 64);
            }
        }
        for (i, b) in bits.iter().enumerate() {
            m.word(W_SLOTS + i).store(*b, Ordering::Relaxed);
        }
        let mut ecb = [0u64; EC_WORDS];
        for g in ec {
            ecb[g.0 as usize / 64] |= 1 << (g.0 % 64);
        }
        for (i, b) in ecb.iter().enumerate() {
            m.word(W_EC + i).store(*b, Ordering::Relaxed);
        }
        m.word(W_SEQ)
            .store((seq | 1).wrapping_add(1), Ordering::Release);
    }

    /// The lease deadline on this host's CLOCK_MONOTONIC in ms (0: no lease). Not under the
    /// seqlock: readers load it before and after their engine read.
    pub fn set_lease(&self, until_monotonic_ms: u64) {
        self.map
            .word(W_LEASE)
            .store(until_monotonic_ms, Ordering::Release);
    }

    /// A write of the key with this engine hash may now be in flight: called before its
    /// first message leaves the node.
    pub fn inflight_add(&self, key_hash: u64) {
        self.map
            .counter(inflight_index(key_hash))
            .fetch_add(1, Ordering::SeqCst);
    }

    /// Undo one [`ValidityWriter::inflight_add`] (after the committed value is in the engine,
    /// or the write ended otherwise). Never below zero.
    pub fn inflight_remove(&self, key_hash: u64) {
        let _ = self.map.counter(inflight_index(key_hash)).fetch_update(
            Ordering::SeqCst,
            Ordering::SeqCst,
            |v| v.checked_sub(1),
        );
    }
}

/// The reader side over a read-only mapping received in HELLO.
pub struct ValidityView {
    map: Mapping,
}

/// What a reader saw before its engine read; checked again after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    seq: u64,
}

impl ValidityView {
    /// Map `fd` read-only and check magic and format.
    ///
    /// # Errors
    /// `InvalidData` for a region that is too small or of another format; mmap errors.
    pub fn map(fd: RawFd) -> io::Result<ValidityView> {
        let len = crate::fdpass::file_len(fd)?;
        if len < VALIDITY_BYTES as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "validity region too small",
            ));
        }
        let map = Mapping::map(fd, false)?;
        if map.word(W_MAGIC).load(Ordering::Acquire) != VALIDITY_MAGIC
            || map.word(W_FORMAT).load(Ordering::Relaxed) != VALIDITY_FORMAT
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "validity region of another format",
            ));
        }
        Ok(ValidityView { map })
    }

    /// The engine generation the node exports now.
    pub fn engine_generation(&self) -> u64 {
        self.map.word(W_ENGINE).load(Ordering::Acquire)
    }

    /// The epoch of the node's current snapshot.
    pub fn epoch(&self) -> u64 {
        self.map.word(W_EPOCH).load(Ordering::Acquire)
    }

    /// Before the engine read: may this node answer `key` (hash `h`, slot `slot`) from its
    /// engine now, for a session that mapped engine `engine_generation`?
    ///
    /// # Errors
    /// The reason to read over the network instead.
    #[inline]
    pub fn begin(
        &self,
        slot: Slot,
        h: u64,
        engine_generation: u64,
        now_upper_ms: u64,
    ) -> Result<Ticket, Fallback> {
        let m = &self.map;
        let seq = m.word(W_SEQ).load(Ordering::Acquire);
        if seq & 1 != 0 {
            return Err(Fallback::Changed);
        }
        if now_upper_ms >= m.word(W_LEASE).load(Ordering::Acquire) {
            return Err(Fallback::Lease);
        }
        if m.word(W_ENGINE).load(Ordering::Relaxed) != engine_generation {
            return Err(Fallback::Engine);
        }
        let s = slot as usize;
        if s >= SLOT_COUNT as usize
            || m.word(W_SLOTS + s / 64).load(Ordering::Relaxed) & (1 << (s % 64)) == 0
        {
            return Err(Fallback::NotServed);
        }
        if m.counter(inflight_index(h)).load(Ordering::Acquire) != 0 {
            return Err(Fallback::InFlight);
        }
        Ok(Ticket { seq })
    }

    /// After the engine read (of an entry of `memgest`, if it was a hit): did everything
    /// [`ValidityView::begin`] checked still hold? `now_upper_ms` must be read *after* the
    /// engine read.
    ///
    /// # Errors
    /// The reason to discard the value and read over the network instead.
    #[inline]
    pub fn end(
        &self,
        t: Ticket,
        memgest: Option<MemgestId>,
        now_upper_ms: u64,
    ) -> Result<(), Fallback> {
        let m = &self.map;
        if let Some(g) = memgest {
            let g = g.0 as usize;
            if m.word(W_EC + g / 64).load(Ordering::Relaxed) & (1 << (g % 64)) != 0 {
                return Err(Fallback::Ec);
            }
        }
        // Everything read above (and the engine read before it) happens before the re-check.
        fence(Ordering::Acquire);
        if m.word(W_SEQ).load(Ordering::Relaxed) != t.seq {
            return Err(Fallback::Changed);
        }
        if now_upper_ms >= m.word(W_LEASE).load(Ordering::Acquire) {
            return Err(Fallback::Lease);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_then_check_each_condition() {
        let w = ValidityWriter::create().unwrap_or_else(|e| panic!("{e}"));
        let ro = crate::fdpass::reopen_read_only(w.fd()).unwrap_or_else(|e| panic!("{e}"));
        let v = ValidityView::map(ro.as_raw_fd()).unwrap_or_else(|e| panic!("{e}"));
        let now = monotonic_ms();
        assert_eq!(v.begin(5, 7, 1, now), Err(Fallback::Lease));
        w.set_lease(now + 10_000);
        assert_eq!(v.begin(5, 7, 1, now), Err(Fallback::Engine));
        w.publish(3, 1, &[(0, 9), (100, 200)], &[MemgestId(4)]);
        let t = v.begin(5, 7, 1, now).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(v.end(t, Some(MemgestId(1)), now), Ok(()));
        assert_eq!(v.end(t, Some(MemgestId(4)), now), Err(Fallback::Ec));
        assert_eq!(v.begin(10, 7, 1, now).err(), Some(Fallback::NotServed));
        assert!(v.begin(200, 7, 1, now).is_ok());
        let h = 0xabcd_0000_0000u64;
        w.inflight_add(h);
        assert_eq!(v.begin(5, h, 1, now).err(), Some(Fallback::InFlight));
        w.inflight_remove(h);
        w.inflight_remove(h); // never below zero
        assert!(v.begin(5, h, 1, now).is_ok());
        // A publish between begin and end invalidates the read.
        let t = v.begin(5, 7, 1, now).unwrap_or_else(|e| panic!("{e:?}"));
        w.publish(4, 1, &[(0, 9)], &[]);
        assert_eq!(v.end(t, None, now), Err(Fallback::Changed));
        assert_eq!(v.epoch(), 4);
        // The deadline passing is enough: the node does nothing.
        assert_eq!(v.begin(5, 7, 1, now + 10_000).err(), Some(Fallback::Lease));
        let t = v.begin(5, 7, 1, now).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(v.end(t, None, now + 10_001), Err(Fallback::Lease));
    }

    #[test]
    fn read_only_mapping_cannot_be_made_writable() {
        let w = ValidityWriter::create().unwrap_or_else(|e| panic!("{e}"));
        let ro = crate::fdpass::reopen_read_only(w.fd()).unwrap_or_else(|e| panic!("{e}"));
        assert!(Mapping::map(ro.as_raw_fd(), true).is_err());
    }
}
