//! COMMAND INFO entries for Ringlet's own commands in cluster mode.
//!
//! Cluster-aware clients learn from `COMMAND` where a command's keys are, and route by them:
//! redis-py's `RedisCluster` refused `MEMGEST ...` with "MEMGEST command doesn't exist in Redis
//! commands" because the table (generated from Redis 7, `ringlet_server::cmd::table`) has no
//! MEMGEST. The entry below follows Redis 7's format (name, arity, flags, first key, last key,
//! step, ACL categories, tips, key specs, subcommands) with one subcommand per MEMGEST verb.
//!
//! Routing choice: `MOVE` and `KEY` name a real key (position 2). `CREATE`, `DROP` and
//! `DEFAULT` name a memgest, not a key, but every node serves them (they go to the control
//! plane), so the name is declared as the key: clients then route them to *some* node
//! without `target_nodes`, which is all they need. `LIST`, `INFO` and `HELP` have no key and,
//! as for Redis's own keyless commands, need a node named by the client.
//!
//! The issue-11 command layer will move this into the one table every front shares.

use ringlet_codec::resp::Reply;

fn simple(s: &str) -> Reply {
    Reply::Simple(s.as_bytes().to_vec())
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// A key spec: keys from `index` to `lastkey` (relative: 0 = just `index`, -1 = the last
/// argument) every `keystep` arguments.
fn key_spec(index: i64, lastkey: i64, keystep: i64, write: bool) -> Reply {
    let flags = if write {
        vec![simple("RW"), simple("update")]
    } else {
        vec![simple("RO"), simple("access")]
    };
    Reply::Map(vec![
        (bulk("flags"), Reply::Set(flags)),
        (
            bulk("begin_search"),
            Reply::Map(vec![
                (bulk("type"), bulk("index")),
                (
                    bulk("spec"),
                    Reply::Map(vec![(bulk("index"), Reply::Integer(index))]),
                ),
            ]),
        ),
        (
            bulk("find_keys"),
            Reply::Map(vec![
                (bulk("type"), bulk("range")),
                (
                    bulk("spec"),
                    Reply::Map(vec![
                        (bulk("lastkey"), Reply::Integer(lastkey)),
                        (bulk("keystep"), Reply::Integer(keystep)),
                        (bulk("limit"), Reply::Integer(0)),
                    ]),
                ),
            ]),
        ),
    ])
}

fn entry(name: &str, arity: i64, write: bool, key: Option<i64>, subs: Vec<Reply>) -> Reply {
    entry_keys(name, arity, write, key.map(|k| (k, k, 1)), subs)
}

/// An entry whose keys are `first..=last` every `step` (last -1: up to the last argument),
/// Redis's legacy key triple, with one key spec for each key position (two for RENAME's
/// source and destination) or one range spec.
fn entry_keys(
    name: &str,
    arity: i64,
    write: bool,
    keys: Option<(i64, i64, i64)>,
    subs: Vec<Reply>,
) -> Reply {
    let (first, last, step) = keys.unwrap_or((0, 0, 0));
    let specs: Vec<Reply> = match keys {
        None => vec![],
        Some((f, -1, st)) => vec![key_spec(f, -1, st, write)],
        Some((f, l, st)) => (f..=l)
            .step_by(st.max(1) as usize)
            .map(|i| key_spec(i, 0, 1, write))
            .collect(),
    };
    let flags = if write {
        vec![simple("write")]
    } else {
        vec![simple("readonly")]
    };
    let acl = vec![
        simple(if write { "@write" } else { "@read" }),
        simple("@slow"),
    ];
    Reply::Array(vec![
        bulk(name),
        Reply::Integer(arity),
        Reply::Set(flags),
        Reply::Integer(first),
        Reply::Integer(last),
        Reply::Integer(step),
        Reply::Set(acl),
        Reply::Set(vec![]),
        Reply::Array(specs),
        Reply::Array(subs),
    ])
}

/// Names this module adds to `COMMAND` (lowercase): the single node's generated table
/// (crates/server/src/cmd/table_data.rs) has every Redis command the fronts serve; MEMGEST
/// is Ringlet's own.
pub const EXTRA: &[&str] = &["memgest"];

/// The COMMAND INFO entry of `name`, if this module defines it.
pub fn info(name: &str) -> Option<Reply> {
    match name {
        "memgest" => Some(memgest()),
        _ => None,
    }
}

fn memgest() -> Reply {
    let subs = vec![
        entry("memgest|create", -4, true, Some(2), vec![]),
        entry("memgest|drop", 3, true, Some(2), vec![]),
        entry("memgest|default", 3, true, Some(2), vec![]),
        entry("memgest|move", 4, true, Some(2), vec![]),
        entry("memgest|key", 3, false, Some(2), vec![]),
        entry("memgest|list", 2, false, None, vec![]),
        entry("memgest|info", -2, false, None, vec![]),
        entry("memgest|help", 2, false, None, vec![]),
    ];
    entry("memgest", -2, false, None, subs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memgest_entry_has_every_verb_with_its_key_position() {
        let Some(Reply::Array(e)) = info("memgest") else {
            panic!("no entry")
        };
        assert_eq!(e.len(), 10);
        let Reply::Array(subs) = &e[9] else {
            panic!("no subcommands")
        };
        let mut seen = Vec::new();
        for s in subs {
            let Reply::Array(s) = s else { panic!() };
            let (Reply::Bulk(n), Reply::Integer(first)) = (&s[0], &s[3]) else {
                panic!()
            };
            seen.push((String::from_utf8(n.clone()).unwrap(), *first));
        }
        for (verb, key) in [
            ("create", 2),
            ("drop", 2),
            ("default", 2),
            ("move", 2),
            ("key", 2),
            ("list", 0),
            ("info", 0),
            ("help", 0),
        ] {
            assert!(
                seen.contains(&(format!("memgest|{verb}"), key)),
                "memgest|{verb} with key at {key}: {seen:?}"
            );
        }
    }
}
