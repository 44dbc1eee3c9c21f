//! The writer's side of the regions: index tables (lookup, insert, in-place update, unlink,
//! incremental upsize), data entries (write, read, relocate), eviction, expiry, scan and
//! accounting. The rules of *whether* to write live in `engine.rs`; this module only stores.
//!
//! # Index upsize (how it works, and what readers see)
//! Past a load factor of 0.85 (or when a key finds no free entry within the probe reach) the
//! writer allocates a table 1.5× as large and migrates the old
//! one bucket by bucket: one step of [`REHASH_BUCKETS_PER_STEP_MAX`] buckets per mutation and
//! several per tick. Readers keep using the *old* table, which stays complete and authoritative
//! during the whole migration: every mutation applies to it, and is mirrored into the new table
//! when it touches an old bucket the migration has already passed. When the cursor reaches the
//! end, the header's layout word is switched to the new table in one atomic store (readers that
//! were mid-probe notice the generation change and retry) and the old table is punched out.
//! Table space is reused later; a stale reader that probes reused space is saved by the same
//! generation check.
//!
//! # Compaction and giving memory back
//! Each tick moves up to `COMPACT_MOVES_PER_TICK` entries out of the emptiest slab of the class
//! that wastes most (copy, new check for the new location, switch the index word, free the
//! old slot). A slab left empty returns its page; free pages beyond a small reserve are punched
//! out of the memfd (`Slabs::release`), so RSS follows the corpus down.
//!
//! # Eviction
//! Victims come from the size class that needs a slot (memcached's per-class queues), by CLOCK
//! (a hand over the class's slab slots; the reference bit lives in the entry's policy nibble,
//! in a policy area beside the tables, and is set by readers too) or S3-FIFO (per-class small and main FIFOs of locations,
//! a global ghost FIFO of hashes). When the class has nothing to give (no slabs yet, or only
//! pinned data), a global hand empties whole slab pages or large runs of evictable entries
//! (memcached's slab reassignment). Pinned (non-evictable) memgests are never victims; if
//! nothing can be freed within [`EVICTION_SCAN_PER_WRITE_MAX`] steps the write gets `NoSpace`.

use crate::api::{
    EngineConfig, EngineStats, Entry, Error, EvictionPolicy, ReadOutcome, TickReport, Usage,
};
use crate::hash::{digest_term, key_hash};
use crate::layout::*;
use crate::read::{locate_entry, RegionsView};
use crate::region::Mapping;
use crate::slab::{PageKind, Slabs};
use ringlet_types::limits::{
    EVICTION_SCAN_PER_WRITE_MAX, EXPIRE_WORK_PER_TICK_MAX, REHASH_BUCKETS_PER_STEP_MAX,
};
use ringlet_types::{key_slot, MemgestId, ValueKind, Version, SLOT_COUNT};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

mod code_set;
mod slot_index;

// ----- the writer's view of an index entry -----------------------------------------------
//
// Format 5's index entry is one word (location, tag, check). What it no longer holds — the
// entry's size and memgest (now in the data header) and the policy bits (now a nibble in a
// policy area) — the writer gathers into a *side word* when it finds an entry, so the code
// below keeps handling an entry as two words: `w0` is the index word itself, `w1` the side
// word, which is never stored anywhere as a whole.
//
//   side word: [ units 24 | memgest 16 | 0 16 | policy nibble 4 (at bit 56) | 0 4 ]

/// The first `n` (≤ 8) bytes of a little-endian word: the mask that keeps them.
#[inline]
fn low_bytes_mask(n: usize) -> u64 {
    debug_assert!(n <= 8);
    if n >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * n)) - 1
    }
}

/// `bytes` (at most 8) as the low bytes of a little-endian word, the rest zero.
#[inline]
fn le_word(bytes: &[u8]) -> u64 {
    if let Ok(b) = <[u8; 8]>::try_from(bytes) {
        return u64::from_le_bytes(b);
    }
    // A short tail byte by byte: a copy of a variable length would be a `memcpy` call.
    let mut w = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(8) {
        w |= u64::from(b) << (8 * i);
    }
    w
}

/// The side word of an entry of `units`, `memgest` and policy nibble `policy`.
fn side_pack(units: u32, memgest: u16, policy: u64) -> u64 {
    u64::from(units & 0xff_ffff)
        | (u64::from(memgest) << 24)
        | ((policy & POLICY_NIBBLE) << S_SHIFT)
}
/// Units (8-byte words) of the entry a side word describes.
fn s_units(w1: u64) -> u32 {
    w1 as u32 & 0xff_ffff
}
/// Memgest of the entry a side word describes.
fn s_memgest(w1: u64) -> u16 {
    (w1 >> 24) as u16
}
/// Where the policy nibble sits in a side word.
const S_SHIFT: u32 = 56;
/// Side-word policy bits: frequency / reference (2 bits) and has-TTL.
const S_FREQ: u64 = POLICY_FREQ << S_SHIFT;
const S_TTL: u64 = POLICY_TTL << S_SHIFT;

/// Metadata of a stored entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub version: Version,
    pub memgest: MemgestId,
    pub expire_at_ms: Option<u64>,
    pub kind: ValueKind,
}

/// A written but unpublished data entry: its place and the index words that will publish it.
#[derive(Debug)]
pub struct StagedHandle {
    loc: u32,
    w0: u64,
    w1: u64,
}

/// Load factor past which the index grows (by 1.5×).
const LOAD_FACTOR_MAX: f64 = 0.85;

/// Buckets that hold `keys` at the load factor limit.
pub fn buckets_for(keys: u64) -> u32 {
    let b = (keys as f64 / (LOAD_FACTOR_MAX * BUCKET_ENTRIES as f64)).ceil() as u64 + 1;
    b.min(u64::from(ringlet_types::limits::INDEX_BUCKETS_MAX)) as u32
}
/// Upsize steps per tick (each of `REHASH_BUCKETS_PER_STEP_MAX` buckets).
const UPSIZE_STEPS_PER_TICK: u32 = 16;
/// Entries compaction may move per tick.
const COMPACT_MOVES_PER_TICK: u32 = 512;

/// What the shared-memory client needs to map and read the regions.
#[derive(Clone, Copy, Debug)]
pub struct ExportInfo {
    /// memfd of the index region (owned by the engine; dup it before sending).
    pub index_fd: RawFd,
    pub index_len: usize,
    /// memfd of the data region.
    pub data_fd: RawFd,
    pub data_len: usize,
    pub format_version: u64,
}

/// A lock-free reader over the engine's regions. Cheap to clone; usable from any thread while
/// the writer mutates.
#[derive(Clone)]
pub struct Reader {
    index: Arc<Mapping>,
    _data: Arc<Mapping>,
    view: RegionsView,
    /// Where the policy areas start and the bytes of each (hits record their access there).
    policy_area_base: u64,
    policy_area_bytes: u64,
}

impl Reader {
    /// Read `key` into `out`. `Retry` only after bounded internal retries.
    pub fn get(&self, key: &[u8], now_ms: u64, out: &mut Vec<u8>) -> ReadOutcome {
        self.get_hashed(key, key_hash(key), now_ms, out)
    }

    /// [`Reader::get`] with the key's hash already computed (`hash::key_hash(key)`), for a
    /// batch that hashed its keys to prefetch them.
    pub fn get_hashed(&self, key: &[u8], hash: u64, now_ms: u64, out: &mut Vec<u8>) -> ReadOutcome {
        if key.len() > ringlet_types::limits::KEY_BYTES_MAX as usize {
            out.clear();
            return ReadOutcome::Miss;
        }
        debug_assert_eq!(hash, key_hash(key));
        let (r, pos) = locate_entry(&self.view, key, hash, now_ms, None, out);
        if let Some(pos) = pos {
            // Record the access in the entry's policy nibble (in-process readers map the
            // index writable). Only if the table is still the one the hit came from; and
            // policy words live in their own areas, never in table space, so even a bump
            // through a layout that changed right after this check only touches policy bits.
            // A CAS on the whole word: it fails if the writer (or another reader) changed
            // any nibble meanwhile, so it never undoes their change; a failure is a lost
            // access record, nothing more.
            if self.view.layout().map(Layout::pack) == Some(pos.layout) {
                let layout = Layout::unpack(pos.layout);
                let (off, shift) =
                    layout.policy_of(self.policy_area_base, self.policy_area_bytes, pos.entry);
                let w = self.index.word(off);
                let cur = w.load(Ordering::Relaxed);
                if (cur >> shift) & POLICY_FREQ != POLICY_FREQ {
                    let _ = w.compare_exchange(
                        cur,
                        cur + (1 << shift),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
            }
        }
        r
    }

    /// First touch of a batched lookup: start loading the home bucket of `hash`
    /// ([`crate::read::prefetch_bucket`]). A hint: no effect on what any read returns.
    #[inline]
    pub fn prefetch_bucket(&self, hash: u64) {
        crate::read::prefetch_bucket_and_policy(
            &self.view,
            self.policy_area_base,
            self.policy_area_bytes,
            hash,
        );
    }

    /// Second touch: start loading the data entries the home bucket's matching index entries
    /// point at ([`crate::read::prefetch_entry`]). Serves the writer too: a SET's lookup of the
    /// key it replaces reads the same bucket and entry.
    #[inline]
    pub fn prefetch_entry(&self, hash: u64) {
        crate::read::prefetch_entry(&self.view, hash)
    }

    /// The read-only view this reader uses (for tests and diagnostics).
    pub fn view(&self) -> RegionsView {
        self.view
    }
}

/// A writer's lookup of one key, handed from [`Store::look_up_for_put`] to
/// [`Store::put_looked_up`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct PutLookup {
    found: Option<Found>,
    h: u64,
    slot: u16,
    /// The entry found is expired (the general path must reap it).
    pub(crate) expired: bool,
}

/// One slot's accounting: its keys and bytes (`EngineStats::per_slot`), its digest (the
/// wrapping sum of `digest_term` over its entries: anti-entropy) and its keys with a TTL (a
/// cluster node's INFO keyspace counts the keys with a TTL in the slots it coordinates).
///
/// Why one record: a write updates all four for its key's slot, and at a million keys the
/// slot is a random one each time, so each array was a cache miss of its own per SET (three
/// arrays, 448 KiB). Together, 32-byte aligned, they are one line, which the batched request
/// path prefetches ([`Store::prefetch_slot`]) before it runs the batch.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(32))]
struct SlotAcct {
    keys: u64,
    bytes: u64,
    digest: u64,
    ttl: u32,
}

#[derive(Clone, Copy, Debug)]
struct Found {
    ie_off: u64,
    bucket: u64,
    w0: u64,
    w1: u64,
}

struct Migration {
    to: Layout,
    cursor: u64,
}

#[derive(Default)]
struct S3Class {
    small: VecDeque<u32>,
    main: VecDeque<u32>,
    /// Queue length (small + main) at which stale locations are next swept out. Set to twice
    /// the length left by the previous sweep, so sweeps cost O(1) amortized per admission even
    /// when most queued locations are live (a sweep that finds nothing to drop must not run
    /// again on the next write).
    sweep_at: usize,
}

pub struct Store {
    index: Arc<Mapping>,
    data: Arc<Mapping>,
    table: Layout,
    migration: Option<Migration>,
    /// Bytes of each policy area ([`HDR_POLICY_AREA`]) and where they start.
    policy_area_bytes: u64,
    policy_area_base: u64,
    /// Free table space in the index region: offset (64 KiB units) → units.
    table_free: BTreeMap<u32, u32>,
    table_high_water: u32,
    table_units_max: u32,
    buckets_max: u32,
    buckets_initial: u32,
    slabs: Slabs,
    policy: EvictionPolicy,
    count: u64,
    /// Published entries that carry an expiry (INFO keyspace `expires=`), kept by `account`.
    ttl_count: u64,
    used_bytes: u64,
    per_memgest: BTreeMap<MemgestId, Usage>,
    /// Per-slot keys, bytes, digest and TTL count, one [`SlotAcct`] per slot ([`SLOT_COUNT`]).
    slots: Vec<SlotAcct>,
    evictions: u64,
    upsizes: u64,
    conflict_upsizes: u64,
    clock_hands: Vec<(u32, usize)>,
    global_hand: u32,
    s3: Vec<S3Class>,
    s3_swept: u64,
    ghost: VecDeque<u64>,
    ghost_set: HashSet<u64>,
    expire_cursor: u64,
    scratch: Vec<u8>,
    /// Per-slot scan order and per-(slot, memgest) digests, for cluster nodes only
    /// (`slot_index.rs`; `None` until [`Store::enable_slot_index`]).
    slot_index: Option<slot_index::SlotIndex>,
}

/// The next table size: 1.5× (at least one more bucket), capped.
fn grow(buckets: u32, max: u32) -> u32 {
    (buckets.saturating_add(buckets / 2).max(buckets + 1)).min(max)
}

impl Store {
    pub fn new(cfg: &EngineConfig) -> Result<Store, Error> {
        // Most keys the data budget can hold (32-byte minimum entries), at load 0.45 right
        // after a doubling: the largest table ever needed.
        let keys_max = (cfg.memory_bytes_max / 24).max(1024);
        let buckets_max = (keys_max * 100 / (45 * BUCKET_ENTRIES as u64))
            .min(u64::from(ringlet_types::limits::INDEX_BUCKETS_MAX))
            as u32;
        let buckets_initial = cfg.index_buckets_initial.clamp(1, buckets_max);
        // Tables ever live at once: the largest during a migration from 2/3 of it, plus
        // earlier freed space that first-fit could not reuse: 4 × the largest table bounds it.
        let table_max_units = Layout {
            gen: 0,
            buckets: buckets_max,
            table_units: 0,
        }
        .table_bytes()
        .div_ceil(TABLE_ALIGN_BYTES)
            + 1;
        // Two policy areas (a word per bucket of the largest table each) end the region:
        // never table space, so an in-process reader that bumps a reference bit through a
        // stale layout can only touch policy bits (Reader::get_hashed). At the end rather
        // than after the header, so the header's (huge) page is shared with the first table.
        let policy_area_bytes =
            (u64::from(buckets_max) * 8).div_ceil(TABLE_ALIGN_BYTES) * TABLE_ALIGN_BYTES;
        let policy_area_base = INDEX_HEADER_BYTES + 4 * table_max_units * TABLE_ALIGN_BYTES;
        let index_len = policy_area_base + 2 * policy_area_bytes;
        // Address space, not memory: 4× the budget, so that entries above the largest class
        // (runs of whole 128 KiB pages whose tails are never touched) can fill the budget
        // down to ~32 KiB each, as 2× did with 64 KiB pages.
        let data_len = (cfg.memory_bytes_max.saturating_mul(4) + 64 * PAGE_BYTES)
            .min(ringlet_types::limits::ENGINE_MEMORY_BYTES_MAX)
            .div_ceil(PAGE_BYTES)
            * PAGE_BYTES;
        let index = Arc::new(Mapping::new("ringlet-index", index_len as usize)?);
        let data = Arc::new(Mapping::new("ringlet-data", data_len as usize)?);
        index.store(HDR_MAGIC as u64 * 8, INDEX_MAGIC);
        index.store(HDR_FORMAT as u64 * 8, FORMAT_VERSION);
        index.store(HDR_POLICY_AREA as u64 * 8, policy_area_bytes);
        index.store(HDR_POLICY_BASE as u64 * 8, policy_area_base);
        let mut s = Store {
            index,
            data,
            table: Layout {
                gen: 0,
                buckets: 0,
                table_units: 0,
            },
            migration: None,
            policy_area_bytes,
            policy_area_base,
            table_free: BTreeMap::new(),
            table_high_water: (INDEX_HEADER_BYTES / TABLE_ALIGN_BYTES) as u32,
            table_units_max: (policy_area_base / TABLE_ALIGN_BYTES) as u32,
            buckets_max,
            buckets_initial,
            slabs: Slabs::new(data_len, cfg.memory_bytes_max),
            policy: cfg.eviction,
            count: 0,
            ttl_count: 0,
            used_bytes: 0,
            per_memgest: BTreeMap::new(),
            slots: vec![SlotAcct::default(); usize::from(SLOT_COUNT)],
            evictions: 0,
            upsizes: 0,
            conflict_upsizes: 0,
            clock_hands: Vec::new(),
            global_hand: 0,
            s3: Vec::new(),
            s3_swept: 0,
            ghost: VecDeque::new(),
            ghost_set: HashSet::new(),
            expire_cursor: 0,
            scratch: Vec::new(),
            slot_index: None,
        };
        let nclass = usize::from(
            s.slabs
                .class_of(u64::from(crate::slab::CLASS_UNITS_MAX))
                .unwrap_or(0),
        ) + 2;
        s.clock_hands = vec![(0, 0); nclass];
        s.s3 = (0..nclass).map(|_| S3Class::default()).collect();
        let t = s.alloc_table(buckets_initial).ok_or(Error::NoSpace)?;
        s.switch_to(t);
        Ok(s)
    }

    // ----- index tables -------------------------------------------------------------------

    fn alloc_table(&mut self, buckets: u32) -> Option<Layout> {
        let pages = Layout {
            gen: 0,
            buckets,
            table_units: 0,
        }
        .table_bytes()
        .div_ceil(TABLE_ALIGN_BYTES) as u32;
        let found = self
            .table_free
            .iter()
            .find(|(_, &n)| n >= pages)
            .map(|(&s, &n)| (s, n));
        let start = if let Some((s, n)) = found {
            self.table_free.remove(&s);
            if n > pages {
                self.table_free.insert(s + pages, n - pages);
            }
            s
        } else if u64::from(self.table_high_water) + u64::from(pages)
            <= u64::from(self.table_units_max)
        {
            let s = self.table_high_water;
            self.table_high_water += pages;
            s
        } else {
            return None;
        };
        // One more than the readers' table: the two tables of a migration use different
        // policy areas (`Layout::policy_of`). An abandoned migration target's generation is
        // reused by the next one; readers never saw it.
        Some(Layout {
            gen: self.table.gen.wrapping_add(1),
            buckets,
            table_units: start,
        })
    }

    fn free_table(&mut self, t: Layout) {
        let pages = t.table_bytes().div_ceil(TABLE_ALIGN_BYTES) as u32;
        self.index
            .punch(t.table_offset(), u64::from(pages) * TABLE_ALIGN_BYTES);
        // Its policy words too (the live table uses the other area).
        let (first, _) = t.policy_of(
            self.policy_area_base,
            self.policy_area_bytes,
            t.table_offset(),
        );
        let len = (t.buckets() * 8).div_ceil(TABLE_ALIGN_BYTES) * TABLE_ALIGN_BYTES;
        self.index.punch(first, len.min(self.policy_area_bytes));
        let (mut s, mut n) = (t.table_units, pages);
        if let Some((&ps, &pn)) = self.table_free.range(..s).next_back() {
            if ps + pn == s {
                self.table_free.remove(&ps);
                s = ps;
                n += pn;
            }
        }
        if let Some(&nn) = self.table_free.get(&(s + n)) {
            self.table_free.remove(&(s + n));
            n += nn;
        }
        self.table_free.insert(s, n);
    }

    /// Make `t` the readers' table (one atomic store of the layout word).
    fn switch_to(&mut self, t: Layout) {
        self.index
            .word(HDR_LAYOUT as u64 * 8)
            .store(t.pack(), Ordering::Release);
        self.table = t;
    }

    fn ie_off(t: Layout, bucket: u64, i: usize) -> u64 {
        t.bucket_offset(bucket) + entry_word(i) as u64 * 8
    }

    /// The policy word and nibble shift of the entry at `off` of table `t`.
    fn policy_word(&self, t: Layout, off: u64) -> (&std::sync::atomic::AtomicU64, u32) {
        let (w, shift) = t.policy_of(self.policy_area_base, self.policy_area_bytes, off);
        (self.index.word(w), shift)
    }

    /// The side word of the published entry with index word `w0` at `off` of table `t`:
    /// units and memgest from its data header, the policy nibble from the policy area.
    fn side(&self, t: Layout, off: u64, w0: u64) -> u64 {
        let w2 = self.data.load(u64::from(ie_location(w0)) * UNIT_BYTES + 16);
        let (pw, shift) = self.policy_word(t, off);
        let policy = (pw.load(Ordering::Relaxed) >> shift) & POLICY_NIBBLE;
        side_pack(de_units(w2) as u32, de_memgest(w2), policy)
    }

    /// Set the policy nibble of the entry at `off` of table `t` to side word `w1`'s. Two
    /// RMWs, never a store of the whole word: in-process readers CAS reference bits of other
    /// entries of the same word concurrently, and a plain store could undo another entry's
    /// TTL bit only the writer sets. A reader's bump landing between the two RMWs leaves a
    /// reference bit set (an access recorded), never a TTL bit changed.
    fn set_policy(&self, t: Layout, off: u64, w1: u64) {
        let (pw, shift) = self.policy_word(t, off);
        pw.fetch_and(!(POLICY_NIBBLE << shift), Ordering::Relaxed);
        let v = (w1 >> S_SHIFT) & POLICY_NIBBLE;
        if v != 0 {
            pw.fetch_or(v << shift, Ordering::Relaxed);
        }
    }

    fn overflow(&self, t: Layout, bucket: u64) -> u64 {
        let (off, shift) = t.overflow_word(bucket);
        (self.index.load(off) >> shift) & 0xffff
    }

    /// Buckets past `home` a lookup must probe.
    fn reach(&self, t: Layout, home: u64) -> u64 {
        overflow_reach(self.overflow(t, home)).min(t.buckets() - 1)
    }

    /// Count one more (`dist` buckets away) or one fewer displaced key of `bucket`.
    fn add_overflow(&self, t: Layout, bucket: u64, delta: i64, dist: u64) {
        let (off, shift) = t.overflow_word(bucket);
        let cur = self.index.load(off);
        let v = (cur >> shift) & 0xffff;
        let count = (overflow_count(v) as i64 + delta).max(0) as u64;
        let reach = if delta > 0 {
            overflow_reach(v).max(dist)
        } else {
            overflow_reach(v)
        };
        let nv = overflow_pack(count, reach);
        self.index.word(off).store(
            (cur & !(0xffff << shift)) | (nv << shift),
            Ordering::Release,
        );
    }

    /// The key of the data entry at `loc`; `None` if the lengths are implausible (a free or
    /// punched slot read by a stale queue entry).
    fn read_key(&self, loc: u32) -> Option<Vec<u8>> {
        let mut key = Vec::new();
        self.read_key_into(loc, &mut key).then_some(key)
    }

    /// [`Store::read_key`] into `key` (cleared first), reusing its allocation. `false` if the
    /// entry's bounds are out of the region.
    fn read_key_into(&self, loc: u32, key: &mut Vec<u8>) -> bool {
        key.clear();
        let base = u64::from(loc) * UNIT_BYTES;
        if base + ENTRY_HEADER_BYTES as u64 > self.data.len() as u64 || base == 0 {
            return false;
        }
        let w2 = self.data.load(base + 16);
        let kl = u64::from(de_key_len(w2));
        let start = base + de_header_bytes(w2) as u64;
        let end = start + kl;
        if end > self.data.len() as u64 {
            return false;
        }
        key.reserve(kl as usize);
        // The key may start mid-word (short headers are 20 bytes): aligned loads only.
        let len = self.data.len() as u64;
        bytes_at(
            |o| (o + 8 <= len).then(|| self.data.load(o)),
            start,
            kl as usize,
            key,
        )
    }

    /// Whether the entry at `loc` holds `key` (word-wise, no allocation).
    fn key_matches(&self, loc: u32, key: &[u8]) -> bool {
        let base = u64::from(loc) * UNIT_BYTES;
        if base == 0 || base + (ENTRY_HEADER_TTL_BYTES + key.len()) as u64 > self.data.len() as u64
        {
            return false;
        }
        let w2 = self.data.load(base + 16);
        if de_key_len(w2) as usize != key.len() {
            return false;
        }
        // A short header's key starts at byte 20: its first four bytes are word 2's high
        // half, already loaded; the rest is word-aligned. (The range was checked above.)
        // Compared as integers, not slices: a slice compare of a variable length is a call
        // to `memcmp` per word, which was 2.6 % of a SET's samples at pipeline 16 (session 20).
        let (mut off, rest) = if de_short(w2) {
            let n = key.len().min(4);
            if (w2 >> 32) & low_bytes_mask(n) != le_word(&key[..n]) {
                return false;
            }
            (base + 24, &key[n..])
        } else {
            (base + de_header_bytes(w2) as u64, key)
        };
        for chunk in rest.chunks(8) {
            if self.data.load(off) & low_bytes_mask(chunk.len()) != le_word(chunk) {
                return false;
            }
            off += 8;
        }
        true
    }

    fn find_in(&self, t: Layout, key: &[u8], h: u64) -> Option<Found> {
        let home = t.home(h);
        let tag = tag_of(h);
        // The home bucket first, its overflow word (how far displaced keys of it live) only
        // if the key is not there, as the readers probe (`read::locate_entry`): the overflow
        // words are an array of their own, so reading one first was one more line per SET
        // that no prefetch asked for, for a key that is nearly always in its home bucket.
        let mut reach = 0;
        let mut k = 0;
        while k <= reach {
            let b = t.after(home, k);
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(t, b, i);
                let w0 = self.index.load(off);
                if w0 == 0 || ie_tag(w0) != tag {
                    continue;
                }
                if self.key_matches(ie_location(w0), key) {
                    let w1 = self.side(t, off, w0);
                    return Some(Found {
                        ie_off: off,
                        bucket: b,
                        w0,
                        w1,
                    });
                }
            }
            if k == 0 {
                reach = self.reach(t, home);
            }
            k += 1;
        }
        None
    }

    fn find(&self, key: &[u8], h: u64) -> Option<Found> {
        self.find_in(self.table, key, h)
    }

    /// Put index words into a free entry of `t`, near `h`'s home. None if the neighbourhood
    /// is full (associativity conflict).
    fn insert_in(&self, t: Layout, h: u64, w0: u64, w1: u64) -> Option<Found> {
        let home = t.home(h);
        for k in 0..PROBE_BUCKETS_MAX.min(t.buckets()) {
            let b = t.after(home, k);
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(t, b, i);
                if self.index.load(off) == 0 {
                    self.set_policy(t, off, w1);
                    self.index.word(off).store(w0, Ordering::Release);
                    if k > 0 {
                        self.add_overflow(t, home, 1, k);
                    }
                    return Some(Found {
                        ie_off: off,
                        bucket: b,
                        w0,
                        w1,
                    });
                }
            }
        }
        None
    }

    fn clear_entry(&self, t: Layout, f: &Found, h: u64) {
        self.index.word(f.ie_off).store(0, Ordering::Release);
        self.set_policy(t, f.ie_off, 0);
        let home = t.home(h);
        if f.bucket != home {
            self.add_overflow(t, home, -1, 0);
        }
    }

    /// Whether a change at physical bucket `b` of the readers' table must be mirrored into
    /// the migration target.
    fn mirrored(&self, b: u64) -> bool {
        self.migration.as_ref().is_some_and(|m| b < m.cursor)
    }

    fn mirror_update(&self, key: &[u8], h: u64, w0: u64, w1: u64) {
        let Some(to) = self.migration.as_ref().map(|m| m.to) else {
            return;
        };
        if let Some(f) = self.find_in(to, key, h) {
            self.set_policy(to, f.ie_off, w1);
            self.index.word(f.ie_off).store(w0, Ordering::Release);
        }
    }

    fn mirror_remove(&self, key: &[u8], h: u64) {
        let Some(to) = self.migration.as_ref().map(|m| m.to) else {
            return;
        };
        if let Some(f) = self.find_in(to, key, h) {
            self.clear_entry(to, &f, h);
        }
    }

    /// Start doubling the index (no-op if migrating or at the maximum).
    fn start_upsize(&mut self, buckets: u32) -> bool {
        if self.migration.is_some() || buckets <= self.table.buckets {
            return false;
        }
        let Some(to) = self.alloc_table(buckets) else {
            return false;
        };
        self.migration = Some(Migration { to, cursor: 0 });
        true
    }

    /// Migrate up to `REHASH_BUCKETS_PER_STEP_MAX` buckets; switch when done. Returns buckets.
    fn migrate_step(&mut self) -> u32 {
        let Some(m) = self.migration.as_ref() else {
            return 0;
        };
        let (to, start) = (m.to, m.cursor);
        let from = self.table;
        let end = (start + u64::from(REHASH_BUCKETS_PER_STEP_MAX)).min(from.buckets());
        // Moving an entry needs its key's hash (the index word keeps only a tag), so each
        // entry's data header and key are read: a random line of the data region per entry.
        // Read one after the other, those misses were 19 % of a SET's samples while a fill
        // of new keys grew the index (session 21); asked for all at once here, they overlap.
        for b in start..end {
            for i in 0..BUCKET_ENTRIES {
                let w0 = self.index.load(Self::ie_off(from, b, i));
                if w0 != 0 {
                    // The header's word 2 and a short key (from byte 20) may cross into the
                    // next line: ask for both.
                    let at = u64::from(ie_location(w0)) * UNIT_BYTES;
                    if at + 48 < self.data.len() as u64 {
                        let p = self.data.base().wrapping_add(at as usize);
                        crate::read::prefetch(p);
                        crate::read::prefetch(p.wrapping_add(48));
                    }
                }
            }
        }
        // Then each key's hash, asking for its bucket in the new table (another random line)
        // before any is written; then the moves. One key buffer for the step.
        let mut key = Vec::new();
        let mut moves = Vec::with_capacity((end - start) as usize * BUCKET_ENTRIES);
        for b in start..end {
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(from, b, i);
                let w0 = self.index.load(off);
                if w0 == 0 {
                    continue;
                }
                let w1 = self.side(from, off, w0);
                if !self.read_key_into(ie_location(w0), &mut key) {
                    continue;
                }
                let h = key_hash(&key);
                let home = to.bucket_offset(to.home(h));
                if home + BUCKET_BYTES <= self.index.len() as u64 {
                    let p = self.index.base().wrapping_add(home as usize);
                    crate::read::prefetch(p);
                    crate::read::prefetch(p.wrapping_add(64));
                }
                moves.push((b, h, w0, w1));
            }
        }
        for (b, h, w0, w1) in moves {
            if self.insert_in(to, h, w0, w1).is_none() {
                // The doubled table has no room in this neighbourhood (vanishingly rare at
                // load ≤ 0.43): abandon it and start over twice as large.
                self.migration = None;
                self.free_table(to);
                self.start_upsize(grow(to.buckets, self.buckets_max));
                return (b - start) as u32;
            }
        }
        if let Some(m) = self.migration.as_mut() {
            m.cursor = end;
        }
        if end >= from.buckets() {
            self.migration = None;
            self.switch_to(to);
            self.free_table(from);
            self.upsizes += 1;
            self.expire_cursor = 0;
        }
        (end - start) as u32
    }

    fn finish_migration(&mut self) {
        // Bounded: each step advances the cursor or restarts with a larger table (at most
        // a bounded number of times, each larger).
        for _ in 0..(1u64 << 40) {
            if self.migration.is_none() {
                break;
            }
            self.migrate_step();
        }
    }

    /// See [`crate::Engine::reserve_index`].
    pub fn reserve_index(&mut self, keys: u64) -> u64 {
        self.finish_migration();
        let want = buckets_for(keys).min(self.buckets_max);
        if want > self.table.buckets && self.start_upsize(want) {
            self.finish_migration();
        }
        self.index_capacity()
    }

    /// Keys the readers' table holds before it grows.
    pub fn index_capacity(&self) -> u64 {
        (self.table.buckets() as f64 * BUCKET_ENTRIES as f64 * LOAD_FACTOR_MAX) as u64
    }

    fn maybe_upsize(&mut self) {
        let cap = self.table.buckets() as f64 * BUCKET_ENTRIES as f64;
        if self.migration.is_none() && self.count as f64 > LOAD_FACTOR_MAX * cap {
            self.start_upsize(grow(self.table.buckets, self.buckets_max));
        }
    }

    // ----- data entries -------------------------------------------------------------------

    /// Write the entry image at `loc`; returns its check for the index word (`w0`: the index
    /// word's location and tag, [`ie_bound`]).
    fn write_entry(&mut self, loc: u32, key: &[u8], value: &[u8], meta: &Meta, w0: u64) -> u32 {
        let ttl = meta.expire_at_ms.is_some();
        let units = entry_units(key.len(), value.len(), ttl, meta.memgest.0);
        let img = &mut self.scratch;
        img.clear();
        img.extend_from_slice(&((meta.version.0 >> 64) as u64).to_le_bytes());
        img.extend_from_slice(&(meta.version.0 as u64).to_le_bytes());
        let w2 = de_w2(key.len() as u32, value.len() as u32, ttl, meta.memgest.0)
            | de_kind_bits(meta.kind);
        // A short header is 20 bytes: only word 2's low half is header, the key follows.
        let w2_bytes = de_header_bytes(w2).min(ENTRY_HEADER_BYTES) - 16;
        img.extend_from_slice(&w2.to_le_bytes()[..w2_bytes]);
        if let Some(t) = meta.expire_at_ms {
            img.extend_from_slice(&t.to_le_bytes());
        }
        img.extend_from_slice(key);
        img.extend_from_slice(value);
        img.resize((units * UNIT_BYTES) as usize, 0);
        let c = checksum(img, w0);
        // The slot may be a freed entry's that a direct reader is copying: order the kill
        // (mark_dead) before these stores, so a reader whose copy saw any of them sees the
        // kill when it re-loads word 2 (the seqlock of read::read_entry_direct).
        fence(Ordering::Release);
        self.data.write_bytes(u64::from(loc) * UNIT_BYTES, img);
        c
    }

    /// Copy the whole entry at `loc` of `units`.
    fn load_entry(&self, loc: u32, units: u32) -> Vec<u8> {
        let mut img = Vec::new();
        self.data
            .read_bytes(u64::from(loc) * UNIT_BYTES, units as usize * 8, &mut img);
        img
    }

    fn header(&self, loc: u32) -> (Version, u32, u32, Option<u64>) {
        let base = u64::from(loc) * UNIT_BYTES;
        let hi = self.data.load(base);
        let lo = self.data.load(base + 8);
        let w2 = self.data.load(base + 16);
        (
            Version((u128::from(hi) << 64) | u128::from(lo)),
            de_key_len(w2),
            de_value_len(w2),
            de_has_ttl(w2).then(|| self.data.load(base + 24)),
        )
    }

    /// The memgest recorded in the data entry at `loc` (format 5: in its header).
    fn memgest_at(&self, loc: u32) -> u16 {
        de_memgest(self.data.load(u64::from(loc) * UNIT_BYTES + 16))
    }

    /// Mark the entry at `loc` published (word 2's live bit, layout.rs). Call it *after* the
    /// index entry that points at it is stored: a direct reader that sees the bit then sees
    /// the publication too (Release).
    ///
    /// A load and a Release store, not a locked read-modify-write: word 2 of a data entry is
    /// written only by the store's one writer (hence `&mut self`); readers only load it, so
    /// the store's value and release ordering are those of the RMW (`tests/loom_direct.rs`
    /// models the writer this way). On x86 the RMW was a full barrier that waited for the
    /// entry image's stores just issued: with the other three locked operations of a SET's
    /// publish about half of `publish_at`'s samples (session 20).
    fn mark_live(&mut self, loc: u32) {
        let w = self.data.word(u64::from(loc) * UNIT_BYTES + 16);
        w.store(w.load(Ordering::Relaxed) | DE_LIVE_BIT, Ordering::Release);
    }

    /// Clear the live bit of the entry at `loc`. Call it *before* the index stops pointing at
    /// it (replace, unlink, move): a direct reader that still sees the bit reads at an instant
    /// when the entry was the key's current one. A load and a store, as [`Store::mark_live`].
    fn mark_dead(&mut self, loc: u32) {
        let w = self.data.word(u64::from(loc) * UNIT_BYTES + 16);
        w.store(w.load(Ordering::Relaxed) & !DE_LIVE_BIT, Ordering::Release);
    }

    fn meta_of(&self, f: &Found) -> Meta {
        let loc = ie_location(f.w0);
        let (version, _, _, expire_at_ms) = self.header(loc);
        Meta {
            version,
            memgest: MemgestId(s_memgest(f.w1)),
            expire_at_ms,
            kind: de_kind(self.data.load(u64::from(loc) * UNIT_BYTES + 16)),
        }
    }

    // ----- accounting ---------------------------------------------------------------------

    /// Add (`add`) or remove one entry (index words `f_w0`, `f_w1`, `version`) of `key`, in
    /// `slot` (`key_slot(key)`, computed once by the caller), to or from every counter.
    #[allow(clippy::too_many_arguments)]
    fn account(
        &mut self,
        key: &[u8],
        h: u64,
        slot: u16,
        f_w0: u64,
        f_w1: u64,
        version: Version,
        add: bool,
    ) {
        debug_assert_eq!(slot, key_slot(key));
        debug_assert!(f_w0 != 0);
        let bytes = self.slabs.footprint(u64::from(s_units(f_w1)));
        let term = digest_term(h, version);
        let ttl = f_w1 & S_TTL != 0;
        let m = self
            .per_memgest
            .entry(MemgestId(s_memgest(f_w1)))
            .or_default();
        let s = &mut self.slots[usize::from(slot)];
        if add {
            m.keys += 1;
            m.bytes += bytes;
            s.keys += 1;
            s.bytes += bytes;
            s.digest = s.digest.wrapping_add(term);
            s.ttl += u32::from(ttl);
            self.used_bytes += bytes;
            self.count += 1;
            self.ttl_count += u64::from(ttl);
        } else {
            m.keys -= 1;
            m.bytes -= bytes;
            s.keys -= 1;
            s.bytes -= bytes;
            s.digest = s.digest.wrapping_sub(term);
            s.ttl -= u32::from(ttl);
            self.used_bytes -= bytes;
            self.count -= 1;
            self.ttl_count -= u64::from(ttl);
        }
        self.slot_index_account(key, slot, s_memgest(f_w1), version, add);
    }

    /// [`Store::account`] of `old` (removed) then `new` (added) for one key rewritten in
    /// place: the same sums, with the key's slot (a CRC16 of the key) computed once and the
    /// slot's and memgest's counters touched once. Each triple is (index word, side word,
    /// version).
    fn account_replace(
        &mut self,
        key: &[u8],
        h: u64,
        slot: u16,
        old: (u64, u64, Version),
        new: (u64, u64, Version),
    ) {
        debug_assert_eq!(slot, key_slot(key));
        let old_bytes = self.slabs.footprint(u64::from(s_units(old.1)));
        let new_bytes = self.slabs.footprint(u64::from(s_units(new.1)));
        let (old_m, new_m) = (MemgestId(s_memgest(old.1)), MemgestId(s_memgest(new.1)));
        if old_m == new_m {
            let m = self.per_memgest.entry(old_m).or_default();
            m.bytes = m.bytes - old_bytes + new_bytes;
        } else {
            let m = self.per_memgest.entry(old_m).or_default();
            m.keys -= 1;
            m.bytes -= old_bytes;
            let m = self.per_memgest.entry(new_m).or_default();
            m.keys += 1;
            m.bytes += new_bytes;
        }
        let (old_ttl, new_ttl) = (old.1 & S_TTL != 0, new.1 & S_TTL != 0);
        let s = &mut self.slots[usize::from(slot)];
        s.bytes = s.bytes - old_bytes + new_bytes;
        s.digest = s
            .digest
            .wrapping_sub(digest_term(h, old.2))
            .wrapping_add(digest_term(h, new.2));
        s.ttl = s.ttl - u32::from(old_ttl) + u32::from(new_ttl);
        self.used_bytes = self.used_bytes - old_bytes + new_bytes;
        self.ttl_count = self.ttl_count - u64::from(old_ttl) + u64::from(new_ttl);
        self.slot_index_replace(key, slot, (old_m.0, old.2), (new_m.0, new.2));
    }

    /// Start loading `slot`'s accounting line (a hint: changes nothing). The batched request
    /// path calls it for each SET of a batch before running the batch, so the SET's
    /// [`Store::account_replace`] finds the line in the cache.
    #[inline]
    pub fn prefetch_slot(&self, slot: u16) {
        if let Some(s) = self.slots.get(usize::from(slot)) {
            crate::read::prefetch(std::ptr::from_ref(s).cast());
        }
    }

    // ----- public operations --------------------------------------------------------------

    pub fn reader(&self) -> Reader {
        // SAFETY: both mappings live as long as the Arcs the reader holds.
        let view = unsafe {
            RegionsView::new(
                self.index.base(),
                self.index.len(),
                self.data.base(),
                self.data.len(),
            )
        };
        Reader {
            index: self.index.clone(),
            _data: self.data.clone(),
            view,
            policy_area_base: self.policy_area_base,
            policy_area_bytes: self.policy_area_bytes,
        }
    }

    pub fn export(&self) -> ExportInfo {
        ExportInfo {
            index_fd: self.index.raw_fd(),
            index_len: self.index.len(),
            data_fd: self.data.raw_fd(),
            data_len: self.data.len(),
            format_version: FORMAT_VERSION,
        }
    }

    pub fn page_backing(&self) -> (crate::PageBacking, crate::PageBacking) {
        (self.index.backing(), self.data.backing())
    }

    pub fn set_config_id(&mut self, id: u64) {
        self.index
            .word(HDR_CONFIG as u64 * 8)
            .store(id, Ordering::Release);
    }

    pub fn get_entry(&self, key: &[u8], h: u64) -> Option<Entry> {
        let f = self.find(key, h)?;
        let meta = self.meta_of(&f);
        let (_, kl, vl, _) = self.header(ie_location(f.w0));
        let img = self.load_entry(ie_location(f.w0), s_units(f.w1));
        let hdr = de_header_bytes(
            self.data
                .load(u64::from(ie_location(f.w0)) * UNIT_BYTES + 16),
        );
        let start = hdr + kl as usize;
        let value = img.get(start..start + vl as usize)?.to_vec();
        Some(Entry {
            value,
            version: meta.version,
            memgest: meta.memgest,
            expire_at_ms: meta.expire_at_ms,
            kind: meta.kind,
        })
    }

    /// Bytes `key`'s published entry is accounted for (`used_bytes`, per memgest and per
    /// slot): its data-region slot (size class, or page-rounded run) plus one index entry.
    pub fn footprint(&self, key: &[u8], h: u64) -> Option<u64> {
        let f = self.find(key, h)?;
        Some(self.slabs.footprint(u64::from(s_units(f.w1))) + INDEX_ENTRY_BYTES)
    }

    pub fn get_meta(&self, key: &[u8], h: u64) -> Option<Meta> {
        let f = self.find(key, h)?;
        Some(self.meta_of(&f))
    }

    /// Unlink a found entry from the index (both tables), free its data, update accounting.
    fn unlink(&mut self, key: &[u8], h: u64, f: &Found) -> Meta {
        let meta = self.meta_of(f);
        self.mark_dead(ie_location(f.w0));
        self.clear_entry(self.table, f, h);
        if self.mirrored(f.bucket) {
            self.mirror_remove(key, h);
        }
        self.account(key, h, key_slot(key), f.w0, f.w1, meta.version, false);
        self.slabs.free(ie_location(f.w0), &self.data);
        meta
    }

    pub fn remove(&mut self, key: &[u8], h: u64) -> Option<Meta> {
        let f = self.find(key, h)?;
        let m = self.unlink(key, h, &f);
        self.migrate_step();
        Some(m)
    }

    pub fn stage(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[u8],
        meta: Meta,
        evictable: &dyn Fn(MemgestId) -> bool,
    ) -> Result<(StagedHandle, Vec<Version>), Error> {
        let units = entry_units(
            key.len(),
            value.len(),
            meta.expire_at_ms.is_some(),
            meta.memgest.0,
        );
        let evicted = self.make_room(units, evictable)?;
        let loc = self.slabs.alloc(units).ok_or(Error::NoSpace)?;
        let bound = ie_pack(loc, tag_of(h), 0);
        let check = self.write_entry(loc, key, value, &meta, bound);
        let w0 = ie_pack(loc, tag_of(h), check);
        let w1 = side_pack(units as u32, meta.memgest.0, 0)
            | if meta.expire_at_ms.is_some() {
                S_TTL
            } else {
                0
            };
        Ok((StagedHandle { loc, w0, w1 }, evicted))
    }

    pub fn discard(&mut self, handle: StagedHandle) {
        self.slabs.free(handle.loc, &self.data);
    }

    /// Switch `key`'s index entry to the staged entry (insert if new); free the old data.
    pub fn publish(
        &mut self,
        key: &[u8],
        h: u64,
        handle: StagedHandle,
        evictable: &dyn Fn(MemgestId) -> bool,
    ) -> Result<Vec<Version>, Error> {
        let version = {
            let (v, _, _, _) = self.header(handle.loc);
            v
        };
        let found = self.find(key, h);
        self.publish_at(found, key, h, key_slot(key), handle, version, evictable)
    }

    /// [`Store::publish`] with `key`'s lookup done by the caller: `found` must be what
    /// `self.find(key, h)` returns now (no index change since), `version` the staged entry's.
    #[allow(clippy::too_many_arguments)]
    fn publish_at(
        &mut self,
        found: Option<Found>,
        key: &[u8],
        h: u64,
        slot: u16,
        handle: StagedHandle,
        version: Version,
        evictable: &dyn Fn(MemgestId) -> bool,
    ) -> Result<Vec<Version>, Error> {
        let mut evicted = Vec::new();
        if let Some(f) = found {
            let old = self.meta_of(&f);
            // Keep the access bits of the key across versions.
            let w1 = handle.w1 | (f.w1 & S_FREQ);
            self.mark_dead(ie_location(f.w0));
            // The policy nibble changes only if the TTL bit does (the reference bits carry
            // over): an overwrite that keeps it skips `set_policy`'s two locked RMWs. `f.w1`
            // has the nibble as the lookup read it; a reader's reference bump since then is
            // kept, as one landing between the two RMWs would be.
            if (w1 ^ f.w1) & (POLICY_NIBBLE << S_SHIFT) != 0 {
                self.set_policy(self.table, f.ie_off, w1);
            }
            // The one-word publish: readers see the old entry or the new one, whole.
            self.index
                .word(f.ie_off)
                .store(handle.w0, Ordering::Release);
            if self.mirrored(f.bucket) {
                self.mirror_update(key, h, handle.w0, w1);
            }
            self.mark_live(handle.loc);
            self.account_replace(
                key,
                h,
                slot,
                (f.w0, f.w1, old.version),
                (handle.w0, w1, version),
            );
            self.slabs.free(ie_location(f.w0), &self.data);
            self.s3_admit(h, handle.loc, w1);
        } else {
            let placed = match self.insert_in(self.table, h, handle.w0, handle.w1) {
                Some(p) => p,
                None => match self.resolve_conflict(h, evictable, &mut evicted) {
                    Some(()) => match self.insert_in(self.table, h, handle.w0, handle.w1) {
                        Some(p) => p,
                        None => {
                            self.slabs.free(handle.loc, &self.data);
                            return Err(Error::NoSpace);
                        }
                    },
                    None => {
                        self.slabs.free(handle.loc, &self.data);
                        return Err(Error::NoSpace);
                    }
                },
            };
            if self.mirrored(placed.bucket) {
                if let Some(to) = self.migration.as_ref().map(|m| m.to) {
                    if self.insert_in(to, h, handle.w0, handle.w1).is_none() {
                        // Target neighbourhood full: restart the upsize larger.
                        self.migration = None;
                        self.free_table(to);
                        self.start_upsize(grow(to.buckets, self.buckets_max));
                    }
                }
            }
            self.mark_live(handle.loc);
            self.account(key, h, slot, handle.w0, handle.w1, version, true);
            self.s3_admit(h, handle.loc, handle.w1);
            self.maybe_upsize();
        }
        self.migrate_step();
        Ok(evicted)
    }

    /// Entries evicted so far (cheap: no pass over the slot counters).
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    pub fn put(
        &mut self,
        key: &[u8],
        h: u64,
        value: &[u8],
        meta: Meta,
        evictable: &dyn Fn(MemgestId) -> bool,
    ) -> Result<Vec<Version>, Error> {
        let (handle, mut evicted) = self.stage(key, h, value, meta, evictable)?;
        evicted.extend(self.publish(key, h, handle, evictable)?);
        Ok(evicted)
    }

    /// Look `key` up for a plain overwrite that follows at once ([`Store::put_looked_up`]),
    /// so that a SET finds its key once, not twice. Also says whether the entry found is
    /// expired at `now_ms` (the caller then takes the general path, which reaps it first); an
    /// entry without a TTL (the policy nibble's TTL bit) is decided without reading its
    /// expiry.
    /// `slot` is `key_slot(key)`, computed once by the caller.
    pub(crate) fn look_up_for_put(&self, key: &[u8], h: u64, slot: u16, now_ms: u64) -> PutLookup {
        debug_assert_eq!(slot, key_slot(key));
        let found = self.find(key, h);
        let expired = found.is_some_and(|f| {
            f.w1 & S_TTL != 0 && matches!(self.header(ie_location(f.w0)).3, Some(t) if t <= now_ms)
        });
        PutLookup {
            found,
            h,
            slot,
            expired,
        }
    }

    /// [`Store::put`] reusing `lookup`, which must come from [`Store::look_up_for_put`] of the
    /// same key with no mutation since (the `&mut self` between them is the caller's to
    /// keep): the same writes, one index probe fewer. If room had to be made first (an
    /// eviction may have unlinked anything), the key is looked up again.
    pub(crate) fn put_looked_up(
        &mut self,
        lookup: PutLookup,
        key: &[u8],
        value: &[u8],
        meta: Meta,
        evictable: &dyn Fn(MemgestId) -> bool,
    ) -> Result<Vec<Version>, Error> {
        let h = lookup.h;
        if let Some(f) = lookup.found {
            self.slabs.prefetch_free(ie_location(f.w0));
        }
        let (handle, mut evicted) = self.stage(key, h, value, meta, evictable)?;
        let found = if evicted.is_empty() {
            lookup.found
        } else {
            self.find(key, h)
        };
        evicted.extend(self.publish_at(
            found,
            key,
            h,
            lookup.slot,
            handle,
            meta.version,
            evictable,
        )?);
        Ok(evicted)
    }

    /// No free index entry near `h`'s home: grow the index now if possible, else evict an
    /// evictable entry of the neighbourhood (CliqueMap's associativity-conflict eviction).
    fn resolve_conflict(
        &mut self,
        h: u64,
        evictable: &dyn Fn(MemgestId) -> bool,
        evicted: &mut Vec<Version>,
    ) -> Option<()> {
        self.finish_migration();
        self.conflict_upsizes += 1;
        if self.start_upsize(grow(self.table.buckets, self.buckets_max)) {
            self.finish_migration();
            return Some(());
        }
        let t = self.table;
        let home = t.home(h);
        for k in 0..PROBE_BUCKETS_MAX.min(t.buckets()) {
            let b = t.after(home, k);
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(t, b, i);
                let w0 = self.index.load(off);
                if w0 != 0 && evictable(MemgestId(s_memgest(self.side(t, off, w0)))) {
                    if let Some(v) = self.evict_at(off) {
                        evicted.push(v);
                        return Some(());
                    }
                }
            }
        }
        None
    }

    /// Evict the entry whose index entry is at `ie_off` in the readers' table.
    fn evict_at(&mut self, ie_off: u64) -> Option<Version> {
        let w0 = self.index.load(ie_off);
        if w0 == 0 {
            return None;
        }
        let key = self.read_key(ie_location(w0))?;
        let h = key_hash(&key);
        match self.find(&key, h) {
            Some(f) if f.ie_off == ie_off => {
                let m = self.unlink(&key, h, &f);
                self.evictions += 1;
                Some(m.version)
            }
            _ => None,
        }
    }

    /// The live index entry of the data entry at `loc`, if it is published (not staged, not
    /// free), with its key's hash and the key.
    fn owner_of(&self, loc: u32) -> Option<(Found, u64, Vec<u8>)> {
        // A freed slot may sit on a page already returned to the OS: reading its "key" would
        // fault a zero page back into the memfd (memory and ~µs per page). Ask the allocator.
        if !self.slabs.is_allocated(loc) {
            return None;
        }
        let key = self.read_key(loc)?;
        let h = key_hash(&key);
        let f = self.find(&key, h)?;
        (ie_location(f.w0) == loc).then_some((f, h, key))
    }

    /// Whether `loc` holds a published entry (an S3-FIFO queue sweep).
    fn slot_is_live(&self, loc: u32) -> bool {
        self.owner_of(loc).is_some()
    }

    fn evict_loc(
        &mut self,
        loc: u32,
        evictable: &dyn Fn(MemgestId) -> bool,
        respect_ref: bool,
    ) -> Option<Version> {
        let (f, h, key) = self.owner_of(loc)?;
        if !evictable(MemgestId(s_memgest(f.w1))) {
            return None;
        }
        if respect_ref && f.w1 & S_FREQ != 0 {
            let (pw, shift) = self.policy_word(self.table, f.ie_off);
            pw.fetch_and(!(POLICY_FREQ << shift), Ordering::Relaxed);
            return None;
        }
        let m = self.unlink(&key, h, &f);
        self.evictions += 1;
        self.ghost_add(h);
        Some(m.version)
    }

    /// Evict until an entry of `units` fits, within the per-write work bound.
    fn make_room(
        &mut self,
        units: u64,
        evictable: &dyn Fn(MemgestId) -> bool,
    ) -> Result<Vec<Version>, Error> {
        let mut evicted = Vec::new();
        let mut work = 0u32;
        if !self.slabs.has_room(units)
            && !self
                .per_memgest
                .iter()
                .any(|(m, u)| u.keys > 0 && evictable(*m))
        {
            // Nothing evictable is stored: don't scan pinned data just to find that out.
            return Err(Error::NoSpace);
        }
        while !self.slabs.has_room(units) {
            if work >= EVICTION_SCAN_PER_WRITE_MAX {
                return Err(Error::NoSpace);
            }
            let before = evicted.len();
            if let Some(class) = self.slabs.class_of(units) {
                match self.policy {
                    EvictionPolicy::Clock => {
                        self.clock_class(class, evictable, &mut work, &mut evicted)
                    }
                    EvictionPolicy::S3Fifo => {
                        self.s3_class(class, evictable, &mut work, &mut evicted)
                    }
                }
                if self.slabs.has_room(units) {
                    break;
                }
            }
            if (evicted.len() == before || self.slabs.class_of(units).is_none())
                && !self.global_evict(evictable, &mut work, &mut evicted)
            {
                return Err(Error::NoSpace);
            }
        }
        Ok(evicted)
    }

    /// CLOCK over the slots of `class`'s slabs: clear set reference bits, evict the first
    /// unreferenced evictable entry.
    fn clock_class(
        &mut self,
        class: u16,
        evictable: &dyn Fn(MemgestId) -> bool,
        work: &mut u32,
        evicted: &mut Vec<Version>,
    ) {
        let ci = usize::from(class);
        // Two full sweeps at most: the first may only clear reference bits.
        let mut wrapped = 0;
        while *work < EVICTION_SCAN_PER_WRITE_MAX && wrapped < 2 {
            let (page, idx) = self.clock_hands[ci];
            let slab = if idx == 0 || page == 0 {
                self.slabs.slabs_of_class(class, page).next()
            } else {
                Some(page)
            };
            let Some(slab) = slab else {
                self.clock_hands[ci] = (0, 0);
                wrapped += 1;
                if page == 0 {
                    return; // class has no slabs
                }
                continue;
            };
            let slots = self.slabs.slab_slots(slab);
            let mut i = if slab == page { idx } else { 0 };
            while i < slots.len() && *work < EVICTION_SCAN_PER_WRITE_MAX {
                *work += 1;
                let loc = slots[i];
                i += 1;
                if let Some(v) = self.evict_loc(loc, evictable, true) {
                    evicted.push(v);
                    self.clock_hands[ci] = (slab, i);
                    return;
                }
            }
            self.clock_hands[ci] = if i >= slots.len() {
                (slab, 0)
            } else {
                (slab, i)
            };
        }
    }

    fn s3_admit(&mut self, h: u64, loc: u32, w1: u64) {
        if self.policy != EvictionPolicy::S3Fifo {
            return;
        }
        let ci = self
            .slabs
            .class_of(u64::from(s_units(w1)))
            .map_or(self.s3.len() - 1, usize::from);
        if self.ghost_set.remove(&h) {
            self.s3[ci].main.push_back(loc);
        } else {
            self.s3[ci].small.push_back(loc);
        }
        // Queues hold stale locations (updated, deleted, expired keys) until eviction pops
        // them; without memory pressure nothing pops, so drop stale ones past 2× the keys.
        let q = &self.s3[ci];
        let len = q.small.len() + q.main.len();
        if len > (2 * self.count as usize + 1024).max(q.sweep_at) {
            let mut small = std::mem::take(&mut self.s3[ci].small);
            let mut main = std::mem::take(&mut self.s3[ci].main);
            // A location freed and reused by another entry is queued twice and both copies
            // look live: keep its first occurrence only.
            self.s3_swept += len as u64;
            let mut seen = HashSet::with_capacity(len);
            small.retain(|&l| self.slot_is_live(l) && seen.insert(l));
            main.retain(|&l| self.slot_is_live(l) && seen.insert(l));
            let left = small.len() + main.len();
            self.s3[ci].small = small;
            self.s3[ci].main = main;
            self.s3[ci].sweep_at = 2 * left;
        }
    }

    fn ghost_add(&mut self, h: u64) {
        if self.policy != EvictionPolicy::S3Fifo {
            return;
        }
        let cap = (self.count as usize).max(1024);
        if self.ghost_set.insert(h) {
            self.ghost.push_back(h);
        }
        while self.ghost.len() > cap {
            if let Some(old) = self.ghost.pop_front() {
                self.ghost_set.remove(&old);
            }
        }
    }

    /// S3-FIFO in one class: evict from the small FIFO unless its entry was re-accessed
    /// (then it moves to main); main is a FIFO with reinsertion while the frequency is > 0.
    fn s3_class(
        &mut self,
        class: u16,
        evictable: &dyn Fn(MemgestId) -> bool,
        work: &mut u32,
        evicted: &mut Vec<Version>,
    ) {
        let ci = usize::from(class);
        while *work < EVICTION_SCAN_PER_WRITE_MAX {
            *work += 1;
            let q = &self.s3[ci];
            let from_small = !q.small.is_empty()
                && (q.small.len() * 10 >= q.small.len() + q.main.len() || q.main.is_empty());
            let loc = if from_small {
                self.s3[ci].small.pop_front()
            } else {
                self.s3[ci].main.pop_front()
            };
            let Some(loc) = loc else { return };
            let Some((f, _h, _)) = self.owner_of(loc) else {
                continue; // stale: freed, moved or reused
            };
            if !evictable(MemgestId(s_memgest(f.w1))) {
                // Pinned entries stay; park them at the back of main.
                self.s3[ci].main.push_back(loc);
                continue;
            }
            let freq = (f.w1 & S_FREQ) >> S_SHIFT;
            if freq > 0 {
                let (w, shift) = self.policy_word(self.table, f.ie_off);
                if from_small {
                    w.fetch_and(!(POLICY_FREQ << shift), Ordering::Relaxed);
                } else {
                    // freq > 0 was read just now and only this writer lowers it: no borrow
                    // out of the nibble.
                    w.fetch_sub(1 << shift, Ordering::Relaxed);
                }
                self.s3[ci].main.push_back(loc);
                continue;
            }
            if let Some(v) = self.evict_loc(loc, evictable, false) {
                evicted.push(v);
                return;
            }
        }
    }

    /// Slab reassignment: a hand over all pages empties a whole slab (or large run) of
    /// evictable entries so its page returns to the budget. Pages holding pinned data are
    /// skipped. Returns whether anything was freed.
    fn global_evict(
        &mut self,
        evictable: &dyn Fn(MemgestId) -> bool,
        work: &mut u32,
        evicted: &mut Vec<Version>,
    ) -> bool {
        let mut wrapped = false;
        while *work < EVICTION_SCAN_PER_WRITE_MAX {
            let next = self.slabs.pages_from(self.global_hand).next();
            let Some((page, kind)) = next else {
                if wrapped {
                    return false;
                }
                wrapped = true;
                self.global_hand = 0;
                continue;
            };
            self.global_hand = page + 1;
            let slots = match kind {
                PageKind::Large { .. } => {
                    vec![(u64::from(page) * (PAGE_BYTES / UNIT_BYTES)) as u32]
                }
                PageKind::Slab { .. } => self.slabs.slab_slots(page),
            };
            // Only take pages that hold nothing pinned (or staged): otherwise the page stays.
            let mut owners = Vec::with_capacity(slots.len());
            let mut ok = true;
            for &loc in &slots {
                *work += 1;
                match self.owner_of(loc) {
                    Some((f, _, _)) if evictable(MemgestId(s_memgest(f.w1))) => owners.push(loc),
                    _ => {
                        ok = false;
                        break;
                    }
                }
            }
            if !ok || owners.is_empty() {
                continue;
            }
            for loc in owners {
                if let Some(v) = self.evict_loc(loc, evictable, false) {
                    evicted.push(v);
                }
            }
            return true;
        }
        false
    }

    pub fn len(&self) -> u64 {
        self.count
    }

    pub fn clear(&mut self) {
        // Data first: a direct reader at a hint must not find a live entry once the empty
        // table is published (punched pages read as zeros, live bit clear). Lookups in the old
        // table meanwhile fail their checksum and retry (then take the writer's path).
        self.slabs.reset(&self.data);
        if let Some(m) = self.migration.take() {
            self.free_table(m.to);
        }
        let old = self.table;
        if let Some(t) = self.alloc_table(self.buckets_initial) {
            self.switch_to(t);
            self.free_table(old);
        } else {
            // No room for a fresh table: clear the current one in place.
            self.index.punch(old.table_offset(), old.table_bytes());
            let t = Layout {
                gen: old.gen.wrapping_add(1),
                ..old
            };
            self.switch_to(t);
        }
        self.slot_index_clear();
        self.count = 0;
        self.ttl_count = 0;
        self.used_bytes = 0;
        self.per_memgest.clear();
        self.slots.iter_mut().for_each(|s| *s = SlotAcct::default());
        self.clock_hands.iter_mut().for_each(|h| *h = (0, 0));
        self.global_hand = 0;
        for q in &mut self.s3 {
            q.small.clear();
            q.main.clear();
        }
        self.expire_cursor = 0;
    }

    /// Entries whose home is bucket `b` of the readers' table, as (ie entry, key hash), key
    /// bytes appended to `keys`.
    fn home_entries(&self, b: u64, tag: Option<u8>, mut f: impl FnMut(Found, u64, Vec<u8>)) {
        let t = self.table;
        for k in 0..=self.reach(t, b) {
            let pb = t.after(b, k);
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(t, pb, i);
                let w0 = self.index.load(off);
                // With a tag, a neighbour of another tag is skipped unread (its key cannot
                // hash to the caller's bits).
                if w0 == 0 || tag.is_some_and(|g| ie_tag(w0) != g) {
                    continue;
                }
                let Some(key) = self.read_key(ie_location(w0)) else {
                    continue;
                };
                let h = key_hash(&key);
                if t.home(h) != b {
                    continue;
                }
                let w1 = self.side(t, off, w0);
                f(
                    Found {
                        ie_off: off,
                        bucket: pb,
                        w0,
                        w1,
                    },
                    h,
                    key,
                );
            }
        }
    }

    /// SCAN over home buckets: a key present throughout is returned even if the table grows
    /// between calls (see the cursor comment inside).
    pub fn scan(
        &self,
        cursor: u64,
        count: usize,
        slot: Option<u16>,
        now_ms: Option<u64>,
        out: &mut Vec<Vec<u8>>,
    ) -> u64 {
        let t = self.table;
        // The cursor is a 32-bit hash prefix: every key whose prefix is below it was returned.
        // Home buckets are monotone in the prefix, so after a resize the scan resumes at the
        // bucket holding the cursor prefix: nothing is skipped, some keys may repeat.
        let mut prefix = cursor.min(1 << 32);
        let want = out.len() + count.max(1);
        // At most 10 × count buckets per call, like Redis's empty-bucket bound.
        let mut visits = count.max(1).saturating_mul(10);
        loop {
            let b = t.home(prefix);
            self.home_entries(b, None, |f, _h, key| {
                if slot.is_some_and(|sl| key_slot(&key) != sl) {
                    return;
                }
                if let Some(now) = now_ms {
                    let (_, _, _, exp) = self.header(ie_location(f.w0));
                    if matches!(exp, Some(t) if t <= now) {
                        return;
                    }
                }
                out.push(key);
            });
            prefix = t.first_prefix(b + 1);
            visits -= 1;
            if prefix >= 1 << 32 {
                return 0;
            }
            if out.len() >= want || visits == 0 {
                return prefix;
            }
        }
    }

    pub fn random_key(&self, seed: u64, now_ms: u64) -> Option<Vec<u8>> {
        if self.count == 0 {
            return None;
        }
        let n = self.table.buckets();
        let start = digest_term(seed, Version(u128::from(seed))) % n;
        for k in 0..n {
            let b = self.table.after(start, k);
            let mut found: Vec<Vec<u8>> = Vec::new();
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(self.table, b, i);
                let w0 = self.index.load(off);
                if w0 == 0 {
                    continue;
                }
                let (_, _, _, exp) = self.header(ie_location(w0));
                if matches!(exp, Some(t) if t <= now_ms) {
                    continue;
                }
                if let Some(k) = self.read_key(ie_location(w0)) {
                    found.push(k);
                }
            }
            if !found.is_empty() {
                let i = (seed % found.len() as u64) as usize;
                return found.into_iter().nth(i);
            }
        }
        None
    }

    pub fn slot_key_count(&self, slot: u16) -> u64 {
        self.slots.get(usize::from(slot)).map_or(0, |s| s.keys)
    }

    pub fn slot_ttl_count(&self, slot: u16) -> u64 {
        self.slots
            .get(usize::from(slot))
            .map_or(0, |s| u64::from(s.ttl))
    }

    pub fn slot_bytes(&self, slot: u16) -> u64 {
        self.slots.get(usize::from(slot)).map_or(0, |s| s.bytes)
    }

    pub fn slot_digest(&self, slot: u16) -> u64 {
        self.slots.get(usize::from(slot)).map_or(0, |s| s.digest)
    }

    /// Unlink `key` if its entry has expired at `now_ms` (lazy expiry by a visitor, as Redis's
    /// SCAN and KEYS expire the keys they meet); the unlinked version, for the tombstone.
    pub fn reap_if_expired(&mut self, key: &[u8], now_ms: u64) -> Option<Version> {
        let h = key_hash(key);
        let f = self.find(key, h)?;
        if f.w1 & S_TTL == 0 {
            return None;
        }
        let (_, _, _, exp) = self.header(ie_location(f.w0));
        if !matches!(exp, Some(t) if t <= now_ms) {
            return None;
        }
        Some(self.unlink(key, h, &f).version)
    }

    pub fn expire_step(&mut self, now_ms: u64, report: &mut TickReport) -> Vec<(Vec<u8>, Version)> {
        let mut out = Vec::new();
        let t = self.table;
        let n = t.buckets();
        // Buckets visited are bounded too, so a tick over a table with few TTL keys ends.
        let mut buckets = 0u64;
        while report.expiry_scanned < EXPIRE_WORK_PER_TICK_MAX
            && buckets < 4 * u64::from(EXPIRE_WORK_PER_TICK_MAX)
        {
            let b = self.expire_cursor % n;
            self.expire_cursor = (b + 1) % n;
            buckets += 1;
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(t, b, i);
                let w0 = self.index.load(off);
                if w0 == 0 {
                    continue;
                }
                let (pw, shift) = self.policy_word(t, off);
                if (pw.load(Ordering::Relaxed) >> shift) & POLICY_TTL == 0 {
                    continue;
                }
                report.expiry_scanned += 1;
                let (_, _, _, exp) = self.header(ie_location(w0));
                if !matches!(exp, Some(t) if t <= now_ms) {
                    continue;
                }
                let Some(key) = self.read_key(ie_location(w0)) else {
                    continue;
                };
                let h = key_hash(&key);
                if let Some(f) = self.find(&key, h) {
                    let m = self.unlink(&key, h, &f);
                    out.push((key, m.version));
                }
            }
            if self.expire_cursor == 0 {
                break;
            }
        }
        out
    }

    pub fn maintenance_step(&mut self, report: &mut TickReport) {
        for _ in 0..UPSIZE_STEPS_PER_TICK {
            if self.migration.is_none() {
                break;
            }
            report.buckets_migrated += self.migrate_step();
        }
        report.upsize_in_progress = self.migration.is_some();
        let released_before = self.slabs.bytes_released;
        self.compact(report);
        self.slabs.release(&self.data);
        report.bytes_released += self.slabs.bytes_released - released_before;
    }

    /// Move entries out of the emptiest slab of the most wasteful class, so the slab empties
    /// and its page returns to the OS (CliqueMap's reshaping, by relocation).
    fn compact(&mut self, report: &mut TickReport) {
        let Some((class, page)) = self.slabs.compaction_candidate() else {
            return;
        };
        for loc in self.slabs.slab_slots(page) {
            if report.entries_moved >= COMPACT_MOVES_PER_TICK {
                return;
            }
            let Some((f, h, key)) = self.owner_of(loc) else {
                return; // staged or unknown entry: leave this slab alone
            };
            let Some(new_loc) = self.slabs.alloc_in_class_except(class, page) else {
                return;
            };
            let units = s_units(f.w1);
            let mut img = self.load_entry(loc, units);
            // The copy is unpublished until the index points at it.
            img[16] &= !(DE_LIVE_BIT as u8);
            let bound = ie_pack(new_loc, ie_tag(f.w0), 0);
            let w0 = ie_pack(new_loc, ie_tag(f.w0), checksum(&img, bound));
            // Same key, same policy nibble: only the index word changes.
            let w1 = f.w1;
            fence(Ordering::Release); // as in write_entry: the slot may be a freed one
            self.data.write_bytes(u64::from(new_loc) * UNIT_BYTES, &img);
            self.mark_dead(loc);
            self.index.word(f.ie_off).store(w0, Ordering::Release);
            if self.mirrored(f.bucket) {
                self.mirror_update(&key, h, w0, w1);
            }
            self.mark_live(new_loc);
            self.slabs.free(loc, &self.data);
            if self.policy == EvictionPolicy::S3Fifo {
                self.s3[usize::from(class)].main.push_back(new_loc);
            }
            report.entries_moved += 1;
        }
    }

    /// Full consistency check (O(entries)): every index entry of the readers' table points at
    /// a checksum-valid entry of its key, homed within the probe distance; overflow counts,
    /// key count, bytes and slot digests match. For tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        let t = self.table;
        let n = t.buckets();
        let mut overflow = vec![0u64; n as usize];
        let mut reach = vec![0u64; n as usize];
        let mut keys = HashSet::new();
        let mut count = 0u64;
        let mut ttl_count = 0u64;
        let mut bytes = 0u64;
        let mut digests: BTreeMap<u16, u64> = BTreeMap::new();
        let mut slot_ttl: BTreeMap<u16, u32> = BTreeMap::new();
        for b in 0..n {
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(t, b, i);
                let w0 = self.index.load(off);
                if w0 == 0 {
                    continue;
                }
                let w1 = self.side(t, off, w0);
                let loc = ie_location(w0);
                let img = self.load_entry(loc, s_units(w1));
                if checksum(&img, w0) != ie_check(w0) {
                    return Err(format!("bucket {b} entry {i}: bad checksum at {loc}"));
                }
                if !de_live(self.data.load(u64::from(loc) * UNIT_BYTES + 16)) {
                    return Err(format!(
                        "bucket {b} entry {i}: published entry at {loc} not live"
                    ));
                }
                let key = self.read_key(loc).ok_or("unreadable key")?;
                let h = key_hash(&key);
                if tag_of(h) != ie_tag(w0) {
                    return Err(format!("bucket {b} entry {i}: tag mismatch"));
                }
                let home = t.home(h);
                let dist = (b + n - home) % n;
                if dist >= PROBE_BUCKETS_MAX {
                    return Err(format!("bucket {b}: key homed at {home} too far"));
                }
                if dist > 0 {
                    overflow[home as usize] += 1;
                    reach[home as usize] = reach[home as usize].max(dist);
                }
                let (version, _, _, exp) = self.header(loc);
                if exp.is_some() != (w1 & S_TTL != 0) {
                    return Err(format!("bucket {b} entry {i}: TTL bit mismatch"));
                }
                if !keys.insert(key.clone()) {
                    return Err(format!("duplicate key {key:?}"));
                }
                if self.find(&key, h).map(|f| f.ie_off) != Some(off) {
                    return Err(format!("key {key:?} not found where it is"));
                }
                count += 1;
                ttl_count += u64::from(exp.is_some());
                *slot_ttl.entry(key_slot(&key)).or_insert(0) += u32::from(exp.is_some());
                bytes += self.slabs.footprint(u64::from(s_units(w1)));
                let d = digests.entry(key_slot(&key)).or_insert(0);
                *d = d.wrapping_add(digest_term(h, version));
            }
        }
        for b in 0..n {
            let v = self.overflow(t, b);
            if overflow_count(v) != overflow[b as usize] || self.reach(t, b) < reach[b as usize] {
                return Err(format!(
                    "bucket {b}: overflow {v:#x} but {} displaced, reach {}",
                    overflow[b as usize], reach[b as usize]
                ));
            }
        }
        if ttl_count != self.ttl_count {
            return Err(format!(
                "ttl_count {} but {ttl_count} entries with a TTL",
                self.ttl_count
            ));
        }
        for (slot, n) in self.slots.iter().map(|s| s.ttl).enumerate() {
            let counted = slot_ttl.get(&(slot as u16)).copied().unwrap_or(0);
            if n != counted {
                return Err(format!(
                    "slot {slot}: {n} keys with a TTL but {counted} counted"
                ));
            }
        }
        if count != self.count {
            return Err(format!("count {} but {count} entries", self.count));
        }
        if bytes != self.used_bytes {
            return Err(format!(
                "used bytes {} but {bytes} counted",
                self.used_bytes
            ));
        }
        for (&slot, &d) in &digests {
            if self.slots[usize::from(slot)].digest != d {
                return Err(format!("slot {slot}: digest mismatch"));
            }
        }
        let total = |it: &mut dyn Iterator<Item = u64>| it.fold(0u64, u64::wrapping_add);
        if total(&mut self.slots.iter().map(|s| s.digest)) != total(&mut digests.values().copied())
        {
            return Err("digest of a slot without keys is not zero".into());
        }
        if self.slabs.committed() > self.slabs.budget() {
            return Err("committed bytes over budget".into());
        }
        self.check_slot_index()
    }

    pub fn touch(&mut self, h: u64) {
        let t = self.table;
        let home = t.home(h);
        let tag = tag_of(h);
        for k in 0..=self.reach(t, home) {
            let b = t.after(home, k);
            for i in 0..BUCKET_ENTRIES {
                let off = Self::ie_off(t, b, i);
                let w0 = self.index.load(off);
                if w0 != 0 && ie_tag(w0) == tag {
                    let (w, shift) = self.policy_word(t, off);
                    let cur = w.load(Ordering::Relaxed);
                    if (cur >> shift) & POLICY_FREQ != POLICY_FREQ {
                        // Readers CAS the same word: a CAS too (an add could carry into
                        // the TTL bit after a reader's bump), and a lost race is a lost
                        // access record, nothing more.
                        let _ = w.compare_exchange(
                            cur,
                            cur + (1 << shift),
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                }
            }
        }
    }

    /// The per-memgest counts of [`Store::stats`] alone (memgests holding keys), without
    /// the per-slot map `stats` builds: what a cluster node reports every 100 ms.
    pub fn memgest_usage(&self) -> Vec<(MemgestId, Usage)> {
        self.per_memgest
            .iter()
            .filter(|(_, u)| u.keys > 0)
            .map(|(k, u)| (*k, *u))
            .collect()
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            keys: self.count,
            keys_with_ttl: self.ttl_count,
            used_bytes: self.used_bytes,
            committed_bytes: self.slabs.committed(),
            // Tables plus their policy words (a word per bucket, in the policy areas).
            index_bytes: self.table.table_bytes()
                + self.table.buckets() * 8
                + self
                    .migration
                    .as_ref()
                    .map_or(0, |m| m.to.table_bytes() + m.to.buckets() * 8),
            memory_bytes_max: self.slabs.budget(),
            per_memgest: self.memgest_usage().into_iter().collect(),
            per_slot: self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.keys > 0)
                .map(|(i, s)| {
                    (
                        i as u16,
                        Usage {
                            keys: s.keys,
                            bytes: s.bytes,
                        },
                    )
                })
                .collect(),
            evictions: self.evictions,
            index_buckets: self.table.buckets(),
            index_load_factor: self.count as f64
                / (self.table.buckets() as f64 * BUCKET_ENTRIES as f64),
            upsizes: self.upsizes,
            index_conflicts: self.conflict_upsizes,
            eviction_queue_swept: self.s3_swept,
            ..EngineStats::default()
        }
    }
}
