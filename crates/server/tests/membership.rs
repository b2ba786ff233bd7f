//! Membership changes on a running cluster, without restarting any process: nodes 4 and 5
//! are started with `--join` and added with their addresses (`AddMember`), which travel in
//! the replicated member directory, so the running nodes — whose `--node` flags never named
//! them — dial them; then promoted through joint consensus; then removed again. Writers keep
//! writing the whole time and must see no error, and every acknowledged write must be
//! readable at the end.

use std::time::{Duration, Instant};

use tenure_proto::v1;
use tenure_testkit::*;

fn member_request(id: u64, a: NodeAddrs, voter: bool) -> v1::MemberRequest {
    v1::MemberRequest {
        id,
        voter,
        peer_addr: a.peer.to_string(),
        client_addr: a.client.to_string(),
        http_addr: a.http.to_string(),
    }
}

/// Waits until `id` applies the leader's commit index as of now, and says how long it took.
async fn caught_up(c: &Cluster, leader: u64, id: u64) -> Duration {
    let start = Instant::now();
    c.wait_caught_up(leader, &[id], secs(20)).await;
    start.elapsed()
}

/// Awaits `change` (`what`), which must succeed, and adds how long it took to `timings`.
async fn timed<T>(
    timings: &mut Vec<(String, Duration)>,
    what: String,
    change: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> T {
    let start = Instant::now();
    let answer = change
        .await
        .unwrap_or_else(|e| panic!("{what}: {e:?}"))
        .into_inner();
    timings.push((what, start.elapsed()));
    answer
}

async fn voters_everywhere(c: &Cluster, ids: &[u64], voters: &[u64]) {
    for id in ids {
        c.wait_status(*id, secs(10), &format!("voters {voters:?}"), |s| {
            s.voters == voters
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_grow_from_three_to_five_and_back_without_a_restart_under_writes() {
    let mut c = Cluster::start(Options::nodes(3).fault_injection());
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let workload = Writers::start(&mut c, &[1, 2, 3], 3).await;
    workload.go_on("writes before the change").await;
    let mut admin = v1::cluster_client::ClusterClient::new(c.channel(leader));
    let mut timings = Vec::new();

    for id in [4, 5] {
        let addrs = c.add_joining_node(id);
        let add = admin.add_member(member_request(id, addrs, false));
        let members = timed(&mut timings, format!("add node {id} (learner)"), add)
            .await
            .members;
        let added = members
            .iter()
            .find(|m| m.id == id)
            .expect("the new member is listed");
        assert!(!added.voter);
        assert_eq!(added.client_addr, addrs.client.to_string());
        assert_eq!(added.peer_addr, addrs.peer.to_string());
        // The leader, which was never told its address on the command line, replicates to it.
        timings.push((
            format!("node {id} catches up"),
            caught_up(&c, leader, id).await,
        ));
        let promote = admin.promote_member(v1::PromoteMemberRequest { id });
        timed(&mut timings, format!("promote node {id}"), promote).await;
        workload
            .go_on(&format!("writes after adding node {id}"))
            .await;
    }
    let five = [1, 2, 3, 4, 5];
    voters_everywhere(&c, &five, &five).await;
    // Every process is the one started at first: nothing was restarted.
    for id in five {
        assert!(c.is_running(id));
    }
    // The new voters count: with two of the original three cut off from the leader, the
    // leader still commits, through nodes 4 and 5.
    let cut: Vec<u64> = c.others(&[leader, 4, 5]);
    for id in &cut {
        c.block(*id, &five).await;
    }
    workload
        .go_on("writes with two original nodes cut off")
        .await;
    for id in &cut {
        c.block(*id, &[]).await;
    }
    // Members added at run time are listed with their addresses by every node.
    let members = v1::cluster_client::ClusterClient::new(c.channel(cut[0]))
        .members(v1::MembersRequest {})
        .await
        .expect("members")
        .into_inner()
        .members;
    for id in [4, 5] {
        let m = members.iter().find(|m| m.id == id).expect("listed");
        assert_eq!(m.client_addr, c.addrs(id).client.to_string());
    }

    // An original node restarted with its original flags (which never named nodes 4 and 5)
    // finds them again from its recovered log and snapshot, and connects to them.
    let restarted = cut[1];
    c.kill(restarted);
    c.start_node(restarted);
    c.wait_caught_up(leader, &[restarted], secs(20)).await;
    for id in [4, 5] {
        let connected = format!("tenure_peer_connected{{peer=\"{id}\"}}");
        let deadline = Instant::now() + secs(10);
        while metric_value(&c.metrics(restarted).await, &connected) != Some(1.0) {
            assert!(
                Instant::now() < deadline,
                "node {restarted}, restarted, is not connected to node {id}"
            );
            tokio::time::sleep(ms(20)).await;
        }
    }

    for id in [5, 4] {
        let remove = admin.remove_member(v1::MemberRequest {
            id,
            ..Default::default()
        });
        timed(&mut timings, format!("remove node {id}"), remove).await;
        workload
            .go_on(&format!("writes after removing node {id}"))
            .await;
    }
    let three = [1, 2, 3];
    voters_everywhere(&c, &three, &three).await;

    let (acked, errors) = workload.stop().await;
    assert!(errors.is_empty(), "clients saw errors: {errors:#?}");
    let client = c.client_for(&three);
    let missing = missing_keys(&client, &acked).await;
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    for (what, took) in &timings {
        println!("membership timing: {what}: {took:?}");
    }
    println!(
        "membership: {} writes acknowledged, none failed",
        acked.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_member_requests_are_refused_and_change_nothing() {
    let mut c = Cluster::start(Options::nodes(3));
    let (leader, _) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let before = c.status_of(leader).await;
    let mut admin = v1::cluster_client::ClusterClient::new(c.channel(leader));
    let good = |id| v1::MemberRequest {
        id,
        voter: false,
        peer_addr: "127.0.0.1:1".into(),
        client_addr: "127.0.0.1:2".into(),
        http_addr: "127.0.0.1:3".into(),
    };
    let cases = [
        ("node id 0", v1::MemberRequest { id: 0, ..good(0) }),
        (
            "no addresses for an unknown node",
            v1::MemberRequest {
                id: 7,
                ..Default::default()
            },
        ),
        (
            "a missing HTTP address",
            v1::MemberRequest {
                http_addr: String::new(),
                ..good(7)
            },
        ),
        (
            "an address that does not parse",
            v1::MemberRequest {
                peer_addr: "not an address".into(),
                ..good(7)
            },
        ),
        (
            "an address too long",
            v1::MemberRequest {
                client_addr: format!("{}:1", "a".repeat(300)),
                ..good(7)
            },
        ),
        (
            "one address twice",
            v1::MemberRequest {
                client_addr: "127.0.0.1:1".into(),
                ..good(7)
            },
        ),
    ];
    for (what, req) in cases {
        assert_error(
            admin.add_member(req).await,
            tonic::Code::InvalidArgument,
            "invalid-argument",
            what,
        );
    }
    assert_error(
        admin
            .promote_member(v1::PromoteMemberRequest { id: 2 })
            .await,
        tonic::Code::InvalidArgument,
        "invalid-argument",
        "promoting a voter",
    );
    let after = c.status_of(leader).await;
    assert_eq!(after.voters, before.voters);
    // Nothing was written: a refused request takes no log entry.
    assert_eq!(after.commit_index, before.commit_index);
}
