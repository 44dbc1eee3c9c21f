//! The control plane's HTTP status port (`ringlet up --status-port S`): what the process that
//! runs the embedded control plane can tell without asking any node.
//!
//! | path | content |
//! |---|---|
//! | `/metrics` | Prometheus: map epoch, nodes by state, drains, moves, handoffs, memgests' cluster keys/bytes, events recorded by kind |
//! | `/api/events` | the control plane's event log as JSON (oldest first) |
//! | `/`, `/status` | an HTML page: epoch, the nodes with a link to each node's own status page (its admin port), the event log |
//!
//! The HTTP side (bounds, one request per connection, the bearer token, `no-store`) is
//! `ringlet_server::admin::serve`, as for the nodes' admin ports; without a token it listens
//! on loopback only. The per-node figures (load, latency, keys) stay on the nodes' pages:
//! this process has none of them.

use crate::control::ControlService;
use ringlet_control::NodeState;
use ringlet_server::admin::{AdminPages, Page, PageFuture};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

/// The pages of the control status port.
pub struct ControlPages {
    pub svc: Arc<ControlService>,
    /// Node id -> its admin port (`ringlet up` gives node i one at client port + offset).
    pub admin_ports: BTreeMap<u32, u16>,
}

fn state_name(s: NodeState) -> &'static str {
    match s {
        NodeState::Active => "active",
        NodeState::Spare => "spare",
        NodeState::Draining => "draining",
        NodeState::Failed => "failed",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A Prometheus label value, escaped (`\\`, `"`, newline).
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl AdminPages for ControlPages {
    fn metrics(&self) -> String {
        let map = self.svc.map();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP ringlet_control_epoch Epoch of the control plane's current map.\n\
             # TYPE ringlet_control_epoch gauge\nringlet_control_epoch {}",
            map.epoch.0
        );
        let mut by_state: BTreeMap<&str, u64> = ["active", "spare", "draining", "failed"]
            .into_iter()
            .map(|s| (s, 0))
            .collect();
        for n in map.nodes.values() {
            *by_state.entry(state_name(n.state)).or_default() += 1;
        }
        out.push_str("# HELP ringlet_control_nodes Nodes of the map by state.\n# TYPE ringlet_control_nodes gauge\n");
        for (s, n) in &by_state {
            let _ = writeln!(out, "ringlet_control_nodes{{state=\"{s}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP ringlet_control_draining_nodes Nodes asked to drain still finishing their writes.\n\
             # TYPE ringlet_control_draining_nodes gauge\nringlet_control_draining_nodes {}\n\
             # HELP ringlet_control_slots_moving Slots in phase 1 of a move.\n\
             # TYPE ringlet_control_slots_moving gauge\nringlet_control_slots_moving {}\n\
             # HELP ringlet_control_handoffs_pending Moved spans whose new owner has not rebuilt them yet.\n\
             # TYPE ringlet_control_handoffs_pending gauge\nringlet_control_handoffs_pending {}",
            map.leaving.len(),
            map.moving
                .map_or(0, |m| u32::from(m.last) - u32::from(m.first) + 1),
            map.handoffs.len(),
        );
        let reports = self.svc.memgest_reports();
        out.push_str(
            "# HELP ringlet_control_memgest_keys Estimated distinct keys of a memgest, cluster-wide.\n\
             # TYPE ringlet_control_memgest_keys gauge\n",
        );
        for r in &reports {
            let _ = writeln!(
                out,
                "ringlet_control_memgest_keys{{memgest=\"{}\",kind=\"{}\"}} {}",
                label(&r.name),
                label(&r.descriptor),
                r.keys
            );
        }
        out.push_str(
            "# HELP ringlet_control_memgest_stored_bytes Engine bytes of a memgest over all nodes, every copy.\n\
             # TYPE ringlet_control_memgest_stored_bytes gauge\n",
        );
        for r in &reports {
            let _ = writeln!(
                out,
                "ringlet_control_memgest_stored_bytes{{memgest=\"{}\",kind=\"{}\"}} {}",
                label(&r.name),
                label(&r.descriptor),
                r.stored_bytes
            );
        }
        // Events by kind among those the log still holds, and the log's newest number
        // (a counter: it only grows while this process runs).
        let events = self.svc.events(0);
        let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
        for e in &events {
            *kinds.entry(e.kind.name()).or_default() += 1;
        }
        out.push_str(
            "# HELP ringlet_control_events_logged Events of each kind in the control plane's log (the newest 1024).\n\
             # TYPE ringlet_control_events_logged gauge\n",
        );
        for (k, n) in &kinds {
            let _ = writeln!(out, "ringlet_control_events_logged{{kind=\"{k}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP ringlet_control_events_total Events recorded since the control plane started.\n\
             # TYPE ringlet_control_events_total counter\nringlet_control_events_total {}",
            events.last().map_or(0, |e| e.seq)
        );
        out
    }

    fn status(&self) -> String {
        let map = self.svc.map();
        format!("epoch:{}\nnodes:{}\n", map.epoch.0, map.nodes.len())
    }

    fn page<'a>(&'a self, path: &'a str) -> PageFuture<'a> {
        Box::pin(async move {
            match path {
                "/api/events" => Some(Page {
                    content_type: "application/json",
                    body: serde_json::to_string(&self.svc.events(0)).unwrap_or_default(),
                }),
                "/" | "/status" => Some(Page {
                    content_type: "text/html; charset=utf-8",
                    body: self.html(),
                }),
                _ => None,
            }
        })
    }
}

impl ControlPages {
    fn html(&self) -> String {
        let map = self.svc.map();
        let mut h = format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Ringlet control plane</title>\
             <meta http-equiv=\"refresh\" content=\"2\"><style>body{{font:14px/1.4 system-ui,sans-serif;margin:1.5em}}\
             table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:left}}\
             tr.state-failed td{{color:#c0392b}}</style></head><body>\n<h1>Ringlet control plane</h1>\n\
             <p>map epoch <b id=\"epoch\">{}</b> &middot; this page reloads every 2 s; each node's own page \
             has the heat map, charts and its figures</p>\n<h2>Nodes</h2>\n<table id=\"nodes\"><thead><tr>\
             <th>id</th><th>address</th><th>state</th><th>status page</th></tr></thead><tbody>\n",
            map.epoch.0
        );
        for (id, n) in &map.nodes {
            let st = state_name(n.state);
            let link = self.admin_ports.get(&id.0).map_or(String::from("-"), |p| {
                format!("<a href=\"//127.0.0.1:{p}/\">127.0.0.1:{p}</a>")
            });
            let _ = writeln!(
                h,
                "<tr data-node-id=\"{}\" data-state=\"{st}\" class=\"state-{st}\"><td>{}</td><td>{}</td>\
                 <td>{st}{}</td><td>{link}</td></tr>",
                id.0,
                id.0,
                esc(&n.addr),
                if map.leaving.contains_key(id) {
                    " (leaving)"
                } else {
                    ""
                },
            );
        }
        h.push_str(
            "</tbody></table>\n<h2>Events</h2>\n<table id=\"events\"><thead><tr><th>seq</th>\
             <th>epoch</th><th>event</th></tr></thead><tbody>\n",
        );
        for e in self.svc.events(0).iter().rev() {
            let _ = writeln!(
                h,
                "<tr data-kind=\"{}\"><td>{}</td><td>{}</td><td>{}</td></tr>",
                e.kind.name(),
                e.seq,
                e.epoch,
                esc(&e.text)
            );
        }
        h.push_str("</tbody></table>\n<p>JSON: <a href=\"/api/events\">/api/events</a>; Prometheus: <a href=\"/metrics\">/metrics</a></p>\n</body></html>\n");
        h
    }
}
