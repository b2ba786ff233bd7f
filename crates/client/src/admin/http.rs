//! A node's HTTP port (`/status`, `/metrics`), with TLS and a bearer token from a
//! `tenure://` URL or given, for `tenure plan --from`, [`super::diagnose`] and any program
//! that reads a node's status or metrics. The exchange itself is the workspace's one HTTP
//! client, [`tenure_transport::http::HttpClient`]: one request per connection, the whole
//! answer read and bounded, chunked bodies decoded, TLS offering HTTP/1.1 by ALPN as a
//! browser would.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use crate::tls::read_token;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
pub use tenure_transport::http::{parse_response, HttpClient, HttpError};

use crate::{Error, Result};

/// How long one HTTP exchange may take.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's HTTP port, and how to talk to it (the workspace's one HTTP client,
/// [`HttpClient`]). Nothing is contacted until [`NodeHttp::get`].
#[derive(Clone, Debug)]
pub struct NodeHttp {
    /// `HOST:PORT`.
    addr: String,
    client: HttpClient,
}

impl NodeHttp {
    /// `host:port`, plaintext or over `tls` ([`tls_config`]), with `Authorization: Bearer
    /// TOKEN` when `token` is given ([`read_token`]).
    pub fn new(
        host: &str,
        port: u16,
        tls: Option<Arc<rustls::ClientConfig>>,
        token: Option<String>,
    ) -> NodeHttp {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let mut client = match tls {
            Some(config) => HttpClient::tls(tokio_rustls::TlsConnector::from(config)),
            None => HttpClient::plaintext(),
        };
        if let Some(token) = token {
            client = client.with_bearer(&token);
        }
        NodeHttp { addr, client }
    }

    /// The HTTP port at `addr` (`HOST:PORT`) with the TLS files (`ca`, `cert`, `key`) and the
    /// bearer token (`token_file`) of a `tenure://` URL, parsed by the same code as
    /// [`crate::Client::connect`]'s. Fails with [`Error::InvalidUrl`] for a URL that is not
    /// a valid `tenure://` URL, or whose files cannot be read.
    pub fn from_cluster_url(url: &str, addr: &str) -> Result<NodeHttp> {
        let bad = |why: String| Error::InvalidUrl {
            url: crate::redact_url(url),
            why,
        };
        let crate::url::Target::Cluster(c) = crate::url::Target::parse(url)? else {
            return Err(bad("a node's HTTP port needs a tenure:// URL".into()));
        };
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| bad(format!("{addr:?} is not HOST:PORT")))?;
        let tls = match &c.ca {
            None => None,
            Some(ca) => {
                let identity = c
                    .identity
                    .as_ref()
                    .map(|(c, k)| (Path::new(c), Path::new(k)));
                Some(tls_config(Path::new(ca), identity).map_err(bad)?)
            }
        };
        let token = match &c.token_file {
            Some(path) => Some(read_token(Path::new(path)).map_err(bad)?),
            None => None,
        };
        Ok(NodeHttp::new(host, port, tls, token))
    }

    /// A node's HTTP port given as `http://HOST:PORT` or `https://HOST:PORT` (a trailing `/`
    /// allowed, nothing else), with `credentials` (TLS files, which an https URL needs the CA
    /// of; a bearer token file). Nothing is contacted; the error says what is wrong with the
    /// URL or the files, without naming the URL.
    pub fn from_http_url(
        url: &str,
        credentials: &crate::environment::Credentials,
    ) -> std::result::Result<NodeHttp, String> {
        let (tls_on, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(
                "give the node's HTTP port as http://HOST:PORT or https://HOST:PORT".into(),
            );
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#', '@']) {
            return Err(
                "give only the scheme, host and port (the paths are asked for by name)".into(),
            );
        }
        let hp: tenure_transport::HostPort = authority
            .parse()
            .map_err(|e: tenure_transport::AddrError| e.to_string())?;
        let c = credentials;
        let tls = if tls_on {
            let ca = c.ca.as_deref().ok_or(
                "an https URL needs the cluster's CA certificate: --ca FILE (or $TENURE_CA)",
            )?;
            let identity = match (&c.cert, &c.key) {
                (Some(cert), Some(key)) => Some((Path::new(cert), Path::new(key))),
                (None, None) => None,
                _ => return Err("--cert and --key go together".into()),
            };
            Some(tls_config(Path::new(ca), identity).map_err(|e| format!("TLS files: {e}"))?)
        } else {
            None
        };
        let token = match &c.token_file {
            Some(path) => {
                Some(read_token(Path::new(path)).map_err(|e| format!("--token-file: {e}"))?)
            }
            None => None,
        };
        Ok(NodeHttp::new(hp.host(), hp.port(), tls, token))
    }

    /// `GET path`: the body of a 200 answer, or why not (a refusal names what to give).
    pub async fn get(&self, path: &str) -> std::result::Result<String, String> {
        let (code, body) = self.fetch(path).await.map_err(|e| e.to_string())?;
        match code {
            200 => Ok(body),
            401 | 403 => Err(format!(
                "refused ({code}): {}; give a token (--token-file) or a client certificate \
                 (--cert/--key) of a principal with the observer or admin role",
                body.trim()
            )),
            _ => Err(format!("answered {code}: {}", body.trim())),
        }
    }

    /// `GET path`: the status code and body of whatever answers, within [`HTTP_TIMEOUT`].
    pub async fn fetch(&self, path: &str) -> std::result::Result<(u16, String), HttpError> {
        self.client.get(&self.addr, path, HTTP_TIMEOUT).await
    }
}

/// A rustls client configuration that trusts the CA certificates in `ca` (PEM) and presents
/// `identity` (a certificate chain and its private key, PEM) when given.
pub fn tls_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> std::result::Result<Arc<rustls::ClientConfig>, String> {
    let (_, roots) = crate::tls::read_ca("ca", &ca.to_string_lossy())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            let (cert_pem, key_pem) =
                crate::tls::read_identity(&cert.to_string_lossy(), &key.to_string_lossy())?;
            let chain = CertificateDer::pem_slice_iter(&cert_pem)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| format!("the cert file {cert:?} is not PEM: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|_| format!("the key file {key:?} holds no PEM private key"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate cannot be used: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_files_and_token_come_from_the_tenure_url() {
        let plain = NodeHttp::from_cluster_url("tenure://h:1", "127.0.0.1:9001").expect("plain");
        assert_eq!(plain.addr, "127.0.0.1:9001");
        assert!(!plain.client.is_tls());
        let e = NodeHttp::from_cluster_url("tenure://h:1?ca=/nonexistent/ca.pem", "h:9001")
            .expect_err("no such file");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        assert!(NodeHttp::from_cluster_url("etcd://h:1", "h:9001").is_err());
    }
}
