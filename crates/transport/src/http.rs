//! The one HTTP/1.1 client of a node's HTTP port (`/status`, `/metrics`, `/health`,
//! `/debug/block`, the dashboard's actions), for the tools around a cluster: one request per
//! connection, over TLS when the client has it (the node's certificate checked against the
//! cluster's CA, by the address's host name or IP), with a bearer token when it has one, the
//! whole exchange within a deadline and the answer's body de-chunked and bounded. A failed
//! connection is told apart from a failed exchange ([`HttpError`]), so that a caller can say
//! "nothing listens there".
//!
//! It is not a general HTTP client: a node's HTTP port answers small documents and closes
//! the connection after each, and that is all this reads.

use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::addr::HostPort;
use crate::tls::{TlsError, TlsFiles, TlsMaterial};

/// The largest answer read (`/metrics` of a busy node is tens of KiB).
pub const BODY_MAX: usize = 16 << 20;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The TCP connection could not be made (nothing listens, no route, no such host).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address as given.
        addr: String,
        /// What the connection attempt said.
        source: std::io::Error,
    },
    /// Anything after the connection: TLS, sending, reading, the deadline, an answer that is
    /// not HTTP/1.x.
    #[error("{0}")]
    Exchange(String),
}

impl HttpError {
    /// Whether nothing listens at the address (the connection was refused).
    pub fn is_refused(&self) -> bool {
        matches!(self, HttpError::Connect { source, .. }
            if source.kind() == std::io::ErrorKind::ConnectionRefused)
    }
}

impl From<HttpError> for std::io::Error {
    fn from(e: HttpError) -> std::io::Error {
        match e {
            HttpError::Connect { source, .. } => source,
            HttpError::Exchange(why) => std::io::Error::other(why),
        }
    }
}

/// A client of nodes' HTTP ports: plaintext, or TLS (with or without a client certificate);
/// with or without a bearer token. Cheap to clone.
#[derive(Clone, Default)]
pub struct HttpClient {
    tls: Option<TlsConnector>,
    /// The name the node's certificate must carry; `None`: the address's host.
    server_name: Option<String>,
    /// The largest answer read; `None`: [`BODY_MAX`].
    body_max: Option<usize>,
    /// More header lines, each ending in `\r\n` (an `authorization` among them: never
    /// printed).
    headers: String,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("tls", &self.tls.is_some())
            .field("headers", &"<redacted>")
            .finish()
    }
}

impl HttpClient {
    /// Plaintext, no token.
    pub fn plaintext() -> HttpClient {
        HttpClient::default()
    }

    /// TLS with `connector` (which decides the trusted CA and the client certificate).
    pub fn tls(connector: TlsConnector) -> HttpClient {
        HttpClient {
            tls: Some(connector),
            ..HttpClient::default()
        }
    }

    /// TLS trusting `files.ca` and presenting `files.cert` / `files.key`, offering HTTP/1.1.
    pub fn from_files(files: &TlsFiles) -> Result<HttpClient, TlsError> {
        let mut config = TlsMaterial::load(files)?.client_config()?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(HttpClient::tls(TlsConnector::from(Arc::new(config))))
    }

    /// The same client, sending `authorization: Bearer <token>` with every request.
    pub fn with_bearer(self, token: &str) -> HttpClient {
        self.with_header("authorization", &format!("Bearer {token}"))
    }

    /// The same client, sending the header `name: value` with every request.
    pub fn with_header(mut self, name: &str, value: &str) -> HttpClient {
        self.headers.push_str(&format!("{name}: {value}\r\n"));
        self
    }

    /// The same client, checking the node's certificate for `name` (a node's name,
    /// `node-<id>.<cluster>.tenure`) instead of the address's host.
    pub fn with_server_name(mut self, name: &str) -> HttpClient {
        self.server_name = Some(name.to_string());
        self
    }

    /// The same client, refusing answers longer than `bytes` (headers included).
    pub fn with_body_max(mut self, bytes: usize) -> HttpClient {
        self.body_max = Some(bytes);
        self
    }

    /// Whether requests go over TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// `GET path` on `addr` (`HOST:PORT`, a name or an IP): the status code and the body.
    pub async fn get(
        &self,
        addr: impl Display,
        path: &str,
        within: Duration,
    ) -> Result<(u16, String), HttpError> {
        self.request(addr, "GET", path, "", within).await
    }

    /// `method path` with a plain-text `body` on `addr`, the whole exchange (connection and
    /// TLS handshake included) within `within`: the status code and the body.
    pub async fn request(
        &self,
        addr: impl Display,
        method: &str,
        path: &str,
        body: &str,
        within: Duration,
    ) -> Result<(u16, String), HttpError> {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: text/plain\r\n{}Content-Length: {}\r\n\r\n{body}",
            self.headers,
            body.len()
        );
        self.send_raw(addr, request.as_bytes(), within).await
    }

    /// Writes `raw` as it is (a request line and headers, perhaps a body, perhaps not all
    /// of what its headers announce) and reads the answer, within `within`: for tests of
    /// how a node treats requests a well-behaved client would not send. This client's own
    /// headers are not added.
    pub async fn send_raw(
        &self,
        addr: impl Display,
        raw: &[u8],
        within: Duration,
    ) -> Result<(u16, String), HttpError> {
        let addr = addr.to_string();
        let exchange = async {
            let refused = |source| HttpError::Connect {
                addr: addr.clone(),
                source,
            };
            let target: HostPort = addr.parse().map_err(|e: crate::AddrError| {
                refused(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    e.to_string(),
                ))
            })?;
            let tcp = tokio::net::TcpStream::connect((target.host(), target.port()))
                .await
                .map_err(refused)?;
            let _ = tcp.set_nodelay(true);
            let limit = self.body_max.unwrap_or(BODY_MAX + 64 * 1024);
            match &self.tls {
                None => exchange(tcp, raw, limit).await,
                Some(tls) => {
                    let host = self.server_name.as_deref().unwrap_or(target.host());
                    let name = ServerName::try_from(host.to_string()).map_err(|e| {
                        HttpError::Exchange(format!(
                            "{host:?} cannot be checked against a certificate: {e}"
                        ))
                    })?;
                    let stream = tls
                        .connect(name, tcp)
                        .await
                        .map_err(|e| HttpError::Exchange(format!("TLS: {e}")))?;
                    exchange(stream, raw, limit).await
                }
            }
        };
        let answer = tokio::time::timeout(within, exchange).await.map_err(|_| {
            HttpError::Exchange(format!("no answer from {addr} within {within:?}"))
        })??;
        parse_response(&answer).map_err(HttpError::Exchange)
    }
}

/// Writes `request` on `stream` and reads the whole answer, at most `limit` bytes. A peer
/// that resets or closes without TLS's close_notify after answering still answered: what
/// was read is parsed (and refused if it is not whole).
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &[u8],
    limit: usize,
) -> Result<Vec<u8>, HttpError> {
    let failed = |what: &str, e: std::io::Error| HttpError::Exchange(format!("{what}: {e}"));
    stream
        .write_all(request)
        .await
        .map_err(|e| failed("cannot send the request", e))?;
    stream
        .flush()
        .await
        .map_err(|e| failed("cannot send the request", e))?;
    let mut raw = Vec::new();
    let read = (&mut stream)
        .take(limit as u64 + 1)
        .read_to_end(&mut raw)
        .await;
    match read {
        Ok(_) if raw.len() > limit => Err(HttpError::Exchange(format!(
            "the answer is larger than {limit} bytes"
        ))),
        Ok(_) => Ok(raw),
        Err(_) if !raw.is_empty() => Ok(raw),
        Err(e) => Err(failed("cannot read the answer", e)),
    }
}

/// The status code and the (de-chunked) body of one whole HTTP/1.x answer.
pub fn parse_response(raw: &[u8]) -> Result<(u16, String), String> {
    const NOT_HTTP: &str = "not an HTTP answer (is this the node's HTTP port?)";
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or(NOT_HTTP)?;
    let code: u16 = head
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or(NOT_HTTP)?;
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
        rest = after
            .get(size..)
            .and_then(|r| r.strip_prefix("\r\n"))
            .ok_or("a chunk without its end")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_chunked_answers_parse() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(parse_response(plain).unwrap(), (200, "hello".into()));
        let chunked =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap(), (404, "abcde".into()));
    }

    #[test]
    fn malformed_answers_are_errors() {
        for raw in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"garbage\r\n\r\n",
            b"\x16\x03\x01garbage",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc",
        ] {
            assert!(parse_response(raw).is_err(), "{raw:?}");
        }
    }

    #[tokio::test]
    async fn a_request_carries_its_token_and_body() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 4096];
            let n = s.read(&mut buf).await.unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            String::from_utf8_lossy(&buf[..n]).to_string()
        });
        let client = HttpClient::plaintext().with_bearer("s3cret");
        let answer = client
            .request(addr, "POST", "/debug/block", "1,2", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(answer, (200, "ok".into()));
        let request = server.await.unwrap();
        assert!(
            request.starts_with("POST /debug/block HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains("authorization: Bearer s3cret\r\n"),
            "{request}"
        );
        assert!(request.ends_with("\r\n\r\n1,2"), "{request}");
        assert!(!format!("{client:?}").contains("s3cret"));
    }
}
