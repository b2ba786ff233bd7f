//! Running one node: [`run`] recovers the write-ahead log, starts the driver thread and
//! the peer transport, serves the gRPC API and the HTTP port (with the dashboard) on the
//! listeners it is given ([`Listeners`]), and stops on `shutdown` (the mini-redis shape).
//! This is where the parts are put together: no module imports it but `embed.rs`, which runs
//! it inside an application.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tenure_core::message::Message;
use tenure_core::node::Node;
use tenure_core::storage::Storage;
use tenure_proto::v1;
use tenure_transport::{Transport, TransportConfig, TransportHandle};
use tokio::net::TcpListener;

use crate::config::{self, ServerConfig};
use crate::driver::{self, Input, Outbox};
use crate::{
    admin, api, auth, conn, dashboard, directory, handover, http, retention, shared_port, tls,
};

/// Why the server could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration breaks a rule.
    #[error("invalid configuration: {0}")]
    Config(#[from] config::ConfigError),
    /// The write-ahead log could not be opened or recovered.
    #[error("storage: {0}")]
    Storage(String),
    /// The recovered state does not make a valid node.
    #[error("cannot start the node: {0}")]
    Node(#[from] tenure_core::node::NodeError),
    /// The peer transport failed to start.
    #[error("peer transport: {0}")]
    Transport(String),
    /// A listener failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// One of this node's addresses cannot be listened on.
    #[error(
        "cannot listen on {addr}, the {what} address of node {id} (--node {id}=PEER,CLIENT,HTTP, \
         or nodes.{id}.{what} in the config file): {why}"
    )]
    Bind {
        /// This node's id.
        id: u64,
        /// Which port: `peer`, `client` or `http`.
        what: &'static str,
        /// The address as configured.
        addr: String,
        /// What went wrong (unresolvable, in use, not loopback without TLS, …).
        why: String,
    },
    /// The driver stopped with an error.
    #[error("{0}")]
    Driver(String),
    /// The TLS material could not be loaded or used.
    #[error("tls: {0}")]
    Tls(String),
    /// The auth file could not be loaded.
    #[error("{0}")]
    Auth(String),
    /// The data directory belongs to another node or another cluster.
    #[error(
        "data directory {dir} belongs to node {found_node} of cluster {found_cluster:?}, not \
         to node {node} of cluster {cluster:?}: was it copied from another node? Start with \
         the right --id and cluster id, or with an empty directory"
    )]
    WrongIdentity {
        /// The data directory.
        dir: String,
        /// The node id it was written by.
        found_node: u64,
        /// The cluster id it was written by.
        found_cluster: String,
        /// This node's id.
        node: u64,
        /// This node's cluster id.
        cluster: String,
    },
    /// The data directory holds Raft state (a log, a snapshot, a term or vote) but no
    /// identity file: whose it is cannot be told.
    #[error(
        "data directory {dir} holds a Raft log or state but no {IDENTITY_FILE} file, so nothing \
         says which node it belongs to; starting it as node {node} could give that node another \
         node's vote and log. Restore the file if you know the directory is this node's, or \
         start with an empty directory"
    )]
    IdentityMissing {
        /// The data directory.
        dir: String,
        /// This node's id.
        node: u64,
    },
}

impl From<tls::TlsError> for ServerError {
    fn from(e: tls::TlsError) -> ServerError {
        ServerError::Tls(e.to_string())
    }
}

pub use crate::restore::IDENTITY_FILE;

/// On first start, write this node's id and cluster id into its data directory (0600,
/// fsynced); on every later start, refuse a directory written by another node or cluster.
/// `holds_state`: the directory's log holds anything (then a missing identity file is
/// refused, not written: the state is someone's).
pub fn check_identity(
    dir: &std::path::Path,
    node: u64,
    cluster: &str,
    holds_state: bool,
) -> Result<u64, ServerError> {
    let path = dir.join(IDENTITY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let (found_cluster, found_node, generation) = crate::restore::parse_identity(&text);
            if found_node == node && found_cluster == cluster {
                Ok(generation)
            } else {
                Err(ServerError::WrongIdentity {
                    dir: dir.display().to_string(),
                    found_node,
                    found_cluster,
                    node,
                    cluster: cluster.to_owned(),
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && holds_state => {
            Err(ServerError::IdentityMissing {
                dir: dir.display().to_string(),
                node,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::restore::write_identity(dir, cluster, node, 0)?;
            Ok(0)
        }
        Err(e) => Err(ServerError::Io(e)),
    }
}

/// Environment variable that switches a known bug back on in the driver core, to prove that
/// the real-process nemesis catches it (`not-leader-after-snapshot`), or kills the driver
/// thread (`driver-dies`). Never set in production; a server started with it says so loudly.
pub const INJECT_BUG_ENV: &str = "TENURE_INJECT_BUG";

/// `TENURE_INJECT_BUG=driver-dies`: the driver thread panics [`DRIVER_DIES_AFTER`] after the
/// node starts, as it did on a snapshot race: the death that the nemesis's `processes` verdict
/// must see (the node exits, and nothing else kills it).
const DRIVER_DIES: &str = "driver-dies";

/// When `driver-dies` strikes.
const DRIVER_DIES_AFTER: Duration = Duration::from_secs(3);

fn injected_driver_bugs() -> Result<tenure_driver::DriverBugs, ServerError> {
    let Ok(name) = std::env::var(INJECT_BUG_ENV) else {
        return Ok(tenure_driver::DriverBugs::default());
    };
    let bugs = match name.as_str() {
        DRIVER_DIES => Some(tenure_driver::DriverBugs::default()),
        _ => tenure_driver::DriverBugs::from_name(&name),
    };
    let bugs = bugs.ok_or_else(|| {
        ServerError::Driver(format!(
            "{INJECT_BUG_ENV}={name:?} names no known bug (known: not-leader-after-snapshot, \
             {DRIVER_DIES})"
        ))
    })?;
    tracing::warn!("{INJECT_BUG_ENV}={name}: a KNOWN BUG is switched on; for tests only");
    eprintln!("WARNING: {INJECT_BUG_ENV}={name}: a known bug is switched on; for tests only");
    Ok(bugs)
}

/// The three listeners a server needs, bound by the caller (so tests can bind port 0).
/// Where a node's addresses name one port for several protocols, each of them gets its
/// share of that port ([`shared_port`]).
pub struct Listeners {
    /// Raft peers.
    pub peer: tenure_transport::Incoming,
    /// gRPC clients.
    pub client: tenure_transport::Incoming,
    /// HTTP.
    pub http: tenure_transport::Incoming,
}

impl Listeners {
    /// Bind the addresses of this node in `config`. A name is resolved now, and the first
    /// of its addresses that can be bound is used; with TLS off (and no `insecure`) only
    /// loopback addresses are bound, whatever a name resolves to. A failure names the
    /// address, the port it is for and the flag that gave it.
    pub async fn bind(config: &ServerConfig) -> Result<Listeners, ServerError> {
        use shared_port::Protocol;
        let me = config.me();
        let loopback_only = config.tls.is_none() && !config.insecure;
        let handshake = Duration::from_millis(config.handshake_timeout_ms);
        let wanted = [
            (Protocol::Peer, &me.peer),
            (Protocol::Client, &me.client),
            (Protocol::Http, &me.http),
        ];
        let mut incoming = BTreeMap::new();
        for addr in me.ports() {
            let here: Vec<Protocol> = wanted
                .iter()
                .filter(|(_, a)| *a == addr)
                .map(|(p, _)| *p)
                .collect();
            let listener = bind_one(config.id, here[0].name(), addr, loopback_only).await?;
            if let [only] = here[..] {
                incoming.insert(only, listener.into());
            } else {
                incoming.extend(shared_port::share(listener, &here, handshake)?);
            }
        }
        let mut take = |p| incoming.remove(&p).expect("every protocol has an address");
        Ok(Listeners {
            peer: take(Protocol::Peer),
            client: take(Protocol::Client),
            http: take(Protocol::Http),
        })
    }
}

async fn bind_one(
    id: u64,
    what: &'static str,
    addr: &config::HostPort,
    loopback_only: bool,
) -> Result<TcpListener, ServerError> {
    let fail = |why: String| ServerError::Bind {
        id,
        what,
        addr: addr.to_string(),
        why,
    };
    let found = addr.resolve().await.map_err(|e| fail(e.to_string()))?;
    let mut why = String::new();
    for a in found {
        if loopback_only && !a.ip().is_loopback() {
            why = format!(
                "it resolves to {a}, which is not loopback, and TLS is off (give --tls-dir, or \
                 --insecure to serve plaintext there anyway)"
            );
            continue;
        }
        match TcpListener::bind(a).await {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                why =
                    format!("{a} is already in use (is another node or program listening there?)");
            }
            Err(e) => why = format!("{a}: {e}"),
        }
    }
    Err(fail(why))
}

struct TransportOutbox(TransportHandle);

impl Outbox for TransportOutbox {
    fn send(&self, message: Message) {
        // A message that cannot be queued is dropped; Raft retransmits what matters.
        let _ = self.0.send(message);
    }

    fn set_follow_epoch(&self, epoch: u64) {
        self.0.set_event_stamp(epoch);
    }
}

/// Says at start what is encrypted and who is authenticated, loudly when not.
fn log_security(config: &ServerConfig, policy: Option<&auth::Policy>) {
    let who = match policy.map(|p| &p.source) {
        Some(auth::PolicySource::File(path)) => format!(
            "clients authenticate with a client certificate or a bearer token and are \
             authorized by {}",
            path.display()
        ),
        Some(auth::PolicySource::DefaultWithTls) => format!(
            "clients authenticate with a client certificate of the cluster (no auth file: \
             {:?} administer, every other client certificate may use elections and keys)",
            config.admin_clients
        ),
        None => String::new(),
    };
    match (&config.tls, policy) {
        (Some(paths), _) => tracing::info!(
            node = config.id,
            "TLS on: peers with mutual TLS, clients and http with the certificate {}; {who}",
            paths.cert.display()
        ),
        (None, Some(_)) => tracing::warn!(
            node = config.id,
            "TLS is off: bearer tokens and all traffic travel in plaintext{}; {who}",
            if config.plaintext_exposed() {
                " on addresses others can reach (--insecure)"
            } else {
                " (loopback only)"
            }
        ),
        (None, None) if config.plaintext_exposed() => tracing::warn!(
            node = config.id,
            "INSECURE: TLS is off and this node serves plaintext on addresses others can reach \
             (--insecure): anyone on the network can read and forge cluster traffic, and \
             client authentication is off (any client may change membership)"
        ),
        (None, None) => tracing::warn!(
            node = config.id,
            "TLS is off: plaintext on loopback only, and client authentication is off \
             (give --tls-dir to turn both on)"
        ),
    }
}

/// Run one server until `shutdown` completes.
pub async fn run(
    mut config: ServerConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    config.validate()?;
    let node_tls = config.tls.as_ref().map(tls::NodeTls::load).transpose()?;
    let policy = match (&config.auth_file, &config.tls) {
        (Some(path), _) => {
            Some(auth::Policy::load(path).map_err(|e| ServerError::Auth(e.to_string()))?)
        }
        (None, Some(_)) => Some(auth::Policy::default_with_tls(&config.admin_clients)),
        (None, None) => None,
    };
    log_security(&config, policy.as_ref());
    let mut storage =
        tenure_wal::FileStorage::open(&config.data_dir, tenure_wal::WalOptions::default())
            .map_err(|e| ServerError::Storage(e.to_string()))?;
    config.generation = check_identity(
        &config.data_dir,
        config.id,
        &config.cluster_id,
        storage.holds_state(),
    )?;
    if config.fault_injection {
        tracing::warn!(
            node = config.id,
            "FAULT INJECTION is on: POST /debug/block and /debug/driver-panic on the HTTP port \
             cut this node off or kill its driver{}; for tests only, never in production",
            if policy.is_some() {
                " (admins only)"
            } else {
                ", for anyone who can reach the port"
            }
        );
    }
    if let Some(repaired) = storage.repaired() {
        // A torn write at the end of the log was cut: say what, so that an operator who
        // did not expect a crash learns that one happened.
        tracing::warn!(node = config.id, "recovery repaired the log: {repaired}");
    }
    let recovered = storage
        .recover()
        .map_err(|e| ServerError::Storage(e.to_string()))?;
    tracing::info!(
        node = config.id,
        term = recovered.hard_state.term,
        entries = recovered.entries.len(),
        snapshot = recovered.snapshot.as_ref().map(|s| s.index),
        "recovered from {}",
        config.data_dir.display()
    );
    let node = Node::new(config.core_config(), recovered)?;

    let peers: BTreeMap<_, _> = config
        .nodes
        .iter()
        .filter(|(id, _)| **id != config.id)
        .map(|(id, a)| (*id, a.peer.clone()))
        .collect();
    let mut tcfg =
        TransportConfig::new(config.id, config.cluster_id.clone(), listeners.peer, peers);
    // Members of another generation (restored or recovered) are refused at the handshake.
    tcfg.generation = config.generation;
    // A follower that fell behind the leader's log catches up by one InstallSnapshot
    // message carrying the whole state: peer frames must hold the largest snapshot the
    // write-ahead log accepts, not only the largest client message.
    tcfg.frame_bytes_max = config
        .message_bytes_max
        .max(peer_frame_bytes_max(&tenure_wal::WalOptions::default()));
    tcfg.tls = node_tls.as_ref().map(tls::NodeTls::peer).transpose()?;
    let (transport, mut inbound) =
        Transport::start(tcfg).map_err(|e| ServerError::Transport(e.to_string()))?;

    let tick = Duration::from_millis(config.tick_ms);
    let bugs = injected_driver_bugs()?;
    // The dashboard's event log: the driver feeds it through its event sink, the dashboard
    // streams it.
    let journal = Arc::new(dashboard::Journal::default());
    let (driver, handle) = driver::new_driver(
        node,
        storage,
        TransportOutbox(transport.clone()),
        tick,
        bugs,
        journal.clone(),
    );
    // `/metrics` shows the transport's per-peer counters next to the driver's.
    let _ = handle.metrics.transport.set(transport.clone());
    // The node cannot live without its driver thread: when it ends (a panic, a storage
    // failure) before a shutdown asked it to, `/health` fails at once and `run` returns an
    // error, so that the process exits and its supervisor restarts it.
    let (driver_ended_tx, driver_ended) = tokio::sync::oneshot::channel::<String>();
    let running = Arc::clone(&handle.running);
    let driver_thread = std::thread::Builder::new()
        .name(format!("tenure-driver-{}", config.id))
        .spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.run()));
            running.store(false, std::sync::atomic::Ordering::SeqCst);
            let why = match &result {
                Ok(Ok(())) => "it stopped".to_string(),
                Ok(Err(e)) => e.to_string(),
                Err(panic) => format!("it panicked: {}", driver::panic_message(panic.as_ref())),
            };
            let _ = driver_ended_tx.send(why);
            match result {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })?;

    if std::env::var(INJECT_BUG_ENV).is_ok_and(|name| name == DRIVER_DIES) {
        let inputs = handle.inputs.clone();
        tokio::spawn(async move {
            tokio::time::sleep(DRIVER_DIES_AFTER).await;
            let _ = inputs.send(Input::InjectPanic).await;
        });
    }

    // Members added at run time: dial them once their addresses (the replicated directory)
    // and their membership are applied here; forget those removed since.
    let peers_follow = tokio::spawn(follow_members(
        config.id,
        config.nodes.keys().copied().collect(),
        handle.published.clone(),
        transport.clone(),
    ));
    // Peer messages into the driver. If the driver is saturated, wait: TCP then pushes back
    // on the senders, whose queues drop, which Raft tolerates.
    let inputs = handle.inputs.clone();
    let forward = tokio::spawn(async move {
        while let Some(m) = inbound.recv().await {
            if inputs.send(Input::Peer(m)).await.is_err() {
                break;
            }
        }
    });
    // Fast election: closed connections and refused dials, in the order the writers saw
    // them. The node acts on them only while it follows a leader whose connection closed.
    let peer_events = config.fast_election.then(|| {
        let mut events = transport
            .take_peer_events()
            .expect("nothing else takes the transport's events");
        let inputs = handle.inputs.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let input = match event {
                    tenure_transport::PeerEvent::Closed(peer) => Input::PeerClosed(peer),
                    tenure_transport::PeerEvent::Refused { peer, stamp } => {
                        Input::PeerRefused(peer, stamp)
                    }
                };
                if inputs.send(input).await.is_err() {
                    break;
                }
            }
        })
    });
    // The driver counts ticks from the monotonic clock; this only wakes it up.
    let inputs = handle.inputs.clone();
    let waker = tokio::spawn(async move {
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            interval.tick().await;
            if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) =
                inputs.try_send(Input::Wake)
            {
                break;
            }
        }
    });

    let policy = policy.map(std::sync::Arc::new);
    let limits = |max: usize| conn::Limits {
        max,
        per_ip_max: config.connections_per_ip_max,
        handshake: Duration::from_millis(config.handshake_timeout_ms),
        idle: Duration::from_millis(config.idle_timeout_ms),
        auth: None,
        answer_within: None,
    };
    let client_gate = conn::Gate::new(
        conn::Limits {
            auth: policy.is_some().then(|| conn::AuthLimits {
                unauthenticated_max: config.unauthenticated_connections_max,
                unauthenticated_per_ip_max: config.unauthenticated_connections_per_ip_max,
                deadline: Duration::from_millis(config.authenticate_within_ms),
                operator_reserve: config
                    .operator_connections_reserved
                    .min(config.connections_max / 8),
                per_principal_max: config.connections_per_principal_max,
            }),
            ..limits(config.connections_max)
        },
        Arc::clone(&handle.metrics.client_connections),
    );
    let directory = directory::Directory::new(&config, &handle);
    let admin = admin::Admin::new(&config, handle.clone(), policy.clone(), directory.clone());
    let api = api::Api::new(
        &config,
        handle.clone(),
        policy.clone(),
        client_gate.ends(),
        admin.clone(),
        directory.clone(),
    );
    if config.election_retention_ms > 0 {
        tokio::spawn(retention::run(
            handle.clone(),
            Duration::from_millis(config.election_retention_ms),
            config.request_timeout(),
        ));
    }
    let limit = config.message_bytes_max;
    let ping = Duration::from_millis(config.idle_timeout_ms / 3);
    let mut grpc = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(ping))
        .http2_keepalive_timeout(Some(ping))
        .max_concurrent_streams(Some(config.streams_per_connection_max));
    if let Some(node_tls) = &node_tls {
        grpc = grpc
            .tls_config(node_tls.grpc(Duration::from_millis(config.handshake_timeout_ms))?)
            .map_err(|e| ServerError::Tls(e.to_string()))?;
    }
    let grpc = grpc
        .layer(tower::util::MapResponseLayer::new(label_decoder_errors))
        .layer(api::admission::AuthenticateLayer::new(
            policy.clone(),
            &config.cluster_id,
            client_gate.ends(),
            Arc::clone(&handle.metrics),
        ))
        .add_service(
            v1::sessions_server::SessionsServer::new(api.clone()).max_decoding_message_size(limit),
        )
        .add_service(
            v1::elections_server::ElectionsServer::new(api.clone())
                .max_decoding_message_size(limit),
        )
        .add_service(
            v1::fenced_keys_server::FencedKeysServer::new(api.clone())
                .max_decoding_message_size(limit),
        )
        .add_service(v1::cluster_server::ClusterServer::new(api).max_decoding_message_size(limit));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let http_gate = conn::Gate::new(
        conn::Limits {
            answer_within: Some(
                Duration::from_millis(config.http_answer_timeout_ms)
                    .max(config.request_timeout() + Duration::from_secs(1)),
            ),
            ..limits(config.http_connections_max)
        },
        Arc::clone(&handle.metrics.http_connections),
    );
    let probe = {
        let directory = directory.clone();
        handover::Probe {
            // A member added at run time is reached at the address the log recorded.
            http: Arc::new(move |id| directory.addrs(id).map(|a| a.http)),
            tls: node_tls
                .as_ref()
                .map(|t| {
                    t.client_config()
                        .map(|c| (Arc::new(c), config.cluster_id.clone()))
                })
                .transpose()?,
        }
    };
    let step_down = handover::run(
        client_gate.clone(),
        handle.clone(),
        config.id,
        config.request_timeout(),
        probe,
    );
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(client_gate.clone().serve(listeners.client)),
        |(conn, _peer)| Ok::<_, std::io::Error>(conn),
    );
    let mut grpc_stop = stop_rx.clone();
    let grpc_task = tokio::spawn(async move {
        grpc.serve_with_incoming_shutdown(incoming, async move {
            let _ = grpc_stop.wait_for(|s| *s).await;
        })
        .await
    });
    let names = node_tls
        .as_ref()
        .map(tls::NodeTls::dns_names)
        .unwrap_or_default();
    let http_state = http::HttpState::new(
        &config,
        handle.clone(),
        policy.clone(),
        client_gate,
        directory,
    );
    let dashboard = dashboard::Dashboard::start(&config, &handle, journal, admin, &names);
    let router = http::router(http_state.clone())
        .merge(dashboard::router(http_state, dashboard))
        .merge(http::fault::router(
            transport.clone(),
            handle.clone(),
            config.fault_injection,
            policy.clone(),
            &config.cluster_id,
        ));
    let mut http_stop = stop_rx.clone();
    let http_stopped = async move {
        let _ = http_stop.wait_for(|s| *s).await;
    };
    let http_task = match &node_tls {
        None => serve_http(
            conn::ChannelListener::gated(listeners.http, http_gate)?,
            router,
            http_stopped,
        ),
        Some(node_tls) => serve_http(
            tls::https_listener(
                listeners.http,
                http_gate,
                node_tls.http_acceptor()?,
                Duration::from_millis(config.handshake_timeout_ms),
            )?,
            router,
            http_stopped,
        ),
    };
    tracing::info!(
        node = config.id,
        "serving: peers {}, clients {}, http {}",
        config.me().peer,
        config.me().client,
        config.me().http
    );

    // The tasks that feed the driver and follow its state, stopped first on any way out.
    let background: Vec<tokio::task::AbortHandle> = [&waker, &forward, &peers_follow, &step_down]
        .into_iter()
        .chain(peer_events.as_ref())
        .map(|t| t.abort_handle())
        .collect();
    tokio::select! {
        () = shutdown => {}
        why = driver_ended => {
            let why = why.unwrap_or_else(|_| "it ended without a word".to_string());
            tracing::error!(
                node = config.id,
                event = "driver_died",
                "the driver thread ended ({why}): this node can no longer take part; exiting"
            );
            let _ = stop_tx.send(true);
            background.iter().for_each(tokio::task::AbortHandle::abort);
            grpc_task.abort();
            http_task.abort();
            transport.shutdown().await;
            return Err(ServerError::Driver(format!(
                "node {}: the driver thread ended ({why})",
                config.id
            )));
        }
    }
    tracing::info!(node = config.id, "shutting down");
    let _ = stop_tx.send(true);
    let _ = handle.inputs.send(Input::Shutdown).await;
    background.iter().for_each(tokio::task::AbortHandle::abort);
    // Graceful shutdown waits for clients to finish, and a client holding a stream (or one
    // that ignores GOAWAY) would hold the node forever: give them a deadline, then drop them.
    let deadline = Duration::from_secs(2);
    let grpc_abort = grpc_task.abort_handle();
    if tokio::time::timeout(deadline, grpc_task).await.is_err() {
        tracing::warn!(
            node = config.id,
            "clients still connected after {deadline:?}; closing them"
        );
        grpc_abort.abort();
    }
    let http_abort = http_task.abort_handle();
    if tokio::time::timeout(deadline, http_task).await.is_err() {
        http_abort.abort();
    }
    // The driver stops before the transport closes the peer listener: while this node can
    // still lead, its peer port accepts, so that a refused dial proves to its followers that
    // it can no longer act as leader (fast election; docs/GUARANTEES.md).
    let result = tokio::task::spawn_blocking(move || driver_thread.join())
        .await
        .map_err(|e| ServerError::Driver(e.to_string()))?;
    transport.shutdown().await;
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(ServerError::Driver(e.to_string())),
        Err(_) => Err(ServerError::Driver("the driver thread panicked".into())),
    }
}

/// The HTTP port's server on `listener` (plaintext or TLS), until `stopped`; each request
/// knows its client's certificate (if any) as an [`http::HttpPeer`].
fn serve_http<Io>(
    listener: conn::ChannelListener<Io>,
    router: axum::Router,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<std::io::Result<()>>
where
    Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    http::HttpPeer: for<'a> axum::extract::connect_info::Connected<
        axum::serve::IncomingStream<'a, conn::ChannelListener<Io>>,
    >,
{
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<http::HttpPeer>(),
        )
        .with_graceful_shutdown(stopped)
        .await
    })
}

/// The largest peer frame: an InstallSnapshot of the largest snapshot `wal` accepts, with
/// room for the message around it.
fn peer_frame_bytes_max(wal: &tenure_wal::WalOptions) -> usize {
    (wal.snapshot_bytes_max as usize).saturating_add(1 << 20)
}

/// A request that tonic's decoder refuses (over `message_bytes_max`) never reaches our
/// handlers, so it would leave as OUT_OF_RANGE without the `tenure-error` reason the API
/// promises. Label it here as the size violation it is: INVALID_ARGUMENT, `invalid-argument`.
fn label_decoder_errors<B>(
    mut response: tonic::codegen::http::Response<B>,
) -> tonic::codegen::http::Response<B> {
    use tonic::codegen::http::HeaderValue;
    let headers = response.headers_mut();
    let out_of_range = headers
        .get("grpc-status")
        .is_some_and(|v| v.as_bytes() == b"11");
    if out_of_range && !headers.contains_key(tenure_proto::ERROR_KEY) {
        headers.insert("grpc-status", HeaderValue::from_static("3"));
        headers.insert(
            tenure_proto::ERROR_KEY,
            HeaderValue::from_static(tenure_proto::Reason::InvalidArgument.as_str()),
        );
    }
    response
}

/// Keeps the transport's peers in step with the membership: a member whose addresses are in
/// the replicated directory is dialed (and admitted) from the moment this node has applied
/// that entry and holds a membership naming it, at the directory's address even if the
/// static configuration names another (the member moved). A peer that came from the
/// directory and left the membership is forgotten; statically configured peers stay, as
/// before membership changes existed.
async fn follow_members(
    me: tenure_core::types::NodeId,
    configured: std::collections::BTreeSet<tenure_core::types::NodeId>,
    mut published: tokio::sync::watch::Receiver<driver::Published>,
    transport: tenure_transport::TransportHandle,
) {
    let mut dynamic = std::collections::BTreeSet::new();
    loop {
        let wanted: BTreeMap<tenure_core::types::NodeId, tenure_transport::HostPort> = {
            let p = published.borrow_and_update();
            let members = p.status.membership.all_nodes();
            p.members
                .iter()
                .filter(|(id, _)| **id != me && members.contains(id))
                .filter_map(|(id, a)| Some((*id, a.peer.parse().ok()?)))
                .collect()
        };
        for (id, addr) in &wanted {
            if let Err(e) = transport.set_peer(*id, addr.clone()) {
                tracing::warn!(node = me, peer = id, %addr, error = %e, "cannot add peer");
            }
            dynamic.insert(*id);
        }
        for id in dynamic.clone() {
            if !wanted.contains_key(&id) {
                dynamic.remove(&id);
                if !configured.contains(&id) {
                    transport.remove_peer(id);
                }
            }
        }
        if published.changed().await.is_err() {
            return;
        }
    }
}
