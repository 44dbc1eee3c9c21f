//! TLS on a cluster node's client port (issue 10; docs/design/cluster-tls.md).
//!
//! With `--tls-cert-file`, `--tls-key-file` and `--tls-ca-cert-file` (Redis's option names)
//! every node's client port speaks RESP over TLS only, as Redis with `port 0` and
//! `tls-port`: `redis-cli --tls --cacert ca.pem`, redis-py `ssl=True, ssl_ca_certs=...` and
//! `RedisCluster(ssl=True, ...)` connect; a plaintext client is dropped at the handshake.
//! The CA file is what the node's own RESP clients (the launcher's readiness probes, the
//! ambiguity check that asks a peer's client port) verify other nodes' certificates with.
//! Peer and control links are not encrypted yet; they are authenticated by the cluster
//! secret (docs/design/cluster-auth.md).

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::rustls;

/// Longest a client may take to finish the handshake before its connection is dropped (a
/// client that opens a socket and sends nothing must not hold a task forever).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a node's certificate, key and CA are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// What can go wrong loading TLS material (each names the file).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{0}: no PEM certificate in it")]
    NoCert(PathBuf),
    #[error("{0}: no PEM private key in it")]
    NoKey(PathBuf),
    #[error("{path}: {err}")]
    Pem {
        path: PathBuf,
        err: rustls_pki_types::pem::Error,
    },
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|err| TlsError::Pem {
            path: path.to_path_buf(),
            err,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCert(path.to_path_buf()));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsFiles {
    /// The server side of the client port.
    ///
    /// # Errors
    /// Unreadable or malformed files, or a key that does not match the certificate.
    pub fn acceptor(&self) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
        let chain = certs(&self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(|err| match err {
            rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey(self.key.clone()),
            err => TlsError::Pem {
                path: self.key.clone(),
                err,
            },
        })?;
        let cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
    }

    /// A client that trusts certificates issued by the CA file (for a node's own RESP calls
    /// to other nodes' client ports).
    ///
    /// # Errors
    /// Unreadable or malformed CA file.
    pub fn connector(&self) -> Result<tokio_rustls::TlsConnector, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for c in certs(&self.ca)? {
            roots.add(c)?;
        }
        let cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
    }

    /// Check every file now, so a bad path fails at start with its name, not at the first
    /// client.
    ///
    /// # Errors
    /// As [`TlsFiles::acceptor`] and [`TlsFiles::connector`].
    pub fn check(&self) -> Result<(), TlsError> {
        self.acceptor()?;
        self.connector()?;
        Ok(())
    }
}

/// Connect to `addr` over TLS, verifying the node's certificate against the CA for the
/// address's IP (node certificates name the addresses nodes listen on).
///
/// # Errors
/// Connection or handshake failure.
pub async fn connect(
    connector: &tokio_rustls::TlsConnector,
    addr: SocketAddr,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::IpAddress(addr.ip().into());
    tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake"))?
}
