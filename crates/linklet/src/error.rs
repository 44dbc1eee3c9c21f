//! The crate's error type. Every variant is something a caller acts on, and the type is `Copy`
//! so the hot-path refusals (`Moving`, `NotOwner`) cost nothing to return.

use ringlet_types::Slot;

use crate::SlotState;

/// Why a [`crate::Linklet`] call did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// This Linklet does not serve `slot` (never owned, moved away, or still importing). A
    /// router refreshes its assignment and sends the request to the owner.
    #[error("slot {slot} is not served here")]
    NotOwner {
        /// The key's slot.
        slot: Slot,
    },
    /// `slot` is being exported: reads are served, writes are refused so that no update can
    /// land after its value was copied. A router retries after a short backoff; the move ends
    /// in a commit (retry at the new owner) or an abort (retry here).
    #[error("slot {slot} is moving")]
    Moving {
        /// The key's slot.
        slot: Slot,
    },
    /// One value is larger than the whole byte capacity.
    #[error("value of {size_bytes} bytes exceeds the capacity")]
    TooLarge {
        /// The value's charged size (key + estimate + overhead).
        size_bytes: u64,
    },
    /// No room could be made: what would have to be evicted is pinned, read through a live
    /// guard, moving or importing, or the eviction scan budget ran out.
    #[error("no space: capacity is held by entries that may not be evicted")]
    NoSpace,
    /// A range operation found `slot` in a state the step does not start from (for example
    /// `commit_import` on a slot that was never `begin_import`ed).
    #[error("slot {slot} is {state:?}, not valid for this step of a move")]
    SlotState {
        /// The first offending slot.
        slot: Slot,
        /// Its state.
        state: SlotState,
    },
    /// The value being installed is older than a version the system of record announced for
    /// its key (`invalidate_if_older`, remembered in the recent-invalidation table): it was
    /// read before that change. Reload and insert again.
    #[error("value of slot {slot} is older than a recent invalidation")]
    Stale {
        /// The key's slot.
        slot: Slot,
    },
    /// Replication's dirty log of `slot`'s shard is full (the backup is behind): the write
    /// was not made. Retry after a short backoff, like `Moving`.
    #[error("slot {slot}: replication backlog full")]
    Backlog {
        /// The key's slot.
        slot: Slot,
    },
    /// A slot range with `first > last` or `last >= 16384`.
    #[error("invalid slot range")]
    BadRange,
    /// A value or key could not be marshalled or unmarshalled (the item's slot is given).
    #[error("marshalling failed for a value of slot {slot}")]
    Marshal {
        /// The slot of the item.
        slot: Slot,
    },
    /// An imported batch broke a bound or an invariant (size, item count, an item outside the
    /// batch's range, a key whose slot is not the item's slot). The batch is not applied.
    #[error("invalid move batch: {reason}")]
    BadBatch {
        /// What was wrong.
        reason: &'static str,
    },
    /// [`crate::Config::validate`] refused the named field.
    #[error("invalid config field `{field}`: {reason}")]
    Config {
        /// The field.
        field: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// More state-loss callbacks than [`crate::limits::STATE_LOSS_CALLBACKS_MAX`].
    #[error("too many state-loss callbacks")]
    TooManyCallbacks,
}
