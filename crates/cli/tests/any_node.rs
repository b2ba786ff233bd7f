//! The CLI reaches the cluster through any node: `tenure campaign` and `tenure leader`
//! with a `--backend` URL naming only node 1 while node 2 leads, and against a cluster whose
//! `--node` flags and URL name the nodes `localhost`. Real 3-node clusters from the
//! workspace's harness (`tenure-testkit`), TLS and client authentication on.

mod common;

use tenure_testkit::{secs, Cluster, Options};

use common::{leader, query_of, Campaign};

/// A `tenure://` URL naming only `host` (node 1's client port), with the cluster's TLS files.
fn url_for(c: &Cluster, host: &str) -> String {
    let query = query_of(&c.url());
    format!("tenure://{host}:{}{query}", c.addrs(1).client.port())
}

/// Campaign, read the leader, and stop the holder (SIGTERM: it resigns and exits 0).
fn campaign_and_read_the_leader(url: &str, election: &str) {
    let (mut holder, token, _) = Campaign::new(url, election, "holder-a").ttl("5s").start();
    let shown = leader(url, election);
    assert!(
        shown.contains(&format!("token={token}")) && shown.contains("value=holder-a"),
        "tenure leader printed {shown:?}, holder has token {token}"
    );
    let status = holder.stop(secs(20));
    assert_eq!(status.code(), Some(0), "tenure campaign after SIGTERM");
}

/// The README's setup with node 2 leading: a URL naming only node 1 works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_and_leader_work_with_only_node_1_in_the_url_while_node_2_leads() {
    let mut c = Cluster::start(Options::nodes(3));
    c.move_leadership(2, secs(20)).await;
    let url = url_for(&c, "127.0.0.1");
    tokio::task::spawn_blocking(move || campaign_and_read_the_leader(&url, "only-node-1"))
        .await
        .expect("the CLI checks ran");
    assert!(c.status_of(2).await.is_leader(), "node 2 led throughout");
}

/// `--node ID=localhost:P,localhost:C,localhost:H` on every server, `tenure://localhost:P`
/// in the URL (TLS checks the name `localhost` in the node certificates), node 3 leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_and_leader_work_against_nodes_named_localhost() {
    let mut c = Cluster::start(Options::nodes(3).node_host("localhost"));
    c.move_leadership(3, secs(20)).await;
    let url = url_for(&c, "localhost");
    tokio::task::spawn_blocking(move || campaign_and_read_the_leader(&url, "named"))
        .await
        .expect("the CLI checks ran");
}
