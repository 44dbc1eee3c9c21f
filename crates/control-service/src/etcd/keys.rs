//! What Ringlet keeps in etcd, under one key prefix (default `/ringlet`).
//!
//! ```text
//!  <prefix>/config          ClusterConfig JSON   bootstrap plan + s, d; first writer wins
//!  <prefix>/map             ClusterMap JSON      written only by the leader, in a txn that
//!                                                checks the leader key's create_revision
//!  <prefix>/leader          LeaderRecord JSON    bound to the leader process's lease
//!  <prefix>/nodes/<id>      NodeRecord JSON      bound to that node process's lease:
//!                                                present = alive; gone = lease lapsed
//! ```
//!
//! Every value read from etcd is length-checked before it is parsed and validated after
//! (the map by `ClusterMap`'s own decoder).

use super::EtcdError;
use ringlet_control::ClusterMap;
use ringlet_types::{MemgestKind, NodeId};
use serde::{Deserialize, Serialize};

/// Longest key prefix: keys stay short enough to read in `etcdctl get --prefix`.
pub const PREFIX_BYTES_MAX: usize = 256;
/// Largest node or leader record (an address, a few integers).
pub const RECORD_BYTES_MAX: usize = 4096;
/// Largest stored map: the control service's frame limit (a map of `NODES_MAX` nodes and
/// 16,384 ranges is ~2 MiB; etcd's own default request limit is 1.5 MiB, which is the
/// practical ceiling — see docs/design/control-etcd.md).
pub const MAP_BYTES_MAX: usize = crate::CONTROL_FRAME_BYTES_MAX as usize;

/// Key names under one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// `prefix` must start with `/`, not be `/` alone, and fit [`PREFIX_BYTES_MAX`]; a
    /// trailing `/` is dropped.
    ///
    /// # Errors
    /// [`EtcdError::BadPrefix`].
    pub fn new(prefix: &str) -> Result<Keys, EtcdError> {
        let p = prefix.trim_end_matches('/');
        if !p.starts_with('/') || p.len() < 2 || p.len() > PREFIX_BYTES_MAX {
            return Err(EtcdError::BadPrefix(prefix.to_string()));
        }
        if p.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(EtcdError::BadPrefix(prefix.to_string()));
        }
        Ok(Keys {
            prefix: p.to_string(),
        })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }
    pub fn config(&self) -> String {
        format!("{}/config", self.prefix)
    }
    pub fn map(&self) -> String {
        format!("{}/map", self.prefix)
    }
    pub fn leader(&self) -> String {
        format!("{}/leader", self.prefix)
    }
    /// The prefix of every node key (watch it with a prefix watch).
    pub fn nodes(&self) -> String {
        format!("{}/nodes/", self.prefix)
    }
    pub fn node(&self, id: NodeId) -> String {
        format!("{}/nodes/{}", self.prefix, id.0)
    }
    /// The node id of a key under [`Keys::nodes`]; `None` for anything else.
    pub fn node_of(&self, key: &[u8]) -> Option<NodeId> {
        let rest = key.strip_prefix(self.nodes().as_bytes())?;
        let s = std::str::from_utf8(rest).ok()?;
        if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok().map(NodeId)
    }
}

/// A node process's liveness record (`<prefix>/nodes/<id>`), bound to its lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Announced address `ip:port@peerport` (as in the map).
    pub addr: String,
    pub incarnation: u64,
}

/// Who leads (`<prefix>/leader`), bound to the leader's lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderRecord {
    pub node: u32,
    /// The leader's control command address (`ringlet node drain ID --control ADDR`).
    pub control: String,
}

/// The cluster's bootstrap plan and shape (`<prefix>/config`); the first process that
/// brings one creates it, later ones use what is stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterConfig {
    /// Bootstrap once this many nodes registered (0: never by itself).
    pub expect_nodes: usize,
    /// Active nodes at bootstrap (lowest ids); the rest are spares.
    pub active: usize,
    /// Memgest created and made the default at bootstrap (`rep:3`, `none`).
    pub default_memgest: Option<String>,
    pub s: u8,
    pub d: u8,
}

impl ClusterConfig {
    /// # Errors
    /// Out-of-range counts or a bad memgest descriptor.
    pub fn validate(&self) -> Result<Option<MemgestKind>, EtcdError> {
        let nodes_max = ringlet_control::map::NODES_MAX;
        if self.expect_nodes > nodes_max || self.active > self.expect_nodes.max(nodes_max) {
            return Err(EtcdError::BadConfig("node counts out of range".into()));
        }
        if self.expect_nodes > 0 && self.active > self.expect_nodes {
            return Err(EtcdError::BadConfig(
                "more active nodes than expected nodes".into(),
            ));
        }
        match &self.default_memgest {
            None => Ok(None),
            Some(s) => MemgestKind::parse(s)
                .map(Some)
                .map_err(|e| EtcdError::BadConfig(format!("default memgest {s:?}: {e}"))),
        }
    }
}

/// Parse a small JSON record after checking its length.
///
/// # Errors
/// [`EtcdError::BadValue`] naming the key.
pub fn decode_record<T: for<'de> Deserialize<'de>>(key: &str, v: &[u8]) -> Result<T, EtcdError> {
    if v.len() > RECORD_BYTES_MAX {
        return Err(EtcdError::BadValue {
            key: key.to_string(),
            why: format!("{} bytes exceeds {RECORD_BYTES_MAX}", v.len()),
        });
    }
    serde_json::from_slice(v).map_err(|e| EtcdError::BadValue {
        key: key.to_string(),
        why: e.to_string(),
    })
}

/// Parse and validate a stored map.
///
/// # Errors
/// [`EtcdError::BadValue`]: too large, not JSON, or fails the map's validation.
pub fn decode_map(key: &str, v: &[u8]) -> Result<ClusterMap, EtcdError> {
    if v.len() > MAP_BYTES_MAX {
        return Err(EtcdError::BadValue {
            key: key.to_string(),
            why: format!("{} bytes exceeds {MAP_BYTES_MAX}", v.len()),
        });
    }
    let s = std::str::from_utf8(v).map_err(|e| EtcdError::BadValue {
        key: key.to_string(),
        why: e.to_string(),
    })?;
    ClusterMap::from_json(s).map_err(|e| EtcdError::BadValue {
        key: key.to_string(),
        why: e.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn key_names() {
        let k = Keys::new("/ringlet/").unwrap();
        assert_eq!(k.map(), "/ringlet/map");
        assert_eq!(k.node(NodeId(7)), "/ringlet/nodes/7");
        assert_eq!(k.node_of(b"/ringlet/nodes/7"), Some(NodeId(7)));
        assert_eq!(k.node_of(b"/ringlet/nodes/"), None);
        assert_eq!(k.node_of(b"/ringlet/nodes/7x"), None);
        assert_eq!(k.node_of(b"/ringlet/nodes/99999999999"), None);
        assert_eq!(k.node_of(b"/other/nodes/7"), None);
        for bad in ["", "/", "ringlet", "/a b", &format!("/{}", "x".repeat(300))] {
            assert!(Keys::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn records_are_checked() {
        let r: NodeRecord =
            decode_record("k", br#"{"addr":"127.0.0.1:1@2","incarnation":5}"#).unwrap();
        assert_eq!(r.incarnation, 5);
        assert!(decode_record::<NodeRecord>("k", b"{").is_err());
        assert!(decode_record::<NodeRecord>("k", &vec![b' '; RECORD_BYTES_MAX + 1]).is_err());
        assert!(decode_map("k", b"{}").is_err());
        assert!(decode_map("k", &[0xff, 0xfe]).is_err());
        let m = ClusterMap::default();
        let back = decode_map("k", m.to_json().unwrap().as_bytes()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn config_validation() {
        let mut c = ClusterConfig {
            expect_nodes: 4,
            active: 3,
            default_memgest: Some("rep:3".into()),
            s: 2,
            d: 1,
        };
        assert_eq!(c.validate().unwrap(), Some(MemgestKind::Rep { r: 3 }));
        c.default_memgest = Some("rep:x".into());
        assert!(c.validate().is_err());
        c.default_memgest = None;
        c.active = 5;
        assert!(c.validate().is_err());
    }
}
