//! Reads without log entries (Raft dissertation §6.4; `tenure_core::read`): a leader serves
//! `Get` and `Leader` from its own state once it knows it still leads, and never appends an
//! entry for them.

mod common;

use common::Cluster;
use tenure_core::bugs::InjectedBugs;
use tenure_core::node::ProposeError;
use tenure_core::read::ReadResult;
use tenure_core::sm::{Command, Response, SmError};
use tenure_core::types::NodeId;

fn leader_read(election: &str) -> Command {
    Command::Leader {
        election: election.into(),
    }
}

/// The answer to the read tagged `tag` at `node`, if it came.
fn answer(c: &Cluster, node: NodeId, tag: u64) -> Option<ReadResult> {
    c.reads
        .get(&node)
        .and_then(|r| r.iter().find(|r| r.tag == tag).cloned())
}

/// A three-node cluster whose leader leads election "e" with a session of its own.
fn cluster_with_an_election(tweak: impl Fn(&mut tenure_core::config::Config)) -> (Cluster, NodeId) {
    cluster_with_bugs_and_an_election(InjectedBugs::default(), tweak)
}

/// [`cluster_with_an_election`] whose nodes run with `bugs`.
fn cluster_with_bugs_and_an_election(
    bugs: InjectedBugs,
    tweak: impl Fn(&mut tenure_core::config::Config),
) -> (Cluster, NodeId) {
    let mut c = Cluster::with_bugs(3, bugs, tweak);
    let leader = c.elect();
    let grant = c
        .node_mut(leader)
        .propose(Command::Grant { ttl_ticks: 1_000 })
        .expect("leader accepts");
    c.deliver_all();
    c.node_mut(leader)
        .propose(Command::Campaign {
            election: "e".into(),
            session: grant.index,
            value: b"v".to_vec(),
        })
        .expect("leader accepts");
    c.deliver_all();
    c.ticks(3);
    (c, leader)
}

#[test]
fn a_leader_serves_a_thousand_reads_without_appending_an_entry() {
    let (mut c, leader) = cluster_with_an_election(|_| {});
    let before = c.node(leader).status();
    for tag in 0..1_000u64 {
        let read = if tag % 2 == 0 {
            leader_read("e")
        } else {
            Command::Get { key: "k".into() }
        };
        c.node_mut(leader)
            .read(read, tag)
            .expect("the leader takes reads");
    }
    c.flush();
    let after = c.node(leader).status();
    assert_eq!(
        after.last_index, before.last_index,
        "reads appended entries"
    );
    assert_eq!(after.commit, before.commit, "reads moved the commit index");
    for tag in 0..1_000u64 {
        let r = answer(&c, leader, tag).expect("every read is answered at once under the lease");
        let (index, response) = r.outcome.expect("served");
        assert_eq!(index, after.applied, "answered from the applied state");
        match response {
            Response::LeaderIs(Some(l)) => {
                assert_eq!(tag % 2, 0);
                assert_eq!(l.value, b"v".to_vec());
                assert_eq!(l.token, 1);
            }
            Response::Value(None) => assert_eq!(tag % 2, 1),
            other => panic!("read {tag} answered {other:?}"),
        }
    }
}

#[test]
fn a_read_of_an_unknown_election_is_refused_by_the_state_machine() {
    let (mut c, leader) = cluster_with_an_election(|_| {});
    c.node_mut(leader).read(leader_read("nobody"), 1).unwrap();
    c.flush();
    let (_, response) = answer(&c, leader, 1).unwrap().outcome.unwrap();
    assert_eq!(
        response,
        Response::Rejected(SmError::UnknownElection("nobody".into()))
    );
}

#[test]
fn followers_refuse_reads_with_their_leader_hint_and_only_reads_are_taken() {
    let (mut c, leader) = cluster_with_an_election(|_| {});
    let follower = *c.nodes.keys().find(|id| **id != leader).unwrap();
    assert_eq!(
        c.node_mut(follower).read(leader_read("e"), 1),
        Err(ProposeError::NotLeader {
            leader_hint: Some(leader)
        })
    );
    assert_eq!(
        c.node_mut(leader).read(Command::Grant { ttl_ticks: 10 }, 2),
        Err(ProposeError::NotARead)
    );
    let long = "k".repeat(10_000);
    assert!(matches!(
        c.node_mut(leader).read(Command::Get { key: long }, 3),
        Err(ProposeError::Invalid(SmError::BadSize { .. }))
    ));
}

/// Without check-quorum there is no leader lease: the leader serves a read only once a
/// quorum has acknowledged a message it sent after the read arrived (ReadIndex), and it
/// heartbeats at the next tick instead of waiting out the interval.
#[test]
fn without_a_lease_a_read_waits_for_a_quorum_to_hear_the_leader_after_it_arrived() {
    let (mut c, leader) = cluster_with_an_election(|cfg| cfg.check_quorum = false);
    assert_eq!(c.node(leader).status().lease_until_tick, None);
    c.node_mut(leader).read(leader_read("e"), 7).unwrap();
    c.deliver_all();
    assert!(
        answer(&c, leader, 7).is_none(),
        "served before any message sent after the read was acknowledged"
    );
    c.tick();
    let (_, response) = answer(&c, leader, 7)
        .expect("served one tick later")
        .outcome
        .unwrap();
    assert!(matches!(response, Response::LeaderIs(Some(_))));
}

/// A leader cut off from everyone never serves a read it cannot confirm: without a lease it
/// refuses it after two election timeouts; with check-quorum it steps down first and refuses
/// it `NotLeader`.
#[test]
fn an_isolated_leader_refuses_reads_it_cannot_confirm() {
    let (mut c, leader) = cluster_with_an_election(|cfg| cfg.check_quorum = false);
    c.isolate(leader);
    c.node_mut(leader).read(leader_read("e"), 1).unwrap();
    c.flush();
    for _ in 0..29 {
        c.tick();
        assert!(
            answer(&c, leader, 1).is_none(),
            "an unconfirmed read was answered"
        );
    }
    c.tick();
    assert_eq!(
        answer(&c, leader, 1).unwrap().outcome,
        Err(ProposeError::LeadershipUnconfirmed)
    );

    let (mut c, leader) = cluster_with_an_election(|_| {});
    c.isolate(leader);
    c.ticks(15);
    c.node_mut(leader).read(leader_read("e"), 2).ok();
    for _ in 0..30 {
        c.tick();
    }
    if let Some(r) = answer(&c, leader, 2) {
        assert!(
            matches!(r.outcome, Err(ProposeError::NotLeader { .. })),
            "{r:?}"
        );
    }
}

/// Cuts the leader off and offers it a read every tick for 60 ticks; returns the rounds in
/// which it served a read although another leader had been elected, and how many it served.
fn reads_served_by_a_deposed_leader(bugs: InjectedBugs) -> (Vec<u64>, usize) {
    let (mut c, old) = cluster_with_bugs_and_an_election(bugs, |_| {});
    c.isolate(old);
    let mut successor_at = None;
    let mut served = 0;
    let mut late = Vec::new();
    for round in 0..60u64 {
        let tag = 100 + round;
        if c.node_mut(old).read(leader_read("e"), tag).is_ok() {
            c.flush();
        }
        // Reads held from earlier rounds may be answered by this round's inputs too.
        let answered_ok = c
            .reads
            .get(&old)
            .map_or(0, |r| r.iter().filter(|r| r.outcome.is_ok()).count());
        if answered_ok > served {
            served = answered_ok;
            if successor_at.is_some() {
                late.push(round);
            }
        }
        c.tick();
        if successor_at.is_none() && c.leaders().iter().any(|l| *l != old) {
            successor_at = Some(round);
        }
    }
    assert!(successor_at.is_some(), "the others never elected a leader");
    (late, served)
}

/// The lease argument, tick by tick: after the leader is cut off, every read it still serves
/// is served before anyone else is elected, and once another leader exists it serves none.
#[test]
fn a_deposed_leader_serves_no_read_once_a_successor_exists() {
    let (late, served) = reads_served_by_a_deposed_leader(InjectedBugs::default());
    assert!(served > 0, "the old leader never served under its lease");
    assert!(
        late.is_empty(),
        "served after a successor was elected in rounds {late:?}"
    );
}

/// The same check catches both injected read bugs (`tenure sim --inject-bug
/// read-without-confirmation` and `read-lease-past-vote-refusal` are the simulator's).
#[test]
fn the_deposed_leader_check_catches_both_read_bugs() {
    let (late, _) = reads_served_by_a_deposed_leader(InjectedBugs {
        read_without_confirmation: true,
        ..InjectedBugs::default()
    });
    assert!(!late.is_empty(), "read-without-confirmation went unnoticed");
    let (late, _) = reads_served_by_a_deposed_leader(InjectedBugs {
        read_lease_past_vote_refusal: true,
        ..InjectedBugs::default()
    });
    assert!(
        !late.is_empty(),
        "read-lease-past-vote-refusal went unnoticed"
    );
}
