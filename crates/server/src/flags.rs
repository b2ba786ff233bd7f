//! `tenure server`'s flags (the `clap` feature), and how they are laid over the TOML file
//! into a [`ServerConfig`]. The `tenure` binary parses [`ServerArgs`], calls
//! [`ServerArgs::config`], sets up logging by [`ServerArgs::log_format`] and runs
//! [`crate::run`]; the flags' names are the configuration's fields.
#![cfg(feature = "clap")]

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::config::{NodeAddrs, ServerConfig, TlsPaths};

/// Run one node of a tenure cluster. Flags override values from `--config`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// A TOML file with the server configuration (the same field names as the flags, in
    /// snake_case, and a `[nodes.N]` table per node with `peer`, `client`, `http`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// This node's id (≥ 1).
    #[arg(long)]
    id: Option<u64>,
    /// A node of the cluster, repeated for each: `ID=PEER,CLIENT,HTTP` addresses, e.g.
    /// `1=127.0.0.1:7001,127.0.0.1:8001,127.0.0.1:9001`.
    #[arg(long = "node", value_name = "ID=PEER,CLIENT,HTTP")]
    nodes: Vec<String>,
    /// Directory for the write-ahead log and snapshots.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Cluster name; nodes refuse peers of another cluster.
    #[arg(long)]
    cluster_id: Option<String>,
    /// Join an existing cluster instead of bootstrapping one: the node waits until an admin
    /// adds it (`tenure members add ID=PEER,CLIENT,HTTP`). Its --node flags name the current
    /// members and itself.
    #[arg(long)]
    join: bool,
    /// Core tick length in milliseconds.
    #[arg(long)]
    tick_ms: Option<u64>,
    /// Election timeout T in milliseconds (timeouts drawn from [T, 2T)).
    #[arg(long)]
    election_timeout_ms: Option<u64>,
    /// Heartbeat interval in milliseconds (at most T/5).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Fast election, on by default: followers of a leader whose process exited (its
    /// connection closed and its peer port refuses a dial) campaign at once instead of
    /// waiting out the election timeout. This flag only says so (it overrides
    /// `fast_election = false` in the file).
    #[arg(long, conflicts_with = "no_fast_election")]
    fast_election: bool,
    /// Turn fast election off: followers of a leader whose process exited wait out the
    /// election timeout. Needed where anything but a node's own process may answer a dial to
    /// its peer port with a refusal: a firewall REJECT rule, `tcp_abort_on_overflow`, a name
    /// that may come to resolve elsewhere (docs/GUARANTEES.md "Fast election").
    #[arg(long)]
    no_fast_election: bool,
    /// Shortest session TTL clients may ask for, in milliseconds.
    #[arg(long)]
    ttl_min_ms: Option<u64>,
    /// Longest session TTL clients may ask for, in milliseconds.
    #[arg(long)]
    ttl_max_ms: Option<u64>,
    /// Applied entries between snapshots (log compaction), at least; with a large state
    /// also at least as many as the last snapshot held sessions, elections and fenced keys.
    #[arg(long)]
    snapshot_threshold_entries: Option<u64>,
    /// How long a client request waits for its outcome before it is answered
    /// `indeterminate` (if it reached the log) or `unavailable`, in milliseconds.
    #[arg(long)]
    request_timeout_ms: Option<u64>,
    /// Most client connections open at once on the gRPC port.
    #[arg(long)]
    connections_max: Option<usize>,
    /// Most connections open at once from one IP address, on each of the gRPC and HTTP ports.
    #[arg(long)]
    connections_per_ip_max: Option<usize>,
    /// Most connections open at once on the HTTP port.
    #[arg(long)]
    http_connections_max: Option<usize>,
    /// How long an HTTP client may wait with what it sent unanswered before its connection
    /// is closed, in ms (above --request-timeout-ms): headers that never end.
    #[arg(long)]
    http_answer_timeout_ms: Option<u64>,
    /// With TLS or an auth file: most gRPC connections not authenticated yet (a pool apart
    /// from --connections-max).
    #[arg(long)]
    unauthenticated_connections_max: Option<usize>,
    /// Most unauthenticated gRPC connections from one IP address.
    #[arg(long)]
    unauthenticated_connections_per_ip_max: Option<usize>,
    /// How long a gRPC connection may stay unauthenticated before it is closed, in ms.
    #[arg(long)]
    authenticate_within_ms: Option<u64>,
    /// Of --connections-max, the slots only admins and observers may take.
    #[arg(long)]
    operator_connections_reserved: Option<usize>,
    /// Most authenticated gRPC connections one principal holds at once.
    #[arg(long)]
    connections_per_principal_max: Option<usize>,
    /// Most KeepAlive streams one principal holds at once (the auth file may set its own).
    #[arg(long)]
    keepalive_streams_per_principal_max: Option<usize>,
    /// Most Observe streams one principal holds at once (the auth file may set its own).
    #[arg(long)]
    observe_streams_per_principal_max: Option<usize>,
    /// Most live sessions one principal owns in the cluster (the auth file may set its own
    /// `quotas.sessions`).
    #[arg(long)]
    sessions_per_principal_max: Option<u64>,
    /// Most elections one principal created that still exist (`quotas.elections`).
    #[arg(long)]
    elections_per_principal_max: Option<u64>,
    /// Most fenced keys one principal wrote last (`quotas.keys`).
    #[arg(long)]
    keys_per_principal_max: Option<u64>,
    /// Most bytes (names plus values) of those keys (`quotas.key_bytes`).
    #[arg(long)]
    key_bytes_per_principal_max: Option<u64>,
    /// Most calls per second one principal makes on this node (`quotas.requests_per_second`).
    #[arg(long)]
    requests_per_second_per_principal_max: Option<u32>,
    /// Delete an election once it has had no candidate for this many ms (0 keeps them).
    #[arg(long)]
    election_retention_ms: Option<u64>,
    /// How long a new connection may take to send its first byte (and finish TLS), in ms.
    #[arg(long)]
    handshake_timeout_ms: Option<u64>,
    /// How long a connection may move no byte before it is closed, in ms (the gRPC port
    /// pings its clients every third of it).
    #[arg(long)]
    idle_timeout_ms: Option<u64>,
    /// Most requests and streams at once on one client connection (a client past it waits
    /// for one of its own to end).
    #[arg(long)]
    streams_per_connection_max: Option<u32>,
    /// Most KeepAlive streams open at once on this node (their own pool: observers cannot
    /// starve lease renewals).
    #[arg(long)]
    keepalive_streams_max: Option<usize>,
    /// Most Observe streams open at once on this node (a slot is freed when its client goes).
    #[arg(long)]
    observe_streams_max: Option<usize>,
    /// Serve `POST /debug/block` (cut this node off from named peers). Tests only.
    #[arg(long)]
    fault_injection: bool,
    /// Turn TLS on with the files `tenure certs` wrote into DIR: `ca.pem`,
    /// `node-ID.pem`, `node-ID-key.pem`. Peers then authenticate each other with mutual TLS.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["tls_ca", "tls_cert", "tls_key"])]
    tls_dir: Option<PathBuf>,
    /// The cluster's CA certificate (PEM), with --tls-cert and --tls-key.
    #[arg(long, value_name = "FILE", requires_all = ["tls_cert", "tls_key"])]
    tls_ca: Option<PathBuf>,
    /// This node's certificate chain (PEM); it must name node-ID.CLUSTER.tenure.
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_cert"])]
    tls_key: Option<PathBuf>,
    /// A client principal allowed to change membership and move Raft leadership (with TLS:
    /// its certificate carries client-NAME.CLUSTER.tenure). Repeatable; default `admin`.
    #[arg(long = "admin-client", value_name = "NAME")]
    admin_clients: Vec<String>,
    /// Who may do what: principals with roles (admin, observer) and grants on election and
    /// key prefixes, and bearer tokens by hash (`tenure token NAME` makes one). Without it,
    /// TLS on means: the admin clients administer, every other client certificate of the
    /// cluster may use elections and keys, and a client without one is refused.
    #[arg(long, value_name = "FILE")]
    auth_file: Option<PathBuf>,
    /// Serve plaintext on addresses other than loopback. Anyone who can reach the ports
    /// can then read and forge cluster traffic; without TLS a node otherwise refuses to
    /// listen beyond loopback.
    #[arg(long)]
    insecure: bool,
    /// How log lines are written to stderr: `text` for people, `json` for log pipelines
    /// (one JSON object per line, the event's fields at the top level). Which lines are
    /// written is set by RUST_LOG (default `info`; e.g. `RUST_LOG=tenure_server=debug`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// The format of the server's log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `2026-01-01T00:00:00Z  INFO tenure_server::driver: became leader of term 3 after 185.1 ms without a leader event="leader_elected" …`
    Text,
    /// `{"timestamp":"…","level":"INFO","message":"became leader of term 3 after 185.1 ms without a leader","event":"leader_elected",…}`
    Json,
}

impl ServerArgs {
    /// The configuration these flags give: `--config`'s file (or, without one, the
    /// defaults with `--id`, `--node` and `--data-dir`, which are then required) with every
    /// flag given laid over it, validated. The error is a message for the operator.
    pub fn config(&self) -> Result<ServerConfig, String> {
        build_config(self)
    }

    /// How log lines are to be written (`--log-format`).
    pub fn log_format(&self) -> LogFormat {
        self.log_format
    }
}

/// `--node ID=PEER,CLIENT,HTTP`.
fn parse_node(spec: &str) -> Result<(u64, NodeAddrs), String> {
    let (id, addrs) = spec
        .split_once('=')
        .ok_or_else(|| format!("--node {spec:?}: expected ID=PEER,CLIENT,HTTP"))?;
    let id: u64 = id
        .trim()
        .parse()
        .map_err(|_| format!("--node {spec:?}: bad id {id:?}"))?;
    Ok((
        id,
        addrs.parse().map_err(|e| format!("--node {spec:?}: {e}"))?,
    ))
}

/// The flags laid over the file or the defaults (see [`ServerArgs::config`]).
fn build_config(args: &ServerArgs) -> Result<ServerConfig, String> {
    let mut config = match &args.config {
        Some(path) => ServerConfig::from_toml_file(path).map_err(|e| e.to_string())?,
        None => {
            let id = args.id.ok_or("--id is required (or give --config)")?;
            let data_dir = args
                .data_dir
                .clone()
                .ok_or("--data-dir is required (or give --config)")?;
            if args.nodes.is_empty() {
                return Err("at least one --node is required (or give --config)".into());
            }
            ServerConfig::with_defaults(id, BTreeMap::new(), data_dir)
        }
    };
    if !args.nodes.is_empty() {
        let mut nodes = BTreeMap::new();
        for spec in &args.nodes {
            let (id, addrs) = parse_node(spec)?;
            if nodes.insert(id, addrs).is_some() {
                return Err(format!("node {id} is given twice"));
            }
        }
        config.nodes = nodes;
    }
    if let Some(id) = args.id {
        config.id = id;
    }
    if let Some(d) = &args.data_dir {
        config.data_dir = d.clone();
    }
    if let Some(c) = &args.cluster_id {
        config.cluster_id = c.clone();
    }
    config.join |= args.join;
    config.fault_injection |= args.fault_injection;
    config.insecure |= args.insecure;
    if !args.admin_clients.is_empty() {
        config.admin_clients = args.admin_clients.clone();
    }
    if let Some(file) = &args.auth_file {
        config.auth_file = Some(file.clone());
    }
    if let Some(dir) = &args.tls_dir {
        config.tls = Some(TlsPaths::in_dir(dir, config.id));
    }
    if let (Some(ca), Some(cert), Some(key)) = (&args.tls_ca, &args.tls_cert, &args.tls_key) {
        config.tls = Some(TlsPaths {
            ca: ca.clone(),
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    if args.fast_election {
        config.fast_election = true;
    }
    if args.no_fast_election {
        config.fast_election = false;
    }
    macro_rules! set {
        ($($f:ident),*) => { $( if let Some(v) = args.$f { config.$f = v; } )* };
    }
    set!(
        tick_ms,
        election_timeout_ms,
        heartbeat_ms,
        ttl_min_ms,
        ttl_max_ms,
        snapshot_threshold_entries,
        request_timeout_ms,
        connections_max,
        connections_per_ip_max,
        http_connections_max,
        http_answer_timeout_ms,
        unauthenticated_connections_max,
        unauthenticated_connections_per_ip_max,
        authenticate_within_ms,
        operator_connections_reserved,
        connections_per_principal_max,
        keepalive_streams_per_principal_max,
        observe_streams_per_principal_max,
        sessions_per_principal_max,
        elections_per_principal_max,
        keys_per_principal_max,
        key_bytes_per_principal_max,
        requests_per_second_per_principal_max,
        election_retention_ms,
        handshake_timeout_ms,
        idle_timeout_ms,
        streams_per_connection_max,
        keepalive_streams_max,
        observe_streams_max
    );
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}
