//! Administration of a tenure cluster: what `tenure status`, `tenure members`,
//! `tenure transfer-leadership`, `tenure elections` and `tenure sessions` do, as a library.
//!
//! These calls speak the `tenure.v1` gRPC API directly (the `Cluster` service), because they
//! need what the election API does not offer: one answer from *every* member
//! ([`Admin::statuses`]), the cluster's own administration calls, and pages of the applied
//! state. They take the same `tenure://` URL as [`crate::Client::connect`], parsed by the
//! same code, with the same TLS files and bearer token (`?ca=&cert=&key=&token_file=`). The
//! URL may name one node: the others are learned from its member list, and requests that
//! only the Raft leader serves follow `not-leader` answers to it.
//!
//! A node's HTTP port (`/status`, `/metrics`) is read by [`http::NodeHttp`];
//! [`health::assess`] judges the members' statuses as `tenure status` prints them;
//! [`diagnose`] says why a `tenure://` URL's addresses did not answer.

pub mod diagnose;
pub mod health;
pub mod http;

use std::future::Future;
use std::time::{Duration, Instant};

use tenure_proto::v1;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::{Reason, LEADER_ADDR_KEY};
use tonic::Status;

use crate::channel::{LeaderChannel, NodeChannel};
use crate::Error;

/// Longest wait for one call at one node.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a backup's stream may go without a chunk (the first comes once the leader has
/// encoded the state: seconds for a million records on a busy machine).
pub const BACKUP_CHUNK_WAIT: Duration = Duration::from_secs(60);
/// The most a backup's header makes the client reserve before any byte arrived.
const BACKUP_RESERVE_MAX: usize = 1 << 30;
/// How long a membership change may take to be in effect after the leader accepted it.
const LEADER_BUDGET: Duration = Duration::from_secs(8);
/// Pause between looks at a membership or leadership that is still changing.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Why an administration call failed. Each stands for one [`Error`] ([`Failure::error`]),
/// which decides how a program reports it (the CLI's exit code); the messages are kept
/// apart because they are worded for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A bad argument (the URL, a member spec): nothing was contacted.
    Usage(String),
    /// No node answered, or the cluster failed.
    Unreachable(String),
    /// The request may or may not have taken effect.
    Indeterminate(String),
    /// The cluster refused the request with a definite answer.
    Refused(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        match e {
            Error::Indeterminate(m) | Error::SessionEnded(m) => Failure::Indeterminate(m),
            Error::NotLeader { .. } | Error::Unavailable(_) => Failure::Unreachable(e.to_string()),
            Error::InvalidUrl { .. } => Failure::Usage(e.to_string()),
            e => Failure::Refused(e),
        }
    }
}

impl Failure {
    /// The client library's error this failure stands for.
    pub fn error(&self) -> Error {
        match self {
            Failure::Usage(m) => Error::InvalidArgument(m.clone()),
            Failure::Unreachable(m) => Error::Unavailable(m.clone()),
            Failure::Indeterminate(m) => Error::Indeterminate(m.clone()),
            Failure::Refused(e) => e.clone(),
        }
    }
}

/// The cluster of one `tenure://` URL, through the client library's leader-following
/// channel (its URL parsing, TLS files and bearer token).
#[derive(Clone, Debug)]
pub struct Admin {
    nodes: LeaderChannel,
}

/// Every member's own status, as [`Admin::statuses`] gathered it.
#[derive(Clone, Debug)]
pub struct ClusterStatus {
    /// The status of the first node that answered (its member list, the caller's usage).
    pub first: v1::StatusResponse,
    /// The members, as that node knows them.
    pub members: Vec<v1::Member>,
    /// Each member's own answer (in the order of `members`), or why there is none.
    pub statuses: Vec<Result<v1::StatusResponse, String>>,
}

/// A membership change ([`Admin::change_members`]).
#[derive(Clone, Debug)]
pub enum MemberChange {
    /// Add a node (a voter through joint consensus, or a learner): [`parse_member_spec`].
    Add(v1::MemberRequest),
    /// Make a learner a voter.
    Promote(u64),
    /// Remove a voter or a learner.
    Remove(u64),
}

/// A leadership transfer that took effect ([`Admin::transfer_leadership`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The node that led and handed over.
    pub from: u64,
    /// The node that leads now.
    pub leader: u64,
    /// The term it leads in.
    pub term: u64,
}

impl Admin {
    /// Parses a `tenure://` URL (nothing is contacted yet).
    pub fn new(url: &str) -> Result<Admin, Failure> {
        let shown = crate::redact_url(url);
        if !url.starts_with("tenure:") {
            return Err(Failure::Usage(format!(
                "backend {shown}: the operator commands need a tenure:// URL (a tenure cluster)"
            )));
        }
        let nodes = LeaderChannel::from_url(url).map_err(|e| Failure::Usage(e.to_string()))?;
        if nodes.is_restricted() {
            return Err(Failure::Usage(format!(
                "backend {shown}: discover=false: the operator commands talk to every member \
                 directly, so they cannot be kept to the URL's addresses"
            )));
        }
        Ok(Admin { nodes })
    }

    /// An election client over the same channel (fenced keys, elections).
    pub fn client(&self) -> crate::Client {
        crate::Client::with_channel(self.nodes.clone())
    }

    /// The client addresses known so far.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.addrs()
    }

    /// A client of the `Cluster` service at the node `addr`.
    fn cluster_at(&self, addr: &str) -> Result<ClusterClient<NodeChannel>, String> {
        self.nodes
            .node(addr)
            .map(ClusterClient::new)
            .map_err(|e| e.to_string())
    }

    /// `call` at the first node (in `addrs` order) that answers it, with that node's address.
    /// A definite refusal (bad credentials, an invalid argument) is final.
    async fn any<T, F, Fut>(&self, addrs: &[String], call: F) -> Result<(String, T), Failure>
    where
        F: Fn(ClusterClient<NodeChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let mut errors = Vec::new();
        for addr in addrs {
            let client = match self.cluster_at(addr) {
                Ok(c) => c,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            match tokio::time::timeout(CALL_TIMEOUT, call(client)).await {
                Ok(Ok(t)) => return Ok((addr.clone(), t.into_inner())),
                Ok(Err(s)) if is_final(&s) => return Err(Failure::Refused(s.into())),
                Ok(Err(s)) => match self.nodes.tls_mismatch(addr, &s).await {
                    Some(e) => errors.push(e.to_string()),
                    None => errors.push(format!("{addr}: {}", s.message())),
                },
                Err(_) => errors.push(format!("{addr}: no answer within {CALL_TIMEOUT:?}")),
            }
        }
        Err(Failure::Unreachable(format!(
            "no node answered ({})",
            errors.join("; ")
        )))
    }

    /// `call` at the Raft leader, following `not-leader` answers. A call that reached a node
    /// and broke without an answer may have taken effect: that is indeterminate, not retried
    /// ([`LeaderChannel::call_once`]).
    async fn at_leader<T, F, Fut>(&self, call: F) -> Result<T, Failure>
    where
        F: Fn(ClusterClient<NodeChannel>) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let answer = self
            .nodes
            .call_once(|ch| {
                let call = call(ClusterClient::new(ch));
                async move { call.await.map(tonic::Response::new) }
            })
            .await?;
        Ok(answer)
    }

    /// The status of the first node that answers, its members learned.
    pub async fn first_status(&self) -> Result<(String, v1::StatusResponse), Failure> {
        let (addr, s) = self
            .any(&self.addrs(), |mut c| async move {
                c.status(v1::StatusRequest {}).await
            })
            .await?;
        self.nodes.learn(&s.members);
        Ok((addr, s))
    }

    /// Every member's own status, asked of all of them at once, each at its own client
    /// address (the members as the first node that answers knows them).
    pub async fn statuses(&self) -> Result<ClusterStatus, Failure> {
        let (_, first) = self.first_status().await?;
        let members = first.members.clone();
        let asks = members.iter().map(|m| {
            let addr = m.client_addr.clone();
            async move {
                if addr.is_empty() {
                    return Err("no known client address".to_string());
                }
                let mut c = self.cluster_at(&addr)?;
                match tokio::time::timeout(CALL_TIMEOUT, c.status(v1::StatusRequest {})).await {
                    Ok(answer) => answer
                        .map(tonic::Response::into_inner)
                        .map_err(|s| s.message().to_string()),
                    Err(_) => Err(format!("no answer within {CALL_TIMEOUT:?}")),
                }
            }
        });
        let statuses = join_all(asks).await;
        Ok(ClusterStatus {
            first,
            members,
            statuses,
        })
    }

    /// The members, as the first node that answers knows them.
    pub async fn members(&self) -> Result<Vec<v1::Member>, Failure> {
        Ok(self.first_status().await?.1.members)
    }

    /// Makes `change` at the leader, then waits (a bounded time) for the membership that
    /// results, which it returns as the leader reports it.
    pub async fn change_members(&self, change: &MemberChange) -> Result<Vec<v1::Member>, Failure> {
        self.first_status().await?;
        let response = match change {
            MemberChange::Add(req) => {
                self.at_leader(|mut c| {
                    let req = req.clone();
                    async move { c.add_member(req).await }
                })
                .await?
            }
            &MemberChange::Promote(id) => {
                self.at_leader(|mut c| async move {
                    c.promote_member(v1::PromoteMemberRequest { id }).await
                })
                .await?
            }
            &MemberChange::Remove(id) => {
                self.at_leader(|mut c| async move {
                    c.remove_member(v1::MemberRequest {
                        id,
                        ..Default::default()
                    })
                    .await
                })
                .await?
            }
        };
        let want = |members: &[v1::Member]| match change {
            MemberChange::Add(r) => members.iter().any(|m| m.id == r.id && m.voter == r.voter),
            &MemberChange::Promote(id) => members.iter().any(|m| m.id == id && m.voter),
            &MemberChange::Remove(id) => members.iter().all(|m| m.id != id),
        };
        let members = response.into_inner().members;
        if want(&members) {
            return Ok(members);
        }
        // The leader answers once the change is in its log; joint consensus then takes another
        // round. Wait for the membership that results, as the leader reports it.
        let deadline = Instant::now() + LEADER_BUDGET;
        loop {
            let status = self
                .at_leader(|mut c| async move {
                    leader_only(c.status(v1::StatusRequest {}).await?.into_inner())
                })
                .await?;
            if want(&status.members) {
                return Ok(status.members);
            }
            if Instant::now() >= deadline {
                return Err(Failure::Indeterminate(format!(
                    "the leader accepted the change, but the membership did not reach it within \
                     {LEADER_BUDGET:?}"
                )));
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Hands Raft leadership to the voter `to` (`None`: the leader picks the voter whose log
    /// is most caught up), and waits up to `timeout` for a leader in a later term.
    pub async fn transfer_leadership(
        &self,
        to: Option<u64>,
        timeout: Duration,
    ) -> Result<Transfer, Failure> {
        let (from, from_term) = self.hand_over(to).await?;
        // Every member is asked for the new leader, also those the URL does not name.
        self.first_status().await?;
        let to = to.unwrap_or(0);
        if to == from {
            return Ok(Transfer {
                from,
                leader: from,
                term: from_term,
            });
        }
        // Wait for a leader in a later term, as any member reports it.
        let deadline = Instant::now() + timeout;
        loop {
            for addr in &self.addrs() {
                let Ok(mut c) = self.cluster_at(addr) else {
                    continue;
                };
                let Ok(Ok(s)) =
                    tokio::time::timeout(CALL_TIMEOUT, c.status(v1::StatusRequest {})).await
                else {
                    continue;
                };
                let s = s.into_inner();
                if s.role == "leader" && s.term > from_term {
                    if to != 0 && s.id != to {
                        return Err(Failure::Unreachable(format!(
                            "leadership went to node {} in term {}, not to node {to}",
                            s.id, s.term
                        )));
                    }
                    return Ok(Transfer {
                        from,
                        leader: s.id,
                        term: s.term,
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(Failure::Indeterminate(format!(
                    "node {from} accepted the transfer, but no new leader was seen within \
                     {timeout:?}"
                )));
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Asks the Raft leader to hand leadership to the voter `to` (`None`: the voter whose log
    /// is most caught up) and returns as soon as it accepted: the node that leads and hands
    /// over, and its term. Nothing waits for the new leader ([`Admin::transfer_leadership`]
    /// does); a caller that times the hand-over starts its clock here.
    pub async fn hand_over(&self, to: Option<u64>) -> Result<(u64, u64), Failure> {
        if to == Some(0) {
            return Err(Failure::Usage("--to: node ids start at 1".into()));
        }
        let to = to.unwrap_or(0);
        // The node that answers the transfer is the leader that hands over.
        self.at_leader(|mut c| async move {
            let s = c.status(v1::StatusRequest {}).await?;
            // Not the leader (any more): go where it says leadership is.
            let s = leader_only(s.into_inner())?;
            c.transfer_leadership(v1::TransferLeadershipRequest { to })
                .await?;
            Ok((s.id, s.term))
        })
        .await
    }

    /// A backup of the replicated state, from the Raft leader while the cluster serves
    /// (`tenure backup`): its header and the state's bytes, as they came. The call is found
    /// at the leader like any other (a read: retried); the stream is then read for as long
    /// as chunks keep coming, each within [`BACKUP_CHUNK_WAIT`] (a large state takes
    /// seconds to encode before the first).
    pub async fn backup(&self) -> Result<(v1::BackupHeader, Vec<u8>), Failure> {
        let mut stream = self
            .at_leader(|mut c| async move { c.backup(v1::BackupRequest {}).await })
            .await?
            .into_inner();
        let (mut header, mut data) = (None, Vec::new());
        loop {
            let next = tokio::time::timeout(BACKUP_CHUNK_WAIT, stream.message())
                .await
                .map_err(|_| {
                    Failure::Unreachable(format!(
                        "the backup stream stopped: no chunk within {BACKUP_CHUNK_WAIT:?}"
                    ))
                })?
                .map_err(|s| Failure::from(crate::Error::from(s)))?;
            let Some(chunk) = next else { break };
            if let Some(h) = chunk.header {
                // What the header says, up to a bound: the bytes that come are what count
                // (the length is checked against the header afterwards).
                data.reserve(
                    usize::try_from(h.bytes)
                        .unwrap_or(0)
                        .min(BACKUP_RESERVE_MAX),
                );
                header = Some(h);
            }
            data.extend_from_slice(&chunk.data);
        }
        let header =
            header.ok_or_else(|| Failure::Unreachable("the backup stream had no header".into()))?;
        Ok((header, data))
    }

    /// One page of elections (names after `after`, at most `limit`, 0 for the server's
    /// default) from `node`, or from the first node that answers; with the node's address,
    /// so that a walk over every page can stay on one replica's state.
    pub async fn elections_page(
        &self,
        node: Option<&str>,
        after: &str,
        limit: u32,
    ) -> Result<(String, v1::ListElectionsResponse), Failure> {
        let addrs = node.map_or_else(|| self.addrs(), |n| vec![n.to_string()]);
        let req = v1::ListElectionsRequest {
            after: after.to_string(),
            limit,
        };
        self.any(&addrs, |mut c| {
            let req = req.clone();
            async move { c.list_elections(req).await }
        })
        .await
    }

    /// One page of sessions (ids after `after`), as [`Admin::elections_page`].
    pub async fn sessions_page(
        &self,
        node: Option<&str>,
        after: u64,
        limit: u32,
    ) -> Result<(String, v1::ListSessionsResponse), Failure> {
        let addrs = node.map_or_else(|| self.addrs(), |n| vec![n.to_string()]);
        let req = v1::ListSessionsRequest { after, limit };
        self.any(&addrs, |mut c| async move { c.list_sessions(req).await })
            .await
    }
}

/// Whether a refusal is the same at every node (so trying others is pointless).
fn is_final(s: &Status) -> bool {
    matches!(
        Reason::of(s),
        Some(Reason::Unauthenticated | Reason::PermissionDenied | Reason::InvalidArgument)
    ) || s.code() == tonic::Code::Unimplemented
}

/// `s` if it is the leader's status; a `not-leader` answer (with the leader's address)
/// otherwise, so that [`Admin::at_leader`] goes there.
fn leader_only(s: v1::StatusResponse) -> Result<v1::StatusResponse, Status> {
    if s.role == "leader" {
        return Ok(s);
    }
    let mut status = Reason::NotLeader.label(Status::failed_precondition("not the leader"));
    if let Ok(v) = s.leader_addr.parse() {
        status.metadata_mut().insert(LEADER_ADDR_KEY, v);
    }
    Err(status)
}

/// Parses `ID=PEER,CLIENT,HTTP` (a new node's addresses, host:port each) or `ID` (a node of
/// the servers' static `--node` configuration) into an `AddMember` request.
pub fn parse_member_spec(spec: &str, voter: bool) -> Result<v1::MemberRequest, String> {
    let (id, addrs) = match spec.split_once('=') {
        Some((id, addrs)) => (id, Some(addrs)),
        None => (spec, None),
    };
    let id: u64 = match id.parse() {
        Ok(n) if n > 0 => n,
        _ => {
            return Err(format!(
                "{spec:?}: the node id must be a positive integer (ID=PEER,CLIENT,HTTP or ID)"
            ))
        }
    };
    let mut request = v1::MemberRequest {
        id,
        voter,
        ..Default::default()
    };
    if let Some(addrs) = addrs {
        let parts: Vec<&str> = addrs.split(',').collect();
        if parts.len() != 3 {
            return Err(format!(
                "{spec:?}: give PEER,CLIENT,HTTP (three host:port addresses) after {id}="
            ));
        }
        for (name, a) in ["PEER", "CLIENT", "HTTP"].iter().zip(&parts) {
            let port = a.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>()));
            if !matches!(port, Some((h, Ok(p))) if !h.is_empty() && p > 0) {
                return Err(format!("{spec:?}: {name} {a:?} is not host:port"));
            }
        }
        request.peer_addr = parts[0].to_string();
        request.client_addr = parts[1].to_string();
        request.http_addr = parts[2].to_string();
    }
    Ok(request)
}

/// All the futures, run concurrently, their outputs in order.
async fn join_all<T>(futures: impl Iterator<Item = impl Future<Output = T>>) -> Vec<T> {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<T>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_specs_parse_or_say_why_not() {
        let r =
            parse_member_spec("4=10.0.0.4:7001,10.0.0.4:8001,10.0.0.4:9001", true).expect("valid");
        assert_eq!(
            (
                r.id,
                r.voter,
                r.peer_addr.as_str(),
                r.client_addr.as_str(),
                r.http_addr.as_str()
            ),
            (4, true, "10.0.0.4:7001", "10.0.0.4:8001", "10.0.0.4:9001")
        );
        let r = parse_member_spec("5=n5:7001,n5:8001,n5:9001", false).expect("a learner");
        assert_eq!((r.voter, r.http_addr.as_str()), (false, "n5:9001"));
        let r = parse_member_spec("3", true).expect("a static node");
        assert_eq!((r.id, r.peer_addr.as_str()), (3, ""));
        for (bad, why) in [
            ("0", "positive"),
            ("x=a:1,b:2", "positive"),
            ("4=a:1", "PEER,CLIENT"),
            ("4=a:1,b:2", "PEER,CLIENT,HTTP"),
            ("4=a:1,b:2,c:3,d:4", "PEER,CLIENT"),
            ("4=a:1,b", "CLIENT"),
            ("4=a:1,b:2,:3", "HTTP"),
            ("4=a:0,b:2,c:3", "PEER"),
        ] {
            let e = parse_member_spec(bad, true).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn failures_stand_for_errors() {
        assert!(matches!(
            Failure::from(Error::SessionEnded("x".into())),
            Failure::Indeterminate(_)
        ));
        assert_eq!(
            Failure::Indeterminate("x".into()).error(),
            Error::Indeterminate("x".into())
        );
        assert_eq!(
            Failure::Usage("x".into()).error(),
            Error::InvalidArgument("x".into())
        );
    }

    // Channels are made lazily, but making one needs a runtime.
    #[tokio::test]
    async fn urls_are_checked_before_anything_is_contacted() {
        for (url, why) in [
            ("memory:", "tenure://"),
            ("tenure://", "no host:port"),
            ("tenure://host", "no port"),
            ("tenure://h:1?discover=false", "discover"),
            ("tenure://h:1?bogus=1", "unknown query parameter"),
            ("tenure://h:1?cert=a&key=b", "need ca"),
        ] {
            match Admin::new(url) {
                Err(Failure::Usage(m)) => assert!(m.contains(why), "{url}: {m}"),
                Err(other) => panic!("{url}: {other:?}"),
                Ok(_) => panic!("{url}: accepted"),
            }
        }
        assert!(Admin::new("tenure://a:1,b:2").is_ok());
    }
}
