//! `ringlet-linklet`: Ringlet's linked mode (LInK, Adya et al. HotOS '19): the store linked
//! into an application process as a concurrent map of the application's own objects, sharded
//! by Redis Cluster slot so that whole slot ranges can move between processes on resharding.
//!
//! Goals:
//! - native objects on the request path: `get` hands out a read guard on the object itself and
//!   `update(key, |v| ..)` changes it in place, atomically per key; marshalling ([`Marshal`])
//!   happens only when a value leaves the process (moves now; replication and loads later);
//! - a byte bound (per-value [`Sizer`] estimate) and an entry bound, kept by CLOCK eviction
//!   that never evicts a pinned, guarded, moving or importing entry;
//! - moving a slot range to another Linklet ([`moving`]) in byte-bounded batches without
//!   losing an acknowledged update, with system-of-record versions carried along;
//! - telling the application when state may be lost ([`StateLoss`]: callbacks and a bounded
//!   async stream) and keeping values fresh (`invalidate*`, `get_fresh`);
//! - a worked custom store: the paper's calendar with `find-free-slots`, over RESP
//!   ([`calendar`], `examples/calendar.rs`).
//!
//! Non-goals (here; see `docs/design/linklet.md`): any I/O. Linked members over the network,
//! the auto-sharder, the router and the PostgreSQL change feed are in `ringlet-linked`
//! (`crates/linked`), which also drives [`replica`]; persistence is not built.
//!
//! # Why a guard and not an `Arc<V>` snapshot
//!
//! An `Arc<V>` snapshot would make every in-place update copy the whole object when a reader
//! still holds the old one (copy-on-write) — the read-modify-write cost of a large object that
//! linked mode exists to remove (LInK §3.1). A guard ([`Ref`]) shares the object and costs one
//! uncontended read lock; the price is that a guard delays updates of its own key while it
//! lives, so guards are for short reads (see [`Ref`]). [`Linklet::read`] scopes one for you.
//!
//! # Modules
//! - [`map`]: the map — shards, slot states, per-entry locks, CLOCK eviction, freshness;
//! - [`moving`]: export / import of slot ranges in batches ([`Batch`], [`Export`]);
//! - [`notify`]: [`StateLoss`] events, callbacks and the [`StateLossReceiver`] stream;
//! - [`replica`]: the dirty log, snapshots and replica application for a backup copy;
//! - [`marshal`]: [`LinkKey`], [`Marshal`] (serde blanket impl, JSON), [`Sizer`];
//! - [`clock`]: the time source for freshness ([`ManualClock`] in tests);
//! - [`calendar`]: the custom in-memory store example (domain + RESP server);
//! - [`limits`]: this crate's bounds; [`error`]: [`Error`].

pub mod calendar;
pub mod clock;
pub mod error;
pub mod limits;
pub mod map;
pub mod marshal;
pub mod moving;
pub mod notify;
pub mod replica;

pub use clock::{Clock, ManualClock, MonotonicClock};
pub use error::Error;
pub use map::{Config, Linklet, Ref, SlotState, Stats};
pub use marshal::{InlineSizer, LinkKey, Marshal, MarshalError, Sizer};
pub use moving::{Batch, BatchItem, Export, ImportOutcome};
pub use notify::{LossReason, RecvError, StateLoss, StateLossReceiver};
pub use replica::{ApplyOutcome, Dirty, ReplItem};
pub use ringlet_types::Slot;
