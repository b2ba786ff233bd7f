//! A small client of the cluster's gRPC API for the demo's controller and workers: it keeps
//! one lazily connected channel per node and sends each request to the node it believes
//! leads, following `not-leader` hints (`tenure-leader-addr`) and moving to the next node
//! when one does not answer.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tenure_proto::v1;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::v1::fenced_keys_client::FencedKeysClient;
use tenure_proto::{Reason, CURRENT_TOKEN_KEY, ERROR_KEY, LEADER_ADDR_KEY};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

/// Longest wait for one attempt at one node (a dead node on loopback refuses at once; this
/// bounds a node that accepted the request but cannot answer, e.g. one without a quorum).
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts, so that a cluster between leaders is not hammered.
const RETRY_PAUSE: Duration = Duration::from_millis(50);
/// TCP connect timeout per channel.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The machine-readable reason of a tenure error (`tenure-error`), if it is one this
/// version knows.
pub fn reason(s: &Status) -> Option<Reason> {
    Reason::of(s)
}

/// Whether a status carries a `tenure-error` label at all (known or not): an answer from
/// the application rather than from the transport.
fn labelled(s: &Status) -> bool {
    s.metadata().get(ERROR_KEY).is_some()
}

/// The highest accepted token carried by a `stale-token` error.
pub fn current_token(s: &Status) -> Option<u64> {
    s.metadata()
        .get(CURRENT_TOKEN_KEY)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A short description of an error for logs and events.
pub fn describe(s: &Status) -> String {
    match reason(s) {
        Some(r) => format!("{r}: {}", s.message()),
        None => format!("{:?}: {}", s.code(), s.message()),
    }
}

/// The cluster's nodes, as seen by one client.
#[derive(Clone)]
pub struct Nodes {
    addrs: Arc<Vec<String>>,
    channels: Arc<Vec<Channel>>,
    /// Index of the node believed to lead; shared by every clone, so that one task's
    /// redirect helps the others.
    guess: Arc<AtomicUsize>,
}

impl Nodes {
    /// Channels to `addrs` (`host:port` of each node's client API) over TLS with the
    /// certificates in `tls_dir` (`tenure certs` layout); nothing connects yet.
    pub fn new(addrs: Vec<String>, tls_dir: &std::path::Path) -> anyhow::Result<Nodes> {
        use tenure_transport::certs::files;
        anyhow::ensure!(!addrs.is_empty(), "no node addresses");
        let read = |name: &str| {
            let path = tls_dir.join(name);
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))
        };
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read(files::CA)?))
            .identity(tonic::transport::Identity::from_pem(
                read(&files::client(super::procs::DEMO_CLIENT))?,
                read(&files::client_key(super::procs::DEMO_CLIENT))?,
            ));
        let channels = addrs
            .iter()
            .map(|a| {
                Ok(Endpoint::from_shared(format!("https://{a}"))
                    .with_context(|| format!("bad node address {a:?}"))?
                    .connect_timeout(CONNECT_TIMEOUT)
                    .tcp_nodelay(true)
                    .tls_config(tls.clone())
                    .context("TLS configuration")?
                    .connect_lazy())
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Nodes {
            addrs: Arc::new(addrs),
            channels: Arc::new(channels),
            guess: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Index of the node believed to lead.
    pub fn guess(&self) -> usize {
        self.guess.load(Ordering::Relaxed)
    }

    /// The client address of node index `i`.
    pub fn addr(&self, i: usize) -> &str {
        &self.addrs[i]
    }

    /// The channel to node index `i`.
    pub fn channel(&self, i: usize) -> Channel {
        self.channels[i].clone()
    }

    /// Learn from a failed attempt at node `i`: follow a leader hint, or move on to the next
    /// node when `i` did not answer. Returns whether the request is worth retrying.
    pub fn note_failure(&self, i: usize, s: &Status) -> bool {
        match reason(s) {
            Some(Reason::NotLeader) => {
                let hinted = s
                    .metadata()
                    .get(LEADER_ADDR_KEY)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|a| self.addrs.iter().position(|x| x == a));
                match hinted {
                    Some(j) if j != i => self.guess.store(j, Ordering::Relaxed),
                    _ => self.advance(i),
                }
                true
            }
            // No leader yet, a transfer, an overload: the same node will know more soon.
            Some(Reason::Unavailable) => true,
            Some(_) => false,
            // A label this version does not know is still the application's answer.
            None if labelled(s) => false,
            // Transport errors and timeouts carry no reason: the node is gone or stuck.
            None => {
                self.advance(i);
                true
            }
        }
    }

    /// Move the guess past `from`, unless another task already moved it.
    pub fn advance(&self, from: usize) {
        let next = (from + 1) % self.addrs.len();
        let _ = self
            .guess
            .compare_exchange(from, next, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// One attempt at the guessed leader, bounded by [`ATTEMPT_TIMEOUT`]. Returns the node
    /// index it went to with the result.
    pub async fn once<T, F, Fut>(&self, f: F) -> (usize, Result<T, Status>)
    where
        F: FnOnce(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let i = self.guess();
        let r = match tokio::time::timeout(ATTEMPT_TIMEOUT, f(self.channel(i))).await {
            Ok(r) => r.map(tonic::Response::into_inner),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "no answer from {} in {ATTEMPT_TIMEOUT:?}",
                self.addr(i)
            ))),
        };
        (i, r)
    }

    /// Call `f` at the guessed leader until it succeeds, fails with a non-retryable error,
    /// or `budget` runs out (then the last error is returned). Only for requests that are
    /// safe to repeat (reads, grants, idempotent campaigns).
    pub async fn call<T, F, Fut>(&self, budget: Duration, mut f: F) -> Result<T, Status>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let deadline = Instant::now() + budget;
        loop {
            let (i, r) = self.once(&mut f).await;
            match r {
                Ok(v) => return Ok(v),
                Err(s) => {
                    if !self.note_failure(i, &s) || Instant::now() + RETRY_PAUSE >= deadline {
                        return Err(s);
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    /// Read a fenced key (through the log, so it sees every write acknowledged before it).
    pub async fn get(
        &self,
        key: &str,
        budget: Duration,
    ) -> Result<Option<v1::FencedValue>, Status> {
        let r = self
            .call(budget, |ch| {
                let req = v1::GetRequest {
                    key: key.to_string(),
                };
                async move { FencedKeysClient::new(ch).get(req).await }
            })
            .await?;
        Ok(r.value)
    }

    /// Who leads `election`, according to the cluster.
    pub async fn leader(
        &self,
        election: &str,
        budget: Duration,
    ) -> Result<Option<v1::LeaderInfo>, Status> {
        let r = self
            .call(budget, |ch| {
                let req = v1::LeaderRequest {
                    election: election.to_string(),
                };
                async move {
                    tenure_proto::v1::elections_client::ElectionsClient::new(ch)
                        .leader(req)
                        .await
                }
            })
            .await?;
        Ok(r.leader)
    }

    /// The status of node index `i` itself (no redirect), bounded by `timeout`.
    pub async fn status_of(&self, i: usize, timeout: Duration) -> Option<v1::StatusResponse> {
        let mut client = ClusterClient::new(self.channel(i));
        match tokio::time::timeout(timeout, client.status(v1::StatusRequest {})).await {
            Ok(Ok(r)) => Some(r.into_inner()),
            _ => None,
        }
    }
}
