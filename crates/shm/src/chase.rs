//! CHASE without the node: the client walks links itself over one-sided reads, following
//! each link by its location hint (docs/design/records.md, "Location hints").
//!
//! The walk is `ringlet_record::chase::Chase` (the same state machine, bounds, order and
//! stop reasons as the node's CHASE); this module only fetches. For each visited record it
//! notes the hints of the followed link fields, so each key of the next level is read at
//! its hint first ([`ShmReader::get_hinted`]: one validated direct read, a lookup by key if
//! the hint is stale).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ringlet_engine::read::Position;
use ringlet_record::chase::{Chase, ChaseReply};
use ringlet_record::record::scan;
use ringlet_record::{Hint, CHASE_LIMIT_MAX};
use ringlet_types::ValueKind;

use crate::{ShmError, ShmReader};

/// Longest a one-sided CHASE walks before answering with what it has (`time`), as the
/// node's CHASE does (`ringlet_server::cmd::record::CHASE_TIME_MAX`).
pub const ONE_SIDED_CHASE_TIME_MAX: Duration = Duration::from_millis(100);

/// Hints remembered for the next levels of one walk; past this, further keys are looked up
/// by key (a hint is an optimisation, never needed for a correct answer).
const WALK_HINTS_MAX: usize = CHASE_LIMIT_MAX as usize;

/// A hint as the engine position it names.
pub fn position(h: &Hint) -> Position {
    Position {
        layout: h.table,
        entry: h.entry,
    }
}

/// Drive `walk` (following `links`) with `fetch(key, hint, out)`, which reads `key` into
/// `out` and says whether it is a record (`Ok(true)`). Stops at the walk's bounds or after
/// `time_max`.
///
/// # Errors
/// The first error `fetch` returns.
pub fn drive<E>(
    mut walk: Chase,
    links: &[Vec<u8>],
    time_max: Duration,
    mut fetch: impl FnMut(&[u8], Option<Hint>, &mut Vec<u8>) -> Result<bool, E>,
) -> Result<ChaseReply, E> {
    let deadline = Instant::now() + time_max;
    let mut hints: HashMap<Vec<u8>, Hint> = HashMap::new();
    let mut buf = Vec::new();
    // Bounded by DEPTH + 1 levels, each of at most LIMIT keys.
    loop {
        let batch = walk.next_batch();
        if batch.is_empty() {
            break;
        }
        for key in &batch {
            if Instant::now() >= deadline {
                walk.timed_out();
                return Ok(walk.finish());
            }
            let hint = hints.remove(key);
            if !fetch(key, hint, &mut buf)? {
                walk.feed_encoded(key, None);
                continue;
            }
            if let Ok(fields) = scan(&buf) {
                for (_, f) in fields.iter().filter(|(n, _)| links.iter().any(|l| l == n)) {
                    for (t, h) in f.links() {
                        if let Some(h) = h {
                            if hints.len() < WALK_HINTS_MAX {
                                hints.entry(t.to_vec()).or_insert(h);
                            }
                        }
                    }
                }
            }
            walk.feed_encoded(key, Some(&buf));
        }
    }
    Ok(walk.finish())
}

impl ShmReader {
    /// CHASE over a single node's shared memory: `walk` (a parsed or built
    /// `ringlet_record::chase::Chase` following `links`) driven by one-sided reads, each
    /// hop one direct read at the link's hint when it is fresh. Same entries, order and
    /// stop reasons as the node's CHASE on the same data.
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
        drive(walk, links, time_max, |key, hint, out| {
            let got = self.get_hinted(key, hint.as_ref().map(position), out)?;
            Ok(matches!(got, Some((_, ValueKind::Record))))
        })
    }
}
