//! A cluster of real `tenure server` processes for one test: started on fresh loopback ports
//! and a temporary directory, TLS on by default, one at a time ([`ClusterLock`]); its nodes
//! killed, paused, resumed, stopped and restarted; their `/status`, `/metrics` and logs read;
//! gRPC channels to each. Dropping it kills every node and checks that no log holds a
//! credential.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tenure_procs::{Certs, NodeAddrs, NodeSpec, NodeStatus, Proc, Timing};
use tenure_proto::v1;
use tenure_transport::http::HttpClient;
use tonic::transport::{Channel, Endpoint};

use crate::auth::AuthFile;
use crate::binary::tenure_binary;
use crate::grpc::Client;
use crate::lock::ClusterLock;
use crate::{ms, secret, secs, CLUSTER_ID};

/// Options of a test cluster.
#[derive(Clone, Debug)]
pub struct Options {
    pub nodes: usize,
    /// TLS on every port (the default).
    pub tls: bool,
    pub fault_injection: bool,
    pub timing: Timing,
    /// More `tenure server` flags.
    pub extra_args: Vec<String>,
    /// More environment variables for every node.
    pub env: Vec<(String, String)>,
    /// The host the `--node` flags name instead of `127.0.0.1` (see [`Options::node_host`]).
    pub node_host: Option<String>,
    /// Credentials no node may log (see [`Cluster::forbid_in_logs`]).
    pub forbidden_in_logs: Vec<String>,
}

impl Options {
    /// `n` nodes with the standard timing profile.
    pub fn nodes(n: usize) -> Options {
        Options {
            nodes: n,
            tls: true,
            fault_injection: false,
            timing: Timing::DEFAULT,
            extra_args: Vec::new(),
            env: Vec::new(),
            node_host: None,
            forbidden_in_logs: Vec::new(),
        }
    }

    /// Name every node's addresses in `--node` by `host` (a name such as `localhost` that
    /// resolves to 127.0.0.1) instead of by IP. The harness itself still reaches the nodes
    /// at 127.0.0.1 ([`Cluster::addrs`]).
    pub fn node_host(mut self, host: &str) -> Options {
        self.node_host = Some(host.to_string());
        self
    }

    /// An environment variable for every node.
    pub fn env(mut self, key: &str, value: &str) -> Options {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// TLS off: every port plaintext (allowed on loopback).
    pub fn plaintext(mut self) -> Options {
        self.tls = false;
        self
    }

    /// Serve `POST /debug/block`.
    pub fn fault_injection(mut self) -> Options {
        self.fault_injection = true;
        self
    }

    /// Another timing profile.
    pub fn timing(mut self, election_timeout_ms: u64, heartbeat_ms: u64, tick_ms: u64) -> Options {
        self.timing = Timing {
            tick_ms,
            election_timeout_ms,
            heartbeat_ms,
        };
        self
    }

    /// Extra `tenure server` flags.
    pub fn args(mut self, args: &[&str]) -> Options {
        self.extra_args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Authorize with `auth` (`--auth-file`); no node may log its tokens.
    pub fn auth_file(mut self, auth: &AuthFile) -> Options {
        self.forbidden_in_logs.extend(auth.tokens.values().cloned());
        self.args(&["--auth-file", &auth.path().display().to_string()])
    }
}

/// A running test cluster of `tenure server` processes.
pub struct Cluster {
    opts: Options,
    dir: tempfile::TempDir,
    addrs: BTreeMap<u64, NodeAddrs>,
    children: BTreeMap<u64, Proc>,
    channels: BTreeMap<u64, Channel>,
    started: Instant,
    /// The client side of TLS, when on.
    tls: Option<ClientTls>,
    /// More credentials no log may hold (see [`Cluster::forbid_in_logs`]).
    forbidden: Vec<String>,
    /// Nodes added with [`Cluster::add_joining_node`]: started with `--join`, and knowing
    /// only the nodes that existed when they were added (as an operator would start them).
    joining: BTreeMap<u64, Vec<u64>>,
    _lock: ClusterLock,
}

/// Node ids certificates are issued for: the cluster's, and room for nodes added later.
const CERTIFIED_NODES: u64 = 9;

/// The client principal the harness speaks as: the servers' default admin.
pub const ADMIN_CLIENT: &str = "admin";
/// A client principal without admin rights, for the tests that check refusals.
pub const APP_CLIENT: &str = "app";

/// What the harness needs to speak TLS to a cluster.
#[derive(Clone)]
pub struct ClientTls {
    /// The directory `tenure certs` would have written.
    pub dir: PathBuf,
    certs: Certs,
    grpc: tonic::transport::ClientTlsConfig,
    http: HttpClient,
}

impl ClientTls {
    /// Issue into `dir` what the harness's clusters use: a CA, certificates for nodes 1 to
    /// 9 of cluster [`CLUSTER_ID`], and for the clients [`ADMIN_CLIENT`] and [`APP_CLIENT`].
    pub fn issue(dir: &Path) -> ClientTls {
        let clients = [ADMIN_CLIENT, APP_CLIENT];
        let certs = Certs::issue(dir, CLUSTER_ID, 1..=CERTIFIED_NODES, &clients)
            .expect("issue test certificates");
        ClientTls {
            dir: dir.to_path_buf(),
            grpc: certs
                .grpc(Some(ADMIN_CLIENT))
                .expect("the harness's gRPC TLS"),
            http: certs
                .http(Some(ADMIN_CLIENT))
                .expect("the harness's HTTP TLS"),
            certs,
        }
    }
}

impl Cluster {
    /// Start every node (not waiting for a leader).
    pub fn start(opts: Options) -> Cluster {
        // Build (or find) the binary before taking the lock: building holds no cluster.
        tenure_binary();
        let lock = ClusterLock::acquire();
        let free = NodeAddrs::free(opts.nodes).expect("free loopback ports");
        let addrs: BTreeMap<u64, NodeAddrs> = (1..).zip(free).collect();
        let dir = tempfile::Builder::new()
            .prefix("tenure-test-")
            .tempdir()
            .expect("create a temporary directory");
        let tls = opts
            .tls
            .then(|| ClientTls::issue(&dir.path().join("certs")));
        let mut cluster = Cluster {
            tls,
            forbidden: opts.forbidden_in_logs.clone(),
            opts,
            dir,
            addrs,
            children: BTreeMap::new(),
            channels: BTreeMap::new(),
            started: Instant::now(),
            joining: BTreeMap::new(),
            _lock: lock,
        };
        for id in cluster.ids() {
            cluster.start_node(id);
        }
        cluster
    }

    /// Every node id.
    pub fn ids(&self) -> Vec<u64> {
        self.addrs.keys().copied().collect()
    }

    /// Every node id but `except`.
    pub fn others(&self, except: &[u64]) -> Vec<u64> {
        self.ids()
            .into_iter()
            .filter(|id| !except.contains(id))
            .collect()
    }

    pub fn addrs(&self, id: u64) -> NodeAddrs {
        self.addrs[&id]
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    fn log_path(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}.log"))
    }

    /// Everything node `id` has logged so far (all its lives).
    pub fn log(&self, id: u64) -> String {
        std::fs::read_to_string(self.log_path(id)).unwrap_or_default()
    }

    /// Start (or restart) node `id` with its data directory and addresses.
    pub fn start_node(&mut self, id: u64) {
        assert!(
            !self.children.contains_key(&id),
            "node {id} is already running"
        );
        self.note(id, "starting");
        let knows = |n: &u64| match self.joining.get(&id) {
            Some(known) => *n == id || known.contains(n),
            None => !self.joining.contains_key(n),
        };
        let members = self.addrs.iter().filter(|(n, _)| knows(n));
        let mut node = NodeSpec::new(
            id,
            &self.data_dir(id),
            members.map(|(n, a)| (*n, *a)).collect(),
        );
        node.host = self.opts.node_host.clone();
        node.join = self.joining.contains_key(&id);
        node.timing = Some(self.opts.timing);
        node.fault_injection = self.opts.fault_injection;
        node.tls_dir = self.tls.as_ref().map(|t| t.dir.clone());
        node.args = self.opts.extra_args.clone();
        let mut cmd = node.command(tenure_binary());
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v))).env(
            "RUST_LOG",
            std::env::var("TENURE_TEST_LOG").unwrap_or_else(|_| "info".into()),
        );
        let child = Proc::spawn(cmd, &self.log_path(id))
            .unwrap_or_else(|e| panic!("cannot start {}: {e:#}", tenure_binary().display()));
        self.children.insert(id, child);
    }

    /// Start a new node `id` (certificates exist for ids up to 9) on fresh ports with
    /// `--join`: it bootstraps nothing and waits to be added (`AddMember` with the returned
    /// addresses). Its `--node` flags name the nodes that exist now and itself; the running
    /// nodes are not told about it (no restarts): they learn its addresses from the log.
    pub fn add_joining_node(&mut self, id: u64) -> NodeAddrs {
        assert!(!self.addrs.contains_key(&id), "node {id} exists");
        assert!(
            id <= CERTIFIED_NODES,
            "certificates exist for nodes 1..={CERTIFIED_NODES}"
        );
        let addrs = NodeAddrs::free(1).expect("free loopback ports")[0];
        let known = self.ids();
        self.addrs.insert(id, addrs);
        self.joining.insert(id, known);
        self.start_node(id);
        addrs
    }

    /// Whether node `id` has a running (or stopped) process.
    pub fn is_running(&self, id: u64) -> bool {
        self.children.contains_key(&id)
    }

    /// Node `id`'s resident memory in KiB (`VmRSS`).
    pub fn rss_kib(&self, id: u64) -> u64 {
        tenure_procs::process::rss_bytes(self.proc(id).pid()).expect("read the node's VmRSS") / 1024
    }

    fn proc(&self, id: u64) -> &Proc {
        self.children
            .get(&id)
            .unwrap_or_else(|| panic!("node {id} is not running"))
    }

    /// `kill -9` node `id` and reap it.
    pub fn kill(&mut self, id: u64) {
        self.children
            .remove(&id)
            .unwrap_or_else(|| panic!("node {id} is not running"))
            .kill();
        self.note(id, "SIGKILL");
    }

    /// `kill -STOP` node `id`, and wait until every one of its threads has stopped (a
    /// request that arrives meanwhile must not be served: "paused" means frozen).
    pub fn pause(&mut self, id: u64) {
        self.proc(id)
            .pause(secs(10))
            .unwrap_or_else(|e| panic!("pause node {id}: {e:#}"));
        self.note(id, "SIGSTOP");
    }

    /// `kill -CONT` node `id`.
    pub fn resume(&mut self, id: u64) {
        self.proc(id)
            .resume()
            .unwrap_or_else(|e| panic!("resume node {id}: {e:#}"));
        self.note(id, "SIGCONT");
    }

    /// SIGTERM node `id` and wait for it to exit by itself; returns its exit status.
    pub async fn terminate(&mut self, id: u64, within: Duration) -> std::process::ExitStatus {
        let p = self
            .children
            .remove(&id)
            .unwrap_or_else(|| panic!("node {id} is not running"));
        match p.terminate(within).await {
            Ok(status) => {
                self.note(id, "exited after SIGTERM");
                status
            }
            Err(p) => {
                self.children.insert(id, p);
                panic!("node {id} did not exit within {within:?} of SIGTERM")
            }
        }
    }

    /// Waits for node `id`'s process to exit by itself; returns its exit status, or `None` if
    /// it still runs after `within`.
    pub async fn wait_exit(
        &mut self,
        id: u64,
        within: Duration,
    ) -> Option<std::process::ExitStatus> {
        let status = self.children.get_mut(&id)?.wait_exit(within).await?;
        self.children.remove(&id);
        self.note(id, "exited by itself");
        Some(status)
    }

    fn note(&self, id: u64, what: &str) {
        if let Ok(mut log) = tenure_procs::process::open_log(&self.log_path(id)) {
            let _ = writeln!(
                log,
                "==== harness: {what} node {id} at +{:?}",
                self.started.elapsed()
            );
        }
    }

    /// `/status` of node `id`, or `None` if it does not answer within 500 ms.
    pub async fn status(&self, id: u64) -> Option<NodeStatus> {
        tenure_procs::status::status(&self.http_client(), self.addrs[&id].http, ms(500)).await
    }

    /// `/status` of node `id`, which must answer.
    pub async fn status_of(&self, id: u64) -> NodeStatus {
        self.status(id)
            .await
            .unwrap_or_else(|| panic!("node {id} does not answer /status"))
    }

    /// `/metrics` of node `id`.
    pub async fn metrics(&self, id: u64) -> String {
        let (code, body) = self
            .http(id, "GET", "/metrics", "", secs(2))
            .await
            .unwrap_or_else(|e| panic!("GET /metrics on node {id}: {e}"));
        assert_eq!(code, 200, "GET /metrics on node {id}: {body}");
        body
    }

    /// One metric of node `id`.
    pub async fn metric(&self, id: u64, name: &str) -> f64 {
        let text = self.metrics(id).await;
        tenure_procs::status::metric_value(&text, name)
            .unwrap_or_else(|| panic!("node {id} has no metric {name}"))
    }

    /// `POST /debug/block` on node `id`: drop its traffic to and from `peers`.
    pub async fn block(&self, id: u64, peers: &[u64]) {
        let body = peers
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let (code, text) = self
            .http(id, "POST", "/debug/block", &body, secs(2))
            .await
            .unwrap_or_else(|e| panic!("POST /debug/block on node {id}: {e}"));
        assert_eq!(code, 200, "POST /debug/block {body:?} on node {id}: {text}");
    }

    /// Wait until the nodes in `among` agree on one leader (also in `among`) and one term;
    /// returns `(leader, term)`.
    pub async fn wait_for_leader(&self, among: &[u64], within: Duration) -> (u64, u64) {
        let nodes: Vec<(u64, std::net::SocketAddr)> =
            among.iter().map(|id| (*id, self.addrs[id].http)).collect();
        tenure_procs::status::wait_for_leader(&self.http_client(), &nodes, within)
            .await
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Wait until `cond` holds for the status of node `id`.
    pub async fn wait_status(
        &self,
        id: u64,
        within: Duration,
        what: &str,
        cond: impl Fn(&NodeStatus) -> bool,
    ) -> NodeStatus {
        let deadline = Instant::now() + within;
        loop {
            let s = self.status(id).await;
            if let Some(s) = &s {
                if cond(s) {
                    return s.clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "node {id}: {what} did not happen within {within:?}; last status {s:?}"
            );
            tokio::time::sleep(ms(20)).await;
        }
    }

    /// Wait until every running node in `ids` has applied everything the leader had
    /// committed when the wait began, and follows `leader` (or a leader of a later term:
    /// on a loaded machine a heartbeat can come late enough for an election).
    pub async fn wait_caught_up(&self, leader: u64, ids: &[u64], within: Duration) {
        let at_start = self.status_of(leader).await;
        let target = at_start.commit_index;
        for id in ids {
            self.wait_status(*id, within, &format!("applying up to {target}"), |s| {
                s.applied_index >= target
                    && (s.leader == leader || (s.leader != 0 && s.term > at_start.term))
            })
            .await;
        }
    }

    /// Move Raft leadership to node `to` (the admin's TransferLeadership at the current
    /// leader, repeated until it takes) and wait until every running node agrees that `to`
    /// leads; returns the term.
    pub async fn move_leadership(&mut self, to: u64, within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        let running: Vec<u64> = self
            .ids()
            .into_iter()
            .filter(|id| self.is_running(*id))
            .collect();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (leader, term) = self.wait_for_leader(&running, left.max(secs(1))).await;
            if leader == to {
                return term;
            }
            assert!(
                Instant::now() < deadline,
                "leadership did not move from node {leader} to node {to} within {within:?}"
            );
            let ch = self.channel(leader);
            let _ = v1::cluster_client::ClusterClient::new(ch)
                .transfer_leadership(v1::TransferLeadershipRequest { to })
                .await;
            // The transfer takes about one round trip; the status poll above waits for it.
            let _ = tokio::time::timeout(secs(2), async {
                while !self.status(to).await.is_some_and(|s| s.is_leader()) {
                    tokio::time::sleep(ms(20)).await;
                }
            })
            .await;
        }
    }

    /// A gRPC channel to node `id` whose requests time out after 3 s.
    pub fn channel(&mut self, id: u64) -> Channel {
        if let Some(c) = self.channels.get(&id) {
            return c.clone();
        }
        let c = self.channel_with_timeout(id, secs(3));
        self.channels.insert(id, c.clone());
        c
    }

    /// A new gRPC channel to node `id` (its own connection) with a request timeout.
    pub fn channel_with_timeout(&self, id: u64, timeout: Duration) -> Channel {
        self.endpoint(id).timeout(timeout).connect_lazy()
    }

    /// A new gRPC channel to node `id` without a request timeout, for streams and calls
    /// that wait (Campaign); wrap calls in `tokio::time::timeout`.
    pub fn channel_without_timeout(&self, id: u64) -> Channel {
        self.endpoint(id).connect_lazy()
    }

    /// A client that follows the leader among all nodes.
    pub fn client(&mut self) -> Client {
        let ids = self.ids();
        self.client_for(&ids)
    }

    /// A client that follows the leader among `ids` only.
    pub fn client_for(&mut self, ids: &[u64]) -> Client {
        Client::new(ids.iter().map(|id| (*id, self.channel(*id))).collect())
    }
}

impl Cluster {
    /// The client side of TLS, if the cluster runs with it.
    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_ref()
    }

    /// A `tenure://` URL for the `tenure` client library and CLI: every node, with the
    /// CA and the harness's client certificate when TLS is on.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.addrs.values().map(|a| a.client.to_string()).collect();
        let mut url = format!("tenure://{}", hosts.join(","));
        if let Some(tls) = &self.tls {
            url.push('?');
            url.push_str(&tls.certs.url_query(ADMIN_CLIENT));
        }
        url
    }

    /// The harness's client of the nodes' HTTP ports: over TLS as [`ADMIN_CLIENT`] when TLS
    /// is on.
    pub fn http_client(&self) -> HttpClient {
        match &self.tls {
            Some(tls) => tls.http.clone(),
            None => HttpClient::plaintext(),
        }
    }

    /// An HTTP request to node `id`'s HTTP port (over TLS when on).
    pub async fn http(
        &self,
        id: u64,
        method: &str,
        path: &str,
        body: &str,
        within: Duration,
    ) -> std::io::Result<(u16, String)> {
        Ok(self
            .http_client()
            .request(self.addrs[&id].http, method, path, body, within)
            .await?)
    }

    /// A GET of `path` on node `id`'s HTTP port over TLS as client principal `client` (or
    /// with no client certificate), with `authorization` as that header if given.
    pub async fn http_get_as(
        &self,
        id: u64,
        path: &str,
        client: Option<&str>,
        authorization: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        let mut http = self.http_as(client);
        if let Some(a) = authorization {
            http = http.with_header("Authorization", a);
        }
        Ok(http.get(self.addrs[&id].http, path, secs(5)).await?)
    }

    /// Writes `head` (a request line and headers, up to and including the blank line) to
    /// node `id`'s HTTP port over TLS as client principal `client` (or with no client
    /// certificate), sends no body whatever its headers announce, and reads the answer.
    pub async fn http_head_only_as(
        &self,
        id: u64,
        client: Option<&str>,
        head: &str,
        within: Duration,
    ) -> std::io::Result<(u16, String)> {
        Ok(self
            .http_as(client)
            .send_raw(self.addrs[&id].http, head.as_bytes(), within)
            .await?)
    }

    /// A client of the HTTP ports over TLS as client principal `client`, or with no client
    /// certificate.
    fn http_as(&self, client: Option<&str>) -> HttpClient {
        let tls = self.tls.as_ref().expect("this needs TLS on");
        tls.certs.http(client).expect("a client of the HTTP ports")
    }

    /// A channel to node `id` over TLS as client principal `client` (its certificate from
    /// the cluster's CA), or with no client certificate at all.
    pub fn channel_as(&self, id: u64, client: Option<&str>) -> Channel {
        let tls = self.tls.as_ref().expect("channel_as needs TLS on");
        let config = tls.certs.grpc(client).expect("the client's gRPC TLS");
        Endpoint::from_shared(format!("https://{}", self.addrs[&id].client))
            .expect("a socket address makes a valid URI")
            .connect_timeout(ms(500))
            .timeout(secs(5))
            .tls_config(config)
            .expect("a valid TLS config")
            .connect_lazy()
    }

    fn endpoint(&self, id: u64) -> Endpoint {
        let addr = self.addrs[&id].client;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .expect("a socket address makes a valid URI")
            .connect_timeout(ms(500))
            .tcp_nodelay(true);
        match &self.tls {
            Some(tls) => endpoint
                .tls_config(tls.grpc.clone())
                .expect("the harness's TLS config is valid"),
            None => endpoint,
        }
    }
}

impl Cluster {
    /// Also refuse `credential` (a bearer token, a password) in any node's log.
    pub fn forbid_in_logs(&mut self, credential: &str) {
        self.forbidden.push(credential.to_string());
    }

    /// No node logged a session secret of the harness, a private key's body, or anything
    /// given to [`Cluster::forbid_in_logs`], in any common encoding.
    pub fn assert_logs_hold_no_credentials(&self) {
        let secret = secret();
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        let mut forbidden = vec![hex.clone(), hex.to_uppercase(), format!("{secret:?}")];
        forbidden.extend(self.forbidden.iter().cloned());
        if let Some(tls) = &self.tls {
            let keys = self
                .ids()
                .into_iter()
                .map(tenure_transport::certs::files::node_key)
                .chain([ADMIN_CLIENT, APP_CLIENT].map(tenure_transport::certs::files::client_key));
            for key in keys {
                let Ok(pem) = std::fs::read_to_string(tls.dir.join(key)) else {
                    continue;
                };
                forbidden.extend(
                    pem.lines()
                        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
                        .map(str::to_string),
                );
            }
        }
        for id in self.ids() {
            let log = self.log(id);
            for f in &forbidden {
                assert!(
                    !log.contains(f.as_str()),
                    "node {id}'s log holds a credential: {f:?}"
                );
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (id, child) in std::mem::take(&mut self.children) {
            // SIGKILL ends a stopped process too.
            child.kill();
            self.note(id, "cleanup SIGKILL");
        }
        if !std::thread::panicking() {
            // Every test that runs a cluster checks its logs: this is how the whole suite
            // shows that no credential is ever logged.
            self.assert_logs_hold_no_credentials();
        }
        if std::thread::panicking() {
            for id in self.ids() {
                let text = std::fs::read_to_string(self.log_path(id)).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(60)..];
                eprintln!(
                    "---- last {} lines of node {id}'s log ----\n{}",
                    tail.len(),
                    tail.join("\n")
                );
            }
        }
        if std::env::var_os("TENURE_KEEP_TEST_DIRS").is_some() {
            let path =
                std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir")).keep();
            eprintln!("kept the cluster's directory: {}", path.display());
        }
    }
}
