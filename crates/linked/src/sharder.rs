//! The auto-sharder: a sans-I/O state machine that owns one linked service's assignment of
//! slot units to members (Slicer, OSDI '16; LInK §4.1). Inputs are calls with the time passed
//! in (`join`, `heartbeat`, `move_done`, `tick`); outputs are [`Action`]s the host turns into
//! frames. No clock, no socket, no randomness: every decision is reproducible in a unit test.
//!
//! # Units
//!
//! The 16384 slots are cut into `units` equal contiguous ranges (default 64 of 256 slots).
//! A unit is the grain of assignment and of movement, like Slicer's slices: fine enough that
//! one hot unit can be isolated, coarse enough that the map and the load reports stay small.
//!
//! # Balancing (multi-metric, LInK §4.1)
//!
//! Members report per owned unit its request rate and bytes, and their process CPU. The CPU of
//! a member is attributed to its units in proportion to their request rates. For every metric
//! with a non-trivial total, a member's *score* on it is its sum over its units divided by the
//! mean per member; a member's score is the max over metrics (the resource it is shortest of).
//! Without any load (a fresh service) the metric is the unit count, so joiners still get units.
//!
//! Each tick may start one move: from the member with the highest score, the unit whose move
//! to the member with the lowest score most lowers the larger of the two scores. Guards
//! against churn (hysteresis):
//! - nothing moves while the highest score is within `imbalance_threshold` of the mean;
//! - a move must lower the pair's max score (by more than `min_gain`, default 0);
//! - a unit moved (or whose move failed) less than `unit_cooldown_ms` ago stays put;
//! - a member involved in a move is not chosen again until it sent `fresh_reports` load
//!   reports since (its load still shows the unit it gave or got otherwise; at rest, where the
//!   metric is the exact unit count, it need not wait);
//! - at most `moves_per_minute` moves start in any 60 s window, and `moves_in_flight_max` at once.
//!
//! # Failures
//!
//! A member whose last heartbeat is older than `lease_ms` is dead. Its units are *lost*: they
//! are given to the survivors (fewest units first, as `Adopt`, starting empty) and everyone is
//! told with `StateLost` — the application rebuilds those ranges from its system of record.
//! A move whose target died after committing is lost the same way; a move whose source died is
//! covered by the source's units being lost.
//!
//! # Recovery after a coordinator restart
//!
//! The map lives only here, so a restarted coordinator rebuilds it from the members: a member
//! whose coordinator session broke keeps its Linklet (it stops serving once its lease runs out,
//! but drops nothing) and reconnects with [`Sharder::rejoin`]: its old id, the ranges it serves
//! and the last map epoch it saw. A sharder created while its coordinator is younger than
//! `recovery_ms` is *recovering* until then: rejoins restore ownership, nothing is adopted,
//! moved or seeded. `recovery_ms` is at least a lease, so a member that does not come back has
//! fenced itself by the time the window closes; its units are then given to the others and
//! reported lost (only if anyone rejoined: a fresh service has nothing to lose). Backups are
//! not recovered (a staged copy cannot tell whether its seed finished): they are dropped on
//! rejoin and seeded again.
//!
//! # Replication (`replicas: 2`)
//!
//! Each owned unit gets a backup member (the live, non-draining member with the fewest backups,
//! never the owner): [`Action::Seed`] tells the owner to copy the unit there (snapshot plus
//! dirty keys); once the owner reports the seed applied ([`Sharder::seed_done`]) the backup is
//! *ready*: the owner answers no write before the backup applied it. When an owner's lease
//! expires, a ready live backup is promoted ([`Action::Promote`]: it serves its copy) and
//! nothing is reported lost; only a unit whose owner and backup both died (or whose backup was
//! not ready yet) is reported in `StateLost`. A dead backup is replaced: the owner is told to
//! stop replicating there ([`Action::Unbackup`]) and a new seed follows. A unit moving keeps its
//! backup (the target replicates to it after the commit). A move *to* its backup is a
//! *handover*: no batches, the source marks the unit moving, lets replication catch up and
//! tells the backup to serve its copy; until that commit the backup stays ready (a crash of
//! the source mid-move promotes it), after it the unit gets a new backup. No seed starts on a
//! unit that is moving, and no move on a unit that is seeding.

use std::collections::{BTreeMap, VecDeque};

use ringlet_types::SLOT_COUNT;

use crate::limits;
use crate::wire::{Backup, MemberLoad, MoveOutcome, Owner, ServiceMap, SlotRange};

/// Member ids: unique per sharder, never reused (a restarted process joins as a new member).
pub type MemberId = u64;

/// Tuning of one service's sharder.
#[derive(Clone, Debug, PartialEq)]
pub struct SharderConfig {
    /// Units the slots are cut into (a power of two, `2..=UNITS_MAX`).
    pub units: u16,
    /// A member is dead this long after its last heartbeat.
    pub lease_ms: u64,
    /// Heartbeat interval members are told to use (a fraction of the lease).
    pub heartbeat_ms: u64,
    /// Start moving only when the busiest member's score exceeds `1 + imbalance_threshold`.
    pub imbalance_threshold: f64,
    /// A move must lower the pair's max score by more than this (0: any strict improvement).
    pub min_gain: f64,
    /// Moves started in any 60 s window.
    pub moves_per_minute: u32,
    /// Moves in flight at once.
    pub moves_in_flight_max: usize,
    /// A unit is not moved again for this long after a move of it ended.
    pub unit_cooldown_ms: u64,
    /// Load reports a member must send after a move before it is balanced again.
    pub fresh_reports: u32,
    /// Copies of each unit: 1 (no backup) or 2 (one backup member per unit).
    pub replicas: u8,
    /// Backup seeds in flight at once (each copies one unit).
    pub seeds_in_flight_max: usize,
    /// A seed not reported done after this long is given up (its backup is dropped and a new
    /// seed starts later), so a lost report cannot block a unit's replication forever.
    pub seed_timeout_ms: u64,
    /// Recovery window of a sharder created this soon after its coordinator started (see the
    /// module documentation); 0: none. At least `lease_ms` when set.
    pub recovery_ms: u64,
}

impl Default for SharderConfig {
    fn default() -> Self {
        SharderConfig {
            units: 64,
            // 2 s: a SIGKILLed member is reported within lease + one tick (goal: 3 s), and a
            // member on a busy 2-core host still gets 8 heartbeats in per lease.
            lease_ms: 2000,
            heartbeat_ms: 250,
            imbalance_threshold: 0.25,
            // Any strict improvement: one unit of 64 moves a score by only ~2/64, so an absolute
            // gain like 0.05 would forbid every single-unit move at that grain.
            min_gain: 0.0,
            moves_per_minute: 30,
            moves_in_flight_max: 2,
            unit_cooldown_ms: 30_000,
            fresh_reports: 2,
            // Off by default: a backup doubles the memory and adds a round trip to every write.
            replicas: 1,
            seeds_in_flight_max: 4,
            seed_timeout_ms: 60_000,
            // A lease and a heartbeat: every member that is still alive has reconnected.
            recovery_ms: 2250,
        }
    }
}

/// A refused configuration or call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SharderError {
    /// A config field is out of range.
    #[error("invalid sharder config: {0}")]
    Config(&'static str),
    /// The service already has `MEMBERS_MAX` members.
    #[error("too many members")]
    TooManyMembers,
}

impl SharderConfig {
    /// Check every field.
    ///
    /// # Errors
    /// [`SharderError::Config`].
    pub fn validate(&self) -> Result<(), SharderError> {
        if !self.units.is_power_of_two() || self.units < 2 || self.units > limits::UNITS_MAX {
            return Err(SharderError::Config(
                "units: a power of two in 2..=UNITS_MAX",
            ));
        }
        if self.heartbeat_ms == 0 || self.lease_ms < 3 * self.heartbeat_ms {
            return Err(SharderError::Config("lease_ms must be >= 3 heartbeats"));
        }
        if !(self.imbalance_threshold >= 0.0 && self.min_gain >= 0.0) {
            return Err(SharderError::Config("thresholds must be >= 0"));
        }
        if self.moves_in_flight_max == 0 {
            return Err(SharderError::Config("moves_in_flight_max must be >= 1"));
        }
        if !(1..=2).contains(&self.replicas) {
            return Err(SharderError::Config("replicas must be 1 or 2"));
        }
        if self.seeds_in_flight_max == 0 {
            return Err(SharderError::Config("seeds_in_flight_max must be >= 1"));
        }
        if self.recovery_ms != 0 && self.recovery_ms < self.lease_ms {
            return Err(SharderError::Config("recovery_ms must be 0 or >= lease_ms"));
        }
        Ok(())
    }
}

/// What the host must do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Tell `member` to serve `range`, starting empty.
    Adopt {
        /// The member.
        member: MemberId,
        /// The range.
        range: SlotRange,
    },
    /// Tell `from` to move `range` to `to` (at `to_addr`).
    MoveOut {
        /// Move id.
        move_id: u64,
        /// Source.
        from: MemberId,
        /// Target.
        to: MemberId,
        /// Target's address.
        to_addr: String,
        /// The range.
        range: SlotRange,
        /// The unit's ready backup, which the target replicates to after the commit.
        backup_addr: Option<String>,
        /// The target is the unit's ready backup: hand over (it serves its own copy).
        handover: bool,
    },
    /// Tell `from` (the owner) to seed a backup of `range` at `to`.
    Seed {
        /// Seed id.
        seed_id: u64,
        /// The owner.
        from: MemberId,
        /// The backup.
        to: MemberId,
        /// The backup's address.
        to_addr: String,
        /// The unit's range.
        range: SlotRange,
    },
    /// Tell `member` (an owner) to stop replicating `range`.
    Unbackup {
        /// The owner.
        member: MemberId,
        /// The range.
        range: SlotRange,
    },
    /// Tell `member` (a backup) to drop its staged copy of `range`.
    DropBackup {
        /// The backup.
        member: MemberId,
        /// The range.
        range: SlotRange,
    },
    /// Tell `member` to stop serving `range` and drop it (a rejoining member claimed a unit
    /// another one had already claimed; never expected with working fences).
    Disown {
        /// The member.
        member: MemberId,
        /// The range.
        range: SlotRange,
    },
    /// Tell `member` (a ready backup whose owner died) to serve its copy of `range`.
    Promote {
        /// The new owner.
        member: MemberId,
        /// The range.
        range: SlotRange,
    },
    /// Tell every member and watcher that the state of `ranges` (owned by `member`) is gone.
    StateLost {
        /// The member that held it.
        member: MemberId,
        /// The ranges.
        ranges: Vec<SlotRange>,
    },
    /// `member`'s lease expired: drop its session.
    Expired {
        /// The member.
        member: MemberId,
    },
    /// `member` drained: it owns nothing and has left (tell it, then drop its session).
    Drained {
        /// The member.
        member: MemberId,
    },
    /// The map changed: send [`Sharder::map`] to everyone.
    MapChanged,
}

#[derive(Debug)]
struct Member {
    addr: String,
    last_heartbeat_ms: u64,
    cpu_cores: f64,
    /// Load reports since this member last gave or got a unit.
    reports_since_move: u32,
    /// Leaving: its units are moved away (no state lost), then it is removed.
    draining: bool,
}

#[derive(Clone, Debug, Default)]
struct Unit {
    owner: Option<MemberId>,
    ops_per_s: f64,
    bytes: u64,
    in_move: Option<u64>,
    /// When a move of this unit last ended (`None`: never moved).
    last_move_ms: Option<u64>,
    /// The backup member (replicas 2), seeding or ready.
    backup: Option<MemberId>,
    /// The backup holds every acknowledged write (its seed was applied).
    backup_ready: bool,
    /// The seed in flight to `backup`.
    seed: Option<u64>,
    /// When that seed started.
    seed_started_ms: u64,
}

#[derive(Debug)]
struct Move {
    unit: usize,
    from: MemberId,
    to: MemberId,
    /// The backup the target was told to replicate to.
    backup: Option<MemberId>,
    /// The target is the unit's backup (see the module documentation).
    handover: bool,
}

/// One service's sharder. See the module documentation.
#[derive(Debug)]
pub struct Sharder {
    cfg: SharderConfig,
    members: BTreeMap<MemberId, Member>,
    units: Vec<Unit>,
    moves: BTreeMap<u64, Move>,
    /// Start times of recent moves, for the per-minute budget.
    move_starts: VecDeque<u64>,
    next_member: MemberId,
    next_move: u64,
    next_seed: u64,
    epoch: u64,
    /// Recovering until this time (see the module documentation); `None`: not recovering.
    recover_until_ms: Option<u64>,
    /// A member rejoined during recovery (so units nobody claimed had owners before).
    rejoined: bool,
    /// Moves committed and units lost since start (for tests and metrics).
    pub stats: SharderStats,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharderStats {
    /// Moves started.
    pub moves_started: u64,
    /// Moves that committed.
    pub moves_committed: u64,
    /// Moves that aborted.
    pub moves_aborted: u64,
    /// Units whose state was reported lost.
    pub units_lost: u64,
    /// Members expired.
    pub members_expired: u64,
    /// Backup seeds started.
    pub seeds_started: u64,
    /// Backup seeds that completed.
    pub seeds_ready: u64,
    /// Units whose backup was promoted when their owner died.
    pub units_promoted: u64,
}

/// Metrics a score is taken over: requests/s, bytes, CPU. Totals below the floor are noise and
/// the metric is left out (a service at rest is balanced by unit count instead).
const METRICS: usize = 3;
/// The CPU floor (5% of a core) is above what an idle member spends on heartbeats and load
/// reports, so idle members are balanced by unit count, not by that noise.
const METRIC_FLOOR: [f64; METRICS] = [1.0, 4096.0, 0.05];

impl Sharder {
    /// A sharder with no member.
    ///
    /// # Errors
    /// [`SharderError::Config`].
    pub fn new(cfg: SharderConfig) -> Result<Self, SharderError> {
        cfg.validate()?;
        Ok(Sharder {
            units: vec![Unit::default(); usize::from(cfg.units)],
            cfg,
            members: BTreeMap::new(),
            moves: BTreeMap::new(),
            move_starts: VecDeque::new(),
            next_member: 1,
            next_move: 1,
            next_seed: 1,
            epoch: 1,
            recover_until_ms: None,
            rejoined: false,
            stats: SharderStats::default(),
        })
    }

    /// A sharder whose coordinator started `coordinator_age_ms` ago: recovering until
    /// `recovery_ms` after that start if it is younger than that.
    ///
    /// # Errors
    /// [`SharderError::Config`].
    pub fn new_at(cfg: SharderConfig, coordinator_age_ms: u64) -> Result<Self, SharderError> {
        let window = cfg.recovery_ms;
        let mut s = Sharder::new(cfg)?;
        if coordinator_age_ms < window {
            s.recover_until_ms = Some(window);
        }
        Ok(s)
    }

    /// Whether the sharder is still rebuilding its map from rejoining members.
    pub fn recovering(&self) -> bool {
        self.recover_until_ms.is_some()
    }

    /// A member that served under an earlier coordinator (or lost its session to this one)
    /// comes back: its old id, where it is, the ranges it serves and the last map epoch it saw.
    /// Returns the id it keeps and what to do. A live member resumes as it was. While
    /// recovering, it gets back the units it claims that nobody else claimed first (the others
    /// with [`Action::Disown`]). Otherwise it is unknown here (it was expired, or this is not
    /// the coordinator it knew): `None`, and the host tells it it expired.
    ///
    /// # Errors
    /// [`SharderError::TooManyMembers`].
    pub fn rejoin(
        &mut self,
        member: MemberId,
        addr: String,
        owned: &[SlotRange],
        epoch: u64,
        now_ms: u64,
    ) -> Result<Option<Vec<Action>>, SharderError> {
        if let Some(m) = self.members.get_mut(&member) {
            m.last_heartbeat_ms = m.last_heartbeat_ms.max(now_ms);
            // A rejoining member drops its backup state (it cannot tell which seeds finished):
            // forget every backup it held or had, to be seeded again.
            let mut actions = Vec::new();
            for u in 0..self.units.len() {
                let x = &self.units[u];
                if x.owner == Some(member) || x.backup == Some(member) {
                    self.clear_backup(u, &mut actions);
                }
            }
            self.epoch += 1;
            actions.push(Action::MapChanged);
            return Ok(Some(actions));
        }
        if self.recover_until_ms.is_none() || member == 0 {
            return Ok(None);
        }
        if self.members.len() >= limits::MEMBERS_MAX {
            return Err(SharderError::TooManyMembers);
        }
        self.rejoined = true;
        self.next_member = self.next_member.max(member + 1);
        self.epoch = self.epoch.max(epoch);
        self.members.insert(
            member,
            Member {
                addr,
                last_heartbeat_ms: now_ms,
                cpu_cores: 0.0,
                reports_since_move: 0,
                draining: false,
            },
        );
        let spu = self.slots_per_unit();
        let mut conflicts = Vec::new();
        for r in owned {
            let Some(range) = r.to_range() else { continue };
            let first = usize::from(*range.start() / spu);
            let last = usize::from(*range.end() / spu).min(self.units.len() - 1);
            for u in first..=last {
                match self.units[u].owner {
                    None => self.units[u].owner = Some(member),
                    Some(o) if o == member => {}
                    Some(_) => conflicts.push(u),
                }
            }
        }
        let mut actions: Vec<Action> = self
            .ranges_of(conflicts)
            .into_iter()
            .map(|range| Action::Disown { member, range })
            .collect();
        self.epoch += 1;
        actions.push(Action::MapChanged);
        Ok(Some(actions))
    }

    /// The recovery window closed: units nobody claimed go to the members.
    fn end_recovery(&mut self, actions: &mut Vec<Action>) {
        self.recover_until_ms = None;
        let orphans: Vec<usize> = (0..self.units.len())
            .filter(|&u| self.units[u].owner.is_none())
            .collect();
        if orphans.is_empty() || self.members.is_empty() {
            self.epoch += 1;
            actions.push(Action::MapChanged);
            return;
        }
        if self.rejoined {
            // Their owners did not come back (member 0: not known to this coordinator).
            self.lose(0, orphans, None, actions);
        } else {
            let to = *self
                .unit_counts()
                .iter()
                .min_by_key(|(&m, &c)| (c, m))
                .expect("members is not empty")
                .0;
            for &u in &orphans {
                self.units[u].owner = Some(to);
            }
            for range in self.ranges_of(orphans) {
                actions.push(Action::Adopt { member: to, range });
            }
            self.epoch += 1;
            actions.push(Action::MapChanged);
        }
    }

    /// The config.
    pub fn config(&self) -> &SharderConfig {
        &self.cfg
    }

    fn slots_per_unit(&self) -> u16 {
        (u32::from(SLOT_COUNT) / u32::from(self.cfg.units)) as u16
    }

    fn unit_range(&self, u: usize) -> SlotRange {
        let spu = self.slots_per_unit();
        let first = u as u16 * spu;
        SlotRange {
            first,
            last: first + spu - 1,
        }
    }

    /// Contiguous ranges covering `units` (sorted, merged).
    fn ranges_of(&self, mut units: Vec<usize>) -> Vec<SlotRange> {
        units.sort_unstable();
        let mut out: Vec<SlotRange> = Vec::new();
        for u in units {
            let r = self.unit_range(u);
            match out.last_mut() {
                Some(last) if u32::from(last.last) + 1 == u32::from(r.first) => last.last = r.last,
                _ => out.push(r),
            }
        }
        out
    }

    /// The current map.
    pub fn map(&self) -> ServiceMap {
        ServiceMap {
            epoch: self.epoch,
            slots_per_unit: self.slots_per_unit(),
            owners: self
                .units
                .iter()
                .map(|u| {
                    u.owner.map(|m| Owner {
                        member: m,
                        addr: self
                            .members
                            .get(&m)
                            .map(|x| x.addr.clone())
                            .unwrap_or_default(),
                    })
                })
                .collect(),
            backups: if self.cfg.replicas < 2 {
                Vec::new()
            } else {
                self.units
                    .iter()
                    .map(|u| {
                        u.backup.map(|m| Backup {
                            member: m,
                            ready: u.backup_ready,
                        })
                    })
                    .collect()
            },
        }
    }

    fn addr(&self, m: MemberId) -> String {
        self.members
            .get(&m)
            .map(|x| x.addr.clone())
            .unwrap_or_default()
    }

    /// Forget `u`'s backup (dead, dropped or failed to seed); tell the live ones.
    fn clear_backup(&mut self, u: usize, actions: &mut Vec<Action>) {
        let range = self.unit_range(u);
        let unit = &mut self.units[u];
        let (Some(b), owner) = (unit.backup.take(), unit.owner) else {
            return;
        };
        unit.backup_ready = false;
        unit.seed = None;
        if let Some(o) = owner.filter(|o| self.members.contains_key(o)) {
            actions.push(Action::Unbackup { member: o, range });
        }
        if self.members.contains_key(&b) {
            actions.push(Action::DropBackup { member: b, range });
        }
    }

    /// The owner of seed `seed_id` reports it applied (`ok`) or failed.
    pub fn seed_done(&mut self, seed_id: u64, ok: bool) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(u) = self.units.iter().position(|x| x.seed == Some(seed_id)) else {
            // Cancelled (backup or owner gone, unit moved): nothing to do.
            return actions;
        };
        self.units[u].seed = None;
        let alive = self.units[u]
            .backup
            .is_some_and(|b| self.members.contains_key(&b));
        if ok && alive {
            self.units[u].backup_ready = true;
            self.stats.seeds_ready += 1;
        } else {
            self.clear_backup(u, &mut actions);
        }
        self.epoch += 1;
        actions.push(Action::MapChanged);
        actions
    }

    /// Start seeds for units without a backup, within `seeds_in_flight_max`.
    fn plan_seeds(&mut self, now_ms: u64, actions: &mut Vec<Action>) {
        if self.cfg.replicas < 2 {
            return;
        }
        for u in 0..self.units.len() {
            let x = &self.units[u];
            if x.seed.is_some()
                && now_ms.saturating_sub(x.seed_started_ms) > self.cfg.seed_timeout_ms
            {
                self.clear_backup(u, actions);
            }
        }
        let mut in_flight = self.units.iter().filter(|u| u.seed.is_some()).count();
        let mut backups: BTreeMap<MemberId, usize> = self
            .members
            .iter()
            .filter(|(_, m)| !m.draining)
            .map(|(&id, _)| (id, 0))
            .collect();
        for u in &self.units {
            if let Some(c) = u.backup.and_then(|b| backups.get_mut(&b)) {
                *c += 1;
            }
        }
        let mut started = false;
        for u in 0..self.units.len() {
            if in_flight >= self.cfg.seeds_in_flight_max {
                break;
            }
            let unit = &self.units[u];
            let Some(owner) = unit.owner else { continue };
            if unit.backup.is_some() || unit.in_move.is_some() {
                continue;
            }
            let Some((&to, _)) = backups
                .iter()
                .filter(|(&m, _)| m != owner)
                .min_by_key(|(&m, &c)| (c, m))
            else {
                continue;
            };
            let seed_id = self.next_seed;
            self.next_seed += 1;
            let unit = &mut self.units[u];
            unit.backup = Some(to);
            unit.backup_ready = false;
            unit.seed = Some(seed_id);
            unit.seed_started_ms = now_ms;
            *backups.get_mut(&to).expect("chosen from it") += 1;
            in_flight += 1;
            started = true;
            self.stats.seeds_started += 1;
            actions.push(Action::Seed {
                seed_id,
                from: owner,
                to,
                to_addr: self.addr(to),
                range: self.unit_range(u),
            });
        }
        if started {
            self.epoch += 1;
            actions.push(Action::MapChanged);
        }
    }

    /// Whether `member` is alive here.
    pub fn is_member(&self, member: MemberId) -> bool {
        self.members.contains_key(&member)
    }

    /// Units owned per member (for tests and the host's logs).
    pub fn unit_counts(&self) -> BTreeMap<MemberId, usize> {
        let mut c: BTreeMap<MemberId, usize> = self.members.keys().map(|&m| (m, 0)).collect();
        for u in &self.units {
            if let Some(m) = u.owner {
                *c.entry(m).or_default() += 1;
            }
        }
        c
    }

    /// A member joins at `addr`. Units nobody owns (a new service, or every owner died) go to
    /// it at once.
    ///
    /// # Errors
    /// [`SharderError::TooManyMembers`].
    pub fn join(
        &mut self,
        addr: String,
        now_ms: u64,
    ) -> Result<(MemberId, Vec<Action>), SharderError> {
        if self.members.len() >= limits::MEMBERS_MAX {
            return Err(SharderError::TooManyMembers);
        }
        let id = self.next_member;
        self.next_member += 1;
        self.members.insert(
            id,
            Member {
                addr,
                last_heartbeat_ms: now_ms,
                cpu_cores: 0.0,
                reports_since_move: 0,
                draining: false,
            },
        );
        // While recovering, unclaimed units may still be claimed by members rejoining.
        let orphans: Vec<usize> = (0..self.units.len())
            .filter(|&u| self.units[u].owner.is_none() && self.recover_until_ms.is_none())
            .collect();
        let mut actions = Vec::new();
        if !orphans.is_empty() {
            for &u in &orphans {
                self.units[u].owner = Some(id);
            }
            for range in self.ranges_of(orphans) {
                actions.push(Action::Adopt { member: id, range });
            }
        }
        self.epoch += 1;
        actions.push(Action::MapChanged);
        Ok((id, actions))
    }

    /// A heartbeat from `member`, with a load report or not. Returns `false` for a member that
    /// is not (or no longer) alive here: the host tells it it expired.
    pub fn heartbeat(&mut self, member: MemberId, load: Option<&MemberLoad>, now_ms: u64) -> bool {
        let Some(m) = self.members.get_mut(&member) else {
            return false;
        };
        m.last_heartbeat_ms = m.last_heartbeat_ms.max(now_ms);
        let Some(load) = load else { return true };
        m.cpu_cores = if load.cpu_cores.is_finite() {
            load.cpu_cores.max(0.0)
        } else {
            0.0
        };
        m.reports_since_move = m.reports_since_move.saturating_add(1);
        for ul in &load.units {
            // Only the owner's report counts; a unit that just moved may still be in the old
            // owner's report.
            let Some(u) = self.units.get_mut(usize::from(ul.unit)) else {
                continue;
            };
            if u.owner == Some(member) && ul.ops_per_s.is_finite() {
                u.ops_per_s = ul.ops_per_s.max(0.0);
                u.bytes = ul.bytes;
            }
        }
        true
    }

    /// `member` asks to leave: its units are moved to the other members, one move at a time
    /// (within `moves_in_flight_max`, not counted against the per-minute budget nor held by
    /// unit cooldowns: an operator asked), and once it owns nothing it is removed with
    /// [`Action::Drained`]. A member with nothing to move leaves at once. If it is the last
    /// member its units have nowhere to go: it stays (and keeps serving) until another joins.
    pub fn drain(&mut self, member: MemberId) -> Vec<Action> {
        let Some(m) = self.members.get_mut(&member) else {
            return Vec::new();
        };
        m.draining = true;
        let mut actions = Vec::new();
        // It backs nothing from now on (its units get new backups elsewhere).
        for u in 0..self.units.len() {
            if self.units[u].backup == Some(member) {
                self.clear_backup(u, &mut actions);
            }
        }
        self.finish_drain(member, &mut actions);
        actions
    }

    fn finish_drain(&mut self, member: MemberId, actions: &mut Vec<Action>) {
        let draining = self.members.get(&member).is_some_and(|m| m.draining);
        let owns = self.units.iter().any(|u| u.owner == Some(member));
        let moving_in = self.moves.values().any(|mv| mv.to == member);
        if draining && !owns && !moving_in {
            self.members.remove(&member);
            actions.push(Action::Drained { member });
            self.epoch += 1;
            actions.push(Action::MapChanged);
        }
    }

    /// The next move off a draining member, if any.
    fn plan_drain(&mut self, now_ms: u64) -> Option<Vec<Action>> {
        let counts = self.unit_counts();
        let target = counts
            .iter()
            .filter(|(m, _)| !self.members[m].draining)
            .min_by_key(|(&m, &c)| (c, m))
            .map(|(&m, _)| m)?;
        let (unit, from) = self.units.iter().enumerate().find_map(|(u, x)| {
            let from = x.owner?;
            (x.in_move.is_none()
                && x.seed.is_none()
                && self.members.get(&from).is_some_and(|m| m.draining))
            .then_some((u, from))
        })?;
        Some(self.start_move(unit, from, target, now_ms))
    }

    fn start_move(
        &mut self,
        unit: usize,
        from: MemberId,
        to: MemberId,
        now_ms: u64,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let x = &self.units[unit];
        let handover = x.backup == Some(to) && x.backup_ready;
        if x.backup == Some(to) && !handover {
            // Not reachable (no move of a seeding unit), but a half-seeded target must not
            // keep its partial copy as a backup: the move's batches replace it.
            self.clear_backup(unit, &mut actions);
            actions.retain(|a| !matches!(a, Action::DropBackup { .. }));
        }
        let backup = self.units[unit]
            .backup
            .filter(|&b| self.units[unit].backup_ready && b != to);
        let move_id = self.next_move;
        self.next_move += 1;
        self.units[unit].in_move = Some(move_id);
        self.moves.insert(
            move_id,
            Move {
                unit,
                from,
                to,
                backup,
                handover,
            },
        );
        self.move_starts.push_back(now_ms);
        self.stats.moves_started += 1;
        actions.push(Action::MoveOut {
            move_id,
            from,
            to,
            to_addr: self.members[&to].addr.clone(),
            range: self.unit_range(unit),
            backup_addr: backup.map(|b| self.addr(b)),
            handover,
        });
        actions
    }

    /// The source of `move_id` reports how it ended.
    pub fn move_done(&mut self, move_id: u64, outcome: MoveOutcome, now_ms: u64) -> Vec<Action> {
        let Some(mv) = self.moves.remove(&move_id) else {
            // Cancelled (its source died) or a duplicate.
            return Vec::new();
        };
        let unit = &mut self.units[mv.unit];
        unit.in_move = None;
        unit.last_move_ms = Some(now_ms);
        for m in [mv.from, mv.to] {
            if let Some(m) = self.members.get_mut(&m) {
                m.reports_since_move = 0;
            }
        }
        if unit.owner != Some(mv.from) {
            // The source died meanwhile and the unit was already reported lost.
            return Vec::new();
        }
        let mut actions = Vec::new();
        match outcome {
            MoveOutcome::Aborted => self.stats.moves_aborted += 1,
            MoveOutcome::Committed | MoveOutcome::Ambiguous
                if mv.handover && self.members.contains_key(&mv.to) =>
            {
                // The backup serves its copy now (Ambiguous: it may not have heard the commit;
                // `Promote` makes sure, and is a no-op if it did). A new backup is seeded next.
                self.stats.moves_committed += 1;
                let unit = &mut self.units[mv.unit];
                unit.owner = Some(mv.to);
                unit.backup = None;
                unit.backup_ready = false;
                if outcome == MoveOutcome::Ambiguous {
                    actions.push(Action::Promote {
                        member: mv.to,
                        range: self.unit_range(mv.unit),
                    });
                }
                self.epoch += 1;
                actions.push(Action::MapChanged);
            }
            MoveOutcome::Committed if self.members.contains_key(&mv.to) => {
                self.stats.moves_committed += 1;
                self.units[mv.unit].owner = Some(mv.to);
                let ready = self.units[mv.unit]
                    .backup
                    .filter(|_| self.units[mv.unit].backup_ready);
                if mv.backup.is_some() && ready != mv.backup {
                    // The backup the target was given died (or changed) during the move.
                    let range = self.unit_range(mv.unit);
                    actions.push(Action::Unbackup {
                        member: mv.to,
                        range,
                    });
                }
                self.epoch += 1;
                actions.push(Action::MapChanged);
            }
            // Committed at a target that died since: the source flushed every acknowledged
            // write to the backup before the commit and the target replicated to it after,
            // so a ready backup holds the unit: promote it.
            MoveOutcome::Committed
                if self.units[mv.unit].backup_ready
                    && self.units[mv.unit]
                        .backup
                        .is_some_and(|b| self.members.contains_key(&b)) =>
            {
                self.stats.moves_committed += 1;
                self.promote(mv.unit, &mut actions);
                self.epoch += 1;
                actions.push(Action::MapChanged);
            }
            // Committed at a dead target without a backup, or not known to be committed: the
            // source dropped its copy, so the state may be gone. Report it and re-home it.
            MoveOutcome::Committed | MoveOutcome::Ambiguous => {
                // The backup's copy may not match what the target serves (if it committed):
                // drop it; a new one is seeded from whoever owns the unit next.
                self.clear_backup(mv.unit, &mut actions);
                // Reported as the target's: that is where the state went (or may have).
                self.units[mv.unit].owner = None;
                self.lose(mv.to, vec![mv.unit], Some(mv.to), &mut actions);
            }
        }
        self.finish_drain(mv.from, &mut actions);
        self.finish_drain(mv.to, &mut actions);
        actions
    }

    /// Expire dead members, maybe start a move, and start backup seeds.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        let dead: Vec<MemberId> = self
            .members
            .iter()
            .filter(|(_, m)| now_ms.saturating_sub(m.last_heartbeat_ms) > self.cfg.lease_ms)
            .map(|(&id, _)| id)
            .collect();
        // All of them leave first, so no unit is promoted to a backup that died in the same
        // tick as its owner (that unit is reported lost: both copies are gone).
        for &id in &dead {
            self.members.remove(&id);
        }
        for id in dead {
            self.expire(id, &mut actions);
        }
        if let Some(until) = self.recover_until_ms {
            if now_ms < until {
                return actions;
            }
            self.end_recovery(&mut actions);
        }
        if let Some(a) = self.plan_move(now_ms) {
            actions.extend(a);
        }
        self.plan_seeds(now_ms, &mut actions);
        actions
    }

    /// Serve `u` from its ready backup (its owner is gone).
    fn promote(&mut self, u: usize, actions: &mut Vec<Action>) {
        let range = self.unit_range(u);
        let unit = &mut self.units[u];
        let Some(b) = unit.backup.take() else { return };
        unit.owner = Some(b);
        unit.backup_ready = false;
        unit.seed = None;
        unit.in_move = None;
        unit.ops_per_s = 0.0;
        self.stats.units_promoted += 1;
        actions.push(Action::Promote { member: b, range });
    }

    /// `id` (already removed from `members`) is dead.
    fn expire(&mut self, id: MemberId, actions: &mut Vec<Action>) {
        self.stats.members_expired += 1;
        actions.push(Action::Expired { member: id });
        // Moves out of the dead member end here (their units are lost below); moves into it
        // are left to their source, which aborts (or reports a commit, handled in move_done).
        self.moves.retain(|_, mv| mv.from != id);
        let mut lost = Vec::new();
        for u in 0..self.units.len() {
            if self.units[u].backup == Some(id) {
                self.clear_backup(u, actions);
            }
            if self.units[u].owner != Some(id) {
                continue;
            }
            let unit = &self.units[u];
            let promotable =
                unit.backup_ready && unit.backup.is_some_and(|b| self.members.contains_key(&b));
            if promotable {
                self.promote(u, actions);
            } else {
                // A backup still seeding holds only part of the unit: drop it.
                self.clear_backup(u, actions);
                let unit = &mut self.units[u];
                unit.owner = None;
                unit.in_move = None;
                lost.push(u);
            }
        }
        if lost.is_empty() {
            self.epoch += 1;
            actions.push(Action::MapChanged);
        } else {
            self.lose(id, lost, None, actions);
        }
    }

    /// `units` (now unowned) held state of `member` that is gone: report it and give each unit
    /// to the live member with the fewest units (`prefer` first if it is alive: the target of
    /// an ambiguous move, which may already serve it).
    fn lose(
        &mut self,
        member: MemberId,
        units: Vec<usize>,
        prefer: Option<MemberId>,
        actions: &mut Vec<Action>,
    ) {
        self.stats.units_lost += units.len() as u64;
        actions.push(Action::StateLost {
            member,
            ranges: self.ranges_of(units.clone()),
        });
        let mut counts = self.unit_counts();
        // A draining member is not given anything (if it is the only survivor, it must be).
        if counts.keys().any(|m| !self.members[m].draining) {
            counts.retain(|m, _| !self.members[m].draining);
        }
        let mut given: BTreeMap<MemberId, Vec<usize>> = BTreeMap::new();
        for u in units {
            let to = prefer
                .filter(|p| self.members.contains_key(p))
                .or_else(|| counts.iter().min_by_key(|(&m, &c)| (c, m)).map(|(&m, _)| m));
            let Some(to) = to else { break };
            self.units[u].owner = Some(to);
            self.units[u].ops_per_s = 0.0;
            self.units[u].bytes = 0;
            *counts.entry(to).or_default() += 1;
            given.entry(to).or_default().push(u);
        }
        for (member, us) in given {
            for range in self.ranges_of(us) {
                actions.push(Action::Adopt { member, range });
            }
        }
        self.epoch += 1;
        actions.push(Action::MapChanged);
    }

    /// Per member, its totals on each metric; per unit, its vector.
    fn loads(&self) -> (BTreeMap<MemberId, [f64; METRICS]>, Vec<[f64; METRICS]>) {
        let mut member_ops: BTreeMap<MemberId, (f64, usize)> = BTreeMap::new();
        for u in &self.units {
            if let Some(m) = u.owner {
                let e = member_ops.entry(m).or_default();
                e.0 += u.ops_per_s;
                e.1 += 1;
            }
        }
        let unit_vec: Vec<[f64; METRICS]> = self
            .units
            .iter()
            .map(|u| {
                let Some(m) = u.owner else {
                    return [0.0; METRICS];
                };
                let cpu = self.members.get(&m).map_or(0.0, |x| x.cpu_cores);
                let (ops, n) = member_ops.get(&m).copied().unwrap_or((0.0, 1));
                // The member's CPU, shared among its units by request rate (evenly at rest).
                let share = if ops > 0.0 {
                    u.ops_per_s / ops
                } else {
                    1.0 / n.max(1) as f64
                };
                [u.ops_per_s, u.bytes as f64, cpu * share]
            })
            .collect();
        let mut totals: BTreeMap<MemberId, [f64; METRICS]> =
            self.members.keys().map(|&m| (m, [0.0; METRICS])).collect();
        for (u, v) in self.units.iter().zip(&unit_vec) {
            if let Some(t) = u.owner.and_then(|m| totals.get_mut(&m)) {
                for k in 0..METRICS {
                    t[k] += v[k];
                }
            }
        }
        (totals, unit_vec)
    }

    fn plan_move(&mut self, now_ms: u64) -> Option<Vec<Action>> {
        while self
            .move_starts
            .front()
            .is_some_and(|&t| now_ms.saturating_sub(t) >= 60_000)
        {
            self.move_starts.pop_front();
        }
        if self.moves.len() >= self.cfg.moves_in_flight_max {
            return None;
        }
        if let Some(a) = self.plan_drain(now_ms) {
            return Some(a);
        }
        if self.move_starts.len() >= self.cfg.moves_per_minute as usize
            || self.members.len() < 2
            || self.members.values().any(|m| m.draining)
        {
            return None;
        }
        let (mut totals, mut unit_vec) = self.loads();
        let n = self.members.len() as f64;
        let mut means = [0.0; METRICS];
        let mut active = [false; METRICS];
        for k in 0..METRICS {
            let total: f64 = totals.values().map(|t| t[k]).sum();
            means[k] = total / n;
            active[k] = total > METRIC_FLOOR[k];
        }
        let at_rest = !active.iter().any(|&a| a);
        if at_rest {
            // At rest: balance the unit count (metric 0 reused as "units").
            for t in totals.values_mut() {
                *t = [0.0; METRICS];
            }
            for (u, v) in self.units.iter().zip(unit_vec.iter_mut()) {
                *v = [f64::from(u8::from(u.owner.is_some())), 0.0, 0.0];
                if let Some(t) = u.owner.and_then(|m| totals.get_mut(&m)) {
                    t[0] += 1.0;
                }
            }
            active = [true, false, false];
            means = [totals.values().map(|t| t[0]).sum::<f64>() / n, 0.0, 0.0];
        }
        let score = |v: &[f64; METRICS]| -> f64 {
            (0..METRICS)
                .filter(|&k| active[k] && means[k] > 0.0)
                .map(|k| v[k] / means[k])
                .fold(0.0, f64::max)
        };
        // Only members whose load reflects their current units take part. At rest the metric
        // is the unit count, which is exact at once: no report to wait for.
        let busy: Vec<MemberId> = self.moves.values().flat_map(|m| [m.from, m.to]).collect();
        let settled = |m: &MemberId| {
            !busy.contains(m)
                && (at_rest
                    || self
                        .members
                        .get(m)
                        .is_some_and(|x| x.reports_since_move >= self.cfg.fresh_reports))
        };
        let (&hot, hot_v) = totals
            .iter()
            .filter(|(m, _)| settled(m))
            .max_by(|a, b| score(a.1).total_cmp(&score(b.1)).then(b.0.cmp(a.0)))?;
        let (&cold, cold_v) = totals
            .iter()
            .filter(|(m, _)| settled(m) && **m != hot)
            .min_by(|a, b| score(a.1).total_cmp(&score(b.1)).then(a.0.cmp(b.0)))?;
        let hot_score = score(hot_v);
        if hot_score <= 1.0 + self.cfg.imbalance_threshold {
            return None;
        }
        let mut best: Option<(usize, f64)> = None;
        for (u, unit) in self.units.iter().enumerate() {
            if unit.owner != Some(hot) || unit.in_move.is_some() || unit.seed.is_some() {
                continue;
            }
            if unit
                .last_move_ms
                .is_some_and(|t| now_ms.saturating_sub(t) < self.cfg.unit_cooldown_ms)
            {
                continue;
            }
            let uv = &unit_vec[u];
            let mut h = *hot_v;
            let mut c = *cold_v;
            for k in 0..METRICS {
                h[k] -= uv[k];
                c[k] += uv[k];
            }
            let after = score(&h).max(score(&c));
            // Strictly better by more than `min_gain` (1e-9: float noise is not a gain).
            if after < hot_score - self.cfg.min_gain.max(1e-9)
                && best.is_none_or(|(_, b)| after < b)
            {
                best = Some((u, after));
            }
        }
        let (unit, _) = best?;
        Some(self.start_move(unit, hot, cold, now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::UnitLoad;

    fn cfg() -> SharderConfig {
        SharderConfig {
            units: 8,
            lease_ms: 1000,
            heartbeat_ms: 100,
            moves_per_minute: 100,
            unit_cooldown_ms: 5000,
            fresh_reports: 1,
            moves_in_flight_max: 1,
            ..SharderConfig::default()
        }
    }

    /// Report `ops[u]` for every unit `m` owns.
    fn report(s: &mut Sharder, m: MemberId, ops: &[f64], now: u64) {
        let map = s.map();
        let units = (0..ops.len())
            .filter(|&u| map.owners[u].as_ref().is_some_and(|o| o.member == m))
            .map(|u| UnitLoad {
                unit: u as u16,
                ops_per_s: ops[u],
                bytes: 0,
            })
            .collect();
        assert!(s.heartbeat(
            m,
            Some(&MemberLoad {
                units,
                cpu_cores: 0.0
            }),
            now
        ));
    }

    fn moves(actions: &[Action]) -> Vec<(MemberId, MemberId, SlotRange, u64)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::MoveOut {
                    from,
                    to,
                    range,
                    move_id,
                    ..
                } => Some((*from, *to, *range, *move_id)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_first_member_adopts_everything() {
        let mut s = Sharder::new(cfg()).unwrap();
        let (a, actions) = s.join("a".into(), 0).unwrap();
        assert_eq!(
            actions,
            vec![
                Action::Adopt {
                    member: a,
                    range: SlotRange {
                        first: 0,
                        last: 16383
                    }
                },
                Action::MapChanged
            ]
        );
        let (b, actions) = s.join("b".into(), 0).unwrap();
        assert_eq!(actions, vec![Action::MapChanged]);
        assert_eq!(s.unit_counts()[&a], 8);
        assert_eq!(s.unit_counts()[&b], 0);
    }

    #[test]
    fn a_hot_unit_moves_to_the_coldest_member_and_balance_stops_within_the_threshold() {
        let mut s = Sharder::new(cfg()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        // All load on a; units 0 and 1 are hot.
        let ops = [400.0, 300.0, 50.0, 50.0, 50.0, 50.0, 50.0, 50.0];
        let mut now = 0;
        let mut moved = Vec::new();
        for _ in 0..50 {
            now += 100;
            report(&mut s, a, &ops, now);
            report(&mut s, b, &ops, now);
            let acts = s.tick(now);
            for (from, to, range, id) in moves(&acts) {
                assert_eq!((from, to), (a, b));
                moved.push(range.first / s.slots_per_unit());
                s.move_done(id, MoveOutcome::Committed, now);
            }
        }
        // The best first move is the 400 unit (a: 600 left, b: 400; max 600/500=1.2 <= 1.25).
        assert_eq!(moved, vec![0]);
        let map = s.map();
        assert_eq!(map.owners[0].as_ref().unwrap().member, b);
        assert_eq!(s.stats.moves_committed, 1);
    }

    #[test]
    fn nothing_moves_within_the_threshold_or_over_the_budget() {
        let mut c = cfg();
        c.moves_per_minute = 2;
        c.unit_cooldown_ms = 0;
        let mut s = Sharder::new(c).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        // Skewed: everything on a, so moves are wanted, but only 2 per minute.
        let ops = [100.0; 8];
        let mut started = 0;
        for t in 1..=100 {
            let now = t * 100;
            report(&mut s, a, &ops, now);
            report(&mut s, b, &ops, now);
            for (_, _, _, id) in moves(&s.tick(now)) {
                started += 1;
                s.move_done(id, MoveOutcome::Committed, now);
            }
        }
        assert_eq!(started, 2, "10 s of ticks: budget of 2 moves per minute");
        // After a minute the budget refills; balancing goes on until within the threshold.
        for t in 1..=2000 {
            let now = 10_000 + t * 100;
            report(&mut s, a, &ops, now);
            report(&mut s, b, &ops, now);
            for (_, _, _, id) in moves(&s.tick(now)) {
                s.move_done(id, MoveOutcome::Committed, now);
            }
        }
        // 5/3 is within 25% of the mean (5/4 = 1.25 is not over it): 3 moves from 8/0.
        assert_eq!(s.unit_counts()[&a], 5);
        assert_eq!(s.unit_counts()[&b], 3);
        assert_eq!(s.stats.moves_started, 3);
    }

    #[test]
    fn at_rest_units_are_balanced_by_count() {
        let mut s = Sharder::new(cfg()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        let (c, _) = s.join("c".into(), 0).unwrap();
        for t in 1..=200 {
            let now = t * 100;
            for m in [a, b, c] {
                report(&mut s, m, &[0.0; 8], now);
            }
            for (_, _, _, id) in moves(&s.tick(now)) {
                s.move_done(id, MoveOutcome::Committed, now);
            }
        }
        let counts = s.unit_counts();
        assert!(counts.values().all(|&n| (2..=3).contains(&n)), "{counts:?}");
    }

    #[test]
    fn a_move_that_does_not_help_is_not_made() {
        let mut s = Sharder::new(cfg()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        // One unit carries everything: moving it to b only makes b the hot one.
        let mut ops = [0.0; 8];
        ops[3] = 1000.0;
        for t in 1..=100 {
            let now = t * 100;
            report(&mut s, a, &ops, now);
            report(&mut s, b, &ops, now);
            assert!(moves(&s.tick(now)).is_empty());
        }
    }

    /// Two units move a -> b at rest; then the load lands on exactly those two units. Moving
    /// one back would balance, but a unit that just moved stays put for its cooldown.
    fn flap(cooldown_ms: u64) -> u64 {
        let mut c = cfg();
        c.units = 4;
        c.unit_cooldown_ms = cooldown_ms;
        let mut s = Sharder::new(c).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        let mut now = 0;
        for _ in 0..20 {
            now += 100;
            report(&mut s, a, &[0.0; 4], now);
            report(&mut s, b, &[0.0; 4], now);
            for (_, _, _, id) in moves(&s.tick(now)) {
                s.move_done(id, MoveOutcome::Committed, now);
            }
        }
        assert_eq!(s.unit_counts()[&b], 2);
        assert_eq!(s.stats.moves_committed, 2);
        let ops = [100.0, 100.0, 0.0, 0.0];
        for _ in 0..20 {
            now += 100;
            report(&mut s, a, &ops, now);
            report(&mut s, b, &ops, now);
            for (_, _, _, id) in moves(&s.tick(now)) {
                s.move_done(id, MoveOutcome::Committed, now);
            }
        }
        s.stats.moves_committed
    }

    #[test]
    fn a_unit_is_not_moved_again_during_its_cooldown() {
        assert_eq!(flap(1_000_000), 2);
        assert_eq!(flap(0), 3, "without a cooldown the unit moves back");
    }

    #[test]
    fn an_expired_member_s_units_are_reported_lost_and_adopted_by_survivors() {
        let mut s = Sharder::new(cfg()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        // Move unit 7 to b by hand through the balancing path: b heartbeats, a does not.
        let mut acts = Vec::new();
        for t in 1..=30 {
            let now = t * 100;
            report(&mut s, a, &[0.0; 8], now);
            report(&mut s, b, &[0.0; 8], now);
            for (_, _, _, id) in moves(&s.tick(now)) {
                s.move_done(id, MoveOutcome::Committed, now);
            }
        }
        let b_units: Vec<usize> = (0..8)
            .filter(|&u| s.map().owners[u].as_ref().unwrap().member == b)
            .collect();
        assert!(!b_units.is_empty());
        // b stops heartbeating.
        for t in 31..=60 {
            let now = t * 100;
            assert!(s.heartbeat(a, None, now));
            acts.extend(s.tick(now));
        }
        assert!(acts.contains(&Action::Expired { member: b }));
        let lost: Vec<&Action> = acts
            .iter()
            .filter(|x| matches!(x, Action::StateLost { .. }))
            .collect();
        assert_eq!(lost.len(), 1);
        let Action::StateLost { member, ranges } = lost[0] else {
            unreachable!()
        };
        assert_eq!(*member, b);
        let covered: usize = ranges
            .iter()
            .map(|r| usize::from(r.last - r.first + 1))
            .sum();
        assert_eq!(covered, b_units.len() * 2048);
        assert_eq!(s.unit_counts()[&a], 8);
        assert!(!s.heartbeat(b, None, 6100), "b is gone for good");
        assert!(acts
            .iter()
            .any(|x| matches!(x, Action::Adopt { member, .. } if *member == a)));
    }

    #[test]
    fn a_commit_at_a_target_that_died_is_reported_lost() {
        let mut c = cfg();
        c.moves_in_flight_max = 1;
        let mut s = Sharder::new(c).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        let mut pending = None;
        for t in 1..=10 {
            let now = t * 100;
            report(&mut s, a, &[0.0; 8], now);
            report(&mut s, b, &[0.0; 8], now);
            if let Some(m) = moves(&s.tick(now)).first() {
                pending = Some(*m);
                break;
            }
        }
        let (_, to, range, id) = pending.expect("a move starts");
        assert_eq!(to, b);
        // b dies before the source reports the commit.
        let mut acts = Vec::new();
        for t in 11..=40 {
            let now = t * 100;
            s.heartbeat(a, None, now);
            acts.extend(s.tick(now));
        }
        assert!(acts.contains(&Action::Expired { member: b }));
        let acts = s.move_done(id, MoveOutcome::Committed, 4100);
        assert!(acts.contains(&Action::StateLost {
            member: b,
            ranges: vec![range]
        }));
        assert_eq!(s.unit_counts()[&a], 8);
        // An aborted move changes nothing.
        assert!(s.move_done(id, MoveOutcome::Aborted, 4200).is_empty());
    }

    #[test]
    fn a_draining_member_hands_every_unit_over_and_leaves() {
        let mut s = Sharder::new(cfg()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        let mut drained = false;
        let mut acts = s.drain(a);
        assert!(acts.is_empty());
        for t in 1..=100 {
            let now = t * 100;
            s.heartbeat(a, None, now);
            s.heartbeat(b, None, now);
            acts.extend(s.tick(now));
            for (from, to, _, id) in moves(&acts) {
                assert_eq!((from, to), (a, b));
                let done = s.move_done(id, MoveOutcome::Committed, now);
                drained |= done.contains(&Action::Drained { member: a });
            }
            acts.clear();
        }
        assert!(drained);
        assert!(!s.is_member(a));
        assert_eq!(s.unit_counts()[&b], 8);
        assert_eq!(s.stats.units_lost, 0);
        // The last member has nowhere to send its units and stays.
        assert!(s.drain(b).is_empty());
        s.heartbeat(b, None, 20_000);
        assert!(moves(&s.tick(20_000)).is_empty());
        assert!(s.is_member(b));
    }

    #[test]
    fn fine_units_still_move_one_at_a_time() {
        let mut c = cfg();
        c.units = 64;
        c.unit_cooldown_ms = 0;
        let mut s = Sharder::new(c).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        // Uniform load over 64 units, all on a: each move shifts the scores by 2/64 only.
        let ops = [10.0; 64];
        for t in 1..=2000 {
            let now = t * 100;
            report(&mut s, a, &ops, now);
            report(&mut s, b, &ops, now);
            for (_, _, _, id) in moves(&s.tick(now)) {
                s.move_done(id, MoveOutcome::Committed, now);
            }
        }
        // Until within 25% of the mean: 40/24 (40/32 = 1.25 is not over the threshold).
        assert_eq!(s.unit_counts()[&a], 40);
        assert_eq!(s.unit_counts()[&b], 24);
    }

    #[test]
    fn config_is_validated() {
        let mut c = cfg();
        c.units = 3;
        assert!(Sharder::new(c).is_err());
        let mut c = cfg();
        c.lease_ms = 100;
        assert!(Sharder::new(c).is_err());
        let mut c = cfg();
        c.replicas = 3;
        assert!(Sharder::new(c).is_err());
    }

    fn seeds(actions: &[Action]) -> Vec<(u64, MemberId, MemberId, SlotRange)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Seed {
                    seed_id,
                    from,
                    to,
                    range,
                    ..
                } => Some((*seed_id, *from, *to, *range)),
                _ => None,
            })
            .collect()
    }

    /// Heartbeats for `alive` and ticks until no seed is in flight, completing every seed
    /// (`ok`). Returns the time reached.
    fn settle_seeds(s: &mut Sharder, alive: &[MemberId], mut now: u64, ok: bool) -> u64 {
        for _ in 0..100 {
            now += 100;
            for &m in alive {
                assert!(s.heartbeat(m, None, now));
            }
            let acts = s.tick(now);
            for (_, _, _, id) in moves(&acts) {
                s.move_done(id, MoveOutcome::Committed, now);
            }
            let started = seeds(&acts);
            for (id, from, to, _) in &started {
                assert_ne!(from, to, "a unit's backup is never its owner");
                s.seed_done(*id, ok);
            }
            if started.is_empty() && s.units.iter().all(|u| u.seed.is_none()) {
                break;
            }
        }
        now
    }

    fn replicated() -> SharderConfig {
        SharderConfig {
            replicas: 2,
            seeds_in_flight_max: 3,
            // No balancing moves in these tests: the unit layout stays as joined.
            imbalance_threshold: 1e9,
            ..cfg()
        }
    }

    #[test]
    fn every_unit_gets_a_ready_backup_and_a_dead_owner_s_units_are_promoted_not_lost() {
        let mut s = Sharder::new(replicated()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        // Alone: nowhere to put a backup.
        assert!(seeds(&s.tick(50)).is_empty());
        let (b, _) = s.join("b".into(), 50).unwrap();
        let (c, _) = s.join("c".into(), 50).unwrap();
        // Bounded seeds per tick.
        let first = seeds(&s.tick(60));
        assert_eq!(first.len(), 3);
        for (id, _, _, _) in first {
            s.seed_done(id, true);
        }
        let now = settle_seeds(&mut s, &[a, b, c], 60, true);
        let map = s.map();
        assert!(map
            .backups
            .iter()
            .all(|b| b.as_ref().is_some_and(|b| b.ready)));
        // Backups spread over b and c (a owns every unit).
        let on_b = map
            .backups
            .iter()
            .flatten()
            .filter(|x| x.member == b)
            .count();
        assert_eq!(on_b, 4, "{map:?}");
        // a dies: every unit is promoted to its backup, nothing is reported lost.
        let mut now2 = now;
        let mut acts = Vec::new();
        for _ in 0..15 {
            now2 += 100;
            s.heartbeat(b, None, now2);
            s.heartbeat(c, None, now2);
            let a2 = s.tick(now2);
            for (id, _, _, _) in seeds(&a2) {
                s.seed_done(id, true);
            }
            acts.extend(a2);
        }
        assert!(acts.contains(&Action::Expired { member: a }));
        assert!(!acts.iter().any(|x| matches!(x, Action::StateLost { .. })));
        let promoted: Vec<_> = acts
            .iter()
            .filter_map(|x| match x {
                Action::Promote { member, range } => Some((*member, *range)),
                _ => None,
            })
            .collect();
        assert_eq!(promoted.len(), 8);
        let map = s.map();
        for (m, r) in promoted {
            let u = usize::from(r.first / s.slots_per_unit());
            assert_eq!(map.owners[u].as_ref().unwrap().member, m);
        }
        assert_eq!(s.stats.units_lost, 0);
        assert_eq!(s.stats.units_promoted, 8);
        // The survivors back each other up again.
        settle_seeds(&mut s, &[b, c], now2, true);
        let map = s.map();
        for (o, bk) in map.owners.iter().zip(&map.backups) {
            let (o, bk) = (o.as_ref().unwrap(), bk.as_ref().unwrap());
            assert!(bk.ready && bk.member != o.member);
        }
    }

    #[test]
    fn a_unit_whose_owner_and_backup_die_together_is_lost_and_a_seeding_backup_does_not_count() {
        let mut s = Sharder::new(replicated()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        let now = settle_seeds(&mut s, &[a, b], 0, true);
        let (c, _) = s.join("c".into(), now).unwrap();
        // a and b die in the same tick; c survives: a's units had their backup on b.
        let mut now2 = now;
        let mut acts = Vec::new();
        for _ in 0..15 {
            now2 += 100;
            s.heartbeat(c, None, now2);
            acts.extend(s.tick(now2));
        }
        let lost: u64 = s.stats.units_lost;
        assert_eq!(lost, 8, "{acts:?}");
        assert!(!acts.iter().any(|x| matches!(x, Action::Promote { .. })));
        // A backup that never finished its seed is not promoted either.
        let mut s = Sharder::new(replicated()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        let now = settle_seeds(&mut s, &[a, b], 0, false);
        assert!(s
            .map()
            .backups
            .iter()
            .all(|x| x.as_ref().is_none_or(|x| !x.ready)));
        let mut acts = Vec::new();
        let mut now2 = now;
        for _ in 0..15 {
            now2 += 100;
            s.heartbeat(b, None, now2);
            acts.extend(s.tick(now2));
        }
        assert!(acts
            .iter()
            .any(|x| matches!(x, Action::StateLost { member, .. } if *member == a)));
        assert!(!acts.iter().any(|x| matches!(x, Action::Promote { .. })));
    }

    #[test]
    fn a_dead_backup_is_unbacked_at_its_owner_and_replaced() {
        let mut s = Sharder::new(replicated()).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        let now = settle_seeds(&mut s, &[a, b], 0, true);
        let (c, _) = s.join("c".into(), now).unwrap();
        let mut now2 = now;
        let mut acts = Vec::new();
        for _ in 0..15 {
            now2 += 100;
            s.heartbeat(a, None, now2);
            s.heartbeat(c, None, now2);
            let a2 = s.tick(now2);
            for (id, _, to, _) in seeds(&a2) {
                assert_eq!(to, c, "the replacement backup is the survivor");
                s.seed_done(id, true);
            }
            acts.extend(a2);
        }
        // b's units were promoted to a, a's units lost their backup (told to a).
        let unbacked = acts
            .iter()
            .filter(|x| matches!(x, Action::Unbackup { member, .. } if *member == a))
            .count();
        assert_eq!(unbacked, 8, "a owned all 8 units, all backed on b");
        assert_eq!(s.stats.units_lost, 0);
        let map = s.map();
        assert!(map
            .backups
            .iter()
            .all(|x| x.as_ref().is_some_and(|x| x.member == c && x.ready)));
    }

    #[test]
    fn a_move_carries_the_backup_and_a_move_to_the_backup_is_a_handover() {
        let mut c = replicated();
        c.imbalance_threshold = 0.25;
        c.unit_cooldown_ms = 0;
        let mut s = Sharder::new(c).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        let (b, _) = s.join("b".into(), 0).unwrap();
        let mut now = 0;
        // At rest, balancing moves units a -> b while b is seeded as their backup.
        let mut handed_over = false;
        let mut run = |s: &mut Sharder, members: &[MemberId], now: &mut u64| {
            let mut carried = false;
            for _ in 0..200 {
                *now += 100;
                for &m in members {
                    report(s, m, &[0.0; 8], *now);
                }
                let acts = s.tick(*now);
                for x in &acts {
                    if let Action::MoveOut {
                        move_id,
                        to,
                        range,
                        backup_addr,
                        handover,
                        ..
                    } = x
                    {
                        let u = usize::from(range.first / s.slots_per_unit());
                        // Never told to replicate to itself.
                        assert_ne!(backup_addr.as_deref(), Some(s.addr(*to).as_str()));
                        if *handover {
                            // The backup stays (ready) until the commit, then the unit has none.
                            assert_eq!(s.units[u].backup, Some(*to));
                            assert!(s.units[u].backup_ready);
                            handed_over = true;
                        } else if let Some(bk) = s.units[u].backup {
                            assert_eq!(backup_addr.as_deref(), Some(s.addr(bk).as_str()));
                            carried = true;
                        }
                        s.move_done(*move_id, MoveOutcome::Committed, *now);
                        if *handover {
                            assert_eq!(s.units[u].owner, Some(*to));
                            assert_eq!(s.units[u].backup, None);
                        }
                    }
                }
                for (id, _, _, _) in seeds(&acts) {
                    s.seed_done(id, true);
                }
            }
            carried
        };
        run(&mut s, &[a, b], &mut now);
        let map = s.map();
        for (o, bk) in map.owners.iter().zip(&map.backups) {
            let bk = bk.as_ref().unwrap();
            assert!(bk.ready);
            assert_ne!(o.as_ref().unwrap().member, bk.member);
        }
        // A third member: units move to it and keep their (ready) backups.
        let (c3, _) = s.join("c3".into(), now).unwrap();
        let carried = run(&mut s, &[a, b, c3], &mut now);
        assert!(handed_over);
        assert!(carried);
    }

    #[test]
    fn a_young_coordinator_recovers_ownership_from_rejoining_members() {
        let mut c = cfg();
        c.recovery_ms = 1500;
        let mut s = Sharder::new_at(c.clone(), 0).unwrap();
        assert!(s.recovering());
        let r = |u: u16| SlotRange {
            first: u * 2048,
            last: u * 2048 + 2047,
        };
        // Member 7 claims units 0-2, member 9 claims 2 (taken: disowned) and 3-4.
        let acts = s
            .rejoin(7, "a".into(), &[r(0), r(1), r(2)], 40, 100)
            .unwrap()
            .unwrap();
        assert!(!acts.iter().any(|a| matches!(a, Action::Disown { .. })));
        let acts = s
            .rejoin(9, "b".into(), &[r(2), r(3), r(4)], 41, 100)
            .unwrap()
            .unwrap();
        assert_eq!(
            acts[0],
            Action::Disown {
                member: 9,
                range: r(2)
            }
        );
        assert!(s.map().epoch > 41, "epochs continue above what members saw");
        // A new member gets an id above the recovered ones and nothing yet.
        let (n, acts) = s.join("c".into(), 200).unwrap();
        assert!(n > 9);
        assert!(!acts.iter().any(|a| matches!(a, Action::Adopt { .. })));
        // During the window nothing else happens.
        for m in [7, 9, n] {
            s.heartbeat(m, None, 1000);
        }
        assert!(!s
            .tick(1000)
            .iter()
            .any(|a| matches!(a, Action::Adopt { .. } | Action::StateLost { .. })));
        // The window closes: units 5-7 had an owner who never came back: lost, re-homed.
        for m in [7, 9, n] {
            s.heartbeat(m, None, 1600);
        }
        let acts = s.tick(1600);
        assert!(!s.recovering());
        let lost: Vec<SlotRange> = acts
            .iter()
            .filter_map(|a| match a {
                Action::StateLost { ranges, .. } => Some(ranges.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(
            lost,
            vec![SlotRange {
                first: 5 * 2048,
                last: 16383
            }]
        );
        let map = s.map();
        assert_eq!(map.owners[0].as_ref().unwrap().member, 7);
        assert_eq!(map.owners[2].as_ref().unwrap().member, 7);
        assert_eq!(map.owners[4].as_ref().unwrap().member, 9);
        assert!(map.owners.iter().all(Option::is_some));
        // An unknown member after the window is told it expired.
        assert_eq!(s.rejoin(42, "z".into(), &[r(0)], 1, 1700).unwrap(), None);

        // A fresh start (nobody rejoins): units are given out silently when the window ends.
        let mut s = Sharder::new_at(c.clone(), 0).unwrap();
        let (a, _) = s.join("a".into(), 0).unwrap();
        s.heartbeat(a, None, 1600);
        let acts = s.tick(1600);
        assert!(!acts.iter().any(|x| matches!(x, Action::StateLost { .. })));
        assert_eq!(s.unit_counts()[&a], 8);
        // An old coordinator's sharder (created after the window) does not recover.
        assert!(!Sharder::new_at(c, 5000).unwrap().recovering());
    }
}
