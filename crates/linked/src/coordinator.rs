//! The coordinator process: hosts one [`Sharder`] per linked service and speaks the
//! [`crate::wire`] protocol to members (join, heartbeats, move orders) and watchers (routers:
//! the service map, state-loss events).
//!
//! One task per connection reads frames; one writer task per connection drains a bounded
//! queue ([`limits::SESSION_QUEUE_MAX`]), so a slow peer never blocks the sharder; a peer whose
//! queue is full is cut off. A tick task drives [`Sharder::tick`] (lease expiry, balancing).
//! All sharder state sits behind one mutex: every step is a few microseconds of arithmetic.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::limits;
use crate::sharder::{Action, MemberId, Sharder, SharderConfig};
use crate::wire::{read_frame, text_ok, write_frame, Control, Frame};

/// Coordinator settings.
#[derive(Clone, Debug)]
pub struct CoordinatorConfig {
    /// Config of every service's sharder.
    pub sharder: SharderConfig,
    /// Interval of [`Sharder::tick`].
    pub tick_ms: u64,
    /// Per-service replicas (1 or 2), overriding `sharder.replicas` for the named services.
    pub replicas_for: HashMap<String, u8>,
}

impl CoordinatorConfig {
    /// The sharder config of `service`.
    fn sharder_for(&self, service: &str) -> SharderConfig {
        let mut c = self.sharder.clone();
        if let Some(&r) = self.replicas_for.get(service) {
            c.replicas = r;
        }
        c
    }
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            sharder: SharderConfig::default(),
            tick_ms: 100,
            replicas_for: HashMap::new(),
        }
    }
}

type Tx = mpsc::Sender<Frame>;

struct Service {
    sharder: Sharder,
    members: HashMap<MemberId, Tx>,
    watchers: Vec<Tx>,
}

struct Hub {
    cfg: CoordinatorConfig,
    origin: Instant,
    services: HashMap<String, Service>,
}

impl Hub {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Queue `f` to a peer; a full queue means the peer stopped reading: cut it off (dropping the
/// sender ends its writer, which closes the socket).
fn send(tx: &Tx, f: Frame) -> bool {
    tx.try_send(f).is_ok()
}

impl Service {
    fn broadcast(&mut self, f: &Frame) {
        self.members.retain(|_, tx| send(tx, f.clone()));
        self.watchers.retain(|tx| send(tx, f.clone()));
    }

    fn apply(&mut self, actions: Vec<Action>) {
        let mut map_changed = false;
        for a in actions {
            match a {
                Action::Adopt { member, range } => {
                    if let Some(tx) = self.members.get(&member) {
                        send(tx, Frame::Control(Control::Adopt { range }));
                    }
                }
                Action::MoveOut {
                    move_id,
                    from,
                    to,
                    to_addr,
                    range,
                    backup_addr,
                    handover,
                } => {
                    if let Some(tx) = self.members.get(&from) {
                        send(
                            tx,
                            Frame::Control(Control::MoveOut {
                                move_id,
                                range,
                                to,
                                to_addr,
                                backup_addr,
                                handover,
                            }),
                        );
                    }
                }
                Action::Seed {
                    seed_id,
                    from,
                    to,
                    to_addr,
                    range,
                } => {
                    eprintln!("linked coordinator: seed {seed_id} of {range:?}: {from} -> {to}");
                    if let Some(tx) = self.members.get(&from) {
                        send(
                            tx,
                            Frame::Control(Control::Seed {
                                seed_id,
                                range,
                                to,
                                to_addr,
                            }),
                        );
                    }
                }
                Action::Unbackup { member, range } => {
                    eprintln!("linked coordinator: {range:?} unbacked at {member}");
                    if let Some(tx) = self.members.get(&member) {
                        send(tx, Frame::Control(Control::Unbackup { range }));
                    }
                }
                Action::DropBackup { member, range } => {
                    if let Some(tx) = self.members.get(&member) {
                        send(tx, Frame::Control(Control::DropBackup { range }));
                    }
                }
                Action::Disown { member, range } => {
                    eprintln!("linked coordinator: member {member} disowns {range:?}");
                    if let Some(tx) = self.members.get(&member) {
                        send(tx, Frame::Control(Control::Disown { range }));
                    }
                }
                Action::Promote { member, range } => {
                    eprintln!("linked coordinator: member {member} promoted for {range:?}");
                    if let Some(tx) = self.members.get(&member) {
                        send(tx, Frame::Control(Control::Promote { range }));
                    }
                }
                Action::StateLost { member, ranges } => {
                    eprintln!("linked coordinator: member {member} lost {ranges:?}");
                    self.broadcast(&Frame::Control(Control::StateLost { member, ranges }));
                }
                Action::Expired { member } => {
                    eprintln!("linked coordinator: member {member} expired");
                    if let Some(tx) = self.members.remove(&member) {
                        send(&tx, Frame::Control(Control::Expired));
                    }
                }
                Action::Drained { member } => {
                    eprintln!("linked coordinator: member {member} drained and left");
                    if let Some(tx) = self.members.remove(&member) {
                        send(&tx, Frame::Control(Control::Drained));
                    }
                }
                Action::MapChanged => map_changed = true,
            }
        }
        if map_changed {
            let map = self.sharder.map();
            self.broadcast(&Frame::Control(Control::Map(map)));
        }
    }
}

/// Serve the coordinator on `listener` until the process ends.
///
/// # Errors
/// Only a failing `accept` loop's fatal error.
pub async fn serve(listener: TcpListener, cfg: CoordinatorConfig) -> std::io::Result<()> {
    for c in std::iter::once(cfg.sharder.clone())
        .chain(cfg.replicas_for.keys().map(|s| cfg.sharder_for(s)))
    {
        c.validate()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
    }
    let tick = Duration::from_millis(cfg.tick_ms.max(1));
    let hub = Arc::new(Mutex::new(Hub {
        cfg,
        origin: Instant::now(),
        services: HashMap::new(),
    }));
    let ticker = Arc::clone(&hub);
    tokio::spawn(async move {
        let mut iv = tokio::time::interval(tick);
        iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            iv.tick().await;
            let mut hub = ticker.lock().expect("hub lock");
            let now = hub.now_ms();
            for svc in hub.services.values_mut() {
                let actions = svc.sharder.tick(now);
                svc.apply(actions);
            }
        }
    });
    loop {
        let (stream, peer) = listener.accept().await?;
        let hub = Arc::clone(&hub);
        tokio::spawn(async move {
            if let Err(e) = connection(hub, stream).await {
                eprintln!("linked coordinator: {peer}: {e}");
            }
        });
    }
}

/// Bind `addr` and serve; returns the bound address and the serving future's handle.
///
/// # Errors
/// The bind error, or `InvalidInput` for an address off loopback ([`loopback_only`]).
pub async fn spawn(
    addr: SocketAddr,
    cfg: CoordinatorConfig,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    loopback_only(addr)?;
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((local, tokio::spawn(serve(listener, cfg))))
}

async fn connection(
    hub: Arc<Mutex<Hub>>,
    stream: TcpStream,
) -> Result<(), crate::error::WireError> {
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    let Some(first) = read_frame(&mut r, &mut buf).await? else {
        return Ok(());
    };
    let (tx, mut rx) = mpsc::channel::<Frame>(limits::SESSION_QUEUE_MAX);
    let writer = tokio::spawn(async move {
        let mut w = BufWriter::new(w);
        let mut scratch = Vec::new();
        while let Some(f) = rx.recv().await {
            if write_frame(&mut w, &f, &mut scratch).await.is_err() {
                break;
            }
        }
    });
    let res = match first {
        Frame::Control(Control::Join { service, addr }) => {
            member_session(&hub, &tx, &mut r, &mut buf, service, addr, None).await
        }
        Frame::Control(Control::Rejoin {
            service,
            addr,
            member,
            owned,
            epoch,
        }) => {
            let rejoin = Some((member, owned, epoch));
            member_session(&hub, &tx, &mut r, &mut buf, service, addr, rejoin).await
        }
        Frame::Control(Control::Watch { service }) => {
            watch_session(&hub, &tx, &mut r, &mut buf, service).await
        }
        _ => Err(crate::error::WireError::Bad("expected Join or Watch")),
    };
    drop(tx);
    let _ = writer.await;
    res
}

fn refuse(tx: &Tx, reason: &str) {
    send(
        tx,
        Frame::Control(Control::Refused {
            reason: reason.into(),
        }),
    );
}

/// A member's old id, the ranges it serves and the last epoch it saw (a `Rejoin`).
type RejoinClaim = (u64, Vec<crate::wire::SlotRange>, u64);

async fn member_session(
    hub: &Arc<Mutex<Hub>>,
    tx: &Tx,
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    buf: &mut Vec<u8>,
    service: String,
    addr: String,
    rejoin: Option<RejoinClaim>,
) -> Result<(), crate::error::WireError> {
    if rejoin
        .as_ref()
        .is_some_and(|(_, owned, _)| owned.len() > usize::from(limits::UNITS_MAX))
    {
        refuse(tx, "too many ranges");
        return Ok(());
    }
    if !text_ok(&service) || !text_ok(&addr) {
        refuse(tx, "service or address too long");
        return Ok(());
    }
    let member = {
        let mut guard = hub.lock().expect("hub lock");
        let hub = &mut *guard;
        let now = hub.now_ms();
        if !hub.services.contains_key(&service) {
            if hub.services.len() >= limits::SERVICES_MAX {
                refuse(tx, "too many services");
                return Ok(());
            }
            let sharder = match Sharder::new_at(hub.cfg.sharder_for(&service), now) {
                Ok(s) => s,
                Err(e) => {
                    refuse(tx, &e.to_string());
                    return Ok(());
                }
            };
            hub.services.insert(
                service.clone(),
                Service {
                    sharder,
                    members: HashMap::new(),
                    watchers: Vec::new(),
                },
            );
        }
        let svc = hub.services.get_mut(&service).expect("inserted above");
        let joined = match rejoin {
            None => svc.sharder.join(addr.clone(), now).map(Some),
            Some((member, owned, epoch)) => svc
                .sharder
                .rejoin(member, addr.clone(), &owned, epoch, now)
                .map(|a| a.map(|a| (member, a))),
        };
        let (member, actions) = match joined {
            Ok(Some(x)) => x,
            Ok(None) => {
                // Not known here and not recovering: it was expired (its units are gone).
                send(tx, Frame::Control(Control::Expired));
                return Ok(());
            }
            Err(e) => {
                refuse(tx, &e.to_string());
                return Ok(());
            }
        };
        let cfg = svc.sharder.config();
        send(
            tx,
            Frame::Control(Control::Welcome {
                member,
                lease_ms: cfg.lease_ms,
                heartbeat_ms: cfg.heartbeat_ms,
                units: cfg.units,
                replicas: cfg.replicas,
            }),
        );
        svc.members.insert(member, tx.clone());
        eprintln!("linked coordinator: member {member} joined {service} at {addr}");
        svc.apply(actions);
        member
    };
    // Bounded by the connection: one frame per round, until the member hangs up. A member that
    // hangs up is not declared dead here: its lease decides (a reconnecting member is a new
    // member; the old one fences itself when its lease runs out).
    while let Some(f) = read_frame(r, buf).await? {
        let mut guard = hub.lock().expect("hub lock");
        let now = guard.now_ms();
        let Some(svc) = guard.services.get_mut(&service) else {
            break;
        };
        match f {
            Frame::Control(Control::Heartbeat { seq, load }) => {
                if svc.sharder.heartbeat(member, load.as_ref(), now) {
                    send(tx, Frame::Control(Control::HeartbeatAck { seq }));
                } else {
                    send(tx, Frame::Control(Control::Expired));
                    break;
                }
            }
            Frame::Control(Control::MoveDone { move_id, outcome }) => {
                let actions = svc.sharder.move_done(move_id, outcome, now);
                svc.apply(actions);
            }
            Frame::Control(Control::SeedDone { seed_id, ok }) => {
                eprintln!("linked coordinator: seed {seed_id} done: {ok}");
                let actions = svc.sharder.seed_done(seed_id, ok);
                svc.apply(actions);
            }
            Frame::Control(Control::Leave) => {
                let actions = svc.sharder.drain(member);
                svc.apply(actions);
            }
            _ => return Err(crate::error::WireError::Bad("unexpected frame from member")),
        }
    }
    Ok(())
}

async fn watch_session(
    hub: &Arc<Mutex<Hub>>,
    tx: &Tx,
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    buf: &mut Vec<u8>,
    service: String,
) -> Result<(), crate::error::WireError> {
    {
        let mut hub = hub.lock().expect("hub lock");
        // A watcher may come before any member: it gets an empty map now and the real one when
        // the first member joins.
        match hub.services.get_mut(&service) {
            Some(svc) => {
                if svc.watchers.len() >= limits::WATCHERS_MAX {
                    refuse(tx, "too many watchers");
                    return Ok(());
                }
                send(tx, Frame::Control(Control::Map(svc.sharder.map())));
                svc.watchers.push(tx.clone());
            }
            None => {
                if !text_ok(&service) || hub.services.len() >= limits::SERVICES_MAX {
                    refuse(tx, "unknown service");
                    return Ok(());
                }
                let now = hub.now_ms();
                let Ok(sharder) = Sharder::new_at(hub.cfg.sharder_for(&service), now) else {
                    refuse(tx, "invalid replicas for this service");
                    return Ok(());
                };
                send(tx, Frame::Control(Control::Map(sharder.map())));
                hub.services.insert(
                    service,
                    Service {
                        sharder,
                        members: HashMap::new(),
                        watchers: vec![tx.clone()],
                    },
                );
            }
        }
    }
    // Watchers send nothing; wait for the hang-up.
    while read_frame(r, buf).await?.is_some() {}
    Ok(())
}

/// The linked protocol (coordinator, member and router connections) has neither
/// authentication nor TLS yet, so its ports listen on loopback only: anyone who could reach
/// them could move, read or drop a service's objects. Refused rather than served open, as
/// the store's own internal ports were before they gained a secret and TLS.
///
/// # Errors
/// `InvalidInput` naming the address, for anything but a loopback address.
pub fn loopback_only(addr: SocketAddr) -> std::io::Result<()> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{addr}: the linked protocol has no authentication or TLS yet; listen on \
                 loopback (127.0.0.1 or ::1) and put the services of one machine together"
            ),
        ))
    }
}

#[cfg(test)]
mod loopback_tests {
    use super::*;

    #[test]
    fn only_loopback_addresses_are_served() {
        assert!(loopback_only("127.0.0.1:7400".parse().unwrap()).is_ok());
        assert!(loopback_only("[::1]:7400".parse().unwrap()).is_ok());
        for open in ["0.0.0.0:7400", "10.1.2.3:7400", "[::]:7400"] {
            let e = loopback_only(open.parse().unwrap()).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("no authentication"), "{e}");
        }
    }
}
