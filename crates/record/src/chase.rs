//! `CHASE`: follow links breadth-first from one key and return the items in one round trip.
//!
//! ```text
//! CHASE key field [field ...] [DEPTH n] [LIMIT n] [CHUNKED] [FIELDS attr [attr ...]]
//! ```
//!
//! Follows the named link fields (a single link or a link list; plain-bytes fields are
//! ignored) breadth-first from `key` up to DEPTH hops (default 1, at most
//! [`CHASE_DEPTH_MAX`]; 0 returns just `key`). Each key is visited at most once, so cycles
//! and diamonds are safe. Options may come in any order after the link fields; the words
//! DEPTH, LIMIT, CHUNKED and FIELDS (any case) are always options, so they cannot be used as
//! link field or attribute names here.
//!
//! # Chunked link lists (KELI)
//!
//! With CHUNKED, each link field `f` is a list chunked as `ringlet load` writes it: the item
//! holds the first targets in `f` and a link `f.next` ([`crate::CHUNK_NEXT_SUFFIX`]) to a
//! continuation item holding the next targets in its own `f` (and `f.next`), and so on.
//! A continuation item is read as part of the hop of the item whose list it continues: it
//! is not an entry, does not count against LIMIT or DEPTH, and its targets join the same
//! next level. Continuation items are appended to the level being fetched (after the
//! level's own keys, in the order they are found), so a caller fetching by batches gets
//! them as further batches of the same level ([`Chase::advance`] again, from
//! [`Chase::level_start`]); a chain of k chunks costs k such batches. The next level's key
//! order is that order: every item's first-chunk targets, then the second chunks' …
//! Without CHUNKED a `f.next` is just another field (name it as a link field to walk the
//! chunks as ordinary items, one level of depth per chunk). At most
//! [`crate::CHASE_CHUNK_ITEMS_MAX`] continuation items per CHASE (then the stop is `limit`).
//!
//! # How it works
//!
//! [`Chase`] is a state machine the caller drives; it never fetches anything itself:
//!
//! ```text
//! let mut c = Chase::parse(&argv)?;
//! loop {
//!     let batch = c.next_batch();           // the next BFS level, deduplicated
//!     if batch.is_empty() { break }
//!     for key in batch { c.feed(&key, fetched_record_or_none) }   // any order, any source
//!     if deadline_passed { c.timed_out(); break }
//! }
//! let reply = c.finish();
//! ```
//!
//! Results of a level are ordered by the level's key order, not by the order they were fed,
//! so the reply is deterministic however the fetches complete. A key fed `None` (missing, or
//! not a record) is skipped: no entry, no links followed.
//!
//! # Bounds
//!
//! - LIMIT entries (default [`CHASE_LIMIT_DEFAULT`], at most [`CHASE_LIMIT_MAX`]); a level's
//!   batch never holds more keys than LIMIT minus the entries already taken, so fetch work is
//!   bounded too;
//! - [`CHASE_REPLY_BYTES_MAX`] reply bytes (the first entry is always kept);
//! - the caller's time bound, via [`Chase::timed_out`].
//!
//! # Reply
//!
//! One array: the entries in BFS order, each `[key, depth, [attr, value, ...]]` (key bulk,
//! depth integer, then the FIELDS asked for that exist in the item, in the order asked, or
//! all its fields in record order if FIELDS was not given; links shown by their display
//! string), and then one last element, the stop status as a bulk string:
//!
//! - `"complete"`: everything reachable within DEPTH was returned;
//! - `"limit"`: LIMIT was reached and more items may have been reachable;
//! - `"bytes"`: the byte bound was reached;
//! - `"time"`: the time bound was reached (or the caller finished early).
//!
//! redis-py: `*entries, stop = r.execute_command("CHASE", "user:1", "follows", "DEPTH", 2)`,
//! then `for key, depth, attrs in entries: fields = dict(zip(attrs[::2], attrs[1::2]))`.

use std::collections::HashMap;

use crate::number::parse_i64;
use crate::record::{Field, FieldRef, Hint, Record};
use crate::{
    CHASE_CHUNK_ITEMS_MAX, CHASE_DEPTH_MAX, CHASE_LIMIT_DEFAULT, CHASE_LIMIT_MAX,
    CHASE_REPLY_BYTES_MAX, CHUNK_NEXT_SUFFIX,
};

/// RESP framing bytes counted per element (a `$len\r\n…\r\n` header and trailer, or an array
/// or integer line), an overestimate for lengths under 10^11.
const RESP_ELEMENT_OVERHEAD_BYTES: usize = 16;

/// One visited item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The item's key.
    pub key: Vec<u8>,
    /// Hops from the CHASE's key (0 for the key itself).
    pub depth: u32,
    /// Attribute names and display values.
    pub attrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Entry {
    /// Approximate RESP size of this entry in the reply: its bytes plus 16 bytes of framing
    /// per element (an overestimate for any real length).
    pub fn reply_bytes(&self) -> usize {
        let attrs: usize = self
            .attrs
            .iter()
            .map(|(a, v)| a.len() + v.len() + 2 * RESP_ELEMENT_OVERHEAD_BYTES)
            .sum();
        // outer array + key + depth + attrs array
        4 * RESP_ELEMENT_OVERHEAD_BYTES + self.key.len() + attrs
    }
}

/// Why a CHASE stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Everything reachable within DEPTH was returned.
    Complete,
    /// LIMIT entries were reached; more items may have been reachable.
    Limit,
    /// The reply byte bound was reached.
    Bytes,
    /// The caller's time bound was reached.
    Time,
}

impl Stop {
    /// The status string sent as the reply's last element.
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::Complete => "complete",
            Stop::Limit => "limit",
            Stop::Bytes => "bytes",
            Stop::Time => "time",
        }
    }
}

/// A finished CHASE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChaseReply {
    /// Visited items in BFS order.
    pub entries: Vec<Entry>,
    /// Why it stopped.
    pub stop: Stop,
}

/// What a key fed out of order contributes, kept until the keys before it are settled: its
/// entry's attributes and the link targets not yet visited when it was fed (with hints).
#[derive(Debug)]
struct Fed {
    attrs: Vec<(Vec<u8>, Vec<u8>)>,
    targets: Vec<(Vec<u8>, Option<Hint>)>,
    /// With CHUNKED: the continuation items it links (`f.next`).
    chunks: Vec<(Vec<u8>, Option<Hint>)>,
}

/// The state of one key of the level being fetched.
#[derive(Debug)]
enum Slot {
    /// Not fed yet.
    Pending,
    /// Fed `None` (missing, not a record).
    Missing,
    /// Fed ahead of a key before it that is still pending.
    Fed(Fed),
    /// Turned into an entry (or skipped) in level order.
    Settled,
}

/// A CHASE in progress. See the module docs for the driving loop.
///
/// Keys are settled (made entries, their links added to the next level) in level order as
/// they are fed: a key fed in order is walked straight from its bytes, only keys fed ahead of
/// a pending one are buffered. Membership is one hash lookup (`visited` maps every key ever
/// put in a level to that level and its position), so feeding by key needs no per-level set.
#[derive(Debug)]
pub struct Chase {
    root: Vec<u8>,
    link_fields: Vec<Vec<u8>>,
    /// With CHUNKED, `f.next` for each link field `f`; empty otherwise.
    chunk_fields: Vec<Vec<u8>>,
    depth_max: u32,
    limit: usize,
    /// None: all fields.
    attrs: Option<Vec<Vec<u8>>>,
    /// With FIELDS, the distinct field names a record is read for: its attributes at the
    /// last depth, its attributes and the link fields before (`scan_wanted` stops there).
    wanted_leaf: Vec<Vec<u8>>,
    wanted_follow: Vec<Vec<u8>>,
    reply_bytes_max: usize,

    /// Every key ever put in a level: (its depth, its position in that level). foldhash
    /// with a per-map random seed: SipHash was 5% of a deep CHASE's server time, and the map
    /// is bounded by LIMIT and the walk by its time bound, so a crafted key set cannot make
    /// it cost more than that bound.
    visited: HashMap<Vec<u8>, (u32, u32), foldhash::fast::RandomState>,
    /// Keys of the level being fetched (or about to be), in BFS order, unique. A settled
    /// key's bytes are moved into its entry (the slot says so). With CHUNKED, the
    /// continuation items found while the level is fetched are appended after its keys.
    frontier: Vec<Vec<u8>>,
    /// How many of `frontier` are the level's own keys (positions after are continuation
    /// items: no entries).
    level_keys: usize,
    /// Positions before this one were handed to the caller (by `advance`/`next_batch`);
    /// `level_start` is where the batch handed out last begins.
    handed_out: usize,
    level_start: usize,
    /// Continuation items put in a level so far (bounded by CHASE_CHUNK_ITEMS_MAX).
    chunk_items: usize,
    /// The hint of each `frontier` key: the location hint of the first link that led to it.
    hints: Vec<Option<Hint>>,
    /// The state of each `frontier` key while the level is fetched.
    slots: Vec<Slot>,
    /// Positions before this one are settled.
    settled: usize,
    /// The level after `frontier`, built as it settles, and its hints.
    next: Vec<Vec<u8>>,
    next_hints: Vec<Option<Hint>>,
    /// Depth of `frontier`.
    depth: u32,
    /// `frontier` was handed out (`next_batch` / `advance`) and its results are being fed.
    fetching: bool,
    entries: Vec<Entry>,
    reply_bytes: usize,
    /// Some link targets were left out of a frontier because of LIMIT.
    truncated: bool,
    /// A key of a settled level was never fed (the caller stopped before fetching it).
    unfed: bool,
    stop: Option<Stop>,
}

fn is_keyword(arg: &[u8]) -> bool {
    arg.eq_ignore_ascii_case(b"depth")
        || arg.eq_ignore_ascii_case(b"limit")
        || arg.eq_ignore_ascii_case(b"fields")
        || arg.eq_ignore_ascii_case(b"chunked")
}

const ERR_SYNTAX: &str = "ERR syntax error";
const ERR_NOT_INT: &str = "ERR value is not an integer or out of range";

fn depth_error() -> String {
    format!("ERR DEPTH must be between 0 and {CHASE_DEPTH_MAX}")
}

impl Chase {
    /// Parses `CHASE key field [field ...] [DEPTH n] [LIMIT n] [FIELDS attr ...]`
    /// (`argv[0]` is the command name).
    ///
    /// # Errors
    /// The Redis-style error text: `ERR wrong number of arguments for 'chase' command`,
    /// `ERR syntax error` (no link field, an option without its value, FIELDS with no
    /// attribute), `ERR value is not an integer or out of range`, or
    /// `ERR DEPTH must be between 0 and 8` / `ERR LIMIT must be between 1 and 100000`.
    pub fn parse(argv: &[&[u8]]) -> Result<Chase, String> {
        if argv.len() < 3 {
            return Err("ERR wrong number of arguments for 'chase' command".into());
        }
        let root = argv[1].to_vec();
        let mut i = 2;
        let mut link_fields = Vec::new();
        while let Some(a) = argv.get(i).filter(|a| !is_keyword(a)) {
            link_fields.push(a.to_vec());
            i += 1;
        }
        if link_fields.is_empty() {
            return Err(ERR_SYNTAX.into());
        }
        let mut depth_max = 1;
        let mut limit = CHASE_LIMIT_DEFAULT;
        let mut attrs: Option<Vec<Vec<u8>>> = None;
        let mut chunked = false;
        // Each pass consumes at least one argument, so this ends within argv.len() passes.
        while let Some(opt) = argv.get(i) {
            if opt.eq_ignore_ascii_case(b"chunked") {
                chunked = true;
                i += 1;
                continue;
            }
            if opt.eq_ignore_ascii_case(b"fields") {
                i += 1;
                let list = attrs.get_or_insert_with(Vec::new);
                let before = list.len();
                while let Some(a) = argv.get(i).filter(|a| !is_keyword(a)) {
                    list.push(a.to_vec());
                    i += 1;
                }
                if list.len() == before {
                    return Err(ERR_SYNTAX.into());
                }
                continue;
            }
            let is_depth = opt.eq_ignore_ascii_case(b"depth");
            if !is_depth && !opt.eq_ignore_ascii_case(b"limit") {
                // A stray argument after an option's value.
                return Err(ERR_SYNTAX.into());
            }
            let Some(v) = argv.get(i + 1) else {
                return Err(ERR_SYNTAX.into());
            };
            let n = parse_i64(v).ok_or(ERR_NOT_INT)?;
            if is_depth {
                depth_max = u32::try_from(n).unwrap_or(u32::MAX);
                if n < 0 {
                    return Err(depth_error());
                }
            } else {
                limit = u32::try_from(n).unwrap_or(0);
            }
            i += 2;
        }
        let walk = Chase::new(root, link_fields, depth_max, limit, attrs)?;
        Ok(if chunked { walk.chunked() } else { walk })
    }

    /// The same walk with CHUNKED: each link field `f` continues in the item its `f.next`
    /// links (module docs, "Chunked link lists").
    pub fn chunked(mut self) -> Chase {
        if self.chunk_fields.is_empty() {
            self.chunk_fields = self
                .link_fields
                .iter()
                .map(|f| [f.as_slice(), CHUNK_NEXT_SUFFIX].concat())
                .collect();
            for c in &self.chunk_fields {
                if !self.wanted_follow.contains(c) {
                    self.wanted_follow.push(c.clone());
                }
            }
        }
        self
    }

    /// Whether the walk follows chunked link lists (CHUNKED).
    pub fn is_chunked(&self) -> bool {
        !self.chunk_fields.is_empty()
    }

    /// A CHASE from typed arguments (the native CHASE frame): the same bounds and error
    /// texts as [`Chase::parse`].
    ///
    /// # Errors
    /// `ERR syntax error` (no link field, or an empty FIELDS list), `ERR DEPTH must be
    /// between 0 and 8`, `ERR LIMIT must be between 1 and 100000`.
    pub fn new(
        root: Vec<u8>,
        link_fields: Vec<Vec<u8>>,
        depth_max: u32,
        limit: u32,
        attrs: Option<Vec<Vec<u8>>>,
    ) -> Result<Chase, String> {
        if link_fields.is_empty() || attrs.as_ref().is_some_and(Vec::is_empty) {
            return Err(ERR_SYNTAX.into());
        }
        if depth_max > CHASE_DEPTH_MAX {
            return Err(depth_error());
        }
        if !(1..=CHASE_LIMIT_MAX).contains(&limit) {
            return Err(format!("ERR LIMIT must be between 1 and {CHASE_LIMIT_MAX}"));
        }
        let mut wanted_leaf: Vec<Vec<u8>> = Vec::new();
        for a in attrs.iter().flatten() {
            if !wanted_leaf.contains(a) {
                wanted_leaf.push(a.clone());
            }
        }
        let mut wanted_follow = wanted_leaf.clone();
        for l in &link_fields {
            if !wanted_follow.contains(l) {
                wanted_follow.push(l.clone());
            }
        }
        Ok(Chase {
            wanted_leaf,
            wanted_follow,
            visited: {
                let mut v = HashMap::with_hasher(foldhash::fast::RandomState::default());
                v.insert(root.clone(), (0, 0));
                v
            },
            frontier: vec![root.clone()],
            hints: vec![None],
            slots: Vec::new(),
            settled: 0,
            next: Vec::new(),
            next_hints: Vec::new(),
            root,
            link_fields,
            chunk_fields: Vec::new(),
            level_keys: 0,
            handed_out: 0,
            level_start: 0,
            chunk_items: 0,
            depth_max,
            limit: limit as usize,
            attrs,
            reply_bytes_max: CHASE_REPLY_BYTES_MAX,
            depth: 0,
            fetching: false,
            entries: Vec::new(),
            reply_bytes: 0,
            truncated: false,
            unfed: false,
            stop: None,
        })
    }

    /// The key the chase starts from (for routing the first fetch).
    pub fn root(&self) -> &[u8] {
        &self.root
    }

    /// The keys to fetch now: the whole next BFS level, deduplicated, at most LIMIT keys
    /// (with CHUNKED, or the continuation items found since the last batch of the level).
    /// Calling it again first takes in what was fed for the previous batch. Empty when the
    /// chase is over (then call [`Chase::finish`]).
    pub fn next_batch(&mut self) -> Vec<Vec<u8>> {
        if self.advance() {
            self.frontier[self.level_start..].to_vec()
        } else {
            Vec::new()
        }
    }

    /// [`Chase::next_batch`] without copying the keys: `true` if a batch is to be fetched,
    /// its keys then being [`Chase::level`] from [`Chase::level_start`] on (feed them by
    /// position with [`Chase::feed_encoded_at`], or by key). Positions before
    /// `level_start` were handed out before; feeding them again is ignored.
    pub fn advance(&mut self) -> bool {
        if self.stop.is_some() {
            return false;
        }
        if self.fetching {
            if self.handed_out < self.frontier.len() {
                // Continuation items found while the last batch was fed: the same level
                // goes on with them.
                self.level_start = self.handed_out;
                self.handed_out = self.frontier.len();
                return true;
            }
            self.settle();
        }
        if self.stop.is_some() {
            return false;
        }
        if self.frontier.is_empty() {
            self.stop = Some(self.end_reason());
            return false;
        }
        self.fetching = true;
        self.settled = 0;
        self.level_keys = self.frontier.len();
        self.level_start = 0;
        self.handed_out = self.frontier.len();
        self.slots.clear();
        self.slots
            .extend(std::iter::repeat_with(|| Slot::Pending).take(self.frontier.len()));
        true
    }

    /// The keys of the level being fetched, in BFS order. A key already fed in order may read
    /// as empty (its bytes moved to its entry): read a key before feeding it.
    pub fn level(&self) -> &[Vec<u8>] {
        &self.frontier
    }

    /// Where the batch handed out by the last [`Chase::advance`] begins in
    /// [`Chase::level`] (0 for a level's first batch; later batches of a level are its
    /// continuation items, with CHUNKED).
    pub fn level_start(&self) -> usize {
        self.level_start
    }

    /// The location hint of the level's key at `i`: the hint of the first link (in BFS
    /// order) that led to it, if that link had one. A guess to validate, never trusted.
    pub fn level_hint(&self, i: usize) -> Option<Hint> {
        self.hints.get(i).copied().flatten()
    }

    /// The position of `key` in the level being fetched, if it is there and not fed yet.
    fn pending(&self, key: &[u8]) -> Option<usize> {
        if !self.fetching || self.stop.is_some() {
            return None;
        }
        match self.visited.get(key) {
            Some(&(d, i)) if d == self.depth => {
                let i = i as usize;
                matches!(self.slots.get(i), Some(Slot::Pending)).then_some(i)
            }
            _ => None,
        }
    }

    /// Hands in a fetched key's record: `None` if the key is missing or is not a record (it
    /// is then skipped). Keys not in the current batch, and repeats, are ignored.
    pub fn feed(&mut self, key: &[u8], rec: Option<&Record>) {
        let Some(i) = self.pending(key) else { return };
        let slot = match rec {
            None => Slot::Missing,
            Some(r) => Slot::Fed(Fed {
                attrs: match &self.attrs {
                    None => r.iter().map(|(n, f)| (n.to_vec(), f.display())).collect(),
                    Some(want) => want
                        .iter()
                        .filter_map(|a| r.get(a).map(|f| (a.clone(), f.display())))
                        .collect(),
                },
                targets: if self.depth < self.depth_max {
                    self.link_fields
                        .iter()
                        .filter_map(|n| r.get(n))
                        .flat_map(field_links)
                        .map(|(t, h)| (t.to_vec(), h))
                        .collect()
                } else {
                    Vec::new()
                },
                chunks: if self.depth < self.depth_max {
                    self.chunk_fields
                        .iter()
                        .filter_map(|n| r.get(n))
                        .flat_map(field_links)
                        .map(|(t, h)| (t.to_vec(), h))
                        .collect()
                } else {
                    Vec::new()
                },
            }),
        };
        self.slots[i] = slot;
        self.drain();
    }

    /// [`Chase::feed`] with the key's encoded record (`None`: missing or not a record),
    /// walked in place by [`crate::record::scan`]: no [`Record`] is built, so a visited item
    /// costs its attributes and link targets, not one allocation per link it holds; with
    /// FIELDS only up to the last field used ([`crate::record::scan_wanted`]). Bytes that do
    /// not decode (in the part walked) count as a missing key.
    pub fn feed_encoded(&mut self, key: &[u8], encoded: Option<&[u8]>) {
        if let Some(i) = self.pending(key) {
            self.feed_encoded_at(i, encoded);
        }
    }

    /// [`Chase::feed_encoded`] by position in [`Chase::level`] (no lookup of the key).
    /// Positions outside the level, positions already fed, and feeds outside a fetch are
    /// ignored.
    pub fn feed_encoded_at(&mut self, i: usize, encoded: Option<&[u8]>) {
        if !self.fetching
            || self.stop.is_some()
            || !matches!(self.slots.get(i), Some(Slot::Pending))
        {
            return;
        }
        let follow = self.depth < self.depth_max;
        // With FIELDS, only the fields used are walked (a leaf's name, not its link list).
        let fields = encoded.and_then(|b| match &self.attrs {
            None => crate::record::scan(b).ok(),
            Some(_) if follow => crate::record::scan_wanted(b, &self.wanted_follow).ok(),
            Some(_) => crate::record::scan_wanted(b, &self.wanted_leaf).ok(),
        });
        let Some(fields) = fields else {
            self.slots[i] = Slot::Missing;
            self.drain();
            return;
        };
        // A continuation item is no entry: its attributes are not shown.
        let attrs = if i < self.level_keys {
            self.attrs_of(&fields)
        } else {
            Vec::new()
        };
        if i == self.settled {
            // In order: settle straight from the record's bytes, no copy of its links.
            self.slots[i] = Slot::Settled;
            self.settled += 1;
            let link_fields = std::mem::take(&mut self.link_fields);
            let chunk_fields = std::mem::take(&mut self.chunk_fields);
            let links_of = |names: &[Vec<u8>]| {
                names
                    .iter()
                    .filter(|_| follow)
                    .filter_map(|n| fields.iter().find(|(f, _)| f == n))
                    .flat_map(|(_, f)| f.links())
                    .collect::<Vec<_>>()
            };
            // Continuation links are few (one per link field); targets stay an iterator.
            let chunks = links_of(&chunk_fields);
            let targets = link_fields
                .iter()
                .filter(|_| follow)
                .filter_map(|n| fields.iter().find(|(f, _)| f == n))
                .flat_map(|(_, f)| f.links());
            self.settle_one(i, attrs, targets, chunks.into_iter());
            self.link_fields = link_fields;
            self.chunk_fields = chunk_fields;
            self.drain();
            return;
        }
        let owned =
            |names: &[Vec<u8>], visited: &HashMap<_, _, _>| -> Vec<(Vec<u8>, Option<Hint>)> {
                if !follow {
                    return Vec::new();
                }
                names
                    .iter()
                    .filter_map(|n| fields.iter().find(|(f, _)| f == n))
                    .flat_map(|(_, f)| f.links())
                    // Visited only grows: a target visited now will be skipped when settled.
                    .filter(|(t, _)| !visited.contains_key(*t))
                    .map(|(t, h)| (t.to_vec(), h))
                    .collect()
            };
        let targets = owned(&self.link_fields, &self.visited);
        let chunks = owned(&self.chunk_fields, &self.visited);
        self.slots[i] = Slot::Fed(Fed {
            attrs,
            targets,
            chunks,
        });
    }

    /// The attributes an entry shows, from a scanned record.
    fn attrs_of(&self, fields: &[(&[u8], FieldRef<'_>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        match &self.attrs {
            None => fields
                .iter()
                .map(|(n, f)| (n.to_vec(), f.display()))
                .collect(),
            Some(want) => want
                .iter()
                .filter_map(|a| {
                    let f = fields.iter().find(|(n, _)| n == a)?;
                    Some((a.clone(), f.1.display()))
                })
                .collect(),
        }
    }

    /// Settle the fed keys that are next in level order (stops at the first pending one).
    fn drain(&mut self) {
        // Each pass settles one position; bounded by the level's length.
        while self.stop.is_none() && self.settled < self.slots.len() {
            let i = self.settled;
            match std::mem::replace(&mut self.slots[i], Slot::Settled) {
                Slot::Pending => {
                    self.slots[i] = Slot::Pending;
                    return;
                }
                Slot::Missing | Slot::Settled => {}
                Slot::Fed(f) => {
                    let (targets, chunks) = (f.targets, f.chunks);
                    self.settled += 1;
                    self.settle_one(
                        i,
                        f.attrs,
                        targets.iter().map(|(t, h)| (t.as_slice(), *h)),
                        chunks.iter().map(|(t, h)| (t.as_slice(), *h)),
                    );
                    continue;
                }
            }
            self.settled += 1;
        }
    }

    /// Key `i` of the level becomes an entry (a continuation item does not); its targets
    /// not yet visited join the next level (in order), within LIMIT, and its continuation
    /// items not yet visited join this level.
    fn settle_one<'t, 'c>(
        &mut self,
        i: usize,
        attrs: Vec<(Vec<u8>, Vec<u8>)>,
        targets: impl Iterator<Item = (&'t [u8], Option<Hint>)>,
        chunks: impl Iterator<Item = (&'c [u8], Option<Hint>)>,
    ) {
        if self.stop.is_some() {
            return;
        }
        for (t, h) in chunks {
            if self.visited.contains_key(t) {
                continue;
            }
            if self.chunk_items >= CHASE_CHUNK_ITEMS_MAX {
                self.truncated = true;
                continue;
            }
            self.chunk_items += 1;
            let pos = u32::try_from(self.frontier.len()).unwrap_or(u32::MAX);
            self.visited.insert(t.to_vec(), (self.depth, pos));
            self.frontier.push(t.to_vec());
            self.hints.push(h);
            self.slots.push(Slot::Pending);
        }
        if i >= self.level_keys {
            // A continuation item: after every key of the level, so nothing after it
            // counts against LIMIT but the next level.
            self.add_targets(targets, 0);
            return;
        }
        if self.entries.len() >= self.limit {
            self.stop = Some(Stop::Limit);
            return;
        }
        let entry = Entry {
            key: std::mem::take(&mut self.frontier[i]),
            depth: self.depth,
            attrs,
        };
        let bytes = entry.reply_bytes();
        if !self.entries.is_empty() && self.reply_bytes.saturating_add(bytes) > self.reply_bytes_max
        {
            self.stop = Some(Stop::Bytes);
            return;
        }
        self.reply_bytes = self.reply_bytes.saturating_add(bytes);
        self.entries.push(entry);
        // Keys after this one in the level count against LIMIT too, so the next batch is
        // never larger than what LIMIT could still take.
        self.add_targets(targets, self.level_keys - i - 1);
    }

    /// Targets not yet visited join the next level, while the entries, the next level and
    /// the `rest` keys of this level still pending fit in LIMIT.
    fn add_targets<'t>(
        &mut self,
        targets: impl Iterator<Item = (&'t [u8], Option<Hint>)>,
        rest: usize,
    ) {
        for (t, h) in targets {
            if self.visited.contains_key(t) {
                continue;
            }
            if self.entries.len() + self.next.len() + rest >= self.limit {
                self.truncated = true;
                continue;
            }
            let pos = u32::try_from(self.next.len()).unwrap_or(u32::MAX);
            self.visited.insert(t.to_vec(), (self.depth + 1, pos));
            self.next.push(t.to_vec());
            self.next_hints.push(h);
        }
    }

    /// The caller's time bound is hit: what was fed so far for the current level is kept,
    /// nothing more is fetched.
    pub fn timed_out(&mut self) {
        if self.stop.is_some() {
            return;
        }
        if self.fetching {
            self.settle();
        }
        if self.stop.is_none() {
            self.stop = Some(if self.frontier.is_empty() && !self.unfed {
                self.end_reason()
            } else {
                Stop::Time
            });
        }
    }

    /// The entries and why the chase stopped. Finishing while keys remain to fetch counts
    /// as [`Stop::Time`] (the caller stopped early).
    pub fn finish(mut self) -> ChaseReply {
        self.timed_out();
        ChaseReply {
            entries: self.entries,
            stop: self.stop.unwrap_or(Stop::Time),
        }
    }

    fn end_reason(&self) -> Stop {
        if self.unfed {
            Stop::Time
        } else if self.truncated {
            Stop::Limit
        } else {
            Stop::Complete
        }
    }

    /// Ends the level being fetched: the keys fed out of order are settled in level order
    /// (keys never fed are skipped and remembered as `unfed`), and the next level becomes
    /// the frontier.
    fn settle(&mut self) {
        self.fetching = false;
        // `unfed` stays set once a level had a key never fed: whatever was reachable only
        // through it is missing from every later level too, so the walk is never complete.
        // Bounded by the level's length: each pass settles or skips one position.
        while self.stop.is_none() && self.settled < self.slots.len() {
            if matches!(self.slots[self.settled], Slot::Pending) {
                self.unfed = true;
                self.slots[self.settled] = Slot::Settled;
                self.settled += 1;
                continue;
            }
            self.drain();
        }
        if self.stop.is_some() {
            self.frontier.clear();
            self.next.clear();
            return;
        }
        self.frontier = std::mem::take(&mut self.next);
        self.hints = std::mem::take(&mut self.next_hints);
        self.slots.clear();
        self.depth += 1;
        if self.entries.len() >= self.limit && (!self.frontier.is_empty() || self.truncated) {
            self.stop = Some(Stop::Limit);
        }
    }
}

/// A decoded field's links with their hints (none for plain bytes).
fn field_links(f: &Field) -> impl Iterator<Item = (&[u8], Option<Hint>)> {
    let links: &[crate::record::Link] = match f {
        Field::Bytes(_) => &[],
        Field::Link(l) => std::slice::from_ref(l),
        Field::Links(ls) => ls,
    };
    links.iter().map(|l| (l.target.as_slice(), l.hint))
}

#[cfg(test)]
mod tests {
    //! A small graph with a cycle (a → b → c → a), a diamond (a → d and a → c → d), a
    //! missing target and a key that holds no record; each test drives [`Chase`] the way a
    //! front would, feeding every batch from the graph.
    use super::*;
    use crate::record::Link;
    use std::collections::BTreeMap;

    fn graph() -> BTreeMap<Vec<u8>, Record> {
        let mut g = BTreeMap::new();
        let mut node = |k: &str, name: &str, next: Option<&str>, friends: &[&str]| {
            let mut r = Record::new();
            r.insert(b"name".to_vec(), Field::Bytes(name.as_bytes().to_vec()));
            if let Some(n) = next {
                r.insert(b"next".to_vec(), Field::Link(Link::to(n)));
            }
            if !friends.is_empty() {
                r.insert(
                    b"friends".to_vec(),
                    Field::Links(friends.iter().map(|f| Link::to(*f)).collect()),
                );
            }
            g.insert(k.as_bytes().to_vec(), r);
        };
        node("a", "A", Some("b"), &["c", "d", "missing", "string"]);
        node("b", "B", Some("c"), &[]);
        node("c", "C", Some("a"), &["d"]);
        node("d", "D", None, &[]);
        g
    }

    fn chase(cmd: &str) -> Chase {
        let argv: Vec<&[u8]> = cmd.split(' ').map(str::as_bytes).collect();
        Chase::parse(&argv).unwrap()
    }

    fn drive(mut c: Chase, reverse: bool) -> ChaseReply {
        let g = graph();
        for _ in 0..100 {
            let mut batch = c.next_batch();
            if batch.is_empty() {
                break;
            }
            if reverse {
                batch.reverse();
            }
            for k in batch {
                c.feed(&k, g.get(&k));
            }
        }
        c.finish()
    }

    /// As `drive`, feeding the encoded records (what the fronts do).
    fn drive_encoded(mut c: Chase) -> ChaseReply {
        let g = graph();
        for _ in 0..100 {
            let batch = c.next_batch();
            if batch.is_empty() {
                break;
            }
            for k in batch {
                let enc = g.get(&k).map(Record::encode);
                c.feed_encoded(&k, enc.as_deref());
            }
        }
        c.finish()
    }

    fn run(cmd: &str) -> ChaseReply {
        let a = drive(chase(cmd), false);
        // Feed order never changes the reply.
        assert_eq!(a, drive(chase(cmd), true), "{cmd}");
        // Nor does feeding encoded records instead of decoded ones.
        assert_eq!(a, drive_encoded(chase(cmd)), "{cmd} (encoded)");
        a
    }

    fn keys(r: &ChaseReply) -> Vec<(String, u32)> {
        r.entries
            .iter()
            .map(|e| (String::from_utf8(e.key.clone()).unwrap(), e.depth))
            .collect()
    }

    fn kd(xs: &[(&str, u32)]) -> Vec<(String, u32)> {
        xs.iter().map(|(k, d)| (k.to_string(), *d)).collect()
    }

    #[test]
    fn depth_zero_is_the_key_alone() {
        let r = run("CHASE a next DEPTH 0");
        assert_eq!(keys(&r), kd(&[("a", 0)]));
        assert_eq!(r.stop, Stop::Complete);
    }

    #[test]
    fn default_depth_one_follows_fields_in_order_and_skips_missing() {
        let r = run("chase a next friends");
        assert_eq!(keys(&r), kd(&[("a", 0), ("b", 1), ("c", 1), ("d", 1)]));
        assert_eq!(r.stop, Stop::Complete);
        // All fields, links by display string.
        assert_eq!(
            r.entries[0].attrs,
            vec![
                (b"name".to_vec(), b"A".to_vec()),
                (b"next".to_vec(), b"b".to_vec()),
                (b"friends".to_vec(), b"c d missing string".to_vec()),
            ]
        );
    }

    #[test]
    fn cycle_visits_each_key_once() {
        let r = run("chase a next DEPTH 3");
        assert_eq!(keys(&r), kd(&[("a", 0), ("b", 1), ("c", 2)]));
        assert_eq!(r.stop, Stop::Complete);
        let r = run("chase c next friends depth 8");
        assert_eq!(keys(&r), kd(&[("c", 0), ("a", 1), ("d", 1), ("b", 2)]));
    }

    #[test]
    fn diamond_is_reached_once_at_its_shortest_depth() {
        let r = run("chase a friends DEPTH 3");
        assert_eq!(keys(&r), kd(&[("a", 0), ("c", 1), ("d", 1)]));
    }

    #[test]
    fn missing_root_is_empty_and_complete() {
        let r = run("chase nope next DEPTH 3");
        assert_eq!(r.entries, vec![]);
        assert_eq!(r.stop, Stop::Complete);
    }

    #[test]
    fn limit() {
        let r = run("chase a next friends LIMIT 2");
        assert_eq!(keys(&r), kd(&[("a", 0), ("b", 1)]));
        assert_eq!(r.stop, Stop::Limit);
        let r = run("chase a next friends LIMIT 1");
        assert_eq!(keys(&r), kd(&[("a", 0)]));
        assert_eq!(r.stop, Stop::Limit);
        // Exactly enough: complete.
        let r = run("chase a next depth 3 limit 3");
        assert_eq!(keys(&r), kd(&[("a", 0), ("b", 1), ("c", 2)]));
        assert_eq!(r.stop, Stop::Complete);
        // Batches never exceed what LIMIT can still take.
        let mut c = chase("chase a next friends limit 3");
        assert_eq!(c.next_batch(), vec![b"a".to_vec()]);
        c.feed(b"a", graph().get(&b"a"[..]));
        assert_eq!(c.next_batch(), vec![b"b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn fields_selects_attributes_in_the_order_asked() {
        let r = run("chase a next FIELDS next nope name");
        assert_eq!(
            r.entries[0].attrs,
            vec![
                (b"next".to_vec(), b"b".to_vec()),
                (b"name".to_vec(), b"A".to_vec())
            ]
        );
        assert_eq!(
            r.entries[1].attrs,
            vec![
                (b"next".to_vec(), b"c".to_vec()),
                (b"name".to_vec(), b"B".to_vec())
            ]
        );
        let r = run("chase b next FIELDS nope");
        assert_eq!(r.entries[0].attrs, vec![]);
        // Options in any order, FIELDS before DEPTH.
        let r = run("chase a next fields name depth 0");
        assert_eq!(keys(&r), kd(&[("a", 0)]));
    }

    #[test]
    fn byte_bound_keeps_the_first_entry_and_stops() {
        let mut c = chase("chase a next friends FIELDS name");
        let one = Entry {
            key: b"a".to_vec(),
            depth: 0,
            attrs: vec![(b"name".to_vec(), b"A".to_vec())],
        }
        .reply_bytes();
        c.reply_bytes_max = 2 * one;
        let r = drive(c, false);
        assert_eq!(keys(&r), kd(&[("a", 0), ("b", 1)]));
        assert_eq!(r.stop, Stop::Bytes);
        let mut c = chase("chase a next");
        c.reply_bytes_max = 1;
        let r = drive(c, false);
        assert_eq!(keys(&r), kd(&[("a", 0)]));
        assert_eq!(r.stop, Stop::Bytes);
    }

    #[test]
    fn time_bound_keeps_what_was_fed() {
        let g = graph();
        let mut c = chase("chase a next friends depth 2");
        let b = c.next_batch();
        c.feed(&b[0], g.get(&b[0]));
        let b = c.next_batch();
        assert_eq!(b.len(), 5); // b c d missing string
        c.feed(b"c", g.get(&b"c"[..]));
        c.timed_out();
        assert!(c.next_batch().is_empty());
        let r = c.finish();
        assert_eq!(keys(&r), kd(&[("a", 0), ("c", 1)]));
        assert_eq!(r.stop, Stop::Time);
        // Timing out after the last level was fed is still complete.
        let mut c = chase("chase a next depth 0");
        c.next_batch();
        c.feed(b"a", g.get(&b"a"[..]));
        c.timed_out();
        assert_eq!(c.finish().stop, Stop::Complete);
    }

    #[test]
    fn a_key_never_fed_is_never_complete() {
        // From c: level 1 is a, d. d is skipped (a fetch that failed); a is fed and the
        // walk goes on to depth 2 (b, missing, string) and ends: still `time`, as d's
        // links were never followed.
        let g = graph();
        let mut c = chase("chase c next friends depth 2");
        let root = c.next_batch();
        c.feed(&root[0], g.get(&root[0]));
        let level = c.next_batch();
        assert_eq!(level, vec![b"a".to_vec(), b"d".to_vec()]);
        c.feed(b"a", g.get(&b"a"[..]));
        let l2 = c.next_batch();
        assert_eq!(l2.len(), 3);
        for k in &l2 {
            c.feed(k, g.get(k));
        }
        for _ in 0..10 {
            let batch = c.next_batch();
            if batch.is_empty() {
                break;
            }
            for k in &batch {
                c.feed(k, g.get(k));
            }
        }
        assert_eq!(c.finish().stop, Stop::Time);
    }

    #[test]
    fn feeds_outside_the_batch_are_ignored() {
        let g = graph();
        let mut c = chase("chase a next");
        c.feed(b"a", g.get(&b"a"[..])); // before next_batch
        let _ = c.next_batch();
        c.feed(b"d", g.get(&b"d"[..]));
        c.feed(b"a", g.get(&b"a"[..]));
        c.feed(b"a", None); // a repeat: the first feed wins
        let _ = c.next_batch();
        let r = c.finish();
        assert_eq!(keys(&r), kd(&[("a", 0)]));
        assert_eq!(r.stop, Stop::Time);
        assert_eq!(Stop::Complete.as_str(), "complete");
        assert_eq!(Stop::Bytes.as_str(), "bytes");
    }

    #[test]
    fn parse_errors() {
        let p = |s: &str| {
            let argv: Vec<&[u8]> = s.split(' ').map(str::as_bytes).collect();
            Chase::parse(&argv).map(|c| (c.depth_max, c.limit))
        };
        assert_eq!(p("chase a next"), Ok((1, CHASE_LIMIT_DEFAULT as usize)));
        assert_eq!(p("chase a next depth 8 limit 100000"), Ok((8, 100_000)));
        assert_eq!(
            p("chase a"),
            Err("ERR wrong number of arguments for 'chase' command".into())
        );
        assert_eq!(p("chase a depth 2"), Err(ERR_SYNTAX.into()));
        assert_eq!(p("chase a next depth"), Err(ERR_SYNTAX.into()));
        assert_eq!(p("chase a next fields"), Err(ERR_SYNTAX.into()));
        assert_eq!(p("chase a next fields depth 1"), Err(ERR_SYNTAX.into()));
        assert_eq!(p("chase a next depth x"), Err(ERR_NOT_INT.into()));
        assert_eq!(p("chase a next depth 1 x"), Err(ERR_SYNTAX.into()));
        assert_eq!(p("chase a next limit 5 x 1"), Err(ERR_SYNTAX.into()));
        assert_eq!(
            p("chase a next depth -1"),
            Err("ERR DEPTH must be between 0 and 8".into())
        );
        assert_eq!(
            p("chase a next depth 9"),
            Err("ERR DEPTH must be between 0 and 8".into())
        );
        assert_eq!(
            p("chase a next limit 0"),
            Err("ERR LIMIT must be between 1 and 100000".into())
        );
        assert_eq!(
            p("chase a next limit 100001"),
            Err("ERR LIMIT must be between 1 and 100000".into())
        );
        assert_eq!(chase("chase k x").root(), b"k");
    }

    /// A plain breadth-first walk: the specification the streaming settle must meet.
    fn reference(
        g: &BTreeMap<Vec<u8>, Record>,
        root: &[u8],
        depth_max: u32,
        limit: usize,
    ) -> (Vec<(Vec<u8>, u32)>, Stop) {
        let mut visited = std::collections::BTreeSet::from([root.to_vec()]);
        let mut frontier = vec![root.to_vec()];
        let mut out: Vec<(Vec<u8>, u32)> = Vec::new();
        let mut truncated = false;
        for depth in 0..=depth_max {
            let mut next = Vec::new();
            for (i, k) in frontier.iter().enumerate() {
                let Some(r) = g.get(k) else { continue };
                if out.len() >= limit {
                    return (out, Stop::Limit);
                }
                out.push((k.clone(), depth));
                if depth == depth_max {
                    continue;
                }
                let rest = frontier.len() - i - 1;
                for t in r.get(b"next").into_iter().flat_map(Field::targets) {
                    if visited.contains(t) {
                        continue;
                    }
                    if out.len() + next.len() + rest >= limit {
                        truncated = true;
                        continue;
                    }
                    visited.insert(t.to_vec());
                    next.push(t.to_vec());
                }
            }
            frontier = next;
            if frontier.is_empty() {
                break;
            }
            if out.len() >= limit {
                return (out, Stop::Limit);
            }
        }
        (
            out,
            if truncated {
                Stop::Limit
            } else {
                Stop::Complete
            },
        )
    }

    /// `g`'s `next` lists chunked as `ringlet load` writes them: the first `chunk` targets
    /// in the vertex, the rest in items `v#next#k` linked by `next.next`.
    fn chunk_graph(g: &BTreeMap<Vec<u8>, Record>, chunk: usize) -> BTreeMap<Vec<u8>, Record> {
        let mut out = BTreeMap::new();
        for (k, r) in g {
            let targets: Vec<Link> = r
                .get(b"next")
                .into_iter()
                .flat_map(Field::targets)
                .map(Link::to)
                .collect();
            let mut head = r.clone();
            head.remove(b"next");
            let name = |j: usize| {
                let mut n = k.clone();
                if j > 0 {
                    n.extend_from_slice(format!("#next#{j}").as_bytes());
                }
                n
            };
            for (j, part) in targets.chunks(chunk).enumerate() {
                let mut item = if j == 0 { head.clone() } else { Record::new() };
                item.insert(b"next".to_vec(), Field::Links(part.to_vec()));
                if (j + 1) * chunk < targets.len() {
                    item.insert(b"next.next".to_vec(), Field::Link(Link::to(name(j + 1))));
                }
                out.insert(name(j), item);
            }
            out.entry(k.clone()).or_insert(head);
        }
        out
    }

    /// CHUNKED's order, written plainly: a level's keys, then the continuation items in the
    /// order they are found, each adding its targets to the next level.
    fn reference_chunked(
        g: &BTreeMap<Vec<u8>, Record>,
        root: &[u8],
        depth_max: u32,
        limit: usize,
    ) -> (Vec<(Vec<u8>, u32)>, Stop) {
        let mut visited = std::collections::BTreeSet::from([root.to_vec()]);
        let mut frontier = vec![root.to_vec()];
        let mut out: Vec<(Vec<u8>, u32)> = Vec::new();
        let mut truncated = false;
        for depth in 0..=depth_max {
            let keys = frontier.len();
            let mut next = Vec::new();
            let mut i = 0;
            while i < frontier.len() {
                let k = frontier[i].clone();
                i += 1;
                let Some(r) = g.get(&k) else { continue };
                let follow = depth < depth_max;
                if follow {
                    for t in r.get(b"next.next").into_iter().flat_map(Field::targets) {
                        if visited.insert(t.to_vec()) {
                            frontier.push(t.to_vec());
                        }
                    }
                }
                if i <= keys {
                    if out.len() >= limit {
                        return (out, Stop::Limit);
                    }
                    out.push((k.clone(), depth));
                }
                if !follow {
                    continue;
                }
                let rest = keys.saturating_sub(i);
                for t in r.get(b"next").into_iter().flat_map(Field::targets) {
                    if visited.contains(t) {
                        continue;
                    }
                    if out.len() + next.len() + rest >= limit {
                        truncated = true;
                        continue;
                    }
                    visited.insert(t.to_vec());
                    next.push(t.to_vec());
                }
            }
            frontier = next;
            if frontier.is_empty() {
                break;
            }
            if out.len() >= limit {
                return (out, Stop::Limit);
            }
        }
        let stop = if truncated {
            Stop::Limit
        } else {
            Stop::Complete
        };
        (out, stop)
    }

    #[test]
    fn chunked_lists_are_one_hop() {
        // a's list b c d missing string, chunked 1 a piece: a, a#next#1 … a#next#4.
        let mut base = graph();
        let mut a = base[&b"a"[..]].clone();
        let list = ["b", "c", "d", "missing", "string"].map(Link::to).to_vec();
        a.insert(b"next".to_vec(), Field::Links(list));
        base.insert(b"a".to_vec(), a);
        let g = chunk_graph(&base, 1);
        assert!(g.contains_key(&b"a#next#4"[..]));
        let drive_g = |mut c: Chase, by_key: bool| {
            let mut batches = 0;
            while c.advance() {
                batches += 1;
                let (start, end) = (c.level_start(), c.level().len());
                for i in start..end {
                    let enc = g.get(&c.level()[i]).map(Record::encode);
                    if by_key {
                        let k = c.level()[i].clone();
                        c.feed_encoded(&k, enc.as_deref());
                    } else {
                        c.feed_encoded_at(i, enc.as_deref());
                    }
                }
            }
            (c.finish(), batches)
        };
        let (r, batches) = drive_g(chase("chase a next CHUNKED depth 1 fields name"), false);
        assert_eq!(keys(&r), kd(&[("a", 0), ("b", 1), ("c", 1), ("d", 1)]));
        assert_eq!(r.stop, Stop::Complete);
        // The level of a: a, then a#next#1 … #4 one batch each (a chain); then b c d
        // missing string.
        assert_eq!(batches, 6);
        assert_eq!(r.entries[1].attrs, vec![(b"name".to_vec(), b"B".to_vec())]);
        let (r2, _) = drive_g(chase("chase a next CHUNKED depth 1 fields name"), true);
        assert_eq!(r, r2);
        // Without CHUNKED the chunks are items a level deeper each.
        let (r, _) = drive_g(chase("chase a next next.next depth 1 fields name"), false);
        assert_eq!(keys(&r), kd(&[("a", 0), ("b", 1), ("a#next#1", 1)]));
        // At the last depth no chunk is read.
        let (r, batches) = drive_g(chase("chase a next CHUNKED depth 0"), false);
        assert_eq!((keys(&r), batches), (kd(&[("a", 0)]), 1));
        // next_batch hands out only the new keys of a level.
        let mut c = chase("chase a next chunked");
        assert_eq!(c.next_batch(), vec![b"a".to_vec()]);
        let enc = g.get(&b"a"[..]).map(Record::encode);
        c.feed_encoded(b"a", enc.as_deref());
        assert_eq!(c.next_batch(), vec![b"a#next#1".to_vec()]);
        assert!(c.is_chunked());
        // LIMIT counts entries only.
        let (r, _) = drive_g(chase("chase a next CHUNKED limit 3"), false);
        assert_eq!(keys(&r), kd(&[("a", 0), ("b", 1), ("c", 1)]));
        assert_eq!(r.stop, Stop::Limit);
    }

    #[test]
    fn chunked_walk_matches_the_unchunked_graph() {
        let mut s = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = move |n: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % n.max(1)
        };
        for _ in 0..200 {
            let n = 2 + rnd(30);
            let mut g = BTreeMap::new();
            for v in 0..n {
                if rnd(8) == 0 {
                    continue;
                }
                let mut r = Record::new();
                r.insert(b"name".to_vec(), Field::Bytes(vec![b'a'; v as usize]));
                let mut links: Vec<Link> = Vec::new();
                for _ in 0..rnd(9) {
                    let l = Link::to(format!("v{}", rnd(n + 2)));
                    if !links.contains(&l) {
                        links.push(l);
                    }
                }
                if !links.is_empty() {
                    r.insert(b"next".to_vec(), Field::Links(links));
                }
                g.insert(format!("v{v}").into_bytes(), r);
            }
            let chunk = 1 + rnd(3) as usize;
            let cg = chunk_graph(&g, chunk);
            let depth = rnd(4) as u32;
            let limit = 1 + rnd(25) as u32;
            let root = b"v0".to_vec();
            let attrs = match rnd(2) {
                0 => None,
                _ => Some(vec![b"name".to_vec()]),
            };
            let new = || {
                Chase::new(
                    root.clone(),
                    vec![b"next".to_vec()],
                    depth,
                    limit,
                    attrs.clone(),
                )
                .unwrap()
                .chunked()
            };
            let got = |r: ChaseReply| -> (Vec<(Vec<u8>, u32)>, Stop) {
                (
                    r.entries.into_iter().map(|e| (e.key, e.depth)).collect(),
                    r.stop,
                )
            };
            let want = reference_chunked(&cg, &root, depth, limit as usize);
            // By position in order (the node's loop).
            let mut c = new();
            while c.advance() {
                for i in c.level_start()..c.level().len() {
                    let enc = cg.get(&c.level()[i]).map(Record::encode);
                    c.feed_encoded_at(i, enc.as_deref());
                }
            }
            let by_pos = got(c.finish());
            assert_eq!(by_pos, want);
            // By batches, shuffled, by key, decoded and encoded (the cluster's loop).
            let mut c = new();
            for _ in 0..1000 {
                let mut batch = c.next_batch();
                if batch.is_empty() {
                    break;
                }
                for i in (1..batch.len()).rev() {
                    batch.swap(i, rnd(i as u64 + 1) as usize);
                }
                for k in &batch {
                    if rnd(2) == 0 {
                        c.feed(k, cg.get(k));
                    } else {
                        let enc = cg.get(k).map(Record::encode);
                        c.feed_encoded(k, enc.as_deref());
                    }
                }
            }
            assert_eq!(got(c.finish()), want);
            // A complete walk visits exactly the unchunked graph's BFS, at the same depths.
            let plain = reference(&g, &root, depth, CHASE_LIMIT_MAX as usize);
            if want.1 == Stop::Complete {
                let mut a = want.0.clone();
                let mut b = plain.0.clone();
                a.sort();
                b.sort();
                assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn any_feed_order_gives_the_reference_walk() {
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move |n: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % n.max(1)
        };
        for _ in 0..200 {
            let n = 2 + rnd(30);
            let mut g = BTreeMap::new();
            for v in 0..n {
                if rnd(8) == 0 {
                    continue; // a missing vertex
                }
                let mut r = Record::new();
                r.insert(b"name".to_vec(), Field::Bytes(vec![b'a'; v as usize]));
                let links: Vec<Link> = (0..rnd(6))
                    .map(|_| Link::to(format!("v{}", rnd(n + 2))))
                    .collect();
                if !links.is_empty() {
                    r.insert(b"next".to_vec(), Field::Links(links));
                }
                g.insert(format!("v{v}").into_bytes(), r);
            }
            let depth = rnd(4) as u32;
            let limit = 1 + rnd(25) as u32;
            let root = b"v0".to_vec();
            let want = reference(&g, &root, depth, limit as usize);
            // With FIELDS the records are walked only up to the fields used.
            let attrs = match rnd(3) {
                0 => None,
                1 => Some(vec![b"name".to_vec()]),
                _ => Some(vec![b"next".to_vec(), b"name".to_vec(), b"next".to_vec()]),
            };
            let new = || {
                let links = vec![b"next".to_vec()];
                Chase::new(root.clone(), links, depth, limit, attrs.clone()).unwrap()
            };
            let got = |r: ChaseReply| -> (Vec<(Vec<u8>, u32)>, Stop) {
                (
                    r.entries.into_iter().map(|e| (e.key, e.depth)).collect(),
                    r.stop,
                )
            };
            // In order by position, encoded (the node's path).
            let mut c = new();
            while c.advance() {
                for i in 0..c.level().len() {
                    let enc = g.get(&c.level()[i]).map(Record::encode);
                    c.feed_encoded_at(i, enc.as_deref());
                }
            }
            assert_eq!(got(c.finish()), want);
            // Shuffled, by key, encoded and decoded mixed, each key fed twice.
            let mut c = new();
            for _ in 0..=depth + 1 {
                let mut batch = c.next_batch();
                if batch.is_empty() {
                    break;
                }
                for i in (1..batch.len()).rev() {
                    batch.swap(i, rnd(i as u64 + 1) as usize);
                }
                for k in batch.iter().chain(batch.iter()) {
                    if rnd(2) == 0 {
                        c.feed(k, g.get(k));
                    } else {
                        let enc = g.get(k).map(Record::encode);
                        c.feed_encoded(k, enc.as_deref());
                    }
                }
            }
            assert_eq!(got(c.finish()), want);
        }
    }
}
