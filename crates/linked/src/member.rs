//! A linked member: an application process that holds a [`Linklet`], joins a linked service at
//! the coordinator, serves requests for the units it owns, and moves units to other members
//! when the coordinator says so.
//!
//! Tasks:
//! - a listener: every connection carries requests from routers ([`Frame::Request`] →
//!   [`Handler`] → [`Frame::Response`]) and/or the import side of moves from peers
//!   (`BeginImport`, batches, `CommitImport`/`AbortImport`, each acknowledged);
//! - the coordinator session: heartbeats (with a load report every [`LOAD_REPORT_EVERY`]),
//!   `Adopt`, `MoveOut`, `StateLost`, `Map`, `Expired`;
//! - a mover: runs the export side of one move at a time (queue of [`limits::MOVES_QUEUED_MAX`]).
//!
//! **Fencing.** The coordinator declares a member dead `lease_ms` after the last heartbeat it
//! received. The member stops serving `lease_ms` after the *send* time of the last heartbeat
//! the coordinator acknowledged — earlier than the coordinator's deadline, since that
//! heartbeat was received after it was sent — so a member cut off from the coordinator stops
//! before its units are given to someone else, and no unit has two serving owners (assuming
//! the two clocks run at the same rate; there is no clock comparison across hosts).

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ringlet_linklet::{Error as LinkError, LinkKey, Linklet, Marshal, SlotState};
use ringlet_types::{key_slot, Slot, SLOT_COUNT};
use tokio::io::{BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::error::{MemberError, WireError};
use crate::limits;
use crate::replicate::{self, Repl, SeedOrder};
use crate::wire::{
    read_frame, read_frame_sync, write_frame, write_frame_sync, Control, Frame, MemberLoad,
    MoveOutcome, Reply, ServiceMap, SlotRange, UnitLoad,
};

/// Heartbeats per load report (a report costs a pass over the Linklet's slot tables).
pub const LOAD_REPORT_EVERY: u64 = 4;

/// Why the application's handler refused a request.
#[derive(Debug)]
pub enum HandleError {
    /// A Linklet refusal: `Moving` and `NotOwner` go back to the router, which retries.
    Link(LinkError),
    /// The application's own refusal, passed to the caller.
    App(String),
}

impl From<LinkError> for HandleError {
    fn from(e: LinkError) -> Self {
        HandleError::Link(e)
    }
}

/// The application: turns one request (routing key + body) into a response, using the
/// member's Linklet. Runs on the connection's own thread (one per router or peer connection).
pub trait Handler<K, V>: Send + Sync + 'static {
    /// Handle one request.
    ///
    /// # Errors
    /// [`HandleError`].
    fn handle(&self, linklet: &Linklet<K, V>, key: K, body: &[u8]) -> Result<Vec<u8>, HandleError>;
}

impl<K, V, F> Handler<K, V> for F
where
    F: Fn(&Linklet<K, V>, K, &[u8]) -> Result<Vec<u8>, HandleError> + Send + Sync + 'static,
{
    fn handle(&self, linklet: &Linklet<K, V>, key: K, body: &[u8]) -> Result<Vec<u8>, HandleError> {
        self(linklet, key, body)
    }
}

/// Where and how a member joins.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    /// The coordinator's address.
    pub coordinator: String,
    /// The linked service to join.
    pub service: String,
    /// Where to listen for routers and peers (port 0: any).
    pub listen: SocketAddr,
    /// The address others should use (default: the bound address).
    pub advertise: Option<String>,
}

struct Shared<K, V> {
    linklet: Arc<Linklet<K, V>>,
    handler: Box<dyn Handler<K, V>>,
    origin: Instant,
    /// Serve only while `now_ms < fence_ms`.
    fence_ms: AtomicU64,
    /// Requests per unit since the last load report.
    unit_ops: Vec<AtomicU64>,
    slots_per_unit: u16,
    map: RwLock<ServiceMap>,
    self_addr: String,
    repl: Arc<Repl>,
    /// Connection threads running (bounded by `MEMBER_CONN_THREADS_MAX`).
    conn_threads: AtomicUsize,
}

impl<K, V> Shared<K, V> {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
    fn fenced(&self) -> bool {
        self.now_ms() >= self.fence_ms.load(Ordering::Acquire)
    }
    /// Who the map says owns `slot`, if not this member.
    fn hint(&self, slot: Slot) -> Option<String> {
        let map = self.map.read().expect("map lock");
        map.owner_of(slot)
            .filter(|o| o.addr != self.self_addr)
            .map(|o| o.addr.clone())
    }
}

/// A running member.
pub struct Member<K, V> {
    shared: Arc<Shared<K, V>>,
    id: u64,
    addr: SocketAddr,
    done: watch::Receiver<Option<String>>,
    up: mpsc::Sender<Control>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl<K, V> Drop for Member<K, V> {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl<K: LinkKey, V: Marshal + Send + Sync + 'static> Member<K, V> {
    /// Bind, join the service and start serving. The Linklet should own no slot: the
    /// coordinator assigns them (`Adopt`) or moves them in.
    ///
    /// # Errors
    /// [`MemberError`] if binding, connecting or joining fails.
    pub async fn start(
        cfg: MemberConfig,
        linklet: Arc<Linklet<K, V>>,
        handler: impl Handler<K, V>,
    ) -> Result<Self, MemberError> {
        crate::coordinator::loopback_only(cfg.listen)?;
        let listener = TcpListener::bind(cfg.listen).await?;
        let addr = listener.local_addr()?;
        let advertise = cfg.advertise.clone().unwrap_or_else(|| addr.to_string());
        let join_timeout = Duration::from_millis(limits::JOIN_TIMEOUT_MS);
        let stream = tokio::time::timeout(join_timeout, TcpStream::connect(&cfg.coordinator))
            .await
            .map_err(|_| WireError::Timeout)??;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        let mut r = BufReader::new(r);
        let mut w = BufWriter::new(w);
        let mut scratch = Vec::new();
        let mut buf = Vec::new();
        write_frame(
            &mut w,
            &Frame::Control(Control::Join {
                service: cfg.service.clone(),
                addr: advertise.clone(),
            }),
            &mut scratch,
        )
        .await?;
        let sent_ms_origin = Instant::now();
        let welcome = tokio::time::timeout(join_timeout, read_frame(&mut r, &mut buf))
            .await
            .map_err(|_| WireError::Timeout)??;
        let (id, lease_ms, heartbeat_ms, units, replicas) = match welcome {
            Some(Frame::Control(Control::Welcome {
                member,
                lease_ms,
                heartbeat_ms,
                units,
                replicas,
            })) => (member, lease_ms, heartbeat_ms, units, replicas),
            Some(Frame::Control(Control::Refused { reason })) => {
                return Err(MemberError::Refused(reason))
            }
            _ => return Err(WireError::Bad("expected Welcome").into()),
        };
        if units == 0 || units > limits::UNITS_MAX || SLOT_COUNT % units != 0 {
            return Err(WireError::Bad("unit count").into());
        }
        let (up_tx, up_rx) = mpsc::channel(limits::SESSION_QUEUE_MAX);
        let repl = Arc::new(Repl::new(
            replicas,
            units,
            SLOT_COUNT / units,
            up_tx.clone(),
        ));
        // Only a replicated service pays for the dirty log.
        linklet.set_dirty_tracking(repl.on());
        let shared = Arc::new(Shared {
            linklet,
            handler: Box::new(handler),
            origin: sent_ms_origin,
            // The join itself is the first acknowledged heartbeat, sent at origin.
            fence_ms: AtomicU64::new(lease_ms),
            unit_ops: (0..units).map(|_| AtomicU64::new(0)).collect(),
            slots_per_unit: SLOT_COUNT / units,
            map: RwLock::new(ServiceMap::default()),
            self_addr: advertise,
            repl: Arc::clone(&repl),
            conn_threads: AtomicUsize::new(0),
        });
        let (done_tx, done) = watch::channel(None);
        let (move_tx, move_rx) = mpsc::channel(limits::MOVES_QUEUED_MAX);
        let (seed_tx, seed_rx) = std::sync::mpsc::sync_channel(limits::SEEDS_QUEUED_MAX);
        {
            // Ends when the session (the only sender) is gone.
            let (repl, linklet) = (Arc::clone(&repl), Arc::clone(&shared.linklet));
            std::thread::Builder::new()
                .name("linked-seeder".into())
                .spawn(move || replicate::seeder(repl, linklet, seed_rx))?;
        }
        let tasks = vec![
            tokio::spawn(accept_loop(Arc::clone(&shared), listener)),
            tokio::spawn(mover(Arc::clone(&shared), move_rx, up_tx.clone())),
            tokio::spawn(session(
                Arc::clone(&shared),
                r,
                w,
                Session {
                    lease_ms,
                    heartbeat_ms,
                    move_tx,
                    seed_tx,
                    up_rx,
                    done_tx,
                },
                Reconnect {
                    coordinator: cfg.coordinator.clone(),
                    service: cfg.service.clone(),
                    addr: shared.self_addr.clone(),
                    member: id,
                    units,
                },
            )),
        ];
        Ok(Member {
            shared,
            id,
            addr,
            done,
            up: up_tx,
            tasks,
        })
    }

    /// The member id the coordinator gave.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Linklet.
    pub fn linklet(&self) -> &Arc<Linklet<K, V>> {
        &self.shared.linklet
    }

    /// Ask to leave the service: the coordinator moves every unit this member owns to the
    /// others (no state lost), then ends the session ([`Member::closed`] returns). Requests
    /// keep being served meanwhile.
    pub async fn leave(&self) -> bool {
        self.up.send(Control::Leave).await.is_ok()
    }

    /// Bytes this member sent to its units' backups and received back (replication frames,
    /// snapshot batches and acks) since it started: the network cost of replication.
    pub fn replication_bytes(&self) -> u64 {
        self.shared.repl.bytes.load(Ordering::Relaxed)
    }

    /// [`Member::replication_bytes`] as a function that does not borrow the member.
    pub fn replication_bytes_handle(&self) -> impl Fn() -> u64 + Send + Sync + 'static {
        let repl = Arc::clone(&self.shared.repl);
        move || repl.bytes.load(Ordering::Relaxed)
    }

    /// The last map received.
    pub fn map(&self) -> ServiceMap {
        self.shared.map.read().expect("map lock").clone()
    }

    /// Wait until the coordinator session ends; returns why.
    pub async fn closed(&mut self) -> String {
        // Bounded: returns when the session task sets the reason (or is gone).
        loop {
            if let Some(why) = self.done.borrow().clone() {
                return why;
            }
            if self.done.changed().await.is_err() {
                return "member stopped".into();
            }
        }
    }
}

async fn accept_loop<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: Arc<Shared<K, V>>,
    listener: TcpListener,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors and the like: back off instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // One blocking thread per connection (bounded): a request then costs one `recv` and
        // one `send`, with no readiness wait or runtime wake-up in between (see `Router`'s
        // documentation for why that matters at a paced load).
        if shared.conn_threads.load(Ordering::Acquire) >= limits::MEMBER_CONN_THREADS_MAX {
            drop(stream);
            continue;
        }
        let Ok(std_stream) = stream.into_std() else {
            continue;
        };
        if std_stream.set_nonblocking(false).is_err() {
            continue;
        }
        shared.conn_threads.fetch_add(1, Ordering::AcqRel);
        let sh = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("linked-conn".into())
            .spawn(move || {
                let _ = serve_conn(&sh, std_stream);
                sh.conn_threads.fetch_sub(1, Ordering::AcqRel);
            });
        if spawned.is_err() {
            shared.conn_threads.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// An import in progress on one peer connection.
struct Import {
    move_id: u64,
    range: RangeInclusive<Slot>,
    /// The unit's backup, replicated to once the import is committed.
    backup_addr: Option<String>,
}

/// Serve one connection from a router or a peer, on its own thread (a replicated write is
/// shipped to its backup from this thread too, see `replicate`).
fn serve_conn<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: &Arc<Shared<K, V>>,
    stream: std::net::TcpStream,
) -> Result<(), WireError> {
    stream.set_nodelay(true)?;
    let mut r = std::io::BufReader::new(stream.try_clone()?);
    // Unbuffered: each frame is one `write_all` of its encoding, one syscall.
    let mut w = stream;
    let mut buf = Vec::new();
    let mut scratch = Vec::new();
    let mut import: Option<Import> = None;
    let res = (|| {
        while let Some(f) = read_frame_sync(&mut r, &mut buf)? {
            let out = match f {
                Frame::Request { id, key, body } => {
                    let (mut reply, seq) = handle_request(shared, &key, &body);
                    // A write is answered only once its backup applied it.
                    if seq > 0 && shared.repl.on() {
                        if !shared.repl.ship_until(&shared.linklet, seq) {
                            reply = Reply::Failed(
                                "the backup did not acknowledge the write in time; it may \
                                 not survive a crash of this member"
                                    .into(),
                            );
                        } else if shared.fenced() {
                            // Lease lost meanwhile: the backup may have been promoted and have
                            // ignored this write (see `replicate`).
                            reply = Reply::Failed(
                                "this member lost its lease while replicating the write; it \
                                 may not have survived"
                                    .into(),
                            );
                        }
                    }
                    Frame::Response { id, reply }
                }
                Frame::Repl { round, items } => {
                    let ignored = shared
                        .repl
                        .apply(&shared.linklet, items)
                        .map_err(|_| WireError::Bad("replica items refused"))?;
                    Frame::ReplAck { round, ignored }
                }
                Frame::Control(Control::Handover { move_id, range }) => {
                    let res = match range.to_range() {
                        Some(r) => shared.repl.handover(&shared.linklet, r),
                        None => Err(LinkError::BadRange),
                    };
                    ack(move_id, res)
                }
                Frame::Control(Control::BeginBackup { seed_id, range }) => {
                    let res = match range.to_range() {
                        Some(r) => shared.repl.begin_backup(&shared.linklet, r),
                        None => Err(LinkError::BadRange),
                    };
                    ack(seed_id, res)
                }
                Frame::Batch { move_id, batch } => {
                    let res = match &import {
                        Some(i)
                            if i.move_id == move_id
                                && batch.first == *i.range.start()
                                && batch.last == *i.range.end() =>
                        {
                            shared.linklet.import_batch(&batch).map(|_| ())
                        }
                        _ => Err(LinkError::BadBatch {
                            reason: "no such import on this connection",
                        }),
                    };
                    ack(move_id, res)
                }
                Frame::Control(Control::BeginImport {
                    move_id,
                    range,
                    backup_addr,
                }) => {
                    let res = match (range.to_range(), &import) {
                        (Some(r), None) => {
                            // A move to this unit's backup: the move's batches replace the
                            // staged copy, which stops being a backup.
                            let mut backing = shared.repl.backing.lock().expect("backing lock");
                            shared.repl.drop_backing(&mut backing, &shared.linklet, &r);
                            shared.linklet.begin_import(r.clone()).map(|()| {
                                import = Some(Import {
                                    move_id,
                                    range: r,
                                    backup_addr,
                                });
                            })
                        }
                        (None, _) => Err(LinkError::BadRange),
                        (Some(_), Some(_)) => Err(LinkError::BadBatch {
                            reason: "an import is already open on this connection",
                        }),
                    };
                    ack(move_id, res)
                }
                Frame::Control(Control::CommitImport { move_id }) => {
                    let res = match import.take() {
                        Some(i) if i.move_id == move_id => {
                            // The backup is known before the first write is served here.
                            shared.repl.set_target(&i.range, i.backup_addr.as_deref());
                            shared.linklet.commit_import(i.range).map(|_| ())
                        }
                        other => {
                            import = other;
                            Err(LinkError::BadRange)
                        }
                    };
                    ack(move_id, res)
                }
                Frame::Control(Control::AbortImport { move_id }) => {
                    let res = match import.take() {
                        Some(i) if i.move_id == move_id => {
                            shared.linklet.abort_import(i.range).map(|_| ())
                        }
                        other => {
                            import = other;
                            Err(LinkError::BadRange)
                        }
                    };
                    ack(move_id, res)
                }
                _ => return Err(WireError::Bad("unexpected frame at a member")),
            };
            write_frame_sync(&mut w, &out, &mut scratch)?;
        }
        Ok(())
    })();
    // The source went away before committing: nothing staged here may be served.
    if let Some(i) = import {
        let _ = shared.linklet.abort_import(i.range);
    }
    res
}

fn ack(move_id: u64, res: Result<(), LinkError>) -> Frame {
    Frame::Control(match res {
        Ok(()) => Control::Ack { move_id },
        Err(e) => Control::Nack {
            move_id,
            reason: e.to_string(),
        },
    })
}

/// Run the handler; also returns the sequence number of its last write in the Linklet's dirty
/// log (0: it wrote nothing that must be replicated).
fn handle_request<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: &Shared<K, V>,
    key: &[u8],
    body: &[u8],
) -> (Reply, u64) {
    let slot = key_slot(key);
    if shared.fenced() {
        return (
            Reply::NotOwner {
                slot,
                hint: shared.hint(slot),
            },
            0,
        );
    }
    let Some(k) = K::from_key_bytes(key) else {
        return (Reply::Failed("key does not decode".into()), 0);
    };
    shared.unit_ops[usize::from(slot / shared.slots_per_unit)].fetch_add(1, Ordering::Relaxed);
    // The handler is synchronous, so it runs on this thread from start to end.
    Linklet::<K, V>::take_thread_write_seq();
    let reply = reply_of(shared, shared.handler.handle(&shared.linklet, k, body));
    (reply, Linklet::<K, V>::take_thread_write_seq())
}

fn reply_of<K, V>(shared: &Shared<K, V>, res: Result<Vec<u8>, HandleError>) -> Reply {
    match res {
        Ok(b) => Reply::Ok(b),
        // A full replication backlog is retried like a move: the backup catches up.
        Err(HandleError::Link(LinkError::Moving { slot } | LinkError::Backlog { slot })) => {
            Reply::Moving { slot }
        }
        Err(HandleError::Link(LinkError::NotOwner { slot })) => Reply::NotOwner {
            slot,
            hint: shared.hint(slot),
        },
        Err(HandleError::Link(e)) => Reply::Failed(e.to_string()),
        Err(HandleError::App(m)) => Reply::Failed(m),
    }
}

struct Session {
    lease_ms: u64,
    heartbeat_ms: u64,
    move_tx: mpsc::Sender<MoveOrder>,
    seed_tx: std::sync::mpsc::SyncSender<SeedOrder>,
    up_rx: mpsc::Receiver<Control>,
    done_tx: watch::Sender<Option<String>>,
}

/// Where and as whom a member reconnects after its coordinator session broke.
struct Reconnect {
    coordinator: String,
    service: String,
    addr: String,
    member: u64,
    units: u16,
}

type CoordReader = BufReader<tokio::net::tcp::OwnedReadHalf>;
type CoordWriter = BufWriter<tokio::net::tcp::OwnedWriteHalf>;

/// The coordinator session, for the member's life: when it breaks (connection lost, the
/// coordinator restarted) the member keeps its Linklet and reconnects with `Rejoin` (bounded:
/// `REJOIN_ATTEMPTS_MAX`). It ends for good on `Expired`, `Drained` or when rejoining fails.
async fn session<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: Arc<Shared<K, V>>,
    r: CoordReader,
    w: CoordWriter,
    mut s: Session,
    rc: Reconnect,
) {
    let (mut r, mut w) = (r, w);
    let why = loop {
        let (why, broken) = session_once(&shared, r, w, &mut s).await;
        if !broken {
            break why;
        }
        eprintln!("linked member {}: {why}; rejoining", rc.member);
        match rejoin(&shared, &rc).await {
            Ok((r2, w2)) => (r, w) = (r2, w2),
            Err(e) => break format!("{why}; could not rejoin: {e}"),
        }
    };
    let _ = s.done_tx.send(Some(why));
}

/// The units this member serves (or is moving out), as ranges.
fn owned_ranges<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: &Shared<K, V>,
    units: u16,
) -> Vec<SlotRange> {
    let spu = shared.slots_per_unit;
    (0..units)
        .map(|u| u * spu)
        .filter(|&first| {
            matches!(
                shared.linklet.slot_state(first),
                SlotState::Serving | SlotState::Moving
            )
        })
        .map(|first| SlotRange {
            first,
            last: first + spu - 1,
        })
        .collect()
}

async fn rejoin<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: &Arc<Shared<K, V>>,
    rc: &Reconnect,
) -> Result<(CoordReader, CoordWriter), String> {
    let join_timeout = Duration::from_millis(limits::JOIN_TIMEOUT_MS);
    let mut backoff = limits::REJOIN_BACKOFF_MIN_MS;
    for _ in 0..limits::REJOIN_ATTEMPTS_MAX {
        tokio::time::sleep(Duration::from_millis(backoff)).await;
        backoff = (backoff * 2).min(limits::REJOIN_BACKOFF_MAX_MS);
        let Ok(Ok(stream)) =
            tokio::time::timeout(join_timeout, TcpStream::connect(&rc.coordinator)).await
        else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (r, w) = stream.into_split();
        let (mut r, mut w) = (BufReader::new(r), BufWriter::new(w));
        let (mut buf, mut scratch) = (Vec::new(), Vec::new());
        let epoch = shared.map.read().expect("map lock").epoch;
        let f = Frame::Control(Control::Rejoin {
            service: rc.service.clone(),
            addr: rc.addr.clone(),
            member: rc.member,
            owned: owned_ranges(shared, rc.units),
            epoch,
        });
        if write_frame(&mut w, &f, &mut scratch).await.is_err() {
            continue;
        }
        match tokio::time::timeout(join_timeout, read_frame(&mut r, &mut buf)).await {
            Ok(Ok(Some(Frame::Control(Control::Welcome { member, units, .. }))))
                if member == rc.member && units == rc.units =>
            {
                // Backups are not carried over (a staged copy cannot tell whether its seed
                // finished): drop them; the coordinator seeds new ones.
                let all = 0..=SLOT_COUNT - 1;
                shared.repl.set_target(&all, None);
                let mut backing = shared.repl.backing.lock().expect("backing lock");
                shared
                    .repl
                    .drop_backing(&mut backing, &shared.linklet, &all);
                return Ok((r, w));
            }
            Ok(Ok(Some(Frame::Control(Control::Expired)))) => {
                shared.fence_ms.store(0, Ordering::Release);
                return Err("the coordinator does not know this member (expired)".into());
            }
            Ok(Ok(Some(Frame::Control(Control::Refused { reason })))) => return Err(reason),
            _ => continue,
        }
    }
    Err("coordinator unreachable".into())
}

/// One coordinator session; returns why it ended and whether it broke (rejoin) rather than
/// ended for good.
async fn session_once<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: &Arc<Shared<K, V>>,
    r: CoordReader,
    mut w: CoordWriter,
    s: &mut Session,
) -> (String, bool) {
    let shared = Arc::clone(shared);
    // Frames are read on their own task: a read is not cancel-safe inside `select!`.
    let (in_tx, mut in_rx) = mpsc::channel(limits::SESSION_QUEUE_MAX);
    let reader = tokio::spawn(async move {
        let mut r = r;
        let mut buf = Vec::new();
        loop {
            let f = read_frame(&mut r, &mut buf).await;
            let end = !matches!(f, Ok(Some(_)));
            if in_tx.send(f).await.is_err() || end {
                break;
            }
        }
    });
    let mut scratch = Vec::new();
    let mut seq = 0u64;
    let mut sent: std::collections::VecDeque<(u64, u64)> = Default::default();
    let mut iv = tokio::time::interval(Duration::from_millis(s.heartbeat_ms));
    iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut load = LoadMeter::new(&shared);
    let mut broken = true;
    let why: String = loop {
        let out = tokio::select! {
            _ = iv.tick() => {
                seq += 1;
                let report = (seq % LOAD_REPORT_EVERY == 0).then(|| load.report(&shared));
                sent.push_back((seq, shared.now_ms()));
                if sent.len() > limits::HEARTBEATS_IN_FLIGHT_MAX {
                    sent.pop_front();
                }
                Control::Heartbeat { seq, load: report }
            }
            up = s.up_rx.recv() => match up {
                Some(c) => c,
                None => {
                    broken = false;
                    break "mover stopped".into();
                }
            },
            f = in_rx.recv() => {
                let c = match f {
                    Some(Ok(Some(Frame::Control(c)))) => c,
                    Some(Ok(None)) | None => break "coordinator closed the session".into(),
                    Some(Ok(Some(_))) => break "unexpected frame from the coordinator".into(),
                    Some(Err(e)) => break format!("coordinator: {e}"),
                };
                match c {
                    Control::HeartbeatAck { seq: acked } => {
                        while let Some(&(s0, t)) = sent.front() {
                            if s0 > acked { break; }
                            sent.pop_front();
                            if s0 == acked {
                                shared.fence_ms.fetch_max(t + s.lease_ms, Ordering::AcqRel);
                            }
                        }
                    }
                    Control::Adopt { range } => adopt(&shared, range),
                    Control::Seed { seed_id, range, to_addr, .. } => {
                        let refused = s.seed_tx.try_send(SeedOrder { seed_id, range, to_addr }).is_err();
                        if refused {
                            let done = Control::SeedDone { seed_id, ok: false };
                            if write_frame(&mut w, &Frame::Control(done), &mut scratch).await.is_err() {
                                break "coordinator write failed".into();
                            }
                        }
                    }
                    Control::Unbackup { range } => {
                        if let Some(r) = range.to_range() {
                            shared.repl.set_target(&r, None);
                        }
                    }
                    Control::DropBackup { range } => {
                        if let Some(r) = range.to_range() {
                            let mut backing = shared.repl.backing.lock().expect("backing lock");
                            shared.repl.drop_backing(&mut backing, &shared.linklet, &r);
                        }
                    }
                    Control::Promote { range } => {
                        if let Some(r) = range.to_range() {
                            shared.repl.promote(&shared.linklet, &r);
                        }
                    }
                    Control::MoveOut { move_id, range, to_addr, backup_addr, handover, .. } => {
                        // A full queue refuses the move at once (the sharder picks again later).
                        let order = MoveOrder { move_id, range, to_addr, backup_addr, handover };
                        let refused = s.move_tx.try_send(order).is_err();
                        if refused {
                            let done = Control::MoveDone { move_id, outcome: MoveOutcome::Aborted };
                            if write_frame(&mut w, &Frame::Control(done), &mut scratch).await.is_err() {
                                break "coordinator write failed".into();
                            }
                        }
                    }
                    Control::StateLost { ranges, .. } => {
                        for r in ranges.iter().filter_map(|r| r.to_range()) {
                            let _ = shared.linklet.report_member_crashed(r);
                        }
                    }
                    Control::Map(m) => {
                        *shared.map.write().expect("map lock") = m;
                    }
                    Control::Expired => {
                        shared.fence_ms.store(0, Ordering::Release);
                        broken = false;
                        break "lease expired: replaced by the coordinator".into();
                    }
                    Control::Drained => {
                        shared.fence_ms.store(0, Ordering::Release);
                        broken = false;
                        break "drained: every unit was moved to other members".into();
                    }
                    Control::Disown { range } => {
                        // Another member owns it (a conflict after a coordinator restart):
                        // stop serving and drop it, without a loss event (it lives there).
                        if let Some(r) = range.to_range() {
                            if shared.linklet.export_range(r.clone()).is_ok() {
                                let _ = shared.linklet.finish_export(r.clone());
                            }
                            shared.repl.set_target(&r, None);
                        }
                    }
                    _ => {}
                }
                continue;
            }
        };
        if write_frame(&mut w, &Frame::Control(out), &mut scratch)
            .await
            .is_err()
        {
            break "coordinator write failed".into();
        }
    };
    reader.abort();
    (why, broken)
}

/// A move the session hands to the mover.
struct MoveOrder {
    move_id: u64,
    range: SlotRange,
    to_addr: String,
    /// The unit's backup, for the target to replicate to.
    backup_addr: Option<String>,
    /// The target is the unit's backup: hand over instead of copying.
    handover: bool,
}

/// Serve `range` from now on, starting empty. A range already served (an ambiguous move that
/// did commit here) is left as it is. A range still `Importing` here (a move into this member
/// whose source just died: its connection's close is about to abort the import) is retried
/// until that abort happened, at most `ADOPT_RETRIES` times.
fn adopt<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: &Arc<Shared<K, V>>,
    range: SlotRange,
) {
    let Some(r) = range.to_range() else { return };
    {
        // A staged backup copy of an adopted unit is stale (its seed had not finished): drop
        // it; the unit starts empty, as the coordinator reported.
        let mut backing = shared.repl.backing.lock().expect("backing lock");
        shared.repl.drop_backing(&mut backing, &shared.linklet, &r);
    }
    shared.repl.set_target(&r, None);
    let try_adopt = move |l: &Linklet<K, V>| -> bool {
        if l.begin_import(r.clone()).is_ok() {
            let _ = l.commit_import(r.clone());
            return true;
        }
        r.clone().all(|s| l.slot_state(s) == SlotState::Serving)
    };
    if try_adopt(&shared.linklet) {
        return;
    }
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        for _ in 0..ADOPT_RETRIES {
            tokio::time::sleep(Duration::from_millis(ADOPT_RETRY_MS)).await;
            if try_adopt(&shared.linklet) {
                return;
            }
        }
        eprintln!("linked member: could not adopt {range:?}: slots stayed in another state");
    });
}

/// Attempts of an adoption that found its range busy, `ADOPT_RETRY_MS` apart (5 s in all: far
/// more than a dead source's connection takes to close).
const ADOPT_RETRIES: u32 = 200;
const ADOPT_RETRY_MS: u64 = 25;

/// Per-unit request rates, bytes and process CPU between two reports.
struct LoadMeter {
    at: Instant,
    cpu_ticks: u64,
}

impl LoadMeter {
    fn new<K, V>(_: &Shared<K, V>) -> Self {
        LoadMeter {
            at: Instant::now(),
            cpu_ticks: cpu_ticks(),
        }
    }

    fn report<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &mut self,
        shared: &Shared<K, V>,
    ) -> MemberLoad {
        let secs = self.at.elapsed().as_secs_f64().max(1e-3);
        let ticks = cpu_ticks();
        // /proc reports in USER_HZ, which Linux fixes at 100 for user space.
        let cpu_cores = ticks.saturating_sub(self.cpu_ticks) as f64 / 100.0 / secs;
        self.at = Instant::now();
        self.cpu_ticks = ticks;
        let spu = shared.slots_per_unit;
        let units = (0..shared.unit_ops.len())
            .filter_map(|u| {
                let first = u as u16 * spu;
                let ops = shared.unit_ops[u].swap(0, Ordering::Relaxed);
                if !matches!(
                    shared.linklet.slot_state(first),
                    SlotState::Serving | SlotState::Moving
                ) {
                    return None;
                }
                let (_, bytes) = shared.linklet.usage(first..=first + spu - 1);
                Some(UnitLoad {
                    unit: u as u16,
                    ops_per_s: ops as f64 / secs,
                    bytes,
                })
            })
            .collect();
        MemberLoad { units, cpu_cores }
    }
}

/// utime + stime of this process in clock ticks (0 where /proc is not there).
fn cpu_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // The command name (field 2) may contain spaces; fields after its ')' are plain.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let num = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    num(11) + num(12)
}

/// Runs the export side of the moves this member is told to make, one at a time.
async fn mover<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: Arc<Shared<K, V>>,
    mut rx: mpsc::Receiver<MoveOrder>,
    up: mpsc::Sender<Control>,
) {
    while let Some(o) = rx.recv().await {
        let (move_id, range, to_addr) = (o.move_id, o.range, o.to_addr.clone());
        let kind = if o.handover { "handover" } else { "move" };
        let outcome = match range.to_range() {
            Some(r) => move_out(&shared, r, o).await,
            None => MoveOutcome::Aborted,
        };
        eprintln!("linked member: {kind} {move_id} {range:?} -> {to_addr}: {outcome:?}");
        if up
            .send(Control::MoveDone { move_id, outcome })
            .await
            .is_err()
        {
            return;
        }
    }
}

async fn step<T>(
    f: impl std::future::Future<Output = Result<T, WireError>>,
) -> Result<T, WireError> {
    tokio::time::timeout(Duration::from_millis(limits::MOVE_STEP_TIMEOUT_MS), f)
        .await
        .map_err(|_| WireError::Timeout)?
}

/// One round trip of a move step: send `f`, expect `Ack` for `move_id`.
async fn call(
    conn: &mut (
        BufReader<tokio::net::tcp::OwnedReadHalf>,
        BufWriter<tokio::net::tcp::OwnedWriteHalf>,
    ),
    f: &Frame,
    move_id: u64,
    buf: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<bool, WireError> {
    step(async {
        write_frame(&mut conn.1, f, scratch).await?;
        match read_frame(&mut conn.0, buf).await? {
            Some(Frame::Control(Control::Ack { move_id: m })) if m == move_id => Ok(true),
            Some(Frame::Control(Control::Nack { move_id: m, reason })) if m == move_id => {
                eprintln!("linked member: move {move_id} refused by the target: {reason}");
                Ok(false)
            }
            Some(_) => Err(WireError::Bad("unexpected answer to a move step")),
            None => Err(WireError::Bad("target closed the move connection")),
        }
    })
    .await
}

/// The export side of the move protocol (see `ringlet_linklet::moving`) over one connection.
async fn move_out<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: &Shared<K, V>,
    range: RangeInclusive<Slot>,
    order: MoveOrder,
) -> MoveOutcome {
    let MoveOrder {
        move_id,
        to_addr,
        backup_addr,
        handover,
        ..
    } = order;
    let to_addr = to_addr.as_str();
    let Ok(stream) = step(async { Ok(TcpStream::connect(to_addr).await?) }).await else {
        return MoveOutcome::Aborted;
    };
    let _ = stream.set_nodelay(true);
    let (r, w) = stream.into_split();
    let mut conn = (BufReader::new(r), BufWriter::new(w));
    let (mut buf, mut scratch) = (Vec::new(), Vec::new());
    let begin = Frame::Control(Control::BeginImport {
        move_id,
        range: SlotRange {
            first: *range.start(),
            last: *range.end(),
        },
        backup_addr,
    });
    // A handover has nothing to stage: the target already holds the unit as its backup.
    if !handover
        && !matches!(
            call(&mut conn, &begin, move_id, &mut buf, &mut scratch).await,
            Ok(true)
        )
    {
        return MoveOutcome::Aborted;
    }
    let abort = |why: &str| eprintln!("linked member: move {move_id} aborted: {why}");
    let Ok(export) = shared.linklet.export_range(range.clone()) else {
        abort("range not serving here");
        // Closing the connection makes the target drop its (empty) import.
        return MoveOutcome::Aborted;
    };
    // No write lands on the range from here on; let every earlier one reach the backup before
    // the target takes over, so the backup's copy equals what the batches carry and no late
    // item of this member can overwrite what the target replicates after the commit.
    let flushed = if shared.repl.on() {
        let (repl, l) = (Arc::clone(&shared.repl), Arc::clone(&shared.linklet));
        tokio::task::spawn_blocking(move || repl.flush(&l))
            .await
            .unwrap_or(false)
    } else {
        true
    };
    if !flushed {
        drop(export);
        abort("the backup did not catch up");
        let _ = shared.linklet.abort_export(range);
        return MoveOutcome::Aborted;
    }
    if handover {
        drop(export);
        let f = Frame::Control(Control::Handover {
            move_id,
            range: SlotRange {
                first: *range.start(),
                last: *range.end(),
            },
        });
        let res = call(&mut conn, &f, move_id, &mut buf, &mut scratch).await;
        return commit_outcome(shared, range, res);
    }
    let mut ok = true;
    for batch in export {
        let Ok(batch) = batch else {
            ok = false;
            break;
        };
        let f = Frame::Batch { move_id, batch };
        if !matches!(
            call(&mut conn, &f, move_id, &mut buf, &mut scratch).await,
            Ok(true)
        ) {
            ok = false;
            break;
        }
    }
    if !ok {
        abort("a batch failed");
        let _ = shared.linklet.abort_export(range);
        let f = Frame::Control(Control::AbortImport { move_id });
        let _ = call(&mut conn, &f, move_id, &mut buf, &mut scratch).await;
        return MoveOutcome::Aborted;
    }
    let commit = Frame::Control(Control::CommitImport { move_id });
    let res = call(&mut conn, &commit, move_id, &mut buf, &mut scratch).await;
    commit_outcome(shared, range, res)
}

/// The source's side of a commit's answer.
fn commit_outcome<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    shared: &Shared<K, V>,
    range: RangeInclusive<Slot>,
    res: Result<bool, WireError>,
) -> MoveOutcome {
    match res {
        Ok(true) => {
            let _ = shared.linklet.finish_export(range.clone());
            shared.repl.set_target(&range, None);
            MoveOutcome::Committed
        }
        Ok(false) => {
            let _ = shared.linklet.abort_export(range);
            MoveOutcome::Aborted
        }
        Err(_) => {
            // The target may have committed: never serve the range here again.
            let _ = shared.linklet.finish_export(range.clone());
            shared.repl.set_target(&range, None);
            MoveOutcome::Ambiguous
        }
    }
}
