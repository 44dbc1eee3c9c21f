//! The router library for frontends: watches a linked service's map at the coordinator and
//! sends each request to the member owning its key's slot.
//!
//! Refusals are part of normal operation and are retried, all within
//! [`limits::ROUTER_ATTEMPTS_MAX`] attempts per call:
//! - `Moving`: the slot's unit is being moved; back off (1 ms doubling to 50 ms) and retry —
//!   the move ends in a commit (the map then points at the target) or an abort (the source
//!   serves again);
//! - `NotOwner { hint }`: the map here is behind; go to the hint (at most
//!   [`limits::ROUTER_REDIRECTS_MAX`] hops per call), else wait for the next map;
//! - a connection error: drop the connection, back off, retry with the current map.
//!
//! A request is only ever *re*-sent after an answer that says it was not executed (`Moving`,
//! `NotOwner`) or after a connection failure; in the latter case it may have executed once
//! already, so calls that are not idempotent should carry their own request id.
//!
//! Two ways to call: [`Router::call`] (async; a few pooled connections per member shared by
//! the tasks of a runtime) and [`BlockingRouter::call`] (from [`Router::blocking`]: one
//! handle per thread of a thread-per-connection frontend, with its own blocking connection
//! per member). The blocking handle makes exactly one `send` and one `recv` per routed
//! request and no readiness wait: at a paced load each hop of an async runtime adds an
//! `epoll_wait` and runtime wake-ups, which on a loaded 2-core host cost more CPU than the
//! request itself (measured in BENCHMARKS.md, linked mode).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringlet_types::key_slot;
use tokio::io::{BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, watch};

use crate::error::{RouteError, WireError};
use crate::limits;
use crate::wire::{
    encode_request, read_frame, read_frame_sync, write_frame, Control, Frame, Reply, ServiceMap,
    SlotRange,
};

struct Conn {
    r: BufReader<OwnedReadHalf>,
    w: BufWriter<OwnedWriteHalf>,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    next_id: u64,
}

impl Conn {
    async fn open(addr: &str) -> Result<Conn, WireError> {
        let s = tokio::time::timeout(
            Duration::from_millis(limits::ROUTER_REQUEST_TIMEOUT_MS),
            TcpStream::connect(addr),
        )
        .await
        .map_err(|_| WireError::Timeout)??;
        s.set_nodelay(true)?;
        let (r, w) = s.into_split();
        Ok(Conn {
            r: BufReader::new(r),
            w: BufWriter::new(w),
            buf: Vec::new(),
            scratch: Vec::new(),
            next_id: 1,
        })
    }

    async fn call(&mut self, key: &[u8], body: &[u8]) -> Result<Reply, WireError> {
        let id = self.next_id;
        self.next_id += 1;
        let f = Frame::Request {
            id,
            key: key.to_vec(),
            body: body.to_vec(),
        };
        tokio::time::timeout(
            Duration::from_millis(limits::ROUTER_REQUEST_TIMEOUT_MS),
            async {
                write_frame(&mut self.w, &f, &mut self.scratch).await?;
                match read_frame(&mut self.r, &mut self.buf).await? {
                    Some(Frame::Response { id: got, reply }) if got == id => Ok(reply),
                    Some(_) => Err(WireError::Bad("unexpected frame from a member")),
                    None => Err(WireError::Bad("member closed the connection")),
                }
            },
        )
        .await
        .map_err(|_| WireError::Timeout)?
    }
}

/// A few connections to one member, used round-robin; each carries one request at a time.
struct Pool {
    addr: String,
    conns: Vec<tokio::sync::Mutex<Option<Conn>>>,
    next: AtomicUsize,
}

impl Pool {
    fn new(addr: String) -> Pool {
        Pool {
            addr,
            conns: (0..limits::ROUTER_CONNS_PER_MEMBER)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
        }
    }

    async fn call(&self, key: &[u8], body: &[u8]) -> Result<Reply, WireError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        let mut slot = self.conns[i].lock().await;
        if slot.is_none() {
            *slot = Some(Conn::open(&self.addr).await?);
        }
        let res = slot.as_mut().expect("opened above").call(key, body).await;
        if res.is_err() {
            // The connection's state is unknown after an error: never reuse it.
            *slot = None;
        }
        res
    }
}

/// Counters of one router.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Calls that returned an answer.
    pub calls: u64,
    /// Retries after `Moving`.
    pub moving_retries: u64,
    /// Redirects after `NotOwner`.
    pub redirects: u64,
    /// Retries after a connection error.
    pub reconnects: u64,
}

/// A member's death, as the coordinator reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LostEvent {
    /// The member.
    pub member: u64,
    /// The ranges whose state is gone.
    pub ranges: Vec<SlotRange>,
}

struct Inner {
    pools: Mutex<HashMap<String, Arc<Pool>>>,
    calls: AtomicU64,
    moving_retries: AtomicU64,
    redirects: AtomicU64,
    reconnects: AtomicU64,
}

/// Routes requests to a linked service's members. Cheap to clone.
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
    map: watch::Receiver<Arc<ServiceMap>>,
    lost: broadcast::Sender<LostEvent>,
    _watcher: Arc<WatchTask>,
}

struct WatchTask(tokio::task::JoinHandle<()>);

impl Drop for WatchTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Router {
    /// Watch `service` at the coordinator `coordinator` and route to its members. Returns once
    /// the first map arrived (the watch reconnects by itself afterwards).
    ///
    /// # Errors
    /// [`WireError`] if the coordinator cannot be reached or refuses.
    pub async fn connect(coordinator: &str, service: &str) -> Result<Router, WireError> {
        let first = watch_once(coordinator, service).await?;
        let (map_tx, map_rx) = watch::channel(Arc::new(first.1));
        let (lost, _) = broadcast::channel(64);
        let lost_tx = lost.clone();
        let coordinator = coordinator.to_owned();
        let service = service.to_owned();
        let mut conn = Some(first.0);
        let task = tokio::spawn(async move {
            // Runs until the router is dropped (the task is aborted then); each round is one
            // watch session, and a lost session is retried after a backoff.
            loop {
                let c = match conn.take() {
                    Some(c) => Ok(c),
                    None => watch_once(&coordinator, &service).await.map(|(c, m)| {
                        map_tx.send_replace(Arc::new(m));
                        c
                    }),
                };
                if let Ok(mut c) = c {
                    while let Ok(Some(f)) = read_frame(&mut c.r, &mut c.buf).await {
                        match f {
                            Frame::Control(Control::Map(m)) => {
                                map_tx.send_replace(Arc::new(m));
                            }
                            Frame::Control(Control::StateLost { member, ranges }) => {
                                let _ = lost_tx.send(LostEvent { member, ranges });
                            }
                            _ => {}
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Ok(Router {
            inner: Arc::new(Inner {
                pools: Mutex::new(HashMap::new()),
                calls: AtomicU64::new(0),
                moving_retries: AtomicU64::new(0),
                redirects: AtomicU64::new(0),
                reconnects: AtomicU64::new(0),
            }),
            map: map_rx,
            lost,
            _watcher: Arc::new(WatchTask(task)),
        })
    }

    /// The current map.
    pub fn map(&self) -> Arc<ServiceMap> {
        Arc::clone(&self.map.borrow())
    }

    /// Wait until the map's epoch is at least `epoch` or `timeout` passes; returns the map.
    pub async fn wait_map(&self, epoch: u64, timeout: Duration) -> Arc<ServiceMap> {
        let mut rx = self.map.clone();
        let _ = tokio::time::timeout(timeout, rx.wait_for(|m| m.epoch >= epoch)).await;
        self.map()
    }

    /// Member deaths reported by the coordinator from now on.
    pub fn lost_events(&self) -> broadcast::Receiver<LostEvent> {
        self.lost.subscribe()
    }

    /// The counters.
    pub fn stats(&self) -> RouterStats {
        let i = &self.inner;
        RouterStats {
            calls: i.calls.load(Ordering::Relaxed),
            moving_retries: i.moving_retries.load(Ordering::Relaxed),
            redirects: i.redirects.load(Ordering::Relaxed),
            reconnects: i.reconnects.load(Ordering::Relaxed),
        }
    }

    fn pool(&self, addr: &str) -> Arc<Pool> {
        let mut pools = self.inner.pools.lock().expect("pools lock");
        if let Some(p) = pools.get(addr) {
            return Arc::clone(p);
        }
        // Members come and go with their addresses; keep the table to the members in the map
        // plus this one, so it cannot grow without bound.
        if pools.len() > limits::MEMBERS_MAX {
            pools.clear();
        }
        let p = Arc::new(Pool::new(addr.to_owned()));
        pools.insert(addr.to_owned(), Arc::clone(&p));
        p
    }

    /// A blocking handle for one thread (see [`BlockingRouter`]). It shares this router's map
    /// and counters; its connections are its own.
    pub fn blocking(&self) -> BlockingRouter {
        BlockingRouter {
            inner: Arc::clone(&self.inner),
            map: self.map.clone(),
            conns: HashMap::new(),
            _watcher: Arc::clone(&self._watcher),
        }
    }

    /// Send `body` to the member owning `key` and return its answer.
    ///
    /// # Errors
    /// [`RouteError::App`] if the application refused it; [`RouteError::Unavailable`] if no
    /// member served it within the attempt budget.
    pub async fn call(&self, key: &[u8], body: &[u8]) -> Result<Vec<u8>, RouteError> {
        let slot = key_slot(key);
        let mut backoff = limits::ROUTER_BACKOFF_MIN_MS;
        let mut hint: Option<String> = None;
        let mut redirects = 0;
        let mut map_rx = self.map.clone();
        for attempt in 1..=limits::ROUTER_ATTEMPTS_MAX {
            let addr = match hint.take() {
                Some(a) => Some(a),
                None => map_rx
                    .borrow_and_update()
                    .owner_of(slot)
                    .map(|o| o.addr.clone()),
            };
            let wait_for_map = match addr {
                None => true,
                Some(addr) => match self.pool(&addr).call(key, body).await {
                    Ok(Reply::Ok(b)) => {
                        self.inner.calls.fetch_add(1, Ordering::Relaxed);
                        return Ok(b);
                    }
                    Ok(Reply::Failed(m)) => {
                        self.inner.calls.fetch_add(1, Ordering::Relaxed);
                        return Err(RouteError::App(m));
                    }
                    Ok(Reply::Moving { .. }) => {
                        self.inner.moving_retries.fetch_add(1, Ordering::Relaxed);
                        false
                    }
                    Ok(Reply::NotOwner { hint: h, .. }) => {
                        self.inner.redirects.fetch_add(1, Ordering::Relaxed);
                        redirects += 1;
                        match h {
                            Some(h) if redirects <= limits::ROUTER_REDIRECTS_MAX && h != addr => {
                                hint = Some(h);
                                continue;
                            }
                            _ => true,
                        }
                    }
                    Err(_) => {
                        self.inner.reconnects.fetch_add(1, Ordering::Relaxed);
                        true
                    }
                },
            };
            let pause = Duration::from_millis(backoff);
            backoff = (backoff * 2).min(limits::ROUTER_BACKOFF_MAX_MS);
            if wait_for_map {
                // Either a new map arrives or the backoff passes, whichever is first.
                let _ = tokio::time::timeout(pause, map_rx.changed()).await;
            } else {
                tokio::time::sleep(pause).await;
            }
            if attempt == limits::ROUTER_ATTEMPTS_MAX {
                break;
            }
        }
        Err(RouteError::Unavailable {
            attempts: limits::ROUTER_ATTEMPTS_MAX,
        })
    }
}

/// One blocking connection to a member.
struct SyncConn {
    r: std::io::BufReader<std::net::TcpStream>,
    w: std::net::TcpStream,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    next_id: u64,
}

impl SyncConn {
    fn open(addr: &str) -> Result<SyncConn, WireError> {
        use std::net::ToSocketAddrs;
        let t = Duration::from_millis(limits::ROUTER_REQUEST_TIMEOUT_MS);
        let sa = addr
            .to_socket_addrs()?
            .next()
            .ok_or(WireError::Bad("member address does not resolve"))?;
        let s = std::net::TcpStream::connect_timeout(&sa, t)?;
        s.set_nodelay(true)?;
        // Bounds every wait of a call (the async router's per-call timeout).
        s.set_read_timeout(Some(t))?;
        s.set_write_timeout(Some(t))?;
        Ok(SyncConn {
            r: std::io::BufReader::new(s.try_clone()?),
            w: s,
            buf: Vec::new(),
            scratch: Vec::new(),
            next_id: 1,
        })
    }

    fn call(&mut self, key: &[u8], body: &[u8]) -> Result<Reply, WireError> {
        use std::io::Write;
        let id = self.next_id;
        self.next_id += 1;
        encode_request(&mut self.scratch, id, key, body);
        self.w.write_all(&self.scratch)?;
        match read_frame_sync(&mut self.r, &mut self.buf)? {
            Some(Frame::Response { id: got, reply }) if got == id => Ok(reply),
            Some(_) => Err(WireError::Bad("unexpected frame from a member")),
            None => Err(WireError::Bad("member closed the connection")),
        }
    }
}

/// A router handle for blocking code: one per thread of a thread-per-connection frontend
/// (from [`Router::blocking`]). Same routing, retry policy and bounds as [`Router::call`]; it
/// keeps one blocking connection per member it talked to (at most `MEMBERS_MAX`), and waits
/// out backoffs with `sleep` (a new map is picked up at the next attempt). The [`Router`] it
/// came from must keep its runtime running: that is where the map is watched.
pub struct BlockingRouter {
    inner: Arc<Inner>,
    map: watch::Receiver<Arc<ServiceMap>>,
    conns: HashMap<String, SyncConn>,
    _watcher: Arc<WatchTask>,
}

impl BlockingRouter {
    /// The current map.
    pub fn map(&self) -> Arc<ServiceMap> {
        Arc::clone(&self.map.borrow())
    }

    fn send(&mut self, addr: &str, key: &[u8], body: &[u8]) -> Result<Reply, WireError> {
        if !self.conns.contains_key(addr) {
            if self.conns.len() >= limits::MEMBERS_MAX {
                self.conns.clear();
            }
            self.conns.insert(addr.to_owned(), SyncConn::open(addr)?);
        }
        let conn = self.conns.get_mut(addr).expect("inserted above");
        let res = conn.call(key, body);
        if res.is_err() {
            // Unknown state after an error (a late response could arrive): never reuse it.
            self.conns.remove(addr);
        }
        res
    }

    /// [`Router::call`], blocking the calling thread.
    ///
    /// # Errors
    /// As [`Router::call`].
    pub fn call(&mut self, key: &[u8], body: &[u8]) -> Result<Vec<u8>, RouteError> {
        let slot = key_slot(key);
        let mut backoff = limits::ROUTER_BACKOFF_MIN_MS;
        let mut hint: Option<String> = None;
        let mut redirects = 0;
        let mut addr = String::new();
        for _ in 0..limits::ROUTER_ATTEMPTS_MAX {
            addr.clear();
            match hint.take() {
                Some(a) => addr.push_str(&a),
                None => {
                    if let Some(o) = self.map.borrow().owner_of(slot) {
                        addr.push_str(&o.addr);
                    }
                }
            }
            if !addr.is_empty() {
                match self.send(&addr, key, body) {
                    Ok(Reply::Ok(b)) => {
                        self.inner.calls.fetch_add(1, Ordering::Relaxed);
                        return Ok(b);
                    }
                    Ok(Reply::Failed(m)) => {
                        self.inner.calls.fetch_add(1, Ordering::Relaxed);
                        return Err(RouteError::App(m));
                    }
                    Ok(Reply::Moving { .. }) => {
                        self.inner.moving_retries.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Reply::NotOwner { hint: h, .. }) => {
                        self.inner.redirects.fetch_add(1, Ordering::Relaxed);
                        redirects += 1;
                        if let Some(h) = h {
                            if redirects <= limits::ROUTER_REDIRECTS_MAX && h != addr {
                                hint = Some(h);
                                continue;
                            }
                        }
                    }
                    Err(_) => {
                        self.inner.reconnects.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(backoff));
            backoff = (backoff * 2).min(limits::ROUTER_BACKOFF_MAX_MS);
        }
        Err(RouteError::Unavailable {
            attempts: limits::ROUTER_ATTEMPTS_MAX,
        })
    }
}

struct WatchConn {
    r: BufReader<OwnedReadHalf>,
    buf: Vec<u8>,
    // Kept open: the coordinator drops a watcher when this side closes.
    _w: OwnedWriteHalf,
}

async fn watch_once(
    coordinator: &str,
    service: &str,
) -> Result<(WatchConn, ServiceMap), WireError> {
    let mut c = Conn::open(coordinator).await?;
    let f = Frame::Control(Control::Watch {
        service: service.to_owned(),
    });
    write_frame(&mut c.w, &f, &mut c.scratch).await?;
    let first = tokio::time::timeout(
        Duration::from_millis(limits::JOIN_TIMEOUT_MS),
        read_frame(&mut c.r, &mut c.buf),
    )
    .await
    .map_err(|_| WireError::Timeout)??;
    match first {
        Some(Frame::Control(Control::Map(m))) => Ok((
            WatchConn {
                r: c.r,
                buf: c.buf,
                _w: c.w.into_inner(),
            },
            m,
        )),
        _ => Err(WireError::Bad("expected the service map")),
    }
}
