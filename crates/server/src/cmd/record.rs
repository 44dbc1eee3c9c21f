//! Records (KELI): Redis's hash commands (HSET … HSTRLEN, HSCAN, HRANDFIELD), `LINK`,
//! `RECORD SET` and `CHASE`. The semantics are `ringlet-record`'s pure functions; the
//! drivers here — fetch, decode, apply, store, reply — are **written once for both fronts**
//! over [`Keyspace`] (cmd/keyspace_api.rs): a single node runs them over its engine
//! (`local!` in cmd/mod.rs), a cluster node over the replica core (crates/cluster/src/resp.rs).
//!
//! A write is one [`Keyspace::update`], so read-modify-write commands (HSET, HINCRBY, LINK
//! ADD) are atomic as in single-threaded Redis: under the engine lock on a single node,
//! under the key's guard at its coordinator in a cluster. Reads (HGET, HGETALL, LINK GET,
//! HSCAN ...) are one [`Keyspace::read`] (the lock-free reader on a single node). A record
//! keeps its memgest and TTL across writes (Redis keeps a hash's TTL when fields change);
//! emptying it deletes the key, as Redis deletes an empty hash. A key holding a string
//! answers WRONGTYPE. New links get location hints from [`Keyspace::link_hints`]: each
//! front's own (a single node: any target, by tag; a cluster node: targets it coordinates).
//!
//! **CHASE stays per front** ([`walk_local`] here, `chase_walk` in the cluster): its reads
//! are what differs — a single node follows each link's hint with a validated one-sided
//! read, a cluster node groups each level by coordinator and asks the others with one
//! `RECORDS` call per node — and what they share is already one piece, the sans-I/O
//! `ringlet_record::chase::Chase` walk and [`chase_reply`].

use super::keyspace_api::{Change, Keyspace, LinkHints, Memgest, Put, Ttl, Value};
use super::string::KsResult;
use super::Ctx;
use crate::reply::{errors, Reply};
use bytes::Bytes;
use ringlet_record::hash::{Applied, EncodedWrite, Out, Write};
use ringlet_record::record::FieldRef;
use ringlet_record::{chase, Record};
use ringlet_types::ValueKind;
use std::time::{Duration, Instant};

/// Longest a CHASE may run on one node before it answers with what it has (`time`): the
/// engine lock is taken per batch, never across the whole walk, but a client still waits.
pub const CHASE_TIME_MAX: Duration = Duration::from_millis(100);

/// The record in `bytes` (a record key's value); bytes that do not decode (never written
/// by Ringlet) are an error naming the key's state.
fn decode(bytes: &[u8]) -> Result<Record, Reply> {
    Record::decode(bytes)
        .map_err(|err| Reply::err_owned(format!("ERR stored record does not decode: {err}")))
}

/// The encoded record of a read (`Ok(None)`: missing key); a string is WRONGTYPE.
fn encoded_of(v: Option<&Value>) -> Result<Option<&[u8]>, Reply> {
    match v {
        None => Ok(None),
        Some(v) if v.kind == ValueKind::String => Err(Reply::err(errors::WRONGTYPE)),
        Some(v) => Ok(Some(&v.bytes)),
    }
}

/// Store `bytes` as the key's record, keeping its memgest and TTL (a new key: the default
/// memgest, no TTL).
fn put_record(bytes: Vec<u8>) -> Change {
    Change::Put(Put {
        value: bytes,
        kind: ValueKind::Record,
        ttl: Ttl::Keep,
        memgest: Memgest::Own,
    })
}

/// A record command's output as a reply (HGETALL is a map in RESP3, as Redis sends it).
pub fn out_reply(name: &str, out: Out) -> Reply {
    match out {
        Out::Ok => Reply::ok(),
        Out::Int(n) => Reply::Int(n),
        Out::Bulk(Some(v)) => Reply::Bulk(Bytes::from(v)),
        Out::Bulk(None) => Reply::Nil,
        Out::Array(items) if name.eq_ignore_ascii_case("hgetall") => Reply::Map(
            items
                .chunks(2)
                .map(|p| {
                    (
                        bulk_or_nil(p[0].clone()),
                        bulk_or_nil(p.get(1).cloned().flatten()),
                    )
                })
                .collect(),
        ),
        Out::Array(items) => Reply::Array(items.into_iter().map(bulk_or_nil).collect()),
        Out::Err(e) => Reply::err_owned(e),
    }
}

fn bulk_or_nil(v: Option<Vec<u8>>) -> Reply {
    v.map_or(Reply::Nil, |v| Reply::Bulk(Bytes::from(v)))
}

/// HGET, HMGET, HLEN, HEXISTS, HSTRLEN, HGETALL, HKEYS and HVALS answered from the
/// encoded record in place (`record::scan_each`), without building a `Record`: the reads a
/// client-side traversal makes most, where decoding every link of a large link list for
/// one field was most of the cost, and the reads of a big hash, where decoding allocated
/// per field. `None`: not one of these (or not their arity, or bytes that do not scan);
/// the caller applies the command as usual, which also produces every error.
pub fn read_encoded(argv: &[&[u8]], encoded: &[u8]) -> Option<Out> {
    let is = |name: &[u8], argc: usize| argv[0].eq_ignore_ascii_case(name) && argv.len() == argc;
    let hmget = argv[0].eq_ignore_ascii_case(b"hmget") && argv.len() >= 3;
    let one = is(b"hget", 3) || is(b"hexists", 3) || is(b"hstrlen", 3);
    let (names, values) = (
        is(b"hgetall", 2) || is(b"hkeys", 2),
        is(b"hgetall", 2) || is(b"hvals", 2),
    );
    if !one && !hmget && !is(b"hlen", 2) && !names && !values {
        return None;
    }
    use ringlet_record::record::{field_count, name_order, scan_each};
    if is(b"hlen", 2) {
        let n = field_count(encoded).ok()?;
        return Some(Out::Int(i64::try_from(n).ok()?));
    }
    if names || values {
        // HGETALL, HKEYS, HVALS: every field in record order, as the decoded record
        // iterates them, without building it (a `Field` and an index entry per field).
        let n = usize::try_from(field_count(encoded).ok()?).ok()?;
        let mut out = Vec::with_capacity(n * (usize::from(names) + usize::from(values)));
        scan_each(encoded, |name, f| {
            if names {
                out.push(Some(name.to_vec()));
            }
            if values {
                out.push(Some(f.display()));
            }
            true
        })
        .ok()?;
        return Some(Out::Array(out));
    }
    if one {
        // One field: the walk stops at it.
        let mut found = None;
        scan_each(encoded, |n, f| {
            if ringlet_record::record::same_name(n, argv[2]) {
                found = Some(f);
            }
            found.is_none()
        })
        .ok()?;
        return Some(if is(b"hget", 3) {
            Out::Bulk(found.map(|f| f.display()))
        } else if is(b"hexists", 3) {
            Out::Int(i64::from(found.is_some()))
        } else {
            Out::Int(found.map_or(0, |f| f.display().len() as i64))
        });
    }
    // HMGET: one walk, each asked field looked up by binary search.
    let mut asked: Vec<(&[u8], usize)> =
        argv[2..].iter().enumerate().map(|(i, f)| (*f, i)).collect();
    asked.sort_unstable_by(|a, b| name_order(a.0, b.0).then(a.1.cmp(&b.1)));
    let mut out: Vec<Option<Vec<u8>>> = vec![None; asked.len()];
    scan_each(encoded, |n, f| {
        let start = asked.partition_point(|(a, _)| name_order(a, n).is_lt());
        for &(_, i) in asked[start..].iter().take_while(|(a, _)| *a == n) {
            out[i] = Some(f.display());
        }
        true
    })
    .ok()?;
    Some(Out::Array(out))
}

/// Run a record command (`apply`: `hash_apply` or `link::apply`) on `key`: a read for the
/// read-only ones (`write` false), else one [`Keyspace::update`] that stores what `apply`
/// decided.
async fn run<K: Keyspace>(
    ks: &K,
    key: &[u8],
    argv: &[&[u8]],
    write: bool,
    apply: fn(&[&[u8]], Option<&Record>) -> Applied,
) -> KsResult {
    let name = std::str::from_utf8(argv[0]).unwrap_or("");
    if !write {
        let cur = ks.read(key).await?;
        let Some(encoded) = encoded_of(cur.as_ref())? else {
            return Ok(out_reply(name, apply(argv, None).reply));
        };
        // HGET/HMGET answer from the encoded bytes in place.
        if let Some(out) = read_encoded(argv, encoded) {
            return Ok(out_reply(name, out));
        }
        let rec = decode(encoded)?;
        return Ok(out_reply(name, apply(argv, Some(&rec)).reply));
    }
    let is_link = argv[0].eq_ignore_ascii_case(b"link");
    let link_field = link_write_field(argv);
    let hints = ks.link_hints();
    if link_field.is_some() {
        // The targets' buckets requested before the keyspace's lock: their misses overlap
        // each other and the wait for it.
        for t in argv.get(4..).unwrap_or_default() {
            hints.prefetch(t);
        }
    }
    ks.update(key, |cur| {
        let encoded = encoded_of(cur.as_ref())?;
        // LINK SET/ADD straight on the encoded record (no decode, no allocation per link):
        // what a bulk load's pass 2 is made of. Declined cases (errors, hint-less old links,
        // ...) take the general path below, which gives the same result.
        if link_field.is_some() {
            let spliced = ringlet_record::link::apply_encoded(argv, encoded, |t| hints.hint(t));
            if let Some((out, bytes)) = spliced {
                return Ok((put_record(bytes), out_reply(name, out)));
            }
        }
        // A hash write on the encoding: the fields it names decoded, the rest copied as
        // bytes (a write to a big hash used to decode every field).
        if !is_link {
            if let Some(a) = ringlet_record::hash::apply_encoded(argv, encoded, apply) {
                let change = match a.write {
                    EncodedWrite::None => Change::Nothing,
                    EncodedWrite::Store(bytes) => put_record(bytes),
                    EncodedWrite::Delete => Change::Delete,
                };
                return Ok((change, out_reply(name, a.reply)));
            }
        }
        let rec = encoded.map(decode).transpose()?;
        // LINK edits the decoded record in place (it is not used again); the hash
        // commands' `apply` reads it by reference.
        let mut applied = if is_link {
            ringlet_record::link::apply_owned(argv, rec)
        } else {
            apply(argv, rec.as_ref())
        };
        if let (Some(field), Write::Store(r)) = (link_field, &mut applied.write) {
            fill_hints(&hints, r, field);
        }
        let change = match applied.write {
            Write::None => Change::Nothing,
            Write::Store(r) => put_record(r.encode()),
            Write::Delete => Change::Delete,
        };
        Ok((change, out_reply(name, applied.reply)))
    })
    .await
}

/// The field a `LINK SET|ADD key field ...` writes (its links get location hints).
pub fn link_write_field<'a>(argv: &[&'a [u8]]) -> Option<&'a [u8]> {
    let sub = argv.get(1)?;
    let writes = argv[0].eq_ignore_ascii_case(b"link")
        && (sub.eq_ignore_ascii_case(b"set") || sub.eq_ignore_ascii_case(b"add"));
    writes.then(|| argv.get(3).copied()).flatten()
}

/// Location hints for the links of `field` without one, in two passes over the targets so
/// that their cache misses overlap, as the batched GET path does (`crate::conn`): prefetch
/// every target's home bucket, then resolve each (a single node locates it by its tag: the
/// bucket holds all a hint needs). A `LINK ADD` of 100 targets, or a loader's chunk, paid
/// two misses per target (bucket, then the target's entry for the key), the largest part of
/// a chunked load's node time (BENCHMARKS.md, "Data hints and index pre-sizing").
fn fill_hints(hints: &impl LinkHints, r: &mut Record, field: &[u8]) {
    if let Some(ringlet_record::Field::Links(ls)) = r.get(field) {
        for l in ls.iter().filter(|l| l.hint.is_none()) {
            hints.prefetch(&l.target);
        }
    }
    r.fill_hints(field, |t| hints.hint(t));
}

/// The record hint naming engine position `p` on `node` in `epoch`.
pub fn hint_of(p: ringlet_engine::read::Position, node: u32, epoch: u64) -> ringlet_record::Hint {
    ringlet_record::Hint {
        node,
        epoch,
        table: p.layout,
        entry: p.entry,
        data: p.data.map(|d| ringlet_record::DataHint {
            location: d.location,
            crc: d.crc,
            memgest: d.memgest,
        }),
    }
}

/// HSET HSETNX HMSET HGET HMGET HGETALL HDEL HLEN HEXISTS HKEYS HVALS HINCRBY HINCRBYFLOAT
/// HSTRLEN.
pub async fn hash<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let mut buf = [0u8; NAME_BYTES_MAX];
    let write = ringlet_record::hash::is_write(lowercase(argv[0], &mut buf));
    run(ks, argv[1], argv, write, hash_apply).await
}

/// Longest command or subcommand name [`lowercase`] handles (`hincrbyfloat` is 12).
const NAME_BYTES_MAX: usize = 16;

/// `name` in lowercase, in `buf` (no allocation on the per-request path); `""` for a name
/// longer than [`NAME_BYTES_MAX`] or not UTF-8, which names no record command.
fn lowercase<'a>(name: &[u8], buf: &'a mut [u8; NAME_BYTES_MAX]) -> &'a str {
    let Some(out) = buf.get_mut(..name.len()) else {
        return "";
    };
    out.copy_from_slice(name);
    out.make_ascii_lowercase();
    std::str::from_utf8(out).unwrap_or("")
}

/// `ringlet_record::hash::apply`, except HINCRBYFLOAT, whose sum and text come from the same
/// x87 long-double arithmetic as INCRBYFLOAT (`crate::ldouble`): Redis formats a hash's float
/// like a string's (`10.5 + 0.1 + 5e3` is `5010.60000000000000009`, not `5010.6`). Both fronts
/// use this.
pub fn hash_apply(argv: &[&[u8]], rec: Option<&Record>) -> Applied {
    use crate::ldouble::{incr_by_float, FloatError};
    if !argv[0].eq_ignore_ascii_case(b"hincrbyfloat") || argv.len() != 4 {
        return ringlet_record::hash::apply(argv, rec);
    }
    let fail = |e: &str| Applied {
        reply: Out::Err(e.to_string()),
        write: Write::None,
    };
    // Redis checks the increment first, then the stored value, then the sum.
    match incr_by_float(None, argv[3]) {
        Err(FloatError::NotFloat) => return fail(errors::NOT_FLOAT),
        Err(FloatError::NanOrInfinity) => return fail("ERR value is NaN or Infinity"),
        Ok(_) => {}
    }
    let cur = rec.and_then(|r| r.get(argv[2])).map(|f| f.display());
    let new = match incr_by_float(cur.as_deref(), argv[3]) {
        Ok(v) => v,
        Err(FloatError::NotFloat) => return fail("ERR hash value is not a float"),
        Err(FloatError::NanOrInfinity) => {
            return fail("ERR increment would produce NaN or Infinity")
        }
    };
    let set: [&[u8]; 4] = [b"HSET", argv[1], argv[2], &new];
    let stored = ringlet_record::hash::apply(&set, rec);
    Applied {
        reply: Out::Bulk(Some(new)),
        write: stored.write,
    }
}

/// LINK SET|ADD|GET|DEL key field ...
pub async fn link<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    let Some(key) = ringlet_record::link::key(argv) else {
        return Err(Reply::err(errors::SYNTAX));
    };
    let mut buf = [0u8; NAME_BYTES_MAX];
    let write = ringlet_record::link::is_write_subcommand(lowercase(argv[1], &mut buf));
    run(ks, key, argv, write, ringlet_record::link::apply).await
}

/// `RECORD SET key ATTR|LINK|LINKS|LINKSPACKED|DEL ...` (`ringlet_record::put`): several fields,
/// links and link lists written in one command, straight into the encoding
/// (`record::put_fields`: old fields copied as bytes, no `Record`, no allocation per link),
/// every new link with its location hint. What `ringlet load` writes each item with. The
/// arguments are checked before the key is read (a bad spec answers its error, not
/// WRONGTYPE).
pub async fn record_set<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    use ringlet_record::PutValue;
    let specs = ringlet_record::put::parse(argv).map_err(Reply::err_owned)?;
    let key = argv[2];
    let hints = ks.link_hints();
    // The record's own bucket too: `update` looks the key up first thing under the lock
    // (a loader's item is a random key, its bucket a miss), and asked for first, its miss
    // overlaps the targets' (docs/design/loader.md, "Loader CPU (session 17)").
    hints.prefetch(key);
    // Each target's bucket requested now, and what finding its hint needs kept (its key
    // hash: hashed once per link, not for the prefetch and again for the hint), by the
    // address of the target's bytes, which `put_fields` hands back to the hint closure.
    let links = specs
        .iter()
        .map(|(_, v)| match v {
            PutValue::Bytes(_) => 0,
            PutValue::Link(_) => 1,
            PutValue::Links(ts) => ts.len(),
            PutValue::Packed(p) => p.len(),
            PutValue::Del => 0,
        })
        .sum();
    let mut kept: Vec<(usize, usize, u64)> = Vec::with_capacity(links);
    let mut keep = |t: &[u8]| kept.push((t.as_ptr() as usize, t.len(), hints.prefetch_keep(t)));
    for (_, v) in &specs {
        match v {
            PutValue::Bytes(_) | PutValue::Del => {}
            PutValue::Link(t) => keep(t),
            PutValue::Links(ts) => ts.iter().for_each(|t| keep(t)),
            PutValue::Packed(p) => p.iter().for_each(&mut keep),
        }
    }
    // `put_fields` asks in spec order except for fields it replaces in place (old field
    // order): a target that is not the next one kept (same bytes, same address) is hashed
    // again, so the answer is the same either way.
    let mut next = 0;
    let mut hint = |t: &[u8]| match kept.get(next) {
        Some(&(at, len, k)) if at == t.as_ptr() as usize && len == t.len() => {
            next += 1;
            hints.hint_kept(t, k)
        }
        _ => hints.hint(t),
    };
    ks.update(key, |cur| {
        let encoded = encoded_of(cur.as_ref())?;
        match ringlet_record::record::put_fields(encoded, &specs, &mut hint) {
            // `DEL`s removed every field: the key goes, as an emptied hash does (or stays
            // missing).
            Ok((n, bytes)) if ringlet_record::record::is_empty_encoding(&bytes) => {
                let change = if encoded.is_some() {
                    Change::Delete
                } else {
                    Change::Nothing
                };
                Ok((change, Reply::Int(n)))
            }
            Ok((n, bytes)) => Ok((put_record(bytes), Reply::Int(n))),
            Err(ringlet_record::RecordError::TooLarge { .. }) => {
                Err(Reply::err("ERR record exceeds maximum allowed size"))
            }
            Err(e) => Err(Reply::err_owned(format!(
                "ERR stored record does not decode: {e}"
            ))),
        }
    })
    .await
}

/// CHASE key field [field ...] [DEPTH n] [LIMIT n] [FIELDS attr ...]: breadth-first over the
/// named link fields, every hop a local lookup (one batch per depth under the lock).
pub fn chase_cmd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match chase::Chase::parse(argv) {
        Ok(walk) => chase_reply(walk_local(ctx.shared, walk, ctx.now_ms)),
        Err(e) => Reply::err_owned(e),
    }
}

/// Drive a CHASE over this node's engine, bounded by [`CHASE_TIME_MAX`]. Shared by RESP
/// CHASE and the native CHASE frame.
///
/// Items are read by the lock-free reader, not under the engine lock (a deep walk no longer
/// stalls every writer): each hop is first one validated read at the location hint of the
/// link that led to it (`read_entry_at`: same table, checksum, index re-check, full key, so
/// a stale hint never yields another item), then a lookup by key; a read the reader cannot
/// validate (torn by a concurrent write) is done under the lock. Each item is read whole at
/// one instant, as a client-side walk would read it; a level is not one snapshot.
pub fn walk_local(
    shared: &crate::shared::Shared,
    mut walk: chase::Chase,
    now: u64,
) -> chase::ChaseReply {
    let deadline = Instant::now() + CHASE_TIME_MAX;
    let reader = shared.db.reader();
    let mut buf = Vec::new();
    // Bounded by DEPTH + 1 levels (each advance settles one level).
    while walk.advance() {
        if Instant::now() >= deadline {
            walk.timed_out();
            break;
        }
        // A level's first batch is its keys; with CHUNKED, later batches of the same level
        // are the continuation items the batch before linked.
        for i in walk.level_start()..walk.level().len() {
            let hint = walk.level_hint(i);
            let found = read_record(shared, &reader, &walk.level()[i], hint, now, &mut buf);
            walk.feed_encoded_at(i, found.then_some(buf.as_slice()));
        }
    }
    walk.finish()
}

/// Read `key` into `buf` for a CHASE hop; `true` if it holds a record. See [`walk_local`].
fn read_record(
    shared: &crate::shared::Shared,
    reader: &ringlet_engine::Reader,
    key: &[u8],
    hint: Option<ringlet_record::Hint>,
    now: u64,
    buf: &mut Vec<u8>,
) -> bool {
    use ringlet_engine::ReadOutcome;
    if key.len() > ringlet_types::limits::KEY_BYTES_MAX as usize {
        return false;
    }
    let is_record =
        |r: ReadOutcome| matches!(r, ReadOutcome::Hit { kind, .. } if kind == ValueKind::Record);
    if let Some(h) = hint {
        let pos = ringlet_engine::read::Position {
            layout: h.table,
            entry: h.entry,
            data: h.data.map(|d| ringlet_engine::read::Direct {
                location: d.location,
                crc: d.crc,
                memgest: d.memgest,
            }),
        };
        let hash = ringlet_engine::hash::key_hash(key);
        // Err: stale (the table changed, the entry moved or is another key's): look it up.
        if let Ok(r) =
            ringlet_engine::read::read_entry_at(&reader.view(), key, hash, pos, now, None, buf)
        {
            if !matches!(r, ReadOutcome::Retry) {
                return is_record(r);
            }
        }
    }
    match reader.get(key, now, buf) {
        ReadOutcome::Retry => match shared.db.lock().get(key, now) {
            Some(e) if e.kind == ValueKind::Record => {
                buf.clear();
                buf.extend_from_slice(&e.value);
                true
            }
            _ => false,
        },
        r => is_record(r),
    }
}

/// A [`chase::Chase`] from a native CHASE frame (`Err`: RESP CHASE's error text for the
/// same arguments).
pub fn chase_from_frame(
    c: &ringlet_codec::native::ChaseRequest<'_>,
) -> Result<chase::Chase, String> {
    chase::Chase::new(
        c.key.to_vec(),
        c.links.iter().map(<[u8]>::to_vec).collect(),
        u32::from(c.depth),
        c.limit,
        c.fields.map(|f| f.iter().map(<[u8]>::to_vec).collect()),
    )
}

/// Encode a finished CHASE as a native CHASE response. Entries beyond the frame payload
/// bound ([`ringlet_codec::native::CHASE_PAYLOAD_BYTES_MAX`]) are cut and the stop becomes
/// `bytes`; `Err` if not even the first entry fits (the caller answers TOO_LARGE).
pub fn encode_chase_native<S: ringlet_codec::Sink + ?Sized>(
    out: &mut S,
    request_id: u64,
    epoch: ringlet_types::Epoch,
    reply: &chase::ChaseReply,
) -> Result<(), &'static str> {
    use ringlet_codec::native::{ChaseResponseWriter as W, ChaseStop, CHASE_PAYLOAD_BYTES_MAX};
    if let Some(first) = reply.entries.first() {
        if W::entry_bytes(&first.key, &first.attrs).saturating_add(5) > CHASE_PAYLOAD_BYTES_MAX {
            return Err("the first CHASE entry exceeds the reply bound");
        }
    }
    let mut w = W::begin(out, request_id, epoch);
    let mut stop = match reply.stop {
        chase::Stop::Complete => ChaseStop::Complete,
        chase::Stop::Limit => ChaseStop::Limit,
        chase::Stop::Bytes => ChaseStop::Bytes,
        chase::Stop::Time => ChaseStop::Time,
    };
    for e in &reply.entries {
        let more = W::entry_bytes(&e.key, &e.attrs);
        if w.payload_bytes(out).saturating_add(more) > CHASE_PAYLOAD_BYTES_MAX {
            stop = ChaseStop::Bytes;
            break;
        }
        w.push(out, &e.key, e.depth, &e.attrs);
    }
    if w.finish(out, stop) {
        Ok(())
    } else {
        Err("CHASE response lost bytes")
    }
}

/// CHASE's reply: the entries in BFS order, each `[key, depth, [attr, value, ...]]`, then
/// the stop status (`complete`, `limit`, `bytes`, `time`) as a bulk string. Shared with the
/// cluster front through [`chase_reply_parts`].
pub fn chase_reply(r: chase::ChaseReply) -> Reply {
    let mut items: Vec<Reply> = Vec::with_capacity(r.entries.len() + 1);
    // Built straight from the entries (no intermediate flat list per entry).
    for e in r.entries {
        let mut attrs = Vec::with_capacity(e.attrs.len() * 2);
        for (k, v) in e.attrs {
            attrs.push(Reply::Bulk(Bytes::from(k)));
            attrs.push(Reply::Bulk(Bytes::from(v)));
        }
        items.push(Reply::Array(vec![
            Reply::Bulk(Bytes::from(e.key)),
            Reply::Int(i64::from(e.depth)),
            Reply::Array(attrs),
        ]));
    }
    items.push(Reply::Bulk(Bytes::from_static(r.stop.as_str().as_bytes())));
    Reply::Array(items)
}

/// One CHASE entry: key, depth, and the flat `attr, value, ...` list.
pub type ChaseEntry = (Vec<u8>, i64, Vec<Vec<u8>>);

/// The parts of CHASE's reply, for fronts with their own reply type.
pub fn chase_reply_parts(r: chase::ChaseReply) -> (Vec<ChaseEntry>, &'static str) {
    let stop = r.stop.as_str();
    let entries = r
        .entries
        .into_iter()
        .map(|e| {
            let attrs = e.attrs.into_iter().flat_map(|(k, v)| [k, v]).collect();
            (e.key, i64::from(e.depth), attrs)
        })
        .collect();
    (entries, stop)
}

/// HSCAN's default COUNT (Redis's).
const HSCAN_COUNT_DEFAULT: u64 = 10;

/// Most items one HRANDFIELD with a negative count (repetitions allowed) may return: Redis
/// 7.0 has no bound and would build a reply of any size; this one keeps it within a reply
/// a client can take (an error past it).
pub const HRANDFIELD_COUNT_MAX: u64 = 1_000_000;

/// HSCAN key cursor [MATCH pattern] [COUNT n] on `encoded` (None: the key is missing),
/// Redis 7.0's replies: a missing key is an empty scan before any option is looked at; a
/// `listpack` hash (`listpack`: its OBJECT ENCODING) is returned whole with cursor 0 whatever
/// COUNT says, as Redis does. A larger one is paged in the order of its names' hashes
/// ([`hscan_rank`]): the cursor is the rank to start from, COUNT fields per call (more
/// when several share the last rank, so none is split across calls). Redis walks its
/// dict's buckets instead; its cursors are opaque to clients either way. A field's rank
/// does not change when others are added or deleted, so a full iteration returns every
/// field present throughout exactly once, as Redis guarantees. (The cursor was the next
/// field's position until session 25: a field deleted before it shifted the rest, and
/// fields present throughout were skipped.)
pub fn hscan_reply(argv: &[&[u8]], encoded: Option<&[u8]>, listpack: bool) -> Reply {
    let Some(cursor) = std::str::from_utf8(argv[2])
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
    else {
        return Reply::err("ERR invalid cursor");
    };
    let empty = || {
        Reply::Array(vec![
            Reply::Bulk(Bytes::from_static(b"0")),
            Reply::Array(vec![]),
        ])
    };
    let Some(encoded) = encoded else {
        return empty();
    };
    let mut count = HSCAN_COUNT_DEFAULT;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 3;
    // Each pass consumes two arguments.
    while i < argv.len() {
        let Some(v) = argv.get(i + 1) else {
            return Reply::err(errors::SYNTAX);
        };
        if argv[i].eq_ignore_ascii_case(b"count") {
            match ringlet_record::parse_i64(v) {
                Some(n) if n >= 1 => count = n as u64,
                Some(_) => return Reply::err(errors::SYNTAX),
                None => return Reply::err("ERR value is not an integer or out of range"),
            }
        } else if argv[i].eq_ignore_ascii_case(b"match") {
            pattern = Some(*v).filter(|p| *p != b"*");
        } else {
            return Reply::err(errors::SYNTAX);
        }
        i += 2;
    }
    let Ok(fields) = ringlet_record::record::scan(encoded) else {
        return Reply::err("ERR stored record does not decode");
    };
    let (page, next) = if listpack {
        (fields, 0)
    } else {
        hscan_page(fields, cursor, count)
    };
    let mut items = Vec::with_capacity(page.len() * 2);
    for (name, f) in &page {
        if pattern.is_some_and(|p| !crate::glob::string_match(p, name, false)) {
            continue;
        }
        items.push(Reply::bulk(name));
        items.push(Reply::Bulk(Bytes::from(f.display())));
    }
    Reply::Array(vec![
        Reply::Bulk(Bytes::from(next.to_string())),
        Reply::Array(items),
    ])
}

/// One page of a big hash's HSCAN ([`hscan_reply`]): the fields whose rank is at least
/// `cursor`, the `count` lowest ranks of them and any more of the last one's rank, in rank
/// order; and the next cursor (the lowest rank left, 0 when none is).
fn hscan_page<'a>(
    fields: Vec<(&'a [u8], FieldRef<'a>)>,
    cursor: u64,
    count: u64,
) -> (Vec<(&'a [u8], FieldRef<'a>)>, u64) {
    let mut from: Vec<_> = fields
        .into_iter()
        .map(|(n, f)| (hscan_rank(n), n, f))
        .filter(|e| e.0 >= cursor)
        .collect();
    let mut next = 0;
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    // `count` is at least 1 (checked by the caller), so the page's last place exists.
    if from.len() > count {
        let last = from.select_nth_unstable_by_key(count - 1, |e| e.0).1 .0;
        next = from
            .iter()
            .map(|e| e.0)
            .filter(|&r| r > last)
            .min()
            .unwrap_or(0);
        from.retain(|e| e.0 <= last);
    }
    from.sort_unstable_by_key(|e| e.0);
    (from.into_iter().map(|(_, n, f)| (n, f)).collect(), next)
}

/// Where a field comes in a paged HSCAN of a big hash: its name's hash, never 0 (cursor 0
/// starts and ends an iteration). Fields of one rank (a hash collision) are returned in
/// one call.
fn hscan_rank(name: &[u8]) -> u64 {
    ringlet_engine::hash::key_hash(name).max(1)
}

/// A small generator for HRANDFIELD (splitmix64): its picks need no cryptographic quality,
/// and the fronts seed it per call.
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n` > 0; the modulo bias is irrelevant at hash sizes).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The arguments of HRANDFIELD checked as Redis 7.0 checks them before it looks the key up:
/// `Ok(None)` for the form without a count, else `(count, withvalues)`.
///
/// # Errors
/// The error reply.
pub fn hrandfield_args(argv: &[&[u8]]) -> Result<Option<(i64, bool)>, Reply> {
    if argv.len() < 3 {
        return Ok(None);
    }
    let count = match ringlet_record::parse_i64(argv[2]) {
        Some(i64::MIN) => {
            return Err(Reply::err(
                "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            ))
        }
        Some(n) => n,
        None => return Err(Reply::err("ERR value is not an integer or out of range")),
    };
    if argv.len() > 4 || (argv.len() == 4 && !argv[3].eq_ignore_ascii_case(b"withvalues")) {
        return Err(Reply::err(errors::SYNTAX));
    }
    let withvalues = argv.len() == 4;
    if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(Reply::err("ERR value is out of range"));
    }
    Ok(Some((count, withvalues)))
}

/// HRANDFIELD key [count [WITHVALUES]] on `encoded` (None: missing key) after
/// [`hrandfield_args`]: Redis 7.0's cases — no count: one random field or nil; count 0: an
/// empty array; negative: |count| picks with repetition; positive: distinct fields, the
/// whole hash in field order when count ≥ its size. WITHVALUES pairs are flat in RESP2 and
/// two-element arrays in RESP3 (`resp3`), as Redis sends them.
pub fn hrandfield_reply(
    args: Option<(i64, bool)>,
    encoded: Option<&[u8]>,
    resp3: bool,
    rng: &mut Rng,
) -> Reply {
    let fields = encoded.map(|e| ringlet_record::record::scan(e).unwrap_or_default());
    let Some((count, withvalues)) = args else {
        return match fields {
            Some(f) if !f.is_empty() => Reply::bulk(f[rng.below(f.len())].0),
            _ => Reply::Nil,
        };
    };
    let Some(fields) = fields.filter(|f| !f.is_empty()) else {
        return Reply::Array(vec![]);
    };
    let n = count.unsigned_abs();
    if n == 0 {
        return Reply::Array(vec![]);
    }
    let item = |out: &mut Vec<Reply>, (name, f): &(&[u8], ringlet_record::record::FieldRef<'_>)| {
        let name = Reply::bulk(name);
        if !withvalues {
            out.push(name);
        } else if resp3 {
            out.push(Reply::Array(vec![
                name,
                Reply::Bulk(Bytes::from(f.display())),
            ]));
        } else {
            out.push(name);
            out.push(Reply::Bulk(Bytes::from(f.display())));
        }
    };
    let mut out = Vec::new();
    if count < 0 || n == 1 {
        if n > HRANDFIELD_COUNT_MAX {
            return Reply::err_owned(format!(
                "ERR count exceeds the reply bound of {HRANDFIELD_COUNT_MAX} items"
            ));
        }
        for _ in 0..n {
            item(&mut out, &fields[rng.below(fields.len())]);
        }
    } else if n >= fields.len() as u64 {
        for f in &fields {
            item(&mut out, f);
        }
    } else {
        // Distinct picks: a partial Fisher-Yates over the positions.
        let mut pos: Vec<usize> = (0..fields.len()).collect();
        for i in 0..n as usize {
            let j = i + rng.below(pos.len() - i);
            pos.swap(i, j);
            item(&mut out, &fields[pos[i]]);
        }
    }
    Reply::Array(out)
}

/// HSCAN key cursor [MATCH pattern] [COUNT n]: see [`hscan_reply`].
pub async fn hscan<K: Keyspace>(ks: &K, argv: &[&[u8]]) -> KsResult {
    // Redis checks the cursor before it looks the key up (and before its type).
    if std::str::from_utf8(argv[2])
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
        .is_none()
    {
        return Err(Reply::err("ERR invalid cursor"));
    }
    let cur = ks.read(argv[1]).await?;
    let encoded = encoded_of(cur.as_ref())?;
    let listpack = encoded
        .is_none_or(|e| super::keyspace::record_encoding(e, ks.hash_encoding()) == "listpack");
    Ok(hscan_reply(argv, encoded, listpack))
}

/// HRANDFIELD key [count [WITHVALUES]]: see [`hrandfield_reply`]; `resp3` is the
/// connection's protocol, `seed` the front's randomness for this call.
pub async fn hrandfield<K: Keyspace>(ks: &K, argv: &[&[u8]], resp3: bool, seed: u64) -> KsResult {
    let args = hrandfield_args(argv)?;
    let cur = ks.read(argv[1]).await?;
    let encoded = encoded_of(cur.as_ref())?;
    Ok(hrandfield_reply(args, encoded, resp3, &mut Rng(seed)))
}

/// HRANDFIELD on the single node (its protocol and seed are the connection's and node's).
pub fn hrandfield_cmd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let seed = ctx
        .shared
        .random_seed
        .fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed);
    let resp3 = ctx.session.proto == ringlet_codec::Proto::Resp3;
    let ks = super::keyspace_api::Local::new(ctx);
    let reply =
        super::keyspace_api::ready(hrandfield(&ks, argv, resp3, seed)).unwrap_or_else(|e| e);
    ks.finish(ctx);
    reply
}
