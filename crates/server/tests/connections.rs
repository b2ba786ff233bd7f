//! Idle sockets cannot use up a node. On a real node with small limits: connections from one
//! address stop at the per-address cap, every connection stops at the port's cap, a full
//! client port makes `/health` fail (the node says it turns clients away), silent sockets
//! are closed after the handshake timeout and idle ones after the idle timeout, every
//! refusal and timeout is counted, and the node serves again once they are gone.
//!
//! The test's sockets come from 127.0.0.2 and up (Linux routes all of 127/8 to loopback),
//! so that the harness's own connections from 127.0.0.1 do not count against them.

use std::time::Instant;

use tenure_testkit::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PER_IP: usize = 2;
const CLIENT_MAX: usize = 6;
const HTTP_MAX: usize = 3;
/// Shorter than the idle timeout, so that silent sockets closing in time shows the
/// handshake timeout at work and not the idle one.
const HANDSHAKE_MS: u64 = 2_000;
const IDLE_MS: u64 = 6_000;

/// Whether the node closed `stream` within `within` (EOF or reset on read).
async fn closed_within(stream: &mut TcpStream, within: std::time::Duration) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // Bytes (an HTTP error page, say): keep reading until the close.
            Ok(Ok(_)) => continue,
        }
    }
}

async fn health(c: &Cluster, id: u64) -> Option<u16> {
    c.http(id, "GET", "/health", "", secs(2))
        .await
        .ok()
        .map(|(code, _)| code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_idle_sockets_are_bounded_counted_and_closed() {
    let (per_ip, client_max, http_max) = (
        PER_IP.to_string(),
        CLIENT_MAX.to_string(),
        HTTP_MAX.to_string(),
    );
    let (handshake, idle) = (HANDSHAKE_MS.to_string(), IDLE_MS.to_string());
    // Plaintext, so that a raw socket can speak HTTP itself; one node, so that no leader
    // change gets in the way.
    let c = Cluster::start(Options::nodes(1).plaintext().args(&[
        "--connections-per-ip-max",
        &per_ip,
        "--connections-max",
        &client_max,
        "--http-connections-max",
        &http_max,
        "--handshake-timeout-ms",
        &handshake,
        "--idle-timeout-ms",
        &idle,
    ]));
    let (id, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let addrs = c.addrs(id);
    let c = &c;
    let counter = |name: &'static str| async move { c.metric(id, name).await };
    let refused_before = counter("tenure_client_connections_refused_total").await;
    let timed_out_before = counter("tenure_client_connections_timed_out_total").await;

    // Per address: PER_IP silent sockets from 127.0.0.2 are let in, the next is closed at
    // once.
    let mut silent = Vec::new();
    for _ in 0..PER_IP {
        silent.push(connect_from(2, addrs.client).await);
    }
    let mut over = connect_from(2, addrs.client).await;
    assert!(
        closed_within(&mut over, ms(500)).await,
        "a connection over the per-address cap was let in"
    );
    for s in &mut silent {
        assert!(
            !closed_within(s, ms(150)).await,
            "a connection within the per-address cap was closed at once"
        );
    }

    // The port: from other addresses, sockets are let in until the cap, then refused, and
    // the node's health says it cannot take clients.
    let started = Instant::now();
    let mut refused_at = None;
    for n in 0..CLIENT_MAX {
        let mut s = connect_from(3 + (n / PER_IP) as u8, addrs.client).await;
        if closed_within(&mut s, ms(150)).await {
            refused_at = Some(n);
            break;
        }
        silent.push(s);
    }
    assert!(
        refused_at.is_some(),
        "{CLIENT_MAX} more connections were all let in past connections_max {CLIENT_MAX}"
    );
    assert_eq!(
        health(c, id).await,
        Some(503),
        "a full client port is unhealthy"
    );
    assert!(
        started.elapsed() < ms(HANDSHAKE_MS),
        "the test was too slow to see the port full"
    );

    // Silent sockets go after the handshake timeout, and the node is healthy again.
    for s in &mut silent {
        assert!(
            closed_within(s, ms(HANDSHAKE_MS + 2_000)).await,
            "a silent socket outlived the handshake timeout"
        );
    }
    assert_eq!(health(c, id).await, Some(200));
    assert_eq!(
        counter("tenure_client_connections_timed_out_total").await - timed_out_before,
        silent.len() as f64,
        "every silent socket counted"
    );
    assert_eq!(
        counter("tenure_client_connections_refused_total").await - refused_before,
        2.0,
        "the per-address refusal and the port refusal counted"
    );
    drop(silent);

    // The HTTP port has its own cap: full, it turns requests away; freed, it serves.
    let mut http_silent = Vec::new();
    for n in 0..HTTP_MAX {
        http_silent.push(connect_from(10 + n as u8, addrs.http).await);
    }
    assert!(
        health(c, id).await.is_none(),
        "the HTTP port answered past http_connections_max"
    );
    for s in &mut http_silent {
        assert!(closed_within(s, ms(HANDSHAKE_MS + 2_000)).await);
    }
    assert_eq!(health(c, id).await, Some(200));

    // An idle connection, one that started a request and stopped, goes after the idle
    // timeout, not sooner.
    let http_timed_out_before = counter("tenure_http_connections_timed_out_total").await;
    let mut idle = connect_from(20, addrs.http).await;
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: node\r\n")
        .await
        .expect("write");
    let since = Instant::now();
    assert!(
        closed_within(&mut idle, ms(IDLE_MS + 3_000)).await,
        "an idle connection outlived the idle timeout"
    );
    let lived = since.elapsed();
    assert!(
        lived >= ms(IDLE_MS - 100),
        "closed after {lived:?}, before the idle timeout"
    );
    assert!(
        counter("tenure_http_connections_timed_out_total").await - http_timed_out_before >= 1.0,
        "the idle close is counted"
    );
}

/// When every node's client port is full, leadership stays where it is: the leader asks the
/// others' `/health` and finds no node with room. (Before, it handed leadership to the next
/// voter whatever that node's state, and the cluster's term rose every minute for nothing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_is_never_handed_to_a_node_just_as_full() {
    let c = Cluster::start(Options::nodes(3).plaintext().args(&[
        "--connections-max",
        "4",
        "--connections-per-ip-max",
        "100",
        "--handshake-timeout-ms",
        "60000",
    ]));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    // Fill every node's client port, followers first, so that the leader is the last to fill.
    let mut silent = Vec::new();
    let mut order = c.others(&[leader]);
    order.push(leader);
    for id in order {
        let addrs = c.addrs(id);
        for n in 0..8u8 {
            let mut s = connect_from(30 + n / 2, addrs.client).await;
            if closed_within(&mut s, ms(150)).await {
                break;
            }
            silent.push(s);
        }
        assert_eq!(health(&c, id).await, Some(503), "node {id} is full");
    }
    // Twice the time after which a full leader looks for a node with room.
    tokio::time::sleep(secs(5)).await;
    let (still, now) = c.wait_for_leader(&c.ids(), secs(5)).await;
    assert_eq!(
        (still, now),
        (leader, term),
        "leadership moved to a node as full"
    );
    let log = c.log(leader);
    assert!(
        log.contains("leadership stays here"),
        "the leader says why it stays"
    );
    drop(silent);
}

/// A leader whose client port stays full hands Raft leadership to another node, which
/// clients can reach; the full node says it is unhealthy until its port empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_no_client_can_reach_hands_leadership_on() {
    let mut c = Cluster::start(Options::nodes(3).plaintext().args(&[
        "--connections-max",
        "4",
        "--connections-per-ip-max",
        "100",
        "--handshake-timeout-ms",
        "60000",
    ]));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let addrs = c.addrs(leader);
    // Fill the leader's client port with silent sockets (two per address: one address
    // never holds more than half a port).
    let mut silent = Vec::new();
    for n in 0..8 {
        let mut s = connect_from(30 + n / 2, addrs.client).await;
        if closed_within(&mut s, ms(150)).await {
            break;
        }
        silent.push(s);
    }
    assert_eq!(
        health(&c, leader).await,
        Some(503),
        "the full leader is unhealthy"
    );
    let others = c.others(&[leader]);
    let (new_leader, new_term) = c.wait_for_leader(&others, secs(10)).await;
    assert!(
        new_term > term,
        "leadership moved on: {leader} -> {new_leader}"
    );
    // The node that took over serves clients.
    let mut client = c.client_for(&others);
    client
        .grant(10_000)
        .await
        .expect("a client is served by the new leader");
    drop(silent);
    let deadline = Instant::now() + secs(5);
    while health(&c, leader).await != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the emptied node stayed unhealthy"
        );
        tokio::time::sleep(ms(100)).await;
    }
}
