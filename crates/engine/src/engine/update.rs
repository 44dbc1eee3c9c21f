//! A read-modify-write of one key with one lookup for the write: [`Engine::get_for_update`]
//! reads the key's live entry and hands back an [`Updating`] that writes its replacement
//! reusing the index position the read found.
//!
//! Why: a record command (`RECORD SET`, `HSET`, `LINK ADD` ...) reads the record, edits it and
//! writes it back under the engine lock. Through [`Engine::get`] then
//! [`Engine::set_discarding_old`] that was three probes of the index for one key: the read's,
//! the write's check of the live entry (`live_meta`), and the publish's. The bulk loader's
//! pass 2 rewrites every list owner this way (docs/design/loader.md, "Session 21"). Here the
//! write takes the position the read's lookup found (`Store::look_up_for_put`, as a plain
//! SET's one lookup does, `Engine::set_plain_slotted`), so an update probes the index twice
//! (the lookup, then the copy of the value out of the entry it found, both under one lock
//! hold and the second on lines the first just loaded) instead of three times.
//!
//! What it keeps: the same rules as `get` + `set_discarding_old` — a new HLC version, the
//! staged version below it discarded, TTL kept or set, memgest checked, evictions folded into
//! the tombstone summary. The handle borrows the engine mutably, so nothing can change the
//! index between the read and the write (the position stays valid); an eviction to make room
//! for the new entry makes `put_looked_up` look the key up again. Whatever the fast path does
//! not cover (an entry found expired, which must be reaped and tombstoned first; a
//! caller-chosen version; a condition; a staged write; an expiry already past) takes the
//! general path, `set_discarding_old`, unchanged. Readers see what they saw before: the write
//! is the same stage + one-word publish.

use super::{check_value, Engine};
use crate::api::{Condition, Entry, Error, Expiry, SetOptions, SetOutcome};
use crate::hash::key_hash;
use crate::store::{Meta, PutLookup};
use ringlet_types::limits::KEY_BYTES_MAX;

/// The write half of a read-modify-write ([`Engine::get_for_update`]): holds the engine and
/// the read's lookup until [`Updating::set`] writes the new value, or
/// [`Updating::into_engine`] gives the engine back for another kind of change.
pub struct Updating<'e> {
    engine: &'e mut Engine,
    key: &'e [u8],
    now_ms: u64,
    /// `None`: the key is longer than `KEY_BYTES_MAX` (the general path refuses it).
    lookup: Option<PutLookup>,
    /// The live entry's expiry (what [`Expiry::Keep`] keeps), `None` for a missing key.
    live_expire_at_ms: Option<u64>,
}

impl Engine {
    /// `key`'s published, unexpired entry, exactly as [`Engine::get`] returns it (and counted
    /// as a hit or a miss the same way), with an [`Updating`] that writes its replacement
    /// without looking the key up again.
    pub fn get_for_update<'e>(
        &'e mut self,
        key: &'e [u8],
        now_ms: u64,
    ) -> (Option<Entry>, Updating<'e>) {
        let (entry, lookup) = if key.len() > KEY_BYTES_MAX as usize {
            (None, None)
        } else {
            let h = key_hash(key);
            let lookup = self
                .store
                .look_up_for_put(key, h, ringlet_types::key_slot(key), now_ms);
            // An expired entry reads as missing (`get`'s rule, the same `t <= now` test);
            // the write then takes the general path, which reaps it.
            let entry = if lookup.expired {
                None
            } else {
                self.store.get_entry(key, h)
            };
            (entry, Some(lookup))
        };
        let counter = if entry.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.set(counter.get() + 1);
        let live_expire_at_ms = entry.as_ref().and_then(|e| e.expire_at_ms);
        (
            entry,
            Updating {
                engine: self,
                key,
                now_ms,
                lookup,
                live_expire_at_ms,
            },
        )
    }
}

impl<'e> Updating<'e> {
    /// Write `value` under the key: the same outcome, writes and errors as
    /// `Engine::set_discarding_old(key, value, opts, now_ms)` right after the read (an
    /// applied write reports `old: None`).
    ///
    /// # Errors
    /// As [`Engine::set`].
    pub fn set(self, value: &[u8], opts: &SetOptions) -> Result<SetOutcome, Error> {
        let Updating {
            engine,
            key,
            now_ms,
            lookup,
            live_expire_at_ms,
        } = self;
        let simple = opts.version.is_none()
            && !opts.staged
            && matches!(opts.condition, Condition::Always)
            && !matches!(opts.expiry, Expiry::At(t) if t <= now_ms);
        let lookup = match lookup {
            Some(l) if simple && !l.expired => l,
            _ => return engine.set_discarding_old(key, value, opts, now_ms),
        };
        check_value(value.len())?;
        if !engine.memgests.contains_key(&opts.memgest) {
            return Err(Error::UnknownMemgest);
        }
        let version = engine.hlc.next(now_ms);
        let expire_at_ms = match opts.expiry {
            Expiry::Keep => live_expire_at_ms,
            Expiry::Persist => None,
            Expiry::At(t) => Some(t),
        };
        engine.discard_staged_below(key, version);
        let meta = Meta {
            version,
            memgest: opts.memgest,
            expire_at_ms,
            kind: opts.kind,
        };
        let Engine {
            store, memgests, ..
        } = &mut *engine;
        let evicted = store.put_looked_up(lookup, key, value, meta, &|m| {
            memgests.get(&m).copied().unwrap_or(false)
        })?;
        for v in evicted {
            // As in `Engine::put`.
            engine.tombstone_summary = engine.tombstone_summary.max(v);
        }
        Ok(SetOutcome::Applied { version, old: None })
    }

    /// The engine back, for a change other than a write of the key (a delete, an expiry):
    /// the lookup is dropped and that change looks the key up itself.
    pub fn into_engine(self) -> &'e mut Engine {
        self.engine
    }
}
