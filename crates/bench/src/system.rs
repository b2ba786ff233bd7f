//! What every measured system offers the scenarios: a local 3-node cluster of real server
//! processes, and the operations the scenarios time. One implementation per system
//! (`tenure.rs`, `etcd.rs`, `zk.rs`); the scenarios only see [`Cluster`], [`Writer`] and
//! [`Reader`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use async_trait::async_trait;
use clap::ValueEnum;
use tenure_procs::{Certs, Proc};

/// The systems measured. The `-tls` variants are the same clusters with TLS on every port
/// (clients and peers), measured in the `write` and `keepalives` scenarios only. `postgres`
/// and `memory` are client-library backends without a cluster of their own here, measured in
/// the `takeover` scenario only, and only when asked for (`--systems`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum System {
    Tenure,
    /// tenure with `--tls-dir`: mutual TLS between peers, TLS with a client certificate on
    /// the gRPC and HTTP ports.
    TenureTls,
    /// tenure with `--no-fast-election`: followers of a leader whose process exited wait
    /// out the election timeout, as in plain Raft with pre-vote (tenure's default replaces
    /// it at once). Measured in the failover scenarios only.
    TenureTimeout,
    Etcd,
    /// etcd with https client and peer URLs, client certificates required on both.
    EtcdTls,
    Zookeeper,
    /// The client library's PostgreSQL backend on one server, started with
    /// `scripts/services.sh start-postgres` (`--services-script`).
    Postgres,
    /// The client library's in-process backend (`memory:`): the floor of what the library
    /// itself costs.
    Memory,
}

impl System {
    /// Every system, in the order of every table (each TLS variant next to its plaintext
    /// system, so that they run close together in time).
    pub const ALL: [System; 8] = [
        System::Tenure,
        System::TenureTls,
        System::TenureTimeout,
        System::Etcd,
        System::EtcdTls,
        System::Zookeeper,
        System::Postgres,
        System::Memory,
    ];

    /// The systems of a run that names none: every cluster, not the client backends (in the
    /// order of [`System::ALL`]).
    pub fn clusters() -> Vec<System> {
        System::ALL
            .into_iter()
            .filter(|s| !s.backend_only())
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            System::Tenure => "tenure",
            System::TenureTls => "tenure-tls",
            System::TenureTimeout => "tenure-timeout",
            System::Etcd => "etcd",
            System::EtcdTls => "etcd-tls",
            System::Zookeeper => "zookeeper",
            System::Postgres => "postgres",
            System::Memory => "memory",
        }
    }

    /// Whether the system is a client-library backend without a cluster of its own
    /// processes here ([`Cluster`]): it is measured through the library only.
    pub fn backend_only(self) -> bool {
        matches!(self, System::Postgres | System::Memory)
    }

    /// Whether the cluster runs with fast election (tenure's default; not `tenure-timeout`).
    pub fn fast_election(self) -> bool {
        self != System::TenureTimeout
    }

    /// Whether the system is measured in the failover scenarios only (`tenure-timeout`).
    pub fn failover_only(self) -> bool {
        self == System::TenureTimeout
    }

    /// Whether the cluster runs with TLS on.
    pub fn tls(self) -> bool {
        matches!(self, System::TenureTls | System::EtcdTls)
    }

    /// The same system with TLS off.
    pub fn plaintext(self) -> System {
        match self {
            System::TenureTls => System::Tenure,
            System::EtcdTls => System::Etcd,
            s => s,
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The timing profile a cluster is started with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum Profile {
    /// Each system's shipped defaults (tenure: T 150 ms, heartbeat 30 ms; etcd: election
    /// 1000 ms, heartbeat 100 ms; ZooKeeper: tickTime 2000 ms, initLimit 10, syncLimit 5).
    Defaults,
    /// Election timeout 150 ms (randomized up to 300 ms) and heartbeat 30 ms for the Raft
    /// systems; ZooKeeper with tickTime 50 ms and syncLimit 3 (a follower gives up on a silent
    /// leader after 150 ms). The heartbeat is 30 ms, not 50 ms, because etcd refuses an
    /// election timeout under five heartbeats (and so does tenure).
    Equalized,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Defaults => "defaults",
            Profile::Equalized => "equalized",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a cluster needs from its surroundings.
#[derive(Clone, Debug)]
pub struct Env {
    /// The `tenure` binary (runs `tenure server`).
    pub tenure_bin: PathBuf,
    /// Parent of every cluster's temporary directory (same disk for every system).
    pub work_dir: PathBuf,
    /// `scripts/services.sh`, which starts PostgreSQL for the `postgres` system; checked
    /// before anything runs when that system is chosen.
    pub services_script: Option<PathBuf>,
}

impl Env {
    /// A fresh temporary directory for a cluster of `system` (`tenure-bench-<system>-…`) in
    /// [`Env::work_dir`], deleted when dropped.
    pub fn cluster_dir(&self, system: &str) -> anyhow::Result<tempfile::TempDir> {
        tempfile::Builder::new()
            .prefix(&format!("tenure-bench-{system}-"))
            .tempdir_in(&self.work_dir)
            .with_context(|| format!("create a directory in {}", self.work_dir.display()))
    }
}

/// An operation the system does not have (e.g. leadership transfer in ZooKeeper).
#[derive(Debug)]
pub struct Unsupported(pub &'static str);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not supported: {}", self.0)
    }
}

impl std::error::Error for Unsupported {}

/// The nodes of every cluster.
pub const NODES: usize = 3;
/// How long a node may take to answer a question about its role (who leads, what it has
/// applied) before it counts as not answering.
pub const STATUS_TIMEOUT: Duration = Duration::from_millis(300);
/// Requests (or session establishments) in flight when setting up many at once.
pub const BULK_IN_FLIGHT: usize = 64;

/// A running cluster of [`NODES`] nodes of one system. Nodes are numbered 0..len(). Dropping
/// it kills every process and deletes its directory.
#[async_trait]
#[allow(clippy::len_without_is_empty)] // a cluster always has nodes
pub trait Cluster: Send + Sync {
    fn system(&self) -> System {
        self.procs().system
    }
    fn profile(&self) -> Profile {
        self.procs().profile
    }
    fn len(&self) -> usize {
        self.procs().procs.len()
    }
    /// The process of node `i`, while it runs (also while SIGSTOPped).
    fn pid(&self, i: usize) -> Option<u32> {
        self.procs().procs.get(i)?.as_ref().map(Proc::pid)
    }
    /// SIGKILL node `i` and reap it.
    fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        self.procs_mut().kill(i)
    }
    /// Start killed node `i` again on its data directory.
    fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.procs().check_down(i)?;
        self.spawn(i)
    }
    /// Start node `i`'s process on its data directory ([`Procs::spawn`]): at the cluster's
    /// start, and again in [`Cluster::restart`].
    fn spawn(&mut self, i: usize) -> anyhow::Result<()>;
    /// Which system the cluster is, under which profile, and its nodes' processes: what the
    /// process methods above work on.
    fn procs(&self) -> &Procs;
    /// The same, to start and kill nodes.
    fn procs_mut(&mut self) -> &mut Procs;
    /// The node that the running nodes report as leader, if they agree on one and it runs.
    /// Nodes that do not answer within a short timeout are left out.
    async fn leader(&self) -> Option<usize>;
    /// Wait until every running node follows one leader and a write through the leader is
    /// acknowledged; returns the leader.
    async fn wait_stable(&self, within: Duration) -> anyhow::Result<usize>;
    /// A client that sends its writes only to nodes `via` (for example the survivors of a
    /// fault). Created while the cluster has a leader (tenure grants the writer's session
    /// and fencing token here); writing later must not depend on any one node.
    async fn writer(&self, via: &[usize]) -> anyhow::Result<Box<dyn Writer>>;
    /// Ask the current leader to hand leadership to node `to`; returns once the system says
    /// it is done. `Err` downcasts to [`Unsupported`] when the system has no such operation.
    async fn transfer(&self, to: usize) -> anyhow::Result<()>;
    /// The URL of this cluster for the `tenure` client library (`tenure://…`, `etcd://…`,
    /// `zk://…`), for the election scenarios.
    fn url(&self) -> String;
    /// Grant and renew leases as `load` says; returns the number of acknowledged renewals in
    /// its window. Leases are revoked (or left to expire) afterwards.
    async fn keepalives(&self, load: KeepaliveLoad) -> anyhow::Result<u64>;
    /// Make `n` elections each have a leader, held by `sessions` sessions (leases) that are
    /// kept alive in the background until the returned guard is dropped.
    async fn hold_elections(
        &self,
        n: usize,
        sessions: usize,
    ) -> anyhow::Result<Box<dyn Send + Sync>>;
    /// A client of its own (its own connection, and for ZooKeeper its own session) that
    /// reads `kind` linearizably at node `at` (the scenarios pass the leader). etcd's and
    /// ZooKeeper's readers talk to that member only (every member serves their reads, leader
    /// or not); tenure's follows the leader from there, as its writers do, because only
    /// tenure's leader serves reads. The first call creates what every reader of the cluster
    /// reads: for tenure an election with a leader and a fenced key holding
    /// [`READ_VALUE_BYTES`] bytes, for etcd a key and for ZooKeeper a znode holding as many.
    async fn reader(&self, kind: ReadKind, at: usize) -> anyhow::Result<Box<dyn Reader>>;
    /// Take a backup of the whole state from the running cluster (tenure's `tenure backup`);
    /// returns its size in bytes. `Err` downcasts to [`Unsupported`] for the others, whose
    /// backups the bench does not drive.
    async fn backup(&self) -> anyhow::Result<u64> {
        Err(Unsupported("backups are taken of tenure only").into())
    }

    /// The Prometheus text of node `i`'s `/metrics`, for the systems whose nodes export
    /// the latencies the write scenario reads next to its own timing (tenure's
    /// [`tenure_plan::metrics::FSYNC`] and [`tenure_plan::metrics::COMMIT`]); `None` for the
    /// others.
    async fn metrics(&self, _i: usize) -> anyhow::Result<Option<String>> {
        Ok(None)
    }

    /// For a system with TLS on its client ports: every node's client address and the CA
    /// file that signs their certificates (what the `flood` scenario attacks with); `None`
    /// for the others.
    fn flood_target(&self) -> Option<(Vec<std::net::SocketAddr>, PathBuf)> {
        None
    }
}

/// The load of [`Cluster::keepalives`]: grant `leases` leases (sessions) of `ttl`, then renew
/// them as fast as the system answers during `window`, with at most `concurrency` renewals
/// in flight.
#[derive(Clone, Copy, Debug)]
pub struct KeepaliveLoad {
    pub leases: usize,
    pub ttl: Duration,
    pub concurrency: usize,
    pub window: Duration,
}

/// What every [`Cluster`] keeps alike, for the trait's process methods: which system it is,
/// under which profile, and the process of each of its [`NODES`] nodes while it runs.
pub struct Procs {
    system: System,
    profile: Profile,
    /// What errors call a node: `tenure node`, `etcd member`, `zookeeper server`.
    noun: &'static str,
    procs: Vec<Option<Proc>>,
}

impl Procs {
    /// [`NODES`] nodes of `system` under `profile`, none started yet.
    pub fn new(system: System, profile: Profile, noun: &'static str) -> Procs {
        Procs {
            system,
            profile,
            noun,
            procs: (0..NODES).map(|_| None).collect(),
        }
    }

    /// Start node `i`'s process ([`Proc::spawn`]).
    pub fn spawn(&mut self, i: usize, cmd: Command, log: &Path) -> anyhow::Result<()> {
        self.procs[i] = Some(Proc::spawn(cmd, log)?);
        Ok(())
    }

    /// The nodes whose process runs (started and not killed).
    pub fn running(&self) -> Vec<usize> {
        (0..self.procs.len())
            .filter(|&i| self.procs[i].is_some())
            .collect()
    }

    /// Whether node `i`'s process is gone: never started, killed, or exited by itself.
    pub fn exited(&mut self, i: usize) -> bool {
        !self.procs[i].as_mut().is_some_and(Proc::running)
    }

    /// `Ok` if there is a node `i` and it is killed, so that it may be started again.
    fn check_down(&self, i: usize) -> anyhow::Result<()> {
        match self.procs.get(i) {
            None => bail!("no {} {i}", self.noun),
            Some(Some(_)) => bail!("{} {i} is running", self.noun),
            Some(None) => Ok(()),
        }
    }

    fn kill(&mut self, i: usize) -> anyhow::Result<()> {
        let noun = self.noun;
        let proc = self
            .procs
            .get_mut(i)
            .ok_or_else(|| anyhow!("no {noun} {i}"))?
            .take()
            .ok_or_else(|| anyhow!("{noun} {i} is not running"))?;
        proc.kill();
        Ok(())
    }
}

/// What a reader reads. tenure has a read RPC of each kind; etcd and ZooKeeper serve both
/// with their one linearizable read of a key (etcd's `Range`, ZooKeeper's `sync` then
/// `getData`), so their readers do the same for either kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadKind {
    /// Who leads an election that has a leader (tenure's `Leader`).
    Leader,
    /// The value of a key that holds one (tenure's `Get` of a fenced key).
    Key,
}

impl ReadKind {
    /// Both kinds, in the order the read scenario measures them.
    pub const ALL: [ReadKind; 2] = [ReadKind::Leader, ReadKind::Key];

    /// The kind as the report's metrics name it.
    pub fn name(self) -> &'static str {
        match self {
            ReadKind::Leader => "leader read",
            ReadKind::Key => "key read",
        }
    }
}

/// The size of the value that readers read (the size the write scenario writes).
pub const READ_VALUE_BYTES: usize = 64;

/// One client of a cluster that reads linearizably.
#[async_trait]
pub trait Reader: Send + Sync {
    /// One linearizable read; `Ok` only once the cluster answered it with what was there to
    /// read (an election's leader, a key's [`READ_VALUE_BYTES`] bytes): an empty answer is an
    /// error, so that a broken read is never timed as a fast one. Gives up after `timeout`.
    async fn read(&self, timeout: Duration) -> anyhow::Result<()>;
}

/// One client of a cluster that writes a small value durably.
#[async_trait]
pub trait Writer: Send + Sync {
    /// Write `value` to `key`; `Ok` only once the cluster acknowledged the write as committed
    /// (durable on a majority). Gives up after `timeout`.
    async fn put(&self, key: &str, value: &[u8], timeout: Duration) -> anyhow::Result<()>;
}

/// Start a cluster of `system` with `profile`.
pub async fn start(
    system: System,
    profile: Profile,
    env: &Env,
) -> anyhow::Result<Box<dyn Cluster>> {
    let cluster: Box<dyn Cluster> = match system {
        System::Tenure | System::TenureTls | System::TenureTimeout => {
            Box::new(crate::tenure::TenureCluster::start(system, profile, env).await?)
        }
        System::Etcd | System::EtcdTls => {
            Box::new(crate::etcd::EtcdCluster::start(system, profile, env).await?)
        }
        System::Zookeeper => Box::new(crate::zk::ZkCluster::start(profile, env).await?),
        System::Postgres | System::Memory => {
            return Err(anyhow::Error::new(Unsupported(
                "a cluster of a client backend (it is measured through the library only)",
            )))
        }
    };
    Ok(cluster)
}

// ------------------------------------------------------------------------------------------
// TLS material for the `-tls` variants.

/// The cluster id the TLS variants run with (it stands in every certificate's name).
pub const TLS_CLUSTER_ID: &str = "bench";
/// The client certificate the scenarios' requests present: an ordinary client of the cluster
/// (tenure's default policy lets it campaign and write, and read status).
pub const TLS_CLIENT: &str = "bench";
/// The client certificate for administrative requests (tenure's leadership transfer).
pub const TLS_ADMIN: &str = "admin";

/// A fresh CA and certificates in `dir` (which must not hold any yet): node certificates for
/// nodes 1 to `nodes` (valid as TLS server and client for `localhost`, `127.0.0.1` and `::1`,
/// which etcd uses as its server and peer certificates too), and the client certificates
/// [`TLS_CLIENT`] and [`TLS_ADMIN`].
pub fn issue_certs(dir: &Path, nodes: usize) -> anyhow::Result<Certs> {
    Certs::issue(
        dir,
        TLS_CLUSTER_ID,
        1..=nodes as u64,
        &[TLS_CLIENT, TLS_ADMIN],
    )
}

/// Run `task(0..n)` with at most `limit` in flight; the results, in completion order. The
/// first failure fails the whole (the tasks still running are aborted).
pub async fn bounded<T, F, Fut>(n: usize, limit: usize, task: F) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let mut results = Vec::with_capacity(n);
    let mut next = 0;
    while next < n || !set.is_empty() {
        while next < n && set.len() < limit.max(1) {
            set.spawn(task(next));
            next += 1;
        }
        if let Some(result) = set.join_next().await {
            results.push(result.context("a setup task panicked")??);
        }
    }
    Ok(results)
}

/// The keepalives scenario's renewals on one open stream: `request()` after `request()` with
/// at most `inflight` unanswered until `end`, then the answers still due. Every answer that
/// `renewed` accepts and that arrives before `end` is counted in `acknowledged` at once (so
/// that the count survives a stream that fails later). Fails when the stream closes, or when
/// no answer comes within 10 s.
pub async fn renew_pipelined<Req, Resp>(
    tx: &tokio::sync::mpsc::Sender<Req>,
    responses: &mut tonic::Streaming<Resp>,
    inflight: usize,
    end: Instant,
    mut request: impl FnMut() -> Req,
    renewed: impl Fn(&Resp) -> bool,
    acknowledged: &AtomicU64,
) -> anyhow::Result<()> {
    let mut outstanding = 0usize;
    loop {
        while outstanding < inflight && Instant::now() < end {
            if tx.send(request()).await.is_err() {
                bail!("the stream closed");
            }
            outstanding += 1;
        }
        if outstanding == 0 {
            return Ok(());
        }
        let answer = tokio::time::timeout(Duration::from_secs(10), responses.message())
            .await
            .context("no renewal answered in 10 s")?
            .context("the stream failed")?
            .ok_or_else(|| anyhow!("the stream ended"))?;
        outstanding -= 1;
        if renewed(&answer) && Instant::now() < end {
            acknowledged.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Retry `f` every 20 ms until it returns `Some`, or fail after `within` with `what`.
pub async fn poll<T, F, Fut>(within: Duration, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
