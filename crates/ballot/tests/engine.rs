//! The ballot engine's lessons, checked on the real core: the split vote, bully against
//! Raft under a partition, the fence, exact replay, and refusals that change nothing.

use tenure_ballot::engine::Engine;
use tenure_ballot::scenarios::{find, SPLIT_VOTE};
use tenure_ballot::step::{encode_steps, parse_steps, StepError};
use tenure_ballot::Step;

fn has_line(engine: &Engine, needle: &str) -> bool {
    engine.log().iter().any(|l| l.contains(needle))
}

#[test]
fn split_vote_leaves_no_leader_in_term_2_and_elects_one_in_term_3() {
    let engine = Engine::replay(5, 7, SPLIT_VOTE).expect("the prepared split vote replays");
    let view = engine.view();
    let term2 = view
        .terms
        .iter()
        .find(|t| t.term == 2)
        .expect("term 2 was seen");
    assert!(
        term2.leaders.is_empty(),
        "term 2 must have no leader: {term2:?}"
    );
    assert_eq!(
        term2.candidates.len(),
        2,
        "two candidates in term 2: {term2:?}"
    );
    for (candidate, votes) in &term2.candidates {
        assert_eq!(
            votes.len(),
            2,
            "candidate {candidate} got {votes:?}: two of the three needed"
        );
    }
    assert_eq!(term2.outcome, "no leader (split vote)");
    assert_eq!(engine.leaders_of(3), vec![1], "node 1 leads term 3");
    assert!(has_line(&engine, "no leader in term 2: split vote"));
    assert!(has_line(&engine, "node 3 voted for node 1 in term 2"));
    assert!(has_line(&engine, "node 4 voted for node 2 in term 2"));
    assert!(has_line(&engine, "node 1 is LEADER of term 3"));
}

#[test]
fn bully_crowns_two_coordinators_under_partition_while_raft_has_one_leader_per_term() {
    let s = find("partition").expect("prepared");
    let engine = Engine::replay(s.n, s.seed, s.steps).expect("replays");
    assert_eq!(
        engine.bully().coordinators(),
        vec![3, 5],
        "one coordinator per side"
    );
    let view = engine.view();
    for t in &view.terms {
        assert!(
            t.leaders.len() <= 1,
            "term {} had leaders {:?}",
            t.term,
            t.leaders
        );
    }
    // The majority side elected a leader in a new term; the minority side elected none.
    let newest = view.terms.last().expect("terms");
    assert_eq!(newest.leaders.len(), 1);
    assert!(
        newest.leaders[0] <= 3,
        "the leader is on the majority side: {newest:?}"
    );
    let leaders_now: Vec<u64> = view
        .nodes
        .iter()
        .filter(|n| n.role == "leader")
        .map(|n| n.id)
        .collect();
    assert_eq!(
        leaders_now.len(),
        1,
        "one Raft leader at the end: {leaders_now:?}"
    );
}

#[test]
fn late_write_with_the_old_token_is_rejected_by_the_fence() {
    let s = find("fence").expect("prepared");
    let engine = Engine::replay(s.n, s.seed, s.steps).expect("replays");
    assert!(has_line(
        &engine,
        "node 5's application now leads billing: fencing token 1"
    ));
    assert!(has_line(
        &engine,
        "node 4's application now leads billing: fencing token 2"
    ));
    assert!(has_line(
        &engine,
        "the fence REJECTS node 5's late write with old token 1"
    ));
    let view = engine.view();
    assert_eq!(view.fence, Some(("closed by node 4".to_string(), 2)));
}

#[test]
fn replay_from_the_encoded_steps_reproduces_state_and_log() {
    for s in tenure_ballot::scenarios::SCENARIOS {
        let first = Engine::replay(s.n, s.seed, s.steps).expect("replays");
        let link = first.view().steps;
        assert_eq!(parse_steps(&link).unwrap(), parse_steps(s.steps).unwrap());
        let second = Engine::replay(s.n, s.seed, &link).expect("replays from the link");
        assert_eq!(first.view(), second.view(), "scenario {}", s.name);
    }
    // Step by step through apply() is the same as a replay.
    let mut by_hand = Engine::new(5, 7).unwrap();
    for step in parse_steps(SPLIT_VOTE).unwrap() {
        by_hand.apply(step).unwrap();
    }
    assert_eq!(
        by_hand.view(),
        Engine::replay(5, 7, SPLIT_VOTE).unwrap().view()
    );
    // Another seed is another race: the first election is not won by the same node.
    let winners: std::collections::BTreeSet<u64> = (1..=6)
        .flat_map(|seed| Engine::replay(5, seed, "wait-40").unwrap().leaders_of(1))
        .collect();
    assert!(winners.len() > 1, "seeds 1..=6 all elected {winners:?}");
}

#[test]
fn encoding_round_trips_every_step() {
    let steps = vec![
        Step::Wait { ticks: 3 },
        Step::Tick { node: 2, ticks: 4 },
        Step::Timeout { node: 1 },
        Step::Deliver { from: 1, to: 2 },
        Step::Drop { from: 2, to: 1 },
        Step::Settle,
        Step::Pause { node: 3 },
        Step::Resume { node: 3 },
        Step::Partition { side: vec![1, 4] },
        Step::Heal,
        Step::Crash { node: 2 },
        Step::Restart { node: 2 },
        Step::Hold { node: 1 },
        Step::Write { node: 1 },
    ];
    assert_eq!(parse_steps(&encode_steps(&steps)).unwrap(), steps);
}

#[test]
fn bad_step_lists_are_typed_errors() {
    let syntax = |text: &str| match parse_steps(text) {
        Err(StepError::Syntax { index, .. }) => index,
        other => panic!("{text:?} gave {other:?}"),
    };
    assert_eq!(syntax("wait-3,jump-1"), 2);
    assert_eq!(syntax("wait-x"), 1);
    assert_eq!(syntax("wait-0"), 1);
    assert_eq!(syntax("wait-1001"), 1);
    assert_eq!(syntax("deliver-1"), 1);
    assert_eq!(syntax("partition-1.1"), 1);
    assert_eq!(syntax("settle-2"), 1);
    let too_many = vec!["settle"; 1001].join(",");
    assert!(matches!(
        parse_steps(&too_many),
        Err(StepError::TooMany(1001))
    ));
    assert!(matches!(Engine::new(4, 1), Err(StepError::ClusterSize(4))));
    // A step that names a missing node, or cannot be taken now, fails at its position.
    match Engine::replay(3, 1, "wait-40,crash-9") {
        Err(StepError::Replay {
            index: 2, error, ..
        }) => {
            assert!(matches!(
                *error,
                StepError::UnknownNode { node: 9, nodes: 3 }
            ))
        }
        other => panic!("{:?}", other.err()),
    }
    assert!(matches!(
        Engine::replay(3, 1, "deliver-1-2"),
        Err(StepError::Replay { index: 1, .. })
    ));
}

#[test]
fn a_refused_step_changes_nothing() {
    let mut engine = Engine::replay(3, 7, "wait-40,settle").unwrap();
    let before = engine.view();
    for bad in [
        Step::Deliver { from: 1, to: 2 },
        Step::Resume { node: 1 },
        Step::Restart { node: 2 },
        Step::Write { node: 1 },
        Step::Partition {
            side: vec![1, 2, 3],
        },
        Step::Timeout { node: 9 },
    ] {
        assert!(
            engine.apply(bad.clone()).is_err(),
            "{bad} should be refused"
        );
        assert_eq!(engine.view(), before, "{bad} changed the state");
    }
    let leader = before.nodes.iter().find(|n| n.role == "leader").unwrap().id;
    assert!(matches!(
        engine.apply(Step::Timeout { node: leader }),
        Err(StepError::NotNow(_))
    ));
    assert_eq!(engine.view(), before);
}

#[test]
fn crash_and_restart_keep_the_durable_term_and_vote() {
    let mut engine = Engine::replay(3, 7, "wait-40,settle").unwrap();
    let follower = engine
        .view()
        .nodes
        .iter()
        .find(|n| n.role == "follower")
        .unwrap()
        .clone();
    engine.apply(Step::Crash { node: follower.id }).unwrap();
    assert_eq!(
        engine.view().nodes[follower.id as usize - 1].state,
        "crashed"
    );
    engine.apply(Step::Restart { node: follower.id }).unwrap();
    let after = engine.view().nodes[follower.id as usize - 1].clone();
    assert_eq!((after.term, after.vote), (follower.term, follower.vote));
    assert_eq!(
        after.log.len(),
        follower.log.len(),
        "its log came back from disk"
    );
}

#[test]
fn pre_vote_then_the_real_vote_are_separate_ballots() {
    // Leader 5 freezes; 3 and 4 stop hearing it; node 1 times out.
    let mut engine = Engine::replay(
        5,
        7,
        "wait-40,settle,pause-5,wait-14,tick-3,tick-4,timeout-1",
    )
    .unwrap();
    let node = |e: &Engine, id: u64| e.view().nodes[id as usize - 1].clone();
    assert_eq!(node(&engine, 1).role, "pre-candidate");
    assert_eq!(
        node(&engine, 1).term,
        1,
        "a pre-vote does not bump the term"
    );
    // A pre-vote changes nobody's term, and one yes is not yet a majority of five.
    for step in ["deliver-1-3", "deliver-3-1"] {
        engine
            .apply(tenure_ballot::step::parse_step(1, step).unwrap())
            .unwrap();
    }
    assert_eq!(node(&engine, 3).term, 1);
    assert_eq!(node(&engine, 1).role, "pre-candidate");
    for step in ["deliver-1-4", "deliver-4-1"] {
        engine
            .apply(tenure_ballot::step::parse_step(1, step).unwrap())
            .unwrap();
    }
    assert_eq!(node(&engine, 1).role, "candidate");
    assert_eq!(node(&engine, 1).term, 2, "the real campaign bumps the term");
    assert_eq!(node(&engine, 1).vote, Some(1), "and votes for itself");
    // Withholding two ballots (dropping the requests) leaves it one vote short.
    engine.apply(Step::Drop { from: 1, to: 3 }).unwrap();
    engine.apply(Step::Drop { from: 1, to: 4 }).unwrap();
    engine.apply(Step::Settle).unwrap();
    assert_eq!(node(&engine, 1).role, "candidate");
    assert!(engine.leaders_of(2).is_empty());
    assert!(has_line(
        &engine,
        "dropped: node 1 asks node 3 for its vote in term 2"
    ));
}
