//! TLS for the backends that are not tenure's own cluster: reading the PEM files a URL names,
//! the rustls client configurations of PostgreSQL's `sslmode`s, and telling a TLS failure
//! apart from an unreachable server in the errors of the backends' client crates.
//!
//! Everything here is rustls with the *ring* provider, as in the rest of the workspace (no
//! OpenSSL).

use std::path::Path;
#[cfg(feature = "postgres")]
use std::sync::Arc;

#[cfg(feature = "postgres")]
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
#[cfg(feature = "postgres")]
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
#[cfg(feature = "postgres")]
use rustls::pki_types::{ServerName, UnixTime};
use rustls::RootCertStore;
#[cfg(feature = "postgres")]
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};

/// Read the file a URL parameter names; `what` names the parameter in the error.
pub(crate) fn read(what: &str, path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read the {what} file {path:?}: {e}"))
}

/// Read a PEM file of one or more CA certificates (the `ca` or `sslrootcert` parameter).
/// Returns the file's bytes and the certificates in it; a file without any is an error
/// here rather than a confusing handshake failure later.
pub(crate) fn read_ca(what: &str, path: &str) -> Result<(Vec<u8>, RootCertStore), String> {
    let pem = read(what, path)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("the {what} file {path:?} is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("the {what} file {path:?} holds a bad certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("the {what} file {path:?} holds no PEM certificate"));
    }
    Ok((pem, roots))
}

/// Read a client certificate and its key (the `cert` and `key` parameters), checking that
/// each holds what it should.
pub(crate) fn read_identity(cert: &str, key: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
    let cert_pem = read("cert", cert)?;
    let first = CertificateDer::pem_slice_iter(&cert_pem).next();
    if !matches!(first, Some(Ok(_))) {
        return Err(format!("the cert file {cert:?} holds no PEM certificate"));
    }
    let key_pem = read("key", key)?;
    rustls::pki_types::PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|_| format!("the key file {key:?} holds no PEM private key"))?;
    Ok((cert_pem, key_pem))
}

/// The bearer token in a token file (what `tenure token NAME` printed): its one line,
/// trimmed.
pub fn read_token(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {path:?}: {e}"))?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) || !token.is_ascii() {
        return Err(format!(
            "the token file {path:?} must hold one token (what `tenure token NAME` printed)"
        ));
    }
    Ok(token.to_string())
}

#[cfg(feature = "postgres")]
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// How a PostgreSQL server's certificate is checked (libpq's `sslmode`s that use TLS).
#[cfg(feature = "postgres")]
pub(crate) enum PgVerify {
    /// `require` (or `prefer`) without `sslrootcert`: encrypted, but any certificate is
    /// accepted, so an attacker in the middle is not kept out.
    Nothing,
    /// `verify-ca`, or `require`/`prefer` with `sslrootcert` (as libpq does): the certificate
    /// must be signed by one of these CAs, for any host name.
    Ca(RootCertStore),
    /// `verify-full`: signed by one of these CAs and naming the host dialed.
    Full(RootCertStore),
}

/// The rustls client configuration for a PostgreSQL connection.
#[cfg(feature = "postgres")]
pub(crate) fn pg_config(verify: PgVerify) -> Result<ClientConfig, String> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let config = match verify {
        PgVerify::Full(roots) => builder.with_root_certificates(roots).with_no_client_auth(),
        PgVerify::Ca(roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NameUnchecked {
                roots: Some(Arc::new(roots)),
                provider: provider(),
            }))
            .with_no_client_auth(),
        PgVerify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NameUnchecked {
                roots: None,
                provider: provider(),
            }))
            .with_no_client_auth(),
    };
    Ok(config)
}

/// A server certificate check that never looks at the host name: with `roots`
/// (`verify-ca`) the chain must lead to one of them; without (`require` with no CA, libpq's
/// meaning) any certificate is accepted. Either way the handshake signatures are verified
/// as usual, so the server must hold the certificate's key.
#[cfg(feature = "postgres")]
#[derive(Debug)]
struct NameUnchecked {
    roots: Option<Arc<RootCertStore>>,
    provider: Arc<CryptoProvider>,
}

#[cfg(feature = "postgres")]
impl ServerCertVerifier for NameUnchecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The rustls error somewhere in `e`'s chain of causes, if any: the handshake failed (a
/// certificate not signed by the CA given, not naming the host, expired; the server sent
/// something that is not TLS). `std::io::Error` hides the error it wraps from `source()`,
/// so it is looked into explicitly.
#[cfg(any(feature = "postgres", feature = "etcd"))]
pub(crate) fn rustls_cause<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    if let Some(r) = e.downcast_ref::<rustls::Error>() {
        return Some(r);
    }
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        if let Some(r) = rustls_cause(inner) {
            return Some(r);
        }
    }
    rustls_cause(e.source()?)
}

/// How long [`speaks_tls`] waits for the node's answer: a TLS server sends its alert at
/// once, so this bounds only a node that accepts and then says nothing (a frozen one).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(300);

/// Whether `addr` answers a plaintext request with a TLS alert record (content type 21,
/// version 3.x): what a TLS server sends before it closes a connection that did not start
/// with a handshake. Bounded by [`PROBE_TIMEOUT`]; changes nothing on the node.
pub(crate) async fn speaks_tls(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let probe = async {
        let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
            return false;
        };
        if s.write_all(b"GET / HTTP/1.1\r\nHost: tenure\r\n\r\n")
            .await
            .is_err()
        {
            return false;
        }
        let mut head = [0u8; 2];
        s.read_exact(&mut head).await.is_ok() && head == [0x15, 0x03]
    };
    tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .unwrap_or(false)
}

/// What to tell a plaintext client whose node at `addr` speaks TLS.
pub(crate) fn plaintext_to_tls(addr: &str) -> String {
    format!(
        "{addr} speaks TLS and this URL does not: give the CA that signed the nodes' \
         certificates and a client certificate (`?ca=FILE&cert=FILE&key=FILE`, or \
         --ca/--cert/--key, or $TENURE_CA/$TENURE_CERT/$TENURE_KEY; `tenure certs` makes \
         them), or a bearer token (`token_file=FILE`)"
    )
}
