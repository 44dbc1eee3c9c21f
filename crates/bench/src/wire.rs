//! The three protocols the generator speaks: how to write a GET or SET and how to classify
//! the reply. Replies are scanned, not decoded into values (no allocation per reply).

use anyhow::{anyhow, bail, Result};
use memchr_lite::find_crlf;
use ringlet_codec::native::{self, Status};
use ringlet_codec::resp;
use ringlet_types::limits;

use crate::keys::KeyFormat;

/// Wire protocol of the server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// RESP2 (Redis, Ringlet).
    Resp,
    /// Ringlet's native binary frames.
    Native,
    /// memcached text protocol (`get` / `set`).
    Memcache,
}

/// Kind of request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read one key.
    Get,
    /// Write one key.
    Set,
}

/// What a reply said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// GET found the key.
    Hit,
    /// GET found nothing.
    Miss,
    /// A write was answered without error (stored or not).
    Written,
    /// The server answered with an error.
    Error,
}

/// Builds request bytes. The value is built once; keys are formatted into a reused buffer.
pub struct Encoder {
    proto: Protocol,
    keys: KeyFormat,
    key: Vec<u8>,
    value: Vec<u8>,
    /// memcached `set` header suffix: ` 0 0 <len>\r\n`.
    mc_set_tail: Vec<u8>,
}

impl Encoder {
    /// An encoder for `proto` writing `value_size`-byte values of `x` (as redis-benchmark).
    pub fn new(proto: Protocol, keys: KeyFormat, value_size: usize) -> Encoder {
        let key = vec![0; keys.len()];
        Encoder {
            proto,
            keys,
            key,
            value: vec![b'x'; value_size],
            mc_set_tail: format!(" 0 0 {value_size}\r\n").into_bytes(),
        }
    }

    /// Append request `op` on key `index` (request id `id` for the native protocol).
    pub fn encode(&mut self, out: &mut Vec<u8>, op: Op, index: u64, id: u64) {
        self.keys.write(index, &mut self.key);
        let key = &self.key[..];
        match (self.proto, op) {
            (Protocol::Resp, Op::Get) => resp::encode_request(out, &[b"GET", key]),
            (Protocol::Resp, Op::Set) => resp::encode_request(out, &[b"SET", key, &self.value]),
            (Protocol::Native, Op::Get) => native::encode_get(out, id, key),
            (Protocol::Native, Op::Set) => native::encode_set(
                out,
                id,
                &native::SetRequest {
                    key,
                    value: &self.value,
                    ..Default::default()
                },
            ),
            (Protocol::Memcache, Op::Get) => {
                out.extend_from_slice(b"get ");
                out.extend_from_slice(key);
                out.extend_from_slice(b"\r\n");
            }
            (Protocol::Memcache, Op::Set) => {
                out.extend_from_slice(b"set ");
                out.extend_from_slice(key);
                out.extend_from_slice(&self.mc_set_tail);
                out.extend_from_slice(&self.value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// Classify the reply at the start of `buf` to a request of kind `op` (RESP, memcache: replies
/// come in request order; native: the returned id says which request it answers).
///
/// Returns `None` until the reply is complete, else (outcome, bytes used, request id or 0).
///
/// # Errors
/// Bytes that are not a valid reply of the protocol: the run stops with this error.
pub fn parse_reply(proto: Protocol, op: Op, buf: &[u8]) -> Result<Option<(Outcome, usize, u64)>> {
    match proto {
        Protocol::Resp => {
            let Some((info, n)) = resp::scan_reply(buf).map_err(|e| anyhow!("RESP reply: {e}"))?
            else {
                return Ok(None);
            };
            let outcome = if info.is_error {
                Outcome::Error
            } else if op == Op::Set {
                Outcome::Written
            } else if info.is_null {
                Outcome::Miss
            } else {
                Outcome::Hit
            };
            Ok(Some((outcome, n, 0)))
        }
        Protocol::Native => {
            let Some((f, n)) =
                native::decode_response_frame(buf).map_err(|e| anyhow!("native reply: {e}"))?
            else {
                return Ok(None);
            };
            let outcome = match (f.status, op) {
                (s, _) if s.is_error() => Outcome::Error,
                (Status::NOT_FOUND, Op::Get) => Outcome::Miss,
                (_, Op::Get) => Outcome::Hit,
                (_, Op::Set) => Outcome::Written,
            };
            Ok(Some((outcome, n, f.request_id)))
        }
        Protocol::Memcache => parse_memcache(buf),
    }
}

/// Longest memcached reply line we accept before deciding the peer is not memcached
/// (a VALUE line holds a ≤ 250-byte key and three numbers).
const MEMCACHE_LINE_MAX: usize = 2048;

fn parse_memcache(buf: &[u8]) -> Result<Option<(Outcome, usize, u64)>> {
    let Some(eol) = find_crlf(buf) else {
        if buf.len() > MEMCACHE_LINE_MAX {
            bail!("memcache reply line too long");
        }
        return Ok(None);
    };
    let line = &buf[..eol];
    let after = eol + 2;
    if line == b"END" {
        return Ok(Some((Outcome::Miss, after, 0)));
    }
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        // VALUE <key> <flags> <bytes> [<cas>]
        let mut parts = rest.split(|&b| b == b' ');
        let bytes = parts
            .nth(2)
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| anyhow!("bad memcache VALUE line"))?;
        if bytes > u64::from(limits::VALUE_BYTES_MAX) {
            bail!("memcache value of {bytes} bytes exceeds the value limit");
        }
        let data_end = after + bytes as usize;
        let end = data_end + 2 + 5; // "\r\n" + "END\r\n"
        if buf.len() < end {
            return Ok(None);
        }
        if &buf[data_end..end] != b"\r\nEND\r\n" {
            bail!("memcache VALUE not followed by END (multi-key replies are not generated)");
        }
        return Ok(Some((Outcome::Hit, end, 0)));
    }
    let outcome = match line {
        b"STORED" | b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" => Outcome::Written,
        _ if line == b"ERROR"
            || line.starts_with(b"CLIENT_ERROR")
            || line.starts_with(b"SERVER_ERROR") =>
        {
            Outcome::Error
        }
        _ => bail!(
            "unexpected memcache reply {:?}",
            String::from_utf8_lossy(line)
        ),
    };
    Ok(Some((outcome, after, 0)))
}

mod memchr_lite {
    /// Offset of the first `\r\n`.
    pub fn find_crlf(b: &[u8]) -> Option<usize> {
        b.windows(2).position(|w| w == b"\r\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcache_replies() {
        assert_eq!(
            parse_memcache(b"END\r\n").unwrap(),
            Some((Outcome::Miss, 5, 0))
        );
        let hit = b"VALUE key:1 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(
            parse_memcache(hit).unwrap(),
            Some((Outcome::Hit, hit.len(), 0))
        );
        for i in 0..hit.len() {
            assert_eq!(parse_memcache(&hit[..i]).unwrap(), None);
        }
        assert_eq!(
            parse_memcache(b"STORED\r\n").unwrap(),
            Some((Outcome::Written, 8, 0))
        );
        assert_eq!(
            parse_memcache(b"SERVER_ERROR out of memory\r\n")
                .unwrap()
                .unwrap()
                .0,
            Outcome::Error
        );
        assert!(parse_memcache(b"HELLO\r\n").is_err());
    }

    #[test]
    fn resp_and_native_encode_and_classify() {
        let keys = KeyFormat::new(100, 16).unwrap();
        let mut e = Encoder::new(Protocol::Resp, keys.clone(), 3);
        let mut out = Vec::new();
        e.encode(&mut out, Op::Get, 7, 0);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$16\r\nkey:000000000007\r\n");
        assert_eq!(
            parse_reply(Protocol::Resp, Op::Get, b"$-1\r\n")
                .unwrap()
                .unwrap()
                .0,
            Outcome::Miss
        );
        assert_eq!(
            parse_reply(Protocol::Resp, Op::Get, b"$1\r\nx\r\n")
                .unwrap()
                .unwrap()
                .0,
            Outcome::Hit
        );
        let mut e = Encoder::new(Protocol::Native, keys, 3);
        let mut out = Vec::new();
        e.encode(&mut out, Op::Set, 7, 99);
        let (f, _) = native::decode_request_frame(&out).unwrap().unwrap();
        assert_eq!(f.request_id, 99);
    }
}
