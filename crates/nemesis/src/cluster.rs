//! Control of a cluster of real `tenure server` processes on loopback: start, SIGSTOP /
//! SIGCONT, SIGKILL / restart, partitions through the server's `POST /debug/block` test hook,
//! `/status`, and the gRPC channels of each node.
//!
//! Every node is started through `tenure-procs` ([`NodeSpec`], [`Proc`]): in a process group
//! of its own and with PR_SET_PDEATHSIG (SIGKILL), so it dies with the nemesis however the
//! nemesis ends; the directory is deleted when the [`Cluster`] is dropped. Only 127.0.0.1 is
//! ever addressed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context as _};
use tenure_procs::{Certs, NodeAddrs, NodeSpec, NodeStatus, Proc};
pub use tenure_transport::http::HttpClient;
use tonic::transport::{Channel, Endpoint};

/// Timing and sizing of the servers.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Nodes (3 or 5).
    pub nodes: usize,
    /// Applied entries between snapshots; small values make followers catch up by
    /// InstallSnapshot.
    pub snapshot_threshold_entries: u64,
    /// How long a server lets a request wait. Longer than the targeted fault, so that a write
    /// in flight at a cut-off leader is still waiting when that leader catches up.
    pub request_timeout_ms: u64,
    /// Fast election on every server (their default); `false` passes `--no-fast-election`.
    pub fast_election: bool,
    /// Extra environment for every server (e.g. `TENURE_INJECT_BUG`).
    pub env: Vec<(String, String)>,
    /// Mutual TLS between the nodes, TLS and client authentication on the gRPC and HTTP
    /// ports (the default policy: the harness is the `admin` client, by certificate).
    pub tls: bool,
    /// Per-principal quotas and shares small enough for `--hostile`'s greedy tenant to
    /// reach them (the harness's own workload stays far below).
    pub tenant_quotas: bool,
}

/// The per-principal limits of [`ServerOptions::tenant_quotas`]: a tenth or less of what
/// the greedy tenant asks for, and far above what the harness's workload holds (which makes
/// about 100 calls a second).
const TENANT_QUOTAS: [(&str, u32); 7] = [
    ("--sessions-per-principal-max", 1000),
    ("--elections-per-principal-max", 200),
    ("--keys-per-principal-max", 100),
    ("--key-bytes-per-principal-max", 65536),
    ("--keepalive-streams-per-principal-max", 400),
    ("--observe-streams-per-principal-max", 100),
    ("--requests-per-second-per-principal-max", 300),
];

/// The principal the harness's certificate names (an admin under the default policy).
const HARNESS_CLIENT: &str = "admin";

/// The state of one node's process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Running.
    Up,
    /// SIGSTOPped.
    Paused,
    /// SIGKILLed, not restarted yet.
    Down,
}

/// A running cluster. Node ids are 1..=n.
pub struct Cluster {
    bin: PathBuf,
    opts: ServerOptions,
    http: HttpClient,
    /// `None` only while being dropped.
    dir: Option<tempfile::TempDir>,
    keep_dir: bool,
    addrs: BTreeMap<u64, NodeAddrs>,
    procs: BTreeMap<u64, Proc>,
    life: BTreeMap<u64, Life>,
    channels: BTreeMap<u64, Channel>,
    /// The cluster's `tenure://` URL, with the harness's certificate under `--tls`.
    url: String,
    /// Which peers each node currently blocks (what `/debug/block` was last told).
    blocked: BTreeMap<u64, BTreeSet<u64>>,
    /// Nodes found exited by themselves when the nemesis came to kill them, for
    /// [`Cluster::exited_by_themselves`].
    exits: Vec<String>,
}

impl Cluster {
    /// Start every node of a fresh cluster.
    pub fn start(bin: &Path, opts: ServerOptions, keep_dir: bool) -> anyhow::Result<Cluster> {
        let addrs: BTreeMap<u64, NodeAddrs> = (1..).zip(NodeAddrs::free(opts.nodes)?).collect();
        let dir = tempfile::Builder::new()
            .prefix("tenure-nemesis-")
            .tempdir()
            .context("create a temporary directory")?;
        let certs = dir.path().join("certs");
        let (grpc_tls, http, query) = if opts.tls {
            issue_certs(&certs, opts.nodes)?
        } else {
            (None, HttpClient::plaintext(), None)
        };
        let hosts: Vec<String> = addrs.values().map(|a| a.client.to_string()).collect();
        let url = match query {
            Some(q) => format!("tenure://{}?{q}", hosts.join(",")),
            None => format!("tenure://{}", hosts.join(",")),
        };
        let channels = addrs
            .iter()
            .map(|(&id, a)| {
                let scheme = if grpc_tls.is_some() { "https" } else { "http" };
                let mut endpoint = Endpoint::from_shared(format!("{scheme}://{}", a.client))
                    .expect("a socket address makes a valid URI")
                    .connect_timeout(Duration::from_millis(300))
                    .tcp_nodelay(true);
                if let Some(tls) = &grpc_tls {
                    endpoint = endpoint
                        .tls_config(tls.clone())
                        .expect("the harness's TLS config is valid");
                }
                (id, endpoint.connect_lazy())
            })
            .collect();
        let mut c = Cluster {
            bin: bin.to_path_buf(),
            opts,
            http,
            url,
            dir: Some(dir),
            keep_dir,
            addrs,
            procs: BTreeMap::new(),
            life: BTreeMap::new(),
            channels,
            blocked: BTreeMap::new(),
            exits: Vec::new(),
        };
        for id in c.ids() {
            c.spawn(id)?;
        }
        Ok(c)
    }

    /// Node ids.
    pub fn ids(&self) -> Vec<u64> {
        self.addrs.keys().copied().collect()
    }

    /// The temporary directory (configs, data, logs).
    pub fn dir(&self) -> &Path {
        self.path()
    }

    fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("the directory lives as long as the cluster")
            .path()
    }

    /// Each node's addresses.
    pub fn addrs(&self) -> &BTreeMap<u64, NodeAddrs> {
        &self.addrs
    }

    /// The process id of every running node.
    pub fn pids(&self) -> BTreeMap<u64, u32> {
        self.procs.iter().map(|(&id, p)| (id, p.pid())).collect()
    }

    /// How to speak HTTP to the nodes (HTTPS as the admin client with `--tls`).
    pub fn http_client(&self) -> HttpClient {
        self.http.clone()
    }

    /// The client library's administration of the cluster ([`tenure::admin`]), as the
    /// harness's principal: for the harness's own steps (the final read-out), not for the
    /// operations under test, which the workload sends once each and records.
    pub fn admin(&self) -> anyhow::Result<tenure::admin::Admin> {
        tenure::admin::Admin::new(&self.url).map_err(|f| anyhow::anyhow!("{}", f.error()))
    }

    /// The gRPC channel of node `id` (connected lazily, reconnecting by itself).
    pub fn channel(&self, id: u64) -> Channel {
        self.channels[&id].clone()
    }

    /// Every node's channel, by id.
    pub fn channels(&self) -> BTreeMap<u64, Channel> {
        self.channels.clone()
    }

    /// The node ids whose gRPC address is `addr` (from a `tenure-leader-addr` hint).
    pub fn id_of_client_addr(&self, addr: &str) -> Option<u64> {
        self.addrs
            .iter()
            .find(|(_, a)| a.client.to_string() == addr)
            .map(|(&id, _)| id)
    }

    fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let mut node = NodeSpec::new(id, &self.path().join(format!("n{id}")), self.addrs.clone());
        node.fault_injection = true;
        node.fast_election = self.opts.fast_election;
        node.tls_dir = self.opts.tls.then(|| self.path().join("certs"));
        node.args = vec![
            "--snapshot-threshold-entries".into(),
            self.opts.snapshot_threshold_entries.to_string(),
            "--request-timeout-ms".into(),
            self.opts.request_timeout_ms.to_string(),
        ];
        if self.opts.tenant_quotas {
            for (flag, value) in TENANT_QUOTAS {
                node.args.extend([flag.to_string(), value.to_string()]);
            }
        }
        let mut cmd = node.command(&self.bin);
        cmd.env("RUST_LOG", "warn")
            .envs(self.opts.env.iter().cloned());
        let p = Proc::spawn(cmd, &self.path().join(format!("n{id}.log")))?;
        self.procs.insert(id, p);
        self.life.insert(id, Life::Up);
        self.blocked.remove(&id);
        Ok(())
    }

    /// Nodes whose process exited without being killed here (a server exits by itself only
    /// when it cannot go on, e.g. its driver thread died): each is marked down and described
    /// with the end of its log. A node is never alive without its driver, so an exit is what
    /// such a death looks like from outside.
    pub fn exited_by_themselves(&mut self) -> Vec<String> {
        let mut exited = std::mem::take(&mut self.exits);
        for id in self.ids() {
            if self.life(id) != Life::Up {
                continue;
            }
            let gone = self.procs.get_mut(&id).is_some_and(|p| !p.running());
            if gone {
                self.procs.remove(&id);
                self.life.insert(id, Life::Down);
                self.blocked.remove(&id);
                exited.push(format!(
                    "node {id} exited by itself; its log ends:\n{}",
                    self.log_tail(id, 8)
                ));
            }
        }
        exited
    }

    /// The state of node `id`'s process.
    pub fn life(&self, id: u64) -> Life {
        self.life.get(&id).copied().unwrap_or(Life::Down)
    }

    /// SIGSTOP node `id`.
    pub fn pause(&mut self, id: u64) -> anyhow::Result<()> {
        if self.life(id) != Life::Up {
            bail!("node {id} is not running");
        }
        self.procs[&id].signal(libc::SIGSTOP)?;
        self.life.insert(id, Life::Paused);
        Ok(())
    }

    /// SIGCONT node `id` (a no-op unless paused).
    pub fn resume(&mut self, id: u64) -> anyhow::Result<()> {
        if self.life(id) == Life::Paused {
            self.procs[&id].resume()?;
            self.life.insert(id, Life::Up);
        }
        Ok(())
    }

    /// SIGKILL node `id` and reap it.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut p) = self.procs.remove(&id) {
            // A death between two checks must not hide behind this kill.
            if self.life(id) == Life::Up && !p.running() {
                self.exits.push(format!(
                    "node {id} exited by itself (found when it was to be killed); its log ends:\n{}",
                    self.log_tail(id, 8)
                ));
            }
            p.kill();
        }
        self.life.insert(id, Life::Down);
        self.blocked.remove(&id);
    }

    /// Start killed node `id` again on its data directory (a no-op if it runs).
    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        if self.life(id) == Life::Down {
            self.spawn(id)?;
        }
        Ok(())
    }

    /// Tell node `id` to drop its traffic to and from `peers` (empty heals). Skipped for a
    /// node that is not up; remembered so that a restarted node starts healed.
    pub async fn block(&mut self, id: u64, peers: &BTreeSet<u64>) -> anyhow::Result<()> {
        let body = peers
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        self.post_block(id, &body, peers.clone()).await
    }

    /// Make the links between node `id` and every other node one-way, at `id`'s end: when
    /// `deaf`, `id` drops what the others send it but its own messages still arrive; else it
    /// is mute, hearing everyone while nothing it sends leaves. Healed by
    /// [`Cluster::heal_network`].
    pub async fn one_way(&mut self, id: u64, deaf: bool) -> anyhow::Result<()> {
        let others: BTreeSet<u64> = self.ids().into_iter().filter(|&o| o != id).collect();
        let list: Vec<String> = others.iter().map(u64::to_string).collect();
        let body = format!("{}={}", if deaf { "in" } else { "out" }, list.join(","));
        self.post_block(id, &body, others).await
    }

    /// `POST /debug/block` with `body` to node `id` (skipped unless it is up), remembering
    /// `peers` as blocked there so that [`Cluster::heal_network`] clears it.
    async fn post_block(
        &mut self,
        id: u64,
        body: &str,
        peers: BTreeSet<u64>,
    ) -> anyhow::Result<()> {
        if self.life(id) != Life::Up {
            return Ok(());
        }
        let (code, text) = self
            .http
            .request(
                self.addrs[&id].http,
                "POST",
                "/debug/block",
                body,
                Duration::from_secs(2),
            )
            .await
            .with_context(|| format!("POST /debug/block to node {id}"))?;
        if code != 200 {
            bail!("POST /debug/block {body:?} to node {id}: {code} {text}");
        }
        self.blocked.insert(id, peers);
        Ok(())
    }

    /// Cut the links between every node of `a` and every node of `b`, at both ends.
    pub async fn cut(&mut self, a: &[u64], b: &[u64]) -> anyhow::Result<()> {
        for (side, other) in [(a, b), (b, a)] {
            for &n in side {
                let mut set = self.blocked.get(&n).cloned().unwrap_or_default();
                set.extend(other.iter().copied().filter(|&o| o != n));
                self.block(n, &set).await?;
            }
        }
        Ok(())
    }

    /// Unblock every link that was blocked (restarted nodes start unblocked).
    pub async fn heal_network(&mut self) -> anyhow::Result<()> {
        let blocked: Vec<u64> = self
            .blocked
            .iter()
            .filter(|(_, peers)| !peers.is_empty())
            .map(|(&id, _)| id)
            .collect();
        for id in blocked {
            self.block(id, &BTreeSet::new()).await?;
        }
        self.blocked.clear();
        Ok(())
    }

    /// Resume paused nodes, restart killed ones, unblock every link.
    pub async fn heal(&mut self) -> anyhow::Result<()> {
        for id in self.ids() {
            self.resume(id)?;
            self.restart(id)?;
        }
        // A restarted node needs a moment before its HTTP port answers.
        for _ in 0..50 {
            if self.heal_network().await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.heal_network().await
    }

    /// `/status` of node `id`, `None` if it does not answer within `within`.
    pub async fn status(&self, id: u64, within: Duration) -> Option<NodeStatus> {
        if self.life(id) != Life::Up {
            return None;
        }
        tenure_procs::status::status(&self.http, self.addrs[&id].http, within).await
    }

    /// The Raft leader: the node that says it leads in the highest term claimed, followed in
    /// that term by a majority of all nodes (itself included). A node outside the
    /// configuration (removed, or cut off) may disagree without hiding the leader.
    pub async fn leader(&self) -> Option<u64> {
        let mut views = Vec::new();
        for id in self.ids() {
            if let Some(s) = self.status(id, Duration::from_millis(300)).await {
                views.push(s);
            }
        }
        let claim = views
            .iter()
            .filter(|v| v.role == "leader")
            .max_by_key(|v| v.term)?;
        let followers = views
            .iter()
            .filter(|v| v.leader == claim.id && v.term == claim.term)
            .count();
        (followers > self.addrs.len() / 2).then_some(claim.id)
    }

    /// Wait until a leader is agreed on, at most `within`.
    pub async fn wait_leader(&self, within: Duration) -> Option<u64> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(l) = self.leader().await {
                return Some(l);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last lines of node `id`'s log.
    pub fn log_tail(&self, id: u64, lines: usize) -> String {
        let text =
            std::fs::read_to_string(self.path().join(format!("n{id}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether node `id` has written a snapshot (the WAL keeps them in its data directory).
    pub fn has_snapshot(&self, id: u64) -> bool {
        fn walk(p: &Path) -> bool {
            std::fs::read_dir(p)
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| {
                    let path = e.path();
                    if path.is_dir() {
                        walk(&path)
                    } else {
                        path.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.contains("snap"))
                    }
                })
        }
        walk(&self.path().join(format!("n{id}")))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Kill (SIGKILL also ends a stopped process) and reap before the directory goes.
        for (_, p) in std::mem::take(&mut self.procs) {
            p.kill();
        }
        if let Some(dir) = self.dir.take() {
            if self.keep_dir {
                eprintln!("tenure nemesis: kept {}", dir.path().display());
                // Forgetting the guard keeps the directory on disk.
                std::mem::forget(dir);
            }
        }
    }
}

/// Whether network namespaces with `tc netem` are usable here (they would allow delay, loss
/// and one-way partitions). Creates and deletes one namespace of its own; touches nothing else.
pub fn probe_netem() -> String {
    let name = format!("tenure-nemesis-probe-{}", std::process::id());
    let run = |args: &[&str]| {
        Command::new("ip").args(args).output().map(|o| {
            (
                o.status.success(),
                String::from_utf8_lossy(&o.stderr).trim().to_string(),
            )
        })
    };
    let result = match run(&["netns", "add", &name]) {
        Err(e) => format!("no `ip` command ({e})"),
        Ok((false, err)) => format!("cannot create a network namespace ({err})"),
        Ok((true, _)) => {
            let r = Command::new("ip")
                .args([
                    "netns", "exec", &name, "tc", "qdisc", "add", "dev", "lo", "root",
                ])
                .args(["netem", "delay", "1ms"])
                .output();
            let verdict = match r {
                Ok(o) if o.status.success() => "namespaces and netem work".to_string(),
                Ok(o) => format!(
                    "namespaces work but netem does not ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                Err(e) => format!("namespaces work but `tc` cannot run ({e})"),
            };
            let _ = run(&["netns", "del", &name]);
            verdict
        }
    };
    result
}

/// The client certificate of `--hostile`'s greedy tenant, a principal of its own.
pub const GREEDY_CLIENT: &str = "greedy";

/// A CA and certificates for nodes 1..=`nodes`, the harness's client and the greedy tenant
/// in `dir`, as `tenure certs` writes them; the harness's gRPC and HTTP client TLS, and the
/// query of a `tenure://` URL with its files.
#[allow(clippy::type_complexity)]
fn issue_certs(
    dir: &Path,
    nodes: usize,
) -> anyhow::Result<(
    Option<tonic::transport::ClientTlsConfig>,
    HttpClient,
    Option<String>,
)> {
    let certs = Certs::issue(
        dir,
        "tenure",
        1..=nodes as u64,
        &[HARNESS_CLIENT, GREEDY_CLIENT],
    )?;
    Ok((
        Some(certs.grpc(Some(HARNESS_CLIENT))?),
        certs.http(Some(HARNESS_CLIENT))?,
        Some(certs.url_query(HARNESS_CLIENT)),
    ))
}
