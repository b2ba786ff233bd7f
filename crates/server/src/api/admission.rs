//! Who may use a client connection, decided from a request's headers before its body is read.
//!
//! With a policy (TLS or an auth file), a connection is admitted *unauthenticated*, into a
//! small pool of its own ([`crate::conn::Gate`]), and has a short deadline to prove who its
//! client is. The first request whose headers carry valid credentials (a client certificate
//! of the cluster's CA, or a bearer token the auth file knows) moves the connection into the
//! pool of authenticated connections, under its principal's cap and outside the slots kept
//! for operators; a request without them is refused UNAUTHENTICATED here, at its headers, so
//! that its body is never buffered. What an anonymous client can make the node hold is then
//! bounded by the unauthenticated pool, the per-address cap, HTTP/2's per-connection window
//! and the deadline (docs/SECURITY.md "Limits before authentication").
//!
//! What a request may *do* is still decided by its handler (`Api::authorize`), with the
//! request's own credentials.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tenure_proto::Reason;
use tonic::codegen::http;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::auth::{Denied, Policy};
use crate::conn::{ConnEnds, Promotion};
use crate::metrics::Metrics;

/// When a gRPC request reached the server: its headers read, before it is authenticated or
/// its body decoded. Stamped by [`Authenticate`] into the request's extensions, for the
/// stage histograms (`tenure_stage_seconds{stage="unary_in"}` and `"unary_total"`).
#[derive(Debug, Clone, Copy)]
pub struct Arrived(pub std::time::Instant);

/// The layer in front of every gRPC service.
#[derive(Clone)]
pub struct AuthenticateLayer {
    shared: Arc<Shared>,
}

struct Shared {
    policy: Option<Arc<Policy>>,
    cluster_id: String,
    conns: ConnEnds,
    metrics: Arc<Metrics>,
}

impl AuthenticateLayer {
    /// Authenticate against `policy` (none: every request passes, as the server says at
    /// start), promoting the connections of `conns`.
    pub fn new(
        policy: Option<Arc<Policy>>,
        cluster_id: &str,
        conns: ConnEnds,
        metrics: Arc<Metrics>,
    ) -> AuthenticateLayer {
        AuthenticateLayer {
            shared: Arc::new(Shared {
                policy,
                cluster_id: cluster_id.to_string(),
                conns,
                metrics,
            }),
        }
    }
}

impl<S> tower::Layer<S> for AuthenticateLayer {
    type Service = Authenticate<S>;

    fn layer(&self, inner: S) -> Authenticate<S> {
        Authenticate {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// [`AuthenticateLayer`]'s service.
#[derive(Clone)]
pub struct Authenticate<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl Shared {
    /// Lets a request through, or the refusal to send in its place.
    fn admit<B>(&self, req: &http::Request<B>) -> Result<(), tonic::Status> {
        let Some(policy) = self.policy.as_deref() else {
            return Ok(());
        };
        let ext = req.extensions();
        let (peer, leaf) = match ext.get::<TlsConnectInfo<TcpConnectInfo>>() {
            Some(tls) => (
                tls.get_ref().remote_addr(),
                tls.peer_certs().and_then(|c| c.first().cloned()),
            ),
            None => (
                ext.get::<TcpConnectInfo>().and_then(|c| c.remote_addr()),
                None,
            ),
        };
        let authorization = req.headers().get("authorization").map(|v| v.as_bytes());
        let identity = crate::auth::identify(
            policy,
            &self.cluster_id,
            authorization,
            leaf.as_ref(),
            &self.metrics,
        )
        .map_err(|denied| {
            let Denied::Unauthenticated(why) = denied else {
                unreachable!("identifying refuses only the unauthenticated")
            };
            Reason::Unauthenticated.label(tonic::Status::unauthenticated(why))
        })?;
        let Some(conn) = peer.and_then(|p| self.conns.of(p)) else {
            // Not one of the gate's connections (cannot happen on the client port): the
            // handler still checks the credentials.
            return Ok(());
        };
        match conn.promote(&identity.name, identity.operator) {
            Promotion::Done | Promotion::Already => Ok(()),
            Promotion::Refused(why) => {
                Err(Reason::ResourceExhausted.label(tonic::Status::resource_exhausted(why)))
            }
        }
    }
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for Authenticate<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<ReqBody>) -> Self::Future {
        req.extensions_mut()
            .insert(Arrived(std::time::Instant::now()));
        match self.shared.admit(&req) {
            Ok(()) => Box::pin(self.inner.call(req)),
            // Answered from the headers: the body is dropped unread, and the client's data
            // costs the node nothing beyond the stream's flow-control window.
            Err(status) => {
                let response = status.into_http::<ResBody>();
                Box::pin(std::future::ready(Ok(response)))
            }
        }
    }
}
