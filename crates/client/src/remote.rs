//! The `tenure://` backend: gRPC to a tenure cluster.
//!
//! One lazily connected channel per node; each request goes to the node believed to lead,
//! following `not-leader` hints (`tenure-leader-addr`) and moving to the next node when one
//! does not answer, for a bounded time.
//!
//! The URL need name only one member. The set of nodes grows (up to [`NODE_ADDRS_MAX`]) with
//! every address a hint points at and every member the cluster lists (the `Members` call,
//! made before the first request and again once a hint names a node the client did not
//! know or a node stops answering). Host names are resolved by each channel when it
//! connects, so again on every reconnect; with TLS the server's certificate must carry the
//! name (or IP address) the client dialed, as `tenure certs --host NAME` issues them.
//!
//! `discover=false` in the URL's query keeps the client to the addresses the URL names (a
//! client that reaches the cluster through a proxy or load balancer, where the members'
//! own addresses are not reachable): no `Members` call, and hints are followed only to
//! those addresses.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_proto::v1;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::v1::elections_client::ElectionsClient;
use tenure_proto::v1::sessions_client::SessionsClient;
use tenure_proto::LEADER_ADDR_KEY;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::{InterceptedService, Interceptor};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use crate::error::reason;
use crate::session::Session;
use crate::{Error, LeaderEvent, LeaderInfo, Result};

/// Longest wait for one attempt at one node: a dead node on loopback refuses at once; this
/// bounds a node that accepted the request but cannot answer (one without a quorum).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts, so that a cluster between leaders is not hammered.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// Longest pause between attempts to reopen a broken observe stream.
const REOPEN_PAUSE_MAX: Duration = Duration::from_secs(1);
/// TCP connect timeout per channel.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long one request keeps retrying across nodes before its error surfaces.
const REQUEST_BUDGET: Duration = Duration::from_secs(5);
/// Keepalive requests in flight on one stream before sending waits.
const KEEPALIVES_INFLIGHT_MAX: usize = 16;
/// Most node addresses one client keeps: the URL's, those hints point at and those member
/// lists name. A cluster has a handful of members (and a name and an IP address may both
/// stand for one); the cap stops a confused or hostile server from growing the set without
/// end. Past it, new addresses are ignored and the client keeps using those it has.
pub(crate) const NODE_ADDRS_MAX: usize = 64;
/// Longest wait for a member list: it is a hint, never worth holding a request up long.
const MEMBERS_TIMEOUT: Duration = Duration::from_secs(1);
/// Least time between two attempts to learn the member list that both failed to get one.
const MEMBERS_RETRY_PAUSE: Duration = Duration::from_secs(1);

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

/// The cluster's nodes, as seen by one client.
#[derive(Clone)]
pub(crate) struct Nodes {
    /// Every node address known, with its channel. Entries are only ever appended (up to
    /// [`NODE_ADDRS_MAX`]), so an index stays valid for the client's lifetime.
    known: Arc<std::sync::RwLock<Known>>,
    /// How channels to new addresses are made (TLS and bearer token of the URL).
    dialer: Arc<Dialer>,
    /// Whether, and when, to ask for the member list.
    members: Arc<std::sync::Mutex<MembersWanted>>,
    /// `discover=false`: only the URL's addresses are ever used.
    fixed: bool,
    /// Index of the node believed to lead; shared by every clone, so that one task's
    /// redirect helps the others.
    guess: Arc<AtomicUsize>,
    /// Sequence numbers of this client's requests on its sessions (one counter for all of
    /// them, so numbers are unique on each): every attempt of one request carries the same
    /// number, and the cluster applies it at most once (Raft dissertation §6.3).
    next_seq: Arc<AtomicU64>,
    /// The secret of every session this client was granted (and has not revoked): every
    /// request acting for a session presents it.
    secrets: Arc<std::sync::Mutex<std::collections::BTreeMap<u64, Vec<u8>>>>,
}

/// A channel to one node that presents this client's bearer token, if it has one, on
/// every request.
pub(crate) type AuthChannel = InterceptedService<Channel, Bearer>;

/// Adds `authorization: Bearer <token>` to every request (marked sensitive: never printed).
#[derive(Clone)]
pub(crate) struct Bearer(Option<MetadataValue<Ascii>>);

impl Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> std::result::Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// The bearer token in the file named by a URL's `token_file`: its one line, trimmed.
fn read_token(path: &str) -> std::result::Result<MetadataValue<Ascii>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the token file {path:?}: {e}"))?;
    let token = text.trim();
    if token.is_empty() || token.contains(char::is_whitespace) || !token.is_ascii() {
        return Err(format!(
            "the token file {path:?} must hold one token (what `tenure token NAME` printed)"
        ));
    }
    let mut value: MetadataValue<Ascii> = format!("Bearer {token}")
        .parse()
        .map_err(|_| format!("the token in {path:?} is not a valid header value"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The TLS configuration and the bearer token a `tenure://` URL's query asks for.
fn client_tls(
    query: &str,
) -> std::result::Result<(Option<tonic::transport::ClientTlsConfig>, Bearer), String> {
    let (mut ca, mut cert, mut key, mut token_file) = (None, None, None, None);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("query parameter {pair:?} has no value"))?;
        let slot = match name {
            "ca" => &mut ca,
            "cert" => &mut cert,
            "key" => &mut key,
            "token_file" => &mut token_file,
            _ => {
                return Err(format!(
                    "unknown query parameter {name:?} (known: ca, cert, key, token_file, discover)"
                ))
            }
        };
        if slot.is_some() {
            return Err(format!("query parameter {name:?} is given twice"));
        }
        if value.is_empty() {
            return Err(format!("query parameter {name:?} is empty"));
        }
        *slot = Some(value.to_string());
    }
    let read = |what: &str, path: &str| {
        std::fs::read(path).map_err(|e| format!("cannot read the {what} file {path:?}: {e}"))
    };
    let bearer = Bearer(token_file.as_deref().map(read_token).transpose()?);
    let Some(ca) = ca else {
        if cert.is_some() || key.is_some() {
            return Err("cert and key need ca (the cluster's CA certificate) too".into());
        }
        return Ok((None, bearer));
    };
    let mut config = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read("ca", &ca)?));
    match (cert, key) {
        (Some(cert), Some(key)) => {
            config = config.identity(tonic::transport::Identity::from_pem(
                read("cert", &cert)?,
                read("key", &key)?,
            ));
        }
        (None, None) => {}
        _ => return Err("cert and key go together".into()),
    }
    Ok((Some(config), bearer))
}

/// What an attempt's failure says about the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempted {
    /// It definitely did not take effect (not the leader, no leader yet, …): try again.
    Retry,
    /// It may have taken effect (a timeout, a broken connection, `indeterminate`): try
    /// again with the same id to learn which.
    Unknown,
    /// An answer: stop.
    Answer,
}

/// The node addresses a client knows, each with its lazily connected channel.
struct Known {
    addrs: Vec<String>,
    channels: Vec<AuthChannel>,
}

/// Makes the channel to one node address.
struct Dialer {
    tls: Option<tonic::transport::ClientTlsConfig>,
    bearer: Bearer,
}

impl Dialer {
    /// A channel to `addr` (already checked by `url::node_addr`); nothing connects yet. The
    /// channel resolves a host name each time it connects, and with TLS checks that the
    /// server's certificate names the host as written here.
    fn channel(&self, addr: &str) -> std::result::Result<AuthChannel, String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| format!("bad node address {addr:?}: {e}"))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        let endpoint = match &self.tls {
            Some(tls) => endpoint
                .tls_config(tls.clone())
                .map_err(|e| format!("TLS for {addr:?}: {e}"))?,
            None => endpoint,
        };
        Ok(InterceptedService::new(
            endpoint.connect_lazy(),
            self.bearer.clone(),
        ))
    }
}

/// When the member list is worth asking for.
#[derive(Debug)]
struct MembersWanted {
    /// The list may name nodes this client does not know: at the start, after a hint named
    /// an unknown node, after a node stopped answering.
    stale: bool,
    /// The cluster does not serve `Members` (an older server): never ask again.
    unsupported: bool,
    /// When the last attempt failed, so that an unreachable cluster is not asked in a loop.
    failed_at: Option<Instant>,
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nodes")
            .field("addrs", &self.addrs())
            .field("guess", &self.guess())
            .finish_non_exhaustive()
    }
}

impl Nodes {
    /// Channels to `addrs` (`host:port` of each node's client API, checked by
    /// `url::node_addr`); nothing connects yet.
    /// `query` is the URL's query: `ca=FILE` turns TLS on (the cluster's CA certificate),
    /// `cert=FILE&key=FILE` add a client certificate, `token_file=FILE` a bearer token
    /// (the file's one line) sent with every request.
    pub fn new(url: &str, addrs: Vec<String>, query: &str) -> Result<Nodes> {
        let bad = |why: String| Error::InvalidUrl {
            url: crate::redact_url(url),
            why,
        };
        if addrs.is_empty() {
            return Err(bad("no node addresses".into()));
        }
        if addrs.len() > NODE_ADDRS_MAX {
            return Err(bad(format!(
                "{} node addresses; at most {NODE_ADDRS_MAX} (one is enough: the client \
                 learns the others from the cluster)",
                addrs.len()
            )));
        }
        let mut fixed = false;
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("discover", "true")) => fixed = false,
                Some(("discover", "false")) => fixed = true,
                Some(("discover", other)) => {
                    return Err(bad(format!(
                        "query parameter \"discover\" is {other:?}; it is true or false"
                    )))
                }
                _ => rest.push(pair),
            }
        }
        let (tls, bearer) = client_tls(&rest.join("&")).map_err(bad)?;
        let dialer = Dialer { tls, bearer };
        let mut known = Known {
            addrs: Vec::new(),
            channels: Vec::new(),
        };
        for a in addrs {
            if known.addrs.contains(&a) {
                continue;
            }
            known.channels.push(dialer.channel(&a).map_err(bad)?);
            known.addrs.push(a);
        }
        Ok(Nodes {
            known: Arc::new(std::sync::RwLock::new(known)),
            dialer: Arc::new(dialer),
            members: Arc::new(std::sync::Mutex::new(MembersWanted {
                stale: !fixed,
                unsupported: fixed,
                failed_at: None,
            })),
            fixed,
            guess: Arc::new(AtomicUsize::new(0)),
            next_seq: Arc::new(AtomicU64::new(1)),
            secrets: Arc::default(),
        })
    }

    fn read_known(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every node address known, in the order learned.
    pub(crate) fn addrs(&self) -> Vec<String> {
        self.read_known().addrs.clone()
    }

    /// Node `i`'s address and channel.
    fn node(&self, i: usize) -> (String, AuthChannel) {
        let known = self.read_known();
        (known.addrs[i].clone(), known.channels[i].clone())
    }

    /// The index of `addr`, adding it if it is new, valid and under the cap. `None` when
    /// it cannot be used.
    fn index_of(&self, addr: &str) -> Option<usize> {
        let addr = crate::url::node_addr(addr).ok()?;
        if let Some(i) = self.read_known().addrs.iter().position(|a| *a == addr) {
            return Some(i);
        }
        let mut known = self
            .known
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Another task may have added it since the read above.
        if let Some(i) = known.addrs.iter().position(|a| *a == addr) {
            return Some(i);
        }
        if known.addrs.len() >= NODE_ADDRS_MAX || self.fixed {
            return None;
        }
        let channel = self.dialer.channel(&addr).ok()?;
        known.addrs.push(addr);
        known.channels.push(channel);
        Some(known.addrs.len() - 1)
    }

    /// Ask for the member list again before the next attempt.
    fn members_stale(&self) {
        self.members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .stale = true;
    }

    /// If the member list may name nodes this client does not know, ask the node believed
    /// to lead for it (bounded by [`MEMBERS_TIMEOUT`]) and add every client address in it.
    /// A failure changes nothing but the time of the next attempt: the request at hand goes
    /// on with the nodes already known. An older server without `Members` is not asked again.
    async fn learn_members(&self) {
        {
            let wanted = self
                .members
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let recently_failed = wanted
                .failed_at
                .is_some_and(|t| t.elapsed() < MEMBERS_RETRY_PAUSE);
            if !wanted.stale || wanted.unsupported || recently_failed {
                return;
            }
        }
        let (_, channel) = self.node(self.guess());
        let answer = tokio::time::timeout(
            MEMBERS_TIMEOUT,
            ClusterClient::new(channel).members(v1::MembersRequest {}),
        )
        .await;
        let mut wanted = self
            .members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match answer {
            Ok(Ok(list)) => {
                wanted.stale = false;
                wanted.failed_at = None;
                drop(wanted);
                for m in list.into_inner().members {
                    if !m.client_addr.is_empty() {
                        let _ = self.index_of(&m.client_addr);
                    }
                }
            }
            Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => wanted.unsupported = true,
            // Refused for this client: asking again would be refused again.
            Ok(Err(s))
                if matches!(
                    s.code(),
                    tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
                ) =>
            {
                wanted.unsupported = true
            }
            Ok(Err(_)) | Err(_) => wanted.failed_at = Some(Instant::now()),
        }
    }

    /// The secret of `session` (empty if this client was not granted it).
    fn secret(&self, session: u64) -> Vec<u8> {
        self.secrets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&session)
            .cloned()
            .unwrap_or_default()
    }

    /// The next request sequence number.
    fn seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    fn guess(&self) -> usize {
        self.guess.load(Ordering::Relaxed)
    }

    /// Learn from a failed attempt at node `i`: follow a leader hint, or move on to the next
    /// node when `i` did not answer. Returns what the failure says about the request.
    fn note_failure(&self, i: usize, s: &Status) -> Attempted {
        match reason(s) {
            Some("not-leader") => {
                let known = self.read_known().addrs.len();
                let hinted = s
                    .metadata()
                    .get(LEADER_ADDR_KEY)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|a| self.index_of(a));
                if hinted.is_some_and(|j| j >= known) {
                    // A leader this client did not know of: the membership may have more.
                    self.members_stale();
                }
                match hinted {
                    Some(j) if j != i => self.guess.store(j, Ordering::Relaxed),
                    _ => self.advance(i),
                }
                Attempted::Retry
            }
            // No leader yet, a transfer, an overload: the same node will know more soon.
            Some("unavailable") => Attempted::Retry,
            // The node lost track of it (it stopped, or caught up past it by a snapshot).
            Some("indeterminate") => {
                self.advance(i);
                Attempted::Unknown
            }
            Some(_) => Attempted::Answer,
            // Transport errors and timeouts carry no reason: the node is gone or stuck, and
            // may have taken the request before it went. Another node may know of members
            // this client has not heard of.
            None => {
                self.advance(i);
                self.members_stale();
                Attempted::Unknown
            }
        }
    }

    /// Move the guess past `from`, unless another task already moved it.
    fn advance(&self, from: usize) {
        let next = (from + 1) % self.read_known().addrs.len();
        let _ = self
            .guess
            .compare_exchange(from, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Call `f` at the guessed leader until it succeeds, fails with an answer, or the budget
    /// runs out. Only for requests that are safe to repeat: reads, and writes whose every
    /// attempt carries the same request id. If the budget runs out after an attempt that
    /// may have taken effect, the error is [`Error::Indeterminate`], never a definite one.
    async fn call<T, F, Fut>(&self, mut f: F) -> Result<T>
    where
        F: FnMut(AuthChannel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let deadline = Instant::now() + REQUEST_BUDGET;
        let mut maybe_applied = false;
        loop {
            self.learn_members().await;
            let i = self.guess();
            let (addr, channel) = self.node(i);
            let r = match tokio::time::timeout(ATTEMPT_TIMEOUT, f(channel)).await {
                Ok(r) => r.map(tonic::Response::into_inner),
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "no answer from {addr} in {ATTEMPT_TIMEOUT:?}"
                ))),
            };
            match r {
                Ok(v) => return Ok(v),
                Err(s) => {
                    let attempted = self.note_failure(i, &s);
                    maybe_applied |= attempted == Attempted::Unknown;
                    if attempted == Attempted::Answer {
                        return Err(s.into());
                    }
                    if Instant::now() + RETRY_PAUSE >= deadline {
                        let e = Error::from(s);
                        return Err(if maybe_applied {
                            Error::Indeterminate(e.to_string())
                        } else {
                            e
                        });
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    pub async fn grant(&self, ttl: Duration) -> Result<(u64, Duration)> {
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(g.session_id, secret);
        Ok((g.session_id, Duration::from_millis(g.ttl_ms)))
    }

    pub async fn revoke(&self, session: u64) -> Result<()> {
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
            Ok(_) | Err(Error::SessionLost) => {
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
    pub async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64> {
        let mut unanswered_since: Option<Instant> = None;
        let request_seq = self.seq();
        loop {
            self.learn_members().await;
            let i = self.guess();
            let req = v1::CampaignRequest {
                election: election.to_string(),
                session_id: session,
                value: value.to_vec(),
                request_seq,
                session_secret: self.secret(session),
            };
            match ElectionsClient::new(self.node(i).1).campaign(req).await {
                Ok(r) => {
                    crate::note_waiter_wakeup();
                    return Ok(r.into_inner().token);
                }
                Err(s) => {
                    crate::note_waiter_wakeup();
                    let since = *unanswered_since.get_or_insert_with(Instant::now);
                    let attempted = self.note_failure(i, &s);
                    if attempted == Attempted::Answer || since.elapsed() > REQUEST_BUDGET * 4 {
                        return Err(s.into());
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    pub async fn resign(&self, election: &str, session: u64) -> Result<()> {
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
            Ok(_) | Err(Error::NotCandidate(_)) | Err(Error::SessionLost) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn transfer(&self, election: &str, from: u64, to: u64) -> Result<u64> {
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

    pub async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
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
    pub async fn observe(
        &self,
        election: &str,
        tx: mpsc::Sender<Result<LeaderEvent>>,
    ) -> Result<()> {
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

fn info(l: v1::LeaderInfo) -> LeaderInfo {
    LeaderInfo {
        session: l.session_id,
        value: l.value,
        token: l.token,
    }
}

/// Keep `session` alive: one `KeepAlive` stream at the node believed to lead, a request every
/// TTL/4, each acknowledgement extending the lease from that request's send time. Streams that
/// break or go quiet for half a TTL are reopened at another node (following `not-leader`
/// hints); `unknown-session` ends the session and the task.
pub(crate) async fn keepalive_loop(nodes: Nodes, session: Arc<Session>) {
    let every = session.ttl / 4;
    let secret = nodes.secret(session.id);
    let mut seq: u64 = 0;
    loop {
        let i = nodes.guess();
        let (tx, rx) = mpsc::channel::<v1::KeepAliveRequest>(KEEPALIVES_INFLIGHT_MAX);
        // Send times by sequence number, so that an acknowledgement extends the lease from
        // the moment its request left (never from when the answer came back).
        let mut sent: std::collections::BTreeMap<u64, Instant> = Default::default();
        seq += 1;
        sent.insert(seq, Instant::now());
        let _ = tx.try_send(v1::KeepAliveRequest {
            session_id: session.id,
            seq,
            session_secret: secret.clone(),
        });
        let opened = tokio::time::timeout(
            ATTEMPT_TIMEOUT,
            SessionsClient::new(nodes.node(i).1).keep_alive(ReceiverStream::new(rx)),
        )
        .await;
        let mut stream = match opened {
            Ok(Ok(s)) => s.into_inner(),
            Ok(Err(e)) => {
                if reason(&e) == Some("unknown-session") {
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
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // The first tick is immediate: the request above covers it.
        let mut last_ack = Instant::now();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    // A stream whose requests go unanswered for half a TTL is stuck (a node
                    // that lost its quorum): try elsewhere while the lease still holds.
                    if last_ack.elapsed() > session.ttl / 2 {
                        nodes.advance(i);
                        break;
                    }
                    seq += 1;
                    sent.insert(seq, Instant::now());
                    let request = v1::KeepAliveRequest {
                        session_id: session.id,
                        seq,
                        session_secret: secret.clone(),
                    };
                    if tx.send(request).await.is_err() {
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
                    }
                    Ok(None) => {
                        nodes.advance(i);
                        break;
                    }
                    Err(e) => {
                        if reason(&e) == Some("unknown-session") {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a follower answers: `not-leader`, naming the leader's client address.
    fn not_leader(hint: &str) -> Status {
        let mut s = Status::failed_precondition("not the cluster leader");
        s.metadata_mut().insert(
            tenure_proto::ERROR_KEY,
            "not-leader".parse().expect("ascii"),
        );
        s.metadata_mut()
            .insert(LEADER_ADDR_KEY, hint.parse().expect("ascii"));
        s
    }

    fn nodes(addrs: &[&str]) -> Nodes {
        let addrs = addrs.iter().map(|a| a.to_string()).collect();
        Nodes::new("tenure://test", addrs, "").expect("valid nodes")
    }

    /// Behind a proxy: `discover=false` keeps the client to the URL's addresses.
    #[tokio::test]
    async fn without_discovery_only_the_urls_addresses_are_used() {
        let addrs = vec!["127.0.0.1:8001".to_string(), "127.0.0.1:8002".to_string()];
        let n = Nodes::new("tenure://test", addrs.clone(), "discover=false").expect("valid");
        n.note_failure(0, &not_leader("10.0.0.9:8003"));
        assert_eq!(n.addrs(), addrs, "a hint outside the URL was added");
        n.note_failure(0, &not_leader("127.0.0.1:8002"));
        assert_eq!(n.guess(), 1, "a hint inside the URL is followed");
        assert!(
            n.members.lock().unwrap().unsupported,
            "members would be asked"
        );
        assert!(matches!(
            Nodes::new("tenure://test", addrs, "discover=no"),
            Err(Error::InvalidUrl { .. })
        ));
    }

    // Channels are lazy, but making one needs a runtime.
    #[tokio::test]
    async fn a_hint_to_an_address_not_in_the_url_is_followed() {
        let n = nodes(&["127.0.0.1:8001"]);
        assert_eq!(
            n.note_failure(0, &not_leader("localhost:8002")),
            Attempted::Retry
        );
        assert_eq!(n.addrs(), ["127.0.0.1:8001", "localhost:8002"]);
        assert_eq!(n.guess(), 1, "the next attempt goes to the hinted leader");
        // Known addresses are found again, not added twice.
        assert_eq!(
            n.note_failure(1, &not_leader("127.0.0.1:8001")),
            Attempted::Retry
        );
        assert_eq!(n.guess(), 0);
        assert_eq!(
            n.note_failure(0, &not_leader("LOCALHOST:8002")),
            Attempted::Retry
        );
        assert_eq!((n.addrs().len(), n.guess()), (2, 1));
    }

    #[tokio::test]
    async fn malformed_hints_are_ignored_and_the_set_stops_growing_at_its_cap() {
        let n = nodes(&["127.0.0.1:8001", "127.0.0.1:8002"]);
        for bad in ["", "no-port", "a b:1", "127.0.0.1:0"] {
            n.note_failure(0, &not_leader(bad));
            assert_eq!(n.addrs().len(), 2, "{bad:?} was added");
        }
        for port in 0..2 * NODE_ADDRS_MAX {
            n.note_failure(n.guess(), &not_leader(&format!("10.0.0.1:{}", 9000 + port)));
        }
        let addrs = n.addrs();
        assert_eq!(addrs.len(), NODE_ADDRS_MAX);
        assert_eq!(&addrs[..2], ["127.0.0.1:8001", "127.0.0.1:8002"]);
        assert!(n.guess() < NODE_ADDRS_MAX);

        let many: Vec<String> = (0..=NODE_ADDRS_MAX)
            .map(|p| format!("127.0.0.1:{}", 9000 + p))
            .collect();
        let e = Nodes::new("tenure://many", many, "").expect_err("over the cap");
        assert!(e.to_string().contains("at most 64"), "{e}");
    }
}
