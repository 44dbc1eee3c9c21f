//! Resharding phase 0 at a move's target: copy the span before the switch
//! (docs/design/cluster-resharding.md "Copy before the switch").
//!
//! ```text
//!  map.moving{copying}   old coordinator S serves reads AND writes of the span
//!      target T ──PullReq(Copy)──▶ S    pass 0: snapshot, pages from S's committed store
//!      T ──PullReq(Copy, delta, have = T's slot digests)──▶ S
//!                                         pass 1: catch-up, only slots that changed, whole
//!      T ──MoveCopied(span, epoch)──▶ control   the move turns into phase 1
//!  map.moving{!copying}  S refuses new writes to the span, finishes those in flight,
//!                        reports Quiesced (the short fence)
//!  switch (handoff)      T's rebuild asks S for a delta again (fenced): S is final now,
//!                        so T's copy plus that delta is exactly S's span; T serves
//!  called off            (source/target failed or replaced, copy too long) T forgets the
//!                        span; S never stopped serving
//! ```
//!
//! Why a digest delta and not "versions above a watermark": a watermark misses keys S
//! deleted whose tombstones it has since folded into a summary, and entries S adopted from
//! repair with older versions. Comparing per-slot digests (the same incremental
//! `(key, version, memgest, tombstone)` XOR repair uses) and resending a differing slot
//! whole makes the result depend only on S's state at the time of the delta, whatever
//! happened to the copy before.
//!
//! ec values (session 15) are copied too: the source sends them decoded (as at the switch)
//! and this node re-encodes each, under its own version and expiry, into its arena of the
//! move's TARGET group (`SlotMove::pg`), committed on that group's M parity holders like a
//! write without a client. The copy reports "copied" only once every such re-encode
//! committed, so the switch finds the span's ec values in place and its delta re-encodes
//! only what changed since. A re-encode the arena cannot take (recovering, full) is left to
//! the delta: the key's slot digest differs. Called off, the copy is wiped like a rep copy
//! and every ec entry it stored is retired from the target arena (`retire_ec_leftovers`);
//! re-encodes still in flight then are wiped once they ended (`orphans`).
//!
//! Where the copy lives: in this node's store, in slots where it has no role (a copy is
//! taken only when the span's range here is `Role::None` and `Idle`). Nothing reads those
//! slots here: fronts and quorum reads answer only for ranges this node serves, and repair
//! only runs over them. If this node cannot take a copy (it already holds the range as a
//! replica of the old cohort, or still holds a given-away copy of it) it reports "copied"
//! at once and the switch rebuilds the span in full, as before phase 0 existed.

use super::*;

/// ec re-encodes of a copy in flight before it asks for no next page (below the switch's
/// `EC_REENCODES_IN_FLIGHT_MAX`). Each is a pending write, and a holder's acknowledgement
/// walks every pending write (`on_ec_ack`): with 1,024 re-encodes in flight that walk was
/// the node's hottest code while a copy ran (session 17, `perf` during a move: `on_peer`,
/// ec.rs's ack loop), stepped with the core held, and every ec GET through the core waited
/// for it. Two copy pages' worth keeps the copy streaming (an acknowledgement that brings
/// the copy under this bound asks for the next page at once, `copy_on_ec_ack`)
/// (docs/design/cluster-resharding.md, "Session 17: the client tail").
pub(super) const COPY_EC_REENCODES_IN_FLIGHT_MAX: usize = 2 * COPY_ENTRIES_PER_PAGE_MAX;

/// The copy of one moving span (at most one: the control plane moves one span at a time).
#[derive(Clone, Debug)]
pub(super) struct Copy {
    pub(super) first: Slot,
    pub(super) last: Slot,
    /// The span's coordinator when the move started (it answers the copy).
    source: NodeId,
    /// False when this node takes no copy (see the module doc): reported at once.
    pulling: bool,
    /// 0: snapshot; 1: catch-up (delta); 2: done.
    pass: u8,
    pub(super) req_id: u64,
    after: Option<(Slot, Vec<u8>)>,
    sent_ms: u64,
    rate_kib_s: u32,
    paced_until_ms: u64,
    bytes: u64,
    keys: u64,
    started_ms: u64,
    /// Pull time of the copy (its two passes), for the handoff's throughput figures.
    took_ms: u64,
    last_report_ms: Option<u64>,
    /// The move's target group: ec values are re-encoded into this node's arena of it.
    pg: u32,
    /// Whether the span's current group is another group than `pg`. Within one group the
    /// parity holders keep ONE metadata record per key (`ParityStore`, whatever the owner
    /// position): a re-encode at the same version would be ignored there and an abort's
    /// retire would drop the old owner's record (sim seed 20923). Such a copy takes no ec
    /// values: they are re-encoded at the switch as before.
    ec_other_group: bool,
    /// ec re-encodes of this copy in flight (version → key). At most
    /// `EC_REENCODES_IN_FLIGHT_MAX`: past it no next page is asked for; the copy reports
    /// "copied" only once it is empty.
    ec_reencoding: BTreeMap<Version, Vec<u8>>,
    /// ec values this copy re-encoded (started), for tests and the simulator.
    ec_copied: u64,
    /// A snapshot page received but not applied yet (see [`Replica::on_copy_resp`]): applied
    /// at the next tick or before the next page, whichever comes first. At most one page.
    backlog: Vec<(Vec<u8>, Entry)>,
}

/// A copy called off while some of its ec re-encodes were in flight: they may still commit
/// (store pointer, arena entry) into slots this node does not serve, so the span is wiped
/// once more after they ended. At most one (a new copy or role replaces it).
#[derive(Clone, Debug)]
pub(super) struct CopyOrphans {
    first: Slot,
    last: Slot,
    versions: Vec<Version>,
}

impl Copy {
    pub(super) fn describe(&self) -> String {
        format!(
            "copy {}..={} from {} pass {} pulling {} ec_reencoding {}",
            self.first,
            self.last,
            self.source,
            self.pass,
            self.pulling,
            self.ec_reencoding.len()
        )
    }
}

impl<S: ReplicaStore> Replica<S> {
    /// Digest of every non-empty slot of `first..=last` in this node's store (all
    /// memgests): what a delta pull sends as `have`. At most one pair per slot.
    pub(super) fn slot_digests(&self, first: Slot, last: Slot) -> Vec<(Slot, u64)> {
        self.store
            .nonempty_slots(first, last)
            .into_iter()
            .map(|s| (s, self.store.slot_digest(s, &|_| true)))
            .collect()
    }

    /// Forget every key of `slot` not in `keep` (a delta pull resends the slot whole).
    /// Bounded by the slot's keys.
    pub(super) fn forget_slot_except(&mut self, slot: Slot, keep: &BTreeSet<Vec<u8>>) {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let chunk =
                self.store
                    .scan_slot_heads(slot, after.as_deref(), PULL_ENTRIES_PER_PAGE_MAX);
            let n = chunk.len();
            for (k, _, _) in chunk {
                if !keep.contains(&k) {
                    // An ec entry (a copied value re-encoded here) leaves this node's
                    // arena too, unless the page resending the slot brings it back at the
                    // same version (`reencode_ec` then restores the pointer and
                    // `retire_ec_leftovers` leaves it alone).
                    if let Some(e) = self.store.get(&k).filter(|e| self.is_ec_value(e)) {
                        self.ec_leftovers.push((k.clone(), e));
                    }
                    self.store.forget(&k);
                }
                after = Some(k);
            }
            if n < PULL_ENTRIES_PER_PAGE_MAX {
                break;
            }
        }
    }

    /// Start, keep, hand over or drop the copy after a map change.
    pub(super) fn copy_on_map(&mut self, now_ms: u64, map: &ClusterMap) {
        let mv = map
            .moving
            .filter(|m| map.move_target(m) == Some(self.id) && m.source != self.id.0);
        if let Some(c) = self.copy.as_mut() {
            let same = mv.is_some_and(|m| {
                m.first == c.first && m.last == c.last && NodeId(m.source) == c.source
            });
            if same {
                c.req_id = 0; // resend under the new epoch
                c.rate_kib_s = mv.map_or(0, |m| m.rate_kib_s);
                return;
            }
        }
        if let Some(c) = self.copy.take() {
            let rebuild = self
                .ranges
                .iter_mut()
                .find(|r| r.first == c.first && r.last == c.last && r.role == Role::Coordinator);
            match rebuild.map(|r| &mut r.status) {
                // The switch: the rebuild asks the old coordinator for a delta only.
                Some(Status::Pulling(p))
                    if c.pulling
                        && p.purpose == PullPurpose::Rebuild
                        && p.prior.first() == Some(&c.source)
                        && map.handoff(c.first, c.last).is_some() =>
                {
                    p.delta = true;
                    p.copied = (c.bytes, c.keys, c.took_ms);
                }
                _ if c.pulling => {
                    // Called off (or overtaken by another change): the old owner keeps the
                    // span; the partial copy goes, ec entries retired from the target
                    // arena with it. Any role this node got there in the same map is new
                    // (it had none when the copy started) and pulls from scratch, so the
                    // wipe takes nothing it needs.
                    self.wipe_range(c.first, c.last);
                    self.stats.move_copies_aborted += 1;
                    if !c.ec_reencoding.is_empty() {
                        self.copy_orphans = Some(CopyOrphans {
                            first: c.first,
                            last: c.last,
                            versions: c.ec_reencoding.keys().copied().collect(),
                        });
                    }
                }
                _ => {}
            }
        }
        let Some(m) = mv.filter(|m| m.copying) else {
            return;
        };
        let free = self.range(m.first).is_some_and(|r| {
            r.role == Role::None && matches!(r.status, Status::Idle) && !r.held && r.last >= m.last
        });
        if free {
            // An Idle range holds nothing, but leftovers of an interrupted purge would
            // only make the catch-up resend their slots: drop them now.
            self.wipe_range(m.first, m.last);
        }
        // Re-encodes of an earlier copy of this span still in flight become part of this
        // one if they commit (same source data; the catch-up corrects what differs).
        if self
            .copy_orphans
            .as_ref()
            .is_some_and(|o| o.first <= m.last && m.first <= o.last)
        {
            self.copy_orphans = None;
        }
        self.copy = Some(Copy {
            first: m.first,
            last: m.last,
            source: NodeId(m.source),
            pulling: free,
            pass: if free { 0 } else { 2 },
            req_id: 0,
            after: None,
            sent_ms: 0,
            rate_kib_s: m.rate_kib_s,
            paced_until_ms: 0,
            bytes: 0,
            keys: 0,
            started_ms: now_ms,
            took_ms: 0,
            last_report_ms: None,
            pg: m.pg,
            ec_other_group: map
                .placement
                .as_ref()
                .and_then(|p| p.range_of(m.first))
                .is_some_and(|r| r.pg != m.pg),
            ec_reencoding: BTreeMap::new(),
            ec_copied: 0,
            backlog: Vec::new(),
        });
    }

    /// The copy this node runs as a move's target, if any: (ec values it re-encoded into
    /// the target group so far, re-encodes of it still in flight). For the simulator's
    /// fault accounting and tests.
    pub fn copy_ec_progress(&self) -> Option<(u64, usize)> {
        self.copy
            .as_ref()
            .map(|c| (c.ec_copied, c.ec_reencoding.len()))
    }

    /// Whether `slot` is in the span this node copies, or in a called-off copy's span whose
    /// ec re-encodes are still in flight (a re-encode there is pending without a role).
    pub(super) fn copy_covers(&self, slot: Slot) -> bool {
        self.copy
            .as_ref()
            .is_some_and(|c| c.first <= slot && slot <= c.last)
            || self
                .copy_orphans
                .as_ref()
                .is_some_and(|o| o.first <= slot && slot <= o.last)
    }

    /// Drop this copy's ec re-encodes that ended (committed, or abandoned: the delta at the
    /// switch resends a key whose re-encode did not commit, its slot digest differs); once
    /// an orphaned copy's re-encodes all ended, wipe its span again if this node still has
    /// no role there.
    fn settle_copy_reencodes(&mut self) {
        let in_flight = |pending: &BTreeMap<Version, Pending>, v: &Version| {
            pending.get(v).is_some_and(|p| !p.committed)
        };
        if let Some(c) = self.copy.as_mut() {
            let pending = &self.pending;
            c.ec_reencoding.retain(|v, _| in_flight(pending, v));
        }
        let Some(o) = self.copy_orphans.as_mut() else {
            return;
        };
        let pending = &self.pending;
        o.versions.retain(|v| in_flight(pending, v));
        if !o.versions.is_empty() {
            return;
        }
        let (first, last) = (o.first, o.last);
        self.copy_orphans = None;
        let unserved = self.range(first).is_some_and(|r| {
            r.role == Role::None && matches!(r.status, Status::Idle) && !r.held && r.last >= last
        });
        if unserved && self.copy.is_none() {
            self.wipe_range(first, last);
        }
    }

    /// Send the copy's next page request (paced by the move's rate; repeated after the
    /// pull retry interval if unanswered), or, once copied, tell the control plane (every
    /// heartbeat interval while the map still shows the move copying).
    pub(super) fn drive_copy(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let Some(map) = self.map.clone() else { return };
        self.settle_copy_reencodes();
        let (retry, hb) = (self.cfg.pull_retry_ms, self.cfg.heartbeat_interval_ms);
        let Some(c) = self.copy.as_mut() else { return };
        if c.pass >= 2 && !c.ec_reencoding.is_empty() {
            return; // copied once the span's ec values committed in the target group
        }
        if c.pass >= 2 {
            let copying = map
                .moving
                .filter(|m| m.copying && m.first == c.first && m.last == c.last);
            let due = c
                .last_report_ms
                .is_none_or(|t| now_ms.saturating_sub(t) >= hb);
            if let (Some(m), true) = (copying, due) {
                c.last_report_ms = Some(now_ms);
                out.push(Output::Control(ControlInput::MoveCopied {
                    node: self.id,
                    incarnation: self.incarnation,
                    first: c.first,
                    last: c.last,
                    epoch: m.epoch,
                }));
            }
            return;
        }
        if now_ms < c.paced_until_ms || c.ec_reencoding.len() >= COPY_EC_REENCODES_IN_FLIGHT_MAX {
            return;
        }
        if c.req_id != 0 && now_ms.saturating_sub(c.sent_ms) < retry {
            return;
        }
        // The catch-up pass sends this node's digests (computed only when a request goes).
        let (first, last, pass) = (c.first, c.last, c.pass);
        let have = (pass == 1).then(|| self.slot_digests(first, last));
        let Some(c) = self.copy.as_mut() else { return };
        self.next_id = self.next_id.wrapping_add(1);
        c.req_id = self.next_id;
        c.sent_ms = now_ms;
        let body = PeerBody::PullReq {
            id: c.req_id,
            purpose: PullPurpose::Copy,
            first: c.first,
            last: c.last,
            after: c.after.clone(),
            delta: have.is_some(),
            have: have.unwrap_or_default(),
        };
        let to = c.source;
        self.send(out, to, body);
    }

    /// After a parity holder's acknowledgement: a copy held back by its re-encodes in flight
    /// ([`COPY_EC_REENCODES_IN_FLIGHT_MAX`]) asks for its next page now rather than at the
    /// next tick. Nothing to do (one comparison) for any other copy or none.
    pub(super) fn copy_on_ec_ack(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let held = self.copy.as_ref().is_some_and(|c| {
            c.pass < 2 && c.ec_reencoding.len() >= COPY_EC_REENCODES_IN_FLIGHT_MAX
        });
        if held {
            self.drive_copy(now_ms, out);
        }
    }

    /// A page of the copy: apply it (a catch-up page first forgets the slots it resends
    /// whole), pace, and ask for the next one or move to the next pass.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_copy_resp(
        &mut self,
        now_ms: u64,
        from: NodeId,
        ready: bool,
        resets: Vec<Slot>,
        entries: Vec<(Vec<u8>, Entry)>,
        next: Option<(Slot, Vec<u8>)>,
        out: &mut Vec<Output>,
    ) {
        let Some(c) = self.copy.as_mut() else { return };
        if from != c.source || c.pass >= 2 {
            return;
        }
        if !ready {
            // The source is between maps: ask again after the retry interval, same cursor.
            c.req_id = u64::MAX;
            c.sent_ms = now_ms;
            return;
        }
        // The previous page first: pages apply in the order they came, each before the
        // next one's resets.
        self.apply_copy_backlog(now_ms, out);
        let Some(c) = self.copy.as_mut() else { return };
        let (first, last, pass) = (c.first, c.last, c.pass);
        let page_bytes: u64 = entries
            .iter()
            .map(|(k, e)| (k.len() + e.value.as_ref().map_or(0, Vec::len)) as u64)
            .sum();
        c.bytes += page_bytes;
        c.keys += entries.len() as u64;
        if c.rate_kib_s > 0 {
            let cost_ms = page_bytes.saturating_mul(1000) / (u64::from(c.rate_kib_s) * 1024);
            c.paced_until_ms = c.paced_until_ms.max(now_ms).saturating_add(cost_ms);
        }
        c.req_id = 0; // due (drive_copy sends it once the pace allows)
        match next {
            Some(n) => c.after = Some(n),
            None => {
                c.after = None;
                c.pass += 1;
                if c.pass >= 2 {
                    c.took_ms = now_ms.saturating_sub(c.started_ms);
                    self.stats.move_copies_completed += 1;
                }
            }
        }
        // A snapshot page followed by another snapshot page is applied later (at the next
        // tick, or before the next page if that comes first): the request for the next page
        // goes out with this step's output, so the source builds page N+1 while this node
        // applies page N. Serially, each side idled while the other worked, and a move's
        // copy ran at half the rate two cores allow. The catch-up pass and the last page
        // are applied at once: the catch-up request carries this node's slot digests, and
        // "copied" must mean the span is here. A page with ec values is applied at once too:
        // its re-encodes count against COPY_EC_REENCODES_IN_FLIGHT_MAX before the next
        // request may go.
        let defer = pass == 0 && c.pass == 0 && c.backlog.is_empty();
        let has_ec = |m: &ClusterMap| {
            entries
                .iter()
                .any(|(_, e)| matches!(m.memgest_kind(e.memgest), MemgestKind::Ec { .. }))
        };
        let defer = defer && !self.map.as_deref().is_some_and(has_ec);
        if defer {
            let Some(c) = self.copy.as_mut() else { return };
            c.backlog = entries;
            return self.drive_copy(now_ms, out);
        }
        if pass == 1 {
            let none = BTreeSet::new();
            for slot in resets.into_iter().filter(|s| (first..=last).contains(s)) {
                self.forget_slot_except(slot, &none);
            }
        }
        self.apply_copy_page(now_ms, entries, out);
        self.drive_copy(now_ms, out);
    }

    /// Apply the snapshot page [`Replica::on_copy_resp`] held back, if any (each tick).
    pub(super) fn apply_copy_backlog(&mut self, now_ms: u64, out: &mut Vec<Output>) {
        let backlog = match self.copy.as_mut() {
            Some(c) if !c.backlog.is_empty() => std::mem::take(&mut c.backlog),
            _ => return,
        };
        self.apply_copy_page(now_ms, backlog, out);
    }

    /// Store one page of the span's entries: rep values in this node's store, ec values
    /// re-encoded into its arena of the move's target group.
    fn apply_copy_page(
        &mut self,
        now_ms: u64,
        entries: Vec<(Vec<u8>, Entry)>,
        out: &mut Vec<Output>,
    ) {
        let Some(c) = self.copy.as_ref() else { return };
        let (first, last, pg) = (c.first, c.last, c.pg);
        let ec_ahead = self.cfg.ec_copy_ahead && c.ec_other_group;
        for (k, e) in entries {
            // Only the span's keys (a source never sends others; the check keeps a
            // confused one from writing outside the copy). A refused entry (no room) is
            // left to the delta at the switch: its slot's digest differs.
            if !(first..=last).contains(&key_slot(&k)) {
                continue;
            }
            let ec = self
                .map
                .as_ref()
                .is_some_and(|m| matches!(m.memgest_kind(e.memgest), MemgestKind::Ec { .. }));
            if !ec {
                let _ = self.apply_local(&k, e);
                continue;
            }
            if !ec_ahead {
                continue; // left to the switch (ReplicaConfig::ec_copy_ahead, same group)
            }
            // Decoded by the source: re-encode into the target group's arena. Not taken
            // now (arena recovering or full): the delta at the switch resends it.
            if let Ok(Some(v)) = self.reencode_ec(now_ms, pg, k.clone(), e, out) {
                self.stats.move_ec_copied += 1;
                if let Some(c) = self.copy.as_mut() {
                    c.ec_reencoding.insert(v, k);
                    c.ec_copied += 1;
                }
            }
        }
    }
}
