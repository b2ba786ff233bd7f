//! [`tenure::Client::from_env`] finds the cluster and its credentials where the `tenure`
//! command does: `$TENURE_BACKEND`, `$TENURE_CA`, `$TENURE_CERT`, `$TENURE_KEY`. One test
//! in its own binary, because it sets the process's environment.

use tenure::{CampaignOptions, Client};
use tenure_testkit::{secs, Cluster, Options, APP_CLIENT};
use tenure_transport::certs::files;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_env_reads_the_backend_and_the_tls_files_from_the_environment() {
    let c = Cluster::start(Options::nodes(3));
    c.wait_for_leader(&c.ids(), secs(10)).await;
    let dir = c.tls().expect("TLS is on").dir.clone();
    std::env::set_var(
        "TENURE_BACKEND",
        format!("tenure://{}", c.addrs(c.ids()[1]).client),
    );
    std::env::set_var("TENURE_CA", dir.join(files::CA));
    std::env::set_var("TENURE_CERT", dir.join(files::client(APP_CLIENT)));
    std::env::set_var("TENURE_KEY", dir.join(files::client_key(APP_CLIENT)));
    let client = Client::from_env().await.expect("connect");
    let leadership = client
        .campaign("env/nightly", b"replica-1", CampaignOptions::default())
        .await
        .expect("campaign with the environment's certificate");
    assert!(leadership.token() > 0);
    leadership.resign().await.expect("resign");

    // Without $TENURE_CERT and $TENURE_KEY the cluster does not know the client.
    std::env::remove_var("TENURE_CERT");
    std::env::remove_var("TENURE_KEY");
    let anonymous = Client::from_env().await.expect("connect");
    let Err(e) = anonymous
        .campaign("env/nightly", b"replica-2", CampaignOptions::default())
        .await
    else {
        panic!("refused without a client certificate")
    };
    assert!(matches!(e, tenure::Error::AuthenticationFailed(_)), "{e:?}");
}
