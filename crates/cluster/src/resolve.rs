//! Resolving an ambiguous write (issue 10, case 7).
//!
//! A coordinator that loses its role with a write in flight cannot say whether the write will
//! commit: a replica majority may hold it, and the successor's rebuild then adopts it. The
//! core answers `Ambiguous { version }` with the version it gave the write. Versions are
//! unique (HLC time, coordinator id, sequence), so once the key's *new* coordinator serves
//! exactly that version, the write took effect and the client can be told so; before, such
//! writes answered `ERR ambiguous` although the new coordinator already served them to reads.
//!
//! Only a positive answer is given: a different version there does not prove the write lost
//! (a later write may have replaced it, or a lagging replica may still surface it through
//! repair), so anything else stays ambiguous. The question goes to the new coordinator with
//! the same read that `MEMGEST KEY` uses (`ReadReplica` at the coordinator: its Ready,
//! committed state, with the entry's version), locally or over RESP, and is bounded by
//! [`RESOLVE_DEADLINE`].

use crate::node::{client_addr, ClusterNode};
use ringlet_codec::resp::{decode_reply, encode_request, Reply};
use ringlet_replica::{ClientOp, ClientReply};
use ringlet_types::{key_slot, limits, Version};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest a front waits for the new coordinator to answer (a failover: lease + rebuild).
pub const RESOLVE_DEADLINE: Duration = Duration::from_secs(4);
/// Pause between tries while the new coordinator is not known or not ready.
const RESOLVE_RETRY: Duration = Duration::from_millis(50);
/// Reply bytes accepted from the remote coordinator: `[name, kind, version]` is tiny.
const RESOLVE_REPLY_BYTES_MAX: usize = 64 * 1024;

/// Whether the write that got `Ambiguous { version }` for `key` is what the key's current
/// coordinator serves. `false` means "still unknown", not "lost".
pub async fn took_effect(node: &ClusterNode, key: &[u8], version: Version) -> bool {
    let deadline = Instant::now() + RESOLVE_DEADLINE;
    let slot = key_slot(key);
    // Bounded by the deadline; the count bounds the loop even if the clock stalls.
    for _ in 0..(RESOLVE_DEADLINE.as_millis() / RESOLVE_RETRY.as_millis()).max(1) {
        if Instant::now() >= deadline {
            return false;
        }
        let coordinator = node.map().and_then(|m| {
            let c = m.coordinator(slot)?;
            Some((c, m.nodes.get(&c).and_then(|n| client_addr(&n.addr))))
        });
        let seen = match coordinator {
            Some((c, _)) if c == node.id() => local_version(node, key).await,
            Some((_, Some(addr))) => {
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::timeout(left, remote_version(addr, key))
                    .await
                    .ok()
                    .flatten()
            }
            _ => None,
        };
        match seen {
            Some(Seen::Version(v)) => return v == version,
            Some(Seen::Text(t)) => return t == version.to_string(),
            // The key has no value there: our SET is not what it serves.
            Some(Seen::Absent) => return false,
            None => tokio::time::sleep(RESOLVE_RETRY).await,
        }
    }
    false
}

enum Seen {
    Version(Version),
    /// A remote coordinator's version, as `MEMGEST KEY` prints it (`Version`'s Display).
    Text(String),
    Absent,
}

async fn local_version(node: &ClusterNode, key: &[u8]) -> Option<Seen> {
    let r = node
        .submit(ClientOp::ReadReplica { key: key.to_vec() })
        .await
        .ok()?;
    match r.body {
        ClientReply::Replica {
            version,
            value: Some(_),
            ..
        } => Some(Seen::Version(version)),
        ClientReply::Replica { value: None, .. } => Some(Seen::Absent),
        // Not ready, another epoch, not the coordinator after all: ask again.
        _ => None,
    }
}

/// `MEMGEST KEY key` at `addr`: `[name, kind, version]`, or nil for a missing key.
async fn remote_version(addr: SocketAddr, key: &[u8]) -> Option<Seen> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let mut out = Vec::new();
    encode_request(&mut out, &[b"MEMGEST", b"KEY", key]);
    s.write_all(&out).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let reply = loop {
        if let Ok(Some((r, _))) = decode_reply(&buf) {
            break r;
        }
        if buf.len() > RESOLVE_REPLY_BYTES_MAX.min(limits::RESP_BULK_BYTES_MAX as usize) {
            return None;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    match reply {
        Reply::Null => Some(Seen::Absent),
        Reply::Array(items) => match items.get(2) {
            Some(Reply::Bulk(v)) => std::str::from_utf8(v)
                .ok()
                .map(|s| Seen::Text(s.to_string())),
            _ => None,
        },
        // MOVED (the map moved on again), TRYAGAIN: ask again.
        _ => None,
    }
}
