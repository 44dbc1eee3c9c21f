//! Redis hash commands as pure functions over a key's current record.
//!
//! The caller looks the key up under its per-key lock, decodes the record (or passes `None`
//! when the key is absent), calls [`apply`], sends [`Applied::reply`] and carries out
//! [`Applied::write`]. A key holding a plain string is the caller's `WRONGTYPE` error, found
//! before `apply` is called.
//!
//! Semantics and error texts are Redis 7.0's (`t_hash.c`), with these additions:
//! - a link field reads as its display string ([`Field::display`]): HGET, HMGET, HGETALL,
//!   HVALS and HSTRLEN all see the target key, or the targets joined by single spaces;
//! - HSET, HSETNX (when it writes), HMSET, HINCRBY and HINCRBYFLOAT on a link field replace it
//!   with plain bytes (the increments parse the display string, so a link to key `"5"`
//!   incremented by 1 becomes the bytes `"6"`);
//! - a write whose result would break the record's bounds ([`Record::within_bounds`]: field
//!   name over [`crate::FIELD_NAME_BYTES_MAX`], encoding over `VALUE_BYTES_MAX`) replies
//!   `ERR record exceeds maximum allowed size` and writes nothing.
//!
//! HRANDFIELD and HSCAN are not here (HRANDFIELD needs the caller's seeded random source;
//! HSCAN a cursor over the record).

use crate::number::{add_and_format, parse_float, parse_i64};
use crate::record::{Field, Record};

/// A reply, in RESP2 terms. The front encodes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Out {
    /// `+OK`.
    Ok,
    /// `:n`.
    Int(i64),
    /// A bulk string, or the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// An array of bulk strings (null elements for HMGET's missing fields). HGETALL's is
    /// flat: field, value, field, value (a RESP3 front may send it as a map).
    Array(Vec<Option<Vec<u8>>>),
    /// An error: the text after the `-`, exactly as Redis 7 sends it.
    Err(String),
}

/// What the caller must do to the key after the command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Nothing: a read, an error, or a write that changed nothing.
    None,
    /// Store this record as the key's new value.
    Store(Record),
    /// Delete the key: its last field went away (Redis never keeps an empty hash).
    Delete,
}

/// A command's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// What to send the client.
    pub reply: Out,
    /// What to do to the key.
    pub write: Write,
}

impl Applied {
    pub(crate) fn read(reply: Out) -> Applied {
        Applied {
            reply,
            write: Write::None,
        }
    }

    pub(crate) fn err(text: impl Into<String>) -> Applied {
        Applied::read(Out::Err(text.into()))
    }

    /// A write of `rec` (or a delete if it is empty), refused if `rec` is out of bounds.
    pub(crate) fn store(reply: Out, rec: Record) -> Applied {
        if rec.is_empty() {
            return Applied {
                reply,
                write: Write::Delete,
            };
        }
        if !rec.within_bounds() {
            return Applied::err(ERR_TOO_LARGE);
        }
        Applied {
            reply,
            write: Write::Store(rec),
        }
    }
}

pub(crate) const ERR_TOO_LARGE: &str = "ERR record exceeds maximum allowed size";

/// The hash commands and their Redis arity (positive: exactly; negative: at least),
/// counting the command name.
const COMMANDS: &[(&str, i32, bool)] = &[
    // (name, arity, is_write)
    ("hset", -4, true),
    ("hsetnx", 4, true),
    ("hmset", -4, true),
    ("hget", 3, false),
    ("hmget", -3, false),
    ("hgetall", 2, false),
    ("hdel", -3, true),
    ("hlen", 2, false),
    ("hexists", 3, false),
    ("hkeys", 2, false),
    ("hvals", 2, false),
    ("hincrby", 4, true),
    ("hincrbyfloat", 4, true),
    ("hstrlen", 3, false),
];

fn lookup(lower_name: &str) -> Option<(i32, bool)> {
    COMMANDS
        .iter()
        .find(|(n, _, _)| *n == lower_name)
        .map(|&(_, a, w)| (a, w))
}

/// Whether `lower_name` (lowercase) is a hash command [`apply`] handles.
pub fn is_hash_command(lower_name: &str) -> bool {
    lookup(lower_name).is_some()
}

/// Whether the hash command `lower_name` may write (HSET, HSETNX, HMSET, HDEL, HINCRBY,
/// HINCRBYFLOAT). False for reads and for names that are not hash commands.
pub fn is_write(lower_name: &str) -> bool {
    lookup(lower_name).is_some_and(|(_, w)| w)
}

pub(crate) fn arity_error(name: &str) -> Applied {
    Applied::err(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

pub(crate) fn arity_ok(arity: i32, argc: usize) -> bool {
    let want = arity.unsigned_abs() as usize;
    if arity < 0 {
        argc >= want
    } else {
        argc == want
    }
}

/// Runs one hash command.
///
/// `argv[0]` is the command name in any case, `argv[1]` the key, the rest its arguments;
/// `rec` is the key's record, `None` if the key does not exist. Arity errors, argument
/// errors and value errors come back as [`Out::Err`] with [`Write::None`]. Never panics.
pub fn apply(argv: &[&[u8]], rec: Option<&Record>) -> Applied {
    let Some(name) = argv.first() else {
        return Applied::err("ERR empty command");
    };
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    let Some((arity, _)) = lookup(&lower) else {
        return Applied::err(format!(
            "ERR unknown command '{}', with args beginning with: ",
            String::from_utf8_lossy(name)
        ));
    };
    if !arity_ok(arity, argv.len()) {
        return arity_error(&lower);
    }
    // Arity checked: argv[1] (key) and the fixed arguments exist.
    let args = &argv[2..];
    let empty = Record::new();
    let cur = rec.unwrap_or(&empty);
    match lower.as_str() {
        "hset" | "hmset" => {
            if args.len() % 2 != 0 {
                return arity_error(&lower);
            }
            let mut r = cur.clone();
            let mut added = 0i64;
            for pair in args.chunks_exact(2) {
                if r.insert(pair[0].to_vec(), Field::Bytes(pair[1].to_vec())) {
                    added += 1;
                }
            }
            let reply = if lower == "hset" {
                Out::Int(added)
            } else {
                Out::Ok
            };
            Applied::store(reply, r)
        }
        "hsetnx" => {
            if cur.get(args[0]).is_some() {
                return Applied::read(Out::Int(0));
            }
            let mut r = cur.clone();
            r.insert(args[0].to_vec(), Field::Bytes(args[1].to_vec()));
            Applied::store(Out::Int(1), r)
        }
        "hget" => Applied::read(Out::Bulk(cur.get(args[0]).map(Field::display))),
        "hmget" => Applied::read(Out::Array(
            args.iter()
                .map(|f| cur.get(f).map(Field::display))
                .collect(),
        )),
        "hgetall" => Applied::read(Out::Array(
            cur.iter()
                .flat_map(|(n, f)| [Some(n.to_vec()), Some(f.display())])
                .collect(),
        )),
        "hkeys" => Applied::read(Out::Array(
            cur.iter().map(|(n, _)| Some(n.to_vec())).collect(),
        )),
        "hvals" => Applied::read(Out::Array(
            cur.iter().map(|(_, f)| Some(f.display())).collect(),
        )),
        "hlen" => Applied::read(Out::Int(cur.len() as i64)),
        "hexists" => Applied::read(Out::Int(i64::from(cur.get(args[0]).is_some()))),
        "hstrlen" => Applied::read(Out::Int(
            cur.get(args[0]).map_or(0, |f| f.display_len() as i64),
        )),
        "hdel" => {
            let mut r = cur.clone();
            let n = r.remove_all(args);
            if n == 0 {
                return Applied::read(Out::Int(0));
            }
            Applied::store(Out::Int(n as i64), r)
        }
        "hincrby" => {
            let Some(incr) = parse_i64(args[1]) else {
                return Applied::err("ERR value is not an integer or out of range");
            };
            let old = match cur.get(args[0]) {
                None => 0,
                Some(f) => match parse_i64(&f.display()) {
                    Some(v) => v,
                    None => return Applied::err("ERR hash value is not an integer"),
                },
            };
            let Some(new) = old.checked_add(incr) else {
                return Applied::err("ERR increment or decrement would overflow");
            };
            let mut r = cur.clone();
            r.insert(args[0].to_vec(), Field::Bytes(new.to_string().into_bytes()));
            Applied::store(Out::Int(new), r)
        }
        "hincrbyfloat" => {
            let Some(incr) = parse_float(args[1]) else {
                return Applied::err("ERR value is not a valid float");
            };
            if !incr.is_finite() {
                return Applied::err("ERR value is NaN or Infinity");
            }
            let old = match cur.get(args[0]) {
                None => crate::number::Num::Dec { mant: 0, exp: 0 },
                Some(f) => match parse_float(&f.display()) {
                    Some(v) => v,
                    None => return Applied::err("ERR hash value is not a float"),
                },
            };
            let Some(new) = add_and_format(old, incr) else {
                return Applied::err("ERR increment would produce NaN or Infinity");
            };
            let mut r = cur.clone();
            r.insert(args[0].to_vec(), Field::Bytes(new.clone()));
            Applied::store(Out::Bulk(Some(new)), r)
        }
        _ => unreachable!("every name in COMMANDS has an arm"),
    }
}

/// What [`apply_encoded`] asks the caller to do to the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodedWrite {
    /// Nothing (a refusal, or a write that changed nothing).
    None,
    /// Store these bytes (a record's encoding) as the key's new value.
    Store(Vec<u8>),
    /// Delete the key: its last field went away.
    Delete,
}

/// [`apply_encoded`]'s outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedEncoded {
    /// What to send the client.
    pub reply: Out,
    /// What to do to the key.
    pub write: EncodedWrite,
}

/// A hash write that names its fields (HSET, HMSET, HSETNX, HDEL, HINCRBY, HINCRBYFLOAT) run
/// on the record's encoding `b` (`None`: the key is missing), with `apply`'s semantics
/// exactly ([`apply`], or a caller's wrapper of it).
///
/// Why: a write to a hash of n fields decoded all n (one allocation or more per field)
/// and encoded them again; on a big hash (redis-benchmark's `hset -r`, or any hash grown
/// one field at a time) that is milliseconds per command, so growing it was quadratic with
/// a large constant. Here the record is walked once ([`crate::record::locate_fields`]),
/// only the named fields are decoded into a small record that `apply` runs on, and the
/// result is written by [`crate::record::put_fields_located`] from what that walk found:
/// the other fields are copied as byte runs. A write stays O(record bytes), a copy
/// (docs/design/records.md, "Big hashes").
///
/// `None` when this path does not take the command (not one of these, an arity error, an
/// encoding that does not scan, or a result only the general path writes): the caller
/// then decodes the record and runs `apply`, which gives the same answer.
pub fn apply_encoded(
    argv: &[&[u8]],
    b: Option<&[u8]>,
    apply: impl Fn(&[&[u8]], Option<&Record>) -> Applied,
) -> Option<AppliedEncoded> {
    use crate::record::{find_name, locate_fields, name_order, put_fields_located, PutValue};
    let lower = String::from_utf8_lossy(argv.first()?).to_ascii_lowercase();
    let args = argv.get(2..)?;
    let names: Vec<&[u8]> = match (lower.as_str(), args.len()) {
        ("hset" | "hmset", n) if n >= 2 && n % 2 == 0 => args.iter().step_by(2).copied().collect(),
        ("hsetnx" | "hincrby" | "hincrbyfloat", 2) => vec![args[0]],
        ("hdel", n) if n >= 1 => args.to_vec(),
        _ => return None,
    };
    // The distinct names, sorted: looked up (`find_name`) for every field the walk meets.
    let mut sorted = names.clone();
    sorted.sort_unstable_by(|a, b| name_order(a, b));
    sorted.dedup();
    let at = |name: &[u8]| find_name(&sorted, |s| s, name);
    // The named fields that exist (one walk, kept for the write), as a small record
    // `apply` can run on.
    let located = match b {
        None => None,
        Some(b) => Some(locate_fields(b, |name| at(name).is_some()).ok()?),
    };
    let mini = located.as_ref().map(|l| {
        let mut r = Record::new();
        for (_, name, f) in &l.found {
            r.insert(name.to_vec(), f.to_field());
        }
        r
    });
    let applied = apply(argv, mini.as_ref());
    let after = match applied.write {
        Write::None => {
            return Some(AppliedEncoded {
                reply: applied.reply,
                write: EncodedWrite::None,
            })
        }
        Write::Store(r) => r,
        // The small record emptied, not necessarily the key's: the `DEL`s below decide.
        Write::Delete => Record::new(),
    };
    // Each distinct name once, in the order first given (new fields are appended in that
    // order, as `apply` inserts them), with its value after the command or a `DEL`.
    let mut specs: Vec<(&[u8], PutValue<'_>)> = Vec::with_capacity(sorted.len());
    let mut done = vec![false; sorted.len()];
    for name in &names {
        let i = at(name)?;
        if std::mem::replace(&mut done[i], true) {
            continue;
        }
        let had = mini.as_ref().is_some_and(|m| m.get(name).is_some());
        match after.get(name) {
            Some(Field::Bytes(v)) => specs.push((name, PutValue::Bytes(v))),
            // These commands write plain bytes only; anything else is the general path's.
            Some(_) => return None,
            None if had => specs.push((name, PutValue::Del)),
            None => {}
        }
    }
    let write = match put_fields_located(b, &specs, |_| None, located.as_ref()) {
        Ok((_, bytes)) if crate::record::is_empty_encoding(&bytes) => {
            if b.is_some() {
                EncodedWrite::Delete
            } else {
                EncodedWrite::None
            }
        }
        Ok((_, bytes)) => EncodedWrite::Store(bytes),
        Err(crate::RecordError::TooLarge { .. }) => {
            return Some(AppliedEncoded {
                reply: Out::Err(ERR_TOO_LARGE.into()),
                write: EncodedWrite::None,
            })
        }
        Err(_) => return None,
    };
    Some(AppliedEncoded {
        reply: applied.reply,
        write,
    })
}

#[cfg(test)]
mod tests {
    //! One test per command: its replies, its errors and the write it asks for.
    use super::*;
    use crate::record::Link;

    fn run(cmd: &str, rec: Option<&Record>) -> Applied {
        let argv: Vec<&[u8]> = cmd.split(' ').map(str::as_bytes).collect();
        apply(&argv, rec)
    }

    fn bulk(s: &str) -> Option<Vec<u8>> {
        Some(s.as_bytes().to_vec())
    }

    fn stored(a: &Applied) -> &Record {
        match &a.write {
            Write::Store(r) => r,
            w => panic!("expected a store, got {w:?}"),
        }
    }

    fn rec(pairs: &[(&str, &str)]) -> Record {
        let mut r = Record::new();
        for (f, v) in pairs {
            r.insert(f.as_bytes().to_vec(), Field::Bytes(v.as_bytes().to_vec()));
        }
        r
    }

    /// A record with a plain field, a link and a link list.
    fn linked() -> Record {
        let mut r = rec(&[("name", "ann")]);
        r.insert(b"boss".to_vec(), Field::Link(Link::to("5")));
        r.insert(
            b"friends".to_vec(),
            Field::Links(vec![Link::to("u:1"), Link::to("u:2")]),
        );
        r
    }

    fn err(a: &Applied) -> &str {
        match &a.reply {
            Out::Err(e) => {
                assert_eq!(a.write, Write::None);
                e
            }
            o => panic!("expected an error, got {o:?}"),
        }
    }

    #[test]
    fn names_and_write_flags() {
        assert!(is_hash_command("hincrbyfloat"));
        assert!(!is_hash_command("HSET"));
        assert!(!is_hash_command("get"));
        assert!(is_write("hdel") && is_write("hsetnx") && !is_write("hget"));
        assert!(!is_write("set"));
        assert_eq!(
            err(&run("hfoo k", None)),
            "ERR unknown command 'hfoo', with args beginning with: "
        );
        assert_eq!(err(&apply(&[], None)), "ERR empty command");
    }

    #[test]
    fn hset() {
        let a = run("HSET k f1 v1 f2 v2", None);
        assert_eq!(a.reply, Out::Int(2));
        let r = stored(&a).clone();
        assert_eq!(r, rec(&[("f1", "v1"), ("f2", "v2")]));
        let a = run("hset k f2 x f3 y f3 z", Some(&r));
        assert_eq!(a.reply, Out::Int(1));
        assert_eq!(stored(&a), &rec(&[("f1", "v1"), ("f2", "x"), ("f3", "z")]));
        assert_eq!(
            err(&run("hset k f1", None)),
            "ERR wrong number of arguments for 'hset' command"
        );
        assert_eq!(
            err(&run("hset k f1 v1 f2", None)),
            "ERR wrong number of arguments for 'hset' command"
        );
        // Empty field names and values are allowed.
        let a = apply(&[b"hset", b"k", b"", b""], None);
        assert_eq!(a.reply, Out::Int(1));
        assert_eq!(stored(&a).get(b""), Some(&Field::Bytes(vec![])));
        // A link field becomes plain bytes.
        let a = run("hset k boss bob", Some(&linked()));
        assert_eq!(a.reply, Out::Int(0));
        assert_eq!(
            stored(&a).get(b"boss"),
            Some(&Field::Bytes(b"bob".to_vec()))
        );
    }

    #[test]
    fn hset_bounds() {
        let long = vec![b'x'; crate::FIELD_NAME_BYTES_MAX + 1];
        let a = apply(&[b"hset", b"k", &long, b"v"], None);
        assert_eq!(err(&a), ERR_TOO_LARGE);
    }

    #[test]
    fn hsetnx() {
        let r = rec(&[("f", "v")]);
        let a = run("hsetnx k f w", Some(&r));
        assert_eq!(a, Applied::read(Out::Int(0)));
        let a = run("hsetnx k g w", Some(&r));
        assert_eq!(a.reply, Out::Int(1));
        assert_eq!(stored(&a), &rec(&[("f", "v"), ("g", "w")]));
        assert_eq!(run("hsetnx k g w", None).reply, Out::Int(1));
        assert_eq!(
            err(&run("hsetnx k g", None)),
            "ERR wrong number of arguments for 'hsetnx' command"
        );
        assert_eq!(
            err(&run("hsetnx k g w x", None)),
            "ERR wrong number of arguments for 'hsetnx' command"
        );
    }

    #[test]
    fn hmset() {
        let a = run("HMSET k a 1 b 2", None);
        assert_eq!(a.reply, Out::Ok);
        assert_eq!(stored(&a), &rec(&[("a", "1"), ("b", "2")]));
        assert_eq!(
            err(&run("hmset k a 1 b", None)),
            "ERR wrong number of arguments for 'hmset' command"
        );
        assert_eq!(
            err(&run("hmset k a", None)),
            "ERR wrong number of arguments for 'hmset' command"
        );
    }

    #[test]
    fn hget_and_links_display() {
        let r = linked();
        assert_eq!(
            run("hget k name", Some(&r)),
            Applied::read(Out::Bulk(bulk("ann")))
        );
        assert_eq!(run("hget k boss", Some(&r)).reply, Out::Bulk(bulk("5")));
        assert_eq!(
            run("hget k friends", Some(&r)).reply,
            Out::Bulk(bulk("u:1 u:2"))
        );
        assert_eq!(run("hget k nope", Some(&r)).reply, Out::Bulk(None));
        assert_eq!(run("hget k nope", None).reply, Out::Bulk(None));
        assert_eq!(
            err(&run("hget k", None)),
            "ERR wrong number of arguments for 'hget' command"
        );
    }

    #[test]
    fn hmget() {
        let r = linked();
        assert_eq!(
            run("hmget k name x friends", Some(&r)),
            Applied::read(Out::Array(vec![bulk("ann"), None, bulk("u:1 u:2")]))
        );
        assert_eq!(run("hmget k a b", None).reply, Out::Array(vec![None, None]));
        assert_eq!(
            err(&run("hmget k", None)),
            "ERR wrong number of arguments for 'hmget' command"
        );
    }

    #[test]
    fn hgetall_hkeys_hvals_in_insertion_order() {
        let r = linked();
        assert_eq!(
            run("hgetall k", Some(&r)),
            Applied::read(Out::Array(vec![
                bulk("name"),
                bulk("ann"),
                bulk("boss"),
                bulk("5"),
                bulk("friends"),
                bulk("u:1 u:2")
            ]))
        );
        assert_eq!(
            run("hkeys k", Some(&r)).reply,
            Out::Array(vec![bulk("name"), bulk("boss"), bulk("friends")])
        );
        assert_eq!(
            run("hvals k", Some(&r)).reply,
            Out::Array(vec![bulk("ann"), bulk("5"), bulk("u:1 u:2")])
        );
        for c in ["hgetall", "hkeys", "hvals"] {
            assert_eq!(run(&format!("{c} k"), None).reply, Out::Array(vec![]));
            assert_eq!(
                err(&run(&format!("{c} k x"), None)),
                format!("ERR wrong number of arguments for '{c}' command")
            );
        }
    }

    #[test]
    fn hdel() {
        let r = rec(&[("a", "1"), ("b", "2"), ("c", "3")]);
        let a = run("hdel k a a x c", Some(&r));
        assert_eq!(a.reply, Out::Int(2));
        assert_eq!(stored(&a), &rec(&[("b", "2")]));
        assert_eq!(run("hdel k x", Some(&r)), Applied::read(Out::Int(0)));
        assert_eq!(run("hdel k x", None), Applied::read(Out::Int(0)));
        let a = run("hdel k a b c", Some(&r));
        assert_eq!(
            a,
            Applied {
                reply: Out::Int(3),
                write: Write::Delete
            }
        );
        assert_eq!(
            err(&run("hdel k", None)),
            "ERR wrong number of arguments for 'hdel' command"
        );
    }

    #[test]
    fn hlen_hexists_hstrlen() {
        let r = linked();
        assert_eq!(run("hlen k", Some(&r)), Applied::read(Out::Int(3)));
        assert_eq!(run("hlen k", None).reply, Out::Int(0));
        assert_eq!(run("hexists k boss", Some(&r)).reply, Out::Int(1));
        assert_eq!(run("hexists k x", Some(&r)).reply, Out::Int(0));
        assert_eq!(run("hexists k x", None).reply, Out::Int(0));
        assert_eq!(run("hstrlen k name", Some(&r)).reply, Out::Int(3));
        assert_eq!(run("hstrlen k friends", Some(&r)).reply, Out::Int(7));
        assert_eq!(run("hstrlen k x", Some(&r)).reply, Out::Int(0));
        assert_eq!(run("hstrlen k x", None).reply, Out::Int(0));
        for (c, a) in [
            ("hlen k x", "hlen"),
            ("hexists k", "hexists"),
            ("hstrlen k", "hstrlen"),
        ] {
            assert_eq!(
                err(&run(c, None)),
                format!("ERR wrong number of arguments for '{a}' command")
            );
        }
    }

    #[test]
    fn hincrby() {
        let a = run("hincrby k n 5", None);
        assert_eq!(a.reply, Out::Int(5));
        assert_eq!(stored(&a), &rec(&[("n", "5")]));
        let r = rec(&[("n", "-3"), ("s", "abc"), ("max", "9223372036854775807")]);
        let a = run("hincrby k n -10", Some(&r));
        assert_eq!(a.reply, Out::Int(-13));
        assert_eq!(stored(&a).get(b"n"), Some(&Field::Bytes(b"-13".to_vec())));
        assert_eq!(
            err(&run("hincrby k s 1", Some(&r))),
            "ERR hash value is not an integer"
        );
        assert_eq!(
            err(&run("hincrby k n x", Some(&r))),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            err(&run("hincrby k n 9223372036854775808", Some(&r))),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            err(&run("hincrby k max 1", Some(&r))),
            "ERR increment or decrement would overflow"
        );
        let m = rec(&[("min", "-9223372036854775808")]);
        assert_eq!(
            err(&run("hincrby k min -1", Some(&m))),
            "ERR increment or decrement would overflow"
        );
        assert_eq!(
            err(&run("hincrby k n", None)),
            "ERR wrong number of arguments for 'hincrby' command"
        );
        // A link to key "5" reads as "5" and becomes plain bytes.
        let a = run("hincrby k boss 1", Some(&linked()));
        assert_eq!(a.reply, Out::Int(6));
        assert_eq!(stored(&a).get(b"boss"), Some(&Field::Bytes(b"6".to_vec())));
        assert_eq!(
            err(&run("hincrby k friends 1", Some(&linked()))),
            "ERR hash value is not an integer"
        );
    }

    #[test]
    fn hincrbyfloat() {
        let r = rec(&[("f", "10.50"), ("s", "abc"), ("e", "5.0e3"), ("i", "3")]);
        let a = run("hincrbyfloat k f 0.1", Some(&r));
        assert_eq!(a.reply, Out::Bulk(bulk("10.6")));
        assert_eq!(stored(&a).get(b"f"), Some(&Field::Bytes(b"10.6".to_vec())));
        assert_eq!(
            run("hincrbyfloat k e 2.0e2", Some(&r)).reply,
            Out::Bulk(bulk("5200"))
        );
        assert_eq!(
            run("hincrbyfloat k i 1.5", Some(&r)).reply,
            Out::Bulk(bulk("4.5"))
        );
        assert_eq!(
            run("hincrbyfloat k new -1.25", None).reply,
            Out::Bulk(bulk("-1.25"))
        );
        assert_eq!(
            err(&run("hincrbyfloat k s 1", Some(&r))),
            "ERR hash value is not a float"
        );
        assert_eq!(
            err(&run("hincrbyfloat k f x", Some(&r))),
            "ERR value is not a valid float"
        );
        assert_eq!(
            err(&run("hincrbyfloat k f nan", Some(&r))),
            "ERR value is not a valid float"
        );
        assert_eq!(
            err(&run("hincrbyfloat k f inf", Some(&r))),
            "ERR value is NaN or Infinity"
        );
        let big = rec(&[("b", "1.7e308")]);
        assert_eq!(
            err(&run("hincrbyfloat k b 1.7e308", Some(&big))),
            "ERR increment would produce NaN or Infinity"
        );
        let inf = rec(&[("b", "inf")]);
        assert_eq!(
            err(&run("hincrbyfloat k b 1", Some(&inf))),
            "ERR increment would produce NaN or Infinity"
        );
        assert_eq!(
            err(&run("hincrbyfloat k f", None)),
            "ERR wrong number of arguments for 'hincrbyfloat' command"
        );
        let a = run("hincrbyfloat k boss 0.5", Some(&linked()));
        assert_eq!(a.reply, Out::Bulk(bulk("5.5")));
        assert_eq!(
            stored(&a).get(b"boss"),
            Some(&Field::Bytes(b"5.5".to_vec()))
        );
    }
}
