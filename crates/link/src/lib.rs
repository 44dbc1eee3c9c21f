//! `ringlet-link`: what every link between Ringlet processes shares — the cluster secret's
//! challenge ([`auth`]), TLS ([`tls`]), listening sockets and the clocks the cores are
//! driven by. Used by the cluster runtime (peer transport, client ports) and the control
//! service with its backends (crates/control-service), so neither borrows the other's.

pub mod auth;
pub mod tls;

/// Monotonic milliseconds since the first call in this process: the `now_ms` of the
/// replica core and the control plane (leases need a clock that never jumps).
pub fn mono_ms() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Wall-clock unix milliseconds (for logs that are compared across processes).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Bind a listening TCP socket with [`ringlet_types::limits::LISTEN_BACKLOG`] (the default
/// bind gave 128) and `SO_REUSEADDR` (a restarted node rebinds over TIME_WAIT).
///
/// # Errors
/// Socket, bind or listen failures.
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let sock = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(ringlet_types::limits::LISTEN_BACKLOG)
}
