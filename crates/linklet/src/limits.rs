//! The bounds of this crate, in one place (STYLE §7). Sizes shared with the rest of Ringlet
//! (key and value sizes, eviction work per write, peer chunks) come from
//! [`ringlet_types::limits`] and are re-used here rather than restated; the constants below are
//! the ones only linked mode has.

use ringlet_types::limits as global;
use ringlet_types::SLOT_COUNT;

/// Internal lock shards of a [`crate::Linklet`]. Slot `s` lives in shard `s % SHARD_COUNT`.
/// 64 is ~30x the cores of a typical application host here, so two writers rarely meet on one
/// shard lock, and it divides [`SLOT_COUNT`], so every shard holds the same number of slots.
pub const SHARD_COUNT: usize = 64;
const _: () = assert!(SLOT_COUNT as usize % SHARD_COUNT == 0);

/// Slots per shard (each shard keeps one state byte per slot it holds).
pub const SLOTS_PER_SHARD: usize = SLOT_COUNT as usize / SHARD_COUNT;

/// Bytes charged per entry on top of the key and the value's [`crate::Sizer`] estimate: the
/// hash-map slot, the `Arc<RwLock<_>>` cell with its metadata and the CLOCK ring position.
/// An estimate, not a measurement: the byte bound is about the application's objects, and
/// charging something per entry keeps a map of empty values from growing without bound.
pub const ENTRY_OVERHEAD_BYTES: u64 = 96;

/// Ring positions one insert may examine to make room (CLOCK second chances and pinned or
/// moving entries included) before it gives up with `NoSpace`. The same per-write budget the
/// engine uses, so an insert's worst case is the same in both modes.
pub const EVICTION_SCAN_MAX: u32 = global::EVICTION_SCAN_PER_WRITE_MAX;

/// The CLOCK ring is compacted when it holds more than `2 * entries + CLOCK_RING_SLACK`
/// positions (removed keys leave stale positions behind). Bounds the ring to ~2x the map.
pub const CLOCK_RING_SLACK: usize = 64;

/// Default payload of one move batch: one peer chunk, the unit the cluster transport already
/// sends without splitting.
pub const MOVE_BATCH_BYTES_DEFAULT: usize = global::PEER_CHUNK_BYTES as usize;

/// Largest configurable move batch. A batch is held in memory on both sides while it is in
/// flight, so it stays far below a node's memory; a single value larger than the configured
/// batch size still travels, alone in its batch.
pub const MOVE_BATCH_BYTES_MAX: usize = 16 * 1024 * 1024;
const _: () = assert!(MOVE_BATCH_BYTES_DEFAULT <= MOVE_BATCH_BYTES_MAX);

/// Largest batch `import_batch` accepts, in payload bytes: a full batch plus one maximal item
/// (the item that crossed the batch size is kept in the batch that it crossed in).
pub const IMPORT_BATCH_BYTES_MAX: usize = MOVE_BATCH_BYTES_MAX + global::ENTRY_BYTES_MAX as usize;

/// Items in one imported batch (the array bound of the rest of the store).
pub const IMPORT_BATCH_ITEMS_MAX: usize = global::BATCH_KEYS_MAX as usize;

/// Bytes of framing charged per batch item (slot, version, age, two lengths) when a batch's
/// size is computed, so a batch of many tiny values is still bounded.
pub const BATCH_ITEM_OVERHEAD_BYTES: usize = 32;

/// Depth of the state-loss broadcast channel. A subscriber that falls this far behind gets an
/// explicit `Lagged { missed }` (and must treat every slot as possibly lost) instead of the
/// store buffering without bound or blocking an insert on a slow reader.
pub const STATE_LOSS_CHANNEL_CAPACITY: usize = 1024;

/// State-loss callbacks one Linklet keeps. They run on the thread that caused the loss, so
/// their number bounds the work added to that insert or move step.
pub const STATE_LOSS_CALLBACKS_MAX: usize = 64;

/// Calendar example: events one user may have on one day. `CAL.FREE` walks the day's events,
/// so this bounds one command's work.
pub const CALENDAR_EVENTS_PER_DAY_MAX: usize = 1024;

/// Calendar example: longest event title and user name in bytes.
pub const CALENDAR_TEXT_BYTES_MAX: usize = 256;

/// Invalidations remembered per shard (64 shards: 65 536 in all), whether or not the key is
/// held: a load or a move batch older than a remembered one is refused (`Error::Stale`). FIFO:
/// the oldest is forgotten first, after which a racing stale load is bounded by `get_fresh`
/// only. Each costs one key and a version.
pub const RECENT_INVALIDATIONS_PER_SHARD: usize = 1024;

/// Keys waiting in one shard's replication dirty log (64 shards). A replicated owner answers a
/// write only after its backup applied it, so the log holds the keys of the writes in flight;
/// it fills only when the backup stalls, and then inserts and updates are refused
/// (`Error::Backlog`) instead of the log growing without bound.
pub const DIRTY_KEYS_PER_SHARD_MAX: usize = 4096;
