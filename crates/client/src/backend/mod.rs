//! The one interface every backend implements: [`Backend`]. A [`crate::Client`] holds one
//! behind an `Arc<dyn Backend>`, and every public call of the crate goes through it; each
//! backend is one file here.
//!
//! The trait is async through `async-trait` (boxed, `Send` futures): the client needs a
//! trait object (the backend is chosen at run time, from a URL), which native `async fn` in
//! traits does not give, and the futures must be `Send` because candidates, keepalives and
//! revokes run in spawned tasks. One allocation per call is nothing next to a network round
//! trip.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::channel::LeaderChannel;
use crate::session::Session;
use crate::{Error, FencedValue, LeaderEvent, LeaderInfo, Result};

pub(crate) mod cluster;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(any(feature = "etcd", feature = "zookeeper", feature = "postgres"))]
pub(crate) mod kv;
pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "zookeeper")]
pub(crate) mod zk;

/// What a backend can do beyond the calls every backend serves, and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// The URL scheme, for errors.
    pub scheme: &'static str,
    /// Whether [`Backend::transfer`] hands leadership to a named candidate.
    pub transfer: bool,
    /// Whether a change of leader wakes only the next candidate (see
    /// [`crate::Client::wakes_only_next`]).
    pub wakes_only_next: bool,
    /// Whether sessions may share the fate of their keepalive stream
    /// ([`crate::CampaignOptions::fate_sharing`]).
    pub fate_sharing: bool,
}

impl Capabilities {
    /// A recipe over an engine's own primitives: a queue of candidates, no hand-over to a
    /// named one; `wakes_only_next` if a change wakes only the next.
    #[cfg(any(feature = "etcd", feature = "zookeeper", feature = "postgres"))]
    pub const fn recipe(scheme: &'static str, wakes_only_next: bool) -> Capabilities {
        Capabilities {
            scheme,
            transfer: false,
            wakes_only_next,
            fate_sharing: false,
        }
    }
}

/// Who writes a fenced key: `election`'s `token`, and `session` when the writer is that
/// leadership's own holder, whose request ids make retries safe.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fence<'a> {
    pub election: &'a str,
    pub token: u64,
    pub session: Option<u64>,
}

/// Sessions, elections and (where the backend has them) fenced keys, as one backend serves
/// them. Every method is a definite answer, a typed failure, or [`Error::Indeterminate`].
#[async_trait::async_trait]
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// What this backend can do beyond the calls every backend serves.
    fn capabilities(&self) -> Capabilities;

    /// The leader-following channel, for a `tenure://` backend.
    fn channel(&self) -> Option<&LeaderChannel> {
        None
    }

    /// Grant a session asking for `ttl`; returns its id and the TTL granted.
    async fn grant(&self, ttl: Duration) -> Result<(u64, Duration)>;

    /// Start the task that keeps `session` alive, extending its lease on every
    /// acknowledgement and ending it when the backend says it is gone.
    fn spawn_keepalive(&self, session: Arc<Session>) -> tokio::task::JoinHandle<()>;

    /// End `session` and everything bound to it. A session already gone is success.
    async fn revoke(&self, session: u64) -> Result<()>;

    /// Record the candidacy of `session` in `election` without waiting to lead; the token
    /// when the backend already says that it leads.
    async fn join(&self, election: &str, session: u64, value: &[u8]) -> Result<Option<u64>>;

    /// Record the candidacy (idempotent: a retry keeps its place) and wait until it leads;
    /// returns its fencing token.
    async fn campaign(&self, election: &str, session: u64, value: &[u8]) -> Result<u64>;

    /// Leave `election`'s queue; a session that is not (or no longer) queued is success.
    async fn resign(&self, election: &str, session: u64) -> Result<()>;

    /// Hand leadership of `election` from `from` to the queued `to`; returns `to`'s token.
    async fn transfer(&self, _election: &str, _from: u64, _to: u64) -> Result<u64> {
        Err(Error::UnsupportedBackend {
            scheme: self.capabilities().scheme.into(),
            why: "this backend's recipe hands leadership only to the next candidate in its \
                  queue, never to a named one (see Client::supports_transfer)"
                .into(),
        })
    }

    /// Who leads `election`; [`Error::UnknownElection`] if nobody ever campaigned in it.
    async fn leader(&self, election: &str) -> Result<Option<LeaderInfo>>;

    /// Forward every change of `election`'s leader, starting with the current one, to `tx`
    /// (from a task of the backend's own) until `tx`'s receiver is dropped.
    async fn observe(&self, election: &str, tx: mpsc::Sender<Result<LeaderEvent>>) -> Result<()>;

    /// Write `value` at `key`, fenced by `fence`. Returns the write's position.
    async fn fenced_put(&self, key: &str, value: &[u8], fence: Fence<'_>) -> Result<u64>;

    /// The value stored at `key`.
    async fn get(&self, key: &str) -> Result<Option<FencedValue>>;

    /// Remove `key`, fenced by `fence`; whether it existed.
    async fn fenced_delete(&self, key: &str, fence: Fence<'_>) -> Result<bool>;

    /// Remove `election`, which must have no candidates; whether it existed.
    async fn delete_election(&self, _election: &str) -> Result<bool> {
        Err(Error::UnsupportedBackend {
            scheme: self.capabilities().scheme.into(),
            why: "deleting an election (with tokens that never come back) is a tenure \
                  cluster's; this backend's elections are its own keys or nodes"
                .into(),
        })
    }
}
