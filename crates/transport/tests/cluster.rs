//! Real transports on 127.0.0.1 exchanging messages: delivery, restarts, partitions,
//! full queues and shutdown.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use tenure_transport::{SendError, Transport, TransportConfig};
use tokio::net::TcpListener;

/// A listener on `addr` again, once the port is free.
async fn rebind(addr: std::net::SocketAddr) -> TcpListener {
    bounded("rebinding the port", async {
        loop {
            match TcpListener::bind(addr).await {
                Ok(listener) => return listener,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
}

/// `node` refuses to send a message to `to`, whom it blocks.
fn refused_as_blocked(node: &Node, to: u64, term: u64) {
    assert_eq!(
        node.handle.send(message(node.id, to, term)),
        Err(SendError::Blocked { to })
    );
}

/// Waits until `node` has counted `n` messages dropped because it blocks their peer.
async fn dropped_blocked(node: &Node, n: u64) {
    let handle = node.handle.clone();
    let what = format!("node {} to count {n} messages dropped as blocked", node.id);
    wait_until(&what, move || handle.metrics().dropped_blocked == n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_exchange_messages() {
    let mut nodes = cluster(3).await;
    wait_all_connected(&nodes).await;
    for i in 0..nodes.len() {
        for j in 0..nodes.len() {
            if i != j {
                let (from, to) = (nodes[i].id, nodes[j].id);
                nodes[i]
                    .handle
                    .send(message(from, to, 10 * from + to))
                    .expect("queued");
            }
        }
    }
    for node in &mut nodes {
        let mut got = BTreeSet::new();
        for _ in 0..2 {
            let m = recv(&mut node.inbound).await;
            assert_eq!(m.to, node.id);
            assert_eq!(m.term, 10 * m.from + m.to);
            got.insert(m.from);
        }
        let expected: BTreeSet<_> = [1, 2, 3].into_iter().filter(|&p| p != node.id).collect();
        assert_eq!(got, expected);
    }
    // The writer counts a batch after its write returns, which may be after delivery.
    let handle = nodes[0].handle.clone();
    wait_until("node 1 to count its frames", move || {
        handle.metrics().frames_sent == 2
    })
    .await;
    let metrics = nodes[0].handle.metrics();
    assert_eq!(metrics.frames_received, 2);
    assert!(metrics.bytes_sent > 0 && metrics.bytes_received > 0);
    assert_eq!(metrics.dropped_total(), 0);
    for node in &nodes {
        node.handle.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_messages_arrive_in_order_on_one_connection() {
    let mut nodes = cluster(2).await;
    wait_all_connected(&nodes).await;
    let count = 500;
    for term in 0..count {
        // 500 small messages fit the default queue of 1024, so none may be dropped.
        nodes[0].handle.send(message(1, 2, term)).expect("queued");
    }
    for term in 0..count {
        assert_eq!(recv(&mut nodes[1].inbound).await.term, term);
    }
    assert_eq!(nodes[1].handle.metrics().frames_received, count);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_peer_is_reconnected_and_served_again() {
    let mut nodes = cluster(3).await;
    wait_all_connected(&nodes).await;
    nodes[0].handle.send(message(1, 2, 1)).expect("queued");
    assert_eq!(recv(&mut nodes[1].inbound).await.term, 1);

    // Stop node 2 completely; the others notice their connections close.
    let old = nodes.remove(1);
    let addr = old.addr;
    old.handle.shutdown().await;
    drop(old);
    for node in &nodes {
        let handle = node.handle.clone();
        wait_until("the others to see node 2 go", move || {
            !handle.peer_states()[&2].outbound_connected
        })
        .await;
        assert!(matches!(
            node.handle.send(message(node.id, 2, 9)),
            Err(SendError::PeerDown { to: 2 })
        ));
    }

    // Start it again on the same port.
    let peers = nodes.iter().map(|n| (n.id, n.addr)).collect();
    nodes.insert(1, start(config(2, rebind(addr).await, peers), addr));
    wait_all_connected(&nodes).await;

    for (i, from) in [(0, 1), (2, 3)] {
        nodes[i]
            .handle
            .send(message(from, 2, 100 + from))
            .expect("queued");
    }
    let mut terms: Vec<u64> = Vec::new();
    for _ in 0..2 {
        terms.push(recv(&mut nodes[1].inbound).await.term);
    }
    terms.sort();
    assert_eq!(terms, vec![101, 103]);
    nodes[1].handle.send(message(2, 1, 200)).expect("queued");
    assert_eq!(recv(&mut nodes[0].inbound).await.term, 200);

    for node in [&nodes[0], &nodes[2]] {
        assert!(node.handle.metrics().reconnects >= 1);
        assert!(node.handle.peer_states()[&2].reconnects >= 1);
    }
    for node in &nodes {
        node.handle.shutdown().await;
    }
}

/// A peer that comes back connects to us; our writer towards it must not sit out its
/// reconnect backoff meanwhile: until it dials, the link is one-way (a vote request gets in,
/// its answer cannot get out), which once stretched a leader election after a restart to
/// the whole backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_connects_to_us_is_dialled_back_at_once() {
    let slow = |c: &mut TransportConfig| {
        // Without the wake-up, the writer would wait 15 to 30 s before dialling again.
        c.reconnect_backoff_min = Duration::from_secs(30);
        c.reconnect_backoff_max = Duration::from_secs(30);
    };
    let [one, two] = pair(&[], slow).await;
    let (h1, a1, a2) = (one.handle.clone(), one.addr, two.addr);
    let connected =
        |h: &tenure_transport::TransportHandle, peer| h.peer_states()[&peer].outbound_connected;
    let h = h1.clone();
    wait_until("node 1 to reach node 2", move || connected(&h, 2)).await;
    two.handle.shutdown().await;
    let h = h1.clone();
    wait_until("node 1 to see node 2 go", move || !connected(&h, 2)).await;

    let mut cfg2 = config(2, rebind(a2).await, BTreeMap::from([(1, a1)]));
    slow(&mut cfg2);
    let mut restarted = start(cfg2, a2);
    let started = std::time::Instant::now();
    let h = h1.clone();
    wait_until("node 1 to dial the restarted node 2 back", move || {
        connected(&h, 2)
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    h1.send(message(1, 2, 7)).expect("queued");
    assert_eq!(recv(&mut restarted.inbound).await.term, 7);
    h1.shutdown().await;
    restarted.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_blocked_drops_both_directions_and_unblocking_restores() {
    let mut nodes = cluster(3).await;
    wait_all_connected(&nodes).await;
    nodes[0].handle.set_blocked(BTreeSet::from([2]));
    assert_eq!(nodes[0].handle.blocked(), BTreeSet::from([2]));
    assert!(nodes[0].handle.peer_states()[&2].blocked);

    // Outbound: refused at send.
    refused_as_blocked(&nodes[0], 2, 1);
    // Inbound: node 2 can send, but node 1 drops it on arrival.
    nodes[1]
        .handle
        .send(message(2, 1, 2))
        .expect("node 2 is not blocking");
    dropped_blocked(&nodes[0], 2).await;
    // Node 3 is unaffected, both ways.
    nodes[2].handle.send(message(3, 1, 3)).expect("queued");
    assert_eq!(recv(&mut nodes[0].inbound).await.term, 3);
    nodes[0].handle.send(message(1, 3, 4)).expect("queued");
    assert_eq!(recv(&mut nodes[2].inbound).await.term, 4);
    assert!(
        nodes[0].inbound.try_recv().is_err(),
        "nothing from node 2 got through"
    );
    assert!(
        nodes[1].inbound.try_recv().is_err(),
        "nothing reached node 2"
    );

    nodes[0].handle.set_blocked(BTreeSet::new());
    assert!(nodes[0].handle.blocked().is_empty());
    nodes[0].handle.send(message(1, 2, 5)).expect("unblocked");
    assert_eq!(recv(&mut nodes[1].inbound).await.term, 5);
    nodes[1].handle.send(message(2, 1, 6)).expect("queued");
    assert_eq!(recv(&mut nodes[0].inbound).await.term, 6);
    assert_eq!(nodes[0].handle.peer_states()[&2].dropped, 2);
}

/// The server's partition tests: a 5-node cluster with one node partitioned away by
/// dropping its traffic at its own transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_with_one_partitioned_away() {
    let mut nodes = cluster(5).await;
    wait_all_connected(&nodes).await;
    nodes[4].handle.set_blocked(BTreeSet::from([1, 2, 3, 4]));
    for i in 0..5 {
        for j in 0..5 {
            if i != j {
                let (from, to) = (nodes[i].id, nodes[j].id);
                let sent = nodes[i].handle.send(message(from, to, from));
                assert_eq!(sent.is_ok(), from != 5, "{from} -> {to}: {sent:?}");
            }
        }
    }
    for node in nodes.iter_mut().take(4) {
        let mut from: Vec<u64> = Vec::new();
        for _ in 0..3 {
            from.push(recv(&mut node.inbound).await.from);
        }
        from.sort();
        let expected: Vec<u64> = (1..=4).filter(|&p| p != node.id).collect();
        assert_eq!(from, expected);
    }
    // Four refused at send, four dropped on arrival.
    dropped_blocked(&nodes[4], 8).await;
    assert!(nodes[4].inbound.try_recv().is_err());
    for node in nodes.iter_mut().take(4) {
        assert!(
            node.inbound.try_recv().is_err(),
            "node {} heard from node 5",
            node.id
        );
    }

    // Healing the partition restores traffic at once: connections stayed up.
    nodes[4].handle.set_blocked(BTreeSet::new());
    nodes[4].handle.send(message(5, 1, 50)).expect("healed");
    assert_eq!(recv(&mut nodes[0].inbound).await.term, 50);
    nodes[1].handle.send(message(2, 5, 51)).expect("queued");
    assert_eq!(recv(&mut nodes[4].inbound).await.term, 51);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_drops_instead_of_blocking() {
    // The "peer" accepts the connection and never reads, so the kernel buffers fill, the
    // writer stalls in `write_all`, and the queue behind it fills up.
    let stuck = bind().await;
    let stuck_addr = stuck.local_addr().expect("addr");
    let accepted = tokio::spawn(async move {
        let (stream, _) = stuck.accept().await.expect("accept");
        // Hold the connection open, unread, until the test ends.
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(stream);
    });
    let mut cfg = config(1, bind().await, BTreeMap::from([(2, stuck_addr)]));
    cfg.outbound_queue_max = 4;
    cfg.write_timeout = Duration::from_secs(60);
    let (handle, _inbound) = Transport::start(cfg).expect("start");
    wait_connected(&handle, &[2]).await;

    let big = snapshot_message(1, 2, vec![0xab; 256 * 1024]);
    let count = 400; // 100 MiB in all: far beyond any loopback socket buffers.
    let mut full = 0;
    let started = std::time::Instant::now();
    for _ in 0..count {
        match handle.send(big.clone()) {
            Ok(()) => {}
            Err(SendError::QueueFull { to: 2 }) => full += 1,
            Err(e) => panic!("unexpected {e}"),
        }
        // Give the writer a chance to run, as a real consensus loop would between sends.
        tokio::task::yield_now().await;
    }
    assert!(
        started.elapsed() < WAIT,
        "sending must never wait for the peer"
    );
    assert!(full > 0, "the queue of 4 never filled");
    let metrics = handle.metrics();
    assert_eq!(metrics.dropped_queue_full, full);
    let state = &handle.peer_states()[&2];
    assert_eq!(state.dropped, full);
    assert!(state.queue_len <= 4);
    // The transport can still be shut down promptly while its writer is stuck.
    bounded("shutdown with a stuck writer", handle.shutdown()).await;
    accepted.abort();
}

#[tokio::test]
async fn send_refuses_unknown_peers_and_foreign_senders() {
    let mut nodes = cluster(2).await;
    wait_all_connected(&nodes).await;
    let handle = &nodes[0].handle;
    assert_eq!(
        handle.send(message(1, 7, 1)),
        Err(SendError::UnknownPeer { to: 7 })
    );
    assert_eq!(
        handle.send(message(1, 1, 1)),
        Err(SendError::UnknownPeer { to: 1 })
    );
    assert_eq!(
        handle.send(message(2, 2, 1)),
        Err(SendError::NotFromThisNode { from: 2, id: 1 })
    );
    assert_eq!(handle.metrics().dropped_unknown_peer, 3);
    handle.send(message(1, 2, 2)).expect("still works");
    assert_eq!(recv(&mut nodes[1].inbound).await.term, 2);
}

#[tokio::test]
async fn oversize_message_is_dropped_and_the_connection_survives() {
    let mut nodes = pair(&[], |cfg| cfg.frame_bytes_max = 64 * 1024).await;
    wait_all_connected(&nodes).await;
    let big = snapshot_message(1, 2, vec![0; 100 * 1024]);
    nodes[0]
        .handle
        .send(big)
        .expect("queued; the writer finds it too large");
    nodes[0].handle.send(message(1, 2, 2)).expect("queued");
    assert_eq!(recv(&mut nodes[1].inbound).await.term, 2);
    assert_eq!(nodes[0].handle.metrics().dropped_too_large, 1);
    assert_eq!(nodes[0].handle.metrics().reconnects, 0);
}

#[tokio::test]
async fn shutdown_closes_everything_and_frees_the_port() {
    let mut nodes = cluster(2).await;
    wait_all_connected(&nodes).await;
    let node = nodes.remove(0);
    let addr = node.addr;
    let mut inbound = node.inbound;
    bounded("shutdown", node.handle.shutdown()).await;
    assert_eq!(bounded("inbound to close", inbound.recv()).await, None);
    assert_eq!(node.handle.send(message(1, 2, 1)), Err(SendError::ShutDown));
    // Idempotent.
    bounded("second shutdown", node.handle.shutdown()).await;
    TcpListener::bind(addr)
        .await
        .expect("the port is free after shutdown");
    // The other node notices.
    let other = nodes[0].handle.clone();
    wait_until("node 2 to see node 1 go", move || {
        !other.peer_states()[&1].outbound_connected
    })
    .await;
}

#[tokio::test]
async fn dropping_every_handle_stops_the_transport() {
    let nodes = cluster(2).await;
    wait_all_connected(&nodes).await;
    let mut nodes = nodes.into_iter();
    let first = nodes.next().expect("two nodes");
    let second = nodes.next().expect("two nodes");
    let addr = first.addr;
    let mut inbound = first.inbound;
    drop(first.handle);
    assert_eq!(bounded("inbound to close", inbound.recv()).await, None);
    bounded("the port to be freed", async {
        while TcpListener::bind(addr).await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let other = second.handle.clone();
    wait_until("node 2 to see node 1 go", move || {
        !other.peer_states()[&1].outbound_connected
    })
    .await;
}

#[tokio::test]
async fn start_validates_the_config() {
    let cfg = config(
        1,
        bind().await,
        BTreeMap::from([(1, "127.0.0.1:1".parse().expect("addr"))]),
    );
    let err = Transport::start(cfg).expect_err("own id among peers");
    assert!(err.to_string().contains("own id"), "{err}");
    let mut cfg = config(1, bind().await, BTreeMap::new());
    cfg.outbound_queue_max = 0;
    assert!(Transport::start(cfg).is_err());
    let mut cfg = config(1, bind().await, BTreeMap::new());
    cfg.reconnect_backoff_min = Duration::from_secs(5);
    assert!(Transport::start(cfg).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directed_blocks_make_one_way_links() {
    let mut nodes = cluster(3).await;
    wait_all_connected(&nodes).await;

    // Node 1 is deaf to node 2: node 2's messages are dropped, node 1's still arrive.
    nodes[0]
        .handle
        .set_blocked_directed(BTreeSet::from([2]), BTreeSet::new());
    let state = &nodes[0].handle.peer_states()[&2];
    assert!(state.blocked_in && !state.blocked_out && !state.blocked);
    assert!(
        nodes[0].handle.blocked().is_empty(),
        "not blocked both ways"
    );
    nodes[0]
        .handle
        .send(message(1, 2, 1))
        .expect("outbound open");
    assert_eq!(recv(&mut nodes[1].inbound).await.term, 1);
    nodes[1]
        .handle
        .send(message(2, 1, 2))
        .expect("queued at node 2");
    dropped_blocked(&nodes[0], 1).await;

    // Now mute towards node 2: node 1 hears it, but cannot answer.
    nodes[0]
        .handle
        .set_blocked_directed(BTreeSet::new(), BTreeSet::from([2]));
    refused_as_blocked(&nodes[0], 2, 3);
    nodes[1]
        .handle
        .send(message(2, 1, 4))
        .expect("queued at node 2");
    assert_eq!(recv(&mut nodes[0].inbound).await.term, 4);
    // Node 3 is unaffected either way.
    nodes[0].handle.send(message(1, 3, 5)).expect("queued");
    assert_eq!(recv(&mut nodes[2].inbound).await.term, 5);
    assert!(nodes[0].inbound.try_recv().is_err(), "term 2 was dropped");
    assert!(nodes[1].inbound.try_recv().is_err(), "term 3 was dropped");

    nodes[0]
        .handle
        .set_blocked_directed(BTreeSet::new(), BTreeSet::new());
    nodes[0].handle.send(message(1, 2, 6)).expect("healed");
    assert_eq!(recv(&mut nodes[1].inbound).await.term, 6);
}

/// A member added at run time: neither transport knew the other's id at start. Until
/// `set_peer`, node 1 refuses node 3's handshakes and has nowhere to send to it; after, the
/// two exchange messages both ways. `remove_peer` stops the writer and the acceptor admits
/// the peer no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_added_at_run_time_is_dialed_and_admitted_and_a_removed_one_is_not() {
    let (l1, l3) = (bind().await, bind().await);
    let (a1, a3) = (l1.local_addr().unwrap(), l3.local_addr().unwrap());
    let (one, mut in1) = Transport::start(config(1, l1, BTreeMap::new())).expect("start 1");
    let (three, mut in3) = Transport::start(config(3, l3, BTreeMap::new())).expect("start 3");
    assert_eq!(
        one.send(message(1, 3, 7)),
        Err(SendError::UnknownPeer { to: 3 })
    );
    assert_eq!(
        three.set_peer(1, a1.into()).expect("set"),
        tenure_transport::PeerChange::Added
    );
    // Node 3 dials node 1, which does not admit it yet: the handshake is refused.
    let o = one.clone();
    wait_until("node 1 to refuse node 3's handshake", move || {
        o.metrics().handshake_failures > 0
    })
    .await;
    assert_eq!(
        one.set_peer(3, a3.into()).expect("set"),
        tenure_transport::PeerChange::Added
    );
    assert_eq!(
        one.set_peer(3, a3.into()).expect("set again"),
        tenure_transport::PeerChange::Unchanged
    );
    wait_connected(&one, &[3]).await;
    wait_connected(&three, &[1]).await;
    one.send(message(1, 3, 11)).expect("queued to 3");
    let m = recv(&mut in3).await;
    assert_eq!((m.from, m.term), (1, 11));
    // Node 3's writer may still be waiting out its backoff: it redials when 1 connects.
    let t = three.clone();
    wait_until("node 3 to send to node 1", move || {
        t.send(message(3, 1, 12)).is_ok()
    })
    .await;
    let m = recv(&mut in1).await;
    assert_eq!((m.from, m.term), (3, 12));
    assert_eq!(one.peers().keys().copied().collect::<Vec<_>>(), vec![3]);

    assert!(one.remove_peer(3));
    assert!(!one.remove_peer(3));
    assert_eq!(
        one.send(message(1, 3, 13)),
        Err(SendError::UnknownPeer { to: 3 })
    );
    assert!(one.peers().is_empty());
    one.shutdown().await;
    three.shutdown().await;
}
