//! COMMAND INFO / DOCS entries of Ringlet's own commands, in Redis 7's format, added to the
//! generated table (`table_data.rs`, read from a real Redis): LINK, RECORD and CHASE (KELI records,
//! docs/design/records.md), MEMGEST (per-key memgests, docs/design/memgest-commands.md),
//! RECORDS (one node's CHASE hop asked by another) and CLUSTER RINGLET-LOAD (a node's load
//! report for the status page).
//!
//! Routing choice for MEMGEST: `MOVE` and `KEY` name a real key (position 2). `CREATE`,
//! `DROP` and `DEFAULT` name a memgest, not a key, but every node serves them (they go to the
//! control plane), so the name is declared as the key: cluster-aware clients (redis-py's
//! `RedisCluster`) then route them to *some* node without `target_nodes`, which is all they
//! need. `LIST`, `INFO` and `HELP` have no key and, as for Redis's own keyless commands, need
//! a node named by the client.

use crate::reply::Reply;
use crate::table_data_helpers::{a, b, i, m, s, st};

/// A key spec: keys from `index` to `lastkey` (relative: 0 = just `index`, -1 = the last
/// argument) every `keystep` arguments.
fn key_spec(index: i64, lastkey: i64, keystep: i64, write: bool) -> Reply {
    m(vec![
        (
            b("flags"),
            st(if write {
                vec![s("RW"), s("update")]
            } else {
                vec![s("RO"), s("access")]
            }),
        ),
        (
            b("begin_search"),
            m(vec![
                (b("type"), b("index")),
                (b("spec"), m(vec![(b("index"), i(index))])),
            ]),
        ),
        (
            b("find_keys"),
            m(vec![
                (b("type"), b("range")),
                (
                    b("spec"),
                    m(vec![
                        (b("lastkey"), i(lastkey)),
                        (b("keystep"), i(keystep)),
                        (b("limit"), i(0)),
                    ]),
                ),
            ]),
        ),
    ])
}

/// One COMMAND INFO entry with its key at `key` (0: no key).
fn entry(name: &'static str, arity: i64, write: bool, key: i64, group: &'static str) -> Reply {
    let specs = if key > 0 {
        vec![key_spec(key, 0, 1, write)]
    } else {
        vec![]
    };
    a(vec![
        b(name),
        i(arity),
        st(vec![s(if write { "write" } else { "readonly" })]),
        i(key),
        i(key),
        i(i64::from(key > 0)),
        st(vec![s(if write { "@write" } else { "@read" }), s(group)]),
        st(vec![]),
        a(specs),
        a(vec![]),
    ])
}

/// A container entry (no handler of its own) with `subs` as its subcommands.
fn container(name: &'static str, arity: i64, group: &'static str, subs: Vec<Reply>) -> Reply {
    a(vec![
        b(name),
        i(arity),
        st(vec![]),
        i(0),
        i(0),
        i(0),
        st(vec![s(group)]),
        st(vec![]),
        a(vec![]),
        a(subs),
    ])
}

fn docs(summary: &'static str, group: &'static str) -> Reply {
    m(vec![
        (b("summary"), b(summary)),
        (b("since"), b("0.1.0")),
        (b("group"), b(group)),
        (b("complexity"), b("O(N)")),
    ])
}

fn container_docs(
    summary: &'static str,
    group: &'static str,
    subs: Vec<(&'static str, &'static str)>,
) -> Reply {
    m(vec![
        (b("summary"), b(summary)),
        (b("since"), b("0.1.0")),
        (b("group"), b(group)),
        (b("complexity"), b("Depends on subcommand.")),
        (
            b("subcommands"),
            m(subs
                .into_iter()
                .map(|(n, sum)| (b(n), docs(sum, group)))
                .collect()),
        ),
    ])
}

/// `(name, COMMAND INFO entry, COMMAND DOCS entry)` of Ringlet's own top-level commands.
pub fn commands() -> Vec<(&'static str, Reply, Reply)> {
    let link = container(
        "link",
        -2,
        "@hash",
        vec![
            entry("link|set", 5, true, 2, "@hash"),
            entry("link|add", -5, true, 2, "@hash"),
            entry("link|get", 4, false, 2, "@hash"),
            entry("link|del", 4, true, 2, "@hash"),
        ],
    );
    let link_docs = container_docs(
        "Links between records (KELI)",
        "hash",
        vec![
            ("link|set", "Make a field a link to another key"),
            ("link|add", "Append links to a field's link list"),
            ("link|get", "The target keys of a link field"),
            ("link|del", "Remove a link field"),
        ],
    );
    let record = container(
        "record",
        -2,
        "@hash",
        vec![entry("record|set", -5, true, 2, "@hash")],
    );
    let record_docs = container_docs(
        "Records (KELI): several fields, links and link lists in one write",
        "hash",
        vec![(
            "record|set",
            "Set fields: ATTR name value, LINK name target, LINKS name count target..., DEL name",
        )],
    );
    let memgest = container(
        "memgest",
        -2,
        "@keyspace",
        vec![
            entry("memgest|create", -4, true, 2, "@keyspace"),
            entry("memgest|drop", 3, true, 2, "@keyspace"),
            entry("memgest|default", 3, true, 2, "@keyspace"),
            entry("memgest|move", 4, true, 2, "@keyspace"),
            entry("memgest|key", 3, false, 2, "@keyspace"),
            entry("memgest|list", 2, false, 0, "@keyspace"),
            entry("memgest|info", -2, false, 0, "@keyspace"),
            entry("memgest|help", 2, false, 0, "@keyspace"),
        ],
    );
    let memgest_docs = container_docs(
        "Per-key resilience schemes (memgests): none, rep:R, ec:K+M",
        "keyspace",
        vec![
            ("memgest|create", "Create a memgest"),
            ("memgest|drop", "Drop a memgest that holds no keys"),
            ("memgest|default", "Make a memgest the default for new keys"),
            ("memgest|move", "Move a key to another memgest"),
            ("memgest|key", "The memgest holding a key"),
            ("memgest|list", "The memgests and their schemes"),
            ("memgest|info", "Keys, bytes and memory of memgests"),
            (
                "memgest|help",
                "Show helpful text about the different subcommands",
            ),
        ],
    );
    vec![
        ("link", link, link_docs),
        ("record", record, record_docs),
        (
            "chase",
            entry("chase", -3, false, 1, "@hash"),
            docs(
                "Follow link fields breadth-first and return the items reached",
                "hash",
            ),
        ),
        ("memgest", memgest, memgest_docs),
        (
            "records",
            entry("records", -2, false, 0, "@hash"),
            docs(
                "Committed records of keys this node coordinates (one CHASE hop asked by another node)",
                "hash",
            ),
        ),
    ]
}

/// Subcommands Ringlet adds to a container of the generated table: `(container, INFO, DOCS)`.
/// CLIENT SETINFO is Redis 7.2's (the table is generated from 7.0); its entry is 7.2's.
pub fn subcommands() -> Vec<(&'static str, Reply, Reply)> {
    let setinfo = a(vec![
        b("client|setinfo"),
        i(4),
        st(vec![s("noscript"), s("loading"), s("stale")]),
        i(0),
        i(0),
        i(0),
        st(vec![s("@slow"), s("@connection")]),
        st(vec![
            s("request_policy:all_nodes"),
            s("response_policy:all_succeeded"),
        ]),
        st(vec![]),
        st(vec![]),
    ]);
    vec![
        (
            "cluster",
            entry("cluster|ringlet-load", -2, false, 0, "@slow"),
            docs(
                "This node's load per slot range, or with SLOTS per slot, as JSON",
                "cluster",
            ),
        ),
        (
            "client",
            setinfo,
            m(vec![
                (b("summary"), b("Set client or connection specific info")),
                (b("since"), b("7.2.0")),
                (b("group"), b("connection")),
                (b("complexity"), b("O(1)")),
            ]),
        ),
    ]
}
