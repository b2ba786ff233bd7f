//! The stage histograms (`tenure_stage_seconds`) on a real cluster, which `tenure bench
//! write` turns into where a write's time goes: every write of one client passes each stage
//! of the leader exactly once, and the stages of one write follow each other without
//! overlapping, so that their sums fit inside the whole they are parts of.

use tenure_proto::v1;
use tenure_testkit::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_write_passes_each_stage_once_and_the_parts_fit_in_the_whole() {
    const WRITES: u64 = 200;
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let mut client = c.client();
    let (_, token) = client.first_write("e", "k", b"v0", secs(10)).await;
    c.wait_caught_up(leader, &c.ids(), secs(10)).await;
    let mut keys = v1::fenced_keys_client::FencedKeysClient::new(c.channel(leader));

    let stages = [
        "unary_in",
        "unary_total",
        "write_queue",
        "write_total",
        "propose",
        "replicate",
        "apply",
    ];
    // Each stage's `_count` and `_sum` (seconds) on the leader.
    async fn read(c: &Cluster, leader: u64, stages: &[&str]) -> Vec<(f64, f64)> {
        let mut v = Vec::new();
        for stage in stages {
            let series = |what| format!("tenure_stage_seconds_{what}{{stage=\"{stage}\"}}");
            v.push((
                c.metric(leader, &series("count")).await,
                c.metric(leader, &series("sum")).await,
            ));
        }
        v
    }
    let before = read(&c, leader, &stages).await;
    for i in 0..WRITES {
        keys.put(v1::PutRequest {
            key: "k".into(),
            value: i.to_be_bytes().to_vec(),
            election: "e".into(),
            token,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("put #{i}: {e}"));
    }
    let after = read(&c, leader, &stages).await;

    let mut sum = std::collections::BTreeMap::new();
    for ((stage, b), a) in stages.iter().zip(&before).zip(&after) {
        let (count, seconds) = (a.0 - b.0, a.1 - b.1);
        assert_eq!(
            count, WRITES as f64,
            "{stage}: {count} samples for {WRITES} writes"
        );
        sum.insert(*stage, seconds);
    }
    // A write's stages in the driver follow each other: the queue, its proposal taken to
    // the log write, the write to the commit, the commit to the answer. With the answer's
    // way back they make up its time in the driver's hands, and that with the gRPC layer
    // and the handler its time in the server. (Sums of microseconds, each sample rounded
    // down: the parts cannot outgrow the whole by rounding.)
    let driver = sum["write_queue"] + sum["propose"] + sum["replicate"] + sum["apply"];
    assert!(
        driver <= sum["write_total"],
        "the driver's stages ({driver} s) exceed the write's time in the server's hands \
         ({} s): {sum:?}",
        sum["write_total"]
    );
    assert!(
        sum["unary_in"] + sum["write_total"] <= sum["unary_total"],
        "the gRPC layer and the driver exceed the call's time in the server: {sum:?}"
    );
    // Replication is a real wait (an fsync on each of two nodes at least), and the server's
    // part of a call covers it.
    assert!(sum["replicate"] > 0.0, "{sum:?}");
    assert!(sum["replicate"] < sum["unary_total"], "{sum:?}");
}
