//! `ringlet.Pipeline` (from `Cluster.pipeline()`): a queue of commands over
//! [`ringlet_client::Pipeline`], run by `execute()` all at once — reads batched into one MGET
//! frame per node, writes in flight together — with one result per command, in order.
//! How commands on the same key keep their order is in crates/client/src/pipeline.rs.
//!
//! As redis-py's pipeline: queueing methods return the pipeline (chainable), `execute()`
//! empties it, and with `raise_on_error=True` (the default) the first failed command's
//! exception is raised after every command ran, its message prefixed with the command's
//! position; with `False` the exceptions are returned in place of results. Unlike redis-py's
//! default, not a transaction: there is no `transaction=` argument, since the cluster has no
//! MULTI/EXEC across nodes.

use std::sync::Mutex;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use ringlet_client::{PipelineOp, PipelineReply};

use crate::cluster::{bytes_of, Cluster};
use crate::error::to_py;

/// A batch of commands for one round trip per node; from :meth:`Cluster.pipeline`.
///
/// Queue with ``get``, ``mget``, ``set``, ``delete``, ``incr`` (each returns the pipeline,
/// so calls chain), then ``execute()``. Commands on distinct keys are all sent at once;
/// a command that reads or writes a key an earlier queued command writes waits for it (one
/// more round trip), so results are what running them one by one would give. Not atomic.
///
/// Arguments that cannot be sent (wrong types, keys or values past the limits, an unknown
/// memgest) raise at once, when queued.
#[pyclass(module = "ringlet", frozen, subclass)]
pub struct Pipeline {
    cluster: Py<Cluster>,
    queue: Mutex<ringlet_client::Pipeline>,
}

impl Pipeline {
    pub(crate) fn new(cluster: Py<Cluster>) -> Pipeline {
        Pipeline {
            cluster,
            queue: Mutex::new(ringlet_client::Pipeline::new()),
        }
    }

    /// The queue. Only ever locked with the GIL held and never across a detach, so the GIL
    /// serialises it and the lock is never contended.
    pub(crate) fn queue(&self) -> std::sync::MutexGuard<'_, ringlet_client::Pipeline> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push<'py>(slf: &Bound<'py, Self>, op: PipelineOp) -> PyResult<Bound<'py, Self>> {
        let py = slf.py();
        slf.get().queue().push(op).map_err(|e| to_py(py, e))?;
        Ok(slf.clone())
    }
}

pub(crate) fn op_name(op: &PipelineOp) -> &'static str {
    match op {
        PipelineOp::Get(_) => "GET",
        PipelineOp::Mget(_) => "MGET",
        PipelineOp::Set { .. } => "SET",
        PipelineOp::Del(_) => "DEL",
        PipelineOp::IncrBy { .. } => "INCRBY",
    }
}

fn reply_to_py<'py>(py: Python<'py>, r: PipelineReply) -> PyResult<Bound<'py, PyAny>> {
    Ok(match r {
        PipelineReply::Value(Some(b)) => PyBytes::new(py, &b).into_any(),
        PipelineReply::Set(o) => match crate::cluster::stored(o) {
            Some(b) => b.into_pyobject(py)?.to_owned().into_any(),
            None => py.None().into_bound(py),
        },
        PipelineReply::Value(None) => py.None().into_bound(py),
        PipelineReply::Del(o) => (o == ringlet_client::DelOutcome::Deleted)
            .into_pyobject(py)?
            .to_owned()
            .into_any(),
        PipelineReply::Values(vs) => {
            let list = PyList::empty(py);
            for v in vs {
                match v {
                    Some(b) => list.append(PyBytes::new(py, &b))?,
                    None => list.append(py.None())?,
                }
            }
            list.into_any()
        }
        PipelineReply::Int(n) => n.into_pyobject(py)?.into_any(),
    })
}

/// The results of `execute` as a Python list; with `raise_on_error`, the first failure is
/// raised instead (after every command ran). `names[i]` is command `i`'s name.
pub(crate) fn results_to_py<'py>(
    py: Python<'py>,
    names: &[&'static str],
    results: Vec<Result<PipelineReply, ringlet_client::Error>>,
    raise_on_error: bool,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let mut first_err: Option<PyErr> = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(reply) => out.append(reply_to_py(py, reply)?)?,
            Err(e) => {
                let err = to_py(py, e);
                let text = format!(
                    "Command # {} ({}) of pipeline caused error: {}",
                    i + 1,
                    names.get(i).copied().unwrap_or("?"),
                    err.value(py)
                );
                // `args` is what str(exc) shows; setting it fails only without memory.
                let _ = err.value(py).setattr("args", (text,));
                out.append(err.value(py))?;
                if first_err.is_none() {
                    first_err = Some(err);
                }
            }
        }
    }
    match first_err {
        Some(e) if raise_on_error => Err(e),
        _ => Ok(out),
    }
}

#[pymethods]
impl Pipeline {
    fn __repr__(&self) -> String {
        format!("<ringlet.Pipeline of {} commands>", self.queue().len())
    }

    fn __len__(&self) -> usize {
        self.queue().len()
    }

    fn __enter__<'py>(slf: &Bound<'py, Self>) -> Bound<'py, Self> {
        slf.clone()
    }

    /// Leaving a ``with`` block drops what was queued and not executed.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.queue().clear();
        false
    }

    /// Drop every queued command.
    fn reset(&self) {
        self.queue().clear();
    }

    /// Queue ``GET key``; its result is ``bytes`` or ``None``.
    fn get<'py>(slf: &Bound<'py, Self>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        let key = bytes_of(key, "key")?;
        Self::push(slf, PipelineOp::Get(key))
    }

    /// Queue an MGET of ``keys`` (any slots); its result is a list of ``bytes`` or ``None``.
    fn mget<'py>(slf: &Bound<'py, Self>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        if keys.is_instance_of::<PyString>() || keys.is_instance_of::<PyBytes>() {
            return Err(PyTypeError::new_err(
                "keys must be an iterable of keys, not a single key",
            ));
        }
        let ks = keys
            .try_iter()?
            .map(|k| bytes_of(&k?, "key"))
            .collect::<PyResult<Vec<Vec<u8>>>>()?;
        Self::push(slf, PipelineOp::Mget(ks))
    }

    /// Queue a SET, with the arguments of :meth:`Cluster.set`; its result is ``True`` if
    /// stored, ``None`` if ``nx``/``xx`` prevented it.
    #[pyo3(signature = (key, value, memgest = None, ex = None, px = None, nx = false, xx = false))]
    #[allow(clippy::too_many_arguments)] // redis-py's keyword arguments
    fn set<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        memgest: Option<&str>,
        ex: Option<f64>,
        px: Option<u64>,
        nx: bool,
        xx: bool,
    ) -> PyResult<Bound<'py, Self>> {
        let key = bytes_of(key, "key")?;
        let value = bytes_of(value, "value")?;
        let opts = slf
            .get()
            .cluster
            .get()
            .set_options(slf.py(), memgest, ex, px, nx, xx)?;
        Self::push(slf, PipelineOp::Set { key, value, opts })
    }

    /// Queue a DEL; its result is ``True`` if the key existed.
    fn delete<'py>(slf: &Bound<'py, Self>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        let key = bytes_of(key, "key")?;
        Self::push(slf, PipelineOp::Del(key))
    }

    /// Queue an INCRBY ``amount``; its result is the new value.
    #[pyo3(signature = (key, amount = 1))]
    fn incr<'py>(
        slf: &Bound<'py, Self>,
        key: &Bound<'py, PyAny>,
        amount: i64,
    ) -> PyResult<Bound<'py, Self>> {
        let key = bytes_of(key, "key")?;
        Self::push(slf, PipelineOp::IncrBy { key, delta: amount })
    }

    /// Send every queued command and return their results, in order; the pipeline is empty
    /// after (also when it raises).
    ///
    /// Args:
    ///     raise_on_error: raise the first failed command's exception (after all ran),
    ///         its message starting ``Command # N (OP) of pipeline caused error:``; if
    ///         ``False``, a failed command's exception is its result.
    #[pyo3(signature = (raise_on_error = true))]
    fn execute<'py>(&self, py: Python<'py>, raise_on_error: bool) -> PyResult<Bound<'py, PyList>> {
        let ops = self.queue().take();
        let names: Vec<&'static str> = ops.iter().map(op_name).collect();
        let cluster = self.cluster.get();
        let results = py.detach(|| {
            cluster
                .rt
                .block_on(ringlet_client::pipeline::execute(&cluster.client, ops))
        });
        results_to_py(py, &names, results, raise_on_error)
    }
}
