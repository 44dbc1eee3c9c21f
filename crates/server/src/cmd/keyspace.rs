//! Keyspace commands (Redis `db.c`, `expire.c`).
//!
//! **Written once for both fronts**, over [`Keyspace`] (cmd/keyspace_api.rs): EXPIRE PEXPIRE
//! EXPIREAT PEXPIREAT (NX XX GT LT) TTL PTTL EXPIRETIME PEXPIRETIME PERSIST TYPE TOUCH COPY
//! RENAME RENAMENX OBJECT, and the keyspace as a whole: DEL UNLINK EXISTS KEYS SCAN
//! RANDOMKEY DBSIZE FLUSHALL FLUSHDB. A TTL change is one [`Change::Expire`]: the engine
//! re-times the entry in place; a cluster writes a new version of the value with the new
//! expiry. The enumerations see "the keys this node answers for" ([`Keyspace::scan`]): a
//! single node's engine, a cluster node's coordinated slots (as Redis Cluster answers them
//! per primary; crates/cluster/src/resp/keyspace.rs).

use super::keyspace_api::{Change, Keyspace, KindFilter, Memgest, Put, ScanFilter, Ttl, Value};
use super::string::KsResult;
use super::{is, parse_i64};
use crate::reply::{errors, Reply};
use bytes::Bytes;
use ringlet_types::{limits, ValueKind};

/// Redis's encoding of a string value: `int` (a canonical 64-bit integer of at most 20
/// bytes), `embstr` (up to 44 bytes), else `raw`. Decided by the value alone: Redis also
/// makes a string raw once APPEND or SETRANGE modified it, which is not tracked. Shared with
/// the cluster front.
pub fn string_encoding(v: &[u8]) -> &'static str {
    let canonical_int = v.len() <= 20
        && std::str::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .is_some_and(|n| n.to_string().as_bytes() == v);
    if canonical_int {
        "int"
    } else if v.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}

/// Redis's OBJECT REFCOUNT of a string value: the integers 0..9999 are shared objects
/// (`OBJ_SHARED_INTEGERS`, refcount `INT_MAX`) wherever Redis stores one — SET, INCR and the
/// like, with Redis's default maxmemory policy — every other value is referenced once.
/// Decided by the value alone, like [`string_encoding`] (a value APPEND made is never shared
/// in Redis; that history is not tracked). Shared with the cluster front.
pub fn string_refcount(v: &[u8]) -> i64 {
    const OBJ_SHARED_INTEGERS: i64 = 10_000;
    const OBJ_SHARED_REFCOUNT: i64 = i32::MAX as i64;
    if string_encoding(v) != "int" {
        return 1;
    }
    match std::str::from_utf8(v)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
    {
        Some(n) if (0..OBJ_SHARED_INTEGERS).contains(&n) => OBJ_SHARED_REFCOUNT,
        _ => 1,
    }
}

/// OBJECT HELP's lines for the subcommands served (both fronts).
pub const OBJECT_HELP: &[&str] = &[
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
];

/// COPY's `DB index` argument, checked as Redis Cluster does: not an integer, out of range,
/// or another database (one keyspace). `None` for database 0. Shared with the cluster front.
pub fn copy_db_error(index: &[u8]) -> Option<&'static str> {
    match parse_i64(index) {
        Some(0) => None,
        // One database, as a Redis Cluster node (SELECT answers the same way).
        Some(1..=15) => Some("ERR Copying to another database is not allowed in cluster mode"),
        Some(_) => Some("ERR DB index is out of range"),
        None => Some("ERR value is not an integer or out of range"),
    }
}

/// Redis's `hash-max-listpack-entries` and `hash-max-listpack-value` (aliases
/// `hash-max-ziplist-*`), defaults 512 and 64 as in Redis 7. A record has one representation,
/// so here they decide only which encoding OBJECT ENCODING names; CONFIG SET changes them so
/// that tools and tests tuning them keep working. Redis converts a hash to `hashtable` once and
/// for good; here the name follows the current values (raising them back makes a large record
/// read `listpack` again) — said in docs/design/redis-test-suite.md. One per node, shared by
/// both fronts.
pub struct HashEncodingMax {
    entries: std::sync::atomic::AtomicU64,
    value_bytes: std::sync::atomic::AtomicU64,
}

impl Default for HashEncodingMax {
    fn default() -> Self {
        HashEncodingMax {
            entries: 512.into(),
            value_bytes: 64.into(),
        }
    }
}

/// The CONFIG names of [`HashEncodingMax`]: `(name, is the entries limit)`.
const HASH_ENCODING_PARAMS: [(&str, bool); 4] = [
    ("hash-max-listpack-entries", true),
    ("hash-max-ziplist-entries", true),
    ("hash-max-listpack-value", false),
    ("hash-max-ziplist-value", false),
];

impl HashEncodingMax {
    /// CONFIG GET's `(name, value)` pairs, aliases included (Redis lists both).
    pub fn params(&self) -> Vec<(&'static str, String)> {
        use std::sync::atomic::Ordering::Relaxed;
        HASH_ENCODING_PARAMS
            .iter()
            .map(|&(n, e)| {
                let v = if e { &self.entries } else { &self.value_bytes };
                (n, v.load(Relaxed).to_string())
            })
            .collect()
    }

    /// The names CONFIG SET may change.
    pub fn names() -> impl Iterator<Item = &'static str> {
        HASH_ENCODING_PARAMS.iter().map(|&(n, _)| n)
    }

    /// Apply CONFIG SET's `pairs` that name these parameters, all or none (others ignored).
    ///
    /// # Errors
    /// Redis's text for a value that is not an integer or is negative (nothing applied).
    pub fn set(&self, pairs: &[(String, &[u8])]) -> Result<(), Reply> {
        let mut parsed = Vec::new();
        for (name, value) in pairs {
            let Some(&(_, entries)) = HASH_ENCODING_PARAMS.iter().find(|(n, _)| n == name) else {
                continue;
            };
            let why = match parse_i64(value) {
                Some(n) if n >= 0 => {
                    parsed.push((entries, n as u64));
                    continue;
                }
                Some(_) => "argument must be between 0 and 9223372036854775807 inclusive",
                None => "argument couldn't be parsed into an integer",
            };
            return Err(Reply::err_owned(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"
            )));
        }
        for (entries, n) in parsed {
            let v = if entries {
                &self.entries
            } else {
                &self.value_bytes
            };
            v.store(n, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Redis's encoding of a hash like this record: `listpack` while it has at most `max`'s
/// entries, each name and value at most its value bytes, else `hashtable`. Shared with the
/// cluster front.
pub fn record_encoding(encoded: &[u8], max: &HashEncodingMax) -> &'static str {
    use std::sync::atomic::Ordering::Relaxed;
    let (entries, bytes) = (max.entries.load(Relaxed), max.value_bytes.load(Relaxed));
    match ringlet_record::Record::decode(encoded) {
        Ok(r)
            if r.len() as u64 <= entries
                && r.iter()
                    .all(|(n, f)| n.len() as u64 <= bytes && f.display_len() as u64 <= bytes) =>
        {
            "listpack"
        }
        _ => "hashtable",
    }
}

// ---- the keyspace as a whole: written once, over `Keyspace` -------------------------------

/// DEL and UNLINK (UNLINK frees in the background in Redis; the engine frees in O(1) anyway).
pub async fn del<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    Ok(Reply::Int(ks.delete(&argv[1..]).await? as i64))
}

/// EXISTS key [key ...]: a key named twice counts twice (Redis).
pub async fn exists<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    Ok(Reply::Int(ks.exists(&argv[1..]).await? as i64))
}

/// Index positions KEYS visits per [`Keyspace::scan`] call: a KEYS on a large node lets
/// other workers' writes in between batches (one engine lock hold each on a single node).
const KEYS_BATCH: usize = 1024;

/// KEYS pattern: every live key this node answers for (a cluster node: the slots it
/// coordinates, as Redis Cluster), each once, in scan order.
pub async fn keys<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let filter = ScanFilter {
        pattern: Some(argv[1]).filter(|p| *p != b"*"),
        kind: KindFilter::Any,
    };
    let mut out = Vec::new();
    let mut cursor = 0u64;
    // Bounded: the cursor returns to 0 after one pass over the index (plus an upsize's
    // rehash), however the keyspace changes meanwhile.
    loop {
        cursor = ks.scan(cursor, KEYS_BATCH, &filter, &mut out).await?;
        if cursor == 0 {
            break;
        }
    }
    // The scan may return a key twice across an index upsize; KEYS must not.
    dedup_keys(&mut out);
    Ok(Reply::Array(
        out.into_iter()
            .map(|k| Reply::Bulk(Bytes::from(k)))
            .collect(),
    ))
}

/// Drop the later copies of keys listed twice, keeping the order (no key is copied).
fn dedup_keys(out: &mut Vec<Vec<u8>>) {
    let keep: Vec<bool> = {
        let mut seen = std::collections::HashSet::with_capacity(out.len());
        out.iter().map(|k| seen.insert(k.as_slice())).collect()
    };
    let mut keep = keep.into_iter();
    out.retain(|_| keep.next().unwrap_or(true));
}

/// `parseScanCursorOrReply`: `strtoul` base 10 on the C string, no leading space, nothing
/// after the digits, no overflow. `strtoul` accepts a sign (`-1` wraps) and the empty string.
fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let s = super::cstr(arg);
    if s.is_empty() {
        return Some(0);
    }
    if matches!(s[0], b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r') {
        return None;
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if neg { v.wrapping_neg() } else { v })
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: Redis's parsing and errors; the
/// cursor is the keyspace's (a single node's engine cursor, a cluster node's engine cursor
/// over the slots it coordinates), a decimal u64 on both.
pub async fn scan<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let Some(cursor) = parse_cursor(argv[1]) else {
        return Err(Reply::err("ERR invalid cursor"));
    };
    let mut count: i64 = 10;
    let mut filter = ScanFilter::default();
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - i;
        if is(argv[i], "count") && more >= 2 {
            match parse_i64(argv[i + 1]) {
                Some(c) if c >= 1 => count = c,
                Some(_) => return Err(Reply::err(errors::SYNTAX)),
                None => return Err(Reply::err(errors::NOT_INTEGER)),
            }
        } else if is(argv[i], "match") && more >= 2 {
            filter.pattern = Some(argv[i + 1]).filter(|p| *p != b"*");
        } else if is(argv[i], "type") && more >= 2 {
            // TYPE compares with the key's kind as TYPE names it (a record is a `hash`); an
            // unknown type name matches nothing, as in Redis 7.0.
            filter.kind = KindFilter::named(argv[i + 1]);
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
        i += 2;
    }
    // Bound one call's work whatever COUNT says (Redis does not; we must not stall a worker
    // or the engine lock).
    let count = count.min(i64::from(limits::SCAN_COUNT_MAX)) as usize;
    let mut keys = Vec::new();
    let next = ks.scan(cursor, count, &filter, &mut keys).await?;
    Ok(Reply::Array(vec![
        Reply::bulk(next.to_string().as_bytes()),
        Reply::Array(
            keys.into_iter()
                .map(|k| Reply::Bulk(Bytes::from(k)))
                .collect(),
        ),
    ]))
}

pub async fn randomkey<K: Keyspace>(ks: &K, _argv: &[&[u8]]) -> KsResult {
    Ok(ks
        .random_key()
        .await?
        .map_or(Reply::Nil, |k| Reply::Bulk(Bytes::from(k))))
}

/// DBSIZE: keys this node answers for (expired ones not yet reaped included, as Redis).
pub async fn dbsize<K: Keyspace>(ks: &K, _argv: &[&[u8]]) -> KsResult {
    Ok(Reply::Int(ks.key_count() as i64))
}

/// FLUSHALL / FLUSHDB [ASYNC|SYNC]: one database, so both erase everything this node answers
/// for. ASYNC is accepted and runs synchronously (the reply comes when it is done).
pub async fn flushall<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    if argv.len() > 2 || (argv.len() == 2 && !is(argv[1], "sync") && !is(argv[1], "async")) {
        return Err(Reply::err(errors::SYNTAX));
    }
    ks.flush().await?;
    Ok(Reply::ok())
}

// ---- written once for both fronts, over `Keyspace` ----------------------------------------

/// TTL / PTTL / EXPIRETIME / PEXPIRETIME: -2 for a missing key, -1 without a TTL, else
/// `f(expiry)`.
async fn expiry_reply<K: Keyspace>(ks: &K, key: &[u8], f: impl FnOnce(u64) -> i64) -> KsResult {
    Ok(Reply::Int(match ks.read(key).await? {
        None => -2,
        Some(v) => v.expire_at_ms.map_or(-1, f),
    }))
}

/// Seconds as Redis rounds them (`(ms + 500) / 1000`).
fn rounded_s(ms: u64) -> i64 {
    i64::try_from(ms.saturating_add(500) / 1000).unwrap_or(i64::MAX)
}

pub async fn ttl<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let now = ks.now_ms();
    expiry_reply(ks, argv[1], |at| rounded_s(at.saturating_sub(now))).await
}

pub async fn pttl<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let now = ks.now_ms();
    let ms = |at: u64| i64::try_from(at.saturating_sub(now)).unwrap_or(i64::MAX);
    expiry_reply(ks, argv[1], ms).await
}

/// EXPIRETIME: the absolute expiry in unix seconds, rounded as Redis does.
pub async fn expiretime<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    expiry_reply(ks, argv[1], rounded_s).await
}

/// PEXPIRETIME: the absolute expiry in unix ms.
pub async fn pexpiretime<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let ms = |at: u64| i64::try_from(at).unwrap_or(i64::MAX);
    expiry_reply(ks, argv[1], ms).await
}

pub async fn persist<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    ks.update(argv[1], |cur| {
        Ok(match cur {
            Some(v) if v.expire_at_ms.is_some() => (Change::Expire(None), Reply::Int(1)),
            _ => (Change::Nothing, Reply::Int(0)),
        })
    })
    .await
}

/// `expireGenericCommand`: `relative` for EXPIRE/PEXPIRE (basetime now), else the *AT forms
/// (basetime 0); the arguments are parsed by `ringlet_command::args`, options first, then the
/// time, as Redis does. A time at or before now deletes the key.
async fn expire_generic<K: Keyspace>(
    ks: &K,
    argv: &[&[u8]],
    relative: bool,
    seconds: bool,
    cmd: &str,
) -> KsResult {
    let now = i64::try_from(ks.now_ms()).unwrap_or(i64::MAX);
    let args =
        ringlet_command::args::expire_args(argv, if relative { now } else { 0 }, seconds, cmd)?;
    let at = args.at_ms;
    ks.update(argv[1], |cur| {
        let Some(v) = cur else {
            return Ok((Change::Nothing, Reply::Int(0)));
        };
        if !args.allows(v.expire_at_ms) {
            return Ok((Change::Nothing, Reply::Int(0)));
        }
        let change = match u64::try_from(at) {
            Ok(at) if at as i64 > now => Change::Expire(Some(at)),
            _ => Change::Delete,
        };
        Ok((change, Reply::Int(1)))
    })
    .await
}

pub async fn expire<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    expire_generic(ks, argv, true, true, "expire").await
}

pub async fn pexpire<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    expire_generic(ks, argv, true, false, "pexpire").await
}

pub async fn expireat<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    expire_generic(ks, argv, false, true, "expireat").await
}

pub async fn pexpireat<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    expire_generic(ks, argv, false, false, "pexpireat").await
}

pub async fn type_<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    Ok(Reply::simple(match ks.read(argv[1]).await? {
        Some(v) => v.kind.type_name(),
        None => "none",
    }))
}

/// TOUCH key [key ...]: how many exist (reading a key is all a touch does here: the engine's
/// eviction clocks are updated by reads).
pub async fn touch<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let found = ks.read_many(&argv[1..]).await?;
    Ok(Reply::Int(
        found.iter().filter(|v| v.is_some()).count() as i64
    ))
}

/// What RENAME and COPY write to the destination: the source's value, kind (a record stays a
/// record), TTL and memgest (`keys[0]` of their `update_many`).
fn moved_value(src: Value) -> Change {
    Change::Put(Put {
        value: src.bytes,
        kind: src.kind,
        ttl: src.expire_at_ms.map_or(Ttl::Clear, Ttl::At),
        memgest: Memgest::Like(0),
    })
}

/// RENAME and RENAMENX (within a slot in a cluster): the destination is written before the
/// source is deleted, so a coordinator failing in between leaves both, never neither.
async fn rename_generic<K: Keyspace>(ks: &K, argv: &[&[u8]], nx: bool) -> KsResult {
    let (src, dst) = (argv[1], argv[2]);
    ks.update_many(&[src, dst], |cur| {
        let mut cur = cur.into_iter();
        let (s, d) = (cur.next().flatten(), cur.next().flatten());
        let Some(s) = s else {
            return Err(Reply::err("ERR no such key"));
        };
        let (done, not_done) = if nx {
            (Reply::Int(1), Reply::Int(0))
        } else {
            (Reply::ok(), Reply::ok())
        };
        if src == dst || (nx && d.is_some()) {
            return Ok((Vec::new(), not_done));
        }
        Ok((vec![(1, moved_value(s)), (0, Change::Delete)], done))
    })
    .await
}

pub async fn rename<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    rename_generic(ks, argv, false).await
}

pub async fn renamenx<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    rename_generic(ks, argv, true).await
}

/// COPY source destination [DB 0] [REPLACE]: one database, so DB must be 0.
pub async fn copy<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let mut replace = false;
    let mut i = 3;
    while i < argv.len() {
        if is(argv[i], "replace") {
            replace = true;
            i += 1;
        } else if is(argv[i], "db") && i + 1 < argv.len() {
            if let Some(e) = copy_db_error(argv[i + 1]) {
                return Err(Reply::err(e));
            }
            i += 2;
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
    }
    let (src, dst) = (argv[1], argv[2]);
    if src == dst {
        return Err(Reply::err(
            "ERR source and destination objects are the same",
        ));
    }
    ks.update_many(&[src, dst], |cur| {
        let mut cur = cur.into_iter();
        let (s, d) = (cur.next().flatten(), cur.next().flatten());
        match s {
            Some(s) if replace || d.is_none() => Ok((vec![(1, moved_value(s))], Reply::Int(1))),
            _ => Ok((Vec::new(), Reply::Int(0))),
        }
    })
    .await
}

/// OBJECT ENCODING | REFCOUNT key, OBJECT HELP (the table resolved the subcommand and its
/// arity). See [`string_encoding`], [`string_refcount`], [`record_encoding`].
pub async fn object<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let sub = argv[1];
    if is(sub, "help") {
        return Ok(super::connection::help("OBJECT", OBJECT_HELP));
    }
    if !is(sub, "encoding") && !is(sub, "refcount") {
        return Err(Reply::err(errors::SYNTAX));
    }
    let Some(v) = ks.read(argv[2]).await? else {
        return Ok(Reply::Nil);
    };
    Ok(match (v.kind, is(sub, "refcount")) {
        (ValueKind::Record, true) => Reply::Int(1),
        (ValueKind::String, true) => Reply::Int(string_refcount(&v.bytes)),
        (ValueKind::Record, false) => {
            Reply::bulk(record_encoding(&v.bytes, ks.hash_encoding()).as_bytes())
        }
        (ValueKind::String, false) => Reply::bulk(string_encoding(&v.bytes).as_bytes()),
    })
}

/// DUMP key: the value in Redis's serialization (`ringlet_rdb`; docs/design/dump-restore.md),
/// which Redis 7's RESTORE and Ringlet's read back. A record is written as a Redis hash; one
/// with links is refused, since a hash has no links and writing their target keys as plain
/// values would lose them silently.
pub async fn dump<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let Some(v) = ks.read(argv[1]).await? else {
        return Ok(Reply::Nil);
    };
    let payload = match v.kind {
        ValueKind::String => ringlet_rdb::dump_string(&v.bytes),
        ValueKind::Record => {
            let rec = ringlet_record::Record::decode(&v.bytes)
                .map_err(|e| Reply::err_owned(format!("ERR stored record does not decode: {e}")))?;
            let mut fields = Vec::with_capacity(rec.len());
            for (name, f) in rec.iter() {
                match f {
                    ringlet_record::Field::Bytes(b) => fields.push((name, b.as_slice())),
                    _ => return Err(Reply::err(DUMP_LINKS)),
                }
            }
            ringlet_rdb::dump_hash(fields.into_iter())
        }
    };
    Ok(Reply::Bulk(payload.into()))
}

/// DUMP's refusal of a record with links.
pub const DUMP_LINKS: &str = "ERR DUMP of a record with links is not supported: Redis's format \
     has no links (LINK GET reads them, HGETALL shows their targets)";

/// RESTORE and RESTORE-ASKING key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]
/// (Redis's `restoreCommand`): a string or a hash payload of Redis 7 or of DUMP, stored as a
/// string or a record in the key's own memgest (a new key: the default). The errors come in
/// Redis's order: options, BUSYKEY, the TTL, the payload's footer, its contents. A TTL
/// already past stores nothing (and with REPLACE deletes the key), as Redis does.
/// IDLETIME and FREQ are refused: they set Redis's LRU/LFU clock of the key, which Ringlet's
/// eviction does not keep per key, and a flag that cannot be honoured is not ignored.
pub async fn restore<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let (mut replace, mut absttl) = (false, false);
    let mut i = 4;
    while i < argv.len() {
        let more = i + 1 < argv.len();
        if is(argv[i], "replace") {
            replace = true;
        } else if is(argv[i], "absttl") {
            absttl = true;
        } else if (is(argv[i], "idletime") || is(argv[i], "freq")) && more {
            return Err(Reply::err(
                "ERR RESTORE IDLETIME and FREQ are not supported: Ringlet's eviction keeps no \
                 per-key LRU or LFU clock to set",
            ));
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
        i += 1;
    }
    let now = ks.now_ms();
    // Checked now, reported in Redis's order inside the update (after BUSYKEY).
    let at: Result<Option<u64>, &'static str> = match parse_i64(argv[2]) {
        None => Err(errors::NOT_INTEGER),
        Some(t) if t < 0 => Err("ERR Invalid TTL value, must be >= 0"),
        Some(0) => Ok(None),
        Some(t) if absttl => Ok(Some(t as u64)),
        Some(t) => (t as u64)
            .checked_add(now)
            .filter(|&at| at <= i64::MAX as u64)
            .map(Some)
            .ok_or("ERR invalid expire time in 'restore' command"),
    };
    let value = restored_value(argv[3]);
    ks.update(argv[1], |cur| {
        if cur.is_some() && !replace {
            return Err(Reply::err("BUSYKEY Target key name already exists."));
        }
        let at = at.map_err(Reply::err)?;
        let (value, kind) = value?;
        match at {
            // Already expired: nothing is stored; REPLACE still removes the old value.
            Some(at) if at <= now => {
                let change = if cur.is_some() {
                    Change::Delete
                } else {
                    Change::Nothing
                };
                Ok((change, Reply::ok()))
            }
            _ => Ok((
                Change::Put(Put {
                    value,
                    kind,
                    ttl: at.map_or(Ttl::Clear, Ttl::At),
                    memgest: Memgest::Own,
                }),
                Reply::ok(),
            )),
        }
    })
    .await
}

/// The value and kind a RESTORE payload stores: a string, or a hash as a record.
fn restored_value(payload: &[u8]) -> Result<(Vec<u8>, ValueKind), Reply> {
    use ringlet_rdb::Object;
    // The codec's texts are Redis's where Redis has one ("DUMP payload version or checksum
    // are wrong", "Bad data format: ...").
    let object = ringlet_rdb::restore(payload).map_err(|e| Reply::err_owned(format!("ERR {e}")))?;
    match object {
        Object::String(s) => Ok((s, ValueKind::String)),
        // Redis loads no empty hash either (an empty key is "Bad data format").
        Object::Hash(fields) if fields.is_empty() => Err(Reply::err("ERR Bad data format")),
        Object::Hash(fields) => {
            let mut rec = ringlet_record::Record::new();
            for (name, value) in fields {
                if !rec.insert(name, ringlet_record::Field::Bytes(value)) {
                    return Err(Reply::err("ERR Bad data format: a field appears twice"));
                }
            }
            if !rec.within_bounds() {
                return Err(Reply::err(
                    "ERR Bad data format: the hash exceeds a record's limits",
                ));
            }
            Ok((rec.encode(), ValueKind::Record))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{dedup_keys, parse_cursor, KindFilter, ScanFilter};
    use ringlet_types::ValueKind;

    #[test]
    fn keys_dedup_keeps_the_first_of_each_in_order() {
        let mut v: Vec<Vec<u8>> = [&b"b"[..], b"a", b"b", b"c", b"a"]
            .iter()
            .map(|k| k.to_vec())
            .collect();
        dedup_keys(&mut v);
        assert_eq!(v, vec![b"b".to_vec(), b"a".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn scan_type_filter_names_as_type_does() {
        assert_eq!(
            KindFilter::named(b"HASH"),
            KindFilter::Only(ValueKind::Record)
        );
        assert_eq!(
            KindFilter::named(b"string\0x"),
            KindFilter::Only(ValueKind::String)
        );
        assert_eq!(KindFilter::named(b"list"), KindFilter::Nothing);
        assert_eq!(KindFilter::named(b""), KindFilter::Nothing);
        let nothing = ScanFilter {
            pattern: None,
            kind: KindFilter::Nothing,
        };
        assert!(!nothing.keeps_name(b"k"));
        let pat = ScanFilter {
            pattern: Some(b"user:*"),
            kind: KindFilter::Any,
        };
        assert!(pat.keeps_name(b"user:1") && !pat.keeps_name(b"item:1"));
    }

    #[test]
    fn cursor_parses_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"+5"), Some(5));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b" 1"), None);
        assert_eq!(parse_cursor(b"1x"), None);
        assert_eq!(parse_cursor(b"abc"), None);
        assert_eq!(parse_cursor(b"+"), None);
        assert_eq!(parse_cursor(b"99999999999999999999"), None);
    }
}
