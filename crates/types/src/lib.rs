//! `ringlet-types`: the vocabulary every Ringlet crate shares.
//!
//! Goals:
//! - one definition of the words in `DESIGN.md` ("Vocabulary"): [`Version`] and its [`Hlc`],
//!   [`Slot`] (Redis Cluster's CRC16 with hash tags), [`Epoch`], [`NodeId`], [`MemgestId`] and
//!   [`MemgestKind`];
//! - one module of limits ([`limits`]) that every decoder and the engine check sizes against.
//!
//! Non-goals: no I/O, no clocks (time comes in as arguments), no allocation-heavy types.
//!
//! Modules:
//! - [`version`]: 128-bit versions and the hybrid logical clock that makes them;
//! - [`slot`]: key → slot;
//! - [`memgest`]: memgest ids and descriptors (`none`, `rep:R`, `ec:K+M`);
//! - [`limits`]: every size bound, with its reason.

pub mod limits;
pub mod memgest;
pub mod slot;
pub mod version;

pub use memgest::{MemgestDescriptorError, MemgestId, MemgestKind};
pub use slot::{key_slot, Slot, SLOT_COUNT};
pub use version::{Hlc, Version};

/// Version of the cluster map. Carried by every response and visible to one-sided readers;
/// it only ever grows (asserted where it is stored).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(pub u64);

/// Identity of a node process in the cluster map. The low 32 bits of a [`Version`]'s origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl std::fmt::Display for Epoch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
