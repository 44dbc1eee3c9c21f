//! [`EtcdBackend`]: the `ControlBackend` a node talks to in etcd mode. Each process runs an
//! unchanged [`ControlService`](crate::ControlService) on loopback with
//! this backend, and its `ClusterNode` connects there, so the node code is the same in both
//! modes. The backend does not decide anything about the cluster (the leader's
//! `ControlPlane` does); it bridges the node to etcd:
//!
//! | from the node | what the agent does |
//! |---|---|
//! | `Join{addr, incarnation}` | registers `<prefix>/nodes/<id>` = {addr, incarnation} under the process lease ([`register_loop`]); answers the current map |
//! | `Heartbeat{sent_ms}` | `HeartbeatAck{sent_ms: min(sent_ms, lease.ok_sent_ms)}` if this incarnation is registered under the live lease and listed in the map; the map if the node is behind |
//! | (tick) | pushes every newer map seen on the `<prefix>/map` watch ([`follow_map`]); `Fenced` when the map marks this incarnation Failed (the core also wipes itself on such a map; this covers a node that missed it) |
//! | `Usage` (every 100 ms) | forwarded to the leader's command port ([`forward_usage`]), which decides memgest drops from every node's report |
//! | commands (drain, `MEMGEST ...`) | forwarded by the service to the leader's command port, followed from `<prefix>/leader` ([`follow_leader`], `ControlBackend::command_forward`); refused while no leader is known |

use super::keys::{decode_map, decode_record, Keys, LeaderRecord, NodeRecord};
use super::lease::NodeLease;
use super::{call, Backoff, EtcdError, RateLog};
use crate::ControlBackend;
use crate::{encode, ToControl};
use etcd_client::{EventType, PutOptions, WatchOptions};
use parking_lot::Mutex;
use ringlet_control::{Action, ClusterMap, ControlError, Input, NodeState};
use ringlet_types::{Epoch, NodeId};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Why a command sent to a node's agent is refused.
pub const NOT_LEADER: &str =
    "etcd mode: send commands to the leader's control address (the `control` field of <prefix>/leader)";

#[derive(Debug, Default)]
struct AgentState {
    /// Newest (addr, incarnation) the node joined with.
    joined: Option<(String, u64)>,
    /// (incarnation, lease generation) confirmed written to etcd.
    registered: Option<(u64, u64)>,
    /// Incarnations up to this one are fenced (the map failed them).
    fenced_upto: u64,
    map: Option<Arc<ClusterMap>>,
    /// Epoch of the last map handed to the service for pushing.
    pushed: Epoch,
    /// The leader's command address (`<prefix>/leader`), where commands are forwarded.
    leader: Option<String>,
}

/// Usage reports queued for the leader (a node sends one every 100 ms; a full queue drops,
/// the next report replaces it).
pub const USAGE_QUEUE_MAX: usize = 16;

/// The node-facing backend (one per process, one node id).
#[derive(Debug)]
pub struct EtcdBackend {
    node: NodeId,
    lease: Arc<NodeLease>,
    st: Mutex<AgentState>,
    /// Wakes [`register_loop`].
    wake: tokio::sync::Notify,
    empty: Arc<ClusterMap>,
    usage_tx: tokio::sync::mpsc::Sender<ToControl>,
    usage_rx: Mutex<Option<tokio::sync::mpsc::Receiver<ToControl>>>,
}

impl EtcdBackend {
    pub fn new(node: NodeId, lease: Arc<NodeLease>) -> Arc<EtcdBackend> {
        let (usage_tx, usage_rx) = tokio::sync::mpsc::channel(USAGE_QUEUE_MAX);
        Arc::new(EtcdBackend {
            node,
            lease,
            st: Mutex::new(AgentState::default()),
            wake: tokio::sync::Notify::new(),
            empty: Arc::new(ClusterMap::default()),
            usage_tx,
            usage_rx: Mutex::new(Some(usage_rx)),
        })
    }

    /// The leader's command address as last read from etcd.
    pub fn leader_control(&self) -> Option<String> {
        self.st.lock().leader.clone()
    }

    fn set_leader(&self, control: Option<String>) {
        self.st.lock().leader = control;
    }

    /// Take a map read from etcd if it is newer than the one held. Returns whether it was.
    pub fn offer_map(&self, m: ClusterMap) -> bool {
        let mut st = self.st.lock();
        if st.map.as_ref().is_some_and(|c| c.epoch >= m.epoch) {
            return false;
        }
        st.map = Some(Arc::new(m));
        true
    }

    /// The newest map seen in etcd, if any.
    pub fn current_map(&self) -> Option<Arc<ClusterMap>> {
        self.st.lock().map.clone()
    }

    /// What must be written to `<prefix>/nodes/<id>` now: (record, lease id, generation).
    fn pending_registration(&self) -> Option<(NodeRecord, i64, u64)> {
        let v = self.lease.view();
        let mut st = self.st.lock();
        self.refresh(&mut st);
        let (addr, inc) = st.joined.clone()?;
        if inc <= st.fenced_upto || st.registered == Some((inc, v.generation)) {
            return None;
        }
        Some((
            NodeRecord {
                addr,
                incarnation: inc,
            },
            v.id,
            v.generation,
        ))
    }

    fn confirm_registered(&self, inc: u64, generation: u64) {
        let mut st = self.st.lock();
        if st.joined.as_ref().is_some_and(|(_, i)| *i == inc) && inc > st.fenced_upto {
            st.registered = Some((inc, generation));
        }
    }

    /// A registration under a lost lease no longer counts (acks stop until the record is
    /// put again under the new lease); an incarnation the map marks Failed is fenced.
    fn refresh(&self, st: &mut AgentState) {
        let g = self.lease.view().generation;
        if st.registered.is_some_and(|(_, gen)| gen != g) {
            st.registered = None;
        }
        if let (Some((_, inc)), Some(m)) = (&st.joined, &st.map) {
            let inc = *inc;
            if m.nodes
                .get(&self.node)
                .is_some_and(|n| n.incarnation == inc && n.state == NodeState::Failed)
            {
                st.fenced_upto = st.fenced_upto.max(inc);
                if st.registered.is_some_and(|(i, _)| i == inc) {
                    st.registered = None;
                }
            }
        }
    }

    fn listed_alive(st: &AgentState, node: NodeId, inc: u64) -> bool {
        st.map.as_ref().is_some_and(|m| {
            m.nodes
                .get(&node)
                .is_some_and(|n| n.incarnation == inc && n.state != NodeState::Failed)
        })
    }
}

impl ControlBackend for EtcdBackend {
    fn step(&self, input: Input) -> Vec<Action> {
        let v = self.lease.view();
        let mut st = self.st.lock();
        self.refresh(&mut st);
        let mut out = Vec::new();
        match input {
            Input::Join {
                node,
                addr,
                incarnation,
            } => {
                if node != self.node {
                    out.push(Action::Rejected(ControlError::Config(
                        "this agent serves another node id",
                    )));
                    return out;
                }
                if incarnation <= st.fenced_upto {
                    out.push(Action::Fenced {
                        to: node,
                        incarnation,
                    });
                    return out;
                }
                if st.joined.as_ref().is_none_or(|(_, i)| *i < incarnation) {
                    st.joined = Some((addr, incarnation));
                    self.wake.notify_one();
                }
                if let Some(m) = &st.map {
                    out.push(Action::SendMap {
                        to: node,
                        map: m.clone(),
                    });
                }
            }
            Input::Heartbeat {
                node,
                incarnation,
                epoch,
                sent_ms,
            } => {
                if node != self.node {
                    return out;
                }
                if incarnation <= st.fenced_upto {
                    out.push(Action::Fenced {
                        to: node,
                        incarnation,
                    });
                    return out;
                }
                let map_epoch = st.map.as_ref().map_or(Epoch(0), |m| m.epoch);
                if st.registered == Some((incarnation, v.generation))
                    && Self::listed_alive(&st, node, incarnation)
                {
                    out.push(Action::HeartbeatAck {
                        to: node,
                        incarnation,
                        epoch: map_epoch,
                        sent_ms: sent_ms.min(v.ok_sent_ms),
                    });
                }
                if let Some(m) = st.map.as_ref().filter(|m| m.epoch > epoch) {
                    out.push(Action::SendMap {
                        to: node,
                        map: m.clone(),
                    });
                }
            }
            Input::Tick => {
                if let Some(m) = st.map.clone() {
                    if m.epoch > st.pushed {
                        st.pushed = m.epoch;
                        out.push(Action::Publish(m));
                    }
                }
                if let Some((_, inc)) = st.joined.as_ref().filter(|(_, i)| *i <= st.fenced_upto) {
                    out.push(Action::Fenced {
                        to: self.node,
                        incarnation: *inc,
                    });
                }
            }
            // The leader decides drops from every node's report: forward (dropped when full).
            Input::Usage {
                node,
                incarnation,
                epoch,
                memgests,
                ec,
            } => {
                let _ = self.usage_tx.try_send(ToControl::Usage {
                    node: node.0,
                    incarnation,
                    epoch: epoch.0,
                    memgests: memgests
                        .into_iter()
                        .map(|(id, u)| (id.0, u.keys, u.bytes))
                        .collect(),
                    ec,
                });
            }
            // Drain phase 2 is the leader's decision: forward like usage reports.
            Input::Quiesced {
                node,
                incarnation,
                epoch,
            } => {
                let _ = self.usage_tx.try_send(ToControl::Quiesced {
                    node: node.0,
                    incarnation,
                    epoch: epoch.0,
                });
            }
            // A rebuilt handoff: the leader drops its record (forwarded like Quiesced).
            Input::HandoffDone {
                node,
                incarnation,
                first,
                last,
            } => {
                let _ = self.usage_tx.try_send(ToControl::HandoffDone {
                    node: node.0,
                    incarnation,
                    first,
                    last,
                });
            }
            // A move's copy before the switch: the leader starts its phase 1.
            Input::MoveCopied {
                node,
                incarnation,
                first,
                last,
                epoch,
            } => {
                let _ = self.usage_tx.try_send(ToControl::MoveCopied {
                    node: node.0,
                    incarnation,
                    first,
                    last,
                    epoch,
                });
            }
            // The written mark is the leader's to publish: forward like usage reports (the
            // core repeats an unanswered request).
            Input::MarkWritten { memgest } => {
                let _ = self
                    .usage_tx
                    .try_send(ToControl::MarkWritten { memgest: memgest.0 });
            }
            // Commands are the leader's (the service forwards them while a leader is known,
            // see `command_forward`).
            _ => out.push(Action::Rejected(ControlError::Config(NOT_LEADER))),
        }
        out
    }

    fn map(&self) -> Arc<ClusterMap> {
        self.current_map().unwrap_or_else(|| self.empty.clone())
    }

    fn command_forward(&self) -> Option<String> {
        self.leader_control()
    }
}

/// Follow `<prefix>/leader` so commands and usage reports know where the leader is. Runs
/// until aborted.
pub async fn follow_leader(backend: Arc<EtcdBackend>, mut client: etcd_client::Client, keys: Keys) {
    let mut backoff = Backoff::new();
    let mut log = RateLog::default();
    let key = keys.leader();
    let decode = |v: &[u8]| {
        decode_record::<LeaderRecord>(&key, v)
            .ok()
            .map(|r| r.control)
    };
    loop {
        let r = match call("get leader", client.get(key.clone(), None)).await {
            Ok(r) => r,
            Err(e) => {
                log.log(1000, || format!("leader follow: {e}"));
                backoff.wait().await;
                continue;
            }
        };
        backend.set_leader(r.kvs().first().and_then(|kv| decode(kv.value())));
        let rev = r.header().map_or(0, |h| h.revision());
        let opts = WatchOptions::new().with_start_revision(rev + 1);
        let mut ws = match call("watch leader", client.watch(key.clone(), Some(opts))).await {
            Ok(w) => w,
            Err(e) => {
                log.log(1000, || format!("leader follow: {e}"));
                backoff.wait().await;
                continue;
            }
        };
        backoff.reset();
        while let Ok(Some(resp)) = ws.message().await {
            if resp.canceled() {
                break;
            }
            for ev in resp.events() {
                match ev.event_type() {
                    EventType::Put => {
                        backend.set_leader(ev.kv().and_then(|kv| decode(kv.value())));
                    }
                    EventType::Delete => backend.set_leader(None),
                }
            }
        }
        backoff.wait().await;
    }
}

/// Send the node's usage reports to the leader's command port (one connection, re-opened
/// when the leader changes or a write fails). Runs until aborted.
pub async fn forward_usage(backend: Arc<EtcdBackend>) {
    let Some(mut rx) = backend.usage_rx.lock().take() else {
        return;
    };
    let mut conn: Option<(String, ringlet_link::tls::LinkStream)> = None;
    while let Some(m) = rx.recv().await {
        let Some(leader) = backend.leader_control() else {
            conn = None;
            continue;
        };
        if conn.as_ref().is_none_or(|(a, _)| *a != leader) {
            conn = match tokio::time::timeout(
                Duration::from_millis(500),
                // A member connection: with a cluster secret (and link TLS) a bare TCP
                // connection is refused by the leader, and the reports were lost.
                crate::connect_member(&leader),
            )
            .await
            {
                Ok(Ok(s)) => Some((leader, s)),
                _ => None, // this report is lost; the next one retries
            };
        }
        let Some((_, s)) = conn.as_mut() else {
            continue;
        };
        let Ok(f) = encode(&m) else { continue };
        if s.write_all(&f).await.is_err() || s.flush().await.is_err() {
            conn = None;
        }
    }
}

/// Write the node's record under the process lease whenever it changes (new incarnation,
/// new lease). Runs until aborted; each put is bounded, retries back off.
pub async fn register_loop(backend: Arc<EtcdBackend>, mut client: etcd_client::Client, keys: Keys) {
    let mut backoff = Backoff::new();
    let mut log = RateLog::default();
    loop {
        // Poll as well: a lease re-grant does not notify.
        let _ = tokio::time::timeout(Duration::from_millis(100), backend.wake.notified()).await;
        let Some((rec, lease, gen)) = backend.pending_registration() else {
            continue;
        };
        let Ok(json) = serde_json::to_vec(&rec) else {
            continue;
        };
        let put = client.put(
            keys.node(backend.node),
            json,
            Some(PutOptions::new().with_lease(lease)),
        );
        match call("put node record", put).await {
            Ok(_) => {
                backoff.reset();
                backend.confirm_registered(rec.incarnation, gen);
            }
            Err(e) => {
                log.log(1000, || format!("node {}: {e}", backend.node));
                backoff.wait().await;
            }
        }
    }
}

/// Follow `<prefix>/map`: read it, then watch it from the next revision; every newer valid
/// map goes to the backend (and so to the node). Runs until aborted.
pub async fn follow_map(backend: Arc<EtcdBackend>, client: etcd_client::Client, keys: Keys) {
    let mut backoff = Backoff::new();
    let mut log = RateLog::default();
    loop {
        let e = follow_map_once(&backend, client.clone(), &keys, &mut log, &mut backoff).await;
        log.log(1000, || format!("map watch: {e}"));
        backoff.wait().await;
    }
}

async fn follow_map_once(
    backend: &EtcdBackend,
    mut client: etcd_client::Client,
    keys: &Keys,
    log: &mut RateLog,
    backoff: &mut Backoff,
) -> EtcdError {
    let key = keys.map();
    let r = match call("get map", client.get(key.clone(), None)).await {
        Ok(r) => r,
        Err(e) => return e,
    };
    let rev = r.header().map_or(0, |h| h.revision());
    let mut take = |v: &[u8]| match decode_map(&key, v) {
        Ok(m) => {
            backend.offer_map(m);
        }
        Err(e) => log.log(1000, || e.to_string()),
    };
    if let Some(kv) = r.kvs().first() {
        take(kv.value());
    }
    let opts = WatchOptions::new().with_start_revision(rev + 1);
    let mut ws = match call("watch map", client.watch(key.clone(), Some(opts))).await {
        Ok(w) => w,
        Err(e) => return e,
    };
    backoff.reset();
    loop {
        match ws.message().await {
            Ok(Some(resp)) => {
                if resp.canceled() {
                    return EtcdError::WatchEnded(key);
                }
                for ev in resp.events() {
                    if ev.event_type() == EventType::Put {
                        if let Some(kv) = ev.kv() {
                            take(kv.value());
                        }
                    }
                }
            }
            Ok(None) => return EtcdError::WatchEnded(key),
            Err(err) => {
                return EtcdError::Etcd {
                    op: "watch map",
                    err,
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use ringlet_control::NodeInfo;

    fn map_with(epoch: u64, inc: u64, state: NodeState) -> ClusterMap {
        let mut m = ClusterMap {
            epoch: Epoch(epoch),
            ..ClusterMap::default()
        };
        m.nodes.insert(
            NodeId(1),
            NodeInfo {
                addr: "127.0.0.1:1@2".into(),
                state,
                incarnation: inc,
                roles_epoch: Epoch(0),
            },
        );
        m
    }

    fn hb(inc: u64, epoch: u64, sent_ms: u64) -> Input {
        Input::Heartbeat {
            node: NodeId(1),
            incarnation: inc,
            epoch: Epoch(epoch),
            sent_ms,
        }
    }

    fn join(inc: u64) -> Input {
        Input::Join {
            node: NodeId(1),
            addr: "127.0.0.1:1@2".into(),
            incarnation: inc,
        }
    }

    fn acks(out: &[Action]) -> Vec<u64> {
        out.iter()
            .filter_map(|a| match a {
                Action::HeartbeatAck { sent_ms, .. } => Some(*sent_ms),
                _ => None,
            })
            .collect()
    }

    fn fenced(out: &[Action]) -> bool {
        out.iter().any(|a| matches!(a, Action::Fenced { .. }))
    }

    /// Acks only for a registered, listed incarnation, never later than the last proven
    /// keepalive; a lost lease fences that incarnation; a new one registers again.
    #[test]
    fn acks_follow_the_etcd_lease() {
        let lease = NodeLease::detached(7, 2, 1000);
        let b = EtcdBackend::new(NodeId(1), lease.clone());
        // Not joined, not registered: no ack.
        assert!(acks(&b.step(hb(5, 0, 1100))).is_empty());
        let out = b.step(join(5));
        assert!(out.is_empty(), "no map yet: {out:?}");
        let (rec, id, generation) = b.pending_registration().unwrap();
        assert_eq!((rec.incarnation, id, generation), (5, 7, 1));
        b.confirm_registered(5, generation);
        assert!(b.pending_registration().is_none());
        // Registered but the map does not list it yet: no ack.
        assert!(acks(&b.step(hb(5, 0, 1100))).is_empty());
        assert!(b.offer_map(map_with(3, 5, NodeState::Spare)));
        assert!(!b.offer_map(map_with(3, 5, NodeState::Spare)), "same epoch");
        // The ack carries the keepalive's send time when the heartbeat is newer...
        let out = b.step(hb(5, 3, 1100));
        assert_eq!(acks(&out), vec![1000]);
        // ...and the heartbeat's own when it is older; a node behind gets the map.
        let out = b.step(hb(5, 1, 900));
        assert_eq!(acks(&out), vec![900]);
        assert!(out.iter().any(|a| matches!(a, Action::SendMap { .. })));
        // Tick pushes each newer map once.
        assert!(matches!(b.step(Input::Tick)[..], [Action::Publish(_)]));
        assert!(b.step(Input::Tick).is_empty());
        // Lease lost and replaced: no acks until the record is put again under the new
        // lease (same incarnation: fencing is the map's job, not the lease's).
        lease.replace(8, 2000);
        let out = b.step(hb(5, 3, 2100));
        assert!(acks(&out).is_empty() && !fenced(&out), "{out:?}");
        let (rec, id, generation) = b.pending_registration().unwrap();
        assert_eq!((rec.incarnation, id, generation), (5, 8, 2));
        b.confirm_registered(5, generation);
        assert_eq!(acks(&b.step(hb(5, 3, 2100))), vec![2000]);
        // The leader had seen the key vanish: the map fails incarnation 5, which is fenced
        // everywhere; the node rejoins as 6 and registers again.
        b.offer_map(map_with(4, 5, NodeState::Failed));
        assert!(fenced(&b.step(hb(5, 4, 2200))));
        assert!(fenced(&b.step(Input::Tick)));
        assert!(fenced(&b.step(join(5))));
        assert!(b.pending_registration().is_none());
        b.step(join(6));
        let (rec, id, generation) = b.pending_registration().unwrap();
        assert_eq!((rec.incarnation, id, generation), (6, 8, 2));
        b.confirm_registered(6, generation);
        assert!(!fenced(&b.step(Input::Tick)));
        assert!(b.offer_map(map_with(5, 6, NodeState::Spare)));
        assert_eq!(acks(&b.step(hb(6, 5, 2500))), vec![2000]);
    }

    #[test]
    fn a_map_that_fails_the_incarnation_fences_it() {
        let b = EtcdBackend::new(NodeId(1), NodeLease::detached(7, 2, 1000));
        b.step(join(5));
        b.confirm_registered(5, 1);
        b.offer_map(map_with(3, 5, NodeState::Active));
        assert_eq!(acks(&b.step(hb(5, 3, 1100))), vec![1000]);
        b.offer_map(map_with(4, 5, NodeState::Failed));
        let out = b.step(hb(5, 4, 1200));
        assert!(fenced(&out) && acks(&out).is_empty(), "{out:?}");
    }

    #[test]
    fn commands_and_other_nodes_are_refused() {
        let b = EtcdBackend::new(NodeId(1), NodeLease::detached(7, 2, 1000));
        let out = b.step(Input::Drain { node: NodeId(1) });
        assert!(matches!(out[..], [Action::Rejected(_)]));
        let out = b.step(Input::Join {
            node: NodeId(2),
            addr: "x".into(),
            incarnation: 1,
        });
        assert!(matches!(out[..], [Action::Rejected(_)]));
        assert!(b.step(hb(1, 0, 0)).is_empty());
        assert_eq!(b.map().epoch, Epoch(0));
    }
}
