//! The other members' own `/status`, fetched by the node serving the dashboard: each over
//! its HTTP port, all at once, each within [`PEER_STATUS_TIMEOUT`], so that one silent
//! member delays the page by that much at most and is shown as unreachable.
//!
//! With TLS the node dials as itself: its own certificate as the client certificate, and
//! the member's certificate checked for `node-<id>.<cluster>.tenure` against the cluster's
//! CA (a member's `/status` lets the cluster's nodes in, see `crate::http`). Without TLS, a
//! policy from an auth file can only be met with the viewer's bearer token, which is passed
//! on to the member; with no policy at all nothing is needed.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tenure_core::types::NodeId;
use tenure_transport::{HostPort, TlsFiles, TlsMaterial};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use crate::config::ServerConfig;

/// How long one member's `/status` may take, connection and TLS handshake included.
pub const PEER_STATUS_TIMEOUT: Duration = Duration::from_millis(800);
/// Largest `/status` answer read from a member.
pub const PEER_STATUS_BYTES_MAX: usize = 64 * 1024;

/// What the dashboard reads of a member's `/status` (fields a member of an older version
/// does not send are left empty).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default)]
pub struct MemberStatus {
    /// The member's id, as it says.
    pub id: u64,
    /// Its role.
    pub role: String,
    /// Its term.
    pub term: u64,
    /// Whom it voted for in that term.
    pub vote: Option<u64>,
    /// The leader it knows (0: none).
    pub leader: u64,
    /// Its commit index.
    pub commit_index: u64,
    /// Its applied index.
    pub applied_index: u64,
    /// Its last log index.
    pub last_index: u64,
    /// Its version.
    pub version: String,
}

/// Fetches members' `/status`.
#[derive(Clone)]
pub struct PeerClient {
    tls: Option<TlsConnector>,
    cluster_id: String,
}

impl PeerClient {
    /// A client for `config`'s cluster: with TLS on, this node's certificate and CA.
    pub fn new(config: &ServerConfig) -> Result<PeerClient, String> {
        let tls = match &config.tls {
            None => None,
            Some(paths) => {
                let material = TlsMaterial::load(&TlsFiles {
                    ca: paths.ca.clone(),
                    cert: paths.cert.clone(),
                    key: paths.key.clone(),
                })
                .map_err(|e| e.to_string())?;
                let mut client = material.client_config().map_err(|e| e.to_string())?;
                client.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(TlsConnector::from(Arc::new(client)))
            }
        };
        Ok(PeerClient {
            tls,
            cluster_id: config.cluster_id.clone(),
        })
    }

    /// Member `id`'s `/status` at `addr`, or why it could not be had.
    pub async fn status(
        &self,
        id: NodeId,
        addr: &HostPort,
        authorization: Option<&str>,
    ) -> Result<MemberStatus, String> {
        let fetch = async {
            let sockets = addr
                .resolve()
                .await
                .map_err(|e| format!("cannot resolve {addr}: {e}"))?;
            let socket = sockets
                .first()
                .copied()
                .ok_or_else(|| format!("{addr} resolves to no address"))?;
            let tcp = tokio::net::TcpStream::connect(socket)
                .await
                .map_err(|e| format!("cannot connect to {socket}: {e}"))?;
            let _ = tcp.set_nodelay(true);
            // The viewer's token goes only where TLS does not identify this node: over
            // TLS the member knows it by its certificate.
            let raw = match &self.tls {
                None => get_status(tcp, addr, authorization).await,
                Some(tls) => {
                    let name = tenure_transport::tls::node_name(&self.cluster_id, id);
                    let name = ServerName::try_from(name).map_err(|e| e.to_string())?;
                    let stream = tls
                        .connect(name, tcp)
                        .await
                        .map_err(|e| format!("TLS with {socket}: {e}"))?;
                    get_status(stream, addr, None).await
                }
            }
            .map_err(|e| format!("{socket}: {e}"))?;
            parse_status(&raw, id)
        };
        match tokio::time::timeout(PEER_STATUS_TIMEOUT, fetch).await {
            Ok(answer) => answer,
            Err(_) => Err(format!(
                "no answer from {addr} within {} ms",
                PEER_STATUS_TIMEOUT.as_millis()
            )),
        }
    }
}

async fn get_status<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    addr: &HostPort,
    authorization: Option<&str>,
) -> std::io::Result<Vec<u8>> {
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "GET /status HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: application/json\r\n{auth}\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let mut raw = Vec::new();
    let mut limited = (&mut stream).take(PEER_STATUS_BYTES_MAX as u64 + 1);
    match limited.read_to_end(&mut raw).await {
        Ok(_) => Ok(raw),
        // A TLS peer that closes without close_notify after a complete answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
        Err(e) => Err(e),
    }
}

/// The member's answer: its status if it said 200 with JSON, otherwise what it said.
fn parse_status(raw: &[u8], id: NodeId) -> Result<MemberStatus, String> {
    if raw.len() > PEER_STATUS_BYTES_MAX {
        return Err(format!("answer over {PEER_STATUS_BYTES_MAX} bytes"));
    }
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("an answer without the end of its headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let body = &raw[end + 4..];
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("an answer without a status code")?;
    let length = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())
            .flatten()
    });
    let body = match length {
        Some(n) if n <= body.len() => &body[..n],
        Some(_) => return Err("an answer shorter than its content-length".into()),
        None => body,
    };
    if code != 200 {
        let text = String::from_utf8_lossy(body);
        return Err(format!("HTTP {code}: {}", text.trim()));
    }
    let status: MemberStatus =
        serde_json::from_slice(body).map_err(|e| format!("unreadable /status: {e}"))?;
    if status.id != id {
        return Err(format!(
            "the address answers as node {}, not node {id}",
            status.id
        ));
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::parse_status;

    #[test]
    fn answers_are_read_by_content_length_and_refusals_say_why() {
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 27\r\n\r\n{\"id\":2,\"role\":\"follower\"}\n";
        let status = parse_status(ok, 2).expect("a status");
        assert_eq!(status.role, "follower");
        assert_eq!(status.vote, None);
        assert!(parse_status(ok, 3)
            .unwrap_err()
            .contains("answers as node 2"));
        let refused = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 9\r\n\r\nno entry\n";
        assert_eq!(parse_status(refused, 2).unwrap_err(), "HTTP 403: no entry");
        assert!(parse_status(b"HTTP/1.1 200 OK\r\n", 2).is_err());
    }
}
