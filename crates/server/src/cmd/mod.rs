//! Command table and dispatch: Redis 7's `processCommand` checks, in Redis's order.
//!
//! # How a request is run
//!
//! 1. look the name up (case-insensitive); a container (CLIENT, CONFIG, COMMAND) with at least
//!    one argument looks up its subcommand. Not found: `unknown command '...'` with the first
//!    arguments quoted, or `unknown subcommand '...'. Try CLIENT HELP.`;
//! 2. arity (`wrong number of arguments for 'client|setname' command`);
//! 3. authentication: without AUTH only `no_auth` commands (AUTH, HELLO, QUIT) run;
//! 4. the handler, which parses its own options and replies.
//!
//! The table — names, arity, flags, key positions, COMMAND INFO/DOCS — is `ringlet-command`'s,
//! the one a cluster node's front resolves requests with too. This file attaches the single
//! node's handlers to it by full name (`client|setname`); a unit test checks that every
//! command the table serves in `Mode::Single` has one.
//!
//! Key commands written once for both fronts run over [`keyspace_api::Keyspace`]: the table
//! wraps them with `local!` (the engine as the keyspace); a cluster node's front calls the
//! same functions over the replica core.
//!
//! Families, one file each: [`connection`] (PING ECHO HELLO AUTH QUIT SELECT CLIENT),
//! [`server`] (COMMAND INFO CONFIG), [`string`] (GET SET INCR ...), [`keyspace`] (DEL EXISTS
//! TYPE EXPIRE TTL KEYS SCAN RANDOMKEY DBSIZE FLUSHALL ...), [`transaction`]
//! (MULTI EXEC DISCARD).

pub mod acl;
pub mod bits;
pub mod connection;
pub mod keyspace;
pub mod keyspace_api;
pub mod lcs;
pub mod node;
pub mod record;
pub mod server;
pub mod slowlog;
pub mod string;
pub mod transaction;

use crate::reply::{errors, Reply};
use crate::shared::{ClientState, Shared, Stats};
use ringlet_codec::resp::Proto;
use ringlet_engine::Reader;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// Per-connection state the commands read and change.
pub struct Session {
    pub id: u64,
    pub proto: Proto,
    pub authenticated: bool,
    /// Set by QUIT: the connection flushes its replies and closes.
    pub quit: bool,
    /// The commands queued since MULTI; `None` outside a transaction.
    pub multi: Option<transaction::Queue>,
    pub state: Arc<ClientState>,
    /// The ACL user this connection runs as (the default user until AUTH).
    pub user: ringlet_command::acl::ConnUser,
}

/// What a handler gets: shared state, its worker's reader and scratch buffer, its session,
/// and the time of this batch of requests.
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    pub reader: &'a Reader,
    pub scratch: &'a mut Vec<u8>,
    pub session: &'a mut Session,
    pub now_ms: u64,
}

/// A command implementation. `argv[0]` is the command name as sent.
pub type Handler = fn(&mut Ctx<'_>, &[&[u8]]) -> Reply;

pub use ringlet_command::table::{arity_error, command_keys, cstr, err_with_arg, lookup};
pub use ringlet_command::{table, Mode};

/// A handler written once over [`keyspace_api::Keyspace`] (both fronts), run on the single
/// node's engine: [`keyspace_api::Local`], polled once by [`keyspace_api::ready`] (its
/// futures never wait).
macro_rules! local {
    ($f:path) => {{
        fn h(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
            let ks = keyspace_api::Local::new(ctx);
            let reply = keyspace_api::ready($f(&ks, argv)).unwrap_or_else(|e| e);
            ks.finish(ctx);
            reply
        }
        h as Handler
    }};
}

fn handler_for(name: &str) -> Option<Handler> {
    let h: Handler = match name {
        "ping" => connection::ping,
        "echo" => connection::echo,
        "hello" => connection::hello,
        "auth" => connection::auth,
        "quit" => connection::quit,
        "reset" => connection::reset,
        "acl|cat" | "acl|deluser" | "acl|dryrun" | "acl|genpass" | "acl|getuser" | "acl|list"
        | "acl|load" | "acl|log" | "acl|save" | "acl|setuser" | "acl|users" | "acl|whoami"
        | "acl|help" => acl::acl,
        "select" => connection::select,
        "client|setname" => connection::client_setname,
        "client|getname" => connection::client_getname,
        "client|id" => connection::client_id,
        "client|setinfo" => connection::client_setinfo,
        "client|info" => connection::client_info,
        "client|list" => connection::client_list,
        "client|help" => connection::client_help,
        "command" | "command|count" | "command|docs" | "command|info" | "command|getkeys"
        | "command|list" | "command|help" => server::command,
        // A Redis without cluster support answers these with an error; so does this node.
        "cluster|slots"
        | "cluster|shards"
        | "cluster|nodes"
        | "cluster|keyslot"
        | "cluster|info"
        | "cluster|myid"
        | "cluster|help"
        | "cluster|setslot"
        | "cluster|getkeysinslot"
        | "cluster|countkeysinslot"
        | "cluster|ringlet-load"
        | "readonly"
        | "readwrite" => server::cluster_disabled,
        "config|get" => server::config_get,
        "config|set" => server::config_set,
        "config|help" => server::config_help,
        "config|resetstat" => server::config_resetstat,
        "info" => server::info,
        "memory|usage" | "memory|stats" | "memory|doctor" | "memory|help" => server::memory,
        "slowlog|get" | "slowlog|len" | "slowlog|reset" | "slowlog|help" => server::slowlog,
        "latency|latest" | "latency|history" | "latency|reset" | "latency|doctor"
        | "latency|help" => server::latency,
        "dbsize" => local!(keyspace::dbsize),
        "flushall" => local!(keyspace::flushall),
        "flushdb" => local!(keyspace::flushall),
        "get" => local!(string::get),
        "set" => local!(string::set),
        "setnx" => local!(string::setnx),
        "setex" => local!(string::setex),
        "psetex" => local!(string::psetex),
        "getset" => local!(string::getset),
        "getdel" => local!(string::getdel),
        "getex" => local!(string::getex),
        "mget" => local!(string::mget),
        "mset" => local!(string::mset),
        "msetnx" => local!(string::msetnx),
        "incr" => local!(string::incr),
        "decr" => local!(string::decr),
        "incrby" => local!(string::incrby),
        "decrby" => local!(string::decrby),
        "incrbyfloat" => local!(string::incrbyfloat),
        "append" => local!(string::append),
        "strlen" => local!(string::strlen),
        "getrange" => local!(string::getrange),
        "setrange" => local!(string::setrange),
        "del" => local!(keyspace::del),
        "unlink" => local!(keyspace::del),
        "exists" => local!(keyspace::exists),
        "type" => local!(keyspace::type_),
        "expire" => local!(keyspace::expire),
        "pexpire" => local!(keyspace::pexpire),
        "expireat" => local!(keyspace::expireat),
        "pexpireat" => local!(keyspace::pexpireat),
        "ttl" => local!(keyspace::ttl),
        "pttl" => local!(keyspace::pttl),
        "persist" => local!(keyspace::persist),
        "keys" => local!(keyspace::keys),
        "scan" => local!(keyspace::scan),
        "randomkey" => local!(keyspace::randomkey),
        "touch" => local!(keyspace::touch),
        "lcs" => local!(lcs::lcs_cmd),
        "expiretime" => local!(keyspace::expiretime),
        "pexpiretime" => local!(keyspace::pexpiretime),
        "setbit" => local!(bits::setbit_cmd),
        "getbit" => local!(bits::getbit_cmd),
        "bitcount" => local!(bits::bitcount_cmd),
        "bitpos" => local!(bits::bitpos_cmd),
        "rename" => local!(keyspace::rename),
        "renamenx" => local!(keyspace::renamenx),
        "copy" => local!(keyspace::copy),
        "dump" => local!(keyspace::dump),
        "restore" | "restore-asking" => local!(keyspace::restore),
        "object|encoding" | "object|refcount" | "object|help" => local!(keyspace::object),
        "multi" => transaction::multi,
        "exec" => transaction::exec,
        "discard" => transaction::discard,
        "time" => server::time,
        "wait" => server::wait,
        "role" => server::role,
        "substr" => local!(string::getrange),
        "function|flush" => server::function_flush,
        "function|list" => server::function_list,
        "function|help" => server::function_help,
        "hset" | "hsetnx" | "hmset" | "hget" | "hmget" | "hgetall" | "hdel" | "hlen"
        | "hexists" | "hkeys" | "hvals" | "hincrby" | "hincrbyfloat" | "hstrlen" => {
            local!(record::hash)
        }
        "link|set" | "link|add" | "link|get" | "link|del" => local!(record::link),
        "record|set" => local!(record::record_set),
        "chase" => record::chase_cmd,
        "hscan" => local!(record::hscan),
        "hrandfield" => record::hrandfield_cmd,
        _ => return None,
    };
    Some(h)
}

/// The single node's handler of every spec, by table index (`None`: served in cluster mode
/// only, or a container, which always resolves to a subcommand or fails arity).
fn handlers() -> &'static [Option<Handler>] {
    static HANDLERS: OnceLock<Vec<Option<Handler>>> = OnceLock::new();
    HANDLERS.get_or_init(|| table().specs.iter().map(|s| handler_for(s.name)).collect())
}

/// Run one request: lookup, arity, auth, then the handler — or, inside MULTI, the queue.
pub fn dispatch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let idx = match lookup(argv) {
        Ok(i) => i,
        Err(e) => return rejected(ctx, None, "", e),
    };
    let cmd = table().spec(idx);
    let needs_auth = !ctx.session.authenticated && ctx.shared.auth_required();
    if let Err(e) = cmd.check(argv.len(), needs_auth, Mode::Single) {
        return rejected(ctx, Some(idx), cmd.name, e);
    }
    // ACL (ringlet_command::acl): one atomic load and a branch for an unrestricted user.
    if let Err(e) = ctx.session.user.check(&ctx.shared.acl, idx, argv) {
        return match e {
            ringlet_command::acl::CheckError::Denied(r) => rejected(ctx, Some(idx), cmd.name, r),
            ringlet_command::acl::CheckError::UserGone => {
                ctx.session.quit = true;
                Reply::err(ringlet_command::acl::USER_GONE)
            }
        };
    }
    if let Some(q) = ctx.session.multi.as_mut() {
        if !transaction::runs_at_once(cmd.name.as_bytes()) {
            return q.push(argv);
        }
    }
    if cmd.name == "exec" {
        // EXEC takes the write side of `Shared::exec` for its whole queue.
        return run(ctx, idx, argv);
    }
    let shared = ctx.shared;
    let _exec = shared.exec.read();
    run(ctx, idx, argv)
}

/// A request refused before it ran (unknown, arity, auth, ACL): counted as Redis counts it
/// (`rejected_calls` of a known command, and the error's code in errorstats), then refused.
fn rejected(ctx: &mut Ctx<'_>, idx: Option<usize>, name: &str, err: Reply) -> Reply {
    let stats = &ctx.shared.cmdstats;
    if let Some(i) = idx {
        stats
            .by_index(i)
            .record(0, crate::cmdstats::Outcome::Rejected);
    }
    if let Reply::Error(text) = &err {
        stats.record_error(text);
    }
    transaction::refuse(ctx, name, err)
}

/// Run the command at `idx` of the table, already checked: counters, then its handler.
/// EXEC calls it for every queued command.
fn run(ctx: &mut Ctx<'_>, idx: usize, argv: &[&[u8]]) -> Reply {
    let cmd = table().spec(idx);
    Stats::add(&ctx.shared.stats.commands_processed, 1);
    ctx.session
        .state
        .last_cmd
        .store(idx as u64, Ordering::Relaxed);
    ctx.session
        .state
        .last_cmd_at_ms
        .store(ctx.now_ms, Ordering::Relaxed);
    let started = std::time::Instant::now();
    let reply = match handlers()[idx] {
        Some(h) => h(ctx, argv),
        // A container without subcommand arguments fails arity above; one with a
        // subcommand resolves to it. Reaching here would be a table bug.
        None => arity_error(cmd.name),
    };
    let us = started.elapsed().as_micros() as u64;
    let error = match &reply {
        Reply::Error(text) => Some(&text[..]),
        _ => None,
    };
    if let Some(text) = error {
        ctx.shared.cmdstats.record_error(text);
    }
    ctx.shared
        .cmdstats
        .by_index(idx)
        .record(us, crate::cmdstats::Outcome::of_error(error));
    // SLOWLOG / LATENCY (EXEC is not logged itself, its commands are: Redis's
    // `skip_slowlog`).
    if cmd.name != "exec" {
        let state = &ctx.session.state;
        ctx.shared.monitor.record(
            argv,
            cmd.fast,
            us,
            || ctx.now_ms / 1000,
            || (state.addr.to_string(), state.name.lock().clone()),
        );
    }
    reply
}

/// Parse a Redis integer argument (`string2ll`: no sign but `-`, no leading zeros or spaces).
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    ringlet_codec::resp::int::string2ll(b)
}

/// [`parse_i64`] or the Redis "not an integer" error.
pub fn arg_i64(b: &[u8]) -> Result<i64, Reply> {
    parse_i64(b).ok_or(Reply::err(errors::NOT_INTEGER))
}

/// Case-insensitive comparison of an option argument with `word` (ASCII).
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_served_by_a_single_node_has_a_handler() {
        let t = table();
        for (i, c) in t.specs.iter().enumerate() {
            if c.subcommands.is_empty() && c.served_in(Mode::Single) {
                assert!(handlers()[i].is_some(), "no handler for {}", c.name);
            }
        }
        // Cluster-only commands have none: the table refuses them before a handler runs.
        let m = t.index("memgest").unwrap();
        let sub = t.spec(m).subcommands["list"];
        assert!(handlers()[sub].is_none());
    }
}
