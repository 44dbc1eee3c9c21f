//! The `LINK` command: create, extend, read and delete link fields.
//!
//! ```text
//! LINK SET key field target            one link; replaces the field whatever it held
//!                                       -> :1 if the field is new, :0 if replaced
//! LINK ADD key field target [target ..] append to the field's link list, creating it; a
//!                                       single link becomes a list [old, new..]
//!                                       -> :n, the list's new length
//! LINK GET key field                    -> array of the targets in order; empty array if
//!                                          the key or field is missing
//! LINK DEL key field                    -> :1 if removed, :0 if missing (the key goes
//!                                          when its last field does, as with HDEL)
//! ```
//!
//! LINK ADD, GET and DEL on a field holding plain bytes reply `ERR field is not a link` and
//! change nothing: ADD would have to invent a link from arbitrary bytes, and DEL refuses so a
//! mistyped field name cannot delete data through the link verb (HDEL deletes any field).
//! Links made here carry no hint; whoever resolves locations fills them in. Duplicate
//! targets in a list are kept (a list is a sequence, like KELI's follower lists).

use crate::hash::{arity_error, Applied, Out};
use crate::record::{splice_links, Field, Hint, Link, Record, Splice};
use crate::LINKS_PER_FIELD_MAX;
use ringlet_types::limits::KEY_BYTES_MAX;
use std::borrow::Cow;

const ERR_NOT_LINK: &str = "ERR field is not a link";

/// Whether `lower_name` (lowercase) is the `link` command.
pub fn is_link_command(lower_name: &str) -> bool {
    lower_name == "link"
}

/// Whether the LINK subcommand `lower_sub` (lowercase) may write: `set`, `add`, `del`.
pub fn is_write_subcommand(lower_sub: &str) -> bool {
    matches!(lower_sub, "set" | "add" | "del")
}

/// The key a LINK command addresses (`argv[2]`), for routing and locking; None if absent.
pub fn key<'a>(argv: &[&'a [u8]]) -> Option<&'a [u8]> {
    argv.get(2).copied()
}

/// Runs one LINK command: `argv[0]` = "LINK" (any case), `argv[1]` the subcommand (any case),
/// `argv[2]` the key, then its arguments; `rec` the key's record (None: key absent).
/// Errors come back as [`Out::Err`] with no write. Never panics.
pub fn apply(argv: &[&[u8]], rec: Option<&Record>) -> Applied {
    apply_cow(
        argv,
        rec.map_or_else(|| Cow::Owned(Record::new()), Cow::Borrowed),
    )
}

/// [`apply`] on a record the caller owns and will not use again (the single node decodes
/// the key's record for each command): a write edits it in place instead of cloning it,
/// and LINK ADD appends to its list instead of copying the list first (a LINK on a record
/// holding a 100-link chunk cloned every link twice; the malloc/free family was ~19 % of a
/// chunked load's node time). Same replies and writes as [`apply`].
pub fn apply_owned(argv: &[&[u8]], rec: Option<Record>) -> Applied {
    apply_cow(argv, Cow::Owned(rec.unwrap_or_default()))
}

/// `LINK SET|ADD` on the key's encoded record (`None`: the key is missing) without decoding
/// it ([`crate::record::splice_links`]): the reply and the new encoding, each new link with
/// the hint `hint` finds for its target. `None`: not a LINK SET/ADD this path takes (see
/// `splice_links`); the caller decodes and runs [`apply_owned`], which gives the same result
/// or the error.
pub fn apply_encoded(
    argv: &[&[u8]],
    encoded: Option<&[u8]>,
    hint: impl FnMut(&[u8]) -> Option<Hint>,
) -> Option<(Out, Vec<u8>)> {
    let sub = argv.get(1)?;
    let op = if sub.eq_ignore_ascii_case(b"add") && argv.len() >= 5 {
        Splice::Add
    } else if sub.eq_ignore_ascii_case(b"set") && argv.len() == 5 {
        Splice::Set
    } else {
        return None;
    };
    let (n, bytes) = splice_links(encoded, argv[3], op, &argv[4..], hint)?;
    Some((Out::Int(n), bytes))
}

fn apply_cow(argv: &[&[u8]], cur: Cow<'_, Record>) -> Applied {
    let Some(sub) = argv.get(1) else {
        return arity_error("link");
    };
    let sub = String::from_utf8_lossy(sub).to_ascii_lowercase();
    let (min, exact) = match sub.as_str() {
        "set" => (5, true),
        "add" => (5, false),
        "get" | "del" => (4, true),
        _ => {
            return Applied::err(format!(
                "ERR unknown subcommand '{}'. Try LINK HELP.",
                String::from_utf8_lossy(argv[1])
            ))
        }
    };
    if argv.len() < min || (exact && argv.len() != min) {
        return arity_error(&format!("link|{sub}"));
    }
    let field = argv[3];
    let targets = &argv[4..];
    if targets.iter().any(|t| t.len() > KEY_BYTES_MAX as usize) {
        return Applied::err("ERR link target exceeds maximum key size");
    }
    match sub.as_str() {
        "set" => {
            let mut r = cur.into_owned();
            let new = r.insert(field.to_vec(), Field::Link(Link::to(targets[0])));
            Applied::store(Out::Int(i64::from(new)), r)
        }
        "add" => {
            let had = match cur.get(field) {
                None => 0,
                Some(Field::Bytes(_)) => return Applied::err(ERR_NOT_LINK),
                Some(Field::Link(_)) => 1,
                Some(Field::Links(ls)) => ls.len(),
            };
            if had.saturating_add(targets.len()) > LINKS_PER_FIELD_MAX {
                return Applied::err(format!(
                    "ERR link list would exceed {LINKS_PER_FIELD_MAX} links"
                ));
            }
            let new = targets.iter().map(|t| Link::to(*t));
            let mut r = cur.into_owned();
            match r.get_mut(field) {
                Some(Field::Links(ls)) => ls.extend(new),
                Some(f) => {
                    // A single link becomes a list [old, new..].
                    let Field::Link(old) = std::mem::replace(f, Field::Links(Vec::new())) else {
                        unreachable!("bytes refused above");
                    };
                    *f = Field::Links(std::iter::once(old).chain(new).collect());
                }
                None => {
                    r.insert(field.to_vec(), Field::Links(new.collect()));
                }
            }
            Applied::store(Out::Int((had + targets.len()) as i64), r)
        }
        "get" => match cur.get(field) {
            None => Applied::read(Out::Array(vec![])),
            Some(Field::Bytes(_)) => Applied::err(ERR_NOT_LINK),
            Some(f) => Applied::read(Out::Array(f.targets().map(|t| Some(t.to_vec())).collect())),
        },
        "del" => match cur.get(field) {
            None => Applied::read(Out::Int(0)),
            Some(Field::Bytes(_)) => Applied::err(ERR_NOT_LINK),
            Some(_) => {
                let mut r = cur.into_owned();
                r.remove(field);
                Applied::store(Out::Int(1), r)
            }
        },
        _ => unreachable!("subcommand matched above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::Write;

    fn run(cmd: &str, rec: Option<&Record>) -> Applied {
        let argv: Vec<&[u8]> = cmd.split(' ').map(str::as_bytes).collect();
        apply(&argv, rec)
    }

    fn stored(a: &Applied) -> Record {
        match &a.write {
            Write::Store(r) => r.clone(),
            w => panic!("expected a store, got {w:?}"),
        }
    }

    fn arr(xs: &[&str]) -> Out {
        Out::Array(xs.iter().map(|x| Some(x.as_bytes().to_vec())).collect())
    }

    /// `apply_owned` answers and writes exactly as `apply` along a script of every
    /// subcommand, error and shape change (single link to list, list growth, deletes).
    #[test]
    fn apply_owned_matches_apply() {
        let script = [
            "LINK ADD k f a b",
            "LINK SET k g x",
            "LINK ADD k g y z",
            "LINK ADD k f c",
            "LINK GET k f",
            "LINK SET k f q",
            "LINK ADD k f r",
            "LINK DEL k g",
            "LINK DEL k g",
            "LINK ADD k",
            "LINK NOPE k f",
            "LINK DEL k f",
        ];
        let mut a_rec: Option<Record> = None;
        let mut b_rec: Option<Record> = None;
        for cmd in script {
            let argv: Vec<&[u8]> = cmd.split(' ').map(str::as_bytes).collect();
            let a = apply(&argv, a_rec.as_ref());
            let b = apply_owned(&argv, b_rec.clone());
            assert_eq!(a.reply, b.reply, "{cmd}");
            match (&a.write, &b.write) {
                (Write::Store(x), Write::Store(y)) => {
                    assert_eq!(x.encode(), y.encode(), "{cmd}");
                    a_rec = Some(x.clone());
                    b_rec = Some(y.clone());
                }
                (Write::None, Write::None) => {}
                (Write::Delete, Write::Delete) => {
                    a_rec = None;
                    b_rec = None;
                }
                (x, y) => panic!("{cmd}: {x:?} vs {y:?}"),
            }
        }
        // A single link that a 4,096-link ADD would overflow is refused alike.
        let mut one = Record::new();
        one.insert(b"f".to_vec(), Field::Link(Link::to("a")));
        let many: Vec<String> = (0..LINKS_PER_FIELD_MAX).map(|i| format!("t{i}")).collect();
        let mut argv: Vec<&[u8]> = vec![b"LINK", b"ADD", b"k", b"f"];
        argv.extend(many.iter().map(|t| t.as_bytes()));
        assert_eq!(
            apply(&argv, Some(&one)).reply,
            apply_owned(&argv, Some(one.clone())).reply
        );
    }

    #[test]
    fn set_get_replace() {
        let a = run("LINK SET k boss u:2", None);
        assert_eq!(a.reply, Out::Int(1));
        let r = stored(&a);
        assert_eq!(r.get(b"boss"), Some(&Field::Link(Link::to("u:2"))));
        let a = run("link set k boss u:3", Some(&r));
        assert_eq!(a.reply, Out::Int(0));
        let r = stored(&a);
        assert_eq!(
            run("link get k boss", Some(&r)),
            Applied::read(arr(&["u:3"]))
        );
        // SET replaces plain bytes too.
        let mut p = Record::new();
        p.insert(b"f".to_vec(), Field::Bytes(b"x".to_vec()));
        assert_eq!(run("link set k f t", Some(&p)).reply, Out::Int(0));
    }

    #[test]
    fn add_creates_extends_and_converts_a_single_link() {
        let a = run("link add k fs a b", None);
        assert_eq!(a.reply, Out::Int(2));
        let r = stored(&a);
        let a = run("link add k fs c", Some(&r));
        assert_eq!(a.reply, Out::Int(3));
        assert_eq!(
            run("link get k fs", Some(&stored(&a))).reply,
            arr(&["a", "b", "c"])
        );
        let one = stored(&run("link set k f x", None));
        let a = run("link add k f y", Some(&one));
        assert_eq!(a.reply, Out::Int(2));
        assert_eq!(
            stored(&a).get(b"f"),
            Some(&Field::Links(vec![Link::to("x"), Link::to("y")]))
        );
    }

    #[test]
    fn add_bound() {
        let targets: Vec<Vec<u8>> = (0..LINKS_PER_FIELD_MAX)
            .map(|i| i.to_string().into_bytes())
            .collect();
        let mut argv: Vec<&[u8]> = vec![b"link", b"add", b"k", b"f"];
        argv.extend(targets.iter().map(Vec::as_slice));
        let a = apply(&argv, None);
        assert_eq!(a.reply, Out::Int(LINKS_PER_FIELD_MAX as i64));
        let r = stored(&a);
        let a = run("link add k f one-too-many", Some(&r));
        assert_eq!(
            a,
            Applied::err(format!(
                "ERR link list would exceed {LINKS_PER_FIELD_MAX} links"
            ))
        );
    }

    #[test]
    fn not_a_link() {
        let mut p = Record::new();
        p.insert(b"f".to_vec(), Field::Bytes(b"x".to_vec()));
        for c in ["link add k f t", "link get k f", "link del k f"] {
            assert_eq!(run(c, Some(&p)), Applied::err(ERR_NOT_LINK), "{c}");
        }
    }

    #[test]
    fn get_missing_is_empty() {
        assert_eq!(run("link get k f", None), Applied::read(Out::Array(vec![])));
        let r = stored(&run("link set k g t", None));
        assert_eq!(run("link get k f", Some(&r)).reply, Out::Array(vec![]));
    }

    #[test]
    fn del() {
        let r = stored(&run("link add k f a b", None));
        let r = stored(&run("link set k g c", Some(&r)));
        assert_eq!(run("link del k x", Some(&r)), Applied::read(Out::Int(0)));
        assert_eq!(run("link del k x", None), Applied::read(Out::Int(0)));
        let a = run("link del k f", Some(&r));
        assert_eq!(a.reply, Out::Int(1));
        let r = stored(&a);
        assert_eq!(
            run("link del k g", Some(&r)),
            Applied {
                reply: Out::Int(1),
                write: Write::Delete
            }
        );
    }

    #[test]
    fn arity_and_names() {
        assert!(is_link_command("link") && !is_link_command("LINK"));
        assert!(is_write_subcommand("add") && !is_write_subcommand("get"));
        assert_eq!(key(&[b"link", b"get", b"k", b"f"]), Some(&b"k"[..]));
        assert_eq!(
            run("link", None),
            Applied::err("ERR wrong number of arguments for 'link' command")
        );
        assert_eq!(
            run("link frob k", None),
            Applied::err("ERR unknown subcommand 'frob'. Try LINK HELP.")
        );
        for (c, s) in [
            ("link set k f", "set"),
            ("link set k f a b", "set"),
            ("link add k f", "add"),
            ("link get k", "get"),
            ("link get k f x", "get"),
            ("link del k", "del"),
        ] {
            assert_eq!(
                run(c, None),
                Applied::err(format!(
                    "ERR wrong number of arguments for 'link|{s}' command"
                )),
                "{c}"
            );
        }
    }
}
