//! The checkers on hand-made histories: each catches its fabricated violation and accepts
//! valid histories, including ones with indeterminate operations.

use std::collections::{BTreeMap, BTreeSet};

use tenure_nemesis::checks::{self, NodeFinal};
use tenure_nemesis::faults::{schedule, FaultKind};
use tenure_nemesis::history::{classify, Kind, Op, Outcome, Value};
use tenure_nemesis::linear::check_history;
use tenure_proto::Reason;

/// Builds histories; times are in milliseconds for readability.
#[derive(Default)]
struct H(Vec<Op>);

impl H {
    fn op(
        &mut self,
        client: &str,
        kind: Kind,
        from_ms: u64,
        to_ms: u64,
        outcome: Outcome,
    ) -> &mut H {
        let id = self.0.len();
        self.0.push(Op {
            id,
            client: client.into(),
            kind,
            invoke: from_ms * 1_000,
            complete: to_ms * 1_000,
            outcome,
        });
        self
    }
    fn put(&mut self, v: &str, token: u64, from: u64, to: u64, outcome: Outcome) -> &mut H {
        self.op(
            "w",
            Kind::Put {
                key: "k".into(),
                value: v.into(),
                election: "e".into(),
                token,
            },
            from,
            to,
            outcome,
        )
    }
    fn get(&mut self, seen: Option<(&str, u64)>, from: u64, to: u64) -> &mut H {
        self.op(
            "r",
            Kind::Get { key: "k".into() },
            from,
            to,
            Outcome::Ok(Value::Read(seen.map(|(v, t)| (v.to_string(), t, 0)))),
        )
    }
    fn campaign(&mut self, session: u64, token: u64, from: u64, to: u64) -> &mut H {
        self.op(
            &format!("s{session}"),
            Kind::Campaign {
                election: "e".into(),
                session,
            },
            from,
            to,
            Outcome::Ok(Value::Token(token)),
        )
    }
    fn leader(&mut self, seen: Option<(u64, u64)>, from: u64, to: u64) -> &mut H {
        self.op(
            "r",
            Kind::Leader {
                election: "e".into(),
            },
            from,
            to,
            Outcome::Ok(Value::Leader(seen)),
        )
    }
    fn grant(&mut self, session: u64, ttl_ms: u64, from: u64, to: u64) -> &mut H {
        self.op(
            &format!("s{session}"),
            Kind::Grant { ttl_ms },
            from,
            to,
            Outcome::Ok(Value::Session { session, ttl_ms }),
        )
    }
    fn lin_violations(&self) -> Vec<String> {
        check_history(&self.0).violations
    }
    fn assert_linearizable(&self) {
        let v = self.lin_violations();
        assert!(v.is_empty(), "{v:?}");
    }
}

fn ok_index(i: u64) -> Outcome {
    Outcome::Ok(Value::Index(i))
}
fn fail(reason: Reason) -> Outcome {
    Outcome::Fail {
        reason,
        current: None,
    }
}
fn indeterminate() -> Outcome {
    Outcome::Indeterminate {
        why: "no answer".into(),
    }
}

#[test]
fn a_sequential_register_history_is_linearizable() {
    H::default()
        .get(None, 0, 5)
        .put("a", 1, 10, 20, ok_index(3))
        .get(Some(("a", 1)), 30, 40)
        .put("b", 1, 50, 60, ok_index(4))
        .get(Some(("b", 1)), 70, 80)
        .assert_linearizable();
}

#[test]
fn concurrent_operations_may_take_either_order() {
    // The read overlaps both writes: it may see either value.
    H::default()
        .put("a", 1, 0, 50, ok_index(3))
        .put("b", 1, 10, 60, ok_index(4))
        .get(Some(("a", 1)), 20, 70)
        .get(Some(("b", 1)), 80, 90)
        .assert_linearizable();
}

#[test]
fn a_stale_read_is_not_linearizable() {
    let mut h = H::default();
    h.put("a", 1, 0, 10, ok_index(3))
        .put("b", 1, 20, 30, ok_index(4))
        .get(Some(("a", 1)), 40, 50);
    let v = h.lin_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("key \"k\""), "{}", v[0]);
}

#[test]
fn an_indeterminate_write_may_take_effect_late_or_never() {
    // Late: not visible at first, visible afterwards.
    let mut h = H::default();
    h.put("a", 1, 0, 5, indeterminate())
        .get(None, 10, 20)
        .get(Some(("a", 1)), 30, 40);
    h.assert_linearizable();
    // Never.
    let mut h = H::default();
    h.put("a", 1, 0, 5, indeterminate())
        .get(None, 10, 20)
        .get(None, 30, 40);
    h.assert_linearizable();
    // But once seen it cannot be unseen.
    let mut h = H::default();
    h.put("a", 1, 0, 5, indeterminate())
        .get(Some(("a", 1)), 10, 20)
        .get(None, 30, 40);
    assert_eq!(h.lin_violations().len(), 1);
    // And it cannot take effect before it was sent.
    let mut h = H::default();
    h.get(Some(("a", 1)), 0, 5)
        .put("a", 1, 10, 15, indeterminate());
    assert_eq!(h.lin_violations().len(), 1);
}

#[test]
fn a_definite_failure_whose_effect_is_visible_is_caught_and_explained() {
    // The outcome bug: the write is answered not-leader, yet a later read returns it.
    let mut h = H::default();
    h.put("a", 1, 0, 100, fail(Reason::NotLeader))
        .get(Some(("a", 1)), 200, 210);
    let v = h.lin_violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("was answered `not-leader`"), "{}", v[0]);
    assert!(v[0].contains("returns its value"), "{}", v[0]);
}

#[test]
fn stale_token_rejections_are_observations() {
    let mut h = H::default();
    h.put("a", 2, 0, 10, ok_index(3))
        .put("old", 1, 20, 30, fail(Reason::StaleToken))
        .get(Some(("a", 2)), 40, 50);
    h.assert_linearizable();
    // Rejected as stale although nothing higher was ever stored: wrong.
    let mut h = H::default();
    h.put("a", 1, 0, 10, ok_index(3))
        .put("b", 1, 20, 30, fail(Reason::StaleToken));
    assert_eq!(h.lin_violations().len(), 1);
    // A lower token accepted after a higher one: the register model refuses it.
    let mut h = H::default();
    h.put("a", 2, 0, 10, ok_index(3))
        .put("b", 1, 20, 30, ok_index(4));
    assert_eq!(h.lin_violations().len(), 1);
}

#[test]
fn elections_tokens_only_move_forward() {
    let mut h = H::default();
    h.campaign(1, 1, 0, 10)
        .leader(Some((1, 1)), 20, 30)
        .leader(None, 40, 50) // session 1 expired: no leader for a while
        .campaign(2, 2, 30, 60)
        .leader(Some((2, 2)), 70, 80);
    h.assert_linearizable();
    // A read of the old leader after the new one was answered.
    let mut h = H::default();
    h.campaign(1, 1, 0, 10)
        .campaign(2, 2, 20, 30)
        .leader(Some((1, 1)), 40, 50);
    assert_eq!(h.lin_violations().len(), 1);
    // A leadership that was seen to end does not come back under the same token.
    let mut h = H::default();
    h.campaign(1, 1, 0, 10)
        .leader(None, 20, 30)
        .leader(Some((1, 1)), 40, 50);
    assert_eq!(h.lin_violations().len(), 1);
}

#[test]
fn fencing_catches_a_shared_token_a_lower_token_accepted_and_a_phantom_read() {
    let mut h = H::default();
    h.campaign(1, 1, 0, 10).campaign(2, 1, 20, 30);
    let v = checks::fencing(&h.0);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(v.violations[0].contains("two sessions"));

    let mut h = H::default();
    h.put("a", 2, 0, 10, ok_index(5))
        .put("b", 1, 0, 10, ok_index(6));
    let v = checks::fencing(&h.0);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(v.violations[0].contains("accepted after"));

    let mut h = H::default();
    h.get(Some(("nobody", 1)), 0, 10);
    assert_eq!(checks::fencing(&h.0).violations.len(), 1);

    let mut h = H::default();
    h.campaign(1, 1, 0, 10)
        .put("a", 1, 10, 20, ok_index(5))
        .campaign(2, 2, 30, 40)
        .put("b", 2, 40, 50, ok_index(9))
        .put("a2", 1, 60, 70, fail(Reason::StaleToken))
        .get(Some(("b", 2)), 80, 90);
    let v = checks::fencing(&h.0);
    assert!(v.ok(), "{:?}", v.violations);
}

#[test]
fn overlapping_holders_are_caught_and_rule_4_intervals_accepted() {
    // Session 1: TTL 1000 ms granted at 0; believes from 10 ms until 1000 − margin (30 ms).
    // Session 2 answered leader at 500 ms: overlap.
    let mut h = H::default();
    h.grant(1, 1_000, 0, 5)
        .campaign(1, 1, 5, 10)
        .grant(2, 1_000, 0, 5)
        .campaign(2, 2, 5, 500);
    let v = checks::holders(&h.0);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(v.violations[0].contains("overlap"));

    // Session 2 answered after session 1's validity lapsed: fine.
    let mut h = H::default();
    h.grant(1, 1_000, 0, 5)
        .campaign(1, 1, 5, 10)
        .grant(2, 1_000, 900, 905)
        .campaign(2, 2, 905, 980);
    assert!(checks::holders(&h.0).ok());

    // A keepalive acknowledged at 600 ms (sent at 590) extends session 1 to 1560 ms.
    h.op(
        "s1-ka",
        Kind::KeepAlive { session: 1 },
        590,
        600,
        Outcome::Ok(Value::Renewed { ttl_ms: 1_000 }),
    );
    assert_eq!(checks::holders(&h.0).violations.len(), 1);

    // Resigning at 400 ms ends session 1's belief there.
    let mut h = H::default();
    h.grant(1, 1_000, 0, 5)
        .campaign(1, 1, 5, 10)
        .op(
            "s1",
            Kind::Resign {
                election: "e".into(),
                session: 1,
            },
            400,
            410,
            Outcome::Ok(Value::Unit),
        )
        .grant(2, 1_000, 0, 5)
        .campaign(2, 2, 5, 500);
    assert!(checks::holders(&h.0).ok());
}

fn node(id: u64, commit: u64, applied: u64, state: &[(&str, &str)]) -> NodeFinal {
    NodeFinal {
        id,
        status: Some((commit, applied, 7, BTreeSet::from([1, 2, 3]))),
        state: Some(
            state
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
    }
}

#[test]
fn convergence_catches_lagging_and_diverging_nodes() {
    let same = [("key k", "a")];
    let ok = [
        node(1, 9, 9, &same),
        node(2, 9, 9, &same),
        node(3, 9, 9, &same),
    ];
    assert!(checks::convergence(&ok).ok());
    let lagging = [
        node(1, 9, 9, &same),
        node(2, 9, 9, &same),
        node(3, 9, 7, &same),
    ];
    assert!(!checks::convergence(&lagging).ok());
    let diverging = [
        node(1, 9, 9, &same),
        node(2, 9, 9, &[("key k", "b")]),
        node(3, 9, 9, &same),
    ];
    let v = checks::convergence(&diverging);
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(v.violations[0].contains("another state"));
    let silent = [
        node(1, 9, 9, &same),
        NodeFinal {
            id: 2,
            status: None,
            state: None,
        },
    ];
    assert!(!checks::convergence(&silent).ok());
}

#[test]
fn outcomes_follow_the_documented_reasons() {
    let with = |code: tonic::Code, reason: &str| {
        let mut s = tonic::Status::new(code, "x");
        s.metadata_mut()
            .insert("tenure-error", reason.parse().expect("ascii"));
        s
    };
    // Every documented reason is labelled by the server with `Reason::label`; each definite
    // one is a failure with that reason, the other two may have taken effect.
    for r in Reason::ALL {
        let outcome = classify(&r.label(tonic::Status::failed_precondition("x")));
        if r.is_definite() {
            assert!(outcome.is_fail(r), "{r}: {outcome:?}");
        } else {
            assert_eq!(outcome.name(), "indeterminate", "{r}");
        }
    }
    assert_eq!(
        classify(&with(tonic::Code::Unknown, Reason::Indeterminate.as_str())).name(),
        "indeterminate"
    );
    // A reason this version does not know is not a promise that nothing happened.
    assert_eq!(
        classify(&with(tonic::Code::FailedPrecondition, "no-such-reason")).name(),
        "indeterminate"
    );
    assert_eq!(
        classify(&tonic::Status::unavailable("connection refused")).name(),
        "indeterminate"
    );
    assert_eq!(
        classify(&tonic::Status::cancelled("gone")).name(),
        "indeterminate"
    );
}

#[test]
fn the_schedule_is_a_function_of_the_seed_and_covers_every_kind_first() {
    let a = schedule(42, &FaultKind::ALL, 40);
    assert_eq!(a, schedule(42, &FaultKind::ALL, 40));
    assert_ne!(a, schedule(43, &FaultKind::ALL, 40));
    let first: BTreeSet<FaultKind> = a
        .iter()
        .take(FaultKind::ALL.len())
        .map(|s| s.kind)
        .collect();
    assert_eq!(first.len(), FaultKind::ALL.len());
    let only = schedule(1, &[FaultKind::Targeted], 5);
    assert!(only.iter().all(|s| s.kind == FaultKind::Targeted));
}

/// A long history of a real register (each operation takes effect at a random point inside
/// its interval, several clients at once, some writes never answered) is linearizable, and
/// the search stays fast on it.
#[test]
fn a_long_concurrent_history_of_a_correct_register_checks_quickly() {
    let mut seed = 12345u64;
    let mut next = move |m: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % m
    };
    // (linearization point, op) per client; clients are sequential, ops overlap across them.
    let mut planned: Vec<(u64, u64, u64, bool, bool, String)> = Vec::new(); // (point, from, to, is_put, answered, value)
    for c in 0..5u64 {
        let mut t = next(50);
        for k in 0..2_000u64 {
            let from = t + 1 + next(20);
            let to = from + 1 + next(60);
            let point = from + next(to - from);
            let is_put = c < 3;
            let answered = !is_put || next(20) != 0;
            planned.push((point, from, to, is_put, answered, format!("c{c}-{k}")));
            t = to;
        }
    }
    planned.sort_by_key(|p| p.0);
    let mut h = H::default();
    let mut stored: Option<(String, u64)> = None;
    for (_, from, to, is_put, answered, v) in planned {
        if is_put {
            // An unanswered write took effect or not, at random.
            let took = answered || next(2) == 0;
            if took {
                stored = Some((v.clone(), 1));
            }
            h.put(
                &v,
                1,
                from,
                to,
                if answered {
                    ok_index(1)
                } else {
                    indeterminate()
                },
            );
        } else {
            let seen = stored.as_ref().map(|(v, t)| (v.as_str(), *t));
            h.get(seen, from, to);
        }
    }
    h.0.sort_by_key(|o| o.invoke);
    for (i, o) in h.0.iter_mut().enumerate() {
        o.id = i;
    }
    let started = std::time::Instant::now();
    let v = check_history(&h.0);
    assert!(v.violations.is_empty() && v.unknown.is_empty(), "{v:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_holder_margin_is_the_client_librarys() {
    // 2 × ⌈1 % of the TTL⌉ + the client's 10 ms scheduling allowance.
    assert_eq!(checks::drift_margin_us(1_000), 30_000);
    assert_eq!(checks::drift_margin_us(2_000), 50_000);
    assert_eq!(checks::drift_margin_us(0), 10_000);
}
