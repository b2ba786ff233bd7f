//! Server configuration: from a TOML file and/or flags, validated before anything starts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tenure_core::config::{timing, Config};
use tenure_core::sm::SmLimits;
use tenure_core::types::NodeId;
pub use tenure_transport::HostPort;

/// The addresses one node listens on. Each is `HOST:PORT`, the host an IP address or a
/// name; a name is resolved when the node binds it (its own addresses) or dials it (its
/// peers', on every connection attempt). The client address is also what clients are
/// told when they ask a follower (`not-leader`) or for the member list, so it must be
/// one that clients can reach.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAddrs {
    /// Raft traffic between nodes.
    #[serde(with = "host_port")]
    pub peer: HostPort,
    /// The gRPC client API.
    #[serde(with = "host_port")]
    pub client: HostPort,
    /// HTTP: `/metrics`, `/health`, `/status`.
    #[serde(with = "host_port")]
    pub http: HostPort,
}

impl NodeAddrs {
    /// The same `HOST:PORT` for peers, clients and HTTP: one port serves all three
    /// (connections are told apart by their first bytes), as an embedded node does.
    pub fn one_port(addr: HostPort) -> NodeAddrs {
        NodeAddrs {
            peer: addr.clone(),
            client: addr.clone(),
            http: addr,
        }
    }

    /// The distinct addresses, in the order peer, client, HTTP.
    pub fn ports(&self) -> Vec<&HostPort> {
        let mut ports: Vec<&HostPort> = Vec::with_capacity(3);
        for a in [&self.peer, &self.client, &self.http] {
            if !ports.contains(&a) {
                ports.push(a);
            }
        }
        ports
    }
}

/// `HOST:PORT` strings in the TOML file.
mod host_port {
    use super::HostPort;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(a: &HostPort, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(a)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<HostPort, D::Error> {
        let text = String::deserialize(d)?;
        text.trim().parse().map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for NodeAddrs {
    type Err = String;

    /// `PEER,CLIENT,HTTP`, e.g. `127.0.0.1:7001,127.0.0.1:8001,127.0.0.1:9001` or
    /// `node-1.example:7001,node-1.example:8001,node-1.example:9001`.
    fn from_str(s: &str) -> Result<NodeAddrs, String> {
        let parts: Vec<&str> = s.split(',').collect();
        let [peer, client, http] = parts.as_slice() else {
            return Err(format!("expected PEER,CLIENT,HTTP addresses, got {s:?}"));
        };
        let parse = |what: &str, a: &str| {
            a.trim().parse::<HostPort>().map_err(|e| {
                format!(
                    "bad {what} address {:?}: {} (expected HOST:PORT)",
                    e.addr, e.why
                )
            })
        };
        Ok(NodeAddrs {
            peer: parse("peer", peer)?,
            client: parse("client", client)?,
            http: parse("http", http)?,
        })
    }
}

fn default_cluster_id() -> String {
    "tenure".to_string()
}
fn default_tick_ms() -> u64 {
    timing::TICK_MS
}
fn default_election_timeout_ms() -> u64 {
    timing::ELECTION_TIMEOUT_MS
}
fn default_heartbeat_ms() -> u64 {
    timing::HEARTBEAT_MS
}
fn default_fast_election() -> bool {
    true
}
fn default_ttl_min_ms() -> u64 {
    100
}
fn default_ttl_max_ms() -> u64 {
    3_600_000
}
/// The longest election timeout a node accepts (ten minutes).
pub const ELECTION_TIMEOUT_MAX_MS: u64 = 600_000;
/// The longest session TTL a node lets clients ask for (seven days).
pub const TTL_MAX_CAP_MS: u64 = 7 * 24 * 3_600_000;
/// The longest a request may wait for its answer (ten minutes).
pub const REQUEST_TIMEOUT_MAX_MS: u64 = 600_000;

fn default_connections_max() -> usize {
    1_024
}
fn default_connections_per_ip_max() -> usize {
    512
}
fn default_http_connections_max() -> usize {
    256
}
fn default_unauthenticated_connections_max() -> usize {
    256
}
fn default_unauthenticated_connections_per_ip_max() -> usize {
    32
}
fn default_authenticate_within_ms() -> u64 {
    10_000
}
fn default_operator_connections_reserved() -> usize {
    32
}
fn default_connections_per_principal_max() -> usize {
    256
}
fn default_http_answer_timeout_ms() -> u64 {
    30_000
}
fn default_handshake_timeout_ms() -> u64 {
    5_000
}
fn default_idle_timeout_ms() -> u64 {
    120_000
}
fn default_streams_per_connection_max() -> u32 {
    1_024
}
fn default_keepalive_streams_max() -> usize {
    10_000
}
fn default_observe_streams_max() -> usize {
    10_000
}
fn default_streams_per_principal_max() -> usize {
    2_500
}
fn default_sessions_per_principal_max() -> u64 {
    20_000
}
fn default_elections_per_principal_max() -> u64 {
    10_000
}
fn default_keys_per_principal_max() -> u64 {
    10_000
}
fn default_key_bytes_per_principal_max() -> u64 {
    64 * 1024 * 1024
}
fn default_requests_per_second_per_principal_max() -> u32 {
    50_000
}
fn default_message_bytes_max() -> usize {
    4 * 1024 * 1024
}
fn default_request_timeout_ms() -> u64 {
    5_000
}
fn default_snapshot_threshold() -> u64 {
    10_000
}

/// TOML table keys are strings (`[nodes.1]`): read them as node ids, with a clear error
/// for a key that is not one.
fn nodes_by_id<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<NodeId, NodeAddrs>, D::Error> {
    let raw = BTreeMap::<String, NodeAddrs>::deserialize(d)?;
    raw.into_iter()
        .map(|(k, v)| {
            k.trim()
                .parse::<NodeId>()
                .map(|id| (id, v))
                .map_err(|_| serde::de::Error::custom(format!("node key {k:?} is not a node id")))
        })
        .collect()
}

/// Everything a `tenure server` needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// This node's id (≥ 1), one of `nodes`.
    pub id: NodeId,
    /// Nodes refuse peers that present another cluster id.
    #[serde(default = "default_cluster_id")]
    pub cluster_id: String,
    /// Every node of the cluster with its addresses (including this one).
    #[serde(deserialize_with = "nodes_by_id")]
    pub nodes: BTreeMap<NodeId, NodeAddrs>,
    /// Where the write-ahead log and snapshots live.
    pub data_dir: PathBuf,
    /// The cluster's generation, as the data directory's identity file says (0 unless the
    /// cluster was restored from a backup or recovered from a lost majority). Not
    /// configured: read at start.
    #[serde(skip)]
    pub generation: u64,
    /// Start as a node joining an existing cluster: it waits to be added with
    /// `tenure members add` (the `AddMember` RPC) instead of bootstrapping with `nodes` as
    /// the voters.
    #[serde(default)]
    pub join: bool,
    /// Length of one core tick.
    #[serde(default = "default_tick_ms")]
    pub tick_ms: u64,
    /// T: election timeouts are drawn from `[T, 2T)`.
    #[serde(default = "default_election_timeout_ms")]
    pub election_timeout_ms: u64,
    /// Heartbeat interval, at most T/5.
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// Fast election (on by default): when this node's connection to its leader closes
    /// and the leader's peer port then refuses a dial (its process exited), campaign at
    /// once instead of waiting out the election timeout. Sound only where nothing but the
    /// leader's own process answers a dial to its peer port with a refusal: no firewall
    /// `REJECT` rule in front of it, `net.ipv4.tcp_abort_on_overflow` off (see
    /// docs/GUARANTEES.md "Fast election"); where that cannot be promised, set it to false
    /// (`--no-fast-election`).
    #[serde(default = "default_fast_election")]
    pub fast_election: bool,
    /// Shortest session TTL a client may ask for.
    #[serde(default = "default_ttl_min_ms")]
    pub ttl_min_ms: u64,
    /// Longest session TTL a client may ask for.
    #[serde(default = "default_ttl_max_ms")]
    pub ttl_max_ms: u64,
    /// Most concurrent client connections on the gRPC port.
    #[serde(default = "default_connections_max")]
    pub connections_max: usize,
    /// Most concurrent connections from one IP address, on each of the gRPC and HTTP ports.
    #[serde(default = "default_connections_per_ip_max")]
    pub connections_per_ip_max: usize,
    /// Most concurrent connections on the HTTP port.
    #[serde(default = "default_http_connections_max")]
    pub http_connections_max: usize,
    /// An HTTP connection whose client has sent bytes and been sent nothing back for this
    /// long is closed: a request whose headers never end (or end a byte at a time) cannot
    /// hold a slot of the HTTP port. At least `request_timeout_ms` + 1 s whatever is set
    /// here, since that bounds how long a dashboard action may take to answer.
    #[serde(default = "default_http_answer_timeout_ms")]
    pub http_answer_timeout_ms: u64,
    /// With authentication on (TLS or an auth file): most gRPC connections that have not
    /// authenticated yet, a pool apart from the `connections_max` authenticated ones, so an
    /// anonymous flood cannot take the slots of clients that prove who they are.
    #[serde(default = "default_unauthenticated_connections_max")]
    pub unauthenticated_connections_max: usize,
    /// Most unauthenticated gRPC connections from one IP address.
    #[serde(default = "default_unauthenticated_connections_per_ip_max")]
    pub unauthenticated_connections_per_ip_max: usize,
    /// How long a gRPC connection may stay unauthenticated (no request with valid
    /// credentials yet) before it is closed, pings or not.
    #[serde(default = "default_authenticate_within_ms")]
    pub authenticate_within_ms: u64,
    /// Of `connections_max`, the slots only admins and observers may take, so that an
    /// operator can always look at a node whose clients took the rest (at most an eighth of
    /// `connections_max`, whatever is set here).
    #[serde(default = "default_operator_connections_reserved")]
    pub operator_connections_reserved: usize,
    /// Most authenticated gRPC connections one principal holds at once.
    #[serde(default = "default_connections_per_principal_max")]
    pub connections_per_principal_max: usize,
    /// How long a new client or HTTP connection may take to send its first byte (and, with
    /// TLS, to finish its handshake).
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
    /// How long a client or HTTP connection may move no byte before it is closed. The gRPC
    /// port pings its clients (HTTP/2 PING) every third of it, so a live client that is only
    /// waiting (an Observe with nothing to say) is not idle, and one that stops answering
    /// pings is dropped.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// Most concurrent requests and streams on one client connection (HTTP/2
    /// SETTINGS_MAX_CONCURRENT_STREAMS): a client past it waits for one of its own to end.
    #[serde(default = "default_streams_per_connection_max")]
    pub streams_per_connection_max: u32,
    /// Most concurrent KeepAlive streams over all connections. Its own pool, so that
    /// observers can never starve the renewals that keep leases alive.
    #[serde(default = "default_keepalive_streams_max")]
    pub keepalive_streams_max: usize,
    /// Most concurrent Observe streams over all connections. A stream's slot is released
    /// as soon as its client goes.
    #[serde(default = "default_observe_streams_max")]
    pub observe_streams_max: usize,
    /// Most KeepAlive streams one principal holds at once on a node (with authentication
    /// on; an auth file may set a principal's own `quotas.keepalive_streams`), so that one
    /// tenant's streams never take the renewals of another's.
    #[serde(default = "default_streams_per_principal_max")]
    pub keepalive_streams_per_principal_max: usize,
    /// Most Observe streams one principal holds at once on a node (likewise
    /// `quotas.observe_streams`).
    #[serde(default = "default_streams_per_principal_max")]
    pub observe_streams_per_principal_max: usize,
    /// Most live sessions one principal owns in the cluster (with authentication on; an
    /// auth file may set a principal's own `quotas.sessions`). Carried in the log with each
    /// command, so every replica enforces the leader's figure.
    #[serde(default = "default_sessions_per_principal_max")]
    pub sessions_per_principal_max: u64,
    /// Most elections one principal created (campaigned in first) that still exist
    /// (`quotas.elections`).
    #[serde(default = "default_elections_per_principal_max")]
    pub elections_per_principal_max: u64,
    /// Most fenced keys one principal wrote last (`quotas.keys`).
    #[serde(default = "default_keys_per_principal_max")]
    pub keys_per_principal_max: u64,
    /// Most bytes (names plus values) of the fenced keys one principal wrote last
    /// (`quotas.key_bytes`).
    #[serde(default = "default_key_bytes_per_principal_max")]
    pub key_bytes_per_principal_max: u64,
    /// Most unary calls per second one principal makes on one node, with a burst of as
    /// many (`quotas.requests_per_second`); keepalives on a stream are not calls.
    #[serde(default = "default_requests_per_second_per_principal_max")]
    pub requests_per_second_per_principal_max: u32,
    /// Delete an election once it has had no candidate for this long (milliseconds; 0, the
    /// default, keeps elections until `tenure elections delete`). The leader deletes it;
    /// its tokens never come back (docs/GUARANTEES.md "Tokens across a delete").
    #[serde(default)]
    pub election_retention_ms: u64,
    /// Largest gRPC message accepted, and largest peer frame.
    #[serde(default = "default_message_bytes_max")]
    pub message_bytes_max: usize,
    /// How long a client request may wait for its answer.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// Applied entries between snapshots, at least (also at least as many as the last
    /// snapshot held records: `tenure_core::config::Config::snapshot_grows_with_state`).
    #[serde(default = "default_snapshot_threshold")]
    pub snapshot_threshold_entries: u64,
    /// Serve `POST /debug/block` on the HTTP port, which cuts this node off from the named
    /// peers, and `POST /debug/driver-panic`, which panics its driver thread (the node then
    /// exits). For tests and demonstrations only.
    #[serde(default)]
    pub fault_injection: bool,
    /// TLS on all three ports: the peer port with mutual TLS (the certificate must carry
    /// `node-<id>.<cluster_id>.tenure`), the client and HTTP ports with this certificate.
    #[serde(default)]
    pub tls: Option<TlsPaths>,
    /// Serve plaintext on addresses other than loopback. Without TLS and without this,
    /// a node refuses to listen anywhere but on loopback.
    #[serde(default)]
    pub insecure: bool,
    /// With TLS on: the client principals allowed to change membership and move Raft
    /// leadership, each authenticated by a client certificate from the cluster's CA that
    /// carries `client-<name>.<cluster_id>.tenure` (what `tenure certs --clients` issues).
    #[serde(default = "default_admin_clients")]
    pub admin_clients: Vec<String>,
    /// Who may do what: principals with roles and prefix grants, and bearer tokens by
    /// hash (see `auth` and docs/SECURITY.md). Without it, TLS on means the default
    /// policy (`admin_clients` administer, every other client certificate of the cluster
    /// may use elections and keys); TLS off means nobody is authenticated.
    #[serde(default)]
    pub auth_file: Option<PathBuf>,
}

fn default_admin_clients() -> Vec<String> {
    vec!["admin".to_string()]
}

/// Where a node's TLS material is (PEM files).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsPaths {
    /// The cluster's CA certificate: peers and client certificates must be signed by it.
    pub ca: PathBuf,
    /// This node's certificate chain.
    pub cert: PathBuf,
    /// This node's private key.
    pub key: PathBuf,
}

impl TlsPaths {
    /// The files `tenure certs` writes for node `id` into `dir`.
    pub fn in_dir(dir: &std::path::Path, id: NodeId) -> TlsPaths {
        TlsPaths {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("node-{id}.pem")),
            key: dir.join(format!("node-{id}-key.pem")),
        }
    }
}

/// A configuration that cannot work. Each says what to change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML file could not be read or parsed.
    #[error("cannot read config file {path}: {why}")]
    File {
        /// File.
        path: PathBuf,
        /// Reason.
        why: String,
    },
    /// This node's id is not among `nodes`.
    #[error("node id {0} is not listed in nodes")]
    UnknownSelf(NodeId),
    /// Node id 0 is reserved.
    #[error("node id 0 is reserved; ids start at 1")]
    ZeroId,
    /// Two nodes share an address (as written: two names for one machine are not caught
    /// here, but binding or dialing then fails with the address named). One node may
    /// name one port for several of its protocols.
    #[error("address {0} is used twice")]
    DuplicateAddr(HostPort),
    /// A duration or limit is out of range.
    #[error("{what}: {why}")]
    Range {
        /// Field.
        what: &'static str,
        /// Why.
        why: String,
    },
    /// Plaintext on an address that others can reach, without `insecure`.
    #[error("{what} address {addr} is not loopback and TLS is off: give --tls-dir (see `tenure certs`), or --insecure to serve plaintext there anyway")]
    PlaintextNotLoopback {
        /// Which port.
        what: &'static str,
        /// The address (a name other than `localhost` counts as reachable from elsewhere).
        addr: HostPort,
    },
    /// The cluster id cannot stand in a certificate name.
    #[error("cluster_id {0:?} cannot be used with TLS: it must be 1 to 63 lowercase letters, digits and inner hyphens")]
    ClusterIdNotDnsLabel(String),
    /// The derived core configuration is invalid.
    #[error("{0}")]
    Core(#[from] tenure_core::config::ConfigError),
}

impl ServerConfig {
    /// [`ServerConfig::request_timeout_ms`] as a duration.
    pub fn request_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.request_timeout_ms)
    }

    /// A configuration with every setting at its default (those of the file format).
    pub fn with_defaults(
        id: NodeId,
        nodes: BTreeMap<NodeId, NodeAddrs>,
        data_dir: PathBuf,
    ) -> ServerConfig {
        ServerConfig {
            id,
            cluster_id: default_cluster_id(),
            nodes,
            data_dir,
            generation: 0,
            join: false,
            tick_ms: default_tick_ms(),
            election_timeout_ms: default_election_timeout_ms(),
            heartbeat_ms: default_heartbeat_ms(),
            fast_election: true,
            ttl_min_ms: default_ttl_min_ms(),
            ttl_max_ms: default_ttl_max_ms(),
            connections_max: default_connections_max(),
            connections_per_ip_max: default_connections_per_ip_max(),
            http_connections_max: default_http_connections_max(),
            http_answer_timeout_ms: default_http_answer_timeout_ms(),
            unauthenticated_connections_max: default_unauthenticated_connections_max(),
            unauthenticated_connections_per_ip_max: default_unauthenticated_connections_per_ip_max(
            ),
            authenticate_within_ms: default_authenticate_within_ms(),
            operator_connections_reserved: default_operator_connections_reserved(),
            connections_per_principal_max: default_connections_per_principal_max(),
            keepalive_streams_per_principal_max: default_streams_per_principal_max(),
            observe_streams_per_principal_max: default_streams_per_principal_max(),
            sessions_per_principal_max: default_sessions_per_principal_max(),
            elections_per_principal_max: default_elections_per_principal_max(),
            keys_per_principal_max: default_keys_per_principal_max(),
            key_bytes_per_principal_max: default_key_bytes_per_principal_max(),
            requests_per_second_per_principal_max: default_requests_per_second_per_principal_max(),
            election_retention_ms: 0,
            handshake_timeout_ms: default_handshake_timeout_ms(),
            idle_timeout_ms: default_idle_timeout_ms(),
            streams_per_connection_max: default_streams_per_connection_max(),
            keepalive_streams_max: default_keepalive_streams_max(),
            observe_streams_max: default_observe_streams_max(),
            message_bytes_max: default_message_bytes_max(),
            request_timeout_ms: default_request_timeout_ms(),
            snapshot_threshold_entries: default_snapshot_threshold(),
            fault_injection: false,
            tls: None,
            insecure: false,
            admin_clients: default_admin_clients(),
            auth_file: None,
        }
    }

    /// Read a TOML file.
    pub fn from_toml_file(path: &std::path::Path) -> Result<ServerConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::File {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
    }

    /// This node's addresses.
    pub fn me(&self) -> &NodeAddrs {
        &self.nodes[&self.id]
    }

    /// Check every rule, including the core's.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.id == 0 || self.nodes.contains_key(&0) {
            return Err(ConfigError::ZeroId);
        }
        if !self.nodes.contains_key(&self.id) {
            return Err(ConfigError::UnknownSelf(self.id));
        }
        // A node may serve several protocols on one port (its addresses name the same
        // port: see `shared_port`), but no two nodes share one.
        let mut seen = std::collections::BTreeSet::new();
        for a in self.nodes.values() {
            for addr in a.ports() {
                if !seen.insert(addr) {
                    return Err(ConfigError::DuplicateAddr(addr.clone()));
                }
            }
        }
        let range = |what: &'static str, ok: bool, why: String| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError::Range { what, why })
            }
        };
        range(
            "tick_ms",
            (1..=1_000).contains(&self.tick_ms),
            format!("{} is outside 1..=1000", self.tick_ms),
        )?;
        // Bounds before arithmetic: every later check, and the core's, multiplies these.
        range(
            "election_timeout_ms",
            (self.tick_ms..=ELECTION_TIMEOUT_MAX_MS).contains(&self.election_timeout_ms),
            format!(
                "{} is outside {}..={ELECTION_TIMEOUT_MAX_MS} (one tick to ten minutes)",
                self.election_timeout_ms, self.tick_ms
            ),
        )?;
        range(
            "heartbeat_ms",
            (1..=self.election_timeout_ms).contains(&self.heartbeat_ms),
            format!(
                "{} is outside 1..={} (positive, and at most election_timeout_ms; at most a fifth of it to work)",
                self.heartbeat_ms, self.election_timeout_ms
            ),
        )?;
        range(
            "ttl_max_ms",
            self.ttl_max_ms <= TTL_MAX_CAP_MS,
            format!(
                "{} is above {TTL_MAX_CAP_MS} (seven days); a longer lease is not a lease",
                self.ttl_max_ms
            ),
        )?;
        range(
            "request_timeout_ms",
            (1..=REQUEST_TIMEOUT_MAX_MS).contains(&self.request_timeout_ms),
            format!(
                "{} is outside 1..={REQUEST_TIMEOUT_MAX_MS} (ten minutes)",
                self.request_timeout_ms
            ),
        )?;
        range(
            "cluster_id",
            !self.cluster_id.is_empty()
                && self.cluster_id.len() <= 255
                && !self.cluster_id.chars().any(char::is_control),
            format!(
                "{:?} must be 1 to 255 bytes without control characters",
                self.cluster_id
            ),
        )?;
        range(
            "election_timeout_ms",
            self.election_timeout_ms.is_multiple_of(self.tick_ms),
            format!(
                "{} is not a multiple of tick_ms {}",
                self.election_timeout_ms, self.tick_ms
            ),
        )?;
        range(
            "ttl_min_ms",
            self.ttl_min_ms <= self.ttl_max_ms,
            format!("{} exceeds ttl_max_ms {}", self.ttl_min_ms, self.ttl_max_ms),
        )?;
        // Sizing TTLs against failover time is `tenure plan`'s job; here only what cannot
        // work at all: a TTL of less than two ticks cannot be measured.
        range(
            "ttl_min_ms",
            self.ttl_min_ms >= 2 * self.tick_ms,
            format!(
                "{} is less than two ticks ({} ms)",
                self.ttl_min_ms,
                2 * self.tick_ms
            ),
        )?;
        range(
            "connections_max",
            self.connections_max > 0,
            "must be positive".into(),
        )?;
        range(
            "connections_per_ip_max",
            self.connections_per_ip_max > 0,
            "must be positive".into(),
        )?;
        range(
            "http_connections_max",
            self.http_connections_max > 0,
            "must be positive".into(),
        )?;
        range(
            "http_answer_timeout_ms",
            (1_000..=600_000).contains(&self.http_answer_timeout_ms),
            format!("{} is outside 1000..=600000", self.http_answer_timeout_ms),
        )?;
        range(
            "unauthenticated_connections_max",
            self.unauthenticated_connections_max > 0,
            "must be positive".into(),
        )?;
        range(
            "unauthenticated_connections_per_ip_max",
            self.unauthenticated_connections_per_ip_max > 0,
            "must be positive".into(),
        )?;
        range(
            "authenticate_within_ms",
            (100..=600_000).contains(&self.authenticate_within_ms),
            format!("{} is outside 100..=600000", self.authenticate_within_ms),
        )?;
        range(
            "connections_per_principal_max",
            self.connections_per_principal_max > 0,
            "must be positive".into(),
        )?;
        for (name, value) in [
            (
                "sessions_per_principal_max",
                self.sessions_per_principal_max,
            ),
            (
                "elections_per_principal_max",
                self.elections_per_principal_max,
            ),
            ("keys_per_principal_max", self.keys_per_principal_max),
            (
                "key_bytes_per_principal_max",
                self.key_bytes_per_principal_max,
            ),
            (
                "requests_per_second_per_principal_max",
                u64::from(self.requests_per_second_per_principal_max),
            ),
        ] {
            range(name, value > 0, "must be positive".into())?;
        }
        range(
            "election_retention_ms",
            self.election_retention_ms == 0 || self.election_retention_ms >= 1_000,
            format!(
                "{} is below a second (0 keeps elections)",
                self.election_retention_ms
            ),
        )?;
        range(
            "handshake_timeout_ms",
            (100..=600_000).contains(&self.handshake_timeout_ms),
            "must be between 100 ms and 10 minutes".into(),
        )?;
        range(
            "idle_timeout_ms",
            (300..=86_400_000).contains(&self.idle_timeout_ms),
            "must be between 300 ms and a day".into(),
        )?;
        range(
            "streams_per_connection_max",
            self.streams_per_connection_max > 0,
            "must be positive".into(),
        )?;
        range(
            "keepalive_streams_max",
            self.keepalive_streams_max > 0,
            "must be positive".into(),
        )?;
        range(
            "observe_streams_max",
            self.observe_streams_max > 0,
            "must be positive".into(),
        )?;
        range(
            "message_bytes_max",
            self.message_bytes_max >= 4096,
            "must be at least 4096".into(),
        )?;
        if self.tls.is_none() && !self.insecure {
            let me = self.me();
            for (what, addr) in [
                ("peer", &me.peer),
                ("client", &me.client),
                ("http", &me.http),
            ] {
                if !addr.is_loopback() {
                    return Err(ConfigError::PlaintextNotLoopback {
                        what,
                        addr: addr.clone(),
                    });
                }
            }
        }
        if self.tls.is_some() && !tenure_transport::tls::cluster_id_is_dns_label(&self.cluster_id) {
            return Err(ConfigError::ClusterIdNotDnsLabel(self.cluster_id.clone()));
        }
        self.core_config().validate()?;
        Ok(())
    }

    /// Whether this node serves plaintext where others can reach it (`insecure` given and
    /// used): the server warns loudly at start.
    pub fn plaintext_exposed(&self) -> bool {
        let me = self.me();
        self.tls.is_none()
            && [&me.peer, &me.client, &me.http]
                .iter()
                .any(|a| !a.is_loopback())
    }

    /// Milliseconds to ticks, rounding up (a TTL never shrinks by conversion).
    pub fn ms_to_ticks(&self, ms: u64) -> u64 {
        ms.div_ceil(self.tick_ms)
    }

    /// Ticks to milliseconds.
    pub fn ticks_to_ms(&self, ticks: u64) -> u64 {
        ticks * self.tick_ms
    }

    /// The core's configuration for this node.
    pub fn core_config(&self) -> Config {
        let voters = if self.join {
            Vec::new()
        } else {
            self.nodes.keys().copied().collect()
        };
        let mut cfg = Config::new(self.id, voters);
        cfg.election_timeout_ticks = self.election_timeout_ms / self.tick_ms;
        cfg.heartbeat_ticks = (self.heartbeat_ms / self.tick_ms).max(1);
        cfg.lease_checkpoint_ticks = cfg.heartbeat_ticks.max(1);
        cfg.snapshot_threshold_entries = self.snapshot_threshold_entries;
        // The driver encodes and writes snapshots on a thread of its own: at a million
        // sessions one takes seconds, which inside the node's step would cost a leader change.
        cfg.snapshot_in_background = true;
        cfg.fast_election = self.fast_election;
        // Election timeouts must differ between nodes and between restarts of one node;
        // outside the simulator nothing needs to be replayed, so mix in the process id.
        cfg.seed = self.id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id());
        cfg.limits = SmLimits {
            ttl_min_ticks: self.ms_to_ticks(self.ttl_min_ms),
            ttl_max_ticks: self.ms_to_ticks(self.ttl_max_ms),
            ..SmLimits::default()
        };
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_numbers_are_refused_before_any_arithmetic_on_them() {
        let base = || {
            let mut c: ServerConfig = toml::from_str(GOOD).expect("good config");
            c.data_dir = "/tmp/x".into();
            c
        };
        base().validate().expect("the base is valid");
        type Set = fn(&mut ServerConfig);
        let cases: [(&str, Set); 9] = [
            ("election_timeout_ms", |c| {
                c.election_timeout_ms = u64::MAX - 5
            }),
            ("election_timeout_ms", |c| c.election_timeout_ms = 0),
            ("heartbeat_ms", |c| c.heartbeat_ms = 0),
            ("heartbeat_ms", |c| c.heartbeat_ms = u64::MAX),
            ("ttl_max_ms", |c| c.ttl_max_ms = u64::MAX),
            ("request_timeout_ms", |c| c.request_timeout_ms = u64::MAX),
            ("request_timeout_ms", |c| c.request_timeout_ms = 0),
            ("cluster_id", |c| c.cluster_id = String::new()),
            ("cluster_id", |c| c.cluster_id = "a\nb".into()),
        ];
        for (field, set) in cases {
            let mut c = base();
            set(&mut c);
            let e = c.validate().expect_err(field).to_string();
            assert!(e.starts_with(field), "{field}: {e}");
        }
    }

    const GOOD: &str = r#"
        id = 2
        data_dir = "/tmp/tenure-2"
        election_timeout_ms = 200
        heartbeat_ms = 40
        [nodes.1]
        peer = "127.0.0.1:7001"
        client = "127.0.0.1:8001"
        http = "127.0.0.1:9001"
        [nodes.2]
        peer = "127.0.0.1:7002"
        client = "127.0.0.1:8002"
        http = "127.0.0.1:9002"
        [nodes.3]
        peer = "127.0.0.1:7003"
        client = "127.0.0.1:8003"
        http = "127.0.0.1:9003"
    "#;

    fn parse(text: &str) -> Result<ServerConfig, String> {
        toml::from_str::<ServerConfig>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_toml_file_parses_and_validates_with_defaults_filled_in() {
        let c = parse(GOOD).expect("parses");
        c.validate().expect("valid");
        assert_eq!(c.tick_ms, 10);
        assert_eq!(c.me().client.to_string(), "127.0.0.1:8002");
        let core = c.core_config();
        assert_eq!(core.election_timeout_ticks, 20);
        assert_eq!(core.heartbeat_ticks, 4);
        assert_eq!(core.initial_voters, vec![1, 2, 3]);
    }

    #[test]
    fn the_coded_defaults_are_the_file_formats() {
        let minimal: ServerConfig =
            toml::from_str("id = 1\ndata_dir = \"/tmp/x\"\n[nodes]\n").expect("parses");
        assert_eq!(
            ServerConfig::with_defaults(1, BTreeMap::new(), "/tmp/x".into()),
            minimal
        );
    }

    #[test]
    fn a_node_may_serve_everything_on_one_port_but_no_two_nodes_share_one() {
        let one = GOOD
            .replace("127.0.0.1:8002", "127.0.0.1:7002")
            .replace("127.0.0.1:9002", "127.0.0.1:7002");
        let c = parse(&one).expect("parses");
        c.validate()
            .expect("node 2 serves all three protocols on 7002");
        assert_eq!(c.me().ports().len(), 1);
        assert_eq!(
            c.me(),
            &NodeAddrs::one_port("127.0.0.1:7002".parse().expect("an address"))
        );
        let shared = one.replace("127.0.0.1:9003", "127.0.0.1:7002");
        let e = parse(&shared)
            .expect("parses")
            .validate()
            .expect_err("two nodes");
        assert!(
            e.to_string().contains("127.0.0.1:7002 is used twice"),
            "{e}"
        );
    }

    #[test]
    fn unknown_fields_and_bad_values_get_clear_errors() {
        let typo = GOOD.replace("heartbeat_ms", "heartbeat_msec");
        assert!(parse(&typo)
            .unwrap_err()
            .contains("unknown field `heartbeat_msec`"));

        let cases: &[(&str, &str, &str)] = &[
            ("id = 2", "id = 7", "node id 7 is not listed"),
            ("heartbeat_ms = 40", "heartbeat_ms = 100", "heartbeat"),
            (
                "election_timeout_ms = 200",
                "election_timeout_ms = 205",
                "not a multiple of tick_ms",
            ),
            (
                "127.0.0.1:9003",
                "127.0.0.1:9002",
                "address 127.0.0.1:9002 is used twice",
            ),
        ];
        for (from, to, expected) in cases {
            let c = parse(&GOOD.replace(from, to)).expect("parses");
            let e = c.validate().expect_err(to).to_string();
            assert!(e.contains(expected), "{to}: {e}");
        }
        let exposed = parse(&GOOD.replace("127.0.0.1:8002", "0.0.0.0:8002")).expect("parses");
        let e = exposed
            .validate()
            .expect_err("plaintext on 0.0.0.0")
            .to_string();
        assert!(
            e.contains("client address 0.0.0.0:8002 is not loopback"),
            "{e}"
        );
        let mut insecure = exposed.clone();
        insecure.insecure = true;
        insecure.validate().expect("allowed when asked for");
        assert!(insecure.plaintext_exposed());
        let mut tls = exposed;
        tls.tls = Some(TlsPaths::in_dir(std::path::Path::new("/certs"), 2));
        tls.validate().expect("TLS on 0.0.0.0");
        assert!(!tls.plaintext_exposed());
        tls.cluster_id = "Has Spaces".into();
        let e = tls.validate().expect_err("cluster id").to_string();
        assert!(e.contains("cannot be used with TLS"), "{e}");

        let mut c = parse(GOOD).expect("parses");
        c.ttl_min_ms = 15;
        let e = c.validate().expect_err("ttl below two ticks").to_string();
        assert!(e.contains("ttl_min_ms"), "{e}");
    }

    #[test]
    fn addresses_parse_from_the_flag_form() {
        let a: NodeAddrs = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
            .parse()
            .expect("three addresses");
        assert_eq!(a.http.port(), 3);
        assert!("127.0.0.1:1,127.0.0.1:2".parse::<NodeAddrs>().is_err());
        assert!("127.0.0.1:1,nope,127.0.0.1:3"
            .parse::<NodeAddrs>()
            .unwrap_err()
            .contains("bad client address"));
    }

    #[test]
    fn host_names_are_addresses_too_and_only_localhost_counts_as_loopback() {
        let a: NodeAddrs = "localhost:7001,node-1.example:8001,[::1]:9001"
            .parse()
            .expect("names and IPs");
        assert_eq!(a.peer.to_string(), "localhost:7001");
        assert_eq!(a.client.host(), "node-1.example");
        assert_eq!(a.http.to_string(), "[::1]:9001");
        let e = "localhost:7001,local host:8001,localhost:9001"
            .parse::<NodeAddrs>()
            .unwrap_err();
        assert!(e.contains("bad client address \"local host:8001\""), "{e}");

        let names = GOOD.replace("127.0.0.1", "localhost");
        let c = parse(&names).expect("names in the TOML file");
        c.validate()
            .expect("localhost is loopback: plaintext is allowed");
        assert_eq!(c.me().client.to_string(), "localhost:8002");
        let twice = parse(&names.replace("localhost:9003", "LOCALHOST:9002")).expect("parses");
        let e = twice.validate().expect_err("same address").to_string();
        assert!(e.contains("address localhost:9002 is used twice"), "{e}");

        let elsewhere =
            parse(&GOOD.replace("127.0.0.1:8002", "node-2.example:8002")).expect("parses");
        let e = elsewhere
            .validate()
            .expect_err("a name without TLS")
            .to_string();
        assert!(
            e.contains("client address node-2.example:8002 is not loopback"),
            "{e}"
        );
        let mut tls = elsewhere;
        tls.tls = Some(TlsPaths::in_dir(std::path::Path::new("/certs"), 2));
        tls.validate().expect("a name with TLS");
        let text = serde_json::to_string(&tls).expect("serializes");
        assert!(text.contains(r#""client":"node-2.example:8002""#), "{text}");
        let back: ServerConfig = serde_json::from_str(&text).expect("round trip");
        assert_eq!(back, tls);
    }
}
