//! String commands (Redis `t_string.c`).
//!
//! **Written once for both fronts**, over [`Keyspace`] (cmd/keyspace_api.rs): SETNX SETEX
//! PSETEX GETSET GETDEL GETEX MSETNX INCR DECR INCRBY DECRBY INCRBYFLOAT APPEND STRLEN
//! GETRANGE SUBSTR SETRANGE. The single node runs them over the engine (`local!` in
//! cmd/mod.rs), a cluster node over the replica core (crates/cluster/src/resp.rs).
//! Read-modify-writes are one [`Keyspace::update`]: atomic under the engine lock on a single
//! node, under the key's lock at its coordinator in a cluster, as single-threaded Redis.
//!
//! **The single node's own**: GET, MGET, SET and MSET, its hot paths — GET and MGET through
//! the worker's lock-free reader (the engine lock only on `Retry`), plain SET batched under
//! one lock hold by conn.rs ([`set_plain`]). A cluster node serves its own versions of these
//! four (its fast read path and blind-write resolution differ).

use super::keyspace_api::{Change, Keyspace, Put, Ttl, Value};
use super::{parse_i64, Ctx};
use crate::reply::{errors, Reply};
use bytes::Bytes;
use ringlet_command::args::{
    expire_at_ms, getex_args, set_args, Cond, GetExExpiry, SetArgs, SetExpiry,
};
use ringlet_engine::{Engine, Expiry, SetOptions};
use ringlet_types::{limits, ValueKind};

pub use super::keyspace_api::{engine_error, STRING_TOO_LONG};

/// Read `key` into `ctx.scratch` without the engine lock: whether it was found, and its
/// kind (string commands answer WRONGTYPE for a record).
pub fn read_kind(ctx: &mut Ctx<'_>, key: &[u8]) -> Option<ValueKind> {
    super::keyspace_api::read_into(ctx.shared, ctx.reader, key, ctx.now_ms, ctx.scratch)
        .map(|(kind, _)| kind)
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

pub fn set(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match set_args(argv, ctx.now_ms) {
        Ok(args) => set_generic(ctx, args, argv[1], argv[2], Reply::ok(), Reply::Nil),
        Err(e) => e,
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

// ---- written once for both fronts, over `Keyspace` ----------------------------------------

/// A handler over a [`Keyspace`]: the reply, or an error reply (both are answered; a cluster
/// front keeps them apart for its accounting).
pub type KsResult = Result<Reply, Reply>;

/// The string value of a read (`None`: missing); WRONGTYPE for a record.
async fn read_string<K: Keyspace>(ks: &K, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
    Ok(Value::string(ks.read(key).await?)?.map(|v| v.bytes))
}

pub async fn strlen<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let n = read_string(ks, argv[1]).await?.map_or(0, |v| v.len());
    Ok(Reply::Int(n as i64))
}

/// Redis's GETRANGE of `v`: negative indexes count from the end, then clamp.
pub fn get_range(v: &[u8], mut start: i64, mut end: i64) -> &[u8] {
    let len = v.len() as i64;
    if start < 0 && end < 0 && start > end {
        return &[];
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
        return &[];
    }
    &v[start as usize..=end as usize]
}

/// GETRANGE and SUBSTR.
pub async fn getrange<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let (Some(start), Some(end)) = (parse_i64(argv[2]), parse_i64(argv[3])) else {
        return Err(Reply::err(errors::NOT_INTEGER));
    };
    let v = read_string(ks, argv[1]).await?.unwrap_or_default();
    Ok(Reply::bulk(get_range(&v, start, end)))
}

pub async fn setnx<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let put = Put::string(argv[2].to_vec(), Ttl::Clear);
    let stored = ks.write(argv[1], put, Cond::Nx).await?;
    Ok(Reply::Int(i64::from(stored)))
}

/// SETEX (seconds) and PSETEX (ms): `key ttl value`.
async fn setex_generic<K: Keyspace>(ks: &K, argv: &[&[u8]], seconds: bool, cmd: &str) -> KsResult {
    let at = expire_at_ms(argv[2], seconds, true, ks.now_ms(), cmd)?;
    let put = Put::string(argv[3].to_vec(), Ttl::At(at));
    ks.write(argv[1], put, Cond::Always).await?;
    Ok(Reply::ok())
}

pub async fn setex<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    setex_generic(ks, argv, true, "setex").await
}

pub async fn psetex<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    setex_generic(ks, argv, false, "psetex").await
}

/// GETSET: SET ... GET without options (the TTL is cleared, as Redis does).
pub async fn getset<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let put = Put::string(argv[2].to_vec(), Ttl::Clear);
    ks.update(argv[1], |cur| {
        let old = Value::string(cur)?;
        Ok((Change::Put(put), bulk_or_nil(old)))
    })
    .await
}

fn bulk_or_nil(v: Option<Value>) -> Reply {
    v.map_or(Reply::Nil, |v| Reply::Bulk(Bytes::from(v.bytes)))
}

pub async fn getdel<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    ks.update(argv[1], |cur| match Value::string(cur)? {
        Some(v) => Ok((Change::Delete, bulk_or_nil(Some(v)))),
        None => Ok((Change::Nothing, Reply::Nil)),
    })
    .await
}

/// GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]: syntax first; the time is checked
/// only once the key exists (a missing key answers nil even with `EX 0`, as Redis 7 does).
pub async fn getex<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let opts = getex_args(argv)?;
    let now = ks.now_ms();
    ks.update(argv[1], |cur| {
        let Some(v) = Value::string(cur)? else {
            return Ok((Change::Nothing, Reply::Nil));
        };
        let change = match opts.expiry(now)? {
            GetExExpiry::Unchanged => Change::Nothing,
            // A time at or before now erases the key.
            GetExExpiry::At(ms) if ms <= now => Change::Delete,
            GetExExpiry::At(ms) => Change::Expire(Some(ms)),
            GetExExpiry::Persist if v.expire_at_ms.is_none() => Change::Nothing,
            GetExExpiry::Persist => Change::Expire(None),
        };
        Ok((change, bulk_or_nil(Some(v))))
    })
    .await
}

/// MSETNX: all keys or none, atomically (one slot in a cluster). A key named twice takes its
/// last value, as in Redis.
pub async fn msetnx<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    if argv.len() & 1 == 0 {
        return Err(super::arity_error("msetnx"));
    }
    let keys: Vec<&[u8]> = argv[1..].iter().step_by(2).copied().collect();
    ks.update_many(&keys, |cur| {
        if cur.iter().any(Option::is_some) {
            return Ok((Vec::new(), Reply::Int(0)));
        }
        let changes = argv[2..]
            .iter()
            .step_by(2)
            .enumerate()
            .map(|(i, v)| (i, Change::Put(Put::string(v.to_vec(), Ttl::Clear))))
            .collect();
        Ok((changes, Reply::Int(1)))
    })
    .await
}

/// `incrDecrCommand`: the stored value must parse with `string2ll`; overflow is an error;
/// the TTL is kept. Also the native INCRBY of a cluster node.
///
/// # Errors
/// Redis's texts (not an integer, overflow, WRONGTYPE) and the keyspace's.
pub async fn incr_by<K: Keyspace>(ks: &K, key: &[u8], delta: i64) -> Result<i64, Reply> {
    ks.update(key, |cur| {
        let cur = match Value::string(cur)? {
            Some(v) => parse_i64(&v.bytes).ok_or(Reply::err(errors::NOT_INTEGER))?,
            None => 0,
        };
        let new = cur.checked_add(delta).ok_or(Reply::err(errors::OVERFLOW))?;
        let put = Put::string(new.to_string().into_bytes(), Ttl::Keep);
        Ok((Change::Put(put), new))
    })
    .await
}

pub async fn incr<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    Ok(Reply::Int(incr_by(ks, argv[1], 1).await?))
}

pub async fn decr<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    Ok(Reply::Int(incr_by(ks, argv[1], -1).await?))
}

pub async fn incrby<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let d = parse_i64(argv[2]).ok_or(Reply::err(errors::NOT_INTEGER))?;
    Ok(Reply::Int(incr_by(ks, argv[1], d).await?))
}

pub async fn decrby<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let d = match parse_i64(argv[2]) {
        Some(i64::MIN) => return Err(Reply::err("ERR decrement would overflow")),
        Some(d) => -d,
        None => return Err(Reply::err(errors::NOT_INTEGER)),
    };
    Ok(Reply::Int(incr_by(ks, argv[1], d).await?))
}

/// INCRBYFLOAT in x87 `long double`, formatted with `%.17Lf` and trailing zeros cut, exactly
/// as Redis does it (see `ldouble.c`): clients compare the returned text. The TTL is kept.
pub async fn incrbyfloat<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    ks.update(argv[1], |cur| {
        let cur = Value::string(cur)?;
        let new = match crate::ldouble::incr_by_float(cur.as_ref().map(|v| &v.bytes[..]), argv[2]) {
            Ok(v) => v,
            Err(crate::ldouble::FloatError::NotFloat) => return Err(Reply::err(errors::NOT_FLOAT)),
            Err(crate::ldouble::FloatError::NanOrInfinity) => {
                return Err(Reply::err("ERR increment would produce NaN or Infinity"))
            }
        };
        let reply = Reply::bulk(&new);
        Ok((Change::Put(Put::string(new, Ttl::Keep)), reply))
    })
    .await
}

/// APPEND: the new length; the TTL is kept.
pub async fn append<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let suffix = argv[2];
    ks.update(argv[1], |cur| {
        let mut v = Value::string(cur)?.map(|v| v.bytes).unwrap_or_default();
        if v.len() + suffix.len() > limits::VALUE_BYTES_MAX as usize {
            return Err(Reply::err(STRING_TOO_LONG));
        }
        v.extend_from_slice(suffix);
        let n = v.len() as i64;
        Ok((Change::Put(Put::string(v, Ttl::Keep)), Reply::Int(n)))
    })
    .await
}

/// SETRANGE key offset value: the new length; an empty value changes nothing (and creates no
/// key); the TTL is kept.
pub async fn setrange<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let offset = parse_i64(argv[2]).ok_or(Reply::err(errors::NOT_INTEGER))?;
    if offset < 0 {
        return Err(Reply::err("ERR offset is out of range"));
    }
    let patch = argv[3];
    ks.update(argv[1], |cur| {
        let cur = Value::string(cur)?;
        let olen = cur.as_ref().map_or(0, |v| v.bytes.len());
        if patch.is_empty() {
            return Ok((Change::Nothing, Reply::Int(olen as i64)));
        }
        // `checkStringLength(offset, len)` with our value limit (Redis: proto-max-bulk-len).
        if offset as u64 + patch.len() as u64 > u64::from(limits::VALUE_BYTES_MAX) {
            return Err(Reply::err(STRING_TOO_LONG));
        }
        let offset = offset as usize;
        let mut v = cur.map(|v| v.bytes).unwrap_or_default();
        if v.len() < offset + patch.len() {
            v.resize(offset + patch.len(), 0);
        }
        v[offset..offset + patch.len()].copy_from_slice(patch);
        let n = v.len() as i64;
        Ok((Change::Put(Put::string(v, Ttl::Keep)), Reply::Int(n)))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::get_range;

    #[test]
    fn get_range_matches_redis() {
        let v = b"This is a string";
        assert_eq!(get_range(v, 0, 3), b"This");
        assert_eq!(get_range(v, -3, -1), b"ing");
        assert_eq!(get_range(v, 0, -1), v);
        assert_eq!(get_range(v, 10, 100), b"string");
        assert_eq!(get_range(v, 5, 3), b"");
        assert_eq!(get_range(v, -1, -5), b"");
        assert_eq!(get_range(v, -100, 2), b"Thi");
        assert_eq!(get_range(b"", 0, -1), b"");
    }
}
