//! A key as the ec metadata maps hold it: up to [`SmallKey::INLINE_MAX`] bytes inline, longer
//! ones in one exact-size heap block.
//!
//! Every ec key is held in up to four ordered maps (the coordinator's key map, its tombstones,
//! and the key map of each of the M parity holders). As `Vec<u8>` each copy cost a 24-byte slot
//! *and* a heap block (32 bytes from glibc for a key of up to 24 bytes), so the heap block was
//! a third of the map's cost per key (docs/design/cluster-memory.md, session 16). Typical keys
//! (`user:1234567`, `r0:ec:3+2:load:19999`) fit in the 22 inline bytes: same 24-byte slot, no
//! heap block.
//!
//! The order is the byte order of the key, exactly as `Vec<u8>`'s, and the type borrows as
//! `[u8]`, so maps keyed by it page with `range::<[u8], _>` as before: snapshot pages and
//! takeover reads give the same keys in the same order on every node.

use std::borrow::Borrow;
use std::cmp::Ordering;

/// A key, inline when short (see the module docs).
#[derive(Clone)]
pub struct SmallKey(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        buf: [u8; SmallKey::INLINE_MAX],
    },
    Heap(Box<[u8]>),
}

// The point of the type: no bigger than the `Vec<u8>` it replaces.
const _: () = assert!(std::mem::size_of::<SmallKey>() <= 24);

impl SmallKey {
    /// Longest key kept inline.
    pub const INLINE_MAX: usize = 22;

    /// The key `bytes`.
    pub fn new(bytes: &[u8]) -> SmallKey {
        let mut buf = [0u8; SmallKey::INLINE_MAX];
        match (buf.get_mut(..bytes.len()), u8::try_from(bytes.len())) {
            (Some(dst), Ok(len)) => {
                dst.copy_from_slice(bytes);
                SmallKey(Repr::Inline { len, buf })
            }
            _ => SmallKey(Repr::Heap(bytes.into())),
        }
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            // `len ≤ INLINE_MAX` by construction; `get` keeps the lint-free form.
            Repr::Inline { len, buf } => buf.get(..usize::from(*len)).unwrap_or(&[]),
            Repr::Heap(b) => b,
        }
    }

    /// Whether the key sits on the heap (longer than [`SmallKey::INLINE_MAX`]).
    pub fn is_heap(&self) -> bool {
        matches!(self.0, Repr::Heap(_))
    }
}

impl Borrow<[u8]> for SmallKey {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for SmallKey {
    fn eq(&self, o: &SmallKey) -> bool {
        self.as_bytes() == o.as_bytes()
    }
}
impl Eq for SmallKey {}

impl PartialOrd for SmallKey {
    fn partial_cmp(&self, o: &SmallKey) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for SmallKey {
    /// Byte order, as `[u8]` (required by `Borrow<[u8]>`: lookups by slice must agree).
    fn cmp(&self, o: &SmallKey) -> Ordering {
        self.as_bytes().cmp(o.as_bytes())
    }
}

impl std::fmt::Debug for SmallKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_bytes())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn inline_up_to_the_limit_then_heap() {
        for n in 0..40usize {
            let k: Vec<u8> = (0..n).map(|i| i as u8 ^ 0xa5).collect();
            let s = SmallKey::new(&k);
            assert_eq!(s.as_bytes(), &k[..]);
            assert_eq!(s.is_heap(), n > SmallKey::INLINE_MAX, "length {n}");
        }
    }

    proptest! {
        /// Order, equality and slice lookups agree with `Vec<u8>` keys, across the inline /
        /// heap boundary (the maps page by slice ranges).
        #[test]
        fn orders_like_vec(keys in proptest::collection::vec(
            proptest::collection::vec(0u8..4, 0..30), 0..40), probe in proptest::collection::vec(0u8..4, 0..30)) {
            let a: BTreeMap<SmallKey, usize> = keys.iter().enumerate().map(|(i, k)| (SmallKey::new(k), i)).collect();
            let b: BTreeMap<Vec<u8>, usize> = keys.iter().enumerate().map(|(i, k)| (k.clone(), i)).collect();
            let la: Vec<(Vec<u8>, usize)> = a.iter().map(|(k, v)| (k.as_bytes().to_vec(), *v)).collect();
            let lb: Vec<(Vec<u8>, usize)> = b.iter().map(|(k, v)| (k.clone(), *v)).collect();
            prop_assert_eq!(la, lb);
            use std::ops::Bound;
            let ra: Vec<usize> = a.range::<[u8], _>((Bound::Excluded(&probe[..]), Bound::Unbounded)).map(|(_, v)| *v).collect();
            let rb: Vec<usize> = b.range::<[u8], _>((Bound::Excluded(&probe[..]), Bound::Unbounded)).map(|(_, v)| *v).collect();
            prop_assert_eq!(ra, rb);
            prop_assert_eq!(a.get(&probe[..]), b.get(&probe[..]));
        }
    }
}
