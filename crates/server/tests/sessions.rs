//! Sessions belong to their holder, on a real cluster: a client that knows a session's id
//! (every `Leader()` answer shows it) but not its secret cannot keep it alive, revoke it,
//! resign or transfer its leadership, or campaign with it; each attempt is refused
//! PERMISSION_DENIED (`wrong-secret`) and changes nothing. The holder, with its secret,
//! still leads, and once it stops renewing, the session expires on time although the
//! stranger keeps sending keepalives for it.

use std::time::Instant;

use tenure_proto::v1;
use tenure_testkit::*;
use tonic::Code;

const TTL_MS: u64 = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_used_only_with_its_secret() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let mut client = c.client();

    // The holder: a session (granted with the harness's secret) leading "jobs", and a
    // second candidate queued behind it.
    let (holder, token, queued) = client.holder_and_second("jobs", TTL_MS).await;
    let ch = c.channel_without_timeout(leader);
    let queued_campaign = campaign_in_background(ch.clone(), "jobs", queued);
    // Keep the holder alive for now (the harness's own keepalive stream).
    let mut renewals = KeepAlives::open(ch.clone()).await.expect("open keepalive");
    let ka_tx = renewals.sender();
    let renew = tokio::spawn(async move {
        let mut seq = 0;
        loop {
            seq += 1;
            let request = v1::KeepAliveRequest {
                session_id: holder,
                seq,
                session_secret: secret(),
                bind: false,
            };
            if ka_tx.send(request).await.is_err() {
                return;
            }
            tokio::time::sleep(ms(TTL_MS / 4)).await;
        }
    });
    assert!(
        renewals.answer(secs(5)).await.is_ok(),
        "the holder's keepalive is acknowledged"
    );

    // The stranger learns the holder's session id from Leader().
    let stranger = Caller::new(ch.clone());
    assert_eq!(who_leads(&stranger, "jobs").await, Some((holder, token)));

    // A secret anyone could guess (one byte repeated: what a client that forgot to draw
    // one sends) is refused as a grant's secret, before anything is granted.
    for weak in [vec![0u8; 16], vec![0x5a; 16]] {
        let granted = stranger
            .send(v1::GrantRequest {
                ttl_ms: TTL_MS,
                session_secret: weak,
                ..Default::default()
            })
            .await;
        assert_error(
            granted.map(drop),
            tonic::Code::InvalidArgument,
            "invalid-argument",
            "a grant with a guessable secret",
        );
    }
    let before = c.status_of(leader).await;

    // Every call that acts for the holder's session, sent with a stranger's secret.
    let mut resign = v1::ResignRequest {
        election: "jobs".into(),
        session_id: holder,
        ..Default::default()
    };
    let mut transfer = v1::TransferRequest {
        election: "jobs".into(),
        from_session_id: holder,
        to_session_id: queued,
        ..Default::default()
    };
    let mut campaign = v1::CampaignRequest {
        election: "other".into(),
        session_id: holder,
        ..Default::default()
    };
    let mut revoke = v1::RevokeRequest {
        session_id: holder,
        ..Default::default()
    };
    for (what, wrong) in [
        ("no secret", Vec::new()),
        ("another secret", (0x50..0x60).collect()),
    ] {
        resign.session_secret = wrong.clone();
        transfer.from_session_secret = wrong.clone();
        campaign.session_secret = wrong.clone();
        revoke.session_secret = wrong;
        for (call, answer) in [
            ("Resign", stranger.send(resign.clone()).await.map(drop)),
            ("Transfer", stranger.send(transfer.clone()).await.map(drop)),
            ("Campaign", stranger.send(campaign.clone()).await.map(drop)),
            ("Revoke", stranger.send(revoke.clone()).await.map(drop)),
        ] {
            assert_error(
                answer,
                Code::PermissionDenied,
                "wrong-secret",
                &format!("{call} with {what}"),
            );
        }
    }
    let after = c.status_of(leader).await;
    assert_eq!(after.sessions, before.sessions, "a session was ended");
    assert_eq!(who_leads(&stranger, "jobs").await, Some((holder, token)));

    // The holder stops renewing; the stranger keeps "renewing" for it, and is refused
    // each time. The session expires within its TTL (plus the expiry's commit), and the
    // queued candidate takes over with a higher token.
    renew.abort();
    drop(renewals);
    let mut refused = KeepAlives::open(ch.clone()).await.expect("open keepalive");
    let tx = refused.sender();
    let stopped = Instant::now();
    let flood = tokio::spawn(async move {
        for seq in 1.. {
            let request = v1::KeepAliveRequest {
                session_id: holder,
                seq,
                session_secret: if seq % 2 == 0 {
                    Vec::new()
                } else {
                    (0x50..0x60).collect()
                },
                bind: false,
            };
            if tx.send(request).await.is_err() {
                return;
            }
            tokio::time::sleep(ms(100)).await;
        }
    });
    assert_error(
        refused.answer(secs(5)).await,
        Code::PermissionDenied,
        "wrong-secret",
        "the stranger's keepalive",
    );
    let taken_over = tokio::time::timeout(secs(10), queued_campaign)
        .await
        .expect("the queued candidate leads within 10 s")
        .expect("task")
        .expect("campaign");
    let waited = stopped.elapsed();
    flood.abort();
    assert!(taken_over.token > token);
    assert!(
        waited < ms(TTL_MS * 3),
        "the stranger's keepalives kept the session alive for {waited:?}"
    );

    // No node logged the secret or a private key, in any common encoding (every test's
    // cluster checks this when it stops; here it is checked with logs known not to be
    // empty).
    c.assert_logs_hold_no_credentials();
    for id in c.ids() {
        assert!(!c.log(id).is_empty(), "node {id} logged nothing");
    }
}
