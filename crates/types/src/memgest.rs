//! Memgests: the storage scheme of a key (Ring §3; DESIGN.md "Writes, memgests and consistency").
//!
//! A memgest has a small numeric id (stored in every index entry, so it costs 2 bytes there)
//! and a descriptor: `none` (one copy), `rep:R` (R replicas), `ec:K+M` (Stretched Reed-Solomon).
//! Id 0 is always the built-in `none` memgest, so a fresh node can store keys before any
//! control plane has spoken.

use thiserror::Error;

/// Numeric id of a memgest, as stored in index entries and carried on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemgestId(pub u16);

impl MemgestId {
    /// The built-in single-copy memgest.
    pub const NONE: MemgestId = MemgestId(0);
}

/// Largest replication factor we accept: a cohort is a placement group, and PGs beyond 7 nodes
/// buy nothing but write latency.
pub const REP_FACTOR_MAX: u8 = 7;
/// Largest K and M of an erasure-coded memgest (Ring evaluates up to RS(3,2); GF(2^8) allows
/// K + M ≤ 256, but a stripe's chunks must sit on distinct nodes of one PG).
pub const EC_K_MAX: u8 = 16;
/// See [`EC_K_MAX`].
pub const EC_M_MAX: u8 = 4;

/// The storage scheme of a memgest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemgestKind {
    /// One copy on the coordinator; lost with the node.
    None,
    /// `r` replicas: the coordinator and the next `r - 1` cohort members.
    Rep { r: u8 },
    /// SRS(k, m, s): data on the coordinator, parity on the PG's first `m` redundant nodes.
    Ec { k: u8, m: u8 },
}

/// A memgest descriptor that does not parse or is out of range.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MemgestDescriptorError {
    #[error("unknown memgest descriptor '{0}' (expected none, rep:R or ec:K+M)")]
    Syntax(String),
    #[error("replication factor must be 1..={REP_FACTOR_MAX}, got {0}")]
    RepFactor(u32),
    #[error("erasure code needs 1<=K<={EC_K_MAX} and 1<=M<={EC_M_MAX}, got K={0} M={1}")]
    EcShape(u32, u32),
}

impl MemgestKind {
    /// Number of node failures an acknowledged write survives.
    pub fn failures_tolerated(self) -> u8 {
        match self {
            MemgestKind::None => 0,
            MemgestKind::Rep { r } => (r - 1) / 2,
            MemgestKind::Ec { m, .. } => m,
        }
    }

    /// Nodes besides the coordinator that hold a completed write of this memgest: its R - 1
    /// replicas, its M parity holders, or none (WAIT, INFO replication).
    pub fn other_holders(self) -> usize {
        match self {
            MemgestKind::None => 0,
            MemgestKind::Rep { r } => usize::from(r).saturating_sub(1),
            MemgestKind::Ec { m, .. } => usize::from(m),
        }
    }

    /// Whether a full node may evict keys of this memgest (a cache) or must refuse writes
    /// instead (a store). Only `none` is evictable by default: a reliable memgest exists to
    /// keep data.
    pub fn evictable_by_default(self) -> bool {
        matches!(self, MemgestKind::None)
    }

    /// Parse `none`, `rep:R` or `ec:K+M`.
    pub fn parse(s: &str) -> Result<MemgestKind, MemgestDescriptorError> {
        let syntax = || MemgestDescriptorError::Syntax(s.to_string());
        if s.eq_ignore_ascii_case("none") {
            return Ok(MemgestKind::None);
        }
        if let Some(r) = s.strip_prefix("rep:") {
            let r: u32 = r.parse().map_err(|_| syntax())?;
            if r == 0 || r > u32::from(REP_FACTOR_MAX) {
                return Err(MemgestDescriptorError::RepFactor(r));
            }
            return Ok(MemgestKind::Rep { r: r as u8 });
        }
        if let Some(km) = s.strip_prefix("ec:") {
            let (k, m) = km.split_once('+').ok_or_else(syntax)?;
            let k: u32 = k.parse().map_err(|_| syntax())?;
            let m: u32 = m.parse().map_err(|_| syntax())?;
            if k == 0 || m == 0 || k > u32::from(EC_K_MAX) || m > u32::from(EC_M_MAX) {
                return Err(MemgestDescriptorError::EcShape(k, m));
            }
            return Ok(MemgestKind::Ec {
                k: k as u8,
                m: m as u8,
            });
        }
        Err(syntax())
    }
}

impl std::fmt::Display for MemgestKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemgestKind::None => write!(f, "none"),
            MemgestKind::Rep { r } => write!(f, "rep:{r}"),
            MemgestKind::Ec { k, m } => write!(f, "ec:{k}+{m}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for s in ["none", "rep:1", "rep:3", "ec:3+2", "ec:2+1"] {
            assert_eq!(MemgestKind::parse(s).unwrap().to_string(), s);
        }
        assert!(MemgestKind::parse("rep:0").is_err());
        assert!(MemgestKind::parse("ec:3").is_err());
        assert!(MemgestKind::parse("raid5").is_err());
    }

    #[test]
    fn tolerance() {
        assert_eq!(MemgestKind::parse("rep:3").unwrap().failures_tolerated(), 1);
        assert_eq!(
            MemgestKind::parse("ec:3+2").unwrap().failures_tolerated(),
            2
        );
    }
}
