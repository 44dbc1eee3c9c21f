//! Replication of a member's units to their backups (services with `replicas: 2`), over the
//! member protocol. The Linklet side (dirty log, snapshots, applying) is
//! `ringlet_linklet::replica`; this is who talks to whom, and when a request may be answered.
//!
//! **Owner.** Rounds run under one lock (the *shipper*: the connections to the backups and the
//! seeds in progress). A round takes one step of every seed in progress (a snapshot of the
//! next few slots), then drains the Linklet's dirty log, groups the items by the backup of
//! their unit (`Repl::targets`, per unit) and sends each backup its items on one blocking
//! connection, snapshot items first (the order they were marshalled in: see the Linklet's
//! `replica` module for why that order is all the interleaving needs), then reads the acks.
//! When every backup acked, `acked` moves to the drain's `upto`. A request whose handler wrote
//! (the Linklet's per-thread write sequence is non-zero) is answered only when `acked` reaches
//! that sequence: synchronous replication. The request's own connection thread runs the round
//! (leader/follower group commit): it takes the lock; if a round run meanwhile by another
//! thread already covered its write it is done, else it runs one, covering every write made so
//! far. So a write costs one round trip to the backup from the thread that answers it, with no
//! hand-off to another thread. A seeder thread steps the seeds when no request does. A unit
//! without a backup (none assigned yet, or it died) is not replicated: its items are dropped
//! and the round acks at once.
//!
//! **Failure of a backup.** Its items are put back in the dirty log and the round is not
//! acked: requests that wrote wait, rounds retry (with a backoff, bounded by
//! `REPL_WAIT_TIMEOUT_MS` per request), until the backup answers again or the coordinator
//! removes it (`Unbackup`, after its lease: ≤ lease + one tick). A backup that is merely slow
//! therefore slows its owners' writes; that is the price of answering only what survives one
//! crash.
//!
//! **Backup.** Staged copies live in the backup's Linklet as `Importing` slots (not served).
//! `backing[unit]` says which units this member backs; its mutex also orders applying items
//! against the steps that end a backup (promote, drop, a move or adoption of the unit), so no
//! item lands in a range after it stopped being a backup. Items for units not backed here are
//! acked as ignored: the coordinator no longer counts this member as their backup (it would
//! never promote it), and the owner, if it is still serving, checks its own lease before
//! answering (see `member::serve_conn`).

use std::collections::HashMap;
use std::io::Write;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ringlet_linklet::{LinkKey, Linklet, Marshal, ReplItem};
use ringlet_types::Slot;
use tokio::sync::mpsc;

use crate::error::WireError;
use crate::limits;
use crate::wire::{read_frame_sync, write_frame_sync, Control, Frame, SlotRange};

/// Replication state shared by a member's tasks.
pub(crate) struct Repl {
    /// Copies per unit the service keeps (1: replication off).
    pub(crate) replicas: u8,
    pub(crate) slots_per_unit: u16,
    /// Per unit this member serves: the backup's address, if it has one.
    pub(crate) targets: RwLock<Vec<Option<String>>>,
    /// Per unit: this member holds a staged backup copy of it.
    pub(crate) backing: Mutex<Vec<bool>>,
    /// Every write numbered `<=` this is at the backups.
    acked: AtomicU64,
    /// Connections to the backups and seeds in progress; held for a whole round.
    shipper: parking_lot::Mutex<Shipper>,
    /// `SeedDone` reports to the coordinator session.
    up: mpsc::Sender<Control>,
    /// Bytes this member sent to backups and got back (frames and acks), for benchmarks.
    pub(crate) bytes: AtomicU64,
}

#[derive(Default)]
struct Shipper {
    conns: HashMap<String, ReplConn>,
    seeds: Vec<SeedJob>,
    round: u64,
    scratch: Vec<u8>,
}

/// Seeds the session hands to the replicator.
pub(crate) struct SeedOrder {
    pub(crate) seed_id: u64,
    pub(crate) range: SlotRange,
    pub(crate) to_addr: String,
}

impl Repl {
    pub(crate) fn new(
        replicas: u8,
        units: u16,
        slots_per_unit: u16,
        up: mpsc::Sender<Control>,
    ) -> Self {
        Repl {
            replicas,
            slots_per_unit,
            targets: RwLock::new(vec![None; usize::from(units)]),
            backing: Mutex::new(vec![false; usize::from(units)]),
            acked: AtomicU64::new(0),
            shipper: parking_lot::Mutex::new(Shipper::default()),
            up,
            bytes: AtomicU64::new(0),
        }
    }

    pub(crate) fn on(&self) -> bool {
        self.replicas > 1
    }

    fn unit_of(&self, slot: Slot) -> usize {
        usize::from(slot / self.slots_per_unit)
    }

    fn unit_range(&self, u: usize) -> RangeInclusive<Slot> {
        let first = u as u16 * self.slots_per_unit;
        first..=first + self.slots_per_unit - 1
    }

    /// The units `range` covers.
    pub(crate) fn units_of(&self, range: &RangeInclusive<Slot>) -> RangeInclusive<usize> {
        self.unit_of(*range.start())..=self.unit_of(*range.end())
    }

    /// Set (or clear) the backup of the units of `range`.
    pub(crate) fn set_target(&self, range: &RangeInclusive<Slot>, addr: Option<&str>) {
        let mut t = self.targets.write().expect("targets lock");
        for u in self.units_of(range) {
            if let Some(x) = t.get_mut(u) {
                *x = addr.map(str::to_owned);
            }
        }
    }

    /// Until every write numbered `<= seq` is at the backups, run replication rounds on this
    /// thread (or find that another thread's round covered it); bounded by
    /// `REPL_WAIT_TIMEOUT_MS`. Returns whether it is covered. Blocking: call it from a
    /// connection thread or `spawn_blocking`.
    pub(crate) fn ship_until<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &self,
        linklet: &Linklet<K, V>,
        seq: u64,
    ) -> bool {
        let deadline = Instant::now() + Duration::from_millis(limits::REPL_WAIT_TIMEOUT_MS);
        let mut backoff = limits::REPL_RETRY_MIN_MS;
        // Bounded by the deadline: every round either covers `seq` or sleeps a backoff.
        loop {
            if self.acked.load(Ordering::Acquire) >= seq {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let Some(mut sh) = self.shipper.try_lock_for(left) else {
                return false;
            };
            if self.acked.load(Ordering::Acquire) >= seq {
                return true;
            }
            if !self.round(&mut sh, linklet) {
                drop(sh);
                std::thread::sleep(Duration::from_millis(backoff));
                backoff = (backoff * 2).min(limits::REPL_RETRY_MAX_MS);
            }
        }
    }

    /// Every write made so far is at the backups (the source of a move calls it after the
    /// `Moving` mark).
    pub(crate) fn flush<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &self,
        linklet: &Linklet<K, V>,
    ) -> bool {
        self.ship_until(linklet, linklet.write_seq())
    }

    /// Stop backing the units of `range` here: drop their staged copies (no state-loss event:
    /// the application never served them). Call with `backing` locked.
    pub(crate) fn drop_backing<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &self,
        backing: &mut [bool],
        linklet: &Linklet<K, V>,
        range: &RangeInclusive<Slot>,
    ) {
        for u in self.units_of(range) {
            if backing.get(u).copied().unwrap_or(false) {
                backing[u] = false;
                let _ = linklet.discard_import(self.unit_range(u));
            }
        }
    }

    /// Backup side: stage `range` (one unit) as a backup, replacing any staged copy.
    pub(crate) fn begin_backup<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &self,
        linklet: &Linklet<K, V>,
        range: RangeInclusive<Slot>,
    ) -> Result<(), ringlet_linklet::Error> {
        let u = self.unit_of(*range.start());
        if range != self.unit_range(u) {
            return Err(ringlet_linklet::Error::BadRange);
        }
        let mut backing = self.backing.lock().expect("backing lock");
        self.drop_backing(&mut backing, linklet, &range);
        linklet.begin_import(range)?;
        backing[u] = true;
        Ok(())
    }

    /// Backup side: apply one round; returns the items ignored.
    pub(crate) fn apply<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &self,
        linklet: &Linklet<K, V>,
        items: Vec<ReplItem>,
    ) -> Result<u32, ringlet_linklet::Error> {
        let backing = self.backing.lock().expect("backing lock");
        let (mine, other): (Vec<ReplItem>, Vec<ReplItem>) = items
            .into_iter()
            .partition(|it| backing.get(self.unit_of(it.slot())).copied() == Some(true));
        let out = linklet.apply_replica(&mine)?;
        Ok(u32::try_from(other.len() as u64 + out.ignored).unwrap_or(u32::MAX))
    }

    /// Backup side of a handover: serve the staged copy of `range` if every unit of it is
    /// backed here.
    pub(crate) fn handover<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &self,
        linklet: &Linklet<K, V>,
        range: RangeInclusive<Slot>,
    ) -> Result<(), ringlet_linklet::Error> {
        let mut backing = self.backing.lock().expect("backing lock");
        let units = self.units_of(&range);
        if !units.clone().all(|u| backing.get(u).copied() == Some(true)) {
            return Err(ringlet_linklet::Error::BadRange);
        }
        linklet.commit_import(range.clone())?;
        for u in units {
            backing[u] = false;
        }
        drop(backing);
        self.set_target(&range, None);
        Ok(())
    }

    /// Backup side: the owner of `range` died; serve the staged copy.
    pub(crate) fn promote<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &self,
        linklet: &Linklet<K, V>,
        range: &RangeInclusive<Slot>,
    ) {
        let mut backing = self.backing.lock().expect("backing lock");
        for u in self.units_of(range) {
            let r = self.unit_range(u);
            if backing.get(u).copied() == Some(true) {
                backing[u] = false;
                if let Err(e) = linklet.commit_import(r.clone()) {
                    eprintln!("linked member: promote {r:?}: {e}");
                }
            } else {
                eprintln!("linked member: told to promote {r:?}, which is not backed here");
            }
        }
        drop(backing);
        self.set_target(range, None);
    }
}

/// One blocking connection to a backup.
struct ReplConn {
    r: std::io::BufReader<std::net::TcpStream>,
    w: std::net::TcpStream,
    buf: Vec<u8>,
}

impl ReplConn {
    fn open(addr: &str) -> Result<ReplConn, WireError> {
        use std::net::ToSocketAddrs;
        let t = Duration::from_millis(limits::MOVE_STEP_TIMEOUT_MS);
        let sa = addr
            .to_socket_addrs()?
            .next()
            .ok_or(WireError::Bad("backup address does not resolve"))?;
        let s = std::net::TcpStream::connect_timeout(&sa, t)?;
        s.set_nodelay(true)?;
        // Bounds every step (a backup that stops answering fails the round).
        s.set_read_timeout(Some(t))?;
        s.set_write_timeout(Some(t))?;
        Ok(ReplConn {
            r: std::io::BufReader::new(s.try_clone()?),
            w: s,
            buf: Vec::new(),
        })
    }
}

struct SeedJob {
    seed_id: u64,
    unit: usize,
    range: RangeInclusive<Slot>,
    /// Next slot of the range to snapshot.
    next: u32,
    to_addr: String,
}

/// One backup's share of a round: the frames to send it, in order.
#[derive(Default)]
struct Outbox {
    frames: Vec<Vec<ReplItem>>,
    /// Seeds whose last snapshot step is in `frames`.
    seeds_done: Vec<u64>,
}

impl Repl {
    fn seed_done(&self, seed_id: u64, ok: bool) {
        // A full session queue drops the report; the coordinator's seed timeout retries.
        let _ = self.up.try_send(Control::SeedDone { seed_id, ok });
    }

    /// One round (see the module documentation). Returns whether every backup acked.
    fn round<K: LinkKey, V: Marshal + Send + Sync + 'static>(
        &self,
        sh: &mut Shipper,
        linklet: &Linklet<K, V>,
    ) -> bool {
        sh.round += 1;
        let round = sh.round;
        let targets = self.targets.read().expect("targets lock").clone();
        let mut out: HashMap<String, Outbox> = HashMap::new();
        // Seed steps first: they are marshalled before this round's drain.
        let mut i = 0;
        while i < sh.seeds.len() {
            let j = &mut sh.seeds[i];
            let cancelled =
                targets.get(j.unit).cloned().flatten().as_deref() != Some(j.to_addr.as_str());
            let end = u32::from(*j.range.end());
            let step_end = (j.next + limits::SEED_SLOTS_PER_STEP - 1).min(end);
            let step = (!cancelled)
                .then(|| {
                    linklet
                        .snapshot_range(j.next as Slot..=step_end as Slot)
                        .ok()
                })
                .flatten()
                .and_then(|export| export.collect::<Result<Vec<_>, _>>().ok());
            match step {
                Some(batches) => {
                    let o = out.entry(j.to_addr.clone()).or_default();
                    for b in batches {
                        o.frames
                            .push(b.items.into_iter().map(ReplItem::Put).collect());
                    }
                    j.next = step_end + 1;
                    if j.next > end {
                        o.seeds_done.push(j.seed_id);
                        sh.seeds.remove(i);
                    } else {
                        i += 1;
                    }
                }
                None => {
                    // Cancelled (Unbackup) or the unit stopped being served here mid-seed.
                    if !cancelled {
                        self.set_target(&j.range, None);
                    }
                    self.seed_done(j.seed_id, false);
                    sh.seeds.remove(i);
                }
            }
        }
        // Then the dirty log.
        let drained = match linklet.take_dirty() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("linked member: replication drain failed: {e}");
                return false;
            }
        };
        let mut per_target: HashMap<String, Vec<ReplItem>> = HashMap::new();
        for it in drained.items {
            let u = usize::from(it.slot() / self.slots_per_unit);
            if let Some(Some(addr)) = targets.get(u) {
                per_target.entry(addr.clone()).or_default().push(it);
            }
        }
        for (addr, items) in per_target {
            let o = out.entry(addr).or_default();
            o.frames.extend(split(items));
        }
        // Every backup's frames in one write, then its acks.
        let mut ok = true;
        for (addr, o) in out {
            match ship(sh, &addr, &o.frames, round) {
                Ok(n) => {
                    self.bytes.fetch_add(n, Ordering::Relaxed);
                    for seed_id in o.seeds_done {
                        self.seed_done(seed_id, true);
                    }
                }
                Err(e) => {
                    eprintln!("linked member: replication to {addr} failed: {e}");
                    sh.conns.remove(&addr);
                    ok = false;
                    // Put the keys back: their current values go out again next round.
                    let keys: Vec<(Slot, K)> = o
                        .frames
                        .iter()
                        .flatten()
                        .filter_map(|it| {
                            let key = match it {
                                ReplItem::Put(b) => &b.key,
                                ReplItem::Del { key, .. } => key,
                            };
                            K::from_key_bytes(key).map(|k| (it.slot(), k))
                        })
                        .collect();
                    linklet.mark_dirty(&keys);
                    for seed_id in o.seeds_done {
                        self.seed_done(seed_id, false);
                    }
                }
            }
        }
        if ok {
            self.acked.fetch_max(drained.upto, Ordering::AcqRel);
        }
        ok
    }

    /// Start a seed: stage the range at the backup, register it as the unit's target (every
    /// write from now on goes there; the snapshot, which reads after this, covers the earlier
    /// ones), and queue the snapshot.
    fn start_seed(&self, sh: &mut Shipper, s: SeedOrder) {
        let Some(range) = s.range.to_range() else {
            self.seed_done(s.seed_id, false);
            return;
        };
        let f = Frame::Control(Control::BeginBackup {
            seed_id: s.seed_id,
            range: s.range,
        });
        let begun = (|| -> Result<(), WireError> {
            if !sh.conns.contains_key(&s.to_addr) {
                let c = ReplConn::open(&s.to_addr)?;
                sh.conns.insert(s.to_addr.clone(), c);
            }
            let conn = sh.conns.get_mut(&s.to_addr).expect("inserted above");
            write_frame_sync(&mut conn.w, &f, &mut sh.scratch)?;
            match read_frame_sync(&mut conn.r, &mut conn.buf)? {
                Some(Frame::Control(Control::Ack { move_id })) if move_id == s.seed_id => Ok(()),
                Some(Frame::Control(Control::Nack { reason, .. })) => {
                    eprintln!("linked member: seed {} refused: {reason}", s.seed_id);
                    Err(WireError::Bad("seed refused by the backup"))
                }
                _ => Err(WireError::Bad("unexpected answer to BeginBackup")),
            }
        })();
        if begun.is_err() {
            sh.conns.remove(&s.to_addr);
            self.set_target(&range, None);
            self.seed_done(s.seed_id, false);
            return;
        }
        self.set_target(&range, Some(&s.to_addr));
        sh.seeds.push(SeedJob {
            seed_id: s.seed_id,
            unit: self.unit_of(*range.start()),
            next: u32::from(*range.start()),
            range,
            to_addr: s.to_addr,
        });
    }
}

/// The seeder: starts the seeds the coordinator orders and steps them (a round per step)
/// while no request runs rounds; ends when the session drops its sender.
pub(crate) fn seeder<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    repl: Arc<Repl>,
    linklet: Arc<Linklet<K, V>>,
    orders: std::sync::mpsc::Receiver<SeedOrder>,
) {
    let mut failures = 0u32;
    loop {
        let busy = !repl.shipper.lock().seeds.is_empty() || failures > 0;
        let order = if busy {
            let pause =
                (limits::REPL_RETRY_MIN_MS << failures.min(5)).min(limits::REPL_RETRY_MAX_MS);
            match orders.recv_timeout(Duration::from_millis(if failures > 0 { pause } else { 1 })) {
                Ok(o) => Some(o),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match orders.recv() {
                Ok(o) => Some(o),
                Err(_) => return,
            }
        };
        let mut sh = repl.shipper.lock();
        if let Some(o) = order {
            repl.start_seed(&mut sh, o);
        }
        if !sh.seeds.is_empty() || failures > 0 {
            failures = if repl.round(&mut sh, &linklet) {
                0
            } else {
                failures.saturating_add(1)
            };
        }
    }
}

/// Split one backup's items into frames of at most `REPL_FRAME_BYTES` each.
fn split(items: Vec<ReplItem>) -> Vec<Vec<ReplItem>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut bytes = 0;
    for it in items {
        let b = it.charged_bytes();
        if !cur.is_empty()
            && (bytes + b > limits::REPL_FRAME_BYTES
                || cur.len() >= ringlet_linklet::limits::IMPORT_BATCH_ITEMS_MAX)
        {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += b;
        cur.push(it);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Send `frames` to the backup at `addr` in one write and read their acks; returns the bytes
/// both ways.
fn ship(
    sh: &mut Shipper,
    addr: &str,
    frames: &[Vec<ReplItem>],
    round: u64,
) -> Result<u64, WireError> {
    if !sh.conns.contains_key(addr) {
        let c = ReplConn::open(addr)?;
        sh.conns.insert(addr.to_owned(), c);
    }
    let conn = sh.conns.get_mut(addr).expect("inserted above");
    let out = &mut sh.scratch;
    out.clear();
    let mut one = Vec::new();
    for items in frames {
        Frame::Repl {
            round,
            items: items.clone(),
        }
        .encode(&mut one);
        out.extend_from_slice(&one);
    }
    conn.w.write_all(out)?;
    let mut bytes = out.len() as u64;
    for _ in frames {
        match read_frame_sync(&mut conn.r, &mut conn.buf)? {
            // Header (5) + round and count (12).
            Some(Frame::ReplAck { round: r, .. }) if r == round => bytes += 17,
            Some(_) => return Err(WireError::Bad("unexpected answer to a repl frame")),
            None => return Err(WireError::Bad("backup closed the connection")),
        }
    }
    Ok(bytes)
}
