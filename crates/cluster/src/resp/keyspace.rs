//! The cluster's side of the key commands (issue 11), with Redis Cluster semantics:
//!
//! * **The replicated keyspace** ([`Replicated`], at the end of this file): the cluster's
//!   implementation of `ringlet_server::cmd::keyspace_api::Keyspace`, over which the key
//!   commands written once for both fronts run (`ringlet_server::cmd::{string, bits, lcs,
//!   keyspace, record}`). Multi-key ones (DEL, EXISTS, MSETNX, RENAME, RENAMENX, COPY,
//!   TOUCH, LCS) need their keys in one slot (`-CROSSSLOT` otherwise); mutations take the
//!   per-key locks in key order (no deadlock between two such commands) and run on the
//!   coordinator.
//! * **Per node**, as Redis Cluster answers them on a master: KEYS, SCAN, RANDOMKEY, DBSIZE,
//!   FLUSHALL and FLUSHDB see the keys of the slots *this node coordinates* (a node also
//!   stores replica copies and parity metadata of other slots; those are not its keys).
//!   redis-py's `RedisCluster` sends KEYS/DBSIZE/FLUSHALL to every primary and merges.
//!   The handlers are the single node's; what is this node's is the source
//!   (`Keyspace::scan`, `random_key`, `key_count`, `flush` below).
//!
//! What is weaker than Redis, and why: MSETNX checks all keys under their locks and then
//! writes them one by one, so it is all-or-nothing against other clients, but a coordinator
//! that fails half-way leaves some keys written (each write is acknowledged by its own commit
//! rule; there are no multi-key transactions in the replica core). RENAME writes the new key
//! before it deletes the old one, so such a failure leaves both, never neither.
//!
//! The enumeration uses the engine's SCAN (cursor over the index: a key present for the whole
//! scan is returned at least once) and confirms each candidate through the core (committed,
//! not expired), so KEYS costs one core round trip per *matching* key.

use super::Front;
use ringlet_codec::resp::Reply;
use ringlet_server::cmd::keyspace_api::{KindFilter, ScanFilter};
use ringlet_types::{key_slot, Slot, SLOT_COUNT};

/// Keys read from the engine per lock hold while enumerating (bounds the time the driver
/// may wait for the engine lock).
const SCAN_BATCH: usize = 1024;
/// RANDOMKEY's tries at the engine's random key before it falls back to a scan.
const RANDOM_TRIES: usize = 32;
impl Front {
    /// The slots this node coordinates in its current map.
    fn own_slots(&self) -> Vec<bool> {
        let mut own = vec![false; usize::from(SLOT_COUNT)];
        if let Some(map) = self.map() {
            let me = self.node.id();
            for (s, o) in own.iter_mut().enumerate() {
                *o = map.coordinator(s as Slot) == Some(me);
            }
        }
        own
    }

    /// One page of the engine's SCAN from `cursor`: keys of slots this node coordinates
    /// whose name `filter` keeps, not yet confirmed. Returns the next cursor (0: done).
    fn scan_page(
        &self,
        cursor: u64,
        count: usize,
        own: &[bool],
        filter: &ScanFilter<'_>,
        out: &mut Vec<Vec<u8>>,
    ) -> u64 {
        let mut page = Vec::with_capacity(count.min(SCAN_BATCH));
        let next = self.node.engine().lock().scan(cursor, count, 0, &mut page);
        out.extend(
            page.into_iter()
                .filter(|k| own[usize::from(key_slot(k))] && filter.keeps_name(k)),
        );
        next
    }

    /// Keep the candidates that are live keys (committed, not expired) at their coordinator
    /// (this node; a key whose slot moved meanwhile is dropped).
    pub(super) async fn confirm(&self, keys: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut live = Vec::with_capacity(keys.len());
        self.confirm_into(keys, KindFilter::Any, &mut live).await;
        live
    }

    /// [`Self::confirm`] keeping only keys of a kind `kind` keeps, appended to `out`.
    async fn confirm_into(&self, keys: Vec<Vec<u8>>, kind: KindFilter, out: &mut Vec<Vec<u8>>) {
        for k in keys {
            if self.moved(key_slot(&k)).is_some() {
                continue;
            }
            if let Ok(Some(g)) = self.get_any(&k).await {
                if kind.keeps(g.kind) {
                    out.push(k);
                }
            }
        }
    }

    /// Every live key this node coordinates (FLUSHALL's), each once.
    async fn all_keys(&self) -> Vec<Vec<u8>> {
        let own = self.own_slots();
        let mut cands = Vec::new();
        let mut cursor = 0;
        let every = ScanFilter::default();
        // Bounded: the engine's cursor visits every bucket once (plus an upsize's rehash).
        loop {
            cursor = self.scan_page(cursor, SCAN_BATCH, &own, &every, &mut cands);
            if cursor == 0 {
                break;
            }
        }
        cands.sort();
        cands.dedup();
        self.confirm(cands).await
    }

    /// RANDOMKEY's: a live key of a slot this node coordinates, or `None`. The engine's
    /// random key first (it may be a replica copy of another node's slot: tried
    /// [`RANDOM_TRIES`] times), then the first live key of a scan.
    async fn random_owned_key(&self) -> Option<Vec<u8>> {
        let own = self.own_slots();
        let mut seed = crate::wall_ms() ^ u64::from(std::process::id()).rotate_left(32);
        for _ in 0..RANDOM_TRIES {
            // splitmix64 step: cheap, well-spread seeds for the engine's choice.
            seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            // The engine holds nothing at all: no key.
            let k = self.node.engine().lock().random_key(z ^ (z >> 31), 0)?;
            if own[usize::from(key_slot(&k))] {
                if let Some(k) = self.confirm(vec![k]).await.pop() {
                    return Some(k);
                }
            }
        }
        // Few of this node's entries are its own keys (mostly replica copies): scan.
        let every = ScanFilter::default();
        let mut cursor = 0;
        // Bounded: one pass of the engine's cursor.
        loop {
            let mut cands = Vec::new();
            cursor = self.scan_page(cursor, SCAN_BATCH, &own, &every, &mut cands);
            if let Some(k) = self.confirm(cands).await.into_iter().next() {
                return Some(k);
            }
            if cursor == 0 {
                return None;
            }
        }
    }

    /// Keys stored in the slots this node coordinates (O(slots); like Redis's DBSIZE it
    /// counts expired keys not yet deleted).
    pub(super) fn owned_key_count(&self) -> u64 {
        self.owned_key_counts().0
    }

    /// [`Self::owned_key_count`] and, of those keys, the ones with a TTL (INFO keyspace's
    /// `keys=` and `expires=`): both O(slots), from the engine's per-slot counters.
    pub(super) fn owned_key_counts(&self) -> (u64, u64) {
        let own = self.own_slots();
        let engine = self.node.engine().lock();
        own.iter()
            .enumerate()
            .filter(|(_, o)| **o)
            .fold((0, 0), |(keys, ttl), (s, _)| {
                (
                    keys + engine.slot_len(s as Slot),
                    ttl + engine.slot_ttl_len(s as Slot),
                )
            })
    }

    /// `-MOVED` unless this node coordinates `key`.
    fn route(&self, key: &[u8]) -> Result<(), Reply> {
        match self.moved(key_slot(key)) {
            Some(m) => Err(m),
            None => Ok(()),
        }
    }

    /// One slot for all `keys`, coordinated here.
    fn route_all(&self, keys: &[&[u8]]) -> Result<(), Reply> {
        Self::same_slot(keys)?;
        match keys.first() {
            Some(k) => self.route(k),
            None => Ok(()),
        }
    }

    /// Lock `keys` in key order (no deadlock between two multi-key commands).
    async fn lock_sorted<'a>(&'a self, keys: &[&[u8]]) -> Result<Vec<super::KeyGuard<'a>>, Reply> {
        let mut order = keys.to_vec();
        order.sort();
        order.dedup();
        let mut guards = Vec::with_capacity(order.len());
        for k in order {
            guards.push(self.lock(k).await?);
        }
        Ok(guards)
    }

    /// The memgest `key` lives in at its coordinator (`None`: absent; the write then takes
    /// the default).
    async fn memgest_of(&self, key: &[u8]) -> Result<Option<ringlet_types::MemgestId>, Reply> {
        use ringlet_replica::{ClientOp, ClientReply};
        match self
            .run(ClientOp::ReadReplica { key: key.to_vec() })
            .await?
        {
            ClientReply::Replica {
                value: Some(_),
                memgest,
                ..
            } => Ok(Some(memgest)),
            _ => Ok(None),
        }
    }
}

// ---------------------------------------------------------------- the replicated keyspace

use ringlet_server::cmd::keyspace_api::{self as ks, Change, Cond, Keyspace, Memgest, Put, Ttl};
use ringlet_server::reply::Reply as SReply;

/// A cluster node's keyspace for the key commands written once over
/// [`Keyspace`] (`ringlet_server::cmd::{string, bits, lcs, keyspace}`): the replica core,
/// through this front's helpers. Reads are the coordinator's committed values ([`Front`]'s
/// `get_any`: the fast path or the core); every mutation takes the key's `KeyGuard` (sorted,
/// for several keys), reads at the coordinator, lets the handler decide, and writes through
/// the core under the memgest's commit rule — so it is atomic against every other mutation
/// of the key on its coordinator, as the cluster's INCR and APPEND always were. Keys must be
/// coordinated here (`-MOVED`) and, for several, share a slot (`-CROSSSLOT`).
pub(super) struct Replicated<'a>(pub(super) &'a Front);

/// A front error as the shared handlers' reply type.
fn back(r: Reply) -> SReply {
    match r {
        Reply::Error(e) => SReply::Error(e.into()),
        other => SReply::err_owned(format!("ERR unexpected reply {other:?}")),
    }
}

/// The coordinator's value as the shared handlers see it.
fn value(g: super::Got) -> ks::Value {
    ks::Value {
        bytes: g.value,
        kind: g.kind,
        expire_at_ms: g.expiry_ms,
    }
}

impl Replicated<'_> {
    /// Apply one change to `key` under its guard; `expiry_before` is the key's expiry when
    /// the command read it (for [`Ttl::Keep`]), `memgest` what [`Memgest`] resolved to
    /// (`None`: the key's own, or the default for a new key).
    async fn apply(
        &self,
        key: &[u8],
        change: Change,
        expiry_before: Option<u64>,
        memgest: Option<ringlet_types::MemgestId>,
    ) -> Result<(), SReply> {
        let f = self.0;
        let r = match change {
            Change::Nothing => Ok(()),
            Change::Delete => f.write(key, None).await,
            Change::Put(p) => {
                let expiry = match p.ttl {
                    Ttl::Keep => expiry_before,
                    Ttl::Clear => None,
                    Ttl::At(ms) => Some(ms),
                };
                let memgest = match p.memgest {
                    Memgest::Id(id) => Some(id),
                    Memgest::Own | Memgest::Like(_) => memgest,
                };
                f.write_kind(key, Some(p.value), memgest, expiry, p.kind)
                    .await
            }
            // A TTL change is a new version of the value (docs/design/cluster-ttl.md). The
            // handler consumed the value it read; read it again — under the key's guard it
            // is the same one — rather than copy every RMW's value for the few that need it.
            Change::Expire(at) => match f.get_any(key).await {
                Ok(Some(g)) if g.expiry_ms != at => {
                    f.write_kind(key, Some(g.value), None, at, g.kind).await
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            },
        };
        r.map_err(back)
    }
}

impl Keyspace for Replicated<'_> {
    fn now_ms(&self) -> u64 {
        crate::wall_ms()
    }

    fn hash_encoding(&self) -> &ringlet_server::cmd::keyspace::HashEncodingMax {
        &self.0.hash_encoding
    }

    fn link_hints(&self) -> impl ks::LinkHints + '_ {
        super::records::ClusterHints::new(self.0)
    }

    async fn read(&self, key: &[u8]) -> Result<Option<ks::Value>, SReply> {
        // `get_any` answers MOVED for a key another node coordinates (through `run`).
        let g = self.0.get_any(key).await.map_err(back)?;
        Ok(g.map(value))
    }

    async fn read_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<ks::Value>>, SReply> {
        self.0.route_all(keys).map_err(back)?;
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            out.push(self.read(k).await?);
        }
        Ok(out)
    }

    async fn write_many(&self, pairs: &[(&[u8], &[u8])]) -> Result<(), SReply> {
        let f = self.0;
        let keys: Vec<&[u8]> = pairs.iter().map(|(k, _)| *k).collect();
        f.route_all(&keys).map_err(back)?;
        for (key, value) in pairs {
            let _g = f.lock(key).await.map_err(back)?;
            f.write_resolving(key, Some(value.to_vec()))
                .await
                .map_err(back)?;
        }
        Ok(())
    }

    async fn memgest_id(&self, name: &[u8]) -> Result<ringlet_types::MemgestId, SReply> {
        self.0.writable_memgest(name).await.map_err(back)
    }

    async fn write(&self, key: &[u8], put: Put, cond: Cond) -> Result<bool, SReply> {
        let f = self.0;
        f.route(key).map_err(back)?;
        let _g = f.lock(key).await.map_err(back)?;
        // A plain SET (a string, no TTL, its own memgest, unconditional) resolves an
        // ambiguous outcome by value (resolve.rs): with a condition, a TTL or a memgest
        // named, an equal value does not say that this write is the one that took effect.
        if cond == Cond::Always
            && put.ttl == Ttl::Clear
            && put.memgest == Memgest::Own
            && put.kind == ringlet_types::ValueKind::String
        {
            f.write_resolving(key, Some(put.value))
                .await
                .map_err(back)?;
            return Ok(true);
        }
        // Any kind counts as present (Redis: SETNX on a hash key is not stored).
        let cur = if cond != Cond::Always || put.ttl == Ttl::Keep {
            f.get_any(key).await.map_err(back)?
        } else {
            None
        };
        match cond {
            Cond::Nx if cur.is_some() => return Ok(false),
            Cond::Xx if cur.is_none() => return Ok(false),
            _ => {}
        }
        let expiry = cur.and_then(|g| g.expiry_ms);
        self.apply(key, Change::Put(put), expiry, None).await?;
        Ok(true)
    }

    async fn exists(&self, keys: &[&[u8]]) -> Result<u64, SReply> {
        let f = self.0;
        f.route_all(keys).map_err(back)?;
        let mut n = 0;
        for k in keys {
            n += u64::from(f.get_any(k).await.map_err(back)?.is_some());
        }
        Ok(n)
    }

    async fn delete(&self, keys: &[&[u8]]) -> Result<u64, SReply> {
        let f = self.0;
        f.route_all(keys).map_err(back)?;
        // One key's guard at a time (not all of them sorted, as `update_many`): a DEL of
        // many keys must not run into `KEY_LOCKS_MAX`, and each erase stands alone.
        let mut n = 0;
        for k in keys {
            let _g = f.lock(k).await.map_err(back)?;
            if f.get_any(k).await.map_err(back)?.is_some() {
                f.write(k, None).await.map_err(back)?;
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
    ) -> Result<u64, SReply> {
        let f = self.0;
        let own = f.own_slots();
        let mut cands = Vec::new();
        let next = f.scan_page(cursor, count, &own, filter, &mut cands);
        f.confirm_into(cands, filter.kind, out).await;
        Ok(next)
    }

    async fn random_key(&self) -> Result<Option<Vec<u8>>, SReply> {
        Ok(self.0.random_owned_key().await)
    }

    fn key_count(&self) -> u64 {
        self.0.owned_key_count()
    }

    async fn flush(&self) -> Result<(), SReply> {
        // Every key deleted through its memgest's commit rule: replicas and parity follow.
        let f = self.0;
        for k in f.all_keys().await {
            let _g = f.lock(&k).await.map_err(back)?;
            f.write(&k, None).await.map_err(back)?;
        }
        Ok(())
    }

    async fn update<R>(
        &self,
        key: &[u8],
        func: impl FnOnce(Option<ks::Value>) -> Result<(Change, R), SReply>,
    ) -> Result<R, SReply> {
        let f = self.0;
        f.route(key).map_err(back)?;
        let _g = f.lock(key).await.map_err(back)?;
        let cur = f.get_any(key).await.map_err(back)?.map(value);
        let expiry = cur.as_ref().and_then(|v| v.expire_at_ms);
        let (change, out) = func(cur)?;
        self.apply(key, change, expiry, None).await?;
        Ok(out)
    }

    async fn update_many<R>(
        &self,
        keys: &[&[u8]],
        func: impl FnOnce(Vec<Option<ks::Value>>) -> Result<(Vec<(usize, Change)>, R), SReply>,
    ) -> Result<R, SReply> {
        let f = self.0;
        f.route_all(keys).map_err(back)?;
        let _guards = f.lock_sorted(keys).await.map_err(back)?;
        let mut cur = Vec::with_capacity(keys.len());
        for k in keys {
            cur.push(f.get_any(k).await.map_err(back)?.map(value));
        }
        let expiries: Vec<Option<u64>> = cur
            .iter()
            .map(|v| v.as_ref().and_then(|v| v.expire_at_ms))
            .collect();
        let (changes, out) = func(cur)?;
        // Memgests named by `Like` are resolved before anything is written (RENAME deletes
        // its source after writing the destination).
        let mut memgests = Vec::with_capacity(changes.len());
        for (_, c) in &changes {
            memgests.push(match c {
                Change::Put(Put {
                    memgest: Memgest::Like(j),
                    ..
                }) => f.memgest_of(keys[*j]).await.map_err(back)?,
                _ => None,
            });
        }
        for ((i, change), memgest) in changes.into_iter().zip(memgests) {
            self.apply(keys[i], change, expiries[i], memgest).await?;
        }
        Ok(out)
    }
}
