//! ZooKeeper 3.8 (Debian's package) as a 3-server ensemble of `QuorumPeerMain` processes on
//! loopback, driven with the `zookeeper-client` crate.
//!
//! - Every server has its own data directory (with `myid`) and config in a fresh temporary
//!   directory; fsync stays on (no `forceSync=no`), like the other systems.
//! - The leader is whichever server answers `Mode: leader` to the `srvr` four-letter word.
//! - A write is `set_data` of a persistent znode, acknowledged once the leader committed it
//!   (a quorum of the ensemble logged it).
//! - A lease is a session; an election is ZooKeeper's recipe (an ephemeral sequential znode
//!   under the election's persistent parent).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use async_trait::async_trait;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;
use zookeeper_client as zkc;

use crate::system::{
    bounded, poll, Cluster, Env, KeepaliveLoad, Procs, Profile, ReadKind, Reader, System,
    Unsupported, Writer, BULK_IN_FLIGHT, NODES, READ_VALUE_BYTES, STATUS_TIMEOUT,
};
use tenure_procs::process::which;

/// The server's jar from Debian's `zookeeper` package.
const ZK_JAR: &str = "/usr/share/java/zookeeper.jar";
/// An SLF4J binding: without one the server logs nothing.
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// How long a server may take to open its client port after being spawned (JVM start).
const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
/// Idle time after which the client gives up on a connection (and tries another server).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);
/// The writers' session timeout: long enough that a failover does not expire the session.
const WRITER_SESSION: Duration = Duration::from_secs(30);
/// The session timeout of the sessions that hold elections.
const ELECTION_SESSION: Duration = Duration::from_secs(10);
/// Above this many sessions, `keepalives` would run out of file descriptors (limit 20000,
/// one socket per session).
const MAX_SESSIONS: usize = 15_000;
/// Where `hold_elections` puts its elections.
const ELECTIONS: &str = "/tenure-bench-elections";
/// The znode `wait_stable` writes to.
const STABLE_KEY: &str = "stable";
/// The znode every reader reads (as [`ZkWriter`] names the key `read`).
const READ_PATH: &str = "/tenure-bench-read";

/// ZooKeeper's timing settings of a profile.
struct Timing {
    tick_ms: u64,
    init_limit: u32,
    sync_limit: u32,
}

impl Timing {
    fn of(profile: Profile) -> Timing {
        match profile {
            // The sample config shipped with ZooKeeper.
            Profile::Defaults => Timing {
                tick_ms: 2000,
                init_limit: 10,
                sync_limit: 5,
            },
            // A follower gives up on a silent leader after syncLimit × tickTime = 150 ms,
            // comparable to the Raft systems' 150 ms election timeout.
            Profile::Equalized => Timing {
                tick_ms: 50,
                init_limit: 40,
                sync_limit: 3,
            },
        }
    }

    /// The smallest session timeout the servers grant (2 × tickTime, ZooKeeper's default).
    fn min_session(&self) -> Duration {
        Duration::from_millis(2 * self.tick_ms)
    }
}

/// One server of the ensemble.
struct Node {
    config: PathBuf,
    log: PathBuf,
    client_port: u16,
}

/// A running 3-server ZooKeeper ensemble.
pub struct ZkCluster {
    /// Declared before `_dir` so that the servers are killed before their directory goes.
    procs: Procs,
    timing: Timing,
    java: PathBuf,
    classpath: String,
    nodes: Vec<Node>,
    /// Set once [`READ_PATH`] holds its value (written by the first reader).
    read_znode: tokio::sync::OnceCell<()>,
    /// Held only to be removed when the cluster is dropped.
    _dir: tempfile::TempDir,
}

impl ZkCluster {
    /// Write the ensemble's configs and start its three servers; returns once every server's
    /// JVM answers on its client port (not necessarily with a quorum yet).
    pub async fn start(profile: Profile, env: &Env) -> anyhow::Result<ZkCluster> {
        let (java, classpath) = installation()?;
        let dir = env.cluster_dir("zk")?;
        let timing = Timing::of(profile);
        let nodes = write_configs(dir.path(), &timing)?;
        let mut cluster = ZkCluster {
            procs: Procs::new(System::Zookeeper, profile, "zookeeper server"),
            timing,
            java,
            classpath,
            nodes,
            read_znode: tokio::sync::OnceCell::new(),
            _dir: dir,
        };
        for i in 0..NODES {
            cluster.spawn(i)?;
        }
        for i in 0..NODES {
            cluster.wait_booted(i).await?;
        }
        Ok(cluster)
    }

    /// Wait until server `i` answers `srvr` at all (its JVM is up and listening).
    async fn wait_booted(&mut self, i: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + BOOT_TIMEOUT;
        loop {
            if srvr(self.nodes[i].client_port).await.is_some() {
                return Ok(());
            }
            let running = !self.procs.exited(i);
            let node = &self.nodes[i];
            if !running || Instant::now() >= deadline {
                bail!(
                    "zookeeper server {i} did not start serving ({}; log {}):\n{}",
                    if running {
                        "no answer to srvr"
                    } else {
                        "it exited"
                    },
                    node.log.display(),
                    log_tail(&node.log)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The connect string of nodes `which` (`host:port,…`).
    fn hosts(&self, which: &[usize]) -> String {
        which
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.nodes[i].client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The mode each running node reports, by node (`None`: no answer).
    async fn modes(&self) -> Vec<(usize, Option<Mode>)> {
        let mut set = JoinSet::new();
        for i in self.procs.running() {
            let port = self.nodes[i].client_port;
            set.spawn(async move { (i, srvr(port).await.map(|r| Mode::parse(&r))) });
        }
        let mut modes = Vec::new();
        while let Some(answer) = set.join_next().await {
            if let Ok(answer) = answer {
                modes.push(answer);
            }
        }
        modes
    }

    /// The leader if every running node is leader or follower, exactly one leads, and a write
    /// through it is acknowledged.
    async fn stable_leader(&self) -> Option<usize> {
        let modes = self.modes().await;
        let settled = modes
            .iter()
            .all(|(_, m)| matches!(m, Some(Mode::Leader | Mode::Follower)));
        let leader = sole_leader(&modes)?;
        if !settled || modes.len() != self.procs.running().len() {
            return None;
        }
        let writer = ZkWriter::new(self.hosts(&[leader]));
        writer
            .put(STABLE_KEY, b"stable", Duration::from_secs(2))
            .await
            .ok()?;
        Some(leader)
    }

    /// Open `n` sessions of `timeout`, ~64 at a time; session `k` connects to
    /// `hosts_of(k)`.
    async fn open_sessions(
        &self,
        n: usize,
        timeout: Duration,
        hosts_of: impl Fn(usize) -> String,
    ) -> anyhow::Result<Vec<zkc::Client>> {
        let hosts: Vec<String> = (0..n).map(hosts_of).collect();
        let hosts = Arc::new(hosts);
        bounded(n, BULK_IN_FLIGHT, move |k| {
            let hosts = Arc::clone(&hosts);
            async move {
                connector(timeout)
                    .connect(&hosts[k])
                    .await
                    .with_context(|| format!("open a zookeeper session on {}", hosts[k]))
            }
        })
        .await
    }
}

#[async_trait]
impl Cluster for ZkCluster {
    /// Start server `i` (same command for the first start and every restart).
    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let node = &self.nodes[i];
        let mut cmd = Command::new(&self.java);
        cmd.arg("-Xmx1g")
            .arg("-cp")
            .arg(&self.classpath)
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&node.config);
        self.procs
            .spawn(i, cmd, &node.log)
            .with_context(|| format!("start zookeeper server {i}"))
    }

    fn procs(&self) -> &Procs {
        &self.procs
    }

    fn procs_mut(&mut self) -> &mut Procs {
        &mut self.procs
    }

    async fn leader(&self) -> Option<usize> {
        sole_leader(&self.modes().await)
    }

    async fn wait_stable(&self, within: Duration) -> anyhow::Result<usize> {
        let this = self;
        poll(
            within,
            "zookeeper ensemble stable with a leader",
            move || async move { this.stable_leader().await },
        )
        .await
    }

    async fn writer(&self, via: &[usize]) -> anyhow::Result<Box<dyn Writer>> {
        if via.is_empty() || via.iter().any(|&i| i >= NODES) {
            bail!("writer via {via:?}: need node numbers below {NODES}");
        }
        Ok(Box::new(ZkWriter::new(self.hosts(via))))
    }

    async fn transfer(&self, _to: usize) -> anyhow::Result<()> {
        Err(anyhow::Error::new(Unsupported(
            "ZooKeeper has no leadership transfer",
        )))
    }

    fn url(&self) -> String {
        format!("zk://{}", self.hosts(&[0, 1, 2]))
    }

    /// A ZooKeeper lease is a session, renewed by any request on it: the renewal here is
    /// `exists("/")` (`check_stat`), the cheapest request there is (a read of the root's stat,
    /// answered by the server the session is connected to, nothing written). The server that
    /// receives it touches the session; a follower forwards its sessions' touches to the
    /// leader in batches with its pings (every tickTime/2), unlike etcd, where every
    /// renewal is a round trip to the leader. Sessions are spread round-robin over the running
    /// servers, one server each; requests go round-robin over the sessions with at most
    /// `concurrency` in flight. Requests answered after the window are not counted. The
    /// sessions are closed afterwards.
    async fn keepalives(&self, load: KeepaliveLoad) -> anyhow::Result<u64> {
        let (leases, concurrency) = (load.leases, load.concurrency);
        if leases > MAX_SESSIONS {
            bail!(
                "{leases} ZooKeeper sessions need {leases} sockets; this harness allows at most \
                 {MAX_SESSIONS} (the process's file descriptor limit is 20000)"
            );
        }
        if leases == 0 || concurrency == 0 {
            return Ok(0);
        }
        let running = self.procs.running();
        if running.is_empty() {
            bail!("no zookeeper server is running");
        }
        let ttl = load.ttl.max(self.timing.min_session());
        let sessions = self
            .open_sessions(leases, ttl, |k| self.hosts(&[running[k % running.len()]]))
            .await?;
        let answered = renew_for(Arc::new(sessions), concurrency, load.window).await;
        Ok(answered)
    }

    async fn hold_elections(
        &self,
        n: usize,
        sessions: usize,
    ) -> anyhow::Result<Box<dyn Send + Sync>> {
        if sessions == 0 {
            bail!("hold {n} elections: need at least one session");
        }
        // Every session may use every running server (the client picks one at random and
        // moves to another if it fails), so the elections survive a server's death.
        let hosts = self.hosts(&self.procs.running());
        let clients = self
            .open_sessions(sessions, ELECTION_SESSION, |_| hosts.clone())
            .await?;
        let clients = Arc::new(clients);
        ensure_persistent(&clients[0], ELECTIONS).await?;
        let held = Arc::clone(&clients);
        bounded(n, BULK_IN_FLIGHT, move |k| {
            let clients = Arc::clone(&held);
            async move { campaign(&clients[k % clients.len()], k).await }
        })
        .await?;
        Ok(Box::new(HeldElections { _clients: clients }))
    }

    /// Both kinds are the same read: `sync` then `getData` of [`READ_PATH`], on a session of
    /// its own connected to server `at` only.
    async fn reader(&self, _kind: ReadKind, at: usize) -> anyhow::Result<Box<dyn Reader>> {
        if at >= NODES {
            bail!("no zookeeper server {at}");
        }
        let hosts = self.hosts(&[at]);
        self.read_znode
            .get_or_try_init(|| async {
                ZkWriter::new(hosts.clone())
                    .put("read", &[7; READ_VALUE_BYTES], Duration::from_secs(10))
                    .await
                    .context("create the znode that readers read")
            })
            .await?;
        let client = connector(WRITER_SESSION)
            .connect(&hosts)
            .await
            .with_context(|| format!("open a zookeeper session on {hosts}"))?;
        Ok(Box::new(ZkReader { client }))
    }
}

/// A reader on one session.
struct ZkReader {
    client: zkc::Client,
}

#[async_trait]
impl Reader for ZkReader {
    /// ZooKeeper's linearizable read as its documentation gives it: `sync`, then `getData`
    /// answered by the same server after the sync (a session's requests are answered in
    /// order). At a follower the sync is a round trip to the leader, which answers once what
    /// it had proposed before is committed, so the follower has caught up. At the leader
    /// itself the sync waits for nothing but the session's own earlier requests: the
    /// leader's commit processor matches syncs only on followers. Neither asks a quorum
    /// whether the leader still leads (ZOOKEEPER-1675).
    async fn read(&self, timeout: Duration) -> anyhow::Result<()> {
        let attempt = async {
            self.client
                .sync(READ_PATH)
                .await
                .with_context(|| format!("sync {READ_PATH}"))?;
            let (data, _) = self
                .client
                .get_data(READ_PATH)
                .await
                .with_context(|| format!("getData {READ_PATH}"))?;
            if data.len() != READ_VALUE_BYTES {
                bail!(
                    "getData {READ_PATH}: {} bytes, not {READ_VALUE_BYTES}",
                    data.len()
                );
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(r) => r,
            Err(_) => bail!("sync + getData {READ_PATH}: no answer within {timeout:?}"),
        }
    }
}

/// The sessions holding elections: dropping the clients closes the sessions (best effort,
/// in the background), and with them their candidacies.
struct HeldElections {
    _clients: Arc<Vec<zkc::Client>>,
}

/// Become the leader of election `k`: ZooKeeper's recipe, an ephemeral sequential `n-` znode
/// under the election's persistent parent (alone in it, so it leads).
async fn campaign(client: &zkc::Client, k: usize) -> anyhow::Result<()> {
    let parent = format!("{ELECTIONS}/e{k}");
    ensure_persistent(client, &parent).await?;
    let open = zkc::Acls::anyone_all();
    client
        .create(
            &format!("{parent}/n-"),
            b"",
            &zkc::CreateMode::EphemeralSequential.with_acls(open),
        )
        .await
        .with_context(|| format!("create a candidacy in {parent}"))?;
    Ok(())
}

/// Create persistent znode `path` unless it exists.
async fn ensure_persistent(client: &zkc::Client, path: &str) -> anyhow::Result<()> {
    let open = zkc::Acls::anyone_all();
    match client
        .create(path, b"", &zkc::CreateMode::Persistent.with_acls(open))
        .await
    {
        Ok(_) | Err(zkc::Error::NodeExists) => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("create {path}"))),
    }
}

/// Send `exists("/")` round-robin over `sessions` with `concurrency` in flight for `window`;
/// the number answered within the window. Dropping the sessions afterwards closes them.
async fn renew_for(sessions: Arc<Vec<zkc::Client>>, concurrency: usize, window: Duration) -> u64 {
    let deadline = Instant::now() + window;
    let next = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicU64::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..concurrency {
        let (sessions, next, answered) = (
            Arc::clone(&sessions),
            Arc::clone(&next),
            Arc::clone(&answered),
        );
        workers.spawn(async move {
            while Instant::now() < deadline {
                let k = next.fetch_add(1, Ordering::Relaxed) % sessions.len();
                let touch = sessions[k].check_stat("/");
                match tokio::time::timeout_at(deadline, touch).await {
                    Ok(Ok(_)) => {
                        answered.fetch_add(1, Ordering::Relaxed);
                    }
                    // A failed request renews nothing; do not spin on a dead connection.
                    Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(5)).await,
                    Err(_) => break,
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    answered.load(Ordering::Relaxed)
}

/// The session settings every client here uses. `fail_eagerly`: connecting tries each host
/// once and fails, rather than retrying until the session timeout, so callers decide.
fn connector(session_timeout: Duration) -> zkc::Connector {
    zkc::Client::connector()
        .with_session_timeout(session_timeout)
        .with_connection_timeout(CONNECTION_TIMEOUT)
        .with_fail_eagerly()
}

/// A writer through a fixed set of servers. The client is connected lazily, on the first
/// put, because a ZooKeeper server accepts sessions only while it is in a quorum; once
/// connected, the client reconnects on its own (to another server of the set) within the
/// session timeout, and a new session is opened if that one expired.
struct ZkWriter {
    hosts: String,
    client: tokio::sync::Mutex<Option<zkc::Client>>,
}

/// Why an attempt to write did not succeed.
enum Attempt {
    /// Worth retrying within the put's timeout (no quorum yet, connection lost, …).
    Retry(anyhow::Error),
    /// Not going to succeed by retrying.
    Fail(anyhow::Error),
}

impl ZkWriter {
    fn new(hosts: String) -> ZkWriter {
        ZkWriter {
            hosts,
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// The writer's client, connecting a new session when there is none or it ended.
    async fn client(&self) -> anyhow::Result<zkc::Client> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            if !client.state().is_terminated() {
                return Ok(client.clone());
            }
        }
        *slot = None;
        let client = connector(WRITER_SESSION)
            .connect(&self.hosts)
            .await
            .with_context(|| format!("connect to zookeeper at {}", self.hosts))?;
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Forget the client if it is still `dead` (its session is over).
    async fn discard(&self, dead: &zkc::Client) {
        let mut slot = self.client.lock().await;
        if slot
            .as_ref()
            .is_some_and(|c| c.session_id() == dead.session_id())
        {
            *slot = None;
        }
    }

    /// One attempt to connect (if needed) and write.
    async fn attempt(&self, path: &str, value: &[u8]) -> Result<(), Attempt> {
        let client = self.client().await.map_err(Attempt::Retry)?;
        match set_or_create(&client, path, value).await {
            Ok(()) => Ok(()),
            Err(
                e @ (zkc::Error::SessionExpired
                | zkc::Error::SessionMoved
                | zkc::Error::ClientClosed),
            ) => {
                self.discard(&client).await;
                Err(Attempt::Retry(
                    anyhow::Error::new(e).context("session ended"),
                ))
            }
            Err(
                e @ (zkc::Error::ConnectionLoss
                | zkc::Error::Timeout
                | zkc::Error::NoHosts
                | zkc::Error::Throttled),
            ) => Err(Attempt::Retry(anyhow::Error::new(e))),
            Err(e) => Err(Attempt::Fail(
                anyhow::Error::new(e).context(format!("write {path}")),
            )),
        }
    }

    /// Attempt until acknowledged; `last` keeps the latest reason for retrying.
    async fn until_acknowledged(
        &self,
        path: &str,
        value: &[u8],
        last: &mut Option<anyhow::Error>,
    ) -> anyhow::Result<()> {
        loop {
            match self.attempt(path, value).await {
                Ok(()) => return Ok(()),
                Err(Attempt::Fail(e)) => return Err(e),
                Err(Attempt::Retry(e)) => {
                    *last = Some(e);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

#[async_trait]
impl Writer for ZkWriter {
    async fn put(&self, key: &str, value: &[u8], timeout: Duration) -> anyhow::Result<()> {
        let path = format!("/tenure-bench-{key}");
        let mut last = None;
        let outcome =
            tokio::time::timeout(timeout, self.until_acknowledged(&path, value, &mut last)).await;
        match outcome {
            Ok(result) => result,
            Err(_) => {
                let why = last.map_or_else(|| "no answer".to_string(), |e| format!("{e:#}"));
                bail!(
                    "write {path} via {}: not acknowledged within {timeout:?} ({why})",
                    self.hosts
                )
            }
        }
    }
}

/// `set_data` of `path`, creating the znode (persistent) first if it does not exist.
async fn set_or_create(client: &zkc::Client, path: &str, value: &[u8]) -> Result<(), zkc::Error> {
    loop {
        match client.set_data(path, value, None).await {
            Ok(_) => return Ok(()),
            Err(zkc::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
        let open = zkc::Acls::anyone_all();
        match client
            .create(path, value, &zkc::CreateMode::Persistent.with_acls(open))
            .await
        {
            Ok(_) => return Ok(()),
            // Created meanwhile by someone else: set it.
            Err(zkc::Error::NodeExists) => {}
            Err(e) => return Err(e),
        }
    }
}

/// A server's role as `srvr` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Leader,
    Follower,
    /// Anything else: looking for a leader, not serving, observer, standalone.
    Other,
}

impl Mode {
    fn parse(reply: &str) -> Mode {
        match reply
            .lines()
            .find_map(|l| l.strip_prefix("Mode:"))
            .map(str::trim)
        {
            Some("leader") => Mode::Leader,
            Some("follower") => Mode::Follower,
            _ => Mode::Other,
        }
    }
}

/// The one node that says it leads, if exactly one does.
fn sole_leader(modes: &[(usize, Option<Mode>)]) -> Option<usize> {
    let mut leaders = modes
        .iter()
        .filter(|(_, m)| *m == Some(Mode::Leader))
        .map(|(i, _)| *i);
    match (leaders.next(), leaders.next()) {
        (Some(leader), None) => Some(leader),
        _ => None,
    }
}

/// The reply of the server on `port` to the `srvr` four-letter word, if it answers in time.
async fn srvr(port: u16) -> Option<String> {
    let ask = async {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(b"srvr").await.ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        Some(reply)
    };
    tokio::time::timeout(STATUS_TIMEOUT, ask)
        .await
        .ok()
        .flatten()
}

/// `java` and the server's classpath, or why ZooKeeper cannot run here.
fn installation() -> anyhow::Result<(PathBuf, String)> {
    let missing = "ZooKeeper is not installed: run scripts/services.sh install-zookeeper";
    let java = which("java").ok_or_else(|| anyhow!("{missing} (no java on PATH)"))?;
    if !Path::new(ZK_JAR).is_file() {
        bail!("{missing} (no {ZK_JAR})");
    }
    // The jar's manifest names its dependencies, but no SLF4J binding.
    let mut classpath = ZK_JAR.to_string();
    if Path::new(SLF4J_SIMPLE_JAR).is_file() {
        classpath = format!("{classpath}:{SLF4J_SIMPLE_JAR}");
    }
    Ok((java, classpath))
}

/// Create `DIR/nI/{zoo.cfg,data/myid}` for the three servers.
fn write_configs(dir: &Path, timing: &Timing) -> anyhow::Result<Vec<Node>> {
    let ports = tenure_procs::free_ports(3 * NODES)?;
    let (client, rest) = ports.split_at(NODES);
    let (quorum, election) = rest.split_at(NODES);
    let servers: String = (0..NODES)
        .map(|i| format!("server.{}=127.0.0.1:{}:{}\n", i + 1, quorum[i], election[i]))
        .collect();
    (0..NODES)
        .map(|i| {
            let node_dir = dir.join(format!("n{}", i + 1));
            let data = node_dir.join("data");
            std::fs::create_dir_all(&data).with_context(|| format!("create {}", data.display()))?;
            let myid = data.join("myid");
            std::fs::write(&myid, format!("{}\n", i + 1))
                .with_context(|| format!("write {}", myid.display()))?;
            let config = node_dir.join("zoo.cfg");
            std::fs::write(&config, config_text(timing, &data, client[i], &servers))
                .with_context(|| format!("write {}", config.display()))?;
            Ok(Node {
                config,
                log: dir.join(format!("n{}.log", i + 1)),
                client_port: client[i],
            })
        })
        .collect()
}

/// One server's `zoo.cfg`.
fn config_text(timing: &Timing, data: &Path, client_port: u16, servers: &str) -> String {
    format!(
        "tickTime={tick}\n\
         initLimit={init}\n\
         syncLimit={sync}\n\
         minSessionTimeout={min}\n\
         maxSessionTimeout=60000\n\
         dataDir={data}\n\
         clientPort={client_port}\n\
         clientPortAddress=127.0.0.1\n\
         admin.enableServer=false\n\
         4lw.commands.whitelist=srvr,mntr\n\
         maxClientCnxns=0\n\
         {servers}",
        tick = timing.tick_ms,
        init = timing.init_limit,
        sync = timing.sync_limit,
        min = timing.min_session().as_millis(),
        data = data.display(),
    )
}

/// The last lines of a server's log, for an error message.
fn log_tail(log: &Path) -> String {
    match std::fs::read_to_string(log) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        }
        Err(e) => format!("(cannot read the log: {e})"),
    }
}
