//! Connections that misbehave are logged and closed; the node keeps serving its peers.
//!
//! Node 1 is the transport under test. Node 2 is a real, well-behaved peer. Node 9 is a
//! configured peer that never runs, whose identity the raw clients below borrow when a
//! test needs a handshake that succeeds.

mod common;

use std::time::Duration;

use common::*;
use tenure_transport::{encode_frame, TransportConfig, TransportMetrics, HEADER_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Setup {
    node1: Node,
    node2: Node,
}

async fn setup(handshake_timeout: Duration) -> Setup {
    let nodes = pair(&[9], |cfg| {
        if cfg.id == 1 {
            cfg.handshake_timeout = handshake_timeout;
            cfg.reconnect_backoff_max = Duration::from_secs(1);
        }
    })
    .await;
    wait_all_connected(&nodes).await;
    let [node1, node2] = nodes;
    Setup { node1, node2 }
}

/// Nodes 1 and 2 without node 9, node 1 with its configuration adjusted by `tune`, once
/// node 2 has connected to node 1.
async fn connected_to_node_1(tune: impl Fn(&mut TransportConfig)) -> [Node; 2] {
    let nodes = pair(&[], |cfg| {
        if cfg.id == 1 {
            tune(cfg);
        }
    })
    .await;
    wait_connected(&nodes[1].handle, &[1]).await;
    nodes
}

/// Connects to `addr`, writes `bytes`, and waits for the server to close the connection.
async fn send_and_expect_close(addr: std::net::SocketAddr, bytes: &[u8]) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    // The server may close (even reset) while we are still writing; that is fine.
    let _ = stream.write_all(bytes).await;
    expect_closed(&mut stream).await;
}

async fn expect_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; 256];
    match bounded("the server to close the connection", stream.read(&mut buf)).await {
        // A close, or a reset when the server closed with our bytes still unread.
        Ok(0) | Err(_) => {}
        Ok(n) => panic!("the acceptor never writes, got {n} bytes"),
    }
}

/// Proves that node 1 still serves its real peer in both directions.
async fn still_serving(s: &mut Setup, term: u64) {
    s.node2
        .handle
        .send(message(2, 1, term))
        .expect("queued at node 2");
    assert_eq!(recv(&mut s.node1.inbound).await.term, term);
    s.node1
        .handle
        .send(message(1, 2, term + 1))
        .expect("queued at node 1");
    assert_eq!(recv(&mut s.node2.inbound).await.term, term + 1);
}

fn valid_frame(from: u64, to: u64, term: u64) -> Vec<u8> {
    encode_frame(&message(from, to, term)).expect("encodes")
}

/// What node 1 counts when it closes a misbehaving connection.
#[derive(Clone, Copy, Debug)]
enum Counted {
    HandshakeFailures,
    DecodeErrors,
}

impl Counted {
    fn of(self, m: &TransportMetrics) -> u64 {
        match self {
            Counted::HandshakeFailures => m.handshake_failures,
            Counted::DecodeErrors => m.decode_errors,
        }
    }

    /// Waits until node 1 has counted exactly `n` of these.
    async fn reach(self, s: &Setup, n: u64) {
        let handle = s.node1.handle.clone();
        wait_until(&format!("{n} {self:?}"), move || {
            self.of(&handle.metrics()) == n
        })
        .await;
    }
}

/// A connection that sends `bytes` is closed and counted once as `counted`, and node 1
/// still serves node 2.
async fn one_bad_connection(bytes: &[u8], counted: Counted) {
    let mut s = setup(Duration::from_secs(2)).await;
    send_and_expect_close(s.node1.addr, bytes).await;
    counted.reach(&s, 1).await;
    still_serving(&mut s, 10).await;
}

#[tokio::test]
async fn garbage_before_the_handshake_is_refused() {
    one_bad_connection(
        b"GET / HTTP/1.1\r\nHost: tenure\r\n\r\n",
        Counted::HandshakeFailures,
    )
    .await;
}

#[tokio::test]
async fn wrong_magic_is_refused() {
    let mut bytes = hello(CLUSTER, 9);
    bytes[..4].copy_from_slice(b"RAFT");
    one_bad_connection(&bytes, Counted::HandshakeFailures).await;
}

#[tokio::test]
async fn unsupported_version_is_refused() {
    let mut bytes = hello(CLUSTER, 9);
    bytes[4] = 2;
    one_bad_connection(&bytes, Counted::HandshakeFailures).await;
}

#[tokio::test]
async fn oversize_length_is_refused_before_and_after_the_handshake() {
    let mut s = setup(Duration::from_secs(2)).await;
    // Before: a "hello" claiming 4 GiB. Only the header is sent; the server must not wait
    // for (or reserve room for) the rest.
    let mut header = hello(CLUSTER, 9)[..HEADER_BYTES].to_vec();
    header[6..10].copy_from_slice(&u32::MAX.to_be_bytes());
    send_and_expect_close(s.node1.addr, &header).await;
    Counted::HandshakeFailures.reach(&s, 1).await;

    // After: a valid hello, then a message header claiming 4 GiB.
    let mut bytes = hello(CLUSTER, 9);
    let mut frame_header = valid_frame(9, 1, 1)[..HEADER_BYTES].to_vec();
    frame_header[6..10].copy_from_slice(&u32::MAX.to_be_bytes());
    bytes.extend_from_slice(&frame_header);
    send_and_expect_close(s.node1.addr, &bytes).await;
    Counted::DecodeErrors.reach(&s, 1).await;
    still_serving(&mut s, 10).await;
}

#[tokio::test]
async fn bad_checksum_closes_the_connection() {
    let mut s = setup(Duration::from_secs(2)).await;
    let mut bytes = hello(CLUSTER, 9);
    let good = valid_frame(9, 1, 1);
    let mut bad = valid_frame(9, 1, 2);
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    bytes.extend_from_slice(&good);
    bytes.extend_from_slice(&bad);
    send_and_expect_close(s.node1.addr, &bytes).await;
    Counted::DecodeErrors.reach(&s, 1).await;
    // The good frame before the bad one was delivered; nothing after it was.
    assert_eq!(recv(&mut s.node1.inbound).await.term, 1);
    still_serving(&mut s, 10).await;
    assert_eq!(s.node1.handle.metrics().handshake_failures, 0);
}

#[tokio::test]
async fn malformed_payload_closes_the_connection() {
    // Not a bincode Message, but correctly checksummed.
    let mut bytes = hello(CLUSTER, 9);
    bytes.extend_from_slice(&framed(0, &[0xffu8; 7]));
    one_bad_connection(&bytes, Counted::DecodeErrors).await;
}

#[tokio::test]
async fn wrong_handshakes_are_refused() {
    let mut s = setup(Duration::from_secs(2)).await;
    // Another cluster.
    send_and_expect_close(s.node1.addr, &hello("other-cluster", 9)).await;
    // An id that is not a peer.
    send_and_expect_close(s.node1.addr, &hello(CLUSTER, 42)).await;
    // Node 1's own id.
    send_and_expect_close(s.node1.addr, &hello(CLUSTER, 1)).await;
    // A hello claiming another protocol version inside a valid frame.
    send_and_expect_close(s.node1.addr, &hello_with_version(CLUSTER, 9, 7)).await;
    // A message where the hello should be.
    send_and_expect_close(s.node1.addr, &valid_frame(9, 1, 1)).await;
    // A second hello after the first.
    let mut twice = hello(CLUSTER, 9);
    twice.extend_from_slice(&hello(CLUSTER, 9));
    send_and_expect_close(s.node1.addr, &twice).await;
    // Closing (our half) half-way through the hello.
    let mut stream = TcpStream::connect(s.node1.addr).await.expect("connect");
    stream
        .write_all(&hello(CLUSTER, 9)[..HEADER_BYTES + 3])
        .await
        .expect("write");
    stream.shutdown().await.expect("half-close");
    expect_closed(&mut stream).await;
    Counted::HandshakeFailures.reach(&s, 6).await;
    Counted::DecodeErrors.reach(&s, 1).await;
    still_serving(&mut s, 10).await;
    // None of it reached the consensus task.
    assert!(s.node1.inbound.try_recv().is_err());
}

#[tokio::test]
async fn silent_connection_is_closed_after_the_handshake_timeout() {
    let mut s = setup(Duration::from_millis(300)).await;
    let mut stream = TcpStream::connect(s.node1.addr).await.expect("connect");
    let started = tokio::time::Instant::now();
    expect_closed(&mut stream).await;
    assert!(started.elapsed() >= Duration::from_millis(250));
    Counted::HandshakeFailures.reach(&s, 1).await;
    still_serving(&mut s, 10).await;
}

#[tokio::test]
async fn misaddressed_messages_are_dropped_but_the_connection_stays() {
    let mut s = setup(Duration::from_secs(2)).await;
    let mut stream = TcpStream::connect(s.node1.addr).await.expect("connect");
    let mut bytes = hello(CLUSTER, 9);
    bytes.extend_from_slice(&valid_frame(9, 1, 1)); // fine
    bytes.extend_from_slice(&valid_frame(9, 3, 2)); // not for node 1
    bytes.extend_from_slice(&valid_frame(2, 1, 3)); // claims to be from node 2
    bytes.extend_from_slice(&valid_frame(9, 1, 4)); // fine
    stream.write_all(&bytes).await.expect("write");
    assert_eq!(recv(&mut s.node1.inbound).await.term, 1);
    assert_eq!(recv(&mut s.node1.inbound).await.term, 4);
    let metrics = s.node1.handle.metrics();
    assert_eq!(metrics.dropped_misaddressed, 2);
    assert_eq!(metrics.decode_errors, 0);
    assert_eq!(s.node1.handle.peer_states()[&9].inbound_connections, 1);
    // The connection is still open and usable.
    stream
        .write_all(&valid_frame(9, 1, 5))
        .await
        .expect("write");
    assert_eq!(recv(&mut s.node1.inbound).await.term, 5);
    still_serving(&mut s, 10).await;
}

#[tokio::test]
async fn a_newer_connection_from_a_peer_replaces_the_older() {
    let mut s = setup(Duration::from_secs(2)).await;
    let mut old = TcpStream::connect(s.node1.addr).await.expect("connect");
    old.write_all(&hello(CLUSTER, 9)).await.expect("write");
    old.write_all(&valid_frame(9, 1, 1)).await.expect("write");
    assert_eq!(recv(&mut s.node1.inbound).await.term, 1);
    let mut new = TcpStream::connect(s.node1.addr).await.expect("connect");
    new.write_all(&hello(CLUSTER, 9)).await.expect("write");
    new.write_all(&valid_frame(9, 1, 2)).await.expect("write");
    assert_eq!(recv(&mut s.node1.inbound).await.term, 2);
    expect_closed(&mut old).await;
    let handle = s.node1.handle.clone();
    wait_until("one connection from node 9", move || {
        handle.peer_states()[&9].inbound_connections == 1
    })
    .await;
    still_serving(&mut s, 10).await;
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_on_accept() {
    let [mut node1, node2] = connected_to_node_1(|cfg| cfg.connections_max = 2).await;
    // Node 2's connection holds one slot; one silent stranger takes the other.
    let _holder = TcpStream::connect(node1.addr).await.expect("connect");
    let h = node1.handle.clone();
    let mut extra = TcpStream::connect(node1.addr).await.expect("connect");
    expect_closed(&mut extra).await;
    wait_until("a rejected connection", move || {
        h.metrics().connections_rejected == 1
    })
    .await;
    // Node 2 is still served.
    node2.handle.send(message(2, 1, 7)).expect("queued");
    assert_eq!(recv(&mut node1.inbound).await.term, 7);
}

#[tokio::test]
async fn inbound_backpressure_does_not_lose_messages() {
    // A small inbound queue that the consensus task is slow to drain: readers wait, TCP
    // pushes back, and everything that was queued at the sender still arrives in order.
    let [mut node1, node2] = connected_to_node_1(|cfg| cfg.inbound_queue_max = 2).await;
    for term in 0..100 {
        node2.handle.send(message(2, 1, term)).expect("queued");
    }
    for term in 0..100 {
        if term % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(recv(&mut node1.inbound).await.term, term);
    }
}
