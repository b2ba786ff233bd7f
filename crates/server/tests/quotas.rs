//! Quotas per principal, deletes, and sessions bound to the principal that granted them,
//! on a real cluster with TLS and an auth file (docs/SECURITY.md "Quotas").
//!
//! - What a principal holds is counted by the replicated state machine, each command
//!   charged with its caller's quota: past it, RESOURCE_EXHAUSTED `quota-exceeded` naming the
//!   quota, and another principal is not affected. (Before quotas, one principal made 20,000
//!   sessions and 5,000 elections in seconds; this test's fourth session then succeeds.)
//! - A principal's calls per second on a node are bounded by its own budget.
//! - A session works only for the principal that granted it, whatever secret is shown.
//!   (Before, `alpha`'s session secret worked for `beta`: the revoke below succeeded.)
//! - An election with no candidates can be deleted, and one created again under its name
//!   hands out tokens above the old ones; a key is deleted only by its election's leader.
//! - Usage per principal is in `/metrics`.

use tenure_proto::v1;
use tenure_testkit::*;
use tonic::Code;

const AUTH_FILE: &str = r#"
[principals.admin]
roles = ["admin"]

[principals.alpha]
grants = [{ prefix = "alpha/", allow = ["campaign", "observe", "read", "write"] }]
quotas = { sessions = 3, elections = 1, keys = 1, key_bytes = 64 }

[principals.beta]
grants = [{ prefix = "beta/", allow = ["campaign", "observe", "read", "write"] }]

[principals.chatty]
grants = [{ prefix = "chatty/", allow = ["campaign", "observe", "read", "write"] }]
quotas = { requests_per_second = 20 }
"#;

fn grant() -> v1::GrantRequest {
    v1::GrantRequest {
        ttl_ms: 60_000,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_principal_holds_at_most_its_quota_and_its_own_sessions() {
    let auth = AuthFile::new(AUTH_FILE, &["alpha", "beta", "chatty"]);
    let c = Cluster::start(Options::nodes(3).auth_file(&auth));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let ch = c.channel_as(leader, None);
    let alpha = Caller::bearer(ch.clone(), auth.token("alpha"));
    let beta = Caller::bearer(ch.clone(), auth.token("beta"));
    let chatty = Caller::bearer(ch.clone(), auth.token("chatty"));

    // Sessions: three, then quota-exceeded; beta is not affected by alpha's usage.
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(alpha.send(grant()).await.expect("within alpha's quota"));
    }
    let over = alpha.send(grant()).await;
    assert_error(
        over,
        Code::ResourceExhausted,
        "quota-exceeded",
        "alpha's fourth session",
    );
    let beta_session = beta.send(grant()).await.expect("beta has its own quota");

    // A session works only for the principal that granted it, even with its secret.
    let (session, secret) = (sessions[0].session_id, sessions[0].session_secret.clone());
    let revoke = v1::RevokeRequest {
        session_id: session,
        session_secret: secret.clone(),
        ..Default::default()
    };
    let stolen = beta.send(revoke.clone()).await;
    assert_error(
        stolen,
        Code::PermissionDenied,
        "permission-denied",
        "beta revokes alpha's session",
    );
    let mut keepalives = KeepAlives::open_as(ch.clone(), Some(auth.token("beta")))
        .await
        .expect("beta opens a KeepAlive stream");
    keepalives
        .sender()
        .send(v1::KeepAliveRequest {
            session_id: session,
            session_secret: secret.clone(),
            seq: 1,
            ..Default::default()
        })
        .await
        .expect("send");
    let renewed = keepalives.answer(secs(5)).await;
    assert_error(
        renewed,
        Code::PermissionDenied,
        "permission-denied",
        "beta renews alpha's session",
    );

    // Elections: one; a second is over the quota, joining one costs nothing.
    let campaign = |election: &str, s: &v1::GrantResponse| v1::CampaignRequest {
        election: election.into(),
        session_id: s.session_id,
        session_secret: s.session_secret.clone(),
        ..Default::default()
    };
    let token = alpha
        .send(campaign("alpha/close", &sessions[0]))
        .await
        .expect("alpha's first election")
        .token;
    let over = alpha.send(campaign("alpha/report", &sessions[1])).await;
    assert_error(
        over,
        Code::ResourceExhausted,
        "quota-exceeded",
        "alpha's second election",
    );

    // Keys: one of at most 64 bytes (name plus value).
    let put = |key: &str, value: &[u8], token| v1::PutRequest {
        key: key.into(),
        value: value.to_vec(),
        election: "alpha/close".into(),
        token,
        ..Default::default()
    };
    let too_big = alpha.send(put("alpha/k", &[7; 64], token)).await;
    assert_error(
        too_big,
        Code::ResourceExhausted,
        "quota-exceeded",
        "64 bytes of value",
    );
    alpha
        .send(put("alpha/k", b"ledger", token))
        .await
        .expect("one small key");
    let second = alpha.send(put("alpha/k2", b"x", token)).await;
    assert_error(
        second,
        Code::ResourceExhausted,
        "quota-exceeded",
        "alpha's second key",
    );

    // Usage per principal in /metrics (the leader applied every command above).
    let metrics = c.metrics(leader).await;
    let usage = |name: &str| {
        metric_value(&metrics, &format!("{name}{{principal=\"alpha\"}}")).unwrap_or(-1.0)
    };
    assert_eq!(usage("tenure_principal_sessions"), 3.0, "{metrics}");
    assert_eq!(usage("tenure_principal_elections"), 1.0);
    assert_eq!(usage("tenure_principal_keys"), 1.0);
    assert_eq!(usage("tenure_principal_key_bytes"), 13.0);
    // `Status` shows the caller its own holdings against its quotas, and nobody else's.
    let status = alpha.send(v1::StatusRequest {}).await.expect("status");
    let own: Vec<_> = status
        .usage
        .iter()
        .map(|u| {
            (
                u.principal.as_str(),
                u.sessions,
                u.sessions_max,
                u.keys,
                u.keys_max,
            )
        })
        .collect();
    assert_eq!(own, vec![("alpha", 3, 3, 1, 1)]);
    let status = beta.send(v1::StatusRequest {}).await.expect("status");
    assert!(
        status.usage.iter().all(|u| u.principal == "beta"),
        "{:?}",
        status.usage
    );

    // Deletes. In use: refused. The key only with the current token.
    let delete_election = v1::DeleteElectionRequest {
        election: "alpha/close".into(),
    };
    let in_use = alpha.send(delete_election.clone()).await;
    assert_error(
        in_use,
        Code::FailedPrecondition,
        "election-in-use",
        "delete with a candidate",
    );
    let delete_key = |token| v1::DeleteKeyRequest {
        key: "alpha/k".into(),
        election: "alpha/close".into(),
        token,
        ..Default::default()
    };
    let unissued = alpha.send(delete_key(token + 1)).await;
    assert_error(
        unissued,
        Code::FailedPrecondition,
        "token-not-issued",
        "delete with a token never issued",
    );
    assert!(
        alpha
            .send(delete_key(token))
            .await
            .expect("the leader deletes")
            .existed
    );
    // The election's candidate goes; the election is deleted and created again: its first
    // token is above the old one, and the old holder's token is refused for ever.
    alpha
        .send(v1::ResignRequest {
            election: "alpha/close".into(),
            session_id: sessions[0].session_id,
            session_secret: sessions[0].session_secret.clone(),
            ..Default::default()
        })
        .await
        .expect("resign");
    assert!(
        alpha
            .send(delete_election.clone())
            .await
            .expect("deleted")
            .existed
    );
    assert!(
        !alpha
            .send(delete_election.clone())
            .await
            .expect("again")
            .existed
    );
    let gone = alpha
        .send(v1::LeaderRequest {
            election: "alpha/close".into(),
        })
        .await;
    assert_error(
        gone,
        Code::NotFound,
        "unknown-election",
        "a deleted election",
    );
    let again = alpha
        .send(campaign("alpha/close", &sessions[1]))
        .await
        .expect("created again (the quota counts it once more)")
        .token;
    assert!(again > token, "token {again} after a delete at {token}");
    let stale = alpha.send(put("alpha/k", b"late", token)).await;
    assert_error(
        stale,
        Code::Aborted,
        "token-superseded",
        "the old holder's write",
    );
    // Another principal cannot delete it (no campaign right on alpha/).
    let foreign = beta.send(delete_election.clone()).await;
    assert_error(
        foreign,
        Code::PermissionDenied,
        "permission-denied",
        "beta deletes alpha's election",
    );
    let _ = beta_session;

    // Calls per second: chatty's budget is 20, so 60 calls at once cannot all pass.
    let mut over_rate = 0;
    for _ in 0..60 {
        if let Err(s) = chatty.send(v1::StatusRequest {}).await {
            assert_eq!(reason(&s), Some("quota-exceeded"), "{s:?}");
            over_rate += 1;
        }
    }
    assert!(over_rate >= 30, "only {over_rate} of 60 calls refused");
    // Others are not slowed by chatty's budget.
    alpha
        .send(v1::StatusRequest {})
        .await
        .expect("alpha's calls go on");
    assert!(c.metric(leader, "tenure_requests_over_rate_total").await >= 30.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_without_candidates_is_deleted_after_the_retention() {
    let mut c = Cluster::start(Options::nodes(3).args(&["--election-retention-ms", "1000"]));
    let mut client = c.client();
    let (session, token) = client.writer_token("retained").await;
    client
        .send(
            v1::ResignRequest {
                election: "retained".into(),
                session_id: session,
                session_secret: secret(),
                ..Default::default()
            },
            secs(10),
        )
        .await
        .expect("resign");
    let deadline = std::time::Instant::now() + secs(20);
    loop {
        let answer = client
            .send(
                v1::LeaderRequest {
                    election: "retained".into(),
                },
                secs(5),
            )
            .await;
        match answer {
            Err(s) if reason(&s) == Some("unknown-election") => break,
            Ok(_) if std::time::Instant::now() < deadline => tokio::time::sleep(ms(200)).await,
            other => panic!("still there after 20 s: {other:?}"),
        }
    }
    // Created again, it goes on above the deleted one's tokens.
    let (_, again) = client.writer_token("retained").await;
    assert!(again > token, "token {again} after {token}");
}
