//! The peer port's attack, before and after mutual TLS, on real clusters: a stranger on the
//! network connects to a follower's peer port, says hello as the Raft leader and sends
//! forged frames — `TimeoutNow` (which forces an election), and an AppendEntries of a
//! higher term carrying a membership that keeps only the follower.
//!
//! On a plaintext cluster (loopback, where plaintext is still allowed) the forgery works:
//! the follower starts elections and the term moves. With TLS on (the harness's default)
//! the same bytes, and the same frames inside a TLS session with a certificate from another
//! CA, are refused before any frame is read: term, commit index and voters stay as they
//! were, and the node logs why.

use std::collections::BTreeSet;

use tenure_core::message::{Body, Message};
use tenure_core::types::{Entry, Membership, Payload};
use tenure_testkit::*;
use tenure_transport::codec::{encode_hello, Hello, PROTOCOL_VERSION};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// The forged bytes: a hello claiming to be `leader`, a burst of `TimeoutNow` and an
/// AppendEntries of term `term + 5` that would make `follower` the only voter.
fn forged(leader: u64, follower: u64, term: u64, commit: u64) -> Vec<u8> {
    let mut bytes = encode_hello(&Hello {
        cluster_id: CLUSTER_ID.into(),
        node_id: leader,
        protocol_version: PROTOCOL_VERSION,
    })
    .expect("hello encodes");
    for _ in 0..5 {
        let m = Message {
            from: leader,
            to: follower,
            term,
            body: Body::TimeoutNow,
        };
        bytes.extend(tenure_transport::encode_frame(&m).expect("encodes"));
    }
    let membership = Membership {
        voters: BTreeSet::from([follower]),
        voters_outgoing: BTreeSet::new(),
        learners: BTreeSet::new(),
    };
    let m = Message {
        from: leader,
        to: follower,
        term: term + 5,
        body: Body::AppendEntries {
            prev_log_index: commit,
            prev_log_term: term,
            entries: vec![Entry {
                term: term + 5,
                index: commit + 1,
                payload: Payload::Membership(membership),
            }],
            leader_commit: commit + 1,
            sent_tick: 0,
        },
    };
    bytes.extend(tenure_transport::encode_frame(&m).expect("encodes"));
    bytes
}

/// Writes `bytes` and waits (bounded) for the node to close the connection.
async fn send_and_wait_close<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, bytes: &[u8]) {
    let _ = s.write_all(bytes).await;
    let _ = s.flush().await;
    closed_within(&mut s, secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_peer_frames_move_a_plaintext_cluster_but_not_a_tls_one() {
    // ---- Before: plaintext. The forgery reaches Raft.
    {
        let c = Cluster::start(Options::nodes(3).plaintext());
        let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
        let follower = c.others(&[leader])[0];
        let commit = c.status_of(follower).await.commit_index;
        let stream = tokio::net::TcpStream::connect(c.addrs(follower).peer)
            .await
            .expect("connect");
        // A plaintext node keeps the connection open; do not wait for a close.
        let mut stream = stream;
        stream
            .write_all(&forged(leader, follower, term, commit))
            .await
            .expect("write");
        c.wait_status(
            follower,
            secs(5),
            "the forged frames to move the term",
            |s| s.term > term,
        )
        .await;
        drop(stream);
    }

    // ---- After: TLS on. The same bytes, then the same frames over TLS with a stranger's
    // certificate.
    let c = Cluster::start(Options::nodes(3));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];
    c.wait_caught_up(leader, &c.ids(), secs(10)).await;
    let before = c.status_of(follower).await;
    let bytes = forged(leader, follower, term, before.commit_index);
    let peer = c.addrs(follower).peer;

    let plain = tokio::net::TcpStream::connect(peer).await.expect("connect");
    send_and_wait_close(plain, &bytes).await;

    let stranger = tempfile::tempdir().expect("tempdir");
    tenure_transport::certs::issue(
        stranger.path(),
        &tenure_transport::certs::CertsRequest {
            cluster_id: CLUSTER_ID.into(),
            nodes: vec![leader],
            clients: Vec::new(),
            hosts: Vec::new(),
            days: 1,
        },
    )
    .expect("a stranger's CA and a certificate naming the leader");
    use tenure_transport::certs::files;
    // The stranger trusts the real CA (so the client side finishes) but presents its own.
    let cert = stranger.path().join(files::node(leader));
    let key = stranger.path().join(files::node_key(leader));
    if let Ok(tls) = tls_to_peer(&c, follower, cert, key).await {
        send_and_wait_close(tls, &bytes).await;
    }

    // Give a forgery that got through time to act: five TimeoutNow frames would have
    // started an election at once.
    tokio::time::sleep(ms(500)).await;
    let after = c.status_of(follower).await;
    assert_eq!(after.term, before.term, "the term moved: {after:?}");
    assert_eq!(after.voters, before.voters, "the voters changed: {after:?}");
    assert_eq!(
        after.leader, leader,
        "the follower lost its leader: {after:?}"
    );
    assert!(
        after.commit_index >= before.commit_index,
        "commit index went back: {after:?}"
    );
    let log = c.log(follower);
    let refusals = log
        .lines()
        .filter(|l| l.contains("closing inbound connection: handshake failed") && l.contains("TLS"))
        .count();
    assert!(
        refusals >= 2,
        "expected two TLS refusals in node {follower}'s log, found {refusals}"
    );
    // The cluster still works.
    let (l2, t2) = c.wait_for_leader(&c.ids(), secs(5)).await;
    assert_eq!((l2, t2), (leader, term));
}

/// The CLI reaches a TLS cluster with the CA and a client certificate from the URL, the
/// environment or the flags, and fails as a backend failure (exit 69) without the CA, or
/// with the CA but no certificate (the default policy authenticates every client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_speaks_tls_with_the_ca_and_fails_cleanly_without_it() {
    let c = Cluster::start(Options::nodes(3));
    c.wait_for_leader(&c.ids(), secs(10)).await;
    let run = |url: &str, env: &[(&str, String)]| {
        outcome(
            std::process::Command::new(tenure_binary())
                .args(["run", "--election", "tls-check", "--backend", url])
                .args(["--", "sh", "-c", "echo token=$TENURE_FENCING_TOKEN"])
                .env_remove("TENURE_CA")
                .env_remove("TENURE_CERT")
                .env_remove("TENURE_KEY")
                .envs(env.iter().map(|(k, v)| (*k, v.as_str()))),
        )
    };
    let (code, stdout, stderr) = run(&c.url(), &[]);
    assert_eq!(code, Some(0), "with the URL's TLS files: {stdout} {stderr}");
    assert!(stdout.contains("token="), "{stdout}");

    let plain_url = c.url().split('?').next().expect("url").to_string();
    let ca = c
        .tls()
        .expect("TLS is on")
        .dir
        .join(tenure_transport::certs::files::CA)
        .display()
        .to_string();
    let dir = &c.tls().expect("TLS is on").dir;
    let file = |name: String| dir.join(name).display().to_string();
    use tenure_transport::certs::files;
    let (code, stdout, stderr) = run(
        &plain_url,
        &[
            ("TENURE_CA", ca.clone()),
            ("TENURE_CERT", file(files::client(APP_CLIENT))),
            ("TENURE_KEY", file(files::client_key(APP_CLIENT))),
        ],
    );
    assert_eq!(
        code,
        Some(0),
        "with $TENURE_CA, $TENURE_CERT, $TENURE_KEY: {stdout} {stderr}"
    );

    // The CA alone reaches the cluster, but proves nobody: the default policy refuses.
    let (code, _, stderr) = run(&plain_url, &[("TENURE_CA", ca)]);
    assert_eq!(code, Some(69), "with the CA and no certificate: {stderr}");
    assert!(stderr.contains("authentication failed"), "{stderr}");

    let (code, _, stderr) = run(&plain_url, &[]);
    assert_eq!(code, Some(69), "without the CA: {stderr}");

    // The flags, with a client certificate.
    let (code, _, stderr) = outcome(
        std::process::Command::new(tenure_binary())
            .args(["leader", "--election", "tls-check", "--backend", &plain_url])
            .arg("--ca")
            .arg(dir.join(files::CA))
            .arg("--cert")
            .arg(dir.join(files::client(APP_CLIENT)))
            .arg("--key")
            .arg(dir.join(files::client_key(APP_CLIENT)))
            .env_remove("TENURE_CA"),
    );
    assert_eq!(
        code,
        Some(0),
        "tenure leader with --ca/--cert/--key: {stderr}"
    );
}

/// A TLS session with node `to`'s peer port presenting `cert` and `key`, trusting the
/// cluster's CA and expecting `to`'s node name.
async fn tls_to_peer(
    c: &Cluster,
    to: u64,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use tenure_transport::certs::files;
    let material = tenure_transport::TlsMaterial::load(&tenure_transport::TlsFiles {
        ca: c.tls().expect("TLS is on").dir.join(files::CA),
        cert,
        key,
    })
    .expect("material");
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        material.client_config().expect("client config"),
    ));
    let tcp = tokio::net::TcpStream::connect(c.addrs(to).peer).await?;
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(tenure_transport::node_name(
        CLUSTER_ID, to,
    ))
    .expect("name");
    connector.connect(name, tcp).await
}

/// A certificate signed by the cluster's own CA (its key is in the harness's TLS directory)
/// with `names` and the extended key usages `usages`.
fn signed_by_the_cluster_ca(
    c: &Cluster,
    names: &[&str],
    usages: Vec<rcgen::ExtendedKeyUsagePurpose>,
) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    use tenure_transport::certs::files;
    let dir = &c.tls().expect("TLS is on").dir;
    let ca_key = rcgen::KeyPair::from_pem(
        &std::fs::read_to_string(dir.join(files::CA_KEY)).expect("the CA's key"),
    )
    .expect("a key");
    // The issuer as `tenure certs` made it: its subject is only this common name.
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("tenure CA for cluster {CLUSTER_ID}"),
    );
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let mut params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("names");
    params.extended_key_usages = usages;
    params.use_authority_key_identifier_extension = true;
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = params.signed_by(&key, &issuer).expect("signed");
    let out = tempfile::tempdir().expect("tempdir");
    let (cert_path, key_path) = (out.path().join("cert.pem"), out.path().join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).expect("write");
    std::fs::write(&key_path, key.serialize_pem()).expect("write");
    (out, cert_path, key_path)
}

/// A peer is a node certificate, exactly: signed by the cluster's own CA, a wildcard that
/// matches every node's name, and a client-only certificate that names the leader, are each
/// refused on a follower's peer port, and the forged frames change nothing. (Before, either
/// was accepted as the leader, and a forged AppendEntries left a follower diverged.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_or_client_only_certificate_cannot_speak_as_a_node() {
    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
    let c = Cluster::start(Options::nodes(3));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];
    c.wait_caught_up(leader, &c.ids(), secs(10)).await;
    let before = c.status_of(follower).await;
    let bytes = forged(leader, follower, term, before.commit_index);
    let leader_name = tenure_transport::node_name(CLUSTER_ID, leader);
    let wildcard = format!("*.{CLUSTER_ID}.tenure");
    for (what, names, usages) in [
        (
            "a wildcard",
            vec![wildcard.as_str()],
            vec![ServerAuth, ClientAuth],
        ),
        ("client-only", vec![leader_name.as_str()], vec![ClientAuth]),
    ] {
        let (_dir, cert, key) = signed_by_the_cluster_ca(&c, &names, usages);
        let tls = tls_to_peer(&c, follower, cert, key)
            .await
            .unwrap_or_else(|e| panic!("{what}: the TLS handshake itself succeeds: {e}"));
        send_and_wait_close(tls, &bytes).await;
    }
    tokio::time::sleep(ms(500)).await;
    let after = c.status_of(follower).await;
    assert_eq!(after.term, before.term, "the term moved: {after:?}");
    assert_eq!(after.voters, before.voters, "the voters changed: {after:?}");
    let log = c.log(follower);
    for why in ["does not name", "not a node certificate"] {
        assert!(
            log.lines()
                .any(|l| l.contains("handshake failed") && l.contains(why)),
            "no refusal saying {why:?} in node {follower}'s log"
        );
    }
    assert_eq!(c.wait_for_leader(&c.ids(), secs(5)).await, (leader, term));
}
