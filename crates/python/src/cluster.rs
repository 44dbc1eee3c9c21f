//! `ringlet.Cluster`: a [`ClusterClient`] and the tokio runtime its calls run on.
//!
//! Each method copies its keys and values out of the Python objects, releases the GIL
//! (`Python::detach`) and blocks on the client's future, so other Python threads run during
//! the I/O and several threads may call one `Cluster` at once (the client is shared; its
//! connections pipeline their requests).
//!
//! Why a runtime of our own with one worker rather than [`ringlet_client::BlockingClusterClient`]:
//! the blocking client hides its runtime, and the memgest calls need
//! [`ClusterClient::refresh_map`], `memgest_drop` and `memgest_default`, which it does not
//! wrap. One worker, as in the blocking client: the worker only drives sockets and timers,
//! the calling threads run the calls themselves in `block_on`.
//!
//! Keys and values are `bytes` or `str` (UTF-8); anything else is a `TypeError`.

use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use ringlet_client::{ClusterClient, ClusterConfig, Error, ReadMode};
use ringlet_codec::Reply;
use ringlet_types::MemgestKind;

use crate::error::{server_error, to_py, ConfigError, ProtocolError};

/// A client of a running Ringlet cluster.
///
/// Connects through any of ``seeds`` (``"host:port"`` of nodes' client ports), fetches the
/// cluster map and routes every key to its slot's coordinator, following map changes.
/// Thread-safe: share one ``Cluster`` between threads. Create it after ``os.fork()``, not
/// before (its runtime threads do not survive a fork).
///
/// Args:
///     seeds: client addresses of one or more nodes, e.g. ``["127.0.0.1:7379"]``.
///     quorum_reads: read by quorum (the first majority of the key's replicas that agree on
///         a version decides) instead of at the coordinator.
///     timeout: deadline of one call in seconds, retries included (default: the Rust
///         client's, 5 s).
///     tls_ca_file: path of the CA (PEM) that issued the nodes' certificates, for a cluster
///         started with ``--tls-cert-file/--tls-key-file/--tls-ca-cert-file``: every
///         connection is then TLS, each node's certificate checked for its address.
///     password: log every connection in with this password (``--requirepass``, or an ACL
///         user's with ``username``), as redis-py's ``password=``; a wrong one raises
///         ``ServerError`` (``WRONGPASS``) and the user's ACL limits hold (``NOPERM``).
///     username: the ACL user ``password`` belongs to (default: ``default``).
///
/// Raises:
///     ConfigError: no seeds, too many, or a timeout that is not positive.
///     ConnectionError: a seed does not resolve.
///     ClusterMapError: no seed answered with a map of a bootstrapped cluster in time.
#[pyclass(module = "ringlet", frozen)]
pub struct Cluster {
    pub(crate) rt: ClientRuntime,
    pub(crate) client: ClusterClient,
    seeds: Vec<String>,
}

/// The client's tokio runtime, shut down without waiting for its worker when dropped.
///
/// Why not tokio's blocking drop: the last reference to a `Cluster` can go away (1) on the
/// runtime's own worker, when an `AsyncCluster` task releases a Python object that was the
/// last to hold it (an exception whose traceback holds the coroutine's frame), where a
/// blocking drop panics; and (2) on a Python thread holding the GIL while the worker waits
/// for the GIL to hand back a result, where a blocking drop would deadlock. Shutting down
/// in the background cancels what is in flight; the worker exits after its current poll.
pub(crate) struct ClientRuntime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for ClientRuntime {
    type Target = tokio::runtime::Runtime;
    fn deref(&self) -> &tokio::runtime::Runtime {
        // Always Some until drop: the Option exists only so that drop can move it out.
        self.0
            .as_ref()
            .unwrap_or_else(|| unreachable!("runtime used after drop"))
    }
}

impl Drop for ClientRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// `obj` as bytes: `bytes` as is, `str` encoded as UTF-8. `what` names the argument.
pub(crate) fn bytes_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_cow()?.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes or str, not {}",
        obj.get_type().name()?
    )))
}

/// A command argument as redis-py encodes it: bytes and str as they are, int and float as
/// their decimal text (``str(x)``; bool is refused, as redis-py's encoder refuses it).
pub(crate) fn command_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    use pyo3::types::{PyBool, PyFloat, PyInt};
    if obj.cast::<PyBool>().is_err()
        && (obj.cast::<PyInt>().is_ok() || obj.cast::<PyFloat>().is_ok())
    {
        return Ok(obj.str()?.to_cow()?.as_bytes().to_vec());
    }
    bytes_of(obj, "argument")
}

/// Text of a bulk or simple string reply.
fn text_of(r: &Reply) -> Option<String> {
    match r {
        Reply::Bulk(b) | Reply::Simple(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// A RESP reply as a Python value: simple strings as `str`, bulk strings as `bytes`,
/// integers as `int`, arrays and sets as `list`, maps as `dict`, nulls as `None`. An error
/// reply raises `ServerError` with status `BAD_REQUEST`, as the Rust client's typed memgest
/// calls do.
pub(crate) fn reply_to_py<'py>(py: Python<'py>, r: Reply) -> PyResult<Bound<'py, PyAny>> {
    Ok(match r {
        Reply::Simple(b) | Reply::Verbatim { text: b, .. } => {
            PyString::new(py, &String::from_utf8_lossy(&b)).into_any()
        }
        Reply::Bulk(b) | Reply::BigNumber(b) => PyBytes::new(py, &b).into_any(),
        Reply::Integer(n) => n.into_pyobject(py)?.into_any(),
        Reply::Double(x) => x.into_pyobject(py)?.into_any(),
        Reply::Boolean(t) => t.into_pyobject(py)?.to_owned().into_any(),
        Reply::Null | Reply::NullArray => py.None().into_bound(py),
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => {
            let list = PyList::empty(py);
            for i in items {
                list.append(reply_to_py(py, i)?)?;
            }
            list.into_any()
        }
        Reply::Map(pairs) => {
            let d = PyDict::new(py);
            for (k, v) in pairs {
                d.set_item(reply_to_py(py, k)?, reply_to_py(py, v)?)?;
            }
            d.into_any()
        }
        Reply::Attribute { reply, .. } => reply_to_py(py, *reply)?,
        Reply::Error(m) | Reply::BlobError(m) => {
            return Err(server_error(
                py,
                "BAD_REQUEST",
                &String::from_utf8_lossy(&m),
            ))
        }
    })
}

/// `MEMGEST KEY`'s fields as `(name, kind, version)`.
pub(crate) fn memgest_key_of(v: Option<Vec<String>>) -> PyResult<Option<(String, String, String)>> {
    match v {
        None => Ok(None),
        Some(v) => match <[String; 3]>::try_from(v) {
            Ok([name, kind, version]) => Ok(Some((name, kind, version))),
            Err(v) => Err(ProtocolError::new_err(format!(
                "MEMGEST KEY: expected [name, kind, version], got {v:?}"
            ))),
        },
    }
}

/// `MEMGEST LIST`'s reply as a list of dicts (see `Cluster.memgest_list`).
pub(crate) fn memgest_rows_of(py: Python<'_>, reply: Reply) -> PyResult<Bound<'_, PyList>> {
    let bad = |r: &Reply| ProtocolError::new_err(format!("MEMGEST LIST: {r:?}"));
    let rows = match reply {
        Reply::Array(rows) => rows,
        Reply::Error(m) => {
            return Err(server_error(
                py,
                "BAD_REQUEST",
                &String::from_utf8_lossy(&m),
            ))
        }
        other => return Err(bad(&other)),
    };
    let out = PyList::empty(py);
    for row in rows {
        let Reply::Array(f) = &row else {
            return Err(bad(&row));
        };
        let (
            Some(name),
            Some(kind),
            Some(Reply::Integer(default)),
            Some(Reply::Integer(keys)),
            Some(Reply::Integer(closing)),
        ) = (
            f.first().and_then(text_of),
            f.get(1).and_then(text_of),
            f.get(2),
            f.get(3),
            f.get(4),
        )
        else {
            return Err(bad(&row));
        };
        let d = PyDict::new(py);
        d.set_item("name", name)?;
        d.set_item("kind", kind)?;
        d.set_item("default", *default != 0)?;
        d.set_item("keys", *keys)?;
        d.set_item("closing", *closing != 0)?;
        out.append(d)?;
    }
    Ok(out)
}

/// `MEMGEST INFO`'s report text.
pub(crate) fn memgest_info_of(py: Python<'_>, reply: Reply) -> PyResult<String> {
    match reply {
        Reply::Bulk(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Reply::Error(m) => Err(server_error(
            py,
            "BAD_REQUEST",
            &String::from_utf8_lossy(&m),
        )),
        other => Err(ProtocolError::new_err(format!("MEMGEST INFO: {other:?}"))),
    }
}

impl Cluster {
    /// Run `fut` on the runtime with the GIL released; a client error becomes its exception.
    fn run<T, F>(&self, py: Python<'_>, fut: F) -> PyResult<T>
    where
        F: std::future::Future<Output = Result<T, Error>> + Send,
        T: Send,
    {
        py.detach(|| self.rt.block_on(fut))
            .map_err(|e| to_py(py, e))
    }

    /// The id of memgest `name`, refreshing the map once if the cached one does not know it
    /// (it may have been created by another client since).
    fn memgest_id(&self, py: Python<'_>, name: &str) -> PyResult<ringlet_types::MemgestId> {
        if let Some(id) = self.client.memgest(name) {
            return Ok(id);
        }
        self.run(py, self.client.refresh_map())?;
        self.client.memgest(name).ok_or_else(|| {
            ConfigError::new_err(format!(
                "no memgest named '{name}' in the cluster map (see memgest_list())"
            ))
        })
    }
    /// The options of a SET with `memgest` (a name), `ex` (seconds) or `px` (milliseconds),
    /// checked as redis-py's `set` checks them (shared by `Cluster.set` and pipelines).
    pub(crate) fn set_options(
        &self,
        py: Python<'_>,
        memgest: Option<&str>,
        ex: Option<f64>,
        px: Option<u64>,
        nx: bool,
        xx: bool,
    ) -> PyResult<ringlet_client::SetOptions> {
        let mut opts = ringlet_client::SetOptions::default();
        match (nx, xx) {
            (true, true) => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "nx and xx are mutually exclusive",
                ))
            }
            (true, false) => opts = opts.nx(),
            (false, true) => opts = opts.xx(),
            (false, false) => {}
        }
        if let Some(name) = memgest {
            opts = opts.memgest(self.memgest_id(py, name)?);
        }
        let ttl_ms = match (ex, px) {
            (Some(_), Some(_)) => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "give ex or px, not both",
                ))
            }
            // Whole milliseconds; NaN, infinities and anything not positive are refused.
            (Some(s), None) if s.is_finite() && s * 1000.0 >= 1.0 && s * 1000.0 < 9.0e15 => {
                Some((s * 1000.0) as u64)
            }
            (Some(_), None) => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "ex must be a positive number of seconds",
                ))
            }
            (None, Some(0)) => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "px must be a positive number of milliseconds",
                ))
            }
            (None, p) => p,
        };
        if let Some(ms) = ttl_ms {
            opts = opts.ttl(std::time::Duration::from_millis(ms));
        }
        Ok(opts)
    }
}

#[pymethods]
impl Cluster {
    #[new]
    #[pyo3(signature = (seeds, quorum_reads = false, timeout = None, tls_ca_file = None, password = None, username = None))]
    pub(crate) fn new(
        py: Python<'_>,
        seeds: Vec<String>,
        quorum_reads: bool,
        timeout: Option<f64>,
        tls_ca_file: Option<std::path::PathBuf>,
        password: Option<String>,
        username: Option<String>,
    ) -> PyResult<Cluster> {
        let mut cfg = ClusterConfig {
            read_mode: if quorum_reads {
                ReadMode::Quorum
            } else {
                ReadMode::Coordinator
            },
            ..ClusterConfig::default()
        };
        if let Some(t) = timeout {
            cfg.client.timeout = Duration::try_from_secs_f64(t)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| ConfigError::new_err("timeout must be a positive number"))?;
        }
        cfg.client.auth = match (password, username) {
            (Some(password), user) => Some(ringlet_client::Credentials {
                user: user.unwrap_or_default(),
                password,
            }),
            (None, Some(_)) => {
                return Err(ConfigError::new_err("username needs a password"));
            }
            (None, None) => None,
        };
        if let Some(ca) = &tls_ca_file {
            cfg.client.tls =
                Some(ringlet_client::ClientTls::from_ca_file(ca).map_err(|e| to_py(py, e))?);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ringlet-py-client")
            .enable_all()
            .build()
            .map_err(|e| ConfigError::new_err(format!("cannot start the client runtime: {e}")))?;
        let client = {
            let refs: Vec<&str> = seeds.iter().map(String::as_str).collect();
            py.detach(|| rt.block_on(ClusterClient::connect(&refs, cfg)))
                .map_err(|e| to_py(py, e))?
        };
        Ok(Cluster {
            rt: ClientRuntime(Some(rt)),
            client,
            seeds,
        })
    }

    pub(crate) fn __repr__(&self) -> String {
        format!(
            "ringlet.Cluster(seeds={:?}, quorum_reads={}, epoch={})",
            self.seeds,
            if self.client.config().read_mode == ReadMode::Quorum {
                "True"
            } else {
                "False"
            },
            self.client.epoch().0
        )
    }

    /// The value of ``key``, or ``None`` if it does not exist.
    ///
    /// Reads at the key's coordinator, or by quorum if the ``Cluster`` was made with
    /// ``quorum_reads=True``.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = bytes_of(key, "key")?;
        let v = self.run(py, self.client.get(&key))?;
        Ok(v.value.map(|b| PyBytes::new(py, &b)))
    }

    /// Store ``value`` under ``key``, in memgest ``memgest`` (a name such as ``"rep:3"`` or
    /// one made by ``memgest_create``) or, if ``None``, the cluster's default memgest; with
    /// ``ex`` (seconds, int or float) or ``px`` (milliseconds) the key expires after that
    /// long, as redis-py's ``set(..., ex=, px=)``.
    ///
    /// With ``nx=True`` the key is stored only if it does not exist, with ``xx=True`` only if
    /// it does (checked and written under the key's lock on its coordinator).
    ///
    /// Returns ``True`` if the value was stored, ``None`` if ``nx``/``xx`` prevented it (as
    /// redis-py's ``set``).
    ///
    /// Raises:
    ///     ConfigError: no memgest of that name.
    ///     TooLargeError: the key or value exceeds the limits.
    ///     ValueError: ``ex`` and ``px`` both given, or not positive; ``nx`` and ``xx`` both.
    #[pyo3(signature = (key, value, memgest = None, ex = None, px = None, nx = false, xx = false))]
    #[allow(clippy::too_many_arguments)] // redis-py's keyword arguments
    fn set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        memgest: Option<&str>,
        ex: Option<f64>,
        px: Option<u64>,
        nx: bool,
        xx: bool,
    ) -> PyResult<Option<bool>> {
        let key = bytes_of(key, "key")?;
        let value = bytes_of(value, "value")?;
        let opts = self.set_options(py, memgest, ex, px, nx, xx)?;
        let r = self.run(py, self.client.set(&key, &value, opts))?;
        Ok(stored(r.value))
    }

    /// ``(value, version)`` of ``key``, or ``None`` if it does not exist: the version to
    /// pass to ``cas`` (an int; versions only grow).
    fn get_versioned<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, u128)>> {
        let key = bytes_of(key, "key")?;
        let v = self.run(py, self.client.get(&key))?;
        Ok(v.value.map(|b| (PyBytes::new(py, &b), v.version.0)))
    }

    /// Compare-and-set: store ``value`` under ``key`` only if the key's current version is
    /// ``version`` (from ``get_versioned``; ``0`` means "only if absent"). Decided by the
    /// key's coordinator against its newest write, writes in flight included, so no other
    /// write can come in between. ``memgest``, ``ex`` and ``px`` as for ``set``.
    ///
    /// Returns ``(True, new_version)`` if stored, ``(False, current_version)`` otherwise
    /// (``current_version`` is read after the refusal: retry with it).
    #[pyo3(signature = (key, value, version, memgest = None, ex = None, px = None))]
    #[allow(clippy::too_many_arguments)]
    fn cas(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        version: u128,
        memgest: Option<&str>,
        ex: Option<f64>,
        px: Option<u64>,
    ) -> PyResult<(bool, u128)> {
        let key = bytes_of(key, "key")?;
        let value = bytes_of(value, "value")?;
        let opts = self
            .set_options(py, memgest, ex, px, false, false)?
            .cas(ringlet_types::Version(version));
        let r = self.run(py, self.client.set(&key, &value, opts))?;
        Ok((
            matches!(r.value, ringlet_client::SetOutcome::Stored),
            r.version.0,
        ))
    }

    /// Follow the link fields ``links`` breadth-first from ``key`` up to ``depth`` hops (the
    /// server's CHASE, one round trip; one-sided on this host when the client can): a list
    /// of ``(key, depth, {attribute: value})`` in BFS order, each item once, and why the walk
    /// stopped (``"complete"``, ``"limit"``, ``"bytes"`` or ``"time"``). ``fields`` limits
    /// the attributes returned. Records and links are written with any Redis client
    /// (``HSET``, ``LINK SET key field target``, ``LINK ADD ...``).
    ///
    /// Raises:
    ///     ServerError: bad arguments (the node's text), a key that is not a record.
    #[pyo3(signature = (key, links, depth = 1, limit = None, fields = None))]
    fn chase<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        links: Vec<Bound<'py, PyAny>>,
        depth: u32,
        limit: Option<u32>,
        fields: Option<Vec<Bound<'py, PyAny>>>,
    ) -> PyResult<(Bound<'py, PyList>, String)> {
        let key = bytes_of(key, "key")?;
        let links = links
            .iter()
            .map(|l| bytes_of(l, "link"))
            .collect::<PyResult<Vec<_>>>()?;
        let mut opts = ringlet_client::ChaseOptions::default().depth(depth);
        if let Some(l) = limit {
            opts = opts.limit(l);
        }
        if let Some(f) = fields {
            let f = f
                .iter()
                .map(|x| bytes_of(x, "field"))
                .collect::<PyResult<Vec<_>>>()?;
            opts = opts.fields(&f);
        }
        let r = self.run(py, self.client.chase(&key, &links, &opts))?;
        let out = PyList::empty(py);
        for e in &r.value.entries {
            let attrs = PyDict::new(py);
            for (n, v) in &e.attrs {
                attrs.set_item(PyBytes::new(py, n), PyBytes::new(py, v))?;
            }
            out.append((PyBytes::new(py, &e.key), e.depth, attrs))?;
        }
        Ok((out, r.value.stop.as_str().to_string()))
    }

    /// Add ``amount`` (default 1, may be negative) to the integer stored at ``key`` and return
    /// the new value, as redis-py's ``incr(key, amount)``; a missing key counts as 0 and the
    /// key keeps its TTL.
    ///
    /// Raises:
    ///     ServerError: the value is not an integer, or the result would overflow.
    #[pyo3(signature = (key, amount = 1))]
    fn incr(&self, py: Python<'_>, key: &Bound<'_, PyAny>, amount: i64) -> PyResult<i64> {
        let key = bytes_of(key, "key")?;
        Ok(self.run(py, self.client.incr_by(&key, amount))?.value)
    }

    /// Delete ``key`` (writes a tombstone). ``True`` if it existed.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = bytes_of(key, "key")?;
        let r = self.run(py, self.client.del(&key))?;
        Ok(r.value == ringlet_client::DelOutcome::Deleted)
    }

    /// The values of ``keys`` (any slots), in order; ``None`` for a missing key.
    ///
    /// Keys are grouped by coordinator and every node's batches are sent at once (quorum
    /// mode: one quorum read per key, all at once).
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
        let vals = self.run(py, self.client.mget(&ks))?;
        let out = PyList::empty(py);
        for v in vals {
            match v.value {
                Some(b) => out.append(PyBytes::new(py, &b))?,
                None => out.append(py.None())?,
            }
        }
        Ok(out)
    }

    /// Store every ``key: value`` of ``mapping`` (any slots), all at once in the default
    /// memgest. Not atomic: if one write fails its error is raised, and others may have been
    /// stored.
    fn mset(&self, py: Python<'_>, mapping: &Bound<'_, PyAny>) -> PyResult<()> {
        let items = mapping.call_method0("items")?;
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for kv in items.try_iter()? {
            let kv = kv?;
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = kv.extract()?;
            pairs.push((bytes_of(&k, "key")?, bytes_of(&v, "value")?));
        }
        let results = py.detach(|| self.rt.block_on(self.client.mset(&pairs)));
        for r in results {
            r.map_err(|e| to_py(py, e))?;
        }
        Ok(())
    }

    /// A pipeline on this cluster: queue commands, then ``execute()`` sends them all at
    /// once (one round trip per node for commands on distinct keys) and returns one result
    /// per command, in order. See :class:`Pipeline`.
    fn pipeline(slf: &Bound<'_, Self>) -> crate::pipeline::Pipeline {
        crate::pipeline::Pipeline::new(slf.clone().unbind())
    }

    /// The epoch of the cached cluster map (it grows with every map change).
    fn epoch(&self) -> u64 {
        self.client.epoch().0
    }

    /// Fetch the cluster map now.
    fn refresh_map(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, self.client.refresh_map())
    }

    /// Create memgest ``name`` of ``kind``: ``"rep:R"`` (R replicas) or ``"ec:K+M"``
    /// (erasure coded, K data + M parity). The map is refreshed so that ``set(...,
    /// memgest=name)`` can use it at once.
    ///
    /// Raises:
    ///     ConfigError: ``kind`` does not parse, or is ``"none"`` (that memgest always
    ///         exists).
    ///     ServerError: the cluster refused (name taken, shape does not fit the placement
    ///         groups, ...).
    fn memgest_create(&self, py: Python<'_>, name: &str, kind: &str) -> PyResult<()> {
        let kind = MemgestKind::parse(kind).map_err(|e| ConfigError::new_err(e.to_string()))?;
        self.run(py, self.client.memgest_create(name, kind))
    }

    /// Drop memgest ``name`` (refused with ``ServerError`` while keys live in it).
    fn memgest_drop(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.run(py, self.client.memgest_drop(name))
    }

    /// Make ``name`` the memgest of writes that name none.
    fn memgest_default(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.run(py, self.client.memgest_default(name))
    }

    /// Move ``key`` into memgest ``name``, atomically on the key's coordinator.
    ///
    /// Raises:
    ///     ServerError: no such key or memgest.
    fn memgest_move(&self, py: Python<'_>, key: &Bound<'_, PyAny>, name: &str) -> PyResult<()> {
        let key = bytes_of(key, "key")?;
        self.run(py, self.client.memgest_move(&key, name))
    }

    /// ``(memgest name, kind, version)`` of ``key``, or ``None`` if it does not exist.
    fn memgest_key(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(String, String, String)>> {
        let key = bytes_of(key, "key")?;
        memgest_key_of(self.run(py, self.client.memgest_key(&key))?)
    }

    /// Every memgest of the cluster: a list of dicts with ``name`` (str), ``kind`` (str,
    /// e.g. ``"rep:3"``), ``default`` (bool), ``keys`` (int) and ``closing`` (bool: being
    /// dropped).
    fn memgest_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let reply = self.run(py, self.client.memgest_command(&[b"LIST"]))?;
        memgest_rows_of(py, reply)
    }

    /// ``MEMGEST INFO [name]``: the report text (keys, bytes, failures tolerated, Ring's
    /// reliability model) of one memgest or of all.
    #[pyo3(signature = (name = None))]
    fn memgest_info(&self, py: Python<'_>, name: Option<&str>) -> PyResult<String> {
        let mut args: Vec<&[u8]> = vec![b"INFO"];
        if let Some(n) = name {
            args.push(n.as_bytes());
        }
        memgest_info_of(py, self.run(py, self.client.memgest_command(&args))?)
    }

    /// ``MEMGEST *args`` as sent (``bytes`` or ``str`` each); the reply as Python values
    /// (``str`` for status replies, ``bytes`` for bulk strings, ``int``, ``list``, ``None``).
    /// A refusal raises ``ServerError``.
    #[pyo3(signature = (*args))]
    fn memgest_command<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let argv = args
            .iter()
            .map(|a| bytes_of(&a, "argument"))
            .collect::<PyResult<Vec<Vec<u8>>>>()?;
        let reply = self.run(py, self.client.memgest_command(&argv))?;
        reply_to_py(py, reply)
    }

    /// ``execute_command``-style (arguments ``bytes``, ``str``, ``int`` or ``float``, as
    /// redis-py encodes them): any command the nodes serve (``HSET``, ``EXPIRE``,
    /// ``TTL``, ``LINK SET``, ``HGETALL``, ...), sent over the native protocol's COMMAND
    /// opcode to the node that serves its keys (routed by the command table; keyless
    /// commands to any node; keys in several slots raise ``ServerError`` with CROSSSLOT
    /// before sending). The reply as :meth:`memgest_command` gives it (RESP3 shapes:
    /// ``HGETALL`` is a ``dict``); an error reply raises ``ServerError``. Commands that need
    /// a RESP connection's state (SUBSCRIBE, MULTI, SELECT, HELLO) raise too.
    #[pyo3(signature = (*args))]
    fn command<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let argv = args
            .iter()
            .map(|a| command_arg(&a))
            .collect::<PyResult<Vec<Vec<u8>>>>()?;
        let reply = self.run(py, self.client.command(&argv))?;
        reply_to_py(py, reply)
    }
}

/// redis-py's SET result: ``True`` if stored, ``None`` if NX/XX prevented it.
pub(crate) fn stored(o: ringlet_client::SetOutcome) -> Option<bool> {
    match o {
        ringlet_client::SetOutcome::Stored => Some(true),
        _ => None,
    }
}
