//! The admin HTTP port of a cluster node (`--admin-port`; `ringlet up --nodes` gives node i
//! port + 10000 unless `--no-admin`). The HTTP side (bounds, one request per connection, the
//! bearer-token check) is the single node's (`ringlet_server::admin::serve`); this renders a
//! cluster node's pages:
//!
//! - `/metrics`: Prometheus text: the map epoch and this node's state in it, the replica
//!   core's counters (the INFO `# Ringlet` section), its engine, its clients, per-range
//!   request counters and per-class latency histograms (crate::load). Like the
//!   single node's, the recorder is the node's own (never installed globally) so several
//!   nodes in one process keep separate figures.
//! - `/api/status`: JSON of the cluster as this node sees it ([`Status`]): its map (epoch,
//!   nodes and their states, placement groups, slot ranges and their coordinators), the
//!   memgests with this node's own figures and, when the control plane answers in time, the
//!   cluster's (`MEMGEST INFO`'s), and this node's figures.
//! - `/` and `/status`: the same as an HTML page with no external assets. The server renders
//!   the data into the page (it works without JavaScript); an inline script then polls
//!   `/api/status` every second and re-renders it, so an open page shows a node going down.
//! - `/status.txt`: the former plain-text status (INFO and CLUSTER INFO).
//!
//! Every figure is one some node really has: other nodes' keys are not known here (only the
//! control plane's per-memgest totals are), so the nodes table shows what the map says about
//! them. Load is asked of every active node (`CLUSTER RINGLET-LOAD` on its client port, all
//! at once, bounded), so the heat map covers every range by its coordinator's count; the
//! event log is the control plane's (`ToControl::Events`). docs/design/status-page.md.

use super::Front;
use crate::load::Window;
use ringlet_control::{ClusterMap, MemgestReport, NodeState, StampedEvent};
use ringlet_server::admin::{Page, PageFuture};
use ringlet_types::NodeId;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Slot ranges listed at most (a map may split the 16384 slots into as many ranges; a
/// page of thousands of rows helps nobody, and this bounds the response). `ranges_total`
/// says how many there are.
const RANGES_SHOWN_MAX: usize = 2048;
/// How long a status request waits for the control plane's memgest figures before it answers
/// without them: the page polls every second and must stay live when the control plane is
/// slow or gone.
const CONTROL_FIGURES_WAIT: Duration = Duration::from_millis(1_000);
/// Seconds between the page's polls of `/api/status` (its inline script).
const POLL_MS: u32 = 1_000;
/// How long a status request waits for another node's load report (asked over its client
/// port, all nodes at once): a slow or dead node leaves its ranges without figures rather
/// than holding the page.
const PEER_LOAD_WAIT: Duration = Duration::from_millis(500);
/// Largest load report accepted from a peer (its JSON: one entry per range it coordinates).
const PEER_LOAD_BYTES_MAX: usize = 4 << 20;
/// Events the page shows (the newest).
const EVENTS_SHOWN_MAX: usize = 200;

/// `/api/status`: the cluster as this node sees it. Field names are the JSON keys.
#[derive(Serialize)]
struct Status {
    /// This node's id.
    node: u32,
    /// Epoch of this node's map (0: none yet).
    epoch: u64,
    /// `ok` once the map is bootstrapped (as CLUSTER INFO's `cluster_state`), else `fail`.
    cluster_state: &'static str,
    /// Placement groups: `s` data then `d` redundant nodes each; `None` before bootstrap.
    placement: Option<PlacementView>,
    nodes: Vec<NodeView>,
    /// Slot ranges in slot order, at most [`RANGES_SHOWN_MAX`].
    ranges: Vec<RangeView>,
    ranges_total: usize,
    memgests: Vec<MemgestView>,
    /// Why the memgests have no cluster figures (the control plane did not answer).
    memgest_cluster_error: Option<String>,
    this_node: ThisNode,
    /// Load and latency: this node's last windows and every data node's latest figures.
    load: LoadView,
    /// The control plane's event log, oldest first (at most [`EVENTS_SHOWN_MAX`]).
    events: Vec<StampedEvent>,
    /// Why there are no events (the control plane did not answer).
    events_error: Option<String>,
}

/// A node's load report: `CLUSTER RINGLET-LOAD` on its client port (JSON), which other nodes'
/// status pages ask for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct LoadReport {
    node: u32,
    epoch: u64,
    /// The last sampling window (`None` in the node's first second).
    window: Option<Window>,
    /// The ranges this node coordinates in its map, with what it served of them.
    ranges: Vec<RangeLoad>,
}

/// A node's cumulative per-slot counts: `CLUSTER RINGLET-LOAD SLOTS` (JSON). At most one
/// entry per slot (16,384 × ~16 bytes of JSON at most).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SlotLoadReport {
    pub node: u32,
    pub epoch: u64,
    /// (slot, reads + writes served since the node started), slots with none left out.
    pub slots: Vec<(u16, u64)>,
    /// (slot, bytes stored in the engine for it), slots with none left out (`ringlet node
    /// rebalance --by bytes`). Absent from an older node's report.
    #[serde(default)]
    pub bytes: Vec<(u16, u64)>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct RangeLoad {
    first: u16,
    last: u16,
    reads_per_sec: f64,
    writes_per_sec: f64,
    reads_total: u64,
    writes_total: u64,
}

#[derive(Serialize)]
struct LoadView {
    /// Length of a sampling window.
    window_ms: u64,
    /// This node's windows, oldest first (the charts).
    history: Vec<Window>,
    /// Per active node: its latest window, or why it has none.
    nodes: Vec<NodeLoad>,
}

#[derive(Serialize)]
struct NodeLoad {
    id: u32,
    window: Option<Window>,
    error: Option<String>,
}

#[derive(Serialize)]
struct PlacementView {
    s: u8,
    d: u8,
    groups: Vec<Vec<u32>>,
}

#[derive(Serialize)]
struct NodeView {
    id: u32,
    /// `ip:client_port@peer_port`, as in the map.
    addr: String,
    state: &'static str,
    incarnation: u64,
    /// Epoch at which it took its current PG positions.
    roles_epoch: u64,
    /// Asked to drain, still holding its roles (drain phase 1).
    leaving: bool,
    /// Placement groups it holds a position in.
    pgs: Vec<u32>,
    /// Slots whose coordinator it is.
    slots_coordinated: u32,
    /// Whether this is the node serving the page.
    this: bool,
}

#[derive(Serialize)]
struct RangeView {
    first: u16,
    last: u16,
    slots: u32,
    pg: u32,
    coordinator: Option<u32>,
    coordinator_state: Option<&'static str>,
    /// Coordinator first, then the rest of the PG in cohort order.
    cohort: Vec<u32>,
    /// Keys read and written per second in the last window, as the coordinator counted them
    /// (`None`: its report did not arrive).
    reads_per_sec: Option<f64>,
    writes_per_sec: Option<f64>,
}

#[derive(Serialize)]
struct MemgestView {
    id: u16,
    name: String,
    /// `none`, `rep:R` or `ec:K+M`.
    kind: String,
    default: bool,
    closing: bool,
    evictable: bool,
    /// Entries of this memgest this node stores (its keys and the copies it keeps for others).
    this_node_entries: u64,
    /// Engine bytes of those entries.
    this_node_bytes: u64,
    /// The control plane's figures (`MEMGEST INFO`), if it answered in time.
    cluster: Option<MemgestCluster>,
}

#[derive(Serialize)]
struct MemgestCluster {
    /// Estimated distinct keys (`stored_keys / copies`).
    keys: u64,
    /// Keys over all nodes, every copy counted.
    stored_keys: u64,
    stored_bytes: u64,
    failures_tolerated: u8,
    nodes_reporting: u32,
    nodes_holding: u32,
}

/// This node's own figures: the ones `/metrics` and INFO show.
#[derive(Serialize)]
struct ThisNode {
    id: u32,
    state: Option<&'static str>,
    /// Keys it coordinates (DBSIZE).
    keys: u64,
    /// Every entry it stores: its keys, replica copies, ec metadata.
    stored_entries: u64,
    connected_clients: usize,
    used_memory_bytes: u64,
    data_bytes: u64,
    maxmemory_bytes: u64,
    expired_keys: u64,
    evicted_keys: u64,
    maps_applied: u64,
    fenced: u64,
    possible_loss: u64,
    ambiguous_resolved: u64,
    events_refused: u64,
    heartbeats_for_busy_driver: u64,
    ec_arenas_not_ready: u64,
}

fn state_name(s: NodeState) -> &'static str {
    match s {
        NodeState::Active => "active",
        NodeState::Spare => "spare",
        NodeState::Draining => "draining",
        NodeState::Failed => "failed",
    }
}

impl Front {
    /// Everything `/api/status` and the HTML page show. Asks the control plane for the
    /// memgests' cluster figures (at most [`CONTROL_FIGURES_WAIT`]); the rest is local.
    async fn status_view(&self) -> Status {
        let (reports, events, peers) = tokio::join!(
            tokio::time::timeout(CONTROL_FIGURES_WAIT, self.memgest_reports(None, None)),
            tokio::time::timeout(
                CONTROL_FIGURES_WAIT,
                self.control(crate::control::ToControl::Events { after: 0 })
            ),
            self.peer_load_reports(),
        );
        let (events, events_error) = match events {
            Ok(Ok(crate::control::FromControl::Events(mut v))) => {
                let skip = v.len().saturating_sub(EVENTS_SHOWN_MAX);
                v.drain(..skip);
                (v, None)
            }
            Ok(Ok(other)) => (Vec::new(), Some(format!("unexpected reply {other:?}"))),
            Ok(Err(ringlet_codec::resp::Reply::Error(e))) => {
                (Vec::new(), Some(String::from_utf8_lossy(&e).into_owned()))
            }
            Ok(Err(other)) => (Vec::new(), Some(format!("{other:?}"))),
            Err(_) => (
                Vec::new(),
                Some(format!(
                    "the control plane did not answer within {} ms",
                    CONTROL_FIGURES_WAIT.as_millis()
                )),
            ),
        };
        let reports: Result<Vec<MemgestReport>, String> = match reports {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(ringlet_codec::resp::Reply::Error(e))) => {
                Err(String::from_utf8_lossy(&e).into_owned())
            }
            Ok(Err(other)) => Err(format!("{other:?}")),
            Err(_) => Err(format!(
                "the control plane did not answer within {} ms",
                CONTROL_FIGURES_WAIT.as_millis()
            )),
        };
        // Separate statements: the engine lock is not reentrant (see `Front::info`).
        let e = self.node.engine().lock().stats();
        let own = self.owned_key_count();
        let map = self.node.map();
        let me = self.node.id();
        let st = self.node.stats();
        let this_node = ThisNode {
            id: me.0,
            state: map.as_ref().and_then(|m| m.node_state(me)).map(state_name),
            keys: own,
            stored_entries: e.keys,
            connected_clients: self.clients.len(),
            used_memory_bytes: e.committed_bytes + e.index_bytes,
            data_bytes: e.used_bytes,
            maxmemory_bytes: e.memory_bytes_max,
            expired_keys: e.expirations,
            evicted_keys: e.evictions,
            maps_applied: st.maps_applied.load(Relaxed),
            fenced: st.fenced.load(Relaxed),
            possible_loss: st.possible_loss.load(Relaxed),
            ambiguous_resolved: st.ambiguous_resolved.load(Relaxed),
            events_refused: st.events_refused.load(Relaxed),
            heartbeats_for_busy_driver: st.heartbeats_for_busy_driver.load(Relaxed),
            ec_arenas_not_ready: st.ec_arenas_not_ready.load(Relaxed),
        };
        let empty = ClusterMap::default();
        let m: &ClusterMap = map.as_deref().unwrap_or(&empty);
        let p = m.placement.as_ref();
        let mut coordinated = std::collections::BTreeMap::<NodeId, u32>::new();
        let mut ranges = Vec::new();
        for r in p.map(|p| p.ranges.as_slice()).unwrap_or_default() {
            let c = p.and_then(|p| p.range_coordinator(r));
            if let Some(c) = c {
                *coordinated.entry(c).or_default() += r.len();
            }
            if ranges.len() < RANGES_SHOWN_MAX {
                let (reads_per_sec, writes_per_sec) = range_rates(&peers, r.first, r.last, c);
                ranges.push(RangeView {
                    reads_per_sec,
                    writes_per_sec,
                    first: r.first,
                    last: r.last,
                    slots: r.len(),
                    pg: r.pg,
                    coordinator: c.map(|c| c.0),
                    coordinator_state: c.and_then(|c| m.node_state(c)).map(state_name),
                    cohort: p
                        .map(|p| p.range_cohort(r).iter().map(|n| n.0).collect())
                        .unwrap_or_default(),
                });
            }
        }
        let nodes = m
            .nodes
            .iter()
            .map(|(id, n)| NodeView {
                id: id.0,
                addr: n.addr.clone(),
                state: state_name(n.state),
                incarnation: n.incarnation,
                roles_epoch: n.roles_epoch.0,
                leaving: m.leaving.contains_key(id),
                pgs: p
                    .map(|p| {
                        (0u32..)
                            .zip(&p.groups)
                            .filter(|(_, g)| g.contains(id))
                            .map(|(i, _)| i)
                            .collect()
                    })
                    .unwrap_or_default(),
                slots_coordinated: coordinated.get(id).copied().unwrap_or(0),
                this: *id == me,
            })
            .collect();
        let memgests = m
            .memgests
            .iter()
            .map(|(id, g)| {
                let local = e.per_memgest.get(id).copied().unwrap_or_default();
                let cluster = reports.as_ref().ok().and_then(|rs| {
                    rs.iter().find(|r| r.id == id.0).map(|r| MemgestCluster {
                        keys: r.keys,
                        stored_keys: r.stored_keys,
                        stored_bytes: r.stored_bytes,
                        failures_tolerated: r.failures_tolerated,
                        nodes_reporting: r.nodes_reporting,
                        nodes_holding: r.nodes_holding,
                    })
                });
                MemgestView {
                    id: id.0,
                    name: g.name.clone(),
                    kind: g.kind.to_string(),
                    default: *id == m.default_memgest,
                    closing: g.closing,
                    evictable: g.evictable,
                    this_node_entries: local.keys,
                    this_node_bytes: local.bytes,
                    cluster,
                }
            })
            .collect();
        Status {
            node: me.0,
            epoch: m.epoch.0,
            cluster_state: if p.is_some() { "ok" } else { "fail" },
            placement: p.map(|p| PlacementView {
                s: p.s,
                d: p.d,
                groups: p
                    .groups
                    .iter()
                    .map(|g| g.iter().map(|n| n.0).collect())
                    .collect(),
            }),
            nodes,
            ranges_total: p.map_or(0, |p| p.ranges.len()),
            ranges,
            memgests,
            memgest_cluster_error: reports.err(),
            this_node,
            load: LoadView {
                window_ms: crate::load::SAMPLE_MS,
                history: self.load().history(),
                nodes: peers
                    .iter()
                    .map(|(id, r)| match r {
                        Ok(r) => NodeLoad {
                            id: *id,
                            window: r.window.clone(),
                            error: None,
                        },
                        Err(e) => NodeLoad {
                            id: *id,
                            window: None,
                            error: Some(e.clone()),
                        },
                    })
                    .collect(),
            },
            events,
            events_error,
        }
    }

    /// This node's load report (`CLUSTER RINGLET-LOAD`): the last window and the ranges it
    /// coordinates in its map.
    pub(crate) fn load_report(&self) -> LoadReport {
        let map = self.node.map();
        let me = self.node.id();
        let load = self.load();
        let ranges = map
            .as_ref()
            .and_then(|m| m.placement.as_ref())
            .map(|p| {
                p.ranges
                    .iter()
                    .filter(|r| p.range_coordinator(r) == Some(me))
                    .map(|r| {
                        let (reads_per_sec, writes_per_sec) = load.slot_rates(r.first, r.last);
                        let (reads_total, writes_total) = load.slot_totals(r.first, r.last);
                        RangeLoad {
                            first: r.first,
                            last: r.last,
                            reads_per_sec,
                            writes_per_sec,
                            reads_total,
                            writes_total,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        LoadReport {
            node: me.0,
            epoch: map.as_ref().map_or(0, |m| m.epoch.0),
            window: load.history().pop(),
            ranges,
        }
    }

    /// This node's cumulative per-slot counts (`CLUSTER RINGLET-LOAD SLOTS`): every slot it
    /// coordinates in its map with at least one served read or write since it started. The
    /// load balancer asks every node twice, a window apart, and diffs.
    pub(crate) fn slot_load_report(&self) -> SlotLoadReport {
        let map = self.node.map();
        let me = self.node.id();
        let load = self.load();
        let mut slots = Vec::new();
        let mut bytes = Vec::new();
        if let Some(p) = map.as_ref().and_then(|m| m.placement.as_ref()) {
            for r in p
                .ranges
                .iter()
                .filter(|r| p.range_coordinator(r) == Some(me))
            {
                for s in r.first..=r.last {
                    let (reads, writes) = load.slot_totals(s, s);
                    if reads + writes > 0 {
                        slots.push((s, reads + writes));
                    }
                }
            }
            let engine = self.node().engine().lock();
            for r in p
                .ranges
                .iter()
                .filter(|r| p.range_coordinator(r) == Some(me))
            {
                bytes.extend(
                    (r.first..=r.last)
                        .map(|s| (s, engine.slot_bytes(s)))
                        .filter(|(_, b)| *b > 0),
                );
            }
        }
        SlotLoadReport {
            node: me.0,
            epoch: map.as_ref().map_or(0, |m| m.epoch.0),
            slots,
            bytes,
        }
    }

    /// Every active node's load report, this node's own included, by node id. Other nodes
    /// are asked over their client ports at once (`CLUSTER RINGLET-LOAD`, with the cluster's
    /// password and TLS), each bounded by [`PEER_LOAD_WAIT`].
    async fn peer_load_reports(&self) -> Vec<(u32, Result<LoadReport, String>)> {
        let me = self.node.id();
        let mut out = vec![(me.0, Ok(self.load_report()))];
        let Some(map) = self.node.map() else {
            return out;
        };
        let mut tasks = tokio::task::JoinSet::new();
        for (id, n) in &map.nodes {
            if *id == me || n.state != NodeState::Active {
                continue;
            }
            let id = id.0;
            let Some(addr) = crate::node::client_addr(&n.addr) else {
                out.push((id, Err("no client address in the map".into())));
                continue;
            };
            let password = self.requirepass.clone();
            let tls = self.tls_connector.clone();
            tasks.spawn(async move {
                let asked = super::remote_call(
                    addr,
                    &[b"CLUSTER", b"RINGLET-LOAD"],
                    password.as_deref(),
                    tls.as_ref(),
                    PEER_LOAD_BYTES_MAX,
                );
                let r = match tokio::time::timeout(PEER_LOAD_WAIT, asked).await {
                    Err(_) => Err(format!(
                        "did not answer within {} ms",
                        PEER_LOAD_WAIT.as_millis()
                    )),
                    Ok(None) => Err("unreachable".to_string()),
                    Ok(Some(ringlet_codec::resp::Reply::Bulk(b))) => {
                        serde_json::from_slice::<LoadReport>(&b).map_err(|e| e.to_string())
                    }
                    Ok(Some(other)) => Err(format!("unexpected reply {other:?}")),
                };
                (id, r)
            });
        }
        while let Some(r) = tasks.join_next().await {
            if let Ok(r) = r {
                out.push(r);
            }
        }
        out.sort_by_key(|(id, _)| *id);
        out
    }
}

/// A range's reads and writes per second: from its coordinator's report, the entry for the
/// same span (or the one holding its first slot, when the coordinator's map splits ranges
/// differently). `None` when the coordinator's report is missing.
fn range_rates(
    reports: &[(u32, Result<LoadReport, String>)],
    first: u16,
    last: u16,
    coordinator: Option<NodeId>,
) -> (Option<f64>, Option<f64>) {
    let Some(Ok(rep)) = coordinator
        .and_then(|c| reports.iter().find(|(id, _)| *id == c.0))
        .map(|(_, r)| r)
    else {
        return (None, None);
    };
    let hit = rep
        .ranges
        .iter()
        .find(|x| x.first == first && x.last == last)
        .or_else(|| {
            rep.ranges
                .iter()
                .find(|x| x.first <= first && first <= x.last)
        });
    match hit {
        Some(x) => (Some(x.reads_per_sec), Some(x.writes_per_sec)),
        None => (Some(0.0), Some(0.0)),
    }
}

impl ringlet_server::admin::AdminPages for Front {
    fn metrics(&self) -> String {
        let map = self.map();
        let st = self.node.stats();
        // Separate statements: the engine lock is not reentrant (see `Front::info`).
        let e = self.node.engine().lock().stats();
        let own = self.owned_key_count();
        let clients = self.clients.len();
        let state = map.as_ref().and_then(|m| m.node_state(self.node.id()));
        metrics::with_local_recorder(&self.recorder, || {
            metrics::gauge!("ringlet_cluster_epoch")
                .set(map.as_ref().map_or(0, |m| m.epoch.0) as f64);
            for (name, s) in [
                ("active", NodeState::Active),
                ("spare", NodeState::Spare),
                ("draining", NodeState::Draining),
                ("failed", NodeState::Failed),
            ] {
                metrics::gauge!("ringlet_node_state", "state" => name).set(if state == Some(s) {
                    1.0
                } else {
                    0.0
                });
            }
            metrics::counter!("ringlet_maps_applied_total").absolute(st.maps_applied.load(Relaxed));
            metrics::counter!("ringlet_fenced_total").absolute(st.fenced.load(Relaxed));
            metrics::counter!("ringlet_possible_loss_total")
                .absolute(st.possible_loss.load(Relaxed));
            metrics::counter!("ringlet_ambiguous_resolved_total")
                .absolute(st.ambiguous_resolved.load(Relaxed));
            metrics::counter!("ringlet_fast_reads_total").absolute(st.fast_reads.load(Relaxed));
            metrics::counter!("ringlet_fast_read_fallbacks_total")
                .absolute(st.fast_read_fallbacks.load(Relaxed));
            metrics::counter!("ringlet_core_steps_inline_total")
                .absolute(st.steps_inline.load(Relaxed));
            metrics::counter!("ringlet_core_steps_queued_total")
                .absolute(st.steps_queued.load(Relaxed));
            // Where slow requests wait (INFO's core_steps_over_* / core_gets_* /
            // front_retries_*; docs/design/cluster-resharding.md, "Session 17").
            for (c, m) in st.slow_steps.iter().zip(["1ms", "5ms", "20ms"]) {
                metrics::counter!("ringlet_core_slow_steps_total", "over" => m)
                    .absolute(c.load(Relaxed));
            }
            for k in crate::node::StepKind::ALL {
                metrics::counter!("ringlet_core_steps_over_5ms_total", "kind" => k.name())
                    .absolute(st.slow_steps_by_kind[k as usize].load(Relaxed));
            }
            metrics::counter!("ringlet_core_gets_total").absolute(st.core_gets.load(Relaxed));
            metrics::counter!("ringlet_core_gets_queued_total")
                .absolute(st.core_gets_queued.load(Relaxed));
            for (c, m) in st.core_gets_slow.iter().zip(["1ms", "5ms", "20ms"]) {
                metrics::counter!("ringlet_core_slow_gets_total", "over" => m)
                    .absolute(c.load(Relaxed));
            }
            for r in crate::node::FrontRetry::ALL {
                metrics::counter!("ringlet_front_retries_total", "reason" => r.name())
                    .absolute(st.front_retries[r as usize].load(Relaxed));
            }
            if let Some(x) = self.node.shm_stats() {
                metrics::gauge!("ringlet_shm_clients").set(x.connections_open as f64);
                metrics::counter!("ringlet_shm_access_hashes_total").absolute(x.access_hashes);
                metrics::gauge!("ringlet_shm_keys_in_flight")
                    .set(st.shm_keys_in_flight.load(Relaxed) as f64);
            }
            metrics::counter!("ringlet_reshard_handoffs_completed_total")
                .absolute(st.handoffs_completed.load(Relaxed));
            metrics::counter!("ringlet_reshard_keys_purged_total")
                .absolute(st.handoff_keys_purged.load(Relaxed));
            metrics::counter!("ringlet_reshard_bytes_pulled_total")
                .absolute(st.handoff_bytes_pulled.load(Relaxed));
            metrics::counter!("ringlet_reshard_keys_pulled_total")
                .absolute(st.handoff_keys_pulled.load(Relaxed));
            metrics::gauge!("ringlet_reshard_last_move_bytes")
                .set(st.last_handoff_bytes.load(Relaxed) as f64);
            metrics::counter!("ringlet_reshard_moves_milliseconds_total")
                .absolute(st.handoff_ms.load(Relaxed));
            metrics::gauge!("ringlet_reshard_last_move_seconds")
                .set(st.last_handoff_ms.load(Relaxed) as f64 / 1000.0);
            metrics::counter!("ringlet_events_refused_total")
                .absolute(st.events_refused.load(Relaxed));
            metrics::gauge!("ringlet_ec_arenas_not_ready")
                .set(st.ec_arenas_not_ready.load(Relaxed) as f64);
            metrics::gauge!("ringlet_connected_clients").set(clients as f64);
            metrics::gauge!("ringlet_keys").set(own as f64);
            metrics::gauge!("ringlet_stored_entries").set(e.keys as f64);
            metrics::gauge!("ringlet_used_memory_bytes")
                .set((e.committed_bytes + e.index_bytes) as f64);
            metrics::gauge!("ringlet_data_bytes").set(e.used_bytes as f64);
            metrics::gauge!("ringlet_maxmemory_bytes").set(e.memory_bytes_max as f64);
            metrics::counter!("ringlet_expired_keys_total").absolute(e.expirations);
            metrics::counter!("ringlet_evicted_keys_total").absolute(e.evictions);
            metrics::gauge!("ringlet_index_load_factor").set(e.index_load_factor);
            for (m, u) in &e.per_memgest {
                let id = m.0.to_string();
                metrics::gauge!("ringlet_memgest_keys", "memgest" => id.clone()).set(u.keys as f64);
                metrics::gauge!("ringlet_memgest_bytes", "memgest" => id).set(u.bytes as f64);
            }
        });
        let mut text = self.recorder.handle().render();
        // Per slot range and per command: written by hand (the recorder has no histogram of
        // pre-counted buckets, and the range label set follows the map).
        text.push_str(&self.load().prometheus());
        let rep = self.load_report();
        text.push_str(
            "# HELP ringlet_slot_range_reads_total Keys read in a slot range this node coordinates.\n\
             # TYPE ringlet_slot_range_reads_total counter\n",
        );
        for r in &rep.ranges {
            let _ = writeln!(
                text,
                "ringlet_slot_range_reads_total{{first=\"{}\",last=\"{}\"}} {}",
                r.first, r.last, r.reads_total
            );
        }
        text.push_str(
            "# HELP ringlet_slot_range_writes_total Keys written in a slot range this node coordinates.\n\
             # TYPE ringlet_slot_range_writes_total counter\n",
        );
        for r in &rep.ranges {
            let _ = writeln!(
                text,
                "ringlet_slot_range_writes_total{{first=\"{}\",last=\"{}\"}} {}",
                r.first, r.last, r.writes_total
            );
        }
        text.push_str(
            "# HELP ringlet_slot_range_ops_per_second Keys read or written per second in the last window.\n\
             # TYPE ringlet_slot_range_ops_per_second gauge\n",
        );
        for r in &rep.ranges {
            for (op, v) in [("read", r.reads_per_sec), ("write", r.writes_per_sec)] {
                let _ = writeln!(
                    text,
                    "ringlet_slot_range_ops_per_second{{first=\"{}\",last=\"{}\",op=\"{op}\"}} {v}",
                    r.first, r.last
                );
            }
        }
        self.replication_metrics(&mut text);
        text
    }

    fn status(&self) -> String {
        let map = self.node.map();
        format!(
            "{}\n# CLUSTER INFO\n{}",
            self.info(&[]),
            super::cluster_info(map.as_deref(), self.node.id())
        )
        .replace("\r\n", "\n")
    }

    fn page<'a>(&'a self, path: &'a str) -> PageFuture<'a> {
        Box::pin(async move {
            match path {
                "/api/status" => {
                    let s = self.status_view().await;
                    Some(Page {
                        content_type: "application/json",
                        // Serializing these plain structs cannot fail.
                        body: serde_json::to_string(&s).unwrap_or_default(),
                    })
                }
                "/" | "/status" => {
                    let s = self.status_view().await;
                    let text = ringlet_server::admin::AdminPages::status(self);
                    Some(Page {
                        content_type: "text/html; charset=utf-8",
                        body: render_html(&s, &text),
                    })
                }
                "/status.txt" => Some(Page {
                    content_type: "text/plain; charset=utf-8",
                    body: ringlet_server::admin::AdminPages::status(self),
                }),
                _ => None,
            }
        })
    }
}

impl Front {
    /// The replica core's replication, repair and ec counters and the peer transport's
    /// frame counters, in Prometheus text (written by hand: one HELP line each, and the
    /// per-peer backlog labelled by peer). The core's counters are read under its lock,
    /// once per scrape.
    fn replication_metrics(&self, text: &mut String) {
        fn metric(text: &mut String, name: &str, kind: &str, help: &str, v: u64) {
            let _ = writeln!(
                text,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
        if let Some(r) = self.node.replication_info() {
            let st = &r.stats;
            for (name, v, help) in [
                (
                    "writes_committed",
                    st.writes_committed,
                    "Writes this node coordinated that met their memgest's commit rule.",
                ),
                (
                    "rebuilds_completed",
                    st.rebuilds_completed,
                    "Slot ranges rebuilt here from peers (a new or returning replica).",
                ),
                (
                    "syncs_completed",
                    st.syncs_completed,
                    "Catch-up syncs of a replica finished.",
                ),
                (
                    "repair_pushed",
                    st.repair_pushed,
                    "Entries repair sent to a replica that lacked them.",
                ),
                (
                    "repair_fetched",
                    st.repair_fetched,
                    "Entries repair fetched from a replica holding a newer version.",
                ),
                (
                    "repair_retired",
                    st.repair_retired,
                    "Stale entries repair removed.",
                ),
                (
                    "repair_key_lists",
                    st.repair_key_lists,
                    "Key-list pages repair compared with a replica (up to 4,096 keys scanned on each node).",
                ),
                (
                    "replicate_refused",
                    st.replicate_refused,
                    "Replication requests refused (stale epoch or not a replica of the key).",
                ),
                (
                    "writes_out_of_memory",
                    st.writes_out_of_memory,
                    "Writes refused with OutOfMemory here or for lack of room on replicas.",
                ),
                (
                    "store_refused",
                    st.store_refused,
                    "Replicated entries this node could not store for lack of room.",
                ),
                (
                    "commit_apply_refused",
                    st.commit_apply_refused,
                    "Committed writes whose local apply failed (answered Ambiguous).",
                ),
                (
                    "ec_takeovers",
                    st.ec_takeovers,
                    "ec coordinator takeovers whose metadata was rebuilt from parity holders.",
                ),
                (
                    "ec_recoveries_completed",
                    st.ec_recoveries_completed,
                    "ec arenas fully decoded after a takeover.",
                ),
                (
                    "ec_decodes_on_demand",
                    st.ec_decodes_on_demand,
                    "ec reads that decoded their value on demand.",
                ),
                (
                    "ec_decoded_bytes",
                    st.ec_decoded_bytes,
                    "ec bytes decoded (on demand and in the background).",
                ),
                (
                    "ec_holder_syncs",
                    st.ec_holder_syncs,
                    "ec parity holders that finished a (re)sync.",
                ),
                (
                    "ec_holder_resyncs",
                    st.ec_holder_resyncs,
                    "ec parity holders that found their copy diverged and reset.",
                ),
                (
                    "ec_kept_released",
                    st.ec_kept_released,
                    "ec stores (parity or arena) this draining node kept for a position it gave up, dropped when the new holder released them.",
                ),
                (
                    "move_copies_completed",
                    st.move_copies_completed,
                    "Slot moves whose copy phase finished at this target.",
                ),
                (
                    "move_copies_aborted",
                    st.move_copies_aborted,
                    "Slot move copies dropped because the move was called off.",
                ),
            ] {
                metric(
                    text,
                    &format!("ringlet_replica_{name}_total"),
                    "counter",
                    help,
                    v,
                );
            }
            metric(
                text,
                "ringlet_replica_writes_pending",
                "gauge",
                "Writes this node coordinates that are not yet committed.",
                r.pending as u64,
            );
            for (what, help) in [("writes", "Writes"), ("bytes", "Bytes")] {
                let name = format!("ringlet_replica_peer_unacked_{what}");
                let _ = writeln!(
                    text,
                    "# HELP {name} {help} sent to a peer and not yet acknowledged.\n# TYPE {name} gauge"
                );
                for &(peer, writes, bytes) in &r.per_peer {
                    let v = if what == "writes" {
                        u64::from(writes)
                    } else {
                        bytes
                    };
                    let _ = writeln!(text, "{name}{{peer=\"{}\"}} {v}", peer.0);
                }
            }
        }
        let t = self.node.transport().stats();
        for (name, v, help) in [
            ("frames_sent", &t.frames_sent, "Frames sent to peers."),
            (
                "frames_sent_direct",
                &t.frames_sent_direct,
                "Of the frames sent, those written by the sender straight to an idle link.",
            ),
            (
                "frames_received",
                &t.frames_received,
                "Frames received from peers.",
            ),
            (
                "frames_dropped_full",
                &t.frames_dropped_full,
                "Frames dropped because a peer link's queue was full.",
            ),
            (
                "frames_no_route",
                &t.frames_no_route,
                "Frames for a peer with no known address.",
            ),
            ("connects", &t.connects, "Peer links established."),
            (
                "connect_failures",
                &t.connect_failures,
                "Peer connection attempts that failed.",
            ),
            (
                "bad_frames",
                &t.bad_frames,
                "Malformed frames received (the link was closed).",
            ),
            (
                "auth_failures",
                &t.auth_failures,
                "Peer links refused for a missing or wrong cluster-secret proof.",
            ),
        ] {
            metric(
                text,
                &format!("ringlet_transport_{name}_total"),
                "counter",
                help,
                v.load(Relaxed),
            );
        }
    }
}

/// `s` with the five HTML metacharacters escaped: safe in element content and in quoted
/// attribute values. Everything dynamic on the page goes through here (memgest names and
/// node addresses come from users and the network).
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// [`ThisNode`]'s fields as (JSON key, value) in declaration order: serde writes them in
/// this order, and the script renders `Object.keys` of the JSON, so both renderings agree.
fn this_node_fields(t: &ThisNode) -> Vec<(&'static str, String)> {
    vec![
        ("id", t.id.to_string()),
        ("state", t.state.unwrap_or("-").to_string()),
        ("keys", t.keys.to_string()),
        ("stored_entries", t.stored_entries.to_string()),
        ("connected_clients", t.connected_clients.to_string()),
        ("used_memory_bytes", t.used_memory_bytes.to_string()),
        ("data_bytes", t.data_bytes.to_string()),
        ("maxmemory_bytes", t.maxmemory_bytes.to_string()),
        ("expired_keys", t.expired_keys.to_string()),
        ("evicted_keys", t.evicted_keys.to_string()),
        ("maps_applied", t.maps_applied.to_string()),
        ("fenced", t.fenced.to_string()),
        ("possible_loss", t.possible_loss.to_string()),
        ("ambiguous_resolved", t.ambiguous_resolved.to_string()),
        ("events_refused", t.events_refused.to_string()),
        (
            "heartbeats_for_busy_driver",
            t.heartbeats_for_busy_driver.to_string(),
        ),
        ("ec_arenas_not_ready", t.ec_arenas_not_ready.to_string()),
    ]
}

/// Inline CSS: the page loads nothing else.
const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}\
th{background:#f3f3f3}td.num{text-align:right}\
tr.state-failed td.state,.seg.state-failed{background:#e74c3c;color:#fff}\
tr.state-active td.state,.seg.state-active{background:#2ecc71}\
tr.state-spare td.state{background:#d6eaf8}\
tr.state-draining td.state,.seg.state-draining{background:#f5b041}\
#slotbar{display:flex;width:100%;max-width:1100px;height:28px;border:1px solid #999}\
.seg{overflow:hidden;white-space:nowrap;font-size:11px;text-align:center;line-height:28px;\
border-right:1px solid #fff;box-sizing:border-box}\
#refresh.stale{color:#c0392b;font-weight:bold}\
#heatmap{display:flex;width:100%;max-width:1100px;height:36px;border:1px solid #999}\
#heatmap .cell{box-sizing:border-box;border-right:1px solid #fff}\
.nodata{background:repeating-linear-gradient(45deg,#ddd,#ddd 3px,#fff 3px,#fff 6px)}\
svg.chart{border:1px solid #ccc;background:#fcfcfc;margin-right:1em}\
#events td:first-child{white-space:nowrap}\
tr.ev-node_failed td,tr.ev-spare_promoted td{color:#922b21}";

/// The inline script: poll `/api/status`, re-render the tables from its JSON with DOM calls
/// (`textContent`, so nothing from the JSON is parsed as HTML), say when a refresh fails.
/// `body[data-refreshes]` counts successful refreshes (a test checks the script ran).
const SCRIPT: &str = r##"(function(){"use strict";
function el(tag,text,attrs){var e=document.createElement(tag);if(text!==null&&text!==undefined)e.textContent=String(text);if(attrs)for(var k in attrs)e.setAttribute(k,String(attrs[k]));return e;}
function row(cells,attrs){var tr=el("tr",null,attrs);cells.forEach(function(c){tr.appendChild(c instanceof Node?c:el("td",c));});return tr;}
function num(v){return el("td",v===null||v===undefined?"-":v,{"class":"num"});}
function fill(id,rows){var tb=document.querySelector("#"+id+" tbody");tb.replaceChildren.apply(tb,rows);}
function fmt(v){return v===null||v===undefined?"-":(v>=100?String(Math.round(v)):Number(v).toFixed(1));}
function heat(o,max){if(!(o>0))return "#eeeeee";var t=Math.log(1+o)/Math.log(1+Math.max(max,1));return "hsl("+Math.round(60*(1-t))+",90%,"+Math.round(75-25*t)+"%)";}
function sv(t,a,text){var e=document.createElementNS(document.getElementById("chart-ops").namespaceURI,t);for(var k in a)e.setAttribute(k,String(a[k]));if(text!==undefined)e.textContent=text;return e;}
function chart(id,hist,series){var svg=document.getElementById(id);var W=CHART_W,H=CHART_H,L=CHART_L,B=CHART_B;var max=0;
hist.forEach(function(w){series.forEach(function(sr){var v=w[sr[0]];if(v!==null&&v!==undefined&&v>max)max=v;});});if(max<=0)max=1;
var kids=[sv("line",{x1:L,y1:H-B,x2:W,y2:H-B,stroke:"#999"}),sv("line",{x1:L,y1:0,x2:L,y2:H-B,stroke:"#999"}),sv("text",{x:2,y:12,"font-size":10},fmt(max)),sv("text",{x:2,y:H-B,"font-size":10},"0")];
var n=Math.max(hist.length-1,1);
series.forEach(function(sr,si){var pts=[];hist.forEach(function(w,i){var v=w[sr[0]];if(v===null||v===undefined)return;pts.push((L+(W-L)*i/n).toFixed(1)+","+((H-B)-(H-B-4)*v/max).toFixed(1));});
kids.push(sv("polyline",{points:pts.join(" "),fill:"none",stroke:sr[1],"stroke-width":1.5,"data-series":sr[0]}));kids.push(sv("text",{x:L+10+si*110,y:H-4,"font-size":10,fill:sr[1]},sr[2]));});
svg.replaceChildren.apply(svg,kids);svg.setAttribute("data-points",hist.length);}
function render(s){
document.getElementById("epoch").textContent=s.epoch;
document.getElementById("cluster-state").textContent=s.cluster_state;
fill("nodes",s.nodes.map(function(n){return row([n.id+(n.this?" (this node)":""),n.addr,el("td",n.state+(n.leaving?" (leaving)":""),{"class":"state"}),num(n.incarnation),num(n.roles_epoch),n.pgs.join(" "),num(n.slots_coordinated)],{"data-node-id":n.id,"data-state":n.state,"class":"state-"+n.state});}));
var bar=document.getElementById("slotbar");bar.replaceChildren.apply(bar,s.ranges.map(function(r){var st=r.coordinator_state||"none";return el("div",r.coordinator===null?"-":r.coordinator,{"class":"seg state-"+st,"style":"width:"+(r.slots*100/16384).toFixed(4)+"%","title":"slots "+r.first+"-"+r.last+": node "+(r.coordinator===null?"-":r.coordinator)+" ("+st+")","data-coordinator":r.coordinator===null?"":r.coordinator});}));
fill("ranges",s.ranges.map(function(r){return row([r.first+"-"+r.last,num(r.slots),num(r.pg),el("td",(r.coordinator===null?"-":r.coordinator)+" ("+(r.coordinator_state||"-")+")",{"class":"state"}),r.cohort.join(" ")],{"data-coordinator":r.coordinator===null?"":r.coordinator,"class":"state-"+(r.coordinator_state||"none")});}));
document.getElementById("ranges-total").textContent=s.ranges_total;
fill("memgests",s.memgests.map(function(g){var c=g.cluster||{};return row([num(g.id),g.name,g.kind,g.default?"yes":"",g.closing?"yes":"",g.evictable?"yes":"",num(c.keys),num(c.stored_keys),num(c.stored_bytes),num(c.failures_tolerated),(g.cluster?c.nodes_reporting+"/"+c.nodes_holding:"-"),num(g.this_node_entries),num(g.this_node_bytes)],{"data-memgest":g.name});}));
document.getElementById("memgest-error").textContent=s.memgest_cluster_error?"cluster figures unavailable: "+s.memgest_cluster_error:"";
fill("this-node",Object.keys(s.this_node).map(function(k){return row([k,num(s.this_node[k])],{"data-field":k});}));
var max=0;s.ranges.forEach(function(r){var o=(r.reads_per_sec||0)+(r.writes_per_sec||0);if(o>max)max=o;});
var hm=document.getElementById("heatmap");hm.replaceChildren.apply(hm,s.ranges.map(function(r){var known=r.reads_per_sec!==null&&r.reads_per_sec!==undefined;var o=known?r.reads_per_sec+r.writes_per_sec:0;var a={"class":"cell"+(known?"":" nodata"),"style":"width:"+(r.slots*100/16384).toFixed(4)+"%"+(known?";background:"+heat(o,max):""),"title":"slots "+r.first+"-"+r.last+" (node "+(r.coordinator===null?"-":r.coordinator)+"): "+(known?fmt(r.reads_per_sec)+" reads/s, "+fmt(r.writes_per_sec)+" writes/s":"no report from its coordinator"),"data-first":r.first,"data-last":r.last,"data-ops":known?o.toFixed(1):""};return el("div",null,a);}));
document.getElementById("heat-max").textContent=fmt(max);
fill("node-load",s.load.nodes.map(function(n){var w=n.window||{};return row([n.id,num(fmt(w.reads_per_sec)),num(fmt(w.writes_per_sec)),num(fmt(w.other_per_sec)),num(w.read_p50_us),num(w.read_p99_us),num(w.write_p50_us),num(w.write_p99_us),n.error||""],{"data-load-node":n.id});}));
chart("chart-ops",s.load.history,OPS_SERIES);chart("chart-latency",s.load.history,LAT_SERIES);
fill("events",s.events.slice().reverse().map(function(e){return row([new Date(e.at_unix_ms).toLocaleTimeString(),num(e.epoch),e.text],{"data-seq":e.seq,"data-kind":e.kind,"data-node":e.about_node===null?"":e.about_node,"class":"ev-"+e.kind});}));
document.getElementById("events-error").textContent=s.events_error?"event log unavailable: "+s.events_error:"";
}
var ok=0;
function poll(){var ctl=new AbortController();var t=setTimeout(function(){ctl.abort();},3000);
fetch("/api/status",{cache:"no-store",signal:ctl.signal}).then(function(r){if(!r.ok)throw new Error("HTTP "+r.status);return r.json();}).then(function(s){render(s);ok++;document.body.setAttribute("data-refreshes",ok);var f=document.getElementById("refresh");f.className="";f.textContent="live, updated "+new Date().toLocaleTimeString();}).catch(function(e){var f=document.getElementById("refresh");f.className="stale";f.textContent="refresh failed ("+e.message+") at "+new Date().toLocaleTimeString()+": figures may be stale";}).finally(function(){clearTimeout(t);setTimeout(poll,POLL_MS);});}
setTimeout(poll,POLL_MS);
})();"##;

/// Chart geometry (SVG user units), shared by the server's rendering and the script's.
const CHART_W: u32 = 560;
const CHART_H: u32 = 170;
const CHART_L: u32 = 50;
const CHART_B: u32 = 22;
/// The charts' series: (window field, colour, label).
const OPS_SERIES: [(&str, &str, &str); 3] = [
    ("reads_per_sec", "#2e86c1", "reads/s"),
    ("writes_per_sec", "#e67e22", "writes/s"),
    ("other_per_sec", "#7f8c8d", "other/s"),
];
const LAT_SERIES: [(&str, &str, &str); 4] = [
    ("read_p50_us", "#5dade2", "read p50 µs"),
    ("read_p99_us", "#1b4f72", "read p99 µs"),
    ("write_p50_us", "#f0b27a", "write p50 µs"),
    ("write_p99_us", "#a04000", "write p99 µs"),
];

fn window_value(w: &Window, key: &str) -> Option<f64> {
    let us = |v: Option<u64>| v.map(|v| v as f64);
    match key {
        "reads_per_sec" => Some(w.reads_per_sec),
        "writes_per_sec" => Some(w.writes_per_sec),
        "other_per_sec" => Some(w.other_per_sec),
        "read_p50_us" => us(w.read_p50_us),
        "read_p99_us" => us(w.read_p99_us),
        "write_p50_us" => us(w.write_p50_us),
        "write_p99_us" => us(w.write_p99_us),
        _ => None,
    }
}

/// A number as the script's `fmt` writes it.
fn fmt_num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v >= 100.0 => format!("{}", v.round()),
        Some(v) => format!("{v:.1}"),
    }
}

/// The heat colour of `ops` against the busiest range's `max` (log scale: yellow to red),
/// as the script's `heat`.
fn heat_colour(ops: f64, max: f64) -> String {
    if ops <= 0.0 {
        return "#eeeeee".into();
    }
    let t = (1.0 + ops).ln() / (1.0 + max.max(1.0)).ln();
    format!(
        "hsl({},90%,{}%)",
        (60.0 * (1.0 - t)).round(),
        (75.0 - 25.0 * t).round()
    )
}

/// A line chart of `hist` as inline SVG (the script redraws it the same way).
fn chart_svg(id: &str, title: &str, hist: &[Window], series: &[(&str, &str, &str)]) -> String {
    let (w, h, l, b) = (
        f64::from(CHART_W),
        f64::from(CHART_H),
        f64::from(CHART_L),
        f64::from(CHART_B),
    );
    let max = hist
        .iter()
        .flat_map(|x| series.iter().filter_map(|(k, _, _)| window_value(x, k)))
        .fold(0.0f64, f64::max);
    let max = if max <= 0.0 { 1.0 } else { max };
    let n = (hist.len().max(2) - 1) as f64;
    let mut out = format!(
        "<svg id=\"{id}\" class=\"chart\" width=\"{CHART_W}\" height=\"{CHART_H}\" \
         viewBox=\"0 0 {CHART_W} {CHART_H}\" role=\"img\" aria-label=\"{}\" data-points=\"{}\">\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{w}\" y2=\"{}\" stroke=\"#999\"/>\
         <line x1=\"{l}\" y1=\"0\" x2=\"{l}\" y2=\"{}\" stroke=\"#999\"/>\
         <text x=\"2\" y=\"12\" font-size=\"10\">{}</text><text x=\"2\" y=\"{}\" font-size=\"10\">0</text>",
        esc(title),
        hist.len(),
        h - b,
        h - b,
        h - b,
        fmt_num(Some(max)),
        h - b,
    );
    for (si, (key, colour, label)) in series.iter().enumerate() {
        let pts: Vec<String> = hist
            .iter()
            .enumerate()
            .filter_map(|(i, x)| {
                window_value(x, key).map(|v| {
                    format!(
                        "{:.1},{:.1}",
                        l + (w - l) * i as f64 / n,
                        (h - b) - (h - b - 4.0) * v / max
                    )
                })
            })
            .collect();
        let _ = write!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" data-series=\"{key}\"/>\
             <text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"{colour}\">{}</text>",
            pts.join(" "),
            l + 10.0 + si as f64 * 110.0,
            h - 4.0,
            esc(label)
        );
    }
    out.push_str("</svg>");
    out
}

/// The heat map, the per-node load table, the charts and the event log.
fn render_load_html(h: &mut String, s: &Status) {
    let max = s
        .ranges
        .iter()
        .map(|r| r.reads_per_sec.unwrap_or(0.0) + r.writes_per_sec.unwrap_or(0.0))
        .fold(0.0f64, f64::max);
    let _ = write!(
        h,
        "<h2>Load by slot range</h2>\n<p>keys read + written per second in the last {} ms, as each \
         range's coordinator counted them; busiest <b id=\"heat-max\">{}</b>/s is red, idle grey, \
         hatched: no report from the coordinator</p>\n<div id=\"heatmap\">",
        crate::load::SAMPLE_MS,
        fmt_num(Some(max))
    );
    for r in &s.ranges {
        let known = r.reads_per_sec.is_some();
        let ops = r.reads_per_sec.unwrap_or(0.0) + r.writes_per_sec.unwrap_or(0.0);
        let _ = write!(
            h,
            "<div class=\"cell{}\" style=\"width:{:.4}%{}\" title=\"slots {}-{} (node {}): {}\" \
             data-first=\"{}\" data-last=\"{}\" data-ops=\"{}\"></div>",
            if known { "" } else { " nodata" },
            f64::from(r.slots) * 100.0 / f64::from(ringlet_types::SLOT_COUNT),
            if known {
                format!(";background:{}", heat_colour(ops, max))
            } else {
                String::new()
            },
            r.first,
            r.last,
            opt(r.coordinator),
            if known {
                format!(
                    "{} reads/s, {} writes/s",
                    fmt_num(r.reads_per_sec),
                    fmt_num(r.writes_per_sec)
                )
            } else {
                "no report from its coordinator".into()
            },
            r.first,
            r.last,
            if known {
                format!("{ops:.1}")
            } else {
                String::new()
            },
        );
    }
    h.push_str(
        "</div>\n<h2>Requests and latency</h2>\n<table id=\"node-load\"><thead><tr><th>node</th>\
         <th>reads/s</th><th>writes/s</th><th>other/s</th><th>read p50 µs</th><th>read p99 µs</th>\
         <th>write p50 µs</th><th>write p99 µs</th><th></th></tr></thead><tbody>\n",
    );
    for n in &s.load.nodes {
        let w = n.window.as_ref();
        let us = |v: Option<u64>| opt(v);
        let _ = writeln!(
            h,
            "<tr data-load-node=\"{}\"><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            n.id,
            n.id,
            fmt_num(w.map(|w| w.reads_per_sec)),
            fmt_num(w.map(|w| w.writes_per_sec)),
            fmt_num(w.map(|w| w.other_per_sec)),
            us(w.and_then(|w| w.read_p50_us)),
            us(w.and_then(|w| w.read_p99_us)),
            us(w.and_then(|w| w.write_p50_us)),
            us(w.and_then(|w| w.write_p99_us)),
            esc(n.error.as_deref().unwrap_or("")),
        );
    }
    let _ = write!(
        h,
        "</tbody></table>\n<p>This node, last {} windows (requests per second; latency from \
         arrival to reply, bucketed within 12.5 %):</p>\n<div>{}{}</div>\n",
        s.load.history.len(),
        chart_svg(
            "chart-ops",
            "requests per second",
            &s.load.history,
            &OPS_SERIES
        ),
        chart_svg(
            "chart-latency",
            "latency in microseconds",
            &s.load.history,
            &LAT_SERIES
        ),
    );
    h.push_str(
        "<h2>Events</h2>\n<p>from the control plane's log, newest first</p>\n<table id=\"events\">\
         <thead><tr><th>time</th><th>epoch</th><th>event</th></tr></thead><tbody>\n",
    );
    for e in s.events.iter().rev() {
        let _ = writeln!(
            h,
            "<tr data-seq=\"{}\" data-kind=\"{}\" data-node=\"{}\" class=\"ev-{}\"><td>{}</td>\
             <td class=\"num\">{}</td><td>{}</td></tr>",
            e.seq,
            e.kind.name(),
            e.about_node.map_or(String::new(), |n| n.to_string()),
            e.kind.name(),
            unix_ms_text(e.at_unix_ms),
            e.epoch,
            esc(&e.text),
        );
    }
    let _ = writeln!(
        h,
        "</tbody></table>\n<p id=\"events-error\">{}</p>",
        s.events_error
            .as_deref()
            .map_or(String::new(), |e| esc(&format!(
                "event log unavailable: {e}"
            )))
    );
}

/// `HH:MM:SS` UTC of a Unix time in ms (the script shows local time once it runs).
fn unix_ms_text(ms: u64) -> String {
    let s = ms / 1000;
    format!(
        "{:02}:{:02}:{:02} UTC",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60
    )
}

/// `SCRIPT` with its constants filled in.
fn script() -> String {
    let series = |s: &[(&str, &str, &str)]| {
        let items: Vec<String> = s
            .iter()
            .map(|(k, c, l)| format!("[\"{k}\",\"{c}\",\"{l}\"]"))
            .collect();
        format!("[{}]", items.join(","))
    };
    SCRIPT
        .replace("POLL_MS", &POLL_MS.to_string())
        .replace("CHART_W", &CHART_W.to_string())
        .replace("CHART_H", &CHART_H.to_string())
        .replace("CHART_L", &CHART_L.to_string())
        .replace("CHART_B", &CHART_B.to_string())
        .replace("OPS_SERIES", &series(&OPS_SERIES))
        .replace("LAT_SERIES", &series(&LAT_SERIES))
}

/// The HTML page: [`Status`] rendered server-side (complete without JavaScript), the
/// plain-text status (`text`) in a collapsed block, and [`SCRIPT`].
fn render_html(s: &Status, text: &str) -> String {
    let mut h = String::with_capacity(16 * 1024);
    let _ = write!(
        h,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Ringlet node {}: cluster status</title><style>{STYLE}</style></head>\n<body>\n\
         <h1>Ringlet cluster as node {} sees it</h1>\n\
         <p>epoch <b id=\"epoch\">{}</b> &middot; cluster state <b id=\"cluster-state\">{}</b> \
         &middot; <span id=\"refresh\">rendered by the server; refreshes every {} s with JavaScript</span></p>\n",
        s.node,
        s.node,
        s.epoch,
        esc(s.cluster_state),
        POLL_MS / 1000
    );
    // Nodes.
    h.push_str(
        "<h2>Nodes</h2>\n<table id=\"nodes\"><thead><tr><th>id</th><th>address</th><th>state</th>\
         <th>incarnation</th><th>roles epoch</th><th>PGs</th><th>slots coordinated</th></tr></thead><tbody>\n",
    );
    for n in &s.nodes {
        let _ = writeln!(
            h,
            "<tr data-node-id=\"{id}\" data-state=\"{st}\" class=\"state-{st}\"><td>{id}{this}</td><td>{addr}</td>\
             <td class=\"state\">{st}{leaving}</td><td class=\"num\">{inc}</td><td class=\"num\">{re}</td>\
             <td>{pgs}</td><td class=\"num\">{slots}</td></tr>",
            id = n.id,
            this = if n.this { " (this node)" } else { "" },
            addr = esc(&n.addr),
            st = esc(n.state),
            leaving = if n.leaving { " (leaving)" } else { "" },
            inc = n.incarnation,
            re = n.roles_epoch,
            pgs = n
                .pgs
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" "),
            slots = n.slots_coordinated,
        );
    }
    h.push_str("</tbody></table>\n");
    // Placement groups.
    if let Some(p) = &s.placement {
        let _ = write!(
            h,
            "<h2>Placement groups</h2>\n<p>{} data + {} redundant nodes each: ",
            p.s, p.d
        );
        for (i, g) in p.groups.iter().enumerate() {
            let _ = write!(
                h,
                "{}PG {i} = [{}]",
                if i > 0 { "; " } else { "" },
                g.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
            );
        }
        h.push_str("</p>\n");
    }
    // Slot ranges: a bar (width by slots, colour by the coordinator's state) and a table.
    let _ = write!(
        h,
        "<h2>Slot ranges (<span id=\"ranges-total\">{}</span>)</h2>\n<div id=\"slotbar\">",
        s.ranges_total
    );
    for r in &s.ranges {
        let st = r.coordinator_state.unwrap_or("none");
        let c = opt(r.coordinator);
        let _ = write!(
            h,
            "<div class=\"seg state-{st}\" style=\"width:{:.4}%\" title=\"slots {}-{}: node {c} ({st})\" \
             data-coordinator=\"{}\">{c}</div>",
            f64::from(r.slots) * 100.0 / f64::from(ringlet_types::SLOT_COUNT),
            r.first,
            r.last,
            r.coordinator.map_or(String::new(), |c| c.to_string()),
        );
    }
    h.push_str(
        "</div>\n<table id=\"ranges\"><thead><tr><th>slots</th><th>count</th><th>PG</th>\
         <th>coordinator</th><th>cohort</th></tr></thead><tbody>\n",
    );
    for r in &s.ranges {
        let st = r.coordinator_state.unwrap_or("none");
        let _ = writeln!(
            h,
            "<tr data-coordinator=\"{}\" class=\"state-{st}\"><td>{}-{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"state\">{} ({})</td><td>{}</td></tr>",
            r.coordinator.map_or(String::new(), |c| c.to_string()),
            r.first,
            r.last,
            r.slots,
            r.pg,
            opt(r.coordinator),
            r.coordinator_state.unwrap_or("-"),
            r.cohort
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    h.push_str("</tbody></table>\n");
    render_load_html(&mut h, s);
    // Memgests.
    h.push_str(
        "<h2>Memgests</h2>\n<table id=\"memgests\"><thead><tr><th>id</th><th>name</th><th>kind</th>\
         <th>default</th><th>closing</th><th>evictable</th><th>keys (cluster, est.)</th>\
         <th>stored keys (cluster, every copy)</th><th>stored bytes (cluster)</th>\
         <th>failures tolerated</th><th>nodes reporting/holding</th>\
         <th>entries on this node</th><th>bytes on this node</th></tr></thead><tbody>\n",
    );
    let yes = |b: bool| if b { "yes" } else { "" };
    for g in &s.memgests {
        let c = g.cluster.as_ref();
        let _ = writeln!(
            h,
            "<tr data-memgest=\"{name}\"><td class=\"num\">{}</td><td>{name}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            g.id,
            esc(&g.kind),
            yes(g.default),
            yes(g.closing),
            yes(g.evictable),
            opt(c.map(|c| c.keys)),
            opt(c.map(|c| c.stored_keys)),
            opt(c.map(|c| c.stored_bytes)),
            opt(c.map(|c| c.failures_tolerated)),
            c.map_or("-".to_string(), |c| format!(
                "{}/{}",
                c.nodes_reporting, c.nodes_holding
            )),
            g.this_node_entries,
            g.this_node_bytes,
            name = esc(&g.name),
        );
    }
    let _ = writeln!(
        h,
        "</tbody></table>\n<p id=\"memgest-error\">{}</p>",
        s.memgest_cluster_error
            .as_deref()
            .map_or(String::new(), |e| esc(&format!(
                "cluster figures unavailable: {e}"
            )))
    );
    // This node: the JSON object's fields in their order, as the script renders them.
    h.push_str(
        "<h2>This node</h2>\n<table id=\"this-node\"><thead><tr><th>figure</th><th>value</th></tr></thead><tbody>\n",
    );
    for (k, v) in this_node_fields(&s.this_node) {
        let _ = writeln!(
            h,
            "<tr data-field=\"{k}\"><td>{k}</td><td class=\"num\">{}</td></tr>",
            esc(&v)
        );
    }
    h.push_str("</tbody></table>\n");
    let _ = write!(
        h,
        "<details><summary>INFO and CLUSTER INFO at page load (also at <a href=\"/status.txt\">/status.txt</a>); \
         JSON at <a href=\"/api/status\">/api/status</a></summary><pre id=\"info\">{}</pre></details>\n\
         <script>{}</script>\n</body></html>\n",
        esc(text),
        script()
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str, addr: &str) -> Status {
        Status {
            node: 1,
            epoch: 7,
            cluster_state: "ok",
            placement: Some(PlacementView {
                s: 2,
                d: 1,
                groups: vec![vec![1, 2, 3]],
            }),
            nodes: vec![
                NodeView {
                    id: 1,
                    addr: addr.into(),
                    state: "active",
                    incarnation: 5,
                    roles_epoch: 2,
                    leaving: false,
                    pgs: vec![0],
                    slots_coordinated: 16384,
                    this: true,
                },
                NodeView {
                    id: 3,
                    addr: "127.0.0.1:3@4".into(),
                    state: "failed",
                    incarnation: 6,
                    roles_epoch: 2,
                    leaving: false,
                    pgs: vec![0],
                    slots_coordinated: 0,
                    this: false,
                },
            ],
            ranges: vec![RangeView {
                first: 0,
                last: 16383,
                slots: 16384,
                pg: 0,
                coordinator: Some(1),
                coordinator_state: Some("active"),
                cohort: vec![1, 2, 3],
                reads_per_sec: Some(120.0),
                writes_per_sec: Some(30.0),
            }],
            ranges_total: 1,
            memgests: vec![MemgestView {
                id: 4,
                name: name.into(),
                kind: "rep:2".into(),
                default: false,
                closing: false,
                evictable: false,
                this_node_entries: 11,
                this_node_bytes: 1234,
                cluster: None,
            }],
            memgest_cluster_error: Some("<timeout>".into()),
            this_node: ThisNode {
                id: 1,
                state: Some("active"),
                keys: 3,
                stored_entries: 9,
                connected_clients: 2,
                used_memory_bytes: 1,
                data_bytes: 1,
                maxmemory_bytes: 1,
                expired_keys: 0,
                evicted_keys: 0,
                maps_applied: 4,
                fenced: 0,
                possible_loss: 0,
                ambiguous_resolved: 0,
                events_refused: 0,
                heartbeats_for_busy_driver: 0,
                ec_arenas_not_ready: 0,
            },
            load: LoadView {
                window_ms: 1000,
                history: (0..5)
                    .map(|i| Window {
                        at_unix_ms: 1_700_000_000_000 + i * 1000,
                        ms: 1000,
                        reads_per_sec: 100.0 + i as f64,
                        writes_per_sec: 10.0,
                        other_per_sec: 0.0,
                        read_p50_us: Some(50),
                        read_p99_us: Some(400),
                        write_p50_us: None,
                        write_p99_us: None,
                        other_p50_us: None,
                        other_p99_us: None,
                    })
                    .collect(),
                nodes: vec![NodeLoad {
                    id: 3,
                    window: None,
                    error: Some("<unreachable>".into()),
                }],
            },
            events: vec![ringlet_control::Event {
                seq: 4,
                epoch: ringlet_types::Epoch(6),
                at_ms: 10,
                kind: ringlet_control::EventKind::MemgestCreated {
                    name: name.into(),
                    memgest_kind: "rep:2".into(),
                },
            }
            .stamped(10, 1_700_000_000_000)],
            events_error: None,
        }
    }

    #[test]
    fn page_escapes_everything_dynamic_and_has_no_external_assets() {
        let s = sample("<script>alert('x')</script>", "a\"><img src=x>");
        let h = render_html(&s, "cluster_state:ok\n<b>");
        assert!(!h.contains("<script>alert"), "{h}");
        assert!(h.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
        assert!(!h.contains("<img"), "{h}");
        assert!(h.contains("a&quot;&gt;&lt;img src=x&gt;"));
        assert!(h.contains("cluster figures unavailable: &lt;timeout&gt;"));
        assert!(h.contains("cluster_state:ok\n&lt;b&gt;"));
        // One script, inline; no src=/href= to anything but this node's own pages.
        assert_eq!(h.matches("<script").count(), 1);
        assert!(!h.contains("http://") && !h.contains("https://"), "{h}");
        assert!(!h.contains(" src=\""), "{h}");
        for href in h.split("href=\"").skip(1) {
            let target = href.split('"').next().unwrap_or_default();
            assert!(
                target == "/status.txt" || target == "/api/status",
                "{target}"
            );
        }
        assert!(
            !h.contains("POLL_MS"),
            "the poll interval was not substituted"
        );
        for k in [
            "CHART_W",
            "CHART_H",
            "CHART_L",
            "CHART_B",
            "OPS_SERIES",
            "LAT_SERIES",
        ] {
            assert!(!h.contains(k), "{k} was not substituted");
        }
        // The event's text carries the memgest name: escaped too.
        assert!(h.contains("memgest &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; created"));
        assert!(h.contains("&lt;unreachable&gt;"));
    }

    #[test]
    fn page_has_the_heat_map_charts_and_events() {
        let h = render_html(&sample("warm", "127.0.0.1:1@2"), "");
        assert!(h.contains("<div id=\"heatmap\"><div class=\"cell\" style=\"width:100.0000%;background:hsl(0,90%,50%)\""), "{h}");
        assert!(h.contains("data-ops=\"150.0\""));
        assert!(h.contains("<svg id=\"chart-ops\""));
        assert!(h.contains("<svg id=\"chart-latency\""));
        assert!(h.contains("data-points=\"5\""));
        assert!(h.contains("data-series=\"reads_per_sec\""));
        assert!(h.contains("<tr data-seq=\"4\" data-kind=\"memgest_created\""));
        assert!(h.contains("<tr data-load-node=\"3\">"));
        // Colours grow from yellow to red with load.
        assert_eq!(heat_colour(0.0, 10.0), "#eeeeee");
        assert_eq!(heat_colour(10.0, 10.0), "hsl(0,90%,50%)");
        assert!(heat_colour(1.0, 1000.0).starts_with("hsl(54,"));
        assert_eq!(unix_ms_text(1_700_000_000_000), "22:13:20 UTC");
    }

    #[test]
    fn a_range_takes_its_load_from_its_coordinators_report() {
        let rep = |node: u32, first: u16, last: u16, r: f64| LoadReport {
            node,
            epoch: 1,
            window: None,
            ranges: vec![RangeLoad {
                first,
                last,
                reads_per_sec: r,
                writes_per_sec: 1.0,
                reads_total: 0,
                writes_total: 0,
            }],
        };
        let reports = vec![
            (1, Ok(rep(1, 0, 99, 5.0))),
            (2, Ok(rep(2, 100, 199, 7.0))),
            (3, Err("down".to_string())),
        ];
        assert_eq!(
            range_rates(&reports, 100, 199, Some(NodeId(2))),
            (Some(7.0), Some(1.0))
        );
        // The coordinator's map splits differently: the entry holding the first slot.
        assert_eq!(
            range_rates(&reports, 50, 60, Some(NodeId(1))),
            (Some(5.0), Some(1.0))
        );
        // Nothing coordinated there by it: idle.
        assert_eq!(
            range_rates(&reports, 300, 400, Some(NodeId(1))),
            (Some(0.0), Some(0.0))
        );
        assert_eq!(range_rates(&reports, 0, 9, Some(NodeId(3))), (None, None));
        assert_eq!(range_rates(&reports, 0, 9, None), (None, None));
    }

    #[test]
    fn page_marks_each_node_with_its_state() {
        let h = render_html(&sample("warm", "127.0.0.1:1@2"), "");
        assert!(h.contains("<tr data-node-id=\"1\" data-state=\"active\""));
        assert!(h.contains("<tr data-node-id=\"3\" data-state=\"failed\""));
        assert!(h.contains("<tr data-memgest=\"warm\">"));
        assert!(h.contains(
            "<tr data-field=\"stored_entries\"><td>stored_entries</td><td class=\"num\">9</td>"
        ));
        assert!(h.contains("width:100.0000%"));
    }

    #[test]
    fn json_has_the_fields_the_page_script_reads() {
        let v = serde_json::to_value(sample("warm", "x")).unwrap();
        for k in [
            "epoch",
            "cluster_state",
            "nodes",
            "ranges",
            "ranges_total",
            "memgests",
            "memgest_cluster_error",
            "this_node",
            "load",
            "events",
            "events_error",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["nodes"][1]["state"], "failed");
        assert_eq!(v["memgests"][0]["cluster"], serde_json::Value::Null);
        // The page's server-side "this node" rows name every JSON field, in the JSON's order.
        let json = serde_json::to_string(&sample("warm", "x").this_node).unwrap();
        let mut at = 0;
        let fields = this_node_fields(&sample("warm", "x").this_node);
        for (k, _) in &fields {
            let i = json[at..]
                .find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} out of order in {json}"));
            at += i;
        }
        assert_eq!(fields.len(), json.matches("\":").count(), "{json}");
    }
}
