//! HTTP: `/metrics` (Prometheus text), `/health`, `/status` (JSON), and the dashboard at
//! `/` ([`crate::dashboard`]).
//!
//! `/health` is open to all (load balancers ask it). With a policy (TLS on, or an auth
//! file), `/metrics`, `/status` and the dashboard need the observer or admin role: a client
//! certificate (over TLS) or `authorization: Bearer <token>`. `/status` also answers the
//! cluster's own nodes (a node certificate of a member, over TLS): a dashboard shows every
//! member's status by asking each one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;

use tokio_rustls::rustls::pki_types::CertificateDer;

use crate::auth::{Action, Denied, Policy};
use crate::config::ServerConfig;
use crate::conn::Gate;
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
    /// The dashboard's samples and its client for the other members' `/status`.
    pub(crate) dashboard: Arc<crate::dashboard::Dashboard>,
    /// The origins a dashboard page of this node has (`scheme://host:port`): the HTTP port
    /// under the configured host, loopback names, and the names of the node's certificate.
    pub(crate) origins: Arc<BTreeSet<String>>,
}

/// The origins of this node's dashboard: its HTTP port under `host` (as configured), the
/// loopback names, and `names` (its certificate's), by `http` and `https`.
pub fn dashboard_origins(config: &ServerConfig, names: &[String]) -> BTreeSet<String> {
    let me = &config.me().http;
    let port = me.port();
    let configured = match me.ip() {
        Some(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
        _ => me.host().to_string(),
    };
    let hosts = [
        configured,
        "localhost".into(),
        "127.0.0.1".into(),
        "[::1]".into(),
    ]
    .into_iter()
    .chain(names.iter().map(|n| n.to_ascii_lowercase()));
    hosts
        .flat_map(|h| ["http", "https"].map(|scheme| format!("{scheme}://{h}:{port}")))
        .collect()
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

impl HttpState {
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
        .map_err(|denied| {
            let code = match denied {
                Denied::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
                Denied::Forbidden { .. } => StatusCode::FORBIDDEN,
            };
            Box::new((code, format!("{denied}\n")).into_response())
        })
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
}

/// The router for the HTTP endpoint; the dashboard streams `journal`, which the driver feeds.
pub fn router(
    config: &ServerConfig,
    driver: DriverHandle,
    policy: Option<Arc<Policy>>,
    client_gate: Gate,
    directory: Directory,
    origins: BTreeSet<String>,
    journal: Arc<crate::dashboard::Journal>,
) -> Router {
    let dashboard = Arc::new(crate::dashboard::Dashboard::start(config, &driver, journal));
    let state = HttpState {
        driver,
        config: Arc::new(config.clone()),
        policy,
        client_gate,
        directory,
        dashboard,
        origins: Arc::new(origins),
    };
    Router::new()
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/status", get(status))
        .merge(crate::dashboard::routes())
        .with_state(state)
}

/// A request from a client that may read this node's metrics and state
/// ([`Action::Metrics`]). As an extractor it refuses everyone else (401 without credentials
/// that prove who they are, 403 when who they are may not) before the handler runs, so a
/// read-only handler cannot forget the check.
pub(crate) struct Reader;

impl axum::extract::FromRequestParts<HttpState> for Reader {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        s: &HttpState,
    ) -> Result<Reader, Response> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<HttpPeer>>()
            .map(|c| c.0.clone())
            .unwrap_or_default();
        s.authorize_reader(&peer, &parts.headers)
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
    }
}

/// Test-only fault injection: `POST /debug/block` with a body of comma-separated node ids
/// drops all traffic to and from those peers at this node's transport (an empty body heals).
/// One-way links: `in=1,2;out=3` drops what arrives from nodes 1 and 2 and what would
/// leave for node 3 (either part may be left out). Each call replaces the previous sets.
/// Mounted only when the server runs with `fault_injection = true`; with authentication on
/// (TLS or an auth file), only admins may call it, decided from the headers before the body
/// is read.
pub fn fault_router(
    transport: tenure_transport::TransportHandle,
    driver: DriverHandle,
    enabled: bool,
    policy: Option<Arc<Policy>>,
    cluster_id: &str,
) -> Router {
    if !enabled {
        return Router::new();
    }
    let cluster_id = cluster_id.to_string();
    let metrics = Arc::clone(&driver.metrics);
    let admins_only = axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let (policy, cluster_id, metrics) =
                (policy.clone(), cluster_id.clone(), Arc::clone(&metrics));
            async move {
                let leaf = req
                    .extensions()
                    .get::<ConnectInfo<HttpPeer>>()
                    .and_then(|c| c.0.leaf.clone());
                let checked = crate::auth::authorize(
                    policy.as_deref(),
                    &cluster_id,
                    req.headers().get("authorization").map(|v| v.as_bytes()),
                    leaf.as_ref(),
                    &Action::Admin,
                    &metrics,
                );
                match checked {
                    Ok(_) => next.run(req).await,
                    Err(denied) => {
                        let code = match denied {
                            Denied::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
                            Denied::Forbidden { .. } => StatusCode::FORBIDDEN,
                        };
                        (code, format!("fault injection: {denied}\n")).into_response()
                    }
                }
            }
        },
    );
    Router::new()
        .route(
            "/debug/block",
            axum::routing::post(move |body: String| {
                let transport = transport.clone();
                async move {
                    match parse_block(&body) {
                        Ok((inbound, outbound)) => {
                            transport.set_blocked_directed(inbound.clone(), outbound.clone());
                            (
                                StatusCode::OK,
                                format!("blocked from {inbound:?} to {outbound:?}\n"),
                            )
                        }
                        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")),
                    }
                }
            }),
        )
        .route(
            "/debug/driver-panic",
            axum::routing::post(move || {
                let driver = driver.clone();
                async move {
                    // Answered once the driver thread is gone (or after 5 s), so that what a
                    // caller asks next meets a node without its driver.
                    let _ = driver.inputs.send(crate::driver::Input::InjectPanic).await;
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                    while driver.running.load(std::sync::atomic::Ordering::SeqCst) {
                        if tokio::time::Instant::now() > deadline {
                            return (
                                StatusCode::INTERNAL_SERVER_ERROR,
                                "the driver thread is still running\n",
                            );
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    (StatusCode::OK, "the driver thread panicked\n")
                }
            }),
        )
        .route_layer(admins_only)
}

/// Parses `/debug/block`'s body into the (inbound, outbound) sets of blocked peers.
fn parse_block(body: &str) -> Result<(BTreeSet<u64>, BTreeSet<u64>), String> {
    fn ids(list: &str) -> Result<BTreeSet<u64>, String> {
        let mut out = BTreeSet::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            out.insert(
                part.parse::<u64>()
                    .map_err(|_| format!("bad node id {part:?}"))?,
            );
        }
        Ok(out)
    }
    let body = body.trim();
    if !body.contains('=') {
        let both = ids(body)?;
        return Ok((both.clone(), both));
    }
    let (mut inbound, mut outbound) = (BTreeSet::new(), BTreeSet::new());
    for part in body.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some(("in", list)) => inbound = ids(list)?,
            Some(("out", list)) => outbound = ids(list)?,
            _ => return Err(format!("bad block spec {part:?} (want in=IDS;out=IDS)")),
        }
    }
    Ok((inbound, outbound))
}

#[cfg(test)]
mod tests {
    use super::parse_block;
    use std::collections::BTreeSet;

    #[test]
    fn block_specs_parse_both_directions_and_one_way_links() {
        let set = |v: &[u64]| v.iter().copied().collect::<BTreeSet<u64>>();
        assert_eq!(parse_block("").unwrap(), (set(&[]), set(&[])));
        assert_eq!(parse_block("1, 3").unwrap(), (set(&[1, 3]), set(&[1, 3])));
        assert_eq!(parse_block("in=2").unwrap(), (set(&[2]), set(&[])));
        assert_eq!(
            parse_block("in=1,2;out=3").unwrap(),
            (set(&[1, 2]), set(&[3]))
        );
        assert!(parse_block("x").is_err());
        assert!(parse_block("up=1").is_err());
        assert!(parse_block("in=a").is_err());
    }
}
