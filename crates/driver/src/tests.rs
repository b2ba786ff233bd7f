//! The driver core against a real single-node `Node`: every proposal gets exactly one answer
//! of the right kind.

use tenure_core::config::Config;
use tenure_core::node::{Node, ProposeError, Role};
use tenure_core::sm::{Command, RequestId, Response};
use tenure_core::types::Recovered;

use super::*;

type Core = DriverCore<u32, u32>;

fn leader() -> (Node, Core) {
    leader_with(Config::new(1, vec![1]))
}

/// A single node with `config` (voters `[1]`), elected.
fn leader_with(config: Config) -> (Node, Core) {
    let mut node = Node::new(config, Recovered::default()).expect("valid");
    let mut core = Core::new(&node.status(), 0, DriverBugs::default());
    for _ in 0..100 {
        node.tick();
        settle(&mut node, &mut core, 0);
        if node.status().role == Role::Leader {
            return (node, core);
        }
    }
    panic!("a single node elects itself");
}

/// Persist (nothing to do in memory), advance, answer: what a driver does with each Ready.
fn settle(node: &mut Node, core: &mut Core, now_us: Micros) {
    while node.has_ready() {
        let ready = node.ready();
        node.advance();
        core.on_ready(node, now_us, &ready.then);
    }
}

fn grant(ttl_ticks: u64) -> Command {
    Command::Grant { ttl_ticks }
}

#[test]
fn an_applied_proposal_is_answered_with_its_result_once() {
    let (mut node, mut core) = leader();
    core.drain();
    let position = core.propose(&mut node, 5, None, grant(100), 7);
    assert!(position.is_some());
    settle(&mut node, &mut core, 9);
    let out = core.drain();
    assert_eq!(out.answers.len(), 1);
    assert_eq!(out.answers[0].reply, 7);
    let (index, _) = position.expect("proposed");
    assert_eq!(
        out.answers[0].outcome,
        Outcome::Applied {
            index,
            response: Response::Granted {
                session: index,
                ttl_ticks: 100
            }
        }
    );
    assert!(out.events.contains(&Event::Committed { latency_us: 4 }));
    assert_eq!(core.proposals_pending(), 0);
}

#[test]
fn a_refused_proposal_is_a_definite_failure_at_once() {
    let mut node = Node::new(Config::new(1, vec![1, 2, 3]), Recovered::default()).expect("valid");
    let mut core = Core::new(&node.status(), 0, DriverBugs::default());
    assert!(core.propose(&mut node, 0, None, grant(100), 1).is_none());
    let out = core.drain();
    assert!(matches!(
        out.answers[0].outcome,
        Outcome::Failed(Failure::Refused(ProposeError::NotLeader { .. }))
    ));
}

#[test]
fn stopping_leaves_waiting_proposals_indeterminate() {
    let (mut node, mut core) = leader();
    core.drain();
    // Proposed but not yet persisted: it may or may not survive the stop.
    core.propose(&mut node, 0, None, grant(100), 3);
    core.stop();
    let out = core.drain();
    assert_eq!(
        out.answers[0].outcome,
        Outcome::Indeterminate(Unknown::Stopped)
    );
}

#[test]
fn a_retried_request_returns_the_first_result_and_changes_nothing() {
    let (mut node, mut core) = leader();
    let id = RequestId::Grant { nonce: 42 };
    let first = core.propose(&mut node, 0, Some(id), grant(100), 1);
    settle(&mut node, &mut core, 0);
    let retry = core.propose(&mut node, 0, Some(id), grant(100), 2);
    settle(&mut node, &mut core, 0);
    let out = core.drain();
    let (first_index, _) = first.expect("proposed");
    assert!(retry.expect("proposed").0 > first_index);
    let expected = Outcome::Applied {
        index: first_index,
        response: Response::Granted {
            session: first_index,
            ttl_ticks: 100,
        },
    };
    assert_eq!(out.answers.len(), 2);
    assert!(out.answers.iter().all(|a| a.outcome == expected));
    assert_eq!(node.state_machine().session_count(), 1);
}

#[test]
fn keepalives_are_refused_when_the_node_does_not_lead() {
    let mut node = Node::new(Config::new(1, vec![1, 2, 3]), Recovered::default()).expect("valid");
    let mut core = Core::new(&node.status(), 0, DriverBugs::default());
    core.keepalive(&mut node, 0, 5, 9);
    let out = core.drain();
    assert_eq!(out.keepalives.len(), 1);
    assert!(matches!(
        out.keepalives[0].outcome,
        KeepaliveOutcome::Refused(ProposeError::NotLeader { .. })
    ));
}

#[test]
fn the_injected_bug_is_named() {
    assert!(DriverBugs::from_name("not-leader-after-snapshot")
        .is_some_and(|b| b.not_leader_after_snapshot));
    assert!(DriverBugs::from_name("nonsense").is_none());
}

#[test]
fn a_keepalive_is_acknowledged_by_a_leader_that_holds_its_lease() {
    let (mut node, mut core) = leader();
    let (session, _) = core
        .propose(&mut node, 0, None, grant(100), 1)
        .expect("proposed");
    settle(&mut node, &mut core, 0);
    core.drain();
    core.keepalive(&mut node, 0, session, 5);
    settle(&mut node, &mut core, 0);
    for _ in 0..50 {
        if core.keepalives_pending() == 0 {
            break;
        }
        node.tick();
        core.observe(&node, 0);
        settle(&mut node, &mut core, 0);
    }
    let out = core.drain();
    assert_eq!(out.keepalives.len(), 1, "{out:?}");
    assert_eq!(out.keepalives[0].reply, 5);
    assert!(matches!(
        out.keepalives[0].outcome,
        KeepaliveOutcome::Acked { ttl_ticks: 100 }
    ));
}

#[test]
fn a_read_is_answered_from_the_applied_state_without_a_log_entry() {
    let (mut node, mut core) = leader();
    core.drain();
    let before = node.status();
    let read = Command::Get { key: "k".into() };
    assert_eq!(
        core.propose(&mut node, 1, None, read, 3),
        None,
        "a read takes no position"
    );
    settle(&mut node, &mut core, 2);
    let out = core.drain();
    assert_eq!(out.answers.len(), 1);
    assert_eq!(out.answers[0].reply, 3);
    assert_eq!(
        out.answers[0].outcome,
        Outcome::Applied {
            index: before.applied,
            response: Response::Value(None)
        }
    );
    assert_eq!(node.status().last_index, before.last_index);
    assert_eq!(core.reads_pending(), 0);
}

#[test]
fn reads_refused_or_left_at_a_stop_are_definite_failures() {
    let mut node = Node::new(Config::new(1, vec![1, 2, 3]), Recovered::default()).expect("valid");
    let mut core = Core::new(&node.status(), 0, DriverBugs::default());
    core.propose(&mut node, 0, None, Command::Get { key: "k".into() }, 1);
    assert!(matches!(
        core.drain().answers[0].outcome,
        Outcome::Failed(Failure::Refused(ProposeError::NotLeader { .. }))
    ));

    // A lone voter without check-quorum has no lease: the read waits for the next tick.
    let mut cfg = Config::new(1, vec![1]);
    cfg.check_quorum = false;
    let mut node = Node::new(cfg, Recovered::default()).expect("valid");
    let mut core = Core::new(&node.status(), 0, DriverBugs::default());
    while node.status().role != Role::Leader || node.status().applied == 0 {
        node.tick();
        settle(&mut node, &mut core, 0);
    }
    core.drain();
    core.read(&mut node, 0, Command::Get { key: "k".into() }, 2);
    settle(&mut node, &mut core, 0);
    assert_eq!(core.reads_pending(), 1);
    core.stop();
    let out = core.drain();
    assert_eq!(out.answers.len(), 1);
    assert!(matches!(
        out.answers[0].outcome,
        Outcome::Failed(Failure::Refused(ProposeError::NotLeader { .. }))
    ));
    assert_eq!(core.reads_pending(), 0);
}

#[test]
fn a_keepalive_for_an_unknown_session_leaves_nothing_behind() {
    let (mut node, mut core) = leader();
    for session in 1_000..2_000 {
        core.keepalive(&mut node, 0, session, 0);
    }
    assert!(
        core.last_keepalive_us.is_empty(),
        "unknown sessions were remembered"
    );
}

#[test]
fn events_are_named_and_worded_once_with_the_cores_words_for_consensus() {
    use tenure_core::event::NodeEvent;
    let won = Event::LeaderKnown {
        term: 4,
        leader: 2,
        leaderless_us: Some(1_260),
    };
    assert_eq!(won.kind(2), "leader_elected");
    assert_eq!(won.kind(1), "leader_known");
    assert_eq!(
        won.worded(2).to_string(),
        format!(
            "{} after 1.3 ms without a leader",
            NodeEvent::BecameLeader { term: 4 }
        )
    );
    assert_eq!(
        won.worded(1).to_string(),
        "node 2 leads term 4 after 1.3 ms without a leader"
    );
    let lost = Event::Core(NodeEvent::PreVoteLost { term: 3 });
    assert_eq!(lost.kind(1), "pre_vote_lost");
    assert_eq!(
        lost.worded(1).to_string(),
        NodeEvent::PreVoteLost { term: 3 }.to_string()
    );
    let expired = Event::SessionExpired { session: 9 };
    assert_eq!(
        (expired.kind(1), expired.worded(1).to_string().as_str()),
        ("session_expired", "session 9 expired")
    );
}

/// Proposals whose entries a snapshot covered are answered from what the state machine
/// remembers: `Applied` when it remembers the request, `Indeterminate` when it may have
/// applied and forgotten it, never a definite failure for a request that was applied. The
/// node's Ready here is handed over as a driver that installed a snapshot at `index` would
/// see it: nothing in `applied`, everything through the snapshot's index covered by it.
#[test]
fn proposals_covered_by_a_snapshot_are_answered_from_the_remembered_results() {
    let mut config = Config::new(1, vec![1]);
    config.limits.results_per_session_max = 1;
    let (mut node, mut core) = leader_with(config);
    core.propose(&mut node, 0, None, grant(1_000), 0);
    settle(&mut node, &mut core, 0);
    let session = node
        .state_machine()
        .sessions()
        .map(|(s, _)| s)
        .next()
        .expect("granted");
    core.drain();

    let campaign = |election: &str| Command::Campaign {
        election: election.into(),
        session,
        value: Vec::new(),
    };
    let first = RequestId::Session { session, seq: 1 };
    let second = RequestId::Session { session, seq: 2 };
    let (i1, _) = core
        .propose(&mut node, 0, Some(first), campaign("a"), 1)
        .expect("proposed");
    let (i2, _) = core
        .propose(&mut node, 0, Some(second), campaign("b"), 2)
        .expect("proposed");
    while node.has_ready() {
        node.ready();
        node.advance();
    }
    let sm = node.state_machine();
    assert!(
        sm.remembered(first).is_none(),
        "one result kept: 1 is forgotten"
    );
    assert_eq!(sm.remembers_since(session), Some(1));
    let (_, response) = sm.remembered(second).expect("2 is remembered");

    let term = node.status().term;
    core.on_ready(
        &node,
        0,
        &AfterPersist {
            snapshot_installed: Some((i2, term)),
            applied_through: i2,
            ..AfterPersist::default()
        },
    );
    let answers = core.drain().answers;
    let outcome = |reply: u32| {
        answers
            .iter()
            .find(|a| a.reply == reply)
            .map(|a| a.outcome.clone())
            .expect("answered")
    };
    assert_eq!(
        outcome(1),
        Outcome::Indeterminate(Unknown::CoveredBySnapshot),
        "request 1 is at or below what the session forgot: it may have been applied"
    );
    assert_eq!(
        outcome(2),
        Outcome::Applied {
            index: i2,
            response
        },
        "request 2 sits at the snapshot's own index and is remembered"
    );
    assert!(i1 < i2);
    assert_eq!(core.proposals_pending(), 0);
}
