//! The ballot engine's lessons, checked on the real core: the split vote, bully against
//! Raft under a partition, the fence, exact replay, refusals that change nothing and say
//! why (and what would make them possible), the established start at term 41, and stepping
//! through a prepared scenario one step at a time.

use tenure_ballot::engine::{Engine, Start};
use tenure_ballot::scenarios::{find, LEASE, SCENARIOS, SPLIT_VOTE};
use tenure_ballot::step::{encode_steps, parse_step, parse_steps, Refusal, StepError};
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
    for s in SCENARIOS {
        let first = Engine::replay_from(s.n, s.seed, s.start, s.steps).expect("replays");
        let link = first.view().steps;
        assert_eq!(parse_steps(&link).unwrap(), parse_steps(s.steps).unwrap());
        let second =
            Engine::replay_from(s.n, s.seed, s.start, &link).expect("replays from the link");
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

fn step(text: &str) -> Step {
    parse_step(1, text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// Why `text` is refused now; panics if it is not refused as a step that does not apply.
fn refusal(engine: &Engine, text: &str) -> Refusal {
    match engine.refusal(&step(text)) {
        Some(StepError::NotNow(r)) => r,
        other => panic!("{text} should be refused as not applying now, got {other:?}"),
    }
}

#[test]
fn stopping_the_leader_then_timing_out_a_follower_says_the_lease_holds_and_for_how_long() {
    // The first thing a person tries: stop leader 5's heartbeats, time out node 1. Nodes
    // 2, 3 and 4 heard from node 5 at tick 40, so they refuse every vote until tick 55.
    let mut engine = Engine::replay(5, 7, "wait-40,settle,pause-5,timeout-1").unwrap();
    assert!(has_line(
        &engine,
        "node 1 cannot win its pre-vote yet: it needs 3 of 5 (its own included) and would get 1, \
         because nodes 2, 3 and 4 heard from leader 5 at tick 40 and refuse every vote until tick 55 \
         (T = 15 ticks); node 5 is paused, so it answers nothing. To make it possible: wait 23 ticks \
         (by then node 2 times out and wins term 2); or tick nodes 2, 3 and 4 15 times each \
         (tick-2-15, tick-3-15, tick-4-15) before delivering node 1's requests"
    ));
    // Each refused pre-vote says why, in the log and in the answer in flight.
    engine.apply(step("deliver-1-2")).unwrap();
    assert!(has_line(
        &engine,
        "node 2 refuses node 1's pre-vote request for term 2, because node 2 heard from leader 5 \
         at tick 40 and keeps leader 5's lease until tick 55 (T = 15 ticks), so until then it \
         refuses every vote: tick node 2 15 times before delivering (tick-2-15), or wait 15 ticks \
         and time node 1 out again"
    ));
    let answer = engine
        .view()
        .in_flight
        .into_iter()
        .find(|m| m.from == 2)
        .unwrap();
    assert_eq!(
        answer.text,
        "node 2 to node 1: no pre-vote (I keep leader 5's lease until tick 55)"
    );
    // The node cards carry the same clocks.
    let node2 = engine.view().nodes[1].clone();
    assert_eq!(
        (
            node2.heard_from,
            node2.heard_tick,
            node2.vote_lease_until_tick
        ),
        (Some(5), 40, Some(55))
    );
    // Delivering to the paused leader is refused, and says what would make it possible.
    let r = refusal(&engine, "deliver-1-5");
    assert_eq!(r.why, "node 5 is paused, so it receives nothing");
    assert_eq!(
        r.remedy,
        "resume node 5 first (the message waits in flight), or drop it"
    );
    match engine.apply(step("deliver-1-5")) {
        Err(e) => assert_eq!(e.to_string(), format!("{}: {}", r.why, r.remedy)),
        Ok(()) => panic!("delivered to a paused node"),
    }
    // Both remedies the log offers do what it says.
    let waited = Engine::replay(5, 7, "wait-40,settle,pause-5,timeout-1,wait-23").unwrap();
    assert_eq!(
        waited.leaders_of(2),
        vec![2],
        "wait 23 ticks: node 2 wins term 2"
    );
    let early = Engine::replay(5, 7, "wait-40,settle,pause-5,timeout-1,wait-22").unwrap();
    assert!(early.leaders_of(2).is_empty(), "not a tick earlier");
    let ticked = Engine::replay(
        5,
        7,
        "wait-40,settle,pause-5,timeout-1,tick-2-15,tick-3-15,tick-4-15,settle",
    )
    .unwrap();
    assert_eq!(
        ticked.leaders_of(2),
        vec![1],
        "past their lease, node 1 wins"
    );
}

#[test]
fn refused_steps_say_why_and_what_would_make_them_possible() {
    // Node 5 (the leader) paused, node 4 crashed, node 1 asking for pre-votes.
    let mut engine = Engine::replay(5, 7, "wait-40,settle,pause-5,crash-4,timeout-1").unwrap();
    let cases = [
        ("timeout-5", "node 5 is paused, so its election timer cannot run", "resume node 5 first"),
        ("tick-4", "node 4 is crashed, so its clock cannot tick", "restart node 4 first"),
        ("resume-1", "node 1 is running, not paused", "only a paused node resumes (pause node 1 first)"),
        ("resume-4", "node 4 is crashed, not paused", "restart node 4 instead"),
        ("restart-1", "node 1 is running", "only a crashed node restarts (crash node 1 first)"),
        ("restart-5", "node 5 is paused, not crashed", "resume node 5 instead, or crash it first"),
        ("pause-5", "node 5 is already paused", "resume node 5 first"),
        ("crash-4", "node 4 is already crashed", "restart node 4 first"),
        ("deliver-1-4", "node 4 is crashed, so nothing can reach it", "restart node 4 first, or drop the message"),
        ("hold-4", "node 4 is crashed, so its application went down with it", "restart node 4 first"),
        ("hold-5", "node 5 is paused, so its application is frozen with it", "resume node 5 first"),
        (
            "hold-1",
            "node 1's application finds no leader it can reach (leader 5 is paused)",
            "resume node 5, or wait until the others elect a new leader (wait 15 ticks or more)",
        ),
        (
            "write-1",
            "node 1's application holds no token for billing (it never campaigned)",
            "campaign (app) on node 1 first, and write once it leads billing",
        ),
        (
            "deliver-2-3",
            "no message from node 2 to node 3 is in flight (node 2 has nothing in flight)",
            "pick a message from the list, or let node 2 send one first (tick it, time it out, or deliver it a message)",
        ),
        (
            "partition-1.2.3.4.5",
            "a partition needs nodes on both sides, and this one names 5 of the 5 nodes",
            "name from 1 to 4 nodes, as in partition-1.2",
        ),
    ];
    let before = engine.view();
    for (text, why, remedy) in cases {
        let r = refusal(&engine, text);
        assert_eq!((r.why.as_str(), r.remedy.as_str()), (why, remedy), "{text}");
        let e = engine.apply(step(text)).expect_err(text);
        assert_eq!(e.to_string(), format!("{why}: {remedy}"), "{text}");
        assert_eq!(engine.view(), before, "{text} changed the state");
    }
    // A leader does not time out.
    let led = Engine::replay(5, 7, "wait-40,settle").unwrap();
    let r = refusal(&led, "timeout-5");
    assert_eq!(
        r.why,
        "node 5 leads term 1 and a leader has no election timer (its own heartbeats keep the others following)"
    );
    assert_eq!(
        r.remedy,
        "stop its heartbeats (pause node 5) or crash it, then time out a follower"
    );
}

#[test]
fn buttons_that_cannot_apply_are_disabled_with_the_engines_reason() {
    let engine = Engine::replay(5, 7, "wait-40,settle,pause-5,crash-4,timeout-1").unwrap();
    let view = engine.view();
    let action = |node: usize, label: &str| {
        view.nodes[node - 1]
            .actions
            .iter()
            .find(|a| a.label == label)
            .unwrap_or_else(|| panic!("node {node} has no {label} button"))
            .clone()
    };
    let why = |node: usize, label: &str| action(node, label).refused.map(|r| r.why);
    assert_eq!(
        why(1, "resume").as_deref(),
        Some("node 1 is running, not paused")
    );
    assert_eq!(why(1, "restart").as_deref(), Some("node 1 is running"));
    assert_eq!(
        why(5, "restart").as_deref(),
        Some("node 5 is paused, not crashed")
    );
    assert_eq!(why(5, "resume"), None);
    assert_eq!(
        why(4, "campaign (app)").as_deref(),
        Some("node 4 is crashed, so its application went down with it")
    );
    assert_eq!(why(4, "restart"), None);
    assert_eq!(
        action(5, "stop heartbeats").step,
        "pause-5",
        "the paused leader's button"
    );
    assert!(
        action(2, "time out").does.contains("(at its tick"),
        "{:?}",
        action(2, "time out")
    );
    // Deliver toward a paused or crashed node is disabled; drop is not.
    let to = |n: u64| view.in_flight.iter().find(|m| m.to == n).unwrap().clone();
    assert_eq!(
        to(5).deliver_refused.map(|r| r.why).as_deref(),
        Some("node 5 is paused, so it receives nothing")
    );
    assert_eq!(
        to(4).deliver_refused.map(|r| r.why).as_deref(),
        Some("node 4 is crashed, so nothing can reach it")
    );
    assert_eq!(to(5).drop_refused, None);
    assert_eq!(to(2).deliver_refused, None);
    // The page's buttons agree with the engine: each enabled one is taken, each disabled
    // one is refused (isolate makes one cut at a time, so it is checked without a cut).
    for node in &view.nodes {
        for a in &node.actions {
            let taken = engine.clone().apply(step(&a.step));
            assert_eq!(
                taken.is_ok(),
                a.refused.is_none(),
                "node {} {}: {taken:?}",
                node.id,
                a.label
            );
            if let (Err(e), Some(r)) = (taken, &a.refused) {
                assert_eq!(e.to_string(), r.to_string());
            }
        }
    }
    for m in &view.in_flight {
        let deliver = engine
            .clone()
            .apply(step(&format!("deliver-{}-{}", m.from, m.to)));
        if m.drop_refused.is_none() {
            assert_eq!(deliver.is_ok(), m.deliver_refused.is_none(), "#{}", m.id);
        }
    }
    // Behind the oldest message of a link, both buttons wait their turn.
    let two = Engine::replay(5, 7, "wait-40,settle,pause-5,timeout-1,timeout-1").unwrap();
    let later = two
        .view()
        .in_flight
        .into_iter()
        .filter(|m| m.to == 2)
        .nth(1)
        .unwrap();
    let r = later.deliver_refused.expect("a later message on the link");
    assert!(
        r.why
            .contains("is still in flight, and each link delivers in order"),
        "{r}"
    );
    assert_eq!(later.drop_refused, Some(r));
}

#[test]
fn every_refused_ballot_in_the_prepared_scenarios_has_a_reason() {
    for s in SCENARIOS {
        let engine = Engine::replay_from(s.n, s.seed, s.start, s.steps).unwrap();
        let unexplained: Vec<&String> = engine
            .log()
            .iter()
            .filter(|l| l.contains("a reason this page cannot see"))
            .collect();
        assert!(
            unexplained.is_empty(),
            "scenario {}: {unexplained:?}",
            s.name
        );
    }
    // The split vote's refusals: one vote per term.
    let split = Engine::replay(5, 7, SPLIT_VOTE).unwrap();
    assert!(has_line(
        &split,
        "node 3 refuses node 2's vote request for term 2, because node 3 already voted for node 1 in term 2, and a node votes once per term"
    ));
}

#[test]
fn the_established_start_has_node_1_leading_term_41() {
    for n in [3, 5] {
        for seed in 0..12 {
            let engine = Engine::starting(n, seed, Start::Term41).unwrap();
            let view = engine.view();
            assert_eq!(view.start, Start::Term41);
            assert_eq!(view.steps, "", "the start is no step");
            let leader = &view.nodes[0];
            assert_eq!(
                (leader.role.as_str(), leader.term),
                ("leader", 41),
                "n={n} seed={seed}"
            );
            for node in &view.nodes[1..] {
                assert_eq!(
                    (node.role.as_str(), node.term, node.leader, node.commit),
                    ("follower", 41, Some(1), leader.commit),
                    "n={n} seed={seed} node {}",
                    node.id
                );
            }
            assert_eq!(view.terms.len(), 1, "the terms table starts at term 41");
            assert_eq!(view.terms[0].outcome, "leader: node 1");
            assert!(view.in_flight.is_empty());
            assert_eq!(engine.leaders_of(41), vec![1]);
            // The same start twice is the same cluster, and so is its share link.
            let again = Engine::replay_from(n, seed, Start::Term41, "").unwrap();
            assert_eq!(again.view(), view);
        }
    }
    let engine = Engine::starting(5, 7, Start::Term41).unwrap();
    assert!(has_line(
        &engine,
        "node 1 is LEADER of term 41 with votes from"
    ));
    assert_eq!("term41".parse::<Start>().unwrap(), Start::Term41);
    assert_eq!("fresh".parse::<Start>().unwrap(), Start::Fresh);
    assert!(matches!(
        "term42".parse::<Start>(),
        Err(StepError::UnknownStart(_))
    ));
    // From there the lease scenario: node 2 times out at once and is refused; past the
    // lease it wins term 42, and node 1 wakes and steps down.
    let lease = find("lease").unwrap();
    assert_eq!(lease.start, Start::Term41);
    let engine = Engine::replay_from(5, 7, Start::Term41, LEASE).unwrap();
    assert!(has_line(
        &engine,
        "node 3 refuses node 2's pre-vote request for term 42, because node 3 heard from leader 1"
    ));
    assert_eq!(engine.leaders_of(42), vec![2]);
    assert!(has_line(
        &engine,
        "node 1 steps down: it is a follower in term 42"
    ));
    let a = Engine::replay_from(5, 7, Start::Term41, LEASE).unwrap();
    assert_eq!(a.view(), engine.view(), "it replays exactly");
}

#[test]
fn a_scenario_steps_one_step_at_a_time_and_its_link_reopens_it_there() {
    let s = find("split-vote").unwrap();
    let all = parse_steps(s.steps).unwrap();
    let mut engine = Engine::scenario(s, Some("")).unwrap();
    let plan = engine.view().scenario.expect("a scenario is loaded");
    assert_eq!(
        (plan.name.as_str(), plan.at, plan.total),
        ("split-vote", 0, all.len())
    );
    assert_eq!(plan.next.as_deref(), Some("wait-40"));
    assert_eq!(
        plan.next_does.as_deref(),
        Some("let 40 ticks pass on every running node, delivering everything after each")
    );
    assert!(engine.view().terms.is_empty(), "nothing has happened yet");
    for (i, next) in all.iter().enumerate() {
        assert_eq!(engine.planned_next(), Some(next));
        engine.next_step().unwrap();
        let view = engine.view();
        let plan = view.scenario.clone().expect("still in the scenario");
        assert_eq!(plan.at, i + 1);
        assert_eq!(
            view.steps,
            encode_steps(&all[..=i]),
            "the link holds the position"
        );
        // The share link (the steps taken so far, and the scenario) reopens it there.
        let reopened = Engine::scenario(s, Some(&view.steps)).unwrap();
        assert_eq!(reopened.view(), view, "after step {}", i + 1);
    }
    // Delivering a message names it before it goes.
    let at = Engine::scenario(s, Some(&encode_steps(&all[..8]))).unwrap();
    assert_eq!(
        at.view().scenario.unwrap().next_does.as_deref(),
        Some("deliver the oldest message from node 1 to node 3: node 1 asks node 3: would you vote for me in term 2? (pre-vote)")
    );
    // At the end: nothing left, the same state as playing it whole.
    let plan = engine.view().scenario.unwrap();
    assert_eq!((plan.at, plan.next), (all.len(), None));
    let e = engine.next_step().expect_err("no step left");
    assert!(
        e.to_string()
            .starts_with("scenario split-vote has no step left"),
        "{e}"
    );
    assert_eq!(engine.view(), Engine::scenario(s, None).unwrap().view());
    let mut whole = Engine::replay(s.n, s.seed, s.steps).unwrap().view();
    whole.scenario = engine.view().scenario;
    assert_eq!(engine.view(), whole);
    // Run to end from the middle.
    let mut middle = Engine::scenario(s, Some(&encode_steps(&all[..5]))).unwrap();
    middle.run_to_end().unwrap();
    assert_eq!(middle.view(), engine.view());
    // The next step taken by hand keeps the scenario; any other step leaves it.
    let mut by_hand = Engine::scenario(s, Some("wait-40")).unwrap();
    by_hand.apply(step("settle")).unwrap();
    assert_eq!(by_hand.view().scenario.map(|p| p.at), Some(2));
    by_hand.apply(step("wait-1")).unwrap();
    assert_eq!(by_hand.view().scenario, None);
    // A link whose steps are not where the scenario goes is refused.
    assert!(matches!(
        Engine::scenario(s, Some("wait-41")),
        Err(StepError::NotInScenario { .. })
    ));
}
