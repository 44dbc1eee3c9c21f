//! The load balancer's I/O (issue 12 item 3; docs/design/cluster-balancer.md): measure
//! per-slot load on every data node, ask [`ringlet_control::plan_by_load`] for one move, run
//! it through the control plane and wait for its handoff. Used once by `ringlet node
//! rebalance --by load` and in a loop by `ringlet up --auto-balance` / `ringlet control
//! --auto-balance`.
//!
//! ```text
//!  every node: CLUSTER RINGLET-LOAD SLOTS ──▶ (node, slot) → served ops since start
//!  sample, wait one window, sample again ──▶ ops/s per slot (same coordinator in both)
//!  plan_by_load (hysteresis, no overshoot, shortest span) ──▶ MoveSlots ──▶ wait handoff
//!  budget: at most `moves_per_minute`; after a move, a fresh pair of samples
//! ```
//!
//! A slot whose coordinator changed between the two samples (a failover, another move) gets no
//! rate in that window: its counter on the new owner started elsewhere. A node that does not
//! answer within [`SAMPLE_WAIT`] makes the whole window unusable (a plan from a partial view
//! would send load to the node that looks idle because it was not heard): the round is skipped.

use crate::control::{request, FromControl, ToControl};
use crate::resp::SlotLoadReport;
use ringlet_control::{plan_by_load, BalanceConfig, ClusterMap, NodeState, PlannedMove, Verdict};
use ringlet_types::SLOT_COUNT;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long one node may take to answer a load sample.
pub const SAMPLE_WAIT: Duration = Duration::from_millis(1_000);
/// Largest per-slot load report accepted (16,384 slots of JSON, with room).
const SAMPLE_BYTES_MAX: usize = 4 << 20;
/// How often a move's progress is polled from the control plane.
const MOVE_POLL: Duration = Duration::from_millis(50);

/// How to reach the nodes' client ports.
#[derive(Clone, Default)]
pub struct NodeAccess {
    pub password: Option<String>,
    pub tls: Option<tokio_rustls::TlsConnector>,
}

/// One sample: for each slot, the node that answered for it and its cumulative count.
pub type Sample = BTreeMap<u16, (u32, u64)>;

/// Every active data node's `CLUSTER RINGLET-LOAD SLOTS` report.
///
/// # Errors
/// A node that does not answer (or answers garbage) within [`SAMPLE_WAIT`]: its name and why.
pub async fn reports(map: &ClusterMap, access: &NodeAccess) -> Result<Vec<SlotLoadReport>, String> {
    let mut tasks = tokio::task::JoinSet::new();
    for (id, n) in &map.nodes {
        if n.state != NodeState::Active {
            continue;
        }
        let id = id.0;
        let Some(addr) = crate::node::client_addr(&n.addr) else {
            return Err(format!("node {id} has no client address in the map"));
        };
        let access = access.clone();
        tasks.spawn(async move {
            let asked = crate::resp::remote_call(
                addr,
                &[b"CLUSTER", b"RINGLET-LOAD", b"SLOTS"],
                access.password.as_deref().map(str::as_bytes),
                access.tls.as_ref(),
                SAMPLE_BYTES_MAX,
            );
            match tokio::time::timeout(SAMPLE_WAIT, asked).await {
                Err(_) => Err(format!("node {id} did not answer a load sample in time")),
                Ok(None) => Err(format!("node {id} unreachable for a load sample")),
                Ok(Some(ringlet_codec::resp::Reply::Bulk(b))) => {
                    serde_json::from_slice::<SlotLoadReport>(&b)
                        .map_err(|e| format!("node {id}: bad load report: {e}"))
                }
                Ok(Some(other)) => Err(format!("node {id}: load sample refused: {other:?}")),
            }
        });
    }
    let mut out = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        out.push(joined.map_err(|e| e.to_string())??);
    }
    Ok(out)
}

/// Ask every active data node of `map` for its per-slot counts.
///
/// # Errors
/// As [`reports`].
pub async fn sample(map: &ClusterMap, access: &NodeAccess) -> Result<Sample, String> {
    Ok(to_sample(reports(map, access).await?))
}

/// For each slot, the node that reported it and its cumulative count.
fn to_sample(reports: Vec<SlotLoadReport>) -> Sample {
    let mut out = Sample::new();
    for rep in reports {
        for (slot, n) in rep.slots {
            if slot < SLOT_COUNT {
                out.insert(slot, (rep.node, n));
            }
        }
    }
    out
}

/// Bytes stored per slot, as each slot's coordinator accounts them (the engine's per-slot
/// usage: entries and their slab footprint, replica copies of other nodes' slots left out).
pub fn slot_bytes(reports: &[SlotLoadReport]) -> Vec<f64> {
    let mut out = vec![0.0; usize::from(SLOT_COUNT)];
    for rep in reports {
        for (slot, b) in &rep.bytes {
            if let Some(o) = out.get_mut(usize::from(*slot)) {
                *o = *b as f64;
            }
        }
    }
    out
}

/// Plan at most one move that evens out stored bytes over the data nodes (`ringlet node
/// rebalance --by bytes`): [`plan_by_load`] over bytes per slot instead of ops/s, so the
/// same hysteresis, no-overshoot and shortest-span rules hold; `cfg.min_ops` is then the
/// smallest total of bytes worth balancing. One sample suffices (bytes are a level, not a
/// rate); a map that changed while the nodes answered is not trusted.
///
/// # Errors
/// As [`reports`] and [`current_map`].
pub async fn plan_by_bytes(
    control: &str,
    access: &NodeAccess,
    cfg: &BalanceConfig,
) -> Result<Verdict, String> {
    let (map, reps) = settled_reports(control, access).await?;
    Ok(plan_by_load(&map, &slot_bytes(&reps), cfg))
}

/// The control plane's map and every active data node's report, once every node answers
/// for that map's epoch: right after a move the nodes may not all have the new map yet, and
/// a report from a node still on the previous epoch counts slots it no longer serves (or
/// misses those it gained). Sampled again, bounded by [`EPOCH_SETTLE_TRIES`].
///
/// # Errors
/// As [`reports`] and [`current_map`], or the nodes did not settle in time.
async fn settled_reports(
    control: &str,
    access: &NodeAccess,
) -> Result<(ClusterMap, Vec<SlotLoadReport>), String> {
    let mut last = 0;
    for _ in 0..EPOCH_SETTLE_TRIES {
        let map = current_map(control).await?;
        let reps = reports(&map, access).await?;
        if reps.iter().all(|r| r.epoch == map.epoch.0) {
            return Ok((map, reps));
        }
        last = map.epoch.0;
        tokio::time::sleep(MOVE_POLL).await;
    }
    Err(format!(
        "the nodes did not all reach the map's epoch {last} within {} ms: retry",
        u64::from(EPOCH_SETTLE_TRIES) * MOVE_POLL.as_millis() as u64
    ))
}

/// Samples [`plan_by_bytes`] takes while waiting for every node to reach the map's epoch.
const EPOCH_SETTLE_TRIES: u32 = 100;

/// Operations per second per slot between two samples taken `secs` apart: only slots served
/// by the same node in both, whose count did not go down.
pub fn rates(before: &Sample, after: &Sample, secs: f64) -> Vec<f64> {
    let mut out = vec![0.0; usize::from(SLOT_COUNT)];
    if secs <= 0.0 {
        return out;
    }
    for (slot, (node, n)) in after {
        let was = match before.get(slot) {
            Some((b_node, b)) if b_node == node => *b,
            Some(_) => continue,
            // First served in this window (the node counted nothing before).
            None => 0,
        };
        if let (Some(o), true) = (out.get_mut(usize::from(*slot)), *n >= was) {
            *o = (*n - was) as f64 / secs;
        }
    }
    out
}

/// The control plane's current map.
///
/// # Errors
/// The control plane unreachable or answering something else.
pub async fn current_map(control: &str) -> Result<ClusterMap, String> {
    match request(control, &ToControl::Watch).await {
        Ok(FromControl::Map(m)) => Ok(m),
        Ok(other) => Err(format!(
            "unexpected reply from the control plane: {other:?}"
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Measure one window of `window` and plan at most one move.
///
/// # Errors
/// As [`sample`] and [`current_map`].
pub async fn measure_and_plan(
    control: &str,
    access: &NodeAccess,
    window: Duration,
    cfg: &BalanceConfig,
) -> Result<Verdict, String> {
    // The first sample waits for every node to reach the map's epoch (a round right after
    // its own move would otherwise start from counts of the previous owners).
    let (map, first) = settled_reports(control, access).await?;
    let t0 = Instant::now();
    let a = to_sample(first);
    tokio::time::sleep(window).await;
    let b = sample(&map, access).await?;
    let secs = t0.elapsed().as_secs_f64();
    // Plan against the map as it is now: a move or failover during the window shows as a
    // changed epoch; the window is then not trusted.
    let now = current_map(control).await?;
    if now.epoch != map.epoch {
        return Err(format!(
            "the map changed during the window (epoch {} -> {})",
            map.epoch.0, now.epoch.0
        ));
    }
    Ok(plan_by_load(&now, &rates(&a, &b, secs), cfg))
}

/// Ask the control plane for `m` and wait until its new owner holds the span with no handoff
/// left; returns the span's new coordinator.
///
/// # Errors
/// Refused, called off (source or target failed while copying), or not done in `timeout`.
pub async fn move_and_wait(
    control: &str,
    m: &PlannedMove,
    rate_kib_s: u32,
    timeout: Duration,
) -> Result<u32, String> {
    let req = ToControl::MoveSlots {
        first: m.first,
        last: m.last,
        pg: m.pg,
        data_index: m.data_index,
        rate_kib_s,
    };
    match request(control, &req).await {
        Ok(FromControl::Ok) => {}
        Ok(FromControl::Error(e)) => return Err(format!("move {}-{}: {e}", m.first, m.last)),
        Ok(other) => return Err(format!("unexpected reply: {other:?}")),
        Err(e) => return Err(e.to_string()),
    }
    wait_moved(control, m.first, m.last, (m.pg, m.data_index), timeout).await
}

/// Wait until slots `first..=last` are at placement pair `to` with no handoff left.
///
/// # Errors
/// The move called off, or not finished within `timeout`.
pub async fn wait_moved(
    control: &str,
    first: u16,
    last: u16,
    to: (u32, u8),
    timeout: Duration,
) -> Result<u32, String> {
    let deadline = Instant::now() + timeout;
    // Whether a map showed this move (listed, or switched): a later map showing neither
    // means the control plane called it off (its source or target failed while it
    // copied; the old owner kept the slots).
    let mut seen = false;
    loop {
        if let Ok(now) = current_map(control).await {
            let at = now
                .placement
                .as_ref()
                .and_then(|p| p.range_of(first))
                .is_some_and(|r| (r.pg, r.data_index) == to && r.last >= last);
            let listed = now.moving.is_some_and(|m| {
                (m.first, m.last, m.pg, m.data_index) == (first, last, to.0, to.1)
            });
            if at && now.handoff(first, last).is_none() {
                if let Some(c) = now.coordinator(first) {
                    return Ok(c.0);
                }
            }
            if seen && !at && !listed {
                return Err(format!(
                    "move {first}-{last} was called off (its source or target failed, or it \
                     copied for too long): the slots stay with their owner; run it again"
                ));
            }
            seen |= at || listed;
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "move {first}-{last} not finished after {} s (the map shows where it \
                 stands: `ringlet node map`)",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(MOVE_POLL).await;
    }
}

/// The automatic balancer's settings (`--auto-balance` and its companions).
#[derive(Clone)]
pub struct AutoBalance {
    pub control: String,
    pub access: NodeAccess,
    pub cfg: BalanceConfig,
    /// Length of one measurement window.
    pub window: Duration,
    /// Moves allowed in any 60 s.
    pub moves_per_minute: u32,
    /// Rate limit of each move's copy (KiB/s); 0: unlimited.
    pub rate_kib_s: u32,
    /// Longest one move may take.
    pub move_timeout: Duration,
}

/// Run the balancer until the task is dropped: one window, at most one move, repeat. Every
/// move, and every change of verdict (balanced, quiet, stuck, a window skipped), is printed
/// on stderr as `ringlet balancer: ...` (the control plane's event log records the moves too).
pub async fn run(a: AutoBalance) {
    let mut recent: std::collections::VecDeque<Instant> = Default::default();
    let mut last_kind = String::new();
    fn note(last_kind: &mut String, kind: &str, line: String) {
        if kind != last_kind {
            tracing::info!("ringlet balancer: {line}");
            *last_kind = kind.to_string();
        }
    }
    loop {
        while recent
            .front()
            .is_some_and(|t| t.elapsed() >= Duration::from_secs(60))
        {
            recent.pop_front();
        }
        if recent.len() >= a.moves_per_minute as usize {
            note(
                &mut last_kind,
                "budget",
                format!("{} moves in the last minute: waiting", recent.len()),
            );
            tokio::time::sleep(a.window).await;
            continue;
        }
        match measure_and_plan(&a.control, &a.access, a.window, &a.cfg).await {
            Ok(Verdict::Move {
                planned: m,
                span_ops,
                busiest_ops,
                idlest_ops,
            }) => {
                tracing::info!(
                    "ringlet balancer: moving slots {}-{} ({span_ops:.0} ops/s) from node {} \
                     ({busiest_ops:.0} ops/s) to node {} ({idlest_ops:.0} ops/s)",
                    m.first,
                    m.last,
                    m.from,
                    m.to
                );
                last_kind.clear();
                recent.push_back(Instant::now());
                match move_and_wait(&a.control, &m, a.rate_kib_s, a.move_timeout).await {
                    Ok(c) => tracing::info!(
                        "ringlet balancer: slots {}-{} now at node {c}",
                        m.first,
                        m.last
                    ),
                    Err(e) => tracing::warn!("ringlet balancer: {e}"),
                }
            }
            Ok(Verdict::Balanced {
                busiest_ops,
                mean_ops,
            }) => note(
                &mut last_kind,
                "balanced",
                format!("balanced (busiest {busiest_ops:.0} ops/s, mean {mean_ops:.0})"),
            ),
            Ok(Verdict::Quiet { total_ops }) => note(
                &mut last_kind,
                "quiet",
                format!("quiet ({total_ops:.0} ops/s in all)"),
            ),
            Ok(Verdict::NotPlaced) => note(
                &mut last_kind,
                "unplaced",
                "fewer than two data nodes".into(),
            ),
            Ok(Verdict::Stuck { busiest, reason }) => note(
                &mut last_kind,
                "stuck",
                format!("node {busiest} is busiest, but {reason}"),
            ),
            Err(e) => {
                note(&mut last_kind, "skipped", format!("window skipped: {e}"));
                tokio::time::sleep(a.window).await;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn rates_only_where_the_same_node_counted_both_samples() {
        let before: Sample = [(1, (1, 100)), (2, (1, 50)), (3, (2, 10))]
            .into_iter()
            .collect();
        let after: Sample = [(1, (1, 300)), (2, (3, 70)), (3, (2, 5)), (4, (2, 40))]
            .into_iter()
            .collect();
        let r = rates(&before, &after, 2.0);
        assert_eq!(r[1], 100.0); // same node, +200 in 2 s
        assert_eq!(r[2], 0.0); // another node now: no rate
        assert_eq!(r[3], 0.0); // went down (restart)
        assert_eq!(r[4], 20.0); // first served in the window
        assert_eq!(r.len(), usize::from(SLOT_COUNT));
    }
}
