//! A tenure node inside an application's own process: the replicas of a service elect among
//! themselves, with no cluster of their own to run (the shape of Kafka's KRaft).
//!
//! An embedded node is the whole server — the same driver, write-ahead log, peer transport
//! and client API — started on the caller's tokio runtime by [`EmbeddedConfig::start`]. It
//! listens on **one port**: peers, the client API and HTTP (`/metrics`, `/health`, the
//! dashboard) share it, each connection told apart by its first bytes
//! ([`crate::shared_port`]). There is no separate gRPC port to open or firewall: the
//! application's client reaches its own node, and through it the leader, on the addresses
//! the replicas already use for Raft.
//!
//! The trade-off: one less system to run, but the application's elections are now only as
//! available as a majority of its own replicas, and a replica's pauses (GC, CPU
//! starvation, a debugger) pause its node too. See docs/EMBEDDED.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tenure_core::types::NodeId;

use crate::config::{HostPort, NodeAddrs, ServerConfig, TlsPaths};
use crate::server::{Listeners, ServerError};

/// What an embedded node needs: who it is, where every replica listens, where its data
/// lives, and (with TLS, the default to use) its certificates and the application's client
/// identity. Every server setting is reachable through [`EmbeddedConfig::server`].
#[derive(Clone, Debug)]
pub struct EmbeddedConfig {
    /// The node's configuration; its nodes each serve everything on one port.
    pub server: ServerConfig,
    /// The application's client certificate and key (`client-<name>.pem` from
    /// `tenure certs --clients NAME`), presented to its own node and to the leader.
    pub client_identity: Option<(PathBuf, PathBuf)>,
}

impl EmbeddedConfig {
    /// Node `id` of the replicas `nodes` (each replica's one `HOST:PORT`, this one's
    /// included), keeping its log in `data_dir`. Without [`EmbeddedConfig::tls`] it serves
    /// plaintext, on loopback only, and authenticates nobody.
    pub fn new(
        id: NodeId,
        nodes: BTreeMap<NodeId, HostPort>,
        data_dir: impl Into<PathBuf>,
    ) -> EmbeddedConfig {
        let nodes = nodes
            .into_iter()
            .map(|(id, addr)| (id, NodeAddrs::one_port(addr)))
            .collect();
        EmbeddedConfig {
            server: ServerConfig::with_defaults(id, nodes, data_dir.into()),
            client_identity: None,
        }
    }

    /// TLS and client authentication from the files `tenure certs --nodes … --clients
    /// APP` wrote into `dir`: the node's `node-<id>.pem`, and the application's
    /// `client-<app>.pem`, which the default policy lets use elections and keys.
    pub fn tls(mut self, dir: &Path, app: &str) -> EmbeddedConfig {
        self.server.tls = Some(TlsPaths::in_dir(dir, self.server.id));
        self.client_identity = Some((
            dir.join(format!("client-{app}.pem")),
            dir.join(format!("client-{app}-key.pem")),
        ));
        self
    }

    /// The `tenure://` URL through which the application reaches the cluster: its own node
    /// first, then the others (the client follows the leader from there).
    pub fn client_url(&self) -> String {
        let me = &self.server.me().client;
        let mut hosts = vec![me.to_string()];
        hosts.extend(
            self.server
                .nodes
                .iter()
                .filter(|(id, _)| **id != self.server.id)
                .map(|(_, a)| a.client.to_string()),
        );
        let mut url = format!("tenure://{}", hosts.join(","));
        if let Some(tls) = &self.server.tls {
            url.push_str(&format!("?ca={}", query_value(&tls.ca)));
            if let Some((cert, key)) = &self.client_identity {
                url.push_str(&format!(
                    "&cert={}&key={}",
                    query_value(cert),
                    query_value(key)
                ));
            }
        }
        url
    }

    /// Bind the node's port and start it on the current tokio runtime (its data directory
    /// is created, 0700, if missing). Returns once the node listens; it then finds its
    /// peers and takes part in elections on its own.
    pub async fn start(self) -> Result<EmbeddedNode, ServerError> {
        self.server.validate()?;
        {
            use std::os::unix::fs::DirBuilderExt as _;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.server.data_dir)?;
        }
        let listeners = Listeners::bind(&self.server).await?;
        let url = self.client_url();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let id = self.server.id;
        let task = tokio::spawn(crate::server::run(self.server, listeners, async move {
            let _ = stopped.await;
        }));
        Ok(EmbeddedNode {
            id,
            url,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

/// A path as a URL query value: every byte but unreserved ones and `/` percent-encoded.
fn query_value(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A running embedded node. [`EmbeddedNode::shutdown`] stops it cleanly; dropping it
/// stops it too, without waiting.
#[derive(Debug)]
pub struct EmbeddedNode {
    id: NodeId,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), ServerError>>>,
}

impl EmbeddedNode {
    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The `tenure://` URL the application's clients connect with.
    pub fn client_url(&self) -> &str {
        &self.url
    }

    /// Whether the node stopped on its own (an error it could not serve past).
    pub fn has_stopped(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stop the node: clients are told, the log is closed, the port released.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task
                .await
                .map_err(|e| ServerError::Driver(format!("the embedded node's task: {e}")))?,
            None => Ok(()),
        }
    }
}

impl Drop for EmbeddedNode {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
