//! Records (KELI) in cluster mode: Redis's hash commands, `LINK` and `CHASE`, with the
//! semantics of `ringlet-record` (shared with the single node, crates/server/src/cmd/record.rs).
//!
//! * **Hash commands and LINK** run on the key's coordinator: read the record through the
//!   replica core, apply the pure function, write the new record (kind `Record`, the key's
//!   memgest and TTL kept) under the per-key lock, so every replica holds a record and a
//!   failover serves it. A string key is WRONGTYPE. ec memgests hold records too (the kind
//!   is in the key metadata every parity holder keeps: docs/design/records.md).
//! * **CHASE** runs on the root key's coordinator and walks breadth-first. Each depth's keys
//!   are grouped by coordinator: this node's are read through its core, the others are asked
//!   for in one `RECORDS` call per node (one round trip per node and depth, none for the
//!   client). A key whose slot moved meanwhile answers an error item and is skipped, as a
//!   missing key is.
//! * **`RECORDS key [key ...]`** is that internal call: the encoded records (crates/record's
//!   format) of the keys this node coordinates; nil for a missing key or a string, an error
//!   item for a key it does not coordinate. Read-only; AUTH applies as for any command.

use super::{convert, err, Front, WRONGTYPE};
use ringlet_codec::resp::Reply;
use ringlet_record::hash::{Applied, Write};
use ringlet_record::{chase, Record};
use ringlet_server::cmd::record::{
    chase_reply, hrandfield_args, hrandfield_reply, hscan_reply, link_write_field, local_hint,
    out_reply, read_encoded, Rng, CHASE_TIME_MAX,
};
use ringlet_types::{key_slot, limits, NodeId, ValueKind};
use std::collections::BTreeMap;
use std::time::Instant;

/// Keys asked of one node in one `RECORDS` call (a CHASE frontier larger than this takes
/// several calls).
const RECORDS_BATCH_MAX: usize = 1024;

impl Front {
    /// HSET … HSTRLEN and LINK: `key` is the command's key, `write` whether it may change it.
    pub(super) async fn record_command(
        &self,
        argv: &[Vec<u8>],
        key: &[u8],
        write: bool,
        apply: fn(&[&[u8]], Option<&Record>) -> Applied,
    ) -> Result<Reply, Reply> {
        if let Some(m) = self.moved(key_slot(key)) {
            return Err(m);
        }
        let _g = if write {
            Some(self.lock(key).await?)
        } else {
            None
        };
        let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        // One read through the core; HGET/HMGET answer from the encoded bytes in place.
        let got = self.get_any(key).await?;
        let cur = match &got {
            None => None,
            Some(g) if g.kind == ValueKind::String => return Err(err(WRONGTYPE)),
            Some(g) => {
                if let Some(out) = read_encoded(&args, &g.value) {
                    return Ok(convert(&out_reply(&name, out)));
                }
                Some(
                    Record::decode(&g.value)
                        .map_err(|e| err(format!("ERR stored record does not decode: {e}")))?,
                )
            }
        };
        let mut applied = apply(&args, cur.as_ref());
        if let Write::Store(r) = &mut applied.write {
            if let Some(field) = link_write_field(&args) {
                self.fill_hints(r, field);
            } else if name == "record" {
                // RECORD SET's LINK / LINKS fields, as LINK SET/ADD's (the loader's writes:
                // without this a loaded graph chased one-sided would look every hop up).
                if let Ok(specs) = ringlet_record::put::parse(&args) {
                    for field in ringlet_record::put::link_fields(&specs) {
                        self.fill_hints(r, field);
                    }
                }
            }
        }
        match applied.write {
            Write::None => {}
            Write::Store(r) => {
                let expiry = got.and_then(|g| g.expiry_ms);
                self.write_kind(key, Some(r.encode()), None, expiry, ValueKind::Record)
                    .await?;
            }
            Write::Delete => self.write_in(key, None, None).await?,
        }
        Ok(convert(&out_reply(&name, applied.reply)))
    }

    /// Location hints for the links of `field` that have none: a target this node
    /// coordinates gets its index entry's position in this node's engine (node id, epoch);
    /// others are left without (a client looks them up by key at their coordinator).
    fn fill_hints(&self, r: &mut Record, field: &[u8]) {
        let Some(map) = self.map() else {
            return;
        };
        let me = self.node.id();
        let reader = self.node.engine_reader();
        let epoch = self.node.epoch().0;
        r.fill_hints(field, |t| {
            if map.coordinator(key_slot(t)) != Some(me) {
                return None;
            }
            local_hint(&reader, t, me.0, epoch)
        });
    }

    /// The record at `key` for a read-only hash command on its coordinator: `Ok(None)` if
    /// missing, WRONGTYPE for a string.
    async fn read_record(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
        if let Some(m) = self.moved(key_slot(key)) {
            return Err(m);
        }
        match self.get_any(key).await? {
            None => Ok(None),
            Some(g) if g.kind == ValueKind::String => Err(err(WRONGTYPE)),
            Some(g) => Ok(Some(g.value.to_vec())),
        }
    }

    /// HSCAN key cursor [MATCH pattern] [COUNT n] (Redis 7.0's replies; the single node's
    /// `hscan_reply`).
    pub(super) async fn hscan(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        // Redis checks the cursor before it looks the key up.
        if std::str::from_utf8(args[2])
            .ok()
            .and_then(|c| c.parse::<u64>().ok())
            .is_none()
        {
            return Err(err("ERR invalid cursor"));
        }
        let rec = self.read_record(args[1]).await?;
        let listpack = rec.as_deref().is_none_or(|r| {
            ringlet_server::cmd::keyspace::record_encoding(r, &self.hash_encoding) == "listpack"
        });
        Ok(convert(&hscan_reply(&args, rec.as_deref(), listpack)))
    }

    /// HRANDFIELD key [count [WITHVALUES]] (Redis 7.0's replies; RESP3 pairs as arrays).
    pub(super) async fn hrandfield(&self, argv: &[Vec<u8>], resp3: bool) -> Result<Reply, Reply> {
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let parsed = hrandfield_args(&args).map_err(|e| convert(&e))?;
        let rec = self.read_record(args[1]).await?;
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ ringlet_types::key_slot(args[1]) as u64;
        Ok(convert(&hrandfield_reply(
            parsed,
            rec.as_deref(),
            resp3,
            &mut Rng(seed),
        )))
    }

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
