//! The replica state machine of one node. See `docs/design/cluster-replication.md` for the
//! protocol and why; this comment is the short version.
//!
//! ```text
//!  client ──Set──▶ coordinator ──Replicate──▶ replicas (cohort[1..R])
//!                      │   ◀──ReplicateAck──      apply if newer, ack
//!                      │ majority (self included) acked → apply locally, reply Written
//!                      └─ keeps resending to the rest (async catch-up), repair mops up
//!
//!  new coordinator (took a failed/draining node's place)
//!      ──PullReq(Rebuild)──▶ old cohort survivors (+ draining predecessor)
//!      fences the range at each receiver; merges max version per key; a majority of each
//!      rep:R memgest's old replicas must answer; then HLC jumps past now; then serves.
//!
//!  new replica ──PullReq(Sync)──▶ coordinator; Ready when the last page arrived.
//!
//!  repair: coordinator ──Probe(digests per slot)──▶ replica ──ProbeResp(mismatched)──▶
//!          KeyListReq/KeyList ──▶ RepairPush / RepairFetch / Retire
//! ```
//!
//! Safety rests on three rules: (1) a coordinator serves only while its map says so, its
//! lease (counted from heartbeat *send* times) is live, and no receiver has fenced it; (2) a
//! replica refuses writes from anyone but the slot's coordinator in the newest epoch it knows
//! (map or fence); (3) a new coordinator reads a majority of the old replicas before serving,
//! and issues versions above anything the old coordinator can have issued.

use crate::inflight::InflightKeys;
use crate::msg::*;
use crate::store::{ApplyOutcome, Entry, ReplicaStore};
use ringlet_control::{ClusterMap, Input as ControlInput, NodeState};
use ringlet_types::{
    key_slot, limits, Epoch, Hlc, MemgestId, MemgestKind, NodeId, Slot, ValueKind, Version,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

mod copy;
mod ec;
pub use ec::{ec_bounds, EC_PTR_BYTES};

/// Bounds local to replication (each with its reason).
pub mod bounds {
    /// Entries per pull page: a page is one message; 1,024 small entries keep it well under a
    /// frame, and a big value makes the byte bound below cut the page first.
    pub const PULL_ENTRIES_PER_PAGE_MAX: usize = 1024;
    /// Bytes per pull page (a page always carries at least one entry, even a huge one).
    pub const PULL_BYTES_PER_PAGE_MAX: u64 = 4 * 1024 * 1024;
    /// Entries and bytes per page of a rate-limited move's copy before its switch
    /// (`PullPurpose::Copy` with a rate; an unlimited copy keeps the bounds above). The old
    /// owner serves the span throughout the copy, and each end steps a whole page while it
    /// holds its core, so every read that goes through the core (every ec GET) waits for the
    /// step. Pages of 1,024 ec values took 5-20 ms to serve (decode) or apply (re-encode) on
    /// the loaded 2-core machine (session 17, INFO `core_steps_over_5ms_pull_*`); 128
    /// entries keep such a step near a millisecond (docs/design/cluster-resharding.md,
    /// "Session 17: the client tail").
    pub const COPY_ENTRIES_PER_PAGE_MAX: usize = 128;
    pub const COPY_BYTES_PER_PAGE_MAX: u64 = 256 * 1024;
    /// (key, version) pairs per repair key list: CliqueMap exchanges key hashes per cohort
    /// scan; 4,096 keys of a slot per message bounds one repair step.
    pub const KEYLIST_KEYS_MAX: usize = 4096;
    /// Mismatched slots a replica reports per probe: bounds repair work started per round.
    pub const REPAIR_SLOTS_PER_PROBE_MAX: usize = 64;
    /// Keys per repair fetch.
    pub const REPAIR_FETCH_KEYS_MAX: usize = 1024;
    /// Clients remembered for retry dedup (oldest forgotten first).
    pub const DEDUP_CLIENTS_MAX: usize = 65_536;
    /// Entries of given-away ranges dropped per tick once released: a purge never holds the
    /// node's driver for long. 4,096 per tick held it 5 ms and more on the loaded 2-core
    /// machine while the next move's copy ran (session 17, INFO `core_steps_over_5ms_tick`);
    /// 1,024 still drops a 12,500-key span in 13 ticks.
    pub const PURGE_KEYS_PER_TICK_MAX: usize = 1024;
    /// Reads parked behind uncommitted writes.
    pub const PARKED_READS_MAX: usize = ringlet_types::limits::QUEUE_CAPACITY as usize;
}
use bounds::*;

/// A key's version and memgest, as repair compares them.
#[derive(Clone, Copy, Debug)]
struct Head {
    version: Version,
    memgest: MemgestId,
}

/// Timing knobs, all in milliseconds of the caller's clock.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// Address announced in Join.
    pub addr: String,
    pub heartbeat_interval_ms: u64,
    /// Must equal the control plane's lease.
    pub lease_ms: u64,
    /// Subtracted from the lease to absorb clock-rate differences between node and control
    /// plane.
    pub lease_margin_ms: u64,
    /// Resend an unacknowledged Replicate after this long.
    pub retransmit_ms: u64,
    /// Resend an unanswered pull page after this long.
    pub pull_retry_ms: u64,
    /// Probe one coordinated range's replicas this often.
    pub repair_interval_ms: u64,
    /// Give up waiting for a majority during rebuild after this long and serve what was
    /// recovered (reported as `Output::PossibleLoss`): availability beyond the memgest's
    /// tolerance, as Ring's "the app is told".
    pub rebuild_timeout_ms: u64,
    /// Chunk size of `ec:K+M` arenas (Ring §3.3); every node of a cluster must agree.
    pub ec_chunk_bytes: u32,
    /// Capacity of one ec arena (one per PG data position and ec memgest); materialised
    /// lazily up to its high water. Every node must agree (parity holders bound updates by it).
    pub ec_arena_bytes: u64,
    /// Bytes of `ec:K+M` values (payload) this node may hold as a data node, over all its
    /// arenas: past it, ec writes are refused with `OutOfMemory` (the node's memory budget;
    /// each arena's `ec_arena_bytes` is an address-space bound, not a budget).
    pub ec_data_bytes_max: u64,
    /// Clients remembered for retry dedup (at most [`DEDUP_CLIENTS_MAX`]). Each entry costs
    /// ~190 B of heap (B-tree slot, half-full nodes under monotonic ids, the reply), so the
    /// full bound is ~12 MiB per node. A driver whose client ids are single-use (the cluster
    /// front stamps a fresh id per request and retries under a new one) never looks an entry
    /// up again and sets this low: measured as ~0.18 bytes of RSS per payload byte of
    /// 1 KiB values in cluster mode (docs/design/cluster-memory.md).
    pub dedup_clients_max: usize,
    /// Copy a moving span's ec values ahead of the switch (re-encode them into the target
    /// group during the move's copy phase, docs/design/cluster-resharding.md "Moving
    /// ec:K+M values"), so the new coordinator serves after one delta round trip instead of
    /// re-encoding the whole span while it answers NotReady. On by default since session 16
    /// (the write losses that kept it off were the parity holders' one-map-per-key metadata
    /// and the ec `written` mark, both fixed; sweeps with it on in cluster-resharding.md);
    /// off re-encodes at the switch as before session 15.
    pub ec_copy_ahead: bool,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        ReplicaConfig {
            addr: String::new(),
            heartbeat_interval_ms: 200,
            lease_ms: 1500,
            lease_margin_ms: 100,
            retransmit_ms: 150,
            pull_retry_ms: 300,
            repair_interval_ms: 250,
            rebuild_timeout_ms: 20_000,
            ec_chunk_bytes: 4096,
            ec_arena_bytes: 1 << 30,
            ec_data_bytes_max: u64::MAX,
            dedup_clients_max: DEDUP_CLIENTS_MAX,
            ec_copy_ahead: true,
        }
    }
}

/// Inputs of [`Replica::step`].
#[derive(Clone, Debug)]
pub enum Input {
    Client { client: u64, req: ClientRequest },
    Peer { from: NodeId, msg: PeerMsg },
    Map(Arc<ClusterMap>),
    HeartbeatAck { incarnation: u64, sent_ms: u64 },
    Fenced { incarnation: u64 },
    Tick,
}

/// Outputs of [`Replica::step`].
#[derive(Clone, Debug)]
pub enum Output {
    Send {
        to: NodeId,
        msg: PeerMsg,
    },
    Reply {
        client: u64,
        reply: Reply,
    },
    Control(ControlInput),
    /// Slots `first..=last` of `memgest` serve without all the copies the memgest needs to
    /// be sure it lost nothing (beyond its tolerance): acknowledged writes may be missing.
    /// `keys_lost` is the exact number of keys dropped when it is known (an ec recovery that
    /// gave up knows which values it could not decode); `None` when no surviving copy
    /// records them (a rep:R rebuild without a majority, an ec arena with no metadata left).
    PossibleLoss {
        first: Slot,
        last: Slot,
        memgest: MemgestId,
        keys_lost: Option<u64>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Coordinator,
    Replica,
    None,
}

#[derive(Clone, Debug)]
struct Source {
    req_id: u64,
    after: Option<(Slot, Vec<u8>)>,
    sent_ms: u64,
    done: bool,
}

#[derive(Clone, Debug)]
struct Pull {
    purpose: PullPurpose,
    sources: BTreeMap<NodeId, Source>,
    /// Draining predecessor whose answer is required while it is Draining.
    pred: Option<NodeId>,
    /// A handed-off range (resharding): the cohort it had before its move, old coordinator
    /// first. Its members vote instead of the new cohort's replicas (which never held the
    /// range), and the old coordinator must answer while it is active: it alone holds the
    /// range's single-copy (`none`) keys.
    prior: Vec<NodeId>,
    /// Memgests of which this node's store refused a pulled entry (no room): their copies
    /// here are incomplete, whatever the sources say, so the pull retries and, if it times
    /// out, reports them as possibly lost.
    refused: BTreeSet<MemgestId>,
    started_ms: u64,
    /// Copy rate limit of a handed-off range (`ringlet node move-slots --rate`), KiB/s;
    /// 0 = unlimited. Every page received from any source pushes `paced_until_ms` forward
    /// by its size at this rate; no request of this pull goes out before it (a token
    /// bucket of depth one page: the limit holds over any window longer than a page).
    rate_kib_s: u32,
    paced_until_ms: u64,
    /// Bytes and entries received so far (progress of a handoff, INFO `reshard_*`).
    pulled_bytes: u64,
    pulled_keys: u64,
    /// When the last page arrived.
    progress_ms: u64,
    /// A handed-off range this node copied ahead of the switch (resharding phase 0,
    /// `node/copy.rs`): the old coordinator is asked for a delta (only the slots whose
    /// digest differs from this node's copy, each sent whole). Cleared, with the copy
    /// wiped, if the old coordinator fails: the rebuild then starts from nothing, as any.
    delta: bool,
    /// Keys received by this pull (delta pulls only): a slot the old coordinator resends
    /// whole drops this node's earlier copy of it, never what this pull brought (the old
    /// coordinator's writes in flight at the fence arrive in its first page). At most the
    /// keys of the range.
    fresh: BTreeSet<Vec<u8>>,
    /// Bytes, entries and ms of the copy before the switch (reported with the handoff).
    copied: (u64, u64, u64),
    /// ec values of a handed-off span being re-encoded into this node's arena (version →
    /// key): the pull completes only once each committed under this group's parity
    /// (`node/ec.rs` `reencode_ec`). At most the span's ec keys.
    ec_reencoding: BTreeMap<Version, Vec<u8>>,
}

#[derive(Clone, Debug)]
enum Status {
    /// No data role.
    Idle,
    /// Serving (coordinator) / complete (replica).
    Ready,
    /// Had a data role with complete data, gave it away (drain): still answers rebuild pulls.
    Retired,
    Pulling(Pull),
}

#[derive(Clone, Debug)]
struct RangeState {
    first: Slot,
    last: Slot,
    /// Placement group of the range (its data index is this node's ec owner index).
    pg: u32,
    cohort: Vec<NodeId>,
    offset: Option<usize>,
    role: Role,
    status: Status,
    /// This node held complete data for the range when it entered `status` (it was Ready
    /// or Retired in the range that contained it): it may answer rebuild pulls while it
    /// syncs a new role (a move can make the old coordinator a replica of the new one).
    held: bool,
}

#[derive(Clone, Debug)]
struct Pending {
    key: Vec<u8>,
    slot: Slot,
    entry: Entry,
    client: Option<(u64, ReqId)>,
    targets: Vec<NodeId>,
    acked: BTreeSet<NodeId>,
    /// Targets that answered "no room" ([`PeerBody::ReplicateRefused`]); their in-flight
    /// budget is released. Once every target answered and none stored the write, the
    /// coordinator refuses it with `OutOfMemory` (nothing was stored anywhere).
    refused: BTreeSet<NodeId>,
    /// Acks from others needed to commit (the coordinator's own apply is implied).
    needed: usize,
    committed: bool,
    last_send_ms: u64,
    /// Retransmissions so far (backs the interval off, see [`retransmit_after_ms`]).
    resends: u32,
    bytes: u64,
    /// `ec:K+M` parity update (commit when every holder acked it), or `None` for `rep:R`.
    ec: Option<ec::EcPend>,
    /// A write that moves the key to a memgest with fewer copies: once the new memgest's rule
    /// holds, the old replicas beyond the new copies (`cohort[span.0..span.1]`) retire their
    /// copy, and the write commits only after `retire_needed` of them acknowledged — so the
    /// previous version can never again form a quorum-read majority.
    retire: Option<MoveRetire>,
}

#[derive(Clone, Debug)]
struct MoveRetire {
    span: (usize, usize),
    targets: Vec<NodeId>,
    acked: BTreeSet<NodeId>,
    needed: usize,
    started: bool,
}

#[derive(Clone, Debug)]
struct Parked {
    client: u64,
    id: ReqId,
    threshold: Version,
}

#[derive(Clone, Debug)]
struct Dedup {
    seq: u64,
    reply: Option<ClientReply>,
}

#[derive(Clone, Copy, Debug)]
struct Fence {
    epoch: Epoch,
    node: NodeId,
    incarnation: u64,
}

/// One node's replication core.
pub struct Replica<S: ReplicaStore> {
    id: NodeId,
    incarnation: u64,
    cfg: ReplicaConfig,
    store: S,
    map: Option<Arc<ClusterMap>>,
    epoch: Epoch,
    hlc: Hlc,
    lease_until_ms: u64,
    last_heartbeat_ms: Option<u64>,
    /// When this node last told the control plane it is quiesced (drain phase 1).
    last_quiesced_ms: Option<u64>,
    /// Last time handed-off ranges were reported rebuilt (repeated: a report may be lost).
    last_handoff_report_ms: Option<u64>,
    ranges: Vec<RangeState>,
    fences: BTreeMap<Slot, Fence>,
    pending: BTreeMap<Version, Pending>,
    /// Writes no longer pending whose copies were not all acknowledged: key and copies
    /// acknowledged (bounded, oldest version forgotten first; see [`Replica::write_acks`]).
    partial: BTreeMap<Version, (Vec<u8>, usize)>,
    /// The pending ec updates by (group, memgest, seq, version): a holder's acknowledgement
    /// is cumulative per (group, memgest) up to a seq, and walking every pending write for
    /// it was the hottest code of an ec copy (session 17). Kept lazily: an entry whose
    /// pending write is gone (committed and fully acknowledged, called off, wiped) is
    /// dropped when an acknowledgement walks over it, or by [`Replica::prune_ec_acks`].
    ec_acks: BTreeSet<(u32, MemgestId, u64, Version)>,
    /// When a slot with writes in flight to a replica was last repaired with it (bounded by
    /// [`BUSY_REPAIRS_MAX`]; see the ProbeResp handler).
    busy_repairs: BTreeMap<(Slot, NodeId), u64>,
    /// When this coordinator last sent a write of each slot to its replicas (at most one entry
    /// per slot, 16,384). A slot written since shortly before a probe differs because of
    /// writes that were in flight when the digests were taken, even if none is in flight when
    /// the answer arrives; see the ProbeResp handler.
    slot_written_ms: BTreeMap<Slot, u64>,
    /// Uncommitted pending versions per key (reads wait for those at or below their threshold).
    uncommitted: BTreeMap<Vec<u8>, BTreeSet<Version>>,
    /// `uncommitted`'s keys, mirrored for front ends that read the store directly.
    inflight_keys: Arc<InflightKeys>,
    inflight: BTreeMap<NodeId, (u32, u64)>,
    parked: BTreeMap<Vec<u8>, Vec<Parked>>,
    parked_count: usize,
    /// When a written mark was last requested, per memgest ([`Replica::request_written_mark`]).
    mark_requested: BTreeMap<MemgestId, u64>,
    dedup: BTreeMap<u64, Dedup>,
    dedup_order: VecDeque<u64>,
    /// Pull request id → (range first slot, source).
    pull_index: BTreeMap<u64, (Slot, NodeId)>,
    next_id: u64,
    repair_cursor: usize,
    last_repair_ms: u64,
    /// ec: arenas of this node's data positions, by (PG, memgest).
    ec_data: BTreeMap<(u32, MemgestId), ec::EcData>,
    /// ec: parity stores of this node's parity positions, by (PG, memgest).
    ec_parity: BTreeMap<(u32, MemgestId), ec::EcParity>,
    /// ec: parity stores of positions this node gave up while Draining, kept read-only
    /// until the new holder of the position releases them (cluster-resharding.md,
    /// "a drained parity holder").
    ec_retained: BTreeMap<(u32, MemgestId), ec::EcParity>,
    /// ec: arenas of data positions this node gave up while Draining, kept read-only the
    /// same way (a loading successor copies from it when the parity cannot serve).
    ec_retained_data: BTreeMap<(u32, MemgestId), ec::EcData>,
    /// ec: decode jobs in flight.
    ec_jobs: BTreeMap<u64, ec::Job>,
    /// ec: request id → what it belongs to.
    ec_reqs: BTreeMap<u64, ec::EcReq>,
    /// ec entries this store forgot (a purged or wiped span) whose arena metadata must be
    /// retired too (`node/ec.rs` `retire_ec_leftovers`), so no parity holder keeps them for
    /// a later takeover to restore. Drained by every `drive_pulls`; at most a purge step's
    /// keys or one wiped span's.
    ec_leftovers: Vec<(Vec<u8>, Entry)>,
    /// Replica side of a memgest move (`PeerBody::Retire`): key → the version that retired
    /// this node's copy. The store drops the copy without a tombstone, so a late Replicate
    /// of an older version (a retransmit, or a duplicate the network delayed) would apply
    /// again and, with another replica not yet retired, form a majority for the old value
    /// in quorum reads. Replicates below the floor are acknowledged and not applied.
    /// Bounded by `limits::RETIRED_FLOORS_MAX`, oldest forgotten first (`retired_order`).
    retired_floors: BTreeMap<Vec<u8>, Version>,
    retired_order: VecDeque<Vec<u8>>,
    /// `now_ms` of the latest step (for work started outside a timed path).
    last_now_ms: u64,
    /// Resharding phase 0: the span this node copies as a move's target (`node/copy.rs`).
    copy: Option<copy::Copy>,
    /// A called-off copy's ec re-encodes still in flight (`node/copy.rs`).
    copy_orphans: Option<copy::CopyOrphans>,
    /// Counters for tests and metrics.
    pub stats: ReplicaStats,
}

/// Counters (metrics `replica_*`).
#[derive(Clone, Debug, Default)]
pub struct ReplicaStats {
    pub writes_committed: u64,
    pub rebuilds_completed: u64,
    pub syncs_completed: u64,
    pub repair_pushed: u64,
    pub repair_fetched: u64,
    /// Key-list pages this coordinator compared with a replica's (each a scan of up to
    /// `KEYLIST_KEYS_MAX` keys on both nodes): what repair costs, whether or not it finds
    /// anything.
    pub repair_key_lists: u64,
    pub repair_retired: u64,
    pub replicate_refused: u64,
    /// Writes refused with `OutOfMemory` (by this coordinator's store, or because too many
    /// replicas had no room for them).
    pub writes_out_of_memory: u64,
    /// Replicated entries this node could not store for lack of room (Replicate, repair,
    /// pull): the copy stays missing until repair retries with room available.
    pub store_refused: u64,
    /// Committed writes whose local apply failed after the replicas had stored them
    /// (answered `Ambiguous`: a replica majority holds them).
    pub commit_apply_refused: u64,
    pub possible_loss: u64,
    /// ec: takeovers whose metadata was rebuilt from parity holders.
    pub ec_takeovers: u64,
    /// ec: arenas fully decoded after a takeover.
    pub ec_recoveries_completed: u64,
    /// ec: reads that decoded their value on demand.
    pub ec_decodes_on_demand: u64,
    /// ec: bytes decoded (on demand and background).
    pub ec_decoded_bytes: u64,
    /// ec: decode attempts retried (a survivor missing or changing).
    pub ec_decode_retries: u64,
    /// ec: parity holders that finished a (re)sync from the data nodes' snapshots.
    pub ec_holder_syncs: u64,
    /// ec: stores (parity or arena) this draining node kept for a position it gave up,
    /// dropped when the position's new holder released them.
    pub ec_kept_released: u64,
    /// ec: parity holders that found their copy diverged and reset.
    pub ec_holder_resyncs: u64,
    /// ec: metadata entries that could not be restored into the arena (overlap).
    pub ec_restore_conflicts: u64,
    /// ec: writes of the bytes the key already holds (EXPIRE, PERSIST, GETEX, a SET of the
    /// same value) sent as metadata-only updates: no fresh range, no delta.
    pub ec_meta_only_writes: u64,
    /// Resharding: handed-off ranges this node finished rebuilding as their new coordinator.
    pub handoffs_completed: u64,
    /// Resharding: keys dropped from ranges this node gave away, once released.
    pub handoff_keys_purged: u64,
    /// Resharding: bytes (keys + values) and entries received by completed handoff rebuilds
    /// (from every source: the old coordinator's copy and the old replicas' agree, so a
    /// value can count more than once).
    pub handoff_bytes_pulled: u64,
    pub handoff_keys_pulled: u64,
    /// The last completed handoff: bytes received and ms from its start to its completion
    /// (the copy time of one moving range; its throughput is their quotient).
    pub last_handoff_bytes: u64,
    pub last_handoff_ms: u64,
    /// Sum of the completed handoff rebuilds' durations (copy throughput over all moves:
    /// `handoff_bytes_pulled / handoff_ms`).
    pub handoff_ms: u64,
    /// Resharding phase 0 at a move's target: copies finished (snapshot and catch-up), and
    /// copies dropped because the move was called off (the partial copy purged).
    pub move_copies_completed: u64,
    pub move_copies_aborted: u64,
    /// Entries the old coordinator resent at the switch (the delta after a copy).
    pub move_delta_keys: u64,
    /// ec values of handed-off spans re-encoded into this node's group (new coordinator),
    /// and ec arena entries of given-away spans retired here (old coordinator).
    pub move_ec_reencoded: u64,
    pub move_ec_retired: u64,
    /// ec values re-encoded into the target group by a copy before its switch (part of
    /// `move_ec_reencoded`).
    pub move_ec_copied: u64,
    /// Pages of a handed-off span's ec values this node answered as the replacement of
    /// its failed old coordinator (decoded from the old group's parity).
    pub move_ec_replacement_pages: u64,
}

/// A slot with writes in flight to a replica is key-list repaired with it at most this often.
const REPAIR_BUSY_SLOT_MS: u64 = 10_000;
/// Entries of `busy_repairs`: slots × replicas being written to at once, far above what a
/// node's in-flight budget allows in one repair window.
const BUSY_REPAIRS_MAX: usize = 65_536;

/// How soon a delta pull asks the old coordinator again after a "not ready" (it had not
/// seen the switch): one map broadcast away, so a short wait; at most one request per
/// interval, so a source that stays behind costs 50 small requests a second.
const DELTA_RETRY_MS: u64 = 20;

/// How often a coordinator repeats an unanswered request to mark a memgest written.
const MARK_WRITTEN_RETRY_MS: u64 = 100;

/// Largest factor the retransmission interval backs off to.
const RETRANSMIT_BACKOFF_MAX: u64 = 8;
/// Bytes a replica is assumed to take in per ms when it is slow (a loaded host, a debug
/// build): 16 MB/s. A 64 MiB value then waits ~4 s before it is sent again.
const RETRANSMIT_SLOW_BYTES_PER_MS: u64 = 16 * 1024;

/// When an unacknowledged write is offered again. Peer links are TCP: a copy is lost only
/// with its connection or a full queue, so resending is for recovery, not speed. A fixed
/// 150 ms resent a 64 MiB value to each replica ~7 times a second while the first copy was
/// still being read, a congestion collapse that starved heartbeats (issue 10, case 5): the
/// interval grows with the value's size and doubles with each resend, up to a bound.
fn retransmit_after_ms(base_ms: u64, p: &Pending) -> u64 {
    let backoff = 1u64 << p.resends.min(3);
    (base_ms * backoff.min(RETRANSMIT_BACKOFF_MAX)) + p.bytes / RETRANSMIT_SLOW_BYTES_PER_MS
}

fn majority(n: usize) -> usize {
    n / 2 + 1
}

impl<S: ReplicaStore> Replica<S> {
    /// A node process starting with `store` (empty on a fresh start or restart).
    pub fn new(id: NodeId, incarnation: u64, cfg: ReplicaConfig, store: S) -> Replica<S> {
        Replica {
            id,
            incarnation,
            cfg,
            store,
            map: None,
            epoch: Epoch(0),
            hlc: Hlc::new(id.0),
            lease_until_ms: 0,
            last_heartbeat_ms: None,
            last_quiesced_ms: None,
            last_handoff_report_ms: None,
            ranges: Vec::new(),
            fences: BTreeMap::new(),
            pending: BTreeMap::new(),
            partial: BTreeMap::new(),
            ec_acks: BTreeSet::new(),
            busy_repairs: BTreeMap::new(),
            slot_written_ms: BTreeMap::new(),
            uncommitted: BTreeMap::new(),
            inflight_keys: Arc::default(),
            inflight: BTreeMap::new(),
            parked: BTreeMap::new(),
            parked_count: 0,
            mark_requested: BTreeMap::new(),
            dedup: BTreeMap::new(),
            dedup_order: VecDeque::new(),
            pull_index: BTreeMap::new(),
            // Request ids never repeat across incarnations (late replies are ignored).
            next_id: incarnation << 32,
            repair_cursor: 0,
            last_repair_ms: 0,
            ec_data: BTreeMap::new(),
            ec_parity: BTreeMap::new(),
            ec_retained: BTreeMap::new(),
            ec_retained_data: BTreeMap::new(),
            ec_jobs: BTreeMap::new(),
            ec_reqs: BTreeMap::new(),
            ec_leftovers: Vec::new(),
            retired_floors: BTreeMap::new(),
            retired_order: VecDeque::new(),
            last_now_ms: 0,
            copy: None,
            copy_orphans: None,
            stats: ReplicaStats::default(),
        }
    }

    pub fn id(&self) -> NodeId {
        self.id
    }
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }
    pub fn store(&self) -> &S {
        &self.store
    }
    pub fn map(&self) -> Option<&Arc<ClusterMap>> {
        self.map.as_ref()
    }

    /// No pull in progress, no write in flight: the node has settled.
    pub fn is_settled(&self) -> bool {
        self.pending.is_empty()
            && self.copy.is_none()
            && !self.ec_busy()
            && self
                .ranges
                .iter()
                .all(|r| !matches!(r.status, Status::Pulling(_)))
    }

    /// One-line description of unfinished work (pulls and pending writes), for diagnostics.
    pub fn debug_unsettled(&self) -> String {
        let mut parts = Vec::new();
        for r in &self.ranges {
            if let Status::Pulling(p) = &r.status {
                let srcs: Vec<String> = p
                    .sources
                    .iter()
                    .map(|(n, s)| format!("{n}:{}", if s.done { "done" } else { "wait" }))
                    .collect();
                parts.push(format!(
                    "pull {:?} {}..={} cohort {:?} pred {:?} [{}]",
                    p.purpose,
                    r.first,
                    r.last,
                    r.cohort,
                    p.pred,
                    srcs.join(" ")
                ));
            }
        }
        parts.extend(self.ec_debug());
        if let Some(c) = &self.copy {
            parts.push(c.describe());
        }
        for (v, p) in &self.pending {
            parts.push(format!(
                "pending {v} slot {} targets {:?} acked {:?} committed {}",
                p.slot, p.targets, p.acked, p.committed
            ));
        }
        parts.join("; ")
    }

    /// Whether a rebuild or sync is still running on some range.
    /// The keys with a write in flight, shared with front ends that read the store directly
    /// (`crate::inflight`).
    pub fn inflight_keys(&self) -> &Arc<InflightKeys> {
        &self.inflight_keys
    }

    /// Use `keys` as the shared filter (a driver that created it before the core). Call before
    /// the first step: the filter must mirror every write in flight.
    pub fn set_inflight_keys(&mut self, keys: Arc<InflightKeys>) {
        debug_assert!(self.uncommitted.is_empty());
        keys.clear();
        self.inflight_keys = keys;
    }

    /// Until when (the driver's clock, ms) this node's lease lets it coordinate.
    pub fn lease_until_ms(&self) -> u64 {
        self.lease_until_ms
    }

    /// The slot ranges a read may be answered from this node's store without the core, as
    /// long as the lease lasts ([`Replica::lease_until_ms`]) and the key has no write in flight
    /// ([`Replica::inflight_keys`]): coordinated here, complete (Ready), and not fenced for
    /// another node or incarnation — every condition of the core's own check but the lease.
    pub fn fast_read_ranges(&self, out: &mut Vec<(Slot, Slot)>) {
        out.clear();
        for r in &self.ranges {
            if r.role != Role::Coordinator || !matches!(r.status, Status::Ready) {
                continue;
            }
            let foreign = self
                .fences
                .range(r.first..=r.last)
                .any(|(_, f)| f.node != self.id || f.incarnation != self.incarnation);
            if !foreign {
                out.push((r.first, r.last));
            }
        }
    }

    pub fn is_pulling(&self) -> bool {
        self.ec_busy()
            || self
                .ranges
                .iter()
                .any(|r| matches!(r.status, Status::Pulling(_)))
    }

    /// Whether this node is Ready for `slot` at cohort offset `offset`.
    pub fn ready_at(&self, slot: Slot) -> Option<usize> {
        let r = self.range(slot)?;
        match r.status {
            Status::Ready => r.offset,
            _ => None,
        }
    }

    /// The committed value of `key` as this node's store and arenas hold it (`Some(None)`:
    /// absent or deleted; `None`: an ec value whose bytes are not recovered here yet). For
    /// checkers; clients use `Get`.
    pub fn committed_value(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        match self.store.get(key) {
            Some(e) if self.is_ec_value(&e) => self.ec_value(key, &e).ok().map(Some),
            Some(e) => Some(e.value),
            None => Some(None),
        }
    }

    /// INFO replication: writes this coordinator still tracks (committed or not, until every
    /// target answered), and per target the writes and bytes sent to it not yet acknowledged.
    pub fn replication_backlog(&self) -> (usize, Vec<(NodeId, u32, u64)>) {
        let per = self
            .inflight
            .iter()
            .map(|(n, (w, b))| (*n, *w, *b))
            .collect();
        (self.pending.len(), per)
    }

    /// WAIT: how many nodes besides this coordinator hold `key`'s write `version`, and how
    /// many its memgest can ever give (`(acked, possible)`). While the write is pending,
    /// the targets that acknowledged it so far (replicas for rep:R, parity holders for
    /// ec:K+M); once it is not (every target answered, so nothing is tracked any more), the
    /// copies its memgest keeps beyond the coordinator's: R - 1, M, or 0 for `none`. A
    /// target that refused the write for lack of memory is not counted while pending; after
    /// the write completed that is no longer known (docs/design/cluster-keyspace.md, WAIT).
    pub fn write_acks(&self, key: &[u8], version: Version) -> (usize, usize) {
        let Some(map) = &self.map else { return (0, 0) };
        let beyond = |m: MemgestId| map.memgest_kind(m).other_holders();
        if let Some(p) = self.pending.get(&version).filter(|p| p.key == key) {
            return (p.acked.len(), beyond(p.entry.memgest).max(p.targets.len()));
        }
        // Tracking ended short of every copy (the slot was given up, a copy refused): what
        // was acknowledged, not every holder (a WAIT once answered 2 for a write a stopped
        // replica never got, after its coordinator's lease lapsed and it abandoned the slot).
        if let Some((k, acked)) = self.partial.get(&version) {
            if k.as_slice() == key {
                return (*acked, *acked);
            }
        }
        // Its memgest from the head: WAIT polls this under the core's lock, and the whole
        // entry would copy the value each time.
        let m = self.newest_head(key).map_or(map.default_memgest, |h| h.1);
        (beyond(m), beyond(m))
    }

    /// Stop tracking `version` (every removal from `pending` goes through here): a write
    /// dropped before every target acknowledged it is remembered in `partial` for WAIT.
    fn drop_pending(&mut self, version: Version) -> Option<Pending> {
        let p = self.pending.remove(&version)?;
        if p.acked.len() < p.targets.len() {
            while self.partial.len() >= limits::PARTIAL_WRITES_REMEMBERED_MAX as usize {
                self.partial.pop_first();
            }
            self.partial.insert(version, (p.key.clone(), p.acked.len()));
        }
        Some(p)
    }

    /// Digest of `slot` as a holder at `offset` should see it (test/sim convergence checks).
    pub fn slot_digest_at(&self, slot: Slot, offset: usize) -> u64 {
        let Some(map) = &self.map else { return 0 };
        self.store.slot_digest(slot, &|m| map.copies(m) > offset)
    }

    /// One step. The event loop of the driver is the only unbounded loop; every step here is
    /// bounded by the sizes of its input and of the (bounded) tables.
    pub fn step(&mut self, now_ms: u64, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        self.last_now_ms = self.last_now_ms.max(now_ms);
        match input {
            Input::Client { client, req } => self.on_client(now_ms, client, req, &mut out),
            Input::Peer { from, msg } => self.on_peer(now_ms, from, msg, &mut out),
            Input::Map(m) => self.on_map(now_ms, m, &mut out),
            Input::HeartbeatAck {
                incarnation,
                sent_ms,
            } => {
                if incarnation == self.incarnation && self.joined() {
                    let until = sent_ms
                        .saturating_add(self.cfg.lease_ms)
                        .saturating_sub(self.cfg.lease_margin_ms);
                    self.lease_until_ms = self.lease_until_ms.max(until);
                }
            }
            Input::Fenced { incarnation } => {
                if incarnation == self.incarnation {
                    self.wipe_and_rejoin(now_ms, &mut out);
                }
            }
            Input::Tick => self.on_tick(now_ms, &mut out),
        }
        out
    }

    // ------------------------------------------------------------------ helpers

    fn joined(&self) -> bool {
        self.map.as_ref().is_some_and(|m| {
            m.nodes
                .get(&self.id)
                .is_some_and(|n| n.incarnation == self.incarnation)
        })
    }

    fn range_index(&self, slot: Slot) -> Option<usize> {
        let i = self.ranges.partition_point(|r| r.last < slot);
        match self.ranges.get(i) {
            Some(r) if r.first <= slot => Some(i),
            _ => None,
        }
    }

    fn range(&self, slot: Slot) -> Option<&RangeState> {
        self.range_index(slot).and_then(|i| self.ranges.get(i))
    }

    fn send(&self, out: &mut Vec<Output>, to: NodeId, body: PeerBody) {
        out.push(Output::Send {
            to,
            msg: PeerMsg {
                epoch: self.epoch,
                incarnation: self.incarnation,
                body,
            },
        });
    }

    fn reply(&self, out: &mut Vec<Output>, client: u64, id: ReqId, body: ClientReply) {
        out.push(Output::Reply {
            client,
            reply: Reply {
                id,
                from: self.id,
                epoch: self.epoch,
                body,
            },
        });
    }

    fn apply_local(&mut self, key: &[u8], entry: Entry) -> ApplyOutcome {
        self.hlc.observe(entry.version);
        self.store.apply(key, entry)
    }

    /// Whether this node may coordinate `slot` now.
    fn serving(&self, now_ms: u64, slot: Slot) -> Result<(), ClientReply> {
        let r = self.range(slot).ok_or(ClientReply::NotCoordinator)?;
        if r.role != Role::Coordinator {
            return Err(ClientReply::NotCoordinator);
        }
        if now_ms >= self.lease_until_ms {
            return Err(ClientReply::NotCoordinator);
        }
        if let Some(f) = self.fences.get(&slot) {
            if f.node != self.id || f.incarnation != self.incarnation {
                return Err(ClientReply::NotCoordinator);
            }
        }
        match r.status {
            Status::Ready => Ok(()),
            _ => Err(ClientReply::NotReady),
        }
    }

    /// Whether a coordinator-originated write for `slot` from `from` is acceptable (rule 2).
    fn accept_from_coordinator(&self, from: NodeId, msg: &PeerMsg, slot: Slot) -> bool {
        if let Some(map) = &self.map {
            if let Some(n) = map.nodes.get(&from) {
                if msg.incarnation < n.incarnation {
                    return false;
                }
            }
        }
        if let Some(f) = self.fences.get(&slot) {
            if f.node != from {
                if msg.epoch <= f.epoch {
                    return false;
                }
            } else if msg.incarnation < f.incarnation {
                return false;
            }
        }
        if msg.epoch <= self.epoch {
            let coord = self.range(slot).and_then(|r| r.cohort.first().copied());
            if coord != Some(from) {
                return false;
            }
        }
        true
    }

    /// Clients in the retry-dedup table (bounded by `ReplicaConfig::dedup_clients_max`).
    pub fn dedup_len(&self) -> usize {
        self.dedup.len()
    }

    fn remember(&mut self, client: u64, seq: u64, reply: Option<ClientReply>) {
        if !self.dedup.contains_key(&client) {
            self.dedup_order.push_back(client);
            let max = self.cfg.dedup_clients_max.clamp(1, DEDUP_CLIENTS_MAX);
            while self.dedup_order.len() > max {
                if let Some(old) = self.dedup_order.pop_front() {
                    self.dedup.remove(&old);
                }
            }
        }
        self.dedup.insert(client, Dedup { seq, reply });
    }

    // ------------------------------------------------------------------ clients

    fn on_client(&mut self, now_ms: u64, client: u64, req: ClientRequest, out: &mut Vec<Output>) {
        let key = req.op.key().to_vec();
        if key.len() > limits::KEY_BYTES_MAX as usize {
            return self.reply(out, client, req.id, ClientReply::TooLarge);
        }
        let value_len = match &req.op {
            ClientOp::Set { value, .. } => value.len(),
            ClientOp::SetIf { value, .. } => value.as_ref().map_or(0, Vec::len),
            _ => 0,
        };
        if value_len > limits::VALUE_BYTES_MAX as usize {
            return self.reply(out, client, req.id, ClientReply::TooLarge);
        }
        if req.epoch != self.epoch || self.map.is_none() {
            let current = self.epoch;
            return self.reply(out, client, req.id, ClientReply::StaleEpoch { current });
        }
        let slot = key_slot(&key);
        match req.op {
            ClientOp::ReadReplica { .. } => {
                // Answer only with complete data (Ready), a live lease (a partitioned node may
                // be stale) and no knowledge of a newer coordinator (a fenced node's data may
                // miss the successor's writes): a quorum then always intersects the fenced
                // majority of any rebuild.
                let fenced = self.fences.get(&slot).is_some_and(|f| f.epoch > self.epoch);
                let usable = now_ms < self.lease_until_ms && !fenced;
                let body = match self.ready_at(slot).filter(|_| usable) {
                    Some(_) => {
                        let e = self.store.get(&key);
                        let ec = e.as_ref().filter(|e| self.is_ec_value(e)).cloned();
                        match ec {
                            Some(e) => match self.ec_value(&key, &e) {
                                Ok(v) => ClientReply::Replica {
                                    version: e.version,
                                    memgest: e.memgest,
                                    value: Some(v),
                                    expiry_ms: e.expiry_ms,
                                    kind: e.kind,
                                },
                                Err(true) => {
                                    return self
                                        .ec_read_later(now_ms, client, req.id, &key, &e, true, out)
                                }
                                Err(false) => ClientReply::NotReady,
                            },
                            None => ClientReply::Replica {
                                version: e.as_ref().map_or(Version::ZERO, |e| e.version),
                                memgest: e.as_ref().map_or(MemgestId::NONE, |e| e.memgest),
                                expiry_ms: e.as_ref().and_then(|e| e.expiry_ms),
                                kind: e.as_ref().map_or(ValueKind::String, |e| e.kind),
                                value: e.and_then(|e| e.value),
                            },
                        }
                    }
                    None => ClientReply::NotReady,
                };
                self.reply(out, client, req.id, body);
            }
            ClientOp::Get { .. } => {
                if let Err(e) = self.serving(now_ms, slot) {
                    return self.reply(out, client, req.id, e);
                }
                let threshold = self
                    .uncommitted
                    .get(&key)
                    .and_then(|s| s.iter().next_back().copied());
                match threshold {
                    None => self.answer_read(now_ms, client, req.id, &key, out),
                    Some(threshold) => {
                        if self.parked_count >= PARKED_READS_MAX {
                            return self.reply(out, client, req.id, ClientReply::Busy);
                        }
                        self.parked_count += 1;
                        self.parked.entry(key).or_default().push(Parked {
                            client,
                            id: req.id,
                            threshold,
                        });
                    }
                }
            }
            ClientOp::Set {
                value,
                memgest,
                expiry_ms,
                kind,
                ..
            } => self.write(
                now_ms,
                client,
                req.id,
                key,
                Some(value),
                memgest,
                expiry_ms,
                kind,
                out,
            ),
            ClientOp::Delete { .. } => self.write(
                now_ms,
                client,
                req.id,
                key,
                None,
                None,
                None,
                ValueKind::String,
                out,
            ),
            ClientOp::SetIf {
                value,
                memgest,
                expiry_ms,
                kind,
                expect,
                ..
            } => {
                // Decided here, on the coordinator's single thread, against the newest entry
                // including writes still in flight: a write accepted before this one makes
                // the comparison fail even if it later turns out ambiguous (a spurious
                // mismatch, never a lost update).
                // `expect` zero: only if the key has no live entry (as `cas 0` on a node).
                let latest = self.latest_entry(&key).filter(|e| e.value.is_some());
                let matches = match latest {
                    None => expect == Version::ZERO,
                    Some(e) => e.version == expect && expect != Version::ZERO,
                };
                if !matches {
                    return self.reply(out, client, req.id, ClientReply::Unchanged);
                }
                let (memgest, kind) = match value {
                    Some(_) => (memgest, kind),
                    None => (None, ValueKind::String),
                };
                let expiry_ms = if value.is_some() { expiry_ms } else { None };
                self.write(
                    now_ms, client, req.id, key, value, memgest, expiry_ms, kind, out,
                )
            }
            ClientOp::Expire { version, .. } => {
                // Only the newest entry (uncommitted writes included) may be expired: a SET
                // that renewed the key after the driver looked must not be undone.
                let live = self
                    .latest_entry(&key)
                    .is_some_and(|e| e.version == version && e.value.is_some());
                if live {
                    self.write(
                        now_ms,
                        client,
                        req.id,
                        key,
                        None,
                        None,
                        None,
                        ValueKind::String,
                        out,
                    )
                } else {
                    self.reply(out, client, req.id, ClientReply::Unchanged)
                }
            }
        }
    }

    /// Whether a stored entry is an `ec:K+M` value (its bytes live in an arena; the store
    /// keeps a pointer).
    fn is_ec_value(&self, e: &Entry) -> bool {
        e.value.is_some() && self.is_ec_memgest(e.memgest)
    }

    /// Whether `m` is an `ec:K+M` memgest in the current map.
    fn is_ec_memgest(&self, m: MemgestId) -> bool {
        self.map
            .as_ref()
            .is_some_and(|map| matches!(map.memgest_kind(m), MemgestKind::Ec { .. }))
    }

    /// Reply with the committed value of `key` (decoding it first if it is an ec value whose
    /// bytes were lost with the previous coordinator).
    fn answer_read(
        &mut self,
        now_ms: u64,
        client: u64,
        id: ReqId,
        key: &[u8],
        out: &mut Vec<Output>,
    ) {
        let body = match self.store.get(key) {
            Some(e) if self.is_ec_value(&e) => match self.ec_value(key, &e) {
                Ok(v) => ClientReply::Value {
                    version: e.version,
                    value: Some(v),
                    expiry_ms: e.expiry_ms,
                    kind: e.kind,
                },
                Err(true) => return self.ec_read_later(now_ms, client, id, key, &e, false, out),
                Err(false) => ClientReply::NotReady,
            },
            Some(e) => ClientReply::Value {
                version: e.version,
                expiry_ms: e.expiry_ms,
                kind: e.kind,
                value: e.value,
            },
            None => ClientReply::Value {
                version: Version::ZERO,
                value: None,
                expiry_ms: None,
                kind: ValueKind::String,
            },
        };
        self.reply(out, client, id, body);
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        now_ms: u64,
        client: u64,
        id: ReqId,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
        memgest: Option<MemgestId>,
        expiry_ms: Option<u64>,
        kind: ValueKind,
        out: &mut Vec<Output>,
    ) {
        let slot = key_slot(&key);
        if let Err(e) = self.serving(now_ms, slot) {
            return self.reply(out, client, id, e);
        }
        // Retry dedup: same (client, seq) is answered, never re-applied.
        if let Some(d) = self.dedup.get(&client) {
            if d.seq == id.seq {
                if let Some(r) = d.reply.clone() {
                    self.reply(out, client, id, r);
                }
                return; // still pending: the answer comes when it commits
            }
            if d.seq > id.seq {
                return; // an older request's late retry
            }
        }
        let Some(map) = self.map.clone() else {
            return self.reply(out, client, id, ClientReply::NotCoordinator);
        };
        // Drain phase 1: finish what is in flight, take nothing new, so the hand-over to the
        // spare abandons no write (the client retries and reaches the successor).
        if map.leaving.contains_key(&self.id) || map.is_moving(slot) {
            return self.reply(out, client, id, ClientReply::Busy);
        }
        // The key's newest version, memgest and liveness, pending or stored, read once and
        // without its value: the memgest choice below and the version check further down both
        // need it (they read the whole entry, value copied, in two more index lookups: ~15 %
        // of a node's CPU under a pipelined 1 KiB SET load).
        let newest = self.newest_head(&key);
        let memgest = match (memgest, &value) {
            (Some(m), _) => m,
            // A write that names no memgest keeps the key where it lives (a key moved to
            // `cold` stays there across SET, INCR, APPEND, as on the single node); a new key,
            // or one whose memgest is being dropped, goes to the default.
            (None, Some(_)) => newest
                .filter(|h| h.2)
                .map(|h| h.1)
                .filter(|m| map.memgests.get(m).is_some_and(|i| !i.closing))
                .unwrap_or(map.default_memgest),
            // A delete keeps the key's memgest so its tombstone lives where its copies were.
            (None, None) => newest.map_or(map.default_memgest, |h| h.1),
        };
        let Some(info) = map.memgests.get(&memgest) else {
            return self.reply(out, client, id, ClientReply::NoSuchMemgest);
        };
        let copies = match info.kind {
            MemgestKind::None => 1,
            MemgestKind::Rep { r } => usize::from(r),
            // An ec:K+M write applies locally and sends the parity delta (plus key metadata)
            // to the PG's first M redundant nodes; it commits when all M acked (write_ec).
            MemgestKind::Ec { .. } => {
                // Records and TTLs are fine: kind and expiry are in the key metadata every
                // parity holder keeps, so a takeover rebuilds them too (cluster-ec.md).
                // (An expiry of 0 is kept as 1, as the arena's metadata keeps it: `nz`.)
                let expiry_ms = value.as_ref().and(expiry_ms).map(|x| x.max(1));
                // As for a replicated memgest (below): a handoff's rebuild trusts `written
                // == false` to skip waiting for the old coordinator's ec values, so the
                // first ec write waits for the mark too. Without it, a span handed off by a
                // coordinator that then failed was served without its acknowledged ec
                // writes (sim seed 43830).
                if !info.written {
                    self.request_written_mark(now_ms, memgest, out);
                    return self.reply(out, client, id, ClientReply::NotReady);
                }
                return self.write_ec(
                    now_ms, client, id, key, value, memgest, expiry_ms, kind, out,
                );
            }
        };
        if copies >= 2 && !info.written {
            // The first write of a replicated (or ec, above) memgest waits until the map says
            // it may have data: a rebuild trusts `written == false` to skip waiting for a
            // majority of old replicas (`pull_complete`), so no write may start before the
            // mark.
            self.request_written_mark(now_ms, memgest, out);
            return self.reply(out, client, id, ClientReply::NotReady);
        }
        let Some(r) = self.range(slot) else {
            return self.reply(out, client, id, ClientReply::NotCoordinator);
        };
        let targets: Vec<NodeId> = r.cohort.iter().skip(1).take(copies - 1).copied().collect();
        let mut entry = Entry {
            version: Version::ZERO,
            memgest,
            // A tombstone has no expiry and no kind.
            expiry_ms: value.as_ref().and(expiry_ms),
            kind: if value.is_some() {
                kind
            } else {
                ValueKind::String
            },
            value,
        };
        let bytes = entry.wire_bytes(&key);
        for t in &targets {
            let (n, b) = self.inflight.get(t).copied().unwrap_or((0, 0));
            if n >= limits::REPLICATION_INFLIGHT_MAX
                || b.saturating_add(bytes) > limits::REPLICATION_INFLIGHT_BYTES_MAX
            {
                return self.reply(out, client, id, ClientReply::Busy);
            }
        }
        entry.version = self.hlc.next(now_ms);
        // Nothing since `newest` was read has changed the key (this step holds the core).
        if let Some((cur, _, _)) = newest {
            assert!(entry.version > cur, "HLC issued a stale version");
        }
        let retire = self.move_retire(&key, slot, memgest);
        if targets.is_empty() && retire.is_none() {
            // Moved into the store, not cloned (a clone copied the value on every `none`
            // write): what is kept for the ec retire below is its version and memgest.
            let written = Entry {
                value: None,
                expiry_ms: None,
                ..entry
            };
            if self.apply_local(&key, entry) == ApplyOutcome::Refused {
                self.stats.writes_out_of_memory += 1;
                self.remember(client, id.seq, Some(ClientReply::OutOfMemory));
                return self.reply(out, client, id, ClientReply::OutOfMemory);
            }
            self.retire_other_ec(&key, &written, out);
            self.stats.writes_committed += 1;
            let body = ClientReply::Written {
                version: written.version,
            };
            self.remember(client, id.seq, Some(body.clone()));
            return self.reply(out, client, id, body);
        }
        // Room on this node first: a write the coordinator could not store must be refused
        // before any replica holds it (a refused write must never resurface through repair).
        if !self.store.reserve(&key, &entry) {
            self.stats.writes_out_of_memory += 1;
            self.remember(client, id.seq, Some(ClientReply::OutOfMemory));
            return self.reply(out, client, id, ClientReply::OutOfMemory);
        }
        self.remember(client, id.seq, None);
        for t in &targets {
            let c = self.inflight.entry(*t).or_insert((0, 0));
            c.0 += 1;
            c.1 = c.1.saturating_add(bytes);
            self.send(
                out,
                *t,
                PeerBody::Replicate {
                    key: key.clone(),
                    entry: entry.clone(),
                },
            );
        }
        self.uncommitted_add(&key, entry.version);
        self.slot_written_ms.insert(slot, now_ms);
        let version = entry.version;
        self.pending.insert(
            entry.version,
            Pending {
                key,
                slot,
                entry,
                client: Some((client, id)),
                needed: majority(copies) - 1,
                targets,
                acked: BTreeSet::new(),
                refused: BTreeSet::new(),
                committed: false,
                last_send_ms: now_ms,
                resends: 0,
                bytes,
                ec: None,
                retire,
            },
        );
        if copies <= 1 {
            // `none` moving away from rep:R: only the retire phase remains.
            self.commit(version, out);
        }
    }

    /// Version, memgest and liveness of `key`'s newest entry, pending or stored (the head
    /// of [`Replica::latest_entry`]); reads no value.
    fn newest_head(&self, key: &[u8]) -> Option<(Version, MemgestId, bool)> {
        let pend = self
            .uncommitted
            .get(key)
            .and_then(|s| s.iter().next_back())
            .and_then(|v| self.pending.get(v))
            .map(|p| (p.entry.version, p.entry.memgest, p.entry.value.is_some()));
        match (pend, self.store.head(key)) {
            (Some(p), Some(s)) => Some(if p.0 > s.0 { p } else { s }),
            (p, s) => p.or(s),
        }
    }

    /// The newest entry this coordinator knows for `key`: pending or stored.
    fn latest_entry(&self, key: &[u8]) -> Option<Entry> {
        let pend = self
            .uncommitted
            .get(key)
            .and_then(|s| s.iter().next_back())
            .and_then(|v| self.pending.get(v))
            .map(|p| p.entry.clone());
        let stored = self.store.get(key);
        match (pend, stored) {
            (Some(p), Some(s)) => Some(if p.version > s.version { p } else { s }),
            (p, s) => p.or(s),
        }
    }

    /// Remember that a memgest move retired this replica's copy of `key` at `version`
    /// (see `retired_floors`).
    fn note_retired(&mut self, key: &[u8], version: Version) {
        match self.retired_floors.get_mut(key) {
            Some(v) => *v = (*v).max(version),
            None => {
                while self.retired_order.len() >= limits::RETIRED_FLOORS_MAX as usize {
                    if let Some(old) = self.retired_order.pop_front() {
                        self.retired_floors.remove(&old);
                    }
                }
                self.retired_floors.insert(key.to_vec(), version);
                self.retired_order.push_back(key.to_vec());
            }
        }
    }

    /// Old replicas a write of `key` under `new` must retire before it commits (a move to a
    /// memgest with fewer copies), or `None`.
    ///
    /// The old copies are those of every version that may still be on the replicas: the
    /// committed entry and each write still in flight, not only the newest. A write in
    /// flight whose own retire has not finished (rep:3 → ec) leaves the rep:3 copies a
    /// majority until it commits; a second write after it (ec → ec) that looked only at
    /// the newest version (ec, one copy) retired nothing, was acknowledged, and a quorum
    /// read then returned the rep:3 value from the two untouched replicas (sim seed 20116).
    fn move_retire(&self, key: &[u8], slot: Slot, new: MemgestId) -> Option<MoveRetire> {
        let map = self.map.as_ref()?;
        let in_flight = self
            .uncommitted
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|v| self.pending.get(v))
            .map(|p| p.entry.memgest);
        // The stored entry's memgest and every in-flight one's (the newest entry is one of
        // them); none: a new key, nothing to retire. Heads only: reading the newest entry
        // whole copied its value on every write (~4 % of a node's CPU under a SET load).
        let oc = self
            .store
            .head(key)
            .map(|(_, m, _)| m)
            .into_iter()
            .chain(in_flight)
            .map(|m| map.copies(m))
            .max()?;
        let nc = map.copies(new).max(1);
        if oc <= nc {
            return None;
        }
        let needed = (oc - nc).saturating_sub(oc / 2);
        if needed == 0 {
            return None;
        }
        let targets: Vec<NodeId> = self
            .range(slot)?
            .cohort
            .iter()
            .take(oc)
            .skip(nc)
            .copied()
            .collect();
        Some(MoveRetire {
            span: (nc, oc),
            needed: needed.min(targets.len()),
            targets,
            acked: BTreeSet::new(),
            started: false,
        })
    }

    fn on_ack(
        &mut self,
        from: NodeId,
        key: Vec<u8>,
        version: Version,
        ok: bool,
        out: &mut Vec<Output>,
    ) {
        if !self.pending.contains_key(&version)
            && self.on_ec_takeover_retire_ack(from, &key, version, ok)
        {
            return;
        }
        let Some(p) = self.pending.get_mut(&version) else {
            return;
        };
        if p.key != key {
            return;
        }
        if let Some(r) = p.retire.as_mut() {
            if r.targets.contains(&from) {
                if ok && r.started {
                    r.acked.insert(from);
                }
                if r.started && r.acked.len() >= r.needed && !p.committed {
                    self.commit(version, out);
                    if let Some(p) = self.pending.get(&version) {
                        if p.committed
                            && p.targets
                                .iter()
                                .all(|t| p.acked.contains(t) || p.refused.contains(t))
                        {
                            self.drop_pending(version);
                        }
                    }
                }
                return;
            }
        }
        if !ok {
            self.stats.replicate_refused += 1;
            return;
        }
        if p.targets.contains(&from) && p.acked.insert(from) && !p.refused.remove(&from) {
            if let Some(c) = self.inflight.get_mut(&from) {
                c.0 = c.0.saturating_sub(1);
                c.1 = c.1.saturating_sub(p.bytes);
            }
        }
        if !p.committed && p.acked.len() >= p.needed {
            self.commit(version, out);
        }
        if let Some(p) = self.pending.get(&version) {
            if p.committed
                && p.targets
                    .iter()
                    .all(|t| p.acked.contains(t) || p.refused.contains(t))
            {
                self.drop_pending(version);
            }
        }
    }

    /// A target had no room for `version` of `key`. Once every target has answered and none
    /// stored it, the commit rule can never hold and no copy exists anywhere but this
    /// coordinator's reservation: the write is refused with `OutOfMemory`, a definite
    /// failure. While some target stored it (possible only with R ≥ 5 or a slow ack), the
    /// write stays pending and keeps being offered, as for an unreachable replica.
    fn on_refused(&mut self, from: NodeId, key: Vec<u8>, version: Version, out: &mut Vec<Output>) {
        let Some(p) = self.pending.get_mut(&version) else {
            return;
        };
        if p.key != key || !p.targets.contains(&from) || p.acked.contains(&from) {
            return;
        }
        self.stats.replicate_refused += 1;
        if p.refused.insert(from) {
            if let Some(c) = self.inflight.get_mut(&from) {
                c.0 = c.0.saturating_sub(1);
                c.1 = c.1.saturating_sub(p.bytes);
            }
        }
        let all_answered = p.targets.len() == p.acked.len() + p.refused.len();
        if p.committed {
            // Committed without this copy: stop offering it; repair retries later.
            if all_answered {
                self.drop_pending(version);
            }
            return;
        }
        if !(all_answered && p.acked.is_empty() && p.ec.is_none()) {
            return;
        }
        let Some(mut p) = self.drop_pending(version) else {
            return;
        };
        self.store.unreserve(&p.key, version);
        self.uncommitted_remove(&p.key, version);
        self.stats.writes_out_of_memory += 1;
        if let Some((c, id)) = p.client.take() {
            if self.dedup.get(&c).is_some_and(|d| d.seq == id.seq) {
                self.remember(c, id.seq, Some(ClientReply::OutOfMemory));
            }
            self.reply(out, c, id, ClientReply::OutOfMemory);
        }
        self.wake_reads(&p.key, out);
    }

    fn commit(&mut self, version: Version, out: &mut Vec<Output>) {
        let Some(p) = self.pending.get_mut(&version) else {
            return;
        };
        if let Some(r) = p.retire.as_mut() {
            if r.acked.len() < r.needed {
                // Second phase of a move: the new version is durable under its memgest;
                // now retire enough old replicas before it becomes visible.
                if !r.started {
                    r.started = true;
                    let (key, targets) = (p.key.clone(), r.targets.clone());
                    for t in targets {
                        self.send(
                            out,
                            t,
                            PeerBody::Retire {
                                key: key.clone(),
                                version,
                            },
                        );
                    }
                }
                return;
            }
        }
        p.committed = true;
        let (key, entry, client) = (p.key.clone(), p.entry.clone(), p.client.take());
        if let Some(ec) = p.ec.clone() {
            if self.ec_commit(&ec) {
                return; // background update: no store entry, no client
            }
        }
        let applied = self.apply_local(&key, entry.clone());
        if applied == ApplyOutcome::Refused {
            // Only when the reservation made in `write` was lost (a newer write of the same
            // key replaced it) and the node filled up meanwhile. A majority of replicas holds
            // the write, so it is not refused: it may surface through repair.
            self.stats.commit_apply_refused += 1;
        } else {
            self.retire_other_ec(&key, &entry, out);
            self.stats.writes_committed += 1;
        }
        self.uncommitted_remove(&key, version);
        if let Some((c, id)) = client {
            let body = if applied == ApplyOutcome::Refused {
                ClientReply::Ambiguous { version }
            } else {
                ClientReply::Written { version }
            };
            if self.dedup.get(&c).is_some_and(|d| d.seq == id.seq) {
                self.remember(c, id.seq, Some(body.clone()));
            }
            self.reply(out, c, id, body);
        }
        if applied == ApplyOutcome::Refused {
            // Not held here: stop tracking it (repair reconciles the replicas later).
            if let Some(p) = self.drop_pending(version) {
                for t in &p.targets {
                    if !p.acked.contains(t) && !p.refused.contains(t) {
                        if let Some(c) = self.inflight.get_mut(t) {
                            c.0 = c.0.saturating_sub(1);
                            c.1 = c.1.saturating_sub(p.bytes);
                        }
                    }
                }
            }
        }
        self.wake_reads(&key, out);
    }

    fn wake_reads(&mut self, key: &[u8], out: &mut Vec<Output>) {
        let Some(list) = self.parked.remove(key) else {
            return;
        };
        let lowest = self
            .uncommitted
            .get(key)
            .and_then(|s| s.iter().next().copied());
        let mut keep = Vec::new();
        for p in list {
            if lowest.is_some_and(|v| v <= p.threshold) {
                keep.push(p);
            } else {
                self.parked_count -= 1;
                let now = self.last_now_ms;
                self.answer_read(now, p.client, p.id, key, out);
            }
        }
        if !keep.is_empty() {
            self.parked.insert(key.to_vec(), keep);
        }
    }

    /// Drop coordination of `first..=last`: pending writes become Ambiguous for their clients
    /// (they may still commit through a successor's rebuild); parked reads are told to retry.
    fn abandon(&mut self, first: Slot, last: Slot, out: &mut Vec<Output>) {
        let versions: Vec<Version> = self
            .pending
            .iter()
            .filter(|(_, p)| p.slot >= first && p.slot <= last)
            .map(|(v, _)| *v)
            .collect();
        for v in versions {
            if let Some(mut p) = self.drop_pending(v) {
                self.store.unreserve(&p.key, v);
                for t in &p.targets {
                    if !p.acked.contains(t) && !p.refused.contains(t) {
                        if let Some(c) = self.inflight.get_mut(t) {
                            c.0 = c.0.saturating_sub(1);
                            c.1 = c.1.saturating_sub(p.bytes);
                        }
                    }
                }
                self.uncommitted_remove(&p.key, v);
                if let Some((c, id)) = p.client.take() {
                    let body = ClientReply::Ambiguous { version: v };
                    if self.dedup.get(&c).is_some_and(|d| d.seq == id.seq) {
                        self.remember(c, id.seq, Some(body.clone()));
                    }
                    self.reply(out, c, id, body);
                }
            }
        }
        let keys: Vec<Vec<u8>> = self
            .parked
            .keys()
            .filter(|k| {
                let s = key_slot(k);
                s >= first && s <= last
            })
            .cloned()
            .collect();
        for k in keys {
            for p in self.parked.remove(&k).unwrap_or_default() {
                self.parked_count -= 1;
                self.reply(out, p.client, p.id, ClientReply::NotCoordinator);
            }
        }
    }

    // ------------------------------------------------------------------ map changes

    fn wipe_and_rejoin(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        // A fenced incarnation's data is not trusted (it may have missed writes, and the
        // cluster already rebuilt without it): come back empty as a new incarnation.
        for r in self.ranges.clone() {
            self.abandon(r.first, r.last, out);
        }
        self.store.clear();
        self.incarnation += 1;
        self.next_id = self.incarnation << 32;
        self.map = None;
        self.ranges.clear();
        self.fences.clear();
        self.pending.clear();
        self.partial.clear();
        self.ec_acks.clear();
        self.uncommitted.clear();
        self.inflight_keys.clear();
        self.inflight.clear();
        self.parked.clear();
        self.parked_count = 0;
        self.dedup.clear();
        self.dedup_order.clear();
        self.pull_index.clear();
        self.ec_data.clear();
        self.ec_parity.clear();
        self.ec_retained.clear();
        self.ec_retained_data.clear();
        self.ec_jobs.clear();
        self.ec_reqs.clear();
        self.copy = None;
        self.lease_until_ms = 0;
        self.last_heartbeat_ms = Some(now_ms);
        out.push(Output::Control(ControlInput::Join {
            node: self.id,
            addr: self.cfg.addr.clone(),
            incarnation: self.incarnation,
        }));
    }

    fn on_map(&mut self, now_ms: u64, map: Arc<ClusterMap>, out: &mut Vec<Output>) {
        if map.epoch <= self.epoch {
            return; // older or same map: epochs never go backwards here
        }
        match map.nodes.get(&self.id) {
            Some(n) if n.incarnation == self.incarnation && n.state == NodeState::Failed => {
                self.epoch = map.epoch;
                return self.wipe_and_rejoin(now_ms, out);
            }
            Some(n) if n.incarnation > self.incarnation => {
                self.epoch = map.epoch;
                self.incarnation = n.incarnation;
                return self.wipe_and_rejoin(now_ms, out);
            }
            _ => {}
        }
        // Single-copy memgests declared caches evict when the node is full (as the single
        // node does); everything replicated stays pinned and refuses instead.
        let caches: Vec<MemgestId> = map
            .memgests
            .iter()
            .filter(|(_, m)| m.kind == MemgestKind::None && m.evictable)
            .map(|(id, _)| *id)
            .collect();
        self.store.set_evictable(&caches);
        let old_map = self.map.take();
        let old_ranges = std::mem::take(&mut self.ranges);
        let depth = map.replica_depth();
        let mut new_ranges = Vec::new();
        let mut to_abandon = Vec::new();
        let i_am_member = map
            .nodes
            .get(&self.id)
            .is_some_and(|n| n.incarnation == self.incarnation);
        let placed_at_bootstrap = map.placed_epoch != Epoch(0)
            && map
                .nodes
                .get(&self.id)
                .is_some_and(|n| n.roles_epoch == map.placed_epoch);
        let mut to_wipe = Vec::new();
        if let (Some(p), true) = (&map.placement, i_am_member) {
            for r in &p.ranges {
                let cohort = p.range_cohort(r);
                let offset = cohort.iter().position(|n| *n == self.id);
                let role = match offset {
                    Some(0) => Role::Coordinator,
                    Some(o) if o < depth => Role::Replica,
                    _ => Role::None,
                };
                // The old range this one was cut from: ranges are only ever split or
                // reassigned whole, never merged (Placement::assign), so one contains it.
                let old = old_ranges
                    .partition_point(|o| o.first <= r.first)
                    .checked_sub(1)
                    .and_then(|i| old_ranges.get(i))
                    .filter(|o| o.last >= r.last);
                let carried = old.filter(|o| {
                    o.role == role && o.offset == offset && o.pg == r.pg && role != Role::None
                });
                let handoff = map.handoff(r.first, r.last).copied();
                let prior: Vec<NodeId> = handoff
                    .map(|h| map.prior_cohort(&h).into_iter().take(depth).collect())
                    .unwrap_or_default();
                let held = old.is_some_and(|o| {
                    (o.role != Role::None && matches!(o.status, Status::Ready))
                        || matches!(o.status, Status::Retired)
                        || o.held
                });
                let status = if let Some(o) = carried {
                    let mut st = o.status.clone();
                    if let Status::Pulling(p) = &mut st {
                        // The cohort may have changed under a running pull (e.g. the
                        // coordinator we sync from failed): pull from the current sources,
                        // keeping progress with those that stay.
                        p.prior = prior.clone();
                        p.rate_kib_s = handoff.map_or(0, |h| h.rate_kib_s);
                        let want: Vec<NodeId> = match p.purpose {
                            // (A range's pull is never a Copy: that one is `node/copy.rs`'s.)
                            PullPurpose::Sync | PullPurpose::Copy => {
                                cohort.first().copied().into_iter().collect()
                            }
                            PullPurpose::Rebuild => cohort
                                .iter()
                                .skip(1)
                                .take(depth.saturating_sub(1))
                                .copied()
                                .chain(p.pred)
                                .chain(prior.iter().copied())
                                .collect(),
                        };
                        p.sources.retain(|n, _| want.contains(n));
                        for n in want {
                            if n != self.id {
                                p.sources.entry(n).or_insert(Source {
                                    req_id: 0,
                                    after: None,
                                    sent_ms: 0,
                                    done: false,
                                });
                            }
                        }
                    }
                    st
                } else {
                    // A range given away stays Retired across later maps (until released):
                    // its data may still be pulled by the new owner.
                    let had_data = old.is_some_and(|o| {
                        (o.role != Role::None && matches!(o.status, Status::Ready))
                            || matches!(o.status, Status::Retired)
                    });
                    if old.is_some_and(|o| o.role == Role::Coordinator) {
                        to_abandon.push((r.first, r.last));
                    }
                    // Leftovers of a range this node gave away and has not yet purged: a
                    // new role starts from what its sources hold, never from stale copies
                    // (a key deleted meanwhile would come back).
                    if role != Role::None
                        && old.is_some_and(|o| {
                            o.role == Role::None && matches!(o.status, Status::Retired)
                        })
                    {
                        to_wipe.push((r.first, r.last));
                    }
                    match role {
                        Role::None if had_data => Status::Retired,
                        Role::None => Status::Idle,
                        // Placed at bootstrap, range never moved: no data existed before
                        // this node held the position, nothing to rebuild.
                        Role::Coordinator | Role::Replica
                            if placed_at_bootstrap && r.moved == 0 =>
                        {
                            Status::Ready
                        }
                        Role::Coordinator | Role::Replica => {
                            let pred = old_map.as_ref().and_then(|om| {
                                let oc = om.cohort(r.first);
                                let prev = *oc.get(offset.unwrap_or(0))?;
                                (prev != self.id
                                    && map.node_state(prev) == Some(NodeState::Draining))
                                .then_some(prev)
                            });
                            let purpose = if role == Role::Coordinator {
                                PullPurpose::Rebuild
                            } else {
                                PullPurpose::Sync
                            };
                            let mut sources = BTreeMap::new();
                            let srcs: Vec<NodeId> = if role == Role::Coordinator {
                                cohort
                                    .iter()
                                    .skip(1)
                                    .take(depth - 1)
                                    .copied()
                                    .chain(pred)
                                    .chain(prior.iter().copied())
                                    .collect()
                            } else {
                                cohort.first().copied().into_iter().collect()
                            };
                            for s in srcs {
                                if s != self.id {
                                    sources.insert(
                                        s,
                                        Source {
                                            req_id: 0,
                                            after: None,
                                            sent_ms: 0,
                                            done: false,
                                        },
                                    );
                                }
                            }
                            Status::Pulling(Pull {
                                purpose,
                                sources,
                                pred: if role == Role::Coordinator {
                                    pred
                                } else {
                                    None
                                },
                                prior: if role == Role::Coordinator {
                                    prior.clone()
                                } else {
                                    Vec::new()
                                },
                                refused: BTreeSet::new(),
                                started_ms: now_ms,
                                rate_kib_s: handoff.map_or(0, |h| h.rate_kib_s),
                                paced_until_ms: 0,
                                pulled_bytes: 0,
                                pulled_keys: 0,
                                progress_ms: now_ms,
                                delta: false,
                                fresh: BTreeSet::new(),
                                copied: (0, 0, 0),
                                ec_reencoding: BTreeMap::new(),
                            })
                        }
                    }
                };
                let held = held
                    && !to_wipe.contains(&(r.first, r.last))
                    && !matches!(status, Status::Idle);
                new_ranges.push(RangeState {
                    first: r.first,
                    last: r.last,
                    pg: r.pg,
                    cohort,
                    offset,
                    role,
                    status,
                    held,
                });
            }
        }
        // Slots this node coordinated and no longer coordinates with the same status
        // (reassigned, or the range vanished): abandon what is in flight there. Only the
        // parts that changed: a range split by a move keeps its other parts' writes.
        for o in &old_ranges {
            if o.role != Role::Coordinator {
                continue;
            }
            for n in &new_ranges {
                if n.last < o.first || n.first > o.last {
                    continue;
                }
                let kept = n.role == Role::Coordinator
                    && n.pg == o.pg
                    && n.offset == o.offset
                    && n.first >= o.first
                    && n.last <= o.last;
                let span = (n.first.max(o.first), n.last.min(o.last));
                if !kept && !to_abandon.contains(&span) {
                    to_abandon.push(span);
                }
            }
            if new_ranges.is_empty() && !to_abandon.contains(&(o.first, o.last)) {
                to_abandon.push((o.first, o.last));
            }
        }
        for (f, l) in to_wipe {
            self.wipe_range(f, l);
        }
        self.ranges = new_ranges;
        self.epoch = map.epoch;
        self.map = Some(map.clone());
        for (f, l) in to_abandon {
            self.abandon(f, l, out);
        }
        // Fences older than the map are now expressed by the map itself.
        let epoch = self.epoch;
        self.fences.retain(|_, f| f.epoch > epoch);
        self.pull_index.clear();
        for r in 0..self.ranges.len() {
            if let Some(rs) = self.ranges.get_mut(r) {
                if let Status::Pulling(p) = &mut rs.status {
                    for s in p.sources.values_mut() {
                        s.sent_ms = 0; // resend under the new epoch
                        s.req_id = 0;
                    }
                }
            }
        }
        self.copy_on_map(now_ms, &map);
        self.ec_on_map(old_map.as_deref(), placed_at_bootstrap, out);
        self.retarget_pending(out);
        self.drive_ec(now_ms, out);
        self.drive_pulls(now_ms, out);
    }

    /// After a map change, pending writes replicate to the current holders; acks from nodes
    /// that are no longer holders stop counting (their copy may be gone with them).
    fn retarget_pending(&mut self, out: &mut Vec<Output>) {
        let Some(map) = self.map.clone() else { return };
        let versions: Vec<Version> = self.pending.keys().copied().collect();
        let mut orphaned = Vec::new();
        for v in versions {
            let Some(p) = self.pending.get(&v) else {
                continue;
            };
            let copies = map.copies(p.entry.memgest);
            let targets: Vec<NodeId> = match &p.ec {
                Some(e) => self
                    .ec_data
                    .get(&(e.pg, e.memgest))
                    .map(|d| d.holders.clone())
                    .unwrap_or_default(),
                None => self
                    .range(p.slot)
                    .map(|r| {
                        r.cohort
                            .iter()
                            .skip(1)
                            .take(copies.saturating_sub(1))
                            .copied()
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            let cohort: Vec<NodeId> = self
                .range(p.slot)
                .map(|r| r.cohort.clone())
                .unwrap_or_default();
            let Some(p) = self.pending.get_mut(&v) else {
                continue;
            };
            if let Some(r) = p.retire.as_mut() {
                let t: Vec<NodeId> = cohort
                    .iter()
                    .take(r.span.1)
                    .skip(r.span.0)
                    .copied()
                    .collect();
                r.acked.retain(|a| t.contains(a));
                r.needed = r.needed.min(t.len());
                r.targets = t;
                if r.started {
                    p.last_send_ms = 0; // resend the retires to the new holders
                }
            }
            if targets == p.targets {
                if targets.is_empty() && p.ec.as_ref().is_some_and(|e| e.bg) {
                    orphaned.push(v);
                }
                continue;
            }
            for t in &p.targets {
                if !p.acked.contains(t) && !p.refused.contains(t) {
                    if let Some(c) = self.inflight.get_mut(t) {
                        c.0 = c.0.saturating_sub(1);
                        c.1 = c.1.saturating_sub(p.bytes);
                    }
                }
            }
            p.acked.retain(|a| targets.contains(a));
            // A new target set: everyone not acked is asked (and budgeted) afresh.
            p.refused.clear();
            for t in &targets {
                if !p.acked.contains(t) {
                    let c = self.inflight.entry(*t).or_insert((0, 0));
                    c.0 += 1;
                    c.1 = c.1.saturating_add(p.bytes);
                }
            }
            p.targets = targets;
            p.last_send_ms = 0; // resend now
            if p.targets.is_empty() && p.ec.as_ref().is_some_and(|e| e.bg) {
                orphaned.push(v);
            }
            let _ = &out;
        }
        // A background ec update (retiring a given-away span's metadata) whose group lost
        // its parity holders (the group was retired with a removed node, or the arena is
        // gone): no holder is left to keep consistent, so it completes here; with no
        // targets no ack would ever commit it (sim seed 7371: a removed node's purge of
        // its last span, its group retired a moment later, never settled).
        for v in orphaned {
            if let Some(p) = self.drop_pending(v) {
                if let Some(ec) = &p.ec {
                    self.ec_commit(ec);
                }
            }
        }
    }

    // ------------------------------------------------------------------ pulls

    fn drive_pulls(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        self.settle_reencodes(now_ms);
        let retry = self.cfg.pull_retry_ms;
        let mut sends = Vec::new();
        let mut finished = Vec::new();
        let mut wipes = Vec::new();
        let map = self.map.clone();
        for ri in 0..self.ranges.len() {
            let Some(r) = self.ranges.get_mut(ri) else {
                continue;
            };
            let (first, last) = (r.first, r.last);
            let Status::Pulling(p) = &mut r.status else {
                continue;
            };
            // A rate-limited handoff may take longer than the rebuild timeout by the
            // operator's choice: its timeout counts from the last page received, or the
            // end of its own pacing wait, instead (only a silent source is a stall).
            let since = if p.rate_kib_s > 0 {
                p.started_ms.max(p.progress_ms).max(p.paced_until_ms)
            } else {
                p.started_ms
            };
            if p.purpose == PullPurpose::Rebuild
                && now_ms.saturating_sub(since) >= self.cfg.rebuild_timeout_ms
            {
                finished.push((ri, true));
                continue;
            }
            if now_ms < p.paced_until_ms
                || p.ec_reencoding.len() >= ec_bounds::EC_REENCODES_IN_FLIGHT_MAX
            {
                continue;
            }
            let old = p.prior.first().copied();
            // A replacement of the old coordinator holds only the span's ec values: a
            // delta against it would reset every slot.
            let old_active = old.is_some_and(|o| {
                map.as_ref().is_some_and(|m| {
                    m.node_state(o) == Some(NodeState::Active) && !replaced_in(m, first, last)
                })
            });
            if p.delta && !old_active {
                // The old coordinator failed: the copy taken from it cannot be completed by
                // a delta. Start over as a plain rebuild from its replicas' majority.
                wipes.push((first, last));
                p.delta = false;
                p.fresh.clear();
                for s in p.sources.values_mut() {
                    *s = Source {
                        req_id: 0,
                        after: None,
                        sent_ms: 0,
                        done: false,
                    };
                }
            }
            // A handed-off range whose old coordinator is alive completes on its answer
            // alone (`pull_complete`, `unconfirmed_memgests`): asking the other sources too
            // would copy the span two or three times more over the network for nothing.
            // The others are asked once it fails (the map says so) or goes quiet for a
            // retry interval (a partition the map does not show yet): their answers then
            // confirm the rebuild if it fails later.
            let quiet = now_ms.saturating_sub(p.progress_ms.max(p.paced_until_ms)) >= retry;
            let only = p.prior.first().copied().filter(|old| {
                !quiet
                    && *old != self.id
                    && map
                        .as_ref()
                        .is_some_and(|m| m.node_state(*old) == Some(NodeState::Active))
            });
            for (node, s) in p.sources.iter_mut() {
                if s.done || only.is_some_and(|o| o != *node) {
                    continue;
                }
                if s.req_id == 0 || now_ms.saturating_sub(s.sent_ms) >= retry {
                    self.next_id = self.next_id.wrapping_add(1);
                    s.req_id = self.next_id;
                    s.sent_ms = now_ms;
                    sends.push((
                        *node,
                        s.req_id,
                        PeerBody::PullReq {
                            id: s.req_id,
                            purpose: p.purpose,
                            first,
                            last,
                            after: s.after.clone(),
                            delta: p.delta && old == Some(*node),
                            have: Vec::new(), // filled below (needs the store)
                        },
                    ));
                }
            }
        }
        for (f, l) in wipes {
            self.wipe_range(f, l);
        }
        for (_, _, body) in sends.iter_mut() {
            if let PeerBody::PullReq {
                first,
                last,
                delta: true,
                have,
                ..
            } = body
            {
                *have = self.slot_digests(*first, *last);
            }
        }
        for (node, id, body) in sends {
            if let PeerBody::PullReq { first, .. } = &body {
                self.pull_index.insert(id, (*first, node));
            }
            self.send(out, node, body);
        }
        for (ri, timed_out) in finished {
            self.finish_pull(now_ms, ri, timed_out, out);
        }
        // Completion may also be reached without timeouts (e.g. no sources needed).
        for ri in 0..self.ranges.len() {
            if self.pull_complete(ri) {
                self.finish_pull(now_ms, ri, false, out);
            }
        }
        self.retire_ec_leftovers(out);
    }

    /// A write of `key` at `version` is in flight (before its first Replicate goes out).
    pub(crate) fn uncommitted_add(&mut self, key: &[u8], version: Version) {
        let set = self.uncommitted.entry(key.to_vec()).or_default();
        if set.is_empty() {
            self.inflight_keys.add(key);
        }
        set.insert(version);
    }

    /// The write of `key` at `version` ended (after its value, if committed, is stored).
    pub(crate) fn uncommitted_remove(&mut self, key: &[u8], version: Version) {
        if let Some(set) = self.uncommitted.get_mut(key) {
            set.remove(&version);
            if set.is_empty() {
                self.uncommitted.remove(key);
                self.inflight_keys.remove(key);
            }
        }
    }

    /// Ask the control plane to mark `memgest` written (at most every
    /// [`MARK_WRITTEN_RETRY_MS`] per memgest; the request is idempotent).
    fn request_written_mark(&mut self, now_ms: u64, memgest: MemgestId, out: &mut Vec<Output>) {
        let due = self
            .mark_requested
            .get(&memgest)
            .is_none_or(|t| now_ms.saturating_sub(*t) >= MARK_WRITTEN_RETRY_MS);
        if due {
            // Bounded: one entry per memgest of the map (at most MEMGESTS_MAX).
            self.mark_requested.insert(memgest, now_ms);
            out.push(Output::Control(ControlInput::MarkWritten { memgest }));
        }
    }

    pub(super) fn pull_complete(&self, ri: usize) -> bool {
        let Some(r) = self.ranges.get(ri) else {
            return false;
        };
        let Status::Pulling(p) = &r.status else {
            return false;
        };
        let Some(map) = &self.map else { return false };
        let done = |n: &NodeId| p.sources.get(n).is_some_and(|s| s.done);
        match p.purpose {
            PullPurpose::Sync | PullPurpose::Copy => r.cohort.first().is_some_and(done),
            PullPurpose::Rebuild => {
                if let Some(pred) = p.pred {
                    if map.node_state(pred) == Some(NodeState::Draining) && !done(&pred) {
                        return false;
                    }
                }
                // A handed-off range waits for its old coordinator while that one lives:
                // only it has the single-copy keys, and it has every acknowledged write.
                if let Some(old) = p.prior.first() {
                    if *old != self.id
                        && map.node_state(*old) == Some(NodeState::Active)
                        && !done(old)
                    {
                        return false;
                    }
                }
                self.ec_loaded(r.pg)
                    && self.unconfirmed_memgests(ri).is_empty()
                    && p.ec_reencoding.is_empty()
            }
        }
    }

    /// Whether the node now at a handed-off span's old pair is not the coordinator that
    /// handed it off (it failed and a spare replaced it).
    fn old_coordinator_replaced(&self, first: Slot, last: Slot) -> bool {
        self.map
            .as_ref()
            .is_some_and(|m| replaced_in(m, first, last))
    }

    /// This node replaced the old coordinator of handed-off span `first..=last`.
    fn replacing_old_coordinator(&self, map: &ClusterMap, first: Slot, last: Slot) -> bool {
        map.handoff(first, last).is_some_and(|h| {
            map.prior_cohort(h).first() == Some(&self.id)
                && replaced_in(map, first, last)
                && map
                    .nodes
                    .get(&self.id)
                    .is_some_and(|n| n.incarnation == self.incarnation)
        })
    }

    /// Answer a rebuild pull of a handed-off span with its ec values only (see
    /// `replacing_old_coordinator`): not ready until every ec arena of the old group here
    /// is whole (loaded and recovered).
    fn answer_ec_only(
        &mut self,
        from: NodeId,
        id: u64,
        (first, last): (Slot, Slot),
        after: Option<(Slot, Vec<u8>)>,
        map: &ClusterMap,
        out: &mut Vec<Output>,
    ) {
        let not_ready = PeerBody::PullResp {
            id,
            ready: false,
            resets: Vec::new(),
            entries: Vec::new(),
            next: None,
        };
        let Some(h) = map.handoff(first, last) else {
            return self.send(out, from, not_ready);
        };
        let whole = self
            .ec_data
            .iter()
            .filter(|((pg, _), _)| *pg == h.from_pg)
            .all(|(_, d)| matches!(d.state, ec::DataState::Ready));
        if !whole {
            return self.send(out, from, not_ready);
        }
        let m = map.clone();
        let filter = move |g: MemgestId| matches!(m.memgest_kind(g), MemgestKind::Ec { .. });
        let bound = (PULL_ENTRIES_PER_PAGE_MAX, PULL_BYTES_PER_PAGE_MAX);
        let Some((entries, next, _)) =
            self.page(first, last, after, &filter, None, true, false, bound)
        else {
            return self.send(out, from, not_ready);
        };
        self.stats.move_ec_replacement_pages += 1;
        self.send(
            out,
            from,
            PeerBody::PullResp {
                id,
                ready: true,
                resets: Vec::new(),
                entries,
                next,
            },
        );
    }

    /// The replicated memgests of a rebuilding range that a majority of their old replicas
    /// has not yet confirmed (delivered everything they hold): the ones whose acknowledged
    /// writes may be missing if the rebuild gives up now.
    fn unconfirmed_memgests(&self, ri: usize) -> Vec<MemgestId> {
        let (Some(r), Some(map)) = (self.ranges.get(ri), &self.map) else {
            return Vec::new();
        };
        let Status::Pulling(p) = &r.status else {
            return Vec::new();
        };
        // This node's own copy counts when it held the range (a move between two pairs it
        // coordinates both of, or a replica of the old cohort now in the new one).
        let done =
            |n: &NodeId| (*n == self.id && r.held) || p.sources.get(n).is_some_and(|s| s.done);
        // A replacement of the old coordinator answers with the span's ec values only: its
        // answer confirms the ec memgests, never a replicated one.
        let replaced = self.old_coordinator_replaced(r.first, r.last);
        let old_done = p.prior.first().is_some_and(&done);
        // A handed-off range whose old coordinator answered has everything: it applied every
        // write it acknowledged and quiesced before the switch (its own copies came from a
        // confirmed rebuild). Its replicas may still be syncing from it, so no majority of
        // them is needed (the simulator found a back-to-back move waiting for one).
        if old_done && !replaced {
            return p.refused.iter().copied().collect();
        }
        let done = |n: &NodeId| done(n) && !(replaced && p.prior.first() == Some(n));
        let pred_vote = usize::from(p.pred.is_some_and(|n| done(&n)));
        map.memgests
            .iter()
            .filter(|(id, m)| {
                if p.refused.contains(id) {
                    return true; // this store refused some of its entries
                }
                // Never written: no write of it was ever acknowledged (the coordinator
                // waits for the mark before its first one), so nothing can be missing.
                if !m.written {
                    return false;
                }
                if matches!(m.kind, MemgestKind::Ec { .. }) && !p.prior.is_empty() {
                    // A handed-off span's ec values come only from the old pair's data
                    // node (the old coordinator, or the spare that replaced it and decoded
                    // them from the old group's parity), decoded, re-encoded here.
                    return !old_done;
                }
                let copies = match m.kind {
                    MemgestKind::Rep { r } => usize::from(r),
                    _ => 1,
                };
                if copies < 2 {
                    return false;
                }
                // A handed-off range: the old cohort's first `copies` members held the
                // memgest's copies, so they are the voters.
                let votes = if p.prior.is_empty() {
                    pred_vote
                        + r.cohort
                            .iter()
                            .skip(1)
                            .take(copies - 1)
                            .filter(|n| done(n))
                            .count()
                } else {
                    p.prior.iter().take(copies).filter(|n| done(n)).count()
                };
                votes < majority(copies)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    pub(super) fn finish_pull(
        &mut self,
        now_ms: u64,
        ri: usize,
        timed_out: bool,
        out: &mut Vec<Output>,
    ) {
        let Some(r) = self.ranges.get_mut(ri) else {
            return;
        };
        let Status::Pulling(p) = &r.status else {
            return;
        };
        let purpose = p.purpose;
        let (pulled_bytes, pulled_keys, started_ms) = (p.pulled_bytes, p.pulled_keys, p.started_ms);
        let (copied_bytes, copied_keys, copied_ms) = p.copied;
        let (first, last) = (r.first, r.last);
        // Named before the status changes (the votes are the pull's).
        let unconfirmed = if timed_out {
            self.unconfirmed_memgests(ri)
        } else {
            Vec::new()
        };
        let Some(r) = self.ranges.get_mut(ri) else {
            return;
        };
        r.status = Status::Ready;
        self.pull_index.retain(|_, (f, _)| *f != first);
        match purpose {
            PullPurpose::Rebuild => {
                // Versions issued from now on exceed anything the old coordinator issued: it
                // stopped before its lease ended, and `now` is past that (see module doc).
                self.hlc
                    .observe(Version::new(now_ms.saturating_add(1), u16::MAX, 0, 0));
                self.stats.rebuilds_completed += 1;
                if self
                    .map
                    .as_ref()
                    .is_some_and(|m| m.handoff(first, last).is_some())
                {
                    // A copy before the switch counts with its handoff: bytes and time of
                    // both pulls (not the wait between them for the fence).
                    self.stats.handoffs_completed += 1;
                    self.stats.handoff_bytes_pulled += pulled_bytes + copied_bytes;
                    self.stats.handoff_keys_pulled += pulled_keys + copied_keys;
                    self.stats.last_handoff_bytes = pulled_bytes + copied_bytes;
                    self.stats.last_handoff_ms = now_ms.saturating_sub(started_ms) + copied_ms;
                    self.stats.handoff_ms += self.stats.last_handoff_ms;
                    self.last_handoff_report_ms = None; // report at the next tick
                }
            }
            PullPurpose::Sync | PullPurpose::Copy => self.stats.syncs_completed += 1,
        }
        // One report per memgest that really may have lost writes: the others in the range
        // were confirmed by a majority (or never written) and lost nothing.
        for memgest in unconfirmed {
            self.stats.possible_loss += 1;
            out.push(Output::PossibleLoss {
                first,
                last,
                memgest,
                keys_lost: None,
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_pull_req(
        &mut self,
        from: NodeId,
        msg: &PeerMsg,
        id: u64,
        purpose: PullPurpose,
        (first, last): (Slot, Slot),
        after: Option<(Slot, Vec<u8>)>,
        have: Option<BTreeMap<Slot, u64>>,
        out: &mut Vec<Output>,
    ) {
        let not_ready = PeerBody::PullResp {
            id,
            ready: false,
            resets: Vec::new(),
            entries: Vec::new(),
            next: None,
        };
        if msg.epoch < self.epoch {
            return self.send(out, from, not_ready);
        }
        // A rebuild from a newer map: this node may not have seen the switch yet (a whole
        // range moved looks the same before it), and what it sends depends on it (a
        // handed-off span's ec values go decoded). It will within a map broadcast; the
        // puller asks again (after DELTA_RETRY_MS for a handoff's old coordinator). The
        // simulator found a whole-range move whose ec values never reached the target.
        if purpose == PullPurpose::Rebuild && msg.epoch > self.epoch {
            return self.send(out, from, not_ready);
        }
        let Some(ri) = self.range_index(first) else {
            return self.send(out, from, not_ready);
        };
        let Some(r) = self.ranges.get(ri).cloned() else {
            return;
        };
        // A copy (resharding phase 0) may ask for any span inside a coordinated range;
        // everything else names a range exactly.
        let inside = purpose == PullPurpose::Copy && r.first <= first && last <= r.last;
        if (r.first != first || r.last != last) && !inside {
            return self.send(out, from, not_ready);
        }
        let Some(map) = self.map.clone() else {
            return self.send(out, from, not_ready);
        };
        let mut extra = Vec::new();
        let filter: Box<dyn Fn(MemgestId) -> bool> = match purpose {
            PullPurpose::Rebuild => {
                if after.is_none() {
                    // Fence the range: from now on only `from` (or a newer epoch) may write it.
                    let fence = Fence {
                        epoch: msg.epoch,
                        node: from,
                        incarnation: msg.incarnation,
                    };
                    for s in first..=last {
                        let newer = self.fences.get(&s).is_none_or(|f| f.epoch < msg.epoch);
                        if newer {
                            self.fences.insert(s, fence);
                        }
                    }
                    if r.role == Role::Coordinator {
                        // Hand over what is in flight too: the successor decides its fate.
                        extra = self
                            .pending
                            .values()
                            .filter(|p| p.slot >= first && p.slot <= last && p.ec.is_none())
                            .map(|p| (p.key.clone(), p.entry.clone()))
                            .collect();
                        self.abandon(first, last, out);
                    }
                }
                let ok = match r.status {
                    Status::Ready => r.role != Role::None,
                    Status::Retired => true,
                    _ => r.held,
                };
                if !ok {
                    // The spare that replaced a handed-off span's old coordinator holds the
                    // span's ec values (its arena of the old group decoded them from the
                    // parity) and nothing else: it answers with those once that arena is
                    // whole. The new coordinator counts its answer for ec memgests only.
                    if self.replacing_old_coordinator(&map, first, last) {
                        let m = map.clone();
                        return self.answer_ec_only(from, id, (first, last), after, &m, out);
                    }
                    return self.send(out, from, not_ready);
                }
                Box::new(|_| true)
            }
            PullPurpose::Copy => {
                // Committed entries only (the store holds nothing else), nothing fenced or
                // abandoned: this node keeps serving the span until the move's phase 1.
                if !matches!(r.status, Status::Ready) || r.role != Role::Coordinator {
                    return self.send(out, from, not_ready);
                }
                Box::new(|_| true)
            }
            PullPurpose::Sync => {
                let ready = matches!(r.status, Status::Ready) && r.role == Role::Coordinator;
                let their = r.cohort.iter().position(|n| *n == from);
                match (ready, their, msg.epoch == self.epoch) {
                    (true, Some(o), true) => {
                        let m = map.clone();
                        Box::new(move |g| m.copies(g) > o)
                    }
                    _ => return self.send(out, from, not_ready),
                }
            }
        };
        // A handed-off span (this node was its old coordinator, in another group): its ec
        // values go decoded, for the new coordinator to re-encode in its own group.
        // A copy before the switch takes them the same way (session 15): the target
        // re-encodes them into its arena of the new group ahead of the switch.
        // Only the span's old coordinator has them: another member of the old cohort
        // answers a handoff's rebuild for the replicated memgests (its vote) and skips its
        // ec entries, which are stale pointers if it coordinated the span once before
        // (simulator seed 113923: an old replica that had been the span's coordinator two
        // moves earlier answered not-ready forever, unable to read those pointers, and the
        // new coordinator, its old coordinator crashed, gave up the rebuild).
        let old_coordinator =
            |h: &ringlet_control::Handoff| map.prior_cohort(h).first().copied() == Some(self.id);
        let ec_values = (purpose == PullPurpose::Rebuild
            && map.handoff(first, last).is_some_and(old_coordinator))
            || (purpose == PullPurpose::Copy && self.cfg.ec_copy_ahead);
        let skip_unready = purpose == PullPurpose::Copy;
        // A rate-limited copy (the default since session 17) pages small: its pace leaves
        // time between pages anyway, and each page is a step both ends take with the core
        // held. An unlimited copy keeps the large pages: it is chosen for speed (issue 12's
        // >= 100 MB/s per moving range), and its round trips would cost that.
        let paced = map.moving.is_some_and(|m| m.rate_kib_s > 0);
        let bound = if purpose == PullPurpose::Copy && paced {
            (COPY_ENTRIES_PER_PAGE_MAX, COPY_BYTES_PER_PAGE_MAX)
        } else {
            (PULL_ENTRIES_PER_PAGE_MAX, PULL_BYTES_PER_PAGE_MAX)
        };
        let Some((entries, next, resets)) = self.page(
            first,
            last,
            after,
            &*filter,
            have.as_ref(),
            ec_values,
            skip_unready,
            bound,
        ) else {
            return self.send(out, from, not_ready);
        };
        let mut entries = entries;
        entries.extend(extra);
        self.send(
            out,
            from,
            PeerBody::PullResp {
                id,
                ready: true,
                resets,
                entries,
                next,
            },
        );
    }

    /// One page of a range scan from `after`, bounded by entries and bytes.
    ///
    /// `have` (a delta pull): the puller's digest per non-empty slot. A slot the scan
    /// starts (not the one the cursor is inside) whose digest here equals the puller's is
    /// skipped; any other is listed in the returned resets and sent whole, including a
    /// slot empty here that the puller holds something in.
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn page(
        &self,
        first: Slot,
        last: Slot,
        after: Option<(Slot, Vec<u8>)>,
        filter: &dyn Fn(MemgestId) -> bool,
        have: Option<&BTreeMap<Slot, u64>>,
        ec_values: bool,
        skip_unready: bool,
        (entries_max, bytes_max): (usize, u64),
    ) -> Option<(Vec<(Vec<u8>, Entry)>, Option<(Slot, Vec<u8>)>, Vec<Slot>)> {
        let start = after.as_ref().map_or(first, |(s, _)| *s).max(first);
        let is_ec = |m: MemgestId| {
            self.map
                .as_ref()
                .is_some_and(|map| matches!(map.memgest_kind(m), MemgestKind::Ec { .. }))
        };
        let mut entries = Vec::new();
        let mut resets = Vec::new();
        let mut bytes: u64 = 0;
        let mut slots = self.store.nonempty_slots(start, last);
        if let Some(have) = have {
            slots.extend(have.range(start..=last).map(|(s, _)| *s));
            slots.sort_unstable();
            slots.dedup();
        }
        for slot in slots {
            let mut cursor: Option<Vec<u8>> = match &after {
                Some((s, k)) if *s == slot => Some(k.clone()),
                _ => None,
            };
            if let (Some(have), None) = (have, &cursor) {
                let theirs = have.get(&slot).copied().unwrap_or(0);
                if self.store.slot_digest(slot, filter) == theirs {
                    continue;
                }
                resets.push(slot);
            }
            loop {
                let chunk = self.store.scan_slot(slot, cursor.as_deref(), entries_max);
                let n = chunk.len();
                for (k, mut e) in chunk {
                    cursor = Some(k.clone());
                    if !filter(e.memgest) {
                        continue;
                    }
                    if is_ec(e.memgest) {
                        // ec entries are pointers into this node's arena. A takeover's
                        // successor rebuilds them from the parity holders; a handed-off
                        // span's new coordinator (another group) gets them decoded and
                        // re-encodes them (`ec_values`). Tombstones go as they are.
                        if !ec_values {
                            continue;
                        }
                        if e.value.is_some() {
                            match self.ec_value(&k, &e) {
                                Ok(v) => e.value = Some(v),
                                // Bytes not here yet (this arena recovers): a copy skips
                                // the value (its slot's digest then differs, so the
                                // switch's delta resends it); anything else is not ready.
                                Err(_) if skip_unready => continue,
                                Err(_) => return None,
                            }
                        }
                    }
                    bytes = bytes.saturating_add(e.wire_bytes(&k));
                    entries.push((k.clone(), e));
                    if entries.len() >= entries_max || bytes >= bytes_max {
                        return Some((entries, Some((slot, k)), resets));
                    }
                }
                if n < entries_max {
                    break;
                }
            }
        }
        Some((entries, None, resets))
    }

    #[allow(clippy::too_many_arguments)]
    fn on_pull_resp(
        &mut self,
        now_ms: u64,
        from: NodeId,
        id: u64,
        ready: bool,
        resets: Vec<Slot>,
        entries: Vec<(Vec<u8>, Entry)>,
        next: Option<(Slot, Vec<u8>)>,
        out: &mut Vec<Output>,
    ) {
        if self.copy.as_ref().is_some_and(|c| c.req_id == id) {
            return self.on_copy_resp(now_ms, from, ready, resets, entries, next, out);
        }
        let Some((first, node)) = self.pull_index.remove(&id) else {
            return;
        };
        if node != from {
            return;
        }
        let Some(ri) = self.range_index(first) else {
            return;
        };
        let apply;
        let mut resend = None;
        let mut fresh = None;
        {
            let Some(r) = self.ranges.get_mut(ri) else {
                return;
            };
            let (rf, rl) = (r.first, r.last);
            let Status::Pulling(p) = &mut r.status else {
                return;
            };
            let Some(s) = p.sources.get_mut(&from) else {
                return;
            };
            if s.req_id != id {
                return;
            }
            if !ready {
                // Try again later from the start: the source may have been mid-change.
                s.after = None;
                s.req_id = u64::MAX; // not 0: wait for the retry timer
                s.sent_ms = now_ms;
                if p.delta && p.prior.first() == Some(&from) {
                    // The old coordinator of a copied span has not seen the switch yet (its
                    // range is not split): it will within a map broadcast, and this node's
                    // reads wait on its answer, so ask again after DELTA_RETRY_MS rather
                    // than a whole retry interval (bench/reshard.py saw GETs wait ~1 s).
                    s.sent_ms = now_ms
                        .saturating_sub(self.cfg.pull_retry_ms)
                        .saturating_add(DELTA_RETRY_MS);
                }
                return;
            }
            apply = entries;
            if p.delta {
                fresh = Some(std::mem::take(&mut p.fresh));
            }
            let page_bytes: u64 = apply
                .iter()
                .map(|(k, e)| (k.len() + e.value.as_ref().map_or(0, Vec::len)) as u64)
                .sum();
            p.pulled_bytes += page_bytes;
            p.pulled_keys += apply.len() as u64;
            p.progress_ms = now_ms;
            let paced = p.rate_kib_s > 0;
            if paced {
                // ms this page is worth at the limit: bytes / (KiB/s * 1.024 bytes per ms).
                let cost_ms = page_bytes.saturating_mul(1000) / (u64::from(p.rate_kib_s) * 1024);
                p.paced_until_ms = p.paced_until_ms.max(now_ms).saturating_add(cost_ms);
            }
            match next {
                Some(n)
                    if (paced && p.paced_until_ms > now_ms)
                        || p.ec_reencoding.len() >= ec_bounds::EC_REENCODES_IN_FLIGHT_MAX =>
                {
                    // Sent by drive_pulls once the pace (and the re-encodes in flight)
                    // allow (req_id 0 = due).
                    s.after = Some(n);
                    s.req_id = 0;
                    s.sent_ms = now_ms;
                }
                Some(n) => {
                    s.after = Some(n.clone());
                    self.next_id = self.next_id.wrapping_add(1);
                    s.req_id = self.next_id;
                    s.sent_ms = now_ms;
                    resend = Some((
                        s.req_id,
                        PeerBody::PullReq {
                            id: s.req_id,
                            purpose: p.purpose,
                            first: rf,
                            last: rl,
                            after: Some(n),
                            delta: p.delta && p.prior.first() == Some(&from),
                            have: Vec::new(),
                        },
                    ));
                }
                None => s.done = true,
            }
        }
        if let Some(fresh) = &mut fresh {
            // A delta page from the copy's source: slots it resends whole replace this
            // node's earlier copy of them (keys deleted since are gone from the source);
            // what this pull itself brought stays.
            for slot in resets {
                self.forget_slot_except(slot, fresh);
            }
            self.stats.move_delta_keys += apply.len() as u64;
            fresh.extend(apply.iter().map(|(k, _)| k.clone()));
        }
        if let Some(fresh) = fresh {
            if let Some(Status::Pulling(p)) = self.ranges.get_mut(ri).map(|r| &mut r.status) {
                p.fresh = fresh;
            }
        }
        let mut refused = BTreeSet::new();
        let mut ec_retry = false;
        let handed_off = self.ranges.get(ri).and_then(|r| {
            let m = self.map.as_ref()?;
            m.handoff(r.first, r.last).map(|_| r.pg)
        });
        // A rebuild of a range this node now coordinates (a takeover or a handoff).
        let takeover = self.ranges.get(ri).is_some_and(|r| {
            r.role == Role::Coordinator
                && matches!(&r.status, Status::Pulling(p) if p.purpose == PullPurpose::Rebuild)
        });
        for (k, e) in apply {
            let ec = self
                .map
                .as_ref()
                .is_some_and(|m| matches!(m.memgest_kind(e.memgest), MemgestKind::Ec { .. }));
            let memgest = e.memgest;
            if ec {
                // Only a handed-off span's old coordinator sends ec entries (decoded).
                let Some(pg) = handed_off else { continue };
                match self.reencode_ec(now_ms, pg, k.clone(), e, out) {
                    Ok(Some(v)) => {
                        if let Some(Status::Pulling(p)) =
                            self.ranges.get_mut(ri).map(|r| &mut r.status)
                        {
                            p.ec_reencoding.insert(v, k);
                        }
                    }
                    Ok(None) => {}
                    Err(()) => ec_retry = true,
                }
            } else if self
                .retired_floors
                .get(&k)
                .is_some_and(|floor| e.version < *floor)
            {
                // A pulled copy older than a memgest move that retired this node's copy:
                // the page was read before the move's retire arrived here (sim seed 7100 of
                // `ec_swarm_many_seeds`: a replica's sync brought a rep:3 tombstone back
                // after the key moved to ec, and a quorum read found a majority for it).
                continue;
            } else {
                let pulled = (takeover && self.store.get(&k).is_some()).then(|| e.clone());
                if matches!(self.apply_local(&k, e), ApplyOutcome::Refused) {
                    refused.insert(memgest);
                }
                if let Some(pulled) = pulled {
                    // An older replicated copy under an ec entry adopted from the holders:
                    // an unfinished memgest move of the failed coordinator (seed 8065).
                    self.note_stale_replicated(&k, &pulled);
                }
            }
        }
        if ec_retry && refused.is_empty() {
            // This node's arena could not take an ec value now (recovering, or busy):
            // ask this source again from the start after the retry interval (what was
            // re-encoded already is skipped then).
            if let Some(Status::Pulling(p)) = self.ranges.get_mut(ri).map(|r| &mut r.status) {
                if let Some(s) = p.sources.get_mut(&from) {
                    s.done = false;
                    s.after = None;
                    s.req_id = u64::MAX;
                    s.sent_ms = now_ms;
                }
            }
            resend = None;
        }
        if !refused.is_empty() {
            // A full store: this source is not done (it is asked again from the start after
            // the retry interval, when eviction or deletes may have made room).
            if let Some(Status::Pulling(p)) = self.ranges.get_mut(ri).map(|r| &mut r.status) {
                p.refused.extend(refused);
                if let Some(s) = p.sources.get_mut(&from) {
                    s.done = false;
                    s.after = None;
                    s.req_id = u64::MAX;
                    s.sent_ms = now_ms;
                }
            }
            resend = None;
        }
        if let Some((nid, mut body)) = resend {
            if let PeerBody::PullReq {
                first,
                last,
                delta: true,
                have,
                ..
            } = &mut body
            {
                *have = self.slot_digests(*first, *last);
            }
            self.pull_index.insert(nid, (first, from));
            self.send(out, from, body);
        }
        if self.pull_complete(ri) {
            self.finish_pull(now_ms, ri, false, out);
        }
    }

    // ------------------------------------------------------------------ peers

    fn on_peer(&mut self, now_ms: u64, from: NodeId, mut msg: PeerMsg, out: &mut Vec<Output>) {
        if self.map.is_none() {
            return; // not joined yet: nothing to serve, nothing to vote
        }
        // The body is moved out, not cloned: a clone copied every replicated value (and every
        // 4 MiB pull page) once more on each receiver. What is left in `msg` is the envelope,
        // and the handlers below read only its epoch and incarnation.
        let body = std::mem::replace(
            &mut msg.body,
            PeerBody::ProbeResp {
                mismatched: Vec::new(),
            },
        );
        match body {
            PeerBody::Replicate { key, entry } => {
                let slot = key_slot(&key);
                let version = entry.version;
                let ok = self.accept_from_coordinator(from, &msg, slot);
                if ok {
                    if msg.epoch > self.epoch {
                        // The sender knows a newer map in which it coordinates this slot.
                        self.fences.insert(
                            slot,
                            Fence {
                                epoch: msg.epoch,
                                node: from,
                                incarnation: msg.incarnation,
                            },
                        );
                    }
                    if self
                        .retired_floors
                        .get(&key)
                        .is_some_and(|floor| version < *floor)
                    {
                        // A late copy (retransmit, duplicate) of a write older than a
                        // memgest move that retired this replica's copy: applying it would
                        // bring the old value back where quorum reads look (sim seed 7391).
                        // Acknowledged: the coordinator needs nothing more from us for it.
                        return self.send(out, from, PeerBody::ReplicateAck { key, version, ok });
                    }
                    if self.apply_local(&key, entry) == ApplyOutcome::Refused {
                        self.stats.store_refused += 1;
                        return self.send(out, from, PeerBody::ReplicateRefused { key, version });
                    }
                }
                self.send(out, from, PeerBody::ReplicateAck { key, version, ok });
            }
            PeerBody::ReplicateAck { key, version, ok } => self.on_ack(from, key, version, ok, out),
            PeerBody::ReplicateRefused { key, version } => self.on_refused(from, key, version, out),
            PeerBody::PullReq {
                id,
                purpose,
                first,
                last,
                after,
                delta,
                have,
            } => {
                let have = delta.then(|| have.into_iter().collect::<BTreeMap<Slot, u64>>());
                self.on_pull_req(from, &msg, id, purpose, (first, last), after, have, out)
            }
            PeerBody::PullResp {
                id,
                ready,
                resets,
                entries,
                next,
            } => self.on_pull_resp(now_ms, from, id, ready, resets, entries, next, out),
            PeerBody::Probe {
                first,
                last,
                digests,
            } => self.on_probe(from, &msg, first, last, digests, out),
            PeerBody::ProbeResp { mismatched } => {
                // A slot with writes still in flight to this replica differs because of them:
                // a key-list exchange compares every key of the slot, and one hash tag can put
                // a node's whole keyspace in one slot (redis-benchmark --cluster does), so
                // repairing it each interval under load cost more than the writes and the
                // load collapsed (~5,000 -> ~20 SETs/s). Such a slot is repaired at most
                // every REPAIR_BUSY_SLOT_MS; a quiet one at every probe.
                //
                // "Writes in flight" is judged over the probe's whole round trip, not at the
                // instant its answer arrives: under a pipelined load the in-flight set drains
                // between bursts, and a slot caught in such a gap was key-list repaired at once
                // although its digests had differed only by the writes in flight when they
                // were taken (session 22: ~2.5x the exchanges the 10 s rule allows, each a scan
                // of every key of the slot on both nodes). So a slot written within the last
                // two repair intervals counts as busy too.
                let busy: BTreeSet<Slot> = self
                    .pending
                    .values()
                    .filter(|p| p.targets.contains(&from) && !p.acked.contains(&from))
                    .map(|p| p.slot)
                    .collect();
                let recent_ms = self.cfg.repair_interval_ms.saturating_mul(2);
                for slot in mismatched.into_iter().take(REPAIR_SLOTS_PER_PROBE_MAX) {
                    let written = self
                        .slot_written_ms
                        .get(&slot)
                        .is_some_and(|t| now_ms.saturating_sub(*t) < recent_ms);
                    if busy.contains(&slot) || written {
                        let last = self.busy_repairs.get(&(slot, from)).copied();
                        if last.is_some_and(|t| now_ms.saturating_sub(t) < REPAIR_BUSY_SLOT_MS) {
                            continue;
                        }
                        if self.busy_repairs.len() >= BUSY_REPAIRS_MAX {
                            self.busy_repairs
                                .retain(|_, t| now_ms.saturating_sub(*t) < REPAIR_BUSY_SLOT_MS);
                        }
                        if self.busy_repairs.len() < BUSY_REPAIRS_MAX {
                            self.busy_repairs.insert((slot, from), now_ms);
                        }
                    }
                    if self.serving(now_ms, slot).is_ok() {
                        self.send(out, from, PeerBody::KeyListReq { slot, after: None });
                    }
                }
            }
            PeerBody::KeyListReq { slot, after } => {
                if msg.epoch != self.epoch || !self.accept_from_coordinator(from, &msg, slot) {
                    return;
                }
                // Versions only: reading every value of the slot to send its versions was
                // most of a replica's time under a pipelined rep:3 load (perf: values
                // copied out of the engine for each key-list request), and the lists are
                // asked for every repair interval while writes are in flight.
                let list = self
                    .store
                    .scan_slot_heads(slot, after.as_deref(), KEYLIST_KEYS_MAX);
                let more = list.len() >= KEYLIST_KEYS_MAX;
                let keys = list.into_iter().map(|(k, v, _)| (k, v)).collect();
                self.send(
                    out,
                    from,
                    PeerBody::KeyList {
                        slot,
                        after,
                        keys,
                        more,
                    },
                );
            }
            PeerBody::KeyList {
                slot,
                after,
                keys,
                more,
            } => self.on_key_list(now_ms, from, &msg, slot, after, keys, more, out),
            PeerBody::RepairPush { entries } => {
                for (k, e) in entries {
                    // A copy older than a memgest move's retire here stays retired, as a late
                    // Replicate does: the coordinator's digest repair ran between the retire
                    // and the move's commit (its store still held the old rep:3 version) and
                    // pushed it back to both retired replicas, and a quorum read found it on
                    // a majority (sim seed 86326).
                    if self
                        .retired_floors
                        .get(&k)
                        .is_some_and(|floor| e.version < *floor)
                    {
                        continue;
                    }
                    if self.accept_from_coordinator(from, &msg, key_slot(&k))
                        && self.apply_local(&k, e) == ApplyOutcome::Refused
                    {
                        self.stats.store_refused += 1;
                    }
                }
            }
            PeerBody::RepairFetch { keys } => {
                let entries: Vec<(Vec<u8>, Entry)> = keys
                    .into_iter()
                    .take(REPAIR_FETCH_KEYS_MAX)
                    .filter_map(|k| self.store.get(&k).map(|e| (k, e)))
                    .collect();
                self.send(out, from, PeerBody::RepairFetchResp { entries });
            }
            PeerBody::RepairFetchResp { entries } => {
                for (k, e) in entries {
                    let slot = key_slot(&k);
                    // Adopt a replica's newer version only while serving the slot and with no
                    // write of ours in flight for the key (ours would be newer anyway).
                    if self.serving(now_ms, slot).is_ok()
                        && !self.uncommitted.contains_key(&k)
                        && self.apply_local(&k, e) == ApplyOutcome::Applied
                    {
                        self.stats.repair_fetched += 1;
                    }
                }
            }
            PeerBody::Retire { key, version } => {
                let ok = self.accept_from_coordinator(from, &msg, key_slot(&key));
                if ok {
                    self.store.retire(&key, version);
                    self.note_retired(&key, version);
                }
                // Acknowledged like a Replicate: a move's second phase waits for it.
                self.send(out, from, PeerBody::ReplicateAck { key, version, ok });
            }
            PeerBody::EcUpdate {
                memgest,
                pg,
                owner,
                base,
                seq,
                offset,
                delta,
                meta,
            } => self.on_ec_update(
                from, &msg, memgest, pg, owner, base, seq, offset, delta, meta, out,
            ),
            PeerBody::EcAck {
                memgest,
                pg,
                seq,
                ok,
                ..
            } => {
                self.on_ec_ack(from, memgest, pg, seq, ok, out);
                self.copy_on_ec_ack(now_ms, out);
            }
            PeerBody::EcMetaReq {
                id,
                memgest,
                pg,
                owner,
                after,
            } => self.on_ec_meta_req(from, &msg, id, memgest, pg, owner, after, out),
            PeerBody::EcMetaResp {
                id,
                ready,
                seq,
                high_water,
                keys,
                next,
                pos,
            } => {
                self.on_ec_meta_resp(now_ms, from, id, ready, seq, high_water, keys, next, pos);
                self.drive_ec(now_ms, out);
                self.drive_pulls(now_ms, out);
            }
            PeerBody::EcReadReq {
                id,
                memgest,
                pg,
                seq,
                ranges,
            } => self.on_ec_read_req(from, id, memgest, pg, seq, ranges, out),
            PeerBody::EcReadResp {
                id,
                ready,
                seqs,
                pieces,
            } => self.on_ec_read_resp(now_ms, from, id, ready, seqs, pieces, out),
            PeerBody::EcRelease { memgest, pg, pos } => {
                self.on_ec_release(from, &msg, memgest, pg, pos, out)
            }
            PeerBody::EcReleased { memgest, pg, pos } => {
                self.on_ec_released(from, memgest, pg, pos);
                self.drive_ec(now_ms, out);
            }
            PeerBody::EcSyncReq {
                id,
                memgest,
                pg,
                offset,
                after,
            } => self.on_ec_sync_req(from, id, memgest, pg, offset, after, out),
            PeerBody::EcSyncResp {
                id,
                ready,
                seq,
                base,
                total,
                offset,
                bytes,
                keys,
                done,
            } => {
                self.on_ec_sync_resp(from, id, ready, seq, base, total, offset, bytes, keys, done);
                self.drive_ec(now_ms, out);
            }
        }
    }

    fn on_probe(
        &mut self,
        from: NodeId,
        msg: &PeerMsg,
        first: Slot,
        last: Slot,
        digests: Vec<(Slot, u64)>,
        out: &mut Vec<Output>,
    ) {
        if msg.epoch != self.epoch || !self.accept_from_coordinator(from, msg, first) {
            return;
        }
        let Some(r) = self.range(first) else { return };
        if r.last != last || !matches!(r.status, Status::Ready) {
            return;
        }
        let Some(o) = r.offset else { return };
        let Some(map) = self.map.clone() else { return };
        let theirs: BTreeMap<Slot, u64> = digests
            .into_iter()
            .filter(|(s, _)| *s >= first && *s <= last)
            .collect();
        let mut slots: BTreeSet<Slot> = theirs.keys().copied().collect();
        slots.extend(self.store.nonempty_slots(first, last));
        let mut mismatched = Vec::new();
        for s in slots {
            let mine = self.store.slot_digest(s, &|m| map.copies(m) > o);
            if mine != theirs.get(&s).copied().unwrap_or(0) {
                mismatched.push(s);
                if mismatched.len() >= REPAIR_SLOTS_PER_PROBE_MAX {
                    break;
                }
            }
        }
        if !mismatched.is_empty() {
            self.send(out, from, PeerBody::ProbeResp { mismatched });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_key_list(
        &mut self,
        now_ms: u64,
        from: NodeId,
        msg: &PeerMsg,
        slot: Slot,
        after: Option<Vec<u8>>,
        keys: Vec<(Vec<u8>, Version)>,
        more: bool,
        out: &mut Vec<Output>,
    ) {
        if msg.epoch != self.epoch || self.serving(now_ms, slot).is_err() {
            return;
        }
        self.stats.repair_key_lists += 1;
        let Some(map) = self.map.clone() else { return };
        let Some(o) = self
            .range(slot)
            .and_then(|r| r.cohort.iter().position(|n| *n == from))
        else {
            return;
        };
        let end: Option<Vec<u8>> = if more {
            keys.last().map(|(k, _)| k.clone())
        } else {
            None
        };
        let theirs: BTreeMap<Vec<u8>, Version> = keys.into_iter().collect();
        // Our entries in the same key window (after, end].
        // Versions only: values are read for the keys pushed, not for every key compared.
        let mut own: BTreeMap<Vec<u8>, Head> = BTreeMap::new();
        let mut cursor = after.clone();
        'scan: loop {
            let chunk = self
                .store
                .scan_slot_heads(slot, cursor.as_deref(), KEYLIST_KEYS_MAX);
            let n = chunk.len();
            for (k, version, memgest) in chunk {
                // The window is in scan order, the order both ends page in.
                if end
                    .as_ref()
                    .is_some_and(|end| crate::scan_order(&k, end).is_gt())
                {
                    break 'scan;
                }
                cursor = Some(k.clone());
                own.insert(k, Head { version, memgest });
            }
            if n < KEYLIST_KEYS_MAX {
                break;
            }
        }
        let reach = |m: MemgestId| map.copies(m) > o;
        let mut push = Vec::new();
        let mut push_bytes: u64 = 0;
        for (k, h) in &own {
            // A write still being retransmitted to this replica is replication's job: pushing
            // it here too doubled the traffic to a replica that lagged under a pipelined load,
            // so it lagged more (perf: a rep:3 load collapsing from ~5,000 to ~100 SETs/s).
            let in_flight = self.pending.get(&h.version).is_some_and(|p| {
                p.targets.contains(&from) && !p.acked.contains(&from) && !p.refused.contains(&from)
            });
            if !in_flight && reach(h.memgest) && theirs.get(k).is_none_or(|v| *v < h.version) {
                let Some(e) = self.store.get(k) else { continue };
                push_bytes = push_bytes.saturating_add(e.wire_bytes(k));
                push.push((k.clone(), e));
                if push_bytes >= PULL_BYTES_PER_PAGE_MAX {
                    self.stats.repair_pushed += push.len() as u64;
                    self.send(
                        out,
                        from,
                        PeerBody::RepairPush {
                            entries: std::mem::take(&mut push),
                        },
                    );
                    push_bytes = 0;
                }
            }
        }
        if !push.is_empty() {
            self.stats.repair_pushed += push.len() as u64;
            self.send(out, from, PeerBody::RepairPush { entries: push });
        }
        let mut fetch = Vec::new();
        for (k, v) in &theirs {
            match own.get(k) {
                Some(e) if e.version >= *v => {
                    if !reach(e.memgest) {
                        self.stats.repair_retired += 1;
                        self.send(
                            out,
                            from,
                            PeerBody::Retire {
                                key: k.clone(),
                                version: e.version,
                            },
                        );
                    }
                }
                _ => {
                    if !self.uncommitted.contains_key(k) && fetch.len() < REPAIR_FETCH_KEYS_MAX {
                        fetch.push(k.clone());
                    }
                }
            }
        }
        if !fetch.is_empty() {
            self.send(out, from, PeerBody::RepairFetch { keys: fetch });
        }
        if more {
            self.send(out, from, PeerBody::KeyListReq { slot, after: end });
        }
    }

    // ------------------------------------------------------------------ time

    /// While the map lists this node as leaving (drain phase 1), tell the control plane once
    /// every write it accepted has committed, so its roles can move with nothing in flight.
    /// Repeated every heartbeat interval (a report may be lost; the control plane ignores
    /// duplicates).
    fn report_quiesced(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let Some(map) = self.map.clone() else { return };
        // Drain: everything this node accepted. A move: what it accepted in the moving span
        // (resharding phase 1, docs/design/cluster-resharding.md).
        let asked = map.leaving.get(&self.id).copied().or_else(|| {
            map.moving
                .filter(|m| !m.copying && map.moving_source() == Some(self.id))
                .map(|m| Epoch(m.epoch))
        });
        let Some(asked) = asked else {
            return;
        };
        let quiet = if map.leaving.contains_key(&self.id) {
            self.pending.values().all(|p| p.committed)
        } else {
            // A move's source also waits until it holds the span whole (its range Ready):
            // a spare that just took the range over may still be rebuilding it, and a
            // switch then would leave it with nothing to hand over (simulator seed 7369:
            // the span's ec values were lost).
            let whole = map
                .moving
                .and_then(|m| self.range(m.first))
                .is_some_and(|r| matches!(r.status, Status::Ready));
            whole
                && self
                    .pending
                    .values()
                    .all(|p| p.committed || !map.is_moving(p.slot))
        };
        let due = self
            .last_quiesced_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= self.cfg.heartbeat_interval_ms);
        if due && self.epoch >= asked && quiet {
            self.last_quiesced_ms = Some(now_ms);
            out.push(Output::Control(ControlInput::Quiesced {
                node: self.id,
                incarnation: self.incarnation,
                epoch: self.epoch,
            }));
        }
    }

    /// Tell the control plane which handed-off ranges this node, their new coordinator,
    /// has rebuilt: the map then drops their handoff records and the old cohort releases
    /// its copies. Repeated every heartbeat interval while the map still lists one.
    fn report_handoffs(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let Some(map) = self.map.clone() else { return };
        if map.handoffs.is_empty() {
            return;
        }
        let due = self
            .last_handoff_report_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= self.cfg.heartbeat_interval_ms);
        if !due {
            return;
        }
        self.last_handoff_report_ms = Some(now_ms);
        for r in &self.ranges {
            if r.role == Role::Coordinator
                && matches!(r.status, Status::Ready)
                && map.handoff(r.first, r.last).is_some()
            {
                out.push(Output::Control(ControlInput::HandoffDone {
                    node: self.id,
                    incarnation: self.incarnation,
                    first: r.first,
                    last: r.last,
                }));
            }
        }
    }

    /// Drop, a bounded batch per tick, the copies of ranges this node gave away by a move
    /// once the map no longer lists a handoff over them (their new coordinator has them).
    /// A draining node keeps everything: its successor may still pull from it. A node that
    /// was removed (now a spare) purges too.
    fn purge_released(&mut self) {
        let Some(map) = self.map.clone() else { return };
        if !matches!(
            map.node_state(self.id),
            Some(NodeState::Active | NodeState::Spare)
        ) {
            return;
        }
        let mut budget = PURGE_KEYS_PER_TICK_MAX;
        for ri in 0..self.ranges.len() {
            let Some(r) = self.ranges.get(ri) else {
                continue;
            };
            if !matches!(r.status, Status::Retired) {
                continue;
            }
            let (first, last) = (r.first, r.last);
            if map
                .handoffs
                .iter()
                .any(|h| h.first <= last && first <= h.last)
            {
                continue;
            }
            let dropped = self.wipe_slots(first, last, budget);
            budget = budget.saturating_sub(dropped);
            self.stats.handoff_keys_purged += dropped as u64;
            if budget == 0 {
                return;
            }
            if let Some(r) = self.ranges.get_mut(ri) {
                r.status = Status::Idle;
                r.held = false;
            }
        }
    }

    /// Drop every entry of `first..=last` (a new role over leftovers of a given-away range).
    fn wipe_range(&mut self, first: Slot, last: Slot) {
        let n = self.wipe_slots(first, last, usize::MAX);
        self.stats.handoff_keys_purged += n as u64;
    }

    /// Drop up to `limit` entries of `first..=last`; returns how many were dropped. Fewer
    /// than `limit` means the span is empty now.
    fn wipe_slots(&mut self, first: Slot, last: Slot, limit: usize) -> usize {
        let mut dropped = 0usize;
        for slot in self.store.nonempty_slots(first, last) {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let want = (limit - dropped).min(PULL_ENTRIES_PER_PAGE_MAX);
                if want == 0 {
                    return dropped;
                }
                // Heads only: a wipe drops keys, it needs a value only to keep an ec
                // value's bytes (its stripe may still be decoded from them), so only those
                // are read (session 19: reading every value made the old owner's wipe after
                // a move copy each 1 KiB value out once more).
                let chunk = self.store.scan_slot_heads(slot, after.as_deref(), want);
                let n = chunk.len();
                for (k, _, m) in chunk {
                    if self.is_ec_memgest(m) {
                        if let Some(e) = self.store.get(&k).filter(|e| e.value.is_some()) {
                            self.ec_leftovers.push((k.clone(), e));
                        }
                    }
                    // No tombstone: the keys of a given-away range leave no trace here, so
                    // older versions pulled back later are taken (a retire's tombstone one
                    // step above lost them: the reshard test found keys moved away and back
                    // missing).
                    self.store.forget(&k);
                    dropped += 1;
                    after = Some(k);
                }
                if n < want {
                    break;
                }
            }
        }
        // Emptied (fewer than asked): forget the slots' floors too.
        if dropped < limit {
            for slot in first..=last {
                self.store.forget_floor(slot);
            }
        }
        dropped
    }

    fn on_tick(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        self.prune_ec_acks();
        let due = self
            .last_heartbeat_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= self.cfg.heartbeat_interval_ms);
        if due {
            self.last_heartbeat_ms = Some(now_ms);
            if self.joined() {
                out.push(Output::Control(ControlInput::Heartbeat {
                    node: self.id,
                    incarnation: self.incarnation,
                    epoch: self.epoch,
                    sent_ms: now_ms,
                }));
            } else {
                out.push(Output::Control(ControlInput::Join {
                    node: self.id,
                    addr: self.cfg.addr.clone(),
                    incarnation: self.incarnation,
                }));
            }
        }
        self.report_quiesced(now_ms, out);
        self.report_handoffs(now_ms, out);
        self.apply_copy_backlog(now_ms, out);
        self.drive_copy(now_ms, out);
        self.purge_released();
        // Retransmit unacknowledged replication (bounded by the in-flight limits).
        let retransmit = self.cfg.retransmit_ms;
        let mut sends = Vec::new();
        for p in self.pending.values_mut() {
            if now_ms.saturating_sub(p.last_send_ms) >= retransmit_after_ms(retransmit, p) {
                p.last_send_ms = now_ms;
                p.resends = p.resends.saturating_add(1);
                for t in &p.targets {
                    if !p.acked.contains(t) {
                        let body = match &p.ec {
                            Some(e) => e.body(),
                            None => PeerBody::Replicate {
                                key: p.key.clone(),
                                entry: p.entry.clone(),
                            },
                        };
                        sends.push((*t, body));
                    }
                }
            }
        }
        for p in self.pending.values() {
            let Some(r) = &p.retire else { continue };
            if r.started && p.last_send_ms == now_ms {
                for t in r.targets.iter().filter(|t| !r.acked.contains(t)) {
                    sends.push((
                        *t,
                        PeerBody::Retire {
                            key: p.key.clone(),
                            version: p.entry.version,
                        },
                    ));
                }
            }
        }
        for (t, b) in sends {
            self.send(out, t, b);
        }
        self.drive_ec(now_ms, out);
        self.drive_pulls(now_ms, out);
        if now_ms.saturating_sub(self.last_repair_ms) >= self.cfg.repair_interval_ms {
            self.last_repair_ms = now_ms;
            self.repair_round(now_ms, out);
        }
    }

    /// Probe the replicas of the next coordinated, Ready range (round robin).
    fn repair_round(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let Some(map) = self.map.clone() else { return };
        let n = self.ranges.len();
        if n == 0 || now_ms >= self.lease_until_ms {
            return;
        }
        let depth = map.replica_depth();
        for _ in 0..n {
            self.repair_cursor = (self.repair_cursor + 1) % n;
            let Some(r) = self.ranges.get(self.repair_cursor) else {
                continue;
            };
            if r.role != Role::Coordinator || !matches!(r.status, Status::Ready) {
                continue;
            }
            let (first, last, cohort) = (r.first, r.last, r.cohort.clone());
            let slots = self.store.nonempty_slots(first, last);
            for (o, node) in cohort.iter().enumerate().take(depth).skip(1) {
                let digests: Vec<(Slot, u64)> = slots
                    .iter()
                    .map(|s| (*s, self.store.slot_digest(*s, &|m| map.copies(m) > o)))
                    .filter(|(_, d)| *d != 0)
                    .collect();
                self.send(
                    out,
                    *node,
                    PeerBody::Probe {
                        first,
                        last,
                        digests,
                    },
                );
            }
            return;
        }
    }

    /// # Panics
    /// On a broken invariant (a bug in this core).
    pub fn check_invariants(&self) {
        if let Some(m) = &self.map {
            assert_eq!(m.epoch, self.epoch, "map epoch and node epoch agree");
            if let (Some(p), true) = (&m.placement, !self.ranges.is_empty()) {
                assert_eq!(p.ranges.len(), self.ranges.len());
            }
        }
        let mut inflight: BTreeMap<NodeId, (u32, u64)> = BTreeMap::new();
        let mut unc: BTreeMap<Vec<u8>, BTreeSet<Version>> = BTreeMap::new();
        let (hlc_ms, hlc_logical) = self.hlc.peek();
        for (v, p) in &self.pending {
            assert_eq!(*v, p.entry.version);
            assert!(
                (v.ms(), v.logical()) <= (hlc_ms, hlc_logical),
                "pending above HLC"
            );
            let r = self.range(p.slot);
            // Background ec updates also retire a given-away span's arena metadata
            // (`retire_ec_leftovers`), in slots this node no longer coordinates.
            assert!(
                r.is_some_and(|r| r.role == Role::Coordinator)
                    || p.ec.as_ref().is_some_and(|e| e.bg)
                    || (p.ec.is_some() && self.copy_covers(p.slot)),
                "pending write for a slot we do not coordinate"
            );
            for t in &p.targets {
                if !p.acked.contains(t) && !p.refused.contains(t) {
                    let c = inflight.entry(*t).or_insert((0, 0));
                    c.0 += 1;
                    c.1 += p.bytes;
                }
            }
            if p.ec.as_ref().is_some_and(|e| e.bg) {
                continue;
            }
            if !p.committed {
                unc.entry(p.key.clone()).or_default().insert(*v);
            } else {
                let stored = self.store.get(&p.key).map_or(Version::ZERO, |e| e.version);
                assert!(stored >= *v, "committed write not applied locally");
            }
        }
        assert_eq!(unc, self.uncommitted, "uncommitted index drifted");
        for k in self.uncommitted.keys() {
            assert!(
                self.inflight_keys.may_have(k),
                "a key with a write in flight is not in the shared filter"
            );
        }
        let live: BTreeMap<NodeId, (u32, u64)> = self
            .inflight
            .iter()
            .filter(|(_, c)| c.0 != 0 || c.1 != 0)
            .map(|(n, c)| (*n, *c))
            .collect();
        assert_eq!(live, inflight, "in-flight accounting drifted");
        let parked: usize = self.parked.values().map(|v| v.len()).sum();
        assert_eq!(parked, self.parked_count);
        assert!(self.parked_count <= PARKED_READS_MAX);
        assert!(self.dedup.len() <= self.cfg.dedup_clients_max.clamp(1, DEDUP_CLIENTS_MAX));
        self.ec_check_invariants();
    }
}

/// Whether the node now at handed-off span `first..=last`'s old pair is not the
/// coordinator recorded at the switch (node and incarnation): a spare replaced it. Maps
/// without the record (`source == 0`) say no.
fn replaced_in(map: &ClusterMap, first: Slot, last: Slot) -> bool {
    let Some(h) = map.handoff(first, last) else {
        return false;
    };
    if h.source == 0 {
        return false;
    }
    let Some(now) = map.prior_cohort(h).first().copied() else {
        return false;
    };
    now != NodeId(h.source)
        || map
            .nodes
            .get(&now)
            .is_some_and(|n| n.incarnation != h.source_incarnation)
}
