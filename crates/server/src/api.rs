//! The gRPC client API (`tenure.v1`) over the driver.
//!
//! A request that reaches a follower is answered with a typed `not-leader` status naming the
//! leader's client address, so that clients go there directly (no hidden forwarding hop).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tenure_core::node::{Bind, StreamEnd};
use tenure_core::sm::{Command, LeaderInfo, RequestId, Response, SecretHash, SessionId, SmError};
use tenure_proto::v1;
use tenure_proto::{Reason, CURRENT_TOKEN_KEY, ERROR_KEY, LEADER_ADDR_KEY, LEADER_ID_KEY};

use tokio::sync::{broadcast, mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

use crate::admin::{Admin, AdminError, Administrator};
use crate::auth::{Action, Denied, Policy, Principal};
use crate::config::ServerConfig;
use crate::conn::{ConnEnd, ConnEnds};
use crate::directory::Directory;
use crate::driver::{ApiError, ClientRequest, DriverHandle, Input, Listing};
use crate::metrics::Metrics;

use tenure_proto::SESSION_SECRET_BYTES;

/// Shared by every service.
#[derive(Clone)]
pub struct Api {
    driver: DriverHandle,
    /// Where members are reached: the leader's address in a redirect, the Cluster service's
    /// member lists.
    directory: Directory,
    /// The Cluster service's admin actions.
    admin: Admin,
    timeout: Duration,
    tick_ms: u64,
    keepalive_streams: StreamPool,
    observe_streams: StreamPool,
    config: Arc<ServerConfig>,
    policy: Option<Arc<Policy>>,
    /// How the client port's connections ended, for the KeepAlive streams on them.
    conn_ends: ConnEnds,
    /// The id of the next KeepAlive stream (fate-sharing bindings name streams by it).
    next_stream: Arc<AtomicU64>,
    /// Each principal's calls-per-second budget on this node.
    rates: Arc<crate::quota::Rates>,
}

impl Api {
    /// Build the API over a running driver; `conn_ends` is the client port's record of how
    /// its connections end ([`crate::conn::Gate::ends`]).
    pub fn new(
        config: &ServerConfig,
        driver: DriverHandle,
        policy: Option<Arc<Policy>>,
        conn_ends: ConnEnds,
        admin: Admin,
        directory: Directory,
    ) -> Api {
        let metrics = Arc::clone(&driver.metrics);
        Api {
            driver,
            directory,
            admin,
            timeout: config.request_timeout(),
            tick_ms: config.tick_ms,
            keepalive_streams: StreamPool::new(
                StreamKind::KeepAlive,
                config.keepalive_streams_max,
                config.keepalive_streams_per_principal_max,
                Arc::clone(&metrics.keepalive_streams_by_principal),
            ),
            observe_streams: StreamPool::new(
                StreamKind::Observe,
                config.observe_streams_max,
                config.observe_streams_per_principal_max,
                Arc::clone(&metrics.observe_streams_by_principal),
            ),
            config: Arc::new(config.clone()),
            policy,
            conn_ends,
            next_stream: Arc::new(AtomicU64::new(1)),
            rates: Arc::new(crate::quota::Rates::default()),
        }
    }

    fn status(&self, e: ApiError) -> Status {
        let (mut status, reason) = match &e {
            ApiError::NotLeader { .. } => (
                Status::failed_precondition(e.to_string()),
                Reason::NotLeader,
            ),
            ApiError::Unavailable(_) | ApiError::ShuttingDown => {
                (Status::unavailable(e.to_string()), Reason::Unavailable)
            }
            ApiError::Invalid(_) => (
                Status::invalid_argument(e.to_string()),
                Reason::InvalidArgument,
            ),
            ApiError::Indeterminate(_) => (Status::unknown(e.to_string()), Reason::Indeterminate),
            ApiError::UnknownSession(_) => {
                (Status::not_found(e.to_string()), Reason::UnknownSession)
            }
            ApiError::Rejected(sm) => match sm {
                SmError::StaleToken { .. } => (Status::aborted(e.to_string()), Reason::StaleToken),
                SmError::TokenSuperseded { .. } => {
                    (Status::aborted(e.to_string()), Reason::TokenSuperseded)
                }
                SmError::WrongElection { .. } => (
                    Status::failed_precondition(e.to_string()),
                    Reason::WrongElection,
                ),
                SmError::TokenNotIssued { .. } => (
                    Status::failed_precondition(e.to_string()),
                    Reason::TokenNotIssued,
                ),
                SmError::UnknownSession(_) => {
                    (Status::not_found(e.to_string()), Reason::UnknownSession)
                }
                SmError::UnknownElection(_) => {
                    (Status::not_found(e.to_string()), Reason::UnknownElection)
                }
                SmError::NotCandidate { .. } | SmError::NotLeader { .. } => (
                    Status::failed_precondition(e.to_string()),
                    Reason::NotCandidate,
                ),
                SmError::RequestForgotten { .. } => (
                    Status::failed_precondition(e.to_string()),
                    Reason::RequestForgotten,
                ),
                SmError::SessionEnded { .. } => (
                    Status::failed_precondition(e.to_string()),
                    Reason::SessionEnded,
                ),
                SmError::WrongSecret(_) => {
                    self.driver
                        .metrics
                        .permission_denied
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    (
                        Status::permission_denied(e.to_string()),
                        Reason::WrongSecret,
                    )
                }
                // One uniform refusal: nothing about the session is revealed.
                SmError::NotOwner(_) => {
                    self.driver
                        .metrics
                        .permission_denied
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    (
                        Status::permission_denied("permission denied"),
                        Reason::PermissionDenied,
                    )
                }
                SmError::QuotaExceeded { definite: true, .. } => (
                    Status::resource_exhausted(e.to_string()),
                    Reason::QuotaExceeded,
                ),
                // A grant retry's refusal may follow an attempt that took effect.
                SmError::QuotaExceeded {
                    definite: false, ..
                } => (Status::unknown(e.to_string()), Reason::Indeterminate),
                SmError::ElectionInUse { .. } => (
                    Status::failed_precondition(e.to_string()),
                    Reason::ElectionInUse,
                ),
                SmError::TtlOutOfRange { .. }
                | SmError::BadSize { .. }
                | SmError::BadRequestId(_)
                | SmError::TooManyCandidates(_) => (
                    Status::invalid_argument(e.to_string()),
                    Reason::InvalidArgument,
                ),
            },
        };
        let md = status.metadata_mut();
        md.insert(ERROR_KEY, MetadataValue::from_static(reason.as_str()));
        if let ApiError::NotLeader { leader: Some(id) } = &e {
            if let Ok(v) = id.to_string().parse() {
                md.insert(LEADER_ID_KEY, v);
            }
            if let Some(addrs) = self.directory.addrs(*id) {
                if let Ok(v) = addrs.client.to_string().parse() {
                    md.insert(LEADER_ADDR_KEY, v);
                }
            }
        }
        if let ApiError::Rejected(
            SmError::StaleToken { current, .. } | SmError::TokenSuperseded { current, .. },
        ) = &e
        {
            if let Ok(v) = current.to_string().parse() {
                md.insert(CURRENT_TOKEN_KEY, v);
            }
        }
        status
    }

    /// Lets `req` through if its client may do `action` (see [`crate::auth`]): refused
    /// UNAUTHENTICATED (`unauthenticated`) without credentials that prove who it is, and
    /// PERMISSION_DENIED (`permission-denied`) when who it is may not; each refusal is
    /// counted. With no policy (TLS and the auth file both off) everything is let through,
    /// as the server said at start.
    ///
    /// Every call also takes one from its principal's calls-per-second budget on this node
    /// ([`Api::within_rate`]).
    fn authorize<T>(&self, req: &Request<T>, action: Action<'_>) -> Result<Principal, Status> {
        let certs = req.peer_certs();
        let who = crate::auth::authorize(
            self.policy.as_deref(),
            &self.config.cluster_id,
            authorization(req),
            certs.as_ref().and_then(|c| c.first()),
            &action,
            &self.driver.metrics,
        )
        .map_err(|denied| self.denied(denied))?;
        self.within_rate(&who)?;
        Ok(who)
    }

    /// Lets `req` through if its client may administer the cluster ([`Admin::authorize`]),
    /// refused and counted as [`Api::authorize`] refuses, and within its budget as there.
    fn administrator<T>(&self, req: &Request<T>) -> Result<Administrator, Status> {
        let certs = req.peer_certs();
        let caller = self
            .admin
            .authorize(authorization(req), certs.as_ref().and_then(|c| c.first()))
            .map_err(|denied| self.denied(denied))?;
        self.within_rate(caller.principal())?;
        Ok(caller)
    }

    /// Takes one call from `who`'s calls-per-second budget on this node
    /// (`requests_per_second`): past it, RESOURCE_EXHAUSTED `quota-exceeded`, and nothing
    /// else is looked at. Without authentication there is nobody to charge.
    fn within_rate(&self, who: &Principal) -> Result<(), Status> {
        let Principal::Named(name) = who else {
            return Ok(());
        };
        let per_second = self
            .quotas(who)
            .requests_per_second
            .unwrap_or(self.config.requests_per_second_per_principal_max);
        self.rates.admit(name, per_second).map_err(|limit| {
            self.driver
                .metrics
                .requests_over_rate
                .fetch_add(1, Ordering::Relaxed);
            Reason::QuotaExceeded.label(Status::resource_exhausted(format!(
                "principal {name:?} made more than its {limit} calls per second on this node \
                 (requests_per_second); slow down"
            )))
        })
    }

    /// `command` charged to `who` under its quota ([`crate::quota`]); as it is without
    /// authentication (nobody to charge).
    fn charge(&self, who: &Principal, command: Command) -> Command {
        match who {
            Principal::Named(name) => {
                let quota = crate::quota::quota(&self.config, &self.quotas(who));
                crate::quota::charged(name, quota, command)
            }
            Principal::Anyone => command,
        }
    }

    /// The quotas the auth file sets for `who`.
    fn quotas(&self, who: &Principal) -> crate::auth::Quotas {
        match (who, self.policy.as_deref()) {
            (Principal::Named(name), Some(policy)) => policy.quotas(name),
            _ => crate::auth::Quotas::default(),
        }
    }

    /// A refusal as a gRPC status (already counted by `auth::authorize`).
    fn denied(&self, denied: Denied) -> Status {
        let (status, reason) = match &denied {
            Denied::Unauthenticated(why) => (
                Status::unauthenticated(why.clone()),
                Reason::Unauthenticated,
            ),
            Denied::Forbidden { .. } => (
                Status::permission_denied(denied.to_string()),
                Reason::PermissionDenied,
            ),
        };
        reason.label(status)
    }

    /// The hash of a presented session secret: `None` when none was presented; a secret
    /// of the wrong length is an invalid argument.
    fn secret_hash(&self, secret: &[u8]) -> Result<Option<SecretHash>, Status> {
        if secret.is_empty() {
            return Ok(None);
        }
        if secret.len() != SESSION_SECRET_BYTES {
            return Err(self.status(ApiError::Invalid(format!(
                "session_secret is {} bytes; session secrets are {SESSION_SECRET_BYTES}",
                secret.len()
            ))));
        }
        // One byte repeated (all zeros, say) is what a client that forgot to draw one sends:
        // anyone could guess it.
        if secret.iter().all(|&b| b == secret[0]) {
            return Err(self.status(ApiError::Invalid(
                "session_secret is one byte repeated, which anyone could guess; draw 16 random \
                 bytes (the tenure client library does)"
                    .into(),
            )));
        }
        use sha2::Digest as _;
        Ok(Some(sha2::Sha256::digest(secret).into()))
    }

    /// `command` sealed with the hash of `secret`, or as it is when none was presented.
    fn seal(&self, secret: &[u8], command: Command) -> Result<Command, Status> {
        Ok(match self.secret_hash(secret)? {
            Some(secret_hash) => Command::Sealed {
                secret_hash,
                command: Box::new(command),
            },
            None => command,
        })
    }

    async fn run(&self, command: Command) -> Result<(u64, Response), Status> {
        self.run_request(None, command).await
    }

    /// Proposes `command` with its request id, if any, and waits for the outcome.
    async fn run_request(
        &self,
        request: Option<RequestId>,
        command: Command,
    ) -> Result<(u64, Response), Status> {
        match self.driver.propose(request, command, self.timeout).await {
            Ok((index, Response::Rejected(e))) => {
                let _ = index;
                Err(self.status(ApiError::Rejected(e)))
            }
            Ok(ok) => Ok(ok),
            Err(e) => Err(self.status(e)),
        }
    }

    /// `session`'s token if it leads `election` now (a linearizable read).
    async fn token_if_leading(
        &self,
        election: &str,
        session: SessionId,
    ) -> Result<Option<u64>, Status> {
        let read = Command::Leader {
            election: election.to_string(),
        };
        Ok(match self.run(read).await? {
            (_, Response::LeaderIs(Some(l))) if l.session == session => Some(l.token),
            _ => None,
        })
    }

    fn unexpected(r: Response) -> Status {
        Status::internal(format!("unexpected state machine response {r:?}"))
    }
}

/// Who ended a KeepAlive stream that this server did not end with an error: the client
/// only if the connection carrying it was ended from the client's side first (its end of
/// file or its reset read from the socket: its process exited, or it closed the
/// connection). The stream's own end tells nothing here: gRPC hands a handler the same end
/// of stream for the client's half-close, its reset of the stream, and a connection this
/// server dropped (its ping timeout), so a stream-level end counts as the server's, which
/// never releases a session (docs/GUARANTEES.md "Fate-sharing sessions").
/// Keepalives of one stream being answered at once. A stream may carry the renewals of
/// thousands of leases (the bench sends 625 at a time on each of 16 streams), so this only
/// stops a client that sends without ever reading from piling up tasks without end.
const KEEPALIVES_IN_FLIGHT_MAX: usize = 4096;

/// Which pool a stream draws its slot from.
#[derive(Clone, Copy, Debug)]
enum StreamKind {
    KeepAlive,
    Observe,
}

impl StreamKind {
    fn open(self, metrics: &Metrics) -> &AtomicU64 {
        match self {
            StreamKind::KeepAlive => &metrics.keepalive_streams,
            StreamKind::Observe => &metrics.observe_streams,
        }
    }

    fn refused(self, metrics: &Metrics) -> &AtomicU64 {
        match self {
            StreamKind::KeepAlive => &metrics.keepalive_streams_refused,
            StreamKind::Observe => &metrics.observe_streams_refused,
        }
    }
}

/// A bounded number of open streams of one kind, and each principal's share of it.
#[derive(Clone)]
struct StreamPool {
    kind: StreamKind,
    slots: Arc<Semaphore>,
    max: usize,
    /// A principal's share unless the auth file sets its own.
    share: usize,
    /// Streams held, by principal.
    held: SharesHeld,
}

/// Streams held in one pool, by principal (the metrics show them).
type SharesHeld = crate::metrics::PrincipalCounts;

/// One open stream's place in its pool, given back when the stream's task ends.
struct StreamSlot {
    _permit: OwnedSemaphorePermit,
    kind: StreamKind,
    metrics: Arc<Metrics>,
    /// Its principal's count in the pool, if it has one.
    principal: Option<(String, SharesHeld)>,
}

impl StreamPool {
    fn new(kind: StreamKind, max: usize, share: usize, held: SharesHeld) -> StreamPool {
        StreamPool {
            kind,
            slots: Arc::new(Semaphore::new(max)),
            max,
            share,
            held,
        }
    }

    /// The quota's name, for refusals.
    fn quota_names(&self) -> (&'static str, &'static str, &'static str) {
        match self.kind {
            StreamKind::KeepAlive => (
                "KeepAlive",
                "keepalive_streams_max",
                "keepalive_streams (keepalive_streams_per_principal_max)",
            ),
            StreamKind::Observe => (
                "Observe",
                "observe_streams_max",
                "observe_streams (observe_streams_per_principal_max)",
            ),
        }
    }

    /// A slot for `principal`, or RESOURCE_EXHAUSTED: `quota-exceeded` when the principal
    /// holds its whole share (`quota`, or the pool's default share), `resource-exhausted`
    /// when every slot is taken. One principal's streams never take more than its share, so
    /// with shares that add up to the pool no principal is refused for another's.
    fn take(
        &self,
        metrics: &Arc<Metrics>,
        principal: &Principal,
        quota: Option<usize>,
    ) -> Result<StreamSlot, Status> {
        let (what, _, quota_name) = self.quota_names();
        let mut counted = None;
        if let Principal::Named(name) = principal {
            let share = quota.unwrap_or(self.share);
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            let n = held.entry(name.clone()).or_insert(0);
            if *n >= share {
                self.kind.refused(metrics).fetch_add(1, Ordering::Relaxed);
                return Err(
                    Reason::QuotaExceeded.label(Status::resource_exhausted(format!(
                        "principal {name:?} has {n} {what} streams open on this node, its quota \
                     {quota_name} of {share}; end some of its own first"
                    ))),
                );
            }
            *n += 1;
            counted = Some((name.clone(), Arc::clone(&self.held)));
        }
        let give_back = |counted: &Option<(String, SharesHeld)>| {
            if let Some((name, held)) = counted {
                release_share(held, name);
            }
        };
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => {
                self.kind.open(metrics).fetch_add(1, Ordering::Relaxed);
                Ok(StreamSlot {
                    _permit: permit,
                    kind: self.kind,
                    metrics: Arc::clone(metrics),
                    principal: counted,
                })
            }
            Err(_) => {
                give_back(&counted);
                self.kind.refused(metrics).fetch_add(1, Ordering::Relaxed);
                let (what, flag, _) = self.quota_names();
                Err(Reason::ResourceExhausted.label(Status::resource_exhausted(format!(
                    "this node has {} {what} streams open, its limit ({flag}); retry later or on another node",
                    self.max
                ))))
            }
        }
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.kind
            .open(&self.metrics)
            .fetch_sub(1, Ordering::Relaxed);
        if let Some((name, held)) = &self.principal {
            release_share(held, name);
        }
    }
}

/// One stream of principal `name` ended.
fn release_share(held: &SharesHeld, name: &str) {
    let mut held = held.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = held.get_mut(name) {
        *n -= 1;
        if *n == 0 {
            held.remove(name);
        }
    }
}

/// The `authorization` header of `req`, if it sent one.
fn authorization<T>(req: &Request<T>) -> Option<&[u8]> {
    req.metadata().get("authorization").map(|v| v.as_bytes())
}

/// The request id of a request on `session` numbered `seq` by its client (0: none).
fn on_session(session: SessionId, seq: u64) -> Option<RequestId> {
    (seq != 0).then_some(RequestId::Session { session, seq })
}

fn leader_to_proto(l: LeaderInfo) -> v1::LeaderInfo {
    v1::LeaderInfo {
        session_id: l.session,
        value: l.value,
        token: l.token,
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl v1::sessions_server::Sessions for Api {
    async fn grant(
        &self,
        req: Request<v1::GrantRequest>,
    ) -> Result<tonic::Response<v1::GrantResponse>, Status> {
        let who = self.authorize(&req, Action::Session)?;
        let r = req.into_inner();
        let ttl_ms = r.ttl_ms;
        if ttl_ms < self.config.ttl_min_ms || ttl_ms > self.config.ttl_max_ms {
            return Err(self.status(ApiError::Invalid(format!(
                "ttl {ttl_ms} ms is outside [{}, {}] ms",
                self.config.ttl_min_ms, self.config.ttl_max_ms
            ))));
        }
        let ttl_ticks = self.config.ms_to_ticks(ttl_ms);
        let request = (r.request_nonce != 0).then_some(RequestId::Grant {
            nonce: r.request_nonce,
        });
        let secret = if r.session_secret.is_empty() {
            tenure_proto::new_session_secret().map_err(|e| self.status(ApiError::Unavailable(e)))?
        } else {
            r.session_secret
        };
        let command = self.seal(&secret, Command::Grant { ttl_ticks })?;
        match self
            .run_request(request, self.charge(&who, command))
            .await?
        {
            (_, Response::Granted { session, ttl_ticks }) => {
                Ok(tonic::Response::new(v1::GrantResponse {
                    session_id: session,
                    ttl_ms: ttl_ticks * self.tick_ms,
                    session_secret: secret,
                }))
            }
            (_, r) => Err(Api::unexpected(r)),
        }
    }

    type KeepAliveStream = BoxStream<v1::KeepAliveResponse>;

    async fn keep_alive(
        &self,
        req: Request<tonic::Streaming<v1::KeepAliveRequest>>,
    ) -> Result<tonic::Response<Self::KeepAliveStream>, Status> {
        let who = self.authorize(&req, Action::Session)?;
        let quota = self.quotas(&who).keepalive_streams;
        let slot = self
            .keepalive_streams
            .take(&self.driver.metrics, &who, quota)?;
        let conn_end = req.remote_addr().and_then(|peer| self.conn_ends.of(peer));
        let mut incoming = req.into_inner();
        let (tx, rx) = mpsc::channel::<Result<v1::KeepAliveResponse, Status>>(256);
        let api = self.clone();
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let _slot = slot;
            let in_flight = Arc::new(Semaphore::new(KEEPALIVES_IN_FLIGHT_MAX));
            // Set before this server ends the stream with an error: no end after it is the
            // client's.
            let ended_here = Arc::new(AtomicBool::new(false));
            let mut bound = false;
            let how = loop {
                // The stream ends when the client stops sending or stops listening.
                let item = tokio::select! {
                    item = incoming.next() => item,
                    _ = tx.closed() => break "its answers are no longer read",
                };
                let ka = match item {
                    Some(Ok(ka)) => ka,
                    Some(Err(_)) => break "its requests broke off",
                    None => break "its requests ended",
                };
                // A client that sends faster than it is answered waits here (and HTTP/2
                // flow control holds it back) instead of piling up tasks.
                let Ok(answering) = Arc::clone(&in_flight).acquire_owned().await else {
                    break "it was closed";
                };
                bound |= ka.bind;
                let api = api.clone();
                let who = who.clone();
                let tx = tx.clone();
                let ended_here = Arc::clone(&ended_here);
                // Each keepalive is answered on its own, so that one waiting for the lease
                // does not hold up the next.
                tokio::spawn(async move {
                    let _answering = answering;
                    let session = ka.session_id;
                    let secret_hash = match api.secret_hash(&ka.session_secret) {
                        Ok(h) => h,
                        Err(status) => {
                            ended_here.store(true, Ordering::SeqCst);
                            let _ = tx.send(Err(status)).await;
                            return;
                        }
                    };
                    let bind = ka.bind.then_some(Bind {
                        stream,
                        seq: ka.seq,
                    });
                    let principal = match &who {
                        Principal::Named(name) => Some(name.clone()),
                        Principal::Anyone => None,
                    };
                    let answer = api
                        .driver
                        .call(
                            |reply| ClientRequest::KeepAlive {
                                session,
                                secret_hash,
                                principal,
                                bind,
                                reply,
                            },
                            api.timeout,
                        )
                        .await;
                    let msg = match answer {
                        Ok(ttl_ticks) => Ok(v1::KeepAliveResponse {
                            session_id: session,
                            seq: ka.seq,
                            ttl_ms: ttl_ticks * api.tick_ms,
                        }),
                        Err(e) => {
                            // An error ends the stream: this server's end, not the client's.
                            ended_here.store(true, Ordering::SeqCst);
                            Err(api.status(e))
                        }
                    };
                    let _ = tx.send(msg).await;
                });
            };
            let end = if !ended_here.load(Ordering::SeqCst)
                && conn_end.as_deref().is_some_and(ConnEnd::by_peer)
            {
                StreamEnd::Client
            } else {
                StreamEnd::Server
            };
            tracing::debug!(
                event = "keepalive_stream_ended",
                stream,
                bound,
                by = ?end,
                "KeepAlive stream {stream} ended ({how}); ended by the {end:?}"
            );
            let metrics = &api.driver.metrics;
            match end {
                StreamEnd::Client => &metrics.keepalive_streams_closed_by_client,
                StreamEnd::Server => &metrics.keepalive_streams_closed_by_server,
            }
            .fetch_add(1, Ordering::Relaxed);
            if bound {
                // Best effort: a driver that is gone or full has stopped leading or will
                // let the sessions expire on their TTL.
                let _ = api
                    .driver
                    .inputs
                    .try_send(Input::Client(ClientRequest::StreamEnded { stream, end }));
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn revoke(
        &self,
        req: Request<v1::RevokeRequest>,
    ) -> Result<tonic::Response<v1::RevokeResponse>, Status> {
        let who = self.authorize(&req, Action::Session)?;
        let r = req.into_inner();
        let session = r.session_id;
        let command = self.seal(&r.session_secret, Command::Revoke { session })?;
        self.run_request(
            on_session(session, r.request_seq),
            self.charge(&who, command),
        )
        .await?;
        Ok(tonic::Response::new(v1::RevokeResponse {}))
    }
}

#[tonic::async_trait]
impl v1::elections_server::Elections for Api {
    async fn campaign(
        &self,
        req: Request<v1::CampaignRequest>,
    ) -> Result<tonic::Response<v1::CampaignResponse>, Status> {
        let who = self.authorize(&req, Action::Campaign(&req.get_ref().election))?;
        let r = req.into_inner();
        // Subscribe before proposing, so that the change that makes us leader cannot slip
        // between the answer and the subscription.
        let mut changes = self.driver.leader_changes.subscribe();
        let election = r.election.clone();
        let session = r.session_id;
        let cmd = self.seal(
            &r.session_secret,
            Command::Campaign {
                election: r.election,
                session,
                value: r.value,
            },
        )?;
        match self
            .run_request(on_session(session, r.request_seq), self.charge(&who, cmd))
            .await?
        {
            (
                _,
                Response::Campaigned {
                    leader_token: Some(token),
                    ..
                },
            ) => {
                return Ok(tonic::Response::new(v1::CampaignResponse { token }));
            }
            (
                _,
                Response::Campaigned {
                    leader_token: None, ..
                },
            ) => {
                // A retried campaign gets its first answer back ("queued"), which may be long
                // past: leadership may have reached it since. Ask once, now that we listen.
                if let Some(token) = self.token_if_leading(&election, session).await? {
                    return Ok(tonic::Response::new(v1::CampaignResponse { token }));
                }
            }
            (_, r) => return Err(Api::unexpected(r)),
        }
        // Wait for our turn. Only this call wakes for it: other waiters filter on their own
        // session, and no client is told anything until it leads.
        loop {
            match changes.recv().await {
                Ok(change) => {
                    if change.election == election {
                        if let Some(l) = change.leader {
                            if l.session == session {
                                return Ok(tonic::Response::new(v1::CampaignResponse {
                                    token: l.token,
                                }));
                            }
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // We missed changes: ask the log who leads now.
                    if let Some(token) = self.token_if_leading(&election, session).await? {
                        return Ok(tonic::Response::new(v1::CampaignResponse { token }));
                    }
                }
                Err(broadcast::error::RecvError::Closed) => {
                    return Err(self.status(ApiError::ShuttingDown));
                }
            }
        }
    }

    async fn resign(
        &self,
        req: Request<v1::ResignRequest>,
    ) -> Result<tonic::Response<v1::ResignResponse>, Status> {
        let who = self.authorize(&req, Action::Campaign(&req.get_ref().election))?;
        let r = req.into_inner();
        let command = self.seal(
            &r.session_secret,
            Command::Resign {
                election: r.election,
                session: r.session_id,
            },
        )?;
        self.run_request(
            on_session(r.session_id, r.request_seq),
            self.charge(&who, command),
        )
        .await?;
        Ok(tonic::Response::new(v1::ResignResponse {}))
    }

    async fn transfer(
        &self,
        req: Request<v1::TransferRequest>,
    ) -> Result<tonic::Response<v1::TransferResponse>, Status> {
        let who = self.authorize(&req, Action::Campaign(&req.get_ref().election))?;
        let r = req.into_inner();
        let request = on_session(r.from_session_id, r.request_seq);
        let cmd = self.seal(
            &r.from_session_secret,
            Command::Transfer {
                election: r.election,
                from: r.from_session_id,
                to: r.to_session_id,
            },
        )?;
        match self.run_request(request, self.charge(&who, cmd)).await? {
            (_, Response::Transferred { token }) => {
                Ok(tonic::Response::new(v1::TransferResponse { token }))
            }
            (_, r) => Err(Api::unexpected(r)),
        }
    }

    async fn delete(
        &self,
        req: Request<v1::DeleteElectionRequest>,
    ) -> Result<tonic::Response<v1::DeleteElectionResponse>, Status> {
        let who = self.authorize(&req, Action::Campaign(&req.get_ref().election))?;
        let election = req.into_inner().election;
        let cmd = self.charge(&who, Command::DeleteElection { election });
        match self.run(cmd).await? {
            (index, Response::Deleted { existed }) => {
                Ok(tonic::Response::new(v1::DeleteElectionResponse {
                    index,
                    existed,
                }))
            }
            (_, r) => Err(Api::unexpected(r)),
        }
    }

    async fn leader(
        &self,
        req: Request<v1::LeaderRequest>,
    ) -> Result<tonic::Response<v1::LeaderResponse>, Status> {
        self.authorize(&req, Action::Observe(&req.get_ref().election))?;
        let election = req.into_inner().election;
        match self.run(Command::Leader { election }).await? {
            (_, Response::LeaderIs(l)) => Ok(tonic::Response::new(v1::LeaderResponse {
                leader: l.map(leader_to_proto),
            })),
            (_, r) => Err(Api::unexpected(r)),
        }
    }

    type ObserveStream = BoxStream<v1::LeaderEvent>;

    async fn observe(
        &self,
        req: Request<v1::ObserveRequest>,
    ) -> Result<tonic::Response<Self::ObserveStream>, Status> {
        let who = self.authorize(&req, Action::Observe(&req.get_ref().election))?;
        let quota = self.quotas(&who).observe_streams;
        let slot = self
            .observe_streams
            .take(&self.driver.metrics, &who, quota)?;
        let election = req.into_inner().election;
        let mut changes = self.driver.leader_changes.subscribe();
        let (index, current) = match self
            .run(Command::Leader {
                election: election.clone(),
            })
            .await?
        {
            (index, Response::LeaderIs(l)) => (index, l),
            (_, r) => return Err(Api::unexpected(r)),
        };
        let (tx, rx) = mpsc::channel(64);
        let first = v1::LeaderEvent {
            election: election.clone(),
            leader: current.map(leader_to_proto),
            index,
        };
        let api = self.clone();
        tokio::spawn(async move {
            let _slot = slot;
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            loop {
                // A client that goes (its end of the stream dropped) frees the slot now,
                // not at the election's next change.
                let change = tokio::select! {
                    change = changes.recv() => change,
                    _ = tx.closed() => return,
                };
                match change {
                    Ok(c) if c.election == election && c.index > index => {
                        let ev = v1::LeaderEvent {
                            election: c.election,
                            leader: c.leader.map(leader_to_proto),
                            index: c.index,
                        };
                        if tx.send(Ok(ev)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx
                            .send(Err(Status::data_loss(format!(
                                "observer fell {n} changes behind; observe again"
                            ))))
                            .await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        let _ = tx.send(Err(api.status(ApiError::ShuttingDown))).await;
                        return;
                    }
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[tonic::async_trait]
impl v1::fenced_keys_server::FencedKeys for Api {
    async fn get(
        &self,
        req: Request<v1::GetRequest>,
    ) -> Result<tonic::Response<v1::GetResponse>, Status> {
        self.authorize(&req, Action::Read(&req.get_ref().key))?;
        let key = req.into_inner().key;
        match self.run(Command::Get { key }).await? {
            (_, Response::Value(v)) => Ok(tonic::Response::new(v1::GetResponse {
                value: v.map(|v| v1::FencedValue {
                    value: v.value,
                    election: v.election,
                    token: v.token,
                    index: v.index,
                }),
            })),
            (_, r) => Err(Api::unexpected(r)),
        }
    }

    async fn put(
        &self,
        req: Request<v1::PutRequest>,
    ) -> Result<tonic::Response<v1::PutResponse>, Status> {
        let r = req.get_ref();
        let who = self.authorize(
            &req,
            Action::Write {
                key: &r.key,
                election: &r.election,
            },
        )?;
        let r = req.into_inner();
        let request = on_session(r.session_id, r.request_seq);
        let cmd = self.seal(
            &r.session_secret,
            Command::FencedPut {
                key: r.key,
                value: r.value,
                election: r.election,
                token: r.token,
            },
        )?;
        match self.run_request(request, self.charge(&who, cmd)).await? {
            (index, Response::Put) => Ok(tonic::Response::new(v1::PutResponse { index })),
            (_, r) => Err(Api::unexpected(r)),
        }
    }

    async fn delete(
        &self,
        req: Request<v1::DeleteKeyRequest>,
    ) -> Result<tonic::Response<v1::DeleteKeyResponse>, Status> {
        let r = req.get_ref();
        let who = self.authorize(
            &req,
            Action::Write {
                key: &r.key,
                election: &r.election,
            },
        )?;
        let r = req.into_inner();
        let request = on_session(r.session_id, r.request_seq);
        let cmd = self.seal(
            &r.session_secret,
            Command::DeleteKey {
                key: r.key,
                election: r.election,
                token: r.token,
            },
        )?;
        match self.run_request(request, self.charge(&who, cmd)).await? {
            (index, Response::Deleted { existed }) => {
                Ok(tonic::Response::new(v1::DeleteKeyResponse {
                    index,
                    existed,
                }))
            }
            (_, r) => Err(Api::unexpected(r)),
        }
    }
}

#[tonic::async_trait]
impl v1::cluster_server::Cluster for Api {
    async fn status(
        &self,
        req: Request<v1::StatusRequest>,
    ) -> Result<tonic::Response<v1::StatusResponse>, Status> {
        let who = self.authorize(&req, Action::Status)?;
        let p = self.driver.published.borrow().clone();
        let mut response = self.status_response(&p.status);
        // The caller's own holdings only: another principal's are not its business.
        if let Principal::Named(name) = &who {
            let quota = crate::quota::quota(&self.config, &self.quotas(&who));
            let held = {
                let usage = self.driver.metrics.principal_usage.lock();
                let usage = usage.unwrap_or_else(|p| p.into_inner());
                usage.get(name).copied().unwrap_or_default()
            };
            response.usage = vec![v1::PrincipalUsage {
                principal: name.clone(),
                sessions: held.sessions,
                sessions_max: quota.sessions,
                elections: held.elections,
                elections_max: quota.elections,
                keys: held.keys,
                keys_max: quota.keys,
                key_bytes: held.key_bytes,
                key_bytes_max: quota.key_bytes,
            }];
        }
        let now = p.status.now_tick;
        response.peers = p
            .progress
            .iter()
            .map(|(id, progress)| v1::PeerProgress {
                id: *id,
                match_index: progress.match_index,
                last_contact_ms: progress
                    .heard_tick
                    .map(|t| now.saturating_sub(t).saturating_mul(self.tick_ms)),
            })
            .collect();
        Ok(tonic::Response::new(response))
    }

    async fn add_member(
        &self,
        req: Request<v1::MemberRequest>,
    ) -> Result<tonic::Response<v1::MembersResponse>, Status> {
        let caller = self.administrator(&req)?;
        let added = self.admin.add_member(&caller, req.get_ref()).await;
        self.members_after(added)
    }

    async fn remove_member(
        &self,
        req: Request<v1::MemberRequest>,
    ) -> Result<tonic::Response<v1::MembersResponse>, Status> {
        let caller = self.administrator(&req)?;
        let removed = self.admin.remove_member(&caller, req.get_ref().id).await;
        self.members_after(removed)
    }

    async fn transfer_leadership(
        &self,
        req: Request<v1::TransferLeadershipRequest>,
    ) -> Result<tonic::Response<v1::TransferLeadershipResponse>, Status> {
        let caller = self.administrator(&req)?;
        self.admin
            .transfer_leadership(&caller, req.get_ref().to)
            .await
            .map_err(|e| self.status(e.into()))?;
        Ok(tonic::Response::new(v1::TransferLeadershipResponse {}))
    }

    async fn members(
        &self,
        req: Request<v1::MembersRequest>,
    ) -> Result<tonic::Response<v1::MembersResponse>, Status> {
        self.authorize(&req, Action::Members)?;
        // This node's current membership, as last published by the driver: no log write and
        // no quorum round. A client uses it only to learn where else to knock; every request
        // it then sends is still answered (or redirected) by whoever leads.
        let membership = self.driver.published.borrow().status.membership.clone();
        let members = membership
            .all_nodes()
            .into_iter()
            .map(|id| v1::Member {
                id,
                peer_addr: String::new(),
                client_addr: self
                    .directory
                    .addrs(id)
                    .map(|a| a.client.to_string())
                    .unwrap_or_default(),
                voter: membership.is_voter(id),
                http_addr: String::new(),
            })
            .collect();
        Ok(tonic::Response::new(v1::MembersResponse { members }))
    }

    async fn promote_member(
        &self,
        req: Request<v1::PromoteMemberRequest>,
    ) -> Result<tonic::Response<v1::MembersResponse>, Status> {
        let caller = self.administrator(&req)?;
        let promoted = self.admin.promote_member(&caller, req.get_ref().id).await;
        self.members_after(promoted)
    }

    async fn list_elections(
        &self,
        req: Request<v1::ListElectionsRequest>,
    ) -> Result<tonic::Response<v1::ListElectionsResponse>, Status> {
        self.authorize(&req, Action::Metrics)?;
        let r = req.into_inner();
        let listing = self
            .driver
            .list_elections(r.after, r.limit as usize, self.timeout);
        match listing.await {
            Ok(Listing {
                page,
                applied_index,
            }) => Ok(tonic::Response::new(v1::ListElectionsResponse {
                elections: page
                    .items
                    .into_iter()
                    .map(|(e, since_index)| v1::ElectionSummary {
                        name: e.name,
                        leader: e.leader.map(leader_to_proto),
                        candidates: e.candidates,
                        since_index,
                    })
                    .collect(),
                more: page.more,
                applied_index,
            })),
            Err(e) => Err(self.status(e)),
        }
    }

    async fn list_sessions(
        &self,
        req: Request<v1::ListSessionsRequest>,
    ) -> Result<tonic::Response<v1::ListSessionsResponse>, Status> {
        self.authorize(&req, Action::Metrics)?;
        let r = req.into_inner();
        let listing = self
            .driver
            .list_sessions(r.after, r.limit as usize, self.timeout);
        match listing.await {
            Ok(Listing {
                page,
                applied_index,
            }) => Ok(tonic::Response::new(v1::ListSessionsResponse {
                sessions: page
                    .items
                    .into_iter()
                    .map(|(s, remaining_ms)| v1::SessionSummary {
                        id: s.id,
                        ttl_ms: s.info.ttl_ticks.saturating_mul(self.tick_ms),
                        remaining_ms,
                        elections: s.elections,
                    })
                    .collect(),
                more: page.more,
                applied_index,
            })),
            Err(e) => Err(self.status(e)),
        }
    }
}

impl Api {
    /// The answer to a membership change: the members once it is in effect, or why not.
    fn members_after<T>(
        &self,
        changed: Result<T, AdminError>,
    ) -> Result<tonic::Response<v1::MembersResponse>, Status> {
        changed.map_err(|e| self.status(e.into()))?;
        let p = self.driver.published.borrow().clone();
        Ok(tonic::Response::new(v1::MembersResponse {
            members: self.status_response(&p.status).members,
        }))
    }

    fn status_response(&self, s: &tenure_core::node::Status) -> v1::StatusResponse {
        let members = s
            .membership
            .all_nodes()
            .into_iter()
            .map(|id| {
                let addrs = self.directory.addrs(id);
                let addrs = addrs.as_ref();
                v1::Member {
                    id,
                    peer_addr: addrs.map(|a| a.peer.to_string()).unwrap_or_default(),
                    client_addr: addrs.map(|a| a.client.to_string()).unwrap_or_default(),
                    voter: s.membership.is_voter(id),
                    http_addr: addrs.map(|a| a.http.to_string()).unwrap_or_default(),
                }
            })
            .collect();
        let leader = s.leader.unwrap_or(0);
        v1::StatusResponse {
            id: s.id,
            role: format!("{:?}", s.role).to_lowercase(),
            term: s.term,
            leader_id: leader,
            leader_addr: self
                .directory
                .addrs(leader)
                .map(|a| a.client.to_string())
                .unwrap_or_default(),
            commit_index: s.commit,
            applied_index: s.applied,
            members,
            version: crate::metrics::BUILD_VERSION.to_string(),
            // The leader's view of the others is in `Published::progress`; `status` adds it.
            peers: Vec::new(),
            last_index: s.last_index,
            // The caller's own, added by `status`.
            usage: Vec::new(),
        }
    }
}
