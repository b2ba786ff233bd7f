//! The live dashboard at `/` on every node's HTTP port.
//!
//! One page (`index.html`, `dashboard.js`, `dashboard.css`, embedded in the binary: no
//! external asset, no CDN, no font from the net) and the JSON it reads:
//!
//! - `GET /api/cluster`: every member with role, term, vote, commit and applied index and
//!   lag (this node's own status, and the other members' own `/status`, fetched
//!   concurrently with a short timeout: a member that does not answer is shown as
//!   unreachable, with why; when this node leads, also each follower's match index), the
//!   first [`LIST_MAX`] elections (holder, token, queue) and sessions (TTL, remaining) as
//!   this node has applied them (the driver's listing, as the list RPCs read it), and who the
//!   viewer is;
//! - `GET /api/events`: server-sent events (`text/event-stream`), first the last records
//!   of this node's [`journal`] (after `Last-Event-ID` or `?after=N` when given), then live
//!   ones;
//! - `GET /api/series`: one sample a second of leader changes, commit and fsync latency and
//!   keepalive rate, the last ten minutes ([`series`]);
//! - `POST /api/transfer-leadership` (`{"to": ID}`) and `POST /api/remove-member`
//!   (`{"id": ID}`): admin actions, the same functions as the Cluster gRPC service's
//!   ([`crate::admin`]).
//!
//! Access is `/status`'s: with a policy (TLS on, or an auth file) the page and its data need
//! the observer or admin role, from a client certificate or a bearer token. The two actions
//! need the admin role, and, against cross-site requests, the header
//! `X-Tenure-Dashboard: 1` (a cross-origin page cannot send it without a CORS preflight,
//! which this server never grants) and an `Origin`, if sent, naming this very host. The
//! page shows the buttons to admins only; the server refuses everyone else anyway.
//!
//! The dashboard builds on the HTTP port ([`crate::http`]: its state, its peers'
//! certificates, its read check); the port does not know the dashboard, whose routes the
//! server merges onto it.

pub mod journal;
pub mod peers;
pub mod series;

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use serde::{Deserialize, Serialize};
use tenure_core::types::NodeId;
use tokio_stream::StreamExt as _;

use crate::admin::{Admin, AdminError, Administrator};
use crate::auth::Action;
use crate::config::ServerConfig;
use crate::driver::{ApiError, DriverHandle, Listing};
use crate::http::{HttpPeer, HttpState, Reader};

pub use journal::{EventRecord, Journal};

const INDEX_HTML: &str = include_str!("index.html");
const DASHBOARD_JS: &str = include_str!("dashboard.js");
const DASHBOARD_CSS: &str = include_str!("dashboard.css");

/// Elections and sessions the page lists (the first ones, in name and id order; the page
/// says when there are more).
pub const LIST_MAX: usize = 100;

/// The header the admin actions require (see the module docs).
pub const ACTION_HEADER: &str = "x-tenure-dashboard";

/// Everything embedded is served from here and nowhere else; no inline script or style.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The dashboard's own state next to the HTTP port's.
pub struct Dashboard {
    /// Samples for the charts.
    pub series: series::Series,
    /// Fetches the other members' `/status`; `None` if this node's TLS material could not
    /// be loaded for it (then the other members show why).
    peers: Result<peers::PeerClient, String>,
    /// What happened on this node, fed by the driver thread (its event sink).
    journal: Arc<Journal>,
    /// The admin actions behind the buttons.
    admin: Admin,
    /// The origins a page of this dashboard has (`scheme://host:port`): see [`origins`].
    origins: BTreeSet<String>,
}

impl Dashboard {
    /// The dashboard of a node with `config`, its sampler started on the current tokio
    /// runtime (it ends when the driver stops); it streams `journal`, which the driver
    /// feeds, and acts through `admin`. `names` are the DNS names of the node's certificate
    /// (see [`origins`]).
    pub fn start(
        config: &ServerConfig,
        driver: &DriverHandle,
        journal: Arc<Journal>,
        admin: Admin,
        names: &[String],
    ) -> Dashboard {
        let series = series::Series::default();
        let inputs = driver.inputs.clone();
        tokio::spawn(
            series
                .clone()
                .run(Arc::clone(&driver.metrics), move || inputs.is_closed()),
        );
        let peers = peers::PeerClient::new(config).map_err(|e| {
            tracing::warn!(
                node = config.id,
                "the dashboard cannot reach the other members' /status: {e}"
            );
            format!("this node's TLS material is unusable: {e}")
        });
        Dashboard {
            series,
            peers,
            journal,
            admin,
            origins: origins(config, names),
        }
    }
}

/// The origins of this node's dashboard: its HTTP port under `host` (as configured), the
/// loopback names, and `names` (its certificate's), by `http` and `https`.
pub fn origins(config: &ServerConfig, names: &[String]) -> BTreeSet<String> {
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

/// What the dashboard's handlers share: the HTTP port's state and the dashboard's own.
#[derive(Clone)]
struct DashboardState {
    http: HttpState,
    dashboard: Arc<Dashboard>,
}

impl AsRef<HttpState> for DashboardState {
    fn as_ref(&self) -> &HttpState {
        &self.http
    }
}

/// The dashboard's routes, to be merged onto the HTTP port whose state is `http`.
pub fn router(http: HttpState, dashboard: Dashboard) -> Router {
    let state = DashboardState {
        http,
        dashboard: Arc::new(dashboard),
    };
    Router::new()
        .route("/", asset("text/html; charset=utf-8", INDEX_HTML))
        .route(
            "/dashboard.js",
            asset("text/javascript; charset=utf-8", DASHBOARD_JS),
        )
        .route(
            "/dashboard.css",
            asset("text/css; charset=utf-8", DASHBOARD_CSS),
        )
        .route("/api/cluster", get(cluster))
        .route("/api/events", get(events))
        .route("/api/series", get(series_json))
        .route("/api/transfer-leadership", post(transfer_leadership))
        .route("/api/remove-member", post(remove_member))
        .with_state(state)
}

/// The route of one embedded asset, served to whoever may read the dashboard.
fn asset(content_type: &'static str, body: &'static str) -> MethodRouter<DashboardState> {
    get(move |_: Reader| async move {
        (
            [
                ("content-type", content_type),
                ("content-security-policy", CONTENT_SECURITY_POLICY),
                ("x-content-type-options", "nosniff"),
                ("cache-control", "no-store"),
            ],
            body,
        )
            .into_response()
    })
}

/// Who is looking at the page.
#[derive(Debug, Serialize)]
pub struct Viewer {
    /// The principal, when authentication is on.
    pub principal: Option<String>,
    /// Whether the admin actions are open to the viewer.
    pub admin: bool,
}

/// One member's row.
#[derive(Debug, Serialize)]
pub struct MemberRow {
    /// Node id.
    pub id: NodeId,
    /// A voter of the current (or incoming) configuration.
    pub voter: bool,
    /// A voter of the outgoing configuration while joint.
    pub outgoing: bool,
    /// A learner.
    pub learner: bool,
    /// The node serving this page.
    pub this_node: bool,
    /// Its HTTP address (its own dashboard), when known.
    pub http_addr: Option<String>,
    /// Its client address, when known.
    pub client_addr: Option<String>,
    /// Whether its status could be had.
    pub reachable: bool,
    /// Why not.
    pub error: Option<String>,
    /// Its status, when reachable.
    pub status: Option<peers::MemberStatus>,
    /// Entries it has yet to apply of what the leader committed (leader's commit index
    /// minus its applied index), when both are known.
    pub lag: Option<u64>,
    /// When the serving node leads: the highest log index it knows the member stores.
    pub match_index: Option<u64>,
}

/// One election's row.
#[derive(Debug, Serialize)]
pub struct ElectionRow {
    /// Its name.
    pub name: String,
    /// The leading candidate's session (none: nobody leads).
    pub holder: Option<u64>,
    /// The election's current fencing token.
    pub token: u64,
    /// Sessions queued behind the holder, in order.
    pub candidates: Vec<u64>,
    /// Log index at which the current holder (or, with none, the last change) took effect.
    pub since_index: u64,
}

/// One session's row.
#[derive(Debug, Serialize)]
pub struct SessionRow {
    /// Its id.
    pub id: u64,
    /// Its TTL.
    pub ttl_ms: u64,
    /// How long this node will keep it without a renewal.
    pub remaining_ms: u64,
    /// Elections it leads or is queued in.
    pub elections: Vec<String>,
}

/// One `tenure cron` job's row: its ledger (the fenced key `tenure-cron/ELECTION`, written
/// by the client library's `tenure::schedule`), read here as JSON without its types.
#[derive(Debug, Serialize)]
pub struct ScheduleRow {
    /// The job's election.
    pub election: String,
    /// The fencing token of the last write to the ledger.
    pub token: u64,
    /// How far the schedule has been taken (every slot at or before it is decided or
    /// claimed).
    pub through: Option<String>,
    /// The claim without an outcome, if any.
    pub open: Option<serde_json::Value>,
    /// The last decided runs, newest first (at most [`SCHEDULE_RUNS`]).
    pub recent: Vec<serde_json::Value>,
    /// Counts since the ledger began.
    pub counts: Option<serde_json::Value>,
    /// Why the ledger could not be read as one.
    pub error: Option<String>,
}

/// The prefix of `tenure cron`'s ledgers among the fenced keys.
pub const SCHEDULE_PREFIX: &str = "tenure-cron/";
/// Runs shown per scheduled job.
pub const SCHEDULE_RUNS: usize = 5;

impl ScheduleRow {
    fn of(key: String, v: tenure_core::sm::FencedValue) -> ScheduleRow {
        let election = key
            .strip_prefix(SCHEDULE_PREFIX)
            .unwrap_or(&key)
            .to_string();
        let mut row = ScheduleRow {
            election,
            token: v.token,
            through: None,
            open: None,
            recent: Vec::new(),
            counts: None,
            error: None,
        };
        match serde_json::from_slice::<serde_json::Value>(&v.value) {
            Ok(mut l) => {
                row.through = l["through"].as_str().map(str::to_owned);
                row.open = Some(l["open"].take()).filter(|o| !o.is_null());
                row.counts = Some(l["counts"].take()).filter(|c| !c.is_null());
                if let Some(runs) = l["runs"].as_array_mut() {
                    row.recent = runs.drain(..).rev().take(SCHEDULE_RUNS).collect();
                }
            }
            Err(e) => row.error = Some(format!("not a ledger: {e}")),
        }
        row
    }
}

/// The first rows of a listing, or why there are none.
#[derive(Debug, Serialize)]
pub struct Rows<T> {
    /// The rows.
    pub items: Vec<T>,
    /// Whether there are more than shown.
    pub more: bool,
    /// The applied index they were read at.
    pub applied_index: u64,
    /// Why the listing failed (then `items` is empty).
    pub error: Option<String>,
}

impl<T> Rows<T> {
    /// The rows of a `listing` of `what`, each made by `row`, or why there are none.
    fn of<U>(
        listing: Result<Listing<U>, ApiError>,
        what: &str,
        row: impl FnMut(U) -> T,
    ) -> Rows<T> {
        match listing {
            Ok(Listing {
                page,
                applied_index,
            }) => Rows {
                items: page.items.into_iter().map(row).collect(),
                more: page.more,
                applied_index,
                error: None,
            },
            Err(e) => Rows {
                items: Vec::new(),
                more: false,
                applied_index: 0,
                error: Some(format!("cannot list {what}: {e}")),
            },
        }
    }
}

/// What `/api/cluster` answers.
#[derive(Debug, Serialize)]
pub struct ClusterJson {
    /// The node serving the page.
    pub node: NodeId,
    /// The cluster.
    pub cluster_id: String,
    /// This node's version.
    pub version: &'static str,
    /// This node's term.
    pub term: u64,
    /// The leader this node knows (0: none).
    pub leader: NodeId,
    /// Voters.
    pub voters: Vec<NodeId>,
    /// Outgoing voters while joint.
    pub voters_outgoing: Vec<NodeId>,
    /// Learners.
    pub learners: Vec<NodeId>,
    /// One row per member, in id order.
    pub members: Vec<MemberRow>,
    /// The first elections.
    pub elections: Rows<ElectionRow>,
    /// The first sessions.
    pub sessions: Rows<SessionRow>,
    /// The first scheduled jobs (`tenure cron`).
    pub schedules: Rows<ScheduleRow>,
    /// Who asks.
    pub viewer: Viewer,
}

async fn cluster(
    _: Reader,
    State(DashboardState { http: s, dashboard }): State<DashboardState>,
    ConnectInfo(peer): ConnectInfo<HttpPeer>,
    headers: HeaderMap,
) -> Response {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let published = s.driver.published.borrow().clone();
    let st = published.status;
    let membership = st.membership.clone();
    let me = crate::http::status_json(&s, &st, published.sessions);
    let own = peers::MemberStatus {
        id: me.id,
        role: me.role,
        term: me.term,
        vote: me.vote,
        leader: me.leader,
        commit_index: me.commit_index,
        applied_index: me.applied_index,
        last_index: me.last_index,
        version: me.version.to_string(),
    };
    let fetches = membership.all_nodes().into_iter().map(|id| {
        let addrs = s.directory.addrs(id);
        let (dashboard, own, authorization) = (&dashboard, &own, authorization.as_deref());
        async move {
            let answer = if id == st.id {
                Ok(own.clone())
            } else {
                match (&dashboard.peers, &addrs) {
                    (Err(why), _) => Err(why.clone()),
                    (Ok(_), None) => Err("no HTTP address known for this member".to_string()),
                    (Ok(client), Some(a)) => client.status(id, &a.http, authorization).await,
                }
            };
            (id, addrs, answer)
        }
    });
    let timeout = s.config.request_timeout();
    let elections = s.driver.list_elections(String::new(), LIST_MAX, timeout);
    let sessions = s.driver.list_sessions(0, LIST_MAX, timeout);
    let schedules = s.driver.list_keys(
        SCHEDULE_PREFIX.to_string(),
        String::new(),
        LIST_MAX,
        timeout,
    );
    let (answers, (elections, sessions, schedules)) =
        tokio::join!(futures_util::future::join_all(fetches), async {
            tokio::join!(elections, sessions, schedules)
        });
    let schedules = Rows::of(schedules, "scheduled jobs", |(key, v)| {
        ScheduleRow::of(key, v)
    });
    let elections = Rows::of(elections, "elections", |(e, since_index)| ElectionRow {
        name: e.name,
        holder: e.leader.map(|l| l.session),
        token: e.token,
        candidates: e.candidates,
        since_index,
    });
    let tick_ms = s.config.tick_ms;
    let sessions = Rows::of(sessions, "sessions", |(s, remaining_ms)| SessionRow {
        id: s.id,
        ttl_ms: s.info.ttl_ticks.saturating_mul(tick_ms),
        remaining_ms,
        elections: s.elections,
    });
    let leader_commit = answers.iter().find_map(|(_, _, a)| {
        a.as_ref()
            .ok()
            .filter(|m| m.role == "leader" && m.term >= st.term)
            .map(|m| m.commit_index)
    });
    let members = answers
        .into_iter()
        .map(|(id, addrs, answer)| {
            let (status, error) = match answer {
                Ok(m) => (Some(m), None),
                Err(e) => (None, Some(e)),
            };
            MemberRow {
                id,
                voter: membership.voters.contains(&id),
                outgoing: membership.voters_outgoing.contains(&id),
                learner: membership.learners.contains(&id),
                this_node: id == st.id,
                http_addr: addrs.as_ref().map(|a| a.http.to_string()),
                client_addr: addrs.as_ref().map(|a| a.client.to_string()),
                reachable: status.is_some(),
                error,
                lag: leader_commit
                    .zip(status.as_ref())
                    .map(|(commit, m)| commit.saturating_sub(m.applied_index)),
                match_index: published.progress.get(&id).map(|p| p.match_index),
                status,
            }
        })
        .collect();
    axum::Json(ClusterJson {
        node: st.id,
        cluster_id: s.config.cluster_id.clone(),
        version: crate::metrics::BUILD_VERSION,
        term: st.term,
        leader: st.leader.unwrap_or(0),
        voters: membership.voters.iter().copied().collect(),
        voters_outgoing: membership.voters_outgoing.iter().copied().collect(),
        learners: membership.learners.iter().copied().collect(),
        members,
        elections,
        sessions,
        schedules,
        viewer: viewer(&s, &peer, &headers),
    })
    .into_response()
}

/// Who the viewer is and whether the admin actions are open to them; asking does not
/// count as a refusal in the metrics.
fn viewer(s: &HttpState, peer: &HttpPeer, headers: &HeaderMap) -> Viewer {
    let Some(policy) = s.policy.as_deref() else {
        return Viewer {
            principal: None,
            admin: true,
        };
    };
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok());
    let certificate = peer
        .leaf
        .as_ref()
        .and_then(|leaf| tenure_transport::tls::client_principal(leaf, &s.config.cluster_id));
    match policy.check(authorization, certificate.as_deref(), &Action::Admin) {
        Ok(crate::auth::Principal::Named(name)) => Viewer {
            principal: Some(name),
            admin: true,
        },
        Ok(crate::auth::Principal::Anyone) => Viewer {
            principal: None,
            admin: true,
        },
        Err(crate::auth::Denied::Forbidden { principal, .. }) => Viewer {
            principal: Some(principal),
            admin: false,
        },
        Err(crate::auth::Denied::Unauthenticated(_)) => Viewer {
            principal: None,
            admin: false,
        },
    }
}

async fn events(
    _: Reader,
    State(DashboardState { http: s, dashboard }): State<DashboardState>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    // A browser that reconnects says what it saw last; a page may also ask by query.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| {
            uri.query()?
                .split('&')
                .find_map(|kv| kv.strip_prefix("after="))?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let sub = dashboard.journal.subscribe(after);
    let seen = sub.backlog.last().map_or(after, |r| r.seq);
    let backlog = tokio_stream::iter(sub.backlog).map(|r| Ok(record_event(&r)));
    let live = tokio_stream::wrappers::BroadcastStream::new(sub.live).filter_map(move |r| {
        match r {
            Ok(r) if r.seq <= seen => None,
            Ok(r) => Some(Ok::<_, Infallible>(record_event(&r))),
            // The page fell behind; it is told how many records it missed.
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                Some(Ok(SseEvent::default().event("lagged").data(n.to_string())))
            }
        }
    });
    // The stream ends when the node stops (its driver is gone), so that an open page does not
    // hold up a graceful shutdown until the HTTP port's deadline.
    let (stop_tx, stop_rx) = tokio::sync::mpsc::channel::<()>(1);
    let inputs = s.driver.inputs.clone();
    tokio::spawn(async move {
        let stopped = tokio::select! {
            _ = inputs.closed() => true,
            // The page went away first.
            _ = stop_tx.closed() => false,
        };
        if stopped {
            let _ = stop_tx.send(()).await;
        }
    });
    let stop = tokio_stream::wrappers::ReceiverStream::new(stop_rx).map(|()| None);
    let stream = backlog
        .chain(live)
        .map(Some)
        .merge(stop)
        .take_while(Option::is_some)
        .filter_map(|event| event);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn record_event(r: &EventRecord) -> SseEvent {
    let data = serde_json::to_string(r).expect("an event record serializes");
    SseEvent::default().id(r.seq.to_string()).data(data)
}

#[derive(Serialize)]
struct SeriesJson {
    interval_ms: u64,
    samples: Vec<series::Sample>,
}

async fn series_json(_: Reader, State(s): State<DashboardState>) -> Response {
    axum::Json(SeriesJson {
        interval_ms: series::SAMPLE_INTERVAL.as_millis() as u64,
        samples: s.dashboard.series.samples(),
    })
    .into_response()
}

/// An action's answer: `{"ok": …}` or `{"error": …}` with a status code.
fn answer(code: StatusCode, key: &str, text: String) -> Response {
    let mut body = BTreeMap::new();
    body.insert(key.to_string(), text);
    (code, axum::Json(body)).into_response()
}

/// The largest body of a dashboard action (`{"to": 3}`, `{"id": 4}`).
const ACTION_BODY_MAX: usize = 1024;

/// Admin ([`Admin::authorize`]), from this page's own origin: decided from the headers
/// alone, before any body is read, so that a client without the right costs the node no
/// memory.
fn admit_caller(
    dashboard: &Dashboard,
    peer: &HttpPeer,
    headers: &HeaderMap,
) -> Result<Administrator, Box<Response>> {
    let authorization = headers.get("authorization").map(|v| v.as_bytes());
    let caller = dashboard
        .admin
        .authorize(authorization, peer.leaf.as_ref())
        .map_err(|denied| Box::new(crate::http::refused("", &denied)))?;
    if headers.get(ACTION_HEADER).map(|v| v.as_bytes()) != Some(b"1") {
        return Err(Box::new(answer(
            StatusCode::FORBIDDEN,
            "error",
            format!("refused: an action needs the header {ACTION_HEADER}: 1 (sent by the dashboard itself)"),
        )));
    }
    // A browser sends the page's origin; it must be one of this node's own (its configured
    // HTTP address, loopback, its certificate's names), not merely equal to the Host header,
    // which a page on a rebound DNS name sets to its own name.
    if let Some(origin) = headers.get("origin") {
        let origin = origin.to_str().unwrap_or("").to_ascii_lowercase();
        if !dashboard.origins.contains(&origin) {
            return Err(Box::new(answer(
                StatusCode::FORBIDDEN,
                "error",
                format!(
                    "refused: a request from origin {origin:?}, which is not one of this node's \
                     own (cross-site, or a name this node was not configured with)"
                ),
            )));
        }
    }
    Ok(caller)
}

/// A body of the expected shape.
fn parse_action<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(answer(
            StatusCode::BAD_REQUEST,
            "error",
            format!("bad request body: {e}"),
        ))
    })
}

/// An admin action: as an extractor, the handler runs only for an admin, from the page's
/// own origin ([`admit_caller`], before the body is read), with a body of at most
/// [`ACTION_BODY_MAX`] bytes (a larger `Content-Length` is refused unread) and of the
/// expected shape.
struct AdminAction<T> {
    caller: Administrator,
    body: T,
}

impl<T: for<'de> Deserialize<'de>> axum::extract::FromRequest<DashboardState> for AdminAction<T> {
    type Rejection = Response;

    async fn from_request(
        req: axum::extract::Request,
        s: &DashboardState,
    ) -> Result<AdminAction<T>, Response> {
        let peer = req
            .extensions()
            .get::<ConnectInfo<HttpPeer>>()
            .map(|c| c.0.clone())
            .unwrap_or_default();
        let caller =
            admit_caller(&s.dashboard, &peer, req.headers()).map_err(|refused| *refused)?;
        let too_large = || {
            answer(
                StatusCode::PAYLOAD_TOO_LARGE,
                "error",
                format!("an action's body is at most {ACTION_BODY_MAX} bytes"),
            )
        };
        let announced = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > ACTION_BODY_MAX as u64) {
            return Err(too_large());
        }
        let body = axum::body::to_bytes(req.into_body(), ACTION_BODY_MAX)
            .await
            .map_err(|_| too_large())?;
        parse_action(&body)
            .map(|body| AdminAction { caller, body })
            .map_err(|refused| *refused)
    }
}

fn refusal(s: &HttpState, e: ApiError) -> Response {
    let code = match &e {
        ApiError::NotLeader { .. } => StatusCode::CONFLICT,
        ApiError::Invalid(_) | ApiError::Rejected(_) | ApiError::UnknownSession(_) => {
            StatusCode::BAD_REQUEST
        }
        ApiError::Unavailable(_) | ApiError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        ApiError::Indeterminate(_) => StatusCode::GATEWAY_TIMEOUT,
    };
    let text = match &e {
        ApiError::NotLeader { leader: Some(l) } => {
            let page = s
                .directory
                .addrs(*l)
                .map(|a| format!(" (its dashboard is on {})", a.http))
                .unwrap_or_default();
            format!("this node does not lead: node {l} does{page}; act there")
        }
        ApiError::NotLeader { leader: None } => {
            "this node does not lead and knows no leader; try again shortly".to_string()
        }
        e => e.to_string(),
    };
    answer(code, "error", text)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TransferBody {
    to: NodeId,
}

async fn transfer_leadership(
    State(s): State<DashboardState>,
    AdminAction {
        caller,
        body: TransferBody { to },
    }: AdminAction<TransferBody>,
) -> Response {
    let done = s.dashboard.admin.transfer_leadership(&caller, to).await;
    acted(
        &s.http,
        done,
        format!("leadership transfer to node {to} started"),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveBody {
    id: NodeId,
}

async fn remove_member(
    State(s): State<DashboardState>,
    AdminAction {
        caller,
        body: RemoveBody { id },
    }: AdminAction<RemoveBody>,
) -> Response {
    let done = s.dashboard.admin.remove_member(&caller, id).await;
    acted(
        &s.http,
        done,
        format!("node {id} was removed (the membership change is committed)"),
    )
}

/// An admin action's answer: `ok` with what was done, or the refusal (a rule broken, in
/// its own words; the driver's, as [`refusal`] says it).
fn acted<T>(s: &HttpState, done: Result<T, AdminError>, what: String) -> Response {
    match done {
        Ok(_) => answer(StatusCode::OK, "ok", what),
        Err(AdminError::Invalid(why)) => answer(StatusCode::BAD_REQUEST, "error", why),
        Err(AdminError::Driver(e)) => refusal(s, e),
    }
}
