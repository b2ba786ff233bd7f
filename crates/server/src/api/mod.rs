//! The gRPC client API (`tenure.v1`) over the driver, one module per service:
//! `sessions.rs`, `elections.rs`, `fenced_keys.rs` and `cluster.rs` (whose admin actions are
//! [`crate::admin`]'s). Here is what they share: who may call (`Api::authorize`, and each
//! principal's calls-per-second budget), the one shape of a unary call (authorize, build
//! what goes to the driver, send it, answer from its reply), and the driver's refusals as
//! gRPC statuses. In front of every service, [`admission`] authenticates a request from its
//! headers before its body is read; the KeepAlive and Observe streams draw from the pools
//! in `streams.rs`.
//!
//! A request that reaches a follower is answered with a typed `not-leader` status naming the
//! leader's client address, so that clients go there directly (no hidden forwarding hop).

pub mod admission;
mod cluster;
mod elections;
mod fenced_keys;
mod sessions;
mod streams;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tenure_core::sm::{Command, LeaderInfo, RequestId, Response, SecretHash, SessionId, SmError};
use tenure_core::types::Index;
use tenure_proto::v1;
use tenure_proto::{
    Reason, CURRENT_TOKEN_KEY, ERROR_KEY, LEADER_ADDR_KEY, LEADER_ID_KEY, SESSION_SECRET_BYTES,
};
use tokio_stream::Stream;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

use crate::admin::{Admin, Administrator};
use crate::auth::{Action, Denied, Policy, Principal};
use crate::config::ServerConfig;
use crate::conn::ConnEnds;
use crate::directory::Directory;
use crate::driver::{ApiError, DriverHandle};
use crate::quota::Rates;
use streams::{StreamKind, StreamPool};

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
    rates: Arc<Rates>,
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
            rates: Arc::new(Rates::default()),
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
            // The client says "invalid argument: " itself; the message is the reason alone.
            ApiError::Invalid(why) => (
                Status::invalid_argument(why.clone()),
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
                        .fetch_add(1, Ordering::Relaxed);
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
                        .fetch_add(1, Ordering::Relaxed);
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

    /// The one shape of a unary call: authorize `req`'s client for the `action` it asks
    /// ([`Api::authorize`]), `build` what goes to the driver from the request, send it, and
    /// `answer` from the driver's reply. A refusal at any step is the call's status.
    async fn unary<T, A: Ask, R>(
        &self,
        req: Request<T>,
        action: impl for<'r> FnOnce(&'r T) -> Action<'r>,
        build: impl FnOnce(T) -> A,
        answer: impl FnOnce(A::Reply) -> Result<R, Status>,
    ) -> Result<tonic::Response<R>, Status> {
        let arrived = req.extensions().get::<admission::Arrived>().map(|a| a.0);
        let stages = &self.driver.metrics.stages;
        if let Some(at) = arrived {
            stages.unary_in.observe(at.elapsed());
        }
        let who = self.authorize(&req, action(req.get_ref()))?;
        let reply = build(req.into_inner()).ask(self, &who).await?;
        let answered = answer(reply).map(tonic::Response::new);
        if let (Some(at), Ok(_)) = (arrived, &answered) {
            stages.unary_total.observe(at.elapsed());
        }
        answered
    }

    /// `session`'s token if it leads `election` now (a linearizable read).
    async fn token_if_leading(
        &self,
        who: &Principal,
        election: &str,
        session: SessionId,
    ) -> Result<Option<u64>, Status> {
        let read = Proposal::read(Command::Leader {
            election: election.to_string(),
        });
        Ok(match read.ask(self, who).await? {
            (_, Response::LeaderIs(Some(l))) if l.session == session => Some(l.token),
            _ => None,
        })
    }
}

/// What a unary call sends the driver, and the reply it waits for.
trait Ask {
    /// What the driver answers.
    type Reply;

    /// Send it on behalf of `who`, and wait for the reply; a refusal is the call's status.
    fn ask(
        self,
        api: &Api,
        who: &Principal,
    ) -> impl Future<Output = Result<Self::Reply, Status>> + Send;
}

/// A client's command for the log: a change, or a read that goes through the log (who
/// leads, a fenced key). Answered with the index it took effect at and its response.
struct Proposal {
    /// The client's request id, so that a retry is never applied twice.
    request: Option<RequestId>,
    /// The session secret the client presented (empty: none), sealed into the command.
    secret: Vec<u8>,
    command: Command,
    /// Whether the command counts against its caller's quota: every change does, no read.
    charged: bool,
}

impl Proposal {
    /// A change by a client: sealed with `secret` (when presented), charged to the caller,
    /// under `request`.
    fn change(request: Option<RequestId>, secret: Vec<u8>, command: Command) -> Proposal {
        Proposal {
            request,
            secret,
            command,
            charged: true,
        }
    }

    /// A read through the log: neither sealed nor charged, and without a request id.
    fn read(command: Command) -> Proposal {
        Proposal {
            request: None,
            secret: Vec::new(),
            command,
            charged: false,
        }
    }
}

impl Ask for Proposal {
    type Reply = (Index, Response);

    async fn ask(self, api: &Api, who: &Principal) -> Result<(Index, Response), Status> {
        let command = match api.secret_hash(&self.secret)? {
            Some(secret_hash) => Command::Sealed {
                secret_hash,
                command: Box::new(self.command),
            },
            None => self.command,
        };
        let command = if self.charged {
            api.charge(who, command)
        } else {
            command
        };
        match api.driver.propose(self.request, command, api.timeout).await {
            Ok((_, Response::Rejected(e))) => Err(api.status(ApiError::Rejected(e))),
            Ok(applied) => Ok(applied),
            Err(e) => Err(api.status(e)),
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

/// A response the state machine should not have given to the command proposed.
fn unexpected(r: Response) -> Status {
    Status::internal(format!("unexpected state machine response {r:?}"))
}

pub(crate) type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;
