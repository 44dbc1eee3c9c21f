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

/// What a stored value is: a byte string, or a KVL record (named attributes and links,
/// `ringlet-record`; KELI). Part of every entry: the engine keeps it in the entry header
/// (checksummed), replication and erasure coding carry it, so a record stays a record on
/// every copy. Redis clients see a record as a hash; string commands on it get WRONGTYPE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ValueKind {
    #[default]
    String,
    Record,
}

impl ValueKind {
    /// One byte on the wire.
    pub fn to_u8(self) -> u8 {
        match self {
            ValueKind::String => 0,
            ValueKind::Record => 1,
        }
    }

    /// The kind of a wire byte; `None` for a byte no version of Ringlet writes.
    pub fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::String),
            1 => Some(ValueKind::Record),
            _ => None,
        }
    }

    /// The name Redis's TYPE gives it.
    pub fn type_name(self) -> &'static str {
        match self {
            ValueKind::String => "string",
            ValueKind::Record => "hash",
        }
    }
}

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
