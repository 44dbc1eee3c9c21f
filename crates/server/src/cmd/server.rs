//! Server commands: COMMAND (from ringlet-command), INFO, CONFIG (GET SET, a subset). DBSIZE
//! and FLUSHALL / FLUSHDB are key commands over `Keyspace` (cmd/keyspace.rs).

use super::{connection::help, is, Ctx};
use crate::glob::string_match;
use crate::reply::{errors, Reply};
use crate::shared::Shared;
use bytes::Bytes;

/// COMMAND and its subcommands, answered from the shared table for a single node.
pub fn command(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    ringlet_command::introspect::command(argv, super::Mode::Single)
}

/// CLUSTER …, READONLY, READWRITE: Redis's answer without cluster support.
pub fn cluster_disabled(_ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    Reply::err("ERR This instance has cluster support disabled")
}

pub fn info(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    super::node::info(ctx.shared, argv)
}

pub fn config_get(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    super::node::config_get(ctx.shared, argv)
}

/// CONFIG GET pattern [pattern ...] over `params` (the cluster front passes its own).
pub fn config_get_from(params: &[(&'static str, String)], argv: &[&[u8]]) -> Reply {
    let mut out = Vec::new();
    for (name, value) in params {
        if argv[2..]
            .iter()
            .any(|p| string_match(p, name.as_bytes(), true))
        {
            out.push((
                Reply::bulk(name.as_bytes()),
                Reply::Bulk(Bytes::from(value.clone())),
            ));
        }
    }
    Reply::Map(out)
}

/// CONFIG RESETSTAT: INFO's counters (stats, commandstats, errorstats, latencystats) back to
/// zero, as Redis does; gauges (clients, memory, keys) and SLOWLOG (SLOWLOG RESET) stay.
pub fn config_resetstat(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    let e = ctx.shared.db.lock().stats();
    ctx.shared.stats.reset((e.expirations, e.evictions));
    ctx.shared.cmdstats.reset();
    Reply::ok()
}

pub fn config_set(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    super::node::config_set(ctx.shared, argv)
}

/// Check CONFIG SET's pairs against the known parameters: those in `settable` are returned
/// for the caller to apply; any other known one is immutable, anything else unknown (Redis's
/// texts; nothing is applied unless every pair is acceptable).
pub fn config_set_check<'a>(
    known: &[&str],
    settable: &[&str],
    argv: &[&'a [u8]],
) -> Result<Vec<(String, &'a [u8])>, Reply> {
    if argv.len() & 1 == 1 || argv.len() < 4 {
        return Err(Reply::err(errors::SYNTAX));
    }
    let mut out = Vec::new();
    for pair in argv[2..].chunks(2) {
        let name = String::from_utf8_lossy(super::cstr(pair[0])).to_ascii_lowercase();
        if settable.contains(&name.as_str()) {
            out.push((name, pair[1]));
        } else if known.contains(&name.as_str()) {
            return Err(super::err_with_arg(
                "ERR CONFIG SET failed (possibly related to argument '",
                pair[0],
                "') - can't set immutable config",
            ));
        } else {
            return Err(super::err_with_arg(
                "ERR Unknown option or number of arguments for CONFIG SET - '",
                pair[0],
                "'",
            ));
        }
    }
    Ok(out)
}

pub fn config_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    super::node::config_help(ctx.shared)
}

pub fn memory(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    super::node::memory(ctx.shared, argv, ctx.now_ms)
}

pub fn slowlog(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    ctx.shared.monitor.slowlog(argv)
}

pub fn latency(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    ctx.shared.monitor.latency(argv)
}

/// WAIT numreplicas timeout: a single node keeps no replicas, so no write is ever held by
/// another copy: 0, at once (Redis without replicas answers 0 too, after the timeout when
/// numreplicas > 0; nothing can change meanwhile, so Ringlet does not hold the connection).
/// Arguments are checked as Redis does.
pub fn wait(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    match wait_args(argv) {
        Ok(_) => Reply::Int(0),
        Err(e) => Reply::err(e),
    }
}

/// WAIT's arguments as Redis checks them, for both fronts: `(numreplicas, timeout ms)`, or
/// Redis's error text.
///
/// # Errors
/// Not integers, or a negative timeout.
pub fn wait_args(argv: &[&[u8]]) -> Result<(i64, u64), &'static str> {
    let int = |v: &[u8]| ringlet_codec::resp::int::string2ll(v).ok_or(errors::NOT_INTEGER);
    let want = int(argv[1])?;
    let timeout = int(argv[2])?;
    let timeout = u64::try_from(timeout).map_err(|_| "ERR timeout is negative")?;
    Ok((want, timeout))
}

/// ROLE: a single node is a master without replicas and without a replication stream:
/// ["master", 0, []], what Redis answers with no replica attached.
pub fn role(_ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    Reply::Array(vec![
        Reply::bulk(b"master"),
        Reply::Int(0),
        Reply::Array(Vec::new()),
    ])
}

/// TIME: [unix seconds, microseconds], as bulk strings.
pub fn time(_ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Reply {
    super::node::time()
}

/// FUNCTION FLUSH [ASYNC|SYNC], LIST [WITHCODE] [LIBRARYNAME pattern], HELP, without a
/// connection context (the cluster front calls it too). Ringlet has no scripting, so the
/// library set is always empty: flushing it is done and listing it gives nothing (Redis's
/// test harness flushes functions before every file). Other subcommands: Redis's
/// unknown-subcommand error.
pub fn function_reply(argv: &[&[u8]]) -> Reply {
    let Some(sub) = argv.get(1) else {
        return Reply::err("ERR wrong number of arguments for 'function' command");
    };
    if is(sub, "flush") {
        return match argv.get(2) {
            None => Reply::ok(),
            // Redis's addReplySubcommandSyntaxError.
            Some(_) if argv.len() > 3 => super::err_with_arg(
                "ERR unknown subcommand or wrong number of arguments for '",
                sub,
                "'. Try FUNCTION HELP.",
            ),
            Some(m) if is(m, "async") || is(m, "sync") => Reply::ok(),
            Some(_) => Reply::err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"),
        };
    }
    if is(sub, "list") {
        // functionListCommand: each option once, LIBRARYNAME needs its pattern.
        let (mut with_code, mut library) = (false, false);
        let mut i = 2;
        while i < argv.len() {
            if !with_code && is(argv[i], "withcode") {
                with_code = true;
                i += 1;
            } else if !library && is(argv[i], "libraryname") {
                if i + 1 >= argv.len() {
                    return Reply::err("ERR library name argument was not given");
                }
                library = true;
                i += 2;
            } else {
                // Redis's functionListCommand sends this with addReplyErrorSds, which maps
                // CR/LF to spaces without trimming them (checked by the random differential
                // test: `FUNCTION LIST "\n"` is `Unknown argument ` plus a space).
                let mut msg = b"ERR Unknown argument ".to_vec();
                msg.extend(super::cstr(argv[i]).iter().map(|&c| {
                    if c == b'\r' || c == b'\n' {
                        b' '
                    } else {
                        c
                    }
                }));
                return Reply::Error(msg.into());
            }
        }
        return Reply::Array(vec![]);
    }
    if is(sub, "help") {
        return help(
            "FUNCTION",
            &[
                "FLUSH [ASYNC|SYNC]",
                "    Delete all the libraries (Ringlet has no scripting: there are none).",
                "LIST [WITHCODE] [LIBRARYNAME <pattern>]",
                "    Return the libraries (always none).",
            ],
        );
    }
    super::err_with_arg("ERR unknown subcommand '", sub, "'. Try FUNCTION HELP.")
}

pub fn function_flush(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    function_reply(argv)
}

pub fn function_list(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    function_reply(argv)
}

pub fn function_help(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    function_reply(argv)
}

/// The single node's side of the shared node-local commands (`cmd::node`).
impl super::node::NodeContext for Shared {
    fn config_params(&self) -> Vec<(&'static str, String)> {
        let c = &self.config;
        // What INFO memory says: the single node evicts the least recently used entries
        // when full (a cache: engine eviction by access time).
        let mut p = super::node::base_config_params(
            std::net::SocketAddr::new(c.bind, self.port),
            c.memory_mb << 20,
            "allkeys-lru",
            self.requirepass.read().as_deref(),
        );
        p.extend([
            ("io-threads", c.threads_effective().to_string()),
            ("cluster-enabled", "no".to_string()),
            // Ringlet's: keys the index holds before it grows (CONFIG SET grows it now).
            ("index-keys", self.db.lock().index_capacity().to_string()),
        ]);
        p.extend(self.hash_encoding.params());
        p
    }

    /// `requirepass`, `index-keys` and the `hash-max-listpack-*` pair can change at run
    /// time; the others are fixed at startup.
    fn config_settable(&self) -> Vec<&'static str> {
        ["requirepass", "index-keys"]
            .into_iter()
            .chain(super::keyspace::HashEncodingMax::names())
            .collect()
    }

    fn config_apply(&self, pairs: &[(String, &[u8])]) -> Result<(), Reply> {
        // index-keys: parsed before anything is applied (all or nothing, as Redis).
        let index_keys = super::node::index_keys_arg(pairs)?;
        let new_pass = pairs
            .iter()
            .find(|(n, _)| n == "requirepass")
            .map(|(_, v)| *v);
        if new_pass.is_some_and(|p| p.is_empty()) && !self.config.bind.is_loopback() {
            return Err(Reply::err(
                "ERR CONFIG SET failed (possibly related to argument 'requirepass') - \
                 a node bound to a non-loopback address must keep a password",
            ));
        }
        // (It skips names not its own, index-keys included.)
        self.hash_encoding.set(pairs)?;
        if let Some(k) = index_keys {
            // Grows the index now (a bulk load about to write k keys in all); never shrinks.
            self.db.lock().reserve_index(k);
        }
        if let Some(p) = new_pass {
            // An empty password removes authentication, as in Redis; refused above on a node
            // that listens beyond loopback (it was allowed to start only because one was set).
            let pass = if p.is_empty() { None } else { Some(p.to_vec()) };
            // The default user's password (Redis: `requirepass` is the default user's).
            let _ = self.acl.update(|u| {
                u.set_default_password(pass.as_deref());
                Ok(())
            });
            *self.requirepass.write() = pass;
        }
        Ok(())
    }

    fn monitor(&self) -> &super::slowlog::Monitor {
        &self.monitor
    }

    fn engine_stats(&self) -> ringlet_engine::EngineStats {
        self.db.lock().stats()
    }

    fn key_footprint(&self, key: &[u8], now_ms: u64) -> Option<u64> {
        super::node::live_footprint(&self.db.lock(), key, now_ms)
    }

    fn connected_clients(&self) -> u64 {
        crate::shared::Stats::get(&self.stats.connected)
    }

    fn maxmemory_policy(&self) -> String {
        "allkeys-lru".to_string()
    }

    fn memory_extra_lines(&self) -> String {
        let s = self.db.lock().stats();
        format!(
            "ringlet_used_memory_index:{}\r\nringlet_index_load_factor:{:.3}\r\n",
            s.index_bytes, s.index_load_factor
        )
    }

    fn info_sections(&self) -> &'static [(&'static [&'static str], bool)] {
        &[
            (&["server"], true),
            (&["clients"], true),
            (&["memory"], true),
            (&["stats"], true),
            (&["replication"], true),
            (&["cpu"], true),
            // Redis's order; commandstats and latencystats are not in the default set.
            (&["commandstats"], false),
            (&["errorstats"], true),
            (&["latencystats"], false),
            (&["keyspace"], true),
        ]
    }

    fn info_section(&self, name: &str) -> String {
        crate::info::section(self, name)
    }
}
