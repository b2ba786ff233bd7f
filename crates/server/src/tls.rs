//! TLS for the client and HTTP ports (the peer port's mutual TLS is the transport's).
//!
//! All three use the node's one certificate, signed by the cluster's CA. On the client
//! port a client certificate from the same CA is accepted but not required: clients may
//! authenticate otherwise.

use std::sync::Arc;
use std::time::Duration;

use tenure_transport::Incoming;
use tenure_transport::{ClientAuth, PeerTls, TlsFiles, TlsMaterial};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::config::TlsPaths;
use crate::conn::{ChannelListener, Conn, Gate};

/// TLS handshakes in progress on the HTTP port at once; more connections wait in the
/// kernel's accept queue.
const HTTP_HANDSHAKES_MAX: usize = 64;

/// Why the node's TLS material cannot be used (the server stops with `tls: …`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TlsError(String);

/// A node's TLS material, loaded once at start.
pub(crate) struct NodeTls {
    paths: TlsPaths,
    material: TlsMaterial,
}

fn files(paths: &TlsPaths) -> TlsFiles {
    TlsFiles {
        ca: paths.ca.clone(),
        cert: paths.cert.clone(),
        key: paths.key.clone(),
    }
}

impl NodeTls {
    /// A private key that others than its owner may read is refused: it is the node's
    /// identity towards its peers and clients.
    pub(crate) fn load(paths: &TlsPaths) -> Result<NodeTls, TlsError> {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&paths.key)
            .map_err(|e| TlsError(format!("cannot read {}: {e}", paths.key.display())))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(TlsError(format!(
                "the private key {} has mode {:o}: others than its owner may read it (chmod 600 it)",
                paths.key.display(),
                mode & 0o777
            )));
        }
        let material = TlsMaterial::load(&files(paths)).map_err(|e| TlsError(e.to_string()))?;
        // A node needs the CA's certificate, never its key: whoever takes the node's disk
        // could then issue itself any name, a peer's included.
        if let Some(dir) = paths.ca.parent() {
            let ca_key = dir.join(tenure_transport::cert_files::CA_KEY);
            if ca_key.exists() {
                tracing::warn!(
                    "the CA's private key {} is beside this node's certificates: anyone who \
                     reads this node's disk can issue certificates for any node or client. Give \
                     each node only its bundle (`tenure certs` writes node-N/ with the CA \
                     certificate and the node's own certificate and key)",
                    ca_key.display()
                );
            }
        }
        Ok(NodeTls {
            paths: paths.clone(),
            material,
        })
    }

    /// The DNS names the node's certificate carries: names browsers may reach it by.
    pub(crate) fn dns_names(&self) -> Vec<String> {
        self.material.dns_names()
    }

    /// A client configuration trusting the cluster's CA and presenting this node's
    /// certificate, for this node's own HTTPS calls to other nodes (`/health`).
    pub(crate) fn client_config(&self) -> Result<tokio_rustls::rustls::ClientConfig, TlsError> {
        let mut config = self
            .material
            .client_config()
            .map_err(|e| TlsError(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    pub(crate) fn peer(&self) -> Result<PeerTls, TlsError> {
        PeerTls::new(&self.material).map_err(|e| TlsError(e.to_string()))
    }

    /// The gRPC server's TLS: this node's certificate; client certificates from the CA
    /// accepted, not required.
    pub(crate) fn grpc(
        &self,
        handshake_timeout: Duration,
    ) -> Result<tonic::transport::ServerTlsConfig, TlsError> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| TlsError(format!("cannot read {}: {e}", p.display())))
        };
        let identity =
            tonic::transport::Identity::from_pem(read(&self.paths.cert)?, read(&self.paths.key)?);
        Ok(tonic::transport::ServerTlsConfig::new()
            .identity(identity)
            .client_ca_root(tonic::transport::Certificate::from_pem(read(
                &self.paths.ca,
            )?))
            .client_auth_optional(true)
            .timeout(handshake_timeout))
    }

    /// The HTTP port's acceptor (HTTP/1.1; a client certificate from the CA accepted, not
    /// required).
    pub(crate) fn http_acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let mut config = self
            .material
            .server_config(ClientAuth::Optional)
            .map_err(|e| TlsError(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// The HTTP port over TLS: connections come through the port's [`Gate`] (bounded,
/// timed), and each TLS handshake runs in its own task (bounded in time and number), so
/// that a slow or silent client holds up nobody else.
pub(crate) fn https_listener(
    listener: Incoming,
    gate: Gate,
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
) -> std::io::Result<ChannelListener<TlsStream<Conn>>> {
    let local = listener.local_addr()?;
    let mut admitted = gate.serve(listener);
    let (tx, ready) = mpsc::channel(HTTP_HANDSHAKES_MAX);
    let handshakes = Arc::new(Semaphore::new(HTTP_HANDSHAKES_MAX));
    tokio::spawn(async move {
        loop {
            let Ok(permit) = Arc::clone(&handshakes).acquire_owned().await else {
                return;
            };
            let Some((conn, peer)) = admitted.recv().await else {
                return;
            };
            if tx.is_closed() {
                return;
            }
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(handshake_timeout, acceptor.accept(conn)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send((tls, peer)).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%peer, "http TLS handshake failed: {e}"),
                    Err(_) => tracing::debug!(%peer, "http TLS handshake timed out"),
                }
            });
        }
    });
    Ok(ChannelListener::new(ready, local))
}
