//! Reads without log writes, on a real cluster: `Leader`, `Get` and the start of `Observe`
//! are served by the leader after confirming its leadership (its lease, or a ReadIndex
//! round), never by appending an entry. A thousand reads leave every node's commit index and
//! the leader's fsync count where they were, and still see the latest write.

use tenure_proto::v1;
use tenure_testkit::*;
use tokio_stream::StreamExt as _;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_reads_add_no_log_entry_and_no_fsync() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let mut client = c.client();
    // A session that is never renewed: no checkpoint entries while the reads run.
    let (_, token) = client.first_write("e", "k", b"v1", secs(10)).await;
    c.wait_caught_up(leader, &c.ids(), secs(10)).await;

    let commits_before: Vec<u64> = {
        let mut v = Vec::new();
        for id in c.ids() {
            v.push(c.status_of(id).await.commit_index);
        }
        v
    };
    let fsyncs_before = c.metric(leader, "tenure_fsync_seconds_count").await;

    let ch = c.channel(leader);
    let mut elections = v1::elections_client::ElectionsClient::new(ch.clone());
    let mut keys = v1::fenced_keys_client::FencedKeysClient::new(ch.clone());
    for i in 0..500 {
        let l = elections
            .leader(v1::LeaderRequest {
                election: "e".into(),
            })
            .await
            .unwrap_or_else(|e| panic!("Leader #{i}: {e}"))
            .into_inner()
            .leader
            .expect("a leader");
        assert_eq!(l.token, token);
        let v = keys
            .get(v1::GetRequest { key: "k".into() })
            .await
            .unwrap_or_else(|e| panic!("Get #{i}: {e}"))
            .into_inner()
            .value
            .expect("a value");
        assert_eq!(v.value, b"v1");
    }
    // Observe's first event is a read too.
    for _ in 0..10 {
        let mut stream = elections
            .observe(v1::ObserveRequest {
                election: "e".into(),
            })
            .await
            .expect("observe")
            .into_inner();
        let first = stream.next().await.expect("a first event").expect("ok");
        assert_eq!(first.leader.expect("a leader").token, token);
    }

    let mut commits_after = Vec::new();
    for id in c.ids() {
        commits_after.push(c.status_of(id).await.commit_index);
    }
    assert_eq!(
        commits_after, commits_before,
        "1,000 reads moved the commit index"
    );
    let fsyncs_after = c.metric(leader, "tenure_fsync_seconds_count").await;
    assert_eq!(fsyncs_after, fsyncs_before, "reads cost fsyncs");

    // A write is seen by the next read at once.
    client
        .put("k", b"v2", "e", token, secs(10))
        .await
        .expect("fenced put");
    assert_eq!(
        client.get("k").await.expect("get").expect("a value").value,
        b"v2"
    );
}

/// A follower does not serve reads: it answers `not-leader` with the leader's address, and
/// appends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sends_readers_to_the_leader() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];
    let mut keys = v1::fenced_keys_client::FencedKeysClient::new(c.channel(follower));
    let err = keys
        .get(v1::GetRequest { key: "k".into() })
        .await
        .expect_err("a follower refuses");
    assert_eq!(reason(&err), Some("not-leader"), "{err}");
    assert_eq!(
        err.metadata()
            .get("tenure-leader-addr")
            .and_then(|v| v.to_str().ok()),
        Some(c.addrs(leader).client.to_string().as_str())
    );
}
