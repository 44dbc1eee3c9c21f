//! String commands (Redis `t_string.c`): GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX MGET
//! MSET MSETNX INCR DECR INCRBY DECRBY INCRBYFLOAT APPEND STRLEN GETRANGE SETRANGE.
//!
//! Reads (GET, MGET, STRLEN, GETRANGE) go through the worker's lock-free engine reader and
//! fall back to the locked engine only when the reader reports `Retry`. Everything that
//! writes holds the engine lock for the whole command, so read-modify-write commands (INCR,
//! SET ... GET, MSETNX) are atomic exactly as in single-threaded Redis.

use super::{is, parse_i64, Ctx};
use crate::reply::{errors, Reply};
use crate::shared::Stats;
use bytes::Bytes;
use ringlet_engine::{Engine, Entry, Expiry, ReadOutcome, SetOptions};
use ringlet_types::{limits, ValueKind};

/// The Redis reply for an engine error.
pub fn engine_error(e: ringlet_engine::Error) -> Reply {
    use ringlet_engine::Error as E;
    match e {
        E::KeyTooLarge { .. } => Reply::err_owned(format!(
            "ERR key exceeds the maximum allowed size ({} bytes)",
            limits::KEY_BYTES_MAX
        )),
        E::ValueTooLarge { .. } => Reply::err(STRING_TOO_LONG),
        E::NoSpace => Reply::err("OOM command not allowed when used memory > 'maxmemory'."),
        E::NotInteger => Reply::err(errors::NOT_INTEGER),
        E::NotFloat => Reply::err(errors::NOT_FLOAT),
        E::Overflow => Reply::err(errors::OVERFLOW),
        E::WrongType => Reply::err(errors::WRONGTYPE),
        other => Reply::err_owned(format!("ERR engine: {other}")),
    }
}

/// `checkStringLength`'s text; our limit is `limits::VALUE_BYTES_MAX`.
const STRING_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// The live entry of `key` if it holds a string (`Ok(None)`: missing); a record is
/// Redis's WRONGTYPE. Every string command that reads under the engine lock goes through
/// here, so none of them turns a record into a string by accident.
pub fn string_entry(engine: &Engine, key: &[u8], now: u64) -> Result<Option<Entry>, Reply> {
    match engine.get(key, now) {
        Some(e) if e.kind == ValueKind::Record => Err(Reply::err(errors::WRONGTYPE)),
        e => Ok(e),
    }
}

/// Read `key` into `ctx.scratch` without the engine lock: whether it was found, and its
/// kind (string commands answer WRONGTYPE for a record).
pub fn read_kind(ctx: &mut Ctx<'_>, key: &[u8]) -> Option<ValueKind> {
    ctx.scratch.clear();
    let hit = match ctx.reader.get(key, ctx.now_ms, ctx.scratch) {
        ReadOutcome::Hit { kind, .. } => Some(kind),
        ReadOutcome::Miss => None,
        ReadOutcome::Retry => {
            Stats::add(&ctx.shared.stats.reader_retries, 1);
            match ctx.shared.db.lock().get(key, ctx.now_ms) {
                Some(e) => {
                    ctx.scratch.clear();
                    ctx.scratch.extend_from_slice(&e.value);
                    Some(e.kind)
                }
                None => None,
            }
        }
    };
    let stats = &ctx.shared.stats;
    Stats::add(
        if hit.is_some() {
            &stats.keyspace_hits
        } else {
            &stats.keyspace_misses
        },
        1,
    );
    hit
}

/// [`read_kind`] for string commands: `Ok(true)` with the value in `ctx.scratch`, `Ok(false)`
/// if missing, WRONGTYPE for a record.
pub fn read(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, Reply> {
    match read_kind(ctx, key) {
        Some(ValueKind::String) => Ok(true),
        Some(ValueKind::Record) => Err(Reply::err(errors::WRONGTYPE)),
        None => Ok(false),
    }
}

pub fn get(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match read(ctx, argv[1]) {
        Ok(true) => Reply::bulk(ctx.scratch),
        Ok(false) => Reply::Nil,
        Err(e) => e,
    }
}

pub fn mget(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let mut out = Vec::with_capacity(argv.len() - 1);
    for key in &argv[1..] {
        // Redis's MGET answers nil for a key holding another type.
        out.push(match read_kind(ctx, key) {
            Some(ValueKind::String) => Reply::bulk(ctx.scratch),
            _ => Reply::Nil,
        });
    }
    Reply::Array(out)
}

pub fn strlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match read(ctx, argv[1]) {
        Ok(true) => Reply::Int(ctx.scratch.len() as i64),
        Ok(false) => Reply::Int(0),
        Err(e) => e,
    }
}

pub fn getrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let (Some(mut start), Some(mut end)) = (parse_i64(argv[2]), parse_i64(argv[3])) else {
        return Reply::err(errors::NOT_INTEGER);
    };
    match read(ctx, argv[1]) {
        Ok(true) => {}
        Ok(false) => return Reply::Bulk(Bytes::new()),
        Err(e) => return e,
    }
    let len = ctx.scratch.len() as i64;
    if start < 0 && end < 0 && start > end {
        return Reply::Bulk(Bytes::new());
    }
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return Reply::Bulk(Bytes::new());
    }
    Reply::bulk(&ctx.scratch[start as usize..=end as usize])
}

// ---- SET and its family -------------------------------------------------------------------

const NX: u32 = 1;
const XX: u32 = 1 << 1;
const GET: u32 = 1 << 2;
const KEEPTTL: u32 = 1 << 3;
const PERSIST: u32 = 1 << 4;
const EX: u32 = 1 << 5;
const PX: u32 = 1 << 6;
const EXAT: u32 = 1 << 7;
const PXAT: u32 = 1 << 8;
const ANY_EXPIRE: u32 = EX | PX | EXAT | PXAT;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Set,
    GetEx,
}

/// `parseExtendedStringArgumentsOrReply`: options of SET (from argv[3]) and GETEX (argv[2]).
/// Options are compared as C strings (`opt[2] == '\0'`), so `nx\0junk` is NX, as in Redis.
fn parse_options<'a>(
    argv: &[&'a [u8]],
    first: usize,
    kind: Kind,
) -> Result<(u32, Option<&'a [u8]>), Reply> {
    let mut flags = 0u32;
    let mut expire = None;
    let mut j = first;
    while j < argv.len() {
        let opt = super::cstr(argv[j]);
        let next = argv.get(j + 1).copied();
        let is_set = kind == Kind::Set;
        if is(opt, "nx") && flags & XX == 0 && is_set {
            flags |= NX;
        } else if is(opt, "xx") && flags & NX == 0 && is_set {
            flags |= XX;
        } else if is(opt, "get") && is_set {
            flags |= GET;
        } else if is(opt, "keepttl") && flags & (PERSIST | ANY_EXPIRE) == 0 && is_set {
            flags |= KEEPTTL;
        } else if is(opt, "persist") && !is_set && flags & (ANY_EXPIRE | KEEPTTL) == 0 {
            flags |= PERSIST;
        } else if is(opt, "ex")
            && flags & (KEEPTTL | PERSIST | EXAT | PX | PXAT) == 0
            && next.is_some()
        {
            flags |= EX;
            expire = next;
            j += 1;
        } else if is(opt, "px")
            && flags & (KEEPTTL | PERSIST | EX | EXAT | PXAT) == 0
            && next.is_some()
        {
            flags |= PX;
            expire = next;
            j += 1;
        } else if is(opt, "exat")
            && flags & (KEEPTTL | PERSIST | EX | PX | PXAT) == 0
            && next.is_some()
        {
            flags |= EXAT;
            expire = next;
            j += 1;
        } else if is(opt, "pxat")
            && flags & (KEEPTTL | PERSIST | EX | EXAT | PX) == 0
            && next.is_some()
        {
            flags |= PXAT;
            expire = next;
            j += 1;
        } else {
            return Err(Reply::err(errors::SYNTAX));
        }
        j += 1;
    }
    Ok((flags, expire))
}

fn expire_time_error(cmd: &str) -> Reply {
    Reply::err_owned(format!("ERR invalid expire time in '{cmd}' command"))
}

/// `getExpireMillisecondsOrReply`: the absolute unix ms of an EX/PX/EXAT/PXAT argument.
/// Redis adds `now` with C wrap-around and then rejects a non-positive result; we do the same
/// with explicit wrapping arithmetic.
fn expire_ms(arg: &[u8], flags: u32, now_ms: u64, cmd: &str) -> Result<i64, Reply> {
    let mut ms = parse_i64(arg).ok_or(Reply::err(errors::NOT_INTEGER))?;
    let seconds = flags & (EX | EXAT) != 0;
    if ms <= 0 || (seconds && ms > i64::MAX / 1000) {
        return Err(expire_time_error(cmd));
    }
    if seconds {
        ms *= 1000;
    }
    if flags & (EX | PX) != 0 {
        ms = ms.wrapping_add(now_ms as i64);
    }
    if ms <= 0 {
        return Err(expire_time_error(cmd));
    }
    Ok(ms)
}

/// `setGenericCommand`: the shared body of SET, SETNX, SETEX, PSETEX, GETSET.
#[allow(clippy::too_many_arguments)]
fn set_generic(
    ctx: &mut Ctx<'_>,
    flags: u32,
    key: &[u8],
    value: &[u8],
    expire: Option<&[u8]>,
    cmd: &str,
    ok_reply: Reply,
    abort_reply: Reply,
) -> Reply {
    let when = match expire {
        Some(arg) => match expire_ms(arg, flags, ctx.now_ms, cmd) {
            Ok(ms) => Some(ms),
            Err(e) => return e,
        },
        None => None,
    };
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    // Only NX/XX/GET need the current value; a plain SET does not pay for reading it.
    let old = if flags & (NX | XX | GET) != 0 {
        match engine.get(key, now) {
            // SET replaces a value of any kind; only SET ... GET of a record is WRONGTYPE.
            Some(e) if e.kind == ValueKind::Record && flags & GET != 0 => {
                return Reply::err(errors::WRONGTYPE)
            }
            e => e,
        }
    } else {
        None
    };
    let found = old.is_some();
    if (flags & NX != 0 && found) || (flags & XX != 0 && !found) {
        return if flags & GET != 0 {
            old_reply(old)
        } else {
            abort_reply
        };
    }
    let expiry = match when {
        Some(ms) => Expiry::At(ms as u64),
        None if flags & KEEPTTL != 0 => Expiry::Keep,
        None => Expiry::Persist,
    };
    let opts = SetOptions {
        expiry,
        ..SetOptions::default()
    };
    if let Err(e) = engine.set(key, value, &opts, now) {
        return engine_error(e);
    }
    if flags & GET != 0 {
        old_reply(old)
    } else {
        ok_reply
    }
}

fn old_reply(old: Option<ringlet_engine::Entry>) -> Reply {
    old.map_or(Reply::Nil, |e| Reply::Bulk(Bytes::from(e.value)))
}

pub fn set(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match parse_options(argv, 3, Kind::Set) {
        Ok((flags, expire)) => set_generic(
            ctx,
            flags,
            argv[1],
            argv[2],
            expire,
            "set",
            Reply::ok(),
            Reply::Nil,
        ),
        Err(e) => e,
    }
}

pub fn setnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    set_generic(
        ctx,
        NX,
        argv[1],
        argv[2],
        None,
        "setnx",
        Reply::Int(1),
        Reply::Int(0),
    )
}

pub fn setex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    set_generic(
        ctx,
        EX,
        argv[1],
        argv[3],
        Some(argv[2]),
        "setex",
        Reply::ok(),
        Reply::Nil,
    )
}

pub fn psetex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    set_generic(
        ctx,
        PX,
        argv[1],
        argv[3],
        Some(argv[2]),
        "psetex",
        Reply::ok(),
        Reply::Nil,
    )
}

pub fn getset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    set_generic(
        ctx,
        GET,
        argv[1],
        argv[2],
        None,
        "getset",
        Reply::ok(),
        Reply::Nil,
    )
}

pub fn getdel(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let old = match string_entry(&engine, argv[1], now) {
        Ok(Some(e)) => e,
        Ok(None) => return Reply::Nil,
        Err(e) => return e,
    };
    if let Err(e) = engine.delete(argv[1], None, now) {
        return engine_error(e);
    }
    Reply::Bulk(Bytes::from(old.value))
}

pub fn getex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let (flags, expire) = match parse_options(argv, 2, Kind::GetEx) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let cur = match string_entry(&engine, argv[1], now) {
        Ok(Some(e)) => e,
        Ok(None) => return Reply::Nil,
        Err(e) => return e,
    };
    let when = match expire {
        Some(arg) => match expire_ms(arg, flags, now, "getex") {
            Ok(ms) => Some(ms),
            Err(e) => return e,
        },
        None => None,
    };
    let result = if let Some(ms) = when {
        // A time at or before now erases the key (the engine applies `At(past)` as a delete).
        engine.set_expiry(argv[1], Expiry::At(ms as u64), now)
    } else if flags & PERSIST != 0 {
        engine.set_expiry(argv[1], Expiry::Persist, now)
    } else {
        Ok(true)
    };
    match result {
        Ok(_) => Reply::Bulk(Bytes::from(cur.value)),
        Err(e) => engine_error(e),
    }
}

pub fn mset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    if argv.len() & 1 == 0 {
        return super::arity_error("mset");
    }
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    for pair in argv[1..].chunks(2) {
        if let Err(e) = engine.set(pair[0], pair[1], &SetOptions::default(), now) {
            return engine_error(e);
        }
    }
    Reply::ok()
}

pub fn msetnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    if argv.len() & 1 == 0 {
        return super::arity_error("msetnx");
    }
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    if argv[1..]
        .chunks(2)
        .any(|pair| engine.get(pair[0], now).is_some())
    {
        return Reply::Int(0);
    }
    for pair in argv[1..].chunks(2) {
        if let Err(e) = engine.set(pair[0], pair[1], &SetOptions::default(), now) {
            return engine_error(e);
        }
    }
    Reply::Int(1)
}

// ---- counters ------------------------------------------------------------------------------

/// Write `value` keeping the key's TTL (a new key gets none).
pub(super) fn write_keep_ttl(
    engine: &mut Engine,
    key: &[u8],
    value: &[u8],
    now: u64,
) -> Result<(), Reply> {
    let opts = SetOptions {
        expiry: Expiry::Keep,
        ..SetOptions::default()
    };
    engine
        .set(key, value, &opts, now)
        .map(|_| ())
        .map_err(engine_error)
}

/// `incrDecrCommand`: the stored value must parse with `string2ll`; overflow is an error.
fn incr_generic(ctx: &mut Ctx<'_>, key: &[u8], delta: i64) -> Reply {
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let cur = match string_entry(&engine, key, now) {
        Err(e) => return e,
        Ok(e) => e,
    };
    let cur = match cur {
        Some(e) => match parse_i64(&e.value) {
            Some(v) => v,
            None => return Reply::err(errors::NOT_INTEGER),
        },
        None => 0,
    };
    let Some(new) = cur.checked_add(delta) else {
        return Reply::err(errors::OVERFLOW);
    };
    match write_keep_ttl(&mut engine, key, new.to_string().as_bytes(), now) {
        Ok(()) => Reply::Int(new),
        Err(e) => e,
    }
}

pub fn incr(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    incr_generic(ctx, argv[1], 1)
}

pub fn decr(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    incr_generic(ctx, argv[1], -1)
}

pub fn incrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match parse_i64(argv[2]) {
        Some(d) => incr_generic(ctx, argv[1], d),
        None => Reply::err(errors::NOT_INTEGER),
    }
}

pub fn decrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match parse_i64(argv[2]) {
        Some(i64::MIN) => Reply::err("ERR decrement would overflow"),
        Some(d) => incr_generic(ctx, argv[1], -d),
        None => Reply::err(errors::NOT_INTEGER),
    }
}

/// INCRBYFLOAT in x87 `long double`, formatted with `%.17Lf` and trailing zeros cut, exactly
/// as Redis does it (see `ldouble.c`): clients compare the returned text.
pub fn incrbyfloat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let cur = match string_entry(&engine, argv[1], now) {
        Ok(e) => e.map(|e| e.value),
        Err(e) => return e,
    };
    let new = match crate::ldouble::incr_by_float(cur.as_deref(), argv[2]) {
        Ok(v) => v,
        Err(crate::ldouble::FloatError::NotFloat) => return Reply::err(errors::NOT_FLOAT),
        Err(crate::ldouble::FloatError::NanOrInfinity) => {
            return Reply::err("ERR increment would produce NaN or Infinity")
        }
    };
    match write_keep_ttl(&mut engine, argv[1], &new, now) {
        Ok(()) => Reply::Bulk(Bytes::from(new)),
        Err(e) => e,
    }
}

pub fn append(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let cur_len = match string_entry(&engine, argv[1], now) {
        Ok(e) => e.map_or(0, |e| e.value.len()),
        Err(e) => return e,
    };
    if cur_len + argv[2].len() > limits::VALUE_BYTES_MAX as usize {
        return Reply::err(STRING_TOO_LONG);
    }
    match engine.append(argv[1], argv[2], now) {
        Ok(n) => Reply::Int(n as i64),
        Err(e) => engine_error(e),
    }
}

pub fn setrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let Some(offset) = parse_i64(argv[2]) else {
        return Reply::err(errors::NOT_INTEGER);
    };
    if offset < 0 {
        return Reply::err("ERR offset is out of range");
    }
    let value = argv[3];
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    let cur = match string_entry(&engine, argv[1], now) {
        Ok(e) => e,
        Err(e) => return e,
    };
    let olen = cur.as_ref().map_or(0, |e| e.value.len());
    if value.is_empty() {
        return Reply::Int(olen as i64);
    }
    // `checkStringLength(offset, len)` with our value limit (Redis: proto-max-bulk-len).
    if offset as u64 + value.len() as u64 > limits::VALUE_BYTES_MAX as u64 {
        return Reply::err(STRING_TOO_LONG);
    }
    let offset = offset as usize;
    let mut new = cur.map(|e| e.value).unwrap_or_default();
    if new.len() < offset + value.len() {
        new.resize(offset + value.len(), 0);
    }
    new[offset..offset + value.len()].copy_from_slice(value);
    match write_keep_ttl(&mut engine, argv[1], &new, now) {
        Ok(()) => Reply::Int(new.len() as i64),
        Err(e) => e,
    }
}
