//! Where each node is reached: the replicated member directory (members added at run time,
//! or moved) first, then this node's static `--node` configuration. One lookup for every
//! answer that names an address: the gRPC API's redirects and Cluster answers, `/status`,
//! the dashboard's rows, and the hand-over rule's probes.

use std::collections::BTreeMap;
use std::sync::Arc;

use tenure_core::types::NodeId;
use tokio::sync::watch;

use crate::config::{NodeAddrs, ServerConfig};
use crate::driver::{DriverHandle, Published};

/// The lookup, over what the driver publishes and the static configuration.
#[derive(Clone)]
pub struct Directory {
    /// The driver's published state, whose `members` is the replicated directory as applied
    /// here.
    published: watch::Receiver<Published>,
    /// The static configuration's nodes.
    configured: Arc<BTreeMap<NodeId, NodeAddrs>>,
}

impl Directory {
    /// The lookup of a node with `config`, whose driver is `driver`.
    pub fn new(config: &ServerConfig, driver: &DriverHandle) -> Directory {
        Directory {
            published: driver.published.clone(),
            configured: Arc::new(config.nodes.clone()),
        }
    }

    /// Where node `id` is reached, if anyone knows.
    pub fn addrs(&self, id: NodeId) -> Option<NodeAddrs> {
        let from_directory = {
            let published = self.published.borrow();
            // Entries were parsed before they were proposed (`AddMember`); one that does not
            // parse (written by a newer build?) is passed over.
            published.members.get(&id).and_then(|a| {
                Some(NodeAddrs {
                    peer: a.peer.parse().ok()?,
                    client: a.client.parse().ok()?,
                    http: a.http.parse().ok()?,
                })
            })
        };
        from_directory.or_else(|| self.configured.get(&id).cloned())
    }
}
