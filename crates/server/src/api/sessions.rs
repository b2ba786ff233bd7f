//! The Sessions service: grant a session, keep it alive (a stream, which fate-sharing
//! sessions bind to), revoke it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tenure_core::node::{Bind, StreamEnd};
use tenure_core::sm::{Command, RequestId, Response};
use tenure_proto::v1;
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Status};

use super::{on_session, unexpected, Api, Ask, BoxStream, Proposal};
use crate::auth::{Action, Principal};
use crate::conn::ConnEnd;
use crate::driver::{ApiError, ClientRequest, Input};

/// Keepalives of one stream being answered at once. A stream may carry the renewals of
/// thousands of leases (the bench sends 625 at a time on each of 16 streams), so this only
/// stops a client that sends without ever reading from piling up tasks without end.
const KEEPALIVES_IN_FLIGHT_MAX: usize = 4096;

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
        let grant = Proposal::change(request, secret.clone(), Command::Grant { ttl_ticks });
        match grant.ask(self, &who).await? {
            (_, Response::Granted { session, ttl_ticks }) => {
                Ok(tonic::Response::new(v1::GrantResponse {
                    session_id: session,
                    ttl_ms: ttl_ticks * self.tick_ms,
                    session_secret: secret,
                }))
            }
            (_, r) => Err(unexpected(r)),
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
                    let handed = std::time::Instant::now();
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
                    if answer.is_ok() {
                        api.driver
                            .metrics
                            .stages
                            .keepalive_total
                            .observe(handed.elapsed());
                    }
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
            // Who ended the stream, if this server did not end it with an error: the client
            // only if the connection carrying it was ended from the client's side first
            // (its end of file or its reset read from the socket: its process exited, or it
            // closed the connection). The stream's own end tells nothing here: gRPC hands a
            // handler the same end of stream for the client's half-close, its reset of the
            // stream, and a connection this server dropped (its ping timeout), so a
            // stream-level end counts as the server's, which never releases a session
            // (docs/GUARANTEES.md "Fate-sharing sessions").
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
                let _ = api.driver.inputs.try_send(Input::Client(
                    ClientRequest::StreamEnded { stream, end },
                    std::time::Instant::now(),
                ));
            }
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn revoke(
        &self,
        req: Request<v1::RevokeRequest>,
    ) -> Result<tonic::Response<v1::RevokeResponse>, Status> {
        self.unary(
            req,
            |_| Action::Session,
            |r| {
                let session = r.session_id;
                let revoke = Command::Revoke { session };
                Proposal::change(on_session(session, r.request_seq), r.session_secret, revoke)
            },
            |_| Ok(v1::RevokeResponse {}),
        )
        .await
    }
}
