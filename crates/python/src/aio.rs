//! `ringlet.AsyncCluster`: the methods of `ringlet.Cluster` as asyncio awaitables.
//!
//! ```text
//!  event loop thread                         the Cluster's tokio runtime (1 worker)
//!  ─────────────────                         ─────────────────────────────────────
//!  await c.get(k):
//!    copy k, fut = loop.create_future()
//!    runtime.spawn(task) ───────────────────▶ ClusterClient::get(k).await
//!    return fut (the loop runs on)                   │ done: take the GIL, convert
//!                                                    ▼
//!  _resolve(fut, ok, value) ◀── loop.call_soon_threadsafe(_resolve, fut, ok, value)
//! ```
//!
//! Why our own bridge rather than pyo3-async-runtimes: it is the 20 lines above over the
//! runtime the package already has, with no second runtime, no extra dependency to keep in
//! step with PyO3's releases, and the future is resolved on the loop's own thread, which is
//! all asyncio asks (`call_soon_threadsafe`).
//!
//! What it trades: the worker takes the GIL to convert each result, so a loop thread that
//! keeps the GIL busy delays completions by up to Python's switch interval (5 ms); and
//! cancelling the awaitable does not recall a request already sent (its result is dropped:
//! `_resolve` skips a future that is done).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use ringlet_client::Error;
use ringlet_types::MemgestKind;

use crate::cluster::{
    bytes_of, memgest_info_of, memgest_key_of, memgest_rows_of, reply_to_py, Cluster,
};
use crate::error::{to_py, ConfigError};
use crate::pipeline::{op_name, results_to_py, Pipeline};

/// Set `fut`'s result (`ok`) or exception, unless it is already done (cancelled).
#[pyfunction]
pub(crate) fn _resolve(fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if fut.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    if ok {
        fut.call_method1("set_result", (value,))?;
    } else {
        fut.call_method1("set_exception", (value,))?;
    }
    Ok(())
}

static RESOLVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// An asyncio client of a running Ringlet cluster: the methods of :class:`Cluster`, each
/// returning an awaitable.
///
/// Made with the arguments of :class:`Cluster`; the constructor connects and fetches the
/// cluster map before it returns (blocking, GIL released), so make it at start-up, not
/// inside a busy loop. Its calls run on the client's own runtime thread and complete on the
/// event loop that awaited them. Use it from one or several event loops.
///
/// Cancelling an awaitable does not recall a request already sent; a write may still apply.
#[pyclass(module = "ringlet", frozen)]
pub struct AsyncCluster {
    cluster: Py<Cluster>,
}

impl AsyncCluster {
    /// A future of the running loop that `fut`'s outcome, converted by `convert`, resolves.
    fn spawn<'py, T, F, C>(
        &self,
        py: Python<'py>,
        fut: F,
        convert: C,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: std::future::Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
        C: for<'a> FnOnce(Python<'a>, T) -> PyResult<Bound<'a, PyAny>> + Send + 'static,
    {
        let get_loop = GET_RUNNING_LOOP.import(py, "asyncio", "get_running_loop")?;
        // Raises RuntimeError outside a coroutine, as asyncio's own calls do.
        let ev_loop = get_loop.call0()?;
        let py_fut = ev_loop.call_method0("create_future")?;
        let resolve = RESOLVE
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(wrap_pyfunction!(_resolve, py)?.into_any().unbind())
            })?
            .clone_ref(py);
        let (ev_loop, target) = (ev_loop.unbind(), py_fut.clone().unbind());
        self.cluster.get().rt.spawn(async move {
            let outcome = fut.await;
            Python::attach(|py| {
                let (ok, value) = match outcome
                    .map_err(|e| to_py(py, e))
                    .and_then(|t| convert(py, t))
                {
                    Ok(v) => (true, v),
                    Err(e) => (false, e.into_value(py).into_bound(py).into_any()),
                };
                // Fails only if the loop was closed meanwhile: no one awaits the result.
                let _ =
                    ev_loop.call_method1(py, "call_soon_threadsafe", (resolve, target, ok, value));
            });
        });
        Ok(py_fut)
    }

    fn client(&self) -> ringlet_client::ClusterClient {
        self.cluster.get().client.clone()
    }
}

fn none(py: Python<'_>, _: ()) -> PyResult<Bound<'_, PyAny>> {
    Ok(py.None().into_bound(py))
}

#[pymethods]
impl AsyncCluster {
    #[new]
    #[pyo3(signature = (seeds, quorum_reads = false, timeout = None, tls_ca_file = None, password = None, username = None))]
    fn new(
        py: Python<'_>,
        seeds: Vec<String>,
        quorum_reads: bool,
        timeout: Option<f64>,
        tls_ca_file: Option<std::path::PathBuf>,
        password: Option<String>,
        username: Option<String>,
    ) -> PyResult<AsyncCluster> {
        let c = Cluster::new(
            py,
            seeds,
            quorum_reads,
            timeout,
            tls_ca_file,
            password,
            username,
        )?;
        Ok(AsyncCluster {
            cluster: Py::new(py, c)?,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "ringlet.Async{}",
            &self.cluster.get().__repr__()["ringlet.".len()..]
        )
    }

    /// Awaitable: the value of ``key``, or ``None``.
    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = bytes_of(key, "key")?;
        let c = self.client();
        self.spawn(py, async move { c.get(&key).await }, |py, v| {
            Ok(match v.value {
                Some(b) => PyBytes::new(py, &b).into_any(),
                None => py.None().into_bound(py),
            })
        })
    }

    /// Awaitable: store ``value`` under ``key`` (arguments as :meth:`Cluster.set`).
    #[pyo3(signature = (key, value, memgest = None, ex = None, px = None, nx = false, xx = false))]
    #[allow(clippy::too_many_arguments)] // redis-py's keyword arguments
    fn set<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        memgest: Option<&str>,
        ex: Option<f64>,
        px: Option<u64>,
        nx: bool,
        xx: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = bytes_of(key, "key")?;
        let value = bytes_of(value, "value")?;
        let opts = self
            .cluster
            .get()
            .set_options(py, memgest, ex, px, nx, xx)?;
        let c = self.client();
        self.spawn(
            py,
            async move { c.set(&key, &value, opts).await },
            |py, r| {
                Ok(match crate::cluster::stored(r.value) {
                    Some(b) => b.into_pyobject(py)?.to_owned().into_any(),
                    None => py.None().into_bound(py),
                })
            },
        )
    }

    /// Awaitable: add ``amount`` to the integer at ``key``; the new value.
    #[pyo3(signature = (key, amount = 1))]
    fn incr<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        amount: i64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = bytes_of(key, "key")?;
        let c = self.client();
        self.spawn(py, async move { c.incr_by(&key, amount).await }, |py, v| {
            Ok(v.value.into_pyobject(py)?.into_any())
        })
    }

    /// Awaitable: delete ``key``; ``True`` if it existed.
    fn delete<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = bytes_of(key, "key")?;
        let c = self.client();
        self.spawn(py, async move { c.del(&key).await }, |py, r| {
            let existed = r.value == ringlet_client::DelOutcome::Deleted;
            Ok(existed.into_pyobject(py)?.to_owned().into_any())
        })
    }

    /// Awaitable: the values of ``keys`` (any slots), in order.
    fn mget<'py>(&self, py: Python<'py>, keys: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if keys.is_instance_of::<PyString>() || keys.is_instance_of::<PyBytes>() {
            return Err(PyTypeError::new_err(
                "keys must be an iterable of keys, not a single key",
            ));
        }
        let ks = keys
            .try_iter()?
            .map(|k| bytes_of(&k?, "key"))
            .collect::<PyResult<Vec<Vec<u8>>>>()?;
        let c = self.client();
        self.spawn(py, async move { c.mget(&ks).await }, |py, vals| {
            let out = PyList::empty(py);
            for v in vals {
                match v.value {
                    Some(b) => out.append(PyBytes::new(py, &b))?,
                    None => out.append(py.None())?,
                }
            }
            Ok(out.into_any())
        })
    }

    /// Awaitable: store every ``key: value`` of ``mapping`` (not atomic; the first error is
    /// raised).
    fn mset<'py>(
        &self,
        py: Python<'py>,
        mapping: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let items = mapping.call_method0("items")?;
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for kv in items.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = kv?.extract()?;
            pairs.push((bytes_of(&k, "key")?, bytes_of(&v, "value")?));
        }
        let c = self.client();
        self.spawn(
            py,
            async move {
                for r in c.mset(&pairs).await {
                    r?;
                }
                Ok(())
            },
            none,
        )
    }

    /// A pipeline whose ``execute()`` is awaitable (see :class:`AsyncPipeline`).
    fn pipeline<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, AsyncPipeline>> {
        let base = Pipeline::new(slf.get().cluster.clone_ref(slf.py()));
        Bound::new(
            slf.py(),
            PyClassInitializer::from(base).add_subclass(AsyncPipeline {
                owner: slf.clone().unbind(),
            }),
        )
    }

    /// The epoch of the cached cluster map (not awaitable: no I/O).
    fn epoch(&self) -> u64 {
        self.cluster.get().client.epoch().0
    }

    /// Awaitable: fetch the cluster map now.
    fn refresh_map<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.client();
        self.spawn(py, async move { c.refresh_map().await }, none)
    }

    /// Awaitable: create memgest ``name`` of ``kind`` (as :meth:`Cluster.memgest_create`).
    fn memgest_create<'py>(
        &self,
        py: Python<'py>,
        name: String,
        kind: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kind = MemgestKind::parse(kind).map_err(|e| ConfigError::new_err(e.to_string()))?;
        let c = self.client();
        self.spawn(py, async move { c.memgest_create(&name, kind).await }, none)
    }

    /// Awaitable: drop memgest ``name``.
    fn memgest_drop<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let c = self.client();
        self.spawn(py, async move { c.memgest_drop(&name).await }, none)
    }

    /// Awaitable: make ``name`` the memgest of writes that name none.
    fn memgest_default<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let c = self.client();
        self.spawn(py, async move { c.memgest_default(&name).await }, none)
    }

    /// Awaitable: move ``key`` into memgest ``name``.
    fn memgest_move<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        name: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = bytes_of(key, "key")?;
        let c = self.client();
        self.spawn(py, async move { c.memgest_move(&key, &name).await }, none)
    }

    /// Awaitable: ``(memgest name, kind, version)`` of ``key``, or ``None``.
    fn memgest_key<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = bytes_of(key, "key")?;
        let c = self.client();
        self.spawn(py, async move { c.memgest_key(&key).await }, |py, v| {
            memgest_key_of(v)?.into_pyobject(py).map(Bound::into_any)
        })
    }

    /// Awaitable: every memgest, as :meth:`Cluster.memgest_list` gives them.
    fn memgest_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.client();
        self.spawn(
            py,
            async move { c.memgest_command(&[b"LIST"]).await },
            |py, r| memgest_rows_of(py, r).map(Bound::into_any),
        )
    }

    /// Awaitable: the ``MEMGEST INFO`` report of one memgest or of all.
    #[pyo3(signature = (name = None))]
    fn memgest_info<'py>(
        &self,
        py: Python<'py>,
        name: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.client();
        self.spawn(
            py,
            async move {
                let mut args: Vec<&[u8]> = vec![b"INFO"];
                if let Some(n) = &name {
                    args.push(n.as_bytes());
                }
                c.memgest_command(&args).await
            },
            |py, r| Ok(PyString::new(py, &memgest_info_of(py, r)?).into_any()),
        )
    }

    /// Awaitable: ``MEMGEST *args``, the reply as :meth:`Cluster.memgest_command` gives it.
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
        let c = self.client();
        self.spawn(
            py,
            async move { c.memgest_command(&argv).await },
            reply_to_py,
        )
    }

    /// Awaitable: any command, as :meth:`Cluster.command` runs it.
    #[pyo3(signature = (*args))]
    fn command<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let argv = args
            .iter()
            .map(|a| crate::cluster::command_arg(&a))
            .collect::<PyResult<Vec<Vec<u8>>>>()?;
        let c = self.client();
        self.spawn(py, async move { c.command(&argv).await }, reply_to_py)
    }
}

/// :class:`Pipeline` of an :class:`AsyncCluster`: queue commands as on a ``Pipeline``, then
/// ``await p.execute()``.
#[pyclass(module = "ringlet", frozen, extends = Pipeline)]
pub struct AsyncPipeline {
    owner: Py<AsyncCluster>,
}

#[pymethods]
impl AsyncPipeline {
    /// Awaitable: send every queued command; the results as :meth:`Pipeline.execute` gives
    /// them (the pipeline is emptied at once, when called).
    #[pyo3(signature = (raise_on_error = true))]
    fn execute<'py>(slf: &Bound<'py, Self>, raise_on_error: bool) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let ops = slf.as_super().get().queue().take();
        let names: Vec<&'static str> = ops.iter().map(op_name).collect();
        let owner = slf.get().owner.get();
        let c = owner.client();
        owner.spawn(
            py,
            async move { Ok(ringlet_client::pipeline::execute(&c, ops).await) },
            move |py, results| {
                results_to_py(py, &names, results, raise_on_error).map(Bound::into_any)
            },
        )
    }
}
