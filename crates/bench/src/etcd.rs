//! etcd 3.4 as a measured system: three `etcd` members on loopback (Debian's binary, fsync on),
//! driven through `etcd-client`.
//!
//! - The leader is read from each member's Maintenance `Status`; member ids are learned from
//!   those answers at start and never change (a restarted member keeps its data directory).
//! - Every client is connected lazily and dropped after a failure, so a client that a dead
//!   member left in a bad state is replaced by a fresh one on the next call.
//! - Lease renewals use one `LeaseKeepAlive` stream per lease (`etcd-client` ties a stream to
//!   one lease id), spread over several connections to the leader, so that the count measures
//!   etcd rather than one HTTP/2 connection.
//! - With TLS (`etcd-tls`), members serve https client and peer URLs on certificates issued
//!   into the cluster's directory (the same shapes as tenure's: one CA, node certificates
//!   valid as server and client for 127.0.0.1), require client certificates on both
//!   (`--client-cert-auth`, `--peer-client-cert-auth`), and every client here presents one.

use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use async_trait::async_trait;
use etcd_client::{
    Client, ConnectOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, TlsOptions,
};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

use crate::system::{
    issue_certs, poll, renew_pipelined, Cluster, Env, KeepaliveLoad, Procs, Profile, ReadKind,
    Reader, System, Writer, BULK_IN_FLIGHT, NODES as MEMBERS, READ_VALUE_BYTES, STATUS_TIMEOUT,
    TLS_CLIENT,
};
use tenure_procs::ports::free_ports;
use tenure_procs::process::which;
use tenure_procs::Certs;

/// TCP connect timeout of every client (loopback: anything longer means the member is down).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long freshly started members may take to serve clients.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of the probe write in `wait_stable` and of other single administrative calls.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// `move_leader` returns once the transfer is done; etcd itself gives up after a few seconds.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(15);
/// TTL of the sessions that hold elections, and how often they renew.
const SESSION_TTL_SECS: i64 = 10;
const SESSION_RENEW_EVERY: Duration = Duration::from_secs(3);
/// Pause before reopening a failed keepalive stream of a session.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Where `hold_elections` puts its candidacies (the election recipe's key layout).
const ELECTIONS_PREFIX: &str = "/tenure-bench/elections/";
/// The key that every reader reads.
const READ_KEY: &str = "/tenure-bench/read";

/// A 3-member etcd cluster of local processes. Dropping it kills every member (each
/// [`tenure_procs::Proc`] does on drop) and then deletes its directory.
pub struct EtcdCluster {
    /// Before `dir`: fields drop in order, so the members are dead before their data goes.
    procs: Procs,
    bin: PathBuf,
    dir: tempfile::TempDir,
    client_ports: Vec<u16>,
    peer_ports: Vec<u16>,
    /// Member id of node i, as etcd reports it in response headers.
    ids: Vec<u64>,
    /// One client per member, connected to that member only (status, transfer, probe writes).
    members: Vec<Arc<LazyClient>>,
    /// With TLS on: where the certificates are, and what every client presents.
    tls: Option<(Certs, TlsOptions)>,
    /// Set once [`READ_KEY`] holds its value (written by the first reader).
    read_key: tokio::sync::OnceCell<()>,
}

impl EtcdCluster {
    /// Start 3 fresh members of `system` (etcd or etcd-tls: with TLS on client and peer URLs),
    /// and wait until each serves clients.
    pub async fn start(system: System, profile: Profile, env: &Env) -> anyhow::Result<EtcdCluster> {
        let bin = which("etcd").ok_or_else(|| {
            anyhow!("etcd is not installed: run scripts/services.sh install-etcd")
        })?;
        let dir = env.cluster_dir("etcd")?;
        let tls = if system.tls() {
            let certs = issue_certs(&dir.path().join("certs"), MEMBERS)?;
            let options = certs.grpc(Some(TLS_CLIENT))?;
            Some((certs, options))
        } else {
            None
        };
        let client_tls = tls.as_ref().map(|(_, o)| o);
        let ports = free_ports(2 * MEMBERS)?;
        let (client_ports, peer_ports) = ports.split_at(MEMBERS);
        let members = client_ports
            .iter()
            .map(|&p| Arc::new(LazyClient::new(Endpoints::one(p, client_tls))))
            .collect();
        let mut cluster = EtcdCluster {
            procs: Procs::new(system, profile, "etcd member"),
            bin,
            dir,
            client_ports: client_ports.to_vec(),
            peer_ports: peer_ports.to_vec(),
            ids: vec![0; MEMBERS],
            members,
            tls,
            read_key: tokio::sync::OnceCell::new(),
        };
        for i in 0..MEMBERS {
            cluster.spawn(i)?;
        }
        for i in 0..MEMBERS {
            cluster.ids[i] = cluster.await_member(i).await?;
        }
        Ok(cluster)
    }

    fn name(i: usize) -> String {
        format!("n{i}")
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.log", Self::name(i)))
    }

    /// The command line of member `i`; the same for the first start and for restarts (etcd
    /// ignores the initial-cluster flags once the data directory exists).
    fn command(&self, i: usize) -> Command {
        let scheme = scheme(self.tls.is_some());
        let peer_url = |j: usize| format!("{scheme}://127.0.0.1:{}", self.peer_ports[j]);
        let client_url = format!("{scheme}://127.0.0.1:{}", self.client_ports[i]);
        let initial_cluster = (0..MEMBERS)
            .map(|j| format!("{}={}", Self::name(j), peer_url(j)))
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--name")
            .arg(Self::name(i))
            .arg("--data-dir")
            .arg(self.dir.path().join(Self::name(i)))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url(i)])
            .args(["--initial-advertise-peer-urls", &peer_url(i)])
            .args(["--initial-cluster", &initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "tenure-bench"])
            .args(["--logger", "zap", "--log-outputs", "stderr"]);
        if self.profile() == Profile::Equalized {
            // tenure's default timing, so that both systems detect a failure alike.
            let t = tenure_procs::Timing::DEFAULT;
            cmd.arg("--heartbeat-interval")
                .arg(t.heartbeat_ms.to_string())
                .arg("--election-timeout")
                .arg(t.election_timeout_ms.to_string());
        }
        if let Some((certs, _)) = &self.tls {
            use tenure_transport::certs::files;
            let (ca, cert, key) = (
                certs.ca(),
                certs.dir().join(files::node(i as u64 + 1)),
                certs.dir().join(files::node_key(i as u64 + 1)),
            );
            // The node certificate serves both ends: it is valid as TLS server and client.
            cmd.arg("--cert-file")
                .arg(&cert)
                .arg("--key-file")
                .arg(&key)
                .arg("--trusted-ca-file")
                .arg(&ca)
                .arg("--client-cert-auth")
                .arg("--peer-cert-file")
                .arg(&cert)
                .arg("--peer-key-file")
                .arg(&key)
                .arg("--peer-trusted-ca-file")
                .arg(&ca)
                .arg("--peer-client-cert-auth");
        }
        cmd
    }

    /// Wait until member `i` answers `Status`; returns its member id. Fails early, pointing at
    /// the log, if the process exits (e.g. a port was taken in between).
    async fn await_member(&mut self, i: usize) -> anyhow::Result<u64> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(s) = status(&self.members[i]).await {
                return Ok(s.member);
            }
            if self.procs.exited(i) {
                bail!(
                    "etcd member {} exited at start; see {}",
                    Self::name(i),
                    self.log(i).display()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "etcd member {} does not answer within {START_TIMEOUT:?}; see {}",
                    Self::name(i),
                    self.log(i).display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn index_of(&self, member: u64) -> Option<usize> {
        self.ids.iter().position(|&id| id == member)
    }

    /// `Status` of every running member, asked concurrently; members that do not answer within
    /// [`STATUS_TIMEOUT`] are left out.
    async fn statuses(&self) -> Vec<(usize, MemberStatus)> {
        let mut set = JoinSet::new();
        for i in self.procs.running() {
            let conn = Arc::clone(&self.members[i]);
            set.spawn(async move { (i, status(&conn).await) });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok((i, Some(s))) = r {
                out.push((i, s));
            }
        }
        out
    }

    /// The leader the answering members agree on, if it is itself among them.
    fn agreed_leader(&self, answers: &[(usize, MemberStatus)]) -> Option<usize> {
        let leader = answers.first()?.1.leader;
        if leader == 0 || answers.iter().any(|(_, s)| s.leader != leader) {
            return None;
        }
        let i = self.index_of(leader)?;
        answers.iter().any(|&(j, _)| j == i).then_some(i)
    }

    /// The leader if every running member answers and follows it, and a write through it is
    /// acknowledged.
    async fn stable_leader(&self) -> Option<usize> {
        let answers = self.statuses().await;
        if answers.len() != self.procs.running().len() {
            return None;
        }
        let leader = self.agreed_leader(&answers)?;
        put(
            &self.members[leader],
            "/tenure-bench/stable",
            b"",
            CALL_TIMEOUT,
        )
        .await
        .ok()?;
        Some(leader)
    }

    fn endpoints(&self, nodes: &[usize]) -> anyhow::Result<Endpoints> {
        let tls = self.tls.as_ref().map(|(_, o)| o.clone());
        let urls = nodes
            .iter()
            .map(|&i| {
                self.client_ports
                    .get(i)
                    .map(|&p| url(p, tls.is_some()))
                    .ok_or_else(|| anyhow!("no etcd member {i}"))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Endpoints { urls, tls })
    }
}

#[async_trait]
impl Cluster for EtcdCluster {
    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let (command, log) = (self.command(i), self.log(i));
        self.procs
            .spawn(i, command, &log)
            .with_context(|| format!("start etcd member {}", Self::name(i)))
    }

    fn procs(&self) -> &Procs {
        &self.procs
    }

    fn procs_mut(&mut self) -> &mut Procs {
        &mut self.procs
    }

    async fn leader(&self) -> Option<usize> {
        self.agreed_leader(&self.statuses().await)
    }

    async fn wait_stable(&self, within: Duration) -> anyhow::Result<usize> {
        poll(
            within,
            "etcd: a leader followed by every running member",
            || self.stable_leader(),
        )
        .await
    }

    async fn writer(&self, via: &[usize]) -> anyhow::Result<Box<dyn Writer>> {
        let conn = LazyClient::new(self.endpoints(via)?);
        // Connecting is lazy in etcd-client (no round trip), so this needs no leader; it
        // only checks the endpoints early.
        conn.get().await?;
        Ok(Box::new(EtcdWriter { conn }))
    }

    async fn transfer(&self, to: usize) -> anyhow::Result<()> {
        let target = *self
            .ids
            .get(to)
            .ok_or_else(|| anyhow!("no etcd member {to}"))?;
        let leader = self
            .leader()
            .await
            .context("etcd: no agreed leader to transfer from")?;
        if leader == to {
            return Ok(());
        }
        let mut m = self.members[leader].get().await?.maintenance_client();
        tokio::time::timeout(TRANSFER_TIMEOUT, m.move_leader(target))
            .await
            .with_context(|| format!("etcd move-leader to {to}: no answer"))?
            .with_context(|| format!("etcd move-leader to {to}"))?;
        Ok(())
    }

    fn flood_target(&self) -> Option<(Vec<std::net::SocketAddr>, PathBuf)> {
        let (certs, _) = self.tls.as_ref()?;
        let addrs = self
            .client_ports
            .iter()
            .map(|&p| std::net::SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        Some((addrs, certs.ca()))
    }

    fn url(&self) -> String {
        let hosts: Vec<String> = self
            .client_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let hosts = hosts.join(",");
        match &self.tls {
            None => format!("etcd://{hosts}"),
            // The client library's TLS form; the scenarios that use the library run on the
            // plaintext systems only.
            Some((certs, _)) => format!("etcds://{hosts}?{}", certs.url_query(TLS_CLIENT)),
        }
    }

    async fn keepalives(&self, load: KeepaliveLoad) -> anyhow::Result<u64> {
        // Renewals are only ever answered by the leader (followers forward them), so the
        // clients talk to it directly.
        let leader = self.wait_stable(START_TIMEOUT).await?;
        let endpoint = self.endpoints(&[leader])?;
        let clients = connect_many(&endpoint, RENEW_STREAMS).await?;
        let ids = grant_many(&clients, load.leases, ttl_secs(load.ttl)?).await?;
        let result = renew_multiplexed(&endpoint, &ids, load.concurrency, load.window).await;
        revoke_many(&clients[0], ids).await;
        result
    }

    async fn hold_elections(
        &self,
        n: usize,
        sessions: usize,
    ) -> anyhow::Result<Box<dyn Send + Sync>> {
        if sessions == 0 && n > 0 {
            bail!("{n} elections need at least one session");
        }
        let all: Vec<usize> = (0..MEMBERS).collect();
        let client = connect(&self.endpoints(&all)?).await?;
        let clients = [client.clone()];
        let ids = grant_many(&clients, sessions, SESSION_TTL_SECS).await?;
        // The guard exists before the puts, so that a failure below still cleans up.
        let guard = Sessions {
            renewers: ids
                .iter()
                .map(|&id| tokio::spawn(keep_session(client.clone(), id)).abort_handle())
                .collect(),
            client: client.clone(),
            ids: ids.clone(),
        };
        let failed = run_concurrently(0..n, BULK_IN_FLIGHT, |k| {
            let lease = ids[k % ids.len()];
            let mut kv = client.kv_client();
            async move {
                let key = format!("{ELECTIONS_PREFIX}e{k}/{lease:x}");
                kv.put(
                    key,
                    b"candidate".to_vec(),
                    Some(PutOptions::new().with_lease(lease)),
                )
                .await
                .with_context(|| format!("etcd: put the candidacy of election e{k}"))
            }
        })
        .await
        .into_iter()
        .find_map(Result::err);
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(Box::new(guard))
    }

    /// Both kinds are the same read: a linearizable `Range` of [`READ_KEY`] on a client of
    /// its own connected to member `at` only.
    async fn reader(&self, _kind: ReadKind, at: usize) -> anyhow::Result<Box<dyn Reader>> {
        let member = self
            .members
            .get(at)
            .ok_or_else(|| anyhow!("no etcd member {at}"))?;
        self.read_key
            .get_or_try_init(|| put(member, READ_KEY, &[7; READ_VALUE_BYTES], CALL_TIMEOUT))
            .await?;
        let conn = LazyClient::new(self.endpoints(&[at])?);
        conn.get().await?;
        Ok(Box::new(EtcdReader { conn }))
    }
}

/// A reader whose client talks to one member.
struct EtcdReader {
    conn: LazyClient,
}

#[async_trait]
impl Reader for EtcdReader {
    async fn read(&self, timeout: Duration) -> anyhow::Result<()> {
        let attempt = async {
            let mut kv = self.conn.get().await?.kv_client();
            // No options: `serializable` stays false, so etcd answers only after a ReadIndex
            // round (the leader confirms with a quorum that it still leads), never from a
            // member's local state alone.
            let r = kv
                .get(READ_KEY, None)
                .await
                .with_context(|| format!("etcd range {READ_KEY}"))?;
            match r.kvs().first() {
                Some(kv) if kv.value().len() == READ_VALUE_BYTES => Ok(()),
                Some(kv) => bail!(
                    "etcd range {READ_KEY}: {} bytes, not {READ_VALUE_BYTES}",
                    kv.value().len()
                ),
                None => bail!("etcd range {READ_KEY}: no such key"),
            }
        };
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(anyhow!(
                "etcd range {READ_KEY}: no answer within {timeout:?}"
            )),
        };
        if result.is_err() {
            self.conn.reset().await;
        }
        result
    }
}

/// A writer whose client talks only to some members.
struct EtcdWriter {
    conn: LazyClient,
}

#[async_trait]
impl Writer for EtcdWriter {
    async fn put(&self, key: &str, value: &[u8], timeout: Duration) -> anyhow::Result<()> {
        put(&self.conn, key, value, timeout).await
    }
}

/// A put through `conn`, `Ok` once etcd acknowledged it; the client is replaced after any
/// failure.
async fn put(conn: &LazyClient, key: &str, value: &[u8], timeout: Duration) -> anyhow::Result<()> {
    let attempt = async {
        let mut kv = conn.get().await?.kv_client();
        kv.put(key, value.to_vec(), None)
            .await
            .with_context(|| format!("etcd put {key}"))
    };
    let result = match tokio::time::timeout(timeout, attempt).await {
        Ok(r) => r.map(|_| ()),
        Err(_) => Err(anyhow!("etcd put {key}: no answer within {timeout:?}")),
    };
    if result.is_err() {
        conn.reset().await;
    }
    result
}

/// A client to some endpoints, connected on first use and dropped after a failure. A
/// balanced channel whose member died can keep failing (or stall) after the member is back;
/// a fresh client costs one loopback connection.
struct LazyClient {
    endpoints: Endpoints,
    cached: tokio::sync::Mutex<Option<Client>>,
}

impl LazyClient {
    fn new(endpoints: Endpoints) -> LazyClient {
        LazyClient {
            endpoints,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    async fn get(&self) -> anyhow::Result<Client> {
        let mut cached = self.cached.lock().await;
        if let Some(c) = cached.as_ref() {
            return Ok(c.clone());
        }
        let c = connect(&self.endpoints).await?;
        *cached = Some(c.clone());
        Ok(c)
    }

    async fn reset(&self) {
        *self.cached.lock().await = None;
    }
}

/// What a member says about itself.
#[derive(Clone, Copy, Debug)]
struct MemberStatus {
    member: u64,
    /// 0 while the member knows no leader.
    leader: u64,
}

/// `Status` of the one member behind `conn`, within [`STATUS_TIMEOUT`].
async fn status(conn: &LazyClient) -> Option<MemberStatus> {
    let ask = async {
        let mut m = conn.get().await.ok()?.maintenance_client();
        let s = m.status().await.ok()?;
        Some(MemberStatus {
            member: s.header()?.member_id(),
            leader: s.leader(),
        })
    };
    let answer = tokio::time::timeout(STATUS_TIMEOUT, ask)
        .await
        .ok()
        .flatten();
    if answer.is_none() {
        conn.reset().await;
    }
    answer
}

/// Some members' client URLs, and the TLS to reach them with (with TLS on).
#[derive(Clone)]
struct Endpoints {
    urls: Vec<String>,
    tls: Option<TlsOptions>,
}

impl Endpoints {
    fn one(port: u16, tls: Option<&TlsOptions>) -> Endpoints {
        Endpoints {
            urls: vec![url(port, tls.is_some())],
            tls: tls.cloned(),
        }
    }
}

fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

fn url(port: u16, tls: bool) -> String {
    format!("{}://127.0.0.1:{port}", scheme(tls))
}

async fn connect(endpoints: &Endpoints) -> anyhow::Result<Client> {
    let mut options = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT);
    if let Some(tls) = &endpoints.tls {
        options = options.with_tls(tls.clone());
    }
    let urls = &endpoints.urls;
    tokio::time::timeout(CONNECT_TIMEOUT, Client::connect(urls, Some(options)))
        .await
        .with_context(|| format!("etcd: connect to {urls:?}: timed out"))?
        .with_context(|| format!("etcd: connect to {urls:?}"))
}

/// `n` independent clients (each its own connection) to `endpoints`.
async fn connect_many(endpoints: &Endpoints, n: usize) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        clients.push(connect(endpoints).await?);
    }
    Ok(clients)
}

/// etcd TTLs are whole seconds: round up, at least 1.
fn ttl_secs(ttl: Duration) -> anyhow::Result<i64> {
    i64::try_from(ttl.as_millis().div_ceil(1000))
        .map(|s| s.max(1))
        .with_context(|| format!("ttl {ttl:?} is too long"))
}

/// Grant `n` leases of `ttl` seconds, spread over `clients`.
async fn grant_many(clients: &[Client], n: usize, ttl: i64) -> anyhow::Result<Vec<i64>> {
    run_concurrently(0..n, BULK_IN_FLIGHT, |i| {
        let mut lease = clients[i % clients.len()].lease_client();
        async move {
            let r = lease
                .grant(ttl, None)
                .await
                .context("etcd: grant a lease")?;
            if !r.error().is_empty() {
                bail!("etcd: grant a lease: {}", r.error());
            }
            Ok(r.id())
        }
    })
    .await
    .into_iter()
    .collect()
}

/// Revoke `ids`, best effort (an expired lease is as good).
async fn revoke_many(client: &Client, ids: Vec<i64>) {
    run_concurrently(ids, BULK_IN_FLIGHT, |id| {
        let mut lease = client.lease_client();
        async move {
            lease.revoke(id).await.context("etcd: revoke a lease")?;
            Ok(())
        }
    })
    .await;
}

/// One lease's open keepalive stream.
/// etcd's `LeaseKeepAlive` messages (etcdserverpb, rpc.proto), declared here because the
/// `etcd-client` crate ties each keepalive stream to one lease, while etcd itself (and its
/// own Go client) renews any number of leases on one stream. Renewing 10k leases over 10k
/// streams would measure stream overhead, not etcd's renewals.
mod raw {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseKeepAliveRequest {
        #[prost(int64, tag = "1")]
        pub id: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseKeepAliveResponse {
        #[prost(int64, tag = "2")]
        pub id: i64,
        #[prost(int64, tag = "3")]
        pub ttl: i64,
    }
}

/// Streams that renewals are spread over (as a few clients would).
const RENEW_STREAMS: usize = 16;

/// Renew `ids` at the first of `endpoint`'s URLs over [`RENEW_STREAMS`] `LeaseKeepAlive`
/// streams, round robin, with at most `concurrency` renewals unanswered in all, for `window`;
/// returns the renewals acknowledged (TTL > 0) within it.
async fn renew_multiplexed(
    endpoint: &Endpoints,
    ids: &[i64],
    concurrency: usize,
    window: Duration,
) -> anyhow::Result<u64> {
    let streams = concurrency.clamp(1, RENEW_STREAMS);
    let per_stream = (concurrency / streams).max(1);
    let start = Instant::now() + Duration::from_millis(200);
    let end = start + window;
    let mut set = JoinSet::new();
    for s in 0..streams {
        let mine: Vec<i64> = ids.iter().copied().skip(s).step_by(streams).collect();
        let url = endpoint
            .urls
            .first()
            .ok_or_else(|| anyhow!("etcd: no endpoint to renew at"))?;
        let mut channel = tonic::transport::Endpoint::from_shared(url.clone())
            .context("etcd: endpoint")?
            .tcp_nodelay(true);
        if let Some(tls) = &endpoint.tls {
            channel = channel
                .tls_config(tls.clone())
                .context("etcd: TLS for a renewal stream")?;
        }
        let channel = channel
            .connect()
            .await
            .context("etcd: connect a renewal stream")?;
        set.spawn(renew_stream(channel, mine, per_stream, start, end));
    }
    let mut acknowledged = 0;
    while let Some(r) = set.join_next().await {
        acknowledged += r.context("etcd: a renewal task panicked")??;
    }
    Ok(acknowledged)
}

/// One `LeaseKeepAlive` stream: `inflight` renewals unanswered at most, counting the
/// acknowledgements received in [start, end).
async fn renew_stream(
    channel: tonic::transport::Channel,
    ids: Vec<i64>,
    inflight: usize,
    start: Instant,
    end: Instant,
) -> anyhow::Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let (tx, rx) = tokio::sync::mpsc::channel(inflight * 2);
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .context("etcd: lease service not ready")?;
    let path =
        tonic::codegen::http::uri::PathAndQuery::from_static("/etcdserverpb.Lease/LeaseKeepAlive");
    // etcd sends the stream's response headers with its first answer, so one renewal
    // (outside the window) goes out before the call can return.
    tx.send(raw::LeaseKeepAliveRequest { id: ids[0] })
        .await
        .map_err(|_| anyhow!("etcd: the LeaseKeepAlive stream closed"))?;
    let codec =
        tonic_prost::ProstCodec::<raw::LeaseKeepAliveRequest, raw::LeaseKeepAliveResponse>::default(
        );
    let mut responses = grpc
        .streaming(
            tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx)),
            path,
            codec,
        )
        .await
        .context("etcd: open a LeaseKeepAlive stream")?
        .into_inner();
    responses
        .message()
        .await
        .context("etcd: LeaseKeepAlive stream")?
        .ok_or_else(|| anyhow!("etcd: the LeaseKeepAlive stream ended"))?;
    tokio::time::sleep_until(start).await;
    let mut next = 0;
    let request = || {
        let req = raw::LeaseKeepAliveRequest { id: ids[next] };
        next = (next + 1) % ids.len();
        req
    };
    let acknowledged = AtomicU64::new(0);
    let renewed = |r: &raw::LeaseKeepAliveResponse| r.ttl > 0;
    renew_pipelined(
        &tx,
        &mut responses,
        inflight,
        end.into_std(),
        request,
        renewed,
        &acknowledged,
    )
    .await
    .context("etcd: LeaseKeepAlive stream")?;
    Ok(acknowledged.into_inner())
}

/// One renewal and its answer: `true` if etcd kept the lease (TTL > 0).
async fn renew_once(
    keeper: &mut LeaseKeeper,
    stream: &mut LeaseKeepAliveStream,
) -> anyhow::Result<bool> {
    keeper.keep_alive().await?;
    match stream.message().await? {
        Some(r) => Ok(r.ttl() > 0),
        None => bail!("etcd closed a keepalive stream"),
    }
}

/// Keep lease `id` alive for as long as the task runs, reopening the stream after failures.
async fn keep_session(client: Client, id: i64) {
    loop {
        if let Ok((mut keeper, mut stream)) = client.lease_client().keep_alive(id).await {
            loop {
                tokio::time::sleep(SESSION_RENEW_EVERY).await;
                if renew_once(&mut keeper, &mut stream).await.is_err() {
                    break;
                }
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// The sessions holding elections: dropping it stops their renewals and revokes them (which
/// deletes the candidacies), in the background.
struct Sessions {
    renewers: Vec<AbortHandle>,
    client: Client,
    ids: Vec<i64>,
}

impl Drop for Sessions {
    fn drop(&mut self) {
        for r in &self.renewers {
            r.abort();
        }
        let ids = std::mem::take(&mut self.ids);
        let client = self.client.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { revoke_many(&client, ids).await });
        }
    }
}

/// Run `f` on every item with at most `limit` futures in flight; results in completion order.
async fn run_concurrently<T, R, F, Fut>(
    items: impl IntoIterator<Item = T>,
    limit: usize,
    mut f: F,
) -> Vec<anyhow::Result<R>>
where
    F: FnMut(T) -> Fut,
    Fut: Future<Output = anyhow::Result<R>> + Send + 'static,
    R: Send + 'static,
{
    let mut set = JoinSet::new();
    let mut out = Vec::new();
    for item in items {
        if set.len() >= limit.max(1) {
            if let Some(r) = set.join_next().await {
                out.push(r.unwrap_or_else(|e| Err(anyhow!("task failed: {e}"))));
            }
        }
        set.spawn(f(item));
    }
    while let Some(r) = set.join_next().await {
        out.push(r.unwrap_or_else(|e| Err(anyhow!("task failed: {e}"))));
    }
    out
}
