//! COMMAND (native opcode 12): any command of the node's RESP command layer over the native
//! protocol, and typed helpers over it (TTLs, hashes/records, links).
//!
//! The node runs a COMMAND frame through the same table, arity, ACL check and handlers as a
//! RESP request and answers with the command's RESP3 reply as bytes, so every command the
//! node serves reaches the smart client without a native encoding of each (docs/protocol.md,
//! docs/design/codec-native.md). [`Client::command`](crate::Client::command) and
//! [`ClusterClient::command`](crate::ClusterClient::command) return that reply; a refused
//! command (WRONGTYPE, a syntax error) is `Ok(Reply::Error)`, as in redis-py's
//! `execute_command` raising only on the reply. The typed helpers turn an error reply into
//! [`Error::Server`] with the closest native status.
//!
//! Routing in cluster mode: by the command's keys as the command table gives them
//! (`ringlet_command::command_keys`, the table `COMMAND GETKEYS` answers from); keyless
//! commands go to any node; keys in more than one slot are refused before sending with
//! Redis's CROSSSLOT text (redis-py raises for them client-side too).

use std::time::Duration;

use bytes::Bytes;
use ringlet_codec::native::Status;
use ringlet_codec::resp::{decode_reply, Reply};
use ringlet_types::{key_slot, limits};

use crate::conn::{Body, Response};
use crate::error::Error;

/// Redis's text for keys of one request in several slots.
pub const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// A key's time to live, as TTL/PTTL report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// The key does not exist (Redis: -2).
    NoKey,
    /// The key exists and does not expire (Redis: -1).
    NoExpiry,
    /// The key expires after this long (seconds for TTL, milliseconds for PTTL).
    Remaining(Duration),
}

/// Check a command's arguments against the frame's limits before encoding (the node would
/// refuse the frame and close the connection).
///
/// # Errors
/// [`Error::Config`] for an empty command or too many arguments, [`Error::ValueTooLarge`]
/// for an argument over `limits::COMMAND_ARG_BYTES_MAX`.
pub(crate) fn check_args<A: AsRef<[u8]>>(args: &[A]) -> Result<(), Error> {
    if args.is_empty() {
        return Err(Error::Config("a command needs at least its name".into()));
    }
    if args.len() > limits::COMMAND_ARGS_MAX as usize {
        return Err(Error::Config(format!(
            "{} arguments exceed the limit of {}",
            args.len(),
            limits::COMMAND_ARGS_MAX
        )));
    }
    if let Some(a) = args
        .iter()
        .find(|a| a.as_ref().len() > limits::COMMAND_ARG_BYTES_MAX as usize)
    {
        return Err(Error::ValueTooLarge(a.as_ref().len()));
    }
    Ok(())
}

/// The key a command is routed by: its first key, once every key it names is checked to be
/// in the same slot; `None` for a keyless command (any node serves it).
///
/// # Errors
/// [`Error::Server`] with `BAD_REQUEST` and Redis's CROSSSLOT text.
pub(crate) fn route_key<A: AsRef<[u8]>>(args: &[A]) -> Result<Option<Vec<u8>>, Error> {
    let argv: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
    let keys = ringlet_command::table::command_keys(&argv);
    let mut it = keys.iter();
    let Some(first) = it.next() else {
        return Ok(None);
    };
    let slot = key_slot(first);
    if it.any(|k| key_slot(k) != slot) {
        return Err(Error::Server {
            status: Status::BAD_REQUEST,
            message: CROSSSLOT.into(),
        });
    }
    Ok(Some(first.to_vec()))
}

/// Whether repeating the command after a possible send cannot change its effect: commands
/// the table does not flag `write` (reads, PING, INFO, ...). Writes are never repeated once
/// they may have run (HINCRBY twice is not HINCRBY once).
pub(crate) fn idempotent<A: AsRef<[u8]>>(args: &[A]) -> bool {
    let argv: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
    match ringlet_command::lookup(&argv) {
        Ok(i) => !ringlet_command::table().spec(i).write,
        // Unknown: the node answers an error without running anything.
        Err(_) => true,
    }
}

/// The RESP3 reply a COMMAND response carries.
///
/// # Errors
/// [`Error::UnexpectedResponse`] if the payload is not exactly one RESP value.
pub(crate) fn reply_of(r: &Response) -> Result<Reply, Error> {
    match &r.body {
        Body::Value(b) => match decode_reply(b) {
            Ok(Some((reply, n))) if n == b.len() => Ok(reply),
            _ => Err(Error::UnexpectedResponse(
                "COMMAND: the reply is not one RESP value".into(),
            )),
        },
        other => Err(crate::client::unexpected("COMMAND", r.status, other)),
    }
}

/// An error reply as [`Error::Server`], with the native status of the same failure (the
/// statuses the fixed opcodes use), the text kept.
pub fn reply_error(text: &[u8]) -> Error {
    let message = String::from_utf8_lossy(text).into_owned();
    let status = if message.starts_with("WRONGTYPE") {
        Status::WRONG_TYPE
    } else if message.starts_with("ERR value is not an integer") {
        Status::NOT_INTEGER
    } else if message.contains("would overflow") {
        Status::OVERFLOW
    } else if message.starts_with("NOPERM") || message.starts_with("NOAUTH") {
        Status::DENIED
    } else if message.starts_with("OOM") {
        Status::NO_SPACE
    } else if message.starts_with("TRYAGAIN") || message.starts_with("CLUSTERDOWN") {
        Status::TRY_AGAIN
    } else {
        Status::BAD_REQUEST
    };
    Error::Server { status, message }
}

fn shape(what: &str, r: &Reply) -> Error {
    Error::UnexpectedResponse(format!("{what}: unexpected reply {r:?}"))
}

/// `Reply::Error` → `Err`, anything else through.
fn ok(r: Reply) -> Result<Reply, Error> {
    match r {
        Reply::Error(e) | Reply::BlobError(e) => Err(reply_error(&e)),
        other => Ok(other),
    }
}

pub(crate) fn int(what: &str, r: Reply) -> Result<i64, Error> {
    match ok(r)? {
        Reply::Integer(n) => Ok(n),
        other => Err(shape(what, &other)),
    }
}

pub(crate) fn flag(what: &str, r: Reply) -> Result<bool, Error> {
    Ok(int(what, r)? != 0)
}

pub(crate) fn ttl(what: &str, r: Reply, unit: fn(u64) -> Duration) -> Result<Ttl, Error> {
    Ok(match int(what, r)? {
        -2 => Ttl::NoKey,
        -1 => Ttl::NoExpiry,
        n if n >= 0 => Ttl::Remaining(unit(n as u64)),
        n => return Err(Error::UnexpectedResponse(format!("{what}: {n}"))),
    })
}

pub(crate) fn bulk_opt(what: &str, r: Reply) -> Result<Option<Bytes>, Error> {
    match ok(r)? {
        Reply::Bulk(b) => Ok(Some(Bytes::from(b))),
        Reply::Null => Ok(None),
        other => Err(shape(what, &other)),
    }
}

fn items(what: &str, r: Reply) -> Result<Vec<Reply>, Error> {
    match ok(r)? {
        Reply::Array(v) | Reply::Set(v) => Ok(v),
        Reply::Null | Reply::NullArray => Ok(Vec::new()),
        other => Err(shape(what, &other)),
    }
}

pub(crate) fn bulk_list_opt(what: &str, r: Reply) -> Result<Vec<Option<Bytes>>, Error> {
    items(what, r)?
        .into_iter()
        .map(|x| bulk_opt(what, x))
        .collect()
}

pub(crate) fn bulk_list(what: &str, r: Reply) -> Result<Vec<Bytes>, Error> {
    items(what, r)?
        .into_iter()
        .map(|x| match x {
            Reply::Bulk(b) | Reply::Simple(b) => Ok(Bytes::from(b)),
            other => Err(shape(what, &other)),
        })
        .collect()
}

/// HGETALL's pairs, in the node's order (a RESP3 map; a RESP2-style flat array also parses).
pub(crate) fn pairs(what: &str, r: Reply) -> Result<Vec<(Bytes, Bytes)>, Error> {
    let bytes = |x: Reply| match x {
        Reply::Bulk(b) | Reply::Simple(b) => Ok(Bytes::from(b)),
        other => Err(shape(what, &other)),
    };
    match ok(r)? {
        Reply::Map(m) => m
            .into_iter()
            .map(|(k, v)| Ok((bytes(k)?, bytes(v)?)))
            .collect(),
        Reply::Array(flat) if flat.len() % 2 == 0 => {
            let mut out = Vec::with_capacity(flat.len() / 2);
            let mut it = flat.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((bytes(k)?, bytes(v)?));
            }
            Ok(out)
        }
        other => Err(shape(what, &other)),
    }
}

/// The argument list `name key rest...` (owned: helpers build them from typed inputs).
pub(crate) fn argv(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

/// Typed helpers over `command()`, for a client type with
/// `async fn command(&self, &[A]) -> Result<Reply, Error>`.
macro_rules! typed_helpers_async {
    () => {
        /// `EXPIRE key seconds`: whether a timeout was set (false: no such key).
        ///
        /// # Errors
        /// See [`Error`]; an error reply is [`Error::Server`].
        pub async fn expire(&self, key: &[u8], seconds: u64) -> Result<bool, Error> {
            let s = seconds.to_string();
            let r = self.command(&[&b"EXPIRE"[..], key, s.as_bytes()]).await?;
            $crate::command::flag("EXPIRE", r)
        }

        /// `PEXPIRE key ms`: whether a timeout was set.
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn pexpire(&self, key: &[u8], ttl: std::time::Duration) -> Result<bool, Error> {
            let ms = ttl.as_millis().to_string();
            let r = self.command(&[&b"PEXPIRE"[..], key, ms.as_bytes()]).await?;
            $crate::command::flag("PEXPIRE", r)
        }

        /// `TTL key` (seconds).
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn ttl(&self, key: &[u8]) -> Result<$crate::command::Ttl, Error> {
            let r = self.command(&[&b"TTL"[..], key]).await?;
            $crate::command::ttl("TTL", r, std::time::Duration::from_secs)
        }

        /// `PTTL key` (milliseconds).
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn pttl(&self, key: &[u8]) -> Result<$crate::command::Ttl, Error> {
            let r = self.command(&[&b"PTTL"[..], key]).await?;
            $crate::command::ttl("PTTL", r, std::time::Duration::from_millis)
        }

        /// `PERSIST key`: whether a timeout was removed.
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn persist(&self, key: &[u8]) -> Result<bool, Error> {
            let r = self.command(&[&b"PERSIST"[..], key]).await?;
            $crate::command::flag("PERSIST", r)
        }

        /// `HSET key field value [field value ...]`: the number of fields added.
        ///
        /// # Errors
        /// See [`Error`] (`WRONG_TYPE` on a string key).
        pub async fn hset<F: AsRef<[u8]>, V: AsRef<[u8]>>(
            &self,
            key: &[u8],
            pairs: &[(F, V)],
        ) -> Result<i64, Error> {
            let mut a = $crate::command::argv(&[b"HSET", key]);
            for (f, v) in pairs {
                a.push(f.as_ref().to_vec());
                a.push(v.as_ref().to_vec());
            }
            let r = self.command(&a).await?;
            $crate::command::int("HSET", r)
        }

        /// `HGET key field`.
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn hget(&self, key: &[u8], field: &[u8]) -> Result<Option<bytes::Bytes>, Error> {
            let r = self.command(&[&b"HGET"[..], key, field]).await?;
            $crate::command::bulk_opt("HGET", r)
        }

        /// `HMGET key field [field ...]`: one value per field, in order.
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn hmget<F: AsRef<[u8]>>(
            &self,
            key: &[u8],
            fields: &[F],
        ) -> Result<Vec<Option<bytes::Bytes>>, Error> {
            let mut a = $crate::command::argv(&[b"HMGET", key]);
            a.extend(fields.iter().map(|f| f.as_ref().to_vec()));
            let r = self.command(&a).await?;
            $crate::command::bulk_list_opt("HMGET", r)
        }

        /// `HGETALL key`: the fields and values (a link field shows its target key, a link
        /// list its targets joined by a space, as to every Redis client).
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn hgetall(
            &self,
            key: &[u8],
        ) -> Result<Vec<(bytes::Bytes, bytes::Bytes)>, Error> {
            let r = self.command(&[&b"HGETALL"[..], key]).await?;
            $crate::command::pairs("HGETALL", r)
        }

        /// `HDEL key field [field ...]`: the number of fields removed.
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn hdel<F: AsRef<[u8]>>(&self, key: &[u8], fields: &[F]) -> Result<i64, Error> {
            let mut a = $crate::command::argv(&[b"HDEL", key]);
            a.extend(fields.iter().map(|f| f.as_ref().to_vec()));
            let r = self.command(&a).await?;
            $crate::command::int("HDEL", r)
        }

        /// `HINCRBY key field delta`: the new value. Not repeated once possibly sent.
        ///
        /// # Errors
        /// See [`Error`] (`NOT_INTEGER`, `OVERFLOW`).
        pub async fn hincrby(&self, key: &[u8], field: &[u8], delta: i64) -> Result<i64, Error> {
            let d = delta.to_string();
            let r = self
                .command(&[&b"HINCRBY"[..], key, field, d.as_bytes()])
                .await?;
            $crate::command::int("HINCRBY", r)
        }

        /// `LINK SET key field target`: one link; whether the field is new.
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn link_set(
            &self,
            key: &[u8],
            field: &[u8],
            target: &[u8],
        ) -> Result<bool, Error> {
            let r = self
                .command(&[&b"LINK"[..], b"SET", key, field, target])
                .await?;
            $crate::command::flag("LINK SET", r)
        }

        /// `LINK ADD key field target [target ...]`: append to a link list; its new length.
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn link_add<T: AsRef<[u8]>>(
            &self,
            key: &[u8],
            field: &[u8],
            targets: &[T],
        ) -> Result<i64, Error> {
            let mut a = $crate::command::argv(&[b"LINK", b"ADD", key, field]);
            a.extend(targets.iter().map(|t| t.as_ref().to_vec()));
            let r = self.command(&a).await?;
            $crate::command::int("LINK ADD", r)
        }

        /// `LINK GET key field`: the targets, in order (empty: no such field).
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn link_get(&self, key: &[u8], field: &[u8]) -> Result<Vec<bytes::Bytes>, Error> {
            let r = self.command(&[&b"LINK"[..], b"GET", key, field]).await?;
            $crate::command::bulk_list("LINK GET", r)
        }

        /// `LINK DEL key field`: whether the field existed.
        ///
        /// # Errors
        /// See [`Error`].
        pub async fn link_del(&self, key: &[u8], field: &[u8]) -> Result<bool, Error> {
            let r = self.command(&[&b"LINK"[..], b"DEL", key, field]).await?;
            $crate::command::flag("LINK DEL", r)
        }
    };
}

/// The blocking twins of [`typed_helpers_async`], for a type with `rt` and `client` fields.
macro_rules! typed_helpers_blocking {
    () => {
        /// See the async client's `command`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn command<A: AsRef<[u8]>>(
            &self,
            args: &[A],
        ) -> Result<ringlet_codec::resp::Reply, Error> {
            self.rt.block_on(self.client.command(args))
        }
        /// See the async client's `expire`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn expire(&self, key: &[u8], seconds: u64) -> Result<bool, Error> {
            self.rt.block_on(self.client.expire(key, seconds))
        }
        /// See the async client's `pexpire`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn pexpire(&self, key: &[u8], ttl: std::time::Duration) -> Result<bool, Error> {
            self.rt.block_on(self.client.pexpire(key, ttl))
        }
        /// See the async client's `ttl`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn ttl(&self, key: &[u8]) -> Result<$crate::command::Ttl, Error> {
            self.rt.block_on(self.client.ttl(key))
        }
        /// See the async client's `pttl`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn pttl(&self, key: &[u8]) -> Result<$crate::command::Ttl, Error> {
            self.rt.block_on(self.client.pttl(key))
        }
        /// See the async client's `persist`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn persist(&self, key: &[u8]) -> Result<bool, Error> {
            self.rt.block_on(self.client.persist(key))
        }
        /// See the async client's `hset`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn hset<F: AsRef<[u8]>, V: AsRef<[u8]>>(
            &self,
            key: &[u8],
            pairs: &[(F, V)],
        ) -> Result<i64, Error> {
            self.rt.block_on(self.client.hset(key, pairs))
        }
        /// See the async client's `hget`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn hget(&self, key: &[u8], field: &[u8]) -> Result<Option<bytes::Bytes>, Error> {
            self.rt.block_on(self.client.hget(key, field))
        }
        /// See the async client's `hmget`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn hmget<F: AsRef<[u8]>>(
            &self,
            key: &[u8],
            fields: &[F],
        ) -> Result<Vec<Option<bytes::Bytes>>, Error> {
            self.rt.block_on(self.client.hmget(key, fields))
        }
        /// See the async client's `hgetall`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn hgetall(&self, key: &[u8]) -> Result<Vec<(bytes::Bytes, bytes::Bytes)>, Error> {
            self.rt.block_on(self.client.hgetall(key))
        }
        /// See the async client's `hdel`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn hdel<F: AsRef<[u8]>>(&self, key: &[u8], fields: &[F]) -> Result<i64, Error> {
            self.rt.block_on(self.client.hdel(key, fields))
        }
        /// See the async client's `hincrby`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn hincrby(&self, key: &[u8], field: &[u8], delta: i64) -> Result<i64, Error> {
            self.rt.block_on(self.client.hincrby(key, field, delta))
        }
        /// See the async client's `link_set`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn link_set(&self, key: &[u8], field: &[u8], target: &[u8]) -> Result<bool, Error> {
            self.rt.block_on(self.client.link_set(key, field, target))
        }
        /// See the async client's `link_add`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn link_add<T: AsRef<[u8]>>(
            &self,
            key: &[u8],
            field: &[u8],
            targets: &[T],
        ) -> Result<i64, Error> {
            self.rt.block_on(self.client.link_add(key, field, targets))
        }
        /// See the async client's `link_get`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn link_get(&self, key: &[u8], field: &[u8]) -> Result<Vec<bytes::Bytes>, Error> {
            self.rt.block_on(self.client.link_get(key, field))
        }
        /// See the async client's `link_del`.
        ///
        /// # Errors
        /// See [`Error`].
        pub fn link_del(&self, key: &[u8], field: &[u8]) -> Result<bool, Error> {
            self.rt.block_on(self.client.link_del(key, field))
        }
    };
}

pub(crate) use typed_helpers_async;
pub(crate) use typed_helpers_blocking;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn routing_key_is_the_tables_first_key() {
        assert_eq!(
            route_key(&["HSET", "user:1", "f", "v"]).unwrap(),
            Some(b"user:1".to_vec())
        );
        // LINK's key is after the subcommand.
        assert_eq!(
            route_key(&["LINK", "SET", "a", "f", "b"]).unwrap(),
            Some(b"a".to_vec())
        );
        assert_eq!(route_key(&["PING"]).unwrap(), None);
        assert_eq!(route_key(&["DBSIZE"]).unwrap(), None);
        // Same slot by hash tag: fine; different slots: CROSSSLOT before sending.
        assert_eq!(
            route_key(&["MGET", "{u}a", "{u}b"]).unwrap(),
            Some(b"{u}a".to_vec())
        );
        let e = route_key(&["MGET", "a", "b"]).unwrap_err();
        assert!(matches!(e, Error::Server { status, ref message }
            if status == Status::BAD_REQUEST && message.starts_with("CROSSSLOT")));
    }

    #[test]
    fn writes_are_not_idempotent_reads_are() {
        assert!(idempotent(&["HGET", "k", "f"]));
        assert!(idempotent(&["ttl", "k"]));
        assert!(!idempotent(&["HINCRBY", "k", "f", "1"]));
        assert!(!idempotent(&["LINK", "ADD", "k", "f", "t"]));
    }

    #[test]
    fn argument_limits_are_checked_before_sending() {
        assert!(matches!(check_args::<&[u8]>(&[]), Err(Error::Config(_))));
        assert!(check_args(&["GET", "k"]).is_ok());
    }

    #[test]
    fn replies_parse_into_typed_results() {
        assert_eq!(
            ttl("TTL", Reply::Integer(-2), Duration::from_secs).unwrap(),
            Ttl::NoKey
        );
        assert_eq!(
            ttl("TTL", Reply::Integer(7), Duration::from_secs).unwrap(),
            Ttl::Remaining(Duration::from_secs(7))
        );
        let e = int(
            "HINCRBY",
            Reply::Error(b"ERR hash value is not an integer".to_vec()),
        );
        assert!(matches!(e, Err(Error::Server { status, .. }) if status == Status::BAD_REQUEST));
        let e = int(
            "HGET",
            Reply::Error(
                b"WRONGTYPE Operation against a key holding the wrong kind of value".to_vec(),
            ),
        );
        assert!(matches!(e, Err(Error::Server { status, .. }) if status == Status::WRONG_TYPE));
        let m = Reply::Map(vec![(Reply::bulk(b"f"), Reply::bulk(b"v"))]);
        assert_eq!(
            pairs("HGETALL", m).unwrap(),
            vec![(Bytes::from_static(b"f"), Bytes::from_static(b"v"))]
        );
        assert_eq!(
            bulk_list_opt("HMGET", Reply::Array(vec![Reply::bulk(b"x"), Reply::Null])).unwrap(),
            vec![Some(Bytes::from_static(b"x")), None]
        );
    }
}
