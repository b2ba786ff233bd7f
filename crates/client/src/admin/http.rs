//! A node's HTTP port (`/status`, `/metrics`): one small HTTP/1.1 client, with TLS and a
//! bearer token when asked, for `tenure plan --from`, [`super::diagnose`] and any program
//! that reads a node's status or metrics.
//!
//! One request per connection (`Connection: close`), the whole answer read (at most
//! [`BODY_BYTES_MAX`]), chunked bodies decoded. TLS is rustls with the *ring* provider,
//! offering HTTP/1.1 by ALPN, as a browser would.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use crate::{Error, Result};

/// The most a node's `/metrics` or `/status` may send (a node sends a few tens of KiB).
pub const BODY_BYTES_MAX: usize = 16 << 20;
/// How long one HTTP exchange may take.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// A node's HTTP port, and how to talk to it. Nothing is contacted until [`NodeHttp::get`].
#[derive(Clone)]
pub struct NodeHttp {
    host: String,
    port: u16,
    /// `None`: plaintext.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// `Bearer TOKEN`, sent with every request.
    authorization: Option<String>,
}

impl std::fmt::Debug for NodeHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("NodeHttp")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .field("token", &self.authorization.is_some())
            .finish()
    }
}

/// Why an exchange failed.
#[derive(Debug)]
pub enum HttpError {
    /// The TCP connection could not be made (nothing listens, no route, …).
    Connect(std::io::Error),
    /// Anything after the connection: TLS, sending, reading, a timeout.
    Exchange(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Connect(e) => write!(f, "cannot connect: {e}"),
            HttpError::Exchange(e) => f.write_str(e),
        }
    }
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
        NodeHttp {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            tls,
            authorization: token.map(|t| format!("Bearer {t}")),
        }
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

    /// `GET path`: the body of a 200 answer, or why not (a refusal names what to give).
    pub async fn get(&self, path: &str) -> std::result::Result<String, String> {
        let raw = self.get_raw(path).await.map_err(|e| e.to_string())?;
        let (code, body) = parse_response(&raw)?;
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

    /// `GET path`: the whole answer as received (whatever the peer speaks), within
    /// [`HTTP_TIMEOUT`].
    pub async fn get_raw(&self, path: &str) -> std::result::Result<Vec<u8>, HttpError> {
        let exchange = async {
            let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(HttpError::Connect)?;
            let _ = tcp.set_nodelay(true);
            match &self.tls {
                None => self.exchange(tcp, path).await,
                Some(config) => {
                    let name = ServerName::try_from(self.host.clone()).map_err(|e| {
                        HttpError::Exchange(format!(
                            "{:?} cannot be checked against a certificate: {e}",
                            self.host
                        ))
                    })?;
                    let stream = tokio_rustls::TlsConnector::from(config.clone())
                        .connect(name, tcp)
                        .await
                        .map_err(|e| HttpError::Exchange(format!("TLS: {e}")))?;
                    self.exchange(stream, path).await
                }
            }
        };
        tokio::time::timeout(HTTP_TIMEOUT, exchange)
            .await
            .map_err(|_| HttpError::Exchange(format!("no answer within {HTTP_TIMEOUT:?}")))?
    }

    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        mut stream: S,
        path: &str,
    ) -> std::result::Result<Vec<u8>, HttpError> {
        let auth = self
            .authorization
            .as_ref()
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let host = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| HttpError::Exchange(format!("cannot send the request: {e}")))?;
        let mut raw = Vec::new();
        let mut limited = (&mut stream).take(BODY_BYTES_MAX as u64 + 1);
        match limited.read_to_end(&mut raw).await {
            Ok(_) => {}
            // A TLS peer may close without close_notify after the whole response.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(HttpError::Exchange(format!("cannot read the answer: {e}"))),
        }
        if raw.len() > BODY_BYTES_MAX {
            return Err(HttpError::Exchange(format!(
                "the answer is larger than {BODY_BYTES_MAX} bytes"
            )));
        }
        Ok(raw)
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

/// The bearer token in a token file (what `tenure token NAME` printed): its one line,
/// trimmed.
pub fn read_token(path: &Path) -> std::result::Result<String, String> {
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

/// Status code and body (de-chunked) of a whole HTTP/1.1 response.
pub fn parse_response(raw: &[u8]) -> std::result::Result<(u16, String), String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("not an HTTP answer (is this the node's HTTP port?)")?;
    let code: u16 = head
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or("not an HTTP answer (is this the node's HTTP port?)")?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok((code, body.to_string()));
    }
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n").ok_or("a malformed chunk")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "a malformed chunk size")?;
        if size == 0 {
            return Ok((code, out));
        }
        out.push_str(after.get(..size).ok_or("a short chunk")?);
        rest = after[size..]
            .strip_prefix("\r\n")
            .ok_or("a chunk without its end")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_answers_are_read_whole_and_dechunked() {
        let raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(raw), Ok((200, "abcde".to_string())));
        let raw = b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 3\r\n\r\nno\n";
        assert_eq!(parse_response(raw), Ok((401, "no\n".to_string())));
        assert!(parse_response(b"\x16\x03\x01garbage").is_err());
    }

    #[test]
    fn the_tls_files_and_token_come_from_the_tenure_url() {
        let plain = NodeHttp::from_cluster_url("tenure://h:1", "127.0.0.1:9001").expect("plain");
        assert_eq!((plain.host.as_str(), plain.port), ("127.0.0.1", 9001));
        assert!(plain.tls.is_none() && plain.authorization.is_none());
        let e = NodeHttp::from_cluster_url("tenure://h:1?ca=/nonexistent/ca.pem", "h:9001")
            .expect_err("no such file");
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        assert!(NodeHttp::from_cluster_url("etcd://h:1", "h:9001").is_err());
    }
}
