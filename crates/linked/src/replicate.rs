//! Replication of a member's units to their backups (services with `replicas: 2`), over the
//! member protocol. The Linklet side (dirty log, snapshots, applying) is
//! `ringlet_linklet::replica`; this is who talks to whom, and when a request may be answered.
//!
//! **Owner.** One replicator task per member. Each round it pulls one snapshot batch of every
//! seed in progress, then drains the Linklet's dirty log, groups the items by the backup of
//! their unit (`Repl::targets`, per unit) and sends each backup its items on one connection per
//! backup, snapshot batches first (the order they were marshalled in: see the Linklet's
//! `replica` module for why that order is all the interleaving needs). When every backup acked
//! the round, `acked` moves to the drain's `upto`. A request whose handler wrote (the Linklet's
//! per-thread write sequence is non-zero) is answered only when `acked` reaches that sequence:
//! synchronous replication, group-committed (one round covers every request that wrote before
//! it). A unit without a backup (none assigned yet, or it died) is not replicated: its items
//! are dropped and the round acks at once.
//!
//! **Failure of a backup.** Its items are put back in the dirty log and the round is not
//! acked: requests that wrote wait, rounds retry (with a backoff), until the backup answers
//! again or the coordinator removes it (`Unbackup`, after its lease: ≤ lease + one tick). A
//! backup that is merely slow therefore slows its owners' writes; that is the price of
//! answering only what survives one crash.
//!
//! **Backup.** Staged copies live in the backup's Linklet as `Importing` slots (not served).
//! `backing[unit]` says which units this member backs; its mutex also orders applying items
//! against the steps that end a backup (promote, drop, a move or adoption of the unit), so no
//! item lands in a range after it stopped being a backup. Items for units not backed here are
//! acked as ignored: the coordinator no longer counts this member as their backup (it would
//! never promote it), and the owner, if it is still serving, checks its own lease before
//! answering (see `member::serve_conn`).

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ringlet_linklet::{LinkKey, Linklet, Marshal, ReplItem};
use ringlet_types::Slot;
use tokio::io::{BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};

use crate::error::WireError;
use crate::limits;
use crate::wire::{read_frame, write_frame, Control, Frame, SlotRange};

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
    pub(crate) acked: watch::Sender<u64>,
    /// Wakes the replicator (a request wrote).
    pub(crate) kick: Notify,
    /// Bytes this member sent to backups and got back (frames and acks), for benchmarks.
    pub(crate) bytes: AtomicU64,
}

/// Seeds the session hands to the replicator.
pub(crate) struct SeedOrder {
    pub(crate) seed_id: u64,
    pub(crate) range: SlotRange,
    pub(crate) to_addr: String,
}

impl Repl {
    pub(crate) fn new(replicas: u8, units: u16, slots_per_unit: u16) -> Self {
        Repl {
            replicas,
            slots_per_unit,
            targets: RwLock::new(vec![None; usize::from(units)]),
            backing: Mutex::new(vec![false; usize::from(units)]),
            acked: watch::channel(0).0,
            kick: Notify::new(),
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

    /// Wait until every write numbered `<= seq` is at the backups (bounded by
    /// `REPL_WAIT_TIMEOUT_MS`). Returns whether it is.
    pub(crate) async fn wait(&self, seq: u64) -> bool {
        if seq == 0 || *self.acked.borrow() >= seq {
            return true;
        }
        let mut rx = self.acked.subscribe();
        self.kick.notify_one();
        let wait = async { rx.wait_for(|&a| a >= seq).await.is_ok() };
        tokio::time::timeout(Duration::from_millis(limits::REPL_WAIT_TIMEOUT_MS), wait)
            .await
            .unwrap_or(false)
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

type Conn = (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    BufWriter<tokio::net::tcp::OwnedWriteHalf>,
);

async fn connect(addr: &str) -> Result<Conn, WireError> {
    let stream = tokio::time::timeout(
        Duration::from_millis(limits::MOVE_STEP_TIMEOUT_MS),
        TcpStream::connect(addr),
    )
    .await
    .map_err(|_| WireError::Timeout)??;
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    Ok((BufReader::new(r), BufWriter::new(w)))
}

struct SeedJob {
    seed_id: u64,
    unit: usize,
    range: RangeInclusive<Slot>,
    to_addr: String,
}

/// One backup's share of a round: the frames to send it, in order.
#[derive(Default)]
struct Outbox {
    frames: Vec<Vec<ReplItem>>,
    /// Seeds whose last snapshot batch is in `frames`.
    seeds_done: Vec<u64>,
}

/// The owner side: runs for the member's life. `seeds` come from the coordinator session;
/// `up` carries `SeedDone` back to it.
pub(crate) async fn replicator<K: LinkKey, V: Marshal + Send + Sync + 'static>(
    repl: Arc<Repl>,
    linklet: Arc<Linklet<K, V>>,
    mut seeds: mpsc::Receiver<SeedOrder>,
    up: mpsc::Sender<Control>,
) {
    let mut conns: HashMap<String, Conn> = HashMap::new();
    let mut jobs: Vec<SeedJob> = Vec::new();
    // Exports of the seeds in `jobs` (same index), pulled one batch per round.
    let mut exports = Vec::new();
    let mut round = 0u64;
    let mut failures = 0u32;
    let (mut buf, mut scratch) = (Vec::new(), Vec::new());
    loop {
        // Sleep until there is work: a kick, a seed order, or seeds in progress / a retry.
        if jobs.is_empty() && failures == 0 {
            tokio::select! {
                _ = repl.kick.notified() => {}
                s = seeds.recv() => match s {
                    Some(s) => start_seed(&repl, &linklet, &mut conns, s, &mut jobs, &mut exports, &up, &mut buf, &mut scratch).await,
                    None => return,
                },
            }
        } else if failures > 0 {
            let backoff = limits::REPL_RETRY_MIN_MS << failures.min(5);
            tokio::time::sleep(Duration::from_millis(
                backoff.min(limits::REPL_RETRY_MAX_MS),
            ))
            .await;
        }
        while let Ok(s) = seeds.try_recv() {
            start_seed(
                &repl,
                &linklet,
                &mut conns,
                s,
                &mut jobs,
                &mut exports,
                &up,
                &mut buf,
                &mut scratch,
            )
            .await;
        }
        round += 1;
        let mut out: HashMap<String, Outbox> = HashMap::new();
        // Snapshot batches first: they were marshalled before this round's drain.
        let targets = repl.targets.read().expect("targets lock").clone();
        let mut i = 0;
        while i < jobs.len() {
            let j = &jobs[i];
            let cancelled = targets.get(j.unit).cloned().flatten().as_deref() != Some(&j.to_addr);
            let next = if cancelled { None } else { exports[i].next() };
            match next {
                Some(Ok(b)) => {
                    let o = out.entry(j.to_addr.clone()).or_default();
                    let done = b.done;
                    o.frames
                        .push(b.items.into_iter().map(ReplItem::Put).collect());
                    if done {
                        o.seeds_done.push(j.seed_id);
                    } else {
                        i += 1;
                        continue;
                    }
                }
                Some(Err(_)) | None => {
                    let ok = false;
                    if !cancelled {
                        // The unit stopped being served here mid-seed: the seed failed.
                        repl.set_target(&j.range, None);
                    }
                    let _ = up
                        .send(Control::SeedDone {
                            seed_id: j.seed_id,
                            ok,
                        })
                        .await;
                }
            }
            jobs.remove(i);
            exports.remove(i);
        }
        // Then the dirty log.
        let drained = match linklet.take_dirty() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("linked member: replication drain failed: {e}");
                failures = failures.saturating_add(1);
                continue;
            }
        };
        let mut per_target: HashMap<String, Vec<ReplItem>> = HashMap::new();
        for it in drained.items {
            let u = usize::from(it.slot() / repl.slots_per_unit);
            if let Some(Some(addr)) = targets.get(u) {
                per_target.entry(addr.clone()).or_default().push(it);
            }
        }
        for (addr, items) in per_target {
            let o = out.entry(addr).or_default();
            for chunk in split(items) {
                o.frames.push(chunk);
            }
        }
        // Send every frame, then read every ack: one round trip per backup per round.
        let mut ok = true;
        for (addr, o) in out {
            let res = ship(&mut conns, &addr, &o.frames, round, &mut buf, &mut scratch).await;
            if let Ok(n) = &res {
                repl.bytes.fetch_add(*n, Ordering::Relaxed);
            }
            match res {
                Ok(_) => {
                    for seed_id in o.seeds_done {
                        let _ = up.send(Control::SeedDone { seed_id, ok: true }).await;
                    }
                }
                Err(e) => {
                    // Once per streak: a dead backup fails every round until it is replaced.
                    if failures == 0 {
                        eprintln!("linked member: replication to {addr} failed: {e}");
                    }
                    conns.remove(&addr);
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
                        let _ = up.send(Control::SeedDone { seed_id, ok: false }).await;
                    }
                }
            }
        }
        if ok {
            failures = 0;
            repl.acked.send_if_modified(|a| {
                let moved = drained.upto > *a;
                *a = (*a).max(drained.upto);
                moved
            });
        } else {
            failures = failures.saturating_add(1);
        }
        // More work arrived during the round: go again without waiting for a kick.
        if linklet.write_seq() > *repl.acked.borrow() {
            repl.kick.notify_one();
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

async fn ship(
    conns: &mut HashMap<String, Conn>,
    addr: &str,
    frames: &[Vec<ReplItem>],
    round: u64,
    buf: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<u64, WireError> {
    if !conns.contains_key(addr) {
        let c = connect(addr).await?;
        conns.insert(addr.to_owned(), c);
    }
    let conn = conns.get_mut(addr).expect("inserted above");
    tokio::time::timeout(Duration::from_millis(limits::MOVE_STEP_TIMEOUT_MS), async {
        let mut bytes = 0u64;
        // Frames are not flushed one by one: the last write flushes them all.
        for items in frames {
            let f = Frame::Repl {
                round,
                items: items.clone(),
            };
            f.encode(scratch);
            bytes += scratch.len() as u64;
            tokio::io::AsyncWriteExt::write_all(&mut conn.1, scratch).await?;
        }
        tokio::io::AsyncWriteExt::flush(&mut conn.1).await?;
        for _ in frames {
            match read_frame(&mut conn.0, buf).await? {
                // Header (5) + round and count (12).
                Some(Frame::ReplAck { round: r, .. }) if r == round => bytes += 17,
                Some(_) => return Err(WireError::Bad("unexpected answer to a repl frame")),
                None => return Err(WireError::Bad("backup closed the connection")),
            }
        }
        Ok(bytes)
    })
    .await
    .map_err(|_| WireError::Timeout)?
}

#[allow(clippy::too_many_arguments)]
async fn start_seed<'a, K: LinkKey, V: Marshal + Send + Sync + 'static>(
    repl: &Repl,
    linklet: &'a Linklet<K, V>,
    conns: &mut HashMap<String, Conn>,
    s: SeedOrder,
    jobs: &mut Vec<SeedJob>,
    exports: &mut Vec<ringlet_linklet::Export<'a, K, V>>,
    up: &mpsc::Sender<Control>,
    buf: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) {
    let Some(range) = s.range.to_range() else {
        let _ = up
            .send(Control::SeedDone {
                seed_id: s.seed_id,
                ok: false,
            })
            .await;
        return;
    };
    let begun = async {
        if !conns.contains_key(&s.to_addr) {
            let c = connect(&s.to_addr).await?;
            conns.insert(s.to_addr.clone(), c);
        }
        let conn = conns.get_mut(&s.to_addr).expect("inserted above");
        let f = Frame::Control(Control::BeginBackup {
            seed_id: s.seed_id,
            range: s.range,
        });
        tokio::time::timeout(Duration::from_millis(limits::MOVE_STEP_TIMEOUT_MS), async {
            write_frame(&mut conn.1, &f, scratch).await?;
            match read_frame(&mut conn.0, buf).await? {
                Some(Frame::Control(Control::Ack { move_id })) if move_id == s.seed_id => Ok(()),
                Some(Frame::Control(Control::Nack { reason, .. })) => {
                    eprintln!("linked member: seed {} refused: {reason}", s.seed_id);
                    Err(WireError::Bad("seed refused by the backup"))
                }
                _ => Err(WireError::Bad("unexpected answer to BeginBackup")),
            }
        })
        .await
        .map_err(|_| WireError::Timeout)?
    }
    .await;
    if begun.is_err() {
        conns.remove(&s.to_addr);
    }
    // Register the target before the snapshot starts: every write from now on is shipped
    // there, and the snapshot (which reads after this) covers the writes before.
    let snapshot = match begun {
        Ok(()) => {
            repl.set_target(&range, Some(&s.to_addr));
            linklet.snapshot_range(range.clone()).ok()
        }
        Err(_) => None,
    };
    let Some(export) = snapshot else {
        repl.set_target(&range, None);
        let _ = up
            .send(Control::SeedDone {
                seed_id: s.seed_id,
                ok: false,
            })
            .await;
        return;
    };
    jobs.push(SeedJob {
        seed_id: s.seed_id,
        unit: repl.unit_of(*range.start()),
        range,
        to_addr: s.to_addr,
    });
    exports.push(export);
}
