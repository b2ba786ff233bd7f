//! Roles and grants, on a real cluster with TLS and an auth file: each principal does what
//! its roles and prefix grants allow and nothing else. Bearer tokens and client
//! certificates both authenticate; an unknown token or no credentials at all is
//! UNAUTHENTICATED (`unauthenticated`), a known principal without the right is
//! PERMISSION_DENIED (`permission-denied`); every refusal is counted, changes nothing, and
//! no token appears in any node's log. On the HTTP port, `/metrics` and `/status` are for
//! observers and admins; `/health` is open.

use tenure_proto::v1;
use tenure_testkit::*;
use tonic::{Code, Request};

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

[tokens]
billing = "BILLING"
grafana = "GRAFANA"
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
fn unit<T>(result: Result<tonic::Response<T>, tonic::Status>) -> Result<(), tonic::Status> {
    result.map(|_| ())
}

/// `message` with `authorization: Bearer <token>`.
fn bearer<T>(token: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ascii header"),
    );
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_do_what_their_grants_allow_and_nothing_else() {
    let billing_token = tenure_server::auth::new_token().expect("token");
    let grafana_token = tenure_server::auth::new_token().expect("token");
    let files = tempfile::tempdir().expect("tempdir");
    let auth_file = files.path().join("auth.toml");
    std::fs::write(
        &auth_file,
        AUTH_FILE
            .replace(
                "\"BILLING\"",
                &format!("{:?}", tenure_server::auth::token_hash_line(&billing_token)),
            )
            .replace(
                "\"GRAFANA\"",
                &format!("{:?}", tenure_server::auth::token_hash_line(&grafana_token)),
            ),
    )
    .expect("write the auth file");
    let path = auth_file.display().to_string();
    let mut c = Cluster::start(Options::nodes(3).args(&["--auth-file", &path]));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let denied_before = total(&c, "tenure_permission_denied_total").await;
    let unauthenticated_before = total(&c, "tenure_unauthenticated_total").await;

    // No client certificate on this channel: the tokens are the only credentials.
    let anonymous = c.channel_as(leader, None);
    let mut sessions = v1::sessions_client::SessionsClient::new(anonymous.clone());
    let mut elections = v1::elections_client::ElectionsClient::new(anonymous.clone());
    let mut keys = v1::fenced_keys_client::FencedKeysClient::new(anonymous.clone());
    let mut cluster = v1::cluster_client::ClusterClient::new(anonymous.clone());

    // billing campaigns under billing/ and writes under billing/keys/.
    let granted = sessions
        .grant(bearer(
            &billing_token,
            v1::GrantRequest {
                ttl_ms: 60_000,
                ..Default::default()
            },
        ))
        .await
        .expect("billing holds a session")
        .into_inner();
    let (session, secret) = (granted.session_id, granted.session_secret);
    let token = elections
        .campaign(bearer(
            &billing_token,
            v1::CampaignRequest {
                election: "billing/close".into(),
                session_id: session,
                session_secret: secret.clone(),
                value: b"replica-1".to_vec(),
                ..Default::default()
            },
        ))
        .await
        .expect("billing campaigns under billing/")
        .into_inner()
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
    keys.put(bearer(&billing_token, put("billing/keys/ledger", b"v1")))
        .await
        .expect("billing writes under billing/keys/");

    let mut denied = 0.0;
    let mut refused = |result: Result<(), tonic::Status>, what: &str| {
        denied += 1.0;
        assert_error(result, Code::PermissionDenied, "permission-denied", what);
    };
    refused(
        unit(
            elections
                .campaign(bearer(
                    &billing_token,
                    v1::CampaignRequest {
                        election: "shipping/close".into(),
                        session_id: session,
                        session_secret: secret.clone(),
                        ..Default::default()
                    },
                ))
                .await,
        ),
        "billing campaigns outside billing/",
    );
    refused(
        unit(
            keys.put(bearer(&billing_token, put("billing/close", b"x")))
                .await,
        ),
        "billing writes outside billing/keys/",
    );
    refused(
        unit(
            keys.get(bearer(
                &billing_token,
                v1::GetRequest {
                    key: "app/config".into(),
                },
            ))
            .await,
        ),
        "billing reads outside billing/keys/",
    );
    refused(
        unit(
            cluster
                .transfer_leadership(bearer(
                    &billing_token,
                    v1::TransferLeadershipRequest { to: 0 },
                ))
                .await,
        ),
        "billing moves Raft leadership",
    );

    // grafana observes and reads everything, and changes nothing.
    let leader_is = elections
        .leader(bearer(
            &grafana_token,
            v1::LeaderRequest {
                election: "billing/close".into(),
            },
        ))
        .await
        .expect("grafana asks who leads")
        .into_inner()
        .leader
        .expect("a leader");
    assert_eq!((leader_is.session_id, leader_is.token), (session, token));
    let value = keys
        .get(bearer(
            &grafana_token,
            v1::GetRequest {
                key: "billing/keys/ledger".into(),
            },
        ))
        .await
        .expect("grafana reads")
        .into_inner()
        .value
        .expect("the ledger");
    assert_eq!(value.value, b"v1");
    cluster
        .status(bearer(&grafana_token, v1::StatusRequest {}))
        .await
        .expect("grafana reads the status");
    refused(
        unit(
            sessions
                .grant(bearer(
                    &grafana_token,
                    v1::GrantRequest {
                        ttl_ms: 60_000,
                        ..Default::default()
                    },
                ))
                .await,
        ),
        "an observer holds a session",
    );
    refused(
        unit(
            keys.put(bearer(&grafana_token, put("billing/keys/ledger", b"v2")))
                .await,
        ),
        "an observer writes (with the holder's session and secret)",
    );

    // The app's certificate: its own prefix, and no other.
    let app = c.channel_as(leader, Some(APP_CLIENT));
    let mut app_sessions = v1::sessions_client::SessionsClient::new(app.clone());
    let mut app_elections = v1::elections_client::ElectionsClient::new(app.clone());
    let app_session = app_sessions
        .grant(v1::GrantRequest {
            ttl_ms: 60_000,
            ..Default::default()
        })
        .await
        .expect("the app holds a session")
        .into_inner();
    app_elections
        .campaign(v1::CampaignRequest {
            election: "app/leader".into(),
            session_id: app_session.session_id,
            session_secret: app_session.session_secret.clone(),
            ..Default::default()
        })
        .await
        .expect("the app campaigns under app/");
    refused(
        unit(
            app_elections
                .resign(v1::ResignRequest {
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
    for (who, request) in [
        (
            "an unknown token",
            bearer("tenure_0000", v1::StatusRequest {}),
        ),
        ("no credentials", Request::new(v1::StatusRequest {})),
    ] {
        unauthenticated += 1.0;
        assert_error(
            cluster.status(request).await,
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
    let mut admin_elections =
        v1::elections_client::ElectionsClient::new(c.channel_as(leader, Some(ADMIN_CLIENT)));
    let now = admin_elections
        .leader(v1::LeaderRequest {
            election: "billing/close".into(),
        })
        .await
        .expect("the admin asks")
        .into_inner()
        .leader
        .map(|l| (l.session_id, l.token));
    assert_eq!(now, Some((session, token)), "billing still leads");
    assert_error(
        admin_elections
            .leader(v1::LeaderRequest {
                election: "shipping/close".into(),
            })
            .await,
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
    let token_file = |name: &str, token: &str| {
        let path = files.path().join(name);
        std::fs::write(&path, format!("{token}\n")).expect("write a token file");
        path
    };
    let grafana_file = token_file("grafana.token", &grafana_token);
    let billing_file = token_file("billing.token", &billing_token);
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
        let out = cmd.output().expect("run tenure leader");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
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
    let lib_leader = library
        .leader("billing/close")
        .await
        .expect("billing observes its election")
        .expect("a leader");
    assert_eq!(lib_leader.token, token);
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
    c.forbid_in_logs(&billing_token);
    c.forbid_in_logs(&grafana_token);
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
    let files = tempfile::tempdir().expect("tempdir");
    let auth_file = files.path().join("auth.toml");
    std::fs::write(&auth_file, "[principals.ops]\nroles = [\"root\"]\n").expect("write");
    let out = std::process::Command::new(tenure_binary())
        .args([
            "server",
            "--id",
            "1",
            "--node",
            "1=127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
        ])
        .arg("--data-dir")
        .arg(files.path().join("data"))
        .arg("--auth-file")
        .arg(&auth_file)
        .output()
        .expect("run tenure server");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started with a bad auth file: {stderr}"
    );
    assert!(
        stderr.contains("auth.toml") && stderr.contains("root"),
        "the error names the file and the bad role: {stderr}"
    );
}
