//! tenure as a benchmarked system: 3 `tenure server` processes of this very binary, driven
//! over gRPC `tenure.v1` (the generated clients of `tenure-proto`, no client library in the
//! way, as for etcd and ZooKeeper).
//!
//! With TLS (`tenure-tls`) the servers run with `--tls-dir` on certificates issued into the
//! cluster's directory: peers authenticate each other with mutual TLS, and every gRPC
//! channel here is https with the CA and a client certificate.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use async_trait::async_trait;
use futures::future::join_all;
use tenure::channel::{LeaderChannel, NodeChannel};
use tenure_procs::{Certs, NodeAddrs, NodeSpec};
use tenure_proto::v1;
use tenure_proto::v1::cluster_client::ClusterClient;
use tenure_proto::v1::elections_client::ElectionsClient;
use tenure_proto::v1::fenced_keys_client::FencedKeysClient;
use tenure_proto::v1::sessions_client::SessionsClient;
use tenure_transport::http::HttpClient;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::system::{
    bounded, issue_certs, poll, renew_pipelined, Cluster, Env, KeepaliveLoad, Procs, Profile,
    ReadKind, Reader, System, Writer, BULK_IN_FLIGHT, NODES, READ_VALUE_BYTES, STATUS_TIMEOUT,
    TLS_ADMIN, TLS_CLIENT, TLS_CLUSTER_ID,
};

/// Above this many sessions, the elections scenario's sessions live longer and are not
/// revoked one by one at its end.
const MANY_SESSIONS: usize = 1_000;
/// Renewals sent at once by the elections scenario's keepalive stream.
const RENEW_CHUNK: usize = 1_000;

/// How long one bulk request retries across leader changes.
const BULK_BUDGET: Duration = Duration::from_secs(30);

pub struct TenureCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// Per node (node `i + 1` at index `i`): peer, client (gRPC) and HTTP addresses.
    addrs: Vec<NodeAddrs>,
    procs: Procs,
    /// Distinct elections for writers, so that writers never fence each other out.
    writers: AtomicU64,
    /// With TLS on: the certificates and the clients' TLS.
    tls: Option<Tls>,
    /// What every reader reads, created by the first one.
    read_target: tokio::sync::OnceCell<ReadTarget>,
}

/// The election and the fenced key that the read scenario reads.
#[derive(Clone, Debug)]
struct ReadTarget {
    /// An election led by a session of an hour that nobody renews: it outlives the scenario
    /// without keepalives that would compete with the reads.
    election: String,
    /// The leader's fencing token, which every `Leader` answer must carry.
    token: u64,
    /// A fenced key of that election, holding [`READ_VALUE_BYTES`] bytes.
    key: String,
}

/// The TLS of a `tenure-tls` cluster.
struct Tls {
    /// What `tenure certs` would write: the CA, node and client certificates.
    certs: Certs,
    /// Every request but the leadership transfer ([`TenureCluster::url_as`] with the
    /// administrator's certificate) presents the ordinary client's.
    client: ClientTlsConfig,
}

impl TenureCluster {
    /// The cluster's `tenure://` URL, with the certificate of the client named `name` when
    /// the cluster runs TLS.
    fn url_as(&self, name: &str) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(|a| a.client.to_string()).collect();
        let hosts = addrs.join(",");
        match &self.tls {
            None => format!("tenure://{hosts}"),
            Some(tls) => format!("tenure://{hosts}?{}", tls.certs.url_query(name)),
        }
    }

    /// Start 3 nodes of `system`: tenure, with TLS on every port (tenure-tls) or without
    /// fast election (tenure-timeout).
    pub async fn start(
        system: System,
        profile: Profile,
        env: &Env,
    ) -> anyhow::Result<TenureCluster> {
        let addrs = NodeAddrs::free(NODES)?;
        let dir = env.cluster_dir("tenure")?;
        let tls = if system.tls() {
            let certs = issue_certs(&dir.path().join("certs"), NODES)?;
            Some(Tls {
                client: certs.grpc(Some(TLS_CLIENT))?,
                certs,
            })
        } else {
            None
        };
        let mut c = TenureCluster {
            bin: env.tenure_bin.clone(),
            dir,
            addrs,
            procs: Procs::new(system, profile, "tenure node"),
            writers: AtomicU64::new(0),
            tls,
            read_target: tokio::sync::OnceCell::new(),
        };
        for i in 0..NODES {
            c.spawn(i)?;
        }
        Ok(c)
    }

    /// A channel to node `i`, with the ordinary client's certificate under TLS.
    fn channel(&self, i: usize, timeout: Duration) -> Channel {
        let tls = self.tls.as_ref().map(|t| &t.client);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{}", self.addrs[i].client))
            .expect("a socket address makes a valid URI")
            .connect_timeout(Duration::from_millis(200))
            .timeout(timeout)
            .tcp_nodelay(true);
        match tls {
            Some(tls) => endpoint
                .tls_config(tls.clone())
                .expect("a TLS configuration built from PEM files is valid"),
            None => endpoint,
        }
        .connect_lazy()
    }

    /// Leader-following access to nodes `via` (asked in that order first), on connections
    /// of its own: the client library's channel, restricted to them.
    fn nodes(&self, via: &[usize]) -> anyhow::Result<Nodes> {
        let addrs: Vec<String> = via
            .iter()
            .map(|&i| self.addrs[i].client.to_string())
            .collect();
        let channel = LeaderChannel::from_url(&self.url())
            .and_then(|c| c.restricted_to(&addrs))
            .with_context(|| format!("a channel to nodes {via:?}"))?;
        Ok(Nodes { channel })
    }

    fn all(&self) -> anyhow::Result<Nodes> {
        self.nodes(&(0..self.addrs.len()).collect::<Vec<_>>())
    }

    async fn status(&self, i: usize) -> Option<v1::StatusResponse> {
        let mut c = ClusterClient::new(self.channel(i, STATUS_TIMEOUT));
        c.status(v1::StatusRequest {})
            .await
            .ok()
            .map(tonic::Response::into_inner)
    }

    /// A session of `ttl` and a fencing token of a fresh election.
    async fn session_and_token(&self, ttl: Duration) -> anyhow::Result<(u64, String, u64)> {
        let nodes = self.all()?;
        let session = grant(&nodes, ttl).await.context("grant a session")?;
        let n = self.writers.fetch_add(1, Ordering::Relaxed);
        let election = format!("tenure-bench-writer-{n}");
        let token = campaign(&nodes, &election, session).await?;
        Ok((session, election, token))
    }

    /// The election and key that readers read, created on first use: a session and a
    /// campaign as for a writer, then a fenced Put of the key.
    async fn read_target(&self) -> anyhow::Result<&ReadTarget> {
        self.read_target
            .get_or_try_init(|| async {
                let (_, election, token) =
                    self.session_and_token(Duration::from_secs(3600)).await?;
                let key = format!("{election}/read");
                self.all()?
                    .call(BULK_BUDGET, |ch| {
                        let req = v1::PutRequest {
                            key: key.clone(),
                            value: vec![7; READ_VALUE_BYTES],
                            election: election.clone(),
                            token,
                            ..Default::default()
                        };
                        async move { FencedKeysClient::new(ch).put(req).await }
                    })
                    .await
                    .context("put the key that readers read")?;
                Ok(ReadTarget {
                    election,
                    token,
                    key,
                })
            })
            .await
    }

    /// Grant `n` sessions of `ttl`, `BULK_IN_FLIGHT` at a time; also returns the leader of
    /// the moment (for streams that must start there).
    async fn grant_many(&self, n: usize, ttl: Duration) -> anyhow::Result<(usize, Vec<u64>)> {
        let nodes = self.all()?;
        let ids = bounded(n, BULK_IN_FLIGHT, |k| {
            let nodes = nodes.clone();
            async move {
                grant(&nodes, ttl)
                    .await
                    .with_context(|| format!("grant session {k}"))
            }
        })
        .await?;
        let leader = self
            .leader()
            .await
            .ok_or_else(|| anyhow!("no tenure leader"))?;
        Ok((leader, ids))
    }
}

/// Grant a session of `ttl`; its id.
async fn grant(nodes: &Nodes, ttl: Duration) -> anyhow::Result<u64> {
    let ttl_ms = ttl.as_millis() as u64;
    nodes
        .call(BULK_BUDGET, |ch| async move {
            SessionsClient::new(ch)
                .grant(v1::GrantRequest {
                    ttl_ms,
                    session_secret: tenure_proto::process_session_secret(),
                    ..Default::default()
                })
                .await
        })
        .await
        .map(|r| r.session_id)
}

/// Campaign (idempotent for a session) and wait to lead; the fencing token.
async fn campaign(nodes: &Nodes, election: &str, session_id: u64) -> anyhow::Result<u64> {
    nodes
        .call(BULK_BUDGET, |ch| {
            let req = v1::CampaignRequest {
                election: election.to_string(),
                session_id,
                value: Vec::new(),
                session_secret: tenure_proto::process_session_secret(),
                ..Default::default()
            };
            async move { ElectionsClient::new(ch).campaign(req).await }
        })
        .await
        .with_context(|| format!("campaign in {election}"))
        .map(|r| r.token)
}

#[async_trait]
impl Cluster for TenureCluster {
    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let dir = self.dir.path();
        let members = (1..).zip(self.addrs.iter().copied()).collect();
        let mut node = NodeSpec::new(i as u64 + 1, &dir.join(format!("n{i}")), members);
        // tenure's shipped defaults are the equalized profile's numbers; they are spelled out
        // for the equalized profile only, so that the defaults profile runs whatever the
        // server ships.
        if self.profile() != Profile::Equalized {
            node.timing = None;
        }
        if let Some(tls) = &self.tls {
            node.tls_dir = Some(tls.certs.dir().to_path_buf());
            node.cluster_id = Some(TLS_CLUSTER_ID.to_string());
            // Every client of the bench authenticates as one principal, standing for 256
            // applications at once; the per-principal share (256 connections per node by
            // default, so that one tenant cannot take the pool) would stop its 256-client
            // run, which the plaintext run (no principals) does not meet.
            node.args.extend([
                "--connections-per-principal-max".to_string(),
                "4096".to_string(),
            ]);
        }
        node.fast_election = self.system().fast_election();
        let log = dir.join(format!("n{i}.log"));
        self.procs.spawn(i, node.command(&self.bin), &log)
    }

    fn procs(&self) -> &Procs {
        &self.procs
    }

    fn procs_mut(&mut self) -> &mut Procs {
        &mut self.procs
    }

    async fn leader(&self) -> Option<usize> {
        let running = self.procs.running();
        let views = join_all(running.iter().map(|&i| self.status(i))).await;
        let answered: Vec<&v1::StatusResponse> = views.iter().flatten().collect();
        let first = answered.first()?;
        let agree = answered
            .iter()
            .all(|v| v.leader_id == first.leader_id && v.term == first.term);
        let leads = answered
            .iter()
            .any(|v| v.id == first.leader_id && v.role == "leader");
        if !agree || !leads || first.leader_id == 0 {
            return None;
        }
        let i = first.leader_id as usize - 1;
        running.contains(&i).then_some(i)
    }

    async fn wait_stable(&self, within: Duration) -> anyhow::Result<usize> {
        let deadline = Instant::now() + within;
        let leader = poll(
            within,
            "tenure: every running node follows one leader",
            || async {
                let running = self.procs.running();
                let views = join_all(running.iter().map(|&i| self.status(i))).await;
                if views.iter().any(Option::is_none) {
                    return None;
                }
                let l = self.leader().await?;
                // Followers have applied what the leader had committed when asked.
                let target = self.status(l).await?.commit_index;
                let views = join_all(running.iter().map(|&i| self.status(i))).await;
                views
                    .iter()
                    .all(|v| v.as_ref().is_some_and(|v| v.applied_index >= target))
                    .then_some(l)
            },
        )
        .await?;
        let w = self.writer(&[leader]).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        w.put(
            "tenure-bench-stable",
            b"ok",
            left.max(Duration::from_secs(1)),
        )
        .await
        .context("tenure: a write through the leader")?;
        Ok(leader)
    }

    async fn writer(&self, via: &[usize]) -> anyhow::Result<Box<dyn Writer>> {
        if via.is_empty() {
            bail!("a writer needs at least one node");
        }
        let (_, election, token) = self.session_and_token(Duration::from_secs(3600)).await?;
        Ok(Box::new(TenureWriter {
            nodes: self.nodes(via)?,
            election,
            token,
        }))
    }

    async fn transfer(&self, to: usize) -> anyhow::Result<()> {
        // The administrator's certificate; the bench's clock runs from the hand-over, so
        // nothing waits here for the new leader.
        let admin = tenure::admin::Admin::new(&self.url_as(TLS_ADMIN))
            .map_err(|f| anyhow!("{}", f.error()))?;
        admin
            .hand_over(Some(to as u64 + 1))
            .await
            .map_err(|f| anyhow!("TransferLeadership: {}", f.error()))?;
        Ok(())
    }

    async fn backup(&self) -> anyhow::Result<u64> {
        let admin = tenure::admin::Admin::new(&self.url_as(TLS_ADMIN))
            .map_err(|f| anyhow!("{}", f.error()))?;
        let (header, state) = admin
            .backup()
            .await
            .map_err(|f| anyhow!("Backup: {}", f.error()))?;
        if state.len() as u64 != header.bytes {
            bail!(
                "the backup holds {} bytes, its header says {}",
                state.len(),
                header.bytes
            );
        }
        Ok(header.bytes)
    }

    fn flood_target(&self) -> Option<(Vec<std::net::SocketAddr>, PathBuf)> {
        let tls = self.tls.as_ref()?;
        let addrs = self.addrs.iter().map(|a| a.client).collect();
        Some((addrs, tls.certs.ca()))
    }

    fn url(&self) -> String {
        self.url_as(TLS_CLIENT)
    }

    async fn keepalives(&self, load: KeepaliveLoad) -> anyhow::Result<u64> {
        let (leader, ids) = self.grant_many(load.leases, load.ttl).await?;
        // A few streams, each with its share of the leases and of the requests in flight.
        let streams = load.concurrency.clamp(1, 16);
        let per_stream = (load.concurrency / streams).max(1);
        let counted = Arc::new(AtomicU64::new(0));
        let start = Instant::now() + Duration::from_millis(200);
        let end = start + load.window;
        let mut set = JoinSet::new();
        let moved = Arc::new(AtomicU64::new(0));
        for s in 0..streams {
            let mine: Vec<u64> = ids.iter().copied().skip(s).step_by(streams).collect();
            let nodes: Vec<Channel> = (0..self.addrs.len())
                .map(|i| self.channel(i, Duration::from_secs(3600)))
                .collect();
            let stream = RenewStream {
                nodes,
                leader,
                inflight: per_stream,
                start,
                end,
                counted: counted.clone(),
                moved: moved.clone(),
            };
            set.spawn(stream.run(mine));
        }
        while let Some(r) = set.join_next().await {
            r.context("a keepalive task panicked")??;
        }
        let n = counted.load(Ordering::Relaxed);
        let moved = moved.load(Ordering::Relaxed);
        if moved > 0 {
            // Counted honestly: the renewals lost while the stream moved are not counted.
            eprintln!(
                "[tenure] keepalives: the Raft leader changed during the window; \
                 {moved} stream(s) reopened at the new leader"
            );
        }
        let leader = self.leader().await.unwrap_or(leader);
        revoke_many(self.channel(leader, Duration::from_secs(10)), ids).await;
        Ok(n)
    }

    async fn hold_elections(
        &self,
        n: usize,
        sessions: usize,
    ) -> anyhow::Result<Box<dyn Send + Sync>> {
        let sessions = sessions.max(1);
        // Many sessions get a longer TTL: the first must outlive the granting of the rest,
        // and their renewals (one every TTL/4 per session) stay a background load.
        let ttl = if sessions > MANY_SESSIONS {
            Duration::from_secs(120)
        } else {
            Duration::from_secs(10)
        };
        let (leader, ids) = self.grant_many(sessions, ttl).await?;
        // Keep the sessions alive: one stream, each session renewed every TTL/4.
        let ch = self.channel(leader, Duration::from_secs(3600));
        let nodes: Vec<Channel> = (0..self.addrs.len())
            .map(|i| self.channel(i, Duration::from_secs(3600)))
            .collect();
        let keep = tokio::spawn(keep_sessions(nodes, leader, ids.clone(), ttl / 4));
        let nodes = self.all()?;
        bounded(n, BULK_IN_FLIGHT, |k| {
            let nodes = nodes.clone();
            let session_id = ids[k % ids.len()];
            async move {
                campaign(&nodes, &format!("tenure-bench-e{k}"), session_id)
                    .await
                    .map(|_| ())
            }
        })
        .await?;
        Ok(Box::new(Held {
            keep,
            channel: ch,
            ids,
        }))
    }

    async fn metrics(&self, i: usize) -> anyhow::Result<Option<String>> {
        // With TLS the HTTP port asks for a client certificate; the plaintext run of the
        // same disk reads them.
        if self.tls.is_some() {
            return Ok(None);
        }
        let (code, body) = HttpClient::plaintext()
            .get(self.addrs[i].http, "/metrics", Duration::from_secs(5))
            .await
            .with_context(|| format!("GET /metrics on node {i}"))?;
        if code != 200 {
            bail!("GET /metrics on node {i}: HTTP {code}");
        }
        Ok(Some(body))
    }

    async fn reader(&self, kind: ReadKind, at: usize) -> anyhow::Result<Box<dyn Reader>> {
        if at >= self.addrs.len() {
            bail!("no tenure node {at}");
        }
        let target = self.read_target().await?.clone();
        // Every node, as for a writer, but asked first at `at`: should leadership move during
        // the scenario, the reader follows the hint to the new leader rather than retrying
        // at a follower that refuses it until each read's timeout.
        let mut order = vec![at];
        order.extend((0..self.addrs.len()).filter(|&i| i != at));
        let nodes = self.nodes(&order)?;
        Ok(Box::new(TenureReader {
            nodes,
            kind,
            target,
        }))
    }
}

/// Elections held by sessions kept alive by `keep`; dropping it stops the keepalives and
/// revokes the sessions.
struct Held {
    keep: tokio::task::JoinHandle<()>,
    channel: Channel,
    ids: Vec<u64>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.keep.abort();
        let ch = self.channel.clone();
        let ids = std::mem::take(&mut self.ids);
        if ids.len() > MANY_SESSIONS {
            // Revoking them one by one would take longer than the cluster lives; they
            // expire with it.
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(revoke_many(ch, ids));
        }
    }
}

/// One KeepAlive stream of the keepalives scenario: renews its leases round robin, with at
/// most `inflight` requests unanswered, and counts the acknowledgements received in
/// [start, end). Should the Raft leader change during the window (the stream is answered
/// `not-leader` or ends), the stream is reopened at the new leader; the requests in flight
/// then are lost, not counted.
struct RenewStream {
    /// A channel per node.
    nodes: Vec<Channel>,
    /// The node believed to lead.
    leader: usize,
    inflight: usize,
    start: Instant,
    end: Instant,
    counted: Arc<AtomicU64>,
    /// How many times a stream of the scenario was reopened at a new leader.
    moved: Arc<AtomicU64>,
}

/// Streams reopened at most this many times in one window before the scenario gives up.
const MAX_REOPENS: u32 = 5;

impl RenewStream {
    async fn run(mut self, ids: Vec<u64>) -> anyhow::Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        tokio::time::sleep_until(self.start.into()).await;
        let mut next = 0usize;
        let mut seq = 0u64;
        let mut reopens = 0;
        loop {
            let e = match self.renew(&ids, &mut next, &mut seq).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if reopens >= MAX_REOPENS || Instant::now() >= self.end {
                return Err(e);
            }
            reopens += 1;
            self.leader = find_leader(&self.nodes, Duration::from_secs(5))
                .await
                .with_context(|| format!("after {e:#}"))?;
            self.moved.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// One stream at `self.leader`, until the window ends (Ok) or the stream fails.
    async fn renew(&self, ids: &[u64], next: &mut usize, seq: &mut u64) -> anyhow::Result<()> {
        let (tx, rx) = mpsc::channel(self.inflight.max(1) * 2);
        let mut responses = SessionsClient::new(self.nodes[self.leader].clone())
            .keep_alive(ReceiverStream::new(rx))
            .await
            .context("open a KeepAlive stream")?
            .into_inner();
        let request = || {
            *seq += 1;
            let req = v1::KeepAliveRequest {
                session_id: ids[*next],
                seq: *seq,
                session_secret: tenure_proto::process_session_secret(),
                bind: false,
            };
            *next = (*next + 1) % ids.len();
            req
        };
        let renewed = |r: &v1::KeepAliveResponse| r.ttl_ms > 0;
        let (inflight, end) = (self.inflight, self.end);
        renew_pipelined(
            &tx,
            &mut responses,
            inflight,
            end,
            request,
            renewed,
            &self.counted,
        )
        .await
        .context("KeepAlive stream")
    }
}

/// The node that says it leads, asked every 20 ms for at most `within`.
async fn find_leader(nodes: &[Channel], within: Duration) -> anyhow::Result<usize> {
    let deadline = Instant::now() + within;
    loop {
        let views = join_all(nodes.iter().map(|ch| async move {
            let mut c = ClusterClient::new(ch.clone());
            let req = tonic::Request::new(v1::StatusRequest {});
            tokio::time::timeout(STATUS_TIMEOUT, c.status(req))
                .await
                .ok()
                .and_then(Result::ok)
                .map(tonic::Response::into_inner)
        }))
        .await;
        if let Some(i) = views
            .iter()
            .position(|v| v.as_ref().is_some_and(|v| v.role == "leader"))
        {
            return Ok(i);
        }
        if Instant::now() >= deadline {
            bail!("no tenure node leads after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Renew every session of `ids` once per `period`, forever (aborted by its owner), on one stream
/// at the leader; where the stream ends (the Raft leader changed), it is reopened at the new
/// leader, and the run says so on stderr.
async fn keep_sessions(nodes: Vec<Channel>, mut leader: usize, ids: Vec<u64>, period: Duration) {
    let mut seq = 0;
    loop {
        let why = renew_every(nodes[leader].clone(), &ids, period, &mut seq).await;
        match find_leader(&nodes, Duration::from_secs(10)).await {
            Ok(i) => {
                eprintln!(
                    "[tenure] elections: the sessions' keepalive stream ended ({why:#}); \
                     reopened at node {i}"
                );
                leader = i;
            }
            Err(e) => {
                eprintln!(
                    "[tenure] elections: the sessions' keepalive stream ended ({why:#}) and \
                     {e:#}; the sessions will expire"
                );
                return;
            }
        }
    }
}

/// One KeepAlive stream on `ch` renewing every session of `ids` once per `period`, in
/// chunks of [`RENEW_CHUNK`] spread evenly over it, until it fails; returns why.
async fn renew_every(ch: Channel, ids: &[u64], period: Duration, seq: &mut u64) -> anyhow::Error {
    let (tx, rx) = mpsc::channel(1024);
    let mut responses = match SessionsClient::new(ch)
        .keep_alive(ReceiverStream::new(rx))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(e) => return anyhow!("open a KeepAlive stream: {e}"),
    };
    let chunks = ids.len().div_ceil(RENEW_CHUNK).max(1);
    let mut round = tokio::time::interval(period / chunks as u32);
    let mut next = ids.chunks(RENEW_CHUNK).cycle();
    loop {
        tokio::select! {
            answer = responses.message() => match answer {
                Ok(Some(_)) => {}
                Ok(None) => return anyhow!("the server ended it"),
                Err(e) => return anyhow!("{e}"),
            },
            _ = round.tick() => {
                for &id in next.next().unwrap_or_default() {
                    *seq += 1;
                    let req = v1::KeepAliveRequest {
                        session_id: id,
                        seq: *seq,
                        session_secret: tenure_proto::process_session_secret(),
                        bind: false,
                    };
                    if tx.send(req).await.is_err() {
                        return anyhow!("the stream closed");
                    }
                }
            }
        }
    }
}

/// Revoke sessions, best effort.
async fn revoke_many(ch: Channel, ids: Vec<u64>) {
    let mut set = JoinSet::new();
    for id in ids {
        if set.len() >= BULK_IN_FLIGHT {
            set.join_next().await;
        }
        let mut c = SessionsClient::new(ch.clone());
        set.spawn(async move {
            let _ = c
                .revoke(v1::RevokeRequest {
                    session_id: id,
                    session_secret: tenure_proto::process_session_secret(),
                    ..Default::default()
                })
                .await;
        });
    }
    while set.join_next().await.is_some() {}
}

/// Some of the cluster's nodes, for requests that go to the leader: the client library's
/// leader-following channel ([`LeaderChannel`], restricted to these nodes: `not-leader`
/// hints are followed among them only), with a budget of the caller's per request. Only
/// for requests that are safe to repeat (Put with the same token, Campaign of the same
/// session, Grant).
#[derive(Clone)]
struct Nodes {
    channel: LeaderChannel,
}

impl Nodes {
    async fn call<T, F, Fut>(&self, budget: Duration, mut f: F) -> anyhow::Result<T>
    where
        F: FnMut(NodeChannel) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let deadline = Instant::now() + budget;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let e = match tokio::time::timeout(left, self.channel.call(&mut f)).await {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(e)) => e,
                Err(_) => bail!("no answer within {budget:?}"),
            };
            // The channel gives up after a budget of its own; a longer one here asks again
            // while the cluster has not answered (no leader, nodes down, outcome unknown).
            let again = matches!(
                e,
                tenure::Error::NotLeader { .. }
                    | tenure::Error::Unavailable(_)
                    | tenure::Error::Indeterminate(_)
            );
            if !again || Instant::now() >= deadline {
                return Err(anyhow::Error::new(e));
            }
        }
    }
}

/// `Leader` or `Get` requests on channels of its own, sent to the leader (tenure serves reads
/// at its leader only; a follower refuses them with a hint, which `Nodes` follows).
struct TenureReader {
    nodes: Nodes,
    kind: ReadKind,
    target: ReadTarget,
}

#[async_trait]
impl Reader for TenureReader {
    async fn read(&self, timeout: Duration) -> anyhow::Result<()> {
        let t = &self.target;
        match self.kind {
            ReadKind::Leader => {
                let r = self
                    .nodes
                    .call(timeout, |ch| {
                        let req = v1::LeaderRequest {
                            election: t.election.clone(),
                        };
                        async move { ElectionsClient::new(ch).leader(req).await }
                    })
                    .await
                    .with_context(|| format!("Leader of {}", t.election))?;
                match r.leader {
                    Some(l) if l.token == t.token => Ok(()),
                    Some(l) => bail!(
                        "Leader of {}: token {}, not the leader's {}",
                        t.election,
                        l.token,
                        t.token
                    ),
                    None => bail!("Leader of {}: nobody leads", t.election),
                }
            }
            ReadKind::Key => {
                let r = self
                    .nodes
                    .call(timeout, |ch| {
                        let req = v1::GetRequest { key: t.key.clone() };
                        async move { FencedKeysClient::new(ch).get(req).await }
                    })
                    .await
                    .with_context(|| format!("Get {}", t.key))?;
                match r.value {
                    Some(v) if v.value.len() == READ_VALUE_BYTES => Ok(()),
                    Some(v) => bail!(
                        "Get {}: {} bytes, not {READ_VALUE_BYTES}",
                        t.key,
                        v.value.len()
                    ),
                    None => bail!("Get {}: no value", t.key),
                }
            }
        }
    }
}

/// Fenced Puts to some nodes; the token is this writer's own election's, so writers never
/// fence each other out.
struct TenureWriter {
    nodes: Nodes,
    election: String,
    token: u64,
}

#[async_trait]
impl Writer for TenureWriter {
    async fn put(&self, key: &str, value: &[u8], timeout: Duration) -> anyhow::Result<()> {
        // A fenced key belongs to the election of its first write, and every writer has an
        // election of its own: the scenarios' key names are per writer.
        let key = format!("{}/{key}", self.election);
        self.nodes
            .call(timeout, |ch| {
                let req = v1::PutRequest {
                    key: key.clone(),
                    value: value.to_vec(),
                    election: self.election.clone(),
                    token: self.token,
                    ..Default::default()
                };
                async move { FencedKeysClient::new(ch).put(req).await }
            })
            .await
            .map(|_| ())
    }
}
