//! Property tests of the core's pure helpers against deliberately naive references: quorum
//! arithmetic (commit index, vote counting, the lease's quorum tick) computed by brute force
//! over every candidate value, and the Raft log against a plain `Vec` of terms.
//!
//! The references are written from the definitions in the paper, not from the code: slow,
//! obvious, and independent of sorting tricks.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::noops;

use proptest::prelude::*;
use tenure_core::log::RaftLog;
use tenure_core::quorum::{
    committed_index, joint_committed_index, joint_quorum_min, joint_vote_result, majority,
    vote_result, VoteResult,
};
use tenure_core::types::{Index, Membership, NodeId, Term};

/// Indexes and ticks are drawn below this, so that brute force over `0..=MAX_VALUE` is cheap.
const MAX_VALUE: u64 = 20;

// ----- naive references ----------------------------------------------------------------------

/// "More than half": the definition, without `n / 2 + 1`.
fn is_majority(count: usize, of: usize) -> bool {
    2 * count > of
}

/// The largest i such that a majority of every non-empty voter set has stored index i; an
/// empty set constrains nothing, and no constraint at all means "anything" (`Index::MAX`).
fn naive_committed(sets: &[&BTreeSet<NodeId>], matched: &BTreeMap<NodeId, Index>) -> Index {
    let sets: Vec<&&BTreeSet<NodeId>> = sets.iter().filter(|s| !s.is_empty()).collect();
    if sets.is_empty() {
        return Index::MAX;
    }
    let stored = |id: &NodeId, i: Index| matched.get(id).copied().unwrap_or(0) >= i;
    (0..=MAX_VALUE)
        .filter(|i| {
            sets.iter()
                .all(|s| is_majority(s.iter().filter(|id| stored(id, *i)).count(), s.len()))
        })
        .max()
        .expect("index 0 is stored by everyone")
}

/// Won if a majority of every set granted; Lost if even with every undecided voter granting,
/// some set would lack a majority; Pending otherwise.
fn naive_vote(sets: &[&BTreeSet<NodeId>], votes: &BTreeMap<NodeId, bool>) -> VoteResult {
    let wins = |votes: &BTreeMap<NodeId, bool>| {
        sets.iter().all(|s| {
            s.is_empty()
                || is_majority(
                    s.iter().filter(|id| votes.get(id) == Some(&true)).count(),
                    s.len(),
                )
        })
    };
    if wins(votes) {
        return VoteResult::Won;
    }
    let mut optimistic = votes.clone();
    for s in sets {
        for id in s.iter() {
            optimistic.entry(*id).or_insert(true);
        }
    }
    if wins(&optimistic) {
        VoteResult::Pending
    } else {
        VoteResult::Lost
    }
}

/// The largest v such that a majority of every non-empty set acknowledged a value ≥ v;
/// `None` if there is no such v (a missing value acknowledges nothing).
fn naive_quorum_min(sets: &[&BTreeSet<NodeId>], values: &BTreeMap<NodeId, u64>) -> Option<u64> {
    let sets: Vec<&&BTreeSet<NodeId>> = sets.iter().filter(|s| !s.is_empty()).collect();
    if sets.is_empty() {
        return Some(u64::MAX);
    }
    let reached = |id: &NodeId, v: u64| values.get(id).is_some_and(|x| *x >= v);
    (0..=MAX_VALUE)
        .filter(|v| {
            sets.iter()
                .all(|s| is_majority(s.iter().filter(|id| reached(id, *v)).count(), s.len()))
        })
        .max()
}

// ----- strategies ----------------------------------------------------------------------------

fn node_set(max: usize) -> impl Strategy<Value = BTreeSet<NodeId>> {
    prop::collection::btree_set(1..=9u64, 0..=max)
}

fn membership() -> impl Strategy<Value = Membership> {
    (node_set(7), node_set(7), node_set(2)).prop_map(|(voters, outgoing, learners)| Membership {
        learners: learners
            .difference(&voters)
            .copied()
            .filter(|l| !outgoing.contains(l))
            .collect(),
        voters,
        voters_outgoing: outgoing,
    })
}

/// Values for some of the nodes 1..=9 (missing nodes are part of what is tested).
fn values() -> impl Strategy<Value = BTreeMap<NodeId, u64>> {
    prop::collection::btree_map(1..=9u64, 0..=MAX_VALUE, 0..=9)
}

fn votes() -> impl Strategy<Value = BTreeMap<NodeId, bool>> {
    prop::collection::btree_map(1..=9u64, any::<bool>(), 0..=9)
}

// ----- quorum properties ---------------------------------------------------------------------

#[test]
fn majority_is_more_than_half() {
    for n in 0..100 {
        let m = majority(n);
        assert!(
            is_majority(m, n) && (m == 0 || !is_majority(m - 1, n)),
            "n={n}"
        );
    }
}

proptest! {
    #[test]
    fn committed_index_matches_brute_force(voters in node_set(9), matched in values()) {
        prop_assert_eq!(committed_index(&voters, &matched), naive_committed(&[&voters], &matched));
    }

    #[test]
    fn joint_committed_index_needs_both_majorities(m in membership(), matched in values()) {
        prop_assert_eq!(
            joint_committed_index(&m, &matched),
            naive_committed(&[&m.voters, &m.voters_outgoing], &matched)
        );
    }

    #[test]
    fn vote_result_matches_brute_force(voters in node_set(9), votes in votes()) {
        prop_assert_eq!(vote_result(&voters, &votes), naive_vote(&[&voters], &votes));
    }

    #[test]
    fn joint_vote_result_needs_both_majorities(m in membership(), votes in votes()) {
        prop_assert_eq!(
            joint_vote_result(&m, &votes),
            naive_vote(&[&m.voters, &m.voters_outgoing], &votes)
        );
    }

    #[test]
    fn joint_quorum_min_matches_brute_force(m in membership(), values in values()) {
        prop_assert_eq!(
            joint_quorum_min(&m, &values),
            naive_quorum_min(&[&m.voters, &m.voters_outgoing], &values)
        );
    }

    /// `Membership::contains` answers what `all_nodes()` holds, for members and strangers.
    #[test]
    fn membership_contains_matches_all_nodes(m in membership(), id in 0u64..40) {
        prop_assert_eq!(m.contains(id), m.all_nodes().contains(&id));
    }

    /// Learners never count: giving them any value or vote changes nothing.
    #[test]
    fn learners_do_not_count(m in membership(), matched in values(), votes in votes()) {
        let mut matched2 = matched.clone();
        let mut votes2 = votes.clone();
        for l in &m.learners {
            matched2.insert(*l, MAX_VALUE);
            votes2.insert(*l, true);
        }
        prop_assert_eq!(joint_committed_index(&m, &matched), joint_committed_index(&m, &matched2));
        prop_assert_eq!(joint_vote_result(&m, &votes), joint_vote_result(&m, &votes2));
        prop_assert_eq!(joint_quorum_min(&m, &matched), joint_quorum_min(&m, &matched2));
    }
}

// ----- the log against a Vec of terms --------------------------------------------------------

/// The naive log: the snapshot point, then one term per index after it.
#[derive(Clone, Debug)]
struct Model {
    snapshot_index: Index,
    snapshot_term: Term,
    terms: Vec<Term>,
}

impl Model {
    fn last_index(&self) -> Index {
        self.snapshot_index + self.terms.len() as Index
    }

    fn last_term(&self) -> Term {
        self.terms.last().copied().unwrap_or(self.snapshot_term)
    }

    fn term(&self, i: Index) -> Option<Term> {
        if i == self.snapshot_index {
            Some(self.snapshot_term)
        } else if i < self.snapshot_index || i > self.last_index() {
            None
        } else {
            Some(self.terms[(i - self.snapshot_index - 1) as usize])
        }
    }

    /// Raft Figure 2, AppendEntries receiver rules 3 and 4, one entry at a time.
    fn append_from_leader(&mut self, entries: &[(Index, Term)]) {
        for &(i, t) in entries {
            if i <= self.snapshot_index {
                continue;
            }
            match self.term(i) {
                Some(existing) if existing == t => {}
                Some(_) => {
                    self.terms.truncate((i - self.snapshot_index - 1) as usize);
                    self.terms.push(t);
                }
                None => self.terms.push(t),
            }
        }
    }

    /// Every index from which on, up to `index` (excluded), all entries have `term`; the
    /// smallest one after the snapshot point.
    fn first_index_of_term(&self, index: Index, term: Term) -> Index {
        (self.snapshot_index + 1..=index)
            .find(|j| (*j..index).all(|x| self.term(x) == Some(term)))
            .unwrap_or(index)
    }
}

/// Terms that never decrease, starting at 1 or more: what a valid log holds.
fn terms(max_len: usize) -> impl Strategy<Value = Vec<Term>> {
    prop::collection::vec(0..=2u64, 0..=max_len).prop_map(|steps| {
        let mut t = 1;
        steps
            .into_iter()
            .map(|s| {
                t += s;
                t
            })
            .collect()
    })
}

/// A leader's log, a follower's log sharing a prefix of it and then diverging, a snapshot
/// point inside the shared prefix, and the leader's AppendEntries: `prev` inside the shared
/// prefix (so the log-matching check passes) and up to 5 of the leader's entries after it.
#[derive(Clone, Debug)]
struct Case {
    leader: Vec<Term>,
    follower: Vec<Term>,
    snapshot_index: Index,
    prev: Index,
    count: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        terms(12),
        0..=12usize,
        prop::collection::vec(0..=3u64, 0..=8),
    )
        .prop_flat_map(|(leader, shared, bumps)| {
            let shared = shared.min(leader.len());
            // The follower's own suffix: terms at least the last shared one, rising by bumps.
            let mut follower = leader[..shared].to_vec();
            let mut t = follower.last().copied().unwrap_or(1);
            for b in bumps {
                t += b;
                follower.push(t);
            }
            (
                Just(leader),
                Just(follower),
                0..=shared as Index,
                0..=shared as Index,
                0..=5usize,
            )
        })
        .prop_map(|(leader, follower, a, b, count)| {
            let (snapshot_index, prev) = (a.min(b), a.max(b));
            let count = count.min(leader.len() - prev as usize);
            Case {
                leader,
                follower,
                snapshot_index,
                prev,
                count,
            }
        })
}

fn build(terms: &[Term], snapshot_index: Index) -> (RaftLog, Model) {
    let snapshot_term = if snapshot_index == 0 {
        0
    } else {
        terms[snapshot_index as usize - 1]
    };
    let after = &terms[snapshot_index as usize..];
    let log = RaftLog::restored(
        snapshot_index,
        snapshot_term,
        noops(snapshot_index + 1, after),
    );
    let model = Model {
        snapshot_index,
        snapshot_term,
        terms: after.to_vec(),
    };
    (log, model)
}

fn assert_same(log: &RaftLog, model: &Model) -> Result<(), TestCaseError> {
    let got: Vec<Term> = log.entries().iter().map(|e| e.term).collect();
    prop_assert_eq!(&got, &model.terms);
    prop_assert_eq!(log.last_index(), model.last_index());
    prop_assert_eq!(log.last_term(), model.last_term());
    prop_assert_eq!(log.snapshot_index(), model.snapshot_index);
    for i in 0..=model.last_index() + 2 {
        prop_assert_eq!(log.term(i), model.term(i), "term({})", i);
    }
    log.check_invariants();
    Ok(())
}

proptest! {
    #[test]
    fn raft_log_append_from_leader_matches_the_model(c in case()) {
        let (mut log, mut model) = build(&c.follower, c.snapshot_index);
        assert_same(&log, &model)?;
        let first = c.prev + 1;
        let sent = noops(first, &c.leader[c.prev as usize..c.prev as usize + c.count]);
        let pairs: Vec<(Index, Term)> = sent.iter().map(|e| (e.index, e.term)).collect();

        let matched = log.append_from_leader(c.prev, &sent);
        model.append_from_leader(&pairs);

        assert_same(&log, &model)?;
        prop_assert_eq!(matched, c.prev + c.count as Index, "match index");
        // Log matching: after the append, the follower agrees with the leader up to there.
        for i in c.snapshot_index + 1..=matched {
            prop_assert_eq!(log.term(i), Some(c.leader[i as usize - 1]), "index {}", i);
        }
    }

    #[test]
    fn raft_log_queries_match_the_model(
        t in terms(12),
        snap in 0..=12u64,
        index in 0..=14u64,
        term in 0..=30u64,
    ) {
        let snap = snap.min(t.len() as Index);
        let (log, model) = build(&t, snap);
        // §5.4.1: up to date means a later last term, or the same last term and no shorter.
        let naive_up_to_date = term > model.last_term()
            || (term == model.last_term() && index >= model.last_index());
        prop_assert_eq!(log.is_up_to_date(index, term), naive_up_to_date);
        if let Some(at) = model.term(index) {
            prop_assert_eq!(
                log.first_index_of_term(index, at),
                model.first_index_of_term(index, at)
            );
        }
        prop_assert_eq!(
            log.first_index_of_term(index, term),
            model.first_index_of_term(index, term)
        );
        let naive_last_of_term = (snap + 1..=model.last_index())
            .filter(|i| model.term(*i) == Some(term))
            .max();
        prop_assert_eq!(log.last_index_of_term(term), naive_last_of_term);
    }
}
