//! Backend URLs that cannot mean what they say are refused before anything is dialed: an
//! unknown or misspelt parameter, a TLS option where there is no TLS, a missing CA, a user
//! without a password. Each gets [`Error::InvalidUrl`] with a reason, and neither the reason
//! nor the URL in it shows the password.
//!
//! Every URL points at 127.0.0.1:1, where nothing listens: a URL that got past the checks
//! would fail differently (unavailable), so these tests need no server.

use std::path::Path;

use tenure::{Client, Error};

const PASSWORD: &str = "pw-not-to-show";

fn certs(dir: &Path) -> (String, String, String) {
    use tenure_transport::certs::{files, issue, CertsRequest};
    issue(
        dir,
        &CertsRequest {
            cluster_id: "tenure".into(),
            nodes: Vec::new(),
            clients: vec!["app".into()],
            hosts: Vec::new(),
            days: 1,
        },
    )
    .expect("issue certificates");
    let path = |name: &str| dir.join(name).display().to_string();
    (
        path(files::CA),
        path(&files::client("app")),
        path(&files::client_key("app")),
    )
}

#[tokio::test]
async fn bad_backend_urls_are_refused_with_a_reason_before_anything_is_dialed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ca, cert, key) = certs(&dir.path().join("certs"));
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "not a certificate\n").expect("write a file");
    let not_pem = not_pem.display();
    let missing = dir.path().join("missing.pem");
    let missing = missing.display();
    let pg = format!("postgres://app:{PASSWORD}@127.0.0.1:1/db");
    let cases: Vec<(String, &str)> = vec![
        // etcd
        (
            format!("etcds://app:{PASSWORD}@127.0.0.1:1"),
            "etcds:// needs ca=FILE",
        ),
        (
            format!("etcds://app:{PASSWORD}@127.0.0.1:1?ca={missing}"),
            "cannot read the ca file",
        ),
        (
            format!("etcds://app:{PASSWORD}@127.0.0.1:1?ca={not_pem}"),
            "holds no PEM certificate",
        ),
        (
            format!("etcds://app:{PASSWORD}@127.0.0.1:1?ca={ca}&cert={cert}"),
            "cert and key go together",
        ),
        (
            format!("etcds://app:{PASSWORD}@127.0.0.1:1?ca={ca}&cert={ca}&key={ca}"),
            "holds no PEM private key",
        ),
        (
            format!("etcds://app:{PASSWORD}@127.0.0.1:1?ca={ca}&cert={cert}&key={key}&cacert=x"),
            "unknown query parameter \"cacert\" (known: ca, cert, key)",
        ),
        (
            format!("etcd://app:{PASSWORD}@127.0.0.1:1?ca={ca}"),
            "ca= is a TLS parameter, and etcd:// is plaintext: use etcds://",
        ),
        (
            format!("etcd://app:{PASSWORD}@127.0.0.1:1?tls=1"),
            "unknown query parameter \"tls\"",
        ),
        ("etcd://app@127.0.0.1:1".into(), "has no password"),
        (
            format!("etcd://app:{PASSWORD}@127.0.0.1:1/prefix"),
            "no path after the hosts",
        ),
        (
            format!("etcds://app:{PASSWORD}@127.0.0.1:1?ca={ca}&ca={ca}"),
            "given twice",
        ),
        // PostgreSQL
        (
            format!("{pg}?sslmode=verify-full"),
            "sslmode=verify-full needs sslrootcert=FILE",
        ),
        (
            format!("{pg}?sslmode=verify-ca"),
            "sslmode=verify-ca needs sslrootcert=FILE",
        ),
        (
            format!("{pg}?sslmode=allow"),
            "sslmode=allow is not supported",
        ),
        (format!("{pg}?sslmode=verify"), "unknown sslmode \"verify\""),
        (format!("{pg}?sslrootcert={ca}"), "TLS is off"),
        (
            format!("{pg}?sslmode=disable&sslrootcert={ca}"),
            "TLS is off",
        ),
        (
            format!("{pg}?sslmode=verify-full&sslrootcert=system"),
            "sslrootcert=system",
        ),
        (
            format!("{pg}?sslmode=verify-full&sslrootcert={not_pem}"),
            "holds no PEM certificate",
        ),
        (
            format!("{pg}?sslmode=require&sslmode=disable"),
            "given twice",
        ),
        (
            format!("{pg}?sslmode=require&sslcert={cert}&sslkey={key}"),
            "unknown option `sslcert`",
        ),
        (format!("{pg}?sslmod=require"), "unknown option `sslmod`"),
        // ZooKeeper
        (
            format!("zk://app:{PASSWORD}@127.0.0.1:1?acl=open"),
            "unknown query parameter \"acl\" (this URL takes none)",
        ),
        ("zk://app@127.0.0.1:1".into(), "has no password"),
        (
            format!("zk://:{PASSWORD}@127.0.0.1:1"),
            "user name before '@' is empty",
        ),
    ];
    for (url, why) in cases {
        let started = std::time::Instant::now();
        let err = Client::connect(&url)
            .await
            .expect_err(&format!("{} was accepted", tenure::redact_url(&url)));
        let shown = format!("{err} / {err:?}");
        assert!(!shown.contains(PASSWORD), "the password shows: {shown}");
        match err {
            Error::InvalidUrl {
                url: named,
                why: got,
            } => {
                assert!(got.contains(why), "{named}: {got:?} does not say {why:?}");
                assert_eq!(named, tenure::redact_url(&url));
            }
            other => panic!("{}: {other:?}", tenure::redact_url(&url)),
        }
        assert!(
            started.elapsed() < std::time::Duration::from_millis(500),
            "{}: refused only after {:?}: it dialed",
            tenure::redact_url(&url),
            started.elapsed()
        );
    }
}

/// The control: the same checks let good URLs through to dialing, where 127.0.0.1:1 does
/// not answer. (Without it, the test above would pass for a client that refused everything.)
#[tokio::test]
async fn good_urls_get_past_the_checks() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ca, cert, key) = certs(&dir.path().join("certs"));
    for url in [
        format!("etcds://app:{PASSWORD}@127.0.0.1:1?ca={ca}&cert={cert}&key={key}"),
        format!("postgres://app:{PASSWORD}@127.0.0.1:1/db?sslmode=verify-full&sslrootcert={ca}"),
        format!("postgres://app:{PASSWORD}@127.0.0.1:1/db?sslmode=require&connect_timeout=1"),
        format!("zk://app:{PASSWORD}@127.0.0.1:1/chroot"),
    ] {
        let r = tokio::time::timeout(std::time::Duration::from_secs(10), Client::connect(&url))
            .await
            .unwrap_or_else(|_| panic!("{} hangs", tenure::redact_url(&url)));
        let err = match r {
            // etcd dials lazily without a user; with one it authenticates at once.
            Ok(c) => c.leader("x").await.expect_err("nothing listens"),
            Err(e) => e,
        };
        assert!(
            matches!(err, Error::Unavailable(_)),
            "{}: {err:?}",
            tenure::redact_url(&url)
        );
        assert!(!format!("{err:?}").contains(PASSWORD));
    }
}
