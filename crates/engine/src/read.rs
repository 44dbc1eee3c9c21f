//! The lock-free reader: a pure function over read-only views of the two regions.
//!
//! Used by the server's network workers (through [`crate::Reader`]) and by the shared-memory
//! client in another process (which maps the memfds read-only and builds a [`RegionsView`]).
//!
//! # Algorithm (one attempt)
//! 1. Load the header's layout word (Acquire) — and, if the caller pinned one, the config id.
//! 2. Probe the key's home bucket (and, if its overflow word says keys homed there live
//!    further on, the buckets up to its reach) for index entries whose tag matches.
//! 3. For a match (one index word, format 5), load the data entry's word 2 (its lengths: the
//!    index word has no size), copy that many words with atomic loads, computing the check
//!    over the copy plus the index word's location and tag in the same pass, require the
//!    copy's word 2 to equal the first load and the check to equal the index word's, re-load
//!    the index word and require it unchanged, then compare the full key.
//! 4. Re-load the layout word: if it changed (upsize switch, flush), the whole probe is void.
//!
//! A torn copy (the writer reused the slot, or switched the index entry during our read)
//! fails the check or the re-check and the attempt is retried, up to
//! [`READ_RETRY_COUNT_MAX`] times, after which the caller gets `Retry`.
//!
//! # Memory ordering
//! The writer fills a data entry with Relaxed stores and then publishes it with one Release
//! store of the index word. The reader loads the index word with Acquire, so if it sees a
//! published word it also sees every entry store that preceded the publication (word 2
//! included, which is why the length load needs no stronger order). Stores that come *after*
//! (a later reuse of the slot) may be partly visible: that is the tearing the check and the
//! index re-check detect. An `Acquire` fence after the copy orders the copy before the
//! re-checks (the seqlock pattern, with atomics for every access so that no byte is ever read
//! non-atomically while written — crossbeam's `AtomicCell` argument). Since format 5 there is
//! one index word, so there is no pair of words to read torn.
//! Table switches use the same shape on the header word. A reader that raced a switch may have
//! probed a table that was freed (reads as zeros after a hole punch) or reused; the layout
//! re-check discards whatever it found there.
//!
//! Misses are validated the same way: a miss counts only if the layout did not change, and
//! because an existing key's index entry never moves within a table (updates rewrite it in
//! place), a key present for the whole read is always found.

use crate::api::ReadOutcome;
use crate::hash::key_hash;
use crate::layout::*;
use ringlet_types::limits::SHM_READ_RETRY_COUNT_MAX as READ_RETRY_COUNT_MAX;
use ringlet_types::{MemgestId, ValueKind, Version};
use std::ops::Range;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Read-only views of the index and data regions, in this process's address space.
#[derive(Clone, Copy, Debug)]
pub struct RegionsView {
    index: *const u8,
    index_len: usize,
    data: *const u8,
    data_len: usize,
}

// SAFETY: the view is only used for atomic loads of memory that stays mapped (see `new`).
unsafe impl Send for RegionsView {}
unsafe impl Sync for RegionsView {}

impl RegionsView {
    /// A view of regions mapped at `index` and `data`.
    ///
    /// # Safety
    /// Both ranges must be mapped, readable, 8-byte aligned and stay mapped for as long as the
    /// view (or a copy of it) is used. Their contents may change concurrently: that is fine.
    pub unsafe fn new(
        index: *const u8,
        index_len: usize,
        data: *const u8,
        data_len: usize,
    ) -> RegionsView {
        RegionsView {
            index,
            index_len,
            data,
            data_len,
        }
    }

    #[inline]
    fn iword(&self, off: u64) -> Option<&AtomicU64> {
        if off & 7 != 0 || off.checked_add(8)? > self.index_len as u64 {
            return None;
        }
        // SAFETY: in bounds and aligned per `new`'s contract; only loaded atomically.
        Some(unsafe { &*(self.index.add(off as usize) as *const AtomicU64) })
    }

    #[inline]
    fn dword(&self, off: u64) -> Option<&AtomicU64> {
        if off & 7 != 0 || off.checked_add(8)? > self.data_len as u64 {
            return None;
        }
        // SAFETY: in bounds and aligned per `new`'s contract; only loaded atomically.
        Some(unsafe { &*(self.data.add(off as usize) as *const AtomicU64) })
    }

    /// The 16 words of the bucket at byte offset `boff` (one bounds check for the whole
    /// bucket, where [`RegionsView::iword`] per entry word would take sixteen).
    #[inline]
    fn bucket(&self, boff: u64) -> Option<&[AtomicU64; BUCKET_WORDS]> {
        if boff & 7 != 0 || boff.checked_add(BUCKET_BYTES)? > self.index_len as u64 {
            return None;
        }
        // SAFETY: in bounds and aligned per `new`'s contract; only loaded atomically.
        Some(unsafe { &*(self.index.add(boff as usize) as *const [AtomicU64; BUCKET_WORDS]) })
    }

    /// The header's layout word (diagnostics and clients that cache the table shape).
    pub fn layout(&self) -> Option<Layout> {
        Some(Layout::unpack(
            self.iword(HDR_LAYOUT as u64 * 8)?.load(Ordering::Acquire),
        ))
    }

    /// The header's config id (the server's role/epoch word).
    pub fn config_id(&self) -> Option<u64> {
        Some(self.iword(HDR_CONFIG as u64 * 8)?.load(Ordering::Acquire))
    }

    /// Whether the index header carries the magic and format this crate understands.
    pub fn is_valid(&self) -> bool {
        self.iword(HDR_MAGIC as u64 * 8)
            .is_some_and(|w| w.load(Ordering::Relaxed) == INDEX_MAGIC)
            && self
                .iword(HDR_FORMAT as u64 * 8)
                .is_some_and(|w| w.load(Ordering::Relaxed) == FORMAT_VERSION)
    }
}

enum Probe {
    Hit {
        version: Version,
        memgest: MemgestId,
        expire_at_ms: Option<u64>,
        kind: ValueKind,
        ie_off: u64,
        direct: Direct,
        /// The value is `out[value_start..value_start + value_len]`: `out` holds the whole
        /// validated entry image (callers that want the value alone move it down).
        value_start: usize,
        value_len: usize,
    },
    WrongKey,
    Torn,
    /// The entry is larger than the caller's bound (it may or may not be the key's).
    TooLarge,
}

/// Copy and validate the entry an index entry points at. On a hit `out` holds the entry
/// image (header, key, value, padding) and the probe says where the value is in it.
///
/// Format 5: the index word has no size, so the entry's word 2 (its lengths) is loaded first
/// and says how many words to copy; the copy holds word 2 again, and a copy whose word 2
/// differs from that first load (the slot was reused in between) is torn. Nothing is decided
/// from the data before the check and the index re-check pass, so a reused slot or a damaged
/// image never turns a present key into a miss.
///
/// The copy and the CRC-32C are one pass ([`copy_and_checksum_into`]: each word is checksummed
/// as it is loaded, with the CPU's CRC instruction). Same bytes, same result as
/// [`checksum`] (`copy_and_checksum_matches_checksum`).
fn try_entry(
    view: &RegionsView,
    ie_off: u64,
    w: u64,
    key: &[u8],
    size_max: u64,
    out: &mut Vec<u8>,
) -> Probe {
    let loc = u64::from(ie_location(w)) * UNIT_BYTES;
    let Some(a2) = view.dword(loc + 16) else {
        return Probe::Torn;
    };
    // Ordered after the Acquire load of the index word: at least the published image's. Its
    // lengths say how much to copy; whatever they say, the copy is validated in full below
    // (a key of another length is decided only after the check and the index re-check, so
    // a reused slot or a damaged image is `Torn`, never a miss of a present key).
    let s1 = a2.load(Ordering::Relaxed);
    let size = de_units(s1) * UNIT_BYTES;
    if size > size_max {
        return Probe::TooLarge;
    }
    if size > ringlet_types::limits::ENTRY_BYTES_MAX as u64
        || loc
            .checked_add(size)
            .is_none_or(|e| e > view.data_len as u64)
    {
        return Probe::Torn;
    }
    // Every byte is overwritten by the copy below: only the part beyond the current length
    // needs filling (a clear first would zero all of it, a measurable share of a small GET;
    // a reader that keeps the image, as the batched path does, resizes to the same length
    // and fills nothing).
    out.resize(size as usize, 0);
    // SAFETY: `loc + size <= data_len` was checked above, `loc` is 8-aligned (`dword`
    // accepted `loc + 16`), and `new`'s contract keeps the range mapped; the words are only
    // loaded atomically.
    let words = unsafe {
        std::slice::from_raw_parts(
            view.data.add(loc as usize) as *const AtomicU64,
            size as usize / 8,
        )
    };
    let crc = copy_and_checksum_into(words, out, ie_bound(w));
    fence(Ordering::Acquire);
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&out[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    let (v_hi, v_lo, w2) = (word(0), word(1), word(2));
    if (w2 | DE_LIVE_BIT) != (s1 | DE_LIVE_BIT) || crc != ie_check(w) || size < 24 {
        return Probe::Torn;
    }
    // The index entry must still be the one we followed.
    if view.iword(ie_off).map(|a| a.load(Ordering::Relaxed)) != Some(w) {
        return Probe::Torn;
    }
    let hdr = de_header_bytes(w2);
    let kl = de_key_len(w2) as usize;
    let vl = de_value_len(w2) as usize;
    if !key_eq(&out[hdr..hdr + kl], key) {
        return Probe::WrongKey;
    }
    let version = Version((u128::from(v_hi) << 64) | u128::from(v_lo));
    let expire_at_ms = de_has_ttl(w2).then(|| word(3));
    let memgest = de_memgest(w2);
    Probe::Hit {
        version,
        memgest: MemgestId(memgest),
        expire_at_ms,
        kind: de_kind(w2),
        ie_off,
        direct: Direct::of(w, memgest),
        value_start: hdr + kl,
        value_len: vl,
    }
}

/// Whether a stored key equals `key`. Keys of 8 to 16 bytes (the common cache key) are two
/// overlapping word compares instead of a call to `memcmp`.
#[inline]
fn key_eq(stored: &[u8], key: &[u8]) -> bool {
    let n = key.len();
    if stored.len() != n {
        return false;
    }
    if (8..=16).contains(&n) {
        let w = |s: &[u8], i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&s[i..i + 8]);
            u64::from_le_bytes(b)
        };
        return w(stored, 0) == w(key, 0) && w(stored, n - 8) == w(key, n - 8);
    }
    stored == key
}

/// Leave only the value in `out` (it starts at `start` of the entry image).
#[inline]
fn keep_value(out: &mut Vec<u8>, start: usize, len: usize) {
    out.copy_within(start..start + len, 0);
    out.truncate(len);
}

/// Read `key`'s published value into `out` (cleared first). Expired entries read as `Miss`.
///
/// `Retry` after [`READ_RETRY_COUNT_MAX`] torn attempts or if the regions are not a valid
/// Ringlet index: the caller falls back to the writer path (RPC).
pub fn read_entry(view: &RegionsView, key: &[u8], now_ms: u64, out: &mut Vec<u8>) -> ReadOutcome {
    read_entry_with(view, key, key_hash(key), now_ms, None, out).0
}

/// [`read_entry`] with a precomputed hash and an optional expected config id: if the header's
/// config id differs (the node's role changed, e.g. it is no longer coordinator), `Retry` is
/// returned at once so the caller refreshes its map. Also returns the byte offset of the index
/// entry that produced a hit (for access bits).
pub fn read_entry_with(
    view: &RegionsView,
    key: &[u8],
    hash: u64,
    now_ms: u64,
    expected_config: Option<u64>,
    out: &mut Vec<u8>,
) -> (ReadOutcome, Option<u64>) {
    let (r, pos) = locate_entry(view, key, hash, now_ms, expected_config, out);
    (r, pos.map(|p| p.entry))
}

/// [`read_entry_with`] that leaves the validated entry image in `out` and returns where the
/// value is in it (`out[range]`; an empty range unless `Hit`), instead of moving the value
/// to the front: for callers that only look at the value before the next read (the batched
/// reader's callback), which saves a `memmove` of the value per key and, since `out` keeps
/// the image's length, any zero-fill on the next read of a same-sized entry. Validation is
/// exactly [`read_entry_with`]'s (same function).
pub fn read_entry_image(
    view: &RegionsView,
    key: &[u8],
    hash: u64,
    now_ms: u64,
    expected_config: Option<u64>,
    out: &mut Vec<u8>,
) -> (ReadOutcome, Range<usize>) {
    let (r, _, value) = read_entry_impl(view, key, hash, now_ms, expected_config, u64::MAX, out);
    (r, value)
}

/// Where a read found a key: enough to try [`read_entry_at`] later (a KELI location hint).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// The header's layout word when the entry was found: names the table (its offset, size
    /// and switch generation).
    pub layout: u64,
    /// Byte offset of the index entry in the index region.
    pub entry: u64,
    /// The data entry itself, for a read that skips the index ([`read_entry_direct`]).
    pub data: Option<Direct>,
}

/// A data entry's place and its index entry's check at the time a hint was taken: enough
/// for [`read_entry_direct`] to read the entry without touching the index (one cache miss
/// instead of the bucket's and the entry's) and to know the bytes it copied are exactly the
/// image the index then published.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Direct {
    /// The index entry's location (data offset / 8).
    pub location: u32,
    /// The index entry's 24-bit check of the entry (over the image, the location and the
    /// tag; `layout::checksum`).
    pub crc: u32,
    /// The entry's memgest when the hint was taken: informational only. Since format 5 the
    /// memgest is in the checksummed image, and a direct read returns the image's.
    pub memgest: u16,
}

impl Direct {
    fn of(w: u64, memgest: u16) -> Direct {
        Direct {
            location: ie_location(w),
            crc: ie_check(w),
            memgest,
        }
    }
}

/// [`read_entry_with`] that returns where a hit was found ([`Position`]).
pub fn locate_entry(
    view: &RegionsView,
    key: &[u8],
    hash: u64,
    now_ms: u64,
    expected_config: Option<u64>,
    out: &mut Vec<u8>,
) -> (ReadOutcome, Option<Position>) {
    let (r, pos, value) = read_entry_impl(view, key, hash, now_ms, expected_config, u64::MAX, out);
    if matches!(r, ReadOutcome::Hit { .. }) {
        keep_value(out, value.start, value.len());
    }
    (r, pos)
}

/// The readers' table now: its layout word and layout, if it names a table inside the index
/// region (a torn or empty header gives None).
fn current_layout(view: &RegionsView, order: Ordering) -> Option<(u64, Layout)> {
    let word = view.iword(HDR_LAYOUT as u64 * 8)?.load(order);
    let layout = Layout::unpack(word);
    (layout.buckets != 0 && layout.table_offset() + layout.table_bytes() <= view.index_len as u64)
        .then_some((word, layout))
}

/// How many buckets past `home` a probe must look: the home bucket's overflow count.
fn probe_reach(view: &RegionsView, layout: Layout, home: u64) -> u64 {
    let (off, shift) = layout.overflow_word(home);
    let ov = view
        .iword(off)
        .map_or(0, |w| (w.load(Ordering::Acquire) >> shift) & 0xffff);
    overflow_reach(ov).min(layout.buckets() - 1)
}

/// Where `key`'s index entry is, without copying its entry: the probe of [`locate_entry`],
/// comparing only the stored key (no checksum, no value copied). For writing location hints
/// (`LINK SET/ADD`, the bulk loader): a hint is validated in full by [`read_entry_at`] when it
/// is followed, so a position found during a concurrent rewrite can only be stale, never
/// wrong, and a target of any size costs a key comparison instead of a copy of its entry
/// (hint filling copied every target's record, about half of a chunked KELI load's time).
pub fn locate_position(view: &RegionsView, key: &[u8], hash: u64) -> Option<Position> {
    let tag = tag_of(hash);
    let (layout_word, layout) = current_layout(view, Ordering::Acquire)?;
    let data_word = |off: u64| -> Option<u64> {
        if off & 7 != 0 || off.checked_add(8)? > view.data_len as u64 {
            return None;
        }
        // SAFETY: `off + 8 <= data_len` and `off` is 8-aligned (checked above); `new`'s
        // contract keeps the range mapped; the word is only loaded atomically.
        let w = unsafe { &*(view.data.add(off as usize) as *const AtomicU64) };
        Some(w.load(Ordering::Relaxed))
    };
    let home = layout.home(hash);
    let mut reach = 0u64;
    let mut k = 0u64;
    while k <= reach {
        let b = layout.after(home, k);
        let boff = layout.bucket_offset(b);
        for i in 0..BUCKET_ENTRIES {
            let ie_off = boff + entry_word(i) as u64 * 8;
            let w = view.iword(ie_off)?.load(Ordering::Acquire);
            if w == 0 || ie_tag(w) != tag {
                continue;
            }
            let loc = u64::from(ie_location(w)) * UNIT_BYTES;
            let Some(w2) = data_word(loc + 16) else {
                continue;
            };
            if de_key_len(w2) as usize != key.len() {
                continue;
            }
            let start = loc + de_header_bytes(w2) as u64;
            let same = bytes_eq_at(data_word, start, key);
            if same {
                return Some(Position {
                    layout: layout_word,
                    entry: ie_off,
                    data: Some(Direct::of(w, de_memgest(w2))),
                });
            }
        }
        if k == 0 {
            reach = probe_reach(view, layout, home);
        }
        k += 1;
    }
    None
}

/// Where an index entry with `hash`'s tag is (the first in probe order), from the index
/// alone: no data entry is read, so finding it costs the bucket's miss only, where
/// [`locate_position`] also takes the data entry's to compare the key. For filling location
/// hints in bulk (`LINK ADD` of a loader's 100-target chunk): a hint is never trusted — it is
/// validated in full when followed — so the rare entry of another key with the same 16-bit
/// tag in the probed buckets (~16 in 256 per target at full buckets since format 5's 8-bit tag) only makes a stale
/// hint, costing that reader a lookup.
pub fn locate_position_by_tag(view: &RegionsView, hash: u64) -> Option<Position> {
    let tag = tag_of(hash);
    let (layout_word, layout) = current_layout(view, Ordering::Acquire)?;
    let home = layout.home(hash);
    let mut reach = 0u64;
    let mut k = 0u64;
    while k <= reach {
        let boff = layout.bucket_offset(layout.after(home, k));
        for i in 0..BUCKET_ENTRIES {
            let ie_off = boff + entry_word(i) as u64 * 8;
            let w = view.iword(ie_off)?.load(Ordering::Acquire);
            if w != 0 && ie_tag(w) == tag {
                // The memgest is in the data entry, which this lookup does not read; a hint's
                // memgest is informational (`Direct::memgest`).
                return Some(Position {
                    layout: layout_word,
                    entry: ie_off,
                    data: Some(Direct::of(w, 0)),
                });
            }
        }
        if k == 0 {
            reach = probe_reach(view, layout, home);
        }
        k += 1;
    }
    None
}

/// Why [`read_entry_at`] could not answer from the position (the caller looks the key up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stale {
    /// The index is another table now (grown, flushed) or the position is not an entry of it.
    Table,
    /// The entry there is empty, another key's, or changed under the read (rewritten
    /// elsewhere, deleted, evicted).
    Entry,
    /// The header's config id is not the expected one.
    Config,
}

/// One read of `key` at a remembered [`Position`]: first straight at the data entry if the
/// position names it ([`read_entry_direct`], no index access), then at the index entry
/// ([`read_entry_at_index`]). `Stale` only if neither validates; nothing is ever returned from
/// a read that did not.
pub fn read_entry_at(
    view: &RegionsView,
    key: &[u8],
    hash: u64,
    pos: Position,
    now_ms: u64,
    expected_config: Option<u64>,
    out: &mut Vec<u8>,
) -> Result<ReadOutcome, Stale> {
    if let Some(d) = pos.data {
        // Both places at once: a stale data part (the target was rewritten since) then costs
        // the index entry's miss overlapped with the dead entry's, not after it.
        prefetch_position(view, pos);
        match read_entry_direct(view, key, hash, d, now_ms, expected_config, out) {
            Err(Stale::Entry) => {}
            r => return r,
        }
    }
    read_entry_at_index(view, key, hash, pos, now_ms, expected_config, out)
}

/// One read of `key` straight at a data entry a hint names, touching no index line (the
/// key's bucket is one of the two cache misses a lookup and an index-position read take).
///
/// Accepted only if (1) the entry's word 2 has the live bit (layout.rs: set only while the
/// readers' index publishes the entry, cleared before it stops) when loaded (Acquire) before
/// the copy and unchanged when re-loaded after it (Acquire fence between: the writer fences
/// before it writes a reused slot, so a copy that saw any of a reuse's stores sees word 2
/// changed — a seqlock whose sequence is word 2), (2) the copy's check, with the location
/// the hint recorded and the key's tag, equals the hint's: the bytes are exactly the image the
/// index published when the hint was taken (not a torn mix, not another version or key),
/// and (3) it holds `key`. Then that image was the key's published entry at the first load
/// of word 2, which is the read's linearization point. `Stale::Entry` otherwise (the target
/// was rewritten, moved, deleted, evicted or flushed, or the hint is garbage: every access is
/// bounds-checked and nothing is allocated before the entry's length is checked).
pub fn read_entry_direct(
    view: &RegionsView,
    key: &[u8],
    hash: u64,
    d: Direct,
    now_ms: u64,
    expected_config: Option<u64>,
    out: &mut Vec<u8>,
) -> Result<ReadOutcome, Stale> {
    out.clear();
    if let Some(c) = expected_config {
        if view.config_id() != Some(c) {
            return Err(Stale::Config);
        }
    }
    let base = u64::from(d.location) * UNIT_BYTES;
    let Some(a2) = view.dword(base + 16) else {
        return Err(Stale::Entry);
    };
    let s1 = a2.load(Ordering::Acquire);
    if !de_live(s1) || de_key_len(s1) as usize != key.len() {
        return Err(Stale::Entry);
    }
    let size = de_units(s1) * UNIT_BYTES;
    if size > ringlet_types::limits::ENTRY_BYTES_MAX as u64
        || base
            .checked_add(size)
            .is_none_or(|e| e > view.data_len as u64)
    {
        return Err(Stale::Entry);
    }
    // SAFETY: `base + size <= data_len` (checked above), `base` is 8-aligned (units of 8),
    // and `new`'s contract keeps the range mapped; the words are only loaded atomically.
    let words = unsafe {
        std::slice::from_raw_parts(
            view.data.add(base as usize) as *const AtomicU64,
            size as usize / 8,
        )
    };
    out.reserve(size as usize);
    let bound = ie_pack(d.location, tag_of(hash), 0);
    // One pass: each word is copied and checksummed as it is loaded.
    let crc = copy_and_checksum(words, out, bound);
    fence(Ordering::Acquire);
    if a2.load(Ordering::Relaxed) != s1 || crc != d.crc {
        out.clear();
        return Err(Stale::Entry);
    }
    let hdr = de_header_bytes(s1);
    let vl = de_value_len(s1) as usize;
    if out[hdr..hdr + key.len()] != *key {
        out.clear();
        return Err(Stale::Entry);
    }
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&out[i * 8..i * 8 + 8]);
        u64::from_le_bytes(b)
    };
    let version = Version((u128::from(word(0)) << 64) | u128::from(word(1)));
    let expire_at_ms = de_has_ttl(s1).then(|| word(3));
    if matches!(expire_at_ms, Some(t) if t <= now_ms) {
        out.clear();
        return Ok(ReadOutcome::Miss);
    }
    let start = hdr + key.len();
    out.copy_within(start..start + vl, 0);
    out.truncate(vl);
    Ok(ReadOutcome::Hit {
        version,
        memgest: MemgestId(de_memgest(s1)),
        expire_at_ms,
        kind: de_kind(s1),
    })
}

/// Append `words` (an entry image, loaded atomically) to `out` and return
/// [`checksum`]`(image, bound)`, computed word by word as they are copied
/// ([`copy_and_checksum_into`] over the appended part).
fn copy_and_checksum(words: &[AtomicU64], out: &mut Vec<u8>, bound: u64) -> u32 {
    let start = out.len();
    out.resize(start + words.len() * 8, 0);
    copy_and_checksum_into(words, &mut out[start..], bound)
}

/// [`copy_and_checksum`] into a buffer of exactly `words.len() * 8` bytes (the lookup's copy,
/// which sizes its buffer once instead of growing it a word at a time).
///
/// # Panics
/// If `out.len() != words.len() * 8` (a caller bug).
#[inline]
fn copy_and_checksum_into(words: &[AtomicU64], out: &mut [u8], bound: u64) -> u32 {
    assert_eq!(out.len(), words.len() * 8);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2 (checked just above).
        return unsafe { copy_and_checksum_into_sse42(words, out, bound) };
    }
    for (w, chunk) in words.iter().zip(out.chunks_exact_mut(8)) {
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    checksum(out, bound)
}

/// [`copy_and_checksum_into`] with the CRC-32C instruction (the `crc32c` crate's convention:
/// the state starts inverted and is inverted at the end; bytes in order, so each
/// little-endian word is one `crc32 r64`; word 2's live bit is left out, as [`checksum`]
/// does). One `crc32 r64` per word: the chain is 3 cycles a word, which the out-of-order core runs
/// beside the loads of the copy.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn copy_and_checksum_into_sse42(words: &[AtomicU64], out: &mut [u8], bound: u64) -> u32 {
    use core::arch::x86_64::_mm_crc32_u64;
    let mut state = u64::from(!0u32);
    for (i, (w, chunk)) in words.iter().zip(out.chunks_exact_mut(8)).enumerate() {
        let v = w.load(Ordering::Relaxed);
        chunk.copy_from_slice(&v.to_le_bytes());
        let c = if i == 2 { v & !DE_LIVE_BIT } else { v };
        state = _mm_crc32_u64(state, c);
    }
    state = _mm_crc32_u64(state, ie_bound(bound));
    !(state as u32) & CHECK_MASK
}

/// One direct read of `key` at a remembered [`Position`]'s index entry, validated as a probe
/// validates a candidate: the table must still be the one named (layout word equal before
/// and after the copy), the index entry's tag must match, and the copied data entry must pass
/// the checksum over its bytes and the index words, the index re-check and the full key
/// comparison. A key
/// has at most one index entry in a table (updates rewrite it in place), so a validated hit
/// there is what a lookup would have returned; anything else is [`Stale`] and nothing is
/// returned from it. Expiry is applied as in [`read_entry`] (an expired hit is `Miss`).
pub fn read_entry_at_index(
    view: &RegionsView,
    key: &[u8],
    hash: u64,
    pos: Position,
    now_ms: u64,
    expected_config: Option<u64>,
    out: &mut Vec<u8>,
) -> Result<ReadOutcome, Stale> {
    out.clear();
    let Some(lw) = view.iword(HDR_LAYOUT as u64 * 8) else {
        return Err(Stale::Table);
    };
    let layout_word = lw.load(Ordering::Acquire);
    if let Some(c) = expected_config {
        if view.config_id() != Some(c) {
            return Err(Stale::Config);
        }
    }
    if layout_word != pos.layout {
        return Err(Stale::Table);
    }
    let layout = Layout::unpack(layout_word);
    let start = layout.table_offset();
    let end = start.saturating_add(layout.buckets().saturating_mul(BUCKET_BYTES));
    // An index entry is one word of a bucket, inside the bucket area.
    if layout.buckets() == 0
        || end > view.index_len as u64
        || pos.entry < start
        || pos.entry.saturating_add(INDEX_ENTRY_BYTES) > end
        || !(pos.entry - start).is_multiple_of(INDEX_ENTRY_BYTES)
    {
        return Err(Stale::Table);
    }
    let Some(a) = view.iword(pos.entry) else {
        return Err(Stale::Table);
    };
    let w = a.load(Ordering::Acquire);
    if w == 0 || ie_tag(w) != tag_of(hash) {
        return Err(Stale::Entry);
    }
    let probe = try_entry(view, pos.entry, w, key, u64::MAX, out);
    fence(Ordering::Acquire);
    if lw.load(Ordering::Relaxed) != layout_word {
        out.clear();
        return Err(Stale::Table);
    }
    match probe {
        Probe::Hit {
            version,
            memgest,
            expire_at_ms,
            kind,
            value_start,
            value_len,
            ..
        } => {
            if matches!(expire_at_ms, Some(t) if t <= now_ms) {
                out.clear();
                return Ok(ReadOutcome::Miss);
            }
            keep_value(out, value_start, value_len);
            Ok(ReadOutcome::Hit {
                version,
                memgest,
                expire_at_ms,
                kind,
            })
        }
        Probe::WrongKey | Probe::Torn | Probe::TooLarge => {
            out.clear();
            Err(Stale::Entry)
        }
    }
}

/// [`read_entry`] that copies no entry larger than `size_max` bytes (header, key and value):
/// it answers `Retry` instead, so the caller takes the writer path. The copy is made with
/// atomic word loads and checksummed, which is cheap for a value of a few KiB and not for
/// 64 MiB on a thread that should serve other requests meanwhile.
pub fn read_entry_bounded(
    view: &RegionsView,
    key: &[u8],
    now_ms: u64,
    size_max: u64,
    out: &mut Vec<u8>,
) -> ReadOutcome {
    let (r, _, value) = read_entry_impl(view, key, key_hash(key), now_ms, None, size_max, out);
    if matches!(r, ReadOutcome::Hit { .. }) {
        keep_value(out, value.start, value.len());
    }
    r
}

fn read_entry_impl(
    view: &RegionsView,
    key: &[u8],
    hash: u64,
    now_ms: u64,
    expected_config: Option<u64>,
    size_max: u64,
    out: &mut Vec<u8>,
) -> (ReadOutcome, Option<Position>, Range<usize>) {
    let tag = tag_of(hash);
    for _attempt in 0..READ_RETRY_COUNT_MAX {
        let Some(lw) = view.iword(HDR_LAYOUT as u64 * 8) else {
            break;
        };
        let layout_word = lw.load(Ordering::Acquire);
        if let Some(c) = expected_config {
            if view.config_id() != Some(c) {
                out.clear();
                return (ReadOutcome::Retry, None, 0..0);
            }
        }
        let layout = Layout::unpack(layout_word);
        if layout.buckets == 0
            || layout.table_offset() + layout.table_bytes() > view.index_len as u64
        {
            continue;
        }
        let home = layout.home(hash);
        let mut torn = false;
        let mut hit = None;
        let mut value = 0..0;
        let mut reach = 0u64;
        let mut k = 0u64;
        'probe: while k <= reach {
            let b = layout.after(home, k);
            let boff = layout.bucket_offset(b);
            let Some(bucket) = view.bucket(boff) else {
                torn = true;
                break 'probe;
            };
            for i in 0..BUCKET_ENTRIES {
                let w = bucket[entry_word(i)].load(Ordering::Acquire);
                if w == 0 || ie_tag(w) != tag {
                    continue;
                }
                let ie_off = boff + entry_word(i) as u64 * 8;
                match try_entry(view, ie_off, w, key, size_max, out) {
                    Probe::Hit {
                        version,
                        memgest,
                        expire_at_ms,
                        kind,
                        ie_off,
                        direct,
                        value_start,
                        value_len,
                    } => {
                        hit = Some((version, memgest, expire_at_ms, kind, ie_off, direct));
                        value = value_start..value_start + value_len;
                        break 'probe;
                    }
                    Probe::WrongKey => {}
                    Probe::Torn => torn = true,
                    Probe::TooLarge => {
                        out.clear();
                        return (ReadOutcome::Retry, None, 0..0);
                    }
                }
            }
            if k == 0 {
                reach = probe_reach(view, layout, home);
            }
            k += 1;
        }
        fence(Ordering::Acquire);
        if lw.load(Ordering::Relaxed) != layout_word {
            continue;
        }
        match hit {
            Some((version, memgest, expire_at_ms, kind, ie_off, direct)) => {
                if matches!(expire_at_ms, Some(t) if t <= now_ms) {
                    out.clear();
                    return (ReadOutcome::Miss, None, 0..0);
                }
                return (
                    ReadOutcome::Hit {
                        version,
                        memgest,
                        expire_at_ms,
                        kind,
                    },
                    Some(Position {
                        layout: layout_word,
                        entry: ie_off,
                        data: Some(direct),
                    }),
                    value,
                );
            }
            None if torn => continue,
            None => {
                out.clear();
                return (ReadOutcome::Miss, None, 0..0);
            }
        }
    }
    out.clear();
    (ReadOutcome::Retry, None, 0..0)
}

// ----- batched lookups: prefetch hints ---------------------------------------------------
//
// A batch of requests (a pipelined read from one connection) looks up keys whose buckets and
// entries are almost never in cache at a million keys: each lookup costs one miss on the
// index bucket and one on the data entry, taken one after the other. MICA and CliqueMap
// overlap them: first touch every key's bucket, then every candidate entry, then do the
// lookups, which now hit the cache. These functions are the two touches. They are hints: they
// only compute addresses (bounds-checked against the views) and issue prefetch instructions,
// which never fault and change nothing a reader or the writer observes, so a stale layout or
// a torn index word costs at most a useless prefetch.

/// Start loading the lines a read at `pos` needs: the data entry's first line (if the
/// position names it) and the index entry's. For a walk that knows its next hops' hints
/// (prefetch a few ahead, so their misses overlap) and for [`read_entry_at`] itself.
#[inline]
pub fn prefetch_position(view: &RegionsView, pos: Position) {
    if let Some(d) = pos.data {
        let off = u64::from(d.location) * UNIT_BYTES;
        if off < view.data_len as u64 {
            prefetch(view.data.wrapping_add(off as usize));
        }
    }
    if pos.entry < view.index_len as u64 {
        prefetch(view.index.wrapping_add(pos.entry as usize));
    }
}

/// Start loading the two cache lines of `hash`'s home bucket in the current table.
#[inline]
pub fn prefetch_bucket(view: &RegionsView, hash: u64) {
    prefetch_home(view, hash);
}

/// [`prefetch_bucket`]'s work: the current layout and the home bucket's offset, once its two
/// lines are requested (`None`: no table, or the bucket is out of the mapped index).
#[inline]
fn prefetch_home(view: &RegionsView, hash: u64) -> Option<(Layout, u64)> {
    let (_, layout) = current_layout(view, Ordering::Relaxed)?;
    let off = layout.bucket_offset(layout.home(hash));
    if off.saturating_add(BUCKET_BYTES) > view.index_len as u64 {
        return None;
    }
    prefetch(view.index.wrapping_add(off as usize));
    prefetch(view.index.wrapping_add(off as usize + 64));
    Some((layout, off))
}

/// [`prefetch_bucket`], and also the policy word of that bucket (the policy area at
/// `area_base`, `area_bytes` per generation parity: `Store::new`), from one load of the
/// layout word.
///
/// Why: since format 5 an entry's policy nibble is not in its index word but in a word per
/// bucket in a separate area, one more random line per lookup: a reader's hit bumps its
/// reference bit there, and a writer's replace carries the old entry's bits over. Nothing
/// else asked for that line, so every GET and SET of a batch waited for it once.
#[inline]
pub fn prefetch_bucket_and_policy(view: &RegionsView, area_base: u64, area_bytes: u64, hash: u64) {
    let Some((layout, off)) = prefetch_home(view, hash) else {
        return;
    };
    let (pw, _) = layout.policy_of(area_base, area_bytes, off);
    if pw.saturating_add(8) <= view.index_len as u64 {
        prefetch(view.index.wrapping_add(pw as usize));
    }
}

/// Start loading the data entries that index entries of `hash`'s home bucket with its tag
/// point at (their first [`PREFETCH_ENTRY_LINES_MAX`] lines: header, key and a short value).
/// Call it after [`prefetch_bucket`] had time to land, or it waits for the bucket itself.
#[inline]
pub fn prefetch_entry(view: &RegionsView, hash: u64) {
    let Some((_, layout)) = current_layout(view, Ordering::Relaxed) else {
        return;
    };
    let Some(bucket) = view.bucket(layout.bucket_offset(layout.home(hash))) else {
        return;
    };
    let tag = tag_of(hash);
    for i in 0..BUCKET_ENTRIES {
        let w = bucket[entry_word(i)].load(Ordering::Relaxed);
        if w == 0 || ie_tag(w) != tag {
            continue;
        }
        // Format 5's index word has no size: ask for the lines a small entry spans (a
        // 136-byte entry spans at most three); larger values are streamed by the copy.
        let loc = u64::from(ie_location(w)) * UNIT_BYTES;
        let end = loc
            .saturating_add(PREFETCH_ENTRY_LINES_MAX as u64 * 64)
            .min(view.data_len as u64);
        // Line-aligned starts of the lines the entry covers, at most a few.
        let mut line = loc & !63;
        for _ in 0..PREFETCH_ENTRY_LINES_MAX {
            if line >= end {
                break;
            }
            prefetch(view.data.wrapping_add(line as usize));
            line += 64;
        }
    }
}

/// Cache lines of one data entry [`prefetch_entry`] asks for: a 16-byte key and a 100-byte
/// value with the 20-byte header span at most three lines; larger values are streamed by the copy
/// itself (the hardware prefetcher follows a sequential copy).
const PREFETCH_ENTRY_LINES_MAX: u32 = 3;

#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults, whatever the address, and reads nothing
    // the program observes. SSE is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass checksum equals `layout::checksum` over the copy, live bit or not.
    #[test]
    fn copy_and_checksum_matches_checksum() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 3..40usize {
            let img: Vec<u64> = (0..len)
                .map(|i| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    if i == 2 && len % 2 == 0 {
                        seed | DE_LIVE_BIT
                    } else {
                        seed
                    }
                })
                .collect();
            let words: Vec<AtomicU64> = img.iter().map(|&w| AtomicU64::new(w)).collect();
            let mut out = Vec::new();
            let c = copy_and_checksum(&words, &mut out, seed);
            let bytes: Vec<u8> = img.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(out, bytes);
            assert_eq!(c, checksum(&bytes, seed), "len {len}");
            // The lookup's variant (into a sized buffer) gives the same bytes and CRC, and
            // the portable path (the `crc32c` crate over the copy) agrees with both.
            let mut into = vec![0xa5u8; len * 8];
            let c2 = copy_and_checksum_into(&words, &mut into, seed);
            assert_eq!((c2, &into), (c, &bytes), "len {len}");
            assert_eq!(checksum(&into, seed), c2);
        }
    }

    /// The short-key compare agrees with slice equality for every length around its
    /// word-compare range and for a difference at every position.
    #[test]
    fn key_eq_matches_slice_eq() {
        for n in 0..24usize {
            let a: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(key_eq(&a, &a.clone()));
            for m in [n.saturating_sub(1), n + 1] {
                let b: Vec<u8> = (0..m as u8).map(|i| i.wrapping_mul(37)).collect();
                assert_eq!(key_eq(&a, &b), a == b, "{n} vs {m}");
            }
            for i in 0..n {
                for bit in 0..8 {
                    let mut b = a.clone();
                    b[i] ^= 1 << bit;
                    assert!(!key_eq(&a, &b), "n {n} byte {i} bit {bit}");
                    assert!(!key_eq(&b, &a), "n {n} byte {i} bit {bit}");
                }
            }
        }
    }
}
