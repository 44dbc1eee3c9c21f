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
//!
//! # Huge pages
//! A one-sided GET at a million keys touches a random bucket and a random entry: with 4 KiB
//! pages nearly every read also misses the TLB, and under virtualisation each miss is a
//! two-dimensional page walk (up to 24 memory references). So a region asks for 2 MiB pages,
//! in this order of preference ([`HugePages`], `RINGLET_HUGE_PAGES`):
//! - `hugetlb` (opt-in): a memfd on hugetlbfs (`MFD_HUGETLB`), the whole region reserved from
//!   the pool by the mapping itself (no `MAP_NORESERVE`), so a later fault can never `SIGBUS`
//!   for want of a pool page. If the pool cannot hold the region, fall through. Punching is
//!   replaced by zeroing with word stores: a punched hugetlb range gives its reservation back
//!   and a later write there could `SIGBUS` if another process took the page meanwhile, and
//!   pool pages are dedicated memory anyway (nothing else could use what we gave back).
//! - `thp` (default): a plain shmem memfd plus `madvise(MADV_HUGEPAGE)`. It takes effect only
//!   if the kernel's shmem THP setting allows advised mappings
//!   (`/sys/kernel/mm/transparent_hugepage/shmem_enabled` = `advise`, `within_size`, `always`
//!   or `force`; distributions ship `never`: the setup step is `echo advise > ...`). Pages are
//!   still committed on first touch and punched on shrink, but at 2 MiB grain while a huge
//!   page is whole (a punch inside one splits it; khugepaged may collapse it again).
//! - `off`, or whatever the kernel refused: 4 KiB pages, as before. Every mode gives the same
//!   semantics (sparse, zero-filled, punch reads as zeros), only the speed differs.

use crate::api::Error;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// One reserved shared mapping.
pub struct Mapping {
    fd: OwnedFd,
    ptr: *mut u8,
    len: usize,
    backing: PageBacking,
}

/// Which pages a region asks for (process-wide: [`set_huge_pages`], or the environment
/// variable `RINGLET_HUGE_PAGES` = `off` | `thp` | `hugetlb`, read once; default `thp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HugePages {
    /// 4 KiB pages only.
    Off,
    /// Transparent huge pages by `madvise(MADV_HUGEPAGE)` (no effect unless the kernel's
    /// shmem THP setting allows advised mappings).
    Transparent,
    /// hugetlbfs pages reserved for the whole region, else as `Transparent`.
    Hugetlb,
}

/// What a region actually got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageBacking {
    /// 4 KiB pages.
    Base,
    /// Advised for transparent huge pages, and the kernel's shmem setting honours the advice.
    Transparent,
    /// hugetlbfs pages, reserved for the whole region.
    Hugetlb,
}

impl PageBacking {
    /// `base`, `thp` or `hugetlb` (stats, benchmark output).
    pub fn name(self) -> &'static str {
        match self {
            PageBacking::Base => "base",
            PageBacking::Transparent => "thp",
            PageBacking::Hugetlb => "hugetlb",
        }
    }
}

/// 0 = unset (read the environment), else `HugePages` + 1.
static HUGE_PAGES: AtomicU8 = AtomicU8::new(0);

/// Choose the pages of regions created from now on in this process (a server flag or a test
/// sets it before creating its engine).
pub fn set_huge_pages(h: HugePages) {
    HUGE_PAGES.store(h as u8 + 1, Ordering::Relaxed);
}

/// The policy regions are created with now.
pub fn huge_pages() -> HugePages {
    let from = |v: u8| match v {
        1 => HugePages::Off,
        3 => HugePages::Hugetlb,
        _ => HugePages::Transparent,
    };
    match HUGE_PAGES.load(Ordering::Relaxed) {
        0 => {
            let h = match std::env::var("RINGLET_HUGE_PAGES").as_deref() {
                Ok("off") | Ok("0") | Ok("no") => HugePages::Off,
                Ok("hugetlb") => HugePages::Hugetlb,
                _ => HugePages::Transparent,
            };
            HUGE_PAGES.store(h as u8 + 1, Ordering::Relaxed);
            h
        }
        v => from(v),
    }
}

/// Size of a huge page (x86-64 and aarch64 with 4 KiB base pages: 2 MiB).
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Whether the kernel backs advised shmem mappings with huge pages: the bracketed word of
/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled`.
pub fn shmem_thp_honoured() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .ok()
        .and_then(|s| {
            let a = s.find('[')?;
            let b = s[a..].find(']')? + a;
            Some(matches!(
                &s[a + 1..b],
                "advise" | "within_size" | "always" | "force"
            ))
        })
        .unwrap_or(false)
}

// SAFETY: the mapping is plain shared memory accessed only through atomics; the pointer is
// valid for `len` bytes until drop.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Mapping {
    /// Reserve `len` bytes (a multiple of 4 KiB) of a new memfd named `name`, with the
    /// process's [`huge_pages`] policy.
    ///
    /// # Errors
    /// [`Error::Os`] if the kernel refuses the memfd, the size or the mapping.
    pub fn new(name: &str, len: usize) -> Result<Mapping, Error> {
        Mapping::with_pages(name, len, huge_pages())
    }

    /// [`Mapping::new`] with an explicit policy. Huge pages are best effort: a region the
    /// kernel cannot back with them gets 4 KiB pages ([`Mapping::backing`] says which).
    ///
    /// # Errors
    /// As [`Mapping::new`].
    pub fn with_pages(name: &str, len: usize, pages: HugePages) -> Result<Mapping, Error> {
        let cname = std::ffi::CString::new(name).map_err(|_| Error::Os { errno: 0 })?;
        if pages == HugePages::Hugetlb {
            if let Some(m) = Mapping::hugetlb(&cname, len) {
                return Ok(m);
            }
        }
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
            let ptr = map_aligned(
                fd.as_raw_fd(),
                len,
                libc::MAP_NORESERVE,
                pages != HugePages::Off,
            )
            .ok_or_else(|| Error::Os { errno: errno() })?;
            let mut backing = PageBacking::Base;
            if pages != HugePages::Off
                && libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE) == 0
                && shmem_thp_honoured()
            {
                backing = PageBacking::Transparent;
            }
            Ok(Mapping {
                fd,
                ptr,
                len,
                backing,
            })
        }
    }

    /// A hugetlbfs memfd of `len` rounded up to whole huge pages, every page reserved by the
    /// mapping; `None` if the kernel or the pool refuses (the caller falls back).
    fn hugetlb(cname: &std::ffi::CStr, len: usize) -> Option<Mapping> {
        let len = len.checked_next_multiple_of(HUGE_PAGE_BYTES)?;
        // SAFETY: plain syscalls with valid arguments; results checked; the descriptor is
        // owned at once so every early return closes it.
        unsafe {
            let fd = libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_HUGETLB);
            if fd < 0 {
                return None;
            }
            let fd = OwnedFd::from_raw_fd(fd);
            if libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) != 0 {
                return None;
            }
            // No MAP_NORESERVE: the mapping reserves every page now or fails now (ENOMEM).
            let ptr = map_aligned(fd.as_raw_fd(), len, 0, false)?;
            Some(Mapping {
                fd,
                ptr,
                len,
                backing: PageBacking::Hugetlb,
            })
        }
    }

    /// The pages this region got.
    pub fn backing(&self) -> PageBacking {
        self.backing
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
        if self.backing == PageBacking::Hugetlb {
            // Zero instead of punching: see the module comment (a punched hugetlb range loses
            // its reservation). Word stores: readers may be loading the same words.
            let end = off.saturating_add(len).min(self.len as u64) & !7;
            let mut o = (off + 7) & !7;
            while o < end {
                self.store(o, 0);
                o += 8;
            }
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

/// `mmap` `len` bytes of `fd` shared and read-write at an address aligned to
/// [`HUGE_PAGE_BYTES`] when `align` (a huge page can only be mapped by one page-table entry
/// at an aligned address; the kernel aligns shmem itself only when shmem THP is on globally).
/// `None` on failure (errno set).
///
/// # Safety
/// `fd` must be a descriptor of at least `len` bytes.
unsafe fn map_aligned(fd: RawFd, len: usize, flags: i32, align: bool) -> Option<*mut u8> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let mut hint = std::ptr::null_mut();
    let mut fixed = 0;
    let mut reserved = None;
    if align {
        // Reserve len + one huge page of address space, then map the file at the first
        // aligned address inside it (MAP_FIXED replaces that part of the reservation).
        let span = len.checked_add(HUGE_PAGE_BYTES)?;
        let r = libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if r != libc::MAP_FAILED {
            let a = (r as usize).next_multiple_of(HUGE_PAGE_BYTES);
            hint = a as *mut libc::c_void;
            fixed = libc::MAP_FIXED;
            reserved = Some((r as usize, span, a));
        }
    }
    let ptr = libc::mmap(hint, len, prot, libc::MAP_SHARED | flags | fixed, fd, 0);
    if let Some((r, span, a)) = reserved {
        if ptr == libc::MAP_FAILED {
            libc::munmap(r as *mut libc::c_void, span);
            return None;
        }
        // Give back the unused head and tail of the reservation.
        if a > r {
            libc::munmap(r as *mut libc::c_void, a - r);
        }
        let tail = a + len.next_multiple_of(4096);
        if r + span > tail {
            libc::munmap(tail as *mut libc::c_void, r + span - tail);
        }
    }
    (ptr != libc::MAP_FAILED).then_some(ptr.cast())
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once; no reference outlives the last Arc.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every policy gives a working region whatever the kernel offers (no huge pages, THP
    /// only with `shmem_enabled` = advise, a hugetlb pool or none): words written read back,
    /// a punched range reads as zeros and its neighbours keep their values, and the backing
    /// reported is one the policy allows on this machine.
    #[test]
    fn every_page_policy_gives_a_working_region() {
        let len = 3 * HUGE_PAGE_BYTES + 64 * 1024;
        for pages in [HugePages::Off, HugePages::Transparent, HugePages::Hugetlb] {
            let m = Mapping::with_pages("ringlet-test", len, pages).unwrap();
            assert!(m.len() >= len, "{pages:?}");
            let thp = if shmem_thp_honoured() {
                PageBacking::Transparent
            } else {
                PageBacking::Base
            };
            match pages {
                HugePages::Off => assert_eq!(m.backing(), PageBacking::Base),
                HugePages::Transparent => assert_eq!(m.backing(), thp),
                HugePages::Hugetlb => assert!(
                    m.backing() == PageBacking::Hugetlb || m.backing() == thp,
                    "{:?}",
                    m.backing()
                ),
            }
            if m.backing() != PageBacking::Base {
                assert_eq!(m.base() as usize % HUGE_PAGE_BYTES, 0, "{pages:?}");
            }
            let step = 4096u64;
            let mut off = 0;
            while off + 8 <= m.len() as u64 {
                m.store(off, off ^ 0x5a5a);
                off += step;
            }
            // A punch inside one huge page (a slab page) and one over whole huge pages (a
            // freed index table).
            let ranges = [
                (HUGE_PAGE_BYTES as u64 + 64 * 1024, 64 * 1024),
                (0, 2 * HUGE_PAGE_BYTES as u64),
            ];
            for (p, n) in ranges {
                m.punch(p, n);
                let mut off = 0;
                while off + 8 <= m.len() as u64 {
                    let want = if off >= p && off < p + n {
                        0
                    } else {
                        off ^ 0x5a5a
                    };
                    assert_eq!(m.load(off), want, "{pages:?} {:?} at {off}", m.backing());
                    off += step;
                }
                let mut off = 0;
                while off + 8 <= m.len() as u64 {
                    m.store(off, off ^ 0x5a5a);
                    off += step;
                }
            }
        }
    }
}
