//! String commands (Redis `t_string.c`): GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX MGET
//! MSET MSETNX INCR DECR INCRBY DECRBY INCRBYFLOAT APPEND STRLEN GETRANGE SETRANGE.
//!
//! Reads (GET, MGET, STRLEN, GETRANGE) go through the worker's lock-free engine reader and
//! fall back to the locked engine only when the reader reports `Retry`. Everything that
//! writes holds the engine lock for the whole command, so read-modify-write commands (INCR,
//! SET ... GET, MSETNX) are atomic exactly as in single-threaded Redis.

use super::{parse_i64, Ctx};
use crate::reply::{errors, Reply};
use crate::shared::Stats;
use bytes::Bytes;
use ringlet_command::args::{
    expire_at_ms, getex_args, set_args, Cond, GetExExpiry, SetArgs, SetExpiry,
};
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

// SET's and GETEX's options are parsed by `ringlet_command::args`, shared with the cluster
// front, so both accept and refuse exactly what Redis does.

/// `setGenericCommand`: the shared body of SET, SETNX, SETEX, PSETEX, GETSET, with the
/// options already parsed and the expiry resolved.
fn set_generic(
    ctx: &mut Ctx<'_>,
    args: SetArgs<'_>,
    key: &[u8],
    value: &[u8],
    ok_reply: Reply,
    abort_reply: Reply,
) -> Reply {
    if args.memgest.is_some() {
        // A single node keeps one copy of every key: a memgest is chosen in a cluster.
        return ringlet_command::table::cluster_only_error("set ... memgest");
    }
    let now = ctx.now_ms;
    let mut engine = ctx.shared.db.lock();
    // Only NX/XX/GET need the current value; a plain SET does not pay for reading it.
    let old = if args.cond != Cond::Always || args.get {
        match engine.get(key, now) {
            // SET replaces a value of any kind; only SET ... GET of a record is WRONGTYPE.
            Some(e) if e.kind == ValueKind::Record && args.get => {
                return Reply::err(errors::WRONGTYPE)
            }
            e => e,
        }
    } else {
        None
    };
    let found = old.is_some();
    if (args.cond == Cond::Nx && found) || (args.cond == Cond::Xx && !found) {
        return if args.get {
            old_reply(old)
        } else {
            abort_reply
        };
    }
    let expiry = match args.expiry {
        SetExpiry::At(ms) => Expiry::At(ms),
        SetExpiry::Keep => Expiry::Keep,
        SetExpiry::Clear => Expiry::Persist,
    };
    let opts = SetOptions {
        expiry,
        ..SetOptions::default()
    };
    // The replaced value, when wanted, was read above: the engine need not copy it again.
    if let Err(e) = engine.set_discarding_old(key, value, &opts, now) {
        return engine_error(e);
    }
    if args.get {
        old_reply(old)
    } else {
        ok_reply
    }
}

/// `SET key value` without options, under an engine lock the caller already holds (the
/// batched request path in `conn.rs` holds one across a run of pipelined SETs): exactly what
/// [`set_generic`] does for that form, with the reply left to the caller (`+OK` on success).
///
/// # Errors
/// The Redis error reply for an engine error (size limits, OOM).
pub fn set_plain(
    engine: &mut Engine,
    key: &[u8],
    hash: u64,
    value: &[u8],
    now: u64,
) -> Result<(), Reply> {
    // `hash` is the key's `key_hash`, computed once by the batch for its prefetch; the
    // engine's plain-SET path looks the key up once (`Engine::set_plain_hashed`).
    engine
        .set_plain_hashed(key, hash, value, now)
        .map_err(engine_error)
}

fn old_reply(old: Option<ringlet_engine::Entry>) -> Reply {
    old.map_or(Reply::Nil, |e| Reply::Bulk(Bytes::from(e.value)))
}

/// Options of the SET family's fixed forms (SETNX, SETEX, GETSET, ...).
const PLAIN: SetArgs<'static> = SetArgs {
    cond: Cond::Always,
    get: false,
    expiry: SetExpiry::Clear,
    memgest: None,
};

pub fn set(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match set_args(argv, ctx.now_ms) {
        Ok(args) => set_generic(ctx, args, argv[1], argv[2], Reply::ok(), Reply::Nil),
        Err(e) => e,
    }
}

pub fn setnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let args = SetArgs {
        cond: Cond::Nx,
        ..PLAIN
    };
    set_generic(ctx, args, argv[1], argv[2], Reply::Int(1), Reply::Int(0))
}

/// SETEX (seconds) and PSETEX (ms): `key ttl value`.
fn setex_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], seconds: bool, cmd: &str) -> Reply {
    match expire_at_ms(argv[2], seconds, true, ctx.now_ms, cmd) {
        Ok(ms) => {
            let args = SetArgs {
                expiry: SetExpiry::At(ms),
                ..PLAIN
            };
            set_generic(ctx, args, argv[1], argv[3], Reply::ok(), Reply::Nil)
        }
        Err(e) => e,
    }
}

pub fn setex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    setex_generic(ctx, argv, true, "setex")
}

pub fn psetex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    setex_generic(ctx, argv, false, "psetex")
}

pub fn getset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let args = SetArgs { get: true, ..PLAIN };
    set_generic(ctx, args, argv[1], argv[2], Reply::ok(), Reply::Nil)
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
    let opts = match getex_args(argv) {
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
    let result = match opts.expiry(now) {
        // A time at or before now erases the key (the engine applies `At(past)` as a delete).
        Ok(GetExExpiry::At(ms)) => engine.set_expiry(argv[1], Expiry::At(ms), now),
        Ok(GetExExpiry::Persist) => engine.set_expiry(argv[1], Expiry::Persist, now),
        Ok(GetExExpiry::Unchanged) => Ok(true),
        Err(e) => return e,
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
