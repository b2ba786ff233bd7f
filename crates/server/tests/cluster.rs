//! Real-process tests of a tenure cluster: `tenure server` processes on loopback, killed with
//! SIGKILL, frozen with SIGSTOP, cut off with `/debug/block`, and fed bad bytes and bad
//! requests. Timing profile: election timeout 150 ms, heartbeat 30 ms, tick 10 ms. Bounds
//! are generous on purpose: these tests check behaviour, not speed (`tenure bench` gives
//! the figures).
//!
//! The harness (`common`) builds the `tenure` binary if needed and runs one cluster at a
//! time; see its module docs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure_proto::v1;
use tenure_testkit::*;
use tonic::Code;

/// A key and the value acknowledged for it.
type KeyValue = (String, Vec<u8>);

/// Put `count` keys `<prefix>-<i>` through `client`, each acknowledged; returns them.
async fn put_acked(
    client: &mut Client,
    prefix: &str,
    count: usize,
    election: &str,
    token: u64,
) -> Vec<KeyValue> {
    let mut acked = Vec::new();
    for i in 0..count {
        let key = format!("{prefix}-{i}");
        let value = format!("value of {key}").into_bytes();
        client
            .put(&key, &value, election, token, secs(10))
            .await
            .unwrap_or_else(|e| panic!("Put {key}: {e:?}"));
        acked.push((key, value));
    }
    acked
}

/// Every write of `acked` is stored, read through `client`; `when` names the moment.
async fn none_lost(client: &Client, acked: &[KeyValue], when: &str) {
    let missing = missing_keys(client, acked).await;
    assert!(
        missing.is_empty(),
        "{} acknowledged writes lost {when}: {:?}",
        missing.len(),
        &missing[..missing.len().min(20)]
    );
}

/// The token of a session leading "writers", and `count` writes `<prefix>-<i>` with it,
/// each acknowledged.
async fn writer(c: &mut Cluster, prefix: &str, count: usize) -> (u64, Vec<KeyValue>) {
    let mut client = c.client();
    let (_, token) = client.writer_token("writers").await;
    let acked = put_acked(&mut client, prefix, count, "writers", token).await;
    (token, acked)
}

/// kill -9 the Raft leader: a new leader is elected, every acknowledged write is still
/// there, and the killed node restarts, catches up, and (after a leadership transfer to it)
/// serves every write itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_new_leader_keeps_acknowledged_writes_and_old_leader_catches_up() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let (token, mut acked) = writer(&mut c, "before-crash", 20).await;

    c.kill(leader);
    let survivors = c.others(&[leader]);
    let (new_leader, new_term) = c.wait_for_leader(&survivors, secs(10)).await;
    assert_ne!(new_leader, leader);
    assert!(new_term > term, "new term {new_term} must exceed {term}");

    let mut client = c.client_for(&survivors);
    acked.extend(put_acked(&mut client, "after-crash", 20, "writers", token).await);
    none_lost(&client, &acked, "after the crash").await;

    // The killed node restarts from its data directory and catches up.
    c.start_node(leader);
    c.wait_caught_up(new_leader, &[leader], secs(10)).await;
    let restarted = c.status_of(leader).await;
    assert_eq!(
        restarted.term, new_term,
        "the restarted node must not disturb the term: {restarted:?}"
    );

    // Hand Raft leadership to it; it then answers every read from its own state.
    c.move_leadership(leader, secs(10)).await;
    let only_restarted = c.client_for(&[leader]);
    none_lost(&only_restarted, &acked, "on the restarted node").await;
}

/// Kills the leader once every connection has settled (the writers' redial-at-once is for
/// connections that lived): the leader killed, the survivors, the leader they agree on next
/// and how long after the kill they did.
async fn kill_the_leader(c: &mut Cluster) -> (u64, Vec<u64>, u64, Duration) {
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(15)).await;
    tokio::time::sleep(ms(500)).await;
    let survivors = c.others(&[leader]);
    let killed_at = Instant::now();
    c.kill(leader);
    let (next, took) = elected_since(c, &survivors, killed_at).await;
    (leader, survivors, next, took)
}

/// Waits (up to 15 s) until the nodes `among` agree on a leader: the leader, and how long
/// after `since` they did.
async fn elected_since(c: &Cluster, among: &[u64], since: Instant) -> (u64, Duration) {
    let (leader, _) = c.wait_for_leader(among, secs(15)).await;
    (leader, since.elapsed())
}

/// Fast election, on by default (no flag given here): kill -9 the leader and its followers see their
/// connections close and its peer port refuse the redial, so they elect a successor at once
/// instead of waiting out the election timeout, which is long here (1 s): without fast
/// election no follower could campaign before about 900 ms (T minus a heartbeat). A frozen
/// leader (SIGSTOP) keeps its sockets open, and is replaced only after the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_election_replaces_a_killed_leader_at_once_and_a_frozen_one_after_the_timeout() {
    let mut c = Cluster::start(Options::nodes(3).timing(1000, 100, 10));
    let (leader, survivors, next, took) = kill_the_leader(&mut c).await;
    assert!(
        took < ms(600),
        "fast election took {took:?} (the election timeout is 1 s)"
    );
    let mut gone = 0.0;
    for id in &survivors {
        gone += c.metric(*id, "tenure_leader_gone_total").await;
    }
    assert!(gone >= 1.0, "no survivor counted a leader_gone event");
    assert!(
        survivors
            .iter()
            .any(|id| c.log(*id).contains("leader_gone")),
        "no leader_gone event in the survivors' logs"
    );

    // The old leader comes back as a follower; now freeze the new one.
    c.start_node(leader);
    c.wait_caught_up(next, &[leader], secs(15)).await;
    tokio::time::sleep(ms(500)).await;
    let others = c.others(&[next]);
    let frozen_at = Instant::now();
    c.pause(next);
    let (third, took) = elected_since(&c, &others, frozen_at).await;
    assert_ne!(third, next);
    assert!(
        took >= ms(800),
        "a frozen leader was replaced after {took:?}, before the election timeout"
    );
    c.resume(next);
}

/// `--no-fast-election` turns it off: the followers of a killed leader wait out the election
/// timeout, and none counts a `leader_gone`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fast_election_a_killed_leader_is_replaced_after_the_timeout() {
    let mut c = Cluster::start(
        Options::nodes(3)
            .timing(1000, 100, 10)
            .args(&["--no-fast-election"]),
    );
    let (_, survivors, _, took) = kill_the_leader(&mut c).await;
    assert!(
        took >= ms(800),
        "a killed leader was replaced after {took:?}, before the election timeout"
    );
    for id in &survivors {
        assert_eq!(c.metric(*id, "tenure_leader_gone_total").await, 0.0);
    }
}

/// SIGSTOP the leader past the election timeout: the others elect a new leader; a Put sent
/// to the frozen leader (it waits in its socket) is never acknowledged as committed, because
/// it never was; after SIGCONT the old leader steps down and follows the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_leader_is_replaced_steps_down_and_never_commits_what_it_accepted_while_paused() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let (token, mut acked) = writer(&mut c, "before-pause", 5).await;

    // A connection to the leader that is already set up, so that the request below is
    // written into the frozen process's socket rather than waiting for a handshake.
    let to_old = c.channel_with_timeout(leader, secs(30));
    v1::cluster_client::ClusterClient::new(to_old.clone())
        .status(v1::StatusRequest {})
        .await
        .expect("the leader answers before the pause");

    c.pause(leader);
    let paused_at = Instant::now();
    let put_while_paused = tokio::spawn(async move {
        let req = v1::PutRequest {
            key: "written-while-paused".into(),
            value: b"must not commit".to_vec(),
            election: "writers".into(),
            token,
            ..Default::default()
        };
        v1::fenced_keys_client::FencedKeysClient::new(to_old)
            .put(req)
            .await
    });

    let survivors = c.others(&[leader]);
    let (new_leader, new_term) = c.wait_for_leader(&survivors, secs(10)).await;
    assert_ne!(new_leader, leader);
    assert!(new_term > term);
    let mut survivors_client = c.client_for(&survivors);
    acked.extend(put_acked(&mut survivors_client, "during-pause", 5, "writers", token).await);
    // Keep the old leader frozen for well past an election timeout before waking it.
    let frozen_min = ms(4 * ELECTION_TIMEOUT_MS);
    if paused_at.elapsed() < frozen_min {
        tokio::time::sleep(frozen_min - paused_at.elapsed()).await;
    }
    c.resume(leader);

    let old = c
        .wait_status(
            leader,
            secs(10),
            "stepping down to follow the new leader",
            |s| !s.is_leader() && s.term == new_term && s.leader == new_leader,
        )
        .await;
    assert_eq!(old.role, "follower");

    let answer = tokio::time::timeout(secs(30), put_while_paused)
        .await
        .expect("the paused leader answers the Put within 30 s")
        .expect("the Put task does not panic");
    let stored = survivors_client
        .get("written-while-paused")
        .await
        .expect("Get on the new leader");
    // The property: an acknowledgement means the write is committed in the new leader's log.
    if let Ok(r) = &answer {
        assert!(
            stored.is_some(),
            "the old leader acknowledged a write (index {}) that is not committed",
            r.get_ref().index
        );
    }
    // And here it cannot have been committed: the old leader lost its majority to a higher
    // term before the write reached it. So the client gets a typed, retryable error.
    assert!(
        stored.is_none(),
        "a write sent to the paused old leader was committed: {stored:?}"
    );
    let status = answer.expect_err("the paused leader must not acknowledge the write");
    eprintln!("the Put sent to the paused leader was answered with {status:?}");
    assert!(
        matches!(reason(&status), Some("not-leader") | Some("unavailable")),
        "expected not-leader or unavailable, got {status:?}"
    );

    // The old leader catches up and the cluster kept every acknowledged write.
    c.wait_caught_up(new_leader, &[leader], secs(10)).await;
    none_lost(&survivors_client, &acked, "after the pause").await;
    assert!(c.metric(leader, "tenure_step_downs_total").await >= 1.0);
}

/// Crash the leader with kill -9 in the middle of a burst of writes, five times, then crash
/// every node at once: no acknowledged write is ever lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_during_write_bursts_lose_no_acknowledged_write() {
    const ROUNDS: usize = 5;
    const WRITERS: usize = 3;
    const ACKS_AFTER_CRASH: usize = 20;
    let mut c = Cluster::start(Options::nodes(3));
    c.wait_for_leader(&c.ids(), secs(10)).await;
    let (_, token) = c.client().writer_token("writers").await;
    let acked: Arc<Mutex<Vec<KeyValue>>> = Arc::default();
    let mut unknown_outcomes = 0;

    for round in 0..ROUNDS {
        let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(AtomicUsize::new(0));
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..WRITERS {
            let (stop, acks, acked, mut client) =
                (stop.clone(), acks.clone(), acked.clone(), c.client());
            writers.spawn(async move {
                let mut unknown = 0;
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("round{round}-writer{w}-{i}");
                    let value = format!("{key} by token {token}").into_bytes();
                    i += 1;
                    match client.put(&key, &value, "writers", token, secs(5)).await {
                        Ok(_) => {
                            acked
                                .lock()
                                .expect("no writer panics holding the lock")
                                .push((key, value));
                            acks.fetch_add(1, Ordering::Relaxed);
                        }
                        // Not acknowledged: it may or may not have been applied.
                        Err(_) => unknown += 1,
                    }
                }
                unknown
            });
        }
        // Crash at a different point of the burst each round.
        tokio::time::sleep(ms(150 + 70 * round as u64)).await;
        let before = acks.load(Ordering::Relaxed);
        assert!(before > 0, "round {round}: the burst had not started");
        c.kill(leader);
        let deadline = Instant::now() + secs(15);
        while acks.load(Ordering::Relaxed) < before + ACKS_AFTER_CRASH {
            assert!(
                Instant::now() < deadline,
                "round {round}: writes did not resume after the crash"
            );
            tokio::time::sleep(ms(10)).await;
        }
        stop.store(true, Ordering::Relaxed);
        while let Some(u) = writers.join_next().await {
            unknown_outcomes += u.expect("a writer panicked");
        }
        c.start_node(leader);
        let (new_leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
        c.wait_caught_up(new_leader, &c.ids(), secs(10)).await;
        eprintln!(
            "round {round}: killed leader {leader} after {before} acks, {} acks in all, new leader {new_leader}",
            acks.load(Ordering::Relaxed)
        );
    }

    let acked = acked.lock().expect("writers are done").clone();
    eprintln!(
        "{} acknowledged writes, {unknown_outcomes} with unknown outcome",
        acked.len()
    );
    none_lost(&c.client(), &acked, "in the crashes").await;

    // Every node at once: acknowledged means durable on a majority.
    for id in c.ids() {
        c.kill(id);
    }
    for id in c.ids() {
        c.start_node(id);
    }
    c.wait_for_leader(&c.ids(), secs(10)).await;
    none_lost(&c.client(), &acked, "after a full crash").await;
}

/// What one run of the session-expiry scenario measured.
#[derive(Debug)]
struct ExpiryTrial {
    /// Observed change of leader, from the send of the last keepalive.
    from_last_send: Duration,
    /// Observed change of leader, from the receipt of the last keepalive acknowledgement.
    from_last_ack: Duration,
}

/// One holder leads `election` with a session of `ttl_ms`, a second candidate waits; the
/// holder sends `keepalives` keepalives 100 ms apart (each acknowledged) and then falls
/// silent. Waits for the Observe stream (on the leader) to report the second candidate as
/// leader and checks everything that must hold around that; returns the timings.
async fn expiry_trial(
    c: &mut Cluster,
    leader: u64,
    election: &str,
    ttl_ms: u64,
    keepalives: u64,
) -> ExpiryTrial {
    // Straight to the leader on a connection without request timeouts (the streams and the
    // waiting Campaign live long); each wait has its own deadline.
    let ch = c.channel_without_timeout(leader);
    let caller = Caller::new(ch.clone());
    let grant = |ttl_ms| {
        caller.send(v1::GrantRequest {
            ttl_ms,
            session_secret: secret(),
            ..Default::default()
        })
    };
    let holder = grant(ttl_ms).await.expect("grant");
    assert_eq!(holder.ttl_ms, ttl_ms);
    let next = grant(60_000).await.expect("grant");
    let campaign = |session_id, value: &str| v1::CampaignRequest {
        election: election.to_string(),
        session_id,
        value: value.as_bytes().to_vec(),
        session_secret: secret(),
        ..Default::default()
    };
    let first_token = caller
        .send(campaign(holder.session_id, "holder"))
        .await
        .expect("the first candidate leads at once")
        .token;
    let mut renewals = KeepAlives::open(ch.clone())
        .await
        .expect("keepalive stream");
    let mut observe = v1::elections_client::ElectionsClient::new(ch)
        .observe(v1::ObserveRequest {
            election: election.to_string(),
        })
        .await
        .expect("observe")
        .into_inner();
    let current = observe
        .message()
        .await
        .expect("observe stream")
        .expect("first event");
    assert_eq!(
        current.leader.as_ref().map(|l| l.session_id),
        Some(holder.session_id)
    );
    let next_campaign = tokio::spawn({
        let (waiting, req) = (caller.clone(), campaign(next.session_id, "next"));
        async move { waiting.send(req).await }
    });

    let (mut last_send, mut last_ack) = (Instant::now(), Instant::now());
    for seq in 1..=keepalives {
        tokio::time::sleep(ms(100)).await;
        last_send = Instant::now();
        let ack = renewals
            .renew(holder.session_id, seq)
            .await
            .expect("an acknowledgement");
        last_ack = Instant::now();
        assert_eq!(
            (ack.session_id, ack.seq, ack.ttl_ms),
            (holder.session_id, seq, ttl_ms)
        );
    }
    // The holder falls silent (its stream stays open).

    let event = tokio::time::timeout(secs(5), observe.message())
        .await
        .expect("the leader changes within 5 s of the last keepalive")
        .expect("observe stream")
        .expect("an event");
    let observed = Instant::now();
    let new = event.leader.expect("the next candidate leads");
    assert_eq!(
        new.session_id, next.session_id,
        "the queued candidate leads"
    );
    assert!(
        new.token > first_token,
        "token {} must exceed {first_token}",
        new.token
    );
    let won = tokio::time::timeout(secs(5), next_campaign)
        .await
        .expect("the waiting Campaign returns")
        .expect("campaign task")
        .expect("campaign succeeds");
    assert_eq!(won.token, new.token);
    let now_leads = caller
        .send(v1::LeaderRequest {
            election: election.to_string(),
        })
        .await
        .expect("Leader");
    assert_eq!(
        now_leads.leader.map(|l| (l.session_id, l.token)),
        Some((next.session_id, new.token))
    );
    // The holder's session is gone: its next keepalive is refused.
    assert_error(
        renewals.renew(holder.session_id, 999).await,
        Code::NotFound,
        "unknown-session",
        "keepalive after expiry",
    );
    ExpiryTrial {
        from_last_send: observed - last_send,
        from_last_ack: observed - last_ack,
    }
}

/// A session's holder stops keepalives: the session expires within TTL + 150 ms of the last
/// keepalive the server received, and the next candidate becomes leader with a higher token.
///
/// Measured from the client's receipt of the last acknowledgement (no earlier than the
/// server's receipt of the keepalive) to the Observe event on the leader, which also
/// includes committing the expiry and streaming the change. On a quiet machine that is
/// TTL + 4 to 14 ms; the bound is generous because the whole suite runs in parallel on two
/// cores (one trial took TTL + 53 ms there). It still catches an expiry that waits a
/// second TTL or an election timeout (the shipped 150 ms and more) past the last keepalive;
/// the takeover scenario of `tenure bench` measures the precision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_without_keepalives_expires_on_time_and_next_candidate_leads_with_higher_token() {
    const TTL_MS: u64 = 500;
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let mut trials = Vec::new();
    for trial in 0..3 {
        trials.push(expiry_trial(&mut c, leader, &format!("lease-{trial}"), TTL_MS, 5).await);
    }
    eprintln!("session expiry, TTL {TTL_MS} ms, observed via Observe on the leader: {trials:#?}");
    let expiries = c.metric(leader, "tenure_session_expiries_total").await;
    assert!(
        expiries >= trials.len() as f64,
        "expiries counted: {expiries}"
    );
    for t in &trials {
        assert!(
            t.from_last_ack <= ms(TTL_MS + 150),
            "session expired late: {t:?}"
        );
        // Never early (rule 4): the server received the keepalive after it was sent.
        assert!(
            t.from_last_send >= ms(TTL_MS),
            "session expired early: {t:?}"
        );
    }
}

/// DESIGN rule 4: the server never expires a session before receive time + TTL. The last
/// keepalive was received after the client sent it, so the change of leader must not be
/// observed earlier than send time + TTL.
///
/// Regression test: the leader used to stamp a keepalive (and a fresh Grant) with its tick
/// count, the floor of the time elapsed, and expire the session when the count reached
/// stamp + TTL, up to one tick before receive time + TTL in real time. With 10 ms ticks the
/// test above saw expiries 493-499 ms after the last send with a 500 ms TTL; this test uses
/// 50 ms ticks so that an early expiry (it was 15-40 ms early in every trial) stands out from
/// the few milliseconds it takes to observe one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_never_expires_before_keepalive_receipt_plus_ttl() {
    const TTL_MS: u64 = 1_000;
    let mut c = Cluster::start(
        Options::nodes(3)
            .timing(500, 100, 50)
            .args(&["--ttl-min-ms", "300"]),
    );
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let mut trials = Vec::new();
    for trial in 0..6 {
        trials.push(expiry_trial(&mut c, leader, &format!("early-{trial}"), TTL_MS, 1).await);
    }
    eprintln!("session expiry, TTL {TTL_MS} ms, tick 50 ms: {trials:#?}");
    let early: Vec<_> = trials
        .iter()
        .filter(|t| t.from_last_send < ms(TTL_MS))
        .collect();
    assert!(
        early.is_empty(),
        "sessions expired before send time + TTL ({TTL_MS} ms), tick 50 ms: {early:#?} (all trials: {trials:#?})"
    );
}

/// Bytes that are not a valid peer frame, sent to the leader's peer port, and client
/// requests that break the rules: each is refused with a clear error, nothing changes, and
/// the node keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_peer_frames_and_bad_client_requests_get_typed_errors_and_change_nothing() {
    use tenure_transport::codec::{
        encode_hello, Hello, FLAG_HELLO, HEADER_BYTES, MAGIC, PROTOCOL_VERSION,
    };
    use tokio::io::AsyncWriteExt;

    // Plaintext: these are the framing rules behind the handshake; with TLS on (see
    // tests/peer_tls.rs) none of these bytes would get past the TLS layer.
    let mut c = Cluster::start(Options::nodes(3).plaintext());
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];
    let (holder, token) = c.client().first_write("fence", "k", b"v1", secs(10)).await;

    // ---- Peer frames. After each, the connection must be closed by the node promptly (well
    // before the 5 s handshake timeout), not left hanging.
    let hello_from = |node_id, cluster_id: &str| {
        encode_hello(&Hello {
            cluster_id: cluster_id.into(),
            node_id,
            protocol_version: PROTOCOL_VERSION,
        })
        .expect("encode hello")
    };
    let header = |flags: u8, len: u32, crc: u32| {
        let mut h = MAGIC.to_vec();
        h.push(PROTOCOL_VERSION);
        h.push(flags);
        h.extend_from_slice(&len.to_be_bytes());
        h.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(h.len(), HEADER_BYTES);
        h
    };
    let garbage_payload = vec![0xAB; 64];
    let mut garbage_frame = header(0, garbage_payload.len() as u32, crc32c(&garbage_payload));
    garbage_frame.extend_from_slice(&garbage_payload);
    let mut bad_version = header(0, 0, 0);
    bad_version[4] = PROTOCOL_VERSION + 1;
    // Impersonating a follower: the leader hears least from followers, so briefly replacing
    // that follower's connection disturbs nothing.
    // (what is sent, the bytes, what the node must log as the reason for closing).
    let hello = || hello_from(follower, CLUSTER_ID);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "garbage text",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            "bad magic",
        ),
        (
            "random bytes",
            (0..200u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
                .collect(),
            "bad magic",
        ),
        (
            "bad magic",
            [b"XXXX".as_slice(), &header(FLAG_HELLO, 8, 0)[4..]].concat(),
            "bad magic",
        ),
        (
            "unknown protocol version",
            bad_version,
            "unsupported protocol version",
        ),
        ("unknown flags", header(0b1000_0000, 0, 0), "unknown flags"),
        (
            "oversize hello",
            header(FLAG_HELLO, 1 << 20, 0),
            "exceeds the cap of 1024 bytes",
        ),
        (
            "hello of another cluster",
            hello_from(follower, "other-cluster"),
            "does not match ours",
        ),
        (
            "hello of an unknown node",
            hello_from(99, CLUSTER_ID),
            "node 99 is not a configured peer",
        ),
        (
            "garbage frame instead of a hello",
            garbage_frame.clone(),
            "malformed payload",
        ),
        // Peer frames may carry a whole snapshot: the cap is the write-ahead log's largest
        // snapshot (1 GiB) and 1 MiB for the message around it.
        (
            "oversize frame after hello",
            [hello(), header(0, u32::MAX - 64, 0)].concat(),
            "exceeds the cap of 1074790400 bytes",
        ),
        (
            "frame one byte over the cap after hello",
            [hello(), header(0, (1 << 30) + (1 << 20) - 13, 0)].concat(),
            "frame of 1074790401 bytes exceeds",
        ),
        (
            "bad checksum after hello",
            [hello(), header(0, 4, 0xDEAD_BEEF), vec![1, 2, 3, 4]].concat(),
            "payload checksum mismatch",
        ),
        (
            "malformed payload after hello",
            [hello(), garbage_frame].concat(),
            "malformed payload",
        ),
    ];
    let peer_addr = c.addrs(leader).peer;
    for (what, bytes, logged) in &cases {
        let mut s = tokio::net::TcpStream::connect(peer_addr)
            .await
            .expect("connect to the peer port");
        let local = s.local_addr().expect("local address").to_string();
        // The node may close while we still write; that is fine.
        let _ = s.write_all(bytes).await;
        assert!(
            closed_within(&mut s, secs(3)).await,
            "{what}: the node did not close the connection within 3 s"
        );
        // The node says why, naming this connection.
        let line = c
            .log(leader)
            .lines()
            .find(|l| l.contains(&format!("peer_addr={local} ")))
            .map(str::to_string);
        assert!(
            line.as_deref()
                .is_some_and(|l| l.contains("closing inbound connection") && l.contains(logged)),
            "{what}: expected the node to log {logged:?} for {local}, found {line:?}"
        );
    }
    let after = c.status_of(leader).await;
    assert!(
        after.is_leader() && after.term == term,
        "bad peer frames disturbed the leader: {after:?}"
    );

    // ---- Client requests, straight to the leader.
    let at_leader = Caller::new(c.channel(leader));
    let sessions_before = c.status_of(leader).await.sessions;

    let grant = |ttl_ms| v1::GrantRequest {
        ttl_ms,
        session_secret: secret(),
        ..Default::default()
    };
    for ttl_ms in [0, 1, 99, 3_600_001, u64::MAX] {
        assert_error(
            at_leader.send(grant(ttl_ms)).await,
            Code::InvalidArgument,
            "invalid-argument",
            &format!("Grant ttl {ttl_ms} ms"),
        );
    }
    let put = |key: &str, value: Vec<u8>, election: &str, token| v1::PutRequest {
        key: key.into(),
        value,
        election: election.into(),
        token,
        ..Default::default()
    };
    let campaign = |election: &str, session_id| v1::CampaignRequest {
        election: election.into(),
        session_id,
        value: Vec::new(),
        session_secret: secret(),
        ..Default::default()
    };
    let resign = |election: &str, session_id| v1::ResignRequest {
        election: election.into(),
        session_id,
        session_secret: secret(),
        ..Default::default()
    };
    let leader_of = |election: &str| v1::LeaderRequest {
        election: election.into(),
    };
    let x = || b"x".to_vec();
    let long_key = "k".repeat(257);
    let long_election = "e".repeat(257);
    let (invalid, not_found, precondition) = (
        (Code::InvalidArgument, "invalid-argument"),
        (Code::NotFound, "unknown-election"),
        (Code::FailedPrecondition, "token-not-issued"),
    );
    let fence = |key: &str, value| put(key, value, "fence", token);
    let refusals = [
        (
            "Put empty key",
            unit(at_leader.send(fence("", x())).await),
            invalid,
        ),
        (
            "Put long key",
            unit(at_leader.send(fence(&long_key, x())).await),
            invalid,
        ),
        (
            "Put empty election",
            unit(at_leader.send(put("k", x(), "", token)).await),
            invalid,
        ),
        (
            "Put value over 64 KiB",
            unit(at_leader.send(fence("k", vec![7; 64 * 1024 + 1])).await),
            invalid,
        ),
        (
            "Get empty key",
            unit(at_leader.send(v1::GetRequest::default()).await),
            invalid,
        ),
        // Over the server's 4 MiB message cap: tonic's decoder refuses it before tenure's
        // handlers run, and the server labels that refusal as the size violation it is.
        (
            "Put of a 5 MiB message",
            unit(at_leader.send(fence("k", vec![7; 5 << 20])).await),
            invalid,
        ),
        (
            "Put unknown election",
            unit(at_leader.send(put("k", x(), "no-such-election", 1)).await),
            not_found,
        ),
        (
            "Put token not issued",
            unit(at_leader.send(put("k", x(), "fence", token + 1)).await),
            precondition,
        ),
        (
            "Put token 0",
            unit(at_leader.send(put("k", x(), "fence", 0)).await),
            precondition,
        ),
        (
            "Campaign empty election",
            unit(at_leader.send(campaign("", holder)).await),
            invalid,
        ),
        (
            "Campaign long election name",
            unit(at_leader.send(campaign(&long_election, holder)).await),
            invalid,
        ),
        (
            "Campaign unknown session",
            unit(at_leader.send(campaign("fence", 999_999)).await),
            (Code::NotFound, "unknown-session"),
        ),
        (
            "Resign unknown election",
            unit(at_leader.send(resign("no-such-election", holder)).await),
            not_found,
        ),
        (
            "Resign empty election",
            unit(at_leader.send(resign("", holder)).await),
            invalid,
        ),
        (
            "Resign non-candidate",
            unit(at_leader.send(resign("fence", 999_999)).await),
            (Code::FailedPrecondition, "not-candidate"),
        ),
        (
            "Transfer unknown election",
            unit(
                at_leader
                    .send(v1::TransferRequest {
                        election: "no-such-election".into(),
                        from_session_id: holder,
                        to_session_id: holder,
                        from_session_secret: secret(),
                        ..Default::default()
                    })
                    .await,
            ),
            not_found,
        ),
        (
            "Leader empty election",
            unit(at_leader.send(leader_of("")).await),
            invalid,
        ),
        // DESIGN rule 6: an election nobody ever campaigned in is an error, not "no leader
        // yet", so that a misspelt name is noticed instead of waited on forever.
        (
            "Leader of an unknown election",
            unit(at_leader.send(leader_of("no-such-election")).await),
            not_found,
        ),
        (
            "Observe of an unknown election",
            unit(
                v1::elections_client::ElectionsClient::new(c.channel(leader))
                    .observe(v1::ObserveRequest {
                        election: "no-such-election".into(),
                    })
                    .await,
            ),
            not_found,
        ),
        (
            "Revoke unknown session",
            unit(
                at_leader
                    .send(v1::RevokeRequest {
                        session_id: 999_999,
                        session_secret: secret(),
                        ..Default::default()
                    })
                    .await,
            ),
            (Code::NotFound, "unknown-session"),
        ),
        (
            "KeepAlive unknown session",
            unit(
                KeepAlives::open(c.channel(leader))
                    .await
                    .expect("keepalive stream")
                    .renew(999_999, 1)
                    .await,
            ),
            (Code::NotFound, "unknown-session"),
        ),
    ];
    for (what, answer, (code, why)) in refusals {
        assert_error(answer, code, why, what);
    }

    // A follower names the leader.
    let on_follower = Caller::new(c.channel(follower))
        .send(v1::GetRequest { key: "k".into() })
        .await;
    let s = assert_error(
        on_follower,
        Code::FailedPrecondition,
        "not-leader",
        "Get on a follower",
    );
    let hint = s
        .metadata()
        .get(tenure_proto::LEADER_ADDR_KEY)
        .and_then(|v| v.to_str().ok());
    assert_eq!(hint, Some(c.addrs(leader).client.to_string().as_str()));

    // Fencing: a newer holder's write makes the old token stale, atomically.
    at_leader
        .send(resign("fence", holder))
        .await
        .expect("resign");
    let session = || async {
        let granted = at_leader.send(grant(60_000)).await.expect("grant");
        granted.session_id
    };
    let lead = |election: &str, session| {
        let (at_leader, request) = (&at_leader, campaign(election, session));
        async move { at_leader.send(request).await.expect("campaign").token }
    };
    let newer = session().await;
    let newer_token = lead("fence", newer).await;
    assert!(newer_token > token);
    // The replaced holder's token is refused as soon as the newer holder leads, before the
    // newer holder has written anything (the cluster knows the election's current token).
    let late = fence("k", b"late".to_vec());
    refused_as_replaced(&at_leader, late, "token-superseded", newer_token).await;
    at_leader
        .send(put("k", b"v2".to_vec(), "fence", newer_token))
        .await
        .expect("newer holder writes");
    // Another election cannot write this election's key, whatever its token: churn an
    // election to a higher token and try.
    let intruder = session().await;
    for _ in 0..=newer_token {
        lead("intruder", intruder).await;
        at_leader
            .send(resign("intruder", intruder))
            .await
            .expect("resign");
    }
    let intruder_token = lead("intruder", intruder).await;
    assert!(
        intruder_token > newer_token,
        "{intruder_token} > {newer_token}"
    );
    assert_error(
        at_leader
            .send(put("k", b"forged".to_vec(), "intruder", intruder_token))
            .await,
        Code::FailedPrecondition,
        "wrong-election",
        "write to another election's key",
    );
    at_leader
        .send(v1::RevokeRequest {
            session_id: intruder,
            session_secret: secret(),
            ..Default::default()
        })
        .await
        .expect("revoke the intruder's session");
    // Once the newer holder has written, the old token is stale.
    let stale = fence("k", b"stale".to_vec());
    refused_as_replaced(&at_leader, stale, "stale-token", newer_token).await;

    // Nothing changed, and the node serves.
    let value = at_leader
        .send(v1::GetRequest { key: "k".into() })
        .await
        .expect("Get")
        .value
        .expect("k is set");
    assert_eq!(
        (value.value.as_slice(), value.token),
        (b"v2".as_slice(), newer_token)
    );
    at_leader
        .send(put("after-bad-input", b"ok".to_vec(), "fence", newer_token))
        .await
        .expect("a normal Put succeeds");
    let status = c.status_of(leader).await;
    assert!(status.is_leader() && status.term == term, "{status:?}");
    assert_eq!(
        status.sessions,
        sessions_before + 1,
        "only the one good Grant created a session"
    );
}

/// What a refusal test needs of an answer.
fn unit<T>(answer: Result<T, tonic::Status>) -> Result<(), tonic::Status> {
    answer.map(|_| ())
}

/// Five nodes; one follower is cut off both ways with `/debug/block`. The leader keeps its
/// place and term for many election timeouts, the isolated node (pre-vote) does not raise
/// its term, and when it rejoins no election happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_follower_neither_unseats_the_leader_nor_forces_an_election_on_rejoining() {
    let mut c = Cluster::start(Options::nodes(5).fault_injection());
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(15)).await;
    let isolated = *c.others(&[leader]).last().expect("four followers");
    let majority = c.others(&[isolated]);
    let mut elections_before = Vec::new();
    for id in c.ids() {
        elections_before.push((id, c.metric(id, "tenure_elections_started_total").await));
    }

    for id in &majority {
        c.block(*id, &[isolated]).await;
    }
    c.block(isolated, &majority).await;
    let mut client = c.client_for(&majority);
    let (_, token) = client.writer_token("writers").await;
    let mut acked = Vec::new();
    // Ten election timeouts (five to ten randomized timeouts of the isolated node), writing.
    let until = Instant::now() + ms(10 * ELECTION_TIMEOUT_MS);
    let mut i = 0;
    while Instant::now() < until {
        acked.extend(
            put_acked(
                &mut client,
                &format!("partitioned-{i}"),
                1,
                "writers",
                token,
            )
            .await,
        );
        i += 1;
        tokio::time::sleep(ms(50)).await;
    }
    for id in &majority {
        let s = c.status_of(*id).await;
        assert_eq!(
            (s.leader, s.term),
            (leader, term),
            "node {id} during the partition: {s:?}"
        );
    }
    let cut_off = c.status_of(isolated).await;
    assert_eq!(
        cut_off.term, term,
        "the isolated node raised its term (no pre-vote?): {cut_off:?}"
    );
    assert!(!cut_off.is_leader());

    for id in c.ids() {
        c.block(id, &[]).await;
    }
    c.wait_caught_up(leader, &[isolated], secs(10)).await;
    // Several more election timeouts after rejoining: still no election anywhere.
    tokio::time::sleep(ms(6 * ELECTION_TIMEOUT_MS)).await;
    for id in c.ids() {
        let s = c.status_of(id).await;
        assert_eq!(
            (s.leader, s.term),
            (leader, term),
            "node {id} after rejoining: {s:?}"
        );
    }
    for (id, before) in elections_before {
        let after = c.metric(id, "tenure_elections_started_total").await;
        assert_eq!(after, before, "node {id} started an election");
    }
    none_lost(&c.client(), &acked, "after the partition").await;
}

/// Every node takes its own snapshots off its event loop: encoded and written by a thread of
/// its own (the encoding time is exported only for those), recorded in the log, which then
/// drops the entries they cover; a node killed and restarted recovers from them, and nothing
/// acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_taken_in_the_background_and_a_restart_recovers_from_them() {
    let mut c = Cluster::start(Options::nodes(3).args(&["--snapshot-threshold-entries", "20"]));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let (token, mut acked) = writer(&mut c, "snapshotted", 100).await;
    let deadline = Instant::now() + secs(20);
    for id in c.ids() {
        loop {
            let index = c.metric(id, "tenure_snapshot_index").await;
            let encode = c.metric(id, "tenure_snapshot_encode_seconds").await;
            if index > 0.0 && encode > 0.0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} took no snapshot in the background (index {index}, encode {encode} s)"
            );
            tokio::time::sleep(ms(50)).await;
        }
        assert_eq!(c.metric(id, "tenure_snapshot_failures_total").await, 0.0);
    }
    let follower = c.others(&[leader])[0];
    let files: Vec<String> = std::fs::read_dir(c.data_dir(follower))
        .expect("data directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("snap-") && f.ends_with(".snap")),
        "no snapshot file in {files:?}"
    );
    c.kill(follower);
    let mut client = c.client_for(&c.others(&[follower]));
    acked.extend(put_acked(&mut client, "while-down", 30, "writers", token).await);
    c.start_node(follower);
    c.wait_caught_up(leader, &[follower], secs(20)).await;
    c.move_leadership(follower, secs(10)).await;
    none_lost(&c.client_for(&[follower]), &acked, "on the restarted node").await;
}

/// SIGTERM stops a node gracefully (exit status 0) and it restarts into the same cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_node_gracefully_and_it_rejoins() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];
    let status = c.terminate(follower, secs(10)).await;
    assert!(status.success(), "SIGTERM exit status {status:?}");
    c.start_node(follower);
    c.wait_caught_up(leader, &[follower], secs(10)).await;
    assert_eq!(c.status_of(follower).await.term, term);
}

/// A torn write at the end of the log (garbage after the last record, as a crash during an
/// append leaves it) is cut on restart, and the node says so in its log with what it cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_is_cut_on_restart_with_a_warning() {
    let mut c = Cluster::start(Options::nodes(1));
    c.wait_for_leader(&c.ids(), secs(10)).await;
    c.kill(1);
    let segment = std::fs::read_dir(c.data_dir(1))
        .expect("list the data directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
        .expect("a segment");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("open the last segment");
    std::io::Write::write_all(&mut f, &[0x5a; 7]).expect("append a torn record");
    drop(f);
    c.start_node(1);
    c.wait_for_leader(&c.ids(), secs(10)).await;
    let log = c.log(1);
    assert!(
        log.contains("recovery repaired the log") && log.contains("cut a torn write"),
        "no warning about the cut tail in:\n{log}"
    );
}

/// `write`, with the token of a holder the election has replaced, is refused ABORTED (`why`)
/// and the refusal names `current`, the election's token now.
async fn refused_as_replaced(at: &Caller, write: v1::PutRequest, why: &str, current: u64) {
    let what = format!("a write with a replaced holder's token ({why})");
    let refusal = assert_error(at.send(write).await, Code::Aborted, why, &what);
    assert_eq!(current_token(&refusal), Some(current), "{what}");
}

/// The `tenure-current-token` a refusal carries, if any.
fn current_token(status: &tonic::Status) -> Option<u64> {
    status
        .metadata()
        .get(tenure_proto::CURRENT_TOKEN_KEY)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// A node whose driver thread dies (here a panic injected through `/debug/driver-panic`)
/// must not linger as a zombie with open ports: `/health` fails from that moment, and the
/// process exits at once with a non-zero status and says why, so that a supervisor restarts
/// it. It then restarts from its directory and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_driver_thread_dies_fails_health_and_exits() {
    let mut c = Cluster::start(Options::nodes(3).fault_injection());
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let victim = c.others(&[leader])[0];
    let (code, body) = c
        .http(victim, "GET", "/health", "", secs(2))
        .await
        .expect("GET /health");
    assert_eq!(code, 200, "healthy before: {body}");

    // Answered once the driver is gone, unless the process exited before it could answer.
    if let Ok((code, body)) = c
        .http(victim, "POST", "/debug/driver-panic", "", secs(10))
        .await
    {
        assert_eq!(code, 200, "{body}");
    }
    // The driver is gone: the node answers 503, or nothing once it has exited.
    if let Ok((code, body)) = c.http(victim, "GET", "/health", "", secs(2)).await {
        assert_eq!(code, 503, "/health after the driver died: {body}");
    }
    let status = c
        .wait_exit(victim, secs(5))
        .await
        .expect("the node exits within 5 s of its driver's death");
    assert!(!status.success(), "exit status {status:?}");
    let log = c.log(victim);
    assert!(
        log.contains("the driver thread ended") && log.contains("panicked"),
        "the node says why it exits:\n{log}"
    );

    c.start_node(victim);
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    c.wait_caught_up(leader, &[victim], secs(10)).await;
}
