//! tenure: leader election with fencing tokens, one API over several backends.
//!
//! A group of replicas uses tenure to pick exactly one of them to do work that must happen
//! once, to replace it safely when it crashes or freezes, and to give every leader a
//! **fencing token** that rises with each change of leader, so that a store can refuse the
//! writes of a leader that was replaced.
//!
//! # Tutorial
//!
//! Connect to a backend by URL. `memory:` is an in-process backend with the cluster's
//! semantics, made for tests (and for this tutorial); `tenure://host1:port,host2:port` talks
//! to a tenure cluster.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::{CampaignOptions, Client};
//!
//! let client = Client::connect("memory:tutorial").await?;
//! let options = CampaignOptions { ttl: Duration::from_secs(2), ..Default::default() };
//!
//! // Campaign: wait until this replica leads "nightly-billing". Behind the scenes a session
//! // (lease) with a 2 s TTL is granted and renewed every TTL/4 by a background task.
//! let leadership = client.campaign("nightly-billing", b"replica-1", options).await?;
//! let token = leadership.token();
//! assert!(leadership.is_valid());
//!
//! // Everyone can ask who leads, and with which token.
//! let leader = client.leader("nightly-billing").await?.expect("someone leads");
//! assert_eq!((leader.token, leader.value.as_slice()), (token, &b"replica-1"[..]));
//! # Ok(())
//! # }
//! ```
//!
//! While leading, check [`Leadership::is_valid`] before each step of work and send the token
//! along with every write, so that the store can reject a leader that was replaced while it
//! was paused. [`Leadership::lost`] resolves the moment leadership can no longer be trusted,
//! which makes it easy to stop work:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tenure::Result<()> {
//! # use std::time::Duration;
//! # use tenure::{CampaignOptions, Client, Lost};
//! # let client = Client::connect("memory:tutorial-2").await?;
//! # let options = CampaignOptions { ttl: Duration::from_secs(2), ..Default::default() };
//! let leadership = client.campaign("nightly-billing", b"replica-1", options).await?;
//! let token = leadership.token();
//! let work = async {
//!     // close_the_books(token).await ...
//!     token
//! };
//! tokio::select! {
//!     done = work => assert_eq!(done, token),
//!     lost = leadership.lost() => println!("stopped: {lost}"),
//! }
//! // Hand over at once instead of letting the lease run out.
//! leadership.resign().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Standbys wait in FIFO order; [`Client::observe`] streams every change of leader:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tenure::Result<()> {
//! # use std::time::Duration;
//! # use tenure::{CampaignOptions, Client};
//! use tokio_stream::StreamExt as _;
//!
//! let client = Client::connect("memory:tutorial-3").await?;
//! let options = CampaignOptions { ttl: Duration::from_secs(2), ..Default::default() };
//! let first = client.campaign("shard-7", b"a", options).await?;
//! let first_token = first.token();
//! let mut changes = client.observe("shard-7").await?;
//! let now = changes.next().await.expect("the current leader comes first")?;
//! assert_eq!(now.leader.map(|l| l.token), Some(first.token()));
//!
//! // A second replica joins the queue; it leads as soon as the first resigns.
//! let standby = client.join("shard-7", b"b", options).await?;
//! first.resign().await?;
//! let second = standby.leadership().await?;
//! let next = changes.next().await.expect("the stream goes on")?;
//! assert_eq!(next.leader.map(|l| l.token), Some(second.token()));
//! assert!(second.token() > first_token);
//! # Ok(())
//! # }
//! ```
//!
//! # Safety of the lease (DESIGN.md rule 4)
//!
//! A [`Leadership`] is valid only until `send time of the last acknowledged keepalive (or of
//! the grant request) + TTL − drift margin`, measured on this process's monotonic clock, with
//! `margin = 2 × ⌈drift × TTL⌉ + 10 ms` (`tenure_core::drift::holder_margin`, the one formula
//! of the product; [`CampaignOptions::drift`] in parts per million, default 1 %). The backend never expires the
//! session before it received the keepalive + TTL, so a holder stops believing before anyone
//! else can be granted the election, as long as clock rates differ by less than the drift
//! bound.
//!
//! # Fate-sharing sessions
//!
//! With [`CampaignOptions::fate_sharing`] on a `tenure://` cluster, the session is bound to
//! its keepalive stream: when this process exits (crash, `kill -9`, OOM), its kernel closes
//! its connections, the cluster's leader sees the client's side end the one carrying the
//! stream, and the session ends at once (`session_released` in the server's log): the next
//! candidate leads within milliseconds instead of a TTL later. A frozen process or a cut
//! network closes nothing and waits the full TTL, as without it. The library keeps its half
//! of the bargain: it never closes a bound stream, or the connection carrying it, while the
//! session may still be believed in (it keeps the stream it leaves when it moves to another
//! node open until a keepalive on the new stream is acknowledged), and it gives a session up
//! for good — [`Lost::SessionEnded`], belief first, then the stream — when its keepalives
//! stop or its lease runs out. Use it only where the client reaches the cluster directly:
//! anything between them that closes or resets connections on its own (a proxy, a load
//! balancer, a NAT's idle timeout) would end the session of a holder that still believes in
//! it. The argument, and what it assumes, is in docs/GUARANTEES.md ("Fate-sharing
//! sessions").
//!
//! # Exact outcomes and retries
//!
//! Every error says whether the request took effect. [`Error::Indeterminate`] — and only it —
//! means "may or may not have": the cluster lost track of the request (the node that took it
//! stopped, or caught up past it by a snapshot), or it timed out after reaching the cluster.
//! Every other error is definite: the request did not take effect and never will
//! ([`Error::NotLeader`] and [`Error::Unavailable`] after the client's retries ran out; a
//! rejection such as [`Error::StaleToken`] is the cluster's answer).
//!
//! On `tenure://` every request that changes state carries a request id — the next sequence
//! number on its session, or a random nonce for the grant that creates one — and the client
//! retries it with the **same** id across nodes and leader changes. The cluster applies each
//! id at most once and answers a retry of an applied request with its original result (Raft
//! dissertation §6.3), so retrying after `Indeterminate` is always safe. The results of a
//! session's requests are forgotten with the session: a retry after the session ended is
//! refused rather than applied, with [`Error::SessionEnded`] — whether an earlier attempt took
//! effect before the session ended is unknown — except that retrying a revoke (or a resign)
//! is reported as success, since the session is gone either way.
//!
//! # Cancellation
//!
//! Dropping a [`Client::campaign`] future, a [`Candidate`] or a [`Leadership`] stops the
//! session's keepalives and revokes the session in the background (best effort, when a tokio
//! runtime is running). A revoke that cannot reach the backend leaves the session to expire
//! within its TTL: the candidacy may then reach the head of the queue for at most that long,
//! but no process holds a `Leadership` for it, and its token is superseded by the next one.
//!
//! # Options in code, and from the environment
//!
//! [`Client::connect`] takes its URL as it is. [`Client::builder`] sets a `tenure://`
//! client's CA, client certificate, bearer token (a file, or the token itself), member
//! discovery and timeouts in code, and [`Client::from_env`] does what the `tenure` command
//! does: the URL from `$TENURE_BACKEND` and, unless the URL names them,
//! the TLS files and token from `$TENURE_CA`, `$TENURE_CERT`, `$TENURE_KEY` and
//! `$TENURE_TOKEN_FILE`.
//!
//! ```no_run
//! # async fn f() -> tenure::Result<()> {
//! use std::time::Duration;
//! use tenure::Client;
//!
//! let client = Client::builder("tenure://10.0.0.1:8001")
//!     .ca("/etc/tenure/ca.pem")
//!     .identity("/etc/tenure/client-billing.pem", "/etc/tenure/client-billing-key.pem")
//!     .request_timeout(Duration::from_secs(10))
//!     .connect()
//!     .await?;
//! let same_from_the_environment = Client::from_env().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Cargo features
//!
//! `tenure://`, `memory:` and the fencing helpers' common parts are always built. Each other
//! backend and store is a feature, all on by default: `etcd`, `postgres` (the backend and
//! `fence::postgres`), `zookeeper` and `sqlite` (`fence::sqlite`). With
//! `default-features = false` and only the features named that are used, the others'
//! dependencies stay out of the build; a URL of a backend left out is refused with
//! [`Error::UnsupportedBackend`], naming the feature. `embedded` (a node in the process),
//! `supervise` (`tenure run`) and `schedule` (`tenure cron`) are off by default.
//!
//! ```toml
//! tenure = { version = "0.1", default-features = false, features = ["postgres"] }
//! ```
//!
//! # Backends
//!
//! | URL | status |
//! |---|---|
//! | `memory:` / `memory:NAME` | in-process; one world per name |
//! | `tenure://h1:p,h2:p,h3:p[?ca=F[&cert=F&key=F]]` | a tenure cluster over gRPC (TLS with `ca`); hosts by IP or name, one member is enough (the others are learned) |
//! | `etcd://[user:pw@]h1:p,h2:p`, `etcds://[user:pw@]h1:p,h2:p?ca=F[&cert=F&key=F]` | an etcd (v3 API) cluster, with etcd's election recipe, TLS with `etcds://`; no [`Leadership::transfer`] |
//! | `postgres://user[:pw]@host:port/db[?sslmode=…&sslrootcert=F]` (or `postgresql://`) | PostgreSQL: a lease row per election, the database clock as arbiter; no [`Leadership::transfer`] |
//! | `zk://[user:pw@]h1:p,h2:p[/chroot]` (or `zookeeper://`) | ZooKeeper's election recipe, digest authentication and owner-only ACLs with `user:pw`; no [`Leadership::transfer`] |
//! | `embedded:CLUSTER[/ID]` | a tenure node running in this process ([`embedded`], the `embedded` feature): the replicas of the application are the cluster |
//!
//! What each security option checks, and what it leaves open, is in the docs of
//! `backend/etcd.rs`, `backend/postgres.rs` and `backend/zk.rs` and in `docs/SECURITY.md` ("Clients"). Every URL parameter a backend does
//! not know is refused ([`Error::InvalidUrl`]), and passwords never appear in an error or a
//! `Debug` output ([`redact_url`]).
//!
//! On etcd a session is an etcd lease (TTLs are rounded up to whole seconds, and the holder
//! believes the TTL etcd grants), a candidacy is a key under `/tenure/elections/<election>/`
//! bound to the lease, the key with the lowest create revision leads, and the fencing token is
//! that key's create revision. On ZooKeeper a session is a ZooKeeper session of its own
//! (session timeout = TTL, as negotiated by the server), a candidacy is an ephemeral
//! sequential znode under `/tenure/elections/<election>/`, the smallest sequence leads, each
//! candidate watches only its predecessor, and the fencing token is the znode's creation zxid;
//! the holder's validity runs from the send time of its last answered request on the session
//! (see the `zk` module's docs for what that relies on, notably on an ensemble).
//! [`Client::supports_transfer`] tells whether a backend can hand
//! leadership to a named candidate.
#![deny(missing_docs)]

pub mod admin;
mod backend;
mod builder;
pub mod channel;
pub mod duration;
pub mod embedded;
pub mod environment;
mod error;
pub mod exit;
pub mod fence;
pub mod lines;
mod redact;
#[cfg(feature = "schedule")]
pub mod schedule;
mod session;
#[cfg(feature = "supervise")]
pub mod supervise;
mod tls;
mod url;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use backend::{Backend, Fence};
pub use builder::ClientBuilder;
pub use channel::Timeouts;
pub use error::{Error, Result};
pub use redact::redact_url;
use session::Session;
/// The bound on clock-rate drift that sizes the lease margin ([`CampaignOptions::drift`]).
pub use tenure_core::drift::DriftPpm;
/// The gRPC API of a tenure cluster (`tenure.v1`), for calls over a
/// [`channel::LeaderChannel`], and its list of error reasons ([`proto::Reason`]).
pub use tenure_proto as proto;

/// Leader events buffered for an observer that does not read.
const OBSERVE_BUFFERED_MAX: usize = 64;

/// Diagnostics: waiter wake-ups in this process, see [`waiter_wakeups`].
static WAITER_WAKEUPS: AtomicU64 = AtomicU64::new(0);

tokio::task_local! {
    /// The wake-up counter of the [`Client`] whose candidate waits in this task.
    static CLIENT_WAKEUPS: Arc<AtomicU64>;
}

/// Diagnostics only: how many times, in this whole process, a waiting candidate was woken
/// by its backend to re-check whether it leads. Counted at one place per backend: `memory:`
/// when a waiter's wait for a change (or the next expiry) completes; `tenure://` when a
/// blocked `Campaign` call returns or its retry loop polls again; etcd and ZooKeeper when
/// the watch on the predecessor fires; PostgreSQL on each notification or timer wake a
/// waiting candidate receives. Monotonic; not a stable API, meant for tests and debugging.
/// [`Client::waiter_wakeups`] counts the same for one client's candidates only.
pub fn waiter_wakeups() -> u64 {
    WAITER_WAKEUPS.load(Ordering::Relaxed)
}

/// Count one waiter wake-up (see [`waiter_wakeups`]).
pub(crate) fn note_waiter_wakeup() {
    WAITER_WAKEUPS.fetch_add(1, Ordering::Relaxed);
    let _ = CLIENT_WAKEUPS.try_with(|c| c.fetch_add(1, Ordering::Relaxed));
}

/// A handle to one backend. Cheap to clone; clones share connections.
#[derive(Clone, Debug)]
pub struct Client {
    /// The backend every call goes through (`backend/`: one file per backend).
    backend: Arc<dyn Backend>,
    /// Diagnostics: wake-ups of this client's (and its clones') waiting candidates.
    wakeups: Arc<AtomicU64>,
}

/// How to campaign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CampaignOptions {
    /// The session's time to live: how long after its last renewal a silent holder keeps
    /// the election. Failover after a crash takes about this long.
    pub ttl: Duration,
    /// The bound on how much clock rates may differ between this process and the backend;
    /// it sizes the drift margin of DESIGN.md rule 4 (default 1 %).
    pub drift: DriftPpm,
    /// Fate-sharing (off by default; `tenure://` only, [`Error::UnsupportedBackend`]
    /// elsewhere): the session shares the fate of its keepalive stream. When this process
    /// exits, its kernel closes the stream and the cluster ends the session at once, so the
    /// next candidate leads within milliseconds instead of after the TTL. A frozen process
    /// or a cut network still waits the full TTL. In return the library never closes that
    /// stream while the session may be believed in, and a session whose keepalives stop
    /// ([`Leadership::stop_keepalives`], dropping, resigning) or whose lease runs out is
    /// given up for good ([`Lost::SessionEnded`]). Only over direct connections: a proxy,
    /// load balancer or NAT that closes connections on its own would end the session of a
    /// live holder (docs/GUARANTEES.md, "Fate-sharing sessions").
    pub fate_sharing: bool,
}

impl Default for CampaignOptions {
    fn default() -> CampaignOptions {
        CampaignOptions {
            ttl: Duration::from_secs(10),
            drift: DriftPpm::DEFAULT,
            fate_sharing: false,
        }
    }
}

/// A fenced key's stored value, as [`Client::get`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedValue {
    /// The value.
    pub value: Vec<u8>,
    /// The election whose token guarded the last accepted write; the key belongs to it.
    pub election: String,
    /// The highest token accepted for the key.
    pub token: u64,
    /// The position (log index) of the write that stored it.
    pub index: u64,
}

/// Who leads an election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The leader's session id (what [`Leadership::transfer`] takes).
    pub session: u64,
    /// The value the leader campaigned with (its address, its name, ...).
    pub value: Vec<u8>,
    /// The leader's fencing token.
    pub token: u64,
}

/// A change of leader, as streamed by [`Client::observe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderEvent {
    /// The election that changed.
    pub election: String,
    /// The new leader; `None` when nobody leads.
    pub leader: Option<LeaderInfo>,
    /// Position of the change in the backend's history; strictly increasing along a stream.
    pub index: u64,
}

/// Why a [`Leadership`] can no longer be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Lost {
    /// The lease ran out on this process's clock: no keepalive was acknowledged in time.
    #[error("the lease ran out before a keepalive was acknowledged")]
    Expired,
    /// The backend said the session is gone (expired or revoked).
    #[error("the session expired or was revoked")]
    SessionEnded,
    /// Another leader (or none) was observed in the election.
    #[error("another leader was observed")]
    Replaced,
}

/// The stream of leader changes of one election; see [`Client::observe`].
#[derive(Debug)]
pub struct Observer {
    rx: mpsc::Receiver<Result<LeaderEvent>>,
}

impl futures_core::Stream for Observer {
    type Item = Result<LeaderEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

/// The error for a backend this build of the crate left out.
#[cfg(not(all(feature = "etcd", feature = "postgres", feature = "zookeeper")))]
fn not_built(url: &str, feature: &str) -> Error {
    let scheme = url.split(':').next().unwrap_or_default().to_string();
    Error::UnsupportedBackend {
        scheme,
        why: format!(
            "this build of the tenure crate leaves the {feature} backend out: enable its \
             `{feature}` feature (on by default)"
        ),
    }
}

impl Client {
    /// Connect to the backend named by `url`: `memory:` (or `memory:NAME`),
    /// `tenure://host:port,host:port,...`, `etcd://host:port,host:port,...` (`etcds://` for
    /// TLS), `postgres://user@host:port/db` or `zk://host:port,host:port,...`, with the
    /// credentials and TLS options of the crate docs' "Backends" table. Nothing is
    /// contacted yet for `tenure://`: nodes are dialed lazily by the first request; for
    /// `etcd://`, `postgres://` and `zk://` the backend is dialed now (and, with a user and
    /// password, etcd and PostgreSQL check them now: [`Error::AuthenticationFailed`]).
    ///
    /// The URL is taken as it is: for TLS files, a token and timeouts set in code, or taken
    /// from `$TENURE_CA`, `$TENURE_CERT`, `$TENURE_KEY` and `$TENURE_TOKEN_FILE` as the
    /// `tenure` command does, see [`Client::builder`] and [`Client::from_env`].
    pub async fn connect(url: &str) -> Result<Client> {
        Client::connect_with(url, Timeouts::default()).await
    }

    /// [`Client::connect`] with `timeouts` for a `tenure://` or `embedded:` URL.
    pub(crate) async fn connect_with(url: &str, timeouts: Timeouts) -> Result<Client> {
        let backend: Arc<dyn Backend> = match url::Target::parse(url)? {
            url::Target::Memory(name) => backend::memory::world(&name),
            url::Target::Cluster(mut target) => {
                target.timeouts = timeouts;
                return Client::over_cluster(url, &target);
            }
            #[cfg(feature = "etcd")]
            url::Target::Etcd { tls, url: parsed } => {
                Arc::new(backend::etcd::Etcd::connect(url, tls, parsed).await?)
            }
            #[cfg(feature = "postgres")]
            url::Target::Postgres(url) => Arc::new(backend::postgres::Pg::connect(&url).await?),
            #[cfg(feature = "zookeeper")]
            url::Target::Zk(parsed) => Arc::new(backend::zk::Zk::connect(url, parsed).await?),
            #[cfg(not(feature = "etcd"))]
            url::Target::Etcd { .. } => return Err(not_built(url, "etcd")),
            #[cfg(not(feature = "postgres"))]
            url::Target::Postgres(_) => return Err(not_built(url, "postgres")),
            #[cfg(not(feature = "zookeeper"))]
            url::Target::Zk(_) => return Err(not_built(url, "zookeeper")),
            url::Target::Embedded(name) => {
                let node_url = embedded::url_of(&name)?;
                let url::Target::Cluster(mut target) = url::Target::parse(&node_url)? else {
                    return Err(Error::Backend(format!(
                        "embedded:{name} names {node_url}, not a tenure:// URL"
                    )));
                };
                target.timeouts = timeouts;
                return Client::over_cluster(&node_url, &target);
            }
        };
        Ok(Client {
            backend,
            wakeups: Arc::default(),
        })
    }

    /// A client of the cluster `target` names; `url` names it in errors.
    pub(crate) fn over_cluster(url: &str, target: &url::ClusterUrl) -> Result<Client> {
        Ok(Client::with_channel(channel::LeaderChannel::new(
            url, target,
        )?))
    }

    /// A client of the tenure cluster that `channel` reaches (say, one
    /// [`channel::LeaderChannel::restricted_to`] chosen members); clones of the channel share
    /// their nodes and their guess of the leader with it.
    pub fn with_channel(channel: channel::LeaderChannel) -> Client {
        Client {
            backend: Arc::new(backend::cluster::Remote::new(channel)),
            wakeups: Arc::default(),
        }
    }

    /// The leader-following channel of a `tenure://` client (`None` for other backends).
    pub fn channel(&self) -> Option<&channel::LeaderChannel> {
        self.backend.channel()
    }

    /// Write `value` at the fenced key `key` with `election`'s fencing `token`; returns the
    /// position (log index) of the write. The write is refused atomically, changing nothing,
    /// with [`Error::StaleToken`] when the token is below the highest the key accepted or
    /// below the election's current token (a newer leader exists), with
    /// [`Error::TokenNotIssued`] for a token the election never handed out, and with
    /// [`Error::WrongElection`] when the key belongs to another election (the one of its
    /// first write).
    ///
    /// On `tenure://` this write carries no request id, so it is retried only while the
    /// cluster says it did not take effect: a write whose outcome is unknown fails with
    /// [`Error::Indeterminate`]. [`Leadership::fenced_put`] writes with the leader's session
    /// and is retried safely until its outcome is known. Every backend keeps fenced keys,
    /// decided by the same rule: the cluster (and `memory:`, embedded nodes) in its
    /// replicated state, PostgreSQL in a table (`tenure_pg_key`, judged in one transaction
    /// with the election's lease), etcd and ZooKeeper under `/tenure/keys` by a
    /// compare-and-set that lands only while the token's candidacy leads (there a token
    /// whose candidacy is gone is refused with [`Error::SessionLost`] even before anyone
    /// replaces it). To fence a store of your own, see [`fence`].
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tenure::Result<()> {
    /// let client = tenure::Client::connect("memory:fenced-put").await?;
    /// let first = client.campaign("books", b"a", Default::default()).await?;
    /// let old_token = first.token();
    /// first.resign().await?;
    /// let second = client.campaign("books", b"b", Default::default()).await?;
    /// client.fenced_put("closed-day", b"2026-12-01", "books", second.token()).await?;
    /// let stored = client.get("closed-day").await?.expect("written");
    /// assert_eq!((stored.value.as_slice(), stored.token), (&b"2026-12-01"[..], second.token()));
    /// // The replaced leader's token is refused, and nothing changes.
    /// let stale = client.fenced_put("closed-day", b"late", "books", old_token).await;
    /// assert!(matches!(stale, Err(tenure::Error::StaleToken { .. })));
    /// assert_eq!(client.get("closed-day").await?, Some(stored));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fenced_put(
        &self,
        key: &str,
        value: &[u8],
        election: &str,
        token: u64,
    ) -> Result<u64> {
        self.backend
            .fenced_put(
                key,
                value,
                Fence {
                    election,
                    token,
                    session: None,
                },
            )
            .await
    }

    /// Remove the fenced key `key`, fenced by `election`'s `token` exactly like
    /// [`Client::fenced_put`]: only the election's current leader may. Returns whether the
    /// key existed.
    pub async fn fenced_delete(&self, key: &str, election: &str, token: u64) -> Result<bool> {
        let fence = Fence {
            election,
            token,
            session: None,
        };
        self.backend.fenced_delete(key, fence).await
    }

    /// Remove `election`, which must have no candidates ([`Error::ElectionInUse`]
    /// otherwise). Its tokens never come back: an election created later under the same
    /// name starts above them. Returns whether it existed. `tenure://` and `memory:` only.
    pub async fn delete_election(&self, election: &str) -> Result<bool> {
        self.backend.delete_election(election).await
    }

    /// The value stored at the fenced key `key`, or `None` if nothing was ever written
    /// there. A linearizable read on every backend.
    pub async fn get(&self, key: &str) -> Result<Option<FencedValue>> {
        self.backend.get(key).await
    }

    /// Campaign in `election` with `value`, and wait until this candidate leads.
    ///
    /// Equivalent to [`Client::join`] followed by [`Candidate::leadership`]. Dropping the
    /// future withdraws the candidacy (see the crate docs, "Cancellation").
    pub async fn campaign(
        &self,
        election: &str,
        value: &[u8],
        options: CampaignOptions,
    ) -> Result<Leadership> {
        self.join(election, value, options)
            .await?
            .leadership()
            .await
    }

    /// Grant a session and join `election`'s queue, without waiting to lead. The returned
    /// [`Candidate`] knows its session id (so that a leader can [`Leadership::transfer`] to
    /// it) and waits for leadership with [`Candidate::leadership`].
    pub async fn join(
        &self,
        election: &str,
        value: &[u8],
        options: CampaignOptions,
    ) -> Result<Candidate> {
        if options.drift > DriftPpm::MAX {
            return Err(Error::InvalidArgument(format!(
                "drift bound {} is above the most a lease can honour, {}",
                options.drift,
                DriftPpm::MAX
            )));
        }
        let margin = tenure_core::drift::holder_margin(
            options.ttl,
            options.drift,
            tenure_core::drift::CLIENT_SCHEDULING_ALLOWANCE,
        );
        if margin >= options.ttl {
            return Err(Error::InvalidArgument(format!(
                "ttl {:?} is not longer than its drift margin {margin:?}",
                options.ttl
            )));
        }
        let capabilities = self.backend.capabilities();
        if options.fate_sharing && !capabilities.fate_sharing {
            return Err(Error::UnsupportedBackend {
                scheme: capabilities.scheme.into(),
                why: "fate-sharing sessions (a session ended when its keepalive stream \
                      closes) need a tenure cluster (tenure://)"
                    .into(),
            });
        }
        let sent = Instant::now();
        let (id, ttl) = self.backend.grant(options.ttl).await?;
        let held = Held {
            client: self.clone(),
            session: Arc::new(Session::new(id, ttl, margin, sent, options.fate_sharing)),
        };
        held.session
            .set_keepalive(self.backend.spawn_keepalive(held.session.clone()));
        // Queue up. The campaign call returns once the session leads, which we do not wait
        // for here: the memory backend queues synchronously, and for the cluster a short
        // first attempt is enough to know that the candidacy was recorded.
        let candidate = Candidate {
            held,
            election: election.to_string(),
            value: value.to_vec(),
            token: None,
        };
        candidate.enqueue().await
    }

    /// Whether [`Leadership::transfer`] works on this backend: `memory:` and `tenure://` hand
    /// leadership to a named candidate; etcd's election recipe cannot (FIFO by create
    /// revision only), nor can the PostgreSQL backend (the lease goes to the oldest live
    /// candidate), nor can ZooKeeper's recipe (the smallest sequence leads), so there
    /// `transfer` fails with [`Error::UnsupportedBackend`].
    pub fn supports_transfer(&self) -> bool {
        self.backend.capabilities().transfer
    }

    /// Whether a change of leader wakes only the next candidate (or, at worst, one more),
    /// rather than every waiting one: true for `tenure://` (the cluster answers only the new
    /// leader's blocked campaign), etcd and ZooKeeper (each candidate watches only its
    /// predecessor); false for PostgreSQL (LISTEN/NOTIFY wakes every listener, DESIGN.md's
    /// "Backends" table) and for `memory:` (every waiter re-checks on every change). The
    /// contract checks this with [`Client::waiter_wakeups`].
    pub fn wakes_only_next(&self) -> bool {
        self.backend.capabilities().wakes_only_next
    }

    /// Diagnostics only: how many times a candidate of this client (or of its clones),
    /// waiting in [`Candidate::leadership`] or [`Client::campaign`], was woken by the backend
    /// to re-check whether it leads (see [`waiter_wakeups`] for where each backend counts).
    pub fn waiter_wakeups(&self) -> u64 {
        self.wakeups.load(Ordering::Relaxed)
    }

    /// Who leads `election` now; `None` when nobody does. Fails with
    /// [`Error::UnknownElection`] if nobody ever campaigned in it.
    pub async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>> {
        self.backend.leader(election).await
    }

    /// Stream every change of `election`'s leader, starting with the current one. Fails with
    /// [`Error::UnknownElection`] if nobody ever campaigned in it.
    ///
    /// On the cluster, a stream whose node fails is reopened at another node; changes that
    /// happen while no stream is open are then summarized by the leader at reopening.
    pub async fn observe(&self, election: &str) -> Result<Observer> {
        let (tx, rx) = mpsc::channel(OBSERVE_BUFFERED_MAX);
        self.backend.observe(election, tx).await?;
        Ok(Observer { rx })
    }
}

/// A session and its keepalives, revoked when dropped.
#[derive(Debug)]
struct Held {
    client: Client,
    session: Arc<Session>,
}

impl Held {
    /// Revoke the session in the background (best effort: without a runtime, or without the
    /// backend, it expires after its TTL).
    fn revoke_in_background(&self) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let id = self.session.id;
            rt.spawn(async move {
                let _ = client.backend.revoke(id).await;
            });
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Asked before stopping: a fate-sharing session ends (here) when it stops.
        let ended = self.session.ended();
        self.session.stop_keepalives();
        if !ended {
            self.revoke_in_background();
        }
    }
}

/// A queued candidate: its session is kept alive, and it waits for its turn to lead.
/// Dropping it revokes the session, which withdraws the candidacy.
#[derive(Debug)]
pub struct Candidate {
    held: Held,
    election: String,
    value: Vec<u8>,
    /// Set when the queueing call already answered that this candidate leads.
    token: Option<u64>,
}

impl Candidate {
    /// Make sure the candidacy is recorded by the backend.
    async fn enqueue(mut self) -> Result<Candidate> {
        let backend = self.held.client.backend.clone();
        self.token = backend
            .join(&self.election, self.held.session.id, &self.value)
            .await?;
        Ok(self)
    }

    /// This candidate's session id, which a leader names in [`Leadership::transfer`].
    pub fn session(&self) -> u64 {
        self.held.session.id
    }

    /// A view of this candidate's session lease (DESIGN rule 4, as for
    /// [`Leadership::valid_until`]: the library renews the session while the candidate
    /// waits, and each acknowledged keepalive moves it forward). It outlives the candidate,
    /// for watching the lease while [`Candidate::leadership`] waits.
    pub fn lease(&self) -> Lease {
        Lease(self.held.session.clone())
    }

    /// Wait until this candidate leads. Fails with [`Error::SessionLost`] if the session
    /// ends first. Dropping the future drops the candidate, which withdraws it.
    pub async fn leadership(self) -> Result<Leadership> {
        let session = self.held.session.clone();
        let token = match self.token {
            Some(t) => t,
            None => {
                let client = self.held.client.clone();
                let wait = client
                    .backend
                    .campaign(&self.election, session.id, &self.value);
                let wait = CLIENT_WAKEUPS.scope(client.wakeups.clone(), wait);
                tokio::select! {
                    r = wait => r?,
                    _ = session.wait_ended() => return Err(Error::SessionLost),
                }
            }
        };
        Ok(Leadership::new(self.held, self.election, token).await)
    }
}

/// A read-only view of a session's lease on this process's clock (see
/// [`Candidate::lease`]).
#[derive(Debug, Clone)]
pub struct Lease(Arc<Session>);

impl Lease {
    /// Until when the session is known alive (DESIGN rule 4).
    pub fn valid_until(&self) -> Instant {
        self.0.state.borrow().valid_until
    }

    /// Whether the backend ended the session.
    pub fn ended(&self) -> bool {
        self.0.ended()
    }
}

/// Leadership of one election, with its fencing token.
///
/// Valid until the lease runs out on this process's clock, the backend ends the session, or
/// another leader is observed (see [`Leadership::lost`]). Dropping it stops the keepalives
/// and revokes the session, which hands the election to the next candidate at once.
#[derive(Debug)]
pub struct Leadership {
    held: Held,
    election: String,
    token: u64,
    /// Set by the watcher task when the election's leader is observed to be someone else.
    replaced: Arc<watch::Sender<bool>>,
    watcher: tokio::task::JoinHandle<()>,
}

impl Leadership {
    async fn new(held: Held, election: String, token: u64) -> Leadership {
        let replaced = Arc::new(watch::channel(false).0);
        let watcher = {
            let client = held.client.clone();
            let election = election.clone();
            let replaced = replaced.clone();
            let me = held.session.id;
            tokio::spawn(async move {
                use tokio_stream::StreamExt as _;
                let Ok(mut changes) = client.observe(&election).await else {
                    return;
                };
                while let Some(ev) = changes.next().await {
                    let Ok(ev) = ev else { return };
                    let still_me = ev
                        .leader
                        .is_some_and(|l| l.session == me && l.token == token);
                    if !still_me {
                        replaced.send_replace(true);
                        return;
                    }
                }
            })
        };
        Leadership {
            held,
            election,
            token,
            replaced,
            watcher,
        }
    }

    /// The fencing token: strictly greater than every earlier leader's of this election.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The election led.
    pub fn election(&self) -> &str {
        &self.election
    }

    /// This leader's session id.
    pub fn session(&self) -> u64 {
        self.held.session.id
    }

    /// Until when this leadership may be trusted, on this process's monotonic clock (send
    /// time of the last acknowledged keepalive + TTL − drift margin). Later renewals move it
    /// forward; it does not account for a session ended or a leader replaced, which
    /// [`Leadership::is_valid`] does.
    pub fn valid_until(&self) -> Instant {
        self.held.session.state.borrow().valid_until
    }

    /// Whether this process may still act as leader now.
    pub fn is_valid(&self) -> bool {
        self.check().is_none()
    }

    fn check(&self) -> Option<Lost> {
        let s = *self.held.session.state.borrow();
        if s.ended {
            Some(Lost::SessionEnded)
        } else if *self.replaced.borrow() {
            Some(Lost::Replaced)
        } else if Instant::now() >= s.valid_until {
            Some(Lost::Expired)
        } else {
            None
        }
    }

    /// Resolves once leadership can no longer be trusted: the lease ran out, the session
    /// ended, or another leader was observed. Cancellation-safe.
    pub async fn lost(&self) -> Lost {
        let mut state = self.held.session.state.subscribe();
        let mut replaced = self.replaced.subscribe();
        loop {
            if let Some(why) = self.check() {
                return why;
            }
            let until = state.borrow_and_update().valid_until;
            replaced.borrow_and_update();
            // Both senders live in `self`, so `changed` cannot fail while we borrow it.
            tokio::select! {
                _ = tokio::time::sleep_until(until.into()) => {}
                _ = state.changed() => {}
                _ = replaced.changed() => {}
            }
        }
    }

    /// Give up leadership: the next candidate leads at once. Ends the session too.
    pub async fn resign(self) -> Result<()> {
        let client = self.held.client.clone();
        let id = self.held.session.id;
        self.held.session.stop_keepalives();
        client.backend.resign(&self.election, id).await?;
        client.backend.revoke(id).await?;
        self.held.session.end();
        Ok(())
    }

    /// Hand leadership to the queued candidate with session `to` (see
    /// [`Candidate::session`]); returns its token. This leadership is then lost
    /// ([`Lost::Replaced`]); the session stays queued behind the new leader until dropped.
    pub async fn transfer(&self, to: u64) -> Result<u64> {
        let from = self.held.session.id;
        let token = self
            .held
            .client
            .backend
            .transfer(&self.election, from, to)
            .await?;
        if to != from {
            self.replaced.send_replace(true);
        }
        Ok(token)
    }

    /// Stop renewing the session, as a frozen or crashed holder would: the lease runs out at
    /// [`Leadership::valid_until`] and the backend expires the session after its TTL. A
    /// fate-sharing session ([`CampaignOptions::fate_sharing`]) is given up instead, as a
    /// crashed holder's would end: this leadership is lost at once ([`Lost::SessionEnded`]),
    /// then its keepalive stream closes and the session is revoked in the background. Meant
    /// for tests and fault drills.
    pub fn stop_keepalives(&self) {
        let give_up = self.held.session.bound && !self.held.session.ended();
        self.held.session.stop_keepalives();
        if give_up {
            self.held.revoke_in_background();
        }
    }

    /// Write `value` at the fenced key `key` with this leadership's election and token, as
    /// [`Client::fenced_put`] does; returns the write's position (log index). On `tenure://`
    /// the write carries a request id on this leader's session, so it is retried across
    /// nodes and leader changes until its outcome is known and applied at most once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tenure::Result<()> {
    /// let client = tenure::Client::connect("memory:leadership-put").await?;
    /// let leader = client.campaign("books", b"a", Default::default()).await?;
    /// leader.fenced_put("closed-day", b"2026-12-01").await?;
    /// assert_eq!(client.get("closed-day").await?.map(|v| v.token), Some(leader.token()));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn fenced_put(&self, key: &str, value: &[u8]) -> Result<u64> {
        self.held
            .client
            .backend
            .fenced_put(key, value, self.fence())
            .await
    }

    /// Remove a fenced key with this leadership's token (retried safely on its session, as
    /// [`Leadership::fenced_put`]); whether it existed.
    pub async fn fenced_delete(&self, key: &str) -> Result<bool> {
        self.held
            .client
            .backend
            .fenced_delete(key, self.fence())
            .await
    }

    /// This leadership's fence: its token, retried safely on its session.
    fn fence(&self) -> Fence<'_> {
        Fence {
            election: &self.election,
            token: self.token,
            session: Some(self.session()),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// The README's Rust example, compiled by `cargo test --doc` so that it stays true.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// A build without the optional backends (`cargo test -p tenure --no-default-features
/// --lib`, which scripts/test.sh runs): their URLs are still parsed, and refused with the
/// feature to turn on, before anything is dialed.
#[cfg(all(
    test,
    not(any(feature = "etcd", feature = "postgres", feature = "zookeeper"))
))]
mod without_backends {
    use super::{Client, Error};

    #[tokio::test]
    async fn a_backend_left_out_of_the_build_is_refused_with_its_feature() {
        for (url, feature) in [
            ("etcd://127.0.0.1:1", "`etcd` feature"),
            ("postgres://app@127.0.0.1:1/db", "`postgres` feature"),
            ("zk://127.0.0.1:1", "`zookeeper` feature"),
        ] {
            let e = Client::connect(url).await.err().expect("refused");
            assert!(
                matches!(e, Error::UnsupportedBackend { .. }),
                "{url}: {e:?}"
            );
            assert!(e.to_string().contains(feature), "{url}: {e}");
        }
        // A bad URL of a left-out backend is still a bad URL.
        let e = Client::connect("etcd://").await.err().expect("refused");
        assert!(matches!(e, Error::InvalidUrl { .. }), "{e:?}");
        // What is always built still works.
        let client = Client::connect("memory:without-backends")
            .await
            .expect("memory:");
        let leader = client
            .campaign("e", b"a", Default::default())
            .await
            .expect("campaign");
        assert_eq!(leader.token(), 1);
    }
}
