//! Replicas of an application, each with an embedded tenure node on a runtime of its own
//! (as if in its own process), on loopback ports: the set-up `embedded.rs` and the contract
//! suite's `embedded:` backend share.

// Each test binary uses the part it needs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tenure::embedded::{Embedded, EmbeddedConfig, HostPort};
use tenure::{Client, Error};

pub struct Replicas {
    /// Each replica's node, on a runtime of its own (as if in its own process).
    nodes: BTreeMap<u64, (tokio::runtime::Runtime, Option<Embedded>)>,
    pub addrs: BTreeMap<u64, HostPort>,
    dir: tempfile::TempDir,
    _lock: tenure_testkit::ClusterLock,
}

impl Replicas {
    /// `n` replicas, with TLS (`tls`) or plaintext on loopback.
    pub fn start(n: u64, tls: bool) -> Replicas {
        let lock = tenure_testkit::ClusterLock::acquire();
        let dir = tempfile::Builder::new()
            .prefix("tenure-embedded-")
            .tempdir()
            .expect("a temporary directory");
        if tls {
            tenure_testkit::ClientTls::issue(&dir.path().join("certs"));
        }
        let ports = tenure_testkit::free_ports(n as usize).expect("free loopback ports");
        let addrs: BTreeMap<u64, HostPort> = (1..=n)
            .map(|id| {
                let addr = format!("127.0.0.1:{}", ports[id as usize - 1]);
                (id, addr.parse().expect("an address"))
            })
            .collect();
        let mut replicas = Replicas {
            nodes: BTreeMap::new(),
            addrs,
            dir,
            _lock: lock,
        };
        for id in 1..=n {
            replicas.start_node(id, tls);
        }
        replicas
    }

    pub fn config(&self, id: u64, tls: bool) -> EmbeddedConfig {
        let mut config = EmbeddedConfig::new(
            id,
            self.addrs.clone(),
            self.dir.path().join(format!("node-{id}")),
        );
        if tls {
            config = config.tls(&self.dir.path().join("certs"), tenure_testkit::APP_CLIENT);
        }
        config.server.cluster_id = tenure_testkit::CLUSTER_ID.into();
        config.server.election_timeout_ms = tenure_testkit::ELECTION_TIMEOUT_MS;
        config.server.heartbeat_ms = tenure_testkit::HEARTBEAT_MS;
        config.server.tick_ms = tenure_testkit::TICK_MS;
        config
    }

    pub fn start_node(&mut self, id: u64, tls: bool) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let config = self.config(id, tls);
        let node = rt
            .block_on(tenure::embedded::start(config))
            .expect("start an embedded node");
        self.nodes.insert(id, (rt, Some(node)));
    }

    pub fn node(&self, id: u64) -> &Embedded {
        self.nodes[&id].1.as_ref().expect("running")
    }

    /// Replica `id`'s runtime: its clients and campaigns run there, as in its process.
    pub fn rt(&self, id: u64) -> &tokio::runtime::Runtime {
        &self.nodes[&id].0
    }

    /// End replica `id` as its process ending would: its node stops, and every task of its
    /// runtime (its client's keepalives included) is gone.
    pub fn stop(&mut self, id: u64) {
        let (rt, node) = self.nodes.remove(&id).expect("a replica");
        let node = node.expect("running");
        rt.block_on(node.shutdown()).expect("a clean stop");
        rt.shutdown_background();
    }
}

/// Returns once the replicas have a Raft leader, seen through `client`.
pub async fn raft_ready(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    // A leader answers "unknown election"; without one, the call fails otherwise.
    while let Err(e) = client.leader("ready").await {
        if matches!(e, Error::UnknownElection(_)) {
            return;
        }
        assert!(Instant::now() < deadline, "no Raft leader within 10 s: {e}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
