//! Redis Cluster's resharding commands, so that `redis-cli --cluster reshard` (and
//! `rebalance`) work unchanged against a Ringlet cluster (issue 12 item 4,
//! docs/design/cluster-resharding.md § "Redis Cluster's resharding commands").
//!
//! redis-cli moves one slot at a time:
//!
//! ```text
//!  target: CLUSTER SETSLOT s IMPORTING <source-id>
//!  source: CLUSTER SETSLOT s MIGRATING <target-id>
//!  source: CLUSTER GETKEYSINSLOT s n ──▶ keys ──▶ MIGRATE host port "" 0 timeout KEYS k…
//!          (repeated until GETKEYSINSLOT answers no key)
//!  every master: CLUSTER SETSLOT s NODE <target-id>
//! ```
//!
//! Ringlet moves data by whole slot spans through the control plane (copy, catch up, switch
//! at one epoch with the old owner fenced), never key by key: a slot is never served by two
//! nodes, so there is no ASK window to emulate. Here:
//!
//! * `SETSLOT s MIGRATING id` records on this node that slot `s` is to go to `id` (nothing
//!   moves yet); `IMPORTING` only checks its arguments; `STABLE` forgets the record.
//! * `MIGRATE` to a member of this cluster moves the *whole slot* of the keys it names to
//!   the node at that address and answers once the new owner holds it; it is refused unless
//!   the slot was marked MIGRATING to that node first (a bare MIGRATE in Redis Cluster copies
//!   keys to a node that does not serve their slot; in Ringlet it would move the whole slot,
//!   which nobody asking for one key expects). The next GETKEYSINSLOT on this node then
//!   finds the slot gone and answers no keys, which ends redis-cli's loop.
//! * `SETSLOT s NODE id` makes sure `id` coordinates `s`: nothing to do if it already does
//!   (redis-cli sends it to every master after the keys moved), otherwise the slot moves
//!   now (an empty slot, which redis-cli never MIGRATEs).
//! * `GETKEYSINSLOT` and `COUNTKEYSINSLOT` answer for slots this node coordinates, as a Redis
//!   Cluster master answers for its own slots.
//!
//! What cannot be honoured is refused with the reason: MIGRATE to an address outside the
//! cluster, MIGRATE COPY (a move cannot leave the keys behind), a destination db other
//! than 0.

use super::{err, Front};
use ringlet_codec::resp::Reply;
use ringlet_control::ClusterMap;
use ringlet_types::{key_slot, NodeId, Slot, SLOT_COUNT};
use std::time::Duration;

/// GETKEYSINSLOT's count above this is clamped (bounds one reply; redis-cli asks for
/// `--cluster-pipeline`, 10 by default).
const GETKEYS_COUNT_MAX: usize = 10_000;
/// Engine keys read per lock hold while enumerating a slot.
const SCAN_BATCH: usize = 1024;
/// Longest wait for one slot's move, whatever MIGRATE's timeout says (a MIGRATE timeout is
/// an I/O inactivity bound in Redis, not a bound on the whole operation).
const MOVE_WAIT_MAX: Duration = Duration::from_secs(120);
/// Shortest wait for one slot's move (a MIGRATE timeout of a few ms must not fail a move
/// that needs a few heartbeats).
const MOVE_WAIT_MIN: Duration = Duration::from_secs(10);
/// Slots marked MIGRATING on one node at once (redis-cli marks one at a time).
const MIGRATING_MAX: usize = SLOT_COUNT as usize;

fn parse_slot(b: &[u8]) -> Result<Slot, Reply> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|s| *s < u32::from(SLOT_COUNT))
        .map(|s| s as Slot)
        .ok_or_else(|| err("ERR Invalid or out of range slot"))
}

/// A node id as CLUSTER NODES prints it (40 hex digits) or as Ringlet numbers nodes.
fn parse_node(map: &ClusterMap, b: &[u8]) -> Result<NodeId, Reply> {
    let s = std::str::from_utf8(b).unwrap_or("");
    let id = if s.len() == 40 {
        u64::from_str_radix(s, 16).ok()
    } else {
        s.parse::<u64>().ok()
    };
    id.and_then(|n| u32::try_from(n).ok())
        .map(NodeId)
        .filter(|n| map.nodes.contains_key(n))
        .ok_or_else(|| err(format!("ERR I don't know about node {s}")))
}

impl Front {
    /// CLUSTER SETSLOT / GETKEYSINSLOT / COUNTKEYSINSLOT; `None` for other subcommands.
    pub(super) async fn cluster_reshard(&self, argv: &[Vec<u8>]) -> Option<Result<Reply, Reply>> {
        let sub = argv.get(1)?.to_ascii_lowercase();
        Some(match sub.as_slice() {
            b"setslot" => self.setslot(argv).await,
            b"getkeysinslot" => self.getkeysinslot(argv).await,
            b"countkeysinslot" => self.countkeysinslot(argv),
            _ => return None,
        })
    }

    fn placed_map(&self) -> Result<std::sync::Arc<ClusterMap>, Reply> {
        self.map()
            .ok_or_else(|| err("CLUSTERDOWN the cluster has no placement yet"))
    }

    /// `CLUSTER SETSLOT <slot> IMPORTING|MIGRATING|NODE <id> | STABLE`.
    async fn setslot(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        // Arity -4 is checked by the command table.
        let slot = parse_slot(&argv[2])?;
        let map = self.placed_map()?;
        let what = argv[3].to_ascii_lowercase();
        let node = |i: usize| match argv.get(i) {
            Some(id) if argv.len() == i + 1 => parse_node(&map, id),
            _ => Err(err("ERR syntax error")),
        };
        let me = self.node.id();
        match what.as_slice() {
            b"migrating" => {
                let to = node(4)?;
                if map.coordinator(slot) != Some(me) {
                    return Err(err(format!("ERR I'm not the owner of hash slot {slot}")));
                }
                let mut m = self.migrating.lock();
                if m.len() >= MIGRATING_MAX && !m.contains_key(&slot) {
                    return Err(err("ERR too many slots marked MIGRATING"));
                }
                m.insert(slot, to);
                Ok(Reply::ok())
            }
            b"importing" => {
                let from = node(4)?;
                if map.coordinator(slot) == Some(me) {
                    return Err(err(format!(
                        "ERR I'm already the owner of hash slot {slot}"
                    )));
                }
                let _ = from;
                Ok(Reply::ok())
            }
            b"stable" if argv.len() == 4 => {
                self.migrating.lock().remove(&slot);
                Ok(Reply::ok())
            }
            b"node" => {
                let to = node(4)?;
                self.move_slot(slot, to, MOVE_WAIT_MAX).await?;
                self.migrating.lock().remove(&slot);
                Ok(Reply::ok())
            }
            _ => Err(err(
                "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP",
            )),
        }
    }

    /// Make `to` the coordinator of `slot` (a control-plane move, waited for); nothing if
    /// it is already.
    async fn move_slot(&self, slot: Slot, to: NodeId, wait: Duration) -> Result<(), Reply> {
        let control = self.node.control_addr().to_owned();
        let map = crate::balancer::current_map(&control)
            .await
            .map_err(|e| err(format!("CLUSTERDOWN control plane unreachable: {e}")))?;
        let pair = match ringlet_control::pair_for(&map, slot, to) {
            Ok(None) => return self.await_owner(slot, to).await,
            Ok(Some(p)) => p,
            Err(e) => return Err(err(format!("ERR {e}"))),
        };
        let m = ringlet_control::PlannedMove {
            first: slot,
            last: slot,
            pg: pair.0,
            data_index: pair.1,
            from: map.coordinator(slot).unwrap_or(to),
            to,
        };
        crate::balancer::move_and_wait(&control, &m, 0, wait)
            .await
            .map_err(|e| err(format!("ERR {e}")))?;
        self.await_owner(slot, to).await
    }

    /// Wait (bounded) until this node's own map gives `slot` to `to`, so that the next
    /// command on this connection (redis-cli's GETKEYSINSLOT) sees the move.
    async fn await_owner(&self, slot: Slot, to: NodeId) -> Result<(), Reply> {
        self.await_map(|m| m.coordinator(slot) == Some(to)).await;
        Ok(())
    }

    /// `CLUSTER GETKEYSINSLOT <slot> <count>`: live keys of a slot this node coordinates.
    async fn getkeysinslot(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        if argv.len() != 4 {
            return Err(err(
                "ERR wrong number of arguments for 'cluster|getkeysinslot' command",
            ));
        }
        let slot = parse_slot(&argv[2])?;
        let count = std::str::from_utf8(&argv[3])
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| err("ERR Invalid number of keys"))?;
        let count = usize::try_from(count)
            .unwrap_or(usize::MAX)
            .min(GETKEYS_COUNT_MAX);
        if count == 0 || self.moved(slot).is_some() || self.map().is_none() {
            return Ok(Reply::Array(vec![]));
        }
        let mut cursor = 0;
        let mut out = Vec::new();
        // Bounded: the engine's cursor visits every bucket once.
        loop {
            let mut page = Vec::new();
            cursor = self
                .node
                .engine()
                .lock()
                .slot_keys(slot, cursor, SCAN_BATCH, &mut page);
            page.sort();
            page.dedup();
            out.extend(self.confirm(page).await);
            if cursor == 0 || out.len() >= count {
                break;
            }
        }
        out.sort();
        out.dedup();
        out.truncate(count);
        Ok(Reply::Array(out.into_iter().map(Reply::Bulk).collect()))
    }

    /// `CLUSTER COUNTKEYSINSLOT <slot>`: keys stored in a slot this node coordinates (like
    /// Redis, expired keys count until they are reaped); 0 for other slots.
    fn countkeysinslot(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        let slot = parse_slot(&argv[2])?;
        if self.moved(slot).is_some() || self.map().is_none() {
            return Ok(Reply::Integer(0));
        }
        let n = self.node.engine().lock().slot_len(slot);
        Ok(Reply::Integer(i64::try_from(n).unwrap_or(i64::MAX)))
    }

    /// `MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE] [AUTH pw]
    /// [AUTH2 user pw] [KEYS key ...]`: the keys' slots move whole to the member at
    /// `host:port` (see the module doc).
    pub(super) async fn migrate(&self, argv: &[Vec<u8>]) -> Result<Reply, Reply> {
        let map = self.placed_map()?;
        let s = |i: usize| String::from_utf8_lossy(&argv[i]).into_owned();
        let port: u16 = s(2)
            .parse()
            .map_err(|_| err("ERR value is not an integer or out of range"))?;
        let db: i64 = s(4)
            .parse()
            .map_err(|_| err("ERR value is not an integer or out of range"))?;
        let timeout_ms: i64 = s(5)
            .parse()
            .map_err(|_| err("ERR value is not an integer or out of range"))?;
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut i = 6;
        while i < argv.len() {
            match argv[i].to_ascii_lowercase().as_slice() {
                b"copy" => {
                    return Err(err(
                        "ERR MIGRATE COPY is not supported: Ringlet moves whole slots inside its \
                         cluster and cannot leave the keys behind",
                    ))
                }
                b"replace" => i += 1,
                // Credentials for the destination: the move runs between members over the
                // cluster's own authenticated links, so there is nothing to log in to.
                b"auth" => i += 2,
                b"auth2" => i += 3,
                b"keys" => {
                    if !argv[3].is_empty() {
                        return Err(err(
                            "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string",
                        ));
                    }
                    keys.extend(argv[i + 1..].iter().map(Vec::as_slice));
                    break;
                }
                _ => return Err(err("ERR syntax error")),
            }
        }
        if i > argv.len() {
            return Err(err("ERR syntax error"));
        }
        if !argv[3].is_empty() {
            keys.push(&argv[3]);
        }
        if db != 0 {
            return Err(err(
                "ERR MIGRATE to a database other than 0 is not supported (a cluster has only db 0)",
            ));
        }
        let host = s(1);
        let to = self.member_at(&map, &host, port).await.ok_or_else(|| {
            err(format!(
                "ERR MIGRATE to {host}:{port}: not a member of this Ringlet cluster (Ringlet \
                 moves whole slots between its own nodes only)"
            ))
        })?;
        let mut slots: Vec<Slot> = keys.iter().map(|k| key_slot(k)).collect();
        slots.sort_unstable();
        slots.dedup();
        let me = self.node.id();
        let wait = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0))
            .clamp(MOVE_WAIT_MIN, MOVE_WAIT_MAX);
        let mut moved_any = false;
        for slot in slots {
            match map.coordinator(slot) {
                Some(c) if c == to => continue,
                Some(c) if c == me => {}
                // Another node's slot: its keys are not here (Redis answers NOKEY for them).
                _ => continue,
            }
            if self.migrating.lock().get(&slot) != Some(&to) {
                return Err(err(format!(
                    "ERR MIGRATE moves the whole slot {slot} in Ringlet: mark it first with \
                     CLUSTER SETSLOT {slot} MIGRATING <target-id> (as redis-cli --cluster \
                     reshard does), or use `ringlet node move-slots`"
                )));
            }
            self.move_slot(slot, to, wait).await?;
            moved_any = true;
        }
        Ok(if moved_any || keys.is_empty() {
            Reply::ok()
        } else {
            Reply::Simple(b"NOKEY".to_vec())
        })
    }

    /// The member whose client address is `host:port` (`host` an IP, or a name that
    /// resolves to one).
    async fn member_at(&self, map: &ClusterMap, host: &str, port: u16) -> Option<NodeId> {
        let ips: Vec<std::net::IpAddr> = match host.parse() {
            Ok(ip) => vec![ip],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map(|a| a.map(|s| s.ip()).collect())
                .unwrap_or_default(),
        };
        map.nodes.iter().find_map(|(id, n)| {
            let a = crate::node::client_addr(&n.addr)?;
            (a.port() == port && ips.iter().any(|ip| *ip == a.ip())).then_some(*id)
        })
    }
}
