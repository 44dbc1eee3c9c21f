//! `ringlet-record`: KVL records (KELI's Key-Value-Links model) and the commands over them,
//! as pure functions. No I/O, no clocks, no locks: the fronts (single-node RESP server and
//! cluster RESP front) fetch, lock and store; this crate decides.
//!
//! A record is a value made of named fields, each holding plain bytes, a [`Link`] to another
//! key (with an optional location [`Hint`]), or a list of links. The engine stores a record
//! as an opaque byte string marked as a record; Redis hash commands see it as a hash whose
//! link fields read as their target keys.
//!
//! Goals:
//! - one canonical, versioned byte format whose decoder never panics and never allocates
//!   beyond what the input length implies;
//! - Redis 7.0's hash commands, replies and error texts, so redis-cli and redis-py work;
//! - `LINK` to make and read links, and `CHASE` to walk them breadth-first in one round trip,
//!   driven by the caller in batches so the same code serves local and remote fetches.
//!
//! Non-goals: storage, locking, routing, hint resolution (the fronts fill hints, see
//! [`record::Hint`]), RESP encoding.
//!
//! Modules:
//! - [`record`]: [`Record`], [`Field`], [`Link`], [`Hint`], the codec and [`RecordError`];
//! - [`hash`]: HSET … HSTRLEN over `Option<&Record>` → reply + write to do;
//! - [`link`]: `LINK SET|ADD|GET|DEL`;
//! - [`chase`]: `CHASE`, a sans-I/O breadth-first state machine.
//!
//! # Byte format (version 1)
//!
//! All lengths and counts are unsigned LEB128 varints (7 bits a byte, low first, at most 10
//! bytes) in their shortest form, so one record has exactly one encoding. Varints were chosen
//! over fixed u32s because records are mostly short names and values, where a one-byte
//! length saves 3 bytes a field.
//!
//! ```text
//! record  = | 0x01 (format version) | varint field_count | field * field_count |
//! field   = | varint name_len | name bytes | tag u8 | body |
//!   tag 0 Bytes: | varint len | bytes |
//!   tag 1 Link:  | link |
//!   tag 2 Links: | varint count | link * count |
//! link    = | varint target_len | target bytes | hint_flag u8 | [hint] |
//!   hint_flag 0: no hint
//!   hint_flag 1: | node u32 LE | epoch u64 LE | table u64 LE | entry u64 LE |   (28 bytes)
//!   hint_flag 2: the 28 bytes of flag 1 | location u32 LE | crc u32 LE | memgest u16 LE |
//!                (38 bytes: the target's data entry too, read without the index)
//!   hint_flag 3: flag 2's fields packed: | varint node | varint epoch | varint table |
//!                varint entry | varint location | crc u32 LE | varint memgest |
//!                (~20-25 bytes on a single node; written since session 14 for a hint
//!                with a data part whenever it is shorter than flag 2's 38 bytes; a flag-2
//!                hint that would pack shorter is still read, and re-encoded packed)
//!   hint_flag 4: a single node's data hint (node, epoch, memgest 0; the entry a word of
//!                its table): | varint table>>48 | varint (table>>20) & 0xfff_ffff |
//!                varint low = table & 0xf_ffff | varint (entry - low*65536)/8 |
//!                varint location | crc u32 LE |
//!                (~15-17 bytes; written since session 15 for every hint it can hold,
//!                always shorter than flag 3; flag 2 and 3 hints are still read and
//!                re-encoded in it)
//!   hint_flag 5: flag 4 without its three table varints, in a link list only: the
//!                table is the one of the list's link before, whose hint has a flag-4
//!                form (`local_table`): | varint (entry - low*65536)/8 |
//!                varint location | crc u32 LE |  (~10-12 bytes; written since session
//!                19 for every such link; refused first in a list, after a link without
//!                a flag-4-form hint, and in a single-link field; a flag-4 hint that
//!                repeats the table before it, as written until session 18, is still read
//!                and re-encoded in flag 5)
//!
//! e.g. {f: "vv"}      = 01 01 | 01 'f' 00 02 'v' 'v'
//!      {f: link "k"}  = 01 01 | 01 'f' 01 01 'k' 00
//! ```
//!
//! Decoding refuses: an unknown version, truncation, a non-shortest or overlong varint, an
//! unknown tag or hint flag, a field name over [`FIELD_NAME_BYTES_MAX`], a link target over
//! `KEY_BYTES_MAX`, a list over [`LINKS_PER_FIELD_MAX`], an input over `VALUE_BYTES_MAX`, a
//! duplicate field name, and trailing bytes. Counts are checked against the bytes left
//! (each field needs ≥ 3, each link ≥ 2) before any loop or allocation.
//!
//! Field order is insertion order (what HGETALL shows); replacing a field keeps its place.
//! Empty field names are allowed, as Redis allows empty hash fields.
//!
//! # Display strings
//!
//! Where a hash command shows a field's value, a link shows its target key and a link list
//! its target keys joined by one space (`"u:1 u:2"`); see [`Field::display`]. `LINK GET`
//! returns the targets exactly.
//!
//! # CHASE reply
//!
//! See [`chase`]: an array of entries `[key, depth, [attr, value, ...]]` in BFS order,
//! followed by one last element, the stop status as a bulk string (`"complete"`, `"limit"`,
//! `"bytes"` or `"time"`). In redis-py: `*entries, stop = r.execute_command("CHASE", ...)`.

pub mod chase;
pub mod hash;
pub mod link;
mod number;
pub mod put;
pub mod record;

pub use number::parse_i64;
pub use record::{
    DataHint, Field, Hint, Link, Packed, PutValue, Record, RecordError, FORMAT_VERSION,
};

use ringlet_types::limits::{KEY_BYTES_MAX, VALUE_BYTES_MAX};

/// Longest field name. Redis allows 512 MiB, but a field name is compared on every lookup
/// and is an identifier like a key, so it gets the key bound.
pub const FIELD_NAME_BYTES_MAX: usize = KEY_BYTES_MAX as usize;

/// Most links in one link-list field. KELI chunks follower lists at about 100 links per item
/// (§6); a few thousand leaves room for unchunked lists while keeping one `LINK ADD` (a read,
/// copy and rewrite of the list under the key's lock) and one CHASE frontier step small.
pub const LINKS_PER_FIELD_MAX: usize = 4_096;

/// Deepest CHASE. KELI's workloads (followers of followers, map segments, page fragments)
/// need 1–3 hops; 8 allows longer paths while bounding the round trips one CHASE can
/// drive (one batch of fetches per hop).
pub const CHASE_DEPTH_MAX: u32 = 8;

/// CHASE's LIMIT when none is given: a page of results a client can take in one reply.
pub const CHASE_LIMIT_DEFAULT: u32 = 1_000;

/// Largest CHASE LIMIT: items visited (and fetched) per command, so one command cannot walk
/// a whole graph; it also bounds each fetch batch.
pub const CHASE_LIMIT_MAX: u32 = 100_000;

/// Most reply bytes one CHASE collects (approximate RESP size, see
/// [`chase::Entry::reply_bytes`]). A quarter of a connection's write-buffer bound, so a
/// few concurrent chases cannot fill it; the first entry is always returned whatever its
/// size (a CHASE never returns less than HGETALL of its key would).
pub const CHASE_REPLY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Most continuation items (chunks of link lists, `CHASE ... CHUNKED`) one CHASE reads. A
/// chunk is not an entry, so LIMIT does not bound them; at `ringlet load`'s default of 100
/// links a chunk this is 100 M links, far beyond what the time bound lets one CHASE read,
/// and it bounds the level's key list against a crafted chain.
pub const CHASE_CHUNK_ITEMS_MAX: usize = 1_000_000;

/// The suffix of the link field that continues a chunked link list in the next item
/// (`follows` → `follows.next`), as `ringlet load` writes it and `CHASE ... CHUNKED` reads it.
pub const CHUNK_NEXT_SUFFIX: &[u8] = b".next";

const _: () = assert!(FIELD_NAME_BYTES_MAX <= VALUE_BYTES_MAX as usize);
const _: () = assert!(CHASE_LIMIT_DEFAULT <= CHASE_LIMIT_MAX);
const _: () =
    assert!(CHASE_REPLY_BYTES_MAX as u32 <= ringlet_types::limits::CONN_WRITE_BUFFER_BYTES_MAX / 4);
const _: () = assert!((CHASE_LIMIT_MAX as usize) <= ringlet_types::limits::BATCH_KEYS_MAX as usize);
