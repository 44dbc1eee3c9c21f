//! A memfd-backed shared mapping of a fixed reserved size.
//!
//! The whole range is reserved once (`ftruncate` of a sparse memfd + one `mmap`), so addresses
//! never move for in-process readers; pages are committed by the first write to them and given
//! back with `fallocate(PUNCH_HOLE)`, after which they read as zeros (never a fault). Readers
//! therefore never touch unmapped memory, and the mapping lives as long as any `Arc<Mapping>`.
//!
//! All access is through 64-bit atomics: the writer stores, readers load. Mixing atomic and
//! non-atomic access to the same bytes from two threads would be a data race (UB) in Rust's
//! model; with atomics only, a torn *entry* is possible (several words) but every word is
//! well-defined, and the checksum decides.

use crate::api::Error;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// One reserved shared mapping.
pub struct Mapping {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory accessed only through atomics; the pointer is
// valid for `len` bytes until drop.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Mapping {
    /// Reserve `len` bytes (a multiple of 4 KiB) of a new memfd named `name`.
    ///
    /// # Errors
    /// [`Error::Os`] if the kernel refuses the memfd, the size or the mapping.
    pub fn new(name: &str, len: usize) -> Result<Mapping, Error> {
        let cname = std::ffi::CString::new(name).map_err(|_| Error::Os { errno: 0 })?;
        // SAFETY: plain syscalls with valid arguments; results checked.
        unsafe {
            let fd = libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(Error::Os { errno: errno() });
            }
            let fd = OwnedFd::from_raw_fd(fd);
            if libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) != 0 {
                return Err(Error::Os { errno: errno() });
            }
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd.as_raw_fd(),
                0,
            );
            if ptr == libc::MAP_FAILED {
                return Err(Error::Os { errno: errno() });
            }
            Ok(Mapping {
                fd,
                ptr: ptr.cast(),
                len,
            })
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn base(&self) -> *const u8 {
        self.ptr
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The atomic word at byte offset `off`.
    ///
    /// # Panics
    /// If `off` is unaligned or out of range: a caller bug (offsets come from the writer's own
    /// bookkeeping, never from outside).
    #[inline]
    pub fn word(&self, off: u64) -> &AtomicU64 {
        assert!(off & 7 == 0 && off + 8 <= self.len as u64, "word {off}");
        // SAFETY: in range, aligned, and the memory is only accessed atomically.
        unsafe { &*(self.ptr.add(off as usize) as *const AtomicU64) }
    }

    #[inline]
    pub fn load(&self, off: u64) -> u64 {
        self.word(off).load(Ordering::Relaxed)
    }

    #[inline]
    pub fn store(&self, off: u64, v: u64) {
        self.word(off).store(v, Ordering::Relaxed)
    }

    /// Write `bytes` (length a multiple of 8) at `off` with word stores.
    ///
    /// # Panics
    /// If the range is unaligned or out of the mapping: a caller bug.
    pub fn write_bytes(&self, off: u64, bytes: &[u8]) {
        assert!(
            off & 7 == 0 && bytes.len() & 7 == 0 && off + bytes.len() as u64 <= self.len as u64,
            "write {off}+{}",
            bytes.len()
        );
        // SAFETY: range checked once above; aligned; accessed only atomically.
        let words = unsafe {
            std::slice::from_raw_parts(
                self.ptr.add(off as usize) as *const AtomicU64,
                bytes.len() / 8,
            )
        };
        for (w, c) in words.iter().zip(bytes.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            w.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
    }

    /// Copy `len` bytes (a multiple of 8) at `off` into `out` (appended) with word loads.
    ///
    /// # Panics
    /// If the range is unaligned or out of the mapping: a caller bug.
    pub fn read_bytes(&self, off: u64, len: usize, out: &mut Vec<u8>) {
        assert!(
            off & 7 == 0 && len & 7 == 0 && off + len as u64 <= self.len as u64,
            "read {off}+{len}"
        );
        // SAFETY: as in `write_bytes`.
        let words = unsafe {
            std::slice::from_raw_parts(self.ptr.add(off as usize) as *const AtomicU64, len / 8)
        };
        out.reserve(len);
        for w in words {
            out.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
    }

    /// Give `[off, off + len)` back to the OS; it reads as zeros afterwards.
    pub fn punch(&self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        // SAFETY: a range of our own memfd. Failure only leaves memory committed; it is not
        // an error for correctness, so it is ignored (and counted by the caller as not freed
        // only in the sense that RSS stays).
        unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            );
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once; no reference outlives the last Arc.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}
