//! A gRPC channel to a tenure cluster that follows its leader: [`LeaderChannel`].
//!
//! One lazily connected channel per node; each call goes to the node believed to lead,
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
//! `discover=false` in the URL's query, or [`LeaderChannel::restricted_to`], keeps the
//! channel to chosen addresses (a client that reaches the cluster through a proxy or load
//! balancer, a benchmark pinned to some members): no `Members` call, and hints are followed
//! only to those addresses.
//!
//! The `tenure://` backend of [`crate::Client`] runs every request through one of these;
//! tools that speak the `tenure.v1` API themselves (the operator commands, the benchmark)
//! use it directly, with the generated clients over [`NodeChannel`].

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use tenure_proto::v1;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::{Reason, LEADER_ADDR_KEY};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::{InterceptedService, Interceptor};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use crate::url::ClusterUrl;
use crate::{Error, Result};

/// Longest wait for one attempt at one node, by default: a dead node on loopback refuses at
/// once; this bounds a node that accepted the request but cannot answer (one without a
/// quorum).
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts, so that a cluster between leaders is not hammered.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// TCP (and TLS) connect timeout per node, by default.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long one call keeps retrying across nodes before its error surfaces, by default.
pub(crate) const REQUEST_BUDGET: Duration = Duration::from_secs(5);
/// The longest any of the [`Timeouts`] may be set to.
const TIMEOUT_MAX: Duration = Duration::from_secs(3600);

/// How long a `tenure://` client waits (set with [`crate::ClientBuilder`]). None of them
/// touches safety: a holder's lease is measured from when its keepalive left, whatever
/// these are; they decide only how soon an unanswered call gives up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting to one node, TCP and TLS (default 500 ms).
    pub connect: Duration,
    /// One attempt at one node: a node that accepted a request but cannot answer (one
    /// without a quorum) is given up on after this and the next is tried (default 2 s).
    pub attempt: Duration,
    /// One call, across retries and nodes, before its error surfaces (default 5 s). A call
    /// that may have taken effect when it runs out is [`Error::Indeterminate`].
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: CONNECT_TIMEOUT,
            attempt: ATTEMPT_TIMEOUT,
            request: REQUEST_BUDGET,
        }
    }
}

impl Timeouts {
    /// Each timeout above zero and at most an hour, and an attempt no longer than a request.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        for (name, d) in [
            ("connect", self.connect),
            ("attempt", self.attempt),
            ("request", self.request),
        ] {
            if d.is_zero() || d > TIMEOUT_MAX {
                return Err(format!(
                    "the {name} timeout is {d:?}; it must be above zero and at most an hour"
                ));
            }
        }
        if self.attempt > self.request {
            return Err(format!(
                "the attempt timeout ({:?}) is longer than the request timeout ({:?}), which \
                 bounds every attempt of a call",
                self.attempt, self.request
            ));
        }
        Ok(())
    }
}
/// Most node addresses one channel keeps: the URL's, those hints point at and those member
/// lists name. A cluster has a handful of members (and a name and an IP address may both
/// stand for one); the cap stops a confused or hostile server from growing the set without
/// end. Past it, new addresses are ignored and the channel keeps using those it has.
pub const NODE_ADDRS_MAX: usize = 64;
/// Longest wait for a member list: it is a hint, never worth holding a request up long.
const MEMBERS_TIMEOUT: Duration = Duration::from_secs(1);
/// Least time between two attempts to learn the member list that both failed to get one.
const MEMBERS_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// A channel to one node that presents the URL's bearer token, if it has one, on every
/// request. The generated `tenure.v1` clients take it as their transport.
pub type NodeChannel = InterceptedService<Channel, Bearer>;

/// Adds `authorization: Bearer <token>` to every request (marked sensitive: never printed).
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(***)"
        } else {
            "Bearer(none)"
        })
    }
}

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

/// The bearer token in the file named by a URL's `token_file`, as a sensitive header value.
fn read_token(path: &str) -> std::result::Result<MetadataValue<Ascii>, String> {
    let token = crate::tls::read_token(std::path::Path::new(path))?;
    token_header(&token, &format!("the token in {path:?}"))
}

/// `Bearer TOKEN` as a sensitive header value; `what` names the token in the error.
fn token_header(token: &str, what: &str) -> std::result::Result<MetadataValue<Ascii>, String> {
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("{what} is empty"));
    }
    let mut value: MetadataValue<Ascii> = format!("Bearer {token}")
        .parse()
        .map_err(|_| format!("{what} is not a valid header value"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The TLS configuration and bearer token a parsed `tenure://` URL asks for, its files read.
fn client_tls(
    url: &ClusterUrl,
) -> std::result::Result<(Option<tonic::transport::ClientTlsConfig>, Bearer), String> {
    let read = |what: &str, path: &str| {
        std::fs::read(path).map_err(|e| format!("cannot read the {what} file {path:?}: {e}"))
    };
    let bearer = match &url.token {
        Some(token) => Bearer(Some(token_header(token.expose(), "the token given")?)),
        None => Bearer(url.token_file.as_deref().map(read_token).transpose()?),
    };
    let Some(ca) = &url.ca else {
        return Ok((None, bearer));
    };
    let mut config = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read("ca", ca)?));
    if let Some((cert, key)) = &url.identity {
        config = config.identity(tonic::transport::Identity::from_pem(
            read("cert", cert)?,
            read("key", key)?,
        ));
    }
    Ok((Some(config), bearer))
}

/// What an attempt's failure says about the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempted {
    /// It definitely did not take effect (no leader yet, a transfer, an overload, a node
    /// that is not the leader and names none other): try again after a pause.
    Retry,
    /// It definitely did not take effect, and the node named another as the leader: try
    /// there at once.
    Redirected,
    /// It may have taken effect (a timeout, a broken connection, `indeterminate`): try
    /// again with the same id to learn which.
    Unknown,
    /// An answer: stop.
    Answer,
}

/// The node addresses a channel knows, each with its lazily connected channel.
struct Known {
    addrs: Vec<String>,
    channels: Vec<NodeChannel>,
}

/// Makes the channel to one node address.
struct Dialer {
    tls: Option<tonic::transport::ClientTlsConfig>,
    bearer: Bearer,
    connect_timeout: Duration,
}

impl Dialer {
    /// A channel to `addr` (already checked by `url::node_addr`); nothing connects yet. The
    /// channel resolves a host name each time it connects, and with TLS checks that the
    /// server's certificate names the host as written here.
    fn channel(&self, addr: &str) -> std::result::Result<NodeChannel, String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|e| format!("bad node address {addr:?}: {e}"))?
            .connect_timeout(self.connect_timeout)
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
    /// The list may name nodes this channel does not know: at the start, after a hint named
    /// an unknown node, after a node stopped answering.
    stale: bool,
    /// The cluster does not serve `Members` (an older server), or this channel is kept to
    /// chosen addresses: never ask.
    unsupported: bool,
    /// When the last attempt failed, so that an unreachable cluster is not asked in a loop.
    failed_at: Option<Instant>,
}

/// A leader-following gRPC channel to a tenure cluster. Cheap to clone; clones share the
/// node channels and the guess of who leads, so that one task's redirect helps the others.
///
/// ```no_run
/// # async fn f() -> tenure::Result<()> {
/// use tenure::channel::LeaderChannel;
/// use tenure::proto::v1::{cluster_client::ClusterClient, StatusRequest};
///
/// let cluster = LeaderChannel::from_url("tenure://127.0.0.1:8001?ca=/tmp/certs/ca.pem")?;
/// // At the Raft leader, following `not-leader` hints; a read, so safe to repeat.
/// let status = cluster
///     .call(|ch| async move { ClusterClient::new(ch).status(StatusRequest {}).await })
///     .await?;
/// println!("node {} leads term {}", status.id, status.term);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LeaderChannel {
    /// Every node address known, with its channel. Entries are only ever appended (up to
    /// [`NODE_ADDRS_MAX`]), so an index stays valid for the channel's lifetime.
    known: Arc<RwLock<Known>>,
    /// How channels to new addresses are made (TLS and bearer token of the URL).
    dialer: Arc<Dialer>,
    /// Whether, and when, to ask for the member list.
    members: Arc<Mutex<MembersWanted>>,
    /// Kept to the addresses given (`discover=false`, [`LeaderChannel::restricted_to`]).
    fixed: bool,
    /// Index of the node believed to lead.
    guess: Arc<AtomicUsize>,
    /// How long attempts and calls may take.
    timeouts: Timeouts,
    /// The addresses already probed for TLS after a failed plaintext connection.
    probed: Arc<Mutex<std::collections::BTreeSet<String>>>,
}

impl std::fmt::Debug for LeaderChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderChannel")
            .field("addrs", &self.addrs())
            .field("guess", &self.guess())
            .field("fixed", &self.fixed)
            .finish_non_exhaustive()
    }
}

impl LeaderChannel {
    /// Channels to the nodes a `tenure://` URL names (see the crate docs' "Backends" table
    /// for its query: `ca`, `cert`, `key`, `token_file`, `discover`); nothing connects yet.
    /// Fails with [`Error::InvalidUrl`] for a URL that is not a valid `tenure://` URL, or
    /// whose files cannot be read.
    pub fn from_url(url: &str) -> Result<LeaderChannel> {
        match crate::url::Target::parse(url)? {
            crate::url::Target::Cluster(c) => LeaderChannel::new(url, &c),
            _ => Err(Error::InvalidUrl {
                url: crate::redact_url(url),
                why: "a leader channel needs a tenure:// URL (a tenure cluster)".into(),
            }),
        }
    }

    /// Channels to `target`'s nodes; `url` names it in errors.
    pub(crate) fn new(url: &str, target: &ClusterUrl) -> Result<LeaderChannel> {
        let bad = |why: String| Error::InvalidUrl {
            url: crate::redact_url(url),
            why,
        };
        target.timeouts.check().map_err(bad)?;
        let (tls, bearer) = client_tls(target).map_err(bad)?;
        let dialer = Arc::new(Dialer {
            tls,
            bearer,
            connect_timeout: target.timeouts.connect,
        });
        LeaderChannel::over(dialer, &target.addrs, !target.discover, target.timeouts).map_err(bad)
    }

    /// Channels to `addrs` (checked, deduplicated) made by `dialer`.
    fn over(
        dialer: Arc<Dialer>,
        addrs: &[String],
        fixed: bool,
        timeouts: Timeouts,
    ) -> std::result::Result<LeaderChannel, String> {
        if addrs.is_empty() {
            return Err("no node addresses".into());
        }
        if addrs.len() > NODE_ADDRS_MAX {
            return Err(format!(
                "{} node addresses; at most {NODE_ADDRS_MAX} (one is enough: the client \
                 learns the others from the cluster)",
                addrs.len()
            ));
        }
        let mut known = Known {
            addrs: Vec::new(),
            channels: Vec::new(),
        };
        for a in addrs {
            let a = crate::url::node_addr(a)?;
            if known.addrs.contains(&a) {
                continue;
            }
            known.channels.push(dialer.channel(&a)?);
            known.addrs.push(a);
        }
        Ok(LeaderChannel {
            known: Arc::new(RwLock::new(known)),
            dialer,
            members: Arc::new(Mutex::new(MembersWanted {
                stale: !fixed,
                unsupported: fixed,
                failed_at: None,
            })),
            fixed,
            guess: Arc::new(AtomicUsize::new(0)),
            timeouts,
            probed: Arc::default(),
        })
    }

    /// A channel with the same TLS files and bearer token, kept to `members` (`host:port`
    /// of their client API): no member list is asked for, and `not-leader` hints are
    /// followed only to these addresses, so a call the leader must serve fails
    /// ([`Error::NotLeader`]) once its budget runs out if none of them leads. Fails with
    /// [`Error::InvalidArgument`] for an empty list or an address that is not `HOST:PORT`.
    pub fn restricted_to<S: AsRef<str>>(&self, members: &[S]) -> Result<LeaderChannel> {
        let addrs: Vec<String> = members.iter().map(|m| m.as_ref().to_string()).collect();
        LeaderChannel::over(self.dialer.clone(), &addrs, true, self.timeouts)
            .map_err(|why| Error::InvalidArgument(format!("restricted_to: {why}")))
    }

    fn read_known(&self) -> RwLockReadGuard<'_, Known> {
        self.known.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every node address known, in the order learned.
    pub fn addrs(&self) -> Vec<String> {
        self.read_known().addrs.clone()
    }

    /// Whether this channel is kept to the addresses it was given.
    pub fn is_restricted(&self) -> bool {
        self.fixed
    }

    /// The channel to the node at `addr` (`HOST:PORT` of its client API), for a call that
    /// must reach that member and no other (its own status, say). A known address reuses
    /// its channel; another one gets a new channel, which this `LeaderChannel` does not
    /// keep. Fails with [`Error::InvalidArgument`] for an address that is not `HOST:PORT`.
    pub fn node(&self, addr: &str) -> Result<NodeChannel> {
        let addr = crate::url::node_addr(addr).map_err(Error::InvalidArgument)?;
        if let Some(i) = self.read_known().addrs.iter().position(|a| *a == addr) {
            return Ok(self.node_at(i).1);
        }
        self.dialer.channel(&addr).map_err(Error::InvalidArgument)
    }

    /// Node `i`'s address and channel.
    pub(crate) fn node_at(&self, i: usize) -> (String, NodeChannel) {
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
        let mut known = self.known.write().unwrap_or_else(PoisonError::into_inner);
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

    /// Add the client addresses of `members` (a member list or status answer the caller
    /// got), as the channel does with the lists it asks for itself. Ignored when the channel
    /// is restricted, and past [`NODE_ADDRS_MAX`].
    pub fn learn(&self, members: &[v1::Member]) {
        for m in members {
            if !m.client_addr.is_empty() {
                let _ = self.index_of(&m.client_addr);
            }
        }
    }

    /// Ask for the member list again before the next attempt.
    fn members_stale(&self) {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stale = true;
    }

    /// If the member list may name nodes this channel does not know, ask the node believed
    /// to lead for it (bounded by [`MEMBERS_TIMEOUT`]) and add every client address in it.
    /// A failure changes nothing but the time of the next attempt: the request at hand goes
    /// on with the nodes already known. An older server without `Members` is not asked again.
    pub(crate) async fn learn_members(&self) {
        {
            let wanted = self.members.lock().unwrap_or_else(PoisonError::into_inner);
            let recently_failed = wanted
                .failed_at
                .is_some_and(|t| t.elapsed() < MEMBERS_RETRY_PAUSE);
            if !wanted.stale || wanted.unsupported || recently_failed {
                return;
            }
        }
        let (_, channel) = self.node_at(self.guess());
        let answer = tokio::time::timeout(
            MEMBERS_TIMEOUT,
            ClusterClient::new(channel).members(v1::MembersRequest {}),
        )
        .await;
        let mut wanted = self.members.lock().unwrap_or_else(PoisonError::into_inner);
        match answer {
            Ok(Ok(list)) => {
                wanted.stale = false;
                wanted.failed_at = None;
                drop(wanted);
                self.learn(&list.into_inner().members);
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

    /// How long this channel's connections, attempts and calls may take.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// The index of the node believed to lead.
    pub(crate) fn guess(&self) -> usize {
        self.guess.load(Ordering::Relaxed)
    }

    /// Learn from a failed attempt at node `i`: follow a leader hint, or move on to the next
    /// node when `i` did not answer. Returns what the failure says about the request.
    pub(crate) fn note_failure(&self, i: usize, s: &Status) -> Attempted {
        match Reason::of(s) {
            Some(Reason::NotLeader) => {
                let known = self.read_known().addrs.len();
                let hinted = s
                    .metadata()
                    .get(LEADER_ADDR_KEY)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|a| self.index_of(a));
                if hinted.is_some_and(|j| j >= known) {
                    // A leader this channel did not know of: the membership may have more.
                    self.members_stale();
                }
                match hinted {
                    Some(j) if j != i => {
                        self.guess.store(j, Ordering::Relaxed);
                        Attempted::Redirected
                    }
                    _ => {
                        self.advance(i);
                        Attempted::Retry
                    }
                }
            }
            // No leader yet, a transfer, an overload: the same node will know more soon.
            Some(Reason::Unavailable) => Attempted::Retry,
            // The node lost track of it (it stopped, or caught up past it by a snapshot).
            Some(Reason::Indeterminate) => {
                self.advance(i);
                Attempted::Unknown
            }
            Some(_) => Attempted::Answer,
            // A status without a reason we know: an answer of this node that is not ours to
            // reinterpret (unimplemented, refused by a proxy) when it has a definite code.
            None if is_definite_code(s.code()) => Attempted::Answer,
            // Transport errors and timeouts carry no reason: the node is gone or stuck, and
            // may have taken the request before it went. Another node may know of members
            // this channel has not heard of.
            None => {
                self.advance(i);
                self.members_stale();
                Attempted::Unknown
            }
        }
    }

    /// A plaintext channel whose connection failed without an answer of ours: if that node
    /// speaks TLS, the definite error that says so (the request never reached it, so
    /// nothing took effect), instead of retrying until the budget runs out.
    ///
    /// The reverse too: a TLS channel whose node answered the handshake with bytes that are
    /// not TLS (rustls: a corrupt message of type `InvalidContentType`) does not speak TLS
    /// there, and the handshake failed before any request was sent.
    pub(crate) async fn tls_mismatch(&self, addr: &str, s: &Status) -> Option<Error> {
        if self.dialer.tls.is_some() {
            return s.message().contains("InvalidContentType").then(|| {
                Error::Tls(format!(
                    "{addr} does not speak TLS (it answered the TLS handshake with something \
                     else): a node started without --tls-dir serves plaintext on loopback only \
                     (drop ca, cert and key from the URL there), and a node's HTTP or peer port \
                     is not its client port"
                ))
            });
        }
        // A failure of the connection itself (no reason of ours, no definite code): the
        // node may speak TLS. Each address is probed once per channel: a node that answered
        // the probe in plaintext once is not asked again, so a node that is merely down or
        // frozen costs at most one probe.
        if Reason::of(s).is_some() || is_definite_code(s.code()) {
            return None;
        }
        if !self
            .probed
            .lock()
            .expect("no panics")
            .insert(addr.to_string())
        {
            return None;
        }
        crate::tls::speaks_tls(addr)
            .await
            .then(|| Error::Tls(crate::tls::plaintext_to_tls(addr)))
    }

    /// Move the guess past `from`, unless another task already moved it.
    pub(crate) fn advance(&self, from: usize) {
        let next = (from + 1) % self.read_known().addrs.len();
        let _ = self
            .guess
            .compare_exchange(from, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Call `f` at the node believed to lead until it succeeds, fails with an answer, or
    /// the budget (5 s) runs out; `f` gets the channel of the node to try. Only for requests
    /// that are safe to repeat: reads, and writes whose every attempt carries the same
    /// request id. If the budget runs out after an attempt that may have taken effect, the
    /// error is [`Error::Indeterminate`], never a definite one.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnMut(NodeChannel) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        self.attempts(f, true).await
    }

    /// Like [`LeaderChannel::call`], for a request that must not be repeated once it may
    /// have taken effect (no request id: an administration call, a fenced write without a
    /// session): it follows `not-leader` hints and waits out `unavailable`, both of which
    /// say the request did not take effect, but the first attempt whose outcome is unknown
    /// (a broken connection, a timeout, `indeterminate`) ends the call with
    /// [`Error::Indeterminate`].
    pub async fn call_once<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnMut(NodeChannel) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        self.attempts(f, false).await
    }

    async fn attempts<T, F, Fut>(&self, mut f: F, repeatable: bool) -> Result<T>
    where
        F: FnMut(NodeChannel) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let Timeouts {
            attempt, request, ..
        } = self.timeouts;
        let deadline = Instant::now() + request;
        let mut maybe_applied = false;
        let mut redirects = 0;
        loop {
            self.learn_members().await;
            let i = self.guess();
            let (addr, channel) = self.node_at(i);
            let r = match tokio::time::timeout(attempt, f(channel)).await {
                Ok(r) => r.map(tonic::Response::into_inner),
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "no answer from {addr} in {attempt:?}"
                ))),
            };
            let s = match r {
                Ok(v) => return Ok(v),
                Err(s) => s,
            };
            if let Some(e) = self.tls_mismatch(&addr, &s).await {
                return Err(e);
            }
            let attempted = self.note_failure(i, &s);
            if attempted == Attempted::Answer {
                return Err(s.into());
            }
            maybe_applied |= attempted == Attempted::Unknown;
            if maybe_applied && !repeatable {
                return Err(Error::Indeterminate(format!("{addr}: {}", Error::from(s))));
            }
            if Instant::now() + RETRY_PAUSE >= deadline {
                let e = Error::from(s);
                return Err(if maybe_applied {
                    Error::Indeterminate(e.to_string())
                } else {
                    e
                });
            }
            // A hint is followed at once, a few times in a row (stale nodes may point along a
            // chain, or at each other during an election); anything else waits a little.
            if attempted == Attempted::Redirected && redirects < REDIRECTS_AT_ONCE {
                redirects += 1;
                continue;
            }
            redirects = 0;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

/// How many `not-leader` hints in a row a request follows without pausing.
const REDIRECTS_AT_ONCE: u32 = 3;

/// Whether a gRPC code without a tenure reason is an answer rather than a lost request:
/// the server (or a proxy) looked at the request and refused it.
fn is_definite_code(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unimplemented
            | tonic::Code::InvalidArgument
            | tonic::Code::PermissionDenied
            | tonic::Code::Unauthenticated
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a follower answers: `not-leader`, naming the leader's client address.
    fn not_leader(hint: &str) -> Status {
        let mut s = Reason::NotLeader.label(Status::failed_precondition("not the cluster leader"));
        s.metadata_mut()
            .insert(LEADER_ADDR_KEY, hint.parse().expect("ascii"));
        s
    }

    fn channel(addrs: &[&str], query: &str) -> Result<LeaderChannel> {
        LeaderChannel::from_url(&format!("tenure://{}?{query}", addrs.join(",")))
    }

    /// Behind a proxy: `discover=false` keeps the channel to the URL's addresses.
    #[tokio::test]
    async fn without_discovery_only_the_urls_addresses_are_used() {
        let addrs = ["127.0.0.1:8001", "127.0.0.1:8002"];
        let n = channel(&addrs, "discover=false").expect("valid");
        n.note_failure(0, &not_leader("10.0.0.9:8003"));
        assert_eq!(n.addrs(), addrs, "a hint outside the URL was added");
        n.note_failure(0, &not_leader("127.0.0.1:8002"));
        assert_eq!(n.guess(), 1, "a hint inside the URL is followed");
        assert!(
            n.members.lock().unwrap().unsupported,
            "members would be asked"
        );
        assert!(matches!(
            channel(&addrs, "discover=no"),
            Err(Error::InvalidUrl { .. })
        ));
    }

    /// Restricted to chosen members: the same, whatever the URL said.
    #[tokio::test]
    async fn a_restricted_channel_keeps_to_its_members() {
        let all = channel(&["127.0.0.1:8001"], "").expect("valid");
        let pinned = all
            .restricted_to(&["127.0.0.1:8002", "127.0.0.1:8003"])
            .expect("valid members");
        assert!(pinned.is_restricted() && !all.is_restricted());
        pinned.note_failure(0, &not_leader("127.0.0.1:8001"));
        assert_eq!(pinned.addrs(), ["127.0.0.1:8002", "127.0.0.1:8003"]);
        assert_eq!(pinned.guess(), 1, "a miss moves on inside the set");
        assert_eq!(all.addrs(), ["127.0.0.1:8001"], "the original is untouched");
        for bad in [&[][..], &["no-port"][..]] {
            assert!(matches!(
                all.restricted_to(bad),
                Err(Error::InvalidArgument(_))
            ));
        }
    }

    // Channels are lazy, but making one needs a runtime.
    #[tokio::test]
    async fn a_hint_to_an_address_not_in_the_url_is_followed() {
        let n = channel(&["127.0.0.1:8001"], "").expect("valid");
        assert_eq!(
            n.note_failure(0, &not_leader("localhost:8002")),
            Attempted::Redirected
        );
        assert_eq!(n.addrs(), ["127.0.0.1:8001", "localhost:8002"]);
        assert_eq!(n.guess(), 1, "the next attempt goes to the hinted leader");
        // Known addresses are found again, not added twice.
        assert_eq!(
            n.note_failure(1, &not_leader("127.0.0.1:8001")),
            Attempted::Redirected
        );
        assert_eq!(n.guess(), 0);
        assert_eq!(
            n.note_failure(0, &not_leader("LOCALHOST:8002")),
            Attempted::Redirected
        );
        assert_eq!((n.addrs().len(), n.guess()), (2, 1));
        // A node that names itself (or nobody) is no redirect: the next try waits a little.
        assert_eq!(
            n.note_failure(1, &not_leader("localhost:8002")),
            Attempted::Retry
        );
    }

    #[tokio::test]
    async fn malformed_hints_are_ignored_and_the_set_stops_growing_at_its_cap() {
        let n = channel(&["127.0.0.1:8001", "127.0.0.1:8002"], "").expect("valid");
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
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let e = channel(&many, "").expect_err("over the cap");
        assert!(e.to_string().contains("at most 64"), "{e}");
    }

    #[tokio::test]
    async fn an_unknown_outcome_ends_a_call_that_must_not_repeat() {
        // Nothing listens on port 9: every attempt breaks without an answer.
        let n = channel(&["127.0.0.1:9"], "discover=false").expect("valid");
        let attempts = std::sync::atomic::AtomicUsize::new(0);
        let r: Result<v1::StatusResponse> = n
            .call_once(|ch| {
                attempts.fetch_add(1, Ordering::Relaxed);
                async move { ClusterClient::new(ch).status(v1::StatusRequest {}).await }
            })
            .await;
        assert!(matches!(r, Err(Error::Indeterminate(_))), "{r:?}");
        assert_eq!(attempts.load(Ordering::Relaxed), 1, "repeated");
    }
}
