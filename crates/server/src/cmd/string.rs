//! String commands (Redis `t_string.c`).
//!
//! **Written once for both fronts**, over [`Keyspace`] (cmd/keyspace_api.rs): GET MGET SET
//! MSET SETNX SETEX PSETEX GETSET GETDEL GETEX MSETNX INCR DECR INCRBY DECRBY INCRBYFLOAT
//! APPEND STRLEN GETRANGE SUBSTR SETRANGE. The single node runs them over the engine
//! (`local!` in cmd/mod.rs), a cluster node over the replica core
//! (crates/cluster/src/resp.rs). Read-modify-writes are one [`Keyspace::update`]: atomic
//! under the engine lock on a single node, under the key's lock at its coordinator in a
//! cluster, as single-threaded Redis. What differs between the fronts lives in the two
//! keyspaces: a cluster's reads take its fast path, its plain writes resolve an ambiguous
//! outcome by value.
//!
//! **Batched beside the handlers**: plain GETs and SETs that a connection pipelines are
//! answered by the single node's `conn.rs` batch (the worker's lock-free reader; one engine
//! lock hold across a run of SETs, [`set_plain`]) and the cluster front's concurrent GET
//! runs; those answer exactly as [`get`] and [`set`] do.

use super::keyspace_api::{Change, Keyspace, Memgest, Put, Ttl, Value};
use super::parse_i64;
use crate::reply::{errors, Reply};
use bytes::Bytes;
use ringlet_command::args::{expire_at_ms, getex_args, set_args, Cond, GetExExpiry, SetExpiry};
use ringlet_engine::Engine;
use ringlet_types::{limits, ValueKind};

pub use super::keyspace_api::{engine_error, STRING_TOO_LONG};

// ---- written once for both fronts, over `Keyspace` ----------------------------------------

/// A handler over a [`Keyspace`]: the reply, or an error reply (both are answered; a cluster
/// front keeps them apart for its accounting).
pub type KsResult = Result<Reply, Reply>;

/// `set_plain`: `SET key value` without options, under an engine lock the caller already
/// holds (the single node's batched request path in `conn.rs` holds one across a run of
/// pipelined SETs): exactly what [`set`] does for that form, with the reply left to the
/// caller (`+OK` on success). The batch takes only requests whose checks cannot fail, so it
/// answers as the handler would.
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

/// GET: the string, nil if missing, WRONGTYPE for a record. (The single node's batch and the
/// cluster's pipelined run answer plain GETs themselves, from the same reads.)
pub async fn get<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    Ok(bulk_or_nil(Value::string(ks.read(argv[1]).await?)?))
}

/// MGET: nil for a missing key and for a key holding another type, as Redis answers; the
/// keys read together (one engine lock hold on a single node, one slot in a cluster).
pub async fn mget<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let values = ks.read_many(&argv[1..]).await?;
    Ok(Reply::Array(
        values
            .into_iter()
            .map(|v| match v {
                Some(v) if v.kind == ValueKind::String => Reply::Bulk(Bytes::from(v.bytes)),
                _ => Reply::Nil,
            })
            .collect(),
    ))
}

/// `setGenericCommand`: SET with every option Redis 7 has — NX/XX, GET, EX/PX/EXAT/PXAT/
/// KEEPTTL — and Ringlet's `MEMGEST name` (a cluster's; a single node refuses it). The
/// options are parsed by `ringlet_command::args`, so both fronts accept and refuse exactly
/// what Redis does. Without GET it is one conditional write; with GET, a read-modify-write
/// (the old value is answered whether or not the condition let the write happen; a record
/// under the key is WRONGTYPE, any other SET replaces a value of any kind).
pub async fn set<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let args = set_args(argv, ks.now_ms())?;
    let memgest = match args.memgest {
        Some(name) => Memgest::Id(ks.memgest_id(name).await?),
        None => Memgest::Own,
    };
    let ttl = match args.expiry {
        SetExpiry::At(ms) => Ttl::At(ms),
        SetExpiry::Keep => Ttl::Keep,
        SetExpiry::Clear => Ttl::Clear,
    };
    let put = Put {
        value: argv[2].to_vec(),
        kind: ValueKind::String,
        ttl,
        memgest,
    };
    if !args.get {
        let stored = ks.write(argv[1], put, args.cond).await?;
        return Ok(if stored { Reply::ok() } else { Reply::Nil });
    }
    let cond = args.cond;
    ks.update(argv[1], |cur| {
        let old = Value::string(cur)?;
        let holds = match cond {
            Cond::Always => true,
            Cond::Nx => old.is_none(),
            Cond::Xx => old.is_some(),
        };
        let change = if holds {
            Change::Put(put)
        } else {
            Change::Nothing
        };
        Ok((change, bulk_or_nil(old)))
    })
    .await
}

/// MSET: every pair, in order (one slot in a cluster).
pub async fn mset<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    if argv.len() < 3 || argv.len() & 1 == 0 {
        return Err(super::arity_error("mset"));
    }
    let pairs: Vec<(&[u8], &[u8])> = argv[1..].chunks(2).map(|p| (p[0], p[1])).collect();
    ks.write_many(&pairs).await?;
    Ok(Reply::ok())
}

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
