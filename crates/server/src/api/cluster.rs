//! The Cluster service: the node's status and the members, each member's addresses, the
//! admin actions (add, promote, remove a member, move Raft leadership: [`crate::admin`]'s,
//! which the dashboard shares), and the paged lists of elections and sessions.

use tenure_proto::v1;
use tonic::{Request, Status};

use super::{leader_to_proto, Api, Ask, BoxStream, Proposal};
use crate::auth::{Action, Principal};
use crate::driver::{ElectionListing, SessionListing};
use tenure_core::sm::Command;

/// The size of each chunk of a backup's state.
const BACKUP_CHUNK_BYTES: usize = 1 << 20;
/// Chunks encoded ahead of what the client has read.
const BACKUP_CHUNKS_BUFFERED: usize = 4;

#[tonic::async_trait]
impl v1::cluster_server::Cluster for Api {
    type BackupStream = BoxStream<v1::BackupChunk>;

    async fn backup(
        &self,
        req: Request<v1::BackupRequest>,
    ) -> Result<tonic::Response<Self::BackupStream>, Status> {
        let caller = self.administrator(&req)?;
        // A linearizable read first: this node leads at a read index and has applied it, so
        // every write acknowledged before this call is in the image taken next (applying
        // only moves forward on this node).
        Proposal::read(Command::Get {
            key: "tenure-backup".into(),
        })
        .ask(self, caller.principal())
        .await?;
        let image = self
            .driver
            .applied_image(self.timeout)
            .await
            .map_err(|e| self.status(e))?;
        let membership = image.membership().clone();
        let (index, term) = (image.index(), image.term());
        let (cluster_id, generation) = (self.config.cluster_id.clone(), self.config.generation);
        let who = format!("{:?}", caller.principal());
        // The answer starts now; the state is encoded and sent from a task of its own, so
        // that a large state's encoding (about 0.2 µs per record, seconds at a million) does
        // not hold the call's headers back. A client that goes away stops the task.
        let (tx, rx) = tokio::sync::mpsc::channel(BACKUP_CHUNKS_BUFFERED);
        tokio::spawn(async move {
            let encoded = tokio::task::spawn_blocking(move || {
                let data = image.encode().data;
                let sum = crate::restore::sha256_hex(&data);
                (data, sum)
            })
            .await;
            let (data, sha256) = match encoded {
                Ok(x) => x,
                Err(e) => {
                    let _ = tx
                        .send(Err(Status::internal(format!(
                            "encoding the backup failed: {e}"
                        ))))
                        .await;
                    return;
                }
            };
            let taken_unix_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            tracing::info!(index, term, bytes = data.len(), "backup taken for {who}");
            let header = v1::BackupHeader {
                cluster_id,
                generation,
                index,
                term,
                voters: membership.voters.iter().copied().collect(),
                learners: membership.learners.iter().copied().collect(),
                bytes: data.len() as u64,
                sha256,
                taken_unix_ms,
                server_version: crate::metrics::BUILD_VERSION.to_string(),
            };
            let first = v1::BackupChunk {
                header: Some(header),
                data: Vec::new(),
            };
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            for chunk in data.chunks(BACKUP_CHUNK_BYTES) {
                let chunk = v1::BackupChunk {
                    header: None,
                    data: chunk.to_vec(),
                };
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

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
        self.unary(
            req,
            |_| Action::Metrics,
            |r| ElectionsPage {
                after: r.after,
                limit: r.limit as usize,
            },
            |listing| {
                Ok(v1::ListElectionsResponse {
                    elections: listing
                        .page
                        .items
                        .into_iter()
                        .map(|(e, since_index)| v1::ElectionSummary {
                            name: e.name,
                            leader: e.leader.map(leader_to_proto),
                            candidates: e.candidates,
                            since_index,
                        })
                        .collect(),
                    more: listing.page.more,
                    applied_index: listing.applied_index,
                })
            },
        )
        .await
    }

    async fn list_sessions(
        &self,
        req: Request<v1::ListSessionsRequest>,
    ) -> Result<tonic::Response<v1::ListSessionsResponse>, Status> {
        self.unary(
            req,
            |_| Action::Metrics,
            |r| SessionsPage {
                after: r.after,
                limit: r.limit as usize,
            },
            |listing| {
                Ok(v1::ListSessionsResponse {
                    sessions: listing
                        .page
                        .items
                        .into_iter()
                        .map(|(s, remaining_ms)| v1::SessionSummary {
                            id: s.id,
                            ttl_ms: s.info.ttl_ticks.saturating_mul(self.tick_ms),
                            remaining_ms,
                            elections: s.elections,
                        })
                        .collect(),
                    more: listing.page.more,
                    applied_index: listing.applied_index,
                })
            },
        )
        .await
    }
}

/// A page of elections by name (`ListElections`), as this node applied them.
struct ElectionsPage {
    after: String,
    limit: usize,
}

impl Ask for ElectionsPage {
    type Reply = ElectionListing;

    async fn ask(self, api: &Api, _: &Principal) -> Result<ElectionListing, Status> {
        api.driver
            .list_elections(self.after, self.limit, api.timeout)
            .await
            .map_err(|e| api.status(e))
    }
}

/// A page of sessions by id (`ListSessions`), as this node applied them.
struct SessionsPage {
    after: u64,
    limit: usize,
}

impl Ask for SessionsPage {
    type Reply = SessionListing;

    async fn ask(self, api: &Api, _: &Principal) -> Result<SessionListing, Status> {
        api.driver
            .list_sessions(self.after, self.limit, api.timeout)
            .await
            .map_err(|e| api.status(e))
    }
}

impl Api {
    /// The answer to a membership change: the members once it is in effect, or why not.
    fn members_after<T>(
        &self,
        changed: Result<T, crate::admin::AdminError>,
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
            generation: self.config.generation,
        }
    }
}
