//! The server says what happens: one log line per election, leader, step-down, pre-vote,
//! membership change, snapshot, expiry and fenced rejection, with stable field names, as
//! JSON with `--log-format json` (every line one object) and as text by default; and
//! `/metrics` shows the build and the transport's per-peer counters.
//!
//! Each check waits for its line in a node's log (the harness writes each node's stderr to
//! a file) with a deadline; nothing here sleeps for a fixed time.

use std::time::Instant;

use serde_json::Value;
use tenure_proto::v1;
use tenure_testkit::*;

/// Every line node `id` logged, parsed as JSON; the harness's own `====` lines aside, a
/// line that is not one JSON object fails the test.
fn json_lines(c: &Cluster, id: u64) -> Vec<Value> {
    c.log(id)
        .lines()
        .filter(|l| !l.starts_with("==== harness:"))
        .map(|l| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("node {id} logged a line that is not JSON ({e}): {l}"));
            assert!(
                v.is_object(),
                "node {id} logged JSON that is no object: {l}"
            );
            v
        })
        .collect()
}

/// The checks of one test. A missing line is recorded rather than fatal, so that a run
/// names every line that is missing, not only the first; [`Checks::done`] fails the test.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }

    /// `line[field] == expected`.
    fn field(&mut self, line: &Option<Value>, field: &str, expected: impl Into<Value>) {
        if let Some(line) = line {
            let expected = expected.into();
            self.check(line[field] == expected, || {
                format!(
                    "{}: {field} is {}, not {expected}: {line}",
                    line["event"], line[field]
                )
            });
        }
    }

    /// Waits until node `id` has logged an `event` line for which `fits` holds.
    async fn event(
        &mut self,
        c: &Cluster,
        id: u64,
        event: &str,
        within: std::time::Duration,
        fits: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let deadline = Instant::now() + within;
        loop {
            let lines = json_lines(c, id);
            if let Some(found) = lines.iter().find(|l| l["event"] == event && fits(l)) {
                return Some(found.clone());
            }
            if Instant::now() > deadline {
                let seen: Vec<String> = lines
                    .iter()
                    .filter(|l| l["event"] == event)
                    .map(Value::to_string)
                    .collect();
                self.0.push(format!(
                    "node {id} logged no fitting {event} within {within:?}; its {event} lines: {seen:?}"
                ));
                return None;
            }
            tokio::time::sleep(ms(20)).await;
        }
    }

    /// Waits (up to 10 s) until node `id` has logged a text line holding every one of
    /// `parts`.
    async fn text(&mut self, c: &Cluster, id: u64, parts: &[&str]) -> Option<String> {
        let within = secs(10);
        let deadline = Instant::now() + within;
        loop {
            let log = c.log(id);
            if let Some(line) = log.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
                return Some(line.to_string());
            }
            if Instant::now() > deadline {
                self.0.push(format!(
                    "node {id} logged no line with {parts:?} within {within:?}"
                ));
                return None;
            }
            tokio::time::sleep(ms(20)).await;
        }
    }

    #[track_caller]
    fn done(self) {
        assert!(
            self.0.is_empty(),
            "{} checks failed:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

fn json_cluster(nodes: usize) -> Options {
    Options::nodes(nodes).args(&["--log-format", "json"])
}

/// The winner of an election logs `leader_elected`, the others `leader_known`, both with
/// the term and how long they had no leader; a transfer's step-down is `transferred` at
/// info; a leader cut off from both followers steps down `lost-quorum` at warn, pre-votes
/// in vain while cut off, and logs `pre_vote_lost` when it hears from the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_transfers_and_step_downs_are_logged_as_json_events() {
    let mut c = Cluster::start(json_cluster(3).fault_injection());
    let mut checks = Checks::default();
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let won = checks
        .event(&c, leader, "leader_elected", secs(5), |l| {
            l["term"] == term && l["leader"] == leader
        })
        .await;
    checks.field(&won, "node", leader);
    checks.field(&won, "level", "INFO");
    if let Some(won) = &won {
        checks.check(
            won["leaderless_ms"].as_f64().is_some_and(|ms| ms > 0.0),
            || format!("the winner started without a leader: {won}"),
        );
    }
    checks
        .event(&c, leader, "election_started", secs(5), |l| {
            l["term"] == term && l["pre_vote"] == false
        })
        .await;
    checks
        .event(&c, leader, "election_started", secs(5), |l| {
            l["term"] == term && l["pre_vote"] == true
        })
        .await;
    for follower in c.others(&[leader]) {
        checks
            .event(&c, follower, "leader_known", secs(5), |l| {
                l["term"] == term && l["leader"] == leader && l["node"] == follower
            })
            .await;
    }

    // A transfer: the old leader says it handed over, at info.
    let to = c.others(&[leader])[0];
    v1::cluster_client::ClusterClient::new(c.channel(leader))
        .transfer_leadership(v1::TransferLeadershipRequest { to })
        .await
        .expect("transfer leadership");
    c.wait_status(to, secs(10), "leading after the transfer", |s| {
        s.is_leader()
    })
    .await;
    let (new_leader, new_term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    assert_eq!(new_leader, to);
    let step = checks
        .event(&c, leader, "step_down", secs(5), |l| l["term"] == term)
        .await;
    checks.field(&step, "reason", "transferred");
    checks.field(&step, "to", to);
    checks.field(&step, "level", "INFO");
    checks
        .event(&c, to, "leader_elected", secs(5), |l| l["term"] == new_term)
        .await;

    // Cut the new leader off: check-quorum makes it step down, and that is a warning.
    let others = c.others(&[to]);
    c.block(to, &others).await;
    let step = checks
        .event(&c, to, "step_down", secs(5), |l| l["term"] == new_term)
        .await;
    checks.field(&step, "reason", "lost-quorum");
    checks.field(&step, "level", "WARN");
    if let Some(step) = &step {
        checks.check(
            step["message"]
                .as_str()
                .is_some_and(|m| m.contains("check-quorum")),
            || format!("the message names check-quorum: {step}"),
        );
    }
    checks
        .event(&c, to, "election_started", secs(5), |l| {
            l["pre_vote"] == true && l["term"] == new_term + 1
        })
        .await;
    let (third, third_term) = c.wait_for_leader(&others, secs(10)).await;
    c.block(to, &[]).await;
    checks
        .event(&c, to, "pre_vote_lost", secs(10), |_| true)
        .await;
    checks
        .event(&c, to, "leader_known", secs(10), |l| {
            l["leader"] == third && l["term"] == third_term
        })
        .await;

    // Every node's every line is JSON (json_lines fails on any other).
    for id in c.ids() {
        assert!(!json_lines(&c, id).is_empty());
    }
    checks.done();
}

/// A session that stops renewing logs `session_expired` with its id on every replica; a
/// write with the old holder's token logs `fenced_write_rejected` with the key, the
/// election, the token presented and the current one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiries_and_stale_fenced_writes_are_logged_as_json_events() {
    let mut c = Cluster::start(json_cluster(3));
    let mut checks = Checks::default();
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let mut client = c.client();
    let session = client.grant(300).await.expect("grant");
    let old_token = client
        .campaign_uncontested("billing", session)
        .await
        .expect("campaign");
    client
        .put("books", b"day 1", "billing", old_token, secs(10))
        .await
        .expect("put with the first token");
    // No keepalives: the session runs out, on every replica.
    for id in c.ids() {
        let line = checks
            .event(&c, id, "session_expired", secs(10), |l| {
                l["session"] == session
            })
            .await;
        checks.field(&line, "node", id);
    }

    let (_, token) = client.writer_token("billing").await;
    assert!(token > old_token);
    client
        .put("books", b"day 2", "billing", token, secs(10))
        .await
        .expect("put with the new token");
    let stale = client
        .put("books", b"stale", "billing", old_token, secs(10))
        .await;
    assert!(stale.is_err(), "a stale write is refused: {stale:?}");
    let line = checks
        .event(&c, leader, "fenced_write_rejected", secs(5), |l| {
            l["token"] == old_token
        })
        .await;
    checks.field(&line, "key", "books");
    checks.field(&line, "election", "billing");
    checks.field(&line, "current", token);
    if let Some(line) = &line {
        checks.check(
            line["reason"].as_str().is_some_and(|r| r.contains("stale")),
            || format!("the reason names the stale token: {line}"),
        );
    }
    // The value is the client's data and is never logged.
    for id in c.ids() {
        assert!(!c.log(id).contains("day 2"), "node {id} logged a value");
    }
    checks.done();
}

/// Text is the default: a follower that missed compacted entries gets a snapshot (the
/// leader logs `snapshot_sent`, the follower `snapshot_installed`); removing it logs
/// `membership_changed` with the voters before and after, through the joint configuration;
/// and the removed node, which pre-votes in vain from then on, says so once at info.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_membership_changes_are_logged_in_text_by_default() {
    let mut c = Cluster::start(Options::nodes(3).args(&["--snapshot-threshold-entries", "20"]));
    let mut checks = Checks::default();
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let behind = c.others(&[leader])[0];
    c.kill(behind);
    let up = c.others(&[behind]);
    let mut client = c.client_for(&up);
    let (_, token) = client.writer_token("compaction").await;
    for i in 0..60 {
        client
            .put(&format!("key-{i}"), b"v", "compaction", token, secs(10))
            .await
            .expect("put");
    }
    c.start_node(behind);
    let to_behind = format!("peer={behind}");
    let sent = checks
        .text(&c, leader, &["event=\"snapshot_sent\"", &to_behind])
        .await;
    if let Some(sent) = &sent {
        checks.check(sent.contains(" INFO ") && !sent.starts_with('{'), || {
            format!("an info line in text: {sent}")
        });
    }
    let from_leader = format!("leader={leader}");
    checks
        .text(&c, behind, &["event=\"snapshot_installed\"", &from_leader])
        .await;

    let behind_logged = c.log(behind).lines().count();
    let behind_lost = c.metric(behind, "tenure_pre_votes_lost_total").await;
    v1::cluster_client::ClusterClient::new(c.channel(leader))
        .remove_member(v1::MemberRequest {
            id: behind,
            voter: false,
            ..Default::default()
        })
        .await
        .expect("remove a member");
    // Through joint consensus: first the joint configuration, then the new one alone.
    let voters = up.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    checks
        .text(
            &c,
            leader,
            &[
                "event=\"membership_changed\"",
                "from=\"voters 1,2,3\"",
                &format!("voters=\"{voters}\""),
                "voters_outgoing=\"1,2,3\"",
                "joint=true",
            ],
        )
        .await;
    checks
        .text(
            &c,
            leader,
            &[
                "event=\"membership_changed\"",
                &format!("to=\"voters {voters}\""),
                &format!("voters=\"{voters}\""),
                "joint=false",
            ],
        )
        .await;

    // The removed node never hears of the configuration without it (nobody replicates to
    // it any more), so it pre-votes every election timeout and loses every round. The
    // first round and loss of the streak are logged at info, the rest at debug.
    let deadline = Instant::now() + secs(10);
    while c.metric(behind, "tenure_pre_votes_lost_total").await < behind_lost + 4.0 {
        assert!(
            Instant::now() < deadline,
            "the removed node {behind} lost no 4 pre-votes in 10 s"
        );
        tokio::time::sleep(ms(20)).await;
    }
    let log = c.log(behind);
    let since: Vec<&str> = log.lines().skip(behind_logged).collect();
    for event in ["event=\"pre_vote_lost\"", "pre_vote=true"] {
        let lines = since.iter().filter(|l| l.contains(event)).count();
        checks.check(lines == 1, || {
            format!(
                "the removed node logged {lines} lines with {event} for 4 lost pre-votes, not 1"
            )
        });
    }
    checks.done();
}

/// `/metrics` names the build and counts the transport's traffic per peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_build_info_and_per_peer_transport_counters() {
    let c = Cluster::start(Options::nodes(3));
    let mut checks = Checks::default();
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let text = c.metrics(leader).await;
    let version = env!("CARGO_PKG_VERSION");
    checks.check(
        text.lines().any(|l| {
            l.starts_with(&format!("tenure_build_info{{version=\"{version}\""))
                && l.ends_with("} 1")
        }),
        || "no tenure_build_info with this version".into(),
    );
    for peer in c.others(&[leader]) {
        let value = |name: &str| metric_value(&text, &format!("{name}{{peer=\"{peer}\"}}"));
        for (name, least) in [
            ("tenure_peer_frames_sent_total", 1.0),
            ("tenure_peer_bytes_sent_total", 1.0),
            ("tenure_peer_frames_received_total", 1.0),
            ("tenure_peer_bytes_received_total", 1.0),
            ("tenure_peer_connects_total", 1.0),
            ("tenure_peer_connected", 1.0),
            ("tenure_peer_connect_failures_total", 0.0),
            ("tenure_peer_reconnects_total", 0.0),
            ("tenure_peer_messages_dropped_total", 0.0),
        ] {
            let v = value(name);
            checks.check(v.is_some_and(|v| v >= least), || {
                format!("{name} for peer {peer} is {v:?}, expected at least {least}")
            });
        }
    }
    checks.check(
        metric_value(&text, "tenure_transport_handshake_failures_total").is_some(),
        || "no tenure_transport_handshake_failures_total".into(),
    );
    if !checks.0.is_empty() {
        eprintln!("{text}");
    }
    checks.done();
}
