//! Keyspace commands (Redis `db.c`, `expire.c`): DEL UNLINK EXISTS TYPE EXPIRE PEXPIRE
//! EXPIREAT PEXPIREAT TTL PTTL PERSIST KEYS SCAN RANDOMKEY.

use super::string::{engine_error, read_kind};
use super::{is, parse_i64, Ctx};
use crate::glob::string_match;
use crate::reply::{errors, Reply};
use bytes::Bytes;
use ringlet_engine::{Expiry, ReadOutcome, SetOptions};
use ringlet_types::limits;

/// DEL and UNLINK (UNLINK frees in the background in Redis; the engine frees in O(1) anyway).
pub fn del(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let mut n = 0;
    for key in &argv[1..] {
        // Only live keys are erased: deleting a missing key would still leave a tombstone.
        if engine.get(key, now).is_some() {
            match engine.delete(key, None, now) {
                Ok(Some(_)) => n += 1,
                Ok(None) => {}
                Err(e) => return engine_error(e),
            }
        }
    }
    Reply::Int(n)
}

pub fn exists(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let mut n = 0;
    for key in &argv[1..] {
        if read_kind(ctx, key).is_some() {
            n += 1;
        }
    }
    Reply::Int(n)
}

pub fn type_(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match read_kind(ctx, argv[1]) {
        Some(kind) => Reply::simple(kind.type_name()),
        None => Reply::simple("none"),
    }
}

/// The absolute expiry of a live key: `Err(())` if missing, `Ok(None)` if it has no TTL.
fn expiry_of(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<u64>, ()> {
    ctx.scratch.clear();
    match ctx.reader.get(key, ctx.now_ms, ctx.scratch) {
        ReadOutcome::Hit { expire_at_ms, .. } => Ok(expire_at_ms),
        ReadOutcome::Miss => Err(()),
        ReadOutcome::Retry => match ctx.shared.db.lock().get(key, ctx.now_ms) {
            Some(e) => Ok(e.expire_at_ms),
            None => Err(()),
        },
    }
}

fn ttl_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], ms: bool) -> Reply {
    match expiry_of(ctx, argv[1]) {
        Err(()) => Reply::Int(-2),
        Ok(None) => Reply::Int(-1),
        Ok(Some(at)) => {
            let ttl = at.saturating_sub(ctx.now_ms) as i64;
            Reply::Int(if ms { ttl } else { (ttl + 500) / 1000 })
        }
    }
}

/// EXPIRETIME / PEXPIRETIME: the absolute expiry (unix s, rounded as Redis does, or ms); -1
/// without a TTL, -2 for a missing key.
fn expiretime_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], ms: bool) -> Reply {
    match expiry_of(ctx, argv[1]) {
        Err(()) => Reply::Int(-2),
        Ok(None) => Reply::Int(-1),
        Ok(Some(at)) => {
            let at = at as i64;
            Reply::Int(if ms { at } else { (at + 500) / 1000 })
        }
    }
}

pub fn expiretime(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    expiretime_generic(ctx, argv, false)
}

pub fn pexpiretime(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    expiretime_generic(ctx, argv, true)
}

pub fn ttl(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    ttl_generic(ctx, argv, false)
}

pub fn pttl(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    ttl_generic(ctx, argv, true)
}

pub fn persist(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    match engine.get(argv[1], now) {
        Some(e) if e.expire_at_ms.is_some() => {
            match engine.set_expiry(argv[1], Expiry::Persist, now) {
                Ok(_) => Reply::Int(1),
                Err(e) => engine_error(e),
            }
        }
        _ => Reply::Int(0),
    }
}

/// `expireGenericCommand`: `basetime` is now for EXPIRE/PEXPIRE and 0 for the *AT forms;
/// the arguments are parsed by `ringlet_command::args`, as in the cluster front.
fn expire_generic(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    basetime: i64,
    seconds: bool,
    cmd: &str,
) -> Reply {
    let args = match ringlet_command::args::expire_args(argv, basetime, seconds, cmd) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let when = args.at_ms;
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let Some(entry) = engine.get(argv[1], now) else {
        return Reply::Int(0);
    };
    if !args.allows(entry.expire_at_ms) {
        return Reply::Int(0);
    }
    let result = if when <= now as i64 {
        engine.delete(argv[1], None, now).map(|_| true)
    } else {
        engine.set_expiry(argv[1], Expiry::At(when as u64), now)
    };
    match result {
        Ok(_) => Reply::Int(1),
        Err(e) => engine_error(e),
    }
}

pub fn expire(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms as i64;
    expire_generic(ctx, argv, now, true, "expire")
}

pub fn pexpire(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms as i64;
    expire_generic(ctx, argv, now, false, "pexpire")
}

pub fn expireat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    expire_generic(ctx, argv, 0, true, "expireat")
}

pub fn pexpireat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    expire_generic(ctx, argv, 0, false, "pexpireat")
}

/// Keys visited per engine-lock hold while KEYS walks the keyspace, so a KEYS on a large
/// node lets other workers' writes in between batches.
const KEYS_BATCH: usize = 1024;

pub fn keys(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let pattern = argv[1];
    let all = pattern == b"*";
    let mut out = Vec::new();
    let mut batch = Vec::with_capacity(KEYS_BATCH);
    let mut cursor = 0u64;
    // Bounded: the engine's cursor returns to 0 after one pass over the index.
    loop {
        batch.clear();
        cursor = ctx
            .shared
            .db
            .lock()
            .scan_reaping(cursor, KEYS_BATCH, ctx.now_ms, &mut batch);
        for k in batch.drain(..) {
            if all || string_match(pattern, &k, false) {
                out.push(Reply::Bulk(Bytes::from(k)));
            }
        }
        if cursor == 0 {
            break;
        }
    }
    // The engine may return a key twice across an index upsize; KEYS must not.
    dedup_keys(&mut out);
    Reply::Array(out)
}

fn dedup_keys(out: &mut Vec<Reply>) {
    let mut seen = std::collections::HashSet::with_capacity(out.len());
    out.retain(|r| match r {
        Reply::Bulk(b) => seen.insert(b.clone()),
        _ => true,
    });
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

pub fn scan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let Some(cursor) = parse_cursor(argv[1]) else {
        return Reply::err("ERR invalid cursor");
    };
    let mut count: i64 = 10;
    let mut pattern: Option<&[u8]> = None;
    let mut type_filter: Option<&[u8]> = None;
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - i;
        if is(argv[i], "count") && more >= 2 {
            match parse_i64(argv[i + 1]) {
                Some(c) if c >= 1 => count = c,
                Some(_) => return Reply::err(errors::SYNTAX),
                None => return Reply::err(errors::NOT_INTEGER),
            }
        } else if is(argv[i], "match") && more >= 2 {
            pattern = if argv[i + 1] == b"*" {
                None
            } else {
                Some(argv[i + 1])
            };
        } else if is(argv[i], "type") && more >= 2 {
            type_filter = Some(argv[i + 1]);
        } else {
            return Reply::err(errors::SYNTAX);
        }
        i += 2;
    }
    // Bound one call's work whatever COUNT says (Redis does not; we must not stall a worker).
    let count = count.min(limits::ARRAY_ITEMS_MAX as i64) as usize;
    let mut keys = Vec::new();
    let next = ctx
        .shared
        .db
        .lock()
        .scan_reaping(cursor, count, ctx.now_ms, &mut keys);
    // TYPE compares with the key's own kind (a record is a `hash`, as TYPE answers); an
    // unknown type name matches nothing, as in Redis 7.0.
    let mut items = Vec::with_capacity(keys.len());
    for k in keys {
        if !pattern.is_none_or(|p| string_match(p, &k, false)) {
            continue;
        }
        if let Some(t) = type_filter {
            if !read_kind(ctx, &k).is_some_and(|kind| is(super::cstr(t), kind.type_name())) {
                continue;
            }
        }
        items.push(Reply::Bulk(Bytes::from(k)));
    }
    Reply::Array(vec![
        Reply::bulk(next.to_string().as_bytes()),
        Reply::Array(items),
    ])
}

pub fn randomkey(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    let seed = ctx.shared.next_random();
    match ctx.shared.db.lock().random_key(seed, ctx.now_ms) {
        Some(k) => Reply::Bulk(Bytes::from(k)),
        None => Reply::Nil,
    }
}

/// TOUCH key [key ...]: how many exist (reading a key is all a touch does here: the engine's
/// eviction clocks are updated by reads).
pub fn touch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    exists(ctx, argv)
}

/// RENAME and RENAMENX: the value moves with its TTL and memgest (Redis keeps the TTL too).
fn rename_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], nx: bool) -> Reply {
    let (src, dst) = (argv[1], argv[2]);
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let Some(e) = engine.get(src, now) else {
        return Reply::err("ERR no such key");
    };
    if src == dst {
        return if nx { Reply::Int(0) } else { Reply::ok() };
    }
    if nx && engine.get(dst, now).is_some() {
        return Reply::Int(0);
    }
    // The new key keeps the value's memgest, TTL and kind (a record stays a record).
    let opts = SetOptions {
        memgest: e.memgest,
        expiry: e.expire_at_ms.map_or(Expiry::Persist, Expiry::At),
        kind: e.kind,
        ..SetOptions::default()
    };
    if let Err(err) = engine.set(dst, &e.value, &opts, now) {
        return engine_error(err);
    }
    if let Err(err) = engine.delete(src, None, now) {
        return engine_error(err);
    }
    if nx {
        Reply::Int(1)
    } else {
        Reply::ok()
    }
}

pub fn rename(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    rename_generic(ctx, argv, false)
}

pub fn renamenx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    rename_generic(ctx, argv, true)
}

/// COPY source destination [DB 0] [REPLACE]: one database, so DB must be 0.
pub fn copy(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let mut replace = false;
    let mut i = 3;
    while i < argv.len() {
        if is(argv[i], "replace") {
            replace = true;
            i += 1;
        } else if is(argv[i], "db") && i + 1 < argv.len() {
            if let Some(e) = copy_db_error(argv[i + 1]) {
                return Reply::err(e);
            }
            i += 2;
        } else {
            return Reply::err(errors::SYNTAX);
        }
    }
    let (src, dst) = (argv[1], argv[2]);
    if src == dst {
        return Reply::err("ERR source and destination objects are the same");
    }
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let Some(e) = engine.get(src, now) else {
        return Reply::Int(0);
    };
    if !replace && engine.get(dst, now).is_some() {
        return Reply::Int(0);
    }
    // The new key keeps the value's memgest, TTL and kind (a record stays a record).
    let opts = SetOptions {
        memgest: e.memgest,
        expiry: e.expire_at_ms.map_or(Expiry::Persist, Expiry::At),
        kind: e.kind,
        ..SetOptions::default()
    };
    match engine.set(dst, &e.value, &opts, now) {
        Ok(_) => Reply::Int(1),
        Err(err) => engine_error(err),
    }
}

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

/// OBJECT ENCODING key.
pub fn object_encoding(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match ctx.shared.db.lock().get(argv[2], ctx.now_ms) {
        Some(e) if e.kind == ringlet_types::ValueKind::Record => {
            Reply::bulk(record_encoding(&e.value, &ctx.shared.hash_encoding).as_bytes())
        }
        Some(e) => Reply::bulk(string_encoding(&e.value).as_bytes()),
        None => Reply::Nil,
    }
}

/// OBJECT REFCOUNT key: 1 for a record, see [`string_refcount`] for strings.
pub fn object_refcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match ctx.shared.db.lock().get(argv[2], ctx.now_ms) {
        Some(e) if e.kind == ringlet_types::ValueKind::Record => Reply::Int(1),
        Some(e) => Reply::Int(string_refcount(&e.value)),
        None => Reply::Nil,
    }
}

pub fn object_help(_ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    super::connection::help("OBJECT", OBJECT_HELP)
}

#[cfg(test)]
mod tests {
    use super::parse_cursor;

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
