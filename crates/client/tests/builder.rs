//! A client built in code ([`tenure::Client::builder`]) against a real 3-node cluster with
//! TLS and client authentication: its CA and certificate are what the cluster sees (without
//! the certificate the same call is refused), and its timeouts are the ones it keeps (a node
//! that accepts and never answers is given up on after the attempt and request timeouts set
//! here, well before the defaults would).

use std::time::{Duration, Instant};

use tenure::{CampaignOptions, Client, Error};
use tenure_testkit::{secs, Cluster, Options, APP_CLIENT};
use tenure_transport::certs::files;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_built_in_code_speaks_as_its_certificate() {
    let c = Cluster::start(Options::nodes(3));
    c.wait_for_leader(&c.ids(), secs(10)).await;
    let dir = c.tls().expect("TLS is on").dir.clone();
    let one_node = format!("tenure://{}", c.addrs(c.ids()[0]).client);

    let client = Client::builder(&one_node)
        .ca(dir.join(files::CA))
        .identity(
            dir.join(files::client(APP_CLIENT)),
            dir.join(files::client_key(APP_CLIENT)),
        )
        .request_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect");
    let leadership = client
        .campaign("builder/nightly", b"replica-1", CampaignOptions::default())
        .await
        .expect("campaign");
    assert!(leadership.token() > 0);
    leadership
        .fenced_put("builder/keys/day", b"2026-12-07")
        .await
        .expect("a fenced write with the builder's client");
    leadership.resign().await.expect("resign");

    // The same URL and CA without the certificate: nobody the cluster knows.
    let anonymous = Client::builder(&one_node)
        .ca(dir.join(files::CA))
        .connect()
        .await
        .expect("connect");
    let Err(e) = anonymous
        .campaign("builder/nightly", b"replica-2", CampaignOptions::default())
        .await
    else {
        panic!("refused without a client certificate")
    };
    assert!(
        matches!(
            e,
            Error::AuthenticationFailed(_) | Error::PermissionDenied(_)
        ),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_answers_is_given_up_on_after_the_timeouts_set_in_code() {
    // Accepts connections and never says a word.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = silent.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let client = Client::builder(format!("tenure://{addr}"))
        .discover(false)
        .attempt_timeout(Duration::from_millis(150))
        .request_timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect");
    let started = Instant::now();
    let e = client
        .leader("builder/silent")
        .await
        .expect_err("nobody answers");
    let took = started.elapsed();
    // The defaults (2 s an attempt, 5 s a request) would take at least 2 s.
    assert!(
        took < Duration::from_millis(1500),
        "gave up after {took:?} with a 500 ms request timeout: {e:?}"
    );
    assert!(took >= Duration::from_millis(150), "{took:?}");
}
