//! Helpers shared by the transport's integration tests.
#![allow(dead_code)] // Each test file uses a different subset.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tenure_core::message::{Body, Message};
use tenure_core::types::NodeId;
use tenure_transport::{Transport, TransportConfig, TransportHandle};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Every wait in these tests is bounded by this, so a hang fails instead of stalling CI.
pub const WAIT: Duration = Duration::from_secs(10);

pub const CLUSTER: &str = "test-cluster";

/// Fails the test if `future` does not finish within [`WAIT`].
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

pub async fn bind() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0")
}

/// A configuration with fast reconnects, suitable for tests on loopback.
pub fn config(
    id: NodeId,
    listener: TcpListener,
    peers: BTreeMap<NodeId, SocketAddr>,
) -> TransportConfig {
    let mut config = TransportConfig::new(id, CLUSTER, listener, peers);
    config.reconnect_backoff_min = Duration::from_millis(10);
    config.reconnect_backoff_max = Duration::from_millis(200);
    config.connect_timeout = Duration::from_secs(1);
    config.handshake_timeout = Duration::from_secs(2);
    config
}

pub struct Node {
    pub id: NodeId,
    pub addr: SocketAddr,
    pub handle: TransportHandle,
    pub inbound: mpsc::Receiver<Message>,
}

/// Starts nodes `1..=n`, each with all the others as peers.
pub async fn cluster(n: u64) -> Vec<Node> {
    let mut listeners = BTreeMap::new();
    for id in 1..=n {
        listeners.insert(id, bind().await);
    }
    let addrs: BTreeMap<NodeId, SocketAddr> = listeners
        .iter()
        .map(|(&id, l)| (id, l.local_addr().expect("local addr")))
        .collect();
    let mut nodes = Vec::new();
    for (id, listener) in listeners {
        let peers = addrs
            .iter()
            .filter(|(&p, _)| p != id)
            .map(|(&p, &a)| (p, a))
            .collect();
        let (handle, inbound) = Transport::start(config(id, listener, peers)).expect("start");
        nodes.push(Node {
            id,
            addr: addrs[&id],
            handle,
            inbound,
        });
    }
    nodes
}

/// Waits until `handle` has an outbound connection to each of `peers`.
pub async fn wait_connected(handle: &TransportHandle, peers: &[NodeId]) {
    bounded("outbound connections", async {
        loop {
            let states = handle.peer_states();
            if peers.iter().all(|p| states[p].outbound_connected) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// Waits until `condition` holds, polling.
pub async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    bounded(what, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
}

/// Waits until every node of `nodes` is connected to every other.
pub async fn wait_all_connected(nodes: &[Node]) {
    for node in nodes {
        let others: Vec<NodeId> = nodes
            .iter()
            .map(|n| n.id)
            .filter(|&p| p != node.id)
            .collect();
        wait_connected(&node.handle, &others).await;
    }
}

pub fn message(from: NodeId, to: NodeId, term: u64) -> Message {
    Message {
        from,
        to,
        term,
        body: Body::AppendEntries {
            prev_log_index: term,
            prev_log_term: term,
            entries: Vec::new(),
            leader_commit: 0,
            sent_tick: term,
        },
    }
}

pub async fn recv(inbound: &mut mpsc::Receiver<Message>) -> Message {
    bounded("an inbound message", inbound.recv())
        .await
        .expect("inbound channel open")
}
