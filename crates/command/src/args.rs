//! Typed arguments of the commands whose options every front parses the same way: SET (and
//! its MEMGEST extension) and GETEX. Redis's `parseExtendedStringArgumentsOrReply` and
//! `getExpireMillisecondsOrReply`, line for line, so option combinations, error texts and
//! the order in which errors are found are Redis's on the single node and in a cluster.

use crate::reply::{errors, Reply};
use crate::table::cstr;
use ringlet_codec::resp::int::string2ll;

const NX: u32 = 1;
const XX: u32 = 1 << 1;
const GET: u32 = 1 << 2;
const KEEPTTL: u32 = 1 << 3;
const PERSIST: u32 = 1 << 4;
const EX: u32 = 1 << 5;
const PX: u32 = 1 << 6;
const EXAT: u32 = 1 << 7;
const PXAT: u32 = 1 << 8;
const MEMGEST: u32 = 1 << 9;
const ANY_EXPIRE: u32 = EX | PX | EXAT | PXAT;

/// A SET's condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    Always,
    /// NX: only if the key does not exist.
    Nx,
    /// XX: only if it exists.
    Xx,
}

/// What a SET does to the key's time to live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetExpiry {
    /// No TTL (a plain SET clears the old one).
    Clear,
    /// KEEPTTL.
    Keep,
    /// EX/PX/EXAT/PXAT: expires at this unix time in ms.
    At(u64),
}

/// SET's options, from `argv[3..]` (also SETEX/PSETEX's expiry through [`expire_at_ms`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetArgs<'a> {
    pub cond: Cond,
    /// GET: reply with the old value.
    pub get: bool,
    pub expiry: SetExpiry,
    /// `MEMGEST name` (Ringlet): the memgest a new key goes to.
    pub memgest: Option<&'a [u8]>,
}

/// What GETEX does to the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetExExpiry {
    Unchanged,
    Persist,
    At(u64),
}

/// GETEX's options, parsed; the expiry time is checked by [`GetExArgs::expiry`] after the
/// key was found, as Redis does (a missing key answers nil even with a bad time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetExArgs<'a> {
    flags: u32,
    expire: Option<&'a [u8]>,
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// Flags, the expiry argument and the memgest name of SET/GETEX options.
type Parsed<'a> = (u32, Option<&'a [u8]>, Option<&'a [u8]>);

/// Options compared as C strings (`opt[2] == '\0'`), so `nx\0junk` is NX, as in Redis.
fn parse_options<'a>(argv: &[&'a [u8]], first: usize, set: bool) -> Result<Parsed<'a>, Reply> {
    let mut flags = 0u32;
    let mut expire = None;
    let mut memgest = None;
    let mut j = first;
    while j < argv.len() {
        let opt = cstr(argv[j]);
        let next = argv.get(j + 1).copied();
        if is(opt, "nx") && flags & XX == 0 && set {
            flags |= NX;
        } else if is(opt, "xx") && flags & NX == 0 && set {
            flags |= XX;
        } else if is(opt, "get") && set {
            flags |= GET;
        } else if is(opt, "keepttl") && flags & (PERSIST | ANY_EXPIRE) == 0 && set {
            flags |= KEEPTTL;
        } else if is(opt, "persist") && !set && flags & (ANY_EXPIRE | KEEPTTL) == 0 {
            flags |= PERSIST;
        } else if is(opt, "memgest") && set && flags & MEMGEST == 0 && next.is_some() {
            flags |= MEMGEST;
            memgest = next;
            j += 1;
        } else {
            let unit = [("ex", EX), ("px", PX), ("exat", EXAT), ("pxat", PXAT)]
                .into_iter()
                .find(|(w, _)| is(opt, w));
            match unit {
                Some((_, u))
                    if flags & (KEEPTTL | PERSIST | (ANY_EXPIRE & !u)) == 0 && next.is_some() =>
                {
                    flags |= u;
                    expire = next;
                    j += 1;
                }
                _ => return Err(Reply::err(errors::SYNTAX)),
            }
        }
        j += 1;
    }
    Ok((flags, expire, memgest))
}

fn expire_time_error(cmd: &str) -> Reply {
    Reply::err_owned(format!("ERR invalid expire time in '{cmd}' command"))
}

/// `getExpireMillisecondsOrReply`: the absolute unix ms of an expiry argument in seconds or
/// ms, relative (`EX`/`PX`, SETEX/PSETEX) or absolute (`EXAT`/`PXAT`). Redis adds `now` with
/// C wrap-around and then rejects a non-positive result; so does this, with explicit
/// wrapping arithmetic.
///
/// # Errors
/// "not an integer", or `invalid expire time in '<cmd>' command`.
pub fn expire_at_ms(
    arg: &[u8],
    seconds: bool,
    relative: bool,
    now_ms: u64,
    cmd: &str,
) -> Result<u64, Reply> {
    let mut ms = string2ll(arg).ok_or(Reply::err(errors::NOT_INTEGER))?;
    if ms <= 0 || (seconds && ms > i64::MAX / 1000) {
        return Err(expire_time_error(cmd));
    }
    if seconds {
        ms *= 1000;
    }
    if relative {
        ms = ms.wrapping_add(now_ms as i64);
    }
    if ms <= 0 {
        return Err(expire_time_error(cmd));
    }
    Ok(ms as u64)
}

fn flags_expire(arg: &[u8], flags: u32, now_ms: u64, cmd: &str) -> Result<u64, Reply> {
    expire_at_ms(
        arg,
        flags & (EX | EXAT) != 0,
        flags & (EX | PX) != 0,
        now_ms,
        cmd,
    )
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL] [MEMGEST name].
///
/// # Errors
/// Redis's syntax and expire-time errors, in Redis's order (all options, then the time).
pub fn set_args<'a>(argv: &[&'a [u8]], now_ms: u64) -> Result<SetArgs<'a>, Reply> {
    let (flags, expire, memgest) = parse_options(argv, 3, true)?;
    let expiry = match expire {
        Some(arg) => SetExpiry::At(flags_expire(arg, flags, now_ms, "set")?),
        None if flags & KEEPTTL != 0 => SetExpiry::Keep,
        None => SetExpiry::Clear,
    };
    Ok(SetArgs {
        cond: if flags & NX != 0 {
            Cond::Nx
        } else if flags & XX != 0 {
            Cond::Xx
        } else {
            Cond::Always
        },
        get: flags & GET != 0,
        expiry,
        memgest,
    })
}

/// GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST].
///
/// # Errors
/// Redis's syntax error for a bad option combination.
pub fn getex_args<'a>(argv: &[&'a [u8]]) -> Result<GetExArgs<'a>, Reply> {
    let (flags, expire, _) = parse_options(argv, 2, false)?;
    Ok(GetExArgs { flags, expire })
}

impl GetExArgs<'_> {
    /// The TTL change, once the key was found.
    ///
    /// # Errors
    /// Redis's errors for a bad expire time.
    pub fn expiry(&self, now_ms: u64) -> Result<GetExExpiry, Reply> {
        match self.expire {
            Some(arg) => Ok(GetExExpiry::At(flags_expire(
                arg, self.flags, now_ms, "getex",
            )?)),
            None if self.flags & PERSIST != 0 => Ok(GetExExpiry::Persist),
            None => Ok(GetExExpiry::Unchanged),
        }
    }
}

/// EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT's time and condition, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpireArgs {
    /// The new expiry, absolute unix ms (may be in the past: the key is then deleted).
    pub at_ms: i64,
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

/// `expireGenericCommand`'s parsing: options first (`NX|XX|GT|LT`, with Redis's texts for
/// bad combinations), then the time; `basetime` is now for EXPIRE/PEXPIRE and 0 for the
/// *AT forms.
///
/// # Errors
/// Redis's exact error replies.
pub fn expire_args(
    argv: &[&[u8]],
    basetime: i64,
    seconds: bool,
    cmd: &str,
) -> Result<ExpireArgs, Reply> {
    let mut a = ExpireArgs {
        at_ms: 0,
        nx: false,
        xx: false,
        gt: false,
        lt: false,
    };
    for opt in argv.get(3..).unwrap_or_default() {
        if is(opt, "nx") {
            a.nx = true;
        } else if is(opt, "xx") {
            a.xx = true;
        } else if is(opt, "gt") {
            a.gt = true;
        } else if is(opt, "lt") {
            a.lt = true;
        } else {
            return Err(crate::table::err_with_arg(
                "ERR Unsupported option ",
                opt,
                "",
            ));
        }
    }
    if a.nx && (a.xx || a.gt || a.lt) {
        return Err(Reply::err(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if a.gt && a.lt {
        return Err(Reply::err(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    let mut when = string2ll(argv.get(2).copied().unwrap_or_default())
        .ok_or(Reply::err(errors::NOT_INTEGER))?;
    let bad_time = || Reply::err_owned(format!("ERR invalid expire time in '{cmd}' command"));
    if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return Err(bad_time());
        }
        when *= 1000;
    }
    if when > i64::MAX - basetime {
        return Err(bad_time());
    }
    a.at_ms = when + basetime;
    Ok(a)
}

impl ExpireArgs {
    /// Whether the condition lets the new time replace `current` (`None`: no TTL, which
    /// counts as an infinite one, as in Redis).
    pub fn allows(&self, current: Option<u64>) -> bool {
        let current = current.map_or(-1, |t| i64::try_from(t).unwrap_or(i64::MAX));
        let when = self.at_ms;
        !((self.nx && current != -1)
            || (self.xx && current == -1)
            || (self.gt && (when <= current || current == -1))
            || (self.lt && current != -1 && when >= current))
    }
}

/// Whether a client name (CLIENT SETNAME, SETINFO's values) has only the bytes Redis allows:
/// `'!'..='~'` (no spaces, newlines or other special characters).
pub fn client_name_ok(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

/// CLIENT SETINFO LIB-NAME|LIB-VER value (Redis 7.2, sent by redis-py and other clients on
/// connect), checked as Redis checks it. Ringlet keeps neither value.
///
/// # Errors
/// Redis's texts for an unknown attribute or a value with special characters.
pub fn client_setinfo(argv: &[&[u8]]) -> Result<(), Reply> {
    let (attr, value) = (
        argv.get(2).copied().unwrap_or_default(),
        argv.get(3).copied().unwrap_or_default(),
    );
    if !(is(attr, "lib-name") || is(attr, "lib-ver")) {
        return Err(crate::table::err_with_arg(
            "ERR Unrecognized option '",
            attr,
            "'",
        ));
    }
    if !client_name_ok(value) {
        return Err(Reply::err_owned(format!(
            "ERR {} cannot contain spaces, newlines or special characters.",
            String::from_utf8_lossy(attr).to_ascii_lowercase()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(args: &[&[u8]]) -> Result<SetArgs<'static>, Reply> {
        let mut argv: Vec<&'static [u8]> = vec![b"set", b"k", b"v"];
        for a in args {
            argv.push(Box::leak(a.to_vec().into_boxed_slice()));
        }
        set_args(&argv, 1_000)
    }

    #[test]
    fn set_options_as_redis() {
        let a = set(&[b"NX", b"get", b"ex", b"10"]).unwrap();
        assert_eq!(
            (a.cond, a.get, a.expiry),
            (Cond::Nx, true, SetExpiry::At(11_000))
        );
        assert_eq!(set(&[b"pxat", b"5"]).unwrap().expiry, SetExpiry::At(5));
        assert_eq!(set(&[b"keepttl"]).unwrap().expiry, SetExpiry::Keep);
        assert_eq!(set(&[]).unwrap().expiry, SetExpiry::Clear);
        // C-string comparison: "nx\0junk" is NX.
        assert_eq!(set(&[b"nx\0junk"]).unwrap().cond, Cond::Nx);
        assert_eq!(
            set(&[b"memgest", b"cold"]).unwrap().memgest,
            Some(&b"cold"[..])
        );
        let syntax = Err(Reply::err(errors::SYNTAX));
        assert_eq!(set(&[b"nx", b"xx"]), syntax);
        assert_eq!(set(&[b"ex", b"1", b"px", b"1"]), syntax);
        assert_eq!(set(&[b"ex", b"1", b"keepttl"]), syntax);
        assert_eq!(set(&[b"persist"]), syntax);
        assert_eq!(set(&[b"ex"]), syntax);
        assert_eq!(set(&[b"memgest"]), syntax);
        assert_eq!(
            set(&[b"ex", b"0"]),
            Err(Reply::err("ERR invalid expire time in 'set' command"))
        );
        assert_eq!(set(&[b"ex", b"x"]), Err(Reply::err(errors::NOT_INTEGER)));
        // Syntax errors are found before the time is checked.
        assert_eq!(set(&[b"ex", b"0", b"bogus"]), syntax);
    }

    #[test]
    fn getex_checks_the_time_only_when_asked() {
        let argv: [&[u8]; 4] = [b"getex", b"k", b"px", b"-1"];
        let a = getex_args(&argv).unwrap();
        assert_eq!(
            a.expiry(0),
            Err(Reply::err("ERR invalid expire time in 'getex' command"))
        );
        let argv: [&[u8]; 3] = [b"getex", b"k", b"persist"];
        assert_eq!(
            getex_args(&argv).unwrap().expiry(0),
            Ok(GetExExpiry::Persist)
        );
        let argv: [&[u8]; 3] = [b"getex", b"k", b"nx"];
        assert_eq!(getex_args(&argv), Err(Reply::err(errors::SYNTAX)));
    }

    #[test]
    fn expire_options_then_time_as_redis() {
        let argv: [&[u8]; 5] = [b"expire", b"k", b"abc", b"nx", b"xx"];
        assert_eq!(
            expire_args(&argv, 0, true, "expire"),
            Err(Reply::err(
                "ERR NX and XX, GT or LT options at the same time are not compatible"
            ))
        );
        let argv: [&[u8]; 4] = [b"expire", b"k", b"abc", b"bogus"];
        assert_eq!(
            expire_args(&argv, 0, true, "expire"),
            Err(Reply::err("ERR Unsupported option bogus"))
        );
        let argv: [&[u8]; 4] = [b"pexpire", b"k", b"10", b"gt"];
        let a = expire_args(&argv, 1_000, false, "pexpire").unwrap();
        assert_eq!(a.at_ms, 1_010);
        assert!(!a.allows(None), "GT against no TTL");
        assert!(a.allows(Some(1_005)));
        assert!(!a.allows(Some(2_000)));
        let argv: [&[u8]; 3] = [b"expire", b"k", b"9223372036854775807"];
        assert_eq!(
            expire_args(&argv, 0, true, "expire"),
            Err(Reply::err("ERR invalid expire time in 'expire' command"))
        );
    }
}
