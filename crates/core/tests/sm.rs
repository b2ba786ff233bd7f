//! Behaviour of the replicated state machine: sessions, elections with fencing tokens, fenced
//! keys, snapshots and determinism. Every test checks the invariants after every apply.

use proptest::prelude::*;
use std::collections::BTreeMap;
use tenure_core::bugs::InjectedBugs;
use tenure_core::sm::*;

/// Limits small enough that tests reach every bound.
fn limits() -> SmLimits {
    SmLimits {
        ttl_min_ticks: 5,
        ttl_max_ticks: 100,
        election_name_bytes_max: 8,
        key_bytes_max: 8,
        value_bytes_max: 4,
        candidates_per_election_max: 3,
        results_per_session_max: 4,
    }
}

/// A state machine fed consecutive indices, checking invariants after every apply.
struct Harness {
    sm: StateMachine,
    next_index: u64,
}

impl Harness {
    fn new() -> Harness {
        Harness::with_bugs(InjectedBugs::default())
    }

    fn with_bugs(bugs: InjectedBugs) -> Harness {
        Harness {
            sm: {
                let mut sm = StateMachine::new(limits());
                sm.inject_bugs(bugs);
                sm
            },
            next_index: 1,
        }
    }

    fn apply(&mut self, command: Command) -> Response {
        let response = self.sm.apply(self.next_index, &command);
        self.next_index += 1;
        self.sm.check_invariants();
        response
    }

    /// Applies `command` carrying request `id`; returns the response and, for a retry, the
    /// index of the first application.
    fn request(&mut self, id: RequestId, command: Command) -> (Response, Option<u64>) {
        let answer = self.sm.apply_request(self.next_index, id, &command);
        self.next_index += 1;
        self.sm.check_invariants();
        answer
    }

    fn grant(&mut self) -> SessionId {
        match self.apply(Command::Grant { ttl_ticks: 10 }) {
            Response::Granted { session, .. } => session,
            other => panic!("grant failed: {other:?}"),
        }
    }

    fn campaign(&mut self, election: &str, session: SessionId) -> Response {
        self.apply(campaign(election, session, b"v"))
    }

    /// Applies `command`, expects it rejected with `error`, and checks that nothing changed.
    fn expect_rejected(&mut self, command: Command, error: SmError) {
        self.sm.take_leader_changes();
        let digest = self.sm.digest();
        assert_eq!(self.apply(command), Response::Rejected(error));
        assert_eq!(
            self.sm.digest(),
            digest,
            "a rejected command changed the state"
        );
        assert!(
            self.sm.take_leader_changes().is_empty(),
            "a rejected command changed a leader"
        );
    }

    /// The leader changes since the last call, as (election, new leader's session and token).
    fn leaders(&mut self) -> Vec<(String, Option<(SessionId, u64)>)> {
        let changes = self.sm.take_leader_changes();
        changes
            .into_iter()
            .map(|c| (c.election, c.leader.map(|l| (l.session, l.token))))
            .collect()
    }
}

fn campaign(election: &str, session: SessionId, value: &[u8]) -> Command {
    Command::Campaign {
        election: election.into(),
        session,
        value: value.to_vec(),
    }
}

fn resign(election: &str, session: SessionId) -> Command {
    Command::Resign {
        election: election.into(),
        session,
    }
}

fn transfer(election: &str, from: SessionId, to: SessionId) -> Command {
    Command::Transfer {
        election: election.into(),
        from,
        to,
    }
}

fn put(key: &str, election: &str, token: u64) -> Command {
    Command::FencedPut {
        key: key.into(),
        value: b"x".to_vec(),
        election: election.into(),
        token,
    }
}

/// A leader change as `leaders()` reports it: the election and the new (session, token).
fn change(election: &str, leader: Option<(SessionId, u64)>) -> (String, Option<(SessionId, u64)>) {
    (election.to_owned(), leader)
}

#[test]
fn grant_creates_a_session_named_by_its_index_with_a_full_ttl() {
    let mut h = Harness::new();
    h.apply(Command::Leader {
        election: "e".into(),
    });
    assert_eq!(
        h.apply(Command::Grant { ttl_ticks: 7 }),
        Response::Granted {
            session: 2,
            ttl_ticks: 7
        }
    );
    let expected = SessionInfo {
        ttl_ticks: 7,
        remaining_ticks: 7,
        recorded_index: 2,
    };
    assert_eq!(h.sm.session(2), Some(&expected));
    assert_eq!(h.sm.sessions().collect::<Vec<_>>(), vec![(2, &expected)]);
}

#[test]
fn grant_accepts_ttls_within_bounds_only() {
    let mut h = Harness::new();
    assert!(matches!(
        h.apply(Command::Grant { ttl_ticks: 5 }),
        Response::Granted { .. }
    ));
    assert!(matches!(
        h.apply(Command::Grant { ttl_ticks: 100 }),
        Response::Granted { .. }
    ));
    for ttl_ticks in [0, 4, 101, u64::MAX] {
        h.expect_rejected(
            Command::Grant { ttl_ticks },
            SmError::TtlOutOfRange {
                ttl_ticks,
                min: 5,
                max: 100,
            },
        );
    }
}

#[test]
fn checkpoint_records_remaining_time_of_live_sessions_only() {
    let mut h = Harness::new();
    let s = h.grant();
    let checkpoint = Command::Checkpoint {
        remaining: vec![(s, 4), (999, 1)],
    };
    assert_eq!(h.apply(checkpoint), Response::Checkpointed);
    let expected = SessionInfo {
        ttl_ticks: 10,
        remaining_ticks: 4,
        recorded_index: 2,
    };
    assert_eq!(h.sm.session(s), Some(&expected));
    assert_eq!(h.sm.session(999), None);
    // The leader may record more than a TTL (it covers keepalives it is about to
    // acknowledge); the state machine keeps what was committed.
    h.apply(Command::Checkpoint {
        remaining: vec![(s, 1_000)],
    });
    assert_eq!(h.sm.session(s).map(|i| i.remaining_ticks), Some(1_000));
}

#[test]
fn campaign_queues_in_fifo_order_and_each_passing_of_leadership_raises_the_token() {
    let mut h = Harness::new();
    let (a, b, c) = (h.grant(), h.grant(), h.grant());
    assert_eq!(
        h.campaign("e", a),
        Response::Campaigned {
            leader_token: Some(1),
            position: 0
        }
    );
    assert_eq!(
        h.campaign("e", b),
        Response::Campaigned {
            leader_token: None,
            position: 1
        }
    );
    assert_eq!(
        h.campaign("e", c),
        Response::Campaigned {
            leader_token: None,
            position: 2
        }
    );
    assert_eq!(h.sm.candidates("e"), vec![a, b, c]);
    assert_eq!(h.leaders(), vec![change("e", Some((a, 1)))]);

    assert_eq!(h.apply(resign("e", a)), Response::Resigned);
    assert_eq!(h.leaders(), vec![change("e", Some((b, 2)))]);
    assert_eq!(h.apply(resign("e", b)), Response::Resigned);
    assert_eq!(h.leaders(), vec![change("e", Some((c, 3)))]);
    let leader = LeaderInfo {
        session: c,
        value: b"v".to_vec(),
        token: 3,
    };
    assert_eq!(h.sm.leader("e"), Some(leader.clone()));
    assert_eq!(
        h.apply(Command::Leader {
            election: "e".into()
        }),
        Response::LeaderIs(Some(leader))
    );
    // Nobody ever campaigned in "none": a clear error, not "no leader yet".
    assert_eq!(
        h.apply(Command::Leader {
            election: "none".into()
        }),
        Response::Rejected(SmError::UnknownElection("none".into()))
    );
}

#[test]
fn campaigning_again_is_idempotent() {
    let mut h = Harness::new();
    let (a, b) = (h.grant(), h.grant());
    h.apply(campaign("e", a, b"one"));
    h.apply(campaign("e", b, b"one"));
    h.leaders();
    let digest = h.sm.digest();
    assert_eq!(
        h.apply(campaign("e", a, b"two")),
        Response::Campaigned {
            leader_token: Some(1),
            position: 0
        }
    );
    assert_eq!(
        h.apply(campaign("e", b, b"two")),
        Response::Campaigned {
            leader_token: None,
            position: 1
        }
    );
    assert_eq!(h.sm.digest(), digest);
    assert_eq!(h.sm.leader("e").map(|l| l.value), Some(b"one".to_vec()));
    assert!(h.leaders().is_empty());
}

#[test]
fn campaign_rejects_bad_sizes_unknown_sessions_and_full_queues() {
    let mut h = Harness::new();
    let sessions = [h.grant(), h.grant(), h.grant(), h.grant()];
    let name = |len| SmError::BadSize {
        what: "election name".into(),
        len,
        max: 8,
    };
    h.expect_rejected(campaign("", sessions[0], b""), name(0));
    h.expect_rejected(campaign("123456789", sessions[0], b""), name(9));
    h.expect_rejected(
        campaign("e", sessions[0], b"12345"),
        SmError::BadSize {
            what: "value".into(),
            len: 5,
            max: 4,
        },
    );
    h.expect_rejected(campaign("e", 999, b""), SmError::UnknownSession(999));
    assert_eq!(
        h.sm.token("e"),
        0,
        "a rejected campaign must not create the election"
    );
    for s in &sessions[..3] {
        h.apply(campaign("e", *s, b""));
    }
    h.expect_rejected(
        campaign("e", sessions[3], b""),
        SmError::TooManyCandidates("e".into()),
    );
}

#[test]
fn resign_of_a_non_leader_changes_neither_leader_nor_token() {
    let mut h = Harness::new();
    let (a, b, c) = (h.grant(), h.grant(), h.grant());
    for s in [a, b, c] {
        h.campaign("e", s);
    }
    h.leaders();
    assert_eq!(h.apply(resign("e", b)), Response::Resigned);
    assert_eq!(h.sm.candidates("e"), vec![a, c]);
    assert_eq!(h.sm.token("e"), 1);
    assert!(h.leaders().is_empty());
    h.expect_rejected(
        resign("e", b),
        SmError::NotCandidate {
            election: "e".into(),
            session: b,
        },
    );
    h.expect_rejected(resign("x", a), SmError::UnknownElection("x".into()));
}

#[test]
fn ending_a_session_removes_its_candidacies_everywhere_and_passes_leadership() {
    for end in [
        |session| Command::Expire { session },
        |session| Command::Revoke { session },
        |session| Command::Release { session },
    ] {
        let mut h = Harness::new();
        let (a, b) = (h.grant(), h.grant());
        h.campaign("e", a);
        h.campaign("e", b);
        h.campaign("f", b);
        h.campaign("f", a);
        h.campaign("g", a);
        h.leaders();
        assert_eq!(h.apply(end(a)), Response::Ended { session: a });
        assert_eq!(h.sm.session(a), None);
        assert_eq!(h.sm.candidates("e"), vec![b]);
        assert_eq!(h.sm.candidates("f"), vec![b]);
        assert_eq!(h.sm.candidates("g"), Vec::<SessionId>::new());
        // "f" did not change leader; the changes come in election-name order.
        assert_eq!(
            h.leaders(),
            vec![change("e", Some((b, 2))), change("g", None)]
        );
        h.expect_rejected(end(a), SmError::UnknownSession(a));
    }
}

#[test]
fn tokens_never_reset_when_the_queue_empties_and_refills() {
    let mut h = Harness::new();
    let (a, b) = (h.grant(), h.grant());
    h.campaign("e", a);
    h.apply(resign("e", a));
    assert_eq!(
        h.leaders(),
        vec![change("e", Some((a, 1))), change("e", None)]
    );
    assert_eq!(h.sm.leader("e"), None);
    assert_eq!(h.sm.token("e"), 1);
    assert_eq!(
        h.campaign("e", b),
        Response::Campaigned {
            leader_token: Some(2),
            position: 0
        }
    );
    h.apply(Command::Revoke { session: b });
    assert_eq!(
        h.campaign("e", a),
        Response::Campaigned {
            leader_token: Some(3),
            position: 0
        }
    );
}

#[test]
fn transfer_moves_the_target_to_the_head_and_the_old_leader_second() {
    let mut h = Harness::new();
    let (a, b, c) = (h.grant(), h.grant(), h.grant());
    for s in [a, b, c] {
        h.campaign("e", s);
    }
    h.leaders();
    assert_eq!(
        h.apply(transfer("e", a, c)),
        Response::Transferred { token: 2 }
    );
    assert_eq!(h.sm.candidates("e"), vec![c, a, b]);
    assert_eq!(h.leaders(), vec![change("e", Some((c, 2)))]);
    // Transferring to oneself is a retry: no change, same token.
    assert_eq!(
        h.apply(transfer("e", c, c)),
        Response::Transferred { token: 2 }
    );
    assert!(h.leaders().is_empty());
    h.expect_rejected(
        transfer("e", a, b),
        SmError::NotLeader {
            election: "e".into(),
            session: a,
        },
    );
    h.expect_rejected(
        transfer("e", c, 999),
        SmError::NotCandidate {
            election: "e".into(),
            session: 999,
        },
    );
    h.expect_rejected(transfer("x", c, a), SmError::UnknownElection("x".into()));
}

#[test]
fn fenced_put_accepts_equal_or_higher_tokens_and_rejects_stale_or_unissued_ones() {
    let mut h = Harness::new();
    let (a, b) = (h.grant(), h.grant());
    h.campaign("e", a);
    h.campaign("e", b);
    assert_eq!(h.apply(put("k", "e", 1)), Response::Put);
    assert_eq!(
        h.apply(put("k", "e", 1)),
        Response::Put,
        "one leader writes many times"
    );
    h.apply(resign("e", a));
    let index = h.next_index;
    assert_eq!(h.apply(put("k", "e", 2)), Response::Put);
    let stored = FencedValue {
        value: b"x".to_vec(),
        election: "e".into(),
        token: 2,
        index,
    };
    assert_eq!(h.sm.fenced("k"), Some(&stored));
    assert_eq!(
        h.apply(Command::Get { key: "k".into() }),
        Response::Value(Some(stored))
    );
    assert_eq!(
        h.apply(Command::Get { key: "nope".into() }),
        Response::Value(None)
    );

    h.expect_rejected(
        put("k", "e", 1),
        SmError::StaleToken {
            token: 1,
            current: 2,
        },
    );
    let not_issued = |token| SmError::TokenNotIssued {
        election: "e".into(),
        token,
        latest: 2,
    };
    h.expect_rejected(put("k", "e", 3), not_issued(3));
    h.expect_rejected(put("other", "e", 0), not_issued(0));
    h.expect_rejected(put("k", "x", 1), SmError::UnknownElection("x".into()));
    h.expect_rejected(
        put("", "e", 2),
        SmError::BadSize {
            what: "key".into(),
            len: 0,
            max: 8,
        },
    );
    h.expect_rejected(
        put("123456789", "e", 2),
        SmError::BadSize {
            what: "key".into(),
            len: 9,
            max: 8,
        },
    );
}

/// Tokens of different elections are never compared: a key written under "high" refuses a
/// write under "low" because it belongs to "high", not because 1 < 4.
#[test]
fn fenced_put_from_another_election_is_refused_whatever_its_token() {
    let mut h = Harness::new();
    let s = h.grant();
    h.campaign("low", s);
    for _ in 0..3 {
        h.apply(resign("high", s));
        h.campaign("high", s);
        h.apply(resign("high", s));
    }
    h.campaign("high", s);
    assert_eq!(h.sm.token("high"), 4);
    assert_eq!(h.apply(put("k", "high", 4)), Response::Put);
    h.expect_rejected(
        put("k", "low", 1),
        SmError::WrongElection {
            key: "k".into(),
            bound: "high".into(),
            election: "low".into(),
        },
    );
}

#[test]
fn the_stale_fence_bug_switch_really_accepts_a_stale_write() {
    let bugs = InjectedBugs {
        stale_fence_accepted: true,
        ..InjectedBugs::default()
    };
    let mut h = Harness::with_bugs(bugs);
    let (a, b) = (h.grant(), h.grant());
    h.campaign("e", a);
    h.campaign("e", b);
    h.apply(resign("e", a));
    assert_eq!(h.apply(put("k", "e", 2)), Response::Put);
    assert_eq!(h.apply(put("k", "e", 1)), Response::Put);
    assert_eq!(h.sm.fenced("k").map(|v| v.token), Some(1));
}

/// A script that touches every kind of command, for the snapshot and determinism tests.
fn script() -> Vec<Command> {
    vec![
        Command::Grant { ttl_ticks: 10 },
        Command::Grant { ttl_ticks: 20 },
        campaign("e", 1, b"a"),
        campaign("e", 2, b"b"),
        campaign("f", 2, b"b"),
        put("k", "e", 1),
        Command::Checkpoint {
            remaining: vec![(1, 3), (2, 9)],
        },
        transfer("e", 1, 2),
        put("k", "e", 1),
        resign("f", 2),
        Command::Expire { session: 2 },
        Command::Get { key: "k".into() },
    ]
}

#[test]
fn snapshot_and_restore_give_the_same_state_and_the_same_behaviour_afterwards() {
    let mut h = Harness::new();
    let script = script();
    let (head, tail) = script.split_at(8);
    for command in head {
        h.apply(command.clone());
    }
    let restored =
        StateMachine::restore(limits(), &h.sm.snapshot()).expect("a fresh snapshot restores");
    assert_eq!(restored.digest(), h.sm.digest());
    assert_eq!(restored.applied_index(), h.sm.applied_index());
    assert_eq!(restored.snapshot(), h.sm.snapshot());
    let mut r = Harness {
        sm: restored,
        next_index: h.next_index,
    };
    h.sm.take_leader_changes();
    for command in tail {
        assert_eq!(h.apply(command.clone()), r.apply(command.clone()));
        assert_eq!(h.sm.take_leader_changes(), r.sm.take_leader_changes());
        assert_eq!(h.sm.digest(), r.sm.digest());
    }
}

#[test]
fn restore_refuses_bytes_that_are_not_a_snapshot() {
    let mut h = Harness::new();
    for command in script() {
        h.apply(command);
    }
    let good = h.sm.snapshot();
    let restore = |bytes: &[u8]| StateMachine::restore(limits(), bytes);
    assert!(matches!(
        restore(&good[..good.len() - 1]),
        Err(SmDecodeError::Malformed(_))
    ));
    assert!(matches!(
        restore(&[good.clone(), vec![0]].concat()),
        Err(SmDecodeError::Malformed(_))
    ));
    assert!(matches!(restore(&[]), Err(SmDecodeError::Malformed(_))));
    let mut future = good;
    future[0] = 5;
    assert_eq!(
        restore(&future).err(),
        Some(SmDecodeError::UnsupportedFormat {
            found: 5,
            expected: 4
        })
    );
}

#[test]
fn two_machines_fed_the_same_commands_agree_on_everything() {
    let (mut x, mut y) = (Harness::new(), Harness::new());
    for command in script() {
        assert_eq!(x.apply(command.clone()), y.apply(command));
        assert_eq!(x.sm.digest(), y.sm.digest());
    }
    assert_eq!(x.sm.snapshot(), y.sm.snapshot());
    assert_eq!(x.sm.take_leader_changes(), y.sm.take_leader_changes());
}

#[test]
#[should_panic(expected = "does not follow applied index")]
fn applying_an_index_twice_panics() {
    let mut sm = StateMachine::new(limits());
    sm.apply(3, &Command::Grant { ttl_ticks: 10 });
    sm.apply(3, &Command::Grant { ttl_ticks: 10 });
}

/// A command in terms of choices, turned into a concrete `Command` against the current
/// state, so that random sequences often name live sessions, queued candidates and tokens
/// that were really issued.
#[derive(Clone, Debug)]
enum Op {
    Grant(u64),
    Revoke(usize),
    Expire(usize),
    Checkpoint(Vec<(usize, u64)>),
    Campaign(usize, usize, u8),
    Resign(usize, usize),
    Transfer(usize, bool, usize),
    FencedPut(usize, usize, i8),
    Get(usize),
    Leader(usize),
    DeleteElection(usize),
    DeleteKey(usize, usize, i8),
    /// The op charged to principal `p0` or `p1` (see [`QUOTA`]).
    Charged(u8, Box<Op>),
}

/// The quota of the random test's principals: small enough to be reached often.
const QUOTA: Quota = Quota {
    sessions: 2,
    elections: 2,
    keys: 1,
    key_bytes: 3,
};

/// Valid names first; the last is empty and the one before it too long.
const ELECTIONS: [&str; 5] = ["a", "b", "c", "toolongname", ""];
const KEYS: [&str; 4] = ["k", "l", "toolongkey", ""];

/// Mostly valid names, sometimes a bad one.
fn choice(valid: usize, all: usize) -> impl Strategy<Value = usize> + Clone {
    prop_oneof![9 => 0..valid, 1 => valid..all]
}

fn op() -> impl Strategy<Value = Op> {
    let e = choice(3, ELECTIONS.len());
    let k = choice(2, KEYS.len());
    let s = 0..4usize;
    prop_oneof![
        3 => (0..110u64).prop_map(Op::Grant),
        1 => s.clone().prop_map(Op::Revoke),
        1 => s.clone().prop_map(Op::Expire),
        1 => proptest::collection::vec((s.clone(), 0..20u64), 0..3).prop_map(Op::Checkpoint),
        5 => (e.clone(), s.clone(), 0..5u8).prop_map(|(e, s, v)| Op::Campaign(e, s, v)),
        2 => (e.clone(), s.clone()).prop_map(|(e, s)| Op::Resign(e, s)),
        2 => (e.clone(), any::<bool>(), s.clone()).prop_map(|(e, l, s)| Op::Transfer(e, l, s)),
        3 => (k.clone(), e.clone(), -3..2i8).prop_map(|(k, e, d)| Op::FencedPut(k, e, d)),
        1 => k.clone().prop_map(Op::Get),
        1 => e.clone().prop_map(Op::Leader),
        1 => e.clone().prop_map(Op::DeleteElection),
        1 => (k, e, -3..2i8).prop_map(|(k, e, d)| Op::DeleteKey(k, e, d)),
    ]
}

/// An op, charged to a principal about half of the time.
fn charged_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => op(),
        1 => (0..2u8, op()).prop_map(|(p, op)| Op::Charged(p, Box::new(op))),
    ]
}

/// The `n`th live session, or an id that was never granted when there are fewer.
fn pick(sm: &StateMachine, n: usize) -> SessionId {
    sm.sessions().nth(n).map_or(1_000 + n as u64, |(id, _)| id)
}

/// The `n`th candidate of `election`, or else the `n`th live session.
fn pick_candidate(sm: &StateMachine, election: &str, n: usize) -> SessionId {
    let candidates = sm.candidates(election);
    candidates.get(n).copied().unwrap_or_else(|| pick(sm, n))
}

fn concretize(sm: &StateMachine, op: &Op) -> Command {
    let name = |e: usize| ELECTIONS[e].to_owned();
    match op {
        Op::Grant(ttl_ticks) => Command::Grant {
            ttl_ticks: *ttl_ticks,
        },
        Op::Revoke(s) => Command::Revoke {
            session: pick(sm, *s),
        },
        Op::Expire(s) => Command::Expire {
            session: pick(sm, *s),
        },
        Op::Checkpoint(list) => Command::Checkpoint {
            remaining: list.iter().map(|(s, r)| (pick(sm, *s), *r)).collect(),
        },
        Op::Campaign(e, s, v) => campaign(&name(*e), pick(sm, *s), &vec![7; *v as usize]),
        Op::Resign(e, s) => resign(&name(*e), pick_candidate(sm, &name(*e), *s)),
        Op::Transfer(e, from_leader, s) => {
            let leader = sm.leader(&name(*e)).map(|l| l.session);
            let from = leader
                .filter(|_| *from_leader)
                .unwrap_or_else(|| pick(sm, *s));
            transfer(&name(*e), from, pick_candidate(sm, &name(*e), *s))
        }
        Op::FencedPut(k, e, delta) => {
            let token = (sm.token(&name(*e)) as i64 + i64::from(*delta)).max(0) as u64;
            Command::FencedPut {
                key: KEYS[*k].into(),
                value: vec![1],
                election: name(*e),
                token,
            }
        }
        Op::Get(k) => Command::Get {
            key: KEYS[*k].into(),
        },
        Op::Leader(e) => Command::Leader { election: name(*e) },
        Op::DeleteElection(e) => Command::DeleteElection { election: name(*e) },
        Op::DeleteKey(k, e, delta) => Command::DeleteKey {
            key: KEYS[*k].into(),
            election: name(*e),
            token: (sm.token(&name(*e)) as i64 + i64::from(*delta)).max(0) as u64,
        },
        Op::Charged(p, op) => Command::Charged {
            principal: format!("p{p}"),
            quota: QUOTA,
            command: Box::new(concretize(sm, op)),
        },
    }
}

/// Applies `ops` to two replicas, replacing the second by a restore of its own snapshot
/// before op `restore_at`, and checks after every apply that they agree, that invariants
/// hold, that tokens never fall and that no key's accepted token ever goes down.
fn replicas_agree(ops: &[Op], restore_at: usize, bugs: InjectedBugs) -> Result<(), TestCaseError> {
    let mut x = StateMachine::new(limits());
    x.inject_bugs(bugs);
    let mut y = StateMachine::new(limits());
    y.inject_bugs(bugs);
    let mut tokens: BTreeMap<&str, u64> = BTreeMap::new();
    let mut leader_tokens: BTreeMap<String, u64> = BTreeMap::new();
    let mut key_tokens: BTreeMap<&str, u64> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        if i == restore_at {
            y = StateMachine::restore(limits(), &y.snapshot()).expect("snapshot restores");
            y.inject_bugs(bugs);
            prop_assert_eq!(y.digest(), x.digest());
        }
        let index = i as u64 + 1;
        let command = concretize(&x, op);
        let response = x.apply(index, &command);
        prop_assert_eq!(
            &response,
            &y.apply(index, &command),
            "command {:?}",
            command
        );
        x.check_invariants();
        y.check_invariants();
        prop_assert_eq!(x.digest(), y.digest());
        let changes = x.take_leader_changes();
        prop_assert_eq!(&changes, &y.take_leader_changes());
        for change in changes {
            // Each new leader gets a token above every earlier leader's of its election.
            if let Some(leader) = change.leader {
                let previous = leader_tokens.insert(change.election, leader.token);
                prop_assert!(previous.unwrap_or(0) < leader.token, "token did not rise");
            }
        }
        for election in ELECTIONS {
            let leader = x.leader(election).map(|l| l.session);
            prop_assert_eq!(leader, x.candidates(election).first().copied());
            // An election that exists has a token at or above every token its name ever
            // had, including a deleted namesake's (0: it does not exist now).
            let token = x.token(election);
            if token != 0 {
                let previous = tokens.insert(election, token).unwrap_or(0);
                prop_assert!(
                    token >= previous,
                    "token of {:?} fell to {}",
                    election,
                    token
                );
            }
        }
        for key in KEYS {
            // Fencing (DESIGN rule 3): a key's accepted token never goes down while it is
            // stored (a deleted key is guarded by its election's current token).
            let Some(token) = x.fenced(key).map(|v| v.token) else {
                key_tokens.remove(key);
                continue;
            };
            let previous = key_tokens.insert(key, token).unwrap_or(0);
            prop_assert!(
                token >= previous,
                "key {:?} went back to token {}",
                key,
                token
            );
        }
        // No principal holds more than its quota (an uncharged command may write over a
        // charged key, which only lowers what its old owner holds).
        for (principal, usage) in x.usages() {
            prop_assert!(
                usage.sessions <= QUOTA.sessions
                    && usage.elections <= QUOTA.elections
                    && usage.keys <= QUOTA.keys
                    && usage.key_bytes <= QUOTA.key_bytes,
                "{} holds {:?}, over its quota",
                principal,
                usage
            );
        }
    }
    Ok(())
}

fn ops() -> impl Strategy<Value = (Vec<Op>, usize)> {
    (proptest::collection::vec(charged_op(), 0..80), 0..80usize)
}

proptest! {
    #[test]
    fn random_commands_keep_replicas_identical_across_a_snapshot_and_tokens_rising(
        (ops, restore_at) in ops(),
    ) {
        replicas_agree(&ops, restore_at, InjectedBugs::default())?;
    }
}

#[test]
fn the_random_command_test_catches_the_stale_fence_bug() {
    use proptest::test_runner::{Config, TestError, TestRng, TestRunner};
    let bugs = InjectedBugs {
        stale_fence_accepted: true,
        ..InjectedBugs::default()
    };
    let config = Config {
        cases: 1_000,
        failure_persistence: None,
        ..Config::default()
    };
    // A fixed seed, so that this test passes or fails the same way on every run.
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let result = runner.run(&ops(), |(ops, restore_at)| {
        replicas_agree(&ops, restore_at, bugs)
    });
    match result {
        Err(TestError::Fail(reason, _)) => assert!(reason.message().contains("went back to token")),
        other => panic!("the stale fence bug went unnoticed: {other:?}"),
    }
}

/// The random test without the token floor (the bug switch): a re-created election counts
/// from 1 again, below its deleted namesake's tokens. Fails without the floor.
#[test]
fn the_random_command_test_catches_a_re_created_election_restarting_its_tokens() {
    use proptest::test_runner::{Config, TestError, TestRng, TestRunner};
    let bugs = InjectedBugs {
        deleted_election_tokens_restart: true,
        ..InjectedBugs::default()
    };
    let config = Config {
        cases: 2_000,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let result = runner.run(&ops(), |(ops, restore_at)| {
        replicas_agree(&ops, restore_at, bugs)
    });
    match result {
        Err(TestError::Fail(reason, _)) => {
            let message = reason.message();
            assert!(
                message.contains("token did not rise") || message.contains("fell to"),
                "{message}"
            )
        }
        other => panic!("a re-created election restarting its tokens went unnoticed: {other:?}"),
    }
}

// ----- Deletes, the token floor, owners and quotas ------------------------------------------

fn charged(principal: &str, quota: Quota, command: Command) -> Command {
    Command::Charged {
        principal: principal.into(),
        quota,
        command: Box::new(command),
    }
}

#[test]
fn an_election_is_deleted_only_without_candidates_and_its_tokens_never_come_back() {
    let mut h = Harness::new();
    let a = h.grant();
    let b = h.grant();
    h.campaign("e", a);
    h.campaign("e", b);
    h.apply(put("k", "e", 1));
    h.expect_rejected(
        Command::DeleteElection {
            election: "e".into(),
        },
        SmError::ElectionInUse {
            election: "e".into(),
            candidates: 2,
        },
    );
    h.apply(resign("e", a)); // b leads with token 2
    h.apply(resign("e", b));
    assert_eq!(h.sm.token("e"), 2);
    let delete = Command::DeleteElection {
        election: "e".into(),
    };
    assert_eq!(h.apply(delete.clone()), Response::Deleted { existed: true });
    assert_eq!(h.sm.token_floor(), 2);
    // Gone: a lookup says so, and a second delete changes nothing and says so.
    assert_eq!(
        h.apply(Command::Leader {
            election: "e".into()
        }),
        Response::Rejected(SmError::UnknownElection("e".into()))
    );
    assert_eq!(h.apply(delete), Response::Deleted { existed: false });
    // The old holder's write finds no election; the key keeps its token.
    h.expect_rejected(put("k", "e", 2), SmError::UnknownElection("e".into()));
    // Created again: its first leader's token is above every token the old one issued, so
    // a store that saw token 2 accepts the new leader, and the old holders stay refused.
    let c = h.grant();
    assert_eq!(
        h.campaign("e", c),
        Response::Campaigned {
            leader_token: Some(3),
            position: 0
        }
    );
    h.expect_rejected(
        put("k", "e", 2),
        SmError::TokenSuperseded {
            election: "e".into(),
            token: 2,
            current: 3,
        },
    );
    assert_eq!(h.apply(put("k", "e", 3)), Response::Put);
    // The floor survives a snapshot.
    let restored = StateMachine::restore(limits(), &h.sm.snapshot()).expect("ok");
    assert_eq!(restored.token_floor(), 2);
    assert_eq!(restored.digest(), h.sm.digest());
}

#[test]
fn a_key_is_deleted_only_by_the_current_leader_of_its_election() {
    let mut h = Harness::new();
    let a = h.grant();
    let b = h.grant();
    h.campaign("e", a);
    h.campaign("f", b);
    h.apply(put("k", "e", 1));
    let delete = |election: &str, token| Command::DeleteKey {
        key: "k".into(),
        election: election.into(),
        token,
    };
    h.expect_rejected(
        delete("f", 1),
        SmError::WrongElection {
            key: "k".into(),
            bound: "e".into(),
            election: "f".into(),
        },
    );
    h.campaign("e", b);
    h.apply(resign("e", a)); // b leads e with token 2
    h.expect_rejected(
        delete("e", 1),
        SmError::TokenSuperseded {
            election: "e".into(),
            token: 1,
            current: 2,
        },
    );
    h.expect_rejected(
        delete("e", 3),
        SmError::TokenNotIssued {
            election: "e".into(),
            token: 3,
            latest: 2,
        },
    );
    assert_eq!(h.apply(delete("e", 2)), Response::Deleted { existed: true });
    assert_eq!(h.sm.fenced("k"), None);
    assert_eq!(
        h.apply(delete("e", 2)),
        Response::Deleted { existed: false }
    );
    // Deleted, the key may be bound afresh, by another election's leader.
    assert_eq!(h.apply(put("k", "f", 1)), Response::Put);
}

#[test]
fn each_principal_is_held_to_its_own_quota() {
    let quota = Quota {
        sessions: 1,
        elections: 1,
        keys: 1,
        key_bytes: 4,
    };
    let mut h = Harness::new();
    let grant = |who: &str| charged(who, quota, Command::Grant { ttl_ticks: 10 });
    let Response::Granted { session: a, .. } = h.apply(grant("alpha")) else {
        panic!("alpha's first session")
    };
    h.expect_rejected(
        grant("alpha"),
        SmError::QuotaExceeded {
            principal: "alpha".into(),
            quota: "sessions".into(),
            limit: 1,
            definite: true,
        },
    );
    // A grant with a request nonce cannot tell a first attempt from the retry of one
    // whose session has since ended (the nonce went with it): not definite.
    let (retry, _) = h.request(RequestId::Grant { nonce: 9 }, grant("alpha"));
    let Response::Rejected(refusal) = retry else {
        panic!("refused: {retry:?}")
    };
    assert!(!refusal.is_definite(), "{refusal}");
    // Another principal is not affected by alpha's usage.
    let Response::Granted { session: b, .. } = h.apply(grant("beta")) else {
        panic!("beta's first session")
    };
    h.apply(charged("alpha", quota, campaign("e", a, b"")));
    h.expect_rejected(
        charged("alpha", quota, campaign("f", a, b"")),
        SmError::QuotaExceeded {
            principal: "alpha".into(),
            quota: "elections".into(),
            limit: 1,
            definite: true,
        },
    );
    // Joining an election someone else created costs nothing.
    h.apply(charged("beta", quota, campaign("e", b, b"")));
    assert_eq!(h.sm.usage("beta").elections, 0);
    // Keys: "k" plus a 3-byte value is 4 bytes; one byte more is over.
    let put = |value: &[u8]| {
        charged(
            "alpha",
            quota,
            Command::FencedPut {
                key: "k".into(),
                value: value.to_vec(),
                election: "e".into(),
                token: 1,
            },
        )
    };
    h.expect_rejected(
        put(b"abcd"),
        SmError::QuotaExceeded {
            principal: "alpha".into(),
            quota: "key_bytes".into(),
            limit: 4,
            definite: true,
        },
    );
    assert_eq!(h.apply(put(b"abc")), Response::Put);
    // Rewriting its own key counts the new size only.
    assert_eq!(h.apply(put(b"xyz")), Response::Put);
    assert_eq!(
        h.sm.usage("alpha"),
        Usage {
            sessions: 1,
            elections: 1,
            keys: 1,
            key_bytes: 4
        }
    );
    // Ending the session gives its share back, and the usage survives a snapshot.
    let restored = StateMachine::restore(limits(), &h.sm.snapshot()).expect("ok");
    assert_eq!(restored.usages(), h.sm.usages());
    h.apply(Command::Expire { session: a });
    assert_eq!(h.sm.usage("alpha").sessions, 0);
    assert!(matches!(h.apply(grant("alpha")), Response::Granted { .. }));
}

#[test]
fn a_session_acts_only_for_the_principal_that_granted_it() {
    let quota = Quota::UNLIMITED;
    let mut h = Harness::new();
    let Response::Granted { session, .. } =
        h.apply(charged("alpha", quota, Command::Grant { ttl_ticks: 10 }))
    else {
        panic!("granted")
    };
    for command in [campaign("e", session, b""), Command::Revoke { session }] {
        h.expect_rejected(
            charged("mallory", quota, command),
            SmError::NotOwner(session),
        );
    }
    // A request on the session, with its id, is refused the same way (before any
    // remembered result is handed out).
    let id = RequestId::Session { session, seq: 1 };
    let (first, _) = h.request(id, charged("alpha", quota, campaign("e", session, b"")));
    assert!(matches!(first, Response::Campaigned { .. }));
    let (retry, _) = h.request(id, charged("mallory", quota, campaign("e", session, b"")));
    assert_eq!(retry, Response::Rejected(SmError::NotOwner(session)));
    assert_eq!(h.sm.session_owner(session), Some("alpha"));
}

// ----- Raft dissertation §6.3: retried requests are applied at most once -------------------

fn put_value(key: &str, value: &[u8], election: &str, token: u64) -> Command {
    Command::FencedPut {
        key: key.into(),
        value: value.to_vec(),
        election: election.into(),
        token,
    }
}

#[test]
fn a_retried_request_returns_its_first_result_and_changes_nothing() {
    let mut h = Harness::new();
    let s = h.grant();
    let id = RequestId::Session { session: s, seq: 1 };
    let (first, replay) = h.request(id, campaign("e", s, b"v"));
    assert!(replay.is_none());
    let first_index = h.next_index - 1;
    let t = h.sm.token("e");
    let write = RequestId::Session { session: s, seq: 2 };
    assert_eq!(
        h.request(write, put_value("k", b"a", "e", t)).0,
        Response::Put
    );
    // A later write by the same leader, then the first write's retry: it must not put the
    // old value back.
    let later = RequestId::Session { session: s, seq: 3 };
    assert_eq!(
        h.request(later, put_value("k", b"b", "e", t)).0,
        Response::Put
    );
    let digest = h.sm.digest();
    let (again, replay) = h.request(write, put_value("k", b"a", "e", t));
    assert_eq!(again, Response::Put);
    assert!(replay.is_some());
    assert_eq!(
        h.sm.fenced("k").map(|v| v.value.clone()),
        Some(b"b".to_vec())
    );
    assert_eq!(h.sm.digest(), digest, "a retry changed the state");
    let (campaign_again, replay) = h.request(id, campaign("e", s, b"v"));
    assert_eq!((campaign_again, replay), (first, Some(first_index)));
    assert!(h
        .sm
        .take_leader_changes()
        .iter()
        .all(|c| c.index < first_index + 1));
}

#[test]
fn a_retried_grant_returns_the_same_session() {
    let mut h = Harness::new();
    let id = RequestId::Grant { nonce: 77 };
    let (first, _) = h.request(id, Command::Grant { ttl_ticks: 10 });
    let (again, replay) = h.request(id, Command::Grant { ttl_ticks: 10 });
    assert_eq!(first, again);
    assert!(replay.is_some());
    assert_eq!(h.sm.session_count(), 1);
    // The nonce goes with the session: once it ended, the same nonce grants anew.
    let Response::Granted { session, .. } = first else {
        panic!("grant failed: {first:?}")
    };
    h.apply(Command::Revoke { session });
    let (fresh, replay) = h.request(id, Command::Grant { ttl_ticks: 10 });
    assert!(replay.is_none());
    assert_ne!(fresh, first);
}

#[test]
fn results_are_bounded_and_a_forgotten_retry_is_refused_not_applied() {
    let mut h = Harness::new();
    let s = h.grant();
    h.campaign("e", s);
    let t = h.sm.token("e");
    let max = limits().results_per_session_max as u64;
    for seq in 1..=max + 2 {
        let id = RequestId::Session { session: s, seq };
        assert_eq!(h.request(id, put_value("k", b"x", "e", t)).0, Response::Put);
    }
    assert_eq!(h.sm.remembers_since(s), Some(2));
    let digest = h.sm.digest();
    // Every forgotten one, up to and including the highest (the edge an off-by-one misses).
    for seq in 1..=2 {
        let old = RequestId::Session { session: s, seq };
        assert_eq!(
            h.request(old, put_value("k", b"y", "e", t)).0,
            Response::Rejected(SmError::RequestForgotten { session: s, seq }),
            "a retry of forgotten request {seq} must not apply again"
        );
    }
    assert_eq!(h.sm.digest(), digest);
    let kept = RequestId::Session { session: s, seq: 3 };
    assert!(h.sm.remembered(kept).is_some());
}

#[test]
fn results_go_with_their_session_and_requests_on_it_are_refused() {
    let mut h = Harness::new();
    let s = h.grant();
    h.campaign("e", s);
    let t = h.sm.token("e");
    let id = RequestId::Session { session: s, seq: 1 };
    h.request(id, put_value("k", b"x", "e", t));
    h.apply(Command::Revoke { session: s });
    assert!(h.sm.remembered(id).is_none());
    assert_eq!(h.sm.remembers_since(s), None);
    assert_eq!(
        h.request(id, put_value("k", b"z", "e", t)).0,
        Response::Rejected(SmError::SessionEnded { session: s, seq: 1 })
    );
}

#[test]
fn request_ids_that_do_not_fit_their_command_are_refused() {
    let mut h = Harness::new();
    let s = h.grant();
    let other = h.grant();
    for (id, command) in [
        (
            RequestId::Grant { nonce: 0 },
            Command::Grant { ttl_ticks: 10 },
        ),
        (
            RequestId::Grant { nonce: 5 },
            Command::Revoke { session: s },
        ),
        (
            RequestId::Session { session: s, seq: 1 },
            Command::Grant { ttl_ticks: 10 },
        ),
        (
            RequestId::Session { session: s, seq: 0 },
            put_value("k", b"x", "e", 1),
        ),
        (
            RequestId::Session {
                session: other,
                seq: 1,
            },
            Command::Revoke { session: s },
        ),
        (
            RequestId::Session { session: s, seq: 1 },
            Command::Expire { session: s },
        ),
        (
            RequestId::Session { session: s, seq: 1 },
            Command::Release { session: s },
        ),
    ] {
        let digest = h.sm.digest();
        assert_eq!(
            check_request_id(id, &command),
            Err(SmError::BadRequestId(id))
        );
        assert_eq!(
            h.request(id, command).0,
            Response::Rejected(SmError::BadRequestId(id))
        );
        assert_eq!(h.sm.digest(), digest);
    }
}

#[test]
fn remembered_results_survive_a_snapshot() {
    let mut h = Harness::new();
    let s = h.grant();
    let id = RequestId::Session { session: s, seq: 9 };
    let first = h.request(id, campaign("e", s, b"v")).0;
    let grant = RequestId::Grant { nonce: 3 };
    h.request(grant, Command::Grant { ttl_ticks: 10 });
    let restored = StateMachine::restore(limits(), &h.sm.snapshot()).expect("ok");
    assert_eq!(restored.remembered(id).map(|(_, r)| r), Some(first));
    assert!(restored.remembered(grant).is_some());
    assert_eq!(restored.digest(), h.sm.digest());
}

/// A key belongs to the election of its first accepted write: a leader of another election
/// (however high its token) cannot write it, and the refusal changes nothing.
#[test]
fn a_key_is_bound_to_the_election_of_its_first_write() {
    let mut h = Harness::new();
    let a = h.grant();
    let b = h.grant();
    h.campaign("billing", a);
    h.campaign("other", b);
    // Churn "other" to a high token, as an attacker would.
    for _ in 0..5 {
        h.apply(resign("other", b));
        h.campaign("other", b);
    }
    assert_eq!(h.apply(put("ledger", "billing", 1)), Response::Put);
    h.expect_rejected(
        put("ledger", "other", 6),
        SmError::WrongElection {
            key: "ledger".into(),
            bound: "billing".into(),
            election: "other".into(),
        },
    );
    // The rightful leader keeps writing with its token.
    assert_eq!(h.apply(put("ledger", "billing", 1)), Response::Put);
}

/// Once a newer leader holds the election, the replaced leader's token is refused even on
/// a key the new leader has not written yet (and on a key nobody wrote).
#[test]
fn a_superseded_token_is_refused_before_the_new_leader_writes() {
    let mut h = Harness::new();
    let old = h.grant();
    let new = h.grant();
    h.campaign("e", old);
    h.campaign("e", new);
    assert_eq!(h.apply(put("k", "e", 1)), Response::Put);
    // The old leader is replaced: `new` leads with token 2 but has written nothing.
    h.apply(resign("e", old));
    h.expect_rejected(
        put("k", "e", 1),
        SmError::TokenSuperseded {
            election: "e".into(),
            token: 1,
            current: 2,
        },
    );
    h.expect_rejected(
        put("fresh", "e", 1),
        SmError::TokenSuperseded {
            election: "e".into(),
            token: 1,
            current: 2,
        },
    );
    assert_eq!(h.apply(put("k", "e", 2)), Response::Put);
    // The key-level refusal still names the key's own token when it is the reason.
    h.expect_rejected(
        put("k", "e", 1),
        SmError::StaleToken {
            token: 1,
            current: 2,
        },
    );
}

fn sealed(secret: u8, command: Command) -> Command {
    Command::Sealed {
        secret_hash: [secret; 32],
        command: Box::new(command),
    }
}

/// A session granted with a secret acts only with it: every command acting for it without
/// the secret, or with another, is refused `WrongSecret` and changes nothing (same digest);
/// with it, everything works as before.
#[test]
fn a_session_granted_with_a_secret_is_used_only_with_it() {
    let mut h = Harness::new();
    let owner = match h.apply(sealed(7, Command::Grant { ttl_ticks: 10 })) {
        Response::Granted { session, .. } => session,
        other => panic!("grant failed: {other:?}"),
    };
    assert_eq!(
        h.apply(sealed(7, campaign("e", owner, b"me"))),
        Response::Campaigned {
            leader_token: Some(1),
            position: 0
        }
    );
    let other = h.grant();
    assert!(matches!(
        h.apply(campaign("e", other, b"x")),
        Response::Campaigned { .. }
    ));
    let digest = h.sm.digest();
    let attacks = [
        campaign("f", owner, b"evil"),
        resign("e", owner),
        transfer("e", owner, other),
        Command::Revoke { session: owner },
    ];
    for attack in attacks {
        for presented in [None, Some(8u8)] {
            let command = match presented {
                None => attack.clone(),
                Some(s) => sealed(s, attack.clone()),
            };
            assert_eq!(
                h.apply(command.clone()),
                Response::Rejected(SmError::WrongSecret(owner)),
                "{command:?}"
            );
            assert_eq!(h.sm.digest(), digest, "{command:?} changed the state");
        }
    }
    assert!(h.sm.secret_matches(owner, Some(&[7; 32])));
    assert!(!h.sm.secret_matches(owner, None));
    assert!(!h.sm.secret_matches(owner, Some(&[8; 32])));
    // A session granted without a secret refuses a sealed command: the secret names
    // another session's owner.
    assert_eq!(
        h.apply(sealed(7, resign("e", other))),
        Response::Rejected(SmError::WrongSecret(other))
    );
    // The owner, with its secret.
    assert_eq!(
        h.apply(sealed(7, transfer("e", owner, other))),
        Response::Transferred { token: 2 }
    );
    assert_eq!(
        h.apply(sealed(7, Command::Revoke { session: owner })),
        Response::Ended { session: owner }
    );
    // Reads and fenced writes by token need no session, and so no secret.
    assert_eq!(h.apply(put("k", "e", 2)), Response::Put);
}

/// Remembered results are the session's too: a request id on another's session, or a
/// retried grant with another secret, gets nothing back (no token, no session).
#[test]
fn remembered_results_and_retried_grants_are_handed_out_only_with_the_secret() {
    let mut h = Harness::new();
    let (granted, _) = h.request(
        RequestId::Grant { nonce: 42 },
        sealed(7, Command::Grant { ttl_ticks: 10 }),
    );
    let Response::Granted { session, .. } = granted else {
        panic!("grant failed: {granted:?}")
    };
    let id = RequestId::Session { session, seq: 1 };
    let (first, _) = h.request(id, sealed(7, campaign("e", session, b"me")));
    assert!(matches!(
        first,
        Response::Campaigned {
            leader_token: Some(1),
            ..
        }
    ));
    let digest = h.sm.digest();
    for attempt in [
        campaign("e", session, b"me"),
        sealed(8, campaign("e", session, b"me")),
    ] {
        assert_eq!(
            h.request(id, attempt),
            (Response::Rejected(SmError::WrongSecret(session)), None)
        );
    }
    assert_eq!(
        h.request(
            RequestId::Grant { nonce: 42 },
            sealed(8, Command::Grant { ttl_ticks: 10 })
        ),
        (Response::Rejected(SmError::WrongSecret(session)), None)
    );
    assert_eq!(h.sm.digest(), digest);
    // The owner's retries get the remembered answers.
    assert_eq!(
        h.request(id, sealed(7, campaign("e", session, b"me"))).0,
        first
    );
    assert!(matches!(
        h.request(
            RequestId::Grant { nonce: 42 },
            sealed(7, Command::Grant { ttl_ticks: 10 })
        ),
        (Response::Granted { .. }, Some(_))
    ));
}

/// The secret survives a snapshot: a restored state machine still refuses the wrong one.
#[test]
fn a_restored_state_machine_still_checks_secrets() {
    let mut h = Harness::new();
    let Response::Granted { session, .. } = h.apply(sealed(7, Command::Grant { ttl_ticks: 10 }))
    else {
        panic!("grant failed")
    };
    let restored = StateMachine::restore(limits(), &h.sm.snapshot()).expect("restores");
    assert!(restored.secret_matches(session, Some(&[7; 32])));
    assert!(!restored.secret_matches(session, None));
}

/// One size check for the leader and every replica: an entry that breaks the limits (one a
/// leader would have refused before the log) is refused on apply with the very error
/// `SmLimits::check` gives, and changes nothing, whatever its command.
#[test]
fn an_entry_breaking_the_limits_is_refused_on_apply_as_before_the_log() {
    let mut h = Harness::new();
    let session = h.grant();
    h.campaign("e", session);
    let long = "123456789".to_string();
    let addresses = MemberAddresses {
        peer: String::new(),
        client: "c:1".into(),
        http: String::new(),
    };
    for command in [
        Command::Grant { ttl_ticks: 101 },
        campaign(&long, session, b""),
        Command::Resign {
            election: long.clone(),
            session,
        },
        Command::Leader {
            election: long.clone(),
        },
        Command::FencedPut {
            key: "k".into(),
            value: b"v".to_vec(),
            election: long.clone(),
            token: 1,
        },
        Command::Get { key: long.clone() },
        Command::SetMember { node: 4, addresses },
    ] {
        let error = limits()
            .check(&command)
            .expect_err("each command breaks a limit");
        h.expect_rejected(command, error);
    }
}

/// A command joins the log and the snapshots as bincode, whose enum tag is the variant's
/// position: a variant added anywhere but last would change how every later variant already
/// on disk reads. `Release` went last; every earlier variant keeps its tag.
#[test]
fn the_encoding_of_every_earlier_command_is_unchanged_by_release() {
    let tag = |c: &Command| -> u32 {
        let bytes = bincode::serialize(c).expect("a command encodes");
        u32::from_le_bytes(bytes[..4].try_into().expect("a four-byte tag"))
    };
    assert_eq!(tag(&Command::Grant { ttl_ticks: 1 }), 0);
    assert_eq!(tag(&Command::Revoke { session: 1 }), 1);
    assert_eq!(tag(&Command::Expire { session: 1 }), 2);
    assert_eq!(
        tag(&Command::Campaign {
            election: "e".into(),
            session: 1,
            value: vec![]
        }),
        4
    );
    assert_eq!(
        tag(&Command::Leader {
            election: "e".into()
        }),
        9
    );
    assert_eq!(
        tag(&Command::SetMember {
            node: 1,
            addresses: Default::default()
        }),
        11
    );
    assert_eq!(tag(&Command::Release { session: 1 }), 12);
    let release = Command::Release { session: 7 };
    let bytes = bincode::serialize(&release).expect("encodes");
    assert_eq!(
        bincode::deserialize::<Command>(&bytes).expect("decodes"),
        release
    );
}
