//! The async [`Client`]: a pool of pipelined connections per server address, deadlines,
//! retries with a budget, MOVED redirects, batched MGET.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ringlet_codec::native::{self, SetCond, SetRequest, Status};
use ringlet_types::{key_slot, limits, Epoch, MemgestId, Slot, Version};
use tokio::time::Instant;

use crate::config::ClientConfig;
use crate::conn::{Body, Conn, MgetEntry, Response};
use crate::error::Error;
use crate::retry::{Jitter, RetryBudget};

/// A result with the entry's version and the cluster-map epoch of the node that answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned<T> {
    /// The result proper.
    pub value: T,
    /// The entry's version (see `docs/protocol.md` §2.3 for what it is per operation).
    pub version: Version,
    /// The answering node's epoch.
    pub epoch: Epoch,
}

/// Outcome of a SET.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOutcome {
    /// Written; the version is the new one.
    Stored,
    /// The NX/XX condition was false.
    NotStored,
    /// CAS: the key's version differed; the version is the current one.
    CasMismatch,
}

/// Outcome of a DEL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelOutcome {
    /// Deleted; the version is the tombstone's.
    Deleted,
    /// There was no such key.
    NotFound,
    /// CAS: the key's version differed; the version is the current one.
    CasMismatch,
}

/// Options of [`Client::set`]. `SetOptions::default()` is a plain SET.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetOptions {
    /// Expire this long after the write.
    pub ttl: Option<Duration>,
    /// Store under this client-nominated version.
    pub version: Option<Version>,
    /// Write only if the key currently has this version (`Version::ZERO`: absent).
    pub cas: Option<Version>,
    /// Memgest to store the key in.
    pub memgest: Option<MemgestId>,
    /// NX / XX.
    pub cond: SetCond,
}

impl SetOptions {
    /// Expire after `ttl`.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
    /// Only if absent.
    pub fn nx(mut self) -> Self {
        self.cond = SetCond::IfAbsent;
        self
    }
    /// Only if present.
    pub fn xx(mut self) -> Self {
        self.cond = SetCond::IfPresent;
        self
    }
    /// Only if the current version is `v`.
    pub fn cas(mut self, v: Version) -> Self {
        self.cas = Some(v);
        self
    }
    /// Store under version `v`.
    pub fn version(mut self, v: Version) -> Self {
        self.version = Some(v);
        self
    }
    /// Store in memgest `m`.
    pub fn memgest(mut self, m: MemgestId) -> Self {
        self.memgest = Some(m);
        self
    }

    /// Whether applying the SET twice has the effect of once (then a SET whose connection
    /// broke after sending may be retried). A conditional or versioned SET is not: its second
    /// application would report NOT_STORED / CAS_MISMATCH for a write that happened.
    pub(crate) fn idempotent(&self) -> bool {
        self.cond == SetCond::Always && self.cas.is_none() && self.version.is_none()
    }
}

/// One MGET result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MgetValue {
    /// The value; `None` if the key does not exist.
    pub value: Option<Bytes>,
    /// The entry's version (0 if absent).
    pub version: Version,
}

/// Connections to one address.
pub(crate) struct Pool {
    addr: SocketAddr,
    slots: Vec<PoolSlot>,
    next: AtomicUsize,
}

struct PoolSlot {
    conn: Mutex<Option<Arc<Conn>>>,
    /// Serialises reconnects of this slot so a burst of calls opens one connection, not many.
    connecting: tokio::sync::Mutex<()>,
}

impl Pool {
    pub(crate) fn new(addr: SocketAddr, n: usize) -> Pool {
        Pool {
            addr,
            slots: (0..n)
                .map(|_| PoolSlot {
                    conn: Mutex::new(None),
                    connecting: tokio::sync::Mutex::new(()),
                })
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    pub(crate) async fn get(&self, cfg: &ClientConfig) -> Result<Arc<Conn>, Error> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len().max(1);
        let Some(slot) = self.slots.get(i) else {
            return Err(Error::Config("empty pool".into()));
        };
        if let Some(c) = live(&slot.conn) {
            return Ok(c);
        }
        let _guard = slot.connecting.lock().await;
        if let Some(c) = live(&slot.conn) {
            return Ok(c);
        }
        let c = Arc::new(
            Conn::connect(
                self.addr,
                cfg.connect_timeout,
                cfg.in_flight_per_connection_max,
                cfg.tls.as_ref(),
            )
            .await?,
        );
        if let Some(auth) = &cfg.auth {
            login(&c, self.addr, auth, cfg.connect_timeout).await?;
        }
        *slot.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.clone());
        Ok(c)
    }
}

/// AUTH on a new connection, before the pool hands it out: its requests all run as the
/// user. A refusal (`DENIED`: wrong password or user disabled) is not retried.
async fn login(
    c: &Conn,
    addr: SocketAddr,
    auth: &crate::Credentials,
    timeout: std::time::Duration,
) -> Result<(), Error> {
    let exchange = async {
        c.send(|out, id| {
            native::encode_auth(out, id, auth.user.as_bytes(), auth.password.as_bytes())
        })
        .await?
        .wait()
        .await
    };
    let r = match tokio::time::timeout(timeout, exchange).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(Error::Connection {
                addr: addr.to_string(),
                message: "AUTH timed out".into(),
                maybe_executed: false,
            })
        }
    };
    match (r.status, r.body) {
        (Status::OK, _) => Ok(()),
        (status, Body::Message(message)) => Err(Error::Server { status, message }),
        (s, b) => Err(unexpected("AUTH", s, &b)),
    }
}

fn live(m: &Mutex<Option<Arc<Conn>>>) -> Option<Arc<Conn>> {
    m.lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .filter(|c| c.is_alive())
        .cloned()
}

struct Inner {
    cfg: ClientConfig,
    seed_addr: SocketAddr,
    /// One pool per address we were sent to. Grows only with addresses named in MOVED
    /// replies, i.e. with the cluster's size.
    pools: Mutex<HashMap<SocketAddr, Arc<Pool>>>,
    /// Slots learned from MOVED replies. At most `SLOT_COUNT` entries.
    routes: Mutex<HashMap<Slot, SocketAddr>>,
    epoch: AtomicU64,
    budget: RetryBudget,
    jitter: Jitter,
}

/// An async Ringlet client over the native protocol. Cheap to clone (an `Arc`).
///
/// Calls must run inside a tokio runtime (connections spawn their reader and writer tasks on
/// it). For synchronous code use [`crate::BlockingClient`].
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("seed_addr", &self.inner.seed_addr)
            .field("epoch", &self.epoch())
            .finish()
    }
}

/// Whether a failed attempt may be repeated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Idempotence {
    Idempotent,
    NotIdempotent,
}

impl Client {
    /// A client for the node at `addr` (`host:port`). Connections are opened lazily, and
    /// `connect` opens one to check the address is reachable.
    ///
    /// # Errors
    /// [`Error::Config`], [`Error::Resolve`], [`Error::Connection`].
    pub async fn connect(addr: &str, cfg: ClientConfig) -> Result<Client, Error> {
        cfg.validate()?;
        let seed_addr = tokio::net::lookup_host(addr)
            .await
            .map_err(|e| Error::Resolve(format!("{addr}: {e}")))?
            .next()
            .ok_or_else(|| Error::Resolve(addr.to_string()))?;
        let seed = cfg.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x9E37_79B9)
                ^ u64::from(std::process::id())
        });
        let client = Client {
            inner: Arc::new(Inner {
                budget: RetryBudget::new(cfg.retry_budget_ratio, cfg.retry_budget_cap),
                jitter: Jitter::new(seed),
                cfg,
                seed_addr,
                pools: Mutex::new(HashMap::new()),
                routes: Mutex::new(HashMap::new()),
                epoch: AtomicU64::new(0),
            }),
        };
        client.pool(seed_addr).get(&client.inner.cfg).await?;
        Ok(client)
    }

    /// The highest cluster-map epoch any response has carried.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.inner.epoch.load(Ordering::Relaxed))
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.cfg
    }

    fn pool(&self, addr: SocketAddr) -> Arc<Pool> {
        let mut pools = self.inner.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools
            .entry(addr)
            .or_insert_with(|| Arc::new(Pool::new(addr, self.inner.cfg.connections)))
            .clone()
    }

    fn route(&self, key: Option<&[u8]>) -> SocketAddr {
        key.and_then(|k| {
            self.inner
                .routes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key_slot(k))
                .copied()
        })
        .unwrap_or(self.inner.seed_addr)
    }

    /// Learn from a MOVED message `"<slot> <host>:<port>"`.
    fn learn_moved(&self, message: &str) {
        let mut parts = message.split_whitespace();
        let (Some(slot), Some(addr)) = (parts.next(), parts.next()) else {
            return;
        };
        if let (Ok(slot), Ok(addr)) = (slot.parse::<Slot>(), addr.parse::<SocketAddr>()) {
            if u32::from(slot) < ringlet_types::SLOT_COUNT as u32 {
                self.inner
                    .routes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(slot, addr);
            }
        }
    }

    /// Run one call: route, send, wait, classify, retry within the deadline and budget.
    async fn call<E>(
        &self,
        key: Option<&[u8]>,
        idem: Idempotence,
        encode: E,
    ) -> Result<Response, Error>
    where
        E: Fn(&mut BytesMut, u64),
    {
        let cfg = &self.inner.cfg;
        let deadline = Instant::now() + cfg.timeout;
        let mut attempt: u32 = 0;
        // Bounded: at most `retries_max` (≤ RETRY_COUNT_MAX) retries, and the deadline.
        loop {
            let addr = self.route(key);
            let once = async {
                let conn = self.pool(addr).get(cfg).await?;
                conn.send(&encode).await?.wait().await
            };
            let result = match tokio::time::timeout_at(deadline, once).await {
                Err(_) => return Err(Error::Timeout),
                Ok(Ok(resp)) => {
                    self.inner.epoch.fetch_max(resp.epoch.0, Ordering::Relaxed);
                    if resp.status.is_error() {
                        let message = match &resp.body {
                            Body::Message(m) => m.clone(),
                            _ => String::new(),
                        };
                        if resp.status == Status::MOVED {
                            self.learn_moved(&message);
                        }
                        Err(Error::Server {
                            status: resp.status,
                            message,
                        })
                    } else {
                        Ok(resp)
                    }
                }
                Ok(Err(e)) => Err(e),
            };
            let err = match result {
                Ok(resp) => {
                    self.inner.budget.deposit();
                    return Ok(resp);
                }
                Err(e) => e,
            };
            let retry = attempt < cfg.retries_max.min(limits::RETRY_COUNT_MAX)
                && err.is_retryable(idem == Idempotence::Idempotent)
                && self.inner.budget.withdraw();
            if !retry {
                return Err(err);
            }
            // MOVED is retried at once (the route changed); other errors back off.
            let is_moved = matches!(&err, Error::Server { status, .. } if *status == Status::MOVED);
            if !is_moved {
                let pause = self
                    .inner
                    .jitter
                    .backoff(attempt, cfg.backoff_base, cfg.backoff_max);
                if Instant::now() + pause >= deadline {
                    return Err(err);
                }
                tokio::time::sleep(pause).await;
            }
            attempt = attempt.saturating_add(1);
        }
    }

    fn check_key(key: &[u8]) -> Result<(), Error> {
        check_key(key)
    }

    /// PING: returns the node's epoch.
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn ping(&self) -> Result<Epoch, Error> {
        let r = self
            .call(None, Idempotence::Idempotent, |out, id| {
                native::encode_ping(out, id)
            })
            .await?;
        Ok(r.epoch)
    }

    /// GET: the value (`None` if absent), its version and the epoch.
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn get(&self, key: &[u8]) -> Result<Versioned<Option<Bytes>>, Error> {
        Self::check_key(key)?;
        let r = self
            .call(Some(key), Idempotence::Idempotent, |out, id| {
                native::encode_get(out, id, key)
            })
            .await?;
        let value = match (r.status, r.body) {
            (Status::OK, Body::Value(v)) => Some(v),
            (Status::NOT_FOUND, _) => None,
            (s, b) => return Err(unexpected("GET", s, &b)),
        };
        Ok(Versioned {
            value,
            version: r.version,
            epoch: r.epoch,
        })
    }

    /// SET with options.
    ///
    /// # Errors
    /// [`Error::KeyTooLarge`], [`Error::ValueTooLarge`], and see [`Error`].
    pub async fn set(
        &self,
        key: &[u8],
        value: &[u8],
        opts: SetOptions,
    ) -> Result<Versioned<SetOutcome>, Error> {
        let req = set_request(key, value, &opts)?;
        let idem = if opts.idempotent() {
            Idempotence::Idempotent
        } else {
            Idempotence::NotIdempotent
        };
        let r = self
            .call(Some(key), idem, |out, id| native::encode_set(out, id, &req))
            .await?;
        set_outcome(&r)
    }

    /// DEL, optionally only at version `cas`.
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn del(
        &self,
        key: &[u8],
        cas: Option<Version>,
    ) -> Result<Versioned<DelOutcome>, Error> {
        Self::check_key(key)?;
        // A plain DEL repeated deletes nothing more; a CAS DEL repeated reports a mismatch for
        // a delete that happened, so only the plain one is retried after a possible send.
        let idem = if cas.is_none() {
            Idempotence::Idempotent
        } else {
            Idempotence::NotIdempotent
        };
        let r = self
            .call(Some(key), idem, |out, id| {
                native::encode_del(out, id, key, cas)
            })
            .await?;
        let outcome = match r.status {
            Status::OK => DelOutcome::Deleted,
            Status::NOT_FOUND => DelOutcome::NotFound,
            Status::CAS_MISMATCH => DelOutcome::CasMismatch,
            s => return Err(unexpected("DEL", s, &r.body)),
        };
        Ok(Versioned {
            value: outcome,
            version: r.version,
            epoch: r.epoch,
        })
    }

    /// INCRBY: the new value. Never retried once possibly sent (it is not idempotent).
    ///
    /// # Errors
    /// See [`Error`] (`Server { status: NOT_INTEGER | OVERFLOW }` for bad values).
    pub async fn incr_by(&self, key: &[u8], delta: i64) -> Result<Versioned<i64>, Error> {
        Self::check_key(key)?;
        let r = self
            .call(Some(key), Idempotence::NotIdempotent, |out, id| {
                native::encode_incr_by(out, id, key, delta)
            })
            .await?;
        match (r.status, r.body) {
            (Status::OK, Body::Int(v)) => Ok(Versioned {
                value: v,
                version: r.version,
                epoch: r.epoch,
            }),
            (s, b) => Err(unexpected("INCRBY", s, &b)),
        }
    }

    /// CHASE: follow the link fields `links` breadth-first from `key` on the node (one round
    /// trip), as RESP `CHASE key link... [DEPTH] [LIMIT] [FIELDS]` does: each item once, in
    /// BFS order, with the reason the walk stopped. Retried like a read (it writes nothing).
    ///
    /// # Errors
    /// `Server { status: BAD_REQUEST }` for arguments outside the node's bounds (refused
    /// before sending, with the node's text); see [`Error`].
    pub async fn chase<L: AsRef<[u8]>>(
        &self,
        key: &[u8],
        links: &[L],
        opts: &crate::ChaseOptions,
    ) -> Result<Versioned<crate::ChaseResult>, Error> {
        let depth = crate::chase::check(key, links, opts)?;
        let r = self
            .call(Some(key), Idempotence::Idempotent, |out, id| {
                crate::chase::encode(out, id, key, links, depth, opts)
            })
            .await?;
        Ok(Versioned {
            value: crate::chase::result(&r)?,
            version: r.version,
            epoch: r.epoch,
        })
    }

    /// COMMAND: run `args` (the command's name first) through the node's command layer, as
    /// a RESP client would, and return its reply (RESP3 shapes: HGETALL is a map). A
    /// refused command (WRONGTYPE, syntax) is `Ok(Reply::Error)`; `Err` is transport,
    /// access (`DENIED`), routing or a command a native connection cannot run
    /// (`UNSUPPORTED`: SUBSCRIBE, MULTI, SELECT, HELLO, ...). Routed by the command's first
    /// key (MOVED-learned routes); retried after a possible send only if the command table
    /// does not flag it `write`.
    ///
    /// # Errors
    /// See [`Error`]; limits are checked before sending.
    pub async fn command<A: AsRef<[u8]>>(
        &self,
        args: &[A],
    ) -> Result<ringlet_codec::resp::Reply, Error> {
        crate::command::check_args(args)?;
        let argv: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        // A single node serves every slot: no CROSSSLOT check, only a route hint.
        let key = ringlet_command::table::command_keys(&argv).first().copied();
        let idem = if crate::command::idempotent(args) {
            Idempotence::Idempotent
        } else {
            Idempotence::NotIdempotent
        };
        let r = self
            .call(key, idem, |out, id| native::encode_command(out, id, args))
            .await?;
        crate::command::reply_of(&r)
    }

    crate::command::typed_helpers_async!();

    /// MGET: one result per key, in order. Keys are sent in batches of
    /// `mget_batch_keys`, all batches in flight at once (spread over the pool), so a large
    /// MGET costs about one round trip. The epoch is the highest any batch carried.
    ///
    /// # Errors
    /// The first batch error; per-key errors (e.g. MOVED for one key) fail the call too.
    pub async fn mget<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<Versioned<Vec<MgetValue>>, Error> {
        for k in keys {
            Self::check_key(k.as_ref())?;
        }
        let batch = self
            .inner
            .cfg
            .mget_batch_keys
            .min(limits::BATCH_KEYS_MAX as usize)
            .max(1);
        let futs: Vec<_> = keys
            .chunks(batch)
            .map(|chunk| async move {
                let first = chunk.first().map(AsRef::as_ref);
                self.call(first, Idempotence::Idempotent, |out, id| {
                    native::encode_mget(out, id, chunk)
                })
                .await
                .and_then(|r| match (r.status, r.body) {
                    (Status::OK, Body::Values(v)) if v.len() == chunk.len() => Ok((r.epoch, v)),
                    (s, b) => Err(unexpected("MGET", s, &b)),
                })
            })
            .collect();
        let mut values = Vec::with_capacity(keys.len());
        let mut epoch = Epoch(0);
        for res in join_all(futs).await {
            let (e, items) = res?;
            epoch = epoch.max(e);
            for MgetEntry {
                status,
                version,
                value,
            } in items
            {
                values.push(match status {
                    Status::OK => MgetValue {
                        value: Some(value),
                        version,
                    },
                    Status::NOT_FOUND => MgetValue {
                        value: None,
                        version,
                    },
                    s => {
                        return Err(Error::Server {
                            status: s,
                            message: String::from_utf8_lossy(&value).into_owned(),
                        })
                    }
                });
            }
        }
        Ok(Versioned {
            value: values,
            version: Version::ZERO,
            epoch,
        })
    }
}

/// A key within `limits::KEY_BYTES_MAX` (checked before anything is sent).
pub(crate) fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.len() > limits::KEY_BYTES_MAX as usize {
        return Err(Error::KeyTooLarge(key.len()));
    }
    Ok(())
}

/// The SET frame for `opts`, after the key and value size checks (single node and cluster).
pub(crate) fn set_request<'a>(
    key: &'a [u8],
    value: &'a [u8],
    opts: &SetOptions,
) -> Result<SetRequest<'a>, Error> {
    check_key(key)?;
    if value.len() > limits::VALUE_BYTES_MAX as usize {
        return Err(Error::ValueTooLarge(value.len()));
    }
    let ttl_ms = opts
        .ttl
        .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1));
    Ok(SetRequest {
        key,
        value,
        cond: opts.cond,
        ttl_ms,
        version: opts.version,
        cas: opts.cas,
        memgest: opts.memgest,
    })
}

/// A SET response as its outcome.
pub(crate) fn set_outcome(r: &Response) -> Result<Versioned<SetOutcome>, Error> {
    let outcome = match r.status {
        Status::OK => SetOutcome::Stored,
        Status::NOT_STORED => SetOutcome::NotStored,
        Status::CAS_MISMATCH => SetOutcome::CasMismatch,
        s => return Err(unexpected("SET", s, &r.body)),
    };
    Ok(Versioned {
        value: outcome,
        version: r.version,
        epoch: r.epoch,
    })
}

pub(crate) fn unexpected(op: &str, status: Status, body: &Body) -> Error {
    Error::UnexpectedResponse(format!("{op}: status {status} with body {body:?}"))
}

/// Poll every future until all are done; outputs in input order. (The batches of one MGET;
/// a handful of futures, so polling them all on each wake is cheaper than a task each.)
pub(crate) async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (f, slot) in futs.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *slot = Some(v),
                    Poll::Pending => all = false,
                }
            }
        }
        if all {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
