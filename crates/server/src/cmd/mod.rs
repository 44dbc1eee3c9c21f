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
//! Arity, flags and the COMMAND INFO/DOCS replies come from `table_data.rs`, generated from a
//! real Redis 7 (see `tools/gen_command_table.py`), so they cannot drift from what redis-cli
//! and cluster-aware clients expect. Handlers are attached by full name (`client|setname`);
//! a unit test checks that every command in the table has one.
//!
//! Families, one file each: [`connection`] (PING ECHO HELLO AUTH QUIT SELECT CLIENT),
//! [`server`] (COMMAND INFO CONFIG DBSIZE FLUSHALL FLUSHDB), [`string`] (GET SET INCR ...),
//! [`keyspace`] (DEL EXISTS TYPE EXPIRE TTL KEYS SCAN RANDOMKEY ...), [`transaction`]
//! (MULTI EXEC DISCARD).

pub mod bits;
pub mod connection;
pub mod keyspace;
pub mod lcs;
pub mod record;
pub mod server;
pub mod string;
pub mod table_data;
pub mod table_data_helpers;
pub mod transaction;

use crate::reply::{errors, Reply};
use crate::shared::{ClientState, Shared, Stats};
use ringlet_codec::resp::Proto;
use ringlet_engine::Reader;
use std::collections::HashMap;
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

/// One entry of the command table.
pub struct Command {
    /// Lowercase full name: `get`, `client|setname`.
    pub name: &'static str,
    /// Redis arity: `n > 0` exactly n arguments (name included), `n < 0` at least `-n`.
    pub arity: i64,
    /// Runs before AUTH (AUTH, HELLO, QUIT).
    pub no_auth: bool,
    /// `None` only for containers, which always resolve to a subcommand or fail arity.
    pub handler: Option<Handler>,
    /// Subcommands by lowercase name (containers only).
    pub subcommands: HashMap<&'static str, usize>,
    /// The COMMAND INFO entry (subcommands included) and the COMMAND DOCS entry.
    pub info: Reply,
    pub docs: Reply,
}

/// The command table: top-level commands by lowercase name, all commands by index.
pub struct Table {
    pub commands: Vec<Command>,
    pub by_name: HashMap<&'static str, usize>,
    /// Top-level command indexes, in table order (COMMAND, COMMAND COUNT).
    pub top: Vec<usize>,
}

fn handler_for(name: &str) -> Option<Handler> {
    let h: Handler = match name {
        "ping" => connection::ping,
        "echo" => connection::echo,
        "hello" => connection::hello,
        "auth" => connection::auth,
        "quit" => connection::quit,
        "select" => connection::select,
        "client|setname" => connection::client_setname,
        "client|getname" => connection::client_getname,
        "client|id" => connection::client_id,
        "client|info" => connection::client_info,
        "client|list" => connection::client_list,
        "client|help" => connection::client_help,
        "command" => server::command,
        "command|count" => server::command_count,
        "command|docs" => server::command_docs,
        "command|info" => server::command_info,
        "command|help" => server::command_help,
        "config|get" => server::config_get,
        "config|set" => server::config_set,
        "config|help" => server::config_help,
        "info" => server::info,
        "dbsize" => server::dbsize,
        "flushall" => server::flushall,
        "flushdb" => server::flushall,
        "get" => string::get,
        "set" => string::set,
        "setnx" => string::setnx,
        "setex" => string::setex,
        "psetex" => string::psetex,
        "getset" => string::getset,
        "getdel" => string::getdel,
        "getex" => string::getex,
        "mget" => string::mget,
        "mset" => string::mset,
        "msetnx" => string::msetnx,
        "incr" => string::incr,
        "decr" => string::decr,
        "incrby" => string::incrby,
        "decrby" => string::decrby,
        "incrbyfloat" => string::incrbyfloat,
        "append" => string::append,
        "strlen" => string::strlen,
        "getrange" => string::getrange,
        "setrange" => string::setrange,
        "del" => keyspace::del,
        "unlink" => keyspace::del,
        "exists" => keyspace::exists,
        "type" => keyspace::type_,
        "expire" => keyspace::expire,
        "pexpire" => keyspace::pexpire,
        "expireat" => keyspace::expireat,
        "pexpireat" => keyspace::pexpireat,
        "ttl" => keyspace::ttl,
        "pttl" => keyspace::pttl,
        "persist" => keyspace::persist,
        "keys" => keyspace::keys,
        "scan" => keyspace::scan,
        "randomkey" => keyspace::randomkey,
        "touch" => keyspace::touch,
        "lcs" => lcs::lcs_cmd,
        "expiretime" => keyspace::expiretime,
        "pexpiretime" => keyspace::pexpiretime,
        "setbit" => bits::setbit_cmd,
        "getbit" => bits::getbit_cmd,
        "bitcount" => bits::bitcount_cmd,
        "bitpos" => bits::bitpos_cmd,
        "rename" => keyspace::rename,
        "renamenx" => keyspace::renamenx,
        "copy" => keyspace::copy,
        "object|encoding" => keyspace::object_encoding,
        "object|refcount" => keyspace::object_refcount,
        "object|help" => keyspace::object_help,
        "multi" => transaction::multi,
        "exec" => transaction::exec,
        "discard" => transaction::discard,
        "time" => server::time,
        "substr" => string::getrange,
        "function|flush" => server::function_flush,
        "function|list" => server::function_list,
        "function|help" => server::function_help,
        "hset" | "hsetnx" | "hmset" | "hget" | "hmget" | "hgetall" | "hdel" | "hlen"
        | "hexists" | "hkeys" | "hvals" | "hincrby" | "hincrbyfloat" | "hstrlen" => {
            record::hash_cmd
        }
        "link|set" | "link|add" | "link|get" | "link|del" => record::link_cmd,
        "chase" => record::chase_cmd,
        "hscan" => record::hscan_cmd,
        "hrandfield" => record::hrandfield_cmd,
        _ => return None,
    };
    Some(h)
}

/// Reads `(name, arity, no_auth)` out of a COMMAND INFO entry.
fn parse_info(info: &Reply) -> (&'static str, i64, bool) {
    let Reply::Array(items) = info else {
        panic!("generated COMMAND INFO entry is not an array")
    };
    let name = match &items[0] {
        Reply::Bulk(b) => {
            let s = std::str::from_utf8(b).expect("generated command name is ASCII");
            // Names live for the whole process (the table is built once).
            &*Box::leak(s.to_owned().into_boxed_str())
        }
        other => panic!("generated command name is {other:?}"),
    };
    let Reply::Int(arity) = items[1] else {
        panic!("generated arity is not an integer")
    };
    let no_auth = match &items[2] {
        Reply::Set(flags) => flags
            .iter()
            .any(|f| matches!(f, Reply::Simple(s) if &s[..] == b"no_auth")),
        _ => false,
    };
    (name, arity, no_auth)
}

fn build_table() -> Table {
    let mut commands = Vec::new();
    let mut by_name = HashMap::new();
    let mut top = Vec::new();
    let mut docs_by_sub: HashMap<String, Reply> = HashMap::new();
    // Redis's commands (generated), then Ringlet's own (LINK, CHASE).
    for (_, info, docs) in table_data::commands()
        .into_iter()
        .chain(record::own_commands())
    {
        let (name, arity, no_auth) = parse_info(&info);
        // Subcommand docs live inside the container's docs map under "subcommands".
        if let Reply::Map(pairs) = &docs {
            for (k, v) in pairs {
                if matches!(k, Reply::Bulk(b) if &b[..] == b"subcommands") {
                    if let Reply::Map(subs) = v {
                        for (sk, sv) in subs {
                            if let Reply::Bulk(sk) = sk {
                                docs_by_sub
                                    .insert(String::from_utf8_lossy(sk).into_owned(), sv.clone());
                            }
                        }
                    }
                }
            }
        }
        let mut subcommands = HashMap::new();
        if let Reply::Array(items) = &info {
            if let Some(Reply::Set(subs) | Reply::Array(subs)) = items.get(9) {
                for sub in subs {
                    let (sub_name, sub_arity, sub_no_auth) = parse_info(sub);
                    let short = sub_name.split_once('|').map_or(sub_name, |(_, s)| s);
                    let idx = commands.len();
                    commands.push(Command {
                        name: sub_name,
                        arity: sub_arity,
                        no_auth: sub_no_auth,
                        handler: handler_for(sub_name),
                        subcommands: HashMap::new(),
                        info: sub.clone(),
                        docs: docs_by_sub
                            .get(sub_name)
                            .cloned()
                            .unwrap_or(Reply::Map(vec![])),
                    });
                    subcommands.insert(short, idx);
                }
            }
        }
        let idx = commands.len();
        commands.push(Command {
            name,
            arity,
            no_auth,
            handler: handler_for(name),
            subcommands,
            info,
            docs,
        });
        by_name.insert(name, idx);
        top.push(idx);
    }
    Table {
        commands,
        by_name,
        top,
    }
}

/// The command table, built on first use.
pub fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(build_table)
}

/// Lowercase `name` into `buf` if it is short enough to be a command name.
fn lower<'b>(name: &[u8], buf: &'b mut [u8; 32]) -> Option<&'b str> {
    let out = buf.get_mut(..name.len())?;
    for (o, c) in out.iter_mut().zip(name) {
        *o = c.to_ascii_lowercase();
    }
    std::str::from_utf8(out).ok()
}

/// Find a command (and subcommand) for `argv`.
///
/// # Errors
/// The exact Redis error reply for an unknown command or subcommand.
pub fn lookup(argv: &[&[u8]]) -> Result<usize, Reply> {
    let t = table();
    let mut buf = [0u8; 32];
    let name = argv.first().copied().unwrap_or_default();
    let Some(&idx) = lower(name, &mut buf).and_then(|n| t.by_name.get(n)) else {
        return Err(unknown_command(argv));
    };
    let cmd = &t.commands[idx];
    if cmd.subcommands.is_empty() || argv.len() < 2 {
        return Ok(idx);
    }
    let mut sbuf = [0u8; 32];
    match lower(argv[1], &mut sbuf).and_then(|s| cmd.subcommands.get(s)) {
        Some(&sub) => Ok(sub),
        None => Err(unknown_subcommand(argv)),
    }
}

/// The bytes of a C string: Redis formats arguments with `%s`, which stops at a NUL.
fn cstr(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

/// `sdsmapchars(s, "\r\n", "  ")`: user text inside an error must not break the protocol.
fn sanitize(mut v: Vec<u8>) -> Vec<u8> {
    for c in &mut v {
        if *c == b'\r' || *c == b'\n' {
            *c = b' ';
        }
    }
    v
}

fn unknown_command(argv: &[&[u8]]) -> Reply {
    let mut args: Vec<u8> = Vec::new();
    for a in argv.iter().skip(1) {
        if args.len() >= 128 {
            break;
        }
        let room = 128 - args.len();
        let a = cstr(a);
        args.push(b'\'');
        args.extend_from_slice(&a[..a.len().min(room)]);
        args.extend_from_slice(b"' ");
    }
    let name = cstr(argv.first().copied().unwrap_or_default());
    let mut msg = b"ERR unknown command '".to_vec();
    msg.extend_from_slice(&name[..name.len().min(128)]);
    msg.extend_from_slice(b"', with args beginning with: ");
    msg.extend_from_slice(&args);
    Reply::Error(sanitize(msg).into())
}

fn unknown_subcommand(argv: &[&[u8]]) -> Reply {
    let sub = cstr(argv[1]);
    let mut msg = b"ERR unknown subcommand '".to_vec();
    msg.extend_from_slice(&sub[..sub.len().min(128)]);
    msg.extend_from_slice(b"'. Try ");
    msg.extend(cstr(argv[0]).iter().map(|c| c.to_ascii_uppercase()));
    msg.extend_from_slice(b" HELP.");
    Reply::Error(sanitize(msg).into())
}

/// An error reply embedding a user argument the way Redis's `addReplyErrorFormat("%s")` does:
/// the argument's bytes as sent, cut at a NUL, trailing CR/LF trimmed (`sdstrim`), and CR/LF
/// inside turned into spaces.
pub fn err_with_arg(prefix: &str, arg: &[u8], suffix: &str) -> Reply {
    let mut msg = prefix.as_bytes().to_vec();
    msg.extend_from_slice(cstr(arg));
    msg.extend_from_slice(suffix.as_bytes());
    while matches!(msg.last(), Some(b'\r' | b'\n')) {
        msg.pop();
    }
    Reply::Error(sanitize(msg).into())
}

/// `ERR wrong number of arguments for '<fullname>' command`.
pub fn arity_error(name: &str) -> Reply {
    Reply::err_owned(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// Run one request: lookup, arity, auth, then the handler — or, inside MULTI, the queue.
pub fn dispatch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Reply {
    let idx = match lookup(argv) {
        Ok(i) => i,
        Err(e) => return transaction::refuse(ctx, "", e),
    };
    let cmd = &table().commands[idx];
    let argc = argv.len() as i64;
    if (cmd.arity > 0 && cmd.arity != argc) || argc < -cmd.arity {
        return transaction::refuse(ctx, cmd.name, arity_error(cmd.name));
    }
    if !ctx.session.authenticated && !cmd.no_auth && ctx.shared.auth_required() {
        return transaction::refuse(ctx, cmd.name, Reply::err(errors::NOAUTH));
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

/// Run the command at `idx` of the table, already checked: counters, then its handler.
/// EXEC calls it for every queued command.
fn run(ctx: &mut Ctx<'_>, idx: usize, argv: &[&[u8]]) -> Reply {
    let cmd = &table().commands[idx];
    Stats::add(&ctx.shared.stats.commands_processed, 1);
    ctx.session
        .state
        .last_cmd
        .store(idx as u64, Ordering::Relaxed);
    ctx.session
        .state
        .last_cmd_at_ms
        .store(ctx.now_ms, Ordering::Relaxed);
    match cmd.handler {
        Some(h) => h(ctx, argv),
        // A container without subcommand arguments fails arity above; one with a
        // subcommand resolves to it. Reaching here would be a table bug.
        None => arity_error(cmd.name),
    }
}

/// The keys of `argv` by its command's first key, last key and step in COMMAND INFO (empty
/// for an unknown command or one without keys). The cluster front checks a transaction's
/// slot with it.
pub fn command_keys<'a>(argv: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let Ok(idx) = lookup(argv) else {
        return Vec::new();
    };
    let Reply::Array(info) = &table().commands[idx].info else {
        return Vec::new();
    };
    let num = |i: usize| match info.get(i) {
        Some(Reply::Int(n)) => *n,
        _ => 0,
    };
    let (first, last, step) = (num(3), num(4), num(5));
    if first <= 0 || step <= 0 {
        return Vec::new();
    }
    let argc = argv.len() as i64;
    // Negative `last` counts from the end (-1: the last argument).
    let last = if last < 0 {
        argc + last
    } else {
        last.min(argc - 1)
    };
    (first..=last)
        .step_by(step as usize)
        .filter_map(|i| argv.get(i as usize).copied())
        .collect()
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
    fn every_command_has_a_handler() {
        for c in &table().commands {
            if c.subcommands.is_empty() {
                assert!(c.handler.is_some(), "no handler for {}", c.name);
            }
        }
        assert!(table().by_name.contains_key("get"));
        assert!(table().commands[table().by_name["auth"]].no_auth);
        assert!(!table().commands[table().by_name["get"]].no_auth);
    }

    #[test]
    fn unknown_command_text_matches_redis() {
        let r = lookup(&[b"foo", b"a", b"b"]).unwrap_err();
        assert_eq!(
            r,
            Reply::Error("ERR unknown command 'foo', with args beginning with: 'a' 'b' ".into())
        );
        let r = lookup(&[b"client", b"nope"]).unwrap_err();
        assert_eq!(
            r,
            Reply::Error("ERR unknown subcommand 'nope'. Try CLIENT HELP.".into())
        );
        let r = lookup(&[b"fo\r\no"]).unwrap_err();
        assert_eq!(
            r,
            Reply::Error("ERR unknown command 'fo  o', with args beginning with: ".into())
        );
    }

    #[test]
    fn keys_from_command_info() {
        let keys = |a: &[&'static [u8]]| command_keys(a);
        assert_eq!(keys(&[b"get", b"k"]), vec![&b"k"[..]]);
        assert_eq!(
            keys(&[b"mset", b"a", b"1", b"b", b"2"]),
            vec![&b"a"[..], b"b"]
        );
        assert_eq!(keys(&[b"del", b"a", b"b"]), vec![&b"a"[..], b"b"]);
        assert_eq!(keys(&[b"object", b"encoding", b"k"]), vec![&b"k"[..]]);
        assert_eq!(keys(&[b"lcs", b"a", b"b", b"len"]), vec![&b"a"[..], b"b"]);
        assert!(keys(&[b"ping"]).is_empty());
        assert!(keys(&[b"nosuch", b"k"]).is_empty());
    }

    #[test]
    fn subcommand_lookup() {
        let i = lookup(&[b"CLIENT", b"SetName", b"x"]).unwrap();
        assert_eq!(table().commands[i].name, "client|setname");
        let i = lookup(&[b"client"]).unwrap();
        assert_eq!(table().commands[i].name, "client");
    }
}
