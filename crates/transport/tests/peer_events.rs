//! Connection events for fast election: a writer whose established connection ends reports
//! `Closed` and redials at once; a dial refused at the TCP level (nothing listens on the
//! peer's port) reports `Refused`. A live peer's port never refuses, whatever happened to
//! the connection.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use tenure_transport::PeerEvent;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// The next event, within the test's bound.
async fn next(events: &mut mpsc::Receiver<PeerEvent>) -> PeerEvent {
    bounded("a connection event", events.recv())
        .await
        .expect("the transport runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_exits_is_reported_closed_then_refused_at_once() {
    let mut nodes = cluster(3).await;
    let mut events = nodes[0].handle.take_peer_events().expect("first take");
    assert!(nodes[0].handle.take_peer_events().is_none(), "one receiver");
    wait_all_connected(&nodes).await;
    nodes[0].handle.set_event_stamp(41);
    nodes[0].handle.set_event_stamp(42);

    let gone = nodes.remove(1);
    let started = Instant::now();
    gone.handle.shutdown().await;
    drop(gone);
    assert_eq!(next(&mut events).await, PeerEvent::Closed(2));
    // The refusal carries the stamp set before the dial started.
    assert_eq!(
        next(&mut events).await,
        PeerEvent::Refused { peer: 2, stamp: 42 }
    );
    let took = started.elapsed();
    // Loopback: the close and the refused redial take well under a millisecond each. The
    // bound is generous for a loaded machine; what matters is that no backoff or timeout
    // stands between the exit and the refusal.
    assert!(
        took < Duration::from_millis(500),
        "closed and refused after {took:?}"
    );
    // Node 3 is untouched: nothing about it was reported (node 2 may be refused again, by
    // the writer's retries).
    while let Ok(event) = events.try_recv() {
        assert!(
            matches!(event, PeerEvent::Refused { peer: 2, .. }),
            "only node 2 is gone: {event:?}"
        );
    }
    for node in &nodes {
        node.handle.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_peer_whose_connection_is_reset_is_closed_but_never_refused() {
    let nodes = cluster(2).await;
    let mut events = nodes[0].handle.take_peer_events().expect("first take");
    wait_all_connected(&nodes).await;

    // A stranger claims to be node 1: node 2 keeps the newer connection and closes node 1's,
    // as a forged reset or a middlebox would end it. Node 2's process is alive.
    let mut forged = TcpStream::connect(nodes[1].addr)
        .await
        .expect("dial node 2");
    forged.write_all(&hello(CLUSTER, 1)).await.expect("hello");
    assert_eq!(next(&mut events).await, PeerEvent::Closed(2));
    drop(forged);

    // The redial reaches node 2's listener: connected again, never refused.
    wait_connected(&nodes[0].handle, &[2]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(event) = events.try_recv() {
        assert_eq!(
            event,
            PeerEvent::Closed(2),
            "a live peer's port refused a dial"
        );
    }
    for node in &nodes {
        node.handle.shutdown().await;
    }
}

/// A process that exits closes its connections a moment before its listener: a redial in
/// between completes in the kernel and is then reset. That proves nothing, and the dial after
/// it must follow at once (not after a backoff), so that the refusal it meets reaches the
/// node within milliseconds of the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redial_reset_while_the_peer_exits_is_followed_at_once_by_the_refused_one() {
    let listener = bind().await;
    let peer_addr = listener.local_addr().expect("addr");
    let own = bind().await;
    let own_addr = own.local_addr().expect("addr");
    let mut cfg = config(1, own, BTreeMap::from([(2, peer_addr)]));
    // A backoff that a test can tell from "at once"; the connection below lives longer than
    // its minimum, so that its end is followed by an immediate redial.
    cfg.reconnect_backoff_min = Duration::from_millis(600);
    cfg.reconnect_backoff_max = Duration::from_secs(2);
    let node = start(cfg, own_addr);
    let mut events = node.handle.take_peer_events().expect("first take");
    let (first, _) = bounded("the first dial", listener.accept())
        .await
        .expect("accept");
    wait_connected(&node.handle, &[2]).await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    // The exit: the connection closes, the redial lands in the listener's queue, and the
    // listener closes with it still queued (the kernel resets it).
    drop(first);
    let closed_at = Instant::now();
    assert_eq!(next(&mut events).await, PeerEvent::Closed(2));
    let (redial, _) = bounded("the redial", listener.accept())
        .await
        .expect("accept");
    drop(listener);
    // A zero linger makes the close a reset, as the kernel's is. (Deprecated because a
    // non-zero linger blocks the thread on drop; zero never waits.)
    #[allow(deprecated)]
    redial.set_linger(Some(Duration::ZERO)).expect("linger");
    drop(redial);

    loop {
        match next(&mut events).await {
            PeerEvent::Closed(2) => continue,
            PeerEvent::Refused { peer: 2, .. } => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    let took = closed_at.elapsed();
    // Without the immediate redial the refusal waits a backoff of 300 to 600 ms.
    assert!(
        took < Duration::from_millis(250),
        "refused {took:?} after the close"
    );
    node.handle.shutdown().await;
}
