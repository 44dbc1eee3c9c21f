//! The three small traits a Linklet's key and value types meet: [`LinkKey`] (keys as bytes,
//! for the slot hash and for moves), [`Marshal`] (values as bytes, used *only* to move,
//! replicate or load them — never on a `get` or `update`), and [`Sizer`] (the byte estimate the
//! capacity bound charges).

use serde::{de::DeserializeOwned, Serialize};

/// A key: hashed to its Redis Cluster slot by its bytes (with `{hash tags}`), and carried as
/// bytes in move batches.
pub trait LinkKey: Clone + Eq + std::hash::Hash + Send + Sync + 'static {
    /// The bytes the slot is computed from and a move batch carries.
    fn key_bytes(&self) -> &[u8];
    /// The key back from [`LinkKey::key_bytes`]; `None` if the bytes are not a valid key.
    fn from_key_bytes(bytes: &[u8]) -> Option<Self>;
}

impl LinkKey for String {
    fn key_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
    fn from_key_bytes(bytes: &[u8]) -> Option<Self> {
        std::str::from_utf8(bytes).ok().map(str::to_owned)
    }
}

impl LinkKey for Vec<u8> {
    fn key_bytes(&self) -> &[u8] {
        self
    }
    fn from_key_bytes(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}

/// A value that can leave the process: marshalled into a move batch (and, later, a replication
/// stream or a bulk load). The paper's `Marshaller` (LInK §4.3, Fig. 4), off the request path.
///
/// Every `serde` type gets it through the blanket impl below, in JSON: `serde_json` is already
/// built by the workspace, the format is self-describing (a field added to `V` between two
/// application versions still loads, with `#[serde(default)]`), and it is easy to debug in a
/// captured batch. A type that needs a tighter format implements `Marshal` by hand instead of
/// `Serialize` (the blanket impl rules out both on one type).
pub trait Marshal: Sized {
    /// Append the value's bytes to `out`.
    ///
    /// # Errors
    /// [`MarshalError`] if the value cannot be represented.
    fn marshal(&self, out: &mut Vec<u8>) -> Result<(), MarshalError>;
    /// Rebuild a value from [`Marshal::marshal`]'s bytes.
    ///
    /// # Errors
    /// [`MarshalError`] on bytes that are not a value of this type.
    fn unmarshal(bytes: &[u8]) -> Result<Self, MarshalError>;
}

impl<T: Serialize + DeserializeOwned> Marshal for T {
    fn marshal(&self, out: &mut Vec<u8>) -> Result<(), MarshalError> {
        serde_json::to_writer(out, self).map_err(|e| MarshalError(e.to_string()))
    }
    fn unmarshal(bytes: &[u8]) -> Result<Self, MarshalError> {
        serde_json::from_slice(bytes).map_err(|e| MarshalError(e.to_string()))
    }
}

/// A value could not be (un)marshalled; the text comes from the format.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("marshal: {0}")]
pub struct MarshalError(pub String);

/// The byte estimate of one value, charged against [`crate::Config::bytes_max`]. It runs on
/// every insert and after every update, so it must be cheap: count the big parts (string and
/// vector capacities), not every byte. Closures `Fn(&V) -> usize` are sizers.
pub trait Sizer<V>: Send + Sync {
    /// Estimated heap + inline bytes of `value`.
    fn size_bytes(&self, value: &V) -> usize;
}

impl<V, F: Fn(&V) -> usize + Send + Sync> Sizer<V> for F {
    fn size_bytes(&self, value: &V) -> usize {
        self(value)
    }
}

/// The default sizer: `size_of::<V>()`, the inline size only. Right for values without heap
/// parts; for others pass a real estimate with [`crate::Linklet::with_sizer`].
#[derive(Clone, Copy, Debug, Default)]
pub struct InlineSizer;

impl<V> Sizer<V> for InlineSizer {
    fn size_bytes(&self, _value: &V) -> usize {
        std::mem::size_of::<V>()
    }
}
