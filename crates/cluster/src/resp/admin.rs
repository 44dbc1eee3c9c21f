//! The admin HTTP port of a cluster node (`--admin-port`; `ringlet up --nodes` gives node i
//! port + 10000 unless `--no-admin`): Prometheus `/metrics` and the node's INFO and CLUSTER
//! INFO as text at `/`. The HTTP side (bounds, one request per connection) is the single
//! node's (`ringlet_server::admin::serve`); this renders a cluster node's figures: the map
//! epoch and this node's state in it, the replica core's counters (the INFO `# Ringlet`
//! section), its engine, and its clients. Like the single node's, the recorder is the node's
//! own (never installed globally) so several nodes in one process keep separate figures.

use super::Front;
use ringlet_control::NodeState;
use std::sync::atomic::Ordering::Relaxed;

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
        self.recorder.handle().render()
    }

    fn status(&self) -> String {
        let map = self.node.map();
        format!(
            "{}\n# CLUSTER INFO\n{}",
            self.info(),
            super::cluster_info(map.as_deref(), self.node.id())
        )
        .replace("\r\n", "\n")
    }
}
