//! A leader that no client can reach hands Raft leadership on, but only to a node that
//! clients can reach.
//!
//! While this node leads and its client port has stayed full for [`AFTER_FULL`] (counting
//! only the slots clients that authenticated may use, [`Gate::has_room`], so that an
//! anonymous flood never moves leadership), it asks every other voter's `/health` and hands
//! leadership to the first that answers 200 (its own port has room and it knows a leader).
//! If every other voter is as full, or does not answer, leadership stays: moving it would
//! cost every client an election's unavailability and leave them no better off. One node
//! hands leadership on at most once per [`SPACING`], so load that follows the leader cannot
//! bounce it round the cluster.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::Empty;
use hyper::body::Bytes;
use tenure_core::node::Role;
use tenure_core::types::NodeId;
use tenure_transport::HostPort;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;

use crate::conn::Gate;
use crate::driver::DriverHandle;

/// How long a leader's client port may stay full before it hands leadership on.
pub const AFTER_FULL: Duration = Duration::from_secs(2);

/// The least time between two hand-overs by one node.
pub const SPACING: Duration = Duration::from_secs(60);

/// How long a voter's `/health` may take to answer before it counts as "no room".
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How this node reaches the other voters' HTTP ports.
#[derive(Clone)]
pub struct Probe {
    /// Each voter's HTTP address.
    pub http: Arc<dyn Fn(NodeId) -> Option<HostPort> + Send + Sync>,
    /// With TLS: the client configuration (the cluster's CA) and the cluster's name, from
    /// which each node's certificate name follows.
    pub tls: Option<(Arc<ClientConfig>, String)>,
}

impl Probe {
    /// Whether node `id` says its client port has room: `/health` answered 200 in time.
    async fn has_room(&self, id: NodeId) -> bool {
        let Some(addr) = (self.http)(id) else {
            return false;
        };
        let answer = tokio::time::timeout(PROBE_TIMEOUT, self.health(id, addr)).await;
        matches!(answer, Ok(Ok(200)))
    }

    async fn health(&self, id: NodeId, addr: HostPort) -> Result<u16, String> {
        let tcp = TcpStream::connect((addr.host(), addr.port()))
            .await
            .map_err(|e| e.to_string())?;
        match &self.tls {
            Some((config, cluster)) => {
                let name = tenure_transport::tls::node_name(cluster, id);
                let name = ServerName::try_from(name).map_err(|e| e.to_string())?;
                let tls = tokio_rustls::TlsConnector::from(Arc::clone(config))
                    .connect(name, tcp)
                    .await
                    .map_err(|e| e.to_string())?;
                get_health(tls, addr).await
            }
            None => get_health(tcp, addr).await,
        }
    }
}

/// `GET /health` on one HTTP/1.1 connection: the status code.
async fn get_health<S>(io: S, addr: HostPort) -> Result<u16, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let request = hyper::Request::get("/health")
        .header(hyper::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let answer = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    Ok(answer.status().as_u16())
}

/// Runs the hand-over rule (module docs) until the process ends.
pub fn run(
    gate: Gate,
    driver: DriverHandle,
    me: NodeId,
    timeout: Duration,
    probe: Probe,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(200));
        let mut full_since: Option<Instant> = None;
        let mut last_move: Option<Instant> = None;
        loop {
            every.tick().await;
            if gate.has_room() {
                full_since = None;
                continue;
            }
            let since = *full_since.get_or_insert_with(Instant::now);
            if since.elapsed() < AFTER_FULL || last_move.is_some_and(|at| at.elapsed() < SPACING) {
                continue;
            }
            let status = driver.published.borrow().status.clone();
            if status.role != Role::Leader {
                continue;
            }
            // Ask again only after another full period, whatever the answer.
            full_since = None;
            let mut to = None;
            for v in status
                .membership
                .voters
                .iter()
                .copied()
                .filter(|&v| v != me)
            {
                if probe.has_room(v).await {
                    to = Some(v);
                    break;
                }
            }
            let Some(to) = to else {
                tracing::warn!(
                    node = me,
                    "the client port has been full for {AFTER_FULL:?}, and so is every other \
                     voter's (or it does not answer): leadership stays here"
                );
                continue;
            };
            tracing::warn!(
                node = me,
                to,
                "the client port has been full for {AFTER_FULL:?}: handing leadership to node \
                 {to}, whose port has room"
            );
            if let Err(e) = driver.transfer_leadership(to, timeout).await {
                tracing::warn!(node = me, to, "handing leadership on failed: {e}");
            }
            last_move = Some(Instant::now());
        }
    })
}
