//! Fate-sharing on a real cluster, at the server's edge (docs/GUARANTEES.md "Fate-sharing
//! sessions"): which ends of a KeepAlive stream release the session bound to it. Only one
//! does: the client's side ending the connection that carries the stream, while the stream
//! is open (what a dying process's kernel does; a proxy in between closes it here). A
//! stream the client resets on a connection that stays open, and a stream the server ended
//! itself with an error, leave the session to its TTL.
//!
//! Plaintext on purpose: over TLS a client that closes its connection gracefully starts
//! with TLS's close_notify, which ends the stream on the server's side first (so it counts
//! as the server's: the library revokes such sessions instead). A process that dies sends
//! no close_notify; `crates/cli/tests/fate_sharing.rs` kills one over TLS.

use std::time::{Duration, Instant};

use tenure_proto::v1;
use tenure_testkit::*;
use tonic::transport::Channel;
use tonic::Code;

/// The holder's TTL: far longer than anything the test waits for.
const TTL_MS: u64 = 30_000;

fn bind(session: u64, seq: u64) -> v1::KeepAliveRequest {
    v1::KeepAliveRequest {
        session_id: session,
        seq,
        session_secret: secret(),
        bind: true,
    }
}

/// A KeepAlive stream on `ch` with `session` bound to it (keepalive `seq` acknowledged).
async fn bound(ch: Channel, session: u64, seq: u64) -> KeepAlives {
    let mut stream = KeepAlives::open(ch).await.expect("open a KeepAlive stream");
    stream
        .sender()
        .send(bind(session, seq))
        .await
        .expect("the stream is open");
    stream
        .answer(secs(5))
        .await
        .expect("the binding keepalive is acknowledged");
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_clients_end_of_the_connection_releases_a_bound_session() {
    let mut c = Cluster::start(
        Options::nodes(3)
            .plaintext()
            .env("RUST_LOG", "info,tenure_server=debug"),
    );
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let mut client = c.client();
    let (holder, token, queued) = client.holder_and_second("jobs", TTL_MS).await;
    // A candidate queued behind the holder: its Campaign answers once it leads.
    let waiting = campaign_in_background(c.channel_without_timeout(leader), "jobs", queued);
    let reader = Caller::new(c.channel(leader));
    let leads = || async { who_leads(&reader, "jobs").await.map(|(session, _)| session) };
    // The candidate has queued once it is listed behind the holder.
    tokio::time::sleep(ms(300)).await;
    assert_eq!(leads().await, Some(holder));

    // 1. The client resets the bound stream; its connection stays open.
    let open = c.channel_without_timeout(leader);
    let stream = bound(open.clone(), holder, 1).await;
    drop(stream);
    tokio::time::sleep(secs(1)).await;
    assert_eq!(
        leads().await,
        Some(holder),
        "a stream reset released the session"
    );

    // 2. The server ends the bound stream with an error (a malformed secret); then the
    //    client closes that connection too.
    let errs = c.channel_without_timeout(leader);
    let mut stream = bound(errs.clone(), holder, 2).await;
    let mut bad = bind(holder, 3);
    bad.session_secret = vec![1, 2, 3];
    stream.sender().send(bad).await.expect("the stream is open");
    assert_error(
        stream.answer(secs(5)).await,
        Code::InvalidArgument,
        "invalid-argument",
        "a keepalive with a malformed secret",
    );
    drop(stream);
    drop(errs);
    tokio::time::sleep(secs(1)).await;
    assert_eq!(
        leads().await,
        Some(holder),
        "the server's own end released the session"
    );
    assert!(!waiting.is_finished());

    // 3. The connection carrying the bound stream ends from the client's side while the
    //    stream is open (a proxy in between closes it, as a dying process's kernel would):
    //    the session is released at once, not a TTL later.
    let proxy = Proxy::start(&[c.addrs(leader).client], "");
    let through = tonic::transport::Endpoint::from_shared(format!("http://{}", proxy.addrs()[0]))
        .expect("an endpoint")
        .connect_lazy();
    let stream = bound(through, holder, 4).await;
    let closed = Instant::now();
    proxy.cut();
    let answer = tokio::time::timeout(secs(10), waiting)
        .await
        .expect("the candidate leads within 10 s")
        .expect("the campaign task")
        .expect("the candidate's campaign");
    let took = closed.elapsed();
    assert!(answer.token > token, "token {} after {token}", answer.token);
    assert!(
        took < Duration::from_millis(TTL_MS / 4),
        "the candidate led {took:?} after the connection closed (ttl {TTL_MS} ms)"
    );
    assert_eq!(leads().await, Some(queued));
    drop((open, stream));
    let metrics = c.metrics(leader).await;
    assert_eq!(
        metric_value(&metrics, "tenure_session_releases_total"),
        Some(1.0),
        "{metrics}"
    );
    assert!(
        metric_value(&metrics, "tenure_keepalive_streams_closed_by_server_total")
            .is_some_and(|n| n >= 2.0),
        "{metrics}"
    );
}
