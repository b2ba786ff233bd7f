//! HTTP: `/metrics` (Prometheus text), `/health` and `/status` (JSON); the port's state,
//! who is at the other end of a connection ([`HttpPeer`]) and the check that a client may
//! read (`Reader`), on which the dashboard ([`crate::dashboard`], merged onto this port by
//! the server) builds; and test-only fault injection ([`fault`]).
//!
//! `/health` is open to all (load balancers ask it). With a policy (TLS on, or an auth
//! file), `/metrics`, `/status` and the dashboard need the observer or admin role: a client
//! certificate (over TLS) or `authorization: Bearer <token>`. `/status` also answers the
//! cluster's own nodes (a node certificate of a member, over TLS): a dashboard shows every
//! member's status by asking each one.

pub mod fault;

use std::sync::Arc;

use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;

use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::server::TlsStream;

use crate::auth::{Action, Denied, Policy};
use crate::config::ServerConfig;
use crate::conn::{ChannelListener, Conn, Gate};
use crate::directory::Directory;
use crate::driver::DriverHandle;

/// What the HTTP handlers share.
#[derive(Clone)]
pub struct HttpState {
    pub(crate) driver: DriverHandle,
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) policy: Option<Arc<Policy>>,
    /// The gRPC port's gate: a node that cannot take clients is not healthy.
    client_gate: Gate,
    /// Where members are reached (`/status` names the leader's client address).
    pub(crate) directory: Directory,
}

/// `Reader` serves any router whose state holds an `HttpState`: the port's own, and the
/// dashboard's.
impl AsRef<HttpState> for HttpState {
    fn as_ref(&self) -> &HttpState {
        self
    }
}

/// Who is at the other end of an HTTP connection: the certificate it presented, if any.
#[derive(Clone, Debug, Default)]
pub struct HttpPeer {
    /// The client's leaf certificate (TLS only).
    pub leaf: Option<CertificateDer<'static>>,
}

impl Connected<axum::serve::IncomingStream<'_, tokio::net::TcpListener>> for HttpPeer {
    fn connect_info(_: axum::serve::IncomingStream<'_, tokio::net::TcpListener>) -> Self {
        HttpPeer::default()
    }
}

/// The plaintext HTTP port: no certificate.
impl Connected<axum::serve::IncomingStream<'_, ChannelListener<Conn>>> for HttpPeer {
    fn connect_info(_: axum::serve::IncomingStream<'_, ChannelListener<Conn>>) -> Self {
        HttpPeer::default()
    }
}

/// The HTTP port over TLS: the client's certificate, if it presented one.
impl Connected<axum::serve::IncomingStream<'_, ChannelListener<TlsStream<Conn>>>> for HttpPeer {
    fn connect_info(
        stream: axum::serve::IncomingStream<'_, ChannelListener<TlsStream<Conn>>>,
    ) -> Self {
        let leaf = stream
            .io()
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|certs| certs.first())
            .map(|leaf| leaf.clone().into_owned());
        HttpPeer { leaf }
    }
}

/// A refusal of `denied` on the HTTP port, `what` refused (empty, or a prefix such as
/// `fault injection: `) and why: 401 for a client that did not prove who it is, 403 for one
/// that may not.
pub(crate) fn refused(what: &str, denied: &Denied) -> Response {
    match denied {
        Denied::Unauthenticated(_) => (
            StatusCode::UNAUTHORIZED,
            format!("{what}{denied}\n{BROWSER_HINT}\n"),
        )
            .into_response(),
        Denied::Forbidden { .. } => {
            (StatusCode::FORBIDDEN, format!("{what}{denied}\n")).into_response()
        }
    }
}

/// What a 401 adds for whoever reads it in a browser or with curl.
const BROWSER_HINT: &str = "From a browser: import a client's certificate bundle, made with \
`tenure certs --out DIR --p12 NAME` (the password is in DIR/client-NAME.p12.password), and \
reload. With curl: --cacert ca.pem --cert client-NAME.pem --key client-NAME-key.pem, or \
-H 'authorization: Bearer TOKEN' (tenure token NAME).";

impl HttpState {
    /// The state of a node with `config` and `policy` (none: everyone may read), over its
    /// running driver; `client_gate` is its gRPC port's.
    pub fn new(
        config: &ServerConfig,
        driver: DriverHandle,
        policy: Option<Arc<Policy>>,
        client_gate: Gate,
        directory: Directory,
    ) -> HttpState {
        HttpState {
            driver,
            config: Arc::new(config.clone()),
            policy,
            client_gate,
            directory,
        }
    }

    /// Lets a request through if its client may do `action`; otherwise the refusal, worded
    /// and counted as on the gRPC port.
    pub(crate) fn authorize(
        &self,
        peer: &HttpPeer,
        headers: &HeaderMap,
        action: Action<'_>,
    ) -> Result<(), Box<Response>> {
        crate::auth::authorize(
            self.policy.as_deref(),
            &self.config.cluster_id,
            headers.get("authorization").map(|v| v.as_bytes()),
            peer.leaf.as_ref(),
            &action,
            &self.driver.metrics,
        )
        .map(|_| ())
        .map_err(|denied| Box::new(refused("", &denied)))
    }

    /// Whether the client may read this node's metrics and state ([`Action::Metrics`]).
    pub(crate) fn authorize_reader(
        &self,
        peer: &HttpPeer,
        headers: &HeaderMap,
    ) -> Result<(), Box<Response>> {
        self.authorize(peer, headers, Action::Metrics)
    }

    /// Whether the client presented the certificate of a node of this cluster (one this
    /// node is configured with or has as a member): a member's dashboard asking for this
    /// node's `/status`. Nodes already trust each other with the whole log.
    fn is_cluster_node(&self, peer: &HttpPeer) -> bool {
        let Some(leaf) = peer.leaf.as_ref() else {
            return false;
        };
        let members = self.driver.published.borrow().status.membership.all_nodes();
        members
            .into_iter()
            .chain(self.config.nodes.keys().copied())
            .any(|id| {
                let name = tenure_transport::tls::node_name(&self.config.cluster_id, id);
                tenure_transport::tls::cert_names(leaf, &name).is_ok()
            })
    }
}

/// The JSON served at `/status`.
#[derive(Debug, Serialize)]
pub struct StatusJson {
    /// This node.
    pub id: u64,
    /// `follower`, `precandidate`, `candidate` or `leader`.
    pub role: String,
    /// Raft term.
    pub term: u64,
    /// The node this one voted for in `term`, if any.
    pub vote: Option<u64>,
    /// Known leader (0 if none).
    pub leader: u64,
    /// The leader's client address, if known.
    pub leader_addr: Option<String>,
    /// Commit index.
    pub commit_index: u64,
    /// Applied index.
    pub applied_index: u64,
    /// Last log index (durable or not yet).
    pub last_index: u64,
    /// Voters.
    pub voters: Vec<u64>,
    /// Voters of the outgoing configuration while joint.
    pub voters_outgoing: Vec<u64>,
    /// Learners.
    pub learners: Vec<u64>,
    /// Live sessions.
    pub sessions: usize,
    /// This node's version.
    pub version: &'static str,
    /// This node's timing as configured (`--election-timeout-ms`, `--heartbeat-ms`,
    /// `--tick-ms`, `--no-fast-election`), for `tenure plan --from`.
    pub timing: TimingJson,
}

/// A node's configured timing, in `/status`.
#[derive(Clone, Debug, Serialize)]
pub struct TimingJson {
    /// The shortest election timeout; each is drawn from `[T, 2T)`.
    pub election_timeout_ms: u64,
    /// The leader's heartbeat interval.
    pub heartbeat_ms: u64,
    /// The node's clock tick.
    pub tick_ms: u64,
    /// Whether a leader whose process exited is replaced without waiting for the timeout.
    pub fast_election: bool,
}

/// The routes of `/metrics`, `/health` and `/status`.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/status", get(status))
        .with_state(state)
}

/// A request from a client that may read this node's metrics and state
/// ([`Action::Metrics`]). As an extractor it refuses everyone else (401 without credentials
/// that prove who they are, 403 when who they are may not) before the handler runs, so a
/// read-only handler cannot forget the check. It serves any router whose state holds the
/// port's [`HttpState`] (the dashboard's does).
pub(crate) struct Reader;

impl<S: AsRef<HttpState> + Sync> axum::extract::FromRequestParts<S> for Reader {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        s: &S,
    ) -> Result<Reader, Response> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<HttpPeer>>()
            .map(|c| c.0.clone())
            .unwrap_or_default();
        s.as_ref()
            .authorize_reader(&peer, &parts.headers)
            .map(|()| Reader)
            .map_err(|refused| *refused)
    }
}

async fn metrics(_: Reader, State(s): State<HttpState>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        s.driver.metrics.render(),
    )
        .into_response()
}

/// Healthy when the node knows a leader (itself or another) and can take clients.
async fn health(State(s): State<HttpState>) -> impl IntoResponse {
    if !s.driver.running.load(std::sync::atomic::Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the driver thread stopped: this node takes no part and is exiting\n".to_string(),
        );
    }
    let st = s.driver.published.borrow().status.clone();
    if !s.client_gate.has_room() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "no client connection slot free (connections_max {}): clients are turned away\n",
                s.config.connections_max
            ),
        );
    }
    match st.leader {
        Some(l) => (
            StatusCode::OK,
            format!("ok: leader {l}, term {}\n", st.term),
        ),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no leader known in term {}\n", st.term),
        ),
    }
}

async fn status(
    State(s): State<HttpState>,
    ConnectInfo(peer): ConnectInfo<HttpPeer>,
    headers: HeaderMap,
) -> Response {
    if !s.is_cluster_node(&peer) {
        if let Err(refused) = s.authorize(&peer, &headers, Action::Metrics) {
            return *refused;
        }
    }
    let p = s.driver.published.borrow().clone();
    axum::Json(status_json(&s, &p.status, p.sessions)).into_response()
}

/// `/status` of a node with status `st` and `sessions` live sessions.
pub(crate) fn status_json(
    s: &HttpState,
    st: &tenure_core::node::Status,
    sessions: usize,
) -> StatusJson {
    let leader = st.leader.unwrap_or(0);
    StatusJson {
        id: st.id,
        role: format!("{:?}", st.role).to_lowercase(),
        term: st.term,
        vote: st.vote,
        leader,
        leader_addr: s.directory.addrs(leader).map(|a| a.client.to_string()),
        commit_index: st.commit,
        applied_index: st.applied,
        last_index: st.last_index,
        voters: st.membership.voters.iter().copied().collect(),
        voters_outgoing: st.membership.voters_outgoing.iter().copied().collect(),
        learners: st.membership.learners.iter().copied().collect(),
        sessions,
        version: crate::metrics::BUILD_VERSION,
        timing: TimingJson {
            election_timeout_ms: s.config.election_timeout_ms,
            heartbeat_ms: s.config.heartbeat_ms,
            tick_ms: s.config.tick_ms,
            fast_election: s.config.fast_election,
        },
    }
}
