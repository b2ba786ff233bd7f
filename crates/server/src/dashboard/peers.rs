//! The other members' own `/status`, fetched by the node serving the dashboard: each over
//! its HTTP port, all at once, each within [`PEER_STATUS_TIMEOUT`], so that one silent
//! member delays the page by that much at most and is shown as unreachable.
//!
//! With TLS the node dials as itself: its own certificate as the client certificate, and
//! the member's certificate checked for `node-<id>.<cluster>.tenure` against the cluster's
//! CA (a member's `/status` lets the cluster's nodes in, see `crate::http`). Without TLS, a
//! policy from an auth file can only be met with the viewer's bearer token, which is passed
//! on to the member; with no policy at all nothing is needed.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tenure_core::types::NodeId;
use tenure_transport::http::HttpClient;
use tenure_transport::{HostPort, TlsFiles};

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
    /// Over TLS: this node's certificate and the cluster's CA.
    http: HttpClient,
    cluster_id: String,
}

impl PeerClient {
    /// A client for `config`'s cluster: with TLS on, this node's certificate and CA.
    pub fn new(config: &ServerConfig) -> Result<PeerClient, String> {
        let http = match &config.tls {
            None => HttpClient::plaintext(),
            Some(paths) => HttpClient::from_files(&TlsFiles {
                ca: paths.ca.clone(),
                cert: paths.cert.clone(),
                key: paths.key.clone(),
            })
            .map_err(|e| e.to_string())?,
        };
        Ok(PeerClient {
            http: http
                .with_header("Accept", "application/json")
                .with_body_max(PEER_STATUS_BYTES_MAX),
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
            // Over TLS the member knows this node by its certificate, and checks it by the
            // member's node name; the viewer's token goes only where TLS does not identify
            // this node.
            let http = match authorization {
                _ if self.http.is_tls() => self
                    .http
                    .clone()
                    .with_server_name(&tenure_transport::tls::node_name(&self.cluster_id, id)),
                Some(a) => self.http.clone().with_header("Authorization", a),
                None => self.http.clone(),
            };
            let (code, body) = http
                .get(socket, "/status", PEER_STATUS_TIMEOUT)
                .await
                .map_err(|e| format!("{socket}: {e}"))?;
            parse_status(code, &body, id)
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

/// The member's answer: its status if it said 200 with JSON, otherwise what it said.
fn parse_status(code: u16, body: &str, id: NodeId) -> Result<MemberStatus, String> {
    if code != 200 {
        return Err(format!("HTTP {code}: {}", body.trim()));
    }
    let status: MemberStatus =
        serde_json::from_str(body).map_err(|e| format!("unreadable /status: {e}"))?;
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
    fn answers_are_read_and_refusals_say_why() {
        let ok = "{\"id\":2,\"role\":\"follower\"}\n";
        let status = parse_status(200, ok, 2).expect("a status");
        assert_eq!(status.role, "follower");
        assert_eq!(status.vote, None);
        assert!(parse_status(200, ok, 3)
            .unwrap_err()
            .contains("answers as node 2"));
        assert_eq!(
            parse_status(403, "no entry\n", 2).unwrap_err(),
            "HTTP 403: no entry"
        );
        assert!(parse_status(200, "<html>", 2).is_err());
    }
}
