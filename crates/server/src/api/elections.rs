//! The Elections service: campaign (answered once the caller leads), resign, transfer,
//! delete, who leads, and observe (a stream of leader changes).

use tenure_core::sm::{Command, Response};
use tenure_proto::v1;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Status};

use super::{leader_to_proto, on_session, unexpected, Api, Ask, BoxStream, Proposal};
use crate::auth::Action;
use crate::driver::ApiError;

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
        let campaign = Proposal::change(
            on_session(session, r.request_seq),
            r.session_secret,
            Command::Campaign {
                election: r.election,
                session,
                value: r.value,
            },
        );
        match campaign.ask(self, &who).await? {
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
                if let Some(token) = self.token_if_leading(&who, &election, session).await? {
                    return Ok(tonic::Response::new(v1::CampaignResponse { token }));
                }
            }
            (_, r) => return Err(unexpected(r)),
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
                    if let Some(token) = self.token_if_leading(&who, &election, session).await? {
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
        self.unary(
            req,
            |r| Action::Campaign(&r.election),
            |r| {
                let resign = Command::Resign {
                    election: r.election,
                    session: r.session_id,
                };
                Proposal::change(
                    on_session(r.session_id, r.request_seq),
                    r.session_secret,
                    resign,
                )
            },
            |_| Ok(v1::ResignResponse {}),
        )
        .await
    }

    async fn transfer(
        &self,
        req: Request<v1::TransferRequest>,
    ) -> Result<tonic::Response<v1::TransferResponse>, Status> {
        self.unary(
            req,
            |r| Action::Campaign(&r.election),
            |r| {
                let transfer = Command::Transfer {
                    election: r.election,
                    from: r.from_session_id,
                    to: r.to_session_id,
                };
                let request = on_session(r.from_session_id, r.request_seq);
                Proposal::change(request, r.from_session_secret, transfer)
            },
            |reply| match reply {
                (_, Response::Transferred { token }) => Ok(v1::TransferResponse { token }),
                (_, r) => Err(unexpected(r)),
            },
        )
        .await
    }

    async fn delete(
        &self,
        req: Request<v1::DeleteElectionRequest>,
    ) -> Result<tonic::Response<v1::DeleteElectionResponse>, Status> {
        self.unary(
            req,
            |r| Action::Campaign(&r.election),
            |r| {
                let delete = Command::DeleteElection {
                    election: r.election,
                };
                Proposal::change(None, Vec::new(), delete)
            },
            |reply| match reply {
                (index, Response::Deleted { existed }) => {
                    Ok(v1::DeleteElectionResponse { index, existed })
                }
                (_, r) => Err(unexpected(r)),
            },
        )
        .await
    }

    async fn leader(
        &self,
        req: Request<v1::LeaderRequest>,
    ) -> Result<tonic::Response<v1::LeaderResponse>, Status> {
        self.unary(
            req,
            |r| Action::Observe(&r.election),
            |r| {
                Proposal::read(Command::Leader {
                    election: r.election,
                })
            },
            |reply| match reply {
                (_, Response::LeaderIs(l)) => Ok(v1::LeaderResponse {
                    leader: l.map(leader_to_proto),
                }),
                (_, r) => Err(unexpected(r)),
            },
        )
        .await
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
        let read = Proposal::read(Command::Leader {
            election: election.clone(),
        });
        let (index, current) = match read.ask(self, &who).await? {
            (index, Response::LeaderIs(l)) => (index, l),
            (_, r) => return Err(unexpected(r)),
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
