//! Roles and grants, on a real cluster with TLS and an auth file: each principal does what
//! its roles and prefix grants allow and nothing else. Bearer tokens and client
//! certificates both authenticate; an unknown token or no credentials at all is
//! UNAUTHENTICATED (`unauthenticated`), a known principal without the right is
//! PERMISSION_DENIED (`permission-denied`); every refusal is counted, changes nothing, and
//! no token appears in any node's log. On the HTTP port, `/metrics` and `/status` are for
//! observers and admins; `/health` is open.

use tenure_proto::v1;
use tenure_testkit::*;
use tonic::Code;

const AUTH_FILE: &str = r#"
[principals.admin]
roles = ["admin"]

# A client certificate principal (the harness issues `app`).
[principals.app]
grants = [{ prefix = "app/", allow = ["campaign", "observe", "read", "write"] }]

[principals.billing]
grants = [
  { prefix = "billing/", allow = ["campaign", "observe"] },
  { prefix = "billing/keys/", allow = ["read", "write"] },
]

[principals.grafana]
roles = ["observer"]
"#;

/// `name` summed over every node: a client's request is refused by whichever node it
/// reaches.
async fn total(c: &Cluster, name: &str) -> f64 {
    let mut sum = 0.0;
    for id in c.ids() {
        sum += c.metric(id, name).await;
    }
    sum
}

/// What a refusal test needs of an answer.
fn unit<T>(result: Result<T, tonic::Status>) -> Result<(), tonic::Status> {
    result.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_do_what_their_grants_allow_and_nothing_else() {
    let auth = AuthFile::new(AUTH_FILE, &["billing", "grafana"]);
    let (billing_token, grafana_token) = (auth.token("billing"), auth.token("grafana"));
    let mut c = Cluster::start(Options::nodes(3).auth_file(&auth));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let denied_before = total(&c, "tenure_permission_denied_total").await;
    let unauthenticated_before = total(&c, "tenure_unauthenticated_total").await;

    // No client certificate on this channel: the tokens are the only credentials.
    let anonymous = c.channel_as(leader, None);
    let billing = Caller::bearer(anonymous.clone(), billing_token);
    let grafana = Caller::bearer(anonymous.clone(), grafana_token);

    // billing campaigns under billing/ and writes under billing/keys/.
    // Sessions with the secret the server draws.
    let grant = || v1::GrantRequest {
        ttl_ms: 60_000,
        ..Default::default()
    };
    let granted = billing
        .send(grant())
        .await
        .expect("billing holds a session");
    let (session, secret) = (granted.session_id, granted.session_secret);
    let campaign = |election: &str| v1::CampaignRequest {
        election: election.into(),
        session_id: session,
        session_secret: secret.clone(),
        value: b"replica-1".to_vec(),
        ..Default::default()
    };
    let token = billing
        .send(campaign("billing/close"))
        .await
        .expect("billing campaigns under billing/")
        .token;
    let put = |key: &str, value: &[u8]| v1::PutRequest {
        key: key.into(),
        value: value.to_vec(),
        election: "billing/close".into(),
        token,
        session_id: session,
        session_secret: secret.clone(),
        ..Default::default()
    };
    let get = |key: &str| v1::GetRequest { key: key.into() };
    billing
        .send(put("billing/keys/ledger", b"v1"))
        .await
        .expect("billing writes under billing/keys/");

    let mut denied = 0.0;
    let mut refused = |result: Result<(), tonic::Status>, what: &str| {
        denied += 1.0;
        assert_error(result, Code::PermissionDenied, "permission-denied", what);
    };
    refused(
        unit(billing.send(campaign("shipping/close")).await),
        "billing campaigns outside billing/",
    );
    refused(
        unit(billing.send(put("billing/close", b"x")).await),
        "billing writes outside billing/keys/",
    );
    refused(
        unit(billing.send(get("app/config")).await),
        "billing reads outside billing/keys/",
    );
    // A key billing may write, fenced by an election it may not campaign in (the app's):
    // refused before the election is looked up, whether it exists or not, so the answer
    // says nothing about the app's elections or tokens. (Before, the key's right alone let
    // the write through to the state machine, whose stale-token answer carried the
    // election's current token.)
    for election in ["app/leader", "app/no-such-election"] {
        refused(
            unit(
                billing
                    .send(v1::PutRequest {
                        election: election.into(),
                        ..put("billing/keys/ledger", b"x")
                    })
                    .await,
            ),
            "billing writes its key fenced by another principal's election",
        );
    }
    refused(
        unit(billing.send(v1::TransferLeadershipRequest { to: 0 }).await),
        "billing moves Raft leadership",
    );

    // grafana observes and reads everything, and changes nothing.
    let leader_is = grafana
        .send(v1::LeaderRequest {
            election: "billing/close".into(),
        })
        .await
        .expect("grafana asks who leads")
        .leader
        .expect("a leader");
    assert_eq!((leader_is.session_id, leader_is.token), (session, token));
    let value = grafana
        .send(get("billing/keys/ledger"))
        .await
        .expect("grafana reads")
        .value
        .expect("the ledger");
    assert_eq!(value.value, b"v1");
    grafana
        .send(v1::StatusRequest {})
        .await
        .expect("grafana reads the status");
    refused(
        unit(grafana.send(grant()).await),
        "an observer holds a session",
    );
    refused(
        unit(grafana.send(put("billing/keys/ledger", b"v2")).await),
        "an observer writes (with the holder's session and secret)",
    );

    // The app's certificate: its own prefix, and no other.
    let app = Caller::new(c.channel_as(leader, Some(APP_CLIENT)));
    let app_session = app.send(grant()).await.expect("the app holds a session");
    app.send(v1::CampaignRequest {
        election: "app/leader".into(),
        session_id: app_session.session_id,
        session_secret: app_session.session_secret.clone(),
        ..Default::default()
    })
    .await
    .expect("the app campaigns under app/");
    refused(
        unit(
            app.send(v1::ResignRequest {
                election: "billing/close".into(),
                session_id: session,
                session_secret: secret.clone(),
                ..Default::default()
            })
            .await,
        ),
        "the app resigns billing's leadership, secret and all",
    );

    // Unknown tokens and no credentials prove nothing.
    let mut unauthenticated = 0.0;
    for (who, caller) in [
        (
            "an unknown token",
            Caller::bearer(anonymous.clone(), "tenure_0000"),
        ),
        ("no credentials", Caller::new(anonymous.clone())),
    ] {
        unauthenticated += 1.0;
        assert_error(
            caller.send(v1::StatusRequest {}).await,
            Code::Unauthenticated,
            "unauthenticated",
            who,
        );
    }

    // Nothing changed: billing still leads with its token, the ledger holds v1, and
    // shipping/close does not exist.
    let mut admin = c.client();
    assert_eq!(
        admin
            .get("billing/keys/ledger")
            .await
            .expect("get")
            .map(|v| v.value),
        Some(b"v1".to_vec())
    );
    let admin_caller = Caller::new(c.channel_as(leader, Some(ADMIN_CLIENT)));
    let leader_of = |election: &str| {
        admin_caller.send(v1::LeaderRequest {
            election: election.into(),
        })
    };
    let now = leader_of("billing/close")
        .await
        .expect("the admin asks")
        .leader
        .map(|l| (l.session_id, l.token));
    assert_eq!(now, Some((session, token)), "billing still leads");
    assert_error(
        leader_of("shipping/close").await,
        Code::NotFound,
        "unknown-election",
        "the refused campaign made no election",
    );

    // HTTP: metrics and status for observers and admins; health for everyone.
    let grafana_header = format!("Bearer {grafana_token}");
    let billing_header = format!("Bearer {billing_token}");
    for (who, client, header, path, expected) in [
        (
            "grafana's token",
            None,
            Some(grafana_header.as_str()),
            "/metrics",
            200,
        ),
        (
            "the admin's certificate",
            Some(ADMIN_CLIENT),
            None,
            "/status",
            200,
        ),
        (
            "billing's token",
            None,
            Some(billing_header.as_str()),
            "/metrics",
            403,
        ),
        (
            "the app's certificate",
            Some(APP_CLIENT),
            None,
            "/status",
            403,
        ),
        ("no credentials", None, None, "/metrics", 401),
        (
            "an unknown token",
            None,
            Some("Bearer tenure_0000"),
            "/status",
            401,
        ),
        ("no credentials", None, None, "/health", 200),
    ] {
        let (code, body) = c
            .http_get_as(leader, path, client, header)
            .await
            .expect("http");
        assert_eq!(code, expected, "GET {path} with {who}: {body}");
        match expected {
            403 => denied += 1.0,
            401 => unauthenticated += 1.0,
            _ => {}
        }
    }

    // The CLI and the library carry a token from a file (`--token-file`,
    // `$TENURE_TOKEN_FILE`, `token_file=` in the URL).
    let token_file = |name: &str, token: &str| auth.beside(name, &format!("{token}\n"));
    let grafana_file = token_file("grafana.token", grafana_token);
    let billing_file = token_file("billing.token", billing_token);
    let ca = c
        .tls()
        .expect("TLS is on")
        .dir
        .join(tenure_transport::certs::files::CA);
    let plain_url = c.url().split('?').next().expect("url").to_string();
    let leader_cli = |token: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new(tenure_binary());
        cmd.args([
            "leader",
            "--election",
            "billing/close",
            "--backend",
            &plain_url,
        ])
        .arg("--ca")
        .arg(&ca)
        .env_remove("TENURE_CERT")
        .env_remove("TENURE_KEY")
        .env_remove("TENURE_TOKEN_FILE");
        if let Some(token) = token {
            cmd.env("TENURE_TOKEN_FILE", token);
        }
        outcome(&mut cmd)
    };
    let (code, stdout, stderr) = leader_cli(Some(&grafana_file));
    assert_eq!(
        code,
        Some(0),
        "tenure leader with grafana's token: {stderr}"
    );
    assert!(stdout.contains(&format!("token={token}")), "{stdout}");
    let (code, _, stderr) = leader_cli(None);
    assert_eq!(
        code,
        Some(69),
        "tenure leader without credentials: {stderr}"
    );
    assert!(stderr.contains("authentication failed"), "{stderr}");
    // Refused twice: the client asks for the member list before its first request.
    unauthenticated += 2.0;

    let library = tenure::Client::connect(&format!(
        "{plain_url}?ca={}&token_file={}",
        ca.display(),
        billing_file.display()
    ))
    .await
    .expect("connect with billing's token");
    let observed = library.leader("billing/close").await;
    let observed = observed.expect("billing observes its election");
    assert_eq!(observed.map(|l| l.token), Some(token), "a leader");
    let e = library
        .leader("shipping/close")
        .await
        .expect_err("billing may not observe shipping/");
    assert!(
        matches!(e, tenure::Error::PermissionDenied(_)),
        "refused as PermissionDenied: {e:?}"
    );
    denied += 1.0;

    assert_eq!(
        total(&c, "tenure_permission_denied_total").await - denied_before,
        denied,
        "every denial counted"
    );
    assert_eq!(
        total(&c, "tenure_unauthenticated_total").await - unauthenticated_before,
        unauthenticated,
        "every unauthenticated request counted"
    );
    // The auth file's tokens are among the credentials no node may log.
    c.assert_logs_hold_no_credentials();
    for id in c.ids() {
        let log = c.log(id);
        assert!(
            log.contains("authorized by"),
            "node {id} says at start where its policy comes from"
        );
    }
}

/// A server refuses to start with an auth file that does not parse, and says why.
#[test]
fn a_bad_auth_file_stops_the_server_at_start() {
    let auth = AuthFile::new("[principals.ops]\nroles = [\"root\"]\n", &[]);
    let data = tempfile::tempdir().expect("tempdir");
    let path = auth.path().display().to_string();
    let data = data.path().join("data");
    let (code, _, stderr) = server_refusing_to_start(&data, &["--auth-file", &path]);
    assert_ne!(code, Some(0), "started with a bad auth file: {stderr}");
    assert!(
        stderr.contains("auth.toml") && stderr.contains("root"),
        "the error names the file and the bad role: {stderr}"
    );
}
