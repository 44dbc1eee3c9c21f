//! Admin HTTP listener: Prometheus `/metrics` and a plain-text status page at `/`; an
//! implementation may serve more pages through [`AdminPages::page`] (a cluster node's HTML
//! status page and `/api/status` JSON, docs/design/status-page.md).
//!
//! Why our own tiny HTTP responder rather than the exporter's `http-listener`: a test or a
//! local cluster binds port 0 and must learn the port, and several nodes in one process (tests,
//! `ringlet up --nodes N` later) each need their own registry. So each node owns a
//! `PrometheusRecorder` (never installed globally); at scrape time the node's counters are
//! copied into it under `metrics::with_local_recorder` and rendered. The exporter still does
//! the Prometheus text format.
//!
//! Bounds: a request head is read up to [`REQUEST_HEAD_BYTES_MAX`] with a timeout, one request
//! per connection (`Connection: close`), at most [`ADMIN_CONNECTIONS_MAX`] at once.
//!
//! Access: with an admin token (`--admin-token`, `RINGLET_ADMIN_TOKEN`) every page needs
//! `Authorization: Bearer <token>` (what Prometheus's `authorization` scrape setting sends);
//! anything else gets `401` and no figures. Without one the port is for loopback only.

use crate::shared::{Shared, Stats};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use std::net::TcpListener as StdListener;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// Largest HTTP request head accepted (a scrape sends ~200 bytes).
const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
/// Concurrent admin connections: scrapers and curious humans, never many.
const ADMIN_CONNECTIONS_MAX: usize = 64;
/// A client that has not sent its request head by then is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest body an [`AdminPages::page`] may answer with; a larger one is a `500`. The cluster
/// status page bounds its rows well below this (4096 nodes, 1024 memgests, 2048 slot ranges
/// at well under 512 bytes each); this is the backstop that keeps one request from sending an
/// unbounded body.
pub const PAGE_BYTES_MAX: usize = 8 * 1024 * 1024;

/// A page served by [`AdminPages::page`].
pub struct Page {
    /// The `Content-Type` header, e.g. `text/html; charset=utf-8`.
    pub content_type: &'static str,
    pub body: String,
}

/// What [`AdminPages::page`] returns: a page may need I/O (a cluster node asks its control
/// plane for memgest figures), so it is a future on the admin runtime.
pub type PageFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<Page>> + Send + 'a>>;

/// What an admin port serves: the single node (below) and cluster nodes
/// (crates/cluster/src/resp/admin.rs) each render their own figures.
pub trait AdminPages: Send + Sync + 'static {
    /// Prometheus text for `/metrics`.
    fn metrics(&self) -> String;
    /// Plain text for `/` and `/status`.
    fn status(&self) -> String;
    /// Any other page, by path without its query string; asked before the built-in `/` and
    /// `/status` (so an implementation may replace them) but never for `/metrics`. `None`:
    /// not served here. The token check has already passed when this is called.
    fn page<'a>(&'a self, path: &'a str) -> PageFuture<'a> {
        let _ = path;
        Box::pin(std::future::ready(None))
    }
}

/// The single node's pages: its counters copied into its own recorder at scrape time.
struct NodePages {
    shared: Arc<Shared>,
    recorder: PrometheusRecorder,
}

impl AdminPages for NodePages {
    fn metrics(&self) -> String {
        render_metrics(&self.shared, &self.recorder)
    }
    fn status(&self) -> String {
        crate::info::render(&self.shared, &[], crate::shared::now_ms()).replace("\r\n", "\n")
    }
}

/// Run the admin listener until shutdown (on its own thread and runtime).
pub fn run(listener: StdListener, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        tracing::error!("admin: cannot build runtime");
        return;
    };
    let token = shared.config.admin_token.as_deref().map(Arc::from);
    let pages: Arc<dyn AdminPages> = Arc::new(NodePages {
        shared,
        recorder: PrometheusBuilder::new().build_recorder(),
    });
    rt.block_on(async move {
        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
            return;
        };
        tokio::select! {
            _ = shutdown.changed() => {}
            _ = serve(listener, pages, token) => {}
        }
    });
}

/// Serve `pages` on `listener` (HTTP/1.1 GET, one request per connection) until the future
/// is dropped; with `token`, only to requests that carry it as a bearer token.
pub async fn serve(
    listener: tokio::net::TcpListener,
    pages: Arc<dyn AdminPages>,
    token: Option<Arc<str>>,
) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if open.load(std::sync::atomic::Ordering::Relaxed) >= ADMIN_CONNECTIONS_MAX {
            continue; // dropped: closes the socket
        }
        open.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (pages, open, token) = (pages.clone(), open.clone(), token.clone());
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &*pages, token.as_deref()))
                    .await;
            open.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        });
    }
}

/// Whether the request head carries `Authorization: Bearer <token>` (header name in any case).
fn bearer_matches(head: &[u8], token: &str) -> bool {
    head.split(|&b| b == b'\n').skip(1).any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return false;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        name.eq_ignore_ascii_case(b"authorization")
            && value.len() > 7
            && value[..7].eq_ignore_ascii_case(b"bearer ")
            && crate::cmd::connection::constant_time_eq(value[7..].trim_ascii(), token.as_bytes())
    })
}

async fn answer(
    mut stream: tokio::net::TcpStream,
    pages: &dyn AdminPages,
    token: Option<&str>,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    // Bounded by REQUEST_HEAD_BYTES_MAX.
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > REQUEST_HEAD_BYTES_MAX {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "too large\n",
            )
            .await;
        }
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, path) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if method != b"GET" {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n",
        )
        .await;
    }
    if let Some(t) = token {
        if !bearer_matches(&head, t) {
            let body = "admin token required (Authorization: Bearer <token>)\n";
            let head = format!(
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"ringlet\"\r\n\
                 Content-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(body.as_bytes()).await?;
            return stream.shutdown().await;
        }
    }
    let route = path.split(|&b| b == b'?').next().unwrap_or_default();
    if route != b"/metrics" {
        if let Some(page) = match std::str::from_utf8(route) {
            Ok(r) => pages.page(r).await,
            Err(_) => None,
        } {
            if page.body.len() > PAGE_BYTES_MAX {
                return respond(
                    &mut stream,
                    "500 Internal Server Error",
                    "text/plain",
                    "page too large\n",
                )
                .await;
            }
            return respond(&mut stream, "200 OK", page.content_type, &page.body).await;
        }
    }
    match path {
        b"/metrics" => {
            let body = pages.metrics();
            respond(&mut stream, "200 OK", "text/plain; version=0.0.4", &body).await
        }
        b"/" | b"/status" => {
            let body = pages.status();
            respond(&mut stream, "200 OK", "text/plain; charset=utf-8", &body).await
        }
        _ => respond(&mut stream, "404 Not Found", "text/plain", "not found\n").await,
    }
}

async fn respond(
    stream: &mut tokio::net::TcpStream,
    status: &str,
    ctype: &str,
    body: &str,
) -> std::io::Result<()> {
    // no-store: every answer is a live figure (the status page polls; a cached one would
    // show a node as up after it went down).
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

/// Copy the node's counters into its recorder and render the Prometheus text.
fn render_metrics(shared: &Shared, recorder: &PrometheusRecorder) -> String {
    let st = &shared.stats;
    let e = shared.db.lock().stats();
    metrics::with_local_recorder(recorder, || {
        metrics::counter!("ringlet_connections_received_total")
            .absolute(Stats::get(&st.connections_received));
        metrics::counter!("ringlet_connections_rejected_total")
            .absolute(Stats::get(&st.connections_rejected));
        metrics::gauge!("ringlet_connected_clients").set(Stats::get(&st.connected) as f64);
        metrics::counter!("ringlet_commands_processed_total")
            .absolute(Stats::get(&st.commands_processed));
        metrics::counter!("ringlet_keyspace_hits_total").absolute(Stats::get(&st.keyspace_hits));
        metrics::counter!("ringlet_keyspace_misses_total")
            .absolute(Stats::get(&st.keyspace_misses));
        metrics::counter!("ringlet_protocol_errors_total")
            .absolute(Stats::get(&st.protocol_errors));
        metrics::counter!("ringlet_net_input_bytes_total")
            .absolute(Stats::get(&st.net_input_bytes));
        metrics::counter!("ringlet_net_output_bytes_total")
            .absolute(Stats::get(&st.net_output_bytes));
        metrics::counter!("ringlet_reader_retries_total").absolute(Stats::get(&st.reader_retries));
        metrics::counter!("ringlet_expired_keys_total").absolute(e.expirations);
        metrics::counter!("ringlet_evicted_keys_total").absolute(e.evictions);
        metrics::gauge!("ringlet_keys").set(e.keys as f64);
        metrics::gauge!("ringlet_used_memory_bytes")
            .set((e.committed_bytes + e.index_bytes) as f64);
        metrics::gauge!("ringlet_data_bytes").set(e.used_bytes as f64);
        metrics::gauge!("ringlet_maxmemory_bytes").set(e.memory_bytes_max as f64);
        metrics::gauge!("ringlet_index_load_factor").set(e.index_load_factor);
        for (m, u) in &e.per_memgest {
            let id = m.0.to_string();
            metrics::gauge!("ringlet_memgest_keys", "memgest" => id.clone()).set(u.keys as f64);
            metrics::gauge!("ringlet_memgest_bytes", "memgest" => id).set(u.bytes as f64);
        }
    });
    recorder.handle().render()
}

#[cfg(test)]
mod tests {
    use super::bearer_matches;

    #[test]
    fn bearer_token_is_checked_exactly() {
        let head = |h: &str| format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{h}\r\n\r\n");
        assert!(bearer_matches(
            head("Authorization: Bearer s3cret").as_bytes(),
            "s3cret"
        ));
        assert!(bearer_matches(
            head("authorization:bearer   s3cret ").as_bytes(),
            "s3cret"
        ));
        assert!(!bearer_matches(
            head("Authorization: Bearer s3cre").as_bytes(),
            "s3cret"
        ));
        assert!(!bearer_matches(
            head("Authorization: Bearer s3cretX").as_bytes(),
            "s3cret"
        ));
        assert!(!bearer_matches(
            head("Authorization: Basic s3cret").as_bytes(),
            "s3cret"
        ));
        assert!(!bearer_matches(
            head("X-Authorization: Bearer s3cret").as_bytes(),
            "s3cret"
        ));
        assert!(!bearer_matches(head("").as_bytes(), "s3cret"));
        // The request line is not a header.
        assert!(!bearer_matches(
            b"Authorization: Bearer s3cret\r\n\r\n",
            "s3cret"
        ));
    }
}
