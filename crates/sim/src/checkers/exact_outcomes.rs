//! Exact outcomes — DESIGN rule 7, and the Raft dissertation §6.3 ("clients must be told the
//! truth about their commands"): an answer that says a command definitely failed (it did not
//! and will not take effect) must never be given for a command that did take effect.
//!
//! The drivers' answers come from the driver core the server runs too, so this judges what
//! real clients are told. Each appended proposal is known by its log position `(index,
//! term)`; the canonical applied sequence says which positions were committed. A definite
//! failure for a position that is (or later becomes) committed is a violation, whichever
//! came first. Indeterminate answers promise nothing and are never a violation here.
//!
//! The same holds per request, across attempts (Raft dissertation §6.3): once an attempt of a
//! request id took effect (its first application changed the state), no later attempt of the
//! same id may be answered with a definite failure (`SmError::is_definite`) — for instance a
//! retry that reaches the state machine after the request's session ended, whose remembered
//! results went with it.

use std::collections::{BTreeMap, BTreeSet};

use tenure_core::sm::{Command, RequestId, Response};
use tenure_core::types::{Index, NodeId, Term};

use super::{Checker, View};
use crate::observe::{ClientId, Observation};

/// One attempt, as a node knows it.
type Attempt = (NodeId, ClientId, u64);

/// Positions of appended proposals, the definite failures given, and what was committed.
#[derive(Default)]
pub struct ExactOutcomes {
    /// Where each attempt's entry went.
    proposed: BTreeMap<Attempt, (Index, Term)>,
    /// Positions answered "definitely failed", with the answer.
    failed: BTreeMap<(Index, Term), (Attempt, &'static str)>,
    /// Committed command positions.
    committed: BTreeSet<(Index, Term)>,
    /// Requests whose first application took effect, with its index.
    took_effect: BTreeMap<RequestId, Index>,
}

impl Checker for ExactOutcomes {
    fn name(&self) -> &'static str {
        "exact-outcomes"
    }

    fn observe(&mut self, observation: &Observation, _view: &View<'_>) -> Option<String> {
        match observation {
            Observation::Proposed {
                node,
                client,
                req_id,
                index,
                term,
            } => {
                self.proposed
                    .insert((*node, *client, *req_id), (*index, *term));
                None
            }
            Observation::Answered {
                node,
                client,
                req_id,
                definite_failure,
                what,
            } => {
                let attempt = (*node, *client, *req_id);
                let position = self.proposed.remove(&attempt)?;
                if !*definite_failure {
                    return None;
                }
                if self.committed.contains(&position) {
                    return Some(violation(attempt, position, what));
                }
                self.failed.insert(position, (attempt, *what));
                None
            }
            Observation::Canonical(entry) => {
                let position = (entry.index, entry.term);
                self.committed.insert(position);
                let read = matches!(
                    entry.command.unsealed(),
                    Command::Get { .. } | Command::Leader { .. }
                );
                if let (Some(id), None, false) = (entry.request, entry.replay_of, read) {
                    match &entry.response {
                        Response::Rejected(e) if e.is_definite() => {
                            if let Some(first) = self.took_effect.get(&id) {
                                return Some(format!(
                                    "request {id:?} took effect at index {first}, but its attempt \
                                     applied at index {} was answered {e:?}, a definite failure",
                                    entry.index
                                ));
                            }
                        }
                        Response::Rejected(_) => {}
                        _ => {
                            self.took_effect.entry(id).or_insert(entry.index);
                        }
                    }
                }
                let (attempt, what) = self.failed.remove(&position)?;
                Some(violation(attempt, position, what))
            }
            _ => None,
        }
    }
}

fn violation(attempt: Attempt, (index, term): (Index, Term), what: &str) -> String {
    let (node, client, req_id) = attempt;
    format!(
        "node {node} answered client {client}'s attempt {req_id} {what} (a definite failure), \
         but its entry at index {index}, term {term} was committed and applied"
    )
}
