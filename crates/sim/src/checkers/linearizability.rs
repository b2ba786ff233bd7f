//! Linearizability of fenced-key and election operations — Herlihy & Wing, "Linearizability:
//! A Correctness Condition for Concurrent Objects" (1990), with the log order as the
//! linearization (tenure sends reads through the log too, so every operation has a position).
//!
//! Two conditions:
//! - sequential specification: replaying the canonical log through the simple model in
//!   `model.rs` must give exactly the responses and leader changes the nodes produced, and the
//!   response a client received must be the one at its entry's position;
//! - real-time order: if operation A's response reached its client before operation B was
//!   invoked, A's log index is below B's.

use std::collections::BTreeMap;

use tenure_core::sm::Response;
use tenure_core::types::Index;

use super::{Checker, View};
use crate::model::Model;
use crate::observe::{Observation, OpId};
use crate::time::{fmt_time, SimTimeUs};

/// The model, the canonical responses, and the completions in time order.
#[derive(Default)]
pub struct Linearizability {
    model: Model,
    /// Canonical response per index.
    responses: BTreeMap<Index, Response>,
    /// Client responses whose index the canonical sequence has not reached yet.
    unverified: BTreeMap<Index, (OpId, Response)>,
    invoked: BTreeMap<OpId, SimTimeUs>,
    /// Completions in time order: (time, index, highest index completed so far).
    completions: Vec<(SimTimeUs, Index, Index)>,
}

impl Linearizability {
    /// Highest index among operations completed strictly before `time_us`.
    fn completed_before(&self, time_us: SimTimeUs) -> Option<(Index, SimTimeUs)> {
        let n = self.completions.partition_point(|(t, _, _)| *t < time_us);
        let (t, _, max) = *self.completions.get(n.checked_sub(1)?)?;
        Some((max, t))
    }
}

impl Checker for Linearizability {
    fn name(&self) -> &'static str {
        "linearizability"
    }

    fn observe(&mut self, observation: &Observation, view: &View<'_>) -> Option<String> {
        match observation {
            Observation::Canonical(entry) => {
                let (expected, changes) =
                    self.model
                        .apply_entry(entry.index, entry.request, &entry.command);
                if expected != entry.response {
                    return Some(format!(
                        "index {}: {:?} answered {:?}; the sequential model says {:?}",
                        entry.index, entry.command, entry.response, expected
                    ));
                }
                if changes != entry.leader_changes {
                    return Some(format!(
                        "index {}: {:?} changed leaders {:?}; the sequential model says {:?}",
                        entry.index, entry.command, entry.leader_changes, changes
                    ));
                }
                if let Some((op, got)) = self.unverified.remove(&entry.index) {
                    if got != entry.response {
                        return Some(format!(
                            "op {op} received {got:?} for index {} whose entry answered {:?}",
                            entry.index, entry.response
                        ));
                    }
                }
                self.responses.insert(entry.index, entry.response.clone());
                None
            }
            Observation::OpInvoked { op, .. } => {
                self.invoked.insert(*op, view.now_us);
                None
            }
            Observation::OpCompleted {
                op,
                client,
                position,
                response,
            } => {
                let invoked_us = self.invoked.remove(op)?;
                let (Some(index), Some(response)) = (position, response) else {
                    return None;
                };
                if let Some((before, at)) = self.completed_before(invoked_us) {
                    if before >= *index {
                        return Some(format!(
                            "op {op} of client {client} was invoked at {} and took index {index}, but an operation completed at {} had already taken index {before}",
                            fmt_time(invoked_us),
                            fmt_time(at)
                        ));
                    }
                }
                let max = self.completions.last().map_or(*index, |c| c.2.max(*index));
                self.completions.push((view.now_us, *index, max));
                match self.responses.get(index) {
                    Some(canonical) if canonical != response => Some(format!(
                        "op {op} of client {client} received {response:?} for index {index} whose entry answered {canonical:?}"
                    )),
                    Some(_) => None,
                    None => {
                        self.unverified.insert(*index, (*op, response.clone()));
                        None
                    }
                }
            }
            _ => None,
        }
    }
}
