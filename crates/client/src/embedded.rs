//! Elections with no cluster to run: a tenure node inside the application's own process.
//!
//! Three (or five) replicas of a service each start an embedded node with the same list of
//! replicas; the nodes form a Raft cluster among themselves, and each replica's [`Client`](crate::Client)
//! is the same API as against a separate cluster. A node listens on **one port** for
//! everything — Raft between the replicas, the client API, and HTTP (`/metrics`, `/health`,
//! the dashboard) — so there is no gRPC port to open: the application reaches its own node
//! and, through the leader hints, the leader, at the addresses the replicas already use.
//!
//! ```no_run
//! # #[cfg(feature = "embedded")]
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//! use tenure::embedded::EmbeddedConfig;
//! use tenure::CampaignOptions;
//!
//! let replicas: BTreeMap<u64, _> = [
//!     (1, "10.0.0.1:7400".parse()?),
//!     (2, "10.0.0.2:7400".parse()?),
//!     (3, "10.0.0.3:7400".parse()?),
//! ]
//! .into();
//! // This is replica 2; `tenure certs --out /etc/billing/tls --nodes 1,2,3 --clients billing`
//! // (with a --host for each address) wrote its certificates.
//! let config = EmbeddedConfig::new(2, replicas, "/var/lib/billing/tenure")
//!     .tls("/etc/billing/tls".as_ref(), "billing");
//! let node = tenure::embedded::start(config).await?;
//! let client = node.client().await?;
//! let leadership = client
//!     .campaign("nightly-close", b"replica-2", CampaignOptions::default())
//!     .await?;
//! println!("leading with token {}", leadership.token());
//! # Ok(()) }
//! ```
//!
//! **The trade-off.** One system less to run, deploy, secure and upgrade; but elections are
//! now only as available as a majority of the application's own replicas (scale the service
//! to one replica and nobody can lead), and whatever stalls a replica — a long GC pause, CPU
//! starvation, a debugger — stalls its node too. Fencing tokens keep a stalled leader from
//! doing harm either way. docs/EMBEDDED.md says more.
//!
//! A running node is also reachable as `embedded:CLUSTER` (or `embedded:CLUSTER/ID` when one
//! process runs several, as tests do) by [`Client::connect`](crate::Client::connect), for code that is handed a URL.

use std::collections::BTreeMap;
use std::sync::Mutex;

#[cfg(feature = "embedded")]
use crate::Client;
use crate::{Error, Result};

#[cfg(feature = "embedded")]
pub use tenure_server::config::{HostPort, ServerConfig};
#[cfg(feature = "embedded")]
pub use tenure_server::embed::EmbeddedConfig;

/// The embedded nodes running in this process: `CLUSTER/ID` → the node's client URL.
static RUNNING: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// The client URL of the node that `embedded:NAME` names: `CLUSTER/ID`, or `CLUSTER` when
/// this process runs one node of that cluster.
pub(crate) fn url_of(name: &str) -> Result<String> {
    let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(url) = running.get(name) {
        return Ok(url.clone());
    }
    let prefix = format!("{name}/");
    let mut of_cluster = running.iter().filter(|(k, _)| k.starts_with(&prefix));
    match (of_cluster.next(), of_cluster.next()) {
        (Some((_, url)), None) => Ok(url.clone()),
        (Some(_), Some(_)) => Err(Error::InvalidUrl {
            url: format!("embedded:{name}"),
            why: format!(
                "this process runs several nodes of cluster {name:?} ({}): name one as \
                 embedded:{name}/ID",
                running
                    .keys()
                    .filter(|k| k.starts_with(&prefix))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
        (None, _) => Err(Error::Unavailable(format!(
            "no embedded node of {name:?} runs in this process{}",
            if cfg!(feature = "embedded") {
                " (start one with tenure::embedded::start)"
            } else {
                " (tenure was built without its `embedded` feature)"
            }
        ))),
    }
}

/// Start an embedded node on the current tokio runtime (it binds its port now, then finds
/// its peers on its own), and register it as `embedded:CLUSTER/ID`.
#[cfg(feature = "embedded")]
pub async fn start(config: EmbeddedConfig) -> Result<Embedded> {
    let name = format!("{}/{}", config.server.cluster_id, config.server.id);
    let node = config
        .start()
        .await
        .map_err(|e| Error::Backend(format!("cannot start the embedded node {name}: {e}")))?;
    RUNNING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.clone(), node.client_url().to_string());
    Ok(Embedded {
        id: node.id(),
        url: node.client_url().to_string(),
        node: Some(node),
        name,
    })
}

/// A running embedded node. Dropping it stops the node (without waiting); prefer
/// [`Embedded::shutdown`].
#[cfg(feature = "embedded")]
#[derive(Debug)]
pub struct Embedded {
    /// Taken by [`Embedded::shutdown`].
    node: Option<tenure_server::embed::EmbeddedNode>,
    name: String,
    id: u64,
    url: String,
}

#[cfg(feature = "embedded")]
impl Embedded {
    /// A client that reaches the cluster through this node (then whichever node leads).
    pub async fn client(&self) -> Result<Client> {
        Client::connect(&self.url).await
    }

    /// `CLUSTER/ID`: `embedded:` followed by it names this node.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `tenure://` URL of this node, for tools (`tenure status --cluster URL`).
    pub fn client_url(&self) -> &str {
        &self.url
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Stop the node and wait for it: clients are told, the log is closed, the port
    /// released.
    pub async fn shutdown(mut self) -> Result<()> {
        self.unregister();
        let Some(node) = self.node.take() else {
            return Ok(());
        };
        node.shutdown().await.map_err(|e| {
            Error::Backend(format!(
                "the embedded node {} stopped badly: {e}",
                self.name
            ))
        })
    }

    fn unregister(&self) {
        RUNNING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.name);
    }
}

#[cfg(feature = "embedded")]
impl Drop for Embedded {
    fn drop(&mut self) {
        self.unregister();
    }
}
