//! The one harness of the real-process tests (the server's, the client library's contract,
//! the CLI's): it starts `tenure server` child processes
//! on loopback ports with a temporary data directory each, signals them (SIGKILL, SIGSTOP,
//! SIGCONT, SIGTERM), reads their HTTP `/status` and `/metrics`, and talks to them over the
//! gRPC API. Every wait has a deadline; dropping a [`Cluster`] kills every node it started.
//!
//! **Which binary.** Tests outside `tenure-cli` cannot use `CARGO_BIN_EXE_tenure` (the binary
//! belongs to `tenure-cli`), so the harness uses `<target>/<profile>/tenure` next to the test
//! binary itself. If that file is older than any source that goes into it (or missing), the
//! harness first runs `cargo build -p tenure-cli --bin tenure` into the same target directory
//! and profile; on a clean clone the first test pays for that build. `cargo test --workspace`
//! and `cargo nextest run --workspace` build the binary themselves (`tenure-cli` has
//! integration tests), so there the harness finds it fresh and builds nothing: a build would
//! re-link the file while `tenure-cli`'s tests may be starting it. Set
//! `TENURE_BIN=/path/to/tenure` to test a given binary without any of this.
//!
//! **One cluster at a time.** The tests are timing-sensitive (150 ms election timeouts) and
//! the machine may have two cores, so a cluster takes an exclusive `flock` on a file in the
//! temporary directory for its lifetime. That serializes clusters across the threads of
//! `cargo test` and across the processes of `cargo nextest` alike.
//!
//! **TLS by default.** Every cluster runs with TLS on (certificates issued into its
//! temporary directory, as `tenure certs` does): mutual TLS between peers, the gRPC and
//! HTTP ports over TLS, and this harness's channels and HTTP client verifying the cluster's
//! CA. `Options::plaintext()` turns it off for the tests that need raw plaintext access.
//!
//! **Debugging.** When a test panics, the tail of every node's log is printed. Set
//! `TENURE_KEEP_TEST_DIRS=1` to keep the data directories and full logs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::os::unix::io::AsRawFd;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tenure_proto::v1;
pub use tenure_proto::Reason;
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

/// The timing profile every test uses (the issue's numbers).
pub const ELECTION_TIMEOUT_MS: u64 = 150;
/// Heartbeat interval.
pub const HEARTBEAT_MS: u64 = 30;
/// Core tick.
pub const TICK_MS: u64 = 10;

/// The cluster id the CLI uses by default; raw peer frames must present it.
pub const CLUSTER_ID: &str = "tenure";

/// The secret of every session the harness's clients are granted: requests acting for a
/// session must present it.
pub fn secret() -> Vec<u8> {
    tenure_proto::process_session_secret()
}

/// Shorthand for durations in tests.
pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Shorthand for durations in tests.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ------------------------------------------------------------------------------------------
// The binary.

/// The `tenure` binary to run, found up to date or built, once per test process.
pub fn tenure_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("TENURE_BIN") {
            let bin = PathBuf::from(bin);
            assert!(bin.is_file(), "TENURE_BIN={} is not a file", bin.display());
            return bin;
        }
        // The test binary lives at <target>/<profile>/deps/<name>-<hash>.
        let exe = std::env::current_exe().expect("the test binary knows its path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lives in <target>/<profile>/deps")
            .to_path_buf();
        let bin = profile_dir.join("tenure");
        // One checker-or-builder at a time, so that parallel test processes do not all build
        // (each build re-links the binary, which another process may be starting).
        let _lock = FileLock::acquire("tenure-server-tests-build.lock");
        let workspace = Path::new(
            &std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests"),
        )
        .join("../..");
        if is_newer_than_sources(&bin, &workspace) {
            return bin;
        }
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("profile directory name is UTF-8")
            .to_string();
        let target_dir = profile_dir
            .parent()
            .expect("a profile directory has a parent");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "tenure-cli", "--bin", "tenure"])
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(&workspace);
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        let (code, _, stderr) = outcome(&mut cmd);
        assert_eq!(
            code,
            Some(0),
            "building the tenure binary failed ({cmd:?}); set TENURE_BIN to use a prebuilt one\n{stderr}"
        );
        assert!(
            bin.is_file(),
            "cargo built tenure but {} does not exist",
            bin.display()
        );
        bin
    })
}

/// Whether `bin` exists and was written after every file that goes into it: each crate's
/// `Cargo.toml`, `build.rs`, `src/` and `proto/`, and the workspace's `Cargo.toml` and
/// `Cargo.lock` (tests, benches and examples do not go into the binary). Cargo decides
/// freshness by the same modification times.
fn is_newer_than_sources(bin: &Path, workspace: &Path) -> bool {
    fn newest(path: &Path, newest_seen: &mut std::time::SystemTime) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
                newest(&entry.path(), newest_seen);
            }
        } else if let Ok(m) = meta.modified() {
            *newest_seen = (*newest_seen).max(m);
        }
    }
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    let mut sources = std::time::UNIX_EPOCH;
    newest(&workspace.join("Cargo.toml"), &mut sources);
    newest(&workspace.join("Cargo.lock"), &mut sources);
    for krate in std::fs::read_dir(workspace.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for part in ["Cargo.toml", "build.rs", "src", "proto"] {
            newest(&krate.path().join(part), &mut sources);
        }
    }
    built >= sources
}

/// A finished process's exit code, stdout and stderr (as text).
pub fn outcome(cmd: &mut Command) -> (Option<i32>, String, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tenure server` as node 1 of a one-node cluster whose addresses nobody can use, with
/// `data_dir` and then `args`, run to its exit: for the tests of what a server refuses at
/// start (it must stop before it binds anything).
pub fn server_refusing_to_start(data_dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    outcome(
        Command::new(tenure_binary())
            .args(["server", "--id", "1", "--node"])
            .arg("1=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
            .arg("--data-dir")
            .arg(data_dir)
            .args(args),
    )
}

/// An auth file (`--auth-file`) in a temporary directory of its own, with a new bearer
/// token for each principal it names under `[tokens]`, and room beside it for the token
/// files a test hands to clients. Removed when dropped.
pub struct AuthFile {
    dir: tempfile::TempDir,
    tokens: BTreeMap<String, String>,
}

impl AuthFile {
    /// `policy` (the file's principals, roles and grants) and a `[tokens]` table with a
    /// token for each of `principals`, each made as an operator makes one (`tenure token`).
    pub fn new(policy: &str, principals: &[&str]) -> AuthFile {
        let mut text = policy.to_string();
        let mut tokens = BTreeMap::new();
        if !principals.is_empty() {
            text.push_str("\n[tokens]\n");
        }
        for principal in principals {
            let (code, token, said) =
                outcome(Command::new(tenure_binary()).args(["token", principal]));
            assert_eq!(code, Some(0), "tenure token {principal}: {said}");
            // Its stderr ends with the line for the auth file.
            let line = said
                .lines()
                .find(|l| l.starts_with(&format!("{principal} = ")))
                .unwrap_or_else(|| {
                    panic!("tenure token {principal} gave no auth-file line: {said}")
                });
            text.push_str(line);
            text.push('\n');
            tokens.insert(principal.to_string(), token.trim().to_string());
        }
        let dir = tempfile::tempdir().expect("create a temporary directory");
        std::fs::write(dir.path().join("auth.toml"), text).expect("write the auth file");
        AuthFile { dir, tokens }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("auth.toml")
    }

    /// The bearer token of `principal`.
    pub fn token(&self, principal: &str) -> &str {
        self.tokens
            .get(principal)
            .unwrap_or_else(|| panic!("the auth file has no token for {principal}"))
    }

    /// `contents` as the file `name` beside the auth file; returns its path.
    pub fn beside(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        path
    }
}

/// A TCP connection to `to` from 127.0.0.`last_octet` (Linux routes all of 127/8 to
/// loopback), so that a test's sockets count against a per-address limit of their own.
pub async fn connect_from(last_octet: u8, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, last_octet)),
            0,
        ))
        .expect("bind a loopback source address");
    socket.connect(to).await.expect("TCP connect")
}

/// Reads `stream` until its peer closes it (or resets it), for at most `within`; whether
/// it was closed in time.
pub async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 256];
    let closed = async {
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                return;
            }
        }
    };
    tokio::time::timeout(within, closed).await.is_ok()
}

/// CRC-32C (Castagnoli), bit by bit: the checksum of peer frames, for tests that forge
/// them, computed without the code under test.
pub fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

// ------------------------------------------------------------------------------------------
// Ports and the cluster lock.

/// Ports are drawn below the kernel's ephemeral range (32768 and up on Linux), so that an
/// outgoing connection can never take the port of a node that is down for a restart.
const PORT_RANGE: std::ops::Range<u16> = 20_000..32_000;

/// `n` distinct loopback ports that were free a moment ago (for clusters run in-process).
pub fn free_ports(n: usize) -> Vec<u16> {
    // A cheap pseudo-random walk seeded by the clock and the process id; each candidate is
    // checked by binding it. Held listeners keep the candidates distinct until all are found.
    let mut state = (std::process::id() as u64) << 32
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    let span = u64::from(PORT_RANGE.end - PORT_RANGE.start);
    let mut held = Vec::new();
    let mut ports = Vec::new();
    let mut attempts = 0;
    while ports.len() < n {
        attempts += 1;
        assert!(attempts < 10_000, "cannot find {n} free loopback ports");
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let port = PORT_RANGE.start + ((state >> 33) % span) as u16;
        if let Ok(l) = StdTcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
            ports.push(port);
        }
    }
    ports
}

/// An exclusive `flock` on a file in the temporary directory, held until dropped; it works
/// across the threads of one test process and across test processes alike.
struct FileLock(#[allow(dead_code)] File); // Held for its lock, never read.

impl FileLock {
    fn acquire(name: &str) -> FileLock {
        let path = std::env::temp_dir().join(name);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        loop {
            // SAFETY: flock on a descriptor we own; it blocks until the lock is ours and is
            // released when the file is closed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::Interrupted,
                "flock {}: {e}",
                path.display()
            );
        }
        FileLock(file)
    }
}

// ------------------------------------------------------------------------------------------
// HTTP.

/// A tiny HTTP/1.1 client: one request per connection, whole exchange within `within`.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    within: Duration,
) -> std::io::Result<(u16, String)> {
    http_over(None, addr, method, path, body, "", within).await
}

/// [`http`], over TLS with `tls` when given, with `headers` (each line ending in `\r\n`).
async fn http_over(
    tls: Option<&tokio_rustls::TlsConnector>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &str,
    within: Duration,
) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        match tls {
            None => exchange_http(tcp, addr, method, path, body, headers).await,
            Some(tls) => {
                let name = tokio_rustls::rustls::pki_types::ServerName::from(addr.ip());
                let stream = tls.connect(name, tcp).await?;
                exchange_http(stream, addr, method, path, body, headers).await
            }
        }
    };
    let raw = tokio::time::timeout(within, exchange).await.map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{method} {path} on {addr} timed out"),
        )
    })??;
    parse_http_response(&raw)
}

/// Writes one request on `stream` and reads the whole response.
async fn exchange_http<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &str,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: text/plain\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    stream.flush().await?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw).await {
        Ok(_) => Ok(raw),
        // A TLS peer that closes without close_notify after a complete response.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
        Err(e) => Err(e),
    }
}

fn parse_http_response(raw: &[u8]) -> std::io::Result<(u16, String)> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string());
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("transfer-encoding:")
            && l.to_ascii_lowercase().contains("chunked")
    });
    if !chunked {
        return Ok((code, body.to_string()));
    }
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n").ok_or_else(|| bad("bad chunk"))?;
        let size = usize::from_str_radix(size.trim(), 16).map_err(|_| bad("bad chunk size"))?;
        if size == 0 {
            return Ok((code, out));
        }
        out.push_str(after.get(..size).ok_or_else(|| bad("short chunk"))?);
        rest = after.get(size + 2..).ok_or_else(|| bad("short chunk"))?;
    }
}

/// The JSON of `/status`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct NodeStatus {
    pub id: u64,
    pub role: String,
    pub term: u64,
    /// 0 when no leader is known.
    pub leader: u64,
    pub leader_addr: Option<String>,
    pub commit_index: u64,
    pub applied_index: u64,
    pub voters: Vec<u64>,
    pub sessions: usize,
}

impl NodeStatus {
    pub fn is_leader(&self) -> bool {
        self.role == "leader"
    }
}

/// One value of a Prometheus text exposition (the first sample whose name and labels start
/// with `name`).
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

// ------------------------------------------------------------------------------------------
// The cluster.

/// The addresses of one node.
#[derive(Clone, Copy, Debug)]
pub struct Addrs {
    pub peer: SocketAddr,
    pub client: SocketAddr,
    pub http: SocketAddr,
}

impl Addrs {
    /// On 127.0.0.1: the peer, client and HTTP ports, in that order.
    fn loopback(ports: &[u16]) -> Addrs {
        let addr = |i: usize| SocketAddr::from(([127, 0, 0, 1], ports[i]));
        Addrs {
            peer: addr(0),
            client: addr(1),
            http: addr(2),
        }
    }
}

/// Options of a test cluster.
#[derive(Clone, Debug)]
pub struct Options {
    pub nodes: usize,
    /// TLS on every port (the default).
    pub tls: bool,
    pub fault_injection: bool,
    pub election_timeout_ms: u64,
    pub heartbeat_ms: u64,
    pub tick_ms: u64,
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
            election_timeout_ms: ELECTION_TIMEOUT_MS,
            heartbeat_ms: HEARTBEAT_MS,
            tick_ms: TICK_MS,
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
        self.election_timeout_ms = election_timeout_ms;
        self.heartbeat_ms = heartbeat_ms;
        self.tick_ms = tick_ms;
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
    addrs: BTreeMap<u64, Addrs>,
    children: BTreeMap<u64, Child>,
    channels: BTreeMap<u64, Channel>,
    started: Instant,
    /// The client side of TLS, when on.
    tls: Option<ClientTls>,
    /// More credentials no log may hold (see [`Cluster::forbid_in_logs`]).
    forbidden: Vec<String>,
    /// Nodes added with [`Cluster::add_joining_node`]: started with `--join`, and knowing
    /// only the nodes that existed when they were added (as an operator would start them).
    joining: BTreeMap<u64, Vec<u64>>,
    _lock: FileLock,
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
    grpc: tonic::transport::ClientTlsConfig,
    http: tokio_rustls::TlsConnector,
}

/// The harness's one-cluster-at-a-time lock, for clusters run in the test's own process
/// (embedded nodes): held until dropped, as [`Cluster`] holds it.
pub struct ClusterLock(#[allow(dead_code)] FileLock); // Held for its lock.

impl ClusterLock {
    /// Wait for the lock.
    pub fn acquire() -> ClusterLock {
        ClusterLock(FileLock::acquire("tenure-server-tests-cluster.lock"))
    }
}

impl ClientTls {
    /// Issue into `dir` what the harness's clusters use: a CA, certificates for nodes 1 to
    /// 9 of cluster [`CLUSTER_ID`], and for the clients [`ADMIN_CLIENT`] and [`APP_CLIENT`].
    pub fn issue(dir: &Path) -> ClientTls {
        use tenure_transport::certs::{files, issue, CertsRequest};
        issue(
            dir,
            &CertsRequest {
                cluster_id: CLUSTER_ID.into(),
                nodes: (1..=CERTIFIED_NODES).collect(),
                clients: vec![ADMIN_CLIENT.into(), APP_CLIENT.into()],
                hosts: Vec::new(),
                days: 1,
            },
        )
        .expect("issue test certificates");
        let grpc = grpc_tls(dir, Some(ADMIN_CLIENT));
        let material = tenure_transport::TlsMaterial::load(&tenure_transport::TlsFiles {
            ca: dir.join(files::CA),
            cert: dir.join(files::client(ADMIN_CLIENT)),
            key: dir.join(files::client_key(ADMIN_CLIENT)),
        })
        .expect("load the harness's client certificate");
        let http = tokio_rustls::TlsConnector::from(std::sync::Arc::new(
            material.client_config().expect("client TLS config"),
        ));
        ClientTls {
            dir: dir.to_path_buf(),
            grpc,
            http,
        }
    }
}

/// The gRPC client TLS for the certificates in `dir`: trust the CA, and present client
/// `client`'s certificate if given.
fn grpc_tls(dir: &Path, client: Option<&str>) -> tonic::transport::ClientTlsConfig {
    use tenure_transport::certs::files;
    let read = |name: &str| std::fs::read(dir.join(name)).expect("read a certificate file");
    let config = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read(files::CA)));
    match client {
        Some(client) => config.identity(tonic::transport::Identity::from_pem(
            read(&files::client(client)),
            read(&files::client_key(client)),
        )),
        None => config,
    }
}

impl Cluster {
    /// Start every node (not waiting for a leader).
    pub fn start(opts: Options) -> Cluster {
        // Build (or find) the binary before taking the lock: building holds no cluster.
        tenure_binary();
        let ClusterLock(lock) = ClusterLock::acquire();
        let ports = free_ports(opts.nodes * 3);
        let addrs: BTreeMap<u64, Addrs> = (1..).zip(ports.chunks(3).map(Addrs::loopback)).collect();
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

    pub fn addrs(&self, id: u64) -> Addrs {
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
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
            .expect("open the node's log file");
        let _ = writeln!(
            log,
            "==== harness: starting node {id} at +{:?}",
            self.started.elapsed()
        );
        let mut cmd = Command::new(tenure_binary());
        cmd.arg("server")
            .arg("--id")
            .arg(id.to_string())
            .arg("--data-dir")
            .arg(self.data_dir(id))
            .arg("--election-timeout-ms")
            .arg(self.opts.election_timeout_ms.to_string())
            .arg("--heartbeat-ms")
            .arg(self.opts.heartbeat_ms.to_string())
            .arg("--tick-ms")
            .arg(self.opts.tick_ms.to_string())
            .args(&self.opts.extra_args)
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        let knows = |n: &u64| match self.joining.get(&id) {
            Some(known) => *n == id || known.contains(n),
            None => !self.joining.contains_key(n),
        };
        if self.joining.contains_key(&id) {
            cmd.arg("--join");
        }
        for (n, a) in self.addrs.iter().filter(|(n, _)| knows(n)) {
            let spec = match &self.opts.node_host {
                None => format!("{n}={},{},{}", a.peer, a.client, a.http),
                Some(h) => {
                    let (p, c, w) = (a.peer.port(), a.client.port(), a.http.port());
                    format!("{n}={h}:{p},{h}:{c},{h}:{w}")
                }
            };
            cmd.arg("--node").arg(spec);
        }
        if self.opts.fault_injection {
            cmd.arg("--fault-injection");
        }
        if let Some(tls) = &self.tls {
            cmd.arg("--tls-dir").arg(&tls.dir);
        }
        let stderr = log.try_clone().expect("clone the log file handle");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .env("NO_COLOR", "1")
            .env(
                "RUST_LOG",
                std::env::var("TENURE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            );
        // SAFETY: prctl is async-signal-safe. If the test process dies without running its
        // destructors (killed by a timeout), the kernel kills the nodes too.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", tenure_binary().display()));
        self.children.insert(id, child);
    }

    /// Start a new node `id` (certificates exist for ids up to 9) on fresh ports with
    /// `--join`: it bootstraps nothing and waits to be added (`AddMember` with the returned
    /// addresses). Its `--node` flags name the nodes that exist now and itself; the running
    /// nodes are not told about it (no restarts): they learn its addresses from the log.
    pub fn add_joining_node(&mut self, id: u64) -> Addrs {
        assert!(!self.addrs.contains_key(&id), "node {id} exists");
        assert!(
            id <= CERTIFIED_NODES,
            "certificates exist for nodes 1..={CERTIFIED_NODES}"
        );
        let addrs = Addrs::loopback(&free_ports(3));
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
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid(id)))
            .expect("read the node's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    fn pid(&self, id: u64) -> libc::pid_t {
        self.children
            .get(&id)
            .unwrap_or_else(|| panic!("node {id} is not running"))
            .id() as libc::pid_t
    }

    fn signal(&self, id: u64, sig: libc::c_int) {
        // SAFETY: kill(2) on a child we spawned and have not reaped, so the pid is ours.
        let rc = unsafe { libc::kill(self.pid(id), sig) };
        assert_eq!(
            rc,
            0,
            "kill({id}, {sig}): {}",
            std::io::Error::last_os_error()
        );
    }

    /// `kill -9` node `id` and reap it.
    pub fn kill(&mut self, id: u64) {
        self.signal(id, libc::SIGKILL);
        let mut child = self.children.remove(&id).expect("checked by signal");
        let _ = child.wait();
        self.note(id, "SIGKILL");
    }

    /// `kill -STOP` node `id`.
    pub fn pause(&mut self, id: u64) {
        self.signal(id, libc::SIGSTOP);
        // kill(2) only queues the stop: until one of the node's threads runs and takes it,
        // the others go on, and a request that arrives meanwhile is still served (seen under
        // load: a Put sent right after the signal was replicated). "Paused" means frozen, so
        // wait until every thread has stopped.
        wait_all_threads_stopped(self.pid(id), Duration::from_secs(10));
        self.note(id, "SIGSTOP");
    }

    /// `kill -CONT` node `id`.
    pub fn resume(&mut self, id: u64) {
        self.signal(id, libc::SIGCONT);
        self.note(id, "SIGCONT");
    }

    /// SIGTERM node `id` and wait for it to exit by itself; returns its exit status.
    pub async fn terminate(&mut self, id: u64, within: Duration) -> std::process::ExitStatus {
        self.signal(id, libc::SIGTERM);
        let deadline = Instant::now() + within;
        loop {
            let child = self.children.get_mut(&id).expect("checked by signal");
            if let Some(status) = child.try_wait().expect("try_wait on our child") {
                self.children.remove(&id);
                self.note(id, "exited after SIGTERM");
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not exit within {within:?} of SIGTERM"
            );
            tokio::time::sleep(ms(20)).await;
        }
    }

    /// Waits for node `id`'s process to exit by itself; returns its exit status, or `None` if
    /// it still runs after `within`.
    pub async fn wait_exit(
        &mut self,
        id: u64,
        within: Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            let child = self.children.get_mut(&id)?;
            if let Some(status) = child.try_wait().expect("try_wait on our child") {
                self.children.remove(&id);
                self.note(id, "exited by itself");
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(ms(10)).await;
        }
    }

    fn note(&self, id: u64, what: &str) {
        if let Ok(mut log) = OpenOptions::new().append(true).open(self.log_path(id)) {
            let _ = writeln!(
                log,
                "==== harness: {what} node {id} at +{:?}",
                self.started.elapsed()
            );
        }
    }

    /// `/status` of node `id`, or `None` if it does not answer within 500 ms.
    pub async fn status(&self, id: u64) -> Option<NodeStatus> {
        let (code, body) = self.http(id, "GET", "/status", "", ms(500)).await.ok()?;
        if code != 200 {
            return None;
        }
        serde_json::from_str(&body).ok()
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
        metric_value(&text, name).unwrap_or_else(|| panic!("node {id} has no metric {name}"))
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
        let deadline = Instant::now() + within;
        loop {
            let mut seen = Vec::new();
            for id in among {
                seen.push((*id, self.status(*id).await));
            }
            let leaders: BTreeSet<(u64, u64)> = seen
                .iter()
                .filter_map(|(_, s)| s.as_ref().map(|s| (s.leader, s.term)))
                .collect();
            if seen.iter().all(|(_, s)| s.is_some()) && leaders.len() == 1 {
                let (leader, term) = *leaders.iter().next().expect("one element");
                let leader_says = seen
                    .iter()
                    .find(|(id, _)| *id == leader)
                    .and_then(|(_, s)| s.as_ref());
                if leader != 0 && leader_says.is_some_and(NodeStatus::is_leader) {
                    return (leader, term);
                }
            }
            if Instant::now() > deadline {
                panic!("nodes {among:?} agree on no leader within {within:?}; last statuses: {seen:#?}");
            }
            tokio::time::sleep(ms(20)).await;
        }
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
        let channels = ids.iter().map(|id| (*id, self.channel(*id))).collect();
        Client {
            channels,
            leader: None,
            turn: 0,
        }
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
            use tenure_transport::certs::files;
            url.push_str(&format!(
                "?ca={}&cert={}&key={}",
                tls.dir.join(files::CA).display(),
                tls.dir.join(files::client(ADMIN_CLIENT)).display(),
                tls.dir.join(files::client_key(ADMIN_CLIENT)).display()
            ));
        }
        url
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
        let tls = self.tls.as_ref().map(|t| &t.http);
        http_over(tls, self.addrs[&id].http, method, path, body, "", within).await
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
        let connector = self.http_tls_as(client);
        let headers = authorization
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        http_over(
            Some(&connector),
            self.addrs[&id].http,
            "GET",
            path,
            "",
            &headers,
            secs(5),
        )
        .await
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
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let connector = self.http_tls_as(client);
        let addr = self.addrs[&id].http;
        let exchange = async {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            let name = tokio_rustls::rustls::pki_types::ServerName::from(addr.ip());
            let mut stream = connector.connect(name, tcp).await?;
            stream.write_all(head.as_bytes()).await?;
            stream.flush().await?;
            let mut raw = Vec::new();
            match stream.read_to_end(&mut raw).await {
                Ok(_) => Ok(raw),
                Err(e) if !raw.is_empty() => {
                    let _ = e;
                    Ok(raw)
                }
                Err(e) => Err(e),
            }
        };
        let raw = tokio::time::timeout(within, exchange).await.map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from {addr} within {within:?}"),
            )
        })??;
        parse_http_response(&raw)
    }

    /// A TLS connector to the HTTP port as client principal `client`, or with no client
    /// certificate.
    fn http_tls_as(&self, client: Option<&str>) -> tokio_rustls::TlsConnector {
        use tenure_transport::certs::files;
        let tls = self.tls.as_ref().expect("this needs TLS on");
        let config = match client {
            Some(client) => tenure_transport::TlsMaterial::load(&tenure_transport::TlsFiles {
                ca: tls.dir.join(files::CA),
                cert: tls.dir.join(files::client(client)),
                key: tls.dir.join(files::client_key(client)),
            })
            .expect("load a client certificate")
            .client_config()
            .expect("client TLS config"),
            None => {
                let mut roots = tokio_rustls::rustls::RootCertStore::empty();
                let pem = std::fs::read(tls.dir.join(files::CA)).expect("read the CA");
                use tokio_rustls::rustls::pki_types::pem::PemObject;
                for cert in tokio_rustls::rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
                    roots
                        .add(cert.expect("a CA certificate"))
                        .expect("add the CA");
                }
                tokio_rustls::rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
                    tokio_rustls::rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth()
            }
        };
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
    }

    /// A channel to node `id` over TLS as client principal `client` (its certificate from
    /// the cluster's CA), or with no client certificate at all.
    pub fn channel_as(&self, id: u64, client: Option<&str>) -> Channel {
        let tls = self.tls.as_ref().expect("channel_as needs TLS on");
        let config = grpc_tls(&tls.dir, client);
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
            let mut child = child;
            // SIGKILL ends a stopped process too.
            let _ = child.kill();
            let _ = child.wait();
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

// ------------------------------------------------------------------------------------------
// gRPC helpers.

/// The `tenure-error` label of a status as it travels (raw, so that a test can show a
/// label this version does not know); [`Reason::of`] is the typed reading.
pub fn reason(s: &Status) -> Option<&str> {
    s.metadata()
        .get(tenure_proto::ERROR_KEY)
        .and_then(|v| v.to_str().ok())
}

/// A reason a test expects: a [`Reason`], or its name as it travels (`"not-leader"`),
/// which must be one of the documented reasons, so that a misspelt expectation fails
/// loudly instead of never matching.
pub trait ExpectedReason {
    /// The reason meant.
    fn reason(&self) -> Reason;
}

impl ExpectedReason for Reason {
    fn reason(&self) -> Reason {
        *self
    }
}

impl ExpectedReason for &str {
    #[track_caller]
    fn reason(&self) -> Reason {
        self.parse()
            .unwrap_or_else(|e| panic!("a test expects {e}; see tenure_proto::Reason"))
    }
}

/// Assert that `result` failed with `code` and `tenure-error` reason `why`.
#[track_caller]
pub fn assert_error<T: std::fmt::Debug>(
    result: Result<T, Status>,
    code: tonic::Code,
    why: impl ExpectedReason,
    what: &str,
) -> Status {
    let why = why.reason();
    match result {
        Ok(v) => panic!("{what}: expected {code:?}/{why}, got success {v:?}"),
        Err(s) => {
            assert_eq!(s.code(), code, "{what}: wrong code in {s:?}");
            assert_eq!(
                Reason::of(&s),
                Some(why),
                "{what}: wrong tenure-error reason in {s:?}"
            );
            s
        }
    }
}

enum Retry {
    /// An answer from the application: return it.
    No,
    /// The node does not lead; the named node might.
    Leader(Option<u64>),
    /// The node is down, slow or unsure: try another.
    Elsewhere,
}

fn classify(s: &Status) -> Retry {
    match Reason::of(s) {
        Some(Reason::NotLeader) => Retry::Leader(
            s.metadata()
                .get(tenure_proto::LEADER_ID_KEY)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
        ),
        Some(Reason::Unavailable) => Retry::Elsewhere,
        Some(_) => Retry::No,
        // A label this version does not know is still the application's answer.
        None if reason(s).is_some() => Retry::No,
        // No reason: transport errors, timeouts, a node that is down.
        None => Retry::Elsewhere,
    }
}

/// A client that finds the leader and retries on `not-leader`, `unavailable` and transport
/// errors, like a real client library would. Cheap to clone (channels are shared).
#[derive(Clone)]
pub struct Client {
    channels: BTreeMap<u64, Channel>,
    leader: Option<u64>,
    turn: usize,
}

impl Client {
    /// Run `call` against the leader until it gets an application answer or `within` ends.
    /// Returns the node that answered with the answer.
    pub async fn on_leader<T, F, Fut>(
        &mut self,
        within: Duration,
        mut call: F,
    ) -> Result<(u64, T), Status>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let deadline = Instant::now() + within;
        let ids: Vec<u64> = self.channels.keys().copied().collect();
        loop {
            let id = match self.leader {
                Some(l) if self.channels.contains_key(&l) => l,
                _ => {
                    self.turn += 1;
                    ids[self.turn % ids.len()]
                }
            };
            let status = match call(self.channels[&id].clone()).await {
                Ok(r) => {
                    self.leader = Some(id);
                    return Ok((id, r.into_inner()));
                }
                Err(s) => s,
            };
            match classify(&status) {
                Retry::No => return Err(status),
                Retry::Leader(Some(hint)) if hint != id && self.channels.contains_key(&hint) => {
                    self.leader = Some(hint);
                }
                Retry::Leader(_) | Retry::Elsewhere => {
                    self.leader = None;
                    tokio::time::sleep(ms(10)).await;
                }
            }
            if Instant::now() >= deadline {
                return Err(status);
            }
        }
    }

    pub fn leader_hint(&self) -> Option<u64> {
        self.leader
    }

    /// Send `request` to the leader, retried as [`Client::on_leader`] does, within `within`.
    pub async fn send<R: Call>(
        &mut self,
        request: R,
        within: Duration,
    ) -> Result<R::Answer, Status> {
        self.on_leader(within, |ch| {
            R::call(tonic::Request::new(request.clone()), ch)
        })
        .await
        .map(|(_, answer)| answer)
    }

    pub async fn grant(&mut self, ttl_ms: u64) -> Result<u64, Status> {
        let request = v1::GrantRequest {
            ttl_ms,
            session_secret: secret(),
            ..Default::default()
        };
        Ok(self.send(request, secs(10)).await?.session_id)
    }

    /// Campaign for an election nobody holds: returns at once with the token.
    pub async fn campaign_uncontested(
        &mut self,
        election: &str,
        session: u64,
    ) -> Result<u64, Status> {
        let request = v1::CampaignRequest {
            election: election.to_string(),
            session_id: session,
            value: b"test".to_vec(),
            session_secret: secret(),
            ..Default::default()
        };
        Ok(self.send(request, secs(10)).await?.token)
    }

    /// A holder (a session of `ttl_ms` leading `election`) and a second session of a minute
    /// to queue behind it: `(holder, its token, the second session)`.
    pub async fn holder_and_second(&mut self, election: &str, ttl_ms: u64) -> (u64, u64, u64) {
        let holder = self.grant(ttl_ms).await.expect("grant");
        let token = self
            .campaign_uncontested(election, holder)
            .await
            .expect("campaign");
        let second = self.grant(60_000).await.expect("grant");
        (holder, token, second)
    }

    /// A session with a long TTL leading `election`: `(session, token)` for fenced writes.
    pub async fn writer_token(&mut self, election: &str) -> (u64, u64) {
        let session = self.grant(600_000).await.expect("grant a session");
        let token = self
            .campaign_uncontested(election, session)
            .await
            .expect("campaign");
        (session, token)
    }

    /// [`Client::writer_token`] for `election`, and a first fenced Put of `value` at `key`
    /// with its token, which must be acknowledged within `within`: `(session, token)`.
    pub async fn first_write(
        &mut self,
        election: &str,
        key: &str,
        value: &[u8],
        within: Duration,
    ) -> (u64, u64) {
        let (session, token) = self.writer_token(election).await;
        self.put(key, value, election, token, within)
            .await
            .unwrap_or_else(|e| panic!("the first write, of {key} in {election}: {e:?}"));
        (session, token)
    }

    /// A fenced Put; `Ok` means acknowledged (committed and applied on the leader).
    pub async fn put(
        &mut self,
        key: &str,
        value: &[u8],
        election: &str,
        token: u64,
        within: Duration,
    ) -> Result<u64, Status> {
        let request = v1::PutRequest {
            key: key.to_string(),
            value: value.to_vec(),
            election: election.to_string(),
            token,
            ..Default::default()
        };
        Ok(self.send(request, within).await?.index)
    }

    /// A linearizable Get at the leader.
    pub async fn get(&mut self, key: &str) -> Result<Option<v1::FencedValue>, Status> {
        let request = v1::GetRequest {
            key: key.to_string(),
        };
        Ok(self.send(request, secs(10)).await?.value)
    }
}

/// What a [`Call`] returns: the gRPC call in flight.
pub type CallFuture<A> =
    std::pin::Pin<Box<dyn Future<Output = Result<tonic::Response<A>, Status>> + Send>>;

/// A request of the gRPC API with a unary answer, and the call that sends it: what
/// [`Client::send`] and [`Caller::send`] take.
pub trait Call: Clone + Send + 'static {
    /// The answer's message.
    type Answer;
    /// Send `request` on `ch`.
    fn call(request: tonic::Request<Self>, ch: Channel) -> CallFuture<Self::Answer>;
}

/// One [`Call`] for each request: its answer, and the client and method that send it.
macro_rules! calls {
    ($($request:ident => $answer:ident by $module:ident::$client:ident::$method:ident;)*) => {$(
        impl Call for v1::$request {
            type Answer = v1::$answer;
            fn call(request: tonic::Request<Self>, ch: Channel) -> CallFuture<v1::$answer> {
                Box::pin(async move { v1::$module::$client::new(ch).$method(request).await })
            }
        }
    )*};
}

calls! {
    GrantRequest => GrantResponse by sessions_client::SessionsClient::grant;
    RevokeRequest => RevokeResponse by sessions_client::SessionsClient::revoke;
    CampaignRequest => CampaignResponse by elections_client::ElectionsClient::campaign;
    ResignRequest => ResignResponse by elections_client::ElectionsClient::resign;
    TransferRequest => TransferResponse by elections_client::ElectionsClient::transfer;
    LeaderRequest => LeaderResponse by elections_client::ElectionsClient::leader;
    PutRequest => PutResponse by fenced_keys_client::FencedKeysClient::put;
    GetRequest => GetResponse by fenced_keys_client::FencedKeysClient::get;
    DeleteKeyRequest => DeleteKeyResponse by fenced_keys_client::FencedKeysClient::delete;
    DeleteElectionRequest => DeleteElectionResponse
        by elections_client::ElectionsClient::delete;
    StatusRequest => StatusResponse by cluster_client::ClusterClient::status;
    MembersRequest => MembersResponse by cluster_client::ClusterClient::members;
    TransferLeadershipRequest => TransferLeadershipResponse
        by cluster_client::ClusterClient::transfer_leadership;
}

/// `session` (granted with the harness's secret) campaigns in `election` through `ch`, in a
/// task: the Campaign call answers once the session leads (or fails).
pub fn campaign_in_background(
    ch: Channel,
    election: &str,
    session: u64,
) -> tokio::task::JoinHandle<Result<v1::CampaignResponse, Status>> {
    let candidate = Caller::new(ch);
    let campaign = v1::CampaignRequest {
        election: election.into(),
        session_id: session,
        session_secret: secret(),
        ..Default::default()
    };
    tokio::spawn(async move { candidate.send(campaign).await })
}

/// Who leads `election`, as `(session, token)`, read at the node `caller` reaches.
pub async fn who_leads(caller: &Caller, election: &str) -> Option<(u64, u64)> {
    caller
        .send(v1::LeaderRequest {
            election: election.into(),
        })
        .await
        .expect("leader")
        .leader
        .map(|l| (l.session_id, l.token))
}

/// Calls to one node on one channel, with the channel's credentials or as the bearer of a
/// token; no retries, no leader following.
#[derive(Clone)]
pub struct Caller {
    ch: Channel,
    bearer: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl Caller {
    pub fn new(ch: Channel) -> Caller {
        Caller { ch, bearer: None }
    }

    /// Every call with `authorization: Bearer <token>`.
    pub fn bearer(ch: Channel, token: &str) -> Caller {
        let header = format!("Bearer {token}").parse().expect("an ASCII header");
        Caller {
            ch,
            bearer: Some(header),
        }
    }

    /// Send `request`: the answer.
    pub async fn send<R: Call>(&self, request: R) -> Result<R::Answer, Status> {
        let mut request = tonic::Request::new(request);
        if let Some(header) = &self.bearer {
            request
                .metadata_mut()
                .insert("authorization", header.clone());
        }
        Ok(R::call(request, self.ch.clone()).await?.into_inner())
    }
}

/// A KeepAlive stream: keepalives go in, answers come out.
pub struct KeepAlives {
    tx: tokio::sync::mpsc::Sender<v1::KeepAliveRequest>,
    answers: tonic::Streaming<v1::KeepAliveResponse>,
}

/// The keepalives a [`KeepAlives`] sends, as the request stream of the call.
struct Outgoing(tokio::sync::mpsc::Receiver<v1::KeepAliveRequest>);

impl tonic::codegen::tokio_stream::Stream for Outgoing {
    type Item = v1::KeepAliveRequest;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<v1::KeepAliveRequest>> {
        self.0.poll_recv(cx)
    }
}

impl KeepAlives {
    /// Open one on `ch`.
    pub async fn open(ch: Channel) -> Result<KeepAlives, Status> {
        KeepAlives::open_as(ch, None).await
    }

    /// Open one on `ch` with `authorization: Bearer <token>` when a token is given.
    pub async fn open_as(ch: Channel, token: Option<&str>) -> Result<KeepAlives, Status> {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let mut request = tonic::Request::new(Outgoing(rx));
        if let Some(token) = token {
            let header = format!("Bearer {token}").parse().expect("an ASCII header");
            request.metadata_mut().insert("authorization", header);
        }
        let answers = v1::sessions_client::SessionsClient::new(ch)
            .keep_alive(request)
            .await?
            .into_inner();
        Ok(KeepAlives { tx, answers })
    }

    /// Where keepalives go in, for a task that sends them on its own.
    pub fn sender(&self) -> tokio::sync::mpsc::Sender<v1::KeepAliveRequest> {
        self.tx.clone()
    }

    /// The next answer: an acknowledgement or the error that ends the stream. Panics when
    /// none comes within `within` or the stream ends without one.
    pub async fn answer(&mut self, within: Duration) -> Result<v1::KeepAliveResponse, Status> {
        tokio::time::timeout(within, self.answers.message())
            .await
            .unwrap_or_else(|_| panic!("no keepalive answer within {within:?}"))
            .map(|a| a.expect("the keepalive stream ended without an answer"))
    }

    /// Keepalive `seq` of `session` (with the harness's secret), and its answer (within 5 s).
    pub async fn renew(&mut self, session: u64, seq: u64) -> Result<v1::KeepAliveResponse, Status> {
        let request = v1::KeepAliveRequest {
            session_id: session,
            seq,
            session_secret: secret(),
            bind: false,
        };
        self.tx
            .send(request)
            .await
            .expect("the keepalive stream is open");
        self.answer(secs(5)).await
    }
}

/// Check that every `(key, value)` is stored, with many Gets in flight. Returns the keys
/// that are missing or hold another value.
pub async fn missing_keys(client: &Client, expected: &[(String, Vec<u8>)]) -> Vec<String> {
    const IN_FLIGHT: usize = 16;
    let mut missing = Vec::new();
    let per_task = expected.len().div_ceil(IN_FLIGHT).max(1);
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in expected.chunks(per_task) {
        let chunk = chunk.to_vec();
        let mut client = client.clone();
        tasks.spawn(async move {
            let mut missing = Vec::new();
            for (key, value) in chunk {
                match client.get(&key).await {
                    Ok(Some(v)) if v.value == value => {}
                    Ok(other) => missing.push(format!("{key} (found {other:?})")),
                    Err(e) => panic!("Get {key}: {e:?}"),
                }
            }
            missing
        });
    }
    while let Some(r) = tasks.join_next().await {
        missing.extend(r.expect("a Get task panicked"));
    }
    missing
}

// ------------------------------------------------------------------------------------------
// A write workload.

/// A key and the value written to it.
pub type KeyValue = (String, Vec<u8>);

/// Writers, each leading its own election and putting one new key after another with its
/// token, through a [`Client`] that follows the leader — the load under which operations
/// (membership changes, transfers) must not make a client see an error. Every write it was
/// told succeeded is kept, to be read back at the end ([`missing_keys`]).
pub struct Writers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acked: std::sync::Arc<std::sync::Mutex<Vec<KeyValue>>>,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    /// Starts `writers` writers that reach the cluster through the nodes `through`.
    pub async fn start(c: &mut Cluster, through: &[u64], writers: usize) -> Writers {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for w in 0..writers {
            let mut client = c.client_for(through);
            let election = format!("writer-{w}");
            let (_, token) = client.writer_token(&election).await;
            let (stop, acked, errors) = (stop.clone(), acked.clone(), errors.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("w{w}-{i}");
                    let value = format!("{w}:{i}").into_bytes();
                    match client.put(&key, &value, &election, token, secs(10)).await {
                        Ok(_) => lock(&acked).push((key, value)),
                        Err(e) => lock(&errors).push(format!("{key}: {e:?}")),
                    }
                    i += 1;
                    tokio::time::sleep(ms(5)).await;
                }
            }));
        }
        Writers {
            stop,
            acked,
            errors,
            tasks,
        }
    }

    /// How many writes were acknowledged so far.
    pub fn acked(&self) -> usize {
        lock(&self.acked).len()
    }

    /// Waits (at most 10 s) until 20 more writes than now are acknowledged: the cluster
    /// still makes progress.
    pub async fn go_on(&self, what: &str) {
        let before = self.acked();
        let deadline = Instant::now() + secs(10);
        while self.acked() < before + 20 {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {} writes acknowledged, errors {:?}",
                self.acked(),
                lock(&self.errors)
            );
            tokio::time::sleep(ms(10)).await;
        }
    }

    /// Stops the writers: the acknowledged writes and every error a writer saw.
    pub async fn stop(self) -> (Vec<KeyValue>, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("writer task");
        }
        let acked = lock(&self.acked).clone();
        let errors = lock(&self.errors).clone();
        (acked, errors)
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Waits until every thread of process `pid` is stopped (state `T` in
/// `/proc/PID/task/*/stat`).
fn wait_all_threads_stopped(pid: i32, within: Duration) {
    let deadline = Instant::now() + within;
    let stopped = |stat: &str| {
        // `TID (COMM) STATE …`; COMM may hold spaces and parentheses.
        stat.rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state == 'T' || state == 't')
    };
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap_or_else(|e| panic!("read /proc/{pid}/task: {e}"));
        let all = tasks.filter_map(Result::ok).all(|task| {
            std::fs::read_to_string(task.path().join("stat")).map_or(true, |s| stopped(&s))
        });
        if all {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} did not stop within {within:?} of SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ------------------------------------------------------------------------------------------
// A TCP proxy.

/// A TCP proxy in front of each node's client port; `cut` closes every connection (both
/// ways, as a middlebox that drops them would) and refuses to forward new ones. The CLI's
/// `tenure run` tests cut a runner off with it; the fate-sharing tests end a client's
/// connection with it while the client's streams are still open, as a dying process's
/// kernel would.
pub struct Proxy {
    addrs: Vec<SocketAddr>,
    /// The cluster URL's query (TLS files): the proxy forwards TLS as it is.
    query: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    /// One proxy port per target, each forwarding to its target; `query` is the cluster
    /// URL's (its TLS files: the proxy forwards TLS as it is).
    pub fn start(targets: &[SocketAddr], query: &str) -> Proxy {
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut addrs = Vec::new();
        for &target in targets {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
            addrs.push(listener.local_addr().expect("an address"));
            let (cut, conns) = (cut.clone(), conns.clone());
            std::thread::spawn(move || {
                for inbound in listener.incoming() {
                    let Ok(inbound) = inbound else { continue };
                    if cut.load(std::sync::atomic::Ordering::SeqCst) {
                        drop(inbound);
                        continue;
                    }
                    let Ok(outbound) = std::net::TcpStream::connect(target) else {
                        continue;
                    };
                    let mut held = conns
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    for s in [&inbound, &outbound] {
                        if let Ok(s) = s.try_clone() {
                            held.push(s);
                        }
                    }
                    drop(held);
                    pipe(&inbound, &outbound);
                    pipe(&outbound, &inbound);
                }
            });
        }
        Proxy {
            addrs,
            query: query.to_string(),
            cut,
            conns,
        }
    }

    /// The proxy's addresses, with `discover=false`: a runner behind it reaches the cluster
    /// only through it (as a client behind a load balancer does), never at the members' own
    /// addresses, so the cut isolates it.
    pub fn url(&self) -> String {
        let a: Vec<String> = self.addrs.iter().map(|a| a.to_string()).collect();
        let sep = if self.query.is_empty() { "?" } else { "&" };
        format!("tenure://{}{}{sep}discover=false", a.join(","), self.query)
    }

    /// The proxy's addresses, one per target, in order.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Close every connection, both ways, and forward no new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self
            .conns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Forward what `from` reads to `to`, in a thread, until either side ends; then close both.
fn pipe(from: &std::net::TcpStream, to: &std::net::TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Both);
        let _ = from.shutdown(std::net::Shutdown::Both);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expected_reason_is_a_documented_one() {
        let s = Reason::NotLeader.label(Status::failed_precondition("elsewhere"));
        assert_error::<()>(
            Err(s.clone()),
            tonic::Code::FailedPrecondition,
            "not-leader",
            "str",
        );
        assert_error::<()>(
            Err(s),
            tonic::Code::FailedPrecondition,
            Reason::NotLeader,
            "typed",
        );
        // A misspelt expectation cannot pass by never matching: it panics on its own.
        let typo = std::panic::catch_unwind(|| "not-the-leader".reason());
        assert!(typo.is_err());
    }

    #[test]
    fn only_unlabelled_and_redirecting_answers_are_retried_elsewhere() {
        let labelled = |r: Reason| r.label(Status::failed_precondition("x"));
        assert!(matches!(
            classify(&labelled(Reason::NotLeader)),
            Retry::Leader(None)
        ));
        assert!(matches!(
            classify(&labelled(Reason::Unavailable)),
            Retry::Elsewhere
        ));
        assert!(matches!(classify(&labelled(Reason::StaleToken)), Retry::No));
        assert!(matches!(
            classify(&Status::unavailable("refused")),
            Retry::Elsewhere
        ));
        let mut unknown = Status::failed_precondition("x");
        unknown.metadata_mut().insert(
            tenure_proto::ERROR_KEY,
            "from-a-newer-server".parse().expect("ascii"),
        );
        assert!(matches!(classify(&unknown), Retry::No));
    }
}
