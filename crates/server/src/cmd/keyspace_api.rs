//! The keyspace key commands run against, with two implementations: [`Local`] (a single
//! node: the engine under its mutex) and the cluster's replicated one (a cluster node: the
//! replica core, `crates/cluster/src/resp/keyspace.rs`). A key command written once over
//! [`Keyspace`] serves both fronts (issue 11, item 1; docs/design/command-layer.md).
//!
//! ```text
//!   single node  cmd::handlers()  ── local!(string::append) ──┐
//!                                                              ├─> string::append(&impl Keyspace, argv)
//!   cluster node resp.rs command_inner ── Replicated(front) ───┘      read / write / update ...
//!                                                                     ├─ Local: Engine under Db::lock
//!                                                                     └─ Replicated: KeyGuard + core
//! ```
//!
//! # The operations
//!
//! - [`Keyspace::read`] / [`Keyspace::read_many`]: a key's live value, kind and expiry;
//! - [`Keyspace::write`]: a blind write with a condition (SETNX, SETEX);
//! - [`Keyspace::update`] / [`Keyspace::update_many`]: an atomic read-modify-write. The
//!   handler gives a synchronous closure that sees the current values and decides one
//!   [`Change`] per key. [`Local`] runs it under the engine lock; the replicated keyspace
//!   runs it under the keys' `KeyGuard`s between a read at the coordinator and the writes
//!   (what the cluster's APPEND and INCR always did). The closure never awaits, so the engine
//!   mutex is never held across an await.
//!
//! Why a closure that returns a [`Change`] rather than "read, then write" calls: the single
//! node's atomicity is the engine lock, which cannot be held across two trait calls without
//! handing the handler a guard; and the closure keeps the decision (the command's semantics)
//! in one place while each implementation decides how to make it atomic.
//!
//! # Why async, and what it costs the single node
//!
//! The replicated keyspace waits on the replica core, so the methods are `async`. [`Local`]'s
//! futures never wait on anything: they complete at their first poll, and the single node
//! runs a handler with [`ready`], one poll with a no-op waker, on the connection's own
//! thread — no runtime, no allocation, no thread hop. The single node's hot paths — pipelined plain GETs
//! and SETs, batched by `conn.rs` with the lock-free reader — do not come through here; their
//! answers are [`super::string::get`]'s and [`super::string::set`]'s.
//!
//! # Errors
//!
//! Every method answers a command's error reply (Redis's text: OOM, size limits, MOVED,
//! CROSSSLOT, TRYAGAIN ...), so a handler can return it as it is.

use super::Ctx;
use crate::reply::{errors, Reply};
use crate::shared::{Shared, Stats};
use ringlet_engine::{Condition, Engine, Entry, Expiry, ReadOutcome, Reader, SetOptions};
use ringlet_types::{limits, MemgestId, ValueKind};
use std::future::Future;
use std::task::{Context, Poll, Waker};

/// A key's live value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub bytes: Vec<u8>,
    pub kind: ValueKind,
    /// Absolute unix ms; `None`: no TTL.
    pub expire_at_ms: Option<u64>,
}

impl Value {
    /// The value if it is a string: `Ok(None)` for a missing key, Redis's WRONGTYPE for a
    /// record (a hash to clients). Every string command reads through here.
    ///
    /// # Errors
    /// WRONGTYPE for a record.
    pub fn string(v: Option<Value>) -> Result<Option<Value>, Reply> {
        match v {
            Some(v) if v.kind == ValueKind::Record => Err(Reply::err(errors::WRONGTYPE)),
            v => Ok(v),
        }
    }
}

impl From<Entry> for Value {
    fn from(e: Entry) -> Value {
        Value {
            bytes: e.value,
            kind: e.kind,
            expire_at_ms: e.expire_at_ms,
        }
    }
}

/// What a write does to the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// Keep the key's TTL (INCR, APPEND, SETRANGE, SETBIT: Redis keeps it); a new key gets
    /// none.
    Keep,
    /// No TTL (SET, GETSET, SETNX, MSETNX: Redis clears it).
    Clear,
    /// Expire at this absolute unix ms, which the handler checked is after now.
    At(u64),
}

/// Which memgest a written key goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memgest {
    /// The key's own (its current one; the default for a new key).
    Own,
    /// The one of `keys[i]` of the same [`Keyspace::update_many`] (RENAME and COPY keep the
    /// source's memgest, as they keep its TTL).
    Like(usize),
    /// One the command named (`SET ... MEMGEST name`), resolved by [`Keyspace::memgest_id`].
    Id(MemgestId),
}

/// A value to store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Put {
    pub value: Vec<u8>,
    pub kind: ValueKind,
    pub ttl: Ttl,
    pub memgest: Memgest,
}

impl Put {
    /// A string in the key's own memgest.
    pub fn string(value: Vec<u8>, ttl: Ttl) -> Put {
        Put {
            value,
            kind: ValueKind::String,
            ttl,
            memgest: Memgest::Own,
        }
    }
}

/// What a read-modify-write does to one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing (the command only read, or its condition did not hold).
    Nothing,
    /// Erase the key.
    Delete,
    /// Store a new value.
    Put(Put),
    /// Change only the TTL of the (live) key: `Some(at)`, after now, or `None` (PERSIST).
    Expire(Option<u64>),
}

/// Which keys a [`Keyspace::scan`] keeps: SCAN's MATCH and TYPE, KEYS's pattern.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScanFilter<'a> {
    /// A glob (`None`: every key; `*` is given as `None`, so it costs nothing).
    pub pattern: Option<&'a [u8]>,
    pub kind: KindFilter,
}

/// SCAN's TYPE filter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KindFilter {
    /// No TYPE given.
    #[default]
    Any,
    /// Keys of this kind (TYPE's name for it: a record is a `hash`).
    Only(ValueKind),
    /// A type name no key can have (`list`, `zset`, unknown names): nothing, as Redis 7.0
    /// answers an unknown name.
    Nothing,
}

impl KindFilter {
    /// The filter for TYPE `name` (compared as Redis does: case-insensitive, up to a NUL).
    pub fn named(name: &[u8]) -> KindFilter {
        let name = super::cstr(name);
        [ValueKind::String, ValueKind::Record]
            .into_iter()
            .find(|k| name.eq_ignore_ascii_case(k.type_name().as_bytes()))
            .map_or(KindFilter::Nothing, KindFilter::Only)
    }

    /// Whether a key of `kind` is kept.
    pub fn keeps(self, kind: ValueKind) -> bool {
        match self {
            KindFilter::Any => true,
            KindFilter::Only(k) => k == kind,
            KindFilter::Nothing => false,
        }
    }
}

impl ScanFilter<'_> {
    /// Whether `key`'s name is kept (the pattern; the kind is checked apart, as it needs a
    /// read).
    pub fn keeps_name(&self, key: &[u8]) -> bool {
        self.kind != KindFilter::Nothing
            && self
                .pattern
                .is_none_or(|p| crate::glob::string_match(p, key, false))
    }
}

/// How a keyspace finds location hints for new links (see [`Keyspace::link_hints`]).
pub trait LinkHints {
    /// Ask for `target`'s index bucket ahead of [`LinkHints::hint`], so that the cache
    /// misses of many targets overlap (a no-op where hints are found another way).
    fn prefetch(&self, target: &[u8]);
    /// The hint for a link to `target` (`None`: the link goes without one; a reader then
    /// looks the target up by key).
    fn hint(&self, target: &[u8]) -> Option<ringlet_record::Hint>;

    /// [`LinkHints::prefetch`], returning what [`LinkHints::hint_kept`] may reuse for the
    /// same target (the single node: its key hash, computed once per link instead of twice;
    /// by default nothing).
    fn prefetch_keep(&self, target: &[u8]) -> u64 {
        self.prefetch(target);
        0
    }

    /// [`LinkHints::hint`] given what [`LinkHints::prefetch_keep`] returned for this same
    /// `target`.
    fn hint_kept(&self, target: &[u8], kept: u64) -> Option<ringlet_record::Hint> {
        let _ = kept;
        self.hint(target)
    }
}

/// The single node's hints: the target's position in the engine by its key-hash tag, node
/// 0, epoch 0 (no data entry read to check the key: a hint is validated when followed, so
/// a tag collision only makes one stale — cmd/record.rs `hint_of`).
pub struct LocalHints(ringlet_engine::read::RegionsView);

impl LinkHints for LocalHints {
    fn prefetch(&self, target: &[u8]) {
        ringlet_engine::read::prefetch_bucket(&self.0, ringlet_engine::hash::key_hash(target));
    }

    fn hint(&self, target: &[u8]) -> Option<ringlet_record::Hint> {
        self.hint_kept(target, ringlet_engine::hash::key_hash(target))
    }

    fn prefetch_keep(&self, target: &[u8]) -> u64 {
        let hash = ringlet_engine::hash::key_hash(target);
        ringlet_engine::read::prefetch_bucket(&self.0, hash);
        hash
    }

    /// `kept` is `target`'s key hash (`prefetch_keep`).
    fn hint_kept(&self, _target: &[u8], kept: u64) -> Option<ringlet_record::Hint> {
        ringlet_engine::read::locate_position_by_tag(&self.0, kept)
            .map(|p| super::record::hint_of(p, 0, 0))
    }
}

/// A blind write's condition (SETNX: `Nx`).
pub use ringlet_command::args::Cond;

/// What key commands need from where keys live. See the module doc.
// `async fn` in a public trait: callers cannot name `Send` bounds on the futures, but none
// need to — the cluster calls its own implementation (whose futures are `Send`, which the
// compiler sees through the concrete type) and the single node polls its own with [`ready`].
#[allow(async_fn_in_trait)]
pub trait Keyspace {
    /// The time the command runs at (unix ms): expiries are compared and made absolute
    /// against it.
    fn now_ms(&self) -> u64;

    /// The node's `hash-max-listpack-*` (OBJECT ENCODING of a record).
    fn hash_encoding(&self) -> &super::keyspace::HashEncodingMax;

    /// Location hints for the links a record command writes (docs/design/records.md,
    /// "Location hints"): where this node's engine holds a link's target now. Taken once
    /// per command, before [`Keyspace::update`], and used inside its closure.
    fn link_hints(&self) -> impl LinkHints + '_;

    /// The live value of `key` (`None`: missing or expired).
    ///
    /// # Errors
    /// The front's error reply (a cluster: MOVED, TRYAGAIN, ...).
    async fn read(&self, key: &[u8]) -> Result<Option<Value>, Reply>;

    /// The live values of `keys`, read together (one slot in a cluster: CROSSSLOT
    /// otherwise; one engine lock hold on a single node).
    ///
    /// # Errors
    /// As [`Keyspace::read`], and CROSSSLOT.
    async fn read_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Value>>, Reply>;

    /// Store `put` under `key` if `cond` holds against the live key (any kind counts as
    /// present); whether it was stored. `Memgest::Like` is not meaningful here (treated as
    /// `Own`).
    ///
    /// # Errors
    /// The front's error reply (OOM, size limits, MOVED ...); nothing was stored.
    async fn write(&self, key: &[u8], put: Put, cond: Cond) -> Result<bool, Reply>;

    /// Store each `(key, value)` as a string without TTL, in order (MSET: a key named twice
    /// takes its last value). One engine lock hold on a single node; one slot in a cluster
    /// (CROSSSLOT), each key written under its guard.
    ///
    /// # Errors
    /// The front's error reply; the pairs before the failing one stay written.
    async fn write_many(&self, pairs: &[(&[u8], &[u8])]) -> Result<(), Reply>;

    /// The memgest a command names (`SET ... MEMGEST name`), if it takes writes.
    ///
    /// # Errors
    /// A single node keeps one copy of every key and refuses the option; a cluster node
    /// answers an unknown or dropping memgest.
    async fn memgest_id(&self, name: &[u8]) -> Result<MemgestId, Reply>;

    /// Read `key`, let `f` decide a [`Change`] and a result, apply the change — atomically
    /// with respect to every other mutation of the key. An error from `f` is answered as it
    /// is, with nothing changed.
    ///
    /// # Errors
    /// `f`'s error, or the front's.
    async fn update<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<Value>) -> Result<(Change, R), Reply>,
    ) -> Result<R, Reply>;

    /// How many of `keys` are live (EXISTS: a key named twice counts twice). One slot in a
    /// cluster (CROSSSLOT); no value is handed out.
    ///
    /// # Errors
    /// As [`Keyspace::read_many`].
    async fn exists(&self, keys: &[&[u8]]) -> Result<u64, Reply>;

    /// Erase those of `keys` that are live, in order; how many were (DEL, UNLINK: a key
    /// named twice counts once). One engine lock hold on a single node; one slot in a
    /// cluster (CROSSSLOT), each key erased under its guard through its memgest's commit
    /// rule. A missing key is not touched (no tombstone, no replicated write).
    ///
    /// # Errors
    /// The front's error reply; the keys before the failing one stay erased (as a Redis
    /// DEL cannot fail half-way, this only happens on a cluster node losing its slot).
    async fn delete(&self, keys: &[&[u8]]) -> Result<u64, Reply>;

    /// One page of a cursor scan over the keys this node answers for — a single node: its
    /// engine's index; a cluster node: the slots it coordinates, each candidate confirmed
    /// live through the replica core — appending the live keys `filter` keeps to `out`.
    /// `cursor` 0 starts, the returned cursor continues (0: done). Redis's guarantee: a
    /// key present for the whole scan is returned at least once (possibly more: callers
    /// that need each once dedup). `count` bounds the index positions visited.
    ///
    /// # Errors
    /// The front's error reply.
    async fn scan(
        &self,
        cursor: u64,
        count: usize,
        filter: &ScanFilter<'_>,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<u64, Reply>;

    /// A random live key this node answers for (`None`: none).
    ///
    /// # Errors
    /// The front's error reply.
    async fn random_key(&self) -> Result<Option<Vec<u8>>, Reply>;

    /// Keys this node answers for (DBSIZE: like Redis, expired keys not yet reaped count).
    fn key_count(&self) -> u64;

    /// Erase every key this node answers for (FLUSHALL, FLUSHDB).
    ///
    /// # Errors
    /// The front's error reply (a cluster: a delete that did not commit).
    async fn flush(&self) -> Result<(), Reply>;

    /// [`Keyspace::update`] over several keys (one slot in a cluster): `f` gets their values
    /// in the order of `keys` (a key named twice appears twice) and answers changes by index,
    /// applied in the order given.
    ///
    /// # Errors
    /// As [`Keyspace::update`], and CROSSSLOT.
    async fn update_many<R>(
        &self,
        keys: &[&[u8]],
        f: impl FnOnce(Vec<Option<Value>>) -> Result<(Vec<(usize, Change)>, R), Reply>,
    ) -> Result<R, Reply>;
}

/// Run a future that completes at its first poll (a handler over [`Local`]) to its output,
/// on this thread.
///
/// # Panics
/// If the future is not ready at once: a caller bug ([`Local`] never waits; a future that
/// can wait must be run by the runtime instead).
pub fn ready<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a local keyspace future waited: only ready futures run here"),
    }
}

/// The single node's keyspace: the engine, under its mutex for mutations and through the
/// worker's lock-free reader for reads.
pub struct Local<'a> {
    shared: &'a Shared,
    reader: &'a Reader,
    now_ms: u64,
    /// The connection's scratch buffer, lent for the command (reads that need no value
    /// out, EXISTS and SCAN's TYPE, land here: no allocation); see [`Local::finish`].
    scratch: std::cell::RefCell<Vec<u8>>,
}

impl<'a> Local<'a> {
    /// The keyspace a single-node handler sees. It borrows the connection's scratch
    /// buffer: give it back with [`Local::finish`].
    pub fn new(ctx: &mut Ctx<'a>) -> Local<'a> {
        Local {
            shared: ctx.shared,
            reader: ctx.reader,
            now_ms: ctx.now_ms,
            scratch: std::cell::RefCell::new(std::mem::take(ctx.scratch)),
        }
    }

    /// Return the scratch buffer to `ctx` (its capacity is kept for the next command).
    pub fn finish(self, ctx: &mut Ctx<'_>) {
        *ctx.scratch = self.scratch.into_inner();
    }

    /// The keyspace of a request the connection runs without a [`Ctx`] (its batched path,
    /// conn.rs), lent the connection's `scratch` buffer: give it back with
    /// [`Local::into_scratch`].
    pub fn with_scratch(
        shared: &'a Shared,
        reader: &'a Reader,
        now_ms: u64,
        scratch: Vec<u8>,
    ) -> Local<'a> {
        Local {
            shared,
            reader,
            now_ms,
            scratch: std::cell::RefCell::new(scratch),
        }
    }

    /// The scratch buffer lent to [`Local::with_scratch`].
    pub fn into_scratch(self) -> Vec<u8> {
        self.scratch.into_inner()
    }

    /// The kind of `key` if it is live, its value left in the scratch buffer.
    fn probe(&self, key: &[u8]) -> Option<ValueKind> {
        let mut buf = self.scratch.borrow_mut();
        read_into(self.shared, self.reader, key, self.now_ms, &mut buf).map(|(kind, _)| kind)
    }

    /// `key`'s value, memgest kept for [`Memgest::Own`]/[`Memgest::Like`], under the lock.
    fn entry(engine: &Engine, key: &[u8], now: u64) -> (Option<Value>, MemgestId) {
        match engine.get(key, now) {
            Some(e) => {
                let m = e.memgest;
                (Some(Value::from(e)), m)
            }
            None => (None, MemgestId::NONE),
        }
    }
}

/// Read `key` into `out` with the worker's lock-free reader (the engine lock only when it
/// reports `Retry`: a writer moved the entry under it more often than its bounded retries
/// allow): its kind and expiry if it is live. Counts INFO's keyspace hits and misses. The
/// single node's one read of a key (GET, MGET, EXISTS, the `Keyspace` reads).
pub fn read_into(
    shared: &Shared,
    reader: &Reader,
    key: &[u8],
    now_ms: u64,
    out: &mut Vec<u8>,
) -> Option<(ValueKind, Option<u64>)> {
    out.clear();
    let hit = match reader.get(key, now_ms, out) {
        ReadOutcome::Hit {
            kind, expire_at_ms, ..
        } => Some((kind, expire_at_ms)),
        ReadOutcome::Miss => None,
        ReadOutcome::Retry => {
            Stats::add(&shared.stats.reader_retries, 1);
            shared.db.lock().get(key, now_ms).map(|e| {
                out.clear();
                out.extend_from_slice(&e.value);
                (e.kind, e.expire_at_ms)
            })
        }
    };
    count_read(&shared.stats, hit.is_some());
    hit
}

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

/// Largest page buffer a scan reserves up front (COUNT is a client's hint).
const SCAN_PAGE_PREALLOC_MAX: usize = 4096;

/// `checkStringLength`'s text; our limit is `limits::VALUE_BYTES_MAX`.
pub const STRING_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// Apply one change to the engine (`memgest`: what [`Memgest`] resolved to).
fn apply(
    engine: &mut Engine,
    key: &[u8],
    change: Change,
    memgest: MemgestId,
    now: u64,
) -> Result<(), Reply> {
    match change {
        Change::Nothing => Ok(()),
        Change::Delete => engine
            .delete(key, None, now)
            .map(|_| ())
            .map_err(engine_error),
        Change::Put(p) => {
            // The handler has seen the old value already: the engine need not copy it out
            // again (`Engine::set` would, for its `SetOutcome::Applied::old`).
            let opts = SetOptions {
                memgest,
                expiry: expiry(p.ttl),
                kind: p.kind,
                ..SetOptions::default()
            };
            engine
                .set_discarding_old(key, &p.value, &opts, now)
                .map(|_| ())
                .map_err(engine_error)
        }
        Change::Expire(at) => engine
            .set_expiry(key, at.map_or(Expiry::Persist, Expiry::At), now)
            .map(|_| ())
            .map_err(engine_error),
    }
}

/// INFO's `keyspace_hits` / `keyspace_misses` for one read of a key command.
pub(super) fn count_read(stats: &Stats, hit: bool) {
    let c = if hit {
        &stats.keyspace_hits
    } else {
        &stats.keyspace_misses
    };
    Stats::add(c, 1);
}

fn expiry(ttl: Ttl) -> Expiry {
    match ttl {
        Ttl::Keep => Expiry::Keep,
        Ttl::Clear => Expiry::Persist,
        Ttl::At(ms) => Expiry::At(ms),
    }
}

impl Keyspace for Local<'_> {
    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn hash_encoding(&self) -> &super::keyspace::HashEncodingMax {
        &self.shared.hash_encoding
    }

    fn link_hints(&self) -> impl LinkHints + '_ {
        LocalHints(self.reader.view())
    }

    async fn read(&self, key: &[u8]) -> Result<Option<Value>, Reply> {
        let mut bytes = Vec::new();
        let v = read_into(self.shared, self.reader, key, self.now_ms, &mut bytes);
        Ok(v.map(|(kind, expire_at_ms)| Value {
            bytes,
            kind,
            expire_at_ms,
        }))
    }

    async fn exists(&self, keys: &[&[u8]]) -> Result<u64, Reply> {
        Ok(keys.iter().filter(|k| self.probe(k).is_some()).count() as u64)
    }

    async fn delete(&self, keys: &[&[u8]]) -> Result<u64, Reply> {
        let mut engine = self.shared.db.lock();
        let mut n = 0;
        for key in keys {
            // Only live keys are erased: deleting a missing key would still leave a
            // tombstone. (`live_memgest` looks without copying the value out.)
            if engine.live_memgest(key, self.now_ms).is_some()
                && engine
                    .delete(key, None, self.now_ms)
                    .map_err(engine_error)?
                    .is_some()
            {
                n += 1;
            }
        }
        Ok(n)
    }

    async fn scan(
        &self,
        cursor: u64,
        count: usize,
        filter: &ScanFilter<'_>,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<u64, Reply> {
        let mut page = Vec::with_capacity(count.min(SCAN_PAGE_PREALLOC_MAX));
        // Reaping: the expired keys it visits are deleted, as Redis's SCAN and KEYS do.
        let next = self
            .shared
            .db
            .lock()
            .scan_reaping(cursor, count, self.now_ms, &mut page);
        for k in page {
            if !filter.keeps_name(&k) {
                continue;
            }
            // TYPE reads the key (lock-free, into the scratch buffer) after the lock is let go.
            if filter.kind != KindFilter::Any
                && !self.probe(&k).is_some_and(|t| filter.kind.keeps(t))
            {
                continue;
            }
            out.push(k);
        }
        Ok(next)
    }

    async fn random_key(&self) -> Result<Option<Vec<u8>>, Reply> {
        let seed = self.shared.next_random();
        Ok(self.shared.db.lock().random_key(seed, self.now_ms))
    }

    fn key_count(&self) -> u64 {
        self.shared.db.lock().len()
    }

    async fn flush(&self) -> Result<(), Reply> {
        self.shared.db.lock().flush_all(self.now_ms);
        Ok(())
    }

    async fn read_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Value>>, Reply> {
        let engine = self.shared.db.lock();
        Ok(keys
            .iter()
            .map(|k| engine.get(k, self.now_ms).map(Value::from))
            .collect())
    }

    async fn write_many(&self, pairs: &[(&[u8], &[u8])]) -> Result<(), Reply> {
        let mut engine = self.shared.db.lock();
        for (key, value) in pairs {
            engine
                .set_discarding_old(key, value, &SetOptions::default(), self.now_ms)
                .map_err(engine_error)?;
        }
        Ok(())
    }

    async fn memgest_id(&self, _name: &[u8]) -> Result<MemgestId, Reply> {
        // A single node keeps one copy of every key: a memgest is chosen in a cluster.
        Err(ringlet_command::table::cluster_only_error(
            "set ... memgest",
        ))
    }

    async fn write(&self, key: &[u8], put: Put, cond: Cond) -> Result<bool, Reply> {
        let opts = SetOptions {
            expiry: expiry(put.ttl),
            kind: put.kind,
            condition: match cond {
                Cond::Always => Condition::Always,
                Cond::Nx => Condition::IfAbsent,
                Cond::Xx => Condition::IfPresent,
            },
            ..SetOptions::default()
        };
        let mut engine = self.shared.db.lock();
        match engine.set_discarding_old(key, &put.value, &opts, self.now_ms) {
            Ok(ringlet_engine::SetOutcome::Applied { .. }) => Ok(true),
            Ok(ringlet_engine::SetOutcome::NotApplied { .. }) => Ok(false),
            Err(e) => Err(engine_error(e)),
        }
    }

    async fn update<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<Value>) -> Result<(Change, R), Reply>,
    ) -> Result<R, Reply> {
        let mut engine = self.shared.db.lock();
        let (cur, memgest) = Self::entry(&engine, key, self.now_ms);
        let (change, out) = f(cur)?;
        let memgest = match &change {
            Change::Put(Put {
                memgest: Memgest::Id(id),
                ..
            }) => *id,
            _ => memgest,
        };
        apply(&mut engine, key, change, memgest, self.now_ms)?;
        Ok(out)
    }

    async fn update_many<R>(
        &self,
        keys: &[&[u8]],
        f: impl FnOnce(Vec<Option<Value>>) -> Result<(Vec<(usize, Change)>, R), Reply>,
    ) -> Result<R, Reply> {
        let mut engine = self.shared.db.lock();
        let (cur, memgests): (Vec<_>, Vec<_>) = keys
            .iter()
            .map(|k| Self::entry(&engine, k, self.now_ms))
            .unzip();
        let (changes, out) = f(cur)?;
        for (i, change) in changes {
            let memgest = match &change {
                Change::Put(Put {
                    memgest: Memgest::Like(j),
                    ..
                }) => memgests[*j],
                Change::Put(Put {
                    memgest: Memgest::Id(id),
                    ..
                }) => *id,
                _ => memgests[i],
            };
            apply(&mut engine, keys[i], change, memgest, self.now_ms)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::ready;

    #[test]
    fn ready_runs_a_future_that_never_waits() {
        async fn add(a: u64, b: u64) -> u64 {
            a + b
        }
        async fn nested() -> u64 {
            add(add(1, 2).await, 3).await
        }
        assert_eq!(ready(nested()), 6);
    }

    #[test]
    #[should_panic(expected = "waited")]
    fn ready_refuses_a_future_that_waits() {
        ready(std::future::pending::<()>());
    }
}
