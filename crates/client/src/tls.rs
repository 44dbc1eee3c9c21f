//! TLS for the native protocol (issue 10): a cluster started with `--tls-cert-file`,
//! `--tls-key-file` and `--tls-ca-cert-file` serves its client ports over TLS only, RESP and
//! native frames alike; [`ClientTls`] in [`crate::ClientConfig::tls`] makes this client speak
//! TLS to every node it dials, verifying each node's certificate against the CA for the IP
//! address it connected to (node certificates name the addresses nodes listen on, as
//! `CLUSTER SLOTS` and the map give them).

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

use crate::error::Error;

/// A TLS client configuration: the CA that issued the nodes' certificates.
#[derive(Clone)]
pub struct ClientTls {
    connector: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

impl ClientTls {
    /// Trust the certificates in `ca` (PEM), e.g. the cluster's `--tls-ca-cert-file`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file: unreadable, no certificate, or not a CA rustls
    /// accepts.
    pub fn from_ca_file(ca: &Path) -> Result<ClientTls, Error> {
        let bad = |why: String| Error::Config(format!("TLS CA file {}: {why}", ca.display()));
        let certs = CertificateDer::pem_file_iter(ca)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no PEM certificate in it".into()));
        }
        let mut roots = rustls::RootCertStore::empty();
        for c in certs {
            roots.add(c).map_err(|e| bad(e.to_string()))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(ClientTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(cfg)),
        })
    }

    /// The handshake over a connected socket, for the socket's peer IP address.
    pub(crate) async fn handshake(&self, tcp: TcpStream) -> std::io::Result<Box<dyn ConnIo>> {
        let name = ServerName::IpAddress(tcp.peer_addr()?.ip().into());
        Ok(Box::new(self.connector.connect(name, tcp).await?))
    }
}

/// A connection's byte stream: TCP, or TLS over it.
pub(crate) trait ConnIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> ConnIo for T {}
