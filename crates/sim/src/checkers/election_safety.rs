//! Election Safety — Raft §5.2 and Figure 3: "at most one leader can be elected in a given
//! term"; and DESIGN rule 1, which makes it checkable one step earlier: "a node grants at most
//! one vote per term" (Raft Figure 2, RequestVote: grant only if votedFor is null or the same
//! candidate), across restarts, since "term and vote are durable before the vote is sent".
//!
//! Keyed by term over the whole run: the first node seen leading a term owns it; any other
//! node seen leading the same term, at any later time, is a violation. Likewise the first
//! candidate a node is seen granting its vote to in a term is the only one it may grant it to
//! in that term. Node ids are never reused, so a restarted or replaced node cannot be confused
//! with another.

use std::collections::BTreeMap;

use tenure_core::node::Role;
use tenure_core::types::{NodeId, Term};

use super::{Checker, View};
use crate::observe::Observation;
use crate::time::{fmt_time, SimTimeUs};

/// The leader of every term seen so far, and every vote granted.
#[derive(Default)]
pub struct ElectionSafety {
    leaders: BTreeMap<Term, (NodeId, SimTimeUs)>,
    votes: BTreeMap<(NodeId, Term), (NodeId, SimTimeUs)>,
}

impl Checker for ElectionSafety {
    fn name(&self) -> &'static str {
        "election-safety"
    }

    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
        match observation {
            Observation::Role { node, role: Role::Leader, term } => match self.leaders.get(term) {
                Some((first, since)) if first != node => Some(format!(
                    "two leaders in term {term}: node {first} (since {}) and node {node}",
                    fmt_time(*since)
                )),
                Some(_) => None,
                None => {
                    self.leaders.insert(*term, (*node, view.now_us));
                    None
                }
            },
            Observation::VoteGranted { voter, candidate, term } => match self.votes.get(&(*voter, *term)) {
                Some((first, at)) if first != candidate => Some(format!(
                    "node {voter} granted its vote in term {term} twice: to node {first} at {} and to node {candidate}",
                    fmt_time(*at)
                )),
                Some(_) => None,
                None => {
                    self.votes.insert((*voter, *term), (*candidate, view.now_us));
                    None
                }
            },
            _ => None,
        }
    }
}
