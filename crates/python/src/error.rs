//! Python exceptions: `RingletError` and one subclass per group of
//! [`ringlet_client::Error`] variants that a caller handles the same way.
//!
//! ```text
//! RingletError
//! ├── ConfigError       Error::Config; also unknown memgest names and bad memgest kinds
//! ├── ConnectionError   Error::Connection, Resolve, Tls: a node unreachable, its connection
//! │                     broke, or its TLS handshake failed
//! ├── TimeoutError      Error::Timeout              the call's deadline passed, retries included
//! ├── ServerError       Error::Server               a node refused; `.status` names why
//! ├── ClusterMapError   Error::ClusterMap           no usable cluster map / no route for a key
//! ├── ProtocolError     Error::Protocol, UnexpectedResponse
//! └── TooLargeError     Error::KeyTooLarge, ValueTooLarge (refused before sending)
//! ```
//!
//! `ConnectionError` and `TimeoutError` shadow the builtins of the same names inside the
//! module, as redis-py's do: write `ringlet.TimeoutError`. They derive from `RingletError`
//! only, so `except TimeoutError` with the builtin does not catch them.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use ringlet_client::Error;

create_exception!(
    ringlet,
    RingletError,
    PyException,
    "Base class of every error raised by ringlet."
);
create_exception!(
    ringlet,
    ConfigError,
    RingletError,
    "The client configuration or an argument is unusable (no seeds, a bad timeout, an unknown memgest name, a memgest kind that does not parse or is `none`)."
);
create_exception!(
    ringlet,
    ConnectionError,
    RingletError,
    "A node could not be reached, its address did not resolve, its connection broke, or its TLS handshake failed."
);
create_exception!(
    ringlet,
    TimeoutError,
    RingletError,
    "The call's deadline passed (retries and backoff included)."
);
create_exception!(
    ringlet,
    ServerError,
    RingletError,
    "A node answered with an error. `status` is the native status name (BAD_REQUEST, NO_SPACE, UNSUPPORTED, ...)."
);
create_exception!(
    ringlet,
    ClusterMapError,
    RingletError,
    "No usable cluster map: no node answered, the map is malformed, or it has no route for the key."
);
create_exception!(
    ringlet,
    ProtocolError,
    RingletError,
    "A node sent bytes or a response that make no sense for the request."
);
create_exception!(
    ringlet,
    TooLargeError,
    RingletError,
    "A key or value exceeds Ringlet's limits; refused before sending."
);

/// Add the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("RingletError", py.get_type::<RingletError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("ConnectionError", py.get_type::<ConnectionError>())?;
    m.add("TimeoutError", py.get_type::<TimeoutError>())?;
    m.add("ServerError", py.get_type::<ServerError>())?;
    m.add("ClusterMapError", py.get_type::<ClusterMapError>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add("TooLargeError", py.get_type::<TooLargeError>())?;
    Ok(())
}

/// A `ServerError` whose `status` attribute is `status` (a native status name).
pub(crate) fn server_error(py: Python<'_>, status: &str, message: &str) -> PyErr {
    let err = ServerError::new_err(format!("{status}: {message}"));
    // Setting an attribute on a fresh exception instance fails only without memory; the
    // exception is raised without it then.
    let _ = err.value(py).setattr("status", status);
    err
}

/// The Python exception for a client error.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let text = e.to_string();
    match e {
        Error::Config(_) => ConfigError::new_err(text),
        Error::Resolve(_) | Error::Connection { .. } | Error::Tls { .. } => {
            ConnectionError::new_err(text)
        }
        Error::Timeout => TimeoutError::new_err(text),
        Error::Server { status, message } => server_error(py, &status.to_string(), &message),
        Error::ClusterMap(_) => ClusterMapError::new_err(text),
        Error::Protocol(_) | Error::UnexpectedResponse(_) => ProtocolError::new_err(text),
        Error::KeyTooLarge(_) | Error::ValueTooLarge(_) => TooLargeError::new_err(text),
    }
}
