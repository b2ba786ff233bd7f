//! Streams hold a slot of their own pool only while their client is there: on a real
//! cluster with small pools, observers that come and go leave no slot behind, a full
//! Observe pool does not stop KeepAlive (its own pool), and a full pool refuses the next
//! stream RESOURCE_EXHAUSTED (`resource-exhausted`), counted, until a slot is freed.

use tenure_proto::v1;
use tenure_testkit::*;
use tokio_stream::StreamExt as _;
use tonic::Code;

const OBSERVE_MAX: usize = 3;
const KEEPALIVE_MAX: usize = 2;

async fn open_observe(
    c: &Cluster,
    id: u64,
) -> Result<tonic::Streaming<v1::LeaderEvent>, tonic::Status> {
    // A channel of its own: its own connection, as separate clients would have.
    let mut elections =
        v1::elections_client::ElectionsClient::new(c.channel_as(id, Some(ADMIN_CLIENT)));
    let mut events = elections
        .observe(v1::ObserveRequest {
            election: "jobs".into(),
        })
        .await?
        .into_inner();
    let first = tokio::time::timeout(secs(5), events.next())
        .await
        .expect("the first event within 5 s")
        .expect("a first event")
        .expect("the first event is the current leader");
    assert!(first.leader.is_some(), "jobs has a leader");
    Ok(events)
}

async fn open_keepalive(c: &Cluster, id: u64, session: u64) -> Result<KeepAlives, tonic::Status> {
    let mut keepalives = KeepAlives::open(c.channel_as(id, Some(ADMIN_CLIENT))).await?;
    let ack = keepalives
        .renew(session, 1)
        .await
        .expect("the keepalive is acknowledged");
    assert_eq!(ack.session_id, session);
    Ok(keepalives)
}

async fn wait_gauge(c: &Cluster, id: u64, name: &str, value: f64) {
    let deadline = std::time::Instant::now() + secs(5);
    loop {
        let now = c.metric(id, name).await;
        if now == value {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} is {now}, not {value}, 5 s after the clients went"
        );
        tokio::time::sleep(ms(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_slots_are_released_when_clients_go_and_pools_are_separate() {
    let observe_max = OBSERVE_MAX.to_string();
    let keepalive_max = KEEPALIVE_MAX.to_string();
    // One node: the pools are per node, and no leader change can get in the way.
    let mut c = Cluster::start(Options::nodes(1).args(&[
        "--observe-streams-max",
        &observe_max,
        "--keepalive-streams-max",
        &keepalive_max,
    ]));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let (holder, _) = c.client().writer_token("jobs").await;

    // Many short-lived observers, each gone after its first event (as `timeout 1 tenure
    // observe` would be). The election never changes, so nothing but their going can
    // free their slots.
    for _ in 0..(4 * OBSERVE_MAX) {
        let events = open_observe(&c, leader)
            .await
            .expect("a slot is free for each observer in turn");
        drop(events);
        wait_gauge(&c, leader, "tenure_observe_streams", 0.0).await;
    }

    // The pool is whole: OBSERVE_MAX observers fit, the next is refused.
    let refused_before = c
        .metric(leader, "tenure_observe_streams_refused_total")
        .await;
    let mut held = Vec::new();
    for _ in 0..OBSERVE_MAX {
        held.push(open_observe(&c, leader).await.expect("within the limit"));
    }
    assert_error(
        open_observe(&c, leader).await,
        Code::ResourceExhausted,
        "resource-exhausted",
        "one observer over the limit",
    );
    assert_eq!(
        c.metric(leader, "tenure_observe_streams_refused_total")
            .await
            - refused_before,
        1.0
    );

    // Renewals do not share the observers' pool: they still get through, up to their own
    // limit.
    let mut renewing = Vec::new();
    for _ in 0..KEEPALIVE_MAX {
        renewing.push(
            open_keepalive(&c, leader, holder)
                .await
                .expect("keepalive while the observe pool is full"),
        );
    }
    assert_error(
        open_keepalive(&c, leader, holder).await.map(|_| ()),
        Code::ResourceExhausted,
        "resource-exhausted",
        "one keepalive stream over the limit",
    );
    assert_eq!(
        c.metric(leader, "tenure_keepalive_streams_refused_total")
            .await,
        1.0
    );

    // Everyone leaves: every slot comes back.
    drop(held);
    drop(renewing);
    wait_gauge(&c, leader, "tenure_observe_streams", 0.0).await;
    wait_gauge(&c, leader, "tenure_keepalive_streams", 0.0).await;
    let again = open_keepalive(&c, leader, holder)
        .await
        .expect("a keepalive slot after the others went");
    drop(again);
}

/// One client connection holds at most `--streams-per-connection-max` streams: past it,
/// its next stream waits until one of its own ends, while other connections are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_holds_at_most_its_share_of_streams() {
    let mut c = Cluster::start(Options::nodes(1).args(&["--streams-per-connection-max", "2"]));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    c.client().writer_token("jobs").await;

    // One connection (one channel), two streams: its share.
    let channel = c.channel_as(leader, Some(ADMIN_CLIENT));
    let observe = |channel: tonic::transport::Channel| async move {
        let mut elections = v1::elections_client::ElectionsClient::new(channel);
        let mut events = elections
            .observe(v1::ObserveRequest {
                election: "jobs".into(),
            })
            .await?
            .into_inner();
        events.next().await.expect("a first event")?;
        Ok::<_, tonic::Status>(events)
    };
    let first = observe(channel.clone()).await.expect("first stream");
    let _second = observe(channel.clone()).await.expect("second stream");
    let third = tokio::spawn(observe(channel.clone()));
    tokio::time::sleep(ms(1_000)).await;
    assert!(
        !third.is_finished(),
        "a third stream on the connection was served past its share"
    );
    // Another connection is not held up.
    tokio::time::timeout(secs(5), observe(c.channel_as(leader, Some(ADMIN_CLIENT))))
        .await
        .expect("another connection is served at once")
        .expect("its stream");
    // One of its own ends: the third goes ahead.
    drop(first);
    tokio::time::timeout(secs(5), third)
        .await
        .expect("the third stream is served once one ended")
        .expect("task")
        .expect("its stream");
}
