//! The client's error type: one variant per thing a caller can act on.

use ringlet_codec::native::Status;
use ringlet_codec::DecodeError;
use thiserror::Error;

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Error {
    /// The configuration is unusable (checked once by [`crate::ClientConfig::validate`]).
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// The TLS handshake failed: the server's certificate is not trusted (wrong CA, wrong
    /// address in it) or the server does not speak TLS. Retrying cannot help.
    #[error("TLS handshake with {addr} failed: {message}")]
    Tls {
        /// Peer address.
        addr: String,
        /// rustls's reason.
        message: String,
    },
    /// The address does not resolve.
    #[error("cannot resolve address {0}")]
    Resolve(String),
    /// A connection failed or broke. `maybe_executed` is false when the request was never
    /// written (connect failed, connection already dead): such a call is always safe to retry.
    #[error("connection to {addr} failed: {message}")]
    Connection {
        /// Peer address.
        addr: String,
        /// What happened.
        message: String,
        /// Whether the server may have executed the request.
        maybe_executed: bool,
    },
    /// The call's deadline passed (retries included).
    #[error("deadline exceeded")]
    Timeout,
    /// The server sent bytes that are not a valid native frame; the connection was closed.
    #[error("protocol error from server: {0}")]
    Protocol(DecodeError),
    /// The server answered with an error status.
    #[error("server error {status}: {message}")]
    Server {
        /// The status byte.
        status: Status,
        /// The server's message.
        message: String,
    },
    /// The server answered with a status or payload that makes no sense for the request.
    #[error("unexpected response: {0}")]
    UnexpectedResponse(String),
    /// Cluster mode: no usable cluster map (no node answered CLUSTER_MAP, the map is
    /// malformed, or it has no route for the key yet).
    #[error("cluster map: {0}")]
    ClusterMap(String),
    /// Key longer than `limits::KEY_BYTES_MAX`: refused before sending.
    #[error("key of {0} bytes exceeds the key limit")]
    KeyTooLarge(usize),
    /// Value longer than `limits::VALUE_BYTES_MAX`: refused before sending.
    #[error("value of {0} bytes exceeds the value limit")]
    ValueTooLarge(usize),
}

impl Error {
    /// Whether retrying may succeed and cannot apply a non-idempotent request twice.
    /// `idempotent`: whether executing the request twice has the effect of once.
    pub fn is_retryable(&self, idempotent: bool) -> bool {
        match self {
            Error::Connection { maybe_executed, .. } => !maybe_executed || idempotent,
            // These statuses mean "not applied": retrying is always safe.
            Error::Server { status, .. } => status.is_retryable(),
            _ => false,
        }
    }
}
