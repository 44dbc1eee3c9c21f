//! Cluster membership proof for peer and control links (issue 10, case 4).
//!
//! Before, anyone on the host could ask the control port for the full cluster map ("Watch")
//! and could open a peer link claiming any node id: a forged `Replicate` with version 2^127
//! made `GET victim` return the forger's value. Now every peer and control connection starts
//! with a mutual challenge-response over a cluster secret (32 random bytes that `ringlet up`
//! generates; other nodes get it by `--cluster-secret-file` or `RINGLET_CLUSTER_SECRET`):
//!
//! ```text
//!  acceptor                                 connector
//!  nonce_a (16 B)  ───────────────────────▶
//!                  ◀─────────────────────── nonce_c (16 B) | HMAC(secret, role_c | nonce_a | nonce_c | id)
//!  HMAC(secret, role_a | nonce_a | nonce_c) ─▶   (checked; either side closes on a mismatch)
//! ```
//!
//! HMAC-SHA256, compared in constant time (`Mac::verify_slice`); fresh nonces on both sides
//! make every proof single-use. Frames after the handshake carry no MAC: the threat is another
//! local user connecting to our ports, not one who can splice into an established loopback
//! TCP connection (that needs root, which owns the processes anyway); links between hosts
//! need TLS, which is not built yet.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Bytes of a nonce and of a proof.
const NONCE_BYTES: usize = 16;
const MAC_BYTES: usize = 32;
/// Longest a handshake may take before the connection is dropped (a silent connector must not
/// hold an accept slot).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Environment variable holding the secret as 64 hex digits.
pub const SECRET_ENV: &str = "RINGLET_CLUSTER_SECRET";

/// This process's cluster secret: set once at startup ([`init`]), else read lazily from
/// [`SECRET_ENV`] (how `ringlet up` hands it to the nodes it spawns). One per process: every
/// node, control service and admin command of a process belongs to one cluster. `None`: the
/// ports are open (a warning is printed by the binaries that start nodes).
static PROCESS_SECRET: std::sync::OnceLock<Option<ClusterSecret>> = std::sync::OnceLock::new();

/// Set the process's secret from `file`, else [`SECRET_ENV`]; returns it.
///
/// # Errors
/// An unreadable file or a malformed secret (the process should refuse to start).
pub fn init(file: Option<&std::path::Path>) -> Result<Option<&'static ClusterSecret>, AuthError> {
    let s = ClusterSecret::load(file)?;
    let _ = PROCESS_SECRET.set(s);
    Ok(process_secret())
}

/// Set the process's secret explicitly (`ringlet up` after generating one). False if a secret
/// was already fixed.
pub fn set_process_secret(s: Option<ClusterSecret>) -> bool {
    PROCESS_SECRET.set(s).is_ok()
}

/// The process's secret (see [`PROCESS_SECRET`]).
pub fn process_secret() -> Option<&'static ClusterSecret> {
    PROCESS_SECRET
        .get_or_init(|| ClusterSecret::load(None).ok().flatten())
        .as_ref()
}

/// Role strings: a proof for one port type is not valid on another.
pub const PEER_ROLE: &[u8] = b"ringlet-peer-v1";
pub const CONTROL_ROLE: &[u8] = b"ringlet-control-v1";

/// Why a secret could not be loaded or a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cluster secret: expected 64 hex digits")]
    BadSecret,
    #[error("cluster secret file {0}: {1}")]
    File(String, std::io::Error),
    #[error("no randomness: {0}")]
    Random(String),
    #[error("handshake i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("handshake timed out")]
    Timeout,
    #[error("the other side did not prove it knows the cluster secret")]
    Rejected,
}

/// The cluster secret. `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret([u8; 32]);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

fn random<const N: usize>() -> Result<[u8; N], AuthError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(b)
}

impl ClusterSecret {
    /// 32 bytes from the OS's random source.
    ///
    /// # Errors
    /// The OS gave no randomness.
    pub fn generate() -> Result<ClusterSecret, AuthError> {
        Ok(ClusterSecret(random()?))
    }

    /// From 64 hex digits (surrounding whitespace ignored).
    ///
    /// # Errors
    /// Not 64 hex digits.
    pub fn from_hex(s: &str) -> Result<ClusterSecret, AuthError> {
        let s = s.trim();
        if s.len() != 64 {
            return Err(AuthError::BadSecret);
        }
        let mut b = [0u8; 32];
        for (i, out) in b.iter_mut().enumerate() {
            let pair = s.get(2 * i..2 * i + 2).ok_or(AuthError::BadSecret)?;
            *out = u8::from_str_radix(pair, 16).map_err(|_| AuthError::BadSecret)?;
        }
        Ok(ClusterSecret(b))
    }

    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The secret from `file` if given, else from [`SECRET_ENV`], else `None`.
    ///
    /// # Errors
    /// An unreadable file or a malformed secret.
    pub fn load(file: Option<&std::path::Path>) -> Result<Option<ClusterSecret>, AuthError> {
        if let Some(f) = file {
            let s = std::fs::read_to_string(f)
                .map_err(|e| AuthError::File(f.display().to_string(), e))?;
            return ClusterSecret::from_hex(&s).map(Some);
        }
        match std::env::var(SECRET_ENV) {
            Ok(s) if !s.trim().is_empty() => ClusterSecret::from_hex(&s).map(Some),
            _ => Ok(None),
        }
    }

    /// Write the secret to `path`, readable by the owner only.
    ///
    /// # Errors
    /// The file could not be written.
    pub fn write_file(&self, path: &std::path::Path) -> Result<(), AuthError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let err = |e| AuthError::File(path.display().to_string(), e);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(err)?;
        f.write_all(self.to_hex().as_bytes()).map_err(err)?;
        Ok(())
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length: this cannot fail.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        for p in parts {
            m.update(&(p.len() as u32).to_be_bytes());
            m.update(p);
        }
        m
    }
}

/// The acceptor's side: challenge, check the connector's proof (which covers `context`, e.g.
/// the HELLO it sent), prove knowledge back. `read_context` reads what the proof covers.
async fn accept_inner<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &ClusterSecret,
    role: &[u8],
) -> Result<Vec<u8>, AuthError> {
    let na: [u8; NONCE_BYTES] = random()?;
    s.write_all(&na).await?;
    s.flush().await?;
    // nonce_c | id length u16 | id | mac
    let mut nc = [0u8; NONCE_BYTES];
    s.read_exact(&mut nc).await?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await?;
    let n = usize::from(u16::from_be_bytes(len));
    if n > 256 {
        return Err(AuthError::Rejected);
    }
    let mut id = vec![0u8; n];
    s.read_exact(&mut id).await?;
    let mut tag = [0u8; MAC_BYTES];
    s.read_exact(&mut tag).await?;
    let mut want = role.to_vec();
    want.extend_from_slice(b"/connector");
    secret
        .mac(&[&want, &na, &nc, &id])
        .verify_slice(&tag)
        .map_err(|_| AuthError::Rejected)?;
    let mut mine = role.to_vec();
    mine.extend_from_slice(b"/acceptor");
    let back = secret.mac(&[&mine, &na, &nc, &id]).finalize().into_bytes();
    s.write_all(&back).await?;
    s.flush().await?;
    Ok(id)
}

/// Run the acceptor's half within [`HANDSHAKE_TIMEOUT`]; returns the identity the connector
/// proved (its node id text, or empty for an admin tool).
///
/// # Errors
/// I/O, timeout, or a wrong proof.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &ClusterSecret,
    role: &[u8],
) -> Result<Vec<u8>, AuthError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, accept_inner(s, secret, role))
        .await
        .map_err(|_| AuthError::Timeout)?
}

async fn connect_inner<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &ClusterSecret,
    role: &[u8],
    id: &[u8],
) -> Result<(), AuthError> {
    let mut na = [0u8; NONCE_BYTES];
    s.read_exact(&mut na).await?;
    let nc: [u8; NONCE_BYTES] = random()?;
    let mut r = role.to_vec();
    r.extend_from_slice(b"/connector");
    let tag = secret.mac(&[&r, &na, &nc, id]).finalize().into_bytes();
    let mut out = Vec::with_capacity(NONCE_BYTES + 2 + id.len() + MAC_BYTES);
    out.extend_from_slice(&nc);
    out.extend_from_slice(&(id.len() as u16).to_be_bytes());
    out.extend_from_slice(id);
    out.extend_from_slice(&tag);
    s.write_all(&out).await?;
    s.flush().await?;
    let mut back = [0u8; MAC_BYTES];
    s.read_exact(&mut back).await?;
    let mut a = role.to_vec();
    a.extend_from_slice(b"/acceptor");
    secret
        .mac(&[&a, &na, &nc, id])
        .verify_slice(&back)
        .map_err(|_| AuthError::Rejected)
}

/// The connector's half within [`HANDSHAKE_TIMEOUT`], proving `id` (≤ 256 bytes).
///
/// # Errors
/// I/O, timeout, or the acceptor could not prove the secret.
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &ClusterSecret,
    role: &[u8],
    id: &[u8],
) -> Result<(), AuthError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, connect_inner(s, secret, role, id))
        .await
        .map_err(|_| AuthError::Timeout)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn same_secret_passes_and_another_fails_both_ways() {
        let a = ClusterSecret::generate().unwrap();
        let b = ClusterSecret::generate().unwrap();
        assert_eq!(ClusterSecret::from_hex(&a.to_hex()).unwrap(), a);
        for (cs, ss, ok) in [(&a, &a, true), (&b, &a, false), (&a, &b, false)] {
            let (mut c, mut s) = tokio::io::duplex(1024);
            let (cs, ss) = (cs.clone(), ss.clone());
            let server = tokio::spawn(async move { accept(&mut s, &ss, b"peer").await });
            let client = connect(&mut c, &cs, b"peer", b"7").await;
            let server = server.await.unwrap();
            assert_eq!(server.is_ok(), ok, "acceptor");
            if ok {
                assert_eq!(server.unwrap(), b"7");
                assert!(client.is_ok());
            } else {
                assert!(client.is_err(), "connector accepted a wrong proof");
            }
        }
        // A role mismatch (a control proof replayed on a peer port) fails too.
        let (mut c, mut s) = tokio::io::duplex(1024);
        let s2 = a.clone();
        let server = tokio::spawn(async move { accept(&mut s, &s2, b"peer").await });
        let _ = connect(&mut c, &a, b"control", b"7").await;
        assert!(server.await.unwrap().is_err());
    }
}
