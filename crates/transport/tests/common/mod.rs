//! Helpers shared by the transport's integration tests.
#![allow(dead_code)] // Each test file uses a different subset.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tenure_core::message::{Body, Message};
use tenure_core::types::{Membership, NodeId, Snapshot};
use tenure_transport::{
    encode_hello, Hello, Transport, TransportConfig, TransportHandle, PROTOCOL_VERSION,
};
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

/// Starts a transport with `cfg`, whose listener is bound at `addr`.
pub fn start(cfg: TransportConfig, addr: SocketAddr) -> Node {
    let id = cfg.id;
    let (handle, inbound) =
        Transport::start(cfg).unwrap_or_else(|e| panic!("start node {id}: {e}"));
    Node {
        id,
        addr,
        handle,
        inbound,
    }
}

/// Starts nodes 1 and 2, each the other's peer (not waiting for them to connect). Node 1
/// also has the peers `absent`, at addresses where nobody listens (their ports are closed
/// once bound). `tune` adjusts each node's configuration before the node starts.
pub async fn pair(absent: &[NodeId], tune: impl Fn(&mut TransportConfig)) -> [Node; 2] {
    let (l1, l2) = (bind().await, bind().await);
    let (a1, a2) = (
        l1.local_addr().expect("addr"),
        l2.local_addr().expect("addr"),
    );
    let mut peers1 = BTreeMap::from([(2, a2)]);
    for &id in absent {
        // The listener drops at once: nobody listens for this peer.
        peers1.insert(id, bind().await.local_addr().expect("addr"));
    }
    let mut cfg1 = config(1, l1, peers1);
    tune(&mut cfg1);
    let node1 = start(cfg1, a1);
    let mut cfg2 = config(2, l2, BTreeMap::from([(1, a1)]));
    tune(&mut cfg2);
    [node1, start(cfg2, a2)]
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
        nodes.push(start(config(id, listener, peers), addrs[&id]));
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

/// A snapshot of `data` from `from` to `to`, both voters.
pub fn snapshot_message(from: NodeId, to: NodeId, data: Vec<u8>) -> Message {
    Message {
        from,
        to,
        term: 1,
        body: Body::InstallSnapshot {
            snapshot: Snapshot {
                index: 1,
                term: 1,
                membership: Membership::new([from, to]),
                data,
            },
            sent_tick: 0,
        },
    }
}

/// The handshake frame of node `node_id` of cluster `cluster_id`, speaking `version`.
pub fn hello_with_version(cluster_id: &str, node_id: NodeId, version: u8) -> Vec<u8> {
    encode_hello(&Hello {
        cluster_id: cluster_id.to_string(),
        node_id,
        protocol_version: version,
    })
    .expect("hello encodes")
}

/// The handshake frame of node `node_id` of cluster `cluster_id`.
pub fn hello(cluster_id: &str, node_id: NodeId) -> Vec<u8> {
    hello_with_version(cluster_id, node_id, PROTOCOL_VERSION)
}

/// A frame around `payload` with `flags`, its length and checksum right (whatever the
/// payload holds). The checksum is CRC-32C, from the `crc32c` crate.
pub fn framed(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = b"TNR1".to_vec();
    frame.push(PROTOCOL_VERSION);
    frame.push(flags);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

pub async fn recv(inbound: &mut mpsc::Receiver<Message>) -> Message {
    bounded("an inbound message", inbound.recv())
        .await
        .expect("inbound channel open")
}
