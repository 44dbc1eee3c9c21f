//! `ringlet.ShmReader`: one-sided GET/MGET from the shared memory of a node on this host,
//! over [`ringlet_client::ShmReader`] (crates/shm; docs/design/shm-reads.md).
//!
//! ```text
//!  Python thread ──ShmReader.get(k)──▶ copy k out (GIL held)
//!                                      │ py.detach: GIL released
//!                                      ▼
//!                 lock the reader ─▶ read the node's mapped index/data (no syscall)
//!                                      │  torn read / epoch change / dead node:
//!                                      │  re-handshake or the same GET over the socket
//!                                      ▼
//!                 value copied out, lock released, GIL taken again ─▶ bytes | None
//! ```
//!
//! Why the GIL is released for every call and not only around the socket fallback: the Rust
//! reader decides to fall back inside `get_into` (a `Retry` it investigates itself), so the
//! binding cannot know beforehand whether a call will touch the socket, and holding the GIL
//! through a fallback would stop every Python thread for up to the I/O timeout. The release
//! costs well under a microsecond (BENCHMARKS.md, "Python package"), small beside the
//! round trip the fallback saves.
//!
//! Why a mutex: the Rust reader is `Send` but not `Sync` (one connection and scratch buffers
//! per reader). A Python object may be shared by threads, so calls take turns; a thread that
//! wants no waiting makes its own `ShmReader`. The lock is taken only with the GIL released,
//! so a thread waiting for it never holds the GIL the holder needs.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use ringlet_client::{ShmError, ShmReaderConfig, Status};

use crate::cluster::bytes_of;
use crate::error::{
    server_error, ConfigError, ConnectionError, ProtocolError, TimeoutError, TooLargeError,
};

/// A one-sided reader of a Ringlet node on this host.
///
/// Maps the node's memory read-only through its shared-memory socket (``ringlet server
/// --shm-socket PATH``) and answers ``get``/``mget`` from it without a round trip and
/// without the node's CPU. A read that cannot be validated from memory (a write racing it, a
/// restarted node, a changed epoch) is re-tried after a re-handshake or sent over the socket,
/// so the answer is always the node's current value.
///
/// Thread-safe, but calls on one reader take turns: give each busy thread its own.
///
/// Args:
///     socket_path: the node's ``--shm-socket`` path.
///     timeout: socket I/O timeout of fallback requests, in seconds (default 5).
///
/// Raises:
///     ConnectionError: no node listens on ``socket_path``.
///     ProtocolError: the node speaks another shared-memory layout.
///     ConfigError: ``timeout`` is not positive.
#[pyclass(module = "ringlet", frozen)]
pub struct ShmReader {
    reader: Mutex<ringlet_client::ShmReader>,
    path: PathBuf,
}

/// The Python exception for a shared-memory reader error.
fn shm_to_py(py: Python<'_>, e: ShmError) -> PyErr {
    let text = e.to_string();
    match e {
        ShmError::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) =>
        {
            TimeoutError::new_err(text)
        }
        ShmError::Io(_) | ShmError::Disconnected => ConnectionError::new_err(text),
        ShmError::Proto(_) | ShmError::Decode(_) | ShmError::Handshake(_) => {
            ProtocolError::new_err(text)
        }
        ShmError::KeyTooLarge => TooLargeError::new_err(text),
        ShmError::Server { status, message } => {
            server_error(py, &Status(status).to_string(), &message)
        }
    }
}

impl ShmReader {
    /// Run `f` on the reader with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ringlet_client::ShmReader) -> Result<T, ShmError> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            // A panic inside the reader poisons the lock; its state is still a valid reader
            // (every error path leaves it reconnectable), so keep using it.
            let mut r = self.reader.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut r)
        })
        .map_err(|e| shm_to_py(py, e))
    }
}

#[pymethods]
impl ShmReader {
    #[new]
    #[pyo3(signature = (socket_path, timeout = None))]
    fn new(py: Python<'_>, socket_path: PathBuf, timeout: Option<f64>) -> PyResult<ShmReader> {
        let mut cfg = ShmReaderConfig::new(&socket_path);
        if let Some(t) = timeout {
            cfg.io_timeout = Duration::try_from_secs_f64(t)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| ConfigError::new_err("timeout must be a positive number"))?;
        }
        let reader = py
            .detach(|| ringlet_client::ShmReader::with_config(cfg))
            .map_err(|e| shm_to_py(py, e))?;
        Ok(ShmReader {
            reader: Mutex::new(reader),
            path: socket_path,
        })
    }

    fn __repr__(&self) -> String {
        format!("ringlet.ShmReader({:?})", self.path.display().to_string())
    }

    /// The value of ``key``, or ``None`` if it does not exist (or has expired).
    ///
    /// Raises:
    ///     TooLargeError: the key exceeds the limit.
    ///     ConnectionError / TimeoutError: the read had to go over the socket and the node
    ///         did not answer.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = bytes_of(key, "key")?;
        let v = self.with(py, |r| r.get(&key))?;
        Ok(v.map(|(_, b)| PyBytes::new(py, &b)))
    }

    /// The values of ``keys``, in order; ``None`` for a missing key. The memory accesses of
    /// neighbouring keys overlap (prefetched in steps), so this is faster per key than
    /// ``get`` in a loop.
    ///
    /// Raises:
    ///     As ``get``; nothing is returned if any key fails.
    fn mget<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        if keys.is_instance_of::<PyString>() || keys.is_instance_of::<PyBytes>() {
            return Err(PyTypeError::new_err(
                "keys must be an iterable of keys, not a single key",
            ));
        }
        let ks = keys
            .try_iter()?
            .map(|k| bytes_of(&k?, "key"))
            .collect::<PyResult<Vec<Vec<u8>>>>()?;
        // Every value into one buffer (one allocation that grows, not one per key); `spans`
        // holds each key's (start, end) in it.
        let (buf, spans) = self.with(py, |r| {
            let mut buf: Vec<u8> = Vec::new();
            let mut spans: Vec<Option<(usize, usize)>> = vec![None; ks.len()];
            r.mget_with(&ks, |i, item| {
                if let (Some((_, v)), Some(span)) = (item, spans.get_mut(i)) {
                    let start = buf.len();
                    buf.extend_from_slice(v);
                    *span = Some((start, buf.len()));
                }
            })?;
            Ok((buf, spans))
        })?;
        let out = PyList::empty(py);
        for span in spans {
            match span.and_then(|(s, e)| buf.get(s..e)) {
                Some(v) => out.append(PyBytes::new(py, v))?,
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }

    /// Counters of this reader: ``shm_hits``, ``shm_misses`` (keys answered from shared
    /// memory), ``fallbacks`` (keys read over the socket), ``reconnects``, ``remaps``, ...
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(py, |r| Ok(r.stats()))?;
        let d = PyDict::new(py);
        d.set_item("shm_hits", s.shm_hits)?;
        d.set_item("shm_misses", s.shm_misses)?;
        d.set_item("fallbacks", s.fallbacks)?;
        d.set_item("reconnects", s.reconnects)?;
        d.set_item("generation_changes", s.generation_changes)?;
        d.set_item("epoch_changes", s.epoch_changes)?;
        d.set_item("remaps", s.remaps)?;
        d.set_item("access_batches_sent", s.access_batches_sent)?;
        d.set_item("access_batches_dropped", s.access_batches_dropped)?;
        Ok(d)
    }
}
