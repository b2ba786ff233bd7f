//! Mutual TLS between peers (rustls, no OpenSSL).
//!
//! Every node holds a certificate signed by the cluster's CA whose DNS subject alternative
//! name is [`node_name`]`(cluster, id)`, e.g. `node-2.prod.tenure`. That name is the node's
//! identity, and it binds both the node id and the cluster:
//!
//! - the dialer checks the acceptor's certificate against the name of the peer it means to
//!   reach, so a connection to the wrong node (or another cluster's node) fails;
//! - the acceptor requires a client certificate signed by the same CA, finishes the TLS
//!   handshake before it reads a single frame, and then accepts the hello only if the
//!   certificate is a node certificate of the node the hello claims to be
//!   ([`check_node_certificate`]): that exact name (not a wildcard that happens to match),
//!   and usable for both server and client authentication (a client-only certificate that
//!   names a node is refused). The dialer applies the same check to the acceptor.
//!
//! A stranger without a certificate from the cluster's CA therefore cannot send any frame,
//! and a node cannot speak for another node. What a stolen node certificate allows is in
//! `docs/SECURITY.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tenure_core::types::NodeId;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// The DNS name a node's certificate must carry: `node-<id>.<cluster>.tenure`.
pub fn node_name(cluster_id: &str, id: NodeId) -> String {
    format!("node-{id}.{cluster_id}.tenure")
}

/// The DNS name a client certificate for principal `name` carries:
/// `client-<name>.<cluster>.tenure`.
pub fn client_name(cluster_id: &str, name: &str) -> String {
    format!("client-{name}.{cluster_id}.tenure")
}

/// The client principal a certificate names: `<name>` from a DNS subject alternative name
/// `client-<name>.<cluster>.tenure` of this cluster, confirmed by the same name check as
/// the peers' ([`cert_names`]). `None` when it names no client of this cluster (a node's
/// certificate, another cluster's, or one that cannot be parsed). The caller has already
/// verified the certificate's chain to the cluster's CA (the TLS handshake did).
pub fn client_principal(leaf: &CertificateDer<'_>, cluster_id: &str) -> Option<String> {
    let parsed = webpki::EndEntityCert::try_from(leaf).ok()?;
    let suffix = format!(".{cluster_id}.tenure");
    let name = parsed.valid_dns_names().find_map(|dns| {
        let name = dns.strip_prefix("client-")?.strip_suffix(suffix.as_str())?;
        (!name.is_empty() && !name.contains('.') && !name.contains('*')).then(|| name.to_string())
    })?;
    cert_names(leaf, &client_name(cluster_id, &name)).ok()?;
    Some(name)
}

/// Whether `cluster_id` can stand in a DNS name (and so in [`node_name`]): 1 to 63
/// lowercase letters, digits and inner hyphens.
pub fn cluster_id_is_dns_label(cluster_id: &str) -> bool {
    let bytes = cluster_id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// Whether a TLS server asks its clients for a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// Never asked for.
    None,
    /// Asked for; one must be signed by the CA if presented, and a client may present none.
    Optional,
    /// Required, signed by the CA.
    Required,
}

/// A TLS set-up that cannot work. Each names the file or the rule.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {why}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Reason.
        why: String,
    },
    /// A file holds no PEM item of the kind needed.
    #[error("{path}: {why}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        why: String,
    },
    /// rustls refused the material (for example a key that does not match the certificate).
    #[error("TLS configuration refused: {0}")]
    Rustls(String),
    /// The cluster id cannot stand in a certificate name.
    #[error("cluster id {0:?} cannot be used with TLS: it must be 1 to 63 lowercase letters, digits and inner hyphens")]
    ClusterId(String),
}

/// PEM material read from files: the CA that signs every certificate of the cluster, and
/// this party's own certificate chain and private key.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// CA certificate(s), PEM.
    pub ca: PathBuf,
    /// This party's certificate chain, PEM, leaf first.
    pub cert: PathBuf,
    /// This party's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Loaded material, ready to build rustls configurations from.
#[derive(Debug)]
pub struct TlsMaterial {
    roots: Arc<RootCertStore>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Clone for TlsMaterial {
    fn clone(&self) -> Self {
        TlsMaterial {
            roots: Arc::clone(&self.roots),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsMaterial {
    /// Reads the three files.
    pub fn load(files: &TlsFiles) -> Result<TlsMaterial, TlsError> {
        TlsMaterial::from_pem(
            (&files.ca, &read(&files.ca)?),
            (&files.cert, &read(&files.cert)?),
            (&files.key, &read(&files.key)?),
        )
    }

    /// Parses PEM bytes; the paths only name the sources in errors.
    pub fn from_pem(
        ca: (&Path, &[u8]),
        cert: (&Path, &[u8]),
        key: (&Path, &[u8]),
    ) -> Result<TlsMaterial, TlsError> {
        let pem_error = |path: &Path, why: String| TlsError::Pem {
            path: path.to_path_buf(),
            why,
        };
        let mut roots = RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(ca.1) {
            let der = der.map_err(|e| pem_error(ca.0, format!("bad PEM: {e}")))?;
            roots
                .add(der)
                .map_err(|e| pem_error(ca.0, format!("not a usable CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(pem_error(ca.0, "no CA certificate in the file".into()));
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.1)
            .collect::<Result<_, _>>()
            .map_err(|e| pem_error(cert.0, format!("bad PEM: {e}")))?;
        if chain.is_empty() {
            return Err(pem_error(cert.0, "no certificate in the file".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key.1)
            .map_err(|e| pem_error(key.0, format!("no usable private key: {e}")))?;
        Ok(TlsMaterial {
            roots: Arc::new(roots),
            chain,
            key,
        })
    }

    /// The DNS names this party's certificate carries (subject alternative names).
    pub fn dns_names(&self) -> Vec<String> {
        self.chain
            .first()
            .and_then(|leaf| webpki::EndEntityCert::try_from(leaf).ok())
            .map(|cert| cert.valid_dns_names().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// The CA roots, for verifying others.
    pub fn roots(&self) -> Arc<RootCertStore> {
        Arc::clone(&self.roots)
    }

    /// A server configuration that presents this party's certificate and asks clients for
    /// one signed by the CA as `client_auth` says.
    pub fn server_config(&self, client_auth: ClientAuth) -> Result<ServerConfig, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots(), provider());
        let builder = match client_auth {
            ClientAuth::None => builder.with_no_client_auth(),
            ClientAuth::Optional => builder.with_client_cert_verifier(
                verifier
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| TlsError::Rustls(e.to_string()))?,
            ),
            ClientAuth::Required => builder.with_client_cert_verifier(
                verifier
                    .build()
                    .map_err(|e| TlsError::Rustls(e.to_string()))?,
            ),
        };
        let mut config = builder
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        // Peer connections are one-way after the handshake; no resumption tickets.
        config.send_tls13_tickets = 0;
        Ok(config)
    }

    /// A client configuration that trusts only the CA and presents this party's
    /// certificate.
    pub fn client_config(&self) -> Result<ClientConfig, TlsError> {
        ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?
            .with_root_certificates(self.roots())
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Rustls(e.to_string()))
    }
}

/// The peer transport's TLS: one acceptor and one connector, both with this node's
/// certificate, both trusting only the cluster's CA.
#[derive(Clone)]
pub struct PeerTls {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) connector: TlsConnector,
    /// The CA, for [`check_node_certificate`].
    pub(crate) roots: Arc<RootCertStore>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls { .. }")
    }
}

impl PeerTls {
    /// Builds the peer TLS for `material`; the certificate should carry
    /// [`node_name`]`(cluster, id)` (peers refuse it otherwise).
    pub fn new(material: &TlsMaterial) -> Result<PeerTls, TlsError> {
        Ok(PeerTls {
            acceptor: TlsAcceptor::from(Arc::new(material.server_config(ClientAuth::Required)?)),
            connector: TlsConnector::from(Arc::new(material.client_config()?)),
            roots: material.roots(),
        })
    }
}

/// Whether the verified certificate `leaf` names `name` (a DNS subject alternative name).
pub fn cert_names(leaf: &CertificateDer<'_>, name: &str) -> Result<(), String> {
    let parsed = ParsedCertificate::try_from(leaf).map_err(|e| e.to_string())?;
    let server_name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    rustls::client::verify_server_name(&parsed, &server_name).map_err(|e| e.to_string())
}

/// What a peer must present to speak as node `id` (beyond the TLS handshake's chain check):
/// a DNS subject alternative name exactly [`node_name`]`(cluster, id)` (a wildcard SAN is
/// not a node's name, though TLS name matching would accept it), and a chain to `roots`
/// that verifies with the extended key usages of a node, serverAuth *and* clientAuth, both
/// present (a certificate issued for a client only, or without any extended key usage, is
/// not a node's; `tenure certs` issues nodes both).
pub fn check_node_certificate(
    chain: &[CertificateDer<'_>],
    roots: &RootCertStore,
    cluster_id: &str,
    id: NodeId,
) -> Result<(), String> {
    let leaf = chain.first().ok_or("no certificate")?;
    let name = node_name(cluster_id, id);
    let parsed = webpki::EndEntityCert::try_from(leaf).map_err(|e| e.to_string())?;
    if !parsed.valid_dns_names().any(|dns| dns == name) {
        return Err(format!(
            "the certificate does not name {name} exactly (a node certificate carries its own \
             name, not a wildcard)"
        ));
    }
    parsed
        .verify_for_usage(
            provider().signature_verification_algorithms.all,
            &roots.roots,
            &chain[1..],
            rustls::pki_types::UnixTime::now(),
            NodeUsage,
            None,
            None,
        )
        .map_err(|e| {
            format!(
                "not a node certificate ({e}): a peer's certificate needs both the serverAuth \
                 and clientAuth extended key usages"
            )
        })?;
    Ok(())
}

/// The extended key usages of a node certificate: serverAuth and clientAuth, both required.
struct NodeUsage;

/// id-kp-serverAuth (1.3.6.1.5.5.7.3.1), DER-encoded without tag and length.
const EKU_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
/// id-kp-clientAuth (1.3.6.1.5.5.7.3.2).
const EKU_CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];

impl webpki::ExtendedKeyUsageValidator for NodeUsage {
    fn validate(&self, iter: webpki::KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        let (server, client) = (
            webpki::KeyPurposeId::new(EKU_SERVER_AUTH),
            webpki::KeyPurposeId::new(EKU_CLIENT_AUTH),
        );
        let (mut has_server, mut has_client) = (false, false);
        for id in iter {
            let id = id?;
            has_server |= id == server;
            has_client |= id == client;
        }
        if has_server && has_client {
            Ok(())
        } else {
            // The caller's message says which usages a node certificate needs.
            #[allow(deprecated)]
            Err(webpki::Error::RequiredEkuNotFound)
        }
    }
}

/// The server name a dialer expects of peer `id`.
pub(crate) fn peer_server_name(
    cluster_id: &str,
    id: NodeId,
) -> Result<ServerName<'static>, String> {
    ServerName::try_from(node_name(cluster_id, id)).map_err(|e| e.to_string())
}
