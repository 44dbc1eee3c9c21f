//! Typed calendar commands: `argv` in, [`Command`] out, applied to the store to give a
//! [`Reply`]. Pure: the server feeds it decoded requests, the tests call it directly.

use ringlet_codec::Reply;

use super::{format_time, parse_date, parse_time, Calendar, CalendarError, Minute, DAY_END};
use crate::limits;
use crate::{Error, Linklet};

/// The store a calendar server serves: user name -> calendar.
pub type CalendarStore = Linklet<String, Calendar>;

/// A parsed request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `PING`.
    Ping,
    /// `CAL.ADD user date start end title`.
    Add {
        /// Calendar owner.
        user: String,
        /// `YYYY-MM-DD`.
        date: String,
        /// Start minute.
        start: Minute,
        /// End minute.
        end: Minute,
        /// Title.
        title: String,
    },
    /// `CAL.FREE user date [WITHIN from to] [MIN minutes]`.
    Free {
        /// Calendar owner.
        user: String,
        /// `YYYY-MM-DD`.
        date: String,
        /// Window start (default 00:00).
        from: Minute,
        /// Window end (default 24:00).
        to: Minute,
        /// Shortest slot reported (default 1).
        min_len: Minute,
    },
    /// `CAL.LIST user date`.
    List {
        /// Calendar owner.
        user: String,
        /// `YYYY-MM-DD`.
        date: String,
    },
    /// `CAL.DEL user id`.
    Del {
        /// Calendar owner.
        user: String,
        /// Event id.
        id: u64,
    },
}

/// A request that does not parse: the text after `-ERR `.
pub type ParseError = String;

fn arity(name: &str) -> ParseError {
    format!("wrong number of arguments for '{name}' command")
}

fn text(arg: &[u8], what: &str) -> Result<String, ParseError> {
    if arg.is_empty() || arg.len() > limits::CALENDAR_TEXT_BYTES_MAX {
        return Err(format!(
            "{what} must be 1..={} bytes",
            limits::CALENDAR_TEXT_BYTES_MAX
        ));
    }
    String::from_utf8(arg.to_vec()).map_err(|_| format!("{what} must be UTF-8"))
}

fn date(arg: &[u8]) -> Result<String, ParseError> {
    parse_date(arg)
        .map(str::to_owned)
        .ok_or_else(|| "invalid date, expected YYYY-MM-DD".to_owned())
}

fn time(arg: &[u8]) -> Result<Minute, ParseError> {
    parse_time(arg).ok_or_else(|| "invalid time, expected HH:MM".to_owned())
}

impl Command {
    /// Parse one request.
    ///
    /// # Errors
    /// The error text for an unknown command, a wrong argument count or a bad argument.
    pub fn parse(argv: &[&[u8]]) -> Result<Command, ParseError> {
        let Some((name, args)) = argv.split_first() else {
            return Err("empty command".to_owned());
        };
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        match name.as_str() {
            "ping" => Ok(Command::Ping),
            "cal.add" => {
                let [user, d, s, e, title] = args else {
                    return Err(arity(&name));
                };
                Ok(Command::Add {
                    user: text(user, "user")?,
                    date: date(d)?,
                    start: time(s)?,
                    end: time(e)?,
                    title: text(title, "title")?,
                })
            }
            "cal.free" => {
                let [user, d, opts @ ..] = args else {
                    return Err(arity(&name));
                };
                let (mut from, mut to, mut min_len) = (0, DAY_END, 1);
                let mut rest = opts;
                // Bounded: each round consumes at least one argument.
                while let Some((opt, tail)) = rest.split_first() {
                    if opt.eq_ignore_ascii_case(b"WITHIN") {
                        let [f, t, tail @ ..] = tail else {
                            return Err("WITHIN needs two times".to_owned());
                        };
                        (from, to, rest) = (time(f)?, time(t)?, tail);
                        if to <= from {
                            return Err("WITHIN window must end after it starts".to_owned());
                        }
                    } else if opt.eq_ignore_ascii_case(b"MIN") {
                        let [m, tail @ ..] = tail else {
                            return Err("MIN needs a number of minutes".to_owned());
                        };
                        min_len = std::str::from_utf8(m)
                            .ok()
                            .and_then(|m| m.parse::<Minute>().ok())
                            .filter(|m| (1..=DAY_END).contains(m))
                            .ok_or_else(|| "MIN must be an integer in 1..=1440".to_owned())?;
                        rest = tail;
                    } else {
                        return Err("syntax error".to_owned());
                    }
                }
                Ok(Command::Free {
                    user: text(user, "user")?,
                    date: date(d)?,
                    from,
                    to,
                    min_len,
                })
            }
            "cal.list" => {
                let [user, d] = args else {
                    return Err(arity(&name));
                };
                Ok(Command::List {
                    user: text(user, "user")?,
                    date: date(d)?,
                })
            }
            "cal.del" => {
                let [user, id] = args else {
                    return Err(arity(&name));
                };
                let id = std::str::from_utf8(id)
                    .ok()
                    .and_then(|i| i.parse::<u64>().ok())
                    .ok_or_else(|| "value is not an integer or out of range".to_owned())?;
                Ok(Command::Del {
                    user: text(user, "user")?,
                    id,
                })
            }
            _ => Err(format!("unknown command '{name}'")),
        }
    }

    /// Run the command against `store`.
    pub fn apply(self, store: &CalendarStore) -> Reply {
        match self.run(store) {
            Ok(reply) => reply,
            Err(Error::Moving { slot }) => Reply::error(format!("TRYAGAIN slot {slot} is moving")),
            Err(Error::NotOwner { slot }) => {
                Reply::error(format!("NOTOWNER slot {slot} is not served here"))
            }
            Err(e) => Reply::error(format!("ERR {e}")),
        }
    }

    fn run(self, store: &CalendarStore) -> Result<Reply, Error> {
        Ok(match self {
            Command::Ping => Reply::Simple(b"PONG".to_vec()),
            Command::Add {
                user,
                date,
                start,
                end,
                title,
            } => {
                // Create the calendar on first use, then update in place. Two tries: the
                // insert can race only with another creation (then the update succeeds) or an
                // eviction right after it (then the client sees an error and retries).
                for _ in 0..2 {
                    if let Some(r) = store.update(&user, |c| c.add(&date, start, end, &title))? {
                        return Ok(match r {
                            Ok(id) => Reply::Integer(i64::try_from(id).unwrap_or(i64::MAX)),
                            Err(e @ (CalendarError::EmptyEvent | CalendarError::DayFull)) => {
                                Reply::error(format!("ERR {e}"))
                            }
                        });
                    }
                    store.insert_if_absent(user.clone(), Calendar::default(), 0)?;
                }
                Reply::error("ERR calendar evicted during the update, retry")
            }
            Command::Free {
                user,
                date,
                from,
                to,
                min_len,
            } => {
                let slots = store
                    .read(&user, |c| c.free_slots(&date, from, to, min_len))?
                    .unwrap_or_else(|| {
                        if to - from >= min_len {
                            vec![(from, to)]
                        } else {
                            vec![]
                        }
                    });
                Reply::Array(
                    slots
                        .into_iter()
                        .map(|(a, b)| Reply::bulk(format!("{}-{}", format_time(a), format_time(b))))
                        .collect(),
                )
            }
            Command::List { user, date } => {
                let events = store
                    .read(&user, |c| {
                        c.events(&date)
                            .iter()
                            .map(|e| {
                                Reply::bulk(format!(
                                    "{} {}-{} {}",
                                    e.id,
                                    format_time(e.start),
                                    format_time(e.end),
                                    e.title
                                ))
                            })
                            .collect::<Vec<_>>()
                    })?
                    .unwrap_or_default();
                Reply::Array(events)
            }
            Command::Del { user, id } => {
                let removed = store.update(&user, |c| c.remove(id))?.unwrap_or(false);
                Reply::Integer(i64::from(removed))
            }
        })
    }
}

/// Parse and apply one request.
pub fn execute(store: &CalendarStore, argv: &[&[u8]]) -> Reply {
    match Command::parse(argv) {
        Ok(cmd) => cmd.apply(store),
        Err(msg) => Reply::error(format!("ERR {msg}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn store() -> CalendarStore {
        Linklet::new(Config::default())
            .unwrap()
            .with_sizer(|c: &Calendar| c.size_bytes())
    }

    fn run(s: &CalendarStore, line: &str) -> Reply {
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        execute(s, &argv)
    }

    #[test]
    fn add_then_free() {
        let s = store();
        assert_eq!(
            run(&s, "CAL.ADD ann 2026-11-25 09:00 10:30 standup"),
            Reply::Integer(0)
        );
        assert_eq!(
            run(&s, "cal.add ann 2026-11-25 12:00 13:00 lunch"),
            Reply::Integer(1)
        );
        assert_eq!(
            run(&s, "CAL.FREE ann 2026-11-25 WITHIN 08:00 17:00 MIN 45"),
            Reply::Array(vec![
                Reply::bulk("08:00-09:00"),
                Reply::bulk("10:30-12:00"),
                Reply::bulk("13:00-17:00")
            ])
        );
        assert_eq!(
            run(&s, "CAL.FREE bob 2026-11-25"),
            Reply::Array(vec![Reply::bulk("00:00-24:00")])
        );
        assert_eq!(run(&s, "CAL.DEL ann 0"), Reply::Integer(1));
        assert_eq!(
            run(&s, "CAL.LIST ann 2026-11-25"),
            Reply::Array(vec![Reply::bulk("1 12:00-13:00 lunch")])
        );
    }

    #[test]
    fn bad_input_is_an_error_reply() {
        let s = store();
        for line in [
            "CAL.ADD ann 2026-11-25 09:00",
            "CAL.ADD ann 2026-02-30x 09:00 10:00 t",
            "CAL.ADD ann 2026-11-25 10:00 09:00 backwards",
            "CAL.FREE ann 2026-11-25 MIN zero",
            "CAL.FREE ann 2026-11-25 WITHIN 10:00",
            "CAL.FREE ann 2026-11-25 BOGUS",
            "CAL.DEL ann x",
            "NOPE",
        ] {
            assert!(run(&s, line).is_error(), "{line}");
        }
    }
}
