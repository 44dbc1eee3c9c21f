//! `RECORD SET`: write several fields of a record — bytes, links and link lists — in one
//! command, as `HSET` writes several plain fields.
//!
//! ```text
//! RECORD SET key field-spec [field-spec ...]
//!   field-spec = ATTR name value            a plain field (what HSET writes)
//!              | LINK name target           one link (what LINK SET writes)
//!              | LINKS name count t1 .. tn  a link list of `count` targets, in order
//!                                           (replaces the field; LINK ADD appends)
//!              | LINKSPACKED name blob      the same list in one argument: each target
//!                                           `| varint len | bytes |`, back to back
//!                                           (`record::Packed`; what `ringlet load` sends)
//!              | DEL name                   no field `name`: removed if present
//!   -> :n, how many of the fields are new (as HSET)
//! ```
//!
//! Fields not named keep their value; a named field that exists is replaced in its place
//! (whatever it held), a new one is appended, in the order given. A missing key is created;
//! a string key is WRONGTYPE. A record left without fields (its last ones removed by `DEL`)
//! is deleted, as HDEL deletes an emptied hash; `DEL`s alone on a missing key write nothing.
//! `DEL` is what lets `ringlet load` rewrite a list item over an earlier load in one write
//! (the item's old `next` link removed in the same command), where it sent a `DEL` or a
//! `LINK DEL` first. The node fills every new link's location hint, as `LINK`
//! does. Refused, with nothing written: an unknown spec word, a count that is not an
//! integer in `0..=LINKS_PER_FIELD_MAX` or runs past the arguments, a name given twice, a
//! name or target over its bound, a result over `VALUE_BYTES_MAX`.
//!
//! Why a command: `ringlet load` writes each list item once, with its list and its `next`
//! link, instead of a `LINK ADD` and a later `LINK SET` that rewrites the whole item
//! (docs/design/loader.md, "Each item written once").

use crate::hash::{arity_error, Applied, Out};
use crate::record::{Field, Link, Packed, PutValue, Record, RecordError};
use crate::{FIELD_NAME_BYTES_MAX, LINKS_PER_FIELD_MAX};
use ringlet_types::limits::KEY_BYTES_MAX;
use std::collections::BTreeSet;

/// Whether `lower_name` (lowercase) is the `record` command.
pub fn is_record_command(lower_name: &str) -> bool {
    lower_name == "record"
}

/// The key a RECORD command addresses (`argv[2]`), for routing and locking; None if absent.
pub fn key<'a>(argv: &[&'a [u8]]) -> Option<&'a [u8]> {
    argv.get(2).copied()
}

/// The field specs of `RECORD SET key spec ...` (`argv[0]` = "RECORD", `argv[1]` = "SET",
/// any case), or the error reply's text. Every bound is checked here, before anything is
/// read or allocated per field.
pub fn parse<'a>(argv: &'a [&'a [u8]]) -> Result<Vec<(&'a [u8], PutValue<'a>)>, String> {
    let Some(sub) = argv.get(1) else {
        return Err(arity_text());
    };
    if !sub.eq_ignore_ascii_case(b"set") {
        return Err(format!(
            "ERR unknown subcommand '{}'. Try RECORD HELP.",
            String::from_utf8_lossy(sub)
        ));
    }
    if argv.len() < 5 {
        return Err(arity_text());
    }
    // Each spec takes at least 2 arguments: the list is bounded by argv.
    let mut out = Vec::with_capacity((argv.len() - 3) / 2);
    let mut names = BTreeSet::new();
    let mut i = 3;
    while i < argv.len() {
        let word = argv[i];
        let Some(&name) = argv.get(i + 1) else {
            return Err("ERR syntax error".into());
        };
        if name.len() > FIELD_NAME_BYTES_MAX {
            return Err("ERR field name exceeds maximum key size".into());
        }
        let value = if word.eq_ignore_ascii_case(b"attr") {
            let Some(v) = argv.get(i + 2) else {
                return Err("ERR syntax error".into());
            };
            i += 3;
            PutValue::Bytes(v)
        } else if word.eq_ignore_ascii_case(b"link") {
            let Some(t) = argv.get(i + 2) else {
                return Err("ERR syntax error".into());
            };
            if t.len() > KEY_BYTES_MAX as usize {
                return Err("ERR link target exceeds maximum key size".into());
            }
            i += 3;
            PutValue::Link(t)
        } else if word.eq_ignore_ascii_case(b"links") {
            let n = argv
                .get(i + 2)
                .and_then(|c| crate::parse_i64(c))
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n <= LINKS_PER_FIELD_MAX)
                .ok_or_else(|| {
                    format!("ERR LINKS count must be an integer in 0..={LINKS_PER_FIELD_MAX}")
                })?;
            let Some(ts) = argv.get(i + 3..i + 3 + n) else {
                return Err("ERR syntax error (LINKS count runs past the arguments)".into());
            };
            if ts.iter().any(|t| t.len() > KEY_BYTES_MAX as usize) {
                return Err("ERR link target exceeds maximum key size".into());
            }
            i += 3 + n;
            PutValue::Links(ts)
        } else if word.eq_ignore_ascii_case(b"linkspacked") {
            let Some(blob) = argv.get(i + 2) else {
                return Err("ERR syntax error".into());
            };
            i += 3;
            PutValue::Packed(Packed::parse(blob).map_err(|e| match e {
                RecordError::TooLarge { what: "link list" } => {
                    format!("ERR LINKSPACKED holds more than {LINKS_PER_FIELD_MAX} targets")
                }
                RecordError::TooLarge { .. } => {
                    "ERR link target exceeds maximum key size".to_string()
                }
                e => format!("ERR LINKSPACKED list does not parse: {e}"),
            })?)
        } else if word.eq_ignore_ascii_case(b"del") {
            i += 2;
            PutValue::Del
        } else {
            return Err(format!(
                "ERR syntax error (expected ATTR, LINK, LINKS, LINKSPACKED or DEL, got '{}')",
                String::from_utf8_lossy(word)
            ));
        };
        if !names.insert(name) {
            return Err(format!(
                "ERR field '{}' named twice",
                String::from_utf8_lossy(name)
            ));
        }
        out.push((name, value));
    }
    Ok(out)
}

fn arity_text() -> String {
    "ERR wrong number of arguments for 'record|set' command".into()
}

/// `RECORD SET` on a decoded record (`rec`: the key's record, None if absent): the general
/// path, which the cluster front runs and the single node's encoded path
/// ([`crate::record::put_fields`]) must equal. Links are written without hints (the front
/// fills them). Never panics.
pub fn apply(argv: &[&[u8]], rec: Option<&Record>) -> Applied {
    if argv.len() < 2 {
        return arity_error("record");
    }
    let specs = match parse(argv) {
        Ok(s) => s,
        Err(e) => return Applied::err(e),
    };
    let mut r = rec.cloned().unwrap_or_default();
    let mut new = 0;
    for (name, v) in specs {
        let f = match v {
            PutValue::Bytes(b) => Field::Bytes(b.to_vec()),
            PutValue::Link(t) => Field::Link(Link::to(t)),
            PutValue::Links(ts) => Field::Links(ts.iter().map(|t| Link::to(*t)).collect()),
            PutValue::Packed(p) => Field::Links(p.iter().map(Link::to).collect()),
            PutValue::Del => {
                r.remove(name);
                continue;
            }
        };
        new += i64::from(r.insert(name.to_vec(), f));
    }
    if rec.is_none() && r.is_empty() {
        // Only `DEL`s on a missing key: nothing to store, nothing to delete.
        return Applied::read(Out::Int(0));
    }
    Applied::store(Out::Int(new), r)
}

/// The names of the fields holding links in a parsed `RECORD SET`, whose hints a front
/// fills.
pub fn link_fields<'a>(specs: &[(&'a [u8], PutValue<'a>)]) -> Vec<&'a [u8]> {
    specs
        .iter()
        .filter(|(_, v)| !matches!(v, PutValue::Bytes(_) | PutValue::Del))
        .map(|(n, _)| *n)
        .collect()
}
