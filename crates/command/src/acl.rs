//! ACL users (Redis 7's `acl.c`, a subset): users, the rule parser, the permission check and
//! the replies of the `ACL` subcommands that only read the table. No I/O, no clock: the
//! single node (`crates/server`) and every cluster node (`crates/cluster`) check requests
//! with this module, and the control plane (`crates/control`) applies `ACL SETUSER` rules
//! with it, so a user means the same thing on every front and node.
//!
//! # How it works
//!
//! A [`User`] holds what Redis's root selector holds: `on`/`off`, `nopass`, a list of
//! SHA-256 password hashes (a plaintext password never stays in memory after the rule that
//! named it), key patterns (or `allkeys`), channel patterns (or `allchannels`), and one bit
//! per entry of the command table ([`crate::table`]: top-level commands and subcommands),
//! plus Redis's "future commands" bit that only `+@all` sets. Categories (`+@read`) are the
//! ACL categories of each command's COMMAND INFO entry, which the table carries from Redis's
//! own command docs; `+config` allows CONFIG and every subcommand, `+config|get` only GET.
//!
//! [`User::check`] is what a front calls after the arity and NOAUTH checks: the command's
//! bit, then every key of the request (the table's key positions) against the patterns with
//! Redis's glob ([`crate::glob`]). A user allowed everything skips both
//! ([`User::unrestricted`]), so the default user costs one branch per request.
//!
//! [`User::describe`] is `ACL LIST`'s text, built the way Redis 7.0 builds it: `+@all` or
//! `-@all`, then the categories that fit best, then single commands. Parsing a description
//! back gives the same user ([`Users::from_descriptions`]): that text is what a cluster's
//! control plane stores and publishes (docs/design/acl.md).
//!
//! # What is refused, not ignored
//!
//! Selectors (`(...)`, `clearselectors` is accepted: there are none), read/write key
//! permissions (`%R~`, `%W~`), first-argument rules (`+select|0`), rules naming commands
//! Ringlet does not serve, and names or patterns that are not UTF-8 (the cluster map is
//! JSON). Each gets an error naming the rule.

use crate::glob::string_match;
use crate::reply::Reply;
use crate::table::{table, Spec};
use ringlet_types::limits;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

/// Redis 7.0's ACL categories, in its order (`ACL CAT`, and the order `describe` tries them).
pub const CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// `NOPERM` for a command the user may not run.
pub fn noperm_command(name: &str) -> Reply {
    Reply::err_owned(format!(
        "NOPERM this user has no permissions to run the '{name}' command"
    ))
}

/// `NOPERM` for a key the user may not touch (Redis does not name the key here).
pub const NOPERM_KEY: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";

/// Why [`User::check`] refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// The command (full name, `config|get`).
    Command,
    /// The key at this argument position.
    Key(usize),
}

impl Denied {
    /// The `NOPERM` error reply for `spec`.
    pub fn reply(self, spec: &Spec) -> Reply {
        match self {
            Denied::Command => noperm_command(spec.name),
            Denied::Key(_) => Reply::err(NOPERM_KEY),
        }
    }
}

/// Per spec index: the categories of its COMMAND INFO entry, as bits of [`CATEGORIES`].
fn spec_categories() -> &'static [u32] {
    static CATS: OnceLock<Vec<u32>> = OnceLock::new();
    CATS.get_or_init(|| {
        table()
            .specs
            .iter()
            .map(|s| {
                let mut bits = 0u32;
                if let Reply::Array(items) = &s.info {
                    if let Some(Reply::Set(cats) | Reply::Array(cats)) = items.get(6) {
                        for c in cats {
                            if let Reply::Simple(c) | Reply::Bulk(c) = c {
                                let name = c.strip_prefix(b"@").unwrap_or(c);
                                if let Some(i) =
                                    CATEGORIES.iter().position(|k| k.as_bytes() == name)
                                {
                                    bits |= 1 << i;
                                }
                            }
                        }
                    }
                }
                bits
            })
            .collect()
    })
}

fn category_index(name: &[u8]) -> Option<usize> {
    CATEGORIES
        .iter()
        .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
}

/// The commands of `cat` by full name, in table order (`ACL CAT <category>`).
pub fn category_commands(cat: usize) -> Vec<&'static str> {
    let cats = spec_categories();
    describe_order()
        .into_iter()
        .filter(|&i| cats[i] & (1 << cat) != 0)
        .map(|i| table().specs[i].name)
        .collect()
}

/// Every spec index in the order Redis's describe walks commands: each top-level command,
/// then its subcommands.
fn describe_order() -> Vec<usize> {
    let t = table();
    let mut out = Vec::with_capacity(t.specs.len());
    for &top in &t.top {
        out.push(top);
        let mut subs: Vec<usize> = t.specs[top].subcommands.values().copied().collect();
        subs.sort_unstable();
        out.extend(subs);
    }
    out
}

/// A set of spec indexes (one bit each), plus Redis's "future commands" bit.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
struct Commands {
    bits: Vec<u64>,
    /// Set by `+@all` only, cleared by `-@all`: the user may run commands added later. It
    /// decides whether a description starts with `+@all` or `-@all`.
    future: bool,
}

impl Commands {
    fn none() -> Commands {
        Commands {
            bits: vec![0; table().specs.len().div_ceil(64)],
            future: false,
        }
    }

    fn get(&self, i: usize) -> bool {
        self.bits
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn set(&mut self, i: usize, on: bool) {
        if let Some(w) = self.bits.get_mut(i / 64) {
            if on {
                *w |= 1 << (i % 64);
            } else {
                *w &= !(1 << (i % 64));
            }
        }
    }

    fn set_all(&mut self, on: bool) {
        for i in 0..table().specs.len() {
            self.set(i, on);
        }
        self.future = on;
    }

    /// `+cmd` / `-cmd`: the command and every subcommand it has.
    fn set_command(&mut self, i: usize, on: bool) {
        self.set(i, on);
        for &s in table().specs[i].subcommands.values() {
            self.set(s, on);
        }
    }

    fn set_category(&mut self, cat: usize, on: bool) {
        for (i, c) in spec_categories().iter().enumerate() {
            if c & (1 << cat) != 0 {
                self.set(i, on);
            }
        }
    }

    fn all(&self) -> bool {
        (0..table().specs.len()).all(|i| self.get(i))
    }

    /// (on, off) among the commands of `cat`.
    fn count(&self, cat: usize) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for (i, c) in spec_categories().iter().enumerate() {
            if c & (1 << cat) != 0 {
                if self.get(i) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    /// Redis 7.0's `ACLDescribeSelectorCommandRules`: start from `+@all` (the user may run
    /// future commands) or `-@all`, add the best-fitting categories one at a time (most
    /// commands in common, fewest differences), then single commands (a container's
    /// change first, then its subcommands that still differ). Replaying the result gives
    /// these exact bits (asserted).
    fn describe(&self) -> String {
        let additive = !self.future;
        let mut rules = String::from(if additive { "-@all" } else { "+@all" });
        let mut fake = Commands::none();
        fake.set_all(!additive);
        let mut temp = self.clone();
        let mut applied = [false; CATEGORIES.len()];
        // At most one pass per category.
        for _ in 0..CATEGORIES.len() {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (usize::MAX, 0);
            for (j, done) in applied.iter().enumerate() {
                if *done {
                    continue;
                }
                let (on, off) = temp.count(j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(j) = best else { break };
            fake.set_category(j, additive);
            temp.set_category(j, !additive);
            rules.push_str(if additive { " +@" } else { " -@" });
            rules.push_str(CATEGORIES[j]);
            applied[j] = true;
        }
        for i in describe_order() {
            let (user, f) = (self.get(i), fake.get(i));
            if user != f {
                rules.push_str(if user { " +" } else { " -" });
                rules.push_str(table().specs[i].name);
                fake.set_command(i, user);
            }
        }
        assert_eq!(
            fake.bits, self.bits,
            "ACL describe must replay to the same bits"
        );
        rules
    }
}

/// One ACL user (Redis's user with its root selector).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub enabled: bool,
    pub nopass: bool,
    /// `sanitize-payload` (`Some(true)`) / `skip-sanitize-payload` (`Some(false)`): kept
    /// and shown as Redis does; they only concern RESTORE, which Ringlet does not serve.
    pub sanitize_payload: Option<bool>,
    /// SHA-256 of each password, in the order added.
    passwords: Vec<[u8; 32]>,
    allkeys: bool,
    keys: Vec<String>,
    allchannels: bool,
    channels: Vec<String>,
    commands: Commands,
    /// Every command and every key: [`User::check`] has nothing to do.
    unrestricted: bool,
}

/// Why a rule was refused: Redis's reason text (after `modifier '<rule>': `).
type RuleError = String;

const UNKNOWN_NAME: &str = "Unknown command or category name in ACL";

fn hex(h: &[u8; 32]) -> String {
    let mut s = String::with_capacity(64);
    for b in h {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &[u8]) -> Option<[u8; 32]> {
    if s.len() != 64
        || !s
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(s.chunks(2)) {
        let v = |c: u8| {
            if c.is_ascii_digit() {
                c - b'0'
            } else {
                c - b'a' + 10
            }
        };
        *o = v(pair[0]) << 4 | v(pair[1]);
    }
    Some(out)
}

/// SHA-256 of a password, as Redis stores it.
pub fn hash_password(p: &[u8]) -> [u8; 32] {
    Sha256::digest(p).into()
}

/// Compare two hashes without an early exit (timing must not tell how much matched).
fn hash_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

const BAD_HASH: &str = "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters";

impl User {
    /// A user as `ACL SETUSER name` creates it: off, no password, no keys, no channels,
    /// no commands (Redis 7.0 with `acl-pubsub-default resetchannels`).
    pub fn new(name: &str) -> User {
        let mut u = User {
            name: name.to_owned(),
            enabled: false,
            nopass: false,
            sanitize_payload: None,
            passwords: Vec::new(),
            allkeys: false,
            keys: Vec::new(),
            allchannels: false,
            channels: Vec::new(),
            commands: Commands::none(),
            unrestricted: false,
        };
        u.refresh();
        u
    }

    /// The `default` user: everything allowed; `password` set, or `nopass` without one
    /// (Redis's `requirepass`).
    pub fn default_user(password: Option<&[u8]>) -> User {
        let mut u = User::new("default");
        u.enabled = true;
        u.allkeys = true;
        u.allchannels = true;
        u.commands.set_all(true);
        match password {
            Some(p) => u.passwords.push(hash_password(p)),
            None => u.nopass = true,
        }
        u.refresh();
        u
    }

    fn refresh(&mut self) {
        self.unrestricted = self.allkeys && self.commands.all();
    }

    /// Whether every command and key is allowed (the check can be skipped).
    pub fn unrestricted(&self) -> bool {
        self.unrestricted
    }

    /// Whether a connection is authenticated as this user without AUTH (Redis: a `nopass`
    /// default user that is on).
    pub fn open(&self) -> bool {
        self.enabled && self.nopass
    }

    /// Whether `password` authenticates this user (on, and `nopass` or a matching hash).
    pub fn password_ok(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let h = hash_password(password);
        // Every hash is compared, so timing does not tell which one matched.
        self.passwords
            .iter()
            .fold(false, |ok, p| hash_eq(p, &h) | ok)
    }

    /// Apply one rule (Redis `ACLSetSelector` / `ACLSetUser`).
    ///
    /// # Errors
    /// Redis's reason, or Ringlet's for what it refuses.
    pub fn apply(&mut self, rule: &[u8]) -> Result<(), RuleError> {
        let r = |w: &str| rule.eq_ignore_ascii_case(w.as_bytes());
        let items_max = limits::ACL_USER_ITEMS_MAX as usize;
        if r("on") {
            self.enabled = true;
        } else if r("off") {
            self.enabled = false;
        } else if r("skip-sanitize-payload") {
            self.sanitize_payload = Some(false);
        } else if r("sanitize-payload") {
            self.sanitize_payload = Some(true);
        } else if r("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if r("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if r("allkeys") {
            self.allkeys = true;
            self.keys.clear();
        } else if r("resetkeys") {
            self.allkeys = false;
            self.keys.clear();
        } else if r("allchannels") {
            self.allchannels = true;
            self.channels.clear();
        } else if r("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if r("allcommands") {
            self.commands.set_all(true);
        } else if r("nocommands") {
            self.commands.set_all(false);
        } else if r("clearselectors") {
            // Ringlet has no selectors besides the root one: nothing to clear.
        } else if r("reset") {
            // Redis 7.0: resetpass resetkeys resetchannels off clearselectors -@all, and
            // sanitize-payload.
            self.nopass = false;
            self.passwords.clear();
            self.allkeys = false;
            self.keys.clear();
            self.allchannels = false;
            self.channels.clear();
            self.enabled = false;
            self.sanitize_payload = Some(true);
            self.commands.set_all(false);
        } else {
            match rule.first() {
                Some(b'>') | Some(b'<') => {
                    let h = hash_password(&rule[1..]);
                    self.password_rule(rule[0] == b'>', h, "The password you are trying to remove from the user does not exist")?;
                }
                Some(b'#') | Some(b'!') => {
                    let h = unhex(&rule[1..]).ok_or(BAD_HASH)?;
                    self.password_rule(rule[0] == b'#', h, "The password you are trying to remove from the user does not exist")?;
                }
                Some(b'~') => {
                    let pat = pattern(&rule[1..])?;
                    if self.allkeys {
                        return Err("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns".into());
                    }
                    if pat == "*" {
                        self.allkeys = true;
                        self.keys.clear();
                    } else if !self.keys.contains(&pat) {
                        if self.keys.len() >= items_max {
                            return Err(format!("a user holds at most {items_max} key patterns"));
                        }
                        self.keys.push(pat);
                    }
                }
                Some(b'&') => {
                    let pat = pattern(&rule[1..])?;
                    if self.allchannels {
                        return Err("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels".into());
                    }
                    if pat == "*" {
                        self.allchannels = true;
                        self.channels.clear();
                    } else if !self.channels.contains(&pat) {
                        if self.channels.len() >= items_max {
                            return Err(format!("a user holds at most {items_max} channel patterns"));
                        }
                        self.channels.push(pat);
                    }
                }
                Some(b'%') => {
                    return Err("read/write key permissions (%R~, %W~) are not supported by Ringlet: use ~<pattern> (docs/design/acl.md)".into())
                }
                Some(b'(') => {
                    return Err("selectors are not supported by Ringlet: one set of rules per user (docs/design/acl.md)".into())
                }
                Some(b'+') | Some(b'-') => self.command_rule(rule[0] == b'+', &rule[1..])?,
                _ => return Err("Syntax error".into()),
            }
        }
        Ok(())
    }

    fn password_rule(&mut self, add: bool, h: [u8; 32], missing: &str) -> Result<(), RuleError> {
        if add {
            if !self.passwords.contains(&h) {
                if self.passwords.len() >= limits::ACL_USER_ITEMS_MAX as usize {
                    return Err(format!(
                        "a user holds at most {} passwords",
                        limits::ACL_USER_ITEMS_MAX
                    ));
                }
                self.passwords.push(h);
            }
            self.nopass = false;
        } else {
            let before = self.passwords.len();
            self.passwords.retain(|p| p != &h);
            if self.passwords.len() == before {
                return Err(missing.into());
            }
        }
        Ok(())
    }

    fn command_rule(&mut self, on: bool, name: &[u8]) -> Result<(), RuleError> {
        if let Some(cat) = name.strip_prefix(b"@") {
            if cat.eq_ignore_ascii_case(b"all") {
                self.commands.set_all(on);
                return Ok(());
            }
            let j = category_index(cat).ok_or(UNKNOWN_NAME)?;
            self.commands.set_category(j, on);
            return Ok(());
        }
        let t = table();
        let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
        match lower.split_once('|') {
            None => {
                let i = t.index(&lower).ok_or(UNKNOWN_NAME)?;
                self.commands.set_command(i, on);
            }
            Some((c, s)) => {
                // `+select|0` (a first argument) is refused: Redis deprecates it.
                let i = t.index(c).ok_or(UNKNOWN_NAME)?;
                let sub = *t.specs[i].subcommands.get(s).ok_or(UNKNOWN_NAME)?;
                self.commands.set(sub, on);
            }
        }
        Ok(())
    }

    /// Whether this user may run the request `argv` resolved to spec `idx`.
    ///
    /// # Errors
    /// What is denied (first the command, then the first key no pattern matches).
    pub fn check(&self, idx: usize, argv: &[&[u8]]) -> Result<(), Denied> {
        if self.unrestricted {
            return Ok(());
        }
        if !self.commands.get(idx) {
            return Err(Denied::Command);
        }
        if self.allkeys {
            return Ok(());
        }
        let spec = table().spec(idx);
        let (first, step) = (spec.first_key, spec.key_step);
        if first <= 0 || step <= 0 {
            return Ok(());
        }
        let keys = spec.keys(argv);
        for (n, k) in keys.iter().enumerate() {
            if !self
                .keys
                .iter()
                .any(|p| string_match(p.as_bytes(), k, false))
            {
                return Err(Denied::Key(first as usize + n * step as usize));
            }
        }
        Ok(())
    }

    fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => f.push("skip-sanitize-payload"),
            Some(true) => f.push("sanitize-payload"),
            None => {}
        }
        f
    }

    fn keys_text(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        self.keys
            .iter()
            .map(|k| format!("~{k}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn channels_text(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        self.channels
            .iter()
            .map(|k| format!("&{k}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The user's rules in `ACL LIST` form, without the leading `user <name> `.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.flags().into_iter().map(String::from).collect();
        parts.extend(self.passwords.iter().map(|h| format!("#{}", hex(h))));
        let keys = self.keys_text();
        if !keys.is_empty() {
            parts.push(keys);
        }
        if self.allchannels {
            parts.push("&*".into());
        } else {
            parts.push("resetchannels".into());
            parts.extend(self.channels.iter().map(|c| format!("&{c}")));
        }
        parts.push(self.commands.describe());
        parts.join(" ")
    }

    /// `ACL GETUSER`'s reply (a map in RESP3, pairs in RESP2).
    pub fn getuser(&self) -> Reply {
        let b = |s: &str| Reply::Bulk(s.to_owned().into());
        Reply::Map(vec![
            (
                b("flags"),
                Reply::Array(self.flags().into_iter().map(b).collect()),
            ),
            (
                b("passwords"),
                Reply::Array(self.passwords.iter().map(|h| b(&hex(h))).collect()),
            ),
            (b("commands"), b(&self.commands.describe())),
            (b("keys"), b(&self.keys_text())),
            (b("channels"), b(&self.channels_text())),
            (b("selectors"), Reply::Array(vec![])),
        ])
    }
}

/// A key or channel pattern from a rule: UTF-8 (it travels in the cluster map's JSON) and
/// bounded.
fn pattern(p: &[u8]) -> Result<String, RuleError> {
    if p.len() > limits::ACL_NAME_BYTES_MAX as usize {
        return Err(format!(
            "patterns are at most {} bytes",
            limits::ACL_NAME_BYTES_MAX
        ));
    }
    String::from_utf8(p.to_vec()).map_err(|_| "Ringlet's ACL patterns must be UTF-8".into())
}

/// `ERR Error in ACL SETUSER modifier '<rule>': <reason>`.
fn setuser_error(rule: &[u8], reason: &str) -> Reply {
    crate::table::err_with_arg(
        "ERR Error in ACL SETUSER modifier '",
        rule,
        &format!("': {reason}"),
    )
}

/// Check a user name as Redis does, plus Ringlet's bounds.
///
/// # Errors
/// The error reply.
pub fn check_username(name: &[u8]) -> Result<&str, Reply> {
    if name.iter().any(|&c| c == b' ' || c == 0) {
        return Err(Reply::err(
            "ERR Usernames can't contain spaces or null characters",
        ));
    }
    if name.len() > limits::ACL_NAME_BYTES_MAX as usize {
        return Err(Reply::err_owned(format!(
            "ERR user names are at most {} bytes",
            limits::ACL_NAME_BYTES_MAX
        )));
    }
    std::str::from_utf8(name).map_err(|_| Reply::err("ERR Ringlet's ACL user names must be UTF-8"))
}

/// Rewrite plaintext password rules into hash rules (`>p` → `#sha256(p)`, `<p` →
/// `!sha256(p)`), so a plaintext password never leaves the node that received it (a
/// cluster node sends the rules to the control plane).
pub fn hash_rules(rules: &[&[u8]]) -> Vec<String> {
    rules
        .iter()
        .map(|r| match r.first() {
            Some(b'>') => format!("#{}", hex(&hash_password(&r[1..]))),
            Some(b'<') => format!("!{}", hex(&hash_password(&r[1..]))),
            _ => String::from_utf8_lossy(r).into_owned(),
        })
        .collect()
}

/// The user table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Users {
    users: BTreeMap<String, Arc<User>>,
}

impl Users {
    /// A table holding only the `default` user ([`User::default_user`]).
    pub fn new(requirepass: Option<&[u8]>) -> Users {
        let mut users = BTreeMap::new();
        users.insert(
            "default".to_owned(),
            Arc::new(User::default_user(requirepass)),
        );
        Users { users }
    }

    /// The user called `name`.
    pub fn get(&self, name: &[u8]) -> Option<&Arc<User>> {
        std::str::from_utf8(name)
            .ok()
            .and_then(|n| self.users.get(n))
    }

    /// The `default` user (always present: it cannot be deleted).
    pub fn default_user(&self) -> &Arc<User> {
        self.users
            .get("default")
            .expect("the default user cannot be deleted")
    }

    /// Give the `default` user exactly `password` (`resetpass` then `>password`), or
    /// `nopass` for `None`: Redis's `requirepass` (`CONFIG SET requirepass`).
    pub fn set_default_password(&mut self, password: Option<&[u8]>) {
        let mut u = (**self.default_user()).clone();
        u.passwords.clear();
        match password {
            Some(p) => {
                u.nopass = false;
                u.passwords.push(hash_password(p));
            }
            None => u.nopass = true,
        }
        u.refresh();
        self.users.insert("default".to_owned(), Arc::new(u));
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Never true: the default user always exists.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The user `name` if `password` authenticates it (Redis `ACLCheckUserCredentials`).
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<User>> {
        self.get(name).filter(|u| u.password_ok(password)).cloned()
    }

    /// `ACL SETUSER name rules...`: every rule applies to a copy, which replaces the user
    /// only if all succeed (Redis does the same).
    ///
    /// # Errors
    /// The first refused rule, in Redis's words.
    pub fn setuser(&mut self, name: &[u8], rules: &[&[u8]]) -> Result<(), Reply> {
        let name = check_username(name)?;
        let mut u = match self.users.get(name) {
            Some(u) => (**u).clone(),
            None => {
                if self.users.len() >= limits::ACL_USERS_MAX as usize {
                    return Err(Reply::err_owned(format!(
                        "ERR at most {} ACL users",
                        limits::ACL_USERS_MAX
                    )));
                }
                User::new(name)
            }
        };
        for r in rules {
            u.apply(r).map_err(|e| setuser_error(r, &e))?;
        }
        u.refresh();
        self.users.insert(name.to_owned(), Arc::new(u));
        Ok(())
    }

    /// `ACL DELUSER names...`: how many existed.
    ///
    /// # Errors
    /// The `default` user cannot be removed (checked before anything is deleted).
    pub fn deluser(&mut self, names: &[&[u8]]) -> Result<i64, Reply> {
        if names.iter().any(|n| *n == b"default") {
            return Err(Reply::err("ERR The 'default' user cannot be removed"));
        }
        let mut n = 0;
        for name in names {
            if let Ok(name) = std::str::from_utf8(name) {
                if self.users.remove(name).is_some() {
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// `ACL LIST`.
    pub fn list(&self) -> Reply {
        Reply::Array(
            self.users
                .values()
                .map(|u| Reply::Bulk(format!("user {} {}", u.name, u.describe()).into()))
                .collect(),
        )
    }

    /// `ACL USERS`.
    pub fn names(&self) -> Reply {
        Reply::Array(
            self.users
                .keys()
                .map(|n| Reply::Bulk(n.clone().into()))
                .collect(),
        )
    }

    /// Every user but `default`, described (what a cluster map carries).
    pub fn describe_all(&self) -> BTreeMap<String, String> {
        self.users
            .iter()
            .filter(|(n, _)| n.as_str() != "default")
            .map(|(n, u)| (n.clone(), u.describe()))
            .collect()
    }

    /// A table from `default` (this node's own) and described users (a cluster map's).
    /// A description that does not parse (a map from a node with another command table)
    /// leaves that user out, logged by the caller through the returned names.
    pub fn from_descriptions(
        default: Arc<User>,
        described: &BTreeMap<String, String>,
    ) -> (Users, Vec<String>) {
        let mut users = BTreeMap::new();
        users.insert("default".to_owned(), default);
        let mut bad = Vec::new();
        for (name, rules) in described {
            if name == "default" {
                continue;
            }
            let mut u = User::new(name);
            let ok = rules
                .split(' ')
                .filter(|r| !r.is_empty())
                .all(|r| u.apply(r.as_bytes()).is_ok());
            if ok {
                u.refresh();
                users.insert(name.clone(), Arc::new(u));
            } else {
                bad.push(name.clone());
            }
        }
        (Users { users }, bad)
    }
}

/// The cluster's user table as the control plane keeps it: name → [`User::describe`] text.
/// `apply_setuser` / `apply_deluser` are what the control plane runs on `ACL SETUSER` /
/// `ACL DELUSER` sent by any node (rules already hashed by [`hash_rules`]).
///
/// # Errors
/// The error reply's text (Redis's words), or the table's byte bound.
pub fn apply_setuser(
    described: &BTreeMap<String, String>,
    name: &str,
    rules: &[String],
) -> Result<BTreeMap<String, String>, String> {
    let (mut users, bad) = Users::from_descriptions(Arc::new(User::default_user(None)), described);
    if !bad.is_empty() {
        // Dropping them here would delete users another version of Ringlet wrote.
        return Err(format!(
            "ERR the cluster's user table holds users this control plane cannot read: {}",
            bad.join(" ")
        ));
    }
    let rules: Vec<&[u8]> = rules.iter().map(|r| r.as_bytes()).collect();
    users.setuser(name.as_bytes(), &rules).map_err(reply_text)?;
    let out = users.describe_all();
    let bytes: usize = out.iter().map(|(n, r)| n.len() + r.len()).sum();
    if bytes > limits::ACL_TABLE_BYTES_MAX as usize {
        return Err(format!(
            "ERR the ACL user table would exceed {} bytes",
            limits::ACL_TABLE_BYTES_MAX
        ));
    }
    Ok(out)
}

/// See [`apply_setuser`]: the table without `names`, and how many existed.
///
/// # Errors
/// The `default` user cannot be removed.
pub fn apply_deluser(
    described: &BTreeMap<String, String>,
    names: &[String],
) -> Result<(BTreeMap<String, String>, i64), String> {
    if names.iter().any(|n| n == "default") {
        return Err("ERR The 'default' user cannot be removed".into());
    }
    let mut out = described.clone();
    let n = names
        .iter()
        .filter(|n| out.remove(n.as_str()).is_some())
        .count();
    Ok((out, n as i64))
}

fn reply_text(r: Reply) -> String {
    match r {
        Reply::Error(e) => String::from_utf8_lossy(&e).into_owned(),
        other => format!("{other:?}"),
    }
}

/// What a front does with an `ACL ...` request ([`acl_command`]).
pub enum AclAction<'a> {
    /// Answer this.
    Reply(Reply),
    /// `ACL SETUSER name rules...`: change the table (locally, or through the control
    /// plane), then answer OK or the error.
    SetUser {
        name: &'a [u8],
        rules: &'a [&'a [u8]],
    },
    /// `ACL DELUSER names...`: answer the count.
    DelUser { names: &'a [&'a [u8]] },
    /// `ACL GENPASS [bits]`: answer this many random bits in hex.
    GenPass { bits: u32 },
}

/// `ACL LOAD`, `SAVE`: Ringlet has no ACL file (a single node keeps users in memory, a
/// cluster in its control plane).
const NO_ACL_FILE: &str = "ERR Ringlet has no ACL file: users live in memory on a single node and in the control plane in a cluster (docs/design/acl.md)";
/// `ACL LOG` is not kept.
const NO_ACL_LOG: &str =
    "ERR ACL LOG is not supported by Ringlet: denied requests are not recorded (docs/design/acl.md)";

/// The `ACL` subcommands over `users` for a connection running as `whoami`: read-only ones
/// answered here, changes handed back to the front (`argv[0]` is `ACL`, the spec already
/// checked for arity).
pub fn acl_command<'a>(users: &Users, whoami: &str, argv: &'a [&'a [u8]]) -> AclAction<'a> {
    let sub = argv
        .get(1)
        .map(|s| s.to_ascii_lowercase())
        .unwrap_or_default();
    let reply = match sub.as_slice() {
        b"setuser" => {
            return AclAction::SetUser {
                name: argv[2],
                rules: &argv[3..],
            }
        }
        b"deluser" => return AclAction::DelUser { names: &argv[2..] },
        b"genpass" => {
            let bits = match argv.get(2) {
                None => 256,
                Some(b) => match ringlet_codec::resp::int::string2ll(b) {
                    Some(n) if (1..=4096).contains(&n) => n as u32,
                    _ => {
                        return AclAction::Reply(Reply::err(
                            "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096",
                        ))
                    }
                },
            };
            return AclAction::GenPass { bits };
        }
        b"whoami" => Reply::Bulk(whoami.to_owned().into()),
        b"users" => users.names(),
        b"list" => users.list(),
        b"getuser" => match users.get(argv[2]) {
            Some(u) => u.getuser(),
            None => Reply::Nil,
        },
        b"cat" => match argv.get(2) {
            None => Reply::Array(
                CATEGORIES
                    .iter()
                    .map(|c| Reply::Bulk((*c).into()))
                    .collect(),
            ),
            Some(c) => match category_index(c) {
                Some(j) => Reply::Array(
                    category_commands(j)
                        .into_iter()
                        .map(|n| Reply::Bulk(n.into()))
                        .collect(),
                ),
                None => crate::table::err_with_arg("ERR Unknown category '", c, "'"),
            },
        },
        b"dryrun" => dryrun(users, argv),
        b"load" | b"save" => Reply::err(NO_ACL_FILE),
        b"log" => Reply::err(NO_ACL_LOG),
        _ => crate::introspect::help(
            "ACL",
            &[
                "CAT [<category>]",
                "    List all commands that belong to <category>, or all command categories",
                "    when no category is specified.",
                "DELUSER <username> [<username> ...]",
                "    Delete a list of users.",
                "DRYRUN <username> <command> [<arg> ...]",
                "    Returns whether the user can execute the given command without executing the command.",
                "GETUSER <username>",
                "    Get the user's details.",
                "GENPASS [<bits>]",
                "    Generate a secure 256-bit user password. The optional `bits` argument can",
                "    be used to specify a different size.",
                "LIST",
                "    Show users details in config file format.",
                "LOAD",
                "    Reload users from the ACL file.",
                "LOG [<count> | RESET]",
                "    Show the ACL log entries.",
                "SAVE",
                "    Save the current config to the ACL file.",
                "SETUSER <username> <attribute> [<attribute> ...]",
                "    Create or modify a user with the specified attributes.",
                "USERS",
                "    List all the registered usernames.",
                "WHOAMI",
                "    Return the current connection username.",
            ],
        ),
    };
    AclAction::Reply(reply)
}

/// `ACL DRYRUN user command args...` (Redis 7.0's replies: OK, or the reason as a bulk).
fn dryrun(users: &Users, argv: &[&[u8]]) -> Reply {
    let Some(u) = users.get(argv[2]) else {
        return crate::table::err_with_arg("ERR User '", argv[2], "' not found");
    };
    let req = &argv[3..];
    let idx = match crate::table::lookup(req) {
        Ok(i) => i,
        Err(_) => return crate::table::err_with_arg("ERR Command '", req[0], "' not found"),
    };
    let spec = table().spec(idx);
    if !spec.arity_ok(req.len()) {
        return crate::table::arity_error(spec.name);
    }
    match u.check(idx, req) {
        Ok(()) => Reply::ok(),
        Err(Denied::Command) => Reply::Bulk(
            format!(
                "This user has no permissions to run the '{}' command",
                spec.name
            )
            .into(),
        ),
        Err(Denied::Key(i)) => {
            let mut t = b"This user has no permissions to access the '".to_vec();
            t.extend_from_slice(req.get(i).copied().unwrap_or_default());
            t.extend_from_slice(b"' key");
            Reply::Bulk(t.into())
        }
    }
}

/// `ACL GENPASS`: `bits` of `random` (at least `bits.div_ceil(8)` bytes) as lowercase hex,
/// `ceil(bits / 4)` characters as Redis.
pub fn genpass(bits: u32, random: &[u8]) -> Reply {
    let chars = bits.div_ceil(4) as usize;
    let mut s = String::with_capacity(chars + 1);
    for b in random {
        let _ = write!(s, "{b:02x}");
        if s.len() >= chars {
            break;
        }
    }
    s.truncate(chars);
    Reply::Bulk(s.into())
}

/// A node's user table, shared by its connections: replaced whole on every change (copy on
/// write), with a generation number a connection compares to notice a change without taking
/// the lock on every request.
#[derive(Debug)]
pub struct AclTable {
    users: RwLock<Arc<Users>>,
    generation: AtomicU64,
    /// [`AclTable::default_open`], kept beside the table: asked on every request of an
    /// unauthenticated connection, it must not take the lock.
    default_open: AtomicBool,
    /// [`AclTable::default_free`], likewise.
    default_free: AtomicBool,
}

impl AclTable {
    pub fn new(users: Users) -> AclTable {
        AclTable {
            default_free: AtomicBool::new(free(users.default_user())),
            default_open: AtomicBool::new(users.default_user().open()),
            users: RwLock::new(Arc::new(users)),
            generation: AtomicU64::new(1),
        }
    }

    /// The current table.
    pub fn snapshot(&self) -> Arc<Users> {
        self.users.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Bumped by every change.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Change a copy of the table with `f`; it replaces the table if `f` succeeds.
    ///
    /// # Errors
    /// `f`'s (nothing changed).
    pub fn update<R>(&self, f: impl FnOnce(&mut Users) -> Result<R, Reply>) -> Result<R, Reply> {
        let mut guard = self.users.write().unwrap_or_else(|e| e.into_inner());
        let mut next = (**guard).clone();
        let r = f(&mut next)?;
        self.default_open
            .store(next.default_user().open(), Ordering::Release);
        self.default_free
            .store(free(next.default_user()), Ordering::Release);
        *guard = Arc::new(next);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(r)
    }

    /// Replace the table (a cluster node, from a new map).
    pub fn replace(&self, users: Users) {
        let mut guard = self.users.write().unwrap_or_else(|e| e.into_inner());
        self.default_open
            .store(users.default_user().open(), Ordering::Release);
        self.default_free
            .store(free(users.default_user()), Ordering::Release);
        *guard = Arc::new(users);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether a new connection is authenticated without AUTH (the default user is `on`
    /// and `nopass`).
    pub fn default_open(&self) -> bool {
        self.default_open.load(Ordering::Acquire)
    }

    /// Whether the default user is open and may run anything on any key: the native
    /// protocol, which has no AUTH and runs as the default user without an ACL check,
    /// serves only then (docs/design/acl.md).
    pub fn default_free(&self) -> bool {
        self.default_free.load(Ordering::Acquire)
    }
}

fn free(u: &User) -> bool {
    u.open() && u.unrestricted()
}

/// The user one connection runs as (Redis's `c->user`): the default user until AUTH.
#[derive(Clone, Debug)]
pub struct ConnUser {
    user: Arc<User>,
    generation: u64,
}

/// What [`ConnUser::check`] found.
#[derive(Debug, PartialEq)]
pub enum CheckError {
    /// `NOPERM ...`: answer it.
    Denied(Reply),
    /// The user was deleted (`ACL DELUSER`): Redis closes such connections.
    UserGone,
}

impl ConnUser {
    /// The default user of `table`.
    pub fn new(table: &AclTable) -> ConnUser {
        ConnUser {
            user: table.snapshot().default_user().clone(),
            generation: table.generation(),
        }
    }

    /// Run as `user` from now on (AUTH, HELLO AUTH, RESET).
    pub fn set(&mut self, user: Arc<User>, table: &AclTable) {
        self.user = user;
        self.generation = table.generation();
    }

    /// Whether the table has not changed since this connection last looked.
    pub fn generation_is(&self, g: u64) -> bool {
        self.generation == g
    }

    /// Whether the user (as last looked up) may run anything on any key.
    pub fn unrestricted(&self) -> bool {
        self.user.unrestricted
    }

    /// The user's name (`ACL WHOAMI`, CLIENT LIST's `user=`).
    pub fn name(&self) -> &str {
        &self.user.name
    }

    /// Check request `argv` (resolved to spec `idx`, already past arity and NOAUTH)
    /// against the connection's user as it is now: a change to the user (`ACL SETUSER`)
    /// applies to its open connections at once, as in Redis.
    ///
    /// # Errors
    /// [`CheckError`].
    pub fn check(
        &mut self,
        table: &AclTable,
        idx: usize,
        argv: &[&[u8]],
    ) -> Result<(), CheckError> {
        let spec = table_spec(idx);
        // AUTH, HELLO and QUIT run for anyone (Redis skips the command bits of `no_auth`
        // commands), also on a connection whose user was deleted.
        if spec.no_auth {
            return Ok(());
        }
        let g = table.generation();
        if g != self.generation {
            let users = table.snapshot();
            match users.get(self.user.name.as_bytes()) {
                Some(u) => self.user = u.clone(),
                None => return Err(CheckError::UserGone),
            }
            self.generation = g;
        }
        if self.user.unrestricted {
            return Ok(());
        }
        self.user
            .check(idx, argv)
            .map_err(|d| CheckError::Denied(d.reply(spec)))
    }
}

fn table_spec(idx: usize) -> &'static Spec {
    table().spec(idx)
}

/// The error a connection whose user was deleted gets before it is closed.
pub const USER_GONE: &str = "ERR the user of this connection was deleted (ACL DELUSER)";

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &[&str]) -> User {
        let mut u = User::new("u");
        for r in rules {
            u.apply(r.as_bytes()).unwrap();
        }
        u.refresh();
        u
    }

    fn check(u: &User, argv: &[&[u8]]) -> Result<(), Denied> {
        let idx = crate::table::lookup(argv).unwrap();
        u.check(idx, argv)
    }

    #[test]
    fn descriptions_match_redis_for_simple_rule_sets() {
        // Texts read from redis-server 7.0.15 (`ACL SETUSER u <rules>`, `ACL LIST`).
        let cases: &[(&[&str], &str)] = &[
            (&["+get"], "off resetchannels -@all +get"),
            (&["+@all", "-flushall"], "off resetchannels +@all -flushall"),
            (&["+@read"], "off resetchannels -@all +@read"),
            (&["+@all", "-@dangerous"], "off resetchannels +@all -@dangerous"),
            (&["+@read", "-get"], "off resetchannels -@all +@read -get"),
            (&["+config|get"], "off resetchannels -@all +config|get"),
            (&["allcommands"], "off resetchannels +@all"),
            (&["nocommands", "+ping"], "off resetchannels -@all +ping"),
            (&["reset"], "off sanitize-payload resetchannels -@all"),
            (
                &["on", "nopass", "skip-sanitize-payload", "~a", "~b", "&ch", "&d"],
                "on nopass skip-sanitize-payload ~a ~b resetchannels &ch &d -@all",
            ),
            (
                &["on", ">pw", "~k*", "+get", "+set", "-set"],
                "on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~k* resetchannels -@all +get",
            ),
        ];
        for (rules, want) in cases {
            assert_eq!(user(rules).describe(), *want, "rules {rules:?}");
        }
        assert_eq!(User::default_user(None).describe(), "on nopass ~* &* +@all");
    }

    #[test]
    fn descriptions_replay_to_the_same_user() {
        let sets: &[&[&str]] = &[
            &["+@all", "-@write", "+set", "-config|set"],
            &[
                "+@read",
                "-get",
                "+client",
                "-client|list",
                "~a*",
                ">x",
                "on",
            ],
            &["+@string", "-@fast", "+acl|whoami", "&x", "allkeys"],
        ];
        for rules in sets {
            let u = user(rules);
            let mut map = BTreeMap::new();
            map.insert("u".to_owned(), u.describe());
            let (users, bad) = Users::from_descriptions(Arc::new(User::default_user(None)), &map);
            assert!(bad.is_empty());
            assert_eq!(**users.get(b"u").unwrap(), u, "rules {rules:?}");
        }
    }

    #[test]
    fn commands_keys_and_subcommands_are_checked() {
        let u = user(&["on", "nopass", "~k*", "+get", "+mset", "+config|get"]);
        assert_eq!(check(&u, &[b"get", b"k1"]), Ok(()));
        assert_eq!(check(&u, &[b"get", b"x"]), Err(Denied::Key(1)));
        assert_eq!(check(&u, &[b"set", b"k1", b"v"]), Err(Denied::Command));
        assert_eq!(
            check(&u, &[b"mset", b"k1", b"v", b"x", b"v"]),
            Err(Denied::Key(3))
        );
        assert_eq!(check(&u, &[b"config", b"get", b"x"]), Ok(()));
        assert_eq!(
            check(&u, &[b"config", b"set", b"x", b"y"]),
            Err(Denied::Command)
        );
        let spec = table().spec(crate::table::lookup(&[b"config", b"set"]).unwrap());
        assert_eq!(
            Denied::Command.reply(spec),
            Reply::err("NOPERM this user has no permissions to run the 'config|set' command")
        );
        // +container allows every subcommand; -container|sub takes one back.
        let c = user(&["+client", "-client|list"]);
        assert_eq!(check(&c, &[b"client", b"id"]), Ok(()));
        assert_eq!(check(&c, &[b"client", b"list"]), Err(Denied::Command));
        // Categories from the table's COMMAND INFO entries.
        let r = user(&["+@read", "allkeys"]);
        assert_eq!(check(&r, &[b"get", b"x"]), Ok(()));
        assert_eq!(check(&r, &[b"strlen", b"x"]), Ok(()));
        assert_eq!(check(&r, &[b"del", b"x"]), Err(Denied::Command));
        assert!(!r.unrestricted());
        assert!(User::default_user(None).unrestricted());
    }

    #[test]
    fn passwords_are_hashed_and_checked() {
        let mut u = user(&["on", ">secret", ">other"]);
        assert!(u.password_ok(b"secret") && u.password_ok(b"other"));
        assert!(!u.password_ok(b"nope"));
        u.apply(b"<secret").unwrap();
        assert!(!u.password_ok(b"secret"));
        assert_eq!(
            u.apply(b"<secret"),
            Err("The password you are trying to remove from the user does not exist".into())
        );
        u.apply(b"off").unwrap();
        assert!(
            !u.password_ok(b"other"),
            "a user that is off never authenticates"
        );
        let h = hex(&hash_password(b"x"));
        let mut v = user(&["on"]);
        v.apply(format!("#{h}").as_bytes()).unwrap();
        assert!(v.password_ok(b"x"));
        assert_eq!(v.apply(b"#ABC"), Err(BAD_HASH.into()));
        assert_eq!(
            hash_rules(&[b">x", b"<x", b"+get"]),
            vec![format!("#{h}"), format!("!{h}"), "+get".to_owned()]
        );
        // nopass: any password.
        assert!(user(&["on", "nopass"]).password_ok(b"anything"));
    }

    #[test]
    fn refused_rules_name_the_rule_and_change_nothing() {
        let mut users = Users::new(None);
        users.setuser(b"u", &[b"on", b"~a"]).unwrap();
        let before = users.clone();
        let e = |rules: &[&[u8]]| {
            let mut t = before.clone();
            let r = t.setuser(b"u", rules).unwrap_err();
            assert_eq!(t, before, "a refused SETUSER changes nothing");
            match r {
                Reply::Error(e) => String::from_utf8_lossy(&e).into_owned(),
                _ => unreachable!(),
            }
        };
        assert_eq!(
            e(&[b"+get", b"+nosuch"]),
            "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"
        );
        assert_eq!(
            e(&[b"foo"]),
            "ERR Error in ACL SETUSER modifier 'foo': Syntax error"
        );
        assert_eq!(
            e(&[b"+@nosuch"]),
            "ERR Error in ACL SETUSER modifier '+@nosuch': Unknown command or category name in ACL"
        );
        assert_eq!(
            e(&[b"-get|x"]),
            "ERR Error in ACL SETUSER modifier '-get|x': Unknown command or category name in ACL"
        );
        assert!(e(&[b"%R~x"]).contains("not supported by Ringlet"));
        assert!(e(&[b"(~x +get)"]).contains("selectors are not supported"));
        assert!(e(&[b"allkeys", b"~x"]).contains("Adding a pattern after the * pattern"));
        assert!(e(&[b"~\xff"]).contains("UTF-8"));
        assert_eq!(
            Users::new(None).setuser(b"a b", &[]).unwrap_err(),
            Reply::err("ERR Usernames can't contain spaces or null characters")
        );
        assert_eq!(
            Users::new(None).deluser(&[b"x", b"default"]).unwrap_err(),
            Reply::err("ERR The 'default' user cannot be removed")
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let mut users = Users::new(None);
        for i in 0..limits::ACL_USERS_MAX - 1 {
            users.setuser(format!("u{i}").as_bytes(), &[]).unwrap();
        }
        assert!(users.setuser(b"one-more", &[]).is_err());
        let mut u = User::new("p");
        for i in 0..limits::ACL_USER_ITEMS_MAX {
            u.apply(format!("~k{i}").as_bytes()).unwrap();
        }
        assert!(u.apply(b"~more").is_err());
    }

    #[test]
    fn control_plane_application_keeps_rules_hashed() {
        let t = BTreeMap::new();
        let rules = hash_rules(&[b"on", b">pw", b"+get", b"~k*"]);
        let t = apply_setuser(&t, "alice", &rules).unwrap();
        assert!(!t["alice"].contains("pw "), "{}", t["alice"]);
        let t = apply_setuser(&t, "alice", &["+set".to_owned()]).unwrap();
        let (users, bad) = Users::from_descriptions(Arc::new(User::default_user(None)), &t);
        assert!(bad.is_empty());
        let a = users.authenticate(b"alice", b"pw").unwrap();
        assert_eq!(check(&a, &[b"set", b"k1", b"v"]), Ok(()));
        let (t, n) = apply_deluser(&t, &["alice".to_owned(), "bob".to_owned()]).unwrap();
        assert_eq!((t.len(), n), (0, 1));
        assert!(apply_deluser(&t, &["default".to_owned()]).is_err());
    }

    #[test]
    fn genpass_has_redis_lengths() {
        let r = [0xabu8; 512];
        assert_eq!(genpass(256, &r), Reply::Bulk("ab".repeat(32).into()));
        assert_eq!(genpass(10, &r), Reply::Bulk("aba".into()));
    }
}
