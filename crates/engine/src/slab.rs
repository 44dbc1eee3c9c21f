//! Data-region allocator: size-class slabs over 128 KiB pages, and page runs for large entries.
//!
//! Everything is counted in 8-byte units (the index's `location` and `size` unit).
//!
//! - Size classes step by 8 B up to 256 B (where most keys of a cache live, so the rounding
//!   waste of a 100–200 B entry is at most 7 B); above that a class is the largest size that
//!   fits `n` entries in a page, `floor(page / n)`, one class per `n` (see [`make_classes`]),
//!   up to 16 KiB. Entries above 16 KiB take a run of whole pages; the tail of the last page
//!   is never written, so it is never committed by the OS.
//! - A slab is one page of one class, with an occupancy bitmap on the writer's heap.
//! - Pages come from a first-fit free-run map (coalescing) over the reserved range. A page that
//!   becomes free stays committed ("dirty") for reuse — a slab that empties and refills under
//!   churn costs no page faults — but only up to a small reserve (1/64 of the budget, at most
//!   32 pages, 4 MiB): `release` (each tick, and at once past 4× the reserve) punches the rest out of
//!   the memfd, so memory returns to the OS when the corpus shrinks. A run freed at the top of
//!   the used range is punched at once (and the high-water mark lowered) only past the
//!   reserve: within it, a large entry rewritten in turn reuses its warm pages (session 25).
//! - The budget (`memory_bytes_max`) caps committed bytes: 128 KiB per slab, and large entries
//!   rounded up to 4 KiB (the OS page). The allocator refuses past it; the store then evicts.

use crate::layout::{PAGE_BYTES, UNIT_BYTES};
use crate::region::Mapping;
use std::collections::{BTreeMap, BTreeSet};

const PAGE_UNITS: u64 = PAGE_BYTES / UNIT_BYTES;
/// Largest class in units (16 KiB).
pub const CLASS_UNITS_MAX: u32 = 2048;
const OS_PAGE: u64 = 4096;

/// Size classes in units, ascending: the *fine* table if `fine`, else the coarse one.
///
/// Both have every unit from the 32-byte minimum to 256 B (32 units). Above that the fine
/// table has one class per count of entries a 128 KiB page holds, `floor(PAGE_UNITS / n)`
/// for `n` = 512 down to 8 (16 KiB): 245 classes, every 8 B up to 1 KiB, where `n` changes
/// with every unit. The coarse table steps by 1/16 of the size as before session 19, each
/// class raised to the largest size with its `n` (97 classes, from 101: raising merges a
/// few; a page never fits fewer entries of a size than in the old table).
///
/// Why (issue 16, session 19): what an entry really costs is its page share, `PAGE_UNITS /
/// n` for the `n` entries its class fits in a page, not its class size. Until session 18 the
/// classes stepped by 1/16 of the size, and a class was rarely the largest size with its
/// `n`: a 1 KiB value with a 19-byte key (1,064 B) took the 1,096 B class, 59 to a 64 KiB
/// page, with 872 B of page tail — 1,111 B per entry, 47 B beyond the entry. In the fine
/// table its class is 1,064 B (123 to a 128 KiB page, 200 B of tail): 1,066 B per entry
/// (1,074 with one class per `n` over 64 KiB pages, the first step of session 19; the page
/// doubled for the rest, see [`PAGE_BYTES`]). The class of a given `n` cannot be made
/// larger (it would fit `n - 1`), and between two consecutive `n` no size is cheaper than
/// the larger class, so for entries of one page's slabs the fine table is the least memory
/// any class table gives; the page tail (fewer than `n` units) is below 8 B per entry.
///
/// Its cost is the class count: a class in use keeps a partly filled slab for new entries,
/// so entry sizes spread over many classes hold up to a page per class in use (245 × 128
/// KiB = 31 MiB at worst) — against ~2-3 % of the data saved in rounding and page tails.
/// That trade pays from a few hundred MiB of budget up and loses below (an 8 MiB engine
/// whose values spread over 256 B–1 KiB could not hold 1.2 MB of them), so [`Slabs::new`]
/// takes the fine table only when a page per fine class is at most
/// 1/[`FINE_CLASSES_BUDGET_SHARE`] of the budget (≥ 490 MiB), the coarse one otherwise.
/// Above 8 KiB a page holds few entries (8 to 15) in either table and consecutive classes
/// are 6-11 % apart (e.g. 8,736 and 9,360 B).
fn make_classes(fine: bool) -> Vec<u32> {
    let mut c: Vec<u32> = (4..32).collect(); // the 20-byte short header with a tiny key: 32 B
    let push = |c: &mut Vec<u32>, u: u64| {
        // The largest size with the same count per page.
        let u = (PAGE_UNITS / (PAGE_UNITS / u)) as u32;
        if c.last().is_none_or(|&l| l < u) {
            c.push(u);
        }
    };
    if fine {
        let per_page_max = PAGE_UNITS / 32;
        let per_page_min = PAGE_UNITS / u64::from(CLASS_UNITS_MAX);
        for n in (per_page_min..=per_page_max).rev() {
            push(&mut c, PAGE_UNITS / n);
        }
    } else {
        let mut u = 32u64;
        while u <= u64::from(CLASS_UNITS_MAX) {
            push(&mut c, u);
            u += (u / 16).max(1);
        }
        push(&mut c, u64::from(CLASS_UNITS_MAX));
    }
    debug_assert_eq!(c.last(), Some(&CLASS_UNITS_MAX));
    c
}

/// The fine class table is used when one page per fine class is at most this share of the
/// budget (see [`make_classes`]): 1/16, so that partly filled slabs of every class together
/// cost at most ~6 % of the budget.
pub const FINE_CLASSES_BUDGET_SHARE: u64 = 16;

/// The slabs by page: a dense vector indexed by page number for the lookups of every
/// allocation and free (a `BTreeMap` search there was a measured share of a SET: a few
/// dependent cache misses per free at thousands of slabs), and the ordered set of slab pages
/// for the walks in page order (eviction's CLOCK hand, compaction). The vector grows to the
/// highest slab page ever used (at most the reservation's page count, ~48 B per page).
#[derive(Default)]
struct SlabTable {
    by_page: Vec<Option<Slab>>,
    /// Per page as `by_page`: the address of the slab's bitmap above its class (16 bits),
    /// or 0. Only for prefetch hints ([`Slabs::prefetch_free`]): 8 B a page against the
    /// record's 48, so it stays cached where the records and bitmaps do not, and a SET can
    /// ask for the bitmap word it will clear without first waiting for the record. The
    /// address is never dereferenced (a prefetch of any address is harmless, and one cut to
    /// 48 bits on a machine with wider user addresses only misses); a bitmap's buffer never
    /// moves (its length is fixed at the slab's creation).
    hints: Vec<u64>,
    order: BTreeSet<u32>,
}

impl SlabTable {
    fn insert(&mut self, page: u32, slab: Slab) {
        let i = page as usize;
        if i >= self.by_page.len() {
            self.by_page.resize_with(i + 1, || None);
            self.hints.resize(i + 1, 0);
        }
        self.hints[i] = ((slab.bitmap.as_ptr() as u64) << 16) | u64::from(slab.class);
        self.by_page[i] = Some(slab);
        self.order.insert(page);
    }

    #[inline]
    fn get(&self, page: &u32) -> Option<&Slab> {
        self.by_page.get(*page as usize)?.as_ref()
    }

    #[inline]
    fn get_mut(&mut self, page: &u32) -> Option<&mut Slab> {
        self.by_page.get_mut(*page as usize)?.as_mut()
    }

    fn remove(&mut self, page: &u32) -> Option<Slab> {
        let s = self.by_page.get_mut(*page as usize)?.take();
        if s.is_some() {
            self.hints[*page as usize] = 0;
            self.order.remove(page);
        }
        s
    }

    /// Slabs from page `r.start` on, in page order.
    fn range(&self, r: std::ops::RangeFrom<u32>) -> impl Iterator<Item = (&u32, &Slab)> + '_ {
        self.order
            .range(r)
            .filter_map(move |p| self.get(p).map(|s| (p, s)))
    }

    fn clear(&mut self) {
        self.by_page.clear();
        self.hints.clear();
        self.order.clear();
    }
}

impl std::ops::Index<&u32> for SlabTable {
    type Output = Slab;
    fn index(&self, page: &u32) -> &Slab {
        self.get(page).expect("slab page")
    }
}

struct Slab {
    class: u16,
    used: u32,
    cap: u32,
    bitmap: Vec<u64>,
    /// First bitmap word that may have a free bit.
    hint: u32,
}

/// What a location holds, for compaction and eviction walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    Slab { class: u16 },
    Large { pages: u32 },
}

pub struct Slabs {
    classes: Vec<u32>,
    /// The class of every small entry size, by units (`0..=CLASS_UNITS_MAX`): what
    /// [`Slabs::class_of`] answers. A SET asks it three or four times (allocation, the old
    /// and new footprints, the eviction queue); the binary search over the 245 fine classes
    /// it replaces was eight dependent steps each, ~2 % of a SET's samples (session 20).
    class_by_units: Vec<u16>,
    /// Slab or large-run head per page index.
    pages: BTreeMap<u32, PageKind>,
    slabs: SlabTable,
    /// Per class: slabs with a free slot.
    partial: Vec<BTreeSet<u32>>,
    /// Per class: number of slabs.
    class_slabs: Vec<u32>,
    free_runs: BTreeMap<u32, u32>,
    /// Free pages not yet punched (still committed), all inside `free_runs`.
    dirty: BTreeSet<u32>,
    dirty_keep: usize,
    high_water: u32,
    page_count: u32,
    /// Bytes charged for each large run, by head page.
    large_charge: BTreeMap<u32, u64>,
    committed: u64,
    budget: u64,
    pub bytes_released: u64,
}

impl Slabs {
    pub fn new(reserved_bytes: u64, budget: u64) -> Slabs {
        let fine = make_classes(true);
        let classes = if (fine.len() as u64)
            .saturating_mul(PAGE_BYTES)
            .saturating_mul(FINE_CLASSES_BUDGET_SHARE)
            <= budget
        {
            fine
        } else {
            make_classes(false)
        };
        let n = classes.len();
        let class_by_units = (0..=CLASS_UNITS_MAX)
            .map(|u| classes.partition_point(|&c| c < u) as u16)
            .collect();
        Slabs {
            classes,
            class_by_units,
            pages: BTreeMap::new(),
            slabs: SlabTable::default(),
            partial: vec![BTreeSet::new(); n],
            class_slabs: vec![0; n],
            free_runs: BTreeMap::new(),
            dirty: BTreeSet::new(),
            // At most 4 MiB (32 pages of 128 KiB) kept committed for reuse.
            dirty_keep: ((budget / PAGE_BYTES / 64) as usize).clamp(1, 32),
            high_water: 1, // page 0 is the region header
            page_count: (reserved_bytes / PAGE_BYTES) as u32,
            large_charge: BTreeMap::new(),
            committed: 0,
            budget,
            bytes_released: 0,
        }
    }

    pub fn committed(&self) -> u64 {
        self.committed
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The class index for an entry of `units`, or `None` for a large entry.
    pub fn class_of(&self, units: u64) -> Option<u16> {
        if units > u64::from(CLASS_UNITS_MAX) {
            return None;
        }
        Some(self.class_by_units[units as usize])
    }

    pub fn class_units(&self, class: u16) -> u64 {
        u64::from(self.classes[usize::from(class)])
    }

    /// Bytes an entry of `units` occupies (its slot, or its 4 KiB-rounded run).
    pub fn footprint(&self, units: u64) -> u64 {
        match self.class_of(units) {
            Some(c) => self.class_units(c) * UNIT_BYTES,
            None => (units * UNIT_BYTES).div_ceil(OS_PAGE) * OS_PAGE,
        }
    }

    fn alloc_pages(&mut self, n: u32) -> Option<u32> {
        if n == 1 {
            if let Some(&p) = self.dirty.first() {
                // A committed free page: no page faults. It lies in exactly one free run.
                self.dirty.remove(&p);
                if let Some((&s, &l)) = self.free_runs.range(..=p).next_back() {
                    if p < s + l {
                        self.free_runs.remove(&s);
                        if p > s {
                            self.free_runs.insert(s, p - s);
                        }
                        if s + l > p + 1 {
                            self.free_runs.insert(p + 1, s + l - p - 1);
                        }
                        return Some(p);
                    }
                }
                debug_assert!(false, "dirty page {p} not in a free run");
            }
        }
        let s = self.alloc_range(n)?;
        let used: Vec<u32> = self.dirty.range(s..s + n).copied().collect();
        for p in used {
            self.dirty.remove(&p);
        }
        Some(s)
    }

    fn alloc_range(&mut self, n: u32) -> Option<u32> {
        let found = self
            .free_runs
            .iter()
            .find(|(_, &len)| len >= n)
            .map(|(&s, &l)| (s, l));
        if let Some((s, l)) = found {
            self.free_runs.remove(&s);
            if l > n {
                self.free_runs.insert(s + n, l - n);
            }
            return Some(s);
        }
        if u64::from(self.high_water) + u64::from(n) <= u64::from(self.page_count) {
            let s = self.high_water;
            self.high_water += n;
            return Some(s);
        }
        None
    }

    fn free_pages(&mut self, start: u32, n: u32, data: &Mapping) {
        self.dirty.extend(start..start + n);
        let (mut s, mut len) = (start, n);
        if let Some((&ps, &pl)) = self.free_runs.range(..s).next_back() {
            if ps + pl == s {
                self.free_runs.remove(&ps);
                s = ps;
                len += pl;
            }
        }
        if let Some(&nl) = self.free_runs.get(&(s + len)) {
            self.free_runs.remove(&(s + len));
            len += nl;
        }
        if s + len == self.high_water && self.dirty.len() > self.dirty_keep {
            // The tail of the used range, past the reserve: give it back now and lower the
            // high-water mark. Within the reserve it stays a committed free run like any
            // other (below): a large entry rewritten in turn (one field more in a big hash,
            // a big value SET again) allocates its new run before its old one is freed, so
            // the two runs alternate at the top of the range, and punching the tail at once
            // made every other write fault its run in afresh (page faults and the punch
            // were ~40 % of an HSET into a 10,000-field hash, session 25). `release` still
            // punches the reserve's excess, highest pages first.
            self.high_water = s;
            let tail: Vec<u32> = self.dirty.range(s..).copied().collect();
            for p in tail {
                self.dirty.remove(&p);
                data.punch(u64::from(p) * PAGE_BYTES, PAGE_BYTES);
                self.bytes_released += PAGE_BYTES;
            }
        } else {
            self.free_runs.insert(s, len);
        }
        if self.dirty.len() > 4 * self.dirty_keep {
            self.release(data);
        }
    }

    /// Punch free pages beyond the reserve out of the memfd (highest first, so the low pages
    /// that allocation prefers stay warm). Returns bytes released.
    pub fn release(&mut self, data: &Mapping) -> u64 {
        let mut released = 0;
        while self.dirty.len() > self.dirty_keep {
            let Some(p) = self.dirty.pop_last() else {
                break;
            };
            data.punch(u64::from(p) * PAGE_BYTES, PAGE_BYTES);
            released += PAGE_BYTES;
        }
        self.bytes_released += released;
        released
    }

    /// Allocate an entry of `units`; returns its location in units, or `None` if the budget or
    /// the reservation is exhausted (the caller evicts and retries).
    pub fn alloc(&mut self, units: u64) -> Option<u32> {
        match self.class_of(units) {
            Some(class) => self.alloc_small(class),
            None => {
                let bytes = units * UNIT_BYTES;
                let cost = bytes.div_ceil(OS_PAGE) * OS_PAGE;
                if self.committed + cost > self.budget {
                    return None;
                }
                let n = bytes.div_ceil(PAGE_BYTES) as u32;
                let start = self.alloc_pages(n)?;
                self.pages.insert(start, PageKind::Large { pages: n });
                self.large_charge.insert(start, cost);
                self.committed += cost;
                Some((u64::from(start) * PAGE_UNITS) as u32)
            }
        }
    }

    /// Whether a slot of `units` can be had without eviction.
    pub fn has_room(&self, units: u64) -> bool {
        match self.class_of(units) {
            Some(class) => {
                !self.partial[usize::from(class)].is_empty()
                    || self.committed + PAGE_BYTES <= self.budget
            }
            None => {
                self.committed + (units * UNIT_BYTES).div_ceil(OS_PAGE) * OS_PAGE <= self.budget
            }
        }
    }

    fn alloc_small(&mut self, class: u16) -> Option<u32> {
        let ci = usize::from(class);
        let page = match self.partial[ci].first() {
            Some(&p) => p,
            None => {
                if self.committed + PAGE_BYTES > self.budget {
                    return None;
                }
                let p = self.alloc_pages(1)?;
                let cap = (PAGE_UNITS / u64::from(self.classes[ci])) as u32;
                self.slabs.insert(
                    p,
                    Slab {
                        class,
                        used: 0,
                        cap,
                        bitmap: vec![0; cap.div_ceil(64) as usize],
                        hint: 0,
                    },
                );
                self.pages.insert(p, PageKind::Slab { class });
                self.partial[ci].insert(p);
                self.class_slabs[ci] += 1;
                self.committed += PAGE_BYTES;
                p
            }
        };
        let units = u64::from(self.classes[ci]);
        let slab = self.slabs.get_mut(&page)?;
        let mut slot = None;
        for wi in slab.hint as usize..slab.bitmap.len() {
            let w = slab.bitmap[wi];
            if w != u64::MAX {
                let bit = (!w).trailing_zeros();
                let idx = wi as u32 * 64 + bit;
                if idx < slab.cap {
                    slab.bitmap[wi] |= 1 << bit;
                    slab.hint = wi as u32;
                    slot = Some(idx);
                    break;
                }
            }
        }
        let idx = slot?;
        slab.used += 1;
        if slab.used == slab.cap {
            self.partial[ci].remove(&page);
        }
        Some((u64::from(page) * PAGE_UNITS + u64::from(idx) * units) as u32)
    }

    /// Start loading the two lines [`Slabs::free`]`(loc)` reads: the slab record of `loc`'s
    /// page and the bitmap word of its slot (a hint, no effect on any result). A SET calls it
    /// for the entry it replaces as soon as its lookup has found it, so that the free at the
    /// end of the publish finds both in the cache. Session 20: `free` was 2-4 % of a SET's
    /// samples, nearly all waiting for these two misses (a random page per SET); the class
    /// and bitmap address come from the compact `hints` table, so neither prefetch waits for
    /// the record.
    #[inline]
    pub fn prefetch_free(&self, loc: u32) {
        let page = (u64::from(loc) / PAGE_UNITS) as usize;
        let hint = self.slabs.hints.get(page).copied().unwrap_or(0);
        if hint == 0 {
            return;
        }
        if let Some(s) = self.slabs.by_page.get(page) {
            crate::read::prefetch(std::ptr::from_ref(s).cast());
        }
        let (class, bitmap) = (hint as u16, hint >> 16);
        let Some(&units) = self.classes.get(usize::from(class)) else {
            return;
        };
        let idx = (u64::from(loc) - page as u64 * PAGE_UNITS) / u64::from(units);
        crate::read::prefetch(bitmap.wrapping_add(idx / 64 * 8) as usize as *const u8);
    }

    /// Free the entry at `loc` (units). Pages left empty go back to the OS.
    pub fn free(&mut self, loc: u32, data: &Mapping) {
        let page = (u64::from(loc) / PAGE_UNITS) as u32;
        // A slab page is found in the dense table without the ordered map's search (the
        // common free); only a page that is no slab's is looked up there.
        let kind = match self.slabs.get(&page) {
            Some(s) => Some(PageKind::Slab { class: s.class }),
            None => self.pages.get(&page).copied(),
        };
        match kind {
            Some(PageKind::Large { pages }) => {
                // Footprint was charged from the entry's own size; recover it from the run.
                self.pages.remove(&page);
                self.free_pages(page, pages, data);
                let charged = self.large_charge.remove(&page).unwrap_or(0);
                self.committed -= charged;
            }
            Some(PageKind::Slab { class }) => {
                let units = u64::from(self.classes[usize::from(class)]);
                let Some(slab) = self.slabs.get_mut(&page) else {
                    return;
                };
                let idx = ((u64::from(loc) - u64::from(page) * PAGE_UNITS) / units) as u32;
                let (wi, bit) = ((idx / 64) as usize, idx % 64);
                if slab.bitmap[wi] & (1 << bit) == 0 {
                    debug_assert!(false, "double free at {loc}");
                    return;
                }
                slab.bitmap[wi] &= !(1 << bit);
                slab.hint = slab.hint.min(wi as u32);
                slab.used -= 1;
                let ci = usize::from(class);
                if slab.used == 0 {
                    self.slabs.remove(&page);
                    self.pages.remove(&page);
                    self.partial[ci].remove(&page);
                    self.class_slabs[ci] -= 1;
                    self.committed -= PAGE_BYTES;
                    self.free_pages(page, 1, data);
                } else if slab.used + 1 == slab.cap {
                    // It was full, so not in `partial`; a slab with room already is (every
                    // path that fills or empties a slab keeps that so). Skipping the set
                    // insert on the common free was a measured share of a SET.
                    self.partial[ci].insert(page);
                }
            }
            None => debug_assert!(false, "free of unallocated {loc}"),
        }
    }

    /// Whether `loc` is the start of an allocated slot or large run (without touching the
    /// data region). Eviction queues hold stale locations; this filters them for free.
    pub fn is_allocated(&self, loc: u32) -> bool {
        let page = (u64::from(loc) / PAGE_UNITS) as u32;
        let within = u64::from(loc) - u64::from(page) * PAGE_UNITS;
        match self.pages.get(&page) {
            Some(PageKind::Large { .. }) => within == 0,
            Some(PageKind::Slab { class }) => {
                let Some(slab) = self.slabs.get(&page) else {
                    return false;
                };
                let units = u64::from(self.classes[usize::from(*class)]);
                if units == 0 || !within.is_multiple_of(units) {
                    return false;
                }
                let idx = within / units;
                let (wi, bit) = ((idx / 64) as usize, idx % 64);
                slab.bitmap.get(wi).is_some_and(|w| w & (1 << bit) != 0)
            }
            None => false,
        }
    }

    /// Locations of the allocated slots of the slab at `page`.
    pub fn slab_slots(&self, page: u32) -> Vec<u32> {
        let Some(slab) = self.slabs.get(&page) else {
            return Vec::new();
        };
        let units = u64::from(self.classes[usize::from(slab.class)]);
        let mut v = Vec::with_capacity(slab.used as usize);
        for (wi, &w) in slab.bitmap.iter().enumerate() {
            let mut w = w;
            while w != 0 {
                let bit = w.trailing_zeros();
                w &= w - 1;
                let idx = wi as u64 * 64 + u64::from(bit);
                v.push((u64::from(page) * PAGE_UNITS + idx * units) as u32);
            }
        }
        v
    }

    /// Slabs of `class`, in page order, starting after `after`.
    pub fn slabs_of_class(&self, class: u16, after: u32) -> impl Iterator<Item = u32> + '_ {
        self.slabs
            .range(after.saturating_add(1)..)
            .filter(move |(_, s)| s.class == class)
            .map(|(&p, _)| p)
    }

    /// All slab and large-run pages starting at `from`, in order.
    pub fn pages_from(&self, from: u32) -> impl Iterator<Item = (u32, PageKind)> + '_ {
        self.pages.range(from..).map(|(&p, &k)| (p, k))
    }

    /// For compaction: the class with the most slab space wasted and, in it, the emptiest slab,
    /// if moving its entries out would free a page (the others have room for them).
    pub fn compaction_candidate(&self) -> Option<(u16, u32)> {
        let mut best: Option<(u64, u16, u32)> = None;
        for (ci, &n) in self.class_slabs.iter().enumerate() {
            if n < 2 {
                continue;
            }
            let mut used_total = 0u64;
            let mut cap_total = 0u64;
            let mut emptiest: Option<(u32, u32)> = None;
            for &p in &self.partial[ci] {
                let s = &self.slabs[&p];
                if emptiest.is_none_or(|(u, _)| s.used < u) {
                    emptiest = Some((s.used, p));
                }
            }
            for (_, s) in self
                .slabs
                .range(0..)
                .filter(|(_, s)| usize::from(s.class) == ci)
            {
                used_total += u64::from(s.used);
                cap_total += u64::from(s.cap);
            }
            let Some((u, p)) = emptiest else { continue };
            let free_elsewhere = cap_total - used_total - (u64::from(self.slabs[&p].cap - u));
            // Worth it only if the class wastes at least a page and the rest can absorb it.
            let waste = cap_total - used_total;
            if free_elsewhere >= u64::from(u)
                && waste >= u64::from(self.slabs[&p].cap)
                && best.is_none_or(|(w, _, _)| waste > w)
            {
                best = Some((waste, ci as u16, p));
            }
        }
        best.map(|(_, c, p)| (c, p))
    }

    /// Allocate in `class` but not in slab `avoid` (compaction target).
    pub fn alloc_in_class_except(&mut self, class: u16, avoid: u32) -> Option<u32> {
        let ci = usize::from(class);
        let was_partial = self.partial[ci].remove(&avoid);
        let r = if self.partial[ci].is_empty() {
            None
        } else {
            self.alloc_small(class)
        };
        if was_partial {
            self.partial[ci].insert(avoid);
        }
        r
    }

    /// Forget everything (flush): every page is punched.
    pub fn reset(&mut self, data: &Mapping) {
        data.punch(
            PAGE_BYTES,
            u64::from(self.high_water.saturating_sub(1)) * PAGE_BYTES,
        );
        self.bytes_released += self.committed + self.dirty.len() as u64 * PAGE_BYTES;
        self.dirty.clear();
        let n = self.classes.len();
        self.pages.clear();
        self.slabs.clear();
        self.partial = vec![BTreeSet::new(); n];
        self.class_slabs = vec![0; n];
        self.free_runs.clear();
        self.large_charge.clear();
        self.high_water = 1;
        self.committed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large entry rewritten in turn (the new run allocated before the old is freed, as
    /// the store does) reuses the reserve's committed pages: nothing is punched, so no
    /// write faults its pages in afresh. Punching the freed tail at once (before session
    /// 25) released two pages every other rewrite.
    #[test]
    fn a_large_entry_rewritten_in_turn_stays_in_committed_pages() {
        let data = Mapping::new("slab-test", 64 << 20).unwrap();
        let mut slabs = Slabs::new(64 << 20, 64 << 20);
        let units = 200 * 1024 / UNIT_BYTES; // two 128 KiB pages
        let mut cur = slabs.alloc(units).unwrap();
        for _ in 0..100 {
            let next = slabs.alloc(units).unwrap();
            slabs.free(cur, &data);
            cur = next;
        }
        assert_eq!(slabs.bytes_released, 0);
        assert!(slabs.dirty.len() <= slabs.dirty_keep);
        // Past the reserve the tail still goes back at once.
        slabs.free(cur, &data);
        let big = slabs
            .alloc(u64::from(slabs.dirty_keep as u32 + 4) * PAGE_UNITS)
            .unwrap();
        slabs.free(big, &data);
        assert!(slabs.bytes_released > 0);
    }

    /// The class lookup table answers what a search of the class list does: the smallest
    /// class that holds `units`, for every small size of both tables, and no class above.
    #[test]
    fn class_of_is_the_smallest_class_that_fits() {
        for slabs in [Slabs::new(4 << 30, 1 << 30), Slabs::new(32 << 20, 8 << 20)] {
            for units in 0..=u64::from(CLASS_UNITS_MAX) {
                let want = slabs.classes.iter().position(|&c| u64::from(c) >= units);
                assert_eq!(
                    slabs.class_of(units).map(usize::from),
                    want,
                    "{units} units"
                );
            }
            assert_eq!(slabs.class_of(u64::from(CLASS_UNITS_MAX) + 1), None);
            assert_eq!(slabs.class_of(u64::MAX), None);
        }
    }

    /// Both class tables: ascending, 8-byte steps to 256 B, every larger class the largest
    /// size with its count per page (its page tail under a unit per entry); the fine table
    /// gives every size the cheapest page share any class gives; the budget picks the table.
    #[test]
    fn classes_are_the_largest_per_page_count() {
        for fine in [true, false] {
            let c = make_classes(fine);
            assert!(c.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(&c[..29], &(4..=32).collect::<Vec<u32>>()[..]);
            assert_eq!(*c.last().unwrap(), CLASS_UNITS_MAX);
            for &u in c.iter().filter(|&&u| u >= 32) {
                let n = PAGE_UNITS / u64::from(u);
                // One unit more would fit one entry fewer per page.
                assert!(
                    PAGE_UNITS / (u64::from(u) + 1) < n,
                    "class {u} is not maximal"
                );
                assert!(PAGE_UNITS - n * u64::from(u) < n, "class {u}: tail");
            }
        }
        assert_eq!(make_classes(true).len(), 245);
        assert_eq!(make_classes(false).len(), 97);
        let mut old_table = Vec::new();
        let mut u = 4u32;
        while u <= CLASS_UNITS_MAX {
            old_table.push(u);
            u += if u < 32 { 1 } else { (u / 16).max(1) };
        }
        old_table.push(CLASS_UNITS_MAX);
        let big = Slabs::new(4 << 30, 1 << 30);
        let small = Slabs::new(32 << 20, 8 << 20);
        assert_eq!(big.classes.len(), 245);
        assert_eq!(small.classes.len(), 97);
        // The fine table: every size takes the cheapest page share any class gives.
        for units in 4..=u64::from(CLASS_UNITS_MAX) {
            let cu = big.class_units(big.class_of(units).unwrap());
            assert!(cu >= units);
            assert_eq!(PAGE_UNITS / cu, PAGE_UNITS / units, "{units} units");
            // The coarse table fits at least as many entries per page as session 18's table
            // (the same steps, not raised).
            let cs = small.class_units(small.class_of(units).unwrap());
            let old = old_table
                .iter()
                .map(|&u| u64::from(u))
                .find(|&u| u >= units)
                .unwrap();
            assert!(
                cs >= units && PAGE_UNITS / cs >= PAGE_UNITS / old,
                "{units} units"
            );
        }
        // 19-byte key, 1 KiB value, short header: 1,064 B in the 1,064 B class, 123 per page.
        assert_eq!(big.footprint(1064 / UNIT_BYTES), 1064);
        assert_eq!(PAGE_UNITS / 133, 123);
    }
}
