//! Messages in and out of the replica core. The server encodes these on its peer links and
//! client connections; the simulator passes them by value.

use crate::store::Entry;
use ringlet_types::{Epoch, MemgestId, NodeId, Slot, ValueKind, Version};

/// Client request identity: retries of one operation carry the same id, so the coordinator
/// applies it once (dedup table) and answers the retry with the first answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReqId {
    pub client: u64,
    pub seq: u64,
}

/// A client operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientOp {
    /// Read at the coordinator: the newest committed version.
    Get { key: Vec<u8> },
    /// Quorum-read leg: this node's version (and value) of `key`. Any Ready cohort member
    /// answers; the client decides (majority of versions, data from the first responder).
    ReadReplica { key: Vec<u8> },
    /// Write `value` under `memgest` (the map's default when `None`).
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        memgest: Option<MemgestId>,
        /// Expiry, unix wall-clock ms (`None`: the value does not expire).
        expiry_ms: Option<u64>,
        /// A byte string or an encoded record.
        kind: ValueKind,
    },
    /// Active expiry (the coordinator's driver): delete `key` only if its newest entry is
    /// still `version` — a write that renewed the key meanwhile is not undone.
    Expire { key: Vec<u8>, version: Version },
    /// Delete: a tombstone with a new version.
    Delete { key: Vec<u8> },
    /// Compare-and-set: write `value` (a delete when `None`) only if the key's newest entry,
    /// writes in flight included, is live at version `expect`; else `Unchanged`. The
    /// coordinator's core decides, so no other write of the key can slip in between the
    /// check and the write (a front's lock would not see native blind writes).
    SetIf {
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        memgest: Option<MemgestId>,
        expiry_ms: Option<u64>,
        kind: ValueKind,
        expect: Version,
    },
}

impl ClientOp {
    pub fn key(&self) -> &[u8] {
        match self {
            ClientOp::Get { key }
            | ClientOp::ReadReplica { key }
            | ClientOp::Set { key, .. }
            | ClientOp::Delete { key }
            | ClientOp::SetIf { key, .. }
            | ClientOp::Expire { key, .. } => key,
        }
    }
}

/// A client request: the client's map epoch must equal the node's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRequest {
    pub id: ReqId,
    pub epoch: Epoch,
    pub op: ClientOp,
}

/// Answer to a client. Variants say whether the operation definitely did not happen
/// (`StaleEpoch`, `NotCoordinator`, `NotReady`, `Busy`, `TooLarge`, `NoSuchMemgest`: safe to
/// retry anywhere) or might have (`Ambiguous`: the write may still take effect).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientReply {
    /// Get: the committed value (`None`: not found / deleted) and its version.
    Value {
        version: Version,
        value: Option<Vec<u8>>,
        /// The value's expiry (unix ms); a front answers an expired value as absent.
        expiry_ms: Option<u64>,
        kind: ValueKind,
    },
    /// ReadReplica: this node's state for the key.
    Replica {
        version: Version,
        memgest: MemgestId,
        value: Option<Vec<u8>>,
        expiry_ms: Option<u64>,
        kind: ValueKind,
    },
    /// Expire: the key was renewed or deleted meanwhile; nothing was done.
    Unchanged,
    /// Set/Delete committed under its memgest's rule.
    Written {
        version: Version,
    },
    /// Client and node disagree on the epoch; `current` is the node's.
    StaleEpoch {
        current: Epoch,
    },
    /// This node does not coordinate the key's slot in this epoch (or lost its lease).
    NotCoordinator,
    /// The node has the role but is still rebuilding/syncing the slot: retry shortly.
    NotReady,
    /// In-flight replication limits reached; nothing was done.
    Busy,
    /// Key or value beyond `ringlet_types::limits`.
    TooLarge,
    NoSuchMemgest,
    /// The memgest cannot serve this write here (an `ec:K+M` memgest with no arena on
    /// this PG: its K does not fit the PG's data nodes). Nothing was written.
    Unsupported,
    /// The coordinator lost its role with this write in flight: it may or may not commit.
    /// `version` is the one the write was given: versions are unique, so a front can ask the
    /// new coordinator whether it serves exactly this one (`crates/cluster/src/resolve.rs`).
    Ambiguous {
        version: Version,
    },
    /// The coordinator, or so many replicas that the memgest's commit rule cannot hold, has
    /// no room for the write (pinned data fills the node's memory). Nothing was stored
    /// anywhere: Redis's `-OOM`.
    OutOfMemory,
}

impl ClientReply {
    /// Whether the operation certainly had no effect.
    pub fn is_definite_failure(&self) -> bool {
        matches!(
            self,
            ClientReply::StaleEpoch { .. }
                | ClientReply::NotCoordinator
                | ClientReply::NotReady
                | ClientReply::Busy
                | ClientReply::TooLarge
                | ClientReply::NoSuchMemgest
                | ClientReply::Unsupported
                | ClientReply::OutOfMemory
        )
    }
}

/// A reply with the node's epoch (every response carries it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub id: ReqId,
    pub from: NodeId,
    pub epoch: Epoch,
    pub body: ClientReply,
}

/// Why the puller wants a slot range's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPurpose {
    /// A new coordinator rebuilds from the old cohort (and a draining predecessor).
    Rebuild,
    /// A new replica copies from its coordinator.
    Sync,
    /// Resharding phase 0 (docs/design/cluster-resharding.md): the target coordinator of a
    /// span still served by its old coordinator copies it ahead of the switch. The source
    /// answers from its committed store without fencing or abandoning anything; the range
    /// may be any span inside one of the source's coordinated ranges.
    Copy,
}

/// Peer-to-peer messages. Every one travels in a [`PeerMsg`] envelope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerBody {
    /// Coordinator → replica: apply this version of `key`.
    Replicate {
        key: Vec<u8>,
        entry: Entry,
    },
    /// Replica → coordinator. `ok = false`: refused because the sender was fenced.
    ReplicateAck {
        key: Vec<u8>,
        version: Version,
        ok: bool,
    },
    /// Replica → coordinator: `key` at `version` was not stored because this node has no
    /// room for it (distinct from a fenced `ReplicateAck { ok: false }`: the coordinator
    /// refuses the write with `OutOfMemory` once the commit rule can no longer hold).
    ReplicateRefused {
        key: Vec<u8>,
        version: Version,
    },
    /// Ask for a range's entries from `after` on (a page).
    PullReq {
        id: u64,
        purpose: PullPurpose,
        first: Slot,
        last: Slot,
        after: Option<(Slot, Vec<u8>)>,
        /// Delta pull (a span copied ahead of its move): the puller's digest of every
        /// non-empty slot it holds in the range (all memgests). Empty = a plain pull. When
        /// `delta` is set the source skips every slot whose digest equals the puller's and
        /// sends each other slot whole, listed in the page's `resets` (at most
        /// `SLOT_COUNT` pairs: one per slot).
        delta: bool,
        have: Vec<(Slot, u64)>,
    },
    /// A page; `next = None` means done. `ready = false`: the sender cannot vote/serve this
    /// range yet (it is itself new to it); retry later.
    PullResp {
        id: u64,
        ready: bool,
        /// Delta pulls only: slots sent whole from their start in this page (possibly with
        /// no entry: the source holds nothing there). The puller forgets what it holds in
        /// them from the earlier copy before applying `entries`.
        resets: Vec<Slot>,
        entries: Vec<(Vec<u8>, Entry)>,
        next: Option<(Slot, Vec<u8>)>,
    },
    /// Coordinator → replica: digests of the coordinator's non-empty slots in the range, as the
    /// replica should hold them.
    Probe {
        first: Slot,
        last: Slot,
        digests: Vec<(Slot, u64)>,
    },
    /// Replica → coordinator: slots whose digest differs.
    ProbeResp {
        mismatched: Vec<Slot>,
    },
    /// Coordinator → replica: list your (key, version) of `slot` after `after`.
    KeyListReq {
        slot: Slot,
        after: Option<Vec<u8>>,
    },
    KeyList {
        slot: Slot,
        after: Option<Vec<u8>>,
        keys: Vec<(Vec<u8>, Version)>,
        more: bool,
    },
    /// Coordinator → replica: entries the replica lacks or has older.
    RepairPush {
        entries: Vec<(Vec<u8>, Entry)>,
    },
    /// Coordinator → replica: send me these entries (you have them newer).
    RepairFetch {
        keys: Vec<Vec<u8>>,
    },
    RepairFetchResp {
        entries: Vec<(Vec<u8>, Entry)>,
    },
    /// Coordinator → replica: drop `key` if at or below `version` (memgest moved away).
    Retire {
        key: Vec<u8>,
        version: Version,
    },
    /// ec: data node `owner` of PG `pg` → parity holder: fold `delta` (`new ⊕ old` of arena
    /// bytes `[offset, offset + delta.len())`) in and record `meta`. Updates of one owner
    /// apply in `seq` order, each once. `base`: the sequence number this coordinator took
    /// the arena over at (0 since bootstrap); a holder not exactly at `base` when it first
    /// sees it has a diverged copy and resynchronises.
    EcUpdate {
        memgest: MemgestId,
        pg: u32,
        owner: u32,
        base: u64,
        seq: u64,
        offset: u64,
        delta: Vec<u8>,
        meta: EcMeta,
    },
    /// Parity holder → data node: every update of `owner` through `seq` is applied
    /// (cumulative). `ok = false`: refused (the sender is fenced or not the owner).
    EcAck {
        memgest: MemgestId,
        pg: u32,
        owner: u32,
        seq: u64,
        ok: bool,
    },
    /// New data node → parity holder: fence `owner`'s arena for the sender and send its key
    /// metadata after `after` (a page).
    EcMetaReq {
        id: u64,
        memgest: MemgestId,
        pg: u32,
        owner: u32,
        after: Option<Vec<u8>>,
    },
    /// A metadata page; `next = None`: done. `seq`: the last update applied from `owner`;
    /// `high_water`: the highest arena byte (exclusive) it ever touched. `pos`: the group
    /// position of the store that answered (`s + q` for parity holder `q`): a draining node
    /// answers from the store of a position it gave up — a parity store, or the owner's
    /// own arena — which the asker cannot tell from the map.
    EcMetaResp {
        id: u64,
        ready: bool,
        seq: u64,
        high_water: u64,
        keys: Vec<EcKeyMeta>,
        next: Option<Vec<u8>>,
        pos: u32,
    },
    /// Read byte ranges for a decode. To a parity holder: parity pieces (`parity = true`,
    /// `index` = parity chunk index, `offset` = byte in chunk). To a data node: its arena
    /// bytes (`index` = its data index) *as of* its update `seq` (it rolls back later,
    /// unacknowledged deltas), so that they match the parity a holder reported.
    EcReadReq {
        id: u64,
        memgest: MemgestId,
        pg: u32,
        seq: Option<u64>,
        ranges: Vec<EcRange>,
    },
    /// Answer to `EcReadReq`: one piece per range, in order. `seqs`: from a parity holder,
    /// the last update applied from each data node.
    EcReadResp {
        id: u64,
        ready: bool,
        seqs: Vec<u64>,
        pieces: Vec<Vec<u8>>,
    },
    /// The new holder of group position `pos` of (`pg`, `memgest`) — a parity holder
    /// synchronised with every data node, or a data node that finished loading — → a
    /// draining node that may still keep the store of that position it gave up: drop it
    /// (it stops being current once the new holder acknowledges or commits updates).
    /// Answered by [`PeerBody::EcReleased`] whether or not it kept one.
    EcRelease {
        memgest: MemgestId,
        pg: u32,
        pos: u32,
    },
    /// The draining node no longer answers from a kept store of (`pg`, `memgest`, `pos`).
    EcReleased {
        memgest: MemgestId,
        pg: u32,
        pos: u32,
    },
    /// New (or resynchronising) parity holder → data node: a page of a snapshot of the
    /// sender's arena: bytes from `offset`, then key metadata after `after`.
    EcSyncReq {
        id: u64,
        memgest: MemgestId,
        pg: u32,
        offset: u64,
        after: Option<Vec<u8>>,
    },
    /// A snapshot page: `bytes` at `offset` (of `total` snapshot bytes) and/or `keys`;
    /// `seq`/`base` of the snapshot; `done` with the last page.
    EcSyncResp {
        id: u64,
        ready: bool,
        seq: u64,
        base: u64,
        total: u64,
        offset: u64,
        bytes: Vec<u8>,
        keys: Vec<EcKeyMeta>,
        done: bool,
    },
}

/// Key metadata change carried by an [`PeerBody::EcUpdate`] (mirrors
/// `ringlet_erasure::MetaChange`, kept here so the wire codec needs no erasure types).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EcMeta {
    None,
    /// `key` is now `len` bytes at `offset` of the owner's arena, at `version`. Also a
    /// metadata-only TTL change (EXPIRE, PERSIST, GETEX: same location, new version and
    /// expiry, empty delta).
    Put {
        key: Vec<u8>,
        version: Version,
        offset: u64,
        len: u64,
        kind: ValueKind,
        /// Expiry, unix wall-clock ms (`None`: none); the coordinator alone acts on it.
        expiry_ms: Option<u64>,
    },
    /// `key` deleted at `version` (holders keep a tombstone).
    Delete {
        key: Vec<u8>,
        version: Version,
    },
    /// `key` moved to another memgest at `version`: drop its metadata, no tombstone.
    Retire {
        key: Vec<u8>,
        version: Version,
    },
}

/// One key's metadata as a parity holder reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcKeyMeta {
    pub key: Vec<u8>,
    pub version: Version,
    pub offset: u64,
    pub len: u64,
    /// A delete: `offset`/`len` are 0.
    pub tombstone: bool,
    /// String or record (a tombstone is a `String`).
    pub kind: ValueKind,
    /// Expiry, unix wall-clock ms (`None` for a tombstone or a value without one): a
    /// coordinator rebuilt from this metadata expires the key at the same instant.
    pub expiry_ms: Option<u64>,
}

impl EcKeyMeta {
    /// A live key's metadata, as an arena or a parity holder keeps it.
    pub fn live(key: &[u8], m: &ringlet_erasure::KeyMeta) -> EcKeyMeta {
        EcKeyMeta {
            key: key.to_vec(),
            version: m.version,
            offset: m.offset,
            len: m.len,
            tombstone: false,
            kind: m.kind,
            expiry_ms: m.expiry_ms.map(std::num::NonZeroU64::get),
        }
    }

    /// A delete of `key` at `version`, as holders and arenas keep it (no location, no TTL).
    pub fn tombstone(key: &[u8], version: Version) -> EcKeyMeta {
        EcKeyMeta {
            key: key.to_vec(),
            version,
            offset: 0,
            len: 0,
            tombstone: true,
            kind: ValueKind::String,
            expiry_ms: None,
        }
    }
}

/// A byte range of a data arena or a parity chunk (see [`PeerBody::EcReadReq`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EcRange {
    pub parity: bool,
    pub index: u64,
    pub offset: u64,
    pub len: u32,
}

/// Envelope: sender epoch and incarnation travel with every peer message, so a receiver can
/// refuse a fenced coordinator or a dead incarnation's late packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerMsg {
    pub epoch: Epoch,
    pub incarnation: u64,
    pub body: PeerBody,
}
