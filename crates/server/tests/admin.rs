//! Membership and Raft leadership are the admin's, on a real cluster with TLS and the
//! default policy: a client whose certificate names another principal is refused
//! PERMISSION_DENIED (`permission-denied`), and a client with no certificate
//! UNAUTHENTICATED (`unauthenticated`), for AddMember, RemoveMember and TransferLeadership;
//! nothing changes, and each refusal is counted; the admin (the harness's own certificate,
//! principal `admin`) moves leadership as before, and is refused INVALID_ARGUMENT
//! (`invalid-argument`) for the removal of a node that is not a member.

use tenure_proto::v1;
use tenure_testkit::*;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_changes_membership_or_moves_leadership() {
    let c = Cluster::start(Options::nodes(3));
    let (leader, term) = c.wait_for_leader(&c.ids(), secs(10)).await;
    let follower = c.others(&[leader])[0];
    let before = c.status_of(leader).await;
    let denied_before = c.metric(leader, "tenure_permission_denied_total").await;
    let unauthenticated_before = c.metric(leader, "tenure_unauthenticated_total").await;

    for (who, client, code, reason) in [
        (
            "the app's certificate",
            Some(APP_CLIENT),
            Code::PermissionDenied,
            "permission-denied",
        ),
        (
            "no certificate",
            None,
            Code::Unauthenticated,
            "unauthenticated",
        ),
    ] {
        let mut cluster = v1::cluster_client::ClusterClient::new(c.channel_as(leader, client));
        let member = |voter| v1::MemberRequest {
            id: follower,
            voter,
            ..Default::default()
        };
        let moved = cluster
            .transfer_leadership(v1::TransferLeadershipRequest { to: follower })
            .await;
        for (call, answer) in [
            ("TransferLeadership", moved.map(drop)),
            (
                "RemoveMember",
                cluster.remove_member(member(false)).await.map(drop),
            ),
            (
                "AddMember",
                cluster.add_member(member(true)).await.map(drop),
            ),
        ] {
            assert_error(answer, code, reason, &format!("{call} with {who}"));
        }
    }
    let after = c.status_of(leader).await;
    assert_eq!(
        (after.term, after.leader),
        (term, leader),
        "leadership moved"
    );
    assert_eq!(after.voters, before.voters, "membership changed");
    let denied = c.metric(leader, "tenure_permission_denied_total").await - denied_before;
    assert_eq!(denied, 3.0, "refusals of the app counted");
    let unauthenticated =
        c.metric(leader, "tenure_unauthenticated_total").await - unauthenticated_before;
    assert_eq!(
        unauthenticated, 3.0,
        "refusals of the anonymous client counted"
    );

    // The admin may.
    let mut admin =
        v1::cluster_client::ClusterClient::new(c.channel_as(leader, Some(ADMIN_CLIENT)));
    // But not remove a node that is not a member: refused as the dashboard refuses it, as a
    // bad argument, and nothing changes.
    let not_a_member = admin
        .remove_member(v1::MemberRequest {
            id: 42,
            ..Default::default()
        })
        .await;
    let refused = assert_error(
        not_a_member,
        Code::InvalidArgument,
        "invalid-argument",
        "RemoveMember of node 42",
    );
    assert!(
        refused.message().contains("node 42 is not a member"),
        "{refused:?}"
    );
    assert_eq!(
        c.status_of(leader).await.voters,
        before.voters,
        "membership changed"
    );
    admin
        .transfer_leadership(v1::TransferLeadershipRequest { to: follower })
        .await
        .expect("the admin moves leadership");
    c.wait_status(follower, secs(5), "leading after the transfer", |s| {
        s.is_leader()
    })
    .await;
}
