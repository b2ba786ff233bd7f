//! The `tenure://` backend: gRPC to a tenure cluster, through a [`LeaderChannel`].
//!
//! Every request that changes state carries a request id — the next sequence number on its
//! session, or a random nonce for the grant that creates one — and is retried with the same
//! id across nodes and leader changes ([`LeaderChannel::call`]); the cluster applies each id
//! at most once (Raft dissertation §6.3).

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tenure_proto::v1;
use tenure_proto::v1::elections_client::ElectionsClient;
use tenure_proto::v1::fenced_keys_client::FencedKeysClient;
use tenure_proto::v1::sessions_client::SessionsClient;
use tenure_proto::Reason;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{Backend, Capabilities, Fence};
use crate::channel::{Attempted, LeaderChannel, RETRY_PAUSE};
use crate::session::Session;
use crate::{Error, FencedValue, LeaderEvent, LeaderInfo, Result};

/// Longest pause between attempts to reopen a broken observe stream.
const REOPEN_PAUSE_MAX: Duration = Duration::from_secs(1);
/// How long a join waits on the cluster for its campaign to be committed (the call answers
/// only when the candidate leads, so a candidate still queued looks like a timeout).
const QUEUED_WAIT: Duration = Duration::from_millis(200);
/// Keepalive requests in flight on one stream before sending waits.
const KEEPALIVES_INFLIGHT_MAX: usize = 16;

/// A random non-zero nonce for a grant request, so that its retries return the same session.
fn grant_nonce() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        // The standard library's randomly keyed hasher is the random source; the counter
        // keeps two nonces of one process apart even if keys repeat.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let nonce = h.finish();
        if nonce != 0 {
            return nonce;
        }
    }
}

/// One client's view of a tenure cluster: the channel, and what it holds on its sessions.
#[derive(Clone, Debug)]
pub(crate) struct Remote {
    /// The leader-following channel every request goes through.
    nodes: LeaderChannel,
    /// Sequence numbers of this client's requests on its sessions (one counter for all of
    /// them, so numbers are unique on each): every attempt of one request carries the same
    /// number, and the cluster applies it at most once (Raft dissertation §6.3).
    next_seq: Arc<AtomicU64>,
    /// The secret of every session this client was granted (and has not revoked): every
    /// request acting for a session presents it.
    secrets: Arc<Mutex<BTreeMap<u64, Vec<u8>>>>,
}

impl Remote {
    pub fn new(nodes: LeaderChannel) -> Remote {
        Remote {
            nodes,
            next_seq: Arc::new(AtomicU64::new(1)),
            secrets: Arc::default(),
        }
    }

    /// The secret of `session` (empty if this client was not granted it).
    fn secret(&self, session: u64) -> Vec<u8> {
        self.secrets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&session)
            .cloned()
            .unwrap_or_default()
    }

    /// The next request sequence number.
    fn seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnMut(crate::channel::NodeChannel) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        self.nodes.call(f).await
    }

    /// Send a fenced write by the retry rules of [`Backend::fenced_put`]: as a session's own
    /// (stamped with its request id and secret, retried until its outcome is known), or
    /// without a session (tried again only while it cannot have taken effect).
    async fn fenced_write<R: FencedWrite>(
        &self,
        mut req: R,
        session: Option<u64>,
    ) -> Result<R::Answer> {
        match session {
            None => self.nodes.call_once(|ch| req.clone().send(ch)).await,
            Some(session) => {
                req.stamp(session, self.seq(), self.secret(session));
                self.call(|ch| req.clone().send(ch)).await
            }
        }
    }

    async fn open_observe(&self, election: &str) -> Result<tonic::Streaming<v1::LeaderEvent>> {
        // The server answers the call once it has read the current leader through the log, so
        // an error (unknown election, not leader) arrives here, not on the stream.
        self.call(|ch| {
            let req = v1::ObserveRequest {
                election: election.to_string(),
            };
            async move { ElectionsClient::new(ch).observe(req).await }
        })
        .await
    }
}

#[async_trait::async_trait]
impl Backend for Remote {
    fn capabilities(&self) -> Capabilities {
        // The cluster answers only the new leader's blocked campaign; it hands leadership to
        // a named candidate and ends a session
        // bound to its keepalive stream when the client closes that stream.
        Capabilities {
            scheme: "tenure",
            transfer: true,
            wakes_only_next: true,
            fate_sharing: true,
        }
    }

    fn channel(&self) -> Option<&LeaderChannel> {
        Some(&self.nodes)
    }

    fn spawn_keepalive(&self, session: Arc<Session>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(keepalive_loop(self.clone(), session))
    }

    /// The campaign call answers only when the candidate leads; its proposal is committed
    /// first. A short first attempt is enough to know that it leads in the common case, and
    /// `campaign` retries the (idempotent) call anyway.
    async fn join(&self, election: &str, session: u64, value: &[u8]) -> Result<Option<u64>> {
        match tokio::time::timeout(QUEUED_WAIT, self.campaign(election, session, value)).await {
            Ok(r) => r.map(Some),
            Err(_) => Ok(None),
        }
    }

    async fn grant(&self, ttl: Duration) -> Result<(u64, Duration)> {
        let ttl_ms = u64::try_from(ttl.as_millis())
            .map_err(|_| Error::InvalidArgument(format!("ttl {ttl:?} is too long")))?;
        let request_nonce = grant_nonce();
        // The secret is drawn here, not by the server, so that every retry of this grant
        // (same nonce) presents the same one and the session it returns is ours.
        let secret = tenure_proto::new_session_secret().map_err(Error::Backend)?;
        let g = self
            .call(|ch| {
                let session_secret = secret.clone();
                async move {
                    SessionsClient::new(ch)
                        .grant(v1::GrantRequest {
                            ttl_ms,
                            request_nonce,
                            session_secret,
                        })
                        .await
                }
            })
            .await?;
        self.secrets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(g.session_id, secret);
        Ok((g.session_id, Duration::from_millis(g.ttl_ms)))
    }

    async fn revoke(&self, session: u64) -> Result<()> {
        let request_seq = self.seq();
        let secret = self.secret(session);
        let r = self
            .call(|ch| {
                let session_secret = secret.clone();
                async move {
                    SessionsClient::new(ch)
                        .revoke(v1::RevokeRequest {
                            session_id: session,
                            request_seq,
                            session_secret,
                        })
                        .await
                }
            })
            .await;
        // A retry of a revoke that took effect finds the session gone (its results went
        // with it): the same end state.
        match r {
            Ok(_) | Err(Error::SessionLost) | Err(Error::SessionEnded(_)) => {
                self.secrets
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&session);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Join the queue (idempotent: a retried campaign keeps its place) and wait until the
    /// session leads. No timeout on the wait itself: a node that dies breaks the call.
    async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64> {
        let mut unanswered_since: Option<Instant> = None;
        let request_seq = self.seq();
        loop {
            self.nodes.learn_members().await;
            let i = self.nodes.guess();
            let req = v1::CampaignRequest {
                election: election.to_string(),
                session_id: session,
                value: value.to_vec(),
                request_seq,
                session_secret: self.secret(session),
            };
            match ElectionsClient::new(self.nodes.node_at(i).1)
                .campaign(req)
                .await
            {
                Ok(r) => {
                    crate::note_waiter_wakeup();
                    return Ok(r.into_inner().token);
                }
                Err(s) => {
                    crate::note_waiter_wakeup();
                    let addr = self.nodes.node_at(i).0;
                    if let Some(e) = self.nodes.tls_mismatch(&addr, &s).await {
                        return Err(e);
                    }
                    let since = *unanswered_since.get_or_insert_with(Instant::now);
                    let attempted = self.nodes.note_failure(i, &s);
                    if attempted == Attempted::Answer
                        || since.elapsed() > self.nodes.timeouts().request * 4
                    {
                        return Err(s.into());
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    async fn resign(&self, election: &str, session: u64) -> Result<()> {
        let request_seq = self.seq();
        let secret = self.secret(session);
        let r = self
            .call(|ch| {
                let req = v1::ResignRequest {
                    election: election.to_string(),
                    session_id: session,
                    request_seq,
                    session_secret: secret.clone(),
                };
                async move { ElectionsClient::new(ch).resign(req).await }
            })
            .await;
        match r {
            // A retried resign that already took effect, or a session already gone.
            Ok(_)
            | Err(Error::NotCandidate(_))
            | Err(Error::SessionLost)
            | Err(Error::SessionEnded(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn transfer(&self, election: &str, from: u64, to: u64) -> Result<u64> {
        let request_seq = self.seq();
        let secret = self.secret(from);
        let r = self
            .call(|ch| {
                let req = v1::TransferRequest {
                    election: election.to_string(),
                    from_session_id: from,
                    to_session_id: to,
                    request_seq,
                    from_session_secret: secret.clone(),
                };
                async move { ElectionsClient::new(ch).transfer(req).await }
            })
            .await?;
        Ok(r.token)
    }

    async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
        let r = self
            .call(|ch| {
                let req = v1::LeaderRequest {
                    election: election.to_string(),
                };
                async move { ElectionsClient::new(ch).leader(req).await }
            })
            .await?;
        Ok(r.leader.map(info))
    }

    /// Open an observe stream (retrying across nodes), then forward its events to `tx` in
    /// a task that reopens the stream elsewhere when a node fails, skipping events it has
    /// already forwarded (by index). Changes that happen while no stream is open are
    /// summarized by the first event of the next stream (the leader at that time).
    async fn observe(&self, election: &str, tx: mpsc::Sender<Result<LeaderEvent>>) -> Result<()> {
        let first = self.open_observe(election).await?;
        let nodes = self.clone();
        let election = election.to_string();
        tokio::spawn(async move {
            let mut stream = first;
            let mut after = 0u64;
            loop {
                let msg = tokio::select! {
                    m = stream.message() => m,
                    _ = tx.closed() => return,
                };
                if let Ok(Some(ev)) = msg {
                    if ev.index <= after {
                        continue;
                    }
                    after = ev.index;
                    let ev = LeaderEvent {
                        election: ev.election,
                        leader: ev.leader.map(info),
                        index: ev.index,
                    };
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                    continue;
                }
                // The stream broke: reopen it elsewhere, backing off while the cluster
                // stays out of reach so that a long outage costs next to nothing.
                let mut pause = RETRY_PAUSE;
                stream = loop {
                    let opened = tokio::select! {
                        s = nodes.open_observe(&election) => s,
                        _ = tx.closed() => return,
                    };
                    match opened {
                        Ok(s) => break s,
                        Err(e) if e.is_retryable() => {
                            tokio::select! {
                                _ = tokio::time::sleep(pause) => {}
                                _ = tx.closed() => return,
                            }
                            pause = (pause * 2).min(REOPEN_PAUSE_MAX);
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e)).await;
                            return;
                        }
                    }
                };
            }
        });
        Ok(())
    }

    /// Write `value` at `key`, fenced by `election`'s `token`. Without a session the write
    /// has no request id, so it is tried again only while the cluster says it did not take
    /// effect ([`LeaderChannel::call_once`]); with `session` (a leader's own), every attempt
    /// carries the same request id and the write is retried until its outcome is known.
    async fn fenced_put(&self, key: &str, value: &[u8], fence: Fence<'_>) -> Result<u64> {
        let req = v1::PutRequest {
            key: key.to_string(),
            value: value.to_vec(),
            election: fence.election.to_string(),
            token: fence.token,
            ..Default::default()
        };
        Ok(self.fenced_write(req, fence.session).await?.index)
    }

    /// Remove `key`, fenced like [`Backend::fenced_put`] (the same retry rules).
    async fn fenced_delete(&self, key: &str, fence: Fence<'_>) -> Result<bool> {
        let req = v1::DeleteKeyRequest {
            key: key.to_string(),
            election: fence.election.to_string(),
            token: fence.token,
            ..Default::default()
        };
        Ok(self.fenced_write(req, fence.session).await?.existed)
    }

    /// Remove an election with no candidates. Retried freely: a delete that took effect
    /// finds the election gone the second time (`existed` false).
    async fn delete_election(&self, election: &str) -> Result<bool> {
        let r = self
            .call(|ch| {
                let req = v1::DeleteElectionRequest {
                    election: election.to_string(),
                };
                async move { ElectionsClient::new(ch).delete(req).await }
            })
            .await?;
        Ok(r.existed)
    }

    /// The value stored at `key` (a linearizable read at the leader).
    async fn get(&self, key: &str) -> Result<Option<FencedValue>> {
        let r = self
            .call(|ch| {
                let req = v1::GetRequest {
                    key: key.to_string(),
                };
                async move { FencedKeysClient::new(ch).get(req).await }
            })
            .await?;
        Ok(r.value.map(|v| FencedValue {
            value: v.value,
            election: v.election,
            token: v.token,
            index: v.index,
        }))
    }
}

fn info(l: v1::LeaderInfo) -> LeaderInfo {
    LeaderInfo {
        session: l.session_id,
        value: l.value,
        token: l.token,
    }
}

/// Streams a fate-sharing session keeps open at once: the one in use and those it moved
/// away from before a keepalive on a newer one was acknowledged. A stream is left after half
/// a TTL without acknowledgements and the session is given up when its lease runs out, so
/// a handful is the most it can need; past this the session is given up too.
const HELD_STREAMS_MAX: usize = 8;

/// One open `KeepAlive` stream: the sender of its requests (dropping it half-closes the
/// stream) and its answers (dropping them resets it).
type OpenStream = (
    mpsc::Sender<v1::KeepAliveRequest>,
    tonic::Streaming<v1::KeepAliveResponse>,
);

/// Keep `session` alive: one `KeepAlive` stream at the node believed to lead, a request every
/// TTL/4, each acknowledgement extending the lease from that request's send time. Streams that
/// break or go quiet for half a TTL are reopened at another node (following `not-leader`
/// hints); `unknown-session` ends the session and the task.
///
/// A fate-sharing session ([`Session::bound`]) keeps the library's promise
/// (docs/GUARANTEES.md, "Fate-sharing sessions"): every request binds the session to its
/// stream, so no such stream is closed while the session may be believed in. The stream is
/// opened before anything is sent on it (a stream given up while opening has bound nothing);
/// a stream that went quiet is kept open, unread, until a request on a newer stream is
/// acknowledged (then closing it cannot end the session: the binding moved on, or the leader
/// it was made at can no longer commit anything), and when the lease runs out the session is
/// given up (ended here first) before the task returns and its streams close. Streams the
/// server ended are its own business.
pub(crate) async fn keepalive_loop(remote: Remote, session: Arc<Session>) {
    let every = session.ttl / 4;
    let secret = remote.secret(session.id);
    let nodes = &remote.nodes;
    let bind = session.bound;
    let request = |seq: u64| v1::KeepAliveRequest {
        session_id: session.id,
        seq,
        session_secret: secret.clone(),
        bind,
    };
    // Rises across streams: a binding moves only to a request with a higher number.
    let mut seq: u64 = 0;
    let mut held: Vec<OpenStream> = Vec::new();
    loop {
        if bind && (held.len() >= HELD_STREAMS_MAX || lease_ran_out(&session)) {
            // Belief first, then the streams (they close as this task returns).
            session.end();
            return;
        }
        let i = nodes.guess();
        let (tx, rx) = mpsc::channel::<v1::KeepAliveRequest>(KEEPALIVES_INFLIGHT_MAX);
        // Send times by sequence number, so that an acknowledgement extends the lease from
        // the moment its request left (never from when the answer came back).
        let mut sent: std::collections::BTreeMap<u64, Instant> = Default::default();
        if !bind {
            // The first request goes with the call; a bound one waits for the stream to
            // open, so that giving up on the opening closes nothing bound.
            seq += 1;
            sent.insert(seq, Instant::now());
            let _ = tx.try_send(request(seq));
        }
        let opened = tokio::time::timeout(
            nodes.timeouts().attempt,
            SessionsClient::new(nodes.node_at(i).1).keep_alive(ReceiverStream::new(rx)),
        )
        .await;
        let mut stream = match opened {
            Ok(Ok(s)) => s.into_inner(),
            Ok(Err(e)) => {
                if Reason::of(&e) == Some(Reason::UnknownSession) {
                    session.end();
                    return;
                }
                nodes.note_failure(i, &e);
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(_) => {
                nodes.advance(i);
                continue;
            }
        };
        if bind {
            seq += 1;
            sent.insert(seq, Instant::now());
            if tx.send(request(seq)).await.is_err() {
                // The server ended the stream at once.
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // The first tick is immediate: the request above covers it.
        let mut last_ack = Instant::now();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if bind && lease_ran_out(&session) {
                        session.end();
                        return;
                    }
                    // A stream whose requests go unanswered for half a TTL is stuck (a node
                    // that lost its quorum): try elsewhere while the lease still holds.
                    if last_ack.elapsed() > session.ttl / 2 {
                        nodes.advance(i);
                        if bind {
                            // It may hold the binding: it stays open until a newer stream's
                            // request is acknowledged.
                            held.push((tx, stream));
                        }
                        break;
                    }
                    seq += 1;
                    sent.insert(seq, Instant::now());
                    if tx.send(request(seq)).await.is_err() {
                        break;
                    }
                }
                msg = stream.message() => match msg {
                    Ok(Some(ack)) => {
                        let Some(sent_at) = sent.remove(&ack.seq) else { continue };
                        // Older unanswered requests will not be answered on their own now.
                        sent.retain(|s, _| *s > ack.seq);
                        last_ack = Instant::now();
                        session.acked(sent_at, Duration::from_millis(ack.ttl_ms));
                        // A request on this stream was acknowledged: the streams left before
                        // it may close.
                        held.clear();
                    }
                    // The server ended the stream (not the client's close).
                    Ok(None) => {
                        nodes.advance(i);
                        break;
                    }
                    Err(e) => {
                        if Reason::of(&e) == Some(Reason::UnknownSession) {
                            session.end();
                            return;
                        }
                        nodes.note_failure(i, &e);
                        break;
                    }
                },
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Whether `session`'s lease has run out on this process's clock (a fate-sharing session is
/// then given up).
fn lease_ran_out(session: &Session) -> bool {
    Instant::now() >= session.state.borrow().valid_until
}

/// A fenced write of the `FencedKeys` service: stamped with the writing session when it is a
/// session's own, and sent on a channel.
trait FencedWrite: Clone {
    /// The answer's message.
    type Answer;
    /// Mark it as `session`'s request number `seq`, proven by `secret`.
    fn stamp(&mut self, session: u64, seq: u64, secret: Vec<u8>);
    /// Send it on `ch`.
    fn send(
        self,
        ch: crate::channel::NodeChannel,
    ) -> impl std::future::Future<
        Output = std::result::Result<tonic::Response<Self::Answer>, tonic::Status>,
    >;
}

macro_rules! fenced_writes {
    ($($request:ident => $answer:ident by $method:ident;)*) => {$(
        impl FencedWrite for v1::$request {
            type Answer = v1::$answer;
            fn stamp(&mut self, session: u64, seq: u64, secret: Vec<u8>) {
                self.session_id = session;
                self.request_seq = seq;
                self.session_secret = secret;
            }
            async fn send(
                self,
                ch: crate::channel::NodeChannel,
            ) -> std::result::Result<tonic::Response<v1::$answer>, tonic::Status> {
                FencedKeysClient::new(ch).$method(self).await
            }
        }
    )*};
}

fenced_writes! {
    PutRequest => PutResponse by put;
    DeleteKeyRequest => DeleteKeyResponse by delete;
}
