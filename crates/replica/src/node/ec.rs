//! `ec:K+M` memgests in the replica core (DESIGN.md "Writes, memgests and consistency",
//! Ring §3.3, §5, §6.4). Why it is built this way: `docs/design/cluster-ec.md`.
//!
//! ```text
//!  coordinator = data node `owner` of PG `pg`          parity holders = PG[s .. s+M]
//!  Set k v ──▶ Arena::put_deferred (value whole, fresh range; old range kept until commit)
//!          ──EcUpdate{seq, delta = new ⊕ old, meta}──▶ every holder: ParityStore::apply (in
//!          ◀──EcAck{seq} (cumulative)──                  seq order, duplicates no-ops)
//!          all M acked → store gets (version, memgest, 16-byte pointer); old range freed;
//!          reply Written; parked reads wake and read the arena at the pointer.
//!
//!  takeover (spare becomes data node `owner`):
//!    EcMetaReq ──▶ holders (fences `owner` there) ◀── metadata pages + applied seq + high water
//!    Loading → Recovering: Get of a lost value decodes it on demand (EcReadReq: parity pieces
//!    from one consistent holder, then the other data nodes' bytes rolled back to the seqs that
//!    holder reported) while a background job decodes the arena window by window → Ready
//!    (ec writes are accepted from then on).
//!
//!  new parity holder: EcSyncReq ──▶ every data node: snapshot (arena bytes + keys at a seq)
//!    folded into zero parity; updates after the snapshot's seq apply as usual.
//! ```

use super::MoveRetire;
use super::*;
use ringlet_erasure::layout::ParityChunk;
use ringlet_erasure::{
    rebuild_range, rebuild_sources, Arena, ChunkSource, Codec, KeyMeta, Layout, MetaChange,
    ParityStore, ParityUpdate, SourceRange,
};

/// Bounds of the ec machinery (each with its reason).
pub mod ec_bounds {
    /// Keys per metadata or snapshot-key page: one message, like a pull page.
    pub const EC_KEYS_PER_PAGE_MAX: usize = 1024;
    /// Arena bytes per snapshot page sent to a resynchronising parity holder.
    pub const EC_SYNC_PAGE_BYTES: u64 = 256 * 1024;
    /// Arena bytes one background recovery job decodes: bounds the work per step and the
    /// bytes fetched per round trip.
    pub const EC_RECOVER_WINDOW_BYTES: u64 = 64 * 1024;
    /// Decode jobs in flight per node (on-demand reads beyond it get `Busy`).
    pub const EC_DECODE_JOBS_MAX: usize = 64;
    /// Ranges in one `EcReadReq` a node serves (a window of 64 KiB in 64-byte chunks
    /// touches at most a few thousand pieces).
    pub const EC_READ_RANGES_MAX: usize = 16 * 1024;
    /// Snapshots a data node keeps for resynchronising holders (one per holder, M ≤ 4).
    pub const EC_SNAPSHOTS_MAX: usize = 8;
    /// Re-encodes of a handed-off span's ec values in flight at its new coordinator: past
    /// it the pull asks for no next page until some committed, so a large span never
    /// holds more than this plus one page of values (and their parity deltas) in memory.
    pub const EC_REENCODES_IN_FLIGHT_MAX: usize = 1024;
}
use ec_bounds::*;

/// Bytes of the pointer stored in the replica store for an ec value: offset u64 BE, len u64 BE.
pub const EC_PTR_BYTES: usize = 16;

/// An expiry as the arena keeps it (`KeyMeta::expiry_ms` is a `NonZeroU64`). 0 (1970) never
/// reaches here from a front (an expiry not in the future deletes the key), and would be
/// kept as 1: as expired, never as "no expiry" (`write` stores the same 1).
fn nz(x: Option<u64>) -> Option<std::num::NonZeroU64> {
    x.and_then(|x| std::num::NonZeroU64::new(x.max(1)))
}

pub(super) fn ec_ptr(offset: u64, len: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(EC_PTR_BYTES);
    v.extend_from_slice(&offset.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

pub(super) fn parse_ptr(v: &[u8]) -> Option<(u64, u64)> {
    let o: [u8; 8] = v.get(0..8)?.try_into().ok()?;
    let l: [u8; 8] = v.get(8..16)?.try_into().ok()?;
    (v.len() == EC_PTR_BYTES).then(|| (u64::from_be_bytes(o), u64::from_be_bytes(l)))
}

fn to_wire_meta(m: &Option<MetaChange>) -> EcMeta {
    match m {
        None => EcMeta::None,
        Some(MetaChange::Put { key, meta }) => EcMeta::Put {
            key: key.clone(),
            version: meta.version,
            offset: meta.offset,
            len: meta.len,
            kind: meta.kind,
            expiry_ms: meta.expiry_ms.map(std::num::NonZeroU64::get),
        },
        Some(MetaChange::Delete { key, version }) => EcMeta::Delete {
            key: key.clone(),
            version: *version,
        },
        Some(MetaChange::Retire { key, version }) => EcMeta::Retire {
            key: key.clone(),
            version: *version,
        },
    }
}

fn from_wire(owner: u32, seq: u64, offset: u64, delta: Vec<u8>, meta: EcMeta) -> ParityUpdate {
    let meta = match meta {
        EcMeta::None => None,
        EcMeta::Put {
            key,
            version,
            offset,
            len,
            kind,
            expiry_ms,
        } => Some(MetaChange::Put {
            key,
            meta: KeyMeta {
                owner,
                offset,
                len,
                version,
                kind,
                expiry_ms: nz(expiry_ms),
            },
        }),
        EcMeta::Delete { key, version } => Some(MetaChange::Delete { key, version }),
        EcMeta::Retire { key, version } => Some(MetaChange::Retire { key, version }),
    };
    ParityUpdate {
        owner,
        seq,
        offset,
        delta,
        meta,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SrcStatus {
    Waiting,
    /// `pos`: the group position of the store that answered (`s + q`: parity holder `q`;
    /// below `s`: a draining node's kept arena of that data position).
    Done {
        seq: u64,
        high_water: u64,
        pos: u32,
    },
    NotReady,
}

#[derive(Clone, Debug)]
pub(super) struct LoadSrc {
    req_id: u64,
    after: Option<Vec<u8>>,
    sent_ms: u64,
    status: SrcStatus,
    keys: Vec<EcKeyMeta>,
}

#[derive(Clone, Debug)]
pub(super) struct Load {
    sources: BTreeMap<NodeId, LoadSrc>,
    first_done_ms: Option<u64>,
    started_ms: u64,
}

#[derive(Clone, Debug)]
pub(super) struct Recover {
    cursor: u64,
    high_water: u64,
    /// Holders (parity index, node) whose copy of the owner's state is the adopted one.
    good: Vec<(u32, NodeId)>,
    /// A draining node whose kept arena of this position is the adopted state: windows are
    /// copied from it (no decode) while it answers.
    copy_from: Option<NodeId>,
    /// Every byte is back; the draining nodes left to release before the arena takes
    /// writes (nodes, last send ms). See `ParState::Releasing` for why.
    release: Option<(BTreeSet<NodeId>, u64)>,
    job: Option<u64>,
    next_try_ms: u64,
    /// When the cursor last advanced (or recovery began): no progress for
    /// `rebuild_timeout_ms` means the survivors cannot decode the rest.
    progress_ms: u64,
}

#[derive(Clone, Debug)]
pub(super) enum DataState {
    Ready,
    Loading(Load),
    Recovering(Recover),
}

/// This node as data node `owner` of PG `pg` for one ec memgest.
#[derive(Clone, Debug)]
pub(super) struct EcData {
    pub(super) layout: Layout,
    pub(super) codec: Arc<Codec>,
    pub(super) owner: u32,
    pub(super) arena: Arena,
    pub(super) holders: Vec<NodeId>,
    pub(super) group: Vec<NodeId>,
    pub(super) base: u64,
    pub(super) state: DataState,
    /// Snapshots served to resynchronising holders: holder → (seq, arena copy).
    snapshots: BTreeMap<NodeId, (u64, Arena)>,
    /// Keys a takeover adopted, whose older copies under a memgest with more copies (a
    /// `rep:R` the key moved from) must be retired before the range serves: key →
    /// (adopted version, replicas that acknowledged the retire, last send ms). See
    /// [`Replica::drive_ec_takeover_retires`].
    pub(super) retiring: BTreeMap<Vec<u8>, (Version, BTreeSet<NodeId>, u64)>,
}

#[derive(Clone, Debug)]
pub(super) struct SyncSrc {
    req_id: u64,
    offset: u64,
    after: Option<Vec<u8>>,
    keys_phase: bool,
    sent_ms: u64,
    snap: Option<(u64, u64)>,
    done: bool,
}

#[derive(Clone, Debug)]
pub(super) enum ParState {
    Ready,
    Syncing(BTreeMap<u32, SyncSrc>),
    /// Synchronised with every data node, but a draining node may still keep the parity of
    /// this position (it held it before): it is told to drop it, and this holder
    /// acknowledges no update until every draining node has answered (or left Draining).
    /// Until then that kept store is current, so a data node that fails meanwhile can be
    /// rebuilt from it (simulator seed 58728).
    Releasing {
        waiting: BTreeSet<NodeId>,
        sent_ms: u64,
    },
}

/// This node as parity holder `q` of PG `pg` for one ec memgest.
#[derive(Clone, Debug)]
pub(super) struct EcParity {
    pub(super) store: ParityStore,
    pub(super) q: u32,
    pub(super) state: ParState,
    /// Per owner: the takeover base of the updates last accepted.
    base: Vec<u64>,
    /// Per owner: who may send updates (set by a new coordinator's `EcMetaReq`).
    fences: BTreeMap<u32, Fence>,
    pub(super) group: Vec<NodeId>,
}

#[derive(Clone, Debug)]
pub(super) struct EcPend {
    pub(super) pg: u32,
    pub(super) memgest: MemgestId,
    pub(super) seq: u64,
    pub(super) owner: u32,
    pub(super) offset: u64,
    pub(super) delta: Vec<u8>,
    pub(super) meta: EcMeta,
    pub(super) base: u64,
    /// Arena range to free when this update commits (the value it supersedes).
    pub(super) free: Option<(u64, u64)>,
    /// Background update (retire of a moved key): no client, no store entry.
    pub(super) bg: bool,
}

impl EcPend {
    pub(super) fn body(&self) -> PeerBody {
        PeerBody::EcUpdate {
            memgest: self.memgest,
            pg: self.pg,
            owner: self.owner,
            base: self.base,
            seq: self.seq,
            offset: self.offset,
            delta: self.delta.clone(),
            meta: self.meta.clone(),
        }
    }
}

/// A decode of `[offset, offset+len)` of the owner's arena.
///
/// Phase 1 reads the parity pieces from every good holder (each reports the seq it applied
/// from every data node); phase 2 reads each surviving data node's pieces *as of* each seq a
/// holder reported for it. The decode then uses one reference holder's state: another
/// holder's parity is corrected to it (`coef · (d(S_h) ⊕ d(S_ref))` per data chunk whose
/// seqs differ), so up to M chunks of a codeword may be missing (M simultaneous failures).
#[derive(Clone, Debug)]
pub(super) struct Job {
    pg: u32,
    memgest: MemgestId,
    offset: u64,
    len: u64,
    background: bool,
    holders: Vec<(u32, NodeId)>,
    sources: Vec<SourceRange>,
    /// Parity request id → parity index.
    parity_reqs: BTreeMap<u64, u32>,
    /// Parity index → applied seq per data node (answered holders only).
    seqs: BTreeMap<u32, Vec<u64>>,
    /// (parity index, chunk index, byte, len) → bytes.
    parity: BTreeMap<(u32, u64, u32, u32), Vec<u8>>,
    /// (data node, offset, len, seq) → bytes.
    data: BTreeMap<(u32, u64, u32, u64), Vec<u8>>,
    /// Data request id → (data node, seq).
    data_reqs: BTreeMap<u64, (u32, u64)>,
    /// Data nodes that answered not-ready (or were lost).
    unavailable: BTreeSet<u32>,
    phase2: bool,
    sent_ms: u64,
    failed: bool,
    attempt: usize,
    /// Waiting reads: (client, request, quorum leg?, version, memgest, kind, expiry).
    readers: Vec<Reader>,
    /// A copy of the window from a draining node's kept arena (`Recover::copy_from`), not
    /// a decode: its one data request is for this position's own bytes.
    copy: bool,
}

impl Job {
    /// A job over `[offset, offset + len)` with nothing asked or fetched yet (a decode in
    /// phase 1; the caller names its holders and sources, or makes it a copy).
    fn new(
        pg: u32,
        memgest: MemgestId,
        (offset, len): (u64, u64),
        background: bool,
        attempt: usize,
        now_ms: u64,
    ) -> Job {
        Job {
            pg,
            memgest,
            offset,
            len,
            background,
            holders: Vec::new(),
            sources: Vec::new(),
            parity_reqs: BTreeMap::new(),
            seqs: BTreeMap::new(),
            parity: BTreeMap::new(),
            data: BTreeMap::new(),
            data_reqs: BTreeMap::new(),
            unavailable: BTreeSet::new(),
            phase2: false,
            sent_ms: now_ms,
            failed: false,
            attempt,
            readers: Vec::new(),
            copy: false,
        }
    }
}

/// A read waiting for a decode job: (client, request, quorum leg?, version, memgest, kind,
/// expiry ms).
type Reader = (u64, ReqId, bool, Version, MemgestId, ValueKind, Option<u64>);

#[derive(Clone, Copy, Debug)]
pub(super) enum EcReq {
    Meta {
        pg: u32,
        memgest: MemgestId,
    },
    Sync {
        pg: u32,
        memgest: MemgestId,
        owner: u32,
    },
    Job {
        job: u64,
    },
}

/// The fetched pieces as one consistent state: data at the reference holder's seqs, parity
/// of every usable holder corrected to that state.
struct Fetched<'a> {
    job: &'a Job,
    reference: &'a [u64],
    parity: &'a BTreeMap<(u32, u64, u32, u32), Vec<u8>>,
}

impl ChunkSource for Fetched<'_> {
    fn read_data(&self, node: u32, offset: u64, out: &mut [u8]) -> bool {
        let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let Some(seq) = self.reference.get(node as usize) else {
            return false;
        };
        match self.job.data.get(&(node, offset, len, *seq)) {
            Some(b) if b.len() == out.len() => {
                out.copy_from_slice(b);
                true
            }
            _ => false,
        }
    }
    fn read_parity(&self, chunk: ParityChunk, byte: u32, out: &mut [u8]) -> bool {
        let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
        match self.parity.get(&(chunk.holder, chunk.index, byte, len)) {
            Some(b) if b.len() == out.len() => {
                out.copy_from_slice(b);
                true
            }
            _ => false,
        }
    }
}

fn ec_shape(kind: MemgestKind) -> Option<(u32, u32)> {
    match kind {
        MemgestKind::Ec { k, m } => Some((u32::from(k), u32::from(m))),
        _ => None,
    }
}

impl<S: ReplicaStore> Replica<S> {
    // ------------------------------------------------------------------ roles

    /// Recompute ec roles after a map change: data node of (PG, memgest) → an arena; parity
    /// holder → a parity store. New roles start Ready when no data can have existed
    /// (bootstrap placement, or a memgest the previous map did not have), otherwise they
    /// recover (data: Loading) or resynchronise (parity: Syncing).
    pub(super) fn ec_on_map(
        &mut self,
        old_map: Option<&ClusterMap>,
        placed_at_bootstrap: bool,
        out: &mut Vec<Output>,
    ) {
        let Some(map) = self.map.clone() else { return };
        let mut keep_data = BTreeSet::new();
        let mut keep_par = BTreeSet::new();
        let i_am_member = map
            .nodes
            .get(&self.id)
            .is_some_and(|n| n.incarnation == self.incarnation);
        // Draining nodes may keep the parity of positions they gave up (below): a loading
        // data node asks them as well as the current holders.
        let draining = self.draining_peers();
        if let (Some(p), true) = (&map.placement, i_am_member) {
            let s = u32::from(p.s);
            for (pg, group) in (0u32..).zip(p.groups.iter()) {
                let Some(pos) = group.iter().position(|n| *n == self.id) else {
                    continue;
                };
                let pos = pos as u32;
                for (mid, info) in &map.memgests {
                    let Some((k, m)) = ec_shape(info.kind) else {
                        continue;
                    };
                    let Ok(layout) = Layout::new(k, m, s, self.cfg.ec_chunk_bytes) else {
                        continue; // s < K: refused at write time (Unsupported)
                    };
                    // A group the previous map did not have (a node was added) held
                    // nothing either.
                    let new_group = old_map.is_some_and(|om| {
                        om.placement
                            .as_ref()
                            .is_some_and(|op| op.group(pg).is_none())
                    });
                    let fresh = placed_at_bootstrap
                        || new_group
                        || old_map.is_some_and(|om| !om.memgests.contains_key(mid));
                    let holders: Vec<NodeId> = p.parity(pg, m as u8);
                    if pos < s {
                        keep_data.insert((pg, *mid));
                        if let Some(d) = self.ec_data.get_mut(&(pg, *mid)) {
                            if d.owner == pos {
                                d.holders = holders;
                                d.group = group.clone();
                                continue;
                            }
                        }
                        let Ok(codec) = Codec::new(k, m) else {
                            continue;
                        };
                        let Ok(arena) = Arena::new(layout, pos, self.cfg.ec_arena_bytes) else {
                            continue;
                        };
                        let state = if fresh {
                            DataState::Ready
                        } else {
                            DataState::Loading(Load {
                                sources: holders
                                    .iter()
                                    .chain(draining.iter())
                                    .map(|h| {
                                        (
                                            *h,
                                            LoadSrc {
                                                req_id: 0,
                                                after: None,
                                                sent_ms: 0,
                                                status: SrcStatus::Waiting,
                                                keys: Vec::new(),
                                            },
                                        )
                                    })
                                    .collect(),
                                first_done_ms: None,
                                started_ms: self.last_now_ms,
                            })
                        };
                        self.ec_data.insert(
                            (pg, *mid),
                            EcData {
                                layout,
                                codec: Arc::new(codec),
                                owner: pos,
                                arena,
                                holders,
                                group: group.clone(),
                                base: 0,
                                state,
                                snapshots: BTreeMap::new(),
                                retiring: BTreeMap::new(),
                            },
                        );
                    } else if pos < s + m {
                        let q = pos - s;
                        keep_par.insert((pg, *mid));
                        if let Some(h) = self.ec_parity.get_mut(&(pg, *mid)) {
                            if h.q == q {
                                h.group = group.clone();
                                continue;
                            }
                        }
                        let Ok(store) =
                            ParityStore::with_arena_capacity(layout, q, self.cfg.ec_arena_bytes)
                        else {
                            continue;
                        };
                        let state = if fresh {
                            ParState::Ready
                        } else {
                            ParState::Syncing(new_sync(s))
                        };
                        self.ec_parity.insert(
                            (pg, *mid),
                            EcParity {
                                store,
                                q,
                                state,
                                base: vec![0; s as usize],
                                fences: BTreeMap::new(),
                                group: group.clone(),
                            },
                        );
                    }
                }
            }
        }
        // A draining node keeps the complete parity stores of the positions it gives up.
        // Its successor there resynchronises from the data nodes and, until it has, does
        // not acknowledge updates (`ParState::Releasing`): so the kept store is the only
        // complete parity of that position, and stays current, until the successor
        // releases it. Without it, a data node failing in that window could not be rebuilt
        // (simulator seed 58728: one drain plus one crash, which ec:K+1 must survive).
        // The same holds for a data position's arena: its successor commits no write there
        // before it has loaded and released it, so until then the kept arena is that
        // position's current state, which the successor copies when the parity holders
        // cannot answer (a holder failing during the drain).
        if i_am_member && map.node_state(self.id) == Some(NodeState::Draining) {
            let given_up: Vec<(u32, MemgestId)> = self
                .ec_parity
                .iter()
                .filter(|(k, h)| !keep_par.contains(*k) && matches!(h.state, ParState::Ready))
                .map(|(k, _)| *k)
                .collect();
            for k in given_up {
                if let Some(mut h) = self.ec_parity.remove(&k) {
                    h.fences.clear();
                    self.ec_retained.insert(k, h);
                }
            }
            let given_up: Vec<(u32, MemgestId)> = self
                .ec_data
                .iter()
                .filter(|(k, d)| !keep_data.contains(*k) && matches!(d.state, DataState::Ready))
                .map(|(k, _)| *k)
                .collect();
            for k in given_up {
                if let Some(mut d) = self.ec_data.remove(&k) {
                    d.snapshots.clear();
                    self.ec_retained_data.insert(k, d);
                }
            }
            self.ec_retained
                .retain(|(_, mid), _| map.memgests.contains_key(mid));
            self.ec_retained_data
                .retain(|(_, mid), _| map.memgests.contains_key(mid));
        } else {
            self.ec_retained.clear();
            self.ec_retained_data.clear();
        }
        self.ec_data.retain(|k, _| keep_data.contains(k));
        self.ec_parity.retain(|k, _| keep_par.contains(k));
        // Fences older than the map are expressed by the map itself.
        let epoch = self.epoch;
        for h in self.ec_parity.values_mut() {
            h.fences.retain(|_, f| f.epoch > epoch);
        }
        // Requests in flight were addressed under the old map: drop them (loads and syncs
        // resend; readers waiting for a decode are told to retry).
        self.ec_reqs.clear();
        for (_, j) in std::mem::take(&mut self.ec_jobs) {
            for (client, id, ..) in j.readers {
                self.reply(out, client, id, ClientReply::NotReady);
            }
        }
        for d in self.ec_data.values_mut() {
            match &mut d.state {
                DataState::Loading(l) => {
                    let want: BTreeSet<NodeId> =
                        d.holders.iter().chain(draining.iter()).copied().collect();
                    l.sources.retain(|n, _| want.contains(n));
                    for h in &want {
                        l.sources.entry(*h).or_insert(LoadSrc {
                            req_id: 0,
                            after: None,
                            sent_ms: 0,
                            status: SrcStatus::Waiting,
                            keys: Vec::new(),
                        });
                    }
                    for src in l.sources.values_mut() {
                        if src.status == SrcStatus::Waiting {
                            src.req_id = 0;
                            src.after = None;
                            src.keys.clear();
                        }
                    }
                }
                DataState::Recovering(r) => {
                    r.job = None;
                    r.next_try_ms = 0;
                    // A draining node's kept store stays usable until it is released (it
                    // then answers not-ready, and the job tries another good holder).
                    r.good.retain(|(q, n)| {
                        d.holders.get(*q as usize) == Some(n) || draining.contains(n)
                    });
                    r.copy_from = r.copy_from.filter(|n| draining.contains(n));
                }
                DataState::Ready => {}
            }
            d.snapshots.retain(|n, _| map.nodes.contains_key(n));
        }
        for h in self.ec_parity.values_mut() {
            if let ParState::Syncing(srcs) = &mut h.state {
                for s in srcs.values_mut() {
                    s.req_id = 0;
                    s.sent_ms = 0;
                }
            }
        }
    }

    /// ec roles still recovering or resynchronising (the node is not settled).
    pub(super) fn ec_busy(&self) -> bool {
        self.ec_data
            .values()
            .any(|d| !matches!(d.state, DataState::Ready))
            || self
                .ec_parity
                .values()
                .any(|h| !matches!(h.state, ParState::Ready))
    }

    /// Whether the map lists another node as Draining (checked on every ec update a holder
    /// receives: no allocation).
    fn any_draining(&self) -> bool {
        self.map.as_ref().is_some_and(|map| {
            map.nodes
                .iter()
                .any(|(id, n)| *id != self.id && n.state == NodeState::Draining)
        })
    }

    /// Other nodes the map lists as Draining (they may keep parity they gave up).
    fn draining_peers(&self) -> BTreeSet<NodeId> {
        self.map.as_ref().map_or_else(BTreeSet::new, |map| {
            map.nodes
                .iter()
                .filter(|(id, n)| **id != self.id && n.state == NodeState::Draining)
                .map(|(id, _)| *id)
                .collect()
        })
    }

    pub(super) fn ec_debug(&self) -> Vec<String> {
        let mut v = Vec::new();
        for ((pg, m), d) in &self.ec_data {
            match &d.state {
                DataState::Ready => {}
                DataState::Loading(l) => v.push(format!(
                    "ec data pg {pg} {m:?} loading {:?}",
                    l.sources
                        .iter()
                        .map(|(n, s)| (*n, s.status.clone()))
                        .collect::<Vec<_>>()
                )),
                DataState::Recovering(r) => v.push(format!(
                    "ec data pg {pg} {m:?} recovering {}/{} good {:?}",
                    r.cursor, r.high_water, r.good
                )),
            }
        }
        for ((pg, m), h) in &self.ec_parity {
            match &h.state {
                ParState::Syncing(s) => v.push(format!(
                    "ec parity pg {pg} {m:?} syncing done {:?}",
                    s.iter().map(|(o, x)| (*o, x.done)).collect::<Vec<_>>()
                )),
                ParState::Releasing { waiting, .. } => {
                    v.push(format!("ec parity pg {pg} {m:?} releasing {waiting:?}"))
                }
                ParState::Ready => {}
            }
        }
        v
    }

    /// Whether the ec metadata of every ec memgest of `pg` is loaded here (a rebuilding
    /// range of that PG may serve).
    pub(super) fn ec_loaded(&self, pg: u32) -> bool {
        self.ec_data
            .iter()
            .filter(|((p, _), _)| *p == pg)
            .all(|(_, d)| !matches!(d.state, DataState::Loading(_)) && d.retiring.is_empty())
    }

    // ------------------------------------------------------------------ writes

    /// `ec:K+M` Set/Delete at the coordinator (already checked: serving, dedup, memgest).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_ec(
        &mut self,
        now_ms: u64,
        client: u64,
        id: ReqId,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        memgest: MemgestId,
        expiry_ms: Option<u64>,
        kind: ValueKind,
        out: &mut Vec<Output>,
    ) {
        let slot = key_slot(&key);
        let Some(pg) = self.range(slot).map(|r| r.pg) else {
            return self.reply(out, client, id, ClientReply::NotCoordinator);
        };
        let Some(d) = self.ec_data.get(&(pg, memgest)) else {
            // No arena: the memgest does not fit this PG (s < K).
            return self.reply(out, client, id, ClientReply::Unsupported);
        };
        if !matches!(d.state, DataState::Ready) {
            return self.reply(out, client, id, ClientReply::NotReady);
        }
        // The bytes the key already holds (its newest write, committed or not) with another
        // TTL or none — EXPIRE, PERSIST, GETEX rewrite the value they read — or simply the
        // same value again: a metadata-only update. The key keeps its range; the holders get
        // the new version and expiry and no delta (Arena::touch). Comparing costs one
        // memcmp of the value; a rewrite would cost a fresh range and a value-sized delta
        // to each of the M holders.
        let same = value
            .as_ref()
            .is_some_and(|v| d.arena.holds_value(&key, v, kind));
        let targets = d.holders.clone();
        let bytes = (key.len() as u64)
            .saturating_add(
                value
                    .as_ref()
                    .filter(|_| !same)
                    .map_or(0, |v| v.len() as u64),
            )
            .saturating_add(64);
        for t in &targets {
            let (n, b) = self.inflight.get(t).copied().unwrap_or((0, 0));
            if n >= limits::REPLICATION_INFLIGHT_MAX
                || b.saturating_add(bytes) > limits::REPLICATION_INFLIGHT_BYTES_MAX
            {
                return self.reply(out, client, id, ClientReply::Busy);
            }
        }
        if let Some(v) = value.as_ref().filter(|_| !same) {
            // The node's budget for ec values, over all its arenas (a sum over the few
            // (PG, memgest) arenas this node owns data in).
            let held: u64 = self
                .ec_data
                .values()
                .map(|d| d.arena.accounting().payload_bytes)
                .sum();
            if held.saturating_add(v.len() as u64) > self.cfg.ec_data_bytes_max {
                self.stats.writes_out_of_memory += 1;
                return self.reply(out, client, id, ClientReply::OutOfMemory);
            }
        }
        let version = self.hlc.next(now_ms);
        if let Some(cur) = self.latest_entry(&key) {
            assert!(version > cur.version, "HLC issued a stale version");
        }
        let Some(d) = self.ec_data.get_mut(&(pg, memgest)) else {
            return;
        };
        let staged = match &value {
            Some(_) if same => d
                .arena
                .touch(&key, version, nz(expiry_ms))
                .map(|u| (u, None)),
            Some(v) => d.arena.put_deferred(&key, version, v, kind, nz(expiry_ms)),
            None if d.arena.meta(&key).is_some() => d.arena.remove_deferred(&key, version, false),
            None => Ok((
                d.arena.meta_update(MetaChange::Delete {
                    key: key.clone(),
                    version,
                }),
                None,
            )),
        };
        let (up, free) = match staged {
            Ok(x) => x,
            // Arena full: nothing was sent, nothing changed — a definite refusal, as Redis's
            // OOM (retrying cannot help until something is deleted).
            Err(ringlet_erasure::Error::NoSpace { .. }) => {
                self.stats.writes_out_of_memory += 1;
                return self.reply(out, client, id, ClientReply::OutOfMemory);
            }
            // Anything else is a bug or a race with a takeover: nothing was sent.
            Err(_) => return self.reply(out, client, id, ClientReply::Busy),
        };
        if same {
            self.stats.ec_meta_only_writes += 1;
        }
        let stored = match (&value, &up.meta) {
            (Some(_), Some(MetaChange::Put { meta, .. })) => Some(ec_ptr(meta.offset, meta.len)),
            _ => None,
        };
        let ec = EcPend {
            pg,
            memgest,
            seq: up.seq,
            owner: d.owner,
            offset: up.offset,
            meta: to_wire_meta(&up.meta),
            delta: up.delta,
            base: d.base,
            free,
            bg: false,
        };
        let entry = Entry {
            version,
            memgest,
            expiry_ms: stored.as_ref().and(expiry_ms),
            kind: if stored.is_some() {
                kind
            } else {
                ValueKind::String
            },
            value: stored,
        };
        self.remember(client, id.seq, None);
        let retire = self.move_retire(&key, slot, memgest);
        self.push_ec_pending(
            now_ms,
            key,
            slot,
            entry,
            Some((client, id)),
            targets,
            ec,
            retire,
            out,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn push_ec_pending(
        &mut self,
        now_ms: u64,
        key: Vec<u8>,
        slot: Slot,
        entry: Entry,
        client: Option<(u64, ReqId)>,
        targets: Vec<NodeId>,
        ec: EcPend,
        retire: Option<MoveRetire>,
        out: &mut Vec<Output>,
    ) {
        let bytes = (key.len() as u64)
            .saturating_add(ec.delta.len() as u64)
            .saturating_add(64);
        for t in &targets {
            let c = self.inflight.entry(*t).or_insert((0, 0));
            c.0 += 1;
            c.1 = c.1.saturating_add(bytes);
            self.send(out, *t, ec.body());
        }
        if !ec.bg {
            self.uncommitted_add(&key, entry.version);
        }
        let version = entry.version;
        let needed = targets.len();
        if !ec.bg {
            self.slot_written_ms.insert(slot, now_ms);
        }
        self.ec_acks.insert((ec.pg, ec.memgest, ec.seq, version));
        self.pending.insert(
            version,
            Pending {
                key,
                slot,
                entry,
                client,
                needed,
                targets,
                acked: BTreeSet::new(),
                refused: BTreeSet::new(),
                committed: false,
                last_send_ms: now_ms,
                resends: 0,
                bytes,
                ec: Some(ec),
                retire,
            },
        );
        if needed == 0 {
            self.commit(version, out);
            if self.pending.get(&version).is_some_and(|p| p.committed) {
                self.drop_pending(version);
            }
        }
    }

    /// After `new` committed for `key`: copies of the key in *other* ec memgests of its PG
    /// (a move, or a Set under another memgest) are retired: arena range freed once the
    /// holders dropped the metadata (a background update, no client).
    pub(super) fn retire_other_ec(&mut self, key: &[u8], new: &Entry, out: &mut Vec<Output>) {
        let slot = key_slot(key);
        let Some(pg) = self.range(slot).map(|r| r.pg) else {
            return;
        };
        let mids: Vec<MemgestId> = self
            .ec_data
            .iter()
            .filter(|((p, m), d)| {
                *p == pg
                    && *m != new.memgest
                    && d.arena
                        .meta(key)
                        .is_some_and(|km| km.version <= new.version)
            })
            .map(|((_, m), _)| *m)
            .collect();
        for mid in mids {
            let Some(d) = self.ec_data.get_mut(&(pg, mid)) else {
                continue;
            };
            if !matches!(d.state, DataState::Ready) {
                continue; // recovering arenas accept no updates; see cluster-ec.md
            }
            let Ok((up, free)) = d.arena.remove_deferred(key, new.version, true) else {
                continue;
            };
            let ec = EcPend {
                pg,
                memgest: mid,
                seq: up.seq,
                owner: d.owner,
                offset: up.offset,
                meta: to_wire_meta(&up.meta),
                delta: up.delta,
                base: d.base,
                free,
                bg: true,
            };
            let targets = d.holders.clone();
            // A fresh version only names the pending entry (never stored).
            let v = self.hlc.next(0);
            let entry = Entry {
                version: v,
                memgest: mid,
                value: None,
                expiry_ms: None,
                kind: ValueKind::String, // a pending marker, never stored
            };
            let last = self.last_now_ms;
            self.push_ec_pending(
                last,
                key.to_vec(),
                slot,
                entry,
                None,
                targets,
                ec,
                None,
                out,
            );
        }
    }

    /// A holder acknowledged `owner`'s updates through `seq`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ec_ack(
        &mut self,
        from: NodeId,
        memgest: MemgestId,
        pg: u32,
        seq: u64,
        ok: bool,
        out: &mut Vec<Output>,
    ) {
        if !ok {
            self.stats.replicate_refused += 1;
            return;
        }
        let mut ready = Vec::new();
        let mut done = Vec::new();
        let mut stale = Vec::new();
        let walk = (pg, memgest, 0, Version::ZERO)..=(pg, memgest, seq, Version(u128::MAX));
        for &(_, _, s, v) in self.ec_acks.range(walk) {
            if !ec_ack_live(&self.pending, (pg, memgest, s, v)) {
                stale.push((s, v));
                continue;
            }
            let Some(p) = self.pending.get_mut(&v) else {
                continue;
            };
            if p.targets.contains(&from) && p.acked.insert(from) {
                if let Some(c) = self.inflight.get_mut(&from) {
                    c.0 = c.0.saturating_sub(1);
                    c.1 = c.1.saturating_sub(p.bytes);
                }
            }
            if !p.committed && p.acked.len() >= p.needed {
                ready.push((v, s));
            } else if p.committed && p.targets.iter().all(|t| p.acked.contains(t)) {
                done.push((v, s));
            }
        }
        for (s, v) in stale {
            self.ec_acks.remove(&(pg, memgest, s, v));
        }
        // Commits in version order, as the walk over `pending` made them.
        ready.sort_unstable();
        for (v, s) in done {
            self.drop_pending(v);
            self.ec_acks.remove(&(pg, memgest, s, v));
        }
        let committed_any = !ready.is_empty();
        for (v, s) in ready {
            self.commit(v, out);
            if let Some(p) = self.pending.get(&v) {
                if p.committed && p.targets.iter().all(|t| p.acked.contains(t)) {
                    self.drop_pending(v);
                }
            }
            if !self.pending.contains_key(&v) {
                self.ec_acks.remove(&(pg, memgest, s, v));
            }
        }
        // A handoff rebuild waiting only for its last re-encodes serves now, not at the
        // next tick: its reads answer NotReady until then.
        let reencoding =
            |r: &RangeState| matches!(&r.status, Status::Pulling(p) if !p.ec_reencoding.is_empty());
        if committed_any && self.ranges.iter().any(reencoding) {
            let now_ms = self.last_now_ms;
            self.settle_reencodes(now_ms);
            for ri in 0..self.ranges.len() {
                if self.pull_complete(ri) {
                    self.finish_pull(now_ms, ri, false, out);
                }
            }
        }
    }

    /// Drops the ack index's entries whose pending write is gone by a path other than an
    /// acknowledgement (called off, wiped, superseded): without it a group that never
    /// acknowledges again would keep them. Only when they outnumber the live ones, so a
    /// tick does not walk the index each time.
    pub(super) fn prune_ec_acks(&mut self) {
        if self.ec_acks.len() <= 2 * self.pending.len() + 1024 {
            return;
        }
        let pending = &self.pending;
        self.ec_acks.retain(|entry| ec_ack_live(pending, *entry));
    }

    /// Commit-time ec bookkeeping: free the superseded range. Returns true for background
    /// updates (nothing else to do for them).
    pub(super) fn ec_commit(&mut self, ec: &EcPend) -> bool {
        if let Some((o, l)) = ec.free {
            if let Some(d) = self.ec_data.get_mut(&(ec.pg, ec.memgest)) {
                let freed = d.arena.free(o, l);
                debug_assert!(freed.is_ok(), "deferred range was not allocated");
            }
        }
        ec.bg
    }

    // ------------------------------------------------------------------ parity holder

    fn ec_accept(&self, from: NodeId, msg: &PeerMsg, h: &EcParity, owner: u32) -> bool {
        if let Some(map) = &self.map {
            if let Some(n) = map.nodes.get(&from) {
                if msg.incarnation < n.incarnation {
                    return false;
                }
            }
        }
        if let Some(f) = h.fences.get(&owner) {
            if f.node != from {
                if msg.epoch <= f.epoch {
                    return false;
                }
            } else if msg.incarnation < f.incarnation {
                return false;
            }
        }
        if msg.epoch < self.epoch {
            return false;
        }
        if msg.epoch == self.epoch {
            return h.group.get(owner as usize) == Some(&from);
        }
        true
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ec_update(
        &mut self,
        from: NodeId,
        msg: &PeerMsg,
        memgest: MemgestId,
        pg: u32,
        owner: u32,
        base: u64,
        seq: u64,
        offset: u64,
        delta: Vec<u8>,
        meta: EcMeta,
        out: &mut Vec<Output>,
    ) {
        let Some(h) = self.ec_parity.get(&(pg, memgest)) else {
            return;
        };
        if !self.ec_accept(from, msg, h, owner) {
            let body = PeerBody::EcAck {
                memgest,
                pg,
                owner,
                seq: 0,
                ok: false,
            };
            return self.send(out, from, body);
        }
        let hold_acks = self.any_draining();
        let Some(h) = self.ec_parity.get_mut(&(pg, memgest)) else {
            return;
        };
        if msg.epoch > self.epoch {
            h.fences.insert(
                owner,
                Fence {
                    epoch: msg.epoch,
                    node: from,
                    incarnation: msg.incarnation,
                },
            );
        }
        match &h.state {
            ParState::Syncing(srcs) => {
                if !srcs.get(&owner).is_some_and(|s| s.done) {
                    return; // not caught up with this owner yet: no ack, it retransmits
                }
                if hold_acks {
                    // A draining node may keep this position's parity, current only while
                    // no update commits here: acknowledge nothing until it is released.
                    return;
                }
            }
            ParState::Releasing { .. } => return,
            ParState::Ready => {}
        }
        let Some(cur_base) = h.base.get(owner as usize).copied() else {
            return;
        };
        if cur_base != base {
            if h.store.last_seq(owner) == Some(base) {
                if let Some(b) = h.base.get_mut(owner as usize) {
                    *b = base;
                }
            } else {
                // Our copy of this owner's arena diverged from the one the new coordinator
                // adopted (its predecessor died with updates in flight): rebuild all parity.
                self.stats.ec_holder_resyncs += 1;
                let s = h.store.layout().s();
                h.store.reset();
                h.base.iter_mut().for_each(|b| *b = 0);
                h.state = ParState::Syncing(new_sync(s));
                return;
            }
        }
        let up = from_wire(owner, seq, offset, delta, meta);
        let ok = match h.store.apply(&up) {
            Ok(_) => true,
            Err(ringlet_erasure::Error::SeqGap { .. }) => true, // ack what we have
            Err(_) => false,
        };
        let applied = h.store.last_seq(owner).unwrap_or(0);
        self.send(
            out,
            from,
            PeerBody::EcAck {
                memgest,
                pg,
                owner,
                seq: applied,
                ok,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ec_meta_req(
        &mut self,
        from: NodeId,
        msg: &PeerMsg,
        id: u64,
        memgest: MemgestId,
        pg: u32,
        owner: u32,
        after: Option<Vec<u8>>,
        out: &mut Vec<Output>,
    ) {
        let not_ready = PeerBody::EcMetaResp {
            id,
            ready: false,
            seq: 0,
            high_water: 0,
            keys: Vec::new(),
            next: None,
            pos: 0,
        };
        let epoch = self.epoch;
        if msg.epoch < epoch {
            return self.send(out, from, not_ready);
        }
        let Some(h) = self.ec_parity.get_mut(&(pg, memgest)) else {
            // A position given up while draining, kept until its new holder releases it:
            // it receives no updates, so there is nothing to fence. A node that has not
            // seen the asker's map yet may not have kept it yet: it says nothing (the
            // asker retries) rather than a not-ready.
            if msg.epoch > epoch {
                return;
            }
            let body = if let Some(h) = self.ec_retained.get(&(pg, memgest)) {
                meta_page(id, h, owner, after.as_deref())
            } else if let Some(d) = self
                .ec_retained_data
                .get(&(pg, memgest))
                .filter(|d| d.owner == owner)
            {
                arena_meta_page(id, d, after.as_deref())
            } else {
                not_ready
            };
            return self.send(out, from, body);
        };
        // Fence: from now on only `from` (or a newer epoch) may update this owner here.
        if after.is_none() {
            let newer = h.fences.get(&owner).is_none_or(|f| f.epoch < msg.epoch);
            if newer {
                h.fences.insert(
                    owner,
                    Fence {
                        epoch: msg.epoch,
                        node: from,
                        incarnation: msg.incarnation,
                    },
                );
            }
        }
        if !matches!(h.state, ParState::Ready) {
            return self.send(out, from, not_ready);
        }
        let body = meta_page(id, h, owner, after.as_deref());
        self.send(out, from, body);
    }

    /// A draining node's kept store of position `pos` of (`pg`, `memgest`) is released by
    /// the position's new holder.
    pub(super) fn on_ec_release(
        &mut self,
        from: NodeId,
        msg: &PeerMsg,
        memgest: MemgestId,
        pg: u32,
        pos: u32,
        out: &mut Vec<Output>,
    ) {
        // Not yet at the map that gave the position away: the store may not be kept yet,
        // and an answer now would let the new holder go on while it is kept afterwards.
        if msg.epoch > self.epoch {
            return;
        }
        let key = (pg, memgest);
        if self
            .ec_retained
            .get(&key)
            .is_some_and(|h| h.store.layout().s().saturating_add(h.q) == pos)
        {
            self.ec_retained.remove(&key);
            self.stats.ec_kept_released += 1;
        }
        if self
            .ec_retained_data
            .get(&key)
            .is_some_and(|d| d.owner == pos)
        {
            self.ec_retained_data.remove(&key);
            self.stats.ec_kept_released += 1;
        }
        self.send(out, from, PeerBody::EcReleased { memgest, pg, pos });
    }

    pub(super) fn on_ec_released(&mut self, from: NodeId, memgest: MemgestId, pg: u32, pos: u32) {
        if let Some(h) = self.ec_parity.get_mut(&(pg, memgest)) {
            if h.store.layout().s().saturating_add(h.q) == pos {
                if let ParState::Releasing { waiting, .. } = &mut h.state {
                    waiting.remove(&from);
                    if waiting.is_empty() {
                        h.state = ParState::Ready;
                        self.stats.ec_holder_syncs += 1;
                    }
                }
            }
        }
        if let Some(d) = self.ec_data.get_mut(&(pg, memgest)) {
            if d.owner == pos {
                if let DataState::Recovering(r) = &mut d.state {
                    if let Some((waiting, _)) = &mut r.release {
                        waiting.remove(&from);
                        if waiting.is_empty() {
                            d.state = DataState::Ready;
                            self.stats.ec_recoveries_completed += 1;
                        }
                    }
                }
            }
        }
    }
}

/// The next keys of `arena` after `after`, live keys and tombstones in key order, at most
/// one page; and whether more follow.
fn arena_keys_page(arena: &Arena, after: Option<&[u8]>) -> (Vec<EcKeyMeta>, bool) {
    let mut keys: Vec<EcKeyMeta> = arena
        .entries_after(after, EC_KEYS_PER_PAGE_MAX + 1)
        .into_iter()
        .map(|(k, m)| match m {
            Ok(m) => EcKeyMeta::live(k, &m),
            Err(version) => EcKeyMeta::tombstone(k, version),
        })
        .collect();
    let more = keys.len() > EC_KEYS_PER_PAGE_MAX;
    keys.truncate(EC_KEYS_PER_PAGE_MAX);
    (keys, more)
}

/// One page of a draining node's kept arena's key metadata (live keys and tombstones), as
/// the parity holders would give it: the loading successor of that position adopts it.
fn arena_meta_page(id: u64, d: &EcData, after: Option<&[u8]>) -> PeerBody {
    let (keys, more) = arena_keys_page(&d.arena, after);
    let next = if more {
        keys.last().map(|m| m.key.clone())
    } else {
        None
    };
    PeerBody::EcMetaResp {
        id,
        ready: true,
        seq: d.arena.last_seq(),
        high_water: d.arena.bytes().len() as u64,
        keys,
        next,
        pos: d.owner,
    }
}

/// One page of a parity store's key metadata for `owner` (an `EcMetaResp`): the next keys
/// after `after` of both lists (each read from its start position, not scanned from the
/// beginning), merged in key order.
fn meta_page(id: u64, h: &EcParity, owner: u32, after: Option<&[u8]>) -> PeerBody {
    {
        let lim = EC_KEYS_PER_PAGE_MAX + 1;
        let puts = h
            .store
            .keys_of_after(owner, after, lim)
            .into_iter()
            .map(|(k, m)| EcKeyMeta::live(k, &m));
        let tombs = h
            .store
            .tombstones_of_after(owner, after, lim)
            .into_iter()
            .map(|(k, v)| EcKeyMeta::tombstone(k, v));
        let mut keys: Vec<EcKeyMeta> = puts.chain(tombs).collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        let more = keys.len() > EC_KEYS_PER_PAGE_MAX;
        keys.truncate(EC_KEYS_PER_PAGE_MAX);
        let next = if more {
            keys.last().map(|m| m.key.clone())
        } else {
            None
        };
        PeerBody::EcMetaResp {
            id,
            ready: true,
            seq: h.store.last_seq(owner).unwrap_or(0),
            high_water: h.store.high_water(owner),
            keys,
            next,
            pos: h.store.layout().s().saturating_add(h.q),
        }
    }
}

impl<S: ReplicaStore> Replica<S> {
    // ------------------------------------------------------------------ reads of pieces

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ec_read_req(
        &mut self,
        from: NodeId,
        id: u64,
        memgest: MemgestId,
        pg: u32,
        seq: Option<u64>,
        ranges: Vec<EcRange>,
        out: &mut Vec<Output>,
    ) {
        let not_ready = PeerBody::EcReadResp {
            id,
            ready: false,
            seqs: Vec::new(),
            pieces: Vec::new(),
        };
        if ranges.len() > EC_READ_RANGES_MAX {
            return self.send(out, from, not_ready);
        }
        let cap = u64::from(limits::VALUE_BYTES_MAX);
        let total: u64 = ranges.iter().map(|r| u64::from(r.len)).sum();
        if total > cap {
            return self.send(out, from, not_ready);
        }
        match seq {
            None => {
                // A draining node's kept store answers as its holder would: it is current
                // until released (`ParState::Releasing`).
                let Some(h) = self
                    .ec_parity
                    .get(&(pg, memgest))
                    .or_else(|| self.ec_retained.get(&(pg, memgest)))
                else {
                    return self.send(out, from, not_ready);
                };
                if !matches!(h.state, ParState::Ready) {
                    return self.send(out, from, not_ready);
                }
                let cb = h.store.layout().chunk_bytes();
                let mut pieces = Vec::with_capacity(ranges.len());
                for r in &ranges {
                    let byte = u32::try_from(r.offset).unwrap_or(u32::MAX);
                    if !r.parity || byte.saturating_add(r.len) > cb {
                        return self.send(out, from, not_ready);
                    }
                    let mut buf = vec![0u8; r.len as usize];
                    let pc = ParityChunk {
                        holder: h.q,
                        index: r.index,
                    };
                    if !h.store.read(pc, byte, &mut buf) {
                        return self.send(out, from, not_ready);
                    }
                    pieces.push(buf);
                }
                let seqs = h.store.applied_seqs().to_vec();
                self.send(
                    out,
                    from,
                    PeerBody::EcReadResp {
                        id,
                        ready: true,
                        seqs,
                        pieces,
                    },
                );
            }
            Some(at) => {
                // A draining node's kept arena serves its successor's copy (at its last seq).
                let Some(d) = self
                    .ec_data
                    .get(&(pg, memgest))
                    .or_else(|| self.ec_retained_data.get(&(pg, memgest)))
                else {
                    return self.send(out, from, not_ready);
                };
                if !matches!(d.state, DataState::Ready) {
                    return self.send(out, from, not_ready);
                }
                let last = d.arena.last_seq();
                if at > last {
                    return self.send(out, from, not_ready);
                }
                // Updates after `at` that the holder had not applied: roll their deltas back.
                let later: Vec<&EcPend> = self
                    .pending
                    .values()
                    .filter_map(|p| p.ec.as_ref())
                    .filter(|e| e.pg == pg && e.memgest == memgest && e.seq > at)
                    .collect();
                if later.len() as u64 != last - at {
                    return self.send(out, from, not_ready); // some already forgotten
                }
                let mut pieces = Vec::with_capacity(ranges.len());
                for r in &ranges {
                    if r.parity || r.index != u64::from(d.owner) {
                        return self.send(out, from, not_ready);
                    }
                    let Ok(mut buf) = d.arena.read(r.offset, u64::from(r.len)) else {
                        return self.send(out, from, not_ready);
                    };
                    let rend = r.offset.saturating_add(u64::from(r.len));
                    for e in &later {
                        let eend = e.offset.saturating_add(e.delta.len() as u64);
                        let lo = r.offset.max(e.offset);
                        let hi = rend.min(eend);
                        for x in lo..hi {
                            let (Ok(bi), Ok(di)) =
                                (usize::try_from(x - r.offset), usize::try_from(x - e.offset))
                            else {
                                continue;
                            };
                            if let (Some(b), Some(dv)) = (buf.get_mut(bi), e.delta.get(di)) {
                                *b ^= *dv;
                            }
                        }
                    }
                    pieces.push(buf);
                }
                self.send(
                    out,
                    from,
                    PeerBody::EcReadResp {
                        id,
                        ready: true,
                        seqs: vec![at],
                        pieces,
                    },
                );
            }
        }
    }

    // ------------------------------------------------------------------ snapshots (sync)

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ec_sync_req(
        &mut self,
        from: NodeId,
        id: u64,
        memgest: MemgestId,
        pg: u32,
        offset: u64,
        after: Option<Vec<u8>>,
        out: &mut Vec<Output>,
    ) {
        let not_ready = PeerBody::EcSyncResp {
            id,
            ready: false,
            seq: 0,
            base: 0,
            total: 0,
            offset,
            bytes: Vec::new(),
            keys: Vec::new(),
            done: false,
        };
        let Some(d) = self.ec_data.get_mut(&(pg, memgest)) else {
            return self.send(out, from, not_ready);
        };
        if !matches!(d.state, DataState::Ready) || !d.holders.contains(&from) {
            return self.send(out, from, not_ready);
        }
        if offset == 0 && after.is_none() {
            if d.snapshots.len() >= EC_SNAPSHOTS_MAX && !d.snapshots.contains_key(&from) {
                return self.send(out, from, not_ready);
            }
            d.snapshots
                .insert(from, (d.arena.last_seq(), d.arena.clone()));
        }
        let base = d.base;
        let Some((seq, snap)) = d.snapshots.get(&from) else {
            return self.send(out, from, not_ready);
        };
        let seq = *seq;
        let total = snap.bytes().len() as u64;
        let (bytes, keys, done) = if offset < total {
            let end = offset.saturating_add(EC_SYNC_PAGE_BYTES).min(total);
            let b = snap
                .bytes()
                .get(offset as usize..end as usize)
                .unwrap_or(&[])
                .to_vec();
            (b, Vec::new(), false)
        } else {
            // Live keys and tombstones: a holder resynchronised from keys alone would miss
            // every delete from before its resync and hand a later takeover no tombstone
            // (seed 7334 of `ec_ttl`: an acknowledged delete lost).
            let (keys, more) = arena_keys_page(snap, after.as_deref());
            (Vec::new(), keys, !more)
        };
        if done {
            d.snapshots.remove(&from);
        }
        self.send(
            out,
            from,
            PeerBody::EcSyncResp {
                id,
                ready: true,
                seq,
                base,
                total,
                offset,
                bytes,
                keys,
                done,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ec_sync_resp(
        &mut self,
        from: NodeId,
        id: u64,
        ready: bool,
        seq: u64,
        base: u64,
        total: u64,
        offset: u64,
        bytes: Vec<u8>,
        keys: Vec<EcKeyMeta>,
        done: bool,
    ) {
        let Some(EcReq::Sync { pg, memgest, owner }) = self.ec_reqs.remove(&id) else {
            return;
        };
        let draining = self.draining_peers();
        let Some(h) = self.ec_parity.get_mut(&(pg, memgest)) else {
            return;
        };
        if h.group.get(owner as usize) != Some(&from) {
            return;
        }
        let s = h.store.layout().s();
        let ParState::Syncing(srcs) = &mut h.state else {
            return;
        };
        let Some(src) = srcs.get_mut(&owner) else {
            return;
        };
        if src.req_id != id || src.done {
            return;
        }
        let restart = |h: &mut EcParity| {
            h.store.reset();
            h.base.iter_mut().for_each(|b| *b = 0);
            h.state = ParState::Syncing(new_sync(s));
        };
        if !ready {
            if src.offset > 0 || src.keys_phase {
                restart(h); // the snapshot we were folding is gone: start over
            } else {
                src.req_id = u64::MAX; // wait for the retry timer
            }
            return;
        }
        match src.snap {
            None => src.snap = Some((seq, base)),
            Some(sb) if sb != (seq, base) => return restart(h),
            Some(_) => {}
        }
        if offset != src.offset {
            return;
        }
        if !bytes.is_empty() {
            if h.store.fold_snapshot(owner, offset, &bytes).is_err() {
                return restart(h);
            }
            let ParState::Syncing(srcs) = &mut h.state else {
                return;
            };
            let Some(src) = srcs.get_mut(&owner) else {
                return;
            };
            src.offset = offset.saturating_add(bytes.len() as u64);
            if src.offset >= total {
                src.keys_phase = true;
            }
            src.req_id = 0; // ask for the next page at once (on the next drive)
            return;
        }
        for k in &keys {
            let meta = KeyMeta {
                owner,
                offset: k.offset,
                len: k.len,
                version: k.version,
                kind: k.kind,
                expiry_ms: nz(k.expiry_ms),
            };
            let _ = h
                .store
                .restore_meta(&k.key, owner, (!k.tombstone).then_some(meta), k.version);
        }
        let ParState::Syncing(srcs) = &mut h.state else {
            return;
        };
        let Some(src) = srcs.get_mut(&owner) else {
            return;
        };
        src.keys_phase = true;
        src.offset = total;
        if let Some(last) = keys.last() {
            src.after = Some(last.key.clone());
        }
        src.req_id = 0;
        if done {
            src.done = true;
            let _ = h.store.set_last_seq(owner, seq);
            if let Some(b) = h.base.get_mut(owner as usize) {
                *b = base;
            }
            let ParState::Syncing(srcs) = &h.state else {
                return;
            };
            if srcs.values().all(|s| s.done) {
                h.state = if draining.is_empty() {
                    self.stats.ec_holder_syncs += 1;
                    ParState::Ready
                } else {
                    ParState::Releasing {
                        waiting: draining,
                        sent_ms: 0,
                    }
                };
            }
        }
    }

    // ------------------------------------------------------------------ takeover: metadata

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ec_meta_resp(
        &mut self,
        now_ms: u64,
        from: NodeId,
        id: u64,
        ready: bool,
        seq: u64,
        high_water: u64,
        keys: Vec<EcKeyMeta>,
        next: Option<Vec<u8>>,
        pos: u32,
    ) {
        let Some(EcReq::Meta { pg, memgest }) = self.ec_reqs.remove(&id) else {
            return;
        };
        let Some(d) = self.ec_data.get_mut(&(pg, memgest)) else {
            return;
        };
        // A current holder answers for its own position; a draining node for a position
        // it gave up (any of the memgest's M).
        // A current holder answers for its own position; a draining node for a position it
        // gave up: a parity position, or this one's arena.
        let s_pos = d.layout.s();
        let holder_ok = match d.holders.iter().position(|h| *h == from) {
            Some(q) => s_pos.saturating_add(q as u32) == pos,
            None => pos == d.owner || (pos >= s_pos && ((pos - s_pos) as usize) < d.holders.len()),
        };
        let DataState::Loading(l) = &mut d.state else {
            return;
        };
        let Some(src) = l.sources.get_mut(&from) else {
            return;
        };
        if src.req_id != id {
            return;
        }
        if !ready || !holder_ok {
            src.status = SrcStatus::NotReady;
            src.req_id = u64::MAX;
            src.sent_ms = now_ms;
            src.after = None;
            src.keys.clear();
            return;
        }
        if src.keys.len().saturating_add(keys.len()) > limits::TOMBSTONES_MAX as usize * 4 {
            src.status = SrcStatus::NotReady; // absurd metadata volume: not this source
            return;
        }
        src.keys.extend(keys);
        match next {
            Some(n) => {
                src.after = Some(n);
                src.req_id = 0;
            }
            None => {
                src.status = SrcStatus::Done {
                    seq,
                    high_water,
                    pos,
                };
                l.first_done_ms.get_or_insert(now_ms);
            }
        }
    }

    fn drive_ec_loads(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let retry = self.cfg.pull_retry_ms;
        let give_up_ms = self.cfg.rebuild_timeout_ms;
        let mut sends = Vec::new();
        let mut finished = Vec::new();
        let mut lost = Vec::new();
        for ((pg, mid), d) in self.ec_data.iter_mut() {
            let DataState::Loading(l) = &mut d.state else {
                continue;
            };
            if l.first_done_ms.is_none() && now_ms.saturating_sub(l.started_ms) >= give_up_ms {
                lost.push((*pg, *mid));
                continue;
            }
            let done = l
                .sources
                .values()
                .filter(|s| matches!(s.status, SrcStatus::Done { .. }))
                .count();
            let answered = l.sources.values().all(|s| s.status != SrcStatus::Waiting);
            let grace = l
                .first_done_ms
                .is_some_and(|t| now_ms.saturating_sub(t) >= retry.saturating_mul(3));
            if done > 0 && (answered || grace) {
                finished.push((*pg, *mid));
                continue;
            }
            for (node, s) in l.sources.iter_mut() {
                if matches!(s.status, SrcStatus::Done { .. }) {
                    continue;
                }
                if s.req_id == 0 || now_ms.saturating_sub(s.sent_ms) >= retry {
                    if s.status == SrcStatus::NotReady {
                        // Ask again: a not-ready holder may have caught up.
                        s.status = SrcStatus::Waiting;
                    }
                    self.next_id = self.next_id.wrapping_add(1);
                    s.req_id = self.next_id;
                    s.sent_ms = now_ms;
                    sends.push((
                        *node,
                        s.req_id,
                        PeerBody::EcMetaReq {
                            id: s.req_id,
                            memgest: *mid,
                            pg: *pg,
                            owner: d.owner,
                            after: s.after.clone(),
                        },
                        (*pg, *mid),
                    ));
                }
            }
        }
        for (node, id, body, (pg, memgest)) in sends {
            self.ec_reqs.insert(id, EcReq::Meta { pg, memgest });
            self.send(out, node, body);
        }
        for (pg, mid) in finished {
            self.finish_ec_load(pg, mid);
        }
        for (pg, mid) in lost {
            self.give_up_ec_load(pg, mid, out);
        }
    }

    /// No parity holder could answer within `rebuild_timeout_ms` (more failures than the
    /// memgest tolerates): serve an empty arena (`PossibleLoss`, Ring's "the app is told"),
    /// and make every holder rebuild its parity from scratch — an update with a base no
    /// holder can match makes each reset and resynchronise from the data nodes' snapshots,
    /// so parity matches the (now empty) arena again.
    fn give_up_ec_load(&mut self, pg: u32, mid: MemgestId, out: &mut Vec<Output>) {
        self.force_holder_resync(pg, mid, None, out);
    }

    /// Recovery made no progress for `rebuild_timeout_ms`: the rest of the arena cannot be
    /// decoded (more failures than the memgest tolerates). Keep the keys whose bytes were
    /// recovered, drop the others from the store and the arena (`PossibleLoss`), and make
    /// the holders rebuild their parity from the arenas as they now are.
    fn give_up_ec_recovery(&mut self, pg: u32, mid: MemgestId, out: &mut Vec<Output>) {
        let Some(d) = self.ec_data.get_mut(&(pg, mid)) else {
            return;
        };
        let DataState::Recovering(r) = &d.state else {
            return;
        };
        let cursor = r.cursor;
        let Ok(mut fresh) = Arena::new(d.layout, d.owner, d.arena.capacity()) else {
            return;
        };
        let mut lost = Vec::new();
        for (k, m) in d.arena.keys() {
            if m.offset.saturating_add(m.len) <= cursor {
                let _ = fresh.restore_key(k, m);
            } else {
                lost.push((k.to_vec(), m.version));
            }
        }
        for (k, v) in d.arena.tombstones() {
            let _ = fresh.restore_tombstone(k, v);
        }
        // Recovered bytes, copied in bounded pieces.
        let step = 1u64 << 20;
        let mut at = 0u64;
        while at < cursor {
            let n = step.min(cursor - at);
            if let Ok(b) = d.arena.read(at, n) {
                let _ = fresh.restore_bytes(at, &b);
            }
            at = at.saturating_add(n);
        }
        fresh.set_last_seq(d.arena.last_seq());
        d.arena = fresh;
        let lost_slots: Vec<Slot> = lost.iter().map(|(k, _)| key_slot(k)).collect();
        for (k, v) in lost {
            self.store.retire(&k, v);
        }
        // Readers waiting for decodes of this arena will not get them.
        let jobs: Vec<u64> = self
            .ec_jobs
            .iter()
            .filter(|(_, j)| j.pg == pg && j.memgest == mid)
            .map(|(id, _)| *id)
            .collect();
        for id in jobs {
            if let Some(j) = self.ec_jobs.remove(&id) {
                self.ec_reqs
                    .retain(|_, r| !matches!(r, EcReq::Job { job } if *job == id));
                for (client, rid, ..) in j.readers {
                    self.reply(out, client, rid, ClientReply::NotReady);
                }
            }
        }
        self.force_holder_resync(pg, mid, Some(lost_slots), out);
    }

    /// Serve the arena as it is (`Ready`), report `PossibleLoss` for the PG's coordinated
    /// ranges, and send an update with a base no holder can match: every holder resets and
    /// rebuilds its parity from the data nodes' snapshots, so parity matches the arenas.
    fn force_holder_resync(
        &mut self,
        pg: u32,
        mid: MemgestId,
        lost_slots: Option<Vec<Slot>>,
        out: &mut Vec<Output>,
    ) {
        let Some(d) = self.ec_data.get_mut(&(pg, mid)) else {
            return;
        };
        let base = d.arena.last_seq().saturating_add(1 << 32);
        d.arena.set_last_seq(base.saturating_add(1));
        d.base = base;
        d.state = DataState::Ready;
        let ec = EcPend {
            pg,
            memgest: mid,
            seq: base.saturating_add(1),
            owner: d.owner,
            offset: 0,
            delta: Vec::new(),
            meta: EcMeta::None,
            base,
            free: None,
            bg: true,
        };
        let targets = d.holders.clone();
        self.stats.possible_loss += 1;
        let ranges: Vec<(Slot, Slot)> = self
            .ranges
            .iter()
            .filter(|r| r.pg == pg && r.role == Role::Coordinator)
            .map(|r| (r.first, r.last))
            .collect();
        let Some(slot) = ranges.first().map(|r| r.0) else {
            return;
        };
        for (first, last) in ranges {
            let keys_lost = lost_slots
                .as_ref()
                .map(|s| s.iter().filter(|x| (first..=last).contains(*x)).count() as u64);
            out.push(Output::PossibleLoss {
                first,
                last,
                memgest: mid,
                keys_lost,
            });
        }
        let v = self.hlc.next(0);
        let entry = Entry {
            version: v,
            memgest: mid,
            value: None,
            expiry_ms: None,
            kind: ValueKind::String, // a pending marker, never stored
        };
        let now = self.last_now_ms;
        self.push_ec_pending(now, Vec::new(), slot, entry, None, targets, ec, None, out);
    }

    fn finish_ec_load(&mut self, pg: u32, mid: MemgestId) {
        // With a node draining, the arena takes no write before that node released any
        // copy it kept of this position (`Recover::release`).
        let no_draining = !self.any_draining();
        let Some(d) = self.ec_data.get_mut(&(pg, mid)) else {
            return;
        };
        let DataState::Loading(l) = &mut d.state else {
            return;
        };
        let s_pos = d.layout.s();
        let answers: Vec<(NodeId, u64, u64, u32)> = l
            .sources
            .iter()
            .filter_map(|(n, s)| match s.status {
                SrcStatus::Done {
                    seq,
                    high_water,
                    pos,
                } => Some((*n, seq, high_water, pos)),
                _ => None,
            })
            .collect();
        // The current parity holders are authoritative when any of them answered (the
        // takeover as it always was); a draining node's kept store — its parity, or the
        // arena of this position it gave up — is adopted only when none did, which is the
        // case it is kept for (a holder resynchronising or failed during the drain).
        let is_current =
            |n: &NodeId, pos: u32| pos >= s_pos && d.holders.get((pos - s_pos) as usize) == Some(n);
        let current: Vec<&(NodeId, u64, u64, u32)> = answers
            .iter()
            .filter(|(n, _, _, pos)| is_current(n, *pos))
            .collect();
        let done = if current.is_empty() {
            answers.iter().collect()
        } else {
            current
        };
        let Some(top) = done.iter().map(|(_, s, _, _)| *s).max() else {
            return;
        };
        let at_top = || done.iter().filter(|(_, s, _, _)| *s == top);
        let mut good: Vec<(u32, NodeId)> = Vec::new();
        for (n, _, _, pos) in at_top() {
            if *pos >= s_pos {
                let q = *pos - s_pos;
                if !good.iter().any(|(gq, _)| *gq == q) {
                    good.push((q, *n));
                }
            }
        }
        // A draining node's kept arena of this very position, at or past the adopted seq,
        // is copied rather than decoded, even when holders answered: a decode also needs
        // the group's other data nodes, which may be recovering too (a drain and a crash
        // in one group: each successor's decode waits for the other's bytes). Its bytes as
        // of `top` are read with its in-flight deltas rolled back (`on_ec_read_req`).
        let copy_from = answers
            .iter()
            .find(|(n, seq, _, pos)| *pos == d.owner && *seq >= top && !is_current(n, *pos))
            .map(|(n, ..)| *n);
        let Some(first_good) = good.first().map(|(_, n)| *n).or(copy_from) else {
            return;
        };
        let high_water = at_top().map(|(_, _, h, _)| *h).max().unwrap_or(0);
        let keys = l
            .sources
            .get_mut(&first_good)
            .map(|s| std::mem::take(&mut s.keys))
            .unwrap_or_default();
        d.arena.set_last_seq(top);
        d.base = top;
        d.state = if high_water == 0 && no_draining {
            DataState::Ready
        } else {
            DataState::Recovering(Recover {
                cursor: 0,
                high_water,
                good,
                copy_from,
                release: None,
                job: None,
                next_try_ms: 0,
                progress_ms: self.last_now_ms,
            })
        };
        let owner = d.owner;
        // A key the failed coordinator was moving from a memgest with more copies (rep:3 →
        // ec) may be on the holders while its old replicas still hold the previous version:
        // the move's second phase (retire them, then acknowledge) died with it. Adopting the
        // new version and serving it while two old replicas can still form a quorum-read
        // majority for the previous one makes a value visible and then lost (simulator seed
        // 8065). So an adopted key that supersedes a replicated copy this takeover pulled
        // (here, or in `note_stale_replicated` when the pull comes second) is retired on
        // the old replicas' positions first, as the write would have done; the range turns
        // Ready only once that is done.
        let map = self.map.clone();
        let copies = |m: MemgestId| map.as_ref().map_or(1, |map| map.copies(m));
        let ec_copies = copies(mid).max(1);
        for k in keys {
            let retire_older = self
                .store
                .head(&k.key)
                .is_some_and(|(v, m, _)| v < k.version && copies(m) > ec_copies);
            let entry = Entry {
                version: k.version,
                memgest: mid,
                value: (!k.tombstone).then(|| ec_ptr(k.offset, k.len)),
                // The expiry the parity holders kept: the key expires when it would have
                // on the failed coordinator (a tombstone has none).
                expiry_ms: k.expiry_ms.filter(|_| !k.tombstone),
                kind: k.kind,
            };
            let outcome = self.apply_local(&k.key, entry);
            if outcome == ApplyOutcome::Applied && retire_older {
                if let Some(d) = self.ec_data.get_mut(&(pg, mid)) {
                    d.retiring
                        .insert(k.key.clone(), (k.version, BTreeSet::new(), 0));
                }
            }
            if k.tombstone {
                // The arena hands its tombstones on to a holder it resynchronises later.
                if let Some(d) = self.ec_data.get_mut(&(pg, mid)) {
                    let _ = d.arena.restore_tombstone(&k.key, k.version);
                }
            }
            if outcome == ApplyOutcome::Applied && !k.tombstone {
                if let Some(d) = self.ec_data.get_mut(&(pg, mid)) {
                    let meta = KeyMeta {
                        owner,
                        offset: k.offset,
                        len: k.len,
                        version: k.version,
                        kind: k.kind,
                        expiry_ms: nz(k.expiry_ms),
                    };
                    if d.arena.restore_key(&k.key, meta).is_err() {
                        self.stats.ec_restore_conflicts += 1;
                    }
                }
            }
        }
        self.stats.ec_takeovers += 1;
    }

    // ------------------------------------------------------------------ decode jobs

    /// Start decoding `[offset, offset+len)` of our own (lost) arena from the survivors.
    #[allow(clippy::too_many_arguments)]
    fn start_job(
        &mut self,
        now_ms: u64,
        pg: u32,
        memgest: MemgestId,
        offset: u64,
        len: u64,
        background: bool,
        attempt: usize,
        out: &mut Vec<Output>,
    ) -> Option<u64> {
        let d = self.ec_data.get(&(pg, memgest))?;
        let DataState::Recovering(r) = &d.state else {
            return None;
        };
        // A draining node kept this position's arena: copy the window from it (once a copy
        // fails, `finish_job` stops copying if holders can decode instead).
        if let Some(src) = r.copy_from {
            let len32 = u32::try_from(len).ok()?;
            let (owner, at) = (d.owner, d.arena.last_seq());
            self.next_id = self.next_id.wrapping_add(1);
            let job_id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            let req = self.next_id;
            self.ec_reqs.insert(req, EcReq::Job { job: job_id });
            self.send(
                out,
                src,
                PeerBody::EcReadReq {
                    id: req,
                    memgest,
                    pg,
                    seq: Some(at),
                    ranges: vec![EcRange {
                        parity: false,
                        index: u64::from(owner),
                        offset,
                        len: len32,
                    }],
                },
            );
            self.ec_jobs.insert(
                job_id,
                Job {
                    sources: vec![SourceRange::Data {
                        node: owner,
                        offset,
                        len: len32,
                    }],
                    data_reqs: BTreeMap::from([(req, (owner, at))]),
                    phase2: true,
                    copy: true,
                    ..Job::new(pg, memgest, (offset, len), background, attempt, now_ms)
                },
            );
            return Some(job_id);
        }
        if r.good.is_empty() {
            return None;
        }
        // Rotate which good holder is the reference from attempt to attempt.
        let mut holders = r.good.clone();
        holders.rotate_left(attempt % r.good.len());
        let sources = rebuild_sources(&d.layout, d.owner, offset, len).ok()?;
        self.next_id = self.next_id.wrapping_add(1);
        let job_id = self.next_id;
        let mut parity_reqs = BTreeMap::new();
        for (q, node) in &holders {
            let ranges: Vec<EcRange> = sources
                .iter()
                .filter_map(|s| match s {
                    SourceRange::Parity { chunk, byte, len } if chunk.holder == *q => {
                        Some(EcRange {
                            parity: true,
                            index: chunk.index,
                            offset: u64::from(*byte),
                            len: *len,
                        })
                    }
                    _ => None,
                })
                .collect();
            self.next_id = self.next_id.wrapping_add(1);
            let req = self.next_id;
            parity_reqs.insert(req, *q);
            self.ec_reqs.insert(req, EcReq::Job { job: job_id });
            self.send(
                out,
                *node,
                PeerBody::EcReadReq {
                    id: req,
                    memgest,
                    pg,
                    seq: None,
                    ranges,
                },
            );
        }
        self.ec_jobs.insert(
            job_id,
            Job {
                holders,
                sources,
                parity_reqs,
                ..Job::new(pg, memgest, (offset, len), background, attempt, now_ms)
            },
        );
        Some(job_id)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ec_read_resp(
        &mut self,
        now_ms: u64,
        from: NodeId,
        id: u64,
        ready: bool,
        seqs: Vec<u64>,
        pieces: Vec<Vec<u8>>,
        out: &mut Vec<Output>,
    ) {
        let Some(EcReq::Job { job }) = self.ec_reqs.remove(&id) else {
            return;
        };
        let Some(j) = self.ec_jobs.get_mut(&job) else {
            return;
        };
        if let Some(q) = j.parity_reqs.remove(&id) {
            if j.holders.iter().find(|h| h.0 == q).map(|h| h.1) != Some(from) {
                return;
            }
            let ranges: Vec<(u64, u32, u32)> = j
                .sources
                .iter()
                .filter_map(|s| match s {
                    SourceRange::Parity { chunk, byte, len } if chunk.holder == q => {
                        Some((chunk.index, *byte, *len))
                    }
                    _ => None,
                })
                .collect();
            if ready && ranges.len() == pieces.len() {
                for ((index, byte, len), p) in ranges.into_iter().zip(pieces) {
                    j.parity.insert((q, index, byte, len), p);
                }
                j.seqs.insert(q, seqs);
            }
            if !j.parity_reqs.is_empty() {
                return; // wait for the other holders
            }
            if j.seqs.is_empty() {
                j.failed = true;
                return;
            }
            self.start_phase2(now_ms, job, out);
            return;
        }
        let Some((node, seq)) = j.data_reqs.remove(&id) else {
            return;
        };
        if j.holders.is_empty() && !j.copy {
            return;
        }
        let ranges: Vec<(u32, u64, u32)> = j
            .sources
            .iter()
            .filter_map(|s| match s {
                SourceRange::Data {
                    node: n,
                    offset,
                    len,
                } if *n == node => Some((*n, *offset, *len)),
                _ => None,
            })
            .collect();
        if ready && ranges.len() == pieces.len() {
            for ((n, o, l), p) in ranges.into_iter().zip(pieces) {
                j.data.insert((n, o, l, seq), p);
            }
        } else {
            // That survivor cannot help (itself recovering, or gone): decode without it.
            j.unavailable.insert(node);
        }
        if j.data_reqs.is_empty() {
            self.finish_job(now_ms, job, out);
        }
    }

    /// Phase 2 of a decode job: every surviving data node's pieces as of each seq a holder
    /// reported for it.
    fn start_phase2(&mut self, now_ms: u64, job: u64, out: &mut Vec<Output>) {
        let Some(j) = self.ec_jobs.get_mut(&job) else {
            return;
        };
        for r in std::mem::take(&mut j.parity_reqs).into_keys() {
            self.ec_reqs.remove(&r); // holders that did not answer in time are left out
        }
        if j.seqs.is_empty() {
            j.failed = true;
            return;
        }
        let mut by_node: BTreeMap<u32, Vec<EcRange>> = BTreeMap::new();
        for s in &j.sources {
            if let SourceRange::Data { node, offset, len } = s {
                by_node.entry(*node).or_default().push(EcRange {
                    parity: false,
                    index: u64::from(*node),
                    offset: *offset,
                    len: *len,
                });
            }
        }
        let Some(d) = self.ec_data.get(&(j.pg, j.memgest)) else {
            return;
        };
        let mut sends = Vec::new();
        for (node, ranges) in by_node {
            let Some(to) = d.group.get(node as usize).copied() else {
                j.unavailable.insert(node);
                continue;
            };
            let at: BTreeSet<u64> = j
                .seqs
                .values()
                .filter_map(|v| v.get(node as usize).copied())
                .collect();
            for seq in at {
                self.next_id = self.next_id.wrapping_add(1);
                j.data_reqs.insert(self.next_id, (node, seq));
                sends.push((to, self.next_id, seq, ranges.clone()));
            }
        }
        j.phase2 = true;
        j.sent_ms = now_ms;
        let (pg, memgest) = (j.pg, j.memgest);
        let complete = j.data_reqs.is_empty();
        for (to, rid, at, ranges) in sends {
            self.ec_reqs.insert(rid, EcReq::Job { job });
            self.send(
                out,
                to,
                PeerBody::EcReadReq {
                    id: rid,
                    memgest,
                    pg,
                    seq: Some(at),
                    ranges,
                },
            );
        }
        if complete {
            self.finish_job(now_ms, job, out);
        }
    }

    /// Parity of every usable holder, corrected to the reference holder `rq`'s state; and
    /// the reference seqs. Holders whose state differs for a data node we have no bytes of
    /// (lost or unavailable) are left out: their parity cannot be corrected.
    #[allow(clippy::type_complexity)]
    fn consistent_parity(
        j: &Job,
        rq: u32,
        layout: &Layout,
        codec: &Codec,
        owner: u32,
    ) -> Option<(Vec<u64>, BTreeMap<(u32, u64, u32, u32), Vec<u8>>)> {
        let reference = j.seqs.get(&rq)?.clone();
        let cb = u64::from(layout.chunk_bytes());
        let mut parity = BTreeMap::new();
        for (q, seqs) in &j.seqs {
            let differs: Vec<u32> = (0..layout.s())
                .filter(|i| seqs.get(*i as usize) != reference.get(*i as usize))
                .collect();
            let correctable = differs
                .iter()
                .all(|i| *i != owner && !j.unavailable.contains(i));
            if *q != rq && !correctable {
                continue;
            }
            for ((hq, index, byte, len), bytes) in j
                .parity
                .range((*q, 0, 0, 0)..=(*q, u64::MAX, u32::MAX, u32::MAX))
            {
                let mut b = bytes.clone();
                if *q != rq && !differs.is_empty() {
                    let cw = layout
                        .parity_codeword(ParityChunk {
                            holder: *hq,
                            index: *index,
                        })
                        .ok()?;
                    for p in 0..layout.k() {
                        let m = layout.member(cw, p).ok()?;
                        if !differs.contains(&m.node) {
                            continue;
                        }
                        let off = m.chunk.checked_mul(cb)?.checked_add(u64::from(*byte))?;
                        let here = j
                            .data
                            .get(&(m.node, off, *len, *seqs.get(m.node as usize)?))?;
                        let there =
                            j.data
                                .get(&(m.node, off, *len, *reference.get(m.node as usize)?))?;
                        let delta = ringlet_erasure::delta(there, here);
                        let coef = codec.coefficient(*q, p).ok()?;
                        ringlet_erasure::apply_delta(&mut b, coef, &delta, 0).ok()?;
                    }
                }
                parity.insert((*hq, *index, *byte, *len), b);
            }
        }
        Some((reference, parity))
    }

    fn finish_job(&mut self, now_ms: u64, job: u64, out: &mut Vec<Output>) {
        let no_draining = !self.any_draining();
        let Some(j) = self.ec_jobs.remove(&job) else {
            return;
        };
        let Some(d) = self.ec_data.get_mut(&(j.pg, j.memgest)) else {
            return;
        };
        let copied = j.copy.then(|| {
            j.data
                .iter()
                .find(|((n, o, l, _), _)| *n == d.owner && *o == j.offset && u64::from(*l) == j.len)
                .map(|(_, b)| b.clone())
        });
        let not_enough = ringlet_erasure::Error::NotEnoughShards {
            missing: d.layout.m().saturating_add(1),
            tolerated: d.layout.m(),
        };
        let decoded = if j.copy {
            copied.flatten().ok_or(not_enough)
        } else {
            // Each answering holder's state in turn as the reference, until one decodes:
            // holders may disagree on a data node's seq (a takeover adopted the newest
            // holder's state, and the other learns of it only at the next update), and
            // that data node can answer only its current seq. With a fixed reference the
            // retries repeated the one that cannot decode (simulator seed 117263: the
            // first holder one update behind on another data node, recovery gave up).
            let references: Vec<u32> = j
                .holders
                .iter()
                .map(|(q, _)| *q)
                .filter(|q| j.seqs.contains_key(q))
                .collect();
            let mut decoded = Err(not_enough);
            for rq in references {
                let Some((reference, parity)) =
                    Self::consistent_parity(&j, rq, &d.layout, &d.codec, d.owner)
                else {
                    continue;
                };
                decoded = rebuild_range(
                    &d.layout,
                    &d.codec,
                    &Fetched {
                        job: &j,
                        reference: &reference,
                        parity: &parity,
                    },
                    d.owner,
                    j.offset,
                    j.len,
                );
                if decoded.is_ok() {
                    break;
                }
            }
            decoded
        };
        let bytes = match decoded {
            Ok(b) => b,
            Err(_) => {
                // Not enough pieces (a survivor was missing): retry with another holder. A
                // failed copy (the kept arena could not be read as of the adopted seq, or
                // its node is gone) is not tried again where holders can decode.
                if j.copy {
                    if let DataState::Recovering(r) = &mut d.state {
                        if !r.good.is_empty() {
                            r.copy_from = None;
                        }
                    }
                }
                self.stats.ec_decode_retries += 1;
                return self.retry_job(now_ms, j, out);
            }
        };
        self.stats.ec_decoded_bytes += bytes.len() as u64;
        if j.background {
            if let DataState::Recovering(r) = &mut d.state {
                if r.job == Some(job) && r.cursor == j.offset {
                    let _ = d.arena.restore_bytes(j.offset, &bytes);
                    r.cursor = j.offset.saturating_add(j.len);
                    r.progress_ms = now_ms;
                    r.job = None;
                    // With a node draining, `drive_ec` releases it before the arena is Ready.
                    if r.cursor >= r.high_water && no_draining {
                        d.state = DataState::Ready;
                        self.stats.ec_recoveries_completed += 1;
                    }
                }
            }
        }
        for (client, id, replica, version, memgest, kind, expiry_ms) in j.readers {
            let body = if replica {
                ClientReply::Replica {
                    version,
                    memgest,
                    value: Some(bytes.clone()),
                    expiry_ms,
                    kind,
                }
            } else {
                ClientReply::Value {
                    version,
                    value: Some(bytes.clone()),
                    expiry_ms,
                    kind,
                }
            };
            self.reply(out, client, id, body);
        }
    }

    fn retry_job(&mut self, now_ms: u64, j: Job, out: &mut Vec<Output>) {
        let attempt = j.attempt.wrapping_add(1);
        if j.background {
            if let Some(d) = self.ec_data.get_mut(&(j.pg, j.memgest)) {
                if let DataState::Recovering(r) = &mut d.state {
                    r.job = None;
                    r.next_try_ms = now_ms.saturating_add(self.cfg.pull_retry_ms);
                }
            }
        }
        if j.readers.is_empty() {
            return;
        }
        match self.start_job(
            now_ms, j.pg, j.memgest, j.offset, j.len, false, attempt, out,
        ) {
            Some(nj) => {
                if let Some(n) = self.ec_jobs.get_mut(&nj) {
                    n.readers = j.readers;
                }
            }
            None => {
                for (client, id, ..) in j.readers {
                    self.reply(out, client, id, ClientReply::NotReady);
                }
            }
        }
    }

    /// Background recovery and job timeouts, bounded: one background window in flight per
    /// arena, failed or timed-out jobs retried.
    /// Sends the takeover retires (`EcData::retiring`): `Retire{key, adopted version}` to
    /// the cohort positions beyond the ec memgest's one copy up to the deepest replicated
    /// memgest's, resent every retransmit interval, at most `EC_KEYS_PER_PAGE_MAX` keys per
    /// call. A key is done once `depth − 1 − ⌊depth/2⌋` of them acknowledged (the move
    /// rule with `old = depth`, `new = 1`): the previous version can then never again form
    /// a quorum-read majority.
    fn drive_ec_takeover_retires(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let Some(map) = self.map.as_ref() else {
            return;
        };
        let depth = map.replica_depth();
        let every = self.cfg.retransmit_ms.max(1);
        // (arena, key, adopted version, replicas that acknowledged already)
        type Due = ((u32, MemgestId), Vec<u8>, Version, Vec<NodeId>);
        let mut due: Vec<Due> = Vec::new();
        for (dk, d) in &self.ec_data {
            for (key, (version, acked, sent)) in &d.retiring {
                if due.len() >= EC_KEYS_PER_PAGE_MAX {
                    break;
                }
                if *sent == 0 || now_ms.saturating_sub(*sent) >= every {
                    due.push((*dk, key.clone(), *version, acked.iter().copied().collect()));
                }
            }
        }
        let mut sends: Vec<(NodeId, Vec<u8>, Version)> = Vec::new();
        for (dk, key, version, acked) in due {
            let Some(r) = self.range(key_slot(&key)) else {
                continue;
            };
            for t in r.cohort.iter().take(depth).skip(1) {
                if !acked.contains(t) {
                    sends.push((*t, key.clone(), version));
                }
            }
            if let Some(e) = self
                .ec_data
                .get_mut(&dk)
                .and_then(|d| d.retiring.get_mut(&key))
            {
                e.2 = now_ms.max(1);
            }
        }
        for (t, key, version) in sends {
            self.send(out, t, PeerBody::Retire { key, version });
        }
    }

    /// A takeover's rebuild pulled a replicated copy of `key` older than the ec entry this
    /// node adopted from the holders (see `finish_ec_load`): retire it on the old replicas
    /// before the range serves.
    pub(super) fn note_stale_replicated(&mut self, key: &[u8], pulled: &Entry) {
        let Some(map) = self.map.as_ref() else {
            return;
        };
        let Some(cur) = self.store.get(key) else {
            return;
        };
        if cur.version <= pulled.version
            || map.copies(pulled.memgest) <= map.copies(cur.memgest).max(1)
            || !matches!(map.memgest_kind(cur.memgest), MemgestKind::Ec { .. })
        {
            return;
        }
        let Some(pg) = self.range(key_slot(key)).map(|r| r.pg) else {
            return;
        };
        if let Some(d) = self.ec_data.get_mut(&(pg, cur.memgest)) {
            d.retiring
                .entry(key.to_vec())
                .or_insert((cur.version, BTreeSet::new(), 0));
        }
    }

    /// A replica's answer to a takeover retire; `true` if it was one.
    pub(super) fn on_ec_takeover_retire_ack(
        &mut self,
        from: NodeId,
        key: &[u8],
        version: Version,
        ok: bool,
    ) -> bool {
        let Some(map) = self.map.as_ref() else {
            return false;
        };
        let depth = map.replica_depth();
        let slot = key_slot(key);
        let Some(r) = self.range(slot) else {
            return false;
        };
        let targets: Vec<NodeId> = r.cohort.iter().take(depth).skip(1).copied().collect();
        let needed = depth
            .saturating_sub(1)
            .saturating_sub(depth / 2)
            .min(targets.len());
        let pg = r.pg;
        let mut hit = false;
        for ((p, _), d) in self.ec_data.iter_mut() {
            if *p != pg {
                continue;
            }
            let Some((v, acked, _)) = d.retiring.get_mut(key) else {
                continue;
            };
            if *v != version {
                continue;
            }
            hit = true;
            if ok && targets.contains(&from) {
                acked.insert(from);
            }
            if acked.iter().filter(|n| targets.contains(n)).count() >= needed {
                d.retiring.remove(key);
            }
        }
        hit
    }

    pub(super) fn drive_ec(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        self.drive_ec_releases(now_ms, out);
        self.drive_ec_takeover_retires(now_ms, out);
        self.drive_ec_loads(now_ms, out);
        self.drive_ec_syncs(now_ms, out);
        let timeout = self.cfg.pull_retry_ms.saturating_mul(2);
        let stale: Vec<u64> = self
            .ec_jobs
            .iter()
            .filter(|(_, j)| j.failed || now_ms.saturating_sub(j.sent_ms) >= timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            // A late answer is treated as a missing survivor: phase 1 goes on with the
            // holders that answered, phase 2 decodes without the data nodes that did not.
            let next = match self.ec_jobs.get_mut(&id) {
                Some(j) if !j.failed && !j.phase2 && !j.seqs.is_empty() => 1,
                Some(j) if !j.failed && j.phase2 && !j.data_reqs.is_empty() => {
                    for (_, (node, _)) in std::mem::take(&mut j.data_reqs) {
                        j.unavailable.insert(node);
                    }
                    2
                }
                _ => 0,
            };
            match next {
                1 => self.start_phase2(now_ms, id, out),
                2 => {
                    self.ec_reqs
                        .retain(|_, r| !matches!(r, EcReq::Job { job } if *job == id));
                    self.finish_job(now_ms, id, out);
                }
                _ => {
                    if let Some(j) = self.ec_jobs.remove(&id) {
                        self.ec_reqs
                            .retain(|_, r| !matches!(r, EcReq::Job { job } if *job == id));
                        self.retry_job(now_ms, j, out);
                    }
                }
            }
        }
        let give_up_ms = self.cfg.rebuild_timeout_ms;
        let stalled: Vec<(u32, MemgestId)> = self
            .ec_data
            .iter()
            .filter(|(_, d)| {
                matches!(&d.state, DataState::Recovering(r)
                    if r.cursor < r.high_water
                        && now_ms.saturating_sub(r.progress_ms) >= give_up_ms)
            })
            .map(|(k, _)| *k)
            .collect();
        for (pg, mid) in stalled {
            self.give_up_ec_recovery(pg, mid, out);
        }
        let starts: Vec<(u32, MemgestId, u64, u64)> = self
            .ec_data
            .iter()
            .filter_map(|((pg, mid), d)| match &d.state {
                DataState::Recovering(r)
                    if r.job.is_none() && r.cursor < r.high_water && now_ms >= r.next_try_ms =>
                {
                    let len = r
                        .high_water
                        .saturating_sub(r.cursor)
                        .min(EC_RECOVER_WINDOW_BYTES);
                    Some((*pg, *mid, r.cursor, len))
                }
                _ => None,
            })
            .collect();
        for (pg, mid, cursor, len) in starts {
            let attempt = (cursor / EC_RECOVER_WINDOW_BYTES) as usize;
            let job = self.start_job(now_ms, pg, mid, cursor, len, true, attempt, out);
            if let Some(d) = self.ec_data.get_mut(&(pg, mid)) {
                if let DataState::Recovering(r) = &mut d.state {
                    r.job = job;
                    if job.is_none() {
                        r.next_try_ms = now_ms.saturating_add(self.cfg.pull_retry_ms);
                    }
                }
            }
        }
    }

    /// Data positions whose bytes are all back, while a node is draining: release any copy
    /// the draining nodes kept of the position before the arena takes writes (a node that
    /// left Draining keeps nothing).
    fn drive_ec_releases(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let retry = self.cfg.pull_retry_ms;
        let draining = self.draining_peers();
        let mut sends = Vec::new();
        for ((pg, mid), d) in self.ec_data.iter_mut() {
            let DataState::Recovering(r) = &mut d.state else {
                continue;
            };
            if r.cursor < r.high_water {
                continue;
            }
            let (waiting, sent_ms) = r.release.get_or_insert_with(|| (draining.clone(), 0));
            let Some(to) = release_step(waiting, sent_ms, &draining, now_ms, retry) else {
                d.state = DataState::Ready;
                self.stats.ec_recoveries_completed += 1;
                continue;
            };
            let body = PeerBody::EcRelease {
                memgest: *mid,
                pg: *pg,
                pos: d.owner,
            };
            sends.extend(to.into_iter().map(|n| (n, body.clone())));
        }
        for (to, body) in sends {
            self.send(out, to, body);
        }
    }

    fn drive_ec_syncs(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let retry = self.cfg.pull_retry_ms;
        let mut sends = Vec::new();
        let draining = self.draining_peers();
        let mut releases = Vec::new();
        for ((pg, mid), h) in self.ec_parity.iter_mut() {
            if let ParState::Releasing { waiting, sent_ms } = &mut h.state {
                match release_step(waiting, sent_ms, &draining, now_ms, retry) {
                    None => {
                        h.state = ParState::Ready;
                        self.stats.ec_holder_syncs += 1;
                    }
                    Some(to) => {
                        let body = PeerBody::EcRelease {
                            memgest: *mid,
                            pg: *pg,
                            pos: h.store.layout().s().saturating_add(h.q),
                        };
                        releases.extend(to.into_iter().map(|n| (n, body.clone())));
                    }
                }
                continue;
            }
            let ParState::Syncing(srcs) = &mut h.state else {
                continue;
            };
            for (owner, s) in srcs.iter_mut() {
                if s.done {
                    continue;
                }
                if s.req_id == 0 || now_ms.saturating_sub(s.sent_ms) >= retry {
                    let Some(to) = h.group.get(*owner as usize).copied() else {
                        continue;
                    };
                    self.next_id = self.next_id.wrapping_add(1);
                    s.req_id = self.next_id;
                    s.sent_ms = now_ms;
                    sends.push((
                        to,
                        s.req_id,
                        *owner,
                        PeerBody::EcSyncReq {
                            id: s.req_id,
                            memgest: *mid,
                            pg: *pg,
                            offset: s.offset,
                            after: s.after.clone(),
                        },
                        (*pg, *mid),
                    ));
                }
            }
        }
        for (to, id, owner, body, (pg, memgest)) in sends {
            self.ec_reqs.insert(id, EcReq::Sync { pg, memgest, owner });
            self.send(out, to, body);
        }
        for (to, body) in releases {
            self.send(out, to, body);
        }
    }

    // ------------------------------------------------------------------ reads

    /// The committed value of an ec entry: `Ok(bytes)` if its bytes are here, `Err(true)`
    /// if they must be decoded first, `Err(false)` if the arena is not loaded.
    pub(super) fn ec_value(&self, key: &[u8], e: &Entry) -> Result<Vec<u8>, bool> {
        let Some((offset, len)) = e.value.as_deref().and_then(parse_ptr) else {
            return Ok(Vec::new());
        };
        let Some(pg) = self.ec_pg_for(key_slot(key)) else {
            return Err(false);
        };
        let Some(d) = self.ec_data.get(&(pg, e.memgest)) else {
            return Err(false);
        };
        let available = match &d.state {
            DataState::Ready => true,
            DataState::Recovering(r) => offset.saturating_add(len) <= r.cursor,
            DataState::Loading(_) => return Err(false),
        };
        if !available {
            return Err(true);
        }
        d.arena.read(offset, len).map_err(|_| false)
    }

    /// The group whose arena holds this node's committed ec values of `slot`: the range's
    /// group while this node coordinates it; for a span it handed off (the map still
    /// lists the handoff), the group it coordinated the span in before the move. The
    /// range's current group would be wrong there: the simulator found ec pointers of a
    /// moved span resolved against another arena of the old coordinator (wrong bytes).
    pub(super) fn ec_pg_for(&self, slot: Slot) -> Option<u32> {
        let r = self.range(slot)?;
        if r.role == Role::Coordinator {
            return Some(r.pg);
        }
        let handed = self.map.as_ref().and_then(|m| {
            m.handoffs
                .iter()
                .rev()
                .find(|h| h.first <= slot && slot <= h.last)
                .map(|h| h.from_pg)
        });
        Some(handed.unwrap_or(r.pg))
    }

    // ------------------------------------------------------------------ moves

    /// A pulled ec entry of a handed-off span (its old coordinator sent it decoded):
    /// re-encode it in this node's arena of `pg`, the span's new group, keeping its
    /// version, as a write without a client: it commits (store pointer, reads) once this
    /// group's M parity holders acknowledged it, like any ec write.
    ///
    /// `Ok(Some(version))`: in flight (the pull waits for it); `Ok(None)`: nothing to do
    /// (this node holds that version or a newer one, or a tombstone of a key no arena here
    /// names, applied at once); `Err(())`: the arena cannot take it now (recovering, full,
    /// or it names a newer uncommitted version): ask the source again later.
    pub(super) fn reencode_ec(
        &mut self,
        now_ms: u64,
        pg: u32,
        key: Vec<u8>,
        e: Entry,
        out: &mut Vec<Output>,
    ) -> Result<Option<Version>, ()> {
        if self.pending.get(&e.version).is_some_and(|p| !p.committed) {
            return Ok(Some(e.version));
        }
        if let Some(c) = self.latest_entry(&key).filter(|c| c.version >= e.version) {
            // An ec pointer at that version is ours only if it points into THIS group's
            // arena. A node that coordinated the span before, gave it away and stayed in
            // the new cohort as a replica never purged it (only given-away ranges with no
            // role are): its store still holds the old pointer, at the same version, aimed
            // at the old group's arena. Taking the span back, it would resolve that pointer
            // in the new group's arena and serve other bytes (sim seed 7365: zeros).
            let stale = !self.uncommitted.contains_key(&key)
                && self.is_ec_value(&c)
                && self
                    .ec_data
                    .get(&(pg, c.memgest))
                    .and_then(|d| d.arena.meta(&key))
                    .is_none_or(|m| m.version != c.version);
            if !stale {
                return Ok(None);
            }
            // Forget it (no tombstone, so the same version applies again) and retire it
            // from whichever old arena still names it, now: once the re-encode below is in
            // flight or committed, `retire_ec_leftovers` leaves the key alone.
            self.store.forget(&key);
            let queued = std::mem::replace(&mut self.ec_leftovers, vec![(key.clone(), c)]);
            self.retire_ec_leftovers(out);
            // Only this key now: others queued (a delta's reset slot) may come back at
            // their version in the same page.
            self.ec_leftovers = queued;
        }
        let slot = key_slot(&key);
        let Some(d) = self.ec_data.get_mut(&(pg, e.memgest)) else {
            return Err(());
        };
        if !matches!(d.state, DataState::Ready) {
            return Err(());
        }
        match d.arena.meta(&key) {
            // This arena names the key at exactly this version and nothing is in flight for
            // it: a re-encode of the copy before the switch committed it here, and a delta
            // reset then forgot the store's pointer (the source resent the slot whole).
            // Same version, same write: point at the bytes again, no parity traffic.
            Some(m) if m.version == e.version && e.value.is_some() => {
                if self.uncommitted.contains_key(&key) {
                    return Err(());
                }
                let entry = Entry {
                    version: e.version,
                    memgest: e.memgest,
                    expiry_ms: e.expiry_ms,
                    kind: e.kind,
                    value: Some(ec_ptr(m.offset, m.len)),
                };
                self.hlc.observe(e.version);
                let _ = self.apply_local(&key, entry);
                return Ok(None);
            }
            // A newer version than the one sent (no store entry holds it: a copy whose
            // slot was reset): the source's is authoritative. Retire this one first (the
            // holders apply in sequence order: the retire, then the put below).
            Some(m) if m.version >= e.version && !self.uncommitted.contains_key(&key) => {
                let stale = Entry {
                    version: m.version,
                    memgest: e.memgest,
                    value: Some(ec_ptr(m.offset, m.len)),
                    expiry_ms: None,
                    kind: m.kind,
                };
                let queued = std::mem::replace(&mut self.ec_leftovers, vec![(key.clone(), stale)]);
                self.retire_ec_leftovers(out);
                self.ec_leftovers = queued;
            }
            _ => {}
        }
        let Some(d) = self.ec_data.get_mut(&(pg, e.memgest)) else {
            return Err(());
        };
        let staged = match &e.value {
            Some(v) => d
                .arena
                .put_deferred(&key, e.version, v, e.kind, nz(e.expiry_ms)),
            None if d.arena.meta(&key).is_some() => d.arena.remove_deferred(&key, e.version, false),
            // A tombstone of a key this group never held goes to the parity holders too, as
            // a client's delete of such a key does (`write_ec`): kept only in this node's
            // store, it died with it, and the next coordinator of the span (rebuilt from
            // the holders) had no trace of an acknowledged delete (sim seed 24215).
            None => Ok((
                d.arena.meta_update(MetaChange::Delete {
                    key: key.clone(),
                    version: e.version,
                }),
                None,
            )),
        };
        let Ok((up, free)) = staged else {
            return Err(());
        };
        let stored = match (&e.value, &up.meta) {
            (Some(_), Some(MetaChange::Put { meta, .. })) => Some(ec_ptr(meta.offset, meta.len)),
            _ => None,
        };
        let ec = EcPend {
            pg,
            memgest: e.memgest,
            seq: up.seq,
            owner: d.owner,
            offset: up.offset,
            meta: to_wire_meta(&up.meta),
            delta: up.delta,
            base: d.base,
            free,
            bg: false,
        };
        let targets = d.holders.clone();
        let entry = Entry {
            version: e.version,
            memgest: e.memgest,
            expiry_ms: e.expiry_ms,
            kind: if stored.is_some() {
                e.kind
            } else {
                ValueKind::String
            },
            value: stored,
        };
        self.hlc.observe(e.version);
        self.stats.move_ec_reencoded += 1;
        self.push_ec_pending(now_ms, key, slot, entry, None, targets, ec, None, out);
        Ok(Some(e.version))
    }

    /// Drop re-encodes that ended from their pulls' waiting lists. One that ended without
    /// its value in the store (abandoned: a fence or a map change took it) makes the pull
    /// ask its sources again from the start (what arrived since is skipped then).
    pub(super) fn settle_reencodes(&mut self, now_ms: u64) {
        for ri in 0..self.ranges.len() {
            let Some(Status::Pulling(p)) = self.ranges.get(ri).map(|r| &r.status) else {
                continue;
            };
            if p.ec_reencoding.is_empty() {
                continue;
            }
            let mut ended = Vec::new();
            let mut lost = false;
            for (v, key) in &p.ec_reencoding {
                if self.pending.get(v).is_some_and(|x| !x.committed) {
                    continue;
                }
                ended.push(*v);
                if self.store.get(key).is_none_or(|c| c.version < *v) {
                    lost = true;
                }
            }
            let Some(Status::Pulling(p)) = self.ranges.get_mut(ri).map(|r| &mut r.status) else {
                continue;
            };
            for v in ended {
                p.ec_reencoding.remove(&v);
            }
            if lost {
                for s in p.sources.values_mut() {
                    s.done = false;
                    s.after = None;
                    s.req_id = u64::MAX;
                    s.sent_ms = now_ms;
                }
            }
        }
    }

    /// Retire the arena metadata of ec entries the store forgot (a given-away span purged,
    /// a copy or rebuild wiped): freed here once the parity holders dropped it, so no
    /// takeover of this arena restores them later. An arena of a group in which this node
    /// coordinates the key's slot is left alone unless its metadata is not newer than the
    /// forgotten entry (a newer one belongs to a write of this node). Keys with a write in
    /// flight here are left to it; arenas not Ready accept no update (a leak, not a wrong
    /// value: cluster-resharding.md).
    pub(super) fn retire_ec_leftovers(&mut self, out: &mut Vec<Output>) {
        let items = std::mem::take(&mut self.ec_leftovers);
        for (key, e) in items {
            if self.uncommitted.contains_key(&key) || self.store.get(&key).is_some() {
                continue;
            }
            let slot = key_slot(&key);
            let mine = self
                .range(slot)
                .filter(|r| r.role == Role::Coordinator)
                .map(|r| r.pg);
            let arenas: Vec<u32> = self
                .ec_data
                .iter()
                .filter(|((pg, m), d)| {
                    *m == e.memgest
                        && matches!(d.state, DataState::Ready)
                        && d.arena
                            .meta(&key)
                            .is_some_and(|km| Some(*pg) != mine || km.version <= e.version)
                })
                .map(|((pg, _), _)| *pg)
                .collect();
            for pg in arenas {
                let Some(d) = self.ec_data.get_mut(&(pg, e.memgest)) else {
                    continue;
                };
                let Some(ver) = d.arena.meta(&key).map(|km| km.version) else {
                    continue;
                };
                let Ok((up, free)) = d.arena.remove_deferred(&key, ver, true) else {
                    continue;
                };
                let ec = EcPend {
                    pg,
                    memgest: e.memgest,
                    seq: up.seq,
                    owner: d.owner,
                    offset: up.offset,
                    meta: to_wire_meta(&up.meta),
                    delta: up.delta,
                    base: d.base,
                    free,
                    bg: true,
                };
                let targets = d.holders.clone();
                // A fresh version only names the pending entry (never stored).
                let v = self.hlc.next(0);
                let marker = Entry {
                    version: v,
                    memgest: e.memgest,
                    value: None,
                    expiry_ms: None,
                    kind: ValueKind::String,
                };
                let last = self.last_now_ms;
                self.stats.move_ec_retired += 1;
                self.push_ec_pending(
                    last,
                    key.clone(),
                    slot,
                    marker,
                    None,
                    targets,
                    ec,
                    None,
                    out,
                );
            }
        }
    }

    /// Answer a read of an ec entry whose bytes must be decoded: join or start a job.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ec_read_later(
        &mut self,
        now_ms: u64,
        client: u64,
        id: ReqId,
        key: &[u8],
        e: &Entry,
        replica: bool,
        out: &mut Vec<Output>,
    ) {
        let Some((offset, len)) = e.value.as_deref().and_then(parse_ptr) else {
            return self.reply(out, client, id, ClientReply::NotReady);
        };
        let Some(pg) = self.range(key_slot(key)).map(|r| r.pg) else {
            return self.reply(out, client, id, ClientReply::NotReady);
        };
        let reader = (
            client,
            id,
            replica,
            e.version,
            e.memgest,
            e.kind,
            e.expiry_ms,
        );
        if let Some(j) = self.ec_jobs.values_mut().find(|j| {
            !j.background
                && j.pg == pg
                && j.memgest == e.memgest
                && j.offset == offset
                && j.len == len
        }) {
            j.readers.push(reader);
            return;
        }
        if self.ec_jobs.len() >= EC_DECODE_JOBS_MAX {
            return self.reply(out, client, id, ClientReply::Busy);
        }
        match self.start_job(now_ms, pg, e.memgest, offset, len, false, 0, out) {
            Some(j) => {
                self.stats.ec_decodes_on_demand += 1;
                if let Some(j) = self.ec_jobs.get_mut(&j) {
                    j.readers.push(reader);
                }
            }
            None => self.reply(out, client, id, ClientReply::NotReady),
        }
    }

    /// Invariants of the ec state (called from `check_invariants`).
    pub(super) fn ec_check_invariants(&self) {
        for d in self.ec_data.values() {
            d.arena.check_invariants();
        }
        for h in self.ec_parity.values() {
            h.store.check_invariants();
        }
        assert!(self.ec_jobs.len() <= EC_DECODE_JOBS_MAX + self.ec_data.len());
    }

    /// Sum of value lengths the parity holders here describe in their metadata copies.
    pub fn ec_described_payload_bytes(&self) -> u64 {
        self.ec_parity
            .values()
            .map(|h| h.store.described_payload_bytes())
            .sum()
    }

    /// This node's ec arenas that are still loading or being decoded (after a takeover):
    /// 0 once every value it coordinates is readable without a decode.
    pub fn ec_arenas_not_ready(&self) -> u64 {
        self.ec_data
            .values()
            .filter(|d| !matches!(d.state, DataState::Ready))
            .count() as u64
    }

    /// Memory accounting of every arena and parity store here.
    pub fn ec_accounting(&self) -> ringlet_erasure::Accounting {
        let mut a = ringlet_erasure::Accounting::default();
        for d in self.ec_data.values() {
            a = a.plus(&d.arena.accounting());
        }
        for h in self.ec_parity.values() {
            a = a.plus(&h.store.accounting());
        }
        a
    }
}

/// One step of releasing a position's kept copies (`ParState::Releasing`, `Recover::release`):
/// a node that left Draining (removed, failed, back to active) keeps nothing and is dropped
/// from `waiting`. `None`: nobody is left (the caller turns Ready). Otherwise the nodes to
/// send `EcRelease` to now — all of them once per `retry` ms, none in between.
fn release_step(
    waiting: &mut BTreeSet<NodeId>,
    sent_ms: &mut u64,
    draining: &BTreeSet<NodeId>,
    now_ms: u64,
    retry: u64,
) -> Option<Vec<NodeId>> {
    waiting.retain(|n| draining.contains(n));
    if waiting.is_empty() {
        return None;
    }
    if *sent_ms != 0 && now_ms.saturating_sub(*sent_ms) < retry {
        return Some(Vec::new());
    }
    *sent_ms = now_ms.max(1);
    Some(waiting.iter().copied().collect())
}

fn new_sync(s: u32) -> BTreeMap<u32, SyncSrc> {
    (0..s)
        .map(|o| {
            (
                o,
                SyncSrc {
                    req_id: 0,
                    offset: 0,
                    after: None,
                    keys_phase: false,
                    sent_ms: 0,
                    snap: None,
                    done: false,
                },
            )
        })
        .collect()
}

/// Whether an entry of `Replica::ec_acks` still names a pending ec update: the write at that
/// version is pending, is an ec update, and is this (group, memgest, seq)'s.
fn ec_ack_live(
    pending: &BTreeMap<Version, Pending>,
    (pg, memgest, seq, v): (u32, MemgestId, u64, Version),
) -> bool {
    pending
        .get(&v)
        .and_then(|p| p.ec.as_ref())
        .is_some_and(|e| e.pg == pg && e.memgest == memgest && e.seq == seq)
}
