//! TLS on a cluster node's client port (issue 10; docs/design/cluster-tls.md).
//!
//! With `--tls-cert-file`, `--tls-key-file` and `--tls-ca-cert-file` (Redis's option names)
//! every node's client port speaks RESP over TLS only, as Redis with `port 0` and
//! `tls-port`: `redis-cli --tls --cacert ca.pem`, redis-py `ssl=True, ssl_ca_certs=...` and
//! `RedisCluster(ssl=True, ...)` connect; a plaintext client is dropped at the handshake.
//! The CA file is what the node's own RESP clients (the launcher's readiness probes, the
//! ambiguity check that asks a peer's client port) verify other nodes' certificates with.
//!
//! The same files encrypt the links between members (peer links, control links, the CLI's
//! admin requests): mutual TLS, each side presenting its certificate and verifying the
//! other's against the CA, with the cluster-secret proof (docs/design/cluster-auth.md) still
//! run inside the TLS session. [`set_link_tls`] turns it on for the process; [`link_connect`]
//! and [`link_accept`] are what every link uses, so a link cannot forget it.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
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
        let cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs(&self.cert)?, self.key()?)?;
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
    }

    /// A client that trusts certificates issued by the CA file (for a node's own RESP calls
    /// to other nodes' client ports).
    ///
    /// # Errors
    /// Unreadable or malformed CA file.
    pub fn connector(&self) -> Result<tokio_rustls::TlsConnector, TlsError> {
        let cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(self.roots()?)
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
        self.link()?;
        Ok(())
    }

    fn key(&self) -> Result<PrivateKeyDer<'static>, TlsError> {
        PrivateKeyDer::from_pem_file(&self.key).map_err(|err| match err {
            rustls_pki_types::pem::Error::NoItemsFound => TlsError::NoKey(self.key.clone()),
            err => TlsError::Pem {
                path: self.key.clone(),
                err,
            },
        })
    }

    fn roots(&self) -> Result<Arc<rustls::RootCertStore>, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for c in certs(&self.ca)? {
            roots.add(c)?;
        }
        Ok(Arc::new(roots))
    }

    /// Both ends of a member link: the server requires a client certificate issued by the CA,
    /// the client presents the node's own certificate (so a node certificate must allow both
    /// server and client use: no extended key usage, or both).
    ///
    /// # Errors
    /// Unreadable or malformed files, or a key that does not match the certificate.
    pub fn link(&self) -> Result<LinkTls, TlsError> {
        let roots = self.roots()?;
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                .build()
                .map_err(|e| TlsError::Rustls(rustls::Error::General(e.to_string())))?;
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs(&self.cert)?, self.key()?)?;
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs(&self.cert)?, self.key()?)?;
        Ok(LinkTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        })
    }
}

/// Mutual TLS for the links between members (see [`TlsFiles::link`]).
#[derive(Clone)]
pub struct LinkTls {
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
}

static LINK_TLS: OnceLock<LinkTls> = OnceLock::new();

/// Encrypt every member link of this process from now on (nodes, the control service, the
/// CLI's admin requests). Call before any link opens; a second call is ignored, so a process
/// has one link configuration for its life.
///
/// # Errors
/// As [`TlsFiles::link`].
pub fn set_link_tls(files: &TlsFiles) -> Result<(), TlsError> {
    let link = files.link()?;
    let _ = LINK_TLS.set(link);
    Ok(())
}

/// Whether member links of this process are encrypted.
pub fn link_tls_enabled() -> bool {
    LINK_TLS.get().is_some()
}

/// A member link's byte stream: plain TCP, or TLS over it.
pub trait LinkIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> LinkIo for T {}
/// A boxed [`LinkIo`]: one type for both, so the link code is written once.
pub type LinkStream = Box<dyn LinkIo>;

/// Open a member link to `addr` ("ip:port" or "host:port"): TCP with no delay, then the TLS
/// handshake (bounded by [`HANDSHAKE_TIMEOUT`]) when [`set_link_tls`] was called. The peer's
/// certificate must name the IP address connected to.
///
/// # Errors
/// Connection or handshake failure.
pub async fn link_connect(addr: &str) -> std::io::Result<LinkStream> {
    let tcp = TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    let Some(link) = LINK_TLS.get() else {
        return Ok(Box::new(tcp));
    };
    let name = ServerName::IpAddress(tcp.peer_addr()?.ip().into());
    let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, link.connector.connect(name, tcp))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake"))??;
    Ok(Box::new(tls))
}

/// The accepting side of [`link_connect`]: a connector without a certificate from the CA
/// (or without TLS at all) fails the handshake and gets nothing.
///
/// # Errors
/// Handshake failure or timeout.
pub async fn link_accept(tcp: TcpStream) -> std::io::Result<LinkStream> {
    let _ = tcp.set_nodelay(true);
    let Some(link) = LINK_TLS.get() else {
        return Ok(Box::new(tcp));
    };
    let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, link.acceptor.accept(tcp))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake"))??;
    Ok(Box::new(tls))
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
