//! `CHASE`: follow links breadth-first from one key and return the items in one round trip.
//!
//! ```text
//! CHASE key field [field ...] [DEPTH n] [LIMIT n] [FIELDS attr [attr ...]]
//! ```
//!
//! Follows the named link fields (a single link or a link list; plain-bytes fields are
//! ignored) breadth-first from `key` up to DEPTH hops (default 1, at most
//! [`CHASE_DEPTH_MAX`]; 0 returns just `key`). Each key is visited at most once, so cycles
//! and diamonds are safe. Options may come in any order after the link fields; the words
//! DEPTH, LIMIT and FIELDS (any case) are always options, so they cannot be used as link
//! field or attribute names here.
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

use std::collections::{BTreeMap, BTreeSet};

use crate::number::parse_i64;
use crate::record::{Field, Record};
use crate::{CHASE_DEPTH_MAX, CHASE_LIMIT_DEFAULT, CHASE_LIMIT_MAX, CHASE_REPLY_BYTES_MAX};

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

/// What a fed key contributes: its entry's attributes and the targets of its links.
#[derive(Debug)]
struct Fed {
    attrs: Vec<(Vec<u8>, Vec<u8>)>,
    targets: Vec<Vec<u8>>,
}

/// A CHASE in progress. See the module docs for the driving loop.
#[derive(Debug)]
pub struct Chase {
    root: Vec<u8>,
    link_fields: Vec<Vec<u8>>,
    depth_max: u32,
    limit: usize,
    /// None: all fields.
    attrs: Option<Vec<Vec<u8>>>,
    reply_bytes_max: usize,

    /// Every key ever put in a frontier.
    visited: BTreeSet<Vec<u8>>,
    /// Keys of the level being fetched (or about to be), in BFS order, unique.
    frontier: Vec<Vec<u8>>,
    /// The same keys as a set, while they are being fed: `feed` checks membership in
    /// O(log n) (a scan of `frontier` made a level of n keys cost O(n²)).
    batch: BTreeSet<Vec<u8>>,
    /// Depth of `frontier`.
    depth: u32,
    /// `frontier` was handed out by `next_batch` and its results are being fed.
    fetching: bool,
    /// Results fed for the current level.
    fed: BTreeMap<Vec<u8>, Option<Fed>>,
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
        // Each pass consumes at least one argument, so this ends within argv.len() passes.
        while let Some(opt) = argv.get(i) {
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
        Chase::new(root, link_fields, depth_max, limit, attrs)
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
        Ok(Chase {
            visited: BTreeSet::from([root.clone()]),
            frontier: vec![root.clone()],
            batch: BTreeSet::new(),
            root,
            link_fields,
            depth_max,
            limit: limit as usize,
            attrs,
            reply_bytes_max: CHASE_REPLY_BYTES_MAX,
            depth: 0,
            fetching: false,
            fed: BTreeMap::new(),
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

    /// The keys to fetch now: the whole next BFS level, deduplicated, at most LIMIT keys.
    /// Calling it again first takes in what was fed for the previous level. Empty when the
    /// chase is over (then call [`Chase::finish`]).
    pub fn next_batch(&mut self) -> Vec<Vec<u8>> {
        if self.stop.is_some() {
            return Vec::new();
        }
        if self.fetching {
            self.settle();
        }
        if self.stop.is_some() {
            return Vec::new();
        }
        if self.frontier.is_empty() {
            self.stop = Some(self.end_reason());
            return Vec::new();
        }
        self.fetching = true;
        self.batch = self.frontier.iter().cloned().collect();
        self.frontier.clone()
    }

    /// Hands in a fetched key's record: `None` if the key is missing or is not a record (it
    /// is then skipped). Keys not in the current batch, and repeats, are ignored.
    pub fn feed(&mut self, key: &[u8], rec: Option<&Record>) {
        if !self.fetching || self.fed.contains_key(key) || !self.batch.contains(key) {
            return;
        }
        let fed = rec.map(|r| Fed {
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
                    .flat_map(Field::targets)
                    .map(<[u8]>::to_vec)
                    .collect()
            } else {
                Vec::new()
            },
        });
        self.fed.insert(key.to_vec(), fed);
    }

    /// [`Chase::feed`] with the key's encoded record (`None`: missing or not a record),
    /// walked in place by [`crate::record::scan`]: no [`Record`] is built, so a visited item
    /// costs its attributes and link targets, not one allocation per link it holds. Bytes
    /// that do not decode count as a missing key.
    pub fn feed_encoded(&mut self, key: &[u8], encoded: Option<&[u8]>) {
        if !self.fetching || self.fed.contains_key(key) || !self.batch.contains(key) {
            return;
        }
        let fields = encoded.and_then(|b| crate::record::scan(b).ok());
        let fed = fields.map(|fields| Fed {
            attrs: match &self.attrs {
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
            },
            targets: if self.depth < self.depth_max {
                self.link_fields
                    .iter()
                    .filter_map(|n| fields.iter().find(|(f, _)| f == n))
                    .flat_map(|(_, f)| f.targets())
                    .map(<[u8]>::to_vec)
                    .collect()
            } else {
                Vec::new()
            },
        });
        self.fed.insert(key.to_vec(), fed);
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
        if self.truncated {
            Stop::Limit
        } else {
            Stop::Complete
        }
    }

    /// Turns the fed results of the current level into entries, in frontier order, and builds
    /// the next level from their links.
    fn settle(&mut self) {
        self.fetching = false;
        self.batch.clear();
        self.unfed = false;
        let frontier = std::mem::take(&mut self.frontier);
        let mut fed = std::mem::take(&mut self.fed);
        let mut next = Vec::new();
        let mut rest = frontier.len();
        for key in frontier {
            rest -= 1;
            let f = match fed.remove(&key) {
                Some(Some(f)) => f,
                Some(None) => continue,
                None => {
                    self.unfed = true;
                    continue;
                }
            };
            if self.entries.len() >= self.limit {
                self.stop = Some(Stop::Limit);
                return;
            }
            let entry = Entry {
                key,
                depth: self.depth,
                attrs: f.attrs,
            };
            let bytes = entry.reply_bytes();
            if !self.entries.is_empty()
                && self.reply_bytes.saturating_add(bytes) > self.reply_bytes_max
            {
                self.stop = Some(Stop::Bytes);
                return;
            }
            self.reply_bytes = self.reply_bytes.saturating_add(bytes);
            self.entries.push(entry);
            for t in f.targets {
                if self.visited.contains(&t) {
                    continue;
                }
                // Keys this level may still add count against LIMIT too, so the next batch
                // is never larger than what LIMIT could still take.
                if self.entries.len() + next.len() + rest >= self.limit {
                    self.truncated = true;
                    continue;
                }
                self.visited.insert(t.clone());
                next.push(t);
            }
        }
        self.frontier = next;
        self.depth += 1;
        if self.entries.len() >= self.limit && (!self.frontier.is_empty() || self.truncated) {
            self.stop = Some(Stop::Limit);
        }
    }
}

#[cfg(test)]
mod tests {
    //! A small graph with a cycle (a → b → c → a), a diamond (a → d and a → c → d), a
    //! missing target and a key that holds no record; each test drives [`Chase`] the way a
    //! front would, feeding every batch from the graph.
    use super::*;
    use crate::record::Link;

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
}
