mod common;

use common::Cluster;
use tenure_core::node::Role;
use tenure_core::sm::{Command, Response};

#[test]
fn a_leader_is_elected_and_commits() {
    let mut c = Cluster::new(3);
    let l = c.elect();
    let p = c
        .node_mut(l)
        .propose(Command::Grant { ttl_ticks: 100 })
        .unwrap();
    c.flush();
    c.deliver_all();
    for id in 1..=3 {
        assert!(
            c.node(id).status().applied >= p.index,
            "node {id} {:?}",
            c.node(id).status()
        );
    }
    let got = c.applied[&l].iter().find(|a| a.index == p.index).unwrap();
    assert_eq!(
        got.response,
        Response::Granted {
            session: p.index,
            ttl_ticks: 100
        }
    );
    assert_eq!(c.leaders(), vec![l]);
    let _ = Role::Leader;
}

fn propose_and_settle(c: &mut Cluster, leader: u64, cmd: Command) -> (u64, Response) {
    let p = c.node_mut(leader).propose(cmd).expect("leader accepts");
    c.flush();
    c.deliver_all();
    let a = c.applied[&leader]
        .iter()
        .find(|a| a.index == p.index)
        .expect("applied")
        .clone();
    (p.index, a.response)
}

/// A session of `ttl_ticks` granted at leader `l`, leading election "e" with token 1.
fn leading_session(c: &mut Cluster, l: u64, ttl_ticks: u64) -> u64 {
    let (_, r) = propose_and_settle(c, l, Command::Grant { ttl_ticks });
    let Response::Granted { session, .. } = r else {
        panic!("{r:?}")
    };
    let (_, r) = propose_and_settle(
        c,
        l,
        Command::Campaign {
            election: "e".into(),
            session,
            value: b"a".to_vec(),
        },
    );
    assert_eq!(
        r,
        Response::Campaigned {
            leader_token: Some(1),
            position: 0
        }
    );
    session
}

#[test]
fn keepalives_are_acknowledged_and_silent_sessions_expire() {
    let mut c = Cluster::new(3);
    let l = c.elect();
    let session = leading_session(&mut c, l, 60);
    for round in 0..10 {
        c.node_mut(l).keepalive(session, round).unwrap();
        c.ticks(20);
        assert!(
            c.acks[&l].iter().any(|a| a.tag == round),
            "keepalive {round} not acknowledged: {:?}",
            c.node(l).status()
        );
    }
    assert!(c.node(l).state_machine().session(session).is_some());
    c.ticks(200);
    for id in 1..=3 {
        assert!(
            c.node(id).state_machine().session(session).is_none(),
            "node {id} still has session"
        );
        assert_eq!(c.node(id).state_machine().leader("e"), None);
    }
}

#[test]
fn a_partitioned_leader_steps_down_and_the_majority_elects_another() {
    let mut c = Cluster::new(5);
    let l = c.elect();
    let term = c.node(l).status().term;
    c.isolate(l);
    c.ticks(100);
    assert_ne!(
        c.node(l).status().role,
        Role::Leader,
        "check-quorum must depose it"
    );
    let others: Vec<u64> = c.leaders();
    assert_eq!(others.len(), 1);
    assert!(c.node(others[0]).status().term > term);
    c.heal();
    c.ticks(60);
    assert_eq!(c.leaders().len(), 1);
}

#[test]
fn an_isolated_follower_rejoining_does_not_disturb_the_leader() {
    let mut c = Cluster::new(3);
    let l = c.elect();
    let term = c.node(l).status().term;
    let f = (1..=3).find(|id| *id != l).unwrap();
    c.isolate(f);
    c.ticks(200);
    assert_eq!(
        c.node(f).status().term,
        term,
        "pre-vote keeps the isolated node's term"
    );
    c.heal();
    c.ticks(30);
    assert_eq!(c.leaders(), vec![l]);
    assert_eq!(c.node(l).status().term, term);
}

#[test]
fn leadership_transfer_hands_over_to_the_target() {
    let mut c = Cluster::new(3);
    let l = c.elect();
    let target = (1..=3).find(|id| *id != l).unwrap();
    c.node_mut(l).transfer_leadership(target).unwrap();
    c.flush();
    c.deliver_all();
    c.ticks(3);
    assert_eq!(c.leaders(), vec![target]);
}

#[test]
fn membership_change_through_joint_consensus_adds_and_removes_voters() {
    let mut c = Cluster::new(3);
    let l = c.elect();
    let mut cfg = tenure_core::config::Config::new(4, vec![]);
    cfg.seed = 44;
    c.add_node(cfg);
    let voters = [1, 2, 3, 4].into_iter().collect();
    c.node_mut(l)
        .change_membership(voters, Default::default())
        .unwrap();
    c.flush();
    c.deliver_all();
    c.ticks(10);
    for id in 1..=4 {
        let m = c.node(id).status().membership;
        assert!(!m.is_joint(), "node {id} still joint: {m:?}");
        assert_eq!(m.voters.len(), 4, "node {id}: {m:?}");
    }
    let remove_leader: std::collections::BTreeSet<u64> = (1..=4).filter(|id| *id != l).collect();
    c.node_mut(l)
        .change_membership(remove_leader.clone(), Default::default())
        .unwrap();
    c.flush();
    c.deliver_all();
    c.ticks(100);
    let leaders = c.leaders();
    assert_eq!(leaders.len(), 1);
    assert!(remove_leader.contains(&leaders[0]));
}

/// Drivers keep one `Status` per node and refresh it after every input; through elections
/// and a joint-consensus change it must always equal a freshly built one, and its
/// membership epoch must move exactly when the membership does.
#[test]
fn a_refreshed_status_equals_a_fresh_one_through_a_membership_change() {
    let mut c = Cluster::new(3);
    let mut kept: Vec<_> = (1..=3).map(|id| c.node(id).status()).collect();
    let check = |c: &Cluster, kept: &mut [tenure_core::node::Status]| {
        for (i, status) in kept.iter_mut().enumerate() {
            let node = c.node(i as u64 + 1);
            let epoch_before = status.membership_epoch;
            let membership_before = status.membership.clone();
            node.refresh_status(status);
            assert_eq!(*status, node.status(), "node {}", i + 1);
            assert_eq!(
                status.membership_epoch != epoch_before,
                status.membership != membership_before,
                "node {}: the epoch moves exactly when the membership changes",
                i + 1
            );
        }
    };
    let l = c.elect();
    check(&c, &mut kept);
    let mut cfg = tenure_core::config::Config::new(4, vec![]);
    cfg.seed = 45;
    c.add_node(cfg);
    let voters = [1, 2, 3, 4].into_iter().collect();
    c.node_mut(l)
        .change_membership(voters, Default::default())
        .unwrap();
    for _ in 0..20 {
        c.flush();
        c.deliver_all();
        c.ticks(1);
        check(&c, &mut kept);
    }
    assert_eq!(
        kept[0].membership.voters.len(),
        4,
        "the change went through"
    );
}

#[test]
fn a_lagging_follower_catches_up_from_a_snapshot_and_a_restart_keeps_state() {
    let mut c = Cluster::with_config(3, |cfg| cfg.snapshot_threshold_entries = 10);
    let l = c.elect();
    let f = (1..=3).find(|id| *id != l).unwrap();
    c.isolate(f);
    for _ in 0..40 {
        propose_and_settle(&mut c, l, Command::Grant { ttl_ticks: 10_000 });
    }
    assert!(c.node(l).snapshot_meta().0 > 0, "leader compacted");
    c.heal();
    c.ticks(20);
    let digest = c.node(l).state_machine().digest();
    assert_eq!(c.node(f).state_machine().digest(), digest);
    c.restart(f);
    c.ticks(20);
    assert_eq!(
        c.node(f).state_machine().digest(),
        c.node(l).state_machine().digest()
    );
}

/// Regression (simulator seed 105 with the entries-before-hard-state disk layout): a crash
/// after a Ready's entries reached the disk and before its hard state did leaves entries of
/// a newer term than the persisted one. The node must restart, adopting that term without a
/// vote, rather than refuse its own disk.
#[test]
fn restart_adopts_the_term_of_entries_persisted_before_the_hard_state() {
    let recovered = common::disk_with(1, Some(1), 1, common::noops(1, &[1, 3]));
    let node = tenure_core::node::Node::new(
        tenure_core::config::Config::new(1, vec![1, 2, 3]),
        recovered,
    )
    .expect("a torn hard state is not corruption");
    let s = node.status();
    assert_eq!((s.term, s.vote, s.last_index), (3, None, 2));
    node.check_invariants();
}

/// Fate-sharing: a session bound to its keepalive stream ends as soon as its client closes
/// that stream, never when the server ends the stream itself, and no client may propose the
/// `Release` that ends it.
#[test]
fn a_bound_session_is_released_when_its_client_closes_the_stream() {
    use tenure_core::node::{Bind, ProposeError, StreamEnd};
    let mut c = Cluster::new(3);
    let l = c.elect();
    let session = leading_session(&mut c, l, 600);
    assert_eq!(
        c.node_mut(l).propose(Command::Release { session }),
        Err(ProposeError::ClientCommandNotAllowed)
    );
    let bind = |stream, seq| Some(Bind { stream, seq });
    c.node_mut(l)
        .keepalive_bound(session, 1, None, bind(11, 1))
        .expect("the leader takes it");
    assert_eq!(c.node(l).bound_stream(session), Some(11));
    // The server closed stream 11 itself (an idle connection): nothing ends.
    c.node_mut(l).stream_ended(11, StreamEnd::Server);
    assert_eq!(c.node(l).bound_stream(session), None);
    c.ticks(20);
    assert!(c.node(l).state_machine().session(session).is_some());
    // Bound again, then the client closes the stream: the session ends within a few ticks,
    // not after its 600.
    c.node_mut(l)
        .keepalive_bound(session, 2, None, bind(12, 2))
        .expect("the leader takes it");
    c.node_mut(l).stream_ended(12, StreamEnd::Client);
    c.flush();
    c.deliver_all();
    c.ticks(3);
    for id in 1..=3 {
        let sm = c.node(id).state_machine();
        assert!(
            sm.session(session).is_none(),
            "node {id} still has the session"
        );
        assert_eq!(sm.leader("e"), None, "node {id}");
    }
}
