//! Records (KELI) in cluster mode: Redis's hash commands, `LINK` and `CHASE`, with the
//! semantics of `ringlet-record` (shared with the single node, crates/server/src/cmd/record.rs).
//!
//! * **Hash commands, HSCAN, HRANDFIELD, LINK and RECORD SET** are the single node's drivers
//!   (`ringlet_server::cmd::record`), written once over the `Keyspace` trait and run here
//!   over the replicated keyspace (resp/keyspace.rs): read the record at the coordinator,
//!   apply the pure function, write the new record (kind `Record`, the key's memgest and TTL
//!   kept) through the core under the key's guard, so every replica holds a record and a
//!   failover serves it. A string key is WRONGTYPE. ec memgests hold records too (the kind
//!   is in the key metadata every parity holder keeps: docs/design/records.md). New links
//!   get hints from [`ClusterHints`]: targets this node coordinates only.
//! * **CHASE** runs on the root key's coordinator and walks breadth-first. Each depth's keys
//!   are grouped by coordinator: this node's are read through its core, the others are asked
//!   for in one `RECORDS` call per node (one round trip per node and depth, none for the
//!   client). A key whose slot moved meanwhile answers an error item and is skipped, as a
//!   missing key is.
//! * **`RECORDS key [key ...]`** is that internal call: the encoded records (crates/record's
//!   format) of the keys this node coordinates; nil for a missing key or a string, an error
//!   item for a key it does not coordinate. Read-only; AUTH applies as for any command.

use super::{convert, err, Front};
use ringlet_codec::resp::Reply;
use ringlet_record::chase;
use ringlet_server::cmd::keyspace_api::LinkHints;
use ringlet_server::cmd::record::{chase_reply, hint_of, CHASE_TIME_MAX};
use ringlet_types::{key_slot, limits, NodeId, ValueKind};
use std::collections::BTreeMap;
use std::time::Instant;

/// Keys asked of one node in one `RECORDS` call (a CHASE frontier larger than this takes
/// several calls).
const RECORDS_BATCH_MAX: usize = 1024;

/// A cluster node's location hints for new links: a target this node coordinates gets its
/// index entry's position in this node's engine (node id, epoch), found by its key hash's
/// tag as the single node finds it (no data entry read to compare the key: a hint is
/// validated in full when followed, so a tag collision only makes a stale one); others are
/// left without (a client looks them up by key at their coordinator).
///
/// Session 24: by its full key until then (`locate_position`), which read every target's
/// data entry — a cache miss per link, the largest item of a cluster node's profile during
/// a bulk load — where the tag needs only the target's bucket, requested ahead.
pub(super) struct ClusterHints {
    map: Option<std::sync::Arc<ringlet_control::ClusterMap>>,
    me: NodeId,
    epoch: u64,
    reader: ringlet_engine::Reader,
}

impl ClusterHints {
    pub(super) fn new(front: &Front) -> ClusterHints {
        ClusterHints {
            map: front.map(),
            me: front.node.id(),
            epoch: front.node.epoch().0,
            reader: front.node.engine_reader(),
        }
    }
}

impl ClusterHints {
    /// What finding `target`'s hint needs, kept between [`LinkHints::prefetch_keep`] and
    /// [`LinkHints::hint_kept`]: its key hash if this node coordinates it (only those get a
    /// hint), else [`NOT_MINE`]. One coordinator check and one hash per link.
    fn kept(&self, target: &[u8]) -> u64 {
        let mine = self
            .map
            .as_ref()
            .is_some_and(|m| m.coordinator(key_slot(target)) == Some(self.me));
        if mine {
            ringlet_engine::hash::key_hash(target).max(1)
        } else {
            NOT_MINE
        }
    }
}

/// What [`ClusterHints::prefetch_keep`] keeps for a target this node does not coordinate.
/// A target this node does coordinate whose key hash is 0 (one in 2⁶⁴) is kept as 1: its
/// hint then names another bucket, so it is stale when followed (a lookup), never wrong.
const NOT_MINE: u64 = 0;

impl LinkHints for ClusterHints {
    fn prefetch(&self, target: &[u8]) {
        self.prefetch_keep(target);
    }

    fn hint(&self, target: &[u8]) -> Option<ringlet_record::Hint> {
        self.hint_kept(target, self.kept(target))
    }

    /// [`ClusterHints::kept`], the bucket requested.
    fn prefetch_keep(&self, target: &[u8]) -> u64 {
        let kept = self.kept(target);
        if kept != NOT_MINE {
            ringlet_engine::read::prefetch_bucket(&self.reader.view(), kept);
        }
        kept
    }

    /// `kept`: `target`'s key hash, or [`NOT_MINE`].
    fn hint_kept(&self, _target: &[u8], kept: u64) -> Option<ringlet_record::Hint> {
        if kept == NOT_MINE {
            return None;
        }
        ringlet_engine::read::locate_position_by_tag(&self.reader.view(), kept)
            .map(|p| hint_of(p, self.me.0, self.epoch))
    }
}

impl Front {
    /// `RECORDS key [key ...]` (module doc).
    pub(super) async fn records(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        if argv.len() < 2 || argv.len() - 1 > limits::BATCH_KEYS_MAX as usize {
            return Err(err("ERR wrong number of arguments for 'records' command"));
        }
        let mut out = Vec::with_capacity(argv.len() - 1);
        for k in &argv[1..] {
            if self.moved(key_slot(k)).is_some() {
                out.push(err("MOVED"));
                continue;
            }
            out.push(match self.get_any(k).await {
                Ok(Some(g)) if g.kind == ValueKind::Record => Reply::Bulk(g.value),
                Ok(_) => Reply::Null,
                Err(e) => e,
            });
        }
        Ok(Reply::Array(out))
    }

    /// CHASE (module doc).
    pub(super) async fn chase(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let walk = chase::Chase::parse(&args).map_err(err)?;
        if let Some(m) = self.moved(key_slot(walk.root())) {
            return Err(m);
        }
        Ok(convert(&chase_reply(self.chase_walk(walk).await?)))
    }

    /// Drive a parsed CHASE from this node (the root's coordinator; the caller checked):
    /// local reads through the core, one `RECORDS` call per other node and batch (a level,
    /// or with CHUNKED the continuation items of a level found by the batch before).
    /// Shared by RESP CHASE and the native CHASE frame (crates/cluster/src/native.rs).
    ///
    /// One connection per other node for the whole walk (without TLS): a CHUNKED walk makes
    /// one call per chunk of the longest chain, hundreds for a level that meets a hub, and a
    /// connection per call paid a connect and left a socket in TIME_WAIT for each. A call
    /// that fails (no connection, an error reply, a timeout) ends the walk with `time`,
    /// never `complete`: its keys were not read, so what follows from them is unknown (the
    /// client may ask again).
    pub(crate) async fn chase_walk(
        &self,
        mut walk: chase::Chase,
    ) -> Result<chase::ChaseReply, Reply> {
        let deadline = Instant::now() + CHASE_TIME_MAX;
        let mut conns: BTreeMap<NodeId, tokio::net::TcpStream> = BTreeMap::new();
        // Bounded by DEPTH + 1 levels and CHASE_CHUNK_ITEMS_MAX continuation batches, and by
        // the deadline.
        'walk: loop {
            let batch = walk.next_batch();
            if batch.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                walk.timed_out();
                break;
            }
            let Some(map) = self.map() else {
                return Err(err("CLUSTERDOWN the cluster is not bootstrapped"));
            };
            // Group the batch by coordinator: local reads, one call per other node.
            let mut by_node: BTreeMap<NodeId, Vec<Vec<u8>>> = BTreeMap::new();
            for k in batch {
                if let Some(c) = map.coordinator(key_slot(&k)) {
                    by_node.entry(c).or_default().push(k);
                }
            }
            for (node, keys) in by_node {
                if node == self.node.id() {
                    for k in &keys {
                        match self.get_any(k).await {
                            Ok(Some(g)) if g.kind == ValueKind::Record => {
                                walk.feed_encoded(k, Some(&g.value))
                            }
                            _ => walk.feed_encoded(k, None),
                        }
                    }
                    continue;
                }
                let Some(addr) = map
                    .nodes
                    .get(&node)
                    .and_then(|n| crate::node::client_addr(&n.addr))
                else {
                    walk.timed_out();
                    break 'walk;
                };
                for chunk in keys.chunks(RECORDS_BATCH_MAX) {
                    let mut call: Vec<&[u8]> = vec![b"RECORDS"];
                    call.extend(chunk.iter().map(Vec::as_slice));
                    let left = deadline.saturating_duration_since(Instant::now());
                    let reply = tokio::time::timeout(
                        left,
                        self.records_call(&mut conns, node, addr, &call),
                    )
                    .await
                    .ok()
                    .flatten();
                    let items = match reply {
                        Some(Reply::Array(items)) if items.len() == chunk.len() => items,
                        _ => {
                            conns.remove(&node);
                            walk.timed_out();
                            break 'walk;
                        }
                    };
                    for (k, item) in chunk.iter().zip(items) {
                        match item {
                            Reply::Bulk(b) => walk.feed_encoded(k, Some(&b)),
                            _ => walk.feed_encoded(k, None),
                        }
                    }
                }
            }
        }
        Ok(walk.finish())
    }

    /// One `RECORDS` call to `node`: on the walk's connection to it (opened on first use,
    /// authenticated once), or on a connection of its own with TLS.
    async fn records_call(
        &self,
        conns: &mut BTreeMap<NodeId, tokio::net::TcpStream>,
        node: NodeId,
        addr: std::net::SocketAddr,
        call: &[&[u8]],
    ) -> Option<Reply> {
        let max = ringlet_record::CHASE_REPLY_BYTES_MAX;
        if self.tls_connector.is_some() {
            return super::remote_call(
                addr,
                call,
                self.requirepass.as_deref(),
                self.tls_connector.as_ref(),
                max,
            )
            .await;
        }
        let fresh = !conns.contains_key(&node);
        if fresh {
            conns.insert(node, tokio::net::TcpStream::connect(addr).await.ok()?);
        }
        let s = conns.get_mut(&node)?;
        let password = if fresh {
            self.requirepass.as_deref()
        } else {
            None
        };
        super::remote_call_on(s, call, password, max).await
    }
}
