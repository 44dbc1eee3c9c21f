//! The command table: every command any front serves, with Redis 7's name, arity, flags,
//! key positions and COMMAND INFO/DOCS entries, and the modes it is served in.
//!
//! Redis's commands come from `table_data.rs`, generated from a real Redis 7
//! (`tools/gen_command_table.py`), so they cannot drift from what redis-cli and cluster-aware
//! clients expect; Ringlet's own (LINK, CHASE, MEMGEST, RECORDS, CLUSTER RINGLET-LOAD) from
//! `own.rs`. A front resolves a request here ([`lookup`], then [`Spec::check`]) and runs its
//! own handler for the spec's index; each front has a test that every spec served in its mode
//! has a handler, so a command cannot be added to one front and forgotten in the other.

use crate::reply::{errors, Reply};
use std::collections::HashMap;
use std::sync::OnceLock;

/// Where a command is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `ringlet server` without a cluster.
    Single,
    /// A node of `ringlet up` / `ringlet server --cluster`.
    Cluster,
}

/// Commands only a cluster node serves; a single node refuses them with
/// [`cluster_only_error`]. CLUSTER, READONLY and READWRITE are *not* here: a Redis without
/// cluster support answers them with an error of its own, and so does the single node.
const CLUSTER_ONLY: &[&str] = &["memgest", "records", "migrate"];

/// One entry of the table.
#[derive(Debug)]
pub struct Spec {
    /// Lowercase full name: `get`, `client|setname`.
    pub name: &'static str,
    /// Redis arity: `n > 0` exactly n arguments (name included), `n < 0` at least `-n`.
    pub arity: i64,
    /// Runs before AUTH (AUTH, HELLO, QUIT).
    pub no_auth: bool,
    /// Flagged `write` in COMMAND INFO.
    pub write: bool,
    /// Flagged `fast` in COMMAND INFO (LATENCY files it under `fast-command`, others under
    /// `command`, as Redis does).
    pub fast: bool,
    /// Legacy key positions: first, last (negative counts from the end), step; 0 = no keys.
    pub first_key: i64,
    pub last_key: i64,
    pub key_step: i64,
    /// Served by a single node (every spec is served by a cluster node).
    pub single: bool,
    /// Subcommands by lowercase short name (containers only).
    pub subcommands: HashMap<&'static str, usize>,
    /// The COMMAND INFO entry (subcommands included) and the COMMAND DOCS entry.
    pub info: Reply,
    pub docs: Reply,
}

impl Spec {
    /// The top-level name: `client` for `client|setname`.
    pub fn top_name(&self) -> &'static str {
        self.name.split_once('|').map_or(self.name, |(c, _)| c)
    }

    /// Whether `mode` serves this command.
    pub fn served_in(&self, mode: Mode) -> bool {
        mode == Mode::Cluster || self.single
    }

    /// Whether `argc` arguments (name included) satisfy the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = argc as i64;
        if self.arity >= 0 {
            argc == self.arity
        } else {
            argc >= -self.arity
        }
    }

    /// Redis's `processCommand` checks after the lookup, in its order: arity, then
    /// authentication (`auth_required && !authenticated` lets only `no_auth` commands run),
    /// then the mode.
    ///
    /// # Errors
    /// Redis's exact error reply.
    pub fn check(&self, argc: usize, needs_auth: bool, mode: Mode) -> Result<(), Reply> {
        if !self.arity_ok(argc) {
            return Err(arity_error(self.name));
        }
        if needs_auth && !self.no_auth {
            return Err(Reply::err(errors::NOAUTH));
        }
        if !self.served_in(mode) {
            return Err(cluster_only_error(self.top_name()));
        }
        Ok(())
    }

    /// The keys of `argv` by this command's first key, last key and step.
    pub fn keys<'a>(&self, argv: &[&'a [u8]]) -> Vec<&'a [u8]> {
        self.key_args(argv).collect()
    }

    /// [`Spec::keys`] without collecting them (per-command statistics count every key's
    /// slot, and an allocation per command showed in a pipelined GET's profile).
    pub fn key_args<'a, 'b>(&self, argv: &'b [&'a [u8]]) -> impl Iterator<Item = &'a [u8]> + 'b {
        let (first, last, step) = (self.first_key, self.last_key, self.key_step);
        let argc = argv.len() as i64;
        // Negative `last` counts from the end (-1: the last argument); a command without
        // keys (first or step 0) gives an empty range.
        let last = if first <= 0 || step <= 0 {
            0
        } else if last < 0 {
            argc + last
        } else {
            last.min(argc - 1)
        };
        (first.max(1)..=last)
            .step_by(step.max(1) as usize)
            .filter_map(|i| argv.get(i as usize).copied())
    }
}

/// The table: every spec by index, top-level ones by name.
#[derive(Debug)]
pub struct Table {
    pub specs: Vec<Spec>,
    pub by_name: HashMap<&'static str, usize>,
    /// Top-level indexes in table order (COMMAND, COMMAND COUNT).
    pub top: Vec<usize>,
}

impl Table {
    /// The spec at `idx` (an index [`lookup`] or [`find`] returned).
    pub fn spec(&self, idx: usize) -> &Spec {
        &self.specs[idx]
    }

    /// The index of a top-level command by lowercase name.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }
}

fn item(info: &Reply, n: usize) -> Option<&Reply> {
    match info {
        Reply::Array(items) => items.get(n),
        _ => None,
    }
}

fn int(info: &Reply, n: usize) -> i64 {
    match item(info, n) {
        Some(Reply::Int(v)) => *v,
        _ => 0,
    }
}

fn has_flag(info: &Reply, flag: &str) -> bool {
    match item(info, 2) {
        Some(Reply::Set(flags) | Reply::Array(flags)) => flags
            .iter()
            .any(|f| matches!(f, Reply::Simple(s) if &s[..] == flag.as_bytes())),
        _ => false,
    }
}

/// A spec from a COMMAND INFO entry (subcommands are added by the caller).
fn spec_of(info: Reply, docs: Reply) -> Spec {
    let name = match item(&info, 0) {
        Some(Reply::Bulk(b)) => {
            let s = std::str::from_utf8(b).expect("command names are ASCII");
            // Names live for the whole process (the table is built once).
            &*Box::leak(s.to_owned().into_boxed_str())
        }
        other => panic!("command name is {other:?}"),
    };
    let top = name.split_once('|').map_or(name, |(c, _)| c);
    Spec {
        name,
        arity: int(&info, 1),
        no_auth: has_flag(&info, "no_auth"),
        write: has_flag(&info, "write"),
        fast: has_flag(&info, "fast"),
        first_key: int(&info, 3),
        last_key: int(&info, 4),
        key_step: int(&info, 5),
        single: !CLUSTER_ONLY.contains(&top),
        subcommands: HashMap::new(),
        info,
        docs,
    }
}

/// The docs of each subcommand, found inside its container's docs under "subcommands".
fn sub_docs(docs: &Reply) -> HashMap<String, Reply> {
    let mut out = HashMap::new();
    if let Reply::Map(pairs) = docs {
        for (k, v) in pairs {
            if matches!(k, Reply::Bulk(b) if &b[..] == b"subcommands") {
                if let Reply::Map(subs) = v {
                    for (sk, sv) in subs {
                        if let Reply::Bulk(sk) = sk {
                            out.insert(String::from_utf8_lossy(sk).into_owned(), sv.clone());
                        }
                    }
                }
            }
        }
    }
    out
}

fn build() -> Table {
    let mut t = Table {
        specs: Vec::new(),
        by_name: HashMap::new(),
        top: Vec::new(),
    };
    let mut extra_subs: HashMap<&str, Vec<(Reply, Reply)>> = HashMap::new();
    for (container, info, docs) in crate::own::subcommands() {
        extra_subs.entry(container).or_default().push((info, docs));
    }
    for (_, mut info, mut docs) in crate::table_data::commands()
        .into_iter()
        .chain(crate::own::commands())
    {
        let name_of = |r: &Reply| match item(r, 0) {
            Some(Reply::Bulk(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        };
        let top_name = name_of(&info);
        // Ringlet's subcommands of a Redis container join its INFO and DOCS entries.
        if let Some(extra) = extra_subs.remove(top_name.as_str()) {
            for (sub_info, sub_docs) in extra {
                let sub_name = name_of(&sub_info);
                if let Reply::Array(items) = &mut info {
                    if let Some(Reply::Set(subs) | Reply::Array(subs)) = items.get_mut(9) {
                        subs.push(sub_info);
                    }
                }
                if let Reply::Map(pairs) = &mut docs {
                    for (k, v) in pairs.iter_mut() {
                        if matches!(k, Reply::Bulk(b) if &b[..] == b"subcommands") {
                            if let Reply::Map(subs) = v {
                                subs.push((Reply::Bulk(sub_name.clone().into()), sub_docs.clone()));
                            }
                        }
                    }
                }
            }
        }
        let docs_by_sub = sub_docs(&docs);
        let subs: Vec<Reply> = match item(&info, 9) {
            Some(Reply::Set(subs) | Reply::Array(subs)) => subs.clone(),
            _ => Vec::new(),
        };
        let mut spec = spec_of(info, docs);
        for sub in subs {
            let sub_name = name_of(&sub);
            let d = docs_by_sub
                .get(&sub_name)
                .cloned()
                .unwrap_or(Reply::Map(vec![]));
            let mut s = spec_of(sub, d);
            s.single = spec.single;
            let short = s.name.split_once('|').map_or(s.name, |(_, x)| x);
            spec.subcommands.insert(short, t.specs.len());
            t.specs.push(s);
        }
        let idx = t.specs.len();
        t.by_name.insert(spec.name, idx);
        t.top.push(idx);
        t.specs.push(spec);
    }
    t
}

/// The command table, built on first use.
pub fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// Lowercase `name` into `buf` if it is short enough to be a command name.
fn lower<'b>(name: &[u8], buf: &'b mut [u8; 32]) -> Option<&'b str> {
    let out = buf.get_mut(..name.len())?;
    for (o, c) in out.iter_mut().zip(name) {
        *o = c.to_ascii_lowercase();
    }
    std::str::from_utf8(out).ok()
}

/// Find the command (and subcommand) of `argv`. No allocation on success.
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
    let cmd = &t.specs[idx];
    if cmd.subcommands.is_empty() || argv.len() < 2 {
        return Ok(idx);
    }
    let mut sbuf = [0u8; 32];
    match lower(argv[1], &mut sbuf).and_then(|s| cmd.subcommands.get(s)) {
        Some(&sub) => Ok(sub),
        None => Err(unknown_subcommand(argv)),
    }
}

/// Find a command by `name` or `container|sub`, any case (COMMAND INFO/DOCS accept both).
pub fn find(name: &[u8]) -> Option<usize> {
    let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
    let t = table();
    match name.split_once('|') {
        None => t.index(&name),
        Some((c, s)) => t.specs[t.index(c)?].subcommands.get(s).copied(),
    }
}

/// The keys of `argv` by its command's key positions (empty for an unknown command or one
/// without keys).
pub fn command_keys<'a>(argv: &[&'a [u8]]) -> Vec<&'a [u8]> {
    lookup(argv).map_or_else(|_| Vec::new(), |i| table().spec(i).keys(argv))
}

/// The bytes of a C string: Redis formats arguments with `%s`, which stops at a NUL.
pub fn cstr(b: &[u8]) -> &[u8] {
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

/// `ERR unknown command '<name>', with args beginning with: '<a>' '<b>' `.
pub fn unknown_command(argv: &[&[u8]]) -> Reply {
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

/// `ERR unknown subcommand '<sub>'. Try <NAME> HELP.`
pub fn unknown_subcommand(argv: &[&[u8]]) -> Reply {
    let sub = cstr(argv.get(1).copied().unwrap_or_default());
    let mut msg = b"ERR unknown subcommand '".to_vec();
    msg.extend_from_slice(&sub[..sub.len().min(128)]);
    msg.extend_from_slice(b"'. Try ");
    msg.extend(
        cstr(argv.first().copied().unwrap_or_default())
            .iter()
            .map(|c| c.to_ascii_uppercase()),
    );
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

/// A single node's answer to a command only a cluster serves.
pub fn cluster_only_error(name: &str) -> Reply {
    Reply::err_owned(format!(
        "ERR '{}' is served in cluster mode only: memgests other than `none` and cross-node \
         records need a cluster (`ringlet up`)",
        name.to_ascii_uppercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(keys(&[b"memgest", b"move", b"k", b"m"]), vec![&b"k"[..]]);
        assert_eq!(keys(&[b"link", b"set", b"k", b"f", b"t"]), vec![&b"k"[..]]);
        assert_eq!(keys(&[b"chase", b"k", b"f"]), vec![&b"k"[..]]);
        assert!(keys(&[b"memgest", b"list"]).is_empty());
        assert!(keys(&[b"ping"]).is_empty());
        assert!(keys(&[b"nosuch", b"k"]).is_empty());
    }

    #[test]
    fn subcommands_resolve_including_ringlets_own() {
        let t = table();
        let name = |argv: &[&[u8]]| t.spec(lookup(argv).unwrap()).name;
        assert_eq!(name(&[b"CLIENT", b"SetName", b"x"]), "client|setname");
        assert_eq!(name(&[b"client"]), "client");
        assert_eq!(name(&[b"cluster", b"RINGLET-LOAD"]), "cluster|ringlet-load");
        assert_eq!(name(&[b"cluster", b"slots"]), "cluster|slots");
        assert_eq!(
            name(&[b"memgest", b"create", b"m", b"none"]),
            "memgest|create"
        );
        assert!(t.spec(t.index("auth").unwrap()).no_auth);
        assert!(!t.spec(t.index("get").unwrap()).no_auth);
        assert!(t.spec(t.index("set").unwrap()).write);
    }

    #[test]
    fn checks_run_in_redis_order_and_refuse_cluster_only_commands_on_a_single_node() {
        let t = table();
        let get = t.spec(t.index("get").unwrap());
        assert_eq!(
            get.check(3, false, Mode::Single),
            Err(Reply::err(
                "ERR wrong number of arguments for 'get' command"
            ))
        );
        // Arity before authentication, as Redis.
        assert_eq!(
            get.check(2, true, Mode::Single),
            Err(Reply::err(errors::NOAUTH))
        );
        assert_eq!(get.check(2, false, Mode::Cluster), Ok(()));
        let m = t.spec(lookup(&[b"memgest", b"list"]).unwrap());
        assert!(m.check(2, false, Mode::Cluster).is_ok());
        let e = m.check(2, false, Mode::Single).unwrap_err();
        assert!(
            matches!(e, Reply::Error(ref t) if t.starts_with(b"ERR 'MEMGEST' is served in cluster mode only"))
        );
        // The single node answers CLUSTER itself (Redis's "cluster support disabled").
        let c = t.spec(lookup(&[b"cluster", b"info"]).unwrap());
        assert!(c.check(2, false, Mode::Single).is_ok());
    }
}
