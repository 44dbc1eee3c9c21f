//! `ringlet node drain ID`: after the control plane accepts the drain, follow it to the end
//! (docs/design/cluster-drain.md) with a spinner on a terminal (hidden otherwise, so scripts
//! and CI logs see only the result lines).
//!
//! A drain has two phases the map shows: the node is listed as leaving while it finishes
//! its in-flight writes (at most `ringlet_control::plane::DRAIN_QUIESCE_MS_MAX`), then its
//! placement-group positions go to a spare and its state becomes `draining`. The command
//! polls the map (`ToControl::Watch`, every [`POLL`]) until one of: drained (success, naming
//! the spare), the node failed meanwhile (failover took its roles: an error), the drain was
//! called off (no spare left: an error), or `--wait-timeout` passed (an error; the drain
//! may still finish).

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use ringlet_cluster::control::{request, FromControl, ToControl};
use ringlet_control::{ClusterMap, NodeState};
use ringlet_types::NodeId;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// How often the map is asked for.
const POLL: Duration = Duration::from_millis(200);

/// Which phase `node` is in, by the map.
#[derive(Debug, PartialEq, Eq)]
enum Phase {
    /// Listed as leaving: finishing in-flight writes.
    Quiescing,
    /// Roles handed to these nodes (those now at its former positions).
    Drained(Vec<NodeId>),
    Failed,
    /// Active, not leaving: the drain was called off.
    CalledOff,
    Unknown,
}

fn phase(map: &ClusterMap, before: &ClusterMap, node: NodeId) -> Phase {
    if map.leaving.contains_key(&node) {
        return Phase::Quiescing;
    }
    match map.node_state(node) {
        Some(NodeState::Draining) | Some(NodeState::Spare) => {
            // Who sits where it sat, group by group.
            let mut to = Vec::new();
            if let (Some(old), Some(new)) = (&before.placement, &map.placement) {
                for (og, ng) in old.groups.iter().zip(&new.groups) {
                    for (a, b) in og.iter().zip(ng) {
                        if *a == node && *b != node && !to.contains(b) {
                            to.push(*b);
                        }
                    }
                }
            }
            Phase::Drained(to)
        }
        Some(NodeState::Failed) => Phase::Failed,
        Some(NodeState::Active) => Phase::CalledOff,
        None => Phase::Unknown,
    }
}

fn spinner() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} {msg} ({elapsed})") {
        b.set_style(style);
    }
    b.enable_steady_tick(Duration::from_millis(120));
    b
}

/// Follow the drain of `node` (already accepted) until it ends or `timeout` passes.
pub async fn follow(control: &str, node: u32, before: ClusterMap, timeout: Duration) -> Result<()> {
    let id = NodeId(node);
    let bar = spinner();
    bar.set_prefix(format!("drain node {node}:"));
    let deadline = Instant::now() + timeout;
    // Bounded by the deadline.
    loop {
        let map = match request(control, &ToControl::Watch).await? {
            FromControl::Map(m) => m,
            FromControl::Error(e) => bail!("{e}"),
            other => bail!("unexpected reply from the control plane: {other:?}"),
        };
        match phase(&map, &before, id) {
            Phase::Quiescing => bar.set_message("finishing in-flight writes"),
            Phase::Drained(to) => {
                bar.finish_and_clear();
                let to: Vec<String> = to.iter().map(|n| n.0.to_string()).collect();
                println!(
                    "node {node} drained at epoch {}: its roles moved to node {}; it may be stopped",
                    map.epoch,
                    if to.is_empty() { "-".into() } else { to.join(", ") }
                );
                return Ok(());
            }
            Phase::Failed => {
                bar.finish_and_clear();
                bail!("node {node} failed during the drain: failover took its roles instead");
            }
            Phase::CalledOff => {
                bar.finish_and_clear();
                bail!("the drain of node {node} was called off (no spare was left); it keeps its roles");
            }
            Phase::Unknown => {
                bar.finish_and_clear();
                bail!("node {node} is no longer in the map");
            }
        }
        if Instant::now() >= deadline {
            bar.finish_and_clear();
            bail!(
                "node {node} is still finishing its writes after {timeout:?}; the drain continues \
                 (`ringlet node map` shows it)"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ringlet_control::{ControlConfig, ControlPlane, Input};

    fn cp() -> ControlPlane {
        let mut cp = ControlPlane::new(ControlConfig::default()).unwrap();
        for i in 1..=4 {
            cp.step(
                0,
                Input::Join {
                    node: NodeId(i),
                    addr: format!("n{i}"),
                    incarnation: 1,
                },
            );
        }
        cp.step(0, Input::Bootstrap { active: 3 });
        cp
    }

    #[test]
    fn phases_follow_the_map() {
        let mut cp = cp();
        let before = (**cp.map()).clone();
        cp.step(1, Input::Drain { node: NodeId(2) });
        assert_eq!(phase(cp.map(), &before, NodeId(2)), Phase::Quiescing);
        let asked = cp.map().leaving[&NodeId(2)];
        cp.step(
            2,
            Input::Quiesced {
                node: NodeId(2),
                incarnation: 1,
                epoch: asked,
            },
        );
        assert_eq!(
            phase(cp.map(), &before, NodeId(2)),
            Phase::Drained(vec![NodeId(4)])
        );
        assert_eq!(phase(cp.map(), &before, NodeId(1)), Phase::CalledOff);
        assert_eq!(phase(cp.map(), &before, NodeId(9)), Phase::Unknown);
    }
}
