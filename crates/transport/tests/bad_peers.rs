//! Connections that misbehave are logged and closed; the node keeps serving its peers.
//!
//! Node 1 is the transport under test. Node 2 is a real, well-behaved peer. Node 9 is a
//! configured peer that never runs, whose identity the raw clients below borrow when a
//! test needs a handshake that succeeds.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use tenure_core::message::Message;
use tenure_transport::{
    encode_frame, encode_hello, Hello, Transport, TransportHandle, TransportMetrics, HEADER_BYTES,
    PROTOCOL_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

struct Setup {
    node1: Node,
    node2: Node,
}

async fn setup(handshake_timeout: Duration) -> Setup {
    let (l1, l2, l9) = (bind().await, bind().await, bind().await);
    let (a1, a2) = (
        l1.local_addr().expect("addr"),
        l2.local_addr().expect("addr"),
    );
    // Nobody listens for node 9: its port is closed once this listener drops.
    let a9 = l9.local_addr().expect("addr");
    drop(l9);
    let mut cfg1 = config(1, l1, BTreeMap::from([(2, a2), (9, a9)]));
    cfg1.handshake_timeout = handshake_timeout;
    cfg1.reconnect_backoff_max = Duration::from_secs(1);
    let (handle, inbound) = Transport::start(cfg1).expect("start node 1");
    let node1 = Node {
        id: 1,
        addr: a1,
        handle,
        inbound,
    };
    let (handle, inbound) =
        Transport::start(config(2, l2, BTreeMap::from([(1, a1)]))).expect("start node 2");
    let node2 = Node {
        id: 2,
        addr: a2,
        handle,
        inbound,
    };
    wait_connected(&node1.handle, &[2]).await;
    wait_connected(&node2.handle, &[1]).await;
    Setup { node1, node2 }
}

fn hello(cluster_id: &str, node_id: u64) -> Vec<u8> {
    encode_hello(&Hello {
        cluster_id: cluster_id.to_string(),
        node_id,
        protocol_version: PROTOCOL_VERSION,
    })
    .expect("hello encodes")
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

async fn wait_metric(handle: &TransportHandle, what: &str, f: impl Fn(TransportMetrics) -> bool) {
    let handle = handle.clone();
    wait_until(what, move || f(handle.metrics())).await;
}

fn valid_frame(from: u64, to: u64, term: u64) -> Vec<u8> {
    encode_frame(&message(from, to, term)).expect("encodes")
}

#[tokio::test]
async fn garbage_before_the_handshake_is_refused() {
    let mut s = setup(Duration::from_secs(2)).await;
    send_and_expect_close(s.node1.addr, b"GET / HTTP/1.1\r\nHost: tenure\r\n\r\n").await;
    wait_metric(&s.node1.handle, "a handshake failure", |m| {
        m.handshake_failures == 1
    })
    .await;
    still_serving(&mut s, 10).await;
}

#[tokio::test]
async fn wrong_magic_is_refused() {
    let mut s = setup(Duration::from_secs(2)).await;
    let mut bytes = hello(CLUSTER, 9);
    bytes[..4].copy_from_slice(b"RAFT");
    send_and_expect_close(s.node1.addr, &bytes).await;
    wait_metric(&s.node1.handle, "a handshake failure", |m| {
        m.handshake_failures == 1
    })
    .await;
    still_serving(&mut s, 10).await;
}

#[tokio::test]
async fn unsupported_version_is_refused() {
    let mut s = setup(Duration::from_secs(2)).await;
    let mut bytes = hello(CLUSTER, 9);
    bytes[4] = 2;
    send_and_expect_close(s.node1.addr, &bytes).await;
    wait_metric(&s.node1.handle, "a handshake failure", |m| {
        m.handshake_failures == 1
    })
    .await;
    still_serving(&mut s, 10).await;
}

#[tokio::test]
async fn oversize_length_is_refused_before_and_after_the_handshake() {
    let mut s = setup(Duration::from_secs(2)).await;
    // Before: a "hello" claiming 4 GiB. Only the header is sent; the server must not wait
    // for (or reserve room for) the rest.
    let mut header = hello(CLUSTER, 9)[..HEADER_BYTES].to_vec();
    header[6..10].copy_from_slice(&u32::MAX.to_be_bytes());
    send_and_expect_close(s.node1.addr, &header).await;
    wait_metric(&s.node1.handle, "a handshake failure", |m| {
        m.handshake_failures == 1
    })
    .await;

    // After: a valid hello, then a message header claiming 4 GiB.
    let mut bytes = hello(CLUSTER, 9);
    let mut frame_header = valid_frame(9, 1, 1)[..HEADER_BYTES].to_vec();
    frame_header[6..10].copy_from_slice(&u32::MAX.to_be_bytes());
    bytes.extend_from_slice(&frame_header);
    send_and_expect_close(s.node1.addr, &bytes).await;
    wait_metric(&s.node1.handle, "a decode error", |m| m.decode_errors == 1).await;
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
    wait_metric(&s.node1.handle, "a decode error", |m| m.decode_errors == 1).await;
    // The good frame before the bad one was delivered; nothing after it was.
    assert_eq!(recv(&mut s.node1.inbound).await.term, 1);
    still_serving(&mut s, 10).await;
    assert_eq!(s.node1.handle.metrics().handshake_failures, 0);
}

#[tokio::test]
async fn malformed_payload_closes_the_connection() {
    let mut s = setup(Duration::from_secs(2)).await;
    let payload = [0xffu8; 7]; // Not a bincode Message, but correctly checksummed.
    let mut frame = valid_frame(9, 1, 1)[..HEADER_BYTES].to_vec();
    frame[6..10].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    frame[10..14].copy_from_slice(&crc32(&payload).to_be_bytes());
    frame.extend_from_slice(&payload);
    let mut bytes = hello(CLUSTER, 9);
    bytes.extend_from_slice(&frame);
    send_and_expect_close(s.node1.addr, &bytes).await;
    wait_metric(&s.node1.handle, "a decode error", |m| m.decode_errors == 1).await;
    still_serving(&mut s, 10).await;
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
    let other_version = encode_hello(&Hello {
        cluster_id: CLUSTER.to_string(),
        node_id: 9,
        protocol_version: 7,
    })
    .expect("encodes");
    send_and_expect_close(s.node1.addr, &other_version).await;
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
    wait_metric(&s.node1.handle, "six handshake failures", |m| {
        m.handshake_failures == 6
    })
    .await;
    wait_metric(&s.node1.handle, "one decode error", |m| {
        m.decode_errors == 1
    })
    .await;
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
    wait_metric(&s.node1.handle, "a handshake failure", |m| {
        m.handshake_failures == 1
    })
    .await;
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
    let (l1, l2) = (bind().await, bind().await);
    let (a1, a2) = (
        l1.local_addr().expect("addr"),
        l2.local_addr().expect("addr"),
    );
    let mut cfg = config(1, l1, BTreeMap::from([(2, a2)]));
    cfg.connections_max = 2;
    let (handle1, mut inbound1) = Transport::start(cfg).expect("start");
    let (handle2, _inbound2) =
        Transport::start(config(2, l2, BTreeMap::from([(1, a1)]))).expect("start");
    wait_connected(&handle2, &[1]).await;
    // Node 2's connection holds one slot; one silent stranger takes the other.
    let _holder = TcpStream::connect(a1).await.expect("connect");
    let h = handle1.clone();
    let mut extra = TcpStream::connect(a1).await.expect("connect");
    expect_closed(&mut extra).await;
    wait_until("a rejected connection", move || {
        h.metrics().connections_rejected == 1
    })
    .await;
    // Node 2 is still served.
    handle2.send(message(2, 1, 7)).expect("queued");
    assert_eq!(recv(&mut inbound1).await.term, 7);
}

#[tokio::test]
async fn inbound_backpressure_does_not_lose_messages() {
    // A small inbound queue that the consensus task is slow to drain: readers wait, TCP
    // pushes back, and everything that was queued at the sender still arrives in order.
    let (l1, l2) = (bind().await, bind().await);
    let (a1, a2) = (
        l1.local_addr().expect("addr"),
        l2.local_addr().expect("addr"),
    );
    let mut cfg = config(1, l1, BTreeMap::from([(2, a2)]));
    cfg.inbound_queue_max = 2;
    let (_handle1, mut inbound1): (_, mpsc::Receiver<Message>) =
        Transport::start(cfg).expect("start");
    let (handle2, _inbound2) =
        Transport::start(config(2, l2, BTreeMap::from([(1, a1)]))).expect("start");
    wait_connected(&handle2, &[1]).await;
    for term in 0..100 {
        handle2.send(message(2, 1, term)).expect("queued");
    }
    for term in 0..100 {
        if term % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(recv(&mut inbound1).await.term, term);
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    // The frame checksum: CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), computed
    // bit by bit here so the test does not share code with the implementation it checks.
    let mut crc = 0xffff_ffffu32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
