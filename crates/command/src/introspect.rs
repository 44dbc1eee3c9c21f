//! COMMAND, COMMAND COUNT / INFO / DOCS / GETKEYS / LIST / HELP, answered from the table for
//! the mode a front serves: one implementation for every front, so `redis-cli`, redis-py's
//! `RedisCluster` (which routes by the key positions it reads here) and Redis's test suite
//! see the same answers from a single node and a cluster node.

use crate::glob::string_match;
use crate::reply::{errors, Reply};
use crate::table::{find, lookup, table, Mode, Spec};
use bytes::Bytes;

/// Answer a COMMAND request (`argv[0]` is COMMAND). The arity of subcommands was checked by
/// the caller through [`crate::table::Spec::check`].
pub fn command(argv: &[&[u8]], mode: Mode) -> Reply {
    let t = table();
    let served = |i: &&usize| t.spec(**i).served_in(mode);
    let Some(sub) = argv.get(1) else {
        return Reply::Array(
            t.top
                .iter()
                .filter(&served)
                .map(|&i| t.spec(i).info.clone())
                .collect(),
        );
    };
    let sub = sub.to_ascii_lowercase();
    let name_reply = |s: &Spec| Reply::Bulk(Bytes::from_static(s.name.as_bytes()));
    let known = |n: &[u8]| find(n).filter(|i| t.spec(*i).served_in(mode));
    match sub.as_slice() {
        b"count" => Reply::Int(t.top.iter().filter(&served).count() as i64),
        b"info" if argv.len() == 2 => Reply::Array(
            t.top
                .iter()
                .filter(&served)
                .map(|&i| t.spec(i).info.clone())
                .collect(),
        ),
        b"info" => Reply::Array(
            argv[2..]
                .iter()
                .map(|n| known(n).map_or(Reply::Nil, |i| t.spec(i).info.clone()))
                .collect(),
        ),
        b"docs" if argv.len() == 2 => Reply::Map(
            t.top
                .iter()
                .filter(&served)
                .map(|&i| (name_reply(t.spec(i)), t.spec(i).docs.clone()))
                .collect(),
        ),
        b"docs" => Reply::Map(
            argv[2..]
                .iter()
                .filter_map(|n| known(n))
                .map(|i| (name_reply(t.spec(i)), t.spec(i).docs.clone()))
                .collect(),
        ),
        b"getkeys" => getkeys(&argv[2..], mode),
        b"list" => list(&argv[2..], mode),
        b"help" => help(
            "COMMAND",
            &[
                "(no subcommand)",
                "    Return details about all Ringlet commands.",
                "COUNT",
                "    Return the total number of commands in this server.",
                "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
                "    Return a list of all commands in this server.",
                "INFO [<command-name> ...]",
                "    Return details about multiple commands.",
                "    If no command names are given, documentation details for all",
                "    commands are returned.",
                "DOCS [<command-name> ...]",
                "    Return documentation details about multiple commands.",
                "    If no command names are given, documentation details for all",
                "    commands are returned.",
                "GETKEYS <full-command>",
                "    Return the keys from a full Redis command.",
            ],
        ),
        _ => crate::table::unknown_subcommand(argv),
    }
}

/// COMMAND GETKEYS: the keys of a full command, with Redis's errors.
fn getkeys(cmd: &[&[u8]], mode: Mode) -> Reply {
    let Ok(idx) = lookup(cmd) else {
        return Reply::err("ERR Invalid command specified");
    };
    let spec = table().spec(idx);
    if !spec.served_in(mode) {
        return Reply::err("ERR Invalid command specified");
    }
    if !spec.arity_ok(cmd.len()) {
        return Reply::err("ERR Invalid number of arguments specified for command");
    }
    let keys = spec.keys(cmd);
    if keys.is_empty() {
        return Reply::err("ERR The command has no key arguments");
    }
    Reply::Array(keys.into_iter().map(Reply::bulk).collect())
}

/// COMMAND LIST [FILTERBY MODULE name | ACLCAT cat | PATTERN pat]: top-level names (and,
/// as Redis does, `container|sub` names) served in `mode`.
fn list(args: &[&[u8]], mode: Mode) -> Reply {
    enum Filter<'a> {
        All,
        Module,
        AclCat(Vec<u8>),
        Pattern(&'a [u8]),
    }
    let filter = match args {
        [] => Filter::All,
        [by, kind, value] if by.eq_ignore_ascii_case(b"filterby") => {
            match kind.to_ascii_lowercase().as_slice() {
                b"module" => Filter::Module,
                b"aclcat" => {
                    let mut c = b"@".to_vec();
                    c.extend(value.to_ascii_lowercase());
                    Filter::AclCat(c)
                }
                b"pattern" => Filter::Pattern(value),
                _ => return Reply::err(errors::SYNTAX),
            }
        }
        _ => return Reply::err(errors::SYNTAX),
    };
    let t = table();
    let in_cat = |s: &Spec, cat: &[u8]| match &s.info {
        Reply::Array(items) => match items.get(6) {
            Some(Reply::Set(c) | Reply::Array(c)) => c
                .iter()
                .any(|x| matches!(x, Reply::Simple(v) | Reply::Bulk(v) if v[..] == *cat)),
            _ => false,
        },
        _ => false,
    };
    let mut out = Vec::new();
    for &i in &t.top {
        let top = t.spec(i);
        if !top.served_in(mode) {
            continue;
        }
        let mut names: Vec<&Spec> = vec![top];
        let mut subs: Vec<usize> = top.subcommands.values().copied().collect();
        subs.sort_unstable();
        names.extend(subs.into_iter().map(|s| t.spec(s)));
        for s in names {
            let keep = match &filter {
                Filter::All => true,
                // No modules: a module filter matches nothing, as in Redis without modules.
                Filter::Module => false,
                Filter::AclCat(c) => in_cat(s, c),
                Filter::Pattern(p) => string_match(p, s.name.as_bytes(), true),
            };
            if keep {
                out.push(Reply::Bulk(Bytes::from_static(s.name.as_bytes())));
            }
        }
    }
    Reply::Array(out)
}

/// A HELP reply in Redis's shape: a header line naming the command, then the lines.
pub fn help(name: &str, lines: &[&str]) -> Reply {
    let mut out = vec![Reply::Simple(Bytes::from(format!(
        "{name} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    )))];
    out.extend(
        lines
            .iter()
            .map(|l| Reply::Simple(Bytes::copy_from_slice(l.as_bytes()))),
    );
    out.push(Reply::simple("HELP"));
    out.push(Reply::simple("    Prints this help."));
    Reply::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(r: &Reply) -> Vec<String> {
        match r {
            Reply::Array(v) => v
                .iter()
                .map(|x| match x {
                    Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn getkeys_answers_from_key_positions() {
        let r = command(
            &[b"command", b"getkeys", b"mset", b"a", b"1", b"b", b"2"],
            Mode::Cluster,
        );
        assert_eq!(names(&r), vec!["a", "b"]);
        let r = command(
            &[b"command", b"getkeys", b"memgest", b"move", b"k", b"cold"],
            Mode::Cluster,
        );
        assert_eq!(names(&r), vec!["k"]);
        assert_eq!(
            command(&[b"command", b"getkeys", b"ping"], Mode::Cluster),
            Reply::err("ERR The command has no key arguments")
        );
        assert_eq!(
            command(&[b"command", b"getkeys", b"get"], Mode::Cluster),
            Reply::err("ERR Invalid number of arguments specified for command")
        );
        assert_eq!(
            command(&[b"command", b"getkeys", b"nosuch", b"k"], Mode::Cluster),
            Reply::err("ERR Invalid command specified")
        );
        // MEMGEST is not a single node's command.
        assert_eq!(
            command(
                &[b"command", b"getkeys", b"memgest", b"move", b"k", b"m"],
                Mode::Single
            ),
            Reply::err("ERR Invalid command specified")
        );
    }

    #[test]
    fn count_and_list_follow_the_mode() {
        let count = |m| match command(&[b"command", b"count"], m) {
            Reply::Int(n) => n,
            other => panic!("{other:?}"),
        };
        // MEMGEST, RECORDS and MIGRATE are served by a cluster node only.
        assert_eq!(count(Mode::Cluster), count(Mode::Single) + 3);
        let all = names(&command(&[b"command", b"list"], Mode::Cluster));
        assert!(all.contains(&"memgest".to_owned()));
        assert!(all.contains(&"client|setname".to_owned()));
        let single = names(&command(&[b"command", b"list"], Mode::Single));
        assert!(!single.contains(&"memgest".to_owned()));
        let p = names(&command(
            &[b"command", b"list", b"filterby", b"pattern", b"get*"],
            Mode::Single,
        ));
        assert!(p.contains(&"get".to_owned()) && p.contains(&"getex".to_owned()));
        assert!(!p.contains(&"set".to_owned()));
        let c = names(&command(
            &[b"command", b"list", b"filterby", b"aclcat", b"string"],
            Mode::Single,
        ));
        assert!(c.contains(&"append".to_owned()) && !c.contains(&"hset".to_owned()));
    }

    #[test]
    fn info_of_unknown_is_nil_and_of_cluster_only_depends_on_mode() {
        let r = command(
            &[b"command", b"info", b"get", b"nosuch", b"memgest"],
            Mode::Single,
        );
        let Reply::Array(v) = r else { panic!() };
        assert!(matches!(v[0], Reply::Array(_)));
        assert_eq!(v[1], Reply::Nil);
        assert_eq!(v[2], Reply::Nil);
        let r = command(&[b"command", b"info", b"memgest"], Mode::Cluster);
        let Reply::Array(v) = r else { panic!() };
        assert!(matches!(v[0], Reply::Array(_)));
    }
}
