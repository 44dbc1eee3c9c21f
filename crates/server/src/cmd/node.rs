//! Node-local commands, written once for both fronts: the replies that do not depend on
//! where keys live. The single node (`cmd::server`, `cmd::connection`) and a cluster node's
//! front (`crates/cluster/src/resp.rs`) implement [`NodeContext`] for what differs — their
//! CONFIG parameters, INFO sections, engine, client count — and call these functions.
//!
//! ```text
//!   single node  cmd::{server,connection}::*  ──┐
//!                                               ├─> cmd::node::{config_*, info, memory, slowlog,
//!   cluster node resp.rs command_inner  ────────┘     latency, ping, echo, select, hello_*, ...}
//!                                                     over &dyn NodeContext
//! ```
//!
//! What stays per front, and why: AUTH/HELLO/RESET change per-connection state that the two
//! fronts keep differently (a `Session` vs. a registered `Conn`), so only their argument
//! parsing and replies are here; WAIT, ROLE, DBSIZE, FLUSHALL and the keyspace commands
//! depend on where keys live.

use super::slowlog::Monitor;
use super::{is, Mode};
use crate::reply::{errors, Reply};
use bytes::Bytes;
use ringlet_engine::EngineStats;
use std::fmt::Write as _;

/// What a front supplies to the shared node-local commands.
pub trait NodeContext {
    /// This front's CONFIG parameters and their values; the slow log's and latency
    /// monitor's ([`Monitor::config_params`]) are added by [`config_get`].
    fn config_params(&self) -> Vec<(&'static str, String)>;
    /// The parameters of [`NodeContext::config_params`] CONFIG SET may change here.
    fn config_settable(&self) -> Vec<&'static str>;
    /// Check, then apply, the pairs that are this front's own (the monitor's names are
    /// applied by [`config_set`]; skip them). Nothing may be applied when it fails.
    ///
    /// # Errors
    /// Redis's CONFIG SET error text for the first bad value.
    fn config_apply(&self, pairs: &[(String, &[u8])]) -> Result<(), Reply>;
    /// The node's slow log and latency monitor.
    fn monitor(&self) -> &Monitor;
    /// The engine's accounting (MEMORY STATS, INFO memory).
    fn engine_stats(&self) -> EngineStats;
    /// Bytes the live entry of `key` occupies (MEMORY USAGE): `None` if there is none, or
    /// it has expired at `now_ms`. A cluster front has checked the slot is its own.
    fn key_footprint(&self, key: &[u8], now_ms: u64) -> Option<u64>;
    /// RESP connections open now.
    fn connected_clients(&self) -> u64;
    /// INFO memory's `maxmemory_policy`.
    fn maxmemory_policy(&self) -> String;
    /// Lines INFO memory adds after Redis's fields (each ending `\r\n`).
    fn memory_extra_lines(&self) -> String;
    /// INFO's sections of this front in Redis's order: (names that select it, whether it is
    /// in the default set). The text is [`NodeContext::info_section`]'s, under the first
    /// name; `clients`, `memory` and `cpu` are written here.
    fn info_sections(&self) -> &'static [(&'static [&'static str], bool)];
    /// The text of a section of [`NodeContext::info_sections`] not written here.
    fn info_section(&self, name: &str) -> String;
}

/// CONFIG SET's `index-keys` among `pairs`, parsed (both fronts check it before applying
/// anything, all or nothing as Redis): `None` if not set, Redis's text if not an integer.
pub fn index_keys_arg(pairs: &[(String, &[u8])]) -> Result<Option<u64>, Reply> {
    let mut index_keys = None;
    for (n, v) in pairs {
        if n == "index-keys" {
            match std::str::from_utf8(v)
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
            {
                Some(k) => index_keys = Some(k),
                None => {
                    return Err(Reply::err(
                        "ERR CONFIG SET failed (possibly related to argument 'index-keys') - \
                         argument couldn't be parsed into an integer",
                    ))
                }
            }
        }
    }
    Ok(index_keys)
}

/// The CONFIG parameters every front has, in the order CONFIG GET lists them: the front
/// adds its own after these (the single node `io-threads`, `index-keys`; both
/// `cluster-enabled`).
pub fn base_config_params(
    laddr: std::net::SocketAddr,
    maxmemory: u64,
    policy: &str,
    requirepass: Option<&[u8]>,
) -> Vec<(&'static str, String)> {
    use ringlet_types::limits;
    vec![
        ("bind", laddr.ip().to_string()),
        ("port", laddr.port().to_string()),
        ("maxmemory", maxmemory.to_string()),
        ("maxmemory-policy", policy.to_string()),
        ("maxclients", limits::CONNECTIONS_MAX.to_string()),
        (
            "requirepass",
            requirepass
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .unwrap_or_default(),
        ),
        ("databases", "1".to_string()),
        (
            "proto-max-bulk-len",
            limits::RESP_BULK_BYTES_MAX.to_string(),
        ),
        ("timeout", "0".to_string()),
        ("save", String::new()),
        ("appendonly", "no".to_string()),
    ]
}

/// MEMORY USAGE's figure from an engine: the published entry of `key`, unless expired at
/// `now_ms` (both fronts decide expiry by the wall clock).
pub fn live_footprint(engine: &ringlet_engine::Engine, key: &[u8], now_ms: u64) -> Option<u64> {
    let head = engine.head(key)?;
    if head.expire_at_ms.is_some_and(|t| t <= now_ms) {
        return None;
    }
    engine.footprint(key)
}

/// PING [message].
pub fn ping(argv: &[&[u8]]) -> Reply {
    match argv.len() {
        1 => Reply::simple("PONG"),
        2 => Reply::bulk(argv[1]),
        _ => super::arity_error("ping"),
    }
}

/// ECHO message.
pub fn echo(argv: &[&[u8]]) -> Reply {
    Reply::bulk(argv[1])
}

/// SELECT db: only database 0 exists (Ringlet is cluster-shaped). Redis's checks in its
/// order: an integer, within `int`, then cluster mode refuses any other index; a single node
/// answers 1..=15 as a cluster does and others as out of range.
pub fn select(argv: &[&[u8]], mode: Mode) -> Reply {
    let Some(db) = super::parse_i64(argv[1]) else {
        return Reply::err(errors::NOT_INTEGER);
    };
    if i32::try_from(db).is_err() {
        return Reply::err(
            "ERR value is out of range, value must between -2147483648 and 2147483647",
        );
    }
    match db {
        0 => Reply::ok(),
        _ if mode == Mode::Cluster => Reply::err("ERR SELECT is not allowed in cluster mode"),
        1..=15 => Reply::err("ERR SELECT is not allowed in cluster mode"),
        _ => Reply::err("ERR DB index is out of range"),
    }
}

/// TIME: [unix seconds, microseconds], as bulk strings.
pub fn time() -> Reply {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Reply::Array(vec![
        Reply::bulk(now.as_secs().to_string().as_bytes()),
        Reply::bulk(now.subsec_micros().to_string().as_bytes()),
    ])
}

/// AUTH's (user, password): AUTH <password> is the default user's, refused when that user
/// needs none (Redis: a configuration mistake).
///
/// # Errors
/// Redis's texts.
pub fn auth_args<'a>(
    argv: &[&'a [u8]],
    default_nopass: bool,
) -> Result<(&'a [u8], &'a [u8]), Reply> {
    match argv.len() {
        2 if default_nopass => Err(Reply::err(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        )),
        2 => Ok((b"default", argv[1])),
        3 => Ok((argv[1], argv[2])),
        _ => Err(Reply::err(errors::SYNTAX)),
    }
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]], parsed whole before
/// anything is applied (as Redis).
#[derive(Debug, Default)]
pub struct HelloArgs<'a> {
    /// 2 or 3; `None`: keep the connection's protocol.
    pub proto: Option<u8>,
    pub auth: Option<(&'a [u8], &'a [u8])>,
    pub setname: Option<&'a [u8]>,
}

/// Parse HELLO's arguments.
///
/// # Errors
/// Redis's texts (protocol version, unknown option).
pub fn hello_args<'a>(argv: &[&'a [u8]]) -> Result<HelloArgs<'a>, Reply> {
    let mut out = HelloArgs::default();
    let mut j = 1;
    if let Some(v) = argv.get(1) {
        let Some(v) = super::parse_i64(v) else {
            return Err(Reply::err(
                "ERR Protocol version is not an integer or out of range",
            ));
        };
        if !(2..=3).contains(&v) {
            return Err(Reply::err("NOPROTO unsupported protocol version"));
        }
        out.proto = Some(v as u8);
        j = 2;
    }
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        if is(argv[j], "auth") && more >= 2 {
            out.auth = Some((argv[j + 1], argv[j + 2]));
            j += 3;
        } else if is(argv[j], "setname") && more >= 1 {
            out.setname = Some(argv[j + 1]);
            j += 2;
        } else {
            return Err(super::err_with_arg(
                "ERR Syntax error in HELLO option '",
                argv[j],
                "'",
            ));
        }
    }
    Ok(out)
}

/// What HELLO answers without authentication when a password is needed.
pub const HELLO_NOAUTH: &str =
    "NOAUTH HELLO must be called with the client already authenticated, \
     otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and \
     select the RESP protocol version at the same time";

/// HELLO's reply map for connection `id` speaking RESP `proto`.
pub fn hello_reply(proto: u8, id: u64, mode: Mode) -> Reply {
    let b = |s: &'static str| Reply::Bulk(Bytes::from_static(s.as_bytes()));
    Reply::Map(vec![
        (b("server"), b("ringlet")),
        (b("version"), b(super::connection::REDIS_COMPAT_VERSION)),
        (b("proto"), Reply::Int(i64::from(proto))),
        (b("id"), Reply::Int(id as i64)),
        (
            b("mode"),
            b(if mode == Mode::Cluster {
                "cluster"
            } else {
                "standalone"
            }),
        ),
        (b("role"), b("master")),
        (b("modules"), Reply::Array(vec![])),
    ])
}

/// CLIENT LIST's filter: `None` lists every connection.
pub enum ClientFilter {
    /// TYPE master|replica|slave|pubsub: Ringlet has only normal connections.
    Nothing,
    Ids(Vec<u64>),
}

/// CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id [id ...]].
///
/// # Errors
/// Redis's texts (unknown type, a negative id, anything else a syntax error).
pub fn client_list_filter(argv: &[&[u8]]) -> Result<Option<ClientFilter>, Reply> {
    if argv.len() == 4 && is(argv[2], "type") {
        let t = argv[3];
        if is(t, "normal") {
            return Ok(None);
        }
        if is(t, "master") || is(t, "replica") || is(t, "slave") || is(t, "pubsub") {
            return Ok(Some(ClientFilter::Nothing));
        }
        return Err(super::err_with_arg("ERR Unknown client type '", t, "'"));
    }
    if argv.len() > 3 && is(argv[2], "id") {
        let mut v = Vec::with_capacity((argv.len() - 3).min(1024));
        for a in &argv[3..] {
            match super::parse_i64(a) {
                // Redis 7.0 accepts 0 (no connection has it: an empty list), not below.
                Some(n) if n >= 0 => v.push(n as u64),
                _ => return Err(Reply::err("ERR Invalid client ID")),
            }
        }
        return Ok(Some(ClientFilter::Ids(v)));
    }
    if argv.len() != 2 {
        return Err(Reply::err(errors::SYNTAX));
    }
    Ok(None)
}

impl ClientFilter {
    /// Whether connection `id` is listed (`filter` from [`client_list_filter`]).
    pub fn keeps(filter: &Option<ClientFilter>, id: u64) -> bool {
        match filter {
            None => true,
            Some(ClientFilter::Nothing) => false,
            Some(ClientFilter::Ids(ids)) => ids.contains(&id),
        }
    }
}

/// CLIENT HELP.
pub fn client_help() -> Reply {
    super::connection::help(
        "CLIENT",
        &[
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "LIST [options ...]",
            "    Return information about client connections (of this node). Options:",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Return clients of specified type.",
            "    * ID <client-id> [<client-id> ...]",
            "      Return clients of specified IDs only.",
            "SETINFO <LIB-NAME|LIB-VER> <value>",
            "    Accepted, as Redis 7.2 does (clients send it on connect).",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
        ],
    )
}

/// Every CONFIG parameter of the node: the front's, then the monitor's.
fn all_params(ctx: &dyn NodeContext) -> Vec<(&'static str, String)> {
    let mut p = ctx.config_params();
    p.extend(ctx.monitor().config_params());
    p
}

/// CONFIG GET pattern [pattern ...].
pub fn config_get(ctx: &dyn NodeContext, argv: &[&[u8]]) -> Reply {
    super::server::config_get_from(&all_params(ctx), argv)
}

/// CONFIG SET name value [name value ...]: all or nothing, as Redis — every name known and
/// settable, every value parsed, before anything is applied.
pub fn config_set(ctx: &dyn NodeContext, argv: &[&[u8]]) -> Reply {
    let params = all_params(ctx);
    let known: Vec<&str> = params.iter().map(|(n, _)| *n).collect();
    let mut settable = ctx.config_settable();
    settable.extend(super::slowlog::CONFIG_NAMES);
    let pairs = match super::server::config_set_check(&known, &settable, argv) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let monitor = match ctx.monitor().parse(&pairs) {
        Ok(m) => m,
        Err(e) => return e,
    };
    let own: Vec<(String, &[u8])> = pairs
        .into_iter()
        .filter(|(n, _)| !super::slowlog::CONFIG_NAMES.contains(&n.as_str()))
        .collect();
    if let Err(e) = ctx.config_apply(&own) {
        return e;
    }
    ctx.monitor().apply(&monitor);
    Reply::ok()
}

/// CONFIG HELP, naming what this node can change at run time.
pub fn config_help(ctx: &dyn NodeContext) -> Reply {
    let mut settable = ctx.config_settable();
    settable.extend(super::slowlog::CONFIG_NAMES);
    let line = format!("    Settable at run time here: {}.", settable.join(", "));
    let lines = [
        "GET <pattern>",
        "    Return parameters matching the glob-like <pattern> and their values.",
        "SET <directive> <value>",
        "    Set the configuration <directive> to <value>.",
        line.as_str(),
        "RESETSTAT",
        "    Reset statistics reported by the INFO command.",
    ];
    super::connection::help("CONFIG", &lines)
}

/// INFO [section ...] in Redis's section order: no argument or `default` gives the default
/// sections, `all`/`everything` every one, any other names those sections.
pub fn info(ctx: &dyn NodeContext, argv: &[&[u8]]) -> Reply {
    let sections: Vec<String> = argv[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
        .collect();
    Reply::Verbatim(Bytes::from(info_text(ctx, &sections)))
}

/// INFO's text for `sections` (lowercase), see [`info`].
pub fn info_text(ctx: &dyn NodeContext, sections: &[String]) -> String {
    let all = sections.iter().any(|s| s == "all" || s == "everything");
    let default = sections.is_empty() || sections.iter().any(|s| s == "default");
    let mut out = String::new();
    for (names, in_default) in ctx.info_sections() {
        let wanted =
            all || (default && *in_default) || sections.iter().any(|s| names.contains(&s.as_str()));
        if !wanted {
            continue;
        }
        if !out.is_empty() {
            out.push_str("\r\n");
        }
        match names[0] {
            "clients" => {
                let _ = write!(
                    out,
                    "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:0\r\n",
                    ctx.connected_clients(),
                    ringlet_types::limits::CONNECTIONS_MAX,
                );
            }
            "memory" => memory_section(ctx, &mut out),
            "cpu" => crate::info::cpu(&mut out),
            name => out.push_str(&ctx.info_section(name)),
        }
    }
    out
}

/// INFO memory: Redis's fields from the engine's accounting, then the front's own lines.
fn memory_section(ctx: &dyn NodeContext, out: &mut String) {
    use crate::info::human;
    let s = ctx.engine_stats();
    let used = s.committed_bytes + s.index_bytes;
    let rss = crate::info::rss_bytes();
    let _ = write!(
        out,
        "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\n\
         used_memory_rss_human:{}\r\nused_memory_dataset:{}\r\nmaxmemory:{}\r\n\
         maxmemory_human:{}\r\nmaxmemory_policy:{}\r\n{}",
        human(used),
        human(rss),
        s.used_bytes,
        s.memory_bytes_max,
        human(s.memory_bytes_max),
        ctx.maxmemory_policy(),
        ctx.memory_extra_lines(),
    );
}

/// MEMORY USAGE key [SAMPLES count] | STATS | DOCTOR | HELP. `now_ms`: the wall clock.
///
/// USAGE answers the bytes the engine accounts the entry for — its data-region slot (the
/// size class or page-rounded run holding header, key and value) plus its index entry —
/// which is what `used_memory_dataset` sums; SAMPLES is checked and ignored (there is no
/// nested structure to sample). STATS is the subset of Redis's fields the engine really
/// knows, plus Ringlet's; DOCTOR is refused with the reason.
pub fn memory(ctx: &dyn NodeContext, argv: &[&[u8]], now_ms: u64) -> Reply {
    let sub = argv[1].to_ascii_lowercase();
    match sub.as_slice() {
        b"usage" => {
            // Redis: options in pairs, SAMPLES with an integer; anything else a syntax error.
            let mut j = 3;
            while j < argv.len() {
                if is(argv[j], "samples") && j + 1 < argv.len() {
                    if super::parse_i64(argv[j + 1]).is_none() {
                        return Reply::err(errors::NOT_INTEGER);
                    }
                    j += 2;
                } else {
                    return Reply::err(errors::SYNTAX);
                }
            }
            match ctx.key_footprint(argv[2], now_ms) {
                Some(n) => Reply::Int(n as i64),
                None => Reply::Nil,
            }
        }
        b"stats" => {
            let s = ctx.engine_stats();
            let used = s.committed_bytes + s.index_bytes;
            let overhead = used.saturating_sub(s.used_bytes);
            let per_key = used.checked_div(s.keys).unwrap_or(0);
            let pct = if used == 0 {
                0.0
            } else {
                s.used_bytes as f64 * 100.0 / used as f64
            };
            let b = |s: &str| Reply::bulk(s.as_bytes());
            let i = |n: u64| Reply::Int(n as i64);
            Reply::Map(vec![
                (b("total.allocated"), i(used)),
                (b("clients.normal"), i(0)),
                (b("overhead.total"), i(overhead)),
                (b("keys.count"), i(s.keys)),
                (b("keys.bytes-per-key"), i(per_key)),
                (b("dataset.bytes"), i(s.used_bytes)),
                (b("dataset.percentage"), Reply::Double(pct)),
                (b("ringlet.index.bytes"), i(s.index_bytes)),
                (b("ringlet.data.committed"), i(s.committed_bytes)),
                (b("ringlet.maxmemory"), i(s.memory_bytes_max)),
                (b("ringlet.keys.with-ttl"), i(s.keys_with_ttl)),
                (b("ringlet.tombstones"), i(s.tombstones)),
                (b("rss"), i(crate::info::rss_bytes())),
            ])
        }
        b"doctor" => Reply::err(
            "ERR MEMORY DOCTOR is not supported by Ringlet: see MEMORY STATS and INFO memory \
             (the engine's own accounting)",
        ),
        _ => super::connection::help(
            "MEMORY",
            &[
                "DOCTOR",
                "    Not supported by Ringlet (see STATS).",
                "STATS",
                "    Return information about the memory usage of the server.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return memory in bytes used by <key> and its value (the engine's accounting).",
            ],
        ),
    }
}
