//! The bounds of `ringlet-linked`, in one place (STYLE §7). Sizes of keys, values and move
//! batches come from `ringlet_types::limits` and `ringlet_linklet::limits`.

use ringlet_linklet::limits as linklet;
use ringlet_types::limits as global;

/// Largest control frame (JSON: join, heartbeat with a load report, the service map). A map of
/// `UNITS_MAX` owners with their addresses is far below this.
pub const CONTROL_FRAME_BYTES_MAX: u32 = 1024 * 1024;

/// Largest request or response frame: one key, one body, framing.
pub const REQUEST_FRAME_BYTES_MAX: u32 = global::ENTRY_BYTES_MAX + 4096;

/// Largest move-batch frame: what `Linklet::import_batch` accepts plus per-item framing.
pub const BATCH_FRAME_BYTES_MAX: u32 =
    (linklet::IMPORT_BATCH_BYTES_MAX + linklet::IMPORT_BATCH_ITEMS_MAX * 32 + 4096) as u32;

/// Longest text field in a control frame (service names, addresses, reasons).
pub const TEXT_BYTES_MAX: usize = 256;

/// Most units (slot ranges the sharder assigns and moves as one) a service may be split in.
pub const UNITS_MAX: u16 = 1024;

/// Members of one linked service.
pub const MEMBERS_MAX: usize = 256;

/// Linked services one coordinator hosts.
pub const SERVICES_MAX: usize = 64;

/// Map watchers (routers) per service.
pub const WATCHERS_MAX: usize = 1024;

/// Frames queued towards one connected member or watcher. A peer that falls this far behind
/// is cut off (a member then loses its lease and is replaced, a router reconnects).
pub const SESSION_QUEUE_MAX: usize = 256;

/// Heartbeats a member remembers the send time of (to turn an ack into a lease deadline).
pub const HEARTBEATS_IN_FLIGHT_MAX: usize = 64;

/// Moves one member queues as a source; more are refused (reported failed) at once.
pub const MOVES_QUEUED_MAX: usize = 16;

/// Time one step of a move (connect, begin, one batch, commit) may take before the source
/// gives up (milliseconds).
pub const MOVE_STEP_TIMEOUT_MS: u64 = 10_000;

/// Time to connect to the coordinator, and to wait for its welcome (milliseconds).
pub const JOIN_TIMEOUT_MS: u64 = 10_000;

/// Attempts one routed call makes (refusals with Moving, redirects, reconnects) before it
/// fails with `Unavailable`.
pub const ROUTER_ATTEMPTS_MAX: u32 = 200;

/// Redirects on `NotOwner` hints one routed call follows before it waits for the map instead.
pub const ROUTER_REDIRECTS_MAX: u32 = 4;

/// First and largest backoff between routed attempts (milliseconds).
pub const ROUTER_BACKOFF_MIN_MS: u64 = 1;
/// Largest backoff between routed attempts (milliseconds).
pub const ROUTER_BACKOFF_MAX_MS: u64 = 50;

/// Connections a router keeps to each member (requests on one connection are sequential).
pub const ROUTER_CONNS_PER_MEMBER: usize = 4;

/// Time one routed request may wait for its response before the connection is dropped.
pub const ROUTER_REQUEST_TIMEOUT_MS: u64 = 10_000;

/// PostgreSQL NOTIFY payloads are at most 8000 bytes (server limit); anything longer is not
/// from a well-formed trigger and is dropped.
pub const NOTIFY_PAYLOAD_BYTES_MAX: usize = 8000;

/// Notifications for moving keys waiting to be retried by the PostgreSQL source.
pub const NOTIFY_RETRY_QUEUE_MAX: usize = 65_536;

/// Retry rounds for one notification whose key stays `Moving` (one round per
/// `NOTIFY_RETRY_INTERVAL_MS`), after which it is dropped: the recent-invalidation table at
/// the new owner already holds it.
pub const NOTIFY_RETRY_ROUNDS_MAX: u32 = 1000;

/// Interval between retry rounds of the PostgreSQL source (milliseconds).
pub const NOTIFY_RETRY_INTERVAL_MS: u64 = 10;

/// Connections one member serves at once (routers and peers), one thread each. A router
/// keeps at most `ROUTER_CONNS_PER_MEMBER` per runtime, a blocking router one per frontend
/// thread; past this bound new connections are closed at once (the router retries).
pub const MEMBER_CONN_THREADS_MAX: usize = 512;

/// Reconnection attempts of a member whose coordinator session broke (a coordinator restart),
/// with a backoff from `REJOIN_BACKOFF_MIN_MS` doubling to `REJOIN_BACKOFF_MAX_MS` (about two
/// minutes in all); then the member gives up and ends.
pub const REJOIN_ATTEMPTS_MAX: u32 = 120;
/// First backoff before a rejoin attempt (milliseconds).
pub const REJOIN_BACKOFF_MIN_MS: u64 = 50;
/// Largest backoff between rejoin attempts (milliseconds).
pub const REJOIN_BACKOFF_MAX_MS: u64 = 1000;

/// Time a replicated write waits for its backup's ack before the request fails (the write
/// stays at the owner and is still shipped; the caller is told its durability is unknown).
pub const REPL_WAIT_TIMEOUT_MS: u64 = 10_000;

/// First and largest backoff between replication rounds after a backup failed (milliseconds).
pub const REPL_RETRY_MIN_MS: u64 = 5;
/// Largest backoff between replication rounds after a backup failed (milliseconds).
pub const REPL_RETRY_MAX_MS: u64 = 100;

/// Target payload of one replication frame (a round's items for one backup are split).
pub const REPL_FRAME_BYTES: usize = 256 * 1024;
const _: () = assert!(REPL_FRAME_BYTES < BATCH_FRAME_BYTES_MAX as usize);

/// Slots of a seed's snapshot taken per replication round: a unit of 256 slots is seeded in 16
/// rounds, so a round (which writes wait behind) carries a bounded share of a unit's values.
pub const SEED_SLOTS_PER_STEP: u32 = 16;

/// Seed orders a member queues for its replicator; more are refused (reported failed).
pub const SEEDS_QUEUED_MAX: usize = 64;

/// HTTP front example: largest request head.
pub const HTTP_HEAD_BYTES_MAX: usize = 8192;
