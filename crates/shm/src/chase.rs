//! CHASE without the node: the client walks links itself over one-sided reads, following
//! each link by its location hint (docs/design/records.md, "Location hints").
//!
//! The walk is `ringlet_record::chase::Chase` (the same state machine, bounds, order and
//! stop reasons as the node's CHASE); this module only fetches. The walk keeps, for each key
//! of a level, the hint of the first link that led to it, so each key is read at its hint
//! first ([`ShmReader::get_hinted`]: one validated direct read, a lookup by key if
//! the hint is stale).

use std::time::{Duration, Instant};

use ringlet_engine::read::{Direct, Position};
use ringlet_record::chase::{Chase, ChaseReply};
use ringlet_record::Hint;
use ringlet_types::ValueKind;

use crate::{ShmError, ShmReader};

/// Longest a one-sided CHASE walks before answering with what it has (`time`), as the
/// node's CHASE does (`ringlet_server::cmd::record::CHASE_TIME_MAX`).
pub const ONE_SIDED_CHASE_TIME_MAX: Duration = Duration::from_millis(100);

/// A hint as the engine position it names.
pub fn position(h: &Hint) -> Position {
    Position {
        layout: h.table,
        entry: h.entry,
        data: h.data.map(|d| Direct {
            location: d.location,
            crc: d.crc,
            memgest: d.memgest,
        }),
    }
}

/// The hint naming engine position `p` on `node` (0 on a single node) in `epoch`.
pub fn hint_at(p: Position, node: u32, epoch: u64) -> Hint {
    Hint {
        node,
        epoch,
        table: p.layout,
        entry: p.entry,
        data: p.data.map(|d| ringlet_record::DataHint {
            location: d.location,
            crc: d.crc,
            memgest: d.memgest,
        }),
    }
}

/// Drive `walk` with `fetch(key, hint, out)`, which reads `key` into
/// `out` and says whether it is a record (`Ok(true)`). Stops at the walk's bounds or after
/// `time_max`.
///
/// # Errors
/// The first error `fetch` returns.
pub fn drive<E>(
    walk: Chase,
    time_max: Duration,
    fetch: impl FnMut(&[u8], Option<Hint>, &mut Vec<u8>) -> Result<bool, E>,
) -> Result<ChaseReply, E> {
    drive_prefetching(walk, time_max, |_| {}, fetch)
}

/// Hops whose hinted lines [`drive_prefetching`] requests ahead of the one it reads.
const PREFETCH_HOPS_AHEAD: usize = 8;

/// [`drive`] that calls `prefetch(hint)` for the hop [`PREFETCH_HOPS_AHEAD`] places ahead of
/// each one it reads (the lines a hinted read will touch: `prefetch_position`), so a level's
/// cache misses overlap instead of being taken one hop at a time. A prefetch is only a hint:
/// it changes nothing the walk reads or returns.
///
/// # Errors
/// The first error `fetch` returns.
pub fn drive_prefetching<E>(
    mut walk: Chase,
    time_max: Duration,
    mut prefetch: impl FnMut(&Hint),
    mut fetch: impl FnMut(&[u8], Option<Hint>, &mut Vec<u8>) -> Result<bool, E>,
) -> Result<ChaseReply, E> {
    let deadline = Instant::now() + time_max;
    let mut buf = Vec::new();
    // Bounded by DEPTH + 1 levels, each of at most LIMIT keys.
    while walk.advance() {
        let (start, end) = (walk.level_start(), walk.level().len());
        for i in start..end.min(start + PREFETCH_HOPS_AHEAD) {
            if let Some(h) = walk.level_hint(i) {
                prefetch(&h);
            }
        }
        for i in start..end {
            if Instant::now() >= deadline {
                walk.timed_out();
                return Ok(walk.finish());
            }
            if i + PREFETCH_HOPS_AHEAD < end {
                if let Some(h) = walk.level_hint(i + PREFETCH_HOPS_AHEAD) {
                    prefetch(&h);
                }
            }
            // The hint of the first link (in BFS order) that led to this key.
            let hint = walk.level_hint(i);
            let found = fetch(&walk.level()[i], hint, &mut buf)?;
            walk.feed_encoded_at(i, found.then_some(buf.as_slice()));
        }
    }
    Ok(walk.finish())
}

impl ShmReader {
    /// CHASE over a single node's shared memory: `walk` (a parsed or built
    /// `ringlet_record::chase::Chase` following `links`) driven by one-sided reads, each
    /// hop one direct read at the link's hint when it is fresh. Same entries, order and
    /// stop reasons as the node's CHASE on the same data. (`links` is unused: the walk holds
    /// the link fields it follows; the parameter stays so callers need not change.)
    ///
    /// # Errors
    /// As [`ShmReader::get_hinted`] (then ask the node: `ringlet_client::Client::chase`).
    pub fn chase(&mut self, walk: Chase, links: &[Vec<u8>]) -> Result<ChaseReply, ShmError> {
        self.chase_within(walk, links, ONE_SIDED_CHASE_TIME_MAX)
    }

    /// [`ShmReader::chase`] with another time bound than [`ONE_SIDED_CHASE_TIME_MAX`].
    ///
    /// # Errors
    /// As [`ShmReader::chase`].
    pub fn chase_within(
        &mut self,
        walk: Chase,
        links: &[Vec<u8>],
        time_max: Duration,
    ) -> Result<ChaseReply, ShmError> {
        let _ = links; // the walk knows the link fields it follows
                       // The regions as mapped now; a remap during the walk only makes some prefetches
                       // useless (a prefetch never faults).
        let view = self.prefetch_view()?;
        drive_prefetching(
            walk,
            time_max,
            |h| ringlet_engine::read::prefetch_position(&view, position(h)),
            |key, hint, out| {
                let got = self.get_hinted(key, hint.as_ref().map(position), out)?;
                Ok(matches!(got, Some((_, ValueKind::Record))))
            },
        )
    }
}
