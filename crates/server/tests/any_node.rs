//! Reaching the cluster through any node, on real clusters with TLS and client
//! authentication on: nodes named by host name in `--node` (bound, dialed by their peers
//! and handed to clients by name), the `Members` call any authenticated client may make
//! (served from the node's membership, no log write), and the errors for an address a node
//! cannot listen on.

use std::process::Command;

use tenure_proto::v1;
use tenure_testkit::*;
use tonic::Code;

fn members(list: &v1::MembersResponse) -> Vec<(u64, String, bool)> {
    list.members
        .iter()
        .map(|m| (m.id, m.client_addr.clone(), m.voter))
        .collect()
}

/// `--node 1=localhost:P,localhost:C,localhost:H,…`: the nodes bind by name, dial their
/// peers by name (mutual TLS still checks each peer's node certificate), elect a leader,
/// commit writes, and tell clients the leader's address by its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_named_by_localhost_elects_commits_and_names_its_leader_by_name() {
    let mut c = Cluster::start(Options::nodes(3).node_host("localhost"));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(20)).await;
    let follower = c.others(&[leader])[0];
    let status = c.status_of(follower).await;
    assert_eq!(
        status.leader_addr,
        Some(format!("localhost:{}", c.addrs(leader).client.port())),
        "a follower names the leader's client address as configured: {status:?}"
    );

    // A write commits in a cluster of named nodes.
    c.client()
        .first_write("named", "named/k", b"v", secs(5))
        .await;

    let list = v1::cluster_client::ClusterClient::new(c.channel(follower))
        .members(v1::MembersRequest {})
        .await
        .expect("Members on a follower")
        .into_inner();
    let expected: Vec<(u64, String, bool)> = c
        .ids()
        .into_iter()
        .map(|id| (id, format!("localhost:{}", c.addrs(id).client.port()), true))
        .collect();
    assert_eq!(members(&list), expected);
}

/// `Members` answers any authenticated client, on any node, from the node's membership:
/// every member with its client address and voter flag, no peer address, and no entry in
/// the log however often it is asked. A client without credentials is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_answers_any_authenticated_client_without_a_log_write() {
    let c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(20)).await;
    c.wait_caught_up(leader, &c.ids(), secs(10)).await;
    let expected: Vec<(u64, String, bool)> = c
        .ids()
        .into_iter()
        .map(|id| (id, c.addrs(id).client.to_string(), true))
        .collect();
    let commit_before = c.status_of(leader).await.commit_index;
    for id in c.ids() {
        // The app's certificate: no admin or observer role, only election and key grants.
        let mut cluster =
            v1::cluster_client::ClusterClient::new(c.channel_as(id, Some(APP_CLIENT)));
        for _ in 0..50 {
            let list = cluster
                .members(v1::MembersRequest {})
                .await
                .unwrap_or_else(|s| panic!("Members on node {id}: {s:?}"))
                .into_inner();
            assert_eq!(members(&list), expected, "node {id}");
            assert!(list.members.iter().all(|m| m.peer_addr.is_empty()));
        }
    }
    assert_eq!(
        c.status_of(leader).await.commit_index,
        commit_before,
        "150 Members calls wrote to the log"
    );
    let mut anonymous = v1::cluster_client::ClusterClient::new(c.channel_as(leader, None));
    assert_error(
        anonymous.members(v1::MembersRequest {}).await,
        Code::Unauthenticated,
        "unauthenticated",
        "Members without a certificate",
    );
}

/// A node that cannot listen on one of its addresses exits at once with an error naming
/// the address, which port it is for and the flag that gave it: an address in use, a name
/// that does not resolve, a name that resolves beyond loopback with TLS off.
#[test]
fn an_address_a_node_cannot_listen_on_is_named_with_its_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let taken = taken.local_addr().expect("its address").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let free = |n: u16| format!("127.0.0.1:{}", 1 + n); // Never bound: binding fails first.
    for (spec, extra, expected) in [
        (
            format!("1={taken},{},{}", free(1), free(2)),
            None,
            format!(
                "cannot listen on {taken}, the peer address of node 1 (--node 1=PEER,CLIENT,HTTP, or nodes.1.peer in the config file): {taken} is already in use"
            ),
        ),
        (
            "1=localhost:0,no-such-host.invalid:8001,127.0.0.1:0".to_string(),
            Some("--insecure"),
            "cannot listen on no-such-host.invalid:8001, the client address of node 1".to_string(),
        ),
    ] {
        let out = Command::new(tenure_binary())
            .args(["server", "--id", "1", "--data-dir"])
            .arg(dir.path().join("node-1"))
            .args(["--node", &spec])
            .args(extra)
            .env("NO_COLOR", "1")
            .output()
            .expect("run tenure server");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{spec}: started anyway: {err}");
        assert!(err.contains(&expected), "{spec}: {err}");
        assert!(
            !dir.path().join("node-1").join("tenure-identity").exists(),
            "{spec}: the data directory was written"
        );
    }
}
