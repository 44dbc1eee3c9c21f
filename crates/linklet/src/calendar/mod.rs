//! The paper's custom in-memory store (LInK §3.2): a calendar service that caches user
//! calendars as native objects and exposes a domain operation, `find-free-slots(user, date)`,
//! instead of handing whole calendars to every client (no overread, no unmarshalling on the
//! client). Served over RESP so any Redis client can call it:
//!
//! | command | reply |
//! |---|---|
//! | `CAL.ADD user YYYY-MM-DD HH:MM HH:MM title` | integer: the new event's id |
//! | `CAL.FREE user YYYY-MM-DD [WITHIN HH:MM HH:MM] [MIN minutes]` | array of `"HH:MM-HH:MM"` |
//! | `CAL.LIST user YYYY-MM-DD` | array of `"id HH:MM-HH:MM title"` |
//! | `CAL.DEL user id` | integer: 1 if removed, 0 if not found |
//! | `PING` | `PONG` |
//!
//! Bad input gets an `-ERR ...` reply and the connection stays open. A slot that is moving
//! gets `-TRYAGAIN`, one not served here `-NOTOWNER` (the router library, not built, would
//! act on both).
//!
//! - [`command`]: typed commands: parse `argv` into a [`command::Command`], apply it to the
//!   store, produce a [`ringlet_codec::Reply`] — no I/O, tested directly;
//! - [`server`]: the TCP front (tokio) using `ringlet-codec`'s RESP decoder and encoder.

pub mod command;
pub mod server;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::limits;

/// Minutes since midnight, `0..=1440`.
pub type Minute = u16;

/// The end of a day, in minutes.
pub const DAY_END: Minute = 24 * 60;

/// One user's calendar: events by day. Days are `YYYY-MM-DD` strings, which sort by date.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calendar {
    next_id: u64,
    days: BTreeMap<String, Vec<Event>>,
}

/// One event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Unique within the calendar.
    pub id: u64,
    /// Start, minutes since midnight.
    pub start: Minute,
    /// End (exclusive), minutes since midnight; `> start`.
    pub end: Minute,
    /// Free text, at most `CALENDAR_TEXT_BYTES_MAX` bytes.
    pub title: String,
}

/// Why a calendar operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// The event does not end after it starts.
    #[error("event must end after it starts")]
    EmptyEvent,
    /// The day already holds `CALENDAR_EVENTS_PER_DAY_MAX` events.
    #[error("too many events on this day")]
    DayFull,
}

impl Calendar {
    /// Add an event on `date` (already validated as `YYYY-MM-DD`) and return its id. Events
    /// may overlap (a double-booked afternoon is still a calendar).
    ///
    /// # Errors
    /// [`CalendarError`].
    pub fn add(
        &mut self,
        date: &str,
        start: Minute,
        end: Minute,
        title: &str,
    ) -> Result<u64, CalendarError> {
        if end <= start {
            return Err(CalendarError::EmptyEvent);
        }
        let day = self.days.entry(date.to_owned()).or_default();
        if day.len() >= limits::CALENDAR_EVENTS_PER_DAY_MAX {
            return Err(CalendarError::DayFull);
        }
        let id = self.next_id;
        self.next_id += 1;
        // Kept sorted by start so `free_slots` is one sweep.
        let at = day.partition_point(|e| (e.start, e.id) <= (start, id));
        day.insert(
            at,
            Event {
                id,
                start,
                end,
                title: title.to_owned(),
            },
        );
        Ok(id)
    }

    /// Remove event `id`. Returns whether it existed.
    pub fn remove(&mut self, id: u64) -> bool {
        let mut found = None;
        for (date, day) in &mut self.days {
            if let Some(i) = day.iter().position(|e| e.id == id) {
                day.remove(i);
                found = Some((date.clone(), day.is_empty()));
                break;
            }
        }
        match found {
            Some((date, true)) => {
                self.days.remove(&date);
                true
            }
            Some(_) => true,
            None => false,
        }
    }

    /// The events of `date`, by start.
    pub fn events(&self, date: &str) -> &[Event] {
        self.days.get(date).map_or(&[], Vec::as_slice)
    }

    /// `find-free-slots(user, date)`: the free intervals of `date` inside `[from, to)` that are
    /// at least `min_len` minutes long, in order. One sweep over the day's events (which are
    /// sorted by start), so O(events of that day) and nothing else is read.
    pub fn free_slots(
        &self,
        date: &str,
        from: Minute,
        to: Minute,
        min_len: Minute,
    ) -> Vec<(Minute, Minute)> {
        let mut free = Vec::new();
        let mut cursor = from;
        let min_len = min_len.max(1);
        for e in self.events(date) {
            if e.start >= to {
                break;
            }
            if e.start > cursor && e.start - cursor >= min_len {
                free.push((cursor, e.start));
            }
            cursor = cursor.max(e.end);
        }
        if to > cursor && to - cursor >= min_len {
            free.push((cursor, to));
        }
        free
    }

    /// The byte estimate the Linklet charges (see [`crate::Sizer`]): titles and dates plus the
    /// inline size of each event.
    pub fn size_bytes(&self) -> usize {
        let per_event = std::mem::size_of::<Event>();
        std::mem::size_of::<Calendar>()
            + self
                .days
                .iter()
                .map(|(d, evs)| {
                    d.len() + 48 + evs.iter().map(|e| per_event + e.title.len()).sum::<usize>()
                })
                .sum::<usize>()
    }
}

/// Parse `YYYY-MM-DD` (month 1–12, day 1–31; no calendar arithmetic is needed, so no
/// per-month check).
pub fn parse_date(s: &[u8]) -> Option<&str> {
    let ok = s.len() == 10
        && s[4] == b'-'
        && s[7] == b'-'
        && s.iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
    if !ok {
        return None;
    }
    let month = (s[5] - b'0') * 10 + (s[6] - b'0');
    let day = (s[8] - b'0') * 10 + (s[9] - b'0');
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    std::str::from_utf8(s).ok()
}

/// Parse `HH:MM` into minutes since midnight; `24:00` is the end of the day.
pub fn parse_time(s: &[u8]) -> Option<Minute> {
    if s.len() != 5 || s[2] != b':' {
        return None;
    }
    let digit = |i: usize| {
        s.get(i)
            .filter(|b| b.is_ascii_digit())
            .map(|b| Minute::from(b - b'0'))
    };
    let h = digit(0)? * 10 + digit(1)?;
    let m = digit(3)? * 10 + digit(4)?;
    if m >= 60 || h > 24 || (h == 24 && m != 0) {
        return None;
    }
    Some(h * 60 + m)
}

/// Format minutes since midnight as `HH:MM`.
pub fn format_time(t: Minute) -> String {
    format!("{:02}:{:02}", t / 60, t % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_slots_sweeps_overlapping_events() {
        let mut c = Calendar::default();
        c.add("2026-11-25", 9 * 60, 10 * 60, "standup").unwrap();
        c.add("2026-11-25", 9 * 60 + 30, 11 * 60, "review").unwrap(); // overlaps standup
        c.add("2026-11-25", 13 * 60, 14 * 60, "lunch talk").unwrap();
        c.add("2026-11-26", 12 * 60, 13 * 60, "other day").unwrap();
        let free = c.free_slots("2026-11-25", 8 * 60, 18 * 60, 1);
        assert_eq!(free, vec![(480, 540), (660, 780), (840, 1080)]);
        // A minimum length filters out the short gap.
        assert_eq!(
            c.free_slots("2026-11-25", 8 * 60, 18 * 60, 90),
            vec![(660, 780), (840, 1080)]
        );
        // A day without events is free all day.
        assert_eq!(
            c.free_slots("2026-11-27", 0, DAY_END, 1),
            vec![(0, DAY_END)]
        );
    }

    #[test]
    fn remove_and_bounds() {
        let mut c = Calendar::default();
        let id = c.add("2026-11-25", 60, 120, "x").unwrap();
        assert_eq!(
            c.add("2026-11-25", 60, 60, "empty"),
            Err(CalendarError::EmptyEvent)
        );
        assert!(c.remove(id));
        assert!(!c.remove(id));
        assert!(c.events("2026-11-25").is_empty());
        for i in 0..limits::CALENDAR_EVENTS_PER_DAY_MAX {
            c.add("2026-11-25", 0, 1 + (i % 100) as Minute, "e")
                .unwrap();
        }
        assert_eq!(
            c.add("2026-11-25", 0, 1, "one too many"),
            Err(CalendarError::DayFull)
        );
    }

    #[test]
    fn parses_dates_and_times() {
        assert_eq!(parse_date(b"2026-11-25"), Some("2026-11-25"));
        for bad in [
            &b"2026-13-01"[..],
            b"2026-00-10",
            b"2026-1-10",
            b"2026/11/25",
            b"20261125xx",
        ] {
            assert_eq!(parse_date(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_time(b"09:30"), Some(570));
        assert_eq!(parse_time(b"24:00"), Some(DAY_END));
        for bad in [&b"24:01"[..], b"9:30", b"09:60", b"ab:cd", b"09-30"] {
            assert_eq!(parse_time(bad), None);
        }
        assert_eq!(format_time(570), "09:30");
    }
}
