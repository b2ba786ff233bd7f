//! Where a cluster starts: fresh (every node a follower in term 0), or established, with
//! node 1 leading term 41 after 40 earlier terms, so that a person can begin from a cluster
//! that has been running for a while instead of from its first election.
//!
//! The established start is reached by the real protocol, not by writing a state: a first
//! election, then leadership handed over from node to node (Raft's leadership transfer, the
//! leader's `TimeoutNow`), one term at a time, the last hand-over going to node 1. Only the
//! seed chooses anything, so the same `n`, seed and start give the same cluster.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use tenure_core::node::Role;
use tenure_core::types::{NodeId, Term};

use super::{Engine, SETTLE_ROUNDS_MAX};
use crate::bully::list;
use crate::step::StepError;

/// The term the established start reaches.
pub const ESTABLISHED_TERM: Term = 41;
/// The node that leads it.
pub const ESTABLISHED_LEADER: NodeId = 1;
/// Most ticks the established start lets pass for its first election: with every node
/// timing out within 2T (T = 15 ticks) and pre-votes refused for T after the start, a
/// leader is elected long before this.
const FIRST_ELECTION_TICKS_MAX: u64 = 200;

/// Where a cluster starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// Every node a follower in term 0, with empty logs.
    #[default]
    Fresh,
    /// Node 1 leads term 41, and every node follows it.
    Term41,
}

impl Start {
    /// Every start, for the page's list.
    pub const ALL: [Start; 2] = [Start::Fresh, Start::Term41];

    /// What it is, in words.
    pub fn title(self) -> &'static str {
        match self {
            Start::Fresh => "fresh: every node a follower in term 0",
            Start::Term41 => "established: term 41, node 1 leads",
        }
    }
}

impl fmt::Display for Start {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Start::Fresh => "fresh",
            Start::Term41 => "term41",
        })
    }
}

impl FromStr for Start {
    type Err = StepError;

    fn from_str(text: &str) -> Result<Start, StepError> {
        match text.trim() {
            "" | "fresh" => Ok(Start::Fresh),
            "term41" => Ok(Start::Term41),
            other => Err(StepError::UnknownStart(other.to_string())),
        }
    }
}

impl Engine {
    /// Brings a fresh cluster to term 41 with node 1 leading and every node following it,
    /// its log committed everywhere; then forgets the log of how it got there (the ballot
    /// log and the terms table start at term 41, and no step is recorded).
    pub(super) fn establish_term_41(&mut self) {
        self.start = Start::Term41;
        // The first election, as `wait` holds one.
        let mut ticks = 0;
        while self.leader().is_none() {
            assert!(
                ticks < FIRST_ELECTION_TICKS_MAX,
                "seed {}: no leader after {ticks} ticks",
                self.seed
            );
            self.tick_all();
            self.deliver_all();
            ticks += 1;
        }
        self.quiet();
        let first = self.leader().expect("elected above");
        let first_term = self.slots[&first].seen.term;
        // Hand leadership over, one term at a time, ending with node 1 in term 41.
        let mut current = first;
        for term in first_term + 1..=ESTABLISHED_TERM {
            let mut to = current % self.n + 1;
            if term == ESTABLISHED_TERM {
                to = ESTABLISHED_LEADER;
            } else if term + 1 == ESTABLISHED_TERM && to == ESTABLISHED_LEADER {
                // The last hand-over must go from another node to node 1.
                to = to % self.n + 1;
            }
            let node = self
                .slots
                .get_mut(&current)
                .and_then(|s| s.node.as_mut())
                .expect("the leader runs");
            node.transfer_leadership(to)
                .expect("a leader can hand over to a voter");
            self.drive(current);
            self.quiet();
            let s = &self.slots[&to].seen;
            assert!(
                s.role == Role::Leader && s.term == term,
                "seed {}: node {to} should lead term {term} after the hand-over from node {current}, \
                 but is {:?} in term {}",
                self.seed,
                s.role,
                s.term
            );
            current = to;
        }
        // Heartbeats until every node has the whole log committed.
        let commit = self.slots[&ESTABLISHED_LEADER].seen.last_index;
        let mut ticks = 0;
        while self.slots.values().any(|s| s.seen.commit < commit) {
            assert!(
                ticks < FIRST_ELECTION_TICKS_MAX,
                "seed {}: the log of term 41 is not committed everywhere after {ticks} ticks",
                self.seed
            );
            self.tick_all();
            self.deliver_all();
            ticks += 1;
        }
        self.quiet();
        // The story so far in two lines; the terms table keeps term 41 alone.
        self.terms.retain(|t, _| *t >= ESTABLISHED_TERM);
        self.next_msg = 1;
        self.log.clear();
        let voters: Vec<NodeId> = self.terms[&ESTABLISHED_TERM]
            .candidates
            .get(&ESTABLISHED_LEADER)
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default();
        let n = self.n;
        let q = self.quorum();
        self.say(format!(
            "{n} nodes start established: after a first election (node {first} won term {first_term}) leadership was handed over from node to node, one term at a time"
        ));
        let heard = self.slots[&2].heard.tick;
        self.say(format!(
            "node {ESTABLISHED_LEADER} is LEADER of term {ESTABLISHED_TERM} with votes from {} ({q} needed); every node follows it, has its {commit} log entries committed, and last heard from it at tick {heard}",
            list(&voters)
        ));
        self.bully_round();
    }

    /// The running leader of the highest term, if any.
    fn leader(&self) -> Option<NodeId> {
        self.slots
            .iter()
            .filter(|(id, s)| self.running(**id) && s.seen.role == Role::Leader)
            .max_by_key(|(_, s)| s.seen.term)
            .map(|(id, _)| *id)
    }

    /// Delivers everything until the network is quiet, as `settle` does.
    fn quiet(&mut self) {
        for _ in 0..SETTLE_ROUNDS_MAX {
            if !self.deliver_all() {
                break;
            }
        }
        assert!(
            self.net.is_empty(),
            "seed {}: the network did not quiet down",
            self.seed
        );
    }
}
